/* SPDX-License-Identifier: Apache-2.0 */
/* test_grad_ops.c - the elementwise-style training ops: StopGradient, Sign, Cos,
 * Sin, Floor, AddN, the activation gradients (ReluGrad .. RsqrtGrad), BiasAddGrad and the
 * stateless random ops.
 *
 * Every kernel is checked against a plain reference formula written here, over every dtype
 * family its op allows, empty tensors and bad inputs. The derivative kernels are also checked
 * against central finite differences of their forward ops run through the session in f64, so
 * the formulas are verified independently of this file. The stateless random ops are checked
 * against a reference Philox-4x32-10 (Random123's known answers) written here. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const FloeDType float_dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
static const FloeDType numeric_dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                        FLOE_I8,  FLOE_U8,  FLOE_I32, FLOE_I64};
#define NUM_FLOAT 4
#define NUM_NUMERIC 8

static bool is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Tolerances of a float dtype: f32 math to a few ulp, halves to their output rounding. */
static double rtol_of(FloeDType dt) {
  switch (dt) {
    case FLOE_F64: return 1e-12;
    case FLOE_F32: return 1e-5;
    case FLOE_F16: return 2e-3;
    case FLOE_BF16: return 1e-2;
    default: return 0;
  }
}

static double atol_of(FloeDType dt) {
  switch (dt) {
    case FLOE_F64: return 1e-13;
    case FLOE_F32: return 1e-6;
    case FLOE_F16: return 1e-4;
    case FLOE_BF16: return 1e-3;
    default: return 0;
  }
}

/* Runs op on inputs; the message lands in msg. */
static floe_code run_op(const char *op, FloeTensor *const *in, int n, harness_attrs_fn attrs,
                        void *arg, FloeTensor **out, char *msg, size_t msg_len) {
  FloeStatus *st = floe_status_new();
  *out = NULL;
  floe_code rc = harness_run_op(op, NULL, in, n, NULL, 0, attrs, arg, out, 1, st);
  if (msg) snprintf(msg, msg_len, "%s", floe_status_message(st));
  floe_status_free(st);
  return rc;
}

static FloeTensor *run_ok(const char *op, FloeTensor *const *in, int n, harness_attrs_fn attrs,
                          void *arg) {
  char msg[512];
  FloeTensor *out;
  floe_code rc = run_op(op, in, n, attrs, arg, &out, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_OK, "%s failed: %s", op, msg);
  return out;
}

static bool same_bytes(const FloeTensor *a, const FloeTensor *b) {
  return floe_tensor_nbytes(a) == floe_tensor_nbytes(b) &&
         (floe_tensor_nbytes(a) == 0 ||
          memcmp(floe_tensor_data(a), floe_tensor_data(b), floe_tensor_nbytes(a)) == 0);
}

/* A tensor of dt holding f(i) for each element i. */
static FloeTensor *tensor_of(FloeDType dt, int rank, const int64_t *dims,
                             double (*f)(int64_t i, void *arg), void *arg) {
  int64_t n = harness_count(rank, dims);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) v[i] = f(i, arg);
  FloeTensor *t = harness_from_doubles(dt, rank, dims, v);
  free(v);
  return t;
}

/* ---------------------------------------------------------------------------------- */
/* StopGradient: the input, unchanged, for every dtype. */

START_TEST(test_stop_gradient) {
  const FloeDType all[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                           FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
  const int64_t shapes[3][3] = {{2, 3, 5}, {0, 4, 1}, {70001, 1, 1}};
  for (size_t t = 0; t < sizeof all / sizeof all[0]; t++)
    for (int s = 0; s < 3; s++) {
      FloeTensor *x = harness_random(all[t], 3, shapes[s], 11 + (uint64_t)s, -50, 50);
      FloeTensor *y = run_ok("StopGradient", &x, 1, NULL, NULL);
      ck_assert_int_eq(floe_tensor_dtype(y), all[t]);
      ck_assert_int_eq(floe_tensor_rank(y), 3);
      for (int d = 0; d < 3; d++) ck_assert_int_eq(floe_tensor_dim(y, d), shapes[s][d]);
      ck_assert(floe_tensor_nbytes(y) == floe_tensor_nbytes(x));
      ck_assert(floe_tensor_nbytes(x) == 0 ||
                memcmp(floe_tensor_data(x), floe_tensor_data(y), floe_tensor_nbytes(x)) == 0);
      floe_tensor_release(x);
      floe_tensor_release(y);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Sign, Cos, Sin, Floor. */

static double ref_sign(double x) { return isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : 0; }

typedef struct UnaryCase {
  const char *op;
  double (*ref)(double);
  bool numeric; /* else float only */
} UnaryCase;

static const UnaryCase unary_cases[] = {
    {"Sign", ref_sign, true},
    {"Cos", cos, false},
    {"Sin", sin, false},
    {"Floor", floor, false},
};

/* Interesting values first (|x| > 1e6 takes the kernels' libm path), then random ones. */
static const double special_values[] = {0.0,    -0.0,   0.5,     -0.5,    1.0,     -1.0,
                                        1.5,    -2.5,   3.14159, -3.1416, 6.28318, 100.25,
                                        -77.75, 1e3,    -4097.5, 65000,   1.5e5,   -9.9e5,
                                        1e6,    2.5e6,  -1e7,    3e30,    INFINITY, -INFINITY,
                                        NAN};
#define NUM_SPECIAL (int64_t)(sizeof special_values / sizeof special_values[0])

static double unary_input(int64_t i, void *arg) {
  const double *range = arg;
  if (i < NUM_SPECIAL) return special_values[i];
  uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 32;
  double u = (double)(z >> 11) * 0x1p-53;
  return range[0] + (range[1] - range[0]) * u;
}

START_TEST(test_unary_math) {
  const int64_t sizes[] = {0, 1, NUM_SPECIAL + 40, 70001};
  for (size_t c = 0; c < sizeof unary_cases / sizeof unary_cases[0]; c++) {
    const UnaryCase *uc = &unary_cases[c];
    for (int t = 0; t < (uc->numeric ? NUM_NUMERIC : NUM_FLOAT); t++) {
      FloeDType dt = numeric_dts[t];
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        double range[2] = {-20, 20};
        if (dt == FLOE_U8) range[0] = 0;
        if (!is_float(dt)) range[0] = range[0] < 0 ? -100 : 0, range[1] = 100;
        int64_t n = sizes[s];
        /* Integers skip the float specials (they would be cast). */
        FloeTensor *x;
        if (is_float(dt)) {
          x = tensor_of(dt, 1, &n, unary_input, range);
        } else {
          x = harness_random(dt, 1, &n, 5 + (uint64_t)s, range[0], range[1]);
          if (n > 2) { /* the extremes of the dtype */
            double lo = dt == FLOE_I8 ? -128 : dt == FLOE_U8 ? 0 : dt == FLOE_I32 ? -2147483648.0
                                                                                   : -9.2e18;
            double *v = harness_values(x);
            v[0] = lo;
            v[1] = 0;
            FloeTensor *x2 = harness_from_doubles(dt, 1, &n, v);
            free(v);
            floe_tensor_release(x);
            x = x2;
          }
        }
        FloeTensor *y = run_ok(uc->op, &x, 1, NULL, NULL);
        double *v = harness_values(x);
        for (int64_t i = 0; i < n; i++) v[i] = uc->ref(v[i]);
        FloeTensor *want = harness_from_doubles(dt, 1, &n, v);
        free(v);
        char what[96];
        snprintf(what, sizeof what, "%s %s n=%lld", uc->op, floe_dtype_name(dt), (long long)n);
        /* Sin and Cos of huge arguments: the f32 reference is libm's double result rounded. */
        harness_assert_close(y, want, rtol_of(dt), 2 * atol_of(dt), what);
        floe_tensor_release(x);
        floe_tensor_release(y);
        floe_tensor_release(want);
      }
    }
  }
}
END_TEST

/* Sign keeps NaN; f32 Sin and Cos agree with libm to 2 ulp-ish across the reduction range. */
START_TEST(test_unary_details) {
  int64_t n = 4;
  FloeTensor *x = harness_f32(1, &n, (const float[]){NAN, -0.0f, 1e-30f, -1e-30f});
  FloeTensor *y = run_ok("Sign", &x, 1, NULL, NULL);
  ck_assert(isnan(harness_get(y, 0)));
  ck_assert(harness_get(y, 1) == 0 && harness_get(y, 2) == 1 && harness_get(y, 3) == -1);
  floe_tensor_release(x);
  floe_tensor_release(y);

  n = 200001;
  float *xs = malloc((size_t)n * sizeof *xs);
  ck_assert_ptr_nonnull(xs);
  for (int64_t i = 0; i < n; i++) /* 1e-3 .. 2e6 geometrically, both signs */
    xs[i] = (float)((i % 2 ? -1 : 1) * 1e-3 * pow(2e9, (double)i / (double)n));
  x = harness_f32(1, &n, xs);
  const char *ops[2] = {"Sin", "Cos"};
  for (int o = 0; o < 2; o++) {
    y = run_ok(ops[o], &x, 1, NULL, NULL);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
      double want = o == 0 ? sin((double)xs[i]) : cos((double)xs[i]);
      double err = fabs(harness_get(y, i) - want) / fmax(fabs(want), 1e-3);
      if (err > worst) worst = err, at = i;
    }
    ck_assert_msg(worst < 4e-7, "%s(%.9g): relative error %g", ops[o], (double)xs[at], worst);
    floe_tensor_release(y);
  }
  free(xs);
  floe_tensor_release(x);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The activation gradients. */

enum { IN_FEATURES, IN_OUTPUTS, IN_Y_DY }; /* (gradients, features), (gradients, outputs),
                                              (y, dy) */

typedef struct GradCase {
  const char *op, *fwd; /* the gradient op and the forward op it differentiates */
  int inputs;           /* IN_* */
  bool numeric;         /* ints allowed too */
  double lo, hi;        /* range of x (the forward op's input) */
  double kinks[2];      /* points where the forward op has no derivative (NAN: none) */
  const char *attr;     /* "alpha", "approximate" or NULL */
  double value;         /* of attr */
} GradCase;

static const GradCase grad_cases[] = {
    {"ReluGrad", "Relu", IN_FEATURES, true, -3, 3, {0, NAN}, NULL, 0},
    {"Relu6Grad", "Relu6", IN_FEATURES, true, -3, 9, {0, 6}, NULL, 0},
    {"LeakyReluGrad", "LeakyRelu", IN_FEATURES, false, -3, 3, {0, NAN}, NULL, 0},
    {"LeakyReluGrad", "LeakyRelu", IN_FEATURES, false, -3, 3, {0, NAN}, "alpha", 0.35},
    {"EluGrad", "Elu", IN_OUTPUTS, false, -4, 3, {0, NAN}, NULL, 0},
    {"EluGrad", "Elu", IN_OUTPUTS, false, -4, 3, {0, NAN}, "alpha", 0.6},
    {"GeluGrad", "Gelu", IN_FEATURES, false, -5, 5, {NAN, NAN}, NULL, 0},
    {"GeluGrad", "Gelu", IN_FEATURES, false, -5, 5, {NAN, NAN}, "approximate", 1},
    {"SigmoidGrad", "Sigmoid", IN_Y_DY, false, -6, 6, {NAN, NAN}, NULL, 0},
    {"TanhGrad", "Tanh", IN_Y_DY, false, -4, 4, {NAN, NAN}, NULL, 0},
    {"SoftplusGrad", "Softplus", IN_FEATURES, false, -8, 8, {NAN, NAN}, NULL, 0},
    {"SqrtGrad", "Sqrt", IN_Y_DY, false, 0.3, 5, {NAN, NAN}, NULL, 0},
    {"RsqrtGrad", "Rsqrt", IN_Y_DY, false, 0.3, 5, {NAN, NAN}, NULL, 0},
};
#define NUM_GRAD_CASES (int)(sizeof grad_cases / sizeof grad_cases[0])

static void set_grad_attr(FloeNodeBuilder *b, void *arg) {
  const GradCase *c = arg;
  if (!c->attr) return;
  if (strcmp(c->attr, "approximate") == 0)
    floe_node_set_attr_bool(b, c->attr, c->value != 0);
  else
    floe_node_set_attr_float(b, c->attr, c->value);
}

static double case_alpha(const GradCase *c) {
  if (c->attr && strcmp(c->attr, "alpha") == 0) return c->value;
  return strcmp(c->op, "EluGrad") == 0 ? 1.0 : 0.2; /* the ops' defaults */
}

/* The forward op in double, to make the y / outputs input of the (y, dy) and Elu cases. */
static double ref_forward(const GradCase *c, double x) {
  double al = case_alpha(c);
  if (strcmp(c->fwd, "Elu") == 0) return x > 0 ? x : al * expm1(x);
  if (strcmp(c->fwd, "Sigmoid") == 0) return 1 / (1 + exp(-x));
  if (strcmp(c->fwd, "Tanh") == 0) return tanh(x);
  if (strcmp(c->fwd, "Sqrt") == 0) return sqrt(x);
  if (strcmp(c->fwd, "Rsqrt") == 0) return 1 / sqrt(x);
  return x;
}

/* The gradient op's output from its two inputs a, b (in the op's order), TF's formulas. */
static double ref_grad(const GradCase *c, double a, double b) {
  const char *op = c->op;
  double al = case_alpha(c);
  if (!strcmp(op, "ReluGrad")) return b > 0 ? a : 0;
  if (!strcmp(op, "Relu6Grad")) return b > 0 && b < 6 ? a : 0;
  if (!strcmp(op, "LeakyReluGrad")) return b > 0 ? a : al * a;
  if (!strcmp(op, "EluGrad")) return b > 0 ? a : a * (b + al);
  if (!strcmp(op, "GeluGrad")) {
    if (c->attr && c->value != 0) { /* d/dx 0.5 x (1 + tanh(k (x + 0.044715 x^3))) */
      double k = sqrt(2 / M_PI), t = tanh(k * (b + 0.044715 * b * b * b));
      return a * (0.5 * (1 + t) + 0.5 * b * (1 - t * t) * k * (1 + 3 * 0.044715 * b * b));
    }
    return a * (0.5 * (1 + erf(b / sqrt(2.0))) + b * exp(-b * b / 2) / sqrt(2 * M_PI));
  }
  if (!strcmp(op, "SigmoidGrad")) return b * a * (1 - a);
  if (!strcmp(op, "TanhGrad")) return b * (1 - a * a);
  if (!strcmp(op, "SoftplusGrad")) return a / (1 + exp(-b));
  if (!strcmp(op, "SqrtGrad")) return b * 0.5 / a;
  if (!strcmp(op, "RsqrtGrad")) return -0.5 * b * a * a * a;
  ck_abort_msg("no reference for %s", op);
  return 0;
}

/* splitmix64 in [lo, hi). */
static double uniform(uint64_t *s, double lo, double hi) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * ((double)(z >> 11) * 0x1p-53);
}

/* n values of x in [lo, hi), at least 0.05 from the kinks. */
static double *draw_x(const GradCase *c, int64_t n, uint64_t seed, bool integral) {
  double *x = malloc((size_t)(n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (int64_t i = 0; i < n; i++) {
    double v = uniform(&seed, c->lo, c->hi);
    if (integral) {
      x[i] = floor(v);
      continue;
    }
    for (int k = 0; k < 2; k++)
      if (!isnan(c->kinks[k]) && fabs(v - c->kinks[k]) < 0.05) v = c->kinks[k] + 0.1;
    x[i] = v;
  }
  return x;
}

/* The two inputs of case c at n points x, with gradients g: (g, x), (g, fwd(x)) or
 * (fwd(x), g), in dtype dt. */
static void grad_inputs(const GradCase *c, FloeDType dt, int rank, const int64_t *dims,
                        const double *x, const double *g, FloeTensor *in[2]) {
  int64_t n = harness_count(rank, dims);
  double *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  ck_assert_ptr_nonnull(f);
  for (int64_t i = 0; i < n; i++) f[i] = c->inputs == IN_FEATURES ? x[i] : ref_forward(c, x[i]);
  FloeTensor *ft = harness_from_doubles(dt, rank, dims, f);
  FloeTensor *gt = harness_from_doubles(dt, rank, dims, g);
  in[0] = c->inputs == IN_Y_DY ? ft : gt;
  in[1] = c->inputs == IN_Y_DY ? gt : ft;
  free(f);
}

START_TEST(test_grad_reference) {
  typedef struct {
    int rank;
    int64_t dims[3];
  } S;
  const S shapes[] = {{0, {0}}, {1, {7}}, {2, {3, 5}}, {1, {70001}}, {3, {2, 0, 3}}};
  for (int ci = 0; ci < NUM_GRAD_CASES; ci++) {
    const GradCase *c = &grad_cases[ci];
    for (int t = 0; t < (c->numeric ? NUM_NUMERIC : NUM_FLOAT); t++) {
      FloeDType dt = numeric_dts[t];
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rank = shapes[s].rank;
        const int64_t *dims = shapes[s].dims;
        int64_t n = harness_count(rank, dims);
        uint64_t seed = 1000 * (uint64_t)ci + 10 * (uint64_t)t + s;
        bool integral = !is_float(dt);
        double *x = draw_x(c, n, seed, integral);
        double *g = malloc((size_t)(n ? n : 1) * sizeof *g);
        ck_assert_ptr_nonnull(g);
        for (int64_t i = 0; i < n; i++) {
          g[i] = uniform(&seed, -2, 2);
          if (integral) g[i] = dt == FLOE_U8 ? floor(g[i] * 50 + 100) : floor(g[i] * 50);
          if (integral && dt == FLOE_U8) x[i] = x[i] < 0 ? 0 : x[i];
        }
        FloeTensor *in[2];
        grad_inputs(c, dt, rank, dims, x, g, in);
        FloeTensor *out = run_ok(c->op, in, 2, set_grad_attr, (void *)c);
        /* The reference from the inputs as the dtype holds them. */
        double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
        ck_assert_ptr_nonnull(want);
        for (int64_t i = 0; i < n; i++)
          want[i] = ref_grad(c, harness_get(in[0], i), harness_get(in[1], i));
        FloeTensor *wt = harness_from_doubles(dt, rank, dims, want);
        char what[128];
        snprintf(what, sizeof what, "%s%s%s %s n=%lld", c->op, c->attr ? " " : "",
                 c->attr ? c->attr : "", floe_dtype_name(dt), (long long)n);
        harness_assert_close(out, wt, rtol_of(dt), atol_of(dt), what);
        floe_tensor_release(wt);
        floe_tensor_release(out);
        floe_tensor_release(in[0]);
        floe_tensor_release(in[1]);
        free(x);
        free(g);
        free(want);
      }
    }
  }
}
END_TEST

/* The forward op of case c on x (f64) through the session. */
static FloeTensor *forward_f64(const GradCase *c, int64_t n, const double *x) {
  FloeTensor *xt = harness_f64(1, &n, x);
  /* Gelu's attribute is "approximate" as for GeluGrad; alpha likewise. */
  FloeTensor *y = run_ok(c->fwd, &xt, 1, set_grad_attr, (void *)c);
  floe_tensor_release(xt);
  return y;
}

/* Each gradient kernel (f64) equals g * (f(x + h) - f(x - h)) / 2h, f the forward op as the
 * session runs it. */
START_TEST(test_grad_finite_difference) {
  const int64_t n = 400;
  const double h = 1e-5;
  for (int ci = 0; ci < NUM_GRAD_CASES; ci++) {
    const GradCase *c = &grad_cases[ci];
    uint64_t seed = 77 + (uint64_t)ci;
    double *x = draw_x(c, n, seed, false);
    double *g = malloc((size_t)n * sizeof *g), *xp = malloc((size_t)n * sizeof *xp),
           *xm = malloc((size_t)n * sizeof *xm), *fd = malloc((size_t)n * sizeof *fd);
    ck_assert(g && xp && xm && fd);
    for (int64_t i = 0; i < n; i++) {
      g[i] = uniform(&seed, -2, 2);
      xp[i] = x[i] + h;
      xm[i] = x[i] - h;
    }
    FloeTensor *fp = forward_f64(c, n, xp), *fm = forward_f64(c, n, xm);
    for (int64_t i = 0; i < n; i++)
      fd[i] = g[i] * (harness_get(fp, i) - harness_get(fm, i)) / (2 * h);
    /* The gradient op's inputs: x itself, or the forward op's output at x, and g. */
    FloeTensor *xt = harness_f64(1, &n, x), *gt = harness_f64(1, &n, g);
    FloeTensor *ft = c->inputs == IN_FEATURES ? (floe_tensor_retain(xt), xt) : forward_f64(c, n, x);
    FloeTensor *in[2] = {c->inputs == IN_Y_DY ? ft : gt, c->inputs == IN_Y_DY ? gt : ft};
    FloeTensor *out = run_ok(c->op, in, 2, set_grad_attr, (void *)c);
    FloeTensor *want = harness_f64(1, &n, fd);
    char what[128];
    snprintf(what, sizeof what, "%s%s%s vs finite differences of %s", c->op, c->attr ? " " : "",
             c->attr ? c->attr : "", c->fwd);
    harness_assert_close(out, want, 1e-6, 1e-7, what);
    FloeTensor *all[] = {fp, fm, xt, gt, ft, out, want};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
    free(x);
    free(g);
    free(xp);
    free(xm);
    free(fd);
  }
}
END_TEST

/* Edge values: Inf and large |x| give finite, correct limits; NaN propagates where the
 * formula multiplies by it. */
START_TEST(test_grad_limits) {
  int64_t n = 4;
  double xs[4] = {INFINITY, -INFINITY, 40, -40};
  double ones[4] = {1, 1, 1, 1};
  for (int approx = 0; approx < 2; approx++) {
    GradCase c = grad_cases[6 + approx]; /* GeluGrad */
    for (int t = 0; t < 2; t++) {
      FloeTensor *in[2] = {harness_from_doubles(float_dts[t], 1, &n, ones),
                           harness_from_doubles(float_dts[t], 1, &n, xs)};
      FloeTensor *out = run_ok("GeluGrad", in, 2, set_grad_attr, &c);
      double want[4] = {1, 0, 1, 0};
      for (int i = 0; i < 4; i++)
        ck_assert_msg(fabs(harness_get(out, i) - want[i]) < 1e-6, "GeluGrad %s approximate=%d "
                      "at %g: %g", floe_dtype_name(float_dts[t]), approx, xs[i],
                      harness_get(out, i));
      floe_tensor_release(out);
      floe_tensor_release(in[0]);
      floe_tensor_release(in[1]);
    }
  }
  /* SoftplusGrad saturates to the gradient and to 0. */
  FloeTensor *in[2] = {harness_f32(1, &n, (const float[]){3, 3, 3, 3}),
                       harness_f32(1, &n, (const float[]){INFINITY, -INFINITY, 200, -200})};
  FloeTensor *out = run_ok("SoftplusGrad", in, 2, NULL, NULL);
  ck_assert(harness_get(out, 0) == 3 && harness_get(out, 1) == 0);
  ck_assert(harness_get(out, 2) == 3 && harness_get(out, 3) == 0);
  floe_tensor_release(out);
  floe_tensor_release(in[0]);
  floe_tensor_release(in[1]);
}
END_TEST

START_TEST(test_grad_errors) {
  for (int ci = 0; ci < NUM_GRAD_CASES; ci++) {
    const GradCase *c = &grad_cases[ci];
    FloeTensor *in[2] = {harness_random(FLOE_F32, 2, (int64_t[]){2, 3}, 1, 0.5, 1),
                         harness_random(FLOE_F32, 2, (int64_t[]){3, 2}, 2, 0.5, 1)};
    FloeTensor *out;
    char msg[512];
    floe_code rc = run_op(c->op, in, 2, set_grad_attr, (void *)c, &out, msg, sizeof msg);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "[2,3]") && strstr(msg, "[3,2]"),
                  "%s: %s: %s", c->op, floe_code_name(rc), msg);
    ck_assert_ptr_null(out);
    floe_tensor_release(in[1]);
    /* A scalar against a vector is no broadcast either. */
    in[1] = harness_random(FLOE_F32, 0, NULL, 2, 0.5, 1);
    rc = run_op(c->op, in, 2, set_grad_attr, (void *)c, &out, msg, sizeof msg);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "[2,3]") && strstr(msg, "[]"),
                  "%s: %s: %s", c->op, floe_code_name(rc), msg);
    floe_tensor_release(in[0]);
    floe_tensor_release(in[1]);
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* AddN. */

/* Runs AddN on n inputs as one list argument; unknown_shapes feeds placeholders of unknown
 * shape (so the kernel, not graph validation, sees mismatches). */
static floe_code run_addn(FloeTensor *const *in, int n, bool unknown_shapes, FloeTensor **out,
                          char *msg, size_t msg_len) {
  *out = NULL;
  if (!unknown_shapes) {
    FloeStatus *st = floe_status_new();
    floe_code rc = harness_run_op("AddN", NULL, in, n, (int[]){n}, 1, NULL, NULL, out, 1, st);
    snprintf(msg, msg_len, "%s", floe_status_message(st));
    floe_status_free(st);
    return rc;
  }
  FloeGraph *g = floe_graph_new();
  FloeOutput ph[16];
  FloeFeed feeds[16];
  char names[16][8];
  ck_assert_int_le(n, 16);
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    ph[i] = floe_placeholder(g, names[i], floe_tensor_dtype(in[i]), floe_shape_unknown());
    feeds[i] = (FloeFeed){names[i], in[i]};
  }
  FloeNodeBuilder *b = floe_node_begin(g, "AddN", "sum");
  floe_node_add_input_list(b, ph, n);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  const char *fetch = "sum";
  floe_code rc = floe_session_run(s, feeds, n, &fetch, 1, NULL, 0, out, st);
  snprintf(msg, msg_len, "%s", floe_status_message(st));
  floe_session_free(s);
  floe_status_free(st);
  return rc;
}

/* Wrapping of an integer sum to dt's width. */
static double wrap_to(FloeDType dt, double v) {
  if (dt == FLOE_I64 || is_float(dt)) return v;
  int bits = dt == FLOE_I32 ? 32 : 8;
  int64_t m = (int64_t)v & (int64_t)((1ull << bits) - 1);
  if (dt != FLOE_U8 && m >= (int64_t)(1ull << (bits - 1))) m -= (int64_t)(1ull << bits);
  return (double)m;
}

START_TEST(test_addn) {
  const int64_t sizes[] = {1, 5, 1023, 1025, 70001};
  const int counts[] = {1, 2, 3, 4, 5, 7, 9, 17}; /* 17: past the kernel's stack list */
  for (int t = 0; t < NUM_NUMERIC; t++) {
    FloeDType dt = numeric_dts[t];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int n = counts[k];
        if (sizes[s] == 70001 && n > 5 && dt != FLOE_F32) continue; /* keep the test quick */
        int64_t dims[2] = {sizes[s], 1};
        FloeTensor *in[17];
        double lo = dt == FLOE_U8 ? 0 : -100, hi = 100;
        if (dt == FLOE_I8 || dt == FLOE_U8) lo = dt == FLOE_U8 ? 0 : -128, hi = dt == FLOE_U8 ? 256 : 128;
        for (int i = 0; i < n; i++)
          in[i] = harness_random(dt, 2, dims, 100 * (uint64_t)t + 7 * (uint64_t)i + s, lo, hi);
        FloeTensor *out;
        char msg[512];
        floe_code rc = run_addn(in, n, false, &out, msg, sizeof msg);
        ck_assert_msg(rc == FLOE_OK, "AddN %s x%d: %s", floe_dtype_name(dt), n, msg);
        /* Integers: the exact sum, wrapped (i8/u8 sums overflow). Floats: in double. */
        double *want = malloc((size_t)sizes[s] * sizeof *want);
        ck_assert_ptr_nonnull(want);
        for (int64_t e = 0; e < sizes[s]; e++) {
          double sum = 0;
          for (int i = 0; i < n; i++) sum += harness_get(in[i], e);
          want[e] = wrap_to(dt, sum);
        }
        FloeTensor *wt = harness_from_doubles(dt, 2, dims, want);
        char what[96];
        snprintf(what, sizeof what, "AddN %s x%d n=%lld", floe_dtype_name(dt), n,
                 (long long)sizes[s]);
        /* Floats: n - 1 roundings (f32 for the halves' accumulator) of sums up to 100 n. */
        double ulp = dt == FLOE_F64 ? 0x1p-53 : 0x1p-24;
        harness_assert_close(out, wt, rtol_of(dt), is_float(dt) ? ulp * 100.0 * n * n : 0, what);
        floe_tensor_release(wt);
        floe_tensor_release(out);
        free(want);
        for (int i = 0; i < n; i++) floe_tensor_release(in[i]);
      }
  }
}
END_TEST

/* f32 sums are added left to right, as adding one input at a time would: exactly that. */
START_TEST(test_addn_order) {
  const int64_t n = 3000;
  for (int count = 2; count <= 9; count++) {
    FloeTensor *in[9];
    for (int i = 0; i < count; i++)
      in[i] = harness_random(FLOE_F32, 1, &n, 500 + (uint64_t)i, -1e4, 1e4);
    FloeTensor *out;
    char msg[512];
    ck_assert_msg(run_addn(in, count, false, &out, msg, sizeof msg) == FLOE_OK, "%s", msg);
    for (int64_t e = 0; e < n; e++) {
      float sum = (float)harness_get(in[0], e);
      for (int i = 1; i < count; i++) sum += (float)harness_get(in[i], e);
      ck_assert_msg((float)harness_get(out, e) == sum, "AddN x%d element %lld", count,
                    (long long)e);
    }
    floe_tensor_release(out);
    for (int i = 0; i < count; i++) floe_tensor_release(in[i]);
  }
}
END_TEST

START_TEST(test_addn_shapes) {
  /* Empty tensors of one shape: an empty sum of that shape. */
  for (int k = 1; k <= 3; k++) {
    FloeTensor *in[3];
    for (int i = 0; i < k; i++) in[i] = harness_tensor(FLOE_F32, 2, (int64_t[]){0, 4}, NULL);
    FloeTensor *out;
    char msg[512];
    ck_assert_msg(run_addn(in, k, false, &out, msg, sizeof msg) == FLOE_OK, "%s", msg);
    ck_assert_int_eq(floe_tensor_rank(out), 2);
    ck_assert_int_eq(floe_tensor_dim(out, 0), 0);
    ck_assert_int_eq(floe_tensor_dim(out, 1), 4);
    floe_tensor_release(out);
    for (int i = 0; i < k; i++) floe_tensor_release(in[i]);
  }
  /* Scalars. */
  FloeTensor *sc[3] = {harness_f64(0, NULL, (const double[]){1.5}),
                       harness_f64(0, NULL, (const double[]){-4}),
                       harness_f64(0, NULL, (const double[]){0.25})};
  FloeTensor *out;
  char msg[512];
  ck_assert_msg(run_addn(sc, 3, false, &out, msg, sizeof msg) == FLOE_OK, "%s", msg);
  ck_assert_int_eq(floe_tensor_rank(out), 0);
  ck_assert(harness_get(out, 0) == -2.25);
  floe_tensor_release(out);
  for (int i = 0; i < 3; i++) floe_tensor_release(sc[i]);
  /* Different shapes: rejected, naming both, by graph validation and by the kernel. */
  for (int unknown = 0; unknown < 2; unknown++) {
    FloeTensor *in[3] = {harness_tensor(FLOE_F32, 2, (int64_t[]){2, 3}, NULL),
                         harness_tensor(FLOE_F32, 2, (int64_t[]){2, 3}, NULL),
                         harness_tensor(FLOE_F32, 2, (int64_t[]){3, 2}, NULL)};
    memset(floe_tensor_data(in[0]), 0, floe_tensor_nbytes(in[0]));
    memset(floe_tensor_data(in[1]), 0, floe_tensor_nbytes(in[1]));
    memset(floe_tensor_data(in[2]), 0, floe_tensor_nbytes(in[2]));
    floe_code rc = run_addn(in, 3, unknown, &out, msg, sizeof msg);
    ck_assert_msg(rc != FLOE_OK && strstr(msg, "[2,3]") && strstr(msg, "[3,2]"),
                  "unknown=%d: %s: %s", unknown, floe_code_name(rc), msg);
    ck_assert_ptr_null(out);
    for (int i = 0; i < 3; i++) floe_tensor_release(in[i]);
  }
  /* Ranks differ ([4] vs [4,1]): the kernel names them too. */
  FloeTensor *in[2] = {harness_tensor(FLOE_I32, 1, (int64_t[]){4}, NULL),
                       harness_tensor(FLOE_I32, 2, (int64_t[]){4, 1}, NULL)};
  memset(floe_tensor_data(in[0]), 0, floe_tensor_nbytes(in[0]));
  memset(floe_tensor_data(in[1]), 0, floe_tensor_nbytes(in[1]));
  floe_code rc = run_addn(in, 2, true, &out, msg, sizeof msg);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "[4]") && strstr(msg, "[4,1]"),
                "%s: %s", floe_code_name(rc), msg);
  floe_tensor_release(in[0]);
  floe_tensor_release(in[1]);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* BiasAddGrad. */

static void set_data_format(FloeNodeBuilder *b, void *arg) {
  if (arg) floe_node_set_attr_string(b, "data_format", arg);
}

/* out[c] = sum of x over every dim but the channel dim (1 for NCHW, the last for NHWC). */
static double *ref_bias_grad(const FloeTensor *x, bool nchw, int64_t *channels) {
  int rank = floe_tensor_rank(x), cdim = nchw ? 1 : rank - 1;
  int64_t c = floe_tensor_dim(x, cdim), inner = 1;
  for (int d = cdim + 1; d < rank; d++) inner *= floe_tensor_dim(x, d);
  double *out = calloc((size_t)(c ? c : 1), sizeof *out);
  ck_assert_ptr_nonnull(out);
  for (int64_t i = 0; i < floe_tensor_num_elements(x); i++)
    out[(i / inner) % c] += harness_get(x, i);
  *channels = c;
  return out;
}

START_TEST(test_bias_add_grad) {
  typedef struct {
    bool nchw;
    int rank;
    int64_t dims[4];
  } B;
  const B cases[] = {
      {false, 2, {64, 1024}},      /* a dense layer's bias */
      {false, 4, {64, 28, 28, 32}}, /* a conv layer's bias */
      {false, 2, {5, 3}},          {false, 2, {1, 1}},       {false, 3, {7, 9, 1}},
      {false, 2, {130, 63}},       {false, 2, {129, 64}},    {false, 2, {3, 300}},
      {false, 2, {1000, 700}},     {false, 2, {0, 5}},       {false, 3, {4, 0, 5}},
      {false, 2, {5, 0}},          {true, 2, {6, 4}},        {true, 4, {2, 3, 5, 7}},
      {true, 4, {8, 16, 14, 14}},  {true, 3, {2, 3, 40000}}, {true, 4, {3, 2, 1, 1}},
      {true, 3, {0, 3, 4}},        {true, 4, {2, 3, 0, 5}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int t = 0; t < NUM_NUMERIC; t++) {
      FloeDType dt = numeric_dts[t];
      const B *bc = &cases[k];
      if (harness_count(bc->rank, bc->dims) > 100000 && dt != FLOE_F32 && dt != FLOE_I32)
        continue; /* the big shapes on two dtypes keep the test quick */
      double lo = dt == FLOE_U8 ? 0 : -100, hi = dt == FLOE_U8 ? 256 : 100;
      if (dt == FLOE_I8) lo = -128, hi = 128;
      if (is_float(dt)) lo = -1, hi = 1;
      FloeTensor *x = harness_random(dt, bc->rank, bc->dims, 31 * k + (uint64_t)t, lo, hi);
      const char *fmt = bc->nchw ? "NCHW" : k % 2 ? "NHWC" : NULL; /* NULL: the default */
      FloeTensor *out = run_ok("BiasAddGrad", &x, 1, set_data_format, (void *)fmt);
      int64_t c;
      double *want = ref_bias_grad(x, bc->nchw, &c);
      int64_t terms = c ? floe_tensor_num_elements(x) / c : 0;
      for (int64_t i = 0; i < c; i++) want[i] = wrap_to(dt, want[i]);
      FloeTensor *wt = harness_from_doubles(dt, 1, &c, want);
      char what[128];
      snprintf(what, sizeof what, "BiasAddGrad %s %s case %zu", bc->nchw ? "NCHW" : "NHWC",
               floe_dtype_name(dt), k);
      /* Floats: f32 partial sums of up to `terms` values in [-1, 1). */
      double atol = is_float(dt) ? atol_of(dt) * (1 + (double)terms / 16) : 0;
      harness_assert_close(out, wt, rtol_of(dt), atol, what);
      floe_tensor_release(wt);
      floe_tensor_release(out);
      floe_tensor_release(x);
      free(want);
    }
}
END_TEST

/* op on the inputs (one list argument when list) in a session of runtime rt. */
static FloeTensor *run_on(FloeRuntime *rt, const char *op, FloeTensor *const *in, int n,
                          bool list) {
  FloeGraph *g = floe_graph_new();
  FloeOutput ph[8];
  FloeFeed feeds[8];
  char names[8][8];
  ck_assert_int_le(n, 8);
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    ph[i] = floe_placeholder(g, names[i], floe_tensor_dtype(in[i]), floe_tensor_shape(in[i]));
    feeds[i] = (FloeFeed){names[i], in[i]};
  }
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  if (list)
    floe_node_add_input_list(b, ph, n);
  else
    for (int i = 0; i < n; i++) floe_node_add_input(b, ph[i]);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_graph_free(g);
  const char *fetch = "op";
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, feeds, n, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s: %s",
                op, floe_status_message(st));
  floe_session_free(s);
  floe_status_free(st);
  return out;
}

/* The sums split over the pool the same way whatever its size: identical bits. */
START_TEST(test_sums_thread_count_independent) {
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt[2];
  for (int k = 0; k < 2; k++) {
    FloeRuntimeOptions ro = {sizeof ro, NULL, NULL, k + 1, 1};
    rt[k] = floe_runtime_new(&ro, st);
    ck_assert_msg(rt[k] != NULL, "%s", floe_status_message(st));
  }
  const int64_t shapes[3][4] = {{64, 28, 28, 32}, {512, 1024, 1, 1}, {300000, 3, 1, 1}};
  for (int s = 0; s < 3; s++) {
    FloeTensor *x = harness_random(FLOE_F32, 4, shapes[s], 3 + (uint64_t)s, -1, 1);
    FloeTensor *a = run_on(rt[0], "BiasAddGrad", &x, 1, false);
    FloeTensor *b = run_on(rt[1], "BiasAddGrad", &x, 1, false);
    ck_assert_msg(same_bytes(a, b), "BiasAddGrad shape %d differs with 1 and 2 threads", s);
    floe_tensor_release(a);
    floe_tensor_release(b);
    floe_tensor_release(x);
  }
  FloeTensor *in[5];
  for (int i = 0; i < 5; i++)
    in[i] = harness_random(FLOE_F32, 1, (int64_t[]){300001}, 40 + (uint64_t)i, -1, 1);
  FloeTensor *a = run_on(rt[0], "AddN", in, 5, true), *b = run_on(rt[1], "AddN", in, 5, true);
  ck_assert_msg(same_bytes(a, b), "AddN differs with 1 and 2 threads");
  floe_tensor_release(a);
  floe_tensor_release(b);
  for (int i = 0; i < 5; i++) floe_tensor_release(in[i]);
  floe_runtime_free(rt[0]);
  floe_runtime_free(rt[1]);
  floe_status_free(st);
}
END_TEST

START_TEST(test_bias_add_grad_errors) {
  FloeTensor *out;
  char msg[512];
  FloeTensor *x = harness_random(FLOE_F32, 2, (int64_t[]){2, 3}, 1, 0, 1);
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op("BiasAddGrad", NULL, &x, 1, NULL, 0, set_data_format, (void *)"NWHC",
                                &out, 1, st);
  ck_assert_msg(rc != FLOE_OK && strstr(floe_status_message(st), "NWHC"), "%s",
                floe_status_message(st));
  floe_tensor_release(x);
  x = harness_random(FLOE_F32, 1, (int64_t[]){3}, 1, 0, 1);
  rc = run_op("BiasAddGrad", &x, 1, NULL, NULL, &out, msg, sizeof msg);
  ck_assert_msg(rc != FLOE_OK && strstr(msg, "[3]"), "%s", msg);
  floe_tensor_release(x);
  floe_status_free(st);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Stateless random. */

static void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/* Words of block b: key = seed[0], counter = (b, seed[1]) (random.c's layout with c = 0). */
static void block_words(uint64_t s0, uint64_t s1, uint64_t b, uint32_t w[4]) {
  w[0] = (uint32_t)b;
  w[1] = (uint32_t)(b >> 32);
  w[2] = (uint32_t)s1;
  w[3] = (uint32_t)(s1 >> 32);
  philox4x32_10(w, (uint32_t)s0, (uint32_t)(s0 >> 32));
}

/* Element i of StatelessRandomUniform (exact) or StatelessRandomNormal (the exact formula
 * from the same uniforms), before rounding to dt. */
static double ref_stateless(bool normal, FloeDType dt, uint64_t s0, uint64_t s1, int64_t i) {
  uint32_t w[4];
  if (dt == FLOE_F64) {
    block_words(s0, s1, (uint64_t)(i / 2), w);
    uint64_t a = (uint64_t)w[0] << 32 | w[1], b = (uint64_t)w[2] << 32 | w[3];
    if (!normal) return (double)(((i & 1) ? b : a) >> 11) * 0x1p-53;
    double u1 = (double)((a >> 11) + 1) * 0x1p-53, u2 = (double)(b >> 11) * 0x1p-53;
    double r = sqrt(-2 * log(u1)), th = 2 * M_PI * u2;
    return (i & 1) ? r * sin(th) : r * cos(th);
  }
  block_words(s0, s1, (uint64_t)(i / 4), w);
  if (!normal) {
    int bits = dt == FLOE_F16 ? 11 : dt == FLOE_BF16 ? 8 : 24;
    return ldexp((double)(w[i % 4] >> (32 - bits)), -bits);
  }
  int p = (int)(i % 4) & ~1;
  double u1 = (double)((w[p] >> 8) + 1) * 0x1p-24, u2 = (double)(w[p + 1] >> 8) * 0x1p-24;
  double r = sqrt(-2 * log(u1)), th = 2 * M_PI * u2;
  return (i & 1) ? r * sin(th) : r * cos(th);
}

/* One run of op(shape = [n], seed) on runtime rt (NULL: the default); seed_dt i32 or i64. */
static FloeTensor *stateless(FloeRuntime *rt, const char *op, FloeDType dt, int64_t n,
                             FloeDType seed_dt, int64_t s0, int64_t s1) {
  FloeGraph *g = floe_graph_new();
  int64_t one = 1, two = 2;
  FloeTensor *shape = harness_i64(1, &one, &n);
  FloeTensor *seed = seed_dt == FLOE_I32 ? harness_i32(1, &two, (int32_t[]){(int32_t)s0, (int32_t)s1})
                                         : harness_i64(1, &two, (int64_t[]){s0, s1});
  FloeOutput sh = floe_const(g, "shape", shape), se = floe_const(g, "seed", seed);
  floe_tensor_release(shape);
  floe_tensor_release(seed);
  FloeNodeBuilder *b = floe_node_begin(g, op, "rnd");
  floe_node_add_input(b, sh);
  floe_node_add_input(b, se);
  floe_node_set_attr_type(b, "dtype", dt);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_graph_free(g);
  const char *fetch = "rnd";
  FloeTensor *out = NULL;
  floe_code rc = floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", op, floe_status_message(st));
  /* A second run of the same session draws the same numbers (no state). */
  FloeTensor *again = NULL;
  rc = floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &again, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", op, floe_status_message(st));
  ck_assert(floe_tensor_nbytes(out) == floe_tensor_nbytes(again));
  ck_assert_msg(floe_tensor_nbytes(out) == 0 || memcmp(floe_tensor_data(out),
                                                       floe_tensor_data(again),
                                                       floe_tensor_nbytes(out)) == 0,
                "%s: a second run differs", op);
  floe_tensor_release(again);
  floe_session_free(s);
  floe_status_free(st);
  return out;
}

static const char *const stateless_ops[2] = {"StatelessRandomUniform", "StatelessRandomNormal"};

START_TEST(test_philox_known_answer) {
  /* Random123's kat_vectors, philox4x32 with 10 rounds: pi's digits as counter and key. */
  uint32_t c[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  philox4x32_10(c, 0xa4093822, 0x299f31d0);
  const uint32_t want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  for (int k = 0; k < 4; k++) ck_assert_uint_eq(c[k], want[k]);
}
END_TEST

START_TEST(test_stateless_values) {
  const int64_t sizes[] = {0, 1, 5, 1000, 40001};
  const int64_t seeds[3][2] = {{1, 2}, {-5, 123456789012345}, {0, 0}};
  for (int o = 0; o < 2; o++)
    for (int t = 0; t < NUM_FLOAT; t++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int k = 0; k < 3; k++) {
          FloeDType dt = float_dts[t];
          int64_t n = sizes[s];
          FloeTensor *y = stateless(NULL, stateless_ops[o], dt, n, FLOE_I64, seeds[k][0],
                                    seeds[k][1]);
          ck_assert_int_eq(floe_tensor_dtype(y), dt);
          ck_assert_int_eq(floe_tensor_rank(y), 1);
          ck_assert_int_eq(floe_tensor_dim(y, 0), n);
          double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
          ck_assert_ptr_nonnull(want);
          for (int64_t i = 0; i < n; i++)
            want[i] = ref_stateless(o == 1, dt, (uint64_t)seeds[k][0], (uint64_t)seeds[k][1], i);
          FloeTensor *wt = harness_from_doubles(dt, 1, &n, want);
          char what[128];
          snprintf(what, sizeof what, "%s %s n=%lld seed %d", stateless_ops[o],
                   floe_dtype_name(dt), (long long)n, k);
          /* Uniforms are exact; normals are f32 arithmetic (~1e-6 of a radius up to 6). */
          double tol = o == 0 ? 0 : dt == FLOE_F64 ? 1e-12 : dt == FLOE_F32 ? 4e-6 : rtol_of(dt);
          harness_assert_close(y, wt, tol, tol, what);
          floe_tensor_release(wt);
          floe_tensor_release(y);
          free(want);
        }
}
END_TEST

/* Sets the stateful op's dtype and seeds. */
typedef struct StatefulArgs {
  FloeDType dt;
  int64_t seed, seed2;
} StatefulArgs;

static void set_stateful(FloeNodeBuilder *b, void *arg) {
  const StatefulArgs *a = arg;
  floe_node_set_attr_type(b, "dtype", a->dt);
  floe_node_set_attr_int(b, "seed", a->seed);
  floe_node_set_attr_int(b, "seed2", a->seed2);
}

START_TEST(test_stateless_matches_stateful) {
  /* The first run of RandomUniform / RandomNormal with seed, seed2: the same bytes. */
  const char *stateful[2] = {"RandomUniform", "RandomNormal"};
  int64_t n = 10007;
  for (int o = 0; o < 2; o++)
    for (int t = 0; t < NUM_FLOAT; t++) {
      StatefulArgs a = {float_dts[t], 42, -9};
      FloeTensor *shape = harness_i64(1, (int64_t[]){1}, &n), *want;
      FloeStatus *st = floe_status_new();
      floe_code rc = harness_run_op(stateful[o], NULL, &shape, 1, NULL, 0, set_stateful, &a,
                                    &want, 1, st);
      ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
      FloeTensor *y = stateless(NULL, stateless_ops[o], float_dts[t], n, FLOE_I32, 42, -9);
      ck_assert_msg(same_bytes(y, want), "%s %s differs from %s", stateless_ops[o],
                    floe_dtype_name(float_dts[t]), stateful[o]);
      floe_tensor_release(y);
      floe_tensor_release(want);
      floe_tensor_release(shape);
      floe_status_free(st);
    }
}
END_TEST

START_TEST(test_stateless_determinism) {
  const int64_t n = 1000003;
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt[2];
  for (int k = 0; k < 2; k++) {
    FloeRuntimeOptions ro = {sizeof ro, NULL, NULL, k + 1, 1};
    rt[k] = floe_runtime_new(&ro, st);
    ck_assert_msg(rt[k] != NULL, "%s", floe_status_message(st));
  }
  const FloeDType dts[2] = {FLOE_F32, FLOE_F64};
  for (int o = 0; o < 2; o++)
    for (int t = 0; t < 2; t++) {
      /* 1 and 2 threads: the same bytes; i32 and i64 seeds of equal value: the same. */
      FloeTensor *a = stateless(rt[0], stateless_ops[o], dts[t], n, FLOE_I64, 7, 8);
      FloeTensor *b = stateless(rt[1], stateless_ops[o], dts[t], n, FLOE_I32, 7, 8);
      ck_assert_msg(same_bytes(a, b), "%s %s: 1 and 2 threads differ", stateless_ops[o],
                    floe_dtype_name(dts[t]));
      /* Either seed changes the numbers. */
      FloeTensor *c = stateless(rt[1], stateless_ops[o], dts[t], n, FLOE_I64, 7, 9);
      FloeTensor *d = stateless(rt[1], stateless_ops[o], dts[t], n, FLOE_I64, 6, 8);
      ck_assert(!same_bytes(a, c) && !same_bytes(a, d) && !same_bytes(c, d));
      /* The far end against the reference. */
      for (int64_t i = n - 5; i < n; i++) {
        double want = ref_stateless(o == 1, dts[t], 7, 8, i);
        ck_assert(fabs(harness_get(b, i) - want) <= 4e-6 * (1 + fabs(want)));
      }
      floe_tensor_release(a);
      floe_tensor_release(b);
      floe_tensor_release(c);
      floe_tensor_release(d);
    }
  floe_runtime_free(rt[0]);
  floe_runtime_free(rt[1]);
  floe_status_free(st);
}
END_TEST

START_TEST(test_stateless_statistics) {
  const int64_t n = 100000;
  for (int t = 0; t < NUM_FLOAT; t++) {
    FloeDType dt = float_dts[t];
    FloeTensor *u = stateless(NULL, "StatelessRandomUniform", dt, n, FLOE_I64, 2024, 3);
    FloeTensor *z = stateless(NULL, "StatelessRandomNormal", dt, n, FLOE_I64, 2024, 3);
    double su = 0, lo = INFINITY, hi = -INFINITY, sz = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = harness_get(u, i);
      su += v;
      lo = fmin(lo, v);
      hi = fmax(hi, v);
      double w = harness_get(z, i);
      sz += w;
      sq += w * w;
    }
    /* sd(mean) of a uniform: 0.29 / sqrt(n) = 0.9e-3; of a normal 3.2e-3; sd(var) 4.5e-3. */
    ck_assert_msg(lo >= 0 && hi < 1, "%s uniform range [%g, %g]", floe_dtype_name(dt), lo, hi);
    ck_assert_msg(fabs(su / n - 0.5) < 0.005, "%s uniform mean %g", floe_dtype_name(dt),
                  su / n);
    ck_assert_msg(fabs(sz / n) < 0.016, "%s normal mean %g", floe_dtype_name(dt), sz / n);
    ck_assert_msg(fabs(sq / n - 1) < 0.025, "%s normal variance %g", floe_dtype_name(dt),
                  sq / n);
    floe_tensor_release(u);
    floe_tensor_release(z);
  }
}
END_TEST

static void set_f32_dtype(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
}

START_TEST(test_stateless_errors) {
  /* seed must be a 2-element i32/i64 vector; the message names what was given. */
  int64_t n = 4;
  FloeTensor *shape = harness_i64(1, (int64_t[]){1}, &n);
  FloeTensor *bad[3] = {harness_i64(1, (int64_t[]){3}, (int64_t[]){1, 2, 3}),
                        harness_i32(2, (int64_t[]){1, 2}, (int32_t[]){1, 2}),
                        harness_i64(0, NULL, (int64_t[]){1})};
  const char *named[3] = {"[3]", "[1,2]", "[]"};
  for (int o = 0; o < 2; o++)
    for (int k = 0; k < 3; k++) {
      FloeTensor *in[2] = {shape, bad[k]}, *out;
      char msg[512];
      floe_code rc = run_op(stateless_ops[o], in, 2, set_f32_dtype, NULL, &out, msg, sizeof msg);
      ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "seed") && strstr(msg, named[k]),
                    "%s seed %s: %s: %s", stateless_ops[o], named[k], floe_code_name(rc), msg);
      ck_assert_ptr_null(out);
    }
  /* A negative size. */
  FloeTensor *neg = harness_i64(1, (int64_t[]){2}, (int64_t[]){3, -1});
  FloeTensor *seed = harness_i64(1, (int64_t[]){2}, (int64_t[]){1, 2});
  FloeTensor *in[2] = {neg, seed}, *out;
  char msg[512];
  floe_code rc = run_op("StatelessRandomNormal", in, 2, set_f32_dtype, NULL, &out, msg,
                        sizeof msg);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(msg, "[3,-1]"), "%s", msg);
  for (int k = 0; k < 3; k++) floe_tensor_release(bad[k]);
  floe_tensor_release(shape);
  floe_tensor_release(neg);
  floe_tensor_release(seed);
}
END_TEST

/* ---------------------------------------------------------------------------------- */

static Suite *grad_ops_suite(void) {
  Suite *s = suite_create("grad_ops");
  TCase *tc = tcase_create("elementwise");
  tcase_add_test(tc, test_stop_gradient);
  tcase_add_test(tc, test_unary_math);
  tcase_add_test(tc, test_unary_details);
  tcase_add_test(tc, test_grad_reference);
  tcase_add_test(tc, test_grad_finite_difference);
  tcase_add_test(tc, test_grad_limits);
  tcase_add_test(tc, test_grad_errors);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  tc = tcase_create("sums");
  tcase_add_test(tc, test_addn);
  tcase_add_test(tc, test_addn_order);
  tcase_add_test(tc, test_addn_shapes);
  tcase_add_test(tc, test_bias_add_grad);
  tcase_add_test(tc, test_bias_add_grad_errors);
  tcase_add_test(tc, test_sums_thread_count_independent);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  tc = tcase_create("stateless_random");
  tcase_add_test(tc, test_philox_known_answer);
  tcase_add_test(tc, test_stateless_values);
  tcase_add_test(tc, test_stateless_matches_stateful);
  tcase_add_test(tc, test_stateless_determinism);
  tcase_add_test(tc, test_stateless_statistics);
  tcase_add_test(tc, test_stateless_errors);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(grad_ops_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
