/* SPDX-License-Identifier: Apache-2.0 */
/* collective_kernels.c - the kernels of the collective ops (ops_collective.def): each hands
 * its operation to the runtime's collectives (core/runtime/collective.c) and completes when
 * the backend does, without holding a thread meanwhile. A backend for the memory of the
 * node's device type (nccl for CUDA) gets the device's buffers; for the others (the ring,
 * gloo: host memory) values on a device that does not read host memory go through host
 * memory. A cancelled step aborts the member's group: its pending operations fail at once. */
#include <stdatomic.h>
#include <string.h>

#include "exec.h"

typedef struct KCall {
  FloeKernelContext *ctx;
  FloeDoneFn done;
  void *done_arg;
  FloeTensor *in;         /* host copy or the input itself (a reference) */
  FloeTensor *out;        /* host tensor the backend fills (a reference) */
  FloeCollComm *comm;     /* for the cancel callback */
  int64_t cancel_token;
  pthread_mutex_t mu;     /* comm is set after submit; the cancel callback may come first */
  bool cancelled;
  /* Who finishes the kernel: coll_done (the operation ended) or on_cancel, which does not
   * wait for an operation stuck on a dead peer (its buffers stay referenced by k until the
   * backend lets go of them). Under mu. */
  enum { K_RUNNING, K_FINISHED, K_DETACHED } state;
  atomic_int refs;        /* coll_done's and the submitting call's */
} KCall;

static void kcall_free(KCall *k) {
  if (k->in) floe_tensor_release(k->in);
  if (k->out) floe_tensor_release(k->out);
  floe__coll_comm_release(k->comm);
  pthread_mutex_destroy(&k->mu);
  floe__free(k);
}

static void kcall_release(KCall *k) {
  if (atomic_fetch_sub(&k->refs, 1) == 1) kcall_free(k);
}

static void on_cancel(void *arg) {
  KCall *k = arg;
  /* Aborting the comm may complete the operation on this very thread (coll_done then drops
   * its reference): hold one of our own until we are done with k. */
  atomic_fetch_add(&k->refs, 1);
  pthread_mutex_lock(&k->mu);
  k->cancelled = true;
  bool mine = k->state == K_RUNNING;
  if (mine) k->state = K_DETACHED;
  FloeCollComm *comm = k->comm;
  pthread_mutex_unlock(&k->mu);
  if (mine) {
    floe_status_set(k->ctx->status, FLOE_CANCELLED,
                    "the step was cancelled while the collective operation ran (its group is "
                    "aborted: a new group_key forms it again)");
    k->done(k->done_arg);
  }
  if (comm) floe__coll_comm_abort(comm, "its step was cancelled");
  kcall_release(k);
}

static void coll_done(void *arg, const FloeStatus *st) {
  KCall *k = arg;
  pthread_mutex_lock(&k->mu);
  bool detached = k->state == K_DETACHED;
  k->state = K_FINISHED;
  pthread_mutex_unlock(&k->mu);
  if (detached) { /* the kernel finished at the cancel: only k's references are left */
    kcall_release(k);
    return;
  }
  FloeKernelContext *ctx = k->ctx;
  if (k->cancel_token > 0) floe__kernel_ctx_cancel_deregister(ctx, k->cancel_token);
  if (st->code != FLOE_OK) {
    floe_status_set(ctx->status, st->code, "%s", floe_status_message(st));
  } else {
    FloeStatus cst = {FLOE_OK, NULL};
    FloeTensor *res = floe__tensor_to_device(k->out, ctx->device, &cst);
    if (!res) {
      floe__kctx_fail(ctx, &cst);
    } else {
      floe__kctx_set_output(ctx, 0, res);
    }
  }
  FloeDoneFn done = k->done;
  void *done_arg = k->done_arg;
  if (k->in) floe_tensor_release(k->in);
  if (k->out) floe_tensor_release(k->out);
  k->in = k->out = NULL;
  kcall_release(k);
  done(done_arg);
}

/* The address of t's first element wherever it lives (floe_tensor_data: host only). */
static void *device_data(const FloeTensor *t) {
  return t->buf ? (char *)t->buf->data + t->offset : NULL;
}

static floe_code attr_dims(FloeKernelContext *ctx, const char *op, const FloeTensor *in,
                           int64_t n, int *rank, int64_t *dims) {
  const FloeNode *node = ctx->node;
  if (strcmp(op, "CollectiveBcastRecv") == 0) {
    const FloeAttrValue *s = floe__node_attr(node, "shape", FLOE_ATTR_SHAPE);
    if (!s || s->u.shape.rank < 0)
      return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "shape must be fully defined");
    *rank = s->u.shape.rank;
    for (int i = 0; i < *rank; i++) {
      if (s->u.shape.dims[i] < 0)
        return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                               "shape must be fully defined");
      dims[i] = s->u.shape.dims[i];
    }
    return FLOE_OK;
  }
  *rank = in->rank;
  memcpy(dims, in->dims, sizeof(int64_t) * (size_t)in->rank);
  bool gather = strcmp(op, "CollectiveGather") == 0;
  bool scatter = strcmp(op, "CollectiveReduceScatter") == 0;
  if ((gather || scatter) && in->rank == 0)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "the input is a scalar: %s works on dim 0", op);
  if (gather) dims[0] *= n;
  if (scatter) {
    if (dims[0] % n)
      return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                             "dim 0 of the input (%lld) is not a multiple of group_size %lld",
                             (long long)dims[0], (long long)n);
    dims[0] /= n;
  }
  return FLOE_OK;
}

static void collective_compute(void *state, FloeKernelContext *ctx, FloeDoneFn done,
                               void *done_arg) {
  (void)state;
  const FloeNode *node = ctx->node;
  const char *op = node->op->name;
  FloeStatus st = {FLOE_OK, NULL};
  FloeCollRequest rq;
  memset(&rq, 0, sizeof rq);
  rq.group_size = (int)floe__node_attr_int(node, "group_size", 0);
  rq.group_key = floe__node_attr_int(node, "group_key", 0);
  rq.instance_key = floe__node_attr_int(node, "instance_key", 0);
  rq.timeout_ms = floe__node_attr_int(node, "timeout_ms", 0);
  rq.hint = floe__node_attr_str(node, "communication_hint");
  rq.device = ctx->device->name;
  rq.node = node->name;
  const char *merge = floe__node_attr_str(node, "merge_op");
  if (!*merge) merge = "sum";
  if (!floe__reduce_op_parse(merge, &rq.op)) {
    floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                    "merge_op \"%s\": give sum, mean, max, min or prod", merge);
    done(done_arg);
    return;
  }
  if (strcmp(op, "CollectiveReduce") == 0) rq.kind = FLOE__COLL_ALL_REDUCE;
  else if (strcmp(op, "CollectiveGather") == 0) rq.kind = FLOE__COLL_ALL_GATHER;
  else if (strcmp(op, "CollectiveReduceScatter") == 0) rq.kind = FLOE__COLL_REDUCE_SCATTER;
  else if (strcmp(op, "CollectiveBcastSend") == 0) rq.kind = FLOE__COLL_BCAST_SEND;
  else rq.kind = FLOE__COLL_BCAST_RECV;

  KCall *k = floe__calloc(1, sizeof *k);
  if (!k) {
    floe_status_set(ctx->status, FLOE_NO_MEMORY, "out of memory");
    done(done_arg);
    return;
  }
  pthread_mutex_init(&k->mu, NULL);
  atomic_init(&k->refs, 2);
  k->ctx = ctx;
  k->done = done;
  k->done_arg = done_arg;
  FloeTensor *in = rq.kind == FLOE__COLL_BCAST_RECV ? NULL : ctx->inputs[0];
  FloeDType dt = in ? in->dtype : ctx->node->out_dtypes[0];
  int rank = 0;
  int64_t dims[FLOE_MAX_DIMS] = {0};
  if (attr_dims(ctx, op, in, rq.group_size > 0 ? rq.group_size : 1, &rank, dims) != FLOE_OK)
    goto fail;
  rq.dtype = dt;
  /* A backend for this device's own memory (nccl for CUDA) gets device buffers; the others
   * host buffers, which the device's values reach through copies. */
  bool on_device = false;
  if (floe__collective_memory(ctx->device->rt, &rq, ctx->device, &on_device, &st) != FLOE_OK)
    goto fail_st;
  FloeDevice *mem = on_device ? ctx->device : NULL;
  /* An all-reduce whose input nobody else reads (a gradient computed this step, the buffer
   * fusion's pack) runs in place: no output to allocate, and the backends skip their first
   * copy (Gloo's ring copies an input into a distinct output before it starts). */
  if (rq.kind == FLOE__COLL_ALL_REDUCE && (on_device || ctx->device->host_memory) &&
      floe__exec_may_reuse(ctx, 0)) {
    floe_tensor_retain(in);
    floe_tensor_retain(in);
    k->in = k->out = in;
  } else {
    if (in && !(k->in = floe__tensor_to_device(in, mem, &st))) goto fail_st;
    /* The device's allocator when it reads host memory: it keeps large blocks for the next
     * step (a fresh one would page-fault on every 4 KiB the backend writes). */
    if (!(k->out = floe__tensor_alloc(on_device || ctx->device->host_memory ? ctx->device
                                                                           : NULL,
                                      dt, rank, dims, &st)))
      goto fail_st;
  }
  rq.in = k->in ? device_data(k->in) : NULL;
  rq.out = device_data(k->out);
  rq.count = (size_t)(rq.kind == FLOE__COLL_BCAST_RECV ? k->out->num_elements
                      : rq.kind == FLOE__COLL_REDUCE_SCATTER ? k->out->num_elements
                                                             : k->in->num_elements);
  if (rq.kind == FLOE__COLL_BCAST_SEND && k->in->num_elements && /* the sender's output is */
      floe__device_copy(mem, rq.out, mem, rq.in, k->in->nbytes, &st) != FLOE_OK) /* its input */
    goto fail_st;
  rq.done = coll_done;
  rq.arg = k;
  k->cancel_token = floe__kernel_ctx_on_cancel(ctx, on_cancel, k);
  if (k->cancel_token < 0) {
    floe_status_set(ctx->status, FLOE_CANCELLED, "the step was cancelled");
    goto fail;
  }
  FloeCollComm *comm = NULL;
  if (floe__collective_submit(ctx->device->rt, &rq, &comm, &st) != FLOE_OK) {
    if (k->cancel_token > 0) floe__kernel_ctx_cancel_deregister(ctx, k->cancel_token);
    goto fail_st;
  }
  /* coll_done may have run already (ctx is then gone); k lives until both let go. */
  pthread_mutex_lock(&k->mu);
  k->comm = comm;
  bool abort_now = k->cancelled;
  pthread_mutex_unlock(&k->mu);
  if (abort_now) floe__coll_comm_abort(comm, "its step was cancelled");
  kcall_release(k);
  return;

fail_st:
  floe__kctx_fail(ctx, &st);
fail:
  kcall_free(k);
  done(done_arg);
}

floe_code floe__collective_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const char *const ops[] = {"CollectiveReduce", "CollectiveGather",
                                    "CollectiveReduceScatter", "CollectiveBcastSend",
                                    "CollectiveBcastRecv"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    floe_code rc = floe__core_kernel_add_async(rt, ops[i], 0, collective_compute, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
