/* SPDX-License-Identifier: Apache-2.0 */
/* conv.c - Conv2D, MaxPool, AvgPool and _FusedConv2DBiasRelu of the CPU plugin.
 *
 * f32 runs on oneDNN primitives built once per input shape and cached in the kernel state
 * (conv_util.c). NHWC data is handed to the primitive as it is; NCHW data and the HWIO filter
 * go to the layouts the primitive prefers (format `any`), and a reordered filter is reused
 * while the filter fed in stays byte-for-byte the same. f16 and bf16 are widened to f32 and
 * run the same primitives; f64 runs plain double loops (oneDNN has no f64 on CPU, and
 * narrowing to f32 would lose the precision the caller asked for). The fused convolution
 * gives oneDNN the bias and a ReLU post-op, so the output is written once, already
 * activated; the other dtypes add bias and ReLU in a pass after the convolution. */
#include <dnnl.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "conv_util.h"
#include "cpu.h"
#include "cpu_util.h"

typedef enum OpKind { OP_CONV, OP_MAXPOOL, OP_AVGPOOL, OP_FUSED } OpKind;

static const char *const op_names[] = {"Conv2D", "MaxPool", "AvgPool", "_FusedConv2DBiasRelu"};

static bool is_conv(OpKind k) { return k == OP_CONV || k == OP_FUSED; }

typedef struct State {
  OpKind kind;
  CpuConvAttrs a;
  CpuDnnlCache cache;
} State;

typedef CpuConvGeo Geo;

/* "[2,3,4]" for error messages. */
static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  return cpu_shape_str(buf, len, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

static void state_destroy(void *state) {
  State *s = state;
  cpu_dnnl_cache_destroy(&s->cache);
  cpu_host->free(s);
}

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  s->kind = *(const OpKind *)user_data;
  floe_code rc = cpu_conv_parse_attrs(host, init, !is_conv(s->kind), &s->a);
  if (rc == FLOE_OK) rc = cpu_dnnl_cache_init(&s->cache, host, init);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  *state = s;
  return FLOE_OK;
}

static floe_code make_geo(const State *s, FloeKernelContext *ctx, const FloeTensor *x,
                          const FloeTensor *f, Geo *g) {
  char sx[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX];
  bool nchw = s->a.nchw;
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input must have rank 4 (%s), got %s",
                                   nchw ? "NCHW" : "NHWC", shape_str(x, sx, sizeof sx));
  const int64_t *d = cpu_host->tensor_dims(x);
  g->n = d[0];
  g->c = nchw ? d[1] : d[3];
  g->h = nchw ? d[2] : d[1];
  g->w = nchw ? d[3] : d[2];
  if (f) {
    const int64_t *fd = cpu_host->tensor_dims(f);
    if (cpu_host->tensor_rank(f) != 4)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter must have rank 4 (HWIO), got %s",
                                     shape_str(f, sf, sizeof sf));
    if (fd[2] != g->c)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "filter %s (HWIO) has %lld input channels but input %s (%s) has %lld",
          shape_str(f, sf, sizeof sf), (long long)fd[2], shape_str(x, sx, sizeof sx),
          nchw ? "NCHW" : "NHWC", (long long)g->c);
    if (fd[0] < 1 || fd[1] < 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter %s (HWIO) must have a non-empty window",
                                     shape_str(f, sf, sizeof sf));
    g->kh = fd[0];
    g->kw = fd[1];
    g->o = fd[3];
  } else {
    g->kh = s->a.ksize[0];
    g->kw = s->a.ksize[1];
    g->o = g->c;
  }
  if (!cpu_conv_geo_finish(&s->a, g))
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "input %s is smaller than the %lldx%lld window (dilations %lldx%lld) with VALID padding",
        shape_str(x, sx, sizeof sx), (long long)g->kh, (long long)g->kw,
        (long long)s->a.dilation[0], (long long)s->a.dilation[1]);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN primitives. */

typedef struct Build {
  const State *s;
  const Geo *g;
} Build;

/* NHWC data stays in its layout (oneDNN's brgconv kernels read it directly, which beats a
 * blocked layout plus two reorders per call); NCHW data and the filter go to the layouts the
 * primitive prefers. */
static dnnl_status_t build_conv(const void *arg, dnnl_engine_t eng,
                                const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  const Geo *g = b->g;
  bool fused = b->s->kind == OP_FUSED;
  dnnl_format_tag_t tag = b->s->a.nchw ? dnnl_nchw : dnnl_nhwc;
  dnnl_format_tag_t data_tag = b->s->a.nchw ? dnnl_format_tag_any : dnnl_nhwc;
  dnnl_dims_t src_dims = {g->n, g->c, g->h, g->w}, dst_dims = {g->n, g->o, g->oh, g->ow};
  dnnl_dims_t wei_dims = {g->o, g->c, g->kh, g->kw}, bias_dims = {g->o};
  dnnl_memory_desc_t src, wei, dst;
  dnnl_convolution_desc_t cd;
  dnnl_status_t st;
  *what = "convolution descriptor";
  int dst_arg = fused ? 3 : 2;
  args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC};
  args[1] = (CpuDnnlArg){.arg = DNNL_ARG_WEIGHTS, .keep = true};
  if (fused) args[2] = (CpuDnnlArg){.arg = DNNL_ARG_BIAS};
  args[dst_arg] = (CpuDnnlArg){.arg = DNNL_ARG_DST, .output = true};
  *num_args = dst_arg + 1;
  if ((st = dnnl_memory_desc_init_by_tag(&args[0].user, 4, src_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&args[1].user, 4, wei_dims, dnnl_f32, dnnl_hwio)) ||
      (fused &&
       (st = dnnl_memory_desc_init_by_tag(&args[2].user, 1, bias_dims, dnnl_f32, dnnl_a))) ||
      (st = dnnl_memory_desc_init_by_tag(&args[dst_arg].user, 4, dst_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f32, data_tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&wei, 4, wei_dims, dnnl_f32, dnnl_format_tag_any)) ||
      (st = dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f32, data_tag)) ||
      (st = cpu_dnnl_conv_desc(&cd, CPU_CONV_FORWARD, dnnl_forward_inference, &b->s->a, g, &src,
                               &wei, fused ? &args[2].user : NULL, &dst)))
    return st;
  *what = "convolution primitive descriptor";
  if (!fused) return dnnl_primitive_desc_create(pd, &cd, attr, eng, NULL);
  /* The ReLU as a post-op on a copy of the caller's attributes. */
  dnnl_primitive_attr_t relu_attr = NULL;
  dnnl_post_ops_t po = NULL;
  *what = "ReLU post-op";
  if ((st = dnnl_primitive_attr_clone(&relu_attr, attr)) || (st = dnnl_post_ops_create(&po)) ||
      (st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f)) ||
      (st = dnnl_primitive_attr_set_post_ops(relu_attr, po)))
    goto out;
  *what = "convolution primitive descriptor";
  st = dnnl_primitive_desc_create(pd, &cd, relu_attr, eng, NULL);
out:
  dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(relu_attr);
  return st;
}

static dnnl_status_t build_pool(const void *arg, dnnl_engine_t eng,
                                const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  const Geo *g = b->g;
  const CpuConvAttrs *a = &b->s->a;
  dnnl_format_tag_t tag = a->nchw ? dnnl_nchw : dnnl_nhwc;
  dnnl_dims_t src_dims = {g->n, g->c, g->h, g->w}, dst_dims = {g->n, g->o, g->oh, g->ow};
  dnnl_dims_t strides = {a->stride[0], a->stride[1]}, kernel = {g->kh, g->kw}, dil = {0, 0};
  dnnl_dims_t pad_l = {g->pad_t, g->pad_l}, pad_r = {g->pad_b, g->pad_r};
  dnnl_pooling_v2_desc_t pool;
  dnnl_status_t st;
  *what = "pooling descriptor";
  args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC};
  args[1] = (CpuDnnlArg){.arg = DNNL_ARG_DST, .output = true};
  *num_args = 2;
  if ((st = dnnl_memory_desc_init_by_tag(&args[0].user, 4, src_dims, dnnl_f32, tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&args[1].user, 4, dst_dims, dnnl_f32, tag)) ||
      (st = dnnl_pooling_v2_forward_desc_init(
           &pool, dnnl_forward_inference,
           b->s->kind == OP_MAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding,
           &args[0].user, &args[1].user, strides, kernel, dil, pad_l, pad_r)))
    return st;
  *what = "pooling primitive descriptor";
  return dnnl_primitive_desc_create(pd, &pool, attr, eng, NULL);
}

/* The f32 primitive for g on src (logical layout of the data format), wei (HWIO, NULL for
 * pooling) into dst, for images [first, first + count) (a shard of the batch). */
typedef struct DnnlJob {
  State *s;
  const Geo *g;
  const float *src, *wei, *bias; /* bias: the fused convolution's */
  float *dst;
} DnnlJob;

static floe_code dnnl_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                            int64_t first, int64_t count, int shard) {
  (void)shard;
  const DnnlJob *j = arg;
  Geo g = *j->g;
  g.n = count;
  const float *src = j->src + first * g.c * g.h * g.w;
  float *dst = j->dst + first * g.o * g.oh * g.ow;
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n, g.c, g.h, g.w, j->wei ? g.o : 0, j->wei ? g.kh : 0,
                                   j->wei ? g.kw : 0, 0};
  Build b = {j->s, &g};
  /* The primitive's arguments in build_conv's / build_pool's order. */
  void *data[4];
  int n = 0;
  data[n++] = (void *)src;
  if (j->wei) data[n++] = (void *)j->wei;
  if (j->bias) data[n++] = (void *)j->bias;
  data[n++] = dst;
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, op_names[j->s->kind], key,
                      j->wei ? build_conv : build_pool, &b, data);
}

static floe_code run_dnnl(State *s, FloeKernelContext *ctx, const Geo *g, const float *src,
                          const float *wei, const float *bias, float *dst) {
  DnnlJob j = {s, g, src, wei, bias, dst};
  return cpu_dnnl_for_batch(ctx, g->n, cpu_dnnl_batch_shards(g->n), dnnl_shard, &j);
}

/* ---------------------------------------------------------------------------------- */
/* f64: plain loops in NHWC (NCHW is transposed in and out). */

typedef struct RefArgs {
  const State *s;
  const Geo *g;
  const double *x, *f;
  double *y;
} RefArgs;

/* Rows are (n, oh) pairs: x [N,H,W,C], f [KH,KW,C,O] -> y [N,OH,OW,O]. */
static void conv_f64_rows(void *arg, int64_t begin, int64_t end) {
  const RefArgs *a = arg;
  const Geo *g = a->g;
  for (int64_t r = begin; r < end; r++) {
    int64_t n = r / g->oh, oh = r % g->oh;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      double *y = a->y + ((n * g->oh + oh) * g->ow + ow) * g->o;
      for (int64_t o = 0; o < g->o; o++) y[o] = 0;
      for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t ih = oh * a->s->a.stride[0] - g->pad_t + kh * a->s->a.dilation[0];
        if (ih < 0 || ih >= g->h) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
          int64_t iw = ow * a->s->a.stride[1] - g->pad_l + kw * a->s->a.dilation[1];
          if (iw < 0 || iw >= g->w) continue;
          const double *x = a->x + ((n * g->h + ih) * g->w + iw) * g->c;
          const double *f = a->f + (kh * g->kw + kw) * g->c * g->o;
          for (int64_t c = 0; c < g->c; c++)
            for (int64_t o = 0; o < g->o; o++) y[o] += x[c] * f[c * g->o + o];
        }
      }
    }
  }
}

/* Rows are (n, oh) pairs: x [N,H,W,C] -> y [N,OH,OW,C]; AvgPool divides by the in-bounds
 * count. */
static void pool_f64_rows(void *arg, int64_t begin, int64_t end) {
  const RefArgs *a = arg;
  const Geo *g = a->g;
  bool is_max = a->s->kind == OP_MAXPOOL;
  for (int64_t r = begin; r < end; r++) {
    int64_t n = r / g->oh, oh = r % g->oh;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      double *y = a->y + ((n * g->oh + oh) * g->ow + ow) * g->c;
      for (int64_t c = 0; c < g->c; c++) y[c] = is_max ? -INFINITY : 0;
      int64_t count = 0;
      for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t ih = oh * a->s->a.stride[0] - g->pad_t + kh;
        if (ih < 0 || ih >= g->h) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
          int64_t iw = ow * a->s->a.stride[1] - g->pad_l + kw;
          if (iw < 0 || iw >= g->w) continue;
          const double *x = a->x + ((n * g->h + ih) * g->w + iw) * g->c;
          count++;
          if (is_max)
            for (int64_t c = 0; c < g->c; c++) y[c] = x[c] > y[c] ? x[c] : y[c];
          else
            for (int64_t c = 0; c < g->c; c++) y[c] += x[c];
        }
      }
      if (!is_max)
        for (int64_t c = 0; c < g->c; c++) y[c] /= (double)count;
    }
  }
}

/* [N, A, B] -> [N, B, A]: NCHW <-> NHWC with A, B the channel and spatial sizes. */
static void transpose_f64(const double *x, double *y, int64_t n, int64_t a, int64_t b) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < a; j++)
      for (int64_t k = 0; k < b; k++) y[(i * b + k) * a + j] = x[(i * a + j) * b + k];
}

/* y += bias per output channel, then max(y, 0): the fused op's tail for f64. */
static void bias_relu_f64(const State *s, const Geo *g, const double *bias, double *y) {
  int64_t plane = g->oh * g->ow, n = g->n * g->o * plane;
  for (int64_t i = 0; i < n; i++) {
    double v = y[i] + bias[s->a.nchw ? i / plane % g->o : i % g->o];
    y[i] = v > 0 ? v : 0;
  }
}

static floe_code run_f64(State *s, FloeKernelContext *ctx, const Geo *g, const double *x,
                         const double *f, const double *bias, double *y) {
  RefArgs a = {s, g, x, f, y};
  floe_code rc;
  if (s->a.nchw) {
    double *buf;
    size_t in_n = (size_t)(g->n * g->c * g->h * g->w), out_n = (size_t)(g->n * g->o * g->oh * g->ow);
    if ((rc = cpu_host->ctx_allocate_temp(ctx, (in_n + out_n) * sizeof(double), (void **)&buf)))
      return rc;
    transpose_f64(x, buf, g->n, g->c, g->h * g->w);
    a.x = buf;
    a.y = buf + in_n;
  }
  FloeParallelFn fn = is_conv(s->kind) ? conv_f64_rows : pool_f64_rows;
  int64_t rows = g->n * g->oh;
  int64_t row_cost = g->ow * g->kh * g->kw * g->c * (is_conv(s->kind) ? g->o : 1);
  cpu_parallel_for(rows, row_cost, fn, &a);
  if (s->a.nchw) transpose_f64(a.y, y, g->n, g->oh * g->ow, g->o);
  if (bias) bias_relu_f64(s, g, bias, y);
  return FLOE_OK;
}


static floe_code run_half(State *s, FloeKernelContext *ctx, const Geo *g, FloeDType dt,
                          const uint16_t *x, const uint16_t *f, const uint16_t *bias,
                          uint16_t *y) {
  int64_t yn = g->n * g->o * g->oh * g->ow;
  const void *src[3] = {x, f, bias};
  const int64_t count[3] = {g->n * g->c * g->h * g->w, f ? g->kh * g->kw * g->c * g->o : 0,
                            bias ? g->o : 0};
  float *wide[3], *yb;
  floe_code rc = cpu_half_widen_temp(ctx, dt, 3, src, count, yn, wide, &yb);
  if (rc != FLOE_OK) return rc;
  rc = run_dnnl(s, ctx, g, wide[0], f ? wide[1] : NULL, bias ? wide[2] : NULL, yb);
  if (rc == FLOE_OK) cpu_convert_half(dt, false, yb, y, yn);
  return rc;
}

/* Every output element = max(bias of its channel, 0): the fused op with no input channels. */
static void fill_relu_bias(const State *s, const Geo *g, FloeDType dt, const void *bias, void *y) {
  int64_t plane = g->oh * g->ow, n = g->n * g->o * plane;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = s->a.nchw ? i / plane % g->o : i % g->o;
    switch (dt) {
      case FLOE_F32: ((float *)y)[i] = fmaxf(((const float *)bias)[c], 0.0f); break;
      case FLOE_F64: ((double *)y)[i] = fmax(((const double *)bias)[c], 0.0); break;
      case FLOE_F16: {
        float v = cpu_f16_to_f32(((const uint16_t *)bias)[c]);
        ((uint16_t *)y)[i] = cpu_f32_to_f16(v > 0 ? v : 0);
        break;
      }
      default: {
        float v = cpu_bf16_to_f32(((const uint16_t *)bias)[c]);
        ((uint16_t *)y)[i] = cpu_f32_to_bf16(v > 0 ? v : 0);
      }
    }
  }
}

/* ---------------------------------------------------------------------------------- */

static floe_code window_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  const FloeTensor *f = is_conv(s->kind) ? cpu_host->ctx_input(ctx, 1) : NULL;
  const FloeTensor *bias = s->kind == OP_FUSED ? cpu_host->ctx_input(ctx, 2) : NULL;
  Geo g;
  floe_code rc = make_geo(s, ctx, x, f, &g);
  if (rc != FLOE_OK) return rc;
  if (bias && (cpu_host->tensor_rank(bias) != 1 || cpu_host->tensor_dims(bias)[0] != g.o)) {
    char sb[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "bias %s must be [%lld], one value per output channel of the "
                                   "filter %s",
                                   shape_str(bias, sb, sizeof sb), (long long)g.o,
                                   shape_str(f, sf, sizeof sf));
  }
  int64_t dims[4] = {g.n, g.oh, g.ow, g.o};
  if (s->a.nchw) {
    dims[1] = g.o;
    dims[2] = g.oh;
    dims[3] = g.ow;
  }
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 4, dims, &out)) != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  void *y = cpu_host->tensor_data(out);
  const void *xd = cpu_host->tensor_data(x), *fd = f ? cpu_host->tensor_data(f) : NULL;
  const void *bd = bias ? cpu_host->tensor_data(bias) : NULL;
  FloeDType dt = cpu_host->tensor_dtype(x);
  if (g.c == 0) { /* a convolution summing over no channels: relu(bias) for the fused op */
    memset(y, 0, cpu_host->tensor_nbytes(out));
    if (bias) fill_relu_bias(s, &g, dt, bd, y);
    return FLOE_OK;
  }
  switch (dt) {
    case FLOE_F32: return run_dnnl(s, ctx, &g, xd, fd, bd, y);
    case FLOE_F64: return run_f64(s, ctx, &g, xd, fd, bd, y);
    default: return run_half(s, ctx, &g, dt, xd, fd, bd, y);
  }
}

static const OpKind kind_conv = OP_CONV, kind_maxpool = OP_MAXPOOL, kind_avgpool = OP_AVGPOOL,
                    kind_fused = OP_FUSED;

floe_code cpu_register_conv(FloePluginRegistrar *reg) {
  const OpKind *kinds[] = {&kind_conv, &kind_maxpool, &kind_avgpool, &kind_fused};
  for (int i = 0; i < 4; i++) {
    floe_code rc = cpu_add_kernel(reg, op_names[i], "T", FLOE_DTYPES_FLOAT, 0, window_compute,
                                  state_create, state_destroy, (void *)kinds[i]);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
