/* SPDX-License-Identifier: Apache-2.0 */
/* grad_math_signal.c - gradients of ops_math_signal.def's differentiable elementwise ops
 * (Erf, the inverse and hyperbolic trigonometric functions, FloorMod, TruncateMod), and the
 * registration of its ops through which no gradient flows (rounding, predicates, shifts, and
 * the window and mel matrices, which depend on their inputs through integers or floors).
 * MatrixDeterminant, DFT and STFT have no gradient yet: autodiff through them fails naming
 * the op. */
#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }
static FloeOutput out_(const FloeGradCtx *c, int j) { return floe_out((FloeNode *)c->node, j); }
static FloeOutput bin(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b) {
  return floe__grad_binary(c, op, a, b);
}
static FloeOutput un(FloeGradCtx *c, const char *op, FloeOutput a) {
  return floe__grad_unary(c, op, a);
}
static FloeOutput scalar(FloeGradCtx *c, double v) {
  return floe__grad_scalar(c, floe__grad_input_dtype(c, 0), v);
}
static FloeOutput square_x(FloeGradCtx *c) { return un(c, "Square", in_(c, 0)); }

/* dx = dy * f'(x) for the unary ops below. */
static floe_code scale_dy(FloeGradCtx *c, FloeOutput fprime) {
  c->dx[0] = bin(c, "Mul", c->dy[0], fprime);
  return FLOE_OK;
}

/* erf'(x) = 2 / sqrt(pi) exp(-x^2) */
static floe_code grad_erf(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput e = un(c, "Exp", un(c, "Neg", square_x(c)));
  return scale_dy(c, bin(c, "Mul", e, scalar(c, 1.12837916709551257390)));
}
/* tan' = 1 + tan^2 */
static floe_code grad_tan(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, bin(c, "Add", un(c, "Square", out_(c, 0)), scalar(c, 1)));
}
/* asin' = 1 / sqrt(1 - x^2), acos' = -asin' */
static floe_code grad_asin(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Rsqrt", bin(c, "Sub", scalar(c, 1), square_x(c))));
}
static floe_code grad_acos(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Neg", un(c, "Rsqrt", bin(c, "Sub", scalar(c, 1), square_x(c)))));
}
/* atan' = 1 / (1 + x^2), atanh' = 1 / (1 - x^2) */
static floe_code grad_atan(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Div", c->dy[0], bin(c, "Add", scalar(c, 1), square_x(c)));
  return FLOE_OK;
}
static floe_code grad_atanh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Div", c->dy[0], bin(c, "Sub", scalar(c, 1), square_x(c)));
  return FLOE_OK;
}
static floe_code grad_sinh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Cosh", in_(c, 0)));
}
static floe_code grad_cosh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Sinh", in_(c, 0)));
}
/* asinh' = 1 / sqrt(x^2 + 1), acosh' = 1 / sqrt(x^2 - 1) */
static floe_code grad_asinh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Rsqrt", bin(c, "Add", square_x(c), scalar(c, 1))));
}
static floe_code grad_acosh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return scale_dy(c, un(c, "Rsqrt", bin(c, "Sub", square_x(c), scalar(c, 1))));
}

/* z = x - q(x / y) y with q floor or truncation, piecewise constant: dx = dz, dy = -dz q;
 * each summed back to its operand's shape (both broadcast). */
static floe_code mod_grads(FloeGradCtx *c, int trunc) {
  if (c->need_dx[0]) c->dx[0] = floe__grad_sum_to(c, c->dy[0], in_(c, 0));
  if (c->need_dx[1]) {
    FloeOutput r = bin(c, "Div", in_(c, 0), in_(c, 1));
    FloeOutput q = trunc ? bin(c, "Mul", un(c, "Sign", r), un(c, "Floor", un(c, "Abs", r)))
                         : un(c, "Floor", r);
    c->dx[1] = floe__grad_sum_to(c, un(c, "Neg", bin(c, "Mul", c->dy[0], q)), in_(c, 1));
  }
  return FLOE_OK;
}
static floe_code grad_floor_mod(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return mod_grads(c, 0);
}
static floe_code grad_truncate_mod(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  return mod_grads(c, 1);
}

floe_code floe__grads_register_math_signal(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn; /* NULL: not differentiable */
  } table[] = {
      {"Erf", grad_erf},         {"Tan", grad_tan},
      {"Asin", grad_asin},       {"Acos", grad_acos},
      {"Atan", grad_atan},       {"Sinh", grad_sinh},
      {"Cosh", grad_cosh},       {"Asinh", grad_asinh},
      {"Acosh", grad_acosh},     {"Atanh", grad_atanh},
      {"FloorMod", grad_floor_mod}, {"TruncateMod", grad_truncate_mod},
      {"Ceil", NULL},            {"Round", NULL},
      {"IsNan", NULL},           {"IsInf", NULL},
      {"LeftShift", NULL},       {"RightShift", NULL},
      {"CosineSumWindow", NULL}, {"MelWeightMatrix", NULL},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
