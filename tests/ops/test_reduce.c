/* SPDX-License-Identifier: Apache-2.0 */
/* test_reduce.c - Sum, Mean, Max, Min, Prod, ArgMax, ArgMin against plain references. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>

#include "harness.h"

enum { SUM, MEAN, MAX, MIN, PROD };
static const char *const op_names[] = {"Sum", "Mean", "Max", "Min", "Prod"};

static const FloeDType all_dtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                       FLOE_I8,  FLOE_U8,  FLOE_I32, FLOE_I64};

static int is_int(FloeDType dt) {
  return dt == FLOE_I8 || dt == FLOE_U8 || dt == FLOE_I32 || dt == FLOE_I64;
}

static FloeTensor *index_tensor(FloeDType dt, int rank, int n, const int64_t *v) {
  int64_t dims[1] = {n};
  FloeTensor *t = harness_tensor(dt, rank, dims, NULL);
  for (int i = 0; i < n; i++) {
    if (dt == FLOE_I32)
      ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
    else
      ((int64_t *)floe_tensor_data(t))[i] = v[i];
  }
  return t;
}

static double rtol_for(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: return 2e-6;
    case FLOE_F64: return 1e-12;
    case FLOE_F16: return 2e-3;
    case FLOE_BF16: return 1e-2;
    default: return 0;
  }
}

/* Wrap an exact integer result to the width of dt, as the kernels do. */
static double wrap_int(FloeDType dt, int64_t v) {
  switch (dt) {
    case FLOE_I8: return (int8_t)v;
    case FLOE_U8: return (uint8_t)v;
    case FLOE_I32: return (int32_t)v;
    default: return (double)v;
  }
}

/* ------------------------------------------------------------------------------------ */
/* Reference: x [dims], reducing the dims with red[d] set; out holds the kept dims in order. */

static void ref_reduce(int op, FloeDType dt, const double *x, int rank, const int64_t *dims,
                       const int *red, double *out) {
  int64_t on = 1, rn = 1;
  for (int d = 0; d < rank; d++) {
    if (red[d])
      rn *= dims[d];
    else
      on *= dims[d];
  }
  double *acc = malloc((size_t)(on ? on : 1) * sizeof *acc);
  int64_t *iacc = malloc((size_t)(on ? on : 1) * sizeof *iacc);
  for (int64_t o = 0; o < on; o++) {
    acc[o] = op == PROD ? 1 : op == MAX ? -INFINITY : op == MIN ? INFINITY : 0;
    iacc[o] = op == PROD ? 1 : 0;
  }
  int64_t n = harness_count(rank, dims);
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, o = 0, scale = 1;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t i = rest % dims[d];
      rest /= dims[d];
      if (!red[d]) o += i * scale, scale *= dims[d];
    }
    double v = x[e];
    switch (op) {
      case SUM:
      case MEAN:
        acc[o] += v;
        iacc[o] = (int64_t)((uint64_t)iacc[o] + (uint64_t)(int64_t)v);
        break;
      case PROD:
        acc[o] *= v;
        iacc[o] = (int64_t)((uint64_t)iacc[o] * (uint64_t)(int64_t)v);
        break;
      case MAX: acc[o] = (isnan(v) || v > acc[o]) ? v : acc[o]; break;
      case MIN: acc[o] = (isnan(v) || v < acc[o]) ? v : acc[o]; break;
    }
  }
  for (int64_t o = 0; o < on; o++) {
    if (is_int(dt) && op != MAX && op != MIN)
      out[o] = wrap_int(dt, op == MEAN ? iacc[o] / rn : iacc[o]);
    else
      out[o] = op == MEAN ? acc[o] / (double)rn : acc[o];
  }
  free(acc);
  free(iacc);
}

typedef struct ReduceAttrs {
  int keep_dims;
} ReduceAttrs;

static void set_keep_dims(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_bool(b, "keep_dims", ((const ReduceAttrs *)arg)->keep_dims);
}

/* Run op over x with the given axes and compare with the reference. n_axes < 0: a scalar
 * axis (axes[0]). */
static void check_reduce(int op, const FloeTensor *x, const int64_t *axes, int n_axes,
                         FloeDType axis_dt, int keep, double rtol, double atol) {
  FloeDType dt = floe_tensor_dtype(x);
  int rank = floe_tensor_rank(x);
  const int64_t *dims = floe_tensor_dims(x);
  int red[FLOE_MAX_DIMS] = {0};
  int na = n_axes < 0 ? 1 : n_axes;
  for (int i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = 1;
  int64_t odims[FLOE_MAX_DIMS];
  int orank = 0;
  for (int d = 0; d < rank; d++) {
    if (!red[d])
      odims[orank++] = dims[d];
    else if (keep)
      odims[orank++] = 1;
  }
  double *xv = harness_values(x);
  double *want_v = malloc((size_t)(harness_count(orank, odims) + 1) * sizeof *want_v);
  ref_reduce(op, dt, xv, rank, dims, red, want_v);
  FloeTensor *want = harness_from_doubles(dt, orank, odims, want_v);

  FloeTensor *ax = index_tensor(axis_dt, n_axes < 0 ? 0 : 1, na, axes);
  FloeTensor *in[2] = {(FloeTensor *)x, ax}, *out = NULL;
  ReduceAttrs attrs = {keep};
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op_names[op], NULL, in, 2, NULL, 0, set_keep_dims, &attrs, &out,
                                1, st);
  char what[160], sb[128];
  FloeShape xs = floe_tensor_shape(x);
  snprintf(what, sizeof what, "%s %s of %s, %d axes (first %lld), keep_dims %d", op_names[op],
           floe_dtype_name(dt), floe_shape_str(&xs, sb, sizeof sb), n_axes,
           (long long)(na ? axes[0] : 0), keep);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  harness_assert_close(out, want, rtol, atol, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(ax);
  floe_status_free(st);
  free(xv);
  free(want_v);
}

/* Values for op and dtype: small integers for Prod so products stay meaningful. */
static FloeTensor *input_for(int op, FloeDType dt, int rank, const int64_t *dims, uint64_t seed) {
  if (op == PROD) return harness_random(dt, rank, dims, seed, is_int(dt) ? -2 : 0.5, 3);
  if (dt == FLOE_U8) return harness_random(dt, rank, dims, seed, 0, 200);
  return harness_random(dt, rank, dims, seed, is_int(dt) ? -100 : -2, is_int(dt) ? 100 : 2);
}

typedef struct AxisCase {
  int rank;
  int64_t dims[4];
  int n_axes; /* -1: scalar axis */
  int64_t axes[4];
} AxisCase;

static const AxisCase axis_cases[] = {
    {3, {2, 3, 4}, 0, {0}},       {3, {2, 3, 4}, 1, {0}},          {3, {2, 3, 4}, 1, {1}},
    {3, {2, 3, 4}, 1, {2}},       {3, {2, 3, 4}, -1, {-1}},        {3, {2, 3, 4}, 2, {0, 1}},
    {3, {2, 3, 4}, 2, {2, 1}},    {3, {2, 3, 4}, 2, {0, 2}},       {3, {2, 3, 4}, 3, {0, 1, 2}},
    {3, {2, 3, 4}, 2, {-3, -1}},  {4, {3, 1, 4, 5}, 2, {0, 2}},    {4, {3, 1, 4, 5}, 2, {1, 3}},
    {4, {3, 1, 4, 5}, 2, {0, 3}}, {4, {3, 1, 4, 5}, 1, {1}},       {4, {2, 3, 2, 3}, 2, {1, 3}},
    {1, {7}, 1, {0}},             {1, {7}, -1, {0}},               {0, {0}, 0, {0}},
    {2, {1, 1}, 1, {1}},          {2, {5, 1}, 1, {0}},
    {4, {3, 1, 4, 5}, 4, {0, 1, 2, 3}},
};

static void run_axis_cases(int op) {
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
    FloeDType dt = all_dtypes[d];
    for (size_t c = 0; c < sizeof axis_cases / sizeof axis_cases[0]; c++) {
      const AxisCase *ac = &axis_cases[c];
      FloeTensor *x = input_for(op, dt, ac->rank, ac->dims, 100 + c);
      for (int keep = 0; keep < 2; keep++)
        check_reduce(op, x, ac->axes, ac->n_axes, c % 2 ? FLOE_I64 : FLOE_I32, keep,
                     rtol_for(dt), is_int(dt) ? 0 : 1e-6);
      floe_tensor_release(x);
    }
  }
}

START_TEST(test_sum) { run_axis_cases(SUM); }
END_TEST

START_TEST(test_mean) { run_axis_cases(MEAN); }
END_TEST

START_TEST(test_max) { run_axis_cases(MAX); }
END_TEST

START_TEST(test_min) { run_axis_cases(MIN); }
END_TEST

START_TEST(test_prod) { run_axis_cases(PROD); }
END_TEST

/* Max and Min propagate NaN; Sum of Inf stays Inf. */
START_TEST(test_nan_inf) {
  int64_t dims[2] = {2, 3};
  double v[6] = {1, NAN, 3, -INFINITY, 2, INFINITY};
  FloeTensor *x = harness_from_doubles(FLOE_F32, 2, dims, v);
  int64_t ax[1] = {1};
  for (int op = SUM; op <= PROD; op++) check_reduce(op, x, ax, 1, FLOE_I32, 0, 1e-6, 0);
  floe_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Accuracy and the multi-threaded paths. */

static void check_big(int op, FloeDType dt, int rank, const int64_t *dims, const int64_t *axes,
                      int n_axes, double lo, double hi, double rtol) {
  FloeTensor *x = harness_random(dt, rank, dims, 7 + (uint64_t)op, lo, hi);
  check_reduce(op, x, axes, n_axes, FLOE_I32, 0, rtol, rtol);
  floe_tensor_release(x);
}

START_TEST(test_sum_accuracy) {
  /* 1e6 positive values: a naive f32 running sum is off by ~1e-3 relative. */
  int64_t n[1] = {1000000}, ax[1] = {0};
  check_big(SUM, FLOE_F32, 1, n, ax, 1, 0, 1, 1e-6);
  check_big(MEAN, FLOE_F32, 1, n, ax, 1, 0, 1, 1e-6);
  /* A large offset: every partial sum is much bigger than the increments. */
  check_big(SUM, FLOE_F32, 1, n, ax, 1, 1000, 1001, 1e-6);
  check_big(SUM, FLOE_F64, 1, n, ax, 1, -1, 1, 1e-9);
  /* Halves: a running f16 sum would stop growing at 2048 (its ulp reaches 1 there). */
  check_big(MEAN, FLOE_F16, 1, n, ax, 1, 0, 1, 2e-3);
  check_big(MEAN, FLOE_BF16, 1, n, ax, 1, 0, 1, 1e-2);
  /* Cancellation: values in [-1, 1) sum to ~1e3 out of 1e6 terms. */
  FloeTensor *x = harness_random(FLOE_F32, 1, n, 99, -1, 1);
  double *xv = harness_values(x), exact = 0;
  for (int64_t i = 0; i < n[0]; i++) exact += xv[i];
  float want_v = (float)exact;
  FloeTensor *want = harness_f32(0, NULL, &want_v), *axt = index_tensor(FLOE_I32, 1, 1, ax);
  FloeTensor *in[2] = {x, axt}, *out = NULL;
  ReduceAttrs attrs = {0};
  ck_assert_int_eq(harness_run_op("Sum", NULL, in, 2, NULL, 0, set_keep_dims, &attrs, &out, 1,
                                  NULL),
                   FLOE_OK);
  harness_assert_close(out, want, 1e-6, 1e-3, "Sum of 1e6 values in [-1, 1)");
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(axt);
  floe_tensor_release(x);
  free(xv);
}
END_TEST

START_TEST(test_big_shapes) {
  int64_t sq[2] = {1000, 1000}, wide[2] = {4, 250000}, tall[2] = {250000, 4}, thin[2] = {3000, 7};
  int64_t cube[3] = {64, 300, 16}, a0[1] = {0}, a1[1] = {1}, a02[2] = {0, 2}, a01[2] = {0, 1};
  for (int op = SUM; op <= MIN; op++) {
    check_big(op, FLOE_F32, 2, sq, a0, 1, -1, 1, 1e-5);
    check_big(op, FLOE_F32, 2, sq, a1, 1, -1, 1, 1e-5);
    check_big(op, FLOE_F32, 2, wide, a1, 1, -1, 1, 1e-5); /* few long rows: R is split */
    check_big(op, FLOE_F32, 2, tall, a0, 1, -1, 1, 1e-5); /* few long columns: R is split */
    check_big(op, FLOE_F32, 2, thin, a0, 1, -1, 1, 1e-5); /* narrow columns, one thread */
    check_big(op, FLOE_F32, 3, cube, a02, 2, -1, 1, 1e-5); /* gathered first */
    check_big(op, FLOE_F32, 3, cube, a01, 2, -1, 1, 1e-5);
  }
  check_big(PROD, FLOE_F32, 2, wide, a1, 1, 0.9999, 1.0001, 1e-5);
  check_big(PROD, FLOE_F64, 2, tall, a0, 1, 0.9999, 1.0001, 1e-10);
  check_big(PROD, FLOE_F32, 2, thin, a0, 1, 0.999, 1.001, 1e-5);
  check_big(MAX, FLOE_F16, 2, thin, a0, 1, -1, 1, 0);
  check_big(SUM, FLOE_I8, 2, thin, a0, 1, -128, 127, 0);
  check_big(SUM, FLOE_F64, 3, cube, a02, 2, -1, 1, 1e-10);
  check_big(SUM, FLOE_I32, 2, wide, a1, 1, -1000, 1000, 0);
  check_big(MEAN, FLOE_I64, 2, tall, a0, 1, -1000, 1000, 0);
  check_big(MAX, FLOE_I8, 2, sq, a0, 1, -128, 127, 0);
  check_big(MIN, FLOE_U8, 2, wide, a1, 1, 0, 255, 0);
  check_big(SUM, FLOE_BF16, 3, cube, a02, 2, -1, 1, 1e-2);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Empty inputs and errors. */

static floe_code run_reduce(const char *op, FloeTensor *x, FloeTensor *axes, int keep,
                            FloeTensor **out, FloeStatus *st) {
  FloeTensor *in[2] = {x, axes};
  ReduceAttrs attrs = {keep};
  return harness_run_op(op, NULL, in, 2, NULL, 0, set_keep_dims, &attrs, out, 1, st);
}

static void expect_error(const char *op, FloeTensor *x, FloeTensor *axes, const char *needle) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code rc = run_reduce(op, x, axes, 0, &out, st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: expected INVALID_ARGUMENT, got %s (%s)", op,
                floe_code_name(rc), floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), needle) != NULL, "%s: message '%s' lacks '%s'",
                op, floe_status_message(st), needle);
  floe_status_free(st);
}

START_TEST(test_empty) {
  int64_t d03[2] = {0, 3}, d20[2] = {2, 0}, a0[1] = {0}, a1[1] = {1};
  FloeTensor *x = harness_tensor(FLOE_F32, 2, d03, NULL);
  FloeTensor *ax0 = index_tensor(FLOE_I32, 1, 1, a0), *ax1 = index_tensor(FLOE_I32, 1, 1, a1);
  int64_t d3[1] = {3};
  double zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1}, nans[3] = {NAN, NAN, NAN};
  const struct {
    const char *op;
    const double *want;
  } fills[] = {{"Sum", zeros}, {"Prod", ones}, {"Mean", nans}};
  for (size_t i = 0; i < 3; i++) {
    FloeTensor *out = NULL, *want = harness_from_doubles(FLOE_F32, 1, d3, fills[i].want);
    ck_assert_int_eq(run_reduce(fills[i].op, x, ax0, 0, &out, NULL), FLOE_OK);
    harness_assert_close(out, want, 0, 0, fills[i].op);
    floe_tensor_release(out);
    floe_tensor_release(want);
  }
  expect_error("Max", x, ax0, "[0,3]");
  expect_error("Min", x, ax0, "[0,3]");
  /* Reducing a non-empty dim of an empty tensor gives an empty result, even for Max. */
  const char *ops[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  for (size_t i = 0; i < 5; i++) {
    FloeTensor *out = NULL;
    ck_assert_int_eq(run_reduce(ops[i], x, ax1, 0, &out, NULL), FLOE_OK);
    ck_assert_int_eq(floe_tensor_rank(out), 1);
    ck_assert_int_eq(floe_tensor_dim(out, 0), 0);
    floe_tensor_release(out);
  }
  /* keep_dims over an empty dim: [2,0] -> [2,1] of zeros. */
  FloeTensor *y = harness_tensor(FLOE_F64, 2, d20, NULL), *out = NULL;
  ck_assert_int_eq(run_reduce("Sum", y, ax1, 1, &out, NULL), FLOE_OK);
  int64_t d21[2] = {2, 1};
  FloeTensor *want = harness_from_doubles(FLOE_F64, 2, d21, zeros);
  harness_assert_close(out, want, 0, 0, "Sum keep_dims of [2,0]");
  floe_tensor_release(out);
  floe_tensor_release(want);
  /* An integer mean of nothing has no NaN to return. */
  FloeTensor *xi = harness_tensor(FLOE_I32, 2, d03, NULL);
  expect_error("Mean", xi, ax0, "[0,3]");
  floe_tensor_release(xi);
  floe_tensor_release(y);
  floe_tensor_release(x);
  floe_tensor_release(ax0);
  floe_tensor_release(ax1);
}
END_TEST

START_TEST(test_errors) {
  int64_t dims[3] = {2, 3, 4};
  FloeTensor *x = harness_random(FLOE_F32, 3, dims, 1, -1, 1);
  int64_t bad[1] = {3}, neg[1] = {-4}, dup[2] = {1, -2};
  FloeTensor *a = index_tensor(FLOE_I32, 1, 1, bad), *b = index_tensor(FLOE_I64, 0, 1, neg);
  FloeTensor *c = index_tensor(FLOE_I32, 1, 2, dup);
  for (int op = SUM; op <= PROD; op++) {
    expect_error(op_names[op], x, a, "[2,3,4]");
    expect_error(op_names[op], x, b, "[2,3,4]");
    expect_error(op_names[op], x, c, "[2,3,4]");
  }
  /* Axis of rank 2. */
  int64_t d11[2] = {1, 1};
  int32_t one = 1;
  FloeTensor *m = harness_i32(2, d11, &one);
  expect_error("Sum", x, m, "[1,1]");
  floe_tensor_release(m);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(c);
  floe_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* ArgMax / ArgMin. */

typedef struct ArgAttrs {
  FloeDType output_type;
} ArgAttrs;

static void set_output_type(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "output_type", ((const ArgAttrs *)arg)->output_type);
}

/* Reference: first index of the max (min) along axis; NaN counts as the best. */
static void ref_arg(int is_max, const double *x, int rank, const int64_t *dims, int axis,
                    double *out) {
  int64_t O = 1, R = dims[axis], I = 1;
  for (int d = 0; d < axis; d++) O *= dims[d];
  for (int d = axis + 1; d < rank; d++) I *= dims[d];
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < I; i++) {
      int64_t best = 0;
      for (int64_t r = 1; r < R; r++) {
        double v = x[(o * R + r) * I + i], b = x[(o * R + best) * I + i];
        if (isnan(b)) break;
        if (isnan(v) || (is_max ? v > b : v < b)) best = r;
      }
      out[o * I + i] = (double)best;
    }
}

static void check_arg(int is_max, const FloeTensor *x, int64_t axis, FloeDType axis_dt,
                      FloeDType out_dt) {
  int rank = floe_tensor_rank(x);
  const int64_t *dims = floe_tensor_dims(x);
  int a = (int)(axis < 0 ? axis + rank : axis);
  int64_t odims[FLOE_MAX_DIMS];
  for (int d = 0, k = 0; d < rank; d++)
    if (d != a) odims[k++] = dims[d];
  double *xv = harness_values(x);
  double *want_v = malloc((size_t)(harness_count(rank - 1, odims) + 1) * sizeof *want_v);
  ref_arg(is_max, xv, rank, dims, a, want_v);
  FloeTensor *want = harness_from_doubles(out_dt, rank - 1, odims, want_v);
  FloeTensor *axt = index_tensor(axis_dt, 0, 1, &axis);
  FloeTensor *in[2] = {(FloeTensor *)x, axt}, *out = NULL;
  ArgAttrs attrs = {out_dt};
  FloeStatus *st = floe_status_new();
  const char *op = is_max ? "ArgMax" : "ArgMin";
  floe_code rc = harness_run_op(op, NULL, in, 2, NULL, 0, set_output_type, &attrs, &out, 1, st);
  char what[160], sb[128];
  FloeShape xs = floe_tensor_shape(x);
  snprintf(what, sizeof what, "%s %s of %s along %lld -> %s", op,
           floe_dtype_name(floe_tensor_dtype(x)), floe_shape_str(&xs, sb, sizeof sb),
           (long long)axis, floe_dtype_name(out_dt));
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  harness_assert_close(out, want, 0, 0, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(axt);
  floe_status_free(st);
  free(xv);
  free(want_v);
}

START_TEST(test_argmax_argmin) {
  const struct {
    int rank;
    int64_t dims[3];
    int64_t axis;
  } cases[] = {{1, {5}, 0},       {2, {3, 4}, 0},  {2, {3, 4}, 1},  {2, {3, 4}, -1},
               {3, {2, 3, 4}, 1}, {3, {2, 1, 4}, 1}, {3, {2, 3, 4}, -3}, {1, {1}, 0}};
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      /* Few distinct values so ties are common. */
      FloeTensor *x = harness_random(all_dtypes[d], cases[c].rank, cases[c].dims, 40 + c, 0, 4);
      for (int is_max = 0; is_max < 2; is_max++)
        check_arg(is_max, x, cases[c].axis, c % 2 ? FLOE_I64 : FLOE_I32,
                  c % 3 ? FLOE_I64 : FLOE_I32);
      floe_tensor_release(x);
    }
  /* Ties resolve to the smallest index; the first NaN wins. */
  int64_t d6[1] = {6};
  double ties[6] = {1, 3, 3, 0, 0, 2}, nan_v[6] = {1, NAN, 5, NAN, -1, 7};
  FloeTensor *t = harness_from_doubles(FLOE_F32, 1, d6, ties), *n = harness_from_doubles(FLOE_F64, 1, d6, nan_v);
  for (int is_max = 0; is_max < 2; is_max++) {
    check_arg(is_max, t, 0, FLOE_I32, FLOE_I64);
    check_arg(is_max, n, 0, FLOE_I32, FLOE_I32);
  }
  floe_tensor_release(t);
  floe_tensor_release(n);
}
END_TEST

START_TEST(test_arg_big) {
  /* Long rows and long columns (split across threads), with planted ties. */
  int64_t wide[2] = {3, 400000}, tall[2] = {400000, 3}, sq[2] = {700, 700};
  FloeTensor *w = harness_random(FLOE_F32, 2, wide, 5, -1, 1);
  FloeTensor *t = harness_random(FLOE_F32, 2, tall, 6, -1, 1);
  FloeTensor *s = harness_random(FLOE_I32, 2, sq, 8, -50, 50);
  float *wd = floe_tensor_data(w), *td = floe_tensor_data(t);
  wd[123457] = wd[399999] = 5; /* row 0: the earlier 5 wins */
  wd[400000 + 7] = wd[400000 + 300001] = -5;
  td[3 * 250001 + 1] = td[3 * 399999 + 1] = 5;
  td[3 * 2 + 2] = td[3 * 390000 + 2] = -5;
  for (int is_max = 0; is_max < 2; is_max++) {
    check_arg(is_max, w, 1, FLOE_I32, FLOE_I64);
    check_arg(is_max, t, 0, FLOE_I64, FLOE_I32);
    check_arg(is_max, s, 0, FLOE_I32, FLOE_I64);
    check_arg(is_max, s, 1, FLOE_I32, FLOE_I64);
  }
  floe_tensor_release(w);
  floe_tensor_release(t);
  floe_tensor_release(s);
}
END_TEST

static void expect_arg_error(FloeTensor *x, FloeTensor *axis, const char *needle) {
  FloeStatus *st = floe_status_new();
  FloeTensor *in[2] = {x, axis}, *out = NULL;
  ArgAttrs attrs = {FLOE_I64};
  floe_code rc =
      harness_run_op("ArgMax", NULL, in, 2, NULL, 0, set_output_type, &attrs, &out, 1, st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "ArgMax: expected INVALID_ARGUMENT, got %s (%s)",
                floe_code_name(rc), floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), needle) != NULL, "message '%s' lacks '%s'",
                floe_status_message(st), needle);
  floe_status_free(st);
}

START_TEST(test_arg_empty_and_errors) {
  int64_t d03[2] = {0, 3}, d34[2] = {3, 4}, zero = 0, one = 1, two = 2, m3 = -3;
  FloeTensor *e = harness_tensor(FLOE_F32, 2, d03, NULL);
  FloeTensor *a0 = index_tensor(FLOE_I32, 0, 1, &zero), *a1 = index_tensor(FLOE_I64, 0, 1, &one);
  expect_arg_error(e, a0, "[0,3]"); /* argmax over an empty dim */
  FloeTensor *in[2] = {e, a1}, *out = NULL;
  ArgAttrs attrs = {FLOE_I32};
  ck_assert_int_eq(harness_run_op("ArgMin", NULL, in, 2, NULL, 0, set_output_type, &attrs, &out,
                                  1, NULL),
                   FLOE_OK);
  ck_assert_int_eq(floe_tensor_num_elements(out), 0);
  floe_tensor_release(out);
  FloeTensor *x = harness_random(FLOE_F32, 2, d34, 3, -1, 1);
  FloeTensor *a2 = index_tensor(FLOE_I32, 0, 1, &two), *am3 = index_tensor(FLOE_I32, 0, 1, &m3);
  FloeTensor *vec = index_tensor(FLOE_I32, 1, 1, &one);
  expect_arg_error(x, a2, "[3,4]");
  expect_arg_error(x, am3, "[3,4]");
  expect_arg_error(x, vec, "[1]");
  floe_tensor_release(e);
  floe_tensor_release(x);
  floe_tensor_release(a0);
  floe_tensor_release(a1);
  floe_tensor_release(a2);
  floe_tensor_release(am3);
  floe_tensor_release(vec);
}
END_TEST

static Suite *reduce_suite(void) {
  Suite *s = suite_create("reduce");
  TCase *tc = tcase_create("values");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_sum);
  tcase_add_test(tc, test_mean);
  tcase_add_test(tc, test_max);
  tcase_add_test(tc, test_min);
  tcase_add_test(tc, test_prod);
  tcase_add_test(tc, test_nan_inf);
  suite_add_tcase(s, tc);
  tc = tcase_create("large");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_sum_accuracy);
  tcase_add_test(tc, test_big_shapes);
  suite_add_tcase(s, tc);
  tc = tcase_create("empty_and_errors");
  tcase_add_test(tc, test_empty);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("arg");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_argmax_argmin);
  tcase_add_test(tc, test_arg_big);
  tcase_add_test(tc, test_arg_empty_and_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(reduce_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
