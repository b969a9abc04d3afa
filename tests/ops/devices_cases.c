/* SPDX-License-Identifier: Apache-2.0 */
/* devices_cases.c - the cases test_devices runs on every device against the CPU: at least one
 * per op the CPU plugin has a kernel for (plugins/cpu), with broadcasting, transposes,
 * odd sizes, strides, padding and dilations where the op has them, and several dtypes.
 * Shapes are small (the whole table runs in seconds on a simulator) but odd, so that vector
 * tails and blocking edges are crossed. Gradient ops are included; random ops are checked by
 * their distribution; the variable updates read their variables back. */
#include "devices_cases.h"

#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define F32 FLOE_F32
#define F64 FLOE_F64
#define BF16 FLOE_BF16
#define I32 FLOE_I32
#define I64 FLOE_I64
#define BOOL FLOE_BOOL

/* Inputs: R random (dims after the rank), RS random scalar, V given values, S a given
 * scalar, IV / LV an i32 / i64 vector, X a variable, D derived. */
#define VALS(...) ((const double[]){__VA_ARGS__})
#define R(dt, lo, hi, rank, ...) {'r', dt, rank, {__VA_ARGS__}, lo, hi, NULL}
#define RS(dt, lo, hi) {'r', dt, 0, {0}, lo, hi, NULL}
#define V(dt, vals, rank, ...) {'v', dt, rank, {__VA_ARGS__}, 0, 0, vals}
#define S(dt, v) {'v', dt, 0, {0}, 0, 0, VALS(v)}
#define IV(n, ...) {'v', I32, 1, {n}, 0, 0, VALS(__VA_ARGS__)}
#define LV(n, ...) {'v', I64, 1, {n}, 0, 0, VALS(__VA_ARGS__)}
#define X(dt, lo, hi, rank, ...) {'x', dt, rank, {__VA_ARGS__}, lo, hi, NULL}
#define D(dt, rank, ...) {'d', dt, rank, {__VA_ARGS__}, 0, 0, NULL}

/* Attributes. */
#define AI(nm, v) {nm, 'i', v, NULL, FLOE_DTYPE_INVALID, 0, {0}}
#define AF(nm, v) {nm, 'f', v, NULL, FLOE_DTYPE_INVALID, 0, {0}}
#define AB(nm, v) {nm, 'b', v, NULL, FLOE_DTYPE_INVALID, 0, {0}}
#define AS(nm, s) {nm, 's', 0, s, FLOE_DTYPE_INVALID, 0, {0}}
#define AT(nm, t) {nm, 't', 0, NULL, t, 0, {0}}
#define AL(nm, n, ...) {nm, 'l', 0, NULL, FLOE_DTYPE_INVALID, n, {__VA_ARGS__}}
#define ATENSOR(nm, dt, seed, rank, ...) {nm, 'T', seed, NULL, dt, rank, {__VA_ARGS__}}

/* Window attributes in NHWC / NCHW order. */
#define NHWC4(nm, h, w) AL(nm, 4, 1, h, w, 1)
#define NCHW4(nm, h, w) AL(nm, 4, 1, 1, h, w)

/* ---------------------------------------------------------------------------------- */
/* Case families. */

/* Binary elementwise ops with NumPy broadcasting: x in [a0, a1), y in [b0, b1). */
#define BINARY(o, a0, a1, b0, b1) \
  {.op = o, .label = "same [3,5] f32", .in = {R(F32, a0, a1, 2, 3, 5), R(F32, b0, b1, 2, 3, 5)}}, \
  {.op = o, .label = "bcast [4,1,3] x [5,1] f32", \
   .in = {R(F32, a0, a1, 3, 4, 1, 3), R(F32, b0, b1, 2, 5, 1)}}, \
  {.op = o, .label = "bcast [] x [7] f32", .in = {RS(F32, a0, a1), R(F32, b0, b1, 1, 7)}}, \
  {.op = o, .label = "bcast [2,1031] x [1031] f32 (vector tails)", \
   .in = {R(F32, a0, a1, 2, 2, 1031), R(F32, b0, b1, 1, 1031)}}, \
  {.op = o, .label = "bcast [3,1] x [1,4] f64", \
   .in = {R(F64, a0, a1, 2, 3, 1), R(F64, b0, b1, 2, 1, 4)}}, \
  {.op = o, .label = "same [4,6] bf16", .in = {R(BF16, a0, a1, 2, 4, 6), R(BF16, b0, b1, 2, 4, 6)}}

/* Unary elementwise ops on values in [lo, hi). */
#define UNARY(o, lo, hi) \
  {.op = o, .label = "[2,3,7] f32", .in = {R(F32, lo, hi, 3, 2, 3, 7)}}, \
  {.op = o, .label = "[1001] f32 (vector tails)", .in = {R(F32, lo, hi, 1, 1001)}}, \
  {.op = o, .label = "[] f32", .in = {RS(F32, lo, hi)}}, \
  {.op = o, .label = "[33] f64", .in = {R(F64, lo, hi, 1, 33)}}

/* Elementwise gradient ops: both operands of one shape. */
#define GRAD2(o, a0, a1, b0, b1) \
  {.op = o, .label = "[4,9] f32", .in = {R(F32, a0, a1, 2, 4, 9), R(F32, b0, b1, 2, 4, 9)}}, \
  {.op = o, .label = "[1031] f32 (vector tails)", \
   .in = {R(F32, a0, a1, 1, 1031), R(F32, b0, b1, 1, 1031)}}, \
  {.op = o, .label = "[129] f64", .in = {R(F64, a0, a1, 1, 129), R(F64, b0, b1, 1, 129)}}

/* Comparisons: small integers so that ties happen, and floats. */
#define COMPARE(o) \
  {.op = o, .label = "bcast [3,4] x [4] i32", .in = {R(I32, 0, 3, 2, 3, 4), R(I32, 0, 3, 1, 4)}}, \
  {.op = o, .label = "same [5,7] f32", .in = {R(F32, -1, 1, 2, 5, 7), R(F32, -1, 1, 2, 5, 7)}}, \
  {.op = o, .label = "bcast [2,1,3] x [4,1] f64", \
   .in = {R(F64, -1, 1, 3, 2, 1, 3), R(F64, -1, 1, 2, 4, 1)}}

/* Reductions over axes (i32 scalar or vector). */
#define REDUCE(o, lo, hi) \
  {.op = o, .label = "[3,4,5] axis [1] f32", .in = {R(F32, lo, hi, 3, 3, 4, 5), IV(1, 1)}}, \
  {.op = o, .label = "[3,4,5] axes [0,2] keep_dims f32", \
   .in = {R(F32, lo, hi, 3, 3, 4, 5), IV(2, 0, 2)}, \
   .attrs = {AB("keep_dims", 1)}}, \
  {.op = o, .label = "[6,7] axis -1 (scalar) f32", .in = {R(F32, lo, hi, 2, 6, 7), S(I32, -1)}}, \
  {.op = o, .label = "[64,257] axis 0 f32 (long columns)", \
   .in = {R(F32, lo, hi, 2, 64, 257), IV(1, 0)}}, \
  {.op = o, .label = "[4,5] axes [0,1] f64", .in = {R(F64, lo, hi, 2, 4, 5), IV(2, 0, 1)}}, \
  {.op = o, .label = "[3,4] axis [1] i32", .in = {R(I32, -5, 5, 2, 3, 4), IV(1, 1)}}, \
  {.op = o, .label = "[2,3] no axes f32", .in = {R(F32, lo, hi, 2, 2, 3), V(I32, VALS(0), 1, 0)}}

/* Pooling windows: [2,6,6,3] 2x2 stride 2 VALID, [1,7,5,2] 3x3 stride 2 SAME, NCHW. */
#define POOL(o) \
  {.op = o, .label = "[2,6,6,3] 2x2/2 VALID", .in = {R(F32, -1, 1, 4, 2, 6, 6, 3)}, \
   .attrs = {NHWC4("ksize", 2, 2), NHWC4("strides", 2, 2), AS("padding", "VALID")}}, \
  {.op = o, .label = "[1,7,5,2] 3x3/2 SAME", .in = {R(F32, -1, 1, 4, 1, 7, 5, 2)}, \
   .attrs = {NHWC4("ksize", 3, 3), NHWC4("strides", 2, 2), AS("padding", "SAME")}}, \
  {.op = o, .label = "NCHW [1,2,5,5] 3x3/1 SAME", .in = {R(F32, -1, 1, 4, 1, 2, 5, 5)}, \
   .attrs = {NCHW4("ksize", 3, 3), NCHW4("strides", 1, 1), AS("padding", "SAME"), \
             AS("data_format", "NCHW")}}, \
  {.op = o, .label = "[1,5,4,3] 2x3/1x2 VALID f64", .in = {R(F64, -1, 1, 4, 1, 5, 4, 3)}, \
   .attrs = {NHWC4("ksize", 2, 3), NHWC4("strides", 1, 2), AS("padding", "VALID")}}

/* MaxPoolGrad-like ops (orig_input, orig_output, grad) over POOL's windows; orig_output is
 * derived by MaxPool on the reference. */
#define POOL_GRAD(o, dv) \
  {.op = o, .label = "[2,6,6,3] 2x2/2 VALID", \
   .in = {R(F32, -1, 1, 4, 2, 6, 6, 3), D(F32, 4, 2, 3, 3, 3), R(F32, -1, 1, 4, 2, 3, 3, 3)}, \
   .attrs = {NHWC4("ksize", 2, 2), NHWC4("strides", 2, 2), AS("padding", "VALID")}, \
   .derive = dv}, \
  {.op = o, .label = "[1,7,5,2] 3x3/2 SAME", \
   .in = {R(F32, -1, 1, 4, 1, 7, 5, 2), D(F32, 4, 1, 4, 3, 2), R(F32, -1, 1, 4, 1, 4, 3, 2)}, \
   .attrs = {NHWC4("ksize", 3, 3), NHWC4("strides", 2, 2), AS("padding", "SAME")}, \
   .derive = dv}, \
  {.op = o, .label = "NCHW [1,2,5,5] 3x3/1 SAME", \
   .in = {R(F32, -1, 1, 4, 1, 2, 5, 5), D(F32, 4, 1, 2, 5, 5), R(F32, -1, 1, 4, 1, 2, 5, 5)}, \
   .attrs = {NCHW4("ksize", 3, 3), NCHW4("strides", 1, 1), AS("padding", "SAME"), \
             AS("data_format", "NCHW")}, \
   .derive = dv}

/* Convolution geometries: input, filter (HWIO), output; the three conv ops share them. */
#define CONV_SAME_ATTRS NHWC4("strides", 1, 1), AS("padding", "SAME")
#define CONV_S2_ATTRS NHWC4("strides", 2, 2), AS("padding", "VALID")
#define CONV_DIL_ATTRS NHWC4("strides", 1, 1), AS("padding", "SAME"), NHWC4("dilations", 2, 2)
#define CONV_NCHW_ATTRS \
  NCHW4("strides", 2, 2), AS("padding", "SAME"), AS("data_format", "NCHW")
#define CONV_ODD_ATTRS NHWC4("strides", 2, 3), AS("padding", "SAME")

/* ---------------------------------------------------------------------------------- */
/* Derived inputs. */

static FloeTensor *relu_copy(const FloeTensor *t) {
  double *v = harness_values(t);
  int64_t n = floe_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0 ? v[i] : 0;
  FloeShape s = floe_tensor_shape(t);
  FloeTensor *r = harness_from_doubles(floe_tensor_dtype(t), s.rank, s.dims, v);
  free(v);
  return r;
}

/* orig_output = MaxPool(orig_input) with the case's window. */
static void derive_maxpool(const XCase *c, FloeTensor **ins, FloeRuntime *rt) {
  floe_tensor_release(ins[1]);
  ins[1] = xdev_run_ref(rt, "MaxPool", ins, 1, c->attrs, 0);
}

/* The fused op's orig_input is a ReLU's output (>= 0, with zero windows). */
static void derive_relu_maxpool(const XCase *c, FloeTensor **ins, FloeRuntime *rt) {
  FloeTensor *y = relu_copy(ins[0]);
  floe_tensor_release(ins[0]);
  ins[0] = y;
  derive_maxpool(c, ins, rt);
}

/* Whole numbers in orig_input, so windows tie: the first maximum gets the gradient. */
static void derive_ties_maxpool(const XCase *c, FloeTensor **ins, FloeRuntime *rt) {
  double *v = harness_values(ins[0]);
  FloeShape s = floe_tensor_shape(ins[0]);
  for (int64_t i = 0; i < floe_tensor_num_elements(ins[0]); i++) v[i] = floor(v[i]);
  FloeTensor *t = harness_from_doubles(floe_tensor_dtype(ins[0]), s.rank, s.dims, v);
  free(v);
  floe_tensor_release(ins[0]);
  ins[0] = t;
  derive_maxpool(c, ins, rt);
}

/* c and act (inputs 4 and 5) from LSTMCell(x, h_prev, c_prev, w, b), b random. */
static void derive_lstm(const XCase *c, FloeTensor **ins, FloeRuntime *rt) {
  (void)c;
  int64_t four_h = floe_tensor_dim(ins[3], 1);
  FloeTensor *fwd[5] = {ins[0], ins[1], ins[2], ins[3],
                        harness_random(floe_tensor_dtype(ins[0]), 1, &four_h, 77, -1, 1)};
  for (int k = 4; k <= 5; k++) {
    floe_tensor_release(ins[k]);
    ins[k] = xdev_run_ref(rt, "LSTMCell", fwd, 5, NULL, k - 3);
  }
  floe_tensor_release(fwd[4]);
}

/* c and act (inputs 3 and 4) from LSTMCellRecurrent(gates_x, h_prev, c_prev, w_h), gates_x
 * random; w_h is [4H,H] when the case sets w_transposed (transposed back here). */
static void derive_lstm_recurrent(const XCase *c, FloeTensor **ins, FloeRuntime *rt) {
  bool transposed = c->attrs[0].name && strcmp(c->attrs[0].name, "w_transposed") == 0 &&
                    c->attrs[0].num != 0;
  FloeDType dt = floe_tensor_dtype(ins[0]);
  FloeTensor *w = ins[2];
  if (transposed) { /* [4H,H] -> [H,4H] */
    int64_t rows = floe_tensor_dim(ins[2], 0), cols = floe_tensor_dim(ins[2], 1);
    double *v = harness_values(ins[2]), *t = malloc((size_t)(rows * cols) * sizeof *t);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) t[j * rows + i] = v[i * cols + j];
    w = harness_from_doubles(dt, 2, (int64_t[]){cols, rows}, t);
    free(v);
    free(t);
  }
  int64_t gdims[2] = {floe_tensor_dim(ins[0], 0), floe_tensor_dim(w, 1)};
  FloeTensor *fwd[4] = {harness_random(dt, 2, gdims, 78, -1, 1), ins[0], ins[1], w};
  for (int k = 3; k <= 4; k++) {
    floe_tensor_release(ins[k]);
    ins[k] = xdev_run_ref(rt, "LSTMCellRecurrent", fwd, 4, NULL, k - 2);
  }
  floe_tensor_release(fwd[0]);
  if (transposed) floe_tensor_release(w);
}

/* ---------------------------------------------------------------------------------- */
/* The table. */

const XCase xcases[] = {
    /* --- plumbing --- */
    {.op = "Identity", .label = "[3,4] f32", .in = {R(F32, -1, 1, 2, 3, 4)}},
    {.op = "Identity", .label = "[5] bool", .in = {R(BOOL, 0, 1, 1, 5)}},
    /* Data movement takes every dtype on most devices: one case per dtype. */
    {.op = "Identity", .label = "[2,3] f64", .in = {R(F64, -1, 1, 2, 2, 3)}},
    {.op = "Identity", .label = "[7] f16", .in = {R(FLOE_F16, -1, 1, 1, 7)}},
    {.op = "Identity", .label = "[7] bf16", .in = {R(BF16, -1, 1, 1, 7)}},
    {.op = "Identity", .label = "[9] i8", .in = {R(FLOE_I8, -99, 99, 1, 9)}},
    {.op = "Identity", .label = "[9] u8", .in = {R(FLOE_U8, 0, 255, 1, 9)}},
    {.op = "Identity", .label = "[4] i32", .in = {R(I32, -99, 99, 1, 4)}},
    {.op = "Identity", .label = "[4] i64", .in = {R(I64, -99, 99, 1, 4)}},
    {.op = "StopGradient", .label = "[3,4] f32", .in = {R(F32, -1, 1, 2, 3, 4)}},
    {.op = "StopGradient", .label = "[6] i64", .in = {R(I64, -9, 9, 1, 6)}},
    {.op = "NoOp", .label = "no inputs, run as a target", .in = {{0}}},
    {.op = "Const", .label = "[3,4] f32",
     .in = {{0}}, .attrs = {ATENSOR("value", F32, 7, 2, 3, 4), AT("dtype", F32)}},
    {.op = "Const", .label = "[] f64",
     .in = {{0}}, .attrs = {ATENSOR("value", F64, 8, 0, 0), AT("dtype", F64)}},

    /* --- elementwise binary --- */
    BINARY("Add", -1, 1, -1, 1),
    {.op = "Add", .label = "bcast [0,3] x [3] (empty)",
     .in = {R(F32, -1, 1, 2, 0, 3), R(F32, -1, 1, 1, 3)}},
    {.op = "Relu", .label = "[0] (empty)", .in = {R(F32, -1, 1, 1, 0)}},
    {.op = "Add", .label = "bcast [3,4] x [4] i32",
     .in = {R(I32, -9, 9, 2, 3, 4), R(I32, -9, 9, 1, 4)}},
    BINARY("Sub", -1, 1, -1, 1),
    {.op = "Sub", .label = "same [7] i64", .in = {R(I64, -99, 99, 1, 7), R(I64, -99, 99, 1, 7)}},
    BINARY("Mul", -2, 2, -2, 2),
    {.op = "Mul", .label = "bcast [2,3] x [] i32", .in = {R(I32, -9, 9, 2, 2, 3), RS(I32, -9, 9)}},
    BINARY("Div", -2, 2, 0.5, 2),
    {.op = "Div", .label = "i32 truncating, mixed signs",
     .in = {R(I32, -50, 50, 2, 3, 5), V(I32, VALS(3, -4, 7, -2, 9), 1, 5)}},
    BINARY("Pow", 0.5, 2, -2, 2),
    {.op = "Pow", .label = "i32 small exponents",
     .in = {R(I32, -3, 4, 2, 3, 4), R(I32, 0, 4, 2, 3, 4)}},
    BINARY("Maximum", -1, 1, -1, 1),
    {.op = "Maximum", .label = "bcast [3,4] x [4] i32",
     .in = {R(I32, -9, 9, 2, 3, 4), R(I32, -9, 9, 1, 4)}},
    BINARY("Minimum", -1, 1, -1, 1),
    {.op = "Minimum", .label = "bcast [3,4] x [4] i32",
     .in = {R(I32, -9, 9, 2, 3, 4), R(I32, -9, 9, 1, 4)}},

    /* --- elementwise unary and activations --- */
    UNARY("Neg", -3, 3),
    {.op = "Neg", .label = "[5,6] i32", .in = {R(I32, -9, 9, 2, 5, 6)}},
    UNARY("Abs", -3, 3),
    {.op = "Abs", .label = "[5,6] i32", .in = {R(I32, -9, 9, 2, 5, 6)}},
    UNARY("Square", -3, 3),
    {.op = "Square", .label = "[5,6] i32", .in = {R(I32, -9, 9, 2, 5, 6)}},
    UNARY("Exp", -5, 5),
    UNARY("Log", 0.05, 4),
    UNARY("Sqrt", 0.05, 4),
    UNARY("Rsqrt", 0.05, 4),
    UNARY("Relu", -3, 3),
    {.op = "Relu", .label = "[5,6] i32", .in = {R(I32, -9, 9, 2, 5, 6)}},
    UNARY("Relu6", -3, 9),
    {.op = "Relu6", .label = "[5,6] i32", .in = {R(I32, -9, 9, 2, 5, 6)}},
    UNARY("LeakyRelu", -3, 3),
    {.op = "LeakyRelu", .label = "[4,5] alpha 0.05",
     .in = {R(F32, -3, 3, 2, 4, 5)}, .attrs = {AF("alpha", 0.05)}},
    UNARY("Elu", -3, 3),
    {.op = "Elu", .label = "[4,5] alpha 0.5",
     .in = {R(F32, -3, 3, 2, 4, 5)}, .attrs = {AF("alpha", 0.5)}},
    UNARY("Gelu", -4, 4),
    {.op = "Gelu", .label = "[4,5] tanh approximation", .in = {R(F32, -4, 4, 2, 4, 5)},
     .attrs = {AB("approximate", 1)}},
    UNARY("Sigmoid", -6, 6),
    UNARY("Tanh", -4, 4),
    UNARY("Softplus", -6, 6),
    UNARY("Sign", -3, 3),
    {.op = "Sign", .label = "[5,6] i32", .in = {R(I32, -3, 3, 2, 5, 6)}},
    UNARY("Cos", -6, 6),
    UNARY("Sin", -6, 6),
    UNARY("Floor", -3, 3),
    /* Saturating ranges: a naive formula overflows or loses the small side. */
    {.op = "Exp", .label = "[257] wide range", .in = {R(F32, -80, 80, 1, 257)}},
    {.op = "Sigmoid", .label = "[257] saturating", .in = {R(F32, -60, 60, 1, 257)}},
    {.op = "Tanh", .label = "[257] saturating", .in = {R(F32, -20, 20, 1, 257)}},
    {.op = "Softplus", .label = "[257] saturating", .in = {R(F32, -60, 60, 1, 257)}},
    {.op = "Add", .label = "bcast [2,1,4,1] x [1,3,1,5] (both sides)",
     .in = {R(F32, -1, 1, 4, 2, 1, 4, 1), R(F32, -1, 1, 4, 1, 3, 1, 5)}},
    {.op = "Mul", .label = "bcast [2,1,4,1] x [1,3,1,5] (both sides)",
     .in = {R(F32, -1, 1, 4, 2, 1, 4, 1), R(F32, -1, 1, 4, 1, 3, 1, 5)}},
    {.op = "AddN", .label = "5 x [1031] f32",
     .in = {R(F32, -1, 1, 1, 1031), R(F32, -1, 1, 1, 1031), R(F32, -1, 1, 1, 1031),
            R(F32, -1, 1, 1, 1031), R(F32, -1, 1, 1, 1031)},
     .lists = {5}},
    {.op = "AddN", .label = "3 x [3,4] f32", .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 4),
                               R(F32, -1, 1, 2, 3, 4)}, .lists = {3}},
    {.op = "AddN", .label = "1 x [7] f32", .in = {R(F32, -1, 1, 1, 7)}, .lists = {1}},
    {.op = "AddN", .label = "2 x [1031] f64",
     .in = {R(F64, -1, 1, 1, 1031), R(F64, -1, 1, 1, 1031)}, .lists = {2}},
    {.op = "AddN", .label = "2 x [2,3] i32",
     .in = {R(I32, -9, 9, 2, 2, 3), R(I32, -9, 9, 2, 2, 3)}, .lists = {2}},

    /* --- elementwise gradients --- */
    GRAD2("ReluGrad", -1, 1, -2, 2),
    {.op = "ReluGrad", .label = "[5,6] i32",
     .in = {R(I32, -9, 9, 2, 5, 6), R(I32, -9, 9, 2, 5, 6)}},
    GRAD2("Relu6Grad", -1, 1, -2, 8),
    GRAD2("LeakyReluGrad", -1, 1, -2, 2),
    {.op = "LeakyReluGrad", .label = "[4,5] alpha 0.05",
     .in = {R(F32, -1, 1, 2, 4, 5), R(F32, -2, 2, 2, 4, 5)},
     .attrs = {AF("alpha", 0.05)}},
    GRAD2("EluGrad", -1, 1, -0.9, 2),
    GRAD2("GeluGrad", -1, 1, -4, 4),
    {.op = "GeluGrad", .label = "[4,5] tanh approximation",
     .in = {R(F32, -1, 1, 2, 4, 5), R(F32, -4, 4, 2, 4, 5)},
     .attrs = {AB("approximate", 1)}},
    GRAD2("SigmoidGrad", 0.01, 0.99, -1, 1),
    GRAD2("TanhGrad", -0.99, 0.99, -1, 1),
    GRAD2("SoftplusGrad", -1, 1, -6, 6),
    GRAD2("SqrtGrad", 0.2, 2, -1, 1),
    GRAD2("RsqrtGrad", 0.2, 2, -1, 1),

    /* --- softmax and losses --- */
    {.op = "Softmax", .label = "[4,10] last axis f32", .in = {R(F32, -5, 5, 2, 4, 10)}},
    {.op = "Softmax", .label = "[3,5,6] axis 1 f32",
     .in = {R(F32, -5, 5, 3, 3, 5, 6)}, .attrs = {AI("axis", 1)}},
    {.op = "Softmax", .label = "[2,1031] f32 (vector tails)", .in = {R(F32, -5, 5, 2, 2, 1031)}},
    {.op = "Softmax", .label = "[2,17] f64", .in = {R(F64, -5, 5, 2, 2, 17)}},
    {.op = "Softmax", .label = "[4,10] large logits", .in = {R(F32, -80, 80, 2, 4, 10)}},
    {.op = "LogSoftmax", .label = "[4,10] large logits", .in = {R(F32, -80, 80, 2, 4, 10)}},
    {.op = "SoftmaxCrossEntropyWithLogits", .label = "[4,10] large logits",
     .in = {R(F32, -80, 80, 2, 4, 10), R(F32, 0, 1, 2, 4, 10)}},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .label = "[3,6] large logits",
     .in = {R(F32, -80, 80, 2, 3, 6), LV(3, 5, 0, 2)}},
    {.op = "LogSoftmax", .label = "[4,10] last axis f32", .in = {R(F32, -5, 5, 2, 4, 10)}},
    {.op = "LogSoftmax", .label = "[3,5,6] axis 0 f32",
     .in = {R(F32, -5, 5, 3, 3, 5, 6)}, .attrs = {AI("axis", 0)}},
    {.op = "LogSoftmax", .label = "[2,17] f64", .in = {R(F64, -5, 5, 2, 2, 17)}},
    {.op = "SoftmaxCrossEntropyWithLogits", .label = "[8,10] f32", .in = {R(F32, -4, 4, 2, 8, 10),
                                                     R(F32, 0, 1, 2, 8, 10)}},
    {.op = "SoftmaxCrossEntropyWithLogits", .label = "[3,7] f64",
     .in = {R(F64, -4, 4, 2, 3, 7), R(F64, 0, 1, 2, 3, 7)}},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .label = "[6,5] i64 labels f32",
     .in = {R(F32, -4, 4, 2, 6, 5), LV(6, 0, 4, 2, 1, 3, 0)}},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .label = "[4,9] i32 labels f64",
     .in = {R(F64, -4, 4, 2, 4, 9), IV(4, 8, 0, 5, 5)}},

    /* --- matrix products --- */
    {.op = "MatMul", .label = "[3,4] x [4,5]",
     .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 4, 5)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[4,3]^T x [4,5]",
     .in = {R(F32, -1, 1, 2, 4, 3), R(F32, -1, 1, 2, 4, 5)},
     .attrs = {AB("transpose_a", 1)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[3,4] x [5,4]^T",
     .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 5, 4)},
     .attrs = {AB("transpose_b", 1)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[6,3]^T x [7,6]^T",
     .in = {R(F32, -1, 1, 2, 6, 3), R(F32, -1, 1, 2, 7, 6)},
     .attrs = {AB("transpose_a", 1), AB("transpose_b", 1)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[17,33] x [33,9] (odd sizes)",
     .in = {R(F32, -1, 1, 2, 17, 33), R(F32, -1, 1, 2, 33, 9)},
     .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[130,129] x [129,131] (past one 128 tile)",
     .in = {R(F32, -1, 1, 2, 130, 129), R(F32, -1, 1, 2, 129, 131)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[8,2048] x [2048,8] (long K)",
     .in = {R(F32, -1, 1, 2, 8, 2048), R(F32, -1, 1, 2, 2048, 8)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[3,0] x [0,5] (empty K: zeros)",
     .in = {R(F32, -1, 1, 2, 3, 0), R(F32, -1, 1, 2, 0, 5)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[0,4] x [4,5] (no rows)",
     .in = {R(F32, -1, 1, 2, 0, 4), R(F32, -1, 1, 2, 4, 5)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[1,1] x [1,1]",
     .in = {R(F32, -1, 1, 2, 1, 1), R(F32, -1, 1, 2, 1, 1)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[5,6] x [6,7] f64",
     .in = {R(F64, -1, 1, 2, 5, 6), R(F64, -1, 1, 2, 6, 7)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[8,16] x [16,8] bf16",
     .in = {R(BF16, -1, 1, 2, 8, 16), R(BF16, -1, 1, 2, 16, 8)},
     .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "[2,3,4] x [2,4,5]",
     .in = {R(F32, -1, 1, 3, 2, 3, 4), R(F32, -1, 1, 3, 2, 4, 5)},
     .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "bcast [2,1,3,4] x [3,4,5]",
     .in = {R(F32, -1, 1, 4, 2, 1, 3, 4), R(F32, -1, 1, 3, 3, 4, 5)}, .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "adj_x [3,4,2]^T x [3,4,6]",
     .in = {R(F32, -1, 1, 3, 3, 4, 2), R(F32, -1, 1, 3, 3, 4, 6)},
     .attrs = {AB("adj_x", 1)}, .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "adj_y [2,5,7] x [2,3,7]^T",
     .in = {R(F32, -1, 1, 3, 2, 5, 7), R(F32, -1, 1, 3, 2, 3, 7)},
     .attrs = {AB("adj_y", 1)}, .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "[3,4,5] x [5,2] (unbatched y) f64",
     .in = {R(F64, -1, 1, 3, 3, 4, 5), R(F64, -1, 1, 2, 5, 2)}, .flags = XF_MATRIX},
    {.op = "BatchMatMul", .label = "bcast [3,4,5] x [2,1,5,6]",
     .in = {R(F32, -1, 1, 3, 3, 4, 5), R(F32, -1, 1, 4, 2, 1, 5, 6)}, .flags = XF_MATRIX},
    {.op = "MatMul", .label = "[129,130]^T x [131,129]^T (past a tile)",
     .in = {R(F32, -1, 1, 2, 129, 130), R(F32, -1, 1, 2, 131, 129)},
     .attrs = {AB("transpose_a", 1), AB("transpose_b", 1)}, .flags = XF_MATRIX},
    {.op = "BiasAdd", .label = "NHWC [2,3,4,5] + [5]",
     .in = {R(F32, -1, 1, 4, 2, 3, 4, 5), R(F32, -1, 1, 1, 5)}},
    {.op = "BiasAdd", .label = "NCHW [2,5,3,4] + [5]",
     .in = {R(F32, -1, 1, 4, 2, 5, 3, 4), R(F32, -1, 1, 1, 5)},
     .attrs = {AS("data_format", "NCHW")}},
    {.op = "BiasAdd", .label = "[7,1031] + [1031] f64",
     .in = {R(F64, -1, 1, 2, 7, 1031), R(F64, -1, 1, 1, 1031)}},
    {.op = "BiasAdd", .label = "[4,3] + [3] i32",
     .in = {R(I32, -9, 9, 2, 4, 3), R(I32, -9, 9, 1, 3)}},
    {.op = "BiasAddGrad", .label = "NHWC [2,3,4,5]", .in = {R(F32, -1, 1, 4, 2, 3, 4, 5)}},
    {.op = "BiasAddGrad", .label = "NCHW [2,5,3,4]", .in = {R(F32, -1, 1, 4, 2, 5, 3, 4)},
     .attrs = {AS("data_format", "NCHW")}},
    {.op = "BiasAddGrad", .label = "[300,7] f64", .in = {R(F64, -1, 1, 2, 300, 7)}},
    {.op = "BiasAddGrad", .label = "[1000,7] f32 (long columns)",
     .in = {R(F32, -1, 1, 2, 1000, 7)}},
    {.op = "BiasAddGrad", .label = "[4,3] i32", .in = {R(I32, -9, 9, 2, 4, 3)}},

    /* --- convolutions: input, filter [kh,kw,in,out] --- */
    {.op = "Conv2D", .label = "[2,7,7,3] * [3,3,3,4] SAME",
     .in = {R(F32, -1, 1, 4, 2, 7, 7, 3), R(F32, -1, 1, 4, 3, 3, 3, 4)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2D", .label = "[1,9,8,2] * [3,2,2,5] stride 2 VALID",
     .in = {R(F32, -1, 1, 4, 1, 9, 8, 2), R(F32, -1, 1, 4, 3, 2, 2, 5)}, .attrs = {CONV_S2_ATTRS},
     .flags = XF_MATRIX},
    {.op = "Conv2D", .label = "[1,8,8,2] * [3,3,2,3] dilation 2 SAME",
     .in = {R(F32, -1, 1, 4, 1, 8, 8, 2), R(F32, -1, 1, 4, 3, 3, 2, 3)}, .attrs = {CONV_DIL_ATTRS},
     .flags = XF_MATRIX},
    {.op = "Conv2D", .label = "NCHW [2,3,6,6] * [3,3,3,4] stride 2 SAME",
     .in = {R(F32, -1, 1, 4, 2, 3, 6, 6), R(F32, -1, 1, 4, 3, 3, 3, 4)}, .attrs = {CONV_NCHW_ATTRS},
     .flags = XF_MATRIX},
    {.op = "Conv2D", .label = "[1,7,10,3] * [2,4,3,2] stride 2x3 SAME",
     .in = {R(F32, -1, 1, 4, 1, 7, 10, 3), R(F32, -1, 1, 4, 2, 4, 3, 2)}, .attrs = {CONV_ODD_ATTRS},
     .flags = XF_MATRIX},
    {.op = "Conv2D", .label = "[1,5,5,2] * [3,3,2,2] SAME f64",
     .in = {R(F64, -1, 1, 4, 1, 5, 5, 2), R(F64, -1, 1, 4, 3, 3, 2, 2)}, .attrs = {CONV_SAME_ATTRS},
     .flags = XF_MATRIX},
    {.op = "_FusedConv2DBiasRelu", .label = "[2,7,7,3] * [3,3,3,4] + [4] SAME",
     .in = {R(F32, -1, 1, 4, 2, 7, 7, 3), R(F32, -1, 1, 4, 3, 3, 3, 4), R(F32, -1, 1, 1, 4)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "_FusedConv2DBiasRelu", .label = "NCHW [2,3,6,6] * [3,3,3,4] + [4] stride 2",
     .in = {R(F32, -1, 1, 4, 2, 3, 6, 6), R(F32, -1, 1, 4, 3, 3, 3, 4), R(F32, -1, 1, 1, 4)},
     .attrs = {CONV_NCHW_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "[2,7,7,3] <- [3,3,3,4] SAME",
     .in = {IV(4, 2, 7, 7, 3), R(F32, -1, 1, 4, 3, 3, 3, 4), R(F32, -1, 1, 4, 2, 7, 7, 4)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "[1,9,8,2] <- [3,2,2,5] stride 2 VALID",
     .in = {IV(4, 1, 9, 8, 2), R(F32, -1, 1, 4, 3, 2, 2, 5), R(F32, -1, 1, 4, 1, 4, 4, 5)},
     .attrs = {CONV_S2_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "[1,8,8,2] <- [3,3,2,3] dilation 2 SAME",
     .in = {IV(4, 1, 8, 8, 2), R(F32, -1, 1, 4, 3, 3, 2, 3), R(F32, -1, 1, 4, 1, 8, 8, 3)},
     .attrs = {CONV_DIL_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "NCHW [2,3,6,6] <- [3,3,3,4] stride 2 SAME",
     .in = {IV(4, 2, 3, 6, 6), R(F32, -1, 1, 4, 3, 3, 3, 4), R(F32, -1, 1, 4, 2, 4, 3, 3)},
     .attrs = {CONV_NCHW_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "[1,7,10,3] <- [2,4,3,2] stride 2x3 SAME",
     .in = {IV(4, 1, 7, 10, 3), R(F32, -1, 1, 4, 2, 4, 3, 2), R(F32, -1, 1, 4, 1, 4, 4, 2)},
     .attrs = {CONV_ODD_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropInput", .label = "[1,5,5,2] <- [3,3,2,2] SAME f64",
     .in = {IV(4, 1, 5, 5, 2), R(F64, -1, 1, 4, 3, 3, 2, 2), R(F64, -1, 1, 4, 1, 5, 5, 2)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[2,7,7,3] -> [3,3,3,4] SAME",
     .in = {R(F32, -1, 1, 4, 2, 7, 7, 3), IV(4, 3, 3, 3, 4), R(F32, -1, 1, 4, 2, 7, 7, 4)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[4,16,16,8] -> [3,3,8,16] SAME (long K)",
     .in = {R(F32, -1, 1, 4, 4, 16, 16, 8), IV(4, 3, 3, 8, 16), R(F32, -1, 1, 4, 4, 16, 16, 16)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[1,9,8,2] -> [3,2,2,5] stride 2 VALID",
     .in = {R(F32, -1, 1, 4, 1, 9, 8, 2), IV(4, 3, 2, 2, 5), R(F32, -1, 1, 4, 1, 4, 4, 5)},
     .attrs = {CONV_S2_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[1,8,8,2] -> [3,3,2,3] dilation 2 SAME",
     .in = {R(F32, -1, 1, 4, 1, 8, 8, 2), IV(4, 3, 3, 2, 3), R(F32, -1, 1, 4, 1, 8, 8, 3)},
     .attrs = {CONV_DIL_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "NCHW [2,3,6,6] -> [3,3,3,4] stride 2 SAME",
     .in = {R(F32, -1, 1, 4, 2, 3, 6, 6), IV(4, 3, 3, 3, 4), R(F32, -1, 1, 4, 2, 4, 3, 3)},
     .attrs = {CONV_NCHW_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[1,7,10,3] -> [2,4,3,2] stride 2x3 SAME",
     .in = {R(F32, -1, 1, 4, 1, 7, 10, 3), IV(4, 2, 4, 3, 2), R(F32, -1, 1, 4, 1, 4, 4, 2)},
     .attrs = {CONV_ODD_ATTRS}, .flags = XF_MATRIX},
    {.op = "Conv2DBackpropFilter", .label = "[1,5,5,2] -> [3,3,2,2] SAME f64",
     .in = {R(F64, -1, 1, 4, 1, 5, 5, 2), IV(4, 3, 3, 2, 2), R(F64, -1, 1, 4, 1, 5, 5, 2)},
     .attrs = {CONV_SAME_ATTRS}, .flags = XF_MATRIX},

    /* --- pooling and its gradients --- */
    POOL("MaxPool"),
    POOL("AvgPool"),
    {.op = "MaxPool", .label = "[1,7,5,2] 3x3/2 SAME all negative (padding is no 0)",
     .in = {R(F32, -2, -1, 4, 1, 7, 5, 2)},
     .attrs = {NHWC4("ksize", 3, 3), NHWC4("strides", 2, 2), AS("padding", "SAME")}},
    {.op = "MaxPoolGrad", .label = "[1,6,6,2] 2x2/1 VALID with ties",
     .in = {R(F32, 0, 3, 4, 1, 6, 6, 2), D(F32, 4, 1, 5, 5, 2), R(F32, -1, 1, 4, 1, 5, 5, 2)},
     .attrs = {NHWC4("ksize", 2, 2), NHWC4("strides", 1, 1), AS("padding", "VALID")},
     .derive = derive_ties_maxpool},
    POOL_GRAD("MaxPoolGrad", derive_maxpool),
    POOL_GRAD("_FusedMaxPoolGradRelu", derive_relu_maxpool),
    {.op = "AvgPoolGrad", .label = "[2,6,6,3] 2x2/2 VALID",
     .in = {IV(4, 2, 6, 6, 3), R(F32, -1, 1, 4, 2, 3, 3, 3)},
     .attrs = {NHWC4("ksize", 2, 2), NHWC4("strides", 2, 2), AS("padding", "VALID")}},
    {.op = "AvgPoolGrad", .label = "[1,7,5,2] 3x3/2 SAME",
     .in = {IV(4, 1, 7, 5, 2), R(F32, -1, 1, 4, 1, 4, 3, 2)},
     .attrs = {NHWC4("ksize", 3, 3), NHWC4("strides", 2, 2), AS("padding", "SAME")}},
    {.op = "AvgPoolGrad", .label = "NCHW [1,2,5,5] 3x3/1 SAME",
     .in = {IV(4, 1, 2, 5, 5), R(F32, -1, 1, 4, 1, 2, 5, 5)},
     .attrs = {NCHW4("ksize", 3, 3), NCHW4("strides", 1, 1), AS("padding", "SAME"),
               AS("data_format", "NCHW")}},

    /* --- shapes and data movement --- */
    {.op = "Reshape", .label = "[2,3,4] -> [4,-1]",
     .in = {R(F32, -1, 1, 3, 2, 3, 4), IV(2, 4, -1)}},
    {.op = "Reshape", .label = "[6] -> [3,2] i32, i64 shape",
     .in = {R(I32, -9, 9, 1, 6), LV(2, 3, 2)}},
    {.op = "Reshape", .label = "[2,3] -> [6] f64", .in = {R(F64, -1, 1, 2, 2, 3), IV(1, 6)}},
    {.op = "Reshape", .label = "[2,3] -> [3,2] f16",
     .in = {R(FLOE_F16, -1, 1, 2, 2, 3), IV(2, 3, 2)}},
    {.op = "Reshape", .label = "[2,3] -> [3,2] bf16", .in = {R(BF16, -1, 1, 2, 2, 3), IV(2, 3, 2)}},
    {.op = "Reshape", .label = "[4] -> [2,2] i8", .in = {R(FLOE_I8, -99, 99, 1, 4), IV(2, 2, 2)}},
    {.op = "Reshape", .label = "[4] -> [2,2] u8", .in = {R(FLOE_U8, 0, 255, 1, 4), IV(2, 2, 2)}},
    {.op = "Reshape", .label = "[4] -> [1,4] i64", .in = {R(I64, -99, 99, 1, 4), IV(2, 1, 4)}},
    {.op = "Reshape", .label = "[4] -> [4,1] bool", .in = {R(BOOL, 0, 1, 1, 4), IV(2, 4, 1)}},
    {.op = "Transpose", .label = "[2,3,4] perm [2,0,1]",
     .in = {R(F32, -1, 1, 3, 2, 3, 4), IV(3, 2, 0, 1)}},
    {.op = "Transpose", .label = "[33,17] perm [1,0]",
     .in = {R(F32, -1, 1, 2, 33, 17), IV(2, 1, 0)}},
    {.op = "Transpose", .label = "[2,3,4,5] perm [0,3,1,2] f64",
     .in = {R(F64, -1, 1, 4, 2, 3, 4, 5), IV(4, 0, 3, 1, 2)}},
    {.op = "Transpose", .label = "[3,2] perm [1,0] bool",
     .in = {R(BOOL, 0, 1, 2, 3, 2), LV(2, 1, 0)}},
    {.op = "Concat", .label = "[2,3] [2,1] [2,4] axis 1",
     .in = {R(F32, -1, 1, 2, 2, 3), R(F32, -1, 1, 2, 2, 1), R(F32, -1, 1, 2, 2, 4), S(I32, 1)},
            .lists = {3, 1}},
    {.op = "Concat", .label = "[1,3] [2,3] axis -2 i32",
     .in = {R(I32, -9, 9, 2, 1, 3), R(I32, -9, 9, 2, 2, 3),
                                            S(I32, -2)}, .lists = {2, 1}},
    {.op = "Concat", .label = "[2,2,3] [2,2,3] axis 2 f64",
     .in = {R(F64, -1, 1, 3, 2, 2, 3), R(F64, -1, 1, 3, 2, 2, 3),
                                               S(I64, 2)}, .lists = {2, 1}},
    {.op = "Split", .label = "[6,4] axis 0 in 3",
     .in = {R(F32, -1, 1, 2, 6, 4), S(I32, 0)}, .attrs = {AI("num_split", 3)}},
    {.op = "Split", .label = "[2,9] axis -1 in 3 i32", .in = {R(I32, -9, 9, 2, 2, 9), S(I32, -1)},
     .attrs = {AI("num_split", 3)}},
    {.op = "Slice", .label = "[4,5,6] begin [1,0,2] size [2,-1,3]",
     .in = {R(F32, -1, 1, 3, 4, 5, 6), IV(3, 1, 0, 2), IV(3, 2, -1, 3)}},
    {.op = "Slice", .label = "[7] begin [3] size [4] i64",
     .in = {R(I64, -9, 9, 1, 7), LV(1, 3), LV(1, 4)}},
    {.op = "StridedSlice", .label = "[6,8] [1:5:2, 7:0:-2]",
     .in = {R(F32, -1, 1, 2, 6, 8), IV(2, 1, 7), IV(2, 5, 0), IV(2, 2, -2)}},
    {.op = "StridedSlice", .label = "[4,5] [1, :] shrink axis 0",
     .in = {R(F32, -1, 1, 2, 4, 5), IV(2, 1, 0), IV(2, 2, 0), IV(2, 1, 1)},
     .attrs = {AI("shrink_axis_mask", 1), AI("end_mask", 2)}},
    {.op = "StridedSlice", .label = "[3,4,5] [..., 1:4] new axis, begin mask",
     .in = {R(F32, -1, 1, 3, 3, 4, 5), IV(3, 0, 0, 1), IV(3, 0, 0, 4), IV(3, 1, 1, 1)},
     .attrs = {AI("ellipsis_mask", 1), AI("new_axis_mask", 2)}},
    {.op = "Gather", .label = "[5,3] rows [4,0,2,2]",
     .in = {R(F32, -1, 1, 2, 5, 3), IV(4, 4, 0, 2, 2)}},
    {.op = "Gather", .label = "[2,6,3] axis 1 i64 indices",
     .in = {R(F32, -1, 1, 3, 2, 6, 3), LV(2, 5, 1)},
     .attrs = {AI("axis", 1)}},
    {.op = "Gather", .label = "[7] i32 params",
     .in = {R(I32, -9, 9, 1, 7), V(I32, VALS(6, 0, 3, 3, 1, 2), 2, 2, 3)}},
    {.op = "Pad", .label = "[2,3] CONSTANT 0.5",
     .in = {R(F32, -1, 1, 2, 2, 3), V(I32, VALS(1, 0, 2, 1), 2, 2, 2)},
     .attrs = {AF("constant_value", 0.5)}},
    {.op = "Pad", .label = "[3,4] REFLECT",
     .in = {R(F32, -1, 1, 2, 3, 4), V(I32, VALS(1, 1, 2, 1), 2, 2, 2)},
     .attrs = {AS("mode", "REFLECT")}},
    {.op = "Pad", .label = "[2,2,3] CONSTANT i32", .in = {R(I32, -9, 9, 3, 2, 2, 3),
                                     V(I64, VALS(0, 1, 1, 0, 2, 2), 2, 3, 2)}},
    {.op = "Tile", .label = "[2,3] x [2,3]", .in = {R(F32, -1, 1, 2, 2, 3), IV(2, 2, 3)}},
    {.op = "Tile", .label = "[3] x [4] bool", .in = {R(BOOL, 0, 1, 1, 3), IV(1, 4)}},
    {.op = "Squeeze", .label = "[1,3,1,2] all", .in = {R(F32, -1, 1, 4, 1, 3, 1, 2)}},
    {.op = "Squeeze", .label = "[1,3,1,2] dim 2",
     .in = {R(F32, -1, 1, 4, 1, 3, 1, 2)}, .attrs = {AL("squeeze_dims", 1, 2)}},
    {.op = "ExpandDims", .label = "[3,4] axis 1",
     .in = {R(F32, -1, 1, 2, 3, 4)}, .attrs = {AI("axis", 1)}},
    {.op = "ExpandDims", .label = "[3,4] axis -1 i32",
     .in = {R(I32, -9, 9, 2, 3, 4)}, .attrs = {AI("axis", -1)}},
    {.op = "Shape", .label = "[2,3,4] i32", .in = {R(F32, -1, 1, 3, 2, 3, 4)}},
    {.op = "Shape", .label = "[5,1] i64",
     .in = {R(I32, -9, 9, 2, 5, 1)}, .attrs = {AT("out_type", I64)}},
    {.op = "Size", .label = "[2,3,4] i32", .in = {R(F32, -1, 1, 3, 2, 3, 4)}},
    {.op = "Size", .label = "[] i64", .in = {RS(F64, -1, 1)}, .attrs = {AT("out_type", I64)}},
    {.op = "Rank", .label = "[2,3,4]", .in = {R(F32, -1, 1, 3, 2, 3, 4)}},
    {.op = "Rank", .label = "[]", .in = {RS(I32, -9, 9)}},
    {.op = "Fill", .label = "[3,4] of 1.5", .in = {IV(2, 3, 4), S(F32, 1.5)}},
    {.op = "Fill", .label = "[5] of -7 i32, i64 dims", .in = {LV(1, 5), S(I32, -7)}},
    {.op = "ZerosLike", .label = "[3,4] f32", .in = {R(F32, -1, 1, 2, 3, 4)}},
    {.op = "ZerosLike", .label = "[5] i32", .in = {R(I32, -9, 9, 1, 5)}},
    {.op = "OnesLike", .label = "[3,4] f32", .in = {R(F32, -1, 1, 2, 3, 4)}},
    {.op = "OnesLike", .label = "[5] bf16", .in = {R(BF16, -1, 1, 1, 5)}},
    {.op = "Cast", .label = "f32 -> i32 truncates",
     .in = {R(F32, -10, 10, 2, 4, 5)}, .attrs = {AT("DstT", I32)}},
    {.op = "Cast", .label = "i32 -> f32",
     .in = {R(I32, -99, 99, 1, 9)}, .attrs = {AT("DstT", F32)}},
    {.op = "Cast", .label = "f32 -> f64", .in = {R(F32, -1, 1, 1, 9)}, .attrs = {AT("DstT", F64)}},
    {.op = "Cast", .label = "f64 -> f32",
     .in = {R(F64, -1, 1, 1, 1031)}, .attrs = {AT("DstT", F32)}},
    {.op = "Cast", .label = "f32 -> bf16",
     .in = {R(F32, -3, 3, 1, 1031)}, .attrs = {AT("DstT", BF16)}},
    {.op = "Cast", .label = "bf16 -> f32",
     .in = {R(BF16, -3, 3, 1, 17)}, .attrs = {AT("DstT", F32)}},
    {.op = "Cast", .label = "f32 -> bool",
     .in = {V(F32, VALS(0, 1.5, -2, 0, 0.25), 1, 5)}, .attrs = {AT("DstT", BOOL)}},
    {.op = "Cast", .label = "bool -> f32", .in = {R(BOOL, 0, 1, 1, 8)}, .attrs = {AT("DstT", F32)}},
    {.op = "Cast", .label = "i64 -> i32",
     .in = {R(I64, -999, 999, 1, 8)}, .attrs = {AT("DstT", I32)}},
    {.op = "BroadcastTo", .label = "[3,1] -> [2,3,4]",
     .in = {R(F32, -1, 1, 2, 3, 1), IV(3, 2, 3, 4)}},
    {.op = "BroadcastTo", .label = "[] -> [5] i32", .in = {RS(I32, -9, 9), LV(1, 5)}},
    {.op = "InvertPermutation", .label = "[3,0,4,1,2] i32", .in = {IV(5, 3, 0, 4, 1, 2)}},
    {.op = "InvertPermutation", .label = "[1,0,2] i64", .in = {LV(3, 1, 0, 2)}},
    {.op = "ConcatOffset", .label = "axis 1 of [2,3,5] [2,4,5] [2,1,5]",
     .in = {S(I32, 1), IV(3, 2, 3, 5), IV(3, 2, 4, 5), IV(3, 2, 1, 5)}, .lists = {1, 3}},
    {.op = "OneHot", .label = "i64 [4] depth 4 (one out of range)",
     .in = {LV(4, 0, 2, 5, 1), S(I32, 4), S(F32, 1), S(F32, 0)}},
    {.op = "OneHot", .label = "i32 [2,3] depth 3 axis 0 f64",
     .in = {V(I32, VALS(0, 1, 2, 2, -1, 0), 2, 2, 3), S(I32, 3), S(F64, 2.5), S(F64, -1)},
     .attrs = {AI("axis", 0)}},

    /* --- reductions --- */
    REDUCE("Sum", -1, 1),
    {.op = "Sum", .label = "[0,4] axis 0 (empty: zeros)", .in = {R(F32, -1, 1, 2, 0, 4), IV(1, 0)}},
    REDUCE("Mean", -1, 1),
    REDUCE("Max", -1, 1),
    REDUCE("Min", -1, 1),
    REDUCE("Prod", 0.8, 1.25),
    {.op = "ArgMax", .label = "[4,7] dim 1 -> i64", .in = {R(F32, -1, 1, 2, 4, 7), S(I32, 1)}},
    {.op = "ArgMax", .label = "[5,3] dim 0 -> i32", .in = {R(F64, -1, 1, 2, 5, 3), S(I32, 0)},
     .attrs = {AT("output_type", I32)}},
    {.op = "ArgMax", .label = "[2,9] i32 with ties", .in = {R(I32, 0, 3, 2, 2, 9), S(I32, -1)}},
    {.op = "ArgMin", .label = "[4,7] dim 1 -> i64", .in = {R(F32, -1, 1, 2, 4, 7), S(I32, 1)}},
    {.op = "ArgMin", .label = "[5,3] dim 0 -> i32", .in = {R(F64, -1, 1, 2, 5, 3), S(I32, 0)},
     .attrs = {AT("output_type", I32)}},
    {.op = "ArgMin", .label = "[2,9] i32 with ties", .in = {R(I32, 0, 3, 2, 2, 9), S(I32, -1)}},

    /* --- comparisons and logic --- */
    COMPARE("Equal"),
    {.op = "Equal", .label = "bool [4] x [4]", .in = {R(BOOL, 0, 1, 1, 4), R(BOOL, 0, 1, 1, 4)}},
    COMPARE("NotEqual"),
    COMPARE("Less"),
    COMPARE("LessEqual"),
    COMPARE("Greater"),
    COMPARE("GreaterEqual"),
    {.op = "LogicalAnd", .label = "bcast [4,5] x [5]",
     .in = {R(BOOL, 0, 1, 2, 4, 5), R(BOOL, 0, 1, 1, 5)}},
    {.op = "LogicalOr", .label = "bcast [4,5] x [5]",
     .in = {R(BOOL, 0, 1, 2, 4, 5), R(BOOL, 0, 1, 1, 5)}},
    {.op = "LogicalNot", .label = "[7]", .in = {R(BOOL, 0, 1, 1, 7)}},
    {.op = "Select", .label = "same [3,4]",
     .in = {R(BOOL, 0, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 4)}},
    {.op = "Select", .label = "bcast [3,1] [1,4] [3,4] i32",
     .in = {R(BOOL, 0, 1, 2, 3, 1), R(I32, -9, 9, 2, 1, 4), R(I32, -9, 9, 2, 3, 4)}},

    /* --- random: by distribution; stateless ones are defined exactly --- */
    {.op = "RandomUniform", .label = "[128,128] f32", .in = {IV(2, 128, 128)},
     .attrs = {AI("seed", 5), AI("seed2", 9)}, .stat = XS_UNIFORM},
    {.op = "RandomUniform", .label = "[16384] f64", .in = {LV(1, 16384)},
     .attrs = {AI("seed", 6), AI("seed2", 1), AT("dtype", F64)}, .stat = XS_UNIFORM},
    {.op = "RandomNormal", .label = "[128,128] f32", .in = {IV(2, 128, 128)},
     .attrs = {AI("seed", 5), AI("seed2", 9)}, .stat = XS_NORMAL},
    {.op = "RandomNormal", .label = "[16384] f64", .in = {IV(1, 16384)},
     .attrs = {AI("seed", 3), AI("seed2", 2), AT("dtype", F64)}, .stat = XS_NORMAL},
    {.op = "TruncatedNormal", .label = "[128,128] f32", .in = {IV(2, 128, 128)},
     .attrs = {AI("seed", 5), AI("seed2", 9)}, .stat = XS_TRUNCATED},
    {.op = "TruncatedNormal", .label = "[16384] f64", .in = {IV(1, 16384)},
     .attrs = {AI("seed", 4), AI("seed2", 4), AT("dtype", F64)}, .stat = XS_TRUNCATED},
    {.op = "LogUniformCandidateSampler", .label = "8192 of 16 with replacement",
     .in = {V(I64, VALS(0, 3, 15, 2, 7, 7, 1, 0), 2, 4, 2)},
     .attrs = {AI("num_true", 2), AI("num_sampled", 8192), AB("unique", 0), AI("range_max", 16),
               AI("seed", 3), AI("seed2", 4)},
     .stat = XS_LOG_UNIFORM},
    {.op = "LogUniformCandidateSampler", .label = "6 of 16 unique",
     .in = {V(I64, VALS(0, 3, 15, 2), 2, 4, 1)},
     .attrs = {AI("num_true", 1), AI("num_sampled", 6), AB("unique", 1), AI("range_max", 16),
               AI("seed", 3), AI("seed2", 4)},
     .stat = XS_LOG_UNIFORM},
    {.op = "StatelessRandomUniform", .label = "[4,5] f32", .in = {IV(2, 4, 5), LV(2, 7, 11)}},
    {.op = "StatelessRandomUniform", .label = "[1031] f64",
     .in = {IV(1, 1031), LV(2, 1, 2)}, .attrs = {AT("dtype", F64)}},
    {.op = "StatelessRandomNormal", .label = "[4,5] f32", .in = {IV(2, 4, 5), LV(2, 7, 11)}},
    {.op = "StatelessRandomNormal", .label = "[1031] f64",
     .in = {IV(1, 1031), IV(2, 3, 4)}, .attrs = {AT("dtype", F64)}},

    /* --- gradients of shape ops --- */
    {.op = "SumToShape", .label = "[4,3,5] -> [3,1]",
     .in = {R(F32, -1, 1, 3, 4, 3, 5), IV(2, 3, 1)}},
    {.op = "SumToShape", .label = "[4,3,5] -> [4,1,5] f64",
     .in = {R(F64, -1, 1, 3, 4, 3, 5), IV(3, 4, 1, 5)}},
    {.op = "SumToShape", .label = "[2,3] -> [] i32",
     .in = {R(I32, -9, 9, 2, 2, 3), V(I32, VALS(0), 1, 0)}},
    {.op = "ExpandReduced", .label = "[3,1] -> [3,4] sum keep_dims",
     .in = {R(F32, -1, 1, 2, 3, 1), IV(2, 3, 4), IV(1, 1)},
     .attrs = {AB("keep_dims", 1)}},
    {.op = "ExpandReduced", .label = "[4] -> [3,4] mean",
     .in = {R(F32, -1, 1, 1, 4), IV(2, 3, 4), IV(1, 0)},
     .attrs = {AB("mean", 1)}},
    {.op = "ExpandReduced", .label = "[2] -> [2,3,4] mean axes [1,2] f64",
     .in = {R(F64, -1, 1, 1, 2), IV(3, 2, 3, 4),
                                                               IV(2, 1, 2)},
     .attrs = {AB("mean", 1)}},
    {.op = "SliceGrad", .label = "[2,3] into [4,5] at [1,2]",
     .in = {IV(2, 4, 5), IV(2, 1, 2), R(F32, -1, 1, 2, 2, 3)}},
    {.op = "SliceGrad", .label = "[3] into [7] at [4] i32",
     .in = {IV(1, 7), IV(1, 4), R(I32, -9, 9, 1, 3)}},
    {.op = "StridedSliceGrad", .label = "[6,8] [1:5:2, 7:0:-2]",
     .in = {IV(2, 6, 8), IV(2, 1, 7), IV(2, 5, 0), IV(2, 2, -2), R(F32, -1, 1, 2, 2, 4)}},
    {.op = "StridedSliceGrad", .label = "[4,5] [1, :] shrink axis 0",
     .in = {IV(2, 4, 5), IV(2, 1, 0), IV(2, 2, 0), IV(2, 1, 1), R(F32, -1, 1, 1, 5)},
     .attrs = {AI("shrink_axis_mask", 1), AI("end_mask", 2)}},
    {.op = "GatherGrad", .label = "[5,3] rows [4,0,2,2] (repeated)",
     .in = {IV(2, 5, 3), IV(4, 4, 0, 2, 2), R(F32, -1, 1, 2, 4, 3)}},
    {.op = "GatherGrad", .label = "[2,6,3] axis 1 f64",
     .in = {IV(3, 2, 6, 3), LV(2, 5, 1), R(F64, -1, 1, 3, 2, 2, 3)},
     .attrs = {AI("axis", 1)}},
    {.op = "PadGrad", .label = "[3,6] -> [2,3] CONSTANT",
     .in = {R(F32, -1, 1, 2, 3, 6), V(I32, VALS(1, 0, 2, 1), 2, 2, 2)}},
    {.op = "PadGrad", .label = "[5,7] -> [3,4] REFLECT",
     .in = {R(F32, -1, 1, 2, 5, 7), V(I32, VALS(1, 1, 2, 1), 2, 2, 2)},
     .attrs = {AS("mode", "REFLECT")}},
    {.op = "TileGrad", .label = "[4,9] -> [2,3]", .in = {R(F32, -1, 1, 2, 4, 9), IV(2, 2, 3)}},
    {.op = "TileGrad", .label = "[12] -> [3] i32", .in = {R(I32, -9, 9, 1, 12), IV(1, 4)}},

    /* --- recurrent cells: x [3,4], h and c [3,5], w [9,20], b [20] --- */
    {.op = "LSTMCell", .label = "B3 I4 H5 forget_bias 1",
     .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5),
      R(F32, -0.5, 0.5, 2, 9, 20), R(F32, -0.5, 0.5, 1, 20)},
     .attrs = {AF("forget_bias", 1)}, .flags = XF_MATRIX},
    {.op = "LSTMCell", .label = "B2 I3 H4 f64",
     .in = {R(F64, -1, 1, 2, 2, 3), R(F64, -1, 1, 2, 2, 4), R(F64, -1, 1, 2, 2, 4),
      R(F64, -0.5, 0.5, 2, 7, 16), R(F64, -0.5, 0.5, 1, 16)},
     .flags = XF_MATRIX},
    {.op = "LSTMCellGrad", .label = "B3 I4 H5",
     .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5),
      R(F32, -0.5, 0.5, 2, 9, 20), D(F32, 2, 3, 5), D(F32, 2, 3, 20), R(F32, -1, 1, 2, 3, 5),
      R(F32, -1, 1, 2, 3, 5)},
     .flags = XF_MATRIX, .derive = derive_lstm},
    {.op = "LSTMCellBackprop", .label = "B3 I4 H5",
     .in = {R(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5),
      R(F32, -0.5, 0.5, 2, 9, 20), D(F32, 2, 3, 5), D(F32, 2, 3, 20), R(F32, -1, 1, 2, 3, 5),
      R(F32, -1, 1, 2, 3, 5)},
     .flags = XF_MATRIX, .derive = derive_lstm},
    {.op = "LSTMCellBackprop", .label = "B2 I3 H4 f64",
     .in = {R(F64, -1, 1, 2, 2, 3), R(F64, -1, 1, 2, 2, 4), R(F64, -1, 1, 2, 2, 4),
      R(F64, -0.5, 0.5, 2, 7, 16), D(F64, 2, 2, 4), D(F64, 2, 2, 16), R(F64, -1, 1, 2, 2, 4),
      R(F64, -1, 1, 2, 2, 4)},
     .flags = XF_MATRIX, .derive = derive_lstm},
    {.op = "LSTMCellRecurrent", .label = "B3 H5",
     .in = {R(F32, -1, 1, 2, 3, 20), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5),
      R(F32, -0.5, 0.5, 2, 5, 20)},
     .attrs = {AF("forget_bias", 1)}, .flags = XF_MATRIX},
    {.op = "LSTMCellRecurrentBackprop", .label = "B3 H5",
     .in = {R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5), R(F32, -0.5, 0.5, 2, 5, 20),
      D(F32, 2, 3, 5), D(F32, 2, 3, 20), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5)},
     .flags = XF_MATRIX, .derive = derive_lstm_recurrent},
    {.op = "LSTMCellRecurrentBackprop", .label = "B3 H5 w_h given transposed",
     .in = {R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5), R(F32, -0.5, 0.5, 2, 20, 5),
      D(F32, 2, 3, 5), D(F32, 2, 3, 20), R(F32, -1, 1, 2, 3, 5), R(F32, -1, 1, 2, 3, 5)},
     .attrs = {AB("w_transposed", 1)}, .flags = XF_MATRIX, .derive = derive_lstm_recurrent},

    /* --- variable updates: outputs are the variables read back after one step --- */
    {.op = "AssignAddVariableOp", .label = "[3,4] f32",
     .in = {X(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 4)}},
    {.op = "AssignAddVariableOp", .label = "[5] i32",
     .in = {X(I32, -9, 9, 1, 5), R(I32, -9, 9, 1, 5)}},
    {.op = "AssignSubVariableOp", .label = "[3,4] f32",
     .in = {X(F32, -1, 1, 2, 3, 4), R(F32, -1, 1, 2, 3, 4)}},
    {.op = "AssignSubVariableOp", .label = "[1031] f64",
     .in = {X(F64, -1, 1, 1, 1031), R(F64, -1, 1, 1, 1031)}},
    {.op = "ResourceApplyGradientDescent", .label = "[5,7] f32",
     .in = {X(F32, -1, 1, 2, 5, 7), S(F32, 0.1), R(F32, -1, 1, 2, 5, 7)}},
    {.op = "ResourceApplyGradientDescent", .label = "[1031] f64",
     .in = {X(F64, -1, 1, 1, 1031), S(F64, 0.25), R(F64, -1, 1, 1, 1031)}},
    {.op = "ResourceApplyMomentum", .label = "[5,7] f32",
     .in = {X(F32, -1, 1, 2, 5, 7), X(F32, -1, 1, 2, 5, 7), S(F32, 0.05), R(F32, -1, 1, 2, 5, 7),
      S(F32, 0.9)}},
    {.op = "ResourceApplyMomentum", .label = "[33] f32 nesterov",
     .in = {X(F32, -1, 1, 1, 33), X(F32, -1, 1, 1, 33), S(F32, 0.05), R(F32, -1, 1, 1, 33), S(F32,
            0.9)},
     .attrs = {AB("use_nesterov", 1)}},
    {.op = "ResourceApplyAdam", .label = "[5,7] f32",
     .in = {X(F32, -1, 1, 2, 5, 7), X(F32, -1, 1, 2, 5, 7), X(F32, 0.1, 1, 2, 5, 7), S(F32, 0.9),
      S(F32, 0.999), S(F32, 0.01), S(F32, 0.9), S(F32, 0.999), S(F32, 1e-7),
      R(F32, -1, 1, 2, 5, 7)}},
    {.op = "ResourceApplyAdam", .label = "[1031] f64 nesterov",
     .in = {X(F64, -1, 1, 1, 1031), X(F64, -1, 1, 1, 1031), X(F64, 0.1, 1, 1, 1031), S(F64, 0.81),
      S(F64, 0.998), S(F64, 0.01), S(F64, 0.9), S(F64, 0.999), S(F64, 1e-7),
      R(F64, -1, 1, 1, 1031)},
     .attrs = {AB("use_nesterov", 1)}},
    {.op = "ResourceApplyRMSProp", .label = "[5,7] f32",
     .in = {X(F32, -1, 1, 2, 5, 7), X(F32, 0.1, 1, 2, 5, 7), X(F32, -0.1, 0.1, 2, 5, 7), S(F32,
            0.01),
      S(F32, 0.9), S(F32, 0.5), S(F32, 1e-6), R(F32, -1, 1, 2, 5, 7)}},
    {.op = "ResourceApplyAdagrad", .label = "[5,7] f32",
     .in = {X(F32, -1, 1, 2, 5, 7), X(F32, 0.1, 1, 2, 5, 7), S(F32, 0.1), S(F32, 1e-7),
      R(F32, -1, 1, 2, 5, 7)}},
    /* --- N-d convolution and pooling (ops_conv.def): filter [spatial..., in / groups, out] --- */
    {.op = "Conv", .label = "CF [2,4,7,6] * [3,2,2,6] groups 2 stride 2 pads (1,0),(2,1)",
     .in = {R(F32, -1, 1, 4, 2, 4, 7, 6), R(F32, -1, 1, 4, 3, 2, 2, 6)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 4, 1, 1, 2, 2),
               AS("padding", "EXPLICIT"), AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 0, 2, 1),
               AI("groups", 2)}, .flags = XF_MATRIX},
    {.op = "Conv", .label = "CL [1,9,3] * [3,3,4] dilation 2 SAME (1-D)",
     .in = {R(F32, -1, 1, 3, 1, 9, 3), R(F32, -1, 1, 3, 3, 3, 4)},
     .attrs = {AL("dilations", 3, 1, 2, 1), AS("padding", "SAME")}, .flags = XF_MATRIX},
    {.op = "Conv", .label = "CF [1,2,4,5,3] * [2,2,2,2,3] stride 1x2x1 (3-D) f64",
     .in = {R(F64, -1, 1, 5, 1, 2, 4, 5, 3), R(F64, -1, 1, 5, 2, 2, 2, 2, 3)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 5, 1, 1, 1, 2, 1)},
     .flags = XF_MATRIX},
    {.op = "Conv", .label = "CF [1,3,5,5] * [3,3,1,3] depthwise SAME bf16",
     .in = {R(BF16, -1, 1, 4, 1, 3, 5, 5), R(BF16, -1, 1, 4, 3, 3, 1, 3)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AS("padding", "SAME"), AI("groups", 3)},
     .flags = XF_MATRIX},
    {.op = "ConvTranspose", .label = "CF [1,2,3,4] * [3,3,2,2] stride 2 pads (1,0),(0,-1) op 1",
     .in = {R(F32, -1, 1, 4, 1, 2, 3, 4), R(F32, -1, 1, 4, 3, 3, 2, 2)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 4, 1, 1, 2, 2),
               AS("padding", "EXPLICIT"), AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 0, 0, -1),
               AL("output_padding", 4, 0, 0, 1, 1)}, .flags = XF_MATRIX},
    {.op = "ConvTranspose", .label = "CL [1,5,4] * [2,3,4] groups 2 dilation 2 (1-D) f64",
     .in = {R(F64, -1, 1, 3, 1, 5, 4), R(F64, -1, 1, 3, 2, 3, 4)},
     .attrs = {AL("dilations", 3, 1, 2, 1), AI("groups", 2)}, .flags = XF_MATRIX},
    {.op = "Pool", .label = "CF MAX [2,3,7,6] 3x2/2 pads (1,1),(0,1) dilation 2x1 ceil",
     .in = {R(F32, -1, 1, 4, 2, 3, 7, 6)},
     .attrs = {AS("pooling_type", "MAX"), AS("data_format", "CHANNELS_FIRST"),
               AL("ksize", 4, 1, 1, 3, 2), AL("strides", 4, 1, 1, 2, 2),
               AL("dilations", 4, 1, 1, 2, 1), AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 1, 0, 1), AB("ceil_mode", 1)}},
    {.op = "Pool", .label = "CF AVG [1,2,6,5] 3x3/2 pads 1 counted, ceil",
     .in = {R(F32, -1, 1, 4, 1, 2, 6, 5)},
     .attrs = {AS("pooling_type", "AVG"), AS("data_format", "CHANNELS_FIRST"),
               AL("ksize", 4, 1, 1, 3, 3), AL("strides", 4, 1, 1, 2, 2), AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 1, 1, 1), AB("ceil_mode", 1),
               AB("count_include_pad", 1)}},
    {.op = "Pool", .label = "CL AVG [1,5,4,6,2] 2x3x2/2 SAME (3-D)",
     .in = {R(F32, -1, 1, 5, 1, 5, 4, 6, 2)},
     .attrs = {AS("pooling_type", "AVG"), AL("ksize", 5, 1, 2, 3, 2, 1),
               AL("strides", 5, 1, 2, 2, 2, 1), AS("padding", "SAME")}},
    {.op = "Pool", .label = "CL MAX [2,9,3] 4/3 SAME (1-D) i32",
     .in = {R(I32, -50, 50, 3, 2, 9, 3)},
     .attrs = {AS("pooling_type", "MAX"), AL("ksize", 3, 1, 4, 1), AL("strides", 3, 1, 3, 1),
               AS("padding", "SAME")}},
    {.op = "MaxPoolWithIndices", .label = "[2,2,5,5] 3x3/2 pads 1 column-major",
     .in = {R(F32, -1, 1, 4, 2, 2, 5, 5)},
     .attrs = {AL("ksize", 4, 1, 1, 3, 3), AL("strides", 4, 1, 1, 2, 2), AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 1, 1, 1), AI("storage_order", 1)}},
    /* ONNX math family (ops_math_signal.def). */
    UNARY("Ceil", -5, 5),
    UNARY("Round", -5, 5),
    {.op = "Round", .label = "[8] f32 halves (to even)",
     .in = {V(F32, VALS(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.49), 1, 8)}},
    UNARY("Erf", -3, 3),
    UNARY("Tan", -1.5, 1.5),
    UNARY("Asin", -1, 1),
    UNARY("Acos", -1, 1),
    UNARY("Atan", -6, 6),
    UNARY("Sinh", -4, 4),
    UNARY("Cosh", -4, 4),
    UNARY("Asinh", -6, 6),
    UNARY("Acosh", 1, 6),
    UNARY("Atanh", -0.99, 0.99),
    {.op = "Erf", .label = "[4,6] bf16", .in = {R(BF16, -3, 3, 2, 4, 6)}},
    {.op = "IsNan", .label = "[6] f32", .in = {V(F32, VALS(1, NAN, INFINITY, -INFINITY, 0, -NAN), 1, 6)}},
    {.op = "IsNan", .label = "[4] f64", .in = {V(F64, VALS(NAN, 2, -INFINITY, 0), 1, 4)}},
    {.op = "IsInf", .label = "[6] f32", .in = {V(F32, VALS(1, NAN, INFINITY, -INFINITY, 0, -3), 1, 6)}},
    {.op = "IsInf", .label = "[4] f64 negative only",
     .in = {V(F64, VALS(NAN, INFINITY, -INFINITY, 0), 1, 4)}, .attrs = {AB("detect_positive", 0)}},
    {.op = "IsInf", .label = "[4] bf16 positive only",
     .in = {V(BF16, VALS(NAN, INFINITY, -INFINITY, 0), 1, 4)}, .attrs = {AB("detect_negative", 0)}},
    BINARY("FloorMod", -9, 9, 0.5, 4),
    BINARY("TruncateMod", -9, 9, 0.5, 4),
    {.op = "FloorMod", .label = "[3,4] x [4] i32 mixed signs",
     .in = {R(I32, -20, 20, 2, 3, 4), V(I32, VALS(3, -3, 7, -1), 1, 4)}},
    {.op = "TruncateMod", .label = "[3,4] x [4] i64 mixed signs",
     .in = {R(I64, -20, 20, 2, 3, 4), V(I64, VALS(3, -3, 7, -1), 1, 4)}},
    {.op = "FloorMod", .label = "[6] f32 negative divisors",
     .in = {R(F32, -9, 9, 1, 6), R(F32, -4, -0.5, 1, 6)}},
    {.op = "LeftShift", .label = "[3,5] x [5] i32 (shifts past the width)",
     .in = {R(I32, -100, 100, 2, 3, 5), V(I32, VALS(0, 1, 7, 31, 40), 1, 5)}},
    {.op = "RightShift", .label = "[3,5] x [5] i64 (shifts past the width)",
     .in = {R(I64, -100, 100, 2, 3, 5), V(I64, VALS(0, 1, 7, 63, 70), 1, 5)}},
    {.op = "LeftShift", .label = "[7] u8", .in = {R(FLOE_U8, 0, 255, 1, 7), R(FLOE_U8, 0, 9, 1, 7)}},
    {.op = "RightShift", .label = "[7] u8", .in = {R(FLOE_U8, 0, 255, 1, 7), R(FLOE_U8, 0, 9, 1, 7)}},
    {.op = "MatrixDeterminant", .label = "[4,5,5] f32", .in = {R(F32, -1, 1, 3, 4, 5, 5)}},
    {.op = "MatrixDeterminant", .label = "[3,3] f64", .in = {R(F64, -1, 1, 2, 3, 3)}},
    {.op = "CosineSumWindow", .label = "10 periodic Hann f32", .in = {S(I64, 10)}},
    {.op = "CosineSumWindow", .label = "7 symmetric f64", .in = {S(I32, 7)},
     .attrs = {AB("periodic", 0), AT("dtype", F64)}},
    {.op = "DFT", .label = "[2,12,1] real axis 1 (direct)", .in = {R(F32, -1, 1, 3, 2, 12, 1), S(I64, 12)}},
    {.op = "DFT", .label = "[2,16,3,2] complex f64 axis 1 (FFT) onesided",
     .in = {R(F64, -1, 1, 4, 2, 16, 3, 2), S(I64, 16)}, .attrs = {AB("onesided", 1)}},
    {.op = "DFT", .label = "[3,10,2] inverse axis -2 padded to 13",
     .in = {R(F32, -1, 1, 3, 3, 10, 2), S(I32, 13)}, .attrs = {AI("axis", -2), AB("inverse", 1)}},
    {.op = "DFT", .label = "[9,2,2] inverse onesided axis 0 to 16 real",
     .in = {R(F64, -1, 1, 3, 9, 2, 2), S(I64, 16)},
     .attrs = {AI("axis", 0), AB("inverse", 1), AB("onesided", 1)}},
    {.op = "STFT", .label = "[2,64,1] step 8 window 16",
     .in = {R(F32, -1, 1, 3, 2, 64, 1), S(I64, 8), R(F32, 0, 1, 1, 16), S(I64, 16)}},
    {.op = "STFT", .label = "[1,50,2] f64 step 7 window 12 two-sided",
     .in = {R(F64, -1, 1, 3, 1, 50, 2), S(I64, 7), R(F64, 0, 1, 1, 12), S(I64, 12)},
     .attrs = {AB("onesided", 0)}},
    {.op = "MelWeightMatrix", .label = "8 bins of a 16-point DFT at 8192 Hz",
     .in = {S(I32, 8), S(I32, 16), S(I32, 8192), S(F32, 0), S(F32, 4096)}},
    {.op = "MelWeightMatrix", .label = "10 bins of a 64-point DFT at 16000 Hz f64",
     .in = {S(I64, 10), S(I64, 64), S(I64, 16000), S(F64, 20), S(F64, 7000)},
     .attrs = {AT("dtype", F64)}},
    /* Indexing ops (ops_index.def). */
    {.op = "Pad", .label = "[3,4] EDGE f64", .in = {R(F64, -1, 1, 2, 3, 4),
                                                   V(I32, VALS(2, 1, 0, 3), 2, 2, 2)},
     .attrs = {AS("mode", "EDGE")}},
    {.op = "GatherElements", .label = "[3,4] axis 1 negative indices",
     .in = {R(F32, -1, 1, 2, 3, 4), V(I64, VALS(0, -1, 3, 2, 1, 1), 2, 3, 2)},
     .attrs = {AI("axis", 1)}},
    {.op = "GatherElements", .label = "[4,2] axis 0 i32 indices i32",
     .in = {R(I32, -9, 9, 2, 4, 2), V(I32, VALS(3, 0, 1, 1, 0, 2), 2, 3, 2)}},
    {.op = "ScatterElements", .label = "[3,4] axis 1 repeated index",
     .in = {R(F32, -1, 1, 2, 3, 4), V(I64, VALS(1, 1, 0, 3, -2, 2), 2, 3, 2),
            R(F32, -1, 1, 2, 3, 2)},
     .attrs = {AI("axis", 1)}},
    {.op = "ScatterElements", .label = "[4,3] axis 0 add f64",
     .in = {R(F64, -1, 1, 2, 4, 3), V(I64, VALS(0, 3, 0, 0, 1, 3), 2, 2, 3),
            R(F64, -1, 1, 2, 2, 3)},
     .attrs = {AS("reduction", "add")}},
    {.op = "GatherND", .label = "[3,4,2] by [2,2]",
     .in = {R(F32, -1, 1, 3, 3, 4, 2), V(I64, VALS(2, 3, 0, -1), 2, 2, 2)}},
    {.op = "GatherND", .label = "[2,3,4] batch_dims 1 by [2,2,1] i32",
     .in = {R(I32, -9, 9, 3, 2, 3, 4), V(I64, VALS(2, 0, 1, 1), 3, 2, 2, 1)},
     .attrs = {AI("batch_dims", 1)}},
    {.op = "ScatterND", .label = "[4,3] rows [3],[1] mul",
     .in = {R(F32, -1, 1, 2, 4, 3), V(I64, VALS(3, 1), 2, 2, 1), R(F32, -1, 1, 2, 2, 3)},
     .attrs = {AS("reduction", "mul")}},
    {.op = "ScatterND", .label = "[3,4] elements i64",
     .in = {R(I64, -9, 9, 2, 3, 4), V(I64, VALS(0, 1, 2, 3, 0, 1), 2, 3, 2),
            R(I64, -9, 9, 1, 3)}},
    {.op = "NonZero", .label = "[3,5] i32 with zeros", .in = {R(I32, -1, 2, 2, 3, 5)}},
    {.op = "NonZero", .label = "[2,2,3] bool", .in = {R(BOOL, 0, 1, 3, 2, 2, 3)}},
    {.op = "TopK", .label = "[3,7] k 3 largest (ties)", .in = {R(I32, 0, 4, 2, 3, 7), S(I64, 3)}},
    {.op = "TopK", .label = "[5,4,2] axis 1 k 2 smallest f32",
     .in = {R(F32, -1, 1, 3, 5, 4, 2), LV(1, 2)},
     .attrs = {AI("axis", 1), AB("largest", 0)}},
    {.op = "Unique", .label = "[11] i32 sorted", .in = {R(I32, 0, 5, 1, 11)}},
    {.op = "Unique", .label = "[4,3] axis 0 unsorted f32",
     .in = {V(F32, VALS(1, 2, 3, 0, 0, 0, 1, 2, 3, -1, 0, 0), 2, 4, 3)},
     .attrs = {AB("sorted", 0)}},
    {.op = "SliceAxes", .label = "[5,6,4] axes [2,0] steps [-1,2]",
     .in = {R(F32, -1, 1, 3, 5, 6, 4), LV(2, -1, 1), LV(2, -9, 100), LV(2, 2, 0), LV(2, -1, 2)}},
    {.op = "SliceAxes", .label = "[7,3] axis 1 [1:3] i32 bool",
     .in = {R(BOOL, 0, 1, 2, 7, 3), IV(1, 1), IV(1, 3), IV(1, 1), IV(1, 1)}},
    {.op = "SliceAxesGrad", .label = "[5,6] axes [1,0] steps [-2,3]",
     .in = {LV(2, 5, 6), LV(2, 100, 1), LV(2, -100, 5), LV(2, 1, 0), LV(2, -2, 3),
            R(F32, -1, 1, 2, 2, 3)}},
    {.op = "SqueezeAxes", .label = "[1,3,1,2] axes [-2,0]",
     .in = {R(F32, -1, 1, 4, 1, 3, 1, 2), LV(2, -2, 0)}},
    {.op = "UnsqueezeAxes", .label = "[3,2] axes [3,0]",
     .in = {R(F32, -1, 1, 2, 3, 2), LV(2, 3, 0)}},
    {.op = "SplitV", .label = "[7,3] axis 0 sizes [2,-1,1]",
     .in = {R(F32, -1, 1, 2, 7, 3), LV(3, 2, -1, 1), S(I32, 0)},
     .attrs = {AI("num_split", 3)}},
    {.op = "SplitV", .label = "[2,5] axis -1 sizes [0,5] i64",
     .in = {R(I64, -9, 9, 2, 2, 5), LV(2, 0, 5), S(I32, -1)},
     .attrs = {AI("num_split", 2)}},
    {.op = "Trilu", .label = "[2,4,5] upper k 1", .in = {R(F32, -1, 1, 3, 2, 4, 5), S(I64, 1)}},
    {.op = "Trilu", .label = "[5,3] lower k -1 i32", .in = {R(I32, -9, 9, 2, 5, 3), S(I64, -1)},
     .attrs = {AB("upper", 0)}},
    {.op = "ReverseSequence", .label = "[4,3,2] seq 0 batch 1",
     .in = {R(F32, -1, 1, 3, 4, 3, 2), LV(3, 4, 0, 2)},
     .attrs = {AI("seq_dim", 0), AI("batch_dim", 1)}},
    {.op = "Range", .label = "f32 0.5 to 4 by 0.75", .in = {S(F32, 0.5), S(F32, 4), S(F32, 0.75)}},
    {.op = "Range", .label = "i64 10 to -3 by -4", .in = {S(I64, 10), S(I64, -3), S(I64, -4)}},
    {.op = "Cumsum", .label = "[4,5] axis 1 f32", .in = {R(F32, -1, 1, 2, 4, 5), S(I32, 1)}},
    {.op = "Cumsum", .label = "[6,2] axis 0 exclusive reverse i32",
     .in = {R(I32, -9, 9, 2, 6, 2), S(I64, 0)},
     .attrs = {AB("exclusive", 1), AB("reverse", 1)}},
    /* ONNX's resampling, detection and sequence-recurrent ops (ops_resize.def). An empty
     * vector is an absent optional operand. */
    {.op = "Resize", .label = "[2,3,5,7] linear half_pixel scales f32",
     .in = {R(F32, -2, 2, 4, 2, 3, 5, 7), V(F32, VALS(0), 1, 0), V(F32, VALS(1, 1, 1.6, 0.6), 1, 4),
      V(I64, VALS(0), 1, 0)},
     .attrs = {AS("mode", "linear")}},
    {.op = "Resize", .label = "[1,2,4,5] cubic align_corners exclude_outside sizes f64",
     .in = {R(F64, -2, 2, 4, 1, 2, 4, 5), V(F32, VALS(0), 1, 0), V(F32, VALS(0), 1, 0),
      LV(4, 1, 2, 7, 3)},
     .attrs = {AS("mode", "cubic"), AS("coordinate_transformation_mode", "align_corners"),
      AB("exclude_outside", 1), AF("cubic_coeff_a", -0.5)}},
    {.op = "Resize", .label = "[3,4,6] nearest tf_crop_and_resize i32",
     .in = {R(I32, -50, 50, 3, 3, 4, 6), V(F32, VALS(0, -0.2, 0.1, 1, 0.9, 1.3), 1, 6),
      V(F32, VALS(0), 1, 0), LV(3, 3, 5, 4)},
     .attrs = {AS("coordinate_transformation_mode", "tf_crop_and_resize"),
      AF("extrapolation_value", 7), AS("nearest_mode", "round_prefer_ceil")}},
    {.op = "Resize", .label = "[2,5] linear asymmetric bf16",
     .in = {R(BF16, -2, 2, 2, 2, 5), V(F32, VALS(0), 1, 0), V(F32, VALS(1.5, 2.2), 1, 2),
      V(I64, VALS(0), 1, 0)},
     .attrs = {AS("mode", "linear"), AS("coordinate_transformation_mode", "asymmetric")}},
    {.op = "GridSample", .label = "[2,3,5,6] grid [2,4,7] bilinear zeros f32",
     .in = {R(F32, -2, 2, 4, 2, 3, 5, 6), R(F32, -1.3, 1.3, 4, 2, 4, 7, 2)}},
    {.op = "GridSample", .label = "[1,2,4,5] grid [1,3,3] bicubic reflection align_corners f64",
     .in = {R(F64, -2, 2, 4, 1, 2, 4, 5), R(F64, -1.5, 1.5, 4, 1, 3, 3, 2)},
     .attrs = {AS("mode", "bicubic"), AS("padding_mode", "reflection"), AB("align_corners", 1)}},
    {.op = "GridSample", .label = "[1,2,4,5] grid [1,3,4] nearest border f32",
     .in = {R(F32, -2, 2, 4, 1, 2, 4, 5), R(F32, -1.5, 1.5, 4, 1, 3, 4, 2)},
     .attrs = {AS("mode", "nearest"), AS("padding_mode", "border")}},
    {.op = "RoiAlign", .label = "[2,3,9,11] 4 rois avg half_pixel f32",
     .in = {R(F32, -2, 2, 4, 2, 3, 9, 11),
      V(F32, VALS(0.5, 1, 7, 6, 2, 2, 3, 3, -1, 0, 12, 10, 4.3, 3.1, 4.4, 3.2), 2, 4, 4),
      LV(4, 0, 1, 1, 0)},
     .attrs = {AI("output_height", 3), AI("output_width", 4), AF("spatial_scale", 0.8)}},
    {.op = "RoiAlign", .label = "[1,2,6,5] 2 rois max output_half_pixel sampling 2 f64",
     .in = {R(F64, -2, 2, 4, 1, 2, 6, 5), V(F64, VALS(0, 0, 4, 5, 1.5, 2.5, 3, 3.5), 2, 2, 4),
      LV(2, 0, 0)},
     .attrs = {AS("mode", "max"), AS("coordinate_transformation_mode", "output_half_pixel"),
      AI("output_height", 2), AI("output_width", 2), AI("sampling_ratio", 2)}},
    {.op = "BatchedNonMaxSuppression", .label = "boxes [2,8,4] scores [2,3,8]",
     .in = {R(F32, 0, 4, 3, 2, 8, 4), R(F32, 0, 1, 3, 2, 3, 8), LV(1, 4), V(F32, VALS(0.3), 1, 1),
      V(F32, VALS(0.2), 1, 1)}},
    {.op = "BatchedNonMaxSuppression", .label = "centre boxes [1,6,4] no score threshold",
     .in = {R(F32, 0.5, 3, 3, 1, 6, 4), R(F32, 0, 1, 3, 1, 2, 6), LV(1, 10), V(F32, VALS(0.5), 1, 1),
      V(F32, VALS(0), 1, 0)},
     .attrs = {AI("center_point_box", 1)}},
    {.op = "RNN", .label = "S4 B3 I5 H6 sequence_lens initial_h f32",
     .in = {R(F32, -1, 1, 3, 4, 3, 5), R(F32, -0.5, 0.5, 3, 1, 6, 5), R(F32, -0.5, 0.5, 3, 1, 6, 6),
      R(F32, -0.5, 0.5, 2, 1, 12), IV(3, 4, 2, 3), R(F32, -1, 1, 3, 1, 3, 6)},
     .flags = XF_MATRIX},
    {.op = "RNN", .label = "S3 B2 I3 H4 bidirectional LeakyRelu,Relu f64",
     .in = {R(F64, -1, 1, 3, 3, 2, 3), R(F64, -0.5, 0.5, 3, 2, 4, 3), R(F64, -0.5, 0.5, 3, 2, 4, 4),
      V(F64, VALS(0), 1, 0), V(I32, VALS(0), 1, 0), V(F64, VALS(0), 1, 0)},
     .attrs = {AS("direction", "bidirectional"), AS("activations", "LeakyRelu,Relu")},
     .flags = XF_MATRIX},
    {.op = "GRU", .label = "S4 B3 I5 H6 bidirectional linear_before_reset f32",
     .in = {R(F32, -1, 1, 3, 4, 3, 5), R(F32, -0.5, 0.5, 3, 2, 18, 5),
      R(F32, -0.5, 0.5, 3, 2, 18, 6), R(F32, -0.5, 0.5, 2, 2, 36), IV(3, 4, 1, 3),
      R(F32, -1, 1, 3, 2, 3, 6)},
     .attrs = {AS("direction", "bidirectional"), AB("linear_before_reset", 1)},
     .flags = XF_MATRIX},
    {.op = "GRU", .label = "S3 B2 I3 H4 reverse clip f32",
     .in = {R(F32, -1, 1, 3, 3, 2, 3), R(F32, -1, 1, 3, 1, 12, 3), R(F32, -1, 1, 3, 1, 12, 4),
      R(F32, -1, 1, 2, 1, 24), V(I32, VALS(0), 1, 0), V(F32, VALS(0), 1, 0)},
     .attrs = {AS("direction", "reverse"), AF("clip", 0.5)},
     .flags = XF_MATRIX},
    {.op = "LSTM", .label = "S4 B3 I5 H6 peepholes sequence_lens initial_h,c f32",
     .in = {R(F32, -1, 1, 3, 4, 3, 5), R(F32, -0.5, 0.5, 3, 1, 24, 5),
      R(F32, -0.5, 0.5, 3, 1, 24, 6), R(F32, -0.5, 0.5, 2, 1, 48), IV(3, 2, 4, 3),
      R(F32, -1, 1, 3, 1, 3, 6), R(F32, -1, 1, 3, 1, 3, 6), R(F32, -0.5, 0.5, 2, 1, 18)},
     .flags = XF_MATRIX},
    {.op = "LSTM", .label = "S3 B2 I3 H4 bidirectional input_forget f64",
     .in = {R(F64, -1, 1, 3, 3, 2, 3), R(F64, -0.5, 0.5, 3, 2, 16, 3),
      R(F64, -0.5, 0.5, 3, 2, 16, 4), V(F64, VALS(0), 1, 0), V(I32, VALS(0), 1, 0),
      V(F64, VALS(0), 1, 0), V(F64, VALS(0), 1, 0), V(F64, VALS(0), 1, 0)},
     .attrs = {AS("direction", "bidirectional"), AB("input_forget", 1)},
     .flags = XF_MATRIX},
    /* TfIdfVectorizer: items in {0..3} so that the pool's n-grams occur, at several skips. */
    {.op = "TfIdfVectorizer", .label = "[3,9] i64 IDF 1-2-grams skip 2",
     .in = {R(I64, 0, 4, 2, 3, 9)},
     .attrs = {AS("mode", "IDF"), AI("min_gram_length", 1), AI("max_gram_length", 2),
               AI("max_skip_count", 2), AL("ngram_counts", 2, 0, 3),
               AL("ngram_indexes", 5, 4, 0, 2, 1, 3), AL("pool", 7, 1, 2, 3, 2, 1, 3, 3)}},
    {.op = "TfIdfVectorizer", .label = "[17] i32 TF 2-3-grams skip 3, shared coordinate",
     .in = {R(I32, 0, 3, 1, 17)},
     .attrs = {AS("mode", "TF"), AI("min_gram_length", 2), AI("max_gram_length", 3),
               AI("max_skip_count", 3), AL("ngram_counts", 3, 0, 2, 4),
               AL("ngram_indexes", 4, 3, 0, 1, 1), AL("pool", 7, 1, 2, 0, 1, 2, 2, 2)}},
    /* --- gradients of the N-d convolution and pooling ops (ops_convgrad.def) --- */
    {.op = "ConvBackpropInputNd", .label = "CF [2,4,7,6] <- [3,2,2,6] groups 2 stride 2 pads",
     .in = {IV(4, 2, 4, 7, 6), R(F32, -1, 1, 4, 3, 2, 2, 6), R(F32, -1, 1, 4, 2, 6, 3, 4)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 4, 1, 1, 2, 2),
               AS("padding", "EXPLICIT"), AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 0, 2, 1),
               AI("groups", 2)}, .flags = XF_MATRIX},
    {.op = "ConvBackpropInputNd", .label = "CL [1,9,3] <- [3,3,4] dilation 2 SAME (1-D) bf16",
     .in = {IV(3, 1, 9, 3), R(BF16, -1, 1, 3, 3, 3, 4), R(BF16, -1, 1, 3, 1, 9, 4)},
     .attrs = {AL("dilations", 3, 1, 2, 1), AS("padding", "SAME")}, .flags = XF_MATRIX},
    {.op = "ConvBackpropInputNd", .label = "CF [1,2,4,5,3] <- [2,2,2,2,3] stride 1x2x1 (3-D) f64",
     .in = {LV(5, 1, 2, 4, 5, 3), R(F64, -1, 1, 5, 2, 2, 2, 2, 3),
      R(F64, -1, 1, 5, 1, 3, 3, 2, 2)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 5, 1, 1, 1, 2, 1)},
     .flags = XF_MATRIX},
    {.op = "ConvBackpropFilterNd", .label = "CF [2,4,7,6] -> [3,2,2,6] groups 2 stride 2 pads",
     .in = {R(F32, -1, 1, 4, 2, 4, 7, 6), IV(4, 3, 2, 2, 6), R(F32, -1, 1, 4, 2, 6, 3, 4)},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 4, 1, 1, 2, 2),
               AS("padding", "EXPLICIT"), AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 0, 2, 1),
               AI("groups", 2)}, .flags = XF_MATRIX},
    {.op = "ConvBackpropFilterNd", .label = "CL [5,7,7,3] -> [3,3,3,4] stride 2 SAME (batch shards)",
     .in = {R(F32, -1, 1, 4, 5, 7, 7, 3), IV(4, 3, 3, 3, 4), R(F32, -1, 1, 4, 5, 4, 4, 4)},
     .attrs = {AL("strides", 4, 1, 2, 2, 1), AS("padding", "SAME")}, .flags = XF_MATRIX},
    {.op = "ConvBackpropFilterNd", .label = "CL [2,9,3] -> [3,3,4] dilation 2 SAME (1-D) f64",
     .in = {R(F64, -1, 1, 3, 2, 9, 3), LV(3, 3, 3, 4), R(F64, -1, 1, 3, 2, 9, 4)},
     .attrs = {AL("dilations", 3, 1, 2, 1), AS("padding", "SAME")}, .flags = XF_MATRIX},
    {.op = "PoolGrad", .label = "CF MAX [2,3,7,6] 3x2/2 pads (1,1),(0,1) dilation 2x1 ceil",
     .in = {R(F32, -1, 1, 4, 2, 3, 7, 6), R(F32, -1, 1, 4, 2, 3, 3, 3)},
     .attrs = {AS("pooling_type", "MAX"), AS("data_format", "CHANNELS_FIRST"),
               AL("ksize", 4, 1, 1, 3, 2), AL("strides", 4, 1, 1, 2, 2),
               AL("dilations", 4, 1, 1, 2, 1), AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 1, 0, 1), AB("ceil_mode", 1)}},
    {.op = "PoolGrad", .label = "CF AVG [1,2,6,5] 3x3/2 pads 1 counted, ceil",
     .in = {R(F32, -1, 1, 4, 1, 2, 6, 5), R(F32, -1, 1, 4, 1, 2, 4, 3)},
     .attrs = {AS("pooling_type", "AVG"), AS("data_format", "CHANNELS_FIRST"),
               AL("ksize", 4, 1, 1, 3, 3), AL("strides", 4, 1, 1, 2, 2), AS("padding", "EXPLICIT"),
               AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 1, 1, 1), AB("ceil_mode", 1),
               AB("count_include_pad", 1)}},
    {.op = "PoolGrad", .label = "CL AVG [1,5,4,6,2] 2x3x2/2 SAME (3-D) f64",
     .in = {R(F64, -1, 1, 5, 1, 5, 4, 6, 2), R(F64, -1, 1, 5, 1, 3, 2, 3, 2)},
     .attrs = {AS("pooling_type", "AVG"), AL("ksize", 5, 1, 2, 3, 2, 1),
               AL("strides", 5, 1, 2, 2, 2, 1), AS("padding", "SAME")}},
    {.op = "PoolGrad", .label = "CL MAX [1,6,6,2] 2x2/2 bf16 (ties)",
     .in = {R(BF16, -1, 1, 4, 1, 6, 6, 2), R(BF16, -1, 1, 4, 1, 3, 3, 2)},
     .attrs = {AS("pooling_type", "MAX"), AL("ksize", 4, 1, 2, 2, 1), AL("strides", 4, 1, 2, 2, 1)}},
    /* --- _FusedConv (the fusion pass's conv + bias + residual add + ReLU) --- */
    {.op = "_FusedConv", .label = "CL [2,6,5,4] * [3,3,4,8] SAME + bias + side + relu",
     .in = {R(F32, -1, 1, 4, 2, 6, 5, 4), R(F32, -1, 1, 4, 3, 3, 4, 8), R(F32, -1, 1, 1, 8),
            R(F32, -1, 1, 4, 2, 6, 5, 8)},
     .lists = {1, 1, 2},
     .attrs = {AS("padding", "SAME"), AB("fused_bias", 1), AB("fused_add", 1),
               AB("fused_relu", 1)}, .flags = XF_MATRIX},
    {.op = "_FusedConv", .label = "CF [1,4,5,5] * [3,2,2,6] groups 2 stride 2 pads + bias + relu",
     .in = {R(F32, -1, 1, 4, 1, 4, 5, 5), R(F32, -1, 1, 4, 3, 2, 2, 6), R(F32, -1, 1, 1, 6)},
     .lists = {1, 1, 1},
     .attrs = {AS("data_format", "CHANNELS_FIRST"), AL("strides", 4, 1, 1, 2, 2),
               AS("padding", "EXPLICIT"), AL("explicit_paddings", 8, 0, 0, 0, 0, 1, 0, 2, 1),
               AI("groups", 2), AB("fused_bias", 1), AB("fused_relu", 1)}, .flags = XF_MATRIX},
    /* --- _FusedMatMul (the fusion pass's products + bias + activations; the activations
     * are checked bitwise against the unfused ops in tests/core/test_fuse.c) --- */
    {.op = "_FusedMatMul", .label = "[5,37] x [37,600] + bias [600]",
     .in = {R(F32, -1, 1, 2, 5, 37), R(F32, -1, 1, 2, 37, 600), R(F32, -1, 1, 1, 600)},
     .lists = {1, 1, 1}, .attrs = {AB("fused_bias", 1)}, .flags = XF_MATRIX},
    {.op = "_FusedMatMul", .label = "[7,3]^T x [9,7]^T + bias [1,9]",
     .in = {R(F32, -1, 1, 2, 7, 3), R(F32, -1, 1, 2, 9, 7), R(F32, -1, 1, 2, 1, 9)},
     .lists = {1, 1, 1},
     .attrs = {AB("transpose_a", 1), AB("transpose_b", 1), AB("fused_bias", 1)},
     .flags = XF_MATRIX},
    /* --- _FusedElementwise (the elementwise pass's chains) --- */
    {.op = "_FusedElementwise", .label = "[3,4,6] * [6] + [1,1,6], relu, 2 - x, sigmoid",
     .in = {R(F32, -2, 2, 3, 3, 4, 6), R(F32, 0.5, 1.5, 1, 6), R(F32, -1, 1, 3, 1, 1, 6),
            RS(F32, 2, 2)},
     .lists = {1, 3},
     .attrs = {AS("steps", "Mul:0,Add:1,Relu,Sub:~2,Sigmoid")}},
    /* --- the blocked layout (AVX-512 machines only) --- */
    {.op = "_ToBlocked", .label = "[2,3,5,32] f32", .in = {R(F32, -1, 1, 4, 2, 3, 5, 32)},
     .flags = XF_IF_REF_KERNEL},
    {.op = "_ToBlocked", .label = "[3,7,24] block 8 i32", .in = {R(I32, -9, 9, 3, 3, 7, 24)},
     .attrs = {AI("block", 8)}, .flags = XF_IF_REF_KERNEL},
    {.op = "_FromBlocked", .label = "[2,2,3,5,16] f64", .in = {R(F64, -1, 1, 5, 2, 2, 3, 5, 16)},
     .flags = XF_IF_REF_KERNEL},
    {.op = "_FusedConv", .label = "blocked [2,2,6,5,16] * [3,3,32,16] SAME + bias + side + relu",
     .in = {R(F32, -1, 1, 5, 2, 2, 6, 5, 16), R(F32, -1, 1, 4, 3, 3, 32, 16), R(F32, -1, 1, 1, 16),
            R(F32, -1, 1, 5, 2, 1, 6, 5, 16)},
     .lists = {1, 1, 2},
     .attrs = {AS("padding", "SAME"), AB("fused_bias", 1), AB("fused_add", 1),
               AB("fused_relu", 1), AB("blocked", 1)}, .flags = XF_MATRIX | XF_IF_REF_KERNEL},
    {.op = "_FusedConv", .label = "CL [2,4,4,3] * [1,1,3,5] + broadcast side [1,5] + relu",
     .in = {R(F32, -1, 1, 4, 2, 4, 4, 3), R(F32, -1, 1, 4, 1, 1, 3, 5), R(F32, -1, 1, 2, 1, 5)},
     .lists = {1, 1, 1},
     .attrs = {AB("fused_add", 1), AB("fused_relu", 1)}, .flags = XF_MATRIX},
};
const int xnum_cases = (int)(sizeof xcases / sizeof xcases[0]);

const XExcluded xexcluded[] = {
    {"Placeholder", "fed, never computed: the executor takes the feed"},
    {"VarHandleOp", "variable bookkeeping in the session's resource manager (core, any device)"},
    {"ReadVariableOp", "variable bookkeeping (core, any device); read back in the update cases"},
    {"AssignVariableOp", "variable bookkeeping (core, any device); sets up the update cases"},
    {"VarIsInitializedOp", "variable bookkeeping (core, any device)"},
    {"Save", "file I/O of variables (checkpoint tests)"},
    {"Restore", "file I/O of variables (checkpoint tests)"},
    {"Switch", "control flow: routed by the executor, never a device computation"},
    {"Merge", "control flow: routed by the executor"},
    {"Enter", "control flow: routed by the executor"},
    {"Exit", "control flow: routed by the executor"},
    {"NextIteration", "control flow: routed by the executor"},
    {"LoopCond", "control flow: routed by the executor"},
    {"ControlTrigger", "control flow: routed by the executor"},
    {"_Send", "transfers between partitions: test_partition covers them"},
    {"_Recv", "transfers between partitions: test_partition covers them"},
    {"_ControlSend", "transfers between partitions: test_partition covers them"},
    {"FIFOQueueV2", "stateful queue (session resource): test_queue"},
    {"PaddingFIFOQueueV2", "stateful queue: test_queue"},
    {"RandomShuffleQueueV2", "stateful queue: test_queue"},
    {"QueueEnqueueV2", "stateful queue: test_queue"},
    {"QueueEnqueueManyV2", "stateful queue: test_queue"},
    {"QueueDequeueV2", "stateful queue: test_queue"},
    {"QueueDequeueManyV2", "stateful queue: test_queue"},
    {"QueueDequeueUpToV2", "stateful queue: test_queue"},
    {"QueueCloseV2", "stateful queue: test_queue"},
    {"QueueSizeV2", "stateful queue: test_queue"},
    {"QueueIsClosedV2", "stateful queue: test_queue"},
    {"TextLineReaderV2", "stateful file reader: test_reader"},
    {"FixedLengthRecordReaderV2", "stateful file reader: test_reader"},
    {"IdxRecordReader", "stateful file reader: test_reader"},
    {"ReaderRead", "stateful file reader: test_reader"},
    {"ReaderReadUpTo", "stateful file reader: test_reader"},
    {"ReaderSeek", "stateful file reader: test_reader"},
    {"TensorArrayV3", "step-scoped resource (core, any device): test_tensor_array"},
    {"TensorArrayWriteV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayReadV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayGatherV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayScatterV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayStackV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayConcatV3", "step-scoped resource: test_tensor_array"},
    {"TensorArraySplitV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayUnstackV3", "step-scoped resource: test_tensor_array"},
    {"TensorArraySizeV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayCloseV3", "step-scoped resource: test_tensor_array"},
    {"TensorArrayGradV3", "step-scoped resource: test_tensor_array"},
    {"StackV2", "step-scoped resource (core, any device): test_dynamic_rnn"},
    {"StackPushV2", "step-scoped resource: test_dynamic_rnn"},
    {"StackPopV2", "step-scoped resource: test_dynamic_rnn"},
    {"StackCloseV2", "step-scoped resource: test_dynamic_rnn"},
};
const int xnum_excluded = (int)(sizeof xexcluded / sizeof xexcluded[0]);
