/* SPDX-License-Identifier: Apache-2.0 */
/* vector.c - the vector unit's elementwise work in f32: unary and binary ops with NumPy
 * broadcasting, activation gradients, BiasAdd / BiasAddGrad, AddN, Cast (f32 <-> i32), and
 * the views Identity and Reshape (no data moves: the output is the input's buffer).
 *
 * Each op's cost for the cycle model is its lane operations per output element (OPS[] below:
 * 1 for an add or a compare, more for a divide, a square root or a transcendental, which the
 * vector unit evaluates as short polynomial sequences). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim.h"

typedef enum VecOp {
  V_ADD, V_SUB, V_MUL, V_DIV, V_MAX, V_MIN,           /* binary, broadcasting */
  V_RELU_GRAD, V_SIGMOID_GRAD, V_TANH_GRAD,           /* binary, broadcasting */
  V_NEG, V_SQUARE, V_SQRT, V_RSQRT, V_EXP, V_LOG, V_RELU, V_SIGMOID, V_TANH, /* unary */
  V_NUM_OPS
} VecOp;

static const char *const NAMES[V_NUM_OPS] = {
    "Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "ReluGrad", "SigmoidGrad", "TanhGrad",
    "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Relu", "Sigmoid", "Tanh"};
/* Lane operations per element (cost model). */
static const double OPS[V_NUM_OPS] = {1, 1, 1, 4, 1, 1, 2, 3, 3, 1, 1, 4, 4, 8, 8, 1, 10, 10};
static const VecOp IDS[V_NUM_OPS] = {V_ADD, V_SUB, V_MUL, V_DIV, V_MAX, V_MIN, V_RELU_GRAD,
                                     V_SIGMOID_GRAD, V_TANH_GRAD, V_NEG, V_SQUARE, V_SQRT,
                                     V_RSQRT, V_EXP, V_LOG, V_RELU, V_SIGMOID, V_TANH};

static bool is_unary(VecOp op) { return op >= V_NEG; }

static inline float sigmoid(float x) {
  float e = expf(-fabsf(x)); /* never overflows */
  float r = 1.0f / (1.0f + e);
  return x >= 0 ? r : e * r;
}

static inline float unary(VecOp op, float x) {
  switch (op) {
    case V_NEG: return -x;
    case V_SQUARE: return x * x;
    case V_SQRT: return sqrtf(x);
    case V_RSQRT: return 1.0f / sqrtf(x);
    case V_EXP: return expf(x);
    case V_LOG: return logf(x);
    case V_RELU: return x > 0 ? x : 0.0f;
    case V_SIGMOID: return sigmoid(x);
    default: return tanhf(x);
  }
}

/* Binary runs: z[i] = f(x[i * sx], y[i * sy]), sx and sy 0 (broadcast) or 1. */
static void binary_run(VecOp op, float *restrict z, const float *x, int64_t sx, const float *y,
                       int64_t sy, int64_t len) {
#define RUN(EXPR)                                                                            \
  for (int64_t i = 0; i < len; i++) {                                                        \
    float a = x[i * sx], b = y[i * sy];                                                      \
    z[i] = (EXPR);                                                                           \
  }                                                                                          \
  break
  switch (op) {
    case V_ADD: RUN(a + b);
    case V_SUB: RUN(a - b);
    case V_MUL: RUN(a * b);
    case V_DIV: RUN(a / b);
    case V_MAX: RUN(a > b || a != a ? a : b); /* NaN propagates, as TensorFlow's */
    case V_MIN: RUN(a < b || a != a ? a : b);
    case V_RELU_GRAD: RUN(b > 0 ? a : 0.0f);       /* gradients, features */
    case V_SIGMOID_GRAD: RUN(b * a * (1.0f - a));  /* y, dy */
    case V_TANH_GRAD: RUN(b * (1.0f - a * a));     /* y, dy */
    default: break;
  }
#undef RUN
}

/* ---------------------------------------------------------------------------------- */
/* Broadcasting: the output shape, and per input an element stride for each output dim (0
 * where it is broadcast). Neighbouring dims that every input treats alike (both spanned or
 * both broadcast) merge, so [N,H,W,C] + [C] runs as [N*H*W, C] with long inner rows. */

typedef struct Bcast {
  int rank;                     /* collapsed, >= 1 */
  int64_t dims[FLOE_MAX_DIMS];
  int64_t st[2][FLOE_MAX_DIMS]; /* element strides of the two inputs */
  int64_t total;
  int out_rank;                 /* uncollapsed output shape */
  int64_t out_dims[FLOE_MAX_DIMS];
} Bcast;

static floe_code bcast_plan(FloeKernelContext *ctx, const FloeTensor *x, const FloeTensor *y,
                            Bcast *b) {
  int xr = tpu_host->tensor_rank(x), yr = tpu_host->tensor_rank(y);
  const int64_t *xd = tpu_host->tensor_dims(x), *yd = tpu_host->tensor_dims(y);
  int r = xr > yr ? xr : yr;
  bool full[2][FLOE_MAX_DIMS];
  for (int d = 0; d < r; d++) {
    int xi = d - (r - xr), yi = d - (r - yr);
    int64_t a = xi >= 0 ? xd[xi] : 1, c = yi >= 0 ? yd[yi] : 1;
    if (a != c && a != 1 && c != 1) {
      char sx[TPU_SHAPE_STR_MAX], sy[TPU_SHAPE_STR_MAX];
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "incompatible shapes for broadcasting: %s vs %s",
                                     tpu_shape_str(x, sx, sizeof sx), tpu_shape_str(y, sy, sizeof sy));
    }
    b->out_dims[d] = a == 1 ? c : a;
    full[0][d] = a == b->out_dims[d];
    full[1][d] = c == b->out_dims[d];
  }
  b->out_rank = r;
  b->total = 1;
  int n = 0;
  bool pat[2][FLOE_MAX_DIMS];
  for (int d = 0; d < r; d++) {
    b->total *= b->out_dims[d];
    if (b->out_dims[d] == 1) continue; /* moves nothing */
    if (n > 0 && pat[0][n - 1] == full[0][d] && pat[1][n - 1] == full[1][d]) {
      b->dims[n - 1] *= b->out_dims[d];
    } else {
      pat[0][n] = full[0][d];
      pat[1][n] = full[1][d];
      b->dims[n++] = b->out_dims[d];
    }
  }
  if (n == 0) {
    b->dims[0] = 1;
    pat[0][0] = pat[1][0] = true;
    n = 1;
  }
  b->rank = n;
  for (int k = 0; k < 2; k++) {
    int64_t step = 1;
    for (int d = n - 1; d >= 0; d--) {
      b->st[k][d] = pat[k][d] ? step : 0;
      if (pat[k][d]) step *= b->dims[d];
    }
  }
  return FLOE_OK;
}

typedef struct BinJob {
  VecOp op;
  const Bcast *b;
  const float *x, *y;
  float *z;
} BinJob;

/* Rows [begin, end) of the collapsed output (a row: the innermost dim). */
static void binary_rows(void *arg, int64_t begin, int64_t end) {
  const BinJob *j = arg;
  const Bcast *b = j->b;
  int in = b->rank - 1;
  int64_t len = b->dims[in];
  for (int64_t r = begin; r < end; r++) {
    int64_t xo = 0, yo = 0, rest = r;
    for (int d = in - 1; d >= 0; d--) {
      int64_t i = rest % b->dims[d];
      rest /= b->dims[d];
      xo += i * b->st[0][d];
      yo += i * b->st[1][d];
    }
    binary_run(j->op, j->z + r * len, j->x + xo, b->st[0][in], j->y + yo, b->st[1][in], len);
  }
}

typedef struct UnJob {
  VecOp op;
  const float *x;
  float *y;
} UnJob;

static void unary_range(void *arg, int64_t begin, int64_t end) {
  const UnJob *j = arg;
  for (int64_t i = begin; i < end; i++) j->y[i] = unary(j->op, j->x[i]);
}

static floe_code vec_compute(void *state, FloeKernelContext *ctx) {
  VecOp op = *(const VecOp *)state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0);
  FloeTensor *out;
  float *z;
  int64_t n;
  double bytes;
  if (is_unary(op)) {
    n = tpu_host->tensor_num_elements(x);
    if ((rc = tpu_output(ctx, 0, tpu_host->tensor_rank(x), tpu_host->tensor_dims(x), &out,
                         (void **)&z)) != FLOE_OK)
      return rc;
    UnJob j = {op, tpu_host->tensor_data(x), z};
    tpu_parallel_for(n, (int64_t)OPS[op], unary_range, &j);
    bytes = 8.0 * (double)n;
  } else {
    const FloeTensor *y = tpu_host->ctx_input(ctx, 1);
    Bcast b;
    if ((rc = bcast_plan(ctx, x, y, &b)) != FLOE_OK) return rc;
    if ((rc = tpu_output(ctx, 0, b.out_rank, b.out_dims, &out, (void **)&z)) != FLOE_OK) return rc;
    n = b.total;
    if (n > 0) {
      BinJob j = {op, &b, tpu_host->tensor_data(x), tpu_host->tensor_data(y), z};
      int64_t len = b.dims[b.rank - 1];
      tpu_parallel_for(n / len, len * (int64_t)OPS[op] + 1, binary_rows, &j);
    }
    bytes = 4.0 * (double)(tpu_host->tensor_num_elements(x) + tpu_host->tensor_num_elements(y) + n);
  }
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, OPS[op] * (double)n, bytes));
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* BiasAdd and BiasAddGrad: the channel dim is the last (NHWC) or dim 1 (NCHW); the tensor is
 * seen as [outer, C, inner]. */

typedef struct BiasState {
  bool nchw;
} BiasState;

static floe_code bias_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  (void)user_data;
  const char *fmt = "NHWC";
  floe_code rc = host->attr_string(host->init_attrs(init), "data_format", &fmt);
  if ((rc != FLOE_OK && rc != FLOE_NOT_FOUND) ||
      (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\"");
  BiasState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->nchw = strcmp(fmt, "NCHW") == 0;
  *state = s;
  return FLOE_OK;
}

static void bias_destroy(void *state) { tpu_host->free(state); }

/* [outer, C, inner] of t; an error when t's rank cannot hold the channel dim. */
static floe_code bias_geometry(FloeKernelContext *ctx, const BiasState *s, const FloeTensor *t,
                               int64_t *outer, int64_t *c, int64_t *inner) {
  int r = tpu_host->tensor_rank(t);
  const int64_t *d = tpu_host->tensor_dims(t);
  char b[TPU_SHAPE_STR_MAX];
  if (r < (s->nchw ? 2 : 1))
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "value must have rank >= %d for %s, got %s", s->nchw ? 2 : 1,
                                   s->nchw ? "NCHW" : "NHWC", tpu_shape_str(t, b, sizeof b));
  int cd = s->nchw ? 1 : r - 1;
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < cd; i++) *outer *= d[i];
  for (int i = cd + 1; i < r; i++) *inner *= d[i];
  *c = d[cd];
  return FLOE_OK;
}

typedef struct BiasJob {
  int64_t c, inner;
  const float *v, *b;
  float *o;
} BiasJob;

static void bias_rows(void *arg, int64_t begin, int64_t end) {
  const BiasJob *j = arg;
  for (int64_t r = begin; r < end; r++) { /* row r = (outer, channel) */
    float bias = j->b[r % j->c];
    const float *v = j->v + r * j->inner;
    float *o = j->o + r * j->inner;
    for (int64_t i = 0; i < j->inner; i++) o[i] = v[i] + bias;
  }
}

static floe_code bias_add_compute(void *state, FloeKernelContext *ctx) {
  const BiasState *s = state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *v = tpu_host->ctx_input(ctx, 0), *b = tpu_host->ctx_input(ctx, 1);
  int64_t outer, c, inner;
  if ((rc = bias_geometry(ctx, s, v, &outer, &c, &inner)) != FLOE_OK) return rc;
  char sv[TPU_SHAPE_STR_MAX], sb[TPU_SHAPE_STR_MAX];
  if (tpu_host->tensor_rank(b) != 1 || tpu_host->tensor_dims(b)[0] != c)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "bias %s must be a vector of the %lld channels of value %s",
                                   tpu_shape_str(b, sb, sizeof sb), (long long)c,
                                   tpu_shape_str(v, sv, sizeof sv));
  FloeTensor *out;
  float *o;
  if ((rc = tpu_output(ctx, 0, tpu_host->tensor_rank(v), tpu_host->tensor_dims(v), &out,
                       (void **)&o)) != FLOE_OK)
    return rc;
  BiasJob j = {c, inner, tpu_host->tensor_data(v), tpu_host->tensor_data(b), o};
  tpu_parallel_for(outer * c, inner + 1, bias_rows, &j);
  double n = (double)(outer * c * inner);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, n, 8.0 * n + 4.0 * (double)c));
  return FLOE_OK;
}

typedef struct BiasGradJob {
  int64_t outer, c, inner;
  const float *g;
  float *db;
} BiasGradJob;

/* Channels [begin, end): db[ch] = the sum of its outer * inner gradients (in double, so the
 * result does not depend on how the work was split). */
static void bias_grad_channels(void *arg, int64_t begin, int64_t end) {
  const BiasGradJob *j = arg;
  for (int64_t ch = begin; ch < end; ch++) {
    double s = 0;
    for (int64_t o = 0; o < j->outer; o++) {
      const float *row = j->g + (o * j->c + ch) * j->inner;
      for (int64_t i = 0; i < j->inner; i++) s += row[i];
    }
    j->db[ch] = (float)s;
  }
}

static floe_code bias_grad_compute(void *state, FloeKernelContext *ctx) {
  const BiasState *s = state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *g = tpu_host->ctx_input(ctx, 0);
  int64_t outer, c, inner;
  if ((rc = bias_geometry(ctx, s, g, &outer, &c, &inner)) != FLOE_OK) return rc;
  FloeTensor *out;
  float *db;
  if ((rc = tpu_output(ctx, 0, 1, &c, &out, (void **)&db)) != FLOE_OK) return rc;
  BiasGradJob j = {outer, c, inner, tpu_host->tensor_data(g), db};
  tpu_parallel_for(c, outer * inner + 1, bias_grad_channels, &j);
  double n = (double)(outer * c * inner);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, n, 4.0 * (n + (double)c)));
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* AddN, Cast, Identity, Reshape. */

static floe_code addn_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  int k = tpu_host->ctx_num_inputs(ctx);
  const FloeTensor *x0 = tpu_host->ctx_input(ctx, 0);
  int64_t n = tpu_host->tensor_num_elements(x0);
  for (int i = 1; i < k; i++) {
    const FloeTensor *xi = tpu_host->ctx_input(ctx, i);
    if (tpu_host->tensor_rank(xi) != tpu_host->tensor_rank(x0) ||
        memcmp(tpu_host->tensor_dims(xi), tpu_host->tensor_dims(x0),
               (size_t)tpu_host->tensor_rank(x0) * sizeof(int64_t)) != 0) {
      char a[TPU_SHAPE_STR_MAX], b[TPU_SHAPE_STR_MAX];
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "inputs must have one shape: input 0 is %s, input %d is %s",
                                     tpu_shape_str(x0, a, sizeof a), i,
                                     tpu_shape_str(xi, b, sizeof b));
    }
  }
  FloeTensor *out;
  float *z;
  if ((rc = tpu_output(ctx, 0, tpu_host->tensor_rank(x0), tpu_host->tensor_dims(x0), &out,
                       (void **)&z)) != FLOE_OK)
    return rc;
  if (n > 0) {
    memcpy(z, tpu_host->tensor_data(x0), (size_t)n * sizeof(float));
    for (int i = 1; i < k; i++) {
      const float *xi = tpu_host->tensor_data(tpu_host->ctx_input(ctx, i));
      for (int64_t e = 0; e < n; e++) z[e] += xi[e];
    }
  }
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, (double)n * (k - 1),
                                        4.0 * (double)n * (k + 1)));
  return FLOE_OK;
}

/* f32 <-> i32 (and each to itself). f32 to i32 truncates toward zero and saturates; NaN gives
 * 0 (the CPU plugin's rules). */
static floe_code cast_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0);
  FloeDType from = tpu_host->tensor_dtype(x), to = tpu_host->ctx_output_dtype(ctx, 0);
  if ((from != FLOE_F32 && from != FLOE_I32) || (to != FLOE_F32 && to != FLOE_I32))
    return tpu_host->ctx_set_error(ctx, FLOE_UNIMPLEMENTED,
                                   "tpu-sim casts between f32 and i32 only, not %s to %s",
                                   tpu_host->dtype_name(from), tpu_host->dtype_name(to));
  FloeTensor *out;
  void *y;
  if ((rc = tpu_output(ctx, 0, tpu_host->tensor_rank(x), tpu_host->tensor_dims(x), &out, &y)) !=
      FLOE_OK)
    return rc;
  int64_t n = tpu_host->tensor_num_elements(x);
  const void *xv = tpu_host->tensor_data(x);
  if (from == to) {
    if (n) memcpy(y, xv, (size_t)n * 4);
  } else if (from == FLOE_F32) {
    const float *s = xv;
    int32_t *d = y;
    for (int64_t i = 0; i < n; i++) {
      float v = s[i];
      d[i] = v != v ? 0 : v <= -2147483648.0f ? INT32_MIN : v >= 2147483648.0f ? INT32_MAX : (int32_t)v;
    }
  } else {
    const int32_t *s = xv;
    float *d = y;
    for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
  }
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, (double)n, 8.0 * (double)n));
  return FLOE_OK;
}

static floe_code identity_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0);
  rc = tpu_host->ctx_forward_input(ctx, 0, 0, tpu_host->tensor_rank(x), tpu_host->tensor_dims(x));
  if (rc == FLOE_OK) tpu_report_ns(ctx, tpu_chip(ctx)->cfg->launch_ns); /* a view: launch only */
  return rc;
}

/* Reshape(tensor, shape): shape is an i32 or i64 vector with at most one -1, read from the
 * chip's memory by the chip's scalar unit. */
static floe_code reshape_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0), *sh = tpu_host->ctx_input(ctx, 1);
  FloeDType sdt = tpu_host->tensor_dtype(sh);
  int64_t k = tpu_host->tensor_num_elements(sh);
  char a[TPU_SHAPE_STR_MAX], b[TPU_SHAPE_STR_MAX];
  if ((sdt != FLOE_I32 && sdt != FLOE_I64) || tpu_host->tensor_rank(sh) > 1 || k > FLOE_MAX_DIMS)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "shape must be an i32 or i64 vector of at most %d dims, got "
                                   "%s %s", FLOE_MAX_DIMS, tpu_host->dtype_name(sdt),
                                   tpu_shape_str(sh, a, sizeof a));
  int64_t dims[FLOE_MAX_DIMS], known = 1, n = tpu_host->tensor_num_elements(x);
  int unknown = -1;
  const void *sv = tpu_host->tensor_data(sh);
  for (int64_t i = 0; i < k; i++) {
    dims[i] = sdt == FLOE_I32 ? ((const int32_t *)sv)[i] : ((const int64_t *)sv)[i];
    if (dims[i] == -1 && unknown < 0) {
      unknown = (int)i;
    } else if (dims[i] < 0) {
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "shape %s may hold one -1 and sizes >= 0 only",
                                     tpu_dims_str((int)k, dims, b, sizeof b));
    } else {
      known *= dims[i];
    }
  }
  if (unknown >= 0) dims[unknown] = known ? n / known : 0;
  int64_t total = 1;
  for (int64_t i = 0; i < k; i++) total *= dims[i];
  if (total != n)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot reshape %s (%lld elements) to %s",
                                   tpu_shape_str(x, a, sizeof a), (long long)n,
                                   tpu_dims_str((int)k, dims, b, sizeof b));
  rc = tpu_host->ctx_forward_input(ctx, 0, 0, (int)k, dims);
  if (rc == FLOE_OK) tpu_report_ns(ctx, tpu_chip(ctx)->cfg->launch_ns);
  return rc;
}

floe_code tpu_register_vector(FloePluginRegistrar *reg) {
  uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  floe_code rc = FLOE_OK;
  for (int i = 0; i < V_NUM_OPS && rc == FLOE_OK; i++)
    rc = tpu_add_kernel(reg, NAMES[i], "T", f32, 0, vec_compute, NULL, NULL, (void *)&IDS[i]);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "BiasAdd", "T", f32, 0, bias_add_compute, bias_create, bias_destroy,
                        NULL);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "BiasAddGrad", "T", f32, 0, bias_grad_compute, bias_create,
                        bias_destroy, NULL);
  if (rc == FLOE_OK) rc = tpu_add_kernel(reg, "AddN", "T", f32, 0, addn_compute, NULL, NULL, NULL);
  uint32_t f32i32 = f32 | FLOE_DTYPE_BIT(FLOE_I32);
  if (rc == FLOE_OK) {
    /* Both type attributes constrained: two constraints in one definition. */
    FloeTypeConstraint c[2] = {{"SrcT", f32i32}, {"DstT", f32i32}};
    FloeKernelDef k;
    memset(&k, 0, sizeof k);
    k.struct_size = sizeof k;
    k.op = "Cast";
    k.device_type = "TPU_SIM";
    k.constraints = c;
    k.num_constraints = 2;
    k.compute = cast_compute;
    rc = reg->register_kernel(reg, &k);
  }
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "Identity", "T", FLOE_DTYPES_ALL, FLOE_KERNEL_INEXPENSIVE, identity_compute, NULL,
                        NULL, NULL);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "Reshape", "T", FLOE_DTYPES_ALL, FLOE_KERNEL_INEXPENSIVE, reshape_compute, NULL,
                        NULL, NULL);
  return rc;
}
