/* SPDX-License-Identifier: Apache-2.0 */
/* test_softmax.c - Softmax, LogSoftmax, the softmax cross-entropy losses and OneHot against
 * plain references computed in f64. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>

#include "harness.h"

static const FloeDType float_dtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};

static double rtol_for(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: return 1e-5;
    case FLOE_F64: return 1e-12;
    case FLOE_F16: return 3e-3;
    default: return 2e-2;
  }
}

static double atol_for(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: return 1e-6;
    case FLOE_F64: return 1e-12;
    case FLOE_F16: return 1e-3;
    default: return 1e-2;
  }
}

static void expect_failure(floe_code rc, FloeStatus *st, const char *what, const char *needle) {
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: expected INVALID_ARGUMENT, got %s (%s)", what,
                floe_code_name(rc), floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), needle) != NULL, "%s: message '%s' lacks '%s'",
                what, floe_status_message(st), needle);
}

/* ------------------------------------------------------------------------------------ */
/* Softmax and LogSoftmax. */

/* Reference: softmax (or log-softmax) of x [dims] along axis. */
static void ref_softmax(int log_sm, const double *x, int rank, const int64_t *dims, int axis,
                        double *y) {
  int64_t O = 1, R = dims[axis], I = 1;
  for (int d = 0; d < axis; d++) O *= dims[d];
  for (int d = axis + 1; d < rank; d++) I *= dims[d];
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < I; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t r = 0; r < R; r++) {
        double v = x[(o * R + r) * I + i];
        m = (isnan(v) || v > m) ? v : m;
      }
      for (int64_t r = 0; r < R; r++) s += exp(x[(o * R + r) * I + i] - m);
      for (int64_t r = 0; r < R; r++) {
        double v = x[(o * R + r) * I + i] - m;
        y[(o * R + r) * I + i] = log_sm ? v - log(s) : exp(v) / s;
      }
    }
}

static void set_axis(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_int(b, "axis", *(const int64_t *)arg);
}

static void check_softmax(int log_sm, const FloeTensor *x, int64_t axis, double rtol,
                          double atol) {
  FloeDType dt = floe_tensor_dtype(x);
  int rank = floe_tensor_rank(x);
  const int64_t *dims = floe_tensor_dims(x);
  double *xv = harness_values(x), *yv = malloc((size_t)(floe_tensor_num_elements(x) + 1) * sizeof *yv);
  ref_softmax(log_sm, xv, rank, dims, (int)(axis < 0 ? axis + rank : axis), yv);
  FloeTensor *want = harness_from_doubles(dt, rank, dims, yv), *out = NULL, *in[1] = {(FloeTensor *)x};
  FloeStatus *st = floe_status_new();
  const char *op = log_sm ? "LogSoftmax" : "Softmax";
  floe_code rc = harness_run_op(op, NULL, in, 1, NULL, 0, set_axis, &axis, &out, 1, st);
  char what[160], sb[128];
  FloeShape xs = floe_tensor_shape(x);
  snprintf(what, sizeof what, "%s %s of %s along %lld", op, floe_dtype_name(dt),
           floe_shape_str(&xs, sb, sizeof sb), (long long)axis);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  harness_assert_close(out, want, rtol, atol, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_status_free(st);
  free(xv);
  free(yv);
}

START_TEST(test_softmax_shapes) {
  const struct {
    int rank;
    int64_t dims[3];
    int64_t axis;
  } cases[] = {
      {1, {5}, -1},        {3, {2, 3, 4}, -1},   {3, {2, 3, 4}, 0},  {3, {2, 3, 4}, 1},
      {3, {2, 3, 4}, -2},  {2, {3, 1}, 1},       {2, {1, 1}, 0},     {2, {4, 37}, 1},
      {3, {2, 60, 3}, 1},  {3, {2, 5, 300}, 1},  {2, {3, 0}, 1},     {2, {0, 4}, -1},
  };
  for (size_t d = 0; d < sizeof float_dtypes / sizeof float_dtypes[0]; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      FloeTensor *x = harness_random(float_dtypes[d], cases[c].rank, cases[c].dims, 10 + c, -4, 4);
      for (int log_sm = 0; log_sm < 2; log_sm++)
        check_softmax(log_sm, x, cases[c].axis, rtol_for(float_dtypes[d]),
                      atol_for(float_dtypes[d]));
      floe_tensor_release(x);
    }
}
END_TEST

/* Logits far from zero: a softmax without the max subtraction overflows or underflows. */
START_TEST(test_softmax_large_logits) {
  int64_t d34[2] = {3, 4};
  double v[12] = {1000, 1001, 1002, 1003, -1000, -1001, -1002, -1003, 80, 0, -80, -200};
  int64_t d24[2] = {2, 4};
  double w[8] = {1e30, 0, -1e30, 5, -INFINITY, 0, 1, -INFINITY};
  for (size_t d = 0; d < sizeof float_dtypes / sizeof float_dtypes[0]; d++) {
    FloeDType dt = float_dtypes[d];
    FloeTensor *x = harness_from_doubles(dt, 2, d34, v);
    for (int log_sm = 0; log_sm < 2; log_sm++) {
      check_softmax(log_sm, x, -1, rtol_for(dt), atol_for(dt));
      check_softmax(log_sm, x, 0, rtol_for(dt), atol_for(dt));
    }
    floe_tensor_release(x);
    if (dt == FLOE_F16) continue; /* 1e30 does not fit */
    x = harness_from_doubles(dt, 2, d24, w);
    for (int log_sm = 0; log_sm < 2; log_sm++)
      check_softmax(log_sm, x, 1, rtol_for(dt), atol_for(dt));
    floe_tensor_release(x);
  }
  /* Exact expectations: softmax [1000, 1000] = [0.5, 0.5]; log-softmax of [0, -200] stays
   * finite (-200 - log1p(e^-200)), never -inf. */
  int64_t d2[1] = {2};
  float same[2] = {1000, 1000}, spread[2] = {0, -200}, half[2] = {0.5f, 0.5f};
  float logs[2] = {0, -200};
  FloeTensor *a = harness_f32(1, d2, same), *b = harness_f32(1, d2, spread);
  FloeTensor *ha = harness_f32(1, d2, half), *lb = harness_f32(1, d2, logs), *out = NULL;
  int64_t axis = -1;
  ck_assert_int_eq(harness_run_op("Softmax", NULL, &a, 1, NULL, 0, set_axis, &axis, &out, 1, NULL),
                   FLOE_OK);
  harness_assert_close(out, ha, 0, 1e-7, "Softmax [1000, 1000]");
  floe_tensor_release(out);
  ck_assert_int_eq(harness_run_op("LogSoftmax", NULL, &b, 1, NULL, 0, set_axis, &axis, &out, 1,
                                  NULL),
                   FLOE_OK);
  harness_assert_close(out, lb, 1e-6, 1e-6, "LogSoftmax [0, -200]");
  floe_tensor_release(out);
  /* A NaN poisons its own row only. */
  float nan_rows[6] = {1, NAN, 2, 1, 2, 3};
  int64_t d23[2] = {2, 3};
  FloeTensor *n = harness_f32(2, d23, nan_rows);
  ck_assert_int_eq(harness_run_op("Softmax", NULL, &n, 1, NULL, 0, set_axis, &axis, &out, 1, NULL),
                   FLOE_OK);
  for (int i = 0; i < 3; i++) ck_assert(isnan(harness_get(out, i)));
  for (int i = 3; i < 6; i++) ck_assert(!isnan(harness_get(out, i)));
  floe_tensor_release(out);
  floe_tensor_release(n);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(ha);
  floe_tensor_release(lb);
}
END_TEST

START_TEST(test_softmax_big) {
  int64_t rows[2] = {512, 1000}, mid[3] = {64, 1000, 8}, wide[3] = {4, 50, 3000};
  FloeTensor *x = harness_random(FLOE_F32, 2, rows, 1, -20, 20);
  FloeTensor *y = harness_random(FLOE_F32, 3, mid, 2, -20, 20);
  FloeTensor *z = harness_random(FLOE_F64, 3, wide, 3, -20, 20);
  FloeTensor *h = harness_random(FLOE_BF16, 2, rows, 4, -20, 20);
  for (int log_sm = 0; log_sm < 2; log_sm++) {
    check_softmax(log_sm, x, 1, 1e-5, 1e-6);
    check_softmax(log_sm, x, 0, 1e-5, 1e-6);
    check_softmax(log_sm, y, 1, 1e-5, 1e-6);
    check_softmax(log_sm, z, 1, 1e-12, 1e-12);
    check_softmax(log_sm, h, 1, 2e-2, 1e-2);
  }
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_tensor_release(z);
  floe_tensor_release(h);
}
END_TEST

START_TEST(test_softmax_errors) {
  int64_t d34[2] = {3, 4}, axis = 2, neg = -3;
  FloeTensor *x = harness_random(FLOE_F32, 2, d34, 1, -1, 1), *out = NULL;
  float s = 1;
  FloeTensor *scalar = harness_f32(0, NULL, &s);
  const char *ops[2] = {"Softmax", "LogSoftmax"};
  for (int i = 0; i < 2; i++) {
    FloeStatus *st = floe_status_new();
    expect_failure(harness_run_op(ops[i], NULL, &x, 1, NULL, 0, set_axis, &axis, &out, 1, st), st,
                   ops[i], "[3,4]");
    expect_failure(harness_run_op(ops[i], NULL, &x, 1, NULL, 0, set_axis, &neg, &out, 1, st), st,
                   ops[i], "[3,4]");
    expect_failure(harness_run_op(ops[i], NULL, &scalar, 1, NULL, 0, NULL, NULL, &out, 1, st), st,
                   ops[i], "scalar");
    floe_status_free(st);
  }
  floe_tensor_release(x);
  floe_tensor_release(scalar);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Cross-entropy losses. labels NULL: sparse, classes in cls. */

static void ref_xent(const double *x, const double *lab, const int64_t *cls, int64_t B, int64_t C,
                     double *loss, double *bp) {
  int64_t d[2] = {B, C};
  double *ls = malloc((size_t)(B * C + 1) * sizeof *ls);
  ref_softmax(1, x, 2, d, 1, ls);
  for (int64_t b = 0; b < B; b++) {
    loss[b] = 0;
    for (int64_t c = 0; c < C; c++) {
      double l = lab ? lab[b * C + c] : (double)(c == cls[b]);
      if (l != 0) loss[b] -= l * ls[b * C + c];
      bp[b * C + c] = exp(ls[b * C + c]) - l;
    }
  }
  free(ls);
}

static void check_xent(const FloeTensor *x, const FloeTensor *labels, double rtol, double atol) {
  FloeDType dt = floe_tensor_dtype(x);
  int sparse = floe_tensor_rank(labels) == 1;
  int64_t B = floe_tensor_dim(x, 0), C = floe_tensor_dim(x, 1);
  double *xv = harness_values(x), *lv = harness_values(labels);
  int64_t *cls = malloc((size_t)(B + 1) * sizeof *cls);
  for (int64_t b = 0; sparse && b < B; b++) cls[b] = (int64_t)lv[b];
  double *loss = malloc((size_t)(B + 1) * sizeof *loss);
  double *bp = malloc((size_t)(B * C + 1) * sizeof *bp);
  ref_xent(xv, sparse ? NULL : lv, cls, B, C, loss, bp);
  int64_t d[2] = {B, C};
  FloeTensor *want_loss = harness_from_doubles(dt, 1, d, loss), *want_bp = harness_from_doubles(dt, 2, d, bp);
  FloeTensor *in[2] = {(FloeTensor *)x, (FloeTensor *)labels}, *out[2] = {NULL, NULL};
  const char *op = sparse ? "SparseSoftmaxCrossEntropyWithLogits" : "SoftmaxCrossEntropyWithLogits";
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, NULL, in, 2, NULL, 0, NULL, NULL, out, 2, st);
  char what[160];
  snprintf(what, sizeof what, "%s %s [%lld,%lld] labels %s", op, floe_dtype_name(dt),
           (long long)B, (long long)C, floe_dtype_name(floe_tensor_dtype(labels)));
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  harness_assert_close(out[0], want_loss, rtol, atol, what);
  harness_assert_close(out[1], want_bp, rtol, atol, what);
  for (int i = 0; i < 2; i++) floe_tensor_release(out[i]);
  floe_tensor_release(want_loss);
  floe_tensor_release(want_bp);
  floe_status_free(st);
  free(xv);
  free(lv);
  free(cls);
  free(loss);
  free(bp);
}

/* Rows of random non-negative weights normalised to sum 1. */
static FloeTensor *prob_labels(FloeDType dt, int64_t B, int64_t C, uint64_t seed) {
  int64_t d[2] = {B, C};
  FloeTensor *r = harness_random(FLOE_F64, 2, d, seed, 0, 1);
  double *v = harness_values(r);
  for (int64_t b = 0; b < B; b++) {
    double s = 0;
    for (int64_t c = 0; c < C; c++) s += v[b * C + c];
    for (int64_t c = 0; c < C; c++) v[b * C + c] /= s;
  }
  FloeTensor *t = harness_from_doubles(dt, 2, d, v);
  floe_tensor_release(r);
  free(v);
  return t;
}

static FloeTensor *class_labels(FloeDType dt, int64_t B, int64_t C, uint64_t seed) {
  int64_t d[1] = {B};
  return harness_random(dt, 1, d, seed, 0, (double)C);
}

START_TEST(test_xent) {
  const int64_t shapes[][2] = {{4, 5}, {1, 1}, {3, 1}, {7, 33}, {2, 300}, {0, 5}};
  for (size_t d = 0; d < sizeof float_dtypes / sizeof float_dtypes[0]; d++) {
    FloeDType dt = float_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      FloeTensor *x = harness_random(dt, 2, shapes[s], 20 + s, -3, 3);
      FloeTensor *pl = prob_labels(dt, shapes[s][0], shapes[s][1], 30 + s);
      FloeTensor *ci = class_labels(FLOE_I32, shapes[s][0], shapes[s][1], 40 + s);
      FloeTensor *cl = class_labels(FLOE_I64, shapes[s][0], shapes[s][1], 50 + s);
      check_xent(x, pl, rtol_for(dt), atol_for(dt));
      check_xent(x, ci, rtol_for(dt), atol_for(dt));
      check_xent(x, cl, rtol_for(dt), atol_for(dt));
      floe_tensor_release(x);
      floe_tensor_release(pl);
      floe_tensor_release(ci);
      floe_tensor_release(cl);
    }
    /* No classes: loss 0 for dense labels; every sparse label is out of range. */
    int64_t d30[2] = {3, 0};
    FloeTensor *x = harness_tensor(dt, 2, d30, NULL), *l = harness_tensor(dt, 2, d30, NULL);
    check_xent(x, l, 0, 0);
    floe_tensor_release(l);
    int64_t zeros[3] = {0, 0, 0};
    l = harness_i64(1, d30, zeros);
    FloeTensor *in[2] = {x, l}, *out[2];
    FloeStatus *st = floe_status_new();
    expect_failure(harness_run_op("SparseSoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0,
                                  NULL, NULL, out, 2, st),
                   st, "sparse labels with no classes", "outside [0, 0)");
    floe_status_free(st);
    floe_tensor_release(x);
    floe_tensor_release(l);
  }
}
END_TEST

START_TEST(test_xent_large_logits_and_big) {
  int64_t d[2] = {2, 3};
  double v[6] = {1000, 0, -1000, -500, -501, -499};
  double lab[6] = {0, 1, 0, 0.25, 0.25, 0.5};
  FloeTensor *x = harness_from_doubles(FLOE_F32, 2, d, v), *l = harness_from_doubles(FLOE_F32, 2, d, lab);
  int64_t cls_v[2] = {1, 2};
  FloeTensor *c = harness_i64(1, d, cls_v);
  check_xent(x, l, 1e-5, 1e-5);
  check_xent(x, c, 1e-5, 1e-5);
  floe_tensor_release(x);
  floe_tensor_release(l);
  floe_tensor_release(c);
  /* Many rows: the thread pool splits the batch. */
  int64_t big[2] = {512, 1000};
  x = harness_random(FLOE_F32, 2, big, 60, -10, 10);
  l = prob_labels(FLOE_F32, 512, 1000, 61);
  c = class_labels(FLOE_I32, 512, 1000, 62);
  check_xent(x, l, 1e-5, 1e-5);
  check_xent(x, c, 1e-5, 1e-5);
  floe_tensor_release(x);
  floe_tensor_release(l);
  floe_tensor_release(c);
}
END_TEST

START_TEST(test_xent_errors) {
  int64_t d45[2] = {4, 5}, d46[2] = {4, 6}, d5[1] = {5}, d3[1] = {3}, d4[1] = {4};
  FloeTensor *x = harness_random(FLOE_F32, 2, d45, 1, -1, 1);
  FloeTensor *l46 = harness_random(FLOE_F32, 2, d46, 2, 0, 1);
  FloeTensor *x5 = harness_random(FLOE_F32, 1, d5, 3, -1, 1);
  FloeTensor *out[2];
  FloeStatus *st = floe_status_new();
  FloeTensor *in[2] = {x, l46};
  expect_failure(harness_run_op("SoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0, NULL,
                                NULL, out, 2, st),
                 st, "dense labels [4,6]", "[4,6]");
  in[0] = x5;
  in[1] = x5;
  expect_failure(harness_run_op("SoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0, NULL,
                                NULL, out, 2, st),
                 st, "1-D features", "[5]");
  /* Sparse: labels outside [0, classes), named by batch row and value. */
  int32_t bad_hi[4] = {0, 1, 5, 2}, bad_lo[4] = {0, -1, 1, 2}, short_l[3] = {0, 1, 2};
  FloeTensor *hi = harness_i32(1, d4, bad_hi), *lo = harness_i32(1, d4, bad_lo);
  FloeTensor *sh = harness_i32(1, d3, short_l);
  in[0] = x;
  in[1] = hi;
  expect_failure(harness_run_op("SparseSoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0,
                                NULL, NULL, out, 2, st),
                 st, "label 5", "label 5 of batch row 2");
  in[1] = lo;
  expect_failure(harness_run_op("SparseSoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0,
                                NULL, NULL, out, 2, st),
                 st, "label -1", "label -1 of batch row 1");
  in[1] = sh;
  expect_failure(harness_run_op("SparseSoftmaxCrossEntropyWithLogits", NULL, in, 2, NULL, 0,
                                NULL, NULL, out, 2, st),
                 st, "labels [3]", "[3]");
  floe_status_free(st);
  floe_tensor_release(x);
  floe_tensor_release(l46);
  floe_tensor_release(x5);
  floe_tensor_release(hi);
  floe_tensor_release(lo);
  floe_tensor_release(sh);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* OneHot. */

static FloeTensor *scalar_of(FloeDType dt, double v) {
  return harness_from_doubles(dt, 0, NULL, &v);
}

static void ref_onehot(const double *idx, int rank, const int64_t *dims, int64_t depth, int axis,
                       double on, double off, double *out) {
  int ax = axis < 0 ? rank : axis;
  int64_t O = 1, I = 1;
  for (int d = 0; d < rank; d++) {
    if (d < ax)
      O *= dims[d];
    else
      I *= dims[d];
  }
  for (int64_t o = 0; o < O; o++)
    for (int64_t k = 0; k < depth; k++)
      for (int64_t i = 0; i < I; i++)
        out[(o * depth + k) * I + i] = idx[o * I + i] == (double)k ? on : off;
}

static floe_code run_onehot(FloeTensor *idx, int32_t depth, FloeTensor *on, FloeTensor *off,
                            int64_t axis, FloeTensor **out, FloeStatus *st) {
  FloeTensor *dt = harness_i32(0, NULL, &depth);
  FloeTensor *in[4] = {idx, dt, on, off};
  floe_code rc = harness_run_op("OneHot", NULL, in, 4, NULL, 0, set_axis, &axis, out, 1, st);
  floe_tensor_release(dt);
  return rc;
}

static void check_onehot(FloeTensor *idx, int32_t depth, FloeDType dt, int64_t axis) {
  int rank = floe_tensor_rank(idx);
  const int64_t *dims = floe_tensor_dims(idx);
  int ax = axis < 0 ? rank : (int)axis;
  int64_t odims[FLOE_MAX_DIMS];
  for (int d = 0, k = 0; d <= rank; d++) odims[d] = d == ax ? depth : dims[k++];
  double on = dt == FLOE_BOOL ? 1 : 3, off = dt == FLOE_BOOL ? 0 : -1;
  double *iv = harness_values(idx);
  double *want_v = malloc((size_t)(harness_count(rank + 1, odims) + 1) * sizeof *want_v);
  ref_onehot(iv, rank, dims, depth, (int)axis, on, off, want_v);
  FloeTensor *want = harness_from_doubles(dt, rank + 1, odims, want_v);
  FloeTensor *ont = scalar_of(dt, on), *offt = scalar_of(dt, off), *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = run_onehot(idx, depth, ont, offt, axis, &out, st);
  char what[160], sb[128];
  FloeShape is = floe_tensor_shape(idx);
  snprintf(what, sizeof what, "OneHot %s indices %s depth %d -> %s axis %lld",
           floe_dtype_name(floe_tensor_dtype(idx)), floe_shape_str(&is, sb, sizeof sb), depth,
           floe_dtype_name(dt), (long long)axis);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  harness_assert_close(out, want, 0, 0, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(ont);
  floe_tensor_release(offt);
  floe_status_free(st);
  free(iv);
  free(want_v);
}

START_TEST(test_onehot) {
  int64_t d3[1] = {3}, d23[2] = {2, 3}, d0[1] = {0};
  int64_t v3[3] = {0, 2, -1};
  int32_t v23[6] = {1, 0, 3, 7, 2, -5}; /* 7 and -5 are out of range: all-off */
  uint8_t u23[6] = {1, 0, 3, 200, 2, 0};
  FloeTensor *a = harness_i64(1, d3, v3), *b = harness_i32(2, d23, v23);
  FloeTensor *c = harness_tensor(FLOE_U8, 2, d23, u23), *e = harness_tensor(FLOE_I64, 1, d0, NULL);
  int64_t five = 5;
  FloeTensor *s = harness_i64(0, NULL, &five);
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                           FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    check_onehot(a, 3, dts[d], -1);
    check_onehot(a, 3, dts[d], 0);
    check_onehot(a, 3, dts[d], 1);
    for (int64_t axis = -1; axis <= 2; axis++) {
      check_onehot(b, 4, dts[d], axis);
      check_onehot(c, 4, dts[d], axis);
    }
    check_onehot(e, 4, dts[d], -1); /* empty indices */
    check_onehot(b, 0, dts[d], -1); /* depth 0 */
    check_onehot(b, 0, dts[d], 0);
    check_onehot(s, 7, dts[d], -1); /* scalar index */
    check_onehot(s, 3, dts[d], 0);  /* scalar index out of range */
  }
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(c);
  floe_tensor_release(e);
  floe_tensor_release(s);
}
END_TEST

START_TEST(test_onehot_big) {
  int64_t n[1] = {200000}, d2[2] = {2, 60000};
  FloeTensor *a = harness_random(FLOE_I64, 1, n, 1, -1, 11);
  FloeTensor *b = harness_random(FLOE_I32, 2, d2, 2, -1, 9);
  check_onehot(a, 10, FLOE_F32, -1);
  check_onehot(a, 10, FLOE_I64, 0);
  check_onehot(b, 8, FLOE_F16, 1);
  check_onehot(b, 8, FLOE_U8, 0);
  floe_tensor_release(a);
  floe_tensor_release(b);
}
END_TEST

START_TEST(test_onehot_errors) {
  int64_t d3[1] = {3}, d2[1] = {2};
  int64_t v3[3] = {0, 1, 2};
  float two[2] = {1, 0};
  FloeTensor *idx = harness_i64(1, d3, v3), *on = scalar_of(FLOE_F32, 1);
  FloeTensor *off = scalar_of(FLOE_F32, 0), *vec = harness_f32(1, d2, two), *out = NULL;
  FloeStatus *st = floe_status_new();
  expect_failure(run_onehot(idx, -1, on, off, -1, &out, st), st, "depth -1", "-1");
  expect_failure(run_onehot(idx, 3, on, off, 3, &out, st), st, "axis 3", "[3]");
  expect_failure(run_onehot(idx, 3, on, off, -2, &out, st), st, "axis -2", "[3]");
  expect_failure(run_onehot(idx, 3, vec, off, -1, &out, st), st, "on_value [2]", "[2]");
  floe_status_free(st);
  floe_tensor_release(idx);
  floe_tensor_release(on);
  floe_tensor_release(off);
  floe_tensor_release(vec);
}
END_TEST

static Suite *softmax_suite(void) {
  Suite *s = suite_create("softmax");
  TCase *tc = tcase_create("softmax");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_softmax_shapes);
  tcase_add_test(tc, test_softmax_large_logits);
  tcase_add_test(tc, test_softmax_big);
  tcase_add_test(tc, test_softmax_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("xent");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_xent);
  tcase_add_test(tc, test_xent_large_logits_and_big);
  tcase_add_test(tc, test_xent_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("onehot");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_onehot);
  tcase_add_test(tc, test_onehot_big);
  tcase_add_test(tc, test_onehot_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(softmax_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
