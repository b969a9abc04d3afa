/* SPDX-License-Identifier: Apache-2.0 */
/* json.h - a small streaming JSON writer for the --json outputs of the floe command. */
#ifndef FLOE_TOOLS_JSON_H
#define FLOE_TOOLS_JSON_H

#include <stdint.h>
#include <stdio.h>

typedef struct JsonWriter {
  FILE *out;
  int depth;
  int need_comma[32];
} JsonWriter;

void json_init(JsonWriter *w, FILE *out);
void json_begin_object(JsonWriter *w);
void json_end_object(JsonWriter *w);
void json_begin_array(JsonWriter *w);
void json_end_array(JsonWriter *w);
/* Key of the next member of the current object. */
void json_key(JsonWriter *w, const char *key);
void json_string(JsonWriter *w, const char *s);
void json_int(JsonWriter *w, int64_t v);
void json_uint(JsonWriter *w, uint64_t v);
void json_double(JsonWriter *w, double v);
void json_bool(JsonWriter *w, int v);
void json_null(JsonWriter *w);
/* The shortest decimal (%.Ng, N from 1 up) that strtod (strtof) reads back as v; written into
 * the caller's buf, which is returned. NaN and infinities print as printf's "nan", "inf". */
const char *json_format_double(char buf[32], double v);
const char *json_format_float(char buf[32], float v);
/* Ends the document with a newline. */
void json_finish(JsonWriter *w);

#endif
