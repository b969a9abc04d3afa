/* SPDX-License-Identifier: Apache-2.0 */
/* matmul.c - MatMul, BatchMatMul, BiasAdd and _FusedMatMul of the CPU plugin.
 *
 * f32 products go through oneDNN's dnnl_sgemm: Debian's OpenBLAS 0.3.21 takes AVX-512 CPUs
 * it does not know for "Prescott" and runs SSE3 kernels, 4 to 10 times slower (see
 * docs/benchmarks.md). Only tiny f32 products (M*N*K <= 4096) stay on OpenBLAS, whose call
 * costs less than oneDNN's. f64 uses OpenBLAS (dgemm, dgemv when one side is a vector);
 * f16 and bf16 are widened to f32 first. Transposed operands are passed as such, never
 * copied. A large f32 product is cut into blocks of rows or columns, each a single-threaded
 * dnnl_sgemm on the shared pool (gemm_f32); mid-sized ones use oneDNN's OpenMP threads
 * (OMP_NUM_THREADS), small ones the calling thread alone; f64 products use OpenBLAS's
 * threads. Batches of small products are spread over the pool, one product per thread. */
#include <cblas.h>
#include <dnnl.h>
#include <dnnl_debug.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "acts.h"
#include "cpu.h"
#include "cpu_util.h"

/* Below this M*N*K OpenBLAS 0.3.21 computes a GEMM on one thread (SMP threshold 65536 x 4). */
#define BLAS_SINGLE_THREAD_MNK (65536 * 4)
/* Up to this M*N*K an f32 product costs less through OpenBLAS (about 0.3 us a call) than
 * through dnnl_sgemm (about 0.7 us); from 32x32x32 on oneDNN's kernels win by 4x. */
#define SGEMM_TINY_MNK 4096
/* Below this M*N*K (2 MFLOP, some 15 us on one core) dnnl_sgemm runs on the calling thread
 * alone: an OpenMP team saves a few microseconds at best, and when the cores are busy (other
 * kernels running at the same time, each with its own team) every call waits a scheduler
 * time slice, milliseconds, for a team member to be scheduled. */
#define SGEMM_ONE_THREAD_MNK (1 << 20)

/* "[2,3,4]" for error messages. */
static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  return cpu_shape_str(buf, len, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}


/* ---------------------------------------------------------------------------------- */
/* One row-major product C[M,N] = op(A) op(B); A is stored [M,K] ([K,M] when ta), B is
 * stored [K,N] ([N,K] when tb). Dimensions were checked to fit a blasint. */

#define DEFINE_GEMM(name, T, gemm, gemv)                                                       \
  static void name(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T *a, const T *b, \
                   T *c) {                                                                    \
    if (m == 0 || n == 0) return;                                                              \
    if (k == 0) { /* BLAS rejects a zero leading dimension; the product is all zeros */        \
      memset(c, 0, (size_t)(m * n) * sizeof(T));                                               \
      return;                                                                                  \
    }                                                                                          \
    if (m == 1) { /* c[N] = op(B)^T a: GEMV avoids GEMM's packing */                           \
      if (tb)                                                                                  \
        gemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, 1, b, (blasint)k, a, 1, 0,   \
             c, 1);                                                                            \
      else                                                                                     \
        gemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, 1, b, (blasint)n, a, 1, 0, c,  \
             1);                                                                               \
    } else if (n == 1) { /* c[M] = op(A) b */                                                  \
      if (ta)                                                                                  \
        gemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)m, 1, a, (blasint)m, b, 1, 0, c,  \
             1);                                                                               \
      else                                                                                     \
        gemv(CblasRowMajor, CblasNoTrans, (blasint)m, (blasint)k, 1, a, (blasint)k, b, 1, 0,   \
             c, 1);                                                                            \
    } else {                                                                                   \
      gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,     \
           (blasint)m, (blasint)n, (blasint)k, 1, a, (blasint)(ta ? m : k), b,                 \
           (blasint)(tb ? k : n), 0, c, (blasint)n);                                           \
    }                                                                                          \
  }

DEFINE_GEMM(gemm_f32_blas, float, cblas_sgemm, cblas_sgemv)
DEFINE_GEMM(gemm_f64, double, cblas_dgemm, cblas_dgemv)

/* Keeps the first failure of concurrent products in *slot (dnnl_success until one fails). */
static void keep_first_failure(int *slot, dnnl_status_t st) {
  int ok = dnnl_success;
  if (st != dnnl_success)
    __atomic_compare_exchange_n(slot, &ok, (int)st, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* One dnnl_sgemm with explicit leading dimensions, C = op(A) op(B) + beta C; one_thread runs
 * it on the calling thread alone. */
static dnnl_status_t sgemm_ld(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                              int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                              int64_t ldc, bool one_thread) {
  int saved = one_thread ? cpu_omp_single() : 0;
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                beta, c, ldc);
  cpu_omp_restore(saved);
  return st;
}

/* A large product cut into blocks of C's rows or columns, each computed by a single-threaded
 * dnnl_sgemm on one thread of the shared pool. oneDNN's own threading splits a product with
 * few rows (a batch of 64) poorly (2 threads ran the CNN's dense layer 0.6-0.9x as fast as
 * one), and an OpenMP team per kernel fights the other kernels of the step for the cores;
 * pool blocks run wherever a thread is free, and on the caller alone when none is. */
typedef struct SplitGemm {
  bool ta, tb, by_rows;
  int64_t m, n, k, block; /* block: rows (by_rows) or columns per unit */
  const float *a, *b;
  float *c;
  int64_t lda, ldb, ldc;
  float beta;
  int status; /* first failing dnnl_status_t, else dnnl_success */
} SplitGemm;

static void split_gemm_range(void *arg, int64_t begin, int64_t end) {
  SplitGemm *g = arg;
  int64_t total = g->by_rows ? g->m : g->n;
  int64_t lo = begin * g->block, hi = end * g->block < total ? end * g->block : total;
  if (lo >= hi) return;
  const float *a = g->a, *b = g->b;
  float *c = g->c;
  int64_t m = g->m, n = g->n;
  if (g->by_rows) { /* rows lo..hi of C: rows of op(A) */
    a += g->ta ? lo : lo * g->lda;
    c += lo * g->ldc;
    m = hi - lo;
  } else { /* columns lo..hi of C: columns of op(B) */
    b += g->tb ? lo * g->ldb : lo;
    c += lo;
    n = hi - lo;
  }
  keep_first_failure(&g->status,
                     sgemm_ld(g->ta, g->tb, m, n, g->k, a, g->lda, b, g->ldb, g->beta, c, g->ldc,
                              true));
}

/* From this M*N*K (32 MFLOP, about 0.2 ms on one core) a product is cut into blocks over
 * the pool. */
#define SGEMM_SPLIT_MNK (1 << 24)
/* Blocks are at least this many rows or columns (whole register tiles, enough work each). */
#define SGEMM_SPLIT_MIN 64
/* A product of at most this many rows whose B has at least SGEMM_STREAM_KN elements (512 KiB
 * of f32) is bound by reading B, not by multiplies (a classifier at batch 1: 1280 x 1000):
 * it is cut into blocks of columns too, each thread streaming its share of B. */
#define SGEMM_STREAM_M 16
#define SGEMM_STREAM_KN (1 << 17)

/* oneDNN's sgemm takes row-major operands and 'N' / 'T' like cblas; it can fail only on
 * arguments, which the callers checked. */
int cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0) return dnnl_success;
  bool packed = lda == (ta ? m : k) && ldb == (tb ? k : n) && ldc == n;
  if (k == 0) { /* BLAS rejects a zero leading dimension; op(A) op(B) is all zeros */
    for (int64_t i = 0; i < m && beta != 1.0f; i++)
      for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return dnnl_success;
  }
  if (m * n * k <= SGEMM_TINY_MNK) {
    if (packed && beta == 0.0f)
      gemm_f32_blas(ta, tb, m, n, k, a, b, c);
    else
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  (blasint)m, (blasint)n, (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                  beta, c, (blasint)ldc);
    return dnnl_success;
  }
  int64_t mnk = m * n * k;
  int threads = cpu_host->num_threads();
  bool stream = m <= SGEMM_STREAM_M && n * k >= SGEMM_STREAM_KN;
  if ((mnk >= SGEMM_SPLIT_MNK || stream) && threads > 1) {
    SplitGemm g = {.ta = ta, .tb = tb, .by_rows = m > n, .m = m, .n = n, .k = k,
                   .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb, .ldc = ldc, .beta = beta,
                   .status = dnnl_success};
    int64_t total = g.by_rows ? m : n;
    int64_t blocks = total / SGEMM_SPLIT_MIN < threads ? total / SGEMM_SPLIT_MIN : threads;
    if (blocks > 1) {
      /* Equal blocks rounded up to 16 (a register tile's width). */
      g.block = ((total + blocks - 1) / blocks + 15) / 16 * 16;
      int64_t units = (total + g.block - 1) / g.block;
      cpu_host->parallel_for(units, 0, split_gemm_range, &g);
      return (dnnl_status_t)g.status;
    }
  }
  return sgemm_ld(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, mnk < SGEMM_ONE_THREAD_MNK);
}

static dnnl_status_t gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                              const float *b, float *c) {
  return (dnnl_status_t)cpu_gemm_f32(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
}

/* A batch of products z[b] = op(x[xi(b)]) op(y[yi(b)]) with NumPy-broadcast batch dims. */
typedef struct Product {
  bool ta, tb, f64;
  int64_t m, n, k;
  int nb;                            /* rank of the output's batch dims */
  int64_t bdims[FLOE_MAX_DIMS];      /* output batch dims */
  int64_t xstride[FLOE_MAX_DIMS];    /* x matrices per step of each batch dim; 0 if broadcast */
  int64_t ystride[FLOE_MAX_DIMS];
  const void *x, *y;
  void *z;
  int status; /* the first failing dnnl_sgemm's dnnl_status_t, else dnnl_success */
} Product;

static void product_range(void *arg, int64_t begin, int64_t end) {
  const Product *p = arg;
  size_t es = p->f64 ? sizeof(double) : sizeof(float);
  for (int64_t b = begin; b < end; b++) {
    int64_t xi = 0, yi = 0, rest = b;
    for (int d = p->nb - 1; d >= 0; d--) {
      int64_t idx = rest % p->bdims[d];
      rest /= p->bdims[d];
      xi += idx * p->xstride[d];
      yi += idx * p->ystride[d];
    }
    const char *x = (const char *)p->x + (size_t)(xi * p->m * p->k) * es;
    const char *y = (const char *)p->y + (size_t)(yi * p->k * p->n) * es;
    char *z = (char *)p->z + (size_t)(b * p->m * p->n) * es;
    if (p->f64)
      gemm_f64(p->ta, p->tb, p->m, p->n, p->k, (const double *)x, (const double *)y,
               (double *)z);
    else
      keep_first_failure(&((Product *)arg)->status,
                         gemm_f32(p->ta, p->tb, p->m, p->n, p->k, (const float *)x,
                                  (const float *)y, (float *)z));
  }
}

/* Computes every product of the batch; returns the first dnnl_sgemm failure's status. */
static dnnl_status_t product_run(Product *p, int64_t batch, int64_t xbatch, int64_t ybatch) {
  p->status = dnnl_success;
  if (batch == 0 || p->m == 0 || p->n == 0) return dnnl_success;
  /* One shared right-hand matrix: the batch folds into M, one larger (better) GEMM. */
  if (ybatch == 1 && xbatch == batch && !p->ta && p->m * batch <= INT_MAX) {
    Product one = *p;
    one.m = p->m * batch;
    one.nb = 0;
    product_range(&one, 0, 1);
    return (dnnl_status_t)one.status;
  }
  /* Products that run on one thread anyway are spread over the pool. oneDNN's are not:
   * each would start its own OpenMP team, and the teams would fight over the cores. */
  double mnk = (double)p->m * (double)p->n * (double)p->k;
  double one_thread = p->f64 ? BLAS_SINGLE_THREAD_MNK : SGEMM_TINY_MNK;
  if (batch > 1 && mnk <= one_thread)
    cpu_parallel_for(batch, (int64_t)(mnk / 4) + 1, product_range, p);
  else
    product_range(p, 0, batch);
  return (dnnl_status_t)p->status;
}

static floe_code sgemm_fail(FloeKernelContext *ctx, const Product *p, dnnl_status_t st) {
  return cpu_host->ctx_set_error(
      ctx, st == dnnl_out_of_memory ? FLOE_NO_MEMORY : FLOE_INTERNAL,
      "oneDNN sgemm of %lldx%lld by %lldx%lld failed: %s", (long long)p->m, (long long)p->k,
      (long long)p->k, (long long)p->n, dnnl_status2str(st));
}

/* Validates x [..., M, K] and y [..., K, N] (after the transposes) and computes the product
 * into a new output 0 whose batch dims are the broadcast of theirs (*result: that output,
 * borrowed; NULL when not wanted). MatMul is the rank-2 case of the same routine. */
static floe_code batch_product(FloeKernelContext *ctx, bool ta, bool tb, bool broadcast,
                               FloeTensor **result) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *y = cpu_host->ctx_input(ctx, 1);
  int xr = cpu_host->tensor_rank(x), yr = cpu_host->tensor_rank(y);
  const int64_t *xd = cpu_host->tensor_dims(x), *yd = cpu_host->tensor_dims(y);
  char sx[CPU_SHAPE_STR_MAX], sy[CPU_SHAPE_STR_MAX];
  if (!broadcast && (xr != 2 || yr != 2))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "MatMul needs two matrices (rank 2), got a %s and b %s",
                                   shape_str(x, sx, sizeof sx), shape_str(y, sy, sizeof sy));
  if (xr < 2 || yr < 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "inputs must have rank >= 2, got x %s and y %s",
                                   shape_str(x, sx, sizeof sx), shape_str(y, sy, sizeof sy));
  Product p;
  memset(&p, 0, sizeof p);
  p.ta = ta;
  p.tb = tb;
  p.m = ta ? xd[xr - 1] : xd[xr - 2];
  int64_t kx = ta ? xd[xr - 2] : xd[xr - 1];
  int64_t ky = tb ? yd[yr - 1] : yd[yr - 2];
  p.n = tb ? yd[yr - 2] : yd[yr - 1];
  p.k = kx;
  if (kx != ky)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "inner dimensions differ: %s %s%s has %lld, %s %s%s has %lld", broadcast ? "x" : "a",
        shape_str(x, sx, sizeof sx), ta ? (broadcast ? " (adj_x)" : " (transposed)") : "",
        (long long)kx, broadcast ? "y" : "b", shape_str(y, sy, sizeof sy),
        tb ? (broadcast ? " (adj_y)" : " (transposed)") : "", (long long)ky);
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "matrices %s and %s have a dimension over %d (BLAS limit)",
                                   shape_str(x, sx, sizeof sx), shape_str(y, sy, sizeof sy),
                                   INT_MAX);

  /* Broadcast the batch dims, right-aligned; strides count whole matrices. */
  int xb = xr - 2, yb = yr - 2;
  p.nb = xb > yb ? xb : yb;
  int64_t batch = 1, xbatch = 1, ybatch = 1, xs = 1, ys = 1;
  for (int d = p.nb - 1; d >= 0; d--) {
    int xi = d - (p.nb - xb), yi = d - (p.nb - yb);
    int64_t a = xi >= 0 ? xd[xi] : 1, b = yi >= 0 ? yd[yi] : 1;
    if (a != b && a != 1 && b != 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "batch dimensions of x %s and y %s do not broadcast "
                                     "(%lld vs %lld)",
                                     shape_str(x, sx, sizeof sx), shape_str(y, sy, sizeof sy),
                                     (long long)a, (long long)b);
    p.bdims[d] = a == 1 ? b : a;
    p.xstride[d] = a == 1 ? 0 : xs;
    p.ystride[d] = b == 1 ? 0 : ys;
    xs *= a;
    ys *= b;
    batch *= p.bdims[d];
  }
  xbatch = xs;
  ybatch = ys;

  int64_t odims[FLOE_MAX_DIMS];
  memcpy(odims, p.bdims, (size_t)p.nb * sizeof(int64_t));
  odims[p.nb] = p.m;
  odims[p.nb + 1] = p.n;
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, p.nb + 2, odims, &out);
  if (rc != FLOE_OK) return rc;
  if (result) *result = out;
  int64_t zn = batch * p.m * p.n;
  if (zn == 0) return FLOE_OK;

  FloeDType dt = cpu_host->tensor_dtype(x);
  p.z = cpu_host->tensor_data(out);
  if (dt == FLOE_F32 || dt == FLOE_F64) {
    p.f64 = dt == FLOE_F64;
    p.x = cpu_host->tensor_data(x);
    p.y = cpu_host->tensor_data(y);
    dnnl_status_t st = product_run(&p, batch, xbatch, ybatch);
    return st == dnnl_success ? FLOE_OK : sgemm_fail(ctx, &p, st);
  }
  /* f16 / bf16: widen both operands, multiply in f32, round the result once. */
  const void *src[2] = {cpu_host->tensor_data(x), cpu_host->tensor_data(y)};
  const int64_t count[2] = {cpu_host->tensor_num_elements(x), cpu_host->tensor_num_elements(y)};
  float *wide[2], *zb;
  if ((rc = cpu_half_widen_temp(ctx, dt, 2, src, count, zn, wide, &zb)) != FLOE_OK) return rc;
  void *z = p.z;
  p.x = wide[0];
  p.y = wide[1];
  p.z = zb;
  dnnl_status_t st = product_run(&p, batch, xbatch, ybatch);
  if (st != dnnl_success) return sgemm_fail(ctx, &p, st);
  cpu_convert_half(dt, false, p.z, z, zn);
  return FLOE_OK;
}

/* Transpose flags, parsed once per node: state is a two-bool array. */
static floe_code flags_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const char *const *names = user_data;
  const FloeAttrs *attrs = host->init_attrs(init);
  bool *flags = host->alloc(2 * sizeof(bool));
  if (!flags) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  for (int i = 0; i < 2; i++) {
    int v = 0;
    floe_code rc = host->attr_bool(attrs, names[i], &v);
    if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
      host->free(flags);
      return host->init_set_error(init, rc, "attribute %s must be a bool", names[i]);
    }
    flags[i] = v != 0;
  }
  *state = flags;
  return FLOE_OK;
}

static void state_free(void *state) { cpu_host->free(state); }

static floe_code matmul_compute(void *state, FloeKernelContext *ctx) {
  const bool *t = state;
  return batch_product(ctx, t[0], t[1], false, NULL);
}

static floe_code batch_matmul_compute(void *state, FloeKernelContext *ctx) {
  const bool *t = state;
  return batch_product(ctx, t[0], t[1], true, NULL);
}

static const char *const matmul_flags[2] = {"transpose_a", "transpose_b"};
static const char *const batch_matmul_flags[2] = {"adj_x", "adj_y"};

/* ---------------------------------------------------------------------------------- */
/* _FusedMatMul: the product, then in one pass over each row the bias (fused_bias) and the
 * elementwise tail (acts.h), each as BiasAdd and the unfused ops compute them. */

typedef struct FusedMatMul {
  bool t[2], bias;
  CpuActs acts;
} FusedMatMul;

static floe_code fused_matmul_create(const FloeHostApi *host, FloeKernelInit *init,
                                     void *user_data, void **state) {
  (void)user_data;
  FusedMatMul *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  static const char *const names[3] = {"transpose_a", "transpose_b", "fused_bias"};
  bool *flag[3] = {&s->t[0], &s->t[1], &s->bias};
  for (int i = 0; i < 3; i++) {
    int v = 0;
    floe_code rc = host->attr_bool(host->init_attrs(init), names[i], &v);
    if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
      host->free(s);
      return host->init_set_error(init, rc, "_FusedMatMul: attribute %s must be a bool",
                                  names[i]);
    }
    *flag[i] = v != 0;
  }
  int want = 2 + s->bias, got = host->init_num_inputs(init);
  floe_code rc = want == got ? cpu_acts_parse(host, init, "_FusedMatMul", &s->acts)
                             : host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                                    "_FusedMatMul: fused_bias is %s, so it takes "
                                                    "%d inputs, got %d",
                                                    s->bias ? "true" : "false", want, got);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  *state = s;
  return FLOE_OK;
}

typedef struct TailJob {
  const FusedMatMul *s;
  float *y;
  const float *bias; /* NULL: none */
  int64_t n;         /* columns */
} TailJob;

CPU_HOT static void add_bias_run(float *restrict y, const float *restrict b, int64_t n) {
  for (int64_t j = 0; j < n; j++) y[j] = y[j] + b[j];
}

static void tail_rows(void *arg, int64_t begin, int64_t end) {
  const TailJob *j = arg;
  for (int64_t r = begin; r < end; r++) {
    float *row = j->y + r * j->n;
    for (int64_t c = 0; c < j->n; c += CPU_ACT_BLOCK) {
      int64_t len = j->n - c < CPU_ACT_BLOCK ? j->n - c : CPU_ACT_BLOCK;
      if (j->bias) add_bias_run(row + c, j->bias + c, len);
      cpu_acts_block(&j->s->acts, row + c, len);
    }
  }
}

static floe_code fused_matmul_compute(void *state, FloeKernelContext *ctx) {
  const FusedMatMul *s = state;
  const FloeTensor *bias = s->bias ? cpu_host->ctx_input(ctx, 2) : NULL;
  FloeTensor *out = NULL;
  floe_code rc = batch_product(ctx, s->t[0], s->t[1], false, &out);
  if (rc != FLOE_OK) return rc;
  const int64_t *d = cpu_host->tensor_dims(out);
  if (bias) {
    int br = cpu_host->tensor_rank(bias);
    const int64_t *bd = cpu_host->tensor_dims(bias);
    if (!((br == 1 && bd[0] == d[1]) || (br == 2 && bd[0] == 1 && bd[1] == d[1]))) {
      char sb[CPU_SHAPE_STR_MAX], so[CPU_SHAPE_STR_MAX];
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "_FusedMatMul: bias %s must be [%lld] or [1, %lld], one "
                                     "value per column of the product %s",
                                     shape_str(bias, sb, sizeof sb), (long long)d[1],
                                     (long long)d[1], shape_str(out, so, sizeof so));
    }
  }
  if (d[0] == 0 || d[1] == 0 || (!bias && s->acts.n == 0)) return FLOE_OK;
  TailJob j = {s, cpu_host->tensor_data(out), bias ? cpu_host->tensor_data(bias) : NULL, d[1]};
  cpu_parallel_for(d[0], d[1] * (1 + s->acts.n), tail_rows, &j);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* BiasAdd: out = value + bias along the channel dim, seen as [outer, C, inner] (NHWC:
 * inner = 1; NCHW: outer = N, inner = the spatial size). Work is split over the outer*C
 * channel rows. */

typedef struct Bias {
  FloeDType dt;
  int64_t c, inner;
  const void *v, *b;
  void *o;
} Bias;

/* Rows [begin, end) of `inner` elements; a row's channel is row % C. Runs are cut where the
 * channel wraps, so the NHWC (inner = 1) case is one vectorisable loop per run. */
#define BIAS_LOOP(T, ADD)                                                                     \
  do {                                                                                        \
    const T *v = a->v, *bias = a->b;                                                          \
    T *o = a->o;                                                                              \
    for (int64_t r = begin; r < end;) {                                                       \
      int64_t ch = r % a->c, run = a->c - ch < end - r ? a->c - ch : end - r;                 \
      if (a->inner == 1) {                                                                    \
        for (int64_t j = 0; j < run; j++) o[r + j] = ADD(v[r + j], bias[ch + j]);             \
      } else {                                                                                \
        for (int64_t j = 0; j < run; j++) {                                                   \
          const T *vr = v + (r + j) * a->inner;                                               \
          T *orow = o + (r + j) * a->inner, bj = bias[ch + j];                                \
          for (int64_t i = 0; i < a->inner; i++) orow[i] = ADD(vr[i], bj);                    \
        }                                                                                     \
      }                                                                                       \
      r += run;                                                                               \
    }                                                                                         \
  } while (0)

#define ADD_PLAIN(x, y) ((x) + (y))
#define ADD_I8(x, y) ((int8_t)((x) + (y)))
#define ADD_U8(x, y) ((uint8_t)((x) + (y)))
#define ADD_I32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y))) /* wraps, no UB */
#define ADD_I64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define ADD_F16(x, y) cpu_f32_to_f16(cpu_f16_to_f32(x) + cpu_f16_to_f32(y))
#define ADD_BF16(x, y) cpu_f32_to_bf16(cpu_bf16_to_f32(x) + cpu_bf16_to_f32(y))

CPU_HOT static void bias_range(void *arg,
                                                                          int64_t begin,
                                                                          int64_t end) {
  const Bias *a = arg;
  switch (a->dt) {
    case FLOE_F32: BIAS_LOOP(float, ADD_PLAIN); break;
    case FLOE_F64: BIAS_LOOP(double, ADD_PLAIN); break;
    case FLOE_F16: BIAS_LOOP(uint16_t, ADD_F16); break;
    case FLOE_BF16: BIAS_LOOP(uint16_t, ADD_BF16); break;
    case FLOE_I8: BIAS_LOOP(int8_t, ADD_I8); break;
    case FLOE_U8: BIAS_LOOP(uint8_t, ADD_U8); break;
    case FLOE_I32: BIAS_LOOP(int32_t, ADD_I32); break;
    case FLOE_I64: BIAS_LOOP(int64_t, ADD_I64); break;
    default: break;
  }
}

/* State: non-zero for NCHW. */
static floe_code bias_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  const char *fmt = "NHWC";
  floe_code rc = host->attr_string(host->init_attrs(init), "data_format", &fmt);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\", got \"%s\"", fmt);
  bool *nchw = host->alloc(sizeof(bool));
  if (!nchw) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *nchw = strcmp(fmt, "NCHW") == 0;
  *state = nchw;
  return FLOE_OK;
}

static floe_code bias_compute(void *state, FloeKernelContext *ctx) {
  bool nchw = *(const bool *)state;
  const FloeTensor *v = cpu_host->ctx_input(ctx, 0), *b = cpu_host->ctx_input(ctx, 1);
  int rank = cpu_host->tensor_rank(v);
  const int64_t *d = cpu_host->tensor_dims(v);
  char sv[CPU_SHAPE_STR_MAX], sb[CPU_SHAPE_STR_MAX];
  if (rank < (nchw ? 2 : 1))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "value must have rank >= %d for %s, got %s", nchw ? 2 : 1,
                                   nchw ? "NCHW" : "NHWC", shape_str(v, sv, sizeof sv));
  int cdim = nchw ? 1 : rank - 1;
  if (cpu_host->tensor_rank(b) != 1 || cpu_host->tensor_dims(b)[0] != d[cdim])
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "bias %s must be a vector of the %lld channels of value %s (%s)",
        shape_str(b, sb, sizeof sb), (long long)d[cdim], shape_str(v, sv, sizeof sv),
        nchw ? "NCHW: dim 1" : "NHWC: last dim");
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, d, &out);
  if (rc != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(v);
  if (n == 0) return FLOE_OK;
  int64_t inner = nchw ? n / (d[0] * d[1]) : 1;
  Bias a = {cpu_host->tensor_dtype(v), d[cdim], inner, cpu_host->tensor_data(v),
            cpu_host->tensor_data(b), cpu_host->tensor_data(out)};
  int64_t rows = n / inner;
  cpu_parallel_for(rows, inner, bias_range, &a);
  return FLOE_OK;
}

floe_code cpu_register_matmul(FloePluginRegistrar *reg) {
  floe_code rc = cpu_add_kernel(reg, "MatMul", "T", FLOE_DTYPES_FLOAT, 0, matmul_compute,
                                flags_create, state_free, (void *)matmul_flags);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "BatchMatMul", "T", FLOE_DTYPES_FLOAT, 0, batch_matmul_compute,
                        flags_create, state_free, (void *)batch_matmul_flags);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "BiasAdd", "T", FLOE_DTYPES_NUMERIC, 0, bias_compute, bias_create,
                        state_free, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "_FusedMatMul", "T", FLOE_DTYPE_BIT(FLOE_F32), 0,
                        fused_matmul_compute, fused_matmul_create, state_free, NULL);
  return rc;
}
