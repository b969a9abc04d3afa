/* random.c - RandomUniform, RandomNormal and TruncatedNormal on a counter-based generator.
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
 *     u2), computed in f32 for the f32 family and in f64 for f64.
 *   TruncatedNormal: an element with |z| > 2 is drawn again from the same position of block
 *     (its block | attempt << 48), attempt = 1, 2, ... until |z| <= 2.
 *
 * seed = seed2 = 0 (unseeded): seed is drawn once per process, at the first unseeded node,
 * from the clock and pid, and seed2 is a per-process serial number of the node, so
 * unseeded nodes differ from each other and from one program run to the next.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "cpu_util.h"

/* Philox blocks computed together, laid out so the rounds vectorise. */
#define RANDOM_BATCH 16
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

/* Ten Philox rounds on RANDOM_BATCH counters at once (x[word][lane]). */
static void philox_batch(uint32_t x[4][RANDOM_BATCH], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    for (int j = 0; j < RANDOM_BATCH; j++) {
      uint64_t p0 = (uint64_t)PHILOX_M0 * x[0][j];
      uint64_t p1 = (uint64_t)PHILOX_M1 * x[2][j];
      uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1][j] ^ k0;
      uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3][j] ^ k1;
      x[0][j] = y0;
      x[1][j] = (uint32_t)p1;
      x[2][j] = y2;
      x[3][j] = (uint32_t)p0;
    }
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
  int per_block;   /* elements per Philox block: 4, or 2 for f64 */
  void *out;
} Draw;

/* The four words of block b. */
static void philox_block(const Draw *d, uint64_t b, uint32_t w[4]) {
  uint32_t x[4][RANDOM_BATCH] = {{0}};
  x[0][0] = (uint32_t)b;
  x[1][0] = (uint32_t)(b >> 32);
  x[2][0] = d->c2;
  x[3][0] = d->c3;
  philox_batch(x, d->k0, d->k1);
  for (int i = 0; i < 4; i++) w[i] = x[i][0];
}

/* Box-Muller on one pair of words (f32 family): z[0] from cos, z[1] from sin. */
static inline void normal_pair_f32(uint32_t a, uint32_t b, float z[2]) {
  float u1 = (float)((a >> 8) + 1) * 0x1p-24f, u2 = (float)(b >> 8) * 0x1p-24f;
  float r = sqrtf(-2.0f * logf(u1)), t = 6.2831853071795864769f * u2;
  z[0] = r * cosf(t);
  z[1] = r * sinf(t);
}

static inline double normal_f64(uint64_t a, uint64_t b, int which) {
  double u1 = (double)((a >> 11) + 1) * 0x1p-53, u2 = (double)(b >> 11) * 0x1p-53;
  double r = sqrt(-2.0 * log(u1)), t = 6.28318530717958647692 * u2;
  return r * (which ? sin(t) : cos(t));
}

/* Element i of a truncated normal whose first draw fell outside [-2, 2]. */
static float truncated_f32(const Draw *d, int64_t i) {
  uint32_t w[4];
  for (uint64_t a = 1; a <= RANDOM_MAX_ATTEMPTS; a++) {
    philox_block(d, (uint64_t)(i / 4) | a << 48, w);
    int p = (int)(i % 4) & ~1;
    float z[2];
    normal_pair_f32(w[p], w[p + 1], z);
    if (fabsf(z[i & 1]) <= 2.0f) return z[i & 1];
  }
  return 0.0f;
}

static double truncated_f64(const Draw *d, int64_t i) {
  uint32_t w[4];
  for (uint64_t a = 1; a <= RANDOM_MAX_ATTEMPTS; a++) {
    philox_block(d, (uint64_t)(i / 2) | a << 48, w);
    double z = normal_f64((uint64_t)w[0] << 32 | w[1], (uint64_t)w[2] << 32 | w[3], (int)(i & 1));
    if (fabs(z) <= 2.0) return z;
  }
  return 0.0;
}

/* Store v[0..n) as elements [first, first + n) of the output in its dtype. */
static void store_f32(const Draw *d, int64_t first, const float *v, int n) {
  switch (d->dt) {
  case FLOE_F16: {
    uint16_t *o = (uint16_t *)d->out + first;
    for (int i = 0; i < n; i++) o[i] = cpu_f32_to_f16(v[i]);
    break;
  }
  case FLOE_BF16: {
    uint16_t *o = (uint16_t *)d->out + first;
    for (int i = 0; i < n; i++) o[i] = cpu_f32_to_bf16(v[i]);
    break;
  }
  default: memcpy((float *)d->out + first, v, (size_t)n * sizeof(float)); break;
  }
}

/* Blocks [begin, end) for f32, f16 and bf16 outputs. */
static void draw_f32(void *arg, int64_t begin, int64_t end) {
  const Draw *d = arg;
  int bits = d->dt == FLOE_F16 ? 11 : d->dt == FLOE_BF16 ? 8 : 24;
  float scale = ldexpf(1.0f, -bits);
  for (int64_t b0 = begin; b0 < end; b0 += RANDOM_BATCH) {
    uint32_t x[4][RANDOM_BATCH];
    for (int j = 0; j < RANDOM_BATCH; j++) {
      uint64_t b = (uint64_t)(b0 + j);
      x[0][j] = (uint32_t)b;
      x[1][j] = (uint32_t)(b >> 32);
      x[2][j] = d->c2;
      x[3][j] = d->c3;
    }
    philox_batch(x, d->k0, d->k1);
    float v[4 * RANDOM_BATCH];
    if (d->dist == DIST_UNIFORM) {
      for (int j = 0; j < RANDOM_BATCH; j++)
        for (int w = 0; w < 4; w++) v[4 * j + w] = (float)(x[w][j] >> (32 - bits)) * scale;
    } else {
      for (int j = 0; j < RANDOM_BATCH; j++) {
        normal_pair_f32(x[0][j], x[1][j], v + 4 * j);
        normal_pair_f32(x[2][j], x[3][j], v + 4 * j + 2);
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

/* Blocks [begin, end) for f64 outputs. */
static void draw_f64(void *arg, int64_t begin, int64_t end) {
  const Draw *d = arg;
  double *out = d->out;
  for (int64_t b0 = begin; b0 < end; b0 += RANDOM_BATCH) {
    uint32_t x[4][RANDOM_BATCH];
    for (int j = 0; j < RANDOM_BATCH; j++) {
      uint64_t b = (uint64_t)(b0 + j);
      x[0][j] = (uint32_t)b;
      x[1][j] = (uint32_t)(b >> 32);
      x[2][j] = d->c2;
      x[3][j] = d->c3;
    }
    philox_batch(x, d->k0, d->k1);
    int64_t first = b0 * 2, last = (b0 + RANDOM_BATCH < end ? b0 + RANDOM_BATCH : end) * 2;
    if (last > d->n) last = d->n;
    for (int64_t i = first; i < last; i++) {
      int j = (int)((i - first) / 2), h = (int)(i & 1);
      uint64_t a = (uint64_t)x[0][j] << 32 | x[1][j], b = (uint64_t)x[2][j] << 32 | x[3][j];
      if (d->dist == DIST_UNIFORM) {
        out[i] = (double)((h ? b : a) >> 11) * 0x1p-53;
      } else {
        double z = normal_f64(a, b, h);
        out[i] = d->dist == DIST_TRUNCATED && fabs(z) > 2.0 ? truncated_f64(d, i) : z;
      }
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

static floe_code random_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  static _Atomic uint64_t unseeded_nodes;
  const FloeAttrs *a = host->init_attrs(init);
  int64_t seed = 0, seed2 = 0;
  if (host->attr_int(a, "seed", &seed) != FLOE_OK) seed = 0;
  if (host->attr_int(a, "seed2", &seed2) != FLOE_OK) seed2 = 0;
  RandomState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->dist = (int)(intptr_t)user_data;
  s->seed = (uint64_t)seed;
  s->seed2 = (uint64_t)seed2;
  if (seed == 0 && seed2 == 0) {
    s->seed = process_seed();
    s->seed2 = atomic_fetch_add(&unseeded_nodes, 1) + 1;
  }
  atomic_init(&s->calls, 0);
  *state = s;
  return FLOE_OK;
}

static void random_destroy(void *state) {
  cpu_host->free(state);
}

static floe_code random_compute(void *state, FloeKernelContext *ctx) {
  RandomState *s = state;
  const FloeTensor *st = cpu_host->ctx_input(ctx, 0);
  FloeDType sdt = cpu_host->tensor_dtype(st);
  int64_t n = cpu_host->tensor_num_elements(st);
  if ((sdt != FLOE_I32 && sdt != FLOE_I64) || cpu_host->tensor_rank(st) != 1 ||
      n > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "shape must be a 1-D i32/i64 tensor of at most %d values, "
                                   "got %s of rank %d",
                                   FLOE_MAX_DIMS, cpu_host->dtype_name(sdt),
                                   cpu_host->tensor_rank(st));
  int64_t dims[FLOE_MAX_DIMS];
  const void *sd = cpu_host->tensor_data(st);
  for (int64_t i = 0; i < n; i++) {
    dims[i] = sdt == FLOE_I32 ? ((const int32_t *)sd)[i] : ((const int64_t *)sd)[i];
    if (dims[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "shape[%d] is %lld: sizes must be >= 0", (int)i,
                                     (long long)dims[i]);
  }
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, (int)n, dims, &y);
  if (rc != FLOE_OK) return rc;
  uint64_t c = atomic_fetch_add(&s->calls, 1); /* every run draws, even an empty one */
  Draw d;
  d.dist = s->dist;
  d.dt = cpu_host->tensor_dtype(y);
  d.n = cpu_host->tensor_num_elements(y);
  if (d.n == 0) return FLOE_OK;
  uint64_t key = s->seed ^ mix64(c);
  d.k0 = (uint32_t)key;
  d.k1 = (uint32_t)(key >> 32);
  d.c2 = (uint32_t)s->seed2;
  d.c3 = (uint32_t)(s->seed2 >> 32);
  d.per_block = d.dt == FLOE_F64 ? 2 : 4;
  d.out = cpu_host->tensor_data(y);
  FloeParallelFn fn = d.dt == FLOE_F64 ? draw_f64 : draw_f32;
  int64_t blocks = (d.n + d.per_block - 1) / d.per_block;
  cpu_parallel_for(blocks, d.dist == DIST_UNIFORM ? 8 : 40, fn, &d);
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
  return FLOE_OK;
}
