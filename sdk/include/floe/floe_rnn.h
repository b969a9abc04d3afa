/* SPDX-License-Identifier: Apache-2.0 */
/* floe_rnn.h - recurrent cells: an LSTM cell built as one fused LSTMCell op or from primitive
 * ops, and its weights as variables. Included by floe.h.
 *
 * Same conventions as floe_train.h: every builder adds ordinary ops to the graph (visible in
 * floe_graph_write_dot and the graph file), records the graph's sticky error and returns
 * invalid outputs (node NULL) on failure, so user code checks floe_graph_status() once. Nodes
 * belong to the graph; nothing returned here needs freeing. Graph builders are not
 * thread-safe for one graph (like every floe_node_* call).
 *
 * Layout (PyTorch's nn.LSTM, gate order i, f, g, o): x [B,I], h and c [B,H], w [I+H,4H] (the
 * input's weights in rows 0..I-1, then the hidden state's: PyTorch's weight_ih and
 * weight_hh concatenated along their second dim and transposed), b [4H] (PyTorch's
 * bias_ih + bias_hh).
 *   gates = [x, h] @ w + b
 *   i = sigmoid(gates[:, 0:H])   f = sigmoid(gates[:, H:2H] + forget_bias)
 *   g = tanh(gates[:, 2H:3H])    o = sigmoid(gates[:, 3H:4H])
 *   c' = f * c + i * g           h' = o * tanh(c')
 */
#ifndef FLOE_RNN_H
#define FLOE_RNN_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state an LSTM cell carries from one step to the next (both [batch, hidden]). */
typedef struct FloeLSTMState {
  FloeOutput h;
  FloeOutput c;
} FloeLSTMState;

typedef enum FloeLSTMFused {
  /* The fused op when floe_runtime_default() has a kernel for LSTMCell on some device and
   * the dtype is f32 or f64; otherwise primitive ops. Decided when the cell is built (which
   * creates the default runtime if it does not exist yet): a graph built here and run on a
   * runtime without the kernel fails at run time with "no kernel" (build it with
   * FLOE_LSTM_FUSED_NEVER for such a runtime). */
  FLOE_LSTM_FUSED_AUTO = 0,
  FLOE_LSTM_FUSED_ALWAYS = 1, /* one LSTMCell node (f32 and f64 only) */
  FLOE_LSTM_FUSED_NEVER = 2   /* Concat, MatMul, BiasAdd, Split, Sigmoid, Tanh, Mul, Add */
} FloeLSTMFused;

typedef struct FloeLSTMOptions {
  size_t struct_size;  /* sizeof(FloeLSTMOptions) */
  FloeLSTMFused fused; /* FLOE_LSTM_FUSED_AUTO */
  double forget_bias;  /* added to the forget gate's pre-activation; 0 (PyTorch's) */
} FloeLSTMOptions;

/* Fills the defaults above. */
FLOE_API void floe_lstm_options_init(FloeLSTMOptions *o);

/* One step of an LSTM cell: the new state from input x [B,I], the previous state prev and
 * the weights w [I+H,4H], b [4H] (all of one float dtype). opts may be NULL (defaults).
 * Nodes are added under "<name>/" (name NULL: "lstm_cell"; a name built again gets fresh
 * node names, "<name>/LSTMCell_1", so one name may serve every step of an unrolled loop):
 * fused, the single node "<name>/LSTMCell" (outputs h, c and the gate activations that its
 * gradient reads); primitive, "<name>/concat", "<name>/MatMul", "<name>/BiasAdd",
 * "<name>/split", "<name>/i", "<name>/f", "<name>/g", "<name>/o", "<name>/c", "<name>/h" and
 * the constants and products between them. Shapes known when the cell is built must agree
 * (the error names the cell and the shapes); unknown ones are checked when it runs. Both
 * forms are differentiable by floe_gradients; the fused one has no second derivative. */
FLOE_API FloeLSTMState floe_lstm_cell(FloeGraph *g, const char *name, FloeOutput x,
                                      FloeLSTMState prev, FloeOutput w, FloeOutput b,
                                      const FloeLSTMOptions *opts);

/* The weights of a cell as trainable variables (floe_variable of floe_train.h) into *w
 * and *b (either may be NULL): "<name>/kernel" [input_size + hidden_size, 4 * hidden_size]
 * and "<name>/bias" [4 * hidden_size], both uniform in [-1/sqrt(hidden_size),
 * 1/sqrt(hidden_size)) like PyTorch's nn.LSTM, drawn from seed (0: a seed per process; the
 * variable's name is mixed in, so kernel and bias differ). name NULL: "lstm_cell". Building
 * the same name again gives the same variables. dtype: f32, f64, f16 or bf16; sizes >= 1.
 * On failure both are invalid (nodes NULL) and the sticky error is set. (Out-parameters,
 * because floe.h includes this header before floe_train.h defines FloeVariable when a user
 * includes floe_train.h first.) */
struct FloeVariable;
FLOE_API void floe_lstm_weights(FloeGraph *g, const char *name, FloeDType dtype,
                                int64_t input_size, int64_t hidden_size, int64_t seed,
                                struct FloeVariable *w, struct FloeVariable *b);

/* ---- dynamic RNN (core/train/dynamic_rnn.c) ---- */

typedef struct FloeDynamicRNNOptions {
  size_t struct_size;       /* sizeof(FloeDynamicRNNOptions) */
  int parallel_iterations;  /* of the loop; 0: 2 (steps depend on each other anyway) */
  FloeLSTMOptions cell;     /* the cell's options */
  int project_inputs;       /* with the fused cell and a static input size: 1, x @ w[0:I] + b
                               for all T steps and B rows in one product before the loop (faster
                               when most row-steps run; holds [T, B, 4H] and, training, its
                               gradient); 0, each step multiplies the x rows still running in
                               the loop (less memory, and less work on padded batches); -1
                               (default): 1 when no lengths are given, else 0 */
} FloeDynamicRNNOptions;

FLOE_API void floe_dynamic_rnn_options_init(FloeDynamicRNNOptions *opts);

/* An LSTM run over inputs [T, B, I] (time-major) with floe_while_loop: step t reads
 * inputs[t], and the loop stops after the longest sequence. lengths: i32 [B] sorted
 * longest first (NULL node: every row runs T steps); at step t only the rows with
 * lengths > t are computed (no work past a sequence's own length) and the others keep
 * their state. Returns outputs [T, B, H] (zeros past each row's length); *final (may be
 * NULL) gets each row's state after its last step. init: [B, H] each; w, b as for
 * floe_lstm_cell. Nodes are named "<name>/..."; on error the graph's sticky error is set
 * and the outputs are invalid. */
FLOE_API FloeOutput floe_dynamic_lstm(FloeGraph *g, const char *name, FloeOutput inputs,
                                      FloeOutput lengths, FloeLSTMState init, FloeOutput w,
                                      FloeOutput b, const FloeDynamicRNNOptions *opts,
                                      FloeLSTMState *final);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_RNN_H */
