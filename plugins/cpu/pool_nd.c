/* SPDX-License-Identifier: Apache-2.0 */
/* pool_nd.c - the N-d Pool and MaxPoolWithIndices of the CPU plugin (core/graph/ops_conv.def).
 *
 * f32 Pool runs one oneDNN pooling primitive per call (cached per shape) whenever oneDNN's
 * rule is the op's: always for MAX and for AVG without counted padding (ceil_mode's extra
 * elements become padding oneDNN ignores), and for AVG with counted padding when no window
 * reaches past the padded input (oneDNN then divides by the whole window, as the op does).
 * Everything else runs the reference loop: MAX picks each window's first maximum and copies
 * that element (exact in every dtype), AVG sums in double. */
#include <dnnl.h>
#include <math.h>
#include <string.h>

#include "conv_util.h"
#include "cpu.h"
#include "cpu_util.h"
#include "window_nd.h"

typedef struct State {
  WndAttrs a;
  CpuDnnlCache cache;
} State;

static void state_destroy(void *state) {
  State *s = state;
  if (s->a.kind != WND_POOL_IDX) cpu_dnnl_cache_destroy(&s->cache);
  cpu_host->free(s);
}

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  floe_code rc = wnd_parse(host, init, *(const WndKind *)user_data, &s->a);
  if (rc == FLOE_OK && s->a.kind != WND_POOL_IDX) rc = cpu_dnnl_cache_init(&s->cache, host, init);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  *state = s;
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN (f32). */

/* The end padding that makes oneDNN produce g's output size (ceil_mode adds some). */
static int64_t dnnl_pad_end(const WndGeo *g, int j) {
  int64_t eff = (g->k[j] - 1) * g->d[j] + 1;
  int64_t need = (g->out[j] - 1) * g->s[j] + eff - g->in[j] - g->pb[j];
  return need > g->pe[j] ? need : g->pe[j];
}

/* oneDNN's rule matches the op's for g (see the top of the file). */
static bool dnnl_fits(const State *s, const WndGeo *g) {
  if (s->a.kind != WND_POOL_AVG || !s->a.include_pad) return true;
  for (int j = 0; j < 3; j++)
    if (dnnl_pad_end(g, j) != g->pe[j]) return false;
  return true;
}

/* Input elements from which one image's MAX pooling is shared across the pool's threads. */
#define POOL_ROWS_MIN_ELEMENTS (64 * 1024)

typedef struct Build {
  const State *s;
  const WndGeo *g;
} Build;

static dnnl_status_t data_md(dnnl_memory_desc_t *md, bool cf, const WndGeo *g, int64_t n,
                             const int64_t *sp) {
  int off = 3 - g->ns;
  int64_t st[5];
  wnd_strides(cf, g->ns, g->c, sp, st);
  dnnl_dims_t dims = {n, g->c}, strides = {st[0], st[1]};
  for (int j = 0; j < g->ns; j++) {
    dims[2 + j] = sp[off + j];
    strides[2 + j] = st[2 + off + j];
  }
  return dnnl_memory_desc_init_by_strides(md, 2 + g->ns, dims, dnnl_f32, strides);
}

static dnnl_status_t build_pool(const void *arg, dnnl_engine_t eng,
                                const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  const WndGeo *g = b->g;
  const WndAttrs *a = &b->s->a;
  int off = 3 - g->ns;
  dnnl_dims_t strides, kernel, dil, pad_l, pad_r;
  for (int j = 0; j < g->ns; j++) {
    strides[j] = g->s[off + j];
    kernel[j] = g->k[off + j];
    dil[j] = g->d[off + j] - 1;
    pad_l[j] = g->pb[off + j];
    pad_r[j] = dnnl_pad_end(g, off + j);
  }
  dnnl_alg_kind_t alg = a->kind == WND_POOL_MAX ? dnnl_pooling_max
                        : a->include_pad        ? dnnl_pooling_avg_include_padding
                                                : dnnl_pooling_avg_exclude_padding;
  dnnl_pooling_v2_desc_t pool;
  dnnl_status_t st;
  *what = "pooling descriptor";
  args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC};
  args[1] = (CpuDnnlArg){.arg = DNNL_ARG_DST, .output = true};
  *num_args = 2;
  if ((st = data_md(&args[0].user, a->cf, g, g->n, g->in)) ||
      (st = data_md(&args[1].user, a->cf, g, g->n, g->out)) ||
      (st = dnnl_pooling_v2_forward_desc_init(&pool, dnnl_forward_inference, alg, &args[0].user,
                                              &args[1].user, strides, kernel, dil, pad_l, pad_r)))
    return st;
  *what = "pooling primitive descriptor";
  return dnnl_primitive_desc_create(pd, &pool, attr, eng, NULL);
}

typedef struct Job {
  State *s;
  const WndGeo *g;
  const float *x;
  float *y;
  int64_t blocks; /* row blocks of one image (pool_rows) */
} Job;

static floe_code pool_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                            int64_t first, int64_t count, int shard) {
  (void)shard;
  const Job *j = arg;
  WndGeo g = *j->g;
  g.n = count;
  int64_t in_sp = g.in[0] * g.in[1] * g.in[2], out_sp = g.out[0] * g.out[1] * g.out[2];
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n, g.c, g.in[0], g.in[1], g.in[2], g.ns};
  Build b = {j->s, &g};
  void *data[2] = {(void *)(j->x + first * g.c * in_sp), j->y + first * g.c * out_sp};
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, "Pool", key, build_pool, &b, data);
}

/* Block `shard` of the output rows (outermost spatial dim) of one channels-last image: the
 * input rows its windows read are a dense block of the image, with the padding they leave. */
static floe_code pool_rows(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                           int64_t first, int64_t count, int shard) {
  (void)count; /* one block per call: cpu_dnnl_for_batch's units are the blocks */
  (void)shard;
  const Job *j = arg;
  WndGeo g = *j->g;
  int d = 3 - g.ns;
  int64_t rows = g.out[d], per = (rows + j->blocks - 1) / j->blocks;
  int64_t r0 = first * per, r1 = r0 + per < rows ? r0 + per : rows;
  if (r0 >= r1) return FLOE_OK;
  g.n = 1;
  int64_t lo = wnd_rows(&g, j->g, d, r0, r1);
  int64_t in_row = g.c, out_row = g.c; /* floats per row */
  for (int k = d + 1; k < 3; k++) {
    in_row *= g.in[k];
    out_row *= g.out[k];
  }
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n, g.c, g.in[0], g.in[1], g.in[2], g.ns, 1 + g.pb[d],
                                   g.pe[d], g.out[d]};
  Build b = {j->s, &g};
  void *data[2] = {(void *)(j->x + lo * in_row), j->y + r0 * out_row};
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, "Pool", key, build_pool, &b, data);
}

/* ---------------------------------------------------------------------------------- */
/* Reference. Rows are (n, c, out0) triples. */

typedef struct Ref {
  const State *s;
  const WndGeo *g;
  const double *x;
  double *avg;      /* AVG: the outputs */
  int64_t *best;    /* MAX: offset of each output's maximum in x, -1 when none */
  int64_t *coord;   /* with indices: its spatial coordinates (3 per output) */
  int64_t xs[5], ys[5];
} Ref;

static void ref_rows(void *arg, int64_t begin, int64_t end) {
  const Ref *r = arg;
  const WndGeo *g = r->g;
  bool is_max = r->s->a.kind != WND_POOL_AVG, incl = r->s->a.include_pad;
  for (int64_t row = begin; row < end; row++) {
    int64_t n = row / (g->c * g->out[0]), c = row / g->out[0] % g->c, o0 = row % g->out[0];
    for (int64_t o1 = 0; o1 < g->out[1]; o1++)
      for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
        int64_t o[3] = {o0, o1, o2}, start[3], padded = 1, count = 0, best = -1;
        int64_t bc[3] = {0, 0, 0};
        for (int j = 0; j < 3; j++) {
          start[j] = o[j] * g->s[j] - g->pb[j];
          int64_t taps = 0; /* taps inside the padded input */
          for (int64_t k = 0; k < g->k[j]; k++) {
            int64_t p = start[j] + k * g->d[j];
            taps += p >= -g->pb[j] && p < g->in[j] + g->pe[j];
          }
          padded *= taps;
        }
        double acc = is_max ? -INFINITY : 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++)
          for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
              int64_t i[3] = {start[0] + k0 * g->d[0], start[1] + k1 * g->d[1],
                              start[2] + k2 * g->d[2]};
              if (i[0] < 0 || i[0] >= g->in[0] || i[1] < 0 || i[1] >= g->in[1] || i[2] < 0 ||
                  i[2] >= g->in[2])
                continue;
              int64_t off = n * r->xs[0] + c * r->xs[1] + i[0] * r->xs[2] + i[1] * r->xs[3] +
                            i[2] * r->xs[4];
              double v = r->x[off];
              count++;
              if (!is_max) {
                acc += v;
              } else if (best < 0 || v > acc || (isnan(v) && !isnan(acc))) {
                acc = v;
                best = off;
                memcpy(bc, i, sizeof bc);
              }
            }
        int64_t y = n * r->ys[0] + c * r->ys[1] + o0 * r->ys[2] + o1 * r->ys[3] + o2 * r->ys[4];
        if (!is_max) {
          int64_t div = incl ? padded : count;
          r->avg[y] = div ? acc / (double)div : NAN;
        } else {
          r->best[y] = best;
          if (r->coord) memcpy(r->coord + 3 * y, bc, sizeof bc);
        }
      }
  }
}

/* The lowest value of dt into one element at p (a MAX window over padding only). */
static void lowest(FloeDType dt, void *p) {
  double v = -INFINITY;
  wnd_from_f64(dt, &v, p, 1);
}

static floe_code run_ref(State *s, FloeKernelContext *ctx, const WndGeo *g, const FloeTensor *x,
                         FloeTensor *out, FloeTensor *indices) {
  FloeDType dt = cpu_host->tensor_dtype(x);
  int64_t xn = cpu_host->tensor_num_elements(x), yn = cpu_host->tensor_num_elements(out);
  bool is_max = s->a.kind != WND_POOL_AVG;
  size_t bytes = (size_t)xn * sizeof(double) + (size_t)yn * sizeof(int64_t) * (indices ? 4 : 1);
  double *buf;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, bytes, (void **)&buf);
  if (rc != FLOE_OK) return rc;
  Ref r = {s, g, buf, NULL, NULL, NULL, {0}, {0}};
  if (is_max) r.best = (int64_t *)(buf + xn);
  else r.avg = buf + xn;
  if (indices) r.coord = r.best + yn;
  const char *xd = cpu_host->tensor_data(x);
  char *yd = cpu_host->tensor_data(out);
  wnd_to_f64(dt, xd, buf, xn);
  wnd_strides(s->a.cf, g->ns, g->c, g->in, r.xs);
  wnd_strides(s->a.cf, g->ns, g->c, g->out, r.ys);
  cpu_parallel_for(g->n * g->c * g->out[0], g->out[1] * g->out[2] * g->k[0] * g->k[1] * g->k[2],
                   ref_rows, &r);
  if (!is_max) {
    wnd_from_f64(dt, r.avg, yd, yn);
    return FLOE_OK;
  }
  size_t es = cpu_host->tensor_nbytes(x) / (size_t)xn;
  for (int64_t i = 0; i < yn; i++) {
    if (r.best[i] >= 0) memcpy(yd + (size_t)i * es, xd + (size_t)r.best[i] * es, es);
    else lowest(dt, yd + (size_t)i * es);
  }
  if (!indices) return FLOE_OK;
  /* (n * C + c) * S + the maximum's spatial offset, row- or column-major. */
  int64_t *id = cpu_host->tensor_data(indices), S = g->in[0] * g->in[1] * g->in[2];
  int64_t out_sp = g->out[0] * g->out[1] * g->out[2];
  for (int64_t i = 0; i < yn; i++) {
    const int64_t *q = r.coord + 3 * i;
    int64_t sp = s->a.storage_order == 0 ? (q[0] * g->in[1] + q[1]) * g->in[2] + q[2]
                                         : (q[2] * g->in[1] + q[1]) * g->in[0] + q[0];
    /* Placeholder dims have size 1 and coordinate 0, so both orders hold for ns < 3. */
    id[i] = r.best[i] < 0 ? -1 : (i / out_sp) * S + sp;
  }
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */

static floe_code pool_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  WndGeo g;
  floe_code rc = wnd_geo(&s->a, ctx, x, NULL, &g);
  if (rc != FLOE_OK) return rc;
  int64_t dims[WND_MAX_RANK];
  wnd_out_dims(&s->a, &g, dims);
  FloeTensor *out, *indices = NULL;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, g.rank, dims, &out)) != FLOE_OK) return rc;
  if (s->a.kind == WND_POOL_IDX &&
      (rc = cpu_host->ctx_allocate_output(ctx, 1, g.rank, dims, &indices)) != FLOE_OK)
    return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  if (cpu_host->tensor_dtype(x) == FLOE_F32 && s->a.kind != WND_POOL_IDX && dnnl_fits(s, &g)) {
    Job j = {s, &g, cpu_host->tensor_data(x), cpu_host->tensor_data(out), 1};
    int shards = cpu_dnnl_batch_shards(g.n), threads = cpu_host->num_threads();
    if (shards > 1 || threads <= 1)
      return cpu_dnnl_for_batch(ctx, g.n, shards, pool_shard, &j);
    /* One image on a pool of several threads. Large channels-last MAX pooling is cut into
     * blocks of rows, one per thread (AVG's padding rules are left whole); the rest runs on
     * one thread: pooling is memory-bound and short, and an OpenMP team would cost more to
     * wake (passive waiting) than it saves. */
    int64_t rows = g.out[3 - g.ns];
    if (!s->a.cf && s->a.kind == WND_POOL_MAX && rows >= 2 &&
        cpu_host->tensor_num_elements(x) >= POOL_ROWS_MIN_ELEMENTS) {
      j.blocks = rows < threads ? rows : threads;
      return cpu_dnnl_for_batch(ctx, j.blocks, (int)j.blocks, pool_rows, &j);
    }
    int saved = cpu_omp_single();
    rc = pool_shard(&j, ctx, NULL, 0, g.n, 0);
    cpu_omp_restore(saved);
    return rc;
  }
  return run_ref(s, ctx, &g, x, out, indices);
}

static const WndKind kind_pool = WND_POOL_MAX, kind_idx = WND_POOL_IDX;

floe_code cpu_register_pool_nd(FloePluginRegistrar *reg) {
  floe_code rc = cpu_add_kernel(reg, "Pool", "T", FLOE_DTYPES_NUMERIC, 0, pool_compute,
                                state_create, state_destroy, (void *)&kind_pool);
  if (rc != FLOE_OK) return rc;
  return cpu_add_kernel(reg, "MaxPoolWithIndices", "T", FLOE_DTYPES_NUMERIC, 0, pool_compute,
                        state_create, state_destroy, (void *)&kind_idx);
}
