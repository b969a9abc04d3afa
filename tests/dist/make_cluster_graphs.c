/* SPDX-License-Identifier: Apache-2.0 */
/* make_cluster_graphs.c - the graphs the cluster tests run, twice each: DIR/NAME.floe with
 * nodes placed on the tasks of a cluster (/job:worker/task:N, /job:ps/task:0), and
 * DIR/NAME_local.floe, the very same graph without device requests (the one-process
 * reference: the values must be identical).
 *   chain: x [2,3] (fed) -> MatMul by W [3,4] on worker 0 -> Relu on worker 1 -> Mul by 2
 *          on the chief -> "y"; and z = Sum(x) on ps 0 (fetched from a remote task).
 *   big:   a [1024,1024] constant on worker 0, Mul by itself on worker 1, Sum on the chief:
 *          4 MiB crosses tasks twice -> "s".
 * With an argument after DIR, the worker count: chain uses worker (N-1) for the Relu. With
 * --ps-on-worker after it, chain's ps part goes on worker (N-1) too: a launcher's job (mpirun:
 * rank 0 the chief, the other ranks workers) has no ps job. */
#include <floe/floe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FloeOutput unary_on(FloeGraph *g, const char *op, const char *name, FloeOutput x,
                           const char *dev) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, x);
  if (dev) floe_node_set_device(b, dev);
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput binary_on(FloeGraph *g, const char *op, const char *name, FloeOutput x,
                            FloeOutput y, const char *dev) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, y);
  if (dev) floe_node_set_device(b, dev);
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput const_on(FloeGraph *g, const char *name, FloeTensor *t, const char *dev) {
  FloeNodeBuilder *b = floe_node_begin(g, "Const", name);
  floe_node_set_attr_tensor(b, "value", t);
  floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(t));
  if (dev) floe_node_set_device(b, dev);
  return floe_out(floe_node_finish(b), 0);
}

static int save(FloeGraph *g, const char *dir, const char *file) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FloeStatus *st = floe_status_new();
  int bad = floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK;
  if (bad) fprintf(stderr, "make_cluster_graphs: %s: %s%s\n", file, floe_graph_error(g, NULL),
                   floe_status_message(st));
  floe_status_free(st);
  return bad;
}

static int chain(const char *dir, int local, int workers, int ps_on_worker) {
  FloeGraph *g = floe_graph_new();
  char last[64], ps[64];
  snprintf(last, sizeof last, "/job:worker/task:%d/device:cpu:0", workers - 1);
  snprintf(ps, sizeof ps, "%s", ps_on_worker ? last : "/job:ps/task:0/device:cpu:0");
  const int64_t xd[2] = {2, 3}, wd[2] = {3, 4};
  float w[12];
  for (int i = 0; i < 12; i++) w[i] = (float)(i % 5) - 1.5f;
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, w, sizeof w, NULL);
  FloeTensor *two = floe_tensor_scalar_f32(2.0f, NULL);
  FloeTensor *axes = floe_tensor_scalar_i32(1, NULL);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput W = const_on(g, "W", wt, local ? NULL : "/job:worker/task:0/device:cpu:0");
  FloeOutput m = binary_on(g, "MatMul", "m", x, W, local ? NULL : "/job:worker/task:0/device:cpu:0");
  FloeOutput r = unary_on(g, "Relu", "r", m, local ? NULL : last);
  FloeOutput y = binary_on(g, "Mul", "y", r, const_on(g, "two", two, NULL), NULL);
  binary_on(g, "Sum", "z", x, const_on(g, "axis", axes, local ? NULL : ps), local ? NULL : ps);
  (void)y;
  floe_tensor_release(wt);
  floe_tensor_release(two);
  floe_tensor_release(axes);
  int bad = save(g, dir, local ? "chain_local.floe" : "chain.floe");
  floe_graph_free(g);
  return bad;
}

static int big(const char *dir, int local, int workers) {
  FloeGraph *g = floe_graph_new();
  char last[64];
  snprintf(last, sizeof last, "/job:worker/task:%d/device:cpu:0", workers - 1);
  const int64_t d[2] = {1024, 1024};
  float *v = malloc(sizeof(float) * 1024 * 1024);
  if (!v) return 1;
  for (int i = 0; i < 1024 * 1024; i++) v[i] = (float)((i * 7) % 13) * 0.125f;
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 2, d, v, sizeof(float) * 1024 * 1024, NULL);
  free(v);
  const int32_t ad[2] = {0, 1};
  const int64_t an[1] = {2};
  FloeTensor *axes = floe_tensor_from_data(FLOE_I32, 1, an, ad, sizeof ad, NULL);
  FloeOutput a = const_on(g, "a", t, local ? NULL : "/job:worker/task:0/device:cpu:0");
  FloeOutput sq = binary_on(g, "Mul", "sq", a, a, local ? NULL : last);
  binary_on(g, "Sum", "s", sq, const_on(g, "axes", axes, NULL), NULL);
  floe_tensor_release(t);
  floe_tensor_release(axes);
  int bad = save(g, dir, local ? "big_local.floe" : "big.floe");
  floe_graph_free(g);
  return bad;
}

int main(int argc, char **argv) {
  int ps_on_worker = argc > 3 && strcmp(argv[3], "--ps-on-worker") == 0;
  if (argc < 2 || argc > 4 || (argc == 4 && !ps_on_worker)) {
    fprintf(stderr, "usage: make_cluster_graphs DIR [WORKERS [--ps-on-worker]]\n");
    return 2;
  }
  int workers = argc > 2 ? atoi(argv[2]) : 2;
  if (workers < 1) workers = 1;
  return chain(argv[1], 0, workers, ps_on_worker) | chain(argv[1], 1, workers, ps_on_worker) |
         big(argv[1], 0, workers) | big(argv[1], 1, workers);
}
