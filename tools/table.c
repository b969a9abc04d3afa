/* SPDX-License-Identifier: Apache-2.0 */
/* table.c - see table.h. */
#include "table.h"

#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct Table {
  int ncols, nrows, cap, lost;
  char align[16];
  char **cells; /* nrows * ncols */
};

Table *table_new(int ncols, const char *align) {
  if (ncols < 1 || ncols > 15 || strlen(align) != (size_t)ncols) return NULL;
  Table *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->ncols = ncols;
  memcpy(t->align, align, (size_t)ncols);
  return t;
}

void table_row(Table *t, ...) {
  if (!t) return;
  if (t->nrows == t->cap) {
    int cap = t->cap ? 2 * t->cap : 16;
    char **cells = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *cells);
    if (!cells) {
      t->lost = 1;
      return;
    }
    t->cells = cells, t->cap = cap;
  }
  va_list ap;
  va_start(ap, t);
  char **row = t->cells + (size_t)t->nrows * (size_t)t->ncols;
  int ok = 1;
  for (int j = 0; j < t->ncols; j++) {
    const char *s = va_arg(ap, const char *);
    row[j] = ok ? cli_escape(s) : NULL; /* cells hold plugins' and graphs' names */
    if (!row[j]) ok = 0;
  }
  va_end(ap);
  if (ok)
    t->nrows++;
  else {
    for (int j = 0; j < t->ncols; j++) free(row[j]);
    t->lost = 1;
  }
}

int table_print(const Table *t, FILE *out) {
  if (!t) return -1;
  size_t width[16] = {0};
  for (int i = 0; i < t->nrows; i++)
    for (int j = 0; j < t->ncols; j++) {
      size_t n = strlen(t->cells[(size_t)i * (size_t)t->ncols + (size_t)j]);
      if (n > width[j]) width[j] = n;
    }
  for (int i = 0; i < t->nrows; i++) {
    const char *const *row = (const char *const *)t->cells + (size_t)i * (size_t)t->ncols;
    for (int j = 0; j < t->ncols; j++) {
      int last = j == t->ncols - 1;
      if (j) fputs("  ", out);
      if (t->align[j] == 'r')
        fprintf(out, "%*s", (int)width[j], row[j]);
      else if (last)
        fputs(row[j], out);
      else
        fprintf(out, "%-*s", (int)width[j], row[j]);
    }
    fputc('\n', out);
  }
  return t->lost ? -1 : 0;
}

void table_free(Table *t) {
  if (!t) return;
  for (size_t i = 0; i < (size_t)t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  free(t);
}
