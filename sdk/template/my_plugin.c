/* SPDX-License-Identifier: Apache-2.0 */
/* my_plugin.c - template of a Floe plugin that defines a new op. Copy it, rename "myplugin"
 * and "MySquarePlus", fill in.
 *
 * Build:  cc -O2 -fPIC -shared $(pkg-config --cflags floe-plugin) my_plugin.c -o floe-myplugin.so
 * Use:    FLOE_PLUGIN_PATH=$PWD floe plugins        # myplugin: loaded, 2 kernels, 2 ops
 *         FLOE_PLUGIN_PATH=$PWD floe ops            # MySquarePlus, MySquarePlusGrad
 *
 * The file name must start with "floe-": the loader only considers floe-*.so files.
 *
 * What it registers (sdk/README.md explains each call and the ABI version it needs):
 *   op MySquarePlus(x: T) -> y: T, attribute alpha: float = 0     y = x * x + alpha
 *   its shape function (y has x's shape) and a CPU kernel for f32
 *   op MySquarePlusGrad(dy: T, x: T) -> dx: T                     dx = 2 * x * dy
 *   and, on cores of ABI 1.2 or later, MySquarePlusGrad as MySquarePlus's gradient, so
 *   floe_gradients differentiates graphs that use it.
 */
#include <floe/floe_plugin.h>
#include <string.h>

static const FloeHostApi *host; /* the core's services; valid for the whole process */

/* Shape function: runs when a node is added to a graph (and when a graph is loaded). The
 * output has the input's shape, whatever is known of it. */
static floe_code my_square_plus_shape(const FloeHostApi *h, FloeShapeContext *sctx) {
  FloeShape s = h->shape_input(sctx, 0);
  h->shape_set_output(sctx, 0, &s);
  return FLOE_OK;
}

/* The elementwise loop, split over the core's shared thread pool by parallel_for. */
typedef struct SquarePlusArgs {
  const float *x;
  float *y;
  float alpha;
} SquarePlusArgs;

static void square_plus_range(void *arg, int64_t begin, int64_t end) {
  const SquarePlusArgs *a = arg;
  for (int64_t i = begin; i < end; i++) a->y[i] = a->x[i] * a->x[i] + a->alpha;
}

/* The kernel: read inputs and attributes, allocate outputs through the host, compute.
 * Errors are values: record them with ctx_set_error and return the code. */
static floe_code my_square_plus_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  double alpha = 0;
  floe_code rc = host->attr_float(host->ctx_attrs(ctx), "alpha", &alpha);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->ctx_set_error(ctx, rc, "cannot read attribute alpha");
  const FloeTensor *x = host->ctx_input(ctx, 0);
  FloeTensor *y;
  rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  SquarePlusArgs a = {host->tensor_data(x), host->tensor_data(y), (float)alpha};
  host->parallel_for(host->tensor_num_elements(x), 1, square_plus_range, &a);
  return FLOE_OK;
}

/* The gradient kernel: dx = 2 * x * dy (small: no thread pool). */
static floe_code my_square_plus_grad_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *dy = host->ctx_input(ctx, 0), *x = host->ctx_input(ctx, 1);
  int64_t n = host->tensor_num_elements(x);
  if (host->tensor_num_elements(dy) != n)
    return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "dy has %lld elements, x %lld",
                               (long long)host->tensor_num_elements(dy), (long long)n);
  FloeTensor *dx;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &dx);
  if (rc != FLOE_OK) return rc;
  const float *g = host->tensor_data(dy), *in = host->tensor_data(x);
  float *out = host->tensor_data(dx);
  for (int64_t i = 0; i < n; i++) out[i] = 2.0f * in[i] * g[i];
  return FLOE_OK;
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  /* 1. Declare first: name, version and the ABI this file was compiled against. */
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "myplugin", "0.1");
  if (rc != FLOE_OK) return rc; /* e.g. FLOE_ABI_MISMATCH: the core explains why */
  host = h;

  /* 2. Optionally say "not usable here":
   *    reg->set_message(reg, "no device found"); return FLOE_UNAVAILABLE; */

  /* 3. The op definitions, in the spec grammar of floe_plugin.h. Zero the struct and set
   *    struct_size first: a core reads no field past the size you say. */
  static const char *const inputs[] = {"x: T"};
  static const char *const outputs[] = {"y: T"};
  static const char *const attrs[] = {"T: type in {f32}", "alpha: float = 0"};
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "MySquarePlus";
  op.inputs = inputs;
  op.num_inputs = 1;
  op.outputs = outputs;
  op.num_outputs = 1;
  op.attrs = attrs;
  op.num_attrs = 2;
  op.shape_fn = my_square_plus_shape;
  op.doc = "x * x + alpha";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;

  static const char *const grad_inputs[] = {"dy: T", "x: T"};
  static const char *const grad_outputs[] = {"dx: T"};
  op.name = "MySquarePlusGrad";
  op.inputs = grad_inputs;
  op.num_inputs = 2;
  op.outputs = grad_outputs;
  op.num_attrs = 1; /* T only */
  op.doc = "2 * x * dy, the gradient of MySquarePlus";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;

  /* 4. CPU kernels for both, f32 only (floe_plugin_add_kernel fills a FloeKernelDef). */
  if ((rc = floe_plugin_add_kernel(reg, "CPU", "MySquarePlus", "T", FLOE_DTYPE_BIT(FLOE_F32), 0,
                                   my_square_plus_compute, NULL, NULL, NULL)) != FLOE_OK)
    return rc;
  if ((rc = floe_plugin_add_kernel(reg, "CPU", "MySquarePlusGrad", "T", FLOE_DTYPE_BIT(FLOE_F32),
                                   0, my_square_plus_grad_compute, NULL, NULL, NULL)) != FLOE_OK)
    return rc;

  /* 5. The gradient (ABI 1.2): MySquarePlus's input 0 gets output 0 of one
   *    MySquarePlusGrad(dy:0, x:0) node, which takes the forward node's T. An older core has
   *    no register_gradient slot: the op still works there, it just cannot be differentiated. */
  if (!FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_gradient)) return FLOE_OK;
  static const char *const from[] = {"dy:0", "x:0"};
  static const int32_t input_grads[] = {0};
  static const char *const copy[] = {"T"};
  FloeGradientDef gd;
  memset(&gd, 0, sizeof gd);
  gd.struct_size = sizeof gd;
  gd.op = "MySquarePlus";
  gd.grad_op = "MySquarePlusGrad";
  gd.grad_inputs = from;
  gd.num_grad_inputs = 2;
  gd.input_grads = input_grads;
  gd.num_input_grads = 1;
  gd.copy_attrs = copy;
  gd.num_copy_attrs = 1;
  return reg->register_gradient(reg, &gd);
}
