/* SPDX-License-Identifier: Apache-2.0 */
/* conv_grad.c - gradients of the windowed ops: Conv2DBackpropInput, Conv2DBackpropFilter,
 * MaxPoolGrad and AvgPoolGrad.
 *
 * The convolution gradients run oneDNN's backward-data and backward-weights primitives, built
 * once per shape (conv_util.c). NHWC data is mostly handed to them as it is (oneDNN's NHWC
 * kernels beat a blocked layout plus the reorders around it; see conv_mds for the exception);
 * NCHW data and the filter, or the filter gradient, go through the layouts the primitive
 * prefers. A reordered filter is kept while
 * the filter fed in stays byte-for-byte the same. f16 and bf16 are widened to f32; f64 runs
 * plain double loops (oneDNN has no f64 on CPU).
 *
 * The pooling gradients are loops of their own: per image and block of channels, NHWC
 * vectorised across the channels, NCHW one plane at a time. MaxPoolGrad finds each window's
 * maximum again in orig_input (orig_output only has its shape checked) and gives the gradient
 * to the first maximum in row-major window order, as TensorFlow does; a NaN in a window's
 * first position keeps the gradient, a later NaN never gets it (comparisons with NaN are
 * false). AvgPoolGrad divides by the number of in-bounds elements of each window, like the
 * forward AvgPool. _FusedMaxPoolGradRelu is MaxPoolGrad that passes nothing on from a window
 * whose maximum is not > 0 (ReluGrad fused in when orig_input is a ReLU's output). */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <dnnl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "conv_util.h"
#include "cpu.h"
#include "cpu_util.h"

typedef enum GradKind { G_INPUT, G_FILTER, G_MAXPOOL, G_AVGPOOL, G_MAXPOOL_RELU } GradKind;

static const char *const grad_names[] = {"Conv2DBackpropInput", "Conv2DBackpropFilter",
                                         "MaxPoolGrad", "AvgPoolGrad",
                                         "_FusedMaxPoolGradRelu"};

typedef struct State {
  GradKind kind;
  CpuConvAttrs a;
  bool has_cache;
  CpuDnnlCache cache; /* convolutions only */
} State;

typedef CpuConvGeo Geo;

/* "[2,3,4]" for error messages. */
static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  return cpu_shape_str(buf, len, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

static const char *fmt_name(const State *s) { return s->a.nchw ? "NCHW" : "NHWC"; }

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
  s->kind = *(const GradKind *)user_data;
  bool pooling = s->kind != G_INPUT && s->kind != G_FILTER;
  floe_code rc = cpu_conv_parse_attrs(host, init, pooling, &s->a);
  if (rc == FLOE_OK && !pooling) {
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

/* Reads a shape input (input_sizes, filter_sizes, orig_input_shape): an i32 vector of 4
 * sizes >= 0. layout names the order in messages ("NHWC", "HWIO"). */
static floe_code read_sizes(const State *s, FloeKernelContext *ctx, int input, const char *name,
                            const char *layout, int64_t out[4]) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, input);
  char buf[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_dtype(t) != FLOE_I32 || cpu_host->tensor_rank(t) != 1 ||
      cpu_host->tensor_dims(t)[0] != 4)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be an i32 vector of 4 sizes (%s), got %s %s", name,
                                   layout, cpu_host->dtype_name(cpu_host->tensor_dtype(t)),
                                   shape_str(t, buf, sizeof buf));
  const int32_t *v = cpu_host->tensor_data(t);
  for (int i = 0; i < 4; i++) out[i] = v[i];
  for (int i = 0; i < 4; i++)
    if (out[i] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s %s (%s) must be >= 0",
                                     name, cpu_shape_str(buf, sizeof buf, 4, out), layout);
  (void)s;
  return FLOE_OK;
}

/* Logical (n, c, h, w) of dims in the data format. */
static void split_dims(const State *s, const int64_t *d, Geo *g) {
  g->n = d[0];
  g->c = s->a.nchw ? d[1] : d[3];
  g->h = s->a.nchw ? d[2] : d[1];
  g->w = s->a.nchw ? d[3] : d[2];
}

/* Rank 4 check of a data tensor. */
static floe_code need_rank4(const State *s, FloeKernelContext *ctx, const FloeTensor *t,
                            const char *name) {
  char buf[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_rank(t) == 4) return FLOE_OK;
  return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must have rank 4 (%s), got %s",
                                 name, fmt_name(s), shape_str(t, buf, sizeof buf));
}

/* The window's output size from g's input size; an error naming the input when a VALID
 * window is larger than it. in_desc describes the input ("input_sizes [1,2,2,3]"). */
static floe_code finish_geo(const State *s, FloeKernelContext *ctx, Geo *g, const char *in_desc) {
  if (cpu_conv_geo_finish(&s->a, g)) return FLOE_OK;
  return cpu_host->ctx_set_error(
      ctx, FLOE_INVALID_ARGUMENT,
      "%s is smaller than the %lldx%lld window (dilations %lldx%lld) with VALID padding",
      in_desc, (long long)g->kh, (long long)g->kw, (long long)s->a.dilation[0],
      (long long)s->a.dilation[1]);
}

/* Checks that t (the output-side gradient, or orig_output) has the forward op's output shape
 * for geometry g. fwd_desc describes the forward op's inputs for the message. */
static floe_code check_out_shape(const State *s, FloeKernelContext *ctx, const FloeTensor *t,
                                 const char *name, const Geo *g, const char *fwd_desc) {
  int64_t want[4];
  cpu_conv_dims(s->a.nchw, g->n, g->o, g->oh, g->ow, want);
  const int64_t *d = cpu_host->tensor_dims(t);
  if (cpu_host->tensor_rank(t) == 4 && memcmp(d, want, sizeof want) == 0) return FLOE_OK;
  char st[CPU_SHAPE_STR_MAX], sw[CPU_SHAPE_STR_MAX], sa[128];
  return cpu_host->ctx_set_error(
      ctx, FLOE_INVALID_ARGUMENT,
      "%s %s does not match the %s output %s of %s with %s %lldx%lld, %s", name,
      shape_str(t, st, sizeof st), s->kind <= G_FILTER ? "Conv2D" : "pooling",
      cpu_shape_str(sw, sizeof sw, 4, want), fwd_desc,
      s->kind <= G_FILTER ? "filter window" : "window", (long long)g->kh, (long long)g->kw,
      cpu_conv_attrs_str(&s->a, sa, sizeof sa));
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN (f32). */

typedef struct Build {
  const State *s;
  const Geo *g;
} Build;

/* The descriptors shared by both passes: user layouts of src / dst (data format) and of the
 * filter (HWIO), and the layouts the primitive may choose among. */
typedef struct Mds {
  dnnl_memory_desc_t src_user, wei_user, dst_user;
  dnnl_memory_desc_t src, wei, dst;
} Mds;

/* Data layouts: NCHW goes to the primitive's preferred (blocked) layouts. NHWC stays as it is,
 * except for the backward-data pass when both channel counts fill 16-float blocks: there
 * oneDNN's blocked kernel beats its NHWC one by more than the two reorders cost (conv2 of
 * the benchmark CNN: 4.7 against 5.1 ms); with few channels (conv1's one) it is the other
 * way round, by 2x. */
static dnnl_status_t conv_mds(const Build *b, Mds *m) {
  const Geo *g = b->g;
  dnnl_format_tag_t tag = b->s->a.nchw ? dnnl_nchw : dnnl_nhwc;
  bool blocked = b->s->a.nchw ||
                 (b->s->kind == G_INPUT && g->c % 16 == 0 && g->o % 16 == 0);
  dnnl_format_tag_t data_tag = blocked ? dnnl_format_tag_any : dnnl_nhwc;
  dnnl_dims_t src_dims = {g->n, g->c, g->h, g->w}, dst_dims = {g->n, g->o, g->oh, g->ow};
  dnnl_dims_t wei_dims = {g->o, g->c, g->kh, g->kw};
  dnnl_status_t st;
  if ((st = dnnl_memory_desc_init_by_tag(&m->src_user, 4, src_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&m->wei_user, 4, wei_dims, dnnl_f32, dnnl_hwio)) ||
      (st = dnnl_memory_desc_init_by_tag(&m->dst_user, 4, dst_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&m->src, 4, src_dims, dnnl_f32, data_tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&m->wei, 4, wei_dims, dnnl_f32, dnnl_format_tag_any)))
    return st;
  return dnnl_memory_desc_init_by_tag(&m->dst, 4, dst_dims, dnnl_f32, data_tag);
}

/* Backward primitives need the forward (training) primitive descriptor as a hint. */
static dnnl_status_t build_backward(const void *arg, dnnl_engine_t eng,
                                    const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                    CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  bool data = b->s->kind == G_INPUT;
  Mds m;
  dnnl_convolution_desc_t fwd, bwd;
  dnnl_primitive_desc_t hint = NULL;
  dnnl_status_t st;
  *what = "convolution descriptor";
  if ((st = conv_mds(b, &m)) ||
      (st = cpu_dnnl_conv_desc(&fwd, CPU_CONV_FORWARD, dnnl_forward_training, &b->s->a, b->g,
                               &m.src, &m.wei, NULL, &m.dst)) ||
      (st = cpu_dnnl_conv_desc(&bwd, data ? CPU_CONV_BACKWARD_DATA : CPU_CONV_BACKWARD_WEIGHTS,
                               dnnl_backward, &b->s->a, b->g, &m.src, &m.wei, NULL, &m.dst)))
    return st;
  *what = "convolution primitive descriptor";
  if ((st = dnnl_primitive_desc_create(&hint, &fwd, NULL, eng, NULL))) return st;
  st = dnnl_primitive_desc_create(pd, &bwd, attr, eng, hint);
  dnnl_primitive_desc_destroy(hint);
  if (st) return st;
  *num_args = 3;
  if (data) {
    args[0] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_DST, .user = m.dst_user};
    args[1] = (CpuDnnlArg){.arg = DNNL_ARG_WEIGHTS, .keep = true, .user = m.wei_user};
    args[2] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_SRC, .output = true, .user = m.src_user};
  } else {
    args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC, .user = m.src_user};
    args[1] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_DST, .user = m.dst_user};
    args[2] = (CpuDnnlArg){.arg = DNNL_ARG_DIFF_WEIGHTS, .output = true, .user = m.wei_user};
  }
  return dnnl_success;
}

/* G_INPUT: a = out_backprop, b = filter, out = input gradient. G_FILTER: a = input,
 * b = out_backprop, out = filter gradient. The batch is cut into shards
 * (cpu_dnnl_for_batch); for the filter gradient each shard after the first sums its images
 * into a buffer of its own, added to out at the end. */
typedef struct DnnlJob {
  State *s;
  const Geo *g;
  const float *a, *b;
  float *out;
  float *partial; /* G_FILTER: (shards - 1) filter-sized buffers */
} DnnlJob;

static floe_code dnnl_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                            int64_t first, int64_t count, int shard) {
  const DnnlJob *j = arg;
  Geo g = *j->g;
  g.n = count;
  int64_t in_img = g.c * g.h * g.w, out_img = g.o * g.oh * g.ow;
  int64_t filter = g.kh * g.kw * g.c * g.o;
  void *data[3];
  if (j->s->kind == G_INPUT) {
    data[0] = (void *)(j->a + first * out_img);
    data[1] = (void *)j->b;
    data[2] = j->out + first * in_img;
  } else {
    data[0] = (void *)(j->a + first * in_img);
    data[1] = (void *)(j->b + first * out_img);
    data[2] = shard == 0 ? j->out : j->partial + (shard - 1) * filter;
  }
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, 0};
  Build bd = {j->s, &g};
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, grad_names[j->s->kind], key, build_backward,
                      &bd, data);
}

static floe_code run_dnnl(State *s, FloeKernelContext *ctx, const Geo *g, const float *a,
                          const float *b, float *out) {
  DnnlJob j = {s, g, a, b, out, NULL};
  int shards = cpu_dnnl_batch_shards(g->n);
  int64_t filter = g->kh * g->kw * g->c * g->o;
  if (s->kind == G_FILTER && shards > 1) {
    /* cpu_dnnl_for_batch runs ceil(n / ceil(n / shards)) shards, maybe fewer than asked
     * (5 images on 4 threads: 3): sum only the buffers written. */
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

/* ---------------------------------------------------------------------------------- */
/* f64: plain loops in NHWC (NCHW is transposed in and out). */

typedef struct RefArgs {
  const CpuConvAttrs *a;
  const Geo *g;
  const double *x, *f, *dy; /* x: input (G_FILTER); f: filter (G_INPUT) */
  double *out;
} RefArgs;

/* Units are images: dy [N,OH,OW,O], f [KH,KW,C,O] -> dx [N,H,W,C]. */
static void input_f64_images(void *arg, int64_t begin, int64_t end) {
  const RefArgs *r = arg;
  const Geo *g = r->g;
  for (int64_t n = begin; n < end; n++) {
    double *dx = r->out + n * g->h * g->w * g->c;
    memset(dx, 0, (size_t)(g->h * g->w * g->c) * sizeof(double));
    for (int64_t oh = 0; oh < g->oh; oh++)
      for (int64_t ow = 0; ow < g->ow; ow++) {
        const double *dy = r->dy + ((n * g->oh + oh) * g->ow + ow) * g->o;
        for (int64_t kh = 0; kh < g->kh; kh++) {
          int64_t ih = oh * r->a->stride[0] - g->pad_t + kh * r->a->dilation[0];
          if (ih < 0 || ih >= g->h) continue;
          for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t iw = ow * r->a->stride[1] - g->pad_l + kw * r->a->dilation[1];
            if (iw < 0 || iw >= g->w) continue;
            double *x = dx + (ih * g->w + iw) * g->c;
            const double *f = r->f + (kh * g->kw + kw) * g->c * g->o;
            for (int64_t c = 0; c < g->c; c++) {
              double acc = 0;
              for (int64_t o = 0; o < g->o; o++) acc += f[c * g->o + o] * dy[o];
              x[c] += acc;
            }
          }
        }
      }
  }
}

/* Units are window positions (kh, kw): x [N,H,W,C], dy [N,OH,OW,O] -> df [KH,KW,C,O]. */
static void filter_f64_taps(void *arg, int64_t begin, int64_t end) {
  const RefArgs *r = arg;
  const Geo *g = r->g;
  for (int64_t t = begin; t < end; t++) {
    int64_t kh = t / g->kw, kw = t % g->kw;
    double *df = r->out + t * g->c * g->o;
    memset(df, 0, (size_t)(g->c * g->o) * sizeof(double));
    for (int64_t n = 0; n < g->n; n++)
      for (int64_t oh = 0; oh < g->oh; oh++) {
        int64_t ih = oh * r->a->stride[0] - g->pad_t + kh * r->a->dilation[0];
        if (ih < 0 || ih >= g->h) continue;
        for (int64_t ow = 0; ow < g->ow; ow++) {
          int64_t iw = ow * r->a->stride[1] - g->pad_l + kw * r->a->dilation[1];
          if (iw < 0 || iw >= g->w) continue;
          const double *x = r->x + ((n * g->h + ih) * g->w + iw) * g->c;
          const double *dy = r->dy + ((n * g->oh + oh) * g->ow + ow) * g->o;
          for (int64_t c = 0; c < g->c; c++)
            for (int64_t o = 0; o < g->o; o++) df[c * g->o + o] += x[c] * dy[o];
        }
      }
  }
}

/* [N, A, B] -> [N, B, A]: NCHW <-> NHWC with A, B the channel and spatial sizes. */
static void transpose_f64(const double *x, double *y, int64_t n, int64_t a, int64_t b) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < a; j++)
      for (int64_t k = 0; k < b; k++) y[(i * b + k) * a + j] = x[(i * a + j) * b + k];
}

/* G_INPUT: a = out_backprop, b = filter. G_FILTER: a = input, b = out_backprop. */
static floe_code run_f64(State *s, FloeKernelContext *ctx, const Geo *g, const double *a,
                         const double *b, double *out) {
  RefArgs r = {&s->a, g, NULL, NULL, NULL, out};
  int64_t xn = g->n * g->h * g->w * g->c, yn = g->n * g->oh * g->ow * g->o;
  bool data = s->kind == G_INPUT;
  if (data) {
    r.dy = a;
    r.f = b;
  } else {
    r.x = a;
    r.dy = b;
  }
  if (s->a.nchw) { /* transposed copies of the data tensors */
    double *buf;
    floe_code rc = cpu_host->ctx_allocate_temp(
        ctx, (size_t)(xn + yn) * sizeof(double), (void **)&buf);
    if (rc != FLOE_OK) return rc;
    transpose_f64(r.dy, buf + xn, g->n, g->o, g->oh * g->ow);
    r.dy = buf + xn;
    if (data) {
      r.out = buf;
    } else {
      transpose_f64(r.x, buf, g->n, g->c, g->h * g->w);
      r.x = buf;
    }
  }
  int64_t macs = g->oh * g->ow * g->c * g->o;
  if (data)
    cpu_parallel_for(g->n, macs * g->kh * g->kw, input_f64_images, &r);
  else
    cpu_parallel_for(g->kh * g->kw, macs * g->n, filter_f64_taps, &r);
  if (s->a.nchw && data) transpose_f64(r.out, out, g->n, g->h * g->w, g->c);
  return FLOE_OK;
}

/* f16 / bf16: widen both operands, run the f32 primitive, round the result once. */
static floe_code run_half(State *s, FloeKernelContext *ctx, const Geo *g, FloeDType dt,
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

/* a, b in run_dnnl's order; out already allocated and non-empty. */
static floe_code conv_dispatch(State *s, FloeKernelContext *ctx, const Geo *g,
                               const FloeTensor *a, const FloeTensor *b, FloeTensor *out) {
  FloeDType dt = cpu_host->tensor_dtype(out);
  switch (dt) {
    case FLOE_F32:
      return run_dnnl(s, ctx, g, cpu_host->tensor_data(a), cpu_host->tensor_data(b),
                      cpu_host->tensor_data(out));
    case FLOE_F64:
      return run_f64(s, ctx, g, cpu_host->tensor_data(a), cpu_host->tensor_data(b),
                     cpu_host->tensor_data(out));
    default: return run_half(s, ctx, g, dt, a, b, out);
  }
}

/* Shared by both backprops: the window [kh, kw, c, o] (HWIO) of `win_what` completes the
 * geometry of the data side `data_what`; out_backprop must match it; output 0 gets dims. */
static floe_code window_and_output(State *s, FloeKernelContext *ctx, Geo *g, const int64_t *win,
                                   const char *win_what, const char *win_str,
                                   const char *data_what, const char *data_str,
                                   const FloeTensor *dy, const int64_t *dims, FloeTensor **out) {
  char desc[2 * CPU_SHAPE_STR_MAX + 64];
  if (win[2] != g->c || win[0] < 1 || win[1] < 1)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "%s %s (HWIO) must have a non-empty window and the %lld input channels of %s %s (%s)",
        win_what, win_str, (long long)g->c, data_what, data_str, fmt_name(s));
  g->kh = win[0];
  g->kw = win[1];
  g->o = win[3];
  snprintf(desc, sizeof desc, "%s %s", data_what, data_str);
  floe_code rc = finish_geo(s, ctx, g, desc);
  if (rc != FLOE_OK) return rc;
  snprintf(desc, sizeof desc, "%s %s (%s) and %s %s", data_what, data_str, fmt_name(s), win_what,
           win_str);
  if ((rc = need_rank4(s, ctx, dy, "out_backprop")) != FLOE_OK ||
      (rc = check_out_shape(s, ctx, dy, "out_backprop", g, desc)) != FLOE_OK)
    return rc;
  return cpu_host->ctx_allocate_output(ctx, 0, 4, dims, out);
}

/* Conv2DBackpropInput(input_sizes, filter, out_backprop) -> [input_sizes]. */
static floe_code backprop_input_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *f = cpu_host->ctx_input(ctx, 1), *dy = cpu_host->ctx_input(ctx, 2);
  int64_t sizes[4];
  char ss[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX];
  floe_code rc = read_sizes(s, ctx, 0, "input_sizes", fmt_name(s), sizes);
  if (rc != FLOE_OK) return rc;
  Geo g;
  split_dims(s, sizes, &g);
  cpu_shape_str(ss, sizeof ss, 4, sizes);
  if (cpu_host->tensor_rank(f) != 4)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "filter must have rank 4 (HWIO), got %s",
                                   shape_str(f, sf, sizeof sf));
  const int64_t *fd = cpu_host->tensor_dims(f);
  shape_str(f, sf, sizeof sf);
  FloeTensor *out;
  if ((rc = window_and_output(s, ctx, &g, fd, "filter", sf, "input_sizes", ss, dy, sizes,
                              &out)) != FLOE_OK)
    return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  if (g.o == 0) { /* no output channels: nothing flows back */
    memset(cpu_host->tensor_data(out), 0, cpu_host->tensor_nbytes(out));
    return FLOE_OK;
  }
  return conv_dispatch(s, ctx, &g, dy, f, out);
}

/* Conv2DBackpropFilter(input, filter_sizes, out_backprop) -> [filter_sizes]. */
static floe_code backprop_filter_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *dy = cpu_host->ctx_input(ctx, 2);
  int64_t sizes[4];
  char sx[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX];
  floe_code rc = read_sizes(s, ctx, 1, "filter_sizes", "HWIO", sizes);
  if (rc != FLOE_OK || (rc = need_rank4(s, ctx, x, "input")) != FLOE_OK) return rc;
  Geo g;
  split_dims(s, cpu_host->tensor_dims(x), &g);
  shape_str(x, sx, sizeof sx);
  cpu_shape_str(sf, sizeof sf, 4, sizes);
  FloeTensor *out;
  if ((rc = window_and_output(s, ctx, &g, sizes, "filter_sizes", sf, "input", sx, dy, sizes,
                              &out)) != FLOE_OK)
    return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  if (cpu_host->tensor_num_elements(dy) == 0) { /* an empty batch or image: no gradient */
    memset(cpu_host->tensor_data(out), 0, cpu_host->tensor_nbytes(out));
    return FLOE_OK;
  }
  return conv_dispatch(s, ctx, &g, x, dy, out);
}

/* ---------------------------------------------------------------------------------- */
/* Pooling gradients. A unit is one image and one block of channels (NHWC) or one plane
 * (NCHW); units never share an input element, so no unit waits for another. */

#define POOL_CB 256 /* channels per NHWC unit at most (the per-window state lives on the stack) */

typedef struct PoolArgs {
  const Geo *g;
  int64_t cb;           /* NHWC channels per unit */
  int64_t nblocks;      /* NHWC channel blocks per image */
  const int64_t *rows;  /* in-bounds input rows [rows[2i], rows[2i+1]) of output row i */
  const int64_t *cols;  /* the same for output columns */
  bool tiles;           /* the windows cover every input element exactly once (2x2 stride 2 on
                         * even sizes): the gradient is stored, no zeroing, no adding */
  bool relu_mask;       /* _FusedMaxPoolGradRelu: a window whose maximum is not > 0 passes
                         * nothing on (ReluGrad of orig_input, a ReLU's output) */
  const void *x;        /* orig_input (MaxPoolGrad) */
  const void *dy;       /* grad [N, OH, OW, C] or [N, C, OH, OW] */
  void *dx;             /* output, the input's shape */
} PoolArgs;

/* Zeroes a unit's part of one image: whole when the block spans every channel. */
#define ZERO_UNIT(T, dx, cb, C, pixels)                                                         \
  do {                                                                                         \
    if ((cb) == (C))                                                                           \
      memset((dx), 0, (size_t)((pixels) * (C)) * sizeof(T));                                   \
    else                                                                                       \
      for (int64_t i_ = 0; i_ < (pixels); i_++)                                                \
        memset((dx) + i_ * (C), 0, (size_t)(cb) * sizeof(T));                                  \
  } while (0)

/* NHWC MaxPoolGrad: per output pixel, the first maximum of each channel over the window
 * (best / at hold it, vectorised across the block's channels), then the gradient added to
 * the winning position of each channel. */
#define DEF_MAXPOOL_NHWC(name, T)                                                              \
  CPU_HOT static void name(void *arg, int64_t begin, int64_t end) {                          \
    const PoolArgs *p = arg;                                                                   \
    const Geo *g = p->g;                                                                       \
    T best[POOL_CB], gv[POOL_CB];                                                              \
    int32_t at[POOL_CB];                                                                       \
    for (int64_t u = begin; u < end; u++) {                                                    \
      int64_t n = u / p->nblocks, c0 = u % p->nblocks * p->cb;                                 \
      int64_t cb = g->c - c0 < p->cb ? g->c - c0 : p->cb, C = g->c;                            \
      const T *x = (const T *)p->x + n * g->h * g->w * C + c0;                                 \
      T *dx = (T *)p->dx + n * g->h * g->w * C + c0;                                           \
      const T *dy = (const T *)p->dy + n * g->oh * g->ow * C + c0;                             \
      if (!p->tiles) ZERO_UNIT(T, dx, cb, C, g->h * g->w);                                     \
      for (int64_t oh = 0; oh < g->oh; oh++) {                                                 \
        int64_t h0 = p->rows[2 * oh], h1 = p->rows[2 * oh + 1];                                \
        for (int64_t ow = 0; ow < g->ow; ow++, dy += C) {                                      \
          int64_t w0 = p->cols[2 * ow], w1 = p->cols[2 * ow + 1];                              \
          if (h0 >= h1 || w0 >= w1) continue;                                                  \
          const T *first = x + (h0 * g->w + w0) * C;                                           \
          for (int64_t c = 0; c < cb; c++) {                                                   \
            best[c] = first[c];                                                                \
            at[c] = 0;                                                                         \
          }                                                                                    \
          int32_t k = 0;                                                                       \
          for (int64_t h = h0; h < h1; h++)                                                    \
            for (int64_t w = w0; w < w1; w++, k++) {                                           \
              if (k == 0) continue;                                                            \
              const T *xp = x + (h * g->w + w) * C;                                            \
              for (int64_t c = 0; c < cb; c++) {                                               \
                bool gt = xp[c] > best[c];                                                     \
                best[c] = gt ? xp[c] : best[c];                                                \
                at[c] = gt ? k : at[c];                                                        \
              }                                                                                \
            }                                                                                  \
          for (int64_t c = 0; c < cb; c++)                                                     \
            gv[c] = !p->relu_mask || best[c] > (T)0 ? dy[c] : (T)0;                            \
          k = 0;                                                                               \
          for (int64_t h = h0; h < h1; h++)                                                    \
            for (int64_t w = w0; w < w1; w++, k++) {                                           \
              T *dp = dx + (h * g->w + w) * C;                                                 \
              if (p->tiles)                                                                    \
                for (int64_t c = 0; c < cb; c++) dp[c] = at[c] == k ? gv[c] : (T)0;            \
              else                                                                             \
                for (int64_t c = 0; c < cb; c++) dp[c] += at[c] == k ? gv[c] : (T)0;           \
            }                                                                                  \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

/* NCHW MaxPoolGrad: one plane per unit, scalar windows. */
#define DEF_MAXPOOL_NCHW(name, T)                                                              \
  static void name(void *arg, int64_t begin, int64_t end) {                                    \
    const PoolArgs *p = arg;                                                                   \
    const Geo *g = p->g;                                                                       \
    for (int64_t u = begin; u < end; u++) {                                                    \
      const T *x = (const T *)p->x + u * g->h * g->w;                                          \
      T *dx = (T *)p->dx + u * g->h * g->w;                                                    \
      const T *dy = (const T *)p->dy + u * g->oh * g->ow;                                      \
      memset(dx, 0, (size_t)(g->h * g->w) * sizeof(T));                                        \
      for (int64_t oh = 0; oh < g->oh; oh++) {                                                 \
        int64_t h0 = p->rows[2 * oh], h1 = p->rows[2 * oh + 1];                                \
        for (int64_t ow = 0; ow < g->ow; ow++, dy++) {                                         \
          int64_t w0 = p->cols[2 * ow], w1 = p->cols[2 * ow + 1];                              \
          if (h0 >= h1 || w0 >= w1) continue;                                                  \
          int64_t at = h0 * g->w + w0;                                                         \
          T best = x[at];                                                                      \
          for (int64_t h = h0; h < h1; h++)                                                    \
            for (int64_t w = w0; w < w1; w++) {                                                \
              bool gt = x[h * g->w + w] > best;                                                \
              best = gt ? x[h * g->w + w] : best;                                              \
              at = gt ? h * g->w + w : at;                                                     \
            }                                                                                  \
          if (!p->relu_mask || best > (T)0) dx[at] += *dy;                                     \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

/* NHWC AvgPoolGrad: each window's gradient over its in-bounds count, added to every
 * in-bounds position. */
#define DEF_AVGPOOL_NHWC(name, T)                                                              \
  CPU_HOT static void name(void *arg, int64_t begin, int64_t end) {                          \
    const PoolArgs *p = arg;                                                                   \
    const Geo *g = p->g;                                                                       \
    T share[POOL_CB];                                                                          \
    for (int64_t u = begin; u < end; u++) {                                                    \
      int64_t n = u / p->nblocks, c0 = u % p->nblocks * p->cb;                                 \
      int64_t cb = g->c - c0 < p->cb ? g->c - c0 : p->cb, C = g->c;                            \
      T *dx = (T *)p->dx + n * g->h * g->w * C + c0;                                           \
      const T *dy = (const T *)p->dy + n * g->oh * g->ow * C + c0;                             \
      if (!p->tiles) ZERO_UNIT(T, dx, cb, C, g->h * g->w);                                     \
      for (int64_t oh = 0; oh < g->oh; oh++) {                                                 \
        int64_t h0 = p->rows[2 * oh], h1 = p->rows[2 * oh + 1];                                \
        for (int64_t ow = 0; ow < g->ow; ow++, dy += C) {                                      \
          int64_t w0 = p->cols[2 * ow], w1 = p->cols[2 * ow + 1];                              \
          if (h0 >= h1 || w0 >= w1) continue;                                                  \
          T inv = (T)1 / (T)((h1 - h0) * (w1 - w0));                                           \
          for (int64_t c = 0; c < cb; c++) share[c] = dy[c] * inv;                             \
          for (int64_t h = h0; h < h1; h++)                                                    \
            for (int64_t w = w0; w < w1; w++) {                                                \
              T *dp = dx + (h * g->w + w) * C;                                                 \
              if (p->tiles)                                                                    \
                for (int64_t c = 0; c < cb; c++) dp[c] = share[c];                             \
              else                                                                             \
                for (int64_t c = 0; c < cb; c++) dp[c] += share[c];                            \
            }                                                                                  \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

#define DEF_AVGPOOL_NCHW(name, T)                                                              \
  static void name(void *arg, int64_t begin, int64_t end) {                                    \
    const PoolArgs *p = arg;                                                                   \
    const Geo *g = p->g;                                                                       \
    for (int64_t u = begin; u < end; u++) {                                                    \
      T *dx = (T *)p->dx + u * g->h * g->w;                                                    \
      const T *dy = (const T *)p->dy + u * g->oh * g->ow;                                      \
      memset(dx, 0, (size_t)(g->h * g->w) * sizeof(T));                                        \
      for (int64_t oh = 0; oh < g->oh; oh++) {                                                 \
        int64_t h0 = p->rows[2 * oh], h1 = p->rows[2 * oh + 1];                                \
        for (int64_t ow = 0; ow < g->ow; ow++, dy++) {                                         \
          int64_t w0 = p->cols[2 * ow], w1 = p->cols[2 * ow + 1];                              \
          if (h0 >= h1 || w0 >= w1) continue;                                                  \
          T share = *dy / (T)((h1 - h0) * (w1 - w0));                                          \
          for (int64_t h = h0; h < h1; h++)                                                    \
            for (int64_t w = w0; w < w1; w++) dx[h * g->w + w] += share;                       \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

DEF_MAXPOOL_NHWC(maxpool_nhwc_f32, float)
DEF_MAXPOOL_NHWC(maxpool_nhwc_f64, double)
DEF_MAXPOOL_NCHW(maxpool_nchw_f32, float)
DEF_MAXPOOL_NCHW(maxpool_nchw_f64, double)
DEF_AVGPOOL_NHWC(avgpool_nhwc_f32, float)
DEF_AVGPOOL_NHWC(avgpool_nhwc_f64, double)
DEF_AVGPOOL_NCHW(avgpool_nchw_f32, float)
DEF_AVGPOOL_NCHW(avgpool_nchw_f64, double)

/* The in-bounds input range [out[2i], out[2i+1]) of each of n outputs along one dim;
 * returns whether the ranges tile [0, in) (each element in exactly one range). */
static bool window_ranges(int64_t n, int64_t stride, int64_t pad, int64_t k, int64_t in,
                          int64_t *out) {
  bool tiles = true;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = i * stride - pad, e = s + k;
    out[2 * i] = s < 0 ? 0 : s;
    out[2 * i + 1] = e < in ? e : in;
    tiles = tiles && out[2 * i] == (i ? out[2 * i - 1] : 0) && out[2 * i] < out[2 * i + 1];
  }
  return tiles && n > 0 && out[2 * n - 1] == in;
}

/* Runs the pooling gradient for dtype f32 or f64 on p (x, dy, dx set). */
static void pool_run(const State *s, PoolArgs *p, bool f64) {
  const Geo *g = p->g;
  int64_t units, cost = g->oh * g->ow * g->kh * g->kw + g->h * g->w;
  FloeParallelFn fn;
  if (s->a.nchw) {
    units = g->n * g->c;
    if (s->kind != G_AVGPOOL)
      fn = f64 ? maxpool_nchw_f64 : maxpool_nchw_f32;
    else
      fn = f64 ? avgpool_nchw_f64 : avgpool_nchw_f32;
  } else {
    /* Whole images when there are enough of them, else narrower channel blocks (multiples
     * of 16) so that every thread gets work. */
    int64_t want = 4 * (int64_t)cpu_host->num_threads(), cb = g->c;
    if (g->n < want) cb = (g->c * g->n + want - 1) / want;
    cb = (cb + 15) / 16 * 16;
    if (cb > POOL_CB) cb = POOL_CB;
    if (cb > g->c) cb = g->c;
    p->cb = cb;
    p->nblocks = (g->c + cb - 1) / cb;
    units = g->n * p->nblocks;
    cost *= cb;
    if (s->kind != G_AVGPOOL)
      fn = f64 ? maxpool_nhwc_f64 : maxpool_nhwc_f32;
    else
      fn = f64 ? avgpool_nhwc_f64 : avgpool_nhwc_f32;
  }
  cpu_parallel_for(units, cost, fn, p);
}

/* MaxPoolGrad and _FusedMaxPoolGradRelu (orig_input, orig_output, grad), and
 * AvgPoolGrad(orig_input_shape, grad). */
static floe_code pool_grad_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  bool is_max = s->kind != G_AVGPOOL;
  const FloeTensor *x = is_max ? cpu_host->ctx_input(ctx, 0) : NULL;
  const FloeTensor *dy = cpu_host->ctx_input(ctx, is_max ? 2 : 1);
  int64_t sizes[4];
  char sx[CPU_SHAPE_STR_MAX], desc[CPU_SHAPE_STR_MAX + 64];
  floe_code rc;
  if (is_max) {
    if ((rc = need_rank4(s, ctx, x, "orig_input")) != FLOE_OK) return rc;
    memcpy(sizes, cpu_host->tensor_dims(x), sizeof sizes);
    snprintf(desc, sizeof desc, "orig_input %s", shape_str(x, sx, sizeof sx));
  } else {
    if ((rc = read_sizes(s, ctx, 0, "orig_input_shape", fmt_name(s), sizes)) != FLOE_OK)
      return rc;
    snprintf(desc, sizeof desc, "orig_input_shape %s", cpu_shape_str(sx, sizeof sx, 4, sizes));
  }
  Geo g;
  split_dims(s, sizes, &g);
  g.o = g.c;
  g.kh = s->a.ksize[0];
  g.kw = s->a.ksize[1];
  if ((rc = finish_geo(s, ctx, &g, desc)) != FLOE_OK) return rc;
  snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " (%s)", fmt_name(s));
  if (is_max) {
    const FloeTensor *y = cpu_host->ctx_input(ctx, 1);
    if ((rc = need_rank4(s, ctx, y, "orig_output")) != FLOE_OK ||
        (rc = check_out_shape(s, ctx, y, "orig_output", &g, desc)) != FLOE_OK)
      return rc;
  }
  if ((rc = need_rank4(s, ctx, dy, "grad")) != FLOE_OK ||
      (rc = check_out_shape(s, ctx, dy, "grad", &g, desc)) != FLOE_OK)
    return rc;
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 4, sizes, &out)) != FLOE_OK) return rc;
  int64_t xn = cpu_host->tensor_num_elements(out), yn = cpu_host->tensor_num_elements(dy);
  if (xn == 0) return FLOE_OK;
  int64_t *ranges;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(2 * (g.oh + g.ow)) * sizeof(int64_t),
                                        (void **)&ranges)) != FLOE_OK)
    return rc;
  bool rows_tile = window_ranges(g.oh, s->a.stride[0], g.pad_t, g.kh, g.h, ranges);
  bool cols_tile = window_ranges(g.ow, s->a.stride[1], g.pad_l, g.kw, g.w, ranges + 2 * g.oh);
  PoolArgs p = {&g,          0,     1, ranges, ranges + 2 * g.oh, rows_tile && cols_tile,
                s->kind == G_MAXPOOL_RELU, x ? cpu_host->tensor_data(x) : NULL,
                cpu_host->tensor_data(dy), cpu_host->tensor_data(out)};
  FloeDType dt = cpu_host->tensor_dtype(out);
  if (dt == FLOE_F32 || dt == FLOE_F64) {
    pool_run(s, &p, dt == FLOE_F64);
    return FLOE_OK;
  }
  /* f16 / bf16: widen, run in f32, round the result once. */
  float *buf;
  rc = cpu_host->ctx_allocate_temp(ctx, (size_t)((x ? 2 * xn : xn) + yn) * sizeof(float),
                                   (void **)&buf);
  if (rc != FLOE_OK) return rc;
  cpu_convert_half(dt, true, p.dy, buf, yn);
  p.dy = buf;
  p.dx = buf + yn;
  if (x) {
    cpu_convert_half(dt, true, p.x, buf + yn + xn, xn);
    p.x = buf + yn + xn;
  }
  pool_run(s, &p, false);
  cpu_convert_half(dt, false, p.dx, cpu_host->tensor_data(out), xn);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */

static const GradKind kinds[] = {G_INPUT, G_FILTER, G_MAXPOOL, G_AVGPOOL, G_MAXPOOL_RELU};

floe_code cpu_register_conv_grad(FloePluginRegistrar *reg) {
  floe_code (*const computes[])(void *, FloeKernelContext *) = {
      backprop_input_compute, backprop_filter_compute, pool_grad_compute, pool_grad_compute,
      pool_grad_compute};
  for (int i = 0; i < 5; i++) {
    floe_code rc = cpu_add_kernel(reg, grad_names[i], "T", FLOE_DTYPES_FLOAT, 0, computes[i],
                                  state_create, state_destroy, (void *)&kinds[i]);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
