/* SPDX-License-Identifier: Apache-2.0 */
/* test_coord.c - the coordination service and its agents (core/dist/coord.c) in one process:
 * a chief's service on an rpc server over 127.0.0.1 and agents on threads for the workers of
 * a 1 chief + 3 worker spec. Registration and wait_all in spec order; a silent agent found
 * by the watchdog and the error fanned out through heartbeats; a restart told by its new
 * incarnation; refusals of a task outside the spec, of a request for another task than the
 * connection proved and of a heartbeat before registering; error reports; barriers (all,
 * listed, timed out naming who is missing); the key-value store (waiting gets, overwrite,
 * bounds); an agent started before its chief. Heartbeats every 50 ms, timeout 300 ms. */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "core.h"
#include "dist.pb-c.h"

#define CHIEF_INC 0xc1e0000000000001ull

static const char k_secret[] = "the job's secret: 32 bytes long!";
static FloeJobSecret *g_secret;

/* Under valgrind (threads run one at a time, 20-50 times slower) or a sanitizer a 300 ms
 * heartbeat timeout is missed by live tasks: every time here is scaled by 10 there. */
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
#define TIMEOUT_MS (300 * g_scale)
#define INTERVAL_MS (50 * g_scale)
static FloeCoordOptions k_opts;

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
static uint64_t inc_of(int task) {
  return 0xabc0000000000000ull + (uint64_t)task;
}

/* ------------------------------------------------------------------------------------ */
/* Errors told to on_error, kept for the tests */

#define ERR_MAX 16
typedef struct Errors {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  floe_code code[ERR_MAX];
  char msg[ERR_MAX][600];
} Errors;

static void errors_init(Errors *e) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
}
static void errors_destroy(Errors *e) {
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
}
static void on_error(void *arg, floe_code code, const char *msg) {
  Errors *e = arg;
  pthread_mutex_lock(&e->mu);
  if (e->n < ERR_MAX) {
    e->code[e->n] = code;
    snprintf(e->msg[e->n], sizeof e->msg[e->n], "%s", msg);
    e->n++;
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}
/* Waits up to ms for an error of code whose message holds a and b; returns when it came
 * (ms since the call), failing the test if it did not. */
static int64_t errors_wait(Errors *e, floe_code code, const char *a, const char *b, int ms) {
  int64_t t0 = now_ms();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&e->mu);
  bool found = false;
  for (;;) {
    for (int i = 0; i < e->n && !found; i++)
      found = e->code[i] == code && strstr(e->msg[i], a) && (!b || strstr(e->msg[i], b));
    if (found || pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0) break;
  }
  if (!found)
    for (int i = 0; i < e->n; i++) fprintf(stderr, "error %d: %d %s\n", i, e->code[i], e->msg[i]);
  pthread_mutex_unlock(&e->mu);
  ck_assert_msg(found, "no error %d with \"%s\" and \"%s\" within %d ms", code, a, b ? b : "",
                ms);
  return now_ms() - t0;
}
static int errors_count(Errors *e) {
  pthread_mutex_lock(&e->mu);
  int n = e->n;
  pthread_mutex_unlock(&e->mu);
  return n;
}

/* ------------------------------------------------------------------------------------ */
/* A chief: rpc server, spec, service */

typedef struct Chief {
  FloeRpcServer *server;
  FloeClusterSpec *spec;
  FloeCoordService *svc;
  Errors errors;
} Chief;

static FloeConnOptions options(const char *job, int task, uint64_t inc) {
  FloeConnOptions o;
  memset(&o, 0, sizeof o);
  o.secret = g_secret;
  snprintf(o.self.job, sizeof o.self.job, "%s", job);
  o.self.task = task;
  o.self.incarnation = inc;
  o.timeout_ms = 2000;
  return o;
}

static void chief_start_at(Chief *c, const char *address) {
  errors_init(&c->errors);
  FloeStatus st = {FLOE_OK, NULL};
  FloeRpcServerOptions so;
  memset(&so, 0, sizeof so);
  so.conn = options("chief", 0, CHIEF_INC);
  floe_code rc = floe__rpc_server_start(address, &so, &c->server, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  char json[512];
  snprintf(json, sizeof json,
           "{\"cluster\": {\"chief\": [\"%s\"], \"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\", "
           "\"127.0.0.1:3\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
           floe__rpc_server_address(c->server));
  ck_assert_int_eq(floe__cluster_parse(json, strlen(json), "test", &c->spec, &st), FLOE_OK);
  Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
  id.job = "chief";
  id.incarnation = CHIEF_INC;
  Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
  info.task = &id;
  info.address = (char *)floe__rpc_server_address(c->server);
  info.transport = "local";
  rc = floe__coord_service_start(c->spec, &k_opts, &info, c->server, on_error, &c->errors,
                                 &c->svc, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
}
static void chief_start(Chief *c) {
  chief_start_at(c, "127.0.0.1:0");
}
static void chief_free(Chief *c) {
  floe__coord_service_free(c->svc);
  floe__rpc_server_free(c->server);
  floe__cluster_free(c->spec);
  errors_destroy(&c->errors);
}

/* ------------------------------------------------------------------------------------ */
/* Agents */

typedef struct Agent {
  FloeCoordAgent *a;
  Errors errors;
} Agent;

static floe_code agent_try(Agent *ag, const char *chief, const char *job, int task, uint64_t inc,
                           int register_ms, FloeStatus *st) {
  errors_init(&ag->errors);
  FloeConnOptions o = options(job, task, inc);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", task + 1);
  uint8_t nonce[32];
  memset(nonce, task, sizeof nonce);
  Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
  info.address = addr;
  info.transport = "local";
  info.data_nonce.data = nonce;
  info.data_nonce.len = sizeof nonce;
  return floe__coord_agent_start(chief, &o, &k_opts, register_ms, &info, on_error, &ag->errors,
                                 &ag->a, st);
}
static void agent_start(Agent *ag, Chief *c, int task) {
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = agent_try(ag, floe__rpc_server_address(c->server), "worker", task, inc_of(task),
                           2000, &st);
  ck_assert_msg(rc == FLOE_OK, "worker %d: %s", task, floe_status_message(&st));
}
static void agent_free(Agent *ag) {
  floe__coord_agent_free(ag->a);
  ag->a = NULL;
  errors_destroy(&ag->errors);
}

static void check_infos(const FloeCoordInfos *in, const char *chief_addr) {
  ck_assert_int_eq(in->n, 4);
  ck_assert_str_eq(in->infos[0]->task->job, "chief");
  ck_assert(in->infos[0]->task->incarnation == CHIEF_INC);
  ck_assert_str_eq(in->infos[0]->address, chief_addr);
  for (int i = 1; i < 4; i++) {
    const Floe__Dist__TaskInfo *t = in->infos[i];
    ck_assert_str_eq(t->task->job, "worker");
    ck_assert_int_eq(t->task->task, i - 1);
    ck_assert(t->task->incarnation == inc_of(i - 1));
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", i);
    ck_assert_str_eq(t->address, addr);
    ck_assert_str_eq(t->transport, "local");
    ck_assert_uint_eq(t->data_nonce.len, 32);
    ck_assert_uint_eq(t->data_nonce.data[31], (unsigned)(i - 1));
  }
}

typedef struct Worker {
  Chief *chief;
  Agent agent;
  int task;
  floe_code rc;
  char msg[600];
} Worker;

static void *worker_register_and_wait(void *arg) {
  Worker *w = arg;
  agent_start(&w->agent, w->chief, w->task);
  ck_assert(floe__coord_agent_leader_incarnation(w->agent.a) == CHIEF_INC);
  ck_assert_int_eq(floe__coord_agent_self(w->agent.a)->task, w->task);
  FloeCoordInfos infos;
  FloeStatus st = {FLOE_OK, NULL};
  w->rc = floe__coord_agent_wait_all(w->agent.a, 5000, &infos, &st);
  snprintf(w->msg, sizeof w->msg, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  if (w->rc == FLOE_OK) check_infos(&infos, floe__rpc_server_address(w->chief->server));
  floe__coord_infos_clear(&infos);
  return NULL;
}

/* Starts the 3 workers' agents on threads; each waits for all. */
static void start_workers(Chief *c, Worker w[3]) {
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].chief = c;
    w[i].task = i;
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_register_and_wait, &w[i]), 0);
  }
  FloeCoordInfos infos;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_service_wait_all(c->svc, 5000, &infos, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  check_infos(&infos, floe__rpc_server_address(c->server));
  floe__coord_infos_clear(&infos);
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(w[i].rc == FLOE_OK, "worker %d: %s", i, w[i].msg);
  }
}

static void setup(void) {
  g_scale = slow_scale();
  k_opts = (FloeCoordOptions){INTERVAL_MS, TIMEOUT_MS};
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__secret_from_bytes(k_secret, strlen(k_secret), "test", &g_secret, &st),
                   FLOE_OK);
}
static void teardown(void) {
  floe__secret_free(g_secret);
}

/* ------------------------------------------------------------------------------------ */

START_TEST(test_register_and_wait_all) {
  Chief c;
  chief_start(&c);
  /* Before anyone registers: a timeout names who is missing. */
  FloeCoordInfos infos;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_service_wait_all(c.svc, 50, &infos, &st);
  expect(rc, FLOE_DEADLINE_EXCEEDED, floe_status_message(&st),
         "3 of 4 tasks did not register within 50 ms: /job:worker/task:0, /job:worker/task:1, "
         "/job:worker/task:2");
  floe_status_clear(&st);
  Worker w[3];
  start_workers(&c, w);
  ck_assert_int_eq(floe__coord_service_error(c.svc, &st), FLOE_OK);
  for (int i = 0; i < 3; i++) agent_free(&w[i].agent);
  ck_assert_int_eq(errors_count(&c.errors), 0);
  chief_free(&c);
}
END_TEST

START_TEST(test_silent_task) {
  Chief c;
  chief_start(&c);
  Worker w[3];
  start_workers(&c, w);
  sleep_ms(2 * TIMEOUT_MS); /* heartbeats keep everyone alive meanwhile */
  ck_assert_int_eq(errors_count(&c.errors), 0);
  agent_free(&w[1].agent);
  char who[64];
  snprintf(who, sizeof who, "/job:worker/task:1 (incarnation %016" PRIx64 ")", inc_of(1));
  int64_t took = errors_wait(&c.errors, FLOE_UNAVAILABLE, who, "sent no heartbeat for",
                             3000 * g_scale);
  ck_assert_msg(took <= TIMEOUT_MS + 1000 * g_scale, "found after %lld ms", (long long)took);
  ck_assert_msg(took >= TIMEOUT_MS - INTERVAL_MS - 20, "found after only %lld ms", (long long)took);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_service_error(c.svc, &st);
  char tmo[64];
  snprintf(tmo, sizeof tmo, "heartbeat timeout %d ms", TIMEOUT_MS);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), tmo);
  floe_status_clear(&st);
  /* The others hear of it through their heartbeats. */
  errors_wait(&w[0].agent.errors, FLOE_UNAVAILABLE, who, NULL, 2000 * g_scale);
  errors_wait(&w[2].agent.errors, FLOE_UNAVAILABLE, who, NULL, 2000 * g_scale);
  /* Told once each, though heartbeats go on. */
  sleep_ms(4 * INTERVAL_MS);
  ck_assert_int_eq(errors_count(&c.errors), 1);
  ck_assert_int_eq(errors_count(&w[0].agent.errors), 1);
  /* A wait or a barrier now fails with the cluster's error. */
  rc = floe__coord_agent_barrier(w[0].agent.a, "after", 1000, NULL, 0, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "the cluster failed");
  floe_status_clear(&st);
  agent_free(&w[0].agent);
  agent_free(&w[2].agent);
  chief_free(&c);
}
END_TEST

START_TEST(test_restart_is_aborted) {
  Chief c;
  chief_start(&c);
  Agent old, fresh;
  agent_start(&old, &c, 0);
  agent_free(&old);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = agent_try(&fresh, floe__rpc_server_address(c.server), "worker", 0, 0x5eed,
                           2000, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  char want[160];
  snprintf(want, sizeof want, "incarnation %016" PRIx64 " was replaced by %016" PRIx64,
           inc_of(0), (uint64_t)0x5eed);
  errors_wait(&c.errors, FLOE_ABORTED, "/job:worker/task:0 restarted", want, 1000 * g_scale);
  /* The restart is told to the chief (its sessions lose what ran on the old incarnation),
   * but the task is back: no cluster error, and once the others register the cluster is
   * whole for new work (wait_all answers every task, with the new incarnation). */
  Agent more[2];
  agent_start(&more[0], &c, 1);
  agent_start(&more[1], &c, 2);
  FloeCoordInfos infos;
  rc = floe__coord_service_wait_all(c.svc, 1000 * g_scale, &infos, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  bool seen = false;
  for (int i = 0; i < infos.n; i++)
    seen |= !strcmp(infos.infos[i]->task->job, "worker") && infos.infos[i]->task->task == 0 &&
            infos.infos[i]->task->incarnation == 0x5eed;
  ck_assert_msg(seen, "wait_all lacks worker 0's new incarnation");
  floe__coord_infos_clear(&infos);
  ck_assert_int_eq(floe__coord_service_error(c.svc, &st), FLOE_OK);
  usleep(300 * 1000 * g_scale); /* a few heartbeats: none carries the restart to the new one */
  ck_assert_int_eq(errors_count(&fresh.errors), 0);
  agent_free(&fresh);
  agent_free(&more[0]);
  agent_free(&more[1]);
  chief_free(&c);
}
END_TEST

START_TEST(test_refusals) {
  Chief c;
  chief_start(&c);
  const char *addr = floe__rpc_server_address(c.server);
  FloeStatus st = {FLOE_OK, NULL};
  /* Not in the spec: refused at once, not retried until the register timeout. */
  Agent ag;
  int64_t t0 = now_ms();
  floe_code rc = agent_try(&ag, addr, "worker", 7, 7, 5000, &st);
  expect(rc, FLOE_NOT_FOUND, floe_status_message(&st),
         "/job:worker/task:7 (incarnation 0000000000000007) is not a task of the cluster (test)");
  ck_assert_int_lt(now_ms() - t0, 1000 * g_scale);
  floe_status_clear(&st);
  errors_destroy(&ag.errors);
  rc = agent_try(&ag, addr, "ps", 0, 8, 5000, &st);
  expect(rc, FLOE_NOT_FOUND, floe_status_message(&st), "/job:ps/task:0");
  floe_status_clear(&st);
  errors_destroy(&ag.errors);

  /* A connection proven as worker 1 asking for worker 2, or for another incarnation. */
  FloeConnOptions o = options("worker", 1, inc_of(1));
  FloeConnPool *p = NULL;
  ck_assert_int_eq(floe__conn_pool_new(addr, &o, &p, &st), FLOE_OK);
  for (int k = 0; k < 3; k++) {
    Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
    id.job = "worker";
    id.task = k == 0 ? 2 : 1;
    id.incarnation = k == 0 ? inc_of(2) : 0x666;
    Floe__Dist__RegisterTaskRequest q = FLOE__DIST__REGISTER_TASK_REQUEST__INIT;
    Floe__Dist__HeartbeatRequest h = FLOE__DIST__HEARTBEAT_REQUEST__INIT;
    q.task = h.task = &id;
    struct ProtobufCMessage *m = NULL;
    if (k < 2) {
      rc = floe__conn_pool_call(p, FLOE__WIRE_REGISTER_TASK, &q.base,
                                FLOE__WIRE_REGISTER_TASK_RESPONSE, 2000, &m, &st);
      ck_assert_int_eq(rc, FLOE_OK);
      rc = floe__status_from_proto(((Floe__Dist__RegisterTaskResponse *)m)->status, &st);
      char what[96];
      snprintf(what, sizeof what, "speaks for /job:worker/task:%d (incarnation %016" PRIx64 ")",
               id.task, id.incarnation);
      expect(rc, FLOE_PERMISSION_DENIED, floe_status_message(&st), what);
      ck_assert_msg(strstr(floe_status_message(&st), "a connection proven as /job:worker/task:1"),
                    "%s", floe_status_message(&st));
    } else {
      /* Its own task, but before registering: a heartbeat is refused. */
      id.incarnation = inc_of(1);
      rc = floe__conn_pool_call(p, FLOE__WIRE_HEARTBEAT, &h.base, FLOE__WIRE_HEARTBEAT_RESPONSE,
                                2000, &m, &st);
      ck_assert_int_eq(rc, FLOE_OK);
      rc = floe__status_from_proto(((Floe__Dist__HeartbeatResponse *)m)->status, &st);
      expect(rc, FLOE_FAILED_PRECONDITION, floe_status_message(&st), "has not registered");
    }
    floe_status_clear(&st);
    floe__wire_free(m);
  }
  floe__conn_pool_free(p);
  /* A TaskInfo naming another task than the agent's own is refused before any call. */
  Floe__Dist__TaskId other = FLOE__DIST__TASK_ID__INIT;
  other.job = "worker";
  other.task = 2;
  Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
  info.task = &other;
  FloeCoordAgent *a = NULL;
  o = options("worker", 1, inc_of(1));
  rc = floe__coord_agent_start(addr, &o, &k_opts, 1000, &info, NULL, NULL, &a, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "names another task");
  floe_status_clear(&st);
  /* Nothing of this is a cluster error. */
  ck_assert_int_eq(floe__coord_service_error(c.svc, &st), FLOE_OK);
  ck_assert_int_eq(errors_count(&c.errors), 0);
  chief_free(&c);
}
END_TEST

START_TEST(test_report_error) {
  Chief c;
  chief_start(&c);
  Agent a0, a1;
  agent_start(&a0, &c, 0);
  agent_start(&a1, &c, 1);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_agent_report(a0.a, FLOE_OK, "fine", &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "needs an error code");
  floe_status_clear(&st);
  rc = floe__coord_agent_report(a0.a, FLOE_INTERNAL, "disk full", &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  char want[128];
  snprintf(want, sizeof want, "/job:worker/task:0 (incarnation %016" PRIx64 ") reported: disk full",
           inc_of(0));
  errors_wait(&c.errors, FLOE_INTERNAL, want, NULL, 1000 * g_scale);
  errors_wait(&a1.errors, FLOE_INTERNAL, want, NULL, 2000 * g_scale);
  errors_wait(&a0.errors, FLOE_INTERNAL, want, NULL, 2000 * g_scale);
  /* The chief's own report is kept second: the first error stays the cluster's. */
  floe__coord_service_report(c.svc, FLOE_CANCELLED, "the chief gives up");
  errors_wait(&c.errors, FLOE_CANCELLED, "the chief gives up", NULL, 1000 * g_scale);
  rc = floe__coord_service_error(c.svc, &st);
  expect(rc, FLOE_INTERNAL, floe_status_message(&st), "disk full");
  floe_status_clear(&st);
  agent_free(&a0);
  agent_free(&a1);
  chief_free(&c);
}
END_TEST

typedef struct Arrival {
  FloeCoordAgent *a; /* NULL: the chief, in process */
  FloeCoordService *svc;
  const char *id;
  int timeout_ms;
  const FloeTaskIdentity *tasks;
  int n_tasks;
  floe_code rc;
  char msg[600];
  pthread_t th;
} Arrival;

static void *arrive_main(void *arg) {
  Arrival *r = arg;
  FloeStatus st = {FLOE_OK, NULL};
  r->rc = r->a ? floe__coord_agent_barrier(r->a, r->id, r->timeout_ms, r->tasks, r->n_tasks, &st)
               : floe__coord_service_barrier(r->svc, r->id, r->timeout_ms, r->tasks, r->n_tasks,
                                             &st);
  snprintf(r->msg, sizeof r->msg, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  return NULL;
}

static void arrive(Arrival *r, FloeCoordAgent *a, FloeCoordService *svc, const char *id,
                   int timeout_ms, const FloeTaskIdentity *tasks, int n_tasks) {
  memset(r, 0, sizeof *r);
  *r = (Arrival){a, svc, id, timeout_ms, tasks, n_tasks, FLOE_OK, "", 0};
  ck_assert_int_eq(pthread_create(&r->th, NULL, arrive_main, r), 0);
}

START_TEST(test_barriers) {
  Chief c;
  chief_start(&c);
  Worker w[3];
  start_workers(&c, w);
  /* Every task: the three workers and the chief. */
  Arrival r[4];
  for (int i = 0; i < 3; i++) arrive(&r[i], w[i].agent.a, NULL, "all", 3000, NULL, 0);
  sleep_ms(100);
  arrive(&r[3], NULL, c.svc, "all", 3000, NULL, 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(r[i].th, NULL);
    ck_assert_msg(r[i].rc == FLOE_OK, "arrival %d: %s", i, r[i].msg);
  }
  /* Two listed workers meet without the others. */
  FloeTaskIdentity two[2] = {{"worker", 0, 0}, {"worker", 1, 0}};
  arrive(&r[0], w[0].agent.a, NULL, "two", 3000, two, 2);
  arrive(&r[1], w[1].agent.a, NULL, "two", 3000, two, 2);
  for (int i = 0; i < 2; i++) {
    pthread_join(r[i].th, NULL);
    ck_assert_msg(r[i].rc == FLOE_OK, "listed arrival %d: %s", i, r[i].msg);
  }
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_agent_barrier(w[2].agent.a, "two", 1000, two, 2, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st),
         "barrier \"two\": /job:worker/task:2 is not among its tasks");
  floe_status_clear(&st);
  rc = floe__coord_agent_barrier(w[0].agent.a, "two", 1000, NULL, 0, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "names other tasks");
  floe_status_clear(&st);
  char long_id[FLOE__COORD_MAX_BARRIER_ID + 2];
  memset(long_id, 'b', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  rc = floe__coord_agent_barrier(w[0].agent.a, long_id, 1000, NULL, 0, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "FLOE__COORD_MAX_BARRIER_ID (256)");
  floe_status_clear(&st);
  /* Worker 2 never comes: everyone's wait fails naming it, and only it. */
  arrive(&r[0], w[0].agent.a, NULL, "late", TIMEOUT_MS, NULL, 0);
  arrive(&r[1], w[1].agent.a, NULL, "late", TIMEOUT_MS, NULL, 0);
  arrive(&r[2], NULL, c.svc, "late", TIMEOUT_MS, NULL, 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(r[i].th, NULL);
    expect(r[i].rc, FLOE_DEADLINE_EXCEEDED, r[i].msg,
           "did not arrive");
    ck_assert_msg(strstr(r[i].msg, "): /job:worker/task:2 did not arrive"), "%s", r[i].msg);
  }
  /* A timed-out barrier is not a cluster error. */
  ck_assert_int_eq(floe__coord_service_error(c.svc, &st), FLOE_OK);
  for (int i = 0; i < 3; i++) agent_free(&w[i].agent);
  chief_free(&c);
}
END_TEST

typedef struct Getter {
  FloeCoordAgent *a;
  const char *key;
  floe_code rc;
  char value[64];
  int64_t took;
} Getter;

static void *get_main(void *arg) {
  Getter *g = arg;
  FloeStatus st = {FLOE_OK, NULL};
  void *v = NULL;
  size_t n = 0;
  int64_t t0 = now_ms();
  g->rc = floe__coord_agent_kv_get(g->a, g->key, 3000, &v, &n, &st);
  g->took = now_ms() - t0;
  if (g->rc == FLOE_OK) snprintf(g->value, sizeof g->value, "%.*s", (int)n, (char *)v);
  floe__free(v);
  floe_status_clear(&st);
  return NULL;
}

START_TEST(test_key_value) {
  Chief c;
  chief_start(&c);
  Agent a0, a1;
  agent_start(&a0, &c, 0);
  agent_start(&a1, &c, 1);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__coord_agent_kv_insert(a0.a, "addr/0", "blob-0", 6, false, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  void *v = NULL;
  size_t n = 0;
  ck_assert_int_eq(floe__coord_agent_kv_get(a1.a, "addr/0", 0, &v, &n, &st), FLOE_OK);
  ck_assert_uint_eq(n, 6);
  ck_assert_str_eq(v, "blob-0");
  floe__free(v);
  ck_assert_int_eq(floe__coord_service_kv_get(c.svc, "addr/0", 0, &v, &n, &st), FLOE_OK);
  ck_assert_str_eq(v, "blob-0");
  floe__free(v);
  /* Absent: at once with 0, after the wait otherwise. */
  rc = floe__coord_agent_kv_get(a1.a, "nothing", 0, &v, &n, &st);
  expect(rc, FLOE_NOT_FOUND, floe_status_message(&st), "key \"nothing\" is not in the store");
  floe_status_clear(&st);
  rc = floe__coord_agent_kv_get(a1.a, "nothing", 100, &v, &n, &st);
  expect(rc, FLOE_DEADLINE_EXCEEDED, floe_status_message(&st),
         "key \"nothing\" was not inserted within 100 ms");
  floe_status_clear(&st);
  ck_assert_ptr_null(v);
  /* A get waiting for a later insert. */
  Getter g = {a1.a, "late", FLOE_UNKNOWN, "", 0};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, get_main, &g), 0);
  sleep_ms(200);
  ck_assert_int_eq(floe__coord_service_kv_insert(c.svc, "late", "here", 4, false, &st), FLOE_OK);
  pthread_join(th, NULL);
  ck_assert_int_eq(g.rc, FLOE_OK);
  ck_assert_str_eq(g.value, "here");
  ck_assert_msg(g.took >= 150 && g.took < 2000 * g_scale, "waited %lld ms", (long long)g.took);
  /* Overwrites only when allowed. */
  rc = floe__coord_agent_kv_insert(a1.a, "addr/0", "other", 5, false, &st);
  expect(rc, FLOE_ALREADY_EXISTS, floe_status_message(&st),
         "key \"addr/0\" is already in the store");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__coord_agent_kv_insert(a1.a, "addr/0", "other", 5, true, &st), FLOE_OK);
  ck_assert_int_eq(floe__coord_agent_kv_get(a0.a, "addr/0", 0, &v, &n, &st), FLOE_OK);
  ck_assert_uint_eq(n, 5);
  ck_assert_str_eq(v, "other");
  floe__free(v);
  /* Bounds, on both sides of the wire. */
  size_t big = FLOE__COORD_MAX_VALUE + 1;
  char *blob = calloc(1, big);
  rc = floe__coord_agent_kv_insert(a0.a, "big", blob, big, false, &st);
  expect(rc, FLOE_RESOURCE_EXHAUSTED, floe_status_message(&st), "FLOE__COORD_MAX_VALUE (65536)");
  floe_status_clear(&st);
  rc = floe__coord_service_kv_insert(c.svc, "big", blob, big, false, &st);
  expect(rc, FLOE_RESOURCE_EXHAUSTED, floe_status_message(&st), "FLOE__COORD_MAX_VALUE");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__coord_agent_kv_insert(a0.a, "big", blob, big - 1, false, &st), FLOE_OK);
  free(blob);
  char long_key[FLOE__COORD_MAX_KEY + 2];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  rc = floe__coord_agent_kv_insert(a0.a, long_key, "x", 1, false, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "FLOE__COORD_MAX_KEY (256)");
  floe_status_clear(&st);
  rc = floe__coord_agent_kv_insert(a0.a, "", "x", 1, false, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "key is empty");
  floe_status_clear(&st);
  /* The key count's limit, in process (4096 tiny keys). */
  for (int i = 0; i < FLOE__COORD_MAX_KEYS; i++) {
    char key[32];
    snprintf(key, sizeof key, "k%d", i);
    rc = floe__coord_service_kv_insert(c.svc, key, "", 0, false, &st);
    if (rc != FLOE_OK) break;
  }
  expect(rc, FLOE_RESOURCE_EXHAUSTED, floe_status_message(&st),
         "the most allowed (FLOE__COORD_MAX_KEYS)");
  floe_status_clear(&st);
  agent_free(&a0);
  agent_free(&a1);
  chief_free(&c);
}
END_TEST

typedef struct LateStart {
  char address[64];
  Agent agent;
  floe_code rc;
  char msg[600];
  int64_t took;
} LateStart;

static void *late_main(void *arg) {
  LateStart *l = arg;
  FloeStatus st = {FLOE_OK, NULL};
  int64_t t0 = now_ms();
  l->rc = agent_try(&l->agent, l->address, "worker", 0, inc_of(0), 5000, &st);
  l->took = now_ms() - t0;
  snprintf(l->msg, sizeof l->msg, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  return NULL;
}

START_TEST(test_chief_comes_late) {
  /* A free port, then nobody there for 500 ms. */
  FloeStatus st = {FLOE_OK, NULL};
  FloeListener *l = NULL;
  ck_assert_int_eq(floe__listener_open("127.0.0.1:0", &l, &st), FLOE_OK);
  LateStart late;
  memset(&late, 0, sizeof late);
  snprintf(late.address, sizeof late.address, "%s", floe__listener_address(l));
  floe__listener_close(l);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, late_main, &late), 0);
  sleep_ms(500);
  Chief c;
  chief_start_at(&c, late.address);
  pthread_join(th, NULL);
  ck_assert_msg(late.rc == FLOE_OK, "%s", late.msg);
  ck_assert_msg(late.took >= 450, "registered after %lld ms", (long long)late.took);
  agent_free(&late.agent);
  /* With nobody ever there, the start gives up at its register timeout, saying so. */
  Agent never;
  int64_t t0 = now_ms();
  floe_code rc = agent_try(&never, "127.0.0.1:9", "worker", 0, 1, 300, &st);
  int64_t took = now_ms() - t0;
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st),
         "could not register with the chief at 127.0.0.1:9 within 300 ms");
  ck_assert_msg(took >= 200 && took < 1500 * g_scale, "gave up after %lld ms", (long long)took);
  floe_status_clear(&st);
  errors_destroy(&never.errors);
  chief_free(&c);
}
END_TEST

START_TEST(test_chief_gone) {
  Chief c;
  chief_start(&c);
  Agent a;
  agent_start(&a, &c, 0);
  const char *addr = floe__rpc_server_address(c.server);
  char where[64];
  snprintf(where, sizeof where, "the chief at %s has not answered heartbeats", addr);
  chief_free(&c);
  errors_wait(&a.errors, FLOE_UNAVAILABLE, where, NULL, TIMEOUT_MS + 1000 * g_scale);
  agent_free(&a);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coord");
  TCase *tc = tcase_create("coord");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_register_and_wait_all);
  tcase_add_test(tc, test_silent_task);
  tcase_add_test(tc, test_restart_is_aborted);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_report_error);
  tcase_add_test(tc, test_barriers);
  tcase_add_test(tc, test_key_value);
  tcase_add_test(tc, test_chief_comes_late);
  tcase_add_test(tc, test_chief_gone);
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
