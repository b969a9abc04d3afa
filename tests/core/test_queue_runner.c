/* SPDX-License-Identifier: Apache-2.0 */
/* test_queue_runner.c - the SDK's queue runner: threads running an enqueue step (IDX
 * readers -> a bounded FIFO) while the test's thread dequeues, so every record arrives once,
 * paired, and the consumer ends with out of range once the readers ran dry; stop
 * unblocking threads waiting on a full queue; a reader error stopping the runner and
 * reaching join (and the consumer ending instead of waiting); and the argument checks. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;
static char dir[256];

static void setup(void) {
  rt = harness_runtime(4);
  harness_tmpdir(dir, sizeof dir, "runner");
}

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
  harness_rmdir(dir);
}

/* An IDX file of u8 items: n items of `item` bytes, item i filled with (i % 251), or a file
 * whose data stops short when truncate. Returns the path (static storage per tag). */
static const char *write_idx(const char *tag, int n, int item, int truncate) {
  static char paths[4][320];
  static int k;
  char *p = paths[k++ % 4];
  snprintf(p, 320, "%s/%s.idx", dir, tag);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  uint8_t hdr[12] = {0, 0, 8, (uint8_t)(item > 1 ? 2 : 1)};
  for (int b = 0; b < 4; b++) hdr[4 + b] = (uint8_t)((uint32_t)n >> (24 - 8 * b));
  for (int b = 0; b < 4; b++) hdr[8 + b] = (uint8_t)((uint32_t)item >> (24 - 8 * b));
  fwrite(hdr, 1, item > 1 ? 12 : 8, f);
  int total = truncate ? n * item / 2 : n * item;
  for (int i = 0; i < total; i++) fputc((i / item) % 251, f);
  fclose(f);
  return p;
}

static FloeSession *session_new(FloeGraph *g) { return harness_session(g, rt); }

/* readers (images: item bytes, labels: 1 byte) -> up to `chunk` records -> enqueue_many into
 * "q" (capacity) -> "deq" dequeue_up_to(5); "enq" and "close" (with cancel). */
static FloeGraph *pipeline(const char *images, const char *labels, int item, int64_t epochs,
                           int chunk, int capacity) {
  FloeGraph *g = floe_graph_new();
  FloeReaderOptions ro;
  floe_reader_options_init(&ro);
  ro.num_epochs = epochs;
  FloeOutput r[2] = {floe_idx_reader(g, "images", images, 0, 0, -1, &ro),
                     floe_idx_reader(g, "labels", labels, 0, 0, -1, &ro)};
  FloeOutput v[2];
  FloeTensor *c = floe_tensor_scalar_i64(chunk, NULL);
  FloeOutput keys = floe_reader_read_up_to(g, "read", r, 2, floe_const(g, "chunk", c), v);
  floe_tensor_release(c);
  int64_t d = item;
  FloeShape shapes[3] = {floe_shape_scalar(), floe_shape_make(1, &d), floe_shape_scalar()};
  FloeQueueOptions qo;
  floe_queue_options_init(&qo);
  qo.capacity = capacity;
  FloeOutput q = floe_queue(g, "q", (FloeDType[]){FLOE_I64, FLOE_U8, FLOE_U8}, shapes, 3, &qo);
  floe_queue_enqueue_many(g, "enq", q, (FloeOutput[]){keys, v[0], v[1]}, 3);
  FloeTensor *five = floe_tensor_scalar_i32(5, NULL);
  FloeOutput out[3];
  floe_queue_dequeue_up_to(g, "deq", q, floe_const(g, "five", five), out, 3);
  floe_tensor_release(five);
  floe_queue_close(g, "close", q, 1);
  floe_queue_close(g, "close_plain", q, 0);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

/* Dequeues until out of range; counts each key, checks pairing; returns the total. */
static int drain(FloeSession *s, int item, int *seen, int n, FloeStatus *st) {
  const char *f[3] = {"deq:0", "deq:1", "deq:2"};
  int total = 0;
  for (;;) {
    FloeTensor *out[3] = {0};
    if (floe_session_run(s, NULL, 0, f, 3, NULL, 0, out, st) != FLOE_OK) break;
    const int64_t *k = floe_tensor_data(out[0]);
    const uint8_t *px = floe_tensor_data(out[1]), *lb = floe_tensor_data(out[2]);
    for (int64_t i = 0; i < floe_tensor_dim(out[0], 0); i++) {
      ck_assert(k[i] >= 0 && k[i] < n);
      seen[k[i]]++;
      ck_assert_int_eq(lb[i], k[i] % 251);
      ck_assert_int_eq(px[i * item], k[i] % 251);
      ck_assert_int_eq(px[i * item + item - 1], k[i] % 251);
      total++;
    }
    for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  }
  return total;
}

START_TEST(runner_feeds_a_consumer_until_the_data_ends) {
  enum { N = 300, ITEM = 16 };
  const char *im = write_idx("im", N, ITEM, 0), *lb = write_idx("lb", N, 1, 0);
  FloeGraph *g = pipeline(im, lb, ITEM, 2, 7, 8);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeQueueRunner *qr = floe_queue_runner_new(s, "enq", 3, "close", st);
  ck_assert_msg(qr != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_queue_runner_start(qr, st), FLOE_OK);
  int seen[N] = {0};
  int total = drain(s, ITEM, seen, N, st);
  ck_assert_msg(floe_status_code(st) == FLOE_OUT_OF_RANGE, "%s", floe_status_message(st));
  ck_assert(strstr(floe_status_message(st), "queue 'q' is closed and has 0 elements"));
  ck_assert_int_eq(total, 2 * N);
  for (int k = 0; k < N; k++) ck_assert_int_eq(seen[k], 2); /* two epochs */
  ck_assert_msg(floe_queue_runner_join(qr, st) == FLOE_OK, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_queue_runner_start(qr, st), FLOE_FAILED_PRECONDITION);
  ck_assert(strstr(floe_status_message(st), "already started"));
  floe_queue_runner_free(qr);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(stop_unblocks_threads_on_a_full_queue) {
  const char *im = write_idx("im", 10, 4, 0), *lb = write_idx("lb", 10, 1, 0);
  FloeGraph *g = pipeline(im, lb, 4, 0 /* without end */, 3, 8);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeQueueRunner *qr = floe_queue_runner_new(s, "enq", 2, "close", st);
  ck_assert_int_eq(floe_queue_runner_start(qr, st), FLOE_OK);
  /* The queue fills up and both threads wait. */
  usleep(100 * 1000);
  int seen[10] = {0};
  const char *f[3] = {"deq:0", "deq:1", "deq:2"};
  FloeTensor *out[3] = {0};
  ck_assert_int_eq(floe_session_run(s, NULL, 0, f, 3, NULL, 0, out, st), FLOE_OK);
  ck_assert_int_eq(floe_tensor_dim(out[0], 0), 5);
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_msg(floe_queue_runner_stop(qr, st) == FLOE_OK, "%s", floe_status_message(st));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert(t1.tv_sec - t0.tv_sec < 5);
  /* What went in before the close drains, then out of range. */
  drain(s, 4, seen, 10, st);
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  floe_queue_runner_free(qr);
  /* Freeing a running runner stops it first. */
  FloeSession *s2 = session_new(g);
  qr = floe_queue_runner_new(s2, "enq", 2, "close", st);
  ck_assert_int_eq(floe_queue_runner_start(qr, st), FLOE_OK);
  usleep(20 * 1000);
  floe_queue_runner_free(qr);
  floe_session_free(s2);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(an_error_stops_the_runner_and_reaches_join) {
  const char *im = write_idx("im", 20, 4, 1 /* truncated */), *lb = write_idx("lb", 20, 1, 0);
  FloeGraph *g = pipeline(im, lb, 4, 1, 3, 8);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  FloeQueueRunner *qr = floe_queue_runner_new(s, "enq", 2, "close", st);
  ck_assert_int_eq(floe_queue_runner_start(qr, st), FLOE_OK);
  /* The consumer is not left waiting: the runner closes the queue. */
  int seen[20] = {0};
  ck_assert_int_eq(drain(s, 4, seen, 20, st), 0);
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(floe_queue_runner_join(qr, st), FLOE_DATA_LOSS);
  ck_assert_msg(strstr(floe_status_message(st), "queue runner: running 'enq'") &&
                    strstr(floe_status_message(st), "im.idx: truncated at offset"),
                "%s", floe_status_message(st));
  /* stop after the end returns the same. */
  ck_assert_int_eq(floe_queue_runner_stop(qr, st), FLOE_DATA_LOSS);
  floe_queue_runner_free(qr);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(arguments_are_checked) {
  const char *im = write_idx("im", 4, 4, 0), *lb = write_idx("lb", 4, 1, 0);
  FloeGraph *g = pipeline(im, lb, 4, 1, 3, 8);
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_null(floe_queue_runner_new(s, "nope", 1, "close", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert(strstr(floe_status_message(st), "the enqueue target 'nope' is not a node"));
  ck_assert_ptr_null(floe_queue_runner_new(s, "enq", 1, "gone", st));
  ck_assert(strstr(floe_status_message(st), "the close target 'gone'"));
  ck_assert_ptr_null(floe_queue_runner_new(s, "enq", 0, "close", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_null(floe_queue_runner_new(s, "enq", 1, "close_plain", st));
  ck_assert(strstr(floe_status_message(st), "does not cancel pending enqueues"));
  ck_assert_ptr_null(floe_queue_runner_new(NULL, "enq", 1, "close", st));
  ck_assert_int_eq(floe_queue_runner_start(NULL, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_queue_runner_join(NULL, st), FLOE_INVALID_ARGUMENT);
  floe_queue_runner_free(NULL);
  /* Stopped before it started: nothing to join, no error. */
  FloeQueueRunner *qr = floe_queue_runner_new(s, "enq", 1, "close", st);
  ck_assert_int_eq(floe_queue_runner_stop(qr, st), FLOE_OK);
  floe_queue_runner_free(qr);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("queue_runner");
  TCase *tc = tcase_create("runner");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, runner_feeds_a_consumer_until_the_data_ends);
  tcase_add_test(tc, stop_unblocks_threads_on_a_full_queue);
  tcase_add_test(tc, an_error_stops_the_runner_and_reaches_join);
  tcase_add_test(tc, arguments_are_checked);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
