/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_export.c - floe_onnx_export round trips: graphs of every mapped op (an NHWC and
 * an NCHW convolution and pools, BiasAdd both ways, MatMul with transposes, Reshape, Concat,
 * Split, Transpose, Gather, a fused LSTMCell with a forget bias, Softmax) are exported,
 * imported again with floe_onnx_import and run on the same random inputs: every output
 * agrees with the original graph's within 1e-5. An op without a mapping, a loop-free graph
 * without outputs, an unknown output name and a bad opset are errors naming what was wrong,
 * and a failed export_file leaves no file. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "floe/floe.h"
#include "floe/floe_onnx.h"

static unsigned rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
  rng = rng * 1103515245u + 12345u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static FloeTensor *rand_f32(int rank, const int64_t *dims) {
  FloeTensor *t = floe_tensor_new(FLOE_F32, rank, dims, NULL);
  float *p = floe_tensor_data(t);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) p[i] = frand();
  return t;
}

static FloeOutput cst(FloeGraph *g, const char *name, int rank, const int64_t *dims) {
  FloeTensor *t = rand_f32(rank, dims);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput cst_i32(FloeGraph *g, const char *name, int n, const int32_t *v, int rank) {
  const int64_t d[1] = {n};
  FloeTensor *t = floe_tensor_new(FLOE_I32, rank, d, NULL);
  memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput node2(FloeGraph *g, const char *op, const char *name, FloeOutput a, FloeOutput b) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  floe_node_add_input(nb, a);
  if (b.node) floe_node_add_input(nb, b);
  return floe_out(floe_node_finish(nb), 0);
}

static FloeOutput conv(FloeGraph *g, const char *name, FloeOutput x, FloeOutput w, int nchw,
                       const char *pad, int stride) {
  FloeNodeBuilder *nb = floe_node_begin(g, "Conv2D", name);
  floe_node_add_input(nb, x);
  floe_node_add_input(nb, w);
  const int64_t s[4] = {1, nchw ? 1 : stride, stride, nchw ? stride : 1};
  floe_node_set_attr_int_list(nb, "strides", s, 4);
  floe_node_set_attr_string(nb, "padding", pad);
  floe_node_set_attr_string(nb, "data_format", nchw ? "NCHW" : "NHWC");
  return floe_out(floe_node_finish(nb), 0);
}

static FloeOutput pool(FloeGraph *g, const char *op, const char *name, FloeOutput x, int nchw,
                       const char *pad) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  floe_node_add_input(nb, x);
  const int64_t k[4] = {1, nchw ? 1 : 3, 3, nchw ? 3 : 1}, s[4] = {1, nchw ? 1 : 2, 2, nchw ? 2 : 1};
  floe_node_set_attr_int_list(nb, "ksize", k, 4);
  floe_node_set_attr_int_list(nb, "strides", s, 4);
  floe_node_set_attr_string(nb, "padding", pad);
  floe_node_set_attr_string(nb, "data_format", nchw ? "NCHW" : "NHWC");
  return floe_out(floe_node_finish(nb), 0);
}

static FloeOutput bias_add(FloeGraph *g, const char *name, FloeOutput x, FloeOutput b, int nchw) {
  FloeNodeBuilder *nb = floe_node_begin(g, "BiasAdd", name);
  floe_node_add_input(nb, x);
  floe_node_add_input(nb, b);
  floe_node_set_attr_string(nb, "data_format", nchw ? "NCHW" : "NHWC");
  return floe_out(floe_node_finish(nb), 0);
}

/* The graph: image x [2,7,7,3] (NHWC) through Conv2D (SAME, stride 2; filter constant) ->
 * BiasAdd -> Relu -> MaxPool (VALID); the same x transposed to NCHW through Conv2D (VALID)
 * -> BiasAdd NCHW -> AvgPool (SAME); both flattened, concatenated, MatMul (transpose_b) and
 * Softmax. Word ids [3] (fed) pick rows of an embedding (Gather) that drive an LSTMCell whose
 * state h0 is fed; its h, c, and Split / Transpose / Sub / Mul / Tanh of them are outputs. */
static const char *const k_outputs[] = {"probs",    "cell/LSTMCell", "cell/LSTMCell:1", "cell/LSTMCell:2",
                                        "halves:1", "ht",            "mix",             "nchw_pool"};
static FloeGraph *build(void) {
  FloeGraph *g = floe_graph_new();
  const int64_t xd[4] = {-1, 7, 7, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput a = conv(g, "conv_a", x, cst(g, "wa", 4, (const int64_t[]){3, 3, 3, 4}), 0, "SAME", 2);
  a = bias_add(g, "bias_a", a, cst(g, "ba", 1, (const int64_t[]){4}), 0);
  a = floe_unary(g, "Relu", "relu_a", a);
  a = pool(g, "MaxPool", "pool_a", a, 0, "VALID"); /* [?,1,1,4] */
  FloeOutput xc = node2(g, "Transpose", "to_nchw", x, cst_i32(g, "perm", 4, (const int32_t[]){0, 3, 1, 2}, 1));
  FloeOutput b = conv(g, "conv_b", xc, cst(g, "wb", 4, (const int64_t[]){2, 2, 3, 5}), 1, "VALID", 1);
  b = bias_add(g, "bias_b", b, cst(g, "bb", 1, (const int64_t[]){5}), 1); /* [?,5,6,6] */
  b = pool(g, "AvgPool", "nchw_pool", b, 1, "SAME"); /* [?,5,3,3] */
  FloeOutput fa = node2(g, "Reshape", "flat_a", a, cst_i32(g, "shape_a", 2, (const int32_t[]){-1, 4}, 1));
  FloeOutput fb = node2(g, "Reshape", "flat_b", b, cst_i32(g, "shape_b", 2, (const int32_t[]){-1, 45}, 1));
  FloeNodeBuilder *nb = floe_node_begin(g, "Concat", "features");
  FloeOutput vals[2] = {fa, fb};
  floe_node_add_input_list(nb, vals, 2);
  floe_node_add_input(nb, cst_i32(g, "axis1", 1, (const int32_t[]){1}, 0));
  FloeOutput f = floe_out(floe_node_finish(nb), 0);
  FloeOutput logits = floe_matmul(g, "logits", f, cst(g, "wt", 2, (const int64_t[]){6, 49}), 0, 1);
  floe_unary(g, "Softmax", "probs", logits);
  /* The LSTM part. */
  FloeOutput ids = floe_placeholder(g, "ids", FLOE_I32, floe_shape_make(1, (const int64_t[]){3}));
  FloeOutput emb = node2(g, "Gather", "embed", cst(g, "table", 2, (const int64_t[]){10, 4}), ids);
  FloeOutput h0 = floe_placeholder(g, "h0", FLOE_F32, floe_shape_make(2, (const int64_t[]){3, 5}));
  FloeLSTMOptions lo;
  floe_lstm_options_init(&lo);
  lo.fused = FLOE_LSTM_FUSED_ALWAYS;
  lo.forget_bias = 1.0;
  FloeLSTMState prev = {h0, cst(g, "c0", 2, (const int64_t[]){3, 5})};
  FloeLSTMState st = floe_lstm_cell(g, "cell", emb, prev, cst(g, "lw", 2, (const int64_t[]){9, 20}),
                                    cst(g, "lb", 1, (const int64_t[]){20}), &lo);
  ck_assert_str_eq(floe_node_name(st.h.node), "cell/LSTMCell");
  FloeNodeBuilder *sb = floe_node_begin(g, "Split", "halves"); /* [3,5] -> 5 x [3,1] */
  floe_node_add_input(sb, st.c);
  floe_node_add_input(sb, cst_i32(g, "axis1b", 1, (const int32_t[]){1}, 0));
  floe_node_set_attr_int(sb, "num_split", 5);
  floe_node_finish(sb);
  node2(g, "Transpose", "ht", st.h, cst_i32(g, "perm2", 2, (const int32_t[]){1, 0}, 1));
  FloeOutput m = floe_binary(g, "Sub", NULL, floe_binary(g, "Mul", NULL, st.h, st.c), st.h);
  floe_unary(g, "Tanh", "mix", m);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static FloeTensor **run(const FloeGraph *g, const char *const *fetch, int n, FloeTensor *x,
                        FloeTensor *ids, FloeTensor *h0) {
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "session: %s", floe_status_message(st));
  FloeFeed feeds[3] = {{"x", x}, {"ids", ids}, {"h0", h0}};
  FloeTensor **out = calloc((size_t)n, sizeof *out);
  ck_assert_msg(floe_session_run(s, feeds, 3, fetch, n, NULL, 0, out, st) == FLOE_OK, "run: %s",
                floe_status_message(st));
  floe_session_free(s);
  floe_status_free(st);
  return out;
}

START_TEST(round_trip) {
  FloeGraph *g = build();
  FloeStatus *st = floe_status_new();
  FloeOnnxExportOptions eo;
  floe_onnx_export_options_init(&eo);
  eo.opset = _i ? 17 : 13;
  eo.outputs = k_outputs;
  eo.num_outputs = 8;
  void *buf = NULL;
  size_t len = 0;
  ck_assert_msg(floe_onnx_export(g, &eo, &buf, &len, st) == FLOE_OK, "%s", floe_status_message(st));
  FloeOnnxModel *m = floe_onnx_import(buf, len, "exported", NULL, st);
  ck_assert_msg(m != NULL, "import: %s", floe_status_message(st));
  free(buf);
  ck_assert_int_eq(floe_onnx_model_opset(m), eo.opset);
  ck_assert_int_eq(floe_onnx_model_num_inputs(m), 3);
  ck_assert_int_eq(floe_onnx_model_num_outputs(m), 8);
  const char *fetch[8];
  for (int i = 0; i < 8; i++) {
    ck_assert_str_eq(floe_onnx_model_output_name(m, i), k_outputs[i]);
    fetch[i] = floe_onnx_model_output_fetch(m, i);
  }
  for (int i = 0; i < 3; i++) /* the inputs keep their names, dtypes and known dims */
    ck_assert_str_eq(floe_onnx_model_input_node(m, i), floe_onnx_model_input_name(m, i));
  ck_assert_int_eq(floe_onnx_model_input_dtype(m, 1), FLOE_I32);
  FloeShape xs = floe_onnx_model_input_shape(m, 0);
  ck_assert_int_eq(xs.rank, 4);
  ck_assert(xs.dims[0] == FLOE_DIM_UNKNOWN && xs.dims[1] == 7 && xs.dims[3] == 3);
  FloeTensor *x = rand_f32(4, (const int64_t[]){2, 7, 7, 3});
  FloeTensor *h0 = rand_f32(2, (const int64_t[]){3, 5});
  FloeTensor *ids = floe_tensor_new(FLOE_I32, 1, (const int64_t[]){3}, NULL);
  memcpy(floe_tensor_data(ids), (const int32_t[]){7, 0, 7}, 3 * sizeof(int32_t));
  FloeTensor **want = run(g, k_outputs, 8, x, ids, h0);
  FloeTensor **got = run(floe_onnx_model_graph(m), fetch, 8, x, ids, h0);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(floe_tensor_num_elements(got[i]), floe_tensor_num_elements(want[i]));
    ck_assert_int_eq(floe_tensor_rank(got[i]), floe_tensor_rank(want[i]));
    const float *a = floe_tensor_data(got[i]), *b = floe_tensor_data(want[i]);
    double max_abs = 0;
    for (int64_t k = 0; k < floe_tensor_num_elements(want[i]); k++) {
      double d = fabs((double)a[k] - (double)b[k]);
      ck_assert_msg(d <= 1e-5 * (1 + fabs((double)b[k])), "%s[%lld]: %g, want %g", k_outputs[i],
                    (long long)k, (double)a[k], (double)b[k]);
      if (fabs((double)b[k]) > max_abs) max_abs = fabs((double)b[k]);
    }
    ck_assert_msg(max_abs > 1e-3, "%s is all zeros: a vacuous comparison", k_outputs[i]);
    floe_tensor_release(got[i]);
    floe_tensor_release(want[i]);
  }
  free(got);
  free(want);
  floe_tensor_release(x);
  floe_tensor_release(h0);
  floe_tensor_release(ids);
  floe_onnx_model_free(m);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(unmapped_op) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, (const int64_t[]){4}));
  FloeOutput r = floe_unary(g, "Relu", "r", x);
  floe_unary(g, "Floor", "the_floor", r);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeStatus *st = floe_status_new();
  char path[] = "/tmp/floe_export_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  unlink(path);
  ck_assert_int_eq(floe_onnx_export_file(g, path, NULL, st), FLOE_UNIMPLEMENTED);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "'the_floor'") && strstr(msg, "op Floor") && strstr(msg, path), "%s", msg);
  ck_assert_msg(access(path, F_OK) != 0, "a failed export left %s", path);
  /* Without the unmapped node the same graph exports. */
  FloeOnnxExportOptions eo;
  floe_onnx_export_options_init(&eo);
  eo.outputs = (const char *const[]){"r"};
  eo.num_outputs = 1;
  ck_assert_msg(floe_onnx_export_file(g, path, &eo, st) == FLOE_OK, "%s", floe_status_message(st));
  ck_assert_int_eq(access(path, F_OK), 0);
  unlink(path);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(bad_options) {
  FloeGraph *g = floe_graph_new();
  floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, (const int64_t[]){4}));
  FloeStatus *st = floe_status_new();
  void *buf = (void *)1;
  size_t len = 1;
  ck_assert_int_eq(floe_onnx_export(g, NULL, &buf, &len, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "no output"), "%s", floe_status_message(st));
  ck_assert_ptr_null(buf);
  FloeOnnxExportOptions eo;
  floe_onnx_export_options_init(&eo);
  eo.outputs = (const char *const[]){"nope:0"};
  eo.num_outputs = 1;
  ck_assert_int_eq(floe_onnx_export(g, &eo, &buf, &len, st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(st), "'nope:0'"), "%s", floe_status_message(st));
  floe_onnx_export_options_init(&eo);
  eo.opset = 12;
  ck_assert_int_eq(floe_onnx_export(g, &eo, &buf, &len, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "opset 12"), "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_export");
  TCase *tc = tcase_create("export");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, round_trip, 0, 2);
  tcase_add_test(tc, unmapped_op);
  tcase_add_test(tc, bad_options);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
