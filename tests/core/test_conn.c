/* SPDX-License-Identifier: Apache-2.0 */
/* test_conn.c - authenticated control connections (core/dist/conn.c) between two threads
 * over 127.0.0.1: the handshake and frames both ways, then hostile and broken peers, each
 * refused with its message while the listener goes on accepting: a wrong secret, no secret,
 * a replayed frame, a flipped bit, an oversized length, a truncated frame, a peer stalled mid
 * frame or mid handshake, another protocol version, a stranger speaking HTTP, a dead peer.
 *
 * Hostile peers are written here from the documented protocol: raw sockets, frames made with
 * floe__wire_frame_encode under the zero key for the handshake. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "dist.pb-c.h"

#define MAX_CONNS 16
static const char k_secret[] = "the job's secret: 32 bytes long!";
static const char k_other[] = "another job's secret, not ours..";
static const uint8_t k_zero[32];

static FloeJobSecret *secret_of(const char *s) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *js = NULL;
  ck_assert_int_eq(floe__secret_from_bytes(s, strlen(s), s == k_secret ? "ours" : "theirs", &js, &st),
                   FLOE_OK);
  return js;
}

static FloeConnOptions options(const FloeJobSecret *s, const char *job, int task, int timeout_ms) {
  FloeConnOptions o;
  memset(&o, 0, sizeof o);
  o.secret = s;
  snprintf(o.self.job, sizeof o.self.job, "%s", job);
  o.self.task = task;
  o.self.incarnation = 0xabcdef0000000000ull + (uint64_t)task;
  o.timeout_ms = timeout_ms;
  return o;
}

/* ------------------------------------------------------------------------------------ */
/* The server: accepts n connections one after the other; answers REGISTER_TASK and
 * RUN_GRAPH on each until it ends, and records how each accept and each connection ended. */

typedef struct Server {
  FloeListener *l;
  FloeConnOptions o;
  int n, recv_timeout_ms;
  bool close_at_once; /* close each connection right after the handshake */
  floe_code accept_rc[MAX_CONNS], end_rc[MAX_CONNS];
  char accept_msg[MAX_CONNS][600], end_msg[MAX_CONNS][600];
  int frames[MAX_CONNS];
  pthread_t th;
} Server;

static void serve_one(Server *s, int i, FloeConn *c) {
  FloeStatus st = {FLOE_OK, NULL};
  for (;;) {
    uint16_t type;
    struct ProtobufCMessage *m;
    floe_code rc = floe__conn_recv(c, s->recv_timeout_ms, &type, &m, &st);
    if (rc != FLOE_OK) {
      s->end_rc[i] = rc;
      snprintf(s->end_msg[i], sizeof s->end_msg[i], "%s", floe_status_message(&st));
      floe_status_clear(&st);
      return;
    }
    s->frames[i]++;
    if (type == FLOE__WIRE_REGISTER_TASK) {
      const Floe__Dist__RegisterTaskRequest *q = (const Floe__Dist__RegisterTaskRequest *)m;
      Floe__Dist__Status ok = FLOE__DIST__STATUS__INIT;
      char text[96];
      snprintf(text, sizeof text, "registered %s:%d", q->task ? q->task->job : "?",
               q->task ? q->task->task : -1);
      ok.message = text;
      Floe__Dist__RegisterTaskResponse r = FLOE__DIST__REGISTER_TASK_RESPONSE__INIT;
      r.status = &ok;
      r.leader_incarnation = s->o.self.incarnation;
      rc = floe__conn_send(c, FLOE__WIRE_REGISTER_TASK_RESPONSE, &r.base, 2000, &st);
    } else if (type == FLOE__WIRE_RUN_GRAPH) {
      const Floe__Dist__RunGraphRequest *q = (const Floe__Dist__RunGraphRequest *)m;
      Floe__Dist__RunGraphResponse r = FLOE__DIST__RUN_GRAPH_RESPONSE__INIT;
      r.n_fetches = q->n_feeds; /* echoes the feeds */
      r.fetches = q->feeds;
      rc = floe__conn_send(c, FLOE__WIRE_RUN_GRAPH_RESPONSE, &r.base, 5000, &st);
    }
    floe__wire_free(m);
    ck_assert_msg(rc == FLOE_OK, "server send: %s", floe_status_message(&st));
  }
}

static void *server_main(void *arg) {
  Server *s = arg;
  for (int i = 0; i < s->n; i++) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeConn *c = NULL;
    s->accept_rc[i] = floe__listener_accept(s->l, &s->o, 10000, &c, &st);
    snprintf(s->accept_msg[i], sizeof s->accept_msg[i], "%s", floe_status_message(&st));
    floe_status_clear(&st);
    if (!c) continue;
    if (!s->close_at_once) serve_one(s, i, c);
    floe__conn_close(c);
  }
  return NULL;
}

static FloeJobSecret *g_secret;

static Server *server_start(int n, int timeout_ms) {
  Server *s = calloc(1, sizeof *s);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__listener_open("127.0.0.1:0", &s->l, &st), FLOE_OK);
  s->o = options(g_secret, "chief", 0, timeout_ms);
  s->n = n;
  s->recv_timeout_ms = timeout_ms;
  return s;
}
static void server_run(Server *s) {
  ck_assert_int_eq(pthread_create(&s->th, NULL, server_main, s), 0);
}
static void server_join(Server *s) {
  ck_assert_int_eq(pthread_join(s->th, NULL), 0);
  floe__listener_close(s->l);
}

static void expect(floe_code got, floe_code want, const char *msg, const char *frag) {
  ck_assert_msg(got == want, "code %d, expected %d: %s", got, want, msg);
  ck_assert_msg(strstr(msg, frag), "\"%s\" lacks \"%s\"", msg, frag);
}

/* ------------------------------------------------------------------------------------ */
/* Clients */

static FloeConn *connect_ok(Server *s, const FloeJobSecret *secret, int task) {
  FloeConnOptions o = options(secret, "worker", task, 5000);
  FloeStatus st = {FLOE_OK, NULL};
  FloeConn *c = NULL;
  floe_code rc = floe__conn_connect(floe__listener_address(s->l), &o, &c, &st);
  ck_assert_msg(rc == FLOE_OK, "connect: %s", floe_status_message(&st));
  return c;
}

static void register_task(FloeConn *c, int task) {
  FloeStatus st = {FLOE_OK, NULL};
  Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
  id.job = "worker";
  id.task = task;
  Floe__Dist__RegisterTaskRequest q = FLOE__DIST__REGISTER_TASK_REQUEST__INIT;
  q.task = &id;
  ck_assert_int_eq(floe__conn_send(c, FLOE__WIRE_REGISTER_TASK, &q.base, 2000, &st), FLOE_OK);
  uint16_t type;
  struct ProtobufCMessage *m;
  floe_code rc = floe__conn_recv(c, 5000, &type, &m, &st);
  ck_assert_msg(rc == FLOE_OK, "recv: %s", floe_status_message(&st));
  ck_assert_uint_eq(type, FLOE__WIRE_REGISTER_TASK_RESPONSE);
  const Floe__Dist__RegisterTaskResponse *r = (const Floe__Dist__RegisterTaskResponse *)m;
  char want[64];
  snprintf(want, sizeof want, "registered worker:%d", task);
  ck_assert_str_eq(r->status->message, want);
  ck_assert(r->leader_incarnation == 0xabcdef0000000000ull);
  floe__wire_free(m);
}

/* A good client's whole visit: connect, register, close. */
static void good_client(Server *s, int task) {
  FloeConn *c = connect_ok(s, g_secret, task);
  register_task(c, task);
  floe__conn_close(c);
}

/* The bytes of a REGISTER_TASK frame this connection would send next. */
static uint8_t *register_frame(FloeConn *c, size_t *len) {
  Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
  id.job = "worker";
  Floe__Dist__RegisterTaskRequest q = FLOE__DIST__REGISTER_TASK_REQUEST__INIT;
  q.task = &id;
  FloeStatus st = {FLOE_OK, NULL};
  uint8_t *frame;
  ck_assert_int_eq(floe__conn_encode(c, FLOE__WIRE_REGISTER_TASK, &q.base, &frame, len, &st),
                   FLOE_OK);
  return frame;
}

static void write_raw(FloeConn *c, const void *b, size_t n) {
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__conn_write_raw(c, b, n, 2000, &st), FLOE_OK);
}

/* Raw sockets for peers that break the handshake. */
static int raw_connect(Server *s) {
  const char *a = floe__listener_address(s->l);
  int port = atoi(strrchr(a, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}
static void raw_send(int fd, uint16_t type, const struct ProtobufCMessage *m, uint64_t seq) {
  FloeStatus st = {FLOE_OK, NULL};
  uint8_t *frame;
  size_t len;
  ck_assert_int_eq(floe__wire_frame_encode(type, m, seq, k_zero, 'C', NULL, &frame, &len, &st),
                   FLOE_OK);
  ck_assert_int_eq(send(fd, frame, len, MSG_NOSIGNAL), (ssize_t)len);
  floe__free(frame);
}
static void read_n(int fd, uint8_t *b, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t r = recv(fd, b + off, n - off, 0);
    ck_assert_msg(r > 0, "raw read: %zd", r);
    off += (size_t)r;
  }
}
static struct ProtobufCMessage *raw_recv(int fd, uint16_t want, uint64_t seq) {
  uint8_t hdr[FLOE__WIRE_HEADER];
  read_n(fd, hdr, sizeof hdr);
  FloeWireHeader h;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__wire_header_decode(hdr, NULL, "server", &h, &st), FLOE_OK);
  ck_assert_uint_eq(h.type, want);
  uint8_t *body = malloc(h.length + FLOE__WIRE_MAC);
  read_n(fd, body, h.length + FLOE__WIRE_MAC);
  struct ProtobufCMessage *m;
  floe_code rc = floe__wire_frame_open(&h, hdr, body, k_zero, 'S', seq, "server", &m, &st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(&st));
  free(body);
  return m;
}
/* HELLO both ways as a client "worker:7" would. */
static void raw_hello(int fd) {
  uint8_t nonce[32] = {7};
  Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
  id.job = "worker";
  id.task = 7;
  Floe__Dist__Hello h = FLOE__DIST__HELLO__INIT;
  h.task = &id;
  h.nonce.data = nonce;
  h.nonce.len = sizeof nonce;
  raw_send(fd, FLOE__WIRE_HELLO, &h.base, 0);
  floe__wire_free(raw_recv(fd, FLOE__WIRE_HELLO, 0));
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------------------ */

static void setup(void) {
  g_secret = secret_of(k_secret);
}
static void teardown(void) {
  floe__secret_free(g_secret);
  g_secret = NULL;
}

START_TEST(test_exchange) {
  Server *s = server_start(1, 5000);
  server_run(s);
  FloeConn *c = connect_ok(s, g_secret, 3);
  const FloeTaskIdentity *peer = floe__conn_peer_identity(c);
  ck_assert_str_eq(peer->job, "chief");
  ck_assert_int_eq(peer->task, 0);
  ck_assert(peer->incarnation == 0xabcdef0000000000ull);
  ck_assert_msg(strstr(floe__conn_peer(c), "/job:chief/task:0 (incarnation abcdef0000000000)"), "%s",
                floe__conn_peer(c));
  for (int i = 0; i < 3; i++) register_task(c, 3);
  /* A tensor of 4 MiB there and back. */
  size_t nb = 4u << 20;
  uint8_t *data = malloc(nb);
  for (size_t i = 0; i < nb; i++) data[i] = (uint8_t)(i * 31 + 7);
  int64_t shape[1] = {(int64_t)nb};
  Floe__Dist__Tensor t = FLOE__DIST__TENSOR__INIT;
  t.dtype = FLOE_U8;
  t.n_shape = 1;
  t.shape = shape;
  t.data.data = data;
  t.data.len = nb;
  Floe__Dist__NamedTensor nt = FLOE__DIST__NAMED_TENSOR__INIT, *feeds[1] = {&nt};
  nt.name = "x:0";
  nt.tensor = &t;
  Floe__Dist__RunGraphRequest q = FLOE__DIST__RUN_GRAPH_REQUEST__INIT;
  q.graph_handle = "g";
  q.n_feeds = 1;
  q.feeds = feeds;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__conn_send(c, FLOE__WIRE_RUN_GRAPH, &q.base, 5000, &st), FLOE_OK);
  uint16_t type;
  struct ProtobufCMessage *m;
  ck_assert_int_eq(floe__conn_recv(c, 5000, &type, &m, &st), FLOE_OK);
  ck_assert_uint_eq(type, FLOE__WIRE_RUN_GRAPH_RESPONSE);
  const Floe__Dist__RunGraphResponse *r = (const Floe__Dist__RunGraphResponse *)m;
  ck_assert_uint_eq(r->n_fetches, 1);
  ck_assert_uint_eq(r->fetches[0]->tensor->data.len, nb);
  ck_assert(memcmp(r->fetches[0]->tensor->data.data, data, nb) == 0);
  floe__wire_free(m);
  free(data);
  /* Nothing arrives: a deadline before a frame's first byte leaves the connection usable. */
  ck_assert_int_eq(floe__conn_recv(c, 100, &type, &m, &st), FLOE_DEADLINE_EXCEEDED);
  expect(FLOE_DEADLINE_EXCEEDED, FLOE_DEADLINE_EXCEEDED, floe_status_message(&st),
         "(/job:chief/task:0 (incarnation abcdef0000000000)) sent no frame header within 100 ms");
  floe_status_clear(&st);
  register_task(c, 3);
  floe__conn_close(c);
  server_join(s);
  ck_assert_int_eq(s->accept_rc[0], FLOE_OK);
  ck_assert_int_eq(s->frames[0], 5);
  /* The client's close ends the server's side as UNAVAILABLE, naming the client. */
  expect(s->end_rc[0], FLOE_UNAVAILABLE, s->end_msg[0],
         "(/job:worker/task:3 (incarnation abcdef0000000003)) closed the connection before a "
         "frame header (0 of 20 bytes)");
  free(s);
}
END_TEST

START_TEST(test_hostile_peers) {
  enum { WRONG_SECRET, GOOD1, NO_PROOF, GOOD2, REPLAY, FLIP, OVERSIZE, TRUNCATED, STALL_FRAME,
         STALL_HANDSHAKE, VERSION, HTTP, GOOD3, N };
  Server *s = server_start(N, 800);
  server_run(s);
  FloeStatus st = {FLOE_OK, NULL};
  FloeConn *c = NULL;
  /* A client with another secret: refused, and told why. */
  FloeJobSecret *other = secret_of(k_other);
  FloeConnOptions o = options(other, "worker", 1, 5000);
  floe_code rc = floe__conn_connect(floe__listener_address(s->l), &o, &c, &st);
  expect(rc, FLOE_PERMISSION_DENIED, floe_status_message(&st),
         "refused this task: its proof of the job secret did not verify: the tasks hold "
         "different secrets (this side's secret: theirs)");
  ck_assert_ptr_null(c);
  floe_status_clear(&st);
  floe__secret_free(other);
  good_client(s, 1);
  /* No secret: refused before anything is sent. A stranger that sends no proof. */
  o = options(NULL, "worker", 1, 5000);
  rc = floe__conn_connect(floe__listener_address(s->l), &o, &c, &st);
  expect(rc, FLOE_FAILED_PRECONDITION, floe_status_message(&st), "no job secret: set FLOE_JOB_SECRET_FILE");
  floe_status_clear(&st);
  int fd = raw_connect(s);
  raw_hello(fd);
  Floe__Dist__Proof empty = FLOE__DIST__PROOF__INIT;
  raw_send(fd, FLOE__WIRE_PROOF, &empty.base, 1);
  struct ProtobufCMessage *m = raw_recv(fd, FLOE__WIRE_AUTH_RESULT, 1);
  ck_assert_int_eq(((Floe__Dist__AuthResult *)m)->status->code, FLOE_PERMISSION_DENIED);
  floe__wire_free(m);
  close(fd);
  good_client(s, 2);
  /* A replayed frame: the first copy is answered, the second refused. */
  c = connect_ok(s, g_secret, 4);
  size_t len;
  uint8_t *frame = register_frame(c, &len);
  write_raw(c, frame, len);
  write_raw(c, frame, len);
  uint16_t type;
  ck_assert_int_eq(floe__conn_recv(c, 5000, &type, &m, &st), FLOE_OK);
  floe__wire_free(m);
  /* ... and then the server closes the connection. */
  rc = floe__conn_recv(c, 5000, &type, &m, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "closed the connection before a frame header");
  floe_status_clear(&st);
  /* The connection stays closed, saying why. */
  rc = floe__conn_recv(c, 100, &type, &m, &st);
  expect(rc, FLOE_FAILED_PRECONDITION, floe_status_message(&st), "was closed after an error: ");
  floe_status_clear(&st);
  floe__free(frame);
  floe__conn_close(c);
  /* One bit flipped in a payload. */
  c = connect_ok(s, g_secret, 5);
  frame = register_frame(c, &len);
  frame[FLOE__WIRE_HEADER + 2] ^= 0x10;
  write_raw(c, frame, len);
  floe__free(frame);
  floe__conn_close(c);
  /* A length far over the limit, with the right sequence number. */
  c = connect_ok(s, g_secret, 6);
  frame = register_frame(c, &len);
  frame[7] = FLOE__WIRE_RUN_GRAPH;
  memset(frame + 8, 0xff, 4);
  write_raw(c, frame, FLOE__WIRE_HEADER);
  floe__free(frame);
  sleep_ms(50);
  floe__conn_close(c);
  /* Half a frame, then the connection closes. */
  c = connect_ok(s, g_secret, 7);
  frame = register_frame(c, &len);
  write_raw(c, frame, len / 2);
  floe__free(frame);
  floe__conn_close(c);
  /* Half a frame, then nothing past the server's deadline. */
  c = connect_ok(s, g_secret, 8);
  frame = register_frame(c, &len);
  write_raw(c, frame, len / 2);
  floe__free(frame);
  sleep_ms(1300);
  floe__conn_close(c);
  /* A stranger that connects and never says a word. */
  fd = raw_connect(s);
  sleep_ms(1300);
  close(fd);
  /* After the handshake, a frame of protocol version 2. */
  c = connect_ok(s, g_secret, 9);
  frame = register_frame(c, &len);
  frame[5] = 2;
  write_raw(c, frame, len);
  floe__free(frame);
  floe__conn_close(c);
  /* Someone else's protocol. */
  fd = raw_connect(s);
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ck_assert_int_eq(send(fd, http, sizeof http - 1, MSG_NOSIGNAL), (ssize_t)sizeof http - 1);
  sleep_ms(50);
  close(fd);
  /* The listener still takes good clients. */
  good_client(s, 10);
  server_join(s);

  expect(s->accept_rc[WRONG_SECRET], FLOE_PERMISSION_DENIED, s->accept_msg[WRONG_SECRET],
         "refused a client: 127.0.0.1:");
  expect(s->accept_rc[WRONG_SECRET], FLOE_PERMISSION_DENIED, s->accept_msg[WRONG_SECRET],
         "(/job:worker/task:1 (incarnation abcdef0000000001)) failed authentication: its proof "
         "of the job secret did not verify (it holds another secret than ours)");
  expect(s->accept_rc[NO_PROOF], FLOE_PERMISSION_DENIED, s->accept_msg[NO_PROOF],
         "(/job:worker/task:7 (incarnation 0000000000000000)) sent a proof of 0 bytes, not 32");
  expect(s->end_rc[REPLAY], FLOE_PERMISSION_DENIED, s->end_msg[REPLAY],
         "REGISTER_TASK frame from 127.0.0.1:");
  expect(s->end_rc[REPLAY], FLOE_PERMISSION_DENIED, s->end_msg[REPLAY],
         "(/job:worker/task:4 (incarnation abcdef0000000004)) has sequence number 2 where 3 was "
         "due: a replayed (or reordered) frame; refused");
  ck_assert_int_eq(s->frames[REPLAY], 1);
  expect(s->end_rc[FLIP], FLOE_DATA_LOSS, s->end_msg[FLIP],
         "REGISTER_TASK frame #2 from 127.0.0.1:");
  expect(s->end_rc[FLIP], FLOE_DATA_LOSS, s->end_msg[FLIP], "its MAC does not match");
  ck_assert_int_eq(s->frames[FLIP], 0);
  expect(s->end_rc[OVERSIZE], FLOE_RESOURCE_EXHAUSTED, s->end_msg[OVERSIZE],
         "(/job:worker/task:6 (incarnation abcdef0000000006)): RUN_GRAPH of 4294967295 bytes is "
         "over the limit of 67108864 bytes for its type (raise the connection's max_frame for "
         "larger tensors); refused before reading it");
  expect(s->end_rc[TRUNCATED], FLOE_UNAVAILABLE, s->end_msg[TRUNCATED],
         "(/job:worker/task:7 (incarnation abcdef0000000007)) closed the connection in the middle "
         "of a REGISTER_TASK frame");
  expect(s->end_rc[STALL_FRAME], FLOE_DEADLINE_EXCEEDED, s->end_msg[STALL_FRAME],
         "(/job:worker/task:8 (incarnation abcdef0000000008)) sent only part of a REGISTER_TASK "
         "frame within 800 ms");
  expect(s->accept_rc[STALL_HANDSHAKE], FLOE_DEADLINE_EXCEEDED, s->accept_msg[STALL_HANDSHAKE],
         "sent no frame header within");
  expect(s->end_rc[VERSION], FLOE_UNIMPLEMENTED, s->end_msg[VERSION],
         "protocol version 2 (REGISTER_TASK), but this build speaks version 1");
  expect(s->accept_rc[HTTP], FLOE_INVALID_ARGUMENT, s->accept_msg[HTTP],
         "bad magic 0x47455420 (expected \"FLOC\")");
  for (int i = 0; i < N; i++) {
    bool good = i == GOOD1 || i == GOOD2 || i == GOOD3;
    bool accepted = i != WRONG_SECRET && i != NO_PROOF && i != STALL_HANDSHAKE && i != HTTP;
    ck_assert_msg(accepted == (s->accept_rc[i] == FLOE_OK), "connection %d: %s", i, s->accept_msg[i]);
    if (good) {
      ck_assert_int_eq(s->frames[i], 1);
      expect(s->end_rc[i], FLOE_UNAVAILABLE, s->end_msg[i], "closed the connection before");
    }
  }
  free(s);
}
END_TEST

START_TEST(test_peer_gone) {
  /* The server closes right after the handshake: the client's next read is UNAVAILABLE. */
  Server *s = server_start(2, 5000);
  s->close_at_once = true;
  server_run(s);
  FloeConn *c = connect_ok(s, g_secret, 1);
  uint16_t type;
  struct ProtobufCMessage *m;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__conn_recv(c, 5000, &type, &m, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st),
         "(/job:chief/task:0 (incarnation abcdef0000000000)) closed the connection before a frame "
         "header (0 of 20 bytes): the peer ended, restarted or refused this side");
  floe_status_clear(&st);
  floe__conn_close(c);
  /* A client that wants another task there is told whom it reached. */
  FloeConnOptions o = options(g_secret, "worker", 1, 5000);
  o.expect_job = "ps";
  o.expect_task = 2;
  rc = floe__conn_connect(floe__listener_address(s->l), &o, &c, &st);
  expect(rc, FLOE_PERMISSION_DENIED, floe_status_message(&st),
         "(/job:chief/task:0 (incarnation abcdef0000000000)) is not the task expected there "
         "(/job:ps/task:2)");
  floe_status_clear(&st);
  server_join(s);
  free(s);
}
END_TEST

START_TEST(test_connect_and_listen) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeListener *l = NULL, *l2 = NULL;
  /* Nothing listening. */
  ck_assert_int_eq(floe__listener_open("127.0.0.1:0", &l, &st), FLOE_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "%s", floe__listener_address(l));
  ck_assert_msg(strncmp(addr, "127.0.0.1:", 10) == 0, "%s", addr);
  /* The port is taken. */
  floe_code rc = floe__listener_open(addr, &l2, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "the port is in use");
  floe_status_clear(&st);
  /* A listener that never accepts: the client's handshake meets its deadline. */
  FloeConnOptions o = options(g_secret, "worker", 1, 300);
  FloeConn *c = NULL;
  rc = floe__conn_connect(addr, &o, &c, &st);
  expect(rc, FLOE_DEADLINE_EXCEEDED, floe_status_message(&st), "sent no frame header within");
  floe_status_clear(&st);
  floe__listener_close(l);
  o.timeout_ms = 2000;
  rc = floe__conn_connect(addr, &o, &c, &st);
  expect(rc, FLOE_UNAVAILABLE, floe_status_message(&st), "(nothing listens there yet?)");
  floe_status_clear(&st);
  /* Bound where told: loopback, the IPv6 loopback, the wildcard only when it is asked for. */
  static const char *const where[][2] = {{"[::1]:0", "[::1]:"}, {"0.0.0.0:0", "0.0.0.0:"},
                                         {"localhost:0", ""}};
  for (size_t i = 0; i < 3; i++) {
    rc = floe__listener_open(where[i][0], &l, &st);
    if (rc != FLOE_OK && i == 0) { /* no IPv6 here */
      floe_status_clear(&st);
      continue;
    }
    ck_assert_msg(rc == FLOE_OK, "%s: %s", where[i][0], floe_status_message(&st));
    ck_assert_msg(strncmp(floe__listener_address(l), where[i][1], strlen(where[i][1])) == 0,
                  "%s -> %s", where[i][0], floe__listener_address(l));
    ck_assert_msg(strncmp(floe__listener_address(l), "0.0.0.0", 7) != 0 || i == 1, "%s",
                  floe__listener_address(l));
    floe__listener_close(l);
  }
  /* An address this machine does not have (TEST-NET-1: nothing is sent). */
  rc = floe__listener_open("192.0.2.1:7000", &l, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st),
         "no interface of this machine has that address");
  floe_status_clear(&st);
  rc = floe__listener_open("127.0.0.1", &l, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "listen address: \"127.0.0.1\" has no port");
  floe_status_clear(&st);
  /* Identity missing. */
  o = options(g_secret, "", 1, 300);
  rc = floe__conn_connect("127.0.0.1:1", &o, &c, &st);
  expect(rc, FLOE_INVALID_ARGUMENT, floe_status_message(&st), "this task's identity is not set");
  floe_status_clear(&st);
  /* accept with no secret: refused at once. */
  ck_assert_int_eq(floe__listener_open("127.0.0.1:0", &l, &st), FLOE_OK);
  o = options(NULL, "chief", 0, 300);
  rc = floe__listener_accept(l, &o, 10, &c, &st);
  expect(rc, FLOE_FAILED_PRECONDITION, floe_status_message(&st), "no job secret");
  floe_status_clear(&st);
  o = options(g_secret, "chief", 0, 300);
  rc = floe__listener_accept(l, &o, 50, &c, &st);
  expect(rc, FLOE_DEADLINE_EXCEEDED, floe_status_message(&st), "no connection to 127.0.0.1:");
  floe_status_clear(&st);
  floe__listener_close(l);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("conn");
  TCase *tc = tcase_create("conn");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_exchange);
  tcase_add_test(tc, test_hostile_peers);
  tcase_add_test(tc, test_peer_gone);
  tcase_add_test(tc, test_connect_and_listen);
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
