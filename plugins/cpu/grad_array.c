/* SPDX-License-Identifier: Apache-2.0 */
/* grad_array.c - CPU kernels of the array ops that gradients use: BroadcastTo
 * and its adjoint SumToShape, ExpandReduced (the gradient of Sum and Mean),
 * InvertPermutation, ConcatOffset, and the adjoints of Slice, StridedSlice, Gather, Pad and
 * Tile.
 *
 * Ops that only place elements (BroadcastTo, SliceGrad, StridedSliceGrad, CONSTANT PadGrad)
 * move bytes and serve every dtype. Sums over whole dims (SumToShape, TileGrad) go through
 * reduce.c's cpu_sum_dims, so they accumulate exactly like Sum. Scatter-adds (GatherGrad,
 * REFLECT PadGrad) add whole rows in the element type: halves accumulate in f32, integers
 * wrap like the type.
 */
/* Vectorise the row loops whatever CFLAGS say (see reduce.c). */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

/* Rows of a trailing-dims merge in SliceGrad / StridedSliceGrad stay below this length, so
 * the rows left still spread over the pool. */
#define GA_MERGE_ROW 4096

/* Element types for moving 1, 2, 4 and 8-byte elements of any dtype. */
typedef uint8_t __attribute__((may_alias)) ga_e8;
typedef uint16_t __attribute__((may_alias)) ga_e16;
typedef uint32_t __attribute__((may_alias)) ga_e32;
typedef uint64_t __attribute__((may_alias)) ga_e64;

/* "[2,3,4]" in a buffer that lives until the end of the enclosing block. */
#define SHAPE(rank, dims) \
  cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX, (rank), (dims))
#define TSHAPE(t) SHAPE(cpu_host->tensor_rank(t), cpu_host->tensor_dims(t))

/* ------------------------------------------------------------------------------------ */
/* Inputs. */

static int is_index(FloeDType dt) { return dt == FLOE_I32 || dt == FLOE_I64; }

static inline int64_t index_at(const void *data, FloeDType dt, int64_t i) {
  return dt == FLOE_I32 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
}

/* Input i: a 1-D i32/i64 tensor of at most max values into v (*n of them). */
static floe_code index_vector(FloeKernelContext *ctx, int i, const char *what, int max,
                              int64_t *v, int *n) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if (!is_index(dt) || cpu_host->tensor_rank(t) != 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be a 1-D i32 or i64 tensor, got %s of shape %s", what,
                                   cpu_host->dtype_name(dt), TSHAPE(t));
  int64_t count = cpu_host->tensor_num_elements(t);
  if (count > max)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s has %" PRId64 " values; at most %d are supported", what,
                                   count, max);
  const void *data = cpu_host->tensor_data(t);
  for (int64_t k = 0; k < count; k++) v[k] = index_at(data, dt, k);
  *n = (int)count;
  return FLOE_OK;
}

/* Input i read as a shape: at most FLOE_MAX_DIMS sizes, each >= 0. */
static floe_code shape_input(FloeKernelContext *ctx, int i, const char *what, int64_t *dims,
                             int *rank) {
  floe_code rc = index_vector(ctx, i, what, FLOE_MAX_DIMS, dims, rank);
  if (rc != FLOE_OK) return rc;
  for (int d = 0; d < *rank; d++)
    if (dims[d] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "%s %s holds a negative size (%" PRId64 " at index %d)",
                                     what, SHAPE(*rank, dims), dims[d], d);
  return FLOE_OK;
}

static int same_dims(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return 0;
  for (int i = 0; i < ra; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static int64_t product(int n, const int64_t *dims) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= dims[i];
  return p;
}

static floe_code alloc_out(FloeKernelContext *ctx, int i, int rank, const int64_t *dims,
                           void **data) {
  FloeTensor *t;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, i, rank, dims, &t);
  if (rc != FLOE_OK) return rc;
  *data = cpu_host->tensor_data(t);
  return FLOE_OK;
}

/* The multi-index of row r of dims[0..last) (a row = the last dim). */
static void row_index(int64_t r, int last, const int64_t *dims, int64_t *idx) {
  for (int k = last - 1; k >= 0; k--) {
    idx[k] = r % dims[k];
    r /= dims[k];
  }
}

/* Odometer step of a row multi-index. */
static inline void row_next(int last, const int64_t *dims, int64_t *idx) {
  for (int k = last - 1; k >= 0; k--) {
    if (++idx[k] < dims[k]) return;
    idx[k] = 0;
  }
}

/* Parsed attributes of ExpandReduced (keep_dims, mean), GatherGrad (axis) and PadGrad
 * (mode); absent ones take the op's defaults. Made by state_create with host->alloc, freed
 * by state_free. */
typedef struct GaState {
  int64_t axis;
  int keep_dims, mean, reflect;
} GaState;

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const FloeAttrs *a = host->init_attrs(init);
  GaState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  memset(s, 0, sizeof *s);
  if (host->attr_int(a, "axis", &s->axis) != FLOE_OK) s->axis = 0;
  if (host->attr_bool(a, "keep_dims", &s->keep_dims) != FLOE_OK) s->keep_dims = 0;
  if (host->attr_bool(a, "mean", &s->mean) != FLOE_OK) s->mean = 0;
  const char *mode = "CONSTANT";
  if (host->attr_string(a, "mode", &mode) != FLOE_OK) mode = "CONSTANT";
  s->reflect = strcmp(mode, "REFLECT") == 0;
  if (!s->reflect && strcmp(mode, "CONSTANT") != 0) {
    host->free(s);
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "mode '%s' is not supported: use CONSTANT or REFLECT", mode);
  }
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { cpu_host->free(state); }

/* ------------------------------------------------------------------------------------ */
/* Row arithmetic, one family per accumulation type. Integers add as unsigned of their
 * width (two's complement wrap without undefined behaviour), so i8 and u8 share one. */

typedef struct RowOps {
  /* d[i] += s[i], i < n */
  void (*add)(void *d, const void *s, int64_t n);
  /* REFLECT fold of rows of one element: d[o*n + j] = the sum of the s[o*L + ...] that
   * mirror onto j, for o < O (L = b + n + a). */
  void (*fold1)(void *d, const void *s, int64_t O, int64_t n, int64_t b, int64_t a);
} RowOps;

#define DEF_ROW_OPS(NAME, T)                                                                  \
  CPU_HOT static void NAME##_add(void *dv, const void *sv, int64_t n) {                       \
    T *restrict d = dv;                                                                       \
    const T *restrict s = sv;                                                                 \
    for (int64_t i = 0; i < n; i++) d[i] = (T)(d[i] + s[i]);                                  \
  }                                                                                           \
  static void NAME##_fold1(void *dv, const void *sv, int64_t O, int64_t n, int64_t b,         \
                           int64_t a) {                                                       \
    T *restrict d = dv;                                                                       \
    const T *restrict s = sv;                                                                 \
    int64_t L = b + n + a;                                                                    \
    for (int64_t o = 0; o < O; o++, d += n, s += L) {                                         \
      for (int64_t j = 0; j < n; j++) d[j] = s[b + j];                                        \
      for (int64_t j = 1; j <= b; j++) d[j] = (T)(d[j] + s[b - j]);                           \
      for (int64_t t = 0; t < a; t++) d[n - 2 - t] = (T)(d[n - 2 - t] + s[b + n + t]);        \
    }                                                                                         \
  }
DEF_ROW_OPS(rf32, float)
DEF_ROW_OPS(rf64, double)
DEF_ROW_OPS(ru8, uint8_t)
DEF_ROW_OPS(ru32, uint32_t)
DEF_ROW_OPS(ru64, uint64_t)

/* Adds of half rows into f32 accumulators (GatherGrad of f16 / bf16). */
CPU_HOT static void add_f16_f32(void *dv, const void *sv, int64_t n) {
  float *restrict d = dv;
  const uint16_t *restrict s = sv;
  for (int64_t i = 0; i < n; i++) d[i] += cpu_f16_to_f32(s[i]);
}

CPU_HOT static void add_bf16_f32(void *dv, const void *sv, int64_t n) {
  float *restrict d = dv;
  const uint16_t *restrict s = sv;
  for (int64_t i = 0; i < n; i++) d[i] += cpu_bf16_to_f32(s[i]);
}

static const RowOps row_f32 = {rf32_add, rf32_fold1}, row_f64 = {rf64_add, rf64_fold1},
                    row_u8 = {ru8_add, ru8_fold1}, row_u32 = {ru32_add, ru32_fold1},
                    row_u64 = {ru64_add, ru64_fold1};

/* The row ops of the accumulation type of dt (f32 for halves). */
static const RowOps *row_ops(FloeDType dt) {
  switch (dt) {
    case FLOE_F64: return &row_f64;
    case FLOE_I8:
    case FLOE_U8: return &row_u8;
    case FLOE_I32: return &row_u32;
    case FLOE_I64: return &row_u64;
    default: return &row_f32;
  }
}

/* Half rows to f32 and back (whole arrays, split over the pool when large). */
static floe_code widen_half(FloeKernelContext *ctx, FloeDType dt, const void *src, int64_t n,
                            float **out) {
  floe_code rc = cpu_half_widen_temp(ctx, dt, 1, &src, &n, 0, out, NULL);
  if (rc != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %" PRId64 " f32 accumulators", n);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Expand: dst (dense, the plan's output) <- src repeated along broadcast dims, optionally
 * divided by a count. Serves BroadcastTo and ExpandReduced. */

/* dst[0..n) = the one element at v (any element size). */
static void fill_elems(char *dst, const char *v, int64_t n, size_t es) {
  switch (es) {
    case 1: memset(dst, *(const ga_e8 *)v, (size_t)n); break;
    case 2: {
      ga_e16 x = *(const ga_e16 *)v, *d = (ga_e16 *)dst;
      for (int64_t i = 0; i < n; i++) d[i] = x;
      break;
    }
    case 4: {
      ga_e32 x = *(const ga_e32 *)v, *d = (ga_e32 *)dst;
      for (int64_t i = 0; i < n; i++) d[i] = x;
      break;
    }
    default: {
      ga_e64 x = *(const ga_e64 *)v, *d = (ga_e64 *)dst;
      for (int64_t i = 0; i < n; i++) d[i] = x;
      break;
    }
  }
}

/* d[i] = s[i] / c for i < n: floats divide in their type (halves in f32), integers
 * truncate toward zero. */
#define DIV_RUN(T, A, LOAD, STORE)                                                            \
  do {                                                                                        \
    T *restrict d_ = dv;                                                                      \
    const T *restrict s_ = sv;                                                                \
    A c_ = (A)c;                                                                              \
    for (int64_t i = 0; i < n; i++) d_[i] = STORE(LOAD(s_[i]) / c_);                          \
  } while (0)
#define GA_ID(v) (v)

CPU_HOT static void divide_run(FloeDType dt, void *dv, const void *sv, int64_t n, int64_t c) {
  switch (dt) {
    case FLOE_F32: DIV_RUN(float, float, GA_ID, GA_ID); break;
    case FLOE_F64: DIV_RUN(double, double, GA_ID, GA_ID); break;
    case FLOE_F16: DIV_RUN(uint16_t, float, cpu_f16_to_f32, cpu_f32_to_f16); break;
    case FLOE_BF16: DIV_RUN(uint16_t, float, cpu_bf16_to_f32, cpu_f32_to_bf16); break;
    case FLOE_I8: DIV_RUN(int8_t, int64_t, GA_ID, (int8_t)); break;
    case FLOE_U8: DIV_RUN(uint8_t, int64_t, GA_ID, (uint8_t)); break;
    case FLOE_I32: DIV_RUN(int32_t, int64_t, GA_ID, (int32_t)); break;
    default: DIV_RUN(int64_t, int64_t, GA_ID, GA_ID); break;
  }
}

typedef struct ExpandJob {
  CpuBroadcast p; /* output dims and the source's strides (0: repeated) */
  const char *src;
  char *dst;
  size_t es;
} ExpandJob;

static void expand_range(void *arg, int64_t begin, int64_t end) {
  const ExpandJob *j = arg;
  CpuBroadcastIter it;
  cpu_broadcast_iter_init(&it, &j->p, begin, end);
  int64_t step = j->p.strides[0][j->p.rank - 1], pos, off, len;
  while ((len = cpu_broadcast_iter_next(&it, &pos, &off)) > 0) {
    char *d = j->dst + (size_t)pos * j->es;
    const char *s = j->src + (size_t)off * j->es;
    if (step)
      memcpy(d, s, (size_t)len * j->es);
    else
      fill_elems(d, s, len, j->es);
  }
}

/* out (dims, allocated) <- src (rank sr, sdims; broadcastable to dims), elements of es
 * bytes. */
static void expand_run(const void *src, int sr, const int64_t *sdims, void *out, int rank,
                       const int64_t *dims, size_t es) {
  ExpandJob j = {.src = src, .dst = out, .es = es};
  cpu_broadcast_plan(&j.p, 1, &sr, &sdims, rank, dims);
  cpu_parallel_elements(j.p.num_elements, 1, expand_range, &j);
}

static floe_code broadcast_to_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int xr = cpu_host->tensor_rank(x), rank;
  const int64_t *xd = cpu_host->tensor_dims(x);
  int64_t dims[FLOE_MAX_DIMS];
  floe_code rc = shape_input(ctx, 1, "shape", dims, &rank);
  if (rc != FLOE_OK) return rc;
  int ok = xr <= rank;
  for (int i = 0; ok && i < xr; i++) {
    int64_t have = xd[i], want = dims[rank - xr + i];
    ok = have == want || have == 1;
  }
  if (!ok)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot broadcast an input of shape %s to shape %s: each "
                                   "input dim (aligned on the last) must equal the target's "
                                   "or be 1",
                                   SHAPE(xr, xd), SHAPE(rank, dims));
  /* Nothing repeated (only size-1 dims added or kept): the same elements in order. */
  if (product(rank, dims) == cpu_host->tensor_num_elements(x))
    return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  void *out;
  if ((rc = alloc_out(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  if (product(rank, dims) == 0) return FLOE_OK;
  expand_run(cpu_host->tensor_data(x), xr, xd, out, rank, dims,
             cpu_host->dtype_size(cpu_host->tensor_dtype(x)));
  return FLOE_OK;
}

/* Marks in red[] the dims of an input of rank r named by the axis input (scalar or 1-D;
 * negative counts from the end; a repeated axis is an error like Sum's). */
static floe_code reduced_axes(FloeKernelContext *ctx, int in, int r, const int64_t *dims,
                              int *red) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, in);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if (!is_index(dt) || cpu_host->tensor_rank(t) > 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis must be an i32 or i64 scalar or 1-D tensor, got %s of "
                                   "shape %s",
                                   cpu_host->dtype_name(dt), TSHAPE(t));
  for (int d = 0; d < r; d++) red[d] = 0;
  const void *data = cpu_host->tensor_data(t);
  for (int64_t k = 0; k < cpu_host->tensor_num_elements(t); k++) {
    int64_t a = index_at(data, dt, k);
    if (a < -r || a >= r)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %" PRId64 " is out of range for input_shape %s "
                                     "(expected in [%d, %d))",
                                     a, SHAPE(r, dims), -r, r);
    int d = (int)(a < 0 ? a + r : a);
    if (red[d])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %" PRId64 " is repeated (dim %d of input_shape %s)", a,
                                     d, SHAPE(r, dims));
    red[d] = 1;
  }
  return FLOE_OK;
}

static floe_code expand_reduced_compute(void *state, FloeKernelContext *ctx) {
  const GaState *st = state;
  const FloeTensor *g = cpu_host->ctx_input(ctx, 0);
  int gr = cpu_host->tensor_rank(g), rank;
  const int64_t *gd = cpu_host->tensor_dims(g);
  int64_t dims[FLOE_MAX_DIMS], want[FLOE_MAX_DIMS], aligned[FLOE_MAX_DIMS];
  int red[FLOE_MAX_DIMS];
  floe_code rc = shape_input(ctx, 1, "input_shape", dims, &rank);
  if (rc == FLOE_OK) rc = reduced_axes(ctx, 2, rank, dims, red);
  if (rc != FLOE_OK) return rc;
  int wr = 0;
  int64_t count = 1;
  for (int d = 0; d < rank; d++) {
    aligned[d] = red[d] ? 1 : dims[d];
    if (red[d]) count *= dims[d];
    if (!red[d] || st->keep_dims) want[wr++] = aligned[d];
  }
  if (!same_dims(gr, gd, wr, want))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "grad has shape %s, but input_shape %s reduced along the "
                                   "given axis (keep_dims=%d) has shape %s",
                                   SHAPE(gr, gd), SHAPE(rank, dims), st->keep_dims,
                                   SHAPE(wr, want));
  if (count == 1) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  void *out;
  if ((rc = alloc_out(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  if (product(rank, dims) == 0) return FLOE_OK;
  FloeDType dt = cpu_host->tensor_dtype(g);
  const void *src = cpu_host->tensor_data(g);
  if (st->mean) { /* divide grad once (count times fewer elements than out), then copy */
    int64_t gn = cpu_host->tensor_num_elements(g);
    void *tmp;
    if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)gn * cpu_host->dtype_size(dt), &tmp)) !=
        FLOE_OK)
      return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %" PRId64 " scaled gradients", gn);
    divide_run(dt, tmp, src, gn, count);
    src = tmp;
  }
  expand_run(src, rank, aligned, out, rank, dims, cpu_host->dtype_size(dt));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Sums over whole dims: SumToShape and TileGrad. */

static floe_code sum_to_shape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int xr = cpu_host->tensor_rank(x), tr;
  const int64_t *xd = cpu_host->tensor_dims(x);
  int64_t t[FLOE_MAX_DIMS];
  floe_code rc = shape_input(ctx, 1, "shape", t, &tr);
  if (rc != FLOE_OK) return rc;
  /* Target dims beyond the input's rank may only be leading 1s. */
  int red[FLOE_MAX_DIMS], ok = 1;
  for (int i = 0; i < tr - xr; i++) ok &= t[i] == 1;
  for (int d = 0; ok && d < xr; d++) {
    int i = d - (xr - tr);
    red[d] = i < 0 || (t[i] == 1 && xd[d] != 1);
    ok = i < 0 || t[i] == xd[d] || t[i] == 1;
  }
  if (!ok)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot sum an input of shape %s to shape %s: the shape must "
                                   "broadcast to the input's (each of its dims, aligned on the "
                                   "last, equal to the input's or 1)",
                                   SHAPE(xr, xd), SHAPE(tr, t));
  if (product(tr, t) == cpu_host->tensor_num_elements(x))
    return cpu_host->ctx_forward_input(ctx, 0, 0, tr, t);
  void *out;
  if ((rc = alloc_out(ctx, 0, tr, t, &out)) != FLOE_OK) return rc;
  return cpu_sum_dims(ctx, cpu_host->tensor_dtype(x), cpu_host->tensor_data(x), out, xr, xd, red);
}

static floe_code tile_grad_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *g = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(g), n;
  const int64_t *gd = cpu_host->tensor_dims(g);
  int64_t m[FLOE_MAX_DIMS], dims[FLOE_MAX_DIMS];
  floe_code rc = index_vector(ctx, 1, "multiples", FLOE_MAX_DIMS, m, &n);
  if (rc != FLOE_OK) return rc;
  if (n != rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "multiples %s must have one entry per dim of grad %s",
                                   SHAPE(n, m), SHAPE(rank, gd));
  /* grad viewed as [m0, d0, m1, d1, ...]: sum the tile dims m_i. */
  int64_t view[CPU_SUM_MAX_DIMS];
  int red[CPU_SUM_MAX_DIMS], ones = 1;
  for (int i = 0; i < rank; i++) {
    if (m[i] < 1 || gd[i] % m[i] != 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "multiples %s do not divide grad %s: dim %d (%" PRId64
                                     ") needs a multiple >= 1 that divides it",
                                     SHAPE(rank, m), SHAPE(rank, gd), i, gd[i]);
    dims[i] = gd[i] / m[i];
    view[2 * i] = m[i];
    view[2 * i + 1] = dims[i];
    red[2 * i] = 1;
    red[2 * i + 1] = 0;
    ones &= m[i] == 1;
  }
  if (ones) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, gd);
  void *out;
  if ((rc = alloc_out(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  return cpu_sum_dims(ctx, cpu_host->tensor_dtype(g), cpu_host->tensor_data(g), out, 2 * rank,
                      view, red);
}

/* ------------------------------------------------------------------------------------ */
/* InvertPermutation and ConcatOffset. */

static floe_code invert_permutation_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(x);
  if (cpu_host->tensor_rank(x) != 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x must be a 1-D permutation, got shape %s", TSHAPE(x));
  int64_t n = cpu_host->tensor_num_elements(x);
  void *y;
  floe_code rc = alloc_out(ctx, 0, 1, &n, &y);
  if (rc != FLOE_OK || n == 0) return rc;
  const void *xv = cpu_host->tensor_data(x);
  /* y starts all -1, so a slot written twice shows the earlier position. */
  memset(y, 0xff, (size_t)n * cpu_host->dtype_size(dt));
  for (int64_t i = 0; i < n; i++) {
    int64_t v = index_at(xv, dt, i);
    if (v < 0 || v >= n)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "x[%" PRId64 "] = %" PRId64 " is out of range [0, %" PRId64
                                     "): x is not a permutation",
                                     i, v, n);
    int64_t prev = index_at(y, dt, v);
    if (prev >= 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "x[%" PRId64 "] = %" PRId64 " repeats x[%" PRId64
                                     "]: x is not a permutation",
                                     i, v, prev);
    if (dt == FLOE_I32)
      ((int32_t *)y)[v] = (int32_t)i;
    else
      ((int64_t *)y)[v] = i;
  }
  return FLOE_OK;
}

static floe_code concat_offset_compute(void *state, FloeKernelContext *ctx) {
  int n = cpu_host->ctx_num_inputs(ctx) - 1;
  const FloeTensor *ct = cpu_host->ctx_input(ctx, 0);
  if (cpu_host->tensor_rank(ct) != 0 || cpu_host->tensor_dtype(ct) != FLOE_I32)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "concat_dim must be an i32 scalar, got shape %s", TSHAPE(ct));
  int64_t d0[FLOE_MAX_DIMS], di[FLOE_MAX_DIMS];
  int r, ri;
  floe_code rc = index_vector(ctx, 1, "shape[0]", FLOE_MAX_DIMS, d0, &r);
  if (rc != FLOE_OK) return rc;
  int64_t axis = *(const int32_t *)cpu_host->tensor_data(ct);
  if (axis < -r || axis >= r)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "concat_dim %" PRId64 " is out of range for shapes of rank "
                                   "%d (shape[0] is %s); expected [%d, %d)",
                                   axis, r, SHAPE(r, d0), -r, r);
  if (axis < 0) axis += r;
  int64_t at = 0, len = r;
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "shape[%d]", i);
    if ((rc = index_vector(ctx, 1 + i, what, FLOE_MAX_DIMS, di, &ri)) != FLOE_OK) return rc;
    int ok = ri == r;
    for (int k = 0; ok && k < r; k++) ok = k == axis || di[k] == d0[k];
    if (!ok)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "shape[%d] %s does not match shape[0] %s outside dim %" PRId64,
                                     i, SHAPE(ri, di), SHAPE(r, d0), axis);
    if (at > INT32_MAX)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "offset %" PRId64 " of shape[%d] does not fit in i32", at, i);
    void *o;
    if ((rc = alloc_out(ctx, i, 1, &len, &o)) != FLOE_OK) return rc;
    memset(o, 0, (size_t)r * sizeof(int32_t));
    ((int32_t *)o)[axis] = (int32_t)at;
    at += di[axis];
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Place: zeros with a box of the source written in (SliceGrad, StridedSliceGrad). */

typedef struct PlaceJob {
  int rank;
  int64_t dims[FLOE_MAX_DIMS];                 /* output */
  int64_t begin[FLOE_MAX_DIMS], step[FLOE_MAX_DIMS], size[FLOE_MAX_DIMS]; /* box, step >= 1 */
  int64_t sstride[FLOE_MAX_DIMS];              /* source stride per box dim (may be < 0) */
  const char *src;                             /* source element at box index 0 */
  char *dst;
  size_t es;
} PlaceJob;

#define SCATTER_ROW(T)                                                                        \
  do {                                                                                        \
    T *d_ = (T *)dst + b;                                                                     \
    const T *s_ = (const T *)src;                                                             \
    for (int64_t k = 0; k < n; k++) d_[k * st] = s_[k * ss];                                  \
  } while (0)

/* Rows [begin, end) of the output (a row = the last dim). */
static void place_rows(void *arg, int64_t begin, int64_t end) {
  const PlaceJob *j = arg;
  int last = j->rank - 1;
  int64_t w = j->dims[last], b = j->begin[last], n = j->size[last], st = j->step[last];
  int64_t ss = j->sstride[last], idx[FLOE_MAX_DIMS];
  size_t es = j->es, row_bytes = (size_t)w * es;
  row_index(begin, last, j->dims, idx);
  for (int64_t row = begin; row < end; row++, row_next(last, j->dims, idx)) {
    char *dst = j->dst + (size_t)row * row_bytes;
    int64_t off = 0;
    int inside = 1;
    for (int k = 0; k < last && inside; k++) {
      int64_t rel = idx[k] - j->begin[k];
      inside = rel >= 0 && rel % j->step[k] == 0 && rel / j->step[k] < j->size[k];
      off += rel / j->step[k] * j->sstride[k];
    }
    if (!inside) {
      memset(dst, 0, row_bytes);
      continue;
    }
    const char *src = j->src + off * (int64_t)es;
    if (st == 1 && ss == 1) {
      memset(dst, 0, (size_t)b * es);
      memcpy(dst + (size_t)b * es, src, (size_t)n * es);
      memset(dst + (size_t)(b + n) * es, 0, (size_t)(w - b - n) * es);
      continue;
    }
    memset(dst, 0, row_bytes);
    switch (es) {
      case 1: SCATTER_ROW(ga_e8); break;
      case 2: SCATTER_ROW(ga_e16); break;
      case 4: SCATTER_ROW(ga_e32); break;
      default: SCATTER_ROW(ga_e64); break;
    }
  }
}

/* Fills out (dims j->dims, allocated, non-empty) from the job: drops size-1 dims, merges
 * trailing dims the box covers whole into longer rows, then runs rows over the pool. */
static void place_run(PlaceJob *j) {
  int r = 0;
  int64_t total = product(j->rank, j->dims);
  if (product(j->rank, j->size) == 0) { /* an empty box: all zeros */
    memset(j->dst, 0, (size_t)total * j->es);
    return;
  }
  for (int k = 0; k < j->rank; k++) {
    if (j->dims[k] == 1) continue;
    j->dims[r] = j->dims[k];
    j->begin[r] = j->begin[k];
    j->step[r] = j->step[k];
    j->size[r] = j->size[k];
    j->sstride[r] = j->sstride[k];
    r++;
  }
  if (r == 0) {
    j->dims[0] = j->size[0] = j->step[0] = j->sstride[0] = 1;
    j->begin[0] = 0;
    r = 1;
  }
  while (r >= 2) {
    int l = r - 1, k = r - 2;
    int whole = j->begin[l] == 0 && j->step[l] == 1 && j->size[l] == j->dims[l];
    if (!whole || j->step[k] != 1 || j->sstride[k] != j->sstride[l] * j->dims[l] ||
        j->dims[k] * j->dims[l] > GA_MERGE_ROW)
      break;
    j->begin[k] *= j->dims[l];
    j->size[k] *= j->dims[l];
    j->dims[k] *= j->dims[l];
    j->sstride[k] = j->sstride[l];
    r--;
  }
  j->rank = r;
  int64_t w = j->dims[r - 1];
  cpu_parallel_for(total / w, w, place_rows, j);
}

static floe_code slice_grad_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *g = cpu_host->ctx_input(ctx, 2);
  int gr = cpu_host->tensor_rank(g), rank, nb;
  const int64_t *gd = cpu_host->tensor_dims(g);
  int64_t dims[FLOE_MAX_DIMS], begin[FLOE_MAX_DIMS];
  floe_code rc = shape_input(ctx, 0, "input_shape", dims, &rank);
  if (rc == FLOE_OK) rc = index_vector(ctx, 1, "begin", FLOE_MAX_DIMS, begin, &nb);
  if (rc != FLOE_OK) return rc;
  int ok = nb == rank && gr == rank;
  for (int d = 0; ok && d < rank; d++) ok = begin[d] >= 0 && begin[d] + gd[d] <= dims[d];
  if (!ok)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "a slice at begin %s of shape %s (grad) does not fit in "
                                   "input_shape %s",
                                   SHAPE(nb, begin), SHAPE(gr, gd), SHAPE(rank, dims));
  if (same_dims(gr, gd, rank, dims)) return cpu_host->ctx_forward_input(ctx, 2, 0, rank, dims);
  PlaceJob j = {.rank = rank, .src = cpu_host->tensor_data(g),
                .es = cpu_host->dtype_size(cpu_host->tensor_dtype(g))};
  void *out;
  if ((rc = alloc_out(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  if (product(rank, dims) == 0) return FLOE_OK;
  j.dst = out;
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    j.dims[d] = dims[d];
    j.begin[d] = begin[d];
    j.step[d] = 1;
    j.size[d] = gd[d];
    j.sstride[d] = s;
    s *= gd[d];
  }
  place_run(&j);
  return FLOE_OK;
}

static floe_code strided_slice_grad_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *dy = cpu_host->ctx_input(ctx, 4);
  int64_t dims[FLOE_MAX_DIMS];
  int rank;
  floe_code rc = shape_input(ctx, 0, "shape", dims, &rank);
  if (rc != FLOE_OK) return rc;
  CpuStridedSlice sl;
  if ((rc = cpu_strided_slice_resolve(ctx, state, 1, rank, dims, &sl)) != FLOE_OK) return rc;
  int dr = cpu_host->tensor_rank(dy);
  const int64_t *dd = cpu_host->tensor_dims(dy);
  if (!same_dims(dr, dd, sl.out_rank, sl.out_dims))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dy has shape %s, but the slice of shape %s is %s",
                                   SHAPE(dr, dd), SHAPE(rank, dims),
                                   SHAPE(sl.out_rank, sl.out_dims));
  if (sl.whole) return cpu_host->ctx_forward_input(ctx, 4, 0, rank, dims);
  void *out;
  if ((rc = alloc_out(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  if (product(rank, dims) == 0) return FLOE_OK;
  /* dy holds the box [size] of the input dims in order; a negative stride walks a dim
   * backwards, so the box starts at its lowest index and reads dy in reverse there. */
  PlaceJob j = {.rank = rank, .dst = out, .es = cpu_host->dtype_size(cpu_host->tensor_dtype(dy))};
  int64_t s = 1, off = 0;
  for (int d = rank - 1; d >= 0; d--) {
    int64_t n = sl.size[d], step = sl.stride[d];
    j.dims[d] = dims[d];
    j.size[d] = n;
    if (step > 0) {
      j.begin[d] = sl.begin[d];
      j.step[d] = step;
      j.sstride[d] = s;
    } else {
      j.begin[d] = n > 0 ? sl.begin[d] + (n - 1) * step : 0;
      j.step[d] = -step;
      j.sstride[d] = -s;
      if (n > 0) off += (n - 1) * s;
    }
    s *= n;
  }
  j.src = (const char *)cpu_host->tensor_data(dy) + off * (int64_t)j.es;
  place_run(&j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* GatherGrad: out[o, idx[k], :] += grad[o, k, :]. Each work unit owns a range of rows of
 * out (and a chunk of columns), scans every index and adds the rows that land in its
 * range, so no two threads write one element and the sums do not depend on the thread
 * count. */

typedef struct ScatterJob {
  void (*add)(void *d, const void *s, int64_t n);
  const char *grad;
  const void *indices;
  FloeDType idt, dt;
  char *acc;         /* the output, or f32 accumulators for halves */
  void *half_out;    /* halves: the output, converted from acc per unit */
  size_t acc_es, g_es;
  int64_t O, D, N, I; /* out [O, D, I], grad [O, N, I] */
  int64_t P, Dp;      /* D cut into P parts of Dp rows */
  int64_t C, W;       /* I cut into C chunks of W columns */
} ScatterJob;

static void scatter_units(void *arg, int64_t begin, int64_t end) {
  const ScatterJob *j = arg;
  for (int64_t u = begin; u < end; u++) {
    int64_t c = u % j->C, p = u / j->C % j->P, o = u / (j->C * j->P);
    int64_t d0 = p * j->Dp, d1 = d0 + j->Dp < j->D ? d0 + j->Dp : j->D;
    int64_t c0 = c * j->W, w = j->I - c0 < j->W ? j->I - c0 : j->W;
    char *acc = j->acc + (size_t)(o * j->D * j->I + c0) * j->acc_es;
    const char *g = j->grad + (size_t)(o * j->N * j->I + c0) * j->g_es;
    for (int64_t d = d0; d < d1; d++)
      memset(acc + (size_t)(d * j->I) * j->acc_es, 0, (size_t)w * j->acc_es);
    for (int64_t k = 0; k < j->N; k++) {
      int64_t v = index_at(j->indices, j->idt, k);
      if (v >= d0 && v < d1)
        j->add(acc + (size_t)(v * j->I) * j->acc_es, g + (size_t)(k * j->I) * j->g_es, w);
    }
    if (!j->half_out) continue;
    for (int64_t d = d0; d < d1; d++) {
      size_t at = (size_t)(o * j->D * j->I + d * j->I + c0);
      const float *a = (const float *)j->acc + at;
      cpu_f32_to_half_row((uint16_t *)j->half_out + at, a, w, j->dt);
    }
  }
}

static floe_code gather_grad_compute(void *state, FloeKernelContext *ctx) {
  const GaState *st = state;
  const FloeTensor *ind = cpu_host->ctx_input(ctx, 1), *g = cpu_host->ctx_input(ctx, 2);
  int64_t pd[FLOE_MAX_DIMS], want[FLOE_MAX_DIMS];
  int pr;
  floe_code rc = shape_input(ctx, 0, "params_shape", pd, &pr);
  if (rc != FLOE_OK) return rc;
  FloeDType idt = cpu_host->tensor_dtype(ind), dt = cpu_host->tensor_dtype(g);
  int ir = cpu_host->tensor_rank(ind), gr = cpu_host->tensor_rank(g);
  const int64_t *id = cpu_host->tensor_dims(ind), *gd = cpu_host->tensor_dims(g);
  if (!is_index(idt))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "indices must be i32 or i64, got %s", cpu_host->dtype_name(idt));
  if (pr == 0 || st->axis < -pr || st->axis >= pr)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %" PRId64 " is out of range for params_shape %s "
                                   "(expected in [%d, %d), rank >= 1)",
                                   st->axis, SHAPE(pr, pd), -pr, pr);
  int axis = (int)(st->axis < 0 ? st->axis + pr : st->axis), wr = 0;
  if (pr - 1 + ir > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "params_shape %s with indices %s gives a gradient of more than "
                                   "%d dims",
                                   SHAPE(pr, pd), SHAPE(ir, id), FLOE_MAX_DIMS);
  for (int i = 0; i < axis; i++) want[wr++] = pd[i];
  for (int i = 0; i < ir; i++) want[wr++] = id[i];
  for (int i = axis + 1; i < pr; i++) want[wr++] = pd[i];
  if (!same_dims(gr, gd, wr, want))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "grad has shape %s; params_shape %s gathered with indices %s "
                                   "along axis %d gives %s",
                                   SHAPE(gr, gd), SHAPE(pr, pd), SHAPE(ir, id), axis,
                                   SHAPE(wr, want));
  ScatterJob j = {.add = row_ops(dt)->add, .grad = cpu_host->tensor_data(g),
                  .indices = cpu_host->tensor_data(ind), .idt = idt, .dt = dt,
                  .g_es = cpu_host->dtype_size(dt), .O = product(axis, pd), .D = pd[axis],
                  .N = cpu_host->tensor_num_elements(ind),
                  .I = product(pr - axis - 1, pd + axis + 1)};
  for (int64_t k = 0; k < j.N; k++) {
    int64_t v = index_at(j.indices, idt, k);
    if (v < 0 || v >= j.D)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "indices[%" PRId64 "] = %" PRId64 " is not in [0, %" PRId64
                                     ") (params_shape %s, axis %d)",
                                     k, v, j.D, SHAPE(pr, pd), axis);
  }
  void *out;
  if ((rc = alloc_out(ctx, 0, pr, pd, &out)) != FLOE_OK) return rc;
  int64_t total = j.O * j.D * j.I;
  if (total == 0) return FLOE_OK;
  j.acc = out;
  j.acc_es = j.g_es;
  if (cpu_is_half(dt)) {
    void *tmp;
    if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)total * sizeof(float), &tmp)) != FLOE_OK)
      return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %" PRId64 " f32 accumulators",
                                     total);
    j.acc = tmp;
    j.acc_es = sizeof(float);
    j.half_out = out;
    j.add = dt == FLOE_F16 ? add_f16_f32 : add_bf16_f32;
  }
  /* Enough units for the pool: rows of out first (each unit rescans the indices, so only
   * when rows are wide enough to pay for it), then column chunks. */
  int64_t work = j.N * j.I + total;
  int64_t want_units = work >= CPU_PARALLEL_MIN_COST ? 4 * (int64_t)cpu_host->num_threads() : 1;
  j.P = 1;
  if (j.O < want_units && j.I >= 16) {
    j.P = (want_units + j.O - 1) / j.O;
    if (j.P > j.D) j.P = j.D;
  }
  j.Dp = (j.D + j.P - 1) / j.P;
  j.P = (j.D + j.Dp - 1) / j.Dp;
  j.C = 1;
  if (j.O * j.P < want_units && j.I >= 512) {
    j.C = (want_units + j.O * j.P - 1) / (j.O * j.P);
    if (j.C > j.I / 256) j.C = j.I / 256;
  }
  j.W = (j.I + j.C - 1) / j.C;
  j.W = (j.W + 15) / 16 * 16; /* chunks of whole 64-byte lines of f32 */
  j.C = (j.I + j.W - 1) / j.W;
  cpu_parallel_for(j.O * j.P * j.C, (j.N * j.W) / j.P + j.N + j.Dp * j.W, scatter_units, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* PadGrad. CONSTANT crops; REFLECT folds one padded dim at a time: viewing the tensor as
 * [O, L, I] along that dim (L = b + n + a), out row j = row b + j plus the rows that
 * mirror onto it (b - j for 1 <= j <= b; b + 2n - 2 - j for n - 1 - a <= j <= n - 2). */

typedef struct CropJob {
  int rank;
  int64_t odims[FLOE_MAX_DIMS], before[FLOE_MAX_DIMS], gstride[FLOE_MAX_DIMS];
  const char *src;
  char *dst;
  size_t es;
} CropJob;

static void crop_rows(void *arg, int64_t begin, int64_t end) {
  const CropJob *j = arg;
  int last = j->rank - 1;
  int64_t idx[FLOE_MAX_DIMS];
  size_t row_bytes = (size_t)j->odims[last] * j->es;
  row_index(begin, last, j->odims, idx);
  for (int64_t row = begin; row < end; row++, row_next(last, j->odims, idx)) {
    int64_t off = j->before[last];
    for (int k = 0; k < last; k++) off += (idx[k] + j->before[k]) * j->gstride[k];
    memcpy(j->dst + (size_t)row * row_bytes, j->src + (size_t)off * j->es, row_bytes);
  }
}

typedef struct FoldJob {
  const RowOps *ops;
  const char *src;
  char *dst;
  size_t es;
  int64_t O, n, b, a, I; /* src [O, b + n + a, I] -> dst [O, n, I] */
  int64_t C, W;          /* I cut into C chunks of W */
} FoldJob;

static void fold_units(void *arg, int64_t begin, int64_t end) {
  const FoldJob *j = arg;
  int64_t L = j->b + j->n + j->a, I = j->I;
  size_t es = j->es;
  if (I == 1) { /* the last dim: whole rows of elements, no per-element calls */
    j->ops->fold1(j->dst + (size_t)(begin * j->n) * es, j->src + (size_t)(begin * L) * es,
                  end - begin, j->n, j->b, j->a);
    return;
  }
  for (int64_t u = begin; u < end; u++) {
    int64_t o = u / j->C, c0 = u % j->C * j->W, w = I - c0 < j->W ? I - c0 : j->W;
    const char *s = j->src + (size_t)(o * L * I + c0) * es;
    char *d = j->dst + (size_t)(o * j->n * I + c0) * es;
    size_t rs = (size_t)I * es; /* bytes between rows */
    for (int64_t r = 0; r < j->n; r++) memcpy(d + r * rs, s + (j->b + r) * rs, (size_t)w * es);
    for (int64_t r = 1; r <= j->b; r++) j->ops->add(d + r * rs, s + (j->b - r) * rs, w);
    for (int64_t t = 0; t < j->a; t++)
      j->ops->add(d + (j->n - 2 - t) * rs, s + (j->b + j->n + t) * rs, w);
  }
}

/* REFLECT: folds every padded dim of src (dims cur, updated in place; elements of es bytes
 * in the accumulation type) into dst. Passes between the first and the last ping-pong
 * between two scratch buffers from ctx, each as large as the first pass's result. */
static floe_code reflect_run(FloeKernelContext *ctx, const RowOps *ops, size_t es,
                             const char *src, char *dst, int rank, int64_t *cur,
                             const int64_t *before, const int64_t *after) {
  int last_pass = -1;
  for (int d = 0; d < rank; d++)
    if (before[d] || after[d]) last_pass = d;
  char *buf[2] = {NULL, NULL};
  int which = 0;
  for (int d = 0; d <= last_pass; d++) {
    if (!before[d] && !after[d]) continue;
    FoldJob j = {.ops = ops, .src = src, .es = es, .b = before[d], .a = after[d],
                 .O = product(d, cur), .I = product(rank - d - 1, cur + d + 1)};
    j.n = cur[d] - j.b - j.a;
    int64_t out_n = j.O * j.n * j.I;
    if (d == last_pass) {
      j.dst = dst;
    } else {
      if (!buf[which]) {
        void *tmp;
        floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)out_n * es, &tmp);
        if (rc != FLOE_OK)
          return cpu_host->ctx_set_error(ctx, rc, "cannot allocate a %" PRId64
                                         "-element intermediate", out_n);
        buf[which] = tmp;
      }
      j.dst = buf[which];
    }
    int64_t size = j.O * (j.b + j.n + j.a) * j.I;
    int64_t nt = size >= CPU_PARALLEL_MIN_COST ? cpu_host->num_threads() : 1;
    j.C = 1;
    if (j.I > 1 && j.O < 4 * nt && j.I >= 128) {
      j.C = (4 * nt + j.O - 1) / j.O;
      if (j.C > j.I / 64) j.C = j.I / 64;
    }
    j.W = (j.I + j.C - 1) / j.C;
    j.C = (j.I + j.W - 1) / j.W;
    cpu_parallel_for(j.O * j.C, (j.b + j.n + j.a) * j.W, fold_units, &j);
    cur[d] = j.n;
    src = j.dst;
    which ^= 1;
  }
  return FLOE_OK;
}

static floe_code pad_grad_compute(void *state, FloeKernelContext *ctx) {
  const GaState *st = state;
  const FloeTensor *g = cpu_host->ctx_input(ctx, 0), *pt = cpu_host->ctx_input(ctx, 1);
  int rank = cpu_host->tensor_rank(g);
  const int64_t *gd = cpu_host->tensor_dims(g);
  FloeDType pdt = cpu_host->tensor_dtype(pt), dt = cpu_host->tensor_dtype(g);
  const int64_t *pd = cpu_host->tensor_dims(pt);
  if (!is_index(pdt) || cpu_host->tensor_rank(pt) != 2 || pd[0] != rank || pd[1] != 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "paddings must be an i32/i64 tensor of shape [%d,2] for grad "
                                   "of shape %s, got %s %s",
                                   rank, SHAPE(rank, gd), cpu_host->dtype_name(pdt), TSHAPE(pt));
  const void *pv = cpu_host->tensor_data(pt);
  int64_t before[FLOE_MAX_DIMS], after[FLOE_MAX_DIMS], dims[FLOE_MAX_DIMS];
  int none = 1;
  for (int i = 0; i < rank; i++) {
    int64_t b = index_at(pv, pdt, 2 * i), a = index_at(pv, pdt, 2 * i + 1), n = gd[i] - b - a;
    if (b < 0 || a < 0 || n < 0 || (st->reflect && (a || b) && (b >= n || a >= n)))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "paddings (%" PRId64 ", %" PRId64 ") of dim %d do not fit "
                                     "grad of shape %s: they must be >= 0 and leave an input "
                                     "size >= 0%s",
                                     b, a, i, SHAPE(rank, gd),
                                     st->reflect ? " larger than each (REFLECT)" : "");
    before[i] = b;
    after[i] = a;
    dims[i] = n;
    none &= a == 0 && b == 0;
  }
  if (none) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, gd);
  void *out;
  floe_code rc = alloc_out(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  int64_t total = product(rank, dims);
  if (total == 0) return FLOE_OK;
  size_t es = cpu_host->dtype_size(dt);
  if (!st->reflect) {
    CropJob j = {.rank = rank, .src = cpu_host->tensor_data(g), .dst = out, .es = es};
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
      j.odims[d] = dims[d];
      j.before[d] = before[d];
      j.gstride[d] = s;
      s *= gd[d];
    }
    cpu_parallel_for(total / dims[rank - 1], dims[rank - 1], crop_rows, &j);
    return FLOE_OK;
  }
  int64_t cur[FLOE_MAX_DIMS];
  memcpy(cur, gd, (size_t)rank * sizeof *cur);
  if (!cpu_is_half(dt))
    return reflect_run(ctx, row_ops(dt), es, cpu_host->tensor_data(g), out, rank, cur, before,
                       after);
  float *wide = NULL, *acc;
  if ((rc = widen_half(ctx, dt, cpu_host->tensor_data(g), product(rank, gd), &wide)) != FLOE_OK)
    return rc;
  void *tmp;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)total * sizeof(float), &tmp)) != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %" PRId64 " f32 results", total);
  acc = tmp;
  rc = reflect_run(ctx, &row_f32, sizeof(float), (const char *)wide, (char *)acc, rank, cur,
                   before, after);
  if (rc == FLOE_OK) cpu_convert_half(dt, false, acc, out, total);
  return rc;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_grad_array(FloePluginRegistrar *reg) {
  typedef floe_code (*ComputeFn)(void *, FloeKernelContext *);
  typedef floe_code (*CreateFn)(const FloeHostApi *, FloeKernelInit *, void *, void **);
  const uint32_t all = FLOE_DTYPES_ALL, numeric = FLOE_DTYPES_NUMERIC;
  const uint32_t index = FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64);
  const uint32_t cheap = FLOE_KERNEL_INEXPENSIVE;
  const struct {
    const char *op, *attr;
    uint32_t types, flags;
    ComputeFn compute;
    CreateFn create; /* allocates a state freed by state_free */
  } k[] = {
      {"BroadcastTo", "T", all, 0, broadcast_to_compute, NULL},
      {"SumToShape", "T", numeric, 0, sum_to_shape_compute, NULL},
      {"ExpandReduced", "T", numeric, 0, expand_reduced_compute, state_create},
      {"InvertPermutation", "T", index, cheap, invert_permutation_compute, NULL},
      {"ConcatOffset", NULL, 0, cheap, concat_offset_compute, NULL},
      {"SliceGrad", "T", all, 0, slice_grad_compute, NULL},
      {"StridedSliceGrad", "T", all, 0, strided_slice_grad_compute, cpu_strided_slice_create},
      {"GatherGrad", "T", numeric, 0, gather_grad_compute, state_create},
      {"PadGrad", "T", numeric, 0, pad_grad_compute, state_create},
      {"TileGrad", "T", numeric, 0, tile_grad_compute, NULL},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    floe_code rc = cpu_add_kernel(reg, k[i].op, k[i].attr, k[i].types, k[i].flags, k[i].compute,
                                  k[i].create, k[i].create ? state_free : NULL, NULL);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
