/* SPDX-License-Identifier: Apache-2.0 */
/* rendezvous.c - where a Send meets its Recv (one table per step), and the wire format of a
 * transfer through a transport (see internal.h, "Heterogeneous devices" and the rendezvous
 * helper's additions).
 *
 * A table slot per key string. Both sides decide the route from the key alone, so they agree
 * without talking: by reference when both devices resolve in this process, the source's
 * incarnation is this runtime's, and they are one device or both read host memory (and
 * force_transport is off); through the runtime's transport otherwise. With a route
 * (FloeRendezvousOptions.route), a key whose other end is on another task always takes the
 * transport, on the channel the route names for that task; channel 0 is the manager's
 * loopback. On the reference path the slot holds the value or the waiting Recv; on the
 * transport path the Send posts one message (header and a small payload) or two (header,
 * then the payload under tag | 1), and the Recv posts a receive of FLOE__RV_MESSAGE_MAX
 * bytes, then, for a split value, one of the exact payload size, and builds the tensor on the
 * destination device.
 *
 * Locking: r->mu guards the table, the list of transport Recvs and the abort state. It may be
 * held while calling into the transport manager (never the reverse), and is never held while
 * a done callback runs. r is reference counted: the owner's reference (dropped by free) and
 * one per transport Recv in flight, so a transfer the transport cannot withdraw may finish
 * after free returned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

typedef struct Slot {
  char *key;                 /* the key string, owned */
  uint64_t hash;
  bool sent, recv_posted;
  bool via_transport;        /* the Send went to the transport ... */
  bool drain_local;          /* ... for a receiver here (drained at free if unreceived) */
  bool split;                /* ... as a header and a payload message */
  uint64_t tag;
  /* reference path */
  bool has_value, dead;      /* a Send waits for its Recv */
  FloeTensor *value;         /* one reference */
  bool waiting;              /* a Recv waits for its Send */
  FloeRecvDoneFn done;
  void *arg;
  FloeDevice *dst;
} Slot;

typedef struct RecvOp {
  FloeRendezvous *r;         /* one reference */
  FloeTransportMgr *mgr;
  int chan;                  /* the receive channel (0: the loopback) */
  int refs;                  /* under r->mu: the transport's callback, + 1 while abort delivers */
  char *key;                 /* owned, for errors */
  char *src;                 /* the source device's name, owned, for errors */
  FloeDevice *dst;
  FloeRecvDoneFn done;
  void *arg;
  uint64_t tag;
  FloeXfer *xfer;            /* the receive in flight (under r->mu), NULL while completing */
  bool delivered;            /* done has been called (or is being called) */
  FloeDType dtype;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  unsigned flags;
  void *payload;             /* floe__aligned_alloc'd host buffer, or direct's data */
  size_t payload_len;
  FloeTensor *direct;        /* a host-memory destination received into in place */
  struct RecvOp *prev, *next; /* in r->ops while not delivered */
  unsigned char msg[];       /* FLOE__RV_MESSAGE_MAX bytes: the first message */
} RecvOp;

struct FloeRendezvous {
  FloeRuntime *rt;
  int64_t step_id;
  FloeRendezvousOptions opts;
  atomic_int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;         /* broadcast when running drops or an op leaves ops */
  Slot **slots;              /* open addressing, power-of-two capacity */
  size_t cap, count;
  RecvOp *ops;               /* transport Recvs whose done has not been called */
  int num_waiting;           /* reference-path Recvs waiting for their Send */
  int running;               /* done callbacks running */
  FloeTransportMgr *mgr;     /* once a transfer used it */
  bool aborted;
  floe_code abort_code;
  char *abort_msg;           /* owned; NULL when it could not be copied */
  _Atomic int64_t sends, recvs, by_reference, wire_bytes, tensor_bytes;
};

/* ---- keys, tags, incarnations, bf16 ---------------------------------------------------- */

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

uint64_t floe__device_incarnation(const FloeDevice *d) {
  if (d->remote) return d->remote_incarnation;
  return mix64(d->rt->seed ^ mix64((uint64_t)d->id + 1));
}

char *floe__rendezvous_key_string(const FloeRendezvousKey *key) {
  return floe__asprintf("%s;%016llx;%s;%s;%016llx:%lld", key->src_device,
                        (unsigned long long)key->src_incarnation, key->dst_device, key->tensor,
                        (unsigned long long)key->frame_id, (long long)key->iter);
}

static uint64_t tag_of(int64_t step_id, const char *key_string) {
  return mix64(fnv1a(key_string) ^ mix64((uint64_t)step_id)) & ~(uint64_t)1;
}

uint64_t floe__rendezvous_tag(int64_t step_id, const FloeRendezvousKey *key) {
  char *ks = floe__rendezvous_key_string(key);
  uint64_t t = ks ? tag_of(step_id, ks) : 0;
  floe__free(ks);
  return t;
}

uint16_t floe__f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; the carry rounds up to infinity */
  return (uint16_t)(u >> 16);
}

float floe__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static floe_code check_key(const FloeRendezvousKey *key, FloeStatus *st) {
  if (!key || !key->src_device || !key->dst_device || !key->tensor || !*key->tensor)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "rendezvous key is NULL or lacks a source device, a destination "
                           "device or a tensor name");
  return FLOE_OK;
}

static FloeDevice *local_device(const FloeRuntime *rt, const char *name) {
  FloeStatus ignore = {FLOE_OK, NULL};
  FloeDevice *d = floe__device_find(rt, name, &ignore);
  floe_status_clear(&ignore);
  return d;
}

/* The route both sides take: true for by reference (see the top of the file). */
static bool by_reference(const FloeRendezvous *r, const FloeRendezvousKey *key) {
  if (r->opts.force_transport) return false;
  FloeDevice *src = local_device(r->rt, key->src_device);
  FloeDevice *dst = local_device(r->rt, key->dst_device);
  if (!src || !dst || floe__device_incarnation(src) != key->src_incarnation) return false;
  if (src->remote || dst->remote) return false; /* another task's: through its channel */
  return src == dst || (src->host_memory && dst->host_memory);
}

/* The channel to or from the task holding device: 0 without a route (or for this task's
 * own devices), else the route's answer; -1 with st set when it has none. */
static int route_channel(const FloeRendezvous *r, const char *device, bool is_send,
                         FloeStatus *st) {
  const FloeRendezvousRoute *route = r->opts.route;
  if (!route || !route->channel) return 0;
  FloeStatus why = {FLOE_OK, NULL};
  int chan = route->channel(route->arg, device, is_send, &why);
  if (chan < 0) {
    if (why.code == FLOE_OK)
      floe_status_set(&why, FLOE_UNAVAILABLE, "no %s channel %s the task holding %s",
                      is_send ? "send" : "receive", is_send ? "to" : "from", device);
    floe_status_set(st, why.code, "%s", floe_status_message(&why));
  }
  floe_status_clear(&why);
  return chan < 0 ? -1 : chan;
}

/* Tells the route what crossed one of its channels (nothing for the loopback, or when the
 * route does not count). No rendezvous lock held. */
static void route_count(const FloeRendezvousRoute *route, int chan, bool is_send, int64_t bytes) {
  if (chan > 0 && bytes >= 0 && route && route->count) route->count(route->arg, chan, is_send, bytes);
}

/* Appends to st (UNAVAILABLE, about a transfer with another task's device) which task that
 * is and what to do, when device names a task. */
static void task_lost_hint(FloeStatus *st, const char *device) {
  FloeDeviceName dn;
  FloeStatus ignore = {FLOE_OK, NULL};
  if (st && device && floe_device_name_parse(device, &dn, &ignore) == FLOE_OK && dn.job[0]) {
    char *msg = floe__strdup(floe_status_message(st));
    if (msg)
      floe_status_set(st, FLOE_UNAVAILABLE, "%s; /job:%s/task:%d is unavailable (it died, "
                      "hangs or its link is down): when it is back (restart its server: floe "
                      "server), create a new session", msg, dn.job, dn.task < 0 ? 0 : dn.task);
    floe__free(msg);
  }
  floe_status_clear(&ignore);
}

/* A post refused because the route's channel was closed meanwhile (its task was dropped),
 * or because the transport found the peer gone (UNAVAILABLE), is UNAVAILABLE naming the
 * device's task and what to do, as the route would have answered a moment later; the code
 * st ends with. */
static floe_code channel_gone(FloeStatus *st, floe_code rc, int chan, const char *device) {
  if (chan == 0 || (rc != FLOE_FAILED_PRECONDITION && rc != FLOE_UNAVAILABLE)) return rc;
  char *why = st ? floe__strdup(floe_status_message(st)) : NULL;
  floe_status_set(st, FLOE_UNAVAILABLE, "the task of %s is gone: %s", device,
                  why ? why : FLOE__OOM_MESSAGE);
  floe__free(why);
  task_lost_hint(st, device);
  return FLOE_UNAVAILABLE;
}

static void *tensor_bytes(const FloeTensor *t) {
  return t->buf ? (char *)t->buf->data + t->offset : NULL;
}

/* ---- the table ------------------------------------------------------------------------- */

static bool table_grow(FloeRendezvous *r) {
  size_t cap = r->cap ? r->cap * 2 : 64;
  Slot **slots = floe__calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < r->cap; i++) {
    Slot *s = r->slots[i];
    if (!s) continue;
    size_t j = s->hash & (cap - 1);
    while (slots[j]) j = (j + 1) & (cap - 1);
    slots[j] = s;
  }
  floe__free(r->slots);
  r->slots = slots;
  r->cap = cap;
  return true;
}

/* The slot of key string ks (created when absent; ks then owned by it, else the caller's).
 * NULL on OOM. Under r->mu. */
static Slot *slot_get(FloeRendezvous *r, char **ks) {
  uint64_t h = fnv1a(*ks);
  if (r->cap) {
    for (size_t j = h & (r->cap - 1); r->slots[j]; j = (j + 1) & (r->cap - 1))
      if (r->slots[j]->hash == h && strcmp(r->slots[j]->key, *ks) == 0) return r->slots[j];
  }
  if ((r->count + 1) * 2 > r->cap && !table_grow(r)) return NULL;
  Slot *s = floe__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->key = *ks;
  *ks = NULL;
  s->hash = h;
  size_t j = h & (r->cap - 1);
  while (r->slots[j]) j = (j + 1) & (r->cap - 1);
  r->slots[j] = s;
  r->count++;
  return s;
}

/* ---- life ------------------------------------------------------------------------------ */

FloeRendezvous *floe__rendezvous_new(FloeRuntime *rt, int64_t step_id,
                                     const FloeRendezvousOptions *opts, FloeStatus *st) {
  FloeRendezvous *r = floe__calloc(1, sizeof *r);
  if (!r) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating the rendezvous of step %lld",
                    (long long)step_id);
    return NULL;
  }
  r->rt = rt;
  r->step_id = step_id;
  if (opts) r->opts = *opts;
  atomic_init(&r->refs, 1);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  return r;
}

static void rendezvous_unref(FloeRendezvous *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  for (size_t i = 0; i < r->cap; i++) {
    Slot *s = r->slots[i];
    if (!s) continue;
    floe_tensor_release(s->value);
    floe__free(s->key);
    floe__free(s);
  }
  floe__free(r->slots);
  floe__free(r->abort_msg);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  floe__free(r);
}

void floe__rendezvous_retain(FloeRendezvous *r) {
  if (r) atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void floe__rendezvous_release(FloeRendezvous *r) {
  if (r) rendezvous_unref(r);
}

/* The abort's status into st (under r->mu). */
static void abort_status(const FloeRendezvous *r, FloeStatus *st) {
  floe_status_set(st, r->abort_code, "%s", r->abort_msg ? r->abort_msg : FLOE__OOM_MESSAGE);
}

/* Calls done outside the lock, counted in running so that free waits for it. Under r->mu on
 * entry and on return. */
static void call_done(FloeRendezvous *r, FloeRecvDoneFn done, void *arg, const FloeStatus *st,
                      FloeTensor *t, bool dead) {
  r->running++;
  pthread_mutex_unlock(&r->mu);
  done(arg, st, t, dead);
  pthread_mutex_lock(&r->mu);
  r->running--;
  pthread_cond_broadcast(&r->cv);
}

static void op_unref(RecvOp *op) { /* under r->mu */
  if (--op->refs > 0) return;
  if (op->direct)
    floe_tensor_release(op->direct);
  else
    floe__aligned_free(op->payload);
  floe__free(op->key);
  floe__free(op->src);
  floe__free(op);
}

static void ops_remove(FloeRendezvous *r, RecvOp *op) {
  if (op->prev)
    op->prev->next = op->next;
  else
    r->ops = op->next;
  if (op->next) op->next->prev = op->prev;
  op->prev = op->next = NULL;
  pthread_cond_broadcast(&r->cv);
}

/* Fails the reference-path Recvs waiting in the table (under r->mu; drops it meanwhile). */
static void fail_waiters(FloeRendezvous *r, const FloeStatus *st) {
  size_t cap = r->cap;
  for (size_t i = 0; i < r->cap; i++) {
    if (r->cap != cap) { /* the table grew while unlocked: scan it again */
      cap = r->cap;
      i = 0;
    }
    Slot *s = r->slots[i];
    if (!s || !s->waiting) continue;
    s->waiting = false;
    r->num_waiting--;
    call_done(r, s->done, s->arg, st, NULL, false);
  }
}

/* Takes op out of the Recvs in flight to be failed by fail_orphan: its transfer is left to
 * finish on its own (the transport's callback keeps its reference and finds it delivered).
 * Under r->mu. */
static void orphan(FloeRendezvous *r, RecvOp *op) {
  op->delivered = true;
  op->refs++;
  ops_remove(r, op);
}

/* Fails an orphaned op with st (under r->mu; drops it meanwhile). */
static void fail_orphan(FloeRendezvous *r, RecvOp *op, const FloeStatus *st) {
  call_done(r, op->done, op->arg, st, NULL, false);
  op_unref(op);
}

/* Withdraws the transport Recvs in flight (under r->mu). Those the transport withdraws end in
 * their callbacks with the abort's status. A Recv the transport cannot withdraw (no cancel
 * slot, or its message is already arriving: a peer that hangs in the middle of a payload
 * never finishes it) is failed here and its transfer left to finish, or to fail when the
 * channel closes, on its own: an abort never waits on a peer. */
static void cancel_ops(FloeRendezvous *r, const FloeStatus *st) {
  RecvOp *orphans = NULL;
  for (RecvOp *op = r->ops, *next; op; op = next) {
    next = op->next;
    if (!op->xfer || floe__transport_cancel(op->mgr, op->xfer) == FLOE_OK) continue;
    orphan(r, op);
    op->next = orphans;
    orphans = op;
  }
  while (orphans) {
    RecvOp *op = orphans;
    orphans = op->next;
    op->next = NULL;
    fail_orphan(r, op, st);
  }
}

void floe__rendezvous_abort(FloeRendezvous *r, floe_code code, const char *why) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  r->aborted = true;
  r->abort_code = code == FLOE_OK ? FLOE_ABORTED : code;
  r->abort_msg = floe__strdup(why ? why : "the step was aborted");
  FloeStatus st = {FLOE_OK, NULL};
  abort_status(r, &st);
  fail_waiters(r, &st);
  cancel_ops(r, &st);
  pthread_mutex_unlock(&r->mu);
  floe_status_clear(&st);
}

/* Posts empty receives that consume the messages of a value nobody here received (under
 * r->mu). Only values sent to this runtime's own devices (the loopback channel): a value
 * sent to another task waits in that task's transport, which alone can match it; that task
 * drops what its step left (CleanupGraph) and its runtime's free releases the rest. */
static void drain_unreceived(FloeRendezvous *r) {
  for (size_t i = 0; i < r->cap; i++) {
    Slot *s = r->slots[i];
    if (!s || !s->via_transport || s->recv_posted || !s->drain_local || !r->mgr) continue;
    FloeStatus ignore = {FLOE_OK, NULL};
    floe__transport_irecv(r->mgr, NULL, 0, s->tag, NULL, NULL, NULL, &ignore);
    if (s->split) floe__transport_irecv(r->mgr, NULL, 0, s->tag | 1, NULL, NULL, NULL, &ignore);
    floe_status_clear(&ignore);
  }
}

void floe__rendezvous_free(FloeRendezvous *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  bool pending = r->num_waiting > 0 || r->ops != NULL;
  pthread_mutex_unlock(&r->mu);
  if (pending)
    floe__rendezvous_abort(r, FLOE_CANCELLED,
                           "the step's rendezvous was freed while this Recv was pending");
  pthread_mutex_lock(&r->mu);
  while (r->running > 0 || r->ops) pthread_cond_wait(&r->cv, &r->mu);
  drain_unreceived(r);
  pthread_mutex_unlock(&r->mu);
  rendezvous_unref(r);
}

void floe__rendezvous_stats(const FloeRendezvous *r, FloeRendezvousStats *out) {
  memset(out, 0, sizeof *out);
  if (!r) return;
  FloeRendezvous *m = (FloeRendezvous *)r; /* atomics are read-only here */
  out->sends = atomic_load(&m->sends);
  out->recvs = atomic_load(&m->recvs);
  out->by_reference = atomic_load(&m->by_reference);
  out->wire_bytes = atomic_load(&m->wire_bytes);
  out->tensor_bytes = atomic_load(&m->tensor_bytes);
}

int floe__rendezvous_num_pending(FloeRendezvous *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->num_waiting;
  for (RecvOp *op = r->ops; op; op = op->next) n++;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* ---- the reference path ---------------------------------------------------------------- */

/* Lossy compression applies to f32 tensors of at least FLOE__RV_BF16_MIN elements: the
 * bandwidth is in activations, weights and gradients, while small values are often exact
 * constants a bf16 rounding would break (Adam's beta2 = 0.999 becomes 1.0, its second moment
 * then never grows and the updates blow up) and cost nothing to send whole. */
static bool compressible(const FloeRendezvous *r, const FloeTensor *t) {
  return r->opts.compress_bf16 && t->dtype == FLOE_F32 && t->num_elements >= FLOE__RV_BF16_MIN;
}

/* An f32 tensor on t's device holding t's values rounded to bf16. Caller owns. */
static FloeTensor *rounded_copy(FloeTensor *t, FloeStatus *st) {
  FloeDevice *dev = floe__tensor_device(t);
  FloeTensor *out = floe__tensor_alloc(dev, FLOE_F32, t->rank, t->dims, st);
  if (!out) return NULL;
  size_t n = (size_t)t->num_elements;
  bool host = !dev || dev->host_memory;
  float *work = host ? tensor_bytes(out) : floe__aligned_alloc(64, t->nbytes);
  if (!work) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory rounding %zu bytes to bf16", t->nbytes);
    goto err_release;
  }
  if (floe__device_copy(NULL, work, dev, tensor_bytes(t), t->nbytes, st) != FLOE_OK)
    goto err_free_work;
  for (size_t i = 0; i < n; i++) work[i] = floe__bf16_to_f32(floe__f32_to_bf16(work[i]));
  if (!host) {
    if (floe__device_copy(dev, tensor_bytes(out), NULL, work, t->nbytes, st) != FLOE_OK)
      goto err_free_work;
    floe__aligned_free(work);
  }
  return out;

err_free_work:
  if (!host) floe__aligned_free(work);
err_release:
  floe_tensor_release(out);
  return NULL;
}

/* Hands value (a reference, given up) to a Recv: in dst's memory (a copy only when the two
 * devices do not share memory). Under r->mu. */
static void deliver_value(FloeRendezvous *r, const char *ks, FloeRecvDoneFn done, void *arg,
                          FloeDevice *dst, FloeTensor *value, bool dead) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *out = NULL;
  if (!dead) {
    out = floe__tensor_to_device(value, dst, &st);
    if (!out) floe__status_prefix(&st, "Recv of %s", ks);
  }
  floe_tensor_release(value);
  if (st.code == FLOE_OK) atomic_fetch_add(&r->recvs, 1);
  call_done(r, done, arg, &st, out, dead);
  floe_status_clear(&st);
}

/* ---- the transport path: sending ------------------------------------------------------- */

typedef struct SendOp {
  atomic_int left;           /* posted messages not yet completed */
  void *owned;               /* a split value's staging or bf16 buffer (floe__aligned_alloc) */
  FloeTensor *held;          /* a split host tensor whose bytes are sent in place */
  size_t msg_len;            /* of msg: the header, and the payload when it fits */
  unsigned char msg[];
} SendOp;

static void send_op_put(SendOp *op) {
  if (atomic_fetch_sub(&op->left, 1) != 1) return;
  floe__aligned_free(op->owned);
  floe_tensor_release(op->held);
  floe__free(op);
}

/* A send's error cannot reach anyone (Send returned); the receiver's side reports it. */
static void on_sent(void *arg, floe_code code, size_t size) {
  (void)code;
  (void)size;
  send_op_put(arg);
}

static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void encode_header(unsigned char *h, unsigned flags, FloeDType dt, int rank,
                          const int64_t *dims, uint64_t payload) {
  memset(h, 0, FLOE__RV_HEADER_BYTES);
  put_u32(h, FLOE__RV_MAGIC);
  put_u16(h + 4, FLOE__RV_VERSION);
  put_u16(h + 6, (uint16_t)flags);
  put_u32(h + 8, (uint32_t)dt);
  put_u32(h + 12, (uint32_t)rank);
  for (int i = 0; i < rank; i++) put_u64(h + 16 + 8 * i, (uint64_t)dims[i]);
  put_u64(h + 80, payload);
}

/* The payload bytes of t as they travel: *len is the count (bf16 halves an f32 value). */
static size_t wire_len(const FloeRendezvous *r, const FloeTensor *t) {
  return compressible(r, t) ? (size_t)t->num_elements * 2 : t->nbytes;
}

/* The bytes to post for t: in place when t is host memory and travels uncompressed (*held
 * gets a reference), else in *owned (staged from the device and/or compressed). */
static floe_code send_payload(FloeTensor *t, bool bf16, const void **out, void **owned,
                              FloeTensor **held, FloeStatus *st) {
  FloeDevice *dev = floe__tensor_device(t);
  bool host = !dev || dev->host_memory;
  if (host && !bf16) {
    floe_tensor_retain(t);
    *held = t;
    *out = tensor_bytes(t);
    return FLOE_OK;
  }
  const void *src = tensor_bytes(t);
  void *stage = NULL;
  if (!host) {
    if (!(stage = floe__aligned_alloc(64, t->nbytes)))
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory staging %zu bytes from %s",
                             t->nbytes, dev->short_name);
    floe_code rc = floe__device_copy(NULL, stage, dev, src, t->nbytes, st);
    if (rc != FLOE_OK) {
      floe__aligned_free(stage);
      return rc;
    }
    src = stage;
  }
  if (!bf16) {
    *owned = stage;
    *out = stage;
    return FLOE_OK;
  }
  size_t n = (size_t)t->num_elements;
  uint16_t *half = floe__aligned_alloc(64, n * 2);
  if (!half) {
    floe__aligned_free(stage);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory compressing %zu bytes to bf16",
                           t->nbytes);
  }
  const float *f = src;
  for (size_t i = 0; i < n; i++) half[i] = floe__f32_to_bf16(f[i]);
  floe__aligned_free(stage);
  *owned = half;
  *out = half;
  return FLOE_OK;
}

/* Posts the value on channel chan: one message when header and payload fit in
 * FLOE__RV_MESSAGE_MAX (split false), else the header then the payload under tag | 1. *wire
 * gets the payload's bytes, *posted whether anything was posted. t may be NULL (dead, or a
 * control edge sending nothing). */
static floe_code send_transport(FloeRendezvous *r, FloeTransportMgr *m, int chan, uint64_t tag,
                                FloeTensor *t, bool dead, bool control, bool split,
                                int64_t *wire, bool *posted, FloeStatus *st) {
  *posted = false;
  bool has_payload = !dead && t && t->nbytes > 0;
  size_t len = has_payload ? wire_len(r, t) : 0;
  SendOp *op = floe__malloc(sizeof *op + FLOE__RV_HEADER_BYTES + (split ? 0 : len));
  if (!op) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory posting a Send");
  memset(op, 0, sizeof *op);
  atomic_init(&op->left, split ? 2 : 1);
  op->msg_len = FLOE__RV_HEADER_BYTES + (split ? 0 : len);
  const void *payload = NULL;
  unsigned flags = (dead ? FLOE__RV_DEAD : 0) | (control ? FLOE__RV_CONTROL : 0) |
                   (split ? FLOE__RV_SPLIT : 0);
  bool bf16 = !dead && t && compressible(r, t);
  if (bf16) flags |= FLOE__RV_BF16;
  floe_code rc;
  if (has_payload &&
      (rc = send_payload(t, bf16, &payload, &op->owned, &op->held, st)) != FLOE_OK) {
    floe__free(op);
    return rc;
  }
  static const int64_t empty_dims[1] = {0};
  if (t && !dead)
    encode_header(op->msg, flags, t->dtype, t->rank, t->dims, len);
  else
    encode_header(op->msg, flags, FLOE_F32, 1, empty_dims, 0);
  if (!split && len) { /* small: the bytes travel in the message, nothing is kept */
    memcpy(op->msg + FLOE__RV_HEADER_BYTES, payload, len);
    floe__aligned_free(op->owned);
    floe_tensor_release(op->held);
    op->owned = NULL;
    op->held = NULL;
  }
  if ((rc = floe__transport_isend_on(m, chan, op->msg, op->msg_len, tag, on_sent, op, st)) !=
      FLOE_OK) {
    atomic_store(&op->left, 1);
    send_op_put(op);
    return rc;
  }
  *posted = true;
  if (split &&
      (rc = floe__transport_isend_on(m, chan, payload, len, tag | 1, on_sent, op, st)) !=
          FLOE_OK) {
    send_op_put(op); /* the header's callback puts the other */
    return rc;
  }
  *wire = (int64_t)len;
  return FLOE_OK;
}

floe_code floe__rendezvous_send(FloeRendezvous *r, const FloeRendezvousKey *key, FloeTensor *t,
                                bool is_dead, FloeStatus *st) {
  if (!r) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "Send: the rendezvous is NULL");
  if (check_key(key, st) != FLOE_OK) return FLOE_INVALID_ARGUMENT;
  char *ks = floe__rendezvous_key_string(key);
  if (!ks) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory naming a rendezvous key");
  floe_code rc = FLOE_OK;
  bool control = key->tensor[0] == '^';
  if (!is_dead && !control && !t) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "Send of %s has no tensor (only a dead value travels without one)", ks);
    goto out_free_key;
  }
  if (!is_dead && control && t && t->nbytes > 0) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "Send of %s: a control edge carries an empty tensor, not %zu bytes", ks,
                         t->nbytes);
    goto out_free_key;
  }
  if (is_dead) t = NULL;
  int chan = route_channel(r, key->dst_device, true, st);
  if (chan < 0) {
    floe__status_prefix(st, "Send of %s", ks);
    rc = st ? st->code : FLOE_UNAVAILABLE;
    goto out_free_key;
  }
  bool fast = chan == 0 && by_reference(r, key);
  FloeTransportMgr *m = NULL;
  FloeTensor *value = NULL;
  bool no_copy = false;
  if (fast && !is_dead) {
    static const int64_t empty_dims[1] = {0};
    if (!t)
      value = floe__tensor_alloc(NULL, FLOE_F32, 1, empty_dims, st);
    else if (compressible(r, t))
      value = rounded_copy(t, st);
    else {
      floe_tensor_retain(t);
      value = t;
      no_copy = true;
    }
    if (!value) {
      floe__status_prefix(st, "Send of %s", ks);
      rc = st ? st->code : FLOE_NO_MEMORY; /* no status to read the code from: the likeliest */
      goto out_free_key;
    }
  } else if (!fast && !(m = floe__transport_mgr(r->rt, st))) {
    floe__status_prefix(st, "Send of %s", ks);
    rc = st ? st->code : FLOE_UNAVAILABLE;
    goto out_free_key;
  }

  Slot *s;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) goto out_unlock; /* dropped: the step already failed */
  s = slot_get(r, &ks);
  if (!s) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding a Send to the rendezvous");
    goto out_unlock;
  }
  if (s->sent) {
    rc = floe_status_set(st, FLOE_ALREADY_EXISTS,
                         "two Sends of %s in step %lld: each key is sent once (a tensor name, "
                         "frame or iteration is repeated)",
                         s->key, (long long)r->step_id);
    goto out_unlock;
  }
  s->sent = true;
  if (fast) {
    atomic_fetch_add(&r->sends, 1);
    if (no_copy) atomic_fetch_add(&r->by_reference, 1);
    if (s->waiting) {
      s->waiting = false;
      r->num_waiting--;
      deliver_value(r, s->key, s->done, s->arg, s->dst, value, is_dead);
    } else {
      s->has_value = true;
      s->dead = is_dead;
      s->value = value;
    }
    value = NULL;
    goto out_unlock;
  }
  s->via_transport = true;
  s->tag = tag_of(r->step_id, s->key);
  /* a value for another task is that task's to drain (see drain_unreceived) */
  s->drain_local = chan == 0 && local_device(r->rt, key->dst_device) != NULL;
  s->split = t && FLOE__RV_HEADER_BYTES + wire_len(r, t) > FLOE__RV_MESSAGE_MAX;
  r->mgr = m;
  uint64_t tag = s->tag;
  bool split = s->split;
  const char *kname = s->key; /* slots live until the last reference goes */
  pthread_mutex_unlock(&r->mu);
  floe__free(ks);
  int64_t wire = 0;
  bool posted;
  rc = send_transport(r, m, chan, tag, t, is_dead, control, split, &wire, &posted, st);
  if (rc != FLOE_OK) {
    rc = channel_gone(st, rc, chan, key->dst_device);
    floe__status_prefix(st, "Send of %s", kname);
    if (!posted) { /* nothing for free to drain */
      pthread_mutex_lock(&r->mu);
      s->via_transport = false;
      pthread_mutex_unlock(&r->mu);
    }
    return rc;
  }
  atomic_fetch_add(&r->sends, 1);
  atomic_fetch_add(&r->wire_bytes, wire);
  route_count(r->opts.route, chan, true, wire);
  atomic_fetch_add(&r->tensor_bytes, t ? (int64_t)t->nbytes : 0);
  return FLOE_OK;

out_unlock:
  pthread_mutex_unlock(&r->mu);
  floe_tensor_release(value);
out_free_key:
  floe__free(ks);
  return rc;
}

/* ---- the transport path: receiving ----------------------------------------------------- */

/* Ends op: done runs with st (or the abort's status) unless it already ran. Takes the
 * reference t (NULL: none). */
static void op_finish(RecvOp *op, const FloeStatus *st, FloeTensor *t, bool dead) {
  FloeRendezvous *r = op->r;
  int64_t counted = -1;
  FloeStatus ab = {FLOE_OK, NULL};
  pthread_mutex_lock(&r->mu);
  if (!op->delivered) {
    if (r->aborted) {
      floe_tensor_release(t);
      t = NULL;
      dead = false;
      abort_status(r, &ab);
      st = &ab;
    }
    op->delivered = true;
    ops_remove(r, op);
    if (st->code == FLOE_OK) atomic_fetch_add(&r->recvs, 1);
    counted = st->code == FLOE_OK ? (int64_t)op->payload_len : -1;
    call_done(r, op->done, op->arg, st, t, dead);
    t = NULL;
  }
  int chan = op->chan;
  const FloeRendezvousRoute *route = r->opts.route; /* outlives r, which may go once unlocked */
  floe_tensor_release(t);
  op_unref(op);
  pthread_mutex_unlock(&r->mu);
  route_count(route, chan, false, counted);
  floe_status_clear(&ab);
  rendezvous_unref(r);
}

static void op_fail(RecvOp *op, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);
static void op_fail(RecvOp *op, floe_code code, const char *fmt, ...) {
  FloeStatus st = {FLOE_OK, NULL};
  va_list ap;
  va_start(ap, fmt);
  char *why = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(&st, code, "Recv of %s: %s", op->key, why ? why : FLOE__OOM_MESSAGE);
  floe__free(why);
  /* A transfer lost from another task: name the task, and what to do. */
  if (code == FLOE_UNAVAILABLE && op->chan > 0) task_lost_hint(&st, op->src);
  op_finish(op, &st, NULL, false);
  floe_status_clear(&st);
}

/* Checks a received header and fills op's value description; false after op_fail. */
static bool decode_header(RecvOp *op) {
  const unsigned char *h = op->msg;
  if (get_u32(h) != FLOE__RV_MAGIC || get_u16(h + 4) != FLOE__RV_VERSION) {
    op_fail(op, FLOE_DATA_LOSS,
            "the header has magic 0x%08x version %u (expected 0x%08x version %d): not a "
            "rendezvous message, or another Floe version",
            get_u32(h), get_u16(h + 4), FLOE__RV_MAGIC, FLOE__RV_VERSION);
    return false;
  }
  op->flags = get_u16(h + 6);
  uint32_t dt = get_u32(h + 8), rank = get_u32(h + 12);
  uint64_t payload = get_u64(h + 80);
  if (dt == FLOE_RESOURCE || floe_dtype_size((FloeDType)dt) == 0 || rank > FLOE_MAX_DIMS) {
    op_fail(op, FLOE_DATA_LOSS, "the header has dtype %u and rank %u", dt, rank);
    return false;
  }
  op->dtype = (FloeDType)dt;
  op->rank = (int)rank;
  for (uint32_t i = 0; i < rank; i++) op->dims[i] = (int64_t)get_u64(h + 16 + 8 * i);
  int64_t n;
  size_t nbytes;
  FloeStatus st = {FLOE_OK, NULL};
  if (floe__shape_bytes(op->dtype, op->rank, op->dims, &n, &nbytes, &st) != FLOE_OK) {
    op_fail(op, FLOE_DATA_LOSS, "the header's shape is invalid: %s", floe_status_message(&st));
    floe_status_clear(&st);
    return false;
  }
  bool bf16 = op->flags & FLOE__RV_BF16;
  uint64_t want = (op->flags & FLOE__RV_DEAD) ? 0 : bf16 ? (uint64_t)n * 2 : nbytes;
  if ((bf16 && op->dtype != FLOE_F32) || payload != want ||
      ((op->flags & FLOE__RV_CONTROL) && nbytes != 0)) {
    op_fail(op, FLOE_DATA_LOSS,
            "the header announces %llu payload bytes for a %s value of %lld elements "
            "(flags 0x%x): expected %llu",
            (unsigned long long)payload, floe_dtype_name(op->dtype), (long long)n, op->flags,
            (unsigned long long)want);
    return false;
  }
  op->payload_len = (size_t)payload;
  return true;
}

/* The received value on op->dst from its payload bytes at payload. Caller owns; NULL + st on
 * failure. */
static FloeTensor *build_value(RecvOp *op, const void *payload, FloeStatus *st) {
  FloeTensor *t = floe__tensor_alloc(op->dst, op->dtype, op->rank, op->dims, st);
  if (!t || t->nbytes == 0) return t;
  const void *src = payload;
  float *wide = NULL;
  if (op->flags & FLOE__RV_BF16) {
    if (!(wide = floe__aligned_alloc(64, t->nbytes))) {
      floe_status_set(st, FLOE_NO_MEMORY, "out of memory expanding %zu bytes from bf16",
                      op->payload_len);
      floe_tensor_release(t);
      return NULL;
    }
    const uint16_t *half = payload;
    for (int64_t i = 0; i < t->num_elements; i++) wide[i] = floe__bf16_to_f32(half[i]);
    src = wide;
  }
  floe_code rc = floe__device_copy(op->dst, tensor_bytes(t), NULL, src, t->nbytes, st);
  floe__aligned_free(wide);
  if (rc != FLOE_OK) {
    floe_tensor_release(t);
    return NULL;
  }
  return t;
}

/* A receive on another task's channel ended by floe__transport_close_channel (the task died
 * or was dropped) fails the Recv with UNAVAILABLE naming the source device; true when so (op
 * finished). An abort's own cancellations keep the abort's status (op_finish). */
static bool lost_channel(RecvOp *op, floe_code code) {
  if (code != FLOE_CANCELLED || op->chan == 0) return false;
  op_fail(op, FLOE_UNAVAILABLE,
          "the receive channel %d from the task of %s was closed (the task died or was "
          "dropped, or the runtime is shutting down)",
          op->chan, op->src);
  return true;
}

static void on_payload(void *arg, floe_code code, size_t size) {
  RecvOp *op = arg;
  pthread_mutex_lock(&op->r->mu);
  op->xfer = NULL;
  pthread_mutex_unlock(&op->r->mu);
  if (code == FLOE_OUT_OF_RANGE) {
    op_fail(op, FLOE_DATA_LOSS,
            "the payload holds %zu bytes, more than the %zu bytes its header announced "
            "(transport \"%s\")",
            size, op->payload_len, floe__transport_name(op->mgr));
    return;
  }
  if (code != FLOE_OK) {
    if (lost_channel(op, code)) return;
    op_fail(op, code, "receiving the %zu-byte payload failed (%s, transport \"%s\")",
            op->payload_len, floe_code_name(code), floe__transport_name(op->mgr));
    return;
  }
  if (size != op->payload_len) {
    op_fail(op, FLOE_DATA_LOSS, "the payload holds %zu bytes; its header announced %zu", size,
            op->payload_len);
    return;
  }
  FloeStatus st = {FLOE_OK, NULL};
  bool dead = op->flags & FLOE__RV_DEAD;
  FloeTensor *t = NULL;
  if (op->direct) { /* the bytes are already in place */
    t = op->direct;
    op->direct = NULL;
    op->payload = NULL;
  } else if (!dead) {
    t = build_value(op, op->payload, &st);
  }
  if (!dead && !t) floe__status_prefix(&st, "Recv of %s onto %s", op->key,
                                       op->dst ? op->dst->short_name : "host");
  op_finish(op, &st, t, dead);
  floe_status_clear(&st);
}

static void on_message(void *arg, floe_code code, size_t size) {
  RecvOp *op = arg;
  FloeRendezvous *r = op->r;
  pthread_mutex_lock(&r->mu);
  op->xfer = NULL;
  pthread_mutex_unlock(&r->mu);
  if (code == FLOE_OUT_OF_RANGE || (code == FLOE_OK && size < FLOE__RV_HEADER_BYTES)) {
    op_fail(op, FLOE_DATA_LOSS, "the first message holds %zu bytes (a header of %d and at most "
            "%d in all expected)", size, FLOE__RV_HEADER_BYTES, FLOE__RV_MESSAGE_MAX);
    return;
  }
  if (code != FLOE_OK) {
    if (lost_channel(op, code)) return;
    op_fail(op, code, "receiving the header failed (%s, transport \"%s\")",
            floe_code_name(code), floe__transport_name(op->mgr));
    return;
  }
  if (!decode_header(op)) return;
  FloeStatus st = {FLOE_OK, NULL};
  bool dead = op->flags & FLOE__RV_DEAD;
  if (!(op->flags & FLOE__RV_SPLIT)) { /* the payload came with the header */
    if (size != FLOE__RV_HEADER_BYTES + op->payload_len) {
      op_fail(op, FLOE_DATA_LOSS,
              "the message holds %zu bytes; its header announced %zu payload bytes after "
              "its %d", size, op->payload_len, FLOE__RV_HEADER_BYTES);
      return;
    }
    FloeTensor *t = dead ? NULL : build_value(op, op->msg + FLOE__RV_HEADER_BYTES, &st);
    if (!dead && !t) floe__status_prefix(&st, "Recv of %s onto %s", op->key,
                                         op->dst ? op->dst->short_name : "host");
    op_finish(op, &st, t, dead);
    floe_status_clear(&st);
    return;
  }
  if (size != FLOE__RV_HEADER_BYTES) {
    op_fail(op, FLOE_DATA_LOSS,
            "the header message of a split value holds %zu bytes, not %d", size,
            FLOE__RV_HEADER_BYTES);
    return;
  }
  /* A host-memory destination takes the bytes straight into the tensor (no staging copy). */
  bool host_dst = !op->dst || op->dst->host_memory;
  if (op->payload_len && host_dst && !(op->flags & FLOE__RV_BF16)) {
    op->direct = floe__tensor_alloc(op->dst, op->dtype, op->rank, op->dims, &st);
    if (!op->direct) {
      floe__status_prefix(&st, "Recv of %s onto %s", op->key,
                          op->dst ? op->dst->short_name : "host");
      op_finish(op, &st, NULL, false);
      floe_status_clear(&st);
      return;
    }
    op->payload = tensor_bytes(op->direct);
  } else if (op->payload_len && !(op->payload = floe__aligned_alloc(64, op->payload_len))) {
    op_fail(op, FLOE_NO_MEMORY, "out of memory for a payload of %zu bytes", op->payload_len);
    return;
  }
  pthread_mutex_lock(&r->mu);
  floe_code rc = floe__transport_irecv_on(op->mgr, op->chan, op->payload, op->payload_len,
                                          op->tag | 1, on_payload, op, &op->xfer, &st);
  /* Aborted while the header was being read: withdraw at once, or fail the Recv now when the
   * payload is already arriving (see cancel_ops). */
  if (rc == FLOE_OK && r->aborted && !op->delivered &&
      floe__transport_cancel(op->mgr, op->xfer) != FLOE_OK) {
    FloeStatus ab = {FLOE_OK, NULL};
    abort_status(r, &ab);
    orphan(r, op);
    fail_orphan(r, op, &ab);
    floe_status_clear(&ab);
  }
  pthread_mutex_unlock(&r->mu);
  if (rc != FLOE_OK) {
    floe__status_prefix(&st, "Recv of %s", op->key);
    op_finish(op, &st, NULL, false);
  }
  floe_status_clear(&st);
}

/* Calls done at once with an error (nothing was registered). */
static void recv_fail_now(FloeRecvDoneFn done, void *arg, FloeStatus *st) {
  done(arg, st, NULL, false);
  floe_status_clear(st);
}

void floe__rendezvous_recv(FloeRendezvous *r, const FloeRendezvousKey *key, FloeDevice *dst,
                           FloeRecvDoneFn done, void *arg) {
  FloeStatus st = {FLOE_OK, NULL};
  if (!done) return; /* nobody to tell: a caller bug, not worth a crash */
  if (!r) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "Recv: the rendezvous is NULL");
    return recv_fail_now(done, arg, &st);
  }
  if (check_key(key, &st) != FLOE_OK) return recv_fail_now(done, arg, &st);
  char *ks = floe__rendezvous_key_string(key);
  if (!ks) {
    floe_status_set(&st, FLOE_NO_MEMORY, "out of memory naming a rendezvous key");
    return recv_fail_now(done, arg, &st);
  }
  int chan = route_channel(r, key->src_device, false, &st);
  if (chan < 0) {
    floe__status_prefix(&st, "Recv of %s", ks);
    floe__free(ks);
    return recv_fail_now(done, arg, &st);
  }
  bool fast = chan == 0 && by_reference(r, key);
  FloeTransportMgr *m = NULL;
  if (!fast && !(m = floe__transport_mgr(r->rt, &st))) {
    floe__status_prefix(&st, "Recv of %s", ks);
    floe__free(ks);
    return recv_fail_now(done, arg, &st);
  }
  RecvOp *op = NULL;
  pthread_mutex_lock(&r->mu);
  if (r->aborted) {
    abort_status(r, &st);
    goto fail_unlock;
  }
  Slot *s = slot_get(r, &ks);
  if (!s) {
    floe_status_set(&st, FLOE_NO_MEMORY, "out of memory adding a Recv to the rendezvous");
    goto fail_unlock;
  }
  if (s->recv_posted) {
    floe_status_set(&st, FLOE_ALREADY_EXISTS,
                    "two Recvs of %s in step %lld: each key is received once", s->key,
                    (long long)r->step_id);
    goto fail_unlock;
  }
  if (fast) {
    s->recv_posted = true;
    if (s->has_value) {
      s->has_value = false;
      FloeTensor *v = s->value;
      s->value = NULL;
      deliver_value(r, s->key, done, arg, dst, v, s->dead);
    } else {
      s->waiting = true;
      s->done = done;
      s->arg = arg;
      s->dst = dst;
      r->num_waiting++;
    }
    pthread_mutex_unlock(&r->mu);
    floe__free(ks);
    return;
  }
  /* Room for the first message; only the bookkeeping is zeroed. */
  op = floe__malloc(sizeof *op + FLOE__RV_MESSAGE_MAX);
  if (op) memset(op, 0, sizeof *op);
  if (!op || !(op->key = floe__strdup(s->key)) || !(op->src = floe__strdup(key->src_device))) {
    if (op) floe__free(op->key);
    floe__free(op);
    floe_status_set(&st, FLOE_NO_MEMORY, "out of memory posting a Recv");
    goto fail_unlock;
  }
  op->r = r;
  op->mgr = m;
  op->chan = chan;
  op->refs = 1;
  op->dst = dst;
  op->done = done;
  op->arg = arg;
  op->tag = tag_of(r->step_id, s->key);
  r->mgr = m;
  if (floe__transport_irecv_on(m, chan, op->msg, FLOE__RV_MESSAGE_MAX, op->tag, on_message, op,
                               &op->xfer, &st) != FLOE_OK) {
    channel_gone(&st, st.code, chan, key->src_device);
    floe__status_prefix(&st, "Recv of %s", s->key);
    op_unref(op);
    goto fail_unlock;
  }
  s->recv_posted = true;
  atomic_fetch_add(&r->refs, 1);
  op->next = r->ops;
  if (r->ops) r->ops->prev = op;
  r->ops = op;
  pthread_mutex_unlock(&r->mu);
  floe__free(ks);
  return;

fail_unlock:
  pthread_mutex_unlock(&r->mu);
  floe__free(ks);
  recv_fail_now(done, arg, &st);
}
