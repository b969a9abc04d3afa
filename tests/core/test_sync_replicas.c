/* SPDX-License-Identifier: Apache-2.0 */
/* test_sync_replicas.c - synchronous replication's pieces in one process, public API only:
 *  - ConditionalAccumulator: the mean of what was applied, stale gradients (local step older
 *    than the accumulator's global step) dropped and counted, a take that waits for
 *    num_required gradients applied from other threads, a take cancelled by its step's
 *    timeout leaving the accumulator usable, refusals naming the accumulator;
 *  - SyncTokenQueue with QueueEnqueueManyV2 / QueueDequeueV2 / QueueCloseV2;
 *  - floe_sync_replicas_minimize with one replica (replicas_to_aggregate 1): the chief's
 *    update thread and the replica's steps give bitwise the variables floe_minimize gives on
 *    the same batches (SGD and Adam), the token follows the global step, stale count 0;
 *  - its refusals (options). */
#include <stdbool.h>
#include <check.h>
#include <floe/floe.h>
#include <floe/floe_train.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FloeTensor *vec(const float *v, int64_t n) {
  FloeTensor *t = floe_tensor_new(FLOE_F32, 1, &n, NULL);
  memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  return t;
}

/* acc over a [3] f32 variable; fed: step (i64), grad ([3] f32), need (i32). */
static FloeGraph *acc_graph(void) {
  FloeGraph *g = floe_graph_new();
  int64_t three = 3;
  FloeVariable v = floe_variable(g, "w", FLOE_F32, floe_shape_make(1, &three), floe_init_zeros());
  FloeOutput step = floe_placeholder(g, "step", FLOE_I64, floe_shape_scalar());
  FloeOutput grad = floe_placeholder(g, "grad", FLOE_F32, floe_shape_make(1, &three));
  FloeOutput need = floe_placeholder(g, "need", FLOE_I32, floe_shape_scalar());
  FloeNodeBuilder *b = floe_node_begin(g, "ConditionalAccumulator", "acc");
  floe_node_add_input(b, v.handle);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_set_attr_shape(b, "shape", floe_shape_make(1, &three));
  FloeOutput acc = floe_out(floe_node_finish(b), 0);
  b = floe_node_begin(g, "AccumulatorApplyGradient", "apply");
  floe_node_add_input(b, acc);
  floe_node_add_input(b, step);
  floe_node_add_input(b, grad);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_finish(b);
  b = floe_node_begin(g, "AccumulatorTakeGradient", "take");
  floe_node_add_input(b, acc);
  floe_node_add_input(b, need);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_finish(b);
  b = floe_node_begin(g, "AccumulatorSetGlobalStep", "set_step");
  floe_node_add_input(b, acc);
  floe_node_add_input(b, step);
  floe_node_finish(b);
  b = floe_node_begin(g, "AccumulatorNumAccumulated", "count");
  floe_node_add_input(b, acc);
  floe_node_finish(b);
  b = floe_node_begin(g, "AccumulatorNumDropped", "dropped");
  floe_node_add_input(b, acc);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static floe_code apply(FloeSession *s, int64_t step, const float *g3, FloeStatus *st) {
  FloeTensor *ts = floe_tensor_scalar_i64(step, NULL), *tg = vec(g3, 3);
  FloeFeed f[2] = {{"step", ts}, {"grad", tg}};
  const char *target = "apply";
  floe_code rc = floe_session_run(s, f, 2, NULL, 0, &target, 1, NULL, st);
  floe_tensor_release(ts);
  floe_tensor_release(tg);
  return rc;
}

static int64_t query(FloeSession *s, const char *what) {
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, NULL, 0, &what, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  int64_t v = floe_tensor_dtype(out) == FLOE_I64 ? *(int64_t *)floe_tensor_data(out)
                                                 : *(int32_t *)floe_tensor_data(out);
  floe_tensor_release(out);
  floe_status_free(st);
  return v;
}

typedef struct TakeCall {
  FloeSession *s;
  int need;
  int64_t timeout_ms;
  floe_code rc;
  float got[3];
  volatile int done;
  char msg[256];
} TakeCall;

static void *take_main(void *arg) {
  TakeCall *c = arg;
  FloeStatus *st = floe_status_new();
  FloeTensor *need = floe_tensor_scalar_i32(c->need, NULL), *out = NULL;
  FloeFeed f = {"need", need};
  const char *fetch = "take";
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = c->timeout_ms;
  c->rc = floe_session_run_opts(c->s, &ro, &f, 1, &fetch, 1, NULL, 0, &out, st);
  if (c->rc == FLOE_OK) memcpy(c->got, floe_tensor_data(out), sizeof c->got);
  snprintf(c->msg, sizeof c->msg, "%s", floe_status_message(st));
  floe_tensor_release(out);
  floe_tensor_release(need);
  floe_status_free(st);
  c->done = 1;
  return NULL;
}

START_TEST(test_accumulator) {
  FloeGraph *g = acc_graph();
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  const float a[3] = {1, 2, 3}, b[3] = {3, 6, -1}, c3[3] = {100, 100, 100};
  /* Two gradients, taken as their mean. */
  ck_assert_int_eq(apply(s, 0, a, st), FLOE_OK);
  ck_assert_int_eq(apply(s, 0, b, st), FLOE_OK);
  ck_assert_int_eq(query(s, "count"), 2);
  TakeCall tc = {s, 2, 0, FLOE_OK, {0}, 0, ""};
  take_main(&tc);
  ck_assert_msg(tc.rc == FLOE_OK, "%s", tc.msg);
  ck_assert(tc.got[0] == 2.0f && tc.got[1] == 4.0f && tc.got[2] == 1.0f);
  ck_assert_int_eq(query(s, "count"), 0);
  /* The take advanced the global step to 1: a gradient of step 0 is stale. */
  ck_assert_int_eq(apply(s, 0, c3, st), FLOE_OK);
  ck_assert_int_eq(query(s, "count"), 0);
  ck_assert_int_eq(query(s, "dropped"), 1);
  /* A take waits for its gradients, applied from another thread meanwhile. */
  TakeCall w = {s, 2, 0, FLOE_OK, {0}, 0, ""};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, take_main, &w), 0);
  usleep(150 * 1000);
  ck_assert_int_eq(w.done, 0);
  ck_assert_int_eq(apply(s, 1, a, st), FLOE_OK);
  usleep(50 * 1000);
  ck_assert_int_eq(w.done, 0);
  ck_assert_int_eq(apply(s, 5, a, st), FLOE_OK); /* newer than the step: accepted */
  pthread_join(th, NULL);
  ck_assert_msg(w.rc == FLOE_OK, "%s", w.msg);
  ck_assert(w.got[0] == 1.0f && w.got[1] == 2.0f && w.got[2] == 3.0f);
  /* set_global_step raises (never lowers) the step: 7, then 3 leaves 7. */
  FloeTensor *seven = floe_tensor_scalar_i64(7, NULL), *three = floe_tensor_scalar_i64(3, NULL);
  const char *set = "set_step";
  FloeFeed f7 = {"step", seven}, f3 = {"step", three};
  ck_assert_int_eq(floe_session_run(s, &f7, 1, NULL, 0, &set, 1, NULL, st), FLOE_OK);
  ck_assert_int_eq(floe_session_run(s, &f3, 1, NULL, 0, &set, 1, NULL, st), FLOE_OK);
  ck_assert_int_eq(apply(s, 6, a, st), FLOE_OK);
  ck_assert_int_eq(query(s, "dropped"), 2);
  ck_assert_int_eq(apply(s, 7, a, st), FLOE_OK);
  ck_assert_int_eq(query(s, "count"), 1);
  /* A take whose step times out fails, and the accumulator goes on. */
  TakeCall to = {s, 5, 200, FLOE_OK, {0}, 0, ""};
  take_main(&to);
  ck_assert_msg(to.rc == FLOE_DEADLINE_EXCEEDED || to.rc == FLOE_CANCELLED, "%d %s", to.rc, to.msg);
  ck_assert_int_eq(apply(s, 7, b, st), FLOE_OK);
  TakeCall ok2 = {s, 2, 0, FLOE_OK, {0}, 0, ""};
  take_main(&ok2);
  ck_assert_msg(ok2.rc == FLOE_OK, "%s", ok2.msg);
  ck_assert(ok2.got[0] == 2.0f && ok2.got[1] == 4.0f && ok2.got[2] == 1.0f);
  /* Refusals name the accumulator. */
  TakeCall zero = {s, 0, 0, FLOE_OK, {0}, 0, ""};
  take_main(&zero);
  ck_assert_int_eq(zero.rc, FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(zero.msg, "'acc'") && strstr(zero.msg, "num_required"), "%s", zero.msg);
  floe_tensor_release(seven);
  floe_tensor_release(three);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

START_TEST(test_token_queue) {
  FloeGraph *g = floe_graph_new();
  FloeVariable gs = floe_global_step(g);
  FloeNodeBuilder *b = floe_node_begin(g, "SyncTokenQueue", "tq");
  floe_node_add_input(b, gs.handle);
  FloeOutput tq = floe_out(floe_node_finish(b), 0);
  FloeOutput toks = floe_placeholder(g, "toks", FLOE_I64, floe_shape_make(1, (int64_t[]){-1}));
  FloeDType i64 = FLOE_I64;
  b = floe_node_begin(g, "QueueEnqueueManyV2", "put");
  floe_node_add_input(b, tq);
  floe_node_add_input(b, toks);
  floe_node_set_attr_type_list(b, "Tcomponents", &i64, 1);
  floe_node_finish(b);
  b = floe_node_begin(g, "QueueDequeueV2", "get");
  floe_node_add_input(b, tq);
  floe_node_set_attr_type_list(b, "component_types", &i64, 1);
  floe_node_finish(b);
  b = floe_node_begin(g, "QueueCloseV2", "close");
  floe_node_add_input(b, tq);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  int64_t two = 2;
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, &two, NULL);
  ((int64_t *)floe_tensor_data(t))[0] = 4;
  ((int64_t *)floe_tensor_data(t))[1] = 4;
  FloeFeed f = {"toks", t};
  const char *put = "put", *get = "get", *close = "close";
  ck_assert_int_eq(floe_session_run(s, &f, 1, NULL, 0, &put, 1, NULL, st), FLOE_OK);
  for (int i = 0; i < 2; i++) {
    FloeTensor *out = NULL;
    ck_assert_msg(floe_session_run(s, NULL, 0, &get, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(*(int64_t *)floe_tensor_data(out), 4);
    floe_tensor_release(out);
  }
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &close, 1, NULL, st), FLOE_OK);
  FloeTensor *out = NULL;
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &get, 1, NULL, 0, &out, st), FLOE_OUT_OF_RANGE);
  floe_tensor_release(t);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---- floe_sync_replicas_minimize against floe_minimize ---- */

/* x [4, 3] -> dense 2 (constant-initialised weights), a squared-error loss against y. */
static FloeOutput model(FloeGraph *g) {
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (int64_t[]){4, 3}));
  FloeOutput y = floe_placeholder(g, "y", FLOE_F32, floe_shape_make(2, (int64_t[]){4, 2}));
  FloeVariable w = floe_variable(g, "w", FLOE_F32, floe_shape_make(2, (int64_t[]){3, 2}),
                                 floe_init_constant(0.25));
  FloeVariable bias = floe_variable(g, "b", FLOE_F32, floe_shape_make(1, (int64_t[]){2}),
                                    floe_init_constant(-0.5));
  FloeOutput h = floe_binary(g, "MatMul", "mm", x, w.value);
  h = floe_binary(g, "BiasAdd", "ba", h, bias.value);
  FloeOutput d = floe_binary(g, "Sub", "diff", h, y);
  FloeOutput sq = floe_unary(g, "Square", "sq", d);
  FloeTensor *ax = floe_tensor_new(FLOE_I32, 1, (int64_t[]){2}, NULL);
  ((int32_t *)floe_tensor_data(ax))[0] = 0;
  ((int32_t *)floe_tensor_data(ax))[1] = 1;
  FloeOutput axes = floe_const(g, "axes", ax);
  floe_tensor_release(ax);
  return floe_binary(g, "Mean", "loss", sq, axes);
}

static void batch(int k, FloeTensor **x, FloeTensor **y) {
  *x = floe_tensor_new(FLOE_F32, 2, (int64_t[]){4, 3}, NULL);
  *y = floe_tensor_new(FLOE_F32, 2, (int64_t[]){4, 2}, NULL);
  float *xd = floe_tensor_data(*x), *yd = floe_tensor_data(*y);
  for (int i = 0; i < 12; i++) xd[i] = (float)((i * 7 + k * 3) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < 8; i++) yd[i] = (float)((i * 5 + k) % 7) / 3.0f;
}

static void read_vars(FloeSession *s, float out[8]) {
  const char *f[2] = {"w/read", "b/read"};
  FloeTensor *t[2];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, NULL, 0, f, 2, NULL, 0, t, st) == FLOE_OK, "%s",
                floe_status_message(st));
  memcpy(out, floe_tensor_data(t[0]), 6 * sizeof(float));
  memcpy(out + 6, floe_tensor_data(t[1]), 2 * sizeof(float));
  floe_tensor_release(t[0]);
  floe_tensor_release(t[1]);
  floe_status_free(st);
}

typedef struct Updater {
  FloeSession *s;
  const char *target;
  int steps;
  floe_code rc;
  char msg[256];
} Updater;

static void *updater_main(void *arg) {
  Updater *u = arg;
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < u->steps && u->rc == FLOE_OK; i++) {
    u->rc = floe_session_run(u->s, NULL, 0, NULL, 0, &u->target, 1, NULL, st);
    snprintf(u->msg, sizeof u->msg, "%s", floe_status_message(st));
  }
  floe_status_free(st);
  return NULL;
}

static void sync_matches(FloeOptimizerKind kind) {
  enum { STEPS = 5 };
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, kind);
  o.learning_rate = 0.1;
  /* floe_minimize */
  FloeGraph *g1 = floe_graph_new();
  FloeOutput l1 = model(g1);
  floe_minimize(g1, "train", l1, &o, NULL, 0);
  floe_variables_initializer(g1, "init");
  ck_assert_msg(floe_graph_status(g1) == FLOE_OK, "%s", floe_graph_error(g1, NULL));
  /* floe_sync_replicas_minimize, one replica */
  FloeGraph *g2 = floe_graph_new();
  FloeOutput l2 = model(g2);
  FloeSyncReplicasOptions so;
  floe_sync_replicas_options_init(&so);
  FloeSyncReplicas r = floe_sync_replicas_minimize(g2, "sync", l2, &o, &so, NULL, 0);
  floe_variables_initializer(g2, "init");
  ck_assert_msg(floe_graph_status(g2) == FLOE_OK, "%s", floe_graph_error(g2, NULL));
  ck_assert(r.train && r.token.node && r.local_init && r.chief_update && r.close && r.stale.node);
  FloeStatus *st = floe_status_new();
  FloeSession *s1 = floe_session_new(g1, NULL, st), *s2 = floe_session_new(g2, NULL, st);
  ck_assert_msg(s1 && s2, "%s", floe_status_message(st));
  const char *init = "init", *train = "train", *local_init = floe_node_name(r.local_init);
  ck_assert_int_eq(floe_session_run(s1, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  ck_assert_int_eq(floe_session_run(s2, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  ck_assert_int_eq(floe_session_run(s2, NULL, 0, NULL, 0, &local_init, 1, NULL, st), FLOE_OK);
  Updater u = {s2, floe_node_name(r.chief_update), STEPS, FLOE_OK, ""};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, updater_main, &u), 0);
  char tok_name[256];
  snprintf(tok_name, sizeof tok_name, "%s", floe_node_name(r.token.node));
  for (int k = 0; k < STEPS; k++) {
    FloeTensor *x, *y;
    batch(k, &x, &y);
    FloeFeed f[2] = {{"x", x}, {"y", y}};
    ck_assert_msg(floe_session_run(s1, f, 2, NULL, 0, &train, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    const char *fetch = tok_name, *target = "sync";
    FloeTensor *tok = NULL;
    ck_assert_msg(floe_session_run(s2, f, 2, &fetch, 1, &target, 1, &tok, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(*(int64_t *)floe_tensor_data(tok), k + 1); /* the new global step */
    floe_tensor_release(tok);
    floe_tensor_release(x);
    floe_tensor_release(y);
  }
  pthread_join(th, NULL);
  ck_assert_msg(u.rc == FLOE_OK, "%s", u.msg);
  float v1[8], v2[8];
  read_vars(s1, v1);
  read_vars(s2, v2);
  for (int i = 0; i < 8; i++)
    ck_assert_msg(memcmp(&v1[i], &v2[i], sizeof(float)) == 0, "value %d: %.9g vs %.9g", i,
                  (double)v1[i], (double)v2[i]);
  ck_assert_int_eq(query(s2, floe_node_name(r.stale.node)), 0);
  ck_assert_int_eq(query(s2, "global_step/read"), STEPS);
  /* Closing the token queue ends a replica waiting for a token. */
  const char *close = floe_node_name(r.close);
  ck_assert_int_eq(floe_session_run(s2, NULL, 0, NULL, 0, &close, 1, NULL, st), FLOE_OK);
  FloeTensor *x, *y;
  batch(0, &x, &y);
  FloeFeed f[2] = {{"x", x}, {"y", y}};
  const char *target = "sync";
  ck_assert_int_eq(floe_session_run(s2, f, 2, NULL, 0, &target, 1, NULL, st), FLOE_OUT_OF_RANGE);
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_session_free(s1);
  floe_session_free(s2);
  floe_graph_free(g1);
  floe_graph_free(g2);
  floe_status_free(st);
}

START_TEST(test_one_replica_is_plain_sgd) { sync_matches(FLOE_OPT_SGD); }
END_TEST
START_TEST(test_one_replica_is_plain_adam) { sync_matches(FLOE_OPT_ADAM); }
END_TEST

START_TEST(test_refusals) {
  FloeGraph *g = floe_graph_new();
  FloeOutput l = model(g);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  FloeSyncReplicasOptions so;
  floe_sync_replicas_options_init(&so);
  so.replicas_to_aggregate = 3;
  so.total_num_replicas = 2;
  FloeSyncReplicas r = floe_sync_replicas_minimize(g, NULL, l, &o, &so, NULL, 0);
  ck_assert(!r.train && !r.chief_update);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "backups"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sync_replicas");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_accumulator);
  tcase_add_test(tc, test_token_queue);
  tcase_add_test(tc, test_one_replica_is_plain_sgd);
  tcase_add_test(tc, test_one_replica_is_plain_adam);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
