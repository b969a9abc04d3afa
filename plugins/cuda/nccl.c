/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.c - the "nccl" collective backend of the CUDA plugin (floe_plugin.h,
 * FloeCollectiveFns): all-reduce, all-gather, reduce-scatter and broadcast of CUDA device
 * buffers through NVIDIA's NCCL, for the collective graph ops placed on CUDA devices with
 * communication_hint "nccl" (or FLOE_COLLECTIVE=nccl). The core hands a backend of device
 * type "CUDA" the device's own buffers (core/exec/collective_kernels.c).
 *
 * Loading. libnccl.so.2 is opened when the plugin loads (dlopen), not linked: a machine
 * with the CUDA libraries but without NCCL still gets the CUDA plugin, without this
 * backend (a node asking for "nccl" then hears that it is not loaded).
 *
 * Devices. A rank's device is found from its name in the group ("...device:CUDA:<n>"), among
 * the live devices of the process (cuda_device_find). Several runtimes of one process that
 * each hold the same GPU have one compute stream each, and an operation must be ordered on
 * the one its buffers were made on: the backend refuses that case with a message.
 *
 * Order. NCCL needs every rank to issue a communicator's operations in one order; Floe's
 * contract lets ranks issue them in any order, matched by tag. Rank 0 decides: its
 * sequencer thread issues the operations in the order they were submitted to it and
 * publishes their tags and arguments in the group's store, a batch per key
 * ("nccl/order/<k>"); the other ranks' sequencers read the batches in turn and issue the
 * same operations in that order, each as soon as it was submitted there. An operation
 * whose arguments differ from rank 0's fails with both named (NCCL would hang on it, or
 * read past a buffer), and so does one that never comes within the group's timeout.
 *
 * Completion. Operations go on the device's compute stream (cuda.h: every kernel of the
 * device is ordered on it), so inputs made by kernels enqueued before are ready, and
 * kernels enqueued after see the results. An event recorded after each operation is polled
 * by a watcher thread, which runs done once it completed. The watcher also polls
 * ncclCommGetAsyncError: when NCCL reports an error, or an operation passes the group's
 * timeout (a rank died, hangs or never issued it), or comm_abort is called, the
 * communicator is aborted (ncclCommAbort) and every pending and later operation fails
 * with the reason; a new group_key forms the group again.
 *
 * Threads: a comm has its sequencer and its watcher; NCCL calls on the communicator are
 * made under nc_mu (ncclCommAbort comes from the watcher, enqueues from the sequencer). */
#include "config.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* nccl.h declares a few functions as f() */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "cuda.h"

/* The entry points used, resolved from libnccl.so.2. */
typedef struct NcclApi {
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  const char *(*GetErrorString)(ncclResult_t);
  const char *(*GetLastError)(ncclComm_t);
  int version;
} NcclApi;

static NcclApi api;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_nccl(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_error, sizeof load_error, "libnccl.so.2 not found: %s", dlerror());
    return;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"ncclGetVersion", (void **)&api.GetVersion},
      {"ncclGetUniqueId", (void **)&api.GetUniqueId},
      {"ncclCommInitRankConfig", (void **)&api.CommInitRankConfig},
      {"ncclCommGetAsyncError", (void **)&api.CommGetAsyncError},
      {"ncclCommFinalize", (void **)&api.CommFinalize},
      {"ncclCommDestroy", (void **)&api.CommDestroy},
      {"ncclCommAbort", (void **)&api.CommAbort},
      {"ncclAllReduce", (void **)&api.AllReduce},
      {"ncclAllGather", (void **)&api.AllGather},
      {"ncclReduceScatter", (void **)&api.ReduceScatter},
      {"ncclBroadcast", (void **)&api.Broadcast},
      {"ncclGetErrorString", (void **)&api.GetErrorString},
      {"ncclGetLastError", (void **)&api.GetLastError},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
      snprintf(load_error, sizeof load_error, "libnccl.so.2 lacks %s (NCCL 2.14 or newer is "
               "needed)", syms[i].name);
      memset(&api, 0, sizeof api);
      dlclose(h);
      return;
    }
  }
  if (api.GetVersion(&api.version) != ncclSuccess || api.version < 21400) {
    snprintf(load_error, sizeof load_error, "libnccl.so.2 is version %d: 2.14 or newer is "
             "needed (non-blocking communicators)", api.version);
    memset(&api, 0, sizeof api);
    dlclose(h);
  }
  /* The library stays loaded for the life of the process (comms may outlive a runtime's
   * plugin table only until comm_free, but NCCL's own threads must never lose their code). */
}

/* ------------------------------------------------------------------------------------ */

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_BROADCAST } Kind;
static const char *const kind_names[] = {"all-reduce", "all-gather", "reduce-scatter",
                                         "broadcast"};

/* What every rank must agree on: a record of an order batch (fixed layout, little endian on
 * every machine NCCL runs on). */
typedef struct OpArgs {
  uint64_t tag;
  uint64_t count;
  int32_t kind, dtype, op, root;
} OpArgs;
_Static_assert(sizeof(OpArgs) == 32, "OpArgs is a wire record");

/* At most this many operations in one order batch (the store takes values up to 64 KiB). */
#define BATCH_MAX 1024

typedef struct NcOp {
  OpArgs a;
  const void *in;
  void *out;
  FloeCollectiveDoneFn done;
  void *done_arg;
  cudaEvent_t ev;
  int64_t since_ms;   /* submitted (sequencer) or issued (watcher): for the timeout */
  uint64_t batch;     /* the order batch it was issued in */
  struct NcOp *next;
} NcOp;

typedef struct NcComm {
  CudaDevice *dev;
  ncclComm_t nc;
  FloeCollectiveStore store;
  char name[160];
  int rank, size;
  int64_t timeout_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv;          /* CLOCK_MONOTONIC */
  NcOp *submitted, **submitted_tail; /* accepted, not yet issued, in submission order */
  NcOp *inflight, **inflight_tail;   /* issued, in stream order */
  int pending;                /* accepted operations whose done has not run */
  bool stopping;
  floe_code err;              /* FLOE_OK until the comm broke */
  char errmsg[640];
  pthread_mutex_t nc_mu;      /* NCCL calls on nc */
  bool nc_aborted;            /* under nc_mu */
  uint64_t next_batch;        /* sequencer's */
  uint64_t completed;         /* rank 0: 1 + the newest batch an operation of which ended */
  uint64_t erased;            /* rank 0's sequencer: batches below it are out of the store */
  pthread_t seq, watch;
} NcComm;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void timed_wait(NcComm *c, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* The code's text, from the SDK's table (the core's floe_code_name is not for plugins). */
static const char *code_text(floe_code c) {
  switch (c) {
#define NC_CODE_CASE(name, value, text) \
  case FLOE_##name: return text;
    FLOE_CODE_MAP(NC_CODE_CASE)
#undef NC_CODE_CASE
  default: return "unknown code";
  }
}

static bool map_dtype(FloeDType dt, ncclDataType_t *out) {
  switch (dt) {
  case FLOE_F32: *out = ncclFloat32; return true;
  case FLOE_F64: *out = ncclFloat64; return true;
  case FLOE_F16: *out = ncclFloat16; return true;
  case FLOE_BF16: *out = ncclBfloat16; return true;
  case FLOE_I8: *out = ncclInt8; return true;
  case FLOE_U8: *out = ncclUint8; return true;
  case FLOE_I32: *out = ncclInt32; return true;
  case FLOE_I64: *out = ncclInt64; return true;
  default: return false;
  }
}

static bool map_op(FloeReduceOp op, ncclRedOp_t *out) {
  switch (op) {
  case FLOE_REDUCE_SUM: *out = ncclSum; return true;
  case FLOE_REDUCE_MEAN: *out = ncclAvg; return true; /* integers: sum, then divided */
  case FLOE_REDUCE_MAX: *out = ncclMax; return true;
  case FLOE_REDUCE_MIN: *out = ncclMin; return true;
  case FLOE_REDUCE_PROD: *out = ncclProd; return true;
  default: return false;
  }
}

static const char *op_text(const OpArgs *a, char *buf, size_t len) {
  int w = snprintf(buf, len, "%s of %" PRIu64 " %s values", kind_names[a->kind], a->count,
                   cu_host->dtype_name((FloeDType)a->dtype));
  if (w > 0 && (size_t)w < len && (a->kind == K_ALL_REDUCE || a->kind == K_REDUCE_SCATTER))
    w += snprintf(buf + w, len - (size_t)w, " (op %d)", a->op);
  if (w > 0 && (size_t)w < len && a->kind == K_BROADCAST)
    snprintf(buf + w, len - (size_t)w, " from rank %d", a->root);
  return buf;
}

/* Marks the comm broken (the first reason stays). Caller holds mu. */
static void break_locked(NcComm *c, floe_code code, const char *fmt, ...) {
  if (c->err != FLOE_OK) return;
  c->err = code;
  int w = snprintf(c->errmsg, sizeof c->errmsg, "%s (rank %d of %d, nccl): ", c->name, c->rank,
                   c->size);
  va_list ap;
  va_start(ap, fmt);
  if (w > 0 && (size_t)w < sizeof c->errmsg)
    vsnprintf(c->errmsg + w, sizeof c->errmsg - (size_t)w, fmt, ap);
  va_end(ap);
  pthread_cond_broadcast(&c->cv);
}

/* Runs op's done (no lock held) and forgets it. */
static void complete(NcComm *c, NcOp *op, floe_code code, const char *msg) {
  op->done(op->done_arg, code, code == FLOE_OK ? NULL : msg);
  if (op->ev) cudaEventDestroy(op->ev);
  free(op);
  pthread_mutex_lock(&c->mu);
  if (--c->pending == 0) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Fails every operation of list (taken off the comm by the caller) with the comm's error. */
static void fail_list(NcComm *c, NcOp *list) {
  char msg[sizeof c->errmsg];
  pthread_mutex_lock(&c->mu);
  floe_code code = c->err;
  memcpy(msg, c->errmsg, sizeof msg);
  pthread_mutex_unlock(&c->mu);
  while (list) {
    NcOp *next = list->next;
    complete(c, list, code, msg);
    list = next;
  }
}

/* After a call that returned ncclInProgress (a non-blocking communicator): waits until NCCL
 * finished it, the comm broke, or the deadline. Caller holds nc_mu. */
static ncclResult_t settle(NcComm *c, ncclResult_t r, int64_t deadline) {
  long pause = 2;
  while (r == ncclInProgress) {
    pthread_mutex_lock(&c->mu);
    bool broken = c->err != FLOE_OK;
    pthread_mutex_unlock(&c->mu);
    if (broken || now_ms() > deadline) return ncclInProgress;
    sleep_us(pause);
    if (pause < 1000) pause *= 2;
    if (api.CommGetAsyncError(c->nc, &r) != ncclSuccess) return ncclSystemError;
  }
  return r;
}

/* Enqueues op on the device's compute stream and hands it to the watcher; failures break
 * the comm (the other ranks issued it: they could not go on) and complete op. */
static void issue(NcComm *c, NcOp *op) {
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t rop = ncclSum;
  map_dtype((FloeDType)op->a.dtype, &dt);
  if (op->a.kind == K_ALL_REDUCE || op->a.kind == K_REDUCE_SCATTER)
    map_op((FloeReduceOp)op->a.op, &rop);
  cudaStream_t s = c->dev->compute;
  size_t n = (size_t)op->a.count;
  pthread_mutex_lock(&c->nc_mu);
  ncclResult_t r = ncclInvalidUsage;
  cudaError_t ce = cudaSuccess;
  bool aborted = c->nc_aborted;
  if (!aborted) {
    switch (op->a.kind) {
    case K_ALL_REDUCE: r = api.AllReduce(op->in, op->out, n, dt, rop, c->nc, s); break;
    case K_ALL_GATHER: r = api.AllGather(op->in, op->out, n, dt, c->nc, s); break;
    case K_REDUCE_SCATTER: r = api.ReduceScatter(op->in, op->out, n, dt, rop, c->nc, s); break;
    default: r = api.Broadcast(op->out, op->out, n, dt, op->a.root, c->nc, s); break;
    }
    r = settle(c, r, now_ms() + c->timeout_ms);
    if (r == ncclSuccess) ce = cudaEventCreateWithFlags(&op->ev, cudaEventDisableTiming);
    if (r == ncclSuccess && ce == cudaSuccess) ce = cudaEventRecord(op->ev, s);
  }
  const char *last = !aborted && r != ncclSuccess ? api.GetLastError(c->nc) : "";
  pthread_mutex_unlock(&c->nc_mu);
  char what[160];
  pthread_mutex_lock(&c->mu);
  if (aborted || r != ncclSuccess || ce != cudaSuccess) {
    if (ce != cudaSuccess) {
      (void)cudaGetLastError();
      break_locked(c, FLOE_INTERNAL, "recording the completion of the %s: %s",
                   op_text(&op->a, what, sizeof what), cudaGetErrorString(ce));
    } else if (r == ncclInProgress) {
      break_locked(c, FLOE_DEADLINE_EXCEEDED, "NCCL did not accept the %s within %" PRId64
                   " ms", op_text(&op->a, what, sizeof what), c->timeout_ms);
    } else if (!aborted) {
      break_locked(c, FLOE_INTERNAL, "NCCL refused the %s: %s%s%s",
                   op_text(&op->a, what, sizeof what), api.GetErrorString(r),
                   last && *last ? ": " : "", last ? last : "");
    }
    pthread_mutex_unlock(&c->mu);
    op->next = NULL;
    fail_list(c, op);
    return;
  }
  op->since_ms = now_ms();
  op->next = NULL;
  *c->inflight_tail = op;
  c->inflight_tail = &op->next;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Takes the whole submitted list (caller holds mu). */
static NcOp *take_submitted(NcComm *c, int max) {
  NcOp *head = c->submitted, **end = &c->submitted;
  for (int i = 0; *end && i < max; i++) end = &(*end)->next;
  c->submitted = *end;
  if (!c->submitted) c->submitted_tail = &c->submitted;
  *end = NULL;
  return head;
}

/* Rank 0: the batches every rank has read go from the store (which holds a bounded number of
 * keys). An operation of batch b ended here only once every rank issued it, and a rank
 * reads a batch before it issues any of its operations: batches up to b were read by all. */
static void erase_read_batches(NcComm *c) {
  if (c->size == 1 || !FLOE_HAS_FIELD(&c->store, FloeCollectiveStore, erase) || !c->store.erase)
    return;
  pthread_mutex_lock(&c->mu);
  uint64_t upto = c->completed;
  pthread_mutex_unlock(&c->mu);
  for (; c->erased < upto; c->erased++) {
    char key[48];
    snprintf(key, sizeof key, "nccl/order/%" PRIu64, c->erased);
    c->store.erase(c->store.arg, key);
  }
}

/* Rank 0: issues what was submitted, in that order, after publishing the order. */
static void sequence_root(NcComm *c) {
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->submitted && !c->stopping && c->err == FLOE_OK) pthread_cond_wait(&c->cv, &c->mu);
    if (c->err != FLOE_OK) {
      NcOp *l = take_submitted(c, INT32_MAX);
      pthread_mutex_unlock(&c->mu);
      fail_list(c, l);
      pthread_mutex_lock(&c->mu);
      if (c->stopping) break;
      if (!c->submitted) timed_wait(c, 100);
      continue;
    }
    if (!c->submitted) break; /* stopping */
    NcOp *batch = take_submitted(c, BATCH_MAX);
    uint64_t k = c->next_batch++;
    pthread_mutex_unlock(&c->mu);
    floe_code rc = FLOE_OK;
    if (c->size > 1) {
      OpArgs recs[BATCH_MAX];
      size_t n = 0;
      for (NcOp *o = batch; o; o = o->next) recs[n++] = o->a;
      char key[48];
      snprintf(key, sizeof key, "nccl/order/%" PRIu64, k);
      rc = c->store.set(c->store.arg, key, recs, n * sizeof *recs);
    }
    if (rc != FLOE_OK) {
      pthread_mutex_lock(&c->mu);
      break_locked(c, rc, "could not publish the order of operations in the group's store (%s)",
                   code_text(rc));
      pthread_mutex_unlock(&c->mu);
      fail_list(c, batch);
    } else {
      while (batch) {
        NcOp *next = batch->next;
        batch->batch = k;
        issue(c, batch);
        batch = next;
      }
    }
    erase_read_batches(c);
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
}

/* Other ranks: find the submitted operation rank 0 issued as rec, waiting for it up to the
 * group's timeout; NULL (the comm broken, with why) when it does not come. Caller holds mu. */
static NcOp *await_tag(NcComm *c, const OpArgs *rec) {
  int64_t deadline = now_ms() + c->timeout_ms;
  for (;;) {
    if (c->err != FLOE_OK || c->stopping) return NULL;
    for (NcOp **p = &c->submitted; *p; p = &(*p)->next) {
      if ((*p)->a.tag != rec->tag) continue;
      NcOp *o = *p;
      *p = o->next;
      if (c->submitted_tail == &o->next) c->submitted_tail = p;
      o->next = NULL;
      return o;
    }
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      char what[160];
      break_locked(c, FLOE_DEADLINE_EXCEEDED, "rank 0 issued the %s under tag %016" PRIx64
                   " and this rank did not within %" PRId64 " ms: every rank must run the same "
                   "collective operations", op_text(rec, what, sizeof what), rec->tag,
                   c->timeout_ms);
      return NULL;
    }
    timed_wait(c, left < 200 ? left : 200);
  }
}

static void sequence_member(NcComm *c) {
  for (;;) {
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
      pthread_mutex_unlock(&c->mu);
      return;
    }
    if (c->err != FLOE_OK) {
      NcOp *l = take_submitted(c, INT32_MAX);
      pthread_mutex_unlock(&c->mu);
      fail_list(c, l);
      pthread_mutex_lock(&c->mu);
      if (!c->submitted && !c->stopping) timed_wait(c, 100);
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    /* An operation waiting here longer than the timeout: rank 0 never issued it. */
    NcOp *old = c->submitted;
    if (old && now_ms() - old->since_ms > c->timeout_ms) {
      char what[160];
      break_locked(c, FLOE_DEADLINE_EXCEEDED, "rank 0 did not issue the %s (tag %016" PRIx64
                   ") within %" PRId64 " ms: it died, hangs, or runs other operations",
                   op_text(&old->a, what, sizeof what), old->a.tag, c->timeout_ms);
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    uint64_t k = c->next_batch;
    pthread_mutex_unlock(&c->mu);

    char key[48];
    snprintf(key, sizeof key, "nccl/order/%" PRIu64, k);
    void *v = NULL;
    size_t len = 0;
    floe_code rc = c->store.get(c->store.arg, key, 200, &v, &len);
    if (rc == FLOE_DEADLINE_EXCEEDED) continue;
    pthread_mutex_lock(&c->mu);
    if (rc != FLOE_OK || len == 0 || len % sizeof(OpArgs) || len > BATCH_MAX * sizeof(OpArgs)) {
      if (rc != FLOE_OK)
        break_locked(c, rc, "could not read rank 0's order of operations from the group's "
                     "store (%s): the chief or rank 0 is gone", code_text(rc));
      else
        break_locked(c, FLOE_DATA_LOSS, "rank 0's order batch %" PRIu64 " has %zu bytes, not a "
                     "multiple of %zu", k, len, sizeof(OpArgs));
      pthread_mutex_unlock(&c->mu);
      if (v) cu_host->free(v);
      continue;
    }
    c->next_batch++;
    OpArgs recs[BATCH_MAX];
    size_t n = len / sizeof(OpArgs);
    memcpy(recs, v, len);
    cu_host->free(v);
    for (size_t i = 0; i < n; i++) {
      NcOp *o = await_tag(c, &recs[i]);
      if (!o) break;
      if (memcmp(&o->a, &recs[i], sizeof recs[i]) != 0) {
        char mine[160], theirs[160];
        break_locked(c, FLOE_INVALID_ARGUMENT, "under tag %016" PRIx64 " rank 0 issued the %s "
                     "and this rank the %s: every rank must issue the same operation, count, "
                     "dtype, op and root", recs[i].tag, op_text(&recs[i], theirs, sizeof theirs),
                     op_text(&o->a, mine, sizeof mine));
        pthread_mutex_unlock(&c->mu);
        fail_list(c, o);
        pthread_mutex_lock(&c->mu);
        break;
      }
      pthread_mutex_unlock(&c->mu);
      issue(c, o);
      pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
  }
}

static void *seq_main(void *p) {
  NcComm *c = p;
  cudaSetDevice(c->dev->ordinal);
  if (c->rank == 0) sequence_root(c);
  else sequence_member(c);
  return NULL;
}

/* Completes in-flight operations as their events fire; breaks the comm on NCCL's errors
 * and on timeouts, and then aborts the communicator. */
static void *watch_main(void *p) {
  NcComm *c = p;
  cudaSetDevice(c->dev->ordinal);
  long pause = 2;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (c->err != FLOE_OK) {
      pthread_mutex_unlock(&c->mu);
      pthread_mutex_lock(&c->nc_mu);
      if (!c->nc_aborted) {
        api.CommAbort(c->nc); /* ends the queued NCCL kernels: the stream goes on */
        c->nc_aborted = true;
      }
      pthread_mutex_unlock(&c->nc_mu);
      pthread_mutex_lock(&c->mu);
      NcOp *l = c->inflight;
      c->inflight = NULL;
      c->inflight_tail = &c->inflight;
      pthread_mutex_unlock(&c->mu);
      fail_list(c, l);
      pthread_mutex_lock(&c->mu);
      if (c->stopping && !c->inflight) break;
      if (!c->inflight) timed_wait(c, 100);
      continue;
    }
    if (!c->inflight) {
      if (c->stopping) break;
      pthread_cond_wait(&c->cv, &c->mu);
      pause = 2;
      continue;
    }
    NcOp *op = c->inflight;
    pthread_mutex_unlock(&c->mu);
    cudaError_t q = cudaEventQuery(op->ev);
    if (q == cudaSuccess) {
      pthread_mutex_lock(&c->mu);
      c->inflight = op->next;
      if (!c->inflight) c->inflight_tail = &c->inflight;
      if (op->batch + 1 > c->completed) c->completed = op->batch + 1;
      pthread_mutex_unlock(&c->mu);
      complete(c, op, FLOE_OK, NULL);
      pause = 2;
      pthread_mutex_lock(&c->mu);
      continue;
    }
    ncclResult_t ae = ncclSuccess;
    if (q == cudaErrorNotReady) api.CommGetAsyncError(c->nc, &ae);
    pthread_mutex_lock(&c->mu);
    char what[160];
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      break_locked(c, FLOE_INTERNAL, "the device failed while the %s ran: %s",
                   op_text(&op->a, what, sizeof what), cudaGetErrorString(q));
    } else if (ae != ncclSuccess && ae != ncclInProgress) {
      break_locked(c, FLOE_UNAVAILABLE, "NCCL failed during the %s: %s: %s (a rank of the "
                   "group died or its network failed)", op_text(&op->a, what, sizeof what),
                   api.GetErrorString(ae), api.GetLastError(c->nc));
    } else if (now_ms() - op->since_ms > c->timeout_ms) {
      break_locked(c, FLOE_DEADLINE_EXCEEDED, "the %s (tag %016" PRIx64 ") did not finish "
                   "within %" PRId64 " ms: a rank of the group died, hangs, or never issued it",
                   op_text(&op->a, what, sizeof what), op->a.tag, c->timeout_ms);
    } else {
      pthread_mutex_unlock(&c->mu);
      sleep_us(pause);
      if (pause < 500) pause *= 2;
      pthread_mutex_lock(&c->mu);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* The backend's slots. */

static floe_code nc_init(const FloeHostApi *host, void **ctx) {
  (void)host;
  *ctx = &api;
  return FLOE_OK;
}

static void nc_finalize(void *ctx) { (void)ctx; }

/* The CUDA ordinal at the end of a device's full name ("...device:CUDA:1"); -1 if none. */
static int ordinal_of(const char *name) {
  const char *p = strstr(name, "CUDA:");
  if (!p) p = strstr(name, "cuda:");
  if (!p) return -1;
  char *end;
  long v = strtol(p + 5, &end, 10);
  return end != p + 5 && *end == '\0' && v >= 0 && v < 1024 ? (int)v : -1;
}

static void comm_release(NcComm *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->nc_mu);
  free(c);
}

static floe_code nc_comm_init(void *ctx, const FloeCollectiveGroup *g, void **out, char *msg,
                              size_t msg_len) {
  (void)ctx;
  *out = NULL;
  const char *dname = g->devices[g->rank];
  int ord = ordinal_of(dname);
  CudaDevice *dev = NULL;
  int found = ord >= 0 ? cuda_device_find(ord, &dev) : 0;
  if (found != 1) {
    snprintf(msg, msg_len, found == 0 ? "nccl: %s is not a CUDA device of this process"
                                      : "nccl: %s is held by %d runtimes of this process, each "
                                        "with its own stream: nccl needs one runtime per GPU "
                                        "in a process", dname, found);
    return FLOE_INVALID_ARGUMENT;
  }
  NcComm *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(msg, msg_len, "nccl: out of memory");
    return FLOE_NO_MEMORY;
  }
  c->dev = dev;
  /* A core's store may be older (shorter) than this plugin's struct. */
  size_t have = g->store->struct_size < sizeof c->store ? g->store->struct_size : sizeof c->store;
  memcpy(&c->store, g->store, have);
  snprintf(c->name, sizeof c->name, "%s", g->name ? g->name : "a group");
  c->rank = g->rank;
  c->size = g->size;
  c->timeout_ms = g->timeout_ms > 0 ? g->timeout_ms : 300000;
  c->submitted_tail = &c->submitted;
  c->inflight_tail = &c->inflight;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->nc_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);

  /* Rank 0 makes the communicator's id; the others read it from the store. */
  ncclUniqueId id;
  floe_code rc = FLOE_OK;
  if (g->rank == 0) {
    ncclResult_t r = api.GetUniqueId(&id);
    if (r != ncclSuccess) {
      snprintf(msg, msg_len, "nccl: ncclGetUniqueId: %s", api.GetErrorString(r));
      rc = FLOE_UNAVAILABLE;
    } else if (g->size > 1 && (rc = c->store.set(c->store.arg, "nccl/id", &id, sizeof id)) !=
                                   FLOE_OK) {
      snprintf(msg, msg_len, "nccl: could not publish the communicator's id in the store (%s)",
               code_text(rc));
    }
  } else {
    void *v = NULL;
    size_t len = 0;
    rc = c->store.get(c->store.arg, "nccl/id", c->timeout_ms, &v, &len);
    if (rc == FLOE_OK && len != sizeof id) {
      snprintf(msg, msg_len, "nccl: rank 0's communicator id has %zu bytes, not %zu (another "
               "NCCL version?)", len, sizeof id);
      rc = FLOE_DATA_LOSS;
    } else if (rc != FLOE_OK) {
      snprintf(msg, msg_len, "nccl: rank 0 published no communicator id within %" PRId64
               " ms (%s)", c->timeout_ms, code_text(rc));
    } else {
      memcpy(&id, v, sizeof id);
    }
    if (v) cu_host->free(v);
  }
  if (rc != FLOE_OK) {
    comm_release(c);
    return rc;
  }

  /* A non-blocking communicator, so that a rank that never comes ends in an error. */
  cudaError_t ce = cudaSetDevice(dev->ordinal);
  if (ce != cudaSuccess) {
    snprintf(msg, msg_len, "nccl: cudaSetDevice(%d): %s", dev->ordinal, cudaGetErrorString(ce));
    comm_release(c);
    return FLOE_INTERNAL;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = c->name;
  ncclResult_t r = api.CommInitRankConfig(&c->nc, g->size, id, g->rank, &cfg);
  int64_t deadline = now_ms() + c->timeout_ms;
  long pause = 50;
  while (r == ncclInProgress && now_ms() < deadline) {
    sleep_us(pause);
    if (pause < 5000) pause *= 2;
    if (api.CommGetAsyncError(c->nc, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    if (r == ncclInProgress)
      snprintf(msg, msg_len, "nccl: the communicator of %s did not form within %" PRId64
               " ms: a rank never joined", c->name, c->timeout_ms);
    else
      snprintf(msg, msg_len, "nccl: ncclCommInitRankConfig (rank %d of %d): %s: %s", g->rank,
               g->size, api.GetErrorString(r), c->nc ? api.GetLastError(c->nc) : "");
    if (c->nc) api.CommAbort(c->nc);
    comm_release(c);
    return r == ncclInProgress ? FLOE_DEADLINE_EXCEEDED : FLOE_UNAVAILABLE;
  }
  /* Every rank joined, so every rank has read the id. */
  if (g->rank == 0 && g->size > 1 && FLOE_HAS_FIELD(&c->store, FloeCollectiveStore, erase) &&
      c->store.erase)
    c->store.erase(c->store.arg, "nccl/id");
  if (pthread_create(&c->seq, NULL, seq_main, c) != 0) {
    snprintf(msg, msg_len, "nccl: cannot start the sequencer thread");
    api.CommAbort(c->nc);
    comm_release(c);
    return FLOE_RESOURCE_EXHAUSTED;
  }
  if (pthread_create(&c->watch, NULL, watch_main, c) != 0) {
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->seq, NULL);
    snprintf(msg, msg_len, "nccl: cannot start the watcher thread");
    api.CommAbort(c->nc);
    comm_release(c);
    return FLOE_RESOURCE_EXHAUSTED;
  }
  *out = c;
  return FLOE_OK;
}

static floe_code submit(NcComm *c, Kind kind, const void *in, void *out, size_t count,
                        FloeDType dtype, FloeReduceOp op, int root, uint64_t tag,
                        FloeCollectiveDoneFn done, void *done_arg) {
  ncclDataType_t dt;
  ncclRedOp_t rop;
  if (!map_dtype(dtype, &dt)) return FLOE_INVALID_ARGUMENT;
  if ((kind == K_ALL_REDUCE || kind == K_REDUCE_SCATTER) && !map_op(op, &rop))
    return FLOE_INVALID_ARGUMENT;
  if (kind == K_BROADCAST && (root < 0 || root >= c->size)) return FLOE_INVALID_ARGUMENT;
  NcOp *o = calloc(1, sizeof *o);
  if (!o) return FLOE_NO_MEMORY;
  o->a = (OpArgs){tag, count, kind, dtype,
                  kind == K_ALL_REDUCE || kind == K_REDUCE_SCATTER ? (int32_t)op : -1,
                  kind == K_BROADCAST ? root : -1};
  o->in = in;
  o->out = out;
  o->done = done;
  o->done_arg = done_arg;
  o->since_ms = now_ms();
  pthread_mutex_lock(&c->mu);
  c->pending++;
  if (c->err != FLOE_OK) {
    pthread_mutex_unlock(&c->mu);
    fail_list(c, o);
    return FLOE_OK;
  }
  *c->submitted_tail = o;
  c->submitted_tail = &o->next;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return FLOE_OK;
}

static floe_code nc_all_reduce(void *comm, const void *in, void *out, size_t count,
                               FloeDType dtype, FloeReduceOp op, uint64_t tag, FloeStream *s,
                               FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return submit(comm, K_ALL_REDUCE, in, out, count, dtype, op, -1, tag, done, arg);
}

static floe_code nc_all_gather(void *comm, const void *in, void *out, size_t count,
                               FloeDType dtype, uint64_t tag, FloeStream *s,
                               FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return submit(comm, K_ALL_GATHER, in, out, count, dtype, FLOE_REDUCE_SUM, -1, tag, done, arg);
}

static floe_code nc_reduce_scatter(void *comm, const void *in, void *out, size_t count,
                                   FloeDType dtype, FloeReduceOp op, uint64_t tag, FloeStream *s,
                                   FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return submit(comm, K_REDUCE_SCATTER, in, out, count, dtype, op, -1, tag, done, arg);
}

static floe_code nc_broadcast(void *comm, void *buf, size_t count, FloeDType dtype, int root,
                              uint64_t tag, FloeStream *s, FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  return submit(comm, K_BROADCAST, buf, buf, count, dtype, FLOE_REDUCE_SUM, root, tag, done, arg);
}

static void nc_comm_abort(void *comm) {
  NcComm *c = comm;
  pthread_mutex_lock(&c->mu);
  break_locked(c, FLOE_ABORTED, "the group was aborted (a rank died or the step was cancelled)");
  pthread_mutex_unlock(&c->mu);
}

static void nc_comm_free(void *comm) {
  NcComm *c = comm;
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0) pthread_cond_wait(&c->cv, &c->mu);
  c->stopping = true;
  pthread_cond_broadcast(&c->cv);
  bool healthy = c->err == FLOE_OK;
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->seq, NULL);
  pthread_join(c->watch, NULL);
  if (c->rank == 0) { /* the group is done with every batch */
    c->completed = c->next_batch;
    erase_read_batches(c);
  }
  cudaSetDevice(c->dev->ordinal);
  if (!c->nc_aborted) {
    ncclResult_t r = healthy ? api.CommFinalize(c->nc) : ncclInternalError;
    if (r == ncclInProgress) r = settle(c, r, now_ms() + c->timeout_ms);
    if (r == ncclSuccess) api.CommDestroy(c->nc);
    else api.CommAbort(c->nc);
  }
  comm_release(c);
}

floe_code cu_register_nccl(FloePluginRegistrar *reg) {
  if (!FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_collective) ||
      !reg->register_collective)
    return FLOE_OK; /* a core before ABI 1.5: no collective backends */
  pthread_once(&load_once, load_nccl);
  if (!api.AllReduce) {
    cu_host->log(FLOE_LOG_INFO, "cuda: no nccl collective backend: %s", load_error);
    return FLOE_OK;
  }
  FloeCollectiveFns f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.name = "nccl";
  f.device_type = "CUDA";
  f.dtypes = FLOE_DTYPES_NUMERIC;
  f.init = nc_init;
  f.finalize = nc_finalize;
  f.comm_init = nc_comm_init;
  f.all_reduce = nc_all_reduce;
  f.all_gather = nc_all_gather;
  f.reduce_scatter = nc_reduce_scatter;
  f.broadcast = nc_broadcast;
  f.comm_abort = nc_comm_abort;
  f.comm_free = nc_comm_free;
  return reg->register_collective(reg, &f);
}
