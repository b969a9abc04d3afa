/* SPDX-License-Identifier: Apache-2.0 */
/* test_collective.c - the collective ops on the built-in ring, ranks being CPU devices of one
 * process (FLOE_CPU_DEVICES=4): all-reduce with each reduction and several dtypes, group
 * sizes 1-4 and counts from 1 to many chunks (FLOE_COLLECTIVE_CHUNK_BYTES is small here),
 * all-gather, reduce-scatter, broadcast from every root, several steps and two instances in
 * one step, each checked against sums computed here; then what must fail cleanly: members
 * that disagree on the shape, a group that never fills, an unknown backend, bad attributes,
 * a device given two group sizes; a backend for a device's own memory (the test devices')
 * handed that device's buffers. With the gloo plugin built (FLOE_COLLECTIVE_DIR), the core's
 * check of a plugin backend's arguments across the ranks: each rank its own session and
 * thread, a count that changes on every rank at once, then on one rank only. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "floe/floe_collective.h"

static FloeRuntime *rt;
static int64_t next_group = 100;

static void setup(void) {
  /* The ring moves bytes through a transport: the local one, beside the CPU plugin. */
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR");
  if (local && *local && (!cpu || !strstr(cpu, local))) {
    char path[4096];
    snprintf(path, sizeof path, "%s:%s", cpu ? cpu : "", local);
    setenv("FLOE_PLUGIN_PATH", path, 1);
  }
  /* The gloo backend, where it was built (its tests are skipped otherwise). */
  const char *path = getenv("FLOE_PLUGIN_PATH"), *coll = getenv("FLOE_COLLECTIVE_DIR");
  if (coll && *coll && (!path || !strstr(path, coll))) {
    char both[4096];
    snprintf(both, sizeof both, "%s:%s", path ? path : "", coll);
    setenv("FLOE_PLUGIN_PATH", both, 1);
  }
  setenv("FLOE_CPU_DEVICES", "4", 1);
  /* Small chunks: a few thousand elements already make a pipeline of many. */
  setenv("FLOE_COLLECTIVE_CHUNK_BYTES", "4096", 1);
  rt = harness_runtime(4);
  unsetenv("FLOE_CPU_DEVICES");
}

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
  unsetenv("FLOE_COLLECTIVE_CHUNK_BYTES");
}

/* Rank r's input: a value no two (rank, element) pairs share, exact in every dtype used. */
static double input_value(int r, int64_t j, FloeDType dt) {
  if (dt == FLOE_U8) return (double)((r * 7 + j) % 11);
  if (dt == FLOE_I8) return (double)((r * 5 + j) % 9) - 4;
  return (double)((r + 1) * 3 + (j % 13)) - 8 + (dt == FLOE_F32 || dt == FLOE_F64 ? 0.25 : 0);
}

static FloeTensor *make_input(int r, FloeDType dt, int rank, const int64_t *dims) {
  int64_t n = harness_count(rank, dims);
  double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
  for (int64_t j = 0; j < n; j++) v[j] = input_value(r, j, dt);
  FloeTensor *t = harness_from_doubles(dt, rank, dims, v);
  free(v);
  return t;
}

static double combine(double a, double b, FloeReduceOp op) {
  switch (op) {
  case FLOE_REDUCE_SUM:
  case FLOE_REDUCE_MEAN: return a + b;
  case FLOE_REDUCE_PROD: return a * b;
  case FLOE_REDUCE_MAX: return a > b ? a : b;
  default: return a < b ? a : b;
  }
}

static FloeCollectiveOptions opts_of(int size, int64_t group, int64_t instance) {
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = size;
  o.group_key = group;
  o.instance_key = instance;
  return o;
}

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST } Kind;

/* Builds one op per rank on cpu:r (rank r's input a Const there), runs `steps` steps and
 * checks every rank's result against the reference. */
static void check_case(Kind kind, int n, FloeDType dt, FloeReduceOp op, int64_t count, int root,
                       int steps) {
  char what[128];
  snprintf(what, sizeof what, "kind %d, %d ranks, %s, op %d, count %lld, root %d", kind, n,
           floe_dtype_name(dt), op, (long long)count, root);
  FloeGraph *g = floe_graph_new();
  FloeCollectiveOptions o = opts_of(n, next_group++, 7);
  int64_t in_dims[1] = {kind == REDUCE_SCATTER ? count * n : count};
  char names[4][16];
  const char *fetch[4];
  for (int r = 0; r < n; r++) {
    char dev[16], xn[16];
    snprintf(dev, sizeof dev, "cpu:%d", r);
    snprintf(xn, sizeof xn, "x%d", r);
    snprintf(names[r], sizeof names[r], "out%d", r);
    fetch[r] = names[r];
    floe_graph_set_device_scope(g, dev);
    FloeTensor *x = make_input(r, dt, 1, in_dims);
    FloeOutput xo = floe_const(g, xn, x);
    floe_tensor_release(x);
    if (kind == ALL_REDUCE) floe_all_reduce(g, names[r], xo, op, &o);
    else if (kind == ALL_GATHER) floe_all_gather(g, names[r], xo, &o);
    else if (kind == REDUCE_SCATTER) floe_reduce_scatter(g, names[r], xo, op, &o);
    else if (r == root) floe_broadcast_send(g, names[r], xo, &o);
    else floe_broadcast_recv(g, names[r], dt, floe_shape_make(1, in_dims), &o);
  }
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", what, floe_graph_error(g, NULL));
  FloeSession *s = harness_session(g, rt);
  for (int step = 0; step < steps; step++) {
    FloeTensor *outs[4] = {0};
    harness_run(s, NULL, 0, fetch, n, NULL, 0, outs, what);
    for (int r = 0; r < n; r++) {
      int64_t m = floe_tensor_num_elements(outs[r]);
      int64_t want_n = kind == ALL_GATHER ? count * n : count;
      ck_assert_msg(m == want_n, "%s: rank %d has %lld elements, want %lld", what, r,
                    (long long)m, (long long)want_n);
      ck_assert_int_eq(floe_tensor_dtype(outs[r]), dt);
      for (int64_t j = 0; j < m; j++) {
        double want;
        if (kind == ALL_GATHER) {
          want = input_value((int)(j / count), j % count, dt);
        } else if (kind == BROADCAST) {
          want = input_value(root, j, dt);
        } else {
          int64_t src = kind == REDUCE_SCATTER ? r * count + j : j;
          want = input_value(0, src, dt);
          for (int q = 1; q < n; q++) want = combine(want, input_value(q, src, dt), op);
          if (op == FLOE_REDUCE_MEAN) {
            want /= n;
            if (dt == FLOE_I32 || dt == FLOE_I64 || dt == FLOE_I8 || dt == FLOE_U8)
              want = trunc(want);
          }
        }
        double got = harness_get(outs[r], j);
        double tol = dt == FLOE_F16 || dt == FLOE_BF16 ? 0.02 * (1 + fabs(want)) : 1e-5;
        ck_assert_msg(fabs(got - want) <= tol, "%s, step %d: rank %d element %lld = %g, want %g",
                      what, step, r, (long long)j, got, want);
      }
      floe_tensor_release(outs[r]);
    }
  }
  floe_session_free(s);
  floe_graph_free(g);
}

START_TEST(all_reduce_each_op_and_size) {
  const FloeReduceOp ops[] = {FLOE_REDUCE_SUM, FLOE_REDUCE_MEAN, FLOE_REDUCE_MAX,
                              FLOE_REDUCE_MIN, FLOE_REDUCE_PROD};
  for (int n = 1; n <= 4; n++)
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
      check_case(ALL_REDUCE, n, FLOE_F32, ops[k], 7, 0, 1);
      check_case(ALL_REDUCE, n, FLOE_I32, ops[k], 5, 0, 1);
    }
}
END_TEST

/* Counts below the group's size (empty segments), one element, and many 4 KiB chunks. */
START_TEST(all_reduce_counts_and_dtypes) {
  const int64_t counts[] = {1, 3, 1000, 20000};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
    for (int n = 2; n <= 4; n++)
      check_case(ALL_REDUCE, n, FLOE_F32, FLOE_REDUCE_SUM, counts[c], 0, 1);
  const FloeDType dts[] = {FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I64, FLOE_I8, FLOE_U8};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    check_case(ALL_REDUCE, 3, dts[d], dts[d] == FLOE_U8 ? FLOE_REDUCE_MAX : FLOE_REDUCE_SUM,
               2500, 0, 1);
}
END_TEST

START_TEST(gather_scatter_broadcast) {
  for (int n = 1; n <= 4; n++) {
    check_case(ALL_GATHER, n, FLOE_F32, FLOE_REDUCE_SUM, 3, 0, 1);
    check_case(ALL_GATHER, n, FLOE_I64, FLOE_REDUCE_SUM, 3000, 0, 1);
    check_case(REDUCE_SCATTER, n, FLOE_F32, FLOE_REDUCE_SUM, 5, 0, 1);
    check_case(REDUCE_SCATTER, n, FLOE_F32, FLOE_REDUCE_MEAN, 2000, 0, 1);
    for (int root = 0; root < n; root++) check_case(BROADCAST, n, FLOE_F32, 0, 1500, root, 1);
  }
}
END_TEST

/* Steps count executions: the same instance runs again and again, and two instances of one
 * group run in one step, whichever the executor starts first. */
START_TEST(steps_and_two_instances) {
  check_case(ALL_REDUCE, 4, FLOE_F32, FLOE_REDUCE_SUM, 3000, 0, 5);
  FloeGraph *g = floe_graph_new();
  int64_t group = next_group++;
  FloeCollectiveOptions a = opts_of(2, group, 1), b = opts_of(2, group, 2);
  const char *fetch[4] = {"a0", "b0", "a1", "b1"};
  int64_t dims[1] = {9000};
  for (int r = 0; r < 2; r++) {
    floe_graph_set_device_scope(g, r ? "cpu:1" : "cpu:0");
    FloeTensor *x = make_input(r, FLOE_F32, 1, dims);
    FloeOutput xo = floe_const(g, r ? "x1" : "x0", x);
    floe_tensor_release(x);
    floe_all_reduce(g, fetch[2 * r], xo, FLOE_REDUCE_SUM, &a);
    floe_all_reduce(g, fetch[2 * r + 1], xo, FLOE_REDUCE_MAX, &b);
  }
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = harness_session(g, rt);
  for (int step = 0; step < 3; step++) {
    FloeTensor *outs[4];
    harness_run(s, NULL, 0, fetch, 4, NULL, 0, outs, "two instances");
    for (int64_t j = 0; j < dims[0]; j += 997) {
      double v0 = input_value(0, j, FLOE_F32), v1 = input_value(1, j, FLOE_F32);
      ck_assert_double_eq_tol(harness_get(outs[0], j), v0 + v1, 1e-5);
      ck_assert_double_eq_tol(harness_get(outs[2], j), v0 + v1, 1e-5);
      ck_assert_double_eq_tol(harness_get(outs[1], j), v0 > v1 ? v0 : v1, 1e-5);
      ck_assert_double_eq_tol(harness_get(outs[3], j), v0 > v1 ? v0 : v1, 1e-5);
    }
    for (int i = 0; i < 4; i++) floe_tensor_release(outs[i]);
  }
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* An all-reduce of a value computed in the step runs in place on it (the kernel's input is
 * its output) when nothing else reads that value; a value other nodes read, or that is
 * fetched, keeps its own contents. Rank r: p_r fed, y_r = p_r + p_r, out_r = all_reduce(y_r),
 * and on rank 1 also z = y_1 * out_1 (a second reader of y_1, after the all-reduce). Each of the three ways is checked
 * against values from the inputs alone. */
static bool gloo_loaded(void);

START_TEST(all_reduce_in_place_of_a_step_value) {
  for (int backend = 0; backend < 2; backend++) {
    if (backend == 1 && !gloo_loaded()) continue;
    for (int fetch_y = 0; fetch_y < 2; fetch_y++) {
      char what[96];
      snprintf(what, sizeof what, "%s, %s", backend ? "gloo" : "ring",
               fetch_y ? "y fetched too" : "y read only by the all-reduce");
      FloeGraph *g = floe_graph_new();
      FloeCollectiveOptions o = opts_of(2, next_group++, 3);
      o.backend = backend ? "gloo" : NULL;
      int64_t dims[1] = {20000};
      for (int r = 0; r < 2; r++) {
        char pn[8], yn[8], on[8];
        snprintf(pn, sizeof pn, "p%d", r);
        snprintf(yn, sizeof yn, "y%d", r);
        snprintf(on, sizeof on, "out%d", r);
        floe_graph_set_device_scope(g, r ? "cpu:1" : "cpu:0");
        FloeOutput p = floe_placeholder(g, pn, FLOE_F32, floe_shape_make(1, dims));
        FloeOutput y = floe_binary(g, "Add", yn, p, p);
        FloeOutput out = floe_all_reduce(g, on, y, FLOE_REDUCE_SUM, &o);
        if (r == 1) floe_binary(g, "Mul", "z", y, out); /* reads y after the all-reduce */
      }
      ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", what, floe_graph_error(g, NULL));
      FloeSession *s = harness_session(g, rt);
      FloeTensor *x0 = make_input(0, FLOE_F32, 1, dims), *x1 = make_input(1, FLOE_F32, 1, dims);
      FloeFeed feeds[2] = {{"p0", x0}, {"p1", x1}};
      const char *fetch[5] = {"out0", "out1", "z", "y0", "y1"};
      for (int step = 0; step < 3; step++) {
        FloeTensor *outs[5] = {0};
        harness_run(s, feeds, 2, fetch, fetch_y ? 5 : 3, NULL, 0, outs, what);
        for (int64_t j = 0; j < dims[0]; j++) {
          double v0 = input_value(0, j, FLOE_F32), v1 = input_value(1, j, FLOE_F32);
          double sum = 2 * v0 + 2 * v1;
          ck_assert_msg(harness_get(outs[0], j) == sum && harness_get(outs[1], j) == sum,
                        "%s, step %d: element %lld = %g and %g, want %g", what, step,
                        (long long)j, harness_get(outs[0], j), harness_get(outs[1], j), sum);
          ck_assert_msg(harness_get(outs[2], j) == (float)(2 * v1 * sum),
                        "%s, step %d: z[%lld] = %g, want %g (the second reader saw the sum?)",
                        what, step, (long long)j, harness_get(outs[2], j), 2 * v1 * sum);
          if (fetch_y)
            ck_assert_msg(harness_get(outs[3], j) == 2 * v0 && harness_get(outs[4], j) == 2 * v1,
                          "%s, step %d: fetched y[%lld] = %g and %g, want %g and %g", what,
                          step, (long long)j, harness_get(outs[3], j),
                          harness_get(outs[4], j), 2 * v0, 2 * v1);
        }
        /* the feeds are the caller's: never reduced into */
        ck_assert_double_eq(harness_get(x0, 7), input_value(0, 7, FLOE_F32));
        for (int i = 0; i < 5; i++)
          if (outs[i]) floe_tensor_release(outs[i]);
      }
      floe_tensor_release(x0);
      floe_tensor_release(x1);
      floe_session_free(s);
      floe_graph_free(g);
    }
  }
}
END_TEST

/* Runs a two-rank graph whose ranks' inputs have n0 and n1 elements; returns the run's code
 * and copies its message. */
/* Rank r's all-reduce (sum of f32) on devs[r] of its input (a Const on cpu:r); the results
 * into outs (NULL: released). */
static floe_code run_pair_on(const char *const *devs, int64_t n0, int64_t n1, int group_size,
                             const char *backend, int64_t timeout_ms, char *msg, size_t cap,
                             FloeTensor **keep) {
  FloeGraph *g = floe_graph_new();
  FloeCollectiveOptions o = opts_of(group_size, next_group++, 1);
  o.backend = backend;
  o.timeout_ms = timeout_ms;
  const char *fetch[2] = {"r0", "r1"};
  for (int r = 0; r < 2; r++) {
    int64_t dims[1] = {r ? n1 : n0};
    floe_graph_set_device_scope(g, r ? "cpu:1" : "cpu:0");
    FloeTensor *x = make_input(r, FLOE_F32, 1, dims);
    FloeOutput xo = floe_const(g, r ? "x1" : "x0", x);
    floe_tensor_release(x);
    floe_graph_set_device_scope(g, devs[r]);
    floe_all_reduce(g, fetch[r], xo, FLOE_REDUCE_SUM, &o);
  }
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = harness_session(g, rt);
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = 20000; /* a hang is a failure, not a stuck test */
  FloeTensor *outs[2] = {0};
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run_opts(s, &ro, NULL, 0, fetch, 2, NULL, 0, outs, st);
  snprintf(msg, cap, "%s", floe_status_message(st));
  floe_status_free(st);
  for (int i = 0; i < 2; i++) {
    if (keep) keep[i] = outs[i];
    else if (outs[i]) floe_tensor_release(outs[i]);
  }
  floe_session_free(s);
  floe_graph_free(g);
  return rc;
}

static floe_code run_pair(int64_t n0, int64_t n1, int group_size, const char *backend,
                          int64_t timeout_ms, char *msg, size_t cap) {
  static const char *const cpus[2] = {"cpu:0", "cpu:1"};
  return run_pair_on(cpus, n0, n1, group_size, backend, timeout_ms, msg, cap, NULL);
}

START_TEST(members_that_disagree) {
  char msg[1024];
  floe_code rc = run_pair(3000, 2000, 2, NULL, 0, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT || rc == FLOE_ABORTED, "code %d: %s", rc, msg);
  ck_assert_msg(strstr(msg, "disagree") || strstr(msg, "aborted"), "%s", msg);
  /* One member short: the group never fills; the message counts who came. */
  rc = run_pair(10, 10, 3, NULL, 300, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_DEADLINE_EXCEEDED, "code %d: %s", rc, msg);
  ck_assert_msg(strstr(msg, "2 of 3 members joined"), "%s", msg);
  /* An unknown backend names the loaded ones. */
  rc = run_pair(10, 10, 2, "nccl-nope", 0, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_NOT_FOUND, "code %d: %s", rc, msg);
  ck_assert_msg(strstr(msg, "\"nccl-nope\"") && strstr(msg, "ring"), "%s", msg);
  /* After the failures the runtime still runs collectives. */
  ck_assert_int_eq(run_pair(100, 100, 2, "ring", 0, msg, sizeof msg), FLOE_OK);
}
END_TEST

START_TEST(bad_attributes) {
  int64_t dims[1] = {6};
  const int sizes[] = {0, -1, 5000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
    FloeCollectiveOptions o = opts_of(sizes[i], 1, 1);
    floe_all_reduce(g, "r", x, FLOE_REDUCE_SUM, &o);
    ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
    ck_assert_msg(strstr(floe_graph_error(g, NULL), "group_size"), "%s", floe_graph_error(g, NULL));
    floe_graph_free(g);
  }
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
  FloeCollectiveOptions o = opts_of(4, 1, 1);
  floe_reduce_scatter(g, "rs", x, FLOE_REDUCE_SUM, &o);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "multiple of group_size"), "%s",
                floe_graph_error(g, NULL));
  floe_graph_free(g);
  g = floe_graph_new();
  x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
  floe_all_reduce(g, "r", x, (FloeReduceOp)9, &o);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  floe_graph_free(g);
  g = floe_graph_new();
  floe_broadcast_recv(g, "b", FLOE_F32, floe_shape_unknown(), &o);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "fully defined"), "%s",
                floe_graph_error(g, NULL));
  floe_graph_free(g);
  g = floe_graph_new();
  x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
  floe_all_reduce(g, "r", x, FLOE_REDUCE_SUM, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  floe_graph_free(g);
}
END_TEST

/* A device is in a group with one size; the same key with another size is refused. */
START_TEST(one_group_key_one_size) {
  char msg[1024];
  int64_t key = next_group++;
  for (int pass = 0; pass < 2; pass++) {
    FloeGraph *g = floe_graph_new();
    FloeCollectiveOptions o = opts_of(pass ? 3 : 1, key, 1);
    int64_t dims[1] = {4};
    floe_graph_set_device_scope(g, "cpu:0");
    FloeTensor *t = make_input(0, FLOE_F32, 1, dims);
    FloeOutput x = floe_const(g, "x", t);
    floe_tensor_release(t);
    floe_all_reduce(g, "r", x, FLOE_REDUCE_SUM, &o);
    FloeTensor *out = NULL;
    FloeStatus *st = floe_status_new();
    const char *fetch = "r";
    floe_code rc = harness_run_graph(g, rt, NULL, 0, &fetch, 1, &out, st);
    snprintf(msg, sizeof msg, "%s", floe_status_message(st));
    floe_status_free(st);
    if (out) floe_tensor_release(out);
    floe_graph_free(g);
    if (pass == 0) ck_assert_msg(rc == FLOE_OK, "%s", msg);
    else
      ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "group_size 1"), "%d: %s", rc, msg);
  }
}
END_TEST

/* A backend for a device's own memory (the test devices' "testdev", as nccl is CUDA's) gets
 * the device's buffers: the backend fails an operation whose buffers are not in its
 * device's live blocks. A backend for host memory (the ring) still works there through host
 * copies, and a device backend asked for on the CPU is refused naming both. */
static void setup_testdev(void) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR"),
             *td = getenv("FLOE_TESTDEV_DIR");
  ck_assert_msg(td && *td, "FLOE_TESTDEV_DIR is not set (run through make check)");
  char path[8192];
  snprintf(path, sizeof path, "%s:%s:%s", cpu ? cpu : "", local ? local : "", td);
  setenv("FLOE_PLUGIN_PATH", path, 1);
  setenv("FLOE_CPU_DEVICES", "2", 1);
  rt = harness_runtime(4);
  unsetenv("FLOE_CPU_DEVICES");
  if (cpu) setenv("FLOE_PLUGIN_PATH", cpu, 1);
}

START_TEST(device_memory_backend) {
  static const char *const tds[2] = {"testdev:0", "testdev:1"};
  static const char *const cpus[2] = {"cpu:0", "cpu:1"};
  char msg[1024];
  for (int b = 0; b < 2; b++) {
    const char *backend = b ? "ring" : "testdev";
    FloeTensor *outs[2] = {0};
    floe_code rc = run_pair_on(tds, 1000, 1000, 2, backend, 0, msg, sizeof msg, outs);
    ck_assert_msg(rc == FLOE_OK, "%s on testdev: %s", backend, msg);
    for (int r = 0; r < 2; r++) {
      ck_assert_int_eq(floe_tensor_num_elements(outs[r]), 1000);
      for (int64_t j = 0; j < 1000; j++) {
        double want = input_value(0, j, FLOE_F32) + input_value(1, j, FLOE_F32);
        double got = harness_get(outs[r], j);
        ck_assert_msg(fabs(got - want) < 1e-5, "%s: rank %d element %lld = %g, want %g",
                      backend, r, (long long)j, got, want);
      }
      floe_tensor_release(outs[r]);
    }
  }
  floe_code rc = run_pair_on(cpus, 10, 10, 2, "testdev", 0, msg, sizeof msg, NULL);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "code %d: %s", rc, msg);
  ck_assert_msg(strstr(msg, "works on TESTDEV memory") && strstr(msg, "CPU:0") &&
                    strstr(msg, "place the collective"), "%s", msg);
}
END_TEST

/* ---- the core's check of a plugin backend's arguments (gloo) ---- */

static bool gloo_loaded(void) {
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (strcmp(p->name, "collective-gloo") == 0 && p->num_collectives > 0) return true;
  }
  return false;
}

#define CHECK_STEPS 4
#define CHECK_TIMEOUT_MS 1500

/* One rank: its own graph and session on cpu:<rank>, an all-reduce of a fed vector whose
 * length may change from step to step. Runs on a thread of its own (no ck_assert here). */
typedef struct RankSteps {
  int rank;
  int64_t group;
  int64_t counts[CHECK_STEPS]; /* this rank's count at each step */
  FloeSession *s;
  FloeGraph *g;
  int failed_step;             /* -1: none */
  floe_code code;
  char msg[2048];
  char wrong[256];             /* a wrong sum, if one came */
  double fail_ms;
} RankSteps;

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void rank_steps_init(RankSteps *rs, int rank, int64_t group, const char *backend) {
  memset(rs, 0, sizeof *rs);
  rs->rank = rank;
  rs->group = group;
  rs->failed_step = -1;
  rs->g = floe_graph_new();
  floe_graph_set_device_scope(rs->g, rank ? "cpu:1" : "cpu:0");
  int64_t dims[1] = {-1};
  FloeOutput x = floe_placeholder(rs->g, "x", FLOE_F32, floe_shape_make(1, dims));
  FloeCollectiveOptions o = opts_of(2, group, 1);
  o.backend = backend;
  o.timeout_ms = CHECK_TIMEOUT_MS;
  floe_all_reduce(rs->g, "r", x, FLOE_REDUCE_SUM, &o);
  ck_assert_msg(floe_graph_status(rs->g) == FLOE_OK, "%s", floe_graph_error(rs->g, NULL));
  rs->s = harness_session(rs->g, rt);
}

static void *rank_steps_main(void *p) {
  RankSteps *rs = p;
  FloeStatus *st = floe_status_new();
  for (int step = 0; step < CHECK_STEPS && rs->failed_step < 0; step++) {
    int64_t dims[1] = {rs->counts[step]};
    FloeTensor *x = make_input(rs->rank, FLOE_F32, 1, dims);
    FloeFeed f = {"x", x};
    const char *fetch = "r";
    FloeTensor *out = NULL;
    FloeRunOptions ro;
    floe_run_options_init(&ro);
    ro.timeout_ms = 20000; /* a hang is a failure, not a stuck test */
    double t0 = mono_ms();
    floe_code rc = floe_session_run_opts(rs->s, &ro, &f, 1, &fetch, 1, NULL, 0, &out, st);
    floe_tensor_release(x);
    if (rc != FLOE_OK) {
      rs->failed_step = step;
      rs->code = rc;
      rs->fail_ms = mono_ms() - t0;
      snprintf(rs->msg, sizeof rs->msg, "%s", floe_status_message(st));
      break;
    }
    for (int64_t j = 0; j < dims[0] && !rs->wrong[0]; j++) {
      double want = input_value(0, j, FLOE_F32) + input_value(1, j, FLOE_F32);
      if (fabs(harness_get(out, j) - want) > 1e-4)
        snprintf(rs->wrong, sizeof rs->wrong, "rank %d step %d: element %lld = %g, want %g",
                 rs->rank, step, (long long)j, harness_get(out, j), want);
    }
    floe_tensor_release(out);
  }
  floe_status_free(st);
  return NULL;
}

/* Runs both ranks' steps to their end or first failure. */
static void run_ranks(RankSteps *rs) {
  pthread_t th[2];
  for (int r = 0; r < 2; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, rank_steps_main, &rs[r]), 0);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(!rs[r].wrong[0], "%s", rs[r].wrong);
    floe_session_free(rs[r].s);
    floe_graph_free(rs[r].g);
  }
}

/* Steps 0-1 agree on 1000 elements, step 2 on 500 (every rank changed: checked again, and
 * runs), step 3 rank 1 alone changes to 2000: both ranks fail, naming the instance, the
 * execution and both counts; nothing crashes. backend_checks: gloo compares each
 * operation's arguments itself too (FLOE_GLOO_CHECK_ARGS=1), as a backend that does not
 * rely on the core's check (any ABI 1.5 backend) does. */
static void count_changes_on_one_rank(bool backend_checks) {
  if (!gloo_loaded()) {
    printf("gloo not built (FLOE_COLLECTIVE_DIR): the core's argument check is not tested\n");
    return;
  }
  if (backend_checks) setenv("FLOE_GLOO_CHECK_ARGS", "1", 1); /* read when the comm forms */
  int64_t group = next_group++;
  RankSteps rs[2];
  for (int r = 0; r < 2; r++) {
    rank_steps_init(&rs[r], r, group, "gloo");
    const int64_t counts[CHECK_STEPS] = {1000, 1000, 500, r ? 2000 : 500};
    memcpy(rs[r].counts, counts, sizeof counts);
  }
  run_ranks(rs);
  unsetenv("FLOE_GLOO_CHECK_ARGS");
  for (int r = 0; r < 2; r++) {
    const char *m = rs[r].msg;
    printf("%s, rank %d after %.0f ms: %s\n", backend_checks ? "gloo checking" : "gloo", r,
           rs[r].fail_ms, m);
    ck_assert_msg(rs[r].failed_step == 3, "rank %d failed at step %d (%s): %s", r,
                  rs[r].failed_step, floe_code_name(rs[r].code), m);
    ck_assert_msg(strstr(m, "instance 1") && strstr(m, "execution 3") &&
                      strstr(m, "500 x f32") && strstr(m, "2000 x f32"),
                  "rank %d's message names the instance, the execution and both counts: %s", r,
                  m);
    ck_assert_msg(rs[r].fail_ms < CHECK_TIMEOUT_MS + 5000, "rank %d failed after %.0f ms: %s",
                  r, rs[r].fail_ms, m);
  }
  /* Rank 1 waited for rank 0's arguments; rank 0's operation for rank 1, which never issued
   * it: its message is completed from rank 1's record. */
  ck_assert_msg(rs[1].code == FLOE_DEADLINE_EXCEEDED && strstr(rs[1].msg, "did not check"),
                "%s: %s", floe_code_name(rs[1].code), rs[1].msg);
  ck_assert_msg(rs[0].code == FLOE_INVALID_ARGUMENT && strstr(rs[0].msg, "rank 1"),
                "%s: %s", floe_code_name(rs[0].code), rs[0].msg);
}

START_TEST(gloo_count_changes_on_one_rank) { count_changes_on_one_rank(false); }
END_TEST

START_TEST(gloo_backend_that_checks_itself) { count_changes_on_one_rank(true); }
END_TEST

/* The first execution already disagrees: both ranks check, both fail at once. */
START_TEST(gloo_first_execution_disagrees) {
  if (!gloo_loaded()) return;
  RankSteps rs[2];
  int64_t group = next_group++;
  for (int r = 0; r < 2; r++) {
    rank_steps_init(&rs[r], r, group, "gloo");
    rs[r].counts[0] = r ? 9 : 7;
  }
  run_ranks(rs);
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(rs[r].failed_step == 0 && rs[r].code == FLOE_INVALID_ARGUMENT,
                  "rank %d: step %d, %s: %s", r, rs[r].failed_step, floe_code_name(rs[r].code),
                  rs[r].msg);
    ck_assert_msg(strstr(rs[r].msg, "execution 0") && strstr(rs[r].msg, "7 x f32") &&
                      strstr(rs[r].msg, "9 x f32"), "%s", rs[r].msg);
    ck_assert_msg(rs[r].fail_ms < CHECK_TIMEOUT_MS, "rank %d took %.0f ms: %s", r,
                  rs[r].fail_ms, rs[r].msg);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("collective");
  TCase *tc = tcase_create("ring");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, all_reduce_each_op_and_size);
  tcase_add_test(tc, all_reduce_counts_and_dtypes);
  tcase_add_test(tc, gather_scatter_broadcast);
  tcase_add_test(tc, steps_and_two_instances);
  tcase_add_test(tc, all_reduce_in_place_of_a_step_value);
  tcase_add_test(tc, members_that_disagree);
  tcase_add_test(tc, bad_attributes);
  tcase_add_test(tc, one_group_key_one_size);
  tcase_add_test(tc, gloo_count_changes_on_one_rank);
  tcase_add_test(tc, gloo_backend_that_checks_itself);
  tcase_add_test(tc, gloo_first_execution_disagrees);
  suite_add_tcase(s, tc);
  tc = tcase_create("device memory");
  tcase_add_checked_fixture(tc, setup_testdev, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, device_memory_backend);
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
