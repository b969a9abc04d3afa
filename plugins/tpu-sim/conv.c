/* SPDX-License-Identifier: Apache-2.0 */
/* conv.c - Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter on the matrix unit, and
 * MaxPool / MaxPoolGrad on the vector unit.
 *
 * A convolution is its im2col product, as XLA lowers convolutions onto a TPU's MXU: the
 * patches matrix P[N*OH*OW, KH*KW*C] (row: an output pixel; column: (kh, kw, c), the order
 * of an HWIO filter's rows) times the filter F[KH*KW*C, O]. Then
 *   Conv2D                 Y  = P F                 [N*OH*OW, O] (NHWC rows)
 *   Conv2DBackpropInput    dP = dY F^T, scattered back (col2im) into dX
 *   Conv2DBackpropFilter   dF = P^T dY
 * all through tpu_gemm (bf16 operands, f32 accumulation). Attributes and layouts are the
 * CPU plugin's: data_format NHWC or NCHW (read through strides; NCHW outputs are written
 * through a transposition), padding SAME (odd pixel after) or VALID, strides, dilations. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim.h"

typedef enum ConvKind { K_CONV, K_BACK_INPUT, K_BACK_FILTER, K_MAXPOOL, K_MAXPOOL_GRAD } ConvKind;

typedef struct ConvState {
  ConvKind kind;
  bool nchw, same;
  int64_t stride[2], dilation[2], ksize[2]; /* H, W; ksize for pooling only */
} ConvState;

/* Geometry of one call, logical (N, C, H, W). */
typedef struct Geo {
  int64_t n, c, h, w, o, kh, kw, oh, ow, pad_t, pad_l;
} Geo;

/* ---------------------------------------------------------------------------------- */
/* Attributes. */

/* A 4-entry list in data-format order -> its H and W; N and C must be 1. */
static floe_code hw_list(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                         bool required, bool nchw, int64_t hw[2]) {
  const int64_t *v;
  size_t n;
  char buf[TPU_SHAPE_STR_MAX];
  floe_code rc = host->attr_int_list(host->init_attrs(init), name, &v, &n);
  if (rc == FLOE_NOT_FOUND && !required) {
    hw[0] = hw[1] = 1;
    return FLOE_OK;
  }
  if (rc != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute %s (a list of 4 ints) is %s", name,
                                rc == FLOE_NOT_FOUND ? "required" : "not a list of ints");
  int cdim = nchw ? 1 : 3, hdim = nchw ? 2 : 1;
  if (n != 4 || v[0] != 1 || v[cdim] != 1 || v[hdim] < 1 || v[hdim + 1] < 1)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s must be 4 positive entries in %s order with 1 for N and C, "
                                "got %s", name, nchw ? "N,C,H,W" : "N,H,W,C",
                                tpu_dims_str((int)n, v, buf, sizeof buf));
  hw[0] = v[hdim];
  hw[1] = v[hdim + 1];
  return FLOE_OK;
}

static floe_code conv_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  const FloeAttrs *attrs = host->init_attrs(init);
  ConvState s = {.kind = *(const ConvKind *)user_data};
  const char *fmt = "NHWC", *pad = NULL;
  floe_code rc = host->attr_string(attrs, "data_format", &fmt);
  if ((rc != FLOE_OK && rc != FLOE_NOT_FOUND) ||
      (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\"%s%s%s",
                                rc == FLOE_OK ? ", got \"" : "", rc == FLOE_OK ? fmt : "",
                                rc == FLOE_OK ? "\"" : "");
  s.nchw = strcmp(fmt, "NCHW") == 0;
  if (host->attr_string(attrs, "padding", &pad) != FLOE_OK ||
      (strcmp(pad, "SAME") != 0 && strcmp(pad, "VALID") != 0))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute padding must be \"SAME\" or \"VALID\"%s%s%s",
                                pad ? ", got \"" : "", pad ? pad : "", pad ? "\"" : "");
  s.same = strcmp(pad, "SAME") == 0;
  bool pool = s.kind == K_MAXPOOL || s.kind == K_MAXPOOL_GRAD;
  if ((rc = hw_list(host, init, "strides", true, s.nchw, s.stride)) != FLOE_OK) return rc;
  if (pool) {
    s.dilation[0] = s.dilation[1] = 1;
    rc = hw_list(host, init, "ksize", true, s.nchw, s.ksize);
  } else {
    rc = hw_list(host, init, "dilations", false, s.nchw, s.dilation);
  }
  if (rc != FLOE_OK) return rc;
  ConvState *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *p = s;
  *state = p;
  return FLOE_OK;
}

static void conv_destroy(void *state) { tpu_host->free(state); }

/* TensorFlow's output size and leading padding along one dim; false when a VALID window is
 * larger than the input. */
static bool window(int64_t in, int64_t k, int64_t stride, int64_t dil, bool same, int64_t *out,
                   int64_t *before) {
  int64_t eff = (k - 1) * dil + 1;
  if (same) {
    *out = (in + stride - 1) / stride;
    int64_t total = (*out - 1) * stride + eff - in;
    *before = total > 0 ? total / 2 : 0;
    return true;
  }
  if (in < eff) return false;
  *out = (in - eff) / stride + 1;
  *before = 0;
  return true;
}

/* Logical (n, c, h, w) of 4 dims in the data format. */
static void split_dims(const ConvState *s, const int64_t *d, Geo *g) {
  g->n = d[0];
  g->c = s->nchw ? d[1] : d[3];
  g->h = s->nchw ? d[2] : d[1];
  g->w = s->nchw ? d[3] : d[2];
}

/* Element strides of (n, c, h, w) for a tensor of logical size (n, c, h, w). */
static void strides_of(bool nchw, int64_t c, int64_t h, int64_t w, int64_t st[4]) {
  if (nchw) {
    st[0] = c * h * w; st[1] = h * w; st[2] = w; st[3] = 1;
  } else {
    st[0] = h * w * c; st[1] = 1; st[2] = w * c; st[3] = c;
  }
}

static void dims_of(bool nchw, int64_t n, int64_t c, int64_t h, int64_t w, int64_t out[4]) {
  out[0] = n;
  out[nchw ? 1 : 3] = c;
  out[nchw ? 2 : 1] = h;
  out[nchw ? 3 : 2] = w;
}

static floe_code finish_geo(const ConvState *s, FloeKernelContext *ctx, Geo *g, const char *what) {
  if (window(g->h, g->kh, s->stride[0], s->dilation[0], s->same, &g->oh, &g->pad_t) &&
      window(g->w, g->kw, s->stride[1], s->dilation[1], s->same, &g->ow, &g->pad_l))
    return FLOE_OK;
  return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "%s (%lldx%lld pixels) is smaller than the %lldx%lld window "
                                 "(dilations %lldx%lld) with VALID padding",
                                 what, (long long)g->h, (long long)g->w, (long long)g->kh,
                                 (long long)g->kw, (long long)s->dilation[0],
                                 (long long)s->dilation[1]);
}

static floe_code need_rank4(FloeKernelContext *ctx, const ConvState *s, const FloeTensor *t,
                            const char *name, const char *layout) {
  char b[TPU_SHAPE_STR_MAX];
  if (tpu_host->tensor_rank(t) == 4) return FLOE_OK;
  return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must have rank 4 (%s), got %s",
                                 name, layout ? layout : s->nchw ? "NCHW" : "NHWC",
                                 tpu_shape_str(t, b, sizeof b));
}

/* Filter [KH,KW,C,O] into g (kh, kw, o), checking its C against g->c. */
static floe_code filter_geo(FloeKernelContext *ctx, const int64_t *fd, Geo *g, const char *what) {
  char b[TPU_SHAPE_STR_MAX];
  if (fd[2] != g->c || fd[0] < 1 || fd[1] < 1)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s %s (HWIO) must have a non-empty window and %lld input "
                                   "channels, the input's", what, tpu_dims_str(4, fd, b, sizeof b),
                                   (long long)g->c);
  g->kh = fd[0];
  g->kw = fd[1];
  g->o = fd[3];
  return FLOE_OK;
}

/* input_sizes / filter_sizes: an i32 vector of 4 sizes >= 0, read from the chip's memory by
 * the chip itself (its scalar unit). */
static floe_code read_sizes(FloeKernelContext *ctx, int input, const char *name, int64_t out[4]) {
  const FloeTensor *t = tpu_host->ctx_input(ctx, input);
  char b[TPU_SHAPE_STR_MAX];
  if (tpu_host->tensor_dtype(t) != FLOE_I32 || tpu_host->tensor_rank(t) != 1 ||
      tpu_host->tensor_dims(t)[0] != 4)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be an i32 vector of 4 sizes, got %s %s", name,
                                   tpu_host->dtype_name(tpu_host->tensor_dtype(t)),
                                   tpu_shape_str(t, b, sizeof b));
  const int32_t *v = tpu_host->tensor_data(t);
  for (int i = 0; i < 4; i++) {
    out[i] = v[i];
    if (out[i] < 0)
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s [%d,%d,%d,%d] must be >= 0",
                                     name, v[0], v[1], v[2], v[3]);
  }
  return FLOE_OK;
}

/* Checks that dy has the forward op's output shape. */
static floe_code check_dy(FloeKernelContext *ctx, const ConvState *s, const FloeTensor *dy,
                          const Geo *g, const char *name) {
  int64_t want[4];
  char a[TPU_SHAPE_STR_MAX], b[TPU_SHAPE_STR_MAX];
  dims_of(s->nchw, g->n, g->o, g->oh, g->ow, want);
  const int64_t *d = tpu_host->tensor_dims(dy);
  if (tpu_host->tensor_rank(dy) == 4 && memcmp(d, want, sizeof want) == 0) return FLOE_OK;
  return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "%s %s must have the forward output's shape %s",
                                 name, tpu_shape_str(dy, a, sizeof a),
                                 tpu_dims_str(4, want, b, sizeof b));
}

/* ---------------------------------------------------------------------------------- */
/* im2col and back. */

typedef struct Cols {
  const ConvState *s;
  const Geo *g;
  const float *x; /* im2col source; col2im: the patches */
  float *p;       /* im2col: the patches; col2im: dx */
  int64_t xs[4];  /* element strides of x (im2col) or dx (col2im), logical n, c, h, w */
} Cols;

/* Rows [begin, end) of the patches matrix (one output pixel each). */
static void im2col_rows(void *arg, int64_t begin, int64_t end) {
  const Cols *j = arg;
  const Geo *g = j->g;
  int64_t kdim = g->kh * g->kw * g->c;
  for (int64_t r = begin; r < end; r++) {
    int64_t ow = r % g->ow, oh = (r / g->ow) % g->oh, n = r / (g->ow * g->oh);
    float *row = j->p + r * kdim;
    for (int64_t kh = 0; kh < g->kh; kh++) {
      int64_t ih = oh * j->s->stride[0] - g->pad_t + kh * j->s->dilation[0];
      for (int64_t kw = 0; kw < g->kw; kw++) {
        int64_t iw = ow * j->s->stride[1] - g->pad_l + kw * j->s->dilation[1];
        float *dst = row + (kh * g->kw + kw) * g->c;
        if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) {
          memset(dst, 0, (size_t)g->c * sizeof(float));
          continue;
        }
        const float *src = j->x + n * j->xs[0] + ih * j->xs[2] + iw * j->xs[3];
        for (int64_t c = 0; c < g->c; c++) dst[c] = src[c * j->xs[1]];
      }
    }
  }
}

/* Images [begin, end): dx += the patches' gradients scattered to their pixels (dx zeroed by
 * the caller; images are disjoint, so shards never write the same pixel). */
static void col2im_images(void *arg, int64_t begin, int64_t end) {
  const Cols *j = arg;
  const Geo *g = j->g;
  int64_t kdim = g->kh * g->kw * g->c;
  for (int64_t n = begin; n < end; n++) {
    for (int64_t oh = 0; oh < g->oh; oh++) {
      for (int64_t ow = 0; ow < g->ow; ow++) {
        const float *row = j->x + ((n * g->oh + oh) * g->ow + ow) * kdim;
        for (int64_t kh = 0; kh < g->kh; kh++) {
          int64_t ih = oh * j->s->stride[0] - g->pad_t + kh * j->s->dilation[0];
          if (ih < 0 || ih >= g->h) continue;
          for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t iw = ow * j->s->stride[1] - g->pad_l + kw * j->s->dilation[1];
            if (iw < 0 || iw >= g->w) continue;
            const float *src = row + (kh * g->kw + kw) * g->c;
            float *dst = j->p + n * j->xs[0] + ih * j->xs[2] + iw * j->xs[3];
            for (int64_t c = 0; c < g->c; c++) dst[c * j->xs[1]] += src[c];
          }
        }
      }
    }
  }
}

/* Patches of x (logical geometry g) into chip scratch *out. */
static floe_code im2col(FloeKernelContext *ctx, const ConvState *s, const Geo *g, const float *x,
                        float **out) {
  int64_t rows = g->n * g->oh * g->ow, kdim = g->kh * g->kw * g->c;
  floe_code rc = tpu_temp(ctx, (size_t)(rows * kdim) * sizeof(float), (void **)out);
  if (rc != FLOE_OK) return rc;
  Cols j = {s, g, x, *out, {0}};
  strides_of(s->nchw, g->c, g->h, g->w, j.xs);
  tpu_parallel_for(rows, kdim + 1, im2col_rows, &j);
  return FLOE_OK;
}

/* [N, C, HW] <-> [N, HW, C] (NCHW data to and from the product's NHWC rows). */
typedef struct Transpose {
  const float *src;
  float *dst;
  int64_t a, b; /* per image: src is [a, b], dst [b, a] */
} Transpose;

static void transpose_images(void *arg, int64_t begin, int64_t end) {
  const Transpose *t = arg;
  for (int64_t n = begin; n < end; n++) {
    const float *s = t->src + n * t->a * t->b;
    float *d = t->dst + n * t->a * t->b;
    for (int64_t i = 0; i < t->a; i++)
      for (int64_t k = 0; k < t->b; k++) d[k * t->a + i] = s[i * t->b + k];
  }
}

static void transpose(int64_t n, int64_t a, int64_t b, const float *src, float *dst) {
  Transpose t = {src, dst, a, b};
  tpu_parallel_for(n, a * b + 1, transpose_images, &t);
}

/* ---------------------------------------------------------------------------------- */
/* The three convolutions. */

static floe_code conv_forward(const ConvState *s, FloeKernelContext *ctx) {
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0), *f = tpu_host->ctx_input(ctx, 1);
  floe_code rc;
  Geo g = {0};
  if ((rc = need_rank4(ctx, s, x, "input", NULL)) != FLOE_OK ||
      (rc = need_rank4(ctx, s, f, "filter", "HWIO")) != FLOE_OK)
    return rc;
  split_dims(s, tpu_host->tensor_dims(x), &g);
  if ((rc = filter_geo(ctx, tpu_host->tensor_dims(f), &g, "filter")) != FLOE_OK ||
      (rc = finish_geo(s, ctx, &g, "input")) != FLOE_OK)
    return rc;
  int64_t od[4], rows = g.n * g.oh * g.ow, kdim = g.kh * g.kw * g.c;
  dims_of(s->nchw, g.n, g.o, g.oh, g.ow, od);
  FloeTensor *out;
  float *y, *patches, *rowsbuf;
  if ((rc = tpu_output(ctx, 0, 4, od, &out, (void **)&y)) != FLOE_OK) return rc;
  if (rows * g.o > 0) {
    if ((rc = im2col(ctx, s, &g, tpu_host->tensor_data(x), &patches)) != FLOE_OK) return rc;
    rowsbuf = y;
    if (s->nchw &&
        (rc = tpu_temp(ctx, (size_t)(rows * g.o) * sizeof(float), (void **)&rowsbuf)) != FLOE_OK)
      return rc;
    if ((rc = tpu_gemm(ctx, rows, g.o, kdim, patches, kdim, 1, tpu_host->tensor_data(f), g.o, 1,
                       rowsbuf, g.o)) != FLOE_OK)
      return rc;
    if (s->nchw) transpose(g.n, g.oh * g.ow, g.o, rowsbuf, y);
  }
  double bytes = 4.0 * (double)(tpu_host->tensor_num_elements(x) +
                                tpu_host->tensor_num_elements(f) + rows * g.o);
  tpu_report_ns(ctx, tpu_cost_matmul_ns(tpu_chip(ctx)->cfg, 1, rows, g.o, kdim, bytes));
  return FLOE_OK;
}

/* dy as [N*OH*OW, O] rows: itself for NHWC, a transposed scratch copy for NCHW. */
static floe_code dy_rows(FloeKernelContext *ctx, const ConvState *s, const Geo *g,
                         const float *dy, const float **out) {
  *out = dy;
  if (!s->nchw) return FLOE_OK;
  float *t;
  floe_code rc = tpu_temp(ctx, (size_t)(g->n * g->oh * g->ow * g->o) * sizeof(float), (void **)&t);
  if (rc != FLOE_OK) return rc;
  transpose(g->n, g->o, g->oh * g->ow, dy, t);
  *out = t;
  return FLOE_OK;
}

static floe_code conv_back_input(const ConvState *s, FloeKernelContext *ctx) {
  const FloeTensor *f = tpu_host->ctx_input(ctx, 1), *dy = tpu_host->ctx_input(ctx, 2);
  int64_t sizes[4];
  Geo g = {0};
  floe_code rc;
  if ((rc = read_sizes(ctx, 0, "input_sizes", sizes)) != FLOE_OK ||
      (rc = need_rank4(ctx, s, f, "filter", "HWIO")) != FLOE_OK)
    return rc;
  split_dims(s, sizes, &g);
  if ((rc = filter_geo(ctx, tpu_host->tensor_dims(f), &g, "filter")) != FLOE_OK ||
      (rc = finish_geo(s, ctx, &g, "input_sizes")) != FLOE_OK ||
      (rc = check_dy(ctx, s, dy, &g, "out_backprop")) != FLOE_OK)
    return rc;
  FloeTensor *out;
  float *dx, *dpatches;
  const float *dyr;
  if ((rc = tpu_output(ctx, 0, 4, sizes, &out, (void **)&dx)) != FLOE_OK) return rc;
  int64_t rows = g.n * g.oh * g.ow, kdim = g.kh * g.kw * g.c;
  if (dx) memset(dx, 0, tpu_host->tensor_nbytes(out));
  if (rows * kdim > 0) {
    if ((rc = dy_rows(ctx, s, &g, tpu_host->tensor_data(dy), &dyr)) != FLOE_OK ||
        (rc = tpu_temp(ctx, (size_t)(rows * kdim) * sizeof(float), (void **)&dpatches)) != FLOE_OK)
      return rc;
    /* dP[rows, kdim] = dY[rows, O] F^T: F^T(o, r) = f[r * O + o]. */
    if ((rc = tpu_gemm(ctx, rows, kdim, g.o, dyr, g.o, 1, tpu_host->tensor_data(f), 1, g.o,
                       dpatches, kdim)) != FLOE_OK)
      return rc;
    Cols j = {s, &g, dpatches, dx, {0}};
    strides_of(s->nchw, g.c, g.h, g.w, j.xs);
    tpu_parallel_for(g.n, g.oh * g.ow * kdim + 1, col2im_images, &j);
  }
  double bytes = 4.0 * (double)(tpu_host->tensor_num_elements(dy) +
                                tpu_host->tensor_num_elements(f) +
                                tpu_host->tensor_num_elements(out));
  tpu_report_ns(ctx, tpu_cost_matmul_ns(tpu_chip(ctx)->cfg, 1, rows, kdim, g.o, bytes));
  return FLOE_OK;
}

static floe_code conv_back_filter(const ConvState *s, FloeKernelContext *ctx) {
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0), *dy = tpu_host->ctx_input(ctx, 2);
  int64_t fsz[4];
  Geo g = {0};
  floe_code rc;
  if ((rc = need_rank4(ctx, s, x, "input", NULL)) != FLOE_OK ||
      (rc = read_sizes(ctx, 1, "filter_sizes", fsz)) != FLOE_OK)
    return rc;
  split_dims(s, tpu_host->tensor_dims(x), &g);
  if ((rc = filter_geo(ctx, fsz, &g, "filter_sizes")) != FLOE_OK ||
      (rc = finish_geo(s, ctx, &g, "input")) != FLOE_OK ||
      (rc = check_dy(ctx, s, dy, &g, "out_backprop")) != FLOE_OK)
    return rc;
  FloeTensor *out;
  float *df, *patches;
  const float *dyr;
  if ((rc = tpu_output(ctx, 0, 4, fsz, &out, (void **)&df)) != FLOE_OK) return rc;
  int64_t rows = g.n * g.oh * g.ow, kdim = g.kh * g.kw * g.c;
  if (kdim * g.o > 0) {
    if ((rc = im2col(ctx, s, &g, tpu_host->tensor_data(x), &patches)) != FLOE_OK ||
        (rc = dy_rows(ctx, s, &g, tpu_host->tensor_data(dy), &dyr)) != FLOE_OK)
      return rc;
    /* dF[kdim, O] = P^T dY: P^T(r, row) = patches[row * kdim + r]. */
    if ((rc = tpu_gemm(ctx, kdim, g.o, rows, patches, 1, kdim, dyr, g.o, 1, df, g.o)) != FLOE_OK)
      return rc;
  }
  double bytes = 4.0 * (double)(tpu_host->tensor_num_elements(x) +
                                tpu_host->tensor_num_elements(dy) + kdim * g.o);
  tpu_report_ns(ctx, tpu_cost_matmul_ns(tpu_chip(ctx)->cfg, 1, kdim, g.o, rows, bytes));
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Max pooling (vector unit). */

typedef struct Pool {
  const ConvState *s;
  const Geo *g;
  const float *x, *dy;
  float *out;     /* MaxPool: y; MaxPoolGrad: dx (zeroed) */
  int64_t xs[4], ys[4];
} Pool;

/* Images [begin, end). For each output pixel and channel: the first maximum of the window in
 * row-major order (strict >), as TensorFlow and the CPU plugin pick it. */
static void pool_images(void *arg, int64_t begin, int64_t end) {
  const Pool *p = arg;
  const Geo *g = p->g;
  for (int64_t n = begin; n < end; n++)
    for (int64_t oh = 0; oh < g->oh; oh++)
      for (int64_t ow = 0; ow < g->ow; ow++)
        for (int64_t c = 0; c < g->c; c++) {
          int64_t h0 = oh * p->s->stride[0] - g->pad_t, w0 = ow * p->s->stride[1] - g->pad_l;
          float best = -INFINITY;
          int64_t at = -1;
          for (int64_t h = h0 < 0 ? 0 : h0; h < h0 + g->kh && h < g->h; h++)
            for (int64_t w = w0 < 0 ? 0 : w0; w < w0 + g->kw && w < g->w; w++) {
              int64_t i = n * p->xs[0] + c * p->xs[1] + h * p->xs[2] + w * p->xs[3];
              if (at < 0 || p->x[i] > best) {
                best = p->x[i];
                at = i;
              }
            }
          int64_t o = n * p->ys[0] + c * p->ys[1] + oh * p->ys[2] + ow * p->ys[3];
          if (!p->dy) p->out[o] = best;
          else if (at >= 0) p->out[at] += p->dy[o];
        }
}

static floe_code pool_compute(const ConvState *s, FloeKernelContext *ctx) {
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0);
  floe_code rc;
  Geo g = {0};
  if ((rc = need_rank4(ctx, s, x, s->kind == K_MAXPOOL ? "input" : "orig_input", NULL)) != FLOE_OK)
    return rc;
  split_dims(s, tpu_host->tensor_dims(x), &g);
  g.kh = s->ksize[0];
  g.kw = s->ksize[1];
  g.o = g.c;
  if ((rc = finish_geo(s, ctx, &g, "input")) != FLOE_OK) return rc;
  Pool p = {s, &g, tpu_host->tensor_data(x), NULL, NULL, {0}, {0}};
  strides_of(s->nchw, g.c, g.h, g.w, p.xs);
  strides_of(s->nchw, g.c, g.oh, g.ow, p.ys);
  FloeTensor *out;
  int64_t od[4], outs = g.n * g.c * g.oh * g.ow;
  if (s->kind == K_MAXPOOL) {
    dims_of(s->nchw, g.n, g.c, g.oh, g.ow, od);
    if ((rc = tpu_output(ctx, 0, 4, od, &out, (void **)&p.out)) != FLOE_OK) return rc;
  } else {
    const FloeTensor *y = tpu_host->ctx_input(ctx, 1), *dy = tpu_host->ctx_input(ctx, 2);
    if ((rc = check_dy(ctx, s, y, &g, "orig_output")) != FLOE_OK ||
        (rc = check_dy(ctx, s, dy, &g, "grad")) != FLOE_OK)
      return rc;
    if ((rc = tpu_output(ctx, 0, 4, tpu_host->tensor_dims(x), &out, (void **)&p.out)) != FLOE_OK)
      return rc;
    if (p.out) memset(p.out, 0, tpu_host->tensor_nbytes(out));
    p.dy = tpu_host->tensor_data(dy);
  }
  if (outs > 0) tpu_parallel_for(g.n, outs / g.n * g.kh * g.kw + 1, pool_images, &p);
  /* One compare per window element; reads x (and dy), writes the output. */
  double ops = (double)outs * (double)(g.kh * g.kw);
  double bytes = 4.0 * (double)(tpu_host->tensor_num_elements(x) +
                                (s->kind == K_MAXPOOL ? outs : 2 * outs + g.n * g.c * g.h * g.w));
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, ops, bytes));
  return FLOE_OK;
}

static floe_code conv_compute(void *state, FloeKernelContext *ctx) {
  const ConvState *s = state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  switch (s->kind) {
    case K_CONV: return conv_forward(s, ctx);
    case K_BACK_INPUT: return conv_back_input(s, ctx);
    case K_BACK_FILTER: return conv_back_filter(s, ctx);
    default: return pool_compute(s, ctx);
  }
}

floe_code tpu_register_conv(FloePluginRegistrar *reg) {
  static const ConvKind kinds[] = {K_CONV, K_BACK_INPUT, K_BACK_FILTER, K_MAXPOOL,
                                   K_MAXPOOL_GRAD};
  static const char *const ops[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                    "MaxPool", "MaxPoolGrad"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    floe_code rc = tpu_add_kernel(reg, ops[i], "T", FLOE_DTYPE_BIT(FLOE_F32), 0, conv_compute,
                                  conv_create, conv_destroy, (void *)&kinds[i]);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
