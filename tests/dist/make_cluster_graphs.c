/* SPDX-License-Identifier: Apache-2.0 */
/* make_cluster_graphs.c - the graphs the cluster tests run, twice each: DIR/NAME.floe with
 * nodes placed on the tasks of a cluster (/job:worker/task:N, /job:ps/task:0), and
 * DIR/NAME_local.floe, the very same graph without device requests (the one-process
 * reference: the values must be identical).
 *   chain: x [2,3] (fed) -> MatMul by W [3,4] on worker 0 -> Relu on worker 1 -> Mul by 2
 *          on the chief -> "y"; and z = Sum(x) on ps 0 (fetched from a remote task).
 *   big:   a [1024,1024] constant on worker 0, Mul by itself on worker 1, Sum on the chief:
 *          4 MiB crosses tasks twice -> "s".
 *   control: a while loop (5 iterations) whose body multiplies on worker 0 and adds on
 *          worker N-1 while its counter and condition stay on the chief -> "acc"; then a
 *          cond on the fed bool "pred" whose true branch runs on worker 0 and whose false
 *          branch on worker N-1 -> "picked".
 * With an argument after DIR, the worker count: chain uses worker (N-1) for the Relu. With
 * --ps-on-worker after it, chain's ps part goes on worker (N-1) too: a launcher's job (mpirun:
 * rank 0 the chief, the other ranks workers) has no ps job. */
#include <floe/floe.h>
#include <floe/floe_control.h>
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

typedef struct Ctl {
  const char *w0, *wl; /* NULL: no device requests */
} Ctl;

static floe_code loop_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg;
  (void)n;
  FloeTensor *five = floe_tensor_scalar_i32(5, NULL);
  *pred = binary_on(g, "Less", "lt", v[0], floe_const(g, "five", five), NULL);
  floe_tensor_release(five);
  return floe_graph_status(g);
}

static floe_code loop_body(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)n;
  const Ctl *c = arg;
  FloeTensor *one = floe_tensor_scalar_i32(1, NULL);
  next[0] = binary_on(g, "Add", "inc", v[0], floe_const(g, "one", one), NULL);
  floe_tensor_release(one);
  FloeOutput m = binary_on(g, "Mul", "scale", v[1], floe_const_f32(g, "k", 1.5f), c->w0);
  next[1] = binary_on(g, "Add", "shift", m, floe_const_f32(g, "c", 1.0f), c->wl);
  return floe_graph_status(g);
}

static floe_code branch_true(FloeGraph *g, void *arg, const FloeOutput *in, int nin,
                             FloeOutput *out, int nout) {
  (void)nin;
  (void)nout;
  out[0] = binary_on(g, "Mul", "twice", in[0], floe_const_f32(g, "two", 2.0f),
                     ((const Ctl *)arg)->w0);
  return floe_graph_status(g);
}

static floe_code branch_false(FloeGraph *g, void *arg, const FloeOutput *in, int nin,
                              FloeOutput *out, int nout) {
  (void)nin;
  (void)nout;
  out[0] = binary_on(g, "Add", "plus", in[0], floe_const_f32(g, "hundred", 100.0f),
                     ((const Ctl *)arg)->wl);
  return floe_graph_status(g);
}

static int control(const char *dir, int local, int workers) {
  char last[64];
  snprintf(last, sizeof last, "/job:worker/task:%d/device:cpu:0", workers - 1);
  Ctl c = {local ? NULL : "/job:worker/task:0/device:cpu:0", local ? NULL : last};
  FloeGraph *g = floe_graph_new();
  const int64_t d[1] = {4};
  const float v[4] = {1, -2, 0.5f, 3};
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 1, d, v, sizeof v, NULL);
  FloeTensor *zero = floe_tensor_scalar_i32(0, NULL);
  FloeOutput init[2] = {floe_const(g, "i0", zero), floe_const(g, "acc0", t)}, res[2], out;
  floe_while_loop(g, "loop", loop_cond, loop_body, &c, init, 2, NULL, res);
  unary_on(g, "Identity", "acc", res[1], NULL);
  FloeOutput pred = floe_placeholder(g, "pred", FLOE_BOOL, floe_shape_scalar());
  floe_cond(g, "cond", pred, &res[1], 1, branch_true, branch_false, &c, &out, 1);
  unary_on(g, "Identity", "picked", out, NULL);
  floe_tensor_release(t);
  floe_tensor_release(zero);
  int bad = save(g, dir, local ? "control_local.floe" : "control.floe");
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
         big(argv[1], 0, workers) | big(argv[1], 1, workers) | control(argv[1], 0, workers) |
         control(argv[1], 1, workers);
}
