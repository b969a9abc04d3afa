/* SPDX-License-Identifier: Apache-2.0 */
/* make_graphs.c - writes the graph files the command-line tests run:
 *   affine.floe: y = x @ W + b, z = Relu(y), with x a [?,3] f32 placeholder.
 *   unranked.floe: z = Relu(x), with x an f32 placeholder of unknown rank.
 *   flops.floe: ops of fixed shapes whose FLOPs test_inspect.sh works out by hand: MaxPool,
 *     AvgPool and Pool on an image [2,6,6,3]; Softmax, LogSoftmax, the sparse softmax
 *     cross-entropy, Sum, Mean and ArgMax on logits [4,10]; a fused LSTMCell on x [3,5],
 *     h and c [3,4].
 *   lstm_primitive.floe: the same LSTM cell made of primitive ops (MatMul, BiasAdd, ...).
 *   chain.floe: y = Identity(x) + 1 + 1 + 1 (x a [4] f32 placeholder) and e1, e2: two Exp(x),
 *     summed into z: what the graph optimiser folds and merges.
 * W and b are fixed so the test knows the expected numbers. */
#include <floe/floe.h>
#include <floe/floe_rnn.h>
#include <stdio.h>
#include <string.h>

static FloeOutput pool(FloeGraph *g, const char *op, const char *name, FloeOutput x, int64_t k,
                       int64_t stride) {
  const int64_t ksize[4] = {1, k, k, 1}, strides[4] = {1, stride, stride, 1};
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, x);
  floe_node_set_attr_int_list(b, "ksize", ksize, 4);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", "VALID");
  if (!strcmp(op, "Pool")) floe_node_set_attr_string(b, "pooling_type", "AVG");
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput reduce(FloeGraph *g, const char *op, const char *name, FloeOutput x) {
  FloeTensor *one = floe_tensor_scalar_i32(1, NULL);
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, floe_const(g, NULL, one));
  floe_tensor_release(one);
  return floe_out(floe_node_finish(b), 0);
}

/* An LSTM cell on placeholders x [3,5], h and c [3,4] with constant weights [9,16], [16]. */
static void lstm_cell(FloeGraph *g, FloeLSTMFused fused) {
  const int64_t xd[2] = {3, 5}, hd[2] = {3, 4}, wd[2] = {9, 16}, bd[1] = {16};
  float w[9 * 16] = {0}, bias[16] = {0};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, w, sizeof w, NULL);
  FloeTensor *bt = floe_tensor_from_data(FLOE_F32, 1, bd, bias, sizeof bias, NULL);
  FloeLSTMState s = {floe_placeholder(g, "h", FLOE_F32, floe_shape_make(2, hd)),
                     floe_placeholder(g, "c", FLOE_F32, floe_shape_make(2, hd))};
  FloeLSTMOptions o;
  floe_lstm_options_init(&o);
  o.fused = fused;
  floe_lstm_cell(g, "cell", floe_placeholder(g, "cell_x", FLOE_F32, floe_shape_make(2, xd)), s,
                 floe_const(g, "cell_w", wt), floe_const(g, "cell_b", bt), &o);
  floe_tensor_release(wt);
  floe_tensor_release(bt);
}

static int save(FloeGraph *g, const char *dir, const char *file, FloeStatus *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graphs: %s: %s%s\n", file, floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  floe_graph_free(g);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_graphs DIR\n");
    return 2;
  }
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_new();
  int64_t xd[] = {-1, 3}, wd[] = {3, 2}, bd[] = {2};
  float w[] = {1, -1, 2, 0, 0, 1}, b[] = {0.5f, -10};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, w, sizeof w, st);
  FloeTensor *bt = floe_tensor_from_data(FLOE_F32, 1, bd, b, sizeof b, st);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput mm = floe_matmul(g, "mm", x, floe_const(g, "W", wt), 0, 0);
  FloeOutput y = floe_binary(g, "Add", "y", mm, floe_const(g, "b", bt));
  floe_unary(g, "Relu", "z", y);
  floe_tensor_release(wt);
  floe_tensor_release(bt);
  char path[4096];
  snprintf(path, sizeof path, "%s/affine.floe", argv[1]);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graphs: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  floe_graph_free(g);
  g = floe_graph_new();
  {
    const int64_t four[1] = {4};
    FloeOutput cx = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, four));
    FloeOutput one = floe_const_f32(g, "one", 1.0f);
    FloeOutput a = floe_unary(g, "Identity", "id", cx);
    for (int i = 0; i < 3; i++) a = floe_binary(g, "Add", NULL, a, one);
    floe_unary(g, "Identity", "y", a);
    FloeOutput e1 = floe_unary(g, "Exp", "e1", cx), e2 = floe_unary(g, "Exp", "e2", cx);
    floe_binary(g, "Add", "z", e1, e2);
    snprintf(path, sizeof path, "%s/chain.floe", argv[1]);
    if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
      fprintf(stderr, "make_graphs: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
      return 1;
    }
  }
  floe_graph_free(g);
  g = floe_graph_new();
  floe_unary(g, "Relu", "z", floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown()));
  snprintf(path, sizeof path, "%s/unranked.floe", argv[1]);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graphs: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  floe_graph_free(g);

  g = floe_graph_new();
  const int64_t imd[4] = {2, 6, 6, 3}, ld[2] = {4, 10}, yd[1] = {4};
  FloeOutput im = floe_placeholder(g, "image", FLOE_F32, floe_shape_make(4, imd));
  pool(g, "MaxPool", "maxpool", im, 2, 2); /* [2,3,3,3], windows of 2x2 */
  pool(g, "AvgPool", "avgpool", im, 3, 1); /* [2,4,4,3], windows of 3x3 */
  pool(g, "Pool", "pool", im, 3, 3);       /* [2,2,2,3], windows of 3x3 */
  FloeOutput logits = floe_placeholder(g, "logits", FLOE_F32, floe_shape_make(2, ld));
  floe_unary(g, "Softmax", "softmax", logits);
  floe_unary(g, "LogSoftmax", "log_softmax", logits);
  FloeNodeBuilder *nb = floe_node_begin(g, "SparseSoftmaxCrossEntropyWithLogits", "xent");
  floe_node_add_input(nb, logits);
  floe_node_add_input(nb, floe_placeholder(g, "labels", FLOE_I64, floe_shape_make(1, yd)));
  floe_node_finish(nb);
  reduce(g, "Sum", "sum", logits);
  reduce(g, "Mean", "mean", logits);
  reduce(g, "ArgMax", "argmax", logits);
  lstm_cell(g, FLOE_LSTM_FUSED_ALWAYS);
  if (save(g, argv[1], "flops.floe", st)) return 1;
  g = floe_graph_new();
  lstm_cell(g, FLOE_LSTM_FUSED_NEVER);
  if (save(g, argv[1], "lstm_primitive.floe", st)) return 1;
  floe_status_free(st);
  return 0;
}
