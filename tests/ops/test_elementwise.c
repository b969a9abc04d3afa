/* SPDX-License-Identifier: Apache-2.0 */
/* test_elementwise.c - the elementwise kernels (arithmetic, math, activations, comparisons,
 * logic, Select, Cast) against plain double-precision references written here, over
 * broadcasting shapes, empty and size-1 dims, every dtype family and bad inputs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ------------------------------------------------------------------------------------ */
/* Reference helpers. */

typedef struct Shape {
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
} Shape;

static int64_t shape_size(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dims[i];
  return n;
}

/* NumPy broadcast of n shapes; 0 on success. */
static int ref_broadcast(int n, const Shape *in, Shape *out) {
  out->rank = 0;
  for (int k = 0; k < n; k++)
    if (in[k].rank > out->rank) out->rank = in[k].rank;
  for (int d = 0; d < out->rank; d++) {
    int64_t size = 1;
    for (int k = 0; k < n; k++) {
      int i = d - (out->rank - in[k].rank);
      if (i < 0 || in[k].dims[i] == 1) continue;
      if (size != 1 && size != in[k].dims[i]) return -1;
      size = in[k].dims[i];
    }
    out->dims[d] = size;
  }
  return 0;
}

/* Flat index into `in` of output element `flat` (in broadcasts to out). */
static int64_t ref_index(const Shape *in, const Shape *out, int64_t flat) {
  int64_t idx[FLOE_MAX_DIMS];
  for (int d = out->rank - 1; d >= 0; d--) {
    idx[d] = flat % out->dims[d];
    flat /= out->dims[d];
  }
  int64_t off = 0;
  for (int d = 0; d < in->rank; d++) {
    int64_t i = in->dims[d] == 1 ? 0 : idx[d + out->rank - in->rank];
    off = off * in->dims[d] + i;
  }
  return off;
}

static int is_float_dt(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Integer results wrap to the dtype's width (the kernels' documented overflow behaviour). */
static double wrap_int(double v, FloeDType dt) {
  int bits = dt == FLOE_I8 || dt == FLOE_U8 ? 8 : dt == FLOE_I32 ? 32 : 64;
  if (bits == 64) return v;
  uint64_t m = (uint64_t)(int64_t)v & ((1ull << bits) - 1);
  if (dt == FLOE_U8) return (double)m;
  if (m >> (bits - 1)) return (double)((int64_t)m - (int64_t)(1ull << bits));
  return (double)m;
}

/* A tensor of dtype dt holding vals (converted as harness_random does). */
static FloeTensor *make_tensor(FloeDType dt, const Shape *s, const double *vals) {
  FloeTensor *t = harness_tensor(dt, s->rank, s->dims, NULL);
  void *d = floe_tensor_data(t);
  for (int64_t i = 0; i < shape_size(s); i++) {
    double v = vals[i];
    /* Integers: saturate to int64 first (the double -> int conversion must be in range),
     * then narrow with wrapping. */
    int64_t iv = v != v ? 0
                 : v >= 9223372036854775807.0 ? INT64_MAX
                 : v <= -9223372036854775808.0 ? INT64_MIN
                                              : (int64_t)v;
    switch (dt) {
      case FLOE_F32: ((float *)d)[i] = (float)v; break;
      case FLOE_F64: ((double *)d)[i] = v; break;
      case FLOE_F16: ((uint16_t *)d)[i] = floe_f32_to_f16((float)v); break;
      case FLOE_BF16: ((uint16_t *)d)[i] = floe_f32_to_bf16((float)v); break;
      case FLOE_I8: ((int8_t *)d)[i] = (int8_t)iv; break;
      case FLOE_U8: ((uint8_t *)d)[i] = (uint8_t)iv; break;
      case FLOE_I32: ((int32_t *)d)[i] = (int32_t)iv; break;
      case FLOE_I64: ((int64_t *)d)[i] = iv; break;
      case FLOE_BOOL: ((uint8_t *)d)[i] = v != 0; break;
      default: ck_abort_msg("make_tensor: bad dtype");
    }
  }
  return t;
}

/* Uniform values in [lo, hi) of dtype dt (harness_random), floored to integers when
 * `integral` is set so that float comparisons also meet equal pairs. */
static FloeTensor *random_tensor(FloeDType dt, const Shape *s, uint64_t seed, double lo,
                                 double hi, int integral) {
  if (!integral || dt == FLOE_BOOL) return harness_random(dt, s->rank, s->dims, seed, lo, hi);
  FloeTensor *r = harness_random(FLOE_F64, s->rank, s->dims, seed, lo, hi);
  double *v = floe_tensor_data(r);
  for (int64_t i = 0; i < shape_size(s); i++) v[i] = floor(v[i]);
  FloeTensor *t = make_tensor(dt, s, v);
  floe_tensor_release(r);
  return t;
}

static void tolerances(FloeDType dt, double *rtol, double *atol) {
  switch (dt) {
    case FLOE_F32: *rtol = 2e-5, *atol = 1e-6; break;
    case FLOE_F64: *rtol = 1e-12, *atol = 1e-12; break;
    case FLOE_F16: *rtol = 2e-3, *atol = 1e-4; break;
    case FLOE_BF16: *rtol = 1.6e-2, *atol = 1e-3; break;
    default: *rtol = 0, *atol = 0; break;
  }
}

/* harness_assert_close runs one ck_assert per element (a pipe write each in forked mode,
 * slow for 70K-element cases): scan here and let it report only when something differs. */
static void assert_close(const FloeTensor *got, const FloeTensor *want, double rtol, double atol,
                         const char *what) {
  int ok = got && floe_tensor_dtype(got) == floe_tensor_dtype(want) &&
           floe_tensor_rank(got) == floe_tensor_rank(want);
  for (int d = 0; ok && d < floe_tensor_rank(want); d++)
    ok = floe_tensor_dim(got, d) == floe_tensor_dim(want, d);
  for (int64_t i = 0; ok && i < floe_tensor_num_elements(want); i++) {
    double g = harness_get(got, i), w = harness_get(want, i);
    ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= atol + rtol * fabs(w);
  }
  if (!ok) harness_assert_close(got, want, rtol, atol, what);
}

static floe_code run_op(const char *op, FloeTensor *const *in, int n, harness_attrs_fn attrs,
                        void *arg, FloeTensor **out, char *msg, size_t msg_len) {
  FloeStatus *st = floe_status_new();
  *out = NULL;
  floe_code rc = harness_run_op(op, NULL, in, n, NULL, 0, attrs, arg, out, 1, st);
  if (msg) snprintf(msg, msg_len, "%s", floe_status_message(st));
  floe_status_free(st);
  return rc;
}

/* Runs op and returns its output, failing the test on error. */
static FloeTensor *run_ok(const char *op, FloeTensor *const *in, int n, harness_attrs_fn attrs,
                          void *arg) {
  char msg[512];
  FloeTensor *out;
  floe_code rc = run_op(op, in, n, attrs, arg, &out, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_OK, "%s failed: %s", op, msg);
  return out;
}

static const FloeDType numeric_dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                        FLOE_I8,  FLOE_U8,  FLOE_I32, FLOE_I64};
#define NUM_NUMERIC (int)(sizeof numeric_dts / sizeof numeric_dts[0])

/* ------------------------------------------------------------------------------------ */
/* Binary ops. */

typedef struct BinCase {
  Shape a, b;
} BinCase;

static const BinCase bin_cases[] = {
    {{2, {2, 3}}, {2, {2, 3}}},                   /* same shape */
    {{2, {2, 3}}, {1, {3}}},                      /* row broadcast */
    {{2, {2, 3}}, {0, {0}}},                      /* scalar right */
    {{0, {0}}, {2, {4, 5}}},                      /* scalar left */
    {{0, {0}}, {0, {0}}},                         /* two scalars */
    {{2, {3, 1}}, {2, {1, 4}}},                   /* outer product */
    {{2, {4, 1}}, {2, {4, 5}}},                   /* column broadcast */
    {{3, {2, 1, 4}}, {2, {3, 1}}},                /* mixed */
    {{1, {1}}, {1, {1}}},                         /* size-1 */
    {{2, {1, 1}}, {0, {0}}},                      /* size-1 dims vs scalar */
    {{1, {1}}, {2, {2, 3}}},                      /* size-1 vector as scalar */
    {{2, {0, 3}}, {1, {3}}},                      /* empty */
    {{2, {0, 3}}, {0, {0}}},                      /* empty vs scalar */
    {{2, {2, 0}}, {2, {1, 0}}},                   /* empty, broadcast */
    {{8, {2, 1, 2, 1, 2, 1, 2, 1}}, {8, {1, 2, 1, 2, 1, 2, 1, 2}}}, /* rank 8 */
    {{4, {2, 1, 3, 1}}, {4, {1, 2, 1, 2}}},
    {{3, {40, 33, 50}}, {2, {33, 1}}},            /* 66000 elements: threads */
    {{2, {300, 257}}, {1, {257}}},                /* large row broadcast */
    {{1, {70001}}, {0, {0}}},                     /* large scalar */
    {{1, {70001}}, {1, {70001}}},                 /* large same shape */
    /* A short run repeated along the next dim (the blocked layout's per-channel operands):
     * the kernel tiles it. Right, left, and large with a remainder and thread ranges that
     * start inside a segment. */
    {{5, {2, 3, 7, 5, 16}}, {5, {1, 3, 1, 1, 16}}},
    {{4, {1, 3, 1, 16}}, {4, {2, 3, 9, 16}}},
    {{4, {3, 5, 700, 8}}, {4, {1, 5, 1, 8}}},
    /* runs of 12: thread ranges (4096 elements) also start and end inside a run */
    {{4, {2, 3, 600, 12}}, {4, {1, 3, 1, 12}}},
    {{4, {1, 2, 1, 12}}, {4, {2, 2, 500, 12}}},
};
#define NUM_BIN_CASES (int)(sizeof bin_cases / sizeof bin_cases[0])

static double ipow_ref(double x, double y, FloeDType dt) {
  double r = 1;
  for (int i = 0; i < (int)y; i++) r = wrap_int(r * x, dt);
  return r;
}

static double ref_binary(const char *op, double x, double y, FloeDType dt) {
  int fl = is_float_dt(dt);
  if (!strcmp(op, "Add")) return fl ? x + y : wrap_int(x + y, dt);
  if (!strcmp(op, "Sub")) return fl ? x - y : wrap_int(x - y, dt);
  if (!strcmp(op, "Mul")) return fl ? x * y : wrap_int(x * y, dt);
  if (!strcmp(op, "Div")) return fl ? x / y : wrap_int((double)((int64_t)x / (int64_t)y), dt);
  if (!strcmp(op, "Pow")) return fl ? pow(x, y) : ipow_ref(x, y, dt);
  if (!strcmp(op, "Maximum")) return x > y ? x : y;
  if (!strcmp(op, "Minimum")) return x < y ? x : y;
  if (!strcmp(op, "Equal")) return x == y;
  if (!strcmp(op, "NotEqual")) return x != y;
  if (!strcmp(op, "Less")) return x < y;
  if (!strcmp(op, "LessEqual")) return x <= y;
  if (!strcmp(op, "Greater")) return x > y;
  if (!strcmp(op, "GreaterEqual")) return x >= y;
  if (!strcmp(op, "LogicalAnd")) return x != 0 && y != 0;
  if (!strcmp(op, "LogicalOr")) return x != 0 || y != 0;
  ck_abort_msg("no reference for %s", op);
  return 0;
}

/* Input ranges per op and dtype: keep Div away from 0 and Pow in a sane domain. */
static void bin_ranges(const char *op, FloeDType dt, double *xlo, double *xhi, double *ylo,
                       double *yhi) {
  int fl = is_float_dt(dt), u = dt == FLOE_U8;
  *xlo = u ? 0 : -20, *xhi = 20, *ylo = u ? 0 : -20, *yhi = 20;
  if (!strcmp(op, "Div")) *ylo = 1, *yhi = 7; /* negative x exercises truncation */
  if (!strcmp(op, "Pow")) {
    *xlo = fl ? 0.1 : (u ? 0 : -4), *xhi = 4;
    *ylo = fl ? -2.5 : 0, *yhi = fl ? 2.5 : 6;
  }
  if (!strcmp(op, "Equal") || !strcmp(op, "NotEqual")) /* few values: equal pairs happen */
    *xlo = u ? 0 : -2, *xhi = 3, *ylo = u ? 0 : -2, *yhi = 3;
}

/* One binary op on one dtype over every shape case. */
static void check_binary(const char *op, FloeDType dt, uint64_t seed) {
  FloeDType zdt = FLOE_BOOL;
  if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") ||
      !strcmp(op, "Pow") || !strcmp(op, "Maximum") || !strcmp(op, "Minimum"))
    zdt = dt;
  double rtol, atol, xlo, xhi, ylo, yhi;
  tolerances(zdt, &rtol, &atol);
  bin_ranges(op, dt, &xlo, &xhi, &ylo, &yhi);
  for (int c = 0; c < NUM_BIN_CASES; c++) {
    const BinCase *bc = &bin_cases[c];
    int integral = !strcmp(op, "Equal") || !strcmp(op, "NotEqual");
    FloeTensor *in[2] = {random_tensor(dt, &bc->a, seed + 2 * (uint64_t)c, xlo, xhi, integral),
                         random_tensor(dt, &bc->b, seed + 2 * (uint64_t)c + 1, ylo, yhi,
                                       integral)};
    Shape sh[2] = {bc->a, bc->b}, out;
    ck_assert_int_eq(ref_broadcast(2, sh, &out), 0);
    int64_t n = shape_size(&out);
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
      want[i] = ref_binary(op, harness_get(in[0], ref_index(&sh[0], &out, i)),
                           harness_get(in[1], ref_index(&sh[1], &out, i)), dt);
    FloeTensor *expect = make_tensor(zdt, &out, want);
    FloeTensor *got = run_ok(op, in, 2, NULL, NULL);
    char what[128];
    snprintf(what, sizeof what, "%s %s case %d", op, floe_dtype_name(dt), c);
    assert_close(got, expect, rtol, atol, what);
    floe_tensor_release(got);
    floe_tensor_release(expect);
    floe_tensor_release(in[0]);
    floe_tensor_release(in[1]);
    free(want);
  }
}

static const char *const arith_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"};
static const char *const compare_ops[] = {"Equal", "NotEqual", "Less",
                                          "LessEqual", "Greater", "GreaterEqual"};

START_TEST(test_arith) {
  /* _i: one op; every numeric dtype and shape case. */
  for (int d = 0; d < NUM_NUMERIC; d++)
    check_binary(arith_ops[_i], numeric_dts[d], 100 + (uint64_t)_i);
}
END_TEST

START_TEST(test_compare) {
  for (int d = 0; d < NUM_NUMERIC; d++)
    check_binary(compare_ops[_i], numeric_dts[d], 200 + (uint64_t)_i);
}
END_TEST

START_TEST(test_logical) {
  check_binary("Equal", FLOE_BOOL, 300);
  check_binary("NotEqual", FLOE_BOOL, 301);
  check_binary("LogicalAnd", FLOE_BOOL, 302);
  check_binary("LogicalOr", FLOE_BOOL, 303);
}
END_TEST

/* Exact integer semantics: truncation toward zero, wrapping, the i32 Pow square fast path. */
START_TEST(test_int_semantics) {
  Shape s = {1, {6}};
  double xv[] = {-7, 7, -7, 7, -2147483648.0, 5}, yv[] = {2, 2, -2, -2, -1, 3};
  FloeTensor *in[2] = {make_tensor(FLOE_I32, &s, xv), make_tensor(FLOE_I32, &s, yv)};
  FloeTensor *got = run_ok("Div", in, 2, NULL, NULL);
  double want[] = {-3, 3, 3, -3, -2147483648.0, 1};
  FloeTensor *expect = make_tensor(FLOE_I32, &s, want);
  assert_close(got, expect, 0, 0, "i32 Div truncation and INT_MIN / -1");
  floe_tensor_release(got);
  floe_tensor_release(expect);

  got = run_ok("Add", (FloeTensor *[]){in[0], in[0]}, 2, NULL, NULL);
  double wadd[] = {-14, 14, -14, 14, 0, 10};
  expect = make_tensor(FLOE_I32, &s, wadd);
  assert_close(got, expect, 0, 0, "i32 Add wraps");
  floe_tensor_release(got);
  floe_tensor_release(expect);
  floe_tensor_release(in[0]);
  floe_tensor_release(in[1]);

  /* f32 x ** 2 with a scalar exponent takes a fast path; NaN and Inf must still be right. */
  Shape v = {1, {5}}, sc = {0, {0}};
  double fx[] = {-3, 0.5, INFINITY, NAN, -0.0}, two = 2;
  FloeTensor *pin[2] = {make_tensor(FLOE_F32, &v, fx), make_tensor(FLOE_F32, &sc, &two)};
  got = run_ok("Pow", pin, 2, NULL, NULL);
  double wpow[] = {9, 0.25, INFINITY, NAN, 0};
  expect = make_tensor(FLOE_F32, &v, wpow);
  assert_close(got, expect, 0, 0, "f32 Pow by scalar 2");
  floe_tensor_release(got);
  floe_tensor_release(expect);

  /* Maximum and Minimum propagate NaN from either side. */
  double nx[] = {NAN, 1, NAN, -INFINITY, 2}, ny[] = {1, NAN, NAN, 0, -2};
  FloeTensor *mx[2] = {make_tensor(FLOE_F32, &v, nx), make_tensor(FLOE_F32, &v, ny)};
  got = run_ok("Maximum", mx, 2, NULL, NULL);
  double wmax[] = {NAN, NAN, NAN, 0, 2};
  expect = make_tensor(FLOE_F32, &v, wmax);
  assert_close(got, expect, 0, 0, "Maximum with NaN");
  floe_tensor_release(got);
  floe_tensor_release(expect);
  got = run_ok("Minimum", mx, 2, NULL, NULL);
  double wmin[] = {NAN, NAN, NAN, -INFINITY, -2};
  expect = make_tensor(FLOE_F32, &v, wmin);
  assert_close(got, expect, 0, 0, "Minimum with NaN");
  floe_tensor_release(got);
  floe_tensor_release(expect);
  for (int i = 0; i < 2; i++) {
    floe_tensor_release(pin[i]);
    floe_tensor_release(mx[i]);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Unary ops. */

typedef struct UnaryAttrs {
  int set_alpha;
  double alpha;
  int set_approximate;
  int approximate;
} UnaryAttrs;

static void set_unary_attrs(FloeNodeBuilder *b, void *arg) {
  const UnaryAttrs *a = arg;
  if (a->set_alpha) floe_node_set_attr_float(b, "alpha", a->alpha);
  if (a->set_approximate) floe_node_set_attr_bool(b, "approximate", a->approximate);
}

static double sigmoid_ref(double x) {
  return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

static double ref_unary(const char *op, double x, FloeDType dt, const UnaryAttrs *a) {
  int fl = is_float_dt(dt);
  if (!strcmp(op, "Neg")) return fl ? -x : wrap_int(-x, dt);
  if (!strcmp(op, "Abs")) return fl ? fabs(x) : wrap_int(fabs(x), dt);
  if (!strcmp(op, "Square")) return fl ? x * x : wrap_int(x * x, dt);
  if (!strcmp(op, "Exp")) return exp(x);
  if (!strcmp(op, "Log")) return log(x);
  if (!strcmp(op, "Sqrt")) return sqrt(x);
  if (!strcmp(op, "Rsqrt")) return 1 / sqrt(x);
  if (!strcmp(op, "Relu")) return x > 0 ? x : 0;
  if (!strcmp(op, "Relu6")) return x < 0 ? 0 : x > 6 ? 6 : x;
  if (!strcmp(op, "LeakyRelu")) return x > 0 ? x : (a->set_alpha ? a->alpha : 0.2) * x;
  if (!strcmp(op, "Elu")) return x > 0 ? x : (a->set_alpha ? a->alpha : 1.0) * expm1(x);
  if (!strcmp(op, "Gelu")) {
    if (a->approximate) {
      double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
      return x * sigmoid_ref(2 * u); /* = 0.5 x (1 + tanh(u)) without cancellation */
    }
    return 0.5 * x * erfc(-x / sqrt(2));
  }
  if (!strcmp(op, "Sigmoid")) return sigmoid_ref(x);
  if (!strcmp(op, "Tanh")) return tanh(x);
  if (!strcmp(op, "Softplus")) return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  if (!strcmp(op, "LogicalNot")) return x == 0;
  ck_abort_msg("no reference for %s", op);
  return 0;
}

static const Shape unary_shapes[] = {{0, {0}}, {1, {1}}, {1, {0}}, {2, {2, 3}},
                                     {3, {2, 0, 4}}, {4, {1, 3, 1, 5}}, {1, {70001}}};
#define NUM_UNARY_SHAPES (int)(sizeof unary_shapes / sizeof unary_shapes[0])

static void check_unary(const char *op, FloeDType dt, double lo, double hi, const UnaryAttrs *a,
                        uint64_t seed) {
  double rtol, atol;
  tolerances(dt, &rtol, &atol);
  for (int c = 0; c < NUM_UNARY_SHAPES; c++) {
    const Shape *s = &unary_shapes[c];
    FloeTensor *x = harness_random(dt, s->rank, s->dims, seed + (uint64_t)c, lo, hi);
    int64_t n = shape_size(s);
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) want[i] = ref_unary(op, harness_get(x, i), dt, a);
    FloeTensor *expect = make_tensor(dt, s, want);
    FloeTensor *got = run_ok(op, &x, 1, set_unary_attrs, (void *)a);
    char what[128];
    snprintf(what, sizeof what, "%s %s shape case %d", op, floe_dtype_name(dt), c);
    assert_close(got, expect, rtol, atol, what);
    floe_tensor_release(got);
    floe_tensor_release(expect);
    floe_tensor_release(x);
    free(want);
  }
}

static const struct {
  const char *op;
  int numeric; /* also integers */
  double lo, hi;
  UnaryAttrs attrs;
} unary_ops[] = {
    {"Neg", 1, -20, 20, {0}},
    {"Abs", 1, -20, 20, {0}},
    {"Square", 1, -20, 20, {0}},
    {"Relu", 1, -20, 20, {0}},
    {"Relu6", 1, -10, 10, {0}},
    {"Exp", 0, -20, 20, {0}},
    {"Log", 0, 0.001, 100, {0}},
    {"Sqrt", 0, 0, 100, {0}},
    {"Rsqrt", 0, 0.001, 100, {0}},
    {"LeakyRelu", 0, -10, 10, {0}},
    {"LeakyRelu", 0, -10, 10, {1, 0.05, 0, 0}},
    {"Elu", 0, -10, 10, {0}},
    {"Elu", 0, -10, 10, {1, 0.5, 0, 0}},
    {"Gelu", 0, -10, 10, {0}},
    {"Gelu", 0, -10, 10, {0, 0, 1, 1}},
    {"Sigmoid", 0, -30, 30, {0}},
    {"Tanh", 0, -10, 10, {0}},
    {"Softplus", 0, -30, 30, {0}},
};
#define NUM_UNARY_OPS (int)(sizeof unary_ops / sizeof unary_ops[0])

START_TEST(test_unary) {
  for (int d = 0; d < NUM_NUMERIC; d++) {
    FloeDType dt = numeric_dts[d];
    if (!is_float_dt(dt) && !unary_ops[_i].numeric) continue;
    double lo = unary_ops[_i].lo;
    if (dt == FLOE_U8 && lo < 0) lo = 0;
    check_unary(unary_ops[_i].op, dt, lo, unary_ops[_i].hi, &unary_ops[_i].attrs,
                400 + 10 * (uint64_t)_i);
  }
}
END_TEST

START_TEST(test_logical_not) {
  UnaryAttrs none = {0};
  check_unary("LogicalNot", FLOE_BOOL, 0, 1, &none, 500);
}
END_TEST

/* Special values: Inf, NaN, signed zero, tails where naive formulas overflow or cancel. */
START_TEST(test_special_values) {
  static const double xs[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 50, -50,
                              88, -88, 100, -100, 1e-8, -1e-8, 0.3, -0.3};
  Shape s = {1, {(int64_t)(sizeof xs / sizeof xs[0])}};
  const char *ops[] = {"Exp", "Log", "Sqrt", "Rsqrt", "Sigmoid", "Tanh", "Softplus", "Elu",
                       "Gelu", "Gelu", "Relu", "Relu6", "Abs", "Neg", "LeakyRelu"};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    UnaryAttrs a = {0};
    if (o == 9) a.set_approximate = a.approximate = 1;
    for (int d = 0; d < 2; d++) {
      FloeDType dt = d ? FLOE_F64 : FLOE_F32;
      FloeTensor *x = make_tensor(dt, &s, xs);
      double want[sizeof xs / sizeof xs[0]];
      for (int64_t i = 0; i < s.dims[0]; i++) {
        double v = harness_get(x, i);
        want[i] = ref_unary(ops[o], v, dt, &a);
        if (isnan(v)) want[i] = NAN; /* NaN in, NaN out, Relu included */
        if (!strcmp(ops[o], "Gelu") && v == -INFINITY) want[i] = 0; /* the limit, not NaN */
      }
      FloeTensor *expect = make_tensor(dt, &s, want);
      FloeTensor *got = run_ok(ops[o], &x, 1, set_unary_attrs, &a);
      char what[96];
      snprintf(what, sizeof what, "%s special values %s", ops[o], floe_dtype_name(dt));
      /* atol only absorbs the last bit of subnormal results. */
      assert_close(got, expect, dt == FLOE_F32 ? 2e-6 : 1e-14,
                           dt == FLOE_F32 ? 1e-37 : 1e-300, what);
      floe_tensor_release(got);
      floe_tensor_release(expect);
      floe_tensor_release(x);
    }
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Select. */

static const struct {
  Shape c, t, e;
} select_cases[] = {
    {{2, {2, 3}}, {2, {2, 3}}, {2, {2, 3}}},
    {{2, {2, 1}}, {2, {1, 3}}, {2, {2, 3}}},
    {{1, {3}}, {2, {2, 3}}, {0, {0}}},
    {{0, {0}}, {2, {2, 3}}, {2, {2, 3}}}, /* scalar condition: a whole input */
    {{2, {1, 1}}, {1, {4}}, {1, {4}}},    /* size-1 condition of higher rank */
    {{3, {4, 1, 5}}, {2, {3, 1}}, {1, {5}}},
    {{2, {0, 3}}, {1, {3}}, {2, {0, 3}}}, /* empty */
    {{2, {3, 1}}, {0, {0}}, {0, {0}}},    /* both values scalar */
    {{3, {40, 40, 50}}, {1, {50}}, {2, {40, 1}}}, /* 80000 elements: threads */
};

static void check_select(FloeDType dt, uint64_t seed) {
  for (size_t c = 0; c < sizeof select_cases / sizeof select_cases[0]; c++) {
    Shape sh[3] = {select_cases[c].c, select_cases[c].t, select_cases[c].e}, out;
    ck_assert_int_eq(ref_broadcast(3, sh, &out), 0);
    for (int pass = 0; pass < 2; pass++) { /* scalar conditions: both values of it */
      FloeTensor *in[3] = {
          harness_random(FLOE_BOOL, sh[0].rank, sh[0].dims, seed + c + 17 * (uint64_t)pass, 0, 1),
          harness_random(dt, sh[1].rank, sh[1].dims, seed + c + 1, -50, 50),
          harness_random(dt, sh[2].rank, sh[2].dims, seed + c + 2, -50, 50)};
      if (shape_size(&sh[0]) == 1) ((uint8_t *)floe_tensor_data(in[0]))[0] = (uint8_t)pass;
      int64_t n = shape_size(&out);
      double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
      for (int64_t i = 0; i < n; i++)
        want[i] = harness_get(in[0], ref_index(&sh[0], &out, i)) != 0
                      ? harness_get(in[1], ref_index(&sh[1], &out, i))
                      : harness_get(in[2], ref_index(&sh[2], &out, i));
      FloeTensor *expect = make_tensor(dt, &out, want);
      FloeTensor *got = run_ok("Select", in, 3, NULL, NULL);
      char what[96];
      snprintf(what, sizeof what, "Select %s case %zu pass %d", floe_dtype_name(dt), c, pass);
      assert_close(got, expect, 0, 0, what);
      floe_tensor_release(got);
      floe_tensor_release(expect);
      for (int k = 0; k < 3; k++) floe_tensor_release(in[k]);
      free(want);
    }
  }
}

START_TEST(test_select) {
  /* Every element size: 1, 2, 4 and 8 bytes. */
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                           FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) check_select(dts[d], 600 + 10 * d);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Cast. */

static void set_dst(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "DstT", *(const FloeDType *)arg);
}

static double ref_cast(double v, FloeDType src, FloeDType dst) {
  if (dst == FLOE_BOOL) return v != 0;
  if (is_float_dt(dst)) return v;
  if (src == FLOE_BOOL) return v != 0;
  double lo = dst == FLOE_I8    ? -128
              : dst == FLOE_U8  ? 0
              : dst == FLOE_I32 ? -2147483648.0
                                : -9223372036854775808.0;
  double hi = dst == FLOE_I8    ? 127
              : dst == FLOE_U8  ? 255
              : dst == FLOE_I32 ? 2147483647.0
                                : 9223372036854775807.0;
  if (is_float_dt(src)) { /* truncate toward zero, saturate, NaN -> 0 */
    if (isnan(v)) return 0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
  }
  return wrap_int(v, dst); /* integers wrap */
}

START_TEST(test_cast) {
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                           FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
  static const double fvals[] = {0, -0.0, 1, -1, 2.5, -2.5, 3.75, -3.75, 127.5, -128.5, 255.9,
                                 300, -300, 65504, 1e10, -1e10, INFINITY, -INFINITY, NAN, 0.1};
  static const double ivals[] = {0, 1, -1, 2, 100, 127, -128, 300, -300, 65536, 1000000, 3};
  static const double uvals[] = {0, 1, 2, 100, 127, 128, 200, 255, 7, 8, 9, 10};
  static const double bvals[] = {0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1};
  for (size_t s = 0; s < sizeof dts / sizeof dts[0]; s++) {
    FloeDType src = dts[s];
    const double *vals = is_float_dt(src)     ? fvals
                         : src == FLOE_U8   ? uvals
                         : src == FLOE_BOOL ? bvals
                                            : ivals;
    int64_t n = is_float_dt(src) ? (int64_t)(sizeof fvals / sizeof fvals[0]) : 12;
    for (int shape_case = 0; shape_case < 3; shape_case++) {
      Shape sh = shape_case == 0   ? (Shape){2, {2, n / 2}} /* [2, n/2] */
                 : shape_case == 1 ? (Shape){1, {0}}        /* empty */
                                   : (Shape){0, {0}};       /* scalar: the first value */
      FloeTensor *x = make_tensor(src, &sh, vals);
      for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        FloeDType dst = dts[d];
        int64_t m = shape_size(&sh);
        double want[32];
        for (int64_t i = 0; i < m; i++) want[i] = ref_cast(harness_get(x, i), src, dst);
        FloeTensor *expect = make_tensor(dst, &sh, want);
        FloeTensor *got = run_ok("Cast", &x, 1, set_dst, &dst);
        char what[96];
        snprintf(what, sizeof what, "Cast %s -> %s shape case %d", floe_dtype_name(src),
                 floe_dtype_name(dst), shape_case);
        assert_close(got, expect, 0, 0, what);
        floe_tensor_release(got);
        floe_tensor_release(expect);
      }
      floe_tensor_release(x);
    }
  }
}
END_TEST

/* Large cast (threads) and the f16 rounding of a value exactly between two halves. */
START_TEST(test_cast_large_and_rounding) {
  Shape s = {1, {100003}};
  FloeTensor *x = harness_random(FLOE_F32, 1, s.dims, 700, -1000, 1000);
  FloeDType dst = FLOE_I32;
  FloeTensor *got = run_ok("Cast", &x, 1, set_dst, &dst);
  int64_t bad = -1;
  for (int64_t i = 0; bad < 0 && i < s.dims[0]; i++)
    if (harness_get(got, i) != trunc(harness_get(x, i))) bad = i;
  ck_assert_msg(bad < 0, "Cast f32 -> i32: element %lld", (long long)bad);
  floe_tensor_release(got);
  floe_tensor_release(x);

  /* 1 + 2^-11 lies halfway between f16 1 and 1 + 2^-10: ties to even gives 1. Just above the
   * tie must round up, although f64 -> f32 alone would land on the tie (double rounding). */
  Shape one = {1, {4}};
  double v[] = {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65520, 1.0 + 1.0 / 2048 + ldexp(1, -40)};
  x = make_tensor(FLOE_F64, &one, v);
  dst = FLOE_F16;
  got = run_ok("Cast", &x, 1, set_dst, &dst);
  const uint16_t *h = floe_tensor_data(got);
  ck_assert_uint_eq(h[0], 0x3c00);
  ck_assert_uint_eq(h[1], 0x3c02);
  ck_assert_uint_eq(h[2], 0x7c00); /* rounds up to Inf */
  ck_assert_uint_eq(h[3], 0x3c01);
  floe_tensor_release(got);
  floe_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Bad inputs. */

static void expect_error(const char *op, FloeTensor *const *in, int n, const char *const *needles,
                         int num_needles) {
  char msg[512];
  FloeTensor *out;
  floe_code rc = run_op(op, in, n, NULL, NULL, &out, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: code %s, want INVALID_ARGUMENT (%s)", op,
                floe_code_name(rc), msg);
  ck_assert_ptr_null(out);
  for (int i = 0; i < num_needles; i++)
    ck_assert_msg(strstr(msg, needles[i]) != NULL, "%s: message '%s' lacks '%s'", op, msg,
                  needles[i]);
}

START_TEST(test_bad_shapes) {
  Shape a = {2, {2, 3}}, b = {1, {4}}, c = {2, {5, 3}};
  FloeTensor *x = harness_random(FLOE_F32, a.rank, a.dims, 1, 0, 1);
  FloeTensor *y = harness_random(FLOE_F32, b.rank, b.dims, 2, 0, 1);
  FloeTensor *z = harness_random(FLOE_F32, c.rank, c.dims, 3, 0, 1);
  expect_error("Add", (FloeTensor *[]){x, y}, 2, (const char *[]){"[2,3]", "[4]"}, 2);
  expect_error("Less", (FloeTensor *[]){x, z}, 2, (const char *[]){"[2,3]", "[5,3]"}, 2);
  FloeTensor *cond = harness_random(FLOE_BOOL, a.rank, a.dims, 4, 0, 1);
  expect_error("Select", (FloeTensor *[]){cond, x, z}, 3, (const char *[]){"[5,3]"}, 1);
  floe_tensor_release(cond);
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_tensor_release(z);
}
END_TEST

START_TEST(test_bad_values) {
  Shape s = {1, {4}};
  double xv[] = {1, 2, 3, 4}, zero[] = {1, 2, 0, 4}, neg[] = {1, -2, 0, 4};
  const FloeDType dts[] = {FLOE_I8, FLOE_U8, FLOE_I32, FLOE_I64};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    FloeTensor *x = make_tensor(dts[d], &s, xv);
    FloeTensor *y = make_tensor(dts[d], &s, zero);
    expect_error("Div", (FloeTensor *[]){x, y}, 2, (const char *[]){"division by zero", "[4]"}, 2);
    floe_tensor_release(y);
    if (dts[d] != FLOE_U8) {
      y = make_tensor(dts[d], &s, neg);
      expect_error("Pow", (FloeTensor *[]){x, y}, 2, (const char *[]){"-2", "[4]"}, 2);
      floe_tensor_release(y);
    }
    floe_tensor_release(x);
  }
  /* Float division by zero is IEEE, not an error. */
  FloeTensor *in[2] = {make_tensor(FLOE_F32, &s, xv), make_tensor(FLOE_F32, &s, zero)};
  FloeTensor *got = run_ok("Div", in, 2, NULL, NULL);
  ck_assert(isinf(harness_get(got, 2)));
  floe_tensor_release(got);
  floe_tensor_release(in[0]);
  floe_tensor_release(in[1]);
}
END_TEST

static Suite *elementwise_suite(void) {
  Suite *s = suite_create("elementwise");
  TCase *tc = tcase_create("binary");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_arith, 0, (int)(sizeof arith_ops / sizeof arith_ops[0]));
  tcase_add_loop_test(tc, test_compare, 0, (int)(sizeof compare_ops / sizeof compare_ops[0]));
  tcase_add_test(tc, test_logical);
  tcase_add_test(tc, test_int_semantics);
  suite_add_tcase(s, tc);

  tc = tcase_create("unary");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_unary, 0, NUM_UNARY_OPS);
  tcase_add_test(tc, test_logical_not);
  tcase_add_test(tc, test_special_values);
  suite_add_tcase(s, tc);

  tc = tcase_create("select");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_select);
  suite_add_tcase(s, tc);

  tc = tcase_create("cast");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_cast);
  tcase_add_test(tc, test_cast_large_and_rounding);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_test(tc, test_bad_shapes);
  tcase_add_test(tc, test_bad_values);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(elementwise_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
