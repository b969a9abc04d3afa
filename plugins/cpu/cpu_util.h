/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_util.h - helpers shared by the CPU kernels: f16/bf16 conversions, NumPy broadcasting,
 * a parallel_for that stays inline for small work, and vectorisable f32 exp/log. */
#ifndef FLOE_CPU_UTIL_H
#define FLOE_CPU_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <stdbool.h>

#include "cpu.h"

/* ------------------------------------------------------------------------------------ */
/* Half precision. Branch-free (selects only) so loops over them vectorise. All round to
 * nearest even; NaN stays NaN (quiet), Inf stays Inf, overflow gives Inf, f16 subnormals are
 * exact. Inline because every kernel calls them once per element. */

static inline uint32_t cpu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float cpu_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float cpu_f16_to_f32(uint16_t h) {
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa in f32 position */
  uint32_t exp = em & 0x0f800000u;
  uint32_t normal = em + ((127u - 15u) << 23);
  uint32_t infnan = (em + ((255u - 31u) << 23)) | ((em & 0x7fffffu) ? 0x400000u : 0); /* quiet */
  /* Subnormals (and zero): rebias one higher, then subtract the implicit leading one. */
  float sub = cpu_bits_f32(em + ((127u - 15u + 1u) << 23)) - cpu_bits_f32(113u << 23);
  uint32_t bits = exp == 0x0f800000u ? infnan : normal;
  bits = exp == 0 ? cpu_f32_bits(sub) : bits;
  return cpu_bits_f32(bits | (uint32_t)(h & 0x8000u) << 16);
}

static inline uint16_t cpu_f32_to_f16(float f) {
  uint32_t u = cpu_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  /* Below 2^-14 the result is subnormal: adding 0.5 aligns the 10 mantissa bits at the bottom
   * and the FPU's own round-to-nearest-even does the rounding. */
  uint32_t sub = cpu_f32_bits(cpu_bits_f32(a) + 0.5f) - cpu_f32_bits(0.5f);
  /* Normal: rebias, then round to nearest even on the 13 dropped bits (a carry into the
   * exponent is the correct result, up to Inf). */
  uint32_t nrm = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  uint32_t r = a < (113u << 23) ? sub : nrm;
  r = a >= (143u << 23) ? 0x7c00u : r;         /* >= 65536 (or Inf) */
  r = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : r; /* NaN, payload kept, quiet */
  return (uint16_t)(r | sign);
}

static inline float cpu_bf16_to_f32(uint16_t b) { return cpu_bits_f32((uint32_t)b << 16); }

static inline uint16_t cpu_f32_to_bf16(float f) {
  uint32_t u = cpu_f32_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u; /* quiet, sign and top payload kept */
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* Whole rows: dst[i] = convert(src[i]) for i < n. */
/* Hot loops get an AVX2 clone chosen at load time (ifunc). (An AVX-512F clone as well made
 * the cross-entropy's exp loop faster, 25 -> 18 ms at [2240, 10000], but the LSTM language
 * model 4-9% slower in three interleaved pairs of runs: it stays out.) Sanitizer builds turn
 * this off: ifunc resolvers run before the sanitizer runtime is ready. */
#if defined(FLOE_NO_TARGET_CLONES) || !defined(__x86_64__)
#define CPU_HOT
#define CPU_HOT_WIDE
#else
#define CPU_HOT __attribute__((target_clones("avx2", "default")))
/* The transcendental activations (exp, sigmoid, tanh...: the float unary rows and the
 * convolutions' fused activations, which must give the same bits as those rows) get an
 * AVX-512F clone too: twice the lanes for loops bound by arithmetic, not memory. The plugin
 * is built with -ffp-contract=off (Makefile.am): avx512f enables FMA, and contracting there
 * would give other bits than the avx2 and default clones, the fused activations other bits
 * than the ops they replace on another machine, and the LSTM (plain CPU_HOT) other bits
 * than its Sigmoid op. */
#define CPU_HOT_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void cpu_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void cpu_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n);
void cpu_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n);
void cpu_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n);

static inline bool cpu_is_half(FloeDType dt) { return dt == FLOE_F16 || dt == FLOE_BF16; }

/* The rows above for a half dtype dt (f16 or bf16) chosen at run time. */
void cpu_half_to_f32_row(float *dst, const void *src, int64_t n, FloeDType dt);
void cpu_f32_to_half_row(void *dst, const float *src, int64_t n, FloeDType dt);

/* Elements per f32 staging chunk of half-precision work done in stack buffers (a kernel
 * keeps up to three of them live). */
#define CPU_HALF_CHUNK 512

/* Whole arrays of n elements: dt (f16 or bf16) to f32 when widen, else f32 to dt; split
 * over the pool when large. */
void cpu_convert_half(FloeDType dt, bool widen, const void *src, void *dst, int64_t n);

/* f16 / bf16 work done in f32 (widen the operands, compute, round the result once): one
 * temporary block of ctx (freed with its temporaries) holding the n inputs src[k] (count[k]
 * elements each; count 0: none) widened, in order, then room for out_n results; wide[k] and
 * *out (out may be NULL) point into it. Returns ctx_allocate_temp's code (no error
 * recorded). */
floe_code cpu_half_widen_temp(FloeKernelContext *ctx, FloeDType dt, int n,
                              const void *const *src, const int64_t *count, int64_t out_n,
                              float **wide, float **out);

/* Element i of data of a float dtype (f32, f64, f16, bf16) as a double (others read 0), and
 * v stored there rounded to dt (others store nothing). */
static inline double cpu_float_load(FloeDType dt, const void *data, int64_t i) {
  switch (dt) {
    case FLOE_F32: return ((const float *)data)[i];
    case FLOE_F64: return ((const double *)data)[i];
    case FLOE_F16: return cpu_f16_to_f32(((const uint16_t *)data)[i]);
    case FLOE_BF16: return cpu_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return 0;
  }
}

static inline void cpu_float_store(FloeDType dt, void *data, int64_t i, double v) {
  switch (dt) {
    case FLOE_F32: ((float *)data)[i] = (float)v; break;
    case FLOE_F64: ((double *)data)[i] = v; break;
    case FLOE_F16: ((uint16_t *)data)[i] = cpu_f32_to_f16((float)v); break;
    case FLOE_BF16: ((uint16_t *)data)[i] = cpu_f32_to_bf16((float)v); break;
    default: break;
  }
}

/* ------------------------------------------------------------------------------------ */
/* Shapes. */

/* Enough for "[" + 8 dims of 20 digits + commas + "]". */
#define CPU_SHAPE_STR_MAX 192

/* Writes "[2,3]" ("[]" for a scalar) into buf and returns buf. */
char *cpu_shape_str(char *buf, size_t len, int rank, const int64_t *dims);

/* ------------------------------------------------------------------------------------ */
/* NumPy broadcasting of up to three inputs.
 *
 * A plan collapses the output shape: dims of size 1 are dropped and neighbouring dims in which
 * every input is either full or broadcast are merged, so [N,H,W,C] + [C] becomes [N*H*W, C].
 * Each input gets an element stride per collapsed dim, 0 where it is broadcast; the innermost
 * stride is always 0 or 1, so a kernel's inner loop is contiguous or reads a scalar. */

#define CPU_BCAST_MAX_INPUTS 3

typedef struct CpuBroadcast {
  int num_inputs;
  int rank;                    /* collapsed rank, 1..FLOE_MAX_DIMS */
  int64_t dims[FLOE_MAX_DIMS]; /* collapsed output dims, innermost last */
  int64_t strides[CPU_BCAST_MAX_INPUTS][FLOE_MAX_DIMS]; /* element strides, 0 = broadcast */
  int64_t num_elements;        /* of the output */
} CpuBroadcast;

/* Output shape of broadcasting n shapes (1 <= n <= 3) into out_rank / out_dims (room for
 * FLOE_MAX_DIMS). Returns 0, or -1 when two dims differ and neither is 1. */
int cpu_broadcast_shape(int n, const int *ranks, const int64_t *const *dims, int *out_rank,
                        int64_t *out_dims);

/* Builds the plan for inputs whose shapes broadcast to out_rank / out_dims. */
void cpu_broadcast_plan(CpuBroadcast *p, int n, const int *ranks, const int64_t *const *dims,
                        int out_rank, const int64_t *out_dims);

/* Both of the above for a kernel's input tensors. On incompatible shapes records
 * "incompatible shapes for broadcasting: [2,3] vs [4]" on ctx and returns its code. */
floe_code cpu_broadcast_tensors(FloeKernelContext *ctx, int n, const FloeTensor *const *in,
                                int *out_rank, int64_t *out_dims, CpuBroadcast *p);

/* Walks output elements [begin, end) of a plan as runs along the innermost collapsed dim. */
typedef struct CpuBroadcastIter {
  const CpuBroadcast *p;
  int64_t pos, end;                  /* next output element; one past the last */
  int64_t idx[FLOE_MAX_DIMS];        /* multi-index of pos in the collapsed dims */
  int64_t off[CPU_BCAST_MAX_INPUTS]; /* element offset of each input at pos */
} CpuBroadcastIter;

void cpu_broadcast_iter_init(CpuBroadcastIter *it, const CpuBroadcast *p, int64_t begin,
                             int64_t end);

/* Next run: output elements [*pos, *pos + len), input k starting at element off[k] with step
 * p->strides[k][p->rank - 1] (0 or 1). Returns len, 0 when the range is done. */
int64_t cpu_broadcast_iter_next(CpuBroadcastIter *it, int64_t *pos, int64_t *off);

/* ------------------------------------------------------------------------------------ */
/* Threads. */

/* Total cost (n * cost_per_unit, nanoseconds-ish) below which work runs inline: waking the
 * pool costs a few microseconds. */
#define CPU_PARALLEL_MIN_COST 32768

/* host->parallel_for, except that small work (or a one-thread pool) runs as fn(arg, 0, n)
 * on the calling thread. */
void cpu_parallel_for(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg);

/* Elements [0, n) in shards that are multiples of CPU_PARALLEL_BLOCK elements (except the
 * last), so shards never share a cache line of a contiguous output; fn gets element ranges. */
#define CPU_PARALLEL_BLOCK 4096
void cpu_parallel_elements(int64_t n, int64_t cost_per_element, FloeParallelFn fn, void *arg);

/* Output 0 with rank and dims, written over the first of the n inputs in `inputs` the core
 * lets this call reuse (host->ctx_reuse_input, ABI 1.7: its last reader, nothing else holds
 * it, the output's dtype and dims), else newly allocated. *out is borrowed. The kernel must
 * then compute each element from the inputs' elements at the same place, reading before it
 * writes; restrict-qualified rows then go through a chunk of CPU_OVER_CHUNK bytes in L1
 * (x -> chunk -> y), never seeing one memory as two objects. */
floe_code cpu_output_over(FloeKernelContext *ctx, const int *inputs, int n, int rank,
                          const int64_t *dims, FloeTensor **out);

/* Bytes of the L1 chunk an in-place row goes through. */
#define CPU_OVER_CHUNK 4096

/* The calling thread's OpenMP thread count (the runtime oneDNN brought in; 1 without one),
 * and setting it to n for this thread alone: cpu_omp_single() returns the count to hand back
 * to cpu_omp_restore() afterwards (0: nothing was changed). oneDNN threads a call over its
 * OpenMP team; work already cut into shards on the shared pool runs each shard with one. */
int cpu_omp_threads(void);
int cpu_omp_single(void);
void cpu_omp_restore(int saved);

/* Per-thread scratch: a block of at least `bytes` (64-byte aligned) that belongs to the
 * calling thread and is handed back to it by its later calls for the same slot, so that a
 * kernel's temporaries stay in the cache of the core that uses them instead of a new block
 * per call (which the allocator hands to whichever thread asks next). Valid until this
 * thread's next call for the same slot; the caller must not keep it past its own call, nor
 * free it: the thread's blocks are freed when it exits. NULL when out of memory. Slots are
 * independent blocks, for buffers in use at the same time. */
enum { CPU_SCRATCH_DNNL, CPU_SCRATCH_PART, CPU_SCRATCH_SLOTS };
void *cpu_thread_scratch(int slot, size_t bytes);

/* Flushes denormals to zero on this thread (x86 MXCSR FTZ and DAZ, as TensorFlow runs its
 * kernels) until cpu_denormals_restore(the returned state). For loops whose values decay
 * geometrically into the denormal range (optimiser slots), where x86 is ~50x slower. */
static inline unsigned cpu_denormals_flush(void) {
#if defined(__x86_64__) || defined(__SSE2__)
  unsigned csr = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
  return csr;
#else
  return 0;
#endif
}

static inline void cpu_denormals_restore(unsigned state) {
#if defined(__x86_64__) || defined(__SSE2__)
  __builtin_ia32_ldmxcsr(state);
#else
  (void)state;
#endif
}

/* ------------------------------------------------------------------------------------ */
/* f32 exp and log written with selects instead of branches so gcc vectorises loops calling
 * them (libm's are scalar calls; the selects need -fno-trapping-math, see elementwise.c).
 * Error below 1 ulp against a double libm; Inf, NaN, 0 and subnormals handled. */

/* The reduction shared by the two exps below: p = exp(r) in about [0.7, 1.42] and n, with
 * exp(c) = p 2^n for c clamped to [-104, 89]. */
static inline float cpu_exp_reduce_f32(float c, int32_t *n) {
  /* n = round(c / ln2) with the 1.5 * 2^23 trick (no libm call), then Cody-Waite c - n ln2. */
  float fn = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  *n = (int32_t)fn;
  return p * (r * r) + r + 1.0f;
}

static inline float cpu_exp_f32(float x) {
  float c = x != x ? 0.0f : x; /* no NaN reaches the conversion to an integer */
  c = c < -104.0f ? -104.0f : c; /* exp(-104) rounds to 0 */
  c = c > 89.0f ? 89.0f : c;     /* exp(89) overflows to Inf */
  int32_t n;
  float p = cpu_exp_reduce_f32(c, &n);
  /* 2^n as two factors so n in [-150, 128] needs no special case for subnormals or Inf: the
   * first product is exact, the second rounds once (to p 2^n). */
  int32_t n1 = n >> 1, n2 = n - n1; /* each in [-75, 64] */
  float s1 = cpu_bits_f32((uint32_t)(n1 + 127) << 23);
  float s2 = cpu_bits_f32((uint32_t)(n2 + 127) << 23);
  float y = (p * s1) * s2;
  return x != x ? x : y;
}

/* cpu_exp_f32 of c <= 0, bit for bit, in fewer operations (the sigmoid's exp(-|x|), which is
 * most of its cost): n is in [-150, 0], so p 2^(n + 64) is exact and normal and one rounding
 * by 2^-64 gives p 2^n, subnormals included. A NaN gives 0: the caller keeps its NaN. */
static inline float cpu_exp_nonpos_f32(float c) {
  c = c >= -104.0f ? c : -104.0f; /* one max; a NaN becomes -104 too */
  int32_t n;
  float p = cpu_exp_reduce_f32(c, &n);
  return (p * cpu_bits_f32((uint32_t)(n + 127 + 64) << 23)) * 5.42101086242752217e-20f;
}

static inline float cpu_log_f32(float x) {
  /* Subnormals: scale by 2^23 first. */
  int tiny = x < 1.17549435e-38f;
  float xs = tiny ? x * 8388608.0f : x;
  uint32_t u = cpu_f32_bits(xs);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 126 - (tiny ? 23 : 0);
  float m = cpu_bits_f32((u & 0x807fffffu) | 0x3f000000u); /* in [0.5, 1) */
  int lo = m < 0.707106781186547524f;
  e = lo ? e - 1 : e;
  m = lo ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  float fe = (float)e;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y + fe * 0.693359375f;
  r = x == 0.0f ? -__builtin_inff() : r;
  r = x < 0.0f ? __builtin_nanf("") : r;
  r = x == __builtin_inff() || x != x ? x : r;
  return r;
}

/* Shared by the activations (elementwise.c) and their gradients (grad_elementwise.c), so a
 * gradient differentiates exactly the function the forward op computes. */
static inline float cpu_erfc_f32(float x) {
  /* Chebyshev fit of Numerical Recipes (erfcc): relative error < 1.2e-7 everywhere, so the
   * tail keeps its relative accuracy (1 + erf(x) would cancel). */
  float z = fabsf(x);
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  float r = t * cpu_exp_f32(p - z * z);
  return x >= 0.0f ? r : 2.0f - r;
}

/* Shared by Elu (elementwise.c) and _FusedConv's activations (conv_nd.c). */
static inline float cpu_expm1_f32(float x) {
  /* exp(x) - 1 cancels near 0: there the Taylor series to x^7 is exact to < 1 ulp. */
  float p = 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  p = p * (x * x) + x;
  float e = cpu_exp_f32(x) - 1.0f;
  return fabsf(x) < 0.34657359f ? p : e;
}

static inline float cpu_sigmoid_f32(float x) {
  /* exp of -|x| never overflows, so the result stays accurate far into the tails. */
  float e = cpu_exp_nonpos_f32(-fabsf(x));
  float r = 1.0f / (1.0f + e);
  float y = x >= 0.0f ? r : e * r;
  return x != x ? x : y;
}

static inline double cpu_sigmoid_f64(double x) {
  double e = exp(-fabs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Shared by Tanh (elementwise.c) and the LSTM cell (lstm.c). */
static inline float cpu_tanh_f32(float x) {
  /* Cephes tanhf: odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above. */
  float z = fabsf(x), s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  float small = p * s * x + x;
  float big = 1.0f - 2.0f / (cpu_exp_f32(z + z) + 1.0f);
  return z < 0.625f ? small : copysignf(big, x);
}

/* The optional attributes of the parameterised activations and their gradients:
 * "approximate" (Gelu) and "alpha" (LeakyRelu, Elu). Absent ones keep the values passed in;
 * a wrong kind is recorded on init and returned. */
floe_code cpu_activation_attrs(const FloeHostApi *host, FloeKernelInit *init, int *approximate,
                               double *alpha);

#endif
