/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_math.c - shape functions of the standard set's sources (Const, Placeholder),
 * element-wise and broadcasting ops, reductions, one-hot and the cross-entropy losses.
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* ---- sources and element-wise ---- */

floe_code floe__shape_const(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "value", FLOE_ATTR_TENSOR);
  sctx->output_shapes[0] = v && v->u.tensor ? floe_tensor_shape(v->u.tensor) : unknown_rank();
  return FLOE_OK;
}

floe_code floe__shape_placeholder(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "shape", FLOE_ATTR_SHAPE);
  sctx->output_shapes[0] = v ? v->u.shape : unknown_rank();
  return FLOE_OK;
}

/* Same shape as input 0; ops with an "axis" (Softmax) also check it against the rank. */
floe_code floe__shape_unchanged(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  const FloeAttrValue *axis = attr_of(sctx, "axis", FLOE_ATTR_INT);
  if (axis && in->rank >= 0) {
    int a;
    if (in->rank == 0)
      return fail(sctx, "%s needs an input of rank >= 1, got a scalar", op_name(sctx));
    floe_code c = norm_axis(sctx, axis->u.i, in->rank, "attribute 'axis'", in, &a);
    if (c != FLOE_OK) return c;
  }
  set_all_outputs(sctx, *in);
  return FLOE_OK;
}

floe_code floe__shape_broadcast_pair(FloeShapeContext *sctx, const FloeShape *a,
                                     const FloeShape *b, FloeShape *out) {
  return broadcast2(sctx, a, b, out);
}

static floe_code broadcast_all(FloeShapeContext *sctx) {
  FloeShape s = sctx->input_shapes[0];
  for (int i = 1; i < sctx->node->num_inputs; i++) {
    floe_code c = broadcast2(sctx, &s, &sctx->input_shapes[i], &s);
    if (c != FLOE_OK) {
      /* Name every input when more than two take part (Select). */
      if (sctx->node->num_inputs > 2) {
        floe__status_prefix(sctx->status, "%s inputs %s, %s, %s", op_name(sctx),
                            SHAPE_STR(sctx->input_shapes[0]), SHAPE_STR(sctx->input_shapes[1]),
                            SHAPE_STR(sctx->input_shapes[2]));
      }
      return c;
    }
  }
  set_all_outputs(sctx, s);
  return FLOE_OK;
}

floe_code floe__shape_broadcast(const FloeHostApi *host, FloeShapeContext *sctx) {
  return broadcast_all(sctx);
}

floe_code floe__shape_select(const FloeHostApi *host, FloeShapeContext *sctx) {
  return broadcast_all(sctx);
}

floe_code floe__shape_scalar(const FloeHostApi *host, FloeShapeContext *sctx) {
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_shape(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t r = sctx->input_shapes[0].rank;
  sctx->output_shapes[0] = floe_shape_make(1, &r);
  return FLOE_OK;
}

/* ---- reductions ---- */

floe_code floe__shape_reduce(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0], *axis_shape = &sctx->input_shapes[1];
  bool keep = attr_bool(sctx, "keep_dims");
  const FloeTensor *t = const_input(sctx, 1);
  int64_t axes[MAX_VEC], n;
  if (axis_shape->rank > 1)
    return fail(sctx, "%s axis must be a scalar or 1-D, got shape %s", op_name(sctx),
                SHAPE_STR(*axis_shape));
  if (!t || !tensor_ints(t, axes, MAX_VEC, &n)) {
    /* Unknown axes: keep_dims keeps the rank; one scalar axis removes one dim. */
    int r = -1;
    if (in->rank >= 0 && keep) r = in->rank;
    if (in->rank > 0 && !keep && axis_shape->rank == 0) r = in->rank - 1;
    sctx->output_shapes[0] = unknown_dims(r);
    return FLOE_OK;
  }
  if (n == 0) {
    sctx->output_shapes[0] = *in;
    return FLOE_OK;
  }
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  bool reduced[FLOE_MAX_DIMS] = {false};
  for (int64_t k = 0; k < n; k++) {
    int ax = 0;
    char what[48];
    snprintf(what, sizeof what, "%s axis", op_name(sctx));
    floe_code c = norm_axis(sctx, axes[k], in->rank, what, in, &ax);
    if (c != FLOE_OK) return c;
    reduced[ax] = true;
  }
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++) {
    if (!reduced[i])
      out.dims[out.rank++] = in->dims[i];
    else if (keep)
      out.dims[out.rank++] = 1;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_arg_reduce(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0], *dshape = &sctx->input_shapes[1];
  if (dshape->rank > 0)
    return fail(sctx, "%s dimension must be a scalar, got shape %s", op_name(sctx),
                SHAPE_STR(*dshape));
  if (in->rank == 0)
    return fail(sctx, "%s needs an input of rank >= 1, got a scalar", op_name(sctx));
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int64_t dim;
  if (!const_scalar(sctx, 1, &dim)) {
    sctx->output_shapes[0] = unknown_dims(in->rank - 1);
    return FLOE_OK;
  }
  int ax = 0;
  char what[48];
  snprintf(what, sizeof what, "%s dimension", op_name(sctx));
  floe_code c = norm_axis(sctx, dim, in->rank, what, in, &ax);
  if (c != FLOE_OK) return c;
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++)
    if (i != ax) out.dims[out.rank++] = in->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* ---- one-hot and losses ---- */

floe_code floe__shape_one_hot(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *idx = &sctx->input_shapes[0];
  int64_t axis = attr_int(sctx, "axis", -1), depth = FLOE_DIM_UNKNOWN;
  const char *names[4] = {"indices", "depth", "on_value", "off_value"};
  for (int i = 1; i < 4; i++)
    if (sctx->input_shapes[i].rank > 0)
      return fail(sctx, "OneHot %s must be a scalar, got shape %s", names[i],
                  SHAPE_STR(sctx->input_shapes[i]));
  if (const_scalar(sctx, 1, &depth) && depth < 0)
    return fail(sctx, "OneHot depth must be >= 0, got %lld", (long long)depth);
  if (idx->rank < 0) {
    if (axis < -1)
      return fail(sctx, "OneHot axis must be -1 or in [0, rank], got %lld", (long long)axis);
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  if (axis < -1 || axis > idx->rank)
    return fail(sctx, "OneHot axis %lld is out of range for indices %s; use -1 or a value in "
                      "[0, %d]", (long long)axis, SHAPE_STR(*idx), idx->rank);
  if (idx->rank == FLOE_MAX_DIMS)
    return fail(sctx, "OneHot of indices %s would exceed %d dimensions", SHAPE_STR(*idx),
                FLOE_MAX_DIMS);
  int ax = axis == -1 ? idx->rank : (int)axis;
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < idx->rank; i++) {
    if (i == ax) out.dims[out.rank++] = depth;
    out.dims[out.rank++] = idx->dims[i];
  }
  if (ax == idx->rank) out.dims[out.rank++] = depth;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* Writes loss [batch] and backprop [batch, classes] from a merged features shape. */
static void xent_outputs(FloeShapeContext *sctx, int64_t batch, int64_t classes) {
  int64_t dims[2] = {batch, classes};
  sctx->output_shapes[0] = floe_shape_make(1, dims);
  sctx->output_shapes[1] = floe_shape_make(2, dims);
}

floe_code floe__shape_xent(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *f = &sctx->input_shapes[0], *l = &sctx->input_shapes[1];
  if (f->rank >= 0 && f->rank != 2)
    return fail(sctx, "SoftmaxCrossEntropyWithLogits features must be [batch, classes], got %s",
                SHAPE_STR(*f));
  if (l->rank >= 0 && l->rank != 2)
    return fail(sctx, "SoftmaxCrossEntropyWithLogits labels must be [batch, classes], got %s",
                SHAPE_STR(*l));
  FloeShape fs = f->rank == 2 ? *f : unknown_dims(2), ls = l->rank == 2 ? *l : unknown_dims(2);
  int64_t b, c;
  if (!merge_dim(fs.dims[0], ls.dims[0], &b) || !merge_dim(fs.dims[1], ls.dims[1], &c))
    return fail(sctx, "SoftmaxCrossEntropyWithLogits features %s and labels %s must have the "
                      "same shape", SHAPE_STR(*f), SHAPE_STR(*l));
  xent_outputs(sctx, b, c);
  return FLOE_OK;
}

floe_code floe__shape_sparse_xent(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *f = &sctx->input_shapes[0], *l = &sctx->input_shapes[1];
  if (f->rank >= 0 && f->rank != 2)
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits features must be [batch, classes], "
                      "got %s", SHAPE_STR(*f));
  if (l->rank >= 0 && l->rank != 1)
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits labels must be [batch], got %s",
                SHAPE_STR(*l));
  int64_t fb = f->rank == 2 ? f->dims[0] : -1, c = f->rank == 2 ? f->dims[1] : -1;
  int64_t lb = l->rank == 1 ? l->dims[0] : -1, b;
  if (!merge_dim(fb, lb, &b))
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits features %s and labels %s disagree "
                      "on the batch size", SHAPE_STR(*f), SHAPE_STR(*l));
  xent_outputs(sctx, b, c);
  return FLOE_OK;
}
