/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx.c - the ONNX importer on models built here with protobuf-c: numerics against
 * naive loops, initializers as raw_data and typed fields, constant folding, --trainable
 * variables that train, and every error path (truncation at each length, corrupt bytes,
 * unsupported ops, undefined inputs, bad attributes, bad TensorProtos, allocation failures). */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe_onnx.h"
#include "floe/floe_train.h"
#include "core.h"
#include "onnx.pb-c.h"
#include "onnx_builder.h"

long floe_test_fail_alloc_after(long n);

/* x [B,4] -> Gemm(W [3,4], transB) + b -> Relu -> y [B,3] */
static const float W[12] = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.5f, 1.0f, -2.0f,
                            0.75f, 0.0f, -0.25f, 1.0f};
static const float BIAS[3] = {0.1f, -0.2f, 0.3f};
static const int64_t WDIMS[2] = {3, 4}, BDIMS[1] = {3};

static uint8_t *mlp_model(size_t *len, int raw) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[2] = {-1, 4};
  ob_add_input(&md, "x", 2, xd);
  ob_add_init(&md, "W", 2, WDIMS, W, raw);
  ob_add_init(&md, "b", 1, BDIMS, BIAS, !raw);
  Onnx__NodeProto *g = ob_add_node(&md, "Gemm", "fc", "x", "W", "b", "h");
  ob_attr_int(g, "transB", 1);
  ob_add_node(&md, "Relu", "act", "h", NULL, NULL, "y");
  ob_add_output(&md, "y");
  return ob_pack(&md, len);
}

/* One step of m with x fed: its first output in *y (NULL on error; caller releases). */
static floe_code run1_rc(FloeOnnxModel *m, FloeTensor *x, FloeTensor **y, FloeStatus *st) {
  FloeSession *s = floe_session_new(floe_onnx_model_graph(m), NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  FloeFeed feed = {floe_onnx_model_input_node(m, 0), x};
  const char *fetch = floe_onnx_model_output_fetch(m, 0);
  *y = NULL;
  floe_code rc = floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, y, st);
  floe_session_free(s);
  return rc;
}

static FloeTensor *run1(FloeOnnxModel *m, FloeTensor *x, FloeStatus *st) {
  FloeTensor *y;
  ck_assert_msg(run1_rc(m, x, &y, st) == FLOE_OK, "%s", floe_status_message(st));
  return y;
}

/* v[i] = ((i mul % mod) - off) / div for i < n: the NHWC tests' weights and inputs, values
 * that are exact in f32 and differ from their neighbours. */
static void pattern(float *v, int64_t n, int mul, int mod, int off, float div) {
  for (int64_t i = 0; i < n; i++) v[i] = (float)((i * mul % mod) - off) / div;
}

/* dim1 = Unsqueeze(dim = Gather(shape, idx)): one entry of an exported reshape target (the
 * model holds a [0] initializer "ax0"). */
static void shape_entry(Model *md, const char *shape, const char *idx, const char *dim,
                        const char *dim1) {
  ob_add_node(md, "Gather", dim, shape, idx, NULL, dim);
  ob_add_node(md, "Unsqueeze", dim1, dim, "ax0", NULL, dim1);
}

/* y = Reshape(x, Concat(a, b)) as md's output, packed (caller frees; its size in *len). */
static uint8_t *pack_reshape_by(Model *md, const char *a, const char *b, size_t *len) {
  Onnx__NodeProto *cat = ob_add_node(md, "Concat", "cat", a, b, NULL, "newshape");
  ob_attr_int(cat, "axis", 0);
  ob_add_node(md, "Reshape", "reshape", "x", "newshape", NULL, "y");
  ob_add_output(md, "y");
  return ob_pack(md, len);
}

/* buf imported with keep_nchw = keep (checked to succeed). */
static FloeOnnxModel *import_keep(const uint8_t *buf, size_t len, const char *name, int keep,
                                  FloeStatus *st) {
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  o.keep_nchw = keep;
  FloeOnnxModel *m = floe_onnx_import(buf, len, name, &o, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  return m;
}

/* Nodes of op in m's graph. */
static int count_op(FloeOnnxModel *m, const char *op) {
  FloeGraph *g = floe_onnx_model_graph(m);
  int k = 0;
  for (int i = 0; i < floe_graph_num_nodes(g); i++)
    k += !strcmp(floe_node_op(floe_graph_node(g, i)), op);
  return k;
}

static FloeTensor *mlp_input(void) {
  int64_t d[2] = {2, 4};
  float v[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
  FloeTensor *x = floe_tensor_new(FLOE_F32, 2, d, NULL);
  memcpy(floe_tensor_data(x), v, sizeof v);
  return x;
}

static void check_mlp(const FloeTensor *y, const FloeTensor *x) {
  ck_assert_int_eq(floe_tensor_rank(y), 2);
  ck_assert_int_eq(floe_tensor_dim(y, 0), 2);
  ck_assert_int_eq(floe_tensor_dim(y, 1), 3);
  const float *xv = floe_tensor_data(x), *yv = floe_tensor_data(y);
  for (int r = 0; r < 2; r++)
    for (int o = 0; o < 3; o++) {
      double acc = BIAS[o];
      for (int k = 0; k < 4; k++) acc += (double)xv[r * 4 + k] * W[o * 4 + k];
      double want = acc > 0 ? acc : 0;
      ck_assert_msg(fabs(yv[r * 3 + o] - want) < 1e-5, "y[%d,%d] = %g, want %g", r, o,
                    yv[r * 3 + o], want);
    }
}

START_TEST(imports_and_runs_an_mlp) {
  for (int raw = 0; raw < 2; raw++) {
    size_t len;
    uint8_t *buf = mlp_model(&len, raw);
    FloeStatus *st = floe_status_new();
    FloeOnnxModel *m = floe_onnx_import(buf, len, "mlp", NULL, st);
    ck_assert_msg(m != NULL, "%s", floe_status_message(st));
    ck_assert_int_eq(floe_onnx_model_opset(m), 13);
    ck_assert_int_eq(floe_onnx_model_num_inputs(m), 1);
    ck_assert_str_eq(floe_onnx_model_input_name(m, 0), "x");
    ck_assert_int_eq(floe_onnx_model_input_dtype(m, 0), FLOE_F32);
    FloeShape is = floe_onnx_model_input_shape(m, 0);
    ck_assert_int_eq(is.rank, 2);
    ck_assert_int_eq(is.dims[0], FLOE_DIM_UNKNOWN);
    ck_assert_str_eq(floe_onnx_model_output_name(m, 0), "y");
    FloeTensor *x = mlp_input();
    FloeTensor *y = run1(m, x, st);
    check_mlp(y, x);
    floe_tensor_release(x);
    floe_tensor_release(y);
    floe_onnx_model_free(m);
    floe_status_free(st);
    free(buf);
  }
}
END_TEST

/* Reshape to a shape computed from Shape(x): folded to a constant, so the output's shape is
 * known when the graph is built; without folding it is not. */
START_TEST(folds_shape_arithmetic) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[3] = {2, 3, 4};
  ob_add_input(&md, "x", 3, xd);
  static const int64_t idx[1] = {0}, tail[1] = {-1};
  ob_add_int64_init(&md, "i0", 1, idx);
  ob_add_int64_init(&md, "m1", 1, tail);
  ob_add_node(&md, "Shape", "shape", "x", NULL, NULL, "s");
  Onnx__NodeProto *ga = ob_add_node(&md, "Gather", "first", "s", "i0", NULL, "d0");
  ob_attr_int(ga, "axis", 0);
  size_t len;
  uint8_t *buf = pack_reshape_by(&md, "d0", "m1", &len);
  FloeStatus *st = floe_status_new();
  for (int nofold = 0; nofold < 2; nofold++) {
    FloeOnnxOptions o;
    floe_onnx_options_init(&o);
    o.no_constant_folding = nofold;
    FloeOnnxModel *m = floe_onnx_import(buf, len, "reshape", &o, st);
    ck_assert_msg(m != NULL, "%s", floe_status_message(st));
    FloeShape s = floe_node_output_shape(floe_onnx_model_output(m, 0).node, 0);
    if (!nofold) {
      ck_assert_int_eq(s.rank, 2);
      ck_assert_int_eq(s.dims[0], 2);
      ck_assert_int_eq(s.dims[1], 12);
    } else {
      ck_assert(s.rank != 2 || s.dims[1] != 12);
    }
    int64_t d[3] = {2, 3, 4};
    FloeTensor *x = floe_tensor_new(FLOE_F32, 3, d, NULL);
    for (int i = 0; i < 24; i++) ((float *)floe_tensor_data(x))[i] = (float)i;
    FloeTensor *y = run1(m, x, st);
    ck_assert_int_eq(floe_tensor_dim(y, 0), 2);
    ck_assert_int_eq(floe_tensor_dim(y, 1), 12);
    for (int i = 0; i < 24; i++) ck_assert_float_eq(((float *)floe_tensor_data(y))[i], (float)i);
    floe_tensor_release(x);
    floe_tensor_release(y);
    floe_onnx_model_free(m);
  }
  floe_status_free(st);
  free(buf);
}
END_TEST

/* With a dynamic batch: the known dims that Gather(Shape(x), k) reads fold to constants, and a
 * reshape target computed from them with only the batch's entry unknown becomes [-1, 12], so
 * the output's shape is known but for the batch (at batches 2 and 5). A target whose constant
 * entries do not divide the input fails at run time naming both shapes, as the computed one
 * did; an index past the shape's end folds nothing and fails naming the node. */
START_TEST(folds_known_dims_of_a_dynamic_batch) {
  for (int which = 0; which < 3; which++) {
    Model md;
    ob_model_init(&md, 13);
    int64_t xd[3] = {-1, 3, 4};
    ob_add_input(&md, "x", 3, xd);
    static const int64_t zero = 0;
    ob_add_int64_scalar(&md, "i0", 0);
    ob_add_int64_scalar(&md, "i1", 1);
    ob_add_int64_scalar(&md, "i2", which == 2 ? 7 : 2);
    ob_add_int64_init(&md, "ax0", 1, &zero);
    static const int64_t five = 5;
    ob_add_int64_init(&md, "five", 1, &five);
    ob_add_node(&md, "Shape", "shape", "x", NULL, NULL, "s");
    shape_entry(&md, "s", "i0", "n", "n1");
    ob_add_node(&md, "Gather", "gc", "s", "i1", NULL, "c");
    ob_add_node(&md, "Gather", "gw", "s", "i2", NULL, "w");
    ob_add_node(&md, "Mul", "cw", "c", "w", NULL, "cw0");
    ob_add_node(&md, "Unsqueeze", "ucw", "cw0", "ax0", NULL, "cw1");
    size_t len;
    uint8_t *buf = pack_reshape_by(&md, "n1", which == 1 ? "five" : "cw1", &len);
    FloeStatus *st = floe_status_new();
    FloeOnnxModel *m = floe_onnx_import(buf, len, "dynreshape", NULL, st);
    if (which == 2 && !m) { /* the bad index may already fail while importing */
      ck_assert_msg(strstr(floe_status_message(st), "gw") != NULL, "%s", floe_status_message(st));
      floe_status_free(st);
      free(buf);
      continue;
    }
    ck_assert_msg(m != NULL, "%s", floe_status_message(st));
    if (which == 0) {
      FloeShape s = floe_node_output_shape(floe_onnx_model_output(m, 0).node, 0);
      ck_assert_int_eq(s.rank, 2);
      ck_assert_int_eq(s.dims[1], 12);
      ck_assert_int_le(count_op(m, "Shape"), 1); /* only the batch's entry is read */
    }
    for (int64_t batch = 2; batch <= 5; batch += 3) {
      int64_t d[3] = {batch, 3, 4};
      FloeTensor *x = floe_tensor_new(FLOE_F32, 3, d, NULL);
      for (int i = 0; i < batch * 12; i++) ((float *)floe_tensor_data(x))[i] = (float)i;
      FloeTensor *y;
      floe_code rc = run1_rc(m, x, &y, st);
      if (which == 0) {
        ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
        ck_assert_int_eq(floe_tensor_dim(y, 0), batch);
        ck_assert_int_eq(floe_tensor_dim(y, 1), 12);
        for (int i = 0; i < batch * 12; i++)
          ck_assert_float_eq(((float *)floe_tensor_data(y))[i], (float)i);
      } else {
        ck_assert_msg(rc != FLOE_OK, "case %d, batch %lld: ran", which, (long long)batch);
        const char *msg = floe_status_message(st);
        ck_assert_msg(which == 1 ? strstr(msg, "reshape") != NULL : strstr(msg, "gw") != NULL,
                      "%s", msg);
        floe_status_clear(st);
      }
      floe_tensor_release(y);
      floe_tensor_release(x);
    }
    floe_onnx_model_free(m);
    floe_status_free(st);
    free(buf);
  }
}
END_TEST

/* Every prefix of a valid model either imports or fails with a message; cutting inside the
 * weight's raw_data names the offset and the field path. */
START_TEST(truncated_models_fail_cleanly) {
  size_t len;
  uint8_t *buf = mlp_model(&len, 1);
  FloeStatus *st = floe_status_new();
  int failures = 0;
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t *copy = malloc(cut ? cut : 1);
    memcpy(copy, buf, cut);
    FloeOnnxModel *m = floe_onnx_import(copy, cut, "cut", NULL, st);
    if (!m) {
      failures++;
      ck_assert_int_ne(floe_status_code(st), FLOE_OK);
      ck_assert(strlen(floe_status_message(st)) > 10);
    }
    floe_onnx_model_free(m);
    free(copy);
  }
  ck_assert_int_gt(failures, (int)len / 2);
  /* Cut in the middle of the 48 bytes of W's raw_data. */
  size_t at = 0;
  for (size_t i = 0; i + sizeof W <= len; i++)
    if (!memcmp(buf + i, W, sizeof W)) at = i;
  ck_assert_uint_gt(at, 0);
  FloeOnnxModel *m = floe_onnx_import(buf, at + 20, "cut.onnx", NULL, st);
  ck_assert_ptr_null(m);
  ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "cut.onnx") && strstr(msg, "byte offset") &&
                    strstr(msg, "graph.initializer[0]"),
                "%s", msg);
  floe_status_free(st);
  free(buf);
}
END_TEST

/* Random byte flips never crash the importer. */
START_TEST(corrupt_bytes_never_crash) {
  size_t len;
  uint8_t *buf = mlp_model(&len, 1);
  FloeStatus *st = floe_status_new();
  uint64_t r = 0x2545F4914F6CDD1Dull;
  for (int trial = 0; trial < 400; trial++) {
    uint8_t *copy = malloc(len);
    memcpy(copy, buf, len);
    for (int k = 0; k < 3; k++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      copy[r % len] ^= (uint8_t)(r >> 32);
    }
    FloeOnnxModel *m = floe_onnx_import(copy, len, "flip", NULL, st);
    if (!m) ck_assert(strlen(floe_status_message(st)) > 0);
    floe_onnx_model_free(m);
    free(copy);
  }
  floe_status_free(st);
  free(buf);
}
END_TEST

static void expect_error(Model *md, floe_code code, const char *const *parts) {
  size_t len;
  uint8_t *buf = ob_pack(md, &len);
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = floe_onnx_import(buf, len, "bad.onnx", NULL, st);
  ck_assert_ptr_null(m);
  ck_assert_int_eq(floe_status_code(st), code);
  for (int i = 0; parts[i]; i++)
    ck_assert_msg(strstr(floe_status_message(st), parts[i]), "'%s' lacks '%s'",
                  floe_status_message(st), parts[i]);
  floe_status_free(st);
  free(buf);
}

START_TEST(unsupported_op_names_op_opset_node) {
  Model md;
  ob_model_init(&md, 11);
  int64_t xd[1] = {4};
  ob_add_input(&md, "x", 1, xd);
  ob_add_node(&md, "FancyOp", "mystery", "x", NULL, NULL, "y");
  ob_add_output(&md, "y");
  expect_error(&md, FLOE_UNIMPLEMENTED,
               (const char *[]){"bad.onnx", "mystery", "FancyOp", "opset 11", NULL});
}
END_TEST

START_TEST(undefined_input_is_named) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[1] = {4};
  ob_add_input(&md, "x", 1, xd);
  ob_add_node(&md, "Add", "sum", "x", "ghost", NULL, "y");
  ob_add_output(&md, "y");
  expect_error(&md, FLOE_INVALID_ARGUMENT, (const char *[]){"sum", "ghost", NULL});
}
END_TEST

START_TEST(bad_attribute_is_named) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[2] = {2, 3};
  ob_add_input(&md, "x", 2, xd);
  static const int64_t perm[3] = {2, 0, 1};
  Onnx__NodeProto *t = ob_add_node(&md, "Transpose", "tr", "x", NULL, NULL, "y");
  ob_attr_ints(t, "perm", perm, 3);
  ob_add_output(&md, "y");
  expect_error(&md, FLOE_INVALID_ARGUMENT, (const char *[]){"tr", "perm has 3 entries", NULL});
}
END_TEST

START_TEST(opset_out_of_range) {
  /* Reported as given, not cut to an int (2^62 read as "opset 0"). */
  const int64_t versions[] = {99, (int64_t)1 << 62, -5};
  const char *want[] = {"opset 99", "opset 4611686018427387904", "opset -5"};
  for (int k = 0; k < 3; k++) {
    Model md;
    ob_model_init(&md, 13);
    md.opset.version = versions[k];
    int64_t xd[1] = {4};
    ob_add_input(&md, "x", 1, xd);
    ob_add_node(&md, "Relu", "r", "x", NULL, NULL, "y");
    ob_add_output(&md, "y");
    expect_error(&md, FLOE_UNIMPLEMENTED, (const char *[]){want[k], NULL});
  }
}
END_TEST

/* TensorProto files: typed fields, raw data, and mismatched sizes. */
START_TEST(tensor_pb_files) {
  Onnx__TensorProto t;
  onnx__tensor_proto__init(&t);
  int64_t dims[2] = {2, 2};
  int64_t vals[4] = {7, -8, 9, 1ll << 40};
  t.n_dims = 2;
  t.dims = dims;
  t.has_data_type = 1;
  t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  t.n_int64_data = 4;
  t.int64_data = vals;
  uint8_t buf[256];
  size_t len = onnx__tensor_proto__pack(&t, buf);
  FloeStatus *st = floe_status_new();
  FloeTensor *x = floe_tensor_parse_onnx_pb(buf, len, "x.pb", st);
  ck_assert_msg(x != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_tensor_dtype(x), FLOE_I64);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(((int64_t *)floe_tensor_data(x))[i], vals[i]);
  floe_tensor_release(x);
  /* 3 values for a [2,2] tensor */
  t.n_int64_data = 3;
  len = onnx__tensor_proto__pack(&t, buf);
  ck_assert_ptr_null(floe_tensor_parse_onnx_pb(buf, len, "short.pb", st));
  ck_assert_msg(strstr(floe_status_message(st), "int64_data has 3 values") &&
                    strstr(floe_status_message(st), "short.pb"),
                "%s", floe_status_message(st));
  /* raw_data of the wrong length */
  t.n_int64_data = 0;
  t.has_raw_data = 1;
  t.raw_data.len = 12;
  t.raw_data.data = (uint8_t *)vals;
  len = onnx__tensor_proto__pack(&t, buf);
  ck_assert_ptr_null(floe_tensor_parse_onnx_pb(buf, len, "raw.pb", st));
  ck_assert_msg(strstr(floe_status_message(st), "raw_data has 12 bytes"), "%s",
                floe_status_message(st));
  /* a data type Floe lacks */
  t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
  len = onnx__tensor_proto__pack(&t, buf);
  ck_assert_ptr_null(floe_tensor_parse_onnx_pb(buf, len, "str.pb", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_UNIMPLEMENTED);
  ck_assert(strstr(floe_status_message(st), "STRING") != NULL);
  /* a file that is not there */
  ck_assert_ptr_null(floe_tensor_load_onnx_pb("/nonexistent/x.pb", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  floe_status_free(st);
}
END_TEST

/* With trainable, initializers are variables: the model computes the same, and a gradient
 * step on a squared error moves the weights and lowers the loss. */
START_TEST(trainable_initializers_train) {
  size_t len;
  uint8_t *buf = mlp_model(&len, 1);
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  o.trainable = 1;
  FloeOnnxModel *m = floe_onnx_import(buf, len, "mlp", &o, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  ck_assert_ptr_nonnull(floe_onnx_model_init_target(m));
  FloeGraph *g = floe_onnx_model_graph(m);
  FloeVariable vars[4];
  ck_assert_int_eq(floe_graph_variables(g, 1, vars, 4), 2);
  FloeOutput y = floe_onnx_model_output(m, 0);
  FloeOutput sq = floe_unary(g, "Square", "sq", y);
  FloeNodeBuilder *b = floe_node_begin(g, "Sum", "loss");
  floe_node_add_input(b, sq);
  int64_t axes[2] = {0, 1}, two = 2;
  FloeTensor *at = floe_tensor_new(FLOE_I64, 1, &two, NULL);
  memcpy(floe_tensor_data(at), axes, sizeof axes);
  floe_node_add_input(b, floe_const(g, "axes", at));
  floe_tensor_release(at);
  FloeOutput loss = floe_out(floe_node_finish(b), 0);
  FloeOptimizerOptions opt;
  floe_optimizer_options_init(&opt, FLOE_OPT_SGD);
  opt.learning_rate = 0.01;
  FloeNode *step = floe_minimize(g, "train", loss, &opt, NULL, 0);
  ck_assert_msg(step != NULL, "%s", floe_graph_error(g, st));
  ck_assert_ptr_nonnull(floe_variables_initializer(g, "init_rest"));
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  /* The model's initialiser, then one for what floe_minimize added (the global step). */
  const char *init = floe_onnx_model_init_target(m);
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  init = "init_rest";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  FloeTensor *x = mlp_input();
  FloeFeed feed = {floe_onnx_model_input_node(m, 0), x};
  const char *fetches[2] = {floe_onnx_model_output_fetch(m, 0), "loss"};
  FloeTensor *outs[2];
  ck_assert_int_eq(floe_session_run(s, &feed, 1, fetches, 2, NULL, 0, outs, st), FLOE_OK);
  check_mlp(outs[0], x);
  float before = *(float *)floe_tensor_data(outs[1]);
  floe_tensor_release(outs[0]);
  floe_tensor_release(outs[1]);
  const char *train = floe_node_name(step);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(floe_session_run(s, &feed, 1, NULL, 0, &train, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
  ck_assert_int_eq(floe_session_run(s, &feed, 1, &fetches[1], 1, NULL, 0, outs, st), FLOE_OK);
  float after = *(float *)floe_tensor_data(outs[0]);
  ck_assert_msg(after < before * 0.9f, "loss %g -> %g", before, after);
  floe_tensor_release(outs[0]);
  floe_tensor_release(x);
  floe_session_free(s);
  floe_onnx_model_free(m);
  floe_status_free(st);
  free(buf);
}
END_TEST

/* Allocation failure at every step of an import: a clean NO_MEMORY (or success), no leak
 * (valgrind runs this suite), and the next import works. */
START_TEST(allocation_failures) {
  size_t len;
  uint8_t *buf = mlp_model(&len, 1);
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  o.no_constant_folding = 1; /* folding runs sessions: tested elsewhere */
  int ok = 0;
  for (long n = 1; n < 5000 && !ok; n++) {
    floe_test_fail_alloc_after(n);
    FloeOnnxModel *m = floe_onnx_import(buf, len, "mlp", &o, st);
    floe_test_fail_alloc_after(0);
    if (m) {
      ok = 1;
    } else {
      ck_assert_msg(floe_status_code(st) == FLOE_NO_MEMORY || floe_status_code(st) == FLOE_DATA_LOSS,
                    "n=%ld: %s", n, floe_status_message(st));
    }
    floe_onnx_model_free(m);
  }
  ck_assert(ok);
  floe_status_free(st);
  free(buf);
}
END_TEST

static void attr_ints_n(Onnx__NodeProto *n, const char *name, int64_t a, int64_t b, int k) {
  int64_t *v = onnx_builder_alloc(4, sizeof *v);
  v[0] = a, v[1] = b, v[2] = a, v[3] = b;
  ob_attr_ints(n, name, v, (size_t)k);
}

/* ys[0] (the NHWC rewrite's output) equals ys[1] (NCHW kept), n values; releases both. */
static void same_nhwc_nchw(FloeTensor **ys, int64_t n) {
  ck_assert_int_eq(floe_tensor_num_elements(ys[0]), n);
  for (int64_t i = 0; i < n; i++) {
    float a = ((float *)floe_tensor_data(ys[0]))[i], b = ((float *)floe_tensor_data(ys[1]))[i];
    ck_assert_msg(fabsf(a - b) <= 1e-5f * (1 + fabsf(b)), "y[%lld]: NHWC %g, NCHW %g",
                  (long long)i, a, b);
  }
  floe_tensor_release(ys[0]);
  floe_tensor_release(ys[1]);
}

/* Conv -> Relu -> MaxPool -> Conv -> Add (residual) -> GlobalAveragePool -> Flatten: the NHWC
 * rewrite computes what the NCHW graph computes, with one transpose left (the input's: the
 * Flatten of [N, C, 1, 1] reads the same memory in NHWC, so it moves onto the NHWC data). */
START_TEST(nhwc_rewrite_matches_nchw) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[4] = {2, 3, 8, 8};
  ob_add_input(&md, "x", 4, xd);
  static float w1[4 * 3 * 3 * 3], w2[4 * 4 * 3 * 3], b1[4];
  pattern(w1, 108, 37, 17, 8, 16.0f);
  pattern(w2, 144, 53, 19, 9, 20.0f);
  for (int i = 0; i < 4; i++) b1[i] = 0.1f * (float)i - 0.15f;
  static const int64_t w1d[4] = {4, 3, 3, 3}, w2d[4] = {4, 4, 3, 3}, b1d[1] = {4};
  ob_add_init(&md, "w1", 4, w1d, w1, 1);
  ob_add_init(&md, "w2", 4, w2d, w2, 1);
  ob_add_init(&md, "b1", 1, b1d, b1, 1);
  Onnx__NodeProto *c1 = ob_add_node(&md, "Conv", "c1", "x", "w1", "b1", "h1");
  attr_ints_n(c1, "pads", 1, 1, 4);
  ob_add_node(&md, "Relu", "r1", "h1", NULL, NULL, "a1");
  Onnx__NodeProto *mp = ob_add_node(&md, "MaxPool", "mp", "a1", NULL, NULL, "p1");
  attr_ints_n(mp, "kernel_shape", 2, 2, 2);
  attr_ints_n(mp, "strides", 2, 2, 2);
  Onnx__NodeProto *c2 = ob_add_node(&md, "Conv", "c2", "p1", "w2", NULL, "h2");
  attr_ints_n(c2, "pads", 1, 1, 4);
  ob_add_node(&md, "Add", "res", "h2", "p1", NULL, "s");
  ob_add_node(&md, "GlobalAveragePool", "gap", "s", NULL, NULL, "g");
  ob_add_node(&md, "Flatten", "flat", "g", NULL, NULL, "y");
  ob_add_output(&md, "y");
  size_t len;
  uint8_t *buf = ob_pack(&md, &len);
  FloeStatus *st = floe_status_new();
  FloeTensor *ys[2];
  int64_t d[4] = {2, 3, 8, 8};
  FloeTensor *x = floe_tensor_new(FLOE_F32, 4, d, NULL);
  pattern(floe_tensor_data(x), 384, 29, 23, 11, 7.0f);
  for (int keep = 0; keep < 2; keep++) {
    FloeOnnxModel *m = import_keep(buf, len, "resblock", keep, st);
    FloeGraph *g = floe_onnx_model_graph(m);
    int transposes = count_op(m, "Transpose"), nhwc = 0;
    for (int i = 0; i < floe_graph_num_nodes(g); i++) {
      FloeNode *n = floe_graph_node(g, i);
      const char *df = floe__node_attr_str(n, "data_format");
      nhwc += df && (!strcmp(df, "NHWC") || !strcmp(df, "CHANNELS_LAST"));
    }
    if (keep) {
      ck_assert_int_eq(transposes, 0);
      ck_assert_int_eq(nhwc, 0);
    } else {
      ck_assert_int_eq(transposes, 1);
      ck_assert_int_ge(nhwc, 3); /* two convolutions and the pool */
    }
    ys[keep] = run1(m, x, st);
    floe_onnx_model_free(m);
  }
  same_nhwc_nchw(ys, 8);
  floe_tensor_release(x);
  floe_status_free(st);
  free(buf);
}
END_TEST

/* ONNX node op(ins...) -> out with any number of inputs (ob_add_node takes three). */
static Onnx__NodeProto *node_n(Model *md, const char *op, const char *name, const char *out,
                               int n, const char *const *ins) {
  Onnx__NodeProto *nd = ob_add_node(md, op, name, NULL, NULL, NULL, out);
  nd->input = onnx_builder_alloc((size_t)n, sizeof *nd->input);
  for (int i = 0; i < n; i++) nd->input[i] = (char *)ins[i];
  nd->n_input = (size_t)n;
  return nd;
}

/* A ShuffleNet unit as torch.onnx exports it, batch dynamic: Conv, the channels split in two
 * by Slices whose bounds come from Shape, a Conv + Relu on the second half, Concat, then the
 * channel shuffle (Reshape to [N, 2, C/2, H, W] computed from Shape, Transpose, Reshape
 * back) and a last Conv. The importer folds the known dims of the shapes (only the batch's
 * entry stays computed, which becomes -1), so the NHWC rewrite carries the layout through the
 * slices, the concatenation and the shuffle: three transposes are left (the input's, the
 * shuffle's own, the output's), and the results are the NCHW graph's at batches 2 and 3. */
START_TEST(nhwc_rewrite_through_channel_shuffle) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[4] = {-1, 8, 6, 6};
  ob_add_input(&md, "x", 4, xd);
  static float w1[8 * 8], w2[4 * 4 * 9], w3[8 * 8], b1[8];
  pattern(w1, 64, 37, 17, 8, 16.0f);
  pattern(w2, 144, 53, 19, 9, 20.0f);
  pattern(w3, 64, 29, 23, 11, 24.0f);
  for (int i = 0; i < 8; i++) b1[i] = 0.05f * (float)i - 0.2f;
  static const int64_t w1d[4] = {8, 8, 1, 1}, w2d[4] = {4, 4, 3, 3}, b1d[1] = {8};
  ob_add_init(&md, "w1", 4, w1d, w1, 1);
  ob_add_init(&md, "w2", 4, w2d, w2, 1);
  ob_add_init(&md, "w3", 4, w1d, w3, 1);
  ob_add_init(&md, "b1", 1, b1d, b1, 1);
  static const int64_t zero = 0, big = INT64_MAX, two_v = 2;
  ob_add_int64_scalar(&md, "i0", 0);
  ob_add_int64_scalar(&md, "i1", 1);
  ob_add_int64_scalar(&md, "i2", 2);
  ob_add_int64_scalar(&md, "i2b", 2);
  ob_add_int64_scalar(&md, "i3", 3);
  ob_add_int64_init(&md, "ax0", 1, &zero);
  ob_add_int64_init(&md, "big1", 1, &big);
  ob_add_int64_init(&md, "zero1", 1, &zero);
  ob_add_int64_init(&md, "two1", 1, &two_v);
  static const int64_t bigs[2] = {INT64_MAX, INT64_MAX}, zeros[2] = {0, 0};
  ob_add_int64_init(&md, "bigs", 2, bigs);
  ob_add_int64_init(&md, "zeros", 2, zeros);
  ob_add_node(&md, "Conv", "c1", "x", "w1", "b1", "h");
  /* half = Shape(h)[1] / 2; the slices [:, :half] and [:, half:] */
  ob_add_node(&md, "Shape", "sh", "h", NULL, NULL, "hs");
  ob_add_node(&md, "Gather", "gc", "hs", "i1", NULL, "c");
  ob_add_node(&md, "Div", "dv", "c", "i2", NULL, "half");
  ob_add_node(&md, "Unsqueeze", "uh", "half", "ax0", NULL, "half1");
  node_n(&md, "Concat", "ea", "ends_a", 2, (const char *const[]){"big1", "half1"});
  ob_attr_int(md.nodes[md.g.n_node - 1], "axis", 0);
  node_n(&md, "Concat", "sb", "starts_b", 2, (const char *const[]){"zero1", "half1"});
  ob_attr_int(md.nodes[md.g.n_node - 1], "axis", 0);
  ob_add_node(&md, "Slice", "sla", "h", "zeros", "ends_a", "xa");
  ob_add_node(&md, "Slice", "slb", "h", "starts_b", "bigs", "xb");
  Onnx__NodeProto *c2 = ob_add_node(&md, "Conv", "c2", "xb", "w2", NULL, "cb");
  attr_ints_n(c2, "pads", 1, 1, 4);
  ob_add_node(&md, "Relu", "rb", "cb", NULL, NULL, "rbo");
  node_n(&md, "Concat", "cat", "cat", 2, (const char *const[]){"xa", "rbo"});
  ob_attr_int(md.nodes[md.g.n_node - 1], "axis", 1);
  /* the shuffle: [N, 2, C/2, H, W] and back to [N, C, H, W], all computed from Shape(cat) */
  ob_add_node(&md, "Shape", "shc", "cat", NULL, NULL, "cs");
  shape_entry(&md, "cs", "i0", "n", "n1");
  shape_entry(&md, "cs", "i2b", "hh", "hh1");
  shape_entry(&md, "cs", "i3", "ww", "ww1");
  shape_entry(&md, "cs", "i1", "cc", "cc1");
  node_n(&md, "Concat", "s5", "shape5", 5,
         (const char *const[]){"n1", "two1", "half1", "hh1", "ww1"});
  ob_attr_int(md.nodes[md.g.n_node - 1], "axis", 0);
  ob_add_node(&md, "Reshape", "r5", "cat", "shape5", NULL, "g5");
  Onnx__NodeProto *tr = ob_add_node(&md, "Transpose", "t5", "g5", NULL, NULL, "s5t");
  static const int64_t sperm[5] = {0, 2, 1, 3, 4};
  ob_attr_ints(tr, "perm", sperm, 5);
  node_n(&md, "Concat", "s4", "shape4", 4, (const char *const[]){"n1", "cc1", "hh1", "ww1"});
  ob_attr_int(md.nodes[md.g.n_node - 1], "axis", 0);
  ob_add_node(&md, "Reshape", "r4", "s5t", "shape4", NULL, "shuf");
  ob_add_node(&md, "Conv", "c3", "shuf", "w3", NULL, "y");
  ob_add_output(&md, "y");
  size_t len;
  uint8_t *buf = ob_pack(&md, &len);
  FloeStatus *st = floe_status_new();
  for (int64_t batch = 2; batch <= 3; batch++) {
    int64_t d[4] = {batch, 8, 6, 6};
    FloeTensor *x = floe_tensor_new(FLOE_F32, 4, d, NULL);
    pattern(floe_tensor_data(x), batch * 288, 29, 23, 11, 7.0f);
    FloeTensor *ys[2];
    for (int keep = 0; keep < 2; keep++) {
      FloeOnnxModel *m = import_keep(buf, len, "shuffle", keep, st);
      /* only the batch's entry is computed: two Shape reads of it (h's was folded away) */
      ck_assert_int_le(count_op(m, "Shape"), 2);
      if (!keep) ck_assert_int_eq(count_op(m, "Transpose"), 3);
      ys[keep] = run1(m, x, st);
      floe_onnx_model_free(m);
    }
    same_nhwc_nchw(ys, batch * 288);
    floe_tensor_release(x);
  }
  floe_status_free(st);
  free(buf);
}
END_TEST

/* Two convolutions concatenated along the channels (axis 1, or -3), pooled, convolved again:
 * the transposes sink through the Concat (each of its inputs was transposed back to NCHW),
 * leaving the input's (one for each convolution reading it: the session's CSE merges them)
 * and the output's. */
START_TEST(nhwc_rewrite_through_concat) {
  Model md;
  ob_model_init(&md, 13);
  int64_t xd[4] = {2, 4, 6, 6};
  ob_add_input(&md, "x", 4, xd);
  static float wa[4 * 4], wb[4 * 4 * 9], wc[3 * 8];
  pattern(wa, 16, 37, 17, 8, 16.0f);
  pattern(wb, 144, 53, 19, 9, 20.0f);
  pattern(wc, 24, 41, 13, 6, 9.0f);
  static const int64_t wad[4] = {4, 4, 1, 1}, wbd[4] = {4, 4, 3, 3}, wcd[4] = {3, 8, 1, 1};
  ob_add_init(&md, "wa", 4, wad, wa, 1);
  ob_add_init(&md, "wb", 4, wbd, wb, 1);
  ob_add_init(&md, "wc", 4, wcd, wc, 1);
  ob_add_node(&md, "Conv", "ca", "x", "wa", NULL, "ha");
  ob_add_node(&md, "Relu", "ra", "ha", NULL, NULL, "aa");
  Onnx__NodeProto *cb = ob_add_node(&md, "Conv", "cb", "x", "wb", NULL, "hb");
  attr_ints_n(cb, "pads", 1, 1, 4);
  ob_add_node(&md, "Relu", "rb", "hb", NULL, NULL, "ab");
  Onnx__NodeProto *cat = ob_add_node(&md, "Concat", "cat", "aa", "ab", NULL, "c");
  ob_attr_int(cat, "axis", _i ? -3 : 1);
  Onnx__NodeProto *mp = ob_add_node(&md, "MaxPool", "mp", "c", NULL, NULL, "p");
  attr_ints_n(mp, "kernel_shape", 2, 2, 2);
  attr_ints_n(mp, "strides", 2, 2, 2);
  ob_add_node(&md, "Conv", "cc", "p", "wc", NULL, "y");
  ob_add_output(&md, "y");
  size_t len;
  uint8_t *buf = ob_pack(&md, &len);
  FloeStatus *st = floe_status_new();
  FloeTensor *ys[2];
  FloeTensor *x = floe_tensor_new(FLOE_F32, 4, xd, NULL);
  pattern(floe_tensor_data(x), 288, 29, 23, 11, 7.0f);
  for (int keep = 0; keep < 2; keep++) {
    FloeOnnxModel *m = import_keep(buf, len, "concat", keep, st);
    ck_assert_int_eq(count_op(m, "Transpose"), keep ? 0 : 3);
    ys[keep] = run1(m, x, st);
    floe_onnx_model_free(m);
  }
  same_nhwc_nchw(ys, 2 * 3 * 3 * 3);
  floe_tensor_release(x);
  floe_status_free(st);
  free(buf);
}
END_TEST

/* Inputs the fuzzer (make fuzz-onnx) once crashed on: each must now import or fail with a
 * message, with and without constant folding, and as a TensorProto too. */
START_TEST(fuzz_regressions) {
  const char *top = getenv("top_srcdir");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/onnx", top ? top : "..");
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "no %s", dir);
  struct dirent *e;
  int files = 0;
  FloeStatus *st = floe_status_new();
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    files++;
    for (int nofold = 0; nofold < 2; nofold++) {
      FloeOnnxOptions o;
      floe_onnx_options_init(&o);
      o.no_constant_folding = nofold;
      FloeOnnxModel *m = floe_onnx_import(buf, len, e->d_name, &o, st);
      if (!m) ck_assert_msg(strlen(floe_status_message(st)) > 0, "%s: no message", e->d_name);
      floe_onnx_model_free(m);
    }
    FloeTensor *t = floe_tensor_parse_onnx_pb(buf, len, e->d_name, st);
    floe_tensor_release(t);
  }
  closedir(d);
  ck_assert_int_gt(files, 0);
  floe_status_free(st);
}
END_TEST

static Suite *onnx_suite(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("import");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, imports_and_runs_an_mlp);
  tcase_add_test(tc, folds_shape_arithmetic);
  tcase_add_test(tc, folds_known_dims_of_a_dynamic_batch);
  tcase_add_test(tc, truncated_models_fail_cleanly);
  tcase_add_test(tc, corrupt_bytes_never_crash);
  tcase_add_test(tc, unsupported_op_names_op_opset_node);
  tcase_add_test(tc, undefined_input_is_named);
  tcase_add_test(tc, bad_attribute_is_named);
  tcase_add_test(tc, opset_out_of_range);
  tcase_add_test(tc, tensor_pb_files);
  tcase_add_test(tc, trainable_initializers_train);
  tcase_add_test(tc, allocation_failures);
  tcase_add_test(tc, fuzz_regressions);
  tcase_add_test(tc, nhwc_rewrite_matches_nchw);
  tcase_add_test(tc, nhwc_rewrite_through_channel_shuffle);
  tcase_add_loop_test(tc, nhwc_rewrite_through_concat, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(onnx_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
