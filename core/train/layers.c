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

/* "<scope>/<op>", or "<scope>/<op>_<k>" for the first k that is free in g. Caller frees;
 * NULL (sticky error set) when out of memory. */
static char *unique_name(FloeGraph *g, const char *scope, const char *op) {
  char *name = floe__asprintf("%s/%s", scope, op);
  for (int k = 1; name && floe_graph_find(g, name); k++) {
    floe__free(name);
    name = floe__asprintf("%s/%s_%d", scope, op, k);
  }
  if (!name)
    floe__graph_fail(g, FLOE_NO_MEMORY, "layer '%s': out of memory naming its %s node", scope,
                     op);
  return name;
}

/* floe_node_begin under the scope with a unique name (NULL builder: the sticky error is set,
 * and every floe_node_* call on NULL is a no-op). */
static FloeNodeBuilder *begin(FloeGraph *g, const char *scope, const char *op,
                              const char *label) {
  char *name = unique_name(g, scope, label ? label : op);
  if (!name) return NULL;
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe__free(name);
  return b;
}

static FloeOutput unary(FloeGraph *g, const char *scope, const char *op, FloeOutput x) {
  FloeNodeBuilder *b = begin(g, scope, op, NULL);
  floe_node_add_input(b, x);
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput binary(FloeGraph *g, const char *scope, const char *op, FloeOutput x,
                         FloeOutput y) {
  FloeNodeBuilder *b = begin(g, scope, op, NULL);
  floe_node_add_input(b, x);
  floe_node_add_input(b, y);
  return floe_out(floe_node_finish(b), 0);
}

/* A Const named "<scope>/<label>" holding t (released here). */
static FloeOutput const_of(FloeGraph *g, const char *scope, const char *label, FloeTensor *t,
                           FloeStatus *st) {
  if (!t) {
    floe__graph_fail(g, floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY,
                     "layer '%s': cannot make its constant '%s': %s", scope, label,
                     floe_status_message(st));
    return invalid();
  }
  FloeNodeBuilder *b = begin(g, scope, "Const", label);
  floe_node_set_attr_tensor(b, "value", t);
  floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(t));
  floe_tensor_release(t);
  return floe_out(floe_node_finish(b), 0);
}

/* A scalar of a float dtype. */
static FloeOutput const_scalar(FloeGraph *g, const char *scope, const char *label, FloeDType dt,
                               double v) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__tensor_alloc(NULL, dt, 0, NULL, &st);
  if (t) {
    void *p = floe_tensor_data(t);
    switch (dt) {
      case FLOE_F64: *(double *)p = v; break;
      case FLOE_F16: *(uint16_t *)p = floe_f32_to_f16((float)v); break;
      case FLOE_BF16: *(uint16_t *)p = floe_f32_to_bf16((float)v); break;
      default: *(float *)p = (float)v; break;
    }
  }
  FloeOutput o = const_of(g, scope, label, t, &st);
  floe__free(st.msg);
  return o;
}

/* A 1-D i32 or i64 vector. */
static FloeOutput const_vec(FloeGraph *g, const char *scope, const char *label, FloeDType dt,
                            const int64_t *v, int n) {
  FloeStatus st = {FLOE_OK, NULL};
  int64_t dims[1] = {n};
  FloeTensor *t = floe__tensor_alloc(NULL, dt, 1, dims, &st);
  if (t) {
    for (int i = 0; i < n; i++) {
      if (dt == FLOE_I64) ((int64_t *)floe_tensor_data(t))[i] = v[i];
      else ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
    }
  }
  FloeOutput o = const_of(g, scope, label, t, &st);
  floe__free(st.msg);
  return o;
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

static FloeOutput activate(FloeGraph *g, const char *scope, FloeOutput y, FloeActivation act) {
  switch (act) {
    case FLOE_ACT_NONE: return y;
    case FLOE_ACT_RELU: return unary(g, scope, "Relu", y);
    case FLOE_ACT_SIGMOID: return unary(g, scope, "Sigmoid", y);
    case FLOE_ACT_TANH: return unary(g, scope, "Tanh", y);
    case FLOE_ACT_SOFTMAX: return unary(g, scope, "Softmax", y);
  }
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "layer '%s': unknown activation %d", scope,
                   (int)act);
  return invalid();
}

/* "<name>/<suffix>" for a variable. Caller frees; NULL with the sticky error set. */
static char *var_name(FloeGraph *g, const char *name, const char *suffix) {
  char *v = floe__asprintf("%s/%s", name, suffix);
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
  FloeOutput y = binary(g, name, "MatMul", x, kernel.value);
  y = binary(g, name, "BiasAdd", y, bias.value);
  return activate(g, name, y, act);
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
  FloeNodeBuilder *b = begin(g, name, "Conv2D", NULL);
  floe_node_add_input(b, x);
  floe_node_add_input(b, kernel.value);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", padding);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  y = binary(g, name, "BiasAdd", y, bias.value);
  return activate(g, name, y, act);
}

static FloeOutput pool(FloeGraph *g, const char *name, const char *op, const char *kind,
                       FloeOutput x, int k, int stride, const char *padding) {
  if (!layer_live(g, name, kind, x)) return invalid();
  if (float_input(g, name, kind, x) == FLOE_DTYPE_INVALID ||
      !window_ok(g, name, kind, k, k, stride, padding))
    return invalid();
  const int64_t ksize[4] = {1, k, k, 1}, strides[4] = {1, stride, stride, 1};
  FloeNodeBuilder *b = begin(g, name, op, NULL);
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
  FloeOutput sh = const_vec(g, name, "shape", FLOE_I32, shape, 2);
  return binary(g, name, "Reshape", x, sh);
}

FloeOutput floe_layer_dropout(FloeGraph *g, const char *name, FloeOutput x, double rate,
                              int training, int64_t seed, FloeOutput step) {
  if (!name) name = "dropout";
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
    shape = const_vec(g, name, "shape", FLOE_I64, s.dims, s.rank);
  } else {
    FloeNodeBuilder *b = begin(g, name, "Shape", NULL);
    floe_node_add_input(b, x);
    floe_node_set_attr_type(b, "out_type", FLOE_I64);
    shape = floe_out(floe_node_finish(b), 0);
  }
  /* seed = [seed, step]: the same (seed, step) draws the same mask, on resume too. */
  FloeOutput seeds;
  if (!step.node) {
    const int64_t sv[2] = {seed, 0};
    seeds = const_vec(g, name, "seed", FLOE_I64, sv, 2);
  } else {
    FloeDType sdt = floe_node_output_dtype(step.node, step.index);
    if (sdt != FLOE_I64) {
      FloeNodeBuilder *b = begin(g, name, "Cast", NULL);
      floe_node_add_input(b, step);
      floe_node_set_attr_type(b, "DstT", FLOE_I64);
      step = floe_out(floe_node_finish(b), 0);
    }
    FloeNodeBuilder *b = begin(g, name, "ExpandDims", NULL);
    floe_node_add_input(b, step);
    floe_node_set_attr_int(b, "axis", 0);
    FloeOutput step1 = floe_out(floe_node_finish(b), 0);
    const int64_t sv[1] = {seed};
    FloeOutput parts[2] = {const_vec(g, name, "seed", FLOE_I64, sv, 1), step1};
    FloeStatus st = {FLOE_OK, NULL};
    FloeOutput axis = const_of(g, name, "axis", floe_tensor_scalar_i32(0, &st), &st);
    floe__free(st.msg);
    b = begin(g, name, "Concat", NULL);
    floe_node_add_input_list(b, parts, 2);
    floe_node_add_input(b, axis);
    seeds = floe_out(floe_node_finish(b), 0);
  }
  FloeNodeBuilder *b = begin(g, name, "StatelessRandomUniform", NULL);
  floe_node_add_input(b, shape);
  floe_node_add_input(b, seeds);
  floe_node_set_attr_type(b, "dtype", dt);
  FloeOutput u = floe_out(floe_node_finish(b), 0);
  /* keep where u >= rate: probability 1 - rate. */
  FloeOutput keep = binary(g, name, "GreaterEqual", u, const_scalar(g, name, "rate", dt, rate));
  b = begin(g, name, "Cast", NULL);
  floe_node_add_input(b, keep);
  floe_node_set_attr_type(b, "DstT", dt);
  FloeOutput mask = floe_out(floe_node_finish(b), 0);
  FloeOutput scaled =
      binary(g, name, "Mul", mask, const_scalar(g, name, "scale", dt, 1.0 / (1.0 - rate)));
  return binary(g, name, "Mul", x, scaled);
}

FloeOutput floe_layer_batch_norm(FloeGraph *g, const char *name, FloeOutput x, int training,
                                 double momentum, double epsilon) {
  if (!name) name = "batch_norm";
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
  FloeOutput eps = const_scalar(g, name, "epsilon", dt, epsilon);
  if (!training) {
    /* (x - moving_mean) * gamma / sqrt(moving_variance + epsilon) + beta; [C] broadcasts
     * along the last dim. */
    FloeOutput scale = binary(g, name, "Mul",
                              unary(g, name, "Rsqrt", binary(g, name, "Add", mvar.value, eps)),
                              gamma.value);
    FloeOutput centered = binary(g, name, "Sub", x, mmean.value);
    return binary(g, name, "Add", binary(g, name, "Mul", centered, scale), beta.value);
  }
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = 0; i < s.rank - 1; i++) axes[i] = i;
  FloeOutput ax = const_vec(g, name, "axes", FLOE_I32, axes, s.rank - 1);
  FloeOutput mean = binary(g, name, "Mean", x, ax);                      /* [C] */
  FloeOutput centered = binary(g, name, "Sub", x, mean);                 /* x's shape */
  FloeOutput var = binary(g, name, "Mean", unary(g, name, "Square", centered), ax); /* [C] */
  FloeOutput scale = binary(g, name, "Mul",
                            unary(g, name, "Rsqrt", binary(g, name, "Add", var, eps)),
                            gamma.value);
  FloeOutput y = binary(g, name, "Add", binary(g, name, "Mul", centered, scale), beta.value);
  /* moving = momentum * moving + (1 - momentum) * batch, for mean and (biased) variance. */
  FloeOutput m = const_scalar(g, name, "momentum", dt, momentum);
  FloeOutput m1 = const_scalar(g, name, "one_minus_momentum", dt, 1.0 - momentum);
  FloeOutput new_mean = binary(g, name, "Add", binary(g, name, "Mul", mmean.value, m),
                               binary(g, name, "Mul", mean, m1));
  FloeOutput new_var = binary(g, name, "Add", binary(g, name, "Mul", mvar.value, m),
                              binary(g, name, "Mul", var, m1));
  char *n1 = unique_name(g, name, "update_moving_mean");
  char *n2 = n1 ? unique_name(g, name, "update_moving_variance") : NULL;
  FloeNode *u1 = n2 ? floe_assign(g, n1, mmean.handle, new_mean) : NULL;
  FloeNode *u2 = u1 ? floe_assign(g, n2, mvar.handle, new_var) : NULL;
  floe__free(n1);
  floe__free(n2);
  if (!u2) return invalid();
  /* The output carries the updates: whatever trains on it updates the averages. */
  FloeNodeBuilder *b = begin(g, name, "Identity", NULL);
  floe_node_add_input(b, y);
  floe_node_add_control_input(b, u1);
  floe_node_add_control_input(b, u2);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_layer_embedding(FloeGraph *g, const char *name, FloeOutput ids, int64_t vocab,
                                int64_t dim, int64_t seed) {
  if (!name) name = "embedding";
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
  if (it == FLOE_U8 || it == FLOE_I8) { /* Gather takes i32 / i64 indices */
    FloeNodeBuilder *b = begin(g, name, "Cast", NULL);
    floe_node_add_input(b, ids);
    floe_node_set_attr_type(b, "DstT", FLOE_I32);
    ids = floe_out(floe_node_finish(b), 0);
  }
  int64_t td[2] = {vocab, dim};
  FloeVariable table =
      make_var(g, name, "embeddings", FLOE_F32, 2, td, floe_init_uniform(-0.05, 0.05, seed), 1);
  return binary(g, name, "Gather", table.value, ids);
}

FloeOutput floe_sparse_softmax_cross_entropy(FloeGraph *g, const char *name, FloeOutput logits,
                                             FloeOutput labels) {
  if (!name) name = "loss";
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
    FloeNodeBuilder *b = begin(g, name, "Cast", NULL);
    floe_node_add_input(b, labels);
    floe_node_set_attr_type(b, "DstT", FLOE_I64);
    labels = floe_out(floe_node_finish(b), 0);
  }
  FloeOutput xent = binary(g, name, "SparseSoftmaxCrossEntropyWithLogits", logits, labels);
  const int64_t batch_axis[1] = {0};
  return binary(g, name, "Mean", xent, const_vec(g, name, "axis", FLOE_I32, batch_axis, 1));
}

/* ---- the sampled softmax (TensorFlow's sampled_softmax_loss) ---- */

static FloeOutput cast_to(FloeGraph *g, const char *scope, FloeOutput x, FloeDType dt) {
  FloeNodeBuilder *b = begin(g, scope, "Cast", NULL);
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "DstT", dt);
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput reshape_to(FloeGraph *g, const char *scope, FloeOutput x, int64_t d0,
                             int64_t d1) {
  const int64_t shape[2] = {d0, d1};
  return binary(g, scope, "Reshape", x, const_vec(g, scope, "shape", FLOE_I32, shape, 2));
}

/* A 0-D i32. */
static FloeOutput const_i32(FloeGraph *g, const char *scope, const char *label, int32_t v) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_I32, 0, NULL, &st);
  if (t) *(int32_t *)floe_tensor_data(t) = v;
  FloeOutput o = const_of(g, scope, label, t, &st);
  floe__free(st.msg);
  return o;
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

FloeOutput floe_sampled_softmax_loss(FloeGraph *g, const char *name, FloeOutput weights,
                                     FloeOutput biases, FloeOutput inputs, FloeOutput labels,
                                     int64_t num_sampled, int64_t num_classes, int unique,
                                     int64_t seed) {
  if (!name) name = "sampled_softmax_loss";
  const FloeOutput in[4] = {weights, biases, inputs, labels};
  if (!sampled_args_ok(g, name, in, num_sampled, num_classes)) return invalid();
  FloeDType dt = floe_node_output_dtype(inputs.node, inputs.index);
  FloeOutput lab = floe_node_output_dtype(labels.node, labels.index) == FLOE_I64
                       ? labels : cast_to(g, name, labels, FLOE_I64);
  FloeOutput lab2 = reshape_to(g, name, lab, -1, 1); /* [n, 1] */
  FloeNodeBuilder *b = begin(g, name, "LogUniformCandidateSampler", "sampler");
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
    true_n = cast_to(g, name, true_n, dt);
    samp_n = cast_to(g, name, samp_n, dt);
  }
  /* The true class: <inputs, w[label]> + b[label] - log(expected count), [n, 1]. */
  b = begin(g, name, "Sum", NULL);
  floe_node_add_input(b, binary(g, name, "Mul", inputs, binary(g, name, "Gather", weights, lab)));
  const int64_t one = 1;
  floe_node_add_input(b, const_vec(g, name, "axis", FLOE_I32, &one, 1));
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput tl = binary(g, name, "Add", floe_out(floe_node_finish(b), 0),
                         binary(g, name, "Gather", biases, lab2));
  tl = binary(g, name, "Sub", tl, unary(g, name, "Log", true_n));
  /* The sampled classes, [n, K], the row's own label pushed out (accidental hits). */
  b = begin(g, name, "MatMul", NULL);
  floe_node_add_input(b, inputs);
  floe_node_add_input(b, binary(g, name, "Gather", weights, ids));
  floe_node_set_attr_bool(b, "transpose_b", 1);
  FloeOutput sl = binary(g, name, "Add", floe_out(floe_node_finish(b), 0),
                         binary(g, name, "Gather", biases, ids));
  sl = binary(g, name, "Sub", sl, unary(g, name, "Log", samp_n));
  FloeOutput hit = binary(g, name, "Equal", lab2, reshape_to(g, name, ids, 1, -1));
  b = begin(g, name, "Select", NULL); /* broadcasts the scalar */
  floe_node_add_input(b, hit);
  floe_node_add_input(b, const_scalar(g, name, "hit_logit", dt, -1e9));
  floe_node_add_input(b, sl);
  sl = floe_out(floe_node_finish(b), 0);
  /* Column 0 holds the true class. */
  b = begin(g, name, "Concat", NULL);
  floe_node_add_input_list(b, (FloeOutput[]){tl, sl}, 2);
  floe_node_add_input(b, const_i32(g, name, "concat_axis", 1));
  FloeOutput logits = floe_out(floe_node_finish(b), 0);
  return floe_sparse_softmax_cross_entropy(g, name, logits, unary(g, name, "ZerosLike", lab));
}
