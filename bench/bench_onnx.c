/* SPDX-License-Identifier: Apache-2.0 */
/* bench_onnx.c - inference of an imported ONNX model: latency and throughput.
 *
 * usage: bench_onnx MODEL.onnx INPUT.npy ITERS [TOP1_OUT]
 * Imports the model, feeds INPUT.npy to its first input, runs 3 warm-up steps and ITERS timed
 * ones, and prints one JSON line: median, mean and minimum seconds per step, images per
 * second (batch over the median; the minimum is the steadier figure on a shared machine). With TOP1_OUT, writes each row's arg-max of the first output, one per
 * line, for the top-1 comparison with the baselines. Then 3 more steps, traced, give the step
 * breakdown: "breakdown" in the JSON, and the one-line form on stderr. BENCH_PROFILE=1 prints the time per op
 * type of the timed steps to stderr, BENCH_PROFILE=2 also the time per node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_onnx.h>

#include "bench_util.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.onnx INPUT.npy ITERS [TOP1_OUT]\n", argv[0]);
    return 2;
  }
  int iters = atoi(argv[3]);
  if (iters < 1) iters = 1;
  FloeStatus *st = floe_status_new();
  double t0 = bench_now();
  FloeOnnxModel *m = floe_onnx_import_file(argv[1], NULL, st);
  double import_s = bench_now() - t0;
  FloeTensor *x = m ? floe_tensor_load_npy(argv[2], st) : NULL;
  FloeSession *s = x ? floe_session_new(floe_onnx_model_graph(m), NULL, st) : NULL;
  if (!s) {
    fprintf(stderr, "bench_onnx: %s\n", floe_status_message(st));
    return 1;
  }
  FloeFeed feed = {floe_onnx_model_input_node(m, 0), x};
  const char *fetch = floe_onnx_model_output_fetch(m, 0);
  FloeTensor *y = NULL;
  double *times = calloc((size_t)iters, sizeof *times);
  int profile = getenv("BENCH_PROFILE") ? atoi(getenv("BENCH_PROFILE")) : 0;
  for (int i = -3; i < iters; i++) {
    if (i == 0 && profile) floe_session_set_profiling(s, 1);
    floe_tensor_release(y);
    y = NULL;
    double a = bench_now();
    if (floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &y, st) != FLOE_OK) {
      fprintf(stderr, "bench_onnx: %s\n", floe_status_message(st));
      return 1;
    }
    if (i >= 0) times[i] = bench_now() - a;
  }
  FloeOpProfile *rows = NULL;
  int nrows = 0;
  if (profile && floe_session_profile(s, &rows, &nrows, st) == FLOE_OK)
    for (int i = 0; i < nrows; i++)
      fprintf(stderr, "%-28s %6lld calls %10.3f ms/step\n", rows[i].op, (long long)rows[i].calls,
              rows[i].total_ns * 1e-6 / iters);
  free(rows);
  FloeNodeProfile *nodes = NULL;
  if (profile >= 2 && floe_session_profile_nodes(s, &nodes, &nrows, st) == FLOE_OK)
    for (int i = 0; i < nrows; i++)
      if (nodes[i].total_ns * 1e-6 / iters >= 0.005)
        fprintf(stderr, "  %-40s %-12s %9.3f ms/step\n", nodes[i].node, nodes[i].op,
                nodes[i].total_ns * 1e-6 / iters);
  free(nodes);
  double mean = 0, min = times[0];
  for (int i = 0; i < iters; i++) {
    mean += times[i] / iters;
    if (times[i] < min) min = times[i];
  }
  double med = bench_median(times, iters);
  int64_t batch = floe_tensor_dim(x, 0);
  /* Where a step's time goes, from 3 more steps, traced (the timed ones were not). */
  FloeStepBreakdown bd;
  BenchStep one = {s, &feed, 1, &fetch, 1, NULL, 0};
  if (bench_breakdown(s, bench_step_run, &one, 3, &bd)) return 1;
  printf("{\"runtime\":\"floe\",\"batch\":%lld,\"iters\":%d,\"median_s\":%.6f,\"mean_s\":%.6f,"
         "\"min_s\":%.6f,\"images_per_s\":%.2f,\"import_s\":%.4f,\"breakdown\":",
         (long long)batch, iters, med, mean, min, (double)batch / med, import_s);
  bench_breakdown_json(stdout, &bd);
  printf("}\n");
  bench_breakdown_print(stderr, "floe (traced)", &bd);
  if (argc > 4) {
    FILE *f = fopen(argv[4], "w");
    if (!f) return 1;
    int64_t nr = floe_tensor_dim(y, 0), cols = floe_tensor_num_elements(y) / (nr ? nr : 1);
    const float *v = floe_tensor_data(y);
    for (int64_t r = 0; r < nr; r++) {
      int64_t best = 0;
      for (int64_t c = 1; c < cols; c++)
        if (v[r * cols + c] > v[r * cols + best]) best = c;
      fprintf(f, "%lld\n", (long long)best);
    }
    fclose(f);
  }
  floe_tensor_release(y);
  floe_tensor_release(x);
  free(times);
  floe_session_free(s);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return 0;
}
