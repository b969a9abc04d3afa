/* SPDX-License-Identifier: Apache-2.0 */
/* test_trace.c - step traces: every kernel of a traced step recorded (across two CPU
 * devices, with one flow per Send/Recv pair), nothing while off, START/RESUME/OFF, the
 * breakdown's parts adding up, the file's errors, and steps traced from several threads at
 * once while tracing is switched (under TSan in make check-tsan). */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "floe/floe.h"

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

/* Writes s's trace to a new file named after the template path (changed in place). */
static void write_trace(FloeSession *s, char *path) {
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_trace_write(s, path, st) == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
}

/* z = relu(a @ b) + c with the MatMul on cpu:1: three Send/Recv pairs per step. */
static FloeGraph *split_chain(void) {
  FloeGraph *g = floe_graph_new();
  int64_t da[2] = {8, 16}, db[2] = {16, 4}, dc[2] = {8, 4};
  floe_graph_set_device_scope(g, "cpu:0");
  FloeTensor *ta = harness_random(FLOE_F32, 2, da, 1, -1, 1),
             *tb = harness_random(FLOE_F32, 2, db, 2, -1, 1),
             *tc = harness_random(FLOE_F32, 2, dc, 3, -1, 1);
  FloeOutput a = floe_const(g, "a", ta), b = floe_const(g, "b", tb), c = floe_const(g, "c", tc);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_tensor_release(tc);
  floe_graph_set_device_scope(g, "cpu:1");
  FloeOutput m = floe_matmul(g, "m", a, b, 0, 0);
  floe_graph_set_device_scope(g, "cpu:0");
  floe_binary(g, "Add", "z", floe_unary(g, "Relu", "r", m), c);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  return g;
}

static void run_z(FloeSession *s) {
  FloeStatus *st = floe_status_new();
  const char *fetch = "z";
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_tensor_release(out);
  floe_status_free(st);
}

static FloeStepBreakdown breakdown(FloeSession *s) {
  FloeStepBreakdown b = {.struct_size = sizeof b};
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_step_breakdown(s, &b, st) == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
  ck_assert_int_eq(b.kernel_ns + b.transfer_ns + b.framework_ns + b.tracing_ns + b.idle_ns,
                   b.thread_ns);
  ck_assert(b.kernel_ns >= 0 && b.transfer_ns >= 0 && b.framework_ns >= 0 && b.idle_ns >= 0);
  ck_assert(b.thread_ns >= b.wall_ns);
  ck_assert_int_eq(b.dropped_events, 0);
  return b;
}

/* A step started from a thread outside the pool leaves its expensive nodes to the pool's
 * threads (else its chain would run on one thread more than the pool has, beside workers
 * spinning for work): x @ x (256 x 256, fed) never runs on the caller's thread; a cheap
 * node may. */
START_TEST(expensive_nodes_leave_the_caller) {
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {256, 256};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  floe_matmul(g, "m", x, x, 0, 0);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = harness_random(FLOE_F32, 2, d, 4, -1, 1);
  FloeSession *s = harness_session(g, rt);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  FloeFeed feed = {"x", xv};
  for (int i = 0; i < 3; i++) {
    FloeTensor *out = harness_fetch(s, &feed, 1, "m");
    floe_tensor_release(out);
  }
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  char path[] = "/tmp/floe_trace_XXXXXX";
  write_trace(s, path);
  char caller[64];
  snprintf(caller, sizeof caller, "\"tid\":%d,", (int)gettid());
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[4096];
  int matmuls = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "\"op\":\"MatMul\"")) continue;
    matmuls++;
    ck_assert_msg(!strstr(line, caller), "the MatMul ran on the caller's thread: %s", line);
  }
  fclose(f);
  ck_assert_int_eq(matmuls, 3);
  unlink(path);
  floe_session_free(s);
  floe_tensor_release(xv);
  floe_graph_free(g);
}
END_TEST
/* Occurrences of needle in the file at path. */
static int count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  int k = 0;
  for (const char *p = buf; (p = strstr(p, needle)); p++) k++;
  free(buf);
  return k;
}

START_TEST(traced_steps_record_kernels_and_flows) {
  FloeGraph *g = split_chain();
  FloeSession *s = harness_session(g, rt);
  run_z(s); /* untraced: nothing recorded */
  ck_assert_int_eq(breakdown(s).steps, 0);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  for (int i = 0; i < 3; i++) run_z(s);
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  run_z(s); /* off again: not recorded, the others kept */
  FloeStepBreakdown b = breakdown(s);
  ck_assert_int_eq(b.steps, 3);
  ck_assert(b.kernel_ns > 0 && b.transfer_ns > 0 && b.wall_ns > 0);
  char path[] = "/tmp/floe_trace_XXXXXX";
  write_trace(s, path);
  ck_assert_int_eq(count_in_file(path, "\"node\":\"m\",\"op\":\"MatMul\",\"device\":\"cpu:1\""), 3);
  ck_assert_int_eq(count_in_file(path, "\"op\":\"Relu\""), 3);
  /* per step: c, m, its _Recv on cpu:0, r and z */
  ck_assert_int_eq(count_in_file(path, "\"outputs\":[\"f32[8,4]\"]"), 3 * 5);
  ck_assert_int_eq(count_in_file(path, "\"ph\":\"s\""), 9); /* a, b to cpu:1; m back */
  ck_assert_int_eq(count_in_file(path, "\"ph\":\"f\""), 9);
  ck_assert_int_eq(count_in_file(path, "\"name\":\"step\""), 3);
  ck_assert_int_ge(count_in_file(path, "\"name\":\"process_name\""), 3); /* steps, 2 devices */
  /* RESUME keeps the events; START drops them. */
  floe_session_set_tracing(s, FLOE_TRACE_RESUME);
  run_z(s);
  ck_assert_int_eq(breakdown(s).steps, 4);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  run_z(s);
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  ck_assert_int_eq(breakdown(s).steps, 1);
  unlink(path);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(unwritable_trace_names_the_file) {
  FloeGraph *g = split_chain();
  FloeSession *s = harness_session(g, rt);
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_session_trace_write(s, "/nonexistent-dir/t.json", st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(st), "/nonexistent-dir/t.json") &&
                    strstr(floe_status_message(st), "No such file"),
                "%s", floe_status_message(st));
  ck_assert_int_eq(floe_session_trace_write(s, NULL, st), FLOE_INVALID_ARGUMENT);
  FloeStepBreakdown b = {.struct_size = 8};
  ck_assert_int_eq(floe_session_step_breakdown(s, &b, st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

typedef struct Worker {
  FloeSession *s;
  int steps;
} Worker;

static void *worker(void *arg) {
  Worker *w = arg;
  for (int i = 0; i < w->steps; i++) run_z(w->s);
  return NULL;
}

/* Steps on four threads while a fifth switches tracing and reads the breakdown: the events
 * and the sink are shared by every executor thread. */
START_TEST(concurrent_traced_steps) {
  FloeGraph *g = split_chain();
  FloeSession *s = harness_session(g, rt);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  pthread_t th[4];
  Worker w = {s, 15};
  for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &w), 0);
  for (int i = 0; i < 20; i++) {
    floe_session_set_tracing(s, i % 2 ? FLOE_TRACE_RESUME : FLOE_TRACE_OFF);
    (void)breakdown(s);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  floe_session_set_tracing(s, FLOE_TRACE_START);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &w), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  floe_session_set_tracing(s, FLOE_TRACE_OFF);
  ck_assert_int_eq(breakdown(s).steps, 60);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, traced_steps_record_kernels_and_flows);
  tcase_add_test(tc, expensive_nodes_leave_the_caller);
  tcase_add_test(tc, unwritable_trace_names_the_file);
  tcase_add_test(tc, concurrent_traced_steps);
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
