/* SPDX-License-Identifier: Apache-2.0 */
/* core_kernels.c - kernels the core itself provides, for every device type ("*"): the
 * variable ops, which work on the session's resource manager rather than on device data.
 *
 * They see resource inputs as handles (FLOE__KERNEL_RAW_RESOURCES) and set outputs
 * directly in the context: a handle is a host scalar whatever the kernel's device, which
 * the host API's ctx_set_output would refuse for a device with its own memory.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "exec.h"

/* Exactly one of compute / compute_async is set. */
static floe_code kernel_add(FloeRuntime *rt, const char *op, uint32_t flags,
                            floe_code (*compute)(void *state, FloeKernelContext *ctx),
                            void (*compute_async)(void *state, FloeKernelContext *ctx,
                                                  FloeDoneFn done, void *done_arg),
                            FloeStatus *st) {
  FloeKernelReg *k = floe__calloc(1, sizeof *k);
  if (!k) goto err_oom;
  k->op = floe__strdup(op);
  k->device_type = floe__strdup("*");
  k->constraints = floe__calloc(1, sizeof *k->constraints); /* none; freed like a plugin's */
  if (!k->op || !k->device_type || !k->constraints) goto err_free_kernel;
  FloeKernelReg **arr =
      floe__realloc(rt->kernels, (size_t)(rt->num_kernels + 1) * sizeof *rt->kernels);
  if (!arr) goto err_free_kernel;
  rt->kernels = arr;
  k->flags = flags;
  k->def.struct_size = sizeof k->def;
  k->def.op = k->op;
  k->def.device_type = k->device_type;
  k->def.constraints = k->constraints;
  k->def.flags = flags & FLOE_KERNEL_INEXPENSIVE;
  k->def.compute = compute;
  k->def.compute_async = compute_async;
  k->plugin = NULL; /* the core's own */
  rt->kernels[rt->num_kernels++] = k;
  return FLOE_OK;

err_free_kernel:
  floe__free(k->op);
  floe__free(k->device_type);
  floe__free(k->constraints);
  floe__free(k);
err_oom:
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering the core kernel of %s",
                         op);
}

floe_code floe__core_kernel_add(FloeRuntime *rt, const char *op, uint32_t flags,
                                floe_code (*compute)(void *state, FloeKernelContext *ctx),
                                FloeStatus *st) {
  return kernel_add(rt, op, flags, compute, NULL, st);
}

floe_code floe__core_kernel_add_async(FloeRuntime *rt, const char *op, uint32_t flags,
                                      void (*compute_async)(void *state, FloeKernelContext *ctx,
                                                            FloeDoneFn done, void *done_arg),
                                      FloeStatus *st) {
  return kernel_add(rt, op, flags, NULL, compute_async, st);
}

/* ---- helpers ---- */

/* Records st's error as the kernel's (the executor adds the node's name). */
static floe_code fail_with(FloeKernelContext *ctx, FloeStatus *st) {
  floe_code code = st->code != FLOE_OK ? st->code : FLOE_INTERNAL;
  floe_status_set(ctx->status, code, "%s", floe_status_message(st));
  floe_status_clear(st);
  return code;
}

/* Output i becomes t (takes over the caller's reference). */
static void set_output(FloeKernelContext *ctx, int i, FloeTensor *t) {
  floe_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
}

/* The variable behind input i; NULL with the error recorded. */
static FloeVar *input_var(FloeKernelContext *ctx, int i) {
  FloeStatus st = {FLOE_OK, NULL};
  char what[64];
  snprintf(what, sizeof what, "input %d", i);
  FloeVar *v = floe__resource_from_handle(ctx->inputs[i], what, &st);
  if (!v) fail_with(ctx, &st);
  return v;
}

/* t (a reference the caller gives up) in memory the kernel's device can use. */
static FloeTensor *to_kernel_device(FloeKernelContext *ctx, FloeTensor *t, FloeStatus *st) {
  FloeDevice *dev = ctx->device;
  if (t->nbytes == 0 || floe__tensor_device(t) == dev ||
      (floe__tensor_on_host(t) && (!dev || dev->host_memory)))
    return t;
  FloeTensor *moved = floe__tensor_to_device(t, dev, st);
  floe_tensor_release(t);
  return moved;
}

/* ---- kernels ---- */

/* The handle of (container, shared_name or the node's name), created on first use. */
static floe_code var_handle_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeNode *n = ctx->node;
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  if (!m)
    return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                           "variables live in a session's resource manager, and this step has "
                           "none");
  const FloeAttrValue *dt = floe__attrs_get(&n->attrs, "dtype");
  const FloeAttrValue *sh = floe__attrs_get(&n->attrs, "shape");
  FloeShape shape = sh && sh->kind == FLOE_ATTR_SHAPE ? sh->u.shape : floe_shape_unknown();
  const char *shared = floe__node_attr_str(n, "shared_name");
  FloeStatus st = {FLOE_OK, NULL};
  FloeVar *v = floe__resources_lookup(m, floe__node_attr_str(n, "container"), *shared ? shared : n->name,
                                      dt ? dt->u.type : FLOE_DTYPE_INVALID, &shape, &st);
  FloeTensor *h = v ? floe__resource_handle_new(v, &st) : NULL;
  if (!h) return fail_with(ctx, &st);
  set_output(ctx, 0, h);
  return FLOE_OK;
}

/* The value itself (no copy: updates copy first while it is held). */
static floe_code read_variable_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeVar *v = input_var(ctx, 0);
  if (!v) return ctx->status->code;
  FloeDType want = ctx->node->out_dtypes[0];
  if (v->dtype != want)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "variable '%s' is %s but this node reads it as %s", v->name,
                           floe_dtype_name(v->dtype), floe_dtype_name(want));
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__var_read(v, &st);
  if (t) t = to_kernel_device(ctx, t, &st);
  if (!t) return fail_with(ctx, &st);
  set_output(ctx, 0, t);
  return FLOE_OK;
}

/* Index i of ix (i32 or i64) into *r; false with ctx's error set when it is outside the
 * rows of variable v. */
static bool row_index(FloeKernelContext *ctx, const FloeTensor *ix, int64_t i, int64_t rows,
                      const FloeVar *v, int64_t *r) {
  *r = ix->dtype == FLOE_I64 ? ((const int64_t *)floe_tensor_data(ix))[i]
                             : ((const int32_t *)floe_tensor_data(ix))[i];
  if (*r >= 0 && *r < rows) return true;
  floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "index %" PRId64 " (element %" PRId64
                  " of the indices) is outside variable '%s' of %" PRId64 " rows", *r, i,
                  v->name, rows);
  return false;
}

/* Output 0 becomes the host tensor *t (consumed), moved where the kernel's device needs it. */
static floe_code set_host_output(FloeKernelContext *ctx, FloeTensor **t) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *moved = to_kernel_device(ctx, *t, &st);
  *t = NULL;
  if (!moved) return fail_with(ctx, &st);
  set_output(ctx, 0, moved);
  return FLOE_OK;
}

/* ResourceGather: rows of the variable's value (read on the host), no copy of the rest. */
static floe_code resource_gather_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeVar *v = input_var(ctx, 0);
  if (!v) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *val = floe__var_read(v, &st), *ix = NULL, *out = NULL;
  if (!val) return fail_with(ctx, &st);
  FloeTensor *host = floe__tensor_to_device(val, NULL, &st);
  floe_tensor_release(val);
  if (host) ix = floe__tensor_to_device(ctx->inputs[1], NULL, &st);
  floe_code rc = FLOE_OK;
  if (!host || !ix) {
    rc = fail_with(ctx, &st);
    goto out;
  }
  if (host->rank < 1 || host->rank + ix->rank - 1 > FLOE_MAX_DIMS) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "variable '%s' has rank %d: "
                         "ResourceGather needs rank >= 1", v->name, host->rank);
    goto out;
  }
  int64_t dims[FLOE_MAX_DIMS], rows = host->dims[0], n = ix->num_elements;
  for (int i = 0; i < ix->rank; i++) dims[i] = ix->dims[i];
  for (int i = 1; i < host->rank; i++) dims[ix->rank + i - 1] = host->dims[i];
  size_t row_bytes = rows ? host->nbytes / (size_t)rows : 0;
  if (!(out = floe__tensor_alloc(NULL, host->dtype, ix->rank + host->rank - 1, dims, &st))) {
    rc = fail_with(ctx, &st);
    goto out;
  }
  const char *src = floe_tensor_data(host);
  char *dst = floe_tensor_data(out);
  for (int64_t i = 0; i < n; i++) {
    int64_t r;
    if (!row_index(ctx, ix, i, rows, v, &r)) {
      rc = FLOE_INVALID_ARGUMENT;
      goto out;
    }
    memcpy(dst + (size_t)i * row_bytes, src + (size_t)r * row_bytes, row_bytes);
  }
  rc = set_host_output(ctx, &out);
out:
  floe_tensor_release(out);
  floe_tensor_release(ix);
  floe_tensor_release(host);
  return rc;
}

/* ResourceGatherGrad: zeros of the variable's declared shape, grad's rows added at indices
 * (in order, so repeated indices add as a Gather's gradient does). */
static floe_code resource_gather_grad_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeVar *v = input_var(ctx, 0);
  if (!v) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  const FloeShape *vs = &v->shape;
  bool known = vs->rank >= 1;
  for (int i = 0; known && i < vs->rank; i++) known = vs->dims[i] >= 0;
  FloeTensor *ix = NULL, *g = NULL, *out = NULL;
  floe_code rc = FLOE_OK;
  if (!known) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "variable '%s' has no fully known "
                         "shape of rank >= 1: its gradient at gathered rows needs one", v->name);
    goto out;
  }
  ix = floe__tensor_to_device(ctx->inputs[1], NULL, &st);
  g = ix ? floe__tensor_to_device(ctx->inputs[2], NULL, &st) : NULL;
  if (!ix || !g) {
    rc = fail_with(ctx, &st);
    goto out;
  }
  int64_t rows = vs->dims[0], n = ix->num_elements, row = 1;
  for (int i = 1; i < vs->rank; i++) row *= vs->dims[i];
  if (g->num_elements != n * row || (g->dtype != FLOE_F32 && g->dtype != FLOE_F64)) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "the gradient of %" PRId64 " rows "
                         "of variable '%s' holds %" PRId64 " %s values; expected %" PRId64
                         " f32 or f64", n, v->name, g->num_elements, floe_dtype_name(g->dtype),
                         n * row);
    goto out;
  }
  if (!(out = floe__tensor_alloc(NULL, g->dtype, vs->rank, vs->dims, &st))) {
    rc = fail_with(ctx, &st);
    goto out;
  }
  memset(floe_tensor_data(out), 0, out->nbytes);
  for (int64_t i = 0; i < n; i++) {
    int64_t r;
    if (!row_index(ctx, ix, i, rows, v, &r)) {
      rc = FLOE_INVALID_ARGUMENT;
      goto out;
    }
    if (g->dtype == FLOE_F32) {
      float *d = (float *)floe_tensor_data(out) + r * row;
      const float *s = (const float *)floe_tensor_data(g) + i * row;
      for (int64_t k = 0; k < row; k++) d[k] += s[k];
    } else {
      double *d = (double *)floe_tensor_data(out) + r * row;
      const double *s = (const double *)floe_tensor_data(g) + i * row;
      for (int64_t k = 0; k < row; k++) d[k] += s[k];
    }
  }
  rc = set_host_output(ctx, &out);
out:
  floe_tensor_release(out);
  floe_tensor_release(g);
  floe_tensor_release(ix);
  return rc;
}

static floe_code assign_variable_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeVar *v = input_var(ctx, 0);
  if (!v) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *value = ctx->inputs[1];
  floe_tensor_retain(value);
  /* The value lives where the variable's kernels run. */
  value = to_kernel_device(ctx, value, &st);
  if (!value) return fail_with(ctx, &st);
  floe_code rc = floe__var_assign(v, value, floe__node_attr_bool(ctx->node, "validate_shape", true), &st);
  floe_tensor_release(value);
  return rc == FLOE_OK ? FLOE_OK : fail_with(ctx, &st);
}

static floe_code var_is_initialized_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeVar *v = input_var(ctx, 0);
  if (!v) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *out = floe__tensor_alloc(NULL, FLOE_BOOL, 0, NULL, &st);
  if (!out) return fail_with(ctx, &st);
  floe__var_lock(v);
  bool init = v->value != NULL && !v->dead;
  floe__var_unlock(v);
  *(uint8_t *)((char *)out->buf->data + out->offset) = init;
  out = to_kernel_device(ctx, out, &st);
  if (!out) return fail_with(ctx, &st);
  set_output(ctx, 0, out);
  return FLOE_OK;
}

/* Const on a device whose plugin has no Const kernel (the partitioner's control loops need
 * one on every device): the value, copied into the device's memory. */
static floe_code const_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeAttrValue *v = floe__node_attr(ctx->node, "value", FLOE_ATTR_TENSOR);
  if (!v || !v->u.tensor)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT, "Const has no value attribute");
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = v->u.tensor;
  floe_tensor_retain(t);
  t = to_kernel_device(ctx, t, &st);
  if (!t) return fail_with(ctx, &st);
  set_output(ctx, 0, t);
  return FLOE_OK;
}

/* Switch, Merge, Enter, Exit, NextIteration and LoopCond are routed by the executor's frame
 * scheduler (exec_frames.c), which never calls a kernel for them; the kernels exist so that
 * placement finds one on every device. Reaching this is a bug in the executor. */
static floe_code control_flow_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  return floe_status_set(ctx->status, FLOE_INTERNAL,
                         "control-flow op %s reached a kernel: the executor should have "
                         "routed it (a bug in Floe)",
                         ctx->node->op->name);
}

floe_code floe__exec_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
  } kernels[] = {
      {"VarHandleOp", var_handle_compute},
      {"ReadVariableOp", read_variable_compute},
      {"AssignVariableOp", assign_variable_compute},
      {"VarIsInitializedOp", var_is_initialized_compute},
  };
  const uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | FLOE_KERNEL_INEXPENSIVE;
  floe_code crc = floe__core_kernel_add(rt, "Const", FLOE_KERNEL_INEXPENSIVE, const_compute, st);
  if (crc != FLOE_OK) return crc;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kernels); i++) {
    floe_code rc = floe__core_kernel_add(rt, kernels[i].op, flags, kernels[i].compute, st);
    if (rc != FLOE_OK) return rc;
  }
  static const char *const control_flow[] = {"Switch",        "Merge",    "Enter",
                                             "Exit",          "NextIteration", "LoopCond",
                                             "ControlTrigger"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(control_flow); i++) {
    floe_code rc = floe__core_kernel_add(rt, control_flow[i], flags, control_flow_compute, st);
    if (rc != FLOE_OK) return rc;
  }
  floe_code rc = floe__core_kernel_add(rt, "ResourceGather", FLOE__KERNEL_RAW_RESOURCES,
                                      resource_gather_compute, st);
  if (rc == FLOE_OK)
    rc = floe__core_kernel_add(rt, "ResourceGatherGrad", FLOE__KERNEL_RAW_RESOURCES,
                               resource_gather_grad_compute, st);
  if (rc == FLOE_OK) rc = floe__tensor_array_kernels_register(rt, st);
  if (rc == FLOE_OK) rc = floe__sendrecv_kernels_register(rt, st);
  if (rc == FLOE_OK) rc = floe__collective_kernels_register(rt, st);
  return rc;
}
