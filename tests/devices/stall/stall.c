/* SPDX-License-Identifier: Apache-2.0 */
/* stall.c - floe-transport-stall.so, a transport for tests (never installed) whose peer hangs
 * in the middle of a value: FLOE_TRANSPORT=stall.
 *
 * Loopback only (one process, each runtime its own ctx). A message under an even tag is
 * delivered like any transport's (queued until a receive with its tag is posted, or handed
 * to one waiting); a message under an odd tag (the rendezvous's second message of a split
 * value: its payload) is swallowed: its send completes, and every receive posted under an
 * odd tag stays in flight forever, as if its bytes had started arriving from a peer that then
 * stopped. cancel always answers FLOE_UNAVAILABLE (the receive is already matched, like
 * libfabric's or UCX's once data arrives), so only closing the comm ends such a receive. This
 * is what an aborted step meets when a peer is stopped (SIGSTOP) in the middle of a transfer;
 * tests/core/test_rendezvous.c checks that an abort never waits for it.
 *
 * No fd and no wait slot: the core's manager polls test() while transfers are pending.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_plugin.h>

typedef struct Req {
  bool is_recv, done;
  void *buf;
  size_t len, size;
  uint64_t tag;
  struct Req *next;        /* in the ctx's waiting receives while not done */
} Req;

typedef struct Msg {
  uint64_t tag;
  size_t len;
  struct Msg *next;
  unsigned char data[];
} Msg;

typedef struct Ctx {
  pthread_mutex_t mu;
  int backlog;             /* connects not yet accepted */
  Req *waiting;            /* posted receives (even tags: not matched yet; odd: stalled) */
  Msg *queued;             /* messages sent before their receive */
} Ctx;

typedef struct Comm {
  Ctx *ctx;
} Comm;

static floe_code stall_init(const FloeHostApi *h, void **ctx) {
  (void)h;
  Ctx *c = calloc(1, sizeof *c);
  if (!c) return FLOE_NO_MEMORY;
  pthread_mutex_init(&c->mu, NULL);
  *ctx = c;
  return FLOE_OK;
}

static void stall_finalize(void *ctx) {
  Ctx *c = ctx;
  for (Msg *m = c->queued, *next; m; m = next) {
    next = m->next;
    free(m);
  }
  for (Req *r = c->waiting, *next; r; r = next) { /* freed with the receive comm normally */
    next = r->next;
    free(r);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static floe_code new_comm(Ctx *c, void **out) {
  Comm *k = calloc(1, sizeof *k);
  if (!k) return FLOE_NO_MEMORY;
  k->ctx = c;
  *out = k;
  return FLOE_OK;
}

static floe_code stall_listen(void *ctx, void *addr, size_t *addr_len, void **listen_comm) {
  if (*addr_len < 5) return FLOE_INVALID_ARGUMENT;
  memcpy(addr, "stall", 5);
  *addr_len = 5;
  return new_comm(ctx, listen_comm);
}

static floe_code stall_connect(void *ctx, const void *addr, size_t addr_len, void **send_comm) {
  if (addr_len != 5 || memcmp(addr, "stall", 5) != 0) return FLOE_INVALID_ARGUMENT;
  Ctx *c = ctx;
  floe_code rc = new_comm(c, send_comm);
  if (rc != FLOE_OK) return rc;
  pthread_mutex_lock(&c->mu);
  c->backlog++;
  pthread_mutex_unlock(&c->mu);
  return FLOE_OK;
}

static floe_code stall_accept(void *listen_comm, void **recv_comm) {
  Ctx *c = ((Comm *)listen_comm)->ctx;
  pthread_mutex_lock(&c->mu);
  bool any = c->backlog > 0;
  if (any) c->backlog--;
  pthread_mutex_unlock(&c->mu);
  return any ? new_comm(c, recv_comm) : FLOE_UNAVAILABLE;
}

static void deliver(Req *r, const void *data, size_t len) { /* under mu */
  size_t n = len < r->len ? len : r->len;
  if (n) memcpy(r->buf, data, n);
  r->size = n;
  __atomic_store_n(&r->done, true, __ATOMIC_RELEASE);
}

static floe_code stall_isend(void *send_comm, const void *buf, size_t len, uint64_t tag,
                             void *mhandle, void **request) {
  (void)mhandle;
  Ctx *c = ((Comm *)send_comm)->ctx;
  Req *s = calloc(1, sizeof *s);
  if (!s) return FLOE_NO_MEMORY;
  s->done = true; /* a send leaves at once (an odd tag's bytes are lost on the way) */
  s->size = len;
  pthread_mutex_lock(&c->mu);
  if (!(tag & 1)) {
    Req **pp = &c->waiting;
    while (*pp && (*pp)->tag != tag) pp = &(*pp)->next;
    if (*pp) {
      Req *r = *pp;
      *pp = r->next;
      r->next = NULL;
      deliver(r, buf, len);
    } else {
      Msg *m = malloc(sizeof *m + len);
      if (!m) {
        pthread_mutex_unlock(&c->mu);
        free(s);
        return FLOE_NO_MEMORY;
      }
      m->tag = tag;
      m->len = len;
      m->next = NULL;
      if (len) memcpy(m->data, buf, len);
      Msg **tail = &c->queued;
      while (*tail) tail = &(*tail)->next;
      *tail = m;
    }
  }
  pthread_mutex_unlock(&c->mu);
  *request = s;
  return FLOE_OK;
}

static floe_code stall_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                             void **request) {
  (void)mhandle;
  Ctx *c = ((Comm *)recv_comm)->ctx;
  Req *r = calloc(1, sizeof *r);
  if (!r) return FLOE_NO_MEMORY;
  r->is_recv = true;
  r->buf = buf;
  r->len = len;
  r->tag = tag;
  pthread_mutex_lock(&c->mu);
  Msg **pp = &c->queued;
  while (!(tag & 1) && *pp && (*pp)->tag != tag) pp = &(*pp)->next;
  if (!(tag & 1) && *pp) {
    Msg *m = *pp;
    *pp = m->next;
    deliver(r, m->data, m->len);
    free(m);
  } else {
    r->next = c->waiting;
    c->waiting = r;
  }
  pthread_mutex_unlock(&c->mu);
  *request = r;
  return FLOE_OK;
}

/* A receive completes under its ctx's lock (deliver); its done flag is published with a
 * release store, so test needs no lock (and no comm) to read it. */
static floe_code stall_test(void *request, int *done, size_t *size) {
  Req *r = request;
  bool d = !r->is_recv || __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
  *done = d;
  if (d) {
    *size = r->size;
    free(r);
  }
  return FLOE_OK;
}

static floe_code stall_cancel(void *request) {
  (void)request;
  return FLOE_UNAVAILABLE; /* already matched: only closing the comm ends it */
}

static void stall_close_send(void *send_comm) { free(send_comm); }

/* Ends (frees) the receives still waiting: the manager forgot them before closing. */
static void stall_close_recv(void *recv_comm) {
  Ctx *c = ((Comm *)recv_comm)->ctx;
  pthread_mutex_lock(&c->mu);
  for (Req *r = c->waiting, *next; r; r = next) {
    next = r->next;
    free(r);
  }
  c->waiting = NULL;
  pthread_mutex_unlock(&c->mu);
  free(recv_comm);
}

static void stall_close_listen(void *listen_comm) { free(listen_comm); }

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg);
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  (void)h;
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "transport-stall", "1.0");
  if (rc != FLOE_OK) return rc;
  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "stall";
  t.init = stall_init;
  t.finalize = stall_finalize;
  t.listen = stall_listen;
  t.connect = stall_connect;
  t.accept = stall_accept;
  t.isend = stall_isend;
  t.irecv = stall_irecv;
  t.test = stall_test;
  t.close_send = stall_close_send;
  t.close_recv = stall_close_recv;
  t.close_listen = stall_close_listen;
  t.cancel = stall_cancel;
  return reg->register_transport(reg, &t);
}
