/* SPDX-License-Identifier: Apache-2.0 */
/* test_conv.c - Conv2D, MaxPool and AvgPool against direct reference loops. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---------------------------------------------------------------------------------- */
/* Cases and attributes. */

typedef struct Case {
  bool nchw, same;
  int64_t n, h, w, c; /* input, logical */
  int64_t kh, kw, o;  /* filter [kh,kw,c,o] (HWIO), or the pooling window (o unused) */
  int64_t sh, sw;     /* strides */
  int64_t dh, dw;     /* dilations (Conv2D only) */
} Case;

typedef enum Op { CONV, MAXPOOL, AVGPOOL } Op;
static const char *const op_name[] = {"Conv2D", "MaxPool", "AvgPool"};

/* A 4-entry list in the data format's order from its H and W values. */
static void fmt_list(bool nchw, int64_t h, int64_t w, int64_t out[4]) {
  out[0] = 1;
  out[nchw ? 1 : 3] = 1;
  out[nchw ? 2 : 1] = h;
  out[nchw ? 3 : 2] = w;
}

typedef struct AttrArgs {
  Op op;
  const Case *c;
} AttrArgs;

static void set_attrs(FloeNodeBuilder *b, void *arg) {
  const AttrArgs *a = arg;
  int64_t l[4];
  fmt_list(a->c->nchw, a->c->sh, a->c->sw, l);
  floe_node_set_attr_int_list(b, "strides", l, 4);
  floe_node_set_attr_string(b, "padding", a->c->same ? "SAME" : "VALID");
  floe_node_set_attr_string(b, "data_format", a->c->nchw ? "NCHW" : "NHWC");
  if (a->op == CONV) {
    fmt_list(a->c->nchw, a->c->dh, a->c->dw, l);
    floe_node_set_attr_int_list(b, "dilations", l, 4);
  } else {
    fmt_list(a->c->nchw, a->c->kh, a->c->kw, l);
    floe_node_set_attr_int_list(b, "ksize", l, 4);
  }
}

static void set_format(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_string(b, "data_format", (const char *)arg);
}

static void input_dims(const Case *c, int64_t d[4]) {
  d[0] = c->n;
  d[c->nchw ? 1 : 3] = c->c;
  d[c->nchw ? 2 : 1] = c->h;
  d[c->nchw ? 3 : 2] = c->w;
}

/* TensorFlow's output size and leading padding along one dim (-1: the VALID window is larger
 * than the input, an error). */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, bool same, int64_t *pad) {
  int64_t eff = (k - 1) * d + 1;
  if (same) {
    int64_t out = (in + s - 1) / s;
    int64_t total = (out - 1) * s + eff - in;
    *pad = total > 0 ? total / 2 : 0;
    return out;
  }
  *pad = 0;
  return in >= eff ? (in - eff) / s + 1 : -1;
}

static double *to_doubles(const FloeTensor *t) {
  int64_t n = floe_tensor_num_elements(t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) v[i] = harness_get(t, i);
  return v;
}

static FloeTensor *from_doubles(FloeDType dt, const int64_t dims[4], const double *vals) {
  FloeTensor *t = harness_tensor(dt, 4, dims, NULL);
  void *d = floe_tensor_data(t);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) {
    switch (dt) {
      case FLOE_F32: ((float *)d)[i] = (float)vals[i]; break;
      case FLOE_F64: ((double *)d)[i] = vals[i]; break;
      case FLOE_F16: ((uint16_t *)d)[i] = floe_f32_to_f16((float)vals[i]); break;
      case FLOE_BF16: ((uint16_t *)d)[i] = floe_f32_to_bf16((float)vals[i]); break;
      default: ck_abort_msg("from_doubles: dtype %s", floe_dtype_name(dt));
    }
  }
  return t;
}

/* Element offset of logical (n, c, h, w) in a tensor of the case's layout. */
static int64_t at(bool nchw, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h,
                  int64_t w) {
  return nchw ? ((n * C + c) * H + h) * W + w : ((n * H + h) * W + w) * C + c;
}

/* ---------------------------------------------------------------------------------- */
/* Reference loops (double accumulation). */

/* x [N,H,W,C] or [N,C,H,W], f [KH,KW,C,O] -> [N,OH,OW,O] or [N,O,OH,OW]. */
static FloeTensor *ref_conv(const Case *c, const FloeTensor *x, const FloeTensor *f) {
  int64_t pt, pl;
  int64_t oh = out_size(c->h, c->kh, c->sh, c->dh, c->same, &pt);
  int64_t ow = out_size(c->w, c->kw, c->sw, c->dw, c->same, &pl);
  ck_assert(oh >= 0 && ow >= 0);
  double *xv = to_doubles(x), *fv = to_doubles(f);
  double *y = calloc((size_t)(c->n * c->o * oh * ow + 1), sizeof(double));
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t o = 0; o < c->o; o++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double acc = 0;
          for (int64_t ki = 0; ki < c->kh; ki++)
            for (int64_t kj = 0; kj < c->kw; kj++) {
              int64_t ih = i * c->sh - pt + ki * c->dh, iw = j * c->sw - pl + kj * c->dw;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              for (int64_t ch = 0; ch < c->c; ch++)
                acc += xv[at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw)] *
                       fv[((ki * c->kw + kj) * c->c + ch) * c->o + o];
            }
          y[at(c->nchw, c->o, oh, ow, n, o, i, j)] = acc;
        }
  int64_t d[4] = {c->n, c->nchw ? c->o : oh, c->nchw ? oh : ow, c->nchw ? ow : c->o};
  FloeTensor *t = from_doubles(floe_tensor_dtype(x), d, y);
  free(xv);
  free(fv);
  free(y);
  return t;
}

/* x [N,H,W,C] or [N,C,H,W] -> max / mean over the in-bounds part of each window. */
static FloeTensor *ref_pool(const Case *c, Op op, const FloeTensor *x) {
  int64_t pt, pl;
  int64_t oh = out_size(c->h, c->kh, c->sh, 1, c->same, &pt);
  int64_t ow = out_size(c->w, c->kw, c->sw, 1, c->same, &pl);
  ck_assert(oh >= 0 && ow >= 0);
  double *xv = to_doubles(x);
  double *y = calloc((size_t)(c->n * c->c * oh * ow + 1), sizeof(double));
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t ch = 0; ch < c->c; ch++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double acc = op == MAXPOOL ? -INFINITY : 0;
          int64_t count = 0;
          for (int64_t ki = 0; ki < c->kh; ki++)
            for (int64_t kj = 0; kj < c->kw; kj++) {
              int64_t ih = i * c->sh - pt + ki, iw = j * c->sw - pl + kj;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              double v = xv[at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw)];
              acc = op == MAXPOOL ? fmax(acc, v) : acc + v;
              count++;
            }
          y[at(c->nchw, c->c, oh, ow, n, ch, i, j)] = op == MAXPOOL ? acc : acc / (double)count;
        }
  int64_t d[4] = {c->n, c->nchw ? c->c : oh, c->nchw ? oh : ow, c->nchw ? ow : c->c};
  FloeTensor *t = from_doubles(floe_tensor_dtype(x), d, y);
  free(xv);
  free(y);
  return t;
}

static void tol_for(FloeDType dt, double *rtol, double *atol) {
  switch (dt) {
    case FLOE_F64: *rtol = 1e-12; *atol = 1e-12; break;
    case FLOE_F16: *rtol = 2e-3; *atol = 2e-3; break;
    case FLOE_BF16: *rtol = 1.6e-2; *atol = 1.6e-2; break;
    default: *rtol = 1e-4; *atol = 1e-4; break;
  }
}

static const char *case_str(const Case *c, Op op, FloeDType dt, char *buf, size_t len) {
  snprintf(buf, len,
           "%s %s %s %s in n%lld h%lld w%lld c%lld window %lldx%lld o%lld stride %lldx%lld "
           "dil %lldx%lld",
           op_name[op], floe_dtype_name(dt), c->nchw ? "NCHW" : "NHWC", c->same ? "SAME" : "VALID",
           (long long)c->n, (long long)c->h, (long long)c->w, (long long)c->c, (long long)c->kh,
           (long long)c->kw, (long long)c->o, (long long)c->sh, (long long)c->sw,
           (long long)c->dh, (long long)c->dw);
  return buf;
}

/* Runs one case through a session and compares with the reference. */
static void check_case(const Case *c, Op op, FloeDType dt, uint64_t seed) {
  int64_t xd[4], fd[4] = {c->kh, c->kw, c->c, c->o};
  input_dims(c, xd);
  FloeTensor *x = harness_random(dt, 4, xd, seed, -1, 1);
  FloeTensor *f = op == CONV ? harness_random(dt, 4, fd, seed + 1, -1, 1) : NULL;
  FloeTensor *ins[2] = {x, f}, *out = NULL;
  FloeStatus *st = floe_status_new();
  AttrArgs a = {op, c};
  char what[256];
  case_str(c, op, dt, what, sizeof what);
  floe_code rc = harness_run_op(op_name[op], NULL, ins, op == CONV ? 2 : 1, NULL, 0, set_attrs,
                                &a, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  FloeTensor *want = op == CONV ? ref_conv(c, x, f) : ref_pool(c, op, x);
  double rtol, atol;
  tol_for(dt, &rtol, &atol);
  harness_assert_close(out, want, rtol, atol, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(x);
  floe_tensor_release(f);
  floe_status_free(st);
}

/* ---------------------------------------------------------------------------------- */
/* Conv2D. */

static const Case conv_cases[] = {
    /* nchw same  n  h   w   c  kh kw  o  sh sw dh dw */
    {false, true, 1, 7, 9, 3, 3, 3, 4, 1, 1, 1, 1},
    {false, false, 3, 8, 7, 2, 5, 5, 3, 1, 1, 1, 1},
    {false, true, 2, 9, 11, 3, 3, 3, 5, 2, 2, 1, 1},
    {false, true, 1, 10, 9, 2, 3, 3, 3, 1, 1, 2, 2},
    {false, false, 1, 11, 10, 2, 3, 3, 2, 1, 1, 2, 2},
    {true, true, 3, 7, 9, 3, 5, 5, 4, 2, 2, 1, 1},
    {true, false, 1, 11, 10, 2, 3, 3, 3, 1, 1, 2, 2},
    {true, true, 2, 9, 8, 3, 3, 3, 2, 2, 2, 2, 2},
    {true, false, 3, 8, 7, 4, 5, 5, 3, 2, 2, 1, 1},
    {false, false, 3, 7, 7, 5, 1, 1, 6, 2, 2, 1, 1},   /* 1x1, stride 2 */
    {true, true, 1, 6, 5, 4, 1, 1, 3, 1, 1, 1, 1},     /* 1x1 NCHW */
    {false, true, 2, 13, 6, 3, 4, 2, 5, 1, 2, 1, 1},   /* even window, mixed strides */
    {true, true, 2, 13, 6, 3, 2, 4, 5, 2, 1, 1, 2},
    {false, false, 1, 5, 5, 3, 5, 5, 2, 1, 1, 1, 1},   /* window = input: 1x1 output */
    {false, true, 1, 1, 1, 2, 5, 5, 3, 2, 2, 1, 1},    /* 1x1 input, all padding */
    {false, true, 2, 16, 16, 16, 3, 3, 32, 1, 1, 1, 1},
    {false, true, 3, 28, 28, 32, 5, 5, 64, 1, 1, 1, 1}, /* the benchmark's layer, batch 3 */
    {true, true, 3, 28, 28, 32, 5, 5, 64, 2, 2, 1, 1},
};
#define NUM_CONV_CASES (int)(sizeof conv_cases / sizeof conv_cases[0])

START_TEST(test_conv_f32) { check_case(&conv_cases[_i], CONV, FLOE_F32, 100 + _i); }
END_TEST

/* _FusedConv2DBiasRelu(x, f, b) equals Relu(BiasAdd(Conv2D(x, f), b)) in every float
 * dtype, layout and window of the conv cases (batches of 1-3, so 1-3 shards). */
START_TEST(test_fused_conv_bias_relu) {
  const Case *c = &conv_cases[_i];
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
  for (size_t d = 0; d < 4; d++) {
    int64_t xd[4], fd[4] = {c->kh, c->kw, c->c, c->o}, bd[1] = {c->o};
    input_dims(c, xd);
    FloeTensor *x = harness_random(dts[d], 4, xd, 300 + _i, -1, 1);
    FloeTensor *f = harness_random(dts[d], 4, fd, 400 + _i, -1, 1);
    FloeTensor *b = harness_random(dts[d], 1, bd, 500 + _i, -1, 1);
    AttrArgs ca = {CONV, c};
    FloeStatus *st = floe_status_new();
    FloeTensor *conv, *biased, *want, *got;
    FloeTensor *in2[2] = {x, f}, *in3[3] = {x, f, b};
    ck_assert(harness_run_op("Conv2D", NULL, in2, 2, NULL, 0, set_attrs, &ca, &conv, 1, st) ==
              FLOE_OK);
    FloeTensor *cb[2] = {conv, b};
    const char *fmt = c->nchw ? "NCHW" : "NHWC";
    ck_assert(harness_run_op("BiasAdd", NULL, cb, 2, NULL, 0, set_format, (void *)fmt, &biased,
                             1, st) == FLOE_OK);
    ck_assert(harness_run_op("Relu", NULL, &biased, 1, NULL, 0, NULL, NULL, &want, 1, st) ==
              FLOE_OK);
    ck_assert_msg(harness_run_op("_FusedConv2DBiasRelu", NULL, in3, 3, NULL, 0, set_attrs, &ca,
                                 &got, 1, st) == FLOE_OK, "%s", floe_status_message(st));
    char what[96];
    snprintf(what, sizeof what, "_FusedConv2DBiasRelu case %d %s", _i, floe_dtype_name(dts[d]));
    /* One rounding of the sum in the fused op against two (f16/bf16: the conv's output is
     * rounded before the bias is added). */
    double tol = dts[d] == FLOE_F64 ? 1e-12 : dts[d] == FLOE_F32 ? 1e-5 : 2e-2;
    harness_assert_close(got, want, tol, tol, what);
    FloeTensor *all[] = {x, f, b, conv, biased, want, got};
    for (size_t i = 0; i < 7; i++) floe_tensor_release(all[i]);
    floe_status_free(st);
  }
}
END_TEST

START_TEST(test_conv_f64) { check_case(&conv_cases[_i], CONV, FLOE_F64, 200 + _i); }
END_TEST

START_TEST(test_conv_half) {
  check_case(&conv_cases[_i], CONV, FLOE_F16, 300 + _i);
  check_case(&conv_cases[_i], CONV, FLOE_BF16, 400 + _i);
}
END_TEST

START_TEST(test_conv_empty) {
  const Case empty[] = {
      {false, true, 0, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1},  /* no batch */
      {true, true, 0, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1},
      {false, true, 2, 5, 5, 3, 3, 3, 0, 1, 1, 1, 1},  /* no output channels */
      {false, true, 2, 0, 5, 3, 3, 3, 4, 1, 1, 1, 1},  /* no rows */
      {false, true, 2, 5, 5, 0, 3, 3, 4, 1, 1, 1, 1},  /* no input channels: zeros */
      {true, false, 1, 5, 4, 0, 2, 2, 3, 1, 1, 1, 1},
  };
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
    for (size_t d = 0; d < 3; d++) check_case(&empty[i], CONV, dts[d], 500 + i);
}
END_TEST

/* Runs op with its inputs fed through placeholders of unknown shape, so that only the kernel
 * sees the shapes. Returns the graph's or the run's code (message in st). */
static floe_code run_unknown_shapes(Op op, FloeTensor *const *ins, harness_attrs_fn attrs,
                                    void *arg, FloeTensor **out, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, op_name[op], "op");
  floe_node_add_input(b, floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown()));
  if (op == CONV) floe_node_add_input(b, floe_placeholder(g, "f", FLOE_F32, floe_shape_unknown()));
  attrs(b, arg);
  floe_node_finish(b);
  FloeFeed feeds[2] = {{"x", ins[0]}, {"f", ins[1]}};
  const char *fetch = "op";
  floe_code rc = harness_run_graph(g, NULL, feeds, op == CONV ? 2 : 1, &fetch, 1, out, st);
  floe_graph_free(g);
  return rc;
}

/* Runs a bad case twice, with static shapes (checked when the graph is built) and with unknown
 * ones (checked by the kernel): both must fail with INVALID_ARGUMENT and a message containing
 * n1 and n2 (when non-NULL). xd / fd override the case's input / filter dims. */
static void expect_invalid(Op op, const Case *c, const int64_t *xd, int xr, const int64_t *fd,
                           harness_attrs_fn attrs, void *arg, const char *n1, const char *n2) {
  int64_t dflt[4];
  if (!xd) {
    input_dims(c, dflt);
    xd = dflt;
    xr = 4;
  }
  int64_t fdd[4] = {c->kh, c->kw, c->c, c->o};
  FloeTensor *ins[2] = {harness_random(FLOE_F32, xr, xd, 1, -1, 1),
                        op == CONV ? harness_random(FLOE_F32, 4, fd ? fd : fdd, 2, -1, 1) : NULL};
  AttrArgs a = {op, c};
  if (!attrs) {
    attrs = set_attrs;
    arg = &a;
  }
  for (int unknown = 0; unknown < 2; unknown++) {
    FloeTensor *out = NULL;
    FloeStatus *st = floe_status_new();
    floe_code rc = unknown ? run_unknown_shapes(op, ins, attrs, arg, &out, st)
                           : harness_run_op(op_name[op], NULL, ins, op == CONV ? 2 : 1, NULL, 0,
                                            attrs, arg, &out, 1, st);
    const char *msg = floe_status_message(st), *how = unknown ? "unknown shapes" : "known shapes";
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s (%s): code %s (%s), want INVALID_ARGUMENT",
                  op_name[op], how, floe_code_name(rc), msg);
    ck_assert_ptr_null(out);
    if (n1) ck_assert_msg(strstr(msg, n1), "%s (%s): \"%s\" lacks \"%s\"", op_name[op], how, msg, n1);
    if (n2) ck_assert_msg(strstr(msg, n2), "%s (%s): \"%s\" lacks \"%s\"", op_name[op], how, msg, n2);
    floe_status_free(st);
  }
  floe_tensor_release(ins[0]);
  floe_tensor_release(ins[1]);
}

/* Attributes given verbatim, to make bad ones. */
typedef struct RawAttrs {
  int64_t strides[4], dilations[4], ksize[4];
  int n_strides, n_dilations, n_ksize; /* 0: not set */
  const char *padding, *format;
} RawAttrs;

static void set_raw(FloeNodeBuilder *b, void *arg) {
  const RawAttrs *r = arg;
  if (r->n_strides) floe_node_set_attr_int_list(b, "strides", r->strides, r->n_strides);
  if (r->n_dilations) floe_node_set_attr_int_list(b, "dilations", r->dilations, r->n_dilations);
  if (r->n_ksize) floe_node_set_attr_int_list(b, "ksize", r->ksize, r->n_ksize);
  if (r->padding) floe_node_set_attr_string(b, "padding", r->padding);
  if (r->format) floe_node_set_attr_string(b, "data_format", r->format);
}

START_TEST(test_conv_errors) {
  const Case c = {false, true, 1, 6, 6, 3, 3, 3, 4, 1, 1, 1, 1};
  RawAttrs r = {{1, 1, 1}, {0}, {0}, 3, 0, 0, "SAME", "NHWC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "strides", "[1,1,1]");
  r = (RawAttrs){{1, 1, 1, 1}, {0}, {0}, 4, 0, 0, "SOME", "NHWC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "padding", "SOME");
  r = (RawAttrs){{1, 0, 1, 1}, {0}, {0}, 4, 0, 0, "SAME", "NHWC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "strides", "[1,0,1,1]");
  r = (RawAttrs){{1, 1, 1, 1}, {2, 1, 1, 1}, {0}, 4, 4, 0, "SAME", "NHWC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "dilations", "[2,1,1,1]");
  r = (RawAttrs){{1, 1, 1, 1}, {1, 1, -1, 1}, {0}, 4, 4, 0, "SAME", "NHWC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "dilations", "-1");
  r = (RawAttrs){{1, 1, 1, 1}, {0}, {0}, 4, 0, 0, "SAME", "NWHC"};
  expect_invalid(CONV, &c, NULL, 0, NULL, set_raw, &r, "data_format", "NWHC");

  /* Filter in-channels (HWIO dim 2) must match the input's channels. */
  int64_t bad_f[4] = {3, 3, 2, 4};
  expect_invalid(CONV, &c, NULL, 0, bad_f, NULL, NULL, "[3,3,2,4]", "[1,6,6,3]");
  int64_t rank3[3] = {6, 6, 3};
  expect_invalid(CONV, &c, rank3, 3, NULL, NULL, NULL, "[6,6,3]", NULL);
  /* VALID with a window larger than the input. */
  const Case small = {false, false, 1, 2, 2, 3, 5, 5, 4, 1, 1, 1, 1};
  expect_invalid(CONV, &small, NULL, 0, NULL, NULL, NULL, "VALID", NULL);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Pooling. */

static const Case pool_cases[] = {
    /* nchw same  n  h   w   c  kh kw o  sh sw */
    {false, false, 1, 8, 8, 3, 2, 2, 0, 2, 2, 1, 1},
    {false, true, 3, 7, 9, 4, 3, 3, 0, 2, 2, 1, 1},
    {false, true, 2, 7, 9, 4, 3, 3, 0, 1, 1, 1, 1},
    {false, false, 2, 9, 7, 5, 3, 3, 0, 2, 2, 1, 1},
    {true, true, 3, 7, 9, 4, 3, 3, 0, 2, 2, 1, 1},
    {true, false, 1, 8, 8, 3, 2, 2, 0, 2, 2, 1, 1},
    {true, true, 2, 11, 6, 2, 2, 3, 0, 1, 2, 1, 1},
    {false, true, 2, 11, 6, 2, 2, 3, 0, 3, 1, 1, 1},
    {false, true, 1, 5, 5, 16, 1, 1, 0, 1, 1, 1, 1},  /* 1x1 window */
    {false, true, 1, 3, 4, 2, 5, 5, 0, 1, 1, 1, 1},   /* window larger than the input */
    {true, true, 1, 3, 4, 2, 5, 5, 0, 2, 2, 1, 1},
    {false, true, 4, 28, 28, 32, 3, 3, 0, 2, 2, 1, 1},
};
#define NUM_POOL_CASES (int)(sizeof pool_cases / sizeof pool_cases[0])

START_TEST(test_pool) {
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
  for (size_t d = 0; d < 4; d++) {
    check_case(&pool_cases[_i], MAXPOOL, dts[d], 600 + _i);
    check_case(&pool_cases[_i], AVGPOOL, dts[d], 700 + _i);
  }
}
END_TEST

START_TEST(test_pool_empty) {
  const Case empty[] = {
      {false, true, 0, 5, 5, 3, 2, 2, 0, 2, 2, 1, 1},
      {true, true, 2, 5, 5, 0, 2, 2, 0, 2, 2, 1, 1},
      {false, true, 2, 0, 5, 3, 1, 1, 0, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
    for (Op op = MAXPOOL; op <= AVGPOOL; op++) {
      check_case(&empty[i], op, FLOE_F32, 800 + i);
      check_case(&empty[i], op, FLOE_F64, 800 + i);
    }
}
END_TEST

START_TEST(test_pool_errors) {
  const Case c = {false, true, 1, 6, 6, 3, 2, 2, 0, 2, 2, 1, 1};
  for (Op op = MAXPOOL; op <= AVGPOOL; op++) {
    RawAttrs r = {{1, 2, 2, 1}, {0}, {1, 2, 2}, 4, 0, 3, "SAME", "NHWC"};
    expect_invalid(op, &c, NULL, 0, NULL, set_raw, &r, "ksize", "[1,2,2]");
    r = (RawAttrs){{1, 2, 2, 1}, {0}, {1, 0, 2, 1}, 4, 0, 4, "SAME", "NHWC"};
    expect_invalid(op, &c, NULL, 0, NULL, set_raw, &r, "ksize", "[1,0,2,1]");
    r = (RawAttrs){{1, 2, 2, 1}, {0}, {2, 2, 2, 1}, 4, 0, 4, "SAME", "NHWC"};
    expect_invalid(op, &c, NULL, 0, NULL, set_raw, &r, "ksize", "[2,2,2,1]");
    r = (RawAttrs){{1, 2, 2}, {0}, {1, 2, 2, 1}, 3, 0, 4, "SAME", "NHWC"};
    expect_invalid(op, &c, NULL, 0, NULL, set_raw, &r, "strides", "[1,2,2]");
    r = (RawAttrs){{1, 2, 2, 1}, {0}, {1, 2, 2, 1}, 4, 0, 4, "FULL", "NHWC"};
    expect_invalid(op, &c, NULL, 0, NULL, set_raw, &r, "padding", "FULL");
    int64_t rank2[2] = {6, 3};
    expect_invalid(op, &c, rank2, 2, NULL, NULL, NULL, "[6,3]", NULL);
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* One node fed many input shapes (more than its primitive cache holds), from several threads
 * at once: every run must match the reference for its own shape. */

#define SHAPES 11
#define THREADS 4
#define ROUNDS 6

typedef struct Shared {
  FloeSession *s;
  FloeTensor *x[SHAPES], *f, *want[SHAPES];
  int failures;
  char error[256];
  pthread_mutex_t lock;
} Shared;

typedef struct Worker {
  Shared *sh;
  int id;
} Worker;

static void *worker(void *arg) {
  Worker *w = arg;
  Shared *sh = w->sh;
  FloeStatus *st = floe_status_new();
  for (int r = 0; r < ROUNDS * SHAPES; r++) {
    int i = (r * 7 + w->id * 3) % SHAPES;
    FloeFeed feeds[2] = {{"x", sh->x[i]}, {"f", sh->f}};
    const char *fetch = "conv";
    FloeTensor *out = NULL;
    floe_code rc = floe_session_run(sh->s, feeds, 2, &fetch, 1, NULL, 0, &out, st);
    bool ok = rc == FLOE_OK &&
              floe_tensor_num_elements(out) == floe_tensor_num_elements(sh->want[i]);
    for (int64_t e = 0; ok && e < floe_tensor_num_elements(out); e++) {
      double g = harness_get(out, e), want = harness_get(sh->want[i], e);
      ok = fabs(g - want) <= 1e-4 + 1e-4 * fabs(want);
    }
    if (!ok) {
      pthread_mutex_lock(&sh->lock);
      if (!sh->failures++)
        snprintf(sh->error, sizeof sh->error, "shape %d: %s", i,
                 rc == FLOE_OK ? "wrong values" : floe_status_message(st));
      pthread_mutex_unlock(&sh->lock);
    }
    floe_tensor_release(out);
  }
  floe_status_free(st);
  return NULL;
}

START_TEST(test_conv_shape_cache_threads) {
  Case c = {false, true, 1, 0, 0, 3, 3, 3, 4, 2, 1, 1, 1};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown());
  int64_t fdims[4] = {3, 3, 3, 4};
  FloeOutput f = floe_placeholder(g, "f", FLOE_F32, floe_shape_make(4, fdims));
  FloeNodeBuilder *b = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  AttrArgs a = {CONV, &c};
  set_attrs(b, &a);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, st));
  Shared sh;
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.lock, NULL);
  sh.s = harness_session(g, NULL);
  sh.f = harness_random(FLOE_F32, 4, fdims, 5, -1, 1);
  for (int i = 0; i < SHAPES; i++) {
    c.n = 1 + i % 3;
    c.h = 4 + i;
    c.w = 9 - i % 4;
    int64_t xd[4];
    input_dims(&c, xd);
    sh.x[i] = harness_random(FLOE_F32, 4, xd, 10 + i, -1, 1);
    sh.want[i] = ref_conv(&c, sh.x[i], sh.f);
  }
  pthread_t t[THREADS];
  Worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (Worker){&sh, i};
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  ck_assert_msg(sh.failures == 0, "%d failed runs, first: %s", sh.failures, sh.error);
  for (int i = 0; i < SHAPES; i++) {
    floe_tensor_release(sh.x[i]);
    floe_tensor_release(sh.want[i]);
  }
  floe_tensor_release(sh.f);
  floe_session_free(sh.s);
  floe_graph_free(g);
  floe_status_free(st);
  pthread_mutex_destroy(&sh.lock);
}
END_TEST

/* The primitive keeps the last filter's reordered form: a new filter, or new values written
 * into the same tensor, must be seen. */
START_TEST(test_conv_filter_changes) {
  const Case c = {false, true, 2, 9, 7, 8, 3, 3, 16, 1, 1, 1, 1};
  int64_t xd[4], fd[4] = {3, 3, 8, 16};
  input_dims(&c, xd);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput f = floe_placeholder(g, "f", FLOE_F32, floe_shape_make(4, fd));
  FloeNodeBuilder *b = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  AttrArgs a = {CONV, &c};
  set_attrs(b, &a);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  FloeTensor *xt = harness_random(FLOE_F32, 4, xd, 1, -1, 1);
  FloeTensor *f1 = harness_random(FLOE_F32, 4, fd, 2, -1, 1);
  FloeTensor *f2 = harness_random(FLOE_F32, 4, fd, 3, -1, 1);
  FloeTensor *filters[5] = {f1, f1, f2, f1, f1};
  for (int step = 0; step < 5; step++) {
    if (step == 4) ((float *)floe_tensor_data(f1))[17] += 1.0f; /* same tensor, new values */
    FloeFeed feeds[2] = {{"x", xt}, {"f", filters[step]}};
    const char *fetch = "conv";
    FloeTensor *out = NULL;
    ck_assert_msg(floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    FloeTensor *want = ref_conv(&c, xt, filters[step]);
    char what[32];
    snprintf(what, sizeof what, "step %d", step);
    harness_assert_close(out, want, 1e-4, 1e-4, what);
    floe_tensor_release(out);
    floe_tensor_release(want);
  }
  floe_tensor_release(xt);
  floe_tensor_release(f1);
  floe_tensor_release(f2);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

static Suite *conv_suite(void) {
  Suite *s = suite_create("conv");
  TCase *tc = tcase_create("conv2d");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_conv_f32, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_fused_conv_bias_relu, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_conv_f64, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_conv_half, 0, NUM_CONV_CASES);
  tcase_add_test(tc, test_conv_empty);
  tcase_add_test(tc, test_conv_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("pool");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_pool, 0, NUM_POOL_CASES);
  tcase_add_test(tc, test_pool_empty);
  tcase_add_test(tc, test_pool_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("cache");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_conv_shape_cache_threads);
  tcase_add_test(tc, test_conv_filter_changes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Two pool threads unless the caller chose: batches and large products are then cut into
   * shards on the pool (uneven ones for the odd batches above), whatever the machine's
   * core count. */
  setenv("FLOE_NUM_THREADS", "2", 0);
  SRunner *sr = srunner_create(conv_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
