/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_resize.c - the ONNX mappers and kernels of Resize, Upsample, GridSample, RoiAlign,
 * NonMaxSuppression, RNN, GRU and LSTM on models built here with protobuf-c: the opset rules
 * the backend test cases do not reach (Upsample-7's attribute, Resize-10's rounding) against
 * naive loops, properties of the recurrent layers (layout 1 is layout 0 transposed, rows
 * past their sequence_lens are zero and their last state is y_h), and the error paths: each
 * bad attribute, shape or value fails with a message naming the node and what is wrong. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe_onnx.h"
#include "floe/floe_train.h"
#include "onnx.pb-c.h"

/* ---- building models (allocations kept in an arena freed when the model is packed) ---- */

static void *arena[1024];
static int arena_n;
static void *talloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_lt(arena_n, 1024);
  arena[arena_n++] = p;
  return p;
}

enum { T_FLOAT = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, T_INT32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
       T_INT64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64 };

typedef struct Model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__NodeProto *nodes[4];
  Onnx__TensorProto *inits[8];
  Onnx__ValueInfoProto *ins[10], *outs[4];
} Model;

static void model_init(Model *md, int opset) {
  memset(md, 0, sizeof *md);
  onnx__model_proto__init(&md->m);
  onnx__graph_proto__init(&md->g);
  onnx__operator_set_id_proto__init(&md->opset);
  md->opset.domain = "";
  md->opset.has_version = 1;
  md->opset.version = opset;
  md->opsets[0] = &md->opset;
  md->m.n_opset_import = 1;
  md->m.opset_import = md->opsets;
  md->m.has_ir_version = 1;
  md->m.ir_version = 8;
  md->m.graph = &md->g;
  md->g.node = md->nodes;
  md->g.initializer = md->inits;
  md->g.input = md->ins;
  md->g.output = md->outs;
}

/* rank < 0: no shape. */
static Onnx__ValueInfoProto *value_info(const char *name, int elem, int rank, const int64_t *dims) {
  Onnx__ValueInfoProto *v = talloc(1, sizeof *v);
  Onnx__TypeProto *t = talloc(1, sizeof *t);
  Onnx__TypeProto__Tensor *tt = talloc(1, sizeof *tt);
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(t);
  onnx__type_proto__tensor__init(tt);
  if (rank >= 0) {
    Onnx__TensorShapeProto *s = talloc(1, sizeof *s);
    onnx__tensor_shape_proto__init(s);
    s->n_dim = (size_t)rank;
    s->dim = talloc((size_t)rank, sizeof *s->dim);
    for (int i = 0; i < rank; i++) {
      s->dim[i] = talloc(1, sizeof **s->dim);
      onnx__tensor_shape_proto__dimension__init(s->dim[i]);
      s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      s->dim[i]->dim_value = dims[i];
    }
    tt->shape = s;
  }
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  v->name = (char *)name;
  v->type = t;
  return v;
}

static void add_input(Model *md, const char *name, int elem, int rank, const int64_t *dims) {
  md->ins[md->g.n_input++] = value_info(name, elem, rank, dims);
}

static void add_output(Model *md, const char *name, int elem) {
  md->outs[md->g.n_output++] = value_info(name, elem, -1, NULL);
}

/* An initializer of dtype elem (float or int64 values) as raw_data. */
static void add_init(Model *md, const char *name, int elem, int rank, const int64_t *dims,
                     const void *v) {
  Onnx__TensorProto *t = talloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = talloc((size_t)rank, sizeof *t->dims);
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)(t->dims[i] = dims[i]);
  t->has_raw_data = 1;
  t->raw_data.len = n * (elem == T_INT64 ? 8 : 4);
  t->raw_data.data = (uint8_t *)v;
  md->inits[md->g.n_initializer++] = t;
}

/* A node; names NULL-terminated lists ("" for an omitted optional input or output). */
static Onnx__NodeProto *add_node(Model *md, const char *op, const char *name,
                                 const char *const *ins, const char *const *outs) {
  Onnx__NodeProto *n = talloc(1, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  n->input = talloc(10, sizeof *n->input);
  n->output = talloc(4, sizeof *n->output);
  while (ins[n->n_input]) n->input[n->n_input] = (char *)ins[n->n_input], n->n_input++;
  while (outs[n->n_output]) n->output[n->n_output] = (char *)outs[n->n_output], n->n_output++;
  n->attribute = talloc(8, sizeof *n->attribute);
  md->nodes[md->g.n_node++] = n;
  return n;
}

static Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, int type) {
  Onnx__AttributeProto *a = talloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

static void attr_int(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

static void attr_float(Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}

static void attr_str(Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.len = strlen(v);
  a->s.data = (uint8_t *)v;
}

static void attr_floats(Onnx__NodeProto *n, const char *name, const float *v, size_t k) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = k;
  a->floats = (float *)v;
}

static void attr_strs(Onnx__NodeProto *n, const char *name, const char *const *v, size_t k) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  a->n_strings = k;
  a->strings = talloc(k, sizeof *a->strings);
  for (size_t i = 0; i < k; i++) {
    a->strings[i].len = strlen(v[i]);
    a->strings[i].data = (uint8_t *)v[i];
  }
}

/* Packs and imports the model; NULL with st set when the import fails. */
static FloeOnnxModel *import(Model *md, FloeStatus *st) {
  size_t len = onnx__model_proto__get_packed_size(&md->m);
  uint8_t *buf = malloc(len);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(onnx__model_proto__pack(&md->m, buf), len);
  while (arena_n) free(arena[--arena_n]);
  FloeOnnxModel *m = floe_onnx_import(buf, len, "test", NULL, st);
  free(buf);
  return m;
}

/* Runs m on feeds (one per model input, in order) and fetches every output into outs;
 * returns the run's code (st says why). */
static floe_code run(FloeOnnxModel *m, FloeTensor *const *feeds, FloeTensor **outs,
                     FloeStatus *st) {
  FloeSession *s = floe_session_new(floe_onnx_model_graph(m), NULL, st);
  if (!s) return floe_status_code(st);
  int ni = floe_onnx_model_num_inputs(m), no = floe_onnx_model_num_outputs(m);
  FloeFeed fd[10];
  const char *fetch[4];
  for (int i = 0; i < ni; i++) fd[i] = (FloeFeed){floe_onnx_model_input_node(m, i), feeds[i]};
  for (int i = 0; i < no; i++) fetch[i] = floe_onnx_model_output_fetch(m, i);
  floe_code rc = floe_session_run(s, fd, ni, fetch, no, NULL, 0, outs, st);
  floe_session_free(s);
  return rc;
}

static FloeTensor *tensor_f32(int rank, const int64_t *dims, const float *v) {
  FloeTensor *t = floe_tensor_new(FLOE_F32, rank, dims, NULL);
  ck_assert_ptr_nonnull(t);
  memcpy(floe_tensor_data(t), v, (size_t)floe_tensor_num_elements(t) * sizeof *v);
  return t;
}

static FloeTensor *tensor_i(FloeDType dt, int64_t n, const int64_t *v) {
  FloeTensor *t = floe_tensor_new(dt, 1, &n, NULL);
  ck_assert_ptr_nonnull(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == FLOE_I64) ((int64_t *)floe_tensor_data(t))[i] = v[i];
    else ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
  }
  return t;
}

/* A deterministic value in [-scale, scale) for index i of stream seed. */
static float val(int seed, int i, float scale) {
  uint32_t h = (uint32_t)(seed * 2654435761u) ^ (uint32_t)(i * 2246822519u + 0x9e3779b9u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  return ((float)(h & 0xffffff) / 16777216.0f * 2 - 1) * scale;
}

static float *values(int seed, int n, float scale) {
  float *v = talloc((size_t)n, sizeof *v);
  for (int i = 0; i < n; i++) v[i] = val(seed, i, scale);
  return v;
}

/* The import fails with `code` and a message naming the node and containing `what`. */
static void expect_import_error(Model *md, floe_code code, const char *node, const char *what) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = import(md, st);
  ck_assert_msg(m == NULL, "import of a model with a bad %s succeeded", what);
  ck_assert_int_eq(floe_status_code(st), code);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, node) && strstr(msg, what), "message '%s' lacks '%s' or '%s'", msg,
                node, what);
  floe_status_free(st);
}

/* The model imports but running it on feeds fails with code and `what` in the message. */
static void expect_run_error(Model *md, FloeTensor *const *feeds, int nfeeds, floe_code code,
                             const char *what) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = import(md, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  FloeTensor *outs[4] = {NULL};
  floe_code rc = run(m, feeds, outs, st);
  ck_assert_msg(rc == code, "run gave %d (%s), want %d with '%s'", rc, floe_status_message(st),
                code, what);
  ck_assert_msg(strstr(floe_status_message(st), what), "message '%s' lacks '%s'",
                floe_status_message(st), what);
  for (int i = 0; i < 4; i++) floe_tensor_release(outs[i]);
  for (int i = 0; i < nfeeds; i++) floe_tensor_release(feeds[i]);
  floe_onnx_model_free(m);
  floe_status_free(st);
}

/* ---- Resize and Upsample ---- */

static const int64_t X4[4] = {1, 1, 2, 2};

/* Resize(x, "", scales) with scales an initializer of k values, opset 13. */
static Onnx__NodeProto *resize_model(Model *md, const float *scales, int64_t k) {
  model_init(md, 13);
  add_input(md, "x", T_FLOAT, 4, X4);
  add_init(md, "scales", T_FLOAT, 1, &k, scales);
  Onnx__NodeProto *n =
      add_node(md, "Resize", "rs", (const char *[]){"x", "", "scales", NULL}, (const char *[]){"y", NULL});
  add_output(md, "y", T_FLOAT);
  return n;
}

START_TEST(resize_bad_attributes_fail_import) {
  static const float sc[4] = {1, 1, 2, 2}, sc3[3] = {1, 2, 2};
  Model md;
  attr_str(resize_model(&md, sc, 4), "mode", "bogus");
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'rs'", "unknown mode 'bogus'");
  attr_str(resize_model(&md, sc, 4), "coordinate_transformation_mode", "sideways");
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'rs'",
                      "unknown coordinate_transformation_mode 'sideways'");
  attr_str(resize_model(&md, sc, 4), "nearest_mode", "up");
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'rs'", "unknown nearest_mode 'up'");
  attr_int(resize_model(&md, sc, 4), "antialias", 1);
  expect_import_error(&md, FLOE_UNIMPLEMENTED, "'rs'", "antialias");
  /* the constant scales are checked against x's rank when the graph is built */
  resize_model(&md, sc3, 3);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "rs", "scales has 3 values for x of shape [1,1,2,2]");
  static const float bad[4] = {1, 1, -2, 2};
  resize_model(&md, bad, 4);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "rs", "scales[2] is -2");
}
END_TEST

/* scales and sizes fed at run time: the kernel checks them. */
START_TEST(resize_runtime_errors) {
  for (int k = 0; k < 3; k++) {
    Model md;
    model_init(&md, 13);
    int64_t four = 4;
    add_input(&md, "x", T_FLOAT, 4, X4);
    add_input(&md, "scales", T_FLOAT, -1, NULL); /* no shape: the kernel sees what is fed */
    add_input(&md, "sizes", T_INT64, -1, NULL);
    add_node(&md, "Resize", "rs", (const char *[]){"x", "", "scales", "sizes", NULL},
             (const char *[]){"y", NULL});
    add_output(&md, "y", T_FLOAT);
    static const float xv[4] = {1, 2, 3, 4}, sv[4] = {1, 1, 2, 2};
    static const int64_t szv[4] = {1, 1, 3, 3}, neg[4] = {1, 1, -1, 3}, zero = 0;
    FloeTensor *feeds[3] = {tensor_f32(4, X4, xv),
                            k == 0 ? tensor_f32(1, &four, sv) : floe_tensor_new(FLOE_F32, 1, &zero, NULL),
                            tensor_i(FLOE_I64, 4, k == 1 ? neg : szv)};
    if (k == 2) { /* sizes with 3 values */
      floe_tensor_release(feeds[2]);
      feeds[2] = tensor_i(FLOE_I64, 3, szv);
    }
    static const char *const why[3] = {"exactly one of scales", "sizes[2] is -1",
                                       "sizes has 3 values for x of shape [1,1,2,2]"};
    expect_run_error(&md, feeds, 3, FLOE_INVALID_ARGUMENT, why[k]);
  }
}
END_TEST

/* Runs a one-input model on x [1,1,h,w] (values 0, 1, ...) and returns y. */
static FloeTensor *run_image(Model *md, int64_t h, int64_t w) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = import(md, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  int64_t d[4] = {1, 1, h, w};
  float v[64];
  for (int i = 0; i < h * w; i++) v[i] = (float)i;
  FloeTensor *x = tensor_f32(4, d, v), *y = NULL;
  ck_assert_msg(run(m, &x, &y, st) == FLOE_OK, "%s", floe_status_message(st));
  floe_tensor_release(x);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return y;
}

/* Upsample-7 takes its scales from an attribute: nearest is a repeat. Resize-10 (asymmetric)
 * rounds a downsampled coordinate up: output o reads input ceil(o / scale). */
START_TEST(upsample7_and_resize10_rules) {
  Model md;
  model_init(&md, 7);
  int64_t xd[4] = {1, 1, 2, 3};
  add_input(&md, "x", T_FLOAT, 4, xd);
  Onnx__NodeProto *n = add_node(&md, "Upsample", "up", (const char *[]){"x", NULL},
                                (const char *[]){"y", NULL});
  static const float sc[4] = {1, 1, 2, 3};
  attr_floats(n, "scales", sc, 4);
  add_output(&md, "y", T_FLOAT);
  FloeTensor *y = run_image(&md, 2, 3);
  ck_assert_int_eq(floe_tensor_dim(y, 2), 4);
  ck_assert_int_eq(floe_tensor_dim(y, 3), 9);
  const float *yv = floe_tensor_data(y);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 9; j++) ck_assert_float_eq(yv[i * 9 + j], (float)((i / 2) * 3 + j / 3));
  floe_tensor_release(y);

  model_init(&md, 10);
  int64_t xd2[4] = {1, 1, 4, 5}, four = 4;
  add_input(&md, "x", T_FLOAT, 4, xd2);
  static const float down[4] = {1, 1, 0.5f, 0.6f};
  add_init(&md, "scales", T_FLOAT, 1, &four, down);
  add_node(&md, "Resize", "rs", (const char *[]){"x", "scales", NULL}, (const char *[]){"y", NULL});
  add_output(&md, "y", T_FLOAT);
  y = run_image(&md, 4, 5);
  ck_assert_int_eq(floe_tensor_dim(y, 2), 2); /* floor(4 * 0.5) */
  ck_assert_int_eq(floe_tensor_dim(y, 3), 3); /* floor(5 * 0.6) */
  yv = floe_tensor_data(y);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      int si = (int)ceil(i / 0.5), sj = (int)ceil(j / (double)0.6f);
      ck_assert_float_eq(yv[i * 3 + j], (float)(si * 5 + sj));
    }
  floe_tensor_release(y);
}
END_TEST

/* ---- RNN, GRU, LSTM ---- */

enum { S = 4, B = 3, I = 2, H = 3, D = 2 };
static const int64_t LENS[B] = {4, 2, 3};

/* A bidirectional op (G gates) with sequence_lens and initial states; layout 1 takes x
 * [B,S,I] and states [B,D,H]. Weights come from fixed streams, so two builds agree. */
static void recurrent_model(Model *md, const char *op, int G, int layout) {
  model_init(md, 14);
  int64_t xd[3] = {layout ? B : S, layout ? S : B, I}, hd[3] = {layout ? B : D, layout ? D : B, H};
  int64_t wd[3] = {D, G * H, I}, rd[3] = {D, G * H, H}, bd[2] = {D, 2 * G * H}, pd[2] = {D, 3 * H};
  bool lstm = G == 4;
  add_input(md, "x", T_FLOAT, 3, xd);
  add_input(md, "h0", T_FLOAT, 3, hd);
  if (lstm) add_input(md, "c0", T_FLOAT, 3, hd);
  add_init(md, "w", T_FLOAT, 3, wd, values(1, D * G * H * I, 0.8f));
  add_init(md, "r", T_FLOAT, 3, rd, values(2, D * G * H * H, 0.6f));
  add_init(md, "b", T_FLOAT, 2, bd, values(3, D * 2 * G * H, 0.3f));
  int64_t nb = B;
  int32_t *lens = talloc(B, sizeof *lens);
  for (int b = 0; b < B; b++) lens[b] = (int32_t)LENS[b];
  add_init(md, "lens", T_INT32, 1, &nb, lens);
  if (lstm) add_init(md, "p", T_FLOAT, 2, pd, values(4, D * 3 * H, 0.5f));
  const char *ins[] = {"x", "w", "r", "b", "lens", "h0", lstm ? "c0" : NULL, "p", NULL};
  const char *outs[] = {"y", "y_h", lstm ? "y_c" : NULL, NULL};
  Onnx__NodeProto *n = add_node(md, op, "rnn", ins, outs);
  attr_int(n, "hidden_size", H);
  attr_str(n, "direction", "bidirectional");
  attr_int(n, "layout", layout);
  if (!strcmp(op, "GRU")) attr_int(n, "linear_before_reset", 1);
  for (int k = 0; outs[k]; k++) add_output(md, outs[k], T_FLOAT);
}

/* Element [a,b,c] of a rank-3 f32 tensor. */
static float at3(const FloeTensor *t, int64_t a, int64_t b, int64_t c) {
  return ((const float *)floe_tensor_data(t))[(a * floe_tensor_dim(t, 1) + b) * floe_tensor_dim(t, 2) + c];
}

static float at4(const FloeTensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t i = ((a * floe_tensor_dim(t, 1) + b) * floe_tensor_dim(t, 2) + c) * floe_tensor_dim(t, 3) + d;
  return ((const float *)floe_tensor_data(t))[i];
}

START_TEST(recurrent_layouts_and_lengths) {
  static const char *const ops[3] = {"RNN", "GRU", "LSTM"};
  static const int gates[3] = {1, 3, 4};
  for (int k = 0; k < 3; k++) {
    int nst = gates[k] == 4 ? 2 : 1;
    FloeTensor *res[2][3] = {{NULL}};
    for (int layout = 0; layout < 2; layout++) {
      Model md;
      recurrent_model(&md, ops[k], gates[k], layout);
      FloeStatus *st = floe_status_new();
      FloeOnnxModel *m = import(&md, st);
      ck_assert_msg(m != NULL, "%s: %s", ops[k], floe_status_message(st));
      /* the same values in either layout */
      float xv[S * B * I], hv[2][D * B * H];
      for (int t = 0; t < S; t++)
        for (int b = 0; b < B; b++)
          for (int i = 0; i < I; i++)
            xv[layout ? (b * S + t) * I + i : (t * B + b) * I + i] = val(5, (t * B + b) * I + i, 1);
      for (int s = 0; s < nst; s++)
        for (int d = 0; d < D; d++)
          for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++)
              hv[s][layout ? (b * D + d) * H + j : (d * B + b) * H + j] =
                  val(6 + s, (d * B + b) * H + j, 1);
      int64_t xd[3] = {layout ? B : S, layout ? S : B, I}, hd[3] = {layout ? B : D, layout ? D : B, H};
      FloeTensor *feeds[3] = {tensor_f32(3, xd, xv), tensor_f32(3, hd, hv[0]),
                              nst == 2 ? tensor_f32(3, hd, hv[1]) : NULL};
      ck_assert_msg(run(m, feeds, res[layout], st) == FLOE_OK, "%s: %s", ops[k],
                    floe_status_message(st));
      for (int i = 0; i < 3; i++) floe_tensor_release(feeds[i]);
      floe_onnx_model_free(m);
      floe_status_free(st);
    }
    const FloeTensor *y = res[0][0], *yb = res[1][0];
    ck_assert_int_eq(floe_tensor_rank(yb), 4);
    ck_assert_int_eq(floe_tensor_dim(yb, 0), B);
    ck_assert_int_eq(floe_tensor_dim(yb, 1), S);
    for (int t = 0; t < S; t++)
      for (int d = 0; d < D; d++)
        for (int b = 0; b < B; b++)
          for (int j = 0; j < H; j++) {
            float v = at4(y, t, d, b, j);
            ck_assert_float_eq(at4(yb, b, t, d, j), v); /* layout 1 is layout 0 transposed */
            if (t >= LENS[b]) ck_assert_msg(v == 0, "%s y[%d,%d,%d,%d] past the row's length is %g", ops[k], t, d, b, j, v);
          }
    for (int s = 1; s <= nst; s++)
      for (int d = 0; d < D; d++)
        for (int b = 0; b < B; b++)
          for (int j = 0; j < H; j++)
            ck_assert_float_eq(at3(res[1][s], b, d, j), at3(res[0][s], d, b, j));
    /* y_h: the forward state after the row's last step, the reverse one after step 0 */
    for (int b = 0; b < B; b++)
      for (int j = 0; j < H; j++) {
        ck_assert_float_eq(at3(res[0][1], 0, b, j), at4(y, LENS[b] - 1, 0, b, j));
        ck_assert_float_eq(at3(res[0][1], 1, b, j), at4(y, 0, 1, b, j));
      }
    for (int l = 0; l < 2; l++)
      for (int i = 0; i < 3; i++) floe_tensor_release(res[l][i]);
  }
}
END_TEST

/* LSTM(x [S,B,I] input, w and r initializers of the given gate rows). */
static Onnx__NodeProto *lstm_model(Model *md, int64_t w_rows, const char *lens_input) {
  model_init(md, 14);
  int64_t xd[3] = {S, B, I}, wd[3] = {1, w_rows, I}, rd[3] = {1, 4 * H, H}, nb = B;
  add_input(md, "x", T_FLOAT, 3, xd);
  if (lens_input) add_input(md, "lens", T_INT32, 1, &nb);
  add_init(md, "w", T_FLOAT, 3, wd, values(1, (int)w_rows * I, 0.5f));
  add_init(md, "r", T_FLOAT, 3, rd, values(2, 4 * H * H, 0.5f));
  Onnx__NodeProto *n = add_node(md, "LSTM", "lstm",
                                (const char *[]){"x", "w", "r", "", lens_input ? "lens" : NULL, NULL},
                                (const char *[]){"y", NULL});
  attr_int(n, "hidden_size", H);
  add_output(md, "y", T_FLOAT);
  return n;
}

static FloeTensor *lstm_x(void) {
  int64_t xd[3] = {S, B, I};
  float v[S * B * I];
  for (int i = 0; i < S * B * I; i++) v[i] = val(9, i, 1);
  return tensor_f32(3, xd, v);
}

START_TEST(recurrent_errors) {
  Model md;
  attr_float(lstm_model(&md, 4 * H, NULL), "clip", 0);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'lstm'", "clip 0 (must be positive)");
  attr_str(lstm_model(&md, 4 * H, NULL), "direction", "sideways");
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'lstm'", "unknown direction 'sideways'");
  attr_int(lstm_model(&md, 4 * H, NULL), "layout", 2);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'lstm'", "layout 2");
  attr_strs(lstm_model(&md, 4 * H, NULL), "activations", (const char *[]){"Sigmoid", "Bogus", "Tanh"}, 3);
  expect_import_error(&md, FLOE_UNIMPLEMENTED, "'lstm'", "activation function 'bogus'");
  /* two functions for an LSTM (three per direction): refused when its kernel is made */
  attr_strs(lstm_model(&md, 4 * H, NULL), "activations", (const char *[]){"Sigmoid", "Tanh"}, 2);
  FloeTensor *x = lstm_x();
  expect_run_error(&md, &x, 1, FLOE_INVALID_ARGUMENT, "activations 'sigmoid,tanh' names 2 functions");
  /* w with 10 gate rows for hidden 3 */
  lstm_model(&md, 10, NULL);
  x = lstm_x();
  expect_run_error(&md, &x, 1, FLOE_INVALID_ARGUMENT,
                   "w must be [directions,gates*hidden,input] = [1,12,2], got [1,10,2]");
  /* a row longer than the sequence */
  lstm_model(&md, 4 * H, "lens");
  static const int64_t lens[B] = {4, 7, 1};
  FloeTensor *feeds[2] = {lstm_x(), tensor_i(FLOE_I32, B, lens)};
  expect_run_error(&md, feeds, 2, FLOE_OUT_OF_RANGE, "sequence_lens[1] = 7 is outside [0, 4]");
}
END_TEST

/* ---- GridSample, RoiAlign, NonMaxSuppression ---- */

START_TEST(detection_errors) {
  Model md;
  int64_t bd[3] = {1, 2, 4}, sd[3] = {1, 1, 2};
  model_init(&md, 11);
  add_input(&md, "boxes", T_FLOAT, 3, bd);
  add_input(&md, "scores", T_FLOAT, 3, sd);
  Onnx__NodeProto *n = add_node(&md, "NonMaxSuppression", "nms", (const char *[]){"boxes", "scores", NULL},
                                (const char *[]){"sel", NULL});
  attr_int(n, "center_point_box", 2);
  add_output(&md, "sel", T_INT64);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'nms'", "center_point_box 2 (0 or 1)");

  /* boxes and scores that disagree on the box count */
  int64_t sd3[3] = {1, 1, 3};
  model_init(&md, 11);
  add_input(&md, "boxes", T_FLOAT, 3, bd);
  add_input(&md, "scores", T_FLOAT, 3, sd3);
  add_node(&md, "NonMaxSuppression", "nms", (const char *[]){"boxes", "scores", NULL},
           (const char *[]){"sel", NULL});
  add_output(&md, "sel", T_INT64);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "nms",
                      "boxes must be [batch,boxes,4] and scores [batch,classes,boxes], got [1,2,4] and [1,1,3]");

  /* RoiAlign with a batch index past x's batch */
  int64_t xd[4] = {1, 1, 4, 4}, rd[2] = {1, 4}, one = 1;
  model_init(&md, 16);
  add_input(&md, "x", T_FLOAT, 4, xd);
  add_input(&md, "rois", T_FLOAT, 2, rd);
  add_input(&md, "bi", T_INT64, 1, &one);
  add_node(&md, "RoiAlign", "roi", (const char *[]){"x", "rois", "bi", NULL}, (const char *[]){"y", NULL});
  add_output(&md, "y", T_FLOAT);
  static const float xv[16] = {0}, rv[4] = {0, 0, 2, 2};
  static const int64_t bad = 5;
  FloeTensor *feeds[3] = {tensor_f32(4, xd, xv), tensor_f32(2, rd, rv), tensor_i(FLOE_I64, 1, &bad)};
  expect_run_error(&md, feeds, 3, FLOE_OUT_OF_RANGE, "batch_indices[0] = 5 is outside x's batch of 1");

  /* GridSample: 3-D sampling (GridSample-20's) and a grid without (x, y) pairs */
  int64_t x5[5] = {1, 1, 2, 2, 2}, g5[5] = {1, 1, 1, 1, 3};
  model_init(&md, 16);
  add_input(&md, "x", T_FLOAT, 5, x5);
  add_input(&md, "grid", T_FLOAT, 5, g5);
  add_node(&md, "GridSample", "gs", (const char *[]){"x", "grid", NULL}, (const char *[]){"y", NULL});
  add_output(&md, "y", T_FLOAT);
  expect_import_error(&md, FLOE_UNIMPLEMENTED, "'gs'", "GridSample of rank 5");
  int64_t gd[4] = {1, 2, 2, 3};
  model_init(&md, 16);
  add_input(&md, "x", T_FLOAT, 4, xd);
  add_input(&md, "grid", T_FLOAT, 4, gd);
  n = add_node(&md, "GridSample", "gs", (const char *[]){"x", "grid", NULL}, (const char *[]){"y", NULL});
  add_output(&md, "y", T_FLOAT);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "gs", "grid must be [N,H_out,W_out,2], got shape [1,2,2,3]");
  model_init(&md, 16);
  add_input(&md, "x", T_FLOAT, 4, xd);
  gd[3] = 2;
  add_input(&md, "grid", T_FLOAT, 4, gd);
  n = add_node(&md, "GridSample", "gs", (const char *[]){"x", "grid", NULL}, (const char *[]){"y", NULL});
  attr_str(n, "padding_mode", "wrap");
  add_output(&md, "y", T_FLOAT);
  expect_import_error(&md, FLOE_INVALID_ARGUMENT, "'gs'", "unknown padding_mode 'wrap'");
}
END_TEST

/* ---- gradients ---- */

/* The differentiable ops have no gradient function yet: asking for one is an error naming
 * the node, not a silent zero. */
START_TEST(gradient_is_an_error) {
  static const char *const ops[] = {"Resize", "GridSample", "RoiAlign", "RNN", "GRU", "LSTM"};
  static const int nins[] = {4, 2, 3, 6, 6, 8};
  for (int k = 0; k < 6; k++) {
    /* shapes are left unknown: the gradient is asked for before anything runs */
    FloeGraph *g = floe_graph_new();
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown());
    FloeNodeBuilder *b = floe_node_begin(g, ops[k], "op");
    for (int i = 0; i < nins[k]; i++) {
      FloeDType dt = FLOE_F32; /* but Resize's sizes, RoiAlign's indices, sequence_lens */
      if ((k == 0 && i == 3) || (k == 2 && i == 2)) dt = FLOE_I64;
      if (k >= 3 && i == 4) dt = FLOE_I32;
      char nm[16];
      snprintf(nm, sizeof nm, "in%d", i);
      floe_node_add_input(b, i == 0 ? x : floe_placeholder(g, nm, dt, floe_shape_unknown()));
    }
    FloeNode *n = floe_node_finish(b);
    ck_assert_msg(n != NULL, "%s: %s", ops[k], floe_graph_error(g, NULL));
    FloeOutput y = floe_out(n, 0), dx;
    FloeStatus *st = floe_status_new();
    ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, st), FLOE_UNIMPLEMENTED);
    const char *msg = floe_status_message(st);
    ck_assert_msg(strstr(msg, "node 'op'") && strstr(msg, ops[k]) && strstr(msg, "no gradient"),
                  "message: %s", msg);
    floe_status_free(st);
    floe_graph_free(g);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_resize");
  TCase *tc = tcase_create("onnx_resize");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, resize_bad_attributes_fail_import);
  tcase_add_test(tc, resize_runtime_errors);
  tcase_add_test(tc, upsample7_and_resize10_rules);
  tcase_add_test(tc, recurrent_layouts_and_lengths);
  tcase_add_test(tc, recurrent_errors);
  tcase_add_test(tc, detection_errors);
  tcase_add_test(tc, gradient_is_an_error);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
