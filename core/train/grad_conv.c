/* SPDX-License-Identifier: Apache-2.0 */
/* grad_conv.c - gradient functions of the N-d convolution and pooling ops (ops_conv.def) and
 * of their gradient ops (ops_convgrad.def).
 *
 * Conv's input and filter gradients are ConvBackpropInputNd and ConvBackpropFilterNd with
 * Conv's attributes. ConvTranspose is the adjoint of a Conv (ops_conv.def), so its input
 * gradient is that Conv of dy and its filter gradient is ConvBackpropFilterNd with dy in the
 * input's role and x in out_backprop's; where ConvTranspose's paddings are negative or its
 * output padding exceeds the end padding, that Conv would need negative padding, so dy is
 * cropped first. Pool's gradient is PoolGrad; MaxPoolWithIndices's is PoolGrad MAX in
 * channels-first order, whose rule picks the very element each index names. */
#include <stdio.h>
#include <string.h>

#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }

static const char *const conv_attrs[] = {"strides", "padding",   "explicit_paddings",
                                         "data_format", "dilations", "groups", NULL};
static const char *const pool_attrs[] = {"pooling_type", "ksize", "strides", "dilations",
                                         "padding", "explicit_paddings", "data_format",
                                         "ceil_mode", "count_include_pad", NULL};

/* ---- Conv and its gradient ops: each is linear in each of its tensor operands ---- */

static floe_code grad_conv(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0), f = in_(c, 1), dy = c->dy[0];
  if (c->need_dx[0])
    c->dx[0] = floe__grad_op(c, "ConvBackpropInputNd",
                             (FloeOutput[]){floe__grad_shape_of(c, x), f, dy}, 3, conv_attrs);
  if (c->need_dx[1])
    c->dx[1] = floe__grad_op(c, "ConvBackpropFilterNd",
                             (FloeOutput[]){x, floe__grad_shape_of(c, f), dy}, 3, conv_attrs);
  return FLOE_OK;
}

/* ConvBackpropInputNd(sizes, filter, dout). */
static floe_code grad_conv_backprop_input(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput f = in_(c, 1), dout = in_(c, 2), dz = c->dy[0];
  if (c->need_dx[1])
    c->dx[1] = floe__grad_op(c, "ConvBackpropFilterNd",
                             (FloeOutput[]){dz, floe__grad_shape_of(c, f), dout}, 3, conv_attrs);
  if (c->need_dx[2]) c->dx[2] = floe__grad_op(c, "Conv", (FloeOutput[]){dz, f}, 2, conv_attrs);
  return FLOE_OK;
}

/* ConvBackpropFilterNd(input, sizes, dout). */
static floe_code grad_conv_backprop_filter(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput x = in_(c, 0), dout = in_(c, 2), dz = c->dy[0];
  if (c->need_dx[0])
    c->dx[0] = floe__grad_op(c, "ConvBackpropInputNd",
                             (FloeOutput[]){floe__grad_shape_of(c, x), dz, dout}, 3, conv_attrs);
  if (c->need_dx[2]) c->dx[2] = floe__grad_op(c, "Conv", (FloeOutput[]){x, dz}, 2, conv_attrs);
  return FLOE_OK;
}

/* ---- ConvTranspose ---- */

static const FloeAttrValue *list_attr(const FloeNode *n, const char *name) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, name);
  return v && v->kind == FLOE_ATTR_INT_LIST && v->u.ilist.n > 0 ? v : NULL;
}

/* The Conv whose adjoint a ConvTranspose node is: per input dim, its paddings (before,
 * after) as ConvTranspose's (before, after - output_padding), then split into what dy must
 * lose (crop, where those are negative) and what the Conv pads (the rest, >= 0). */
typedef struct Adjoint {
  int rank; /* -1 when no list attribute is given: then nothing is padded or cropped */
  int64_t pad[2 * FLOE_MAX_DIMS], crop_begin[FLOE_MAX_DIMS], crop_end[FLOE_MAX_DIMS];
  bool any_pad, any_crop;
} Adjoint;

static floe_code conv_transpose_adjoint(const FloeNode *n, Adjoint *a, FloeStatus *st) {
  memset(a, 0, sizeof *a);
  const FloeAttrValue *pads = NULL, *op = list_attr(n, "output_padding");
  const FloeAttrValue *p = floe__attrs_get(&n->attrs, "padding");
  if (p && p->kind == FLOE_ATTR_STRING && !strcmp(p->u.s, "EXPLICIT"))
    pads = list_attr(n, "explicit_paddings");
  a->rank = pads ? (int)pads->u.ilist.n / 2 : op ? (int)op->u.ilist.n : -1;
  if (a->rank > FLOE_MAX_DIMS || (pads && op && (size_t)a->rank != op->u.ilist.n))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "floe_gradients: node '%s' (ConvTranspose): explicit_paddings and "
                           "output_padding do not describe the same rank",
                           n->name);
  for (int i = 0; i < a->rank; i++) {
    int64_t before = pads ? pads->u.ilist.v[2 * i] : 0;
    int64_t after = (pads ? pads->u.ilist.v[2 * i + 1] : 0) - (op ? op->u.ilist.v[i] : 0);
    a->crop_begin[i] = before < 0 ? -before : 0;
    a->crop_end[i] = after < 0 ? -after : 0;
    a->pad[2 * i] = before < 0 ? 0 : before;
    a->pad[2 * i + 1] = after < 0 ? 0 : after;
    a->any_crop |= a->crop_begin[i] || a->crop_end[i];
    a->any_pad |= a->pad[2 * i] || a->pad[2 * i + 1];
  }
  return FLOE_OK;
}

/* dy without the elements no input element reaches: StridedSlice(dy, crop_begin, -crop_end). */
static FloeOutput crop(FloeGradCtx *c, FloeOutput dy, const Adjoint *a) {
  if (!a->any_crop) return dy;
  int64_t begin[FLOE_MAX_DIMS], end[FLOE_MAX_DIMS], ones[FLOE_MAX_DIMS], end_mask = 0;
  for (int i = 0; i < a->rank; i++) {
    begin[i] = a->crop_begin[i];
    end[i] = -a->crop_end[i];
    ones[i] = 1;
    if (!a->crop_end[i]) end_mask |= (int64_t)1 << i; /* to the end */
  }
  FloeNodeBuilder *b = floe__grad_begin(c, "StridedSlice");
  floe_node_add_input(b, dy);
  floe_node_add_input(b, floe__grad_i32_vec(c, begin, a->rank));
  floe_node_add_input(b, floe__grad_i32_vec(c, end, a->rank));
  floe_node_add_input(b, floe__grad_i32_vec(c, ones, a->rank));
  floe_node_set_attr_int(b, "end_mask", end_mask);
  return floe_out(floe_node_finish(b), 0);
}

/* The adjoint Conv's attributes on b: ConvTranspose's strides, dilations, groups and
 * data_format, and the paddings of a. */
static void adjoint_attrs(FloeGradCtx *c, FloeNodeBuilder *b, const Adjoint *a) {
  static const char *const copied[] = {"strides", "dilations", "groups", "data_format", NULL};
  floe__node_copy_attrs(c->node, b, copied);
  floe_node_set_attr_string(b, "padding", a->any_pad ? "EXPLICIT" : "VALID");
  if (a->any_pad) floe_node_set_attr_int_list(b, "explicit_paddings", a->pad, 2 * a->rank);
}

/* y = ConvTranspose(x, f) = ConvBackpropInputNd(shape(y), f, x) of the adjoint Conv, so
 * dx = Conv(dy, f) and df = ConvBackpropFilterNd(dy, shape(f), x), both of that Conv. */
static floe_code grad_conv_transpose(FloeGradCtx *c, FloeStatus *st) {
  Adjoint a;
  floe_code rc = conv_transpose_adjoint(c->node, &a, st);
  if (rc != FLOE_OK) return rc;
  FloeOutput x = in_(c, 0), f = in_(c, 1), dy = crop(c, c->dy[0], &a);
  if (c->need_dx[0]) {
    FloeNodeBuilder *b = floe__grad_begin_op(c, "Conv", (FloeOutput[]){dy, f}, 2, NULL);
    adjoint_attrs(c, b, &a);
    c->dx[0] = floe_out(floe_node_finish(b), 0);
  }
  if (c->need_dx[1]) {
    FloeNodeBuilder *b = floe__grad_begin_op(
        c, "ConvBackpropFilterNd", (FloeOutput[]){dy, floe__grad_shape_of(c, f), x}, 3, NULL);
    adjoint_attrs(c, b, &a);
    c->dx[1] = floe_out(floe_node_finish(b), 0);
  }
  return FLOE_OK;
}

/* ---- pooling ---- */

static floe_code grad_pool(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_op(c, "PoolGrad", (FloeOutput[]){in_(c, 0), c->dy[0]}, 2, pool_attrs);
  return FLOE_OK;
}

/* Only the values (output 0) have a gradient; indices are integers. */
static floe_code grad_max_pool_with_indices(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->dy[0].node) return FLOE_OK;
  static const char *const copied[] = {"ksize", "strides", "dilations", "padding",
                                       "explicit_paddings", "ceil_mode", NULL};
  FloeNodeBuilder *b =
      floe__grad_begin_op(c, "PoolGrad", (FloeOutput[]){in_(c, 0), c->dy[0]}, 2, copied);
  floe_node_set_attr_string(b, "pooling_type", "MAX");
  floe_node_set_attr_string(b, "data_format", "CHANNELS_FIRST");
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

/* PoolGrad(x, g) is linear in g and does not vary with x's values (MAX: almost everywhere).
 * AVG's adjoint in g is the AVG Pool itself; MAX's would gather each window's gradient from
 * its maximum, which no Floe op does. */
static floe_code grad_pool_grad(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  if (c->need_dx[0]) c->dx[0] = floe__grad_unary(c, "ZerosLike", in_(c, 0));
  if (!c->need_dx[1]) return FLOE_OK;
  const FloeAttrValue *t = floe__attrs_get(&n->attrs, "pooling_type");
  if (!t || t->kind != FLOE_ATTR_STRING || strcmp(t->u.s, "AVG"))
    return floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "floe_gradients: node '%s' (%s) lies between the xs and the ys: the "
                           "second derivative of MAX pooling is not supported; wrap the path "
                           "in StopGradient",
                           n->name, n->op->name);
  c->dx[1] = floe__grad_op(c, "Pool", (FloeOutput[]){c->dy[0]}, 1, pool_attrs);
  return FLOE_OK;
}

/* The session's fused ops (_FusedConv, _FusedMatMul, _FusedElementwise) are made by its
 * fusion passes after autodiff, so only a graph that builds one directly differentiates
 * through it: not supported, an error naming the node and the ops to build instead. */
static floe_code grad_fused_missing(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s) lies between the xs and the ys, and "
                         "Floe has no gradient for %s yet; build the unfused ops (%s): the "
                         "session fuses them after differentiation",
                         n->name, n->op->name, n->op->name,
                         strcmp(n->op->name, "_FusedConv") == 0     ? "Conv, BiasAdd, Add, Relu"
                         : strcmp(n->op->name, "_FusedMatMul") == 0 ? "MatMul, BiasAdd, Relu"
                                                                    : "the elementwise ops");
}

/* The blocked layout's converters move elements: each one's gradient is the other. */
static const char *const block_attrs[] = {"block", NULL};

static floe_code grad_to_blocked(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeNodeBuilder *b = floe__grad_begin_op(c, "_FromBlocked", (FloeOutput[]){c->dy[0]}, 1,
                                           block_attrs);
  /* a last block the forward input's channels did not fill: its padding is dropped */
  FloeOutput x = c->node->inputs[0];
  const FloeShape *xs = &x.node->out_shapes[x.index];
  int64_t ch = xs->rank >= 1 ? xs->dims[xs->rank - 1] : -1;
  if (ch > 0) floe_node_set_attr_int(b, "channels", ch);
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

static floe_code grad_from_blocked(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_op(c, "_ToBlocked", (FloeOutput[]){c->dy[0]}, 1, block_attrs);
  return FLOE_OK;
}

floe_code floe__grads_register_conv(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn;
  } table[] = {
      {"Conv", grad_conv},
      {"ConvTranspose", grad_conv_transpose},
      {"Pool", grad_pool},
      {"MaxPoolWithIndices", grad_max_pool_with_indices},
      {"ConvBackpropInputNd", grad_conv_backprop_input},
      {"ConvBackpropFilterNd", grad_conv_backprop_filter},
      {"PoolGrad", grad_pool_grad},
      {"_FusedConv", grad_fused_missing},
      {"_FusedElementwise", grad_fused_missing},
      {"_FusedMatMul", grad_fused_missing},
      {"_ToBlocked", grad_to_blocked},
      {"_FromBlocked", grad_from_blocked},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
