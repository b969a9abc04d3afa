/* SPDX-License-Identifier: Apache-2.0 */
/* train.h - libfloe's training layer (core/train/): automatic differentiation and the
 * standard set's gradient functions, variables, optimisers, layers, recurrent cells,
 * checkpoints and the export of frozen graphs. */
#ifndef FLOE__LAYER_TRAIN_H
#define FLOE__LAYER_TRAIN_H

#include "dist/dist.h"

/* ------------------------------------------------------------------------------------ */
/* gradients.c */
/* What a gradient function works with: the forward node, the gradients arriving at its
 * outputs, and the input gradients it produces. */
struct FloeGradCtx {
  FloeGraph *g;
  const FloeNode *node;   /* forward node */
  const FloeOutput *dy;   /* [node->num_outputs]; .node NULL: no gradient reaches output j */
  FloeOutput *dx;         /* [node->num_inputs], preset invalid; set those with a gradient */
  const char *scope;      /* "gradients/<node name>" */
  const bool *need_dx;    /* [node->num_inputs]: dx[i] is wanted (a float input on a path
                             from the xs); functions may skip building the others */
  FloeBuildScope build;   /* nodes "<scope>/<op>" made unique, on the forward node's device */
};
/* gradients.c: fills the registry with the standard set (the not-differentiable entries and
 * the functions of grad_*.c) once (idempotent, thread-safe). */
/* The container of per-task variables (TF's local variables: a replica's local step): the
 * replica device setter leaves them on the worker. */
#define FLOE__LOCAL_CONTAINER "local"
/* What floe_variable does not ask for: a container, and for a shard of a sharded variable,
 * the whole (name, shape) and where the shard lies in it (offset along axis). */
typedef struct FloeVarExtra {
  const char *container;   /* NULL: the default */
  const char *full_name;   /* NULL: not a shard */
  FloeShape full_shape;
  int axis;
  int64_t offset;
} FloeVarExtra;
/* variables.c: floe_variable with extras (x may be NULL). */
FloeVariable floe__variable_ex(FloeGraph *g, const char *name, FloeDType dtype, FloeShape shape,
                               FloeInitializer init, bool trainable, const FloeVarExtra *x);
/* An optimiser slot "name" (untrained) of variable primary (its VarHandleOp): a shard's slot
 * is a shard of the whole's slot ("<full_name>/<slot>"), so checkpoints hold it whole. */
FloeVariable floe__variable_slot(FloeGraph *g, const FloeNode *primary, const char *name,
                                 const char *slot, FloeDType dtype, FloeShape shape,
                                 FloeInitializer init);
/* variables.c: an untrained variable of container FLOE__LOCAL_CONTAINER (as
 * floe_variable_untrained otherwise). */
FloeVariable floe__variable_local(FloeGraph *g, const char *name, FloeDType dtype, FloeShape shape,
                                  FloeInitializer init);

floe_code floe__grads_init(FloeStatus *st);
/* grad_math.c, grad_nn.c, grad_array.c: called by floe__grads_init. */
floe_code floe__grads_register_math(FloeStatus *st);
floe_code floe__grads_register_nn(FloeStatus *st);
floe_code floe__grads_register_array(FloeStatus *st);
/* grad_math_signal.c: the ONNX math family's ops (ops_math_signal.def). */
floe_code floe__grads_register_math_signal(FloeStatus *st);
floe_code floe__grads_register_index(FloeStatus *st); /* grad_index.c */

/* Helpers for gradient functions (gradients.c). All record the graph's sticky error on
 * failure and return an invalid output, like the public builders. */
/* dy[j], or ZerosLike(output j) when no gradient reaches it. */
FloeOutput floe__grad_dy(FloeGradCtx *c, int j);
/* floe_node_begin with the unique name "<scope>/<op>" (then "<scope>/<op>_1", ...). */
FloeNodeBuilder *floe__grad_begin(FloeGradCtx *c, const char *op);
/* One-output ops under the scope. */
FloeOutput floe__grad_unary(FloeGradCtx *c, const char *op, FloeOutput x);
FloeOutput floe__grad_binary(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b);
FloeOutput floe__grad_cast(FloeGradCtx *c, FloeOutput x, FloeDType to);
/* op(ins[0..n)) with the forward node's attributes attrs (NULL-terminated; NULL: none)
 * copied; _begin_op leaves the builder to the caller to finish. */
FloeOutput floe__grad_op(FloeGradCtx *c, const char *op, const FloeOutput *ins, int n,
                         const char *const *attrs);
FloeNodeBuilder *floe__grad_begin_op(FloeGradCtx *c, const char *op, const FloeOutput *ins, int n,
                                     const char *const *attrs);
/* A scalar or 1-D constant of the node's dtype / i32 under the scope. */
FloeOutput floe__grad_scalar(FloeGradCtx *c, FloeDType dt, double v);
FloeOutput floe__grad_i32_vec(FloeGradCtx *c, const int64_t *v, int n);
/* The shape of x as an i32 vector: a Const when statically known, else a Shape node. */
FloeOutput floe__grad_shape_of(FloeGradCtx *c, FloeOutput x);
/* Sums g down to the shape of x (a broadcasting operand) with SumToShape; returns g when
 * both shapes are statically known and equal. */
FloeOutput floe__grad_sum_to(FloeGradCtx *c, FloeOutput g, FloeOutput x);
/* dx[0] = the gradients of every output (zeros where none arrives) concatenated along axis
 * (the gradient of a split). */
floe_code floe__grad_concat_outputs(FloeGradCtx *c, FloeOutput axis, FloeStatus *st);
/* The forward node's dtype / shape of an input or output. */
FloeDType floe__grad_input_dtype(const FloeGradCtx *c, int i);
/* The value of forward input i when its producer is a host Const, else NULL (borrowed
 * from the graph). */
const FloeTensor *floe__grad_const_input(const FloeGradCtx *c, int i);
/* Copies the forward node's attribute `name` (when it has one) onto b. */
void floe__grad_copy_attr(const FloeGradCtx *c, FloeNodeBuilder *b, const char *name);

/* ------------------------------------------------------------------------------------ */
/* grad_control.c: gradients of conds and while loops. */
floe_code floe__grads_register_control(FloeStatus *st);
/* One loop variable of a loop built by floe_while_loop. */
typedef struct FloeGradLoopVar {
  FloeNode *enter, *merge, *sw, *exit, *body; /* body: the Identity of the Switch's true port */
} FloeGradLoopVar;
/* A top-level while loop of a graph (borrowed nodes; arrays owned). */
typedef struct FloeGradLoop {
  const char *name;       /* its frame (borrowed from an Enter's attribute) */
  FloeGradLoopVar *vars;
  int num_vars;
  FloeNode **inv;         /* its constant Enters (loop invariants) */
  int num_inv;
  int last_exit_id;       /* the largest id among its Exits */
  bool nested;            /* a loop runs inside its body */
} FloeGradLoop;
/* Finds the top-level loops among nodes [0, n): loop_of[id] = the loop a node is in (nested
 * loops count as their outer loop's) or -1. *out (caller frees with floe__grad_loops_free). */
floe_code floe__grad_find_loops(const FloeGraph *g, int n, int *loop_of, FloeGradLoop **out,
                                int *num, FloeStatus *st);
void floe__grad_loops_free(FloeGradLoop *loops, int n);
/* Builds the backward loop of L (index li in loop_of, which covers ids below num_walked):
 * dexit[i] the gradient reaching loop variable i's Exit (node NULL: none); need_inv[k]:
 * the gradient of invariant k's outside value is wanted. Sets dinit[i] (the gradient of
 * variable i's initial value) and dinv[k] (node NULL where none). */
floe_code floe__grad_while(FloeGraph *g, const FloeGradLoop *L, int li, const int *loop_of,
                           int num_walked, const FloeOutput *dexit, const bool *need_inv,
                           FloeOutput *dinit, FloeOutput *dinv, FloeStatus *st);
/* gradients.c, for grad_control.c: floe_gradients of one loop iteration (back edges are not
 * followed and loops are not treated as units). */
floe_code floe__gradients_body(FloeGraph *g, const FloeOutput *ys, int num_ys,
                               const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                               FloeOutput *dxs, FloeStatus *st);
/* grad_tensor_array.c: called by floe__grads_init. */
floe_code floe__grads_register_tensor_array(FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* grad_rnn.c: recurrent cells. */
/* Registers the gradients of LSTMCell and LSTMCellRecurrent (a backprop node and, for the
 * weight, a MatMul) and of the backprop ops and LSTMCellGrad (an error: no second
 * derivative). Called by floe__grads_init. */
floe_code floe__grads_register_rnn(FloeStatus *st);
/* grad_resize.c: the ops of ops_resize.def. */
floe_code floe__grads_register_resize(FloeStatus *st);
/* grad_conv.c: the N-d convolution and pooling ops (ops_conv.def, ops_convgrad.def). */
floe_code floe__grads_register_conv(FloeStatus *st);
/* rnn.c: whether the default runtime (floe_runtime_default) has a kernel for op, the
 * "used when present" test of the fused cells. */
bool floe__lstm_kernel_present(const char *op);

/* ------------------------------------------------------------------------------------ */
/* checkpoint.c: registers the Save and Restore kernels (one of builtin.c's kernel sets). */
floe_code floe__checkpoint_kernels_register(struct FloeRuntime *rt, FloeStatus *st);

#endif /* FLOE__LAYER_TRAIN_H */
