/* SPDX-License-Identifier: Apache-2.0 */
/* matrix.c - the matrix unit: MatMul and BatchMatMul with bf16 operands and f32
 * accumulation, and the blocked product (tpu_gemm) the convolutions share.
 *
 * A real MXU reads bf16 and accumulates in f32; here both operands are rounded to bf16 (to
 * nearest even) while they are packed, and the product of two bf16 values is exact in f32,
 * so the only rounding besides the operands' is the f32 accumulation: the numerics of the
 * chip. Packing also transposes (any strides) into panels: A in panels of MR rows, B in
 * panels of NR columns, each stored k-major, so the 6x16 micro-kernel streams both
 * contiguously. Blocks of C (MB rows x NB columns) are shared out over the pool; each walks
 * K in KC-long chunks so its A and B chunks stay in cache. */
#include <limits.h>
#include <string.h>

#include "tpusim.h"

#define MR 6    /* rows of a micro tile */
#define NR 16   /* columns of a micro tile */
#define KC 256  /* reduction chunk */
#define MB (MR * 8)
#define NB (NR * 16)

typedef float v8f __attribute__((vector_size(32)));

/* acc[MR][NR] = sum over p < kc of a[p][0..MR) x b[p][0..NR) (panels k-major). Twelve
 * 8-lane accumulators: with AVX2 and FMA each step is 2 loads, 6 broadcasts and 12 FMAs. */
#define MICRO_BODY                                                                           \
  v8f c[MR][2];                                                                              \
  memset(c, 0, sizeof c);                                                                    \
  for (int64_t p = 0; p < kc; p++) {                                                         \
    v8f b0, b1;                                                                              \
    memcpy(&b0, b + p * NR, sizeof b0);                                                      \
    memcpy(&b1, b + p * NR + 8, sizeof b1);                                                  \
    const float *ap = a + p * MR;                                                            \
    for (int i = 0; i < MR; i++) {                                                           \
      c[i][0] += ap[i] * b0;                                                                 \
      c[i][1] += ap[i] * b1;                                                                 \
    }                                                                                        \
  }                                                                                          \
  memcpy(acc, c, sizeof c)

static void micro_6x16_plain(int64_t kc, const float *restrict a, const float *restrict b,
                             float *restrict acc) {
  MICRO_BODY;
}

/* The AVX2 + FMA build of the same loop, chosen at run time when the CPU has both (an ifunc
 * clone keyed on "arch=haswell" would only match that exact CPU model). Sanitizer builds
 * keep the plain one (see cpu_util.h). */
#if defined(__x86_64__) && !defined(FLOE_NO_TARGET_CLONES)
__attribute__((target("avx2,fma"))) static void micro_6x16_avx2(int64_t kc,
                                                                 const float *restrict a,
                                                                 const float *restrict b,
                                                                 float *restrict acc) {
  MICRO_BODY;
}

typedef void (*MicroFn)(int64_t, const float *restrict, const float *restrict, float *restrict);

static MicroFn micro_pick(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? micro_6x16_avx2
                                                                         : micro_6x16_plain;
}

static void micro_6x16(int64_t kc, const float *a, const float *b, float *acc) {
  static MicroFn fn; /* benign race: every thread computes the same pointer */
  MicroFn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
  if (!f) {
    f = micro_pick();
    __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
  }
  f(kc, a, b, acc);
}
#else
#define micro_6x16 micro_6x16_plain
#endif

typedef struct Gemm {
  int64_t m, n, k;
  const float *a, *b;
  int64_t ars, acs, brs, bcs;
  float *ap, *bp; /* packed panels (chip scratch) */
  float *c;
  int64_t ldc;
  int64_t mpanels, npanels, mblocks, nblocks;
  /* K split into slices when C has too few blocks to keep the pool busy (a filter
   * gradient: small C, long K). Slice 0 writes C; slice s > 0 writes partial + (s-1) m n. */
  int64_t slices, kslice;
  float *partial;
} Gemm;

/* A panels [begin, end): rows ip*MR.. of op(A), bf16-rounded, k-major, zero-padded. */
static void pack_a(void *arg, int64_t begin, int64_t end) {
  const Gemm *g = arg;
  for (int64_t ip = begin; ip < end; ip++) {
    float *dst = g->ap + ip * g->k * MR;
    for (int64_t p = 0; p < g->k; p++) {
      for (int i = 0; i < MR; i++) {
        int64_t row = ip * MR + i;
        dst[p * MR + i] = row < g->m ? tpu_round_bf16(g->a[row * g->ars + p * g->acs]) : 0.0f;
      }
    }
  }
}

/* B panels [begin, end): columns jp*NR.. of op(B), bf16-rounded, k-major, zero-padded. */
static void pack_b(void *arg, int64_t begin, int64_t end) {
  const Gemm *g = arg;
  for (int64_t jp = begin; jp < end; jp++) {
    float *dst = g->bp + jp * g->k * NR;
    for (int64_t p = 0; p < g->k; p++) {
      for (int j = 0; j < NR; j++) {
        int64_t col = jp * NR + j;
        dst[p * NR + j] = col < g->n ? tpu_round_bf16(g->b[p * g->brs + col * g->bcs]) : 0.0f;
      }
    }
  }
}

/* Units [begin, end): unit u is block u % blocks of C (numbered row block major) over the
 * K slice u / blocks. */
static void gemm_blocks(void *arg, int64_t begin, int64_t end) {
  const Gemm *g = arg;
  float acc[MR * NR];
  int64_t blocks = g->mblocks * g->nblocks;
  for (int64_t u = begin; u < end; u++) {
    int64_t slice = u / blocks, blk = u % blocks;
    int64_t kbeg = slice * g->kslice, kend = kbeg + g->kslice < g->k ? kbeg + g->kslice : g->k;
    float *c = slice == 0 ? g->c : g->partial + (slice - 1) * g->m * g->n;
    int64_t ldc = slice == 0 ? g->ldc : g->n;
    int64_t ib = blk / g->nblocks, jb = blk % g->nblocks;
    int64_t ip0 = ib * (MB / MR), ip1 = ip0 + MB / MR < g->mpanels ? ip0 + MB / MR : g->mpanels;
    int64_t jp0 = jb * (NB / NR), jp1 = jp0 + NB / NR < g->npanels ? jp0 + NB / NR : g->npanels;
    for (int64_t i = ip0 * MR; i < ip1 * MR && i < g->m; i++)
      memset(c + i * ldc + jp0 * NR, 0,
             (size_t)((jp1 * NR < g->n ? jp1 * NR : g->n) - jp0 * NR) * sizeof(float));
    for (int64_t p0 = kbeg; p0 < kend; p0 += KC) {
      int64_t kc = kend - p0 < KC ? kend - p0 : KC;
      for (int64_t jp = jp0; jp < jp1; jp++) {
        const float *bpan = g->bp + jp * g->k * NR + p0 * NR;
        for (int64_t ip = ip0; ip < ip1; ip++) {
          micro_6x16(kc, g->ap + ip * g->k * MR + p0 * MR, bpan, acc);
          int64_t rows = g->m - ip * MR < MR ? g->m - ip * MR : MR;
          int64_t cols = g->n - jp * NR < NR ? g->n - jp * NR : NR;
          for (int64_t i = 0; i < rows; i++) {
            float *crow = c + (ip * MR + i) * ldc + jp * NR;
            for (int64_t j = 0; j < cols; j++) crow[j] += acc[i * NR + j];
          }
        }
      }
    }
  }
}

/* Rows [begin, end) of C: add the other slices' partial products. */
static void gemm_reduce(void *arg, int64_t begin, int64_t end) {
  const Gemm *g = arg;
  for (int64_t i = begin; i < end; i++)
    for (int64_t s = 1; s < g->slices; s++) {
      const float *p = g->partial + (s - 1) * g->m * g->n + i * g->n;
      float *crow = g->c + i * g->ldc;
      for (int64_t j = 0; j < g->n; j++) crow[j] += p[j];
    }
}

floe_code tpu_gemm(FloeKernelContext *ctx, int64_t m, int64_t n, int64_t k, const float *a,
                   int64_t ars, int64_t acs, const float *b, int64_t brs, int64_t bcs, float *c,
                   int64_t ldc) {
  if (m == 0 || n == 0) return FLOE_OK;
  if (k == 0) { /* an empty sum */
    for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    return FLOE_OK;
  }
  Gemm g = {.m = m, .n = n, .k = k, .a = a, .b = b, .ars = ars, .acs = acs, .brs = brs,
            .bcs = bcs, .c = c, .ldc = ldc};
  g.mpanels = (m + MR - 1) / MR;
  g.npanels = (n + NR - 1) / NR;
  g.mblocks = (m + MB - 1) / MB;
  g.nblocks = (n + NB - 1) / NB;
  size_t abytes = (size_t)(g.mpanels * MR) * (size_t)k * sizeof(float);
  size_t bbytes = (size_t)(g.npanels * NR) * (size_t)k * sizeof(float);
  void *scratch;
  floe_code rc = tpu_temp(ctx, abytes + bbytes, &scratch);
  if (rc != FLOE_OK) return rc;
  g.ap = scratch;
  g.bp = (float *)((char *)scratch + abytes);
  tpu_parallel_for(g.mpanels, k * MR * 2, pack_a, &g);
  tpu_parallel_for(g.npanels, k * NR * 2, pack_b, &g);
  /* Fewer blocks than threads and a long K: slices of K (whole KC chunks) in parallel. */
  int64_t blocks = g.mblocks * g.nblocks, threads = tpu_host->num_threads();
  g.slices = 1;
  g.kslice = k;
  if (blocks < threads && k >= 4 * KC) {
    int64_t want = (threads + blocks - 1) / blocks, most = k / (2 * KC);
    g.slices = want < most ? want : most;
    g.kslice = ((k + g.slices - 1) / g.slices + KC - 1) / KC * KC;
    g.slices = (k + g.kslice - 1) / g.kslice;
  }
  if (g.slices > 1 &&
      (rc = tpu_temp(ctx, (size_t)((g.slices - 1) * m * n) * sizeof(float), (void **)&g.partial)) !=
          FLOE_OK)
    return rc;
  /* A unit's cost in ~ns: MB*NB*kslice multiply-adds at ~16 per ns. */
  tpu_parallel_for(g.slices * blocks, (int64_t)MB * NB / 16 * g.kslice + 1, gemm_blocks, &g);
  if (g.slices > 1) tpu_parallel_for(m, n * (g.slices - 1) + 1, gemm_reduce, &g);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* MatMul and BatchMatMul. */

/* Transpose flags parsed once per node: state is a two-int array. user_data names them. */
static floe_code flags_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const char *const *names = user_data;
  int *flags = host->alloc(2 * sizeof(int));
  if (!flags) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  for (int i = 0; i < 2; i++) {
    flags[i] = 0;
    floe_code rc = host->attr_bool(host->init_attrs(init), names[i], &flags[i]);
    if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
      host->free(flags);
      return host->init_set_error(init, rc, "attribute %s must be a bool", names[i]);
    }
  }
  *state = flags;
  return FLOE_OK;
}

static void flags_free(void *state) { tpu_host->free(state); }

/* x [..., M, K] times y [..., K, N] (after the transposes); batch dims broadcast. */
static floe_code product(FloeKernelContext *ctx, bool ta, bool tb, bool batched) {
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0), *y = tpu_host->ctx_input(ctx, 1);
  int xr = tpu_host->tensor_rank(x), yr = tpu_host->tensor_rank(y);
  const int64_t *xd = tpu_host->tensor_dims(x), *yd = tpu_host->tensor_dims(y);
  char sx[TPU_SHAPE_STR_MAX], sy[TPU_SHAPE_STR_MAX];
  if ((!batched && (xr != 2 || yr != 2)) || xr < 2 || yr < 2)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s needs %s, got %s and %s", batched ? "BatchMatMul" : "MatMul",
                                   batched ? "inputs of rank >= 2" : "two matrices (rank 2)",
                                   tpu_shape_str(x, sx, sizeof sx), tpu_shape_str(y, sy, sizeof sy));
  int64_t m = ta ? xd[xr - 1] : xd[xr - 2], kx = ta ? xd[xr - 2] : xd[xr - 1];
  int64_t ky = tb ? yd[yr - 1] : yd[yr - 2], n = tb ? yd[yr - 2] : yd[yr - 1];
  if (kx != ky)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "inner dimensions differ: %s%s has %lld, %s%s has %lld",
                                   tpu_shape_str(x, sx, sizeof sx), ta ? " (transposed)" : "",
                                   (long long)kx, tpu_shape_str(y, sy, sizeof sy),
                                   tb ? " (transposed)" : "", (long long)ky);
  /* Batch dims, right-aligned; strides count whole matrices (0 = broadcast). */
  int xb = xr - 2, yb = yr - 2, nb = xb > yb ? xb : yb;
  int64_t bdims[FLOE_MAX_DIMS], xs[FLOE_MAX_DIMS], ys[FLOE_MAX_DIMS], batch = 1;
  int64_t xstep = 1, ystep = 1;
  for (int d = nb - 1; d >= 0; d--) {
    int xi = d - (nb - xb), yi = d - (nb - yb);
    int64_t a = xi >= 0 ? xd[xi] : 1, b = yi >= 0 ? yd[yi] : 1;
    if (a != b && a != 1 && b != 1)
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "batch dimensions of x %s and y %s do not broadcast "
                                     "(%lld vs %lld)", tpu_shape_str(x, sx, sizeof sx),
                                     tpu_shape_str(y, sy, sizeof sy), (long long)a, (long long)b);
    bdims[d] = a == 1 ? b : a;
    xs[d] = a == 1 ? 0 : xstep;
    ys[d] = b == 1 ? 0 : ystep;
    xstep *= a;
    ystep *= b;
    batch *= bdims[d];
  }
  int64_t odims[FLOE_MAX_DIMS];
  memcpy(odims, bdims, (size_t)nb * sizeof *odims);
  odims[nb] = m;
  odims[nb + 1] = n;
  FloeTensor *out;
  float *z;
  if ((rc = tpu_output(ctx, 0, nb + 2, odims, &out, (void **)&z)) != FLOE_OK) return rc;
  const float *xv = tpu_host->tensor_data(x), *yv = tpu_host->tensor_data(y);
  for (int64_t bi = 0; bi < batch && m * n > 0; bi++) {
    int64_t xo = 0, yo = 0, rest = bi;
    for (int d = nb - 1; d >= 0; d--) {
      int64_t idx = rest % bdims[d];
      rest /= bdims[d];
      xo += idx * xs[d];
      yo += idx * ys[d];
    }
    const float *a = xv + xo * m * kx, *b = yv + yo * kx * n;
    rc = tpu_gemm(ctx, m, n, kx, a, ta ? 1 : kx, ta ? m : 1, b, tb ? 1 : n, tb ? kx : 1,
                  z + bi * m * n, n);
    if (rc != FLOE_OK) return rc;
  }
  /* HBM traffic: each operand read once, the result written once (all f32). */
  double bytes = 4.0 * ((double)tpu_host->tensor_num_elements(x) +
                        (double)tpu_host->tensor_num_elements(y) + (double)(batch * m * n));
  tpu_report_ns(ctx, tpu_cost_matmul_ns(tpu_chip(ctx)->cfg, batch, m, n, kx, bytes));
  return FLOE_OK;
}

static floe_code matmul_compute(void *state, FloeKernelContext *ctx) {
  const int *t = state;
  return product(ctx, t[0], t[1], false);
}

static floe_code batch_matmul_compute(void *state, FloeKernelContext *ctx) {
  const int *t = state;
  return product(ctx, t[0], t[1], true);
}

static const char *const matmul_flags[2] = {"transpose_a", "transpose_b"};
static const char *const batch_matmul_flags[2] = {"adj_x", "adj_y"};

floe_code tpu_register_matrix(FloePluginRegistrar *reg) {
  uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  floe_code rc = tpu_add_kernel(reg, "MatMul", "T", f32, 0, matmul_compute, flags_create,
                                flags_free, (void *)matmul_flags);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "BatchMatMul", "T", f32, 0, batch_matmul_compute, flags_create,
                        flags_free, (void *)batch_matmul_flags);
  return rc;
}
