/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_math.c - ONNX elementwise math, activations, comparisons, logic, matrix products
 * and reductions as Floe ops. */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

/* Opset < 7 binary ops broadcast y against x only with broadcast = 1, aligning y's dims at
 * `axis` (default: the trailing dims); reshape y to x's rank so NumPy rules do the same. */
static FloeOutput legacy_broadcast(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x,
                                   FloeOutput y) {
  if (c->opset >= 7 || !ox_int(n, "broadcast", 0) || !ox_attr(n, "axis")) return y;
  FloeShape xs = ox_shape(x), ys = ox_shape(y);
  if (xs.rank < 0 || ys.rank < 0) return y;
  int axis = (int)ox_int(n, "axis", 0);
  if (axis < 0) axis += xs.rank;
  int64_t dims[FLOE_MAX_DIMS];
  for (int i = 0; i < xs.rank; i++)
    dims[i] = i >= axis && i < axis + ys.rank ? ys.dims[i - axis] : 1;
  for (int i = 0; i < xs.rank; i++)
    if (dims[i] < 0) return y;
  return ox_binary(c, "Reshape", y, ox_const_i64(c, dims, xs.rank));
}

/* --- binary, NumPy broadcasting --- */

static floe_code binary(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                        FloeOutput *out, const char *op) {
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  out[0] = ox_binary(c, op, in[0], legacy_broadcast(c, n, in[0], in[1]));
  return FLOE_OK;
}

#define BINARY(fn, op) \
  OX_MAP(fn) {            \
    (void)nout;        \
    return binary(c, n, in, nin, out, op); \
  }
BINARY(map_add, "Add")
BINARY(map_sub, "Sub")
BINARY(map_mul, "Mul")
BINARY(map_div, "Div")
BINARY(map_equal, "Equal")
BINARY(map_less, "Less")
BINARY(map_greater, "Greater")
BINARY(map_less_equal, "LessEqual")
BINARY(map_greater_equal, "GreaterEqual")
BINARY(map_and, "LogicalAnd")
BINARY(map_or, "LogicalOr")
BINARY(map_xor, "NotEqual")

OX_MAP(map_pow) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  /* Since opset 12 the exponent may have another type than the base. */
  FloeOutput y = ox_cast(c, legacy_broadcast(c, n, in[0], in[1]), ox_dtype(in[0]));
  out[0] = ox_binary(c, "Pow", in[0], y);
  return FLOE_OK;
}

/* Max / Min / Sum / Mean of one or more inputs, broadcasting. */
static floe_code variadic(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out,
                          const char *op, int mean) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeOutput acc = in[0];
  for (int i = 1; i < nin; i++) acc = ox_binary(c, op, acc, in[i]);
  if (nin == 1) acc = ox_identity(c, acc);
  if (mean && nin > 1) acc = ox_binary(c, "Div", acc, ox_scalar(c, ox_dtype(in[0]), nin));
  out[0] = acc;
  return FLOE_OK;
}
OX_MAP(map_max) { OX_UNUSED; return variadic(c, in, nin, out, "Maximum", 0); }
OX_MAP(map_min) { OX_UNUSED; return variadic(c, in, nin, out, "Minimum", 0); }
OX_MAP(map_sum) { OX_UNUSED; return variadic(c, in, nin, out, "Add", 0); }
OX_MAP(map_mean) { OX_UNUSED; return variadic(c, in, nin, out, "Add", 1); }

/* --- unary --- */

static floe_code unary(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out,
                       const char *op) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  out[0] = ox_unary(c, op, in[0]);
  return FLOE_OK;
}
#define UNARY(fn, op) \
  OX_MAP(fn) {           \
    OX_UNUSED;      \
    return unary(c, in, nin, out, op); \
  }
UNARY(map_neg, "Neg")
UNARY(map_abs, "Abs")
UNARY(map_exp, "Exp")
UNARY(map_log, "Log")
UNARY(map_sqrt, "Sqrt")
UNARY(map_relu, "Relu")
UNARY(map_sigmoid, "Sigmoid")
UNARY(map_tanh, "Tanh")
UNARY(map_floor, "Floor")
UNARY(map_sin, "Sin")
UNARY(map_cos, "Cos")
UNARY(map_sign, "Sign")
UNARY(map_not, "LogicalNot")
UNARY(map_softplus, "Softplus")
UNARY(map_identity, "Identity")

OX_MAP(map_reciprocal) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  out[0] = ox_binary(c, "Div", ox_scalar(c, ox_dtype(in[0]), 1.0), in[0]);
  return FLOE_OK;
}

static FloeOutput with_alpha(OxCtx *c, const char *op, FloeOutput x, float alpha) {
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_set_attr_float(b, "alpha", alpha);
  return ox_finish(c, b);
}

OX_MAP(map_leaky_relu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK) out[0] = with_alpha(c, "LeakyRelu", in[0], ox_float(n, "alpha", 0.01f));
  return rc;
}

OX_MAP(map_elu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK) out[0] = with_alpha(c, "Elu", in[0], ox_float(n, "alpha", 1.0f));
  return rc;
}

OX_MAP(map_selu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  float alpha = ox_float(n, "alpha", 1.67326319217681884765625f);
  float gamma = ox_float(n, "gamma", 1.05070102214813232421875f);
  FloeOutput e = with_alpha(c, "Elu", in[0], alpha);
  out[0] = ox_binary(c, "Mul", e, ox_scalar(c, ox_dtype(in[0]), gamma));
  return FLOE_OK;
}

OX_MAP(map_celu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  /* celu(x) = alpha * elu(x / alpha) */
  float alpha = ox_float(n, "alpha", 1.0f);
  FloeDType dt = ox_dtype(in[0]);
  FloeOutput e = with_alpha(c, "Elu", ox_binary(c, "Div", in[0], ox_scalar(c, dt, alpha)), 1.0f);
  out[0] = ox_binary(c, "Mul", e, ox_scalar(c, dt, alpha));
  return FLOE_OK;
}

/* max(0, min(1, alpha * x + beta)) */
static FloeOutput hard_sigmoid(OxCtx *c, FloeOutput x, float alpha, float beta) {
  FloeDType dt = ox_dtype(x);
  FloeOutput y = ox_binary(c, "Add", ox_binary(c, "Mul", x, ox_scalar(c, dt, alpha)),
                           ox_scalar(c, dt, beta));
  y = ox_binary(c, "Minimum", y, ox_scalar(c, dt, 1.0));
  return ox_binary(c, "Maximum", y, ox_scalar(c, dt, 0.0));
}

OX_MAP(map_hard_sigmoid) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK)
    out[0] = hard_sigmoid(c, in[0], ox_float(n, "alpha", 0.2f), ox_float(n, "beta", 0.5f));
  return rc;
}

OX_MAP(map_hard_swish) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc == FLOE_OK)
    out[0] = ox_binary(c, "Mul", in[0], hard_sigmoid(c, in[0], 1.0f / 6.0f, 0.5f));
  return rc;
}

OX_MAP(map_softsign) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeOutput d =
      ox_binary(c, "Add", ox_unary(c, "Abs", in[0]), ox_scalar(c, ox_dtype(in[0]), 1.0));
  out[0] = ox_binary(c, "Div", in[0], d);
  return FLOE_OK;
}

OX_MAP(map_thresholded_relu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  FloeOutput keep = ox_binary(c, "Greater", in[0], ox_scalar(c, dt, ox_float(n, "alpha", 1.0f)));
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, keep);
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ox_unary(c, "ZerosLike", in[0]));
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_shrink) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  /* x < -lambd: x + bias; x > lambd: x - bias; else 0 */
  FloeDType dt = ox_dtype(in[0]);
  float lambd = ox_float(n, "lambd", 0.5f), bias = ox_float(n, "bias", 0.0f);
  FloeOutput zero = ox_unary(c, "ZerosLike", in[0]);
  FloeOutput lo = ox_binary(c, "Less", in[0], ox_scalar(c, dt, -lambd));
  FloeOutput hi = ox_binary(c, "Greater", in[0], ox_scalar(c, dt, lambd));
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, hi);
  floe_node_add_input(b, ox_binary(c, "Sub", in[0], ox_scalar(c, dt, bias)));
  floe_node_add_input(b, zero);
  FloeOutput t = ox_finish(c, b);
  b = ox_begin(c, "Select");
  floe_node_add_input(b, lo);
  floe_node_add_input(b, ox_binary(c, "Add", in[0], ox_scalar(c, dt, bias)));
  floe_node_add_input(b, t);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_prelu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  /* x < 0 ? slope * x : x, slope broadcast to x */
  FloeOutput slope = in[1];
  FloeShape xs = ox_shape(in[0]), ss = ox_shape(in[1]);
  if (c->opset < 7 && xs.rank > 1 && ss.rank == 1 && ss.dims[0] > 1) {
    /* Opset 6 and earlier: a 1-D slope is per channel (axis 1). */
    int64_t dims[FLOE_MAX_DIMS];
    for (int i = 0; i < xs.rank - 1; i++) dims[i] = i == 0 ? ss.dims[0] : 1;
    slope = ox_binary(c, "Reshape", slope, ox_const_i64(c, dims, xs.rank - 1));
  }
  FloeOutput neg = ox_binary(c, "Less", in[0], ox_scalar(c, ox_dtype(in[0]), 0.0));
  FloeOutput scaled = ox_binary(c, "Mul", in[0], slope);
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, neg);
  floe_node_add_input(b, scaled);
  floe_node_add_input(b, in[0]);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_clip) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  FloeOutput lo = {NULL, 0}, hi = {NULL, 0}, y = in[0];
  if (c->opset < 11) {
    if (ox_attr(n, "min")) lo = ox_scalar(c, dt, ox_float(n, "min", 0));
    if (ox_attr(n, "max")) hi = ox_scalar(c, dt, ox_float(n, "max", 0));
  } else {
    if (nin > 1) lo = in[1];
    if (nin > 2) hi = in[2];
  }
  if (ox_present(lo)) y = ox_binary(c, "Maximum", y, lo);
  if (ox_present(hi)) y = ox_binary(c, "Minimum", y, hi);
  out[0] = y.node == in[0].node && y.index == in[0].index ? ox_identity(c, y) : y;
  return FLOE_OK;
}

OX_MAP(map_where) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_add_input(b, in[2]);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_cast) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  const Onnx__AttributeProto *to = ox_attr(n, "to");
  if (!to || !to->has_i) return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute 'to' is required");
  FloeDType dt = floe__onnx_dtype((int32_t)to->i);
  if (dt == FLOE_DTYPE_INVALID)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "cast to %s: Floe has no such data type",
                   floe__onnx_dtype_name((int32_t)to->i));
  FloeOutput y = ox_cast(c, in[0], dt);
  out[0] = y.node == in[0].node && y.index == in[0].index ? ox_identity(c, y) : y;
  return FLOE_OK;
}

OX_MAP(map_cast_like) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeOutput y = ox_cast(c, in[0], ox_dtype(in[1]));
  out[0] = y.node == in[0].node && y.index == in[0].index ? ox_identity(c, y) : y;
  return FLOE_OK;
}

/* --- matrix products --- */

/* NumPy matmul: 1-D operands are promoted and the added dim removed after; batch dims
 * broadcast. */
static FloeOutput matmul(OxCtx *c, FloeOutput a, FloeOutput b) {
  FloeShape as = ox_shape(a), bs = ox_shape(b);
  if (as.rank < 0 || bs.rank < 0) {
    ox_fail(c, FLOE_UNIMPLEMENTED, "MatMul of operands of unknown rank");
    return (FloeOutput){NULL, 0};
  }
  int squeeze_a = as.rank == 1, squeeze_b = bs.rank == 1;
  if (squeeze_a) {
    FloeNodeBuilder *e = ox_begin(c, "ExpandDims");
    floe_node_add_input(e, a);
    floe_node_set_attr_int(e, "axis", 0);
    a = ox_finish(c, e);
    as = ox_shape(a);
  }
  if (squeeze_b) {
    FloeNodeBuilder *e = ox_begin(c, "ExpandDims");
    floe_node_add_input(e, b);
    floe_node_set_attr_int(e, "axis", -1);
    b = ox_finish(c, e);
    bs = ox_shape(b);
  }
  FloeOutput y;
  if (as.rank == 2 && bs.rank == 2) {
    y = ox_binary(c, "MatMul", a, b);
  } else {
    /* Broadcast the batch dims of both to the common batch shape when they differ. */
    int r = as.rank > bs.rank ? as.rank : bs.rank;
    int64_t batch[FLOE_MAX_DIMS];
    int same = as.rank == bs.rank, known = 1;
    for (int i = 0; i < r - 2; i++) {
      int ia = i - (r - as.rank), ib = i - (r - bs.rank);
      int64_t da = ia >= 0 ? as.dims[ia] : 1, db = ib >= 0 ? bs.dims[ib] : 1;
      if (da < 0 || db < 0) known = 0;
      if (da != db) same = 0;
      batch[i] = da == 1 ? db : da;
    }
    if (!same) {
      if (!known) {
        ox_fail(c, FLOE_UNIMPLEMENTED, "MatMul broadcasting batch dims of unknown size");
        return (FloeOutput){NULL, 0};
      }
      int64_t full[FLOE_MAX_DIMS];
      for (int i = 0; i < r - 2; i++) full[i] = batch[i];
      full[r - 2] = as.dims[as.rank - 2];
      full[r - 1] = as.dims[as.rank - 1];
      if (full[r - 2] >= 0 && full[r - 1] >= 0)
        a = ox_binary(c, "BroadcastTo", a, ox_const_i64(c, full, r));
      full[r - 2] = bs.dims[bs.rank - 2];
      full[r - 1] = bs.dims[bs.rank - 1];
      if (full[r - 2] >= 0 && full[r - 1] >= 0)
        b = ox_binary(c, "BroadcastTo", b, ox_const_i64(c, full, r));
    }
    y = ox_binary(c, "BatchMatMul", a, b);
  }
  if (squeeze_a || squeeze_b) {
    FloeShape ys = ox_shape(y);
    int64_t dims[2];
    int k = 0;
    if (squeeze_a) dims[k++] = ys.rank - 2;
    if (squeeze_b) dims[k++] = ys.rank - 1;
    FloeNodeBuilder *s = ox_begin(c, "Squeeze");
    floe_node_add_input(s, y);
    floe_node_set_attr_int_list(s, "squeeze_dims", dims, k);
    y = ox_finish(c, s);
  }
  return y;
}

OX_MAP(map_matmul) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  out[0] = matmul(c, in[0], in[1]);
  return out[0].node ? FLOE_OK : floe_status_code(c->st);
}

OX_MAP(map_gemm) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  float alpha = ox_float(n, "alpha", 1.0f), beta = ox_float(n, "beta", 1.0f);
  FloeNodeBuilder *b = ox_begin(c, "MatMul");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_set_attr_bool(b, "transpose_a", ox_int(n, "transA", 0) != 0);
  floe_node_set_attr_bool(b, "transpose_b", ox_int(n, "transB", 0) != 0);
  FloeOutput y = ox_finish(c, b);
  if (alpha != 1.0f) y = ox_binary(c, "Mul", y, ox_scalar(c, dt, alpha));
  if (nin > 2 && ox_present(in[2]) && beta != 0.0f) {
    FloeOutput cc = in[2];
    if (beta != 1.0f) cc = ox_binary(c, "Mul", cc, ox_scalar(c, dt, beta));
    y = ox_binary(c, "Add", y, cc);
  }
  out[0] = y;
  return FLOE_OK;
}

/* --- reductions --- */

static FloeOutput expand0(OxCtx *c, FloeOutput x) {
  FloeNodeBuilder *b = ox_begin(c, "ExpandDims");
  floe_node_add_input(b, x);
  floe_node_set_attr_int(b, "axis", 0);
  return ox_finish(c, b);
}

typedef enum RedKind { RED_PLAIN, RED_L1, RED_L2, RED_LOG_SUM, RED_LOG_SUM_EXP, RED_SUM_SQUARE } RedKind;

static floe_code reduce(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                        FloeOutput *out, const char *op, RedKind kind) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int keep = ox_int(n, "keepdims", 1) != 0;
  FloeOutput x = in[0], axes = {NULL, 0};
  const int64_t *av;
  int na = ox_ints(n, "axes", &av);
  int axes_as_input = !strcmp(n->op_type, "ReduceSum") ? c->opset >= 13 : 0;
  if (axes_as_input) {
    na = 0;
    if (nin > 1 && ox_present(in[1])) {
      int64_t buf[FLOE_MAX_DIMS];
      int k = ox_const_ints(in[1], buf, FLOE_MAX_DIMS);
      if (k > 0) {
        axes = ox_const_i64(c, buf, k);
        na = k;
      } else if (k < 0) {
        /* Axes known only at run time; empty means all axes (or none with
         * noop_with_empty_axes): take the first max(len, rank * (len == 0)) entries of
         * axes ++ [0, rank). */
        int r = ox_rank(c, x, "the input");
        if (r < 0) return floe_status_code(c->st);
        FloeOutput a = ox_cast(c, in[1], FLOE_I64);
        if (!ox_int(n, "noop_with_empty_axes", 0)) {
          int64_t all[FLOE_MAX_DIMS];
          for (int i = 0; i < r; i++) all[i] = i;
          FloeOutput parts[2] = {a, ox_const_i64(c, all, r)};
          FloeNodeBuilder *b = ox_begin(c, "Concat");
          floe_node_add_input_list(b, parts, 2);
          floe_node_add_input(b, ox_scalar_i32(c, 0));
          FloeOutput cat = ox_finish(c, b);
          b = ox_begin(c, "Size");
          floe_node_add_input(b, a);
          floe_node_set_attr_type(b, "out_type", FLOE_I64);
          FloeOutput len = ox_finish(c, b);
          FloeOutput empty = ox_cast(c, ox_binary(c, "Equal", len, ox_scalar_i64(c, 0)), FLOE_I64);
          FloeOutput take = ox_binary(c, "Add", len, ox_binary(c, "Mul", empty, ox_scalar_i64(c, r)));
          int64_t zero = 0;
          b = ox_begin(c, "Slice");
          floe_node_add_input(b, cat);
          floe_node_add_input(b, ox_const_i64(c, &zero, 1));
          floe_node_add_input(b, expand0(c, take));
          a = ox_finish(c, b);
        }
        axes = a;
        na = 1;
      }
    }
  } else if (na > 0) {
    axes = ox_const_i64(c, av, na);
  }
  if (na <= 0) {
    if (axes_as_input && ox_int(n, "noop_with_empty_axes", 0)) {
      out[0] = ox_identity(c, x);
      return FLOE_OK;
    }
    int r = ox_rank(c, x, "the input");
    if (r < 0) return floe_status_code(c->st);
    int64_t all[FLOE_MAX_DIMS];
    for (int i = 0; i < r; i++) all[i] = i;
    axes = ox_const_i64(c, all, r);
  }
  switch (kind) {
    case RED_L1: x = ox_unary(c, "Abs", x); break;
    case RED_L2:
    case RED_SUM_SQUARE: x = ox_unary(c, "Square", x); break;
    case RED_LOG_SUM_EXP: x = ox_unary(c, "Exp", x); break;
    default: break;
  }
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_add_input(b, axes);
  floe_node_set_attr_bool(b, "keep_dims", keep);
  FloeOutput y = ox_finish(c, b);
  if (kind == RED_L2) y = ox_unary(c, "Sqrt", y);
  if (kind == RED_LOG_SUM || kind == RED_LOG_SUM_EXP) y = ox_unary(c, "Log", y);
  out[0] = y;
  return FLOE_OK;
}

#define REDUCE(fn, op, kind) \
  OX_MAP(fn) {                  \
    (void)nout;              \
    return reduce(c, n, in, nin, out, op, kind); \
  }
REDUCE(map_reduce_sum, "Sum", RED_PLAIN)
REDUCE(map_reduce_mean, "Mean", RED_PLAIN)
REDUCE(map_reduce_max, "Max", RED_PLAIN)
REDUCE(map_reduce_min, "Min", RED_PLAIN)
REDUCE(map_reduce_prod, "Prod", RED_PLAIN)
REDUCE(map_reduce_l1, "Sum", RED_L1)
REDUCE(map_reduce_l2, "Sum", RED_L2)
REDUCE(map_reduce_log_sum, "Sum", RED_LOG_SUM)
REDUCE(map_reduce_log_sum_exp, "Sum", RED_LOG_SUM_EXP)
REDUCE(map_reduce_sum_square, "Sum", RED_SUM_SQUARE)

static floe_code arg_reduce(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                            FloeOutput *out, const char *op) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  if (xs.rank < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of unknown rank");
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", 0), xs.rank, "axis", &axis)) != FLOE_OK) return rc;
  FloeOutput x = in[0];
  int last = ox_int(n, "select_last_index", 0) != 0;
  int64_t len = xs.dims[axis];
  if (last) {
    /* The last extreme = len - 1 - (first extreme of x reversed along axis). */
    if (len < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "select_last_index on a dim of unknown size");
    int64_t *rev = floe__malloc((size_t)(len ? len : 1) * sizeof *rev);
    if (!rev) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < len; i++) rev[i] = len - 1 - i;
    FloeOutput idx = ox_const_i64(c, rev, (int)len);
    floe__free(rev);
    FloeNodeBuilder *b = ox_begin(c, "Gather");
    floe_node_add_input(b, x);
    floe_node_add_input(b, idx);
    floe_node_set_attr_int(b, "axis", axis);
    x = ox_finish(c, b);
  }
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_scalar_i32(c, axis));
  floe_node_set_attr_type(b, "output_type", FLOE_I64);
  FloeOutput y = ox_finish(c, b);
  if (last) y = ox_binary(c, "Sub", ox_scalar_i64(c, len - 1), y);
  if (ox_int(n, "keepdims", 1)) {
    FloeNodeBuilder *e = ox_begin(c, "ExpandDims");
    floe_node_add_input(e, y);
    floe_node_set_attr_int(e, "axis", axis);
    y = ox_finish(c, e);
  }
  out[0] = y;
  return FLOE_OK;
}
OX_MAP(map_argmax) { (void)nout; return arg_reduce(c, n, in, nin, out, "ArgMax"); }
OX_MAP(map_argmin) { (void)nout; return arg_reduce(c, n, in, nin, out, "ArgMin"); }

/* --- softmax family --- */

typedef enum SmKind { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_HARDMAX } SmKind;

static FloeOutput softmax_last(OxCtx *c, FloeOutput x, int axis, SmKind kind) {
  if (kind == SM_HARDMAX) {
    FloeShape s = ox_shape(x);
    FloeNodeBuilder *b = ox_begin(c, "ArgMax");
    floe_node_add_input(b, x);
    floe_node_add_input(b, ox_scalar_i32(c, axis));
    FloeOutput am = ox_finish(c, b);
    b = ox_begin(c, "OneHot");
    floe_node_add_input(b, am);
    floe_node_add_input(b, ox_scalar_i32(c, (int32_t)s.dims[axis]));
    floe_node_add_input(b, ox_scalar(c, ox_dtype(x), 1.0));
    floe_node_add_input(b, ox_scalar(c, ox_dtype(x), 0.0));
    floe_node_set_attr_int(b, "axis", axis);
    return ox_finish(c, b);
  }
  FloeNodeBuilder *b = ox_begin(c, kind == SM_SOFTMAX ? "Softmax" : "LogSoftmax");
  floe_node_add_input(b, x);
  floe_node_set_attr_int(b, "axis", axis);
  return ox_finish(c, b);
}

static floe_code softmax(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                         FloeOutput *out, SmKind kind) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape s = ox_shape(in[0]);
  if (s.rank < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of unknown rank");
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", c->opset >= 13 ? -1 : 1), s.rank, "axis", &axis)) !=
      FLOE_OK)
    return rc;
  if (c->opset >= 13 || axis == s.rank - 1) {
    if (kind == SM_HARDMAX && s.dims[axis] < 0)
      return ox_fail(c, FLOE_UNIMPLEMENTED, "Hardmax over a dim of unknown size");
    out[0] = softmax_last(c, in[0], axis, kind);
    return FLOE_OK;
  }
  /* Before opset 13 the input is seen as 2-D [prod(dims[:axis]), prod(dims[axis:])]. */
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.rank; i++) {
    if (s.dims[i] < 0)
      return ox_fail(c, FLOE_UNIMPLEMENTED, "opset %d softmax over dims of unknown size", c->opset);
    if (i < axis)
      outer *= s.dims[i];
    else
      inner *= s.dims[i];
  }
  int64_t d2[2] = {outer, inner};
  FloeOutput x2 = ox_binary(c, "Reshape", in[0], ox_const_i64(c, d2, 2));
  FloeOutput y2 = softmax_last(c, x2, 1, kind);
  out[0] = ox_binary(c, "Reshape", y2, ox_const_i64(c, s.dims, s.rank));
  return FLOE_OK;
}
OX_MAP(map_softmax) { (void)nout; return softmax(c, n, in, nin, out, SM_SOFTMAX); }
OX_MAP(map_log_softmax) { (void)nout; return softmax(c, n, in, nin, out, SM_LOG_SOFTMAX); }
OX_MAP(map_hardmax) { (void)nout; return softmax(c, n, in, nin, out, SM_HARDMAX); }

const OxOp floe__onnx_ops_math[] = {
    {"", "Add", map_add},
    {"", "Sub", map_sub},
    {"", "Mul", map_mul},
    {"", "Div", map_div},
    {"", "Pow", map_pow},
    {"", "Equal", map_equal},
    {"", "Less", map_less},
    {"", "Greater", map_greater},
    {"", "LessOrEqual", map_less_equal},
    {"", "GreaterOrEqual", map_greater_equal},
    {"", "And", map_and},
    {"", "Or", map_or},
    {"", "Xor", map_xor},
    {"", "Max", map_max},
    {"", "Min", map_min},
    {"", "Sum", map_sum},
    {"", "Mean", map_mean},
    {"", "Neg", map_neg},
    {"", "Abs", map_abs},
    {"", "Exp", map_exp},
    {"", "Log", map_log},
    {"", "Sqrt", map_sqrt},
    {"", "Relu", map_relu},
    {"", "Sigmoid", map_sigmoid},
    {"", "Tanh", map_tanh},
    {"", "Floor", map_floor},
    {"", "Sin", map_sin},
    {"", "Cos", map_cos},
    {"", "Sign", map_sign},
    {"", "Not", map_not},
    {"", "Softplus", map_softplus},
    {"", "Identity", map_identity},
    {"", "Reciprocal", map_reciprocal},
    {"", "LeakyRelu", map_leaky_relu},
    {"", "Elu", map_elu},
    {"", "Selu", map_selu},
    {"", "Celu", map_celu},
    {"", "HardSigmoid", map_hard_sigmoid},
    {"", "HardSwish", map_hard_swish},
    {"", "Softsign", map_softsign},
    {"", "ThresholdedRelu", map_thresholded_relu},
    {"", "Shrink", map_shrink},
    {"", "PRelu", map_prelu},
    {"", "Clip", map_clip},
    {"", "Where", map_where},
    {"", "Cast", map_cast},
    {"", "CastLike", map_cast_like},
    {"", "MatMul", map_matmul},
    {"", "Gemm", map_gemm},
    {"", "ReduceSum", map_reduce_sum},
    {"", "ReduceMean", map_reduce_mean},
    {"", "ReduceMax", map_reduce_max},
    {"", "ReduceMin", map_reduce_min},
    {"", "ReduceProd", map_reduce_prod},
    {"", "ReduceL1", map_reduce_l1},
    {"", "ReduceL2", map_reduce_l2},
    {"", "ReduceLogSum", map_reduce_log_sum},
    {"", "ReduceLogSumExp", map_reduce_log_sum_exp},
    {"", "ReduceSumSquare", map_reduce_sum_square},
    {"", "ArgMax", map_argmax},
    {"", "ArgMin", map_argmin},
    {"", "Softmax", map_softmax},
    {"", "LogSoftmax", map_log_softmax},
    {"", "Hardmax", map_hardmax},
    {NULL, NULL, NULL},
};
