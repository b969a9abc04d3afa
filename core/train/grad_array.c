/* SPDX-License-Identifier: Apache-2.0 */
/* grad_array.c - gradient functions of the shape and data-movement ops (and of their
 * gradient ops, which are linear: each one's gradient is the forward op again). Shapes are
 * passed as Consts when statically known (floe__grad_shape_of), so shape inference of the
 * gradient graph stays complete. */
#include <string.h>

#include "train.h"

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }

static FloeOutput cast(FloeGradCtx *c, FloeOutput x, FloeDType to) {
  if (!x.node || floe_node_output_dtype(x.node, x.index) == to) return x;
  return floe__grad_cast(c, x, to);
}

/* The shape of x as a vector of dtype `index` (i32 or i64): a Const when known. */
static FloeOutput shape_as(FloeGradCtx *c, FloeOutput x, FloeDType index) {
  FloeShape s = x.node ? floe_node_output_shape(x.node, x.index) : floe_shape_unknown();
  bool known = index == FLOE_I64 && s.rank >= 0;
  for (int i = 0; known && i < s.rank; i++) known = s.dims[i] >= 0;
  if (!known) return cast(c, floe__grad_shape_of(c, x), index);
  FloeTensor *t = floe__build_ints_tensor(FLOE_I64, 1, s.dims, s.rank, NULL);
  if (!t) {
    floe__graph_fail(c->g, FLOE_NO_MEMORY, "out of memory differentiating '%s'", c->node->name);
    return (FloeOutput){NULL, 0};
  }
  return floe__build_const(&c->build, NULL, t, NULL);
}

static const char *const slice_masks[] = {"begin_mask",    "end_mask",         "ellipsis_mask",
                                          "new_axis_mask", "shrink_axis_mask", NULL};
static const char *const axis_attr[] = {"axis", NULL};
static const char *const mode_attr[] = {"mode", NULL};

/* Reshape, Squeeze, ExpandDims: the gradient is dy reshaped to the input's shape. */
static floe_code grad_reshape(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_binary(c, "Reshape", c->dy[0], floe__grad_shape_of(c, in_(c, 0)));
  return FLOE_OK;
}

/* dx = Transpose(dy, inverse of perm): computed here when perm is a Const. */
static floe_code grad_transpose(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  const FloeTensor *perm = floe__grad_const_input(c, 1);
  FloeOutput inv = {NULL, 0};
  int64_t n = perm ? floe_tensor_num_elements(perm) : -1;
  if (perm && floe_tensor_rank(perm) == 1 && n <= FLOE_MAX_DIMS) {
    int64_t p[FLOE_MAX_DIMS], q[FLOE_MAX_DIMS];
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
      p[i] = floe_tensor_dtype(perm) == FLOE_I64 ? ((const int64_t *)floe_tensor_data(perm))[i]
                                                 : ((const int32_t *)floe_tensor_data(perm))[i];
      ok = ok && p[i] >= 0 && p[i] < n;
    }
    for (int64_t i = 0; ok && i < n; i++) q[p[i]] = i;
    /* A malformed perm already failed Transpose's shape inference; keep it dynamic if not. */
    if (ok) inv = floe__grad_i32_vec(c, q, (int)n);
  }
  if (!inv.node) inv = floe__grad_unary(c, "InvertPermutation", in_(c, 1));
  c->dx[0] = floe__grad_binary(c, "Transpose", c->dy[0], inv);
  return FLOE_OK;
}

/* Concat(values..., axis): each value's gradient is its slice of dy; the offsets are
 * constants when the axis and every shape are known, else ConcatOffset computes them. */
static floe_code grad_concat(FloeGradCtx *c, FloeStatus *st) {
  int n = c->node->num_inputs - 1;
  FloeOutput axis_in = in_(c, n), dy = c->dy[0];
  if (n == 1) {
    if (c->need_dx[0]) c->dx[0] = dy;
    return FLOE_OK;
  }
  FloeShape ys = floe_node_output_shape((FloeNode *)c->node, 0);
  const FloeTensor *at = floe__grad_const_input(c, n);
  bool known = at && floe_tensor_num_elements(at) == 1 && ys.rank > 0;
  int64_t axis = 0;
  if (known) {
    axis = floe_tensor_dtype(at) == FLOE_I64 ? *(const int64_t *)floe_tensor_data(at)
                                             : *(const int32_t *)floe_tensor_data(at);
    if (axis < 0) axis += ys.rank;
    known = axis >= 0 && axis < ys.rank;
  }
  for (int i = 0; known && i < n; i++) {
    FloeShape s = floe_node_output_shape(in_(c, i).node, in_(c, i).index);
    known = s.rank == ys.rank;
    for (int k = 0; known && k < s.rank; k++) known = s.dims[k] >= 0;
  }
  if (known) {
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
      FloeShape s = floe_node_output_shape(in_(c, i).node, in_(c, i).index);
      if (c->need_dx[i]) {
        int64_t begin[FLOE_MAX_DIMS] = {0};
        begin[axis] = off;
        FloeOutput ins[3] = {dy, floe__grad_i32_vec(c, begin, s.rank),
                             floe__grad_i32_vec(c, s.dims, s.rank)};
        c->dx[i] = floe__grad_op(c, "Slice", ins, 3, NULL);
      }
      off += s.dims[axis];
    }
    return FLOE_OK;
  }
  FloeOutput *shapes = floe__calloc((size_t)n, sizeof *shapes);
  if (!shapes)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory differentiating '%s'", c->node->name);
  for (int i = 0; i < n; i++) shapes[i] = floe__grad_shape_of(c, in_(c, i));
  FloeNodeBuilder *b = floe__grad_begin(c, "ConcatOffset");
  floe_node_add_input(b, cast(c, axis_in, FLOE_I32));
  floe_node_add_input_list(b, shapes, n);
  FloeNode *offsets = floe_node_finish(b);
  for (int i = 0; i < n; i++)
    if (c->need_dx[i]) {
      FloeOutput ins[3] = {dy, floe_out(offsets, i), shapes[i]};
      c->dx[i] = floe__grad_op(c, "Slice", ins, 3, NULL);
    }
  floe__free(shapes);
  return FLOE_OK;
}

/* Split(value, axis): the output gradients concatenated back (zeros where none arrives). */
static floe_code grad_split(FloeGradCtx *c, FloeStatus *st) {
  return floe__grad_concat_outputs(c, in_(c, 1), st);
}

/* Slice(input, begin, size) -> SliceGrad(shape(input), begin, dy). */
static floe_code grad_slice(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeDType index = floe__grad_input_dtype(c, 1);
  FloeOutput ins[3] = {shape_as(c, in_(c, 0), index), in_(c, 1), c->dy[0]};
  c->dx[0] = floe__grad_op(c, "SliceGrad", ins, 3, NULL);
  return FLOE_OK;
}

static floe_code grad_strided_slice(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeDType index = floe__grad_input_dtype(c, 1);
  FloeOutput ins[5] = {shape_as(c, in_(c, 0), index), in_(c, 1), in_(c, 2), in_(c, 3), c->dy[0]};
  c->dx[0] = floe__grad_op(c, "StridedSliceGrad", ins, 5, slice_masks);
  return FLOE_OK;
}

/* Gather(params, indices): dy rows added back at the indices; indices get none. */
static floe_code grad_gather(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[3] = {floe__grad_shape_of(c, in_(c, 0)), in_(c, 1), c->dy[0]};
  c->dx[0] = floe__grad_op(c, "GatherGrad", ins, 3, axis_attr);
  return FLOE_OK;
}

static floe_code grad_pad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[2] = {c->dy[0], in_(c, 1)};
  c->dx[0] = floe__grad_op(c, "PadGrad", ins, 2, mode_attr);
  return FLOE_OK;
}

static floe_code grad_tile(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_binary(c, "TileGrad", c->dy[0], in_(c, 1));
  return FLOE_OK;
}

/* Fill(dims, value): every element is value, so its gradient is the sum of dy. */
static floe_code grad_fill(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[1]) return FLOE_OK;
  FloeShape s = floe_node_output_shape((FloeNode *)c->node, 0);
  FloeOutput flat = c->dy[0];
  int64_t axes[FLOE_MAX_DIMS];
  int rank = s.rank;
  if (rank < 0) {
    int64_t minus1 = -1;
    flat = floe__grad_binary(c, "Reshape", flat, floe__grad_i32_vec(c, &minus1, 1));
    axes[0] = 0;
    rank = 1;
  } else {
    for (int k = 0; k < rank; k++) axes[k] = k;
  }
  c->dx[1] = floe__grad_binary(c, "Sum", flat, floe__grad_i32_vec(c, axes, rank));
  return FLOE_OK;
}

static floe_code grad_broadcast_to(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_sum_to(c, c->dy[0], in_(c, 0));
  return FLOE_OK;
}

/* SumToShape's adjoint broadcasts back. */
static floe_code grad_sum_to_shape(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_binary(c, "BroadcastTo", c->dy[0], floe__grad_shape_of(c, in_(c, 0)));
  return FLOE_OK;
}

/* ExpandReduced(grad, shape, axis) broadcasts grad (divided by the count for a mean): its
 * adjoint is the Sum (Mean) of dz over the same axes with the same keep_dims. */
static floe_code grad_expand_reduced(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  const FloeAttrValue *m = floe__attrs_get(&c->node->attrs, "mean");
  bool mean = m && m->kind == FLOE_ATTR_BOOL && m->u.b;
  FloeNodeBuilder *b = floe__grad_begin(c, mean ? "Mean" : "Sum");
  floe_node_add_input(b, c->dy[0]);
  floe_node_add_input(b, in_(c, 2));
  floe__grad_copy_attr(c, b, "keep_dims");
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

/* SliceGrad(shape, begin, grad) pads grad with zeros; its adjoint slices dz back. */
static floe_code grad_slice_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeDType index = floe__grad_input_dtype(c, 1);
  FloeOutput ins[3] = {c->dy[0], in_(c, 1), shape_as(c, in_(c, 2), index)};
  c->dx[2] = floe__grad_op(c, "Slice", ins, 3, NULL);
  return FLOE_OK;
}

static floe_code grad_strided_slice_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[4] = {c->dy[0], in_(c, 1), in_(c, 2), in_(c, 3)};
  c->dx[4] = floe__grad_op(c, "StridedSlice", ins, 4, slice_masks);
  return FLOE_OK;
}

static floe_code grad_gather_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[2] = {c->dy[0], in_(c, 1)};
  c->dx[2] = floe__grad_op(c, "Gather", ins, 2, axis_attr);
  return FLOE_OK;
}

/* PadGrad is the adjoint of Pad in either mode (REFLECT's fold included), so Pad (with a
 * zero constant) is PadGrad's adjoint. */
static floe_code grad_pad_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput ins[2] = {c->dy[0], in_(c, 1)};
  c->dx[0] = floe__grad_op(c, "Pad", ins, 2, mode_attr);
  return FLOE_OK;
}

static floe_code grad_tile_grad(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  c->dx[0] = floe__grad_binary(c, "Tile", c->dy[0], in_(c, 1));
  return FLOE_OK;
}

floe_code floe__grads_register_array(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn;
  } table[] = {
      {"Reshape", grad_reshape},
      {"Squeeze", grad_reshape},
      {"ExpandDims", grad_reshape},
      {"Transpose", grad_transpose},
      {"Concat", grad_concat},
      {"Split", grad_split},
      {"Slice", grad_slice},
      {"StridedSlice", grad_strided_slice},
      {"Gather", grad_gather},
      {"Pad", grad_pad},
      {"Tile", grad_tile},
      {"Fill", grad_fill},
      {"BroadcastTo", grad_broadcast_to},
      {"SumToShape", grad_sum_to_shape},
      {"ExpandReduced", grad_expand_reduced},
      {"SliceGrad", grad_slice_grad},
      {"StridedSliceGrad", grad_strided_slice_grad},
      {"GatherGrad", grad_gather_grad},
      {"PadGrad", grad_pad_grad},
      {"TileGrad", grad_tile_grad},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
