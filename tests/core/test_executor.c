/* SPDX-License-Identifier: Apache-2.0 */
/* test_executor.c - dataflow execution through sessions: chains, diamonds, fan-out, control
 * dependencies, cancellation on the first error, the thread pool (1 to 4 threads, inline
 * and pooled scheduling, nested parallel loops), asynchronous kernels (the ABI test
 * plugin's AbiTestAsyncTwice: completion on pool threads, asynchronous errors, concurrent
 * steps), kernels that break the rules (AbiTestMisbehave: never calling done, calling it
 * twice, outputs of the wrong shape or none) and the per-node overhead. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

/* Thread counts every scheduling test runs with (1: the pool must still make progress). */
static const int THREADS[] = {1, 2, 4};

static FloeRuntime *runtime_new(int threads) {
  FloeRuntime *rt = harness_runtime(threads);
  ck_assert_int_ge(floe_runtime_num_devices(rt), 1);
  return rt;
}

static FloeSession *session_new(FloeGraph *g, FloeRuntime *rt, int inline_inexpensive) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.inline_inexpensive = inline_inexpensive;
  return harness_session_opts(g, &o, NULL);
}

static float f32_at(const FloeTensor *t, int64_t i) {
  ck_assert_int_eq(floe_tensor_dtype(t), FLOE_F32);
  ck_assert_int_lt(i, floe_tensor_num_elements(t));
  return ((const float *)floe_tensor_data(t))[i];
}

/* Runs with one feed and n fetches; aborts the test on error. */
static void run_ok(FloeSession *s, const char *feed, FloeTensor *value, const char *const *fetches,
                   int n, FloeTensor **out) {
  FloeFeed f = {feed, value};
  harness_run(s, feed ? &f : NULL, feed ? 1 : 0, fetches, n, NULL, 0, out, NULL);
}

/* ---- the pool's deferred queue ---- */

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static char order[8];
static int order_n;
static atomic_int gate;

static void blocker(void *arg) {
  (void)arg;
  while (!atomic_load(&gate)) sched_yield();
}

static void record(void *arg) {
  pthread_mutex_lock(&order_mu);
  order[order_n++] = *(const char *)arg;
  pthread_mutex_unlock(&order_mu);
}

/* With the only worker busy, tasks on the deferred queue wait for every normal task, even
 * ones queued after them; all run. */
START_TEST(deferred_tasks_run_after_normal_ones) {
  FloeStatus *st = floe_status_new();
  FloeThreadPool *p = floe__pool_new(1, st);
  ck_assert_ptr_nonnull(p);
  atomic_store(&gate, 0);
  order_n = 0;
  static const char d1 = 'd', d2 = 'D', n1 = 'n', n2 = 'N';
  void *deferred[2] = {(void *)&d1, (void *)&d2};
  ck_assert_int_eq(floe__pool_schedule(p, blocker, NULL), FLOE_OK);
  ck_assert_int_eq(floe__pool_schedule_deferred(p, record, deferred, 2), FLOE_OK);
  ck_assert_int_eq(floe__pool_schedule(p, record, (void *)&n1), FLOE_OK);
  ck_assert_int_eq(floe__pool_schedule(p, record, (void *)&n2), FLOE_OK);
  atomic_store(&gate, 1);
  floe__pool_free(p); /* runs what is queued, then joins */
  ck_assert_int_eq(order_n, 4);
  ck_assert_msg(memcmp(order, "nNdD", 4) == 0, "order %.4s", order);
  floe_status_free(st);
}
END_TEST

/* parallel_for: every unit runs once; the caller claims shards from the front and helpers
 * from the back, so the caller's units are a prefix and every helper's lie after it (each
 * thread then keeps the same part of a tensor from one kernel to the next). Each unit
 * yields a little so the threads interleave. */
typedef struct UnitOwners {
  pthread_t who[64];
  atomic_int runs[64];
} UnitOwners;

static void own_units(void *arg, int64_t begin, int64_t end) {
  UnitOwners *u = arg;
  for (int64_t i = begin; i < end; i++) {
    u->who[i] = pthread_self();
    atomic_fetch_add(&u->runs[i], 1);
    sched_yield();
  }
}

START_TEST(parallel_for_caller_takes_the_front) {
  FloeStatus *st = floe_status_new();
  for (int workers = 1; workers <= 3; workers++) {
    FloeThreadPool *p = floe__pool_new(workers, st);
    ck_assert_ptr_nonnull(p);
    for (int rep = 0; rep < 50; rep++) {
      UnitOwners u;
      memset(&u, 0, sizeof u);
      for (int i = 0; i < 64; i++) atomic_init(&u.runs[i], 0);
      floe__pool_parallel_for(p, 64, 0, own_units, &u); /* cost 0: the most shards */
      pthread_t me = pthread_self();
      int64_t prefix = 0;
      while (prefix < 64 && pthread_equal(u.who[prefix], me)) prefix++;
      for (int i = 0; i < 64; i++) {
        ck_assert_msg(atomic_load(&u.runs[i]) == 1, "%d workers: unit %d ran %d times",
                      workers, i, atomic_load(&u.runs[i]));
        ck_assert_msg(i < prefix || !pthread_equal(u.who[i], me),
                      "%d workers: the caller ran unit %d after a helper's unit %lld", workers,
                      i, (long long)prefix);
      }
    }
    floe__pool_free(p);
  }
  floe_status_free(st);
}
END_TEST

/* Each worker's CPU mask, read on the worker: the tasks wait for one another, so each runs
 * on a worker of its own. */
typedef struct MaskTask {
  pthread_barrier_t *all;
  cpu_set_t mask;
  int rc;
} MaskTask;

static void read_mask(void *arg) {
  MaskTask *t = arg;
  pthread_barrier_wait(t->all);
  t->rc = sched_getaffinity(0, sizeof t->mask, &t->mask);
}

static void worker_masks(int workers, MaskTask *tasks) {
  FloeStatus *st = floe_status_new();
  FloeThreadPool *p = floe__pool_new(workers, st);
  ck_assert_ptr_nonnull(p);
  pthread_barrier_t all;
  pthread_barrier_init(&all, NULL, (unsigned)workers);
  for (int i = 0; i < workers; i++) {
    tasks[i].all = &all;
    ck_assert_int_eq(floe__pool_schedule(p, read_mask, &tasks[i]), FLOE_OK);
  }
  floe__pool_free(p); /* runs them, joins */
  pthread_barrier_destroy(&all);
  floe_status_free(st);
  for (int i = 0; i < workers; i++) ck_assert_int_eq(tasks[i].rc, 0);
}

/* A pool with no more workers than the process's CPUs pins each worker to a CPU of its own
 * (when there are at least two); FLOE_POOL_PIN=0, or more workers than CPUs, leaves every
 * worker free to run anywhere the process may. */
START_TEST(pool_workers_pinned_apart) {
  cpu_set_t allowed;
  ck_assert_int_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int n = CPU_COUNT(&allowed);
  enum { MAX_WORKERS = 64 };
  MaskTask tasks[MAX_WORKERS + 1];
  int workers = n < 4 ? n : 4;
  if (n >= 2) {
    memset(tasks, 0, sizeof tasks);
    worker_masks(workers, tasks);
    for (int i = 0; i < workers; i++) {
      ck_assert_msg(CPU_COUNT(&tasks[i].mask) == 1, "worker %d may run on %d CPUs", i,
                    CPU_COUNT(&tasks[i].mask));
      cpu_set_t in;
      CPU_AND(&in, &tasks[i].mask, &allowed);
      ck_assert_msg(CPU_COUNT(&in) == 1, "worker %d pinned outside the process's CPUs", i);
      for (int j = 0; j < i; j++)
        ck_assert_msg(!CPU_EQUAL(&tasks[i].mask, &tasks[j].mask),
                      "workers %d and %d pinned to one CPU", j, i);
    }
  }
  setenv("FLOE_POOL_PIN", "0", 1);
  memset(tasks, 0, sizeof tasks);
  worker_masks(workers > 1 ? workers : 2, tasks);
  unsetenv("FLOE_POOL_PIN");
  for (int i = 0; i < (workers > 1 ? workers : 2); i++)
    ck_assert_msg(CPU_EQUAL(&tasks[i].mask, &allowed), "FLOE_POOL_PIN=0: worker %d pinned", i);
  if (n + 1 <= MAX_WORKERS) {
    memset(tasks, 0, sizeof tasks);
    worker_masks(n + 1, tasks);
    for (int i = 0; i < n + 1; i++)
      ck_assert_msg(CPU_EQUAL(&tasks[i].mask, &allowed),
                    "%d workers on %d CPUs: worker %d pinned", n + 1, n, i);
  }
}
END_TEST

/* ---- shapes of graphs ---- */

/* x + 1 + 1 + ... (n Adds), for every pool size, inline and pooled. */
START_TEST(chain_of_adds) {
  const int n = 500;
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  FloeOutput y = x;
  char name[32];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "a%d", i);
    y = floe_binary(g, "Add", name, y, one);
  }
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    for (int inl = 0; inl <= 1; inl++) {
      FloeSession *s = session_new(g, rt, inl);
      for (int rep = 0; rep < 3; rep++) {
        FloeTensor *xv = floe_tensor_scalar_f32(2.5f + (float)rep, NULL);
        const char *fetch = name;
        FloeTensor *out = NULL;
        run_ok(s, "x", xv, &fetch, 1, &out);
        ck_assert_float_eq(f32_at(out, 0), 2.5f + (float)rep + (float)n);
        floe_tensor_release(out);
        floe_tensor_release(xv);
      }
      ck_assert_int_eq(floe_session_num_cached(s), 1);
      floe_session_free(s);
    }
    floe_runtime_free(rt);
  }
  floe_graph_free(g);
}
END_TEST

/* Diamonds on tensors big enough to be scheduled on the pool rather than inline:
 * a = x*2, b = x+3, c = a-b, d = c*a, fetched together with a. */
START_TEST(diamond_on_big_tensors) {
  const int64_t dims[2] = {96, 96};
  const int64_t N = dims[0] * dims[1];
  float *xs = malloc((size_t)N * sizeof *xs);
  for (int64_t i = 0; i < N; i++) xs[i] = (float)(i % 17) - 8.0f;
  FloeTensor *xv = harness_f32(2, dims, xs);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, dims));
  FloeOutput a = floe_binary(g, "Mul", "a", x, floe_const_f32(g, "two", 2.0f));
  FloeOutput b = floe_binary(g, "Add", "b", x, floe_const_f32(g, "three", 3.0f));
  FloeOutput c = floe_binary(g, "Sub", "c", a, b);
  floe_binary(g, "Mul", "d", c, a);
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    for (int inl = 0; inl <= 1; inl++) {
      FloeSession *s = session_new(g, rt, inl);
      const char *fetches[] = {"d", "a"};
      FloeTensor *out[2] = {NULL, NULL};
      run_ok(s, "x", xv, fetches, 2, out);
      for (int64_t i = 0; i < N; i++) {
        float av = xs[i] * 2.0f, cv = av - (xs[i] + 3.0f);
        ck_assert_float_eq(f32_at(out[0], i), cv * av);
        ck_assert_float_eq(f32_at(out[1], i), av);
      }
      floe_tensor_release(out[0]);
      floe_tensor_release(out[1]);
      floe_session_free(s);
    }
    floe_runtime_free(rt);
  }
  floe_graph_free(g);
  floe_tensor_release(xv);
  free(xs);
}
END_TEST

/* One feed consumed by many nodes: 1000 scalar Muls (inline) and 40 big ones (pool). */
START_TEST(wide_fan_out) {
  enum { SMALL = 1000, BIG = 40 };
  const int64_t dims[1] = {4096};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput v = floe_placeholder(g, "v", FLOE_F32, floe_shape_make(1, dims));
  static char names[SMALL + BIG][16];
  static const char *fetches[SMALL + BIG];
  for (int i = 0; i < SMALL + BIG; i++) {
    char cn[16];
    snprintf(cn, sizeof cn, "c%d", i);
    snprintf(names[i], sizeof names[i], "m%d", i);
    fetches[i] = names[i];
    floe_binary(g, "Mul", names[i], i < SMALL ? x : v, floe_const_f32(g, cn, (float)i));
  }
  float vs[4096];
  for (int i = 0; i < 4096; i++) vs[i] = (float)(i % 5);
  FloeTensor *xv = floe_tensor_scalar_f32(3.0f, NULL);
  FloeTensor *vv = harness_f32(1, dims, vs);
  static FloeTensor *out[SMALL + BIG];
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    FloeSession *s = session_new(g, rt, 1);
    FloeStatus *st = floe_status_new();
    FloeFeed feeds[2] = {{"x", xv}, {"v", vv}};
    ck_assert_int_eq(floe_session_run(s, feeds, 2, fetches, SMALL + BIG, NULL, 0, out, st),
                     FLOE_OK);
    for (int i = 0; i < SMALL; i++) ck_assert_float_eq(f32_at(out[i], 0), 3.0f * (float)i);
    for (int i = SMALL; i < SMALL + BIG; i++)
      for (int k = 0; k < 4096; k += 97) ck_assert_float_eq(f32_at(out[i], k), vs[k] * (float)i);
    for (int i = 0; i < SMALL + BIG; i++) floe_tensor_release(out[i]);
    floe_status_free(st);
    floe_session_free(s);
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
  floe_tensor_release(vv);
  floe_graph_free(g);
}
END_TEST

/* Adds a node `op` with one data input and control inputs on the named nodes. */
static FloeOutput with_controls(FloeGraph *g, const char *op, const char *name, FloeOutput in,
                                const char *const *deps, int ndeps) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  if (in.node) floe_node_add_input(b, in);
  for (int i = 0; i < ndeps; i++) floe_node_add_control_input(b, floe_graph_find(g, deps[i]));
  return floe_out(floe_node_finish(b), 0);
}

/* A Gather whose index is fed: in range it works, out of range it fails. */
static FloeOutput gather(FloeGraph *g, const char *name, const char *idx_name) {
  const int64_t d3[1] = {3};
  const float pv[3] = {10, 20, 30};
  FloeTensor *params = harness_f32(1, d3, pv);
  char pn[48];
  snprintf(pn, sizeof pn, "%s_params", name);
  FloeOutput p = floe_const(g, pn, params);
  floe_tensor_release(params);
  FloeOutput idx = floe_graph_find(g, idx_name)
                       ? floe_out(floe_graph_find(g, idx_name), 0)
                       : floe_placeholder(g, idx_name, FLOE_I32, floe_shape_scalar());
  return floe_binary(g, "Gather", name, p, idx);
}

START_TEST(control_dependencies) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  gather(g, "bad", "idx");
  floe_placeholder(g, "p", FLOE_F32, floe_shape_scalar());
  const char *bad[] = {"bad"}, *p[] = {"p"};
  with_controls(g, "Identity", "after_bad", x, bad, 1);
  with_controls(g, "Identity", "after_p", x, p, 1);
  floe_unary(g, "Neg", "n1", x);
  floe_unary(g, "Neg", "n2", x);
  const char *group_deps[] = {"n1", "n2", "bad"};
  with_controls(g, "NoOp", "group", floe_out(NULL, 0), group_deps, 3);
  FloeRuntime *rt = runtime_new(2);
  FloeSession *s = session_new(g, rt, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *xv = floe_tensor_scalar_f32(4.0f, NULL);
  FloeTensor *pv = floe_tensor_scalar_f32(0.0f, NULL);
  FloeTensor *i_bad = floe_tensor_scalar_i32(7, NULL), *i_ok = floe_tensor_scalar_i32(1, NULL);
  FloeTensor *out = NULL;
  const char *f_after_bad = "after_bad", *f_after_p = "after_p";

  /* The control input runs: its failure fails the step although no data flows from it. */
  FloeFeed feeds[3] = {{"x", xv}, {"idx", i_bad}, {"p", pv}};
  ck_assert_int_eq(floe_session_run(s, feeds, 2, &f_after_bad, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "node 'bad' (Gather)"));
  ck_assert_ptr_null(out);
  feeds[1].value = i_ok;
  ck_assert_int_eq(floe_session_run(s, feeds, 2, &f_after_bad, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_float_eq(f32_at(out, 0), 4.0f);
  floe_tensor_release(out);
  out = NULL;

  /* A control input on an unfed placeholder needs it; feeding it satisfies the edge. */
  ck_assert_int_eq(floe_session_run(s, feeds, 1, &f_after_p, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "placeholder 'p' must be fed"));
  feeds[1] = feeds[2];
  ck_assert_int_eq(floe_session_run(s, feeds, 2, &f_after_p, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_float_eq(f32_at(out, 0), 4.0f);
  floe_tensor_release(out);

  /* Targets run for their effects only: a NoOp grouping a failing node fails. */
  const char *target = "group";
  feeds[1] = (FloeFeed){"idx", i_bad};
  ck_assert_int_eq(floe_session_run(s, feeds, 2, NULL, 0, &target, 1, NULL, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "node 'bad' (Gather)"));
  feeds[1].value = i_ok;
  ck_assert_int_eq(floe_session_run(s, feeds, 2, NULL, 0, &target, 1, NULL, st), FLOE_OK);

  floe_tensor_release(xv);
  floe_tensor_release(pv);
  floe_tensor_release(i_bad);
  floe_tensor_release(i_ok);
  floe_status_free(st);
  floe_session_free(s);
  floe_runtime_free(rt);
  floe_graph_free(g);
}
END_TEST

/* ---- errors ---- */

/* A failing Gather next to a long chain and many big nodes: the step fails with the node's
 * name, every reference is released (checked by valgrind / ASan), and the session runs
 * fine afterwards. */
START_TEST(first_error_cancels_the_step) {
  const int64_t dims[1] = {8192};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput v = floe_placeholder(g, "v", FLOE_F32, floe_shape_make(1, dims));
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  FloeOutput y = x, w = v;
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "chain%d", i);
    y = floe_binary(g, "Add", name, y, one);
    snprintf(name, sizeof name, "big%d", i);
    w = floe_binary(g, "Add", name, w, one);
  }
  FloeOutput bad = gather(g, "bad", "idx");
  FloeTensor *axis = floe_tensor_scalar_i32(0, NULL);
  FloeOutput wsum = floe_binary(g, "Sum", "wsum", w, floe_const(g, "axis0", axis));
  floe_tensor_release(axis);
  floe_binary(g, "Add", "sum", floe_binary(g, "Add", "y_plus_bad", y, bad), wsum);
  FloeTensor *xv = floe_tensor_scalar_f32(1.0f, NULL);
  FloeTensor *vv = floe_tensor_new(FLOE_F32, 1, dims, NULL);
  FloeTensor *i_bad = floe_tensor_scalar_i32(-4, NULL), *i_ok = floe_tensor_scalar_i32(2, NULL);
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    FloeSession *s = session_new(g, rt, 1);
    FloeStatus *st = floe_status_new();
    FloeFeed feeds[3] = {{"x", xv}, {"v", vv}, {"idx", i_bad}};
    const char *fetches[] = {"sum", "chain299"};
    FloeTensor *out[2] = {NULL, NULL};
    for (int rep = 0; rep < 3; rep++) {
      ck_assert_int_eq(floe_session_run(s, feeds, 3, fetches, 2, NULL, 0, out, st),
                       FLOE_INVALID_ARGUMENT);
      ck_assert_msg(strncmp(floe_status_message(st), "node 'bad' (Gather): ", 21) == 0, "got: %s",
                    floe_status_message(st));
      ck_assert_ptr_null(out[0]);
      ck_assert_ptr_null(out[1]);
    }
    feeds[2].value = i_ok;
    ck_assert_int_eq(floe_session_run(s, feeds, 3, fetches, 2, NULL, 0, out, st), FLOE_OK);
    /* chain: 1 + 300; bad: 30; wsum: 8192 * 300 */
    ck_assert_float_eq(f32_at(out[0], 0), 301.0f + 30.0f + 8192.0f * 300.0f);
    ck_assert_float_eq(f32_at(out[1], 0), 301.0f);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
    floe_status_free(st);
    floe_session_free(s);
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
  floe_tensor_release(vv);
  floe_tensor_release(i_bad);
  floe_tensor_release(i_ok);
  floe_graph_free(g);
}
END_TEST

/* Many failures at once: exactly one is reported, whole, naming its node. */
START_TEST(many_errors_one_report) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_I32, floe_shape_scalar());
  FloeOutput z = floe_placeholder(g, "z", FLOE_I32, floe_shape_scalar());
  static char names[64][16];
  static const char *fetches[64];
  for (int i = 0; i < 64; i++) {
    snprintf(names[i], sizeof names[i], "div%d", i);
    fetches[i] = names[i];
    floe_binary(g, "Div", names[i], a, z);
  }
  FloeRuntime *rt = runtime_new(4);
  FloeSession *s = session_new(g, rt, 0);
  FloeStatus *st = floe_status_new();
  FloeTensor *av = floe_tensor_scalar_i32(7, NULL), *zero = floe_tensor_scalar_i32(0, NULL);
  FloeTensor *two = floe_tensor_scalar_i32(2, NULL);
  FloeFeed feeds[2] = {{"a", av}, {"z", zero}};
  FloeTensor *out[64];
  for (int rep = 0; rep < 20; rep++) {
    floe_code rc = floe_session_run(s, feeds, 2, fetches, 64, NULL, 0, out, st);
    ck_assert_int_ne(rc, FLOE_OK);
    const char *msg = floe_status_message(st);
    ck_assert_msg(strncmp(msg, "node 'div", 9) == 0 && strstr(msg, "(Div): ") &&
                      !strstr(msg + 1, "node '"),
                  "got: %s", msg);
  }
  feeds[1].value = two;
  ck_assert_int_eq(floe_session_run(s, feeds, 2, fetches, 64, NULL, 0, out, st), FLOE_OK);
  for (int i = 0; i < 64; i++) {
    ck_assert_int_eq(*(const int32_t *)floe_tensor_data(out[i]), 3);
    floe_tensor_release(out[i]);
  }
  floe_tensor_release(av);
  floe_tensor_release(zero);
  floe_tensor_release(two);
  floe_status_free(st);
  floe_session_free(s);
  floe_runtime_free(rt);
  floe_graph_free(g);
}
END_TEST

/* ---- the pool under kernels ---- */

/* Eight independent MatMuls (inter-op parallel) whose kernels may use parallel_for from the
 * pool's own workers (nested), checked against a plain reference, on 1 to 4 threads. */
START_TEST(parallel_matmuls_nested_pool) {
  enum { M = 64, K = 48, N = 56, COUNT = 8 };
  const int64_t da[2] = {M, K}, db[2] = {K, N};
  FloeTensor *av = harness_random(FLOE_F32, 2, da, 1, -1, 1);
  FloeTensor *bv = harness_random(FLOE_F32, 2, db, 2, -1, 1);
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_make(2, da));
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_make(2, db));
  static char names[COUNT][16];
  const char *fetches[COUNT];
  for (int i = 0; i < COUNT; i++) {
    char sn[16];
    snprintf(sn, sizeof sn, "s%d", i);
    snprintf(names[i], sizeof names[i], "mm%d", i);
    fetches[i] = names[i];
    FloeOutput ai = floe_binary(g, "Mul", sn, a, floe_const_f32(g, NULL, (float)(i + 1)));
    floe_matmul(g, names[i], ai, b, 0, 0);
  }
  static float want[M * N];
  const float *A = floe_tensor_data(av), *B = floe_tensor_data(bv);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)A[i * K + k] * B[k * N + j];
      want[i * N + j] = (float)acc;
    }
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    FloeSession *s = session_new(g, rt, 0);
    FloeStatus *st = floe_status_new();
    FloeFeed feeds[2] = {{"a", av}, {"b", bv}};
    FloeTensor *out[COUNT];
    ck_assert_int_eq(floe_session_run(s, feeds, 2, fetches, COUNT, NULL, 0, out, st), FLOE_OK);
    for (int c = 0; c < COUNT; c++) {
      for (int i = 0; i < M * N; i++)
        ck_assert_float_eq_tol(f32_at(out[c], i), want[i] * (float)(c + 1),
                               1e-4f * (float)(c + 1) * (1.0f + fabsf(want[i])));
      floe_tensor_release(out[c]);
    }
    floe_status_free(st);
    floe_session_free(s);
    floe_runtime_free(rt);
  }
  floe_tensor_release(av);
  floe_tensor_release(bv);
  floe_graph_free(g);
}
END_TEST

/* Four branches of Softmax on [256, 512] (kernels that split rows with parallel_for) run at
 * once on the workers: nested loops whose callers are all busy workers must still finish. */
START_TEST(nested_parallel_loops) {
  enum { R = 256, C = 512, BRANCHES = 4 };
  const int64_t dims[2] = {R, C};
  FloeTensor *vv = harness_random(FLOE_F32, 2, dims, 7, -3, 3);
  const float *v = floe_tensor_data(vv);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "v", FLOE_F32, floe_shape_make(2, dims));
  static char names[BRANCHES][16];
  const char *fetches[BRANCHES];
  for (int i = 0; i < BRANCHES; i++) {
    snprintf(names[i], sizeof names[i], "sm%d", i);
    fetches[i] = names[i];
    floe_unary(g, "Softmax", names[i],
               floe_binary(g, "Mul", NULL, x, floe_const_f32(g, NULL, (float)(i + 1) * 0.5f)));
  }
  static float want[BRANCHES][R * C];
  for (int i = 0; i < BRANCHES; i++)
    for (int r = 0; r < R; r++) {
      double mx = -1e30, sum = 0;
      float k = (float)(i + 1) * 0.5f;
      for (int c = 0; c < C; c++) mx = fmax(mx, (double)(v[r * C + c] * k));
      for (int c = 0; c < C; c++) sum += exp((double)(v[r * C + c] * k) - mx);
      for (int c = 0; c < C; c++)
        want[i][r * C + c] = (float)(exp((double)(v[r * C + c] * k) - mx) / sum);
    }
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_new(THREADS[t]);
    FloeSession *s = session_new(g, rt, 0);
    FloeStatus *st = floe_status_new();
    FloeFeed f = {"v", vv};
    FloeTensor *out[BRANCHES];
    for (int rep = 0; rep < 3; rep++) {
      ck_assert_int_eq(floe_session_run(s, &f, 1, fetches, BRANCHES, NULL, 0, out, st), FLOE_OK);
      for (int i = 0; i < BRANCHES; i++) {
        for (int e = 0; e < R * C; e += 37)
          ck_assert_float_eq_tol(f32_at(out[i], e), want[i][e], 1e-5f + 1e-4f * want[i][e]);
        floe_tensor_release(out[i]);
      }
    }
    floe_status_free(st);
    floe_session_free(s);
    floe_runtime_free(rt);
  }
  floe_tensor_release(vv);
  floe_graph_free(g);
}
END_TEST

/* ---- asynchronous kernels ---- */

/* A runtime with the CPU plugin and the ABI test plugin, whose AbiTestAsyncTwice (y = 2x)
 * has only an asynchronous CPU kernel that completes on a pool thread. */
static FloeRuntime *runtime_with_async(int threads) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *abi = getenv("FLOE_TEST_PLUGIN_DIR");
  ck_assert_msg(cpu && *cpu && abi && *abi,
                "FLOE_PLUGIN_PATH and FLOE_TEST_PLUGIN_DIR must be set (run through make check)");
  char path[8192];
  snprintf(path, sizeof path, "%s:%s", cpu, abi);
  FloeRuntimeOptions o = {sizeof o, path, "cpu,abitest", threads, 1};
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt = floe_runtime_new(&o, st);
  if (!rt) ck_abort_msg("runtime: %s", floe_status_message(st));
  floe_status_free(st);
  ck_assert_int_eq(floe_runtime_num_kernels_for(rt, "AbiTestAsyncTwice", "CPU"), 1);
  return rt;
}

typedef struct AsyncOpts {
  int fail, done_inline;
  int64_t delay_us;
} AsyncOpts;

static FloeOutput async_twice(FloeGraph *g, const char *name, FloeOutput x, AsyncOpts o) {
  FloeNodeBuilder *b = floe_node_begin(g, "AbiTestAsyncTwice", name);
  floe_node_add_input(b, x);
  if (o.fail) floe_node_set_attr_bool(b, "fail", 1);
  if (o.done_inline) floe_node_set_attr_bool(b, "done_inline", 1);
  if (o.delay_us) floe_node_set_attr_int(b, "delay_us", o.delay_us);
  return floe_out(floe_node_finish(b), 0);
}

/* y <- 2y + 1 eight times (async twice, then a sync Add), a fan of 16 async nodes with
 * staggered delays summed by sync Adds, and an async node fetched directly; for every pool
 * size, inline and pooled scheduling, done called on a pool thread or before compute_async
 * returns. */
START_TEST(async_nodes_mixed_with_sync) {
  enum { STAGES = 8, FAN = 16 };
  const int64_t dims[1] = {3};
  const float xs[3] = {1.0f, -2.0f, 0.5f};
  FloeTensor *xv = harness_f32(1, dims, xs);
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_with_async(THREADS[t]);
    for (int done_inline = 0; done_inline <= 1; done_inline++) {
      FloeGraph *g = floe_graph_new();
      FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
      FloeOutput one = floe_const_f32(g, "one", 1.0f);
      FloeOutput y = x;
      char name[32];
      for (int i = 0; i < STAGES; i++) {
        snprintf(name, sizeof name, "twice%d", i);
        FloeOutput a = async_twice(g, name, y, (AsyncOpts){0, done_inline, i % 3 ? 0 : 100});
        snprintf(name, sizeof name, "plus%d", i);
        y = floe_binary(g, "Add", name, a, one);
      }
      FloeOutput sum = async_twice(g, "fan0", x, (AsyncOpts){0, done_inline, 0});
      for (int i = 1; i < FAN; i++) {
        snprintf(name, sizeof name, "fan%d", i);
        FloeOutput f = async_twice(g, name, x, (AsyncOpts){0, done_inline, (FAN - i) * 20});
        snprintf(name, sizeof name, "sum%d", i);
        sum = floe_binary(g, "Add", name, sum, f);
      }
      for (int inl = 0; inl <= 1; inl++) {
        FloeSession *s = session_new(g, rt, inl);
        const char *fetches[] = {"plus7", name, "twice0"};
        for (int rep = 0; rep < 3; rep++) {
          FloeTensor *out[3] = {NULL, NULL, NULL};
          run_ok(s, "x", xv, fetches, 3, out);
          for (int k = 0; k < 3; k++) {
            float want = xs[k];
            for (int i = 0; i < STAGES; i++) want = 2.0f * want + 1.0f;
            ck_assert_float_eq(f32_at(out[0], k), want);
            ck_assert_float_eq(f32_at(out[1], k), 2.0f * xs[k] * FAN);
            ck_assert_float_eq(f32_at(out[2], k), 2.0f * xs[k]);
          }
          for (int k = 0; k < 3; k++) floe_tensor_release(out[k]);
        }
        floe_session_free(s);
      }
      floe_graph_free(g);
    }
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
}
END_TEST

/* The graph of the error tests: "async_bad" fails asynchronously (on a pool thread, or
 * before compute_async returns) beside a 200-Add chain and a slow async node; "after_bad"
 * would fail too if it ran, so its error winning would show that it was not skipped. */
static FloeGraph *failing_graph(int done_inline) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  FloeOutput slow = async_twice(g, "slow", x, (AsyncOpts){0, 0, 2000});
  FloeOutput bad = async_twice(g, "async_bad", x, (AsyncOpts){1, done_inline, 50});
  FloeOutput after = async_twice(g, "after_bad", bad, (AsyncOpts){1, 0, 0});
  FloeOutput chain = x;
  char name[32];
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "c%d", i);
    chain = floe_binary(g, "Add", name, chain, one);
  }
  floe_binary(g, "Add", "total", floe_binary(g, "Add", NULL, after, chain), slow);
  return g;
}

/* True when msg is exactly async_bad's error (and no other node's). */
static bool is_async_bad_error(const char *msg) {
  return strncmp(msg, "node 'async_bad' (AbiTestAsyncTwice): ", 38) == 0 &&
         strstr(msg, "fail = true") && !strstr(msg + 1, "node '");
}

/* The failing step reports async_bad's error by name, sets no output, and the session then
 * runs the parts that do not need it. */
START_TEST(async_error_cancels_the_step) {
  FloeTensor *xv = floe_tensor_scalar_f32(3.0f, NULL);
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_with_async(THREADS[t]);
    for (int done_inline = 0; done_inline <= 1; done_inline++) {
      FloeGraph *g = failing_graph(done_inline);
      for (int inl = 0; inl <= 1; inl++) {
        FloeSession *s = session_new(g, rt, inl);
        FloeStatus *st = floe_status_new();
        FloeFeed f = {"x", xv};
        const char *fetches[] = {"total", "c199"};
        for (int rep = 0; rep < 3; rep++) {
          FloeTensor *out[2] = {NULL, NULL};
          ck_assert_int_eq(floe_session_run(s, &f, 1, fetches, 2, NULL, 0, out, st),
                           FLOE_ABORTED);
          ck_assert_msg(is_async_bad_error(floe_status_message(st)), "got: %s",
                        floe_status_message(st));
          ck_assert_ptr_null(out[0]);
          ck_assert_ptr_null(out[1]);
        }
        const char *good[] = {"slow", "c199"};
        FloeTensor *out[2] = {NULL, NULL};
        ck_assert_int_eq(floe_session_run(s, &f, 1, good, 2, NULL, 0, out, st), FLOE_OK);
        ck_assert_float_eq(f32_at(out[0], 0), 6.0f);
        ck_assert_float_eq(f32_at(out[1], 0), 203.0f);
        floe_tensor_release(out[0]);
        floe_tensor_release(out[1]);
        floe_status_free(st);
        floe_session_free(s);
      }
      floe_graph_free(g);
    }
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
}
END_TEST

/* Threads sharing one session and executor: odd ones run the failing step, even ones the
 * chain and slow node with their own feed; each must see exactly its own result. */
enum { STEP_THREADS = 6, STEPS_EACH = 30 };

typedef struct StepThread {
  FloeSession *s;
  int id;
  int bad;          /* results that were wrong */
  char first[300];  /* the first wrong one */
} StepThread;

static void *step_thread(void *arg) {
  StepThread *a = arg;
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < STEPS_EACH && !a->bad; i++) {
    float xv = (float)(a->id * 1000 + i);
    FloeTensor *x = floe_tensor_scalar_f32(xv, NULL);
    FloeFeed f = {"x", x};
    FloeTensor *out[2] = {NULL, NULL};
    if (a->id % 2) {
      const char *fetches[] = {"total", "c199"};
      floe_code rc = floe_session_run(a->s, &f, 1, fetches, 2, NULL, 0, out, st);
      if (rc != FLOE_ABORTED || !is_async_bad_error(floe_status_message(st)) || out[0]) {
        a->bad++;
        snprintf(a->first, sizeof a->first, "failing step %d: code %d, %s", i, (int)rc,
                 floe_status_message(st));
      }
    } else {
      const char *fetches[] = {"slow", "c199"};
      floe_code rc = floe_session_run(a->s, &f, 1, fetches, 2, NULL, 0, out, st);
      if (rc != FLOE_OK) {
        a->bad++;
        snprintf(a->first, sizeof a->first, "step %d: %s", i, floe_status_message(st));
      } else if (*(float *)floe_tensor_data(out[0]) != 2.0f * xv ||
                 *(float *)floe_tensor_data(out[1]) != xv + 200.0f) {
        a->bad++;
        snprintf(a->first, sizeof a->first, "step %d with x = %g: got %g and %g", i, xv,
                 *(float *)floe_tensor_data(out[0]), *(float *)floe_tensor_data(out[1]));
      }
      floe_tensor_release(out[0]);
      floe_tensor_release(out[1]);
    }
    floe_tensor_release(x);
  }
  floe_status_free(st);
  return NULL;
}

START_TEST(concurrent_steps_with_async_nodes) {
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_with_async(THREADS[t]);
    FloeGraph *g = failing_graph(0);
    FloeSession *s = session_new(g, rt, 1);
    StepThread args[STEP_THREADS];
    pthread_t th[STEP_THREADS];
    for (int i = 0; i < STEP_THREADS; i++) {
      args[i] = (StepThread){.s = s, .id = i};
      ck_assert_int_eq(pthread_create(&th[i], NULL, step_thread, &args[i]), 0);
    }
    for (int i = 0; i < STEP_THREADS; i++) {
      pthread_join(th[i], NULL);
      ck_assert_msg(args[i].bad == 0, "%d threads, thread %d: %s", THREADS[t], i,
                    args[i].first);
    }
    floe_session_free(s);
    floe_graph_free(g);
    floe_runtime_free(rt);
  }
}
END_TEST

/* ---- kernels that break the rules: the ABI test plugin's AbiTestMisbehave ---- */

/* A function the ABI test plugin exports for the tests (abitest_release_parked,
 * abitest_call_done_again), found in the copy rt loaded. */
static int (*abitest_fn(const FloeRuntime *rt, const char *sym))(void) {
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *r = floe_runtime_plugin(rt, i);
    if (strcmp(r->name, "abitest") != 0) continue;
    void *h = dlopen(r->path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "%s is not loaded", r->path);
    void *f = dlsym(h, sym);
    dlclose(h); /* the runtime keeps it loaded */
    ck_assert_msg(f != NULL, "%s has no %s", r->path, sym);
    int (*fn)(void);
    memcpy(&fn, &f, sizeof fn);
    return fn;
  }
  ck_abort_msg("the ABI test plugin is not loaded");
  return NULL;
}

static FloeOutput misbehave(FloeGraph *g, const char *name, FloeOutput x, const char *mode) {
  FloeNodeBuilder *b = floe_node_begin(g, "AbiTestMisbehave", name);
  floe_node_add_input(b, x);
  floe_node_set_attr_string(b, "mode", mode);
  return floe_out(floe_node_finish(b), 0);
}

/* x: f32 [?,3]; "bad" = AbiTestMisbehave(x) in `mode`; "out" = bad + x (which would
 * broadcast a wrong [1] silently); "side" = x + 1, which does not need "bad". */
static FloeGraph *misbehave_graph(const char *mode) {
  FloeGraph *g = floe_graph_new();
  const int64_t dims[2] = {-1, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, dims));
  FloeOutput bad = misbehave(g, "bad", x, mode);
  floe_binary(g, "Add", "out", bad, x);
  floe_binary(g, "Add", "side", x, floe_const_f32(g, "one", 1.0f));
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static FloeTensor *x23(void) {
  const int64_t dims[2] = {2, 3};
  const float xs[6] = {1, 2, 3, 4, 5, 6};
  return harness_f32(2, dims, xs);
}

static void assert_contains(const char *s, const char *part) {
  ck_assert_msg(strstr(s, part) != NULL, "\"%s\" does not contain \"%s\"", s, part);
}

/* Runs fetch `out` with x fed and the options; returns the code, message in st. */
static floe_code run_out(FloeSession *s, FloeTensor *xv, const char *fetch, int64_t timeout_ms,
                         FloeTensor **out, FloeStatus *st) {
  FloeFeed f = {"x", xv};
  FloeRunOptions o;
  floe_run_options_init(&o);
  o.timeout_ms = timeout_ms;
  *out = NULL;
  return floe_session_run_opts(s, &o, &f, 1, &fetch, 1, NULL, 0, out, st);
}

/* A kernel that never calls done: the run's deadline ends the run with
 * FLOE_DEADLINE_EXCEEDED naming the node still running, the session stays usable, and when
 * the kernel calls done much later (here: after the run returned, and after the session was
 * freed) nothing freed is touched (valgrind / ASan would see it). The tcase timeout is only
 * a hang guard: before the fix the first run never returned. */
START_TEST(deadline_ends_a_run_whose_kernel_never_calls_done) {
  FloeTensor *xv = x23();
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_with_async(THREADS[t]);
    int (*release)(void) = abitest_fn(rt, "abitest_release_parked");
    FloeGraph *g = misbehave_graph("never_done");
    for (int free_first = 0; free_first <= 1; free_first++) {
      FloeSession *s = session_new(g, rt, 1);
      FloeStatus *st = floe_status_new();
      FloeTensor *out;
      floe_code rc = run_out(s, xv, "out", 100, &out, st);
      ck_assert_msg(rc == FLOE_DEADLINE_EXCEEDED, "%s: %s", floe_code_name(rc),
                    floe_status_message(st));
      ck_assert_ptr_null(out);
      const char *msg = floe_status_message(st);
      assert_contains(msg, "timeout of 100 ms");
      assert_contains(msg, "still running: node 'bad' (AbiTestMisbehave) on cpu:0");
      /* The session goes on: what does not need the stuck node runs. */
      ck_assert_int_eq(run_out(s, xv, "side", 0, &out, st), FLOE_OK);
      ck_assert_float_eq(f32_at(out, 5), 7.0f);
      floe_tensor_release(out);
      floe_status_free(st);
      if (free_first) floe_session_free(s); /* kept until the stuck kernel finishes */
      ck_assert_int_eq(release(), 1);
      if (!free_first) floe_session_free(s);
    }
    floe_graph_free(g);
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
}
END_TEST

/* done called twice for one call fails the step naming the node; a second done after the
 * step ended is ignored (and counted), never a crash or a double free. */
START_TEST(second_done_is_reported) {
  FloeTensor *xv = x23();
  for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) {
    FloeRuntime *rt = runtime_with_async(THREADS[t]);
    FloeGraph *g = misbehave_graph("done_twice");
    for (int inl = 0; inl <= 1; inl++) {
      FloeSession *s = session_new(g, rt, inl);
      FloeStatus *st = floe_status_new();
      for (int rep = 0; rep < 3; rep++) {
        FloeTensor *out;
        floe_code rc = run_out(s, xv, "bad", 0, &out, st);
        ck_assert_msg(rc == FLOE_INTERNAL, "%s: %s", floe_code_name(rc), floe_status_message(st));
        ck_assert_ptr_null(out);
        assert_contains(floe_status_message(st), "node 'bad' (AbiTestMisbehave)");
        assert_contains(floe_status_message(st), "called done twice");
      }
      floe_status_free(st);
      floe_session_free(s);
    }
    floe_graph_free(g);
    /* The second done long after the run. */
    g = misbehave_graph("done_late");
    int (*again)(void) = abitest_fn(rt, "abitest_call_done_again");
    FloeSession *s = session_new(g, rt, 1);
    FloeStatus *st = floe_status_new();
    FloeTensor *out;
    ck_assert_int_eq(run_out(s, xv, "out", 0, &out, st), FLOE_OK);
    ck_assert_float_eq(f32_at(out, 5), 12.0f);
    floe_tensor_release(out);
    int64_t late = floe__exec_num_late_dones();
    ck_assert_int_eq(again(), 1);
    ck_assert_int_eq(floe__exec_num_late_dones(), late + 1);
    ck_assert_int_eq(run_out(s, xv, "out", 0, &out, st), FLOE_OK); /* and the next run is fine */
    floe_tensor_release(out);
    floe_session_free(s);
    ck_assert_int_eq(again(), 1); /* after the session too */
    ck_assert_int_eq(floe__exec_num_late_dones(), late + 2);
    floe_status_free(st);
    floe_graph_free(g);
    floe_runtime_free(rt);
  }
  floe_tensor_release(xv);
}
END_TEST

/* A loop of asynchronous calls: v = AbiTestAsyncTwice(v) / 2 for i < N. */
static floe_code loop_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)n;
  FloeTensor *limit = floe_tensor_scalar_i32(*(const int *)arg, NULL);
  *pred = floe_binary(g, "Less", NULL, v[0], floe_const(g, NULL, limit));
  floe_tensor_release(limit);
  return FLOE_OK;
}

static floe_code loop_body(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)arg;
  (void)n;
  FloeTensor *one = floe_tensor_scalar_i32(1, NULL);
  next[0] = floe_binary(g, "Add", NULL, v[0], floe_const(g, NULL, one));
  floe_tensor_release(one);
  next[1] = floe_binary(g, "Mul", NULL, async_twice(g, NULL, v[1], (AsyncOpts){0, 0, 0}),
                        floe_const_f32(g, NULL, 0.5f));
  return FLOE_OK;
}

/* A step remembers its asynchronous calls to tell a second done from a late one; in a long
 * loop it keeps only about the recent ones (FLOE__TICKETS_KEPT), not one per call: 5000
 * iterations leave the table of tickets far smaller than 5000 slots. */
START_TEST(a_long_loop_of_async_calls_keeps_few_tickets) {
  enum { N = 5000 };
  int limit = N;
  FloeRuntime *rt = runtime_with_async(2);
  FloeGraph *g = floe_graph_new();
  FloeTensor *zero = floe_tensor_scalar_i32(0, NULL);
  FloeOutput init[2] = {floe_const(g, "i0", zero),
                        floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar())};
  floe_tensor_release(zero);
  FloeOutput res[2];
  ck_assert_int_eq(floe_while_loop(g, "w", loop_cond, loop_body, &limit, init, 2, NULL, res),
                   FLOE_OK);
  floe_unary(g, "Identity", "v", res[1]);
  FloeSession *s = session_new(g, rt, 1);
  FloeTensor *xv = floe_tensor_scalar_f32(3.0f, NULL), *out = NULL;
  int64_t before = floe__exec_num_ticket_slots();
  const char *fetch = "v";
  run_ok(s, "x", xv, &fetch, 1, &out);
  ck_assert_float_eq(f32_at(out, 0), 3.0f);
  int64_t grown = floe__exec_num_ticket_slots() - before;
  ck_assert_msg(grown < 2 * FLOE__TICKETS_KEPT, "%d asynchronous calls took %lld more slots", N,
                (long long)grown);
  floe_tensor_release(out);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
}
END_TEST

/* What a kernel returns is checked against the node's inferred shape: [1] where [?,3] was
 * promised (which Add would broadcast silently), a wrong known dim, or no output at all fail
 * the step naming node, op, device, plugin, output and both shapes. */
START_TEST(kernel_outputs_match_inferred_shapes) {
  FloeTensor *xv = x23();
  static const struct {
    const char *mode, *parts[3];
  } cases[] = {
      {"wrong_shape", {"output 0 has shape [1]", "promised [?,3]", NULL}},
      {"wrong_dim", {"output 0 has shape [2,4]", "promised [?,3]", NULL}},
      {"unset", {"without setting output 0", NULL, NULL}},
  };
  FloeRuntime *rt = runtime_with_async(2);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    FloeGraph *g = misbehave_graph(cases[c].mode);
    FloeSession *s = session_new(g, rt, 1);
    FloeStatus *st = floe_status_new();
    FloeTensor *out;
    floe_code rc = run_out(s, xv, "out", 0, &out, st);
    ck_assert_msg(rc == FLOE_INTERNAL, "%s: %s: %s", cases[c].mode, floe_code_name(rc),
                  floe_status_message(st));
    ck_assert_ptr_null(out);
    const char *msg = floe_status_message(st);
    assert_contains(msg, "node 'bad' (AbiTestMisbehave)");
    assert_contains(msg, "cpu:0");
    assert_contains(msg, "plugin 'abitest'");
    for (int k = 0; k < 3 && cases[c].parts[k]; k++) assert_contains(msg, cases[c].parts[k]);
    floe_status_free(st);
    floe_session_free(s);
    floe_graph_free(g);
  }
  /* A well-behaved kernel of the same op passes the check. */
  FloeGraph *g = misbehave_graph("ok");
  FloeSession *s = session_new(g, rt, 1);
  FloeTensor *out;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(run_out(s, xv, "out", 0, &out, st), FLOE_OK);
  ck_assert_float_eq(f32_at(out, 5), 12.0f);
  floe_tensor_release(out);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
  floe_tensor_release(xv);
}
END_TEST

/* ---- overhead ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Timings mean nothing under valgrind or sanitizers: only report them there. */
static bool timing_meaningful(void) {
  const char *pre = getenv("LD_PRELOAD");
  if (pre && strstr(pre, "vgpreload")) return false;
  if (getenv("FLOE_TEST_NO_TIMING")) return false;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return true;
#endif
}

/* Best time per node over a few runs of an already cached executor. */
static double per_node_us(FloeSession *s, const char *feed, FloeTensor *v, const char *fetch,
                          const char *target, int nodes) {
  FloeStatus *st = floe_status_new();
  FloeFeed f = {feed, v};
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    FloeTensor *out = NULL;
    double t0 = now_s();
    floe_code rc = floe_session_run(s, &f, 1, fetch ? &fetch : NULL, fetch ? 1 : 0,
                                    target ? &target : NULL, target ? 1 : 0, &out, st);
    double dt = now_s() - t0;
    ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
    floe_tensor_release(out);
    if (rep > 0 && dt < best) best = dt; /* the first run builds the executor */
  }
  floe_status_free(st);
  return best * 1e6 / nodes;
}

START_TEST(overhead_per_node) {
  enum { N = 10000 };
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  FloeOutput y = x;
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "c%d", i);
    y = floe_binary(g, "Add", name, y, one);
  }
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "all");
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "w%d", i);
    floe_node_add_control_input(b, floe_binary(g, "Add", name, x, one).node);
  }
  floe_node_finish(b);
  FloeRuntime *rt = runtime_new(2);
  FloeSession *s = session_new(g, rt, 1);
  FloeTensor *xv = floe_tensor_scalar_f32(0.0f, NULL);
  snprintf(name, sizeof name, "c%d", N - 1);
  double chain = per_node_us(s, "x", xv, name, NULL, N);
  double wide = per_node_us(s, "x", xv, NULL, "all", N + 1);
  fprintf(stderr, "executor overhead: chain %.3f us/node, independent %.3f us/node\n", chain,
          wide);
  if (timing_meaningful()) {
    /* Target 1 us per node; the bound leaves room for a loaded 2-core test machine. */
    ck_assert_msg(chain < 5.0, "chain of %d Adds: %.3f us per node", N, chain);
    ck_assert_msg(wide < 5.0, "%d independent Adds: %.3f us per node", N, wide);
  }
  FloeTensor *out = NULL;
  const char *fetch = name;
  run_ok(s, "x", xv, &fetch, 1, &out);
  ck_assert_float_eq(f32_at(out, 0), (float)N);
  floe_tensor_release(out);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_runtime_free(rt);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("executor");
  TCase *tc = tcase_create("shapes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, chain_of_adds);
  tcase_add_test(tc, deferred_tasks_run_after_normal_ones);
  tcase_add_test(tc, parallel_for_caller_takes_the_front);
  tcase_add_test(tc, pool_workers_pinned_apart);
  tcase_add_test(tc, diamond_on_big_tensors);
  tcase_add_test(tc, wide_fan_out);
  tcase_add_test(tc, control_dependencies);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, first_error_cancels_the_step);
  tcase_add_test(tc, many_errors_one_report);
  suite_add_tcase(s, tc);
  tc = tcase_create("pool");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, parallel_matmuls_nested_pool);
  tcase_add_test(tc, nested_parallel_loops);
  suite_add_tcase(s, tc);
  tc = tcase_create("async");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, async_nodes_mixed_with_sync);
  tcase_add_test(tc, async_error_cancels_the_step);
  tcase_add_test(tc, concurrent_steps_with_async_nodes);
  suite_add_tcase(s, tc);
  tc = tcase_create("misbehaving kernels");
  tcase_set_timeout(tc, 120); /* a hang guard: no test here waits for a time */
  tcase_add_test(tc, deadline_ends_a_run_whose_kernel_never_calls_done);
  tcase_add_test(tc, second_done_is_reported);
  tcase_add_test(tc, kernel_outputs_match_inferred_shapes);
  tcase_add_test(tc, a_long_loop_of_async_calls_keeps_few_tickets);
  suite_add_tcase(s, tc);
  tc = tcase_create("overhead");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, overhead_per_node);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
