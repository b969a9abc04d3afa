/* SPDX-License-Identifier: Apache-2.0 */
/* escape.c - text from plugins, graph files and models reaches the terminal with its control
 * characters escaped: C0 controls and DEL, and the C1 controls as UTF-8 (U+0080..U+009F),
 * become \xNN, so a plugin's name, message or op cannot move the cursor, recolour the
 * screen or retitle the window. Other bytes (UTF-8 included) pass unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Bytes of s at p to escape: 0, 1 (a C0 control or DEL) or 2 (a C1 control in UTF-8). */
static size_t control_len(const unsigned char *p) {
  if (*p < 0x20 || *p == 0x7f) return 1;
  if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return 2;
  return 0;
}

char *cli_escape(const char *s) {
  if (!s) s = "";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t k = control_len(p);
    n += k ? 4 * k : 1;
    p += k ? k : 1;
  }
  char *out = malloc(n + 1), *o = out;
  if (!out) return NULL;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t k = control_len(p);
    if (!k) {
      *o++ = (char)*p++;
      continue;
    }
    for (size_t i = 0; i < k; i++, p++) o += sprintf(o, "\\x%02X", *p);
  }
  *o = '\0';
  return out;
}

void cli_fputs_escaped(const char *s, FILE *f) {
  char *e = cli_escape(s);
  if (e) {
    fputs(e, f);
    free(e);
    return;
  }
  /* Out of memory: escape byte by byte. */
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p < 0x20 || *p == 0x7f || (*p >= 0x80 && *p <= 0x9f && p > (const unsigned char *)s &&
                                     p[-1] == 0xc2))
      fprintf(f, "\\x%02X", *p);
    else
      fputc(*p, f);
  }
}
