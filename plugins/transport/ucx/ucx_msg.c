/* SPDX-License-Identifier: Apache-2.0 */
/* ucx_msg.c - the ucx transport's requests, completions and waiting.
 *
 * Messages are UCP tagged messages: isend is ucp_tag_send_nbx on the connection's endpoint,
 * irecv is ucp_tag_recv_nbx on the worker with every tag bit significant. UCP matches
 * receives per worker, not per endpoint: a receive matches a message of its tag from any peer
 * connected to this context (fabric's receives match only their connection's peer). The
 * core's tags carry the sending task's key, so two peers never send one tag; callers that
 * need per-peer matching must put the peer in the tag. UCX keeps the order of two messages
 * of one tag from one endpoint, buffers unexpected eager messages at the receiver and keeps
 * large ones at the sender (rendezvous) until their receive is posted.
 *
 * Completions come through callbacks that UCX calls inside ucp_worker_progress (and
 * ucp_request_cancel, ucp_ep_close_nbx), always with ctx->mu held: each marks its request
 * done for test() and frees UCX's request. Operations that complete at once (small sends,
 * receives of a message already here) never call back. A receive shorter than its message
 * completes with FLOE_OUT_OF_RANGE and a logged error naming both sizes.
 *
 * A connection's failure (the peer died or closed; UCP_ERR_HANDLING_MODE_PEER reports it
 * through the endpoint's error handler) fails its sends and withdraws the unmatched receives
 * of its recv comm with FLOE_UNAVAILABLE; a receive posted on a failed comm still takes a
 * message that arrived before the failure, else ends the same way.
 *
 * Waiting: get_fd is ucp_worker_get_efd's descriptor and trywait is ucp_worker_arm (UCS_OK:
 * sleep; UCS_ERR_BUSY: progress first); wait polls it beside an eventfd that interrupt
 * writes. Never a busy loop: UCX's tcp and shared-memory transports both signal the
 * descriptor.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ucx_int.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- requests --------------------------------------------------------------------------- */

static Req *req_new(Ctx *c, ReqKind kind, void *comm, size_t len, uint64_t tag) {
  Req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->ctx = c;
  r->kind = kind;
  r->state = REQ_POSTED;
  r->comm = comm;
  r->len = len;
  r->tag = tag;
  r->next = c->live;
  if (c->live) c->live->prev = r;
  c->live = r;
  return r;
}

void ucxt_req_free(Req *r) {
  Ctx *c = r->ctx;
  if (r->prev)
    r->prev->next = r->next;
  else
    c->live = r->next;
  if (r->next) r->next->prev = r->prev;
  free(r);
}

/* r is finished (code, size); one nobody holds any more is freed. */
static void finish(Req *r, floe_code code, size_t size) {
  r->state = REQ_DONE;
  r->code = code;
  r->size = size;
  if (r->orphan) ucxt_req_free(r);
}

/* A receive whose message (size bytes; 0: unknown) was longer than its buffer. */
static void truncated(Req *r, size_t size) {
  Ctx *c = r->ctx;
  if (size <= r->len) size = 0;
  if (size)
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx (%s): a message of %zu bytes under tag 0x%016" PRIx64
             " is larger than the %zu bytes posted to receive it; dropped",
             c->tls, size, r->tag, r->len);
  else
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx (%s): a message under tag 0x%016" PRIx64
             " is larger than the %zu bytes posted to receive it; dropped",
             c->tls, r->tag, r->len);
  finish(r, FLOE_OUT_OF_RANGE, size);
}

static void send_done(void *request, ucs_status_t status, void *user_data) {
  Req *r = user_data;
  r->ucx = NULL;
  ucp_request_free(request);
  if (status != UCS_OK && status != UCS_ERR_CANCELED && !r->orphan)
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx (%s): a send of %zu bytes under tag 0x%016" PRIx64 " failed: %s",
             r->ctx->tls, r->len, r->tag, ucs_status_string(status));
  finish(r, status == UCS_ERR_CANCELED ? FLOE_UNAVAILABLE : ucxt_code(status),
         status == UCS_OK ? r->len : 0);
}

static void recv_status(Req *r, ucs_status_t status, size_t length) {
  switch (status) {
  case UCS_OK:
    finish(r, FLOE_OK, length);
    break;
  case UCS_ERR_MESSAGE_TRUNCATED:
    truncated(r, length);
    break;
  case UCS_ERR_CANCELED:
    /* cancelled by UCX itself (not by cancel or close): the sender's endpoint failed */
    if (!r->withdrawn && !r->orphan)
      ucxt_log(FLOE_LOG_ERROR,
               "transport ucx (%s): a receive of %zu bytes under tag 0x%016" PRIx64
               " was dropped by UCX: the sending peer is unavailable", r->ctx->tls, r->len,
               r->tag);
    finish(r, r->peer_failed || !r->withdrawn ? FLOE_UNAVAILABLE : FLOE_CANCELLED, 0);
    break;
  default:
    if (!r->orphan)
      ucxt_log(FLOE_LOG_ERROR,
               "transport ucx (%s): a receive of %zu bytes under tag 0x%016" PRIx64
               " failed: %s",
               r->ctx->tls, r->len, r->tag, ucs_status_string(status));
    finish(r, ucxt_code(status), 0);
  }
}

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data) {
  Req *r = user_data;
  r->ucx = NULL;
  ucp_request_free(request);
  recv_status(r, status, info ? info->length : 0);
}

void ucxt_withdraw(Ctx *c, void *comm, bool peer_failed) {
  for (Req *r = c->live, *rn; r; r = rn) {
    rn = r->next; /* a cancelled orphan frees itself in its callback */
    if (r->kind != REQ_RECV || r->state != REQ_POSTED || !r->ucx || !r->comm) continue;
    if (comm ? r->comm != comm : ((RecvComm *)r->comm)->failed == UCS_OK) continue;
    if (peer_failed) r->peer_failed = true;
    r->withdrawn = true;
    ucp_request_cancel(c->worker, r->ucx); /* a matched receive finishes on its own */
  }
}

int ucxt_progress_locked(Ctx *c) {
  int n = 0;
  for (int i = 0; i < 4096; i++) { /* bounded: a flood must not hold mu for ever */
    unsigned k = ucp_worker_progress(c->worker);
    if (!k) break;
    n += (int)k;
  }
  if (c->reap_due) { /* a connection failed meanwhile: its receives can never match */
    c->reap_due = false;
    ucxt_withdraw(c, NULL, true);
    n++;
  }
  if (c->closing) ucxt_closing_run(c, false);
  return n;
}

/* ---- the caller's requests -------------------------------------------------------------- */

floe_code ucxt_isend(void *send_comm, const void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request) {
  (void)mhandle;
  SendComm *k = send_comm;
  if (!k || k->kind != COMM_SEND || (len && !buf) || !request) return FLOE_INVALID_ARGUMENT;
  Ctx *c = k->ctx;
  if (tag & FLOE_TRANSPORT_TAG_RESERVED) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: isend: tag 0x%016" PRIx64 " has the reserved top "
             "bit set (FLOE_TRANSPORT_TAG_RESERVED)", tag);
    return FLOE_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&c->mu);
  if (k->failed != UCS_OK) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): isend: the connection failed: %s", c->tls,
             ucs_status_string(k->failed));
    pthread_mutex_unlock(&c->mu);
    return FLOE_UNAVAILABLE;
  }
  Req *r = req_new(c, REQ_SEND, k, len, tag);
  if (!r) {
    pthread_mutex_unlock(&c->mu);
    return FLOE_NO_MEMORY;
  }
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_done;
  p.user_data = r;
  static const char empty[1];
  ucs_status_ptr_t sp = ucp_tag_send_nbx(k->ep, len ? buf : empty, len, tag, &p);
  floe_code rc = FLOE_OK;
  if (sp == NULL) {
    finish(r, FLOE_OK, len);
  } else if (UCS_PTR_IS_ERR(sp)) {
    ucs_status_t st = UCS_PTR_STATUS(sp);
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx (%s): isend of %zu bytes under tag 0x%016" PRIx64 " failed: %s",
             c->tls, len, tag, ucs_status_string(st));
    ucxt_req_free(r);
    rc = ucxt_code(st);
  } else {
    r->ucx = sp;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK) *request = r;
  return rc;
}

floe_code ucxt_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request) {
  (void)mhandle;
  RecvComm *k = recv_comm;
  if (!k || k->kind != COMM_RECV || (len && !buf) || !request) return FLOE_INVALID_ARGUMENT;
  Ctx *c = k->ctx;
  if (tag & FLOE_TRANSPORT_TAG_RESERVED) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: irecv: tag 0x%016" PRIx64 " has the reserved top "
             "bit set (FLOE_TRANSPORT_TAG_RESERVED)", tag);
    return FLOE_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&c->mu);
  if (c->failed) {
    pthread_mutex_unlock(&c->mu);
    return FLOE_UNAVAILABLE;
  }
  Req *r = req_new(c, REQ_RECV, k, len, tag);
  if (!r) {
    pthread_mutex_unlock(&c->mu);
    return FLOE_NO_MEMORY;
  }
  /* No immediate completion: UCX 1.13 fills no recv_info on that path, so the size of a
   * message already here would be lost; the callback then runs inside ucp_tag_recv_nbx. */
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = recv_done;
  p.user_data = r;
  static char empty[1];
  ucs_status_ptr_t sp =
      ucp_tag_recv_nbx(c->worker, len ? buf : empty, len, tag, UINT64_MAX, &p);
  floe_code rc = FLOE_OK;
  if (UCS_PTR_IS_ERR(sp)) {
    ucs_status_t st = UCS_PTR_STATUS(sp);
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx (%s): irecv of %zu bytes under tag 0x%016" PRIx64 " failed: %s",
             c->tls, len, tag, ucs_status_string(st));
    ucxt_req_free(r);
    rc = ucxt_code(st);
  } else if (r->state == REQ_POSTED && sp) { /* else done: the callback freed sp already */
    r->ucx = sp;
    if (k->failed != UCS_OK) { /* nothing more can come from that peer */
      r->peer_failed = true;
      ucp_request_cancel(c->worker, sp);
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK) *request = r;
  return rc;
}

/* Reads no completions (progress does); frees the request once it reports it done. */
floe_code ucxt_test(void *request, int *done, size_t *size) {
  Req *r = request;
  if (!r || !done) return FLOE_INVALID_ARGUMENT;
  Ctx *c = r->ctx;
  pthread_mutex_lock(&c->mu);
  if (r->state != REQ_DONE) {
    pthread_mutex_unlock(&c->mu);
    *done = 0;
    return FLOE_OK;
  }
  floe_code code = r->code;
  *done = 1;
  if (size) *size = r->size;
  ucxt_req_free(r);
  pthread_mutex_unlock(&c->mu);
  return code;
}

/* Withdraws a posted receive that has not matched: UCX completes it as cancelled inside
 * ucp_request_cancel, and it is freed (FLOE_OK). FLOE_UNAVAILABLE when it completed or is
 * matched already (test() then reports the message or the error). */
floe_code ucxt_cancel(void *request) {
  Req *r = request;
  if (!r) return FLOE_INVALID_ARGUMENT;
  Ctx *c = r->ctx;
  pthread_mutex_lock(&c->mu);
  floe_code rc = FLOE_UNAVAILABLE;
  if (r->kind == REQ_RECV && r->state == REQ_POSTED && r->ucx) {
    r->withdrawn = true;
    ucp_request_cancel(c->worker, r->ucx);
    if (r->state == REQ_DONE && r->code == FLOE_CANCELLED) {
      ucxt_req_free(r);
      rc = FLOE_OK;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

floe_code ucxt_progress(void *ctx) {
  Ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  ucxt_progress_locked(c);
  floe_code rc = c->failed ? FLOE_UNAVAILABLE : FLOE_OK;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- waiting ---------------------------------------------------------------------------- */

floe_code ucxt_get_fd(void *ctx, int *fd) {
  Ctx *c = ctx;
  if (!c || !fd) return FLOE_INVALID_ARGUMENT;
  *fd = c->efd;
  return FLOE_OK;
}

/* mu held. */
static floe_code trywait_locked(Ctx *c) {
  if (c->reap_due) return FLOE_UNAVAILABLE;
  ucs_status_t st = ucp_worker_arm(c->worker);
  if (st == UCS_OK) return FLOE_OK;
  if (st == UCS_ERR_BUSY) return FLOE_UNAVAILABLE;
  ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): ucp_worker_arm failed: %s", c->tls,
           ucs_status_string(st));
  return FLOE_INTERNAL;
}

floe_code ucxt_trywait(void *ctx) {
  Ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  floe_code rc = trywait_locked(c);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

floe_code ucxt_wait(void *ctx, int timeout_ms) {
  Ctx *c = ctx;
  floe_code rc = ucxt_trywait(c);
  if (rc == FLOE_UNAVAILABLE) return FLOE_OK; /* progress is possible now */
  if (rc != FLOE_OK) return rc;
  struct pollfd p[2] = {{.fd = c->efd, .events = POLLIN}, {.fd = c->intr_fd, .events = POLLIN}};
  int n = poll(p, 2, timeout_ms);
  if (n > 0 && (p[1].revents & POLLIN)) {
    uint64_t v;
    ssize_t got = read(c->intr_fd, &v, sizeof v);
    (void)got;
  }
  return n == 0 ? FLOE_DEADLINE_EXCEEDED : FLOE_OK;
}

void ucxt_interrupt(void *ctx) {
  Ctx *c = ctx;
  uint64_t one = 1;
  ssize_t w = write(c->intr_fd, &one, sizeof one);
  (void)w; /* a saturated counter is still readable */
}

/* ---- closing ---------------------------------------------------------------------------- */

static int posted_of(Ctx *c, void *comm) {
  int left = 0;
  for (Req *r = c->live; r; r = r->next)
    if (r->comm == comm && r->state != REQ_DONE) left++;
  return left;
}

static bool comm_failed(void *comm) {
  return ((CommKind *)comm)[0] == COMM_SEND ? ((SendComm *)comm)->failed != UCS_OK
                                            : ((RecvComm *)comm)->failed != UCS_OK;
}

/* Waits for the comm's posted requests, which hold the caller's buffers, never
 * for a flush, and not at all once the connection failed (UCX ends them). */
int ucxt_linger(Ctx *c, void *comm) {
  uint64_t deadline = now_ns() + (uint64_t)c->linger_ms * 1000000u;
  int left;
  for (;;) {
    left = posted_of(c, comm);
    uint64_t t = now_ns();
    if (!left || t >= deadline || c->failed || comm_failed(comm)) break;
    /* Sleep without touching the interrupt of whoever else waits on this context. */
    int ms = (int)((deadline - t + 999999) / 1000000u);
    if (trywait_locked(c) == FLOE_OK) {
      pthread_mutex_unlock(&c->mu);
      struct pollfd pf = {.fd = c->efd, .events = POLLIN};
      poll(&pf, 1, ms < 50 ? ms : 50);
      pthread_mutex_lock(&c->mu);
    }
    ucxt_progress_locked(c);
  }
  return left;
}

void ucxt_ep_close(Ctx *c, ucp_ep_h ep) {
  if (!ep) return;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t cp = ucp_ep_close_nbx(ep, &p);
  if (!UCS_PTR_IS_PTR(cp)) return;
  uint64_t deadline = now_ns() + 1000000000u;
  while (ucp_request_check_status(cp) == UCS_INPROGRESS && now_ns() < deadline) {
    if (!ucp_worker_progress(c->worker)) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  ucp_request_free(cp);
}

static void flush_done(void *request, ucs_status_t status, void *user_data) {
  (void)status;
  Closing *cl = user_data;
  ucp_request_free(request);
  cl->flush = NULL;
  cl->flush_done = true;
}

/* A closed send comm's endpoint: flushed in the background, else closed now. What completed
 * locally then reaches a live peer; a hung or dead one costs close nothing. */
void ucxt_close_later(Ctx *c, ucp_ep_h ep) {
  Closing *cl = calloc(1, sizeof *cl);
  ucs_status_ptr_t fp = NULL;
  if (cl) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = flush_done;
    p.user_data = cl;
    fp = ucp_ep_flush_nbx(ep, &p);
  }
  if (!UCS_PTR_IS_PTR(fp)) { /* flushed already, failed (a dead peer), or no memory */
    free(cl);
    ucxt_ep_close(c, ep);
    return;
  }
  cl->ep = ep;
  cl->flush = fp;
  cl->deadline_ns = now_ns() + (uint64_t)c->linger_ms * 1000000u;
  cl->next = c->closing;
  c->closing = cl;
}

void ucxt_closing_run(Ctx *c, bool all) {
  uint64_t t = now_ns();
  for (Closing **pp = &c->closing, *cl; (cl = *pp);) {
    if (cl->ep && (all || cl->flush_done || cl->failed || t >= cl->deadline_ns)) {
      ucp_ep_h ep = cl->ep;
      cl->ep = NULL;
      ucxt_ep_close(c, ep); /* cancels a flush still running: its callback comes inside */
    }
    if (!cl->ep && !cl->flush) {
      *pp = cl->next;
      free(cl);
    } else {
      pp = &cl->next;
    }
  }
}
