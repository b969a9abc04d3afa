/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_util.c - helpers shared by the CPU kernels (see cpu_util.h). */
/* Vectorise whatever CFLAGS say (at -O2 gcc's "very cheap" model vectorises almost none of
 * these loops), and let selects such as `x > 0 ? x : a * x` become vector blends: FP
 * exception flags are never read. */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include "cpu_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------ */
/* Half-precision rows. */


CPU_HOT void cpu_f16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(src[i]);
}

CPU_HOT void cpu_f32_to_f16_row(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

CPU_HOT void cpu_bf16_to_f32_row(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(src[i]);
}

CPU_HOT void cpu_f32_to_bf16_row(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cpu_f32_to_bf16(src[i]);
}

void cpu_half_to_f32_row(float *dst, const void *src, int64_t n, FloeDType dt) {
  if (dt == FLOE_F16)
    cpu_f16_to_f32_row(dst, src, n);
  else
    cpu_bf16_to_f32_row(dst, src, n);
}

void cpu_f32_to_half_row(void *dst, const float *src, int64_t n, FloeDType dt) {
  if (dt == FLOE_F16)
    cpu_f32_to_f16_row(dst, src, n);
  else
    cpu_f32_to_bf16_row(dst, src, n);
}

typedef struct HalfConvert {
  FloeDType dt;
  bool widen;
  const void *src;
  void *dst;
} HalfConvert;

static void half_convert_range(void *arg, int64_t begin, int64_t end) {
  const HalfConvert *c = arg;
  if (c->widen)
    cpu_half_to_f32_row((float *)c->dst + begin, (const uint16_t *)c->src + begin,
                        end - begin, c->dt);
  else
    cpu_f32_to_half_row((uint16_t *)c->dst + begin, (const float *)c->src + begin,
                        end - begin, c->dt);
}

void cpu_convert_half(FloeDType dt, bool widen, const void *src, void *dst, int64_t n) {
  HalfConvert c = {dt, widen, src, dst};
  cpu_parallel_elements(n, 1, half_convert_range, &c);
}

floe_code cpu_half_widen_temp(FloeKernelContext *ctx, FloeDType dt, int n,
                              const void *const *src, const int64_t *count, int64_t out_n,
                              float **wide, float **out) {
  int64_t total = out_n;
  for (int k = 0; k < n; k++) total += count[k];
  float *buf;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)total * sizeof(float), (void **)&buf);
  if (rc != FLOE_OK) return rc;
  for (int k = 0; k < n; k++) {
    wide[k] = buf;
    cpu_convert_half(dt, true, src[k], buf, count[k]);
    buf += count[k];
  }
  if (out) *out = buf;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Shapes and broadcasting. */

char *cpu_shape_str(char *buf, size_t len, int rank, const int64_t *dims) {
  size_t at = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  at += (size_t)snprintf(buf + at, len - at, "[");
  for (int i = 0; i < rank && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

int cpu_broadcast_shape(int n, const int *ranks, const int64_t *const *dims, int *out_rank,
                        int64_t *out_dims) {
  int rank = 0;
  for (int k = 0; k < n; k++)
    if (ranks[k] > rank) rank = ranks[k];
  for (int d = 0; d < rank; d++) {
    int64_t size = 1;
    for (int k = 0; k < n; k++) {
      int i = d - (rank - ranks[k]); /* inputs are aligned on their last dim */
      if (i < 0 || dims[k][i] == 1) continue;
      if (size != 1 && size != dims[k][i]) return -1;
      size = dims[k][i];
    }
    out_dims[d] = size;
  }
  *out_rank = rank;
  return 0;
}

void cpu_broadcast_plan(CpuBroadcast *p, int n, const int *ranks, const int64_t *const *dims,
                        int out_rank, const int64_t *out_dims) {
  /* full[d] bit k: input k spans output dim d (else it is broadcast along it). */
  unsigned full[FLOE_MAX_DIMS];
  int rank = 0;
  p->num_inputs = n;
  p->num_elements = 1;
  for (int d = 0; d < out_rank; d++) {
    p->num_elements *= out_dims[d];
    if (out_dims[d] == 1) continue; /* size-1 dims move nothing */
    unsigned f = 0;
    for (int k = 0; k < n; k++) {
      int i = d - (out_rank - ranks[k]);
      if (i >= 0 && dims[k][i] == out_dims[d]) f |= 1u << k;
    }
    if (rank > 0 && full[rank - 1] == f) {
      p->dims[rank - 1] *= out_dims[d];
    } else {
      full[rank] = f;
      p->dims[rank++] = out_dims[d];
    }
  }
  if (rank == 0) {
    /* One element: every input has exactly one, so a unit stride reads it. */
    p->rank = 1;
    p->dims[0] = 1;
    for (int k = 0; k < n; k++) p->strides[k][0] = 1;
    return;
  }
  p->rank = rank;
  for (int k = 0; k < n; k++) {
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; d--) {
      if (full[d] & (1u << k)) {
        p->strides[k][d] = step;
        step *= p->dims[d];
      } else {
        p->strides[k][d] = 0;
      }
    }
  }
}

floe_code cpu_output_over(FloeKernelContext *ctx, const int *inputs, int n, int rank,
                          const int64_t *dims, FloeTensor **out) {
  if (FLOE_HAS_FIELD(cpu_host, FloeHostApi, ctx_reuse_input))
    for (int k = 0; k < n; k++)
      if (cpu_host->ctx_reuse_input(ctx, inputs[k], 0, rank, dims, out) == FLOE_OK)
        return FLOE_OK;
  return cpu_host->ctx_allocate_output(ctx, 0, rank, dims, out);
}

floe_code cpu_broadcast_tensors(FloeKernelContext *ctx, int n, const FloeTensor *const *in,
                                int *out_rank, int64_t *out_dims, CpuBroadcast *p) {
  int ranks[CPU_BCAST_MAX_INPUTS] = {0};
  const int64_t *dims[CPU_BCAST_MAX_INPUTS] = {NULL};
  for (int k = 0; k < n; k++) {
    ranks[k] = cpu_host->tensor_rank(in[k]);
    dims[k] = cpu_host->tensor_dims(in[k]);
  }
  if (cpu_broadcast_shape(n, ranks, dims, out_rank, out_dims) != 0) {
    char s[CPU_BCAST_MAX_INPUTS * (CPU_SHAPE_STR_MAX + 4)];
    size_t at = 0;
    for (int k = 0; k < n; k++) {
      if (k) at += (size_t)snprintf(s + at, sizeof s - at, " vs ");
      cpu_shape_str(s + at, sizeof s - at, ranks[k], dims[k]);
      at += strlen(s + at);
    }
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "incompatible shapes for broadcasting: %s", s);
  }
  if (p) cpu_broadcast_plan(p, n, ranks, dims, *out_rank, out_dims);
  return FLOE_OK;
}

void cpu_broadcast_iter_init(CpuBroadcastIter *it, const CpuBroadcast *p, int64_t begin,
                             int64_t end) {
  it->p = p;
  it->pos = begin;
  it->end = end;
  for (int k = 0; k < p->num_inputs; k++) it->off[k] = 0;
  int64_t rest = begin;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t i = p->dims[d] ? rest % p->dims[d] : 0;
    rest = p->dims[d] ? rest / p->dims[d] : 0;
    it->idx[d] = i;
    for (int k = 0; k < p->num_inputs; k++) it->off[k] += i * p->strides[k][d];
  }
}

int64_t cpu_broadcast_iter_next(CpuBroadcastIter *it, int64_t *pos, int64_t *off) {
  const CpuBroadcast *p = it->p;
  int inner = p->rank - 1, n = p->num_inputs;
  if (it->pos >= it->end) return 0;
  int64_t len = p->dims[inner] - it->idx[inner];
  if (len > it->end - it->pos) len = it->end - it->pos;
  *pos = it->pos;
  for (int k = 0; k < n; k++) off[k] = it->off[k];

  it->pos += len;
  it->idx[inner] += len;
  for (int k = 0; k < n; k++) it->off[k] += len * p->strides[k][inner];
  if (it->idx[inner] < p->dims[inner]) return len;
  /* End of a row: carry into the outer dims like an odometer. */
  for (int d = inner; d >= 0; d--) {
    if (d < inner) {
      it->idx[d]++;
      for (int k = 0; k < n; k++) it->off[k] += p->strides[k][d];
      if (it->idx[d] < p->dims[d]) break;
    }
    it->idx[d] = 0;
    for (int k = 0; k < n; k++) it->off[k] -= p->dims[d] * p->strides[k][d];
  }
  return len;
}

/* ------------------------------------------------------------------------------------ */
/* Threads. */

void cpu_parallel_for(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg) {
  if (n <= 0) return;
  int64_t cost = cost_per_unit > 0 ? cost_per_unit : 1;
  if (n == 1 || n < CPU_PARALLEL_MIN_COST / cost || cpu_host->num_threads() <= 1) {
    fn(arg, 0, n);
    return;
  }
  cpu_host->parallel_for(n, cost, fn, arg);
}

/* Weak: the plugin links no OpenMP runtime itself (oneDNN brings one), so it never loads a
 * second one. */
extern int omp_get_max_threads(void) __attribute__((weak));
extern void omp_set_num_threads(int n) __attribute__((weak));

int cpu_omp_threads(void) { return omp_get_max_threads ? omp_get_max_threads() : 1; }

int cpu_omp_single(void) {
  int n;
  if (!omp_get_max_threads || !omp_set_num_threads || (n = omp_get_max_threads()) <= 1) return 0;
  omp_set_num_threads(1);
  return n;
}

void cpu_omp_restore(int saved) {
  if (saved > 1 && omp_set_num_threads) omp_set_num_threads(saved);
}

typedef struct ThreadScratch {
  void *mem[CPU_SCRATCH_SLOTS];
  size_t cap[CPU_SCRATCH_SLOTS];
} ThreadScratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_free(void *p) {
  ThreadScratch *t = p;
  for (int i = 0; i < CPU_SCRATCH_SLOTS; i++) free(t->mem[i]);
  free(t);
}

static void scratch_key_make(void) {
  scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

void *cpu_thread_scratch(int slot, size_t bytes) {
  if (slot < 0 || slot >= CPU_SCRATCH_SLOTS) return NULL;
  pthread_once(&scratch_once, scratch_key_make);
  if (!scratch_key_ok) return NULL;
  ThreadScratch *t = pthread_getspecific(scratch_key);
  if (!t) {
    if (!(t = calloc(1, sizeof *t))) return NULL;
    if (pthread_setspecific(scratch_key, t) != 0) {
      free(t);
      return NULL;
    }
  }
  if (t->mem[slot] && bytes <= t->cap[slot]) return t->mem[slot];
  /* Grows by at least half, so a thread whose parts grow a little at a time reallocates
   * seldom. */
  size_t want = bytes + bytes / 2;
  want = (want + 63) & ~(size_t)63;
  void *m = aligned_alloc(64, want);
  if (!m) return NULL;
  free(t->mem[slot]);
  t->mem[slot] = m;
  t->cap[slot] = want;
  return m;
}

typedef struct BlockJob {
  FloeParallelFn fn;
  void *arg;
  int64_t n;
} BlockJob;

static void block_range(void *arg, int64_t begin, int64_t end) {
  const BlockJob *j = arg;
  int64_t e = end * CPU_PARALLEL_BLOCK;
  j->fn(j->arg, begin * CPU_PARALLEL_BLOCK, e < j->n ? e : j->n);
}

void cpu_parallel_elements(int64_t n, int64_t cost_per_element, FloeParallelFn fn, void *arg) {
  if (n <= 0) return;
  int64_t cost = cost_per_element > 0 ? cost_per_element : 1;
  if (n <= CPU_PARALLEL_BLOCK || n < CPU_PARALLEL_MIN_COST / cost ||
      cpu_host->num_threads() <= 1) {
    fn(arg, 0, n);
    return;
  }
  BlockJob j = {fn, arg, n};
  cpu_host->parallel_for((n + CPU_PARALLEL_BLOCK - 1) / CPU_PARALLEL_BLOCK,
                         cost * CPU_PARALLEL_BLOCK, block_range, &j);
}

floe_code cpu_activation_attrs(const FloeHostApi *host, FloeKernelInit *init, int *approximate,
                               double *alpha) {
  const FloeAttrs *attrs = host->init_attrs(init);
  floe_code rc = host->attr_bool(attrs, "approximate", approximate);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute approximate must be a bool");
  rc = host->attr_float(attrs, "alpha", alpha);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute alpha must be a float");
  return FLOE_OK;
}
