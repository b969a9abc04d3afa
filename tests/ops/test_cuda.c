/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda.c - every kernel of the CUDA plugin against the CPU plugin's on the same random
 * inputs, the matmul precision modes, device out-of-memory, the device description, a few
 * training steps wholly on the GPU and the nccl collective backend (when built).
 *
 * Without a usable GPU (or without the plugin: configure found no CUDA toolkit) the whole
 * program is skipped (exit 77) and prints why: the plugin's own message, e.g. "no CUDA
 * device (cudaGetDeviceCount: cudaErrorNoDevice: ...)". The allocator's logic is tested
 * without a GPU by core/test_cuda_alloc.
 *
 * Tolerances. f32 elementwise ops differ only in the last bits of libm-style functions
 * (CUDA's expf/logf/powf are within 2 ulp, the CPU plugin's within 1): 1e-5 relative.
 * Sums, matmuls and convolutions add in another order: 1e-4 relative plus 1e-4 absolute
 * for our sizes (K <= 256 terms of magnitude <= 1). TF32 rounds each input to 10 mantissa
 * bits (relative error 2^-11 per input, ~1e-3 per product); over K random-signed terms the
 * error grows like sqrt(K) as does the result, so the normalised error max|d| / max|ref|
 * stays ~1e-3: the bound is 5e-3. bf16 keeps 7 bits (2^-8 per input): 8x TF32, bound 3e-2. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <floe/floe_collective.h>
#include <floe/floe_train.h>

#include "config.h"
#include "harness.h"

#define F32 FLOE_F32
#define I32 FLOE_I32
#define I64 FLOE_I64

static const double RT = 1e-5, AT = 1e-6;     /* elementwise */
static const double RS = 1e-4, AS = 1e-4;     /* sums, products, convolutions */

/* Runs op on cpu:0 and on cuda:0 and compares every output. */
static void compare_lists(const char *what, const char *op, FloeTensor *const *in, int n,
                          const int *lists, int nl, harness_attrs_fn attrs, void *arg, int nout,
                          double rtol, double atol) {
  FloeTensor *want[4] = {NULL}, *got[4] = {NULL};
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, "cpu:0", in, n, lists, nl, attrs, arg, want, nout, st);
  ck_assert_msg(rc == FLOE_OK, "%s on the CPU: %s", what, floe_status_message(st));
  rc = harness_run_op(op, "cuda:0", in, n, lists, nl, attrs, arg, got, nout, st);
  ck_assert_msg(rc == FLOE_OK, "%s on the GPU: %s", what, floe_status_message(st));
  for (int i = 0; i < nout; i++) {
    char label[160];
    snprintf(label, sizeof label, "%s (output %d)", what, i);
    harness_assert_close(got[i], want[i], rtol, atol, label);
    floe_tensor_release(got[i]);
    floe_tensor_release(want[i]);
  }
  floe_status_free(st);
}

static void compare(const char *what, const char *op, FloeTensor *const *in, int n,
                    harness_attrs_fn attrs, void *arg, int nout, double rtol, double atol) {
  compare_lists(what, op, in, n, NULL, 0, attrs, arg, nout, rtol, atol);
}

/* Runs op on cuda:0 expecting failure with code and every needle in the message. */
static void expect_gpu_error(const char *op, FloeTensor *const *in, int n, harness_attrs_fn attrs,
                             void *arg, floe_code code, const char *needle1,
                             const char *needle2) {
  FloeTensor *out[2] = {NULL};
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, "cuda:0", in, n, NULL, 0, attrs, arg, out, 1, st);
  const char *msg = floe_status_message(st);
  ck_assert_msg(rc == code, "%s: expected %s, got %s: %s", op, floe_code_name(code),
                floe_code_name(rc), msg);
  ck_assert_msg(strstr(msg, needle1), "%s: message lacks \"%s\": %s", op, needle1, msg);
  if (needle2) ck_assert_msg(strstr(msg, needle2), "%s: message lacks \"%s\": %s", op, needle2, msg);
  floe_status_free(st);
}

static FloeTensor *rnd(FloeDType dt, int rank, const int64_t *dims, uint64_t seed, double lo,
                       double hi) {
  return harness_random(dt, rank, dims, seed, lo, hi);
}

static FloeTensor *ivec(FloeDType dt, int n, const int64_t *v) {
  int64_t d = n;
  double buf[16];
  for (int i = 0; i < n; i++) buf[i] = (double)v[i];
  return harness_from_doubles(dt, 1, &d, buf);
}

static FloeTensor *iscalar(FloeDType dt, int64_t v) {
  double d = (double)v;
  return harness_from_doubles(dt, 0, NULL, &d);
}

static void release(FloeTensor **t, int n) {
  for (int i = 0; i < n; i++) floe_tensor_release(t[i]);
}

/* Attribute setters. */
static void set_bool2(FloeNodeBuilder *b, void *arg) {
  const int *v = arg;
  floe_node_set_attr_bool(b, "transpose_a", v[0]);
  floe_node_set_attr_bool(b, "transpose_b", v[1]);
}
static void set_adj(FloeNodeBuilder *b, void *arg) {
  const int *v = arg;
  floe_node_set_attr_bool(b, "adj_x", v[0]);
  floe_node_set_attr_bool(b, "adj_y", v[1]);
}
static void set_keep(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_bool(b, "keep_dims", *(const int *)arg);
}
static void set_dst(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "DstT", *(const FloeDType *)arg);
}
static void set_axis(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_int(b, "axis", *(const int64_t *)arg);
}
static void set_keep_mean(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_bool(b, "keep_dims", 1);
  floe_node_set_attr_bool(b, "mean", 1);
}
static void set_alpha(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_float(b, "alpha", *(const double *)arg);
}

typedef struct Window {
  int64_t k[2], s[2], d[2];
  const char *pad;
} Window;

static void set_conv(FloeNodeBuilder *b, void *arg) {
  const Window *w = arg;
  int64_t strides[4] = {1, w->s[0], w->s[1], 1}, dil[4] = {1, w->d[0], w->d[1], 1};
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_int_list(b, "dilations", dil, 4);
  floe_node_set_attr_string(b, "padding", w->pad);
}
static void set_pool(FloeNodeBuilder *b, void *arg) {
  const Window *w = arg;
  int64_t strides[4] = {1, w->s[0], w->s[1], 1}, k[4] = {1, w->k[0], w->k[1], 1};
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_int_list(b, "ksize", k, 4);
  floe_node_set_attr_string(b, "padding", w->pad);
}

/* ------------------------------------------------------------------------------------ */
/* Elementwise. */

START_TEST(test_binary) {
  static const struct {
    const char *op;
    double ylo, yhi; /* y's range (x in [-3, 3], or [0.5, 2] for Pow) */
  } ops[] = {{"Add", -3, 3},    {"Sub", -3, 3},     {"Mul", -3, 3},
             {"Div", 0.5, 2},   {"Maximum", -3, 3}, {"Minimum", -3, 3},
             {"Pow", -2, 2}};
  static const struct {
    int rx, ry;
    int64_t dx[4], dy[4];
  } shapes[] = {{3, 3, {2, 3, 4}, {2, 3, 4}},
                {3, 2, {2, 3, 4}, {3, 1}},
                {1, 0, {5}, {0}},
                {3, 3, {4, 1, 3}, {1, 5, 1}},
                {4, 1, {2, 1, 3, 1}, {1}}};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      bool pow = !strcmp(ops[o].op, "Pow");
      FloeTensor *in[2] = {rnd(F32, shapes[s].rx, shapes[s].dx, 10 + s, pow ? 0.5 : -3,
                               pow ? 2 : 3),
                           rnd(F32, shapes[s].ry, shapes[s].dy, 20 + s, ops[o].ylo, ops[o].yhi)};
      char what[96];
      snprintf(what, sizeof what, "%s f32 shapes #%zu", ops[o].op, s);
      compare(what, ops[o].op, in, 2, NULL, NULL, 1, RT, AT);
      release(in, 2);
    }
  /* Integers (wrapping arithmetic) and comparisons. */
  static const char *const iops[] = {"Add", "Sub", "Mul", "Maximum", "Minimum"};
  static const char *const cmps[] = {"Equal", "NotEqual", "Less", "LessEqual", "Greater",
                                     "GreaterEqual"};
  int64_t dx[2] = {3, 4}, dy[1] = {4};
  for (int dt = 0; dt < 2; dt++) {
    FloeDType t = dt ? I64 : I32;
    FloeTensor *in[2] = {rnd(t, 2, dx, 3, -4, 4), rnd(t, 1, dy, 4, -4, 4)};
    for (size_t i = 0; i < sizeof iops / sizeof iops[0]; i++)
      compare(iops[i], iops[i], in, 2, NULL, NULL, 1, 0, 0);
    for (size_t i = 0; i < sizeof cmps / sizeof cmps[0]; i++)
      compare(cmps[i], cmps[i], in, 2, NULL, NULL, 1, 0, 0);
    release(in, 2);
  }
  FloeTensor *bad[2] = {rnd(F32, 2, dx, 1, 0, 1), rnd(F32, 1, (int64_t[]){3}, 2, 0, 1)};
  expect_gpu_error("Add", bad, 2, NULL, NULL, FLOE_INVALID_ARGUMENT, "[3,4] vs [3]", NULL);
  release(bad, 2);
}
END_TEST

START_TEST(test_unary) {
  static const struct {
    const char *op;
    double lo, hi;
  } ops[] = {{"Neg", -8, 8},      {"Abs", -8, 8},      {"Square", -8, 8},  {"Relu", -8, 8},
             {"Relu6", -8, 8},    {"Sign", -8, 8},     {"Floor", -8, 8},   {"Sqrt", 0.1, 10},
             {"Rsqrt", 0.1, 10},  {"Log", 0.1, 10},    {"Exp", -10, 10},   {"Sigmoid", -10, 10},
             {"Tanh", -5, 5},     {"Softplus", -10, 10}, {"Sin", -10, 10}, {"Cos", -10, 10}};
  int64_t d[3] = {3, 5, 7};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    FloeTensor *x = rnd(F32, 3, d, 100 + i, ops[i].lo, ops[i].hi);
    compare(ops[i].op, ops[i].op, &x, 1, NULL, NULL, 1, RT, AT);
    floe_tensor_release(x);
  }
  double alpha = 0.3;
  FloeTensor *x = rnd(F32, 3, d, 7, -5, 5);
  compare("LeakyRelu", "LeakyRelu", &x, 1, set_alpha, &alpha, 1, RT, AT);
  compare("Elu", "Elu", &x, 1, set_alpha, &alpha, 1, RT, AT);
  floe_tensor_release(x);
  FloeTensor *xi = rnd(I32, 3, d, 8, -50, 50);
  compare("Neg i32", "Neg", &xi, 1, NULL, NULL, 1, 0, 0);
  compare("Relu i32", "Relu", &xi, 1, NULL, NULL, 1, 0, 0);
  floe_tensor_release(xi);
}
END_TEST

START_TEST(test_activation_grads) {
  int64_t d[2] = {6, 9};
  static const struct {
    const char *op;
    double lo, hi; /* of the second input's first operand ("features" or y) */
    int y_first;   /* (y, dy) order */
  } ops[] = {{"ReluGrad", -3, 3, 0},    {"Relu6Grad", -2, 8, 0},  {"SoftplusGrad", -5, 5, 0},
             {"SigmoidGrad", 0, 1, 1},  {"TanhGrad", -1, 1, 1},   {"SqrtGrad", 0.5, 3, 1},
             {"RsqrtGrad", 0.5, 3, 1},  {"LeakyReluGrad", -3, 3, 0}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    FloeTensor *grad = rnd(F32, 2, d, 30 + i, -2, 2);
    FloeTensor *v = rnd(F32, 2, d, 40 + i, ops[i].lo, ops[i].hi);
    FloeTensor *in[2] = {ops[i].y_first ? v : grad, ops[i].y_first ? grad : v};
    compare(ops[i].op, ops[i].op, in, 2, NULL, NULL, 1, RT, AT);
    floe_tensor_release(grad);
    floe_tensor_release(v);
  }
}
END_TEST

START_TEST(test_cast_select_fill) {
  int64_t d[2] = {4, 6};
  static const struct {
    FloeDType src, dst;
    double lo, hi;
  } casts[] = {{F32, I32, -100, 100},   {F32, I64, -1e6, 1e6},   {I32, F32, -1000, 1000},
               {I64, F32, -1e6, 1e6},   {F32, FLOE_BOOL, -1, 1}, {F32, FLOE_BF16, -10, 10},
               {FLOE_BF16, F32, -10, 10}, {I32, I64, -1e6, 1e6}, {F32, FLOE_F64, -10, 10},
               {F32, FLOE_F16, -10, 10}, {FLOE_F64, F32, -1e3, 1e3}, {F32, FLOE_U8, -10, 300}};
  for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++) {
    FloeTensor *x = rnd(casts[i].src, 2, d, 50 + i, casts[i].lo, casts[i].hi);
    char what[64];
    snprintf(what, sizeof what, "Cast %s -> %s", floe_dtype_name(casts[i].src),
             floe_dtype_name(casts[i].dst));
    FloeDType dst = casts[i].dst;
    compare(what, "Cast", &x, 1, set_dst, &dst, 1, 0, 0);
    floe_tensor_release(x);
  }
  /* Select with a broadcast condition. */
  FloeTensor *cf = rnd(F32, 1, &d[1], 5, -1, 1);
  FloeDType b = FLOE_BOOL;
  FloeTensor *c = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(harness_run_op("Cast", "cpu:0", &cf, 1, NULL, 0, set_dst, &b, &c, 1, st),
                   FLOE_OK);
  /* A bool from Cast is x != 0: all true. Make it mixed by comparing instead. */
  floe_tensor_release(c);
  FloeTensor *zero = harness_f32(0, NULL, (const float[]){0.0f});
  FloeTensor *cmp_in[2] = {cf, zero};
  ck_assert_int_eq(harness_run_op("Greater", "cpu:0", cmp_in, 2, NULL, 0, NULL, NULL, &c, 1, st),
                   FLOE_OK);
  FloeTensor *in[3] = {c, rnd(F32, 2, d, 6, -1, 1), rnd(F32, 2, d, 7, -1, 1)};
  compare("Select", "Select", in, 3, NULL, NULL, 1, 0, 0);
  release(in, 3);
  floe_tensor_release(cf);
  floe_tensor_release(zero);
  /* Fills. */
  FloeTensor *x = rnd(I64, 2, d, 8, -5, 5);
  compare("ZerosLike", "ZerosLike", &x, 1, NULL, NULL, 1, 0, 0);
  compare("OnesLike", "OnesLike", &x, 1, NULL, NULL, 1, 0, 0);
  floe_tensor_release(x);
  FloeTensor *fin[2] = {ivec(I32, 3, (const int64_t[]){2, 3, 5}),
                        harness_f32(0, NULL, (const float[]){2.5f})};
  compare("Fill", "Fill", fin, 2, NULL, NULL, 1, 0, 0);
  release(fin, 2);
  floe_status_free(st);
}
END_TEST

START_TEST(test_bias_addn) {
  int64_t d[4] = {2, 3, 3, 4}, c = 4;
  FloeTensor *in[2] = {rnd(F32, 4, d, 1, -1, 1), rnd(F32, 1, &c, 2, -1, 1)};
  compare("BiasAdd", "BiasAdd", in, 2, NULL, NULL, 1, RT, AT);
  compare("BiasAddGrad", "BiasAddGrad", in, 1, NULL, NULL, 1, RS, AS);
  release(in, 2);
  /* AddN of 3 and of 10 inputs (two launches). */
  FloeTensor *many[10];
  for (int i = 0; i < 10; i++) many[i] = rnd(F32, 4, d, 60 + i, -1, 1);
  compare_lists("AddN x3", "AddN", many, 3, (const int[]){3}, 1, NULL, NULL, 1, RT, AT);
  compare_lists("AddN x10", "AddN", many, 10, (const int[]){10}, 1, NULL, NULL, 1, RT, AT);
  release(many, 10);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Reductions and losses. */

START_TEST(test_reductions) {
  static const char *const ops[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  static const struct {
    int n;
    int64_t axes[3];
  } axes[] = {{1, {1}}, {2, {0, 2}}, {3, {0, 1, 2}}, {1, {-1}}, {1, {0}}, {0, {0}}};
  int64_t d[3] = {3, 70, 5}; /* 70: the row kernel (r >= 64) and the column kernel */
  FloeTensor *x = rnd(F32, 3, d, 9, 0.9, 1.1);
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++)
      for (int keep = 0; keep < 2; keep++) {
        FloeTensor *in[2] = {x, ivec(I32, axes[a].n, axes[a].axes)};
        char what[64];
        snprintf(what, sizeof what, "%s axes #%zu keep %d", ops[o], a, keep);
        compare(what, ops[o], in, 2, set_keep, &keep, 1, RS, 1e-6);
        floe_tensor_release(in[1]);
      }
  /* Inner reduction of a long row: [2, 5000] over dim 1. */
  int64_t dl[2] = {2, 5000};
  FloeTensor *long_in[2] = {rnd(F32, 2, dl, 10, -1, 1), iscalar(I32, 1)};
  int keep = 0;
  compare("Sum long rows", "Sum", long_in, 2, set_keep, &keep, 1, RS, AS);
  release(long_in, 2);
  FloeTensor *xi[2] = {rnd(I32, 3, d, 11, -100, 100), ivec(I32, 1, (const int64_t[]){1})};
  compare("Sum i32", "Sum", xi, 2, set_keep, &keep, 1, 0, 0);
  compare("Max i32", "Max", xi, 2, set_keep, &keep, 1, 0, 0);
  release(xi, 2);
  /* SumToShape: [3, 70, 5] summed to [70, 1] and to [3, 1, 5]. */
  FloeTensor *sts[2] = {x, ivec(I32, 2, (const int64_t[]){70, 1})};
  compare("SumToShape [70,1]", "SumToShape", sts, 2, NULL, NULL, 1, RS, 1e-5);
  floe_tensor_release(sts[1]);
  sts[1] = ivec(I64, 3, (const int64_t[]){3, 1, 5});
  compare("SumToShape [3,1,5]", "SumToShape", sts, 2, NULL, NULL, 1, RS, 1e-5);
  floe_tensor_release(sts[1]);
  /* ArgMax / ArgMin along each dim. */
  for (int64_t dim = 0; dim < 3; dim++) {
    FloeTensor *in[2] = {x, iscalar(I32, dim)};
    compare("ArgMax", "ArgMax", in, 2, NULL, NULL, 1, 0, 0);
    compare("ArgMin", "ArgMin", in, 2, NULL, NULL, 1, 0, 0);
    floe_tensor_release(in[1]);
  }
  floe_tensor_release(x);
}
END_TEST

START_TEST(test_softmax_xent) {
  int64_t d[2] = {6, 10};
  FloeTensor *logits = rnd(F32, 2, d, 12, -5, 5);
  compare("Softmax", "Softmax", &logits, 1, NULL, NULL, 1, RT, AT);
  compare("LogSoftmax", "LogSoftmax", &logits, 1, NULL, NULL, 1, RT, 1e-5);
  /* Dense labels: rows of a distribution, made by the CPU's Softmax of other logits. */
  FloeTensor *other = rnd(F32, 2, d, 13, -2, 2), *labels = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(
      harness_run_op("Softmax", "cpu:0", &other, 1, NULL, 0, NULL, NULL, &labels, 1, st), FLOE_OK);
  FloeTensor *in[2] = {logits, labels};
  compare("SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", in, 2, NULL, NULL,
          2, RS, 1e-5);
  int64_t b = 6;
  FloeTensor *sparse[2] = {logits, ivec(I64, 6, (const int64_t[]){0, 9, 3, 3, 7, 1})};
  compare("SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", sparse, 2,
          NULL, NULL, 2, RS, 1e-5);
  floe_tensor_release(sparse[1]);
  sparse[1] = ivec(I32, 6, (const int64_t[]){0, 12, 3, 3, 7, 1});
  expect_gpu_error("SparseSoftmaxCrossEntropyWithLogits", sparse, 2, NULL, NULL,
                   FLOE_INVALID_ARGUMENT, "labels[1] = 12", "[0, 10)");
  (void)b;
  floe_tensor_release(sparse[1]);
  release(in, 2);
  floe_tensor_release(other);
  floe_status_free(st);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* cuBLAS. */

START_TEST(test_matmul) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int64_t m = 33, k = 17, n = 29;
      int64_t da[2] = {ta ? k : m, ta ? m : k}, db[2] = {tb ? n : k, tb ? k : n};
      FloeTensor *in[2] = {rnd(F32, 2, da, 70 + ta, -1, 1), rnd(F32, 2, db, 80 + tb, -1, 1)};
      int flags[2] = {ta, tb};
      char what[48];
      snprintf(what, sizeof what, "MatMul ta=%d tb=%d", ta, tb);
      compare(what, "MatMul", in, 2, set_bool2, flags, 1, RS, AS);
      release(in, 2);
    }
  /* Batches: equal, one side single, and a general broadcast (per-matrix calls). */
  static const struct {
    int rx, ry;
    int64_t dx[4], dy[4];
  } b[] = {{3, 3, {4, 5, 6}, {4, 6, 3}},
           {3, 3, {1, 5, 6}, {4, 6, 3}},
           {4, 3, {2, 3, 5, 7}, {3, 7, 4}},
           {4, 4, {2, 1, 5, 7}, {1, 3, 7, 4}}};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
    FloeTensor *in[2] = {rnd(F32, b[i].rx, b[i].dx, 90 + i, -1, 1),
                         rnd(F32, b[i].ry, b[i].dy, 95 + i, -1, 1)};
    int adj[2] = {0, 0};
    char what[48];
    snprintf(what, sizeof what, "BatchMatMul #%zu", i);
    compare(what, "BatchMatMul", in, 2, set_adj, adj, 1, RS, AS);
    release(in, 2);
  }
  int64_t dx[3] = {2, 7, 5}, dy[3] = {2, 4, 7};
  FloeTensor *in[2] = {rnd(F32, 3, dx, 1, -1, 1), rnd(F32, 3, dy, 2, -1, 1)};
  int adj[2] = {1, 1};
  compare("BatchMatMul adj", "BatchMatMul", in, 2, set_adj, adj, 1, RS, AS);
  release(in, 2);
  FloeTensor *bad[2] = {rnd(F32, 2, (int64_t[]){3, 4}, 1, 0, 1), rnd(F32, 2, (int64_t[]){5, 2}, 2, 0, 1)};
  expect_gpu_error("MatMul", bad, 2, NULL, NULL, FLOE_INVALID_ARGUMENT,
                   "inner dimensions 4 and 5", "[5,2]");
  release(bad, 2);
}
END_TEST

/* max |got - want| / max |want|. */
static double normalised_error(const FloeTensor *got, const FloeTensor *want) {
  int64_t n = floe_tensor_num_elements(want);
  ck_assert_int_eq(floe_tensor_num_elements(got), n);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double w = harness_get(want, i), d = fabs(harness_get(got, i) - w);
    if (d > num) num = d;
    if (fabs(w) > den) den = fabs(w);
  }
  return den > 0 ? num / den : num;
}

/* The mode is read when the runtime creates the device: each test runs in its own process
 * (Check forks), whose first session makes the default runtime. */
static double matmul_error_in_mode(const char *mode) {
  setenv("FLOE_CUDA_MATMUL", mode, 1);
  int64_t da[2] = {64, 256}, db[2] = {256, 48};
  FloeTensor *in[2] = {rnd(F32, 2, da, 3, -1, 1), rnd(F32, 2, db, 4, -1, 1)};
  FloeTensor *want = NULL, *got = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(harness_run_op("MatMul", "cpu:0", in, 2, NULL, 0, NULL, NULL, &want, 1, st),
                   FLOE_OK);
  floe_code rc = harness_run_op("MatMul", "cuda:0", in, 2, NULL, 0, NULL, NULL, &got, 1, st);
  ck_assert_msg(rc == FLOE_OK, "MatMul (%s): %s", mode, floe_status_message(st));
  double e = normalised_error(got, want);
  floe_tensor_release(got);
  floe_tensor_release(want);
  release(in, 2);
  floe_status_free(st);
  return e;
}

START_TEST(test_matmul_f32_mode) {
  double e = matmul_error_in_mode("f32");
  ck_assert_msg(e < 1e-5, "f32 normalised error %g", e);
}
END_TEST

START_TEST(test_matmul_tf32_mode) {
  double e = matmul_error_in_mode("tf32");
  ck_assert_msg(e < 5e-3, "tf32 normalised error %g", e);
}
END_TEST

START_TEST(test_matmul_bf16_mode) {
  double e = matmul_error_in_mode("bf16");
  ck_assert_msg(e < 3e-2, "bf16 normalised error %g", e);
  /* Rounded inputs must show: bf16 that matched f32 exactly would mean the mode was ignored. */
  ck_assert_msg(e > 1e-5, "bf16 normalised error %g: the inputs were not rounded", e);
}
END_TEST

/* Half-precision tensors (T = bf16 / f16), whatever the mode: products of the same rounded
 * inputs accumulated in f32 on both devices, each rounded once to the output's precision
 * (bf16: 2^-9 relative, f16: 2^-12), so the difference is a rounding step or two of the
 * largest output at most. MatMul and BatchMatMul with transposes. */
START_TEST(test_matmul_half_tensors) {
  static const struct {
    FloeDType dt;
    double tol;
  } types[] = {{FLOE_BF16, 1e-2}, {FLOE_F16, 2e-3}};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    int64_t da[2] = {96, 40}, db[2] = {72, 96}; /* a^T b^T: [40, 72] */
    FloeTensor *in[2] = {rnd(types[t].dt, 2, da, 5, -1, 1), rnd(types[t].dt, 2, db, 6, -1, 1)};
    int adj[2] = {1, 1};
    FloeTensor *want = NULL, *got = NULL;
    FloeStatus *st = floe_status_new();
    ck_assert_int_eq(harness_run_op("MatMul", "cpu:0", in, 2, NULL, 0, set_bool2, adj, &want,
                                    1, st),
                     FLOE_OK);
    floe_code rc =
        harness_run_op("MatMul", "cuda:0", in, 2, NULL, 0, set_bool2, adj, &got, 1, st);
    ck_assert_msg(rc == FLOE_OK, "MatMul %s: %s", floe_dtype_name(types[t].dt),
                  floe_status_message(st));
    ck_assert_int_eq(floe_tensor_dtype(got), types[t].dt);
    double e = normalised_error(got, want);
    ck_assert_msg(e < types[t].tol, "MatMul %s normalised error %g", floe_dtype_name(types[t].dt),
                  e);
    floe_tensor_release(got);
    floe_tensor_release(want);
    release(in, 2);
    int64_t bx[3] = {3, 17, 33}, by[3] = {3, 33, 9};
    FloeTensor *bin[2] = {rnd(types[t].dt, 3, bx, 7, -1, 1), rnd(types[t].dt, 3, by, 8, -1, 1)};
    int badj[2] = {0, 0};
    ck_assert_int_eq(harness_run_op("BatchMatMul", "cpu:0", bin, 2, NULL, 0, set_adj, badj,
                                    &want, 1, st),
                     FLOE_OK);
    rc = harness_run_op("BatchMatMul", "cuda:0", bin, 2, NULL, 0, set_adj, badj, &got, 1, st);
    ck_assert_msg(rc == FLOE_OK, "BatchMatMul %s: %s", floe_dtype_name(types[t].dt),
                  floe_status_message(st));
    e = normalised_error(got, want);
    ck_assert_msg(e < types[t].tol, "BatchMatMul %s normalised error %g",
                  floe_dtype_name(types[t].dt), e);
    floe_tensor_release(got);
    floe_tensor_release(want);
    release(bin, 2);
    floe_status_free(st);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* cuDNN. */

START_TEST(test_conv) {
  static const struct {
    int64_t x[4], f[4];
    Window w;
  } cases[] = {
      {{2, 9, 9, 3}, {3, 3, 3, 4}, {{0, 0}, {1, 1}, {1, 1}, "SAME"}},
      {{2, 10, 10, 3}, {5, 5, 3, 2}, {{0, 0}, {2, 2}, {1, 1}, "VALID"}},
      {{1, 9, 9, 2}, {3, 3, 2, 5}, {{0, 0}, {1, 1}, {2, 2}, "SAME"}},
      {{3, 28, 28, 1}, {5, 5, 1, 8}, {{0, 0}, {1, 1}, {1, 1}, "SAME"}},
      /* SAME with an odd total padding (cuDNN takes only symmetric padding: the plugin pads
       * the input itself): 0/1 on both sides, then 0/1 and 1/2 */
      {{1, 10, 10, 2}, {3, 3, 2, 3}, {{0, 0}, {2, 2}, {1, 1}, "SAME"}},
      {{2, 7, 10, 3}, {2, 4, 3, 2}, {{0, 0}, {2, 3}, {1, 1}, "SAME"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FloeTensor *x = rnd(F32, 4, cases[i].x, 110 + i, -1, 1);
    FloeTensor *f = rnd(F32, 4, cases[i].f, 120 + i, -1, 1);
    Window w = cases[i].w;
    char what[64];
    snprintf(what, sizeof what, "Conv2D #%zu", i);
    FloeTensor *in[2] = {x, f}, *y = NULL;
    compare(what, "Conv2D", in, 2, set_conv, &w, 1, RS, AS);
    FloeStatus *st = floe_status_new();
    ck_assert_int_eq(harness_run_op("Conv2D", "cpu:0", in, 2, NULL, 0, set_conv, &w, &y, 1, st),
                     FLOE_OK);
    FloeTensor *dy = rnd(F32, floe_tensor_rank(y), floe_tensor_dims(y), 130 + i, -1, 1);
    FloeTensor *bi[3] = {ivec(I32, 4, cases[i].x), f, dy};
    snprintf(what, sizeof what, "Conv2DBackpropInput #%zu", i);
    compare(what, "Conv2DBackpropInput", bi, 3, set_conv, &w, 1, RS, AS);
    FloeTensor *bf[3] = {x, ivec(I32, 4, cases[i].f), dy};
    snprintf(what, sizeof what, "Conv2DBackpropFilter #%zu", i);
    compare(what, "Conv2DBackpropFilter", bf, 3, set_conv, &w, 1, RS, 1e-3);
    floe_tensor_release(bi[0]);
    floe_tensor_release(bf[1]);
    release((FloeTensor *[]){x, f, y, dy}, 4);
    floe_status_free(st);
  }
}
END_TEST

START_TEST(test_pool) {
  static const struct {
    int64_t x[4];
    Window w;
  } cases[] = {
      {{2, 8, 8, 3}, {{2, 2}, {2, 2}, {1, 1}, "VALID"}},
      {{2, 7, 7, 3}, {{3, 3}, {1, 1}, {1, 1}, "SAME"}},
      {{1, 9, 9, 2}, {{3, 3}, {2, 2}, {1, 1}, "VALID"}},
      /* Asymmetric SAME (padding top/bottom and left/right 0/1): explicit padding in the
       * max pools, the own kernels in the average pools. */
      {{2, 10, 10, 3}, {{3, 3}, {2, 2}, {1, 1}, "SAME"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FloeTensor *x = rnd(F32, 4, cases[i].x, 140 + i, -1, 1); /* continuous: no ties */
    Window w = cases[i].w;
    char what[64];
    snprintf(what, sizeof what, "MaxPool #%zu", i);
    compare(what, "MaxPool", &x, 1, set_pool, &w, 1, 0, 0);
    snprintf(what, sizeof what, "AvgPool #%zu", i);
    compare(what, "AvgPool", &x, 1, set_pool, &w, 1, RT, AT);
    FloeTensor *y = NULL;
    FloeStatus *st = floe_status_new();
    ck_assert_int_eq(harness_run_op("MaxPool", "cpu:0", &x, 1, NULL, 0, set_pool, &w, &y, 1, st),
                     FLOE_OK);
    FloeTensor *dy = rnd(F32, 4, floe_tensor_dims(y), 150 + i, -1, 1);
    FloeTensor *mg[3] = {x, y, dy};
    snprintf(what, sizeof what, "MaxPoolGrad #%zu", i);
    compare(what, "MaxPoolGrad", mg, 3, set_pool, &w, 1, RT, AT);
    FloeTensor *ag[2] = {ivec(I32, 4, cases[i].x), dy};
    snprintf(what, sizeof what, "AvgPoolGrad #%zu", i);
    compare(what, "AvgPoolGrad", ag, 2, set_pool, &w, 1, RT, AT);
    floe_tensor_release(ag[0]);
    release((FloeTensor *[]){x, y, dy}, 3);
    floe_status_free(st);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Data movement. */

START_TEST(test_array_ops) {
  int64_t dp[2] = {5, 4};
  FloeTensor *p = rnd(F32, 2, dp, 1, -1, 1);
  FloeTensor *gin[2] = {p, ivec(I32, 3, (const int64_t[]){4, 0, 2})};
  int64_t axis = 0;
  compare("Gather axis 0", "Gather", gin, 2, set_axis, &axis, 1, 0, 0);
  axis = 1;
  floe_tensor_release(gin[1]);
  gin[1] = ivec(I64, 3, (const int64_t[]){3, 3, 1});
  compare("Gather axis 1", "Gather", gin, 2, set_axis, &axis, 1, 0, 0);
  floe_tensor_release(gin[1]);
  gin[1] = ivec(I32, 2, (const int64_t[]){1, 5});
  axis = 0;
  expect_gpu_error("Gather", gin, 2, set_axis, &axis, FLOE_INVALID_ARGUMENT, "indices[1] = 5",
                   "[0, 5)");
  floe_tensor_release(gin[1]);
  FloeTensor *oh[4] = {ivec(I64, 5, (const int64_t[]){0, 3, 9, 2, -1}), iscalar(I32, 4),
                       harness_f32(0, NULL, (const float[]){1.5f}),
                       harness_f32(0, NULL, (const float[]){-0.5f})};
  axis = -1;
  compare("OneHot", "OneHot", oh, 4, set_axis, &axis, 1, 0, 0);
  axis = 0;
  compare("OneHot axis 0", "OneHot", oh, 4, set_axis, &axis, 1, 0, 0);
  release(oh, 4);
  int64_t d3[3] = {2, 3, 4};
  FloeTensor *x = rnd(F32, 3, d3, 2, -1, 1);
  FloeTensor *tr[2] = {x, ivec(I32, 3, (const int64_t[]){2, 0, 1})};
  compare("Transpose", "Transpose", tr, 2, NULL, NULL, 1, 0, 0);
  floe_tensor_release(tr[1]);
  FloeTensor *rs[2] = {x, ivec(I64, 2, (const int64_t[]){-1, 6})};
  compare("Reshape", "Reshape", rs, 2, NULL, NULL, 1, 0, 0);
  floe_tensor_release(rs[1]);
  compare("Shape", "Shape", &x, 1, NULL, NULL, 1, 0, 0);
  compare("Identity", "Identity", &x, 1, NULL, NULL, 1, 0, 0);
  axis = 1;
  compare("ExpandDims", "ExpandDims", &x, 1, set_axis, &axis, 1, 0, 0);
  /* BroadcastTo and ExpandReduced (Mean's gradient over axes 0 and 2, keep_dims). */
  int64_t d1[3] = {1, 3, 1};
  FloeTensor *g = rnd(F32, 3, d1, 3, -1, 1);
  FloeTensor *bt[2] = {g, ivec(I32, 3, d3)};
  compare("BroadcastTo", "BroadcastTo", bt, 2, NULL, NULL, 1, 0, 0);
  FloeTensor *er[3] = {g, bt[1], ivec(I32, 2, (const int64_t[]){0, 2})};
  compare("ExpandReduced", "ExpandReduced", er, 3, set_keep_mean, NULL, 1, RT, AT);
  release((FloeTensor *[]){p, x, g, bt[1], er[2]}, 5);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Optimisers: variables initialised from feeds, one update on each device, values read.
 * kinds has one letter per input of the op: r a variable (a resource input), s a scalar
 * and g a tensor (the gradient), both fed directly. */

static FloeTensor **run_update(const char *device, const char *op, const char *kinds,
                               FloeTensor *const *vals, int n, int nesterov) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *u = NULL;
  const char *targets[8];
  int nt = 0;
  FloeFeed feeds[12];
  char names[12][24], reads[12][24];
  const char *fetches[12];
  int nvars = 0;
  FloeOutput ins[12];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    FloeOutput v = floe_placeholder(g, names[i], floe_tensor_dtype(vals[i]),
                                    floe_tensor_shape(vals[i]));
    feeds[i] = (FloeFeed){names[i], vals[i]};
    if (kinds[i] != 'r') {
      ins[i] = v;
      continue;
    }
    char h[24], a[24];
    snprintf(h, sizeof h, "var%d", i);
    FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", h);
    floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(vals[i]));
    floe_node_set_attr_shape(b, "shape", floe_tensor_shape(vals[i]));
    ins[i] = floe_out(floe_node_finish(b), 0);
    snprintf(a, sizeof a, "var%d/init", i);
    b = floe_node_begin(g, "AssignVariableOp", a);
    floe_node_add_input(b, ins[i]);
    floe_node_add_input(b, v);
    floe_node_finish(b);
    targets[nt++] = strdup(a);
    snprintf(reads[nvars], sizeof reads[nvars], "var%d/read", i);
    b = floe_node_begin(g, "ReadVariableOp", reads[nvars]);
    floe_node_add_input(b, ins[i]);
    floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(vals[i]));
    floe_node_finish(b);
    fetches[nvars] = reads[nvars];
    nvars++;
  }
  u = floe_node_begin(g, op, "update");
  for (int i = 0; i < n; i++) floe_node_add_input(u, ins[i]);
  if (nesterov >= 0) floe_node_set_attr_bool(u, "use_nesterov", nesterov);
  floe_node_set_device(u, device);
  floe_node_finish(u);
  FloeSession *s = harness_session(g, floe_runtime_default(NULL));
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feeds, n, NULL, 0, targets, nt, NULL, st);
  ck_assert_msg(rc == FLOE_OK, "init: %s", floe_status_message(st));
  const char *upd = "update";
  rc = floe_session_run(s, feeds, n, NULL, 0, &upd, 1, NULL, st);
  ck_assert_msg(rc == FLOE_OK, "%s on %s: %s", op, device, floe_status_message(st));
  FloeTensor **out = calloc((size_t)nvars + 1, sizeof *out);
  rc = floe_session_run(s, NULL, 0, fetches, nvars, NULL, 0, out, st);
  ck_assert_msg(rc == FLOE_OK, "read: %s", floe_status_message(st));
  for (int i = 0; i < nt; i++) free((void *)targets[i]);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  return out;
}

START_TEST(test_optimizers) {
  int64_t d[2] = {7, 3};
  static const struct {
    const char *op, *kinds;
    int nesterov; /* -1: no attribute */
  } ops[] = {{"ResourceApplyGradientDescent", "rsg", -1},
             {"ResourceApplyMomentum", "rrsgs", 0},
             {"ResourceApplyMomentum", "rrsgs", 1},
             {"ResourceApplyAdam", "rrrssssssg", 0},
             {"ResourceApplyAdam", "rrrssssssg", 1}};
  static const double scalars[] = {0.9, 0.999, 0.01, 0.9, 0.999, 1e-7};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    int n = (int)strlen(ops[o].kinds), si = 0;
    FloeTensor *vals[12];
    for (int i = 0; i < n; i++) {
      if (ops[o].kinds[i] != 's') {
        /* Adam's v must be positive. */
        bool pos = !strcmp(ops[o].op, "ResourceApplyAdam") && i == 2;
        vals[i] = rnd(F32, 2, d, 200 + 10 * o + i, pos ? 0.01 : -1, 1);
      } else {
        float v = (float)scalars[si++ % 6];
        vals[i] = harness_f32(0, NULL, &v);
      }
    }
    FloeTensor **want = run_update("cpu:0", ops[o].op, ops[o].kinds, vals, n, ops[o].nesterov);
    FloeTensor **got = run_update("cuda:0", ops[o].op, ops[o].kinds, vals, n, ops[o].nesterov);
    for (int i = 0; want[i]; i++) {
      char what[96];
      snprintf(what, sizeof what, "%s nesterov=%d variable %d", ops[o].op, ops[o].nesterov, i);
      harness_assert_close(got[i], want[i], 1e-5, 1e-6, what);
      floe_tensor_release(got[i]);
      floe_tensor_release(want[i]);
    }
    free(want);
    free(got);
    release(vals, n);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Device out of memory: the node and the bytes asked are named; the session goes on. */

START_TEST(test_out_of_memory) {
  int64_t count = (int64_t)1 << 40; /* 4 TiB of f32: more than any GPU */
  FloeTensor *in[2] = {ivec(I64, 1, &count), harness_f32(0, NULL, (const float[]){1.0f})};
  char bytes[32];
  snprintf(bytes, sizeof bytes, "%" PRId64, count * 4);
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op("Fill", "cuda:0", in, 2, NULL, 0, NULL, NULL, &out, 1, st);
  const char *msg = floe_status_message(st);
  ck_assert_msg(rc != FLOE_OK, "a 4 TiB Fill succeeded");
  ck_assert_msg(strstr(msg, "'op'") || strstr(msg, "op"), "no node name: %s", msg);
  ck_assert_msg(strstr(msg, bytes), "the bytes asked (%s) are not named: %s", bytes, msg);
  ck_assert_msg(strstr(msg, "cuda:0"), "the device is not named: %s", msg);
  /* Then a small run on the same device works. */
  floe_tensor_release(in[0]);
  in[0] = ivec(I64, 1, (const int64_t[]){3});
  rc = harness_run_op("Fill", "cuda:0", in, 2, NULL, 0, NULL, NULL, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "after OOM: %s", floe_status_message(st));
  ck_assert_int_eq(floe_tensor_num_elements(out), 3);
  ck_assert(((const float *)floe_tensor_data(out))[2] == 1.0f);
  floe_tensor_release(out);
  release(in, 2);
  floe_status_free(st);
}
END_TEST

START_TEST(test_device_description) {
  FloeRuntime *rt = floe_runtime_default(NULL);
  ck_assert_ptr_nonnull(rt);
  int found = 0;
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    FloeDeviceInfo info;
    ck_assert_int_eq(floe_runtime_device(rt, i, &info), FLOE_OK);
    if (strcmp(info.type, "CUDA") != 0) continue;
    found++;
    ck_assert_str_eq(info.plugin, "cuda");
    ck_assert_uint_gt(info.memory_bytes, (uint64_t)1 << 30);
    ck_assert(info.peak_flops_f32 > 1e12 && info.memory_bandwidth > 1e11);
  }
  ck_assert_int_ge(found, 1);
  ck_assert_int_gt(floe_runtime_num_kernels_for(rt, "Conv2DBackpropFilter", "CUDA"), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* A small MLP trained for a few Adam steps wholly on the GPU (initialisers, which have no
 * CUDA kernel, fall back to the CPU) tracks the same training on the CPU. */

static double train_losses(const char *device, double *first) {
  FloeGraph *g = floe_graph_new();
  int64_t xd[2] = {32, 20}, yd[1] = {32};
  FloeOutput x = floe_placeholder(g, "x", F32, floe_shape_make(2, xd));
  FloeOutput y = floe_placeholder(g, "y", I64, floe_shape_make(1, yd));
  FloeOutput h = floe_layer_dense(g, "d1", x, 16, FLOE_ACT_RELU, 5);
  FloeOutput logits = floe_layer_dense(g, "d2", h, 4, FLOE_ACT_NONE, 6);
  FloeOutput loss = floe_sparse_softmax_cross_entropy(g, "loss", logits, y);
  FloeOptimizerOptions opt;
  floe_optimizer_options_init(&opt, FLOE_OPT_ADAM);
  opt.learning_rate = 0.01;
  FloeNode *step = floe_minimize(g, "train", loss, &opt, NULL, 0);
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "graph: %s", floe_graph_error(g, NULL));
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.device = device;
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "session on %s: %s", device, floe_status_message(st));
  const char *init = "init", *train = floe_node_name(step), *fetch = floe_node_name(loss.node);
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  FloeTensor *xv = rnd(F32, 2, xd, 77, -1, 1), *yv = rnd(I64, 1, yd, 78, 0, 4);
  FloeFeed feeds[2] = {{"x", xv}, {"y", yv}};
  double last = 0;
  for (int i = 0; i < 20; i++) {
    FloeTensor *l = NULL;
    floe_code rc = floe_session_run(s, feeds, 2, &fetch, 1, &train, 1, &l, st);
    ck_assert_msg(rc == FLOE_OK, "step %d on %s: %s", i, device, floe_status_message(st));
    last = ((const float *)floe_tensor_data(l))[0];
    if (i == 0) *first = last;
    floe_tensor_release(l);
  }
  release((FloeTensor *[]){xv, yv}, 2);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return last;
}

START_TEST(test_train_steps) {
  double f_cpu, f_gpu;
  double cpu = train_losses("cpu:0", &f_cpu), gpu = train_losses("cuda:0", &f_gpu);
  ck_assert_msg(fabs(f_cpu - f_gpu) < 1e-5 * fabs(f_cpu), "first losses %g vs %g", f_cpu, f_gpu);
  ck_assert_msg(fabs(cpu - gpu) < 1e-3 * fabs(cpu), "after 20 steps: cpu %g, gpu %g", cpu, gpu);
  ck_assert_msg(gpu < 0.9 * f_gpu, "the loss did not fall on the GPU: %g -> %g", f_gpu, gpu);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The nccl collective backend (plugins/cuda/nccl.c), built when configure found nccl.h: one
 * rank per GPU of this machine, at most 4 (NCCL puts no two ranks of a communicator on one
 * GPU: with one GPU the group has one rank, which still goes through the communicator, the
 * order of operations and the device's own buffers). */

typedef enum { NC_REDUCE, NC_GATHER, NC_SCATTER, NC_BCAST } NcKind;

static double nc_input(int r, int64_t j, FloeDType dt) {
  return (double)((r + 1) * 3 + (j % 13)) - 8 + (dt == F32 ? 0.25 : 0);
}

static double nc_combine(double a, double b, FloeReduceOp op) {
  switch (op) {
  case FLOE_REDUCE_PROD: return a * b;
  case FLOE_REDUCE_MAX: return a > b ? a : b;
  case FLOE_REDUCE_MIN: return a < b ? a : b;
  default: return a + b;
  }
}

static int64_t nc_group = 500;

/* Builds kind on cuda:0..n-1 with backend nccl (inputs made on the CPU), runs 3 steps and
 * checks every rank's result. */
static void nc_case(FloeRuntime *rt, NcKind kind, int n, FloeDType dt, FloeReduceOp op,
                    int64_t count) {
  char what[160];
  snprintf(what, sizeof what, "nccl kind %d, %d ranks, %s, op %d, count %lld", kind, n,
           floe_dtype_name(dt), op, (long long)count);
  FloeGraph *g = floe_graph_new();
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = n;
  o.group_key = nc_group++;
  o.instance_key = 3;
  o.backend = "nccl";
  o.timeout_ms = 60000;
  int64_t in_dims[1] = {kind == NC_SCATTER ? count * n : count};
  char names[4][16];
  const char *fetch[4];
  int root = n - 1;
  for (int r = 0; r < n; r++) {
    char dev[16], xn[16];
    snprintf(dev, sizeof dev, "cuda:%d", r);
    snprintf(xn, sizeof xn, "x%d", r);
    snprintf(names[r], sizeof names[r], "out%d", r);
    fetch[r] = names[r];
    double *v = malloc(sizeof *v * (size_t)in_dims[0]);
    for (int64_t j = 0; j < in_dims[0]; j++) v[j] = nc_input(r, j, dt);
    FloeTensor *x = harness_from_doubles(dt, 1, in_dims, v);
    free(v);
    floe_graph_set_device_scope(g, "cpu:0");
    FloeOutput xo = floe_const(g, xn, x);
    floe_tensor_release(x);
    floe_graph_set_device_scope(g, dev);
    if (kind == NC_REDUCE) floe_all_reduce(g, names[r], xo, op, &o);
    else if (kind == NC_GATHER) floe_all_gather(g, names[r], xo, &o);
    else if (kind == NC_SCATTER) floe_reduce_scatter(g, names[r], xo, op, &o);
    else if (r == root) floe_broadcast_send(g, names[r], xo, &o);
    else floe_broadcast_recv(g, names[r], dt, floe_shape_make(1, in_dims), &o);
  }
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", what, floe_graph_error(g, NULL));
  FloeSession *s = harness_session(g, rt);
  for (int step = 0; step < 3; step++) {
    FloeTensor *outs[4] = {0};
    harness_run(s, NULL, 0, fetch, n, NULL, 0, outs, what);
    for (int r = 0; r < n; r++) {
      int64_t want_n = kind == NC_GATHER ? count * n : count;
      ck_assert_msg(floe_tensor_num_elements(outs[r]) == want_n, "%s: rank %d has %lld values",
                    what, r, (long long)floe_tensor_num_elements(outs[r]));
      for (int64_t j = 0; j < want_n; j++) {
        double want;
        if (kind == NC_GATHER) {
          want = nc_input((int)(j / count), j % count, dt);
        } else if (kind == NC_BCAST) {
          want = nc_input(root, j, dt);
        } else {
          int64_t src = kind == NC_SCATTER ? r * count + j : j;
          want = nc_input(0, src, dt);
          for (int q = 1; q < n; q++) want = nc_combine(want, nc_input(q, src, dt), op);
          if (op == FLOE_REDUCE_MEAN) want = dt == I32 ? trunc(want / n) : want / n;
        }
        double got = harness_get(outs[r], j);
        double tol = dt == FLOE_BF16 ? 0.02 * (1 + fabs(want)) : 1e-5 * (1 + fabs(want));
        ck_assert_msg(fabs(got - want) <= tol, "%s, step %d: rank %d element %lld = %g, want %g",
                      what, step, r, (long long)j, got, want);
      }
      floe_tensor_release(outs[r]);
    }
  }
  floe_session_free(s);
  floe_graph_free(g);
}

START_TEST(test_nccl) {
#ifndef HAVE_NCCL
  printf("test_nccl: the CUDA plugin was built without NCCL (configure found no nccl.h)\n");
#else
  FloeRuntime *rt = harness_runtime(4);
  int n = 0;
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    FloeDeviceInfo info;
    if (floe_runtime_device(rt, i, &info) == FLOE_OK && strcmp(info.type, "CUDA") == 0) n++;
  }
  if (n > 4) n = 4;
  ck_assert_int_ge(n, 1);
  static const FloeReduceOp ops[] = {FLOE_REDUCE_SUM, FLOE_REDUCE_MEAN, FLOE_REDUCE_MAX,
                                     FLOE_REDUCE_MIN, FLOE_REDUCE_PROD};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) nc_case(rt, NC_REDUCE, n, F32, ops[i], 1000);
  nc_case(rt, NC_REDUCE, n, F32, FLOE_REDUCE_SUM, 3 << 20); /* 12 MiB */
  nc_case(rt, NC_REDUCE, n, FLOE_BF16, FLOE_REDUCE_SUM, 4096);
  nc_case(rt, NC_REDUCE, n, I32, FLOE_REDUCE_MEAN, 777);
  nc_case(rt, NC_GATHER, n, F32, FLOE_REDUCE_SUM, 333);
  nc_case(rt, NC_SCATTER, n, F32, FLOE_REDUCE_SUM, 256);
  nc_case(rt, NC_BCAST, n, F32, FLOE_REDUCE_SUM, 5000);

  /* nccl on the CPU: refused, naming both memories. */
  FloeGraph *g = floe_graph_new();
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = 1;
  o.group_key = nc_group++;
  o.instance_key = 1;
  o.backend = "nccl";
  int64_t d = 4;
  floe_graph_set_device_scope(g, "cpu:0");
  FloeTensor *x = harness_random(F32, 1, &d, 5, -1, 1);
  floe_all_reduce(g, "r", floe_const(g, "x", x), FLOE_REDUCE_SUM, &o);
  floe_tensor_release(x);
  FloeSession *s = harness_session(g, rt);
  const char *fetch = "r";
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(floe_status_message(st), "CUDA memory"),
                "nccl on the CPU: %s: %s", floe_code_name(rc), floe_status_message(st));
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
#endif
}
END_TEST

/* ------------------------------------------------------------------------------------ */

/* Puts the freshly built CUDA plugin (and the local transport, which moves tensors between
 * cuda:0 and the host in split graphs) on the search path; returns the plugin's folder. */
static const char *add_cuda_plugin_path(char *dir, size_t len) {
  const char *top = getenv("top_builddir");
  const char *path = getenv("FLOE_PLUGIN_PATH");
  const char *transport = getenv("FLOE_TRANSPORT_DIR");
  char full[3 * PATH_MAX + 3];
  snprintf(dir, len, "%s/plugins/cuda/.libs", top ? top : "..");
  snprintf(full, sizeof full, "%s%s%s%s%s", path ? path : "", path && *path ? ":" : "", dir,
           transport && *transport ? ":" : "", transport ? transport : "");
  setenv("FLOE_PLUGIN_PATH", full, 1);
  return dir;
}

/* Says why the CUDA plugin cannot run here (NULL: a CUDA device is there). */
static const char *cuda_unusable(const char *dir, char *why, size_t len) {
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {sizeof o, NULL, NULL, 2, 1};
  FloeRuntime *rt = floe_runtime_new(&o, st);
  if (!rt) {
    snprintf(why, len, "no runtime: %s", floe_status_message(st));
    floe_status_free(st);
    return why;
  }
  floe_status_free(st);
  snprintf(why, len, "the CUDA plugin was not built (configure found no CUDA toolkit) or is "
           "not in %.900s", dir);
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (strcmp(p->name, "cuda") != 0) continue;
    if (p->state == FLOE_PLUGIN_LOADED && p->num_devices > 0)
      why[0] = '\0';
    else
      snprintf(why, len, "the CUDA plugin is %s: %s", floe_plugin_state_name(p->state),
               p->message);
  }
  floe_runtime_free(rt);
  return why[0] ? why : NULL;
}

/* cuda_unusable in a child process: a process that has initialised CUDA cannot use it in
 * the children it forks (cudaErrorInitializationError there), and Check runs each test in
 * a forked child. The child sends its answer through a pipe; "" means usable. */
static const char *cuda_unusable_in_child(const char *dir, char *why, size_t len) {
  int fd[2];
  if (pipe(fd) != 0) {
    snprintf(why, len, "pipe: %s", strerror(errno));
    return why;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, len, "fork: %s", strerror(errno));
    close(fd[0]);
    close(fd[1]);
    return why;
  }
  if (pid == 0) {
    close(fd[0]);
    const char *w = cuda_unusable(dir, why, len);
    size_t n = w ? strlen(w) : 0;
    _exit(write(fd[1], w ? w : "", n) == (ssize_t)n ? 0 : 1);
  }
  close(fd[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fd[0], why + got, len - 1 - got)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    got += (size_t)r;
  }
  why[got] = '\0';
  close(fd[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !got)
    snprintf(why, len, "the probe process for the CUDA plugin died (wait status %d)", ws);
  return why[0] ? why : NULL;
}

int main(void) {
  char why[1024], dir[PATH_MAX];
  if (cuda_unusable_in_child(add_cuda_plugin_path(dir, sizeof dir), why, sizeof why)) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  Suite *s = suite_create("cuda");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_binary);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_activation_grads);
  tcase_add_test(tc, test_cast_select_fill);
  tcase_add_test(tc, test_bias_addn);
  tcase_add_test(tc, test_reductions);
  tcase_add_test(tc, test_softmax_xent);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_matmul_f32_mode);
  tcase_add_test(tc, test_matmul_tf32_mode);
  tcase_add_test(tc, test_matmul_bf16_mode);
  tcase_add_test(tc, test_matmul_half_tensors);
  tcase_add_test(tc, test_conv);
  tcase_add_test(tc, test_pool);
  tcase_add_test(tc, test_array_ops);
  tcase_add_test(tc, test_optimizers);
  tcase_add_test(tc, test_out_of_memory);
  tcase_add_test(tc, test_device_description);
  tcase_add_test(tc, test_train_steps);
  tcase_add_test(tc, test_nccl);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
