/* SPDX-License-Identifier: Apache-2.0 */
/* bench_util.h - timing helpers shared by the benchmark programs. */
#ifndef FLOE_BENCH_UTIL_H
#define FLOE_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <floe/floe.h>

/* Monotonic seconds. */
static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Runs `steps` more steps with run(arg) (0 on success) while s traces, and fills *b with
 * their breakdown (docs/benchmarks.md, "Step breakdown"). 0, or -1 with a message on stderr.
 * The timed steps stay untraced: tracing costs a few microseconds per kernel. */
static inline int bench_breakdown(FloeSession *s, int (*run)(void *arg), void *arg, int steps,
                                  FloeStepBreakdown *b) {
  FloeStatus *st = floe_status_new();
  int rc = 0;
  floe_session_set_tracing(s, FLOE_TRACE_START);
  for (int i = 0; i < steps && rc == 0; i++) rc = run(arg);
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  b->struct_size = sizeof *b;
  if (rc == 0 && floe_session_step_breakdown(s, b, st) != FLOE_OK) {
    fprintf(stderr, "breakdown: %s\n", floe_status_message(st));
    rc = -1;
  }
  floe_status_free(st);
  return rc;
}

/* One floe_session_run with fixed arguments, for bench_breakdown: bench_breakdown(s,
 * bench_step_run, &(BenchStep){...}, n, &b). Outputs are released; 0 on success. */
typedef struct BenchStep {
  FloeSession *s;
  const FloeFeed *feeds;
  int num_feeds;
  const char *const *fetches;
  int num_fetches;
  const char *const *targets;
  int num_targets;
} BenchStep;

static inline int bench_step_run(void *arg) {
  const BenchStep *o = arg;
  FloeTensor **out = o->num_fetches > 0 ? calloc((size_t)o->num_fetches, sizeof *out) : NULL;
  if (o->num_fetches > 0 && !out) return -1;
  FloeStatus *st = floe_status_new();
  floe_code c = floe_session_run(o->s, o->feeds, o->num_feeds, o->fetches, o->num_fetches,
                                 o->targets, o->num_targets, out, st);
  if (c != FLOE_OK) fprintf(stderr, "breakdown step: %s\n", floe_status_message(st));
  for (int i = 0; c == FLOE_OK && i < o->num_fetches; i++) floe_tensor_release(out[i]);
  free(out);
  floe_status_free(st);
  return c == FLOE_OK ? 0 : -1;
}

/* The one-line breakdown ("step 1.23 ms x 2.00 threads: kernels ..."), with a prefix. */
static inline void bench_breakdown_print(FILE *f, const char *what, const FloeStepBreakdown *b) {
  double n = b->steps > 0 ? (double)b->steps : 1.0, all = b->thread_ns > 0 ? b->thread_ns : 1;
  fprintf(f, "%s: step %.3f ms x %.2f threads: kernels %.3f ms (%.0f%%), framework %.3f ms "
          "(%.0f%%), transfers %.3f ms (%.0f%%), idle %.3f ms (%.0f%%), tracing %.3f ms "
          "(%.0f%%)\n", what,
          b->wall_ns * 1e-6 / n, b->wall_ns ? (double)b->thread_ns / b->wall_ns : 0.0,
          b->kernel_ns * 1e-6 / n, 100.0 * b->kernel_ns / all, b->framework_ns * 1e-6 / n,
          100.0 * b->framework_ns / all, b->transfer_ns * 1e-6 / n, 100.0 * b->transfer_ns / all,
          b->idle_ns * 1e-6 / n, 100.0 * b->idle_ns / all, b->tracing_ns * 1e-6 / n,
          100.0 * b->tracing_ns / all);
}

/* The same as a JSON object (ms per step), for --json lines. */
static inline void bench_breakdown_json(FILE *f, const FloeStepBreakdown *b) {
  double n = b->steps > 0 ? (double)b->steps : 1.0;
  fprintf(f, "{\"steps\":%lld,\"step_ms\":%.4f,\"thread_ms\":%.4f,\"kernels_ms\":%.4f,"
          "\"framework_ms\":%.4f,\"transfers_ms\":%.4f,\"idle_ms\":%.4f,\"tracing_ms\":%.4f}",
          (long long)b->steps, b->wall_ns * 1e-6 / n, b->thread_ns * 1e-6 / n,
          b->kernel_ns * 1e-6 / n, b->framework_ns * 1e-6 / n, b->transfer_ns * 1e-6 / n,
          b->idle_ns * 1e-6 / n, b->tracing_ns * 1e-6 / n);
}

#endif
