/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_train.c - shape functions of the standard set's training ops: the gradients'
 * helpers (AddN, ConcatOffset, BroadcastTo, SumToShape, ExpandReduced, the *Grad ops),
 * ReadVariableOp, Merge, and candidate sampling.
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* ---- training ops ---- */

floe_code floe__shape_from_shape_input1(const FloeHostApi *host, FloeShapeContext *sctx) {
  char what[64];
  snprintf(what, sizeof what, "%s shape", op_name(sctx));
  return shape_from_input(sctx, 1, what, &sctx->output_shapes[0]);
}

floe_code floe__shape_addn(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape out = sctx->input_shapes[0];
  for (int i = 1; i < sctx->node->num_inputs; i++) {
    const FloeShape *s = &sctx->input_shapes[i];
    if (s->rank < 0) continue;
    if (out.rank < 0) {
      out = *s;
      continue;
    }
    if (s->rank != out.rank)
      return fail(sctx, "AddN inputs must have one shape, got %s and %s", SHAPE_STR(out),
                  SHAPE_STR(*s));
    for (int k = 0; k < out.rank; k++) {
      if (out.dims[k] < 0) out.dims[k] = s->dims[k];
      else if (s->dims[k] >= 0 && s->dims[k] != out.dims[k])
        return fail(sctx, "AddN inputs must have one shape, got %s and input %d %s",
                    SHAPE_STR(out), i, SHAPE_STR(*s));
    }
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* Every shape (and offset) is a vector of the rank's length. */
floe_code floe__shape_concat_offset(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *cd = &sctx->input_shapes[0];
  if (cd->rank > 0)
    return fail(sctx, "ConcatOffset concat_dim must be a scalar, got shape %s", SHAPE_STR(*cd));
  int64_t len = -1;
  for (int i = 0; i < sctx->node->num_outputs; i++) {
    int64_t li;
    char what[48];
    snprintf(what, sizeof what, "ConcatOffset shape[%d]", i);
    floe_code c = vector_len(sctx, 1 + i, what, &li);
    if (c != FLOE_OK) return c;
    if (!merge_dim(len, li, &len))
      return fail(sctx, "ConcatOffset shapes must all have one length (the rank); shape[%d] "
                        "has %lld elements, another %lld", i, (long long)li, (long long)len);
  }
  set_all_outputs(sctx, unknown_dims(1));
  for (int i = 0; i < sctx->node->num_outputs; i++) sctx->output_shapes[i].dims[0] = len;
  return FLOE_OK;
}

/* The target shape (input 1) when the input (input 0) broadcasts to it; a target dim that
 * is unknown takes the input's dim when that is known and not 1. */
floe_code floe__shape_broadcast_to(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "BroadcastTo shape", &out);
  if (c != FLOE_OK) return c;
  if (in->rank < 0 || out.rank < 0) {
    sctx->output_shapes[0] = out;
    return FLOE_OK;
  }
  if (in->rank > out.rank)
    return fail(sctx, "BroadcastTo cannot broadcast an input of shape %s to shape %s: the "
                      "target has fewer dims (%d < %d)", SHAPE_STR(*in), SHAPE_STR(out),
                out.rank, in->rank);
  for (int i = 0; i < in->rank; i++) {
    int64_t have = in->dims[i], *want = &out.dims[out.rank - in->rank + i];
    if (have < 0 || have == 1) continue;
    if (*want >= 0 && *want != have)
      return fail(sctx, "BroadcastTo cannot broadcast an input of shape %s to shape %s: dim "
                        "%d is %lld, not %lld or 1", SHAPE_STR(*in), SHAPE_STR(out),
                  out.rank - in->rank + i, (long long)*want, (long long)have);
    *want = have;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* The target shape (input 1), checked to broadcast to the input's shape (input 0). */
floe_code floe__shape_sum_to_shape(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "SumToShape shape", &out);
  if (c != FLOE_OK) return c;
  for (int i = 0; in->rank >= 0 && i < out.rank; i++) {
    int d = in->rank - out.rank + i;
    int64_t want = out.dims[i], have = d >= 0 ? in->dims[d] : 1;
    if (want >= 0 && have >= 0 && want != have && want != 1)
      return fail(sctx, "SumToShape cannot sum an input of shape %s to shape %s: the shape "
                        "must broadcast to the input's", SHAPE_STR(*in), SHAPE_STR(out));
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* input_shape (input 1); with a constant axis, grad's shape is checked against it and fills
 * its unknown kept dims. */
floe_code floe__shape_expand_reduced(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0], *axis_shape = &sctx->input_shapes[2];
  bool keep = attr_bool(sctx, "keep_dims");
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "ExpandReduced input_shape", &out);
  if (c != FLOE_OK) return c;
  if (axis_shape->rank > 1)
    return fail(sctx, "ExpandReduced axis must be a scalar or 1-D, got shape %s",
                SHAPE_STR(*axis_shape));
  const FloeTensor *t = const_input(sctx, 2);
  int64_t axes[MAX_VEC], n;
  sctx->output_shapes[0] = out;
  if (!t || !tensor_ints(t, axes, MAX_VEC, &n) || out.rank < 0) return FLOE_OK;
  bool red[FLOE_MAX_DIMS] = {false};
  for (int64_t k = 0; k < n; k++) {
    int ax = 0;
    if ((c = norm_axis(sctx, axes[k], out.rank, "ExpandReduced axis", &out, &ax)) != FLOE_OK)
      return c;
    red[ax] = true;
  }
  int gi = 0;
  for (int i = 0; i < out.rank; i++) gi += !red[i] || keep;
  if (g->rank >= 0 && g->rank != gi)
    return fail(sctx, "ExpandReduced grad %s has rank %d, but input_shape %s reduced along axis "
                      "%s (keep_dims=%d) has rank %d", SHAPE_STR(*g), g->rank, SHAPE_STR(out),
                INTS_STR(axes, (int)n), keep, gi);
  for (int i = 0, k = 0; g->rank >= 0 && i < out.rank; i++) {
    if (red[i] && !keep) continue;
    int64_t gd = g->dims[k++];
    if (red[i] ? (gd >= 0 && gd != 1) : !merge_dim(out.dims[i], gd, &out.dims[i]))
      return fail(sctx, "ExpandReduced grad %s does not match input_shape %s reduced along "
                        "axis %s (keep_dims=%d)", SHAPE_STR(*g),
                  SHAPE_STR(sctx->output_shapes[0]), INTS_STR(axes, (int)n), keep);
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* [C]: the channel dim of out_backprop (last for NHWC, dim 1 for NCHW). */
floe_code floe__shape_bias_add_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  bool nchw = false;
  floe_code c = data_format(sctx, &nchw);
  if (c != FLOE_OK) return c;
  FloeShape out = unknown_dims(1);
  if (in->rank >= 0 && in->rank < 2)
    return fail(sctx, "BiasAddGrad needs out_backprop of rank >= 2, got %s", SHAPE_STR(*in));
  if (in->rank >= 2) out.dims[0] = nchw ? in->dims[1] : in->dims[in->rank - 1];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* grad's dims less the paddings (a constant [rank, 2] input); REFLECT paddings must stay
 * below the input's dims, as for Pad. */
floe_code floe__shape_pad_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0], *ps = &sctx->input_shapes[1];
  const char *mode = attr_string(sctx, "mode", "CONSTANT");
  bool reflect = strcmp(mode, "REFLECT") == 0;
  if (!reflect && strcmp(mode, "CONSTANT") != 0)
    return fail(sctx, "PadGrad attribute 'mode' must be CONSTANT or REFLECT, got '%s'", mode);
  int r = g->rank;
  if (ps->rank >= 0) {
    int64_t pr = ps->rank == 2 ? ps->dims[0] : -2;
    if (ps->rank != 2 || (ps->dims[1] >= 0 && ps->dims[1] != 2) || (r >= 0 && pr >= 0 && pr != r))
      return fail(sctx, "PadGrad paddings must have shape [rank, 2] = [%d,2] for grad %s, got %s",
                  r, SHAPE_STR(*g), SHAPE_STR(*ps));
    if (r < 0 && pr >= 0 && pr <= FLOE_MAX_DIMS) r = (int)pr;
  }
  const FloeTensor *t = const_input(sctx, 1);
  int64_t pad[2 * FLOE_MAX_DIMS], n;
  FloeShape out = unknown_dims(r);
  if (!t || !tensor_ints(t, pad, 2 * FLOE_MAX_DIMS, &n) || r < 0 || n != 2 * r) {
    sctx->output_shapes[0] = out;
    return FLOE_OK;
  }
  for (int i = 0; i < r; i++) {
    int64_t b = pad[2 * i], a = pad[2 * i + 1], dim = g->rank >= 0 ? g->dims[i] : -1;
    int64_t in = dim - b - a;
    if (b < 0 || a < 0)
      return fail(sctx, "PadGrad paddings %s must be non-negative", INTS_STR(pad, (int)n));
    if (dim < 0) continue;
    if (in < 0 || (reflect && (a || b) && (b >= in || a >= in)))
      return fail(sctx, "PadGrad paddings %s do not fit grad %s in dimension %d: the input size "
                        "left (%lld) must be >= 0%s", INTS_STR(pad, (int)n), SHAPE_STR(*g), i,
                  (long long)in, reflect ? " and larger than each padding (REFLECT)" : "");
    out.dims[i] = in;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* grad's dims divided by the multiples (a constant vector), which must divide them. */
floe_code floe__shape_tile_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0];
  int64_t m[MAX_VEC], len;
  int n = 0; /* set when known; inlined, GCC cannot tell */
  bool known;
  floe_code c = const_vector(sctx, 1, "TileGrad multiples", m, &n, &known);
  if (c == FLOE_OK && !known) c = vector_len(sctx, 1, "TileGrad multiples", &len);
  if (c != FLOE_OK) return c;
  if (known) len = n;
  if (g->rank >= 0 && len >= 0 && len != g->rank)
    return fail(sctx, "TileGrad multiples has %lld elements for grad of shape %s",
                (long long)len, SHAPE_STR(*g));
  int r = g->rank >= 0 ? g->rank : len >= 0 && len <= FLOE_MAX_DIMS ? (int)len : -1;
  FloeShape out = unknown_dims(r);
  for (int i = 0; known && i < r; i++) {
    int64_t dim = g->rank >= 0 ? g->dims[i] : -1;
    if (m[i] < 1 || (dim >= 0 && dim % m[i] != 0))
      return fail(sctx, "TileGrad multiples %s do not divide grad %s: dimension %d needs a "
                        "multiple >= 1 that divides it", INTS_STR(m, n), SHAPE_STR(*g), i);
    if (dim >= 0) out.dims[i] = dim / m[i];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* The shape attribute of the VarHandleOp feeding input 0, when it is one. */
floe_code floe__shape_read_variable(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeNode *src = sctx->node->inputs[0].node;
  const FloeAttrValue *v = src ? floe__attrs_get(&src->attrs, "shape") : NULL;
  sctx->output_shapes[0] =
      (src && strcmp(src->op->name, "VarHandleOp") == 0 && v && v->kind == FLOE_ATTR_SHAPE)
          ? v->u.shape
          : floe_shape_unknown();
  return FLOE_OK;
}

/* ResourceGather: indices' shape + the variable's (its VarHandleOp's) without the first dim. */
floe_code floe__shape_resource_gather(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  const FloeNode *src = sctx->node->inputs[0].node;
  const FloeAttrValue *v = src && strcmp(src->op->name, "VarHandleOp") == 0
                               ? floe__attrs_get(&src->attrs, "shape")
                               : NULL;
  const FloeShape *ix = &sctx->input_shapes[1];
  FloeShape out = floe_shape_unknown();
  if (v && v->kind == FLOE_ATTR_SHAPE && v->u.shape.rank >= 1 && ix->rank >= 0 &&
      ix->rank + v->u.shape.rank - 1 <= FLOE_MAX_DIMS) {
    out.rank = ix->rank + v->u.shape.rank - 1;
    for (int i = 0; i < ix->rank; i++) out.dims[i] = ix->dims[i];
    for (int i = 1; i < v->u.shape.rank; i++) out.dims[ix->rank + i - 1] = v->u.shape.dims[i];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* Merge: the shape every input agrees on (dims that differ become unknown); value_index is
 * a scalar. */
floe_code floe__shape_merge(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  FloeShape out = sctx->input_shapes[0];
  int n = sctx->node->num_inputs;
  for (int j = 1; j < n && out.rank >= 0; j++) {
    const FloeShape *in = &sctx->input_shapes[j];
    if (in->rank != out.rank) {
      out = unknown_rank();
      break;
    }
    for (int d = 0; d < out.rank; d++)
      if (in->dims[d] != out.dims[d]) out.dims[d] = -1;
  }
  sctx->output_shapes[0] = out;
  sctx->output_shapes[1] = floe_shape_scalar();
  return FLOE_OK;
}

/* ---- candidate sampling ---- */

floe_code floe__shape_candidate_sampler(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *t = &sctx->input_shapes[0];
  int64_t num_true = attr_int(sctx, "num_true", 1), k = attr_int(sctx, "num_sampled", 1);
  int64_t range = attr_int(sctx, "range_max", 1);
  if (range <= 0 || k <= 0 || num_true <= 0)
    return fail(sctx, "range_max (%lld), num_sampled (%lld) and num_true (%lld) must be >= 1",
                (long long)range, (long long)k, (long long)num_true);
  if (attr_bool(sctx, "unique") && k > range)
    return fail(sctx, "num_sampled %lld is more than range_max %lld with unique=true: sample "
                      "fewer, or set unique=false", (long long)k, (long long)range);
  if (t->rank >= 0 && t->rank != 2)
    return fail(sctx, "true_classes must be [batch, num_true], got %s", SHAPE_STR(*t));
  if (t->rank == 2 && t->dims[1] >= 0 && t->dims[1] != num_true)
    return fail(sctx, "true_classes %s has %lld columns, but num_true is %lld", SHAPE_STR(*t),
                (long long)t->dims[1], (long long)num_true);
  FloeShape s = unknown_dims(1);
  s.dims[0] = k;
  sctx->output_shapes[0] = s;
  sctx->output_shapes[2] = s;
  sctx->output_shapes[1] = unknown_dims(2);
  sctx->output_shapes[1].dims[0] = t->rank == 2 ? t->dims[0] : FLOE_DIM_UNKNOWN;
  sctx->output_shapes[1].dims[1] = num_true;
  return FLOE_OK;
}
