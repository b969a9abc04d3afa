/* SPDX-License-Identifier: Apache-2.0 */
/* test_optimize.c - the graph optimiser's passes (core/session/optimize.c and its opt_*.c):
 * each rewrite gives the values the graph gives with the optimiser off (FLOE_OPTIMIZE=0):
 * bitwise where nothing reassociates, within one rounding per op where a chain of float
 * constants was folded; the run's graph (floe_session_optimized) shrinks as the pass says;
 * and what must not be touched is not: fed and fetched nodes, stateful ops (random values,
 * variable updates), control edges' order, loops, a copy to another device. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "floe/floe_train.h"

static FloeRuntime *rt;

static void setup(void) {
  /* the node counts below are the other passes'; elementwise_chains_fuse turns it on */
  setenv("FLOE_OPT_ELEMENTWISE", "0", 1);
  setenv("FLOE_CPU_DEVICES", "2", 1);
  rt = harness_runtime(2);
  unsetenv("FLOE_CPU_DEVICES");
}

static void teardown(void) {
  floe_runtime_free(rt);
  unsetenv("FLOE_OPTIMIZE");
}

/* Runs g once (feeding x when given) with the optimiser on or off; the fetch's value. */
static FloeTensor *run(FloeGraph *g, bool on, FloeTensor *x, const char *fetch,
                       const char *target) {
  if (on) unsetenv("FLOE_OPTIMIZE");
  else setenv("FLOE_OPTIMIZE", "0", 1);
  FloeSession *s = harness_session(g, rt);
  FloeFeed f = {"x", x};
  FloeTensor *out = NULL;
  harness_run(s, &f, x ? 1 : 0, fetch ? &fetch : NULL, fetch ? 1 : 0, target ? &target : NULL,
              target ? 1 : 0, fetch ? &out : NULL, "run");
  floe_session_free(s);
  unsetenv("FLOE_OPTIMIZE");
  return out;
}

/* The run's node count after the optimiser, and one pass's stats (name). */
static int optimized_nodes(FloeGraph *g, const char *fetch, const char *target,
                           const char *pass, FloeOptPassStats *stats) {
  FloeSession *s = harness_session(g, rt);
  FloeGraph *out = NULL;
  FloeOptPassStats *ps = NULL;
  int np = 0;
  FloeStatus *st = floe_status_new();
  FloeFeed f = {"x", NULL};
  bool fed = floe_graph_find(g, "x") != NULL;
  floe_code rc = floe_session_optimized(s, &f, fed ? 1 : 0, fetch ? &fetch : NULL, fetch ? 1 : 0,
                                        target ? &target : NULL, target ? 1 : 0, &out, &ps, &np,
                                        st);
  ck_assert_msg(rc == FLOE_OK, "floe_session_optimized: %s", floe_status_message(st));
  int n = floe_graph_num_nodes(out);
  for (int i = 0; i < np && pass && stats; i++)
    if (strcmp(ps[i].name, pass) == 0) *stats = ps[i];
  free(ps);
  floe_graph_free(out);
  floe_status_free(st);
  floe_session_free(s);
  return n;
}

static FloeTensor *vec_f32(int n, float base) {
  int64_t d[1] = {n};
  FloeTensor *t = floe_tensor_new(FLOE_F32, 1, d, NULL);
  float *v = floe_tensor_data(t);
  for (int i = 0; i < n; i++) v[i] = base + 0.37f * (float)i - 2.0f;
  return t;
}

static void assert_bitwise(FloeTensor *a, FloeTensor *b, const char *what) {
  ck_assert_msg(floe_tensor_num_elements(a) == floe_tensor_num_elements(b), "%s: sizes", what);
  ck_assert_msg(memcmp(floe_tensor_data(a), floe_tensor_data(b),
                       (size_t)floe_tensor_num_elements(a) * floe_dtype_size(floe_tensor_dtype(a))) == 0,
                "%s: the optimised run's values differ from the plain run's", what);
}

/* fetch's value with the optimiser on, after checking it is bitwise the value with it off
 * (caller releases). */
static FloeTensor *same_on_and_off(FloeGraph *g, FloeTensor *x, const char *fetch) {
  FloeTensor *plain = run(g, false, x, fetch, NULL), *opt = run(g, true, x, fetch, NULL);
  assert_bitwise(plain, opt, fetch);
  floe_tensor_release(plain);
  return opt;
}

static FloeOutput placeholder_x(FloeGraph *g, FloeDType dt, int n) {
  int64_t d[1] = {n};
  return floe_placeholder(g, "x", dt, floe_shape_make(1, d));
}

static FloeOutput scalar(FloeGraph *g, const char *name, FloeDType dt, double v) {
  FloeTensor *t = harness_from_doubles(dt, 0, NULL, &v);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

/* x + 1 + 1 ... (200 times) - 0.5 and (x * 1.5) * 2 * 0.25: one op each after folding. */
START_TEST(constant_chains_fold) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 64);
  FloeOutput one = scalar(g, "one", FLOE_F32, 1.0), half = scalar(g, "half", FLOE_F32, 0.5);
  FloeOutput a = x;
  for (int i = 0; i < 200; i++) a = floe_binary(g, "Add", NULL, a, one);
  a = floe_binary(g, "Sub", "sum", a, half);
  FloeOutput m = floe_binary(g, "Mul", NULL, x, scalar(g, "c15", FLOE_F32, 1.5));
  m = floe_binary(g, "Mul", NULL, scalar(g, "c2", FLOE_F32, 2.0), m);
  m = floe_binary(g, "Mul", "prod", m, scalar(g, "c025", FLOE_F32, 0.25));
  floe_binary(g, "Add", "both", a, m);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = vec_f32(64, 3.0f);
  FloeTensor *plain = run(g, false, xv, "both", NULL), *opt = run(g, true, xv, "both", NULL);
  const float *p = floe_tensor_data(plain), *q = floe_tensor_data(opt), *xs = floe_tensor_data(xv);
  for (int i = 0; i < 64; i++) {
    double want = (double)xs[i] + 199.5 + (double)xs[i] * 0.75;
    /* a float sum of 200 ones rounds 200 times; the folded one once */
    ck_assert_msg(fabs(q[i] - want) <= 1e-4 * fabs(want) + 1e-4, "%d: %g, want %g", i, q[i], want);
    ck_assert_msg(fabs(q[i] - p[i]) <= 1e-4 * fabs(p[i]) + 1e-4, "%d: %g vs plain %g", i, q[i], p[i]);
  }
  FloeOptPassStats ps = {0};
  int n = optimized_nodes(g, "both", NULL, "arithmetic", &ps);
  /* x; the last Add and its constant 200; the Sub and its 0.5 (a constant of the other sign
   * ends a float add chain); the last Mul and its constant 0.75; the Add of both */
  ck_assert_msg(n == 8, "%d nodes in the optimised run, want 8", n);
  ck_assert_int_eq(ps.rewritten, 2);
  ck_assert_int_ge(ps.removed, 200);
  floe_tensor_release(plain);
  floe_tensor_release(opt);
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* (x + 2^23) - 2^23 rounds x to an integer (half to even), which the ONNX importer relies on:
 * float constants that cancel are not folded. */
START_TEST(cancelling_constants_are_kept) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 6);
  FloeOutput m = scalar(g, "magic", FLOE_F32, 8388608.0);
  floe_binary(g, "Sub", "rounded", floe_binary(g, "Add", NULL, x, m), m);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  int64_t d[1] = {6};
  FloeTensor *xv = floe_tensor_new(FLOE_F32, 1, d, NULL);
  /* (below 2^23 floats are 0.5 apart: -2.5 + 2^23 is exact, and stays -2.5) */
  const float in[6] = {2.5f, 3.5f, -2.5f, 0.4f, 7.6f, 1.5f}, want[6] = {2, 4, -2.5f, 0, 8, 2};
  memcpy(floe_tensor_data(xv), in, sizeof in);
  FloeTensor *opt = same_on_and_off(g, xv, "rounded");
  for (int i = 0; i < 6; i++) ck_assert(((float *)floe_tensor_data(opt))[i] == want[i]);
  floe_tensor_release(opt);
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* Integer chains wrap as the ops do: bitwise equal, even past overflow. */
START_TEST(integer_chains_are_exact) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_I32, 8);
  FloeOutput big = scalar(g, "big", FLOE_I32, 2000000000.0), three = scalar(g, "three", FLOE_I32, 3);
  FloeOutput a = floe_binary(g, "Add", NULL, x, big);
  a = floe_binary(g, "Add", NULL, a, big);
  a = floe_binary(g, "Sub", NULL, a, three);
  a = floe_binary(g, "Mul", NULL, a, three);
  a = floe_binary(g, "Mul", "out", a, big);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  int64_t d[1] = {8};
  FloeTensor *xv = floe_tensor_new(FLOE_I32, 1, d, NULL);
  for (int i = 0; i < 8; i++) ((int32_t *)floe_tensor_data(xv))[i] = i * 123456789 - 400000000;
  floe_tensor_release(same_on_and_off(g, xv, "out"));
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* Identity, x*1, 1*x, x/1, x-0, x+(-0) go; x+0 stays (-0 + 0 is +0), and so does an
 * Identity that copies to another device. */
START_TEST(identities_go_bitwise) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 16);
  FloeOutput a = floe_unary(g, "Identity", "id", x);
  a = floe_binary(g, "Mul", NULL, a, scalar(g, "one", FLOE_F32, 1));
  a = floe_binary(g, "Mul", NULL, scalar(g, "one_b", FLOE_F32, 1), a);
  a = floe_binary(g, "Div", NULL, a, scalar(g, "one_c", FLOE_F32, 1));
  a = floe_binary(g, "Sub", NULL, a, scalar(g, "zero", FLOE_F32, 0));
  a = floe_binary(g, "Add", "ident", a, scalar(g, "negzero", FLOE_F32, -0.0));
  floe_binary(g, "Add", "plus0", x, scalar(g, "zero_b", FLOE_F32, 0));
  floe_graph_set_device_scope(g, "cpu:1");
  floe_unary(g, "Identity", "copy", x);
  floe_graph_set_device_scope(g, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = vec_f32(16, 0.0f);
  ((float *)floe_tensor_data(xv))[3] = -0.0f;
  const char *fetches[3] = {"ident", "plus0", "copy"};
  for (int f = 0; f < 3; f++) floe_tensor_release(same_on_and_off(g, xv, fetches[f]));
  FloeOptPassStats ps = {0};
  /* x, ident (fetched: it stays, an Add of x and -0), its constant */
  ck_assert_int_eq(optimized_nodes(g, "ident", NULL, "arithmetic", &ps), 3);
  ck_assert_int_eq(ps.removed, 9); /* five ops and their four constants */
  ck_assert_int_eq(optimized_nodes(g, "plus0", NULL, NULL, NULL), 3);       /* x + 0 stays */
  ck_assert_int_eq(optimized_nodes(g, "copy", NULL, NULL, NULL), 2);        /* x, copy */
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

static FloeOutput transpose(FloeGraph *g, const char *name, FloeOutput x, const int32_t *p, int n) {
  int64_t d[1] = {n};
  FloeTensor *t = harness_i32(1, d, p);
  FloeOutput perm = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return floe_binary(g, "Transpose", name, x, perm);
}

/* Transpose(Transpose(x)) is one transpose, or none; Reshape(Reshape(x)) one reshape. */
START_TEST(transposes_and_reshapes_fold) {
  FloeGraph *g = floe_graph_new();
  int64_t d[3] = {2, 3, 4};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(3, d));
  FloeOutput t1 = transpose(g, "t1", x, (const int32_t[]){1, 2, 0}, 3);
  FloeOutput back = transpose(g, "back", t1, (const int32_t[]){2, 0, 1}, 3); /* = x */
  FloeOutput other = transpose(g, "other", t1, (const int32_t[]){1, 0, 2}, 3);
  floe_binary(g, "Add", "sum", back, x);
  FloeTensor *s1 = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){6, 4});
  FloeTensor *s2 = harness_i32(1, (const int64_t[]){1}, (const int32_t[]){24});
  FloeOutput r = floe_binary(g, "Reshape", "r1", x, floe_const(g, "s1", s1));
  r = floe_binary(g, "Reshape", "r2", r, floe_const(g, "s2", s2));
  floe_tensor_release(s1);
  floe_tensor_release(s2);
  (void)other;
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = harness_random(FLOE_F32, 3, d, 7, -1, 1);
  const char *fetches[3] = {"sum", "other", "r2"};
  int want_nodes[3] = {2, 3, 3}; /* x + x; x, one perm, one transpose; x, shape, r2 */
  for (int f = 0; f < 3; f++) {
    floe_tensor_release(same_on_and_off(g, xv, fetches[f]));
    int n = optimized_nodes(g, fetches[f], NULL, NULL, NULL);
    ck_assert_msg(n == want_nodes[f], "%s: %d nodes, want %d", fetches[f], n, want_nodes[f]);
  }
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* Two Exp(x) and two equal constants are computed once; two RandomUniform are not merged;
 * a fetched duplicate keeps its place. */
START_TEST(common_subexpressions) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 32);
  FloeOutput e1 = floe_unary(g, "Exp", "e1", x), e2 = floe_unary(g, "Exp", "e2", x);
  FloeOutput c1 = scalar(g, "c1", FLOE_F32, 2.5), c2 = scalar(g, "c2", FLOE_F32, 2.5);
  FloeOutput a = floe_binary(g, "Mul", "a", e1, c1), b = floe_binary(g, "Mul", "b", e2, c2);
  floe_binary(g, "Sub", "diff", a, b);
  FloeTensor *shape = harness_i32(1, (const int64_t[]){1}, (const int32_t[]){32});
  FloeOutput sh = floe_const(g, "shape", shape);
  floe_tensor_release(shape);
  FloeNodeBuilder *nb = floe_node_begin(g, "RandomUniform", "r1");
  floe_node_add_input(nb, sh);
  FloeOutput r1 = floe_out(floe_node_finish(nb), 0);
  nb = floe_node_begin(g, "RandomUniform", "r2");
  floe_node_add_input(nb, sh);
  FloeOutput r2 = floe_out(floe_node_finish(nb), 0);
  floe_binary(g, "Sub", "rdiff", r1, r2);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = vec_f32(32, 0.5f);
  FloeTensor *opt = same_on_and_off(g, xv, "diff");
  for (int i = 0; i < 32; i++) ck_assert(((float *)floe_tensor_data(opt))[i] == 0.0f);
  floe_tensor_release(opt);
  FloeOptPassStats ps = {0};
  /* x, Exp, constant, Mul, Sub: e2, c2 and b merged */
  ck_assert_int_eq(optimized_nodes(g, "diff", NULL, "cse", &ps), 5);
  ck_assert_int_eq(ps.removed, 3);
  FloeTensor *rd = run(g, true, xv, "rdiff", NULL);
  bool differ = false;
  for (int i = 0; i < 32; i++) differ |= ((float *)floe_tensor_data(rd))[i] != 0.0f;
  ck_assert_msg(differ, "two RandomUniform were merged: their difference is 0");
  floe_tensor_release(rd);
  ck_assert_int_eq(optimized_nodes(g, "rdiff", NULL, NULL, NULL), 4);
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* A NoOp waiting for 1000 additions of x and constants waits for x alone; an update it
 * waits for stays and still runs before it. */
START_TEST(dead_nodes_go) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 4);
  FloeNode *deps[1001];
  for (int i = 0; i < 1000; i++) {
    char name[32];
    snprintf(name, sizeof name, "c%d", i);
    deps[i] = floe_binary(g, "Add", NULL, x, scalar(g, name, FLOE_F32, i)).node;
  }
  FloeVariable v = floe_variable(g, "v", FLOE_F32, floe_shape_make(0, NULL), floe_init_zeros());
  deps[1000] = floe_assign_add(g, "inc", v.handle, scalar(g, "one", FLOE_F32, 1));
  FloeNodeBuilder *nb = floe_node_begin(g, "NoOp", "wait");
  for (int i = 0; i < 1001; i++) floe_node_add_control_input(nb, deps[i]);
  floe_node_finish(nb);
  floe_variables_initializer(g, "init");
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeOptPassStats ps = {0};
  int n = optimized_nodes(g, NULL, "wait", "dead_nodes", &ps);
  /* wait, x, inc (and what it reads: the variable, its constant) */
  ck_assert_msg(n <= 6, "%d nodes left", n);
  /* 1000 additions, their constants but c1 (cse merged it into "one", the update's) */
  ck_assert_int_ge(ps.removed, 1999);
  FloeSession *s = harness_session(g, rt);
  const char *init = "init", *wait = "wait", *read = "v/read";
  harness_run(s, NULL, 0, NULL, 0, &init, 1, NULL, "init");
  FloeTensor *xv = vec_f32(4, 1.0f);
  FloeFeed f = {"x", xv};
  for (int i = 0; i < 3; i++) harness_run(s, &f, 1, NULL, 0, &wait, 1, NULL, "wait");
  FloeTensor *val = NULL;
  harness_run(s, NULL, 0, &read, 1, NULL, 0, &val, "read");
  ck_assert_msg(harness_get(val, 0) == 3.0, "the update ran %g times, not 3", harness_get(val, 0));
  floe_tensor_release(val);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A fetched node in a chain keeps its place: the chain above it still folds, the value of
 * the fetched node is its own. */
START_TEST(fetched_nodes_keep_their_place) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 8);
  FloeOutput one = scalar(g, "one", FLOE_F32, 1.0);
  FloeOutput a = floe_binary(g, "Add", "a1", x, one);
  a = floe_binary(g, "Add", "a2", a, one);
  a = floe_binary(g, "Add", "a3", a, one);
  a = floe_binary(g, "Add", "a4", a, one);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = vec_f32(8, 0.0f);
  FloeSession *s = harness_session(g, rt);
  FloeFeed f = {"x", xv};
  const char *fetch[2] = {"a2", "a4"};
  FloeTensor *out[2] = {0};
  harness_run(s, &f, 1, fetch, 2, NULL, 0, out, "two fetches");
  const float *xs = floe_tensor_data(xv);
  for (int i = 0; i < 8; i++) {
    ck_assert(((float *)floe_tensor_data(out[0]))[i] == (xs[i] + 1.0f) + 1.0f);
    ck_assert(fabsf(((float *)floe_tensor_data(out[1]))[i] - (xs[i] + 4.0f)) < 1e-5f);
  }
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_session_free(s);
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST

/* Every pass off (FLOE_OPTIMIZE=0): the run's graph is the pruned graph itself. */
START_TEST(switches) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 4);
  floe_unary(g, "Identity", "id", floe_unary(g, "Identity", NULL, x));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_int_eq(optimized_nodes(g, "id", NULL, NULL, NULL), 2);
  setenv("FLOE_OPTIMIZE", "0", 1);
  FloeOptPassStats ps = {0};
  ck_assert_int_eq(optimized_nodes(g, "id", NULL, "arithmetic", &ps), 3);
  ck_assert_int_eq(ps.enabled, 0);
  unsetenv("FLOE_OPTIMIZE");
  setenv("FLOE_OPT_ARITHMETIC", "0", 1);
  ck_assert_int_eq(optimized_nodes(g, "id", NULL, NULL, NULL), 3);
  unsetenv("FLOE_OPT_ARITHMETIC");
  FloeGraph *out = NULL;
  FloeOptPassStats *p = NULL;
  int np = 0;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_session_optimized(NULL, NULL, 0, NULL, 0, NULL, 0, &out, &p, &np, st),
                   FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* sqrt(a * b + b) of constants folds to one Const (bitwise what the ops give); Neg of a
 * Const that is fed reads the fed value; RandomUniform and a Const hanging on a control edge
 * (as inside a loop frame) are not constants; an integer division by zero among constants
 * still fails the run, with the plain run's message. */
START_TEST(constants_fold_once) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = placeholder_x(g, FLOE_F32, 8);
  FloeTensor *av = vec_f32(8, 5.0f), *bv = vec_f32(8, 3.5f);
  FloeOutput a = floe_const(g, "a", av), b = floe_const(g, "b", bv);
  FloeOutput sq = floe_unary(g, "Sqrt", "sq",
                             floe_binary(g, "Add", "ab_b", floe_binary(g, "Mul", "ab", a, b), b));
  floe_binary(g, "Mul", "y", x, sq);
  floe_unary(g, "Neg", "z", floe_const(g, "f", av));
  FloeNodeBuilder *cb = floe_node_begin(g, "Const", "framed");
  floe_node_set_attr_tensor(cb, "value", bv);
  floe_node_set_attr_type(cb, "dtype", FLOE_F32);
  floe_node_add_control_input(cb, x.node);
  floe_binary(g, "Mul", "w", x, floe_unary(g, "Neg", "framed_neg", floe_out(floe_node_finish(cb), 0)));
  int64_t two = 2;
  FloeTensor *shape = harness_from_doubles(FLOE_I64, 1, &two, (const double[]){2, 3});
  FloeNodeBuilder *rb = floe_node_begin(g, "RandomUniform", "rnd");
  floe_node_add_input(rb, floe_const(g, "rnd_shape", shape));
  floe_node_set_attr_int(rb, "seed", 7);
  floe_unary(g, "Neg", "rnd_neg", floe_out(floe_node_finish(rb), 0));
  FloeTensor *num = harness_from_doubles(FLOE_I32, 1, &two, (const double[]){6, 5});
  FloeTensor *den = harness_from_doubles(FLOE_I32, 1, &two, (const double[]){3, 0});
  floe_binary(g, "Div", "q", floe_const(g, "num", num), floe_const(g, "den", den));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = vec_f32(8, 1.0f);
  floe_tensor_release(same_on_and_off(g, xv, "y"));
  floe_tensor_release(same_on_and_off(g, xv, "w"));
  FloeOptPassStats ps = {0};
  /* x, the folded constant, y */
  ck_assert_int_eq(optimized_nodes(g, "y", NULL, "constant_folding", &ps), 3);
  ck_assert_int_eq(ps.enabled, 1);
  ck_assert_int_eq(ps.rewritten, 3);
  ck_assert_int_eq(optimized_nodes(g, "w", NULL, NULL, NULL), 4); /* x, framed, Neg, Mul */
  ck_assert_int_eq(optimized_nodes(g, "rnd_neg", NULL, "constant_folding", &ps), 3);
  ck_assert_int_eq(ps.rewritten, 0);
  /* f fed: z is minus the fed values */
  FloeSession *s = harness_session(g, rt);
  FloeFeed ff = {"f", bv};
  FloeTensor *z = harness_fetch(s, &ff, 1, "z");
  for (int i = 0; i < 8; i++)
    ck_assert(((float *)floe_tensor_data(z))[i] == -((float *)floe_tensor_data(bv))[i]);
  floe_tensor_release(z);
  floe_session_free(s);
  char msg[2][512];
  for (int on = 0; on < 2; on++) {
    if (!on) setenv("FLOE_OPTIMIZE", "0", 1);
    FloeStatus *st = floe_status_new();
    const char *fetch = "q";
    FloeTensor *out = NULL;
    ck_assert_int_ne(harness_run_graph(g, rt, NULL, 0, &fetch, 1, &out, st), FLOE_OK);
    snprintf(msg[on], sizeof msg[on], "%s", floe_status_message(st));
    floe_status_free(st);
    unsetenv("FLOE_OPTIMIZE");
  }
  ck_assert_msg(strstr(msg[1], "q") && strcmp(msg[0], msg[1]) == 0, "plain: %s; optimised: %s",
                msg[0], msg[1]);
  floe_tensor_release(xv);
  floe_tensor_release(av);
  floe_tensor_release(bv);
  floe_tensor_release(shape);
  floe_tensor_release(num);
  floe_tensor_release(den);
  floe_graph_free(g);
}
END_TEST

/* Mul by a per-channel vector, Add of a [1, 1, 1, C] shift, a [1, 7, 1, C] operand times the
 * value (as the blocked layout's per-channel operands repeat), Relu, 2 - value, LeakyRelu,
 * value / scalar: one _FusedElementwise, bitwise the ops one by one; the fetched Sigmoid after
 * them stays. A fetched middle node or one with a second reader ends a chain there. */
START_TEST(elementwise_chains_fuse) {
  unsetenv("FLOE_OPT_ELEMENTWISE");
  FloeGraph *g = floe_graph_new();
  /* large enough for chunks that straddle the segments a [1, 7, 1, 16] operand repeats in,
   * and for thread ranges that start inside a chunk */
  int64_t xd[4] = {3, 7, 40, 16}, kd[4] = {1, 1, 1, 16}, bd[4] = {1, 7, 1, 16}, c = 16;
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeTensor *k1 = harness_random(FLOE_F32, 1, &c, 5, 0.5, 1.5);
  FloeTensor *k2 = harness_random(FLOE_F32, 4, kd, 6, -0.5, 0.5);
  FloeTensor *k3 = harness_random(FLOE_F32, 4, bd, 8, 0.5, 1.5);
  FloeOutput v = floe_binary(g, "Mul", "scale", x, floe_const(g, "k1", k1));
  v = floe_binary(g, "Add", "shift", v, floe_const(g, "k2", k2));
  v = floe_binary(g, "Mul", "per_block", floe_const(g, "k3", k3), v);
  v = floe_unary(g, "Relu", "relu", v);
  v = floe_binary(g, "Sub", "flip", scalar(g, "two", FLOE_F32, 2.0), v);
  FloeNodeBuilder *lb = floe_node_begin(g, "LeakyRelu", "leaky");
  floe_node_add_input(lb, v);
  floe_node_set_attr_float(lb, "alpha", 0.1);
  v = floe_out(floe_node_finish(lb), 0);
  v = floe_binary(g, "Div", "third", v, scalar(g, "three", FLOE_F32, 3.0));
  floe_unary(g, "Sigmoid", "out", v);
  /* a second reader of "relu": the chain from x stops there */
  floe_binary(g, "Add", "two_readers", floe_unary(g, "Exp", "e", floe_out(floe_graph_find(g, "relu"), 0)),
              floe_out(floe_graph_find(g, "relu"), 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  int64_t n = 3 * 7 * 40 * 16;
  FloeTensor *xv = harness_random(FLOE_F32, 4, xd, 7, -3, 3);
  FloeTensor *plain = NULL, *opt = NULL;
  for (int on = 0; on < 2; on++) {
    if (!on) setenv("FLOE_OPT_ELEMENTWISE", "0", 1);
    FloeSession *s = harness_session(g, rt);
    FloeFeed f = {"x", xv};
    FloeTensor *t = harness_fetch(s, &f, 1, "out");
    floe_session_free(s);
    unsetenv("FLOE_OPT_ELEMENTWISE");
    if (on) opt = t;
    else plain = t;
  }
  ck_assert_int_eq(floe_tensor_num_elements(opt), n);
  assert_bitwise(plain, opt, "out");
  FloeOptPassStats ps = {0};
  /* x, k1, k2, k3, two, three, the fused node (seven ops in one), out (fetched: it stays) */
  ck_assert_int_eq(optimized_nodes(g, "out", NULL, "elementwise", &ps), 8);
  ck_assert_int_eq(ps.rewritten, 1);
  ck_assert_int_eq(ps.removed, 7);
  /* relu also read by two_readers' chain: scale..relu fuse, flip..out fuse apart */
  const char *both[2] = {"out", "two_readers"};
  FloeSession *s = harness_session(g, rt);
  FloeGraph *og = NULL;
  FloeOptPassStats *pr = NULL;
  int np = 0;
  FloeStatus *st = floe_status_new();
  FloeFeed f = {"x", NULL};
  ck_assert_int_eq(floe_session_optimized(s, &f, 1, both, 2, NULL, 0, &og, &pr, &np, st), FLOE_OK);
  int fusedn = 0;
  for (int i = 0; i < floe_graph_num_nodes(og); i++)
    fusedn += !strcmp(floe_node_op(floe_graph_node(og, i)), "_FusedElementwise");
  ck_assert_int_eq(fusedn, 2); /* scale..relu and flip..out; e + relu is one op (Add) */
  free(pr);
  floe_graph_free(og);
  floe_status_free(st);
  floe_session_free(s);
  /* "leaky" fetched: the chain stops before it; the rest after it fuses */
  const char *mid[2] = {"out", "leaky"};
  FloeTensor *outs[2];
  s = harness_session(g, rt);
  FloeFeed fx = {"x", xv};
  harness_run(s, &fx, 1, mid, 2, NULL, 0, outs, "fetched middle");
  assert_bitwise(plain, outs[0], "out with leaky fetched");
  floe_tensor_release(outs[0]);
  floe_tensor_release(outs[1]);
  floe_session_free(s);
  floe_tensor_release(plain);
  floe_tensor_release(opt);
  floe_tensor_release(xv);
  floe_tensor_release(k1);
  floe_tensor_release(k2);
  floe_tensor_release(k3);
  floe_graph_free(g);
}
END_TEST

/* How many nodes of op the optimised run of fetches holds (feeds x and w unvalued). */
static int count_optimized(FloeGraph *g, const char *const *fetches, int nf, const char *op) {
  FloeSession *s = harness_session(g, rt);
  FloeGraph *og = NULL;
  FloeOptPassStats *pr = NULL;
  int np = 0, count = 0;
  FloeStatus *st = floe_status_new();
  FloeFeed f[2] = {{"x", NULL}, {"w", NULL}};
  ck_assert_msg(floe_session_optimized(s, f, 2, fetches, nf, NULL, 0, &og, &pr, &np, st) == FLOE_OK,
                "%s", floe_status_message(st));
  for (int i = 0; i < floe_graph_num_nodes(og); i++)
    count += !strcmp(floe_node_op(floe_graph_node(og, i)), op);
  free(pr);
  floe_graph_free(og);
  floe_status_free(st);
  floe_session_free(s);
  return count;
}

/* A Concat whose only reader is an elementwise chain goes into the fused node, which reads
 * the parts where they are: along a middle axis with per-channel operands (DenseNet's batch
 * norm of its concatenated features), along the last axis with a part of no elements, and a
 * chain of one op; bitwise the unfused values. A Concat read twice stays. */
START_TEST(concat_goes_into_elementwise_chain) {
  unsetenv("FLOE_OPT_ELEMENTWISE");
  int64_t xd[4] = {2, 3, 5, 33}, wd[4] = {2, 4, 5, 33}, kd[4] = {1, 7, 1, 1}, ed[4] = {2, 3, 5, 0};
  FloeTensor *xv = harness_random(FLOE_F32, 4, xd, 11, -2, 2);
  FloeTensor *wv = harness_random(FLOE_F32, 4, wd, 12, -2, 2);
  FloeTensor *k1 = harness_random(FLOE_F32, 4, kd, 13, 0.5, 1.5);
  FloeTensor *k2 = harness_random(FLOE_F32, 4, kd, 14, -0.5, 0.5);
  FloeTensor *empty = floe_tensor_new(FLOE_F32, 4, ed, NULL);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput w = floe_placeholder(g, "w", FLOE_F32, floe_shape_make(4, wd));
  FloeOutput sq = floe_unary(g, "Square", "sq", x);
  /* along dim 1: [2, 3 + 4, 5, 33], then scale, shift, ReLU */
  FloeOutput cat = harness_concat(g, "cat", (FloeOutput[]){sq, w}, 2, 1);
  FloeOutput v = floe_binary(g, "Mul", "scale", cat, floe_const(g, "k1", k1));
  v = floe_binary(g, "Add", "shift", v, floe_const(g, "k2", k2));
  floe_unary(g, "Relu", "bn_relu", v);
  /* along the last dim, three parts (one empty): [2, 3, 5, 66], then one op */
  FloeOutput last_parts[3] = {x, floe_const(g, "empty", empty), sq};
  FloeOutput last = harness_concat(g, "cat_last", last_parts, 3, -1);
  floe_unary(g, "Neg", "one_op", floe_unary(g, "Tanh", "tanh", last)); /* one_op: fetched */
  /* read twice: stays a Concat */
  FloeOutput twice = harness_concat(g, "cat_twice", (FloeOutput[]){x, sq}, 2, 0);
  floe_binary(g, "Add", "two_readers", floe_unary(g, "Exp", "e", twice), twice);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  const char *fetches[3] = {"bn_relu", "one_op", "two_readers"};
  FloeFeed feeds[2] = {{"x", xv}, {"w", wv}};
  FloeTensor *plain[3], *opt[3];
  for (int on = 0; on < 2; on++) {
    if (!on) setenv("FLOE_OPT_ELEMENTWISE", "0", 1);
    FloeSession *s = harness_session(g, rt);
    harness_run(s, feeds, 2, fetches, 3, NULL, 0, on ? opt : plain, "run");
    floe_session_free(s);
    unsetenv("FLOE_OPT_ELEMENTWISE");
  }
  ck_assert_int_eq(floe_tensor_num_elements(opt[0]), 2 * 7 * 5 * 33);
  ck_assert_int_eq(floe_tensor_num_elements(opt[1]), 2 * 3 * 5 * 66);
  for (int i = 0; i < 3; i++) {
    assert_bitwise(plain[i], opt[i], fetches[i]);
    floe_tensor_release(plain[i]);
    floe_tensor_release(opt[i]);
  }
  /* each chain with its Concat becomes one node (Tanh alone too); the Concat read twice
   * stays */
  ck_assert_int_eq(count_optimized(g, fetches, 3, "Concat"), 1);
  ck_assert_int_eq(count_optimized(g, fetches, 2, "Concat"), 0);
  ck_assert_int_eq(count_optimized(g, fetches, 2, "_FusedElementwise"), 2);
  /* the concatenation fetched: it is kept, and the chain reads it */
  const char *with_cat[2] = {"bn_relu", "cat"};
  ck_assert_int_eq(count_optimized(g, with_cat, 2, "Concat"), 1);
  floe_tensor_release(xv);
  floe_tensor_release(wv);
  floe_tensor_release(k1);
  floe_tensor_release(k2);
  floe_tensor_release(empty);
  floe_graph_free(g);
}
END_TEST
/* The fused kernel refuses steps it does not know, operands that would grow the value and
 * parts of x that do not join, naming them. */
START_TEST(fused_elementwise_errors) {
  int64_t xd[2] = {2, 3}, yd[2] = {4, 3}, zd[2] = {4, 2};
  FloeTensor *xv = harness_random(FLOE_F32, 2, xd, 1, -1, 1);
  FloeTensor *yv = harness_random(FLOE_F32, 2, yd, 2, -1, 1);
  FloeTensor *zv = harness_random(FLOE_F32, 2, zd, 3, -1, 1);
  /* steps; y's value (an operand, or x's second part when parts); the message's part */
  const struct {
    const char *steps;
    FloeTensor *y;
    bool parts;
    const char *want;
  } cases[3] = {{"Relu,Frobnicate", yv, false, "Frobnicate"},
                {"Mul:0", yv, false, "[4,3]"},
                /* [2, 3] and [4, 2] along concat_axis 0 */
                {"Relu", zv, true, "part 1 of x (f32 [4,2]) does not join part 0"}};
  for (int c = 0; c < 3; c++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput in[2] = {floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown()),
                        floe_placeholder(g, "y", FLOE_F32, floe_shape_unknown())};
    FloeNodeBuilder *b = floe_node_begin(g, "_FusedElementwise", "few");
    floe_node_add_input_list(b, in, cases[c].parts ? 2 : 1);      /* x */
    floe_node_add_input_list(b, in + 1, cases[c].parts ? 0 : 1);  /* operands */
    floe_node_set_attr_string(b, "steps", cases[c].steps);
    floe_node_finish(b);
    FloeStatus *st = floe_status_new();
    FloeFeed feeds[2] = {{"x", xv}, {"y", cases[c].y}};
    const char *fetch = "few";
    FloeTensor *out = NULL;
    ck_assert_int_ne(harness_run_graph(g, rt, feeds, 2, &fetch, 1, &out, st), FLOE_OK);
    ck_assert_msg(strstr(floe_status_message(st), cases[c].want), "%s", floe_status_message(st));
    floe_status_free(st);
    floe_graph_free(g);
  }
  floe_tensor_release(xv);
  floe_tensor_release(yv);
  floe_tensor_release(zv);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("optimize");
  TCase *tc = tcase_create("passes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, constant_chains_fold);
  tcase_add_test(tc, cancelling_constants_are_kept);
  tcase_add_test(tc, integer_chains_are_exact);
  tcase_add_test(tc, identities_go_bitwise);
  tcase_add_test(tc, transposes_and_reshapes_fold);
  tcase_add_test(tc, common_subexpressions);
  tcase_add_test(tc, dead_nodes_go);
  tcase_add_test(tc, fetched_nodes_keep_their_place);
  tcase_add_test(tc, switches);
  tcase_add_test(tc, constants_fold_once);
  tcase_add_test(tc, elementwise_chains_fuse);
  tcase_add_test(tc, concat_goes_into_elementwise_chain);
  tcase_add_test(tc, fused_elementwise_errors);
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
