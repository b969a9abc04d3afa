/* SPDX-License-Identifier: Apache-2.0 */
/* random.c - RandomUniform, RandomNormal and TruncatedNormal, the stateless
 * StatelessRandomUniform and StatelessRandomNormal, and LogUniformCandidateSampler, on a
 * counter-based generator.
 *
 * Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) maps a 128-bit counter and a 64-bit key to four 32-bit words. Each output element
 * has a fixed place in that counter space, so values depend only on (seed, seed2, the
 * node's call number c, the element index i): never on thread count or sharding.
 *
 * Layout of one draw (documented for reproducers, e.g. the tests):
 *   key      = seed ^ mix64(c)        (mix64 = the splitmix64 finaliser, mix64(0) = 0)
 *   counter  = {lo32(b), hi32(b), lo32(seed2), hi32(seed2)}, b = block | attempt << 48
 *   f32/f16/bf16: element i uses block i/4, word i%4; f64: block i/2, words 2(i%2), 2(i%2)+1
 *     combined as (w_even << 32 | w_odd).
 *   Uniform [0,1): the top p bits of the word(s) times 2^-p, p = 24 (f32), 11 (f16), 8 (bf16),
 *     53 (f64): exact in the dtype, so never rounded up to 1.
 *   Normal (Box-Muller): f32 family, words (w0,w1) give elements 4k,4k+1 and (w2,w3) give
 *     4k+2,4k+3; f64, the two 64-bit values give elements 2k, 2k+1. u1 = (top p bits + 1)
 *     2^-p in (0,1], u2 = top p bits 2^-p (p = 24 or 53): z = sqrt(-2 ln u1) (cos, sin)(2 pi
 *     u2), computed in f64 with libm for f64, and in f32 for the f32 family with vectorised
 *     log and sincos (within about 1e-6 of the exact formula, before rounding to f16/bf16).
 *   TruncatedNormal: an element with |z| > 2 is drawn again from the same position of block
 *     (its block | attempt << 48), attempt = 1, 2, ... until |z| <= 2.
 *
 * Stateless ops draw what the stateful op with seed = seed[0], seed2 = seed[1] draws on its
 * first call (c = 0).
 *
 * seed = seed2 = 0 (unseeded): seed is drawn once per process, at the first unseeded node,
 * from the clock and pid, and seed2 is a per-process serial number of the node, so
 * unseeded nodes differ from each other and from one program run to the next.
 */
/* Lets the selects of the vectorised log and sincos be if-converted (no FP traps are ever
 * enabled). */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "cpu_util.h"

/* Philox blocks computed together, laid out so the rounds vectorise. */
#define RANDOM_BATCH 64
/* Resampling a truncated normal this many times has probability 0.0455^65535: unreachable. */
#define RANDOM_MAX_ATTEMPTS 65535

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

enum { DIST_UNIFORM = 1, DIST_NORMAL, DIST_TRUNCATED };

typedef struct RandomState {
  int dist;
  uint64_t seed, seed2;
  _Atomic uint64_t calls; /* runs of the node so far: the call number c of the next run */
} RandomState;

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Ten Philox rounds on one counter c with key (k0, k1). */
static inline void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
#pragma GCC unroll 10
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = y0;
    c[1] = (uint32_t)p1;
    c[2] = y2;
    c[3] = (uint32_t)p0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
}

/* One draw's parameters, shared by all shards. */
typedef struct Draw {
  int dist;
  FloeDType dt;
  uint32_t k0, k1; /* key */
  uint32_t c2, c3; /* counter words 2 and 3: seed2 */
  int64_t n;       /* elements */
  void *out;
} Draw;

/* The four words of block b. */
static inline void philox_block(const Draw *d, uint64_t b, uint32_t w[4]) {
  w[0] = (uint32_t)b;
  w[1] = (uint32_t)(b >> 32);
  w[2] = d->c2;
  w[3] = d->c3;
  philox(w, d->k0, d->k1);
}

/* Blocks b0 .. b0 + RANDOM_BATCH - 1 as x[word][lane]: lanes are independent, so the loop
 * vectorises across them. */
static inline void philox_batch(const Draw *d, int64_t b0, uint32_t x[4][RANDOM_BATCH]) {
  for (int j = 0; j < RANDOM_BATCH; j++) {
    uint32_t w[4];
    philox_block(d, (uint64_t)(b0 + j), w);
    x[0][j] = w[0];
    x[1][j] = w[1];
    x[2][j] = w[2];
    x[3][j] = w[3];
  }
}

/* sin and cos of 2 pi u for u in [0, 1), with selects instead of branches so loops over it
 * vectorise: reduce to a quarter turn, then Cephes' polynomials on [-pi/4, pi/4]. */
static inline void sincos_2pi(float u, float *s, float *c) {
  int q = (int)(u * 4.0f + 0.5f); /* nearest quarter turn, 0..4 */
  float a = (u - (float)q * 0.25f) * 6.2831853071795864769f;
  float z = a * a;
  float sn = a + a * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
  float cs = 1.0f - 0.5f * z +
             z * z * (4.166664568e-2f + z * (-1.388731625e-3f + z * 2.443315711e-5f));
  float s0 = q & 1 ? cs : sn, c0 = q & 1 ? sn : cs;
  *s = q & 2 ? -s0 : s0;
  *c = (q + 1) & 2 ? -c0 : c0;
}

/* Box-Muller, f32 family: -2 ln u1 with u1 in (0, 1] from word a, and u2 in [0, 1) from
 * word b; the pair is sqrt(-2 ln u1) (cos, sin)(2 pi u2). */
static inline float radius2_f32(uint32_t a) {
  return -2.0f * cpu_log_f32((float)(int32_t)((a >> 8) + 1) * 0x1p-24f);
}

static inline float angle_f32(uint32_t b) {
  return (float)(int32_t)(b >> 8) * 0x1p-24f;
}

static inline void normal_pair_f32(uint32_t a, uint32_t b, float *zc, float *zs) {
  float r = sqrtf(radius2_f32(a)), s, c;
  sincos_2pi(angle_f32(b), &s, &c);
  *zc = r * c;
  *zs = r * s;
}

/* The top 53 bits of (hi << 32 | lo) times 2^-53, through two exact int32 conversions
 * (which vectorise, unlike 64-bit ones). */
static inline double unit_f64(uint32_t hi, uint32_t lo) {
  int32_t top = (int32_t)(hi >> 6), low = (int32_t)((hi & 0x3fu) << 21 | lo >> 11);
  return (double)top * 0x1p-26 + (double)low * 0x1p-53;
}

/* Box-Muller in f64 on two 64-bit values: z[0] from cos, z[1] from sin. */
static void normal_pair_f64(const uint32_t w[4], double z[2]) {
  double u1 = unit_f64(w[0], w[1]) + 0x1p-53, u2 = unit_f64(w[2], w[3]);
  double r = sqrt(-2.0 * log(u1)), t = 6.28318530717958647692 * u2;
  z[0] = r * cos(t);
  z[1] = r * sin(t);
}

/* Element i of a truncated normal whose first draw fell outside [-2, 2]. */
static float truncated_f32(const Draw *d, int64_t i) {
  uint32_t w[4];
  for (uint64_t a = 1; a <= RANDOM_MAX_ATTEMPTS; a++) {
    philox_block(d, (uint64_t)(i / 4) | a << 48, w);
    int p = (int)(i % 4) & ~1;
    float z[2];
    normal_pair_f32(w[p], w[p + 1], &z[0], &z[1]);
    if (fabsf(z[i & 1]) <= 2.0f) return z[i & 1];
  }
  return 0.0f;
}

static double truncated_f64(const Draw *d, int64_t i) {
  uint32_t w[4];
  for (uint64_t a = 1; a <= RANDOM_MAX_ATTEMPTS; a++) {
    philox_block(d, (uint64_t)(i / 2) | a << 48, w);
    double z[2];
    normal_pair_f64(w, z);
    if (fabs(z[i & 1]) <= 2.0) return z[i & 1];
  }
  return 0.0;
}

/* Store v[0..n) as elements [first, first + n) of the output in its dtype. */
static void store_f32(const Draw *d, int64_t first, const float *v, int n) {
  switch (d->dt) {
  case FLOE_F16:
  case FLOE_BF16: cpu_f32_to_half_row((uint16_t *)d->out + first, v, n, d->dt); break;
  default: memcpy((float *)d->out + first, v, (size_t)n * sizeof(float)); break;
  }
}

/* Blocks [begin, end) for f32, f16 and bf16 outputs: 4 elements per block. */
CPU_HOT
static void draw_f32(void *arg, int64_t begin, int64_t end) {
  const Draw *d = arg;
  int bits = d->dt == FLOE_F16 ? 11 : d->dt == FLOE_BF16 ? 8 : 24;
  float scale = 1.0f / (float)(1 << bits);
  for (int64_t b0 = begin; b0 < end; b0 += RANDOM_BATCH) {
    uint32_t x[4][RANDOM_BATCH];
    float v[4 * RANDOM_BATCH];
    philox_batch(d, b0, x);
    if (d->dist == DIST_UNIFORM) {
      int sh = 32 - bits;
      for (int j = 0; j < RANDOM_BATCH; j++) { /* int32 conversions: u32 ones do not vectorise */
        v[4 * j] = (float)(int32_t)(x[0][j] >> sh) * scale;
        v[4 * j + 1] = (float)(int32_t)(x[1][j] >> sh) * scale;
        v[4 * j + 2] = (float)(int32_t)(x[2][j] >> sh) * scale;
        v[4 * j + 3] = (float)(int32_t)(x[3][j] >> sh) * scale;
      }
    } else {
      /* normal_pair_f32 in three loops: libm's sqrtf (it may set errno) keeps the middle one
       * scalar, the other two vectorise. */
      float r[2][RANDOM_BATCH];
      for (int j = 0; j < RANDOM_BATCH; j++) {
        r[0][j] = radius2_f32(x[0][j]);
        r[1][j] = radius2_f32(x[2][j]);
      }
      for (int j = 0; j < RANDOM_BATCH; j++) {
        r[0][j] = sqrtf(r[0][j]);
        r[1][j] = sqrtf(r[1][j]);
      }
      for (int j = 0; j < RANDOM_BATCH; j++) {
        float s0, c0, s1, c1;
        sincos_2pi(angle_f32(x[1][j]), &s0, &c0);
        sincos_2pi(angle_f32(x[3][j]), &s1, &c1);
        v[4 * j] = r[0][j] * c0;
        v[4 * j + 1] = r[0][j] * s0;
        v[4 * j + 2] = r[1][j] * c1;
        v[4 * j + 3] = r[1][j] * s1;
      }
    }
    int64_t first = b0 * 4, last = (b0 + RANDOM_BATCH < end ? b0 + RANDOM_BATCH : end) * 4;
    if (last > d->n) last = d->n;
    if (d->dist == DIST_TRUNCATED)
      for (int64_t i = first; i < last; i++)
        if (fabsf(v[i - first]) > 2.0f) v[i - first] = truncated_f32(d, i);
    store_f32(d, first, v, (int)(last - first));
  }
}

/* Blocks [begin, end) for f64 outputs: 2 elements per block. */
CPU_HOT
static void draw_f64(void *arg, int64_t begin, int64_t end) {
  const Draw *d = arg;
  double *out = d->out;
  for (int64_t b0 = begin; b0 < end; b0 += RANDOM_BATCH) {
    uint32_t x[4][RANDOM_BATCH];
    double v[2 * RANDOM_BATCH];
    philox_batch(d, b0, x);
    if (d->dist == DIST_UNIFORM) {
      for (int j = 0; j < RANDOM_BATCH; j++) {
        v[2 * j] = unit_f64(x[0][j], x[1][j]);
        v[2 * j + 1] = unit_f64(x[2][j], x[3][j]);
      }
    } else {
      for (int j = 0; j < RANDOM_BATCH; j++)
        normal_pair_f64((const uint32_t[4]){x[0][j], x[1][j], x[2][j], x[3][j]}, v + 2 * j);
    }
    int64_t first = b0 * 2, last = (b0 + RANDOM_BATCH < end ? b0 + RANDOM_BATCH : end) * 2;
    if (last > d->n) last = d->n;
    for (int64_t i = first; i < last; i++) {
      double z = v[i - first];
      out[i] = d->dist == DIST_TRUNCATED && fabs(z) > 2.0 ? truncated_f64(d, i) : z;
    }
  }
}

/* The seed of unseeded nodes: drawn once per process. */
static uint64_t process_seed(void) {
  static _Atomic uint64_t seed; /* 0 until drawn */
  uint64_t s = atomic_load(&seed);
  if (s) return s;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t v = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
               mix64((uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&ts);
  if (!v) v = 1;
  uint64_t expected = 0;
  return atomic_compare_exchange_strong(&seed, &expected, v) ? v : expected;
}

/* s's seed, seed2 and call count from the node's seed / seed2 attributes. */
static void seed_state(const FloeHostApi *host, const FloeAttrs *a, RandomState *s) {
  static _Atomic uint64_t unseeded_nodes;
  int64_t seed = 0, seed2 = 0;
  if (host->attr_int(a, "seed", &seed) != FLOE_OK) seed = 0;
  if (host->attr_int(a, "seed2", &seed2) != FLOE_OK) seed2 = 0;
  s->seed = (uint64_t)seed;
  s->seed2 = (uint64_t)seed2;
  if (seed == 0 && seed2 == 0) {
    s->seed = process_seed();
    s->seed2 = atomic_fetch_add(&unseeded_nodes, 1) + 1;
  }
  atomic_init(&s->calls, 0);
}

static floe_code random_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  RandomState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->dist = (int)(intptr_t)user_data;
  seed_state(host, host->init_attrs(init), s);
  *state = s;
  return FLOE_OK;
}

static void random_destroy(void *state) {
  cpu_host->free(state);
}

/* Allocates output 0 with the shape held by input 0 (a 1-D i32/i64 tensor). */
static floe_code allocate_from_shape(FloeKernelContext *ctx, FloeTensor **y) {
  const FloeTensor *st = cpu_host->ctx_input(ctx, 0);
  FloeDType sdt = cpu_host->tensor_dtype(st);
  int64_t n = cpu_host->tensor_num_elements(st);
  char shape[CPU_SHAPE_STR_MAX];
  if ((sdt != FLOE_I32 && sdt != FLOE_I64) || cpu_host->tensor_rank(st) != 1 ||
      n > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "shape must be a 1-D i32/i64 tensor of at most %d values, got %s %s", FLOE_MAX_DIMS,
        cpu_host->dtype_name(sdt),
        cpu_shape_str(shape, sizeof shape, cpu_host->tensor_rank(st), cpu_host->tensor_dims(st)));
  int64_t dims[FLOE_MAX_DIMS];
  const void *sd = cpu_host->tensor_data(st);
  for (int64_t i = 0; i < n; i++)
    dims[i] = sdt == FLOE_I32 ? ((const int32_t *)sd)[i] : ((const int64_t *)sd)[i];
  for (int64_t i = 0; i < n; i++)
    if (dims[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "shape %s has a negative size",
                                     cpu_shape_str(shape, sizeof shape, (int)n, dims));
  return cpu_host->ctx_allocate_output(ctx, 0, (int)n, dims, y);
}

/* Fills y (non-empty) from key (seed ^ mix64(c)) and seed2, sharded over the pool. */
static void draw_into(FloeTensor *y, int dist, uint64_t key, uint64_t seed2) {
  Draw d;
  d.dist = dist;
  d.dt = cpu_host->tensor_dtype(y);
  d.n = cpu_host->tensor_num_elements(y);
  d.k0 = (uint32_t)key;
  d.k1 = (uint32_t)(key >> 32);
  d.c2 = (uint32_t)seed2;
  d.c3 = (uint32_t)(seed2 >> 32);
  d.out = cpu_host->tensor_data(y);
  FloeParallelFn fn = d.dt == FLOE_F64 ? draw_f64 : draw_f32;
  int per_block = d.dt == FLOE_F64 ? 2 : 4;
  int64_t blocks = (d.n + per_block - 1) / per_block;
  cpu_parallel_for(blocks, d.dist == DIST_UNIFORM ? 12 : 32, fn, &d); /* ns per block */
}

static floe_code random_compute(void *state, FloeKernelContext *ctx) {
  RandomState *s = state;
  FloeTensor *y;
  floe_code rc = allocate_from_shape(ctx, &y);
  if (rc != FLOE_OK) return rc;
  uint64_t c = atomic_fetch_add(&s->calls, 1); /* every run draws, even an empty one */
  if (cpu_host->tensor_num_elements(y) == 0) return FLOE_OK;
  draw_into(y, s->dist, s->seed ^ mix64(c), s->seed2);
  return FLOE_OK;
}

/* StatelessRandomUniform / StatelessRandomNormal: the stream of the stateful op with
 * seed = seed[0], seed2 = seed[1] on its first call (c = 0, mix64(0) = 0), so the output
 * depends only on (seed[0], seed[1], i). i32 seeds are sign-extended: [1, -1] as i32 and as
 * i64 draw the same numbers. user_data (the state) is the distribution. */
static floe_code stateless_compute(void *state, FloeKernelContext *ctx) {
  int dist = (int)(intptr_t)state;
  const FloeTensor *seed = cpu_host->ctx_input(ctx, 1);
  FloeDType sdt = cpu_host->tensor_dtype(seed);
  if ((sdt != FLOE_I32 && sdt != FLOE_I64) || cpu_host->tensor_rank(seed) != 1 ||
      cpu_host->tensor_num_elements(seed) != 2) {
    char shape[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "seed must be a 1-D i32/i64 tensor of 2 values, got %s %s",
        cpu_host->dtype_name(sdt),
        cpu_shape_str(shape, sizeof shape, cpu_host->tensor_rank(seed),
                      cpu_host->tensor_dims(seed)));
  }
  const void *sd = cpu_host->tensor_data(seed);
  int64_t s0 = sdt == FLOE_I32 ? ((const int32_t *)sd)[0] : ((const int64_t *)sd)[0];
  int64_t s1 = sdt == FLOE_I32 ? ((const int32_t *)sd)[1] : ((const int64_t *)sd)[1];
  FloeTensor *y;
  floe_code rc = allocate_from_shape(ctx, &y);
  if (rc != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(y) == 0) return FLOE_OK;
  draw_into(y, dist, (uint64_t)s0, (uint64_t)s1);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* LogUniformCandidateSampler (TensorFlow's, with its LogUniformSampler and
 * ExpectedCountHelper). Draw j of a call is element j of an f64 RandomUniform of the same
 * seeds and call number, mapped to floor(exp(u log(range_max + 1))) - 1 (mod range_max). */

/* A unique sample gives up after this many draws per id (unreachable for ranges whose
 * rarest id has a probability above 2^-40 or so: it guards ranges near 2^62). */
#define SAMPLER_MAX_TRIES_PER_ID 1000000

typedef struct SamplerState {
  RandomState r;
  int64_t num_true, num_sampled, range_max;
  int unique;
  double log_range; /* log(range_max + 1) */
} SamplerState;

static floe_code sampler_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                void **state) {
  const FloeAttrs *a = host->init_attrs(init);
  int64_t nt = 0, k = 0, range = 0;
  int unique = 0;
  if (host->attr_int(a, "num_true", &nt) != FLOE_OK ||
      host->attr_int(a, "num_sampled", &k) != FLOE_OK ||
      host->attr_int(a, "range_max", &range) != FLOE_OK ||
      host->attr_bool(a, "unique", &unique) != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "num_true, num_sampled, range_max and unique must be set");
  if (nt < 1 || k < 1 || range < 1)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "num_true (%lld), num_sampled (%lld) and range_max (%lld) must "
                                "be >= 1", (long long)nt, (long long)k, (long long)range);
  if (unique && k > range)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "num_sampled %lld is more than range_max %lld with unique=true",
                                (long long)k, (long long)range);
  SamplerState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  seed_state(host, a, &s->r);
  s->num_true = nt;
  s->num_sampled = k;
  s->range_max = range;
  s->unique = unique;
  s->log_range = log1p((double)range);
  *state = s;
  return FLOE_OK;
}

static void sampler_destroy(void *state) {
  cpu_host->free(state);
}

/* The probability of id v, and its expected count in a sample of k ids that took `tries`
 * draws (TF: the first-order p * k when no draw repeated, else 1 - (1 - p)^tries). */
static double sampler_prob(const SamplerState *s, int64_t v) {
  return log(((double)v + 2.0) / ((double)v + 1.0)) / s->log_range;
}

static float expected_count(double p, int64_t k, int64_t tries) {
  return (float)(tries == k ? p * (double)k : -expm1((double)tries * log1p(-p)));
}

/* Draw j of a call (Draw d holds the key and seed2). */
static int64_t sampler_draw(const SamplerState *s, const Draw *d, int64_t j) {
  uint32_t w[4];
  philox_block(d, (uint64_t)(j / 2), w);
  int p = (int)(j % 2) * 2;
  double e = exp(unit_f64(w[p], w[p + 1]) * s->log_range); /* in [1, range_max + 1] */
  int64_t v = e < 0x1p63 ? (int64_t)e : INT64_MAX;
  return (v - 1) % s->range_max;
}

/* Inserts v into the open-addressing set (cap a power of two, -1 = empty); 1 if new. */
static int set_insert(int64_t *set, int64_t cap, int64_t v) {
  uint64_t h = mix64((uint64_t)v + 1) & (uint64_t)(cap - 1);
  while (set[h] != -1) {
    if (set[h] == v) return 0;
    h = (h + 1) & (uint64_t)(cap - 1);
  }
  set[h] = v;
  return 1;
}

/* Fills ids[0..k) and *tries with the number of draws it took; errors are recorded on
 * ctx. */
static floe_code sampler_fill(const SamplerState *s, FloeKernelContext *ctx, const Draw *d,
                              int64_t *ids, int64_t *tries) {
  int64_t k = s->num_sampled;
  *tries = k;
  if (!s->unique) {
    for (int64_t j = 0; j < k; j++) ids[j] = sampler_draw(s, d, j);
    return FLOE_OK;
  }
  int64_t cap = 1;
  while (cap < 2 * k) cap *= 2;
  int64_t *set;
  if (cpu_host->ctx_allocate_temp(ctx, (size_t)cap * sizeof *set, (void **)&set) != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory for a set of %lld ids",
                                   (long long)k);
  memset(set, 0xff, (size_t)cap * sizeof *set); /* every slot -1 */
  int64_t n = 0, t = 0;
  int64_t limit = k > INT64_MAX / SAMPLER_MAX_TRIES_PER_ID ? INT64_MAX
                                                            : k * SAMPLER_MAX_TRIES_PER_ID;
  while (n < k) {
    if (t >= limit)
      return cpu_host->ctx_set_error(ctx, FLOE_OUT_OF_RANGE,
                                     "%lld distinct ids of %lld not found in %lld draws: "
                                     "sample fewer", (long long)k, (long long)s->range_max,
                                     (long long)t);
    int64_t v = sampler_draw(s, d, t++);
    if (set_insert(set, cap, v)) ids[n++] = v;
  }
  *tries = t;
  return FLOE_OK;
}

/* true_classes [batch, num_true] (i32 or i64, each in [0, range_max)) -> their expected
 * counts; sampled ids and theirs. */
static floe_code sampler_compute(void *state, FloeKernelContext *ctx) {
  SamplerState *s = state;
  const FloeTensor *tc = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(tc);
  int rank = cpu_host->tensor_rank(tc);
  const int64_t *td = cpu_host->tensor_dims(tc);
  if ((dt != FLOE_I32 && dt != FLOE_I64) || rank != 2 || td[1] != s->num_true) {
    char shape[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "true_classes must be i32/i64 [batch, %lld], got %s %s",
                                   (long long)s->num_true, cpu_host->dtype_name(dt),
                                   cpu_shape_str(shape, sizeof shape, rank, td));
  }
  int64_t nt = cpu_host->tensor_num_elements(tc), k = s->num_sampled;
  const void *tv = cpu_host->tensor_data(tc);
  for (int64_t i = 0; i < nt; i++) {
    int64_t v = dt == FLOE_I32 ? ((const int32_t *)tv)[i] : ((const int64_t *)tv)[i];
    if (v < 0 || v >= s->range_max)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "true_classes[%lld] = %lld is outside [0, range_max %lld)",
                                     (long long)i, (long long)v, (long long)s->range_max);
  }
  FloeTensor *ids_t, *true_t, *samp_t;
  const int64_t kd[1] = {k};
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 1, kd, &ids_t);
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_output(ctx, 1, 2, td, &true_t);
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_output(ctx, 2, 1, kd, &samp_t);
  if (rc != FLOE_OK) return rc;
  uint64_t c = atomic_fetch_add(&s->r.calls, 1);
  uint64_t key = s->r.seed ^ mix64(c);
  Draw d = {.k0 = (uint32_t)key, .k1 = (uint32_t)(key >> 32), .c2 = (uint32_t)s->r.seed2,
            .c3 = (uint32_t)(s->r.seed2 >> 32)};
  int64_t *ids = cpu_host->tensor_data(ids_t);
  int64_t tries;
  if ((rc = sampler_fill(s, ctx, &d, ids, &tries)) != FLOE_OK) return rc;
  float *sc = cpu_host->tensor_data(samp_t), *tcnt = cpu_host->tensor_data(true_t);
  for (int64_t j = 0; j < k; j++) sc[j] = expected_count(sampler_prob(s, ids[j]), k, tries);
  for (int64_t i = 0; i < nt; i++) {
    int64_t v = dt == FLOE_I32 ? ((const int32_t *)tv)[i] : ((const int64_t *)tv)[i];
    tcnt[i] = expected_count(sampler_prob(s, v), k, tries);
  }
  return FLOE_OK;
}

floe_code cpu_register_random(FloePluginRegistrar *reg) {
  static const struct {
    const char *op;
    int dist;
  } k[] = {
      {"RandomUniform", DIST_UNIFORM},
      {"RandomNormal", DIST_NORMAL},
      {"TruncatedNormal", DIST_TRUNCATED},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    floe_code rc = cpu_add_kernel(reg, k[i].op, "dtype", FLOE_DTYPES_FLOAT, 0, random_compute,
                                  random_create, random_destroy, (void *)(intptr_t)k[i].dist);
    if (rc != FLOE_OK) return rc;
  }
  floe_code rc = cpu_add_kernel(reg, "StatelessRandomUniform", "dtype", FLOE_DTYPES_FLOAT, 0,
                                stateless_compute, NULL, NULL, (void *)(intptr_t)DIST_UNIFORM);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "StatelessRandomNormal", "dtype", FLOE_DTYPES_FLOAT, 0,
                        stateless_compute, NULL, NULL, (void *)(intptr_t)DIST_NORMAL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "LogUniformCandidateSampler", "T",
                        FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64), 0, sampler_compute,
                        sampler_create, sampler_destroy, NULL);
  return rc;
}
