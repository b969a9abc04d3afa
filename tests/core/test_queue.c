/* SPDX-License-Identifier: Apache-2.0 */
/* test_queue.c - FIFOQueue, PaddingFIFOQueue and RandomShuffleQueue through sessions: order
 * and persistence across runs, every operation and its errors (closed queues, dtype and
 * shape mismatches that leave the queue untouched, impossible batch sizes), blocking and
 * unblocking across threads (a full queue's enqueue, an empty queue's dequeue, close with
 * and without cancelling pending enqueues, a step cancelled by a failing node, the
 * resource manager closing everything, floe_session_close / floe_session_cancel and a run's
 * timeout), random shuffling (a seeded permutation,
 * min_after_dequeue, uniform first picks), padding, and a many-producer many-consumer run
 * whose every element arrives exactly once and in each producer's order. Expected values
 * are the ones the test itself fed. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;

/* ---- test ops: a handle forwarded (so a queue operation cannot see the queue's node when
 * building, and only the kernels check), and a node that fails after a delay ---- */

static floe_code forward_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  floe_tensor_retain(ctx->inputs[0]);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = ctx->inputs[0];
  return FLOE_OK;
}

static floe_code sleep_fail_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeAttrValue *ms = floe__attrs_get(&ctx->node->attrs, "ms");
  usleep((useconds_t)(ms ? ms->u.i : 0) * 1000);
  return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "boom");
}

static void register_test_ops(void) {
  static const char *fwd_in[] = {"h: resource"}, *fwd_out[] = {"out: resource"};
  static const char *fail_attrs[] = {"ms: int = 0"};
  FloeOpDef defs[] = {
      {.struct_size = sizeof(FloeOpDef), .name = "TestForwardHandle", .inputs = fwd_in,
       .num_inputs = 1, .outputs = fwd_out, .num_outputs = 1},
      {.struct_size = sizeof(FloeOpDef), .name = "TestSleepFail", .attrs = fail_attrs,
       .num_attrs = 1, .flags = FLOE_OP_STATEFUL},
  };
  for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
    FloeStatus st = {FLOE_OK, NULL};
    floe_code rc = floe__op_register(&defs[i], "test", &st);
    ck_assert_msg(rc == FLOE_OK || rc == FLOE_ALREADY_EXISTS, "%s", floe_status_message(&st));
    floe_status_clear(&st);
  }
}

static void runtime_setup(void) {
  register_test_ops();
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {sizeof o, NULL, NULL, 4, 1};
  rt = floe_runtime_new(&o, st);
  if (!rt) ck_abort_msg("runtime: %s", floe_status_message(st));
  ck_assert_int_eq(floe__core_kernel_add(rt, "TestForwardHandle", FLOE__KERNEL_RAW_RESOURCES,
                                         forward_compute, st), FLOE_OK);
  ck_assert_int_eq(floe__core_kernel_add(rt, "TestSleepFail", 0, sleep_fail_compute, st),
                   FLOE_OK);
  floe_status_free(st);
}

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* ---- helpers ---- */

static FloeSession *session_new(const FloeGraph *g) { return harness_session(g, rt); }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One run: feeds "name" -> tensor, fetches, one target (or NULL). */
static floe_code run(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches,
                     int nfetch, const char *target, FloeTensor **out, FloeStatus *st) {
  return floe_session_run(s, feeds, nf, fetches, nfetch, target ? &target : NULL,
                          target ? 1 : 0, out, st);
}

static void run_ok(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches,
                   int nfetch, const char *target, FloeTensor **out) {
  FloeStatus *st = floe_status_new();
  floe_code rc = run(s, feeds, nf, fetches, nfetch, target, out, st);
  ck_assert_msg(rc == FLOE_OK, "run: %s", floe_status_message(st));
  floe_status_free(st);
}

/* The run fails with code and a message containing frag. */
static void run_fails(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches,
                      int nfetch, const char *target, floe_code code, const char *frag) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out[8] = {0};
  floe_code rc = run(s, feeds, nf, fetches, nfetch, target, out, st);
  ck_assert_msg(rc == code, "want %s, got %s: %s", floe_code_name(code), floe_code_name(rc),
                floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), frag), "message '%s' lacks '%s'",
                floe_status_message(st), frag);
  floe_status_free(st);
}

static FloeTensor *f32v(int n, const float *v) {
  int64_t d = n;
  return floe_tensor_from_data(FLOE_F32, 1, &d, v, (size_t)n * sizeof *v, NULL);
}

static int32_t scalar_i32(const FloeTensor *t) { return *(const int32_t *)floe_tensor_data(t); }

static FloeOutput const_i32(FloeGraph *g, const char *name, int32_t v) {
  FloeTensor *t = floe_tensor_scalar_i32(v, NULL);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

/* The standard test graph: queue "q" (f32 [2], i32 []) with the given options, placeholders
 * "a" f32 [2] and "b" i32 [] enqueued by "enq", "am" f32 [?,2] and "bm" i32 [?] by "enqm",
 * "deq" (outputs deq:0, deq:1), "deqm" and "upto" of n = placeholder "n", "close",
 * "close_cancel", "size" and "closed". */
static FloeGraph *queue_graph(const FloeQueueOptions *o) {
  FloeGraph *g = floe_graph_new();
  int64_t two = 2, any = -1, any2[2] = {-1, 2};
  FloeDType dts[2] = {FLOE_F32, FLOE_I32};
  FloeShape shapes[2] = {floe_shape_make(1, &two), floe_shape_scalar()};
  FloeOutput q = floe_queue(g, "q", dts, shapes, 2, o);
  FloeOutput in[2] = {floe_placeholder(g, "a", FLOE_F32, floe_shape_make(1, &two)),
                      floe_placeholder(g, "b", FLOE_I32, floe_shape_scalar())};
  floe_queue_enqueue(g, "enq", q, in, 2);
  FloeOutput inm[2] = {floe_placeholder(g, "am", FLOE_F32, floe_shape_make(2, any2)),
                       floe_placeholder(g, "bm", FLOE_I32, floe_shape_make(1, &any))};
  floe_queue_enqueue_many(g, "enqm", q, inm, 2);
  FloeOutput out[2], n = floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar());
  floe_queue_dequeue(g, "deq", q, out, 2);
  floe_queue_dequeue_many(g, "deqm", q, n, out, 2);
  floe_queue_dequeue_up_to(g, "upto", q, n, out, 2);
  floe_queue_close(g, "close", q, 0);
  floe_queue_close(g, "close_cancel", q, 1);
  floe_queue_size(g, "size", q);
  floe_queue_is_closed(g, "closed", q);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

/* Enqueues element k: a = [k, -k], b = 100 + k. */
static void enqueue_k(FloeSession *s, int k) {
  float v[2] = {(float)k, (float)-k};
  FloeTensor *a = f32v(2, v), *b = floe_tensor_scalar_i32(100 + k, NULL);
  FloeFeed f[2] = {{"a", a}, {"b", b}};
  run_ok(s, f, 2, NULL, 0, "enq", NULL);
  floe_tensor_release(a);
  floe_tensor_release(b);
}

static int32_t queue_size(FloeSession *s) {
  const char *f = "size";
  FloeTensor *t = NULL;
  run_ok(s, NULL, 0, &f, 1, NULL, &t);
  int32_t n = scalar_i32(t);
  floe_tensor_release(t);
  return n;
}

/* Dequeues one element and checks it is element k. */
static void dequeue_expect(FloeSession *s, int k) {
  const char *f[2] = {"deq:0", "deq:1"};
  FloeTensor *out[2] = {0};
  run_ok(s, NULL, 0, f, 2, NULL, out);
  const float *a = floe_tensor_data(out[0]);
  ck_assert_int_eq(floe_tensor_rank(out[0]), 1);
  ck_assert_int_eq(floe_tensor_dim(out[0], 0), 2);
  ck_assert_msg(a[0] == (float)k && a[1] == (float)-k, "element [%g, %g], want %d", a[0], a[1], k);
  ck_assert_int_eq(scalar_i32(out[1]), 100 + k);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
}

/* Runs a batch dequeue (deqm or upto) of n and checks it gives elements first..first+count-1. */
static void batch_expect(FloeSession *s, const char *node, int n, int first, int count) {
  char f0[32], f1[32];
  snprintf(f0, sizeof f0, "%s:0", node);
  snprintf(f1, sizeof f1, "%s:1", node);
  const char *f[2] = {f0, f1};
  FloeTensor *nt = floe_tensor_scalar_i32(n, NULL), *out[2] = {0};
  FloeFeed feed = {"n", nt};
  run_ok(s, &feed, 1, f, 2, NULL, out);
  ck_assert_int_eq(floe_tensor_rank(out[0]), 2);
  ck_assert_int_eq(floe_tensor_dim(out[0], 0), count);
  ck_assert_int_eq(floe_tensor_dim(out[0], 1), 2);
  ck_assert_int_eq(floe_tensor_rank(out[1]), 1);
  ck_assert_int_eq(floe_tensor_dim(out[1], 0), count);
  const float *a = floe_tensor_data(out[0]);
  const int32_t *b = floe_tensor_data(out[1]);
  for (int i = 0; i < count; i++) {
    ck_assert_msg(a[2 * i] == (float)(first + i) && a[2 * i + 1] == (float)-(first + i),
                  "row %d is [%g, %g], want element %d", i, a[2 * i], a[2 * i + 1], first + i);
    ck_assert_int_eq(b[i], 100 + first + i);
  }
  floe_tensor_release(nt);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
}

static void batch_fails(FloeSession *s, const char *node, int n, floe_code code,
                        const char *frag) {
  char f0[32];
  snprintf(f0, sizeof f0, "%s:0", node);
  const char *f = f0;
  FloeTensor *nt = floe_tensor_scalar_i32(n, NULL);
  FloeFeed feed = {"n", nt};
  run_fails(s, &feed, 1, &f, 1, NULL, code, frag);
  floe_tensor_release(nt);
}

/* A run on another thread. */
typedef struct Bg {
  pthread_t th;
  FloeSession *s;
  const char *target;        /* or NULL */
  const char *fetch[2];      /* up to two fetches, or NULL */
  int nfetch;
  FloeFeed feeds[2];
  int nfeeds;
  FloeTensor *out[2];
  floe_code rc;
  char msg[512];
  atomic_bool finished;
} Bg;

static void *bg_main(void *arg) {
  Bg *b = arg;
  FloeStatus *st = floe_status_new();
  b->rc = run(b->s, b->feeds, b->nfeeds, b->fetch, b->nfetch, b->target, b->out, st);
  snprintf(b->msg, sizeof b->msg, "%s", floe_status_message(st));
  floe_status_free(st);
  atomic_store(&b->finished, true);
  return NULL;
}

static void bg_start(Bg *b) {
  atomic_init(&b->finished, false);
  ck_assert_int_eq(pthread_create(&b->th, NULL, bg_main, b), 0);
}

/* True when the background run is still blocked after ms milliseconds. */
static bool still_blocked(Bg *b, int ms) {
  usleep((useconds_t)ms * 1000);
  return !atomic_load(&b->finished);
}

static void bg_join(Bg *b) {
  pthread_join(b->th, NULL);
  for (int i = 0; i < b->nfeeds; i++) floe_tensor_release(b->feeds[i].value);
}

/* ---- FIFO basics ---- */

START_TEST(fifo_order_and_state_across_runs) {
  FloeGraph *g = queue_graph(NULL);
  FloeSession *s = session_new(g);
  for (int k = 0; k < 5; k++) enqueue_k(s, k);
  ck_assert_int_eq(queue_size(s), 5);
  dequeue_expect(s, 0);
  dequeue_expect(s, 1);
  ck_assert_int_eq(queue_size(s), 3);
  batch_expect(s, "deqm", 3, 2, 3);
  ck_assert_int_eq(queue_size(s), 0);
  /* dequeue_many(0): an empty batch of the element shape, at once. */
  batch_expect(s, "deqm", 0, 0, 0);
  /* enqueue_many: rows become elements, in order. */
  float am[8] = {5, -5, 6, -6, 7, -7, 8, -8};
  int32_t bm[4] = {105, 106, 107, 108};
  int64_t d42[2] = {4, 2}, d4 = 4;
  FloeTensor *ta = floe_tensor_from_data(FLOE_F32, 2, d42, am, sizeof am, NULL);
  FloeTensor *tb = floe_tensor_from_data(FLOE_I32, 1, &d4, bm, sizeof bm, NULL);
  FloeFeed f[2] = {{"am", ta}, {"bm", tb}};
  run_ok(s, f, 2, NULL, 0, "enqm", NULL);
  ck_assert_int_eq(queue_size(s), 4);
  batch_expect(s, "upto", 3, 5, 3);
  dequeue_expect(s, 8);
  /* The fed tensors were not modified by the queue. */
  ck_assert_float_eq(((float *)floe_tensor_data(ta))[2], 6.0f);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  /* A second session has its own queue. */
  FloeSession *s2 = session_new(g);
  ck_assert_int_eq(queue_size(s2), 0);
  enqueue_k(s, 9);
  ck_assert_int_eq(queue_size(s2), 0);
  ck_assert_int_eq(queue_size(s), 1);
  floe_session_free(s2);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(closed_queue_semantics) {
  FloeGraph *g = queue_graph(NULL);
  FloeSession *s = session_new(g);
  enqueue_k(s, 0);
  enqueue_k(s, 1);
  const char *closed = "closed";
  FloeTensor *t = NULL;
  run_ok(s, NULL, 0, &closed, 1, NULL, &t);
  ck_assert_int_eq(*(uint8_t *)floe_tensor_data(t), 0);
  floe_tensor_release(t);
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  run_ok(s, NULL, 0, &closed, 1, NULL, &t);
  ck_assert_int_eq(*(uint8_t *)floe_tensor_data(t), 1);
  floe_tensor_release(t);
  /* Enqueue after close: cancelled, naming the queue; nothing goes in. */
  float v[2] = {9, -9};
  FloeTensor *a = f32v(2, v), *b = floe_tensor_scalar_i32(109, NULL);
  FloeFeed f[2] = {{"a", a}, {"b", b}};
  run_fails(s, f, 2, NULL, 0, "enq", FLOE_CANCELLED, "queue 'q' is closed");
  ck_assert_int_eq(queue_size(s), 2);
  /* A batch larger than what is left fails at once, and takes nothing. */
  batch_fails(s, "deqm", 5, FLOE_OUT_OF_RANGE, "queue 'q' is closed and has 2 elements, 5 requested");
  ck_assert_int_eq(queue_size(s), 2);
  /* up_to gives what remains; then out of range. */
  batch_expect(s, "upto", 5, 0, 2);
  batch_fails(s, "upto", 5, FLOE_OUT_OF_RANGE, "queue 'q' is closed and has 0 elements, 5 requested");
  const char *deq = "deq:0";
  run_fails(s, NULL, 0, &deq, 1, NULL, FLOE_OUT_OF_RANGE, "is closed and has 0 elements, 1 requested");
  /* Closing again is harmless. */
  run_ok(s, NULL, 0, NULL, 0, "close_cancel", NULL);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Errors found while building, when the queue's node is in sight. */
START_TEST(mismatches_refused_when_building) {
  int64_t two = 2, three = 3;
  FloeDType dts[2] = {FLOE_F32, FLOE_I32};
  FloeShape shapes[2] = {floe_shape_make(1, &two), floe_shape_scalar()};
  struct {
    int kind; /* 0 dtype, 1 shape, 2 count, 3 many scalar, 4 timeout, 5 dequeue count */
    const char *frag;
  } cases[] = {
      {0, "queue 'q': component 1 is f32, expected i32"},
      {1, "queue 'q': component 0 has shape [3], expected [2]"},
      {2, "queue 'q' has 2 components; got 1"},
      {3, "component 0 is a scalar: enqueue_many takes [n, ...] components"},
      {4, "timeout_ms = 10: only -1 is implemented"},
      {5, "queue 'q' has 2 components; room for 1 outputs was given"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput q = floe_queue(g, "q", dts, shapes, 2, NULL);
    FloeOutput a2 = floe_placeholder(g, "a2", FLOE_F32, floe_shape_make(1, &two));
    FloeOutput a3 = floe_placeholder(g, "a3", FLOE_F32, floe_shape_make(1, &three));
    FloeOutput bi = floe_placeholder(g, "bi", FLOE_I32, floe_shape_scalar());
    FloeOutput bf = floe_placeholder(g, "bf", FLOE_F32, floe_shape_scalar());
    FloeOutput out[2];
    switch (cases[i].kind) {
      case 0: floe_queue_enqueue(g, "e", q, (FloeOutput[]){a2, bf}, 2); break;
      case 1: floe_queue_enqueue(g, "e", q, (FloeOutput[]){a3, bi}, 2); break;
      case 2: floe_queue_enqueue(g, "e", q, (FloeOutput[]){a2}, 1); break;
      case 3: floe_queue_enqueue_many(g, "e", q, (FloeOutput[]){bf, bi}, 2); break;
      case 4: {
        FloeNodeBuilder *b = floe_node_begin(g, "QueueDequeueV2", "d");
        floe_node_add_input(b, q);
        floe_node_set_attr_type_list(b, "component_types", dts, 2);
        floe_node_set_attr_int(b, "timeout_ms", 10);
        floe_node_finish(b);
        break;
      }
      case 5: floe_queue_dequeue(g, "d", q, out, 1); break;
    }
    ck_assert_int_ne(floe_graph_status(g), FLOE_OK);
    ck_assert_msg(strstr(floe_graph_error(g, NULL), cases[i].frag), "case %zu: '%s' lacks '%s'",
                  i, floe_graph_error(g, NULL), cases[i].frag);
    floe_graph_free(g);
  }
  /* Queue definitions. */
  struct {
    FloeQueueKind kind;
    int with_shapes, unknown_dim;
    int64_t capacity, min_after;
    const char *frag;
  } bad[] = {
      {FLOE_QUEUE_FIFO, 1, 1, -1, 0, "shapes[0] = [?] is not fully defined"},
      {FLOE_QUEUE_PADDING_FIFO, 0, 0, -1, 0, "needs one shape per component"},
      {FLOE_QUEUE_FIFO, 1, 0, 0, 0, "capacity 0: give a size >= 1"},
      {FLOE_QUEUE_RANDOM_SHUFFLE, 1, 0, 4, 4, "min_after_dequeue 4 must be >= 0 and below the capacity 4"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    FloeGraph *g = floe_graph_new();
    FloeQueueOptions o;
    floe_queue_options_init(&o);
    o.kind = bad[i].kind;
    o.capacity = bad[i].capacity;
    o.min_after_dequeue = bad[i].min_after;
    int64_t d = bad[i].unknown_dim ? -1 : 2;
    FloeShape sh = floe_shape_make(1, &d);
    floe_queue(g, "q", dts, bad[i].with_shapes ? &sh : NULL, 1, &o);
    ck_assert_msg(strstr(floe_graph_error(g, NULL), bad[i].frag), "queue case %zu: '%s'", i,
                  floe_graph_error(g, NULL));
    floe_graph_free(g);
  }
}
END_TEST

/* The same through a forwarded handle: the kernels refuse, and the queue is untouched. */
START_TEST(mismatches_refused_when_running) {
  FloeGraph *g = queue_graph(NULL);
  FloeNodeBuilder *b = floe_node_begin(g, "TestForwardHandle", "h");
  floe_node_add_input(b, floe_out(floe_graph_find(g, "q"), 0));
  FloeOutput h = floe_out(floe_node_finish(b), 0);
  int64_t two = 2, three = 3, any2[2] = {-1, 2}, any = -1;
  FloeOutput a3 = floe_placeholder(g, "a3", FLOE_F32, floe_shape_make(1, &three));
  FloeOutput bf = floe_placeholder(g, "bf", FLOE_F32, floe_shape_scalar());
  FloeOutput a2 = floe_out(floe_graph_find(g, "a"), 0), bi = floe_out(floe_graph_find(g, "b"), 0);
  floe_queue_enqueue(g, "bad_dtype", h, (FloeOutput[]){a2, bf}, 2);
  floe_queue_enqueue(g, "bad_shape", h, (FloeOutput[]){a3, bi}, 2);
  floe_queue_enqueue(g, "bad_count", h, (FloeOutput[]){a2}, 1);
  FloeOutput am = floe_placeholder(g, "am3", FLOE_F32, floe_shape_make(2, any2));
  FloeOutput bm = floe_placeholder(g, "bm2", FLOE_I32, floe_shape_make(1, &any));
  floe_queue_enqueue_many(g, "bad_rows", h, (FloeOutput[]){am, bm}, 2);
  /* A dequeue node whose types disagree with the queue's (built by hand). */
  b = floe_node_begin(g, "QueueDequeueV2", "bad_deq");
  floe_node_add_input(b, h);
  floe_node_set_attr_type_list(b, "component_types", (FloeDType[]){FLOE_F32, FLOE_F32}, 2);
  floe_node_finish(b);
  (void)two;
  FloeSession *s = session_new(g);
  enqueue_k(s, 0);
  float v3[3] = {1, 2, 3}, v2[2] = {4, 5};
  FloeTensor *t3 = f32v(3, v3), *t2 = f32v(2, v2), *f = floe_tensor_new(FLOE_F32, 0, NULL, NULL);
  FloeTensor *i = floe_tensor_scalar_i32(7, NULL);
  FloeFeed fd[2] = {{"a", t2}, {"bf", f}};
  run_fails(s, fd, 2, NULL, 0, "bad_dtype", FLOE_INVALID_ARGUMENT,
            "queue 'q': component 1 is f32, expected i32");
  FloeFeed fs[2] = {{"a3", t3}, {"b", i}};
  run_fails(s, fs, 2, NULL, 0, "bad_shape", FLOE_INVALID_ARGUMENT,
            "queue 'q': component 0 has shape [3], expected [2]");
  run_fails(s, fd, 1, NULL, 0, "bad_count", FLOE_INVALID_ARGUMENT, "queue 'q' has 2 components; got 1");
  int64_t d32[2] = {3, 2}, d2 = 2;
  FloeTensor *m = floe_tensor_new(FLOE_F32, 2, d32, NULL), *n = floe_tensor_new(FLOE_I32, 1, &d2, NULL);
  FloeFeed fm[2] = {{"am3", m}, {"bm2", n}};
  run_fails(s, fm, 2, NULL, 0, "bad_rows", FLOE_INVALID_ARGUMENT,
            "component 1 has 2 elements (shape [2]), component 0 has 3");
  const char *bd = "bad_deq:0";
  run_fails(s, NULL, 0, &bd, 1, NULL, FLOE_INVALID_ARGUMENT,
            "queue 'q': component 1 is i32, this node's component_types say f32");
  /* Untouched: the one good element is there, alone. */
  ck_assert_int_eq(queue_size(s), 1);
  dequeue_expect(s, 0);
  ck_assert_int_eq(queue_size(s), 0);
  /* Batch sizes: negative, and larger than a bounded queue could ever hold. */
  batch_fails(s, "deqm", -1, FLOE_INVALID_ARGUMENT, "n = -1; dequeue 0 or more elements");
  floe_session_free(s);
  floe_graph_free(g);
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 3;
  g = queue_graph(&o);
  s = session_new(g);
  batch_fails(s, "deqm", 4, FLOE_INVALID_ARGUMENT, "a dequeue of 4 could never complete: the capacity is 3");
  floe_session_free(s);
  floe_graph_free(g);
  /* Without shapes, batches are refused (elements may differ) but single ones work. */
  g = floe_graph_new();
  FloeOutput q = floe_queue(g, "q", (FloeDType[]){FLOE_F32}, NULL, 1, NULL);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown());
  floe_queue_enqueue(g, "enq", q, &x, 1);
  FloeOutput out;
  floe_queue_dequeue(g, "deq", q, &out, 1);
  floe_queue_dequeue_many(g, "deqm", q, const_i32(g, "two", 2), &out, 1);
  s = session_new(g);
  FloeFeed fx = {"x", t3};
  run_ok(s, &fx, 1, NULL, 0, "enq", NULL);
  fx.value = t2;
  run_ok(s, &fx, 1, NULL, 0, "enq", NULL);
  const char *fm0 = "deqm:0";
  run_fails(s, NULL, 0, &fm0, 1, NULL, FLOE_INVALID_ARGUMENT, "was made without shapes");
  const char *d0 = "deq:0";
  FloeTensor *got = NULL;
  run_ok(s, NULL, 0, &d0, 1, NULL, &got);
  ck_assert_int_eq(floe_tensor_dim(got, 0), 3);
  floe_tensor_release(got);
  floe_session_free(s);
  floe_graph_free(g);
  floe_tensor_release(t3);
  floe_tensor_release(t2);
  floe_tensor_release(f);
  floe_tensor_release(i);
  floe_tensor_release(m);
  floe_tensor_release(n);
}
END_TEST

START_TEST(shared_names_and_kinds) {
  FloeGraph *g = floe_graph_new();
  int64_t two = 2;
  FloeShape sh = floe_shape_make(1, &two);
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.shared_name = "shared";
  FloeOutput q1 = floe_queue(g, "q1", (FloeDType[]){FLOE_F32}, &sh, 1, &o);
  FloeOutput q2 = floe_queue(g, "q2", (FloeDType[]){FLOE_F32}, &sh, 1, &o);
  o.capacity = 5;
  floe_queue(g, "q3", (FloeDType[]){FLOE_F32}, &sh, 1, &o);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, sh);
  floe_queue_enqueue(g, "enq1", q1, &x, 1);
  floe_queue_size(g, "size2", q2);
  FloeSession *s = session_new(g);
  float v[2] = {1, 2};
  FloeTensor *t = f32v(2, v);
  FloeFeed f = {"x", t};
  run_ok(s, &f, 1, NULL, 0, "enq1", NULL);
  run_ok(s, &f, 1, NULL, 0, "enq1", NULL);
  const char *sz = "size2";
  FloeTensor *n = NULL;
  run_ok(s, NULL, 0, &sz, 1, NULL, &n);
  ck_assert_int_eq(scalar_i32(n), 2); /* q2 is q1's queue */
  floe_tensor_release(n);
  const char *q3 = "q3";
  run_fails(s, NULL, 0, &q3, 1, NULL, FLOE_INVALID_ARGUMENT,
            "queue 'shared' (container '') exists as a FIFOQueue of 1 components with other");
  floe_tensor_release(t);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- blocking across threads ---- */

START_TEST(full_queue_blocks_enqueue_until_a_dequeue) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 2;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  enqueue_k(s, 0);
  enqueue_k(s, 1);
  float v[2] = {2, -2};
  Bg b = {.s = s, .target = "enq", .nfeeds = 2};
  b.feeds[0] = (FloeFeed){"a", f32v(2, v)};
  b.feeds[1] = (FloeFeed){"b", floe_tensor_scalar_i32(102, NULL)};
  bg_start(&b);
  ck_assert_msg(still_blocked(&b, 100), "enqueue into a full queue returned: %s", b.msg);
  ck_assert_int_eq(queue_size(s), 2);
  dequeue_expect(s, 0);
  bg_join(&b);
  ck_assert_msg(b.rc == FLOE_OK, "%s", b.msg);
  ck_assert_int_eq(queue_size(s), 2);
  dequeue_expect(s, 1);
  dequeue_expect(s, 2);

  /* enqueue_many of 5 into capacity 2 goes in over several waits, in order. */
  float am[10];
  int32_t bm[5];
  for (int k = 0; k < 5; k++) {
    am[2 * k] = (float)(10 + k);
    am[2 * k + 1] = (float)-(10 + k);
    bm[k] = 110 + k;
  }
  int64_t d52[2] = {5, 2}, d5 = 5;
  Bg m = {.s = s, .target = "enqm", .nfeeds = 2};
  m.feeds[0] = (FloeFeed){"am", floe_tensor_from_data(FLOE_F32, 2, d52, am, sizeof am, NULL)};
  m.feeds[1] = (FloeFeed){"bm", floe_tensor_from_data(FLOE_I32, 1, &d5, bm, sizeof bm, NULL)};
  bg_start(&m);
  for (int k = 0; k < 5; k++) dequeue_expect(s, 10 + k);
  bg_join(&m);
  ck_assert_msg(m.rc == FLOE_OK, "%s", m.msg);
  ck_assert_int_eq(queue_size(s), 0);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(empty_queue_blocks_dequeue_until_an_enqueue) {
  FloeGraph *g = queue_graph(NULL);
  FloeSession *s = session_new(g);
  Bg b = {.s = s, .fetch = {"deq:0", "deq:1"}, .nfetch = 2};
  bg_start(&b);
  ck_assert_msg(still_blocked(&b, 100), "dequeue from an empty queue returned: %s", b.msg);
  enqueue_k(s, 7);
  bg_join(&b);
  ck_assert_msg(b.rc == FLOE_OK, "%s", b.msg);
  ck_assert_float_eq(((float *)floe_tensor_data(b.out[0]))[0], 7.0f);
  ck_assert_int_eq(scalar_i32(b.out[1]), 107);
  floe_tensor_release(b.out[0]);
  floe_tensor_release(b.out[1]);

  /* A waiting dequeue_many(3) holds a later dequeue(1) back (arrival order), and is served
   * first once three elements are there. */
  Bg many = {.s = s, .fetch = {"deqm:1"}, .nfetch = 1, .nfeeds = 1};
  many.feeds[0] = (FloeFeed){"n", floe_tensor_scalar_i32(3, NULL)};
  bg_start(&many);
  ck_assert(still_blocked(&many, 50));
  Bg one = {.s = s, .fetch = {"deq:1"}, .nfetch = 1};
  bg_start(&one);
  enqueue_k(s, 0);
  ck_assert_msg(still_blocked(&one, 50), "dequeue(1) overtook a waiting dequeue_many(3)");
  enqueue_k(s, 1);
  enqueue_k(s, 2);
  enqueue_k(s, 3);
  bg_join(&many);
  bg_join(&one);
  ck_assert_msg(many.rc == FLOE_OK && one.rc == FLOE_OK, "%s / %s", many.msg, one.msg);
  const int32_t *mb = floe_tensor_data(many.out[0]);
  ck_assert(mb[0] == 100 && mb[1] == 101 && mb[2] == 102);
  ck_assert_int_eq(scalar_i32(one.out[0]), 103);
  floe_tensor_release(many.out[0]);
  floe_tensor_release(one.out[0]);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(close_wakes_waiters_with_the_right_codes) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 2;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  /* A dequeue_many(2) waits on one element... */
  enqueue_k(s, 0);
  Bg many = {.s = s, .fetch = {"deqm:1"}, .nfetch = 1, .nfeeds = 1};
  many.feeds[0] = (FloeFeed){"n", floe_tensor_scalar_i32(2, NULL)};
  bg_start(&many);
  ck_assert(still_blocked(&many, 50));
  /* ...close: the first cannot complete (out of range), and takes nothing. */
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  bg_join(&many);
  ck_assert_int_eq(many.rc, FLOE_OUT_OF_RANGE);
  ck_assert_msg(strstr(many.msg, "queue 'q' is closed and has 1 element, 2 requested"), "%s", many.msg);
  batch_expect(s, "upto", 2, 0, 1);
  floe_session_free(s);

  /* An up_to blocked on one element gets it when the queue closes. */
  s = session_new(g);
  enqueue_k(s, 4);
  Bg up = {.s = s, .fetch = {"upto:1"}, .nfetch = 1, .nfeeds = 1};
  up.feeds[0] = (FloeFeed){"n", floe_tensor_scalar_i32(2, NULL)};
  bg_start(&up);
  ck_assert(still_blocked(&up, 50));
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  bg_join(&up);
  ck_assert_msg(up.rc == FLOE_OK, "%s", up.msg);
  ck_assert_int_eq(floe_tensor_dim(up.out[0], 0), 1);
  ck_assert_int_eq(((int32_t *)floe_tensor_data(up.out[0]))[0], 104);
  floe_tensor_release(up.out[0]);
  floe_session_free(s);

  /* A blocked enqueue survives a plain close, and goes in when room frees up... */
  s = session_new(g);
  enqueue_k(s, 0);
  enqueue_k(s, 1);
  float v[2] = {2, -2};
  Bg e = {.s = s, .target = "enq", .nfeeds = 2};
  e.feeds[0] = (FloeFeed){"a", f32v(2, v)};
  e.feeds[1] = (FloeFeed){"b", floe_tensor_scalar_i32(102, NULL)};
  bg_start(&e);
  ck_assert(still_blocked(&e, 50));
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  ck_assert_msg(still_blocked(&e, 50), "a plain close failed a pending enqueue: %s", e.msg);
  dequeue_expect(s, 0);
  bg_join(&e);
  ck_assert_msg(e.rc == FLOE_OK, "%s", e.msg);
  dequeue_expect(s, 1);
  dequeue_expect(s, 2);
  floe_session_free(s);

  /* ...but close with cancel_pending_enqueues fails it, and keeps what is in. */
  s = session_new(g);
  enqueue_k(s, 0);
  enqueue_k(s, 1);
  Bg c = {.s = s, .target = "enq", .nfeeds = 2};
  c.feeds[0] = (FloeFeed){"a", f32v(2, v)};
  c.feeds[1] = (FloeFeed){"b", floe_tensor_scalar_i32(102, NULL)};
  bg_start(&c);
  ck_assert(still_blocked(&c, 50));
  run_ok(s, NULL, 0, NULL, 0, "close_cancel", NULL);
  bg_join(&c);
  ck_assert_int_eq(c.rc, FLOE_CANCELLED);
  ck_assert_msg(strstr(c.msg, "queue 'q' was closed with cancel_pending_enqueues"), "%s", c.msg);
  batch_expect(s, "upto", 2, 0, 2);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Another node of the step fails while the dequeue waits: the step is cancelled, the
 * dequeue fails with it, and it took no element. */
START_TEST(cancelled_step_fails_a_blocked_dequeue) {
  FloeGraph *g = queue_graph(NULL);
  FloeNodeBuilder *b = floe_node_begin(g, "TestSleepFail", "fail");
  floe_node_set_attr_int(b, "ms", 100);
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  const char *fetch = "deq:0";
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  double t0 = now_s();
  const char *target = "fail";
  floe_code rc = floe_session_run(s, NULL, 0, &fetch, 1, &target, 1, &out, st);
  double took = now_s() - t0;
  ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "node 'fail' (TestSleepFail): boom"), "%s",
                floe_status_message(st));
  ck_assert_msg(took < 5.0, "the cancelled step took %.1f s", took);
  /* No waiter was left behind: the next element goes to the next dequeue. */
  enqueue_k(s, 3);
  dequeue_expect(s, 3);
  /* Cancelled before it could wait (the failure comes first): the same. */
  b = floe_node_begin(g, "TestSleepFail", "fail_now");
  floe_node_finish(b);
  floe_session_free(s);
  s = session_new(g);
  target = "fail_now";
  for (int i = 0; i < 20; i++) {
    ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, &target, 1, &out, st),
                     FLOE_INVALID_ARGUMENT);
  }
  enqueue_k(s, 4);
  dequeue_expect(s, 4);
  ck_assert_int_eq(queue_size(s), 0);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* floe__resources_close_all (what session close calls) fails every waiter and every later
 * operation with cancelled. */
START_TEST(closing_the_resources_wakes_everything) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 1;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  enqueue_k(s, 0);
  float v[2] = {1, -1};
  Bg e = {.s = s, .target = "enq", .nfeeds = 2};
  e.feeds[0] = (FloeFeed){"a", f32v(2, v)};
  e.feeds[1] = (FloeFeed){"b", floe_tensor_scalar_i32(101, NULL)};
  bg_start(&e);
  ck_assert(still_blocked(&e, 50));
  floe__resources_close_all(floe__session_resources(s));
  bg_join(&e);
  ck_assert_int_eq(e.rc, FLOE_CANCELLED);
  ck_assert_msg(strstr(e.msg, "queue 'q' was shut down"), "%s", e.msg);
  const char *d = "deq:0";
  run_fails(s, NULL, 0, &d, 1, NULL, FLOE_CANCELLED, "queue 'q' was shut down");
  floe_session_free(s);

  s = session_new(g);
  Bg w = {.s = s, .fetch = {"deq:0"}, .nfetch = 1};
  bg_start(&w);
  ck_assert(still_blocked(&w, 50));
  floe__resources_close_all(floe__session_resources(s));
  bg_join(&w);
  ck_assert_int_eq(w.rc, FLOE_CANCELLED);
  ck_assert_msg(strstr(w.msg, "queue 'q' was shut down"), "%s", w.msg);
  floe_session_free(s);

  /* A queue made after the close starts shut down. */
  s = session_new(g);
  floe__resources_close_all(floe__session_resources(s));
  FloeTensor *a = f32v(2, v), *bt = floe_tensor_scalar_i32(1, NULL);
  FloeFeed f[2] = {{"a", a}, {"b", bt}};
  run_fails(s, f, 2, NULL, 0, "enq", FLOE_CANCELLED, "queue 'q' was shut down");
  floe_tensor_release(a);
  floe_tensor_release(bt);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* floe_session_close (another thread) ends a run blocked in a dequeue; later runs are
 * refused. */
START_TEST(session_close_unblocks_a_blocked_dequeue) {
  FloeGraph *g = queue_graph(NULL);
  FloeSession *s = session_new(g);
  Bg b = {.s = s, .fetch = {"deq:0", "deq:1"}, .nfetch = 2};
  bg_start(&b);
  ck_assert(still_blocked(&b, 100));
  floe_session_close(s);
  bg_join(&b);
  ck_assert_int_eq(b.rc, FLOE_CANCELLED);
  const char *f = "size";
  run_fails(s, NULL, 0, &f, 1, NULL, FLOE_CANCELLED, "the session was closed");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A run's timeout and floe_session_cancel end blocked operations, and leave no waiter. */
START_TEST(timeouts_and_cancel_end_blocked_operations) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 1;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = 100;
  const char *f = "deq:1";
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  double t0 = now_s();
  floe_code rc = floe_session_run_opts(s, &ro, NULL, 0, &f, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == FLOE_DEADLINE_EXCEEDED, "%s: %s", floe_code_name(rc), floe_status_message(st));
  ck_assert(now_s() - t0 < 5.0);
  enqueue_k(s, 1);
  dequeue_expect(s, 1); /* the timed-out dequeue took nothing */
  /* A blocked enqueue on a full queue, cancelled with every run of the session. */
  enqueue_k(s, 2);
  float v[2] = {3, -3};
  Bg e = {.s = s, .target = "enq", .nfeeds = 2};
  e.feeds[0] = (FloeFeed){"a", f32v(2, v)};
  e.feeds[1] = (FloeFeed){"b", floe_tensor_scalar_i32(103, NULL)};
  bg_start(&e);
  ck_assert(still_blocked(&e, 50));
  floe_session_cancel(s);
  bg_join(&e);
  ck_assert_int_eq(e.rc, FLOE_CANCELLED);
  ck_assert_int_eq(queue_size(s), 1);
  dequeue_expect(s, 2);
  ck_assert_int_eq(queue_size(s), 0);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Running out of memory at each allocation in turn: a clean error every time, a batch
 * dequeue that fails takes nothing, and the call works once memory is back. */
START_TEST(allocation_failures) {
  FloeGraph *g = queue_graph(NULL);
  FloeSession *s = session_new(g);
  for (int k = 0; k < 3; k++) enqueue_k(s, k);
  batch_expect(s, "deqm", 1, 0, 1); /* the executors exist before counting starts */
  float am[8] = {3, -3, 4, -4, 5, -5, 6, -6};
  int32_t bm[4] = {103, 104, 105, 106};
  int64_t d42[2] = {4, 2}, d4 = 4;
  FloeTensor *ta = floe_tensor_from_data(FLOE_F32, 2, d42, am, sizeof am, NULL);
  FloeTensor *tb = floe_tensor_from_data(FLOE_I32, 1, &d4, bm, sizeof bm, NULL);
  FloeFeed f[2] = {{"am", ta}, {"bm", tb}};
  FloeStatus *st = floe_status_new();
  const char *target = "enqm";
  floe_code rc = FLOE_NO_MEMORY;
  long n;
  for (n = 1; n < 10000 && rc != FLOE_OK; n++) {
    int32_t before = queue_size(s);
    floe_test_fail_alloc_after(n);
    rc = floe_session_run(s, f, 2, NULL, 0, &target, 1, NULL, st);
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK) {
      ck_assert_msg(rc == FLOE_NO_MEMORY || rc == FLOE_RESOURCE_EXHAUSTED, "n=%ld: %s", n,
                    floe_status_message(st));
      /* Whole elements only: some may have gone in, never a part of one. */
      int32_t after = queue_size(s);
      ck_assert(after >= before && after <= before + 4);
    }
  }
  ck_assert_int_eq(rc, FLOE_OK);
  ck_assert_int_gt(n, 2);
  int32_t size = queue_size(s);
  ck_assert_int_ge(size, 4);
  /* A batch dequeue that runs out of memory takes nothing. */
  FloeTensor *two = floe_tensor_scalar_i32(2, NULL);
  FloeFeed fn = {"n", two};
  const char *fetch[2] = {"deqm:0", "deqm:1"};
  rc = FLOE_NO_MEMORY;
  for (n = 1; n < 10000 && rc != FLOE_OK; n++) {
    FloeTensor *out[2] = {0};
    floe_test_fail_alloc_after(n);
    rc = floe_session_run(s, &fn, 1, fetch, 2, NULL, 0, out, st);
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK) {
      ck_assert_msg(rc == FLOE_NO_MEMORY || rc == FLOE_RESOURCE_EXHAUSTED, "n=%ld: %s", n,
                    floe_status_message(st));
      ck_assert_int_eq(queue_size(s), size);
    } else {
      ck_assert_int_eq(floe_tensor_dim(out[0], 0), 2);
      floe_tensor_release(out[0]);
      floe_tensor_release(out[1]);
    }
  }
  ck_assert_int_eq(rc, FLOE_OK);
  ck_assert_int_eq(queue_size(s), size - 2);
  floe_tensor_release(two);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- random shuffle and padding ---- */

/* Enqueues 0..n-1 (one enqueue_many) into shuffle queue `name` and dequeues them all after a
 * close; returns the order (caller frees). */
static int32_t *shuffle_order(int64_t seed, int n, const char *shared) {
  FloeGraph *g = floe_graph_new();
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.kind = FLOE_QUEUE_RANDOM_SHUFFLE;
  o.seed = seed;
  o.min_after_dequeue = 3;
  o.shared_name = shared;
  FloeShape sc = floe_shape_scalar();
  FloeOutput q = floe_queue(g, "q", (FloeDType[]){FLOE_I32}, &sc, 1, &o);
  int64_t dn = n;
  int32_t *vals = malloc((size_t)n * sizeof *vals);
  for (int i = 0; i < n; i++) vals[i] = i;
  FloeTensor *t = floe_tensor_from_data(FLOE_I32, 1, &dn, vals, (size_t)n * 4, NULL);
  FloeOutput c = floe_const(g, "vals", t);
  floe_tensor_release(t);
  floe_queue_enqueue_many(g, "enq", q, &c, 1);
  FloeOutput out;
  floe_queue_dequeue(g, "deq", q, &out, 1);
  floe_queue_close(g, "close", q, 0);
  FloeSession *s = session_new(g);
  run_ok(s, NULL, 0, NULL, 0, "enq", NULL);
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  for (int i = 0; i < n; i++) {
    const char *f = "deq";
    FloeTensor *v = NULL;
    run_ok(s, NULL, 0, &f, 1, NULL, &v);
    vals[i] = scalar_i32(v);
    floe_tensor_release(v);
  }
  run_fails(s, NULL, 0, (const char *[]){"deq"}, 1, NULL, FLOE_OUT_OF_RANGE, "is closed and has 0");
  floe_session_free(s);
  floe_graph_free(g);
  return vals;
}

START_TEST(random_shuffle_is_a_seeded_permutation) {
  enum { N = 64 };
  int32_t *a = shuffle_order(42, N, NULL), *b = shuffle_order(42, N, "other"),
          *c = shuffle_order(43, N, NULL);
  bool seen[N] = {false};
  int same_as_identity = 0, same_ab = 0, same_ac = 0;
  for (int i = 0; i < N; i++) {
    ck_assert(a[i] >= 0 && a[i] < N && !seen[a[i]]);
    seen[a[i]] = true;
    same_as_identity += a[i] == i;
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  ck_assert_int_eq(same_ab, N);          /* same seed, same operations: same order */
  ck_assert_int_lt(same_as_identity, N / 4); /* shuffled */
  ck_assert_int_lt(same_ac, N / 4);      /* another seed: another order */
  free(a);
  free(b);
  free(c);
}
END_TEST

/* The first pick among 8 elements, over 400 seeds, is each element about 50 times: every
 * count within 20..80 (a binomial(400, 1/8) falls outside with probability < 1e-6). */
START_TEST(random_shuffle_first_pick_is_uniform) {
  FloeGraph *g = floe_graph_new();
  FloeShape sc = floe_shape_scalar();
  int64_t d8 = 8;
  int32_t vals[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  FloeTensor *t = floe_tensor_from_data(FLOE_I32, 1, &d8, vals, sizeof vals, NULL);
  FloeOutput c = floe_const(g, "vals", t);
  floe_tensor_release(t);
  enum { SEEDS = 400 };
  for (int k = 0; k < SEEDS; k++) {
    FloeQueueOptions o;
    floe_queue_options_init(&o);
    o.kind = FLOE_QUEUE_RANDOM_SHUFFLE;
    o.seed = 1000 + k;
    char name[32];
    snprintf(name, sizeof name, "q%d", k);
    FloeOutput q = floe_queue(g, name, (FloeDType[]){FLOE_I32}, &sc, 1, &o);
    snprintf(name, sizeof name, "enq%d", k);
    floe_queue_enqueue_many(g, name, q, &c, 1);
    FloeOutput out;
    snprintf(name, sizeof name, "deq%d", k);
    floe_queue_dequeue(g, name, q, &out, 1);
  }
  FloeSession *s = session_new(g);
  int count[8] = {0};
  for (int k = 0; k < SEEDS; k++) {
    char enq[32], deq[32];
    snprintf(enq, sizeof enq, "enq%d", k);
    snprintf(deq, sizeof deq, "deq%d", k);
    run_ok(s, NULL, 0, NULL, 0, enq, NULL);
    const char *f = deq;
    FloeTensor *v = NULL;
    run_ok(s, NULL, 0, &f, 1, NULL, &v);
    count[scalar_i32(v)]++;
    floe_tensor_release(v);
  }
  for (int i = 0; i < 8; i++)
    ck_assert_msg(count[i] >= 20 && count[i] <= 80, "element %d first %d times of %d", i,
                  count[i], SEEDS);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(random_shuffle_keeps_min_after_dequeue) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.kind = FLOE_QUEUE_RANDOM_SHUFFLE;
  o.min_after_dequeue = 3;
  o.capacity = 10;
  o.seed = 7;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  for (int k = 0; k < 3; k++) enqueue_k(s, k);
  Bg b = {.s = s, .fetch = {"deq:1"}, .nfetch = 1};
  bg_start(&b);
  ck_assert_msg(still_blocked(&b, 100), "dequeue with only min_after_dequeue elements returned");
  enqueue_k(s, 3);
  bg_join(&b);
  ck_assert_msg(b.rc == FLOE_OK, "%s", b.msg);
  int32_t first = scalar_i32(b.out[0]);
  ck_assert(first >= 100 && first <= 103);
  floe_tensor_release(b.out[0]);
  ck_assert_int_eq(queue_size(s), 3);
  /* dequeue_many(2) needs 2 + 3 elements; n > capacity - min_after never completes. */
  batch_fails(s, "deqm", 8, FLOE_INVALID_ARGUMENT, "min_after_dequeue keeps some back");
  /* Closed: min_after_dequeue no longer holds elements back. */
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  FloeTensor *nt = floe_tensor_scalar_i32(5, NULL), *out[2] = {0};
  FloeFeed f = {"n", nt};
  run_ok(s, &f, 1, (const char *[]){"upto:0", "upto:1"}, 2, NULL, out);
  ck_assert_int_eq(floe_tensor_dim(out[1], 0), 3);
  int32_t sum = first;
  for (int i = 0; i < 3; i++) {
    int32_t bv = ((int32_t *)floe_tensor_data(out[1]))[i];
    float av = ((float *)floe_tensor_data(out[0]))[2 * i];
    ck_assert_float_eq(av, (float)(bv - 100)); /* components stay together */
    sum += bv;
  }
  ck_assert_int_eq(sum, 100 + 101 + 102 + 103); /* each element exactly once */
  floe_tensor_release(nt);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(padding_fifo_pads_batches_with_zeros) {
  FloeGraph *g = floe_graph_new();
  int64_t anyd = -1, two[2] = {-1, 2};
  FloeShape shapes[2] = {floe_shape_make(1, &anyd), floe_shape_make(2, two)};
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.kind = FLOE_QUEUE_PADDING_FIFO;
  FloeOutput q = floe_queue(g, "q", (FloeDType[]){FLOE_F32, FLOE_I32}, shapes, 2, &o);
  FloeOutput in[2] = {floe_placeholder(g, "a", FLOE_F32, shapes[0]),
                      floe_placeholder(g, "b", FLOE_I32, shapes[1])};
  floe_queue_enqueue(g, "enq", q, in, 2);
  FloeOutput out[2];
  floe_queue_dequeue_many(g, "deqm", q, const_i32(g, "three", 3), out, 2);
  FloeNode *d = floe_queue_dequeue(g, "deq", q, out, 2);
  ck_assert_ptr_nonnull(d);
  /* Static shapes: [3, ?] and [3, ?, 2]. */
  FloeShape s0 = floe_node_output_shape(floe_graph_find(g, "deqm"), 0);
  FloeShape s1 = floe_node_output_shape(floe_graph_find(g, "deqm"), 1);
  ck_assert(s0.rank == 2 && s0.dims[0] == 3 && s0.dims[1] == -1);
  ck_assert(s1.rank == 3 && s1.dims[0] == 3 && s1.dims[1] == -1 && s1.dims[2] == 2);
  FloeSession *s = session_new(g);
  int lens[4] = {1, 3, 2, 2};
  for (int k = 0; k < 4; k++) {
    float av[3];
    int32_t bv[6];
    for (int j = 0; j < lens[k]; j++) av[j] = (float)(10 * k + j + 1);
    for (int j = 0; j < 2 * (k % 3 + 1); j++) bv[j] = 100 * k + j + 1;
    int64_t da = lens[k], db[2] = {k % 3 + 1, 2};
    FloeTensor *ta = floe_tensor_from_data(FLOE_F32, 1, &da, av, (size_t)da * 4, NULL);
    FloeTensor *tb = floe_tensor_from_data(FLOE_I32, 2, db, bv, (size_t)db[0] * 8, NULL);
    FloeFeed f[2] = {{"a", ta}, {"b", tb}};
    run_ok(s, f, 2, NULL, 0, "enq", NULL);
    floe_tensor_release(ta);
    floe_tensor_release(tb);
  }
  FloeTensor *r[2] = {0};
  run_ok(s, NULL, 0, (const char *[]){"deqm:0", "deqm:1"}, 2, NULL, r);
  /* a: [3, 3], rows 1 / 11 12 13 / 21 22, zeros after. */
  ck_assert_int_eq(floe_tensor_dim(r[0], 0), 3);
  ck_assert_int_eq(floe_tensor_dim(r[0], 1), 3);
  const float wa[9] = {1, 0, 0, 11, 12, 13, 21, 22, 0};
  ck_assert_mem_eq(floe_tensor_data(r[0]), wa, sizeof wa);
  /* b: element k has k % 3 + 1 rows of 2: [3, 3, 2] */
  ck_assert_int_eq(floe_tensor_dim(r[1], 1), 3);
  const int32_t *gb = floe_tensor_data(r[1]);
  for (int k = 0; k < 3; k++)
    for (int row = 0; row < 3; row++)
      for (int c = 0; c < 2; c++) {
        int32_t want = row < k % 3 + 1 ? 100 * k + 2 * row + c + 1 : 0;
        ck_assert_int_eq(gb[(k * 3 + row) * 2 + c], want);
      }
  floe_tensor_release(r[0]);
  floe_tensor_release(r[1]);
  /* A single dequeue keeps the element's own shape. */
  run_ok(s, NULL, 0, (const char *[]){"deq:0", "deq:1"}, 2, NULL, r);
  ck_assert_int_eq(floe_tensor_dim(r[0], 0), 2);
  ck_assert_float_eq(((float *)floe_tensor_data(r[0]))[1], 32.0f);
  ck_assert_int_eq(floe_tensor_dim(r[1], 0), 1);
  floe_tensor_release(r[0]);
  floe_tensor_release(r[1]);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- concurrency ---- */

enum { PRODUCERS = 4, PER_PRODUCER = 120, CHUNK = 6, CONSUMERS = 2, BATCH = 5 };

typedef struct Producer {
  pthread_t th;
  FloeSession *s;
  int id;
  floe_code rc;
} Producer;

static void *producer_main(void *arg) {
  Producer *p = arg;
  FloeStatus *st = floe_status_new();
  for (int c = 0; c < PER_PRODUCER / CHUNK && p->rc == FLOE_OK; c++) {
    float a[2 * CHUNK];
    int32_t b[CHUNK];
    for (int j = 0; j < CHUNK; j++) {
      int v = p->id * 1000 + c * CHUNK + j;
      a[2 * j] = (float)v;
      a[2 * j + 1] = (float)-v;
      b[j] = v;
    }
    int64_t da[2] = {CHUNK, 2}, db = CHUNK;
    FloeTensor *ta = floe_tensor_from_data(FLOE_F32, 2, da, a, sizeof a, NULL);
    FloeTensor *tb = floe_tensor_from_data(FLOE_I32, 1, &db, b, sizeof b, NULL);
    FloeFeed f[2] = {{"am", ta}, {"bm", tb}};
    p->rc = run(p->s, f, 2, NULL, 0, "enqm", NULL, st);
    floe_tensor_release(ta);
    floe_tensor_release(tb);
  }
  floe_status_free(st);
  return NULL;
}

typedef struct Consumer {
  pthread_t th;
  FloeSession *s;
  int32_t got[PRODUCERS * PER_PRODUCER];
  int n;
  floe_code rc;
  char msg[256];
} Consumer;

static void *consumer_main(void *arg) {
  Consumer *c = arg;
  FloeStatus *st = floe_status_new();
  FloeTensor *nt = floe_tensor_scalar_i32(BATCH, NULL);
  FloeFeed f = {"n", nt};
  const char *fetch[2] = {"upto:0", "upto:1"};
  for (;;) {
    FloeTensor *out[2] = {0};
    c->rc = run(c->s, &f, 1, fetch, 2, NULL, out, st);
    if (c->rc != FLOE_OK) break;
    const float *a = floe_tensor_data(out[0]);
    const int32_t *b = floe_tensor_data(out[1]);
    for (int64_t i = 0; i < floe_tensor_dim(out[1], 0); i++) {
      if (a[2 * i] != (float)b[i] || a[2 * i + 1] != (float)-b[i]) c->rc = FLOE_DATA_LOSS;
      c->got[c->n++] = b[i];
    }
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  snprintf(c->msg, sizeof c->msg, "%s", floe_status_message(st));
  floe_tensor_release(nt);
  floe_status_free(st);
  return NULL;
}

START_TEST(many_producers_many_consumers) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  o.capacity = 8;
  FloeGraph *g = queue_graph(&o);
  FloeSession *s = session_new(g);
  Producer p[PRODUCERS];
  static Consumer c[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++) {
    memset(&c[i], 0, sizeof c[i]);
    c[i].s = s;
    ck_assert_int_eq(pthread_create(&c[i].th, NULL, consumer_main, &c[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) {
    p[i] = (Producer){.s = s, .id = i, .rc = FLOE_OK};
    ck_assert_int_eq(pthread_create(&p[i].th, NULL, producer_main, &p[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) {
    pthread_join(p[i].th, NULL);
    ck_assert_int_eq(p[i].rc, FLOE_OK);
  }
  run_ok(s, NULL, 0, NULL, 0, "close", NULL);
  int seen[PRODUCERS][PER_PRODUCER] = {{0}};
  for (int i = 0; i < CONSUMERS; i++) {
    pthread_join(c[i].th, NULL);
    ck_assert_msg(c[i].rc == FLOE_OUT_OF_RANGE, "consumer %d: %s (%s)", i,
                  floe_code_name(c[i].rc), c[i].msg);
    /* Each consumer sees each producer's values in increasing order (FIFO). */
    int last[PRODUCERS];
    for (int k = 0; k < PRODUCERS; k++) last[k] = -1;
    for (int j = 0; j < c[i].n; j++) {
      int v = c[i].got[j], prod = v / 1000, k = v % 1000;
      ck_assert(prod >= 0 && prod < PRODUCERS && k < PER_PRODUCER);
      ck_assert_msg(k > last[prod], "producer %d's %d after its %d", prod, k, last[prod]);
      last[prod] = k;
      seen[prod][k]++;
    }
  }
  for (int i = 0; i < PRODUCERS; i++)
    for (int k = 0; k < PER_PRODUCER; k++) ck_assert_int_eq(seen[i][k], 1);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("queue");
  TCase *tc = tcase_create("basics");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, fifo_order_and_state_across_runs);
  tcase_add_test(tc, closed_queue_semantics);
  tcase_add_test(tc, mismatches_refused_when_building);
  tcase_add_test(tc, mismatches_refused_when_running);
  tcase_add_test(tc, shared_names_and_kinds);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  tc = tcase_create("blocking");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, full_queue_blocks_enqueue_until_a_dequeue);
  tcase_add_test(tc, empty_queue_blocks_dequeue_until_an_enqueue);
  tcase_add_test(tc, close_wakes_waiters_with_the_right_codes);
  tcase_add_test(tc, cancelled_step_fails_a_blocked_dequeue);
  tcase_add_test(tc, closing_the_resources_wakes_everything);
  tcase_add_test(tc, session_close_unblocks_a_blocked_dequeue);
  tcase_add_test(tc, timeouts_and_cancel_end_blocked_operations);
  suite_add_tcase(s, tc);
  tc = tcase_create("kinds");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, random_shuffle_is_a_seeded_permutation);
  tcase_add_test(tc, random_shuffle_first_pick_is_uniform);
  tcase_add_test(tc, random_shuffle_keeps_min_after_dequeue);
  tcase_add_test(tc, padding_fifo_pads_batches_with_zeros);
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, many_producers_many_consumers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
