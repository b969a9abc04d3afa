/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_quant.c - ONNX's linear quantization ops as compositions of Floe ops.
 *
 * Integer products (MatMulInteger, ConvInteger and the QLinear ops) run in f64, where every
 * product and sum of 8-bit values is exact, and are cast back to int32. Rounding is ONNX's
 * (NumPy's rint: half to even) done exactly with the float format itself: adding and
 * subtracting 1.5 * 2^23 (f32) or 1.5 * 2^52 (f64) rounds any smaller value to an integer
 * in the current rounding mode, round-to-nearest-even; values are clamped first so that they
 * stay in that range (the final saturation makes the clamp invisible). */
#include <string.h>

#include "onnx_internal.h"

static int given(const FloeOutput *in, int nin, int i) { return nin > i && ox_present(in[i]); }

static FloeOutput clamp(OxCtx *c, FloeOutput v, double lo, double hi) {
  FloeDType dt = ox_dtype(v);
  return ox_binary(c, "Minimum", ox_binary(c, "Maximum", v, ox_scalar(c, dt, lo)),
                   ox_scalar(c, dt, hi));
}

/* The quantized type's range; fails for types ONNX does not quantize to. */
static floe_code qrange(OxCtx *c, FloeDType qt, double *lo, double *hi) {
  *lo = *hi = 0;
  if (qt == FLOE_U8) *lo = 0, *hi = 255;
  else if (qt == FLOE_I8) *lo = -128, *hi = 127;
  else if (qt == FLOE_I32) *lo = -2147483648.0, *hi = 2147483647.0;
  else return ox_fail(c, FLOE_INVALID_ARGUMENT, "quantized type must be uint8, int8 or int32");
  return FLOE_OK;
}

/* saturate(rint(v) + zp) as qt; v is f32 or f64, zp (optional, {NULL}) of v's dtype. */
static FloeOutput requantize(OxCtx *c, FloeOutput v, FloeOutput zp, FloeDType qt, double lo,
                             double hi) {
  FloeDType ft = ox_dtype(v);
  double magic = ft == FLOE_F64 ? 6755399441055744.0 : 12582912.0;
  double lim = ft == FLOE_F64 ? 1e15 : 4194304.0;
  v = clamp(c, v, -lim, lim);
  FloeOutput r = ox_binary(c, "Sub", ox_binary(c, "Add", v, ox_scalar(c, ft, magic)),
                           ox_scalar(c, ft, magic));
  if (zp.node) r = ox_binary(c, "Add", r, zp);
  return ox_cast(c, clamp(c, r, lo, hi), qt);
}

/* A 1-D per-axis parameter shaped [n, 1, ...] to broadcast along `axis` of a rank-r tensor;
 * anything else as it is. */
static FloeOutput along_axis(OxCtx *c, FloeOutput p, int axis, int r) {
  FloeShape s = ox_shape(p);
  if (s.rank != 1 || axis >= r - 1) return p;
  int64_t dims[FLOE_MAX_DIMS];
  dims[0] = -1;
  for (int i = 1; i < r - axis; i++) dims[i] = 1;
  return ox_binary(c, "Reshape", p, ox_const_i64(c, dims, r - axis));
}

/* The axis of a per-axis quantization of x by scale (opset 13's attribute, 1 by default);
 * a scalar scale has none to check. */
static floe_code quant_axis(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, FloeOutput scale,
                            int *axis, int *r) {
  *axis = 0;
  *r = ox_rank(c, x, "the input");
  if (*r < 0) return floe_status_code(c->st);
  if (ox_shape(scale).rank < 1) return FLOE_OK;
  return ox_axis(c, ox_int(n, "axis", 1), *r, "axis", axis);
}

OX_MAP(map_dequantize_linear) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  int axis, r;
  if (rc != FLOE_OK || (rc = quant_axis(c, n, in[0], in[1], &axis, &r)) != FLOE_OK) return rc;
  FloeDType ft = ox_dtype(in[1]);
  FloeOutput x = ox_cast(c, in[0], ft);
  if (given(in, nin, 2)) x = ox_binary(c, "Sub", x, along_axis(c, ox_cast(c, in[2], ft), axis, r));
  out[0] = ox_binary(c, "Mul", x, along_axis(c, in[1], axis, r));
  return FLOE_OK;
}

OX_MAP(map_quantize_linear) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  int axis, r;
  if (rc != FLOE_OK || (rc = quant_axis(c, n, in[0], in[1], &axis, &r)) != FLOE_OK) return rc;
  FloeDType qt = given(in, nin, 2) ? ox_dtype(in[2]) : FLOE_U8;
  double lo, hi;
  if ((rc = qrange(c, qt, &lo, &hi)) != FLOE_OK) return rc;
  FloeDType ft = ox_dtype(in[1]);
  FloeOutput q = ox_binary(c, "Div", ox_cast(c, in[0], ft), along_axis(c, in[1], axis, r));
  FloeOutput zp = {NULL, 0};
  if (given(in, nin, 2)) zp = along_axis(c, ox_cast(c, in[2], ft), axis, r);
  out[0] = requantize(c, q, zp, qt, lo, hi);
  return FLOE_OK;
}

/* x's minimum or maximum over every element, widened to include 0 (a scalar). */
static FloeOutput range_end(OxCtx *c, FloeOutput x, const char *op, const char *with0) {
  int64_t flat = -1;
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, ox_binary(c, "Reshape", x, ox_const_i64(c, &flat, 1)));
  floe_node_add_input(b, ox_scalar_i32(c, 0));
  FloeOutput v = ox_finish(c, b);
  return ox_binary(c, with0, v, ox_scalar(c, ox_dtype(x), 0));
}

OX_MAP(map_dynamic_quantize_linear) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeOutput x = in[0];
  FloeDType ft = ox_dtype(x);
  if (ft != FLOE_F32) return ox_fail(c, FLOE_INVALID_ARGUMENT, "input must be float");
  FloeOutput lo = range_end(c, x, "Min", "Minimum"), hi = range_end(c, x, "Max", "Maximum");
  /* scale = (max - min) / 255; zero point = saturate(rint(-min / scale)) */
  FloeOutput scale = ox_binary(c, "Div", ox_binary(c, "Sub", hi, lo), ox_scalar(c, ft, 255));
  FloeOutput zp = requantize(c, ox_binary(c, "Div", ox_unary(c, "Neg", lo), scale),
                             (FloeOutput){NULL, 0}, FLOE_U8, 0, 255);
  out[0] = requantize(c, ox_binary(c, "Div", x, scale), ox_cast(c, zp, ft), FLOE_U8, 0, 255);
  if (nout > 1) out[1] = scale;
  if (nout > 2) out[2] = zp;
  return FLOE_OK;
}

/* x - zp in f64 (x alone when zp is not given); zp shaped to broadcast along axis. */
static FloeOutput centred(OxCtx *c, FloeOutput x, const FloeOutput *in, int nin, int zi, int axis,
                          int r) {
  FloeOutput v = ox_cast(c, x, FLOE_F64);
  if (!given(in, nin, zi)) return v;
  FloeOutput zp = ox_cast(c, in[zi], FLOE_F64);
  if (axis >= 0) zp = along_axis(c, zp, axis, r);
  return ox_binary(c, "Sub", v, zp);
}

/* (a - a_zp) @ (b - b_zp) in f64 (exact for 8-bit operands); a_zp may hold one value per row
 * of a. Operands of rank 2 or more (batch dims broadcast). */
static floe_code int_matmul(OxCtx *c, FloeOutput a, FloeOutput b, const FloeOutput *in, int nin,
                            int azi, int bzi, FloeOutput *prod) {
  int ra = ox_rank(c, a, "A"), rb = ox_rank(c, b, "B");
  if (ra < 0 || rb < 0) return floe_status_code(c->st);
  if (ra < 2 || rb < 2)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "operands of rank %d and %d (Floe runs ranks >= 2)", ra, rb);
  FloeNodeBuilder *bl = ox_begin(c, "BatchMatMul");
  floe_node_add_input(bl, centred(c, a, in, nin, azi, ra - 2, ra));
  floe_node_add_input(bl, centred(c, b, in, nin, bzi, -1, rb));
  *prod = ox_finish(c, bl);
  return ox_check(c);
}

OX_MAP(map_matmul_integer) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  FloeOutput p;
  if (rc != FLOE_OK || (rc = int_matmul(c, in[0], in[1], in, nin, 2, 3, &p)) != FLOE_OK) return rc;
  out[0] = ox_cast(c, p, FLOE_I32);
  return FLOE_OK;
}

/* The product's scale a_scale * b_scale / y_scale, computed in f32 as ONNX's reference does,
 * then widened; per-channel scales shaped to broadcast along axis of a rank-r result. */
static FloeOutput out_scale(OxCtx *c, FloeOutput as, FloeOutput bs, FloeOutput ys, int axis,
                            int r) {
  FloeOutput m = ox_binary(c, "Div", ox_binary(c, "Mul", as, along_axis(c, bs, axis, r)), ys);
  return ox_cast(c, m, FLOE_F64);
}

OX_MAP(map_qlinear_matmul) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 8);
  if (rc != FLOE_OK) return rc;
  /* a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp */
  FloeOutput p;
  if ((rc = int_matmul(c, in[0], in[3], in, nin, 2, 5, &p)) != FLOE_OK) return rc;
  FloeDType qt = ox_dtype(in[7]);
  double lo, hi;
  if ((rc = qrange(c, qt, &lo, &hi)) != FLOE_OK) return rc;
  int r = ox_rank(c, p, "the product");
  if (r < 0) return floe_status_code(c->st);
  FloeOutput d = ox_binary(c, "Mul", p, out_scale(c, in[1], in[4], in[6], r - 1, r));
  out[0] = requantize(c, d, ox_cast(c, in[7], FLOE_F64), qt, lo, hi);
  return FLOE_OK;
}

/* The convolution of x - x_zp with w - w_zp (w_zp per output channel or scalar) in f64. */
static floe_code int_conv(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, FloeOutput w,
                          const FloeOutput *in, int nin, int xzi, int wzi, FloeOutput *y) {
  int rw = ox_rank(c, w, "the filter");
  if (rw < 0) return floe_status_code(c->st);
  return floe__onnx_conv(c, n, centred(c, x, in, nin, xzi, -1, 0),
                         centred(c, w, in, nin, wzi, 0, rw), y);
}

OX_MAP(map_conv_integer) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  FloeOutput y;
  if (rc != FLOE_OK || (rc = int_conv(c, n, in[0], in[1], in, nin, 2, 3, &y)) != FLOE_OK)
    return rc;
  out[0] = ox_cast(c, y, FLOE_I32);
  return FLOE_OK;
}

OX_MAP(map_qlinear_conv) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 8);
  if (rc != FLOE_OK) return rc;
  /* x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32, optional) */
  FloeOutput y;
  if ((rc = int_conv(c, n, in[0], in[3], in, nin, 2, 5, &y)) != FLOE_OK) return rc;
  int r = ox_rank(c, y, "the output");
  if (r < 0) return floe_status_code(c->st);
  if (given(in, nin, 8)) y = ox_binary(c, "Add", y, along_axis(c, ox_cast(c, in[8], FLOE_F64), 1, r));
  FloeDType qt = ox_dtype(in[7]);
  double lo, hi;
  if ((rc = qrange(c, qt, &lo, &hi)) != FLOE_OK) return rc;
  FloeOutput d = ox_binary(c, "Mul", y, out_scale(c, in[1], in[4], in[6], 1, r));
  out[0] = requantize(c, d, ox_cast(c, in[7], FLOE_F64), qt, lo, hi);
  return FLOE_OK;
}

const OxOp floe__onnx_ops_quant[] = {
    {"", "QuantizeLinear", map_quantize_linear},
    {"", "DequantizeLinear", map_dequantize_linear},
    {"", "DynamicQuantizeLinear", map_dynamic_quantize_linear},
    {"", "MatMulInteger", map_matmul_integer},
    {"", "QLinearMatMul", map_qlinear_matmul},
    {"", "ConvInteger", map_conv_integer},
    {"", "QLinearConv", map_qlinear_conv},
    {NULL, NULL, NULL},
};
