/* SPDX-License-Identifier: Apache-2.0 */
/* test_control_flow.c - conds and while loops built with floe_cond / floe_while_loop and
 * run by the executor's frame scheduler: the shapes of TensorFlow's control-flow paper
 * (counter loops, nested loops, a cond inside a loop, a loop inside a cond), deadness
 * (an untaken branch does not run), parallel_iterations, maximum_iterations, loop
 * invariants, variables read in a loop, and errors. Expected values come from plain C
 * loops in the test. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "../ops/harness.h"
#include "floe/floe.h"

static FloeRuntime *rt;

static void runtime_setup(void) { rt = harness_runtime(2); }

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

static FloeSession *session_new(FloeGraph *g) { return harness_session(g, rt); }

static FloeOutput const_i32(FloeGraph *g, const char *name, int32_t v) {
  FloeTensor *t = floe_tensor_scalar_i32(v, NULL);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

/* Runs fetches with one i32 feed (or none) and returns the outputs' i32 scalars. */
static floe_code run_i32(FloeSession *s, const char *feed, int32_t fv, const char *const *fetches,
                         int n, int32_t *out, FloeStatus *st) {
  FloeTensor *ft = floe_tensor_scalar_i32(fv, NULL);
  FloeFeed f = {feed, ft};
  FloeTensor *res[8] = {0};
  floe_code rc = floe_session_run(s, &f, feed ? 1 : 0, fetches, n, NULL, 0, res, st);
  floe_tensor_release(ft);
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    ck_assert_int_eq(floe_tensor_dtype(res[i]), FLOE_I32);
    out[i] = *(const int32_t *)floe_tensor_data(res[i]);
    floe_tensor_release(res[i]);
  }
  return rc;
}

/* ---- a counter loop: i = 0, acc = 0; while (i < n) { acc += i * i; i++ } ---- */

static floe_code cond_less_n(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                             FloeOutput *pred) {
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], *(FloeOutput *)arg);
  return FLOE_OK;
}

static floe_code body_sum_squares(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                                  FloeOutput *next) {
  (void)arg;
  (void)n;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = floe_binary(g, "Add", NULL, v[1], floe_binary(g, "Mul", NULL, v[0], v[0]));
  return FLOE_OK;
}

static FloeGraph *sum_squares_graph(int parallel, int64_t max_iter) {
  FloeGraph *g = floe_graph_new();
  FloeOutput limit = floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar());
  FloeOutput init[2] = {const_i32(g, "i0", 0), const_i32(g, "acc0", 0)};
  FloeOutput res[2];
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.parallel_iterations = parallel;
  o.maximum_iterations = max_iter;
  ck_assert_int_eq(floe_while_loop(g, "loop", cond_less_n, body_sum_squares, &limit, init, 2, &o,
                                   res),
                   FLOE_OK);
  floe_unary(g, "Identity", "i_out", res[0]);
  floe_unary(g, "Identity", "acc_out", res[1]);
  return g;
}

static int32_t sum_squares_ref(int32_t n, int64_t max_iter) {
  int32_t acc = 0;
  for (int32_t i = 0, it = 0; i < n && (max_iter == 0 || it < max_iter); i++, it++) acc += i * i;
  return acc;
}

START_TEST(counter_loop_with_data_dependent_trip_count) {
  const char *fetch[2] = {"i_out", "acc_out"};
  for (int parallel = 1; parallel <= 16; parallel *= 4) {
    FloeGraph *g = sum_squares_graph(parallel, 0);
    FloeSession *s = session_new(g);
    FloeStatus *st = floe_status_new();
    const int32_t ns[] = {0, 1, 2, 7, 100, 1000};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      int32_t out[2];
      ck_assert_msg(run_i32(s, "n", ns[k], fetch, 2, out, st) == FLOE_OK, "n=%d: %s", ns[k],
                    floe_status_message(st));
      ck_assert_int_eq(out[0], ns[k]);
      ck_assert_int_eq(out[1], sum_squares_ref(ns[k], 0));
    }
    floe_status_free(st);
    floe_session_free(s);
    floe_graph_free(g);
  }
}
END_TEST

START_TEST(maximum_iterations_stops_the_loop) {
  const char *fetch[2] = {"i_out", "acc_out"};
  FloeGraph *g = sum_squares_graph(10, 5);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  int32_t out[2];
  ck_assert_msg(run_i32(s, "n", 1000000, fetch, 2, out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(out[0], 5);
  ck_assert_int_eq(out[1], sum_squares_ref(1000000, 5));
  ck_assert(run_i32(s, "n", 3, fetch, 2, out, st) == FLOE_OK);
  ck_assert_int_eq(out[0], 3);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- cond: only the taken branch runs ---- */

static floe_code branch_double(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                               FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Mul", NULL, in[0], const_i32(g, NULL, 2));
  return FLOE_OK;
}

/* Divides by a constant zero: fails whenever it runs. */
static floe_code branch_broken(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                               FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Div", NULL, in[0], const_i32(g, NULL, 0));
  return FLOE_OK;
}

/* Uses only an outside value: must still be dead when not taken. */
static floe_code branch_outside(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                                FloeOutput *out, int no) {
  (void)in;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Add", NULL, *(FloeOutput *)arg, const_i32(g, NULL, 100));
  return FLOE_OK;
}

START_TEST(cond_runs_only_the_taken_branch) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_I32, floe_shape_scalar());
  FloeOutput pred = floe_binary(g, "Greater", "pred", x, const_i32(g, "zero", 0));
  FloeOutput out;
  ck_assert_int_eq(floe_cond(g, "c", pred, &x, 1, branch_double, branch_broken, NULL, &out, 1),
                   FLOE_OK);
  floe_unary(g, "Identity", "y", out);
  FloeOutput out2;
  ck_assert_int_eq(floe_cond(g, "c2", pred, &x, 1, branch_outside, branch_double, &x, &out2, 1),
                   FLOE_OK);
  floe_unary(g, "Identity", "y2", out2);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *f1[1] = {"y"}, *f2[1] = {"y2"};
  int32_t v;
  ck_assert_msg(run_i32(s, "x", 21, f1, 1, &v, st) == FLOE_OK, "%s", floe_status_message(st));
  ck_assert_int_eq(v, 42);
  /* The false branch divides by zero: taking it fails, naming its node. */
  ck_assert_int_ne(run_i32(s, "x", -3, f1, 1, &v, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), "division by zero") != NULL, "%s",
                floe_status_message(st));
  ck_assert(run_i32(s, "x", 5, f2, 1, &v, st) == FLOE_OK);
  ck_assert_int_eq(v, 105);
  ck_assert(run_i32(s, "x", -5, f2, 1, &v, st) == FLOE_OK);
  ck_assert_int_eq(v, -10);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- nested loops: for i < n: for j < i: acc += i * j ---- */

typedef struct Outer {
  FloeOutput n;
} Outer;

static floe_code cond_j_less_i(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                               FloeOutput *pred) {
  (void)arg;
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], v[1]); /* j < i */
  return FLOE_OK;
}

static floe_code body_inner(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                            FloeOutput *next) {
  (void)arg;
  (void)n;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = v[1];
  next[2] = floe_binary(g, "Add", NULL, v[2], floe_binary(g, "Mul", NULL, v[0], v[1]));
  return FLOE_OK;
}

static floe_code body_outer(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                            FloeOutput *next) {
  (void)arg;
  (void)n;
  FloeOutput init[3] = {const_i32(g, NULL, 0), v[0], v[1]};
  FloeOutput res[3];
  char name[64];
  snprintf(name, sizeof name, "inner_%d", floe_graph_num_nodes(g));
  floe_code rc = floe_while_loop(g, name, cond_j_less_i, body_inner, NULL, init, 3, NULL, res);
  if (rc != FLOE_OK) return rc;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = res[2];
  return FLOE_OK;
}

START_TEST(nested_loops) {
  FloeGraph *g = floe_graph_new();
  FloeOutput limit = floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar());
  FloeOutput init[2] = {const_i32(g, "i0", 0), const_i32(g, "acc0", 0)};
  FloeOutput res[2];
  ck_assert_int_eq(floe_while_loop(g, "outer", cond_less_n, body_outer, &limit, init, 2, NULL, res),
                   FLOE_OK);
  floe_unary(g, "Identity", "acc_out", res[1]);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *fetch[1] = {"acc_out"};
  for (int32_t n = 0; n <= 12; n += 3) {
    int32_t want = 0, got;
    for (int32_t i = 0; i < n; i++)
      for (int32_t j = 0; j < i; j++) want += i * j;
    ck_assert_msg(run_i32(s, "n", n, fetch, 1, &got, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(got, want);
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- a cond inside a loop (collatz steps) and a loop inside a cond ---- */

static floe_code collatz_even(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                              FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Div", NULL, in[0], const_i32(g, NULL, 2));
  return FLOE_OK;
}

static floe_code collatz_odd(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                             FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Add", NULL, floe_binary(g, "Mul", NULL, in[0], const_i32(g, NULL, 3)),
                       const_i32(g, NULL, 1));
  return FLOE_OK;
}

static floe_code cond_not_one(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                              FloeOutput *pred) {
  (void)arg;
  (void)n;
  *pred = floe_binary(g, "Greater", NULL, v[0], const_i32(g, NULL, 1));
  return FLOE_OK;
}

static floe_code body_collatz(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                              FloeOutput *next) {
  (void)arg;
  (void)n;
  FloeOutput half = floe_binary(g, "Div", NULL, v[0], const_i32(g, NULL, 2));
  FloeOutput even = floe_binary(g, "Equal", NULL,
                                floe_binary(g, "Mul", NULL, half, const_i32(g, NULL, 2)), v[0]);
  char name[64];
  snprintf(name, sizeof name, "parity_%d", floe_graph_num_nodes(g));
  floe_code rc = floe_cond(g, name, even, &v[0], 1, collatz_even, collatz_odd, NULL, &next[0], 1);
  next[1] = floe_binary(g, "Add", NULL, v[1], const_i32(g, NULL, 1));
  return rc;
}

static floe_code branch_collatz_loop(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                                     FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  FloeOutput init[2] = {in[0], const_i32(g, NULL, 0)};
  FloeOutput res[2];
  floe_code rc = floe_while_loop(g, "collatz", cond_not_one, body_collatz, NULL, init, 2, NULL, res);
  out[0] = res[1];
  return rc;
}

static floe_code branch_minus_one(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                                  FloeOutput *out, int no) {
  (void)arg;
  (void)in;
  (void)n;
  (void)no;
  out[0] = const_i32(g, NULL, -1);
  return FLOE_OK;
}

START_TEST(cond_inside_loop_and_loop_inside_cond) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_I32, floe_shape_scalar());
  FloeOutput pos = floe_binary(g, "Greater", "positive", x, const_i32(g, "zero", 0));
  FloeOutput out;
  ck_assert_int_eq(floe_cond(g, "maybe", pos, &x, 1, branch_collatz_loop, branch_minus_one, NULL,
                             &out, 1),
                   FLOE_OK);
  floe_unary(g, "Identity", "steps", out);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *fetch[1] = {"steps"};
  const int32_t xs[] = {1, 6, 7, 27, 97};
  for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
    int32_t want = 0, got;
    for (int32_t v = xs[k]; v > 1; want++) v = v % 2 == 0 ? v / 2 : 3 * v + 1;
    ck_assert_msg(run_i32(s, "x", xs[k], fetch, 1, &got, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(got, want);
  }
  int32_t got;
  /* The untaken branch holds the whole loop: it stays dead and the cond gives -1. */
  ck_assert(run_i32(s, "x", -4, fetch, 1, &got, st) == FLOE_OK);
  ck_assert_int_eq(got, -1);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- matrices and a variable in the loop: h = tanh(h @ W) repeated n times ---- */

typedef struct MatLoop {
  FloeOutput n, w;
} MatLoop;

static floe_code cond_k_less_n(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                               FloeOutput *pred) {
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], ((MatLoop *)arg)->n);
  return FLOE_OK;
}

static floe_code body_tanh_matmul(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                                  FloeOutput *next) {
  (void)n;
  MatLoop *m = arg;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = floe_unary(g, "Tanh", NULL, floe_matmul(g, NULL, v[1], m->w, 0, 0));
  return FLOE_OK;
}

START_TEST(matmul_loop_reads_a_variable) {
  enum { D = 40 };
  FloeGraph *g = floe_graph_new();
  const int64_t dims[2] = {D, D};
  FloeVariable w = floe_variable(g, "w", FLOE_F32, floe_shape_make(2, dims),
                                 floe_init_uniform(-0.3, 0.3, 7));
  FloeOutput h0 = floe_placeholder(g, "h0", FLOE_F32, floe_shape_make(2, dims));
  MatLoop m = {floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar()), w.value};
  FloeOutput init[2] = {const_i32(g, "k0", 0), h0};
  FloeOutput res[2];
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.parallel_iterations = 4;
  ck_assert_int_eq(floe_while_loop(g, "rnn", cond_k_less_n, body_tanh_matmul, &m, init, 2, &o, res),
                   FLOE_OK);
  floe_unary(g, "Identity", "h", res[1]);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *init_t[1] = {"w/init"};
  ck_assert(floe_session_run(s, NULL, 0, NULL, 0, init_t, 1, NULL, st) == FLOE_OK);
  const char *wf[1] = {"w/read"};
  FloeTensor *wt;
  ck_assert(floe_session_run(s, NULL, 0, wf, 1, NULL, 0, &wt, st) == FLOE_OK);
  float *hv = malloc(sizeof(float) * D * D), *tmp = malloc(sizeof(float) * D * D);
  for (int i = 0; i < D * D; i++) hv[i] = (float)((i * 37 % 11) - 5) / 5.0f;
  FloeTensor *h0t = harness_f32(2, dims, hv);
  FloeTensor *nt = floe_tensor_scalar_i32(6, NULL);
  FloeFeed feeds[2] = {{"h0", h0t}, {"n", nt}};
  const char *hf[1] = {"h"};
  FloeTensor *got;
  ck_assert_msg(floe_session_run(s, feeds, 2, hf, 1, NULL, 0, &got, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const float *W = floe_tensor_data(wt);
  for (int step = 0; step < 6; step++) {
    for (int i = 0; i < D; i++)
      for (int j = 0; j < D; j++) {
        double acc = 0;
        for (int k = 0; k < D; k++) acc += (double)hv[i * D + k] * W[k * D + j];
        tmp[i * D + j] = (float)tanh(acc);
      }
    memcpy(hv, tmp, sizeof(float) * D * D);
  }
  const float *gv = floe_tensor_data(got);
  for (int i = 0; i < D * D; i++) ck_assert_msg(fabsf(gv[i] - hv[i]) < 1e-4f, "%d: %g vs %g", i, gv[i], hv[i]);
  floe_tensor_release(got);
  floe_tensor_release(wt);
  floe_tensor_release(h0t);
  floe_tensor_release(nt);
  free(hv);
  free(tmp);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- errors ---- */

START_TEST(fetching_a_dead_branch_or_a_loop_inside_is_an_error) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_I32, floe_shape_scalar());
  FloeOutput p = floe_placeholder(g, "p", FLOE_BOOL, floe_shape_scalar());
  FloeNodeBuilder *b = floe_node_begin(g, "Switch", "sw");
  floe_node_add_input(b, x);
  floe_node_add_input(b, p);
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *xt = floe_tensor_scalar_i32(3, NULL);
  FloeTensor *pt = floe_tensor_new(FLOE_BOOL, 0, NULL, NULL);
  *(uint8_t *)floe_tensor_data(pt) = 1;
  FloeFeed f[2] = {{"x", xt}, {"p", pt}};
  const char *fetch[1] = {"sw:0"};
  FloeTensor *out = NULL;
  ck_assert_int_eq(floe_session_run(s, f, 2, fetch, 1, NULL, 0, &out, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "'sw:0' was not computed") != NULL, "%s",
                floe_status_message(st));
  const char *fetch1[1] = {"sw:1"};
  ck_assert(floe_session_run(s, f, 2, fetch1, 1, NULL, 0, &out, st) == FLOE_OK);
  ck_assert_int_eq(*(const int32_t *)floe_tensor_data(out), 3);
  floe_tensor_release(out);
  floe_session_free(s);
  floe_graph_free(g);

  /* Fetching a node of a loop body names the loop. */
  g = sum_squares_graph(10, 0);
  s = session_new(g);
  const char *inner[1] = {"loop/body_0"};
  int32_t v;
  ck_assert_int_eq(run_i32(s, "n", 3, inner, 1, &v, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "while loop 'loop'") != NULL, "%s",
                floe_status_message(st));
  floe_session_free(s);
  floe_graph_free(g);
  floe_tensor_release(xt);
  floe_tensor_release(pt);
  floe_status_free(st);
}
END_TEST

static floe_code body_changes_shape(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                                    FloeOutput *next) {
  (void)arg;
  (void)n;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  FloeOutput two[2] = {v[1], v[1]};
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", NULL);
  floe_node_add_input_list(b, two, 2);
  floe_node_add_input(b, const_i32(g, NULL, 0));
  next[1] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

START_TEST(builder_errors_name_the_loop) {
  FloeGraph *g = floe_graph_new();
  FloeOutput limit = floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar());
  const int64_t d1[1] = {2};
  const float v[2] = {1, 2};
  FloeTensor *t = harness_f32(1, d1, v);
  FloeOutput init[2] = {const_i32(g, "i0", 0), floe_const(g, "vec", t)};
  floe_tensor_release(t);
  FloeOutput res[2];
  ck_assert_int_eq(floe_while_loop(g, "grow", cond_less_n, body_changes_shape, &limit, init, 2,
                                   NULL, res),
                   FLOE_INVALID_ARGUMENT);
  const char *msg = floe_graph_error(g, NULL);
  ck_assert_msg(strstr(msg, "while loop 'grow'") && strstr(msg, "shape invariant"), "%s", msg);
  floe_graph_free(g);

  /* With a shape invariant the vector may grow: 2 -> 4 -> 8. */
  g = floe_graph_new();
  limit = floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar());
  t = harness_f32(1, d1, v);
  FloeOutput init2[2] = {const_i32(g, "i0", 0), floe_const(g, "vec", t)};
  floe_tensor_release(t);
  const int64_t any[1] = {-1};
  FloeShape inv[2] = {floe_shape_scalar(), floe_shape_make(1, any)};
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.shape_invariants = inv;
  ck_assert_int_eq(floe_while_loop(g, "grow", cond_less_n, body_changes_shape, &limit, init2, 2,
                                   &o, res),
                   FLOE_OK);
  floe_unary(g, "Identity", "out", res[1]);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *nt = floe_tensor_scalar_i32(2, NULL);
  FloeFeed f = {"n", nt};
  const char *fetch[1] = {"out"};
  FloeTensor *out;
  ck_assert_msg(floe_session_run(s, &f, 1, fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(floe_tensor_dim(out, 0), 8);
  const float *ov = floe_tensor_data(out);
  for (int i = 0; i < 8; i++) ck_assert(ov[i] == v[i % 2]);
  floe_tensor_release(out);
  floe_tensor_release(nt);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- endless loops: timeout, cancel, close ---- */

static floe_code cond_true(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg;
  (void)n;
  *pred = floe_binary(g, "GreaterEqual", NULL, v[0], const_i32(g, NULL, 0));
  return FLOE_OK;
}

static floe_code body_count(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                            FloeOutput *next) {
  (void)arg;
  (void)n;
  /* i = (i + 1) mod 2^20 stays >= 0: the loop never ends. */
  FloeOutput i1 = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[0] = floe_binary(g, "Sub", NULL, i1,
                        floe_binary(g, "Mul", NULL,
                                    floe_binary(g, "Div", NULL, i1, const_i32(g, NULL, 1 << 20)),
                                    const_i32(g, NULL, 1 << 20)));
  return FLOE_OK;
}

static FloeGraph *endless_graph(void) {
  FloeGraph *g = floe_graph_new();
  FloeOutput init = const_i32(g, "i0", 0), res;
  ck_assert_int_eq(floe_while_loop(g, "forever", cond_true, body_count, NULL, &init, 1, NULL, &res),
                   FLOE_OK);
  floe_unary(g, "Identity", "out", res);
  return g;
}

START_TEST(timeout_stops_an_endless_loop_and_names_it) {
  FloeGraph *g = endless_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeRunOptions o;
  floe_run_options_init(&o);
  const char *fetch[1] = {"out"};
  FloeTensor *out = NULL;
  /* The first run also builds the executor, slow under valgrind: a longer deadline, so the
   * loop has started when it passes; the second run reuses the executor. */
  const int64_t timeouts[2] = {1000, 150};
  for (int rep = 0; rep < 2; rep++) {
    o.timeout_ms = timeouts[rep];
    ck_assert_int_eq(floe_session_run_opts(s, &o, NULL, 0, fetch, 1, NULL, 0, &out, st),
                     FLOE_DEADLINE_EXCEEDED);
    const char *msg = floe_status_message(st);
    char want[32];
    snprintf(want, sizeof want, "%lld ms", (long long)timeouts[rep]);
    ck_assert_msg(strstr(msg, want) && strstr(msg, "while loop 'forever'"), "%s", msg);
    ck_assert_ptr_null(out);
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

typedef struct Canceller {
  FloeSession *s;
  bool close;
} Canceller;

static void *cancel_later(void *arg) {
  Canceller *c = arg;
  /* Long enough for the run to be inside the loop even under valgrind (the message names
   * the loop only then). */
  struct timespec ts = {0, 300 * 1000000};
  nanosleep(&ts, NULL);
  if (c->close)
    floe_session_close(c->s);
  else
    floe_session_cancel(c->s);
  return NULL;
}

START_TEST(cancel_and_close_stop_a_running_loop) {
  FloeGraph *g = endless_graph();
  FloeStatus *st = floe_status_new();
  const char *fetch[1] = {"out"};
  FloeTensor *out = NULL;
  for (int close = 0; close <= 1; close++) {
    FloeSession *s = session_new(g);
    Canceller c = {s, close};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, cancel_later, &c), 0);
    ck_assert_int_eq(floe_session_run(s, NULL, 0, fetch, 1, NULL, 0, &out, st), FLOE_CANCELLED);
    pthread_join(th, NULL);
    const char *msg = floe_status_message(st);
    ck_assert_msg(strstr(msg, close ? "session was closed" : "cancelled") &&
                      strstr(msg, "while loop 'forever'"),
                  "%s", msg);
    /* Cancel leaves the session usable; close refuses later runs. */
    FloeRunOptions o;
    floe_run_options_init(&o);
    o.timeout_ms = 50;
    floe_code rc = floe_session_run_opts(s, &o, NULL, 0, fetch, 1, NULL, 0, &out, st);
    ck_assert_int_eq(rc, close ? FLOE_CANCELLED : FLOE_DEADLINE_EXCEEDED);
    if (close)
      ck_assert_msg(strstr(floe_status_message(st), "closed"), "%s", floe_status_message(st));
    floe_session_free(s);
  }
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ---- parallel_iterations 1 runs iterations one after another ---- */

typedef struct VarLoop {
  FloeOutput n, handle;
} VarLoop;

static floe_code cond_var_loop(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                               FloeOutput *pred) {
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], ((VarLoop *)arg)->n);
  return FLOE_OK;
}

/* acc += read(v); then v += 1 (after the read): exact only if no two iterations overlap
 * (with parallel_iterations 10 reads overtake updates: acc came out 300, not 435). */
static floe_code body_var_loop(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                               FloeOutput *next) {
  (void)n;
  VarLoop *l = arg;
  FloeNodeBuilder *b = floe_node_begin(g, "ReadVariableOp", NULL);
  floe_node_add_input(b, l->handle);
  floe_node_set_attr_type(b, "dtype", FLOE_I32);
  floe_node_add_control_input(b, v[0].node); /* reads once the iteration started */
  FloeNode *rd = floe_node_finish(b);
  /* The increment comes through a long chain, so the update finishes well after the next
   * iteration could have read. */
  FloeOutput one = const_i32(g, NULL, 1);
  for (int k = 0; k < 40; k++) one = floe_unary(g, "Identity", NULL, one);
  b = floe_node_begin(g, "AssignAddVariableOp", NULL);
  floe_node_add_input(b, l->handle);
  floe_node_add_input(b, one);
  floe_node_add_control_input(b, rd);
  FloeNode *as = floe_node_finish(b);
  next[1] = floe_binary(g, "Add", NULL, v[1], floe_out(rd, 0));
  (void)as; /* nothing waits for the update: only the iteration bound orders it */
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  return FLOE_OK;
}

START_TEST(one_parallel_iteration_serialises_iterations) {
  FloeGraph *g = floe_graph_new();
  FloeVariable var = floe_variable(g, "v", FLOE_I32, floe_shape_scalar(), floe_init_zeros());
  VarLoop l = {floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar()), var.handle};
  FloeOutput init[2] = {const_i32(g, "k0", 0), const_i32(g, "acc0", 0)}, res[2];
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.parallel_iterations = 1;
  ck_assert_int_eq(floe_while_loop(g, "serial", cond_var_loop, body_var_loop, &l, init, 2, &o, res),
                   FLOE_OK);
  floe_unary(g, "Identity", "acc", res[1]);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *init_t[1] = {"v/init"}, *fetch[1] = {"acc"};
  for (int rep = 0; rep < 20; rep++) {
    ck_assert(floe_session_run(s, NULL, 0, NULL, 0, init_t, 1, NULL, st) == FLOE_OK);
    int32_t got;
    ck_assert_msg(run_i32(s, "n", 30, fetch, 1, &got, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(got, 30 * 29 / 2);
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- gradients, checked by central finite differences in f64 ---- */

/* A model: placeholders x [1,D] and w [D,D] (and n, an i32 scalar), a scalar loss. */
typedef struct GradModel {
  FloeGraph *g;
  FloeOutput x, w, n, loss;
  int d;
} GradModel;

static double run_loss(FloeSession *s, const GradModel *m, const double *x, const double *w,
                       int32_t n) {
  const int64_t dx[2] = {1, m->d}, dw[2] = {m->d, m->d};
  FloeTensor *xt = harness_f64(2, dx, x), *wt = harness_f64(2, dw, w);
  FloeTensor *nt = floe_tensor_scalar_i32(n, NULL);
  FloeFeed f[3] = {{"x", xt}, {"w", wt}, {"n", nt}};
  const char *fetch[1] = {"loss"};
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, f, 3, fetch, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == FLOE_OK, "loss: %s", floe_status_message(st));
  double v = harness_get(out, 0);
  floe_tensor_release(out);
  floe_tensor_release(xt);
  floe_tensor_release(wt);
  floe_tensor_release(nt);
  floe_status_free(st);
  return v;
}

/* floe_gradients of loss w.r.t. x and w against central differences at (x, w, n). */
static void check_grads(GradModel *m, const double *x, const double *w, int32_t n) {
  FloeOutput xs[2] = {m->x, m->w}, dxs[2];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(m->g, &m->loss, 1, xs, 2, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_ptr_nonnull(dxs[0].node);
  ck_assert_ptr_nonnull(dxs[1].node);
  floe_unary(m->g, "Identity", "dx", dxs[0]);
  floe_unary(m->g, "Identity", "dw", dxs[1]);
  FloeSession *s = session_new(m->g);
  const int64_t ddx[2] = {1, m->d}, ddw[2] = {m->d, m->d};
  FloeTensor *xt = harness_f64(2, ddx, x), *wt = harness_f64(2, ddw, w);
  FloeTensor *nt = floe_tensor_scalar_i32(n, NULL);
  FloeFeed f[3] = {{"x", xt}, {"w", wt}, {"n", nt}};
  const char *fetch[2] = {"dx", "dw"};
  FloeTensor *got[2] = {NULL, NULL};
  ck_assert_msg(floe_session_run(s, f, 3, fetch, 2, NULL, 0, got, st) == FLOE_OK, "grads: %s",
                floe_status_message(st));
  int d = m->d;
  double *xp = malloc(sizeof(double) * d), *wp = malloc(sizeof(double) * d * d);
  const double eps = 1e-6;
  for (int which = 0; which < 2; which++) {
    int cnt = which ? d * d : d;
    for (int i = 0; i < cnt; i++) {
      memcpy(xp, x, sizeof(double) * d);
      memcpy(wp, w, sizeof(double) * d * d);
      double *p = which ? &wp[i] : &xp[i];
      *p += eps;
      double up = run_loss(s, m, xp, wp, n);
      *p -= 2 * eps;
      double down = run_loss(s, m, xp, wp, n);
      double fd = (up - down) / (2 * eps), an = harness_get(got[which], i);
      ck_assert_msg(fabs(fd - an) <= 1e-6 * (1 + fabs(fd)), "n=%d d%s[%d]: analytic %.10g, fd %.10g",
                    n, which ? "w" : "x", i, an, fd);
    }
  }
  free(xp);
  free(wp);
  floe_tensor_release(got[0]);
  floe_tensor_release(got[1]);
  floe_tensor_release(xt);
  floe_tensor_release(wt);
  floe_tensor_release(nt);
  floe_session_free(s);
  floe_status_free(st);
}

static GradModel grad_model_new(int d) {
  GradModel m = {.g = floe_graph_new(), .d = d};
  const int64_t dx[2] = {1, d}, dw[2] = {d, d};
  m.x = floe_placeholder(m.g, "x", FLOE_F64, floe_shape_make(2, dx));
  m.w = floe_placeholder(m.g, "w", FLOE_F64, floe_shape_make(2, dw));
  m.n = floe_placeholder(m.g, "n", FLOE_I32, floe_shape_scalar());
  return m;
}

typedef struct RnnArg {
  FloeOutput n, w;
} RnnArg;

static floe_code cond_rnn(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], ((RnnArg *)arg)->n);
  return FLOE_OK;
}

/* h = tanh(h @ w) + 0.5 * h */
static floe_code body_rnn(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)n;
  RnnArg *a = arg;
  FloeTensor *half = floe_tensor_new(FLOE_F64, 0, NULL, NULL);
  *(double *)floe_tensor_data(half) = 0.5;
  FloeOutput hc = floe_const(g, NULL, half);
  floe_tensor_release(half);
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = floe_binary(g, "Add", NULL, floe_unary(g, "Tanh", NULL, floe_matmul(g, NULL, v[1], a->w, 0, 0)),
                        floe_binary(g, "Mul", NULL, v[1], hc));
  return FLOE_OK;
}

START_TEST(gradient_of_a_loop_matches_finite_differences) {
  enum { D = 3 };
  const double x[D] = {0.3, -0.7, 0.2};
  const double w[D * D] = {0.5, -0.2, 0.1, 0.3, 0.8, -0.4, -0.6, 0.2, 0.7};
  const int32_t trips[] = {0, 1, 4};
  for (size_t t = 0; t < sizeof trips / sizeof trips[0]; t++) {
    GradModel m = grad_model_new(D);
    RnnArg a = {m.n, m.w};
    FloeOutput init[2] = {const_i32(m.g, "k0", 0), m.x}, res[2];
    ck_assert_int_eq(floe_while_loop(m.g, "rnn", cond_rnn, body_rnn, &a, init, 2, NULL, res),
                     FLOE_OK);
    FloeNodeBuilder *b = floe_node_begin(m.g, "Identity", "y");
    floe_node_add_input(b, res[1]);
    FloeOutput y = floe_out(floe_node_finish(b), 0);
    /* loss = sum(y * y) */
    FloeTensor *ax = harness_i32(1, (const int64_t[]){1}, (const int32_t[]){1});
    b = floe_node_begin(m.g, "Sum", "loss");
    floe_node_add_input(b, floe_binary(m.g, "Mul", NULL, y, y));
    floe_node_add_input(b, floe_const(m.g, NULL, ax));
    floe_tensor_release(ax);
    FloeOutput l1 = floe_out(floe_node_finish(b), 0);
    (void)l1;
    m.loss = l1;
    check_grads(&m, x, w, trips[t]);
    floe_graph_free(m.g);
  }
}
END_TEST

static FloeOutput f64_const(FloeGraph *g, double v) {
  FloeTensor *t = floe_tensor_new(FLOE_F64, 0, NULL, NULL);
  *(double *)floe_tensor_data(t) = v;
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

/* loss = sum(y * y) over all of y ([1, D]) */
static FloeOutput sum_squares_loss(FloeGraph *g, FloeOutput y) {
  FloeTensor *ax = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){0, 1});
  FloeNodeBuilder *b = floe_node_begin(g, "Sum", "loss");
  floe_node_add_input(b, floe_binary(g, "Mul", NULL, y, y));
  floe_node_add_input(b, floe_const(g, NULL, ax));
  floe_tensor_release(ax);
  return floe_out(floe_node_finish(b), 0);
}

static floe_code branch_tanh_matmul(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                                    FloeOutput *out, int no) {
  (void)n;
  (void)no;
  out[0] = floe_unary(g, "Tanh", NULL, floe_matmul(g, NULL, in[0], *(FloeOutput *)arg, 0, 0));
  return FLOE_OK;
}

static floe_code branch_square(FloeGraph *g, void *arg, const FloeOutput *in, int n,
                               FloeOutput *out, int no) {
  (void)arg;
  (void)n;
  (void)no;
  out[0] = floe_binary(g, "Mul", NULL, in[0], in[0]);
  return FLOE_OK;
}

START_TEST(gradient_of_a_cond_matches_finite_differences) {
  enum { D = 3 };
  const double w[D * D] = {0.5, -0.2, 0.1, 0.3, 0.8, -0.4, -0.6, 0.2, 0.7};
  const double xpos[D] = {0.3, 0.7, 0.2}, xneg[D] = {-0.3, -0.7, 0.2};
  for (int sign = 0; sign < 2; sign++) {
    GradModel m = grad_model_new(D);
    FloeTensor *ax = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){0, 1});
    FloeNodeBuilder *b = floe_node_begin(m.g, "Sum", "xsum");
    floe_node_add_input(b, m.x);
    floe_node_add_input(b, floe_const(m.g, NULL, ax));
    floe_tensor_release(ax);
    FloeOutput pred = floe_binary(m.g, "Greater", NULL, floe_out(floe_node_finish(b), 0),
                                  f64_const(m.g, 0));
    FloeOutput y;
    ck_assert_int_eq(floe_cond(m.g, "c", pred, &m.x, 1, branch_tanh_matmul, branch_square, &m.w,
                               &y, 1),
                     FLOE_OK);
    m.loss = sum_squares_loss(m.g, y);
    check_grads(&m, sign ? xneg : xpos, w, 0);
    floe_graph_free(m.g);
  }
}
END_TEST

/* while (k < 20 && sum(h*h) < 3) h = h @ w * 1.5: the trip count depends on x and w. */
static floe_code cond_grow(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg;
  (void)n;
  FloeTensor *ax = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){0, 1});
  FloeNodeBuilder *b = floe_node_begin(g, "Sum", NULL);
  floe_node_add_input(b, floe_binary(g, "Mul", NULL, v[1], v[1]));
  floe_node_add_input(b, floe_const(g, NULL, ax));
  floe_tensor_release(ax);
  FloeOutput small = floe_binary(g, "Less", NULL, floe_out(floe_node_finish(b), 0), f64_const(g, 3));
  *pred = floe_binary(g, "LogicalAnd", NULL, small,
                      floe_binary(g, "Less", NULL, v[0], const_i32(g, NULL, 20)));
  return FLOE_OK;
}

static floe_code body_grow(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)n;
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  next[1] = floe_binary(g, "Mul", NULL, floe_matmul(g, NULL, v[1], *(FloeOutput *)arg, 0, 0),
                        f64_const(g, 1.5));
  return FLOE_OK;
}

START_TEST(gradient_through_a_data_dependent_trip_count) {
  enum { D = 3 };
  const double w[D * D] = {0.9, -0.2, 0.1, 0.3, 0.8, -0.4, -0.6, 0.2, 0.7};
  const double xs[2][D] = {{0.1, 0.05, -0.02}, {1.0, -0.8, 0.6}};
  for (int k = 0; k < 2; k++) {
    GradModel m = grad_model_new(D);
    FloeOutput init[2] = {const_i32(m.g, "k0", 0), m.x}, res[2];
    ck_assert_int_eq(floe_while_loop(m.g, "grow", cond_grow, body_grow, &m.w, init, 2, NULL, res),
                     FLOE_OK);
    floe_unary(m.g, "Identity", "trips", res[0]);
    m.loss = sum_squares_loss(m.g, res[1]);
    /* The two starting points take different numbers of iterations. */
    FloeSession *s = session_new(m.g);
    const int64_t dx[2] = {1, D}, dw[2] = {D, D};
    FloeTensor *xt = harness_f64(2, dx, xs[k]), *wt = harness_f64(2, dw, w);
    FloeFeed f[2] = {{"x", xt}, {"w", wt}};
    const char *fetch[1] = {"trips"};
    FloeTensor *trips;
    ck_assert(floe_session_run(s, f, 2, fetch, 1, NULL, 0, &trips, NULL) == FLOE_OK);
    int32_t t = *(const int32_t *)floe_tensor_data(trips);
    static int32_t first_trips;
    if (k == 0) first_trips = t;
    ck_assert_msg(k == 0 ? t >= 3 : t < first_trips, "start %d took %d iterations", k, t);
    floe_tensor_release(trips);
    floe_tensor_release(xt);
    floe_tensor_release(wt);
    floe_session_free(s);
    check_grads(&m, xs[k], w, 0);
    floe_graph_free(m.g);
  }
}
END_TEST

/* A cond in the body: even iterations h = tanh(h @ w), odd ones h = h * h. */
static floe_code body_alternate(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                                FloeOutput *next) {
  (void)n;
  FloeOutput half = floe_binary(g, "Div", NULL, v[0], const_i32(g, NULL, 2));
  FloeOutput even = floe_binary(g, "Equal", NULL,
                                floe_binary(g, "Mul", NULL, half, const_i32(g, NULL, 2)), v[0]);
  next[0] = floe_binary(g, "Add", NULL, v[0], const_i32(g, NULL, 1));
  char name[64];
  snprintf(name, sizeof name, "alt_%d", floe_graph_num_nodes(g));
  return floe_cond(g, name, even, &v[1], 1, branch_tanh_matmul, branch_square,
                   &((RnnArg *)arg)->w, &next[1], 1);
}

START_TEST(gradient_of_a_cond_inside_a_loop) {
  enum { D = 3 };
  const double x[D] = {0.3, -0.7, 0.2};
  const double w[D * D] = {0.5, -0.2, 0.1, 0.3, 0.8, -0.4, -0.6, 0.2, 0.7};
  GradModel m = grad_model_new(D);
  RnnArg a = {m.n, m.w};
  FloeOutput init[2] = {const_i32(m.g, "k0", 0), m.x}, res[2];
  ck_assert_int_eq(floe_while_loop(m.g, "alt", cond_rnn, body_alternate, &a, init, 2, NULL, res),
                   FLOE_OK);
  m.loss = sum_squares_loss(m.g, res[1]);
  check_grads(&m, x, w, 5);
  floe_graph_free(m.g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("control_flow");
  TCase *tc = tcase_create("loops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, counter_loop_with_data_dependent_trip_count);
  tcase_add_test(tc, maximum_iterations_stops_the_loop);
  tcase_add_test(tc, nested_loops);
  tcase_add_test(tc, matmul_loop_reads_a_variable);
  tcase_add_test(tc, one_parallel_iteration_serialises_iterations);
  tcase_add_test(tc, timeout_stops_an_endless_loop_and_names_it);
  tcase_add_test(tc, cancel_and_close_stop_a_running_loop);
  tcase_add_test(tc, gradient_of_a_loop_matches_finite_differences);
  tcase_add_test(tc, gradient_of_a_cond_matches_finite_differences);
  tcase_add_test(tc, gradient_through_a_data_dependent_trip_count);
  tcase_add_test(tc, gradient_of_a_cond_inside_a_loop);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("cond");
  tcase_add_test(tc, cond_runs_only_the_taken_branch);
  tcase_add_test(tc, cond_inside_loop_and_loop_inside_cond);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, fetching_a_dead_branch_or_a_loop_inside_is_an_error);
  tcase_add_test(tc, builder_errors_name_the_loop);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
