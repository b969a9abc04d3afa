/* SPDX-License-Identifier: Apache-2.0 */
/* dynamic_rnn.c - floe_dynamic_lstm: an LSTM over variable-length sequences as one
 * floe_while_loop, in the spirit of tf.nn.dynamic_rnn and PyTorch's packed sequences.
 *
 * The inputs are unstacked into a TensorArray; iteration t reads step t, runs the cell on
 * the rows still inside their sequence and writes step t's outputs into another
 * TensorArray, stacked after the loop. With lengths sorted longest first, the rows still
 * running at step t are the first b_t = #{lengths > t}: the cell runs on those rows only
 * (Slice), the others keep their state (Concat), so no work is done past a sequence's own
 * length, and the loop stops after the longest one.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "train.h"

typedef struct DynArg {
  FloeTensorArray in, out;
  FloeOutput lengths;       /* i32 [B], or invalid: every row runs to the end */
  FloeOutput steps;         /* i32 scalar: iterations to run */
  FloeOutput w, b;
  FloeLSTMOptions cell;
  bool projected;           /* `in` holds x @ w_x + b per step; the cell takes w_h = w */
} DynArg;

/* The helper nodes below take the graph's default names. */
static FloeBuildScope dyn_scope(FloeGraph *g) {
  return (FloeBuildScope){.g = g, .fail = floe__build_fail_message,
                          .arg = "out of memory building a dynamic RNN"};
}

static FloeOutput i32_scalar(FloeGraph *g, int32_t v) {
  const FloeBuildScope s = dyn_scope(g);
  return floe__build_int(&s, NULL, FLOE_I32, v);
}

static FloeOutput i32_vector(FloeGraph *g, const int64_t *v, int n) {
  const FloeBuildScope s = dyn_scope(g);
  return floe__build_ints(&s, NULL, FLOE_I32, v, n);
}

static FloeOutput concat_rows(FloeGraph *g, FloeOutput a, FloeOutput b_) {
  FloeOutput parts[2] = {a, b_};
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", NULL);
  floe_node_add_input_list(b, parts, 2);
  floe_node_add_input(b, i32_scalar(g, 0));
  return floe_out(floe_node_finish(b), 0);
}

/* [s, 0] (or [0, s]) as an i32 vector from the scalar s. */
static FloeOutput pair_with_zero(FloeGraph *g, FloeOutput s, bool first) {
  FloeOutput s1 = floe_binary(g, "Reshape", NULL, s, i32_vector(g, (const int64_t[]){1}, 1));
  FloeOutput z = i32_vector(g, (const int64_t[]){0}, 1);
  return first ? concat_rows(g, s1, z) : concat_rows(g, z, s1);
}

static FloeOutput slice(FloeGraph *g, FloeOutput x, FloeOutput begin, FloeOutput size) {
  const FloeBuildScope s = {.g = g};
  return floe__build_op(&s, "Slice", NULL, (FloeOutput[]){x, begin, size}, 3);
}

static floe_code dyn_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], ((DynArg *)arg)->steps);
  return floe_graph_status(g);
}

/* One step of the cell on input rows x (the projected gates when a->projected). */
static FloeLSTMState step(FloeGraph *g, const DynArg *a, FloeOutput x, FloeLSTMState prev) {
  if (!a->projected) return floe_lstm_cell(g, NULL, x, prev, a->w, a->b, &a->cell);
  FloeNodeBuilder *b = floe_node_begin(g, "LSTMCellRecurrent", NULL);
  floe_node_add_input(b, x);
  floe_node_add_input(b, prev.h);
  floe_node_add_input(b, prev.c);
  floe_node_add_input(b, a->w);
  floe_node_set_attr_float(b, "forget_bias", a->cell.forget_bias);
  FloeNode *n = floe_node_finish(b);
  return (FloeLSTMState){floe_out(n, 0), floe_out(n, 1)};
}

/* v = [t, h, c, out_flow]. */
static floe_code dyn_body(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)n;
  DynArg *a = arg;
  FloeOutput x = floe_ta_read(g, NULL, a->in, v[0]);
  FloeLSTMState prev = {v[1], v[2]}, st;
  FloeOutput out;
  if (!a->lengths.node) {
    st = step(g, a, x, prev);
    out = st.h;
  } else {
    /* Rows still running: the first b_t (lengths sorted longest first). */
    FloeNodeBuilder *b = floe_node_begin(g, "Cast", NULL);
    floe_node_add_input(b, floe_binary(g, "Greater", NULL, a->lengths, v[0]));
    floe_node_set_attr_type(b, "DstT", FLOE_I32);
    FloeOutput running = floe_out(floe_node_finish(b), 0);
    b = floe_node_begin(g, "Sum", NULL);
    floe_node_add_input(b, running);
    floe_node_add_input(b, i32_scalar(g, 0));
    FloeOutput bt = floe_out(floe_node_finish(b), 0);
    const int64_t origin[2] = {0, 0}, all[2] = {-1, -1};
    FloeOutput zero2 = i32_vector(g, origin, 2), to_end = i32_vector(g, all, 2);
    FloeOutput head = pair_with_zero(g, bt, true); /* [b_t, 0] */
    FloeOutput head_size =
        floe_binary(g, "Add", NULL, head, i32_vector(g, (const int64_t[]){0, -1}, 2));
    FloeLSTMState act = {slice(g, v[1], zero2, head_size), slice(g, v[2], zero2, head_size)};
    st = step(g, a, slice(g, x, zero2, head_size), act);
    FloeOutput rest_h = slice(g, v[1], head, to_end), rest_c = slice(g, v[2], head, to_end);
    out = concat_rows(g, st.h, floe_unary(g, "ZerosLike", NULL, rest_h));
    st.h = concat_rows(g, st.h, rest_h);
    st.c = concat_rows(g, st.c, rest_c);
  }
  FloeTensorArray o = {a->out.handle, v[3]};
  o = floe_ta_write(g, NULL, o, v[0], out);
  next[0] = floe_binary(g, "Add", NULL, v[0], i32_scalar(g, 1));
  next[1] = st.h;
  next[2] = st.c;
  next[3] = o.flow;
  return floe_graph_status(g);
}

/* Whether the loop runs LSTMCellRecurrent on inputs projected beforehand: the fused cell is
 * wanted (always, or "auto" with a kernel for it in the default runtime), the dtype has it,
 * and the input size is static (w is cut at that row). */
static bool project_inputs(const FloeLSTMOptions *cell, FloeDType dt, const FloeShape *xs) {
  if ((dt != FLOE_F32 && dt != FLOE_F64) || xs->dims[2] < 0 || xs->dims[2] > INT32_MAX)
    return false;
  if (cell->fused == FLOE_LSTM_FUSED_ALWAYS) return true;
  return cell->fused == FLOE_LSTM_FUSED_AUTO && floe__lstm_kernel_present("LSTMCellRecurrent");
}

/* The inputs' projection x @ w[0:I] + b for every step at once, [T, B, 4H] from inputs
 * [T, B, I] (shape: theirs, i32): one [T*B, I] x [I, 4H] product before the loop (and, in
 * the gradient, one for dx and one for dw_x after it) instead of a B-row product per step.
 * *w becomes w[I:], the part the loop multiplies h by. */
static FloeOutput projection(FloeGraph *g, FloeOutput inputs, FloeOutput shape, int32_t in_size,
                             FloeOutput b, FloeOutput *w) {
  FloeOutput w_x = slice(g, *w, i32_vector(g, (const int64_t[]){0, 0}, 2),
                         i32_vector(g, (const int64_t[]){in_size, -1}, 2));
  *w = slice(g, *w, i32_vector(g, (const int64_t[]){in_size, 0}, 2),
             i32_vector(g, (const int64_t[]){-1, -1}, 2));
  FloeOutput flat =
      floe_binary(g, "Reshape", NULL, inputs, i32_vector(g, (const int64_t[]){-1, in_size}, 2));
  FloeOutput gx = floe_binary(g, "BiasAdd", NULL, floe_matmul(g, NULL, flat, w_x, 0, 0), b);
  FloeNodeBuilder *bb = floe_node_begin(g, "Shape", NULL);
  floe_node_add_input(bb, b);
  FloeOutput tb = slice(g, shape, i32_vector(g, (const int64_t[]){0}, 1),
                        i32_vector(g, (const int64_t[]){2}, 1));
  return floe_binary(g, "Reshape", NULL, gx,
                     concat_rows(g, tb, floe_out(floe_node_finish(bb), 0))); /* [T, B, 4H] */
}

void floe_dynamic_rnn_options_init(FloeDynamicRNNOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->parallel_iterations = 2;
  o->project_inputs = -1;
  floe_lstm_options_init(&o->cell);
}

FloeOutput floe_dynamic_lstm(FloeGraph *g, const char *name, FloeOutput inputs,
                             FloeOutput lengths, FloeLSTMState init, FloeOutput w, FloeOutput b,
                             const FloeDynamicRNNOptions *opts, FloeLSTMState *final) {
  FloeOutput bad = {NULL, 0};
  if (final) *final = (FloeLSTMState){bad, bad};
  if (!g || floe_graph_status(g) != FLOE_OK) return bad;
  FloeDynamicRNNOptions o;
  floe_dynamic_rnn_options_init(&o);
  if (opts) {
    o.parallel_iterations = opts->parallel_iterations > 0 ? opts->parallel_iterations : 2;
    o.cell = opts->cell;
    /* Callers built before the field existed pass a smaller struct: keep the default. */
    if (opts->struct_size >= offsetof(FloeDynamicRNNOptions, project_inputs) + sizeof(int))
      o.project_inputs = opts->project_inputs;
  }
  if (!name || !*name || !inputs.node || !init.h.node || !init.c.node || !w.node || !b.node) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_dynamic_lstm%s%s: needs a name, inputs, an initial state and the "
                     "weights (from a failed builder call?)",
                     name ? " " : "", name ? name : "");
    return bad;
  }
  const FloeShape *xs = &inputs.node->out_shapes[inputs.index];
  if (xs->rank != 3) {
    char buf[96];
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_dynamic_lstm '%s': inputs must be [time, batch, features], got %s",
                     name, floe_shape_str(xs, buf, sizeof buf));
    return bad;
  }
  if (lengths.node && lengths.node->out_dtypes[lengths.index] != FLOE_I32) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_dynamic_lstm '%s': lengths must be i32 [batch], got %s", name,
                     floe_dtype_name(lengths.node->out_dtypes[lengths.index]));
    return bad;
  }
  FloeDType dt = inputs.node->out_dtypes[inputs.index];
  char nm[256];
  /* T, the padded length, from the inputs' shape. */
  FloeNodeBuilder *bb = floe_node_begin(g, "Shape", NULL);
  floe_node_add_input(bb, inputs);
  FloeOutput shape = floe_out(floe_node_finish(bb), 0);
  FloeOutput t_total = slice(g, shape, i32_vector(g, (const int64_t[]){0}, 1),
                             i32_vector(g, (const int64_t[]){1}, 1));
  t_total = floe_binary(g, "Reshape", NULL, t_total, i32_vector(g, NULL, 0));
  FloeOutput steps = t_total;
  if (lengths.node) {
    bb = floe_node_begin(g, "Max", NULL);
    floe_node_add_input(bb, lengths);
    floe_node_add_input(bb, i32_scalar(g, 0));
    steps = floe_binary(g, "Minimum", NULL, floe_out(floe_node_finish(bb), 0), t_total);
  }
  /* Projecting every row of every step pays off when they all run (no lengths). */
  bool projected = (o.project_inputs > 0 || (o.project_inputs < 0 && !lengths.node)) &&
                   project_inputs(&o.cell, dt, xs);
  const FloeShape *ws = &w.node->out_shapes[w.index], *h0 = &init.h.node->out_shapes[init.h.index];
  if (ws->rank == 2 && h0->rank == 2 && ws->dims[0] >= 0 && h0->dims[1] >= 0 &&
      xs->dims[2] >= 0 && ws->dims[0] != xs->dims[2] + h0->dims[1]) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_dynamic_lstm '%s': w has %lld rows, but the inputs have %lld "
                     "features and the state %lld units: w must be [input + hidden, 4 * hidden]",
                     name, (long long)ws->dims[0], (long long)xs->dims[2], (long long)h0->dims[1]);
    return bad;
  }
  if (projected) inputs = projection(g, inputs, shape, (int32_t)xs->dims[2], b, &w);
  FloeTensorArrayOptions tao;
  floe_tensor_array_options_init(&tao);
  snprintf(nm, sizeof nm, "%s/inputs", name);
  FloeTensorArray in = floe_tensor_array(g, nm, dt, t_total, &tao);
  in = floe_ta_unstack(g, NULL, in, inputs);
  const FloeShape *hs = &init.h.node->out_shapes[init.h.index];
  if (hs->rank == 2) tao.element_shape = *hs;
  snprintf(nm, sizeof nm, "%s/outputs", name);
  FloeTensorArray out = floe_tensor_array(g, nm, dt, steps, &tao);
  if (floe_graph_status(g) != FLOE_OK) return bad;
  DynArg a = {in, out, lengths, steps, w, b, o.cell, projected};
  FloeOutput vars[4] = {i32_scalar(g, 0), init.h, init.c, out.flow}, res[4];
  FloeWhileOptions wo;
  floe_while_options_init(&wo);
  wo.parallel_iterations = o.parallel_iterations;
  /* The state's rows are cut and glued back each step: its batch dim is not static there. */
  FloeShape inv[4] = {floe_shape_scalar(), init.h.node->out_shapes[init.h.index],
                      init.c.node->out_shapes[init.c.index], floe_shape_scalar()};
  if (lengths.node) {
    if (inv[1].rank == 2) inv[1].dims[0] = -1;
    if (inv[2].rank == 2) inv[2].dims[0] = -1;
    wo.shape_invariants = inv;
  }
  if (floe_while_loop(g, name, dyn_cond, dyn_body, &a, vars, 4, &wo, res) != FLOE_OK) return bad;
  out.flow = res[3];
  FloeOutput stacked = floe_ta_stack(g, NULL, out);
  /* Back to T steps: the rows past the longest sequence are zeros. */
  FloeOutput outputs = stacked;
  if (lengths.node) {
    FloeOutput pad_t = pair_with_zero(g, floe_binary(g, "Sub", NULL, t_total, steps), false);
    FloeOutput zeros4 = i32_vector(g, (const int64_t[]){0, 0, 0, 0}, 4);
    FloeOutput flat = concat_rows(g, pad_t, zeros4); /* [0, T - steps, 0, 0, 0, 0] */
    FloeOutput paddings =
        floe_binary(g, "Reshape", NULL, flat, i32_vector(g, (const int64_t[]){3, 2}, 2));
    bb = floe_node_begin(g, "Pad", NULL);
    floe_node_add_input(bb, stacked);
    floe_node_add_input(bb, paddings);
    outputs = floe_out(floe_node_finish(bb), 0);
  }
  if (final) {
    final->h = res[1];
    final->c = res[2];
  }
  if (floe_graph_status(g) != FLOE_OK) return bad;
  return outputs;
}
