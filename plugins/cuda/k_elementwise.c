/* SPDX-License-Identifier: Apache-2.0 */
/* k_elementwise.c - CUDA kernels for elementwise ops: arithmetic and comparisons with NumPy
 * broadcasting, unary math and activations (own kernels rather than cuDNN's activation
 * descriptors, so NaN handling and the gradients' input conventions match the CPU plugin
 * exactly), activation gradients, Cast, Select, fills, BiasAdd, AddN and the optimiser
 * updates. Shapes and plans are worked out here; cu_elementwise.cu holds the kernels. */
#include "config.h"

#include <string.h>

#include "cuda.h"

/* f32, f64, i32, i64: the dtypes the own kernels are instantiated for. */
#define DT_CORE                                                                              \
  (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_I32) |         \
   FLOE_DTYPE_BIT(FLOE_I64))
#define DT_FLOAT (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64))
#define DT_ALL_CUDA FLOE_DTYPES_ALL

/* ------------------------------------------------------------------------------------ */
/* Binary ops. */

typedef struct BinaryState {
  CuBinaryOp op;
  double alpha; /* LeakyReluGrad */
} BinaryState;

static floe_code binary_run(FloeKernelContext *ctx, const BinaryState *s, const FloeTensor *x,
                            const FloeTensor *y) {
  FloeDType dt = cu_host->tensor_dtype(x);
  if (cu_host->tensor_dtype(y) != dt)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "dtypes differ: %s and %s",
                                  cu_host->dtype_name(dt),
                                  cu_host->dtype_name(cu_host->tensor_dtype(y)));
  const FloeTensor *in[2] = {x, y};
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  CuBcast plan;
  floe_code rc = cu_broadcast(ctx, 2, in, &rank, dims, &plan);
  if (rc != FLOE_OK) return rc;
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_binary((CuStream)c.dev->compute, s->op, dt, &plan, cu_host->tensor_data(x),
                     cu_host->tensor_data(y), cu_host->tensor_data(out), s->alpha);
  return cu_end(&c, lr, cu_host->ctx_op(ctx));
}

static floe_code binary_compute(void *state, FloeKernelContext *ctx) {
  return binary_run(ctx, state, cu_host->ctx_input(ctx, 0), cu_host->ctx_input(ctx, 1));
}

/* LeakyReluGrad reads its alpha. */
static floe_code alpha_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  BinaryState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *s = *(const BinaryState *)user_data;
  floe_code rc = host->attr_float(host->init_attrs(init), "alpha", &s->alpha);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute alpha must be a float");
  }
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { cu_host->free(state); }

/* BiasAdd: the bias [C] broadcast along the channel dim (last; dim 1 for NCHW). */
typedef struct BiasState {
  bool nchw;
} BiasState;

static floe_code format_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  const char *f = "NHWC";
  floe_code rc = host->attr_string(host->init_attrs(init), "data_format", &f);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(f, "NHWC") && strcmp(f, "NCHW"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be NHWC or NCHW, got \"%s\"", f);
  BiasState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  s->nchw = !strcmp(f, "NCHW");
  *state = s;
  return FLOE_OK;
}

static floe_code bias_add_compute(void *state, FloeKernelContext *ctx) {
  const BiasState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *b = cu_host->ctx_input(ctx, 1);
  int r = cu_host->tensor_rank(x);
  const int64_t *xd = cu_host->tensor_dims(x);
  int ch = s->nchw ? 1 : r - 1;
  char xs[CU_SHAPE_STR_MAX], bs[CU_SHAPE_STR_MAX];
  if (r < (s->nchw ? 3 : 1) || cu_host->tensor_rank(b) != 1 ||
      cu_host->tensor_dims(b)[0] != xd[ch] || cu_host->tensor_dtype(b) != cu_host->tensor_dtype(x))
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "bias %s %s does not match the channels of value %s %s",
                                  cu_host->dtype_name(cu_host->tensor_dtype(b)),
                                  cu_shape_str(bs, sizeof bs, cu_host->tensor_rank(b),
                                               cu_host->tensor_dims(b)),
                                  cu_host->dtype_name(cu_host->tensor_dtype(x)),
                                  cu_shape_str(xs, sizeof xs, r, xd));
  /* The bias as a [C, 1, ..., 1] (NCHW) or [C] (NHWC) operand of Add. */
  int64_t bdims[FLOE_MAX_DIMS];
  int brank = r - ch;
  bdims[0] = xd[ch];
  for (int i = 1; i < brank; i++) bdims[i] = 1;
  int ranks[2] = {r, brank};
  const int64_t *dims[2] = {xd, bdims};
  CuBcast plan;
  cu_broadcast_plan(2, ranks, dims, r, xd, &plan);
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, r, xd, &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_binary((CuStream)c.dev->compute, CU_ADD, cu_host->tensor_dtype(x), &plan,
                     cu_host->tensor_data(x), cu_host->tensor_data(b), cu_host->tensor_data(out),
                     0);
  return cu_end(&c, lr, "BiasAdd");
}

/* AddN: all inputs of one shape. */
static floe_code add_n_compute(void *state, FloeKernelContext *ctx) {
  int k = cu_host->ctx_num_inputs(ctx);
  const FloeTensor *x0 = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x0);
  const int64_t *d0 = cu_host->tensor_dims(x0);
  for (int j = 1; j < k; j++) {
    const FloeTensor *xj = cu_host->ctx_input(ctx, j);
    if (cu_host->tensor_rank(xj) != r ||
        (r && memcmp(cu_host->tensor_dims(xj), d0, (size_t)r * sizeof *d0) != 0)) {
      char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "input %d has shape %s, input 0 has %s: AddN needs one "
                                    "shape",
                                    j, cu_shape_str(a, sizeof a, cu_host->tensor_rank(xj),
                                                    cu_host->tensor_dims(xj)),
                                    cu_shape_str(b, sizeof b, r, d0));
    }
  }
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, r, d0, &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  FloeDType dt = cu_host->tensor_dtype(x0);
  int64_t n = cu_host->tensor_num_elements(x0);
  void *acc = cu_host->tensor_data(out);
  int lr = 0;
  /* Up to eight inputs per launch; later launches add into the running sum. */
  for (int j = 0; j < k && lr == 0;) {
    const void *ptrs[8];
    int m = 0;
    if (j) ptrs[m++] = acc; /* read and written at the same index only */
    while (j < k && m < 8) ptrs[m++] = cu_host->tensor_data(cu_host->ctx_input(ctx, j++));
    lr = cu_add_n((CuStream)c.dev->compute, dt, n, ptrs, m, acc);
  }
  return cu_end(&c, lr, "AddN");
}

/* ------------------------------------------------------------------------------------ */
/* Unary ops. */

typedef struct UnaryState {
  CuUnaryOp op;
  double alpha;
} UnaryState;

static floe_code unary_compute(void *state, FloeKernelContext *ctx) {
  const UnaryState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, cu_host->tensor_rank(x),
                                              cu_host->tensor_dims(x), &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_unary((CuStream)c.dev->compute, s->op, cu_host->tensor_dtype(x),
                    cu_host->tensor_num_elements(x), cu_host->tensor_data(x),
                    cu_host->tensor_data(out), s->alpha);
  return cu_end(&c, lr, cu_host->ctx_op(ctx));
}

static floe_code unary_alpha_create(const FloeHostApi *host, FloeKernelInit *init,
                                    void *user_data, void **state) {
  UnaryState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *s = *(const UnaryState *)user_data;
  floe_code rc = host->attr_float(host->init_attrs(init), "alpha", &s->alpha);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute alpha must be a float");
  }
  *state = s;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Cast, Select, fills. */

static floe_code cast_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  FloeDType src = cu_host->tensor_dtype(x), dst = cu_host->ctx_output_dtype(ctx, 0);
  int rank = cu_host->tensor_rank(x);
  const int64_t *dims = cu_host->tensor_dims(x);
  if (src == dst) return cu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_cast((CuStream)c.dev->compute, src, dst, cu_host->tensor_num_elements(x),
                   cu_host->tensor_data(x), cu_host->tensor_data(out));
  return cu_end(&c, lr, "Cast");
}

static floe_code select_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *in[3] = {cu_host->ctx_input(ctx, 0), cu_host->ctx_input(ctx, 1),
                             cu_host->ctx_input(ctx, 2)};
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  CuBcast plan;
  floe_code rc = cu_broadcast(ctx, 3, in, &rank, dims, &plan);
  if (rc != FLOE_OK) return rc;
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_select((CuStream)c.dev->compute, &plan, cu_host->tensor_data(in[0]),
                     cu_host->tensor_data(in[1]), cu_host->tensor_data(in[2]),
                     cu_host->tensor_data(out),
                     (int)cu_host->dtype_size(cu_host->tensor_dtype(in[1])));
  return cu_end(&c, lr, "Select");
}

/* The bit pattern of `v` in dtype dt (bf16 / f16 rounded to nearest even). */
static uint64_t pattern_of(FloeDType dt, double v) {
  uint64_t p = 0;
  switch (dt) {
  case FLOE_F32: {
    float f = (float)v;
    memcpy(&p, &f, 4);
    break;
  }
  case FLOE_F64: memcpy(&p, &v, 8); break;
  case FLOE_BF16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    p = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    break;
  }
  case FLOE_F16: /* only 0 and 1 are asked for (ZerosLike / OnesLike) */
    p = v == 0 ? 0 : v == 1 ? 0x3c00u : 0x7e00u;
    break;
  case FLOE_I8:
  case FLOE_U8:
  case FLOE_BOOL: p = (uint8_t)(int64_t)v; break;
  case FLOE_I32: p = (uint32_t)(int32_t)v; break;
  default: p = (uint64_t)(int64_t)v; break;
  }
  return p;
}

/* Allocates output 0 and fills it with `pattern`, or (value_dev) with the device scalar at
 * value_dev, within the begun call c (ended here). */
static floe_code fill_out(CuCall *c, int rank, const int64_t *dims, FloeDType dt,
                          uint64_t pattern, const void *value_dev) {
  FloeKernelContext *ctx = c->ctx;
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return cu_abort(c), rc;
  int64_t n = cu_host->tensor_num_elements(out);
  int es = (int)cu_host->dtype_size(dt);
  int lr;
  if (value_dev) { /* Fill: the scalar broadcast with a 0-stride plan */
    CuBcast p;
    memset(&p, 0, sizeof p);
    p.rank = 1;
    p.dims[0] = n;
    p.n = n;
    lr = cu_broadcast_copy((CuStream)c->dev->compute, &p, value_dev, cu_host->tensor_data(out),
                           es, 1.0f);
  } else {
    lr = cu_fill((CuStream)c->dev->compute, cu_host->tensor_data(out), n, es, pattern);
  }
  return cu_end(c, lr, cu_host->ctx_op(ctx));
}

static const double one = 1.0, zero = 0.0;

static floe_code fill_like_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  FloeDType dt = cu_host->tensor_dtype(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  return fill_out(&c, cu_host->tensor_rank(x), cu_host->tensor_dims(x), dt,
                  pattern_of(dt, *(const double *)state), NULL);
}

static floe_code fill_compute(void *state, FloeKernelContext *ctx) {
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t dims[FLOE_MAX_DIMS];
  int rank = 0;
  const FloeTensor *v = cu_host->ctx_input(ctx, 1);
  rc = cu_read_index_input(&c, 0, "dims", dims, FLOE_MAX_DIMS, &rank);
  for (int i = 0; rc == FLOE_OK && i < rank; i++)
    if (dims[i] < 0)
      rc = cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "dims[%d] is %lld: dims must not be negative", i,
                                  (long long)dims[i]);
  if (rc == FLOE_OK && cu_host->tensor_num_elements(v) != 1)
    rc = cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "value must be a scalar");
  if (rc != FLOE_OK) return cu_abort(&c), rc;
  return fill_out(&c, rank, dims, cu_host->tensor_dtype(v), 0, cu_host->tensor_data(v));
}

/* ------------------------------------------------------------------------------------ */
/* Optimisers and variable updates: ctx inputs that are `resource` hold the variable's value
 * (exclusively this call's), updated in place. */

/* Every tensor input of an update has var's shape, except the scalars named in `scalars`
 * (a string of 'r' var-shaped / 's' scalar per input). */
static floe_code check_update(FloeKernelContext *ctx, const char *kinds,
                              const char *const *names) {
  const FloeTensor *var = cu_host->ctx_input(ctx, 0);
  int64_t n = cu_host->tensor_num_elements(var);
  FloeDType dt = cu_host->tensor_dtype(var);
  for (int i = 0; kinds[i]; i++) {
    const FloeTensor *t = cu_host->ctx_input(ctx, i);
    if (cu_host->tensor_dtype(t) != dt)
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s is %s but var is %s",
                                    names[i], cu_host->dtype_name(cu_host->tensor_dtype(t)),
                                    cu_host->dtype_name(dt));
    int64_t want = kinds[i] == 's' ? 1 : n;
    if (cu_host->tensor_num_elements(t) != want) {
      char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
      return cu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT, "%s has shape %s; it must be %s (var has shape %s)",
          names[i], cu_shape_str(a, sizeof a, cu_host->tensor_rank(t), cu_host->tensor_dims(t)),
          kinds[i] == 's' ? "a scalar" : "var's shape",
          cu_shape_str(b, sizeof b, cu_host->tensor_rank(var), cu_host->tensor_dims(var)));
    }
  }
  return FLOE_OK;
}

#define IN(i) cu_host->tensor_data(cu_host->ctx_input(ctx, (i)))

static int nesterov_of(FloeKernelContext *ctx) {
  int v = 0;
  if (cu_host->attr_bool(cu_host->ctx_attrs(ctx), "use_nesterov", &v) != FLOE_OK) v = 0;
  return v;
}

static floe_code sgd_compute(void *state, FloeKernelContext *ctx) {
  static const char *const names[] = {"var", "alpha", "delta"};
  floe_code rc = check_update(ctx, "rsr", names);
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t n = cu_host->tensor_num_elements(cu_host->ctx_input(ctx, 0));
  return cu_end(&c, cu_apply_sgd((CuStream)c.dev->compute, n, IN(0), IN(1), IN(2)),
                "ResourceApplyGradientDescent");
}

static floe_code momentum_compute(void *state, FloeKernelContext *ctx) {
  static const char *const names[] = {"var", "accum", "lr", "grad", "momentum"};
  floe_code rc = check_update(ctx, "rrsrs", names);
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t n = cu_host->tensor_num_elements(cu_host->ctx_input(ctx, 0));
  return cu_end(&c,
                cu_apply_momentum((CuStream)c.dev->compute, n, IN(0), IN(1), IN(2), IN(3), IN(4),
                                  nesterov_of(ctx)),
                "ResourceApplyMomentum");
}

static floe_code adam_compute(void *state, FloeKernelContext *ctx) {
  static const char *const names[] = {"var",   "m",     "v",       "beta1_power", "beta2_power",
                                      "lr",    "beta1", "beta2",   "epsilon",     "grad"};
  floe_code rc = check_update(ctx, "rrrssssssr", names);
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t n = cu_host->tensor_num_elements(cu_host->ctx_input(ctx, 0));
  return cu_end(&c,
                cu_apply_adam((CuStream)c.dev->compute, n, IN(0), IN(1), IN(2), IN(3), IN(4),
                              IN(5), IN(6), IN(7), IN(8), IN(9), nesterov_of(ctx)),
                "ResourceApplyAdam");
}

static floe_code assign_add_compute(void *state, FloeKernelContext *ctx) {
  static const char *const names[] = {"resource", "value"};
  floe_code rc = check_update(ctx, "rr", names);
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  const FloeTensor *var = cu_host->ctx_input(ctx, 0);
  return cu_end(&c,
                cu_assign_add((CuStream)c.dev->compute, cu_host->tensor_dtype(var),
                              cu_host->tensor_num_elements(var), IN(0), IN(1),
                              *(const int *)state),
                cu_host->ctx_op(ctx));
}

#undef IN

/* ------------------------------------------------------------------------------------ */

floe_code cu_register_elementwise(FloePluginRegistrar *reg) {
  static const struct {
    const char *op;
    BinaryState s;
    uint32_t types;
  } binaries[] = {
      {"Add", {CU_ADD, 0}, DT_CORE},
      {"Sub", {CU_SUB, 0}, DT_CORE},
      {"Mul", {CU_MUL, 0}, DT_CORE},
      {"Div", {CU_DIV, 0}, DT_FLOAT}, /* integer division by zero would need a host check */
      {"Pow", {CU_POW, 0}, DT_FLOAT},
      {"Maximum", {CU_MAX, 0}, DT_CORE},
      {"Minimum", {CU_MIN, 0}, DT_CORE},
      {"Equal", {CU_EQ, 0}, DT_CORE | FLOE_DTYPE_BIT(FLOE_BOOL)},
      {"NotEqual", {CU_NE, 0}, DT_CORE | FLOE_DTYPE_BIT(FLOE_BOOL)},
      {"Less", {CU_LT, 0}, DT_CORE},
      {"LessEqual", {CU_LE, 0}, DT_CORE},
      {"Greater", {CU_GT, 0}, DT_CORE},
      {"GreaterEqual", {CU_GE, 0}, DT_CORE},
      {"LogicalAnd", {CU_AND, 0}, 0},
      {"LogicalOr", {CU_OR, 0}, 0},
      {"ReluGrad", {CU_RELU_GRAD, 0}, DT_CORE},
      {"Relu6Grad", {CU_RELU6_GRAD, 0}, DT_CORE},
      {"SigmoidGrad", {CU_SIGMOID_GRAD, 0}, DT_FLOAT},
      {"TanhGrad", {CU_TANH_GRAD, 0}, DT_FLOAT},
      {"SqrtGrad", {CU_SQRT_GRAD, 0}, DT_FLOAT},
      {"RsqrtGrad", {CU_RSQRT_GRAD, 0}, DT_FLOAT},
      {"SoftplusGrad", {CU_SOFTPLUS_GRAD, 0}, DT_FLOAT},
      {"LeakyReluGrad", {CU_LEAKY_RELU_GRAD, 0.2}, DT_FLOAT},
  };
  static const struct {
    const char *op;
    UnaryState s;
    uint32_t types;
  } unaries[] = {
      {"Neg", {CU_NEG, 0}, DT_CORE},          {"Abs", {CU_ABS, 0}, DT_CORE},
      {"Square", {CU_SQUARE, 0}, DT_CORE},    {"Sqrt", {CU_SQRT, 0}, DT_FLOAT},
      {"Rsqrt", {CU_RSQRT, 0}, DT_FLOAT},     {"Exp", {CU_EXP, 0}, DT_FLOAT},
      {"Log", {CU_LOG, 0}, DT_FLOAT},         {"Relu", {CU_RELU, 0}, DT_CORE},
      {"Relu6", {CU_RELU6, 0}, DT_CORE},      {"Sigmoid", {CU_SIGMOID, 0}, DT_FLOAT},
      {"Tanh", {CU_TANH, 0}, DT_FLOAT},       {"Softplus", {CU_SOFTPLUS, 0}, DT_FLOAT},
      {"Sign", {CU_SIGN, 0}, DT_CORE},        {"Floor", {CU_FLOOR, 0}, DT_FLOAT},
      {"Sin", {CU_SIN, 0}, DT_FLOAT},         {"Cos", {CU_COS, 0}, DT_FLOAT},
      {"LeakyRelu", {CU_LEAKY_RELU, 0.2}, DT_FLOAT},
      {"Elu", {CU_ELU, 1.0}, DT_FLOAT},       {"LogicalNot", {CU_NOT, 0}, 0},
  };
  static const int add = 1, sub = -1;
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof binaries / sizeof binaries[0]; i++) {
    bool alpha = binaries[i].s.op == CU_LEAKY_RELU_GRAD;
    rc = cu_add_kernel(reg, binaries[i].op, binaries[i].types ? "T" : NULL, binaries[i].types, 0,
                       binary_compute, alpha ? alpha_create : NULL, alpha ? state_free : NULL,
                       (void *)&binaries[i].s);
  }
  for (size_t i = 0; rc == FLOE_OK && i < sizeof unaries / sizeof unaries[0]; i++) {
    bool alpha = unaries[i].s.op == CU_LEAKY_RELU || unaries[i].s.op == CU_ELU;
    rc = cu_add_kernel(reg, unaries[i].op, unaries[i].types ? "T" : NULL, unaries[i].types, 0,
                       unary_compute, alpha ? unary_alpha_create : NULL,
                       alpha ? state_free : NULL, (void *)&unaries[i].s);
  }
  const uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  struct {
    const char *op, *attr;
    uint32_t types;
    floe_code (*compute)(void *, FloeKernelContext *);
    floe_code (*create)(const FloeHostApi *, FloeKernelInit *, void *, void **);
    const void *arg;
  } more[] = {
      {"BiasAdd", "T", DT_CORE, bias_add_compute, format_create, NULL},
      {"AddN", "T", DT_CORE, add_n_compute, NULL, NULL},
      {"Cast", "SrcT", DT_ALL_CUDA, cast_compute, NULL, NULL},
      {"Select", "T", DT_ALL_CUDA, select_compute, NULL, NULL},
      {"ZerosLike", "T", DT_ALL_CUDA, fill_like_compute, NULL, &zero},
      {"OnesLike", "T", DT_ALL_CUDA, fill_like_compute, NULL, &one},
      {"Fill", "T", DT_ALL_CUDA, fill_compute, NULL, NULL},
      {"ResourceApplyGradientDescent", "T", f32, sgd_compute, NULL, NULL},
      {"ResourceApplyMomentum", "T", f32, momentum_compute, NULL, NULL},
      {"ResourceApplyAdam", "T", f32, adam_compute, NULL, NULL},
      {"AssignAddVariableOp", "dtype", DT_CORE, assign_add_compute, NULL, &add},
      {"AssignSubVariableOp", "dtype", DT_CORE, assign_add_compute, NULL, &sub},
  };
  for (size_t i = 0; rc == FLOE_OK && i < sizeof more / sizeof more[0]; i++)
    rc = cu_add_kernel(reg, more[i].op, more[i].attr, more[i].types, 0, more[i].compute,
                       more[i].create, more[i].create ? state_free : NULL, (void *)more[i].arg);
  return rc;
}
