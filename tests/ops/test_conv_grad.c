/* SPDX-License-Identifier: Apache-2.0 */
/* test_conv_grad.c - Conv2DBackpropInput, Conv2DBackpropFilter, MaxPoolGrad and AvgPoolGrad
 * against direct reference loops, against each other and Conv2D through the adjoint identity,
 * and (pooling) against finite differences of the forward ops. */
#include <math.h>
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
  int64_t dh, dw;     /* dilations (convolutions only) */
} Case;

typedef enum Op { BP_INPUT, BP_FILTER, MAXPOOL_GRAD, AVGPOOL_GRAD, CONV, MAXPOOL, AVGPOOL } Op;
static const char *const op_name[] = {"Conv2DBackpropInput", "Conv2DBackpropFilter",
                                      "MaxPoolGrad",         "AvgPoolGrad",
                                      "Conv2D",              "MaxPool",
                                      "AvgPool"};

static bool is_pool(Op op) {
  return op == MAXPOOL_GRAD || op == AVGPOOL_GRAD || op == MAXPOOL || op == AVGPOOL;
}

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
  if (is_pool(a->op)) {
    fmt_list(a->c->nchw, a->c->kh, a->c->kw, l);
    floe_node_set_attr_int_list(b, "ksize", l, 4);
  } else {
    fmt_list(a->c->nchw, a->c->dh, a->c->dw, l);
    floe_node_set_attr_int_list(b, "dilations", l, 4);
  }
}

/* Dims of logical (n, c, h, w) in the case's layout. */
static void dims_of(bool nchw, int64_t n, int64_t c, int64_t h, int64_t w, int64_t d[4]) {
  d[0] = n;
  d[nchw ? 1 : 3] = c;
  d[nchw ? 2 : 1] = h;
  d[nchw ? 3 : 2] = w;
}

/* TensorFlow's output size and leading padding along one dim (-1: VALID window too big). */
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

/* Output geometry of a case (dilations 1 for pooling). */
typedef struct Out {
  int64_t oh, ow, pt, pl, o;
} Out;

static Out out_of(const Case *c, bool pool) {
  Out r;
  r.oh = out_size(c->h, c->kh, c->sh, pool ? 1 : c->dh, c->same, &r.pt);
  r.ow = out_size(c->w, c->kw, c->sw, pool ? 1 : c->dw, c->same, &r.pl);
  ck_assert(r.oh >= 0 && r.ow >= 0);
  r.o = pool ? c->c : c->o;
  return r;
}

/* Element offset of logical (n, c, h, w) in a tensor of the given layout. */
static int64_t at(bool nchw, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h,
                  int64_t w) {
  return nchw ? ((n * C + c) * H + h) * W + w : ((n * H + h) * W + w) * C + c;
}

static FloeTensor *sizes_tensor(const int64_t d[4]) {
  int32_t v[4] = {(int32_t)d[0], (int32_t)d[1], (int32_t)d[2], (int32_t)d[3]};
  int64_t four = 4;
  return harness_i32(1, &four, v);
}

static void tol_for(FloeDType dt, double *rtol, double *atol) {
  switch (dt) {
    case FLOE_F64: *rtol = 1e-12; *atol = 1e-12; break;
    case FLOE_F16: *rtol = 4e-3; *atol = 4e-3; break;
    case FLOE_BF16: *rtol = 3e-2; *atol = 3e-2; break;
    default: *rtol = 2e-4; *atol = 2e-4; break;
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

/* Runs op on ins; aborts the test with the message on failure. */
static FloeTensor *run(Op op, const Case *c, FloeTensor *const *ins, int n_ins, const char *what) {
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  AttrArgs a = {op, c};
  floe_code rc = harness_run_op(op_name[op], NULL, ins, n_ins, NULL, 0, set_attrs, &a, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  floe_status_free(st);
  return out;
}

/* ---------------------------------------------------------------------------------- */
/* Reference loops (double). Inputs are the harness's values of the tensors. */

/* dy [N,O,OH,OW] (logical), f [KH,KW,C,O] -> dx [N,C,H,W] (logical), in the case's layout. */
static double *ref_backprop_input(const Case *c, const double *dy, const double *f) {
  Out r = out_of(c, false);
  double *dx = calloc((size_t)(c->n * c->c * c->h * c->w + 1), sizeof(double));
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t o = 0; o < c->o; o++)
      for (int64_t i = 0; i < r.oh; i++)
        for (int64_t j = 0; j < r.ow; j++) {
          double g = dy[at(c->nchw, c->o, r.oh, r.ow, n, o, i, j)];
          for (int64_t ki = 0; ki < c->kh; ki++)
            for (int64_t kj = 0; kj < c->kw; kj++) {
              int64_t ih = i * c->sh - r.pt + ki * c->dh, iw = j * c->sw - r.pl + kj * c->dw;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              for (int64_t ch = 0; ch < c->c; ch++)
                dx[at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw)] +=
                    g * f[((ki * c->kw + kj) * c->c + ch) * c->o + o];
            }
        }
  return dx;
}

/* x [N,C,H,W] (logical), dy [N,O,OH,OW] -> df [KH,KW,C,O]. */
static double *ref_backprop_filter(const Case *c, const double *x, const double *dy) {
  Out r = out_of(c, false);
  double *df = calloc((size_t)(c->kh * c->kw * c->c * c->o + 1), sizeof(double));
  for (int64_t ki = 0; ki < c->kh; ki++)
    for (int64_t kj = 0; kj < c->kw; kj++)
      for (int64_t ch = 0; ch < c->c; ch++)
        for (int64_t o = 0; o < c->o; o++) {
          double acc = 0;
          for (int64_t n = 0; n < c->n; n++)
            for (int64_t i = 0; i < r.oh; i++)
              for (int64_t j = 0; j < r.ow; j++) {
                int64_t ih = i * c->sh - r.pt + ki * c->dh, iw = j * c->sw - r.pl + kj * c->dw;
                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                acc += x[at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw)] *
                       dy[at(c->nchw, c->o, r.oh, r.ow, n, o, i, j)];
              }
          df[((ki * c->kw + kj) * c->c + ch) * c->o + o] = acc;
        }
  return df;
}

/* Pooling gradients: MaxPoolGrad gives each window's gradient to its first maximum in
 * row-major window order (a later equal value does not take it); AvgPoolGrad shares it over
 * the window's in-bounds elements. x is NULL for AvgPoolGrad. */
static double *ref_pool_grad(const Case *c, Op op, const double *x, const double *dy) {
  Out r = out_of(c, true);
  double *dx = calloc((size_t)(c->n * c->c * c->h * c->w + 1), sizeof(double));
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t ch = 0; ch < c->c; ch++)
      for (int64_t i = 0; i < r.oh; i++)
        for (int64_t j = 0; j < r.ow; j++) {
          double g = dy[at(c->nchw, c->c, r.oh, r.ow, n, ch, i, j)];
          int64_t best = -1, count = 0;
          for (int64_t ki = 0; ki < c->kh; ki++)
            for (int64_t kj = 0; kj < c->kw; kj++) {
              int64_t ih = i * c->sh - r.pt + ki, iw = j * c->sw - r.pl + kj;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              int64_t e = at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw);
              count++;
              if (op == MAXPOOL_GRAD && (best < 0 || x[e] > x[best])) best = e;
            }
          if (op == MAXPOOL_GRAD) {
            if (best >= 0) dx[best] += g;
            continue;
          }
          for (int64_t ki = 0; ki < c->kh; ki++)
            for (int64_t kj = 0; kj < c->kw; kj++) {
              int64_t ih = i * c->sh - r.pt + ki, iw = j * c->sw - r.pl + kj;
              if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
              dx[at(c->nchw, c->c, c->h, c->w, n, ch, ih, iw)] += g / (double)count;
            }
        }
  return dx;
}

/* ---------------------------------------------------------------------------------- */
/* Kernels against the reference loops. */

/* Runs op (a gradient op) on random inputs for case c in dtype dt and compares with the
 * reference on the same (dtype-rounded) values. values_from, when non-zero, makes the
 * forward input integer-valued in [0, values_from) so that pooling windows have ties. */
static void check_grad(const Case *c, Op op, FloeDType dt, uint64_t seed, int values_from) {
  bool pool = is_pool(op);
  Out r = out_of(c, pool);
  int64_t xd[4], yd[4], fd[4] = {c->kh, c->kw, c->c, c->o};
  dims_of(c->nchw, c->n, c->c, c->h, c->w, xd);
  dims_of(c->nchw, c->n, r.o, r.oh, r.ow, yd);
  FloeTensor *x = harness_random(dt, 4, xd, seed, -1, 1);
  if (values_from) {
    int64_t n = harness_count(4, xd);
    double *v = malloc((size_t)(n + 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = (double)((uint64_t)(i * 2654435761u + seed) % (uint64_t)values_from);
    floe_tensor_release(x);
    x = harness_from_doubles(dt, 4, xd, v);
    free(v);
  }
  FloeTensor *dy = harness_random(dt, 4, yd, seed + 1, -1, 1);
  FloeTensor *f = harness_random(dt, 4, fd, seed + 2, -1, 1);
  double *xv = harness_values(x), *dyv = harness_values(dy), *fv = harness_values(f);
  char what[256];
  case_str(c, op, dt, what, sizeof what);
  FloeTensor *out = NULL, *want = NULL;
  double *ref = NULL;
  switch (op) {
    case BP_INPUT: {
      FloeTensor *ins[3] = {sizes_tensor(xd), f, dy};
      out = run(op, c, ins, 3, what);
      floe_tensor_release(ins[0]);
      ref = ref_backprop_input(c, dyv, fv);
      want = harness_from_doubles(dt, 4, xd, ref);
      break;
    }
    case BP_FILTER: {
      FloeTensor *ins[3] = {x, sizes_tensor(fd), dy};
      out = run(op, c, ins, 3, what);
      floe_tensor_release(ins[1]);
      ref = ref_backprop_filter(c, xv, dyv);
      want = harness_from_doubles(dt, 4, fd, ref);
      break;
    }
    case MAXPOOL_GRAD: {
      /* orig_output from the forward op: the kernel must use only its shape */
      FloeTensor *y = run(MAXPOOL, c, &x, 1, what);
      FloeTensor *ins[3] = {x, y, dy};
      out = run(op, c, ins, 3, what);
      floe_tensor_release(y);
      ref = ref_pool_grad(c, op, xv, dyv);
      want = harness_from_doubles(dt, 4, xd, ref);
      break;
    }
    case AVGPOOL_GRAD: {
      FloeTensor *ins[2] = {sizes_tensor(xd), dy};
      out = run(op, c, ins, 2, what);
      floe_tensor_release(ins[0]);
      ref = ref_pool_grad(c, op, NULL, dyv);
      want = harness_from_doubles(dt, 4, xd, ref);
      break;
    }
    default: ck_abort_msg("check_grad: %s is not a gradient op", op_name[op]);
  }
  double rtol, atol;
  tol_for(dt, &rtol, &atol);
  harness_assert_close(out, want, rtol, atol, what);
  free(ref);
  free(xv);
  free(dyv);
  free(fv);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(x);
  floe_tensor_release(dy);
  floe_tensor_release(f);
}

static const Case conv_cases[] = {
    /* nchw same  n  h   w   c  kh kw  o  sh sw dh dw */
    {false, true, 1, 7, 9, 3, 3, 3, 4, 1, 1, 1, 1},
    {false, false, 3, 8, 7, 2, 5, 5, 3, 1, 1, 1, 1},
    {false, true, 2, 9, 11, 3, 3, 3, 5, 2, 2, 1, 1},
    {false, false, 2, 10, 9, 3, 3, 3, 4, 2, 2, 1, 1},
    {false, true, 1, 10, 9, 2, 3, 3, 3, 1, 1, 2, 2},
    {false, false, 1, 11, 10, 2, 3, 3, 2, 1, 1, 2, 2},
    {false, true, 2, 11, 12, 3, 3, 2, 4, 2, 1, 2, 1},  /* mixed strides and dilations */
    {true, true, 3, 7, 9, 3, 5, 5, 4, 2, 2, 1, 1},
    {true, false, 1, 11, 10, 2, 3, 3, 3, 1, 1, 2, 2},
    {true, true, 2, 9, 8, 3, 3, 3, 2, 2, 2, 2, 2},
    {true, false, 3, 8, 7, 4, 5, 5, 3, 2, 2, 1, 1},
    {true, true, 2, 6, 7, 5, 1, 1, 3, 1, 1, 1, 1},    /* 1x1 */
    {false, false, 3, 7, 7, 5, 1, 1, 6, 2, 2, 1, 1},  /* 1x1, stride 2 */
    {false, true, 2, 13, 6, 3, 4, 2, 5, 1, 2, 1, 1},  /* even window */
    {true, true, 2, 13, 6, 3, 2, 4, 5, 2, 1, 1, 2},
    {false, false, 1, 5, 5, 3, 5, 5, 2, 1, 1, 1, 1},  /* window = input */
    {false, true, 1, 1, 1, 2, 5, 5, 3, 2, 2, 1, 1},   /* 1x1 input, all padding */
    {false, true, 3, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1}, /* the CNN's layers, small batches */
    {false, true, 2, 14, 14, 32, 5, 5, 64, 1, 1, 1, 1},
    {true, true, 2, 14, 14, 32, 5, 5, 16, 1, 1, 1, 1},
    {false, true, 2, 15, 13, 19, 3, 3, 21, 2, 2, 1, 1}, /* channels that fit no vector */
};
#define NUM_CONV_CASES (int)(sizeof conv_cases / sizeof conv_cases[0])

START_TEST(test_backprop_input_f32) { check_grad(&conv_cases[_i], BP_INPUT, FLOE_F32, 100 + _i, 0); }
END_TEST

START_TEST(test_backprop_filter_f32) { check_grad(&conv_cases[_i], BP_FILTER, FLOE_F32, 200 + _i, 0); }
END_TEST

START_TEST(test_backprop_f64) {
  check_grad(&conv_cases[_i], BP_INPUT, FLOE_F64, 300 + _i, 0);
  check_grad(&conv_cases[_i], BP_FILTER, FLOE_F64, 400 + _i, 0);
}
END_TEST

START_TEST(test_backprop_half) {
  /* Small cases only: the sums of the big ones round beyond a fixed half tolerance. */
  if (conv_cases[_i].c * conv_cases[_i].o > 64) return;
  check_grad(&conv_cases[_i], BP_INPUT, FLOE_F16, 500 + _i, 0);
  check_grad(&conv_cases[_i], BP_FILTER, FLOE_F16, 600 + _i, 0);
  check_grad(&conv_cases[_i], BP_INPUT, FLOE_BF16, 700 + _i, 0);
  check_grad(&conv_cases[_i], BP_FILTER, FLOE_BF16, 800 + _i, 0);
}
END_TEST

START_TEST(test_backprop_empty) {
  const Case empty[] = {
      {false, true, 0, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1}, /* no batch */
      {true, true, 0, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1},
      {false, true, 2, 5, 5, 3, 3, 3, 0, 1, 1, 1, 1}, /* no output channels */
      {false, true, 2, 0, 5, 3, 3, 3, 4, 1, 1, 1, 1}, /* no rows */
      {false, true, 2, 5, 5, 0, 3, 3, 4, 1, 1, 1, 1}, /* no input channels */
      {true, false, 1, 5, 4, 2, 2, 2, 0, 1, 1, 1, 1},
  };
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
    for (size_t d = 0; d < 3; d++) {
      check_grad(&empty[i], BP_INPUT, dts[d], 900 + i, 0);
      check_grad(&empty[i], BP_FILTER, dts[d], 950 + i, 0);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The adjoint identity: for y = Conv2D(x, w), <y, g> = <x, BackpropInput(g)> =
 * <w, BackpropFilter(x, g)>, with Conv2D's own kernel on one side. */

static double dot(const FloeTensor *a, const FloeTensor *b) {
  ck_assert_int_eq(floe_tensor_num_elements(a), floe_tensor_num_elements(b));
  double s = 0;
  for (int64_t i = 0; i < floe_tensor_num_elements(a); i++) s += harness_get(a, i) * harness_get(b, i);
  return s;
}

static double abs_dot(const FloeTensor *a, const FloeTensor *b) {
  double s = 0;
  for (int64_t i = 0; i < floe_tensor_num_elements(a); i++)
    s += fabs(harness_get(a, i) * harness_get(b, i));
  return s;
}

static void check_adjoint(const Case *c, FloeDType dt, uint64_t seed) {
  Out r = out_of(c, false);
  int64_t xd[4], yd[4], fd[4] = {c->kh, c->kw, c->c, c->o};
  dims_of(c->nchw, c->n, c->c, c->h, c->w, xd);
  dims_of(c->nchw, c->n, c->o, r.oh, r.ow, yd);
  FloeTensor *x = harness_random(dt, 4, xd, seed, -1, 1);
  FloeTensor *w = harness_random(dt, 4, fd, seed + 1, -1, 1);
  FloeTensor *g = harness_random(dt, 4, yd, seed + 2, -1, 1);
  FloeTensor *xs = sizes_tensor(xd), *fs = sizes_tensor(fd);
  char what[256];
  case_str(c, CONV, dt, what, sizeof what);
  FloeTensor *fwd_in[2] = {x, w}, *bi_in[3] = {xs, w, g}, *bf_in[3] = {x, fs, g};
  FloeTensor *y = run(CONV, c, fwd_in, 2, what);
  FloeTensor *gx = run(BP_INPUT, c, bi_in, 3, what);
  FloeTensor *gw = run(BP_FILTER, c, bf_in, 3, what);
  double yg = dot(y, g), xgx = dot(x, gx), wgw = dot(w, gw);
  /* Rounding scales with the sum of the terms' magnitudes, not with the (cancelling) sum. */
  double scale = abs_dot(y, g) + abs_dot(x, gx) + abs_dot(w, gw) + 1;
  double tol = (dt == FLOE_F64 ? 1e-13 : 1e-5) * scale;
  ck_assert_msg(fabs(yg - xgx) <= tol && fabs(yg - wgw) <= tol,
                "%s: <Conv2D(x,w),g> %.17g, <x,BackpropInput(g)> %.17g, <w,BackpropFilter(g)> "
                "%.17g (tolerance %.3g)",
                what, yg, xgx, wgw, tol);
  FloeTensor *all[] = {x, w, g, xs, fs, y, gx, gw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
}

START_TEST(test_adjoint) {
  check_adjoint(&conv_cases[_i], FLOE_F64, 1000 + _i);
  check_adjoint(&conv_cases[_i], FLOE_F32, 1100 + _i);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Pooling gradients. */

static const Case pool_cases[] = {
    /* nchw same  n  h   w   c  kh kw o  sh sw */
    {false, false, 1, 8, 8, 3, 2, 2, 0, 2, 2, 1, 1},
    {false, true, 3, 7, 9, 4, 3, 3, 0, 2, 2, 1, 1},    /* overlapping windows */
    {false, true, 2, 7, 9, 4, 3, 3, 0, 1, 1, 1, 1},
    {false, false, 2, 9, 7, 5, 3, 3, 0, 2, 2, 1, 1},
    {true, true, 3, 7, 9, 4, 3, 3, 0, 2, 2, 1, 1},
    {true, false, 1, 8, 8, 3, 2, 2, 0, 2, 2, 1, 1},
    {true, true, 2, 11, 6, 2, 2, 3, 0, 1, 2, 1, 1},
    {false, true, 2, 11, 6, 2, 2, 3, 0, 3, 1, 1, 1},
    {false, true, 1, 5, 5, 16, 1, 1, 0, 1, 1, 1, 1},   /* 1x1 window */
    {false, true, 1, 3, 4, 2, 5, 5, 0, 1, 1, 1, 1},    /* window larger than the input */
    {true, true, 1, 3, 4, 2, 5, 5, 0, 2, 2, 1, 1},
    {false, false, 1, 9, 9, 3, 2, 2, 0, 3, 3, 1, 1},   /* gaps between windows */
    {false, true, 4, 28, 28, 32, 2, 2, 0, 2, 2, 1, 1}, /* the CNN's pools */
    {false, true, 3, 14, 14, 64, 2, 2, 0, 2, 2, 1, 1},
    {false, true, 1, 6, 5, 300, 3, 3, 0, 2, 2, 1, 1},  /* more channels than one unit */
    {false, true, 1, 6, 5, 37, 3, 3, 0, 1, 1, 1, 1},   /* one image: split over channels */
};
#define NUM_POOL_CASES (int)(sizeof pool_cases / sizeof pool_cases[0])

START_TEST(test_pool_grad) {
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
  for (size_t d = 0; d < 4; d++) {
    check_grad(&pool_cases[_i], MAXPOOL_GRAD, dts[d], 1200 + _i, 0);
    check_grad(&pool_cases[_i], AVGPOOL_GRAD, dts[d], 1300 + _i, 0);
  }
}
END_TEST

/* _FusedMaxPoolGradRelu(x, y, dy) equals ReluGrad(MaxPoolGrad(x, y, dy), x): the fused
 * kernel against the two ops it replaces, on inputs around 0 (many windows' maxima are
 * <= 0, so the mask matters), every window shape, layout and float dtype. */
START_TEST(test_fused_maxpool_grad_relu) {
  const Case *c = &pool_cases[_i];
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  for (size_t d = 0; d < 3; d++) {
    int64_t xd[4];
    dims_of(c->nchw, c->n, c->c, c->h, c->w, xd);
    FloeTensor *x = harness_random(dts[d], 4, xd, 1700 + _i, -1, 0.5);
    AttrArgs pa = {MAXPOOL, c}, ga = {MAXPOOL_GRAD, c};
    FloeTensor *y, *grad, *fused, *masked;
    FloeStatus *st = floe_status_new();
    ck_assert_msg(harness_run_op("MaxPool", NULL, &x, 1, NULL, 0, set_attrs, &pa, &y, 1, st) ==
                      FLOE_OK, "%s", floe_status_message(st));
    FloeTensor *dy = harness_random(dts[d], 4, floe_tensor_shape(y).dims, 1800 + _i, -1, 1);
    FloeTensor *in3[3] = {x, y, dy};
    ck_assert(harness_run_op("MaxPoolGrad", NULL, in3, 3, NULL, 0, set_attrs, &ga, &grad, 1,
                             st) == FLOE_OK);
    ck_assert_msg(harness_run_op("_FusedMaxPoolGradRelu", NULL, in3, 3, NULL, 0, set_attrs, &ga,
                                 &fused, 1, st) == FLOE_OK, "%s", floe_status_message(st));
    FloeTensor *in2[2] = {grad, x};
    ck_assert(harness_run_op("ReluGrad", NULL, in2, 2, NULL, 0, NULL, NULL, &masked, 1, st) ==
              FLOE_OK);
    char what[96];
    snprintf(what, sizeof what, "_FusedMaxPoolGradRelu case %d %s", _i, floe_dtype_name(dts[d]));
    harness_assert_close(fused, masked, 0, 0, what);
    FloeTensor *all[] = {x, y, dy, grad, fused, masked};
    for (size_t i = 0; i < 6; i++) floe_tensor_release(all[i]);
    floe_status_free(st);
  }
}
END_TEST

START_TEST(test_maxpool_grad_ties) {
  /* Integer-valued inputs from few values: most windows hold equal maxima. */
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_BF16};
  for (size_t d = 0; d < 3; d++) {
    check_grad(&pool_cases[_i], MAXPOOL_GRAD, dts[d], 1400 + _i, 2);
    check_grad(&pool_cases[_i], MAXPOOL_GRAD, dts[d], 1500 + _i, 3);
  }
}
END_TEST

START_TEST(test_pool_grad_empty) {
  const Case empty[] = {
      {false, true, 0, 5, 5, 3, 2, 2, 0, 2, 2, 1, 1},
      {true, true, 2, 5, 5, 0, 2, 2, 0, 2, 2, 1, 1},
      {false, true, 2, 0, 5, 3, 1, 1, 0, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
    for (Op op = MAXPOOL_GRAD; op <= AVGPOOL_GRAD; op++) {
      check_grad(&empty[i], op, FLOE_F32, 1600 + i, 0);
      check_grad(&empty[i], op, FLOE_F64, 1600 + i, 0);
    }
}
END_TEST

/* Central differences of L(x) = <Pool(x), g> through the forward op's own session, against
 * PoolGrad(x, g) (f64; random inputs have no ties within the step). */
static void check_pool_fd(const Case *c, Op grad_op, uint64_t seed) {
  Op fwd = grad_op == MAXPOOL_GRAD ? MAXPOOL : AVGPOOL;
  Out r = out_of(c, true);
  int64_t xd[4], yd[4];
  dims_of(c->nchw, c->n, c->c, c->h, c->w, xd);
  dims_of(c->nchw, c->n, c->c, r.oh, r.ow, yd);
  FloeTensor *x = harness_random(FLOE_F64, 4, xd, seed, -1, 1);
  FloeTensor *g = harness_random(FLOE_F64, 4, yd, seed + 1, -1, 1);
  char what[256];
  case_str(c, grad_op, FLOE_F64, what, sizeof what);

  FloeGraph *gr = floe_graph_new();
  FloeOutput px = floe_placeholder(gr, "x", FLOE_F64, floe_shape_make(4, xd));
  FloeNodeBuilder *b = floe_node_begin(gr, op_name[fwd], "pool");
  floe_node_add_input(b, px);
  AttrArgs a = {fwd, c};
  set_attrs(b, &a);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(gr, NULL);

  FloeTensor *y = run(fwd, c, &x, 1, what), *grad;
  if (grad_op == MAXPOOL_GRAD) {
    FloeTensor *ins[3] = {x, y, g};
    grad = run(grad_op, c, ins, 3, what);
  } else {
    FloeTensor *ins[2] = {sizes_tensor(xd), g};
    grad = run(grad_op, c, ins, 2, what);
    floe_tensor_release(ins[0]);
  }
  double *xv = floe_tensor_data(x);
  const double eps = 1e-6;
  for (int64_t i = 0; i < floe_tensor_num_elements(x); i++) {
    double keep = xv[i], l[2];
    for (int k = 0; k < 2; k++) {
      xv[i] = keep + (k ? -eps : eps);
      FloeFeed feed = {"x", x};
      const char *fetch = "pool";
      FloeTensor *out = NULL;
      ck_assert_msg(floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &out, st) == FLOE_OK,
                    "%s: %s", what, floe_status_message(st));
      l[k] = dot(out, g);
      floe_tensor_release(out);
    }
    xv[i] = keep;
    double fd = (l[0] - l[1]) / (2 * eps), got = harness_get(grad, i);
    ck_assert_msg(fabs(fd - got) <= 1e-6, "%s: element %lld: gradient %.10g, finite difference %.10g",
                  what, (long long)i, got, fd);
  }
  floe_tensor_release(grad);
  floe_tensor_release(y);
  floe_tensor_release(x);
  floe_tensor_release(g);
  floe_session_free(s);
  floe_graph_free(gr);
  floe_status_free(st);
}

START_TEST(test_pool_grad_fd) {
  const Case *c = &pool_cases[_i];
  if (c->n * c->h * c->w * c->c > 800) return; /* one forward run per element and sign */
  check_pool_fd(c, MAXPOOL_GRAD, 1700 + _i);
  check_pool_fd(c, AVGPOOL_GRAD, 1800 + _i);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* One node through many shapes (more than its primitive cache holds), and a filter that
 * changes between steps, in place and by tensor: the kept reordered filter must follow. */

/* A session running op on placeholders "in0".. of unknown shape: only the kernel sees the
 * shapes. dts gives the inputs' dtypes. */
static FloeSession *unknown_shape_session(Op op, const Case *c, const FloeDType *dts, int n) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, op_name[op], "op");
  for (int i = 0; i < n; i++) {
    char name[8];
    snprintf(name, sizeof name, "in%d", i);
    floe_node_add_input(b, floe_placeholder(g, name, dts[i], floe_shape_unknown()));
  }
  AttrArgs a = {op, c};
  set_attrs(b, &a);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  floe_status_free(st);
  return s;
}

START_TEST(test_backprop_many_shapes) {
  /* One node per op and format; 11 shapes, twice over, against a cache of 8. */
  for (int nchw = 0; nchw < 2; nchw++) {
    Case c = {nchw, true, 0, 0, 0, 3, 3, 3, 4, 1, 1, 1, 1};
    const FloeDType dti[3] = {FLOE_I32, FLOE_F32, FLOE_F32}, dtf[3] = {FLOE_F32, FLOE_I32, FLOE_F32};
    FloeSession *si = unknown_shape_session(BP_INPUT, &c, dti, 3);
    FloeSession *sf = unknown_shape_session(BP_FILTER, &c, dtf, 3);
    FloeStatus *st = floe_status_new();
    for (int round = 0; round < 2; round++)
      for (int i = 0; i < 11; i++) {
        c.n = 1 + i % 3;
        c.h = 4 + i;
        c.w = 9 - i % 4;
        Out r = out_of(&c, false);
        int64_t xd[4], yd[4], fd[4] = {c.kh, c.kw, c.c, c.o};
        dims_of(c.nchw, c.n, c.c, c.h, c.w, xd);
        dims_of(c.nchw, c.n, c.o, r.oh, r.ow, yd);
        FloeTensor *x = harness_random(FLOE_F32, 4, xd, 30 + i, -1, 1);
        FloeTensor *f = harness_random(FLOE_F32, 4, fd, 60 + i, -1, 1);
        FloeTensor *dy = harness_random(FLOE_F32, 4, yd, 90 + i, -1, 1);
        FloeTensor *xs = sizes_tensor(xd), *fs = sizes_tensor(fd), *gx = NULL, *gf = NULL;
        const char *fetch = "op";
        FloeFeed fi[3] = {{"in0", xs}, {"in1", f}, {"in2", dy}};
        FloeFeed ff[3] = {{"in0", x}, {"in1", fs}, {"in2", dy}};
        ck_assert_msg(floe_session_run(si, fi, 3, &fetch, 1, NULL, 0, &gx, st) == FLOE_OK, "%s",
                      floe_status_message(st));
        ck_assert_msg(floe_session_run(sf, ff, 3, &fetch, 1, NULL, 0, &gf, st) == FLOE_OK, "%s",
                      floe_status_message(st));
        double *xv = harness_values(x), *fv = harness_values(f), *dyv = harness_values(dy);
        double *ri = ref_backprop_input(&c, dyv, fv), *rf = ref_backprop_filter(&c, xv, dyv);
        FloeTensor *wi = harness_from_doubles(FLOE_F32, 4, xd, ri);
        FloeTensor *wf = harness_from_doubles(FLOE_F32, 4, fd, rf);
        char what[64];
        snprintf(what, sizeof what, "%s shape %d round %d", nchw ? "NCHW" : "NHWC", i, round);
        harness_assert_close(gx, wi, 2e-4, 2e-4, what);
        harness_assert_close(gf, wf, 2e-4, 2e-4, what);
        free(xv);
        free(fv);
        free(dyv);
        free(ri);
        free(rf);
        FloeTensor *all[] = {x, f, dy, xs, fs, gx, gf, wi, wf};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) floe_tensor_release(all[k]);
      }
    floe_status_free(st);
    floe_session_free(si);
    floe_session_free(sf);
  }
}
END_TEST

START_TEST(test_backprop_input_filter_changes) {
  const Case c = {false, true, 2, 9, 7, 8, 3, 3, 16, 1, 1, 1, 1};
  Out r = out_of(&c, false);
  int64_t xd[4], yd[4], fd[4] = {3, 3, 8, 16};
  dims_of(false, c.n, c.c, c.h, c.w, xd);
  dims_of(false, c.n, c.o, r.oh, r.ow, yd);
  FloeGraph *g = floe_graph_new();
  int64_t four = 4;
  FloeOutput sz = floe_placeholder(g, "sizes", FLOE_I32, floe_shape_make(1, &four));
  FloeOutput f = floe_placeholder(g, "f", FLOE_F32, floe_shape_make(4, fd));
  FloeOutput dy = floe_placeholder(g, "dy", FLOE_F32, floe_shape_make(4, yd));
  FloeNodeBuilder *b = floe_node_begin(g, "Conv2DBackpropInput", "bp");
  floe_node_add_input(b, sz);
  floe_node_add_input(b, f);
  floe_node_add_input(b, dy);
  AttrArgs a = {BP_INPUT, &c};
  set_attrs(b, &a);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  FloeTensor *sizes = sizes_tensor(xd), *dyt = harness_random(FLOE_F32, 4, yd, 1, -1, 1);
  FloeTensor *f1 = harness_random(FLOE_F32, 4, fd, 2, -1, 1);
  FloeTensor *f2 = harness_random(FLOE_F32, 4, fd, 3, -1, 1);
  double *dyv = harness_values(dyt);
  /* Same, new tensor, back, changed in place, then a filter that changes every step for
   * longer than the kernel keeps storing it, then a steady one again. */
  for (int step = 0; step < 40; step++) {
    FloeTensor *ft = step == 2 ? f2 : f1;
    if (step == 4 || (step >= 6 && step < 30)) ((float *)floe_tensor_data(f1))[17 + step] += 0.5f;
    FloeFeed feeds[3] = {{"sizes", sizes}, {"f", ft}, {"dy", dyt}};
    const char *fetch = "bp";
    FloeTensor *out = NULL;
    ck_assert_msg(floe_session_run(s, feeds, 3, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    double *fv = harness_values(ft), *ref = ref_backprop_input(&c, dyv, fv);
    FloeTensor *want = harness_from_doubles(FLOE_F32, 4, xd, ref);
    char what[32];
    snprintf(what, sizeof what, "step %d", step);
    harness_assert_close(out, want, 2e-4, 2e-4, what);
    free(fv);
    free(ref);
    floe_tensor_release(out);
    floe_tensor_release(want);
  }
  free(dyv);
  floe_tensor_release(sizes);
  floe_tensor_release(dyt);
  floe_tensor_release(f1);
  floe_tensor_release(f2);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Bad inputs: INVALID_ARGUMENT with a message naming the shapes. */

static void expect_invalid(Op op, const Case *c, FloeTensor **ins, int n_ins, const char *n1,
                           const char *n2, const char *n3) {
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  AttrArgs a = {op, c};
  floe_code rc = harness_run_op(op_name[op], NULL, ins, n_ins, NULL, 0, set_attrs, &a, &out, 1, st);
  const char *msg = floe_status_message(st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: code %s (%s), want INVALID_ARGUMENT",
                op_name[op], floe_code_name(rc), msg);
  ck_assert_ptr_null(out);
  const char *need[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (need[i]) ck_assert_msg(strstr(msg, need[i]), "%s: \"%s\" lacks \"%s\"", op_name[op], msg, need[i]);
  floe_status_free(st);
  for (int i = 0; i < n_ins; i++) floe_tensor_release(ins[i]);
}

static FloeTensor *rnd(int rank, const int64_t *d) { return harness_random(FLOE_F32, rank, d, 9, -1, 1); }

START_TEST(test_backprop_errors) {
  const Case c = {false, true, 1, 6, 6, 3, 3, 3, 4, 1, 1, 1, 1};
  int64_t xd[4] = {1, 6, 6, 3}, fd[4] = {3, 3, 3, 4}, yd[4] = {1, 6, 6, 4};
  int64_t bad_y[4] = {1, 5, 6, 4}, bad_f[4] = {3, 3, 2, 4}, r3[3] = {6, 6, 4}, three = 3;
  int32_t three_sizes[3] = {6, 6, 3}, neg_sizes[4] = {1, -6, 6, 3};
  int64_t four = 4;
  /* out_backprop not the forward output of input_sizes */
  expect_invalid(BP_INPUT, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(4, fd), rnd(4, bad_y)}, 3,
                 "[1,5,6,4]", "[1,6,6,4]", "input_sizes [1,6,6,3]");
  expect_invalid(BP_INPUT, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(4, fd), rnd(3, r3)}, 3,
                 "out_backprop", "[6,6,4]", NULL);
  expect_invalid(BP_INPUT, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(3, r3), rnd(4, yd)}, 3,
                 "filter", "[6,6,4]", NULL);
  expect_invalid(BP_INPUT, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(4, bad_f), rnd(4, yd)}, 3,
                 "[3,3,2,4]", "[1,6,6,3]", NULL);
  expect_invalid(BP_INPUT, &c,
                 (FloeTensor *[]){harness_i32(1, &three, three_sizes), rnd(4, fd), rnd(4, yd)}, 3,
                 "input_sizes", "[3]", NULL);
  expect_invalid(BP_INPUT, &c,
                 (FloeTensor *[]){harness_i32(1, &four, neg_sizes), rnd(4, fd), rnd(4, yd)}, 3,
                 "input_sizes", "[1,-6,6,3]", NULL);
  /* Conv2DBackpropFilter */
  expect_invalid(BP_FILTER, &c, (FloeTensor *[]){rnd(4, xd), sizes_tensor(fd), rnd(4, bad_y)}, 3,
                 "[1,5,6,4]", "[1,6,6,4]", "input [1,6,6,3]");
  expect_invalid(BP_FILTER, &c, (FloeTensor *[]){rnd(3, r3), sizes_tensor(fd), rnd(4, yd)}, 3,
                 "input", "[6,6,4]", NULL);
  expect_invalid(BP_FILTER, &c, (FloeTensor *[]){rnd(4, xd), sizes_tensor(bad_f), rnd(4, yd)}, 3,
                 "filter_sizes [3,3,2,4]", "[1,6,6,3]", NULL);
  expect_invalid(BP_FILTER, &c, (FloeTensor *[]){rnd(4, xd), sizes_tensor(fd), rnd(3, r3)}, 3,
                 "out_backprop", "[6,6,4]", NULL);
  /* VALID window larger than the input */
  const Case small = {false, false, 1, 2, 2, 3, 5, 5, 4, 1, 1, 1, 1};
  int64_t sd[4] = {1, 2, 2, 3}, sf[4] = {5, 5, 3, 4}, sy[4] = {1, 1, 1, 4};
  expect_invalid(BP_INPUT, &small, (FloeTensor *[]){sizes_tensor(sd), rnd(4, sf), rnd(4, sy)}, 3,
                 "VALID", "[1,2,2,3]", NULL);
  expect_invalid(BP_FILTER, &small, (FloeTensor *[]){rnd(4, sd), sizes_tensor(sf), rnd(4, sy)}, 3,
                 "VALID", "[1,2,2,3]", NULL);
  /* NCHW names its own order */
  const Case cn = {true, false, 1, 6, 6, 3, 3, 3, 4, 2, 2, 1, 1};
  int64_t nx[4] = {1, 3, 6, 6}, ny_bad[4] = {1, 4, 3, 3};
  expect_invalid(BP_INPUT, &cn, (FloeTensor *[]){sizes_tensor(nx), rnd(4, fd), rnd(4, ny_bad)}, 3,
                 "[1,4,3,3]", "[1,4,2,2]", "NCHW");
}
END_TEST

START_TEST(test_pool_grad_errors) {
  const Case c = {false, true, 1, 6, 6, 3, 2, 2, 0, 2, 2, 1, 1};
  int64_t xd[4] = {1, 6, 6, 3}, yd[4] = {1, 3, 3, 3}, bad[4] = {1, 3, 2, 3}, r3[3] = {6, 6, 3};
  int64_t three = 3;
  int32_t three_sizes[3] = {6, 6, 3};
  expect_invalid(MAXPOOL_GRAD, &c, (FloeTensor *[]){rnd(4, xd), rnd(4, bad), rnd(4, yd)}, 3,
                 "orig_output [1,3,2,3]", "[1,3,3,3]", "orig_input [1,6,6,3]");
  expect_invalid(MAXPOOL_GRAD, &c, (FloeTensor *[]){rnd(4, xd), rnd(4, yd), rnd(4, bad)}, 3,
                 "grad [1,3,2,3]", "[1,3,3,3]", NULL);
  expect_invalid(MAXPOOL_GRAD, &c, (FloeTensor *[]){rnd(3, r3), rnd(4, yd), rnd(4, yd)}, 3,
                 "orig_input", "[6,6,3]", NULL);
  expect_invalid(AVGPOOL_GRAD, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(4, bad)}, 2,
                 "grad [1,3,2,3]", "[1,3,3,3]", "orig_input_shape [1,6,6,3]");
  expect_invalid(AVGPOOL_GRAD, &c, (FloeTensor *[]){sizes_tensor(xd), rnd(3, r3)}, 2, "grad",
                 "[6,6,3]", NULL);
  expect_invalid(AVGPOOL_GRAD, &c, (FloeTensor *[]){harness_i32(1, &three, three_sizes), rnd(4, yd)},
                 2, "orig_input_shape", "[3]", NULL);
}
END_TEST

static Suite *conv_grad_suite(void) {
  Suite *s = suite_create("conv_grad");
  TCase *tc = tcase_create("conv");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_backprop_input_f32, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_backprop_filter_f32, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_backprop_f64, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_backprop_half, 0, NUM_CONV_CASES);
  tcase_add_loop_test(tc, test_adjoint, 0, NUM_CONV_CASES);
  tcase_add_test(tc, test_backprop_empty);
  tcase_add_test(tc, test_backprop_many_shapes);
  tcase_add_test(tc, test_backprop_input_filter_changes);
  tcase_add_test(tc, test_backprop_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("pool");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_pool_grad, 0, NUM_POOL_CASES);
  tcase_add_loop_test(tc, test_fused_maxpool_grad_relu, 0, NUM_POOL_CASES);
  tcase_add_loop_test(tc, test_maxpool_grad_ties, 0, NUM_POOL_CASES);
  tcase_add_loop_test(tc, test_pool_grad_fd, 0, NUM_POOL_CASES);
  tcase_add_test(tc, test_pool_grad_empty);
  tcase_add_test(tc, test_pool_grad_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Two pool threads unless the caller chose: batches and large products are then cut into
   * shards on the pool (uneven ones for the odd batches above), whatever the machine's
   * core count. */
  setenv("FLOE_NUM_THREADS", "2", 0);
  SRunner *sr = srunner_create(conv_grad_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
