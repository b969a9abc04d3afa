/* SPDX-License-Identifier: Apache-2.0 */
/* test_matmul.c - MatMul, BatchMatMul and BiasAdd against plain reference loops. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---------------------------------------------------------------------------------- */
/* Helpers. */

/* A tensor of dtype dt holding vals (rounded / wrapped the way a kernel's store would). */
static FloeTensor *from_doubles(FloeDType dt, int rank, const int64_t *dims, const double *vals) {
  FloeTensor *t = harness_tensor(dt, rank, dims, NULL);
  void *d = floe_tensor_data(t);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) {
    double v = vals[i];
    switch (dt) {
      case FLOE_F32: ((float *)d)[i] = (float)v; break;
      case FLOE_F64: ((double *)d)[i] = v; break;
      case FLOE_F16: ((uint16_t *)d)[i] = floe_f32_to_f16((float)v); break;
      case FLOE_BF16: ((uint16_t *)d)[i] = floe_f32_to_bf16((float)v); break;
      case FLOE_I8: ((int8_t *)d)[i] = (int8_t)(int64_t)v; break;
      case FLOE_U8: ((uint8_t *)d)[i] = (uint8_t)(int64_t)v; break;
      case FLOE_I32: ((int32_t *)d)[i] = (int32_t)(int64_t)v; break;
      case FLOE_I64: ((int64_t *)d)[i] = (int64_t)v; break;
      default: ck_abort_msg("from_doubles: dtype %s", floe_dtype_name(dt));
    }
  }
  return t;
}

static double *to_doubles(const FloeTensor *t) {
  int64_t n = floe_tensor_num_elements(t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) v[i] = harness_get(t, i);
  return v;
}

static void tol_for(FloeDType dt, double *rtol, double *atol) {
  switch (dt) {
    case FLOE_F64: *rtol = 1e-12; *atol = 1e-12; break;
    case FLOE_F16: *rtol = 2e-3; *atol = 2e-3; break;
    case FLOE_BF16: *rtol = 1.6e-2; *atol = 1.6e-2; break;
    default: *rtol = 1e-4; *atol = 1e-4; break;
  }
}

typedef struct Flags {
  const char *a, *b; /* attribute names */
  int va, vb;
} Flags;

static void set_flags(FloeNodeBuilder *b, void *arg) {
  const Flags *f = arg;
  floe_node_set_attr_bool(b, f->a, f->va);
  floe_node_set_attr_bool(b, f->b, f->vb);
}

static void set_format(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_string(b, "data_format", arg);
}

/* Runs op with both inputs fed through placeholders of unknown shape, so that only the kernel
 * sees the shapes. Returns the graph's or the run's code (message in st). */
static floe_code run_unknown_shapes(const char *op, FloeTensor *const *ins,
                                    harness_attrs_fn attrs, void *arg, FloeTensor **out,
                                    FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  floe_node_add_input(b, floe_placeholder(g, "x", floe_tensor_dtype(ins[0]), floe_shape_unknown()));
  floe_node_add_input(b, floe_placeholder(g, "y", floe_tensor_dtype(ins[1]), floe_shape_unknown()));
  if (attrs) attrs(b, arg);
  floe_node_finish(b);
  FloeFeed feeds[2] = {{"x", ins[0]}, {"y", ins[1]}};
  const char *fetch = "op";
  floe_code rc = harness_run_graph(g, NULL, feeds, 2, &fetch, 1, out, st);
  floe_graph_free(g);
  return rc;
}

/* Runs op on x, y twice, with static shapes (checked when the graph is built) and with
 * unknown ones (checked by the kernel); both must fail with INVALID_ARGUMENT and a message
 * containing n1 and n2 (when non-NULL). Consumes x and y. */
static void expect_invalid(const char *op, FloeTensor *x, FloeTensor *y, harness_attrs_fn attrs,
                           void *arg, const char *n1, const char *n2) {
  FloeTensor *ins[2] = {x, y};
  for (int unknown = 0; unknown < 2; unknown++) {
    FloeTensor *out = NULL;
    FloeStatus *st = floe_status_new();
    floe_code rc = unknown ? run_unknown_shapes(op, ins, attrs, arg, &out, st)
                           : harness_run_op(op, NULL, ins, 2, NULL, 0, attrs, arg, &out, 1, st);
    const char *msg = floe_status_message(st), *how = unknown ? "unknown shapes" : "known shapes";
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s (%s): code %s (%s), want INVALID_ARGUMENT",
                  op, how, floe_code_name(rc), msg);
    ck_assert_ptr_null(out);
    if (n1) ck_assert_msg(strstr(msg, n1), "%s (%s): \"%s\" lacks \"%s\"", op, how, msg, n1);
    if (n2) ck_assert_msg(strstr(msg, n2), "%s (%s): \"%s\" lacks \"%s\"", op, how, msg, n2);
    floe_status_free(st);
  }
  floe_tensor_release(x);
  floe_tensor_release(y);
}

/* ---------------------------------------------------------------------------------- */
/* Reference product: x [bx..., M, K] y [by..., K, N] (after adj) -> [broadcast..., M, N]. */

static FloeTensor *ref_product(const FloeTensor *x, const FloeTensor *y, bool ax, bool ay) {
  int xr = floe_tensor_rank(x), yr = floe_tensor_rank(y);
  const int64_t *xd = floe_tensor_dims(x), *yd = floe_tensor_dims(y);
  int64_t m = ax ? xd[xr - 1] : xd[xr - 2], k = ax ? xd[xr - 2] : xd[xr - 1];
  int64_t n = ay ? yd[yr - 2] : yd[yr - 1];
  int xb = xr - 2, yb = yr - 2, nb = xb > yb ? xb : yb;
  int64_t od[FLOE_MAX_DIMS], batch = 1;
  for (int d = 0; d < nb; d++) {
    int64_t a = d - (nb - xb) >= 0 ? xd[d - (nb - xb)] : 1;
    int64_t b = d - (nb - yb) >= 0 ? yd[d - (nb - yb)] : 1;
    od[d] = a == 1 ? b : a;
    batch *= od[d];
  }
  od[nb] = m;
  od[nb + 1] = n;
  double *xv = to_doubles(x), *yv = to_doubles(y);
  double *z = calloc((size_t)(batch * m * n + 1), sizeof(double));
  for (int64_t bi = 0; bi < batch; bi++) {
    /* batch index -> element offsets of the x and y matrices */
    int64_t rest = bi, xi = 0, yi = 0, xs = 1, ys = 1;
    for (int d = nb - 1; d >= 0; d--) {
      int64_t idx = rest % od[d];
      rest /= od[d];
      int64_t a = d - (nb - xb) >= 0 ? xd[d - (nb - xb)] : 1;
      int64_t b = d - (nb - yb) >= 0 ? yd[d - (nb - yb)] : 1;
      xi += (a == 1 ? 0 : idx) * xs;
      yi += (b == 1 ? 0 : idx) * ys;
      xs *= a;
      ys *= b;
    }
    const double *xm = xv + xi * m * k, *ym = yv + yi * k * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t l = 0; l < k; l++)
          acc += (ax ? xm[l * m + i] : xm[i * k + l]) * (ay ? ym[j * k + l] : ym[l * n + j]);
        z[(bi * m + i) * n + j] = acc;
      }
  }
  FloeTensor *out = from_doubles(floe_tensor_dtype(x), nb + 2, od, z);
  free(xv);
  free(yv);
  free(z);
  return out;
}

/* Runs op on x, y with its two flags and compares with the reference; consumes x and y. */
static void check_product(const char *op, FloeTensor *x, FloeTensor *y, int fa, int fb,
                          const char *what) {
  bool batch = strcmp(op, "BatchMatMul") == 0;
  Flags f = {batch ? "adj_x" : "transpose_a", batch ? "adj_y" : "transpose_b", fa, fb};
  FloeTensor *ins[2] = {x, y}, *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, NULL, ins, 2, NULL, 0, set_flags, &f, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  FloeTensor *want = ref_product(x, y, fa, fb);
  double rtol, atol;
  tol_for(floe_tensor_dtype(x), &rtol, &atol);
  harness_assert_close(out, want, rtol, atol, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_status_free(st);
}

/* MatMul of op(a) [m,k] by op(b) [k,n] with random inputs. */
static void check_matmul(FloeDType dt, int64_t m, int64_t k, int64_t n, int ta, int tb,
                         uint64_t seed) {
  int64_t ad[2] = {ta ? k : m, ta ? m : k}, bd[2] = {tb ? n : k, tb ? k : n};
  char what[128];
  snprintf(what, sizeof what, "MatMul %s m=%lld k=%lld n=%lld ta=%d tb=%d", floe_dtype_name(dt),
           (long long)m, (long long)k, (long long)n, ta, tb);
  check_product("MatMul", harness_random(dt, 2, ad, seed, -1, 1),
                harness_random(dt, 2, bd, seed + 1, -1, 1), ta, tb, what);
}

/* ---------------------------------------------------------------------------------- */
/* MatMul. */

static const int64_t mkn[][3] = {
    {3, 4, 5}, {1, 7, 9}, {6, 5, 1}, {1, 1, 1}, {1, 9, 1}, {17, 33, 9}, {64, 64, 64}, {2, 130, 3},
    {1, 130, 70}, {70, 130, 1}, /* vector products above the tiny cut-off (f32: oneDNN) */
};

START_TEST(test_matmul_f32) {
  for (size_t i = 0; i < sizeof mkn / sizeof mkn[0]; i++)
    for (int t = 0; t < 4; t++)
      check_matmul(FLOE_F32, mkn[i][0], mkn[i][1], mkn[i][2], t & 1, t >> 1, 10 + i);
}
END_TEST

START_TEST(test_matmul_dtypes) {
  const FloeDType dts[] = {FLOE_F64, FLOE_F16, FLOE_BF16};
  for (size_t d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof mkn / sizeof mkn[0]; i++)
      for (int t = 0; t < 4; t++)
        check_matmul(dts[d], mkn[i][0], mkn[i][1], mkn[i][2], t & 1, t >> 1, 100 + i);
}
END_TEST

START_TEST(test_matmul_large) {
  /* Big enough for OpenBLAS's own threads. */
  check_matmul(FLOE_F32, 200, 300, 250, 0, 0, 7);
  check_matmul(FLOE_F32, 200, 300, 250, 1, 1, 8);
  check_matmul(FLOE_F64, 129, 257, 131, 0, 1, 9);
}
END_TEST

START_TEST(test_matmul_split) {
  /* Over 2^24 multiply-adds: cut into blocks of columns (N > M) or rows (M > N), here of
   * unequal size (512 + 488), each its own single-threaded product on the pool; every
   * transpose combination, as the dense layers' three products use them. */
  for (int t = 0; t < 4; t++) {
    check_matmul(FLOE_F32, 70, 300, 1000, t & 1, t >> 1, 20 + t);
    check_matmul(FLOE_F32, 1000, 300, 70, t & 1, t >> 1, 30 + t);
    /* a few rows against a large B (a classifier at batch 1 and 3): bound by reading B,
     * cut into blocks of columns below 2^24 multiply-adds too */
    check_matmul(FLOE_F32, 1, 1280, 1000, t & 1, t >> 1, 40 + t);
    check_matmul(FLOE_F32, 3, 576, 1024, t & 1, t >> 1, 50 + t);
  }
}
END_TEST

START_TEST(test_matmul_empty) {
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  for (size_t d = 0; d < 3; d++) {
    check_matmul(dts[d], 3, 0, 4, 0, 0, 1); /* empty K: all zeros */
    check_matmul(dts[d], 3, 0, 4, 1, 1, 1);
    check_matmul(dts[d], 1, 0, 4, 0, 0, 1);
    check_matmul(dts[d], 0, 5, 4, 0, 0, 1);
    check_matmul(dts[d], 3, 5, 0, 0, 1, 1);
    check_matmul(dts[d], 0, 0, 0, 1, 0, 1);
  }
}
END_TEST

START_TEST(test_matmul_errors) {
  int64_t a[2] = {2, 3}, b[2] = {4, 5}, c[3] = {2, 3, 4}, d[2] = {3, 4};
  expect_invalid("MatMul", harness_random(FLOE_F32, 2, a, 1, 0, 1),
                 harness_random(FLOE_F32, 2, b, 2, 0, 1), NULL, NULL, "[2,3]", "[4,5]");
  /* [2,3] x [3,4] is fine, but not once a is transposed. */
  Flags ta = {"transpose_a", "transpose_b", 1, 0};
  expect_invalid("MatMul", harness_random(FLOE_F32, 2, a, 1, 0, 1),
                 harness_random(FLOE_F32, 2, d, 2, 0, 1), set_flags, &ta, "[2,3]", "[3,4]");
  expect_invalid("MatMul", harness_random(FLOE_F32, 3, c, 1, 0, 1),
                 harness_random(FLOE_F32, 2, b, 2, 0, 1), NULL, NULL, "[2,3,4]", NULL);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* BatchMatMul. */

typedef struct BatchCase {
  int xr, yr;
  int64_t xd[5], yd[5]; /* as stored (adj applied by the flags) */
  int ax, ay;
} BatchCase;

static const BatchCase batch_cases[] = {
    {3, 3, {2, 3, 4}, {2, 4, 5}, 0, 0},
    {3, 3, {2, 4, 3}, {2, 4, 5}, 1, 0},
    {3, 3, {2, 3, 4}, {2, 5, 4}, 0, 1},
    {3, 3, {2, 4, 3}, {2, 5, 4}, 1, 1},
    {4, 3, {2, 1, 3, 4}, {5, 4, 6}, 0, 0},   /* broadcast both ways */
    {2, 3, {3, 4}, {2, 4, 5}, 0, 0},         /* x has no batch dims */
    {3, 2, {4, 3, 4}, {4, 5}, 0, 0},         /* y shared: folds into one GEMM */
    {3, 2, {4, 4, 3}, {4, 5}, 1, 0},         /* y shared, x transposed: no fold */
    {5, 3, {2, 1, 3, 2, 3}, {3, 3, 4}, 0, 0},
    {3, 3, {64, 8, 8}, {64, 8, 8}, 0, 1},    /* many small products: spread over the pool */
    {3, 3, {2, 70, 80}, {2, 80, 90}, 0, 0},  /* large products: OpenBLAS threads */
    {3, 3, {5, 1, 6}, {5, 6, 7}, 0, 0},      /* M = 1 */
    {3, 3, {5, 6, 7}, {5, 1, 7}, 0, 1},      /* N = 1 */
    {2, 2, {3, 4}, {4, 5}, 0, 0},
    {3, 3, {0, 3, 4}, {1, 4, 5}, 0, 0},      /* empty batch */
    {3, 3, {2, 3, 0}, {2, 0, 5}, 0, 0},      /* empty K */
    {4, 4, {1, 1, 1, 1}, {1, 1, 1, 1}, 1, 1},
};

START_TEST(test_batch_matmul) {
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
  const BatchCase *c = &batch_cases[_i];
  for (size_t d = 0; d < 4; d++) {
    char what[96];
    snprintf(what, sizeof what, "BatchMatMul case %d %s", _i, floe_dtype_name(dts[d]));
    check_product("BatchMatMul", harness_random(dts[d], c->xr, c->xd, 40 + _i, -1, 1),
                  harness_random(dts[d], c->yr, c->yd, 80 + _i, -1, 1), c->ax, c->ay, what);
  }
}
END_TEST

START_TEST(test_batch_matmul_errors) {
  int64_t a[3] = {2, 3, 4}, b[3] = {3, 4, 5}, c[3] = {2, 5, 6}, v[1] = {4};
  expect_invalid("BatchMatMul", harness_random(FLOE_F32, 3, a, 1, 0, 1),
                 harness_random(FLOE_F32, 3, b, 2, 0, 1), NULL, NULL, "[2,3,4]", "[3,4,5]");
  expect_invalid("BatchMatMul", harness_random(FLOE_F32, 3, a, 1, 0, 1),
                 harness_random(FLOE_F32, 3, c, 2, 0, 1), NULL, NULL, "[2,3,4]", "[2,5,6]");
  expect_invalid("BatchMatMul", harness_random(FLOE_F32, 3, a, 1, 0, 1),
                 harness_random(FLOE_F32, 1, v, 2, 0, 1), NULL, NULL, "[4]", NULL);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* BiasAdd. */

/* value + bias along channel dim cdim, stored as dt would store it (integers wrap). */
static FloeTensor *ref_bias(const FloeTensor *v, const FloeTensor *b, bool nchw) {
  int rank = floe_tensor_rank(v);
  const int64_t *d = floe_tensor_dims(v);
  int cdim = nchw ? 1 : rank - 1;
  int64_t inner = 1, n = floe_tensor_num_elements(v);
  for (int i = cdim + 1; i < rank; i++) inner *= d[i];
  double *out = malloc((size_t)(n + 1) * sizeof(double));
  FloeDType dt = floe_tensor_dtype(v);
  for (int64_t i = 0; i < n; i++) {
    double s = harness_get(v, i) + harness_get(b, (i / inner) % d[cdim]);
    if (dt == FLOE_I8) s = (int8_t)(int64_t)s;
    if (dt == FLOE_U8) s = (uint8_t)(int64_t)s;
    if (dt == FLOE_I32) s = (int32_t)(uint32_t)(int64_t)s;
    out[i] = s;
  }
  FloeTensor *t = from_doubles(dt, rank, d, out);
  free(out);
  return t;
}

static void check_bias(FloeDType dt, int rank, const int64_t *dims, bool nchw, double lo,
                       double hi, uint64_t seed) {
  int64_t c = dims[nchw ? 1 : rank - 1];
  FloeTensor *v = harness_random(dt, rank, dims, seed, lo, hi);
  FloeTensor *b = harness_random(dt, 1, &c, seed + 7, lo, hi);
  FloeTensor *ins[2] = {v, b}, *out = NULL;
  FloeStatus *st = floe_status_new();
  char what[128], sh[64];
  FloeShape s = floe_tensor_shape(v);
  snprintf(what, sizeof what, "BiasAdd %s %s %s", floe_dtype_name(dt),
           floe_shape_str(&s, sh, sizeof sh), nchw ? "NCHW" : "NHWC");
  floe_code rc = harness_run_op("BiasAdd", NULL, ins, 2, NULL, 0, set_format,
                                (void *)(nchw ? "NCHW" : "NHWC"), &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  FloeTensor *want = ref_bias(v, b, nchw);
  double rtol, atol;
  tol_for(dt, &rtol, &atol);
  harness_assert_close(out, want, dt == FLOE_F16 || dt == FLOE_BF16 ? rtol : 0,
                       dt == FLOE_F16 || dt == FLOE_BF16 ? atol : 0, what);
  floe_tensor_release(out);
  floe_tensor_release(want);
  floe_tensor_release(v);
  floe_tensor_release(b);
  floe_status_free(st);
}

START_TEST(test_bias_add) {
  const int64_t r1[1] = {6}, r2[2] = {5, 7}, r3[3] = {2, 3, 7}, r4[4] = {2, 3, 4, 5}, r5[5] = {2, 3, 2, 2, 3};
  const int64_t big_nhwc[3] = {64, 33, 40}, big_nchw[4] = {4, 16, 32, 33};
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I32, FLOE_I64};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    for (int nchw = 0; nchw < 2; nchw++) {
      check_bias(dts[i], 2, r2, nchw, -50, 50, 1);
      check_bias(dts[i], 3, r3, nchw, -50, 50, 2);
      check_bias(dts[i], 4, r4, nchw, -50, 50, 3);
      check_bias(dts[i], 5, r5, nchw, -50, 50, 4);
    }
    check_bias(dts[i], 1, r1, false, -50, 50, 7); /* NHWC takes any rank >= 1 */
    check_bias(dts[i], 3, big_nhwc, false, -50, 50, 5);
    check_bias(dts[i], 4, big_nchw, true, -50, 50, 6);
  }
}
END_TEST

START_TEST(test_bias_add_wrap) {
  const int64_t d[2] = {9, 5};
  /* Sums leave the type's range: integers wrap like the C types. */
  check_bias(FLOE_I8, 2, d, false, -128, 128, 1);
  check_bias(FLOE_U8, 2, d, false, 0, 256, 2);
  check_bias(FLOE_I8, 2, d, true, -128, 128, 3);
  check_bias(FLOE_I32, 2, d, false, -2147483648.0, 2147483648.0, 4);
}
END_TEST

START_TEST(test_bias_add_empty) {
  const int64_t e1[2] = {0, 5}, e2[2] = {3, 0}, e3[4] = {2, 3, 0, 4};
  check_bias(FLOE_F32, 2, e1, false, -1, 1, 1);
  check_bias(FLOE_F32, 2, e2, false, -1, 1, 1);
  check_bias(FLOE_F32, 4, e3, true, -1, 1, 1);
  check_bias(FLOE_I64, 4, e3, false, -1, 1, 1);
}
END_TEST

START_TEST(test_bias_add_errors) {
  int64_t v[2] = {2, 3}, b4[1] = {4}, b2[2] = {1, 3}, v1[1] = {3}, v4[4] = {2, 3, 4, 5};
  expect_invalid("BiasAdd", harness_random(FLOE_F32, 2, v, 1, 0, 1),
                 harness_random(FLOE_F32, 1, b4, 2, 0, 1), NULL, NULL, "[2,3]", "[4]");
  expect_invalid("BiasAdd", harness_random(FLOE_F32, 2, v, 1, 0, 1),
                 harness_random(FLOE_F32, 2, b2, 2, 0, 1), NULL, NULL, "[1,3]", NULL);
  expect_invalid("BiasAdd", harness_random(FLOE_F32, 1, v1, 1, 0, 1),
                 harness_random(FLOE_F32, 1, v1, 2, 0, 1), set_format, (void *)"NCHW", "[3]",
                 NULL);
  /* NCHW wants dim 1 (3), not the last dim (5). */
  int64_t b5[1] = {5};
  expect_invalid("BiasAdd", harness_random(FLOE_F32, 4, v4, 1, 0, 1),
                 harness_random(FLOE_F32, 1, b5, 2, 0, 1), set_format, (void *)"NCHW", "[2,3,4,5]",
                 "[5]");
  expect_invalid("BiasAdd", harness_random(FLOE_F32, 4, v4, 1, 0, 1),
                 harness_random(FLOE_F32, 1, b5, 2, 0, 1), set_format, (void *)"NWHC", "NWHC", NULL);
}
END_TEST

static Suite *matmul_suite(void) {
  Suite *s = suite_create("matmul");
  TCase *tc = tcase_create("matmul");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_matmul_f32);
  tcase_add_test(tc, test_matmul_dtypes);
  tcase_add_test(tc, test_matmul_large);
  tcase_add_test(tc, test_matmul_split);
  tcase_add_test(tc, test_matmul_empty);
  tcase_add_test(tc, test_matmul_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("batch_matmul");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_batch_matmul, 0, sizeof batch_cases / sizeof batch_cases[0]);
  tcase_add_test(tc, test_batch_matmul_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("bias_add");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_bias_add);
  tcase_add_test(tc, test_bias_add_wrap);
  tcase_add_test(tc, test_bias_add_empty);
  tcase_add_test(tc, test_bias_add_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Two pool threads unless the caller chose: batches and large products are then cut into
   * shards on the pool (uneven ones for the odd batches above), whatever the machine's
   * core count. */
  setenv("FLOE_NUM_THREADS", "2", 0);
  SRunner *sr = srunner_create(matmul_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
