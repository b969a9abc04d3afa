/* SPDX-License-Identifier: Apache-2.0 */
/* array.c - data-movement, shape and fill kernels of the CPU plugin.
 *
 * None of these ops does arithmetic, so every kernel moves elements by size (1, 2, 4 or 8
 * bytes) and one kernel serves every dtype. Reshape-like ops are views (ctx_forward_input),
 * and so are Split and Slice pieces that are one contiguous block of their input
 * (ctx_forward_input_slice, ABI 1.1); other slices and transposes go through one
 * strided-copy engine (coalesced dims, memcpy rows when the innermost input stride is 1,
 * cache-blocked tiles when it is not).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu.h"
#include "cpu_util.h"

/* Edge of the square tiles of the blocked transpose (32x32x8 bytes fits in L1). */
#define ARRAY_TILE 32
/* Inputs or outputs handled with stack arrays before falling back to scratch memory. */
#define ARRAY_STACK_LIST 16

/* Element types for moving 1, 2, 4 and 8-byte elements of any dtype (may_alias: the same
 * buffer is float or int elsewhere). */
typedef uint8_t __attribute__((may_alias)) e8;
typedef uint16_t __attribute__((may_alias)) e16;
typedef uint32_t __attribute__((may_alias)) e32;
typedef uint64_t __attribute__((may_alias)) e64;

/* ------------------------------------------------------------------------------------ */
/* Small helpers. */

/* "[2,3,4]" by value, so several can appear in one error message. */
typedef struct ShapeStr {
  char s[CPU_SHAPE_STR_MAX];
} ShapeStr;

static ShapeStr shape_str(int rank, const int64_t *dims) {
  ShapeStr r;
  cpu_shape_str(r.s, sizeof r.s, rank, dims);
  return r;
}

static ShapeStr tensor_shape_str(const FloeTensor *t) {
  return shape_str(cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

static int64_t product(int n, const int64_t *dims) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= dims[i];
  return p;
}

/* Dense row-major strides (elements) of dims. */
static void dense_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

static inline int64_t index_at(const void *data, FloeDType dt, int64_t i) {
  return dt == FLOE_I32 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
}

/* Read input `in`, a 1-D i32/i64 tensor, into out. want >= 0 demands exactly that many
 * values; otherwise up to `max` are accepted. */
static floe_code read_index_vector(FloeKernelContext *ctx, int in, const char *what,
                                   int64_t want, int64_t *out, int max, int *n_out) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, in);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if (dt != FLOE_I32 && dt != FLOE_I64)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must be i32 or i64, got %s",
                                   what, cpu_host->dtype_name(dt));
  int64_t n = cpu_host->tensor_num_elements(t);
  if (cpu_host->tensor_rank(t) != 1 || (want >= 0 && n != want))
    return want >= 0 ? cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                               "%s must be a 1-D tensor of %" PRId64
                                               " values, got shape %s",
                                               what, want, tensor_shape_str(t).s)
                     : cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                               "%s must be a 1-D tensor, got shape %s", what,
                                               tensor_shape_str(t).s);
  if (n > max)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s has %" PRId64 " values; at most %d are supported", what,
                                   n, max);
  const void *data = cpu_host->tensor_data(t);
  for (int64_t i = 0; i < n; i++) out[i] = index_at(data, dt, i);
  *n_out = (int)n;
  return FLOE_OK;
}

/* Read input `in`, an i32/i64 scalar. */
static floe_code read_index_scalar(FloeKernelContext *ctx, int in, const char *what,
                                   int64_t *out) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, in);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if (dt != FLOE_I32 && dt != FLOE_I64)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must be i32 or i64, got %s",
                                   what, cpu_host->dtype_name(dt));
  if (cpu_host->tensor_rank(t) != 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be a scalar, got shape %s", what,
                                   tensor_shape_str(t).s);
  *out = index_at(cpu_host->tensor_data(t), dt, 0);
  return FLOE_OK;
}

/* Map axis in [-rank, rank) to [0, rank). */
static floe_code normalize_axis(FloeKernelContext *ctx, int64_t axis, int rank,
                                const FloeTensor *t, int64_t *out) {
  if (axis < -rank || axis >= rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %" PRId64 " is out of range for shape %s (expected "
                                   "[%d, %d))",
                                   axis, tensor_shape_str(t).s, -rank, rank);
  *out = axis < 0 ? axis + rank : axis;
  return FLOE_OK;
}

static int64_t attr_int_or(const FloeAttrs *a, const char *name, int64_t dflt) {
  int64_t v;
  return cpu_host->attr_int(a, name, &v) == FLOE_OK ? v : dflt;
}

/* Copy one slice of `bytes` bytes; sizes of one element skip the memcpy call. */
static inline void copy_slice(char *dst, const char *src, size_t bytes) {
  switch (bytes) {
  case 8: *(e64 *)dst = *(const e64 *)src; break;
  case 4: *(e32 *)dst = *(const e32 *)src; break;
  case 2: *(e16 *)dst = *(const e16 *)src; break;
  case 1: *(e8 *)dst = *(const e8 *)src; break;
  default: memcpy(dst, src, bytes);
  }
}

/* True when the host can make views of sub-blocks (a 1.0 core's table ends before it). */
static int can_slice_view(void) {
  return FLOE_HAS_FIELD(cpu_host, FloeHostApi, ctx_forward_input_slice);
}

/* True when the non-empty box (begin, size, step per dim; step NULL = all 1) of a dense
 * tensor of dims is one contiguous run of its elements: dims before some dim k have size 1,
 * dims after k are whole. *first is then the run's first element. */
static int box_contiguous(int rank, const int64_t *dims, const int64_t *begin,
                          const int64_t *size, const int64_t *step, int64_t *first) {
  int k = rank - 1;
  while (k >= 0 && size[k] == dims[k] && (size[k] <= 1 || !step || step[k] == 1)) k--;
  if (k >= 0 && size[k] > 1 && step && step[k] != 1) return 0;
  for (int i = 0; i < k; i++)
    if (size[i] != 1) return 0;
  int64_t stride = 1, off = 0;
  for (int i = rank - 1; i >= 0; i--) {
    off += begin[i] * stride;
    stride *= dims[i];
  }
  *first = off;
  return 1;
}

/* ------------------------------------------------------------------------------------ */
/* Fill: n elements of esize bytes, all equal to `value`. */

typedef struct FillJob {
  char *dst;
  size_t esize;
  uint64_t value; /* the element's bytes in the low esize bytes */
} FillJob;

#define FILL_LOOP(T)                                                  \
  do {                                                                \
    T *d_ = (T *)j->dst;                                              \
    T v_;                                                             \
    memcpy(&v_, &j->value, sizeof v_);                                \
    for (int64_t i = begin; i < end; i++) d_[i] = v_;                 \
  } while (0)

static void fill_range(void *arg, int64_t begin, int64_t end) {
  const FillJob *j = arg;
  switch (j->esize) {
  case 1: memset(j->dst + begin, (int)(j->value & 0xff), (size_t)(end - begin)); break;
  case 2: FILL_LOOP(e16); break;
  case 4: FILL_LOOP(e32); break;
  default: FILL_LOOP(e64); break;
  }
}

static void fill_run(void *dst, int64_t n, size_t esize, const void *value) {
  FillJob j = {dst, esize, 0};
  memcpy(&j.value, value, esize);
  if (j.value == 0) {
    j.esize = 1; /* all-zero bytes: a memset of any dtype */
    n *= (int64_t)esize;
  }
  cpu_parallel_for(n, 1, fill_range, &j);
}

/* ------------------------------------------------------------------------------------ */
/* Strided copy: dst (dense, dims) <- src[sum_k i_k * stride[k]]. Serves Transpose, Slice
 * and StridedSlice. */

typedef struct Strided {
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  int64_t stride[FLOE_MAX_DIMS]; /* input stride (elements) of each output dim; may be < 0 */
  const char *src;               /* input element at output index 0 */
  char *dst;
  size_t esize;
  int q;           /* tiled plan: output dim whose input stride is 1 (not the last), else -1 */
  int64_t ntq, ntl; /* tiles along dim q and along the last dim */
  int64_t tile_q;   /* a tile's extent along dim q: longer when the last dim is short */
} Strided;

/* Drop size-1 dims and merge neighbours that are contiguous in the input too. */
static void strided_simplify(Strided *s) {
  int r = 0;
  for (int k = 0; k < s->rank; k++) {
    if (s->dims[k] == 1) continue;
    if (r > 0 && s->stride[r - 1] == s->stride[k] * s->dims[k]) {
      s->dims[r - 1] *= s->dims[k];
      s->stride[r - 1] = s->stride[k];
    } else {
      s->dims[r] = s->dims[k];
      s->stride[r] = s->stride[k];
      r++;
    }
  }
  if (r == 0) {
    s->dims[0] = 1;
    s->stride[0] = 1;
    r = 1;
  }
  s->rank = r;
}

#define GATHER_ROW(T)                                                 \
  do {                                                                \
    T *d_ = (T *)dst;                                                 \
    const T *s_ = (const T *)src;                                     \
    for (int64_t j = 0; j < n; j++) d_[j] = s_[j * stride];          \
  } while (0)

/* dst[0..n) = src[j * stride]. */
static void gather_row(char *dst, const char *src, int64_t n, int64_t stride, size_t esize) {
  if (stride == 1) {
    memcpy(dst, src, (size_t)n * esize);
    return;
  }
  switch (esize) {
  case 1: GATHER_ROW(e8); break;
  case 2: GATHER_ROW(e16); break;
  case 4: GATHER_ROW(e32); break;
  default: GATHER_ROW(e64); break;
  }
}

/* Rows [begin, end) of the output (a row = the last dim). */
static void strided_rows(void *arg, int64_t begin, int64_t end) {
  const Strided *s = arg;
  int outer = s->rank - 1;
  int64_t n = s->dims[outer], idx[FLOE_MAX_DIMS], off = 0, r = begin;
  for (int k = outer - 1; k >= 0; k--) {
    idx[k] = r % s->dims[k];
    r /= s->dims[k];
    off += idx[k] * s->stride[k];
  }
  size_t row_bytes = (size_t)n * s->esize;
  char *dst = s->dst + (size_t)begin * row_bytes;
  for (int64_t row = begin; row < end; row++, dst += row_bytes) {
    gather_row(dst, s->src + off * (int64_t)s->esize, n, s->stride[outer], s->esize);
    for (int k = outer - 1; k >= 0; k--) { /* odometer step */
      off += s->stride[k];
      if (++idx[k] < s->dims[k]) break;
      off -= s->stride[k] * s->dims[k];
      idx[k] = 0;
    }
  }
}

#define TILE_LOOP(NA, NB)                                                      \
  for (int64_t a = 0; a < (NA); a++)                                           \
    for (int64_t b = 0; b < (NB); b++) d_[a * dq + b] = s_[a + b * sl]

/* Full tiles get constant bounds, which the compiler unrolls and schedules better. */
#define TILE_COPY(T)                                                           \
  do {                                                                         \
    T *d_ = (T *)dst;                                                          \
    const T *s_ = (const T *)src;                                              \
    if (na == ARRAY_TILE && nb == ARRAY_TILE)                                  \
      TILE_LOOP(ARRAY_TILE, ARRAY_TILE);                                       \
    else                                                                       \
      TILE_LOOP(na, nb);                                                       \
  } while (0)

#if defined(__x86_64__)
/* A 4-byte tile as 8 x 8 blocks transposed in AVX registers (eight loads, 24 shuffles, eight
 * stores instead of 64 strided element copies: 2-4x the scalar loop on tiles in cache), the
 * rows and columns past the last whole block element by element. Moves bits only. */
__attribute__((target("avx2"))) static void tile_copy32_avx2(char *dst, const char *src,
                                                             int64_t na, int64_t nb,
                                                             int64_t dq, int64_t sl) {
  float *d = (float *)dst;
  const float *s = (const float *)src;
  int64_t a8 = na & ~(int64_t)7, b8 = nb & ~(int64_t)7;
  for (int64_t a = 0; a < a8; a += 8)
    for (int64_t b = 0; b < b8; b += 8) {
      const float *p = s + a + b * sl; /* rows b..b+7 of the input, 8 elements each */
      __m256 r0 = _mm256_loadu_ps(p), r1 = _mm256_loadu_ps(p + sl);
      __m256 r2 = _mm256_loadu_ps(p + 2 * sl), r3 = _mm256_loadu_ps(p + 3 * sl);
      __m256 r4 = _mm256_loadu_ps(p + 4 * sl), r5 = _mm256_loadu_ps(p + 5 * sl);
      __m256 r6 = _mm256_loadu_ps(p + 6 * sl), r7 = _mm256_loadu_ps(p + 7 * sl);
      __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float *q = d + a * dq + b; /* output rows a..a+7 */
      _mm256_storeu_ps(q, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(q + dq, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(q + 2 * dq, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(q + 3 * dq, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(q + 4 * dq, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(q + 5 * dq, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(q + 6 * dq, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(q + 7 * dq, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
  e32 *d_ = (e32 *)dst;
  const e32 *s_ = (const e32 *)src;
  for (int64_t a = 0; a < a8; a++)
    for (int64_t b = b8; b < nb; b++) d_[a * dq + b] = s_[a + b * sl];
  for (int64_t a = a8; a < na; a++)
    for (int64_t b = 0; b < nb; b++) d_[a * dq + b] = s_[a + b * sl];
}

/* A tile of 4-byte elements whose output rows are pairs (nb == 2: two input rows
 * interleaved, a shuffle of two channel groups): eight of each row at a time, unpacked. */
__attribute__((target("avx2"))) static void tile_pairs32_avx2(char *dst, const char *src,
                                                              int64_t na, int64_t dq,
                                                              int64_t sl) {
  float *d = (float *)dst;
  const float *s0 = (const float *)src, *s1 = s0 + sl;
  int64_t a = 0;
  if (dq == 2) { /* the pairs are adjacent: sixteen floats of output at a time */
    for (; a + 8 <= na; a += 8) {
      __m256 x = _mm256_loadu_ps(s0 + a), y = _mm256_loadu_ps(s1 + a);
      __m256 lo = _mm256_unpacklo_ps(x, y), hi = _mm256_unpackhi_ps(x, y);
      _mm256_storeu_ps(d + 2 * a, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(d + 2 * a + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
  e32 *d_ = (e32 *)dst;
  const e32 *s_ = (const e32 *)src;
  for (; a < na; a++) {
    d_[a * dq] = s_[a];
    d_[a * dq + 1] = s_[a + sl];
  }
}

/* 1 when the CPU runs AVX2, 0 when not, -1 until first asked (a benign race: every thread
 * stores the same answer). */
static int tile_avx2 = -1;
#endif

/* One na x nb tile: output rows along dim q (output stride dq, input stride 1), columns
 * along the last dim (output stride 1, input stride sl). */
static void tile_copy(char *dst, const char *src, int64_t na, int64_t nb, int64_t dq,
                      int64_t sl, size_t esize) {
#if defined(__x86_64__)
  if (esize == 4 && na >= 8 && (nb >= 8 || nb == 2)) {
    int avx2 = __atomic_load_n(&tile_avx2, __ATOMIC_RELAXED);
    if (avx2 < 0) {
      __builtin_cpu_init();
      avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
      __atomic_store_n(&tile_avx2, avx2, __ATOMIC_RELAXED);
    }
    if (avx2 && nb == 2) {
      tile_pairs32_avx2(dst, src, na, dq, sl);
      return;
    }
    if (avx2) {
      tile_copy32_avx2(dst, src, na, nb, dq, sl);
      return;
    }
  }
#endif
  switch (esize) {
  case 1: TILE_COPY(e8); break;
  case 2: TILE_COPY(e16); break;
  case 4: TILE_COPY(e32); break;
  default: TILE_COPY(e64); break;
  }
}

/* Tiles [begin, end): unit = (outer index over the other dims, tile along q, tile along the
 * last dim), so both the reads and the writes of a tile stay in cache. */
static void strided_tiles(void *arg, int64_t begin, int64_t end) {
  const Strided *s = arg;
  int last = s->rank - 1, q = s->q;
  int64_t ostride[FLOE_MAX_DIMS];
  dense_strides(s->rank, s->dims, ostride);
  for (int64_t u = begin; u < end; u++) {
    int64_t v = u, tl = v % s->ntl;
    v /= s->ntl;
    int64_t tq = v % s->ntq;
    v /= s->ntq;
    int64_t soff = 0, doff = 0;
    for (int k = last - 1; k >= 0; k--) {
      if (k == q) continue;
      int64_t i = v % s->dims[k];
      v /= s->dims[k];
      soff += i * s->stride[k];
      doff += i * ostride[k];
    }
    int64_t a0 = tq * s->tile_q, b0 = tl * ARRAY_TILE;
    int64_t na = s->dims[q] - a0 < s->tile_q ? s->dims[q] - a0 : s->tile_q;
    int64_t nb = s->dims[last] - b0 < ARRAY_TILE ? s->dims[last] - b0 : ARRAY_TILE;
    soff += a0 + b0 * s->stride[last];
    doff += a0 * ostride[q] + b0;
    tile_copy(s->dst + doff * (int64_t)s->esize, s->src + soff * (int64_t)s->esize, na, nb,
              ostride[q], s->stride[last], s->esize);
  }
}

/* Copy; the output must have at least one element. */
static void strided_run(Strided *s) {
  strided_simplify(s);
  int last = s->rank - 1;
  int64_t total = product(s->rank, s->dims);
  s->q = -1;
  if (s->stride[last] != 1 && s->dims[last] > 1)
    for (int k = 0; k < last; k++)
      if (s->stride[k] == 1) s->q = k;
  if (s->q >= 0) {
    int64_t dq = s->dims[s->q], dl = s->dims[last];
    /* A short last dim (a channel shuffle's 2 groups) makes tiles of ARRAY_TILE^2 elements
     * all the same: a tile of 32 x 2 spends more on finding its place than on copying. */
    s->tile_q = dl < ARRAY_TILE ? (ARRAY_TILE * ARRAY_TILE / dl + 7) / 8 * 8 : ARRAY_TILE;
    s->ntq = (dq + s->tile_q - 1) / s->tile_q;
    s->ntl = (dl + ARRAY_TILE - 1) / ARRAY_TILE;
    cpu_parallel_for(total / (dq * dl) * s->ntq * s->ntl, s->tile_q * (dl < ARRAY_TILE ? dl : ARRAY_TILE),
                     strided_tiles, s);
  } else {
    cpu_parallel_for(total / s->dims[last], s->dims[last], strided_rows, s);
  }
}

/* ------------------------------------------------------------------------------------ */
/* Sources and views. */

static floe_code const_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const FloeTensor *value;
  if (host->attr_tensor(host->init_attrs(init), "value", &value) != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "Const needs a tensor attribute "
                                "'value'");
  *state = (void *)value; /* borrowed for the life of the node */
  return FLOE_OK;
}

static floe_code const_compute(void *state, FloeKernelContext *ctx) {
  /* The value is never written: outputs are read-only to every consumer. */
  return cpu_host->ctx_set_output(ctx, 0, (FloeTensor *)state);
}

static floe_code identity_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  return cpu_host->ctx_forward_input(ctx, 0, 0, cpu_host->tensor_rank(x),
                                     cpu_host->tensor_dims(x));
}

static floe_code noop_compute(void *state, FloeKernelContext *ctx) {
  return FLOE_OK;
}

static floe_code reshape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int64_t dims[FLOE_MAX_DIMS];
  int rank;
  floe_code rc = read_index_vector(ctx, 1, "shape", -1, dims, FLOE_MAX_DIMS, &rank);
  if (rc != FLOE_OK) return rc;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == -1) {
      if (infer >= 0)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "shape %s has more than one -1",
                                       shape_str(rank, dims).s);
      infer = i;
    } else if (dims[i] < 0) {
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "shape %s has a negative size at index %d",
                                     shape_str(rank, dims).s, i);
    } else {
      known *= dims[i];
    }
  }
  int64_t n = cpu_host->tensor_num_elements(x);
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "cannot reshape a tensor of shape %s (%" PRId64
                                     " elements) into shape %s: no size for the -1 fits",
                                     tensor_shape_str(x).s, n, shape_str(rank, dims).s);
    dims[infer] = n / known;
  } else if (known != n) {
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot reshape a tensor of shape %s (%" PRId64
                                   " elements) into shape %s (%" PRId64 " elements)",
                                   tensor_shape_str(x).s, n, shape_str(rank, dims).s, known);
  }
  return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
}

/* Squeeze: the dims to remove, parsed once. n == 0 removes every size-1 dim. */
typedef struct SqueezeState {
  int n;
  int64_t dims[FLOE_MAX_DIMS];
} SqueezeState;

static floe_code squeeze_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                void **state) {
  const int64_t *list = NULL;
  size_t n = 0;
  if (host->attr_int_list(host->init_attrs(init), "squeeze_dims", &list, &n) != FLOE_OK) n = 0;
  if (n > FLOE_MAX_DIMS)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "squeeze_dims has %zu entries; a tensor has at most %d dims", n,
                                FLOE_MAX_DIMS);
  SqueezeState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->n = (int)n;
  for (size_t i = 0; i < n; i++) s->dims[i] = list[i];
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) {
  cpu_host->free(state);
}

static floe_code squeeze_compute(void *state, FloeKernelContext *ctx) {
  const SqueezeState *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  int drop[FLOE_MAX_DIMS] = {0};
  for (int i = 0; i < s->n; i++) {
    int64_t a = 0;
    floe_code rc = normalize_axis(ctx, s->dims[i], rank, x, &a);
    if (rc != FLOE_OK) return rc;
    if (dims[a] != 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "cannot squeeze dim %" PRId64 " of shape %s: its size is "
                                     "%" PRId64 ", not 1",
                                     s->dims[i], tensor_shape_str(x).s, dims[a]);
    drop[a] = 1;
  }
  int64_t out[FLOE_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < rank; i++)
    if (!(s->n ? drop[i] : dims[i] == 1)) out[r++] = dims[i];
  return cpu_host->ctx_forward_input(ctx, 0, 0, r, out);
}

/* A single int attribute (ExpandDims and Gather's axis, Split's num_split). */
typedef struct IntState {
  int64_t v;
} IntState;

static floe_code int_state_create(const FloeHostApi *host, FloeKernelInit *init,
                                  const char *name, int64_t dflt, void **state) {
  IntState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->v = attr_int_or(host->init_attrs(init), name, dflt);
  *state = s;
  return FLOE_OK;
}

static floe_code axis_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  return int_state_create(host, init, "axis", 0, state);
}

static floe_code expand_dims_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t axis = ((const IntState *)state)->v;
  if (axis < -rank - 1 || axis > rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %" PRId64 " is out of range for shape %s (expected "
                                   "[%d, %d])",
                                   axis, tensor_shape_str(x).s, -rank - 1, rank);
  if (rank >= FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot add a dim to shape %s: at most %d dims",
                                   tensor_shape_str(x).s, FLOE_MAX_DIMS);
  if (axis < 0) axis += rank + 1;
  int64_t out[FLOE_MAX_DIMS];
  for (int i = 0, j = 0; i <= rank; i++) out[i] = i == axis ? 1 : dims[j++];
  return cpu_host->ctx_forward_input(ctx, 0, 0, rank + 1, out);
}

/* ------------------------------------------------------------------------------------ */
/* Transpose. */

static floe_code transpose_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t perm[FLOE_MAX_DIMS];
  int n;
  floe_code rc = read_index_vector(ctx, 1, "perm", rank, perm, FLOE_MAX_DIMS, &n);
  if (rc != FLOE_OK) return rc;
  unsigned seen = 0;
  for (int i = 0; i < rank; i++) {
    if (perm[i] < 0 || perm[i] >= rank || (seen >> perm[i] & 1u))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "perm %s is not a permutation of [0, %d) (input shape %s)",
                                     shape_str(rank, perm).s, rank, tensor_shape_str(x).s);
    seen |= 1u << perm[i];
  }
  Strided s;
  int64_t istride[FLOE_MAX_DIMS], odims[FLOE_MAX_DIMS];
  dense_strides(rank, dims, istride);
  s.rank = rank;
  for (int i = 0; i < rank; i++) {
    odims[i] = s.dims[i] = dims[perm[i]];
    s.stride[i] = istride[perm[i]];
  }
  Strided plan = s;
  strided_simplify(&plan);
  if (plan.rank == 1 && plan.stride[0] == 1) /* only size-1 dims move: same bytes */
    return cpu_host->ctx_forward_input(ctx, 0, 0, rank, odims);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &y)) != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(y) == 0) return FLOE_OK;
  s.src = cpu_host->tensor_data(x);
  s.dst = cpu_host->tensor_data(y);
  s.esize = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  strided_run(&s);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Concat and Split: per outer row, each piece is one contiguous chunk. */

typedef struct Piece {
  char *data;   /* the piece's tensor */
  size_t chunk; /* bytes of the piece per outer row */
  size_t off;   /* byte offset of the piece within a row of the whole */
} Piece;

typedef struct PieceJob {
  Piece *pieces;
  int n;
  char *whole;      /* the concatenated tensor */
  size_t row_bytes; /* bytes of the whole per outer row */
  int split;        /* 1: whole -> pieces, 0: pieces -> whole */
} PieceJob;

/* Units [begin, end) = (outer row, piece) pairs. */
static void piece_range(void *arg, int64_t begin, int64_t end) {
  const PieceJob *j = arg;
  int64_t o = begin / j->n;
  int p = (int)(begin % j->n);
  for (int64_t u = begin; u < end; u++) {
    const Piece *pc = &j->pieces[p];
    if (pc->chunk) { /* an empty piece has no data pointer */
      char *w = j->whole + (size_t)o * j->row_bytes + pc->off;
      char *d = pc->data + (size_t)o * pc->chunk;
      memcpy(j->split ? d : w, j->split ? w : d, pc->chunk);
    }
    if (++p == j->n) {
      p = 0;
      o++;
    }
  }
}

static void piece_run(PieceJob *j, int64_t outer) {
  cpu_parallel_for(outer * j->n, (int64_t)(j->row_bytes / (size_t)j->n / 4 + 1), piece_range, j);
}

/* Stack storage for a few pieces, scratch memory for more. */
static floe_code pieces_alloc(FloeKernelContext *ctx, int n, Piece *stack, Piece **out) {
  if (n <= ARRAY_STACK_LIST) {
    *out = stack;
    return FLOE_OK;
  }
  void *p;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)n * sizeof(Piece), &p);
  if (rc != FLOE_OK) return cpu_host->ctx_set_error(ctx, rc, "out of memory for %d pieces", n);
  *out = p;
  return FLOE_OK;
}

static floe_code concat_compute(void *state, FloeKernelContext *ctx) {
  int n = cpu_host->ctx_num_inputs(ctx) - 1;
  int64_t axis = 0;
  floe_code rc = read_index_scalar(ctx, n, "axis", &axis);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x0 = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x0);
  if (rank == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "cannot concatenate scalars (input 0 has shape [])");
  if ((rc = normalize_axis(ctx, axis, rank, x0, &axis)) != FLOE_OK) return rc;
  int64_t odims[FLOE_MAX_DIMS];
  memcpy(odims, cpu_host->tensor_dims(x0), (size_t)rank * sizeof(int64_t));
  odims[axis] = 0;
  for (int i = 0; i < n; i++) {
    const FloeTensor *xi = cpu_host->ctx_input(ctx, i);
    const int64_t *d = cpu_host->tensor_dims(xi);
    int ok = cpu_host->tensor_rank(xi) == rank;
    for (int k = 0; ok && k < rank; k++) ok = k == axis || d[k] == odims[k];
    if (!ok)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "input %d has shape %s, which does not match input 0's "
                                     "shape %s outside axis %" PRId64,
                                     i, tensor_shape_str(xi).s, tensor_shape_str(x0).s, axis);
    odims[axis] += d[axis];
  }
  if (n == 1) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, odims);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &y)) != FLOE_OK) return rc;
  int64_t total = cpu_host->tensor_num_elements(y);
  if (total == 0) return FLOE_OK;
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x0));
  size_t inner = (size_t)product(rank - axis - 1, odims + axis + 1) * es;
  Piece stack[ARRAY_STACK_LIST], *pieces = NULL;
  if ((rc = pieces_alloc(ctx, n, stack, &pieces)) != FLOE_OK) return rc;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const FloeTensor *xi = cpu_host->ctx_input(ctx, i);
    pieces[i].data = cpu_host->tensor_data(xi);
    pieces[i].chunk = (size_t)cpu_host->tensor_dims(xi)[axis] * inner;
    pieces[i].off = off;
    off += pieces[i].chunk;
  }
  PieceJob j = {pieces, n, cpu_host->tensor_data(y), off, 0};
  piece_run(&j, product((int)axis, odims));
  return FLOE_OK;
}

static floe_code split_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  return int_state_create(host, init, "num_split", 1, state);
}

static floe_code split_compute(void *state, FloeKernelContext *ctx) {
  int64_t num_split = ((const IntState *)state)->v;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int64_t axis = 0;
  floe_code rc = read_index_scalar(ctx, 1, "axis", &axis);
  if (rc != FLOE_OK) return rc;
  int rank = cpu_host->tensor_rank(x);
  if ((rc = normalize_axis(ctx, axis, rank, x, &axis)) != FLOE_OK) return rc;
  int n = cpu_host->ctx_num_outputs(ctx);
  if (num_split < 1 || num_split != n)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "num_split is %" PRId64 " but the node has %d outputs",
                                   num_split, n);
  int64_t odims[FLOE_MAX_DIMS];
  memcpy(odims, cpu_host->tensor_dims(x), (size_t)rank * sizeof(int64_t));
  if (odims[axis] % num_split != 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dim %" PRId64 " of shape %s (size %" PRId64
                                   ") is not divisible by num_split %" PRId64,
                                   axis, tensor_shape_str(x).s, odims[axis], num_split);
  odims[axis] /= num_split;
  if (n == 1) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, odims);
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  size_t chunk = (size_t)product(rank - (int)axis, odims + axis) * es;
  if (product((int)axis, odims) == 1 && can_slice_view()) { /* each piece is one block */
    for (int i = 0; i < n; i++)
      if ((rc = cpu_host->ctx_forward_input_slice(ctx, 0, i, (size_t)i * chunk, rank, odims)) !=
          FLOE_OK)
        return rc;
    return FLOE_OK;
  }
  Piece stack[ARRAY_STACK_LIST], *pieces = NULL;
  if ((rc = pieces_alloc(ctx, n, stack, &pieces)) != FLOE_OK) return rc;
  for (int i = 0; i < n; i++) {
    FloeTensor *y;
    if ((rc = cpu_host->ctx_allocate_output(ctx, i, rank, odims, &y)) != FLOE_OK) return rc;
    pieces[i].data = cpu_host->tensor_data(y);
    pieces[i].chunk = chunk;
    pieces[i].off = (size_t)i * chunk;
  }
  int64_t total = cpu_host->tensor_num_elements(x);
  if (total == 0) return FLOE_OK;
  PieceJob j = {pieces, n, cpu_host->tensor_data(x), chunk * (size_t)n, 1};
  piece_run(&j, product((int)axis, odims));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Slice and StridedSlice. */

static floe_code slice_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t begin[FLOE_MAX_DIMS], size[FLOE_MAX_DIMS];
  int n;
  floe_code rc = read_index_vector(ctx, 1, "begin", rank, begin, FLOE_MAX_DIMS, &n);
  if (rc == FLOE_OK) rc = read_index_vector(ctx, 2, "size", rank, size, FLOE_MAX_DIMS, &n);
  if (rc != FLOE_OK) return rc;
  int whole = 1;
  for (int i = 0; i < rank; i++) {
    if (size[i] == -1) size[i] = dims[i] - begin[i];
    if (begin[i] < 0 || begin[i] > dims[i] || size[i] < 0 || begin[i] + size[i] > dims[i])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "slice begin %s size %s does not fit in shape %s "
                                     "(dim %d: begin %" PRId64 ", size %" PRId64 ")",
                                     shape_str(rank, begin).s, shape_str(rank, size).s,
                                     tensor_shape_str(x).s, i, begin[i], size[i]);
    whole &= size[i] == dims[i];
  }
  if (whole) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, size);
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  int64_t first;
  if (product(rank, size) > 0 && can_slice_view() &&
      box_contiguous(rank, dims, begin, size, NULL, &first))
    return cpu_host->ctx_forward_input_slice(ctx, 0, 0, (size_t)first * es, rank, size);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, size, &y)) != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(y) == 0) return FLOE_OK;
  Strided s;
  s.rank = rank;
  s.esize = es;
  dense_strides(rank, dims, s.stride);
  int64_t off = 0;
  for (int i = 0; i < rank; i++) {
    s.dims[i] = size[i];
    off += begin[i] * s.stride[i];
  }
  s.src = (const char *)cpu_host->tensor_data(x) + off * (int64_t)s.esize;
  s.dst = cpu_host->tensor_data(y);
  strided_run(&s);
  return FLOE_OK;
}

enum { SS_BEGIN, SS_END, SS_ELLIPSIS, SS_NEW_AXIS, SS_SHRINK };

typedef struct StridedSliceState {
  int64_t mask[5]; /* begin, end, ellipsis, new_axis, shrink_axis: bit i = spec entry i */
} StridedSliceState;

floe_code cpu_strided_slice_create(const FloeHostApi *host, FloeKernelInit *init,
                                   void *user_data, void **state) {
  static const char *const names[5] = {"begin_mask", "end_mask", "ellipsis_mask",
                                       "new_axis_mask", "shrink_axis_mask"};
  StridedSliceState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  for (int i = 0; i < 5; i++) s->mask[i] = attr_int_or(host->init_attrs(init), names[i], 0);
  *state = s;
  return FLOE_OK;
}

/* Largest spec: one entry per input dim, per new axis and the ellipsis. */
#define SS_MAX_SPEC (2 * FLOE_MAX_DIMS + 1)

/* TensorFlow's StridedSlice: the sparse spec (begin/end/strides entries with masks) is
 * expanded to one (begin, stride, size) per input dim, then the output shape drops shrunk
 * dims and inserts new axes. */
floe_code cpu_strided_slice_resolve(FloeKernelContext *ctx, const void *state, int first,
                                    int rank, const int64_t *dims, CpuStridedSlice *out) {
  const StridedSliceState *st = state;
  int64_t sb[SS_MAX_SPEC + 1], se[SS_MAX_SPEC + 1], ss[SS_MAX_SPEC + 1]; /* + implied ... */
  int n, n2, n3;
  floe_code rc = read_index_vector(ctx, first, "begin", -1, sb, SS_MAX_SPEC, &n);
  if (rc == FLOE_OK) rc = read_index_vector(ctx, first + 1, "end", -1, se, SS_MAX_SPEC, &n2);
  if (rc == FLOE_OK) rc = read_index_vector(ctx, first + 2, "strides", -1, ss, SS_MAX_SPEC, &n3);
  if (rc != FLOE_OK) return rc;
  if (n2 != n || n3 != n)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "begin, end and strides must have the same length, got %d, "
                                   "%d and %d",
                                   n, n2, n3);
  uint64_t lim = (1ull << n) - 1;
  uint64_t m_begin = (uint64_t)st->mask[SS_BEGIN] & lim, m_end = (uint64_t)st->mask[SS_END] & lim;
  uint64_t m_ell = (uint64_t)st->mask[SS_ELLIPSIS] & lim;
  uint64_t m_new = (uint64_t)st->mask[SS_NEW_AXIS] & lim;
  uint64_t m_shrink = (uint64_t)st->mask[SS_SHRINK] & lim;
  if (m_ell & (m_ell - 1))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "ellipsis_mask %" PRId64 " sets more than one ellipsis",
                                   st->mask[SS_ELLIPSIS]);
  if (!m_ell) { /* no ellipsis: one is implied after the last entry */
    m_ell = 1ull << n;
    sb[n] = se[n] = 0;
    ss[n] = 1;
    n++;
  }
  int new_after_ellipsis = 0;
  for (int i = 0, seen = 0; i < n; i++) {
    if (seen && (m_new >> i & 1)) new_after_ellipsis++;
    if (m_ell >> i & 1) seen = 1;
  }

  /* Dense spec: one entry per input dim. final[] lists output dims: >= 0 an input dim, -1 a
   * new axis (shrunk dims are left out). */
  int64_t db[FLOE_MAX_DIMS], de[FLOE_MAX_DIMS], ds[FLOE_MAX_DIMS];
  int dbm[FLOE_MAX_DIMS], dem[FLOE_MAX_DIMS], dshrink[FLOE_MAX_DIMS];
  int final[SS_MAX_SPEC + FLOE_MAX_DIMS], n_final = 0, full = 0;
  for (int i = 0; i < n; i++) {
    if (m_ell >> i & 1) {
      int next = rank - (n - i) + 1 + new_after_ellipsis;
      if (next > rank) next = rank;
      for (; full < next; full++) {
        db[full] = de[full] = 0;
        ds[full] = 1;
        dbm[full] = dem[full] = 1;
        dshrink[full] = 0;
        final[n_final++] = full;
      }
    } else if (m_new >> i & 1) {
      final[n_final++] = -1;
    } else {
      if (full == rank)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "slice spec has more entries than the %d dims of "
                                       "shape %s",
                                       rank, shape_str(rank, dims).s);
      db[full] = sb[i];
      de[full] = se[i];
      ds[full] = ss[i];
      dbm[full] = (int)(m_begin >> i & 1);
      dem[full] = (int)(m_end >> i & 1);
      dshrink[full] = (int)(m_shrink >> i & 1);
      if (!dshrink[full]) final[n_final++] = full;
      full++;
    }
  }

  /* Canonical begin and size per input dim. */
  int64_t size[FLOE_MAX_DIMS];
  int whole = 1;
  for (int i = 0; i < rank; i++) {
    int64_t d = dims[i], s = ds[i];
    if (s == 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "strides[%d] is 0", i);
    if (dshrink[i]) {
      if (s < 0)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "dim %d is shrunk (indexed), so its stride must be "
                                       "positive, got %" PRId64,
                                       i, s);
      int64_t b = db[i] < 0 ? db[i] + d : db[i];
      if (b < 0 || b >= d)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "index %" PRId64 " is out of bounds for dim %d of shape "
                                       "%s",
                                       db[i], i, shape_str(rank, dims).s);
      db[i] = b;
      size[i] = 1;
    } else {
      /* Masked ends take the full range in the stride's direction; others are clamped to
       * [0, d] (positive stride) or [-1, d-1] (negative stride). */
      int64_t lo = s > 0 ? 0 : -1, hi = s > 0 ? d : d - 1;
      int64_t b, e;
      if (dbm[i]) {
        b = s > 0 ? lo : hi;
      } else {
        b = db[i] < 0 ? db[i] + d : db[i];
        b = b < lo ? lo : b > hi ? hi : b;
      }
      if (dem[i]) {
        e = s > 0 ? hi : lo;
      } else {
        e = de[i] < 0 ? de[i] + d : de[i];
        e = e < lo ? lo : e > hi ? hi : e;
      }
      int64_t len = e - b;
      if (len == 0 || (len < 0) != (s < 0))
        size[i] = 0;
      else
        size[i] = len / s + (len % s != 0);
      db[i] = b;
    }
    whole &= db[i] == 0 && ds[i] == 1 && size[i] == d;
  }

  if (n_final > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "the slice of shape %s would have %d dims; at most %d are "
                                   "supported",
                                   shape_str(rank, dims).s, n_final, FLOE_MAX_DIMS);
  for (int i = 0; i < rank; i++) {
    out->begin[i] = db[i];
    out->stride[i] = ds[i];
    out->size[i] = size[i];
  }
  out->out_rank = n_final;
  for (int i = 0; i < n_final; i++) out->out_dims[i] = final[i] < 0 ? 1 : size[final[i]];
  out->whole = whole;
  return FLOE_OK;
}

static floe_code strided_slice_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  CpuStridedSlice sl;
  floe_code rc = cpu_strided_slice_resolve(ctx, state, 1, rank, dims, &sl);
  if (rc != FLOE_OK) return rc;
  const int64_t *db = sl.begin, *ds = sl.stride, *size = sl.size, *odims = sl.out_dims;
  int n_final = sl.out_rank;
  if (sl.whole) return cpu_host->ctx_forward_input(ctx, 0, 0, n_final, odims);
  /* Same elements in the same order as the per-input-dim box: view or copy that. */
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  int64_t first;
  if (product(rank, size) > 0 && can_slice_view() &&
      box_contiguous(rank, dims, db, size, ds, &first))
    return cpu_host->ctx_forward_input_slice(ctx, 0, 0, (size_t)first * es, n_final, odims);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, n_final, odims, &y)) != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(y) == 0) return FLOE_OK;
  Strided cp;
  int64_t istride[FLOE_MAX_DIMS], off = 0;
  dense_strides(rank, dims, istride);
  cp.rank = rank;
  cp.esize = es;
  for (int i = 0; i < rank; i++) {
    cp.dims[i] = size[i];
    cp.stride[i] = istride[i] * ds[i];
    off += db[i] * istride[i];
  }
  cp.src = (const char *)cpu_host->tensor_data(x) + off * (int64_t)cp.esize;
  cp.dst = cpu_host->tensor_data(y);
  strided_run(&cp);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Gather. */

typedef struct GatherJob {
  const char *params;
  const void *indices;
  FloeDType idt;
  int64_t nidx;  /* number of indices */
  int64_t dim;   /* params' size along axis */
  size_t slice;  /* bytes per gathered slice */
  char *dst;
} GatherJob;

/* Units [begin, end) = (outer row, index) pairs, one slice each. */
static void gather_range(void *arg, int64_t begin, int64_t end) {
  const GatherJob *j = arg;
  int64_t o = begin / j->nidx, k = begin % j->nidx;
  char *dst = j->dst + (size_t)begin * j->slice;
  for (int64_t u = begin; u < end; u++, dst += j->slice) {
    int64_t idx = index_at(j->indices, j->idt, k);
    copy_slice(dst, j->params + (size_t)(o * j->dim + idx) * j->slice, j->slice);
    if (++k == j->nidx) {
      k = 0;
      o++;
    }
  }
}

static floe_code gather_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *p = cpu_host->ctx_input(ctx, 0), *ind = cpu_host->ctx_input(ctx, 1);
  int prank = cpu_host->tensor_rank(p), irank = cpu_host->tensor_rank(ind);
  const int64_t *pdims = cpu_host->tensor_dims(p);
  FloeDType idt = cpu_host->tensor_dtype(ind);
  if (idt != FLOE_I32 && idt != FLOE_I64)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "indices must be i32 or i64, got %s",
                                   cpu_host->dtype_name(idt));
  if (prank == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "params must have at least 1 dim, got shape []");
  int64_t axis = 0;
  floe_code rc = normalize_axis(ctx, ((const IntState *)state)->v, prank, p, &axis);
  if (rc != FLOE_OK) return rc;
  int orank = prank - 1 + irank;
  if (orank > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "gathering params %s with indices %s gives %d dims; at most "
                                   "%d are supported",
                                   tensor_shape_str(p).s, tensor_shape_str(ind).s, orank,
                                   FLOE_MAX_DIMS);
  int64_t nidx = cpu_host->tensor_num_elements(ind), dim = pdims[axis];
  const void *idata = cpu_host->tensor_data(ind);
  for (int64_t k = 0; k < nidx; k++) {
    int64_t v = index_at(idata, idt, k);
    if (v < 0 || v >= dim)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "indices[%" PRId64 "] = %" PRId64 " is not in [0, %" PRId64
                                     ") (params shape %s, axis %" PRId64 ")",
                                     k, v, dim, tensor_shape_str(p).s, axis);
  }
  int64_t odims[FLOE_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < axis; i++) odims[r++] = pdims[i];
  for (int i = 0; i < irank; i++) odims[r++] = cpu_host->tensor_dims(ind)[i];
  for (int i = (int)axis + 1; i < prank; i++) odims[r++] = pdims[i];
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, orank, odims, &y)) != FLOE_OK) return rc;
  int64_t total = cpu_host->tensor_num_elements(y);
  if (total == 0) return FLOE_OK;
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(p));
  int64_t inner = product(prank - (int)axis - 1, pdims + axis + 1);
  GatherJob j = {cpu_host->tensor_data(p), idata, idt, nidx, dim, (size_t)inner * es,
                 cpu_host->tensor_data(y)};
  cpu_parallel_for(product((int)axis, pdims) * nidx, inner, gather_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Pad. */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE };

typedef struct PadState {
  int mode; /* PAD_* */
  double value;
} PadState;

static floe_code pad_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  const FloeAttrs *a = host->init_attrs(init);
  const char *mode = "CONSTANT";
  double value = 0;
  if (host->attr_string(a, "mode", &mode) != FLOE_OK) mode = "CONSTANT";
  if (host->attr_float(a, "constant_value", &value) != FLOE_OK) value = 0;
  int pm;
  if (strcmp(mode, "CONSTANT") == 0)
    pm = PAD_CONSTANT;
  else if (strcmp(mode, "REFLECT") == 0)
    pm = PAD_REFLECT;
  else if (strcmp(mode, "EDGE") == 0)
    pm = PAD_EDGE;
  else
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "mode '%s' is not supported: use CONSTANT, REFLECT or EDGE", mode);
  PadState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->mode = pm;
  s->value = value;
  *state = s;
  return FLOE_OK;
}

/* The element bytes of v in dtype dt (integers truncate and saturate; bool is v != 0). */
static uint64_t scalar_bytes(FloeDType dt, double v) {
  uint64_t out = 0;
  union {
    float f32;
    double f64;
    uint16_t h;
    int8_t i8;
    uint8_t u8;
    int32_t i32;
    int64_t i64;
  } u;
  double c = v != v ? 0 : v;
  switch (dt) {
  case FLOE_F32: u.f32 = (float)v; break;
  case FLOE_F64: u.f64 = v; break;
  case FLOE_F16: u.h = cpu_f32_to_f16((float)v); break;
  case FLOE_BF16: u.h = cpu_f32_to_bf16((float)v); break;
  case FLOE_I8: u.i8 = (int8_t)(c < -128 ? -128 : c > 127 ? 127 : c); break;
  case FLOE_U8: u.u8 = (uint8_t)(c < 0 ? 0 : c > 255 ? 255 : c); break;
  case FLOE_I32:
    u.i32 = (int32_t)(c < INT32_MIN ? INT32_MIN : c > INT32_MAX ? INT32_MAX : c);
    break;
  case FLOE_I64:
    u.i64 = c <= -9223372036854775808.0 ? INT64_MIN
            : c >= 9223372036854775808.0 ? INT64_MAX : (int64_t)c;
    break;
  default: u.u8 = v != 0; break;
  }
  memcpy(&out, &u, cpu_host->dtype_size(dt));
  return out;
}

typedef struct PadJob {
  int rank;
  const int64_t *idims;
  int64_t odims[FLOE_MAX_DIMS];
  int64_t before[FLOE_MAX_DIMS];
  int64_t istride[FLOE_MAX_DIMS];
  const char *src;
  char *dst;
  size_t esize;
  int mode;
  uint64_t value;
} PadJob;

/* REFLECT: mirror i around the edges without repeating them (i in [-(d-1), 2d-2]); EDGE:
 * repeat the edge element. */
static inline int64_t reflect_index(int64_t i, int64_t d) {
  return i < 0 ? -i : i >= d ? 2 * (d - 1) - i : i;
}

static inline int64_t border_index(int mode, int64_t i, int64_t d) {
  if (mode == PAD_REFLECT) return reflect_index(i, d);
  return i < 0 ? 0 : i >= d ? d - 1 : i;
}

/* Output rows [begin, end) (a row = the last dim). */
static void pad_rows(void *arg, int64_t begin, int64_t end) {
  const PadJob *j = arg;
  int last = j->rank - 1;
  int64_t ow = j->odims[last], iw = j->idims[last], b = j->before[last];
  int64_t idx[FLOE_MAX_DIMS], r = begin;
  for (int k = last - 1; k >= 0; k--) {
    idx[k] = r % j->odims[k];
    r /= j->odims[k];
  }
  size_t es = j->esize;
  FillJob fill = {NULL, es, j->value};
  for (int64_t row = begin; row < end; row++) {
    char *dst = j->dst + (size_t)row * (size_t)ow * es;
    int64_t off = 0;
    int inside = 1;
    for (int k = 0; k < last; k++) {
      int64_t i = idx[k] - j->before[k];
      if (j->mode != PAD_CONSTANT)
        i = border_index(j->mode, i, j->idims[k]);
      else if (i < 0 || i >= j->idims[k])
        inside = 0;
      off += i * j->istride[k];
    }
    fill.dst = dst;
    if (!inside) {
      fill_range(&fill, 0, ow);
    } else {
      const char *src = j->src + (size_t)off * es;
      if (j->mode != PAD_CONSTANT) {
        for (int64_t c = 0; c < b; c++)
          copy_slice(dst + c * es, src + border_index(j->mode, c - b, iw) * es, es);
        for (int64_t c = b + iw; c < ow; c++)
          copy_slice(dst + c * es, src + border_index(j->mode, c - b, iw) * es, es);
      } else {
        fill_range(&fill, 0, b);
        fill_range(&fill, b + iw, ow);
      }
      memcpy(dst + b * es, src, (size_t)iw * es);
    }
    for (int k = last - 1; k >= 0; k--) {
      if (++idx[k] < j->odims[k]) break;
      idx[k] = 0;
    }
  }
}

static floe_code pad_compute(void *state, FloeKernelContext *ctx) {
  const PadState *ps = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *pt = cpu_host->ctx_input(ctx, 1);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  FloeDType pdt = cpu_host->tensor_dtype(pt);
  const int64_t *pd = cpu_host->tensor_dims(pt);
  if ((pdt != FLOE_I32 && pdt != FLOE_I64) || cpu_host->tensor_rank(pt) != 2 ||
      pd[0] != rank || pd[1] != 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "paddings must be an i32/i64 tensor of shape [%d,2] for "
                                   "input shape %s, got %s %s",
                                   rank, tensor_shape_str(x).s, cpu_host->dtype_name(pdt),
                                   tensor_shape_str(pt).s);
  PadJob j;
  const void *pdata = cpu_host->tensor_data(pt);
  int none = 1;
  for (int i = 0; i < rank; i++) {
    int64_t b = index_at(pdata, pdt, 2 * i), a = index_at(pdata, pdt, 2 * i + 1);
    if (b < 0 || a < 0 || (ps->mode == PAD_REFLECT && (b >= dims[i] || a >= dims[i]) && (a || b)) ||
        (ps->mode == PAD_EDGE && dims[i] == 0 && (a || b)))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "paddings (%" PRId64 ", %" PRId64 ") of dim %d are invalid "
                                     "for shape %s: they must be >= 0%s",
                                     b, a, i, tensor_shape_str(x).s,
                                     ps->mode == PAD_REFLECT ? " and < the dim's size in REFLECT mode"
                                     : ps->mode == PAD_EDGE  ? ", and 0 for an empty dim in EDGE mode"
                                                             : "");
    j.before[i] = b;
    j.odims[i] = b + dims[i] + a;
    none &= a == 0 && b == 0;
  }
  if (none) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, j.odims, &y);
  if (rc != FLOE_OK) return rc;
  int64_t total = cpu_host->tensor_num_elements(y);
  if (total == 0) return FLOE_OK;
  FloeDType dt = cpu_host->tensor_dtype(x);
  j.rank = rank;
  j.idims = dims;
  dense_strides(rank, dims, j.istride);
  j.src = cpu_host->tensor_data(x);
  j.dst = cpu_host->tensor_data(y);
  j.esize = cpu_host->dtype_size(dt);
  j.mode = ps->mode;
  j.value = scalar_bytes(dt, ps->value);
  if (cpu_host->tensor_num_elements(x) == 0) { /* nothing to copy: all padding */
    fill_run(j.dst, total, j.esize, &j.value);
    return FLOE_OK;
  }
  int64_t ow = j.odims[rank - 1];
  cpu_parallel_for(total / ow, ow, pad_rows, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Tile. */

typedef struct TileJob {
  int rank;
  int64_t idims[FLOE_MAX_DIMS], odims[FLOE_MAX_DIMS], istride[FLOE_MAX_DIMS];
  const char *src;
  char *dst;
  size_t esize;
} TileJob;

/* Output rows [begin, end): each is an input row repeated along the last dim. */
static void tile_rows(void *arg, int64_t begin, int64_t end) {
  const TileJob *j = arg;
  int last = j->rank - 1;
  int64_t idx[FLOE_MAX_DIMS], r = begin;
  for (int k = last - 1; k >= 0; k--) {
    idx[k] = r % j->odims[k];
    r /= j->odims[k];
  }
  size_t in_bytes = (size_t)j->idims[last] * j->esize;
  size_t out_bytes = (size_t)j->odims[last] * j->esize;
  for (int64_t row = begin; row < end; row++) {
    int64_t off = 0;
    for (int k = 0; k < last; k++) off += idx[k] % j->idims[k] * j->istride[k];
    char *dst = j->dst + (size_t)row * out_bytes;
    memcpy(dst, j->src + (size_t)off * j->esize, in_bytes);
    for (size_t done = in_bytes; done < out_bytes;) { /* double the filled prefix */
      size_t c = done < out_bytes - done ? done : out_bytes - done;
      memcpy(dst + done, dst, c);
      done += c;
    }
    for (int k = last - 1; k >= 0; k--) {
      if (++idx[k] < j->odims[k]) break;
      idx[k] = 0;
    }
  }
}

static floe_code tile_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t mult[FLOE_MAX_DIMS], odims[FLOE_MAX_DIMS];
  int n;
  floe_code rc = read_index_vector(ctx, 1, "multiples", rank, mult, FLOE_MAX_DIMS, &n);
  if (rc != FLOE_OK) return rc;
  int ones = 1;
  for (int i = 0; i < rank; i++) {
    if (mult[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "multiples %s must be >= 0 (input shape %s)",
                                     shape_str(rank, mult).s, tensor_shape_str(x).s);
    odims[i] = dims[i] * mult[i];
    ones &= mult[i] == 1;
  }
  if (ones) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &y)) != FLOE_OK) return rc;
  int64_t total = cpu_host->tensor_num_elements(y);
  if (total == 0) return FLOE_OK;
  /* Merge neighbouring dims that are not repeated (their layout is the input's), and drop
   * size-1 dims that are not repeated. */
  TileJob j;
  int64_t m[FLOE_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 1 && mult[i] == 1) continue;
    if (r > 0 && mult[i] == 1 && m[r - 1] == 1) {
      j.idims[r - 1] *= dims[i];
    } else {
      j.idims[r] = dims[i];
      m[r++] = mult[i];
    }
  }
  j.rank = r; /* >= 1: a tensor whose dims are all dropped was forwarded above */
  for (int i = 0; i < r; i++) j.odims[i] = j.idims[i] * m[i];
  dense_strides(r, j.idims, j.istride);
  j.src = cpu_host->tensor_data(x);
  j.dst = cpu_host->tensor_data(y);
  j.esize = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  int64_t ow = j.odims[r - 1];
  cpu_parallel_for(total / ow, ow, tile_rows, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Shape, Size, Rank. */

/* Write v into element i of an i32 or i64 output; i32 must hold it. */
static floe_code put_index(FloeKernelContext *ctx, FloeTensor *y, int64_t i, int64_t v,
                           const char *what) {
  if (cpu_host->tensor_dtype(y) == FLOE_I64) {
    ((int64_t *)cpu_host->tensor_data(y))[i] = v;
    return FLOE_OK;
  }
  if (v > INT32_MAX)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s %" PRId64 " does not fit in i32: use out_type i64", what,
                                   v);
  ((int32_t *)cpu_host->tensor_data(y))[i] = (int32_t)v;
  return FLOE_OK;
}

static floe_code shape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int64_t rank = cpu_host->tensor_rank(x);
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 1, &rank, &y);
  for (int i = 0; rc == FLOE_OK && i < rank; i++)
    rc = put_index(ctx, y, i, cpu_host->tensor_dims(x)[i], "dim");
  return rc;
}

static floe_code size_compute(void *state, FloeKernelContext *ctx) {
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 0, NULL, &y);
  if (rc != FLOE_OK) return rc;
  return put_index(ctx, y, 0, cpu_host->tensor_num_elements(cpu_host->ctx_input(ctx, 0)),
                   "size");
}

static floe_code rank_compute(void *state, FloeKernelContext *ctx) {
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 0, NULL, &y);
  if (rc != FLOE_OK) return rc;
  *(int32_t *)cpu_host->tensor_data(y) = cpu_host->tensor_rank(cpu_host->ctx_input(ctx, 0));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Fill, ZerosLike, OnesLike. */

static floe_code fill_compute(void *state, FloeKernelContext *ctx) {
  int64_t dims[FLOE_MAX_DIMS];
  int rank;
  floe_code rc = read_index_vector(ctx, 0, "dims", -1, dims, FLOE_MAX_DIMS, &rank);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *v = cpu_host->ctx_input(ctx, 1);
  if (cpu_host->tensor_rank(v) != 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "value must be a scalar, got shape %s",
                                   tensor_shape_str(v).s);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "dims %s must be >= 0", shape_str(rank, dims).s);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &y)) != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(y);
  if (n == 0) return FLOE_OK;
  fill_run(cpu_host->tensor_data(y), n, cpu_host->dtype_size(cpu_host->tensor_dtype(v)),
           cpu_host->tensor_data(v));
  return FLOE_OK;
}

/* ZerosLike (user_data NULL) and OnesLike (non-NULL). */
static floe_code fill_like_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, cpu_host->tensor_rank(x),
                                               cpu_host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(y);
  if (n == 0) return FLOE_OK;
  FloeDType dt = cpu_host->tensor_dtype(x);
  uint64_t v = scalar_bytes(dt, state ? 1.0 : 0.0);
  fill_run(cpu_host->tensor_data(y), n, cpu_host->dtype_size(dt), &v);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_array(FloePluginRegistrar *reg) {
  typedef floe_code (*ComputeFn)(void *, FloeKernelContext *);
  typedef floe_code (*CreateFn)(const FloeHostApi *, FloeKernelInit *, void *, void **);
  static int ones = 1;
  const struct {
    const char *op, *attr;
    uint32_t flags;
    ComputeFn compute;
    CreateFn create;
    int owns_state; /* create allocates a state freed by state_free */
    void *user_data;
  } k[] = {
      {"Const", "dtype", FLOE_KERNEL_INEXPENSIVE, const_compute, const_create, 0, NULL},
      {"Identity", "T", FLOE_KERNEL_INEXPENSIVE, identity_compute, NULL, 0, NULL},
      {"NoOp", NULL, FLOE_KERNEL_INEXPENSIVE, noop_compute, NULL, 0, NULL},
      {"Reshape", "T", FLOE_KERNEL_INEXPENSIVE, reshape_compute, NULL, 0, NULL},
      {"Squeeze", "T", FLOE_KERNEL_INEXPENSIVE, squeeze_compute, squeeze_create, 1, NULL},
      {"ExpandDims", "T", FLOE_KERNEL_INEXPENSIVE, expand_dims_compute, axis_create, 1, NULL},
      {"Transpose", "T", 0, transpose_compute, NULL, 0, NULL},
      {"Concat", "T", 0, concat_compute, NULL, 0, NULL},
      {"Split", "T", 0, split_compute, split_create, 1, NULL},
      {"Slice", "T", 0, slice_compute, NULL, 0, NULL},
      {"StridedSlice", "T", 0, strided_slice_compute, cpu_strided_slice_create, 1, NULL},
      {"Gather", "T", 0, gather_compute, axis_create, 1, NULL},
      {"Pad", "T", 0, pad_compute, pad_create, 1, NULL},
      {"Tile", "T", 0, tile_compute, NULL, 0, NULL},
      {"Shape", "T", FLOE_KERNEL_INEXPENSIVE, shape_compute, NULL, 0, NULL},
      {"Size", "T", FLOE_KERNEL_INEXPENSIVE, size_compute, NULL, 0, NULL},
      {"Rank", "T", FLOE_KERNEL_INEXPENSIVE, rank_compute, NULL, 0, NULL},
      {"Fill", "T", 0, fill_compute, NULL, 0, NULL},
      {"ZerosLike", "T", 0, fill_like_compute, NULL, 0, NULL},
      {"OnesLike", "T", 0, fill_like_compute, NULL, 0, &ones},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    floe_code rc = cpu_add_kernel(reg, k[i].op, k[i].attr, FLOE_DTYPES_ALL, k[i].flags,
                                  k[i].compute, k[i].create,
                                  k[i].owns_state ? state_free : NULL, k[i].user_data);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
