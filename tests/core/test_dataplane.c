/* SPDX-License-Identifier: Apache-2.0 */
/* test_dataplane.c - the data plane (core/dist/dataplane.c): tasks as runtimes of one process,
 * each with its own transport manager and data plane, connect all-to-all over the local
 * transport and fabric (tcp;ofi_rxm, shm), tensors cross through rendezvous following the
 * route, and hellos that must be refused are: a wrong secret, a hello replayed to a new
 * incarnation, a second connection claiming a connected identity, an unknown task. A connect
 * nobody answers times out naming the peer; drop_peer fails a pending Recv.
 *
 * Hellos made here come from the documented parts: floe__auth_data_proof (checked against
 * the HMAC written out in test_wire-style below) and the fixed layout. */
#define _GNU_SOURCE
#include <check.h>
#include <limits.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "dist.pb-c.h"

static const char secret_bytes[] = "the data plane's test secret";
static const char other_secret_bytes[] = "not the data plane's test secret";

/* ---- set-up ---------------------------------------------------------------------------- */

/* The transport the runtimes made from now on use; false (and the reason printed) when it
 * cannot run here. */
static bool use_transport(const char *transport, const char *provider) {
  setenv("FLOE_TRANSPORT", transport, 1);
  if (provider)
    setenv("FLOE_FABRIC_PROVIDER", provider, 1);
  else
    unsetenv("FLOE_FABRIC_PROVIDER");
  if (strcmp(transport, "fabric") != 0) return true;
  const char *dir = getenv("FLOE_FABRIC_DIR");
  char so[PATH_MAX];
  snprintf(so, sizeof so, "%s/floe-transport-fabric.so", dir ? dir : "");
  if (!dir || !*dir || access(so, R_OK) != 0) {
    printf("SKIP %s (%s): the fabric transport was not built (no libfabric, or "
           "--enable-fabric=no)\n", transport, provider);
    return false;
  }
  return true;
}

static FloeRuntime *runtime(void) {
  const char *transport = getenv("FLOE_TRANSPORT");
  const char *plugins = getenv("FLOE_PLUGIN_PATH");
  const char *tdir = getenv(strcmp(transport, "fabric") == 0 ? "FLOE_FABRIC_DIR"
                                                              : "FLOE_TRANSPORT_DIR");
  ck_assert_msg(plugins && tdir, "FLOE_PLUGIN_PATH and the transport's directory are not set "
                "(run through make check)");
  char path[2 * PATH_MAX + 2];
  snprintf(path, sizeof path, "%s:%s", plugins, tdir);
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = path;
  o.plugins = "";
  o.num_threads = 1;
  o.skip_install_dir = 1;
  FloeStatus st = {FLOE_OK, NULL};
  FloeRuntime *rt = floe_runtime_new(&o, &st);
  ck_assert_msg(rt != NULL, "%s", floe_status_message(&st));
  return rt;
}

static FloeJobSecret *secret(const char *bytes) {
  FloeJobSecret *s = NULL;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__secret_from_bytes(bytes, strlen(bytes), "test secret", &s, &st),
                   FLOE_OK);
  return s;
}

/* One task: a runtime, its data plane and the TaskInfo it publishes. */
typedef struct Node {
  FloeRuntime *rt;
  FloeDataPlane *dp;
  FloeTaskIdentity id;
  char job[16];
  Floe__Dist__TaskId tid;
  Floe__Dist__TaskInfo info;
  char dev[96];  /* its CPU device's full name */
} Node;

static uint64_t draw(void) {
  uint64_t v;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__auth_random((uint8_t *)&v, sizeof v, &st), FLOE_OK);
  return v;
}

static void node_up(Node *n, const char *job, int task, const FloeJobSecret *s) {
  memset(n, 0, sizeof *n);
  n->rt = runtime();
  snprintf(n->id.job, sizeof n->id.job, "%s", job);
  snprintf(n->job, sizeof n->job, "%s", job);
  n->id.task = task;
  n->id.incarnation = draw();
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_msg(floe__dataplane_new(n->rt, s, &n->id, &n->dp, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  Floe__Dist__TaskId tid = FLOE__DIST__TASK_ID__INIT;
  Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
  n->tid = tid;
  n->info = info;
  n->tid.job = n->job;
  n->tid.task = task;
  n->tid.incarnation = n->id.incarnation;
  n->info.task = &n->tid;
  ck_assert_msg(floe__dataplane_fill_info(n->dp, &n->info.base, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  snprintf(n->dev, sizeof n->dev, "/job:%s/replica:0/task:%d/device:CPU:0", job, task);
}

static void node_down(Node *n) {
  floe__dataplane_info_clear(&n->info.base);
  floe__dataplane_free(n->dp);
  floe_runtime_free(n->rt);
}

typedef struct ConnectArg {
  Node *node;
  ProtobufCMessage *infos[4];
  int n;
  int64_t timeout_ms;
  floe_code rc;
  char msg[2048];
  pthread_t thread;
} ConnectArg;

static void *connect_main(void *arg) {
  ConnectArg *c = arg;
  FloeStatus st = {FLOE_OK, NULL};
  c->rc = floe__dataplane_connect(c->node->dp, c->infos, c->n, c->timeout_ms, &st);
  snprintf(c->msg, sizeof c->msg, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  return NULL;
}

/* Every node of nodes connects to all of peers at once (each in its own thread). */
static void connect_all(Node **nodes, int n, Node **peers, int np, int64_t timeout_ms,
                        ConnectArg *out) {
  for (int i = 0; i < n; i++) {
    out[i].node = nodes[i];
    out[i].n = np;
    out[i].timeout_ms = timeout_ms;
    for (int j = 0; j < np; j++) out[i].infos[j] = &peers[j]->info.base;
    ck_assert_int_eq(pthread_create(&out[i].thread, NULL, connect_main, &out[i]), 0);
  }
  for (int i = 0; i < n; i++) pthread_join(out[i].thread, NULL);
}

static void assert_contains(const char *s, const char *part) {
  ck_assert_msg(strstr(s, part) != NULL, "\"%s\" does not contain \"%s\"", s, part);
}

/* Waits up to 5 s for dp's refusals to reach want; the latest reason into why. */
static void wait_refusals(FloeDataPlane *dp, int want, char *why, size_t cap) {
  for (int i = 0; i < 500 && floe__dataplane_refusals(dp, why, cap) < want; i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  ck_assert_int_eq(floe__dataplane_refusals(dp, why, cap), want);
}

/* A hello from `from` to `to` (bound to to's nonce and incarnation) under key secret s, sent
 * raw on a new send channel of from's runtime. */
static void raw_hello(Node *from, const FloeTaskIdentity *claim, Node *to, const uint8_t *nonce,
                      uint64_t incarnation, const FloeJobSecret *s, uint8_t *buf) {
  uint8_t proof[32];
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__auth_data_proof(s, nonce, incarnation, claim, proof, &st), FLOE_OK);
  size_t len = floe__data_hello_encode(claim, proof, buf);
  FloeTransportMgr *m = floe__transport_mgr(from->rt, &st);
  ck_assert_ptr_nonnull(m);
  int chan = floe__transport_connect(m, to->info.transport_address.data,
                                     to->info.transport_address.len, &st);
  ck_assert_msg(chan >= 1, "%s", floe_status_message(&st));
  ck_assert_int_eq(floe__transport_isend_on(m, chan, buf, len, FLOE__DATA_HELLO_TAG, NULL, NULL,
                                            &st), FLOE_OK);
}

/* ---- a rendezvous over the route ------------------------------------------------------- */

typedef struct Got {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  floe_code code;
  char msg[1024];
  FloeTensor *t;
} Got;

static void got_done(void *arg, const FloeStatus *st, FloeTensor *t, bool dead) {
  (void)dead;
  Got *g = arg;
  pthread_mutex_lock(&g->mu);
  g->calls++;
  g->code = st->code;
  snprintf(g->msg, sizeof g->msg, "%s", floe_status_message(st));
  g->t = t;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void got_wait(Got *g) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  pthread_mutex_lock(&g->mu);
  while (g->calls == 0 && pthread_cond_timedwait(&g->cv, &g->mu, &ts) == 0) {
  }
  int calls = g->calls;
  pthread_mutex_unlock(&g->mu);
  ck_assert_msg(calls == 1, "done ran %d times", calls);
}

static FloeRendezvous *rendezvous(Node *n, int64_t step) {
  FloeRendezvousOptions o = {false, false, floe__dataplane_route(n->dp)};
  FloeStatus st = {FLOE_OK, NULL};
  FloeRendezvous *r = floe__rendezvous_new(n->rt, step, &o, &st);
  ck_assert_msg(r != NULL, "%s", floe_status_message(&st));
  return r;
}

static unsigned char pattern(size_t i, size_t n) { return (unsigned char)(i * 37u + n); }

/* n bytes from node `from` to node `to` through their rendezvous, every byte checked. */
static void cross(Node *from, FloeRendezvous *rf, Node *to, FloeRendezvous *rt, size_t n) {
  char name[32];
  snprintf(name, sizeof name, "x%zu:0", n);
  FloeRendezvousKey k = {from->dev, from->id.incarnation, to->dev, name, 0, 0};
  int64_t dims[1] = {(int64_t)n};
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_U8, 1, dims, &st);
  ck_assert_ptr_nonnull(t);
  unsigned char *p = floe_tensor_data(t);
  for (size_t i = 0; i < n; i++) p[i] = pattern(i, n);
  Got g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, FLOE_OK, "", NULL};
  floe__rendezvous_recv(rt, &k, NULL, got_done, &g);
  ck_assert_msg(floe__rendezvous_send(rf, &k, t, false, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s -> %s, %zu bytes: %s", from->job, to->job, n, g.msg);
  ck_assert_int_eq(g.t->num_elements, (int64_t)n);
  const unsigned char *q = floe_tensor_data(g.t);
  for (size_t i = 0; i < n; i++)
    if (q[i] != pattern(i, n)) ck_abort_msg("%zu bytes: byte %zu differs", n, i);
  floe_tensor_release(g.t);
  floe_tensor_release(t);
}

/* ---- cases ----------------------------------------------------------------------------- */

/* The proof is HMAC-SHA256(secret, "floe-data-v1" || nonce || incarnation (big-endian) ||
 * len16(job) job task32 incarnation64), computed here with OpenSSL's one-shot HMAC(). */
START_TEST(data_proof_is_the_documented_hmac) {
  FloeJobSecret *s = secret(secret_bytes);
  uint8_t nonce[32], got[32], want[32], msg[256];
  for (int i = 0; i < 32; i++) nonce[i] = (uint8_t)(i * 7);
  FloeTaskIdentity who = {"worker", 3, 0x0102030405060708ull};
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__auth_data_proof(s, nonce, 0xa1a2a3a4a5a6a7a8ull, &who, got, &st),
                   FLOE_OK);
  size_t n = 0;
  memcpy(msg, "floe-data-v1", 12);
  n = 12;
  memcpy(msg + n, nonce, 32);
  n += 32;
  const uint8_t inc[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
  memcpy(msg + n, inc, 8);
  n += 8;
  const uint8_t id[] = {0, 6, 'w', 'o', 'r', 'k', 'e', 'r', 0, 0, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8};
  memcpy(msg + n, id, sizeof id);
  n += sizeof id;
  unsigned int wl = 0;
  HMAC(EVP_sha256(), secret_bytes, (int)strlen(secret_bytes), msg, n, want, &wl);
  ck_assert_uint_eq(wl, 32);
  ck_assert_mem_eq(got, want, 32);
  /* The hello round-trips and refuses what is malformed. */
  uint8_t buf[FLOE__DATA_HELLO_MAX], proof[32];
  size_t len = floe__data_hello_encode(&who, got, buf);
  ck_assert_uint_eq(len, 52 + 6);
  FloeTaskIdentity back;
  ck_assert_int_eq(floe__data_hello_decode(buf, len, &back, proof, &st), FLOE_OK);
  ck_assert_str_eq(back.job, "worker");
  ck_assert_int_eq(back.task, 3);
  ck_assert_uint_eq(back.incarnation, who.incarnation);
  ck_assert_mem_eq(proof, got, 32);
  ck_assert_int_eq(floe__data_hello_decode(buf, len - 1, &back, proof, &st),
                   FLOE_INVALID_ARGUMENT);
  buf[FLOE__DATA_HELLO_FIXED] = 'W';
  ck_assert_int_eq(floe__data_hello_decode(buf, len, &back, proof, &st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(&st), "0x57");
  floe_status_clear(&st);
  floe__secret_free(s);
}
END_TEST

/* Three tasks connect all-to-all; the route gives channels both ways; tensors cross through
 * rendezvous (one message and split); a second connection claiming a connected identity and
 * an unknown task are refused; drop_peer fails a pending Recv with UNAVAILABLE. */
static void all_to_all(const char *transport, const char *provider) {
  if (!use_transport(transport, provider)) return;
  FloeJobSecret *s = secret(secret_bytes);
  Node a, b, c;
  node_up(&a, "a", 0, s);
  node_up(&b, "b", 0, s);
  node_up(&c, "worker", 1, s);
  ck_assert_str_eq(a.info.transport, transport);
  ck_assert_uint_eq(a.info.data_nonce.len, 32);
  ck_assert_uint_gt(a.info.transport_address.len, 0);
  Node *all[3] = {&a, &b, &c};
  ConnectArg ca[3];
  connect_all(all, 3, all, 3, 10000, ca);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(ca[i].rc == FLOE_OK, "%s connect: %s", all[i]->job, ca[i].msg);
  /* the route: own devices 0, peers' channels both ways, strangers not found */
  const FloeRendezvousRoute *ra = floe__dataplane_route(a.dp);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(ra->channel(ra->arg, a.dev, true, &st), 0);
  ck_assert_int_eq(ra->channel(ra->arg, "/job:localhost/replica:0/task:0/device:CPU:0", false,
                               &st), 0);
  for (int i = 1; i < 3; i++) {
    ck_assert_int_ge(ra->channel(ra->arg, all[i]->dev, true, &st), 1);
    ck_assert_int_ge(ra->channel(ra->arg, all[i]->dev, false, &st), 1);
  }
  ck_assert_int_eq(ra->channel(ra->arg, "/job:ps/task:0/device:CPU:0", true, &st), -1);
  ck_assert_int_eq(floe_status_code(&st), FLOE_NOT_FOUND);
  floe_status_clear(&st);
  /* tensors: a -> b, b -> worker, worker -> a; small and large */
  FloeRendezvous *rv[3];
  for (int i = 0; i < 3; i++) rv[i] = rendezvous(all[i], 4242);
  const size_t sizes[] = {4, 16384 - 88, 1u << 20};
  for (size_t k = 0; k < 3; k++)
    for (int i = 0; i < 3; i++) cross(all[i], rv[i], all[(i + 1) % 3], rv[(i + 1) % 3], sizes[k]);
  ck_assert_int_eq(floe__dataplane_refusals(a.dp, NULL, 0), 0);
  /* b claims a second connection to a; then a task a does not know: both refused */
  uint8_t hello1[FLOE__DATA_HELLO_MAX], hello2[FLOE__DATA_HELLO_MAX];
  char why[1024];
  raw_hello(&b, &b.id, &a, a.info.data_nonce.data, a.id.incarnation, s, hello1);
  wait_refusals(a.dp, 1, why, sizeof why);
  assert_contains(why, "a second data connection claiming /job:b/task:0");
  FloeTaskIdentity stranger = {"zz", 0, 99};
  raw_hello(&b, &stranger, &a, a.info.data_nonce.data, a.id.incarnation, s, hello2);
  wait_refusals(a.dp, 2, why, sizeof why);
  assert_contains(why, "/job:zz/task:0");
  assert_contains(why, "unknown task");
  /* the channels still work */
  cross(&b, rv[1], &a, rv[0], 100);
  /* b dies: a's pending Recv from it fails with UNAVAILABLE naming b's device, and the route
   * and connect refuse b from now on */
  FloeRendezvousKey k = {b.dev, b.id.incarnation, a.dev, "never:0", 0, 0};
  Got g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, FLOE_OK, "", NULL};
  floe__rendezvous_recv(rv[0], &k, NULL, got_done, &g);
  ck_assert_int_eq(floe__rendezvous_num_pending(rv[0]), 1);
  floe__dataplane_drop_peer(a.dp, "b", 0);
  got_wait(&g);
  ck_assert_int_eq(g.code, FLOE_UNAVAILABLE);
  assert_contains(g.msg, b.dev);
  assert_contains(g.msg, "never:0");
  ck_assert_int_eq(ra->channel(ra->arg, b.dev, true, &st), -1);
  ck_assert_int_eq(floe_status_code(&st), FLOE_UNAVAILABLE);
  assert_contains(floe_status_message(&st), "dropped");
  floe_status_clear(&st);
  ProtobufCMessage *just_b[1] = {&b.info.base};
  ck_assert_int_eq(floe__dataplane_connect(a.dp, just_b, 1, 100, &st), FLOE_UNAVAILABLE);
  floe_status_clear(&st);
  /* a and worker still talk */
  cross(&c, rv[2], &a, rv[0], 5000);
  for (int i = 0; i < 3; i++) floe__rendezvous_free(rv[i]);
  node_down(&c);
  node_down(&b);
  node_down(&a);
  floe__secret_free(s);
}

START_TEST(all_to_all_local) { all_to_all("local", NULL); }
END_TEST
START_TEST(all_to_all_fabric_tcp) { all_to_all("fabric", "tcp;ofi_rxm"); }
END_TEST
START_TEST(all_to_all_fabric_shm) { all_to_all("fabric", "shm"); }
END_TEST

/* A task with another secret: its hello is refused, so it never gets a channel, and the
 * connects on both sides time out naming the other. */
static void wrong_secret(const char *transport, const char *provider) {
  if (!use_transport(transport, provider)) return;
  FloeJobSecret *s = secret(secret_bytes), *other = secret(other_secret_bytes);
  Node a, b;
  node_up(&a, "a", 0, s);
  node_up(&b, "b", 0, other);
  Node *all[2] = {&a, &b};
  ConnectArg ca[2];
  connect_all(all, 2, all, 2, 1500, ca);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(ca[i].rc, FLOE_DEADLINE_EXCEEDED);
    assert_contains(ca[i].msg, i == 0 ? "/job:b/task:0" : "/job:a/task:0");
    assert_contains(ca[i].msg, "wrong proof");
  }
  char why[1024];
  ck_assert_int_eq(floe__dataplane_refusals(a.dp, why, sizeof why), 1);
  assert_contains(why, "claiming /job:b/task:0");
  assert_contains(why, "has a wrong proof");
  const FloeRendezvousRoute *ra = floe__dataplane_route(a.dp);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(ra->channel(ra->arg, b.dev, true, &st), -1);
  ck_assert_int_eq(floe_status_code(&st), FLOE_UNAVAILABLE);
  assert_contains(floe_status_message(&st), "not connected");
  floe_status_clear(&st);
  node_down(&b);
  node_down(&a);
  floe__secret_free(other);
  floe__secret_free(s);
}

START_TEST(wrong_secret_local) { wrong_secret("local", NULL); }
END_TEST
START_TEST(wrong_secret_fabric_tcp) { wrong_secret("fabric", "tcp;ofi_rxm"); }
END_TEST

/* A hello recorded for one incarnation of b is refused by the next (its data nonce and
 * incarnation are new); a fresh hello to the new incarnation is accepted (it is held until
 * b's connect names a, which then finds its receive channel in). */
static void replay(const char *transport, const char *provider) {
  if (!use_transport(transport, provider)) return;
  FloeJobSecret *s = secret(secret_bytes);
  Node a, b1, b2;
  node_up(&a, "a", 0, s);
  node_up(&b1, "b", 0, s);
  uint8_t old_nonce[32], hello[FLOE__DATA_HELLO_MAX], fresh[FLOE__DATA_HELLO_MAX];
  memcpy(old_nonce, b1.info.data_nonce.data, 32);
  uint64_t old_inc = b1.id.incarnation;
  node_down(&b1);
  node_up(&b2, "b", 0, s);
  ck_assert_uint_ne(b2.id.incarnation, old_inc);
  raw_hello(&a, &a.id, &b2, old_nonce, old_inc, s, hello);
  char why[1024];
  wait_refusals(b2.dp, 1, why, sizeof why);
  assert_contains(why, "claiming /job:a/task:0");
  assert_contains(why, "has a wrong proof");
  raw_hello(&a, &a.id, &b2, b2.info.data_nonce.data, b2.id.incarnation, s, fresh);
  ProtobufCMessage *infos[2] = {&a.info.base, &b2.info.base};
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_msg(floe__dataplane_connect(b2.dp, infos, 2, 10000, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  ck_assert_int_eq(floe__dataplane_refusals(b2.dp, NULL, 0), 1);
  node_down(&b2);
  node_down(&a);
  floe__secret_free(s);
}

START_TEST(replay_local) { replay("local", NULL); }
END_TEST
START_TEST(replay_fabric_tcp) { replay("fabric", "tcp;ofi_rxm"); }
END_TEST

/* A peer that never connects: connect ends at its deadline naming it; a TaskInfo of another
 * transport is refused at once naming both. */
START_TEST(connect_times_out_naming_the_peer) {
  use_transport("local", NULL);
  FloeJobSecret *s = secret(secret_bytes);
  Node a, b;
  node_up(&a, "a", 0, s);
  node_up(&b, "b", 3, s);
  ProtobufCMessage *infos[2] = {&a.info.base, &b.info.base};
  FloeStatus st = {FLOE_OK, NULL};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(floe__dataplane_connect(a.dp, infos, 2, 300, &st), FLOE_DEADLINE_EXCEEDED);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
  ck_assert_msg(ms >= 290 && ms < 5000, "connect took %.0f ms", ms);
  assert_contains(floe_status_message(&st), "no data connection from /job:b/task:3");
  assert_contains(floe_status_message(&st), "300 ms");
  floe_status_clear(&st);
  char *saved = b.info.transport;
  b.info.transport = (char *)"carrier-pigeon";
  ck_assert_int_eq(floe__dataplane_connect(a.dp, infos, 2, 300, &st), FLOE_FAILED_PRECONDITION);
  assert_contains(floe_status_message(&st), "carrier-pigeon");
  assert_contains(floe_status_message(&st), "\"local\"");
  floe_status_clear(&st);
  b.info.transport = saved;
  /* a message that is no TaskInfo */
  Floe__Dist__TaskId tid = FLOE__DIST__TASK_ID__INIT;
  ProtobufCMessage *bad[1] = {&tid.base};
  ck_assert_int_eq(floe__dataplane_connect(a.dp, bad, 1, 300, &st), FLOE_INVALID_ARGUMENT);
  floe_status_clear(&st);
  node_down(&b);
  node_down(&a);
  floe__secret_free(s);
}
END_TEST

Suite *dataplane_suite(void);
Suite *dataplane_suite(void) {
  Suite *s = suite_create("dataplane");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, data_proof_is_the_documented_hmac);
  tcase_add_test(tc, all_to_all_local);
  tcase_add_test(tc, all_to_all_fabric_tcp);
  tcase_add_test(tc, all_to_all_fabric_shm);
  tcase_add_test(tc, wrong_secret_local);
  tcase_add_test(tc, wrong_secret_fabric_tcp);
  tcase_add_test(tc, replay_local);
  tcase_add_test(tc, replay_fabric_tcp);
  tcase_add_test(tc, connect_times_out_naming_the_peer);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(dataplane_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
