/* SPDX-License-Identifier: Apache-2.0 */
/* layers.c - layer builders (dense, conv2d, pooling, flatten, dropout, batch norm,
 * embedding), the sparse softmax cross-entropy loss and the sampled softmax loss, as
 * ordinary ops under "<name>/".
 *
 * Weights are variables named "<name>/kernel", "<name>/bias", ...; floe_variable returns the
 * existing variable when the name is built again, so one model can be built twice (training
 * and inference) on shared weights. The ops of the second build get the next free names
 * ("<name>/MatMul_1"). Like every graph builder, each function records the graph's sticky
 * error and returns an invalid output on failure. A NULL name means the layer's kind
 * ("dense", "conv2d", ...).
 */
#include <string.h>

#include "train.h"

static FloeOutput invalid(void) { return floe_out(NULL, 0); }

/* A layer's failures to build its nodes name the layer. */
static void layer_build_fail(const FloeBuildScope *s, const char *op, const char *leaf,
                             const FloeStatus *why) {
  (void)op;
  if (!why)
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "layer '%s': out of memory naming its %s node", s->name,
                     leaf);
  else
    floe__graph_fail(s->g, why->code ? why->code : FLOE_NO_MEMORY,
                     "layer '%s': cannot make its constant '%s': %s", s->name, leaf,
                     floe_status_message(why));
}

/* The layer's nodes: "<name>/<op>" (or a label), made unique in g. */
static FloeBuildScope layer_scope(FloeGraph *g, const char *name) {
  return (FloeBuildScope){.g = g, .name = name, .unique = true, .fail = layer_build_fail};
}

/* "<name>/<leaf>" made unique. Caller frees; NULL (sticky error set) when out of memory. */
static char *unique_name(const FloeBuildScope *s, const char *leaf) {
  char *name = floe__build_name(s->g, s->name, leaf, true);
  if (!name) layer_build_fail(s, NULL, leaf, NULL);
  return name;
}

static bool is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Common entry checks: false (and an invalid result) when g already failed or x is invalid
 * (which then becomes the sticky error, naming the layer). */
static bool layer_live(FloeGraph *g, const char *name, const char *kind, FloeOutput x) {
  if (!g || floe_graph_status(g) != FLOE_OK) return false;
  if (!x.node) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (%s): its input is invalid: it comes from a builder call that "
                     "failed (its FloeOutput has no node)",
                     name, kind);
    return false;
  }
  return true;
}

static void shape_str(FloeOutput x, char *buf, size_t len) {
  FloeShape s = floe_node_output_shape(x.node, x.index);
  floe_shape_str(&s, buf, len);
}

/* The input's float dtype, or FLOE_DTYPE_INVALID with the sticky error set. */
static FloeDType float_input(FloeGraph *g, const char *name, const char *kind, FloeOutput x) {
  FloeDType dt = floe_node_output_dtype(x.node, x.index);
  if (is_float(dt)) return dt;
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                   "layer '%s' (%s): input '%s' is %s; it must be a float tensor (f32, f64, "
                   "f16, bf16)",
                   name, kind, floe_node_name(x.node), floe_dtype_name(dt));
  return FLOE_DTYPE_INVALID;
}

static FloeOutput activate(const FloeBuildScope *bs, FloeOutput y, FloeActivation act) {
  switch (act) {
    case FLOE_ACT_NONE: return y;
    case FLOE_ACT_RELU: return floe__build_unary(bs, "Relu", NULL, y);
    case FLOE_ACT_SIGMOID: return floe__build_unary(bs, "Sigmoid", NULL, y);
    case FLOE_ACT_TANH: return floe__build_unary(bs, "Tanh", NULL, y);
    case FLOE_ACT_SOFTMAX: return floe__build_unary(bs, "Softmax", NULL, y);
  }
  floe__graph_fail(bs->g, FLOE_INVALID_ARGUMENT, "layer '%s': unknown activation %d", bs->name,
                   (int)act);
  return invalid();
}

/* "<name>/<suffix>" for a variable. Caller frees; NULL with the sticky error set. */
static char *var_name(FloeGraph *g, const char *name, const char *suffix) {
  char *v = floe__build_name(g, name, suffix, false);
  if (!v)
    floe__graph_fail(g, FLOE_NO_MEMORY, "layer '%s': out of memory naming '%s'", name, suffix);
  return v;
}

static FloeVariable make_var(FloeGraph *g, const char *name, const char *suffix, FloeDType dt,
                             int rank, const int64_t *dims, FloeInitializer init,
                             int trainable) {
  FloeVariable v = {{NULL, 0}, {NULL, 0}, NULL};
  char *vn = var_name(g, name, suffix);
  if (!vn) return v;
  FloeShape s = floe_shape_make(rank, dims);
  v = trainable ? floe_variable(g, vn, dt, s, init) : floe_variable_untrained(g, vn, dt, s, init);
  floe__free(vn);
  return v;
}

FloeOutput floe_layer_dense(FloeGraph *g, const char *name, FloeOutput x, int64_t units,
                            FloeActivation act, int64_t seed) {
  if (!name) name = "dense";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "dense", x)) return invalid();
  FloeDType dt = float_input(g, name, "dense", x);
  if (dt == FLOE_DTYPE_INVALID) return invalid();
  FloeShape s = floe_node_output_shape(x.node, x.index);
  if (s.rank != 2 || s.dims[1] < 0 || units <= 0) {
    char buf[128];
    shape_str(x, buf, sizeof buf);
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (dense): input '%s' has shape %s and units is %lld; the input "
                     "must be [batch, in] with `in` known, and units >= 1",
                     name, floe_node_name(x.node), buf, (long long)units);
    return invalid();
  }
  int64_t kd[2] = {s.dims[1], units}, bd[1] = {units};
  FloeVariable kernel = make_var(g, name, "kernel", dt, 2, kd, floe_init_glorot_uniform(seed), 1);
  FloeVariable bias = make_var(g, name, "bias", dt, 1, bd, floe_init_zeros(), 1);
  FloeOutput y = floe__build_binary(&bs, "MatMul", NULL, x, kernel.value);
  y = floe__build_binary(&bs, "BiasAdd", NULL, y, bias.value);
  return activate(&bs, y, act);
}

/* padding must be SAME or VALID; k and stride >= 1. */
static bool window_ok(FloeGraph *g, const char *name, const char *kind, int kh, int kw,
                      int stride, const char *padding) {
  if (kh >= 1 && kw >= 1 && stride >= 1 && padding &&
      (!strcmp(padding, "SAME") || !strcmp(padding, "VALID")))
    return true;
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                   "layer '%s' (%s): window %dx%d, stride %d, padding '%s': sizes and stride "
                   "must be >= 1 and padding \"SAME\" or \"VALID\"",
                   name, kind, kh, kw, stride, padding ? padding : "(null)");
  return false;
}

FloeOutput floe_layer_conv2d(FloeGraph *g, const char *name, FloeOutput x, int64_t filters,
                             int kh, int kw, int stride, const char *padding,
                             FloeActivation act, int64_t seed) {
  if (!name) name = "conv2d";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "conv2d", x)) return invalid();
  FloeDType dt = float_input(g, name, "conv2d", x);
  if (dt == FLOE_DTYPE_INVALID || !window_ok(g, name, "conv2d", kh, kw, stride, padding))
    return invalid();
  FloeShape s = floe_node_output_shape(x.node, x.index);
  if (s.rank != 4 || s.dims[3] < 0 || filters <= 0) {
    char buf[128];
    shape_str(x, buf, sizeof buf);
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (conv2d): input '%s' has shape %s and filters is %lld; the "
                     "input must be NHWC [N, H, W, C] with C known, and filters >= 1",
                     name, floe_node_name(x.node), buf, (long long)filters);
    return invalid();
  }
  int64_t kd[4] = {kh, kw, s.dims[3], filters}, bd[1] = {filters};
  FloeVariable kernel = make_var(g, name, "kernel", dt, 4, kd, floe_init_glorot_uniform(seed), 1);
  FloeVariable bias = make_var(g, name, "bias", dt, 1, bd, floe_init_zeros(), 1);
  const int64_t strides[4] = {1, stride, stride, 1};
  FloeNodeBuilder *b = floe__build_begin(&bs, "Conv2D", NULL);
  floe_node_add_input(b, x);
  floe_node_add_input(b, kernel.value);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", padding);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  y = floe__build_binary(&bs, "BiasAdd", NULL, y, bias.value);
  return activate(&bs, y, act);
}

static FloeOutput pool(FloeGraph *g, const char *name, const char *op, const char *kind,
                       FloeOutput x, int k, int stride, const char *padding) {
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, kind, x)) return invalid();
  if (float_input(g, name, kind, x) == FLOE_DTYPE_INVALID ||
      !window_ok(g, name, kind, k, k, stride, padding))
    return invalid();
  const int64_t ksize[4] = {1, k, k, 1}, strides[4] = {1, stride, stride, 1};
  FloeNodeBuilder *b = floe__build_begin(&bs, op, NULL);
  floe_node_add_input(b, x);
  floe_node_set_attr_int_list(b, "ksize", ksize, 4);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", padding);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_layer_max_pool(FloeGraph *g, const char *name, FloeOutput x, int k, int stride,
                               const char *padding) {
  return pool(g, name ? name : "max_pool", "MaxPool", "max_pool", x, k, stride, padding);
}

FloeOutput floe_layer_avg_pool(FloeGraph *g, const char *name, FloeOutput x, int k, int stride,
                               const char *padding) {
  return pool(g, name ? name : "avg_pool", "AvgPool", "avg_pool", x, k, stride, padding);
}

FloeOutput floe_layer_flatten(FloeGraph *g, const char *name, FloeOutput x) {
  if (!name) name = "flatten";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "flatten", x)) return invalid();
  FloeShape s = floe_node_output_shape(x.node, x.index);
  int64_t rest = 1;
  bool known = s.rank >= 1;
  for (int i = 1; known && i < s.rank; i++) {
    if (s.dims[i] < 0) known = false;
    else rest *= s.dims[i];
  }
  /* -1 lets the batch vary; it cannot stand beside a zero-sized rest. */
  if (!known || rest == 0 || rest > INT32_MAX) {
    char buf[128];
    shape_str(x, buf, sizeof buf);
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (flatten): input '%s' has shape %s; every dim but the first "
                     "must be known, with a product from 1 to 2^31-1",
                     name, floe_node_name(x.node), buf);
    return invalid();
  }
  const int64_t shape[2] = {-1, rest};
  FloeOutput sh = floe__build_ints(&bs, "shape", FLOE_I32, shape, 2);
  return floe__build_binary(&bs, "Reshape", NULL, x, sh);
}

FloeOutput floe_layer_dropout(FloeGraph *g, const char *name, FloeOutput x, double rate,
                              int training, int64_t seed, FloeOutput step) {
  if (!name) name = "dropout";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "dropout", x)) return invalid();
  FloeDType dt = float_input(g, name, "dropout", x);
  if (dt == FLOE_DTYPE_INVALID) return invalid();
  if (!(rate >= 0.0 && rate < 1.0)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (dropout): rate %g is outside [0, 1)", name, rate);
    return invalid();
  }
  if (!training || rate == 0.0) return x;
  /* The mask's shape: a constant when known, else the input's Shape at run time. */
  FloeShape s = floe_node_output_shape(x.node, x.index);
  bool known = s.rank >= 0;
  for (int i = 0; known && i < s.rank; i++) known = s.dims[i] >= 0;
  FloeOutput shape;
  if (known) {
    shape = floe__build_ints(&bs, "shape", FLOE_I64, s.dims, s.rank);
  } else {
    FloeNodeBuilder *b = floe__build_begin(&bs, "Shape", NULL);
    floe_node_add_input(b, x);
    floe_node_set_attr_type(b, "out_type", FLOE_I64);
    shape = floe_out(floe_node_finish(b), 0);
  }
  /* seed = [seed, step]: the same (seed, step) draws the same mask, on resume too. */
  FloeOutput seeds;
  if (!step.node) {
    const int64_t sv[2] = {seed, 0};
    seeds = floe__build_ints(&bs, "seed", FLOE_I64, sv, 2);
  } else {
    FloeDType sdt = floe_node_output_dtype(step.node, step.index);
    if (sdt != FLOE_I64) step = floe__build_cast(&bs, NULL, step, FLOE_I64);
    FloeNodeBuilder *b = floe__build_begin(&bs, "ExpandDims", NULL);
    floe_node_add_input(b, step);
    floe_node_set_attr_int(b, "axis", 0);
    FloeOutput step1 = floe_out(floe_node_finish(b), 0);
    const int64_t sv[1] = {seed};
    FloeOutput parts[2] = {floe__build_ints(&bs, "seed", FLOE_I64, sv, 1), step1};
    FloeOutput axis = floe__build_int(&bs, "axis", FLOE_I32, 0);
    b = floe__build_begin(&bs, "Concat", NULL);
    floe_node_add_input_list(b, parts, 2);
    floe_node_add_input(b, axis);
    seeds = floe_out(floe_node_finish(b), 0);
  }
  FloeNodeBuilder *b = floe__build_begin(&bs, "StatelessRandomUniform", NULL);
  floe_node_add_input(b, shape);
  floe_node_add_input(b, seeds);
  floe_node_set_attr_type(b, "dtype", dt);
  FloeOutput u = floe_out(floe_node_finish(b), 0);
  /* keep where u >= rate: probability 1 - rate. */
  FloeOutput keep =
      floe__build_binary(&bs, "GreaterEqual", NULL, u, floe__build_scalar(&bs, "rate", dt, rate));
  FloeOutput mask = floe__build_cast(&bs, NULL, keep, dt);
  FloeOutput scaled = floe__build_binary(&bs, "Mul", NULL, mask,
                                         floe__build_scalar(&bs, "scale", dt, 1.0 / (1.0 - rate)));
  return floe__build_binary(&bs, "Mul", NULL, x, scaled);
}

FloeOutput floe_layer_batch_norm(FloeGraph *g, const char *name, FloeOutput x, int training,
                                 double momentum, double epsilon) {
  if (!name) name = "batch_norm";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "batch_norm", x)) return invalid();
  FloeDType dt = float_input(g, name, "batch_norm", x);
  if (dt == FLOE_DTYPE_INVALID) return invalid();
  FloeShape s = floe_node_output_shape(x.node, x.index);
  if (s.rank < 1 || s.dims[s.rank - 1] < 0 || !(epsilon > 0.0) ||
      !(momentum >= 0.0 && momentum <= 1.0)) {
    char buf[128];
    shape_str(x, buf, sizeof buf);
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (batch_norm): input '%s' has shape %s, momentum %g, epsilon "
                     "%g; the rank and the last (channel) dim must be known, momentum in [0, "
                     "1] and epsilon > 0",
                     name, floe_node_name(x.node), buf, momentum, epsilon);
    return invalid();
  }
  int64_t c[1] = {s.dims[s.rank - 1]};
  FloeVariable gamma = make_var(g, name, "gamma", dt, 1, c, floe_init_constant(1.0), 1);
  FloeVariable beta = make_var(g, name, "beta", dt, 1, c, floe_init_zeros(), 1);
  FloeVariable mmean = make_var(g, name, "moving_mean", dt, 1, c, floe_init_zeros(), 0);
  FloeVariable mvar = make_var(g, name, "moving_variance", dt, 1, c, floe_init_constant(1.0), 0);
  FloeOutput eps = floe__build_scalar(&bs, "epsilon", dt, epsilon);
  if (!training) {
    /* (x - moving_mean) * gamma / sqrt(moving_variance + epsilon) + beta; [C] broadcasts
     * along the last dim. */
    FloeOutput scale =
        floe__build_binary(&bs, "Mul", NULL,
                           floe__build_unary(&bs, "Rsqrt", NULL,
                                             floe__build_binary(&bs, "Add", NULL, mvar.value, eps)),
                           gamma.value);
    FloeOutput centered = floe__build_binary(&bs, "Sub", NULL, x, mmean.value);
    return floe__build_binary(&bs, "Add", NULL,
                              floe__build_binary(&bs, "Mul", NULL, centered, scale), beta.value);
  }
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = 0; i < s.rank - 1; i++) axes[i] = i;
  FloeOutput ax = floe__build_ints(&bs, "axes", FLOE_I32, axes, s.rank - 1);
  FloeOutput mean = floe__build_binary(&bs, "Mean", NULL, x, ax);      /* [C] */
  FloeOutput centered = floe__build_binary(&bs, "Sub", NULL, x, mean); /* x's shape */
  FloeOutput var = floe__build_binary(
      &bs, "Mean", NULL, floe__build_unary(&bs, "Square", NULL, centered), ax); /* [C] */
  FloeOutput scale = floe__build_binary(
      &bs, "Mul", NULL,
      floe__build_unary(&bs, "Rsqrt", NULL, floe__build_binary(&bs, "Add", NULL, var, eps)),
      gamma.value);
  FloeOutput y = floe__build_binary(
      &bs, "Add", NULL, floe__build_binary(&bs, "Mul", NULL, centered, scale), beta.value);
  /* moving = momentum * moving + (1 - momentum) * batch, for mean and (biased) variance. */
  FloeOutput m = floe__build_scalar(&bs, "momentum", dt, momentum);
  FloeOutput m1 = floe__build_scalar(&bs, "one_minus_momentum", dt, 1.0 - momentum);
  FloeOutput new_mean =
      floe__build_binary(&bs, "Add", NULL, floe__build_binary(&bs, "Mul", NULL, mmean.value, m),
                         floe__build_binary(&bs, "Mul", NULL, mean, m1));
  FloeOutput new_var =
      floe__build_binary(&bs, "Add", NULL, floe__build_binary(&bs, "Mul", NULL, mvar.value, m),
                         floe__build_binary(&bs, "Mul", NULL, var, m1));
  char *n1 = unique_name(&bs, "update_moving_mean");
  char *n2 = n1 ? unique_name(&bs, "update_moving_variance") : NULL;
  FloeNode *u1 = n2 ? floe_assign(g, n1, mmean.handle, new_mean) : NULL;
  FloeNode *u2 = u1 ? floe_assign(g, n2, mvar.handle, new_var) : NULL;
  floe__free(n1);
  floe__free(n2);
  if (!u2) return invalid();
  /* The output carries the updates: whatever trains on it updates the averages. */
  FloeNodeBuilder *b = floe__build_begin(&bs, "Identity", NULL);
  floe_node_add_input(b, y);
  floe_node_add_control_input(b, u1);
  floe_node_add_control_input(b, u2);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_layer_embedding(FloeGraph *g, const char *name, FloeOutput ids, int64_t vocab,
                                int64_t dim, int64_t seed) {
  if (!name) name = "embedding";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "embedding", ids)) return invalid();
  FloeDType it = floe_node_output_dtype(ids.node, ids.index);
  if (!(it == FLOE_I32 || it == FLOE_I64 || it == FLOE_U8 || it == FLOE_I8) || vocab <= 0 ||
      dim <= 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "layer '%s' (embedding): ids '%s' are %s, vocab %lld, dim %lld; ids must "
                     "be integers and vocab, dim >= 1",
                     name, floe_node_name(ids.node), floe_dtype_name(it), (long long)vocab,
                     (long long)dim);
    return invalid();
  }
  if (it == FLOE_U8 || it == FLOE_I8) /* Gather takes i32 / i64 indices */
    ids = floe__build_cast(&bs, NULL, ids, FLOE_I32);
  int64_t td[2] = {vocab, dim};
  FloeVariable table =
      make_var(g, name, "embeddings", FLOE_F32, 2, td, floe_init_uniform(-0.05, 0.05, seed), 1);
  return floe__build_binary(&bs, "Gather", NULL, table.value, ids);
}

FloeOutput floe_sparse_softmax_cross_entropy(FloeGraph *g, const char *name, FloeOutput logits,
                                             FloeOutput labels) {
  if (!name) name = "loss";
  const FloeBuildScope bs = layer_scope(g, name);
  if (!layer_live(g, name, "sparse_softmax_cross_entropy", logits) ||
      !layer_live(g, name, "sparse_softmax_cross_entropy", labels))
    return invalid();
  if (float_input(g, name, "sparse_softmax_cross_entropy", logits) == FLOE_DTYPE_INVALID)
    return invalid();
  FloeDType lt = floe_node_output_dtype(labels.node, labels.index);
  if (lt != FLOE_I32 && lt != FLOE_I64) {
    if (lt != FLOE_U8 && lt != FLOE_I8) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "loss '%s': labels '%s' are %s; they must be integer class indices",
                       name, floe_node_name(labels.node), floe_dtype_name(lt));
      return invalid();
    }
    labels = floe__build_cast(&bs, NULL, labels, FLOE_I64);
  }
  FloeOutput xent =
      floe__build_binary(&bs, "SparseSoftmaxCrossEntropyWithLogits", NULL, logits, labels);
  const int64_t batch_axis[1] = {0};
  return floe__build_binary(&bs, "Mean", NULL, xent,
                            floe__build_ints(&bs, "axis", FLOE_I32, batch_axis, 1));
}

/* ---- the sampled softmax (TensorFlow's sampled_softmax_loss) ---- */

static FloeOutput reshape_to(const FloeBuildScope *bs, FloeOutput x, int64_t d0, int64_t d1) {
  const int64_t shape[2] = {d0, d1};
  return floe__build_binary(bs, "Reshape", NULL, x,
                            floe__build_ints(bs, "shape", FLOE_I32, shape, 2));
}

/* The checks of floe_sampled_softmax_loss; false with the sticky error set. */
static bool sampled_args_ok(FloeGraph *g, const char *name, const FloeOutput *in, int64_t k,
                            int64_t classes) {
  static const char kind[] = "sampled_softmax_loss";
  for (int i = 0; i < 4; i++)
    if (!layer_live(g, name, kind, in[i])) return false;
  for (int i = 0; i < 3; i++)
    if (float_input(g, name, kind, in[i]) == FLOE_DTYPE_INVALID) return false;
  FloeDType lt = floe_node_output_dtype(in[3].node, in[3].index);
  if (lt != FLOE_I32 && lt != FLOE_I64) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "loss '%s': labels '%s' are %s; they must be i32 or i64 class indices",
                     name, floe_node_name(in[3].node), floe_dtype_name(lt));
    return false;
  }
  if (k < 1 || classes < 1) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "loss '%s': num_sampled %lld and num_classes %lld must be >= 1", name,
                     (long long)k, (long long)classes);
    return false;
  }
  return true;
}

/* Where the sampled softmax takes its rows from: a dense weight and bias (Gather), or sharded
 * variables (floe_embedding_lookup_sharded: each shard gives only the rows it holds). */
typedef struct SampledRows {
  FloeOutput weights, biases;                 /* dense */
  const FloeShardedVariable *sw, *sb;         /* sharded (NULL: dense) */
} SampledRows;

/* Rows ids of the weights (bias 0) or the biases (bias 1). */
static FloeOutput sampled_rows(const FloeBuildScope *bs, const SampledRows *src, int bias,
                               FloeOutput ids, const char *leaf) {
  if (src->sw) {
    char *scope = floe__asprintf("%s/%s", bs->name, leaf);
    if (!scope) {
      floe__graph_fail(bs->g, FLOE_NO_MEMORY, "loss '%s': out of memory", bs->name);
      return invalid();
    }
    FloeOutput r = floe_embedding_lookup_sharded(bs->g, scope, bias ? src->sb : src->sw, ids);
    floe__free(scope);
    return r;
  }
  return floe__build_binary(bs, "Gather", NULL, bias ? src->biases : src->weights, ids);
}

static FloeOutput sampled_loss(FloeGraph *g, const char *name, const SampledRows *src,
                               FloeOutput inputs, FloeOutput labels, int64_t num_sampled,
                               int64_t num_classes, int unique, int64_t seed) {
  const FloeBuildScope bs = layer_scope(g, name);
  FloeDType dt = floe_node_output_dtype(inputs.node, inputs.index);
  FloeOutput lab = floe_node_output_dtype(labels.node, labels.index) == FLOE_I64
                       ? labels
                       : floe__build_cast(&bs, NULL, labels, FLOE_I64);
  FloeOutput lab2 = reshape_to(&bs, lab, -1, 1); /* [n, 1] */
  FloeNodeBuilder *b = floe__build_begin(&bs, "LogUniformCandidateSampler", "sampler");
  floe_node_add_input(b, lab2);
  floe_node_set_attr_int(b, "num_true", 1);
  floe_node_set_attr_int(b, "num_sampled", num_sampled);
  floe_node_set_attr_bool(b, "unique", unique);
  floe_node_set_attr_int(b, "range_max", num_classes);
  floe_node_set_attr_int(b, "seed", seed);
  FloeNode *sampler = floe_node_finish(b);
  FloeOutput ids = floe_out(sampler, 0), true_n = floe_out(sampler, 1),
             samp_n = floe_out(sampler, 2);
  if (dt != FLOE_F32) {
    true_n = floe__build_cast(&bs, NULL, true_n, dt);
    samp_n = floe__build_cast(&bs, NULL, samp_n, dt);
  }
  /* The true class: <inputs, w[label]> + b[label] - log(expected count), [n, 1]. */
  b = floe__build_begin(&bs, "Sum", NULL);
  floe_node_add_input(b, floe__build_binary(&bs, "Mul", NULL, inputs,
                                            sampled_rows(&bs, src, 0, lab, "true_w")));
  const int64_t one = 1;
  floe_node_add_input(b, floe__build_ints(&bs, "axis", FLOE_I32, &one, 1));
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput tl = floe__build_binary(&bs, "Add", NULL, floe_out(floe_node_finish(b), 0),
                                     sampled_rows(&bs, src, 1, lab2, "true_b"));
  tl = floe__build_binary(&bs, "Sub", NULL, tl, floe__build_unary(&bs, "Log", NULL, true_n));
  /* The sampled classes, [n, K], the row's own label pushed out (accidental hits). */
  b = floe__build_begin(&bs, "MatMul", NULL);
  floe_node_add_input(b, inputs);
  floe_node_add_input(b, sampled_rows(&bs, src, 0, ids, "sampled_w"));
  floe_node_set_attr_bool(b, "transpose_b", 1);
  FloeOutput sl = floe__build_binary(&bs, "Add", NULL, floe_out(floe_node_finish(b), 0),
                                     sampled_rows(&bs, src, 1, ids, "sampled_b"));
  sl = floe__build_binary(&bs, "Sub", NULL, sl, floe__build_unary(&bs, "Log", NULL, samp_n));
  FloeOutput hit = floe__build_binary(&bs, "Equal", NULL, lab2, reshape_to(&bs, ids, 1, -1));
  b = floe__build_begin(&bs, "Select", NULL); /* broadcasts the scalar */
  floe_node_add_input(b, hit);
  floe_node_add_input(b, floe__build_scalar(&bs, "hit_logit", dt, -1e9));
  floe_node_add_input(b, sl);
  sl = floe_out(floe_node_finish(b), 0);
  /* Column 0 holds the true class. */
  b = floe__build_begin(&bs, "Concat", NULL);
  floe_node_add_input_list(b, (FloeOutput[]){tl, sl}, 2);
  floe_node_add_input(b, floe__build_int(&bs, "concat_axis", FLOE_I32, 1));
  FloeOutput logits = floe_out(floe_node_finish(b), 0);
  return floe_sparse_softmax_cross_entropy(g, name, logits,
                                           floe__build_unary(&bs, "ZerosLike", NULL, lab));
}

FloeOutput floe_sampled_softmax_loss(FloeGraph *g, const char *name, FloeOutput weights,
                                     FloeOutput biases, FloeOutput inputs, FloeOutput labels,
                                     int64_t num_sampled, int64_t num_classes, int unique,
                                     int64_t seed) {
  if (!name) name = "sampled_softmax_loss";
  const FloeOutput in[4] = {weights, biases, inputs, labels};
  if (!sampled_args_ok(g, name, in, num_sampled, num_classes)) return invalid();
  const SampledRows src = {weights, biases, NULL, NULL};
  return sampled_loss(g, name, &src, inputs, labels, num_sampled, num_classes, unique, seed);
}

FloeOutput floe_sampled_softmax_loss_sharded(FloeGraph *g, const char *name,
                                             const FloeShardedVariable *weights,
                                             const FloeShardedVariable *biases,
                                             FloeOutput inputs, FloeOutput labels,
                                             int64_t num_sampled, int64_t num_classes,
                                             int unique, int64_t seed) {
  if (!name) name = "sampled_softmax_loss";
  if (!g || floe_graph_status(g) != FLOE_OK) return invalid();
  if (!weights || !biases || weights->num_shards < 1 || biases->num_shards < 1 ||
      weights->axis != 0 || biases->axis != 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "loss '%s': the weights and biases must be sharded variables split along "
                     "axis 0 (floe_sharded_variable with axis 0)", name);
    return invalid();
  }
  const FloeOutput in[4] = {weights->value, biases->value, inputs, labels};
  if (!sampled_args_ok(g, name, in, num_sampled, num_classes)) return invalid();
  const SampledRows src = {weights->value, biases->value, weights, biases};
  return sampled_loss(g, name, &src, inputs, labels, num_sampled, num_classes, unique, seed);
}
