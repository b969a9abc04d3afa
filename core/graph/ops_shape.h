/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape.h - the standard op set: its registration (ops_std.c) and the shape functions
 * named in ops_std.def (ops_shape_*.c, one file per op family). Core-only; included by
 * opdef.c, ops_std.c and the ops_shape_*.c files.
 *
 * ops_std.def names each function without the prefix (shape_matmul); ops_std.c pastes
 * "floe__" in front, so the FLOE_OP lines stay readable and the symbols stay internal. */
#ifndef FLOE_OPS_SHAPE_H
#define FLOE_OPS_SHAPE_H

#include "graph.h"

/* Registers every op of ops_std.def as the standard set (plugin NULL). Ops already there
 * with an identical definition are kept, so a call after a partial failure completes the
 * set. Called by floe__ops_init under its lock. */
floe_code floe__ops_std_register(FloeStatus *st);

/* Shape functions (FloeShapeFn). Each sets every output of sctx; unknown dims and ranks
 * propagate; only definite mismatches are errors (FLOE_INVALID_ARGUMENT in sctx->status).
 * ops_shape_util.h holds the helpers they share. */
/* ops_shape_math.c: sources, element-wise ops, reductions, one-hot and losses. */
floe_code floe__shape_const(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_placeholder(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_unchanged(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_broadcast(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_select(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_scalar(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_shape(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_reduce(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_arg_reduce(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_one_hot(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_xent(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_sparse_xent(const FloeHostApi *host, FloeShapeContext *sctx);
/* NumPy broadcasting of a and b into *out (an error on sctx names both shapes); also used
 * by shape_conv.c. */
floe_code floe__shape_broadcast_pair(FloeShapeContext *sctx, const FloeShape *a,
                                     const FloeShape *b, FloeShape *out);
/* ops_shape_nn.c: matrix products, BiasAdd, 2-D convolution and pooling. */
floe_code floe__shape_matmul(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_batch_matmul(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_bias_add(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_conv2d(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_pool(const FloeHostApi *host, FloeShapeContext *sctx);
/* ops_shape_nn.c: recurrent cells (ops_rnn.def). */
floe_code floe__shape_lstm_cell(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_lstm_cell_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_lstm_cell_backprop(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_lstm_cell_recurrent(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_lstm_cell_recurrent_backprop(const FloeHostApi *host,
                                                   FloeShapeContext *sctx);
/* ops_shape_array.c: shapes and data movement. */
floe_code floe__shape_reshape(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_transpose(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_concat(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_fused_elementwise(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_split(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_slice(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_strided_slice(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_gather(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_resource_gather(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_pad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_tile(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_squeeze(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_expand_dims(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_fill(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_from_shape_input(const FloeHostApi *host, FloeShapeContext *sctx);
/* ops_shape_train.c: training ops, Merge and candidate sampling (the sampled softmax). */
floe_code floe__shape_from_shape_input1(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_addn(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_concat_offset(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_bias_add_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_pad_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_tile_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_read_variable(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_broadcast_to(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_sum_to_shape(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_expand_reduced(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_merge(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_candidate_sampler(const FloeHostApi *host, FloeShapeContext *sctx);
/* ops_shape_collective.c: the collective ops (ops_collective.def). */
floe_code floe__shape_collective(const FloeHostApi *host, FloeShapeContext *sctx);
/* ops_shape_data.c: queues and readers (ops_data.def). */
floe_code floe__shape_queue(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_queue_enqueue(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_queue_dequeue(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_reader(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_reader_read(const FloeHostApi *host, FloeShapeContext *sctx);
/* ops_shape_tensor_array.c: TensorArrays and stacks, declared in graph.h. */
/* ONNX math family (ops_math_signal.def, ops_shape_math_signal.c). */
floe_code floe__shape_matrix_determinant(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_cosine_sum_window(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_dft(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_stft(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_mel_weight_matrix(const FloeHostApi *host, FloeShapeContext *sctx);

/* shape_conv.c: the N-d convolution and pooling ops of ops_conv.def. */
floe_code floe__shape_conv_nd(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_fused_conv(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_conv_transpose(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_pool_nd(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_to_blocked(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_from_blocked(const FloeHostApi *host, FloeShapeContext *sctx);
/* shape_conv.c: their gradient ops (ops_convgrad.def). */
floe_code floe__shape_conv_backprop_input_nd(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_conv_backprop_filter_nd(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_pool_grad_nd(const FloeHostApi *host, FloeShapeContext *sctx);
/* Indexing ops (ops_index.def, ops_shape_index.c). */
floe_code floe__shape_gather_elements(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_scatter(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_gather_nd(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_range(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_non_zero(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_top_k(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_unique(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_slice_axes(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_squeeze_axes(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_unsqueeze_axes(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_split_v(const FloeHostApi *host, FloeShapeContext *sctx);
/* Resampling, detection and sequence-recurrent ops (ops_resize.def, ops_shape_resize.c). */
floe_code floe__shape_resize(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_grid_sample(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_roi_align(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_nms(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_rnn(const FloeHostApi *host, FloeShapeContext *sctx);
/* Text features (ops_text_features.def, ops_shape_text_features.c). */
floe_code floe__shape_tfidf_vectorizer(const FloeHostApi *host, FloeShapeContext *sctx);

#endif /* FLOE_OPS_SHAPE_H */
