/* SPDX-License-Identifier: Apache-2.0 */
/* bench_executor.c - executor overhead: per-node time of 10,000 scalar Adds in a chain and
 * 10,000 independent scalar Adds x + c_i with distinct constants (as the baselines need, so
 * no system can merge them), grouped by one NoOp with control inputs. Times are per Add, through a session.
 * Prints the median over --reps steps after a warm-up. Compare with bench/executor_baselines.py
 * (TensorFlow tf.function and PyTorch eager doing the same adds) via bench/run_executor.sh. */
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, FloeStatus *st) {
  fprintf(stderr, "bench_executor: %s: %s\n", what, floe_status_message(st));
  exit(1);
}

/* Median seconds of one step. */
static double time_steps(FloeSession *s, FloeFeed *feed, const char *fetch, const char *target,
                         int reps) {
  FloeStatus *st = floe_status_new();
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int r = -2; r < reps; r++) { /* two warm-up steps build and cache the executor */
    FloeTensor *out = NULL;
    double t0 = bench_now();
    if (floe_session_run(s, feed, 1, fetch ? &fetch : NULL, fetch ? 1 : 0, target ? &target : NULL,
                         target ? 1 : 0, fetch ? &out : NULL, st) != FLOE_OK)
      die("run", st);
    double dt = bench_now() - t0;
    if (r >= 0) t[r] = dt;
    floe_tensor_release(out);
  }
  double med = bench_median(t, reps);
  free(t);
  floe_status_free(st);
  return med;
}

typedef struct OneStep {
  FloeSession *s;
  FloeFeed *feed;
  const char *fetch, *target;
} OneStep;

static int one_step(void *arg) {
  OneStep *o = arg;
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code c = floe_session_run(o->s, o->feed, 1, o->fetch ? &o->fetch : NULL, o->fetch ? 1 : 0,
                                 o->target ? &o->target : NULL, o->target ? 1 : 0,
                                 o->fetch ? &out : NULL, st);
  if (c != FLOE_OK) fprintf(stderr, "bench_executor: %s\n", floe_status_message(st));
  floe_tensor_release(out);
  floe_status_free(st);
  return c == FLOE_OK ? 0 : -1;
}

int main(int argc, char **argv) {
  int nodes = 10000, reps = 20, json = 0, threads = 0, c;
  static const struct option opts[] = {{"nodes", required_argument, NULL, 'n'},
                                       {"reps", required_argument, NULL, 'r'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "n:r:t:jh", opts, NULL)) != -1) {
    if (c == 'n') nodes = atoi(optarg);
    else if (c == 'r') reps = atoi(optarg);
    else if (c == 't') threads = atoi(optarg);
    else if (c == 'j') json = 1;
    else {
      printf("Usage: bench_executor [--nodes N] [--reps R] [--threads T] [--json]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (nodes < 1 || reps < 1) return 2;
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions ro = {.struct_size = sizeof ro, .num_threads = threads};
  FloeRuntime *rt = floe_runtime_new(&ro, st);
  if (!rt) die("runtime", st);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;

  /* Chain: a_i = a_{i-1} + one. */
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  FloeOutput a = x;
  for (int i = 0; i < nodes; i++) a = floe_binary(g, "Add", NULL, a, one);
  const char *chain_fetch = floe_node_name(a.node);
  /* Wide: w_i = x + one, all independent, grouped by a NoOp. */
  FloeNodeBuilder *grp = floe_node_begin(g, "NoOp", "wide");
  for (int i = 0; i < nodes; i++)
    floe_node_add_control_input(
        grp, floe_binary(g, "Add", NULL, x, floe_const_f32(g, NULL, (float)i)).node);
  floe_node_finish(grp);
  if (floe_graph_status(g) != FLOE_OK) die("graph", (floe_graph_error(g, st), st));
  FloeSession *s = floe_session_new(g, &so, st);
  if (!s) die("session", st);
  FloeTensor *xv = floe_tensor_scalar_f32(0.0f, st);
  FloeFeed feed = {"x", xv};

  char fetch_name[256];
  snprintf(fetch_name, sizeof fetch_name, "%s", chain_fetch);
  double chain = time_steps(s, &feed, fetch_name, NULL, reps);
  double wide = time_steps(s, &feed, NULL, "wide", reps);
  /* Check the chain's value once: x + nodes. */
  FloeTensor *out = NULL;
  const char *f = fetch_name;
  if (floe_session_run(s, &feed, 1, &f, 1, NULL, 0, &out, st) != FLOE_OK) die("check", st);
  float v = *(float *)floe_tensor_data(out);
  if (v != (float)nodes) {
    fprintf(stderr, "bench_executor: chain computed %g, expected %d\n", v, nodes);
    return 1;
  }
  floe_tensor_release(out);
  double chain_us = chain / nodes * 1e6, wide_us = wide / nodes * 1e6;
  /* Where a step's time goes, from 3 more steps of each, traced. */
  FloeStepBreakdown bc, bw;
  OneStep oc = {s, &feed, fetch_name, NULL}, ow = {s, &feed, NULL, "wide"};
  if (bench_breakdown(s, one_step, &oc, 3, &bc) || bench_breakdown(s, one_step, &ow, 3, &bw))
    return 1;
  if (json) {
    printf("{\"system\":\"floe\",\"nodes\":%d,\"reps\":%d,\"chain_us_per_node\":%.4f,"
           "\"wide_us_per_node\":%.4f,\"chain_breakdown\":",
           nodes, reps, chain_us, wide_us);
    bench_breakdown_json(stdout, &bc);
    printf(",\"wide_breakdown\":");
    bench_breakdown_json(stdout, &bw);
    printf("}\n");
  } else {
    printf("floe: chain %.3f us/node, wide %.3f us/node (%d nodes, median of %d)\n", chain_us,
           wide_us, nodes, reps);
    bench_breakdown_print(stdout, "chain (traced)", &bc);
    bench_breakdown_print(stdout, "wide (traced)", &bw);
  }
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
  floe_status_free(st);
  return 0;
}
