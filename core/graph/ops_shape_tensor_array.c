/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_tensor_array.c - shape functions of TensorArrays and stacks (ops_rnn.def).
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* ---- TensorArrays and stacks (ops_rnn.def) ---- */

/* What both a and b say (they are compatible). */
static FloeShape shape_merge(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0) return *b;
  FloeShape m = *a;
  for (int i = 0; b->rank >= 0 && i < m.rank; i++)
    if (m.dims[i] < 0) m.dims[i] = b->dims[i];
  return m;
}

static floe_code need_scalar(FloeShapeContext *sctx, int i, const char *what) {
  const FloeShape *s = &sctx->input_shapes[i];
  if (s->rank > 0)
    return fail(sctx, "%s %s must be a scalar, got shape %s", op_name(sctx), what,
                SHAPE_STR(*s));
  return FLOE_OK;
}

/* The element shape a reading op produces: its element_shape attribute merged with the
 * declaration of the TensorArray behind input 0. */
static floe_code ta_read_elem(FloeShapeContext *sctx, FloeShape *elem, int64_t *size) {
  FloeDType dt;
  FloeShape decl;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, size);
  const FloeAttrValue *v = attr_of(sctx, "element_shape", FLOE_ATTR_SHAPE);
  FloeShape own = v ? v->u.shape : unknown_rank();
  if (!shapes_compatible(&own, &decl))
    return fail(sctx, "%s element_shape %s contradicts the TensorArray's element shape %s",
                op_name(sctx), SHAPE_STR(own), SHAPE_STR(decl));
  *elem = shape_merge(&own, &decl);
  return FLOE_OK;
}

/* A value written as one element (or, rows, each row of it) must fit the declaration. */
static floe_code ta_check_value(FloeShapeContext *sctx, const FloeShape *value, bool rows) {
  FloeDType dt;
  FloeShape decl;
  int64_t size;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, &size);
  FloeShape elem = *value;
  if (rows && value->rank >= 0) {
    elem.rank = value->rank - 1;
    for (int i = 0; i < elem.rank; i++) elem.dims[i] = value->dims[i + 1];
  }
  if (!shapes_compatible(&elem, &decl))
    return fail(sctx, "%s: the value's %s %s does not match the TensorArray's element shape %s",
                op_name(sctx), rows ? "rows have shape" : "shape is", SHAPE_STR(elem),
                SHAPE_STR(decl));
  return FLOE_OK;
}

/* [n] ++ elem, or unknown when elem's rank is. */
static FloeShape rows_of(int64_t n, const FloeShape *elem) {
  if (elem->rank < 0 || elem->rank >= FLOE_MAX_DIMS) return unknown_rank();
  FloeShape s;
  s.rank = elem->rank + 1;
  s.dims[0] = n;
  for (int i = 0; i < elem->rank; i++) s.dims[i + 1] = elem->dims[i];
  return s;
}

floe_code floe__shape_tensor_array(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = need_scalar(sctx, 0, "size");
  if (c != FLOE_OK) return c;
  int64_t n;
  if (const_scalar(sctx, 0, &n) && n < 0)
    return fail(sctx, "TensorArrayV3 size must be >= 0, got %lld", (long long)n);
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_ta_write(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c;
  if ((c = need_scalar(sctx, 1, "index")) != FLOE_OK ||
      (c = need_scalar(sctx, 3, "flow_in")) != FLOE_OK ||
      (c = ta_check_value(sctx, &sctx->input_shapes[2], false)) != FLOE_OK)
    return c;
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_ta_read(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t size;
  floe_code c = need_scalar(sctx, 1, "index");
  if (c == FLOE_OK) c = ta_read_elem(sctx, &sctx->output_shapes[0], &size);
  return c;
}

floe_code floe__shape_ta_gather(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t n, size;
  FloeShape elem;
  floe_code c = vector_len(sctx, 1, "TensorArrayGatherV3 indices", &n);
  if (c == FLOE_OK) c = ta_read_elem(sctx, &elem, &size);
  if (c == FLOE_OK) sctx->output_shapes[0] = rows_of(n, &elem);
  return c;
}

floe_code floe__shape_ta_scatter(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t n;
  const FloeShape *v = &sctx->input_shapes[2];
  floe_code c = vector_len(sctx, 1, "TensorArrayScatterV3 indices", &n);
  if (c != FLOE_OK) return c;
  if (v->rank == 0)
    return fail(sctx, "TensorArrayScatterV3 value must have rank >= 1 (one row per index), "
                      "got a scalar");
  int64_t rows;
  if (v->rank > 0 && !merge_dim(n, v->dims[0], &rows))
    return fail(sctx, "TensorArrayScatterV3 has %lld indices but the value %s has %lld rows",
                (long long)n, SHAPE_STR(*v), (long long)v->dims[0]);
  if ((c = ta_check_value(sctx, v, true)) != FLOE_OK) return c;
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_ta_stack(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t size;
  FloeShape elem;
  floe_code c = ta_read_elem(sctx, &elem, &size);
  if (c == FLOE_OK) sctx->output_shapes[0] = rows_of(size, &elem);
  return c;
}

floe_code floe__shape_ta_concat(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeDType dt;
  FloeShape decl;
  int64_t size;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, &size);
  const FloeAttrValue *v = attr_of(sctx, "element_shape_except0", FLOE_ATTR_SHAPE);
  FloeShape rest = v ? v->u.shape : unknown_rank();
  if (decl.rank == 0)
    return fail(sctx, "TensorArrayConcatV3: the TensorArray holds scalars, which cannot be "
                      "concatenated (use TensorArrayStackV3)");
  if (decl.rank >= 1) {
    FloeShape tail = unknown_rank();
    tail.rank = decl.rank - 1;
    for (int i = 0; i < tail.rank; i++) tail.dims[i] = decl.dims[i + 1];
    if (!shapes_compatible(&rest, &tail))
      return fail(sctx, "TensorArrayConcatV3 element_shape_except0 %s contradicts the "
                        "TensorArray's element shape %s", SHAPE_STR(rest), SHAPE_STR(decl));
    rest = shape_merge(&rest, &tail);
  }
  sctx->output_shapes[0] = rows_of(-1, &rest);
  int64_t n = size;
  sctx->output_shapes[1] = floe_shape_make(1, &n);
  return FLOE_OK;
}

floe_code floe__shape_ta_split(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *v = &sctx->input_shapes[1], *l = &sctx->input_shapes[2];
  if (v->rank == 0)
    return fail(sctx, "TensorArraySplitV3 value must have rank >= 1 (its rows are cut into the "
                      "elements), got a scalar");
  if (l->rank >= 0 && l->rank != 1)
    return fail(sctx, "TensorArraySplitV3 lengths must be a vector (rows per element), got "
                      "shape %s", SHAPE_STR(*l));
  floe_code c = need_scalar(sctx, 3, "flow_in");
  if (c == FLOE_OK) sctx->output_shapes[0] = floe_shape_scalar();
  return c;
}

floe_code floe__shape_ta_unstack(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *v = &sctx->input_shapes[1];
  if (v->rank == 0)
    return fail(sctx, "TensorArrayUnstackV3 value must have rank >= 1 (its rows become the "
                      "elements), got a scalar");
  floe_code c = ta_check_value(sctx, v, true);
  if (c == FLOE_OK) sctx->output_shapes[0] = floe_shape_scalar();
  return c;
}

floe_code floe__shape_ta_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_stack_push(const FloeHostApi *host, FloeShapeContext *sctx) {
  sctx->output_shapes[0] = sctx->input_shapes[1];
  return FLOE_OK;
}

floe_code floe__shape_stack_pop(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "elem_shape", FLOE_ATTR_SHAPE);
  sctx->output_shapes[0] = v ? v->u.shape : unknown_rank();
  return FLOE_OK;
}
