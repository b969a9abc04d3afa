/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_control.c - ONNX control flow, sequences, optionals and training ops through the
 * importer, on models built here with protobuf-c: Loop (trip count and condition, a carried
 * value that grows, scan outputs, no iteration, nested), If capturing outer values, Scan with
 * reversed and moved axes, sequences built, fed and fetched as parts, and the error paths
 * (each an error naming the node, never a crash). Expected values are computed here with
 * plain loops, not by Floe. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "floe/floe_onnx.h"
#include "onnx.pb-c.h"

/* ---- building models (allocations freed together after packing) ---- */

static void *arena[8192];
static int arena_n;
static void *talloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_lt(arena_n, 8192);
  arena[arena_n++] = p;
  return p;
}
static void arena_free(void) {
  while (arena_n) free(arena[--arena_n]);
}

enum { F32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, I64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
       BOOL = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, I32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32 };

static Onnx__GraphProto *graph(const char *name) {
  Onnx__GraphProto *g = talloc(1, sizeof *g);
  onnx__graph_proto__init(g);
  g->name = (char *)name;
  g->node = talloc(32, sizeof *g->node);
  g->initializer = talloc(8, sizeof *g->initializer);
  g->input = talloc(8, sizeof *g->input);
  g->output = talloc(8, sizeof *g->output);
  return g;
}

/* A tensor type (elem; rank -1: no shape) or, with seq, a sequence of it. */
static Onnx__TypeProto *type(int elem, int rank, const int64_t *dims, int seq) {
  Onnx__TypeProto *t = talloc(1, sizeof *t);
  Onnx__TypeProto__Tensor *tt = talloc(1, sizeof *tt);
  onnx__type_proto__init(t);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  if (rank >= 0) {
    Onnx__TensorShapeProto *s = talloc(1, sizeof *s);
    onnx__tensor_shape_proto__init(s);
    s->n_dim = (size_t)rank;
    s->dim = talloc((size_t)rank + 1, sizeof *s->dim);
    for (int i = 0; i < rank; i++) {
      s->dim[i] = talloc(1, sizeof **s->dim);
      onnx__tensor_shape_proto__dimension__init(s->dim[i]);
      s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      s->dim[i]->dim_value = dims[i];
    }
    tt->shape = s;
  }
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  if (!seq) return t;
  Onnx__TypeProto *st = talloc(1, sizeof *st);
  Onnx__TypeProto__Sequence *sq = talloc(1, sizeof *sq);
  onnx__type_proto__init(st);
  onnx__type_proto__sequence__init(sq);
  sq->elem_type = t;
  st->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  st->sequence_type = sq;
  return st;
}

static Onnx__ValueInfoProto *vinfo(const char *name, Onnx__TypeProto *t) {
  Onnx__ValueInfoProto *v = talloc(1, sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = (char *)name;
  v->type = t;
  return v;
}

static void g_in(Onnx__GraphProto *g, const char *name, Onnx__TypeProto *t) {
  g->input[g->n_input++] = vinfo(name, t);
}
static void g_out(Onnx__GraphProto *g, const char *name, Onnx__TypeProto *t) {
  g->output[g->n_output++] = vinfo(name, t);
}

static void g_init(Onnx__GraphProto *g, const char *name, int elem, int rank, const int64_t *dims,
                   const void *data, size_t bytes) {
  Onnx__TensorProto *t = talloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = (int64_t *)dims;
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = talloc(1, bytes + 1);
  memcpy(t->raw_data.data, data, bytes);
  g->initializer[g->n_initializer++] = t;
}

/* A node with comma-separated inputs and outputs ("" for an omitted input). */
static char **names(const char *csv, size_t *n) {
  char **v = talloc(16, sizeof *v);
  *n = 0;
  if (!*csv) return v;
  char *s = talloc(1, strlen(csv) + 1);
  strcpy(s, csv);
  v[(*n)++] = s;
  for (char *p = s; *p; p++)
    if (*p == ',') {
      *p = '\0';
      v[(*n)++] = p + 1;
    }
  return v;
}

static Onnx__NodeProto *node(Onnx__GraphProto *g, const char *op, const char *ins,
                             const char *outs) {
  Onnx__NodeProto *n = talloc(1, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->input = names(ins, &n->n_input);
  n->output = names(outs, &n->n_output);
  n->name = n->n_output ? n->output[0] : (char *)op;
  n->attribute = talloc(8, sizeof *n->attribute);
  g->node[g->n_node++] = n;
  return n;
}

static Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name) {
  Onnx__AttributeProto *a = talloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  n->attribute[n->n_attribute++] = a;
  return a;
}
static void attr_i(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(n, name);
  a->has_i = 1, a->i = v;
}
static void attr_f(Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(n, name);
  a->has_f = 1, a->f = v;
}
static void attr_s(Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr(n, name);
  a->has_s = 1, a->s.data = (uint8_t *)v, a->s.len = strlen(v);
}
static void attr_ints(Onnx__NodeProto *n, const char *name, int count, const int64_t *v) {
  Onnx__AttributeProto *a = attr(n, name);
  a->n_ints = (size_t)count, a->ints = (int64_t *)v;
}
static void attr_g(Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g) {
  attr(n, name)->g = g;
}

/* Imports g with the default opset (and the training domain when training > 0). */
static FloeOnnxModel *import(Onnx__GraphProto *g, int opset, int training, FloeStatus *st) {
  Onnx__ModelProto m;
  Onnx__OperatorSetIdProto o[2], *op[2] = {&o[0], &o[1]};
  onnx__model_proto__init(&m);
  int n = 0;
  if (opset) {
    onnx__operator_set_id_proto__init(&o[n]);
    o[n].domain = "", o[n].has_version = 1, o[n].version = opset;
    n++;
  }
  if (training) {
    onnx__operator_set_id_proto__init(&o[n]);
    o[n].domain = "ai.onnx.preview.training", o[n].has_version = 1, o[n].version = training;
    op[n] = &o[n];
    n++;
  }
  m.opset_import = op, m.n_opset_import = (size_t)n;
  m.has_ir_version = 1, m.ir_version = 8;
  m.graph = g;
  size_t len = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = malloc(len + 1);
  ck_assert_ptr_nonnull(buf);
  protobuf_c_message_pack(&m.base, buf);
  arena_free();
  FloeOnnxModel *model = floe_onnx_import(buf, len, "test", NULL, st);
  free(buf);
  return model;
}

/* ---- running ---- */

static FloeTensor *f32(int rank, const int64_t *dims, const float *v) {
  FloeTensor *t = floe_tensor_new(FLOE_F32, rank, dims, NULL);
  ck_assert_ptr_nonnull(t);
  memcpy(floe_tensor_data(t), v, (size_t)floe_tensor_num_elements(t) * sizeof *v);
  return t;
}
static FloeTensor *scalar_bool(int v) {
  FloeTensor *t = floe_tensor_new(FLOE_BOOL, 0, NULL, NULL);
  *(uint8_t *)floe_tensor_data(t) = (uint8_t)v;
  return t;
}

/* Feeds ins (one per part of each input, in order) and fetches every part of every output
 * into outs; returns the run's code. Takes the ins' references. */
static floe_code run(FloeOnnxModel *m, FloeTensor **ins, int nin, FloeTensor **outs,
                     FloeStatus *st) {
  FloeFeed feeds[16];
  const char *fetches[16];
  int nf = 0, no = 0;
  for (int i = 0; i < floe_onnx_model_num_inputs(m); i++)
    for (int p = 0; p < floe_onnx_kind_num_parts(floe_onnx_model_input_kind(m, i)); p++) {
      ck_assert_int_lt(nf, nin);
      feeds[nf].name = floe_onnx_model_input_part(m, i, p);
      feeds[nf].value = ins[nf];
      nf++;
    }
  ck_assert_int_eq(nf, nin);
  for (int i = 0; i < floe_onnx_model_num_outputs(m); i++)
    for (int p = 0; p < floe_onnx_kind_num_parts(floe_onnx_model_output_kind(m, i)); p++)
      fetches[no++] = floe_onnx_model_output_part(m, i, p);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *s = floe_session_new(floe_onnx_model_graph(m), &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_code rc = floe_session_run(s, feeds, nf, fetches, no, NULL, 0, outs, st);
  floe_session_free(s);
  for (int i = 0; i < nin; i++) floe_tensor_release(ins[i]);
  return rc;
}

static void expect_f32(const FloeTensor *t, int rank, const int64_t *dims, const float *v) {
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(floe_tensor_dtype(t), FLOE_F32);
  FloeShape s = floe_tensor_shape(t);
  ck_assert_int_eq(s.rank, rank);
  for (int d = 0; d < rank; d++) ck_assert_int_eq(s.dims[d], dims[d]);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++)
    ck_assert_msg(((const float *)floe_tensor_data(t))[i] == v[i], "[%lld] = %g, expected %g",
                  (long long)i, ((const float *)floe_tensor_data(t))[i], v[i]);
}

static void release(FloeTensor **t, int n) {
  for (int i = 0; i < n; i++) floe_tensor_release(t[i]);
}

/* ---- Loop ---- */

static const int64_t d1[1] = {1};

/* x = [1]; for i while i < M and cond: x = concat(x, [i]); cond = sum(x) < 7; scan 2i. */
static FloeOnnxModel *loop_model(FloeStatus *st) {
  Onnx__GraphProto *b = graph("body");
  g_in(b, "i", type(I64, 0, NULL, 0));
  g_in(b, "c_in", type(BOOL, 0, NULL, 0));
  g_in(b, "x_in", type(F32, -1, NULL, 0));
  attr_i(node(b, "Cast", "i", "fi"), "to", F32);
  node(b, "Reshape", "fi,one_shape", "fi1");
  attr_i(node(b, "Concat", "x_in,fi1", "x_out"), "axis", 0);
  attr_i(node(b, "ReduceSum", "x_out", "s"), "keepdims", 0);
  node(b, "Less", "s,limit", "c_out");
  node(b, "Mul", "fi,two", "scan");
  g_out(b, "c_out", type(BOOL, 0, NULL, 0));
  g_out(b, "x_out", type(F32, -1, NULL, 0));
  g_out(b, "scan", type(F32, 0, NULL, 0));
  static const int64_t one_shape[1] = {1};
  g_init(b, "one_shape", I64, 1, d1, one_shape, sizeof one_shape);
  Onnx__GraphProto *g = graph("main");
  g_in(g, "M", type(I64, 0, NULL, 0));
  g_in(g, "cond", type(BOOL, 0, NULL, 0));
  g_in(g, "x0", type(F32, 1, d1, 0));
  attr_g(node(g, "Loop", "M,cond,x0", "xf,scans"), "body", b);
  g_out(g, "xf", type(F32, -1, NULL, 0));
  g_out(g, "scans", type(F32, -1, NULL, 0));
  static const float limit = 7, two = 2;
  g_init(g, "limit", F32, 0, NULL, &limit, sizeof limit);
  g_init(g, "two", F32, 0, NULL, &two, sizeof two);
  return import(g, 13, 0, st);
}

static void check_loop(FloeOnnxModel *m, int64_t trips, int cond0, FloeStatus *st) {
  float x[16] = {1}, scans[16];
  int64_t nx = 1, ns = 0;
  int cond = cond0;
  for (int64_t i = 0; i < trips && cond; i++) {
    x[nx++] = (float)i;
    float s = 0;
    for (int64_t k = 0; k < nx; k++) s += x[k];
    cond = s < 7;
    scans[ns++] = 2.0f * (float)i;
  }
  FloeTensor *ins[3] = {floe_tensor_scalar_i64(trips, NULL), scalar_bool(cond0),
                        f32(1, d1, (float[]){1})};
  FloeTensor *outs[2] = {NULL, NULL};
  ck_assert_msg(run(m, ins, 3, outs, st) == FLOE_OK, "%s", floe_status_message(st));
  expect_f32(outs[0], 1, &nx, x);
  expect_f32(outs[1], 1, &ns, scans);
  release(outs, 2);
}

START_TEST(test_loop_trips_cond_growing_scan) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = loop_model(st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  check_loop(m, 10, 1, st); /* the condition stops it (after 4) */
  check_loop(m, 2, 1, st);  /* the trip count does */
  check_loop(m, 0, 1, st);  /* no iteration: x0, and an empty scan */
  check_loop(m, 5, 0, st);  /* a false condition: no iteration either */
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* A loop in a loop: the outer sums, per iteration i, the inner loop's scan of j + i over
 * j < N. The inner body ignores its carried value (a body input nothing reads). */
START_TEST(test_loop_nested) {
  FloeStatus *st = floe_status_new();
  Onnx__GraphProto *in = graph("inner");
  g_in(in, "j", type(I64, 0, NULL, 0));
  g_in(in, "ci", type(BOOL, 0, NULL, 0));
  g_in(in, "y_in", type(F32, 0, NULL, 0));
  node(in, "Identity", "ci", "co");
  attr_i(node(in, "Cast", "j", "fj"), "to", F32);
  node(in, "Add", "fj,fi", "y_out");
  node(in, "Identity", "y_out", "sc");
  g_out(in, "co", type(BOOL, 0, NULL, 0));
  g_out(in, "y_out", type(F32, 0, NULL, 0));
  g_out(in, "sc", type(F32, 0, NULL, 0));
  Onnx__GraphProto *out = graph("outer");
  g_in(out, "i", type(I64, 0, NULL, 0));
  g_in(out, "c_in", type(BOOL, 0, NULL, 0));
  g_in(out, "acc_in", type(F32, 0, NULL, 0));
  node(out, "Identity", "c_in", "c_out");
  attr_i(node(out, "Cast", "i", "fi"), "to", F32);
  attr_g(node(out, "Loop", "N,,zero", "yl,inner_scan"), "body", in);
  attr_i(node(out, "ReduceSum", "inner_scan", "rs"), "keepdims", 0);
  node(out, "Add", "acc_in,rs", "acc_out");
  g_out(out, "c_out", type(BOOL, 0, NULL, 0));
  g_out(out, "acc_out", type(F32, 0, NULL, 0));
  Onnx__GraphProto *g = graph("main");
  g_in(g, "M", type(I64, 0, NULL, 0));
  g_in(g, "N", type(I64, 0, NULL, 0));
  attr_g(node(g, "Loop", "M,,zero", "total"), "body", out);
  g_out(g, "total", type(F32, 0, NULL, 0));
  static const float zero = 0;
  g_init(g, "zero", F32, 0, NULL, &zero, sizeof zero);
  FloeOnnxModel *m = import(g, 13, 0, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  float want = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) want += (float)(i + j);
  FloeTensor *ins[2] = {floe_tensor_scalar_i64(3, NULL), floe_tensor_scalar_i64(4, NULL)};
  FloeTensor *res = NULL;
  ck_assert_msg(run(m, ins, 2, &res, st) == FLOE_OK, "%s", floe_status_message(st));
  expect_f32(res, 0, NULL, &want);
  floe_tensor_release(res);
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* ---- If, Scan ---- */

START_TEST(test_if_captures_outer_values) {
  FloeStatus *st = floe_status_new();
  Onnx__GraphProto *t = graph("then"), *e = graph("else");
  node(t, "Add", "x,x", "t_out");
  g_out(t, "t_out", type(F32, -1, NULL, 0));
  node(e, "Mul", "x,x", "e_out");
  g_out(e, "e_out", type(F32, -1, NULL, 0));
  Onnx__GraphProto *g = graph("main");
  g_in(g, "c", type(BOOL, 0, NULL, 0));
  int64_t d3 = 3;
  g_in(g, "x", type(F32, 1, &d3, 0));
  Onnx__NodeProto *n = node(g, "If", "c", "y");
  attr_g(n, "then_branch", t);
  attr_g(n, "else_branch", e);
  g_out(g, "y", type(F32, -1, NULL, 0));
  FloeOnnxModel *m = import(g, 11, 0, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  const float x[3] = {1, -2, 3};
  for (int c = 0; c < 2; c++) {
    FloeTensor *ins[2] = {scalar_bool(c), f32(1, &d3, x)}, *y = NULL;
    ck_assert_msg(run(m, ins, 2, &y, st) == FLOE_OK, "%s", floe_status_message(st));
    float want[3];
    for (int i = 0; i < 3; i++) want[i] = c ? x[i] + x[i] : x[i] * x[i];
    expect_f32(y, 1, &d3, want);
    floe_tensor_release(y);
  }
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* Scan over axis 1 of X [2, 4] from the end; state s += column, output s * column written
 * from the end and stacked on axis 1. */
START_TEST(test_scan_reverse_axes) {
  FloeStatus *st = floe_status_new();
  int64_t d2 = 2, d24[2] = {2, 4};
  Onnx__GraphProto *b = graph("body");
  g_in(b, "s_in", type(F32, 1, &d2, 0));
  g_in(b, "col", type(F32, 1, &d2, 0));
  node(b, "Add", "s_in,col", "s_out");
  node(b, "Mul", "s_out,col", "y");
  g_out(b, "s_out", type(F32, 1, &d2, 0));
  g_out(b, "y", type(F32, 1, &d2, 0));
  Onnx__GraphProto *g = graph("main");
  g_in(g, "s0", type(F32, 1, &d2, 0));
  g_in(g, "X", type(F32, 2, d24, 0));
  Onnx__NodeProto *n = node(g, "Scan", "s0,X", "sf,Y");
  attr_g(n, "body", b);
  attr_i(n, "num_scan_inputs", 1);
  static const int64_t one[1] = {1};
  attr_ints(n, "scan_input_axes", 1, one);
  attr_ints(n, "scan_input_directions", 1, one);
  attr_ints(n, "scan_output_axes", 1, one);
  attr_ints(n, "scan_output_directions", 1, one);
  g_out(g, "sf", type(F32, -1, NULL, 0));
  g_out(g, "Y", type(F32, -1, NULL, 0));
  FloeOnnxModel *m = import(g, 11, 0, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  const float s0[2] = {1, 2}, X[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  float s[2] = {1, 2}, Y[8];
  for (int step = 0; step < 4; step++) {
    int col = 3 - step;     /* input read from the end */
    int at = 3 - step;      /* output written from the end */
    for (int r = 0; r < 2; r++) {
      s[r] += X[r * 4 + col];
      Y[r * 4 + at] = s[r] * X[r * 4 + col];
    }
  }
  FloeTensor *ins[2] = {f32(1, &d2, s0), f32(2, d24, X)}, *outs[2] = {NULL, NULL};
  ck_assert_msg(run(m, ins, 2, outs, st) == FLOE_OK, "%s", floe_status_message(st));
  expect_f32(outs[0], 1, &d2, s);
  expect_f32(outs[1], 2, d24, Y);
  release(outs, 2);
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* ---- sequences ---- */

/* [X, Y] -> insert X at 0 -> [X, X, Y] -> erase the last -> [X, X]; element 1, the length
 * and the concatenation along axis 0 and axis 1. */
START_TEST(test_sequence_ops) {
  FloeStatus *st = floe_status_new();
  int64_t d23[2] = {2, 3}, d13[2] = {1, 3};
  Onnx__GraphProto *g = graph("main");
  g_in(g, "X", type(F32, 2, d23, 0));
  g_in(g, "Y", type(F32, 2, d13, 0));
  node(g, "SequenceConstruct", "X,Y", "s1");
  node(g, "SequenceInsert", "s1,X,zero", "s2");
  node(g, "SequenceErase", "s2", "s3");
  node(g, "SequenceAt", "s3,one", "at");
  node(g, "SequenceLength", "s3", "len");
  attr_i(node(g, "ConcatFromSequence", "s2", "cat0"), "axis", 0);
  attr_i(node(g, "ConcatFromSequence", "s3", "cat1"), "axis", -1);
  g_out(g, "at", type(F32, -1, NULL, 0));
  g_out(g, "len", type(I64, 0, NULL, 0));
  g_out(g, "cat0", type(F32, -1, NULL, 0));
  g_out(g, "cat1", type(F32, -1, NULL, 0));
  static const int64_t zero = 0, one = 1;
  g_init(g, "zero", I64, 0, NULL, &zero, sizeof zero);
  g_init(g, "one", I64, 0, NULL, &one, sizeof one);
  FloeOnnxModel *m = import(g, 12, 0, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  const float X[6] = {1, 2, 3, 4, 5, 6}, Y[3] = {7, 8, 9};
  FloeTensor *ins[2] = {f32(2, d23, X), f32(2, d13, Y)}, *outs[4] = {NULL};
  ck_assert_msg(run(m, ins, 2, outs, st) == FLOE_OK, "%s", floe_status_message(st));
  expect_f32(outs[0], 2, d23, X);
  ck_assert_int_eq(*(const int64_t *)floe_tensor_data(outs[1]), 2);
  float cat0[15], cat1[12];
  memcpy(cat0, X, sizeof X), memcpy(cat0 + 6, X, sizeof X), memcpy(cat0 + 12, Y, sizeof Y);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 6; k++) cat1[r * 6 + k] = X[r * 3 + k % 3];
  expect_f32(outs[2], 2, (int64_t[]){5, 3}, cat0);
  expect_f32(outs[3], 2, (int64_t[]){2, 6}, cat1);
  release(outs, 4);
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* A sequence graph input and output cross the session API as (values, shapes). */
START_TEST(test_sequence_io_parts) {
  FloeStatus *st = floe_status_new();
  int64_t d2 = 2;
  Onnx__GraphProto *g = graph("main");
  g_in(g, "seq", type(F32, -1, NULL, 1));
  g_in(g, "t", type(F32, 1, &d2, 0));
  node(g, "SequenceInsert", "seq,t", "out");
  g_out(g, "out", type(F32, -1, NULL, 1));
  FloeOnnxModel *m = import(g, 11, 0, st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_onnx_model_input_kind(m, 0), FLOE_ONNX_SEQUENCE);
  ck_assert_int_eq(floe_onnx_model_output_kind(m, 0), FLOE_ONNX_SEQUENCE);
  ck_assert_int_eq(floe_onnx_kind_num_parts(FLOE_ONNX_OPTIONAL_SEQUENCE), 3);
  ck_assert_ptr_null(floe_onnx_model_input_part(m, 0, 2));
  ck_assert_ptr_null(floe_onnx_model_input_part(m, 1, 1));
  /* The input sequence: [[1, 2, 3]] (one element of shape [3]). */
  FloeTensor *shapes = floe_tensor_new(FLOE_I64, 2, (int64_t[]){1, 1}, NULL);
  *(int64_t *)floe_tensor_data(shapes) = 3;
  FloeTensor *ins[3] = {f32(1, (int64_t[]){3}, (float[]){1, 2, 3}), shapes,
                        f32(1, &d2, (float[]){4, 5})};
  FloeTensor *outs[2] = {NULL, NULL};
  ck_assert_msg(run(m, ins, 3, outs, st) == FLOE_OK, "%s", floe_status_message(st));
  expect_f32(outs[0], 1, (int64_t[]){5}, (float[]){1, 2, 3, 4, 5});
  FloeShape s = floe_tensor_shape(outs[1]);
  ck_assert_int_eq(s.rank, 2);
  ck_assert_int_eq(s.dims[0], 2);
  ck_assert_int_eq(s.dims[1], 1);
  ck_assert_int_eq(((int64_t *)floe_tensor_data(outs[1]))[0], 3);
  ck_assert_int_eq(((int64_t *)floe_tensor_data(outs[1]))[1], 2);
  release(outs, 2);
  floe_onnx_model_free(m);
  floe_status_free(st);
}
END_TEST

/* ---- errors: each names the node and what is wrong ---- */

static void expect_error(FloeOnnxModel *m, FloeStatus *st, floe_code code, const char *a,
                         const char *b) {
  ck_assert_ptr_null(m);
  ck_assert_int_eq(floe_status_code(st), code);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, a) && (!b || strstr(msg, b)), "message: %s", msg);
  floe_status_clear(st);
}

START_TEST(test_control_errors) {
  FloeStatus *st = floe_status_new();
  /* A Loop body with too few outputs for its carried values. */
  Onnx__GraphProto *b = graph("body"), *g = graph("main");
  g_in(b, "i", type(I64, 0, NULL, 0));
  g_in(b, "c", type(BOOL, 0, NULL, 0));
  g_in(b, "x", type(F32, 0, NULL, 0));
  node(b, "Identity", "c", "c_out");
  g_out(b, "c_out", type(BOOL, 0, NULL, 0));
  g_in(g, "x0", type(F32, 0, NULL, 0));
  attr_g(node(g, "Loop", ",,x0", "bad_loop"), "body", b);
  g_out(g, "bad_loop", type(F32, 0, NULL, 0));
  expect_error(import(g, 13, 0, st), st, FLOE_INVALID_ARGUMENT, "bad_loop", "outputs");
  /* If without an else branch. */
  Onnx__GraphProto *t = graph("then");
  g = graph("main");
  node(t, "Identity", "x", "t_out");
  g_out(t, "t_out", type(F32, 0, NULL, 0));
  g_in(g, "c", type(BOOL, 0, NULL, 0));
  g_in(g, "x", type(F32, 0, NULL, 0));
  attr_g(node(g, "If", "c", "bad_if"), "then_branch", t);
  g_out(g, "bad_if", type(F32, 0, NULL, 0));
  expect_error(import(g, 13, 0, st), st, FLOE_INVALID_ARGUMENT, "bad_if", "else_branch");
  /* A body node reading a name defined nowhere: the inner node and the outer one named. */
  b = graph("body"), g = graph("main");
  g_in(b, "i", type(I64, 0, NULL, 0));
  g_in(b, "c", type(BOOL, 0, NULL, 0));
  g_in(b, "x", type(F32, 0, NULL, 0));
  node(b, "Identity", "c", "c_out");
  node(b, "Add", "x,nowhere", "inner_add");
  g_out(b, "c_out", type(BOOL, 0, NULL, 0));
  g_out(b, "inner_add", type(F32, 0, NULL, 0));
  g_in(g, "M", type(I64, 0, NULL, 0));
  g_in(g, "x0", type(F32, 0, NULL, 0));
  attr_g(node(g, "Loop", "M,,x0", "outer_loop"), "body", b);
  g_out(g, "outer_loop", type(F32, 0, NULL, 0));
  expect_error(import(g, 13, 0, st), st, FLOE_INVALID_ARGUMENT, "inner_add",
               "subgraph 'body' of node 'outer_loop'");
  /* Scan with more scan inputs than inputs. */
  b = graph("body"), g = graph("main");
  g_in(g, "x", type(F32, 1, d1, 0));
  Onnx__NodeProto *n = node(g, "Scan", "x", "bad_scan");
  attr_g(n, "body", b);
  attr_i(n, "num_scan_inputs", 2);
  g_out(g, "bad_scan", type(F32, -1, NULL, 0));
  expect_error(import(g, 11, 0, st), st, FLOE_INVALID_ARGUMENT, "bad_scan", "num_scan_inputs");
  floe_status_free(st);
}
END_TEST

START_TEST(test_sequence_errors) {
  FloeStatus *st = floe_status_new();
  /* SequenceAt of a tensor. */
  Onnx__GraphProto *g = graph("main");
  g_in(g, "x", type(F32, 1, d1, 0));
  node(g, "SequenceAt", "x,zero", "bad_at");
  g_out(g, "bad_at", type(F32, -1, NULL, 0));
  static const int64_t zero = 0;
  g_init(g, "zero", I64, 0, NULL, &zero, sizeof zero);
  expect_error(import(g, 12, 0, st), st, FLOE_INVALID_ARGUMENT, "bad_at", "not a sequence");
  /* A sequence where a tensor op wants a tensor. */
  g = graph("main");
  g_in(g, "x", type(F32, 1, d1, 0));
  node(g, "SequenceConstruct", "x", "s");
  node(g, "Add", "s,x", "bad_add");
  g_out(g, "bad_add", type(F32, -1, NULL, 0));
  expect_error(import(g, 12, 0, st), st, FLOE_UNIMPLEMENTED, "bad_add", "is a sequence");
  /* Inserting an int32 tensor into a float sequence. */
  g = graph("main");
  g_in(g, "x", type(F32, 1, d1, 0));
  g_in(g, "k", type(I32, 1, d1, 0));
  node(g, "SequenceConstruct", "x", "s");
  node(g, "SequenceInsert", "s,k", "bad_insert");
  g_out(g, "bad_insert", type(F32, -1, NULL, 1));
  expect_error(import(g, 12, 0, st), st, FLOE_INVALID_ARGUMENT, "bad_insert", "i32");
  /* Elements of different ranks. */
  g = graph("main");
  g_in(g, "x", type(F32, 1, d1, 0));
  g_in(g, "y", type(F32, 2, (int64_t[]){1, 1}, 0));
  node(g, "SequenceConstruct", "x,y", "bad_construct");
  g_out(g, "bad_construct", type(F32, -1, NULL, 1));
  expect_error(import(g, 12, 0, st), st, FLOE_UNIMPLEMENTED, "bad_construct", "rank");
  floe_status_free(st);
}
END_TEST

START_TEST(test_training_errors) {
  FloeStatus *st = floe_status_new();
  const char *names6 = "R,T,X,G,V";
  Onnx__GraphProto *g = graph("main");
  g_in(g, "R", type(F32, 0, NULL, 0));
  g_in(g, "T", type(I64, 0, NULL, 0));
  g_in(g, "X", type(F32, 1, d1, 0));
  g_in(g, "G", type(F32, 1, d1, 0));
  g_in(g, "V", type(F32, 1, d1, 0));
  Onnx__NodeProto *n = node(g, "Momentum", names6, "bad_momentum,V_new");
  n->domain = "ai.onnx.preview.training";
  attr_f(n, "alpha", 0.9f);
  attr_f(n, "beta", 1.0f);
  attr_f(n, "norm_coefficient", 0);
  attr_s(n, "mode", "sideways");
  g_out(g, "bad_momentum", type(F32, -1, NULL, 0));
  g_out(g, "V_new", type(F32, -1, NULL, 0));
  expect_error(import(g, 0, 1, st), st, FLOE_INVALID_ARGUMENT, "bad_momentum", "sideways");
  /* Adam wants R, T and four tensors per weight. */
  g = graph("main");
  g_in(g, "R", type(F32, 0, NULL, 0));
  g_in(g, "T", type(I64, 0, NULL, 0));
  g_in(g, "X", type(F32, 1, d1, 0));
  g_in(g, "G", type(F32, 1, d1, 0));
  g_in(g, "V", type(F32, 1, d1, 0));
  n = node(g, "Adam", names6, "bad_adam,V_new,H_new");
  n->domain = "ai.onnx.preview.training";
  g_out(g, "bad_adam", type(F32, -1, NULL, 0));
  expect_error(import(g, 0, 1, st), st, FLOE_INVALID_ARGUMENT, "bad_adam", "groups");
  floe_status_free(st);
}
END_TEST

/* Test data files: a sequence .pb read into parts; truncated and missing files are errors. */
START_TEST(test_load_value_pb) {
  FloeStatus *st = floe_status_new();
  Onnx__SequenceProto sp;
  Onnx__TensorProto t0, t1, *ts[2] = {&t0, &t1};
  onnx__sequence_proto__init(&sp);
  const float a[2] = {1, 2}, b[4] = {3, 4, 5, 6};
  int64_t da[2] = {1, 2}, db[2] = {2, 2};
  onnx__tensor_proto__init(&t0);
  onnx__tensor_proto__init(&t1);
  t0.has_data_type = t1.has_data_type = 1;
  t0.data_type = t1.data_type = F32;
  t0.n_dims = 2, t0.dims = da, t0.n_float_data = 2, t0.float_data = (float *)a;
  t1.n_dims = 2, t1.dims = db, t1.n_float_data = 4, t1.float_data = (float *)b;
  sp.n_tensor_values = 2, sp.tensor_values = ts;
  uint8_t buf[256];
  size_t len = protobuf_c_message_pack(&sp.base, buf);
  char path[] = "/tmp/floe_seq_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
  close(fd);
  FloeTensor *parts[2] = {NULL, NULL};
  ck_assert_int_eq(floe_onnx_load_value_pb(path, FLOE_ONNX_SEQUENCE, FLOE_F32, parts, st), FLOE_OK);
  expect_f32(parts[0], 1, (int64_t[]){6}, (float[]){1, 2, 3, 4, 5, 6});
  FloeShape ps = floe_tensor_shape(parts[1]);
  ck_assert_int_eq(ps.rank, 2);
  ck_assert_int_eq(ps.dims[0], 2);
  ck_assert_int_eq(ps.dims[1], 2);
  const int64_t want_rows[4] = {1, 2, 2, 2};
  for (int i = 0; i < 4; i++) ck_assert_int_eq(((int64_t *)floe_tensor_data(parts[1]))[i], want_rows[i]);
  release(parts, 2);
  /* Truncated at every length: an error (or, where the prefix is itself a valid message,
   * fewer elements), never a crash. */
  for (size_t cut = 1; cut < len; cut++) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, cut, f);
    fclose(f);
    if (floe_onnx_load_value_pb(path, FLOE_ONNX_SEQUENCE, FLOE_F32, parts, st) == FLOE_OK)
      release(parts, 2);
    else
      ck_assert_ptr_null(parts[0]);
    floe_status_clear(st);
  }
  unlink(path);
  ck_assert_int_ne(floe_onnx_load_value_pb(path, FLOE_ONNX_SEQUENCE, FLOE_F32, parts, st), FLOE_OK);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), path));
  floe_status_free(st);
}
END_TEST

/* ---- nesting deeper than protobuf-c's recursion can take ---- */

typedef struct Bytes {
  uint8_t *p;
  size_t n;
} Bytes;

static size_t put_varint(uint8_t *out, uint64_t v) {
  size_t k = 0;
  do {
    out[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) out[k] |= 0x80;
    k++;
  } while (v);
  return k;
}

/* b becomes prefix + (field id, wire type 2, length b->n) + b. */
static void wrap(Bytes *b, const uint8_t *prefix, size_t plen, unsigned id) {
  uint8_t head[32];
  size_t h = put_varint(head, (uint64_t)id << 3 | 2);
  h += put_varint(head + h, b->n);
  uint8_t *q = malloc(plen + h + b->n);
  ck_assert_ptr_nonnull(q);
  if (plen) memcpy(q, prefix, plen);
  memcpy(q + plen, head, h);
  if (b->n) memcpy(q + plen + h, b->p, b->n);
  free(b->p);
  b->p = q;
  b->n += plen + h;
}

/* An ONNX model whose graph holds an If whose then_branch holds an If ... `levels` deep
 * (GraphProto.node = 1, NodeProto.op_type = 4 and .attribute = 5, AttributeProto.name = 1,
 * .type = 20 (GRAPH = 5) and .g = 6; ModelProto.ir_version = 1, .opset_import = 8 with
 * .version = 2, .graph = 7). */
static Bytes nested_if_model(int levels) {
  Bytes b = {NULL, 0};
  static const uint8_t attr_head[] = {0x0a, 11, 't', 'h', 'e', 'n', '_', 'b', 'r', 'a', 'n', 'c', 'h',
                                      0xa0, 0x01, 5};
  static const uint8_t node_head[] = {0x22, 2, 'I', 'f'};
  for (int k = 0; k < levels; k++) {
    wrap(&b, attr_head, sizeof attr_head, 6); /* AttributeProto{name, type, g = graph} */
    wrap(&b, node_head, sizeof node_head, 5); /* NodeProto{op_type, attribute} */
    wrap(&b, NULL, 0, 1);                     /* GraphProto{node} */
  }
  static const uint8_t model_head[] = {0x08, 8, 0x42, 2, 0x10, 13};
  wrap(&b, model_head, sizeof model_head, 7); /* ModelProto{ir_version, opset_import, graph} */
  return b;
}

typedef struct DeepImport {
  Bytes model;
  char msg[512];
  int imported;
} DeepImport;

static void *import_deep(void *arg) {
  DeepImport *d = arg;
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = floe_onnx_import(d->model.p, d->model.n, "deep.onnx", NULL, st);
  d->imported = m != NULL;
  snprintf(d->msg, sizeof d->msg, "%s", floe_status_message(st));
  floe_onnx_model_free(m);
  floe_status_free(st);
  return NULL;
}

/* Imported on a thread with a 256 KB stack: 3,000 levels (a 1 MB stack was overflowed by
 * 1,000) are refused with the nesting named; 40 levels (120 messages, within the reader's
 * 128) are read and reach the importer, which refuses the first If (it has no condition). */
START_TEST(test_deep_nesting_small_stack) {
  const int levels[] = {3000, 40};
  const char *want[] = {"nests messages more than 128 deep", "node '(unnamed)' (If, opset 13): If needs a condition"};
  for (int k = 0; k < 2; k++) {
    DeepImport d = {nested_if_model(levels[k]), "", 0};
    pthread_attr_t a;
    pthread_t t;
    ck_assert_int_eq(pthread_attr_init(&a), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&a, 256 * 1024), 0);
    ck_assert_int_eq(pthread_create(&t, &a, import_deep, &d), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&a);
    ck_assert_msg(!d.imported, "%d levels imported", levels[k]);
    ck_assert_msg(strstr(d.msg, want[k]) && strstr(d.msg, "deep.onnx"), "%d levels: %s",
                  levels[k], d.msg);
    free(d.model.p);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_control");
  TCase *tc = tcase_create("all");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_loop_trips_cond_growing_scan);
  tcase_add_test(tc, test_loop_nested);
  tcase_add_test(tc, test_if_captures_outer_values);
  tcase_add_test(tc, test_scan_reverse_axes);
  tcase_add_test(tc, test_sequence_ops);
  tcase_add_test(tc, test_sequence_io_parts);
  tcase_add_test(tc, test_control_errors);
  tcase_add_test(tc, test_sequence_errors);
  tcase_add_test(tc, test_training_errors);
  tcase_add_test(tc, test_load_value_pb);
  tcase_add_test(tc, test_deep_nesting_small_stack);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
