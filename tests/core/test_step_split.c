/* SPDX-License-Identifier: Apache-2.0 */
/* test_step_split.c - the step split (floe_session_step_split, FloeRunOptions.split): a
 * synthetic timeline worked out by hand (unions over threads, not sums; the cut at the last
 * compute kernel before the last send; the caller's prologue; transfers and asynchronous
 * kernels), the edge cases (no STEP event, no compute kernel, compute after the sends), then real runs: one whose dequeue waits for another
 * thread's enqueue (the wait lands in wait_params), per-run splits adding up to the
 * session's, untraced runs, and a bad struct_size. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "exec.h"
#include "floe/floe.h"

static FloeTraceEvent kernel(int64_t tid, const char *op, int64_t t0, int64_t t1, bool async,
                             int64_t record_ns) {
  bool transfer = !strcmp(op, "_Send") || !strcmp(op, "_Recv");
  return (FloeTraceEvent){.kind = FLOE__TRACE_KERNEL, .tid = tid, .op = op, .t0 = t0, .t1 = t1,
                          .async = async, .transfer = transfer, .step = 1,
                          .record_ns = record_ns};
}

static FloeTraceEvent active(int64_t tid, int64_t t0, int64_t t1) {
  return (FloeTraceEvent){.kind = FLOE__TRACE_ACTIVE, .tid = tid, .t0 = t0, .t1 = t1, .step = 1};
}

static FloeStepSplit split_of(const FloeTraceEvent *ev, size_t n) {
  const FloeTraceEvent *v[32];
  ck_assert(n <= 32);
  for (size_t i = 0; i < n; i++) v[n - 1 - i] = &ev[i]; /* any order will do */
  FloeStepSplit s = {.struct_size = sizeof s};
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__step_split_add(v, n, &s, &st), FLOE_OK);
  return s;
}

/* One step of wall [0, 100] on the caller; its executors from 5 to 95.
 *   thread 1: stretch [5, 15] posts a _Recv (async, [6, 40]: the parameters arriving);
 *             stretch [40, 70]: MatMul [42, 60], then _Send [66, 68] (an early gradient);
 *   thread 2: stretch [48, 66]: Relu [50, 65], overlapping the MatMul;
 *   thread 1: stretch [75, 81]: Add [76, 78] (the last compute: L = 78), _Send [79, 80].
 * busy before L: [0, 5] (the caller) + [5, 15] + [40, 70] + [75, 78] = 15 + 30 + 3 = 48;
 * wait_params = 78 - 48 = 30 ([15, 40] and [70, 75]); send_grads = 100 - 78 = 22;
 * kernel_ns = |[42, 65]| + |[76, 78]| = 23 + 2 = 25 (summing threads would say 35). */
START_TEST(synthetic_timeline_by_hand) {
  FloeTraceEvent ev[] = {
      {.kind = FLOE__TRACE_STEP, .tid = 9, .t0 = 0, .t1 = 100, .x0 = 5, .x1 = 95, .step = 1},
      active(1, 5, 15),
      kernel(1, "_Recv", 6, 40, true, 1),
      active(1, 40, 70),
      kernel(1, "MatMul", 42, 60, false, 2),
      kernel(1, "_Send", 66, 68, false, 1),
      active(2, 48, 66),
      kernel(2, "Relu", 50, 65, false, 2),
      active(1, 75, 81),
      kernel(1, "Add", 76, 78, false, 2),
      kernel(1, "_Send", 79, 80, false, 1),
  };
  FloeStepSplit s = split_of(ev, sizeof ev / sizeof ev[0]);
  ck_assert_int_eq(s.steps, 1);
  ck_assert_int_eq(s.wall_ns, 100);
  ck_assert_int_eq(s.compute_ns, 48);
  ck_assert_int_eq(s.wait_params_ns, 30);
  ck_assert_int_eq(s.send_grads_ns, 22);
  ck_assert_int_eq(s.kernel_ns, 25);
  ck_assert_int_eq(s.tracing_ns, 9);
  ck_assert_int_eq(s.compute_ns + s.wait_params_ns + s.send_grads_ns, s.wall_ns);
}
END_TEST

/* No STEP event (a run still going): nothing. No compute kernel: all of it after L = t0. A
 * kernel sticking out of the run is clipped to it. A compute kernel after the last send. */
START_TEST(edge_cases) {
  FloeTraceEvent no_step[] = {active(1, 0, 10), kernel(1, "MatMul", 1, 9, false, 0)};
  ck_assert_int_eq(split_of(no_step, 2).steps, 0);
  FloeTraceEvent only_transfers[] = {
      {.kind = FLOE__TRACE_STEP, .t0 = 10, .t1 = 50, .x0 = 12, .x1 = 48, .step = 1},
      active(1, 12, 20), kernel(1, "_Recv", 13, 40, true, 0), kernel(1, "_Send", 41, 42, false, 0)};
  FloeStepSplit s = split_of(only_transfers, 4);
  ck_assert_int_eq(s.steps, 1);
  ck_assert_int_eq(s.compute_ns, 0);
  ck_assert_int_eq(s.wait_params_ns, 0);
  ck_assert_int_eq(s.send_grads_ns, 40);
  FloeTraceEvent clipped[] = {
      {.kind = FLOE__TRACE_STEP, .t0 = 10, .t1 = 50, .x0 = 10, .x1 = 50, .step = 1},
      kernel(1, "MatMul", 5, 20, false, 0), kernel(2, "MatMul", 45, 60, false, 0)};
  s = split_of(clipped, 3);
  ck_assert_int_eq(s.wall_ns, 40);
  ck_assert_int_eq(s.compute_ns, 15); /* [10, 20] + [45, 50]; L = 50 */
  ck_assert_int_eq(s.kernel_ns, 15);
  ck_assert_int_eq(s.wait_params_ns, 25);
  ck_assert_int_eq(s.send_grads_ns, 0);
  /* A compute kernel after the last send (a local step set from a token that came back after
   * the update) does not move L: the wait for the token is send_grads, not wait_params. */
  FloeTraceEvent token[] = {
      {.kind = FLOE__TRACE_STEP, .t0 = 0, .t1 = 100, .x0 = 10, .x1 = 95, .step = 1},
      active(1, 10, 32), kernel(1, "MatMul", 10, 30, false, 0),
      kernel(1, "_Send", 30, 32, false, 0), kernel(1, "_Recv", 32, 90, true, 0),
      active(1, 90, 93), kernel(1, "AssignVariableOp", 90, 92, false, 0)};
  s = split_of(token, 7);
  ck_assert_int_eq(s.compute_ns, 30); /* the caller [0, 10], the MatMul [10, 30]; L = 30 */
  ck_assert_int_eq(s.kernel_ns, 20);
  ck_assert_int_eq(s.wait_params_ns, 0);
  ck_assert_int_eq(s.send_grads_ns, 70);
}
END_TEST

/* ---- real runs ---- */

static FloeRuntime *rt;

static void setup(void) { rt = harness_runtime(2); }

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* y = Square(dequeue(q)); "enq" puts placeholder a into q. */
static FloeGraph *queue_square(void) {
  FloeGraph *g = floe_graph_new();
  int64_t two = 2;
  FloeDType dt = FLOE_F32;
  FloeShape shape = floe_shape_make(1, &two);
  FloeOutput q = floe_queue(g, "q", &dt, &shape, 1, NULL);
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, shape);
  floe_queue_enqueue(g, "enq", q, &a, 1);
  FloeOutput d;
  floe_queue_dequeue(g, "deq", q, &d, 1);
  floe_unary(g, "Square", "y", d);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static void enqueue(FloeSession *s) {
  int64_t two = 2;
  float v[2] = {1, 2};
  FloeTensor *a = harness_f32(1, &two, v);
  FloeFeed f = {"a", a};
  const char *target = "enq";
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, &f, 1, NULL, 0, &target, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  floe_tensor_release(a);
}

/* Runs y with opts (its split, if any, filled). */
static floe_code run_y(FloeSession *s, const FloeRunOptions *o) {
  const char *fetch = "y";
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run_opts(s, o, NULL, 0, &fetch, 1, NULL, 0, &out, st);
  if (rc == FLOE_OK) {
    const float *y = floe_tensor_data(out);
    ck_assert(y[0] == 1 && y[1] == 4);
    floe_tensor_release(out);
  }
  floe_status_free(st);
  return rc;
}

typedef struct Consumer {
  FloeSession *s;
  FloeStepSplit split;
} Consumer;

static void *consume(void *arg) {
  Consumer *c = arg;
  FloeRunOptions o;
  floe_run_options_init(&o);
  o.split = &c->split;
  ck_assert_int_eq(run_y(c->s, &o), FLOE_OK);
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

/* The dequeue waits ~D for an enqueue made from another thread: nothing runs meanwhile, and
 * the Square after it is the last compute, so by hand W ~ D, wait_params ~ D, compute and
 * send_grads tiny. The enqueue's own run (another traced run) stays out of this run's split. */
START_TEST(dequeue_wait_is_wait_params) {
  enum { D_MS = 150 };
  FloeGraph *g = queue_square();
  FloeSession *s = harness_session(g, rt);
  enqueue(s); /* a first round untraced: executors built, pool warm */
  ck_assert_int_eq(run_y(s, NULL), FLOE_OK);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  Consumer c = {s, {.struct_size = sizeof(FloeStepSplit)}};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, consume, &c), 0);
  sleep_ms(D_MS);
  enqueue(s);
  pthread_join(th, NULL);
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  const FloeStepSplit *p = &c.split;
  ck_assert_int_eq(p->steps, 1);
  ck_assert_int_eq(p->compute_ns + p->wait_params_ns + p->send_grads_ns, p->wall_ns);
  ck_assert_msg(p->wait_params_ns >= (int64_t)D_MS * 1000000 / 2,
                "wait_params %lld ns, want about %d ms", (long long)p->wait_params_ns, D_MS);
  ck_assert_msg(p->compute_ns + p->send_grads_ns < p->wait_params_ns / 4,
                "compute %lld + send_grads %lld ns against wait_params %lld ns",
                (long long)p->compute_ns, (long long)p->send_grads_ns,
                (long long)p->wait_params_ns);
  ck_assert(p->kernel_ns > 0 && p->kernel_ns <= p->compute_ns);
  /* the session-wide split holds both runs: the enqueue's has no wait at all */
  FloeStepSplit all = {.struct_size = sizeof all};
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_session_step_split(s, &all, st), FLOE_OK);
  ck_assert_int_eq(all.steps, 2);
  ck_assert_int_eq(all.compute_ns + all.wait_params_ns + all.send_grads_ns, all.wall_ns);
  ck_assert(all.wall_ns > p->wall_ns && all.wait_params_ns >= p->wait_params_ns);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Per-run splits add up to the session's; an untraced run says steps = 0; a struct_size
 * that is not FloeStepSplit's is refused before anything runs. */
START_TEST(per_run_splits_add_up) {
  FloeGraph *g = queue_square();
  FloeSession *s = harness_session(g, rt);
  FloeStepSplit one = {.struct_size = sizeof one}, sum = {.struct_size = sizeof sum};
  FloeRunOptions o;
  floe_run_options_init(&o);
  o.split = &one;
  enqueue(s);
  one.steps = 7;
  ck_assert_int_eq(run_y(s, &o), FLOE_OK); /* not traced */
  ck_assert_int_eq(one.steps, 0);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  for (int i = 0; i < 5; i++) {
    enqueue(s);
    ck_assert_int_eq(run_y(s, &o), FLOE_OK);
    ck_assert_int_eq(one.steps, 1);
    ck_assert_int_eq(one.compute_ns + one.wait_params_ns + one.send_grads_ns, one.wall_ns);
    sum.steps += one.steps;
    sum.wall_ns += one.wall_ns;
    sum.compute_ns += one.compute_ns;
    sum.wait_params_ns += one.wait_params_ns;
    sum.send_grads_ns += one.send_grads_ns;
  }
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  FloeStepSplit all = {.struct_size = sizeof all};
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_session_step_split(s, &all, st), FLOE_OK);
  ck_assert_int_eq(all.steps, 10); /* the enqueues too */
  ck_assert(all.wall_ns > sum.wall_ns && all.compute_ns >= sum.compute_ns);
  one.struct_size = 8;
  enqueue(s);
  ck_assert_int_eq(run_y(s, &o), FLOE_INVALID_ARGUMENT);
  FloeStepSplit small = {.struct_size = 8};
  ck_assert_int_eq(floe_session_step_split(s, &small, st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("step_split");
  TCase *tc = tcase_create("timeline");
  tcase_add_test(tc, synthetic_timeline_by_hand);
  tcase_add_test(tc, edge_cases);
  suite_add_tcase(s, tc);
  tc = tcase_create("session");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, dequeue_wait_is_wait_params);
  tcase_add_test(tc, per_run_splits_add_up);
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
