/* SPDX-License-Identifier: Apache-2.0 */
/* sendrecv.c - the kernels of _Send, _ControlSend and _Recv: a step's side of the
 * rendezvous (rendezvous.c). The partitioner (partition.c) puts a pair on every edge that
 * crosses devices; the key is the pair's attributes plus the frame and iteration the node
 * runs in, which the frame scheduler hands the kernel (ctx->frame_id, ctx->iter).
 */
#include <string.h>

#include "exec.h"

/* The pair's key; its strings are borrowed from the node's attributes. */
static void make_key(const FloeKernelContext *ctx, FloeRendezvousKey *k) {
  const FloeNode *n = ctx->node;
  k->src_device = floe__node_attr_str(n, "send_device");
  k->src_incarnation = (uint64_t)floe__node_attr_int(n, "send_device_incarnation", 0);
  k->dst_device = floe__node_attr_str(n, "recv_device");
  k->tensor = floe__node_attr_str(n, "tensor_name");
  k->frame_id = ctx->frame_id;
  k->iter = ctx->iter;
}

static FloeRendezvous *step_rendezvous(FloeKernelContext *ctx) {
  FloeRendezvous *r = floe__exec_step_rendezvous(ctx->step);
  if (!r)
    floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                    "no rendezvous: %s only runs in a step partitioned across devices",
                    ctx->node->op->name);
  return r;
}

static floe_code send_value(FloeKernelContext *ctx, FloeTensor *t) {
  FloeRendezvous *r = step_rendezvous(ctx);
  if (!r) return ctx->status->code;
  FloeRendezvousKey k;
  make_key(ctx, &k);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = floe__rendezvous_send(r, &k, ctx->input_dead ? NULL : t, ctx->input_dead, &st);
  if (rc != FLOE_OK) {
    floe_status_set(ctx->status, rc, "%s", floe_status_message(&st));
    floe_status_clear(&st);
  }
  return rc;
}

static floe_code send_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  return send_value(ctx, ctx->input_dead ? NULL : ctx->inputs[0]);
}

/* A control edge carries an empty f32 tensor. */
static floe_code control_send_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  if (ctx->input_dead) return send_value(ctx, NULL);
  FloeStatus st = {FLOE_OK, NULL};
  int64_t zero = 0;
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_F32, 1, &zero, &st);
  if (!t) {
    floe_status_set(ctx->status, st.code, "%s", floe_status_message(&st));
    floe_status_clear(&st);
    return ctx->status->code;
  }
  floe_code rc = send_value(ctx, t);
  floe_tensor_release(t);
  return rc;
}

typedef struct RecvCall {
  FloeKernelContext *ctx;
  FloeDoneFn done;
  void *done_arg;
} RecvCall;

/* The rendezvous hands over the value (a reference we own), a dead flag, or an error. */
static void recv_done(void *arg, const FloeStatus *st, FloeTensor *t, bool is_dead) {
  RecvCall *c = arg;
  FloeKernelContext *ctx = c->ctx;
  FloeDType want = ctx->node->out_dtypes[0];
  if (st && st->code != FLOE_OK) {
    floe_status_set(ctx->status, st->code, "%s", floe_status_message(st));
  } else if (is_dead) {
    ctx->output_dead = true;
  } else if (!t) {
    floe_status_set(ctx->status, FLOE_INTERNAL, "the rendezvous delivered no value for '%s'",
                    floe__node_attr_str(ctx->node, "tensor_name"));
  } else if (t->dtype != want) {
    floe_status_set(ctx->status, FLOE_INTERNAL, "'%s' arrived as %s, the graph says %s",
                    floe__node_attr_str(ctx->node, "tensor_name"), floe_dtype_name(t->dtype),
                    floe_dtype_name(want));
  } else {
    floe_tensor_release(ctx->outputs[0]);
    ctx->outputs[0] = t;
    t = NULL;
  }
  if (t) floe_tensor_release(t);
  FloeDoneFn done = c->done;
  void *done_arg = c->done_arg;
  floe__free(c);
  done(done_arg);
}

static void recv_compute_async(void *state, FloeKernelContext *ctx, FloeDoneFn done,
                               void *done_arg) {
  (void)state;
  FloeRendezvous *r = step_rendezvous(ctx);
  RecvCall *c = r ? floe__malloc(sizeof *c) : NULL;
  if (!c) {
    if (r)
      floe_status_set(ctx->status, FLOE_NO_MEMORY, "out of memory waiting for '%s'",
                      floe__node_attr_str(ctx->node, "tensor_name"));
    done(done_arg);
    return;
  }
  *c = (RecvCall){ctx, done, done_arg};
  FloeRendezvousKey k;
  make_key(ctx, &k);
  floe__rendezvous_recv(r, &k, ctx->device, recv_done, c);
}

floe_code floe__sendrecv_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  /* Send sees resource handles as they are (a handle is a host scalar, sent as one). */
  const uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | FLOE_KERNEL_INEXPENSIVE;
  floe_code rc = floe__core_kernel_add(rt, "_Send", flags, send_compute, st);
  if (rc == FLOE_OK) rc = floe__core_kernel_add(rt, "_ControlSend", flags, control_send_compute, st);
  if (rc == FLOE_OK) rc = floe__core_kernel_add_async(rt, "_Recv", flags, recv_compute_async, st);
  return rc;
}

