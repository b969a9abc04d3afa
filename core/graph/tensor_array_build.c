/* SPDX-License-Identifier: Apache-2.0 */
/* tensor_array_build.c - the graph side of TensorArrays: the SDK builders of
 * floe_tensor_array.h, and what the graph says statically about the array behind a handle
 * (its dtype, element shape and size), which the builders, the shape functions of
 * ops_rnn.def and the gradient functions share.
 */
#include <stddef.h>
#include <string.h>

#include "graph.h"

/* Ops that pass their input 0 through unchanged on their outputs (control flow moves a
 * handle into and out of loops with them). */
static bool passes_through(const char *op) {
  static const char *const ops[] = {"Identity", "Enter", "Exit", "Switch", "Merge",
                                    "NextIteration"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (strcmp(op, ops[i]) == 0) return true;
  return false;
}

/* Node input i's value when it is a Const integer scalar. */
static bool const_int_input(const FloeNode *n, int i, int64_t *out) {
  const FloeNode *src = n->inputs[i].node;
  if (!src || strcmp(src->op->name, "Const") != 0) return false;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  const FloeTensor *t = v && v->kind == FLOE_ATTR_TENSOR ? v->u.tensor : NULL;
  if (!t || t->num_elements != 1 || !floe__tensor_on_host(t)) return false;
  if (t->dtype == FLOE_I32) *out = *(const int32_t *)floe_tensor_data(t);
  else if (t->dtype == FLOE_I64) *out = *(const int64_t *)floe_tensor_data(t);
  else return false;
  return true;
}

const FloeNode *floe__ta_static_info(FloeOutput handle, FloeDType *dtype, FloeShape *elem,
                                     int64_t *size) {
  *dtype = FLOE_DTYPE_INVALID;
  *elem = floe_shape_unknown();
  *size = -1;
  const FloeNode *n = handle.node;
  /* Bounded: a loop's back edge (NextIteration into Merge) must not spin forever. */
  for (int hops = 0; n && hops < 64; hops++) {
    const char *op = n->op->name;
    if (strcmp(op, "TensorArrayV3") == 0) {
      const FloeAttrValue *dt = floe__attrs_get(&n->attrs, "dtype");
      const FloeAttrValue *es = floe__attrs_get(&n->attrs, "element_shape");
      const FloeAttrValue *dyn = floe__attrs_get(&n->attrs, "dynamic_size");
      if (dt && dt->kind == FLOE_ATTR_TYPE) *dtype = dt->u.type;
      if (es && es->kind == FLOE_ATTR_SHAPE) *elem = es->u.shape;
      int64_t k;
      if (!(dyn && dyn->kind == FLOE_ATTR_BOOL && dyn->u.b) && const_int_input(n, 0, &k) &&
          k >= 0)
        *size = k;
      return n;
    }
    /* A gradient array has its forward array's dtype, element shape and size. */
    if (strcmp(op, "TensorArrayGradV3") != 0 && !passes_through(op)) return NULL;
    if (n->num_inputs < 1) return NULL;
    n = n->inputs[0].node;
  }
  return NULL;
}

/* ---- builders ---- */

static FloeTensorArray invalid_ta(void) {
  FloeTensorArray ta = {{NULL, 0}, {NULL, 0}};
  return ta;
}

void floe_tensor_array_options_init(FloeTensorArrayOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->element_shape = floe_shape_unknown();
  opts->clear_after_read = 1;
}

FloeTensorArray floe_tensor_array(FloeGraph *g, const char *name, FloeDType dtype,
                                  FloeOutput size, const FloeTensorArrayOptions *opts) {
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  if (opts && opts->struct_size < offsetof(FloeTensorArrayOptions, element_shape) +
                                      sizeof opts->element_shape) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_tensor_array '%s': options are too short (struct_size %zu); fill "
                     "them with floe_tensor_array_options_init",
                     name ? name : "TensorArrayV3", opts->struct_size);
    return invalid_ta();
  }
  /* Only the fields the caller's struct has (it may come from an older header). */
  if (opts) memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
  o.struct_size = sizeof o;
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayV3", name);
  floe_node_add_input(b, size);
  floe_node_set_attr_type(b, "dtype", dtype);
  floe_node_set_attr_shape(b, "element_shape", o.element_shape);
  floe_node_set_attr_bool(b, "dynamic_size", o.dynamic_size != 0);
  floe_node_set_attr_bool(b, "clear_after_read", o.clear_after_read != 0);
  if (o.tensor_array_name) floe_node_set_attr_string(b, "tensor_array_name", o.tensor_array_name);
  FloeNode *n = floe_node_finish(b);
  if (!n) return invalid_ta();
  FloeTensorArray ta = {floe_out(n, 0), floe_out(n, 1)};
  return ta;
}

/* The dtype of the elements behind ta's handle; invalid with the sticky error set when the
 * graph cannot tell (the handle does not come from a TensorArrayV3 node). */
static FloeDType elem_dtype(FloeGraph *g, FloeTensorArray ta, const char *what) {
  FloeDType dt;
  FloeShape elem;
  int64_t size;
  if (!ta.handle.node || floe_graph_status(g) != FLOE_OK) return FLOE_DTYPE_INVALID;
  if (!floe__ta_static_info(ta.handle, &dt, &elem, &size) || dt == FLOE_DTYPE_INVALID)
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s: cannot tell the dtype of the TensorArray behind '%s:%d' (%s): its "
                     "handle must come from a TensorArrayV3 node (through TensorArrayGradV3, "
                     "Identity or loop ops only)",
                     what, ta.handle.node->name, ta.handle.index, ta.handle.node->op->name);
  return dt;
}

/* An op of (handle, extra..., flow) with one output. */
static FloeNode *ta_op(FloeGraph *g, const char *op, const char *name, FloeTensorArray ta,
                       const FloeOutput *extra, int n_extra, FloeDType read_dtype) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, ta.handle);
  for (int i = 0; i < n_extra; i++) floe_node_add_input(b, extra[i]);
  floe_node_add_input(b, ta.flow);
  if (read_dtype != FLOE_DTYPE_INVALID) floe_node_set_attr_type(b, "dtype", read_dtype);
  return floe_node_finish(b);
}

static FloeTensorArray with_flow(FloeTensorArray ta, FloeNode *n) {
  if (!n) return invalid_ta();
  ta.flow = floe_out(n, 0);
  return ta;
}

FloeTensorArray floe_ta_write(FloeGraph *g, const char *name, FloeTensorArray ta,
                              FloeOutput index, FloeOutput value) {
  FloeOutput in[2] = {index, value};
  return with_flow(ta, ta_op(g, "TensorArrayWriteV3", name, ta, in, 2, FLOE_DTYPE_INVALID));
}

FloeOutput floe_ta_read(FloeGraph *g, const char *name, FloeTensorArray ta, FloeOutput index) {
  FloeDType dt = elem_dtype(g, ta, "floe_ta_read");
  return floe_out(ta_op(g, "TensorArrayReadV3", name, ta, &index, 1, dt), 0);
}

FloeOutput floe_ta_gather(FloeGraph *g, const char *name, FloeTensorArray ta,
                          FloeOutput indices) {
  FloeDType dt = elem_dtype(g, ta, "floe_ta_gather");
  return floe_out(ta_op(g, "TensorArrayGatherV3", name, ta, &indices, 1, dt), 0);
}

FloeTensorArray floe_ta_scatter(FloeGraph *g, const char *name, FloeTensorArray ta,
                                FloeOutput indices, FloeOutput value) {
  FloeOutput in[2] = {indices, value};
  return with_flow(ta, ta_op(g, "TensorArrayScatterV3", name, ta, in, 2, FLOE_DTYPE_INVALID));
}

FloeOutput floe_ta_stack(FloeGraph *g, const char *name, FloeTensorArray ta) {
  FloeDType dt = elem_dtype(g, ta, "floe_ta_stack");
  return floe_out(ta_op(g, "TensorArrayStackV3", name, ta, NULL, 0, dt), 0);
}

FloeOutput floe_ta_concat(FloeGraph *g, const char *name, FloeTensorArray ta,
                          FloeOutput *lengths) {
  FloeDType dt = elem_dtype(g, ta, "floe_ta_concat");
  FloeNode *n = ta_op(g, "TensorArrayConcatV3", name, ta, NULL, 0, dt);
  if (lengths) *lengths = floe_out(n, 1);
  return floe_out(n, 0);
}

FloeTensorArray floe_ta_split(FloeGraph *g, const char *name, FloeTensorArray ta,
                              FloeOutput value, FloeOutput lengths) {
  FloeOutput in[2] = {value, lengths};
  return with_flow(ta, ta_op(g, "TensorArraySplitV3", name, ta, in, 2, FLOE_DTYPE_INVALID));
}

FloeTensorArray floe_ta_unstack(FloeGraph *g, const char *name, FloeTensorArray ta,
                                FloeOutput value) {
  return with_flow(ta, ta_op(g, "TensorArrayUnstackV3", name, ta, &value, 1, FLOE_DTYPE_INVALID));
}

FloeOutput floe_ta_size(FloeGraph *g, const char *name, FloeTensorArray ta) {
  return floe_out(ta_op(g, "TensorArraySizeV3", name, ta, NULL, 0, FLOE_DTYPE_INVALID), 0);
}

FloeNode *floe_ta_close(FloeGraph *g, const char *name, FloeTensorArray ta) {
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayCloseV3", name);
  floe_node_add_input(b, ta.handle);
  return floe_node_finish(b);
}
