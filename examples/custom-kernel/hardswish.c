/* SPDX-License-Identifier: Apache-2.0 */
/* hardswish.c - an out-of-tree Floe plugin: a new op, its shape function, a CPU kernel, and
 * its gradient (a second op, HardSwishGrad, registered as HardSwish's gradient).
 *
 * Builds with the installed SDK alone and links nothing from libfloe:
 *   cc -O2 -fPIC -shared $(pkg-config --cflags floe-plugin) hardswish.c -o floe-hardswish.so
 * and is found through FLOE_PLUGIN_PATH.
 */
#include <floe/floe_plugin.h>
#include <string.h>

static const FloeHostApi *host;

/* y = x * relu6(x + 3) / 6, elementwise. */
static floe_code hardswish_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = host->ctx_input(ctx, 0);
  FloeTensor *y;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  const float *in = host->tensor_data(x);
  float *out = host->tensor_data(y);
  int64_t n = host->tensor_num_elements(x);
  for (int64_t i = 0; i < n; i++) {
    float r = in[i] + 3.0f;
    r = r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r);
    out[i] = in[i] * r / 6.0f;
  }
  return FLOE_OK;
}

/* dx = dy * d/dx hardswish(x): 0 below -3, 1 above 3, (2x + 3) / 6 between. */
static floe_code hardswish_grad_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *dy = host->ctx_input(ctx, 0), *x = host->ctx_input(ctx, 1);
  int64_t n = host->tensor_num_elements(x);
  if (host->tensor_num_elements(dy) != n)
    return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                               "gradients has %lld elements, features %lld", (long long)host->tensor_num_elements(dy),
                               (long long)n);
  FloeTensor *dx;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &dx);
  if (rc != FLOE_OK) return rc;
  const float *g = host->tensor_data(dy), *in = host->tensor_data(x);
  float *out = host->tensor_data(dx);
  for (int64_t i = 0; i < n; i++) {
    float d = in[i] < -3.0f ? 0.0f : (in[i] > 3.0f ? 1.0f : (2.0f * in[i] + 3.0f) / 6.0f);
    out[i] = g[i] * d;
  }
  return FLOE_OK;
}

/* The output has the input's shape. */
static floe_code hardswish_shape(const FloeHostApi *h, FloeShapeContext *sctx) {
  FloeShape s = h->shape_input(sctx, 0);
  h->shape_set_output(sctx, 0, &s);
  return FLOE_OK;
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "hardswish", "1.0");
  if (rc != FLOE_OK) return rc;
  host = h;

  static const char *const inputs[] = {"x: T"};
  static const char *const outputs[] = {"y: T"};
  static const char *const attrs[] = {"T: type in {f32}"};
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "HardSwish";
  op.inputs = inputs;
  op.num_inputs = 1;
  op.outputs = outputs;
  op.num_outputs = 1;
  op.attrs = attrs;
  op.num_attrs = 1;
  op.shape_fn = hardswish_shape;
  op.doc = "x * relu6(x + 3) / 6 (MobileNetV3)";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;

  static const char *const grad_inputs[] = {"gradients: T", "features: T"};
  static const char *const grad_outputs[] = {"backprops: T"};
  op.name = "HardSwishGrad";
  op.inputs = grad_inputs;
  op.num_inputs = 2;
  op.outputs = grad_outputs;
  op.doc = "gradients * HardSwish'(features)";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;

  FloeTypeConstraint f32_only = {"T", FLOE_DTYPE_BIT(FLOE_F32)};
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "HardSwish";
  k.device_type = "CPU";
  k.constraints = &f32_only;
  k.num_constraints = 1;
  k.compute = hardswish_compute;
  if ((rc = reg->register_kernel(reg, &k)) != FLOE_OK) return rc;
  k.op = "HardSwishGrad";
  k.compute = hardswish_grad_compute;
  if ((rc = reg->register_kernel(reg, &k)) != FLOE_OK) return rc;

  /* floe_gradients differentiates HardSwish with one HardSwishGrad(dy, x) node whose output 0
   * is the gradient of input 0. Needs a core of ABI 1.2 or later. */
  if (!FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_gradient)) return FLOE_OK;
  static const char *const from[] = {"dy:0", "x:0"};
  static const int32_t input_grads[] = {0};
  static const char *const copy[] = {"T"};
  FloeGradientDef gd;
  memset(&gd, 0, sizeof gd);
  gd.struct_size = sizeof gd;
  gd.op = "HardSwish";
  gd.grad_op = "HardSwishGrad";
  gd.grad_inputs = from;
  gd.num_grad_inputs = 2;
  gd.input_grads = input_grads;
  gd.num_input_grads = 1;
  gd.copy_attrs = copy;
  gd.num_copy_attrs = 1;
  return reg->register_gradient(reg, &gd);
}
