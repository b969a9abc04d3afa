/* SPDX-License-Identifier: Apache-2.0 */
/* grad_rnn.c - gradient functions of the recurrent-cell ops (ops_rnn.def). The primitive-op
 * cell of rnn.c needs none: its ops have their own. */
#include "train.h"

/* A backprop node `op` of the cell c->node reading the cell's first n inputs (without the
 * first, gates_x, when a transposed weight w is given, which follows them), the cell's c and
 * act outputs, and the gradients reaching h and c (zeros for one no gradient reaches). */
static FloeNode *backprop_node(FloeGradCtx *c, const char *op, int n, FloeOutput w) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  for (int k = w.node ? 1 : 0; k < n; k++) floe_node_add_input(b, c->node->inputs[k]);
  if (w.node) {
    floe_node_add_input(b, w);
    floe_node_set_attr_bool(b, "w_transposed", true);
  }
  floe_node_add_input(b, floe_out((FloeNode *)c->node, 1)); /* c */
  floe_node_add_input(b, floe_out((FloeNode *)c->node, 2)); /* act */
  floe_node_add_input(b, floe__grad_dy(c, 0));
  floe_node_add_input(b, floe__grad_dy(c, 1));
  return floe_node_finish(b);
}

/* A weight's gradient a^T @ d_gates (the form grad_control.c moves out of a loop). */
static FloeOutput weight_grad(FloeGradCtx *c, FloeOutput a, FloeOutput d_gates) {
  FloeNodeBuilder *b = floe__grad_begin(c, "MatMul");
  floe_node_add_input(b, a);
  floe_node_add_input(b, d_gates);
  floe_node_set_attr_bool(b, "transpose_a", true);
  return floe_out(floe_node_finish(b), 0);
}

/* LSTMCell: one LSTMCellBackprop node for the gradients reaching h and c, giving dx, dh_prev,
 * dc_prev and the gates' gradient d_gates [B,4H]; then dw = [x, h_prev]^T @ d_gates and
 * db = d_gates' column sums as graph ops. Inside a while loop's gradient those two are then
 * a MatMul and a Sum over per-iteration values, which grad_control.c computes once after the
 * backward loop over all iterations' rows (one large product instead of one K = B product
 * and one [I+H, 4H] accumulation per iteration). Its act output is not differentiable (as
 * TensorFlow's LSTMBlockCell's gate outputs): a gradient reaching only act flows no further. */
static floe_code grad_lstm_cell(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->dy[0].node && !c->dy[1].node) return FLOE_OK;
  FloeNode *g = backprop_node(c, "LSTMCellBackprop", 4, (FloeOutput){NULL, 0}); /* x, h, c, w */
  /* Outputs dx, dh_prev, dc_prev line up with inputs x, h_prev, c_prev. */
  for (int k = 0; k < 3; k++)
    if (c->need_dx[k]) c->dx[k] = floe_out(g, k);
  FloeOutput d_gates = floe_out(g, 3);
  if (c->need_dx[3]) {
    FloeOutput xh[2] = {c->node->inputs[0], c->node->inputs[1]};
    FloeNodeBuilder *b = floe__grad_begin(c, "Concat");
    floe_node_add_input_list(b, xh, 2);
    floe_node_add_input(b, floe__grad_scalar(c, FLOE_I32, 1));
    c->dx[3] = weight_grad(c, floe_out(floe_node_finish(b), 0), d_gates);
  }
  if (c->need_dx[4]) {
    const int64_t zero = 0;
    c->dx[4] = floe__grad_binary(c, "Sum", d_gates, floe__grad_i32_vec(c, &zero, 1));
  }
  return FLOE_OK;
}

/* LSTMCellRecurrent: LSTMCellRecurrentBackprop gives d_gates, which is gates_x's gradient,
 * dh_prev and dc_prev; w_h's is h_prev^T @ d_gates, a MatMul (made once after a loop, as
 * above). */
static floe_code grad_lstm_cell_recurrent(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->dy[0].node && !c->dy[1].node) return FLOE_OK;
  /* w_h^T: made once outside a loop (a loop gradient's invariant code motion), it turns the
   * per-step dh_prev = d_gates @ w_h^T into a plain product. */
  FloeNodeBuilder *b = floe__grad_begin(c, "Transpose");
  floe_node_add_input(b, c->node->inputs[3]);
  const int64_t perm[2] = {1, 0};
  floe_node_add_input(b, floe__grad_i32_vec(c, perm, 2));
  FloeOutput w_t = floe_out(floe_node_finish(b), 0);
  FloeNode *g = backprop_node(c, "LSTMCellRecurrentBackprop", 3, w_t); /* (gates_x), h, c */
  /* Outputs d_gates, dh_prev, dc_prev line up with inputs gates_x, h_prev, c_prev. */
  for (int k = 0; k < 3; k++)
    if (c->need_dx[k]) c->dx[k] = floe_out(g, k);
  if (c->need_dx[3]) c->dx[3] = weight_grad(c, c->node->inputs[1], floe_out(g, 0));
  return FLOE_OK;
}

/* Second derivatives of the cell would need an op of their own. */
static floe_code grad_lstm_cell_grad(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s) lies between the xs and the ys: the "
                         "second derivative of the fused LSTM cell is not supported; build the "
                         "cell from primitive ops (floe_lstm_cell with FLOE_LSTM_FUSED_NEVER) "
                         "or wrap the path in StopGradient",
                         n->name, n->op->name);
}

floe_code floe__grads_register_rnn(FloeStatus *st) {
  floe_code rc = floe__grad_register("LSTMCell", grad_lstm_cell, st);
  if (rc == FLOE_OK) rc = floe__grad_register("LSTMCellGrad", grad_lstm_cell_grad, st);
  if (rc == FLOE_OK) rc = floe__grad_register("LSTMCellBackprop", grad_lstm_cell_grad, st);
  if (rc == FLOE_OK) rc = floe__grad_register("LSTMCellRecurrent", grad_lstm_cell_recurrent, st);
  if (rc == FLOE_OK)
    rc = floe__grad_register("LSTMCellRecurrentBackprop", grad_lstm_cell_grad, st);
  return rc;
}
