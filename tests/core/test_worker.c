/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker.c - the worker service (core/dist/worker.c) as a master talks to it: a task
 * set up the way server.c does (a runtime joined as /job:worker/task:0, an rpc server on
 * 127.0.0.1, a data plane, the worker service), requests sent through a connection pool.
 * A step runs and returns its values; a replayed request id is refused and does not run;
 * malformed graph bytes, an op that is not registered, a node on another task's device or on
 * none, and feeds that do not match the registration are refused naming the problem; unknown
 * handles are NOT_FOUND; the service goes on serving after each refusal. */
#include <check.h>
#include <floe/floe.h>
#include <floe/floe_train.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "dist/dist.h"
#include "dist/dist.pb-c.h"

#define DEV "/job:worker/replica:0/task:0/device:CPU:0"

typedef struct Task {
  FloeRuntime *rt;
  FloeJobSecret *secret;
  FloeRpcServer *srv;
  FloeDataPlane *dp;
  FloeWorkerService *w;
  FloeConnPool *pool;
} Task;

static void task_start(Task *t) {
  memset(t, 0, sizeof *t);
  FloeStatus st = {FLOE_OK, NULL};
  char path[4096];
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR");
  snprintf(path, sizeof path, "%s:%s", cpu ? cpu : "", local ? local : "");
  FloeRuntimeOptions ro = {0};
  ro.struct_size = sizeof ro;
  ro.plugin_path = path;
  setenv("FLOE_TRANSPORT", "local", 1);
  t->rt = floe_runtime_new(&ro, &st);
  ck_assert_msg(t->rt != NULL, "%s", floe_status_message(&st));
  ck_assert_int_eq(floe__runtime_join(t->rt, "worker", 0, &st), FLOE_OK);
  const char key[] = "test-worker-secret-0123456789abcdef";
  ck_assert_int_eq(floe__secret_from_bytes(key, sizeof key - 1, "test", &t->secret, &st), FLOE_OK);
  FloeTaskIdentity self = {"worker", 0, 0x1111};
  FloeRpcServerOptions so = {0};
  so.conn.secret = t->secret;
  so.conn.self = self;
  so.conn.timeout_ms = 5000;
  ck_assert_msg(floe__rpc_server_start("127.0.0.1:0", &so, &t->srv, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  ck_assert_msg(floe__dataplane_new(t->rt, t->secret, &self, &t->dp, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  ck_assert_int_eq(floe__worker_service_start(t->rt, t->dp, t->srv, &t->w, &st), FLOE_OK);
  FloeConnOptions co = {0};
  co.secret = t->secret;
  co.self = (FloeTaskIdentity){"chief", 0, 0x2222};
  co.timeout_ms = 5000;
  co.expect_task = -1;
  ck_assert_int_eq(floe__conn_pool_new(floe__rpc_server_address(t->srv), &co, &t->pool, &st),
                   FLOE_OK);
}

static void task_stop(Task *t) {
  floe__conn_pool_free(t->pool);
  floe__rpc_server_free(t->srv);
  floe__worker_service_free(t->w);
  floe__dataplane_free(t->dp);
  floe__secret_free(t->secret);
  floe_runtime_free(t->rt);
}

/* One call; the response's status into *out (the caller clears it). */
static void call(Task *t, uint16_t type, ProtobufCMessage *req, uint16_t resp_type,
                 ProtobufCMessage **resp, FloeStatus *out) {
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__conn_pool_call(t->pool, type, req, resp_type, 10000, resp, &st);
  ck_assert_msg(rc == FLOE_OK, "the call itself failed: %s", floe_status_message(&st));
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name((*resp)->descriptor, "status");
  const Floe__Dist__Status *s = NULL;
  memcpy(&s, (const uint8_t *)*resp + f->offset, sizeof s);
  floe__status_from_proto(s, out);
}

static void expect(const FloeStatus *st, floe_code code, const char *part) {
  ck_assert_msg(st->code == code, "code %s, wanted %s: %s", floe_code_name(st->code),
                floe_code_name(code), floe_status_message(st));
  if (part)
    ck_assert_msg(strstr(floe_status_message(st), part) != NULL, "\"%s\" lacks \"%s\"",
                  floe_status_message(st), part);
}

static void create_session(Task *t, const char *handle) {
  Floe__Dist__CreateWorkerSessionRequest rq = FLOE__DIST__CREATE_WORKER_SESSION_REQUEST__INIT;
  rq.session_handle = (char *)handle;
  rq.timeout_ms = 2000;
  ProtobufCMessage *resp = NULL;
  FloeStatus st = {FLOE_OK, NULL};
  call(t, FLOE__WIRE_CREATE_WORKER_SESSION, &rq.base, FLOE__WIRE_CREATE_WORKER_SESSION_RESPONSE,
       &resp, &st);
  expect(&st, FLOE_OK, NULL);
  floe__wire_free(resp);
}

/* Registers graph bytes; the handle (malloc'd) on OK, else NULL with *out set. */
static char *register_bytes(Task *t, const void *buf, size_t len, const char *feed,
                            const char *fetch, FloeStatus *out) {
  Floe__Dist__RegisterGraphRequest rq = FLOE__DIST__REGISTER_GRAPH_REQUEST__INIT;
  rq.session_handle = (char *)"s1";
  rq.graph.data = (uint8_t *)buf;
  rq.graph.len = len;
  char *feeds[1] = {(char *)feed}, *fetches[1] = {(char *)fetch};
  rq.n_feeds = feed ? 1 : 0;
  rq.feeds = feeds;
  rq.n_fetches = fetch ? 1 : 0;
  rq.fetches = fetches;
  ProtobufCMessage *resp = NULL;
  call(t, FLOE__WIRE_REGISTER_GRAPH, &rq.base, FLOE__WIRE_REGISTER_GRAPH_RESPONSE, &resp, out);
  const Floe__Dist__RegisterGraphResponse *r = (const void *)resp;
  char *h = out->code == FLOE_OK && r->graph_handle ? strdup(r->graph_handle) : NULL;
  floe__wire_free(resp);
  return h;
}

static char *register_graph(Task *t, FloeGraph *g, const char *feed, const char *fetch,
                            FloeStatus *out) {
  void *buf;
  size_t len;
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_int_eq(floe_graph_serialize(g, &buf, &len, NULL), FLOE_OK);
  char *h = register_bytes(t, buf, len, feed, fetch, out);
  free(buf);
  return h;
}

/* RunGraph(handle, request id) with x = [1, 2] fed as feed_name; y into *y when OK. */
static void run(Task *t, const char *handle, uint64_t request_id, const char *feed_name,
                const char *fetch, Floe__Dist__Tensor *feed, float *y, FloeStatus *out) {
  Floe__Dist__RunGraphRequest rq = FLOE__DIST__RUN_GRAPH_REQUEST__INIT;
  rq.graph_handle = (char *)handle;
  rq.step_id = 0x5eed0000 + request_id;
  rq.request_id = request_id;
  Floe__Dist__NamedTensor nt = FLOE__DIST__NAMED_TENSOR__INIT, *ntp = &nt;
  nt.name = (char *)feed_name;
  nt.tensor = feed;
  rq.n_feeds = feed_name ? 1 : 0;
  rq.feeds = &ntp;
  char *fetches[1] = {(char *)fetch};
  rq.n_fetches = fetch ? 1 : 0;
  rq.fetches = fetches;
  ProtobufCMessage *resp = NULL;
  call(t, FLOE__WIRE_RUN_GRAPH, &rq.base, FLOE__WIRE_RUN_GRAPH_RESPONSE, &resp, out);
  const Floe__Dist__RunGraphResponse *r = (const void *)resp;
  if (out->code == FLOE_OK && y) {
    ck_assert_int_eq((int)r->n_fetches, 1);
    memcpy(y, r->fetches[0]->tensor->data.data, r->fetches[0]->tensor->data.len);
  }
  floe__wire_free(resp);
}

/* The variable "counter" (f32 scalar) of the worker session, as a handle in g. */
static FloeOutput counter_handle(FloeGraph *g) {
  FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", "counter");
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_set_attr_shape(b, "shape", floe_shape_scalar());
  return floe_out(floe_node_finish(b), 0);
}

static Floe__Dist__Tensor feed_x(float *data) {
  static int64_t shape[1] = {2};
  Floe__Dist__Tensor t = FLOE__DIST__TENSOR__INIT;
  t.dtype = FLOE_F32;
  t.n_shape = 1;
  t.shape = shape;
  t.data.data = (uint8_t *)data;
  t.data.len = 2 * sizeof(float);
  return t;
}

START_TEST(test_step_and_replay) {
  Task t;
  task_start(&t);
  create_session(&t, "s1");
  FloeStatus st = {FLOE_OK, NULL};
  const int64_t d[1] = {2};
  /* three pieces under one worker session (their resources are shared): the counter's
   * initialiser, a step (y = x * 2, and the counter bumped), the counter's read */
  FloeGraph *ginit = floe_graph_new();
  floe_graph_set_device_scope(ginit, DEV);
  floe_assign(ginit, "init", counter_handle(ginit), floe_const_f32(ginit, "zero", 0.0f));
  floe_graph_set_device_scope(ginit, NULL);
  char *hinit = register_graph(&t, ginit, NULL, NULL, &st);
  expect(&st, FLOE_OK, NULL);
  FloeGraph *piece = floe_graph_new();
  floe_graph_set_device_scope(piece, DEV);
  FloeOutput px = floe_placeholder(piece, "x", FLOE_F32, floe_shape_make(1, d));
  floe_binary(piece, "Mul", "y", px, floe_const_f32(piece, "two", 2.0f));
  floe_assign_add(piece, "bump", counter_handle(piece), floe_const_f32(piece, "one", 1.0f));
  floe_graph_set_device_scope(piece, NULL);
  char *hs = register_graph(&t, piece, "x:0", "y:0", &st);
  expect(&st, FLOE_OK, NULL);
  FloeGraph *gr = floe_graph_new();
  floe_graph_set_device_scope(gr, DEV);
  floe_read_variable(gr, "value", counter_handle(gr));
  floe_graph_set_device_scope(gr, NULL);
  char *hi = register_graph(&t, gr, NULL, "value:0", &st);
  expect(&st, FLOE_OK, NULL);
  run(&t, hinit, 1, NULL, NULL, NULL, NULL, &st);
  expect(&st, FLOE_OK, NULL);
  float xv[2] = {1, 2}, y[2] = {0, 0};
  Floe__Dist__Tensor fx = feed_x(xv);
  run(&t, hs, 42, "x:0", "y:0", &fx, y, &st);
  expect(&st, FLOE_OK, NULL);
  ck_assert(y[0] == 2.0f && y[1] == 4.0f);
  /* the same request id again: refused, and the counter did not move */
  run(&t, hs, 42, "x:0", "y:0", &fx, y, &st);
  expect(&st, FLOE_ALREADY_EXISTS, "request id 000000000000002a");
  float counter = -1;
  run(&t, hi, 43, NULL, "value:0", NULL, &counter, &st);
  expect(&st, FLOE_OK, NULL);
  ck_assert_float_eq(counter, 1.0f);
  /* feeds that do not match the registration */
  run(&t, hs, 44, "z:0", "y:0", &fx, NULL, &st);
  expect(&st, FLOE_INVALID_ARGUMENT, "feed 0 is \"z:0\"");
  Floe__Dist__Tensor bad = fx;
  bad.data.len = 3;
  run(&t, hs, 45, "x:0", "y:0", &bad, NULL, &st);
  expect(&st, FLOE_INVALID_ARGUMENT, "3 bytes of data");
  bad = fx;
  bad.dtype = 99;
  run(&t, hs, 46, "x:0", "y:0", &bad, NULL, &st);
  expect(&st, FLOE_INVALID_ARGUMENT, "dtype 99");
  run(&t, "graph-nonesuch", 47, "x:0", "y:0", &fx, NULL, &st);
  expect(&st, FLOE_NOT_FOUND, "graph-nonesuch");
  /* still serving */
  run(&t, hs, 48, "x:0", "y:0", &fx, y, &st);
  expect(&st, FLOE_OK, NULL);
  floe_status_clear(&st);
  free(hi);
  free(hs);
  free(hinit);
  floe_graph_free(gr);
  floe_graph_free(piece);
  floe_graph_free(ginit);
  task_stop(&t);
}
END_TEST

START_TEST(test_refused_graphs) {
  Task t;
  task_start(&t);
  create_session(&t, "s1");
  FloeStatus st = {FLOE_OK, NULL};
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, DEV);
  const int64_t d[1] = {2};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, d));
  floe_unary(g, "Relu", "y", x);
  floe_graph_set_device_scope(g, NULL);
  void *buf;
  size_t len;
  ck_assert_int_eq(floe_graph_serialize(g, &buf, &len, NULL), FLOE_OK);
  /* truncated bytes */
  char *h = register_bytes(&t, buf, len / 2, "x:0", "y:0", &st);
  ck_assert(h == NULL);
  ck_assert_int_ne(st.code, FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(&st), "RegisterGraph") != NULL, "%s",
                floe_status_message(&st));
  floe_status_clear(&st);
  /* an op nobody registered: "Relu" patched into "Rxlu" */
  uint8_t *patched = malloc(len);
  memcpy(patched, buf, len);
  int hits = 0;
  for (size_t i = 0; i + 4 <= len; i++)
    if (!memcmp(patched + i, "Relu", 4)) patched[i + 1] = 'x', hits++;
  ck_assert_int_gt(hits, 0);
  /* a well-formed file otherwise: its CRC-32 (the last 4 bytes, little-endian) made again */
  uint32_t crc = (uint32_t)crc32(0L, patched, (uInt)(len - 4));
  for (int i = 0; i < 4; i++) patched[len - 4 + i] = (uint8_t)(crc >> (8 * i));
  h = register_bytes(&t, patched, len, "x:0", "y:0", &st);
  ck_assert(h == NULL);
  ck_assert_msg(strstr(floe_status_message(&st), "Rxlu") != NULL, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  free(patched);
  free(buf);
  floe_graph_free(g);
  /* a node on another task's device, and a node on none */
  const char *devs[2] = {"/job:worker/replica:0/task:1/device:CPU:0", NULL};
  for (int k = 0; k < 2; k++) {
    g = floe_graph_new();
    floe_graph_set_device_scope(g, DEV);
    x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, d));
    floe_graph_set_device_scope(g, devs[k]);
    floe_unary(g, "Relu", "y", x);
    floe_graph_set_device_scope(g, NULL);
    h = register_graph(&t, g, "x:0", "y:0", &st);
    ck_assert(h == NULL);
    ck_assert_msg(strstr(floe_status_message(&st), "node 'y'") != NULL, "%s",
                  floe_status_message(&st));
    floe_status_clear(&st);
    floe_graph_free(g);
  }
  /* an unknown worker session */
  Floe__Dist__RegisterGraphRequest rq = FLOE__DIST__REGISTER_GRAPH_REQUEST__INIT;
  rq.session_handle = (char *)"nonesuch";
  ProtobufCMessage *resp = NULL;
  call(&t, FLOE__WIRE_REGISTER_GRAPH, &rq.base, FLOE__WIRE_REGISTER_GRAPH_RESPONSE, &resp, &st);
  expect(&st, FLOE_NOT_FOUND, "nonesuch");
  floe_status_clear(&st);
  floe__wire_free(resp);
  task_stop(&t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("worker");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_step_and_replay);
  tcase_add_test(tc, test_refused_graphs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
