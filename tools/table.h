/* SPDX-License-Identifier: Apache-2.0 */
/* table.h - text tables for the floe command: column widths come from the content. */
#ifndef FLOE_TOOLS_TABLE_H
#define FLOE_TOOLS_TABLE_H

#include <stdio.h>

typedef struct Table Table;

/* A table with ncols columns; align is a string of ncols letters, 'l' (left) or 'r' (right).
 * The header row is given by table_row like any other. NULL when out of memory. */
Table *table_new(int ncols, const char *align);
/* Appends a row of ncols printf-formatted cells (each argument one cell, copied). On out of
 * memory the table remembers it and table_print reports it. */
void table_row(Table *t, ...);
/* Prints the rows to out, columns two spaces apart, the last left-aligned column unpadded;
 * returns 0, or -1 if a row was lost to out of memory. */
int table_print(const Table *t, FILE *out);
void table_free(Table *t);

#endif
