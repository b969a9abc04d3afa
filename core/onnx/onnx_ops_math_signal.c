/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_math_signal.c - ONNX's remaining elementwise math (trigonometry, rounding, Erf,
 * IsNaN, IsInf, Mod, BitShift), Det, MeanVarianceNormalization and the signal ops (windows,
 * DFT, STFT, MelWeightMatrix) as Floe ops (core/graph/ops_math_signal.def). */
#include <string.h>

#include "onnx_internal.h"

/* ONNX's TensorProto.DataType FLOAT, the default output_datatype of the signal ops. */
#define ONNX_FLOAT 1

/* --- elementwise --- */

static floe_code unary(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out,
                       const char *op) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK) out[0] = ox_unary(c, op, in[0]);
  return rc;
}
#define UNARY(fn, op) \
  OX_MAP(fn) {           \
    OX_UNUSED;      \
    return unary(c, in, nin, out, op); \
  }
UNARY(map_ceil, "Ceil")
UNARY(map_round, "Round")
UNARY(map_erf, "Erf")
UNARY(map_tan, "Tan")
UNARY(map_asin, "Asin")
UNARY(map_acos, "Acos")
UNARY(map_atan, "Atan")
UNARY(map_sinh, "Sinh")
UNARY(map_cosh, "Cosh")
UNARY(map_asinh, "Asinh")
UNARY(map_acosh, "Acosh")
UNARY(map_atanh, "Atanh")
UNARY(map_isnan, "IsNan")

OX_MAP(map_isinf) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "IsInf");
  floe_node_add_input(b, in[0]);
  floe_node_set_attr_bool(b, "detect_negative", ox_int(n, "detect_negative", 1) != 0);
  floe_node_set_attr_bool(b, "detect_positive", ox_int(n, "detect_positive", 1) != 0);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_mod) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int64_t fmod = ox_int(n, "fmod", 0);
  if (fmod != 0 && fmod != 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute fmod must be 0 or 1, got %lld",
                   (long long)fmod);
  /* fmod = 0 is the sign of the divisor (NumPy's mod, also for floats as ONNX's reference
   * computes it); fmod = 1 that of the dividend (C's fmod). */
  out[0] = ox_binary(c, fmod ? "TruncateMod" : "FloorMod", in[0], in[1]);
  return FLOE_OK;
}

OX_MAP(map_bitshift) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  char buf[16];
  const char *dir = ox_str(n, "direction", NULL, buf, sizeof buf);
  if (!dir || (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT")))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute direction must be LEFT or RIGHT, got %s",
                   dir ? dir : "none");
  out[0] = ox_binary(c, dir[0] == 'L' ? "LeftShift" : "RightShift", in[0], in[1]);
  return FLOE_OK;
}

/* --- Det, MeanVarianceNormalization --- */

OX_MAP(map_det) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK) out[0] = ox_unary(c, "MatrixDeterminant", in[0]);
  return rc;
}

static FloeOutput mean_keep(OxCtx *c, FloeOutput x, FloeOutput axes) {
  FloeNodeBuilder *b = ox_begin(c, "Mean");
  floe_node_add_input(b, x);
  floe_node_add_input(b, axes);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  return ox_finish(c, b);
}

/* (x - mean) / (std + 1e-9) over `axes` (default [0, 2, 3]), as ONNX's function body
 * defines it. */
OX_MAP(map_mvn) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  static const int64_t dflt[3] = {0, 2, 3};
  const int64_t *av;
  int na = ox_ints(n, "axes", &av);
  if (na < 0) av = dflt, na = 3;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int64_t axes[FLOE_MAX_DIMS];
  if (na > r) return ox_fail(c, FLOE_INVALID_ARGUMENT, "%d axes for an input of rank %d", na, r);
  for (int i = 0; i < na; i++) {
    int a;
    if ((rc = ox_axis(c, av[i], r, "axes", &a)) != FLOE_OK) return rc;
    axes[i] = a;
  }
  FloeOutput ax = ox_const_i64(c, axes, na);
  FloeDType dt = ox_dtype(in[0]);
  FloeOutput d = ox_binary(c, "Sub", in[0], mean_keep(c, in[0], ax));
  FloeOutput sd = ox_unary(c, "Sqrt", mean_keep(c, ox_unary(c, "Square", d), ax));
  out[0] = ox_binary(c, "Div", d, ox_binary(c, "Add", sd, ox_scalar(c, dt, 1e-9)));
  return FLOE_OK;
}

/* --- signal ops --- */

/* The dtype of an output_datatype attribute (default FLOAT), failing for ones Floe lacks. */
static floe_code out_dtype(OxCtx *c, const Onnx__NodeProto *n, FloeDType *dt) {
  int64_t t = ox_int(n, "output_datatype", ONNX_FLOAT);
  *dt = floe__onnx_dtype((int32_t)t);
  if (*dt == FLOE_DTYPE_INVALID || *dt == FLOE_BOOL)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "output_datatype %s: Floe has no such numeric type",
                   floe__onnx_dtype_name((int32_t)t));
  return FLOE_OK;
}

static int is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

static floe_code window(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                        FloeOutput *out, const double *coef, int ncoef) {
  FloeDType dt;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK || (rc = out_dtype(c, n, &dt)) != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "CosineSumWindow");
  floe_node_add_input(b, in[0]);
  /* Integer outputs truncate the f64 window, as ONNX's reference casts it. */
  floe_node_set_attr_type(b, "dtype", is_float(dt) ? dt : FLOE_F64);
  floe_node_set_attr_float_list(b, "coefficients", coef, ncoef);
  floe_node_set_attr_bool(b, "periodic", ox_int(n, "periodic", 1) != 0);
  out[0] = ox_cast(c, ox_finish(c, b), dt);
  return FLOE_OK;
}

OX_MAP(map_hann) {
  (void)nout;
  static const double a[2] = {0.5, 0.5};
  return window(c, n, in, nin, out, a, 2);
}
OX_MAP(map_hamming) {
  (void)nout;
  static const double a[2] = {25.0 / 46.0, 21.0 / 46.0};
  return window(c, n, in, nin, out, a, 2);
}
OX_MAP(map_blackman) {
  (void)nout;
  static const double a[3] = {0.42, 0.5, 0.08};
  return window(c, n, in, nin, out, a, 3);
}

/* Dim `axis` of x as an i64 scalar: a constant when the shape knows it. */
static FloeOutput dim_of(OxCtx *c, FloeOutput x, int axis) {
  FloeShape s = ox_shape(x);
  if (s.rank > axis && s.dims[axis] >= 0) return ox_scalar_i64(c, s.dims[axis]);
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput shape = ox_finish(c, b);
  b = ox_begin(c, "Gather");
  floe_node_add_input(b, shape);
  floe_node_add_input(b, ox_scalar_i64(c, axis));
  return ox_finish(c, b);
}

OX_MAP(map_dft) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int64_t axis = ox_int(n, "axis", 1);
  if (c->opset >= 20) {
    /* Since opset 20 the axis is an optional input, default -2. */
    axis = -2;
    if (nin > 2 && ox_present(in[2]) && ox_const_ints(in[2], &axis, 1) != 1)
      return ox_fail(c, FLOE_UNIMPLEMENTED, "input 2 ('axis') must be a constant scalar for Floe");
  }
  int ax = (int)(axis < 0 ? axis + r : axis);
  if (r < 2 || ax < 0 || ax > r - 2)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "axis %lld is out of range for an input of rank %d",
                   (long long)axis, r);
  int inverse = ox_int(n, "inverse", 0) != 0, onesided = ox_int(n, "onesided", 0) != 0;
  FloeOutput len;
  if (nin > 1 && ox_present(in[1])) {
    len = in[1];
  } else {
    /* Default: the axis' length; for an inverse of a one-sided spectrum, the even signal
     * length it came from. */
    len = dim_of(c, in[0], ax);
    if (inverse && onesided)
      len = ox_binary(c, "Mul", ox_binary(c, "Sub", len, ox_scalar_i64(c, 1)),
                      ox_scalar_i64(c, 2));
  }
  FloeNodeBuilder *b = ox_begin(c, "DFT");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, len);
  floe_node_set_attr_int(b, "axis", ax);
  floe_node_set_attr_bool(b, "inverse", inverse);
  floe_node_set_attr_bool(b, "onesided", onesided);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_stft) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeOutput window = nin > 2 ? in[2] : (FloeOutput){NULL, 0};
  FloeOutput flen = nin > 3 ? in[3] : (FloeOutput){NULL, 0};
  if (!ox_present(flen)) {
    if (ox_present(window)) {
      FloeNodeBuilder *b = ox_begin(c, "Size");
      floe_node_add_input(b, window);
      floe_node_set_attr_type(b, "out_type", FLOE_I64);
      flen = ox_finish(c, b);
    } else {
      flen = dim_of(c, in[0], 1); /* one frame of the whole signal */
    }
  }
  if (!ox_present(window)) {
    /* A rectangular window of frame_length ones. */
    FloeOutput dims = ox_binary(c, "Reshape", ox_cast(c, flen, FLOE_I64), ox_const_i64(c, (int64_t[]){1}, 1));
    window = ox_binary(c, "Fill", dims, ox_scalar(c, ox_dtype(in[0]), 1.0));
  }
  FloeNodeBuilder *b = ox_begin(c, "STFT");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_add_input(b, window);
  floe_node_add_input(b, ox_cast(c, flen, ox_dtype(in[1])));
  floe_node_set_attr_bool(b, "onesided", ox_int(n, "onesided", 1) != 0);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_mel) {
  OX_UNUSED;
  FloeDType dt;
  floe_code rc = ox_need(c, in, nin, 5);
  if (rc != FLOE_OK || (rc = out_dtype(c, n, &dt)) != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "MelWeightMatrix");
  for (int i = 0; i < 5; i++) floe_node_add_input(b, in[i]);
  floe_node_set_attr_type(b, "dtype", is_float(dt) ? dt : FLOE_F64);
  out[0] = ox_cast(c, ox_finish(c, b), dt);
  return FLOE_OK;
}

const OxOp floe__onnx_ops_math_signal[] = {
    {"", "Ceil", map_ceil},
    {"", "Round", map_round},
    {"", "Erf", map_erf},
    {"", "Tan", map_tan},
    {"", "Asin", map_asin},
    {"", "Acos", map_acos},
    {"", "Atan", map_atan},
    {"", "Sinh", map_sinh},
    {"", "Cosh", map_cosh},
    {"", "Asinh", map_asinh},
    {"", "Acosh", map_acosh},
    {"", "Atanh", map_atanh},
    {"", "IsNaN", map_isnan},
    {"", "IsInf", map_isinf},
    {"", "Mod", map_mod},
    {"", "BitShift", map_bitshift},
    {"", "Det", map_det},
    {"", "MeanVarianceNormalization", map_mvn},
    {"", "HannWindow", map_hann},
    {"", "HammingWindow", map_hamming},
    {"", "BlackmanWindow", map_blackman},
    {"", "DFT", map_dft},
    {"", "STFT", map_stft},
    {"", "MelWeightMatrix", map_mel},
    {NULL, NULL, NULL},
};
