/* SPDX-License-Identifier: Apache-2.0 */
/* k_blas.c - MatMul and BatchMatMul on cuBLAS (cublasGemmStridedBatchedEx).
 *
 * Precision of f32 products, FLOE_CUDA_MATMUL (read when the device is created):
 *   f32  (default) full f32 on the CUDA cores: the CPU plugin's results to rounding, and
 *        PyTorch's default for matmul (torch.backends.cuda.matmul.allow_tf32 = False);
 *   tf32 tensor cores with inputs rounded to TF32 (10-bit mantissa), f32 accumulation;
 *   bf16 inputs converted to bf16 on the device (scratch), f32 accumulation and output.
 * f64 products always run in f64; bf16 and f16 products (T = bf16 / f16: what a model kept in
 * half precision uses, with no conversion) take half inputs and outputs on the tensor cores
 * with f32 accumulation, whatever the mode.
 *
 * Floe tensors are row-major; cuBLAS is column-major. C = op(A) op(B) (row-major, [m, n]) is
 * computed as the column-major C^T = op(B)^T op(A)^T, which reads the same bytes: B is
 * passed first with its own transpose flag, and the leading dimensions are the row lengths
 * of the stored matrices. */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "cuda.h"

#define SHAPE(buf, r, d) cu_shape_str(buf, sizeof buf, (r), (d))

typedef struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  int64_t batch;             /* >= 1 */
  int64_t sa, sb, sc;        /* element strides between batches (0: broadcast) */
} Gemm;

/* One (strided, batched) product on the device's compute stream. a and b are of dtype dt, or
 * bf16 when the device's mode is bf16 and dt is f32 (the caller converted them). */
static cublasStatus_t run_gemm(CudaDevice *d, FloeDType dt, const Gemm *g, const void *a,
                               const void *b, void *c) {
  cudaDataType_t ab = CUDA_R_32F, ct = CUDA_R_32F;
  cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.0f, zero32 = 0.0f;
  const void *alpha = &one32, *beta = &zero32;
  if (dt == FLOE_F64) {
    ab = ct = CUDA_R_64F;
    comp = CUBLAS_COMPUTE_64F;
    alpha = &one64;
    beta = &zero64;
  } else if (dt == FLOE_BF16 || dt == FLOE_F16) {
    ab = ct = dt == FLOE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  } else if (d->matmul == CUDA_MM_TF32) {
    comp = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else if (d->matmul == CUDA_MM_BF16) {
    ab = CUDA_R_16BF;
  }
  int lda = (int)(g->ta ? g->m : g->k), ldb = (int)(g->tb ? g->k : g->n);
  pthread_mutex_lock(&d->blas_mu);
  cublasStatus_t s = cublasGemmStridedBatchedEx(
      d->blas, g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n,
      (int)g->m, (int)g->k, alpha, b, ab, ldb, g->sb, a, ab, lda, g->sa, beta, c, ct, (int)g->n,
      g->sc, (int)g->batch, comp, CUBLAS_GEMM_DEFAULT);
  pthread_mutex_unlock(&d->blas_mu);
  return s;
}

/* In bf16 mode an f32 operand of n elements is converted into scratch; else returned as is. */
static floe_code operand(CuCall *c, FloeDType dt, const void *x, int64_t n, const void **out) {
  *out = x;
  if (dt != FLOE_F32 || c->dev->matmul != CUDA_MM_BF16 || n == 0) return FLOE_OK;
  void *tmp;
  floe_code rc = cu_host->ctx_allocate_temp(c->ctx, (size_t)n * 2, &tmp);
  if (rc != FLOE_OK)
    return cu_host->ctx_set_error(c->ctx, rc, "cannot allocate %" PRId64 " bytes of bf16 "
                                  "scratch", n * 2);
  int lr = cu_f32_to_bf16((CuStream)c->dev->compute, n, x, tmp);
  if (lr != 0) return cu_fail_cuda(c->ctx, (cudaError_t)lr, "converting to bf16");
  *out = tmp;
  return FLOE_OK;
}

static bool fits_int(const Gemm *g) {
  return g->m <= INT_MAX && g->n <= INT_MAX && g->k <= INT_MAX && g->batch <= INT_MAX;
}

/* Runs g over x, y into out (all counts known), zero-filling when k == 0. */
static floe_code product(CuCall *c, FloeDType dt, const Gemm *g, const FloeTensor *x,
                         const FloeTensor *y, FloeTensor *out, const char *what) {
  int64_t nout = cu_host->tensor_num_elements(out);
  if (nout == 0) return cu_end(c, 0, what);
  if (g->k == 0) /* an empty sum */
    return cu_end(c, (int)cudaMemsetAsync(cu_host->tensor_data(out), 0,
                                          cu_host->tensor_nbytes(out), c->dev->compute),
                  what);
  const void *a, *b;
  floe_code rc = operand(c, dt, cu_host->tensor_data(x), cu_host->tensor_num_elements(x), &a);
  if (rc == FLOE_OK) rc = operand(c, dt, cu_host->tensor_data(y), cu_host->tensor_num_elements(y), &b);
  if (rc != FLOE_OK) return cu_abort(c), rc;
  cublasStatus_t s = run_gemm(c->dev, dt, g, a, b, cu_host->tensor_data(out));
  if (s != CUBLAS_STATUS_SUCCESS) {
    cu_abort(c);
    return cu_fail_blas(c->ctx, s, what);
  }
  return cu_end(c, (int)cudaGetLastError(), what);
}

typedef struct MatmulState {
  int ta, tb;
} MatmulState;

static floe_code matmul_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  MatmulState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  const FloeAttrs *a = host->init_attrs(init);
  const char *na = user_data ? "adj_x" : "transpose_a", *nb = user_data ? "adj_y" : "transpose_b";
  if (host->attr_bool(a, na, &s->ta) != FLOE_OK) s->ta = 0;
  if (host->attr_bool(a, nb, &s->tb) != FLOE_OK) s->tb = 0;
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { cu_host->free(state); }

static floe_code matmul_compute(void *state, FloeKernelContext *ctx) {
  const MatmulState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *y = cu_host->ctx_input(ctx, 1);
  const int64_t *xd = cu_host->tensor_dims(x), *yd = cu_host->tensor_dims(y);
  FloeDType dt = cu_host->tensor_dtype(x);
  char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
  if (cu_host->tensor_rank(x) != 2 || cu_host->tensor_rank(y) != 2 ||
      cu_host->tensor_dtype(y) != dt)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "MatMul needs two matrices of one dtype, got %s %s and %s %s",
                                  cu_host->dtype_name(dt),
                                  SHAPE(a, cu_host->tensor_rank(x), xd),
                                  cu_host->dtype_name(cu_host->tensor_dtype(y)),
                                  SHAPE(b, cu_host->tensor_rank(y), yd));
  Gemm g = {s->ta, s->tb, s->ta ? xd[1] : xd[0], s->tb ? yd[0] : yd[1], s->ta ? xd[0] : xd[1],
            1, 0, 0, 0};
  int64_t ky = s->tb ? yd[1] : yd[0];
  if (ky != g.k)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "inner dims differ: a %s%s and b %s%s", SHAPE(a, 2, xd),
                                  s->ta ? " (transposed)" : "", SHAPE(b, 2, yd),
                                  s->tb ? " (transposed)" : "");
  if (!fits_int(&g))
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "a %s and b %s are too large for cuBLAS (dims above 2^31)",
                                  SHAPE(a, 2, xd), SHAPE(b, 2, yd));
  int64_t od[2] = {g.m, g.n};
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, 2, od, &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  return product(&c, dt, &g, x, y, out, "MatMul");
}

/* x [..., M, K] y [..., K, N] with broadcast batch dims (TF BatchMatMulV2). One strided
 * batched call when each side's batch is either whole or a single matrix; otherwise one
 * call per output matrix. */
static floe_code batch_matmul_compute(void *state, FloeKernelContext *ctx) {
  const MatmulState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *y = cu_host->ctx_input(ctx, 1);
  int xr = cu_host->tensor_rank(x), yr = cu_host->tensor_rank(y);
  const int64_t *xd = cu_host->tensor_dims(x), *yd = cu_host->tensor_dims(y);
  FloeDType dt = cu_host->tensor_dtype(x);
  char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
  if (xr < 2 || yr < 2 || cu_host->tensor_dtype(y) != dt)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "BatchMatMul needs x and y of rank >= 2 and one dtype, got "
                                  "%s and %s",
                                  SHAPE(a, xr, xd), SHAPE(b, yr, yd));
  Gemm g = {s->ta, s->tb, s->ta ? xd[xr - 1] : xd[xr - 2], s->tb ? yd[yr - 2] : yd[yr - 1],
            s->ta ? xd[xr - 2] : xd[xr - 1], 1, 0, 0, 0};
  int64_t ky = s->tb ? yd[yr - 1] : yd[yr - 2];
  /* Batch dims broadcast. */
  int br[2] = {xr - 2, yr - 2}, orank = (xr > yr ? xr : yr) - 2;
  const int64_t *bd[2] = {xd, yd};
  int64_t od[FLOE_MAX_DIMS];
  bool ok = ky == g.k;
  for (int i = 0; ok && i < orank; i++) {
    int ix = i - (orank - br[0]), iy = i - (orank - br[1]);
    int64_t dx = ix >= 0 ? xd[ix] : 1, dy = iy >= 0 ? yd[iy] : 1;
    ok = dx == dy || dx == 1 || dy == 1;
    od[i] = dx == 1 ? dy : dx;
  }
  CuBcast plan;
  if (ok) ok = cu_broadcast_plan(2, br, bd, orank, od, &plan) == 0;
  if (!ok)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "x %s and y %s do not multiply (adj_x=%d, adj_y=%d): inner "
                                  "dims must agree and batch dims broadcast",
                                  SHAPE(a, xr, xd), SHAPE(b, yr, yd), s->ta, s->tb);
  g.batch = plan.n;
  if (!fits_int(&g))
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "x %s and y %s are too large for cuBLAS (sizes above 2^31)",
                                  SHAPE(a, xr, xd), SHAPE(b, yr, yd));
  od[orank] = g.m;
  od[orank + 1] = g.n;
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, orank + 2, od, &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t mx = g.m * g.k, my = g.k * g.n, mo = g.m * g.n;
  if (plan.rank == 1 || g.batch <= 1) {
    g.sa = plan.strides[0][0] * mx;
    g.sb = plan.strides[1][0] * my;
    g.sc = mo;
    return product(&c, dt, &g, x, y, out, "BatchMatMul");
  }
  /* General broadcast: one product per output matrix. */
  if (g.k == 0 || cu_host->tensor_num_elements(out) == 0) return product(&c, dt, &g, x, y, out, "BatchMatMul");
  const void *pa, *pb;
  if ((rc = operand(&c, dt, cu_host->tensor_data(x), cu_host->tensor_num_elements(x), &pa)) != FLOE_OK ||
      (rc = operand(&c, dt, cu_host->tensor_data(y), cu_host->tensor_num_elements(y), &pb)) != FLOE_OK)
    return cu_abort(&c), rc;
  size_t ein = dt == FLOE_F32 && c.dev->matmul == CUDA_MM_BF16 ? 2 : cu_host->dtype_size(dt);
  size_t eout = cu_host->dtype_size(dt);
  Gemm one = g;
  one.batch = 1;
  for (int64_t i = 0; i < g.batch; i++) {
    int64_t rem = i, ox = 0, oy = 0;
    for (int dd = plan.rank - 1; dd >= 0; dd--) {
      int64_t cidx = rem % plan.dims[dd];
      rem /= plan.dims[dd];
      ox += cidx * plan.strides[0][dd];
      oy += cidx * plan.strides[1][dd];
    }
    cublasStatus_t st = run_gemm(c.dev, dt, &one, (const char *)pa + (size_t)(ox * mx) * ein,
                                 (const char *)pb + (size_t)(oy * my) * ein,
                                 (char *)cu_host->tensor_data(out) + (size_t)(i * mo) * eout);
    if (st != CUBLAS_STATUS_SUCCESS) {
      cu_abort(&c);
      return cu_fail_blas(ctx, st, "BatchMatMul");
    }
  }
  return cu_end(&c, (int)cudaGetLastError(), "BatchMatMul");
}

floe_code cu_register_blas(FloePluginRegistrar *reg) {
  const uint32_t types = FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) |
                         FLOE_DTYPE_BIT(FLOE_BF16) | FLOE_DTYPE_BIT(FLOE_F16);
  static const int batch = 1;
  floe_code rc = cu_add_kernel(reg, "MatMul", "T", types, 0, matmul_compute, matmul_create,
                               state_free, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "BatchMatMul", "T", types, 0, batch_matmul_compute, matmul_create,
                       state_free, (void *)&batch);
  return rc;
}
