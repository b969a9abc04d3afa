/* SPDX-License-Identifier: Apache-2.0 */
/* grad_elementwise.c - elementwise kernels that training adds: StopGradient, AddN,
 * the fused activation gradients (ReluGrad .. RsqrtGrad) and BiasAddGrad.
 *
 * The activation gradients are two-input rows over one contiguous run, one row per dtype, so
 * gcc vectorises them; f16/bf16 go through the f32 row in chunks and round once. Each
 * differentiates the very f32 math its forward op in elementwise.c uses (cpu_util.h).
 * AddN adds its inputs chunk by chunk, left to right, into an output chunk that stays in L1.
 * BiasAddGrad sums blocks of rows (or row segments) into partial sums in parallel, then
 * combines the partials in a fixed order, so results do not depend on the thread count. */
/* Vectorise whatever CFLAGS say, and let selects such as `f > 0 ? g : 0` become vector
 * blends: FP exception flags are never read. */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <math.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

#define HOT CPU_HOT

static int same_shape(const FloeTensor *a, const FloeTensor *b) {
  int r = cpu_host->tensor_rank(a);
  return r == cpu_host->tensor_rank(b) &&
         (r == 0 || memcmp(cpu_host->tensor_dims(a), cpu_host->tensor_dims(b),
                           (size_t)r * sizeof(int64_t)) == 0);
}

static char *tensor_shape(char *buf, const FloeTensor *t) {
  return cpu_shape_str(buf, CPU_SHAPE_STR_MAX, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

/* ------------------------------------------------------------------------------------ */
/* StopGradient: Identity forward (a view, no copy); autodiff stops at it. */

static floe_code stop_gradient_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  return cpu_host->ctx_forward_input(ctx, 0, 0, cpu_host->tensor_rank(x),
                                     cpu_host->tensor_dims(x));
}

/* ------------------------------------------------------------------------------------ */
/* Derivatives of the activations, in the forward ops' own f32 math. */

/* d/dx x Phi(x) = Phi(x) + x phi(x); the second term is 0 where phi underflows (x = +-Inf
 * would give Inf * 0). */
static inline float dgelu_erf_f32(float x) {
  float cdf = 0.5f * cpu_erfc_f32(-x * 0.70710678118654752f);
  float pdf = 0.39894228040143268f * cpu_exp_f32(-0.5f * x * x);
  float t = x * pdf;
  return cdf + (pdf == 0.0f ? 0.0f : t);
}

static inline double dgelu_erf_f64(double x) {
  double cdf = 0.5 * erfc(-x * 0.70710678118654752);
  double pdf = 0.39894228040143268 * exp(-0.5 * x * x);
  return cdf + (pdf == 0.0 ? 0.0 : x * pdf);
}

/* Forward: x s with s = sigmoid(2u), u = c (x + k x^3). d/dx = s + x 2 s (1 - s) u', where
 * s (1 - s) = e / (1 + e)^2 with e = exp(-|2u|) stays accurate in both tails. */
#define GELU_C 0.79788456080286536
#define GELU_K 0.044715

static inline float dgelu_tanh_f32(float x) {
  float v = 2.0f * (float)GELU_C * (x + (float)GELU_K * x * x * x);
  float e = cpu_exp_f32(-fabsf(v));
  float r = 1.0f / (1.0f + e);
  float s = v >= 0.0f ? r : e * r;
  float sp = e * r * r;
  float du = (float)GELU_C * (1.0f + 3.0f * (float)GELU_K * x * x);
  float t = x * 2.0f * sp * du;
  return s + (sp == 0.0f ? 0.0f : t);
}

static inline double dgelu_tanh_f64(double x) {
  double v = 2.0 * GELU_C * (x + GELU_K * x * x * x);
  double e = exp(-fabs(v));
  double r = 1.0 / (1.0 + e);
  double s = v >= 0.0 ? r : e * r;
  double sp = e * r * r;
  double t = x * 2.0 * sp * GELU_C * (1.0 + 3.0 * GELU_K * x * x);
  return s + (sp == 0.0 ? 0.0 : t);
}

/* ------------------------------------------------------------------------------------ */
/* Gradient rows: z[i] = f(a[i], b[i]) for i < n, a and b the op's two inputs in order; al is
 * the op's alpha attribute (0 when it has none). */

typedef void (*GradRow)(void *z, const void *a, const void *b, int64_t n, double alpha);

#define GRAD_ROW(NAME, ATTR, T, EXPR)                                                        \
  ATTR static void NAME(void *zv, const void *av, const void *bv, int64_t n, double alpha) { \
    T *restrict z = zv;                                                                      \
    const T *restrict as = av, *restrict bs = bv;                                            \
    const T al = (T)alpha;                                                                   \
    (void)al;                                                                                \
    for (int64_t i = 0; i < n; i++) {                                                        \
      T a = as[i], b = bs[i];                                                                \
      z[i] = (T)(EXPR);                                                                      \
    }                                                                                        \
  }

/* One expression for every numeric dtype. */
#define GRAD_NUMERIC(OP, EXPR)                                                               \
  GRAD_ROW(OP##_f32, HOT, float, EXPR)                                                       \
  GRAD_ROW(OP##_f64, HOT, double, EXPR)                                                      \
  GRAD_ROW(OP##_i8, , int8_t, EXPR)                                                          \
  GRAD_ROW(OP##_u8, , uint8_t, EXPR)                                                         \
  GRAD_ROW(OP##_i32, , int32_t, EXPR)                                                        \
  GRAD_ROW(OP##_i64, , int64_t, EXPR)

#define GRAD_FLOAT(OP, F32, F64)                                                             \
  GRAD_ROW(OP##_f32, HOT, float, F32)                                                        \
  GRAD_ROW(OP##_f64, HOT, double, F64)

#define ROWS_NUMERIC(OP)                                                                     \
  [FLOE_F32] = OP##_f32, [FLOE_F64] = OP##_f64, [FLOE_I8] = OP##_i8, [FLOE_U8] = OP##_u8,    \
  [FLOE_I32] = OP##_i32, [FLOE_I64] = OP##_i64
#define ROWS_FLOAT(OP) [FLOE_F32] = OP##_f32, [FLOE_F64] = OP##_f64

/* (gradients, features) */
GRAD_NUMERIC(relu_grad, b > 0 ? a : 0)
GRAD_NUMERIC(relu6_grad, (b > 0) & (b < 6) ? a : 0)
GRAD_FLOAT(leaky_relu_grad, b > 0 ? a : al * a, b > 0 ? a : al * a)
GRAD_FLOAT(gelu_erf_grad, a * dgelu_erf_f32(b), a * dgelu_erf_f64(b))
GRAD_FLOAT(gelu_tanh_grad, a * dgelu_tanh_f32(b), a * dgelu_tanh_f64(b))
GRAD_FLOAT(softplus_grad, a * cpu_sigmoid_f32(b), a * cpu_sigmoid_f64(b))
/* (gradients, outputs): Elu's derivative from its output, alpha e^x = y + alpha. */
GRAD_FLOAT(elu_grad, b > 0 ? a : a * (b + al), b > 0 ? a : a * (b + al))
/* (y, dy) */
GRAD_FLOAT(sigmoid_grad, b * a * (1.0f - a), b * a * (1.0 - a))
GRAD_FLOAT(tanh_grad, b * (1.0f - a * a), b * (1.0 - a * a))
GRAD_FLOAT(sqrt_grad, b * 0.5f / a, b * 0.5 / a)
GRAD_FLOAT(rsqrt_grad, b * -0.5f * (a * a * a), b * -0.5 * (a * a * a))

typedef struct GradOp {
  GradRow row[FLOE_DTYPE_LIMIT]; /* f16/bf16 run row[FLOE_F32] on converted chunks */
  int64_t cost;                  /* per element, nanoseconds-ish */
  const char *in0, *in1;         /* input names, for error messages */
} GradOp;

static const GradOp op_relu_grad = {{ROWS_NUMERIC(relu_grad)}, 1, "gradients", "features"};
static const GradOp op_relu6_grad = {{ROWS_NUMERIC(relu6_grad)}, 1, "gradients", "features"};
static const GradOp op_leaky_relu_grad = {{ROWS_FLOAT(leaky_relu_grad)}, 1, "gradients",
                                          "features"};
static const GradOp op_elu_grad = {{ROWS_FLOAT(elu_grad)}, 1, "gradients", "outputs"};
static const GradOp op_gelu_erf_grad = {{ROWS_FLOAT(gelu_erf_grad)}, 10, "gradients",
                                        "features"};
static const GradOp op_gelu_tanh_grad = {{ROWS_FLOAT(gelu_tanh_grad)}, 8, "gradients",
                                         "features"};
static const GradOp op_softplus_grad = {{ROWS_FLOAT(softplus_grad)}, 5, "gradients",
                                        "features"};
static const GradOp op_sigmoid_grad = {{ROWS_FLOAT(sigmoid_grad)}, 1, "y", "dy"};
static const GradOp op_tanh_grad = {{ROWS_FLOAT(tanh_grad)}, 1, "y", "dy"};
static const GradOp op_sqrt_grad = {{ROWS_FLOAT(sqrt_grad)}, 2, "y", "dy"};
static const GradOp op_rsqrt_grad = {{ROWS_FLOAT(rsqrt_grad)}, 1, "y", "dy"};

/* Kernel state: the op and its attribute, fixed per node. */
typedef struct GradState {
  const GradOp *op;
  double alpha;
} GradState;

/* Ops without attributes share these (state = user_data, never freed). */
static const GradState st_relu_grad = {&op_relu_grad, 0}, st_relu6_grad = {&op_relu6_grad, 0},
                       st_softplus_grad = {&op_softplus_grad, 0},
                       st_sigmoid_grad = {&op_sigmoid_grad, 0},
                       st_tanh_grad = {&op_tanh_grad, 0}, st_sqrt_grad = {&op_sqrt_grad, 0},
                       st_rsqrt_grad = {&op_rsqrt_grad, 0};
/* Templates for ops with attributes: op and the attribute's default (ops_std.def). */
static const GradState st_leaky_relu_grad = {&op_leaky_relu_grad, 0.2},
                       st_elu_grad = {&op_elu_grad, 1.0}, st_gelu_grad = {&op_gelu_erf_grad, 0};

/* LeakyReluGrad, EluGrad: read "alpha"; GeluGrad: "approximate" picks the tanh form. The
 * state is allocated here and freed by grad_attr_destroy. */
static floe_code grad_attr_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                  void **state) {
  const GradState *tmpl = user_data;
  GradState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *s = *tmpl;
  int approximate = 0;
  double alpha = tmpl->alpha;
  floe_code rc = cpu_activation_attrs(host, init, &approximate, &alpha);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  if (tmpl->op == &op_gelu_erf_grad)
    s->op = approximate ? &op_gelu_tanh_grad : &op_gelu_erf_grad;
  else
    s->alpha = alpha;
  *state = s;
  return FLOE_OK;
}

static void grad_attr_destroy(void *state) { cpu_host->free(state); }

typedef struct GradJob {
  GradRow row;
  double alpha;
  char *z;
  const char *a, *b;
  int64_t size; /* element size */
  FloeDType dt;
} GradJob;

static void grad_range(void *arg, int64_t begin, int64_t end) {
  const GradJob *j = arg;
  if (!cpu_is_half(j->dt) && j->z != j->a && j->z != j->b) {
    j->row(j->z + begin * j->size, j->a + begin * j->size, j->b + begin * j->size,
           end - begin, j->alpha);
    return;
  }
  if (!cpu_is_half(j->dt)) { /* written over a or b (buffer reuse): the rows are restrict */
    _Alignas(64) char chunk[CPU_OVER_CHUNK];
    int64_t per = CPU_OVER_CHUNK / j->size;
    for (int64_t c = begin; c < end; c += per) {
      int64_t m = end - c < per ? end - c : per;
      j->row(chunk, j->a + c * j->size, j->b + c * j->size, m, j->alpha);
      memcpy(j->z + c * j->size, chunk, (size_t)(m * j->size));
    }
    return;
  }
  float ab[CPU_HALF_CHUNK], bb[CPU_HALF_CHUNK], zb[CPU_HALF_CHUNK];
  const uint16_t *a = (const uint16_t *)j->a, *b = (const uint16_t *)j->b;
  uint16_t *z = (uint16_t *)j->z;
  for (int64_t c = begin; c < end; c += CPU_HALF_CHUNK) {
    int64_t m = end - c < CPU_HALF_CHUNK ? end - c : CPU_HALF_CHUNK;
    cpu_half_to_f32_row(ab, a + c, m, j->dt);
    cpu_half_to_f32_row(bb, b + c, m, j->dt);
    j->row(zb, ab, bb, m, j->alpha);
    cpu_f32_to_half_row(z + c, zb, m, j->dt);
  }
}

static floe_code grad_compute(void *state, FloeKernelContext *ctx) {
  const GradState *s = state;
  const FloeTensor *a = cpu_host->ctx_input(ctx, 0), *b = cpu_host->ctx_input(ctx, 1);
  FloeDType dt = cpu_host->tensor_dtype(a);
  GradRow row = s->op->row[cpu_is_half(dt) ? FLOE_F32 : dt];
  if (!row || cpu_host->tensor_dtype(b) != dt)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtypes %s and %s",
                                   cpu_host->dtype_name(dt),
                                   cpu_host->dtype_name(cpu_host->tensor_dtype(b)));
  if (!same_shape(a, b)) {
    char sa[CPU_SHAPE_STR_MAX], sb[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s %s and %s %s must have the same shape", s->op->in0,
                                   tensor_shape(sa, a), s->op->in1, tensor_shape(sb, b));
  }
  FloeTensor *out;
  floe_code rc = cpu_output_over(ctx, (const int[]){0, 1}, 2, cpu_host->tensor_rank(a),
                                 cpu_host->tensor_dims(a), &out);
  if (rc != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(a);
  if (n == 0) return FLOE_OK;
  GradJob j = {row,
               s->alpha,
               cpu_host->tensor_data(out),
               cpu_host->tensor_data(a),
               cpu_host->tensor_data(b),
               (int64_t)cpu_host->dtype_size(dt),
               dt};
  cpu_parallel_elements(n, s->op->cost, grad_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* AddN: out = ((in0 + in1) + in2) + ... for each element, in exactly that order (the same
 * bits as adding one input at a time). Integers wrap. f16/bf16 accumulate in f32 and round
 * once. */

/* Elements per chunk: the chunk of out stays in L1 while every input streams past it. */
#define ADDN_CHUNK 1024
/* Input pointers held on the stack before falling back to temporary memory. */
#define ADDN_STACK_INPUTS 16

/* out[c..c+m) of one chunk: the first up-to-four inputs in one pass, then three at a time. */
#define ADDN_FN(NAME, ATTR, T, ADD)                                                          \
  ATTR static void NAME(T *restrict out, const void *const *in, int n, int64_t begin,        \
                        int64_t end) {                                                       \
    for (int64_t c = begin; c < end; c += ADDN_CHUNK) {                                      \
      int64_t m = end - c < ADDN_CHUNK ? end - c : ADDN_CHUNK;                               \
      T *restrict o = out + c;                                                               \
      const T *restrict x0 = (const T *)in[0] + c;                                           \
      int k;                                                                                 \
      if (n == 1) {                                                                          \
        memcpy(o, x0, (size_t)m * sizeof(T));                                                \
        k = 1;                                                                               \
      } else if (n == 2) {                                                                   \
        const T *restrict x1 = (const T *)in[1] + c;                                         \
        for (int64_t i = 0; i < m; i++) o[i] = ADD(x0[i], x1[i]);                            \
        k = 2;                                                                               \
      } else if (n == 3) {                                                                   \
        const T *restrict x1 = (const T *)in[1] + c, *restrict x2 = (const T *)in[2] + c;    \
        for (int64_t i = 0; i < m; i++) o[i] = ADD(ADD(x0[i], x1[i]), x2[i]);                \
        k = 3;                                                                               \
      } else {                                                                               \
        const T *restrict x1 = (const T *)in[1] + c, *restrict x2 = (const T *)in[2] + c;    \
        const T *restrict x3 = (const T *)in[3] + c;                                         \
        for (int64_t i = 0; i < m; i++) o[i] = ADD(ADD(ADD(x0[i], x1[i]), x2[i]), x3[i]);    \
        k = 4;                                                                               \
      }                                                                                      \
      for (; k + 3 <= n; k += 3) {                                                           \
        const T *restrict x1 = (const T *)in[k] + c, *restrict x2 = (const T *)in[k + 1] + c; \
        const T *restrict x3 = (const T *)in[k + 2] + c;                                     \
        for (int64_t i = 0; i < m; i++) o[i] = ADD(ADD(ADD(o[i], x1[i]), x2[i]), x3[i]);     \
      }                                                                                      \
      for (; k < n; k++) {                                                                   \
        const T *restrict x1 = (const T *)in[k] + c;                                         \
        for (int64_t i = 0; i < m; i++) o[i] = ADD(o[i], x1[i]);                             \
      }                                                                                      \
    }                                                                                        \
  }

#define ADD_PLAIN(x, y) ((x) + (y))
#define ADD_I8(x, y) ((int8_t)((uint8_t)(x) + (uint8_t)(y)))
#define ADD_U8(x, y) ((uint8_t)((x) + (y)))
#define ADD_I32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define ADD_I64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))

ADDN_FN(addn_f32, HOT, float, ADD_PLAIN)
ADDN_FN(addn_f64, HOT, double, ADD_PLAIN)
ADDN_FN(addn_i8, , int8_t, ADD_I8)
ADDN_FN(addn_u8, , uint8_t, ADD_U8)
ADDN_FN(addn_i32, HOT, int32_t, ADD_I32)
ADDN_FN(addn_i64, HOT, int64_t, ADD_I64)

/* Half precision: an f32 accumulator chunk, each input widened as it is added. */
#define ADDN_HALF_FN(NAME, TO_F32, FROM_F32_ROW)                                             \
  HOT static void NAME(uint16_t *restrict out, const void *const *in, int n, int64_t begin,  \
                       int64_t end) {                                                        \
    float acc[ADDN_CHUNK];                                                                   \
    for (int64_t c = begin; c < end; c += ADDN_CHUNK) {                                      \
      int64_t m = end - c < ADDN_CHUNK ? end - c : ADDN_CHUNK;                               \
      const uint16_t *restrict x0 = (const uint16_t *)in[0] + c;                             \
      for (int64_t i = 0; i < m; i++) acc[i] = TO_F32(x0[i]);                                \
      for (int k = 1; k < n; k++) {                                                          \
        const uint16_t *restrict xk = (const uint16_t *)in[k] + c;                           \
        for (int64_t i = 0; i < m; i++) acc[i] += TO_F32(xk[i]);                             \
      }                                                                                      \
      FROM_F32_ROW(out + c, acc, m);                                                         \
    }                                                                                        \
  }
ADDN_HALF_FN(addn_f16, cpu_f16_to_f32, cpu_f32_to_f16_row)
ADDN_HALF_FN(addn_bf16, cpu_bf16_to_f32, cpu_f32_to_bf16_row)

typedef struct AddNJob {
  FloeDType dt;
  int n;
  const void *const *in;
  void *out;
} AddNJob;

static void addn_range(void *arg, int64_t begin, int64_t end) {
  const AddNJob *j = arg;
  switch (j->dt) {
    case FLOE_F32: addn_f32(j->out, j->in, j->n, begin, end); break;
    case FLOE_F64: addn_f64(j->out, j->in, j->n, begin, end); break;
    case FLOE_F16: addn_f16(j->out, j->in, j->n, begin, end); break;
    case FLOE_BF16: addn_bf16(j->out, j->in, j->n, begin, end); break;
    case FLOE_I8: addn_i8(j->out, j->in, j->n, begin, end); break;
    case FLOE_U8: addn_u8(j->out, j->in, j->n, begin, end); break;
    case FLOE_I32: addn_i32(j->out, j->in, j->n, begin, end); break;
    case FLOE_I64: addn_i64(j->out, j->in, j->n, begin, end); break;
    default: break; /* rejected in addn_compute */
  }
}

static floe_code addn_compute(void *state, FloeKernelContext *ctx) {
  int n = cpu_host->ctx_num_inputs(ctx);
  if (n < 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "AddN needs at least 1 input");
  const FloeTensor *x0 = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(x0);
  if (!(FLOE_DTYPE_BIT(dt) & FLOE_DTYPES_NUMERIC))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtype %s",
                                   cpu_host->dtype_name(dt));
  for (int k = 1; k < n; k++) {
    const FloeTensor *xk = cpu_host->ctx_input(ctx, k);
    if (cpu_host->tensor_dtype(xk) != dt)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "AddN inputs must have one dtype: input 0 is %s, input %d "
                                     "is %s",
                                     cpu_host->dtype_name(dt), k,
                                     cpu_host->dtype_name(cpu_host->tensor_dtype(xk)));
    if (!same_shape(x0, xk)) {
      char s0[CPU_SHAPE_STR_MAX], sk[CPU_SHAPE_STR_MAX];
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "AddN inputs must have one shape: input 0 is %s, input %d "
                                     "is %s",
                                     tensor_shape(s0, x0), k, tensor_shape(sk, xk));
    }
  }
  int rank = cpu_host->tensor_rank(x0);
  const int64_t *dims = cpu_host->tensor_dims(x0);
  if (n == 1) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  int64_t count = cpu_host->tensor_num_elements(x0);
  if (count == 0) return FLOE_OK;
  const void *stack_in[ADDN_STACK_INPUTS];
  const void **in = stack_in;
  if (n > ADDN_STACK_INPUTS) {
    void *mem;
    if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)n * sizeof *in, &mem)) != FLOE_OK)
      return rc;
    in = mem;
  }
  for (int k = 0; k < n; k++) in[k] = cpu_host->tensor_data(cpu_host->ctx_input(ctx, k));
  AddNJob j = {dt, n, in, cpu_host->tensor_data(out)};
  cpu_parallel_elements(count, n, addn_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* BiasAddGrad: out[c] = sum of out_backprop over every dim but the channel dim, seen as
 * [outer, C, inner] (NHWC: inner = 1; NCHW: outer = N, inner = the spatial size).
 *
 * inner = 1: units are blocks of BAG_ROWS_MIN+ rows by up to BAG_COLS columns, each summed
 *   into a partial row; the partial rows are then added column by column.
 * inner > 1: units are segments of up to BAG_SEG elements of one (n, c) row, each summed in
 *   BAG_LANES independent lanes; out[c] adds its segments over n.
 * Partials are f32 for the f32 family (combined in f64), f64 for f64, and wrapping 64-bit
 * integers for integers (the sum modulo 2^64 truncates to the sum modulo the dtype's width). */

#define BAG_COLS 256     /* columns per unit when C is wider than this */
#define BAG_ROWS_MIN 64  /* rows per unit at least, so the partials are <= 1/64 of the input */
#define BAG_BLOCK 16384  /* input elements per unit, aimed for */
#define BAG_SEG 16384    /* elements per segment of a long row */
#define BAG_LANES 32     /* independent accumulators of a segment */
#define BAG_NARROW 64    /* rows narrower than this are summed several at a time */

typedef struct BagJob {
  FloeDType dt;
  const void *x;
  int64_t outer, c, inner;
  int64_t rows, cols, ncb; /* inner = 1: unit size in rows and columns; column blocks */
  int64_t seg, nseg;       /* inner > 1: segment length; segments per row */
  void *part;              /* partial sums, one per unit (inner > 1) or per unit column */
} BagJob;

/* LOAD widens an element to the accumulator type A. */
#define LOAD_PLAIN(v) (v)
#define LOAD_SINT(v) ((uint64_t)(int64_t)(v))
#define LOAD_UINT(v) ((uint64_t)(v))

#define BIAS_GRAD_FNS(SFX, ATTR, T, A, LOAD)                                                 \
  /* part[0..w) = sums over `rows` rows of w columns, ld elements apart. */                  \
  ATTR static void bag_rows_##SFX(const T *restrict x, int64_t rows, int64_t ld, int64_t w,  \
                                  A *restrict part) {                                        \
    for (int64_t c = 0; c < w; c++) part[c] = 0;                                             \
    int64_t r = 0;                                                                           \
    if (w == ld && w < BAG_NARROW) {                                                         \
      /* k whole rows at a time are one run of k * w lanes, folded into part at the end. */  \
      A acc[2 * BAG_NARROW];                                                                 \
      int64_t k = (BAG_NARROW + w - 1) / w, lanes = k * w;                                   \
      for (int64_t j = 0; j < lanes; j++) acc[j] = 0;                                        \
      for (; r + k <= rows; r += k) {                                                        \
        const T *restrict xr = x + r * ld;                                                   \
        for (int64_t j = 0; j < lanes; j++) acc[j] += LOAD(xr[j]);                           \
      }                                                                                      \
      for (int64_t j = 0; j < lanes; j++) part[j % w] += acc[j];                             \
    } else {                                                                                 \
      for (; r + 2 <= rows; r += 2) {                                                        \
        const T *restrict x0 = x + r * ld, *restrict x1 = x0 + ld;                           \
        for (int64_t c = 0; c < w; c++) part[c] += LOAD(x0[c]) + LOAD(x1[c]);                \
      }                                                                                      \
    }                                                                                        \
    for (; r < rows; r++) {                                                                  \
      const T *restrict xr = x + r * ld;                                                     \
      for (int64_t c = 0; c < w; c++) part[c] += LOAD(xr[c]);                                \
    }                                                                                        \
  }                                                                                          \
  /* The sum of x[0..len). */                                                                \
  ATTR static A bag_seg_##SFX(const T *restrict x, int64_t len) {                            \
    A s = 0;                                                                                 \
    int64_t i = 0;                                                                           \
    if (len >= 2 * BAG_LANES) {                                                              \
      A acc[BAG_LANES];                                                                      \
      for (int j = 0; j < BAG_LANES; j++) acc[j] = 0;                                        \
      for (; i + BAG_LANES <= len; i += BAG_LANES)                                           \
        for (int j = 0; j < BAG_LANES; j++) acc[j] += LOAD(x[i + j]);                        \
      for (int j = 0; j < BAG_LANES; j++) s += acc[j];                                       \
    }                                                                                        \
    for (; i < len; i++) s += LOAD(x[i]);                                                    \
    return s;                                                                                \
  }                                                                                          \
  static void bag_range_##SFX(void *arg, int64_t begin, int64_t end) {                       \
    const BagJob *j = arg;                                                                   \
    const T *x = j->x;                                                                       \
    A *part = j->part;                                                                       \
    for (int64_t u = begin; u < end; u++) {                                                  \
      if (j->inner == 1) {                                                                   \
        int64_t r0 = u / j->ncb * j->rows, c0 = u % j->ncb * j->cols;                        \
        int64_t nr = j->outer - r0 < j->rows ? j->outer - r0 : j->rows;                      \
        int64_t nc = j->c - c0 < j->cols ? j->c - c0 : j->cols;                              \
        bag_rows_##SFX(x + r0 * j->c + c0, nr, j->c, nc, part + u / j->ncb * j->c + c0);     \
      } else {                                                                               \
        int64_t row = u / j->nseg, s0 = u % j->nseg * j->seg;                                \
        int64_t len = j->inner - s0 < j->seg ? j->inner - s0 : j->seg;                       \
        part[u] = bag_seg_##SFX(x + row * j->inner + s0, len);                               \
      }                                                                                      \
    }                                                                                        \
  }

BIAS_GRAD_FNS(f32, HOT, float, float, LOAD_PLAIN)
BIAS_GRAD_FNS(f64, HOT, double, double, LOAD_PLAIN)
BIAS_GRAD_FNS(f16, HOT, uint16_t, float, cpu_f16_to_f32)
BIAS_GRAD_FNS(bf16, HOT, uint16_t, float, cpu_bf16_to_f32)
BIAS_GRAD_FNS(i8, , int8_t, uint64_t, LOAD_SINT)
BIAS_GRAD_FNS(u8, , uint8_t, uint64_t, LOAD_UINT)
BIAS_GRAD_FNS(i32, , int32_t, uint64_t, LOAD_SINT)
BIAS_GRAD_FNS(i64, , int64_t, uint64_t, LOAD_SINT)

/* Partial k of channel c: k runs over row blocks (inner = 1) or over (n, segment). */
static inline int64_t bag_part_index(const BagJob *j, int64_t c, int64_t k) {
  return j->inner == 1 ? k * j->c + c : (k / j->nseg * j->c + c) * j->nseg + k % j->nseg;
}

/* out[c] = the nparts partials of channel c added in a fixed order. */
static void bag_finish(const BagJob *j, int64_t nparts, void *out) {
  FloeDType dt = j->dt;
  for (int64_t c = 0; c < j->c; c++) {
    if (dt == FLOE_F64 || dt == FLOE_F32 || cpu_is_half(dt)) {
      double f = 0;
      for (int64_t k = 0; k < nparts; k++)
        f += dt == FLOE_F64 ? ((const double *)j->part)[bag_part_index(j, c, k)]
                            : ((const float *)j->part)[bag_part_index(j, c, k)];
      if (dt == FLOE_F64)
        ((double *)out)[c] = f;
      else if (dt == FLOE_F32)
        ((float *)out)[c] = (float)f;
      else
        ((uint16_t *)out)[c] =
            dt == FLOE_F16 ? cpu_f32_to_f16((float)f) : cpu_f32_to_bf16((float)f);
    } else {
      uint64_t u = 0;
      for (int64_t k = 0; k < nparts; k++)
        u += ((const uint64_t *)j->part)[bag_part_index(j, c, k)];
      switch (dt) {
        case FLOE_I8: ((int8_t *)out)[c] = (int8_t)u; break;
        case FLOE_U8: ((uint8_t *)out)[c] = (uint8_t)u; break;
        case FLOE_I32: ((int32_t *)out)[c] = (int32_t)u; break;
        default: ((int64_t *)out)[c] = (int64_t)u; break;
      }
    }
  }
}

/* State: non-zero for NCHW; allocated here, freed by bag_destroy. */
static floe_code bag_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  const char *fmt = "NHWC";
  floe_code rc = host->attr_string(host->init_attrs(init), "data_format", &fmt);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\", got \"%s\"", fmt);
  int *nchw = host->alloc(sizeof *nchw);
  if (!nchw) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *nchw = strcmp(fmt, "NCHW") == 0;
  *state = nchw;
  return FLOE_OK;
}

static void bag_destroy(void *state) { cpu_host->free(state); }

static floe_code bag_compute(void *state, FloeKernelContext *ctx) {
  int nchw = *(const int *)state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(x);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *d = cpu_host->tensor_dims(x);
  if (rank < 2) {
    char sx[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "out_backprop must have rank >= 2, got %s",
                                   tensor_shape(sx, x));
  }
  static const FloeParallelFn ranges[FLOE_DTYPE_LIMIT] = {
      [FLOE_F32] = bag_range_f32, [FLOE_F64] = bag_range_f64, [FLOE_F16] = bag_range_f16,
      [FLOE_BF16] = bag_range_bf16, [FLOE_I8] = bag_range_i8, [FLOE_U8] = bag_range_u8,
      [FLOE_I32] = bag_range_i32, [FLOE_I64] = bag_range_i64};
  FloeParallelFn range = ranges[dt];
  if (!range)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtype %s",
                                   cpu_host->dtype_name(dt));
  int cdim = nchw ? 1 : rank - 1;
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 1, &d[cdim], &out);
  if (rc != FLOE_OK) return rc;
  BagJob j;
  memset(&j, 0, sizeof j);
  j.dt = dt;
  j.x = cpu_host->tensor_data(x);
  j.c = d[cdim];
  j.outer = 1;
  for (int i = 0; i < cdim; i++) j.outer *= d[i];
  j.inner = 1;
  for (int i = cdim + 1; i < rank; i++) j.inner *= d[i];
  if (j.c == 0) return FLOE_OK;
  size_t asize = dt == FLOE_F32 || cpu_is_half(dt) ? sizeof(float) : 8;
  int64_t units, nparts, cost;
  if (j.outer == 0 || j.inner == 0) {
    units = nparts = 0; /* an empty sum: zeros */
    cost = 1;
  } else if (j.inner == 1) {
    j.cols = j.c > BAG_COLS ? BAG_COLS : j.c;
    j.ncb = (j.c + j.cols - 1) / j.cols;
    j.rows = BAG_BLOCK / j.cols > BAG_ROWS_MIN ? BAG_BLOCK / j.cols : BAG_ROWS_MIN;
    nparts = (j.outer + j.rows - 1) / j.rows;
    units = nparts * j.ncb;
    cost = j.rows * j.cols;
  } else {
    j.seg = j.inner > BAG_SEG ? BAG_SEG : j.inner;
    j.nseg = (j.inner + j.seg - 1) / j.seg;
    nparts = j.outer * j.nseg;
    units = nparts * j.c;
    cost = j.seg;
  }
  void *part = NULL;
  size_t part_elems = (size_t)(j.inner == 1 ? nparts * j.c : units);
  if (part_elems > 0 &&
      (rc = cpu_host->ctx_allocate_temp(ctx, part_elems * asize, &part)) != FLOE_OK)
    return rc;
  j.part = part;
  cpu_parallel_for(units, cost, range, &j);
  bag_finish(&j, nparts, cpu_host->tensor_data(out));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_grad_elementwise(FloePluginRegistrar *reg) {
  const uint32_t numeric = FLOE_DTYPES_NUMERIC, flt = FLOE_DTYPES_FLOAT;
  const struct {
    const char *op;
    const GradState *k;
    uint32_t types;
    int has_attr; /* parsed per node by grad_attr_create */
  } grads[] = {
      {"ReluGrad", &st_relu_grad, numeric, 0},
      {"Relu6Grad", &st_relu6_grad, numeric, 0},
      {"LeakyReluGrad", &st_leaky_relu_grad, flt, 1},
      {"EluGrad", &st_elu_grad, flt, 1},
      {"GeluGrad", &st_gelu_grad, flt, 1},
      {"SigmoidGrad", &st_sigmoid_grad, flt, 0},
      {"TanhGrad", &st_tanh_grad, flt, 0},
      {"SoftplusGrad", &st_softplus_grad, flt, 0},
      {"SqrtGrad", &st_sqrt_grad, flt, 0},
      {"RsqrtGrad", &st_rsqrt_grad, flt, 0},
  };
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof grads / sizeof grads[0]; i++)
    rc = cpu_add_kernel(reg, grads[i].op, "T", grads[i].types, 0, grad_compute,
                        grads[i].has_attr ? grad_attr_create : NULL,
                        grads[i].has_attr ? grad_attr_destroy : NULL, (void *)grads[i].k);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "StopGradient", "T", FLOE_DTYPES_ALL, FLOE_KERNEL_INEXPENSIVE,
                        stop_gradient_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "AddN", "T", numeric, 0, addn_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "BiasAddGrad", "T", numeric, 0, bag_compute, bag_create,
                        bag_destroy, NULL);
  return rc;
}
