/* SPDX-License-Identifier: Apache-2.0 */
/* fabric_msg.c - the fabric transport's requests, completions and waiting.
 *
 * Posting: a request goes to libfabric at once unless the context's queue holds requests
 * already (order is kept) or, for a send, its connection still awaits the ack (fabric.c).
 * -FI_EAGAIN is routine (rxm connects on demand and its send queue is 128 deep): the request
 * is queued, and progress posts the queue in order after reading the completion queue, so
 * isend never answers "try again". Sends of at most inject_size bytes go by fi_tinject and
 * complete at once. On rxm a receive larger than inject_size waits until its peer's
 * connection is up (fabric_int.h, probe_large_recv: rxm 1.17 crashes matching a dead peer's
 * waiting message); the queue lets other peers' requests pass it.
 *
 * Completions: progress (and accept, cancel, close, wait) reads the completion queue; each
 * completion marks its request done (test() reports and frees it), answers a hello, opens a
 * connection on an ack, or frees a request nobody holds any more. A receive whose message was
 * longer than its buffer completes with FLOE_OUT_OF_RANGE and the message's size (FI_ETRUNC:
 * the posted length plus olen). Manual progress: libfabric moves data only inside these calls.
 *
 * Waiting (never by spinning on the completion queue): with FI_WAIT_FD (tcp;ofi_rxm) get_fd
 * gives the CQ's fd and trywait asks fi_trywait whether sleeping on it is safe; wait polls it
 * beside an eventfd that interrupt writes. Without (shm of libfabric 1.17), wait progresses
 * with sched_yield for FLOE_FABRIC_SPIN_US (default 50 us), then sleeps on a condition
 * variable in steps of 50 us doubling to FLOE_FABRIC_SLEEP_MAX_US (default 200 us: a shm
 * copy is done by the receiver's progress, so longer naps cost bandwidth) and, after 10 ms of
 * nothing, to 1 ms, progressing between them; interrupt signals it.
 * FLOE_FABRIC_SPIN_US=-1 uses fi_cq_sread and fi_cq_signal instead: shm's sread yields in a
 * loop until a completion arrives and ignores its timeout (util_wait_yield_run), so a thread
 * waiting in it keeps a core busy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fabric_int.h"

#define HELLO_MAGIC 0x45484c46u /* "FLHE" */
#define ACK_MAGIC 0x4b414c46u   /* "FLAK" */
#define CTRL_VERSION 1
#define HELLO_HEADER 16
#define ACK_BYTES 12
enum { ACK_ACCEPTED = 0, ACK_NO_LISTENER = 1 };

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static floe_code code_of(int fi_err) { /* fi_err > 0 */
  switch (fi_err) {
  case FI_ECANCELED: return FLOE_CANCELLED;
  case FI_ETRUNC:
  case FI_EMSGSIZE: return FLOE_OUT_OF_RANGE;
  case FI_ENOMEM: return FLOE_NO_MEMORY;
  case FI_EINVAL: return FLOE_INVALID_ARGUMENT;
  default: return FLOE_UNAVAILABLE;
  }
}

/* ---- requests -------------------------------------------------------------------------- */

Req *fab_req_new(Ctx *c, ReqKind kind, void *comm, void *buf, size_t len, uint64_t tag,
                 fi_addr_t addr) {
  Req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->ctx = c;
  r->kind = kind;
  r->state = REQ_QUEUED;
  r->comm = comm;
  r->buf = buf ? buf : r->ctrl;
  r->len = len;
  r->tag = tag;
  r->addr = addr;
  r->next = c->live;
  if (c->live) c->live->prev = r;
  c->live = r;
  return r;
}

void fab_req_free(Req *r) {
  Ctx *c = r->ctx;
  if (r->prev)
    r->prev->next = r->next;
  else
    c->live = r->next;
  if (r->next) r->next->prev = r->prev;
  free(r);
}

static void queue_push(Ctx *c, Req *r) {
  r->qnext = NULL;
  *c->queue_tail = r;
  c->queue_tail = &r->qnext;
}

void fab_queue_remove(Req *r) {
  Ctx *c = r->ctx;
  Req **pp = &c->queue, *prev = NULL;
  while (*pp && *pp != r) {
    prev = *pp;
    pp = &(*pp)->qnext;
  }
  if (!*pp) return;
  *pp = r->qnext;
  if (c->queue_tail == &r->qnext) c->queue_tail = prev ? &prev->qnext : &c->queue;
  r->qnext = NULL;
}

/* A caller's request is finished (code, size); one nobody holds any more is freed. */
static void finish(Req *r, floe_code code, size_t size) {
  r->state = REQ_DONE;
  r->code = code;
  r->size = size;
  if (r->orphan) fab_req_free(r);
}

/* post_now's answer for a large receive whose peer's connection is not up (fabric_int.h,
 * probe_large_recv): it waits in the queue, and so does whatever follows it for that peer. */
enum { POST_PEER_DOWN = 2 };
enum { PROBE_GAP_MIN_NS = 1000000, PROBE_GAP_MAX_NS = 100000000 };

/* Whether r's peer has a connection up in rxm (see probe_large_recv); retries are spaced, as
 * each one to a dead peer starts a connection attempt. */
static bool peer_up(Req *r) {
  Ctx *c = r->ctx;
  uint64_t t = now_ns();
  if (t < r->probe_at) return false;
  ssize_t ret = fi_tinject(c->ep, r->ctrl, 0, r->addr, FAB_TAG_PROBE);
  if (ret == 0) return true;
  if (ret != -FI_EAGAIN)
    fab_log(FLOE_LOG_WARNING, "transport fabric (%s): probing a peer's connection failed: %s",
            c->prov, fi_strerror((int)-ret));
  r->probe_at = t + r->probe_gap;
  r->probe_gap = r->probe_gap ? r->probe_gap * 2 : PROBE_GAP_MIN_NS;
  if (r->probe_gap > PROBE_GAP_MAX_NS) r->probe_gap = PROBE_GAP_MAX_NS;
  return false;
}

/* Hands r to libfabric: 0 posted, 1 done already (inject), -FI_EAGAIN, POST_PEER_DOWN, or
 * another error. */
static ssize_t post_now(Req *r) {
  Ctx *c = r->ctx;
  ssize_t ret;
  if (r->kind == REQ_RECV && c->probe_large_recv && r->len > c->inject_size && !peer_up(r))
    return POST_PEER_DOWN;
  switch (r->kind) {
  case REQ_SEND:
  case REQ_CTRL_SEND:
    if (r->len <= c->inject_size) {
      ret = fi_tinject(c->ep, r->buf, r->len, r->addr, r->tag);
      return ret == 0 ? 1 : ret;
    }
    ret = fi_tsend(c->ep, r->buf, r->len, NULL, r->addr, r->tag, r);
    break;
  case REQ_RECV:
    if (c->overflow) {
      struct iovec iov[2] = {{r->buf, r->len}, {c->overflow, c->overflow_len}};
      void *desc[2] = {NULL, NULL};
      ret = fi_trecvv(c->ep, iov, desc, 2, r->addr, r->tag, 0, r);
    } else {
      ret = fi_trecv(c->ep, r->buf, r->len, NULL, r->addr, r->tag, 0, r);
    }
    break;
  case REQ_HELLO_RX:
  case REQ_ACK_RX:
  case REQ_PROBE_RX:
    ret = fi_trecv(c->ep, r->ctrl, sizeof r->ctrl, NULL, FI_ADDR_UNSPEC, r->tag, 0, r);
    break;
  default:
    ret = -FI_EINVAL;
  }
  if (ret == 0) {
    r->state = REQ_POSTED;
    if (r->kind == REQ_SEND || r->kind == REQ_CTRL_SEND) c->sends_in_flight++;
  }
  return ret;
}

/* What became of r when post_now answered ret (neither 0 nor -FI_EAGAIN), r out of queues. */
static void post_failed_or_injected(Req *r, ssize_t ret) {
  Ctx *c = r->ctx;
  if (ret == 1) {
    if (r->kind == REQ_CTRL_SEND)
      fab_req_free(r);
    else
      finish(r, FLOE_OK, r->len);
    return;
  }
  const char *what = r->kind == REQ_SEND ? "fi_tsend" : r->kind == REQ_RECV ? "fi_trecv"
                     : r->kind == REQ_CTRL_SEND ? "sending a hello or ack"
                                                : "posting a control receive";
  fab_log(FLOE_LOG_ERROR, "transport fabric (%s): %s of %zu bytes under tag 0x%016" PRIx64
          " failed: %s", c->prov, what, r->len, r->tag, fi_strerror((int)-ret));
  if (r->kind == REQ_SEND || r->kind == REQ_RECV)
    finish(r, code_of((int)-ret), 0);
  else
    fab_req_free(r);
}

/* Takes the request *pp (pp: the link that points at it) out of the queue. */
static void queue_unlink(Ctx *c, Req **pp) {
  Req *r = *pp;
  *pp = r->qnext;
  if (c->queue_tail == &r->qnext) c->queue_tail = pp;
  r->qnext = NULL;
}

/* Posts the queue in order until libfabric says -FI_EAGAIN; the number of requests handed
 * over (mu held). Sends of a refused connection fail here. A request of a peer whose
 * connection is down (POST_PEER_DOWN) stays, with everything after it for that peer; the
 * other peers' requests go on (a dead peer must not stop the survivors). */
static int flush_queue(Ctx *c) {
  enum { DOWN_MAX = 8 };
  fi_addr_t down[DOWN_MAX];
  int num_down = 0, moved = 0;
  Req **pp = &c->queue, *r;
  while ((r = *pp)) {
    if (r->kind == REQ_SEND && r->comm && ((SendComm *)r->comm)->state == CONN_REFUSED) {
      queue_unlink(c, pp);
      finish(r, FLOE_FAILED_PRECONDITION, 0);
      moved++;
      continue;
    }
    bool behind = false;
    for (int i = 0; i < num_down && !behind; i++) behind = down[i] == r->addr;
    ssize_t ret = behind ? POST_PEER_DOWN : post_now(r);
    if (ret == -FI_EAGAIN) break;
    if (ret == POST_PEER_DOWN) {
      if (!behind) {
        if (num_down == DOWN_MAX) break;
        down[num_down++] = r->addr;
      }
      pp = &r->qnext;
      continue;
    }
    queue_unlink(c, pp);
    if (ret != 0) post_failed_or_injected(r, ret);
    moved++;
  }
  return moved;
}

/* Posts r, or queues it to keep order or on -FI_EAGAIN (mu held). may_progress: on
 * -FI_EAGAIN read the completion queue once and retry first. On error r is left to the
 * caller (not freed). */
static floe_code submit(Req *r, bool may_progress) {
  Ctx *c = r->ctx;
  if (r->kind == REQ_SEND && ((SendComm *)r->comm)->state == CONN_WAIT_ACK) {
    SendComm *k = r->comm;
    r->qnext = NULL;
    *k->early_tail = r;
    k->early_tail = &r->qnext;
    return FLOE_OK;
  }
  if (c->queue) {
    queue_push(c, r);
    return FLOE_OK;
  }
  ssize_t ret = post_now(r);
  if (ret == -FI_EAGAIN && may_progress) {
    fab_progress_locked(c);
    ret = c->queue ? -FI_EAGAIN : post_now(r);
  }
  if (ret == -FI_EAGAIN || ret == POST_PEER_DOWN) {
    queue_push(c, r);
    return FLOE_OK;
  }
  if (ret == 1) {
    post_failed_or_injected(r, ret);
    return FLOE_OK;
  }
  if (ret != 0) {
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): %s of %zu bytes under tag 0x%016" PRIx64
            " failed: %s", c->prov, r->kind == REQ_RECV ? "fi_trecv" : "fi_tsend", r->len,
            r->tag, fi_strerror((int)-ret));
    return code_of((int)-ret);
  }
  return FLOE_OK;
}

floe_code fab_submit(Req *r) { return submit(r, true); }

floe_code fab_post_ctrl_rx(Ctx *c) {
  static const ReqKind kinds[3] = {REQ_HELLO_RX, REQ_ACK_RX, REQ_PROBE_RX};
  static const uint64_t tags[3] = {FAB_TAG_HELLO, FAB_TAG_ACK, FAB_TAG_PROBE};
  for (int i = 0; i < 3 * FAB_CTRL_RX; i++) {
    Req *r = fab_req_new(c, kinds[i / FAB_CTRL_RX], NULL, NULL, FAB_CTRL_BYTES,
                         tags[i / FAB_CTRL_RX], FI_ADDR_UNSPEC);
    if (!r) return FLOE_NO_MEMORY;
    floe_code rc = submit(r, false);
    if (rc != FLOE_OK) {
      fab_req_free(r);
      return rc;
    }
  }
  return FLOE_OK;
}

floe_code fab_send_hello(Ctx *c, SendComm *k, uint32_t listener_id) {
  Req *r = fab_req_new(c, REQ_CTRL_SEND, k, NULL, HELLO_HEADER + c->name_len, FAB_TAG_HELLO,
                       k->addr);
  if (!r) return FLOE_NO_MEMORY;
  put32(r->ctrl, HELLO_MAGIC);
  r->ctrl[4] = CTRL_VERSION;
  r->ctrl[5] = (unsigned char)c->name_len;
  put32(r->ctrl + 8, listener_id);
  put32(r->ctrl + 12, k->id);
  memcpy(r->ctrl + HELLO_HEADER, c->name, c->name_len);
  floe_code rc = submit(r, true);
  if (rc != FLOE_OK) fab_req_free(r);
  return rc;
}

static void send_ack(Ctx *c, fi_addr_t to, uint32_t conn_id, int status) {
  Req *r = fab_req_new(c, REQ_CTRL_SEND, NULL, NULL, ACK_BYTES, FAB_TAG_ACK, to);
  if (!r) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: out of memory answering a hello");
    return;
  }
  put32(r->ctrl, ACK_MAGIC);
  r->ctrl[4] = CTRL_VERSION;
  r->ctrl[5] = (unsigned char)status;
  put32(r->ctrl + 8, conn_id);
  if (submit(r, false) != FLOE_OK) fab_req_free(r);
}

/* A peer connected: put it in the AV, queue it for accept, answer (mu held). */
static void on_hello(Ctx *c, const unsigned char *m, size_t len) {
  if (len < HELLO_HEADER || get32(m) != HELLO_MAGIC || m[4] != CTRL_VERSION ||
      HELLO_HEADER + (size_t)m[5] > len) {
    fab_log(FLOE_LOG_WARNING, "transport fabric (%s): a malformed hello (%zu bytes) was dropped",
            c->prov, len);
    return;
  }
  fi_addr_t addr;
  if (fab_peer_addr(c, m + HELLO_HEADER, m[5], &addr) != FLOE_OK) return; /* logged */
  uint32_t conn_id = get32(m + 12);
  Listener *l = fab_listener_find(c, get32(m + 8));
  if (!l) {
    send_ack(c, addr, conn_id, ACK_NO_LISTENER);
    return;
  }
  Pending *p = calloc(1, sizeof *p);
  if (!p) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: out of memory queueing a connection");
    return;
  }
  p->addr = addr;
  *l->backlog_tail = p;
  l->backlog_tail = &p->next;
  send_ack(c, addr, conn_id, ACK_ACCEPTED);
}

/* Our hello was answered: the connection's early sends go (or fail) in order (mu held). */
static void on_ack(Ctx *c, const unsigned char *m, size_t len) {
  if (len < ACK_BYTES || get32(m) != ACK_MAGIC || m[4] != CTRL_VERSION) {
    fab_log(FLOE_LOG_WARNING, "transport fabric (%s): a malformed ack (%zu bytes) was dropped",
            c->prov, len);
    return;
  }
  SendComm *k = fab_send_find(c, get32(m + 8));
  if (!k || k->state != CONN_WAIT_ACK) return; /* closed meanwhile */
  Req *early = k->early;
  k->early = NULL;
  k->early_tail = &k->early;
  if (m[5] == ACK_ACCEPTED) {
    k->state = CONN_OPEN;
    for (Req *r = early, *rn; r; r = rn) {
      rn = r->qnext;
      queue_push(c, r);
    }
    return;
  }
  k->state = CONN_REFUSED;
  fab_log(FLOE_LOG_ERROR,
          "transport fabric (%s): the peer refused a connection: its listener is closed", c->prov);
  for (Req *r = early, *rn; r; r = rn) {
    rn = r->qnext;
    finish(r, FLOE_FAILED_PRECONDITION, 0);
  }
}

static void repost(Req *r) {
  r->state = REQ_QUEUED;
  if (submit(r, false) != FLOE_OK) fab_req_free(r); /* logged; one receive fewer */
}

/* A receive whose message (size bytes; 0: unknown) was longer than its buffer. */
static void truncated(Ctx *c, Req *r, size_t size) {
  fab_log(FLOE_LOG_ERROR,
          "transport fabric (%s): a message of %zu bytes under tag 0x%016" PRIx64
          " is larger than the %zu bytes posted to receive it; dropped",
          c->prov, size, r->tag, r->len);
  finish(r, FLOE_OUT_OF_RANGE, size);
}

static void dispatch(Ctx *c, const struct fi_cq_tagged_entry *e) {
  Req *r = e->op_context;
  if (!r) return;
  if (r->kind == REQ_SEND || r->kind == REQ_CTRL_SEND) c->sends_in_flight--;
  switch (r->kind) {
  case REQ_SEND:
    finish(r, FLOE_OK, r->len);
    break;
  case REQ_RECV:
    if (e->len > r->len) { /* it spilled into the overflow iov (shm) */
      truncated(c, r, e->len);
      size_t spill = e->len - r->len, page = 4096;
      madvise(c->overflow, (spill + page - 1) / page * page, MADV_DONTNEED);
      break;
    }
    finish(r, FLOE_OK, e->len);
    break;
  case REQ_CTRL_SEND:
    fab_req_free(r);
    break;
  case REQ_HELLO_RX:
    on_hello(c, r->ctrl, e->len);
    repost(r);
    break;
  case REQ_ACK_RX:
    on_ack(c, r->ctrl, e->len);
    repost(r);
    break;
  case REQ_PROBE_RX: /* a peer checked its connection before a large receive: nothing to do */
    repost(r);
    break;
  }
}

static void dispatch_error(Ctx *c, const struct fi_cq_err_entry *e) {
  Req *r = e->op_context;
  char pbuf[256];
  const char *perr = fi_cq_strerror(c->cq, e->prov_errno, e->err_data, pbuf, sizeof pbuf);
  if (!r) {
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): a completion error without a request: %s (%s)",
            c->prov, fi_strerror(e->err), perr ? perr : "");
    return;
  }
  if (r->kind == REQ_SEND || r->kind == REQ_CTRL_SEND) c->sends_in_flight--;
  switch (r->kind) {
  case REQ_SEND:
  case REQ_RECV:
    if (e->err == FI_ECANCELED) {
      finish(r, FLOE_CANCELLED, 0);
    } else if (e->err == FI_ETRUNC && r->kind == REQ_RECV) {
      /* olen: the bytes that did not fit (fi_cq(3)); rxm also puts the whole size in len */
      truncated(c, r, e->olen ? r->len + e->olen : e->len > r->len ? e->len : 0);
    } else {
      fab_log(FLOE_LOG_ERROR,
              "transport fabric (%s): %s of %zu bytes under tag 0x%016" PRIx64 " failed: %s (%s)",
              c->prov, r->kind == REQ_SEND ? "a send" : "a receive", r->len, r->tag,
              fi_strerror(e->err), perr ? perr : "");
      finish(r, code_of(e->err), 0);
    }
    break;
  case REQ_CTRL_SEND:
    if (r->tag == FAB_TAG_HELLO && r->comm) {
      SendComm *k = r->comm;
      fab_log(FLOE_LOG_ERROR, "transport fabric (%s): the hello of a connection failed: %s (%s)",
              c->prov, fi_strerror(e->err), perr ? perr : "");
      k->state = CONN_REFUSED;
      for (Req *q = k->early, *qn; q; q = qn) {
        qn = q->qnext;
        finish(q, FLOE_UNAVAILABLE, 0);
      }
      k->early = NULL;
      k->early_tail = &k->early;
    }
    fab_req_free(r);
    break;
  case REQ_HELLO_RX:
  case REQ_ACK_RX:
  case REQ_PROBE_RX:
    if (e->err == FI_ECANCELED) {
      fab_req_free(r);
      break;
    }
    fab_log(FLOE_LOG_WARNING, "transport fabric (%s): a control message was dropped: %s",
            c->prov, fi_strerror(e->err));
    repost(r);
    break;
  }
}

/* Reads the completion queue empty; the number of completions read (mu held). */
static int drain(Ctx *c) {
  struct fi_cq_tagged_entry e[16];
  int n = 0;
  for (;;) {
    ssize_t got = fi_cq_read(c->cq, e, 16);
    if (got > 0) {
      for (ssize_t i = 0; i < got; i++) dispatch(c, &e[i]);
      n += (int)got;
      continue;
    }
    if (got == -FI_EAGAIN) break;
    if (got == -FI_EAVAIL) {
      struct fi_cq_err_entry err;
      memset(&err, 0, sizeof err);
      if (fi_cq_readerr(c->cq, &err, 0) == 1) {
        dispatch_error(c, &err);
        n++;
        continue;
      }
      break;
    }
    if (!c->failed)
      fab_log(FLOE_LOG_ERROR, "transport fabric (%s): reading the completion queue failed: %s",
              c->prov, fi_strerror((int)-got));
    c->failed = true;
    break;
  }
  return n;
}

int fab_progress_locked(Ctx *c) {
  int n = drain(c);
  if (c->queue) {
    int moved = flush_queue(c);
    if (moved) n += moved + drain(c);
  }
  return n;
}

/* ---- the caller's requests ------------------------------------------------------------- */

floe_code fab_isend(void *send_comm, const void *buf, size_t len, uint64_t tag, void *mhandle,
                    void **request) {
  (void)mhandle;
  SendComm *k = send_comm;
  if (!k || k->kind != COMM_SEND || (len && !buf) || !request) return FLOE_INVALID_ARGUMENT;
  Ctx *c = k->ctx;
  if (tag & FLOE_TRANSPORT_TAG_RESERVED) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: isend: tag 0x%016" PRIx64 " has the reserved top "
            "bit set (FLOE_TRANSPORT_TAG_RESERVED)", tag);
    return FLOE_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&c->mu);
  floe_code rc = FLOE_OK;
  if (c->failed) {
    rc = FLOE_UNAVAILABLE;
  } else if (k->state == CONN_REFUSED) {
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): isend: the peer refused this connection",
            c->prov);
    rc = FLOE_FAILED_PRECONDITION;
  } else if (len > c->max_msg) {
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): isend: %zu bytes are more than the "
            "provider's largest message (%zu)", c->prov, len, c->max_msg);
    rc = FLOE_OUT_OF_RANGE;
  }
  Req *r = NULL;
  if (rc == FLOE_OK) {
    r = fab_req_new(c, REQ_SEND, k, (void *)buf, len, tag, k->addr);
    if (!r) rc = FLOE_NO_MEMORY;
  }
  if (rc == FLOE_OK && (rc = submit(r, true)) != FLOE_OK) fab_req_free(r);
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK) *request = r;
  return rc;
}

floe_code fab_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                    void **request) {
  (void)mhandle;
  RecvComm *k = recv_comm;
  if (!k || k->kind != COMM_RECV || (len && !buf) || !request) return FLOE_INVALID_ARGUMENT;
  Ctx *c = k->ctx;
  if (tag & FLOE_TRANSPORT_TAG_RESERVED) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: irecv: tag 0x%016" PRIx64 " has the reserved top "
            "bit set (FLOE_TRANSPORT_TAG_RESERVED)", tag);
    return FLOE_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&c->mu);
  floe_code rc = c->failed ? FLOE_UNAVAILABLE : FLOE_OK;
  Req *r = NULL;
  if (rc == FLOE_OK) {
    /* A zero-length receive still gets a valid address: some providers dislike NULL. */
    r = fab_req_new(c, REQ_RECV, k, buf, len, tag, k->addr);
    if (!r) rc = FLOE_NO_MEMORY;
  }
  if (rc == FLOE_OK && (rc = submit(r, true)) != FLOE_OK) fab_req_free(r);
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK) *request = r;
  return rc;
}

/* Reads no completions (progress does); frees the request once it reports it done. */
floe_code fab_test(void *request, int *done, size_t *size) {
  Req *r = request;
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
  fab_req_free(r);
  pthread_mutex_unlock(&c->mu);
  return code;
}

/* Withdraws a posted receive: FLOE_OK once libfabric confirmed (FI_ECANCELED) and the request
 * is freed; FLOE_UNAVAILABLE when it completed or the confirmation is still to come (test()
 * then reports FLOE_CANCELLED or the message). */
floe_code fab_cancel(void *request) {
  Req *r = request;
  Ctx *c = r->ctx;
  pthread_mutex_lock(&c->mu);
  floe_code rc = FLOE_UNAVAILABLE;
  if (r->kind != REQ_RECV || r->state == REQ_DONE) {
    /* completed: test() finishes it */
  } else if (r->state == REQ_QUEUED) {
    fab_queue_remove(r);
    fab_req_free(r);
    rc = FLOE_OK;
  } else {
    if (!r->cancelling) {
      r->cancelling = true;
      ssize_t ret = fi_cancel(&c->ep->fid, r);
      (void)ret; /* -FI_ENOENT: already matched; its completion comes */
    }
    fab_progress_locked(c);
    if (r->state == REQ_DONE && r->code == FLOE_CANCELLED) {
      fab_req_free(r);
      rc = FLOE_OK;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

floe_code fab_progress(void *ctx) {
  Ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  fab_progress_locked(c);
  floe_code rc = c->failed ? FLOE_UNAVAILABLE : FLOE_OK;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ---- waiting --------------------------------------------------------------------------- */

floe_code fab_get_fd(void *ctx, int *fd) {
  Ctx *c = ctx;
  if (c->cq_fd < 0) return FLOE_UNAVAILABLE; /* shm: use wait and interrupt */
  *fd = c->cq_fd;
  return FLOE_OK;
}

/* Requests wait in the queue after -FI_EAGAIN, and no send of ours is in flight whose
 * completion would wake a sleeper: only progress retries them (rxm may finish connecting
 * inside a read of the CQ, with no completion and no fd becoming readable). mu held. */
static bool queue_stalled(Ctx *c) { return c->queue && c->sends_in_flight == 0; }

floe_code fab_trywait(void *ctx) {
  Ctx *c = ctx;
  if (c->cq_fd < 0) return FLOE_FAILED_PRECONDITION;
  struct fid *fids[1] = {&c->cq->fid};
  pthread_mutex_lock(&c->mu);
  if (queue_stalled(c)) {
    pthread_mutex_unlock(&c->mu);
    return FLOE_UNAVAILABLE;
  }
  int ret = fi_trywait(c->fabric, fids, 1);
  pthread_mutex_unlock(&c->mu);
  if (ret == 0) return FLOE_OK;
  if (ret == -FI_EAGAIN) return FLOE_UNAVAILABLE;
  fab_log(FLOE_LOG_ERROR, "transport fabric (%s): fi_trywait failed: %s", c->prov,
          fi_strerror(-ret));
  return FLOE_INTERNAL;
}

static floe_code wait_fd(Ctx *c, int timeout_ms) {
  pthread_mutex_lock(&c->mu);
  bool stalled = queue_stalled(c);
  pthread_mutex_unlock(&c->mu);
  floe_code rc = FLOE_OK;
  if (stalled) /* retry soon, but do not spin: at most 1 ms asleep */
    timeout_ms = timeout_ms < 0 || timeout_ms > 1 ? 1 : timeout_ms;
  else if ((rc = fab_trywait(c)) == FLOE_UNAVAILABLE)
    return FLOE_OK; /* progress is possible now */
  if (rc != FLOE_OK) return rc;
  struct pollfd p[2] = {{.fd = c->cq_fd, .events = POLLIN}, {.fd = c->intr_fd, .events = POLLIN}};
  int n = poll(p, 2, timeout_ms);
  if (n > 0 && (p[1].revents & POLLIN)) {
    uint64_t v;
    ssize_t got = read(c->intr_fd, &v, sizeof v);
    (void)got;
  }
  return n == 0 ? FLOE_DEADLINE_EXCEEDED : FLOE_OK;
}

/* Progress with sched_yield for spin_ns, then sleeps in growing steps (see the top). */
static floe_code wait_polling(Ctx *c, int timeout_ms, long spin_ns) {
  uint64_t start = now_ns();
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;
  if (atomic_exchange(&c->interrupted, false)) return FLOE_OK;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int n = fab_progress_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (n > 0 || atomic_exchange(&c->interrupted, false)) return FLOE_OK;
    uint64_t t = now_ns();
    if (t >= deadline) return FLOE_DEADLINE_EXCEEDED;
    if (t - start >= (uint64_t)spin_ns) break;
    sched_yield();
  }
  uint64_t step = 50000;
  for (;;) {
    uint64_t t = now_ns();
    if (t >= deadline) return FLOE_DEADLINE_EXCEEDED;
    uint64_t until = deadline - t < step ? deadline : t + step;
    struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    pthread_mutex_lock(&c->wmu);
    while (!atomic_load(&c->interrupted))
      if (pthread_cond_timedwait(&c->wcv, &c->wmu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&c->wmu);
    if (atomic_exchange(&c->interrupted, false)) return FLOE_OK;
    pthread_mutex_lock(&c->mu);
    int n = fab_progress_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (n > 0) return FLOE_OK;
    /* naps stay short while traffic may be near; after 10 ms of nothing they reach 1 ms */
    uint64_t cap = now_ns() - start < 10000000u ? (uint64_t)c->sleep_max_ns : 1000000u;
    if (cap < (uint64_t)c->sleep_max_ns) cap = (uint64_t)c->sleep_max_ns;
    if (step < cap) step *= 2;
  }
}

/* fi_cq_sread, ended by completions or fi_cq_signal (shm ignores the timeout: see the top). */
static floe_code wait_sread(Ctx *c, int timeout_ms) {
  if (atomic_exchange(&c->interrupted, false)) return FLOE_OK;
  uint64_t start = now_ns();
  struct fi_cq_tagged_entry e[16];
  ssize_t got = fi_cq_sread(c->cq, e, 16, NULL, timeout_ms);
  pthread_mutex_lock(&c->mu);
  for (ssize_t i = 0; i < got; i++) dispatch(c, &e[i]);
  int more = fab_progress_locked(c); /* errors (-FI_EAVAIL) and the queue */
  pthread_mutex_unlock(&c->mu);
  if (got > 0 || more > 0) return FLOE_OK;
  if (got == -FI_EAGAIN || got == -FI_EAVAIL)
    return timeout_ms >= 0 && now_ns() - start >= (uint64_t)timeout_ms * 1000000u
               ? FLOE_DEADLINE_EXCEEDED
               : FLOE_OK;
  fab_log(FLOE_LOG_ERROR, "transport fabric (%s): fi_cq_sread failed: %s", c->prov,
          fi_strerror((int)-got));
  return FLOE_UNAVAILABLE;
}

floe_code fab_wait(void *ctx, int timeout_ms) {
  Ctx *c = ctx;
  if (c->cq_fd >= 0) return wait_fd(c, timeout_ms);
  if (c->spin_ns < 0 && c->cq_can_signal) return wait_sread(c, timeout_ms);
  return wait_polling(c, timeout_ms, c->spin_ns < 0 ? 0 : c->spin_ns);
}

void fab_interrupt(void *ctx) {
  Ctx *c = ctx;
  if (c->intr_fd >= 0) {
    uint64_t one = 1;
    ssize_t w = write(c->intr_fd, &one, sizeof one);
    (void)w; /* a saturated counter is still readable */
    return;
  }
  atomic_store(&c->interrupted, true);
  pthread_mutex_lock(&c->wmu);
  pthread_cond_broadcast(&c->wcv);
  pthread_mutex_unlock(&c->wmu);
  if (c->cq_can_signal && c->spin_ns < 0) fi_cq_signal(c->cq);
}

int fab_linger(Ctx *c, void *comm) {
  uint64_t deadline = now_ns() + (uint64_t)c->linger_ms * 1000000u;
  for (;;) {
    int left = 0;
    for (Req *r = c->live; r; r = r->next)
      if (r->comm == comm && r->state == REQ_POSTED) left++;
    uint64_t t = now_ns();
    if (!left || t >= deadline || c->failed) return left;
    /* Sleep without touching the interrupt of whoever else waits on this context. */
    int ms = (int)((deadline - t + 999999) / 1000000u);
    pthread_mutex_unlock(&c->mu);
    if (c->cq_fd >= 0 && fab_trywait(c) == FLOE_OK) {
      struct pollfd p = {.fd = c->cq_fd, .events = POLLIN};
      poll(&p, 1, ms < 50 ? ms : 50);
    } else { /* no fd, or progress is due: a short nap, never a spin */
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&c->mu);
    fab_progress_locked(c);
  }
}
