/* SPDX-License-Identifier: Apache-2.0 */
/* reduce.c - reductions of the CPU plugin: Sum, Mean, Max, Min, Prod, ArgMax, ArgMin.
 *
 * Every reduction runs on x viewed as blocks [O, R, I] (reduce the middle). Axis sets that
 * are contiguous once size-1 dims are dropped map onto that view directly; other sets are
 * first gathered into it. Float sums add blocks of up to 2048 elements in many f32 lanes
 * and the block sums in f64 (products: f64 throughout), so sums of millions of elements stay
 * exact to the output's precision at f32 speed. Big inputs are split over outer blocks and,
 * when there are too few of those, over parts of R whose partial results are combined last.
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

#define RED_CHUNK 2048      /* inner elements (or rows) per accumulator block */
#define RED_LANE_BYTES 128  /* independent accumulators of a row loop */
#define RED_ROW_BLOCK 2048  /* row elements summed in the block type (see DEF_REDUCER) */
#define RED_COL_BLOCK 64    /* rows summed in the block type (see DEF_REDUCER) */
#define RED_PART_MIN 16384  /* fewest input elements in one part of a split reduction */
#define RED_NARROW 64       /* inner sizes below this take red_narrow_cols */

enum { RED_SUM, RED_MEAN, RED_PROD, RED_MAX, RED_MIN, RED_NUM };

/* "[2,3,4]" for error messages, in a buffer that lives until the end of the enclosing block. */
#define SHAPE(rank, dims) \
  cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX, (rank), (dims))

/* ------------------------------------------------------------------------------------ */
/* Value reductions, one family of functions per (op, dtype). A is the accumulator type. */

typedef struct Reducer {
  void (*init)(void *acc, int64_t n);
  /* acc[k] op= reduce(x[k*ld + 0..R)) for k < n */
  void (*rows)(const void *x, int64_t R, int64_t n, int64_t ld, void *acc);
  /* acc[i] op= x[r*ld + i] for r < R, i < w */
  void (*cols)(const void *x, int64_t R, int64_t w, int64_t ld, void *acc);
  void (*combine)(void *dst, const void *src, int64_t n);
  /* out[i] = acc[i], divided by count for Mean */
  void (*store)(const void *acc, int64_t n, void *out, int64_t count);
  size_t acc_size;
} Reducer;

#define LD_f32(v) (v)
#define LD_f64(v) (v)
#define LD_f16(v) cpu_f16_to_f32(v)
#define LD_bf16(v) cpu_bf16_to_f32(v)
#define ST_f32(a) ((float)(a))
#define ST_f64(a) ((double)(a))
#define ST_f16(a) cpu_f32_to_f16((float)(a))
#define ST_bf16(a) cpu_f32_to_bf16((float)(a))
#define ST_i8(a) ((int8_t)(a))
#define ST_u8(a) ((uint8_t)(a))
#define ST_i32(a) ((int32_t)(a))
#define ST_i64(a) ((int64_t)(a))
#define LD_INT(v) (v)
#define MM_f32 float /* Max/Min accumulate in the input type, halves in f32 */
#define MM_f64 double
#define MM_f16 float
#define MM_bf16 float
#define SB_f32 float /* block type of float sums */
#define SB_f64 double
#define SB_f16 float
#define SB_bf16 float
#define LOW_i8 INT8_MIN
#define LOW_u8 0
#define LOW_i32 INT32_MIN
#define LOW_i64 INT64_MIN
#define HIGH_i8 INT8_MAX
#define HIGH_u8 UINT8_MAX
#define HIGH_i32 INT32_MAX
#define HIGH_i64 INT64_MAX

#define C_ADD(a, b) ((a) + (b))
#define C_MUL(a, b) ((a) * (b))
/* Integer sums and products wrap like the input type (unsigned arithmetic: no UB). */
#define C_IADD(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define C_IMUL(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
/* Float Max/Min propagate NaN; branch-free so the lane loops vectorise. */
#define C_FMAX(a, b) (((b) > (a) || (b) != (b)) ? (b) : (a))
#define C_FMIN(a, b) (((b) < (a) || (b) != (b)) ? (b) : (a))
#define C_IMAX(a, b) ((b) > (a) ? (b) : (a))
#define C_IMIN(a, b) ((b) < (a) ? (b) : (a))

/* A accumulates across blocks (and in the acc arrays); B accumulates within a block of
 * RED_ROW_BLOCK elements of a row or RED_COL_BLOCK rows of columns. f32 sums use B = f32 in
 * many lanes (fast, and short enough to stay accurate) and A = f64 (exact across blocks). */
#define DEF_REDUCER(NAME, T, A, B, LOAD, STORE, IDENT, COMB)                                       \
  enum { NAME##_lanes = RED_LANE_BYTES / sizeof(B) };                                              \
  static void NAME##_init(void *accv, int64_t n) {                                                 \
    A *acc = accv;                                                                                 \
    for (int64_t i = 0; i < n; i++) acc[i] = IDENT;                                                \
  }                                                                                                \
  CPU_HOT static void NAME##_rows(const void *xv, int64_t R, int64_t n, int64_t ld,                \
                                  void *accv) {                                                    \
    const T *x = xv;                                                                               \
    A *acc = accv;                                                                                 \
    for (int64_t k = 0; k < n; k++) {                                                              \
      const T *p = x + k * ld;                                                                     \
      A s = IDENT;                                                                                 \
      if (R < NAME##_lanes) {                                                                      \
        for (int64_t r = 0; r < R; r++) s = COMB(s, LOAD(p[r]));                                   \
        acc[k] = COMB(acc[k], s);                                                                  \
        continue;                                                                                  \
      }                                                                                            \
      for (int64_t r0 = 0; r0 < R; r0 += RED_ROW_BLOCK) {                                          \
        int64_t r1 = R - r0 < RED_ROW_BLOCK ? R : r0 + RED_ROW_BLOCK, r = r0;                      \
        B l[NAME##_lanes];                                                                         \
        for (int j = 0; j < NAME##_lanes; j++) l[j] = IDENT;                                       \
        for (; r + NAME##_lanes <= r1; r += NAME##_lanes)                                          \
          for (int j = 0; j < NAME##_lanes; j++) l[j] = COMB(l[j], LOAD(p[r + j]));                \
        for (; r < r1; r++) l[0] = COMB(l[0], LOAD(p[r]));                                         \
        for (int h = NAME##_lanes / 2; h > 0; h /= 2) /* pairwise over the lanes */                \
          for (int j = 0; j < h; j++) l[j] = COMB(l[j], l[j + h]);                                 \
        s = COMB(s, (A)l[0]);                                                                      \
      }                                                                                            \
      acc[k] = COMB(acc[k], s);                                                                    \
    }                                                                                              \
  }                                                                                                \
  CPU_HOT static void NAME##_cols(const void *xv, int64_t R, int64_t w, int64_t ld,                \
                                  void *accv) {                                                    \
    const T *x = xv;                                                                               \
    A *restrict acc = accv;                                                                        \
    if (sizeof(A) == sizeof(B)) { /* one type: no blocks needed */                                 \
      for (int64_t r = 0; r < R; r++) {                                                            \
        const T *restrict p = x + r * ld;                                                          \
        for (int64_t i = 0; i < w; i++) acc[i] = COMB(acc[i], LOAD(p[i]));                         \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    B t[RED_CHUNK];                                                                                \
    for (int64_t r0 = 0; r0 < R; r0 += RED_COL_BLOCK) {                                            \
      int64_t r1 = R - r0 < RED_COL_BLOCK ? R : r0 + RED_COL_BLOCK;                                \
      for (int64_t i = 0; i < w; i++) t[i] = IDENT;                                                \
      for (int64_t r = r0; r < r1; r++) {                                                          \
        const T *restrict p = x + r * ld;                                                          \
        for (int64_t i = 0; i < w; i++) t[i] = COMB(t[i], LOAD(p[i]));                             \
      }                                                                                            \
      for (int64_t i = 0; i < w; i++) acc[i] = COMB(acc[i], (A)t[i]);                              \
    }                                                                                              \
  }                                                                                                \
  static void NAME##_combine(void *dv, const void *sv, int64_t n) {                                \
    A *restrict d = dv;                                                                            \
    const A *restrict s = sv;                                                                      \
    for (int64_t i = 0; i < n; i++) d[i] = COMB(d[i], s[i]);                                       \
  }                                                                                                \
  static void NAME##_store(const void *accv, int64_t n, void *outv, int64_t count) {               \
    const A *acc = accv;                                                                           \
    T *out = outv;                                                                                 \
    (void)count;                                                                                   \
    for (int64_t i = 0; i < n; i++) out[i] = STORE(acc[i]);                                        \
  }

/* Mean: the sum's functions with a dividing store (0/0 gives NaN for floats). */
#define DEF_MEAN_STORE(NAME, T, A, STORE)                                                          \
  static void NAME##_store_mean(const void *accv, int64_t n, void *outv, int64_t count) {          \
    const A *acc = accv;                                                                           \
    T *out = outv;                                                                                 \
    for (int64_t i = 0; i < n; i++) out[i] = STORE(acc[i] / (A)count);                             \
  }

#define FLOAT_TYPES(X) X(F32, f32, float) X(F64, f64, double) X(F16, f16, uint16_t)                \
  X(BF16, bf16, uint16_t)
#define INT_TYPES(X) X(I8, i8, int8_t) X(U8, u8, uint8_t) X(I32, i32, int32_t) X(I64, i64, int64_t)
#define ALL_TYPES(X) FLOAT_TYPES(X) INT_TYPES(X)

#define DEF_FLOAT_REDUCERS(E, N, T)                                                                \
  DEF_REDUCER(sum_##N, T, double, SB_##N, LD_##N, ST_##N, 0.0, C_ADD)                              \
  DEF_MEAN_STORE(sum_##N, T, double, ST_##N)                                                       \
  DEF_REDUCER(prod_##N, T, double, double, LD_##N, ST_##N, 1.0, C_MUL)                             \
  DEF_REDUCER(max_##N, T, MM_##N, MM_##N, LD_##N, ST_##N, -INFINITY, C_FMAX)                       \
  DEF_REDUCER(min_##N, T, MM_##N, MM_##N, LD_##N, ST_##N, INFINITY, C_FMIN)
#define DEF_INT_REDUCERS(E, N, T)                                                                  \
  DEF_REDUCER(sum_##N, T, int64_t, int64_t, LD_INT, ST_##N, 0, C_IADD)                             \
  DEF_MEAN_STORE(sum_##N, T, int64_t, ST_##N)                                                      \
  DEF_REDUCER(prod_##N, T, int64_t, int64_t, LD_INT, ST_##N, 1, C_IMUL)                            \
  DEF_REDUCER(max_##N, T, T, T, LD_INT, ST_##N, LOW_##N, C_IMAX)                                   \
  DEF_REDUCER(min_##N, T, T, T, LD_INT, ST_##N, HIGH_##N, C_IMIN)
FLOAT_TYPES(DEF_FLOAT_REDUCERS)
INT_TYPES(DEF_INT_REDUCERS)

#define RED_FNS(NAME, STORE, A)                                                                    \
  {NAME##_init, NAME##_rows, NAME##_cols, NAME##_combine, NAME##_##STORE, sizeof(A)}
#define SUM_ENTRY(E, N, T) [FLOE_##E] = RED_FNS(sum_##N, store, sum_acc_##N),
#define MEAN_ENTRY(E, N, T) [FLOE_##E] = RED_FNS(sum_##N, store_mean, sum_acc_##N),
#define PROD_ENTRY(E, N, T) [FLOE_##E] = RED_FNS(prod_##N, store, sum_acc_##N),
#define MAX_ENTRY(E, N, T) [FLOE_##E] = RED_FNS(max_##N, store, mm_acc_##N),
#define MIN_ENTRY(E, N, T) [FLOE_##E] = RED_FNS(min_##N, store, mm_acc_##N),
typedef double sum_acc_f32, sum_acc_f64, sum_acc_f16, sum_acc_bf16;
typedef int64_t sum_acc_i8, sum_acc_u8, sum_acc_i32, sum_acc_i64;
typedef float mm_acc_f32, mm_acc_f16, mm_acc_bf16;
typedef double mm_acc_f64;
typedef int8_t mm_acc_i8;
typedef uint8_t mm_acc_u8;
typedef int32_t mm_acc_i32;
typedef int64_t mm_acc_i64;

static const Reducer red_fns[RED_NUM][FLOE_DTYPE_LIMIT] = {
    [RED_SUM] = {ALL_TYPES(SUM_ENTRY)},   [RED_MEAN] = {ALL_TYPES(MEAN_ENTRY)},
    [RED_PROD] = {ALL_TYPES(PROD_ENTRY)}, [RED_MAX] = {ALL_TYPES(MAX_ENTRY)},
    [RED_MIN] = {ALL_TYPES(MIN_ENTRY)},
};

/* ------------------------------------------------------------------------------------ */
/* Arg reductions: index of the best element; ties keep the smallest index, and a NaN is
 * better than any number (the first NaN wins, as in NumPy). */

typedef struct ArgReducer {
  /* idx[k] = best r of x[k*ld + r], r < R, for k < n */
  void (*rows)(const void *x, int64_t R, int64_t n, int64_t ld, int64_t *idx);
  /* idx[i] = best r of x[r*ld + i], r < R, for i < w (w <= RED_CHUNK) */
  void (*cols)(const void *x, int64_t R, int64_t w, int64_t ld, int64_t *idx);
  /* the best of base[cand[p*cld] * stride] for p < P; cand increasing */
  int64_t (*pick)(const void *base, int64_t stride, const int64_t *cand, int64_t cld,
                  int64_t P);
} ArgReducer;

#define B_FMAX(v, b) ((v) > (b) || ((v) != (v) && (b) == (b)))
#define B_FMIN(v, b) ((v) < (b) || ((v) != (v) && (b) == (b)))
#define B_IMAX(v, b) ((v) > (b))
#define B_IMIN(v, b) ((v) < (b))

#define DEF_ARG(NAME, T, A, LOAD, BETTER)                                                          \
  static void NAME##_rows(const void *xv, int64_t R, int64_t n, int64_t ld, int64_t *idx) {        \
    const T *x = xv;                                                                               \
    for (int64_t k = 0; k < n; k++) {                                                              \
      const T *p = x + k * ld;                                                                     \
      A b = LOAD(p[0]);                                                                            \
      int64_t bi = 0;                                                                              \
      for (int64_t r = 1; r < R; r++) {                                                            \
        A v = LOAD(p[r]);                                                                          \
        if (BETTER(v, b)) b = v, bi = r;                                                           \
      }                                                                                            \
      idx[k] = bi;                                                                                 \
    }                                                                                              \
  }                                                                                                \
  static void NAME##_cols(const void *xv, int64_t R, int64_t w, int64_t ld, int64_t *idx) {        \
    const T *x = xv;                                                                               \
    A best[RED_CHUNK];                                                                             \
    for (int64_t i = 0; i < w; i++) best[i] = LOAD(x[i]), idx[i] = 0;                              \
    for (int64_t r = 1; r < R; r++) {                                                              \
      const T *p = x + r * ld;                                                                     \
      for (int64_t i = 0; i < w; i++) {                                                            \
        A v = LOAD(p[i]);                                                                          \
        if (BETTER(v, best[i])) best[i] = v, idx[i] = r;                                           \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  static int64_t NAME##_pick(const void *basev, int64_t stride, const int64_t *cand,               \
                             int64_t cld, int64_t P) {                                             \
    const T *base = basev;                                                                         \
    int64_t bi = cand[0];                                                                          \
    A b = LOAD(base[bi * stride]);                                                                 \
    for (int64_t p = 1; p < P; p++) {                                                              \
      A v = LOAD(base[cand[p * cld] * stride]);                                                    \
      if (BETTER(v, b)) b = v, bi = cand[p * cld];                                                 \
    }                                                                                              \
    return bi;                                                                                     \
  }

#define DEF_FLOAT_ARGS(E, N, T)                                                                    \
  DEF_ARG(argmax_##N, T, MM_##N, LD_##N, B_FMAX) DEF_ARG(argmin_##N, T, MM_##N, LD_##N, B_FMIN)
#define DEF_INT_ARGS(E, N, T)                                                                      \
  DEF_ARG(argmax_##N, T, T, LD_INT, B_IMAX) DEF_ARG(argmin_##N, T, T, LD_INT, B_IMIN)
FLOAT_TYPES(DEF_FLOAT_ARGS)
INT_TYPES(DEF_INT_ARGS)

#define ARGMAX_ENTRY(E, N, T) \
  [FLOE_##E] = {argmax_##N##_rows, argmax_##N##_cols, argmax_##N##_pick},
#define ARGMIN_ENTRY(E, N, T) \
  [FLOE_##E] = {argmin_##N##_rows, argmin_##N##_cols, argmin_##N##_pick},
static const ArgReducer argmax_fns[FLOE_DTYPE_LIMIT] = {ALL_TYPES(ARGMAX_ENTRY)};
static const ArgReducer argmin_fns[FLOE_DTYPE_LIMIT] = {ALL_TYPES(ARGMIN_ENTRY)};

/* ------------------------------------------------------------------------------------ */
/* Work plan shared by both kinds: units are (o, inner chunk c, part p), p fastest. */

typedef struct RedPlan {
  int64_t O, R, I; /* x viewed as [O, R, I], reducing R */
  int64_t W, C;    /* I cut into C chunks of W elements (I == 1: W = C = 1) */
  int64_t P, Rp;   /* R cut into P parts of Rp elements (the last may be shorter) */
  int64_t units;   /* work items; whole rows when I == 1 and P == 1 */
} RedPlan;

static RedPlan red_plan(int64_t O, int64_t R, int64_t I) {
  RedPlan pl = {.O = O, .R = R, .I = I, .P = 1, .Rp = R};
  pl.W = I < RED_CHUNK ? I : RED_CHUNK;
  pl.C = (I + pl.W - 1) / pl.W;
  int64_t nt = O * R * I >= CPU_PARALLEL_MIN_COST ? cpu_host->num_threads() : 1;
  int64_t blocks = O * pl.C;
  if (nt > 1 && blocks < 4 * nt) {
    /* Too few blocks to keep the pool busy: cut R too. */
    int64_t want = (4 * nt + blocks - 1) / blocks;
    int64_t most = R * pl.W / RED_PART_MIN;
    pl.P = want < most ? want : most;
    if (pl.P < 1) pl.P = 1;
    pl.Rp = (R + pl.P - 1) / pl.P;
    pl.P = (R + pl.Rp - 1) / pl.Rp;
  }
  pl.units = (I == 1 && pl.P == 1) ? O : O * pl.C * pl.P;
  return pl;
}

typedef struct RedUnit {
  int64_t o, c, p, r0, r1, w;
} RedUnit;

static RedUnit red_unit(const RedPlan *pl, int64_t u) {
  RedUnit t;
  t.p = u % pl->P;
  t.c = (u / pl->P) % pl->C;
  t.o = u / (pl->P * pl->C);
  t.r0 = t.p * pl->Rp;
  t.r1 = t.r0 + pl->Rp < pl->R ? t.r0 + pl->Rp : pl->R;
  t.w = pl->I - t.c * pl->W < pl->W ? pl->I - t.c * pl->W : pl->W;
  return t;
}

static void red_run_plan(const RedPlan *pl, FloeParallelFn fn, void *job) {
  int64_t per_unit = (pl->I == 1 && pl->P == 1) ? pl->R : pl->Rp * pl->W;
  cpu_parallel_for(pl->units, per_unit, fn, job);
}

/* ------------------------------------------------------------------------------------ */
/* Value reduction driver. */

typedef struct RedJob {
  const Reducer *f;
  RedPlan pl;
  const char *x;
  char *out;
  size_t esz;
  int64_t count; /* divisor of Mean */
  char *partial; /* P > 1: [units][W] accumulators */
} RedJob;

/* acc[i] op= x[r*I + i] for r < R, i < I, with I narrow: reading k rows at a time as one
 * wide row of k*I elements keeps the inner loop long, then the k partial rows are folded.
 * k stays at most a quarter of R: the wide row's accumulators are set up and folded once per
 * call, which costs more than the data when R is not many times k (a blocked tensor's
 * spatial mean: 16 channels a row, a few hundred rows). */
static void red_narrow_cols(const Reducer *f, const char *x, int64_t R, int64_t I, size_t esz,
                            void *acc) {
  int64_t k = RED_CHUNK / I < R / 4 ? RED_CHUNK / I : R / 4;
  if (k < 2) {
    f->cols(x, R, I, I, acc);
    return;
  }
  int64_t full = R / k;
  double wide[RED_CHUNK]; /* accumulators are at most 8 bytes */
  f->init(wide, k * I);
  f->cols(x, full, k * I, k * I, wide);
  for (int64_t g = 1; g < k; g++) f->combine(wide, (char *)wide + (size_t)(g * I) * f->acc_size, I);
  f->cols(x + (size_t)(full * k * I) * esz, R - full * k, I, I, wide);
  f->combine(acc, wide, I);
}

static void red_units(void *arg, int64_t begin, int64_t end) {
  const RedJob *j = arg;
  const Reducer *f = j->f;
  const RedPlan *pl = &j->pl;
  double local[RED_CHUNK]; /* accumulators are at most 8 bytes */
  if (pl->I == 1 && pl->P == 1) {
    for (int64_t o = begin; o < end; o += RED_CHUNK) {
      int64_t n = end - o < RED_CHUNK ? end - o : RED_CHUNK;
      f->init(local, n);
      f->rows(j->x + (size_t)(o * pl->R) * j->esz, pl->R, n, pl->R, local);
      f->store(local, n, j->out + (size_t)o * j->esz, j->count);
    }
    return;
  }
  for (int64_t u = begin; u < end; u++) {
    RedUnit t = red_unit(pl, u);
    void *acc = pl->P == 1 ? (void *)local : j->partial + (size_t)(u * pl->W) * f->acc_size;
    const char *src = j->x + (size_t)((t.o * pl->R + t.r0) * pl->I + t.c * pl->W) * j->esz;
    f->init(acc, t.w);
    if (pl->I == 1)
      f->rows(src, t.r1 - t.r0, 1, 0, acc);
    else if (pl->I < RED_NARROW)
      red_narrow_cols(f, src, t.r1 - t.r0, pl->I, j->esz, acc);
    else
      f->cols(src, t.r1 - t.r0, t.w, pl->I, acc);
    if (pl->P == 1)
      f->store(acc, t.w, j->out + (size_t)(t.o * pl->I + t.c * pl->W) * j->esz, j->count);
  }
}

/* Reduce x[O, R, I] into out[O, I]. */
static floe_code red_blocks(FloeKernelContext *ctx, const Reducer *f, const void *x, void *out,
                            size_t esz, int64_t O, int64_t R, int64_t I, int64_t count) {
  RedJob j = {.f = f, .pl = red_plan(O, R, I), .x = x, .out = out, .esz = esz, .count = count};
  const RedPlan *pl = &j.pl;
  if (pl->P > 1) {
    void *tmp;
    size_t bytes = (size_t)(pl->units * pl->W) * f->acc_size;
    floe_code rc = cpu_host->ctx_allocate_temp(ctx, bytes, &tmp);
    if (rc != FLOE_OK)
      return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %lld partial sums",
                                     (long long)(pl->units * pl->W));
    j.partial = tmp;
  }
  red_run_plan(pl, red_units, &j);
  if (pl->P > 1) {
    size_t blk = (size_t)pl->W * f->acc_size;
    for (int64_t g = 0; g < pl->O * pl->C; g++) {
      RedUnit t = red_unit(pl, g * pl->P);
      char *base = j.partial + (size_t)(g * pl->P) * blk;
      for (int64_t p = 1; p < pl->P; p++) f->combine(base, base + (size_t)p * blk, t.w);
      f->store(base, t.w, j.out + (size_t)(t.o * pl->I + t.c * pl->W) * esz, count);
    }
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* General axis sets: gather x into [kept..., reduced..., last group] so that the reduced
 * dims form one block. The last group of the input stays innermost, so rows are copied
 * whole. */

typedef struct GatherJob {
  const char *src;
  char *dst;
  size_t esz;
  int nd;                           /* dims of the gathered layout */
  int64_t dims[CPU_SUM_MAX_DIMS];   /* their sizes */
  int64_t stride[CPU_SUM_MAX_DIMS]; /* their strides in src, in elements */
} GatherJob;

static void gather_rows(void *arg, int64_t begin, int64_t end) {
  const GatherJob *j = arg;
  int64_t run = j->dims[j->nd - 1], idx[CPU_SUM_MAX_DIMS], off = 0, rest = begin;
  for (int d = j->nd - 2; d >= 0; d--) {
    idx[d] = rest % j->dims[d];
    rest /= j->dims[d];
    off += idx[d] * j->stride[d];
  }
  size_t bytes = (size_t)run * j->esz;
  for (int64_t row = begin; row < end; row++) {
    memcpy(j->dst + (size_t)row * bytes, j->src + (size_t)off * j->esz, bytes);
    for (int d = j->nd - 2; d >= 0; d--) {
      off += j->stride[d];
      if (++idx[d] < j->dims[d]) break;
      off -= idx[d] * j->stride[d];
      idx[d] = 0;
    }
  }
}

/* ------------------------------------------------------------------------------------ */
/* Kernels. */

typedef struct ReduceOp {
  const char *name;
  int kind; /* RED_* */
} ReduceOp;

typedef struct ReduceState {
  const ReduceOp *op;
  int keep_dims;
} ReduceState;

static floe_code reduce_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  int keep = 0;
  floe_code rc = host->attr_bool(host->init_attrs(init), "keep_dims", &keep);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "keep_dims must be a bool");
  ReduceState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  s->op = user_data;
  s->keep_dims = keep != 0;
  *state = s;
  return FLOE_OK;
}

static void reduce_destroy(void *state) { cpu_host->free(state); }

static int64_t index_at(const FloeTensor *t, int64_t i) {
  const void *d = cpu_host->tensor_data(t);
  return cpu_host->tensor_dtype(t) == FLOE_I32 ? ((const int32_t *)d)[i] : ((const int64_t *)d)[i];
}

/* Mark the dims named by the axis input in red[]. */
static floe_code read_axes(FloeKernelContext *ctx, const FloeTensor *axes, int rank,
                           const int64_t *dims, int *red) {
  FloeDType adt = cpu_host->tensor_dtype(axes);
  int arank = cpu_host->tensor_rank(axes);
  if (adt != FLOE_I32 && adt != FLOE_I64)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "axis must be i32 or i64, got %s",
                                   cpu_host->dtype_name(adt));
  if (arank > 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis must be a scalar or 1-D, got shape %s",
                                   SHAPE(arank, cpu_host->tensor_dims(axes)));
  for (int d = 0; d < rank; d++) red[d] = 0;
  int64_t n = cpu_host->tensor_num_elements(axes);
  for (int64_t i = 0; i < n; i++) {
    int64_t a = index_at(axes, i);
    if (a < -rank || a >= rank)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %lld is out of range for input of shape %s "
                                     "(expected in [%d, %d))",
                                     (long long)a, SHAPE(rank, dims), -rank, rank);
    int d = (int)(a < 0 ? a + rank : a);
    if (red[d])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %lld is repeated (dim %d of input shape %s)",
                                     (long long)a, d, SHAPE(rank, dims));
    red[d] = 1;
  }
  return FLOE_OK;
}

static floe_code alloc_output(FloeKernelContext *ctx, int rank, const int64_t *dims,
                              void **data) {
  FloeTensor *t;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &t);
  if (rc != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate output of shape %s",
                                   SHAPE(rank, dims));
  *data = cpu_host->tensor_data(t);
  return FLOE_OK;
}

/* Reduce the dims marked in red[] of x (rank <= CPU_SUM_MAX_DIMS, all dims >= 1, more than
 * one element reduced) into out. */
static floe_code reduce_dims(FloeKernelContext *ctx, const Reducer *f, const void *x, void *out,
                             size_t esz, int rank, const int64_t *dims, const int *red,
                             int64_t count) {
  /* Drop size-1 dims and merge neighbours with the same role into groups. */
  int ng = 0, gred[CPU_SUM_MAX_DIMS], nred = 0;
  int64_t gsize[CPU_SUM_MAX_DIMS];
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    if (ng > 0 && gred[ng - 1] == red[d]) {
      gsize[ng - 1] *= dims[d];
    } else {
      gsize[ng] = dims[d];
      gred[ng] = red[d];
      nred += red[d];
      ng++;
    }
  }
  int last_kept = !gred[ng - 1];
  int64_t O = 1, R = 1, I = last_kept ? gsize[ng - 1] : 1;
  for (int g = 0; g < ng - last_kept; g++) {
    if (gred[g])
      R *= gsize[g];
    else
      O *= gsize[g];
  }
  if (nred == 1) return red_blocks(ctx, f, x, out, esz, O, R, I, count);

  GatherJob gj = {.src = x, .esz = esz};
  int64_t stride[CPU_SUM_MAX_DIMS], s = 1;
  for (int g = ng - 1; g >= 0; g--) stride[g] = s, s *= gsize[g];
  for (int pass = 0; pass < 2; pass++) /* kept groups, then reduced ones */
    for (int g = 0; g < ng - last_kept; g++)
      if (gred[g] == pass) gj.dims[gj.nd] = gsize[g], gj.stride[gj.nd++] = stride[g];
  if (last_kept) gj.dims[gj.nd] = gsize[ng - 1], gj.stride[gj.nd++] = 1;
  void *tmp;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)s * esz, &tmp);
  if (rc != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, rc, "cannot allocate a %lld-element copy of shape %s",
                                   (long long)s, SHAPE(rank, dims));
  gj.dst = tmp;
  cpu_parallel_for(s / gj.dims[gj.nd - 1], gj.dims[gj.nd - 1], gather_rows, &gj);
  return red_blocks(ctx, f, tmp, out, esz, O, R, I, count);
}

/* The result of reducing nothing into each of on outputs: init then store (count 0). */
static void store_empty(const Reducer *f, void *out, int64_t on, size_t esz) {
  double acc[RED_CHUNK];
  for (int64_t i = 0; i < on; i += RED_CHUNK) {
    int64_t n = on - i < RED_CHUNK ? on - i : RED_CHUNK;
    f->init(acc, n);
    f->store(acc, n, (char *)out + (size_t)i * esz, 0);
  }
}

static floe_code reduce_compute(void *state, FloeKernelContext *ctx) {
  const ReduceState *st = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(xt);
  int rank = cpu_host->tensor_rank(xt);
  const int64_t *dims = cpu_host->tensor_dims(xt);
  int red[FLOE_MAX_DIMS];
  floe_code rc = read_axes(ctx, cpu_host->ctx_input(ctx, 1), rank, dims, red);
  if (rc != FLOE_OK) return rc;

  int64_t odims[FLOE_MAX_DIMS], on = 1, rn = 1;
  int orank = 0;
  for (int d = 0; d < rank; d++) {
    if (red[d]) {
      rn *= dims[d];
      if (st->keep_dims) odims[orank++] = 1;
    } else {
      on *= dims[d];
      odims[orank++] = dims[d];
    }
  }
  /* Nothing reduced (no axes, or only size-1 dims): a view of the input. */
  if (rn == 1) return cpu_host->ctx_forward_input(ctx, 0, 0, orank, odims);

  int kind = st->op->kind;
  int is_float = (FLOE_DTYPE_BIT(dt) & FLOE_DTYPES_FLOAT) != 0;
  if (rn == 0 && on > 0 && (kind == RED_MAX || kind == RED_MIN || (kind == RED_MEAN && !is_float)))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s of an empty set: input shape %s has no elements along "
                                   "the reduced axes%s",
                                   st->op->name, SHAPE(rank, dims),
                                   kind == RED_MEAN ? " (an integer mean has no NaN)" : "");
  void *out;
  if ((rc = alloc_output(ctx, orank, odims, &out)) != FLOE_OK) return rc;
  if (on == 0) return FLOE_OK;

  const Reducer *f = &red_fns[kind][dt];
  size_t esz = cpu_host->dtype_size(dt);
  if (rn == 0) { /* Sum 0, Prod 1, Mean 0/0 = NaN */
    store_empty(f, out, on, esz);
    return FLOE_OK;
  }
  return reduce_dims(ctx, f, cpu_host->tensor_data(xt), out, esz, rank, dims, red, rn);
}

floe_code cpu_sum_dims(FloeKernelContext *ctx, FloeDType dt, const void *x, void *out, int rank,
                       const int64_t *dims, const int *red) {
  const Reducer *f = &red_fns[RED_SUM][dt];
  size_t esz = cpu_host->dtype_size(dt);
  int64_t on = 1, rn = 1;
  for (int d = 0; d < rank; d++) {
    if (red[d])
      rn *= dims[d];
    else
      on *= dims[d];
  }
  if (on == 0) return FLOE_OK;
  if (rn == 0) {
    store_empty(f, out, on, esz);
    return FLOE_OK;
  }
  if (rn == 1) { /* only size-1 dims reduced: the same elements */
    memcpy(out, x, (size_t)on * esz);
    return FLOE_OK;
  }
  return reduce_dims(ctx, f, x, out, esz, rank, dims, red, rn);
}

/* ------------------------------------------------------------------------------------ */
/* ArgMax / ArgMin. */

typedef struct ArgJob {
  const ArgReducer *f;
  RedPlan pl;
  const char *x;
  void *out;
  int out32;      /* output is i32 (else i64) */
  size_t esz;
  int64_t *partial; /* P > 1: [units][W] candidate indices */
} ArgJob;

static void arg_write(const ArgJob *j, int64_t at, const int64_t *idx, int64_t n) {
  if (j->out32)
    for (int64_t i = 0; i < n; i++) ((int32_t *)j->out)[at + i] = (int32_t)idx[i];
  else
    memcpy((int64_t *)j->out + at, idx, (size_t)n * sizeof(int64_t));
}

static void arg_units(void *arg, int64_t begin, int64_t end) {
  const ArgJob *j = arg;
  const RedPlan *pl = &j->pl;
  int64_t idx[RED_CHUNK];
  if (pl->I == 1 && pl->P == 1) {
    for (int64_t o = begin; o < end; o += RED_CHUNK) {
      int64_t n = end - o < RED_CHUNK ? end - o : RED_CHUNK;
      j->f->rows(j->x + (size_t)(o * pl->R) * j->esz, pl->R, n, pl->R, idx);
      arg_write(j, o, idx, n);
    }
    return;
  }
  for (int64_t u = begin; u < end; u++) {
    RedUnit t = red_unit(pl, u);
    const char *src = j->x + (size_t)((t.o * pl->R + t.r0) * pl->I + t.c * pl->W) * j->esz;
    if (pl->I == 1)
      j->f->rows(src, t.r1 - t.r0, 1, 0, idx);
    else
      j->f->cols(src, t.r1 - t.r0, t.w, pl->I, idx);
    if (pl->P == 1) {
      arg_write(j, t.o * pl->I + t.c * pl->W, idx, t.w);
    } else {
      for (int64_t i = 0; i < t.w; i++) j->partial[u * pl->W + i] = idx[i] + t.r0;
    }
  }
}

static floe_code arg_compute(void *state, FloeKernelContext *ctx) {
  const ReduceOp *op = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0), *dimt = cpu_host->ctx_input(ctx, 1);
  FloeDType dt = cpu_host->tensor_dtype(xt), ddt = cpu_host->tensor_dtype(dimt);
  int rank = cpu_host->tensor_rank(xt);
  const int64_t *dims = cpu_host->tensor_dims(xt);
  if ((ddt != FLOE_I32 && ddt != FLOE_I64) || cpu_host->tensor_rank(dimt) != 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dimension must be an i32 or i64 scalar, got %s of shape %s",
                                   cpu_host->dtype_name(ddt),
                                   SHAPE(cpu_host->tensor_rank(dimt),
                                             cpu_host->tensor_dims(dimt)));
  int64_t a = index_at(dimt, 0);
  if (a < -rank || a >= rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dimension %lld is out of range for input of shape %s "
                                   "(expected in [%d, %d))",
                                   (long long)a, SHAPE(rank, dims), -rank, rank);
  int axis = (int)(a < 0 ? a + rank : a);
  int64_t O = 1, R = dims[axis], I = 1, odims[FLOE_MAX_DIMS];
  for (int d = 0; d < rank; d++) {
    if (d < axis) O *= dims[d], odims[d] = dims[d];
    if (d > axis) I *= dims[d], odims[d - 1] = dims[d];
  }
  FloeDType odt = cpu_host->ctx_output_dtype(ctx, 0);
  if (R == 0 && O * I > 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s over an empty dimension: dim %d of input shape %s is 0",
                                   op->name, axis, SHAPE(rank, dims));
  if (odt == FLOE_I32 && R > INT32_MAX)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dim %d of input shape %s does not fit output_type i32",
                                   axis, SHAPE(rank, dims));
  ArgJob j = {.f = op->kind == RED_MAX ? &argmax_fns[dt] : &argmin_fns[dt],
              .pl = red_plan(O, R, I),
              .x = cpu_host->tensor_data(xt),
              .out32 = odt == FLOE_I32,
              .esz = cpu_host->dtype_size(dt)};
  floe_code rc = alloc_output(ctx, rank - 1, odims, &j.out);
  if (rc != FLOE_OK || O * I == 0) return rc;
  const RedPlan *pl = &j.pl;
  if (pl->P > 1) {
    void *tmp;
    rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(pl->units * pl->W) * sizeof(int64_t), &tmp);
    if (rc != FLOE_OK)
      return cpu_host->ctx_set_error(ctx, rc, "cannot allocate %lld partial indices",
                                     (long long)(pl->units * pl->W));
    j.partial = tmp;
  }
  red_run_plan(pl, arg_units, &j);
  if (pl->P > 1) {
    for (int64_t g = 0; g < O * pl->C; g++) {
      RedUnit t = red_unit(pl, g * pl->P);
      const int64_t *cand = j.partial + g * pl->P * pl->W;
      for (int64_t i = 0; i < t.w; i++) {
        int64_t col = t.c * pl->W + i;
        const char *base = j.x + (size_t)(t.o * R * I + col) * j.esz;
        int64_t best = j.f->pick(base, I, cand + i, pl->W, pl->P);
        arg_write(&j, t.o * I + col, &best, 1);
      }
    }
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

static const ReduceOp reduce_ops[] = {
    {"Sum", RED_SUM}, {"Mean", RED_MEAN}, {"Prod", RED_PROD}, {"Max", RED_MAX}, {"Min", RED_MIN},
};
static const ReduceOp arg_ops[] = {{"ArgMax", RED_MAX}, {"ArgMin", RED_MIN}};

floe_code cpu_register_reduce(FloePluginRegistrar *reg) {
  floe_code rc;
  for (size_t i = 0; i < sizeof reduce_ops / sizeof reduce_ops[0]; i++)
    if ((rc = cpu_add_kernel(reg, reduce_ops[i].name, "T", FLOE_DTYPES_NUMERIC, 0, reduce_compute,
                             reduce_create, reduce_destroy, (void *)&reduce_ops[i])) != FLOE_OK)
      return rc;
  for (size_t i = 0; i < sizeof arg_ops / sizeof arg_ops[0]; i++)
    if ((rc = cpu_add_kernel(reg, arg_ops[i].name, "T", FLOE_DTYPES_NUMERIC, 0, arg_compute, NULL,
                             NULL, (void *)&arg_ops[i])) != FLOE_OK)
      return rc;
  return FLOE_OK;
}
