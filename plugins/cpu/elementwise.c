/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise.c - elementwise kernels of the CPU plugin: arithmetic with NumPy broadcasting,
 * unary math, activations, comparisons, logic, Select and Cast.
 *
 * Each op is a table of row functions, one per dtype, that loop over a contiguous run (or a
 * scalar) so gcc vectorises them; drivers walk the (broadcast) output in such runs, on the
 * shared pool when the work is large. f16/bf16 go through the f32 row in chunks. */
/* Vectorise whatever CFLAGS say (at -O2 gcc's "very cheap" model vectorises almost none of
 * these loops), and let selects such as `x > 0 ? x : a * x` become vector blends: FP
 * exception flags are never read. */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "cpu_util.h"

#define HOT CPU_HOT

static int is_int(FloeDType dt) {
  return dt == FLOE_I8 || dt == FLOE_U8 || dt == FLOE_I32 || dt == FLOE_I64;
}

/* ------------------------------------------------------------------------------------ */
/* Vectorisable f32 math (selects, no branches) on top of cpu_exp_f32 / cpu_log_f32. */

static inline float math_softplus_f32(float x) {
  /* max(x, 0) + log1p(exp(-|x|)); log1p(t) = log(u) * t / (u - 1) with u = 1 + t is exact
   * to an ulp even when t is below f32 epsilon (Goldberg). */
  float t = cpu_exp_f32(-fabsf(x));
  float u = 1.0f + t;
  float l = u == 1.0f ? t : cpu_log_f32(u) * (t / (u - 1.0f));
  float m = x > 0.0f ? x : 0.0f;
  return m + l;
}

static inline float math_gelu_erf_f32(float x) {
  float p = 0.5f * cpu_erfc_f32(-x * 0.70710678118654752f); /* Phi(x) */
  float g = x * p;
  return p == 0.0f ? -0.0f : g; /* x = -Inf gives -Inf * 0 */
}

static inline float math_gelu_tanh_f32(float x) {
  /* 0.5 x (1 + tanh(u)) = x * sigmoid(2u): no cancellation for negative x. */
  float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  float p = cpu_sigmoid_f32(u + u);
  float g = x * p;
  return p == 0.0f ? -0.0f : g; /* x = -Inf gives -Inf * 0 */
}

static inline double math_softplus_f64(double x) {
  return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
}

static inline double math_gelu_erf_f64(double x) {
  double p = 0.5 * erfc(-x * 0.70710678118654752);
  return p == 0.0 ? -0.0 : x * p;
}

static inline double math_gelu_tanh_f64(double x) {
  double u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
  double p = cpu_sigmoid_f64(u + u);
  return p == 0.0 ? -0.0 : x * p;
}

/* Integer power by squaring in the unsigned type, so overflow wraps instead of being UB.
 * Negative exponents are rejected before the kernel runs. */
#define IPOW(NAME, T, U)                                                                     \
  static inline T NAME(T x, T y) {                                                           \
    U r = 1, b = (U)x;                                                                       \
    for (uint64_t e = (uint64_t)y; e; e >>= 1) {                                             \
      if (e & 1u) r = (U)(r * b);                                                            \
      b = (U)(b * b);                                                                        \
    }                                                                                        \
    return (T)r;                                                                             \
  }
IPOW(ipow_i8, int8_t, uint8_t)
IPOW(ipow_u8, uint8_t, uint8_t)
IPOW(ipow_i32, int32_t, uint32_t)
IPOW(ipow_i64, int64_t, uint64_t)

/* ------------------------------------------------------------------------------------ */
/* Binary rows: z[i] = f(x[i or 0], y[i or 0]) for i < n. */

enum { ROW_VV, ROW_SV, ROW_VS }; /* which operand is a scalar within the run */

typedef void (*BinaryRow)(void *z, const void *x, const void *y, int64_t n, int mode);

#define BINARY_ROW(NAME, ATTR, TI, TO, EXPR)                                                 \
  ATTR static void NAME(void *zv, const void *xv, const void *yv, int64_t n, int mode) {     \
    TO *restrict z = zv;                                                                     \
    const TI *restrict xs = xv, *restrict ys = yv;                                           \
    if (mode == ROW_VV) {                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                      \
        TI x = xs[i], y = ys[i];                                                             \
        z[i] = (TO)(EXPR);                                                                   \
      }                                                                                      \
    } else if (mode == ROW_SV) {                                                             \
      const TI x = xs[0];                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                      \
        TI y = ys[i];                                                                        \
        z[i] = (TO)(EXPR);                                                                   \
      }                                                                                      \
    } else {                                                                                 \
      const TI y = ys[0];                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                      \
        TI x = xs[i];                                                                        \
        z[i] = (TO)(EXPR);                                                                   \
      }                                                                                      \
    }                                                                                        \
  }

/* One op over the numeric types: FE for floats, SE(T, U) for signed and UE(T, U) for
 * unsigned integers (U the unsigned type of the same width, for wrapping arithmetic). */
#define BINARY_NUMERIC(OP, FE, SE, UE)                                                       \
  BINARY_ROW(OP##_f32, HOT, float, float, FE)                                                \
  BINARY_ROW(OP##_f64, HOT, double, double, FE)                                              \
  BINARY_ROW(OP##_i8, , int8_t, int8_t, SE(int8_t, uint8_t))                                 \
  BINARY_ROW(OP##_u8, , uint8_t, uint8_t, UE(uint8_t, uint8_t))                              \
  BINARY_ROW(OP##_i32, , int32_t, int32_t, SE(int32_t, uint32_t))                            \
  BINARY_ROW(OP##_i64, , int64_t, int64_t, SE(int64_t, uint64_t))

/* Comparisons: any numeric input, bool (0/1 byte) output; EQ also takes bool inputs. */
#define BINARY_COMPARE(OP, EXPR)                                                             \
  BINARY_ROW(OP##_f32, HOT, float, uint8_t, EXPR)                                            \
  BINARY_ROW(OP##_f64, HOT, double, uint8_t, EXPR)                                           \
  BINARY_ROW(OP##_i8, , int8_t, uint8_t, EXPR)                                               \
  BINARY_ROW(OP##_u8, , uint8_t, uint8_t, EXPR)                                              \
  BINARY_ROW(OP##_i32, , int32_t, uint8_t, EXPR)                                             \
  BINARY_ROW(OP##_i64, , int64_t, uint8_t, EXPR)

#define ROWS_NUMERIC(OP)                                                                     \
  [FLOE_F32] = OP##_f32, [FLOE_F64] = OP##_f64, [FLOE_I8] = OP##_i8, [FLOE_U8] = OP##_u8,    \
  [FLOE_I32] = OP##_i32, [FLOE_I64] = OP##_i64

#define WRAP_ADD(T, U) (T)((U)x + (U)y)
#define WRAP_SUB(T, U) (T)((U)x - (U)y)
#define WRAP_MUL(T, U) (T)((U)x * (U)y)
#define SDIV(T, U) (y == -1 ? (T)(0 - (U)x) : (T)(x / y)) /* INT_MIN / -1 wraps */
#define UDIV(T, U) (T)(x / y)
#define IMAX(T, U) (x > y ? x : y)
#define IMIN(T, U) (x < y ? x : y)

BINARY_NUMERIC(add, x + y, WRAP_ADD, WRAP_ADD)
BINARY_NUMERIC(sub, x - y, WRAP_SUB, WRAP_SUB)
BINARY_NUMERIC(mul, x * y, WRAP_MUL, WRAP_MUL)
BINARY_NUMERIC(div, x / y, SDIV, UDIV)
/* NaN in either operand gives NaN (NumPy's maximum / minimum). */
BINARY_NUMERIC(max, (x > y) | (x != x) ? x : y, IMAX, IMAX)
BINARY_NUMERIC(min, (x < y) | (x != x) ? x : y, IMIN, IMIN)
BINARY_ROW(pow_any_f32, , float, float, powf(x, y))
BINARY_ROW(pow_f64, , double, double, pow(x, y))
BINARY_ROW(pow_i8, , int8_t, int8_t, ipow_i8(x, y))
BINARY_ROW(pow_u8, , uint8_t, uint8_t, ipow_u8(x, y))
BINARY_ROW(pow_i32, , int32_t, int32_t, ipow_i32(x, y))
BINARY_ROW(pow_i64, , int64_t, int64_t, ipow_i64(x, y))

/* x ** 2 (variances, squared errors) is common enough to skip powf. */
HOT static void pow_f32(void *zv, const void *xv, const void *yv, int64_t n, int mode) {
  if (mode == ROW_VS && *(const float *)yv == 2.0f) {
    float *restrict z = zv;
    const float *restrict x = xv;
    for (int64_t i = 0; i < n; i++) z[i] = x[i] * x[i];
    return;
  }
  pow_any_f32(zv, xv, yv, n, mode);
}

/* Remainders: TruncateMod has the sign of x (C's fmod and %), FloorMod that of y (NumPy's
 * mod: a nonzero remainder of the other sign moves by y; a zero one takes y's sign). y = -1
 * is special-cased for signed ints (INT_MIN % -1 overflows); y = 0 is checked beforehand. */
static inline float fmod_floor_f32(float x, float y) {
  float r = fmodf(x, y);
  return r != 0 ? ((r < 0) != (y < 0) ? r + y : r) : copysignf(0.0f, y);
}
static inline double fmod_floor_f64(double x, double y) {
  double r = fmod(x, y);
  return r != 0 ? ((r < 0) != (y < 0) ? r + y : r) : copysign(0.0, y);
}
#define STMOD(T, U) (y == -1 ? (T)0 : (T)(x % y))
#define UMOD(T, U) (T)(x % y)
#define SFMOD(T, U) (y == -1 ? (T)0 : (T)(x % y != 0 && ((x % y < 0) != (y < 0)) ? x % y + y : x % y))
BINARY_ROW(truncmod_f32, , float, float, fmodf(x, y))
BINARY_ROW(truncmod_f64, , double, double, fmod(x, y))
BINARY_ROW(truncmod_i8, , int8_t, int8_t, STMOD(int8_t, uint8_t))
BINARY_ROW(truncmod_u8, , uint8_t, uint8_t, UMOD(uint8_t, uint8_t))
BINARY_ROW(truncmod_i32, , int32_t, int32_t, STMOD(int32_t, uint32_t))
BINARY_ROW(truncmod_i64, , int64_t, int64_t, STMOD(int64_t, uint64_t))
BINARY_ROW(floormod_f32, , float, float, fmod_floor_f32(x, y))
BINARY_ROW(floormod_f64, , double, double, fmod_floor_f64(x, y))
BINARY_ROW(floormod_i8, , int8_t, int8_t, SFMOD(int8_t, uint8_t))
BINARY_ROW(floormod_u8, , uint8_t, uint8_t, UMOD(uint8_t, uint8_t))
BINARY_ROW(floormod_i32, , int32_t, int32_t, SFMOD(int32_t, uint32_t))
BINARY_ROW(floormod_i64, , int64_t, int64_t, SFMOD(int64_t, uint64_t))

/* Shifts by the unsigned value of y: a count of the bit width or more shifts every bit out
 * (0, or the sign for an arithmetic right shift) instead of being undefined. */
#define BITS(T) (sizeof(T) * 8u)
#define SHL(T, U) ((U)y >= BITS(T) ? (T)0 : (T)((U)x << (U)y))
#define SHR_S(T, U) (T)(x >> ((U)y >= BITS(T) ? BITS(T) - 1u : (U)y))
#define SHR_U(T, U) ((U)y >= BITS(T) ? (T)0 : (T)(x >> (U)y))
BINARY_ROW(shl_i8, , int8_t, int8_t, SHL(int8_t, uint8_t))
BINARY_ROW(shl_u8, , uint8_t, uint8_t, SHL(uint8_t, uint8_t))
BINARY_ROW(shl_i32, , int32_t, int32_t, SHL(int32_t, uint32_t))
BINARY_ROW(shl_i64, , int64_t, int64_t, SHL(int64_t, uint64_t))
BINARY_ROW(shr_i8, , int8_t, int8_t, SHR_S(int8_t, uint8_t))
BINARY_ROW(shr_u8, , uint8_t, uint8_t, SHR_U(uint8_t, uint8_t))
BINARY_ROW(shr_i32, , int32_t, int32_t, SHR_S(int32_t, uint32_t))
BINARY_ROW(shr_i64, , int64_t, int64_t, SHR_S(int64_t, uint64_t))
#define ROWS_INT(OP) [FLOE_I8] = OP##_i8, [FLOE_U8] = OP##_u8, [FLOE_I32] = OP##_i32, [FLOE_I64] = OP##_i64

BINARY_COMPARE(eq, x == y)
BINARY_COMPARE(ne, x != y)
BINARY_COMPARE(lt, x < y)
BINARY_COMPARE(le, x <= y)
BINARY_COMPARE(gt, x > y)
BINARY_COMPARE(ge, x >= y)
BINARY_ROW(and_b, , uint8_t, uint8_t, (x != 0) & (y != 0))
BINARY_ROW(or_b, , uint8_t, uint8_t, (x != 0) | (y != 0))

enum { CHECK_NONE, CHECK_NONZERO, CHECK_NONNEG }; /* what integer y must satisfy */

typedef struct BinaryOp {
  BinaryRow row[FLOE_DTYPE_LIMIT]; /* f16/bf16 run row[FLOE_F32] on converted chunks */
  int64_t cost;                    /* per element, nanoseconds-ish */
  int check;                       /* CHECK_* for integer dtypes */
} BinaryOp;

static const BinaryOp op_add = {{ROWS_NUMERIC(add)}, 1, CHECK_NONE};
static const BinaryOp op_sub = {{ROWS_NUMERIC(sub)}, 1, CHECK_NONE};
static const BinaryOp op_mul = {{ROWS_NUMERIC(mul)}, 1, CHECK_NONE};
static const BinaryOp op_div = {{ROWS_NUMERIC(div)}, 2, CHECK_NONZERO};
static const BinaryOp op_pow = {{ROWS_NUMERIC(pow)}, 16, CHECK_NONNEG};
static const BinaryOp op_max = {{ROWS_NUMERIC(max)}, 1, CHECK_NONE};
static const BinaryOp op_min = {{ROWS_NUMERIC(min)}, 1, CHECK_NONE};
static const BinaryOp op_floormod = {{ROWS_NUMERIC(floormod)}, 4, CHECK_NONZERO};
static const BinaryOp op_truncmod = {{ROWS_NUMERIC(truncmod)}, 4, CHECK_NONZERO};
static const BinaryOp op_shl = {{ROWS_INT(shl)}, 1, CHECK_NONE};
static const BinaryOp op_shr = {{ROWS_INT(shr)}, 1, CHECK_NONE};
static const BinaryOp op_eq = {{ROWS_NUMERIC(eq), [FLOE_BOOL] = eq_u8}, 1, CHECK_NONE};
static const BinaryOp op_ne = {{ROWS_NUMERIC(ne), [FLOE_BOOL] = ne_u8}, 1, CHECK_NONE};
static const BinaryOp op_lt = {{ROWS_NUMERIC(lt)}, 1, CHECK_NONE};
static const BinaryOp op_le = {{ROWS_NUMERIC(le)}, 1, CHECK_NONE};
static const BinaryOp op_gt = {{ROWS_NUMERIC(gt)}, 1, CHECK_NONE};
static const BinaryOp op_ge = {{ROWS_NUMERIC(ge)}, 1, CHECK_NONE};
static const BinaryOp op_and = {{[FLOE_BOOL] = and_b}, 1, CHECK_NONE};
static const BinaryOp op_or = {{[FLOE_BOOL] = or_b}, 1, CHECK_NONE};

/* A plan over one flat run of n elements; stride 0 marks a scalar operand. */
static void plan_flat(CpuBroadcast *p, int num_inputs, int64_t n, const int *strides) {
  p->num_inputs = num_inputs;
  p->rank = 1;
  p->dims[0] = n;
  p->num_elements = n;
  for (int k = 0; k < num_inputs; k++) p->strides[k][0] = strides[k];
}

typedef struct BinaryJob {
  BinaryRow row;
  const CpuBroadcast *plan;
  char *z;
  const char *x, *y;
  size_t zsize, insize; /* element sizes */
  FloeDType dt, zdt;
  int mode;
  int tiled; /* -1, or the operand that repeats a short inner run (binary_range_tiled) */
  bool over; /* z is x's or y's memory (buffer reuse) */
} BinaryJob;

/* j->row(z, x, y, n, mode); when z is an operand's memory (the rows are restrict) through
 * an L1 chunk. */
static void row_run(const BinaryJob *j, char *z, const char *x, const char *y, int64_t n,
                    int mode) {
  if (!j->over) {
    j->row(z, x, y, n, mode);
    return;
  }
  _Alignas(64) char chunk[CPU_OVER_CHUNK];
  int64_t per = CPU_OVER_CHUNK / (int64_t)j->zsize, es = (int64_t)j->insize;
  for (int64_t c = 0; c < n; c += per) {
    int64_t m = n - c < per ? n - c : per;
    j->row(chunk, mode == ROW_SV ? x : x + c * es, mode == ROW_VS ? y : y + c * es, m, mode);
    memcpy(z + c * (int64_t)j->zsize, chunk, (size_t)(m * (int64_t)j->zsize));
  }
}

/* f16/bf16 run: convert to f32 in chunks, run the f32 row, convert back (or write bools). */
static void binary_half_run(const BinaryJob *j, char *z, const uint16_t *x, const uint16_t *y,
                            int64_t n) {
  float xb[CPU_HALF_CHUNK], yb[CPU_HALF_CHUNK], zb[CPU_HALF_CHUNK];
  if (j->mode == ROW_SV) cpu_half_to_f32_row(xb, x, 1, j->dt);
  if (j->mode == ROW_VS) cpu_half_to_f32_row(yb, y, 1, j->dt);
  for (int64_t c = 0; c < n; c += CPU_HALF_CHUNK) {
    int64_t m = n - c < CPU_HALF_CHUNK ? n - c : CPU_HALF_CHUNK;
    if (j->mode != ROW_SV) cpu_half_to_f32_row(xb, x + c, m, j->dt);
    if (j->mode != ROW_VS) cpu_half_to_f32_row(yb, y + c, m, j->dt);
    if (j->zdt == FLOE_BOOL) {
      j->row(z + c, xb, yb, m, j->mode);
    } else {
      j->row(zb, xb, yb, m, j->mode);
      cpu_f32_to_half_row((uint16_t *)z + c, zb, m, j->dt);
    }
  }
}

enum { TILE_ELEMS = 1024 };

/* A short inner run (P elements, e.g. the 16 channels of a block) that one operand repeats
 * along the next dim (M times) while the other is contiguous across both, as in [N, A, M, 16]
 * times [1, A, 1, 16]: the whole runs of a segment (its M x P elements) that lie in the range
 * go as a few long rows against a tile of the repeated run instead of one row of P each. The
 * range may start or end inside a segment (a parallel part is a few thousand elements, a
 * segment can be hundreds of thousands); only a run cut by the range goes on its own. */
static void binary_range_tiled(const BinaryJob *j, int64_t begin, int64_t end) {
  const CpuBroadcast *p = j->plan;
  int64_t P = p->dims[p->rank - 1], M = p->dims[p->rank - 2], seg = M * P;
  int64_t reps = TILE_ELEMS / P < M ? TILE_ELEMS / P : M;
  int b = j->tiled;
  size_t es = j->insize;
  _Alignas(64) char tile[TILE_ELEMS * 8];
  const char *built = NULL; /* the run the tile holds now */
  CpuBroadcastIter it;
  int64_t pos, off[2], len;
  cpu_broadcast_iter_init(&it, p, begin, end);
  while ((len = cpu_broadcast_iter_next(&it, &pos, off)) > 0) {
    char *z = j->z + pos * (int64_t)j->zsize;
    const char *x = j->x + off[0] * (int64_t)es;
    const char *y = j->y + off[1] * (int64_t)es;
    int64_t left = seg - pos % seg; /* elements to the segment's end */
    int64_t runs = pos % P ? 0 : (end - pos < left ? end - pos : left) / P;
    if (runs < 2) {
      row_run(j, z, x, y, len, j->mode);
      continue;
    }
    const char *rep = b ? y : x;
    if (rep != built) {
      for (int64_t r = 0; r < reps; r++) memcpy(tile + (size_t)(r * P) * es, rep, (size_t)P * es);
      built = rep;
    }
    for (int64_t i = 0; i < runs; i += reps) {
      int64_t n = (runs - i < reps ? runs - i : reps) * P;
      size_t at = (size_t)(i * P) * es;
      if (b)
        row_run(j, z + at, x + at, tile, n, ROW_VV);
      else
        row_run(j, z + at, tile, y + at, n, ROW_VV);
    }
    cpu_broadcast_iter_init(&it, p, pos + runs * P, end);
  }
}

/* The operand binary_range_tiled repeats, or -1 when the plan is not of that form. */
static int tiled_operand(const CpuBroadcast *p, FloeDType dt, FloeDType zdt, size_t es) {
  int r = p->rank;
  if (r < 2 || cpu_is_half(dt) || zdt != dt || es > 8 || p->num_inputs != 2) return -1;
  int64_t P = p->dims[r - 1], M = p->dims[r - 2];
  if (P > 64 || M < 4) return -1;
  for (int b = 0; b < 2; b++) {
    int a = 1 - b;
    if (p->strides[b][r - 1] == 1 && p->strides[b][r - 2] == 0 && p->strides[a][r - 1] == 1 &&
        p->strides[a][r - 2] == P)
      return b;
  }
  return -1;
}

static void binary_range(void *arg, int64_t begin, int64_t end) {
  const BinaryJob *j = arg;
  if (j->tiled >= 0) {
    binary_range_tiled(j, begin, end);
    return;
  }
  CpuBroadcastIter it;
  int64_t pos, off[2], len;
  cpu_broadcast_iter_init(&it, j->plan, begin, end);
  while ((len = cpu_broadcast_iter_next(&it, &pos, off)) > 0) {
    char *z = j->z + pos * (int64_t)j->zsize;
    const char *x = j->x + off[0] * (int64_t)j->insize;
    const char *y = j->y + off[1] * (int64_t)j->insize;
    if (cpu_is_half(j->dt))
      binary_half_run(j, z, (const uint16_t *)x, (const uint16_t *)y, len);
    else
      row_run(j, z, x, y, len, j->mode);
  }
}

/* Integer Div needs y != 0 and integer Pow y >= 0; checked up front so the loops stay free of
 * error paths. Returns the flat index of the first bad element, or -1. */
static int64_t find_bad_int(const void *data, int64_t n, FloeDType dt, int check, int64_t *value) {
#define FIND_BAD(T)                                                                          \
  do {                                                                                       \
    const T *v = data;                                                                       \
    for (int64_t i = 0; i < n; i++)                                                          \
      if (check == CHECK_NONZERO ? v[i] == 0 : v[i] < 0) {                                   \
        *value = (int64_t)v[i];                                                              \
        return i;                                                                            \
      }                                                                                      \
  } while (0)
  switch (dt) {
  case FLOE_I8: FIND_BAD(int8_t); break;
  case FLOE_I32: FIND_BAD(int32_t); break;
  case FLOE_I64: FIND_BAD(int64_t); break;
  case FLOE_U8:
    if (check == CHECK_NONNEG) return -1;
    FIND_BAD(uint8_t);
    break;
  default: break;
  }
#undef FIND_BAD
  return -1;
}

static floe_code check_int_operand(FloeKernelContext *ctx, const FloeTensor *y, int check) {
  int64_t value = 0;
  int64_t at = find_bad_int(cpu_host->tensor_data(y), cpu_host->tensor_num_elements(y),
                            cpu_host->tensor_dtype(y), check, &value);
  if (at < 0) return FLOE_OK;
  char shape[CPU_SHAPE_STR_MAX];
  cpu_shape_str(shape, sizeof shape, cpu_host->tensor_rank(y), cpu_host->tensor_dims(y));
  if (check == CHECK_NONZERO)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "integer division by zero: y (shape %s) is 0 at flat index "
                                   "%lld",
                                   shape, (long long)at);
  return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "integer Pow needs non-negative exponents: y (shape %s) is "
                                 "%lld at flat index %lld; use a float dtype",
                                 shape, (long long)value, (long long)at);
}

static floe_code binary_compute(void *state, FloeKernelContext *ctx) {
  const BinaryOp *op = state;
  const FloeTensor *in[2] = {cpu_host->ctx_input(ctx, 0), cpu_host->ctx_input(ctx, 1)};
  FloeDType dt = cpu_host->tensor_dtype(in[0]);
  FloeDType zdt = cpu_host->ctx_output_dtype(ctx, 0);
  BinaryRow row = op->row[cpu_is_half(dt) ? FLOE_F32 : dt];
  if (!row || cpu_host->tensor_dtype(in[1]) != dt)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtypes %s and %s",
                                   cpu_host->dtype_name(dt),
                                   cpu_host->dtype_name(cpu_host->tensor_dtype(in[1])));
  int rx = cpu_host->tensor_rank(in[0]), ry = cpu_host->tensor_rank(in[1]);
  const int64_t *dx = cpu_host->tensor_dims(in[0]), *dy = cpu_host->tensor_dims(in[1]);
  int64_t nx = cpu_host->tensor_num_elements(in[0]), ny = cpu_host->tensor_num_elements(in[1]);

  /* Fast paths (same shape, scalar operand) skip building a broadcast plan. */
  CpuBroadcast plan;
  int rank;
  int64_t bdims[FLOE_MAX_DIMS];
  const int64_t *dims;
  int same = rx == ry && (rx == 0 || memcmp(dx, dy, (size_t)rx * sizeof *dx) == 0);
  if (same) {
    rank = rx, dims = dx;
    plan_flat(&plan, 2, nx, (const int[]){1, 1});
  } else if (ny == 1 && ry <= rx) {
    rank = rx, dims = dx;
    plan_flat(&plan, 2, nx, (const int[]){1, 0});
  } else if (nx == 1 && rx <= ry) {
    rank = ry, dims = dy;
    plan_flat(&plan, 2, ny, (const int[]){0, 1});
  } else {
    floe_code rc = cpu_broadcast_tensors(ctx, 2, in, &rank, bdims, &plan);
    if (rc != FLOE_OK) return rc;
    dims = bdims;
  }
  if (op->check != CHECK_NONE && is_int(dt) && plan.num_elements > 0) {
    floe_code rc = check_int_operand(ctx, in[1], op->check);
    if (rc != FLOE_OK) return rc;
  }
  FloeTensor *out;
  floe_code rc = cpu_output_over(ctx, (const int[]){0, 1}, 2, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  if (plan.num_elements == 0) return FLOE_OK;

  int inner = plan.rank - 1;
  BinaryJob j = {row,
                 &plan,
                 cpu_host->tensor_data(out),
                 cpu_host->tensor_data(in[0]),
                 cpu_host->tensor_data(in[1]),
                 cpu_host->dtype_size(zdt),
                 cpu_host->dtype_size(dt),
                 dt,
                 zdt,
                 plan.strides[0][inner] == 0   ? ROW_SV
                 : plan.strides[1][inner] == 0 ? ROW_VS
                                               : ROW_VV,
                 tiled_operand(&plan, dt, zdt, cpu_host->dtype_size(dt)),
                 cpu_host->tensor_data(out) == cpu_host->tensor_data(in[0]) ||
                     cpu_host->tensor_data(out) == cpu_host->tensor_data(in[1])};
  cpu_parallel_elements(plan.num_elements, op->cost, binary_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Unary rows: y[i] = f(x[i]) for i < n; a is the op's alpha attribute (0 when it has none). */

typedef void (*UnaryRow)(void *y, const void *x, int64_t n, double alpha);

#define UNARY_ROW(NAME, ATTR, T, EXPR)                                                       \
  ATTR static void NAME(void *yv, const void *xv, int64_t n, double alpha) {                 \
    T *restrict ys = yv;                                                                     \
    const T *restrict xs = xv;                                                               \
    const T a = (T)alpha;                                                                    \
    (void)a;                                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                        \
      T x = xs[i];                                                                           \
      ys[i] = (T)(EXPR);                                                                     \
    }                                                                                        \
  }

/* Numeric unary op: F32 / F64 for floats, SE(T, U) / UE(T, U) for signed / unsigned ints. */
#define UNARY_NUMERIC(OP, F32, F64, SE, UE)                                                  \
  UNARY_ROW(OP##_f32, HOT, float, F32)                                                       \
  UNARY_ROW(OP##_f64, HOT, double, F64)                                                      \
  UNARY_ROW(OP##_i8, , int8_t, SE(int8_t, uint8_t))                                          \
  UNARY_ROW(OP##_u8, , uint8_t, UE(uint8_t, uint8_t))                                        \
  UNARY_ROW(OP##_i32, , int32_t, SE(int32_t, uint32_t))                                      \
  UNARY_ROW(OP##_i64, , int64_t, SE(int64_t, uint64_t))

#define UNARY_FLOAT(OP, F32, F64)                                                            \
  UNARY_ROW(OP##_f32, CPU_HOT_WIDE, float, F32)                                              \
  UNARY_ROW(OP##_f64, , double, F64)

#define ROWS_FLOAT(OP) [FLOE_F32] = OP##_f32, [FLOE_F64] = OP##_f64

#define WRAP_NEG(T, U) (T)(0 - (U)x)
#define SABS(T, U) (x < 0 ? (T)(0 - (U)x) : x)
#define UABS(T, U) x
#define WRAP_SQUARE(T, U) (T)((U)x * (U)x)
#define SRELU(T, U) (x > 0 ? x : 0)
#define SRELU6(T, U) (x < 0 ? 0 : x > 6 ? 6 : x)
#define URELU6(T, U) (x > 6 ? 6 : x)

UNARY_NUMERIC(neg, -x, -x, WRAP_NEG, WRAP_NEG)
UNARY_NUMERIC(abs, fabsf(x), fabs(x), SABS, UABS)
UNARY_NUMERIC(square, x * x, x * x, WRAP_SQUARE, WRAP_SQUARE)
/* Relu and Relu6 keep NaN (PyTorch's behaviour), so a NaN is never silently hidden. */
UNARY_NUMERIC(relu, (x > 0) | (x != x) ? x : 0, (x > 0) | (x != x) ? x : 0, SRELU, SRELU)
#define FRELU6 (x != x ? x : x < 0 ? 0 : x > 6 ? 6 : x)
UNARY_NUMERIC(relu6, FRELU6, FRELU6, SRELU6, URELU6)
UNARY_FLOAT(exp, cpu_exp_f32(x), exp(x))
UNARY_FLOAT(log, cpu_log_f32(x), log(x))
UNARY_FLOAT(sqrt, sqrtf(x), sqrt(x))
UNARY_FLOAT(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
UNARY_FLOAT(leaky_relu, x > 0 ? x : a * x, x > 0 ? x : a * x)
UNARY_FLOAT(elu, x > 0 ? x : a * cpu_expm1_f32(x), x > 0 ? x : a * expm1(x))
UNARY_FLOAT(gelu_erf, math_gelu_erf_f32(x), math_gelu_erf_f64(x))
UNARY_FLOAT(gelu_tanh, math_gelu_tanh_f32(x), math_gelu_tanh_f64(x))
UNARY_FLOAT(sigmoid, cpu_sigmoid_f32(x), cpu_sigmoid_f64(x))
UNARY_FLOAT(tanh, cpu_tanh_f32(x), tanh(x))
UNARY_FLOAT(softplus, math_softplus_f32(x), math_softplus_f64(x))
UNARY_ROW(not_b, , uint8_t, x == 0)
/* Sign keeps NaN and the sign of zero (a select chain, so it vectorises). */
#define FSIGN (x > 0 ? 1 : x < 0 ? -1 : x)
#define SSIGN(T, U) (T)((x > 0) - (x < 0))
#define USIGN(T, U) (T)(x > 0)
UNARY_NUMERIC(sign, FSIGN, FSIGN, SSIGN, USIGN)
UNARY_FLOAT(floor, floorf(x), floor(x))
UNARY_ROW(sin_f64, , double, sin(x))
UNARY_ROW(cos_f64, , double, cos(x))

/* f32 sin and cos: |x| <= SINCOS_MAX is reduced to r in [-pi/4, pi/4] in double (a 33-bit
 * pi/2 head times j < 2^20 is exact, so r is exact to far below f32's ulp) and evaluated
 * with Cephes' f32 polynomials, in selects so the loop vectorises; larger |x| (and Inf),
 * rare, are patched afterwards with libm, which does the full Payne-Hanek reduction. */
#define SINCOS_MAX 1.0e6f

static inline float math_sincos_f32(float x, int32_t quarter) {
  float xc = fabsf(x) <= SINCOS_MAX ? x : 0.0f; /* NaN and big x: a safe dummy */
  double xd = xc;
  double jd = (xd * 0.63661977236758134308 + 6755399441055744.0) - 6755399441055744.0;
  float r = (float)((xd - jd * 1.57079632673412561417e+00) - jd * 6.07710050650619224932e-11);
  int32_t q = (int32_t)jd + quarter; /* sin(x) = +-sin(r) or +-cos(r) by quarter turn */
  float z = r * r;
  float sn = r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
  float cs = 1.0f - 0.5f * z +
             z * z * (4.166664568e-2f + z * (-1.388731625e-3f + z * 2.443315711e-5f));
  float v = q & 1 ? cs : sn;
  v = q & 2 ? -v : v;
  return x != x ? x : v;
}

/* quarter: 0 for sin, 1 for cos (cos x = sin(x + pi/2)). */
#define SINCOS_ROW(NAME, QUARTER, LIBM)                                                      \
  HOT static void NAME(void *yv, const void *xv, int64_t n, double alpha) {                  \
    float *restrict ys = yv;                                                                 \
    const float *restrict xs = xv;                                                           \
    for (int64_t i = 0; i < n; i++) ys[i] = math_sincos_f32(xs[i], QUARTER);                 \
    for (int64_t i = 0; i < n; i++)                                                          \
      if (fabsf(xs[i]) > SINCOS_MAX) ys[i] = LIBM(xs[i]);                                    \
  }
SINCOS_ROW(sin_f32, 0, sinf)
SINCOS_ROW(cos_f32, 1, cosf)

/* More libm math (rint rounds half to even in the default rounding mode). */
UNARY_FLOAT(ceil, ceilf(x), ceil(x))
UNARY_FLOAT(round, rintf(x), rint(x))
UNARY_FLOAT(erf, erff(x), erf(x))
UNARY_FLOAT(tan, tanf(x), tan(x))
UNARY_FLOAT(asin, asinf(x), asin(x))
UNARY_FLOAT(acos, acosf(x), acos(x))
UNARY_FLOAT(atan, atanf(x), atan(x))
UNARY_FLOAT(sinh, sinhf(x), sinh(x))
UNARY_FLOAT(cosh, coshf(x), cosh(x))
UNARY_FLOAT(asinh, asinhf(x), asinh(x))
UNARY_FLOAT(acosh, acoshf(x), acosh(x))
UNARY_FLOAT(atanh, atanhf(x), atanh(x))

/* Predicates: float in, bool (0/1 byte) out. */
#define UNARY_PRED(OP, EXPR)                                                                 \
  static void OP##_f32(void *yv, const void *xv, int64_t n, double alpha) {                  \
    uint8_t *restrict ys = yv;                                                               \
    const float *restrict xs = xv;                                                           \
    (void)alpha;                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                        \
      float x = xs[i];                                                                       \
      ys[i] = (uint8_t)(EXPR);                                                               \
    }                                                                                        \
  }                                                                                          \
  static void OP##_f64(void *yv, const void *xv, int64_t n, double alpha) {                  \
    uint8_t *restrict ys = yv;                                                               \
    const double *restrict xs = xv;                                                          \
    (void)alpha;                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                        \
      double x = xs[i];                                                                      \
      ys[i] = (uint8_t)(EXPR);                                                               \
    }                                                                                        \
  }
UNARY_PRED(isnan, x != x)
UNARY_PRED(isinf, x == INFINITY || x == -INFINITY)
UNARY_PRED(isposinf, x == INFINITY)
UNARY_PRED(isneginf, x == -INFINITY)
UNARY_PRED(isnone, x < x) /* false, NaN included */

typedef struct UnaryOp {
  UnaryRow row[FLOE_DTYPE_LIMIT]; /* f16/bf16 run row[FLOE_F32] on converted chunks */
  int64_t cost;                   /* per element, nanoseconds-ish */
  int bool_out;                   /* the rows write bools, not the input's dtype */
} UnaryOp;

static const UnaryOp op_neg = {{ROWS_NUMERIC(neg)}, 1, 0};
static const UnaryOp op_abs = {{ROWS_NUMERIC(abs)}, 1, 0};
static const UnaryOp op_square = {{ROWS_NUMERIC(square)}, 1, 0};
static const UnaryOp op_relu = {{ROWS_NUMERIC(relu)}, 1, 0};
static const UnaryOp op_relu6 = {{ROWS_NUMERIC(relu6)}, 1, 0};
static const UnaryOp op_exp = {{ROWS_FLOAT(exp)}, 4, 0};
static const UnaryOp op_log = {{ROWS_FLOAT(log)}, 4, 0};
static const UnaryOp op_sqrt = {{ROWS_FLOAT(sqrt)}, 2, 0};
static const UnaryOp op_rsqrt = {{ROWS_FLOAT(rsqrt)}, 2, 0};
static const UnaryOp op_leaky_relu = {{ROWS_FLOAT(leaky_relu)}, 1, 0};
static const UnaryOp op_elu = {{ROWS_FLOAT(elu)}, 4, 0};
static const UnaryOp op_gelu_erf = {{ROWS_FLOAT(gelu_erf)}, 8, 0};
static const UnaryOp op_gelu_tanh = {{ROWS_FLOAT(gelu_tanh)}, 6, 0};
static const UnaryOp op_sigmoid = {{ROWS_FLOAT(sigmoid)}, 4, 0};
static const UnaryOp op_tanh = {{ROWS_FLOAT(tanh)}, 6, 0};
static const UnaryOp op_softplus = {{ROWS_FLOAT(softplus)}, 8, 0};
static const UnaryOp op_not = {{[FLOE_BOOL] = not_b}, 1, 0};
static const UnaryOp op_sign = {{ROWS_NUMERIC(sign)}, 1, 0};
static const UnaryOp op_floor = {{ROWS_FLOAT(floor)}, 1, 0};
static const UnaryOp op_sin = {{ROWS_FLOAT(sin)}, 6, 0};
static const UnaryOp op_cos = {{ROWS_FLOAT(cos)}, 6, 0};
static const UnaryOp op_ceil = {{ROWS_FLOAT(ceil)}, 1, 0};
static const UnaryOp op_round = {{ROWS_FLOAT(round)}, 1, 0};
static const UnaryOp op_erf = {{ROWS_FLOAT(erf)}, 8, 0};
static const UnaryOp op_tan = {{ROWS_FLOAT(tan)}, 8, 0};
static const UnaryOp op_asin = {{ROWS_FLOAT(asin)}, 8, 0};
static const UnaryOp op_acos = {{ROWS_FLOAT(acos)}, 8, 0};
static const UnaryOp op_atan = {{ROWS_FLOAT(atan)}, 8, 0};
static const UnaryOp op_sinh = {{ROWS_FLOAT(sinh)}, 8, 0};
static const UnaryOp op_cosh = {{ROWS_FLOAT(cosh)}, 8, 0};
static const UnaryOp op_asinh = {{ROWS_FLOAT(asinh)}, 8, 0};
static const UnaryOp op_acosh = {{ROWS_FLOAT(acosh)}, 8, 0};
static const UnaryOp op_atanh = {{ROWS_FLOAT(atanh)}, 8, 0};
static const UnaryOp op_isnan = {{ROWS_FLOAT(isnan)}, 1, 1};
static const UnaryOp op_isinf = {{ROWS_FLOAT(isinf)}, 1, 1};
static const UnaryOp op_isposinf = {{ROWS_FLOAT(isposinf)}, 1, 1};
static const UnaryOp op_isneginf = {{ROWS_FLOAT(isneginf)}, 1, 1};
static const UnaryOp op_isnone = {{ROWS_FLOAT(isnone)}, 1, 1};

/* Kernel state: the op and its attribute, fixed per node. */
typedef struct UnaryState {
  const UnaryOp *op;
  double alpha;
} UnaryState;

/* Stateless ops share these (state = user_data, never freed). */
static const UnaryState st_neg = {&op_neg, 0}, st_abs = {&op_abs, 0},
                        st_square = {&op_square, 0}, st_relu = {&op_relu, 0},
                        st_relu6 = {&op_relu6, 0}, st_exp = {&op_exp, 0}, st_log = {&op_log, 0},
                        st_sqrt = {&op_sqrt, 0}, st_rsqrt = {&op_rsqrt, 0},
                        st_sigmoid = {&op_sigmoid, 0}, st_tanh = {&op_tanh, 0},
                        st_softplus = {&op_softplus, 0}, st_not = {&op_not, 0},
                        st_sign = {&op_sign, 0}, st_floor = {&op_floor, 0},
                        st_sin = {&op_sin, 0}, st_cos = {&op_cos, 0};
static const UnaryState st_ceil = {&op_ceil, 0}, st_round = {&op_round, 0},
                        st_erf = {&op_erf, 0}, st_tan = {&op_tan, 0}, st_asin = {&op_asin, 0},
                        st_acos = {&op_acos, 0}, st_atan = {&op_atan, 0},
                        st_sinh = {&op_sinh, 0}, st_cosh = {&op_cosh, 0},
                        st_asinh = {&op_asinh, 0}, st_acosh = {&op_acosh, 0},
                        st_atanh = {&op_atanh, 0}, st_isnan = {&op_isnan, 0},
                        st_isinf = {&op_isinf, 0};
/* Templates for ops with attributes: op and the attribute's default (ops_std.def). */
static const UnaryState st_leaky_relu = {&op_leaky_relu, 0.2}, st_elu = {&op_elu, 1.0},
                        st_gelu = {&op_gelu_erf, 0};

/* LeakyRelu, Elu: read "alpha"; Gelu: "approximate" picks the tanh form. */
static floe_code unary_attr_create(const FloeHostApi *host, FloeKernelInit *init,
                                   void *user_data, void **state) {
  const UnaryState *tmpl = user_data;
  UnaryState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *s = *tmpl;
  int approximate = 0;
  double alpha = tmpl->alpha;
  floe_code rc = cpu_activation_attrs(host, init, &approximate, &alpha);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  if (tmpl->op == &op_gelu_erf) {
    s->op = approximate ? &op_gelu_tanh : &op_gelu_erf;
  } else if (tmpl->op == &op_isinf) {
    /* IsInf: which infinities count. */
    const FloeAttrs *attrs = host->init_attrs(init);
    int neg = 1, pos = 1;
    if (((rc = host->attr_bool(attrs, "detect_negative", &neg)) != FLOE_OK && rc != FLOE_NOT_FOUND) ||
        ((rc = host->attr_bool(attrs, "detect_positive", &pos)) != FLOE_OK && rc != FLOE_NOT_FOUND)) {
      host->free(s);
      return host->init_set_error(init, rc, "attributes detect_negative / detect_positive must be bools");
    }
    s->op = neg ? (pos ? &op_isinf : &op_isneginf) : (pos ? &op_isposinf : &op_isnone);
  } else {
    s->alpha = alpha;
  }
  *state = s;
  return FLOE_OK;
}

static void unary_attr_destroy(void *state) { cpu_host->free(state); }

typedef struct UnaryJob {
  UnaryRow row;
  double alpha;
  char *y;
  const char *x;
  size_t size, ysize; /* element sizes of x and y */
  FloeDType dt;
  int bool_out;
} UnaryJob;

static void unary_range(void *arg, int64_t begin, int64_t end) {
  const UnaryJob *j = arg;
  if (!cpu_is_half(j->dt) && j->y != j->x) {
    j->row(j->y + begin * (int64_t)j->ysize, j->x + begin * (int64_t)j->size, end - begin,
           j->alpha);
    return;
  }
  if (!cpu_is_half(j->dt)) { /* written over x (buffer reuse): the rows are restrict */
    _Alignas(64) char chunk[CPU_OVER_CHUNK];
    int64_t per = CPU_OVER_CHUNK / (int64_t)j->size;
    for (int64_t c = begin; c < end; c += per) {
      int64_t m = end - c < per ? end - c : per;
      j->row(chunk, j->x + c * (int64_t)j->size, m, j->alpha);
      memcpy(j->y + c * (int64_t)j->size, chunk, (size_t)(m * (int64_t)j->size));
    }
    return;
  }
  float xb[CPU_HALF_CHUNK], yb[CPU_HALF_CHUNK];
  const uint16_t *x = (const uint16_t *)j->x;
  uint16_t *y = (uint16_t *)j->y;
  for (int64_t c = begin; c < end; c += CPU_HALF_CHUNK) {
    int64_t m = end - c < CPU_HALF_CHUNK ? end - c : CPU_HALF_CHUNK;
    cpu_half_to_f32_row(xb, x + c, m, j->dt);
    if (j->bool_out) {
      j->row(j->y + c, xb, m, j->alpha);
      continue;
    }
    j->row(yb, xb, m, j->alpha);
    cpu_f32_to_half_row(y + c, yb, m, j->dt);
  }
}

static floe_code unary_compute(void *state, FloeKernelContext *ctx) {
  const UnaryState *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(x);
  UnaryRow row = s->op->row[cpu_is_half(dt) ? FLOE_F32 : dt];
  if (!row)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtype %s",
                                   cpu_host->dtype_name(dt));
  FloeTensor *out;
  floe_code rc = cpu_output_over(ctx, (const int[]){0}, 1, cpu_host->tensor_rank(x),
                                 cpu_host->tensor_dims(x), &out);
  if (rc != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(x);
  if (n == 0) return FLOE_OK;
  UnaryJob j = {row,
                s->alpha,
                cpu_host->tensor_data(out),
                cpu_host->tensor_data(x),
                cpu_host->dtype_size(dt),
                cpu_host->dtype_size(cpu_host->tensor_dtype(out)),
                dt,
                s->op->bool_out};
  cpu_parallel_elements(n, s->op->cost, unary_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Select: output = condition ? t : e, all three broadcast together. */

/* One run; sc / st / se are 0 (scalar) or 1 (contiguous). Both values are loaded before the
 * choice so the contiguous loop vectorises as a blend. */
#define SELECT_RUN(NAME, T)                                                                  \
  static void NAME(void *zv, const uint8_t *c, int64_t sc, const void *tv, int64_t st,       \
                   const void *ev, int64_t se, int64_t n) {                                  \
    T *restrict z = zv;                                                                      \
    const T *restrict t = tv, *restrict e = ev;                                              \
    if (sc && st && se) {                                                                    \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T a = t[i], b = e[i];                                                                \
        z[i] = c[i] ? a : b;                                                                 \
      }                                                                                      \
    } else {                                                                                 \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T a = t[i * st], b = e[i * se];                                                      \
        z[i] = c[i * sc] ? a : b;                                                            \
      }                                                                                      \
    }                                                                                        \
  }
SELECT_RUN(select_1, uint8_t)
SELECT_RUN(select_2, uint16_t)
SELECT_RUN(select_4, uint32_t)
SELECT_RUN(select_8, uint64_t)

typedef void (*SelectRun)(void *z, const uint8_t *c, int64_t sc, const void *t, int64_t st,
                          const void *e, int64_t se, int64_t n);

typedef struct SelectJob {
  SelectRun run;
  const CpuBroadcast *plan;
  const uint8_t *c;
  const char *t, *e;
  char *z;
  int64_t size;
} SelectJob;

static void select_range(void *arg, int64_t begin, int64_t end) {
  const SelectJob *j = arg;
  const CpuBroadcast *p = j->plan;
  int inner = p->rank - 1;
  CpuBroadcastIter it;
  int64_t pos, off[3], len;
  cpu_broadcast_iter_init(&it, p, begin, end);
  while ((len = cpu_broadcast_iter_next(&it, &pos, off)) > 0)
    j->run(j->z + pos * j->size, j->c + off[0], p->strides[0][inner], j->t + off[1] * j->size,
           p->strides[1][inner], j->e + off[2] * j->size, p->strides[2][inner], len);
}

static int same_shape(const FloeTensor *a, const FloeTensor *b) {
  int r = cpu_host->tensor_rank(a);
  return r == cpu_host->tensor_rank(b) &&
         (r == 0 || memcmp(cpu_host->tensor_dims(a), cpu_host->tensor_dims(b),
                           (size_t)r * sizeof(int64_t)) == 0);
}

static floe_code select_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *in[3] = {cpu_host->ctx_input(ctx, 0), cpu_host->ctx_input(ctx, 1),
                             cpu_host->ctx_input(ctx, 2)};
  int64_t size = (int64_t)cpu_host->dtype_size(cpu_host->tensor_dtype(in[1]));
  static const SelectRun runs[9] = {[1] = select_1, [2] = select_2, [4] = select_4,
                                    [8] = select_8};
  SelectRun run = size <= 8 ? runs[size] : NULL;
  if (!run)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported dtype %s",
                                   cpu_host->dtype_name(cpu_host->tensor_dtype(in[1])));
  /* A scalar condition over equal shapes picks a whole input: forward it, no copy. */
  if (cpu_host->tensor_num_elements(in[0]) == 1 && same_shape(in[1], in[2]) &&
      cpu_host->tensor_rank(in[0]) <= cpu_host->tensor_rank(in[1])) {
    int pick = *(const uint8_t *)cpu_host->tensor_data(in[0]) ? 1 : 2;
    return cpu_host->ctx_forward_input(ctx, pick, 0, cpu_host->tensor_rank(in[pick]),
                                       cpu_host->tensor_dims(in[pick]));
  }
  CpuBroadcast plan;
  int rank;
  int64_t bdims[FLOE_MAX_DIMS];
  const int64_t *dims;
  if (same_shape(in[0], in[1]) && same_shape(in[1], in[2])) {
    rank = cpu_host->tensor_rank(in[0]);
    dims = cpu_host->tensor_dims(in[0]);
    plan_flat(&plan, 3, cpu_host->tensor_num_elements(in[0]), (const int[]){1, 1, 1});
  } else {
    floe_code rc = cpu_broadcast_tensors(ctx, 3, in, &rank, bdims, &plan);
    if (rc != FLOE_OK) return rc;
    dims = bdims;
  }
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  if (plan.num_elements == 0) return FLOE_OK;
  SelectJob j = {run,
                 &plan,
                 cpu_host->tensor_data(in[0]),
                 cpu_host->tensor_data(in[1]),
                 cpu_host->tensor_data(in[2]),
                 cpu_host->tensor_data(out),
                 size};
  cpu_parallel_elements(plan.num_elements, 1, select_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Cast between every pair of dtypes. Float to int truncates toward zero and saturates at the
 * destination's range (NaN gives 0), so no conversion is undefined; int to narrower int wraps;
 * anything to bool is x != 0; bool is 0/1. f16/bf16 go through f32 (rounded once). */

typedef void (*CastRow)(void *dst, const void *src, int64_t n);

/* Conversion by kind of source and destination: F float, I integer, B bool. */
#define CONV_FF(DT, MIN, MAX, v) (DT)(v)
#define CONV_FI(DT, MIN, MAX, v)                                                             \
  ((v) != (v) ? (DT)0 : (v) <= (MIN) ? (DT)(MIN) : (v) >= (double)(MAX) + 1.0 ? (DT)(MAX) : (DT)(v))
#define CONV_FB(DT, MIN, MAX, v) (DT)((v) != 0)
#define CONV_IF CONV_FF
#define CONV_II CONV_FF
#define CONV_IB CONV_FB
#define CONV_BF CONV_FB
#define CONV_BI CONV_FB
#define CONV_BB CONV_FB

/* The same list twice: a macro cannot expand itself, and pairs need a nested walk. */
#define CAST_SRC_TYPES(X)                                                                    \
  X(f32, float, F) X(f64, double, F) X(i8, int8_t, I) X(u8, uint8_t, I) X(i32, int32_t, I)   \
  X(i64, int64_t, I) X(b, uint8_t, B)
#define CAST_DST_TYPES(X, SN, ST, SK)                                                        \
  X(SN, ST, SK, f32, float, F, 0, 0)                                                         \
  X(SN, ST, SK, f64, double, F, 0, 0)                                                        \
  X(SN, ST, SK, i8, int8_t, I, INT8_MIN, INT8_MAX)                                           \
  X(SN, ST, SK, u8, uint8_t, I, 0, UINT8_MAX)                                                \
  X(SN, ST, SK, i32, int32_t, I, INT32_MIN, INT32_MAX)                                       \
  X(SN, ST, SK, i64, int64_t, I, INT64_MIN, INT64_MAX)                                       \
  X(SN, ST, SK, b, uint8_t, B, 0, 1)

#define CAST_ROW(SN, ST, SK, DN, DT, DK, MIN, MAX)                                           \
  static void cast_##SN##_##DN(void *dv, const void *sv, int64_t n) {                        \
    DT *restrict d = dv;                                                                     \
    const ST *restrict s = sv;                                                               \
    for (int64_t i = 0; i < n; i++) d[i] = CONV_##SK##DK(DT, MIN, MAX, s[i]);                \
  }
#define CAST_ROWS_FROM(SN, ST, SK) CAST_DST_TYPES(CAST_ROW, SN, ST, SK)
CAST_SRC_TYPES(CAST_ROWS_FROM)

#define CAST_ROW_ENTRIES(SN)                                                                 \
  {[FLOE_F32] = cast_##SN##_f32, [FLOE_F64] = cast_##SN##_f64, [FLOE_I8] = cast_##SN##_i8,   \
   [FLOE_U8] = cast_##SN##_u8,   [FLOE_I32] = cast_##SN##_i32, [FLOE_I64] = cast_##SN##_i64, \
   [FLOE_BOOL] = cast_##SN##_b}

/* cast_rows[src][dst] for every dtype but f16/bf16. */
static const CastRow cast_rows[FLOE_DTYPE_LIMIT][FLOE_DTYPE_LIMIT] = {
    [FLOE_F32] = CAST_ROW_ENTRIES(f32), [FLOE_F64] = CAST_ROW_ENTRIES(f64),
    [FLOE_I8] = CAST_ROW_ENTRIES(i8),   [FLOE_U8] = CAST_ROW_ENTRIES(u8),
    [FLOE_I32] = CAST_ROW_ENTRIES(i32), [FLOE_I64] = CAST_ROW_ENTRIES(i64),
    [FLOE_BOOL] = CAST_ROW_ENTRIES(b),
};

/* f64 -> f32 rounding to odd (truncate, then set the last bit when inexact), so that the
 * following f32 -> f16/bf16 rounding is the correctly rounded f64 -> f16/bf16: plain f64 ->
 * f32 -> f16 would round twice, wrongly at ties. */
static void cast_f64_f32_odd(void *dv, const void *sv, int64_t n) {
  float *restrict d = dv;
  const double *restrict s = sv;
  for (int64_t i = 0; i < n; i++) {
    float f = (float)s[i];
    uint32_t u = cpu_f32_bits(f);
    uint32_t back = fabs((double)f) > fabs(s[i]) ? u - 1 : u; /* toward zero */
    d[i] = (double)f == s[i] ? f : cpu_bits_f32(back | 1u);
  }
}

typedef struct CastJob {
  FloeDType src, dst;
  const char *s;
  char *d;
  int64_t ssize, dsize;
} CastJob;

static void cast_range(void *arg, int64_t begin, int64_t end) {
  const CastJob *j = arg;
  const char *s = j->s + begin * j->ssize;
  char *d = j->d + begin * j->dsize;
  int64_t n = end - begin;
  if (!cpu_is_half(j->src) && !cpu_is_half(j->dst)) {
    cast_rows[j->src][j->dst](d, s, n);
    return;
  }
  /* Through an f32 chunk: half -> f32 -> dst, or src -> f32 -> half. */
  float buf[CPU_HALF_CHUNK];
  for (int64_t c = 0; c < n; c += CPU_HALF_CHUNK) {
    int64_t m = n - c < CPU_HALF_CHUNK ? n - c : CPU_HALF_CHUNK;
    if (cpu_is_half(j->src))
      cpu_half_to_f32_row(buf, s + c * j->ssize, m, j->src);
    else if (j->src == FLOE_F64)
      cast_f64_f32_odd(buf, s + c * j->ssize, m);
    else
      cast_rows[j->src][FLOE_F32](buf, s + c * j->ssize, m);
    if (cpu_is_half(j->dst))
      cpu_f32_to_half_row(d + c * j->dsize, buf, m, j->dst);
    else
      cast_rows[FLOE_F32][j->dst](d + c * j->dsize, buf, m);
  }
}

static floe_code cast_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeDType src = cpu_host->tensor_dtype(x), dst = cpu_host->ctx_output_dtype(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  if (src == dst) return cpu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  if ((!cpu_is_half(src) && !cast_rows[src][FLOE_F32]) ||
      (!cpu_is_half(dst) && !cast_rows[FLOE_F32][dst]))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "unsupported cast from %s to %s",
                                   cpu_host->dtype_name(src), cpu_host->dtype_name(dst));
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK) return rc;
  CastJob j = {src,
               dst,
               cpu_host->tensor_data(x),
               cpu_host->tensor_data(out),
               (int64_t)cpu_host->dtype_size(src),
               (int64_t)cpu_host->dtype_size(dst)};
  cpu_parallel_elements(cpu_host->tensor_num_elements(x), 1, cast_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* _FusedElementwise: a chain of elementwise ops over x in one pass (core/session/
 * opt_elementwise.c makes it). Each step runs its op's own row function on a chunk that stays
 * in L1, so the result is bitwise that of the ops one by one; operands that are not scalars
 * are gathered for the chunk through their broadcast plan against x. x may be K parts joined
 * along concat_axis (a Concat taken in): in row-major order x is then, for each index of the
 * dims before the axis, each part's block of the dims from the axis on, in turn, so a chunk
 * is read from the part it falls in (chunks end where parts do) and the joined x is never
 * written. */

enum { FEW_MAX_STEPS = 16, FEW_CHUNK = 512 };

typedef struct FewStep {
  const UnaryOp *u;  /* a unary step, else */
  const BinaryOp *b; /* a binary step with operand input `input` */
  int input;
  bool left;         /* operand op value (else value op operand) */
  double alpha;
} FewStep;

typedef struct FewState {
  int n;
  int parts;        /* K: x's parts (1: x is one tensor) */
  int64_t axis;     /* concat_axis (negative: from the end) */
  FewStep s[FEW_MAX_STEPS];
} FewState;

static floe_code few_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  (void)user_data;
  static const struct {
    const char *name;
    const UnaryOp *u;
    const BinaryOp *b;
  } ops[] = {{"Neg", &op_neg, NULL},       {"Abs", &op_abs, NULL},
             {"Square", &op_square, NULL}, {"Exp", &op_exp, NULL},
             {"Log", &op_log, NULL},       {"Sqrt", &op_sqrt, NULL},
             {"Rsqrt", &op_rsqrt, NULL},   {"Relu", &op_relu, NULL},
             {"Relu6", &op_relu6, NULL},   {"LeakyRelu", &op_leaky_relu, NULL},
             {"Elu", &op_elu, NULL},       {"Sigmoid", &op_sigmoid, NULL},
             {"Tanh", &op_tanh, NULL},     {"Softplus", &op_softplus, NULL},
             {"Add", NULL, &op_add},       {"Sub", NULL, &op_sub},
             {"Mul", NULL, &op_mul},       {"Div", NULL, &op_div},
             {"Maximum", NULL, &op_max},   {"Minimum", NULL, &op_min}};
  const FloeAttrs *at = host->init_attrs(init);
  const char *list = NULL;
  const double *alpha = NULL;
  size_t na = 0;
  int64_t num = 0;
  if (host->attr_string(at, "steps", &list) != FLOE_OK || !list) list = "";
  if (host->attr_float_list(at, "alpha", &alpha, &na) != FLOE_OK) na = 0;
  if (host->attr_int(at, "N", &num) != FLOE_OK) num = 0;
  int64_t parts = 1, axis = 0;
  if (host->attr_int(at, "K", &parts) != FLOE_OK) parts = 1;
  if (host->attr_int(at, "concat_axis", &axis) != FLOE_OK) axis = 0;
  if (parts < 1 || parts > INT_MAX / 2)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "_FusedElementwise: K = %lld parts of x; it takes 1 or more",
                                (long long)parts);
  FewState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  memset(s, 0, sizeof *s);
  s->parts = (int)parts;
  s->axis = axis;
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ","), name_len = strcspn(p, ":,");
    int k = -1;
    for (int i = 0; i < (int)(sizeof ops / sizeof *ops); i++)
      if (strlen(ops[i].name) == name_len && !strncmp(p, ops[i].name, name_len)) k = i;
    FewStep *st = &s->s[s->n];
    bool ok = k >= 0 && s->n < FEW_MAX_STEPS && (na == 0 || (size_t)s->n < na);
    if (ok && ops[k].b) { /* "Op:k" or "Op:~k" */
      const char *q = p + name_len;
      ok = *q == ':';
      if (ok && q[1] == '~') st->left = true, q++;
      char *end = NULL;
      long in = ok ? strtol(q + 1, &end, 10) : -1;
      ok = ok && end == p + len && in >= 0 && in < num;
      st->input = (int)in + s->parts;
    } else if (ok) {
      ok = name_len == len;
    }
    if (!ok) {
      host->free(s);
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                  "_FusedElementwise: steps \"%s\" (%lld operands, %zu alpha): "
                                  "at most %d of Neg, Abs, Square, Exp, Log, Sqrt, Rsqrt, Relu, "
                                  "Relu6, LeakyRelu, Elu, Sigmoid, Tanh, Softplus, and Add, Sub, "
                                  "Mul, Div, Maximum, Minimum as \"Op:k\" or \"Op:~k\" (operand "
                                  "k first)",
                                  list, (long long)num, na, FEW_MAX_STEPS);
    }
    st->u = ops[k].u;
    st->b = ops[k].b;
    st->alpha = na ? alpha[s->n] : 0;
    s->n++;
    p += len;
    if (*p == ',') p++;
  }
  *state = s;
  return FLOE_OK;
}

enum { FEW_CACHED = 4 }; /* operands whose gathered chunk is kept for the next chunk */

typedef struct FewJob {
  const FewState *s;
  const float *x;   /* x when it is one tensor */
  float *y;
  /* x in parts: part k's data, its elements per index before the axis (inner[k]) and where
   * they start among the inner_total of each such index (at[k]). */
  int parts;
  const float **part;
  int64_t *inner, *at, inner_total;
  const float *op[FEW_MAX_STEPS];      /* each binary step's operand */
  bool scalar[FEW_MAX_STEPS];          /* one element */
  CpuBroadcast plan[FEW_MAX_STEPS];    /* (x, operand) -> x's shape */
  /* An operand repeating a short run along the next dim (tiled_operand's form: a blocked
   * per-channel vector): segments of seg[k] elements in which its values repeat with period
   * period[k]; 0 when not of that form. */
  int64_t seg[FEW_MAX_STEPS], period[FEW_MAX_STEPS];
} FewJob;

/* Values of a binary step's operand for output elements [b, b + n) into buf. */
static void few_gather(const FewJob *j, int k, int64_t b, int64_t n, float *buf) {
  CpuBroadcastIter it;
  int64_t pos, off[2], len;
  const CpuBroadcast *p = &j->plan[k];
  int64_t step = p->strides[1][p->rank - 1];
  cpu_broadcast_iter_init(&it, p, b, b + n);
  while ((len = cpu_broadcast_iter_next(&it, &pos, off)) > 0) {
    float *d = buf + (pos - b);
    if (step)
      memcpy(d, j->op[k] + off[1], (size_t)len * sizeof *d);
    else
      for (int64_t i = 0; i < len; i++) d[i] = j->op[k][off[1]];
  }
}

static void few_range(void *arg, int64_t begin, int64_t end) {
  const FewJob *j = arg;
  const FewState *s = j->s;
  float ping[FEW_CHUNK], pong[FEW_CHUNK], opv[FEW_CHUNK];
  /* a periodic operand's chunk stays valid for the next chunk of the same segment and phase */
  float kept[FEW_CACHED][FEW_CHUNK];
  int64_t kept_seg[FEW_CACHED], kept_phase[FEW_CACHED], kept_n[FEW_CACHED];
  for (int c = 0; c < FEW_CACHED; c++) kept_seg[c] = -1;
  for (int64_t b = begin, n; b < end; b += n) {
    n = end - b < FEW_CHUNK ? end - b : FEW_CHUNK;
    const float *src = j->x + b;
    if (j->parts > 1) {
      int64_t o = b / j->inner_total, r = b % j->inner_total;
      int k = 0;
      while (r >= j->at[k] + j->inner[k]) k++; /* parts of no elements are passed over */
      if (n > j->at[k] + j->inner[k] - r) n = j->at[k] + j->inner[k] - r;
      src = j->part[k] + o * j->inner[k] + (r - j->at[k]);
    }
    for (int k = 0; k < s->n; k++) {
      /* the rows never run in place (restrict): chunks go back and forth, the last to y
       * (unless y is x's memory, buffer reuse, and this is the first: then copied) */
      float *dst = k == s->n - 1 && src != j->y + b ? j->y + b : src == ping ? pong : ping;
      const FewStep *st = &s->s[k];
      if (st->u) {
        st->u->row[FLOE_F32](dst, src, n, st->alpha);
      } else {
        const float *v = j->op[k];
        int mode = ROW_VV;
        int c = k < FEW_CACHED && j->seg[k] ? k : -1;
        int64_t seg = c >= 0 ? b / j->seg[k] : -1, phase = c >= 0 ? b % j->period[k] : 0;
        bool inside = c >= 0 && b + n <= (seg + 1) * j->seg[k];
        if (j->scalar[k]) {
          mode = st->left ? ROW_SV : ROW_VS;
        } else if (inside && kept_seg[c] == seg && kept_phase[c] == phase && kept_n[c] >= n) {
          v = kept[c];
        } else if (inside) {
          few_gather(j, k, b, n, kept[c]);
          kept_seg[c] = seg, kept_phase[c] = phase, kept_n[c] = n;
          v = kept[c];
        } else {
          few_gather(j, k, b, n, opv);
          v = opv;
        }
        if (st->left)
          st->b->row[FLOE_F32](dst, v, src, n, mode);
        else
          st->b->row[FLOE_F32](dst, src, v, n, mode);
      }
      src = dst;
    }
    if (src != j->y + b) memcpy(j->y + b, src, (size_t)n * sizeof *src);
  }
}

/* x's parts (s->parts > 1) into j: their shapes joined along the axis into dims (rank
 * rank), checked. */
static floe_code few_parts(const FewState *s, FloeKernelContext *ctx, FewJob *j, int rank,
                           int64_t *dims) {
  char a[CPU_SHAPE_STR_MAX], b[CPU_SHAPE_STR_MAX];
  int64_t axis = s->axis < 0 ? s->axis + rank : s->axis;
  if (rank == 0 || axis < 0 || axis >= rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "_FusedElementwise: concat_axis %lld is outside x's %d dims",
                                   (long long)s->axis, rank);
  j->parts = s->parts;
  j->part = cpu_host->alloc((size_t)s->parts * sizeof *j->part);
  j->inner = cpu_host->alloc(2 * (size_t)s->parts * sizeof *j->inner);
  if (!j->part || !j->inner) return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory");
  j->at = j->inner + s->parts;
  dims[axis] = 0;
  for (int k = 0; k < s->parts; k++) {
    const FloeTensor *p = cpu_host->ctx_input(ctx, k);
    int rp = cpu_host->tensor_rank(p);
    const int64_t *dp = cpu_host->tensor_dims(p);
    bool fits = cpu_host->tensor_dtype(p) == FLOE_F32 && rp == rank;
    for (int d = 0; d < rank && fits; d++) fits = d == axis || dp[d] == dims[d];
    if (!fits)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "_FusedElementwise: part %d of x (%s %s) does not join part 0 (%s) along axis %lld: "
          "parts must be f32 of one rank, equal outside that axis",
          k, cpu_host->dtype_name(cpu_host->tensor_dtype(p)), cpu_shape_str(a, sizeof a, rp, dp),
          cpu_shape_str(b, sizeof b, rank, cpu_host->tensor_dims(cpu_host->ctx_input(ctx, 0))),
          (long long)axis);
    j->part[k] = cpu_host->tensor_data(p);
    j->inner[k] = 1;
    for (int d = (int)axis; d < rank; d++) j->inner[k] *= dp[d];
    j->at[k] = j->inner_total;
    j->inner_total += j->inner[k];
    dims[axis] += dp[axis];
  }
  return FLOE_OK;
}

static floe_code few_compute(void *state, FloeKernelContext *ctx) {
  const FewState *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  int64_t dims[FLOE_MAX_DIMS];
  memcpy(dims, cpu_host->tensor_dims(x), (size_t)rank * sizeof *dims);
  char a[CPU_SHAPE_STR_MAX], b[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_dtype(x) != FLOE_F32)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "_FusedElementwise runs on f32 here, x is %s",
                                   cpu_host->dtype_name(cpu_host->tensor_dtype(x)));
  FewJob *j = cpu_host->alloc(sizeof *j);
  if (!j) return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory");
  memset(j, 0, sizeof *j);
  j->s = s;
  j->x = cpu_host->tensor_data(x);
  int64_t cost = 1;
  floe_code rc = s->parts > 1 ? few_parts(s, ctx, j, rank, dims) : FLOE_OK;
  for (int k = 0; k < s->n && rc == FLOE_OK; k++) {
    cost += s->s[k].u ? s->s[k].u->cost : s->s[k].b->cost;
    if (s->s[k].u) continue;
    const FloeTensor *y = cpu_host->ctx_input(ctx, s->s[k].input);
    int ry = cpu_host->tensor_rank(y), br;
    const int64_t *dy = cpu_host->tensor_dims(y);
    int64_t bd[FLOE_MAX_DIMS];
    const int ranks[2] = {rank, ry};
    const int64_t *const ds[2] = {dims, dy};
    if (cpu_host->tensor_dtype(y) != FLOE_F32 || cpu_broadcast_shape(2, ranks, ds, &br, bd) ||
        br != rank || memcmp(bd, dims, (size_t)rank * sizeof *bd) != 0) {
      rc = cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "_FusedElementwise: operand %d (%s %s) must be f32 and broadcast to x's shape %s",
          s->s[k].input - 1, cpu_host->dtype_name(cpu_host->tensor_dtype(y)),
          cpu_shape_str(a, sizeof a, ry, dy), cpu_shape_str(b, sizeof b, rank, dims));
      break;
    }
    j->op[k] = cpu_host->tensor_data(y);
    j->scalar[k] = cpu_host->tensor_num_elements(y) == 1;
    if (j->scalar[k]) continue;
    cpu_broadcast_plan(&j->plan[k], 2, ranks, ds, rank, dims);
    if (tiled_operand(&j->plan[k], FLOE_F32, FLOE_F32, sizeof(float)) == 1) {
      const CpuBroadcast *p = &j->plan[k];
      j->period[k] = p->dims[p->rank - 1];
      j->seg[k] = p->dims[p->rank - 2] * j->period[k];
    }
  }
  FloeTensor *out = NULL;
  /* a joined x is new memory: nothing to write over */
  if (rc == FLOE_OK)
    rc = cpu_output_over(ctx, (const int[]){0}, j->parts > 1 ? 0 : 1, rank, dims, &out);
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  if (rc == FLOE_OK && n > 0) {
    j->y = cpu_host->tensor_data(out);
    if (s->n == 0 && j->parts <= 1 && j->y != j->x)
      memcpy(j->y, j->x, (size_t)n * sizeof *j->y);
    else
      cpu_parallel_elements(n, cost, few_range, j);
  }
  cpu_host->free(j->part);
  cpu_host->free(j->inner);
  cpu_host->free(j);
  return rc;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_elementwise(FloePluginRegistrar *reg) {
  const uint32_t numeric = FLOE_DTYPES_NUMERIC, flt = FLOE_DTYPES_FLOAT, all = FLOE_DTYPES_ALL;
  const struct {
    const char *op;
    const BinaryOp *k;
    uint32_t types; /* of attribute T; 0: the op has none (bool only) */
  } binaries[] = {
      {"Add", &op_add, numeric},          {"Sub", &op_sub, numeric},
      {"Mul", &op_mul, numeric},          {"Div", &op_div, numeric},
      {"Pow", &op_pow, numeric},          {"Maximum", &op_max, numeric},
      {"Minimum", &op_min, numeric},      {"Equal", &op_eq, all},
      {"NotEqual", &op_ne, all},          {"Less", &op_lt, numeric},
      {"LessEqual", &op_le, numeric},     {"Greater", &op_gt, numeric},
      {"GreaterEqual", &op_ge, numeric},  {"LogicalAnd", &op_and, 0},
      {"LogicalOr", &op_or, 0},
      {"FloorMod", &op_floormod, numeric}, {"TruncateMod", &op_truncmod, numeric},
      {"LeftShift", &op_shl, FLOE_DTYPES_INT}, {"RightShift", &op_shr, FLOE_DTYPES_INT},
  };
  const struct {
    const char *op;
    const UnaryState *k;
    uint32_t types;
    int has_attr; /* parsed per node by unary_attr_create */
  } unaries[] = {
      {"Neg", &st_neg, numeric, 0},         {"Abs", &st_abs, numeric, 0},
      {"Square", &st_square, numeric, 0},   {"Exp", &st_exp, flt, 0},
      {"Log", &st_log, flt, 0},             {"Sqrt", &st_sqrt, flt, 0},
      {"Rsqrt", &st_rsqrt, flt, 0},         {"Relu", &st_relu, numeric, 0},
      {"Relu6", &st_relu6, numeric, 0},     {"LeakyRelu", &st_leaky_relu, flt, 1},
      {"Elu", &st_elu, flt, 1},             {"Gelu", &st_gelu, flt, 1},
      {"Sigmoid", &st_sigmoid, flt, 0},     {"Tanh", &st_tanh, flt, 0},
      {"Softplus", &st_softplus, flt, 0},   {"LogicalNot", &st_not, 0, 0},
      {"Sign", &st_sign, numeric, 0},       {"Floor", &st_floor, flt, 0},
      {"Sin", &st_sin, flt, 0},             {"Cos", &st_cos, flt, 0},
      {"Ceil", &st_ceil, flt, 0},           {"Round", &st_round, flt, 0},
      {"Erf", &st_erf, flt, 0},             {"Tan", &st_tan, flt, 0},
      {"Asin", &st_asin, flt, 0},           {"Acos", &st_acos, flt, 0},
      {"Atan", &st_atan, flt, 0},           {"Sinh", &st_sinh, flt, 0},
      {"Cosh", &st_cosh, flt, 0},           {"Asinh", &st_asinh, flt, 0},
      {"Acosh", &st_acosh, flt, 0},         {"Atanh", &st_atanh, flt, 0},
      {"IsNan", &st_isnan, flt, 0},         {"IsInf", &st_isinf, flt, 1},
  };
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof binaries / sizeof binaries[0]; i++)
    rc = cpu_add_kernel(reg, binaries[i].op, binaries[i].types ? "T" : NULL, binaries[i].types,
                        0, binary_compute, NULL, NULL, (void *)binaries[i].k);
  for (size_t i = 0; rc == FLOE_OK && i < sizeof unaries / sizeof unaries[0]; i++)
    rc = cpu_add_kernel(reg, unaries[i].op, unaries[i].types ? "T" : NULL, unaries[i].types, 0,
                        unary_compute, unaries[i].has_attr ? unary_attr_create : NULL,
                        unaries[i].has_attr ? unary_attr_destroy : NULL, (void *)unaries[i].k);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "_FusedElementwise", "T", FLOE_DTYPE_BIT(FLOE_F32), 0, few_compute,
                        few_create, unary_attr_destroy, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "Select", "T", all, 0, select_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "Cast", "SrcT", all, 0, cast_compute, NULL, NULL, NULL);
  return rc;
}
