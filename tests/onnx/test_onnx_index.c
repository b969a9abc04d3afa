/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_index.c - the ONNX importer's indexing and data-movement ops on small models
 * built here with protobuf-c: bad attributes and equations are import errors naming the node
 * and what is wrong; bad run-time values (indices, steps, axes, sizes) are run errors naming
 * the node; and results ONNX's own test data does not reach (run-time pads that crop and a
 * run-time pad value, Einsum with three operands, broadcast "..." and integers, Slice with
 * omitted axes and negative steps) match values computed here by plain loops. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe.h"
#include "floe/floe_onnx.h"
#include "onnx.pb-c.h"

enum { T_FLOAT = 1, T_INT32 = 6, T_INT64 = 7, T_BOOL = 9 };

/* ---- a one-node model, built in place ---- */

#define TB_MAX 8

typedef struct TB {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__NodeProto node, *nodes[1];
  Onnx__OperatorSetIdProto opset, *opsets[1];
  char *node_in[TB_MAX], *node_out[TB_MAX];
  Onnx__ValueInfoProto vi[2 * TB_MAX], *gin[TB_MAX], *gout[TB_MAX];
  Onnx__TypeProto tp[2 * TB_MAX];
  Onnx__TypeProto__Tensor tt[2 * TB_MAX];
  Onnx__TensorShapeProto sh[2 * TB_MAX];
  Onnx__TensorShapeProto__Dimension dim[2 * TB_MAX][FLOE_MAX_DIMS];
  Onnx__TensorShapeProto__Dimension *dimp[2 * TB_MAX][FLOE_MAX_DIMS];
  int64_t vdims[2 * TB_MAX][FLOE_MAX_DIMS];
  Onnx__TensorProto init[TB_MAX], *initp[TB_MAX];
  int64_t init_dims[TB_MAX][1];
  int64_t init_vals[TB_MAX][16];
  Onnx__AttributeProto attr[TB_MAX], *attrp[TB_MAX];
  int nvi;
} TB;

static void tb_init(TB *t, const char *op, int opset) {
  memset(t, 0, sizeof *t);
  t->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
  t->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  t->node = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  t->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
  t->model.has_ir_version = 1;
  t->model.ir_version = 8;
  t->opset.domain = "";
  t->opset.has_version = 1;
  t->opset.version = opset;
  t->opsets[0] = &t->opset;
  t->model.n_opset_import = 1;
  t->model.opset_import = t->opsets;
  t->model.graph = &t->graph;
  t->graph.name = "g";
  t->node.op_type = (char *)op;
  t->node.name = "bad_node";
  t->node.input = t->node_in;
  t->node.output = t->node_out;
  t->node.attribute = t->attrp;
  t->nodes[0] = &t->node;
  t->graph.n_node = 1;
  t->graph.node = t->nodes;
  t->graph.input = t->gin;
  t->graph.output = t->gout;
  t->graph.initializer = t->initp;
}

static Onnx__ValueInfoProto *tb_value(TB *t, const char *name, int type, int rank,
                                      const int64_t *dims) {
  int k = t->nvi++;
  Onnx__ValueInfoProto *v = &t->vi[k];
  *v = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  t->tp[k] = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  t->tt[k] = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  t->sh[k] = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  v->name = (char *)name;
  v->type = &t->tp[k];
  t->tp[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tp[k].tensor_type = &t->tt[k];
  t->tt[k].has_elem_type = 1;
  t->tt[k].elem_type = type;
  if (rank >= 0) {
    t->tt[k].shape = &t->sh[k];
    for (int i = 0; i < rank; i++) {
      t->dim[k][i] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
      t->dim[k][i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      t->dim[k][i].dim_value = dims[i];
      t->dimp[k][i] = &t->dim[k][i];
    }
    t->sh[k].n_dim = (size_t)rank;
    t->sh[k].dim = t->dimp[k];
  }
  return v;
}

/* A graph input of this type and shape, also the node's next input. */
static void tb_input(TB *t, const char *name, int type, int rank, const int64_t *dims) {
  t->gin[t->graph.n_input++] = tb_value(t, name, type, rank, dims);
  t->node_in[t->node.n_input++] = (char *)name;
}

/* A 1-D int64 initializer, also the node's next input. */
static void tb_const(TB *t, const char *name, int n, const int64_t *v) {
  int k = (int)t->graph.n_initializer++;
  Onnx__TensorProto *p = &t->init[k];
  *p = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  p->name = (char *)name;
  p->has_data_type = 1;
  p->data_type = T_INT64;
  t->init_dims[k][0] = n;
  p->n_dims = 1;
  p->dims = t->init_dims[k];
  memcpy(t->init_vals[k], v, (size_t)n * sizeof *v);
  p->n_int64_data = (size_t)n;
  p->int64_data = t->init_vals[k];
  t->initp[k] = p;
  t->node_in[t->node.n_input++] = (char *)name;
}

static void tb_output(TB *t, const char *name, int type) {
  t->gout[t->graph.n_output++] = tb_value(t, name, type, -1, NULL);
  t->node_out[t->node.n_output++] = (char *)name;
}

static Onnx__AttributeProto *tb_attr(TB *t, const char *name, Onnx__AttributeProto__AttributeType ty) {
  int k = (int)t->node.n_attribute++;
  Onnx__AttributeProto *a = &t->attr[k];
  *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ty;
  t->attrp[k] = a;
  return a;
}

static void tb_attr_i(TB *t, const char *name, int64_t v) {
  Onnx__AttributeProto *a = tb_attr(t, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

static void tb_attr_s(TB *t, const char *name, const char *s) {
  Onnx__AttributeProto *a = tb_attr(t, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)s;
  a->s.len = strlen(s);
}

static FloeOnnxModel *tb_import(TB *t, FloeStatus *st) {
  size_t len = protobuf_c_message_get_packed_size(&t->model.base);
  uint8_t *buf = malloc(len + 1);
  ck_assert_ptr_nonnull(buf);
  protobuf_c_message_pack(&t->model.base, buf);
  FloeOnnxModel *m = floe_onnx_import(buf, len, "test model", NULL, st);
  free(buf);
  return m;
}

/* Imports the model, which must fail naming the node and containing `what`. */
static void expect_import_error(TB *t, const char *what) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = tb_import(t, st);
  ck_assert_msg(m == NULL, "%s: the import succeeded", t->node.op_type);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "bad_node") && strstr(msg, t->node.op_type) && strstr(msg, what),
                "%s: message '%s' lacks the node or '%s'", t->node.op_type, msg, what);
  floe_status_free(st);
}

/* Imports and runs the model on the feeds (in graph input order); returns output 0, or NULL
 * with *err holding the run's message. */
static FloeTensor *run(TB *t, FloeTensor **feeds, char *err, size_t cap) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = tb_import(t, st);
  ck_assert_msg(m != NULL, "import: %s", floe_status_message(st));
  FloeFeed f[TB_MAX];
  int nf = floe_onnx_model_num_inputs(m);
  for (int i = 0; i < nf; i++) f[i] = (FloeFeed){floe_onnx_model_input_node(m, i), feeds[i]};
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *s = floe_session_new(floe_onnx_model_graph(m), &so, st);
  ck_assert_msg(s != NULL, "session: %s", floe_status_message(st));
  const char *fetch = floe_onnx_model_output_fetch(m, 0);
  FloeTensor *out = NULL;
  if (floe_session_run(s, f, nf, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) {
    snprintf(err, cap, "%s", floe_status_message(st));
    out = NULL;
  }
  floe_session_free(s);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return out;
}

static void expect_run_error(TB *t, FloeTensor **feeds, const char *what) {
  char err[1024] = "";
  FloeTensor *y = run(t, feeds, err, sizeof err);
  ck_assert_msg(y == NULL, "%s: the run succeeded", t->node.op_type);
  ck_assert_msg(strstr(err, what) && strstr(err, "bad_node"), "%s: message '%s' lacks the node or '%s'",
                t->node.op_type, err, what);
}

static FloeTensor *f32(int rank, const int64_t *dims, const float *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, rank, dims, v, (size_t)n * sizeof *v, NULL);
  ck_assert_ptr_nonnull(t);
  return t;
}

static FloeTensor *i64(int n, const int64_t *v) {
  int64_t d = n;
  FloeTensor *t = floe_tensor_from_data(FLOE_I64, 1, &d, v, (size_t)n * sizeof *v, NULL);
  ck_assert_ptr_nonnull(t);
  return t;
}

static void release_all(FloeTensor **t, int n) {
  for (int i = 0; i < n; i++) floe_tensor_release(t[i]);
}

static void expect_shape(const FloeTensor *y, int rank, const int64_t *dims) {
  ck_assert_int_eq(floe_tensor_rank(y), rank);
  for (int i = 0; i < rank; i++) ck_assert_int_eq(floe_tensor_dims(y)[i], dims[i]);
}

static void expect_f32(const FloeTensor *y, const float *want, int64_t n, float tol) {
  ck_assert_int_eq(floe_tensor_num_elements(y), n);
  const float *got = floe_tensor_data(y);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(got[i] - want[i] <= tol && want[i] - got[i] <= tol, "element %lld: %g, want %g",
                  (long long)i, got[i], want[i]);
}

/* ---- import errors ---- */

START_TEST(bad_attributes_are_import_errors) {
  static const int64_t d23[2] = {2, 3}, d3[1] = {3}, d1444[4] = {1, 4, 4, 4}, d234[3] = {2, 3, 4};
  TB t;
  tb_init(&t, "GatherElements", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "i", T_INT64, 2, d23);
  tb_attr_i(&t, "axis", 2);
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "axis");

  tb_init(&t, "ScatterElements", 16);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "i", T_INT64, 2, d23);
  tb_input(&t, "u", T_FLOAT, 2, d23);
  tb_attr_s(&t, "reduction", "sub");
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "reduction 'sub'");

  tb_init(&t, "ScatterND", 16);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "i", T_INT64, 2, d23);
  tb_input(&t, "u", T_FLOAT, 1, d3);
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "indices"); /* [2,3] addresses 3 dims of a rank-2 data */

  tb_init(&t, "DepthToSpace", 13);
  tb_input(&t, "x", T_FLOAT, 4, d1444);
  tb_attr_i(&t, "blocksize", 2);
  tb_attr_s(&t, "mode", "ABC");
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "mode");

  tb_init(&t, "SpaceToDepth", 13);
  tb_input(&t, "x", T_FLOAT, 4, d1444);
  tb_attr_i(&t, "blocksize", 3);
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "multiple of blocksize");

  tb_init(&t, "EyeLike", 9);
  tb_input(&t, "x", T_FLOAT, 3, d234);
  tb_output(&t, "y", T_FLOAT);
  expect_import_error(&t, "2-D");

  tb_init(&t, "OneHot", 11);
  tb_input(&t, "i", T_INT64, 1, d3);
  tb_const(&t, "depth", 1, (const int64_t[]){4});
  tb_const(&t, "values", 2, (const int64_t[]){0, 1});
  tb_attr_i(&t, "axis", 3);
  tb_output(&t, "y", T_INT64);
  expect_import_error(&t, "axis 3");

  tb_init(&t, "TopK", 9);
  tb_input(&t, "x", T_FLOAT, 1, d3);
  tb_output(&t, "v", T_FLOAT);
  tb_output(&t, "i", T_INT64);
  expect_import_error(&t, "'k'");
}
END_TEST

START_TEST(bad_equations_are_import_errors) {
  static const int64_t d23[2] = {2, 3}, d34[2] = {3, 4};
  static const struct {
    const char *eq, *what;
    int two; /* two inputs */
  } cases[] = {
      {"ij,jk->ik", "operands", 0},
      {"i.j->i", "'...'", 0},
      {"ij->ik", "in no input", 0},
      {"ij->ii", "repeated", 0},
      {"ijk->i", "does not match", 0},
      {"i1->i", "character", 0},
      {"ij,jk", NULL, 1}, /* valid: the implicit output is "ik" */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    TB t;
    tb_init(&t, "Einsum", 12);
    tb_input(&t, "a", T_FLOAT, 2, d23);
    if (cases[c].two) tb_input(&t, "b", T_FLOAT, 2, d34);
    tb_attr_s(&t, "equation", cases[c].eq);
    tb_output(&t, "y", T_FLOAT);
    if (cases[c].two) { /* a valid equation: implicit output "ik" */
      FloeStatus *st = floe_status_new();
      FloeOnnxModel *m = tb_import(&t, st);
      ck_assert_msg(m != NULL, "%s: %s", cases[c].eq, floe_status_message(st));
      FloeOutput o = floe_onnx_model_output(m, 0);
      FloeShape s = floe_node_output_shape(o.node, o.index);
      ck_assert_int_eq(s.rank, 2);
      ck_assert_int_eq(s.dims[0], 2);
      ck_assert_int_eq(s.dims[1], 4);
      floe_onnx_model_free(m);
      floe_status_free(st);
      continue;
    }
    expect_import_error(&t, cases[c].what);
  }
}
END_TEST

/* ---- run-time errors ---- */

START_TEST(bad_run_time_values_are_run_errors) {
  static const int64_t d23[2] = {2, 3}, d2[1] = {2}, d1[1] = {1}, d4[1] = {4}, d0[1] = {0};
  float x6[6] = {1, 2, 3, 4, 5, 6};
  TB t;
  FloeTensor *in[5];

  tb_init(&t, "Slice", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "s", T_INT64, 1, d1);
  tb_input(&t, "e", T_INT64, 1, d1);
  tb_input(&t, "a", T_INT64, 1, d1);
  tb_input(&t, "st", T_INT64, 1, d1);
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(1, (int64_t[]){0}), in[2] = i64(1, (int64_t[]){2});
  in[3] = i64(1, (int64_t[]){1}), in[4] = i64(1, (int64_t[]){0});
  expect_run_error(&t, in, "steps[0] is 0");
  release_all(in, 5);

  tb_init(&t, "Squeeze", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "a", T_INT64, 1, d1);
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(1, (int64_t[]){1});
  expect_run_error(&t, in, "size is not 1");
  release_all(in, 2);

  tb_init(&t, "GatherElements", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "i", T_INT64, 2, (const int64_t[]){2, 1});
  tb_attr_i(&t, "axis", 1);
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6);
  in[1] = floe_tensor_from_data(FLOE_I64, 2, (const int64_t[]){2, 1}, (const int64_t[]){2, -4},
                                16, NULL);
  expect_run_error(&t, in, "outside [-3, 3)");
  release_all(in, 2);

  tb_init(&t, "Split", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "s", T_INT64, 1, d2);
  tb_attr_i(&t, "axis", 1);
  tb_output(&t, "y0", T_FLOAT);
  tb_output(&t, "y1", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(2, (int64_t[]){1, 1});
  expect_run_error(&t, in, "add up to 2");
  release_all(in, 2);

  tb_init(&t, "Pad", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "p", T_INT64, -1, NULL); /* any shape: 2 values are fed for 4 */
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(2, (int64_t[]){1, 1});
  expect_run_error(&t, in, "Reshape");
  release_all(in, 2);

  tb_init(&t, "Pad", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "p", T_INT64, 1, d4);
  tb_attr_s(&t, "mode", "reflect");
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(4, (int64_t[]){2, 0, 0, 0});
  expect_run_error(&t, in, "REFLECT");
  release_all(in, 2);

  tb_init(&t, "Range", 11);
  tb_input(&t, "a", T_INT64, 0, d0);
  tb_input(&t, "b", T_INT64, 0, d0);
  tb_input(&t, "d", T_INT64, 0, d0);
  tb_output(&t, "y", T_INT64);
  in[0] = floe_tensor_scalar_i64(0, NULL), in[1] = floe_tensor_scalar_i64(5, NULL);
  in[2] = floe_tensor_scalar_i64(0, NULL);
  expect_run_error(&t, in, "delta must not be 0");
  release_all(in, 3);

  tb_init(&t, "TopK", 11);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "k", T_INT64, 1, d1);
  tb_output(&t, "v", T_FLOAT);
  tb_output(&t, "i", T_INT64);
  in[0] = f32(2, d23, x6), in[1] = i64(1, (int64_t[]){4});
  expect_run_error(&t, in, "k = 4");
  release_all(in, 2);

  tb_init(&t, "ReverseSequence", 10);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "l", T_INT64, 1, (const int64_t[]){3});
  tb_attr_i(&t, "batch_axis", 1);
  tb_attr_i(&t, "time_axis", 0);
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(2, d23, x6), in[1] = i64(3, (int64_t[]){1, 3, 0});
  expect_run_error(&t, in, "outside [0, 2]");
  release_all(in, 2);
}
END_TEST

/* ---- results the ONNX test data does not reach ---- */

START_TEST(pad_with_run_time_pads_that_crop_and_a_run_time_value) {
  static const int64_t d23[2] = {2, 3}, d4[1] = {4}, d0[1] = {0};
  float x6[6] = {1, 2, 3, 4, 5, 6};
  TB t;
  tb_init(&t, "Pad", 13);
  tb_input(&t, "x", T_FLOAT, 2, d23);
  tb_input(&t, "p", T_INT64, 1, d4);
  tb_input(&t, "v", T_FLOAT, 0, d0);
  tb_output(&t, "y", T_FLOAT);
  /* befores (0, -1), afters (1, 1): one more row, first column dropped, one more column. */
  FloeTensor *in[3] = {f32(2, d23, x6), i64(4, (int64_t[]){0, -1, 1, 1}),
                       floe_tensor_scalar_f32(9, NULL)};
  char err[512];
  FloeTensor *y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  expect_shape(y, 2, (const int64_t[]){3, 3});
  expect_f32(y, (const float[]){2, 3, 9, 5, 6, 9, 9, 9, 9}, 9, 0);
  floe_tensor_release(y);
  release_all(in, 3);
}
END_TEST

START_TEST(slice_with_omitted_axes_and_negative_steps) {
  static const int64_t d10[1] = {10}, d1[1] = {1};
  float x[10];
  for (int i = 0; i < 10; i++) x[i] = (float)i;
  TB t;
  tb_init(&t, "Slice", 13);
  tb_input(&t, "x", T_FLOAT, 1, d10);
  tb_input(&t, "s", T_INT64, 1, d1);
  tb_input(&t, "e", T_INT64, 1, d1);
  t.node_in[t.node.n_input++] = (char *)""; /* axes omitted */
  tb_input(&t, "st", T_INT64, 1, d1);
  tb_output(&t, "y", T_FLOAT);
  FloeTensor *in[4] = {f32(1, d10, x), i64(1, (int64_t[]){-1}), i64(1, (int64_t[]){-100}),
                       i64(1, (int64_t[]){-3})};
  char err[512];
  FloeTensor *y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  expect_f32(y, (const float[]){9, 6, 3, 0}, 4, 0);
  floe_tensor_release(y);
  release_all(in, 4);
}
END_TEST

/* y[i][l] = sum_j sum_k a[i][j] b[j][k] c[k][l], by loops. */
START_TEST(einsum_three_operands) {
  static const int64_t da[2] = {2, 3}, db[2] = {3, 4}, dc[2] = {4, 2};
  float a[6], b[12], c[8], want[4] = {0};
  for (int i = 0; i < 6; i++) a[i] = (float)(i % 4) - 1.5f;
  for (int i = 0; i < 12; i++) b[i] = (float)((i * 7) % 5) - 2;
  for (int i = 0; i < 8; i++) c[i] = 0.25f * (float)i;
  for (int i = 0; i < 2; i++)
    for (int l = 0; l < 2; l++)
      for (int j = 0; j < 3; j++)
        for (int k = 0; k < 4; k++) want[i * 2 + l] += a[i * 3 + j] * b[j * 4 + k] * c[k * 2 + l];
  TB t;
  tb_init(&t, "Einsum", 12);
  tb_input(&t, "a", T_FLOAT, 2, da);
  tb_input(&t, "b", T_FLOAT, 2, db);
  tb_input(&t, "c", T_FLOAT, 2, dc);
  tb_attr_s(&t, "equation", "ij, jk ,kl -> il");
  tb_output(&t, "y", T_FLOAT);
  FloeTensor *in[3] = {f32(2, da, a), f32(2, db, b), f32(2, dc, c)};
  char err[512];
  FloeTensor *y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  expect_shape(y, 2, (const int64_t[]){2, 2});
  expect_f32(y, want, 4, 1e-4f);
  floe_tensor_release(y);
  release_all(in, 3);
}
END_TEST

/* "...ij,...jk->...ik" with batch dims [1] and [4] broadcast, and "bii->b" (traces). */
START_TEST(einsum_broadcast_ellipsis_and_traces) {
  static const int64_t da[3] = {1, 2, 3}, db[3] = {4, 3, 2};
  float a[6], b[24], want[16] = {0};
  for (int i = 0; i < 6; i++) a[i] = (float)i - 2;
  for (int i = 0; i < 24; i++) b[i] = (float)((i * 5) % 7) - 3;
  for (int n = 0; n < 4; n++)
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) want[(n * 2 + i) * 2 + k] += a[i * 3 + j] * b[(n * 3 + j) * 2 + k];
  TB t;
  tb_init(&t, "Einsum", 12);
  tb_input(&t, "a", T_FLOAT, 3, da);
  tb_input(&t, "b", T_FLOAT, 3, db);
  tb_attr_s(&t, "equation", "...ij,...jk->...ik");
  tb_output(&t, "y", T_FLOAT);
  FloeTensor *in[2] = {f32(3, da, a), f32(3, db, b)};
  char err[512];
  FloeTensor *y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  expect_shape(y, 3, (const int64_t[]){4, 2, 2});
  expect_f32(y, want, 16, 1e-4f);
  floe_tensor_release(y);
  release_all(in, 2);

  static const int64_t dm[3] = {2, 3, 3};
  float m[18], tr[2] = {0};
  for (int i = 0; i < 18; i++) m[i] = (float)(i * i % 11);
  for (int n = 0; n < 2; n++)
    for (int i = 0; i < 3; i++) tr[n] += m[n * 9 + i * 3 + i];
  tb_init(&t, "Einsum", 12);
  tb_input(&t, "m", T_FLOAT, 3, dm);
  tb_attr_s(&t, "equation", "bii->b");
  tb_output(&t, "y", T_FLOAT);
  in[0] = f32(3, dm, m);
  y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  expect_f32(y, tr, 2, 0);
  floe_tensor_release(y);
  floe_tensor_release(in[0]);
}
END_TEST

/* Integer operands go through Mul and Sum (no integer matmul): "ij,j->i" exactly. */
START_TEST(einsum_integers) {
  static const int64_t da[2] = {3, 4}, db[1] = {4};
  int32_t a[12], b[4], want[3] = {0};
  for (int i = 0; i < 12; i++) a[i] = i * 1000 - 5000;
  for (int i = 0; i < 4; i++) b[i] = 7001 * (i - 1);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) want[i] += a[i * 4 + j] * b[j];
  TB t;
  tb_init(&t, "Einsum", 12);
  tb_input(&t, "a", T_INT32, 2, da);
  tb_input(&t, "b", T_INT32, 1, db);
  tb_attr_s(&t, "equation", "ij,j->i");
  tb_output(&t, "y", T_INT32);
  FloeTensor *in[2] = {floe_tensor_from_data(FLOE_I32, 2, da, a, sizeof a, NULL),
                       floe_tensor_from_data(FLOE_I32, 1, db, b, sizeof b, NULL)};
  char err[512];
  FloeTensor *y = run(&t, in, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  ck_assert_int_eq(floe_tensor_dtype(y), FLOE_I32);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(((const int32_t *)floe_tensor_data(y))[i], want[i]);
  floe_tensor_release(y);
  release_all(in, 2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_index");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, bad_attributes_are_import_errors);
  tcase_add_test(tc, bad_equations_are_import_errors);
  tcase_add_test(tc, bad_run_time_values_are_run_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("results");
  tcase_add_test(tc, pad_with_run_time_pads_that_crop_and_a_run_time_value);
  tcase_add_test(tc, slice_with_omitted_axes_and_negative_steps);
  tcase_add_test(tc, einsum_three_operands);
  tcase_add_test(tc, einsum_broadcast_ellipsis_and_traces);
  tcase_add_test(tc, einsum_integers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
