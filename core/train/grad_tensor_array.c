/* SPDX-License-Identifier: Apache-2.0 */
/* grad_tensor_array.c - gradients through TensorArrays (the logic of TensorFlow's
 * tensor_array_grad.py).
 *
 * The gradient of a forward TensorArray is another TensorArray of the same size, made by
 * TensorArrayGradV3 on first use and shared by every gradient op of that forward array.
 * What the forward pass reads, the backward pass writes (Read -> Write, Gather -> Scatter,
 * Stack -> Unstack), and what the forward pass writes, the backward pass reads (Write ->
 * Read, Scatter -> Gather, Unstack -> Stack). Flows carry the ordering backwards too: the
 * gradient of a reader's flow input is the flow of its gradient write, and several
 * readers' flows are summed (AddN) into the gradient of the flow they read, so a writer's
 * gradient reads only after every gradient of its element was written (and summed, since
 * writes to one index of a gradient array add up). Writers' gradients also wait for the
 * forward writer itself (the write barrier), so the gradient array copies the forward
 * array's final size and element shapes.
 *
 * Limitation: every gradient array uses the source "gradients", so two floe_gradients calls
 * over one TensorArray must not run in one step (their gradients would be summed).
 */
#include <string.h>

#include "train.h"

#define GRAD_SOURCE "gradients"

typedef struct GradTa {
  FloeOutput handle, flow;
} GradTa;

static FloeOutput in_(const FloeGradCtx *c, int i) { return c->node->inputs[i]; }

/* The gradient array of the forward handle, ordered after flow. */
static GradTa grad_array(FloeGradCtx *c, FloeOutput flow) {
  FloeNodeBuilder *b = floe__grad_begin(c, "TensorArrayGradV3");
  floe_node_add_input(b, in_(c, 0));
  floe_node_add_input(b, flow);
  floe_node_set_attr_string(b, "source", GRAD_SOURCE);
  FloeNode *n = floe_node_finish(b);
  GradTa g = {floe_out(n, 0), floe_out(n, 1)};
  return g;
}

/* dflow once the forward node has run (TF's write_barrier): a writer's gradient reads the
 * gradient array only after the forward write fixed its element's shape. */
static FloeOutput after_forward(FloeGradCtx *c, FloeOutput dflow) {
  FloeNodeBuilder *b = floe__grad_begin(c, "Identity");
  floe_node_add_input(b, dflow);
  floe_node_add_control_input(b, (FloeNode *)c->node);
  return floe_out(floe_node_finish(b), 0);
}

/* The shape of forward input i (rows: without its first dimension). */
static FloeShape input_shape(const FloeGradCtx *c, int i, bool rows) {
  FloeOutput in = in_(c, i);
  FloeShape s = in.node->out_shapes[in.index];
  if (!rows || s.rank < 1) return rows ? floe_shape_unknown() : s;
  for (int d = 1; d < s.rank; d++) s.dims[d - 1] = s.dims[d];
  s.rank--;
  return s;
}

/* A node reading the gradient array: op(handle, extra..., flow) of dtype, element_shape. */
static FloeOutput grad_read_op(FloeGradCtx *c, const char *op, GradTa g, const FloeOutput *extra,
                               int n_extra, FloeDType dtype, FloeShape elem) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  floe_node_add_input(b, g.handle);
  for (int i = 0; i < n_extra; i++) floe_node_add_input(b, extra[i]);
  floe_node_add_input(b, g.flow);
  floe_node_set_attr_type(b, "dtype", dtype);
  floe_node_set_attr_shape(b, "element_shape", elem);
  return floe_out(floe_node_finish(b), 0);
}

/* A node writing the gradient array: op(handle, extra..., flow) -> flow. */
static FloeOutput grad_write_op(FloeGradCtx *c, const char *op, GradTa g,
                                const FloeOutput *extra, int n_extra) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  floe_node_add_input(b, g.handle);
  for (int i = 0; i < n_extra; i++) floe_node_add_input(b, extra[i]);
  floe_node_add_input(b, g.flow);
  return floe_out(floe_node_finish(b), 0);
}

/* Read(handle, index, flow) -> value: write dy at index; its flow is the flow's gradient. */
static floe_code grad_read(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[2]) return FLOE_OK;
  GradTa g = grad_array(c, in_(c, 2));
  FloeOutput in[2] = {in_(c, 1), floe__grad_dy(c, 0)};
  c->dx[2] = grad_write_op(c, "TensorArrayWriteV3", g, in, 2);
  return FLOE_OK;
}

/* Gather(handle, indices, flow) -> value: scatter dy's rows to the indices (repeated
 * indices add up in the gradient array). */
static floe_code grad_gather(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[2]) return FLOE_OK;
  GradTa g = grad_array(c, in_(c, 2));
  FloeOutput in[2] = {in_(c, 1), floe__grad_dy(c, 0)};
  c->dx[2] = grad_write_op(c, "TensorArrayScatterV3", g, in, 2);
  return FLOE_OK;
}

/* Stack(handle, flow) -> value: unstack dy into the gradient array. */
static floe_code grad_stack(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[1]) return FLOE_OK;
  GradTa g = grad_array(c, in_(c, 1));
  FloeOutput dy = floe__grad_dy(c, 0);
  c->dx[1] = grad_write_op(c, "TensorArrayUnstackV3", g, &dy, 1);
  return FLOE_OK;
}

/* Write(handle, index, value, flow) -> flow: value's gradient is the gradient array's
 * element at index; the flow's gradient passes through. */
static floe_code grad_write(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dflow = floe__grad_dy(c, 0);
  if (c->need_dx[2]) {
    GradTa g = grad_array(c, after_forward(c, dflow));
    FloeOutput index = in_(c, 1);
    c->dx[2] = grad_read_op(c, "TensorArrayReadV3", g, &index, 1, floe__grad_input_dtype(c, 2),
                            input_shape(c, 2, false));
  }
  if (c->need_dx[3]) c->dx[3] = dflow;
  return FLOE_OK;
}

/* Scatter(handle, indices, value, flow) -> flow: value's gradient gathers the indices. */
static floe_code grad_scatter(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dflow = floe__grad_dy(c, 0);
  if (c->need_dx[2]) {
    GradTa g = grad_array(c, after_forward(c, dflow));
    FloeOutput indices = in_(c, 1);
    c->dx[2] = grad_read_op(c, "TensorArrayGatherV3", g, &indices, 1,
                            floe__grad_input_dtype(c, 2), input_shape(c, 2, true));
  }
  if (c->need_dx[3]) c->dx[3] = dflow;
  return FLOE_OK;
}

static bool same_known_shape(FloeOutput a, FloeOutput b) {
  FloeShape x = floe_node_output_shape(a.node, a.index);
  FloeShape y = floe_node_output_shape(b.node, b.index);
  if (x.rank < 0 || x.rank != y.rank) return false;
  for (int i = 0; i < x.rank; i++)
    if (x.dims[i] < 0 || x.dims[i] != y.dims[i]) return false;
  return true;
}

/* Unstack(handle, value, flow) -> flow: value's gradient stacks the gradient array, whose
 * size may exceed value's rows (an unstack into a larger array): then the first rows. */
static floe_code grad_unstack(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dflow = floe__grad_dy(c, 0);
  if (c->need_dx[1]) {
    GradTa g = grad_array(c, after_forward(c, dflow));
    FloeOutput value = in_(c, 1);
    FloeOutput all = grad_read_op(c, "TensorArrayStackV3", g, NULL, 0,
                                  floe__grad_input_dtype(c, 1), input_shape(c, 1, true));
    if (all.node && !same_known_shape(all, value)) {
      FloeOutput shape = floe__grad_shape_of(c, value);
      FloeOutput begin = floe__grad_unary(c, "ZerosLike", shape);
      FloeNodeBuilder *b = floe__grad_begin(c, "Slice");
      floe_node_add_input(b, all);
      floe_node_add_input(b, begin);
      floe_node_add_input(b, shape);
      all = floe_out(floe_node_finish(b), 0);
    }
    c->dx[1] = all;
  }
  if (c->need_dx[2]) c->dx[2] = dflow;
  return FLOE_OK;
}

/* Concat(handle, flow) -> (value, lengths): split dy into the gradient array by lengths. */
static floe_code grad_concat(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[1] || !c->dy[0].node) return FLOE_OK;
  GradTa g = grad_array(c, in_(c, 1));
  FloeOutput in[2] = {c->dy[0], floe_out((FloeNode *)c->node, 1)};
  c->dx[1] = grad_write_op(c, "TensorArraySplitV3", g, in, 2);
  return FLOE_OK;
}

/* Split(handle, value, lengths, flow) -> flow: value's gradient concatenates the gradient
 * array (its elements have the split's row counts). */
static floe_code grad_split(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dflow = floe__grad_dy(c, 0);
  if (c->need_dx[1]) {
    GradTa g = grad_array(c, after_forward(c, dflow));
    FloeNodeBuilder *b = floe__grad_begin(c, "TensorArrayConcatV3");
    floe_node_add_input(b, g.handle);
    floe_node_add_input(b, g.flow);
    floe_node_set_attr_type(b, "dtype", floe__grad_input_dtype(c, 1));
    floe_node_set_attr_shape(b, "element_shape_except0", input_shape(c, 1, true));
    c->dx[1] = floe_out(floe_node_finish(b), 0);
  }
  if (c->need_dx[3]) c->dx[3] = dflow;
  return FLOE_OK;
}

floe_code floe__grads_register_tensor_array(FloeStatus *st) {
  static const struct {
    const char *op;
    FloeGradFn fn; /* NULL: not differentiable */
  } table[] = {
      {"TensorArrayReadV3", grad_read},
      {"TensorArrayGatherV3", grad_gather},
      {"TensorArrayStackV3", grad_stack},
      {"TensorArrayWriteV3", grad_write},
      {"TensorArrayScatterV3", grad_scatter},
      {"TensorArrayUnstackV3", grad_unstack},
      {"TensorArrayConcatV3", grad_concat},
      {"TensorArraySplitV3", grad_split},
      /* Handles, sizes and stacks carry no gradient (loop gradients pop what the forward
       * loop pushed; they do not differentiate through the pushes). */
      {"TensorArrayV3", NULL},
      {"TensorArraySizeV3", NULL},
      {"TensorArrayCloseV3", NULL},
      {"TensorArrayGradV3", NULL},
      {"StackV2", NULL},
      {"StackPushV2", NULL},
      {"StackPopV2", NULL},
      {"StackCloseV2", NULL},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(table); i++) {
    floe_code rc = floe__grad_register(table[i].op, table[i].fn, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
