/* grad_rnn.c - gradient functions of the recurrent-cell ops (ops_rnn.def). The primitive-op
 * cell of rnn.c needs none: its ops have their own. */
#include "internal.h"

/* LSTMCell: one LSTMCellGrad node for the gradients reaching h and c. Its act output is
 * not differentiable (as TensorFlow's LSTMBlockCell's gate outputs): a gradient reaching
 * only act flows no further. */
static floe_code grad_lstm_cell(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->dy[0].node && !c->dy[1].node) return FLOE_OK;
  FloeNodeBuilder *b = floe__grad_begin(c, "LSTMCellGrad");
  for (int k = 0; k < 4; k++) floe_node_add_input(b, c->node->inputs[k]); /* x, h, c, w */
  floe_node_add_input(b, floe_out((FloeNode *)c->node, 1));                /* c */
  floe_node_add_input(b, floe_out((FloeNode *)c->node, 2));                /* act */
  floe_node_add_input(b, floe__grad_dy(c, 0));
  floe_node_add_input(b, floe__grad_dy(c, 1));
  FloeNode *g = floe_node_finish(b);
  /* Outputs dx, dh_prev, dc_prev, dw, db line up with inputs x, h_prev, c_prev, w, b. */
  for (int k = 0; k < 5; k++)
    if (c->need_dx[k]) c->dx[k] = floe_out(g, k);
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
  return rc;
}
