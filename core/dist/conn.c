/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c - control connections: TCP sockets that open with the mutual challenge-response of
 * auth.c and then carry signed frames (wire.c), sequence numbers counted per direction.
 *
 * Sockets are non-blocking and every wait is a poll() with what is left of a deadline: a
 * peer that stops sending mid-frame, never answers, or never takes what is sent costs at most
 * the deadline, never a thread for ever and never a spinning core. A peer that closes or
 * resets the connection is UNAVAILABLE and one that stalls DEADLINE_EXCEEDED, both naming
 * it. After a bad frame (MAC, sequence, size, a torn frame) the stream cannot be trusted to
 * be in step: the connection is shut and refuses every later call with that first error.
 *
 * The handshake, client C and server S (frames signed with the zero key until it ends):
 *   C -> S  HELLO(C's identity, nonce_c)
 *   S -> C  HELLO(S's identity, nonce_s)
 *   C -> S  PROOF(HMAC(secret, "floe-auth-v1" || 'C' || nonce_c || nonce_s || C's identity))
 *   S -> C  AUTH_RESULT(ok, S's proof with 'S') or AUTH_RESULT(refusal), then S closes
 * The server proves itself only to a client that proved first, so a stranger that connects
 * learns nothing keyed by the secret. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "dist.pb-c.h"

#define DEFAULT_TIMEOUT_MS 10000
#define ADDR_MAX (FLOE__HOST_MAX + 16)

struct FloeListener {
  int fd;
  atomic_bool shut;        /* floe__listener_shutdown was called */
  char address[ADDR_MAX];
};

struct FloeConn {
  int fd;
  bool is_client;
  char address[ADDR_MAX];  /* the peer's host:port */
  char peer[ADDR_MAX + 96]; /* for messages: address and, once known, identity */
  FloeTaskIdentity peer_id;
  FloeWireLimits limits;
  int timeout_ms;
  uint8_t key[32];         /* the session key; zeros during the handshake */
  uint64_t send_seq;       /* the next frame's, this side */
  uint64_t recv_seq;       /* the next frame's due from the peer */
  pthread_mutex_t send_mu, recv_mu, state_mu;
  FloeStatus broken;       /* the first error that closed the connection (code OK: open) */
  atomic_bool shut;        /* floe__conn_shutdown was called: later errors say so */
  bool clean_eof;          /* the last receive met the peer's close at a frame boundary
                            * (under recv_mu) */
};

/* ------------------------------------------------------------------------------------ */
/* Time and waits */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 0 when fd is ready for events before deadline (ms, CLOCK_MONOTONIC), ETIMEDOUT after it,
 * or an errno. Readiness includes hang-ups and errors: the next read or write reports them. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return ETIMEDOUT;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    if (r > 0) return 0;
    if (r == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

static int timeout_or_default(int ms, int dflt) {
  return ms > 0 ? ms : dflt > 0 ? dflt : DEFAULT_TIMEOUT_MS;
}

/* ------------------------------------------------------------------------------------ */
/* Connection state */

static void conn_set_peer(FloeConn *c, const FloeTaskIdentity *id) {
  if (id) {
    char who[128];
    snprintf(c->peer, sizeof c->peer, "%s (%s)", c->address,
             floe__task_identity_str(id, who, sizeof who));
  } else {
    snprintf(c->peer, sizeof c->peer, "%s", c->address);
  }
}

/* Closes c for good after err (copied into c->broken unless an error is there already). */
static void conn_break(FloeConn *c, const FloeStatus *err) {
  pthread_mutex_lock(&c->state_mu);
  if (c->broken.code == FLOE_OK) {
    floe__status_copy(&c->broken, err);
    if (c->broken.code == FLOE_OK) c->broken.code = FLOE_UNKNOWN;
    shutdown(c->fd, SHUT_RDWR);
  }
  pthread_mutex_unlock(&c->state_mu);
}

/* After floe__conn_shutdown every failure comes from it (the peer seems to have closed, or
 * the connection is broken): say so rather than blame the peer. */
static floe_code shut_status(FloeConn *c, floe_code rc, FloeStatus *st) {
  if (!atomic_load(&c->shut)) return rc;
  return floe_status_set(st, FLOE_UNAVAILABLE,
                         "the connection to %s was shut down by this side (its server or pool "
                         "is closing)",
                         c->peer);
}

/* FAILED_PRECONDITION repeating the error that closed c, or OK. */
static floe_code conn_check(FloeConn *c, FloeStatus *st) {
  pthread_mutex_lock(&c->state_mu);
  floe_code rc = FLOE_OK;
  if (c->broken.code != FLOE_OK)
    rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "the connection to %s was closed after an error: %s", c->peer,
                         floe_status_message(&c->broken));
  pthread_mutex_unlock(&c->state_mu);
  return rc;
}

static FloeConn *conn_new(int fd, bool is_client, const char *address, const FloeConnOptions *o,
                          FloeStatus *st) {
  FloeConn *c = floe__calloc(1, sizeof *c);
  if (!c) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a connection to %s", address);
    return NULL;
  }
  c->fd = fd;
  c->is_client = is_client;
  snprintf(c->address, sizeof c->address, "%s", address);
  conn_set_peer(c, NULL);
  c->limits = o->limits;
  c->timeout_ms = timeout_or_default(o->timeout_ms, 0);
  pthread_mutex_init(&c->send_mu, NULL);
  pthread_mutex_init(&c->recv_mu, NULL);
  pthread_mutex_init(&c->state_mu, NULL);
  return c;
}

void floe__conn_close(FloeConn *c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  pthread_mutex_destroy(&c->send_mu);
  pthread_mutex_destroy(&c->recv_mu);
  pthread_mutex_destroy(&c->state_mu);
  floe_status_clear(&c->broken);
  memset(c->key, 0, sizeof c->key);
  floe__free(c);
}

const char *floe__conn_peer(const FloeConn *c) {
  return c->peer;
}

const FloeTaskIdentity *floe__conn_peer_identity(const FloeConn *c) {
  return &c->peer_id;
}

void floe__conn_shutdown(FloeConn *c) {
  atomic_store(&c->shut, true);
  FloeStatus why = {FLOE_OK, NULL};
  /* c->address, not c->peer: a handshake on another thread may be writing that. */
  floe_status_set(&why, FLOE_UNAVAILABLE, "the connection to %s was shut down by this side",
                  c->address);
  conn_break(c, &why);
  floe_status_clear(&why);
}

bool floe__conn_closed_cleanly(FloeConn *c) {
  pthread_mutex_lock(&c->recv_mu);
  bool clean = c->clean_eof;
  pthread_mutex_unlock(&c->recv_mu);
  return clean;
}

bool floe__conn_stale(FloeConn *c) {
  struct pollfd p = {c->fd, POLLIN, 0};
  return poll(&p, 1, 0) != 0; /* readable between exchanges: a close, a reset or garbage */
}

floe_code floe__conn_wait(FloeConn *c, int timeout_ms, FloeStatus *st) {
  int ms = timeout_or_default(timeout_ms, c->timeout_ms);
  floe_code rc = conn_check(c, st);
  if (rc != FLOE_OK) return shut_status(c, rc, st);
  /* Readiness includes a hang-up or error: the receive that follows reports it. */
  int e = wait_fd(c->fd, POLLIN, now_ms() + ms);
  if (e == 0) return FLOE_OK;
  if (e == ETIMEDOUT)
    return floe_status_set(st, FLOE_DEADLINE_EXCEEDED, "%s sent nothing within %d ms", c->peer,
                           ms);
  return floe__status_from_errno(st, e, "waiting for a frame from %s", c->peer);
}

/* ------------------------------------------------------------------------------------ */
/* Bytes */

/* Writes buf[0..len) before deadline. what: "RUN_GRAPH frame" for messages. */
static floe_code write_all(FloeConn *c, const uint8_t *buf, size_t len, int64_t deadline,
                           int timeout_ms, const char *what, FloeStatus *st) {
  for (size_t off = 0; off < len;) {
    ssize_t w = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    int e = w < 0 ? errno : EIO;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      e = wait_fd(c->fd, POLLOUT, deadline);
      if (e == 0) continue;
      if (e == ETIMEDOUT)
        return floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                               "%s did not take a %s within %d ms (%zu of %zu bytes sent): the "
                               "peer is stalled or the network is down",
                               c->peer, what, timeout_ms, off, len);
    }
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ESHUTDOWN)
      return floe_status_set(st, FLOE_UNAVAILABLE,
                             "%s closed the connection while a %s was sent (%zu of %zu bytes): "
                             "the peer ended or restarted",
                             c->peer, what, off, len);
    return floe__status_from_errno(st, e, "sending a %s to %s", what, c->peer);
  }
  return FLOE_OK;
}

/* Reads buf[0..len) before deadline; *got counts what arrived (for telling a timeout before
 * the first byte from one mid-frame). */
static floe_code read_all(FloeConn *c, uint8_t *buf, size_t len, int64_t deadline,
                          int timeout_ms, const char *what, size_t *got, FloeStatus *st) {
  size_t off = 0;
  floe_code rc = FLOE_OK;
  while (off < len) {
    ssize_t r = recv(c->fd, buf + off, len - off, 0);
    if (r > 0) {
      off += (size_t)r;
      continue;
    }
    if (r == 0) {
      rc = floe_status_set(st, FLOE_UNAVAILABLE,
                           "%s closed the connection %s a %s (%zu of %zu bytes): the peer ended, "
                           "restarted or refused this side",
                           c->peer, off ? "in the middle of" : "before", what, off, len);
      break;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      e = wait_fd(c->fd, POLLIN, deadline);
      if (e == 0) continue;
      if (e == ETIMEDOUT) {
        rc = floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                             "%s sent %s %s within %d ms (%zu of %zu bytes): the peer is stalled, "
                             "busy or gone",
                             c->peer, off ? "only part of a" : "no", what, timeout_ms, off, len);
        break;
      }
    }
    if (e == ECONNRESET || e == ENOTCONN || e == ESHUTDOWN || e == EPIPE) {
      rc = floe_status_set(st, FLOE_UNAVAILABLE,
                           "%s reset the connection while a %s was read (%zu of %zu bytes): the "
                           "peer ended or restarted",
                           c->peer, what, off, len);
      break;
    }
    rc = floe__status_from_errno(st, e, "reading a %s from %s", what, c->peer);
    break;
  }
  *got = off;
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Frames */

static uint8_t send_dir(const FloeConn *c) {
  return c->is_client ? 'C' : 'S';
}
static uint8_t recv_dir(const FloeConn *c) {
  return c->is_client ? 'S' : 'C';
}

/* The next frame's bytes under c->send_mu. */
static floe_code encode_locked(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                               uint8_t **frame, size_t *len, FloeStatus *st) {
  /* The peer's limits are not known here; a frame within the defaults always fits. */
  floe_code rc = floe__wire_frame_encode(type, msg, c->send_seq, c->key, send_dir(c), &c->limits,
                                         frame, len, st);
  if (rc == FLOE_OK) c->send_seq++;
  return rc;
}

floe_code floe__conn_encode(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                            uint8_t **frame, size_t *len, FloeStatus *st) {
  pthread_mutex_lock(&c->send_mu);
  floe_code rc = encode_locked(c, type, msg, frame, len, st);
  pthread_mutex_unlock(&c->send_mu);
  return rc;
}

floe_code floe__conn_write_raw(FloeConn *c, const void *buf, size_t len, int timeout_ms,
                               FloeStatus *st) {
  int ms = timeout_or_default(timeout_ms, c->timeout_ms);
  pthread_mutex_lock(&c->send_mu);
  floe_code rc = conn_check(c, st);
  if (rc == FLOE_OK) rc = write_all(c, buf, len, now_ms() + ms, ms, "run of raw bytes", st);
  pthread_mutex_unlock(&c->send_mu);
  return rc;
}

floe_code floe__conn_send(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                          int timeout_ms, FloeStatus *st) {
  int ms = timeout_or_default(timeout_ms, c->timeout_ms);
  int64_t deadline = now_ms() + ms;
  pthread_mutex_lock(&c->send_mu);
  floe_code rc = conn_check(c, st);
  uint8_t *frame = NULL;
  size_t len = 0;
  if (rc == FLOE_OK) rc = encode_locked(c, type, msg, &frame, &len, st);
  if (rc == FLOE_OK) {
    char what[64];
    snprintf(what, sizeof what, "%s frame", floe__wire_type_name(type));
    rc = write_all(c, frame, len, deadline, ms, what, st);
    /* Part of a frame on the wire: the peer can no longer find the next one. */
    if (rc != FLOE_OK) conn_break(c, st);
  }
  floe__free(frame);
  pthread_mutex_unlock(&c->send_mu);
  if (rc != FLOE_OK) rc = shut_status(c, rc, st);
  return rc;
}

floe_code floe__conn_recv(FloeConn *c, int timeout_ms, uint16_t *type,
                          struct ProtobufCMessage **msg, FloeStatus *st) {
  *msg = NULL;
  *type = 0;
  int ms = timeout_or_default(timeout_ms, c->timeout_ms);
  int64_t deadline = now_ms() + ms;
  pthread_mutex_lock(&c->recv_mu);
  floe_code rc = conn_check(c, st);
  uint8_t hdr[FLOE__WIRE_HEADER], *body = NULL;
  size_t got = 0;
  FloeWireHeader h;
  if (rc != FLOE_OK) goto out;
  c->clean_eof = false;
  rc = read_all(c, hdr, sizeof hdr, deadline, ms, "frame header", &got, st);
  if (rc == FLOE_DEADLINE_EXCEEDED && got == 0) goto out; /* nothing read: still in step */
  if (rc == FLOE_UNAVAILABLE && got == 0) c->clean_eof = true;
  if (rc != FLOE_OK) goto err_break;
  if ((rc = floe__wire_header_decode(hdr, &c->limits, c->peer, &h, st)) != FLOE_OK)
    goto err_break;
  body = floe__malloc((size_t)h.length + FLOE__WIRE_MAC);
  if (!body) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a %s frame of %" PRIu32
                         " bytes from %s", floe__wire_type_name(h.type), h.length, c->peer);
    goto err_break;
  }
  {
    char what[64];
    snprintf(what, sizeof what, "%s frame", floe__wire_type_name(h.type));
    rc = read_all(c, body, (size_t)h.length + FLOE__WIRE_MAC, deadline, ms, what, &got, st);
  }
  if (rc != FLOE_OK) goto err_break;
  rc = floe__wire_frame_open(&h, hdr, body, c->key, recv_dir(c), c->recv_seq, c->peer, msg, st);
  if (rc != FLOE_OK) goto err_break;
  c->recv_seq++;
  *type = h.type;
  goto out;
err_break:
  conn_break(c, st);
out:
  floe__free(body);
  pthread_mutex_unlock(&c->recv_mu);
  if (rc != FLOE_OK) rc = shut_status(c, rc, st);
  return rc;
}

/* Receives a frame that must be of type want. */
static floe_code recv_expect(FloeConn *c, uint16_t want, int64_t deadline,
                             struct ProtobufCMessage **msg, FloeStatus *st) {
  int left = (int)(deadline - now_ms());
  uint16_t type;
  if (left <= 0) left = 1;
  floe_code rc = floe__conn_recv(c, left, &type, msg, st);
  if (rc != FLOE_OK) return rc;
  if (type != want) {
    floe__wire_free(*msg);
    *msg = NULL;
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "%s sent %s during the handshake where %s was due: refused", c->peer,
                         floe__wire_type_name(type), floe__wire_type_name(want));
    conn_break(c, st);
  }
  return rc;
}

static floe_code send_left(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                           int64_t deadline, FloeStatus *st) {
  int left = (int)(deadline - now_ms());
  return floe__conn_send(c, type, msg, left > 0 ? left : 1, st);
}

/* ------------------------------------------------------------------------------------ */
/* Handshake */

static floe_code identity_from(FloeConn *c, const Floe__Dist__Hello *hello, FloeStatus *st) {
  const Floe__Dist__TaskId *t = hello->task;
  size_t jn = t && t->job ? strlen(t->job) : 0;
  bool ok = t && jn > 0 && jn <= FLOE__JOB_NAME_MAX && t->task >= 0;
  for (size_t i = 0; ok && i < jn; i++)
    if (!((t->job[i] >= 'a' && t->job[i] <= 'z') || (t->job[i] >= '0' && t->job[i] <= '9') ||
          t->job[i] == '_'))
      ok = false;
  if (!ok)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: its HELLO names no valid task (a job name [a-z][a-z0-9_]* and "
                           "an index >= 0): refused",
                           c->peer);
  if (hello->nonce.len != FLOE__NONCE)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: its HELLO has a nonce of %zu bytes, not %d: refused", c->peer,
                           hello->nonce.len, FLOE__NONCE);
  memcpy(c->peer_id.job, t->job, jn + 1);
  c->peer_id.task = t->task;
  c->peer_id.incarnation = t->incarnation;
  conn_set_peer(c, &c->peer_id);
  return FLOE_OK;
}

static Floe__Dist__TaskId task_id_msg(const FloeTaskIdentity *id) {
  Floe__Dist__TaskId t = FLOE__DIST__TASK_ID__INIT;
  t.job = (char *)id->job;
  t.task = id->task;
  t.incarnation = id->incarnation;
  return t;
}

static floe_code check_options(const FloeConnOptions *o, const char *side, FloeStatus *st) {
  if (!o || !o->secret)
    return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "%s: no job secret: set FLOE_JOB_SECRET_FILE to a 0600 file of 16 "
                           "bytes to 4 KiB (or FLOE_JOB_SECRET) on every task of the job",
                           side);
  size_t jn = strnlen(o->self.job, sizeof o->self.job);
  if (jn == 0 || jn > FLOE__JOB_NAME_MAX || o->self.task < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: this task's identity is not set (job and task index)", side);
  return FLOE_OK;
}

static floe_code handshake_client(FloeConn *c, const FloeConnOptions *o, int64_t deadline,
                                  FloeStatus *st) {
  uint8_t nonce_c[FLOE__NONCE], nonce_s[FLOE__NONCE], proof[32];
  struct ProtobufCMessage *m = NULL;
  floe_code rc = floe__auth_random(nonce_c, sizeof nonce_c, st);
  if (rc != FLOE_OK) return rc;
  Floe__Dist__TaskId self = task_id_msg(&o->self);
  Floe__Dist__Hello hello = FLOE__DIST__HELLO__INIT;
  hello.task = &self;
  hello.nonce.data = nonce_c;
  hello.nonce.len = sizeof nonce_c;
  if ((rc = send_left(c, FLOE__WIRE_HELLO, &hello.base, deadline, st)) != FLOE_OK) return rc;
  if ((rc = recv_expect(c, FLOE__WIRE_HELLO, deadline, &m, st)) != FLOE_OK) return rc;
  rc = identity_from(c, (Floe__Dist__Hello *)m, st);
  if (rc == FLOE_OK) memcpy(nonce_s, ((Floe__Dist__Hello *)m)->nonce.data, FLOE__NONCE);
  floe__wire_free(m);
  m = NULL;
  if (rc != FLOE_OK) goto err_break;
  if (o->expect_job &&
      (strcmp(o->expect_job, c->peer_id.job) != 0 || o->expect_task != c->peer_id.task)) {
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "%s is not the task expected there (/job:%s/task:%d): the cluster spec "
                         "and the running tasks disagree",
                         c->peer, o->expect_job, o->expect_task);
    goto err_break;
  }
  if ((rc = floe__auth_proof(o->secret, 'C', nonce_c, nonce_s, &o->self, proof, st)) != FLOE_OK)
    goto err_break;
  Floe__Dist__Proof pm = FLOE__DIST__PROOF__INIT;
  pm.mac.data = proof;
  pm.mac.len = sizeof proof;
  if ((rc = send_left(c, FLOE__WIRE_PROOF, &pm.base, deadline, st)) != FLOE_OK) return rc;
  if ((rc = recv_expect(c, FLOE__WIRE_AUTH_RESULT, deadline, &m, st)) != FLOE_OK) return rc;
  const Floe__Dist__AuthResult *res = (const Floe__Dist__AuthResult *)m;
  if (res->status && res->status->code != FLOE_OK) {
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "%s refused this task: %.300s (this side's secret: %s)", c->peer,
                         res->status->message ? res->status->message : "(no reason given)",
                         floe__secret_source(o->secret));
    goto err_free;
  }
  if ((rc = floe__auth_proof(o->secret, 'S', nonce_c, nonce_s, &c->peer_id, proof, st)) !=
      FLOE_OK)
    goto err_free;
  if (res->mac.len != sizeof proof || !floe__auth_equal(res->mac.data, proof, sizeof proof)) {
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "%s could not prove it holds the job secret (this side's: %s): the "
                         "tasks hold different secrets, or the peer is not a task of this job",
                         c->peer, floe__secret_source(o->secret));
    goto err_free;
  }
  rc = floe__auth_session_key(o->secret, nonce_c, nonce_s, c->key, st);
err_free:
  floe__wire_free(m);
  if (rc == FLOE_OK) return FLOE_OK;
err_break:
  conn_break(c, st);
  return rc;
}

/* Tells the client why it was refused (best effort: it may be gone), then closes. */
static void refuse(FloeConn *c, int64_t deadline, floe_code code, const char *why) {
  Floe__Dist__Status s = FLOE__DIST__STATUS__INIT;
  s.code = code;
  s.message = (char *)why;
  Floe__Dist__AuthResult r = FLOE__DIST__AUTH_RESULT__INIT;
  r.status = &s;
  FloeStatus ignored = {FLOE_OK, NULL};
  int64_t short_deadline = now_ms() + 200;
  send_left(c, FLOE__WIRE_AUTH_RESULT, &r.base, deadline < short_deadline ? deadline
                                                                           : short_deadline,
            &ignored);
  floe_status_clear(&ignored);
}

static floe_code handshake_server(FloeConn *c, const FloeConnOptions *o, int64_t deadline,
                                  FloeStatus *st) {
  uint8_t nonce_c[FLOE__NONCE], nonce_s[FLOE__NONCE], proof[32];
  struct ProtobufCMessage *m = NULL;
  floe_code rc = recv_expect(c, FLOE__WIRE_HELLO, deadline, &m, st);
  if (rc != FLOE_OK) return rc;
  rc = identity_from(c, (Floe__Dist__Hello *)m, st);
  if (rc == FLOE_OK) memcpy(nonce_c, ((Floe__Dist__Hello *)m)->nonce.data, FLOE__NONCE);
  floe__wire_free(m);
  m = NULL;
  if (rc != FLOE_OK) goto err_break;
  if ((rc = floe__auth_random(nonce_s, sizeof nonce_s, st)) != FLOE_OK) goto err_break;
  Floe__Dist__TaskId self = task_id_msg(&o->self);
  Floe__Dist__Hello hello = FLOE__DIST__HELLO__INIT;
  hello.task = &self;
  hello.nonce.data = nonce_s;
  hello.nonce.len = sizeof nonce_s;
  if ((rc = send_left(c, FLOE__WIRE_HELLO, &hello.base, deadline, st)) != FLOE_OK) return rc;
  if ((rc = recv_expect(c, FLOE__WIRE_PROOF, deadline, &m, st)) != FLOE_OK) return rc;
  const Floe__Dist__Proof *pm = (const Floe__Dist__Proof *)m;
  if ((rc = floe__auth_proof(o->secret, 'C', nonce_c, nonce_s, &c->peer_id, proof, st)) !=
      FLOE_OK)
    goto err_free;
  if (pm->mac.len != sizeof proof) {
    refuse(c, deadline, FLOE_PERMISSION_DENIED, "a proof of the job secret has 32 bytes");
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "%s sent a proof of %zu bytes, not 32 (a client without the job "
                         "secret?): refused",
                         c->peer, pm->mac.len);
    goto err_free;
  }
  if (!floe__auth_equal(pm->mac.data, proof, sizeof proof)) {
    refuse(c, deadline, FLOE_PERMISSION_DENIED,
           "its proof of the job secret did not verify: the tasks hold different secrets");
    rc = floe_status_set(st, FLOE_PERMISSION_DENIED,
                         "%s failed authentication: its proof of the job secret did not verify "
                         "(it holds another secret than %s): refused",
                         c->peer, floe__secret_source(o->secret));
    goto err_free;
  }
  if ((rc = floe__auth_proof(o->secret, 'S', nonce_c, nonce_s, &o->self, proof, st)) != FLOE_OK)
    goto err_free;
  Floe__Dist__AuthResult res = FLOE__DIST__AUTH_RESULT__INIT;
  res.mac.data = proof;
  res.mac.len = sizeof proof;
  if ((rc = send_left(c, FLOE__WIRE_AUTH_RESULT, &res.base, deadline, st)) != FLOE_OK)
    goto err_free;
  /* The key is switched only now: the result frame above still went under the zero key. */
  rc = floe__auth_session_key(o->secret, nonce_c, nonce_s, c->key, st);
err_free:
  floe__wire_free(m);
  if (rc == FLOE_OK) return FLOE_OK;
err_break:
  conn_break(c, st);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Sockets */

/* "host:port" of a socket address ([v6]:port for IPv6). */
static void sockaddr_str(const struct sockaddr *sa, char *buf, size_t cap) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    snprintf(buf, cap, "%s:%d", host, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    snprintf(buf, cap, "[%s]:%d", host, port);
  } else {
    snprintf(buf, cap, "(address family %d)", sa->sa_family);
  }
}

static floe_code resolve(const char *address, bool passive, bool allow_port0,
                         struct addrinfo **res, FloeStatus *st) {
  char host[FLOE__HOST_MAX + 1], port_s[8];
  int port;
  floe_code rc = floe__hostport_parse(address, allow_port0, passive ? "listen address"
                                                                     : "address",
                                      host, &port, st);
  if (rc != FLOE_OK) return rc;
  snprintf(port_s, sizeof port_s, "%d", port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  struct in6_addr a6;
  struct in_addr a4;
  if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1)
    hints.ai_flags |= AI_NUMERICHOST;
  int e = getaddrinfo(host, port_s, &hints, res);
  if (e != 0)
    return floe_status_set(st, e == EAI_NONAME ? FLOE_NOT_FOUND : FLOE_UNAVAILABLE,
                           "%s: cannot resolve host %s: %s", address, host,
                           e == EAI_SYSTEM ? strerror(errno) : gai_strerror(e));
  return FLOE_OK;
}

floe_code floe__listener_open(const char *address, FloeListener **out, FloeStatus *st) {
  *out = NULL;
  struct addrinfo *res = NULL;
  floe_code rc = resolve(address, true, true, &res, st);
  if (rc != FLOE_OK) return rc;
  int fd = -1, err = 0;
  /* The configured address only: the first the name resolves to. */
  struct addrinfo *ai = res;
  fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    err = errno;
  } else {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) err = errno;
  }
  if (err) {
    char where[ADDR_MAX];
    sockaddr_str(ai->ai_addr, where, sizeof where);
    if (err == EADDRINUSE)
      rc = floe_status_set(st, FLOE_UNAVAILABLE,
                           "cannot listen on %s (%s): the port is in use (another process, or "
                           "another task of this machine, holds it)",
                           address, where);
    else if (err == EADDRNOTAVAIL)
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "cannot listen on %s (%s): no interface of this machine has that "
                           "address (is the cluster spec's host this machine's?)",
                           address, where);
    else
      rc = floe__status_from_errno(st, err, "cannot listen on %s (%s)", address, where);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return rc;
  }
  freeaddrinfo(res);
  FloeListener *l = floe__calloc(1, sizeof *l);
  if (!l) {
    close(fd);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listening on %s", address);
  }
  l->fd = fd;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    sockaddr_str((struct sockaddr *)&ss, l->address, sizeof l->address);
  else
    snprintf(l->address, sizeof l->address, "%s", address);
  *out = l;
  return FLOE_OK;
}

const char *floe__listener_address(const FloeListener *l) {
  return l->address;
}

void floe__listener_close(FloeListener *l) {
  if (!l) return;
  close(l->fd);
  floe__free(l);
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

floe_code floe__listener_accept_raw(FloeListener *l, const FloeConnOptions *o, int timeout_ms,
                                    FloeConn **out, FloeStatus *st) {
  *out = NULL;
  char side[ADDR_MAX + 16];
  snprintf(side, sizeof side, "listener %s", l->address);
  floe_code rc = check_options(o, side, st);
  if (rc != FLOE_OK) return rc;
  int64_t wait_deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
  int fd;
  struct sockaddr_storage ss;
  for (;;) {
    if (atomic_load(&l->shut))
      return floe_status_set(st, FLOE_CANCELLED, "listener %s was shut down", l->address);
    socklen_t sl = sizeof ss;
    fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) break;
    int e = errno;
    if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      e = wait_fd(l->fd, POLLIN, wait_deadline);
      if (e == 0) continue;
      if (e == ETIMEDOUT)
        return floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                               "no connection to %s within %d ms", l->address, timeout_ms);
    }
    if (atomic_load(&l->shut))
      return floe_status_set(st, FLOE_CANCELLED, "listener %s was shut down", l->address);
    return floe__status_from_errno(st, e, "accepting a connection on %s", l->address);
  }
  set_nodelay(fd);
  char peer[ADDR_MAX];
  sockaddr_str((struct sockaddr *)&ss, peer, sizeof peer);
  FloeConn *c = conn_new(fd, false, peer, o, st);
  if (!c) {
    close(fd);
    return FLOE_NO_MEMORY;
  }
  *out = c;
  return FLOE_OK;
}

floe_code floe__conn_handshake_server(FloeConn *c, const FloeConnOptions *o, FloeStatus *st) {
  floe_code rc = check_options(o, "accepting a connection", st);
  if (rc == FLOE_OK) rc = handshake_server(c, o, now_ms() + c->timeout_ms, st);
  if (rc != FLOE_OK) rc = shut_status(c, rc, st);
  return rc;
}

floe_code floe__listener_accept(FloeListener *l, const FloeConnOptions *o, int timeout_ms,
                                FloeConn **out, FloeStatus *st) {
  FloeConn *c = NULL;
  floe_code rc = floe__listener_accept_raw(l, o, timeout_ms, &c, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__conn_handshake_server(c, o, st);
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "%s: refused a client", l->address);
    floe__conn_close(c);
    return rc;
  }
  *out = c;
  return FLOE_OK;
}

void floe__listener_shutdown(FloeListener *l) {
  atomic_store(&l->shut, true);
  /* On Linux this wakes a poll() or accept() on the listening socket at once. */
  shutdown(l->fd, SHUT_RDWR);
}

/* Connects fd to one address before deadline. */
static int connect_one(int fd, const struct addrinfo *ai, int64_t deadline) {
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return 0;
  if (errno != EINPROGRESS && errno != EINTR) return errno;
  int e = wait_fd(fd, POLLOUT, deadline);
  if (e) return e;
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return errno;
  return soerr;
}

floe_code floe__conn_connect(const char *address, const FloeConnOptions *o, FloeConn **out,
                             FloeStatus *st) {
  *out = NULL;
  char side[ADDR_MAX + 16];
  snprintf(side, sizeof side, "connecting to %s", address ? address : "(null)");
  floe_code rc = check_options(o, side, st);
  if (rc != FLOE_OK) return rc;
  int ms = timeout_or_default(o->timeout_ms, 0);
  int64_t deadline = now_ms() + ms;
  struct addrinfo *res = NULL;
  if ((rc = resolve(address, false, false, &res, st)) != FLOE_OK) return rc;
  int fd = -1, err = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    err = connect_one(fd, ai, deadline);
    if (err == 0) break;
    close(fd);
    fd = -1;
    if (err == ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (err == ETIMEDOUT)
      return floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                             "no connection to %s within %d ms: the task is not up, or the "
                             "network drops the packets",
                             address, ms);
    if (err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH)
      return floe_status_set(st, FLOE_UNAVAILABLE, "cannot connect to %s: %s%s", address,
                             strerror(err),
                             err == ECONNREFUSED ? " (nothing listens there yet?)" : "");
    return floe__status_from_errno(st, err, "cannot connect to %s", address);
  }
  set_nodelay(fd);
  FloeConn *c = conn_new(fd, true, address, o, st);
  if (!c) {
    close(fd);
    return FLOE_NO_MEMORY;
  }
  if ((rc = handshake_client(c, o, deadline, st)) != FLOE_OK) {
    floe__conn_close(c);
    return rc;
  }
  *out = c;
  return FLOE_OK;
}
