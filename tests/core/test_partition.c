/* SPDX-License-Identifier: Apache-2.0 */
/* test_partition.c - graphs split across devices: placement, _Send/_Recv on cut edges,
 * control edges, conds and while loops whose nodes sit on different devices, failures that
 * must not hang, and the cost-model placer. The host is presented as two CPU devices
 * (FLOE_CPU_DEVICES=2), so every result can be compared with the same graph on one device.
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h" /* floe__node_set_input: a loop's back edge, built by hand */

static FloeRuntime *rt;

static void setup(void) {
  /* the graphs compute on constants to exercise placement and transfers: not folded away */
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  setenv("FLOE_CPU_DEVICES", "2", 1);
  rt = harness_runtime(2);
  unsetenv("FLOE_CPU_DEVICES");
}

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

static FloeSession *session_opts(FloeGraph *g, const char *devices, int soft, int compress,
                                 FloeStatus *st) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.devices = devices;
  o.allow_soft_placement = soft;
  o.compress_transfers = compress;
  return floe_session_new(g, &o, st);
}

static FloeSession *session(FloeGraph *g) { return harness_session(g, rt); }

static FloeOutput constf(FloeGraph *g, const char *name, int rank, const int64_t *dims, uint64_t seed) {
  FloeTensor *t = harness_random(FLOE_F32, rank, dims, seed, -1, 1);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeTensor *run1(FloeSession *s, const char *fetch, FloeStatus *st) {
  FloeTensor *out = NULL;
  if (floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) return NULL;
  return out;
}


static void assert_close(const FloeTensor *a, const FloeTensor *b, double tol) {
  ck_assert_int_eq(floe_tensor_num_elements(a), floe_tensor_num_elements(b));
  double *x = harness_values(a), *y = harness_values(b);
  for (int64_t i = 0; i < floe_tensor_num_elements(a); i++)
    ck_assert_msg(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])), "element %lld: %g vs %g",
                  (long long)i, x[i], y[i]);
  free(x);
  free(y);
}

/* z = relu(a @ b) + c with the MatMul on cpu:1 and the rest on cpu:0: two cut edges each
 * way; the same graph with no requests gives the reference. */
static FloeGraph *chain(bool split) {
  FloeGraph *g = floe_graph_new();
  int64_t da[2] = {8, 16}, db[2] = {16, 4}, dc[2] = {8, 4};
  if (split) floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput a = constf(g, "a", 2, da, 1), b = constf(g, "b", 2, db, 2), c = constf(g, "c", 2, dc, 3);
  if (split) floe_graph_set_device_scope(g, "cpu:1");
  FloeOutput m = floe_matmul(g, "m", a, b, 0, 0);
  if (split) floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput r = floe_unary(g, "Relu", "r", m);
  floe_binary(g, "Add", "z", r, c);
  return g;
}

START_TEST(cut_edges_give_the_same_result) {
  FloeGraph *g1 = chain(false), *g2 = chain(true);
  FloeSession *s1 = session(g1), *s2 = session(g2);
  floe_session_set_profiling(s2, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *ref = run1(s1, "z", st);
  ck_assert_msg(ref, "%s", floe_status_message(st));
  for (int rep = 0; rep < 3; rep++) { /* a cached plan, a fresh rendezvous each step */
    FloeTensor *got = run1(s2, "z", st);
    ck_assert_msg(got, "%s", floe_status_message(st));
    assert_close(got, ref, 0);
    floe_tensor_release(got);
  }
  ck_assert_int_eq(harness_profile_calls(s2, "MatMul", "cpu:1"), 3);
  ck_assert_int_eq(harness_profile_calls(s2, "Add", "cpu:0"), 3);
  /* a and b go to cpu:1, m comes back: three pairs per step */
  ck_assert_int_eq(harness_profile_calls(s2, "_Recv", "cpu:1"), 6);
  ck_assert_int_eq(harness_profile_calls(s2, "_Recv", "cpu:0"), 3);
  ck_assert_int_eq(harness_profile_calls(s2, "_Send", "cpu:0"), 6);
  floe_tensor_release(ref);
  floe_status_free(st);
  floe_session_free(s1);
  floe_session_free(s2);
  floe_graph_free(g1);
  floe_graph_free(g2);
}
END_TEST

/* One tensor read by two nodes on the other device crosses once. */
START_TEST(one_transfer_per_tensor_and_device) {
  FloeGraph *g = floe_graph_new();
  int64_t d[1] = {5};
  floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput a = constf(g, "a", 1, d, 4);
  floe_graph_set_device_scope(g, "cpu:1");
  FloeOutput x = floe_unary(g, "Neg", "x", a), y = floe_unary(g, "Square", "y", a);
  floe_binary(g, "Add", "z", x, y);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = session(g);
  floe_session_set_profiling(s, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *z = run1(s, "z", st);
  ck_assert_msg(z, "%s", floe_status_message(st));
  ck_assert_int_eq(harness_profile_calls(s, "_Recv", "cpu:1"), 1);
  FloeTensor *at = run1(s, "a", st);
  const float *av = floe_tensor_data(at), *zv = floe_tensor_data(z);
  for (int i = 0; i < 5; i++) ck_assert_float_eq_tol(zv[i], -av[i] + av[i] * av[i], 1e-6);
  floe_tensor_release(z);
  floe_tensor_release(at);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A control edge across devices orders an assignment on cpu:0 before a read on cpu:1. */
START_TEST(control_edge_across_devices) {
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, "cpu:0");
  FloeVariable v = floe_variable(g, "v", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  FloeOutput seven = floe_const_f32(g, "seven", 7.0f);
  FloeNode *assign = floe_assign(g, "assign", v.handle, seven);
  floe_graph_set_device_scope(g, "cpu:1");
  FloeNodeBuilder *b = floe_node_begin(g, "Identity", "after");
  floe_node_add_input(b, floe_const_f32(g, "one", 1.0f));
  floe_node_add_control_input(b, assign);
  FloeNode *after = floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  (void)after;
  FloeSession *s = session(g);
  floe_session_set_profiling(s, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *o = run1(s, "after", st);
  ck_assert_msg(o, "%s", floe_status_message(st));
  ck_assert_int_eq(harness_profile_calls(s, "_ControlSend", "cpu:0"), 1);
  FloeTensor *val = run1(s, "v/read", st);
  ck_assert_msg(val, "%s", floe_status_message(st));
  ck_assert_float_eq(*(const float *)floe_tensor_data(val), 7.0f);
  floe_tensor_release(o);
  floe_tensor_release(val);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

static floe_code branch_double(FloeGraph *g, void *arg, const FloeOutput *ins, int n,
                               FloeOutput *outs, int no) {
  (void)arg, (void)n, (void)no;
  floe_graph_set_device_scope(g, "cpu:1");
  outs[0] = floe_binary(g, "Add", NULL, ins[0], ins[0]);
  floe_graph_set_device_scope(g, "cpu:0");
  return floe_graph_status(g);
}

static floe_code branch_neg(FloeGraph *g, void *arg, const FloeOutput *ins, int n, FloeOutput *outs,
                            int no) {
  (void)arg, (void)n, (void)no;
  floe_graph_set_device_scope(g, "cpu:1");
  outs[0] = floe_unary(g, "Neg", NULL, ins[0]);
  floe_graph_set_device_scope(g, "cpu:0");
  return floe_graph_status(g);
}

/* A cond whose pred is on cpu:0 and whose branches run on cpu:1: the untaken branch's
 * values cross as dead flags. */
START_TEST(cond_across_devices) {
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput p = floe_placeholder(g, "p", FLOE_BOOL, floe_shape_scalar());
  FloeOutput x = floe_const_f32(g, "x", 3.0f), out;
  ck_assert_int_eq(floe_cond(g, "c", p, &x, 1, branch_double, branch_neg, NULL, &out, 1), FLOE_OK);
  floe_unary(g, "Square", "y", out);
  FloeSession *s = session(g);
  FloeStatus *st = floe_status_new();
  for (int pv = 0; pv < 2; pv++) {
    uint8_t b = (uint8_t)pv;
    FloeTensor *pt = harness_tensor(FLOE_BOOL, 0, NULL, &b);
    FloeFeed f = {"p", pt};
    const char *fetch = "y";
    FloeTensor *y = NULL;
    ck_assert_msg(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &y, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    float want = pv ? 36.0f : 9.0f;
    ck_assert_float_eq(*(const float *)floe_tensor_data(y), want);
    floe_tensor_release(y);
    floe_tensor_release(pt);
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

typedef struct LoopArg {
  int limit;
  const char *body_dev;
} LoopArg;

static floe_code cond_i_less(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  LoopArg *a = arg;
  (void)n;
  floe_graph_set_device_scope(g, "cpu:0");
  *pred = floe_binary(g, "Less", NULL, v[0], floe_const_f32(g, NULL, (float)a->limit));
  return floe_graph_status(g);
}

/* (i, acc) -> (i + 1, acc + i*i), the arithmetic on body_dev */
static floe_code body_squares(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  LoopArg *a = arg;
  (void)n;
  floe_graph_set_device_scope(g, a->body_dev);
  next[0] = floe_binary(g, "Add", NULL, v[0], floe_const_f32(g, NULL, 1.0f));
  next[1] = floe_binary(g, "Add", NULL, v[1], floe_binary(g, "Mul", NULL, v[0], v[0]));
  floe_graph_set_device_scope(g, "cpu:0");
  return floe_graph_status(g);
}

/* A while loop whose condition runs on cpu:0 and whose body runs on cpu:1: each iteration's
 * values cross both ways, keyed by frame and iteration. */
START_TEST(while_loop_across_devices) {
  for (int limit = 0; limit <= 12; limit += 6) {
    FloeGraph *g = floe_graph_new();
    floe_graph_set_device_scope(g, "cpu:0");
    FloeOutput init[2] = {floe_const_f32(g, "i0", 0), floe_const_f32(g, "acc0", 0)}, res[2];
    LoopArg a = {limit, "cpu:1"};
    FloeWhileOptions o;
    floe_while_options_init(&o);
    o.parallel_iterations = 4;
    ck_assert_int_eq(floe_while_loop(g, "w", cond_i_less, body_squares, &a, init, 2, &o, res), FLOE_OK);
    floe_unary(g, "Identity", "out", res[1]);
    ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
    FloeSession *s = session(g);
    floe_session_set_profiling(s, 1);
    FloeStatus *st = floe_status_new();
    for (int rep = 0; rep < 2; rep++) {
      FloeTensor *out = run1(s, "out", st);
      ck_assert_msg(out, "limit %d: %s", limit, floe_status_message(st));
      double want = 0;
      for (int i = 0; i < limit; i++) want += (double)i * i;
      ck_assert_float_eq(*(const float *)floe_tensor_data(out), (float)want);
      floe_tensor_release(out);
    }
    ck_assert_int_eq(harness_profile_calls(s, "Mul", "cpu:1"), 2 * limit);
    floe_status_free(st);
    floe_session_free(s);
    floe_graph_free(g);
  }
}
END_TEST

static floe_code body_outer(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next);

/* Nested: for j < i (inner, on cpu:1) inside for i < 4 (outer, cond on cpu:0). */
typedef struct Nest {
  int outer;
} Nest;

static floe_code cond_j_less_i(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg, (void)n;
  floe_graph_set_device_scope(g, "cpu:0");
  *pred = floe_binary(g, "Less", NULL, v[0], v[1]);
  return floe_graph_status(g);
}

static floe_code body_inner(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)arg, (void)n;
  floe_graph_set_device_scope(g, "cpu:1");
  next[0] = floe_binary(g, "Add", NULL, v[0], floe_const_f32(g, NULL, 1.0f));
  next[1] = floe_unary(g, "Identity", NULL, v[1]);
  next[2] = floe_binary(g, "Add", NULL, v[2], floe_const_f32(g, NULL, 1.0f));
  floe_graph_set_device_scope(g, "cpu:0");
  return floe_graph_status(g);
}

static floe_code body_outer(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)arg, (void)n;
  floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput init[3] = {floe_const_f32(g, NULL, 0), v[0], v[1]}, res[3];
  floe_code rc = floe_while_loop(g, "inner", cond_j_less_i, body_inner, NULL, init, 3, NULL, res);
  if (rc != FLOE_OK) return rc;
  floe_graph_set_device_scope(g, "cpu:0");
  next[0] = floe_binary(g, "Add", NULL, v[0], floe_const_f32(g, NULL, 1.0f));
  next[1] = res[2];
  return floe_graph_status(g);
}

START_TEST(nested_loops_across_devices) {
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, "cpu:0");
  FloeOutput init[2] = {floe_const_f32(g, "i0", 0), floe_const_f32(g, "n0", 0)}, res[2];
  LoopArg a = {5, "cpu:0"};
  ck_assert_int_eq(floe_while_loop(g, "outer", cond_i_less, body_outer, &a, init, 2, NULL, res), FLOE_OK);
  floe_unary(g, "Identity", "count", res[1]);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSession *s = session(g);
  floe_session_set_profiling(s, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = run1(s, "count", st);
  ck_assert_msg(out, "%s", floe_status_message(st));
  /* inner runs i times for i = 0..4: 0+1+2+3+4 */
  ck_assert_float_eq(*(const float *)floe_tensor_data(out), 10.0f);
  ck_assert_int_gt(harness_profile_calls(s, "Add", "cpu:1"), 0); /* the inner body ran on cpu:1 */
  floe_tensor_release(out);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A piece that fails must not leave the other waiting for its value: the step fails with
 * the failing node's error. */
START_TEST(failure_in_one_piece_fails_the_step) {
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, "cpu:1");
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown());
  FloeOutput w = constf(g, "w", 2, (int64_t[]){3, 3}, 5);
  FloeOutput m = floe_matmul(g, "m", x, w, 0, 0);
  floe_graph_set_device_scope(g, "cpu:0");
  floe_unary(g, "Neg", "y", m);
  FloeSession *s = session(g);
  FloeStatus *st = floe_status_new();
  float bad[4] = {1, 2, 3, 4};
  FloeTensor *xt = harness_f32(2, (int64_t[]){2, 2}, bad); /* [2,2] @ [3,3]: fails at run */
  FloeFeed f = {"x", xt};
  const char *fetch = "y";
  FloeTensor *y = NULL;
  ck_assert_int_ne(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &y, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), "'m'"), "%s", floe_status_message(st));
  float good[6] = {1, 0, 0, 0, 1, 0};
  FloeTensor *xg = harness_f32(2, (int64_t[]){2, 3}, good);
  f.value = xg;
  ck_assert_msg(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &y, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_tensor_release(y);
  floe_tensor_release(xt);
  floe_tensor_release(xg);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A requested device without a kernel: the error names the node, the device and the devices
 * that have one; allow_soft_placement moves the node instead. */
START_TEST(impossible_placement_names_node_and_devices) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, "Neg", "n");
  floe_node_add_input(b, floe_const_f32(g, "c", 2.0f));
  floe_node_set_device(b, "/device:NOSUCH:0");
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = session(g);
  ck_assert_ptr_null(run1(s, "n", st));
  ck_assert_msg(strstr(floe_status_message(st), "'n'") && strstr(floe_status_message(st), "NOSUCH"),
                "%s", floe_status_message(st));
  floe_session_free(s);
  s = session_opts(g, NULL, 1, 0, st);
  ck_assert_ptr_nonnull(s);
  FloeTensor *o = run1(s, "n", st);
  ck_assert_msg(o, "%s", floe_status_message(st));
  ck_assert_float_eq(*(const float *)floe_tensor_data(o), -2.0f);
  floe_tensor_release(o);
  floe_session_free(s);
  /* an unknown device in the session's list is an error naming it */
  ck_assert_ptr_null(session_opts(g, "cpu,nosuch", 0, 0, st));
  ck_assert_msg(strstr(floe_status_message(st), "nosuch"), "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* The cost model spreads two independent heavy matmuls over both devices, and the result
 * is the single-device one. */
START_TEST(cost_placer_uses_both_devices) {
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {128, 128};
  FloeOutput a = constf(g, "a", 2, d, 7), b = constf(g, "b", 2, d, 8);
  FloeOutput m1 = floe_matmul(g, "m1", a, b, 0, 0), m2 = floe_matmul(g, "m2", b, a, 0, 0);
  FloeOutput m3 = floe_matmul(g, "m3", m1, m1, 0, 0), m4 = floe_matmul(g, "m4", m2, m2, 0, 0);
  floe_binary(g, "Add", "z", m3, m4);
  FloeStatus *st = floe_status_new();
  FloeSession *ref = session(g), *s = session_opts(g, "cpu", 0, 0, st);
  ck_assert_msg(s, "%s", floe_status_message(st));
  floe_session_set_profiling(s, 1);
  FloeTensor *want = run1(ref, "z", st), *got = run1(s, "z", st);
  ck_assert_msg(got, "%s", floe_status_message(st));
  assert_close(got, want, 1e-5);
  ck_assert_int_gt(harness_profile_calls(s, "MatMul", "cpu:0"), 0);
  ck_assert_int_gt(harness_profile_calls(s, "MatMul", "cpu:1"), 0);
  floe_tensor_release(want);
  floe_tensor_release(got);
  floe_status_free(st);
  floe_session_free(ref);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
  memcpy(&f, &u, 4);
  return f;
}

/* With compress_transfers an f32 value crosses as bf16: exactly the bf16 rounding. */
START_TEST(compressed_transfers_round_to_bf16) {
  FloeGraph *g = floe_graph_new();
  enum { N = 2048 }; /* small tensors travel whole */
  static float v[N];
  const float special[4] = {1.00390625f + 1e-4f, -3.14159f, 1234.567f, 1e-3f};
  for (int i = 0; i < N; i++) v[i] = i < 4 ? special[i] : (float)(i % 97) * 0.37f;
  floe_graph_set_device_scope(g, "cpu:0");
  FloeTensor *t = harness_f32(1, (int64_t[]){N}, v);
  FloeOutput c = floe_const(g, "c", t);
  floe_tensor_release(t);
  floe_graph_set_device_scope(g, "cpu:1");
  floe_unary(g, "Identity", "out", c);
  FloeStatus *st = floe_status_new();
  FloeSession *s = session_opts(g, NULL, 0, 1, st);
  FloeTensor *o = run1(s, "out", st);
  ck_assert_msg(o, "%s", floe_status_message(st));
  const float *ov = floe_tensor_data(o);
  for (int i = 0; i < 4; i++) {
    ck_assert_msg(ov[i] == bf16_round(v[i]), "%d: %.9g vs %.9g", i, ov[i], bf16_round(v[i]));
    ck_assert(ov[i] != v[i]);
  }
  floe_tensor_release(o);
  floe_session_free(s);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

static FloeNode *node(FloeGraph *g, const char *op, const char *name, const char *dev,
                       const FloeOutput *in, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  if (strcmp(op, "Merge") == 0)
    floe_node_add_input_list(b, in, n);
  else
    for (int i = 0; i < n; i++) floe_node_add_input(b, in[i]);
  floe_node_set_device(b, dev);
  return floe_node_finish(b);
}

/* A loop whose variable enters on cpu:0 and is iterated on cpu:1: the value crosses before
 * the Enter, once, not in every iteration (it used to hang waiting for iteration 1). */
START_TEST(loop_variable_enters_on_another_device) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x0 = floe_const_f32(g, "x0", 3.0f);
  FloeNodeBuilder *b = floe_node_begin(g, "Enter", "enter");
  floe_node_add_input(b, x0);
  floe_node_set_attr_string(b, "frame_name", "f");
  floe_node_set_device(b, "cpu:0");
  FloeNode *enter = floe_node_finish(b);
  FloeOutput e2[2] = {{enter, 0}, {enter, 0}};
  FloeNode *merge = node(g, "Merge", "merge", "cpu:1", e2, 2);
  FloeOutput lim = floe_const_f32(g, "lim", 10.0f), one = floe_const_f32(g, "one", 1.0f);
  FloeOutput lims[2];
  const char *names[2] = {"lim_enter", "one_enter"};
  FloeOutput srcs[2] = {lim, one};
  for (int i = 0; i < 2; i++) {
    b = floe_node_begin(g, "Enter", names[i]);
    floe_node_add_input(b, srcs[i]);
    floe_node_set_attr_string(b, "frame_name", "f");
    floe_node_set_attr_bool(b, "is_constant", 1);
    floe_node_set_device(b, "cpu:1");
    lims[i] = floe_out(floe_node_finish(b), 0);
  }
  FloeOutput lt_in[2] = {{merge, 0}, lims[0]};
  FloeNode *less = node(g, "Less", "less", "cpu:1", lt_in, 2);
  FloeOutput lc_in = {less, 0};
  FloeNode *lc = node(g, "LoopCond", "cond", "cpu:1", &lc_in, 1);
  FloeOutput sw_in[2] = {{merge, 0}, {lc, 0}};
  FloeNode *sw = node(g, "Switch", "switch", "cpu:1", sw_in, 2);
  FloeOutput add_in[2] = {{sw, 1}, lims[1]};
  FloeNode *add = node(g, "Add", "add", "cpu:1", add_in, 2);
  FloeOutput nx_in = {add, 0};
  FloeNode *next = node(g, "NextIteration", "next", "cpu:1", &nx_in, 1);
  ck_assert_int_eq(floe__node_set_input(merge, 1, (FloeOutput){next, 0}, NULL), FLOE_OK);
  FloeOutput ex_in = {sw, 0};
  FloeNode *ex = node(g, "Exit", "exit", "cpu:1", &ex_in, 1);
  FloeOutput out_in = {ex, 0};
  node(g, "Identity", "out", "cpu:0", &out_in, 1);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSession *s = session(g);
  FloeStatus *st = floe_status_new();
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = 10000;
  const char *fetch = "out";
  FloeTensor *o = NULL;
  ck_assert_msg(floe_session_run_opts(s, &ro, NULL, 0, &fetch, 1, NULL, 0, &o, st) == FLOE_OK,
                "%s", floe_status_message(st));
  ck_assert_float_eq(*(const float *)floe_tensor_data(o), 10.0f); /* 3 + 7 * 1 */
  floe_tensor_release(o);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("partition");
  TCase *tc = tcase_create("partition");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cut_edges_give_the_same_result);
  tcase_add_test(tc, one_transfer_per_tensor_and_device);
  tcase_add_test(tc, control_edge_across_devices);
  tcase_add_test(tc, cond_across_devices);
  tcase_add_test(tc, while_loop_across_devices);
  tcase_add_test(tc, nested_loops_across_devices);
  tcase_add_test(tc, loop_variable_enters_on_another_device);
  tcase_add_test(tc, failure_in_one_piece_fails_the_step);
  tcase_add_test(tc, impossible_placement_names_node_and_devices);
  tcase_add_test(tc, cost_placer_uses_both_devices);
  tcase_add_test(tc, compressed_transfers_round_to_bf16);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
