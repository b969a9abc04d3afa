/* SPDX-License-Identifier: Apache-2.0 */
/* test_alloc_fail.c - SQLite-style fault simulation: for N = 1, 2, ... the Nth core
 * allocation (and every later one) fails while a small graph is built, a session made and
 * run twice. Each N must end in FLOE_NO_MEMORY with a message, or in success with the right
 * values once N is past the last allocation; leaks are caught by `make check-valgrind` and
 * `make check-asan`. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe.h"

static FloeRuntime *rt;
static bool split; /* the second test: the graph across two CPU devices (partitioned) */

static void runtime_setup(void) {
  if (split) setenv("FLOE_CPU_DEVICES", "2", 1);
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {sizeof o, NULL, NULL, 2, 1};
  rt = floe_runtime_new(&o, st);
  unsetenv("FLOE_CPU_DEVICES");
  if (!rt) ck_abort_msg("runtime: %s", floe_status_message(st));
  floe_status_free(st);
}

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* x [3] -> y = x * 2 -> z = y + 2 -> w = Neg(z), a diamond v = y * z, and a NoOp target
 * with a control input. Fetches w, v and the feed x itself. */
static floe_code attempt(FloeTensor *xv, FloeTensor **out, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  if (!g) return floe_status_set(st, FLOE_NO_MEMORY, "floe_graph_new");
  const int64_t d3[1] = {3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, d3));
  FloeOutput two = floe_const_f32(g, "two", 2.0f);
  FloeOutput y = floe_binary(g, "Mul", "y", x, two);
  if (split) floe_graph_set_device_scope(g, "cpu:1"); /* z and w on another device */
  FloeOutput z = floe_binary(g, "Add", "z", y, two);
  floe_unary(g, "Neg", "w", z);
  if (split) floe_graph_set_device_scope(g, "cpu:0");
  floe_binary(g, "Mul", "v", y, z);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "done");
  floe_node_add_control_input(b, floe_graph_find(g, "w"));
  floe_node_finish(b);
  floe_code rc = floe_graph_status(g);
  if (rc != FLOE_OK) {
    floe_graph_error(g, st);
    floe_graph_free(g);
    return rc;
  }
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  FloeSession *s = floe_session_new(g, &o, st);
  floe_graph_free(g);
  if (!s) return floe_status_code(st);
  FloeFeed f = {"x", xv};
  const char *fetches[] = {"w", "v", "x"}, *target = "done";
  rc = floe_session_run(s, &f, 1, fetches, 3, &target, 1, out, st);
  if (rc == FLOE_OK) {
    /* A second run reuses the cached executor: its step allocations are walked too. */
    FloeTensor *again[3] = {NULL, NULL, NULL};
    rc = floe_session_run(s, &f, 1, fetches, 3, &target, 1, again, st);
    for (int i = 0; i < 3; i++) floe_tensor_release(again[i]);
    for (int i = 0; i < 3 && rc != FLOE_OK; i++) {
      floe_tensor_release(out[i]);
      out[i] = NULL;
    }
  }
  floe_session_free(s);
  return rc;
}

static void walk(void) {
  const float xs[3] = {1, -2, 0.5f};
  const int64_t d3[1] = {3};
  FloeTensor *xv = floe_tensor_from_data(FLOE_F32, 1, d3, xs, sizeof xs, NULL);
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_nonnull(xv);
  ck_assert_ptr_nonnull(st);
  long n;
  bool done = false;
  for (n = 1; n < 100000 && !done; n++) {
    FloeTensor *out[3] = {NULL, NULL, NULL};
    floe_status_clear(st);
    floe_test_fail_alloc_after(n);
    floe_code rc = attempt(xv, out, st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      for (int i = 0; i < 3; i++) {
        float y = xs[i] * 2, z = y + 2;
        ck_assert_float_eq(((const float *)floe_tensor_data(out[0]))[i], -z);
        ck_assert_float_eq(((const float *)floe_tensor_data(out[1]))[i], y * z);
      }
      ck_assert_ptr_eq(out[2], xv);
      for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
      done = true;
      break;
    }
    ck_assert_msg(rc == FLOE_NO_MEMORY, "N=%ld: expected NO_MEMORY, got %s: %s", n,
                  floe_code_name(rc), floe_status_message(st));
    ck_assert_msg(floe_status_code(st) == FLOE_NO_MEMORY, "N=%ld: the status says %s", n,
                  floe_code_name(floe_status_code(st)));
    for (int i = 0; i < 3; i++) ck_assert_ptr_null(out[i]);
  }
  ck_assert_msg(done, "never succeeded");
  /* Building, preparing and running this graph takes many allocations: the walk must have
   * failed in all of them before succeeding. */
  ck_assert_int_gt(n, 20);
  fprintf(stderr, "alloc-fail walk: success at N=%ld\n", n);
  floe_status_free(st);
  floe_tensor_release(xv);
}

START_TEST(walk_allocation_failures) { walk(); }
END_TEST

/* The same across two devices: placement, partitioning (Send/Recv pairs, a control edge
 * across devices: "done" on cpu:0 waits for w on cpu:1), pieces and the rendezvous. */
START_TEST(walk_allocation_failures_partitioned) { walk(); }
END_TEST

static void split_on(void) { split = true; }

int main(void) {
  Suite *s = suite_create("alloc_fail");
  TCase *tc = tcase_create("walk");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, walk_allocation_failures);
  suite_add_tcase(s, tc);
  TCase *tc2 = tcase_create("partitioned");
  tcase_add_checked_fixture(tc2, split_on, NULL); /* before the runtime is made */
  tcase_add_checked_fixture(tc2, runtime_setup, runtime_teardown);
  tcase_set_timeout(tc2, 600);
  tcase_add_test(tc2, walk_allocation_failures_partitioned);
  suite_add_tcase(s, tc2);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
