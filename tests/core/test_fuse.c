/* SPDX-License-Identifier: Apache-2.0 */
/* test_fuse.c - the session's graph rewrites (core/session/fuse.c): a conv -> bias -> relu ->
 * max-pool model and its gradients computed with fusion on and off (FLOE_FUSION=0) give the
 * same values; the fused ops really run (the profile names them) and the replaced ones do
 * not; a chain is left alone when an inner result is fetched or has another consumer; the
 * user's graph is not changed. The same for the N-d Conv chains (_FusedConv): a residual
 * block, a side input that broadcasts, fetched and fed nodes, a dtype without the kernel;
 * the activation tails of N-d convolutions, and matrix products with a bias and a tail
 * (_FusedMatMul). */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

typedef struct Model {
  FloeGraph *g;
  char loss[64], dx[64], df[64], db[64], biased[64];
  int num_nodes;
} Model;

/* x [3,8,8,2] -> Conv2D 3x3x2x4 SAME -> BiasAdd -> Relu -> MaxPool 2x2 -> sum of squares;
 * gradients at x, the filter and the bias. extra_consumer: the conv output also feeds an
 * Identity whose sum is added to the loss (so Conv2D has two consumers). */
static Model model(FloeDType dt, int extra_consumer) {
  Model m;
  memset(&m, 0, sizeof m);
  FloeGraph *g = m.g = floe_graph_new();
  const int64_t xd[4] = {3, 8, 8, 2}, fd[4] = {3, 3, 2, 4}, bd[1] = {4};
  FloeTensor *xt = harness_random(dt, 4, xd, 1, -1, 1);
  FloeTensor *ft = harness_random(dt, 4, fd, 2, -0.5, 0.5);
  FloeTensor *bt = harness_random(dt, 1, bd, 3, -0.3, 0.3);
  FloeOutput x = floe_const(g, "x", xt), f = floe_const(g, "f", ft), b = floe_const(g, "b", bt);
  floe_tensor_release(xt); /* the graph holds its own references */
  floe_tensor_release(ft);
  floe_tensor_release(bt);
  FloeNodeBuilder *nb = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(nb, x);
  floe_node_add_input(nb, f);
  floe_node_set_attr_int_list(nb, "strides", (const int64_t[]){1, 1, 1, 1}, 4);
  floe_node_set_attr_string(nb, "padding", "SAME");
  FloeOutput conv = floe_out(floe_node_finish(nb), 0);
  FloeOutput biased = floe_binary(g, "BiasAdd", "biased", conv, b);
  FloeOutput relu = floe_unary(g, "Relu", "relu", biased);
  nb = floe_node_begin(g, "MaxPool", "pool");
  floe_node_add_input(nb, relu);
  floe_node_set_attr_int_list(nb, "ksize", (const int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_int_list(nb, "strides", (const int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_string(nb, "padding", "VALID");
  FloeOutput pool = floe_out(floe_node_finish(nb), 0);
  FloeOutput sq = floe_unary(g, "Square", "sq", pool);
  FloeTensor *axes_t = harness_i32(1, (const int64_t[]){4}, (const int32_t[]){0, 1, 2, 3});
  FloeOutput axes = floe_const(g, "axes", axes_t);
  floe_tensor_release(axes_t);
  FloeOutput loss = floe_binary(g, "Sum", "loss0", sq, axes);
  if (extra_consumer) {
    FloeOutput other = floe_binary(g, "Sum", "other", floe_unary(g, "Identity", "id", conv), axes);
    loss = floe_binary(g, "Add", "loss1", loss, other);
  }
  FloeOutput xs[3] = {x, f, b}, dxs[3];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(g, &loss, 1, xs, 3, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  snprintf(m.loss, sizeof m.loss, "%s", floe_node_name(loss.node));
  snprintf(m.dx, sizeof m.dx, "%s", floe_node_name(dxs[0].node));
  snprintf(m.df, sizeof m.df, "%s", floe_node_name(dxs[1].node));
  snprintf(m.db, sizeof m.db, "%s", floe_node_name(dxs[2].node));
  snprintf(m.biased, sizeof m.biased, "biased");
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  m.num_nodes = floe_graph_num_nodes(g);
  return m;
}

/* Runs the fetches with fusion on or off; outs[i] new references; *ran gets how many times
 * op `watch` ran (from the profile). */
static void run(const Model *m, int fusion, const char *const *fetches, int n, FloeTensor **outs,
                const char *watch, int64_t *ran) {
  setenv("FLOE_FUSION", fusion ? "1" : "0", 1);
  /* the model is all constants: folding would compute it before fusion sees it */
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(m->g, NULL);
  floe_session_set_profiling(s, 1);
  ck_assert_msg(floe_session_run(s, NULL, 0, fetches, n, NULL, 0, outs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeOpProfile *rows;
  int nr;
  ck_assert(floe_session_profile(s, &rows, &nr, st) == FLOE_OK);
  *ran = 0;
  for (int i = 0; i < nr; i++)
    if (harness_profile_op_is(rows[i].op, watch)) *ran = rows[i].calls;
  free(rows);
  floe_session_free(s);
  floe_status_free(st);
  unsetenv("FLOE_FUSION");
  unsetenv("FLOE_OPT_CONSTANT_FOLDING");
}

static int64_t ran_op(const Model *m, int fusion, const char *const *fetches, int n,
                      const char *watch) {
  FloeTensor *outs[4];
  int64_t ran;
  run(m, fusion, fetches, n, outs, watch, &ran);
  for (int i = 0; i < n; i++) floe_tensor_release(outs[i]);
  return ran;
}

START_TEST(test_fused_equals_unfused) {
  const FloeDType dts[2] = {FLOE_F32, FLOE_F64};
  for (int d = 0; d < 2; d++) {
    Model m = model(dts[d], 0);
    const char *fetches[4] = {m.loss, m.dx, m.df, m.db};
    FloeTensor *on[4], *off[4];
    int64_t fused_conv, plain_conv;
    run(&m, 1, fetches, 4, on, "_FusedConv2DBiasRelu", &fused_conv);
    run(&m, 0, fetches, 4, off, "_FusedConv2DBiasRelu", &plain_conv);
    ck_assert_int_eq(fused_conv, 1);
    ck_assert_int_eq(plain_conv, 0);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "_FusedMaxPoolGradRelu"), 1);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "BiasAdd"), 0);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "MaxPoolGrad"), 0);
    ck_assert_int_eq(ran_op(&m, 0, fetches, 4, "MaxPoolGrad"), 1);
    double tol = dts[d] == FLOE_F32 ? 1e-5 : 1e-12;
    for (int i = 0; i < 4; i++) {
      harness_assert_close(on[i], off[i], tol, tol, fetches[i]);
      floe_tensor_release(on[i]);
      floe_tensor_release(off[i]);
    }
    /* The session fused a clone: the user's graph is as it was. */
    ck_assert_int_eq(floe_graph_num_nodes(m.g), m.num_nodes);
    for (int i = 0; i < floe_graph_num_nodes(m.g); i++)
      ck_assert(strncmp(floe_node_op(floe_graph_node(m.g, i)), "_Fused", 6) != 0);
    floe_graph_free(m.g);
  }
}
END_TEST

START_TEST(test_fetched_or_shared_results_are_not_fused) {
  /* Fetching the BiasAdd's output keeps the forward chain as it is (the backward one still
   * fuses). */
  Model m = model(FLOE_F32, 0);
  const char *fetches[2] = {m.dx, m.biased};
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "_FusedConv2DBiasRelu"), 0);
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "BiasAdd"), 1);
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "_FusedMaxPoolGradRelu"), 1);
  floe_graph_free(m.g);
  /* The convolution's output read by another op too: no forward fusion, same values. */
  m = model(FLOE_F32, 1);
  const char *f2[2] = {m.loss, m.df};
  ck_assert_int_eq(ran_op(&m, 1, f2, 2, "_FusedConv2DBiasRelu"), 0);
  ck_assert_int_eq(ran_op(&m, 1, f2, 2, "Conv2D"), 1);
  FloeTensor *on[2], *off[2];
  int64_t ran;
  run(&m, 1, f2, 2, on, "Conv2D", &ran);
  run(&m, 0, f2, 2, off, "Conv2D", &ran);
  for (int i = 0; i < 2; i++) {
    harness_assert_close(on[i], off[i], 1e-5, 1e-5, f2[i]);
    floe_tensor_release(on[i]);
    floe_tensor_release(off[i]);
  }
  floe_graph_free(m.g);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The N-d Conv chains: [Relu]([Add]([BiasAdd](Conv(x, f)), side)) -> _FusedConv. */

typedef struct Block {
  FloeGraph *g;
  int num_nodes;
} Block;

static FloeOutput conv_nd(FloeGraph *g, const char *name, FloeOutput x, FloeOutput f) {
  FloeNodeBuilder *b = floe_node_begin(g, "Conv", name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  floe_node_set_attr_string(b, "padding", "SAME");
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput const_random(FloeGraph *g, const char *name, FloeDType dt, int rank,
                               const int64_t *dims, uint64_t seed) {
  FloeTensor *t = harness_random(dt, rank, dims, seed, -0.5, 0.5);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

/* A residual block on x [?, 6, 5, 4] (channels last, batch unknown to the graph):
 * relu1 = Relu(BiasAdd(Conv(x, f1), b1)); relu2 = Relu(Add(BiasAdd(Conv(relu1, f2), b2), side)),
 * out = Square(relu2)
 * with side = x (same_shape) or a Const [4] (broadcast). */
static Block residual_block(FloeDType dt, bool broadcast_side) {
  Block m;
  FloeGraph *g = m.g = floe_graph_new();
  const int64_t fd[4] = {3, 3, 4, 4}, bd[1] = {4};
  int64_t xd[4] = {-1, 6, 5, 4};
  FloeOutput x = floe_placeholder(g, "x", dt, floe_shape_make(4, xd));
  FloeOutput f1 = const_random(g, "f1", dt, 4, fd, 1), b1 = const_random(g, "b1", dt, 1, bd, 2);
  FloeOutput f2 = const_random(g, "f2", dt, 4, fd, 3), b2 = const_random(g, "b2", dt, 1, bd, 4);
  FloeOutput r1 = floe_unary(g, "Relu", "relu1",
                             floe_binary(g, "BiasAdd", "bias1", conv_nd(g, "conv1", x, f1), b1));
  FloeOutput y = floe_binary(g, "BiasAdd", "bias2", conv_nd(g, "conv2", r1, f2), b2);
  FloeOutput side = broadcast_side ? const_random(g, "side", dt, 1, bd, 5) : x;
  /* The chains' last nodes are not fetched (that would keep them): out reads them. */
  floe_unary(g, "Square", "out",
             floe_unary(g, "Relu", "relu2", floe_binary(g, "Add", "sum", y, side)));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  m.num_nodes = floe_graph_num_nodes(g);
  return m;
}

/* Runs the fetches on feeds with fusion on or off; outs[i] new references; calls[k] how many
 * times ops[k] ran (ops NULL-terminated). */
static void run_block(const Block *m, int fusion, const FloeFeed *feeds, int nf,
                      const char *const *fetches, int n, FloeTensor **outs,
                      const char *const *ops, int64_t *calls) {
  setenv("FLOE_FUSION", fusion ? "1" : "0", 1);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(m->g, NULL);
  floe_session_set_profiling(s, 1);
  ck_assert_msg(floe_session_run(s, feeds, nf, fetches, n, NULL, 0, outs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int k = 0; ops && ops[k]; k++) calls[k] = harness_profile_calls(s, ops[k], "cpu:0");
  floe_session_free(s);
  floe_status_free(st);
  unsetenv("FLOE_FUSION");
}

static FloeTensor *block_input(FloeDType dt, int64_t batch) {
  const int64_t xd[4] = {batch, 6, 5, 4};
  return harness_random(dt, 4, xd, 9, -1, 1);
}

START_TEST(test_conv_nd_chains_fused) {
  const char *ops[] = {"_FusedConv", "Conv", "BiasAdd", "Add", "Relu", NULL};
  for (int bcast = 0; bcast < 2; bcast++) {
    Block m = residual_block(FLOE_F32, bcast);
    FloeTensor *x = block_input(FLOE_F32, 3);
    FloeFeed feed = {"x", x};
    const char *fetch = "out";
    FloeTensor *on, *off;
    int64_t c_on[5], c_off[5];
    run_block(&m, 1, &feed, 1, &fetch, 1, &on, ops, c_on);
    run_block(&m, 0, &feed, 1, &fetch, 1, &off, ops, c_off);
    /* Both chains fused whole; nothing of them runs on its own. */
    ck_assert_int_eq(c_on[0], 2);
    for (int k = 1; k < 5; k++) ck_assert_int_eq(c_on[k], 0);
    ck_assert_int_eq(c_off[0], 0);
    ck_assert_int_eq(c_off[1], 2);
    harness_assert_close(on, off, 1e-5, 1e-5, bcast ? "broadcast side" : "residual block");
    floe_tensor_release(on);
    floe_tensor_release(off);
    floe_tensor_release(x);
    /* The user's graph is as it was. */
    ck_assert_int_eq(floe_graph_num_nodes(m.g), m.num_nodes);
    for (int i = 0; i < floe_graph_num_nodes(m.g); i++)
      ck_assert(strncmp(floe_node_op(floe_graph_node(m.g, i)), "_Fused", 6) != 0);
    floe_graph_free(m.g);
  }
}
END_TEST

START_TEST(test_conv_nd_fetched_fed_or_f64_not_fused) {
  const char *ops[] = {"_FusedConv", "Conv", "BiasAdd", "Relu", NULL};
  Block m = residual_block(FLOE_F32, false);
  FloeTensor *x = block_input(FLOE_F32, 2);
  FloeTensor *on[2], *off[2];
  int64_t c[4];
  /* relu1 fetched: the first chain stops at the bias (its Relu runs), the second fuses. */
  FloeFeed feed = {"x", x};
  const char *fetches[2] = {"out", "relu1"};
  run_block(&m, 1, &feed, 1, fetches, 2, on, ops, c);
  ck_assert_int_eq(c[0], 2);
  ck_assert_int_eq(c[1], 0);
  ck_assert_int_eq(c[2], 0);
  ck_assert_int_eq(c[3], 1);
  run_block(&m, 0, &feed, 1, fetches, 2, off, ops, c);
  for (int i = 0; i < 2; i++) {
    harness_assert_close(on[i], off[i], 1e-5, 1e-5, fetches[i]);
    floe_tensor_release(on[i]);
    floe_tensor_release(off[i]);
  }
  /* f1 fed with other values: that run's first conv reads the fed filter (no stale kept
   * copy of the Const's), and agrees with the unfused ops. */
  const int64_t fd[4] = {3, 3, 4, 4};
  FloeTensor *f1 = harness_random(FLOE_F32, 4, fd, 77, -0.5, 0.5);
  FloeFeed feeds[2] = {{"x", x}, {"f1", f1}};
  const char *fetch = "out";
  FloeTensor *plain;
  run_block(&m, 1, &feed, 1, &fetch, 1, &plain, NULL, NULL);
  run_block(&m, 1, feeds, 2, &fetch, 1, &on[0], NULL, NULL);
  run_block(&m, 0, feeds, 2, &fetch, 1, &off[0], NULL, NULL);
  harness_assert_close(on[0], off[0], 1e-5, 1e-5, "fed filter");
  double *a = harness_values(plain), *b = harness_values(on[0]);
  bool differ = false;
  for (int64_t i = 0; i < floe_tensor_num_elements(plain); i++) differ |= fabs(a[i] - b[i]) > 1e-3;
  ck_assert_msg(differ, "feeding f1 changed nothing");
  free(a);
  free(b);
  floe_tensor_release(plain);
  floe_tensor_release(on[0]);
  floe_tensor_release(off[0]);
  floe_tensor_release(f1);
  floe_tensor_release(x);
  floe_graph_free(m.g);
  /* f64: the CPU has no _FusedConv kernel for it, so the ops run as they are. */
  m = residual_block(FLOE_F64, false);
  x = block_input(FLOE_F64, 2);
  FloeFeed feed64 = {"x", x};
  run_block(&m, 1, &feed64, 1, &fetch, 1, &on[0], ops, c);
  ck_assert_int_eq(c[0], 0);
  ck_assert_int_eq(c[1], 2);
  floe_tensor_release(on[0]);
  floe_tensor_release(x);
  floe_graph_free(m.g);
}
END_TEST

/* A Conv alone: fused (told its filter is constant) when the filter is a Const, left alone
 * when it is fed; a Conv whose output has two readers is not extended. */
START_TEST(test_conv_nd_alone) {
  const char *ops[] = {"_FusedConv", "Conv", "BiasAdd", NULL};
  for (int fed = 0; fed < 2; fed++) {
    Block m;
    FloeGraph *g = m.g = floe_graph_new();
    const int64_t xd[4] = {2, 6, 5, 4}, fd[4] = {3, 3, 4, 4}, bd[1] = {4};
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
    FloeOutput f = fed ? floe_placeholder(g, "f", FLOE_F32, floe_shape_make(4, fd))
                       : const_random(g, "f", FLOE_F32, 4, fd, 1);
    FloeOutput y = conv_nd(g, "conv", x, f);
    /* Two readers of the conv: a BiasAdd and the Identity. */
    floe_binary(g, "Add", "out", floe_binary(g, "BiasAdd", "biased", y,
                                             const_random(g, "b", FLOE_F32, 1, bd, 2)),
                floe_unary(g, "Identity", "id", y));
    FloeTensor *xt = harness_random(FLOE_F32, 4, xd, 3, -1, 1);
    FloeTensor *ft = harness_random(FLOE_F32, 4, fd, 1, -0.5, 0.5);
    FloeFeed feeds[2] = {{"x", xt}, {"f", ft}};
    const char *fetch = "out";
    FloeTensor *on, *off;
    int64_t c[3];
    run_block(&m, 1, feeds, 1 + fed, &fetch, 1, &on, ops, c);
    ck_assert_int_eq(c[0], fed ? 0 : 1);
    ck_assert_int_eq(c[1], fed ? 1 : 0);
    ck_assert_int_eq(c[2], 1);
    run_block(&m, 0, feeds, 1 + fed, &fetch, 1, &off, NULL, NULL);
    harness_assert_close(on, off, 1e-5, 1e-5, fed ? "fed filter" : "constant filter");
    floe_tensor_release(on);
    floe_tensor_release(off);
    floe_tensor_release(xt);
    floe_tensor_release(ft);
    floe_graph_free(m.g);
  }
}
END_TEST

/* One activation chain after a convolution: op names in order, with their constants. */
typedef struct ActStep {
  const char *op; /* a unary op, or a binary one with the constant c */
  double c;
  int const_first;  /* the constant is the binary op's first input */
  double alpha;     /* LeakyRelu and Elu (0: the op's default) */
} ActStep;

/* y = the steps applied to in, each op a node "a<k>"; the last is "act_out". gate 1 or 2:
 * y = in times that (SiLU, HardSwish), as Mul(in, chain) or Mul(chain, in). */
static FloeOutput act_chain(FloeGraph *g, FloeOutput in, const ActStep *steps, int n);
static FloeOutput act_gated(FloeGraph *g, FloeOutput in, const ActStep *steps, int n, int gate) {
  if (!gate) return act_chain(g, in, steps, n);
  FloeOutput c = act_chain(g, in, steps, n);
  return gate == 1 ? floe_binary(g, "Mul", "gate", in, c) : floe_binary(g, "Mul", "gate", c, in);
}

static FloeOutput act_chain(FloeGraph *g, FloeOutput in, const ActStep *steps, int n) {
  static const char *const binary[] = {"Mul", "Add", "Sub", "Maximum", "Minimum", NULL};
  FloeOutput y = in;
  for (int k = 0; k < n; k++) {
    char name[16], cname[16];
    snprintf(name, sizeof name, k == n - 1 ? "act_out" : "a%d", k);
    bool bin = false;
    for (int b = 0; binary[b]; b++) bin |= !strcmp(steps[k].op, binary[b]);
    FloeNodeBuilder *b = floe_node_begin(g, steps[k].op, name);
    if (bin) {
      snprintf(cname, sizeof cname, "c%d", k);
      FloeTensor *t = floe_tensor_scalar_f32((float)steps[k].c, NULL);
      FloeOutput c = floe_const(g, cname, t);
      floe_tensor_release(t);
      floe_node_add_input(b, steps[k].const_first ? c : y);
      floe_node_add_input(b, steps[k].const_first ? y : c);
    } else {
      floe_node_add_input(b, y);
      if (steps[k].alpha != 0) floe_node_set_attr_float(b, "alpha", steps[k].alpha);
    }
    y = floe_out(floe_node_finish(b), 0);
  }
  return y;
}

/* A clip tail (ReLU6 as ONNX exports it: Maximum 0 then Minimum 6) runs inside the
 * convolution's primitive as its clip post-op: the same values as the tail run after the
 * primitive (FLOE_CONV_CLIP_POSTOP=0), bitwise, except that a NaN (from an image with a NaN
 * in it) comes out as the clip's low bound, where the tail after the primitive and the ops
 * alone keep it. */
START_TEST(test_conv_clip_in_primitive) {
  static const ActStep relu6[] = {{"Maximum", 0, 0, 0}, {"Minimum", 6, 0, 0}};
  const int64_t xd[4] = {1, 9, 8, 16}, fd[4] = {3, 3, 16, 32};
  FloeTensor *xt = harness_random(FLOE_F32, 4, xd, 15, -2, 2);
  ((float *)floe_tensor_data(xt))[(4 * 8 + 4) * 16] = NAN; /* the middle pixel */
  FloeFeed feed = {"x", xt};
  Block m;
  FloeGraph *g = m.g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  floe_unary(g, "Identity", "out",
             act_chain(g, conv_nd(g, "conv", x, const_random(g, "f", FLOE_F32, 4, fd, 16)),
                       relu6, 2));
  const char *fetch = "out";
  FloeTensor *post_op, *after, *alone;
  setenv("FLOE_CONV_WINOGRAD", "0", 1); /* (oneDNN's Winograd takes no clip post-op) */
  run_block(&m, 1, &feed, 1, &fetch, 1, &post_op, NULL, NULL);
  setenv("FLOE_CONV_CLIP_POSTOP", "0", 1);
  run_block(&m, 1, &feed, 1, &fetch, 1, &after, NULL, NULL);
  unsetenv("FLOE_CONV_CLIP_POSTOP");
  run_block(&m, 0, &feed, 1, &fetch, 1, &alone, NULL, NULL);
  unsetenv("FLOE_CONV_WINOGRAD");
  const float *p = floe_tensor_data(post_op), *a = floe_tensor_data(after),
              *u = floe_tensor_data(alone);
  int64_t nans = 0;
  for (int64_t i = 0; i < floe_tensor_num_elements(alone); i++) {
    if (isnan(u[i])) {
      nans++;
      ck_assert_msg(isnan(a[i]) && p[i] == 0.0f, "at %lld: after %g, post-op %g, want NaN and 0",
                    (long long)i, a[i], p[i]);
      continue;
    }
    /* the fused runs compute the same convolution (blocked, direct) and apply the clip
     * inside or after it: bitwise; the ops alone (channels-last) sum in another order */
    ck_assert_msg(p[i] == a[i] && fabsf(a[i] - u[i]) <= 1e-4f,
                  "at %lld: post-op %g, after %g, alone %g", (long long)i, p[i], a[i], u[i]);
  }
  ck_assert_int_eq(nans, 9 * 32); /* the 3x3 windows over the NaN, every channel */
  floe_tensor_release(post_op);
  floe_tensor_release(after);
  floe_tensor_release(alone);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

/* Elementwise ops after a convolution are fused into it (activations) and computed as the
 * unfused kernels compute them: the fused chain's values are bitwise those of the same ops
 * run alone on the convolution's values; nothing of the chain runs on its own; the profile
 * names what was fused. ReLU6 as ONNX exports it (Maximum then Minimum), Relu6, Sigmoid,
 * Tanh, LeakyRelu, Elu, scales and shifts, constants on either side, SiLU and HardSwish
 * (the value times a chain of it), after a bias and a ReLU too; and a _FusedConv whose
 * activations name no known op, or a Gate without its Save, is an error naming them. */
START_TEST(test_conv_nd_activations_fused) {
  static const ActStep chains[][4] = {
      {{"Maximum", 0, 0, 0}, {"Minimum", 6, 0, 0}},
      {{"Relu6", 0, 0, 0}},
      {{"Sigmoid", 0, 0, 0}, {"Mul", 2.5, 1, 0}},
      {{"Tanh", 0, 0, 0}, {"Add", 0.25, 0, 0}, {"Sub", 1, 0, 0}},
      {{"LeakyRelu", 0, 0, 0.1}},
      {{"Elu", 0, 0, 0.7}, {"Maximum", 0.3, 1, 0}, {"Minimum", -0.0, 1, 0}},
      {{"Sigmoid", 0, 0, 0}},                                    /* SiLU: x * sigmoid(x) */
      {{"Mul", 1.0 / 6, 0, 0}, {"Add", 0.5, 0, 0}, {"Minimum", 1, 0, 0}, {"Maximum", 0, 0, 0}},
                                                                 /* HardSwish, as imported */
      {{"Mul", 0.2, 0, 0}, {"Add", 0.5, 0, 0}, {"Minimum", 1, 0, 0}, {"Maximum", 0, 0, 0}},
  };                                                             /* a hard sigmoid */
  static const int lens[] = {2, 1, 2, 3, 1, 3, 1, 4, 4};
  static const int gates[] = {0, 0, 0, 0, 0, 0, 1, 2, 0};
  /* the chains oneDNN applies as post-ops, not bitwise (FLOE_CONV_SWISH_POSTOP) */
  static const bool post_op[] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
  /* two small images (a part each), and one large one, cut into parts of rows or channels
   * that each apply the activations to their own output (channels-last: the fetched
   * convolution is not blocked, and a blocked one would sum in another order) */
  static const int64_t xds[2][4] = {{2, 7, 6, 8}, {1, 40, 36, 32}};
  static const int64_t fds[2][4] = {{3, 3, 8, 16}, {3, 3, 32, 48}};
  for (int size = 0; size < 2; size++) {
  if (size) setenv("FLOE_BLOCKED_LAYOUT", "0", 1);
  const int64_t *xd = xds[size], *fd = fds[size], bd[1] = {fd[3]};
  int64_t yd[4] = {xd[0], xd[1], xd[2], fd[3]};
  FloeTensor *xt = harness_random(FLOE_F32, 4, xd, 5, -2, 2);
  FloeFeed feed = {"x", xt};
  for (int ci = 0; ci < (int)(sizeof lens / sizeof *lens); ci++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      /* fused: acts(conv) (with_bias: acts(Relu(BiasAdd(conv, b)))) */
      Block m;
      FloeGraph *g = m.g = floe_graph_new();
      FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
      FloeOutput y = conv_nd(g, "conv", x, const_random(g, "f", FLOE_F32, 4, fd, 1));
      if (with_bias)
        y = floe_unary(g, "Relu", "relu", floe_binary(g, "BiasAdd", "bias", y,
                                                     const_random(g, "b", FLOE_F32, 1, bd, 2)));
      floe_unary(g, "Identity", "out", act_gated(g, y, chains[ci], lens[ci], gates[ci]));
      ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
      const char *ops[] = {"_FusedConv", "Conv", chains[ci][0].op,
                           gates[ci] ? "Mul" : chains[ci][lens[ci] - 1].op, NULL};
      const char *fetch = "out";
      FloeTensor *fused, *conv_vals, *want;
      int64_t calls[4];
      run_block(&m, 1, &feed, 1, &fetch, 1, &fused, ops, calls);
      ck_assert_msg(calls[0] == 1 && calls[1] == 0 && calls[2] == 0 && calls[3] == 0,
                    "chain %d%s: _FusedConv ran %lld times, Conv %lld, %s %lld, %s %lld", ci,
                    with_bias ? " (bias, relu)" : "", (long long)calls[0], (long long)calls[1],
                    ops[2], (long long)calls[2], ops[3], (long long)calls[3]);
      if (with_bias) { /* the bias inside the primitive rounds otherwise: close */
        run_block(&m, 0, &feed, 1, &fetch, 1, &want, NULL, NULL);
        harness_assert_close(fused, want, 1e-5, 1e-5, chains[ci][0].op);
        floe_tensor_release(fused);
        floe_tensor_release(want);
        floe_graph_free(g);
        continue;
      }
      /* the convolution's own values (fetched: the chain stays out of it; the same kernel
       * computes them), then the ops alone on them: bitwise */
      const char *cfetch = "conv";
      run_block(&m, 1, &feed, 1, &cfetch, 1, &conv_vals, NULL, NULL);
      Block r;
      FloeGraph *rg = r.g = floe_graph_new();
      FloeOutput c = floe_placeholder(rg, "c", FLOE_F32, floe_shape_make(4, yd));
      floe_unary(rg, "Identity", "out", act_gated(rg, c, chains[ci], lens[ci], gates[ci]));
      FloeFeed cf = {"c", conv_vals};
      run_block(&r, 0, &cf, 1, &fetch, 1, &want, NULL, NULL);
      if (post_op[ci]) {
        /* SiLU, HardSwish and a hard sigmoid are oneDNN's swish, hardswish, and linear and
         * clip post-ops by default: its own exp and roundings, within 8 ulps of the larger
         * of the result and the convolution's value (HardSwish near -3 cancels: the
         * imported x / 6 + 0.5 rounds there where oneDNN's x + 3 does not), and 1e-37
         * near 0; FLOE_CONV_SWISH_POSTOP=0 keeps the tail, bitwise */
        const float *fv = floe_tensor_data(fused), *wv = floe_tensor_data(want);
        const float *cv = floe_tensor_data(conv_vals);
        for (int64_t i = 0; i < floe_tensor_num_elements(want); i++)
          ck_assert_msg(fabsf(fv[i] - wv[i]) <= 8 * 5.96e-8f * fmaxf(fabsf(wv[i]), fabsf(cv[i])) +
                                                    1e-37f,
                        "chain %d as a post-op, size %d, at %lld: %a, the ops alone %a", ci,
                        size, (long long)i, (double)fv[i], (double)wv[i]);
        floe_tensor_release(fused);
        setenv("FLOE_CONV_SWISH_POSTOP", "0", 1);
        run_block(&m, 1, &feed, 1, &fetch, 1, &fused, NULL, NULL);
        unsetenv("FLOE_CONV_SWISH_POSTOP");
      }
      ck_assert_msg(memcmp(floe_tensor_data(fused), floe_tensor_data(want),
                           (size_t)floe_tensor_num_elements(want) * sizeof(float)) == 0,
                    "chain %d, size %d: the fused activations differ from the ops run alone", ci,
                    size);
      floe_tensor_release(fused);
      floe_tensor_release(conv_vals);
      floe_tensor_release(want);
      floe_graph_free(rg);
      floe_graph_free(g);
    }
  floe_tensor_release(xt);
  }
  unsetenv("FLOE_BLOCKED_LAYOUT");
  /* the profile names the fused ops */
  const int64_t *xd = xds[0], *fd = fds[0];
  Block m;
  FloeGraph *g = m.g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  floe_unary(g, "Identity", "out", act_chain(g, conv_nd(g, "conv", x, const_random(g, "f", FLOE_F32, 4, fd, 1)),
                                             chains[0], 2));
  FloeTensor *x2 = harness_random(FLOE_F32, 4, xd, 6, -2, 2);
  FloeFeed f2 = {"x", x2};
  const char *label[] = {"_FusedConv(Conv+Maximum+Minimum)", NULL};
  int64_t n_label;
  const char *fetch = "out";
  FloeTensor *out;
  run_block(&m, 1, &f2, 1, &fetch, 1, &out, label, &n_label);
  ck_assert_int_eq(n_label, 1);
  floe_tensor_release(out);
  floe_graph_free(g);
  /* an activation no kernel knows */
  g = floe_graph_new();
  FloeOutput xb = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeNodeBuilder *b = floe_node_begin(g, "_FusedConv", "bad");
  floe_node_add_input(b, xb);
  floe_node_add_input(b, const_random(g, "f", FLOE_F32, 4, fd, 1));
  floe_node_add_input_list(b, NULL, 0);
  floe_node_set_attr_string(b, "padding", "SAME");
  floe_node_set_attr_string(b, "activations", "Relu,Softsign");
  floe_node_set_attr_float_list(b, "activation_alpha", (const double[]){0, 0}, 2);
  floe_node_finish(b);
  b = floe_node_begin(g, "_FusedConv", "ungated");
  floe_node_add_input(b, xb);
  floe_node_add_input(b, floe_out(floe_graph_find(g, "f"), 0));
  floe_node_add_input_list(b, NULL, 0);
  floe_node_set_attr_string(b, "padding", "SAME");
  floe_node_set_attr_string(b, "activations", "Sigmoid,Gate");
  floe_node_set_attr_float_list(b, "activation_alpha", (const double[]){0, 0}, 2);
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  const char *bad[] = {"bad", "ungated"}, *want[] = {"Relu,Softsign", "Sigmoid,Gate"};
  for (int k = 0; k < 2; k++) {
    ck_assert_int_ne(floe_session_run(s, &f2, 1, &bad[k], 1, NULL, 0, &out, st), FLOE_OK);
    ck_assert_msg(strstr(floe_status_message(st), want[k]) &&
                  strstr(floe_status_message(st), bad[k]), "%s", floe_status_message(st));
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_tensor_release(x2);
}
END_TEST


/* ---- matrix products ---- */

/* y = MatMul(x [5, 37], w) with w a Const [37, 600] (or [600, 37], transpose_b: ONNX's Gemm),
 * N = 600 so a row spans more than one pass of the tail. */
static FloeOutput matmul(FloeGraph *g, FloeDType dt, FloeOutput x, bool tb) {
  const int64_t wd[2] = {tb ? 600 : 37, tb ? 37 : 600};
  FloeNodeBuilder *b = floe_node_begin(g, "MatMul", "mm");
  floe_node_add_input(b, x);
  floe_node_add_input(b, const_random(g, "w", dt, 2, wd, 11));
  floe_node_set_attr_bool(b, "transpose_b", tb);
  return floe_out(floe_node_finish(b), 0);
}

/* Runs m with fusion off and checks each of the n fetches bitwise against on[] (fusion on);
 * releases both. */
static void assert_same_unfused(const Block *m, const FloeFeed *feed, const char *const *fetches,
                                int n, FloeTensor **on, int kase) {
  FloeTensor *off[4];
  run_block(m, 0, feed, 1, fetches, n, off, NULL, NULL);
  for (int k = 0; k < n; k++) {
    ck_assert_msg(floe_tensor_nbytes(on[k]) == floe_tensor_nbytes(off[k]) &&
                      memcmp(floe_tensor_data(on[k]), floe_tensor_data(off[k]),
                             floe_tensor_nbytes(on[k])) == 0,
                  "case %d: %s differs with fusion on", kase, fetches[k]);
    floe_tensor_release(on[k]);
    floe_tensor_release(off[k]);
  }
}

/* MatMul + bias + activations -> _FusedMatMul, bitwise the unfused ops: a dense layer's
 * BiasAdd + Relu (and its gradients), Gemm's Add of a [1, N] bias (first) or a [N] one then
 * a chain or a gate, an activation alone, a bias alone. The intermediate ops do not run. */
START_TEST(test_matmul_chains_fused) {
  static const ActStep chains[][4] = {
      {{"Relu", 0, 0, 0}},
      {{"Mul", 1.0 / 6, 0, 0}, {"Add", 0.5, 0, 0}, {"Minimum", 1, 0, 0}, {"Maximum", 0, 0, 0}},
      {{"Sigmoid", 0, 0, 0}, {"Mul", 2.5, 1, 0}},
      {{"LeakyRelu", 0, 0, 0.1}},
      {{"Tanh", 0, 0, 0}},
  };
  /* bias: 0 none, 1 BiasAdd [N], 2 Add([1, N], y), 3 Add(y, [N]) */
  static const int lens[] = {1, 4, 2, 1, 0}, gates[] = {0, 2, 0, 0, 0}, bias[] = {1, 2, 3, 0, 3};
  const int64_t xd[2] = {5, 37};
  FloeTensor *xt = harness_random(FLOE_F32, 2, xd, 5, -2, 2);
  FloeFeed feed = {"x", xt};
  for (int ci = 0; ci < (int)(sizeof lens / sizeof *lens); ci++) {
    Block m;
    FloeGraph *g = m.g = floe_graph_new();
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
    FloeOutput y = matmul(g, FLOE_F32, x, ci % 2 == 1);
    const char *bias_op = bias[ci] == 1 ? "BiasAdd" : "Add";
    if (bias[ci]) {
      int64_t bd[2] = {1, 600};
      FloeOutput b = bias[ci] == 2 ? const_random(g, "b", FLOE_F32, 2, bd, 2)
                                   : const_random(g, "b", FLOE_F32, 1, bd + 1, 2);
      y = bias[ci] == 2 ? floe_binary(g, "Add", "bias", b, y) : floe_binary(g, bias_op, "bias", y, b);
    }
    FloeOutput out = floe_unary(g, "Identity", "out", act_gated(g, y, chains[ci], lens[ci], gates[ci]));
    const char *fetches[4] = {"out"};
    int nfetch = 1;
    if (ci == 0) { /* a dense layer being trained: the gradients too */
      FloeTensor *axes_t = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){0, 1});
      FloeOutput axes = floe_const(g, "axes", axes_t);
      floe_tensor_release(axes_t);
      FloeOutput loss = floe_binary(g, "Sum", "loss", floe_unary(g, "Square", "sq", out), axes);
      FloeOutput xs[3] = {x, floe_out(floe_graph_find(g, "w"), 0), floe_out(floe_graph_find(g, "b"), 0)};
      FloeOutput d[3];
      FloeStatus *st = floe_status_new();
      ck_assert_msg(floe_gradients(g, &loss, 1, xs, 3, NULL, d, st) == FLOE_OK, "%s",
                    floe_status_message(st));
      floe_status_free(st);
      for (int k = 0; k < 3; k++) fetches[nfetch++] = floe_node_name(d[k].node);
    }
    ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
    const char *ops[] = {"_FusedMatMul", "MatMul", bias[ci] ? bias_op : chains[ci][0].op, NULL};
    FloeTensor *on[4];
    int64_t calls[3];
    run_block(&m, 1, &feed, 1, fetches, nfetch, on, ops, calls);
    /* the gradients have products of their own (x^T dy, dy w^T) */
    ck_assert_msg(calls[0] == 1 && calls[1] == (ci == 0 ? 2 : 0) && calls[2] == 0,
                  "chain %d: _FusedMatMul ran %lld times, MatMul %lld, %s %lld", ci,
                  (long long)calls[0], (long long)calls[1], ops[2], (long long)calls[2]);
    assert_same_unfused(&m, &feed, fetches, nfetch, on, ci);
    floe_graph_free(g);
  }
  floe_tensor_release(xt);
}
END_TEST

/* A product is left alone when its result is fetched or read twice, the other operand of
 * the Add is not a per-column bias ([M, N]), or it is f64 (no fused kernel). */
START_TEST(test_matmul_not_fused) {
  const int64_t xd[2] = {5, 37};
  for (int kase = 0; kase < 4; kase++) {
    FloeDType dt = kase == 3 ? FLOE_F64 : FLOE_F32;
    FloeTensor *xt = harness_random(dt, 2, xd, 5, -2, 2);
    FloeFeed feed = {"x", xt};
    Block m;
    FloeGraph *g = m.g = floe_graph_new();
    FloeOutput x = floe_placeholder(g, "x", dt, floe_shape_make(2, xd));
    FloeOutput y = matmul(g, dt, x, false);
    FloeOutput b = kase == 2 ? const_random(g, "b", dt, 2, (const int64_t[]){5, 600}, 2)
                             : const_random(g, "b", dt, 1, (const int64_t[]){600}, 2);
    FloeOutput r = floe_unary(g, "Relu", "relu", floe_binary(g, "Add", "bias", y, b));
    if (kase == 1) r = floe_binary(g, "Add", "twice", r, floe_unary(g, "Neg", "neg", y));
    floe_unary(g, "Identity", "out", r);
    const char *fetches[2] = {"out", "mm"};
    const char *ops[] = {"_FusedMatMul", "MatMul", NULL};
    FloeTensor *on[2];
    int64_t calls[2];
    int nf = kase == 0 ? 2 : 1;
    run_block(&m, 1, &feed, 1, fetches, nf, on, ops, calls);
    ck_assert_msg(calls[0] == 0 && calls[1] == 1, "case %d: _FusedMatMul ran %lld, MatMul %lld",
                  kase, (long long)calls[0], (long long)calls[1]);
    assert_same_unfused(&m, &feed, fetches, nf, on, kase);
    floe_graph_free(g);
    floe_tensor_release(xt);
  }
}
END_TEST

/* A _FusedMatMul built by hand: a bias that is not one value per column, a fused_bias that
 * disagrees with the inputs, and differentiating through one are errors that say so. */
START_TEST(test_fused_matmul_errors) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (const int64_t[]){5, 37}));
  FloeOutput w = const_random(g, "w", FLOE_F32, 2, (const int64_t[]){37, 600}, 1);
  FloeOutput b3 = const_random(g, "b3", FLOE_F32, 1, (const int64_t[]){3}, 2);
  const char *names[2] = {"wrong_bias", "no_bias"};
  for (int k = 0; k < 2; k++) {
    FloeNodeBuilder *b = floe_node_begin(g, "_FusedMatMul", names[k]);
    floe_node_add_input(b, x);
    floe_node_add_input(b, w);
    floe_node_add_input_list(b, &b3, k == 0 ? 1 : 0);
    floe_node_set_attr_bool(b, "fused_bias", 1);
    floe_node_finish(b);
  }
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xt = harness_random(FLOE_F32, 2, (const int64_t[]){5, 37}, 3, -1, 1);
  FloeFeed feed = {"x", xt};
  FloeSession *s = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  FloeTensor *out;
  const char *want[2] = {"[600] or [1, 600]", "takes 3 inputs, got 2"};
  for (int k = 0; k < 2; k++) {
    ck_assert_int_ne(floe_session_run(s, &feed, 1, &names[k], 1, NULL, 0, &out, st), FLOE_OK);
    ck_assert_msg(strstr(floe_status_message(st), want[k]) &&
                      strstr(floe_status_message(st), names[k]),
                  "%s", floe_status_message(st));
  }
  FloeOutput y = floe_out(floe_graph_find(g, "wrong_bias"), 0), dx;
  ck_assert_int_ne(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), "wrong_bias") &&
                    strstr(floe_status_message(st), "MatMul, BiasAdd"),
                "%s", floe_status_message(st));
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_tensor_release(xt);
}
END_TEST

int main(void) {
  setenv("FLOE_NUM_THREADS", "2", 0);
  Suite *s = suite_create("fuse");
  TCase *tc = tcase_create("fuse");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fused_equals_unfused);
  tcase_add_test(tc, test_fetched_or_shared_results_are_not_fused);
  tcase_add_test(tc, test_conv_nd_chains_fused);
  tcase_add_test(tc, test_conv_nd_fetched_fed_or_f64_not_fused);
  tcase_add_test(tc, test_conv_nd_alone);
  tcase_add_test(tc, test_conv_nd_activations_fused);
  tcase_add_test(tc, test_conv_clip_in_primitive);
  tcase_add_test(tc, test_matmul_chains_fused);
  tcase_add_test(tc, test_matmul_not_fused);
  tcase_add_test(tc, test_fused_matmul_errors);
  suite_add_tcase(s, tc);
  return harness_run_suite(s);
}
