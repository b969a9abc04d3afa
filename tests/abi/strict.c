/* SPDX-License-Identifier: Apache-2.0 */
/* strict.c - floe-abitest-strict.so: tries registrations the core must reject, each with
 * a known code, then one valid op and a kernel for it. Init fails naming the first
 * expectation that did not hold, so the test reads LOADED as "every rejection happened". */
#include <stdio.h>
#include <string.h>

#include <floe/floe_plugin.h>

static floe_code compute(void *state, FloeKernelContext *ctx) { return FLOE_OK; }
static void compute_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *arg) {
  done(arg);
}
static floe_code dev_props(void *state, FloeDeviceProps *p) {
  strcpy(p->type, "STRICT");
  return FLOE_OK;
}
static floe_code dev_props_failing(void *state, FloeDeviceProps *p) { return FLOE_INTERNAL; }
static floe_code dev_props_empty(void *state, FloeDeviceProps *p) { return FLOE_OK; }
static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  return FLOE_RESOURCE_EXHAUSTED;
}
static void dev_deallocate(void *state, void *ptr, size_t bytes) {}
static floe_code dev_copy(void *state, void *dst, const void *src, size_t n) { return FLOE_OK; }
static floe_code stream_create(void *state, FloeStream **out) { return FLOE_UNIMPLEMENTED; }

#include "null_transport.h"
static floe_code tr_trywait(void *ctx) { return FLOE_OK; }
static floe_code tr_wait(void *ctx, int timeout_ms) { return FLOE_OK; }
static void tr_interrupt(void *ctx) {}

static FloeKernelDef kernel(const char *op, const char *device_type) {
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = op;
  k.device_type = device_type;
  k.compute = compute;
  return k;
}

static FloeDeviceFns device(void) {
  FloeDeviceFns d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.get_props = dev_props;
  d.allocate = dev_allocate;
  d.deallocate = dev_deallocate;
  d.copy_h2d = dev_copy;
  d.copy_d2h = dev_copy;
  d.copy_d2d = dev_copy;
  return d;
}

static const char *failed; /* the first expectation that did not hold */
static char failed_buf[160];

static void expect(const char *what, floe_code got, floe_code want) {
  if (got == want || failed) return;
  snprintf(failed_buf, sizeof failed_buf, "%s: got code %d, want %d", what, (int)got, (int)want);
  failed = failed_buf;
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  FloeDeviceFns d = device();
  expect("device before declare", reg->register_device(reg, &d), FLOE_FAILED_PRECONDITION);
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-strict", "1.0");
  if (rc != FLOE_OK) return rc;
  expect("second declare", FLOE_PLUGIN_DECLARE(reg, "abitest-strict", "1.0"), FLOE_FAILED_PRECONDITION);

  FloeKernelDef k = kernel("Neg", "STRICT");
  k.compute = NULL;
  expect("kernel without compute", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  k = kernel("Neg", "STRICT");
  k.compute_async = compute_async;
  expect("kernel with compute and compute_async", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  k = kernel("Neg", "STRICT");
  k.struct_size = sizeof(size_t);
  expect("kernel struct_size too small", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  expect("kernel NULL", reg->register_kernel(reg, NULL), FLOE_INVALID_ARGUMENT);
  k = kernel("NoSuchOpForStrict", "STRICT");
  expect("kernel for an unknown op", reg->register_kernel(reg, &k), FLOE_NOT_FOUND);
  k = kernel("Neg", "not a type!");
  expect("kernel device type with blanks", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  FloeTypeConstraint bad_attr = {"NoSuchAttr", FLOE_DTYPE_BIT(FLOE_F32)};
  k = kernel("Neg", "STRICT");
  k.constraints = &bad_attr;
  k.num_constraints = 1;
  expect("constraint on a missing attribute", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  FloeTypeConstraint not_type = {"value", FLOE_DTYPE_BIT(FLOE_F32)};
  k = kernel("Const", "STRICT");
  k.constraints = &not_type;
  k.num_constraints = 1;
  expect("constraint on a tensor attribute", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  FloeTypeConstraint empty_mask = {"T", 0};
  k = kernel("Neg", "STRICT");
  k.constraints = &empty_mask;
  k.num_constraints = 1;
  expect("constraint with an empty mask", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);
  k = kernel("Neg", "STRICT");
  k.num_constraints = 1;
  expect("constraints NULL with a count", reg->register_kernel(reg, &k), FLOE_INVALID_ARGUMENT);

  d = device();
  d.allocate = NULL;
  expect("device without allocate", reg->register_device(reg, &d), FLOE_INVALID_ARGUMENT);
  d = device();
  d.stream_create = stream_create;
  expect("device with part of the stream group", reg->register_device(reg, &d), FLOE_INVALID_ARGUMENT);
  d = device();
  d.get_props = dev_props_failing;
  expect("device whose get_props fails", reg->register_device(reg, &d), FLOE_INTERNAL);
  d = device();
  d.get_props = dev_props_empty;
  expect("device with an empty type", reg->register_device(reg, &d), FLOE_INVALID_ARGUMENT);
  d = device();
  d.struct_size = offsetof(FloeDeviceFns, copy_d2h);
  expect("device struct_size without copy_d2d", reg->register_device(reg, &d), FLOE_INVALID_ARGUMENT);

  static const char *const ins[] = {"x: f32"};
  static const char *const outs[] = {"y: f32"};
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "Add";
  op.inputs = ins;
  op.num_inputs = 1;
  op.outputs = outs;
  op.num_outputs = 1;
  expect("op named like a standard op", reg->register_op(reg, &op), FLOE_ALREADY_EXISTS);
  op.name = NULL;
  expect("op without a name", reg->register_op(reg, &op), FLOE_INVALID_ARGUMENT);
  op.name = "AbiStrictOp";
  op.inputs = NULL;
  expect("op with inputs NULL", reg->register_op(reg, &op), FLOE_INVALID_ARGUMENT);

  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "strict";
  expect("transport without slots", reg->register_transport(reg, &t), FLOE_INVALID_ARGUMENT);
  /* The waiting slots of 1.4 come in pairs: wait with interrupt, trywait with get_fd. */
  t.init = tr_init;
  t.finalize = tr_finalize;
  t.listen = tr_listen;
  t.connect = tr_connect;
  t.accept = tr_accept;
  t.isend = tr_send;
  t.irecv = tr_post;
  t.test = tr_test;
  t.close_send = tr_close;
  t.close_recv = tr_close;
  t.close_listen = tr_close;
  t.wait = tr_wait;
  expect("transport wait without interrupt", reg->register_transport(reg, &t),
         FLOE_INVALID_ARGUMENT);
  t.wait = NULL;
  t.interrupt = tr_interrupt;
  expect("transport interrupt without wait", reg->register_transport(reg, &t),
         FLOE_INVALID_ARGUMENT);
  t.interrupt = NULL;
  t.trywait = tr_trywait;
  expect("transport trywait without get_fd", reg->register_transport(reg, &t),
         FLOE_INVALID_ARGUMENT);

  /* The valid part: a custom op and a kernel for it (the op is still only staged). */
  op.inputs = ins;
  expect("valid op", reg->register_op(reg, &op), FLOE_OK);
  expect("op registered twice", reg->register_op(reg, &op), FLOE_ALREADY_EXISTS);
  k = kernel("AbiStrictOp", "STRICT");
  expect("kernel for the staged op", reg->register_kernel(reg, &k), FLOE_OK);

  /* Gradients (ABI 1.2): malformed definitions are refused at once. */
  static const char *const from_dy[] = {"dy:0"};
  static const int32_t first[] = {0};
  FloeGradientDef gd;
  memset(&gd, 0, sizeof gd);
  gd.struct_size = sizeof gd;
  gd.op = "AbiStrictOp";
  gd.grad_op = "Identity";
  gd.grad_inputs = from_dy;
  gd.num_grad_inputs = 1;
  gd.input_grads = first;
  gd.num_input_grads = 1;
  expect("gradient NULL", reg->register_gradient(reg, NULL), FLOE_INVALID_ARGUMENT);
  gd.struct_size = 16;
  expect("gradient struct_size too small", reg->register_gradient(reg, &gd), FLOE_INVALID_ARGUMENT);
  gd.struct_size = sizeof gd;
  gd.grad_op = "";
  expect("gradient without grad_op", reg->register_gradient(reg, &gd), FLOE_INVALID_ARGUMENT);
  gd.grad_op = "Identity";
  gd.grad_inputs = NULL;
  expect("gradient inputs NULL with a count", reg->register_gradient(reg, &gd), FLOE_INVALID_ARGUMENT);
  gd.grad_inputs = from_dy;
  expect("valid gradient of the staged op", reg->register_gradient(reg, &gd), FLOE_OK);
  expect("gradient registered twice", reg->register_gradient(reg, &gd), FLOE_ALREADY_EXISTS);

  if (failed) {
    reg->set_message(reg, "expectation failed: %s", failed);
    return FLOE_INTERNAL;
  }
  return FLOE_OK;
}
