/* SPDX-License-Identifier: Apache-2.0 */
/* json.c - see json.h. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(JsonWriter *w, FILE *out) {
  w->out = out;
  w->depth = 0;
  w->need_comma[0] = 0;
}

/* Per depth: 0 nothing written yet, 1 a value written (next needs a comma), 2 a key
 * written (its value needs none). */
static void before_value(JsonWriter *w) {
  int *state = &w->need_comma[w->depth];
  if (*state == 1) fputc(',', w->out);
  *state = 1;
}

static void open(JsonWriter *w, char c) {
  before_value(w);
  fputc(c, w->out);
  if (w->depth < 31) w->depth++;
  w->need_comma[w->depth] = 0;
}

static void close_(JsonWriter *w, char c) {
  fputc(c, w->out);
  if (w->depth > 0) w->depth--;
}

void json_begin_object(JsonWriter *w) { open(w, '{'); }
void json_end_object(JsonWriter *w) { close_(w, '}'); }
void json_begin_array(JsonWriter *w) { open(w, '['); }
void json_end_array(JsonWriter *w) { close_(w, ']'); }

static void raw_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\r': fputs("\\r", out); break;
      case '\t': fputs("\\t", out); break;
      default:
        /* Control characters escaped, DEL and the C1 ones (UTF-8 C2 80..9F) too: the
         * same string to a JSON reader, and harmless on a terminal. */
        if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\u%04x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) fprintf(out, "\\u%04x", *++p);
        else fputc(*p, out);
    }
  }
  fputc('"', out);
}

void json_key(JsonWriter *w, const char *key) {
  if (w->need_comma[w->depth] == 1) fputc(',', w->out);
  raw_string(w->out, key);
  fputc(':', w->out);
  w->need_comma[w->depth] = 2; /* the value that follows writes no comma */
}

void json_string(JsonWriter *w, const char *s) {
  before_value(w);
  raw_string(w->out, s);
}

void json_int(JsonWriter *w, int64_t v) {
  before_value(w);
  fprintf(w->out, "%lld", (long long)v);
}

void json_uint(JsonWriter *w, uint64_t v) {
  before_value(w);
  fprintf(w->out, "%llu", (unsigned long long)v);
}

void json_double(JsonWriter *w, double v) {
  before_value(w);
  char buf[40];
  if (isfinite(v)) {
    /* A whole number keeps a fraction ("87.0", not "87"): a reader that types numbers by
     * their text (Python's json) sees a float every time, whatever the value. */
    json_format_double(buf, v);
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
    fputs(buf, w->out);
  } else {
    fputs("null", w->out); /* JSON has no NaN or Infinity */
  }
}

void json_bool(JsonWriter *w, int v) {
  before_value(w);
  fputs(v ? "true" : "false", w->out);
}

void json_null(JsonWriter *w) {
  before_value(w);
  fputs("null", w->out);
}

void json_finish(JsonWriter *w) {
  fputc('\n', w->out);
  fflush(w->out);
}

const char *json_format_double(char buf[32], double v) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, 32, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return buf;
  }
  return buf; /* %.17g always round-trips; not reached */
}

const char *json_format_float(char buf[32], float v) {
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, 32, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v) return buf;
  }
  return buf;
}
