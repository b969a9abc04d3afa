/* SPDX-License-Identifier: Apache-2.0 */
/* conv_nd_grad.c - gradients of the N-d window ops (core/graph/ops_convgrad.def):
 * ConvBackpropInputNd, ConvBackpropFilterNd and PoolGrad.
 *
 * The convolution gradients in f32 run oneDNN's backward-data and backward-weights
 * primitives (built once per shape and cached, conv_util.c), on the tensors in their own
 * layouts described through strides, as conv_nd.c does for the forward Conv; f16 and bf16
 * are widened to f32 and run the same primitives. f64 runs the plain loops below in double:
 * the input gradient gathers, per input element, the output elements whose windows read it;
 * the filter gradient sums, per filter element, over the batch and the output positions.
 *
 * PoolGrad finds each MAX window's first maximum again in orig_input with the forward
 * reference's rule (pool_nd.c: a later element wins only when larger, or when it is NaN and
 * the best so far is not), so the gradient goes to the element MaxPoolWithIndices names; AVG
 * spreads each window's gradient over its input elements with Pool's divisor. Both work in
 * the tensors' own f32 or f64 (f16 and bf16 widened to f32), on (image, block of channels)
 * units so that no two units write one element; the window taps inside the input are found
 * once per output index and dim, so the inner loops test nothing, and in channels-last
 * order they run along contiguous channels. */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conv_util.h"
#include "cpu.h"
#include "cpu_util.h"
#include "window_nd.h"

typedef enum Kind { K_INPUT, K_FILTER, K_POOL } Kind;

static const char *const kind_name[] = {"ConvBackpropInputNd", "ConvBackpropFilterNd",
                                        "PoolGrad"};

typedef struct State {
  Kind kind;
  WndAttrs a;
  bool has_cache;
  CpuDnnlCache cache; /* convolutions */
} State;

static void state_destroy(void *state) {
  State *s = state;
  if (s->has_cache) cpu_dnnl_cache_destroy(&s->cache);
  cpu_host->free(s);
}

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  s->kind = *(const Kind *)user_data;
  floe_code rc = wnd_parse(host, init, s->kind == K_POOL ? WND_POOL_MAX : WND_CONV, &s->a);
  if (rc == FLOE_OK && s->kind != K_POOL) {
    rc = cpu_dnnl_cache_init(&s->cache, host, init);
    s->has_cache = rc == FLOE_OK;
  }
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  *state = s;
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Shapes. */

/* A sizes input (input_sizes, filter_sizes): an i32 or i64 vector of 3 to 5 sizes >= 0. */
static floe_code read_sizes(FloeKernelContext *ctx, int input, const char *name, int64_t *dims,
                            int *rank) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, input);
  FloeDType dt = cpu_host->tensor_dtype(t);
  int64_t n = cpu_host->tensor_num_elements(t);
  char buf[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_rank(t) != 1 || n < 3 || n > WND_MAX_RANK)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "%s must be a vector of 3 to 5 sizes, got shape %s", name,
        cpu_shape_str(buf, sizeof buf, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t)));
  const void *p = cpu_host->tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    dims[i] = dt == FLOE_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
  *rank = (int)n;
  for (int64_t i = 0; i < n; i++)
    if (dims[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s %s must hold sizes >= 0",
                                     name, cpu_shape_str(buf, sizeof buf, (int)n, dims));
  return FLOE_OK;
}

/* The gradient input t (`name`) must have the forward op's output shape for geometry g;
 * fwd describes the forward op and its inputs for the message. */
static floe_code check_grad_shape(const State *s, FloeKernelContext *ctx, const FloeTensor *t,
                                  const char *name, const WndGeo *g, const char *fwd) {
  int64_t want[WND_MAX_RANK];
  wnd_out_dims(&s->a, g, want);
  int r = cpu_host->tensor_rank(t);
  const int64_t *d = cpu_host->tensor_dims(t);
  if (r == g->rank && !memcmp(d, want, (size_t)r * sizeof *d)) return FLOE_OK;
  char st[CPU_SHAPE_STR_MAX], sw[CPU_SHAPE_STR_MAX];
  return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "%s %s does not have the shape %s that %s gives", name,
                                 cpu_shape_str(st, sizeof st, r, d),
                                 cpu_shape_str(sw, sizeof sw, g->rank, want), fwd);
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN (f32 convolution gradients). */

typedef struct Build {
  const State *s;
  const WndGeo *g;
} Build;

/* Logical [n, c, spatial...] of a tensor in the data format, through strides. */
static dnnl_status_t data_md(dnnl_memory_desc_t *md, bool cf, const WndGeo *g, int64_t c,
                             const int64_t *sp) {
  int off = 3 - g->ns;
  int64_t st[5];
  wnd_strides(cf, g->ns, c, sp, st);
  dnnl_dims_t dims = {g->n, c}, strides = {st[0], st[1]};
  for (int j = 0; j < g->ns; j++) {
    dims[2 + j] = sp[off + j];
    strides[2 + j] = st[2 + off + j];
  }
  return dnnl_memory_desc_init_by_strides(md, 2 + g->ns, dims, dnnl_f32, strides);
}

/* The filter [spatial..., c / groups, o] as oneDNN's weights [o, c, spatial...] or, with
 * groups, [groups, o / groups, c / groups, spatial...], through strides. */
static dnnl_status_t filter_md(dnnl_memory_desc_t *md, const WndGeo *g) {
  int64_t G = g->groups, cpg = g->c / G, opg = g->o / G, off = 3 - g->ns;
  dnnl_dims_t dims, strides;
  int nd = 0;
  if (G > 1) {
    dims[nd] = G;
    strides[nd++] = opg;
  }
  dims[nd] = opg;
  strides[nd++] = 1;
  dims[nd] = cpg;
  strides[nd++] = g->o;
  int64_t inner = cpg * g->o;
  for (int j = 2; j >= off; j--) { /* spatial strides, innermost first */
    dims[nd + j - off] = g->k[j];
    strides[nd + j - off] = inner;
    inner *= g->k[j];
  }
  return dnnl_memory_desc_init_by_strides(md, nd + g->ns, dims, dnnl_f32, strides);
}

/* The backward primitive of the kernel's kind, with the forward (training) primitive
 * descriptor as its hint. Channels-last data stays as it is; channels-first data and the
 * filter go to the layouts the primitive prefers. */
static dnnl_status_t build_backward(const void *arg, dnnl_engine_t eng,
                                    const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                    CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  const WndGeo *g = b->g;
  bool cf = b->s->a.cf, data = b->s->kind == K_INPUT;
  int nd = 2 + g->ns;
  dnnl_dims_t strides, dil, pad_l, pad_r, src_dims, dst_dims;
  wnd_dnnl_conv_dims(g, strides, dil, pad_l, pad_r, src_dims, dst_dims);
  static const dnnl_format_tag_t cl_tags[] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};
  dnnl_format_tag_t tag = cf ? dnnl_format_tag_any : cl_tags[g->ns - 1];
  dnnl_memory_desc_t src_user, wei_user, dst_user, src, wei, dst;
  dnnl_convolution_desc_t fwd, bwd;
  dnnl_status_t st;
  *what = "convolution descriptor";
  if ((st = data_md(&src_user, cf, g, g->c, g->in)) || (st = filter_md(&wei_user, g)) ||
      (st = data_md(&dst_user, cf, g, g->o, g->out)) ||
      (st = dnnl_memory_desc_init_by_tag(&src, nd, src_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&wei, wei_user.ndims, wei_user.dims, dnnl_f32,
                                         dnnl_format_tag_any)) ||
      (st = dnnl_memory_desc_init_by_tag(&dst, nd, dst_dims, dnnl_f32, tag)) ||
      (st = dnnl_dilated_convolution_forward_desc_init(&fwd, dnnl_forward_training,
                                                       dnnl_convolution_direct, &src, &wei, NULL,
                                                       &dst, strides, dil, pad_l, pad_r)))
    return st;
  if (data)
    st = dnnl_dilated_convolution_backward_data_desc_init(&bwd, dnnl_convolution_direct, &src,
                                                          &wei, &dst, strides, dil, pad_l, pad_r);
  else
    st = dnnl_dilated_convolution_backward_weights_desc_init(
        &bwd, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides, dil, pad_l, pad_r);
  if (st) return st;
  *what = "convolution primitive descriptor";
  dnnl_primitive_desc_t hint = NULL;
  if ((st = dnnl_primitive_desc_create(&hint, &fwd, NULL, eng, NULL))) return st;
  st = dnnl_primitive_desc_create(pd, &bwd, attr, eng, hint);
  dnnl_primitive_desc_destroy(hint);
  if (st) return st;
  *num_args = 3;
  if (data) {
    args[0] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_DST, .user = dst_user};
    args[1] = (CpuDnnlArg){.arg = DNNL_ARG_WEIGHTS, .keep = true, .user = wei_user};
    args[2] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_SRC, .output = true, .user = src_user};
  } else {
    args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC, .user = src_user};
    args[1] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_DST, .user = dst_user};
    args[2] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_WEIGHTS, .output = true, .user = wei_user};
  }
  return dnnl_success;
}

/* K_INPUT: a = out_backprop, b = filter, out = input gradient. K_FILTER: a = input,
 * b = out_backprop, out = filter gradient. The batch is cut into shards; for the filter
 * gradient each shard after the first writes a buffer of its own, summed into out after. */
typedef struct DnnlJob {
  State *s;
  const WndGeo *g;
  const float *a, *b;
  float *out;
  float *partial; /* K_FILTER: one filter-sized buffer per shard after the first */
} DnnlJob;

static floe_code dnnl_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                            int64_t first, int64_t count, int shard) {
  const DnnlJob *j = arg;
  WndGeo g = *j->g;
  g.n = count;
  int64_t in_img = g.c * g.in[0] * g.in[1] * g.in[2];
  int64_t out_img = g.o * g.out[0] * g.out[1] * g.out[2];
  int64_t filter = g.k[0] * g.k[1] * g.k[2] * (g.c / g.groups) * g.o;
  void *data[3];
  if (j->s->kind == K_INPUT) {
    data[0] = (void *)(j->a + first * out_img);
    data[1] = (void *)j->b;
    data[2] = j->out + first * in_img;
  } else {
    data[0] = (void *)(j->a + first * in_img);
    data[1] = (void *)(j->b + first * out_img);
    data[2] = shard == 0 ? j->out : j->partial + (shard - 1) * filter;
  }
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n, g.c,    g.in[0], g.in[1], g.in[2],
                                   g.o, g.k[0], g.k[1],  g.k[2],  g.ns};
  Build b = {j->s, &g};
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, kind_name[j->s->kind], key, build_backward,
                      &b, data);
}

static floe_code run_dnnl(State *s, FloeKernelContext *ctx, const WndGeo *g, const float *a,
                          const float *b, float *out) {
  DnnlJob j = {s, g, a, b, out, NULL};
  int shards = cpu_dnnl_batch_shards(g->n);
  int64_t filter = g->k[0] * g->k[1] * g->k[2] * (g->c / g->groups) * g->o;
  if (s->kind == K_FILTER && shards > 1) {
    /* cpu_dnnl_for_batch runs ceil(n / ceil(n / shards)) shards, maybe fewer than asked. */
    int64_t block = (g->n + shards - 1) / shards;
    shards = (int)((g->n + block - 1) / block);
    floe_code rc = cpu_host->ctx_allocate_temp(
        ctx, (size_t)((shards - 1) * filter) * sizeof(float), (void **)&j.partial);
    if (rc != FLOE_OK) return rc;
  }
  floe_code rc = cpu_dnnl_for_batch(ctx, g->n, shards, dnnl_shard, &j);
  if (rc != FLOE_OK || !j.partial) return rc;
  for (int sh = 1; sh < shards; sh++) {
    const float *p = j.partial + (sh - 1) * filter;
    for (int64_t i = 0; i < filter; i++) out[i] += p[i];
  }
  return FLOE_OK;
}

/* f16 / bf16: widen both operands, run the f32 primitive, round the result once. */
static floe_code run_half(State *s, FloeKernelContext *ctx, const WndGeo *g, FloeDType dt,
                          const FloeTensor *a, const FloeTensor *b, FloeTensor *out) {
  const void *src[2] = {cpu_host->tensor_data(a), cpu_host->tensor_data(b)};
  const int64_t count[2] = {cpu_host->tensor_num_elements(a), cpu_host->tensor_num_elements(b)};
  int64_t on = cpu_host->tensor_num_elements(out);
  float *wide[2], *ob;
  floe_code rc = cpu_half_widen_temp(ctx, dt, 2, src, count, on, wide, &ob);
  if (rc != FLOE_OK) return rc;
  rc = run_dnnl(s, ctx, g, wide[0], wide[1], ob);
  if (rc == FLOE_OK) cpu_convert_half(dt, false, ob, cpu_host->tensor_data(out), on);
  return rc;
}

/* ---------------------------------------------------------------------------------- */
/* f64 reference loops. Spatial dims are 3 (WndGeo's placeholders); x and dy in the data
 * format (strides xs, ys), the filter [k0, k1, k2, c / groups, o]. */

typedef struct Ref {
  const WndGeo *g;
  const double *x, *f, *dy; /* x: K_FILTER's input; f: K_INPUT's filter */
  double *out;
  int64_t xs[5], ys[5];
} Ref;

/* Rows are (n, c, i0) of the input gradient; each element gathers from the outputs whose
 * windows read it: o = (i + before - k * dilation) / stride when that divides exactly. */
static void input_rows(void *arg, int64_t begin, int64_t end) {
  const Ref *r = arg;
  const WndGeo *g = r->g;
  int64_t cpg = g->c / g->groups, opg = g->o / g->groups;
  for (int64_t row = begin; row < end; row++) {
    int64_t n = row / (g->c * g->in[0]), c = row / g->in[0] % g->c, i0 = row % g->in[0];
    int64_t grp = c / cpg, ci = c % cpg;
    for (int64_t i1 = 0; i1 < g->in[1]; i1++)
      for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
        int64_t i[3] = {i0, i1, i2};
        double acc = 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++)
          for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
              int64_t k[3] = {k0, k1, k2}, o[3];
              bool hit = true;
              for (int j = 0; j < 3 && hit; j++) {
                int64_t t = i[j] + g->pb[j] - k[j] * g->d[j];
                hit = t >= 0 && t % g->s[j] == 0 && t / g->s[j] < g->out[j];
                o[j] = t / g->s[j];
              }
              if (!hit) continue;
              const double *f = r->f + (((k0 * g->k[1] + k1) * g->k[2] + k2) * cpg + ci) * g->o;
              const double *dy = r->dy + n * r->ys[0] + o[0] * r->ys[2] + o[1] * r->ys[3] +
                                 o[2] * r->ys[4];
              for (int64_t oc = grp * opg; oc < (grp + 1) * opg; oc++)
                acc += dy[oc * r->ys[1]] * f[oc];
            }
        r->out[n * r->xs[0] + c * r->xs[1] + i0 * r->xs[2] + i1 * r->xs[3] + i2 * r->xs[4]] = acc;
      }
  }
}

/* Rows are (k0, k1, k2, c / groups) of the filter gradient: for every output channel, the
 * sum over images and output positions of input * out_backprop. */
static void filter_rows(void *arg, int64_t begin, int64_t end) {
  const Ref *r = arg;
  const WndGeo *g = r->g;
  int64_t cpg = g->c / g->groups, opg = g->o / g->groups;
  for (int64_t row = begin; row < end; row++) {
    int64_t ci = row % cpg, tap = row / cpg;
    int64_t k[3] = {tap / (g->k[1] * g->k[2]), tap / g->k[2] % g->k[1], tap % g->k[2]};
    for (int64_t oc = 0; oc < g->o; oc++) {
      int64_t c = oc / opg * cpg + ci;
      double acc = 0;
      for (int64_t n = 0; n < g->n; n++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++)
          for (int64_t o1 = 0; o1 < g->out[1]; o1++)
            for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
              int64_t o[3] = {o0, o1, o2}, i[3];
              bool inside = true;
              for (int j = 0; j < 3 && inside; j++) {
                i[j] = o[j] * g->s[j] - g->pb[j] + k[j] * g->d[j];
                inside = i[j] >= 0 && i[j] < g->in[j];
              }
              if (!inside) continue;
              acc += r->x[n * r->xs[0] + c * r->xs[1] + i[0] * r->xs[2] + i[1] * r->xs[3] +
                          i[2] * r->xs[4]] *
                     r->dy[n * r->ys[0] + oc * r->ys[1] + o0 * r->ys[2] + o1 * r->ys[3] +
                           o2 * r->ys[4]];
            }
      r->out[row * g->o + oc] = acc;
    }
  }
}

/* a, b in run_dnnl's order. */
static floe_code run_ref(const State *s, FloeKernelContext *ctx, const WndGeo *g,
                         const double *a, const double *b, double *out) {
  Ref r = {g, NULL, NULL, NULL, out, {0}, {0}};
  wnd_strides(s->a.cf, g->ns, g->c, g->in, r.xs);
  wnd_strides(s->a.cf, g->ns, g->o, g->out, r.ys);
  int64_t cpg = g->c / g->groups, taps = g->k[0] * g->k[1] * g->k[2];
  int64_t out_sp = g->out[0] * g->out[1] * g->out[2];
  (void)ctx;
  if (s->kind == K_INPUT) {
    r.dy = a;
    r.f = b;
    cpu_parallel_for(g->n * g->c * g->in[0], g->in[1] * g->in[2] * taps * (g->o / g->groups) * 2,
                     input_rows, &r);
  } else {
    r.x = a;
    r.dy = b;
    cpu_parallel_for(taps * cpg, g->o * g->n * out_sp * 2, filter_rows, &r);
  }
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */

static floe_code conv_grad_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  bool data = s->kind == K_INPUT;
  int64_t dims[WND_MAX_RANK];
  int rank = 0;
  floe_code rc = read_sizes(ctx, data ? 0 : 1, data ? "input_sizes" : "filter_sizes", dims, &rank);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *other = cpu_host->ctx_input(ctx, data ? 1 : 0);
  const FloeTensor *dy = cpu_host->ctx_input(ctx, 2);
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, dims, &out)) != FLOE_OK) return rc;
  WndGeo g;
  if ((rc = wnd_geo(&s->a, ctx, data ? out : other, data ? other : out, &g)) != FLOE_OK) return rc;
  char sx[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX], fwd[2 * CPU_SHAPE_STR_MAX + 48];
  const FloeTensor *x = data ? out : other, *f = data ? other : out;
  snprintf(fwd, sizeof fwd, "Conv of input %s and filter %s",
           cpu_shape_str(sx, sizeof sx, cpu_host->tensor_rank(x), cpu_host->tensor_dims(x)),
           cpu_shape_str(sf, sizeof sf, cpu_host->tensor_rank(f), cpu_host->tensor_dims(f)));
  if ((rc = check_grad_shape(s, ctx, dy, "out_backprop", &g, fwd)) != FLOE_OK) return rc;
  int64_t on = cpu_host->tensor_num_elements(out);
  if (on == 0) return FLOE_OK;
  if (cpu_host->tensor_num_elements(dy) == 0 || cpu_host->tensor_num_elements(other) == 0) {
    memset(cpu_host->tensor_data(out), 0, cpu_host->tensor_nbytes(out)); /* sums over nothing */
    return FLOE_OK;
  }
  const FloeTensor *a = data ? dy : other, *b = data ? other : dy;
  FloeDType dt = cpu_host->tensor_dtype(out);
  if (dt == FLOE_F32)
    return run_dnnl(s, ctx, &g, cpu_host->tensor_data(a), cpu_host->tensor_data(b),
                    cpu_host->tensor_data(out));
  if (cpu_is_half(dt)) return run_half(s, ctx, &g, dt, a, b, out);
  return run_ref(s, ctx, &g, cpu_host->tensor_data(a), cpu_host->tensor_data(b),
                 cpu_host->tensor_data(out));
}

/* ---------------------------------------------------------------------------------- */
/* PoolGrad. */

/* Per spatial dim and output index: the window taps [lo, hi) that fall inside the input,
 * and the number inside the padded input (Pool's counted-padding divisor). */
typedef struct Taps {
  int64_t *lo[3], *hi[3], *padded[3];
} Taps;

/* Channels go in blocks: a channels-last block is contiguous, so the inner loops run along
 * it; channels first take one plane at a time. */
#define POOL_BLOCK 64

typedef struct PoolRef {
  const WndAttrs *a;
  const WndGeo *g;
  Taps t;
  int64_t block;  /* channels per unit of work */
  const void *x, *dy; /* float (f32, and f16 / bf16 widened) or double (f64) */
  void *dx;       /* zeroed before the units run */
  int64_t xs[5], ys[5];
} PoolRef;

/* ceil(a / b) for b > 0 and any a. */
static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Fills r->t from buf (3 * (out[0] + out[1] + out[2]) entries). The window of output o
 * starts at o * stride - before and its tap k reads start + k * dilation. */
static void taps_init(PoolRef *r, int64_t *buf) {
  const WndGeo *g = r->g;
  for (int j = 0; j < 3; j++) {
    r->t.lo[j] = buf;
    r->t.hi[j] = buf + g->out[j];
    r->t.padded[j] = buf + 2 * g->out[j];
    buf += 3 * g->out[j];
    for (int64_t o = 0; o < g->out[j]; o++) {
      int64_t start = o * g->s[j] - g->pb[j], d = g->d[j], k = g->k[j];
      int64_t lo = clamp(ceil_div(-start, d), 0, k);
      r->t.lo[j][o] = lo;
      r->t.hi[j][o] = clamp(ceil_div(g->in[j] - start, d), lo, k);
      r->t.padded[j][o] = clamp(ceil_div(g->in[j] + g->pe[j] - start, d), 0, k);
    }
  }
}

/* Output position o's window: the taps inside the input ([lo, hi) per dim), and Pool's
 * divisor; false when no tap is inside (padding only: nothing to pass on). */
static bool window_at(const PoolRef *r, const int64_t *o, int64_t *lo, int64_t *hi,
                      double *div) {
  int64_t inside = 1, padded = 1;
  for (int j = 0; j < 3; j++) {
    lo[j] = r->t.lo[j][o[j]];
    hi[j] = r->t.hi[j][o[j]];
    inside *= hi[j] - lo[j];
    padded *= r->t.padded[j][o[j]];
  }
  *div = (double)(r->a->include_pad ? padded : inside);
  return inside > 0;
}

/* Offset in x of tap k of output position o's window, relative to its plane. */
static int64_t tap_offset(const PoolRef *r, const int64_t *o, int64_t k0, int64_t k1,
                          int64_t k2) {
  const WndGeo *g = r->g;
  return (o[0] * g->s[0] - g->pb[0] + k0 * g->d[0]) * r->xs[2] +
         (o[1] * g->s[1] - g->pb[1] + k1 * g->d[1]) * r->xs[3] +
         (o[2] * g->s[2] - g->pb[2] + k2 * g->d[2]) * r->xs[4];
}

/* The units of work in element type T: (image, block of channels), so no two units write
 * one element. Per output position, MAX gives each channel's gradient to its window's first
 * maximum (a later tap wins only when larger, or NaN over a number; chosen with a mask, as
 * a branch would be mispredicted half the time), AVG spreads it over the window's inputs. */
#define POOL_UNITS(T, NAME)                                                                   \
  static void NAME(void *arg, int64_t begin, int64_t end) {                                   \
    const PoolRef *r = arg;                                                                   \
    const WndGeo *g = r->g;                                                                   \
    const T *x = r->x, *dy = r->dy;                                                           \
    T *dx = r->dx;                                                                            \
    int64_t blocks = (g->c + r->block - 1) / r->block, best[POOL_BLOCK], cs = r->xs[1];       \
    bool is_max = r->a->kind == WND_POOL_MAX;                                                 \
    for (int64_t u = begin; u < end; u++) {                                                  \
      int64_t n = u / blocks, c0 = u % blocks * r->block;                                     \
      int64_t nc = g->c - c0 < r->block ? g->c - c0 : r->block;                               \
      int64_t xbase = n * r->xs[0] + c0 * cs, o[3], lo[3], hi[3];                             \
      for (o[0] = 0; o[0] < g->out[0]; o[0]++)                                                \
        for (o[1] = 0; o[1] < g->out[1]; o[1]++)                                              \
          for (o[2] = 0; o[2] < g->out[2]; o[2]++) {                                          \
            double div;                                                                       \
            if (!window_at(r, o, lo, hi, &div)) continue;                                     \
            const T *gy = dy + n * r->ys[0] + c0 * r->ys[1] + o[0] * r->ys[2] +               \
                          o[1] * r->ys[3] + o[2] * r->ys[4];                                  \
            int64_t first = xbase + tap_offset(r, o, lo[0], lo[1], lo[2]);                    \
            for (int64_t c = 0; c < nc; c++) best[c] = first + c * cs;                        \
            for (int64_t k0 = lo[0]; k0 < hi[0]; k0++)                                        \
              for (int64_t k1 = lo[1]; k1 < hi[1]; k1++)                                      \
                for (int64_t k2 = lo[2]; k2 < hi[2]; k2++) {                                  \
                  int64_t off = xbase + tap_offset(r, o, k0, k1, k2);                         \
                  if (!is_max) {                                                              \
                    for (int64_t c = 0; c < nc; c++)                                          \
                      dx[off + c * cs] += (T)(gy[c * r->ys[1]] / div);                        \
                    continue;                                                                 \
                  }                                                                           \
                  for (int64_t c = 0; c < nc; c++) {                                          \
                    int64_t at = off + c * cs;                                                \
                    T v = x[at], b = x[best[c]];                                              \
                    int64_t take = (v > b) | (isnan(v) & !isnan(b));                          \
                    best[c] ^= (best[c] ^ at) & -take;                                        \
                  }                                                                           \
                }                                                                             \
            if (is_max)                                                                       \
              for (int64_t c = 0; c < nc; c++) dx[best[c]] += gy[c * r->ys[1]];               \
          }                                                                                   \
    }                                                                                         \
  }

POOL_UNITS(float, pool_units_f32)
POOL_UNITS(double, pool_units_f64)

static floe_code pool_grad_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *dy = cpu_host->ctx_input(ctx, 1);
  WndGeo g;
  floe_code rc = wnd_geo(&s->a, ctx, x, NULL, &g);
  if (rc != FLOE_OK) return rc;
  char sx[CPU_SHAPE_STR_MAX], fwd[CPU_SHAPE_STR_MAX + 48];
  snprintf(fwd, sizeof fwd, "Pool of orig_input %s",
           cpu_shape_str(sx, sizeof sx, cpu_host->tensor_rank(x), cpu_host->tensor_dims(x)));
  if ((rc = check_grad_shape(s, ctx, dy, "grad", &g, fwd)) != FLOE_OK) return rc;
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, cpu_host->tensor_rank(x),
                                          cpu_host->tensor_dims(x), &out)) != FLOE_OK)
    return rc;
  int64_t xn = cpu_host->tensor_num_elements(x), yn = cpu_host->tensor_num_elements(dy);
  if (xn == 0) return FLOE_OK;
  FloeDType dt = cpu_host->tensor_dtype(x);
  bool half = cpu_is_half(dt);
  int64_t ntaps = 3 * (g.out[0] + g.out[1] + g.out[2]);
  size_t bytes = (size_t)ntaps * sizeof(int64_t);
  if (half) bytes += (size_t)(2 * xn + yn) * sizeof(float);
  int64_t *buf;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, bytes, (void **)&buf)) != FLOE_OK) return rc;
  PoolRef r = {&s->a, &g, {{0}, {0}, {0}}, s->a.cf ? 1 : POOL_BLOCK, cpu_host->tensor_data(x),
               cpu_host->tensor_data(dy), cpu_host->tensor_data(out), {0}, {0}};
  taps_init(&r, buf);
  if (half) { /* widened into float buffers, the result narrowed once */
    float *h = (float *)(buf + ntaps);
    if (s->a.kind == WND_POOL_MAX) cpu_convert_half(dt, true, r.x, h, xn);
    cpu_convert_half(dt, true, r.dy, h + xn, yn);
    r.x = h;
    r.dy = h + xn;
    r.dx = h + xn + yn;
  }
  memset(r.dx, 0, (size_t)xn * (dt == FLOE_F64 ? sizeof(double) : sizeof(float)));
  wnd_strides(s->a.cf, g.ns, g.c, g.in, r.xs);
  wnd_strides(s->a.cf, g.ns, g.c, g.out, r.ys);
  int64_t blocks = (g.c + r.block - 1) / r.block;
  int64_t cost = g.out[0] * g.out[1] * g.out[2] * g.k[0] * g.k[1] * g.k[2] * 2 *
                 (r.block < g.c ? r.block : g.c);
  cpu_parallel_for(g.n * blocks, cost, dt == FLOE_F64 ? pool_units_f64 : pool_units_f32, &r);
  if (half) cpu_convert_half(dt, false, r.dx, cpu_host->tensor_data(out), xn);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */

static const Kind kind_input = K_INPUT, kind_filter = K_FILTER, kind_pool = K_POOL;

floe_code cpu_register_conv_nd_grad(FloePluginRegistrar *reg) {
  floe_code rc;
  if ((rc = cpu_add_kernel(reg, "ConvBackpropInputNd", "T", FLOE_DTYPES_FLOAT, 0,
                           conv_grad_compute, state_create, state_destroy,
                           (void *)&kind_input)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "ConvBackpropFilterNd", "T", FLOE_DTYPES_FLOAT, 0,
                           conv_grad_compute, state_create, state_destroy,
                           (void *)&kind_filter)) != FLOE_OK)
    return rc;
  return cpu_add_kernel(reg, "PoolGrad", "T", FLOE_DTYPES_FLOAT, 0, pool_grad_compute,
                        state_create, state_destroy, (void *)&kind_pool);
}
