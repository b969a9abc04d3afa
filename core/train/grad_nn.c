/* SPDX-License-Identifier: Apache-2.0 */
/* grad_nn.c - gradient functions of the activations, softmax, losses, bias, convolution and
 * pooling ops, and of their gradient ops (second derivatives) where Floe has the ops to
 * express them. */
#include <math.h>
#include <string.h>

#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }
static FloeOutput out_(const FloeGradCtx *c, int j) { return floe_out((FloeNode *)c->node, j); }
static FloeOutput bin(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b) {
  return floe__grad_binary(c, op, a, b);
}
static FloeOutput un(FloeGradCtx *c, const char *op, FloeOutput a) {
  return floe__grad_unary(c, op, a);
}
/* A scalar constant of the dtype of the forward node's (float) input `input`. */
static FloeOutput scalar_of(FloeGradCtx *c, int input, double v) {
  return floe__grad_scalar(c, floe__grad_input_dtype(c, input), v);
}

/* op(a, b) with the forward node's attributes `attrs` (NULL-terminated) copied. */
static FloeOutput op2_attrs(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b,
                            const char *const *attrs) {
  return floe__grad_op(c, op, (FloeOutput[]){a, b}, 2, attrs);
}

static const char *const alpha_attr[] = {"alpha", NULL};
static const char *const approx_attr[] = {"approximate", NULL};
static const char *const format_attr[] = {"data_format", NULL};
static const char *const conv_attrs[] = {"strides", "padding", "data_format", "dilations", NULL};
static const char *const pool_attrs[] = {"ksize", "strides", "padding", "data_format", NULL};

/* ---- activations: TF's gradient ops ---- */

/* Relu, Relu6: the output is positive (below 6) exactly where the input is, so the grad
 * op reads y and x can be freed early. */
static floe_code grad_relu(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "ReluGrad", c->dy[0], out_(c, 0));
  return FLOE_OK;
}
static floe_code grad_relu6(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "Relu6Grad", c->dy[0], out_(c, 0));
  return FLOE_OK;
}
/* alpha may be negative: the sign of y need not be x's, so read x. */
static floe_code grad_leaky_relu(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op2_attrs(c, "LeakyReluGrad", c->dy[0], in_(c, 0), alpha_attr);
  return FLOE_OK;
}
static floe_code grad_elu(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op2_attrs(c, "EluGrad", c->dy[0], out_(c, 0), alpha_attr);
  return FLOE_OK;
}
static floe_code grad_gelu(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op2_attrs(c, "GeluGrad", c->dy[0], in_(c, 0), approx_attr);
  return FLOE_OK;
}
static floe_code grad_sigmoid(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "SigmoidGrad", out_(c, 0), c->dy[0]);
  return FLOE_OK;
}
static floe_code grad_tanh(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "TanhGrad", out_(c, 0), c->dy[0]);
  return FLOE_OK;
}
static floe_code grad_softplus(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = bin(c, "SoftplusGrad", c->dy[0], in_(c, 0));
  return FLOE_OK;
}

/* ---- softmax family ---- */

static FloeOutput sum_keep(FloeGradCtx *c, FloeOutput x, int64_t axis) {
  FloeNodeBuilder *b = floe__grad_begin(c, "Sum");
  floe_node_add_input(b, x);
  floe_node_add_input(b, floe__grad_i32_vec(c, &axis, 1));
  floe_node_set_attr_bool(b, "keep_dims", 1);
  return floe_out(floe_node_finish(b), 0);
}

static int64_t axis_attr(const FloeGradCtx *c) {
  const FloeAttrValue *v = floe__attrs_get(&c->node->attrs, "axis");
  return v && v->kind == FLOE_ATTR_INT ? v->u.i : -1;
}

/* y = softmax(x): dx = y * (dy - sum(dy * y)) along the axis. */
static floe_code grad_softmax(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = out_(c, 0), dy = c->dy[0];
  FloeOutput s = sum_keep(c, bin(c, "Mul", dy, y), axis_attr(c));
  c->dx[0] = bin(c, "Mul", y, bin(c, "Sub", dy, s));
  return FLOE_OK;
}

/* y = log_softmax(x): dx = dy - exp(y) * sum(dy) along the axis. */
static floe_code grad_log_softmax(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = out_(c, 0), dy = c->dy[0];
  FloeOutput s = sum_keep(c, dy, axis_attr(c));
  c->dx[0] = bin(c, "Sub", dy, bin(c, "Mul", un(c, "Exp", y), s));
  return FLOE_OK;
}

/* (Sparse)SoftmaxCrossEntropyWithLogits: loss [batch], backprop [batch, classes] =
 * softmax(features) - labels, which is d loss / d features when each row of labels sums to
 * 1 (TF's contract for the dense op; always so for sparse labels). */
static floe_code grad_xent(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  if (c->dy[1].node)
    return floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "floe_gradients: a gradient reaches output 1 ('backprop') of node "
                           "'%s' (%s): the second derivative of softmax cross-entropy is not "
                           "supported; differentiate the loss (output 0) only, or wrap "
                           "'%s:1' in StopGradient",
                           n->name, n->op->name, n->name);
  if (!c->dy[0].node) return FLOE_OK;
  FloeNodeBuilder *b = floe__grad_begin(c, "ExpandDims");
  floe_node_add_input(b, c->dy[0]);
  floe_node_set_attr_int(b, "axis", -1);
  FloeOutput dloss = floe_out(floe_node_finish(b), 0); /* [batch, 1] */
  if (c->need_dx[0]) c->dx[0] = bin(c, "Mul", dloss, out_(c, 1));
  /* Dense labels: d loss / d labels = -log_softmax(features). */
  if (n->num_inputs > 1 && c->need_dx[1])
    c->dx[1] = bin(c, "Mul", un(c, "Neg", dloss), un(c, "LogSoftmax", in_(c, 0)));
  return FLOE_OK;
}

/* ---- bias, convolution, pooling ---- */

/* BiasAddGrad(dy) with the node's data_format: the gradient at a bias. */
static FloeOutput bias_grad(FloeGradCtx *c, FloeOutput dy) {
  FloeNodeBuilder *b = floe__grad_begin(c, "BiasAddGrad");
  floe_node_add_input(b, dy);
  floe__grad_copy_attr(c, b, "data_format");
  return floe_out(floe_node_finish(b), 0);
}

static floe_code grad_bias_add(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (c->need_dx[0]) c->dx[0] = c->dy[0];
  if (c->need_dx[1]) c->dx[1] = bias_grad(c, c->dy[0]);
  return FLOE_OK;
}

/* op(a, b, d) with the forward node's attributes `attrs` copied. */
static FloeOutput op3_attrs(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b,
                            FloeOutput d, const char *const *attrs) {
  return floe__grad_op(c, op, (FloeOutput[]){a, b, d}, 3, attrs);
}

/* The gradients at a convolution's input and filter (inputs 0 and 1) for output gradient
 * dy: Conv2D's, and the fused convolution's after its ReLU. */
static void conv_grads(FloeGradCtx *c, FloeOutput dy) {
  FloeOutput x = in_(c, 0), f = in_(c, 1);
  if (c->need_dx[0])
    c->dx[0] = op3_attrs(c, "Conv2DBackpropInput", floe__grad_shape_of(c, x), f, dy, conv_attrs);
  if (c->need_dx[1])
    c->dx[1] = op3_attrs(c, "Conv2DBackpropFilter", x, floe__grad_shape_of(c, f), dy, conv_attrs);
}

static floe_code grad_conv2d(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  conv_grads(c, c->dy[0]);
  return FLOE_OK;
}

/* _FusedConv2DBiasRelu: through the Relu (its output), then as BiasAdd and Conv2D. */
static floe_code grad_fused_conv(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dz = bin(c, "ReluGrad", c->dy[0], out_(c, 0));
  conv_grads(c, dz);
  if (c->need_dx[2]) c->dx[2] = bias_grad(c, dz);
  return FLOE_OK;
}

static floe_code grad_max_pool(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op3_attrs(c, "MaxPoolGrad", in_(c, 0), out_(c, 0), c->dy[0], pool_attrs);
  return FLOE_OK;
}

static floe_code grad_avg_pool(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op2_attrs(c, "AvgPoolGrad", floe__grad_shape_of(c, in_(c, 0)), c->dy[0], pool_attrs);
  return FLOE_OK;
}

/* ---- second derivatives: the gradient ops are linear in their incoming gradient ---- */

/* ReluGrad, Relu6Grad, LeakyReluGrad (gradients, features): the same op of dz for
 * `gradients`; zero (almost everywhere) for `features`. */
static floe_code grad_masked_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (c->need_dx[0]) c->dx[0] = op2_attrs(c, c->node->op->name, c->dy[0], in_(c, 1), alpha_attr);
  if (c->need_dx[1]) c->dx[1] = un(c, "ZerosLike", in_(c, 1));
  return FLOE_OK;
}

/* EluGrad(g, y) = g * (y > 0 ? 1 : y + alpha): d g = EluGrad(dz, y); d y = dz * g where
 * y < 0 (where the factor y + alpha varies), else 0. */
static floe_code grad_elu_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput g = in_(c, 0), y = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0]) c->dx[0] = op2_attrs(c, "EluGrad", dz, y, alpha_attr);
  if (c->need_dx[1]) {
    FloeNodeBuilder *b = floe__grad_begin(c, "Select");
    floe_node_add_input(b, bin(c, "Less", y, scalar_of(c, 1, 0)));
    floe_node_add_input(b, bin(c, "Mul", dz, g));
    floe_node_add_input(b, scalar_of(c, 1, 0));
    c->dx[1] = floe_out(floe_node_finish(b), 0);
  }
  return FLOE_OK;
}

/* The second derivative of Gelu at x. Exact: phi(x) (2 - x^2) with phi the normal density.
 * Tanh form, u = k (x + a x^3), t = tanh(u): (1 - t^2) (u' + x u'' / 2 - x t u'^2). */
static FloeOutput gelu_second(FloeGradCtx *c, FloeOutput x, bool approximate) {
  FloeOutput x2 = un(c, "Square", x);
  if (!approximate) {
    FloeOutput phi = bin(c, "Mul", un(c, "Exp", bin(c, "Mul", x2, scalar_of(c, 1, -0.5))),
                         scalar_of(c, 1, 1.0 / sqrt(2.0 * M_PI)));
    return bin(c, "Mul", phi, bin(c, "Sub", scalar_of(c, 1, 2.0), x2));
  }
  const double k = sqrt(2.0 / M_PI), a = 0.044715;
  FloeOutput one = scalar_of(c, 1, 1.0);
  FloeOutput u = bin(c, "Mul", bin(c, "Mul", x, scalar_of(c, 1, k)),
                     bin(c, "Add", bin(c, "Mul", x2, scalar_of(c, 1, a)), one));
  FloeOutput t = un(c, "Tanh", u);
  FloeOutput sech2 = bin(c, "Sub", one, un(c, "Square", t));
  FloeOutput du = bin(c, "Mul", bin(c, "Add", bin(c, "Mul", x2, scalar_of(c, 1, 3 * a)), one),
                      scalar_of(c, 1, k));
  FloeOutput half_x_ddu = bin(c, "Mul", x2, scalar_of(c, 1, 3 * k * a)); /* x/2 * 6kax */
  FloeOutput inner = bin(c, "Sub", bin(c, "Add", du, half_x_ddu),
                         bin(c, "Mul", bin(c, "Mul", x, t), un(c, "Square", du)));
  return bin(c, "Mul", sech2, inner);
}

/* GeluGrad(g, x) = g * gelu'(x): d g = GeluGrad(dz, x); d x = dz * g * gelu''(x). */
static floe_code grad_gelu_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput g = in_(c, 0), x = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0]) c->dx[0] = op2_attrs(c, "GeluGrad", dz, x, approx_attr);
  if (c->need_dx[1]) {
    const FloeAttrValue *v = floe__attrs_get(&c->node->attrs, "approximate");
    bool approx = v && v->kind == FLOE_ATTR_BOOL && v->u.b;
    c->dx[1] = bin(c, "Mul", bin(c, "Mul", dz, g), gelu_second(c, x, approx));
  }
  return FLOE_OK;
}

/* SigmoidGrad(y, g) = g y (1 - y): d y = dz g (1 - 2y); d g = SigmoidGrad(y, dz). */
static floe_code grad_sigmoid_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = in_(c, 0), g = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0]) {
    FloeOutput f = bin(c, "Sub", scalar_of(c, 0, 1.0), bin(c, "Mul", y, scalar_of(c, 0, 2.0)));
    c->dx[0] = bin(c, "Mul", bin(c, "Mul", dz, g), f);
  }
  if (c->need_dx[1]) c->dx[1] = bin(c, "SigmoidGrad", y, dz);
  return FLOE_OK;
}

/* TanhGrad(y, g) = g (1 - y^2): d y = -2 dz g y; d g = TanhGrad(y, dz). */
static floe_code grad_tanh_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput y = in_(c, 0), g = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0])
    c->dx[0] = bin(c, "Mul", bin(c, "Mul", dz, g), bin(c, "Mul", y, scalar_of(c, 0, -2.0)));
  if (c->need_dx[1]) c->dx[1] = bin(c, "TanhGrad", y, dz);
  return FLOE_OK;
}

/* SoftplusGrad(g, x) = g sigmoid(x): d g = SoftplusGrad(dz, x); d x = dz g s (1 - s). */
static floe_code grad_softplus_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput g = in_(c, 0), x = in_(c, 1), dz = c->dy[0];
  if (c->need_dx[0]) c->dx[0] = bin(c, "SoftplusGrad", dz, x);
  if (c->need_dx[1]) c->dx[1] = bin(c, "SigmoidGrad", un(c, "Sigmoid", x), bin(c, "Mul", dz, g));
  return FLOE_OK;
}

/* BiasAddGrad sums over all but the channel dim; its adjoint broadcasts dz back along that
 * dim, which is BiasAdd onto zeros (any rank, either data format). */
static floe_code grad_bias_add_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = op2_attrs(c, "BiasAdd", un(c, "ZerosLike", in_(c, 0)), c->dy[0], format_attr);
  return FLOE_OK;
}

/* Conv2DBackpropInput(sizes, filter, dout) is linear in filter and in dout. */
static floe_code grad_conv_backprop_input(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput f = in_(c, 1), dout = in_(c, 2), dz = c->dy[0];
  if (c->need_dx[1])
    c->dx[1] =
        op3_attrs(c, "Conv2DBackpropFilter", dz, floe__grad_shape_of(c, f), dout, conv_attrs);
  if (c->need_dx[2]) c->dx[2] = op2_attrs(c, "Conv2D", dz, f, conv_attrs);
  return FLOE_OK;
}

/* Conv2DBackpropFilter(input, sizes, dout) is linear in input and in dout. */
static floe_code grad_conv_backprop_filter(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0), dout = in_(c, 2), dz = c->dy[0];
  if (c->need_dx[0])
    c->dx[0] = op3_attrs(c, "Conv2DBackpropInput", floe__grad_shape_of(c, x), dz, dout, conv_attrs);
  if (c->need_dx[2]) c->dx[2] = op2_attrs(c, "Conv2D", x, dz, conv_attrs);
  return FLOE_OK;
}

/* AvgPoolGrad(shape, g) is linear in g with adjoint AvgPool. */
static floe_code grad_avg_pool_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[1]) return FLOE_OK;
  c->dx[1] = floe__grad_op(c, "AvgPool", &c->dy[0], 1, pool_attrs);
  return FLOE_OK;
}

/* MaxPoolGrad's own gradient needs the argmax of each window again (TF's MaxPoolGradGrad),
 * which Floe has no op for. */
static floe_code grad_max_pool_grad(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s) lies between the xs and the ys: the "
                         "second derivative of MaxPool is not supported (no MaxPoolGradGrad "
                         "op); wrap the path in StopGradient",
                         n->name, n->op->name);
}

floe_code floe__grads_register_nn(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn;
  } table[] = {
      {"Relu", grad_relu},
      {"Relu6", grad_relu6},
      {"LeakyRelu", grad_leaky_relu},
      {"Elu", grad_elu},
      {"Gelu", grad_gelu},
      {"Sigmoid", grad_sigmoid},
      {"Tanh", grad_tanh},
      {"Softplus", grad_softplus},
      {"Softmax", grad_softmax},
      {"LogSoftmax", grad_log_softmax},
      {"SoftmaxCrossEntropyWithLogits", grad_xent},
      {"SparseSoftmaxCrossEntropyWithLogits", grad_xent},
      {"BiasAdd", grad_bias_add},
      {"Conv2D", grad_conv2d},
      {"MaxPool", grad_max_pool},
      {"AvgPool", grad_avg_pool},
      {"ReluGrad", grad_masked_grad},
      {"Relu6Grad", grad_masked_grad},
      {"LeakyReluGrad", grad_masked_grad},
      {"EluGrad", grad_elu_grad},
      {"GeluGrad", grad_gelu_grad},
      {"SigmoidGrad", grad_sigmoid_grad},
      {"TanhGrad", grad_tanh_grad},
      {"SoftplusGrad", grad_softplus_grad},
      {"BiasAddGrad", grad_bias_add_grad},
      {"Conv2DBackpropInput", grad_conv_backprop_input},
      {"Conv2DBackpropFilter", grad_conv_backprop_filter},
      {"AvgPoolGrad", grad_avg_pool_grad},
      {"MaxPoolGrad", grad_max_pool_grad},
      {"_FusedConv2DBiasRelu", grad_fused_conv},
      {"_FusedMaxPoolGradRelu", grad_max_pool_grad},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
