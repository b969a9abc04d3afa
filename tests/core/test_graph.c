/* SPDX-License-Identifier: Apache-2.0 */
/* test_graph.c - graph building: every kind of node, sticky errors, each validation error
 * and its message, automatic names, lookup, output names and clones. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ---- helpers ---- */

static FloeShape shape2(int64_t a, int64_t b) {
  int64_t d[2] = {a, b};
  return floe_shape_make(2, d);
}

static void assert_shape(FloeShape s, int rank, const int64_t *dims) {
  ck_assert_int_eq(s.rank, rank);
  for (int i = 0; i < rank; i++) ck_assert_int_eq(s.dims[i], dims[i]);
}

/* The graph's sticky error has `code` and its message contains every fragment. */
static void expect_error(const FloeGraph *g, floe_code code, const char *const *frags, int n) {
  const char *msg = floe_graph_error(g, NULL);
  ck_assert_msg(floe_graph_status(g) == code, "code %s, want %s; message: %s",
                floe_code_name(floe_graph_status(g)), floe_code_name(code), msg);
  for (int i = 0; i < n; i++)
    ck_assert_msg(strstr(msg, frags[i]) != NULL, "message \"%s\" lacks \"%s\"", msg, frags[i]);
}
#define EXPECT_ERROR(g, code, ...)                                           \
  do {                                                                       \
    const char *const frags_[] = {__VA_ARGS__};                              \
    expect_error((g), (code), frags_, (int)(sizeof frags_ / sizeof *frags_)); \
  } while (0)

static FloeOutput ph(FloeGraph *g, const char *name, FloeDType dt, FloeShape s) {
  FloeOutput o = floe_placeholder(g, name, dt, s);
  ck_assert_msg(o.node != NULL, "placeholder %s: %s", name, floe_graph_error(g, NULL));
  return o;
}

static FloeOutput const_i32(FloeGraph *g, const char *name, int32_t v) {
  FloeTensor *t = floe_tensor_scalar_i32(v, NULL);
  ck_assert_ptr_nonnull(t);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

/* ---- building ---- */

START_TEST(build_sources_and_matmul) {
  FloeGraph *g = floe_graph_new();
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_str_eq(floe_graph_error(g, NULL), "");

  FloeOutput x = ph(g, "x", FLOE_F32, shape2(2, 3));
  float wdata[12];
  for (int i = 0; i < 12; i++) wdata[i] = (float)i * 0.5f;
  int64_t wd[2] = {3, 4};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, wdata, sizeof wdata, NULL);
  ck_assert_ptr_nonnull(wt);
  FloeOutput w = floe_const(g, "w", wt);
  floe_tensor_release(wt); /* the graph keeps its own reference */
  FloeOutput mm = floe_matmul(g, "mm", x, w, 0, 0);
  ck_assert_ptr_nonnull(mm.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  ck_assert_int_eq(floe_graph_num_nodes(g), 3);
  ck_assert_ptr_eq(floe_graph_node(g, 0), x.node);
  ck_assert_ptr_eq(floe_graph_node(g, 2), mm.node);
  ck_assert_ptr_null(floe_graph_node(g, 3));
  ck_assert_ptr_null(floe_graph_node(g, -1));
  ck_assert_str_eq(floe_node_name(mm.node), "mm");
  ck_assert_str_eq(floe_node_op(mm.node), "MatMul");
  ck_assert_str_eq(floe_node_device(mm.node), "");
  ck_assert_int_eq(floe_node_num_inputs(mm.node), 2);
  ck_assert_ptr_eq(floe_node_input(mm.node, 0).node, x.node);
  ck_assert_ptr_eq(floe_node_input(mm.node, 1).node, w.node);
  ck_assert_ptr_null(floe_node_input(mm.node, 2).node);
  ck_assert_int_eq(floe_node_num_outputs(mm.node), 1);
  ck_assert_int_eq(floe_node_output_dtype(mm.node, 0), FLOE_F32);
  assert_shape(floe_node_output_shape(mm.node, 0), 2, (int64_t[]){2, 4});
  ck_assert_int_eq(floe_node_output_dtype(mm.node, 1), FLOE_DTYPE_INVALID);
  ck_assert_int_eq(floe_node_output_shape(mm.node, 1).rank, FLOE_RANK_UNKNOWN);

  /* Const: dtype from the tensor, value kept alive by the graph. */
  ck_assert_int_eq(floe_node_output_dtype(w.node, 0), FLOE_F32);
  assert_shape(floe_node_output_shape(w.node, 0), 2, wd);
  const FloeAttrValue *v = floe__attrs_get(&w.node->attrs, "value");
  ck_assert_ptr_nonnull(v);
  ck_assert_int_eq(v->kind, FLOE_ATTR_TENSOR);
  ck_assert_float_eq(((const float *)floe_tensor_data(v->u.tensor))[11], 5.5f);

  /* Inferred type attribute and filled defaults. */
  ck_assert_int_eq(floe__attrs_get(&mm.node->attrs, "T")->u.type, FLOE_F32);
  ck_assert_int_eq(floe__attrs_get(&mm.node->attrs, "transpose_a")->kind, FLOE_ATTR_BOOL);
  ck_assert_int_eq(floe__attrs_get(&mm.node->attrs, "transpose_a")->u.b, 0);
  ck_assert_int_eq(floe__attrs_get(&x.node->attrs, "dtype")->u.type, FLOE_F32);

  /* Transposed operands. */
  FloeOutput xt = ph(g, "xt", FLOE_F32, shape2(3, 2));
  FloeOutput mm2 = floe_matmul(g, NULL, xt, w, 1, 0);
  ck_assert_ptr_nonnull(mm2.node);
  assert_shape(floe_node_output_shape(mm2.node, 0), 2, (int64_t[]){2, 4});
  ck_assert_int_eq(floe__attrs_get(&mm2.node->attrs, "transpose_a")->u.b, 1);
  floe_graph_free(g);
}
END_TEST

START_TEST(build_elementwise_and_scalars) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 3));
  int64_t three = 3;
  FloeOutput b = ph(g, "b", FLOE_F32, floe_shape_make(1, &three));
  FloeOutput s = floe_binary(g, "Add", "s", a, b);
  ck_assert_ptr_nonnull(s.node);
  assert_shape(floe_node_output_shape(s.node, 0), 2, (int64_t[]){2, 3});
  FloeOutput r = floe_unary(g, "Relu", "r", s);
  ck_assert_ptr_nonnull(r.node);
  assert_shape(floe_node_output_shape(r.node, 0), 2, (int64_t[]){2, 3});
  FloeOutput c = floe_const_f32(g, "c", 2.5f);
  ck_assert_ptr_nonnull(c.node);
  ck_assert_int_eq(floe_node_output_shape(c.node, 0).rank, 0);
  ck_assert_float_eq(*(const float *)floe_tensor_data(floe__attrs_get(&c.node->attrs, "value")->u.tensor), 2.5f);
  FloeOutput m = floe_binary(g, "Mul", NULL, r, c);
  ck_assert_ptr_nonnull(m.node);
  ck_assert_str_eq(floe_node_name(m.node), "Mul");
  /* Comparison outputs are bool whatever T is. */
  FloeOutput lt = floe_binary(g, "Less", NULL, a, b);
  ck_assert_int_eq(floe_node_output_dtype(lt.node, 0), FLOE_BOOL);
  ck_assert_int_eq(floe__attrs_get(&lt.node->attrs, "T")->u.type, FLOE_F32);
  /* A default float attribute. */
  FloeOutput lr = floe_unary(g, "LeakyRelu", NULL, a);
  ck_assert_double_eq(floe__attrs_get(&lr.node->attrs, "alpha")->u.f, 0.2);
  /* Unknown placeholder shape flows through. */
  FloeOutput u = ph(g, "u", FLOE_F64, floe_shape_unknown());
  FloeOutput e = floe_unary(g, "Exp", NULL, u);
  ck_assert_int_eq(floe_node_output_shape(e.node, 0).rank, FLOE_RANK_UNKNOWN);
  ck_assert_int_eq(floe_node_output_dtype(e.node, 0), FLOE_F64);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  floe_graph_free(g);
}
END_TEST

START_TEST(build_lists_and_multiple_outputs) {
  FloeGraph *g = floe_graph_new();
  FloeOutput v[3];
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    v[i] = ph(g, name, FLOE_F32, shape2(2, i + 1));
  }
  FloeOutput axis = const_i32(g, "axis", 1);
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", "cat");
  floe_node_add_input_list(b, v, 3);
  floe_node_add_input(b, axis);
  FloeNode *cat = floe_node_finish(b);
  ck_assert_msg(cat != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_num_inputs(cat), 4);
  ck_assert_int_eq(floe__attrs_get(&cat->attrs, "N")->u.i, 3); /* from the list size */
  ck_assert_int_eq(floe__attrs_get(&cat->attrs, "Tidx")->u.type, FLOE_I32);
  ck_assert_int_eq(cat->input_arg[2], 0);
  ck_assert_int_eq(cat->input_arg[3], 1);
  assert_shape(floe_node_output_shape(cat, 0), 2, (int64_t[]){2, 6});

  /* Split: one output per piece. */
  FloeOutput val = ph(g, "val", FLOE_F32, shape2(6, 4));
  FloeOutput zero = const_i32(g, "zero", 0);
  b = floe_node_begin(g, "Split", "sp");
  floe_node_add_input(b, val);
  floe_node_add_input(b, zero);
  floe_node_set_attr_int(b, "num_split", 3);
  FloeNode *sp = floe_node_finish(b);
  ck_assert_msg(sp != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_num_outputs(sp), 3);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(floe_node_output_dtype(sp, i), FLOE_F32);
    assert_shape(floe_node_output_shape(sp, i), 2, (int64_t[]){2, 4});
  }
  FloeOutput last = floe_unary(g, "Neg", "neg", floe_out(sp, 2));
  ck_assert_ptr_nonnull(last.node);
  ck_assert_int_eq(floe_node_input(last.node, 0).index, 2);

  /* Two outputs of different arguments. */
  FloeOutput feats = ph(g, "feats", FLOE_F32, shape2(8, 10));
  FloeOutput labels = ph(g, "labels", FLOE_I64, floe_shape_make(1, (int64_t[]){8}));
  FloeOutput xent = floe_binary(g, "SparseSoftmaxCrossEntropyWithLogits", "xent", feats, labels);
  ck_assert_msg(xent.node != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_num_outputs(xent.node), 2);
  ck_assert_int_eq(floe__attrs_get(&xent.node->attrs, "Tlabels")->u.type, FLOE_I64);
  floe_graph_free(g);
}
END_TEST

START_TEST(build_control_device_and_attrs) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(1, 4));
  FloeOutput r = floe_unary(g, "Relu", "r", a);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "sync");
  floe_node_add_control_input(b, a.node);
  floe_node_add_control_input(b, r.node);
  floe_node_set_device(b, "cpu:0");
  FloeNode *sync = floe_node_finish(b);
  ck_assert_msg(sync != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_num_outputs(sync), 0);
  ck_assert_int_eq(floe_node_num_control_inputs(sync), 2);
  ck_assert_ptr_eq(floe_node_control_input(sync, 1), r.node);
  ck_assert_ptr_null(floe_node_control_input(sync, 2));
  ck_assert_str_eq(floe_node_device(sync), "cpu:0");

  /* Explicit type attribute matching the input; string, int, list(int) attributes. */
  b = floe_node_begin(g, "Cast", "cast");
  floe_node_add_input(b, a);
  floe_node_set_attr_type(b, "SrcT", FLOE_F32);
  floe_node_set_attr_type(b, "DstT", FLOE_I32);
  FloeNode *cast = floe_node_finish(b);
  ck_assert_msg(cast != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_output_dtype(cast, 0), FLOE_I32);

  b = floe_node_begin(g, "ExpandDims", "ed");
  floe_node_add_input(b, a);
  floe_node_set_attr_int(b, "axis", 0);
  FloeNode *ed = floe_node_finish(b);
  ck_assert_msg(ed != NULL, "%s", floe_graph_error(g, NULL));
  assert_shape(floe_node_output_shape(ed, 0), 3, (int64_t[]){1, 1, 4});

  FloeOutput img = ph(g, "img", FLOE_F32, floe_shape_make(4, (int64_t[]){1, 8, 8, 3}));
  FloeOutput filt = ph(g, "filt", FLOE_F32, floe_shape_make(4, (int64_t[]){3, 3, 3, 16}));
  b = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(b, img);
  floe_node_add_input(b, filt);
  floe_node_set_attr_int_list(b, "strides", (int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_string(b, "padding", "SAME");
  FloeNode *conv = floe_node_finish(b);
  ck_assert_msg(conv != NULL, "%s", floe_graph_error(g, NULL));
  assert_shape(floe_node_output_shape(conv, 0), 4, (int64_t[]){1, 4, 4, 16});
  ck_assert_str_eq(floe__attrs_get(&conv->attrs, "padding")->u.s, "SAME");
  ck_assert_str_eq(floe__attrs_get(&conv->attrs, "data_format")->u.s, "NHWC");
  ck_assert_int_eq(floe__attrs_get(&conv->attrs, "dilations")->u.ilist.n, 4);

  /* A later setter replaces an earlier one. */
  b = floe_node_begin(g, "Placeholder", "p2");
  floe_node_set_attr_type(b, "dtype", FLOE_I8);
  floe_node_set_attr_type(b, "dtype", FLOE_U8);
  FloeNode *p2 = floe_node_finish(b);
  ck_assert_int_eq(floe_node_output_dtype(p2, 0), FLOE_U8);
  ck_assert_int_eq(floe_node_output_shape(p2, 0).rank, FLOE_RANK_UNKNOWN);

  /* Abandoning a builder adds nothing. */
  int before = floe_graph_num_nodes(g);
  b = floe_node_begin(g, "Relu", "gone");
  floe_node_add_input(b, a);
  floe_node_builder_abandon(b);
  ck_assert_int_eq(floe_graph_num_nodes(g), before);
  ck_assert_ptr_null(floe_graph_find(g, "gone"));
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  floe_graph_free(g);
}
END_TEST

/* ---- sticky errors ---- */

START_TEST(sticky_error_blocks_later_calls) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 2));
  FloeOutput bad = floe_unary(g, "NoSuchOp", "first", a);
  ck_assert_ptr_null(bad.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_NOT_FOUND);
  char first_msg[512];
  snprintf(first_msg, sizeof first_msg, "%s", floe_graph_error(g, NULL));

  /* Every later call is a no-op; the first error stays. */
  ck_assert_ptr_null(floe_node_begin(g, "Relu", "later"));
  ck_assert_ptr_null(floe_unary(g, "Relu", "later", a).node);
  ck_assert_ptr_null(floe_placeholder(g, "p", FLOE_F32, floe_shape_scalar()).node);
  ck_assert_ptr_null(floe_const_f32(g, "c", 1.0f).node);
  ck_assert_ptr_null(floe_matmul(g, "m", a, a, 0, 0).node);
  ck_assert_ptr_null(floe_binary(g, "Add", NULL, bad, bad).node);
  /* NULL builders are accepted everywhere. */
  floe_node_add_input(NULL, a);
  floe_node_set_attr_int(NULL, "x", 1);
  ck_assert_ptr_null(floe_node_finish(NULL));
  floe_node_builder_abandon(NULL);
  ck_assert_int_eq(floe_graph_num_nodes(g), 1);
  ck_assert_str_eq(floe_graph_error(g, NULL), first_msg);

  FloeStatus *st = floe_status_new();
  ck_assert_str_eq(floe_graph_error(g, st), first_msg);
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_str_eq(floe_status_message(st), first_msg);

  /* An error that happens between begin and finish also makes finish a no-op. */
  floe_graph_clear_error(g);
  FloeNodeBuilder *b = floe_node_begin(g, "Relu", "half");
  floe_node_add_input(b, a);
  ck_assert_ptr_null(floe_unary(g, "Bogus", "other", a).node);
  ck_assert_ptr_null(floe_node_finish(b));
  ck_assert_ptr_null(floe_graph_find(g, "half"));

  /* Clearing the error allows building again. */
  floe_graph_clear_error(g);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_str_eq(floe_graph_error(g, st), "");
  ck_assert_int_eq(floe_status_code(st), FLOE_OK);
  ck_assert_ptr_nonnull(floe_unary(g, "Relu", "later", a).node);
  ck_assert_int_eq(floe_graph_num_nodes(g), 2);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(invalid_output_names_the_node_being_built) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 2));
  FloeOutput none = floe_out(NULL, 0);
  ck_assert_ptr_null(floe_binary(g, "Add", "sum", a, none).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'sum' (Add)", "input 1 is invalid");
  floe_graph_clear_error(g);

  /* Unnamed: the message uses the name the node would have had. */
  ck_assert_ptr_nonnull(floe_unary(g, "Relu", NULL, a).node);
  ck_assert_ptr_null(floe_unary(g, "Relu", NULL, none).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'Relu_1' (Relu)", "input 0 is invalid");
  floe_graph_clear_error(g);

  FloeNodeBuilder *b = floe_node_begin(g, "Concat", "cat");
  FloeOutput list[3] = {a, none, a};
  floe_node_add_input_list(b, list, 3);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cat' (Concat)",
               "input 1 (element 1 of input argument 0) is invalid");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "NoOp", "n");
  floe_node_add_control_input(b, NULL);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'n' (NoOp)", "control input 0 is NULL");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_const(g, "k", NULL).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'k' (Const)", "tensor attribute 'value' is NULL");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Conv2D", "cv");
  floe_node_set_attr_string(b, "padding", NULL);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cv' (Conv2D)", "string attribute 'padding'");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Conv2D", "cv");
  floe_node_set_attr_int_list(b, "strides", NULL, 2);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cv' (Conv2D)", "'strides' has bad length 2");
  ck_assert_int_eq(floe_graph_num_nodes(g), 2);
  floe_graph_free(g);
}
END_TEST

/* The allocation-failure walk: each failure leaves the graph unchanged with NO_MEMORY. */
START_TEST(allocation_failures_leave_graph_consistent) {
  int ok_at = 0;
  for (long k = 1; k < 400 && !ok_at; k++) {
    FloeGraph *g = floe_graph_new();
    ck_assert_ptr_nonnull(g);
    FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 3));
    FloeOutput b = ph(g, "b", FLOE_F32, shape2(3, 2));
    floe_test_fail_alloc_after(k);
    FloeNodeBuilder *nb = floe_node_begin(g, "MatMul", NULL);
    floe_node_add_input(nb, a);
    floe_node_add_input(nb, b);
    floe_node_set_attr_bool(nb, "transpose_b", 0);
    floe_node_set_device(nb, "cpu:0");
    FloeNode *n = floe_node_finish(nb);
    floe_test_fail_alloc_after(0);
    if (n) {
      ok_at = (int)k;
      ck_assert_int_eq(floe_graph_num_nodes(g), 3);
    } else {
      ck_assert_int_eq(floe_graph_status(g), FLOE_NO_MEMORY);
      ck_assert_int_eq(floe_graph_num_nodes(g), 2);
      ck_assert_ptr_null(floe_graph_find(g, "MatMul"));
      floe_graph_clear_error(g);
      /* Still usable. */
      ck_assert_ptr_nonnull(floe_matmul(g, NULL, a, b, 0, 0).node);
      ck_assert_str_eq(floe_node_name(floe_graph_node(g, 2)), "MatMul");
    }
    floe_graph_free(g);
  }
  ck_assert_int_gt(ok_at, 3);

  /* The same walk for clone. */
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 3));
  floe_unary(g, "Relu", NULL, floe_unary(g, "Neg", NULL, a));
  FloeStatus *st = floe_status_new();
  int clone_ok = 0;
  for (long k = 1; k < 400 && !clone_ok; k++) {
    floe_test_fail_alloc_after(k);
    FloeGraph *c = floe__graph_clone(g, st);
    floe_test_fail_alloc_after(0);
    if (c) {
      clone_ok = (int)k;
      ck_assert_int_eq(floe_graph_num_nodes(c), 3);
      floe_graph_free(c);
    } else {
      ck_assert_int_eq(floe_status_code(st), FLOE_NO_MEMORY);
    }
  }
  ck_assert_int_gt(clone_ok, 3);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ---- validation errors, each with its message ---- */

START_TEST(error_unknown_op_and_names) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 2));
  ck_assert_ptr_null(floe_unary(g, "Frobnicate", "f", a).node);
  EXPECT_ERROR(g, FLOE_NOT_FOUND, "node 'f'", "unknown op 'Frobnicate'");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_placeholder(g, "a", FLOE_I32, floe_shape_scalar()).node);
  EXPECT_ERROR(g, FLOE_ALREADY_EXISTS, "node 'a' (Placeholder)",
               "already has a node named 'a' (Placeholder)");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_unary(g, "Relu", "bad:name", a).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'bad:name' (Relu)", "invalid name");
  floe_graph_clear_error(g);
  ck_assert_ptr_null(floe_unary(g, "Relu", "", a).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "invalid name");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_node_finish(floe_node_begin(g, NULL, "nop")));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'nop'", "no op given");
  ck_assert_int_eq(floe_graph_num_nodes(g), 1);
  floe_graph_free(g);
}
END_TEST

START_TEST(error_inputs) {
  FloeGraph *g = floe_graph_new(), *other = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 2));
  FloeOutput foreign = ph(other, "p", FLOE_F32, shape2(2, 2));

  ck_assert_ptr_null(floe_binary(g, "Add", "add", a, foreign).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'add' (Add)", "input 1 (y) is node 'p' of another graph");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_unary(g, "Relu", "r", floe_out(a.node, 3)).node);
  EXPECT_ERROR(g, FLOE_OUT_OF_RANGE, "node 'r' (Relu)",
               "input 0 (x) asks for output 3 of node 'a' (Placeholder), which has 1 output");
  floe_graph_clear_error(g);

  FloeNodeBuilder *b = floe_node_begin(g, "Add", "one");
  floe_node_add_input(b, a);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'one' (Add)",
               "op Add takes 2 input arguments (x: T, y: T) but 1 was given");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Relu", "two");
  FloeOutput pair[2] = {a, a};
  floe_node_add_input_list(b, pair, 2);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'two' (Relu)",
               "input argument 'x' takes exactly one tensor, got 2");
  floe_graph_clear_error(g);

  /* Concat given one tensor per add_input: too many arguments, with a hint. */
  FloeOutput ax = const_i32(g, "ax", 0);
  b = floe_node_begin(g, "Concat", "cat");
  floe_node_add_input(b, a);
  floe_node_add_input(b, a);
  floe_node_add_input(b, ax);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cat' (Concat)",
               "takes 2 input arguments (values: N*T, axis: Tidx) but 3 were given",
               "floe_node_add_input_list");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "NoOp", "n");
  floe_node_add_control_input(b, foreign.node);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'n' (NoOp)",
               "control input 0 is node 'p' of another graph");
  ck_assert_int_eq(floe_graph_num_nodes(g), 2);
  floe_graph_free(other);
  floe_graph_free(g);
}
END_TEST

START_TEST(error_dtypes) {
  FloeGraph *g = floe_graph_new();
  FloeOutput f = ph(g, "f", FLOE_F32, shape2(2, 2));
  FloeOutput i = ph(g, "i", FLOE_I32, shape2(2, 2));
  FloeOutput l = ph(g, "l", FLOE_I64, floe_shape_scalar());

  ck_assert_ptr_null(floe_binary(g, "Add", "add", f, i).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'add' (Add)",
               "input 1 (y) from 'i:0' has dtype i32 but input 0 (x) from 'f:0' has dtype f32 "
               "(both are type T)");
  floe_graph_clear_error(g);

  FloeNodeBuilder *b = floe_node_begin(g, "Relu", "r");
  floe_node_add_input(b, f);
  floe_node_set_attr_type(b, "T", FLOE_F64);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'r' (Relu)",
               "input 0 (x) from 'f:0' has dtype f32 but attribute T = f64");
  floe_graph_clear_error(g);

  ck_assert_ptr_null(floe_unary(g, "LogicalNot", "not", f).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'not' (LogicalNot)",
               "input 0 (x) from 'f:0' has dtype f32 but must be bool");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Split", "sp");
  floe_node_add_input(b, f);
  floe_node_add_input(b, l);
  floe_node_set_attr_int(b, "num_split", 2);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'sp' (Split)",
               "input 1 (axis) from 'l:0' has dtype i64 but must be i32");
  floe_graph_clear_error(g);

  /* Type constraint, inferred and explicit. */
  ck_assert_ptr_null(floe_unary(g, "Exp", "e", i).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'e' (Exp)",
               "type attribute T = i32 (from input 0 (x) from 'i:0') is not allowed "
               "(allowed: {f32,f64,f16,bf16})");
  floe_graph_clear_error(g);
  b = floe_node_begin(g, "Cast", "c");
  floe_node_add_input(b, f);
  floe_node_set_attr_type(b, "DstT", (FloeDType)42);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'c' (Cast)", "attribute 'DstT' is not a dtype (42)");
  floe_graph_clear_error(g);

  /* A placeholder of a dtype outside {all} cannot exist; one of a valid dtype can. */
  ck_assert_ptr_null(floe_placeholder(g, "bad", FLOE_DTYPE_INVALID, floe_shape_scalar()).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'bad' (Placeholder)", "'dtype' is not a dtype");
  ck_assert_int_eq(floe_graph_num_nodes(g), 3);
  floe_graph_free(g);
}
END_TEST

START_TEST(error_attributes) {
  FloeGraph *g = floe_graph_new();
  FloeOutput f = ph(g, "f", FLOE_F32, shape2(6, 2));
  FloeOutput ax = const_i32(g, "ax", 0);

  FloeNodeBuilder *b = floe_node_begin(g, "Relu", "r");
  floe_node_add_input(b, f);
  floe_node_set_attr_int(b, "bogus", 1);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'r' (Relu)",
               "unknown attribute 'bogus' (op Relu has attributes T)");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "NoOp", "n");
  floe_node_set_attr_int(b, "x", 1);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "unknown attribute 'x' (op NoOp has no attributes)");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "MatMul", "mm");
  floe_node_add_input(b, f);
  floe_node_add_input(b, f);
  floe_node_set_attr_int(b, "transpose_a", 1);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'mm' (MatMul)",
               "attribute 'transpose_a' must be bool, got int");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "ExpandDims", "ed");
  floe_node_add_input(b, f);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'ed' (ExpandDims)",
               "missing required attribute 'axis' (int)");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Split", "sp");
  floe_node_add_input(b, f);
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", 0);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'sp' (Split)",
               "attribute num_split = 0 is below its minimum 1");
  floe_graph_clear_error(g);

  FloeOutput vals[3] = {f, f, f};
  b = floe_node_begin(g, "Concat", "cat");
  floe_node_add_input_list(b, vals, 3);
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "N", 2);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cat' (Concat)",
               "attribute N = 2 but input argument 'values' has 3 tensors");
  floe_graph_clear_error(g);

  /* An empty list for N*T with N >= 1. */
  b = floe_node_begin(g, "Concat", "cat0");
  floe_node_add_input_list(b, NULL, 0);
  floe_node_add_input(b, ax);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'cat0' (Concat)",
               "attribute N = 0 is below its minimum 1");
  floe_graph_clear_error(g);

  b = floe_node_begin(g, "Split", "huge");
  floe_node_add_input(b, f);
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", (int64_t)1 << 40);
  ck_assert_ptr_null(floe_node_finish(b));
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'huge' (Split)", "output 'output' would have");
  ck_assert_int_eq(floe_graph_num_nodes(g), 2);
  floe_graph_free(g);
}
END_TEST

START_TEST(error_shape_inference) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, "a", FLOE_F32, shape2(2, 3));
  FloeOutput b = ph(g, "b", FLOE_F32, shape2(4, 5));
  ck_assert_ptr_null(floe_matmul(g, "mm", a, b, 0, 0).node);
  EXPECT_ERROR(g, FLOE_INVALID_ARGUMENT, "node 'mm' (MatMul): ", "(inputs: f32[2,3], f32[4,5])");
  ck_assert_ptr_null(floe_graph_find(g, "mm"));
  floe_graph_clear_error(g);
  /* Transposing b makes the same inputs valid. */
  FloeOutput c = ph(g, "c", FLOE_F32, shape2(5, 3));
  FloeOutput ok = floe_matmul(g, "mm", a, c, 0, 1);
  ck_assert_ptr_nonnull(ok.node);
  assert_shape(floe_node_output_shape(ok.node, 0), 2, (int64_t[]){2, 5});
  floe_graph_free(g);
}
END_TEST

/* ---- names, lookup, output names, clone ---- */

START_TEST(automatic_names) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = ph(g, NULL, FLOE_F32, shape2(2, 2));
  ck_assert_str_eq(floe_node_name(a.node), "Placeholder");
  const char *want[] = {"Add", "Add_1", "Add_2", "Add_3"};
  for (int i = 0; i < 4; i++)
    ck_assert_str_eq(floe_node_name(floe_binary(g, "Add", NULL, a, a).node), want[i]);
  /* A user name in the sequence is skipped; gaps are filled first. */
  ck_assert_ptr_nonnull(floe_unary(g, "Relu", "Relu_1", a).node);
  ck_assert_str_eq(floe_node_name(floe_unary(g, "Relu", NULL, a).node), "Relu");
  ck_assert_str_eq(floe_node_name(floe_unary(g, "Relu", NULL, a).node), "Relu_2");
  ck_assert_ptr_nonnull(floe_unary(g, "Neg", "Neg_2", a).node);
  ck_assert_str_eq(floe_node_name(floe_unary(g, "Neg", NULL, a).node), "Neg");
  ck_assert_str_eq(floe_node_name(floe_unary(g, "Neg", NULL, a).node), "Neg_1");
  ck_assert_str_eq(floe_node_name(floe_unary(g, "Neg", NULL, a).node), "Neg_3");
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  floe_graph_free(g);
}
END_TEST

START_TEST(find_many_nodes) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = ph(g, "x", FLOE_F32, floe_shape_scalar());
  enum { N = 3000 };
  for (int i = 0; i < N; i++) {
    FloeOutput y = floe_unary(g, "Identity", NULL, x);
    ck_assert_ptr_nonnull(y.node);
  }
  ck_assert_int_eq(floe_graph_num_nodes(g), N + 1);
  char name[32];
  for (int i = 0; i < N; i++) {
    if (i == 0)
      snprintf(name, sizeof name, "Identity");
    else
      snprintf(name, sizeof name, "Identity_%d", i);
    FloeNode *n = floe_graph_find(g, name);
    ck_assert_msg(n != NULL, "%s not found", name);
    ck_assert_ptr_eq(n, floe_graph_node(g, i + 1));
  }
  ck_assert_ptr_null(floe_graph_find(g, "Identity_3000"));
  ck_assert_ptr_null(floe_graph_find(g, "identity"));
  ck_assert_ptr_null(floe_graph_find(g, NULL));
  ck_assert_ptr_null(floe_graph_find(NULL, "x"));
  ck_assert_ptr_eq(floe_graph_find(g, "x"), x.node);
  floe_graph_free(g);
}
END_TEST

START_TEST(resolve_output_names) {
  FloeGraph *g = floe_graph_new();
  FloeOutput v = ph(g, "v", FLOE_F32, shape2(4, 2));
  FloeOutput ax = const_i32(g, "ax", 0);
  FloeNodeBuilder *b = floe_node_begin(g, "Split", "sp");
  floe_node_add_input(b, v);
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", 2);
  FloeNode *sp = floe_node_finish(b);
  ck_assert_ptr_nonnull(sp);
  FloeStatus *st = floe_status_new();
  FloeOutput o;
  ck_assert_int_eq(floe__graph_resolve_output(g, "v", &o, st), FLOE_OK);
  ck_assert_ptr_eq(o.node, v.node);
  ck_assert_int_eq(o.index, 0);
  ck_assert_int_eq(floe__graph_resolve_output(g, "sp:1", &o, st), FLOE_OK);
  ck_assert_ptr_eq(o.node, sp);
  ck_assert_int_eq(o.index, 1);
  ck_assert_int_eq(floe__graph_resolve_output(g, "sp:2", &o, st), FLOE_OUT_OF_RANGE);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "node 'sp' (Split) has 2 outputs"));
  ck_assert_ptr_null(o.node);
  ck_assert_int_eq(floe__graph_resolve_output(g, "nope:0", &o, st), FLOE_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "no node named 'nope'"));
  const char *bad[] = {"sp:", "sp:-1", "sp:x", "sp: 1", "sp:1x", "sp:99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_int_eq(floe__graph_resolve_output(g, bad[i], &o, st), FLOE_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), bad[i]));
  }
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(clone_is_deep_and_independent) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = ph(g, "x", FLOE_F32, shape2(2, 3));
  FloeOutput w = ph(g, "w", FLOE_F32, shape2(3, 3));
  FloeOutput mm = floe_matmul(g, "mm", x, w, 0, 1);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "done");
  floe_node_add_control_input(b, mm.node);
  floe_node_set_device(b, "cpu:0");
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeGraph *c = floe__graph_clone(g, st);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(floe_graph_num_nodes(c), floe_graph_num_nodes(g));
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    const FloeNode *a = floe_graph_node(g, i), *k = floe_graph_node(c, i);
    ck_assert_ptr_ne(a, k);
    ck_assert_ptr_eq(k->graph, c);
    ck_assert_str_eq(k->name, a->name);
    ck_assert_ptr_eq(k->op, a->op);
    ck_assert_str_eq(floe_node_device(k), floe_node_device(a));
    ck_assert_int_eq(k->num_inputs, a->num_inputs);
    for (int j = 0; j < a->num_inputs; j++) {
      ck_assert_int_eq(k->inputs[j].node->id, a->inputs[j].node->id);
      ck_assert_ptr_eq(k->inputs[j].node->graph, c);
      ck_assert_int_eq(k->inputs[j].index, a->inputs[j].index);
    }
    ck_assert_int_eq(k->num_control, a->num_control);
    for (int j = 0; j < a->num_control; j++)
      ck_assert_ptr_eq(k->control[j], floe_graph_node(c, a->control[j]->id));
    ck_assert_int_eq(k->attrs.n, a->attrs.n);
    for (int j = 0; j < a->attrs.n; j++) {
      ck_assert_str_eq(k->attrs.names[j], a->attrs.names[j]);
      ck_assert(floe__attr_value_equal(&k->attrs.values[j], &a->attrs.values[j]));
    }
    ck_assert_int_eq(k->num_outputs, a->num_outputs);
    if (a->num_outputs)
      ck_assert_mem_eq(k->out_shapes, a->out_shapes, (size_t)a->num_outputs * sizeof(FloeShape));
    ck_assert_ptr_eq(floe_graph_find(c, a->name), k);
  }
  /* Independent: the original can go, and the clone grows alone. */
  floe_graph_free(g);
  FloeOutput r = floe_unary(c, "Relu", NULL, floe_out(floe_graph_find(c, "mm"), 0));
  ck_assert_ptr_nonnull(r.node);
  assert_shape(floe_node_output_shape(r.node, 0), 2, (int64_t[]){2, 3});
  ck_assert_int_eq(floe_graph_num_nodes(c), 5);

  /* The sticky error is cloned too. */
  floe_unary(c, "Nope", NULL, r);
  FloeGraph *c2 = floe__graph_clone(c, st);
  ck_assert_int_eq(floe_graph_status(c2), FLOE_NOT_FOUND);
  ck_assert_str_eq(floe_graph_error(c2, NULL), floe_graph_error(c, NULL));
  floe_graph_free(c2);
  floe_graph_free(c);

  /* An empty graph clones. */
  FloeGraph *e = floe_graph_new();
  FloeGraph *ec = floe__graph_clone(e, st);
  ck_assert_int_eq(floe_graph_num_nodes(ec), 0);
  ck_assert_ptr_null(floe_graph_find(ec, "x"));
  ck_assert_ptr_nonnull(floe_placeholder(ec, "x", FLOE_F32, floe_shape_scalar()).node);
  floe_graph_free(ec);
  floe_graph_free(e);
  floe_status_free(st);
}
END_TEST

START_TEST(null_safe_queries) {
  ck_assert_int_eq(floe_graph_num_nodes(NULL), 0);
  ck_assert_ptr_null(floe_graph_node(NULL, 0));
  ck_assert_str_eq(floe_node_name(NULL), "");
  ck_assert_str_eq(floe_node_op(NULL), "");
  ck_assert_str_eq(floe_node_device(NULL), "");
  ck_assert_int_eq(floe_node_num_inputs(NULL), 0);
  ck_assert_int_eq(floe_node_num_outputs(NULL), 0);
  ck_assert_int_eq(floe_node_num_control_inputs(NULL), 0);
  ck_assert_ptr_null(floe_out(NULL, 3).node);
  ck_assert_ptr_null(floe_node_begin(NULL, "Relu", NULL));
  ck_assert_int_eq(floe_graph_status(NULL), FLOE_INVALID_ARGUMENT);
  floe_graph_free(NULL);
  floe_graph_clear_error(NULL);
}
END_TEST

static Suite *graph_suite(void) {
  Suite *s = suite_create("graph");
  TCase *build = tcase_create("build");
  tcase_add_test(build, build_sources_and_matmul);
  tcase_add_test(build, build_elementwise_and_scalars);
  tcase_add_test(build, build_lists_and_multiple_outputs);
  tcase_add_test(build, build_control_device_and_attrs);
  suite_add_tcase(s, build);
  TCase *sticky = tcase_create("sticky");
  tcase_add_test(sticky, sticky_error_blocks_later_calls);
  tcase_add_test(sticky, invalid_output_names_the_node_being_built);
  tcase_add_test(sticky, allocation_failures_leave_graph_consistent);
  tcase_set_timeout(sticky, 60);
  suite_add_tcase(s, sticky);
  TCase *validate = tcase_create("validate");
  tcase_add_test(validate, error_unknown_op_and_names);
  tcase_add_test(validate, error_inputs);
  tcase_add_test(validate, error_dtypes);
  tcase_add_test(validate, error_attributes);
  tcase_add_test(validate, error_shape_inference);
  suite_add_tcase(s, validate);
  TCase *names = tcase_create("names");
  tcase_add_test(names, automatic_names);
  tcase_add_test(names, find_many_nodes);
  tcase_add_test(names, resolve_output_names);
  tcase_add_test(names, clone_is_deep_and_independent);
  tcase_add_test(names, null_safe_queries);
  tcase_set_timeout(names, 60);
  suite_add_tcase(s, names);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(graph_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
