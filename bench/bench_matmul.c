/* SPDX-License-Identifier: Apache-2.0 */
/* bench_matmul.c - MatMul f32 through a Floe session versus raw oneDNN dnnl_sgemm and raw
 * OpenBLAS cblas_sgemm on the same inputs in the same process: a square SxSxS product and
 * the dense layers of the MLP (784-512) and of the deep-MNIST CNN (3136-1024) at batch 64,
 * forward (x W) and both backward products (dy W^T, x^T dy), transposes passed as flags.
 * Repetitions rotate between the three and medians are compared: ratio = raw dnnl_sgemm
 * time / session time (target >= 0.97; the session runs dnnl_sgemm). The fastest repetitions
 * are reported too: on a shared machine they are the better estimate of the uncontended time.
 *
 *   bench_matmul [--reps N] [--size S] [--json]
 */
#include <cblas.h>
#include <dnnl.h>
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

/* C[M,N] = op(A) op(B) with A stored [M,K] ([K,M] when ta) and B [K,N] ([N,K] when tb). */
typedef struct Case {
  const char *name;
  int64_t m, k, n;
  int ta, tb;
} Case;

typedef struct Result {
  double session_ms, dnnl_ms, blas_ms, max_diff;
  double min_ms[3]; /* fastest session, dnnl, OpenBLAS */
  FloeStepBreakdown bd; /* of 3 more session steps, traced */
} Result;

static FloeStatus *st;

static void die(const char *what) {
  fprintf(stderr, "bench_matmul: %s: %s\n", what, floe_status_message(st));
  exit(1);
}

static void raw_dnnl(const Case *c, const float *a, const float *b, float *out) {
  dnnl_status_t s = dnnl_sgemm(c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->m, c->n, c->k, 1.0f, a,
                               c->ta ? c->m : c->k, b, c->tb ? c->k : c->n, 0.0f, out, c->n);
  if (s != dnnl_success) {
    fprintf(stderr, "bench_matmul: dnnl_sgemm failed (%d)\n", (int)s);
    exit(1);
  }
}

static void raw_blas(const Case *c, const float *a, const float *b, float *out) {
  cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans,
              (int)c->m, (int)c->n, (int)c->k, 1.0f, a, (int)(c->ta ? c->m : c->k), b,
              (int)(c->tb ? c->k : c->n), 0.0f, out, (int)c->n);
}

static void bench_case(const Case *c, int reps, Result *res) {
  int64_t ad[2] = {c->ta ? c->k : c->m, c->ta ? c->m : c->k};
  int64_t bd[2] = {c->tb ? c->n : c->k, c->tb ? c->k : c->n};
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_make(2, ad));
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_make(2, bd));
  floe_matmul(g, "mm", a, b, c->ta, c->tb);
  if (floe_graph_status(g) != FLOE_OK) {
    fprintf(stderr, "bench_matmul: graph: %s\n", floe_graph_error(g, NULL));
    exit(1);
  }
  FloeSession *s = floe_session_new(g, NULL, st);
  FloeTensor *ta = floe_tensor_new(FLOE_F32, 2, ad, st);
  FloeTensor *tb = floe_tensor_new(FLOE_F32, 2, bd, st);
  float *out = malloc((size_t)(c->m * c->n) * sizeof(float));
  if (!s || !ta || !tb || !out) die("setup");
  float *pa = floe_tensor_data(ta), *pb = floe_tensor_data(tb);
  fill(pa, c->m * c->k, 1);
  fill(pb, c->k * c->n, 2);
  FloeFeed feeds[2] = {{"a", ta}, {"b", tb}};
  const char *fetch = "mm";

  double *t[3];
  for (int i = 0; i < 3; i++) t[i] = malloc((size_t)reps * sizeof(double));
  double max_diff = 0;
  for (int r = -2; r < reps; r++) { /* two untimed warm-up rounds */
    for (int k = 0; k < 3; k++) {
      int who = (k + (r < 0 ? 0 : r)) % 3; /* rotate which goes first */
      double t0 = bench_now();
      if (who == 0) {
        FloeTensor *o = NULL;
        if (floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &o, st) != FLOE_OK) die("run");
        double dt = bench_now() - t0;
        if (r >= 0) t[0][r] = dt;
        if (r == -1) { /* check the session against the raw oneDNN result once */
          raw_dnnl(c, pa, pb, out);
          const float *po = floe_tensor_data(o);
          for (int64_t i = 0; i < c->m * c->n; i++)
            if (fabs((double)po[i] - out[i]) > max_diff) max_diff = fabs((double)po[i] - out[i]);
        }
        floe_tensor_release(o);
      } else {
        if (who == 1)
          raw_dnnl(c, pa, pb, out);
        else
          raw_blas(c, pa, pb, out);
        if (r >= 0) t[who][r] = bench_now() - t0;
      }
    }
  }
  res->session_ms = bench_median(t[0], reps) * 1e3; /* sorts: [0] is the fastest */
  res->dnnl_ms = bench_median(t[1], reps) * 1e3;
  res->blas_ms = bench_median(t[2], reps) * 1e3;
  for (int i = 0; i < 3; i++) res->min_ms[i] = t[i][0] * 1e3;
  res->max_diff = max_diff;
  /* Where a session step's time goes, from 3 more steps, traced (the timed ones were not). */
  BenchStep one = {s, feeds, 2, &fetch, 1, NULL, 0};
  if (bench_breakdown(s, bench_step_run, &one, 3, &res->bd)) exit(1);
  for (int i = 0; i < 3; i++) free(t[i]);
  free(out);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_session_free(s);
  floe_graph_free(g);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_matmul [--reps N] [--size S] [--json]\n"
          "  MatMul f32 through a session vs raw dnnl_sgemm vs raw cblas_sgemm (OpenBLAS):\n"
          "  SxSxS (default S=1024) and the MLP / CNN dense layers at batch 64.\n"
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
  char square[32];
  snprintf(square, sizeof square, "square %lld", (long long)n);
  const Case cases[] = {
      {square, n, n, n, 0, 0},
      {"mlp 784-512 x W", 64, 784, 512, 0, 0},
      {"mlp 784-512 dy W^T", 64, 512, 784, 0, 1},
      {"mlp 784-512 x^T dy", 784, 64, 512, 1, 0},
      {"mlp 512-256 x W", 64, 512, 256, 0, 0},
      {"cnn 3136-1024 x W", 64, 3136, 1024, 0, 0},
      {"cnn 3136-1024 dy W^T", 64, 1024, 3136, 0, 1},
      {"cnn 3136-1024 x^T dy", 3136, 64, 1024, 1, 0},
  };
  enum { NUM_CASES = sizeof cases / sizeof cases[0] };
  st = floe_status_new();
  Result res[NUM_CASES];
  for (int i = 0; i < NUM_CASES; i++) bench_case(&cases[i], reps, &res[i]);

  if (json) printf("{\"bench\": \"matmul\", \"dtype\": \"f32\", \"reps\": %d, \"target\": 0.97, \"cases\": [", reps);
  else
    printf("MatMul f32, %d reps: median ms, GFLOP/s of the median, fastest ms; ratio = raw "
           "dnnl_sgemm / session (target >= 0.97)\n"
           "%-22s %18s %25s %25s %25s %6s %9s\n",
           reps, "case", "M x K x N", "session          ", "dnnl_sgemm          ",
           "OpenBLAS           ", "ratio", "max|diff|");
  for (int i = 0; i < NUM_CASES; i++) {
    const Case *c = &cases[i];
    const Result *r = &res[i];
    double gf = 2.0 * (double)c->m * (double)c->k * (double)c->n * 1e-6; /* per ms -> GF/s */
    char shape[48];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld %s%s", (long long)c->m, (long long)c->k,
             (long long)c->n, c->ta ? "T" : "N", c->tb ? "T" : "N");
    if (json)
      printf("%s{\"case\": \"%s\", \"m\": %lld, \"k\": %lld, \"n\": %lld, \"transpose_a\": %d, "
             "\"transpose_b\": %d, \"session_ms\": %.4f, \"dnnl_ms\": %.4f, \"openblas_ms\": %.4f, "
             "\"ratio\": %.4f, \"session_gflops\": %.2f, \"dnnl_gflops\": %.2f, "
             "\"openblas_gflops\": %.2f, \"session_min_ms\": %.4f, \"dnnl_min_ms\": %.4f, "
             "\"openblas_min_ms\": %.4f, \"min_ratio\": %.4f, \"max_abs_diff\": %.3g, "
             "\"breakdown\": ",
             i ? ", " : "", c->name, (long long)c->m, (long long)c->k, (long long)c->n, c->ta,
             c->tb, r->session_ms, r->dnnl_ms, r->blas_ms, r->dnnl_ms / r->session_ms,
             gf / r->session_ms, gf / r->dnnl_ms, gf / r->blas_ms, r->min_ms[0], r->min_ms[1],
             r->min_ms[2], r->min_ms[1] / r->min_ms[0], r->max_diff);
    if (json) {
      bench_breakdown_json(stdout, &r->bd);
      printf("}");
    } else
      printf("%-22s %18s %8.3f %6.1f (%7.3f) %8.3f %6.1f (%7.3f) %8.3f %6.1f (%7.3f) %6.3f "
             "%9.2g\n",
             c->name, shape, r->session_ms, gf / r->session_ms, r->min_ms[0], r->dnnl_ms,
             gf / r->dnnl_ms, r->min_ms[1], r->blas_ms, gf / r->blas_ms, r->min_ms[2],
             r->dnnl_ms / r->session_ms, r->max_diff);
  }
  if (json) printf("]}\n");
  else
    for (int i = 0; i < NUM_CASES; i++) {
      char what[64];
      snprintf(what, sizeof what, "%s (session, traced)", cases[i].name);
      bench_breakdown_print(stdout, what, &res[i].bd);
    }
  floe_status_free(st);
  return 0;
}
