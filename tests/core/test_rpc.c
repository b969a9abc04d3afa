/* SPDX-License-Identifier: Apache-2.0 */
/* test_rpc.c - the control plane's server and client pools (core/dist/rpc.c) over 127.0.0.1:
 * echo round trips on reused connections, 32 clients at once through one pool, the
 * connection limit, a peer that never handshakes beside a good client, a wrong secret, a
 * request type with no handler, freeing a server whose threads are blocked (in a handler's
 * receive, idle, mid-handshake), a call that times out on a stalled handler and a pool shut
 * down under a waiting caller; and Status to and from its message. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "dist.pb-c.h"

static const char k_secret[] = "the job's secret: 32 bytes long!";
static const char k_other[] = "another job's secret, not ours..";
static FloeJobSecret *g_secret, *g_other;

static FloeJobSecret *secret_of(const char *s, const char *name) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *js = NULL;
  ck_assert_int_eq(floe__secret_from_bytes(s, strlen(s), name, &js, &st), FLOE_OK);
  return js;
}

static FloeConnOptions options(const FloeJobSecret *s, const char *job, int task, int timeout_ms) {
  FloeConnOptions o;
  memset(&o, 0, sizeof o);
  o.secret = s;
  snprintf(o.self.job, sizeof o.self.job, "%s", job);
  o.self.task = task;
  o.self.incarnation = 0x1234000000000000ull + (uint64_t)task;
  o.timeout_ms = timeout_ms;
  return o;
}

/* Under valgrind (threads run one at a time, 20-50 times slower) or a sanitizer the bounds
 * on how long things take here are 10 times looser. */
static int slow_scale(void) {
  const char *pre = getenv("LD_PRELOAD");
  if ((pre && strstr(pre, "vgpreload")) || getenv("FLOE_TEST_NO_TIMING")) return 10;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return 10;
#else
  return 1;
#endif
}
static int g_scale = 1;

static int64_t now_ms(void) {
  return floe__dist_now_ms();
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void expect(floe_code got, floe_code want, const char *msg, const char *frag) {
  ck_assert_msg(got == want, "code %d, expected %d: %s", got, want, msg);
  ck_assert_msg(strstr(msg, frag), "\"%s\" lacks \"%s\"", msg, frag);
}

/* ------------------------------------------------------------------------------------ */
/* The server's log, kept for the tests to search */

#define LOG_MAX 64
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_log_cv = PTHREAD_COND_INITIALIZER;
static char *g_log[LOG_MAX];
static int g_nlog;

static void log_fn(void *arg, const char *msg) {
  (void)arg;
  pthread_mutex_lock(&g_log_mu);
  if (g_nlog < LOG_MAX) g_log[g_nlog++] = strdup(msg);
  pthread_cond_broadcast(&g_log_cv);
  pthread_mutex_unlock(&g_log_mu);
}

static bool log_has_locked(const char *a, const char *b) {
  for (int i = 0; i < g_nlog; i++)
    if (strstr(g_log[i], a) && (!b || strstr(g_log[i], b))) return true;
  return false;
}

/* Waits up to 3 s for a log line holding a (and b, when given). */
static void log_expect(const char *a, const char *b) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 3 * g_scale;
  pthread_mutex_lock(&g_log_mu);
  bool found;
  while (!(found = log_has_locked(a, b)))
    if (pthread_cond_timedwait(&g_log_cv, &g_log_mu, &ts) != 0) {
      found = log_has_locked(a, b);
      break;
    }
  if (!found) {
    for (int i = 0; i < g_nlog; i++) fprintf(stderr, "log[%d]: %s\n", i, g_log[i]);
  }
  pthread_mutex_unlock(&g_log_mu);
  ck_assert_msg(found, "no log line with \"%s\" and \"%s\"", a, b ? b : "");
}

static void log_reset(void) {
  pthread_mutex_lock(&g_log_mu);
  for (int i = 0; i < g_nlog; i++) free(g_log[i]);
  g_nlog = 0;
  pthread_mutex_unlock(&g_log_mu);
}

/* ------------------------------------------------------------------------------------ */
/* Handlers: KV_GET echoes the key as the value; BARRIER stalls until released; REPORT_ERROR
 * waits in a receive on its connection. */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static bool g_release, g_in_recv;
static FloeConn *g_seen[64];
static int g_nseen;

static floe_code echo(void *arg, FloeConn *c, const FloeTaskIdentity *peer, uint16_t type,
                      const struct ProtobufCMessage *req, FloeStatus *st) {
  (void)arg;
  ck_assert_uint_eq(type, FLOE__WIRE_KV_GET);
  ck_assert_str_eq(peer->job, "worker");
  const Floe__Dist__KvGetRequest *q = (const Floe__Dist__KvGetRequest *)req;
  pthread_mutex_lock(&g_mu);
  bool seen = false;
  for (int i = 0; i < g_nseen; i++) seen |= g_seen[i] == c;
  if (!seen && g_nseen < 64) g_seen[g_nseen++] = c;
  pthread_mutex_unlock(&g_mu);
  Floe__Dist__Status ok;
  floe__status_to_proto(NULL, &ok);
  Floe__Dist__KvGetResponse r = FLOE__DIST__KV_GET_RESPONSE__INIT;
  r.status = &ok;
  r.value.data = (uint8_t *)q->key;
  r.value.len = strlen(q->key);
  return floe__conn_send(c, FLOE__WIRE_KV_GET_RESPONSE, &r.base, 0, st);
}

static floe_code stall(void *arg, FloeConn *c, const FloeTaskIdentity *peer, uint16_t type,
                       const struct ProtobufCMessage *req, FloeStatus *st) {
  (void)arg, (void)peer, (void)type, (void)req;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  pthread_mutex_lock(&g_mu);
  while (!g_release)
    if (pthread_cond_timedwait(&g_cv, &g_mu, &ts) != 0) break;
  pthread_mutex_unlock(&g_mu);
  Floe__Dist__BarrierResponse r = FLOE__DIST__BARRIER_RESPONSE__INIT;
  return floe__conn_send(c, FLOE__WIRE_BARRIER_RESPONSE, &r.base, 0, st);
}

static floe_code wait_in_recv(void *arg, FloeConn *c, const FloeTaskIdentity *peer,
                              uint16_t type, const struct ProtobufCMessage *req,
                              FloeStatus *st) {
  (void)arg, (void)peer, (void)type, (void)req;
  pthread_mutex_lock(&g_mu);
  g_in_recv = true;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  uint16_t t;
  struct ProtobufCMessage *m = NULL;
  floe_code rc = floe__conn_recv(c, 30000, &t, &m, st);
  floe__wire_free(m);
  return rc;
}

static FloeRpcServer *server(int max_connections, int timeout_ms) {
  FloeRpcServerOptions o;
  memset(&o, 0, sizeof o);
  o.conn = options(g_secret, "chief", 0, timeout_ms);
  o.max_connections = max_connections;
  o.log = log_fn;
  FloeRpcServer *s = NULL;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__rpc_server_start("127.0.0.1:0", &o, &s, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  floe__rpc_server_handle(s, FLOE__WIRE_KV_GET, echo, NULL);
  floe__rpc_server_handle(s, FLOE__WIRE_BARRIER, stall, NULL);
  floe__rpc_server_handle(s, FLOE__WIRE_REPORT_ERROR, wait_in_recv, NULL);
  return s;
}

static FloeConnPool *pool(FloeRpcServer *s, const FloeJobSecret *secret, int task) {
  FloeConnOptions o = options(secret, "worker", task, 3000);
  FloeConnPool *p = NULL;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__conn_pool_new(floe__rpc_server_address(s), &o, &p, &st), FLOE_OK);
  ck_assert_str_eq(floe__conn_pool_address(p), floe__rpc_server_address(s));
  return p;
}

/* One echo call: OK and the value is the key, or the error code with st set. */
static floe_code echo_call(FloeConnPool *p, const char *key, int timeout_ms, FloeStatus *st) {
  Floe__Dist__KvGetRequest q = FLOE__DIST__KV_GET_REQUEST__INIT;
  q.key = (char *)key;
  struct ProtobufCMessage *m = NULL;
  floe_code rc = floe__conn_pool_call(p, FLOE__WIRE_KV_GET, &q.base, FLOE__WIRE_KV_GET_RESPONSE,
                                      timeout_ms, &m, st);
  if (rc != FLOE_OK) return rc;
  const Floe__Dist__KvGetResponse *r = (const Floe__Dist__KvGetResponse *)m;
  ck_assert_uint_eq(r->value.len, strlen(key));
  ck_assert(memcmp(r->value.data, key, r->value.len) == 0);
  ck_assert_int_eq(floe__status_from_proto(r->status, st), FLOE_OK);
  floe__wire_free(m);
  return FLOE_OK;
}

static void echo_ok(FloeConnPool *p, const char *key) {
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = echo_call(p, key, 3000, &st);
  ck_assert_msg(rc == FLOE_OK, "echo %s: %s", key, floe_status_message(&st));
}

static int raw_connect(FloeRpcServer *s) {
  const char *a = floe__rpc_server_address(s);
  int port = atoi(strrchr(a, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

static void setup(void) {
  g_scale = slow_scale();
  g_secret = secret_of(k_secret, "ours");
  g_other = secret_of(k_other, "theirs");
  g_release = g_in_recv = false;
  g_nseen = 0;
  log_reset();
}
static void teardown(void) {
  floe__secret_free(g_secret);
  floe__secret_free(g_other);
  log_reset();
}

/* ------------------------------------------------------------------------------------ */

START_TEST(test_echo_and_status) {
  FloeRpcServer *s = server(0, 3000);
  FloeConnPool *p = pool(s, g_secret, 1);
  for (int i = 0; i < 50; i++) {
    char key[32];
    snprintf(key, sizeof key, "key-%d", i);
    echo_ok(p, key);
  }
  /* One caller at a time: every call went over the one connection, given back and reused. */
  pthread_mutex_lock(&g_mu);
  ck_assert_int_eq(g_nseen, 1);
  pthread_mutex_unlock(&g_mu);
  floe__conn_pool_free(p);
  floe__rpc_server_free(s);

  /* Status both ways; a code this build does not know becomes UNKNOWN, naming it. */
  FloeStatus a = {FLOE_OK, NULL}, b = {FLOE_OK, NULL};
  Floe__Dist__Status m;
  floe_status_set(&a, FLOE_ABORTED, "task restarted");
  floe__status_to_proto(&a, &m);
  ck_assert_int_eq(m.code, FLOE_ABORTED);
  ck_assert_str_eq(m.message, "task restarted");
  ck_assert_int_eq(floe__status_from_proto(&m, &b), FLOE_ABORTED);
  ck_assert_str_eq(floe_status_message(&b), "task restarted");
  floe_status_clear(&a);
  floe__status_to_proto(&a, &m);
  ck_assert_int_eq(m.code, 0);
  ck_assert_str_eq(m.message, "");
  ck_assert_int_eq(floe__status_from_proto(&m, &b), FLOE_OK);
  ck_assert_int_eq(floe__status_from_proto(NULL, &b), FLOE_OK);
  m.code = 999;
  m.message = "from the future";
  floe_code rc = floe__status_from_proto(&m, &b);
  expect(rc, FLOE_UNKNOWN, floe_status_message(&b), "code 999");
  floe_status_clear(&b);
}
END_TEST

typedef struct Client {
  FloeConnPool *p;
  int id, ok;
} Client;

static void *client_main(void *arg) {
  Client *c = arg;
  for (int i = 0; i < 20; i++) {
    char key[48];
    snprintf(key, sizeof key, "client %d call %d", c->id, i);
    FloeStatus st = {FLOE_OK, NULL};
    if (echo_call(c->p, key, 10000, &st) == FLOE_OK) c->ok++;
    else fprintf(stderr, "%s: %s\n", key, floe_status_message(&st));
    floe_status_clear(&st);
  }
  return NULL;
}

START_TEST(test_32_clients) {
  FloeRpcServer *s = server(64, 5000);
  FloeConnPool *p = pool(s, g_secret, 2);
  Client cl[32];
  pthread_t th[32];
  for (int i = 0; i < 32; i++) {
    cl[i] = (Client){p, i, 0};
    ck_assert_int_eq(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
  }
  int ok = 0;
  for (int i = 0; i < 32; i++) {
    pthread_join(th[i], NULL);
    ok += cl[i].ok;
  }
  ck_assert_int_eq(ok, 32 * 20);
  pthread_mutex_lock(&g_mu);
  ck_assert_int_le(g_nseen, 32);  /* at most one connection per caller at a time */
  pthread_mutex_unlock(&g_mu);
  floe__conn_pool_free(p);
  floe__rpc_server_free(s);
}
END_TEST

START_TEST(test_max_connections) {
  FloeRpcServer *s = server(2, 3000);
  FloeConnPool *p = pool(s, g_secret, 3);
  FloeStatus st = {FLOE_OK, NULL};
  FloeConn *a = NULL, *b = NULL, *c = NULL;
  ck_assert_int_eq(floe__conn_pool_get(p, &a, &st), FLOE_OK);
  ck_assert_int_eq(floe__conn_pool_get(p, &b, &st), FLOE_OK);
  /* The third is accepted and closed at once: its handshake meets the close. */
  floe_code rc = floe__conn_pool_get(p, &c, &st);
  ck_assert_msg(rc == FLOE_UNAVAILABLE, "third connection: %d %s", rc, floe_status_message(&st));
  floe_status_clear(&st);
  log_expect("refused a connection from 127.0.0.1:", "2 connections are open, the most allowed "
             "(max_connections)");
  /* One closed: room for a new one once the server has seen the close. */
  floe__conn_pool_put(p, b, true);
  int64_t until = now_ms() + 3000;
  for (;;) {
    rc = floe__conn_pool_get(p, &c, &st);
    if (rc == FLOE_OK || now_ms() > until) break;
    floe_status_clear(&st);
    sleep_ms(20);
  }
  ck_assert_msg(rc == FLOE_OK, "after a close: %s", floe_status_message(&st));
  floe__conn_pool_put(p, a, false);
  floe__conn_pool_put(p, c, false);
  echo_ok(p, "still serving");
  floe__conn_pool_free(p);
  floe__rpc_server_free(s);
}
END_TEST

START_TEST(test_silent_peer_does_not_stall) {
  FloeRpcServer *s = server(0, 2000);
  int silent = raw_connect(s);
  sleep_ms(50); /* the silent peer is accepted first */
  FloeConnPool *p = pool(s, g_secret, 4);
  int64_t t0 = now_ms();
  echo_ok(p, "served beside a silent peer");
  ck_assert_int_lt(now_ms() - t0, 1000 * g_scale);
  /* The silent peer is refused at its handshake's deadline, naming it. */
  log_expect("refused a client", "127.0.0.1:");
  log_expect("refused a client", "within 2000 ms");
  close(silent);
  echo_ok(p, "after");
  floe__conn_pool_free(p);
  floe__rpc_server_free(s);
}
END_TEST

START_TEST(test_wrong_secret) {
  FloeRpcServer *s = server(0, 3000);
  FloeConnPool *bad = pool(s, g_other, 5);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = echo_call(bad, "let me in", 3000, &st);
  expect(rc, FLOE_PERMISSION_DENIED, floe_status_message(&st), "refused this task");
  floe_status_clear(&st);
  log_expect("refused a client", "/job:worker/task:5");
  log_expect("refused a client", "did not verify");
  FloeConnPool *good = pool(s, g_secret, 6);
  echo_ok(good, "still serving");
  floe__conn_pool_free(bad);
  floe__conn_pool_free(good);
  floe__rpc_server_free(s);
}
END_TEST

START_TEST(test_unknown_type_closes_that_connection) {
  FloeRpcServer *s = server(0, 3000);
  FloeConnPool *p = pool(s, g_secret, 7), *q = pool(s, g_secret, 8);
  echo_ok(q, "q connected before");
  FloeStatus st = {FLOE_OK, NULL};
  Floe__Dist__CloseSessionRequest req = FLOE__DIST__CLOSE_SESSION_REQUEST__INIT;
  req.session_handle = "s";
  struct ProtobufCMessage *m = NULL;
  floe_code rc = floe__conn_pool_call(p, FLOE__WIRE_CLOSE_SESSION, &req.base,
                                      FLOE__WIRE_CLOSE_SESSION_RESPONSE, 3000, &m, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "closed the connection");
  floe_status_clear(&st);
  log_expect("CLOSE_SESSION request, which this server has no handler for", "/job:worker/task:7");
  /* A type number the wire does not know: the frame is refused, that connection dropped. */
  FloeConnOptions o = options(g_secret, "worker", 9, 3000);
  FloeConn *c = NULL;
  ck_assert_int_eq(floe__conn_connect(floe__rpc_server_address(s), &o, &c, &st), FLOE_OK);
  uint8_t hdr[FLOE__WIRE_HEADER];
  FloeWireHeader h = {FLOE__WIRE_VERSION, 77, 0, 0};
  floe__wire_header_encode(&h, hdr);
  ck_assert_int_eq(floe__conn_write_raw(c, hdr, sizeof hdr, 1000, &st), FLOE_OK);
  log_expect("dropped the connection from", "type 77");
  uint16_t t;
  rc = floe__conn_recv(c, 3000, &t, &m, &st);
  ck_assert_int_eq(rc, FLOE_UNAVAILABLE);
  floe_status_clear(&st);
  floe__conn_close(c);
  echo_ok(q, "q still served");
  echo_ok(p, "p served on a new connection");
  floe__conn_pool_free(p);
  floe__conn_pool_free(q);
  floe__rpc_server_free(s);
}
END_TEST

typedef struct Call {
  FloeConnPool *p;
  uint16_t type, expect;
  int timeout_ms;
  floe_code rc;
  char msg[512];
} Call;

static void *call_main(void *arg) {
  Call *c = arg;
  FloeStatus st = {FLOE_OK, NULL};
  struct ProtobufCMessage *m = NULL;
  Floe__Dist__BarrierRequest b = FLOE__DIST__BARRIER_REQUEST__INIT;
  Floe__Dist__ReportErrorRequest r = FLOE__DIST__REPORT_ERROR_REQUEST__INIT;
  const struct ProtobufCMessage *req = c->type == FLOE__WIRE_BARRIER ? &b.base : &r.base;
  c->rc = floe__conn_pool_call(c->p, c->type, req, c->expect, c->timeout_ms, &m, &st);
  snprintf(c->msg, sizeof c->msg, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  floe__wire_free(m);
  return NULL;
}

START_TEST(test_free_while_blocked) {
  FloeRpcServer *s = server(0, 5000);
  FloeConnPool *idle = pool(s, g_secret, 10), *busy = pool(s, g_secret, 11);
  echo_ok(idle, "an idle connection after this");
  /* A handler blocked in a receive on its connection (30 s), a peer mid-handshake (5 s). */
  Call call = {busy, FLOE__WIRE_REPORT_ERROR, FLOE__WIRE_REPORT_ERROR_RESPONSE, 20000, 0, ""};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_main, &call), 0);
  pthread_mutex_lock(&g_mu);
  while (!g_in_recv) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  int silent = raw_connect(s);
  sleep_ms(50);
  int64_t t0 = now_ms();
  floe__rpc_server_free(s);
  int64_t took = now_ms() - t0;
  ck_assert_msg(took < 1000 * g_scale, "free took %lld ms", (long long)took);
  pthread_join(th, NULL);
  expect(call.rc, FLOE_UNAVAILABLE, call.msg, "closed the connection");
  /* Nothing was logged of the connections the free itself ended. */
  pthread_mutex_lock(&g_log_mu);
  for (int i = 0; i < g_nlog; i++) fprintf(stderr, "unexpected log: %s\n", g_log[i]);
  ck_assert_int_eq(g_nlog, 0);
  pthread_mutex_unlock(&g_log_mu);
  close(silent);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = echo_call(idle, "nobody there", 1000, &st);
  ck_assert_int_eq(rc, FLOE_UNAVAILABLE);
  floe_status_clear(&st);
  floe__conn_pool_free(idle);
  floe__conn_pool_free(busy);
}
END_TEST

START_TEST(test_call_timeout_and_pool_shutdown) {
  FloeRpcServer *s = server(0, 3000);
  FloeConnPool *p = pool(s, g_secret, 12);
  Call call = {p, FLOE__WIRE_BARRIER, FLOE__WIRE_BARRIER_RESPONSE, 200, 0, ""};
  int64_t t0 = now_ms();
  call_main(&call);
  int64_t took = now_ms() - t0;
  expect(call.rc, FLOE_DEADLINE_EXCEEDED, call.msg, floe__rpc_server_address(s));
  ck_assert_msg(strstr(call.msg, "BARRIER call"), "%s", call.msg);
  ck_assert_msg(took >= 190 && took < 1500 * g_scale, "timed out after %lld ms", (long long)took);
  /* A caller waiting on the pool is woken by its shutdown, and later gets are refused. */
  Call waiting = {p, FLOE__WIRE_BARRIER, FLOE__WIRE_BARRIER_RESPONSE, 10000, 0, ""};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_main, &waiting), 0);
  sleep_ms(200);
  t0 = now_ms();
  floe__conn_pool_shutdown(p);
  pthread_join(th, NULL);
  ck_assert_int_lt(now_ms() - t0, 1000 * g_scale);
  expect(waiting.rc, FLOE_UNAVAILABLE, waiting.msg, "shut down by this side");
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = echo_call(p, "after", 1000, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "was shut down");
  floe_status_clear(&st);
  pthread_mutex_lock(&g_mu);
  g_release = true;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  floe__conn_pool_free(p);
  floe__rpc_server_free(s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("rpc");
  TCase *tc = tcase_create("rpc");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_echo_and_status);
  tcase_add_test(tc, test_32_clients);
  tcase_add_test(tc, test_max_connections);
  tcase_add_test(tc, test_silent_peer_does_not_stall);
  tcase_add_test(tc, test_wrong_secret);
  tcase_add_test(tc, test_unknown_type_closes_that_connection);
  tcase_add_test(tc, test_free_while_blocked);
  tcase_add_test(tc, test_call_timeout_and_pool_shutdown);
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
