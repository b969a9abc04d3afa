/* SPDX-License-Identifier: Apache-2.0 */
/* collective_ring.c - the built-in collective backend: a ring over the transport manager.
 *
 * Rank r sends to r+1 and receives from r-1 (mod n), on the send and receive channels of
 * the route (the loopback pair when both ranks are in this process). An all-reduce of count
 * elements cuts them into n segments; n-1 reduce-scatter steps (rank r sends segment
 * r-k-1 and reduces what arrives into segment r-k-2) leave segment r whole on rank r, and
 * n-1 all-gather steps pass the whole segments on: each rank sends 2(n-1)/n of the data,
 * the bandwidth-optimal amount. Each segment is cut again into chunks of at most
 * FLOE_COLLECTIVE_CHUNK_BYTES (default 1 MiB) that go around independently: chunk c moves to
 * its next step as soon as its own transfers of this step are done, so sending one chunk
 * overlaps receiving and reducing the others (the pipeline). Reduce-scatter and all-gather
 * are the two halves alone; broadcast passes chunks down the chain root, root+1, ... with an
 * 8-byte header naming the root, so receivers need not know it.
 *
 * A small all-reduce on a power-of-two number of ranks goes by recursive doubling instead
 * (K_RD): in round k rank r swaps its whole tensor with rank r ^ 2^k and combines the two,
 * lower rank's values first (every rank then computes the same bits), so log2(n) rounds of
 * one message each way instead of the ring's 2(n-1): latency, not bandwidth, bounds small
 * operations (with 2 ranks both send the same bytes). Up to FLOE_COLLECTIVE_RD_BYTES
 * (default 256 KiB; 0: never): past it the ring's pipeline pays (2 ranks, 1 MiB over fabric
 * on a 2-vCPU machine: 1.06 ms by recursive doubling, 0.67-0.89 ms by the ring).
 *
 * Every transfer's tag hashes (group, operation tag, step, chunk, sender), so operations may
 * run concurrently and in any order; the receiver checks each transfer's size, which
 * catches ranks that disagree on the count or dtype. Completions run on the transport's
 * progress thread, which also reduces (a chunk at a time). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define BCAST_MAGIC 0x31434246u /* "FBC1" */
#define SPARE_BUFFERS 4
#define BCAST_HEADER 8

typedef struct RingComm {
  FloeCollMgr *m;
  FloeTransportMgr *tm;
  int rank, size;
  int send_chan, recv_chan; /* 0: the loopback pair (the neighbour is in this process) */
  char *next_dev, *prev_dev;
  /* Recursive doubling (power-of-two sizes): round k's partner rank ^ 2^k, its channels and
   * device (rd_rounds 0: not used). */
  int rd_rounds;
  int rd_send[12], rd_recv[12];
  char *rd_dev[12];
  size_t rd_bytes;          /* the largest all-reduce (bytes) that goes by it */
  char *name;
  uint64_t salt;
  size_t chunk_bytes;
  pthread_mutex_t mu;
  struct RingOp *ops;       /* live operations (abort reaches them) */
  bool aborted;
  /* Scratch buffers of finished operations, kept for the next ones (under mu): a fresh
   * large block costs a page fault per 4 KiB on first touch, more than the copy itself. */
  struct {
    char *p;
    size_t len;
  } spare[SPARE_BUFFERS];
} RingComm;

struct RingOp;
typedef struct XArg {
  struct RingOp *op;
  int chunk;
  bool recv;
  size_t want;              /* bytes the receive must bring */
  int peer;                 /* the rank on the other end */
  const char *peer_dev;     /* and its device (the comm's) */
} XArg;

typedef struct Chunk {
  int stage;
  int pending;
  FloeXfer *rx;             /* the posted receive (cancel), NULL once done */
  XArg sa, ra;
  char *recv_at;            /* where the receive of this stage lands */
  char *reduce_into;        /* reduce-scatter: where recv_at's values are combined */
  const char *reduce_from;  /* out of place: the input values reduce_into starts from */
  size_t recv_elems;
  bool recv_first;          /* K_RD: the received values go first (the partner's rank is lower) */
} Chunk;

enum { K_AR, K_AG, K_RS, K_BC, K_RD };

typedef struct RingOp {
  RingComm *c;
  int kind;
  FloeDType dt;
  size_t es;
  FloeReduceOp op;
  uint64_t tag;
  char *buf;                /* where the ring works: out (AR, AG, BC) or a copy of in (RS) */
  char *out;
  /* All-reduce out of place: the input, read where the ring first needs each segment (its
   * first send, or the reduction that writes the segment into out), so in is never copied
   * to out as a whole: NULL in place. */
  const char *in;
  size_t count;
  size_t *seg_off, *seg_len; /* elements, n of each */
  char *tmp;                /* reduce-scatter receive scratch: nchunks * ce elements */
  char *msgs;               /* broadcast: nchunks messages of header + ce elements */
  size_t ce;                /* elements per chunk */
  int nchunks, nstages;
  int root;                 /* broadcast: -1 until a message names it (receivers) */
  Chunk *ch;
  int chunks_left;
  floe_code err;
  char *errmsg;
  FloeCollectiveDoneFn done;
  void *done_arg;
  struct RingOp *next;      /* in c->ops */
} RingOp;

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t xfer_tag(const RingOp *o, int stage, int chunk, int src) {
  uint64_t t = mix64(o->c->salt ^ o->tag);
  t = mix64(t ^ ((uint64_t)(uint32_t)stage << 32 | (uint32_t)chunk));
  t = mix64(t ^ (uint64_t)(uint32_t)src);
  return t & ~FLOE_TRANSPORT_TAG_RESERVED;
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* A buffer of at least len bytes: a spare one of c's that fits, else a new one. */
static char *scratch_get(RingComm *c, size_t len) {
  char *p = NULL;
  pthread_mutex_lock(&c->mu);
  int best = -1;
  for (int i = 0; i < SPARE_BUFFERS; i++)
    if (c->spare[i].p && c->spare[i].len >= len &&
        (best < 0 || c->spare[i].len < c->spare[best].len))
      best = i;
  if (best >= 0) {
    p = c->spare[best].p;
    c->spare[best].p = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  if (p) return p;
  p = floe__malloc(len + sizeof(size_t));
  if (!p) return NULL;
  memcpy(p, &len, sizeof len); /* its size, ahead of what the caller sees */
  return p + sizeof(size_t);
}

static size_t scratch_len(const char *q) {
  size_t len;
  memcpy(&len, q - sizeof(size_t), sizeof len);
  return len;
}

/* Keeps q for later (replacing the smallest spare when all are taken), or frees it. */
static void scratch_put(RingComm *c, char *q) {
  if (!q) return;
  size_t len = scratch_len(q);
  char *drop = q;
  pthread_mutex_lock(&c->mu);
  int slot = -1;
  for (int i = 0; i < SPARE_BUFFERS && slot < 0; i++)
    if (!c->spare[i].p) slot = i;
  if (slot < 0)
    for (int i = 0; i < SPARE_BUFFERS; i++)
      if (c->spare[i].len < len && (slot < 0 || c->spare[i].len < c->spare[slot].len)) slot = i;
  if (slot >= 0) {
    drop = c->spare[slot].p;
    c->spare[slot].p = q;
    c->spare[slot].len = len;
  }
  pthread_mutex_unlock(&c->mu);
  if (drop) floe__free(drop - sizeof(size_t));
}

/* ---- comm ---- */

static floe_code ring_init(const FloeHostApi *host, void **ctx) {
  (void)host;
  *ctx = NULL;
  return FLOE_OK;
}

static void ring_finalize(void *ctx) { (void)ctx; }

static floe_code ring_comm_init(void *ctx, const FloeCollectiveGroup *g, void **out, char *msg,
                                size_t msg_len) {
  FloeCollMgr *m = ctx;
  RingComm *c = floe__calloc(1, sizeof *c);
  if (!c) {
    snprintf(msg, msg_len, "out of memory");
    return FLOE_NO_MEMORY;
  }
  c->m = m;
  c->rank = g->rank;
  c->size = g->size;
  pthread_mutex_init(&c->mu, NULL);
  const char *cb = getenv("FLOE_COLLECTIVE_CHUNK_BYTES");
  long long want = cb && *cb ? atoll(cb) : 0;
  c->chunk_bytes = want >= 1024 && want <= (1ll << 30) ? (size_t)want : (size_t)1 << 20;
  uint64_t salt = mix64((uint64_t)g->size);
  for (int i = 0; i < g->size; i++)
    for (const char *p = g->devices[i]; *p; p++) salt = mix64(salt ^ (unsigned char)*p);
  for (const char *p = g->name; *p; p++) salt = mix64(salt ^ (unsigned char)*p);
  c->salt = salt;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = FLOE_OK;
  if (!(c->name = floe__strdup(g->name)) ||
      !(c->next_dev = floe__strdup(g->devices[(g->rank + 1) % g->size])) ||
      !(c->prev_dev = floe__strdup(g->devices[mod(g->rank - 1, g->size)]))) {
    rc = floe_status_set(&st, FLOE_NO_MEMORY, "out of memory");
    goto fail;
  }
  if (g->size > 1) {
    if (!(c->tm = floe__coll_transport(m, &st))) {
      rc = st.code;
      goto fail;
    }
    if ((c->send_chan = floe__coll_channel(m, c->next_dev, true, g->timeout_ms, &st)) < 0 ||
        (c->recv_chan = floe__coll_channel(m, c->prev_dev, false, g->timeout_ms, &st)) < 0) {
      rc = st.code;
      goto fail;
    }
    const char *rb = getenv("FLOE_COLLECTIVE_RD_BYTES");
    long long rd = rb && *rb ? atoll(rb) : 256 << 10;
    c->rd_bytes = rd > 0 ? (size_t)rd : 0;
    bool pow2 = (g->size & (g->size - 1)) == 0;
    for (int k = 0; pow2 && c->rd_bytes && (1 << k) < g->size && k < 12; k++) {
      int p = g->rank ^ (1 << k);
      if (!(c->rd_dev[k] = floe__strdup(g->devices[p]))) {
        rc = floe_status_set(&st, FLOE_NO_MEMORY, "out of memory");
        goto fail;
      }
      c->rd_rounds = k + 1;
      if (g->size == 2) { /* the partner is both neighbours */
        c->rd_send[k] = c->send_chan;
        c->rd_recv[k] = c->recv_chan;
      } else if ((c->rd_send[k] = floe__coll_channel(m, c->rd_dev[k], true, g->timeout_ms, &st)) <
                     0 ||
                 (c->rd_recv[k] = floe__coll_channel(m, c->rd_dev[k], false, g->timeout_ms, &st)) <
                     0) {
        rc = st.code;
        goto fail;
      }
    }
  }
  *out = c;
  return FLOE_OK;
fail:
  snprintf(msg, msg_len, "%s", floe_status_message(&st));
  floe_status_clear(&st);
  for (int k = 0; k < 12; k++) floe__free(c->rd_dev[k]);
  floe__free(c->name);
  floe__free(c->next_dev);
  floe__free(c->prev_dev);
  pthread_mutex_destroy(&c->mu);
  floe__free(c);
  return rc;
}

static void ring_comm_abort(void *comm);

static void ring_comm_free(void *comm) {
  RingComm *c = comm;
  if (!c) return;
  /* The core frees a comm only once its operations are done. */
  for (int i = 0; i < SPARE_BUFFERS; i++)
    if (c->spare[i].p) floe__free(c->spare[i].p - sizeof(size_t));
  for (int k = 0; k < 12; k++) floe__free(c->rd_dev[k]);
  floe__free(c->name);
  floe__free(c->next_dev);
  floe__free(c->prev_dev);
  pthread_mutex_destroy(&c->mu);
  floe__free(c);
}

/* ---- one operation ---- */

static void op_free(RingOp *o) {
  floe__free(o->seg_off);
  floe__free(o->seg_len);
  scratch_put(o->c, o->tmp);
  scratch_put(o->c, o->msgs);
  floe__free(o->ch);
  floe__free(o->errmsg);
  if (o->kind == K_RS) scratch_put(o->c, o->buf);
  floe__free(o);
}

/* Records the first error of o (under c->mu) and withdraws its posted receives. */
static void fail_locked(RingOp *o, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);
static void fail_locked(RingOp *o, floe_code code, const char *fmt, ...) {
  if (o->err == FLOE_OK) {
    o->err = code;
    va_list ap;
    va_start(ap, fmt);
    o->errmsg = floe__vasprintf(fmt, ap);
    va_end(ap);
  }
  for (int i = 0; i < o->nchunks; i++)
    if (o->ch[i].rx) floe__transport_cancel(o->c->tm, o->ch[i].rx);
}

/* The op's last chunk ended: finish and report (no lock held). */
static void op_finish(RingOp *o) {
  RingComm *c = o->c;
  pthread_mutex_lock(&c->mu);
  for (RingOp **p = &c->ops; *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  pthread_mutex_unlock(&c->mu);
  if (o->err == FLOE_OK) {
    if (o->kind == K_RS)
      memcpy(o->out, o->buf + o->seg_off[c->rank] * o->es, o->count * o->es);
    if (o->op == FLOE_REDUCE_MEAN && (o->kind == K_AR || o->kind == K_RS || o->kind == K_RD))
      floe__scale_down(o->out, o->count, o->dt, c->size);
  }
  FloeCollectiveDoneFn done = o->done;
  void *arg = o->done_arg;
  floe_code code = o->err;
  char *msg = o->errmsg;
  o->errmsg = NULL;
  op_free(o);
  done(arg, code, msg);
  floe__free(msg);
}

/* The segments chunk c of stage k sends and receives (-1: none), and whether what it
 * receives is reduced. */
static void stage_plan(const RingOp *o, int k, int *send_seg, int *recv_seg, bool *reduce) {
  int n = o->c->size, r = o->c->rank;
  *reduce = false;
  if (o->kind == K_AG) {
    *send_seg = mod(r - k, n);
    *recv_seg = mod(r - k - 1, n);
  } else if (k < n - 1) { /* K_AR, K_RS: reduce-scatter */
    *send_seg = mod(r - k - 1, n);
    *recv_seg = mod(r - k - 2, n);
    *reduce = true;
  } else { /* K_AR: all-gather */
    int j = k - (n - 1);
    *send_seg = mod(r - j, n);
    *recv_seg = mod(r - j - 1, n);
  }
}

/* Elements [*off, *off + *len) of chunk c within segment s. */
static void chunk_range(const RingOp *o, int s, int c, size_t *off, size_t *len) {
  size_t lo = (size_t)c * o->ce, hi = lo + o->ce;
  if (hi > o->seg_len[s]) hi = o->seg_len[s];
  *off = o->seg_off[s] + lo;
  *len = hi > lo ? hi - lo : 0;
}

static void xfer_done(void *arg, floe_code code, size_t size);

/* Post chunk i's transfers from its current stage on, skipping empty stages; ends the chunk
 * (and maybe the op) when it has no stage left. Called with no lock held. */
static void chunk_advance(RingOp *o, int i) {
  RingComm *c = o->c;
  Chunk *ch = &o->ch[i];
  for (;;) {
    pthread_mutex_lock(&c->mu);
    if (o->err != FLOE_OK || ch->stage >= o->nstages) {
      bool last = --o->chunks_left == 0;
      pthread_mutex_unlock(&c->mu);
      if (last) op_finish(o);
      return;
    }
    const void *sbuf = NULL;
    size_t slen = 0, rlen = 0;
    char *rbuf = NULL;
    int peer_send = (c->rank + 1) % c->size, peer_recv = mod(c->rank - 1, c->size);
    int send_chan = c->send_chan, recv_chan = c->recv_chan;
    const char *dev_send = c->next_dev, *dev_recv = c->prev_dev;
    if (o->kind == K_RD) {
      /* round `stage`: the whole tensor both ways with rank ^ 2^stage */
      int k = ch->stage, p = c->rank ^ (1 << k);
      peer_send = peer_recv = p;
      send_chan = c->rd_send[k];
      recv_chan = c->rd_recv[k];
      dev_send = dev_recv = c->rd_dev[k];
      sbuf = o->buf;
      slen = rlen = o->count * o->es;
      rbuf = o->tmp;
      ch->recv_at = rbuf;
      ch->recv_elems = o->count;
      ch->reduce_into = o->buf;
      ch->recv_first = p < c->rank;
    } else if (o->kind == K_BC) {
      /* stage 0: receive (all but the root); stage 1: pass on (all but the root's left). */
      char *msg = o->msgs + (size_t)i * (BCAST_HEADER + o->ce * o->es);
      size_t off, len;
      chunk_range(o, 0, i, &off, &len);
      bool is_root = o->root == c->rank;
      if (ch->stage == 0 && !is_root && len) {
        rbuf = msg;
        rlen = BCAST_HEADER + len * o->es;
        ch->recv_at = o->buf + off * o->es;
        ch->recv_elems = len;
      } else if (ch->stage == 1 && len && (c->rank + 1) % c->size != o->root) {
        if (is_root) {
          uint32_t h[2] = {BCAST_MAGIC, (uint32_t)o->root};
          memcpy(msg, h, sizeof h);
          memcpy(msg + BCAST_HEADER, o->buf + off * o->es, len * o->es);
        }
        sbuf = msg;
        slen = BCAST_HEADER + len * o->es;
      }
      ch->reduce_into = NULL;
    } else {
      int ss, rs;
      bool reduce;
      stage_plan(o, ch->stage, &ss, &rs, &reduce);
      size_t soff, sl, roff, rl;
      chunk_range(o, ss, i, &soff, &sl);
      chunk_range(o, rs, i, &roff, &rl);
      if (sl) {
        /* Step 0 sends this rank's own values of the segment: still in the input. */
        sbuf = (o->in && ch->stage == 0 ? o->in : o->buf) + soff * o->es;
        slen = sl * o->es;
      }
      if (rl && reduce && o->in) ch->reduce_from = o->in + roff * o->es;
      if (rl) {
        rbuf = reduce ? o->tmp + (size_t)i * o->ce * o->es : o->buf + roff * o->es;
        rlen = rl * o->es;
        ch->recv_at = rbuf;
        ch->recv_elems = rl;
        ch->reduce_into = reduce ? o->buf + roff * o->es : NULL;
      }
    }
    if (!sbuf && !rbuf) {
      ch->stage++;
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    ch->pending = (sbuf != NULL) + (rbuf != NULL);
    ch->ra = (XArg){o, i, true, rlen, peer_recv, dev_recv};
    ch->sa = (XArg){o, i, false, slen, peer_send, dev_send};
    /* A broadcast's message is sent at the sender's step 1 and received at step 0. */
    int stage = o->kind == K_BC ? 0 : ch->stage;
    pthread_mutex_unlock(&c->mu);

    FloeStatus st = {FLOE_OK, NULL};
    if (rbuf) {
      uint64_t tag = xfer_tag(o, stage, i, peer_recv);
      FloeXfer *x = NULL;
      /* The receive is posted first: a same-process sender then meets it at once. */
      pthread_mutex_lock(&c->mu);
      floe_code rc = recv_chan > 0
                         ? floe__transport_irecv_on(c->tm, recv_chan, rbuf, rlen, tag,
                                                    xfer_done, &ch->ra, &x, &st)
                         : floe__transport_irecv(c->tm, rbuf, rlen, tag, xfer_done, &ch->ra, &x,
                                                 &st);
      if (rc == FLOE_OK) ch->rx = x; /* its callback waits for c->mu: it has not run */
      pthread_mutex_unlock(&c->mu);
      if (rc != FLOE_OK) {
        pthread_mutex_lock(&c->mu);
        fail_locked(o, rc, "%s: rank %d could not post a receive from rank %d (%s): %s",
                    c->name, c->rank, peer_recv, dev_recv, floe_status_message(&st));
        pthread_mutex_unlock(&c->mu);
        floe_status_clear(&st);
        xfer_done(&ch->ra, FLOE_CANCELLED, 0);
      }
    }
    if (sbuf) {
      uint64_t tag = xfer_tag(o, stage, i, c->rank);
      floe_code rc = send_chan > 0
                         ? floe__transport_isend_on(c->tm, send_chan, sbuf, slen, tag,
                                                    xfer_done, &ch->sa, &st)
                         : floe__transport_isend(c->tm, sbuf, slen, tag, xfer_done, &ch->sa, &st);
      if (rc != FLOE_OK) {
        pthread_mutex_lock(&c->mu);
        fail_locked(o, rc, "%s: rank %d could not send to rank %d (%s): %s", c->name, c->rank,
                    peer_send, dev_send, floe_status_message(&st));
        pthread_mutex_unlock(&c->mu);
        floe_status_clear(&st);
        xfer_done(&ch->sa, FLOE_CANCELLED, 0);
      }
    }
    return;
  }
}

static void xfer_done(void *arg, floe_code code, size_t size) {
  XArg *a = arg;
  RingOp *o = a->op;
  RingComm *c = o->c;
  Chunk *ch = &o->ch[a->chunk];
  pthread_mutex_lock(&c->mu);
  if (a->recv) ch->rx = NULL;
  if (code != FLOE_OK) {
    int peer = a->peer;
    const char *dev = a->peer_dev;
    if (c->aborted)
      fail_locked(o, FLOE_ABORTED, "%s was aborted", c->name);
    else if (code == FLOE_OUT_OF_RANGE && a->recv)
      fail_locked(o, FLOE_INVALID_ARGUMENT,
                  "%s: rank %d received more than the %zu bytes due from rank %d (%s): the "
                  "ranks disagree on the tensor's size or dtype (every member must give the "
                  "same shape)",
                  c->name, c->rank, a->want, peer, dev);
    else if (code == FLOE_CANCELLED)
      fail_locked(o, FLOE_UNAVAILABLE,
                  "%s: the connection of rank %d to rank %d (%s) closed (unavailable: its task "
                  "died or was dropped)",
                  c->name, c->rank, peer, dev);
    else
      fail_locked(o, code, "%s: rank %d %s rank %d (%s) failed: %s", c->name, c->rank,
                  a->recv ? "receiving from" : "sending to", peer, dev, floe_code_name(code));
  } else if (a->recv && size != a->want) {
    fail_locked(o, FLOE_INVALID_ARGUMENT,
                "%s: rank %d received %zu bytes from rank %d (%s) where %zu were due: the "
                "ranks disagree on the tensor's size or dtype (every member must give the "
                "same shape)",
                c->name, c->rank, size, a->peer, a->peer_dev, a->want);
  } else if (a->recv && o->kind == K_BC) {
    uint32_t h[2];
    memcpy(h, o->msgs + (size_t)a->chunk * (BCAST_HEADER + o->ce * o->es), sizeof h);
    if (h[0] != BCAST_MAGIC || h[1] >= (uint32_t)c->size || h[1] == (uint32_t)c->rank ||
        (o->root >= 0 && (uint32_t)o->root != h[1]))
      fail_locked(o, FLOE_INVALID_ARGUMENT,
                  "%s: rank %d got a broadcast message naming root %u: two members ran "
                  "CollectiveBcastSend with one instance_key, or the message is not a "
                  "broadcast's",
                  c->name, c->rank, h[1]);
    else
      o->root = (int)h[1];
  }
  bool stage_done = --ch->pending == 0;
  bool ok = o->err == FLOE_OK;
  pthread_mutex_unlock(&c->mu);
  if (code == FLOE_OK)
    floe__coll_count(c->m, a->recv ? c->recv_chan : c->send_chan, !a->recv,
                     (int64_t)(a->recv ? size : a->want));
  if (!stage_done) return;
  if (ok && o->kind == K_BC && ch->stage == 0 && ch->recv_elems && o->root != c->rank)
    memcpy(ch->recv_at, o->msgs + (size_t)a->chunk * (BCAST_HEADER + o->ce * o->es) +
                            BCAST_HEADER, ch->recv_elems * o->es);
  else if (ok && ch->reduce_into && ch->recv_elems && ch->recv_first) {
    /* K_RD, the partner's rank lower: its values first, so both compute the same bits */
    floe__reduce3(ch->reduce_into, ch->recv_at, ch->reduce_from ? ch->reduce_from
                  : ch->reduce_into, ch->recv_elems, o->dt, o->op);
  } else if (ok && ch->reduce_into && ch->recv_elems) {
    /* Out of place, the first reduction of this chunk reads the input where it is (one pass,
     * where copying the input to the output first would take two). */
    floe__reduce3(ch->reduce_into, ch->reduce_from ? ch->reduce_from : ch->reduce_into,
                  ch->recv_at, ch->recv_elems, o->dt, o->op);
  }
  pthread_mutex_lock(&c->mu);
  ch->stage++;
  ch->reduce_into = NULL;
  ch->reduce_from = NULL;
  ch->recv_elems = 0;
  pthread_mutex_unlock(&c->mu);
  chunk_advance(o, a->chunk);
}

/* Sets up and starts an operation. buf: the working buffer (see RingOp). */
static floe_code op_start(RingComm *c, int kind, const void *in, void *out, size_t count,
                          FloeDType dt, FloeReduceOp rop, int root, uint64_t tag,
                          FloeCollectiveDoneFn done, void *done_arg) {
  size_t es = floe_dtype_size(dt);
  if (!es || !(FLOE__COLL_DTYPES & FLOE_DTYPE_BIT(dt)) || (unsigned)rop > FLOE_REDUCE_PROD)
    return FLOE_INVALID_ARGUMENT;
  int n = c->size;
  if (count > (SIZE_MAX / 4) / es / (size_t)n) return FLOE_OUT_OF_RANGE;
  if (kind == K_AR && c->rd_rounds && count && count * es <= c->rd_bytes) kind = K_RD;
  RingOp *o = floe__calloc(1, sizeof *o);
  if (!o) return FLOE_NO_MEMORY;
  o->c = c;
  o->kind = kind;
  o->dt = dt;
  o->es = es;
  o->op = rop;
  o->tag = tag;
  o->out = out;
  o->count = count;
  o->root = root;
  o->done = done;
  o->done_arg = done_arg;
  o->seg_off = floe__calloc((size_t)n, sizeof *o->seg_off);
  o->seg_len = floe__calloc((size_t)n, sizeof *o->seg_len);
  if (!o->seg_off || !o->seg_len) goto oom;
  size_t total;
  if (kind == K_RD) {
    o->seg_len[0] = count;
    total = count;
  } else if (kind == K_AR) {
    for (int s = 0; s < n; s++) {
      o->seg_len[s] = count / (size_t)n + ((size_t)s < count % (size_t)n);
      o->seg_off[s] = s ? o->seg_off[s - 1] + o->seg_len[s - 1] : 0;
    }
    total = count;
  } else if (kind == K_BC) {
    o->seg_len[0] = count;
    total = count;
  } else {
    for (int s = 0; s < n; s++) {
      o->seg_off[s] = (size_t)s * count;
      o->seg_len[s] = count;
    }
    total = count * (size_t)n;
  }
  size_t maxseg = 0;
  for (int s = 0; s < n; s++)
    if (o->seg_len[s] > maxseg) maxseg = o->seg_len[s];
  o->ce = c->chunk_bytes / es ? c->chunk_bytes / es : 1;
  if (o->ce > maxseg && maxseg) o->ce = maxseg;
  o->nchunks = maxseg ? (int)((maxseg + o->ce - 1) / o->ce) : 0;
  o->nstages = kind == K_AR ? 2 * (n - 1) : kind == K_BC ? 2 : kind == K_RD ? c->rd_rounds : n - 1;
  if (kind == K_RD) { /* one piece: the whole tensor each round */
    o->ce = count;
    o->nchunks = 1;
  }

  /* The working buffer. */
  if (kind == K_RS) {
    if (total && !(o->buf = scratch_get(c, total * es))) goto oom;
    if (total) memcpy(o->buf, in, total * es);
  } else if (kind == K_AG) {
    o->buf = out;
    if (count) memmove(o->buf + o->seg_off[c->rank] * es, in, count * es);
  } else if (kind == K_BC) {
    o->buf = root == c->rank ? (char *)in : out;
  } else if (kind == K_RD) {
    o->buf = out;
    if (in != out) memmove(out, in, count * es);
  } else {
    o->buf = out;
    if (in != out) o->in = in;
  }
  if (n == 1 || o->nchunks == 0) {
    if (o->in && count) memmove(out, in, count * es);
    /* Nothing crosses the ring: the result is this rank's own. */
    if (kind == K_RS && count) memcpy(out, o->buf + o->seg_off[c->rank] * es, count * es);
    op_free(o);
    done(done_arg, FLOE_OK, NULL);
    return FLOE_OK;
  }
  if (kind == K_AR || kind == K_RS || kind == K_RD) {
    if (!(o->tmp = scratch_get(c, (size_t)o->nchunks * o->ce * es))) goto oom;
  }
  if (kind == K_BC &&
      !(o->msgs = scratch_get(c, (size_t)o->nchunks * (BCAST_HEADER + o->ce * es))))
    goto oom;
  if (!(o->ch = floe__calloc((size_t)o->nchunks, sizeof *o->ch))) goto oom;
  o->chunks_left = o->nchunks;
  pthread_mutex_lock(&c->mu);
  if (c->aborted) {
    pthread_mutex_unlock(&c->mu);
    op_free(o);
    return FLOE_ABORTED;
  }
  o->next = c->ops;
  c->ops = o;
  pthread_mutex_unlock(&c->mu);
  /* The last chunk to end frees o, possibly inside the last call here: o is not read after. */
  int nchunks = o->nchunks;
  for (int i = 0; i < nchunks; i++) chunk_advance(o, i);
  return FLOE_OK;
oom:
  op_free(o);
  return FLOE_NO_MEMORY;
}

static floe_code ring_all_reduce(void *comm, const void *in, void *out, size_t count,
                                 FloeDType dt, FloeReduceOp op, uint64_t tag, FloeStream *s,
                                 FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return op_start(comm, K_AR, in, out, count, dt, op, -1, tag, done, arg);
}

static floe_code ring_all_gather(void *comm, const void *in, void *out, size_t count,
                                 FloeDType dt, uint64_t tag, FloeStream *s,
                                 FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return op_start(comm, K_AG, in, out, count, dt, FLOE_REDUCE_SUM, -1, tag, done, arg);
}

static floe_code ring_reduce_scatter(void *comm, const void *in, void *out, size_t count,
                                     FloeDType dt, FloeReduceOp op, uint64_t tag, FloeStream *s,
                                     FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return op_start(comm, K_RS, in, out, count, dt, op, -1, tag, done, arg);
}

/* root < 0 on a receiver: learnt from the first message (the core's BcastRecv). */
static floe_code ring_broadcast(void *comm, void *buf, size_t count, FloeDType dt, int root,
                                uint64_t tag, FloeStream *s, FloeCollectiveDoneFn done,
                                void *arg) {
  (void)s;
  RingComm *c = comm;
  if (root >= c->size) return FLOE_INVALID_ARGUMENT;
  return op_start(c, K_BC, buf, buf, count, dt, FLOE_REDUCE_SUM, root, tag, done, arg);
}

static void ring_comm_abort(void *comm) {
  RingComm *c = comm;
  pthread_mutex_lock(&c->mu);
  c->aborted = true;
  for (RingOp *o = c->ops; o; o = o->next) fail_locked(o, FLOE_ABORTED, "%s was aborted", c->name);
  pthread_mutex_unlock(&c->mu);
}

const FloeCollectiveFns floe__ring_fns = {
    .struct_size = sizeof(FloeCollectiveFns),
    .name = "ring",
    .device_type = "CPU",
    .dtypes = FLOE__COLL_DTYPES,
    .init = ring_init,
    .finalize = ring_finalize,
    .comm_init = ring_comm_init,
    .all_reduce = ring_all_reduce,
    .all_gather = ring_all_gather,
    .reduce_scatter = ring_reduce_scatter,
    .broadcast = ring_broadcast,
    .comm_abort = ring_comm_abort,
    .comm_free = ring_comm_free,
};
