/* bench_matmul.c - MatMul 1024x1024x1024 f32 through a Floe session versus a raw cblas_sgemm
 * on the same inputs in the same process (same OpenBLAS, same threads). Repetitions alternate
 * between the two, and medians are compared: ratio = raw time / session time (target >= 0.97).
 *
 *   bench_matmul [--reps N] [--size S] [--json]
 */
#include <cblas.h>
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fill(float *p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_matmul [--reps N] [--size S] [--json]\n"
          "  MatMul SxSxS f32 (default S=1024) through a session vs a raw cblas_sgemm.\n"
          "  --reps N   timed repetitions of each (default 20)\n"
          "  --json     print one JSON object instead of text\n");
}

int main(int argc, char **argv) {
  int reps = 20, json = 0;
  int64_t n = 1024;
  static const struct option opts[] = {{"reps", required_argument, NULL, 'r'},
                                       {"size", required_argument, NULL, 's'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "r:s:jh", opts, NULL)) != -1;) {
    switch (c) {
      case 'r': reps = atoi(optarg); break;
      case 's': n = atoll(optarg); break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (reps < 1 || n < 1) {
    fprintf(stderr, "bench_matmul: --reps and --size must be positive\n");
    return 2;
  }

  FloeStatus *st = floe_status_new();
  int64_t dims[2] = {n, n};
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_make(2, dims));
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_make(2, dims));
  floe_matmul(g, "mm", a, b, 0, 0);
  if (floe_graph_status(g) != FLOE_OK) {
    fprintf(stderr, "bench_matmul: graph: %s\n", floe_graph_error(g, NULL));
    return 1;
  }
  FloeSession *s = floe_session_new(g, NULL, st);
  FloeTensor *ta = floe_tensor_new(FLOE_F32, 2, dims, st);
  FloeTensor *tb = floe_tensor_new(FLOE_F32, 2, dims, st);
  float *c = malloc((size_t)(n * n) * sizeof(float));
  if (!s || !ta || !tb || !c) {
    fprintf(stderr, "bench_matmul: setup: %s\n", floe_status_message(st));
    return 1;
  }
  const float *pa = floe_tensor_data(ta), *pb = floe_tensor_data(tb);
  fill(floe_tensor_data(ta), n * n, 1);
  fill(floe_tensor_data(tb), n * n, 2);
  FloeFeed feeds[2] = {{"a", ta}, {"b", tb}};
  const char *fetch = "mm";

  double *ts = malloc((size_t)reps * sizeof(double)), *tr = malloc((size_t)reps * sizeof(double));
  double max_diff = 0;
  for (int r = -2; r < reps; r++) { /* two untimed warm-up rounds */
    for (int k = 0; k < 2; k++) {
      int session_turn = (k == 0) == (r % 2 == 0); /* alternate which goes first */
      double t0 = bench_now();
      if (session_turn) {
        FloeTensor *out = NULL;
        if (floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) {
          fprintf(stderr, "bench_matmul: run: %s\n", floe_status_message(st));
          return 1;
        }
        double t = bench_now() - t0;
        if (r >= 0) ts[r] = t;
        if (r == -1) { /* check the session against the raw result once */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f,
                      pa, (int)n, pb, (int)n, 0.0f, c, (int)n);
          const float *o = floe_tensor_data(out);
          for (int64_t i = 0; i < n * n; i++)
            if (fabs((double)o[i] - c[i]) > max_diff) max_diff = fabs((double)o[i] - c[i]);
        }
        floe_tensor_release(out);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa,
                    (int)n, pb, (int)n, 0.0f, c, (int)n);
        double t = bench_now() - t0;
        if (r >= 0) tr[r] = t;
      }
    }
  }
  double ms = bench_median(ts, reps), mr = bench_median(tr, reps);
  double flop = 2.0 * (double)n * (double)n * (double)n;
  double ratio = mr / ms;
  if (json)
    printf("{\"bench\": \"matmul\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"dtype\": \"f32\", "
           "\"reps\": %d, \"session_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f, "
           "\"target\": 0.97, \"session_gflops\": %.2f, \"raw_gflops\": %.2f, "
           "\"max_abs_diff\": %.3g}\n",
           (long long)n, (long long)n, (long long)n, reps, ms * 1e3, mr * 1e3, ratio,
           flop / ms * 1e-9, flop / mr * 1e-9, max_diff);
  else
    printf("MatMul %lldx%lldx%lld f32, %d reps (medians)\n"
           "  session      %9.3f ms  %8.2f GFLOP/s\n"
           "  cblas_sgemm  %9.3f ms  %8.2f GFLOP/s\n"
           "  ratio raw/session %.3f (target >= 0.97), max |diff| %.3g\n",
           (long long)n, (long long)n, (long long)n, reps, ms * 1e3, flop / ms * 1e-9, mr * 1e3,
           flop / mr * 1e-9, ratio, max_diff);
  free(ts);
  free(tr);
  free(c);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return 0;
}
