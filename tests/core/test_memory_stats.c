/* SPDX-License-Identifier: Apache-2.0 */
/* test_memory_stats.c - floe_memory_stats: the live tensor bytes follow buffers made and
 * freed (sizes worked out by hand here), views add nothing, the peak keeps the high-water
 * mark until reset, a session's step returns what it took, and concurrent threads leave the
 * count exact (a non-atomic counter fails here and under TSan). */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

static FloeMemoryStats stats(void) {
  FloeMemoryStats m = {.struct_size = sizeof m};
  floe_memory_stats(&m);
  return m;
}

static FloeTensor *f32(int64_t n) {
  FloeStatus *st = floe_status_new();
  FloeTensor *t = floe_tensor_new(FLOE_F32, 1, &n, st);
  if (!t) ck_abort_msg("tensor: %s", floe_status_message(st));
  floe_status_free(st);
  return t;
}

START_TEST(counts_buffers_not_views) {
  floe_memory_reset_peak();
  FloeMemoryStats m0 = stats();
  ck_assert_int_eq(m0.peak_tensor_bytes, m0.live_tensor_bytes);
  FloeTensor *big = f32(1000);   /* 4000 bytes: its own buffer */
  FloeTensor *small = f32(10);   /* 40 bytes: one block with its header */
  ck_assert_int_eq(stats().live_tensor_bytes, m0.live_tensor_bytes + 4040);
  const int64_t d2[2] = {10, 100};
  FloeStatus *st = floe_status_new();
  FloeTensor *view = floe_tensor_reshape(big, 2, d2, st);
  ck_assert_ptr_nonnull(view);
  ck_assert_int_eq(stats().live_tensor_bytes, m0.live_tensor_bytes + 4040);
  floe_tensor_release(big); /* the view still holds the buffer */
  ck_assert_int_eq(stats().live_tensor_bytes, m0.live_tensor_bytes + 4040);
  floe_tensor_release(view);
  ck_assert_int_eq(stats().live_tensor_bytes, m0.live_tensor_bytes + 40);
  floe_tensor_release(small);
  FloeMemoryStats m1 = stats();
  ck_assert_int_eq(m1.live_tensor_bytes, m0.live_tensor_bytes);
  ck_assert_int_eq(m1.peak_tensor_bytes, m0.live_tensor_bytes + 4040);
  floe_memory_reset_peak();
  ck_assert_int_eq(stats().peak_tensor_bytes, m0.live_tensor_bytes);
  floe_status_free(st);
}
END_TEST

START_TEST(short_struct_is_left_alone) {
  FloeMemoryStats m = {.struct_size = sizeof(size_t) + sizeof(int64_t),
                       .live_tensor_bytes = -7, .peak_tensor_bytes = -7};
  floe_memory_stats(&m);
  ck_assert_int_eq(m.live_tensor_bytes, -7);
  ck_assert_int_eq(m.peak_tensor_bytes, -7);
  floe_memory_stats(NULL); /* no crash */
}
END_TEST

/* y = x @ x for x [64, 64] f32: the step's peak holds at least the fed x and the output y,
 * 16 KiB each, and after the fetched y is released the step has left nothing behind. */
START_TEST(a_step_returns_what_it_took) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {64, 64};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  floe_matmul(g, "y", x, x, 0, 0);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  FloeTensor *xv = floe_tensor_new(FLOE_F32, 2, d, st);
  ck_assert_ptr_nonnull(xv);
  memset(floe_tensor_data(xv), 0, 64 * 64 * 4);
  FloeFeed feed = {"x", xv};
  const char *fetch = "y";
  int64_t after[3];
  for (int r = 0; r < 3; r++) {
    FloeMemoryStats before = stats();
    floe_memory_reset_peak();
    FloeTensor *y;
    ck_assert_msg(floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &y, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq((int64_t)floe_tensor_nbytes(y), 64 * 64 * 4);
    /* x was alive before the step; y is new */
    ck_assert_int_ge(stats().peak_tensor_bytes, before.live_tensor_bytes + 64 * 64 * 4);
    floe_tensor_release(y);
    after[r] = stats().live_tensor_bytes;
  }
  /* The first step may cache (prepared executor); later steps keep the count level. */
  ck_assert_int_eq(after[2], after[1]);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

enum { ROUNDS = 20000 };

static void *churn(void *arg) {
  int64_t seed = (int64_t)(intptr_t)arg;
  for (int i = 0; i < ROUNDS; i++) {
    int64_t n = 1 + (seed * 7919 + i * 104729) % 300; /* both small and large buffers */
    FloeTensor *t = floe_tensor_new(FLOE_F32, 1, &n, NULL);
    if (!t) return (void *)1;
    floe_tensor_release(t);
  }
  return NULL;
}

START_TEST(concurrent_buffers_keep_the_count_exact) {
  FloeMemoryStats m0 = stats();
  pthread_t th[4];
  for (intptr_t k = 0; k < 4; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, churn, (void *)k), 0);
  for (int k = 0; k < 4; k++) {
    void *rc;
    pthread_join(th[k], &rc);
    ck_assert_ptr_null(rc);
  }
  FloeMemoryStats m1 = stats();
  ck_assert_int_eq(m1.live_tensor_bytes, m0.live_tensor_bytes);
  /* Each thread holds at most one buffer of at most 300 floats at a time. */
  ck_assert_int_le(m1.peak_tensor_bytes, m0.peak_tensor_bytes + 4 * 300 * 4);
}
END_TEST

int main(void) {
  Suite *s = suite_create("memory_stats");
  TCase *tc = tcase_create("stats");
  tcase_add_test(tc, counts_buffers_not_views);
  tcase_add_test(tc, short_struct_is_left_alone);
  tcase_add_test(tc, a_step_returns_what_it_took);
  tcase_add_test(tc, concurrent_buffers_keep_the_count_exact);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
