/* SPDX-License-Identifier: Apache-2.0 */
/* train_report.c - see train_report.h. */
#include "train_report.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "measure.h"

static void format_eta(double secs, char *buf, size_t len) {
  if (!(secs >= 0) || secs > 1e7) snprintf(buf, len, "--");
  else if (secs >= 60) snprintf(buf, len, "%dm%02ds", (int)secs / 60, (int)secs % 60);
  else snprintf(buf, len, "%ds", (int)(secs + 0.5));
}

void train_progress(int epoch, int epochs, int64_t done, int64_t total, double rate,
                    const char *unit, double loss) {
  double frac = total ? (double)done / (double)total : 1.0;
  char bar[64], eta[32], head[48], tail[160];
  format_eta(rate > 0 ? (double)(total - done) / rate : -1, eta, sizeof eta);
  snprintf(head, sizeof head, "epoch %d/%d ", epoch, epochs);
  snprintf(tail, sizeof tail, " %3d%%  %s %.0f  loss %.4f  eta %s", (int)(frac * 100), unit,
           rate, loss, eta);
  /* room kept for "  testing..." written after the last one of an epoch */
  int width = cli_term_columns() - 1 - (int)strlen(head) - (int)strlen(tail) - 2 - 12;
  if (width > (int)sizeof bar - 1) width = (int)sizeof bar - 1;
  char line[300];
  if (width >= 8) {
    int fill = (int)(frac * width);
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    snprintf(line, sizeof line, "%s[%s]%s", head, bar, tail);
  } else {
    snprintf(line, sizeof line, "%s%s", head, tail + 1);
  }
  int room = cli_term_columns() - 1 - 12; /* a narrow terminal: cut the line short */
  if (room < 20) room = 20;
  if ((int)strlen(line) > room) {
    line[room] = 0;
    char *gap = NULL; /* end at a whole field: at the last two spaces */
    for (char *p = strstr(line, "  "); p; p = strstr(p + 1, "  ")) gap = p;
    if (gap) *gap = 0;
  }
  printf("\r\033[K%s", line);
  fflush(stdout);
}

int train_profile_merge(FloeOpProfile **acc, int *n, const FloeOpProfile *rows, int nrows) {
  for (int i = 0; i < nrows; i++) {
    int j = 0;
    while (j < *n && (strcmp((*acc)[j].op, rows[i].op) != 0 ||
                      strcmp((*acc)[j].device, rows[i].device) != 0))
      j++;
    if (j == *n) {
      FloeOpProfile *p = realloc(*acc, (size_t)(*n + 1) * sizeof *p);
      if (!p) return -1;
      *acc = p;
      (*acc)[(*n)++] = (FloeOpProfile){.op = rows[i].op, .device = rows[i].device};
    }
    FloeOpProfile *d = &(*acc)[j];
    d->calls += rows[i].calls;
    d->total_ns += rows[i].total_ns;
    d->output_bytes += rows[i].output_bytes;
    d->device_ns += rows[i].device_ns;
    if (rows[i].max_ns > d->max_ns) d->max_ns = rows[i].max_ns;
  }
  return 0;
}

static int profile_cmp(const void *a, const void *b) {
  const FloeOpProfile *x = a, *y = b;
  return x->total_ns != y->total_ns ? (x->total_ns > y->total_ns ? -1 : 1) : strcmp(x->op, y->op);
}

void train_profile_sort(FloeOpProfile *rows, int n) {
  if (n > 1) qsort(rows, (size_t)n, sizeof *rows, profile_cmp);
}

void train_profile_print(FILE *f, const FloeOpProfile *rows, int n, int64_t steps, double secs) {
  measure_profile_print(f, rows, n, steps, secs, 1);
}
