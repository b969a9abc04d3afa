/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_train.c - ai.onnx.preview.training (Adagrad, Adam, Momentum: one optimiser step
 * on many tensors as elementwise formulas; Gradient through floe_gradients) and the random
 * ops (Bernoulli, RandomUniformLike, RandomNormalLike) onto Floe's random ops.
 *
 * The optimisers' formulas are ONNX's (onnx/defs/training/defs.cc): R is the learning rate,
 * T the update count (int64), then X (weights), G (gradients) and the optimiser's state per
 * tensor; the outputs are the new weights then the new state. They are computed in X's
 * dtype. */
#include <math.h>
#include <string.h>

#include "floe/floe_train.h"
#include "onnx_internal.h"

static FloeOutput add(OxCtx *c, FloeOutput a, FloeOutput b) { return ox_binary(c, "Add", a, b); }
static FloeOutput sub(OxCtx *c, FloeOutput a, FloeOutput b) { return ox_binary(c, "Sub", a, b); }
static FloeOutput mul(OxCtx *c, FloeOutput a, FloeOutput b) { return ox_binary(c, "Mul", a, b); }
static FloeOutput divide(OxCtx *c, FloeOutput a, FloeOutput b) { return ox_binary(c, "Div", a, b); }

/* R and T checked and taken to dtype dt (scalars). */
static floe_code step_scalars(OxCtx *c, const FloeOutput *in, int nin, int per, int *n,
                              FloeOutput *r, FloeOutput *t, FloeOutput *t_pos) {
  if (nin < 2 + per || (nin - 2) % per)
    return ox_fail(c, FLOE_INVALID_ARGUMENT,
                   "expects R, T and then %d groups of tensors of one count; got %d inputs", per,
                   nin);
  *n = (nin - 2) / per;
  for (int i = 0; i < nin; i++)
    if (!in[i].node) return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is not given", i);
  FloeDType dt = ox_dtype(in[2]);
  if (dt != FLOE_F32 && dt != FLOE_F64)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "X is %s; the optimisers take float or double",
                   floe_dtype_name(dt));
  if (ox_dtype(in[1]) != FLOE_I64)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "T is %s, not int64", floe_dtype_name(ox_dtype(in[1])));
  for (int i = 2; i < nin; i++)
    if (ox_dtype(in[i]) != dt)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is %s; X is %s", i,
                     floe_dtype_name(ox_dtype(in[i])), floe_dtype_name(dt));
  *r = ox_cast(c, in[0], dt);
  *t = ox_cast(c, in[1], dt);
  if (t_pos) *t_pos = ox_binary(c, "Greater", in[1], ox_scalar_i64(c, 0));
  return ox_check(c);
}

/* norm_coefficient * x + g */
static FloeOutput regularized(OxCtx *c, FloeOutput x, FloeOutput g, float norm) {
  if (norm == 0.0f) return g;
  return add(c, mul(c, ox_scalar(c, ox_dtype(x), norm), x), g);
}

/* Adagrad: r = R / (1 + T * decay_factor); g' = norm_coefficient * X + G;
 * H_new = H + g'^2; X_new = X - r * g' / (sqrt(H_new) + epsilon). */
static floe_code map_adagrad(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                             FloeOutput *out, int nout) {
  int k;
  FloeOutput r, t;
  floe_code rc = step_scalars(c, in, nin, 3, &k, &r, &t, NULL);
  if (rc != FLOE_OK) return rc;
  if (nout != 2 * k)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%d outputs for %d tensors (X_new and H_new each)",
                   nout, k);
  FloeDType dt = ox_dtype(in[2]);
  float decay = ox_float(n, "decay_factor", 0), eps = ox_float(n, "epsilon", 1e-6f),
        norm = ox_float(n, "norm_coefficient", 0);
  r = divide(c, r, add(c, ox_scalar(c, dt, 1), mul(c, t, ox_scalar(c, dt, decay))));
  for (int i = 0; i < k; i++) {
    FloeOutput x = in[2 + i], g = regularized(c, x, in[2 + k + i], norm), h = in[2 + 2 * k + i];
    FloeOutput h_new = add(c, h, mul(c, g, g));
    FloeOutput denom = add(c, ox_unary(c, "Sqrt", h_new), ox_scalar(c, dt, eps));
    out[i] = sub(c, x, divide(c, mul(c, r, g), denom));
    out[k + i] = h_new;
  }
  return ox_check(c);
}

/* Momentum: g' = norm_coefficient * X + G; b = T > 0 ? beta : 1; V_new = alpha * V + b * g';
 * standard: X_new = X - R * V_new; nesterov: X_new = X - R * (g' + alpha * V_new). */
static floe_code map_momentum(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                              FloeOutput *out, int nout) {
  int k;
  FloeOutput r, t, t_pos;
  floe_code rc = step_scalars(c, in, nin, 3, &k, &r, &t, &t_pos);
  if (rc != FLOE_OK) return rc;
  if (nout != 2 * k)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%d outputs for %d tensors (X_new and V_new each)",
                   nout, k);
  static const char *const required[] = {"alpha", "beta", "norm_coefficient", "mode"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(required); i++)
    if (!ox_attr(n, required[i]))
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "the attribute '%s' is required", required[i]);
  char mode[32];
  ox_str(n, "mode", "", mode, sizeof mode);
  int nesterov = !strcmp(mode, "nesterov");
  if (!nesterov && strcmp(mode, "standard"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "mode '%s' is neither 'standard' nor 'nesterov'",
                   mode);
  FloeDType dt = ox_dtype(in[2]);
  FloeOutput alpha = ox_scalar(c, dt, ox_float(n, "alpha", 0));
  float norm = ox_float(n, "norm_coefficient", 0);
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, t_pos);
  floe_node_add_input(b, ox_scalar(c, dt, ox_float(n, "beta", 0)));
  floe_node_add_input(b, ox_scalar(c, dt, 1));
  FloeOutput beta = ox_finish(c, b);
  for (int i = 0; i < k; i++) {
    FloeOutput x = in[2 + i], g = regularized(c, x, in[2 + k + i], norm), v = in[2 + 2 * k + i];
    FloeOutput v_new = add(c, mul(c, alpha, v), mul(c, beta, g));
    FloeOutput step = nesterov ? add(c, g, mul(c, alpha, v_new)) : v_new;
    out[i] = sub(c, x, mul(c, r, step));
    out[k + i] = v_new;
  }
  return ox_check(c);
}

/* Adam: g' = norm_coefficient * X + G; V_new = alpha * V + (1 - alpha) * g';
 * H_new = beta * H + (1 - beta) * g'^2; r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
 * X_new = (1 - norm_coefficient_post) * (X - r * V_new / (sqrt(H_new) + epsilon)). */
static floe_code map_adam(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                          FloeOutput *out, int nout) {
  int k;
  FloeOutput r, t, t_pos;
  floe_code rc = step_scalars(c, in, nin, 4, &k, &r, &t, &t_pos);
  if (rc != FLOE_OK) return rc;
  if (nout != 3 * k)
    return ox_fail(c, FLOE_INVALID_ARGUMENT,
                   "%d outputs for %d tensors (X_new, V_new and H_new each)", nout, k);
  FloeDType dt = ox_dtype(in[2]);
  float a = ox_float(n, "alpha", 0.9f), be = ox_float(n, "beta", 0.999f),
        eps = ox_float(n, "epsilon", 1e-6f), norm = ox_float(n, "norm_coefficient", 0),
        post = ox_float(n, "norm_coefficient_post", 0);
  FloeOutput one = ox_scalar(c, dt, 1), alpha = ox_scalar(c, dt, a), beta = ox_scalar(c, dt, be);
  FloeOutput bias = divide(c, ox_unary(c, "Sqrt", sub(c, one, ox_binary(c, "Pow", beta, t))),
                           sub(c, one, ox_binary(c, "Pow", alpha, t)));
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, t_pos);
  floe_node_add_input(b, mul(c, r, bias));
  floe_node_add_input(b, r);
  FloeOutput r_adj = ox_finish(c, b);
  for (int i = 0; i < k; i++) {
    FloeOutput x = in[2 + i], g = regularized(c, x, in[2 + k + i], norm);
    FloeOutput v = in[2 + 2 * k + i], h = in[2 + 3 * k + i];
    FloeOutput v_new = add(c, mul(c, alpha, v), mul(c, ox_scalar(c, dt, 1.0f - a), g));
    FloeOutput h_new = add(c, mul(c, beta, h), mul(c, ox_scalar(c, dt, 1.0f - be), mul(c, g, g)));
    FloeOutput denom = add(c, ox_unary(c, "Sqrt", h_new), ox_scalar(c, dt, eps));
    FloeOutput x_new = sub(c, x, mul(c, r_adj, divide(c, v_new, denom)));
    out[i] = post != 0.0f ? mul(c, ox_scalar(c, dt, 1.0f - post), x_new) : x_new;
    out[k + i] = v_new;
    out[2 * k + i] = h_new;
  }
  return ox_check(c);
}

/* Gradient: d y / d xs[i], y and xs named by attributes (the inputs are xs, then zs). */
static floe_code map_gradient(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                              FloeOutput *out, int nout) {
  const Onnx__AttributeProto *xs = ox_attr(n, "xs");
  char yname[512];
  if (!xs || !ox_str(n, "y", NULL, yname, sizeof yname))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the attributes 'xs' and 'y' are required");
  int nx = (int)xs->n_strings;
  if (nx != nout || nin < nx)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%d xs, %d inputs and %d outputs: the inputs are "
                   "xs then zs and there is one output per x", nx, nin, nout);
  FloeOutput y = ox_lookup(c, yname);
  if (!y.node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "y '%s' is not a value computed before the node",
                   yname);
  for (int i = 0; i < nx; i++)
    if (!in[i].node) return ox_fail(c, FLOE_INVALID_ARGUMENT, "x %d is not given", i);
  FloeStatus *st = floe_status_new();
  if (!st) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  floe_code rc = floe_gradients(c->g, &y, 1, in, nx, NULL, out, st);
  if (rc != FLOE_OK) rc = ox_fail(c, rc, "%s", floe_status_message(st));
  floe_status_free(st);
  /* An x y does not depend on has a zero gradient. */
  for (int i = 0; rc == FLOE_OK && i < nx; i++)
    if (!out[i].node) out[i] = ox_unary(c, "ZerosLike", in[i]);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

/* ------------------------------------------------------------------------------------ */
/* Random ops. ONNX's test outputs come from NumPy's generator, which Floe's does not
 * reproduce: their cases fail by design; the mappings follow the specification. */

/* A uniform [0, 1) or standard normal tensor of x's shape; seed: the attribute when given
 * (a fixed stream), else a fresh one. */
static FloeOutput random_like(OxCtx *c, const Onnx__NodeProto *n, const char *op, FloeOutput x,
                              FloeDType dt) {
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput shape = ox_finish(c, b);
  b = ox_begin(c, op);
  floe_node_add_input(b, shape);
  floe_node_set_attr_type(b, "dtype", dt);
  const Onnx__AttributeProto *seed = ox_attr(n, "seed");
  if (seed && seed->has_f) {
    /* Floe's (seed, seed2) = (0, 0) draws a fresh seed; ONNX's seed 0 is a fixed one. */
    /* a float seed: its integer part when it has one, else its bits (NaN, huge) */
    float f = seed->f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    floe_node_set_attr_int(b, "seed", f == f && fabsf(f) < 9.0e18f ? (int64_t)f : (int64_t)bits);
    floe_node_set_attr_int(b, "seed2", 1);
  }
  return ox_finish(c, b);
}

/* The dtype attribute (an ONNX type) or dflt; FLOE_DTYPE_INVALID after failing. */
static FloeDType dtype_attr(OxCtx *c, const Onnx__NodeProto *n, FloeDType dflt) {
  const Onnx__AttributeProto *a = ox_attr(n, "dtype");
  if (!a || !a->has_i) return dflt;
  FloeDType dt = floe__onnx_dtype((int32_t)a->i);
  if (dt == FLOE_DTYPE_INVALID)
    ox_fail(c, FLOE_UNIMPLEMENTED, "dtype %s is not a Floe dtype",
            floe__onnx_dtype_name((int32_t)a->i));
  return dt;
}

static int is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* RandomUniformLike: low + (high - low) * U; RandomNormalLike: mean + scale * N. */
static floe_code map_random_like(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                 int nin, FloeOutput *out, int nout) {
  if (nin < 1 || !in[0].node || nout < 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "expects one input and one output");
  FloeDType dt = dtype_attr(c, n, ox_dtype(in[0]));
  if (dt == FLOE_DTYPE_INVALID) return floe_status_code(c->st);
  if (!is_float(dt))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the output dtype is %s; it must be a float type",
                   floe_dtype_name(dt));
  int uniform = !strcmp(n->op_type, "RandomUniformLike");
  float lo = uniform ? ox_float(n, "low", 0) : ox_float(n, "mean", 0);
  float span = uniform ? ox_float(n, "high", 1) - lo : ox_float(n, "scale", 1);
  FloeOutput r = random_like(c, n, uniform ? "RandomUniform" : "RandomNormal", in[0], dt);
  out[0] = add(c, mul(c, r, ox_scalar(c, dt, span)), ox_scalar(c, dt, lo));
  return ox_check(c);
}

/* Bernoulli: 1 with probability input (a float tensor of probabilities), else 0. */
static floe_code map_bernoulli(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                               int nin, FloeOutput *out, int nout) {
  if (nin < 1 || !in[0].node || nout < 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "expects one input and one output");
  FloeDType pdt = ox_dtype(in[0]);
  if (!is_float(pdt))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the probabilities are %s, not a float type",
                   floe_dtype_name(pdt));
  FloeDType dt = dtype_attr(c, n, pdt);
  if (dt == FLOE_DTYPE_INVALID) return floe_status_code(c->st);
  FloeOutput u = random_like(c, n, "RandomUniform", in[0], pdt);
  out[0] = ox_cast(c, ox_binary(c, "Less", u, in[0]), dt);
  return ox_check(c);
}

const OxOp floe__onnx_ops_train[] = {
    {"ai.onnx.preview.training", "Adagrad", map_adagrad},
    {"ai.onnx.preview.training", "Momentum", map_momentum},
    {"ai.onnx.preview.training", "Adam", map_adam},
    {"ai.onnx.preview.training", "Gradient", map_gradient},
    {"", "Bernoulli", map_bernoulli},
    {"", "RandomUniformLike", map_random_like},
    {"", "RandomNormalLike", map_random_like},
    {NULL, NULL, NULL},
};
