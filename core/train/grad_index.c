/* SPDX-License-Identifier: Apache-2.0 */
/* grad_index.c - gradient functions of the indexing ops (ops_index.def). Gathers scatter
 * their gradient back with an additive scatter; scatters gather it, and with reduction
 * none only the update that was written last (the "winner" of each position) receives it.
 * Multiplicative, max and min scatters and GatherND with batch dims have no gradient yet:
 * differentiating them is an error naming the node. NonZero, Range and Unique are not
 * differentiable (as in TensorFlow). */
#include <string.h>

#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }

/* The forward node's string attribute (dflt when absent). */
static const char *attr_str(const FloeGradCtx *c, const char *name, const char *dflt) {
  const FloeAttrValue *v = floe__attrs_get(&c->node->attrs, name);
  return v && v->kind == FLOE_ATTR_STRING ? v->u.s : dflt;
}

static floe_code no_gradient(FloeGradCtx *c, FloeStatus *st, const char *why) {
  return floe_status_set(st, FLOE_UNIMPLEMENTED, "node '%s' (%s): no gradient %s", c->node->name,
                         c->node->op->name, why);
}

static const char *const upper_attr[] = {"upper", NULL};
static const char *const seq_attrs[] = {"seq_dim", "batch_dim", NULL};

/* Trilu is a mask: the gradient keeps the same triangle. */
static floe_code grad_trilu(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[2] = {c->dy[0], in_(c, 1)};
  c->dx[0] = floe__grad_op(c, "Trilu", ins, 2, upper_attr);
  return FLOE_OK;
}

/* Each input adds into the sums on its other side: the same cumsum, reversed. */
static floe_code grad_cumsum(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  const FloeAttrValue *rev = floe__attrs_get(&c->node->attrs, "reverse");
  FloeNodeBuilder *b = floe__grad_begin(c, "Cumsum");
  floe_node_add_input(b, c->dy[0]);
  floe_node_add_input(b, in_(c, 1));
  floe__grad_copy_attr(c, b, "exclusive");
  floe_node_set_attr_bool(b, "reverse", !(rev && rev->kind == FLOE_ATTR_BOOL && rev->u.b));
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

/* A permutation that is its own inverse. */
static floe_code grad_reverse_sequence(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[2] = {c->dy[0], in_(c, 1)};
  c->dx[0] = floe__grad_op(c, "ReverseSequence", ins, 2, seq_attrs);
  return FLOE_OK;
}

/* SqueezeAxes, UnsqueezeAxes: dy reshaped to the input's shape. */
static floe_code grad_reshape(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_binary(c, "Reshape", c->dy[0], floe__grad_shape_of(c, in_(c, 0)));
  return FLOE_OK;
}

static floe_code grad_split_v(FloeGradCtx *c, FloeStatus *st) {
  return floe__grad_concat_outputs(c, in_(c, 2), st);
}

static floe_code grad_slice_axes(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeNodeBuilder *b = floe__grad_begin(c, "Shape");
  floe_node_add_input(b, in_(c, 0));
  floe_node_set_attr_type(b, "out_type", floe__grad_input_dtype(c, 1));
  FloeOutput ins[6] = {floe_out(floe_node_finish(b), 0), in_(c, 1), in_(c, 2), in_(c, 3),
                       in_(c, 4), c->dy[0]};
  c->dx[0] = floe__grad_op(c, "SliceAxesGrad", ins, 6, NULL);
  return FLOE_OK;
}

static floe_code grad_slice_axes_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[5] = {c->dy[0], in_(c, 1), in_(c, 2), in_(c, 3), in_(c, 4)};
  c->dx[5] = floe__grad_op(c, "SliceAxes", ins, 5, NULL);
  return FLOE_OK;
}

/* An additive scatter of g into zeros shaped like x (ScatterElements or ScatterND). */
static FloeOutput scatter_add(FloeGradCtx *c, const char *op, FloeOutput x, FloeOutput idx,
                              FloeOutput g, bool with_axis) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  floe_node_add_input(b, floe__grad_unary(c, "ZerosLike", x));
  floe_node_add_input(b, idx);
  floe_node_add_input(b, g);
  if (with_axis) floe__grad_copy_attr(c, b, "axis");
  floe_node_set_attr_string(b, "reduction", "add");
  return floe_out(floe_node_finish(b), 0);
}

static floe_code grad_gather_elements(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = scatter_add(c, "ScatterElements", in_(c, 0), in_(c, 1), c->dy[0], true);
  return FLOE_OK;
}

static floe_code grad_gather_nd(FloeGradCtx *c, FloeStatus *st) {
  const FloeAttrValue *b = floe__attrs_get(&c->node->attrs, "batch_dims");
  if (b && b->kind == FLOE_ATTR_INT && b->u.i != 0) return no_gradient(c, st, "with batch_dims yet");
  c->dx[0] = scatter_add(c, "ScatterND", in_(c, 0), in_(c, 1), c->dy[0], false);
  return FLOE_OK;
}

/* The values went to the positions in indices (output 1) along axis. */
static floe_code grad_top_k(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput idx = floe_out((FloeNode *)c->node, 1);
  c->dx[0] = scatter_add(c, "ScatterElements", in_(c, 0), idx, floe__grad_dy(c, 0), true);
  return FLOE_OK;
}

/* The scatters (nd: ScatterND, else ScatterElements): data's gradient is dy where no update
 * replaced it; an update's is dy at its position (only the last writer's, for none). */
static floe_code grad_scatter(FloeGradCtx *c, FloeStatus *st, bool nd) {
  const char *red = attr_str(c, "reduction", "none");
  const char *scatter = nd ? "ScatterND" : "ScatterElements", *gather = nd ? "GatherND" : "GatherElements";
  FloeOutput idx = in_(c, 1), up = in_(c, 2), dy = c->dy[0];
  FloeNodeBuilder *b;
  if (strcmp(red, "add") && strcmp(red, "none"))
    return no_gradient(c, st, "for reduction 'mul', 'max' or 'min' yet");
  b = floe__grad_begin(c, gather);
  floe_node_add_input(b, dy);
  floe_node_add_input(b, idx);
  if (!nd) floe__grad_copy_attr(c, b, "axis");
  FloeOutput dup = floe_out(floe_node_finish(b), 0);
  if (!strcmp(red, "add")) {
    c->dx[0] = dy;
    c->dx[2] = dup;
    return FLOE_OK;
  }
  /* none: number the updates, scatter the numbers, and keep the ones still there. */
  FloeOutput n = floe__grad_unary(c, "Size", up);
  b = floe__grad_begin(c, "Range");
  floe_node_add_input(b, floe__grad_scalar(c, FLOE_I32, 0));
  floe_node_add_input(b, n);
  floe_node_add_input(b, floe__grad_scalar(c, FLOE_I32, 1));
  FloeOutput ids = floe__grad_binary(c, "Reshape", floe_out(floe_node_finish(b), 0),
                                     floe__grad_shape_of(c, up));
  b = floe__grad_begin(c, "Fill");
  floe_node_add_input(b, floe__grad_shape_of(c, in_(c, 0)));
  floe_node_add_input(b, floe__grad_scalar(c, FLOE_I32, -1));
  FloeOutput canvas = floe_out(floe_node_finish(b), 0);
  FloeOutput ins[3] = {canvas, idx, ids};
  const char *const ax[] = {nd ? NULL : "axis", NULL};
  FloeOutput winners = floe__grad_op(c, scatter, ins, 3, ax);
  ins[0] = winners, ins[1] = idx;
  FloeOutput won = floe__grad_binary(c, "Equal", floe__grad_op(c, gather, ins, 2, ax), ids);
  b = floe__grad_begin(c, "Select");
  floe_node_add_input(b, won);
  floe_node_add_input(b, dup);
  floe_node_add_input(b, floe__grad_unary(c, "ZerosLike", up));
  c->dx[2] = floe_out(floe_node_finish(b), 0);
  ins[0] = dy, ins[1] = idx, ins[2] = floe__grad_unary(c, "ZerosLike", up);
  c->dx[0] = floe__grad_op(c, scatter, ins, 3, ax);
  return FLOE_OK;
}

static floe_code grad_scatter_elements(FloeGradCtx *c, FloeStatus *st) {
  return grad_scatter(c, st, false);
}

static floe_code grad_scatter_nd(FloeGradCtx *c, FloeStatus *st) {
  return grad_scatter(c, st, true);
}

floe_code floe__grads_register_index(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn;
  } table[] = {
      {"Trilu", grad_trilu},
      {"Cumsum", grad_cumsum},
      {"ReverseSequence", grad_reverse_sequence},
      {"SqueezeAxes", grad_reshape},
      {"UnsqueezeAxes", grad_reshape},
      {"SplitV", grad_split_v},
      {"SliceAxes", grad_slice_axes},
      {"SliceAxesGrad", grad_slice_axes_grad},
      {"GatherElements", grad_gather_elements},
      {"GatherND", grad_gather_nd},
      {"TopK", grad_top_k},
      {"ScatterElements", grad_scatter_elements},
      {"ScatterND", grad_scatter_nd},
      {"NonZero", NULL},
      {"Range", NULL},
      {"Unique", NULL},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
