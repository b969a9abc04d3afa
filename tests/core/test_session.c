/* SPDX-License-Identifier: Apache-2.0 */
/* test_session.c - sessions: pruning, feeding intermediate tensors, name resolution and
 * feed checks, placement errors, the executor cache, profiles, and concurrent runs on one
 * session. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

static FloeRuntime *rt; /* one runtime for the whole program, 2 threads */

static FloeSession *session_new(FloeGraph *g) { return harness_session(g, rt); }

static float scalar_f32(const FloeTensor *t) {
  ck_assert_int_eq(floe_tensor_dtype(t), FLOE_F32);
  ck_assert_int_eq(floe_tensor_rank(t), 0);
  return *(const float *)floe_tensor_data(t);
}

/* Fails the test unless msg contains every one of the strings. */
static void assert_mentions(const char *msg, const char *a, const char *b) {
  ck_assert_msg(strstr(msg, a) != NULL, "'%s' not in: %s", a, msg);
  if (b) ck_assert_msg(strstr(msg, b) != NULL, "'%s' not in: %s", b, msg);
}

/* x (f32 [2]) -> y = x * 3 -> z = y + 1; plus an unused branch that always fails at run
 * time (an integer division by a constant zero) and a second placeholder q. */
static FloeGraph *small_graph(void) {
  const int64_t d2[1] = {2};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, d2));
  FloeOutput y = floe_binary(g, "Mul", "y", x, floe_const_f32(g, "three", 3.0f));
  floe_binary(g, "Add", "z", y, floe_const_f32(g, "one", 1.0f));
  FloeTensor *seven = floe_tensor_scalar_i32(7, NULL), *zero = floe_tensor_scalar_i32(0, NULL);
  floe_binary(g, "Div", "broken", floe_const(g, "seven", seven), floe_const(g, "zero", zero));
  floe_tensor_release(seven);
  floe_tensor_release(zero);
  floe_placeholder(g, "q", FLOE_F32, floe_shape_scalar());
  return g;
}

static FloeTensor *vec2(float a, float b) {
  const int64_t d2[1] = {2};
  const float v[2] = {a, b};
  return harness_f32(1, d2, v);
}

/* ---- pruning and feeding ---- */

START_TEST(unused_failing_branch_is_not_run) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *xv = vec2(1, 2), *out = NULL;
  FloeFeed f = {"x", xv};
  const char *fetch = "z";
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_float_eq(((float *)floe_tensor_data(out))[0], 4.0f);
  ck_assert_float_eq(((float *)floe_tensor_data(out))[1], 7.0f);
  floe_tensor_release(out);
  /* The branch does fail when asked for: the test above is not vacuous. */
  fetch = "broken";
  ck_assert_int_ne(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st), FLOE_OK);
  assert_mentions(floe_status_message(st), "node 'broken' (Div)", NULL);
  floe_tensor_release(xv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(feeding_an_intermediate_cuts_the_graph) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *yv = vec2(10, 20), *out[2] = {NULL, NULL};
  /* y is fed: x (a placeholder nobody feeds) is not needed, and y's value is the feed. */
  FloeFeed f = {"y", yv};
  const char *fetches[] = {"z", "y:0"};
  ck_assert_int_eq(floe_session_run(s, &f, 1, fetches, 2, NULL, 0, out, st), FLOE_OK);
  ck_assert_float_eq(((float *)floe_tensor_data(out[0]))[0], 11.0f);
  ck_assert_float_eq(((float *)floe_tensor_data(out[0]))[1], 21.0f);
  ck_assert_ptr_eq(out[1], yv); /* a fetched feed is the fed tensor itself */
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  /* Feeding the failing node's output lets its consumers run without it. */
  FloeGraph *g2 = floe_graph_new();
  FloeTensor *seven = floe_tensor_scalar_i32(7, NULL), *zero = floe_tensor_scalar_i32(0, NULL);
  FloeOutput d = floe_binary(g2, "Div", "d", floe_const(g2, "seven", seven),
                             floe_const(g2, "zero", zero));
  floe_binary(g2, "Add", "e", d, floe_const(g2, "seven2", seven));
  FloeSession *s2 = session_new(g2);
  FloeTensor *dv = floe_tensor_scalar_i32(5, NULL), *ev = NULL;
  FloeFeed fd = {"d", dv};
  const char *fe = "e";
  ck_assert_int_eq(floe_session_run(s2, &fd, 1, &fe, 1, NULL, 0, &ev, st), FLOE_OK);
  ck_assert_int_eq(*(int32_t *)floe_tensor_data(ev), 12);
  floe_tensor_release(ev);
  ck_assert_int_ne(floe_session_run(s2, NULL, 0, &fe, 1, NULL, 0, &ev, st), FLOE_OK);
  assert_mentions(floe_status_message(st), "node 'd' (Div)", NULL);
  floe_tensor_release(seven);
  floe_tensor_release(zero);
  floe_tensor_release(dv);
  floe_session_free(s2);
  floe_graph_free(g2);
  floe_tensor_release(yv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- bad requests ---- */

START_TEST(unknown_names) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *xv = vec2(1, 2), *out = (FloeTensor *)0x1;
  FloeFeed f = {"x", xv}, bad_feed = {"xx_unknown", xv};
  const char *fetch = "zz";
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st), FLOE_NOT_FOUND);
  assert_mentions(floe_status_message(st), "'zz'", "did you mean 'z'?");
  ck_assert_ptr_eq(out, (FloeTensor *)0x1); /* no output set on error */
  fetch = "z";
  ck_assert_int_eq(floe_session_run(s, &bad_feed, 1, &fetch, 1, NULL, 0, &out, st),
                   FLOE_NOT_FOUND);
  assert_mentions(floe_status_message(st), "feed", "xx_unknown");
  const char *target = "brokn";
  ck_assert_int_eq(floe_session_run(s, &f, 1, NULL, 0, &target, 1, NULL, st), FLOE_NOT_FOUND);
  assert_mentions(floe_status_message(st), "target 'brokn'", "did you mean 'broken'?");
  fetch = "z:3";
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st), FLOE_OUT_OF_RANGE);
  assert_mentions(floe_status_message(st), "z:3", NULL);
  ck_assert_int_eq(floe_session_run(s, &f, 1, NULL, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  FloeFeed twice[2] = {{"x", xv}, {"x:0", xv}};
  ck_assert_int_eq(floe_session_run(s, twice, 2, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  assert_mentions(floe_status_message(st), "'x'", "'x:0'");
  ck_assert_int_eq(floe_session_num_cached(s), 0);
  floe_tensor_release(xv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(wrong_feed_dtype_or_shape) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  const char *fetch = "z";
  const int64_t d3[1] = {3}, d21[2] = {2, 1};
  const int32_t iv[2] = {1, 2};
  FloeTensor *as_int = harness_i32(1, (const int64_t[]){2}, iv);
  FloeFeed f = {"x", as_int};
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  assert_mentions(floe_status_message(st), "feed 'x'", "i32");
  assert_mentions(floe_status_message(st), "f32", "(Placeholder)");
  FloeTensor *three = floe_tensor_new(FLOE_F32, 1, d3, NULL);
  f.value = three;
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  assert_mentions(floe_status_message(st), "[3]", "[2]");
  FloeTensor *rank2 = floe_tensor_new(FLOE_F32, 2, d21, NULL);
  f.value = rank2;
  ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  assert_mentions(floe_status_message(st), "[2,1]", "feed 'x'");
  floe_tensor_release(as_int);
  floe_tensor_release(three);
  floe_tensor_release(rank2);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(unfed_placeholder) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  const char *fetch = "z";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_str_eq(floe_status_message(st),
                   "placeholder 'x' must be fed (use --feed x=FILE.npy / a FloeFeed)");
  /* Without a status the code is still right. */
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, NULL),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_session_num_cached(s), 0);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(placement_errors) {
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, "Neg", "far_away");
  floe_node_add_input(b, floe_const_f32(g, "c", 2.0f));
  floe_node_set_device(b, "cpu:7");
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  FloeTensor *out = NULL;
  const char *fetch = "far_away";
  ck_assert_int_ne(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st), FLOE_OK);
  assert_mentions(floe_status_message(st), "node 'far_away' (Neg)", "cpu:7");
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, NULL),
                   floe_status_code(st));
  fetch = "c";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_float_eq(scalar_f32(out), 2.0f);
  floe_tensor_release(out);
  floe_session_free(s);
  /* A default device that does not exist is refused when the session is made. */
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.device = "nosuchdevice:0";
  ck_assert_ptr_null(floe_session_new(g, &o, st));
  assert_mentions(floe_status_message(st), "nosuchdevice:0", NULL);
  /* So is a graph holding a sticky error, with that error in the message. */
  floe_binary(g, "MatMul", "mm", floe_out(floe_graph_find(g, "c"), 0),
              floe_out(floe_graph_find(g, "c"), 0));
  ck_assert_int_ne(floe_graph_status(g), FLOE_OK);
  o.device = NULL;
  ck_assert_ptr_null(floe_session_new(g, &o, st));
  assert_mentions(floe_status_message(st), "mm", NULL);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ---- the executor cache ---- */

START_TEST(executor_cache) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeTensor *xv = vec2(1, 2), *qv = floe_tensor_scalar_f32(9, NULL);
  FloeTensor *out[3];
  FloeFeed feeds[2] = {{"x", xv}, {"q", qv}};
  FloeFeed feeds_rev[2] = {{"q:0", qv}, {"x", xv}};
  const char *zy[] = {"z", "y"}, *yz0[] = {"y:0", "z:0"}, *zzy[] = {"z", "z", "y"};
  ck_assert_int_eq(floe_session_num_cached(s), 0);
  ck_assert_int_eq(floe_session_run(s, feeds, 2, zy, 2, NULL, 0, out, st), FLOE_OK);
  ck_assert_float_eq(((float *)floe_tensor_data(out[0]))[1], 7.0f);
  ck_assert_float_eq(((float *)floe_tensor_data(out[1]))[1], 6.0f);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  ck_assert_int_eq(floe_session_num_cached(s), 1);
  /* Same signature spelled differently and in another order: the same executor, and the
   * outputs still follow the caller's order. */
  ck_assert_int_eq(floe_session_run(s, feeds_rev, 2, yz0, 2, NULL, 0, out, st), FLOE_OK);
  ck_assert_float_eq(((float *)floe_tensor_data(out[0]))[1], 6.0f);
  ck_assert_float_eq(((float *)floe_tensor_data(out[1]))[1], 7.0f);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  ck_assert_int_eq(floe_session_run(s, feeds, 2, zzy, 3, NULL, 0, out, st), FLOE_OK);
  ck_assert_ptr_eq(out[0], out[1]); /* one tensor, two references */
  ck_assert_float_eq(((float *)floe_tensor_data(out[2]))[0], 3.0f);
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  ck_assert_int_eq(floe_session_num_cached(s), 1);
  /* Another fetch set, another feed set, a target: three more. */
  ck_assert_int_eq(floe_session_run(s, feeds, 2, zy, 1, NULL, 0, out, st), FLOE_OK);
  floe_tensor_release(out[0]);
  ck_assert_int_eq(floe_session_run(s, feeds, 1, zy, 1, NULL, 0, out, st), FLOE_OK);
  floe_tensor_release(out[0]);
  const char *target = "z";
  ck_assert_int_eq(floe_session_run(s, feeds, 1, NULL, 0, &target, 1, NULL, st), FLOE_OK);
  ck_assert_int_eq(floe_session_num_cached(s), 4);
  floe_tensor_release(xv);
  floe_tensor_release(qv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- concurrency ---- */

typedef struct Worker {
  FloeSession *s;
  int id;
  int failures;
  char first_error[256];
} Worker;

/* 200 runs with feeds of its own; even workers fetch z, odd ones y and z (two signatures
 * built concurrently). Every result is checked. */
static void *worker_main(void *arg) {
  Worker *w = arg;
  FloeStatus *st = floe_status_new();
  for (int r = 0; r < 200 && st; r++) {
    float a = (float)(w->id * 1000 + r), b = (float)(-r);
    FloeTensor *xv = vec2(a, b);
    FloeFeed f = {"x", xv};
    const char *fetches[2] = {"z", "y"};
    int n = (w->id & 1) ? 2 : 1;
    FloeTensor *out[2] = {NULL, NULL};
    floe_code rc = floe_session_run(w->s, &f, 1, fetches, n, NULL, 0, out, st);
    bool ok = rc == FLOE_OK;
    if (ok) {
      const float *z = floe_tensor_data(out[0]);
      ok = z[0] == a * 3 + 1 && z[1] == b * 3 + 1;
      if (n == 2) {
        const float *y = floe_tensor_data(out[1]);
        ok = ok && y[0] == a * 3 && y[1] == b * 3;
      }
    }
    if (!ok && w->failures++ == 0)
      snprintf(w->first_error, sizeof w->first_error, "worker %d run %d: %s", w->id, r,
               rc ? floe_status_message(st) : "wrong values");
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
    floe_tensor_release(xv);
  }
  floe_status_free(st);
  return NULL;
}

START_TEST(eight_threads_share_one_session) {
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  floe_graph_free(g); /* the session keeps its own copy */
  Worker w[8];
  pthread_t th[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (Worker){s, i, 0, ""};
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 8; i++) ck_assert_msg(w[i].failures == 0, "%s", w[i].first_error);
  ck_assert_int_eq(floe_session_num_cached(s), 2);
  floe_session_free(s);
}
END_TEST

/* A checked fixture: the runtime's pool threads must be created in the test's own
 * (forked) process. */
static void runtime_setup(void) { rt = harness_runtime(2); }

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* A stateful node keeps one kernel instance per session: its random stream continues when
 * the session runs it under another signature, and restarts only in a new session. */
static void draw(FloeSession *s, const char *const *fetches, int n, float *first) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out[2] = {NULL, NULL};
  ck_assert_msg(floe_session_run(s, NULL, 0, fetches, n, NULL, 0, out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  memcpy(first, floe_tensor_data(out[0]), 4 * sizeof(float));
  if (n == 2) ck_assert_mem_eq(floe_tensor_data(out[0]), floe_tensor_data(out[1]), 16);
  for (int i = 0; i < n; i++) floe_tensor_release(out[i]);
  floe_status_free(st);
}

START_TEST(stateful_kernels_are_shared_across_signatures) {
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_new();
  int32_t four = 4;
  FloeTensor *shape = floe_tensor_from_data(FLOE_I32, 1, (int64_t[]){1}, &four, 4, st);
  FloeNodeBuilder *b = floe_node_begin(g, "RandomUniform", "r");
  floe_node_add_input(b, floe_const(g, "shape", shape));
  floe_node_set_attr_int(b, "seed", 7);
  floe_node_set_attr_int(b, "seed2", 3);
  FloeNode *r = floe_node_finish(b);
  floe_unary(g, "Identity", "i", floe_out(r, 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  const char *just_r[] = {"r"}, *r_and_i[] = {"r", "i"};
  float a1[4], a2[4], b1[4];
  FloeSession *s1 = floe_session_new(g, NULL, st);
  draw(s1, just_r, 1, a1);
  draw(s1, r_and_i, 2, a2); /* a second executor: the stream must go on */
  ck_assert_int_eq(floe_session_num_cached(s1), 2);
  ck_assert_msg(memcmp(a1, a2, sizeof a1) != 0, "second signature repeated the first draw");
  FloeSession *s2 = floe_session_new(g, NULL, st);
  draw(s2, r_and_i, 2, b1); /* a new session starts the stream again */
  ck_assert_mem_eq(a1, b1, sizeof a1);
  floe_session_free(s1);
  floe_session_free(s2);
  floe_tensor_release(shape);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---- profiling ---- */

/* The row of op in rows, or NULL. */
static const FloeOpProfile *profile_row(const FloeOpProfile *rows, int n, const char *op) {
  for (int i = 0; i < n; i++)
    if (strcmp(rows[i].op, op) == 0) return &rows[i];
  return NULL;
}

/* Runs fetch `name` of small_graph k times with x fed. */
static void run_fetch(FloeSession *s, const char *name, int k) {
  FloeStatus *st = floe_status_new();
  FloeTensor *x = vec2(1.0f, 2.0f);
  FloeFeed feed = {"x", x};
  for (int i = 0; i < k; i++) {
    FloeTensor *out = NULL;
    ck_assert_msg(floe_session_run(s, &feed, 1, &name, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    floe_tensor_release(out);
  }
  floe_tensor_release(x);
  floe_status_free(st);
}

/* Checks the profile holds exactly the expected ops with these calls and output bytes. */
static void expect_profile(FloeSession *s, int n_ops, const char *const *ops,
                           const int64_t *calls, const int64_t *bytes) {
  FloeStatus *st = floe_status_new();
  FloeOpProfile *rows = NULL;
  int n = -1;
  ck_assert_msg(floe_session_profile(s, &rows, &n, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(n, n_ops);
  for (int i = 0; i < n_ops; i++) {
    const FloeOpProfile *r = profile_row(rows, n, ops[i]);
    ck_assert_msg(r != NULL, "no row for %s", ops[i]);
    ck_assert_int_eq(r->calls, calls[i]);
    ck_assert_int_eq(r->output_bytes, bytes[i]);
    ck_assert(r->max_ns >= 0 && r->max_ns <= r->total_ns);
  }
  for (int i = 1; i < n; i++) ck_assert(rows[i - 1].total_ns >= rows[i].total_ns);
  free(rows);
  floe_status_free(st);
}

START_TEST(profile_counts_node_executions) {
  /* Consts run as kernels (the optimiser otherwise hands their values to their readers:
   * profile_leaves_out_host_constants) */
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  FloeGraph *g = small_graph();
  FloeSession *s = session_new(g);
  static const char *const ops[3] = {"Const", "Mul", "Add"};
  run_fetch(s, "z", 2); /* before profiling: not counted */
  expect_profile(s, 0, ops, NULL, NULL);
  floe_session_set_profiling(s, 1);
  /* z runs Const three, Mul y, Const one, Add z; y (a second executor) runs three and y.
   * Outputs: each Const an f32 scalar (4 bytes), y and z f32 [2] (8 bytes). */
  run_fetch(s, "z", 5);
  run_fetch(s, "y", 3);
  expect_profile(s, 3, ops, (const int64_t[]){13, 8, 5}, (const int64_t[]){52, 64, 40});
  floe_session_set_profiling(s, 0); /* stops counting, keeps the counts */
  run_fetch(s, "z", 4);
  expect_profile(s, 3, ops, (const int64_t[]){13, 8, 5}, (const int64_t[]){52, 64, 40});
  floe_session_set_profiling(s, 1); /* a new profile */
  expect_profile(s, 0, ops, NULL, NULL);
  run_fetch(s, "y", 1);
  expect_profile(s, 2, ops, (const int64_t[]){1, 1}, (const int64_t[]){4, 8});
  FloeStatus *st = floe_status_new();
  FloeOpProfile *rows;
  int n;
  ck_assert_int_eq(floe_session_profile(NULL, &rows, &n, st), FLOE_INVALID_ARGUMENT);
  floe_session_set_profiling(NULL, 1); /* a no-op */
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  unsetenv("FLOE_OPT_CONSTANT_FOLDING");
}
END_TEST

/* With the optimiser on, a Const on the CPU is not run: its readers get its value as the
 * executor's own feed. One with a control successor still runs; a reader that may write over
 * its input (Neg reuses a buffer whose last reader it is) must not write over the value;
 * a fetched Const is its value. */
START_TEST(profile_leaves_out_host_constants) {
  const int64_t d2[1] = {2};
  const float cv[2] = {1.5f, -2.0f};
  FloeGraph *g = small_graph();
  FloeTensor *c = harness_f32(1, d2, cv);
  FloeOutput k = floe_const(g, "k", c);
  floe_unary(g, "Neg", "neg_k", k);
  FloeNodeBuilder *b = floe_node_begin(g, "Identity", "gated");
  floe_node_add_input(b, floe_out(floe_graph_find(g, "x"), 0));
  floe_node_add_control_input(b, floe_graph_find(g, "seven"));
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  /* (the dead-node pass would drop the control edge from a Const, which cannot fail) */
  setenv("FLOE_OPT_DEAD_NODES", "0", 1);
  FloeSession *s = session_new(g);
  floe_session_set_profiling(s, 1);
  run_fetch(s, "z", 2);
  run_fetch(s, "gated", 1);
  unsetenv("FLOE_OPT_DEAD_NODES");
  /* z: Mul and Add twice, its two Consts never; gated: Identity, and its control input
   * "seven" (a Const) once */
  expect_profile(s, 4, (const char *const[]){"Mul", "Add", "Identity", "Const"},
                 (const int64_t[]){2, 2, 1, 1}, (const int64_t[]){16, 16, 8, 4});
  FloeStatus *st = floe_status_new();
  const char *names[3] = {"neg_k", "k", "three"};
  for (int round = 0; round < 2; round++) {
    FloeTensor *out[3] = {NULL, NULL, NULL};
    FloeFeed feed = {"x", c};
    ck_assert_msg(floe_session_run(s, &feed, 1, names, 3, NULL, 0, out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    const float *nk = floe_tensor_data(out[0]), *kv = floe_tensor_data(out[1]);
    ck_assert_msg(nk[0] == -1.5f && nk[1] == 2.0f, "round %d: neg_k = [%g, %g]", round, nk[0],
                  nk[1]);
    ck_assert_msg(kv[0] == 1.5f && kv[1] == -2.0f, "round %d: k = [%g, %g]: written over",
                  round, kv[0], kv[1]);
    ck_assert(*(const float *)floe_tensor_data(out[2]) == 3.0f);
    for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  }
  ck_assert(((const float *)floe_tensor_data(c))[0] == 1.5f);
  floe_status_free(st);
  floe_session_free(s);
  floe_tensor_release(c);
  floe_graph_free(g);
}
END_TEST

/* ---- scale ---- */

/* Nodes in the long chain: FLOE_TEST_CHAIN_NODES (the sanitizer and valgrind runs set a
 * smaller one). */
static int chain_nodes(void) {
  const char *e = getenv("FLOE_TEST_CHAIN_NODES");
  int n = e ? atoi(e) : 0;
  return n > 0 ? n : 300000;
}

/* A chain of scalar Adds, a_i = a_{i-1} + 1, whose every node is its own colocation group,
 * placed and run both ways (the simple rule, and the cost model with a device list). Placing
 * it was quadratic in the node count (each group's members were found by scanning every
 * node: 300k nodes took minutes); now the groups are linked lists. The tcase's 60 s timeout
 * is the hang guard, not a performance claim (bench/bench_executor measures). */
START_TEST(long_chain_places_and_runs) {
  const int n = chain_nodes();
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_const_f32(g, "start", 0.0f);
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  for (int i = 0; i < n; i++) a = floe_binary(g, "Add", NULL, a, one);
  char last[64];
  snprintf(last, sizeof last, "%s", floe_node_name(a.node));
  for (int cost_model = 0; cost_model < 2; cost_model++) {
    FloeSessionOptions o;
    floe_session_options_init(&o);
    o.runtime = rt;
    o.devices = cost_model ? "cpu" : NULL;
    FloeSession *s = harness_session_opts(g, &o, NULL);
    FloeStatus *st = floe_status_new();
    const char *fetch = last;
    FloeTensor *out = NULL;
    ck_assert_msg(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_float_eq(scalar_f32(out), (float)n); /* exact: n < 2^24 */
    floe_tensor_release(out);
    floe_status_free(st);
    floe_session_free(s);
  }
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("session");
  TCase *tc = tcase_create("prune");
  tcase_add_test(tc, unused_failing_branch_is_not_run);
  tcase_add_test(tc, feeding_an_intermediate_cuts_the_graph);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, unknown_names);
  tcase_add_test(tc, wrong_feed_dtype_or_shape);
  tcase_add_test(tc, unfed_placeholder);
  tcase_add_test(tc, placement_errors);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("cache");
  tcase_add_test(tc, executor_cache);
  tcase_add_test(tc, stateful_kernels_are_shared_across_signatures);
  tcase_add_test(tc, profile_counts_node_executions);
  tcase_add_test(tc, profile_leaves_out_host_constants);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("scale");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, long_chain_places_and_runs);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("threads");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, eight_threads_share_one_session);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
