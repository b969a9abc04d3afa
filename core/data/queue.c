/* SPDX-License-Identifier: Apache-2.0 */
/* queue.c - FIFOQueue, PaddingFIFOQueue and RandomShuffleQueue: session resources holding
 * elements (tuples of tensors), and their kernels.
 *
 * Every enqueue and dequeue is a Waiter on one of the queue's two lists, served strictly in
 * arrival order (a dequeue_many waiting for 5 elements keeps a later dequeue of 1 waiting,
 * as in TensorFlow). Whenever something changes (an element goes in or out, the queue
 * closes, a waiter leaves) `process` serves the heads of both lists until neither can
 * move. A waiter that cannot complete at once stays on its list and its kernel returns
 * without calling done: blocked operations hold no thread. Whoever completes a waiter (the
 * thread of another operation, a close, a step cancel) calls its done, outside the queue's
 * lock.
 *
 * A pending waiter registers a step-cancellation callback. A waiter is completed by
 * exactly one of: `process` (served or failed), a close, or its callback; the waiter's
 * `pending` flag under the queue's lock says whether it is still to be claimed. The
 * callback holds its own reference to the waiter, so neither side frees it under the
 * other. Completions found while running a cancellation callback are handed to the pool:
 * completing them there would deregister other steps' callbacks from inside a cancel,
 * and two threads cancelling two steps could each wait for the other.
 *
 * Elements are kept in host memory: enqueue_many slices its components into views (no
 * copy), a single dequeue hands the element's tensors out as they are, and a batch dequeue
 * copies the elements into one new tensor per component (zero-padded for a
 * PaddingFIFOQueue). Batch outputs are allocated under the lock before any element is
 * removed, so running out of memory leaves the queue as it was.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "data.h"

typedef enum QueueKind { Q_FIFO = 0, Q_PADDING = 1, Q_SHUFFLE = 2 } QueueKind;

static const char *const kind_names[] = {"FIFOQueue", "PaddingFIFOQueue", "RandomShuffleQueue"};

typedef enum OpKind { OP_ENQUEUE, OP_DEQUEUE, OP_DEQUEUE_MANY, OP_DEQUEUE_UP_TO } OpKind;

typedef struct Waiter Waiter;

typedef struct Queue {
  FloeResource res;       /* first: the resource manager names queues through it */
  QueueKind kind;
  int ncomp;
  FloeDType *dtypes;      /* ncomp */
  FloeShape *shapes;      /* ncomp, or NULL: elements of any shape */
  int64_t capacity;       /* INT64_MAX when unbounded */
  int64_t min_after;      /* random shuffle */
  FloeThreadPool *pool;   /* for completions found inside a cancel (borrowed; may be NULL) */
  pthread_mutex_t mu;     /* guards everything below */
  FloeTensor **slots;     /* ring of cap elements of ncomp tensors each */
  int64_t head, count, cap;
  uint64_t rng[4];
  bool closed;            /* QueueCloseV2 ran */
  bool shutdown;          /* the resource was closed (session close, container reset) */
  Waiter *enq_head, *enq_tail, *deq_head, *deq_tail;
} Queue;

struct Waiter {
  Waiter *prev, *next;    /* on the queue's list while pending */
  Waiter *done_next;      /* on a completion list */
  Queue *q;               /* a reference */
  OpKind op;
  atomic_int refs;        /* the operation's, plus the cancel callback's while registered */
  bool pending;           /* on a list, not yet claimed (guarded by q->mu) */
  int64_t token;          /* cancel registration, > 0 while it may still be deregistered */
  FloeKernelContext *ctx;
  FloeDoneFn done;
  void *done_arg;
  /* enqueue: n elements of ncomp tensors (references), elements [0, nin) went in */
  FloeTensor **elems;
  int64_t n, nin;
  /* dequeue: want elements; on success `taken` removed elements (ncomp references each) and
   * `outs` the batch outputs (ncomp) for many / up_to */
  int64_t want, ntaken;
  FloeTensor **taken, **outs;
  FloeStatus st;          /* the outcome */
};

static const char *qname(const Queue *q) { return q->res.name ? q->res.name : "?"; }

/* ---- the resource ---- */

static void waiter_finish_list(Waiter *list);

static void queue_destroy(FloeResource *r) {
  Queue *q = (Queue *)r;
  for (int64_t i = 0; i < q->count; i++) {
    FloeTensor **e = q->slots + ((q->head + i) % q->cap) * q->ncomp;
    for (int c = 0; c < q->ncomp; c++) floe_tensor_release(e[c]);
  }
  floe__free(q->slots);
  floe__free(q->dtypes);
  floe__free(q->shapes);
  pthread_mutex_destroy(&q->mu);
  floe__free(q);
}

static void fail_waiter(Waiter *w, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);

/* Caller holds q->mu: unlinks w from its list (it stays `pending` until claimed). */
static void list_remove(Queue *q, Waiter *w) {
  Waiter **head = w->op == OP_ENQUEUE ? &q->enq_head : &q->deq_head;
  Waiter **tail = w->op == OP_ENQUEUE ? &q->enq_tail : &q->deq_tail;
  if (w->prev) w->prev->next = w->next;
  else *head = w->next;
  if (w->next) w->next->prev = w->prev;
  else *tail = w->prev;
  w->prev = w->next = NULL;
}

static void list_append(Queue *q, Waiter *w) {
  Waiter **head = w->op == OP_ENQUEUE ? &q->enq_head : &q->deq_head;
  Waiter **tail = w->op == OP_ENQUEUE ? &q->enq_tail : &q->deq_tail;
  w->prev = *tail;
  w->next = NULL;
  if (*tail) (*tail)->next = w;
  else *head = w;
  *tail = w;
}

/* Caller holds q->mu: takes w off its list and onto the completion list. */
static void claim(Queue *q, Waiter *w, Waiter **done) {
  list_remove(q, w);
  w->pending = false;
  w->done_next = *done;
  *done = w;
}

/* FloeResourceOps.close: the session is closing or the container is reset. Every waiter
 * fails (cancelled), and so does every later operation. */
static void queue_shutdown(FloeResource *r) {
  Queue *q = (Queue *)r;
  Waiter *done = NULL;
  pthread_mutex_lock(&q->mu);
  q->closed = q->shutdown = true;
  while (q->enq_head || q->deq_head) {
    Waiter *w = q->enq_head ? q->enq_head : q->deq_head;
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' was shut down (its session closed or its "
                "container was reset) while this operation waited", qname(q));
    claim(q, w, &done);
  }
  pthread_mutex_unlock(&q->mu);
  waiter_finish_list(done);
}

static const FloeResourceOps queue_ops = {"queue", queue_shutdown, queue_destroy};

/* What a queue node asks for (its attributes). */
typedef struct QueueSpec {
  QueueKind kind;
  const FloeDType *dtypes;
  const FloeShape *shapes; /* NULL: none */
  int ncomp;
  int64_t capacity, min_after, seed;
  FloeThreadPool *pool;
} QueueSpec;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A seed for seed 0: different for every queue of the process. */
static uint64_t fresh_seed(void) {
  static atomic_ullong counter = 0;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 32) ^
               atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
  return splitmix64(&x);
}

static FloeResource *queue_make(void *arg, FloeStatus *st) {
  const QueueSpec *sp = arg;
  Queue *q = floe__calloc(1, sizeof *q);
  if (!q) goto err_oom;
  q->dtypes = floe__malloc((size_t)sp->ncomp * sizeof *q->dtypes);
  q->shapes = sp->shapes ? floe__malloc((size_t)sp->ncomp * sizeof *q->shapes) : NULL;
  if (!q->dtypes || (sp->shapes && !q->shapes)) goto err_free;
  if (pthread_mutex_init(&q->mu, NULL) != 0) {
    floe__free(q->dtypes);
    floe__free(q->shapes);
    floe__free(q);
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a queue's mutex");
    return NULL;
  }
  memcpy(q->dtypes, sp->dtypes, (size_t)sp->ncomp * sizeof *q->dtypes);
  if (sp->shapes) memcpy(q->shapes, sp->shapes, (size_t)sp->ncomp * sizeof *q->shapes);
  floe__resource_init(&q->res, &queue_ops);
  q->kind = sp->kind;
  q->ncomp = sp->ncomp;
  q->capacity = sp->capacity < 0 ? INT64_MAX : sp->capacity;
  q->min_after = sp->kind == Q_SHUFFLE ? sp->min_after : 0;
  q->pool = sp->pool;
  uint64_t x = sp->seed ? (uint64_t)sp->seed : fresh_seed();
  for (int i = 0; i < 4; i++) q->rng[i] = splitmix64(&x);
  return &q->res;

err_free:
  floe__free(q->dtypes);
  floe__free(q->shapes);
  floe__free(q);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a queue");
  return NULL;
}

/* An existing queue must be what the node asks for: a second node sharing it (by
 * shared_name) with other component types would break every reader's assumptions. */
static floe_code check_same(const Queue *q, const QueueSpec *sp, FloeStatus *st) {
  bool same = q->kind == sp->kind && q->ncomp == sp->ncomp &&
              q->capacity == (sp->capacity < 0 ? INT64_MAX : sp->capacity) &&
              q->min_after == (sp->kind == Q_SHUFFLE ? sp->min_after : 0) &&
              (q->shapes != NULL) == (sp->shapes != NULL);
  for (int i = 0; same && i < q->ncomp; i++) {
    same = q->dtypes[i] == sp->dtypes[i];
    if (same && q->shapes) {
      same = q->shapes[i].rank == sp->shapes[i].rank;
      for (int d = 0; same && d < q->shapes[i].rank; d++)
        same = q->shapes[i].dims[d] == sp->shapes[i].dims[d];
    }
  }
  if (same) return FLOE_OK;
  return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "queue '%s' (container '%s') exists as a %s of %d components with "
                         "other types, shapes, capacity or min_after_dequeue than this node's "
                         "%s: nodes sharing a queue must describe it alike (or use another "
                         "shared_name)",
                         qname(q), q->res.container ? q->res.container : "", kind_names[q->kind],
                         q->ncomp, kind_names[sp->kind]);
}

/* ---- waiters ---- */

static void fail_waiter(Waiter *w, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(&w->st, code, fmt, ap);
  va_end(ap);
}

static Waiter *waiter_new(Queue *q, OpKind op, FloeKernelContext *ctx, FloeDoneFn done,
                          void *done_arg) {
  Waiter *w = floe__calloc(1, sizeof *w);
  if (!w) return NULL;
  w->q = q; /* takes over the caller's reference */
  w->op = op;
  atomic_init(&w->refs, 1);
  w->ctx = ctx;
  w->done = done;
  w->done_arg = done_arg;
  return w;
}

static void release_tensors(FloeTensor **t, int64_t n) {
  if (!t) return;
  for (int64_t i = 0; i < n; i++) floe_tensor_release(t[i]);
  floe__free(t);
}

static void waiter_unref(Waiter *w) {
  if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1) return;
  int nc = w->q->ncomp;
  release_tensors(w->elems, w->n * nc); /* those that went in are NULL */
  release_tensors(w->taken, w->ntaken * nc);
  release_tensors(w->outs, w->outs ? nc : 0);
  floe_status_clear(&w->st);
  floe__resource_release(&w->q->res);
  floe__free(w);
}

/* ---- elements ---- */

static FloeTensor **slot(const Queue *q, int64_t i) {
  return q->slots + ((q->head + i) % q->cap) * q->ncomp;
}

/* Caller holds q->mu: room for one more element. */
static bool ring_reserve(Queue *q) {
  if (q->count < q->cap) return true;
  int64_t cap = q->cap ? 2 * q->cap : 16;
  FloeTensor **v = floe__malloc((size_t)cap * (size_t)q->ncomp * sizeof *v);
  if (!v) return false;
  for (int64_t i = 0; i < q->count; i++)
    memcpy(v + i * q->ncomp, slot(q, i), (size_t)q->ncomp * sizeof *v);
  floe__free(q->slots);
  q->slots = v;
  q->cap = cap;
  q->head = 0;
  return true;
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Uniform in [0, range): xoshiro256** with Lemire's rejection (range > 0). */
static uint64_t rng_bounded(uint64_t s[4], uint64_t range) {
  for (;;) {
    uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    unsigned __int128 m = (unsigned __int128)r * range;
    if ((uint64_t)m >= (0 - range) % range) return (uint64_t)(m >> 64);
  }
}

/* Caller holds q->mu: for a random shuffle, moves k uniformly chosen elements to the front
 * (a partial Fisher-Yates), so taking from the front takes them. */
static void choose_front(Queue *q, int64_t k) {
  if (q->kind != Q_SHUFFLE) return;
  for (int64_t j = 0; j < k; j++) {
    int64_t i = j + (int64_t)rng_bounded(q->rng, (uint64_t)(q->count - j));
    if (i == j) continue;
    FloeTensor **a = slot(q, j), **b = slot(q, i);
    for (int c = 0; c < q->ncomp; c++) {
      FloeTensor *t = a[c];
      a[c] = b[c];
      b[c] = t;
    }
  }
}

/* Where a kernel's host outputs go: its own device when that is host memory (the CPU
 * device keeps freed large blocks for reuse, plain host allocations of a batch would
 * page-fault every step), else plain host memory, copied over afterwards. */
static FloeDevice *host_device(const FloeKernelContext *ctx) {
  return ctx->device && ctx->device->host_memory ? ctx->device : NULL;
}

/* Caller holds q->mu: allocates w's batch outputs for the first k elements, [k] + the
 * element shape (zero-padded to the largest element for a PaddingFIFOQueue). */
static bool alloc_batch(Queue *q, Waiter *w, int64_t k) {
  w->outs = floe__calloc((size_t)q->ncomp, sizeof *w->outs);
  if (!w->outs) goto err_oom;
  for (int c = 0; c < q->ncomp; c++) {
    FloeShape s = q->shapes[c];
    int64_t dims[FLOE_MAX_DIMS];
    dims[0] = k;
    for (int d = 0; d < s.rank; d++) {
      int64_t m = s.dims[d];
      if (m < 0) { /* padded: the batch's largest */
        m = 0;
        for (int64_t i = 0; i < k; i++)
          if (slot(q, i)[c]->dims[d] > m) m = slot(q, i)[c]->dims[d];
      }
      dims[1 + d] = m;
    }
    FloeStatus ast = {FLOE_OK, NULL};
    w->outs[c] = floe__tensor_alloc(host_device(w->ctx), q->dtypes[c], s.rank + 1, dims, &ast);
    if (!w->outs[c]) {
      fail_waiter(w, ast.code, "queue '%s': component %d of a batch of %" PRId64 ": %s",
                  qname(q), c, k, floe_status_message(&ast));
      floe_status_clear(&ast);
      goto err_free;
    }
  }
  return true;

err_oom:
  fail_waiter(w, FLOE_NO_MEMORY, "queue '%s': out of memory for a batch of %" PRId64,
              qname(q), k);
err_free:
  release_tensors(w->outs, w->outs ? q->ncomp : 0);
  w->outs = NULL;
  return false;
}

/* Caller holds q->mu: removes k elements into w (the batch outputs first, for batches).
 * False with w failed when out of memory; the queue keeps its elements then. */
static bool take(Queue *q, Waiter *w, int64_t k) {
  choose_front(q, k);
  bool batch = w->op != OP_DEQUEUE;
  if (batch && !alloc_batch(q, w, k)) return false;
  if (k > 0) {
    w->taken = floe__malloc((size_t)k * (size_t)q->ncomp * sizeof *w->taken);
    if (!w->taken) {
      fail_waiter(w, FLOE_NO_MEMORY, "queue '%s': out of memory dequeuing %" PRId64,
                  qname(q), k);
      release_tensors(w->outs, w->outs ? q->ncomp : 0);
      w->outs = NULL;
      return false;
    }
  }
  for (int64_t i = 0; i < k; i++)
    memcpy(w->taken + i * q->ncomp, slot(q, i), (size_t)q->ncomp * sizeof *w->taken);
  w->ntaken = k;
  q->head = q->cap ? (q->head + k) % q->cap : 0;
  q->count -= k;
  return true;
}

/* Caller holds q->mu. True when w is done (served or failed). */
static bool try_dequeue(Queue *q, Waiter *w) {
  if (q->shutdown) {
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' was shut down (its session closed or its "
                "container was reset)", qname(q));
    return true;
  }
  int64_t need = w->want;
  int64_t keep = q->closed ? 0 : q->min_after; /* a closed shuffle queue drains */
  if (q->count >= need + keep) {
    take(q, w, need);
    return true;
  }
  if (!q->closed) return false;
  if (w->op == OP_DEQUEUE_UP_TO && q->count > 0) {
    take(q, w, q->count);
    return true;
  }
  fail_waiter(w, FLOE_OUT_OF_RANGE, "queue '%s' is closed and has %" PRId64 " element%s, %"
              PRId64 " requested", qname(q), q->count, q->count == 1 ? "" : "s", need);
  return true;
}

/* Caller holds q->mu. True when w is done; elements go in one at a time as room allows. */
static bool try_enqueue(Queue *q, Waiter *w) {
  if (q->shutdown) {
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' was shut down (its session closed or its "
                "container was reset)", qname(q));
    return true;
  }
  while (w->nin < w->n && q->count < q->capacity) {
    if (!ring_reserve(q)) {
      fail_waiter(w, FLOE_NO_MEMORY, "queue '%s': out of memory growing to %" PRId64
                  " elements (%" PRId64 " of this operation's %" PRId64 " went in)",
                  qname(q), q->count + 1, w->nin, w->n);
      return true;
    }
    FloeTensor **src = w->elems + w->nin * q->ncomp;
    memcpy(slot(q, q->count), src, (size_t)q->ncomp * sizeof *src);
    memset(src, 0, (size_t)q->ncomp * sizeof *src); /* the queue owns them now */
    q->count++;
    w->nin++;
  }
  return w->nin == w->n;
}

/* Caller holds q->mu: serves the heads of both lists until neither can move; completed
 * waiters go onto *done. */
static void process(Queue *q, Waiter **done) {
  for (bool moved = true; moved;) {
    moved = false;
    while (q->deq_head && try_dequeue(q, q->deq_head)) {
      claim(q, q->deq_head, done);
      moved = true;
    }
    while (q->enq_head) {
      Waiter *w = q->enq_head;
      int64_t before = w->nin;
      bool fin = try_enqueue(q, w);
      if (w->nin != before) moved = true;
      if (!fin) break;
      claim(q, w, done);
      moved = true;
    }
  }
}

/* ---- completing ---- */

/* Host tensors in memory the kernel's device reads; t's reference is given up. */
static FloeTensor *to_kernel_device(FloeKernelContext *ctx, FloeTensor *t, FloeStatus *st) {
  FloeDevice *dev = ctx->device;
  if (t->nbytes == 0 || (floe__tensor_on_host(t) && (!dev || dev->host_memory))) return t;
  FloeTensor *moved = floe__tensor_to_device(t, dev, st);
  floe_tensor_release(t);
  return moved;
}

/* dst (rank r, dims pd) zero-filled; src (dims sd, each <= pd) copied into its corner. */
static void copy_padded(char *dst, const int64_t *pd, const char *src, const int64_t *sd,
                        int r, size_t esize) {
  if (r == 0) {
    memcpy(dst, src, esize);
    return;
  }
  size_t dst_row = esize, src_row = esize;
  for (int d = 1; d < r; d++) {
    dst_row *= (size_t)pd[d];
    src_row *= (size_t)sd[d];
  }
  for (int64_t i = 0; i < sd[0]; i++) {
    if (r == 1)
      memcpy(dst + (size_t)i * esize, src + (size_t)i * esize, esize);
    else
      copy_padded(dst + (size_t)i * dst_row, pd + 1, src + (size_t)i * src_row, sd + 1, r - 1,
                  esize);
  }
}

/* Stacks the taken elements into the batch outputs. */
static void fill_batch(const Queue *q, Waiter *w) {
  for (int c = 0; c < q->ncomp; c++) {
    FloeTensor *out = w->outs[c];
    if (out->nbytes == 0) continue;
    char *dst = floe_tensor_data(out);
    size_t esize = floe_dtype_size(out->dtype), row = out->nbytes / (size_t)w->ntaken;
    bool padded = false;
    for (int64_t i = 0; i < w->ntaken && !padded; i++)
      padded = w->taken[i * q->ncomp + c]->nbytes != row;
    if (padded) memset(dst, 0, out->nbytes);
    for (int64_t i = 0; i < w->ntaken; i++) {
      const FloeTensor *e = w->taken[i * q->ncomp + c];
      if (e->nbytes == 0) continue;
      if (!padded)
        memcpy(dst + (size_t)i * row, floe_tensor_data(e), row);
      else
        copy_padded(dst + (size_t)i * row, out->dims + 1, floe_tensor_data(e), e->dims, e->rank,
                    esize);
    }
  }
}

/* Sets the kernel's outputs (or its error), calls done and drops the operation's
 * reference. w is no longer on any list. */
static void waiter_finish(Waiter *w) {
  Queue *q = w->q;
  FloeKernelContext *ctx = w->ctx;
  /* true: the callback will never run, so its reference is ours to drop */
  if (w->token > 0 && floe__kernel_ctx_cancel_deregister(ctx, w->token)) waiter_unref(w);
  if (w->st.code == FLOE_OK && w->op != OP_ENQUEUE) {
    FloeStatus st = {FLOE_OK, NULL};
    if (w->outs) fill_batch(q, w);
    for (int c = 0; c < q->ncomp && st.code == FLOE_OK; c++) {
      FloeTensor *t = w->outs ? w->outs[c] : w->taken[c];
      if (w->outs) w->outs[c] = NULL;
      else w->taken[c] = NULL;
      t = to_kernel_device(ctx, t, &st);
      floe_tensor_release(ctx->outputs[c]);
      ctx->outputs[c] = t;
    }
    if (st.code != FLOE_OK) {
      floe__status_copy(&w->st, &st);
      floe_status_clear(&st);
    }
  }
  if (w->st.code != FLOE_OK)
    floe_status_set(ctx->status, w->st.code, "%s", floe_status_message(&w->st));
  w->done(w->done_arg); /* ctx is not ours after this */
  waiter_unref(w);
}

static void waiter_finish_list(Waiter *list) {
  while (list) {
    Waiter *next = list->done_next;
    waiter_finish(list);
    list = next;
  }
}

static void finish_task(void *arg) { waiter_finish_list(arg); }

/* Completions found inside a cancel callback run on the pool (see the top of the file);
 * without a pool, or when it refuses the task, here. */
static void finish_deferred(Queue *q, Waiter *list) {
  if (!list) return;
  if (q->pool && floe__pool_schedule(q->pool, finish_task, list) == FLOE_OK) return;
  waiter_finish_list(list);
}

/* The step of w's kernel was cancelled (a node failed, a timeout, session close). */
static void cancel_cb(void *arg) {
  Waiter *w = arg;
  Queue *q = w->q;
  Waiter *done = NULL;
  pthread_mutex_lock(&q->mu);
  bool mine = w->pending;
  if (mine) {
    list_remove(q, w);
    w->pending = false;
    w->token = 0; /* taken by this cancel: nothing to deregister */
    fail_waiter(w, FLOE_CANCELLED, "queue '%s': the step was cancelled while this %s waited",
                qname(q), w->op == OP_ENQUEUE ? "enqueue" : "dequeue");
    process(q, &done); /* w may have held others up */
  }
  pthread_mutex_unlock(&q->mu);
  if (mine) waiter_finish(w);
  finish_deferred(q, done);
  waiter_unref(w); /* the callback's reference */
}

/* Runs w: served at once, or left pending with a cancel callback. Consumes w. */
static void start(Waiter *w) {
  Queue *q = w->q;
  Waiter *done = NULL;
  bool failed = true; /* failed here, so not on `done` (process claims what it serves) */
  pthread_mutex_lock(&q->mu);
  if (q->shutdown) {
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' was shut down (its session closed or its "
                "container was reset)", qname(q));
  } else if (w->op == OP_ENQUEUE && q->closed) {
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' is closed: no more enqueues", qname(q));
  } else {
    failed = false;
    list_append(q, w);
    w->pending = true;
    process(q, &done);
    int64_t token = w->pending ? floe__kernel_ctx_on_cancel(w->ctx, cancel_cb, w) : 0;
    if (token < 0) {
      list_remove(q, w);
      w->pending = false;
      failed = true;
      fail_waiter(w, FLOE_CANCELLED, "queue '%s': the step was cancelled", qname(q));
      process(q, &done); /* w may have held others up */
    } else if (token > 0) {
      w->token = token;
      atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed);
    }
  }
  if (failed) {
    w->done_next = done;
    done = w;
  }
  pthread_mutex_unlock(&q->mu);
  waiter_finish_list(done);
}

/* ---- kernels ---- */

/* The queue of ctx's node (container, shared_name or the node's name), made as sp says on
 * first use and checked against it, as output 0: a handle. */
static floe_code queue_handle_out(FloeKernelContext *ctx, FloeResourceMgr *m, const QueueSpec *sp) {
  const FloeNode *n = ctx->node;
  const char *shared = floe__node_attr_str(n, "shared_name");
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *r = floe__resources_find_or_add(m, floe__node_attr_str(n, "container"),
                                                *shared ? shared : n->name, &queue_ops,
                                                queue_make, (void *)sp, &st);
  if (r && check_same((Queue *)r, sp, &st) != FLOE_OK) {
    floe__resource_release(r);
    r = NULL;
  }
  FloeTensor *h = r ? floe__resource_obj_handle(r, &st) : NULL;
  floe__resource_release(r); /* the manager keeps the queue */
  if (!h) return floe__kctx_fail(ctx, &st);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = h;
  return FLOE_OK;
}

/* FIFOQueueV2 & co: the queue (container, shared_name or the node's name), made on first
 * use, as a handle. */
static floe_code queue_handle_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeNode *n = ctx->node;
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  if (!m)
    return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                           "queues live in a session's resource manager, and this step has "
                           "none");
  const FloeAttrValue *types = floe__node_attr(n, "component_types", FLOE_ATTR_TYPE_LIST);
  const FloeAttrValue *shapes = floe__node_attr(n, "shapes", FLOE_ATTR_SHAPE_LIST);
  if (!types || types->u.tlist.n == 0)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "no component_types");
  const char *op = n->op->name;
  QueueSpec sp = {
      .kind = strcmp(op, "PaddingFIFOQueueV2") == 0     ? Q_PADDING
              : strcmp(op, "RandomShuffleQueueV2") == 0 ? Q_SHUFFLE
                                                        : Q_FIFO,
      .dtypes = types->u.tlist.v,
      .shapes = shapes && shapes->u.slist.n ? shapes->u.slist.v : NULL,
      .ncomp = (int)types->u.tlist.n,
      .capacity = floe__node_attr_int(n, "capacity", -1),
      .min_after = floe__node_attr_int(n, "min_after_dequeue", 0),
      .seed = floe__node_attr_int(n, "seed", 0),
      .pool = ctx->device ? ctx->device->rt->pool : NULL,
  };
  return queue_handle_out(ctx, m, &sp);
}

/* SyncTokenQueue: an unbounded FIFO queue of i64 scalars (its input, the global step, only
 * places it). */
static floe_code token_queue_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  if (!m)
    return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                           "queues live in a session's resource manager, and this step has "
                           "none");
  static const FloeDType i64[1] = {FLOE_I64};
  FloeShape scalar = floe_shape_scalar();
  QueueSpec sp = {.kind = Q_FIFO, .dtypes = i64, .shapes = &scalar, .ncomp = 1, .capacity = -1,
                  .pool = ctx->device ? ctx->device->rt->pool : NULL};
  return queue_handle_out(ctx, m, &sp);
}

/* The queue behind input 0, as a new reference; NULL with ctx's error set. */
static Queue *input_queue(FloeKernelContext *ctx) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *r = floe__resources_from_handle(floe__kernel_ctx_resources(ctx), ctx->inputs[0],
                                                &queue_ops, "input 0 (the queue handle)", &st);
  if (!r) floe__kctx_fail(ctx, &st);
  return (Queue *)r;
}

static bool shape_fits(const FloeShape *want, int rank, const int64_t *dims) {
  if (want->rank < 0) return true;
  if (want->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (want->dims[i] >= 0 && want->dims[i] != dims[i]) return false;
  return true;
}

/* Checks the components against q; many: each is [n, element...]. Sets *n. */
static floe_code check_components(Queue *q, FloeKernelContext *ctx, bool many, int64_t *n) {
  int nc = ctx->num_inputs - 1;
  if (nc != q->ncomp)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "queue '%s' has %d component%s; got %d", qname(q), q->ncomp,
                           q->ncomp == 1 ? "" : "s", nc);
  *n = 1;
  for (int c = 0; c < nc; c++) {
    const FloeTensor *t = ctx->inputs[1 + c];
    char a[160], b[160];
    if (t->dtype != q->dtypes[c])
      return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                             "queue '%s': component %d is %s, expected %s", qname(q), c,
                             floe_dtype_name(t->dtype), floe_dtype_name(q->dtypes[c]));
    FloeShape got = floe_tensor_shape(t);
    if (many) {
      if (t->rank == 0)
        return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                               "queue '%s': component %d is a scalar; enqueue_many takes [n, "
                               "...] components", qname(q), c);
      if (c > 0 && t->dims[0] != *n)
        return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                               "queue '%s': component %d has %" PRId64 " elements (shape %s), "
                               "component 0 has %" PRId64, qname(q), c, t->dims[0],
                               floe_shape_str(&got, a, sizeof a), *n);
      *n = t->dims[0];
    }
    const int64_t *dims = many ? t->dims + 1 : t->dims;
    int rank = many ? t->rank - 1 : t->rank;
    if (q->shapes && !shape_fits(&q->shapes[c], rank, dims)) {
      FloeShape e = floe_shape_make(rank, dims);
      return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                             "queue '%s': component %d has %sshape %s, expected %s", qname(q), c,
                             many ? "element " : "", floe_shape_str(&e, a, sizeof a),
                             floe_shape_str(&q->shapes[c], b, sizeof b));
    }
  }
  return FLOE_OK;
}

/* The n elements of the inputs, as host tensors (views of enqueue_many's rows). */
static floe_code build_elements(Queue *q, FloeKernelContext *ctx, bool many, int64_t n,
                                Waiter *w) {
  FloeStatus st = {FLOE_OK, NULL};
  w->n = n;
  if (n == 0) return FLOE_OK;
  w->elems = floe__calloc((size_t)n * (size_t)q->ncomp, sizeof *w->elems);
  if (!w->elems)
    return floe_status_set(ctx->status, FLOE_NO_MEMORY, "queue '%s': out of memory for %" PRId64
                           " elements", qname(q), n);
  for (int c = 0; c < q->ncomp; c++) {
    FloeTensor *t = floe__tensor_to_device(ctx->inputs[1 + c], NULL, &st);
    if (!t) goto err;
    if (!many) {
      w->elems[c] = t;
      continue;
    }
    size_t row = t->dims[0] ? t->nbytes / (size_t)t->dims[0] : 0;
    for (int64_t i = 0; i < n; i++) {
      w->elems[i * q->ncomp + c] =
          floe__tensor_slice_view(t, (int64_t)row * i, t->rank - 1, t->dims + 1, &st);
      if (!w->elems[i * q->ncomp + c]) {
        floe_tensor_release(t);
        goto err;
      }
    }
    floe_tensor_release(t);
  }
  return FLOE_OK;

err:
  floe__status_prefix(&st, "queue '%s'", qname(q));
  return floe__kctx_fail(ctx, &st);
}

static void enqueue_common(FloeKernelContext *ctx, FloeDoneFn done, void *done_arg, bool many) {
  Queue *q = input_queue(ctx);
  if (!q) {
    done(done_arg);
    return;
  }
  int64_t n;
  Waiter *w = NULL;
  if (check_components(q, ctx, many, &n) != FLOE_OK) goto err;
  w = waiter_new(q, OP_ENQUEUE, ctx, done, done_arg);
  if (!w) {
    floe_status_set(ctx->status, FLOE_NO_MEMORY, "queue '%s': out of memory", qname(q));
    goto err;
  }
  q = NULL; /* w holds the reference */
  if (build_elements(w->q, ctx, many, n, w) != FLOE_OK) goto err;
  start(w);
  return;

err:
  if (w) waiter_unref(w);
  floe__resource_release(q ? &q->res : NULL);
  done(done_arg);
}

static void enqueue_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *arg) {
  (void)state;
  enqueue_common(ctx, done, arg, false);
}

static void enqueue_many_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *arg) {
  (void)state;
  enqueue_common(ctx, done, arg, true);
}

/* n of a batch dequeue: an i32 scalar >= 0 that the queue can ever hold. */
static floe_code dequeue_count(Queue *q, FloeKernelContext *ctx, int64_t *n) {
  const FloeTensor *t = ctx->inputs[1];
  if (t->dtype != FLOE_I32 || t->num_elements != 1 || !floe__tensor_on_host(t))
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "n must be an i32 scalar in host memory");
  *n = *(const int32_t *)floe_tensor_data(t);
  if (*n < 0)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "queue '%s': n = %" PRId64 "; dequeue 0 or more elements", qname(q), *n);
  if (!q->shapes)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "queue '%s' was made without shapes, so its elements may differ: "
                           "a batch dequeue needs one shape per component (give shapes to "
                           "the queue)", qname(q));
  /* A batch is taken at once, never gathered across waits: more than the queue can hold
   * (with min_after_dequeue held back) would wait forever on an open queue. */
  if (q->capacity != INT64_MAX && *n > q->capacity - q->min_after)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "queue '%s': a dequeue of %" PRId64 " could never complete: the "
                           "capacity is %" PRId64 "%s",
                           qname(q), *n, q->capacity,
                           q->min_after ? " and min_after_dequeue keeps some back" : "");
  return FLOE_OK;
}

static void dequeue_common(FloeKernelContext *ctx, FloeDoneFn done, void *done_arg, OpKind op) {
  Queue *q = input_queue(ctx);
  if (!q) {
    done(done_arg);
    return;
  }
  int64_t n = 1;
  if (ctx->num_outputs != q->ncomp) {
    floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                    "queue '%s' has %d components; this node has %d outputs", qname(q),
                    q->ncomp, ctx->num_outputs);
    goto err;
  }
  for (int c = 0; c < q->ncomp; c++) {
    if (ctx->node->out_dtypes[c] == q->dtypes[c]) continue;
    floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                    "queue '%s': component %d is %s, this node's component_types say %s",
                    qname(q), c, floe_dtype_name(q->dtypes[c]),
                    floe_dtype_name(ctx->node->out_dtypes[c]));
    goto err;
  }
  if (op != OP_DEQUEUE && dequeue_count(q, ctx, &n) != FLOE_OK) goto err;
  Waiter *w = waiter_new(q, op, ctx, done, done_arg);
  if (!w) {
    floe_status_set(ctx->status, FLOE_NO_MEMORY, "queue '%s': out of memory", qname(q));
    goto err;
  }
  w->want = n;
  start(w);
  return;

err:
  floe__resource_release(&q->res);
  done(done_arg);
}

static void dequeue_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *arg) {
  (void)state;
  dequeue_common(ctx, done, arg, OP_DEQUEUE);
}

static void dequeue_many_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *arg) {
  (void)state;
  dequeue_common(ctx, done, arg, OP_DEQUEUE_MANY);
}

static void dequeue_up_to_async(void *state, FloeKernelContext *ctx, FloeDoneFn done,
                                void *arg) {
  (void)state;
  dequeue_common(ctx, done, arg, OP_DEQUEUE_UP_TO);
}

static floe_code close_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  Queue *q = input_queue(ctx);
  if (!q) return ctx->status->code;
  const FloeAttrValue *cancel = floe__node_attr(ctx->node, "cancel_pending_enqueues", FLOE_ATTR_BOOL);
  Waiter *done = NULL;
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  while (cancel && cancel->u.b && q->enq_head) {
    Waiter *w = q->enq_head;
    fail_waiter(w, FLOE_CANCELLED, "queue '%s' was closed with cancel_pending_enqueues while "
                "this enqueue waited for room (%" PRId64 " of its %" PRId64 " elements went in)",
                qname(q), w->nin, w->n);
    claim(q, w, &done);
  }
  process(q, &done); /* dequeues that can no longer complete fail now */
  pthread_mutex_unlock(&q->mu);
  waiter_finish_list(done);
  floe__resource_release(&q->res);
  return FLOE_OK;
}

/* QueueSizeV2 (i32) and QueueIsClosedV2 (bool). */
static floe_code query_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  Queue *q = input_queue(ctx);
  if (!q) return ctx->status->code;
  bool size = strcmp(ctx->node->op->name, "QueueSizeV2") == 0;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__tensor_alloc(NULL, size ? FLOE_I32 : FLOE_BOOL, 0, NULL, &st);
  if (t) {
    pthread_mutex_lock(&q->mu);
    int64_t count = q->count;
    bool closed = q->closed;
    pthread_mutex_unlock(&q->mu);
    if (size)
      *(int32_t *)floe_tensor_data(t) = count > INT32_MAX ? INT32_MAX : (int32_t)count;
    else
      *(uint8_t *)floe_tensor_data(t) = closed;
    t = to_kernel_device(ctx, t, &st);
  }
  floe__resource_release(&q->res);
  if (!t) return floe__kctx_fail(ctx, &st);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = t;
  return FLOE_OK;
}

floe_code floe__queue_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
    void (*compute_async)(void *, FloeKernelContext *, FloeDoneFn, void *);
  } kernels[] = {
      {"FIFOQueueV2", queue_handle_compute, NULL},
      {"PaddingFIFOQueueV2", queue_handle_compute, NULL},
      {"RandomShuffleQueueV2", queue_handle_compute, NULL},
      {"QueueEnqueueV2", NULL, enqueue_async},
      {"QueueEnqueueManyV2", NULL, enqueue_many_async},
      {"QueueDequeueV2", NULL, dequeue_async},
      {"QueueDequeueManyV2", NULL, dequeue_many_async},
      {"QueueDequeueUpToV2", NULL, dequeue_up_to_async},
      {"QueueCloseV2", close_compute, NULL},
      {"QueueSizeV2", query_compute, NULL},
      {"QueueIsClosedV2", query_compute, NULL},
      {"SyncTokenQueue", token_queue_compute, NULL},
  };
  /* Handles, not variable values, for every resource input; a queue holds host tensors, so
   * its ops run on host-memory devices; only the handle, size and close ops are cheap
   * enough to run inline. */
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kernels); i++) {
    uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | FLOE__KERNEL_HOST_ONLY;
    floe_code rc;
    if (kernels[i].compute)
      rc = floe__core_kernel_add(rt, kernels[i].op, flags | FLOE_KERNEL_INEXPENSIVE,
                                 kernels[i].compute, st);
    else
      rc = floe__core_kernel_add_async(rt, kernels[i].op, flags, kernels[i].compute_async, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

