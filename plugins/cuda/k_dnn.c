/* SPDX-License-Identifier: Apache-2.0 */
/* k_dnn.c - convolutions and pooling on cuDNN (the legacy descriptor API of cuDNN 9):
 * Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool, AvgPool, MaxPoolGrad; and
 * AvgPoolGrad on an own kernel (it has no forward tensors to hand cuDNN).
 *
 * Layouts: tensors stay as the graph has them (NHWC by default, NCHW on request), described
 * to cuDNN as such. Filters are HWIO in Floe (TensorFlow's layout), which cuDNN does not
 * take: they are transposed into scratch as OHWI (NHWC) or OIHW (NCHW) first, and a filter
 * gradient comes back the same way. Padding follows TensorFlow (SAME puts an odd pixel
 * after); cuDNN pads symmetrically, so for an odd total padding we do what TensorFlow does:
 * copy the input into scratch with the extra row / column already there (zeros; -inf for
 * MaxPool), let cuDNN pad the rest, and crop an input gradient back out of a padded one.
 * AvgPool is the exception: its average counts valid inputs only, which explicit zeros
 * would break, so an asymmetric AvgPool runs on an own kernel that clips each window to the
 * valid inputs (cuDNN keeps the symmetric case); AvgPoolGrad always runs on an own kernel.
 *
 * Algorithms come from cuDNN's heuristics (Get*Algorithm_v7), best first, taking the first
 * whose workspace can be allocated. With FLOE_CUDA_MATMUL=f32 (the default) convolutions
 * run in full f32 (CUDNN_FMA_MATH: no TF32); with tf32 or bf16 cuDNN may use TF32 tensor
 * cores. */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "cuda.h"

#define SHAPE(buf, r, d) cu_shape_str(buf, sizeof buf, (r), (d))

typedef struct ConvAttrs {
  bool nchw, same, pooling;
  int64_t stride[2], dil[2], ksize[2];
} ConvAttrs;

static floe_code parse_hw(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                          bool required, bool nchw, int64_t hw[2]) {
  const int64_t *v = NULL;
  size_t n = 0;
  floe_code rc = host->attr_int_list(host->init_attrs(init), name, &v, &n);
  if (rc == FLOE_NOT_FOUND && !required) {
    hw[0] = hw[1] = 1;
    return FLOE_OK;
  }
  if (rc != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute %s (a list of 4 ints) is required", name);
  int hd = nchw ? 2 : 1, cd = nchw ? 1 : 3;
  if (n != 4 || v[0] != 1 || v[cd] != 1 || v[hd] <= 0 || v[hd + 1] <= 0) {
    char b[CU_SHAPE_STR_MAX];
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s must have 4 positive entries in %s order with 1 in the "
                                "batch and channel dims, got %s",
                                name, nchw ? "N,C,H,W" : "N,H,W,C",
                                cu_shape_str(b, sizeof b, (int)n, v));
  }
  hw[0] = v[hd];
  hw[1] = v[hd + 1];
  return FLOE_OK;
}

static floe_code conv_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  ConvAttrs a;
  memset(&a, 0, sizeof a);
  a.pooling = user_data != NULL;
  const FloeAttrs *attrs = host->init_attrs(init);
  const char *fmt = "NHWC", *pad = "";
  floe_code rc = host->attr_string(attrs, "data_format", &fmt);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(fmt, "NHWC") && strcmp(fmt, "NCHW"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\", got \"%s\"", fmt);
  a.nchw = !strcmp(fmt, "NCHW");
  if (host->attr_string(attrs, "padding", &pad) != FLOE_OK ||
      (strcmp(pad, "SAME") && strcmp(pad, "VALID")))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "padding must be \"SAME\" or \"VALID\", got \"%s\"", pad);
  a.same = !strcmp(pad, "SAME");
  if ((rc = parse_hw(host, init, "strides", true, a.nchw, a.stride)) != FLOE_OK) return rc;
  if (a.pooling) {
    a.dil[0] = a.dil[1] = 1;
    rc = parse_hw(host, init, "ksize", true, a.nchw, a.ksize);
  } else {
    rc = parse_hw(host, init, "dilations", false, a.nchw, a.dil);
  }
  if (rc != FLOE_OK) return rc;
  ConvAttrs *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *s = a;
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { cu_host->free(state); }

/* One call's geometry in logical N, C, H, W terms. */
typedef struct Geo {
  int64_t n, c, h, w, o, kh, kw, oh, ow, pt, pb, pl, pr;
} Geo;

static bool window(int64_t in, int64_t k, int64_t stride, int64_t dil, bool same, int64_t *out,
                   int64_t *before, int64_t *after) {
  int64_t eff = (k - 1) * dil + 1;
  if (same) {
    *out = (in + stride - 1) / stride;
    int64_t total = (*out - 1) * stride + eff - in;
    if (total < 0) total = 0;
    *before = total / 2;
    *after = total - *before;
    return true;
  }
  if (in < eff) return false;
  *out = (in - eff) / stride + 1;
  *before = *after = 0;
  return true;
}

/* Reads N, C, H, W of a 4-D tensor in the data format. */
static void nchw_of(const ConvAttrs *a, const int64_t *d, Geo *g) {
  g->n = d[0];
  g->c = d[a->nchw ? 1 : 3];
  g->h = d[a->nchw ? 2 : 1];
  g->w = d[a->nchw ? 3 : 2];
}

static void dims_of(const ConvAttrs *a, int64_t n, int64_t c, int64_t h, int64_t w,
                    int64_t out[4]) {
  out[0] = n;
  out[a->nchw ? 1 : 3] = c;
  out[a->nchw ? 2 : 1] = h;
  out[a->nchw ? 3 : 2] = w;
}

/* Completes g (window kh, kw and o set) and checks what cuDNN can take. */
static floe_code finish_geo(FloeKernelContext *ctx, const ConvAttrs *a, Geo *g) {
  if (!window(g->h, g->kh, a->stride[0], a->dil[0], a->same, &g->oh, &g->pt, &g->pb) ||
      !window(g->w, g->kw, a->stride[1], a->dil[1], a->same, &g->ow, &g->pl, &g->pr))
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "the %" PRId64 "x%" PRId64 " window (dilations %" PRId64
                                  "x%" PRId64 ") is larger than the %" PRId64 "x%" PRId64
                                  " input with VALID padding",
                                  g->kh, g->kw, a->dil[0], a->dil[1], g->h, g->w);
  /* h + pb, w + pr bound the explicitly padded input of an asymmetric padding. */
  int64_t big = INT_MAX;
  if (g->n > big || g->c > big || g->h + g->pb > big || g->w + g->pr > big || g->o > big)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "dims above 2^31 for cuDNN");
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Descriptors. */

typedef struct Dnn {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnPoolingDescriptor_t pool;
} Dnn;

static void dnn_free(Dnn *d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
  if (d->pool) cudnnDestroyPoolingDescriptor(d->pool);
}

/* x [n, c, h, w], y [n, o, oh, ow] (o = c for pooling) and the filter / convolution or the
 * pooling descriptor. */
static cudnnStatus_t dnn_make(Dnn *d, const ConvAttrs *a, const Geo *g, cudnnMathType_t math,
                              cudnnPoolingMode_t pool_mode) {
  memset(d, 0, sizeof *d);
  cudnnTensorFormat_t f = a->nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&d->x);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->y);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d->x, f, CUDNN_DATA_FLOAT, (int)g->n, (int)g->c, (int)g->h,
                                   (int)g->w);
  int64_t yc = a->pooling ? g->c : g->o;
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d->y, f, CUDNN_DATA_FLOAT, (int)g->n, (int)yc, (int)g->oh,
                                   (int)g->ow);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (a->pooling) {
    s = cudnnCreatePoolingDescriptor(&d->pool);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetPooling2dDescriptor(d->pool, pool_mode, CUDNN_PROPAGATE_NAN, (int)g->kh,
                                      (int)g->kw, (int)g->pt, (int)g->pl, (int)a->stride[0],
                                      (int)a->stride[1]);
    return s;
  }
  s = cudnnCreateFilterDescriptor(&d->w);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, f, (int)g->o, (int)g->c, (int)g->kh,
                                   (int)g->kw);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d->conv);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolution2dDescriptor(d->conv, (int)g->pt, (int)g->pl, (int)a->stride[0],
                                        (int)a->stride[1], (int)a->dil[0], (int)a->dil[1],
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(d->conv, math);
  return s;
}

static cudnnMathType_t math_of(const CudaDevice *d) {
  return d->matmul == CUDA_MM_F32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

/* HWIO <-> the cuDNN filter layout (OHWI for NHWC, OIHW for NCHW). */
static const int to_dnn_nhwc[4] = {3, 0, 1, 2}, to_dnn_nchw[4] = {3, 2, 0, 1};
static const int from_dnn_nhwc[4] = {1, 2, 3, 0}, from_dnn_nchw[4] = {2, 3, 1, 0};

static floe_code temp(CuCall *c, size_t bytes, void **out, const char *what) {
  floe_code rc = cu_host->ctx_allocate_temp(c->ctx, bytes ? bytes : 1, out);
  if (rc != FLOE_OK)
    cu_host->ctx_set_error(c->ctx, rc, "cannot allocate %zu bytes of GPU scratch for %s", bytes,
                           what);
  return rc;
}

/* The filter HWIO [kh, kw, c, o] in cuDNN's layout, in scratch. */
static floe_code filter_to_dnn(CuCall *c, const ConvAttrs *a, const Geo *g, const void *w,
                               void **out) {
  floe_code rc = temp(c, (size_t)(g->kh * g->kw * g->c * g->o) * 4, out, "the filter");
  if (rc != FLOE_OK) return rc;
  int64_t hwio[4] = {g->kh, g->kw, g->c, g->o};
  int lr = cu_transpose((CuStream)c->dev->compute, 4, hwio, a->nchw ? to_dnn_nchw : to_dnn_nhwc,
                        w, *out, 4);
  return lr ? cu_fail_cuda(c->ctx, (cudaError_t)lr, "transposing the filter") : FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Asymmetric padding (TensorFlow's way): cuDNN pads both sides of a dim alike, so the
 * input goes into scratch with the difference added explicitly and cuDNN pads the rest. */

static bool asymmetric(const Geo *g) { return g->pt != g->pb || g->pl != g->pr; }

/* p = g for the explicitly padded input: min(before, after) left to cuDNN on each side, the
 * rest (the odd row / column, after the data for SAME) part of p's h and w. */
static void pad_geo(const Geo *g, Geo *p) {
  *p = *g;
  p->pt = p->pb = g->pt < g->pb ? g->pt : g->pb;
  p->pl = p->pr = g->pl < g->pr ? g->pl : g->pr;
  p->h = g->h + (g->pt - p->pt) + (g->pb - p->pb);
  p->w = g->w + (g->pl - p->pl) + (g->pr - p->pr);
}

/* Where g's input sits in p's (its dims, p's dims, the offset), in the data format. */
static void pad_box(const ConvAttrs *a, const Geo *g, const Geo *p, int64_t gd[4],
                    int64_t pd[4], int64_t off[4]) {
  dims_of(a, g->n, g->c, g->h, g->w, gd);
  dims_of(a, p->n, p->c, p->h, p->w, pd);
  dims_of(a, 0, 0, g->pt - p->pt, g->pl - p->pl, off);
}

static size_t input_bytes(const Geo *g) { return (size_t)(g->n * g->c * g->h * g->w) * 4; }

/* x (g's input) copied into new scratch of p's input, the explicit padding filled with
 * `fill` (an f32 bit pattern). */
static floe_code pad_input(CuCall *c, const ConvAttrs *a, const Geo *g, const Geo *p,
                           const void *x, uint32_t fill, void **out) {
  floe_code rc = temp(c, input_bytes(p), out, "the padded input");
  if (rc != FLOE_OK) return rc;
  int64_t gd[4], pd[4], off[4];
  pad_box(a, g, p, gd, pd, off);
  int lr = cu_pad_copy4((CuStream)c->dev->compute, 4, gd, x, pd, *out, off, fill);
  return lr ? cu_fail_cuda(c->ctx, (cudaError_t)lr, "padding the input") : FLOE_OK;
}

/* dx (g's input) cropped out of dxp (p's input); returns the launch's result for cu_end. */
static int crop_input(CuCall *c, const ConvAttrs *a, const Geo *g, const Geo *p,
                      const void *dxp, void *dx) {
  int64_t gd[4], pd[4], off[4];
  pad_box(a, g, p, gd, pd, off);
  for (int i = 0; i < 4; i++) off[i] = -off[i];
  return cu_pad_copy4((CuStream)c->dev->compute, 4, pd, dxp, gd, dx, off, 0);
}

/* ------------------------------------------------------------------------------------ */
/* Convolutions. */

typedef enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER } ConvPass;

/* Picks an algorithm by cuDNN's heuristics and allocates its workspace; runs the pass.
 * x, w, y are the pass's tensors (w in cuDNN layout); the pass writes y (forward), x
 * (backward data) or w (backward filter). Call with the device's cuDNN lock held. */
static floe_code run_conv(CuCall *c, ConvPass pass, Dnn *d, void *x, void *w, void *y) {
  cudnnHandle_t h = c->dev->dnn;
  const float one = 1.0f, zero = 0.0f;
  enum { MAX_ALGOS = 8 };
  int got = 0;
  cudnnStatus_t s;
  cudnnConvolutionFwdAlgoPerf_t pf[MAX_ALGOS];
  cudnnConvolutionBwdDataAlgoPerf_t pd[MAX_ALGOS];
  cudnnConvolutionBwdFilterAlgoPerf_t pw[MAX_ALGOS];
  if (pass == CONV_FWD)
    s = cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, MAX_ALGOS, &got, pf);
  else if (pass == CONV_BWD_DATA)
    s = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv, d->x, MAX_ALGOS, &got,
                                                    pd);
  else
    s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->conv, d->w, MAX_ALGOS,
                                                      &got, pw);
  if (s != CUDNN_STATUS_SUCCESS) return cu_fail_dnn(c->ctx, s, "choosing a convolution algorithm");
  s = CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < got; i++) {
    cudnnStatus_t st = pass == CONV_FWD ? pf[i].status : pass == CONV_BWD_DATA ? pd[i].status : pw[i].status;
    if (st != CUDNN_STATUS_SUCCESS) continue;
    /* f32 mode forces FMA math (no TF32); an algorithm without such kernels says
     * NOT_SUPPORTED and the next is tried. */
    cudnnMathType_t m = c->dev->matmul == CUDA_MM_F32 ? CUDNN_FMA_MATH
                        : pass == CONV_FWD        ? pf[i].mathType
                        : pass == CONV_BWD_DATA   ? pd[i].mathType
                                                  : pw[i].mathType;
    if ((s = cudnnSetConvolutionMathType(d->conv, m)) != CUDNN_STATUS_SUCCESS) break;
    size_t ws = 0;
    if (pass == CONV_FWD)
      s = cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, pf[i].algo, &ws);
    else if (pass == CONV_BWD_DATA)
      s = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x, pd[i].algo,
                                                       &ws);
    else
      s = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w,
                                                         pw[i].algo, &ws);
    if (s == CUDNN_STATUS_NOT_SUPPORTED) continue;
    if (s != CUDNN_STATUS_SUCCESS) break;
    void *work = NULL;
    floe_code rc = ws ? cu_host->ctx_allocate_temp(c->ctx, ws, &work) : FLOE_OK;
    if (rc != FLOE_OK) return rc; /* recorded by the core: the node and the bytes */
    if (pass == CONV_FWD)
      s = cudnnConvolutionForward(h, &one, d->x, x, d->w, w, d->conv, pf[i].algo, work, ws, &zero,
                                  d->y, y);
    else if (pass == CONV_BWD_DATA)
      s = cudnnConvolutionBackwardData(h, &one, d->w, w, d->y, y, d->conv, pd[i].algo, work, ws,
                                       &zero, d->x, x);
    else
      s = cudnnConvolutionBackwardFilter(h, &one, d->x, x, d->y, y, d->conv, pw[i].algo, work,
                                         ws, &zero, d->w, w);
    if (s != CUDNN_STATUS_NOT_SUPPORTED) break;
  }
  if (s != CUDNN_STATUS_SUCCESS)
    return cu_fail_dnn(c->ctx, s,
                       got ? "the convolution (no algorithm ran: workspace or support)"
                           : "the convolution (cuDNN offered no algorithm)");
  return FLOE_OK;
}

/* The shared part of the three convolution kernels: geometry from the input's dims (x),
 * the filter's (kh, kw, c, o) and the attributes; dy checked against the output dims when
 * given. */
static floe_code conv_geo(FloeKernelContext *ctx, const ConvAttrs *a, const int64_t *xd,
                          const int64_t *wd, const FloeTensor *dy, Geo *g) {
  nchw_of(a, xd, g);
  g->kh = wd[0];
  g->kw = wd[1];
  g->o = wd[3];
  char b1[CU_SHAPE_STR_MAX], b2[CU_SHAPE_STR_MAX];
  if (wd[2] != g->c)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "the filter %s (HWIO) has %" PRId64 " input channels but the "
                                  "input %s has %" PRId64,
                                  SHAPE(b1, 4, wd), wd[2], SHAPE(b2, 4, xd), g->c);
  floe_code rc = finish_geo(ctx, a, g);
  if (rc != FLOE_OK || !dy) return rc;
  int64_t want[4];
  dims_of(a, g->n, g->o, g->oh, g->ow, want);
  if (cu_host->tensor_rank(dy) != 4 || memcmp(cu_host->tensor_dims(dy), want, sizeof want) != 0)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "out_backprop has shape %s; the convolution's output is %s",
                                  SHAPE(b1, cu_host->tensor_rank(dy), cu_host->tensor_dims(dy)),
                                  SHAPE(b2, 4, want));
  return FLOE_OK;
}

static floe_code check_rank4(FloeKernelContext *ctx, const FloeTensor *t, const char *name) {
  if (cu_host->tensor_rank(t) == 4 && cu_host->tensor_dtype(t) == FLOE_F32) return FLOE_OK;
  char b[CU_SHAPE_STR_MAX];
  return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must be a 4-D f32 tensor, got "
                                "%s %s", name, cu_host->dtype_name(cu_host->tensor_dtype(t)),
                                SHAPE(b, cu_host->tensor_rank(t), cu_host->tensor_dims(t)));
}

/* Runs one pass with descriptors made and the cuDNN lock held; the call goes on. */
static floe_code conv_run(CuCall *c, const ConvAttrs *a, const Geo *g, ConvPass pass, void *x,
                          void *w, void *y) {
  Dnn d;
  pthread_mutex_lock(&c->dev->dnn_mu);
  cudnnStatus_t s = dnn_make(&d, a, g, math_of(c->dev), CUDNN_POOLING_MAX);
  floe_code rc = s == CUDNN_STATUS_SUCCESS ? run_conv(c, pass, &d, x, w, y)
                                           : cu_fail_dnn(c->ctx, s, "describing the tensors");
  pthread_mutex_unlock(&c->dev->dnn_mu);
  dnn_free(&d);
  return rc;
}

/* conv_run, then ends the call. */
static floe_code conv_pass(CuCall *c, const ConvAttrs *a, const Geo *g, ConvPass pass, void *x,
                           void *w, void *y, const char *what) {
  floe_code rc = conv_run(c, a, g, pass, x, w, y);
  if (rc != FLOE_OK) return cu_abort(c), rc;
  return cu_end(c, (int)cudaGetLastError(), what);
}

static floe_code conv2d_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *f = cu_host->ctx_input(ctx, 1);
  floe_code rc = check_rank4(ctx, x, "input");
  if (rc == FLOE_OK) rc = check_rank4(ctx, f, "filter");
  Geo g;
  if (rc == FLOE_OK) rc = conv_geo(ctx, a, cu_host->tensor_dims(x), cu_host->tensor_dims(f), NULL, &g);
  if (rc != FLOE_OK) return rc;
  int64_t od[4];
  dims_of(a, g.n, g.o, g.oh, g.ow, od);
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, 4, od, &out)) != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  if (cu_host->tensor_num_elements(out) == 0) return cu_end(&c, 0, "Conv2D");
  void *w, *xp = cu_host->tensor_data(x);
  if ((rc = filter_to_dnn(&c, a, &g, cu_host->tensor_data(f), &w)) != FLOE_OK)
    return cu_abort(&c), rc;
  Geo p = g;
  if (asymmetric(&g)) {
    pad_geo(&g, &p);
    if ((rc = pad_input(&c, a, &g, &p, cu_host->tensor_data(x), 0, &xp)) != FLOE_OK)
      return cu_abort(&c), rc;
  }
  return conv_pass(&c, a, &p, CONV_FWD, xp, w, cu_host->tensor_data(out), "Conv2D");
}

/* Reads a 4-entry shape input (input_sizes / filter_sizes / orig_input_shape). */
static floe_code read_sizes(CuCall *c, int i, const char *what, int64_t d[4]) {
  int n = 0;
  floe_code rc = cu_read_index_input(c, i, what, d, 4, &n);
  if (rc == FLOE_OK && (n != 4 || d[0] < 0 || d[1] < 0 || d[2] < 0 || d[3] < 0))
    rc = cu_host->ctx_set_error(c->ctx, FLOE_INVALID_ARGUMENT,
                                "%s must hold 4 non-negative sizes", what);
  return rc;
}

static floe_code conv_input_grad_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  const FloeTensor *f = cu_host->ctx_input(ctx, 1), *dy = cu_host->ctx_input(ctx, 2);
  floe_code rc = check_rank4(ctx, f, "filter");
  if (rc == FLOE_OK) rc = check_rank4(ctx, dy, "out_backprop");
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t xd[4];
  Geo g;
  if ((rc = read_sizes(&c, 0, "input_sizes", xd)) != FLOE_OK ||
      (rc = conv_geo(ctx, a, xd, cu_host->tensor_dims(f), dy, &g)) != FLOE_OK)
    return cu_abort(&c), rc;
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, 4, xd, &out)) != FLOE_OK) return cu_abort(&c), rc;
  if (cu_host->tensor_num_elements(out) == 0) return cu_end(&c, 0, "Conv2DBackpropInput");
  if (cu_host->tensor_num_elements(dy) == 0 || g.kh * g.kw * g.o == 0)
    return cu_end(&c, (int)cudaMemsetAsync(cu_host->tensor_data(out), 0,
                                           cu_host->tensor_nbytes(out), c.dev->compute),
                  "Conv2DBackpropInput");
  void *w;
  if ((rc = filter_to_dnn(&c, a, &g, cu_host->tensor_data(f), &w)) != FLOE_OK)
    return cu_abort(&c), rc;
  if (!asymmetric(&g))
    return conv_pass(&c, a, &g, CONV_BWD_DATA, cu_host->tensor_data(out), w,
                     cu_host->tensor_data(dy), "Conv2DBackpropInput");
  /* The gradient of the explicitly padded input, its padding then cropped away. */
  Geo p;
  pad_geo(&g, &p);
  void *dxp;
  if ((rc = temp(&c, input_bytes(&p), &dxp, "the padded input gradient")) != FLOE_OK ||
      (rc = conv_run(&c, a, &p, CONV_BWD_DATA, dxp, w, cu_host->tensor_data(dy))) != FLOE_OK)
    return cu_abort(&c), rc;
  return cu_end(&c, crop_input(&c, a, &g, &p, dxp, cu_host->tensor_data(out)),
                "Conv2DBackpropInput");
}

static floe_code conv_filter_grad_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *dy = cu_host->ctx_input(ctx, 2);
  floe_code rc = check_rank4(ctx, x, "input");
  if (rc == FLOE_OK) rc = check_rank4(ctx, dy, "out_backprop");
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t wd[4];
  Geo g;
  if ((rc = read_sizes(&c, 1, "filter_sizes", wd)) != FLOE_OK ||
      (rc = conv_geo(ctx, a, cu_host->tensor_dims(x), wd, dy, &g)) != FLOE_OK)
    return cu_abort(&c), rc;
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, 4, wd, &out)) != FLOE_OK) return cu_abort(&c), rc;
  int64_t nw = cu_host->tensor_num_elements(out);
  if (nw == 0) return cu_end(&c, 0, "Conv2DBackpropFilter");
  if (cu_host->tensor_num_elements(dy) == 0 || cu_host->tensor_num_elements(x) == 0)
    return cu_end(&c, (int)cudaMemsetAsync(cu_host->tensor_data(out), 0,
                                           cu_host->tensor_nbytes(out), c.dev->compute),
                  "Conv2DBackpropFilter");
  void *w, *xp = cu_host->tensor_data(x);
  if ((rc = temp(&c, (size_t)nw * 4, &w, "the filter gradient")) != FLOE_OK) return cu_abort(&c), rc;
  Geo p = g;
  if (asymmetric(&g)) {
    pad_geo(&g, &p);
    if ((rc = pad_input(&c, a, &g, &p, cu_host->tensor_data(x), 0, &xp)) != FLOE_OK)
      return cu_abort(&c), rc;
  }
  if ((rc = conv_run(&c, a, &p, CONV_BWD_FILTER, xp, w, cu_host->tensor_data(dy))) != FLOE_OK)
    return cu_abort(&c), rc;
  /* Back from cuDNN's layout to HWIO. */
  int64_t dnn_dims[4];
  if (a->nchw) {
    int64_t v[4] = {g.o, g.c, g.kh, g.kw};
    memcpy(dnn_dims, v, sizeof v);
  } else {
    int64_t v[4] = {g.o, g.kh, g.kw, g.c};
    memcpy(dnn_dims, v, sizeof v);
  }
  int lr = cu_transpose((CuStream)c.dev->compute, 4, dnn_dims,
                        a->nchw ? from_dnn_nchw : from_dnn_nhwc, w, cu_host->tensor_data(out), 4);
  return cu_end(&c, lr, "Conv2DBackpropFilter");
}

/* ------------------------------------------------------------------------------------ */
/* Pooling. */

static floe_code pool_geo(FloeKernelContext *ctx, const ConvAttrs *a, const int64_t *xd, Geo *g) {
  nchw_of(a, xd, g);
  g->kh = a->ksize[0];
  g->kw = a->ksize[1];
  g->o = g->c;
  return finish_geo(ctx, a, g);
}

/* MaxPool's explicit padding: -inf, which never wins a window (every SAME window holds a
 * valid input) and, unlike the lowest finite value, leaves an all -inf window at -inf. */
#define POOL_PAD_NEG_INF 0xff800000u

static floe_code pool_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  bool max = !strcmp(cu_host->ctx_op(ctx), "MaxPool");
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  floe_code rc = check_rank4(ctx, x, "input");
  Geo g;
  if (rc == FLOE_OK) rc = pool_geo(ctx, a, cu_host->tensor_dims(x), &g);
  if (rc != FLOE_OK) return rc;
  int64_t od[4];
  dims_of(a, g.n, g.c, g.oh, g.ow, od);
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, 4, od, &out)) != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  if (cu_host->tensor_num_elements(out) == 0) return cu_end(&c, 0, cu_host->ctx_op(ctx));
  if (!max && asymmetric(&g)) {
    /* cuDNN excludes only the padding it adds itself, and explicit zeros would count in the
     * average: the own kernel clips each window to the valid inputs instead. */
    CuPoolGeo pg = {g.n, g.c, g.h, g.w, g.oh, g.ow, g.kh, g.kw, a->stride[0], a->stride[1],
                    g.pt, g.pl, a->nchw};
    return cu_end(&c, cu_avg_pool((CuStream)c.dev->compute, &pg, cu_host->tensor_data(x),
                                  cu_host->tensor_data(out)),
                  "AvgPool");
  }
  Geo p = g;
  void *xp = cu_host->tensor_data(x);
  if (asymmetric(&g)) {
    pad_geo(&g, &p);
    if ((rc = pad_input(&c, a, &g, &p, xp, POOL_PAD_NEG_INF, &xp)) != FLOE_OK)
      return cu_abort(&c), rc;
  }
  Dnn d;
  const float one = 1.0f, zero = 0.0f;
  pthread_mutex_lock(&c.dev->dnn_mu);
  cudnnStatus_t s = dnn_make(&d, a, &p, CUDNN_DEFAULT_MATH,
                             max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                 : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnPoolingForward(c.dev->dnn, d.pool, &one, d.x, xp, &zero, d.y,
                            cu_host->tensor_data(out));
  pthread_mutex_unlock(&c.dev->dnn_mu);
  dnn_free(&d);
  if (s != CUDNN_STATUS_SUCCESS) return cu_abort(&c), cu_fail_dnn(ctx, s, cu_host->ctx_op(ctx));
  return cu_end(&c, (int)cudaGetLastError(), cu_host->ctx_op(ctx));
}

static floe_code same_dims(FloeKernelContext *ctx, const FloeTensor *t, const int64_t want[4],
                           const char *name) {
  if (cu_host->tensor_rank(t) == 4 && !memcmp(cu_host->tensor_dims(t), want, 4 * sizeof *want))
    return FLOE_OK;
  char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
  return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s has shape %s; the pooling's "
                                "output is %s", name,
                                SHAPE(a, cu_host->tensor_rank(t), cu_host->tensor_dims(t)),
                                SHAPE(b, 4, want));
}

/* MaxPoolGrad(orig_input, orig_output, grad): the gradient goes to each window's maximum. */
static floe_code max_pool_grad_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0), *y = cu_host->ctx_input(ctx, 1),
                   *dy = cu_host->ctx_input(ctx, 2);
  floe_code rc = check_rank4(ctx, x, "orig_input");
  Geo g;
  int64_t od[4];
  if (rc == FLOE_OK) rc = pool_geo(ctx, a, cu_host->tensor_dims(x), &g);
  if (rc == FLOE_OK) dims_of(a, g.n, g.c, g.oh, g.ow, od);
  if (rc == FLOE_OK) rc = same_dims(ctx, y, od, "orig_output");
  if (rc == FLOE_OK) rc = same_dims(ctx, dy, od, "grad");
  if (rc != FLOE_OK) return rc;
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, 4, cu_host->tensor_dims(x), &out)) != FLOE_OK)
    return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  if (cu_host->tensor_num_elements(out) == 0) return cu_end(&c, 0, "MaxPoolGrad");
  /* Asymmetric: the forward's padded input, a padded gradient, then the crop. */
  Geo p = g;
  void *xp = cu_host->tensor_data(x), *dxp = cu_host->tensor_data(out);
  if (asymmetric(&g)) {
    pad_geo(&g, &p);
    if ((rc = pad_input(&c, a, &g, &p, xp, POOL_PAD_NEG_INF, &xp)) != FLOE_OK ||
        (rc = temp(&c, input_bytes(&p), &dxp, "the padded input gradient")) != FLOE_OK)
      return cu_abort(&c), rc;
  }
  Dnn d;
  const float one = 1.0f, zero = 0.0f;
  pthread_mutex_lock(&c.dev->dnn_mu);
  cudnnStatus_t s = dnn_make(&d, a, &p, CUDNN_DEFAULT_MATH, CUDNN_POOLING_MAX_DETERMINISTIC);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnPoolingBackward(c.dev->dnn, d.pool, &one, d.y, cu_host->tensor_data(y), d.y,
                             cu_host->tensor_data(dy), d.x, xp, &zero, d.x, dxp);
  pthread_mutex_unlock(&c.dev->dnn_mu);
  dnn_free(&d);
  if (s != CUDNN_STATUS_SUCCESS) return cu_abort(&c), cu_fail_dnn(ctx, s, "MaxPoolGrad");
  int lr = (int)cudaGetLastError();
  if (lr == 0 && asymmetric(&g)) lr = crop_input(&c, a, &g, &p, dxp, cu_host->tensor_data(out));
  return cu_end(&c, lr, "MaxPoolGrad");
}

/* AvgPoolGrad(orig_input_shape, grad), on the own kernel. */
static floe_code avg_pool_grad_compute(void *state, FloeKernelContext *ctx) {
  const ConvAttrs *a = state;
  const FloeTensor *dy = cu_host->ctx_input(ctx, 1);
  floe_code rc = check_rank4(ctx, dy, "grad");
  CuCall c;
  if (rc != FLOE_OK || (rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int64_t xd[4], od[4];
  Geo g;
  if ((rc = read_sizes(&c, 0, "orig_input_shape", xd)) == FLOE_OK &&
      (rc = pool_geo(ctx, a, xd, &g)) == FLOE_OK) {
    dims_of(a, g.n, g.c, g.oh, g.ow, od);
    rc = same_dims(ctx, dy, od, "grad");
  }
  FloeTensor *out;
  if (rc == FLOE_OK) rc = cu_host->ctx_allocate_output(ctx, 0, 4, xd, &out);
  if (rc != FLOE_OK) return cu_abort(&c), rc;
  CuPoolGeo pg = {g.n, g.c, g.h, g.w, g.oh, g.ow, g.kh, g.kw, a->stride[0], a->stride[1],
                  g.pt, g.pl, a->nchw};
  int lr = cu_avg_pool_grad((CuStream)c.dev->compute, &pg, cu_host->tensor_data(dy),
                            cu_host->tensor_data(out));
  return cu_end(&c, lr, "AvgPoolGrad");
}

floe_code cu_register_dnn(FloePluginRegistrar *reg) {
  const uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  static const int pooling = 1;
  struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
    const void *arg;
  } k[] = {
      {"Conv2D", conv2d_compute, NULL},
      {"Conv2DBackpropInput", conv_input_grad_compute, NULL},
      {"Conv2DBackpropFilter", conv_filter_grad_compute, NULL},
      {"MaxPool", pool_compute, &pooling},
      {"AvgPool", pool_compute, &pooling},
      {"MaxPoolGrad", max_pool_grad_compute, &pooling},
      {"AvgPoolGrad", avg_pool_grad_compute, &pooling},
  };
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof k / sizeof k[0]; i++)
    rc = cu_add_kernel(reg, k[i].op, "T", f32, 0, k[i].compute, conv_create, state_free,
                       (void *)k[i].arg);
  return rc;
}
