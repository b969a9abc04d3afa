/* SPDX-License-Identifier: Apache-2.0 */
/* local.c - the "local" transport: tagged messages between comms of this process.
 *
 * Shaped like a network transport (FloeTransportFns) so that the rendezvous above it is the
 * same code for every transport: listen hands out an address blob naming an endpoint of this
 * process, connect/accept pair a send comm with a recv comm, and isend/irecv match by 64-bit
 * tag. Every endpoint, connection and request lives under one process-wide mutex (two
 * runtimes of one process can reach each other's endpoints); the work done under it is a
 * list walk and a memcpy.
 *
 * Matching: a receive takes the first buffered message of its tag; a send completes the
 * first posted receive of its tag (first posted, first served), or is buffered (its bytes
 * copied) when none is posted, so isend never blocks and its request completes at once.
 * A message larger than the posted buffer completes the receive with FLOE_OUT_OF_RANGE and
 * is dropped; test() then reports the message's size in *size (the rendezvous names both
 * sizes from it).
 *
 * get_fd gives an eventfd of the transport context that becomes readable whenever one of
 * its requests completes or a peer connects to one of its endpoints; progress() drains it (call progress, then test, then wait on the
 * fd: no completion is missed). So trywait (ABI 1.4) always answers "safe to sleep": a
 * completion after progress leaves the fd readable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <floe/floe_plugin.h>

#define ADDR_PREFIX "floe-local:"

static const FloeHostApi *host;

/* One lock for everything of every context (see above). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_endpoint_id = 1;

typedef struct Ctx {
  int efd;                    /* eventfd: readable after a completion */
} Ctx;

typedef struct Req Req;
typedef struct Conn Conn;

typedef struct Endpoint {
  Ctx *ctx;
  uint64_t id;
  Conn *backlog;              /* connected, not yet accepted (FIFO through accept_next) */
  struct Endpoint *next;      /* in the process-wide list */
} Endpoint;

/* A buffered (unexpected) message. */
typedef struct Msg {
  uint64_t tag;
  size_t len;
  struct Msg *next;
  unsigned char data[];
} Msg;

struct Req {
  Ctx *ctx;                   /* whose eventfd announces its completion */
  bool is_recv;
  bool done;
  floe_code code;             /* of a completed request */
  size_t size;                /* bytes moved (or, on FLOE_OUT_OF_RANGE, the message's size) */
  void *buf;                  /* receive buffer (the caller's) */
  size_t len;
  uint64_t tag;
  Conn *conn;                 /* a posted receive's connection, NULL once matched */
  Req *next;                  /* in conn->posted */
  Conn *owner;                /* whose close frees it if it is never tested; NULL after */
  Req *live_prev, *live_next; /* in owner->send_live or owner->recv_live */
};

struct Conn {
  Ctx *send_ctx, *recv_ctx;   /* recv_ctx set by accept */
  bool send_open, recv_open;  /* freed when both halves are closed */
  bool accepted;
  Req *posted, **posted_tail; /* receives waiting for a message, in post order */
  Msg *queued, **queued_tail; /* messages waiting for a receive, in send order */
  Req *send_live, *recv_live; /* requests not yet tested (freed by close_send / close_recv) */
  Conn *accept_next;
};

/* Requests are the caller's until test() reports them done; one never tested is freed with
 * its half of the connection (under mu). */
static void live_add(Req **head, Req *r, Conn *owner) {
  r->owner = owner;
  r->live_prev = NULL;
  r->live_next = *head;
  if (*head) (*head)->live_prev = r;
  *head = r;
}

static void live_remove(Req *r) {
  if (!r->owner) return;
  Req **head = r->is_recv ? &r->owner->recv_live : &r->owner->send_live;
  if (r->live_prev)
    r->live_prev->live_next = r->live_next;
  else
    *head = r->live_next;
  if (r->live_next) r->live_next->live_prev = r->live_prev;
  r->owner = NULL;
}

static void live_free_all(Req **head) {
  for (Req *r = *head, *next; r; r = next) {
    next = r->live_next;
    free(r);
  }
  *head = NULL;
}

static Endpoint *endpoints;

static void signal_ctx(Ctx *c) {
  uint64_t one = 1;
  /* A full counter (2^64 - 2 wakeups unread) still reads as readable: nothing to do. */
  ssize_t w = write(c->efd, &one, sizeof one);
  (void)w;
}

static void req_complete(Req *r, floe_code code, size_t size) {
  r->done = true;
  r->code = code;
  r->size = size;
  signal_ctx(r->ctx);
}

static floe_code local_init(const FloeHostApi *h, void **out) {
  (void)h;
  Ctx *c = calloc(1, sizeof *c);
  if (!c) return FLOE_NO_MEMORY;
  c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->efd < 0) {
    if (host) host->log(FLOE_LOG_ERROR, "transport local: eventfd failed: %s", strerror(errno));
    free(c);
    return FLOE_UNAVAILABLE;
  }
  *out = c;
  return FLOE_OK;
}

/* Comms must be closed first (the rendezvous' transport manager does). */
static void local_finalize(void *ctx) {
  Ctx *c = ctx;
  if (!c) return;
  close(c->efd);
  free(c);
}

static floe_code local_listen(void *ctx, void *addr, size_t *addr_len, void **listen_comm) {
  Endpoint *e = calloc(1, sizeof *e);
  if (!e) return FLOE_NO_MEMORY;
  e->ctx = ctx;
  pthread_mutex_lock(&mu);
  e->id = next_endpoint_id++;
  e->next = endpoints;
  endpoints = e;
  pthread_mutex_unlock(&mu);
  int n = snprintf(addr, FLOE_TRANSPORT_ADDR_MAX, ADDR_PREFIX "%ld:%" PRIu64, (long)getpid(),
                   e->id);
  *addr_len = (size_t)n + 1;
  *listen_comm = e;
  return FLOE_OK;
}

/* Parses an address blob of local_listen; false when it is not one. */
static bool parse_addr(const void *addr, size_t len, long *pid, uint64_t *id) {
  char text[FLOE_TRANSPORT_ADDR_MAX + 1];
  if (!addr || len == 0 || len > FLOE_TRANSPORT_ADDR_MAX) return false;
  memcpy(text, addr, len);
  text[len] = '\0';
  size_t pre = strlen(ADDR_PREFIX);
  if (strncmp(text, ADDR_PREFIX, pre) != 0) return false;
  char *end;
  errno = 0;
  *pid = strtol(text + pre, &end, 10);
  if (errno || *end != ':') return false;
  const char *idp = end + 1;
  *id = strtoull(idp, &end, 10);
  return !errno && end != idp && *end == '\0';
}

static floe_code local_connect(void *ctx, const void *addr, size_t addr_len, void **send_comm) {
  long pid;
  uint64_t id;
  if (!parse_addr(addr, addr_len, &pid, &id)) {
    if (host) host->log(FLOE_LOG_ERROR, "transport local: connect: not a local address");
    return FLOE_INVALID_ARGUMENT;
  }
  if (pid != (long)getpid()) {
    if (host)
      host->log(FLOE_LOG_ERROR,
                "transport local: connect: the address is of process %ld; this transport "
                "reaches only its own process (%ld): use a network transport",
                pid, (long)getpid());
    return FLOE_UNAVAILABLE;
  }
  Conn *k = calloc(1, sizeof *k);
  if (!k) return FLOE_NO_MEMORY;
  k->send_ctx = ctx;
  k->send_open = k->recv_open = true;
  k->posted_tail = &k->posted;
  k->queued_tail = &k->queued;
  pthread_mutex_lock(&mu);
  Endpoint *e = endpoints;
  while (e && e->id != id) e = e->next;
  if (!e) {
    pthread_mutex_unlock(&mu);
    free(k);
    if (host)
      host->log(FLOE_LOG_ERROR, "transport local: connect: endpoint %" PRIu64 " is closed", id);
    return FLOE_NOT_FOUND;
  }
  Conn **tail = &e->backlog;
  while (*tail) tail = &(*tail)->accept_next;
  *tail = k;
  signal_ctx(e->ctx); /* accept can succeed now: a waiter on the listener's fd wakes */
  pthread_mutex_unlock(&mu);
  *send_comm = k;
  return FLOE_OK;
}

/* Never blocks: FLOE_UNAVAILABLE when no peer has connected yet (call again later). */
static floe_code local_accept(void *listen_comm, void **recv_comm) {
  Endpoint *e = listen_comm;
  pthread_mutex_lock(&mu);
  Conn *k = e->backlog;
  if (k) {
    e->backlog = k->accept_next;
    k->accept_next = NULL;
    k->recv_ctx = e->ctx;
    k->accepted = true;
  }
  pthread_mutex_unlock(&mu);
  if (!k) return FLOE_UNAVAILABLE;
  *recv_comm = k;
  return FLOE_OK;
}

static Req *req_new(Ctx *ctx, bool is_recv, void *buf, size_t len, uint64_t tag) {
  Req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->ctx = ctx;
  r->is_recv = is_recv;
  r->buf = buf;
  r->len = len;
  r->tag = tag;
  return r;
}

/* Delivers len bytes to a posted receive (under mu). */
static void deliver(Req *r, const void *data, size_t len) {
  if (len > r->len) {
    if (host)
      host->log(FLOE_LOG_ERROR,
                "transport local: a message of %zu bytes under tag 0x%" PRIx64
                " is larger than the %zu bytes posted to receive it; dropped",
                len, r->tag, r->len);
    req_complete(r, FLOE_OUT_OF_RANGE, len);
    return;
  }
  if (len) memcpy(r->buf, data, len);
  req_complete(r, FLOE_OK, len);
}

static floe_code local_isend(void *send_comm, const void *buf, size_t len, uint64_t tag,
                             void *mhandle, void **request) {
  (void)mhandle;
  Conn *k = send_comm;
  if (len && !buf) return FLOE_INVALID_ARGUMENT;
  Req *s = req_new(k->send_ctx, false, NULL, 0, tag);
  if (!s) return FLOE_NO_MEMORY;
  pthread_mutex_lock(&mu);
  if (!k->recv_open) {
    pthread_mutex_unlock(&mu);
    free(s);
    if (host) host->log(FLOE_LOG_ERROR, "transport local: isend: the receiving side is closed");
    return FLOE_FAILED_PRECONDITION;
  }
  Req **pp = &k->posted;
  while (*pp && (*pp)->tag != tag) pp = &(*pp)->next;
  if (*pp) {
    Req *r = *pp;
    *pp = r->next;
    if (!*pp) k->posted_tail = pp;
    r->next = NULL;
    r->conn = NULL;
    deliver(r, buf, len);
  } else {
    Msg *m = malloc(sizeof *m + len);
    if (!m) {
      pthread_mutex_unlock(&mu);
      free(s);
      return FLOE_NO_MEMORY;
    }
    m->tag = tag;
    m->len = len;
    m->next = NULL;
    if (len) memcpy(m->data, buf, len);
    *k->queued_tail = m;
    k->queued_tail = &m->next;
  }
  req_complete(s, FLOE_OK, len); /* the bytes are copied or delivered: buf is free again */
  live_add(&k->send_live, s, k);
  pthread_mutex_unlock(&mu);
  *request = s;
  return FLOE_OK;
}

static floe_code local_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag,
                             void *mhandle, void **request) {
  (void)mhandle;
  Conn *k = recv_comm;
  if (len && !buf) return FLOE_INVALID_ARGUMENT;
  if (!k->accepted) return FLOE_INVALID_ARGUMENT; /* a send comm, or never accepted */
  Req *r = req_new(k->recv_ctx, true, buf, len, tag);
  if (!r) return FLOE_NO_MEMORY;
  pthread_mutex_lock(&mu);
  Msg **mp = &k->queued;
  while (*mp && (*mp)->tag != tag) mp = &(*mp)->next;
  if (*mp) {
    Msg *m = *mp;
    *mp = m->next;
    if (!*mp) k->queued_tail = mp;
    deliver(r, m->data, m->len);
    free(m);
  } else {
    r->conn = k;
    *k->posted_tail = r;
    k->posted_tail = &r->next;
  }
  live_add(&k->recv_live, r, k);
  pthread_mutex_unlock(&mu);
  *request = r;
  return FLOE_OK;
}

/* On completion frees the request and returns its code (FLOE_OUT_OF_RANGE: the message was
 * larger than the buffer; *size is then the message's size). */
static floe_code local_test(void *request, int *done, size_t *size) {
  Req *r = request;
  pthread_mutex_lock(&mu);
  bool d = r->done;
  floe_code code = r->code;
  size_t n = r->size;
  if (d) live_remove(r);
  pthread_mutex_unlock(&mu);
  *done = d;
  if (!d) return FLOE_OK;
  if (size) *size = n;
  free(r);
  return code;
}

/* Drains the eventfd (see the top of the file). */
static floe_code local_progress(void *ctx) {
  Ctx *c = ctx;
  uint64_t v;
  while (read(c->efd, &v, sizeof v) == (ssize_t)sizeof v) {
  }
  return FLOE_OK;
}

static floe_code local_get_fd(void *ctx, int *fd) {
  *fd = ((Ctx *)ctx)->efd;
  return FLOE_OK;
}

/* Nothing completes without writing the eventfd, which stays readable until progress. */
static floe_code local_trywait(void *ctx) {
  (void)ctx;
  return FLOE_OK;
}

/* Withdraws a posted receive that no message has matched. */
static floe_code local_cancel(void *request) {
  Req *r = request;
  pthread_mutex_lock(&mu);
  if (!r->is_recv || r->done || !r->conn) {
    pthread_mutex_unlock(&mu);
    return FLOE_UNAVAILABLE;
  }
  Conn *k = r->conn;
  Req **pp = &k->posted;
  while (*pp && *pp != r) pp = &(*pp)->next;
  if (*pp) {
    *pp = r->next;
    if (!*pp) k->posted_tail = pp;
  }
  live_remove(r);
  pthread_mutex_unlock(&mu);
  free(r);
  return FLOE_OK;
}

/* Frees the connection once both halves are closed (under mu). */
static void conn_maybe_free(Conn *k) {
  if (k->send_open || k->recv_open) return;
  free(k);
}

/* Send requests complete at once; those never tested are freed here. A connection never
 * accepted is withdrawn from its endpoint's backlog. */
static void local_close_send(void *send_comm) {
  Conn *k = send_comm;
  pthread_mutex_lock(&mu);
  k->send_open = false;
  live_free_all(&k->send_live); /* completed, never tested */
  if (!k->accepted) {
    for (Endpoint *e = endpoints; e; e = e->next)
      for (Conn **pp = &e->backlog; *pp; pp = &(*pp)->accept_next)
        if (*pp == k) {
          *pp = k->accept_next;
          break;
        }
    k->recv_open = false;
  }
  conn_maybe_free(k);
  pthread_mutex_unlock(&mu);
}

/* Buffered messages are dropped, posted receives and completed ones never tested freed
 * (their requests must not be tested afterwards). */
static void local_close_recv(void *recv_comm) {
  Conn *k = recv_comm;
  pthread_mutex_lock(&mu);
  k->recv_open = false;
  live_free_all(&k->recv_live); /* posted ones and completed ones never tested */
  k->posted = NULL;
  k->posted_tail = &k->posted;
  for (Msg *m = k->queued, *next; m; m = next) {
    next = m->next;
    free(m);
  }
  k->queued = NULL;
  k->queued_tail = &k->queued;
  conn_maybe_free(k);
  pthread_mutex_unlock(&mu);
}

/* Connections still in the backlog are refused: their senders see a closed receiver. */
static void local_close_listen(void *listen_comm) {
  Endpoint *e = listen_comm;
  pthread_mutex_lock(&mu);
  for (Endpoint **pp = &endpoints; *pp; pp = &(*pp)->next)
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  for (Conn *k = e->backlog, *next; k; k = next) {
    next = k->accept_next;
    k->accept_next = NULL;
    k->recv_open = false;
    k->accepted = true; /* no longer in a backlog */
    conn_maybe_free(k);
  }
  pthread_mutex_unlock(&mu);
  free(e);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg);
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "transport-local", "1.0");
  if (rc != FLOE_OK) return rc;
  host = h;
  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "local";
  t.init = local_init;
  t.finalize = local_finalize;
  t.listen = local_listen;
  t.connect = local_connect;
  t.accept = local_accept;
  t.isend = local_isend;
  t.irecv = local_irecv;
  t.test = local_test;
  t.progress = local_progress;
  t.get_fd = local_get_fd;
  t.close_send = local_close_send;
  t.close_recv = local_close_recv;
  t.close_listen = local_close_listen;
  t.cancel = local_cancel;
  t.trywait = local_trywait;
  return reg->register_transport(reg, &t);
}
