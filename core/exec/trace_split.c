/* SPDX-License-Identifier: Apache-2.0 */
/* trace_split.c - the step split (floe_session_step_split): one traced step's wall time cut
 * at the end L of the last compute kernel that started before its last _Send (of any, with
 * no send) into compute (busy before L), wait_params (idle before L) and send_grads (after
 * L). Lengths are of unions of intervals, so threads running at once count once; the three
 * parts add up to the wall time exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

typedef struct Span {
  int64_t a, b;
} Span;

static int by_start(const void *x, const void *y) {
  const Span *p = x, *q = y;
  return p->a < q->a ? -1 : p->a > q->a;
}

/* Adds [a, b] clipped to [lo, hi] to s (n spans so far); empty ones are dropped. */
static void span_add(Span *s, size_t *n, int64_t a, int64_t b, int64_t lo, int64_t hi) {
  if (a < lo) a = lo;
  if (b > hi) b = hi;
  if (b > a) s[(*n)++] = (Span){a, b};
}

/* The length of the union of s[0..n) (sorted here). */
static int64_t union_length(Span *s, size_t n) {
  qsort(s, n, sizeof *s, by_start);
  int64_t total = 0, a = 0, b = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || s[i].a > b) {
      total += b - a;
      a = s[i].a, b = s[i].b;
    } else if (s[i].b > b) {
      b = s[i].b;
    }
  }
  return n ? total + (b - a) : 0;
}

static bool is_compute(const FloeTraceEvent *e) {
  return e->kind == FLOE__TRACE_KERNEL && !e->async && !e->transfer;
}

static bool is_send(const FloeTraceEvent *e) {
  return e->kind == FLOE__TRACE_KERNEL && !e->async && e->transfer && strcmp(e->op, "_Recv");
}

floe_code floe__step_split_add(const FloeTraceEvent *const *v, size_t n, FloeStepSplit *acc,
                               FloeStatus *st) {
  const FloeTraceEvent *step = NULL;
  for (size_t i = 0; i < n; i++)
    if (v[i]->kind == FLOE__TRACE_STEP) step = v[i];
  if (!step) return FLOE_OK; /* a run still going, or one that never reached the executors */
  int64_t t0 = step->t0, t1 = step->t1 > step->t0 ? step->t1 : step->t0, last = t0, rec = 0;
  int64_t last_send = INT64_MAX; /* the start of the last send: the results leaving */
  for (size_t i = 0; i < n; i++)
    if (is_send(v[i]) && (last_send == INT64_MAX || v[i]->t0 > last_send)) last_send = v[i]->t0;
  for (size_t i = 0; i < n; i++) {
    const FloeTraceEvent *e = v[i];
    if (e->kind == FLOE__TRACE_KERNEL) rec += e->record_ns;
    /* a kernel after the sends (the local step's update after the token) is not the compute
     * the sends wait for */
    if (is_compute(e) && e->t0 < last_send && e->t1 > last) last = e->t1 < t1 ? e->t1 : t1;
  }
  Span *s = floe__malloc((n + 1) * sizeof *s);
  if (!s) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory splitting a traced step");
  size_t k = 0; /* the compute kernels before L, clipped to [t0, L] */
  for (size_t i = 0; i < n; i++)
    if (is_compute(v[i])) span_add(s, &k, v[i]->t0, v[i]->t1, t0, last);
  int64_t kernel = union_length(s, k);
  k = 0; /* busy: kernels other than the asynchronous ones (a _Recv waiting), stretches */
  for (size_t i = 0; i < n; i++) {
    const FloeTraceEvent *e = v[i];
    if ((e->kind == FLOE__TRACE_KERNEL && !e->async) || e->kind == FLOE__TRACE_ACTIVE)
      span_add(s, &k, e->t0, e->t1, t0, last);
  }
  if (step->x1 > step->x0) span_add(s, &k, t0, step->x0, t0, last); /* the caller's prologue */
  int64_t busy = union_length(s, k);
  floe__free(s);
  acc->steps++;
  acc->wall_ns += t1 - t0;
  acc->compute_ns += busy;
  acc->wait_params_ns += (last - t0) - busy;
  acc->send_grads_ns += t1 - last;
  acc->kernel_ns += kernel;
  acc->tracing_ns += rec;
  return FLOE_OK;
}
