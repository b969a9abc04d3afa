/* SPDX-License-Identifier: Apache-2.0 */
/* softmax.c - Softmax, LogSoftmax, the softmax cross-entropy losses and OneHot of the CPU
 * plugin.
 *
 * Softmax runs on x viewed as [O, R, I] (softmax over R). Each row is done in three passes
 * (max, exp(x - max) with its sum, scale) so large logits never overflow; sums of
 * exponentials accumulate in f64. f32 uses the vectorisable exp/log of cpu_util.h; f16 and
 * bf16 are converted to f32, computed, and converted back.
 */
/* Vectorise whatever CFLAGS say (at -O2 gcc's "very cheap" model vectorises almost none of
 * these loops), and let selects such as Max's become vector blends: FP exception flags are
 * never read. */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

#define SM_CHUNK 256 /* inner elements per block when the softmax axis is not the last */
#define SM_LANES 8   /* independent accumulators of the row loops */
#define SM_MAX(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))

/* "[2,3,4]" for error messages, in a buffer that lives until the end of the enclosing block. */
#define SHAPE(rank, dims) \
  cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX, (rank), (dims))

/* Row helpers inline into their CPU_HOT callers, so each clone gets its own vector width. */
#define CPU_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------------ */
/* Reference-shaped kernels for one float type T, generated for f32 and f64. Rows are
 * contiguous; y may equal x (the f16/bf16 path works in place in an f32 copy). */

#define DEF_SOFTMAX_KERNELS(N, T, EXP)                                                             \
  /* max of x[0..n), NaN if any is (the select form is the one gcc vectorises) */                  \
  CPU_INLINE T N##_row_max(const T *x, int64_t n) {                                                \
    T l[4 * SM_LANES];                                                                             \
    for (int j = 0; j < 4 * SM_LANES; j++) l[j] = -INFINITY;                                       \
    int64_t i = 0;                                                                                 \
    for (; i + 4 * SM_LANES <= n; i += 4 * SM_LANES)                                               \
      for (int j = 0; j < 4 * SM_LANES; j++) l[j] = SM_MAX(l[j], x[i + j]);                        \
    for (; i < n; i++) l[0] = SM_MAX(l[0], x[i]);                                                  \
    for (int j = 1; j < 4 * SM_LANES; j++) l[0] = SM_MAX(l[0], l[j]);                              \
    return l[0];                                                                                   \
  }                                                                                                \
  /* e[i] = exp(x[i] - m); returns the sum of e in f64 */                                          \
  CPU_INLINE double N##_row_exp(const T *x, T *e, int64_t n, T m) {                                \
    for (int64_t i = 0; i < n; i++) e[i] = EXP(x[i] - m);                                          \
    double l[SM_LANES] = {0};                                                                      \
    int64_t i = 0;                                                                                 \
    for (; i + SM_LANES <= n; i += SM_LANES)                                                       \
      for (int j = 0; j < SM_LANES; j++) l[j] += e[i + j];                                         \
    for (; i < n; i++) l[0] += e[i];                                                               \
    double s = 0;                                                                                  \
    for (int j = 0; j < SM_LANES; j++) s += l[j];                                                  \
    return s;                                                                                      \
  }                                                                                                \
  /* the sum of exp(x[i] - m) in f64, x left alone */                                              \
  CPU_INLINE double N##_row_expsum(const T *x, int64_t n, T m) {                                   \
    double l[SM_LANES] = {0};                                                                      \
    int64_t i = 0;                                                                                 \
    for (; i + SM_LANES <= n; i += SM_LANES)                                                       \
      for (int j = 0; j < SM_LANES; j++) l[j] += EXP(x[i + j] - m);                                \
    for (; i < n; i++) l[0] += EXP(x[i] - m);                                                      \
    double s = 0;                                                                                  \
    for (int j = 0; j < SM_LANES; j++) s += l[j];                                                  \
    return s;                                                                                      \
  }                                                                                                \
  /* x, y [n, R]: softmax (or log-softmax) of each row */                                          \
  CPU_HOT static void N##_softmax_rows(const T *x, T *y, int64_t n, int64_t R, int log_sm) {       \
    for (int64_t k = 0; k < n; k++) {                                                              \
      const T *xr = x + k * R;                                                                     \
      T *yr = y + k * R;                                                                           \
      T m = N##_row_max(xr, R);                                                                    \
      if (log_sm) {                                                                                \
        T ls = (T)log(N##_row_expsum(xr, R, m));                                                   \
        for (int64_t r = 0; r < R; r++) yr[r] = (xr[r] - m) - ls;                                  \
      } else {                                                                                     \
        T inv = (T)(1.0 / N##_row_exp(xr, yr, R, m));                                              \
        for (int64_t r = 0; r < R; r++) yr[r] *= inv;                                              \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  /* x, y [R, ld], columns [0, w) (w <= SM_CHUNK): softmax along R of each column */               \
  CPU_HOT static void N##_softmax_cols(const T *x, T *y, int64_t R, int64_t w, int64_t ld,         \
                                       int log_sm) {                                               \
    T m[SM_CHUNK], f[SM_CHUNK];                                                                    \
    double s[SM_CHUNK];                                                                            \
    for (int64_t i = 0; i < w; i++) m[i] = -INFINITY, s[i] = 0;                                    \
    for (int64_t r = 0; r < R; r++)                                                                \
      for (int64_t i = 0; i < w; i++) m[i] = SM_MAX(m[i], x[r * ld + i]);                          \
    if (log_sm) /* only the sums: log_sm still reads x, which y may alias */                       \
      for (int64_t r = 0; r < R; r++)                                                              \
        for (int64_t i = 0; i < w; i++) s[i] += EXP(x[r * ld + i] - m[i]);                         \
    else                                                                                           \
      for (int64_t r = 0; r < R; r++)                                                              \
        for (int64_t i = 0; i < w; i++) {                                                          \
          T e = EXP(x[r * ld + i] - m[i]);                                                         \
          y[r * ld + i] = e;                                                                       \
          s[i] += e;                                                                               \
        }                                                                                          \
    if (log_sm) {                                                                                  \
      for (int64_t i = 0; i < w; i++) f[i] = (T)log(s[i]);                                         \
      for (int64_t r = 0; r < R; r++)                                                              \
        for (int64_t i = 0; i < w; i++) y[r * ld + i] = (x[r * ld + i] - m[i]) - f[i];             \
    } else {                                                                                       \
      for (int64_t i = 0; i < w; i++) f[i] = (T)(1.0 / s[i]);                                      \
      for (int64_t r = 0; r < R; r++)                                                              \
        for (int64_t i = 0; i < w; i++) y[r * ld + i] *= f[i];                                     \
    }                                                                                              \
  }                                                                                                \
  /* x, lab, bp [n, C], loss [n]: loss = -sum lab * log_softmax(x), bp = softmax(x) - lab.         \
   * Sparse when lab is NULL: the labels are the class indices cls[n]. */                          \
  CPU_HOT static void N##_xent_rows(const T *x, const T *lab, const int64_t *cls, T *loss,         \
                                    T *bp, int64_t n, int64_t C) {                                 \
    for (int64_t k = 0; k < n; k++) {                                                              \
      const T *xr = x + k * C;                                                                     \
      T *br = bp + k * C;                                                                          \
      T m = N##_row_max(xr, C);                                                                    \
      double s = N##_row_exp(xr, br, C, m);                                                        \
      T ls = (T)log(s), inv = (T)(1.0 / s);                                                        \
      for (int64_t c = 0; c < C; c++) br[c] *= inv;                                                \
      if (lab) {                                                                                   \
        const T *lr = lab + k * C;                                                                 \
        double l[SM_LANES] = {0};                                                                  \
        int64_t c = 0;                                                                             \
        for (; c + SM_LANES <= C; c += SM_LANES)                                                   \
          for (int j = 0; j < SM_LANES; j++) l[j] += lr[c + j] * (ls - (xr[c + j] - m));           \
        for (; c < C; c++) l[0] += lr[c] * (ls - (xr[c] - m));                                     \
        double t = 0;                                                                              \
        for (int j = 0; j < SM_LANES; j++) t += l[j];                                              \
        loss[k] = (T)t;                                                                            \
        for (c = 0; c < C; c++) br[c] -= lr[c];                                                    \
      } else {                                                                                     \
        loss[k] = ls - (xr[cls[k]] - m);                                                           \
        br[cls[k]] -= 1;                                                                           \
      }                                                                                            \
    }                                                                                              \
  }

DEF_SOFTMAX_KERNELS(f32, float, cpu_exp_f32)
DEF_SOFTMAX_KERNELS(f64, double, exp)

/* ------------------------------------------------------------------------------------ */
/* f16 / bf16 work in f32 copies. */

/* An f32 working copy of a half tensor (or its uninitialised buffer when src is NULL). */
static floe_code half_temp(FloeKernelContext *ctx, const void *src, int64_t n, FloeDType dt,
                           float **out) {
  void *p;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)n * sizeof(float), &p);
  if (rc != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate an f32 copy of %lld elements",
                                   (long long)n);
  if (src) cpu_convert_half(dt, true, src, p, n);
  *out = p;
  return FLOE_OK;
}

static floe_code alloc_output(FloeKernelContext *ctx, int i, int rank, const int64_t *dims,
                              void **data) {
  FloeTensor *t;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, i, rank, dims, &t);
  if (rc != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate output %d of shape %s", i,
                                   SHAPE(rank, dims));
  *data = cpu_host->tensor_data(t);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Softmax and LogSoftmax. */

typedef struct SoftmaxState {
  int log_sm;
  int64_t axis;
} SoftmaxState;

typedef struct SoftmaxJob {
  int f64;
  const void *x;
  void *y;
  int64_t O, R, I, C; /* x [O, R, I]; C chunks of SM_CHUNK along I */
  int log_sm;
} SoftmaxJob;

static void softmax_units(void *arg, int64_t begin, int64_t end) {
  const SoftmaxJob *j = arg;
  if (j->I == 1) { /* units are rows */
    int64_t off = begin * j->R;
    if (j->f64)
      f64_softmax_rows((const double *)j->x + off, (double *)j->y + off, end - begin, j->R,
                       j->log_sm);
    else
      f32_softmax_rows((const float *)j->x + off, (float *)j->y + off, end - begin, j->R,
                       j->log_sm);
    return;
  }
  for (int64_t u = begin; u < end; u++) { /* units are (o, chunk) */
    int64_t o = u / j->C, c0 = (u % j->C) * SM_CHUNK;
    int64_t w = j->I - c0 < SM_CHUNK ? j->I - c0 : SM_CHUNK, off = o * j->R * j->I + c0;
    if (j->f64)
      f64_softmax_cols((const double *)j->x + off, (double *)j->y + off, j->R, w, j->I,
                       j->log_sm);
    else
      f32_softmax_cols((const float *)j->x + off, (float *)j->y + off, j->R, w, j->I, j->log_sm);
  }
}

static floe_code softmax_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                void **state) {
  int64_t axis = -1;
  floe_code rc = host->attr_int(host->init_attrs(init), "axis", &axis);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "axis must be an int");
  SoftmaxState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  s->log_sm = user_data != NULL;
  s->axis = axis;
  *state = s;
  return FLOE_OK;
}

static void state_destroy(void *state) { cpu_host->free(state); }

static floe_code softmax_compute(void *state, FloeKernelContext *ctx) {
  const SoftmaxState *st = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(xt);
  int rank = cpu_host->tensor_rank(xt);
  const int64_t *dims = cpu_host->tensor_dims(xt);
  if (rank == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "logits must have rank >= 1, got a scalar (shape [])");
  if (st->axis < -rank || st->axis >= rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %lld is out of range for logits of shape %s "
                                   "(expected in [%d, %d))",
                                   (long long)st->axis, SHAPE(rank, dims), -rank, rank);
  int axis = (int)(st->axis < 0 ? st->axis + rank : st->axis);
  SoftmaxJob j = {.f64 = dt == FLOE_F64, .O = 1, .R = dims[axis], .I = 1, .log_sm = st->log_sm};
  for (int d = 0; d < rank; d++) {
    if (d < axis) j.O *= dims[d];
    if (d > axis) j.I *= dims[d];
  }
  void *y;
  floe_code rc = alloc_output(ctx, 0, rank, dims, &y);
  int64_t n = j.O * j.R * j.I;
  if (rc != FLOE_OK || n == 0) return rc;

  float *tmp = NULL;
  if (cpu_is_half(dt)) {
    if ((rc = half_temp(ctx, cpu_host->tensor_data(xt), n, dt, &tmp)) != FLOE_OK) return rc;
    j.x = j.y = tmp;
  } else {
    j.x = cpu_host->tensor_data(xt);
    j.y = y;
  }
  j.C = (j.I + SM_CHUNK - 1) / SM_CHUNK;
  if (j.I == 1)
    cpu_parallel_for(j.O, 4 * j.R, softmax_units, &j);
  else
    cpu_parallel_for(j.O * j.C, 4 * j.R * (j.I < SM_CHUNK ? j.I : SM_CHUNK), softmax_units, &j);
  if (tmp) cpu_convert_half(dt, false, tmp, y, n);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* SoftmaxCrossEntropyWithLogits and SparseSoftmaxCrossEntropyWithLogits. */

typedef struct XentJob {
  int f64;
  const void *x, *lab; /* lab NULL: sparse, classes in cls */
  const int64_t *cls;
  void *loss, *bp;
  int64_t C;
} XentJob;

static void xent_units(void *arg, int64_t begin, int64_t end) {
  const XentJob *j = arg;
  int64_t off = begin * j->C, n = end - begin;
  const int64_t *cls = j->cls ? j->cls + begin : NULL;
  if (j->f64)
    f64_xent_rows((const double *)j->x + off, j->lab ? (const double *)j->lab + off : NULL, cls,
                  (double *)j->loss + begin, (double *)j->bp + off, n, j->C);
  else
    f32_xent_rows((const float *)j->x + off, j->lab ? (const float *)j->lab + off : NULL, cls,
                  (float *)j->loss + begin, (float *)j->bp + off, n, j->C);
}

static floe_code xent_compute(void *state, FloeKernelContext *ctx) {
  int sparse = state != NULL;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0), *lt = cpu_host->ctx_input(ctx, 1);
  FloeDType dt = cpu_host->tensor_dtype(xt), ldt = cpu_host->tensor_dtype(lt);
  int rank = cpu_host->tensor_rank(xt), lrank = cpu_host->tensor_rank(lt);
  const int64_t *dims = cpu_host->tensor_dims(xt), *ldims = cpu_host->tensor_dims(lt);
  if (rank != 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "features must be 2-D [batch, classes], got shape %s",
                                   SHAPE(rank, dims));
  int64_t B = dims[0], C = dims[1];
  if (sparse ? (lrank != 1 || ldims[0] != B) : (lrank != 2 || ldims[0] != B || ldims[1] != C))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "labels of shape %s do not match features of shape %s "
                                   "(expected %s)",
                                   SHAPE(lrank, ldims), SHAPE(rank, dims),
                                   sparse ? SHAPE(1, dims) : SHAPE(2, dims));
  XentJob j = {.f64 = dt == FLOE_F64, .C = C};
  if (sparse) {
    if (ldt != FLOE_I32 && ldt != FLOE_I64)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "labels must be i32 or i64, got %s",
                                     cpu_host->dtype_name(ldt));
    void *p;
    floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)B * sizeof(int64_t), &p);
    if (rc != FLOE_OK)
      return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %lld labels", (long long)B);
    int64_t *cls = p;
    const void *ld = cpu_host->tensor_data(lt);
    for (int64_t b = 0; b < B; b++) {
      cls[b] = ldt == FLOE_I32 ? ((const int32_t *)ld)[b] : ((const int64_t *)ld)[b];
      if (cls[b] < 0 || cls[b] >= C)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "label %lld of batch row %lld is outside [0, %lld) "
                                       "(features shape %s)",
                                       (long long)cls[b], (long long)b, (long long)C,
                                       SHAPE(rank, dims));
    }
    j.cls = cls;
  }
  void *loss, *bp;
  floe_code rc = alloc_output(ctx, 0, 1, dims, &loss);
  if (rc == FLOE_OK) rc = alloc_output(ctx, 1, 2, dims, &bp);
  if (rc != FLOE_OK || B == 0) return rc;
  if (C == 0) { /* no classes: nothing to lose (every float type's zero is all-zero bytes) */
    memset(loss, 0, (size_t)B * cpu_host->dtype_size(dt));
    return FLOE_OK;
  }

  int half = cpu_is_half(dt);
  if (half) {
    float *tx = NULL, *tl = NULL, *tloss = NULL, *tbp = NULL;
    if ((rc = half_temp(ctx, cpu_host->tensor_data(xt), B * C, dt, &tx)) != FLOE_OK ||
        (!sparse && (rc = half_temp(ctx, cpu_host->tensor_data(lt), B * C, dt, &tl)) != FLOE_OK) ||
        (rc = half_temp(ctx, NULL, B, dt, &tloss)) != FLOE_OK ||
        (rc = half_temp(ctx, NULL, B * C, dt, &tbp)) != FLOE_OK)
      return rc;
    j.x = tx, j.lab = tl, j.loss = tloss, j.bp = tbp;
  } else {
    j.x = cpu_host->tensor_data(xt);
    j.lab = sparse ? NULL : cpu_host->tensor_data(lt);
    j.loss = loss, j.bp = bp;
  }
  cpu_parallel_for(B, 6 * (C > 0 ? C : 1), xent_units, &j);
  if (half) {
    cpu_convert_half(dt, false, j.loss, loss, B);
    cpu_convert_half(dt, false, j.bp, bp, B * C);
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* OneHot: output[..., d, ...] = indices[...] == d ? on_value : off_value, with the depth
 * dim inserted at `axis`. Indices outside [0, depth) give an all-off slice. */

typedef struct OneHotJob {
  const void *idx;
  FloeDType idt;
  void *out;
  int64_t depth, inner; /* output [outer, depth, inner] */
  uint64_t on, off;     /* the values' bytes, in the low bytes (as stored in memory) */
} OneHotJob;

static int64_t onehot_index(const OneHotJob *j, int64_t i) {
  switch (j->idt) {
    case FLOE_U8: return ((const uint8_t *)j->idx)[i];
    case FLOE_I32: return ((const int32_t *)j->idx)[i];
    default: return ((const int64_t *)j->idx)[i];
  }
}

/* Units: indices (inner == 1, one contiguous depth row each) or (o, d) rows of inner. */
#define DEF_ONEHOT(NAME, U)                                                                        \
  static void NAME(void *arg, int64_t begin, int64_t end) {                                        \
    const OneHotJob *j = arg;                                                                      \
    U on, off, *out = j->out;                                                                      \
    memcpy(&on, &j->on, sizeof on);                                                                \
    memcpy(&off, &j->off, sizeof off);                                                             \
    int64_t D = j->depth, I = j->inner;                                                            \
    if (I == 1) {                                                                                  \
      for (int64_t k = begin; k < end; k++) {                                                      \
        U *row = out + k * D;                                                                      \
        for (int64_t d = 0; d < D; d++) row[d] = off;                                              \
        int64_t v = onehot_index(j, k);                                                            \
        if (v >= 0 && v < D) row[v] = on;                                                          \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t u = begin; u < end; u++) {                                                        \
      int64_t o = u / D, d = u % D;                                                                \
      U *row = out + u * I;                                                                        \
      if (j->idt == FLOE_U8) {                                                                     \
        const uint8_t *ix = (const uint8_t *)j->idx + o * I;                                       \
        for (int64_t i = 0; i < I; i++) row[i] = ix[i] == d ? on : off;                            \
      } else if (j->idt == FLOE_I32) {                                                             \
        const int32_t *ix = (const int32_t *)j->idx + o * I;                                       \
        for (int64_t i = 0; i < I; i++) row[i] = ix[i] == d ? on : off;                            \
      } else {                                                                                     \
        const int64_t *ix = (const int64_t *)j->idx + o * I;                                       \
        for (int64_t i = 0; i < I; i++) row[i] = ix[i] == d ? on : off;                            \
      }                                                                                            \
    }                                                                                              \
  }

DEF_ONEHOT(onehot_u8, uint8_t)
DEF_ONEHOT(onehot_u16, uint16_t)
DEF_ONEHOT(onehot_u32, uint32_t)
DEF_ONEHOT(onehot_u64, uint64_t)

static floe_code onehot_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  int64_t axis = -1;
  floe_code rc = host->attr_int(host->init_attrs(init), "axis", &axis);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "axis must be an int");
  int64_t *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *s = axis;
  *state = s;
  return FLOE_OK;
}

static floe_code onehot_compute(void *state, FloeKernelContext *ctx) {
  int64_t axis = *(const int64_t *)state;
  const FloeTensor *it = cpu_host->ctx_input(ctx, 0), *dpt = cpu_host->ctx_input(ctx, 1);
  const FloeTensor *ont = cpu_host->ctx_input(ctx, 2), *offt = cpu_host->ctx_input(ctx, 3);
  int rank = cpu_host->tensor_rank(it);
  const int64_t *dims = cpu_host->tensor_dims(it);
  if (cpu_host->tensor_rank(dpt) != 0 || cpu_host->tensor_dtype(dpt) != FLOE_I32)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "depth must be an i32 scalar, got shape %s",
                                   SHAPE(cpu_host->tensor_rank(dpt), cpu_host->tensor_dims(dpt)));
  if (cpu_host->tensor_rank(ont) != 0 || cpu_host->tensor_rank(offt) != 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "on_value and off_value must be scalars, got shapes %s and %s",
                                   SHAPE(cpu_host->tensor_rank(ont), cpu_host->tensor_dims(ont)),
                                   SHAPE(cpu_host->tensor_rank(offt), cpu_host->tensor_dims(offt)));
  int64_t depth = *(const int32_t *)cpu_host->tensor_data(dpt);
  if (depth < 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "depth must be >= 0, got %lld",
                                   (long long)depth);
  if (rank >= FLOE_MAX_DIMS || axis < -1 || axis > rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %lld is out of range for indices of shape %s "
                                   "(expected -1 or in [0, %d], output rank at most %d)",
                                   (long long)axis, SHAPE(rank, dims), rank, FLOE_MAX_DIMS);
  int ax = axis < 0 ? rank : (int)axis;
  int64_t odims[FLOE_MAX_DIMS], outer = 1, inner = 1;
  for (int d = 0; d < rank; d++) {
    odims[d < ax ? d : d + 1] = dims[d];
    if (d < ax)
      outer *= dims[d];
    else
      inner *= dims[d];
  }
  odims[ax] = depth;
  FloeDType vdt = cpu_host->tensor_dtype(ont);
  size_t esz = cpu_host->dtype_size(vdt);
  OneHotJob j = {.idx = cpu_host->tensor_data(it),
                 .idt = cpu_host->tensor_dtype(it),
                 .depth = depth,
                 .inner = inner};
  memcpy(&j.on, cpu_host->tensor_data(ont), esz);
  memcpy(&j.off, cpu_host->tensor_data(offt), esz);
  floe_code rc = alloc_output(ctx, 0, rank + 1, odims, &j.out);
  if (rc != FLOE_OK || outer * depth * inner == 0) return rc;
  FloeParallelFn fn = esz == 1   ? onehot_u8
                      : esz == 2 ? onehot_u16
                      : esz == 4 ? onehot_u32
                                 : onehot_u64;
  if (inner == 1)
    cpu_parallel_for(outer, depth, fn, &j);
  else
    cpu_parallel_for(outer * depth, inner, fn, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_softmax(FloePluginRegistrar *reg) {
  static const int log_flag = 1, sparse_flag = 1;
  floe_code rc;
  if ((rc = cpu_add_kernel(reg, "Softmax", "T", FLOE_DTYPES_FLOAT, 0, softmax_compute,
                           softmax_create, state_destroy, NULL)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "LogSoftmax", "T", FLOE_DTYPES_FLOAT, 0, softmax_compute,
                           softmax_create, state_destroy, (void *)&log_flag)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "SoftmaxCrossEntropyWithLogits", "T", FLOE_DTYPES_FLOAT, 0,
                           xent_compute, NULL, NULL, NULL)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "SparseSoftmaxCrossEntropyWithLogits", "T", FLOE_DTYPES_FLOAT, 0,
                           xent_compute, NULL, NULL, (void *)&sparse_flag)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "OneHot", "T", FLOE_DTYPES_ALL, 0, onehot_compute, onehot_create,
                           state_destroy, NULL)) != FLOE_OK)
    return rc;
  return FLOE_OK;
}
