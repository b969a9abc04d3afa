/* SPDX-License-Identifier: Apache-2.0 */
/* grad_math.c - gradient functions of the elementwise, reduction and matrix ops.
 *
 * Each function adds the nodes computing the input gradients of one forward node from the
 * gradients at its outputs (FloeGradCtx, gradients.c). Broadcasting binary ops sum each
 * operand's gradient back to its shape (floe__grad_sum_to); inputs whose gradient nobody
 * wants (need_dx false) get no nodes. */
#include <string.h>

#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }
static FloeOutput out_(const FloeGradCtx *c, int j) { return floe_out((FloeNode *)c->node, j); }
static FloeDType dtype0(const FloeGradCtx *c) { return floe__grad_input_dtype(c, 0); }

static FloeOutput bin(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b) {
  return floe__grad_binary(c, op, a, b);
}
static FloeOutput un(FloeGradCtx *c, const char *op, FloeOutput a) {
  return floe__grad_unary(c, op, a);
}
static FloeOutput scalar(FloeGradCtx *c, double v) { return floe__grad_scalar(c, dtype0(c), v); }

static FloeOutput select3(FloeGradCtx *c, FloeOutput cond, FloeOutput t, FloeOutput e) {
  return floe__grad_op(c, "Select", (FloeOutput[]){cond, t, e}, 3, NULL);
}

/* Sets dx[i] = g summed down to input i's shape, when wanted. */
static void set_summed(FloeGradCtx *c, int i, FloeOutput g) {
  if (c->need_dx[i]) c->dx[i] = floe__grad_sum_to(c, g, in_(c, i));
}

/* ---- broadcasting binary ops ---- */

static floe_code grad_add(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  set_summed(c, 0, c->dy[0]);
  set_summed(c, 1, c->dy[0]);
  return FLOE_OK;
}

static floe_code grad_sub(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  set_summed(c, 0, c->dy[0]);
  if (c->need_dx[1]) set_summed(c, 1, un(c, "Neg", c->dy[0]));
  return FLOE_OK;
}

static floe_code grad_mul(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (c->need_dx[0]) set_summed(c, 0, bin(c, "Mul", c->dy[0], in_(c, 1)));
  if (c->need_dx[1]) set_summed(c, 1, bin(c, "Mul", c->dy[0], in_(c, 0)));
  return FLOE_OK;
}

/* z = x / y: dx = dy / y, dy_ = -dy * z / y. */
static floe_code grad_div(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (c->need_dx[0]) set_summed(c, 0, bin(c, "Div", c->dy[0], in_(c, 1)));
  if (c->need_dx[1])
    set_summed(c, 1, un(c, "Neg", bin(c, "Div", bin(c, "Mul", c->dy[0], out_(c, 0)), in_(c, 1))));
  return FLOE_OK;
}

/* z = x^y: dx = dy * y * x^(y-1); dy_ = dy * z * log(x) where x > 0, else 0 (TF's choice:
 * the real power is not differentiable in y there). */
static floe_code grad_pow(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0), y = in_(c, 1), dy = c->dy[0];
  if (c->need_dx[0]) {
    FloeOutput pw = bin(c, "Pow", x, bin(c, "Sub", y, scalar(c, 1)));
    set_summed(c, 0, bin(c, "Mul", dy, bin(c, "Mul", y, pw)));
  }
  if (c->need_dx[1]) {
    FloeOutput pos = bin(c, "Greater", x, scalar(c, 0));
    FloeOutput logx = un(c, "Log", select3(c, pos, x, scalar(c, 1))); /* log 1 = 0 elsewhere */
    set_summed(c, 1, bin(c, "Mul", dy, bin(c, "Mul", out_(c, 0), logx)));
  }
  return FLOE_OK;
}

/* The gradient goes to x where cmp(x, y) holds (ties go to x, as in TF), else to y. */
static floe_code grad_minmax(FloeGradCtx *c, const char *cmp) {
  FloeOutput mask = bin(c, cmp, in_(c, 0), in_(c, 1));
  FloeOutput zero = scalar(c, 0);
  if (c->need_dx[0]) set_summed(c, 0, select3(c, mask, c->dy[0], zero));
  if (c->need_dx[1]) set_summed(c, 1, select3(c, mask, zero, c->dy[0]));
  return FLOE_OK;
}
static floe_code grad_maximum(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return grad_minmax(c, "GreaterEqual");
}
static floe_code grad_minimum(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return grad_minmax(c, "LessEqual");
}

/* ---- unary ---- */

static floe_code grad_neg(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = un(c, "Neg", c->dy[0]);
  return FLOE_OK;
}
static floe_code grad_identity(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = c->dy[0];
  return FLOE_OK;
}
static floe_code grad_abs(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Mul", c->dy[0], un(c, "Sign", in_(c, 0)));
  return FLOE_OK;
}
static floe_code grad_square(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Mul", c->dy[0], bin(c, "Mul", in_(c, 0), scalar(c, 2)));
  return FLOE_OK;
}
static floe_code grad_exp(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Mul", c->dy[0], out_(c, 0));
  return FLOE_OK;
}
static floe_code grad_log(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Div", c->dy[0], in_(c, 0));
  return FLOE_OK;
}
static floe_code grad_sqrt(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "SqrtGrad", out_(c, 0), c->dy[0]);
  return FLOE_OK;
}
static floe_code grad_rsqrt(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "RsqrtGrad", out_(c, 0), c->dy[0]);
  return FLOE_OK;
}
static floe_code grad_sin(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Mul", c->dy[0], un(c, "Cos", in_(c, 0)));
  return FLOE_OK;
}
static floe_code grad_cos(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = un(c, "Neg", bin(c, "Mul", c->dy[0], un(c, "Sin", in_(c, 0))));
  return FLOE_OK;
}

/* SqrtGrad(y, g) = g * 0.5 / y: d g = SqrtGrad(y, dz); d y = -dz * z / y. */
static floe_code grad_sqrt_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = in_(c, 0), dz = c->dy[0];
  if (c->need_dx[0]) c->dx[0] = un(c, "Neg", bin(c, "Div", bin(c, "Mul", dz, out_(c, 0)), y));
  if (c->need_dx[1]) c->dx[1] = bin(c, "SqrtGrad", y, dz);
  return FLOE_OK;
}

/* RsqrtGrad(y, g) = -0.5 g y^3: d g = RsqrtGrad(y, dz); d y = -1.5 dz g y^2. */
static floe_code grad_rsqrt_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = in_(c, 0), g = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0])
    c->dx[0] =
        bin(c, "Mul", bin(c, "Mul", dz, g), bin(c, "Mul", un(c, "Square", y), scalar(c, -1.5)));
  if (c->need_dx[1]) c->dx[1] = bin(c, "RsqrtGrad", y, dz);
  return FLOE_OK;
}

/* Every summand gets the whole gradient (no broadcasting in AddN). */
static floe_code grad_addn(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  for (int i = 0; i < c->node->num_inputs; i++)
    if (c->need_dx[i]) c->dx[i] = c->dy[0];
  return FLOE_OK;
}

/* Select(cond, t, e) (all three broadcast): the gradient goes to t where cond, else to e. */
static floe_code grad_select(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput zero = floe__grad_scalar(c, floe__grad_input_dtype(c, 1), 0);
  if (c->need_dx[1]) set_summed(c, 1, select3(c, in_(c, 0), c->dy[0], zero));
  if (c->need_dx[2]) set_summed(c, 2, select3(c, in_(c, 0), zero, c->dy[0]));
  return FLOE_OK;
}

/* Only float -> float casts pass a gradient (cast back); others stop it. */
static floe_code grad_cast(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeDType src = dtype0(c), dst = floe_node_output_dtype((FloeNode *)c->node, 0);
  uint32_t fl = FLOE_DTYPES_FLOAT;
  if ((fl & FLOE_DTYPE_BIT(src)) && (fl & FLOE_DTYPE_BIT(dst)))
    c->dx[0] = src == dst ? c->dy[0] : floe__grad_cast(c, c->dy[0], src);
  return FLOE_OK;
}

/* ---- reductions (input, axis; keep_dims) ---- */

/* ExpandReduced(g, shape(input), axis) with the forward node's keep_dims. */
static FloeOutput expand_reduced(FloeGradCtx *c, FloeOutput g, bool mean) {
  FloeNodeBuilder *b = floe__grad_begin(c, "ExpandReduced");
  floe_node_add_input(b, g);
  floe_node_add_input(b, floe__grad_shape_of(c, in_(c, 0)));
  floe_node_add_input(b, in_(c, 1));
  floe__grad_copy_attr(c, b, "keep_dims");
  floe_node_set_attr_bool(b, "mean", mean);
  return floe_out(floe_node_finish(b), 0);
}

/* op(x, forward axis) with the forward node's keep_dims. */
static FloeOutput reduce_like(FloeGradCtx *c, const char *op, FloeOutput x) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_add_input(b, in_(c, 1));
  floe__grad_copy_attr(c, b, "keep_dims");
  return floe_out(floe_node_finish(b), 0);
}

static floe_code grad_sum(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = expand_reduced(c, c->dy[0], false);
  return FLOE_OK;
}
static floe_code grad_mean(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = expand_reduced(c, c->dy[0], true);
  return FLOE_OK;
}

/* Max / Min: the gradient is shared equally by the elements equal to the extreme (TF). */
static floe_code grad_reduce_extreme(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0);
  FloeOutput hit =
      floe__grad_cast(c, bin(c, "Equal", x, expand_reduced(c, out_(c, 0), false)), dtype0(c));
  FloeOutput share = bin(c, "Div", c->dy[0], reduce_like(c, "Sum", hit));
  c->dx[0] = bin(c, "Mul", expand_reduced(c, share, false), hit);
  return FLOE_OK;
}

/* Prod: d y / d x_i is the product of the other elements of x_i's group, computed without
 * dividing by x_i so zeros are exact: with p the product of the group's non-zero elements
 * and nz its number of zeros, the derivative is p / x_i when nz = 0, p at the zero when
 * nz = 1 (0 at the others), and 0 everywhere when nz >= 2. */
static floe_code grad_prod(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0), zero = scalar(c, 0), one = scalar(c, 1);
  FloeOutput is_zero = bin(c, "Equal", x, zero);
  FloeOutput zf = floe__grad_cast(c, is_zero, dtype0(c));
  FloeOutput x_safe = select3(c, is_zero, one, x);
  FloeOutput nz = expand_reduced(c, reduce_like(c, "Sum", zf), false);
  FloeOutput p = reduce_like(c, "Prod", x_safe);
  FloeOutput factor = select3(c, bin(c, "Equal", nz, zero), bin(c, "Div", one, x_safe),
                              select3(c, bin(c, "Equal", nz, one), zf, zero));
  c->dx[0] = bin(c, "Mul", expand_reduced(c, bin(c, "Mul", c->dy[0], p), false), factor);
  return FLOE_OK;
}

/* ---- matrix products ---- */

static FloeOutput matmul(FloeGradCtx *c, const char *op, const char *ta_name, const char *tb_name,
                         FloeOutput a, FloeOutput b_, bool ta, bool tb) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  floe_node_add_input(b, a);
  floe_node_add_input(b, b_);
  floe_node_set_attr_bool(b, ta_name, ta);
  floe_node_set_attr_bool(b, tb_name, tb);
  return floe_out(floe_node_finish(b), 0);
}

static bool attr_bool(const FloeGradCtx *c, const char *name) {
  const FloeAttrValue *v = floe__attrs_get(&c->node->attrs, name);
  return v && v->kind == FLOE_ATTR_BOOL && v->u.b;
}

/* C = op(A) op(B) with op a transpose or not (TF's MatMul gradient table). */
static void matmul_grads(FloeGradCtx *c, const char *op, const char *ta_name, const char *tb_name,
                         bool batch) {
  bool ta = attr_bool(c, ta_name), tb = attr_bool(c, tb_name);
  FloeOutput a = in_(c, 0), b = in_(c, 1), dy = c->dy[0], da = {NULL, 0}, db = {NULL, 0};
  if (!ta && !tb) {
    if (c->need_dx[0]) da = matmul(c, op, ta_name, tb_name, dy, b, false, true);
    if (c->need_dx[1]) db = matmul(c, op, ta_name, tb_name, a, dy, true, false);
  } else if (!ta && tb) {
    if (c->need_dx[0]) da = matmul(c, op, ta_name, tb_name, dy, b, false, false);
    if (c->need_dx[1]) db = matmul(c, op, ta_name, tb_name, dy, a, true, false);
  } else if (ta && !tb) {
    if (c->need_dx[0]) da = matmul(c, op, ta_name, tb_name, b, dy, false, true);
    if (c->need_dx[1]) db = matmul(c, op, ta_name, tb_name, a, dy, false, false);
  } else {
    if (c->need_dx[0]) da = matmul(c, op, ta_name, tb_name, b, dy, true, true);
    if (c->need_dx[1]) db = matmul(c, op, ta_name, tb_name, dy, a, true, true);
  }
  /* Broadcast batch dims of BatchMatMul are summed back to each operand's. */
  if (c->need_dx[0]) c->dx[0] = batch ? floe__grad_sum_to(c, da, a) : da;
  if (c->need_dx[1]) c->dx[1] = batch ? floe__grad_sum_to(c, db, b) : db;
}

static floe_code grad_matmul(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  matmul_grads(c, "MatMul", "transpose_a", "transpose_b", false);
  return FLOE_OK;
}
static floe_code grad_batch_matmul(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  matmul_grads(c, "BatchMatMul", "adj_x", "adj_y", true);
  return FLOE_OK;
}

floe_code floe__grads_register_math(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn;
  } table[] = {
      {"Add", grad_add},
      {"Sub", grad_sub},
      {"Mul", grad_mul},
      {"Div", grad_div},
      {"Pow", grad_pow},
      {"Maximum", grad_maximum},
      {"Minimum", grad_minimum},
      {"Neg", grad_neg},
      {"Abs", grad_abs},
      {"Square", grad_square},
      {"Exp", grad_exp},
      {"Log", grad_log},
      {"Sqrt", grad_sqrt},
      {"Rsqrt", grad_rsqrt},
      {"Sin", grad_sin},
      {"Cos", grad_cos},
      {"SqrtGrad", grad_sqrt_grad},
      {"RsqrtGrad", grad_rsqrt_grad},
      {"AddN", grad_addn},
      {"Select", grad_select},
      {"Cast", grad_cast},
      {"Identity", grad_identity},
      {"Sum", grad_sum},
      {"Mean", grad_mean},
      {"Max", grad_reduce_extreme},
      {"Min", grad_reduce_extreme},
      {"Prod", grad_prod},
      {"MatMul", grad_matmul},
      {"BatchMatMul", grad_batch_matmul},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
