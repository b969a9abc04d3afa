/* SPDX-License-Identifier: Apache-2.0 */
/* test_shapes.c - shape inference of every standard op, built through the public graph API:
 * known shapes, unknown dims and ranks, constant inputs (Const and Shape nodes) and the
 * errors for definite mismatches, whose messages must name the shapes or the attribute. */
#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>

static FloeGraph *g;

static void setup(void) {
  g = floe_graph_new();
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
}

static void teardown(void) { floe_graph_free(g); }

/* "[2,?,3]", "[]" or "?" (unknown rank). */
static FloeShape parse_shape(const char *s) {
  if (strcmp(s, "?") == 0) return floe_shape_unknown();
  int64_t dims[FLOE_MAX_DIMS];
  int r = 0;
  ck_assert(s[0] == '[');
  for (s++; *s && *s != ']';) {
    if (*s == '?') {
      dims[r++] = -1;
      s++;
    } else {
      char *end;
      dims[r++] = strtoll(s, &end, 10);
      s = end;
    }
    if (*s == ',') s++;
  }
  return floe_shape_make(r, dims);
}

static FloeOutput ph_t(FloeDType dt, const char *shape) {
  FloeOutput o = floe_placeholder(g, NULL, dt, parse_shape(shape));
  ck_assert_ptr_nonnull(o.node);
  return o;
}

static FloeOutput ph(const char *shape) { return ph_t(FLOE_F32, shape); }

/* An i32 constant: rank 0 (n == -1, one value) or a vector of n values. */
static FloeOutput ci(int n, ...) {
  int32_t v[32];
  int count = n < 0 ? 1 : n;
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < count; i++) v[i] = va_arg(ap, int);
  va_end(ap);
  int64_t dim = n;
  FloeTensor *t = floe_tensor_from_data(FLOE_I32, n < 0 ? 0 : 1, &dim, v,
                                        (size_t)count * sizeof(int32_t), NULL);
  ck_assert_ptr_nonnull(t);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  ck_assert_ptr_nonnull(o.node);
  return o;
}

static FloeOutput cscalar(int v) { return ci(-1, v); }

/* An i64 matrix constant [rows, cols]. */
static FloeOutput cmat64(int rows, int cols, const int64_t *v) {
  int64_t dims[2] = {rows, cols};
  FloeTensor *t = floe_tensor_from_data(FLOE_I64, 2, dims, v,
                                        (size_t)(rows * cols) * sizeof(int64_t), NULL);
  ck_assert_ptr_nonnull(t);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

/* A builder with n inputs. */
static FloeNodeBuilder *op(const char *name, int n, ...) {
  FloeNodeBuilder *b = floe_node_begin(g, name, NULL);
  ck_assert_ptr_nonnull(b);
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) floe_node_add_input(b, va_arg(ap, FloeOutput));
  va_end(ap);
  return b;
}

static void ilist(FloeNodeBuilder *b, const char *name, int n, ...) {
  int64_t v[16];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) v[i] = va_arg(ap, int);
  va_end(ap);
  floe_node_set_attr_int_list(b, name, v, n);
}

#define want(n, i, shape) want_at(__LINE__, (n), (i), (shape))
#define want_error(n, a, b) want_error_at(__LINE__, (n), (a), (b))

static void want_at(int line, FloeNode *n, int i, const char *shape) {
  ck_assert_msg(n != NULL, "line %d: node not built: %s", line, floe_graph_error(g, NULL));
  FloeShape s = floe_node_output_shape(n, i);
  char buf[160];
  floe_shape_str(&s, buf, sizeof buf);
  const char *expect = strcmp(shape, "?") == 0 ? "<unknown>" : shape;
  ck_assert_msg(strcmp(buf, expect) == 0, "line %d: %s output %d has shape %s, want %s", line,
                floe_node_op(n), i, buf, expect);
}

/* The node was refused; the graph's error is INVALID_ARGUMENT and names a and b. */
static void want_error_at(int line, FloeNode *n, const char *a, const char *b) {
  ck_assert_msg(n == NULL, "line %d: %s built, expected an error naming '%s'", line,
                floe_node_op(n), a);
  ck_assert_msg(floe_graph_status(g) == FLOE_INVALID_ARGUMENT, "line %d: code %s: %s", line,
                floe_code_name(floe_graph_status(g)), floe_graph_error(g, NULL));
  const char *msg = floe_graph_error(g, NULL);
  ck_assert_msg(strstr(msg, a) != NULL, "line %d: '%s' lacks '%s'", line, msg, a);
  ck_assert_msg(!b || strstr(msg, b) != NULL, "line %d: '%s' lacks '%s'", line, msg, b);
  floe_graph_clear_error(g);
}

/* ---- sources and element-wise ------------------------------------------------------- */

START_TEST(sources) {
  float v[6] = {0};
  int64_t dims[2] = {2, 3};
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 2, dims, v, sizeof v, NULL);
  want(floe_const(g, "c", t).node, 0, "[2,3]");
  floe_tensor_release(t);
  want(floe_const_f32(g, NULL, 1.0f).node, 0, "[]");
  want(ph("[?,3]").node, 0, "[?,3]");
  want(ph("?").node, 0, "?");
  /* Without a shape attribute the default "?" applies. */
  FloeNodeBuilder *b = op("Placeholder", 0);
  floe_node_set_attr_type(b, "dtype", FLOE_I64);
  want(floe_node_finish(b), 0, "?");
  FloeNode *noop = floe_node_finish(op("NoOp", 0));
  ck_assert_ptr_nonnull(noop);
  ck_assert_int_eq(floe_node_num_outputs(noop), 0);
}
END_TEST

START_TEST(unary_keep_shape) {
  static const char *const ops[] = {"Identity", "Neg", "Abs", "Square", "Exp", "Log", "Sqrt",
                                    "Rsqrt", "Relu", "Relu6", "LeakyRelu", "Elu", "Gelu",
                                    "Sigmoid", "Tanh", "Softplus", "Softmax", "LogSoftmax",
                                    "ZerosLike", "OnesLike"};
  FloeOutput x = ph("[2,?,4]");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    want(floe_unary(g, ops[i], NULL, x).node, 0, "[2,?,4]");
  want(floe_unary(g, "Tanh", NULL, ph("?")).node, 0, "?");
  want(floe_unary(g, "LogicalNot", NULL, ph_t(FLOE_BOOL, "[5]")).node, 0, "[5]");
  FloeNodeBuilder *b = op("Cast", 1, x);
  floe_node_set_attr_type(b, "DstT", FLOE_I32);
  FloeNode *c = floe_node_finish(b);
  want(c, 0, "[2,?,4]");
  ck_assert_int_eq(floe_node_output_dtype(c, 0), FLOE_I32);
}
END_TEST

START_TEST(softmax_axis) {
  FloeNodeBuilder *b = op("Softmax", 1, ph("[2,3]"));
  floe_node_set_attr_int(b, "axis", 0);
  want(floe_node_finish(b), 0, "[2,3]");
  b = op("Softmax", 1, ph("[2,3]"));
  floe_node_set_attr_int(b, "axis", 2);
  want_error(floe_node_finish(b), "attribute 'axis' 2 is out of range", "[2,3]");
  want_error(floe_unary(g, "LogSoftmax", NULL, ph("[]")).node, "rank >= 1", NULL);
}
END_TEST

START_TEST(broadcasting) {
  want(floe_binary(g, "Add", NULL, ph("[2,3]"), ph("[3]")).node, 0, "[2,3]");
  want(floe_binary(g, "Sub", NULL, ph("[2,1,4]"), ph("[3,1]")).node, 0, "[2,3,4]");
  want(floe_binary(g, "Mul", NULL, ph("[?,3]"), ph("[1]")).node, 0, "[?,3]");
  want(floe_binary(g, "Div", NULL, ph("[?]"), ph("[5]")).node, 0, "[5]");
  want(floe_binary(g, "Pow", NULL, ph("[?]"), ph("[1]")).node, 0, "[?]");
  want(floe_binary(g, "Maximum", NULL, ph("[?,1]"), ph("[?,7]")).node, 0, "[?,7]");
  want(floe_binary(g, "Minimum", NULL, ph("[]"), ph("[4]")).node, 0, "[4]");
  want(floe_binary(g, "Add", NULL, ph("[2,3]"), ph("?")).node, 0, "?");
  want(floe_binary(g, "Add", NULL, ph("[0,3]"), ph("[1,3]")).node, 0, "[0,3]");
  want_error(floe_binary(g, "Add", NULL, ph("[2,3]"), ph("[4]")).node,
             "Incompatible shapes for broadcasting: [2,3] vs [4]", NULL);
  want_error(floe_binary(g, "Mul", NULL, ph("[2,?]"), ph("[3,5]")).node, "[2,?] vs [3,5]", NULL);

  static const char *const cmp[] = {"Equal", "NotEqual", "Less", "LessEqual", "Greater",
                                    "GreaterEqual"};
  for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
    FloeNode *n = floe_binary(g, cmp[i], NULL, ph("[4,1]"), ph("[3]")).node;
    want(n, 0, "[4,3]");
    ck_assert_int_eq(floe_node_output_dtype(n, 0), FLOE_BOOL);
  }
  want(floe_binary(g, "LogicalAnd", NULL, ph_t(FLOE_BOOL, "[2]"), ph_t(FLOE_BOOL, "[]")).node, 0,
       "[2]");
  want_error(floe_binary(g, "LogicalOr", NULL, ph_t(FLOE_BOOL, "[2]"), ph_t(FLOE_BOOL, "[3]")).node,
             "[2] vs [3]", NULL);
}
END_TEST

START_TEST(select_op) {
  want(floe_node_finish(op("Select", 3, ph_t(FLOE_BOOL, "[2,1]"), ph("[1,3]"), ph("[3]"))), 0,
       "[2,3]");
  want(floe_node_finish(op("Select", 3, ph_t(FLOE_BOOL, "[?]"), ph("[4]"), ph("[1]"))), 0, "[4]");
  want_error(floe_node_finish(op("Select", 3, ph_t(FLOE_BOOL, "[2]"), ph("[3]"), ph("[2]"))),
             "[2], [3], [2]", "Incompatible shapes");
}
END_TEST

/* ---- linear algebra and nn ---------------------------------------------------------- */

START_TEST(matmul) {
  want(floe_matmul(g, NULL, ph("[2,3]"), ph("[3,4]"), 0, 0).node, 0, "[2,4]");
  want(floe_matmul(g, NULL, ph("[3,2]"), ph("[3,4]"), 1, 0).node, 0, "[2,4]");
  want(floe_matmul(g, NULL, ph("[2,3]"), ph("[4,3]"), 0, 1).node, 0, "[2,4]");
  want(floe_matmul(g, NULL, ph("[3,2]"), ph("[4,3]"), 1, 1).node, 0, "[2,4]");
  want(floe_matmul(g, NULL, ph("[?,3]"), ph("[?,?]"), 0, 0).node, 0, "[?,?]");
  want(floe_matmul(g, NULL, ph("?"), ph("[3,4]"), 0, 0).node, 0, "[?,4]");
  want_error(floe_matmul(g, NULL, ph("[2,3]"), ph("[4,5]"), 0, 0).node, "[2,3]",
             "inner dimensions 3 and 4");
  want_error(floe_matmul(g, NULL, ph("[2,3]"), ph("[3,4]"), 1, 0).node, "transpose_a=1",
             "inner dimensions 2 and 3");
  want_error(floe_matmul(g, NULL, ph("[2,2,3]"), ph("[3,4]"), 0, 0).node,
             "must be a matrix (rank 2)", "[2,2,3]");
}
END_TEST

START_TEST(batch_matmul) {
  want(floe_binary(g, "BatchMatMul", NULL, ph("[5,2,3]"), ph("[3,4]")).node, 0, "[5,2,4]");
  want(floe_binary(g, "BatchMatMul", NULL, ph("[5,1,2,3]"), ph("[7,3,4]")).node, 0, "[5,7,2,4]");
  FloeNodeBuilder *b = op("BatchMatMul", 2, ph("[5,3,2]"), ph("[5,4,3]"));
  floe_node_set_attr_bool(b, "adj_x", 1);
  floe_node_set_attr_bool(b, "adj_y", 1);
  want(floe_node_finish(b), 0, "[5,2,4]");
  want(floe_binary(g, "BatchMatMul", NULL, ph("[?,2,3]"), ph("[6,?,4]")).node, 0, "[6,2,4]");
  want(floe_binary(g, "BatchMatMul", NULL, ph("?"), ph("[3,4]")).node, 0, "?");
  want_error(floe_binary(g, "BatchMatMul", NULL, ph("[5,2,3]"), ph("[4,3,4]")).node,
             "batch dimensions", "[5,2,3]");
  want_error(floe_binary(g, "BatchMatMul", NULL, ph("[5,2,3]"), ph("[5,2,4]")).node,
             "inner dimensions 3 and 2", NULL);
  want_error(floe_binary(g, "BatchMatMul", NULL, ph("[3]"), ph("[3,4]")).node, "rank >= 2",
             "[3]");
}
END_TEST

START_TEST(bias_add) {
  want(floe_binary(g, "BiasAdd", NULL, ph("[2,3,4]"), ph("[4]")).node, 0, "[2,3,4]");
  want(floe_binary(g, "BiasAdd", NULL, ph("[2,?]"), ph("[5]")).node, 0, "[2,5]");
  FloeNodeBuilder *b = op("BiasAdd", 2, ph("[2,3,5,5]"), ph("[3]"));
  floe_node_set_attr_string(b, "data_format", "NCHW");
  want(floe_node_finish(b), 0, "[2,3,5,5]");
  want_error(floe_binary(g, "BiasAdd", NULL, ph("[2,3]"), ph("[4]")).node, "channel", "[2,3]");
  want_error(floe_binary(g, "BiasAdd", NULL, ph("[2,3]"), ph("[1,3]")).node, "bias must be 1-D",
             "[1,3]");
  b = op("BiasAdd", 2, ph("[2,3]"), ph("[3]"));
  floe_node_set_attr_string(b, "data_format", "NCWH");
  want_error(floe_node_finish(b), "data_format", "NCWH");
}
END_TEST

static FloeNode *conv(const char *in, const char *filter, const char *padding, int s, int d,
                      const char *fmt) {
  FloeNodeBuilder *b = op("Conv2D", 2, ph(in), ph(filter));
  bool nchw = fmt && strcmp(fmt, "NCHW") == 0;
  if (nchw) {
    ilist(b, "strides", 4, 1, 1, s, s);
    ilist(b, "dilations", 4, 1, 1, d, d);
  } else {
    ilist(b, "strides", 4, 1, s, s, 1);
    ilist(b, "dilations", 4, 1, d, d, 1);
  }
  floe_node_set_attr_string(b, "padding", padding);
  if (fmt) floe_node_set_attr_string(b, "data_format", fmt);
  return floe_node_finish(b);
}

START_TEST(conv2d) {
  want(conv("[1,5,5,3]", "[3,3,3,8]", "VALID", 1, 1, NULL), 0, "[1,3,3,8]");
  want(conv("[1,5,5,3]", "[3,3,3,8]", "SAME", 1, 1, NULL), 0, "[1,5,5,8]");
  want(conv("[1,5,5,3]", "[3,3,3,8]", "SAME", 2, 1, NULL), 0, "[1,3,3,8]");
  want(conv("[1,5,5,3]", "[3,3,3,8]", "VALID", 2, 1, NULL), 0, "[1,2,2,8]");
  want(conv("[1,6,6,3]", "[3,3,3,8]", "VALID", 2, 1, NULL), 0, "[1,2,2,8]");
  want(conv("[2,7,7,3]", "[3,3,3,8]", "VALID", 1, 2, NULL), 0, "[2,3,3,8]");
  want(conv("[1,3,5,5]", "[3,3,3,8]", "SAME", 2, 1, "NCHW"), 0, "[1,8,3,3]");
  want(conv("[1,3,5,5]", "[3,3,3,8]", "VALID", 1, 1, "NCHW"), 0, "[1,8,3,3]");
  want(conv("[?,?,?,3]", "[3,3,3,8]", "VALID", 1, 1, NULL), 0, "[?,?,?,8]");
  /* SAME does not depend on the filter size. */
  want(conv("[1,5,5,3]", "?", "SAME", 1, 1, NULL), 0, "[1,5,5,?]");
  want(conv("[1,5,5,3]", "?", "VALID", 1, 1, NULL), 0, "[1,?,?,?]");
  want(conv("?", "[3,3,3,8]", "VALID", 1, 1, NULL), 0, "[?,?,?,8]");

  want_error(conv("[1,5,5,4]", "[3,3,3,8]", "VALID", 1, 1, NULL), "4 channels", "[3,3,3,8]");
  want_error(conv("[1,2,2,3]", "[3,3,3,8]", "VALID", 1, 1, NULL), "larger than the input",
             "height");
  want_error(conv("[1,5,5,3]", "[3,3,3,8]", "VALID", 1, 3, NULL), "dilation 3", NULL);
  want_error(conv("[5,5,3]", "[3,3,3,8]", "VALID", 1, 1, NULL), "rank 4", "[5,5,3]");
  want_error(conv("[1,5,5,3]", "[3,3,8]", "VALID", 1, 1, NULL), "filter", "[3,3,8]");
  want_error(conv("[1,5,5,3]", "[3,3,3,8]", "FULL", 1, 1, NULL), "attribute 'padding'", "FULL");
  want_error(conv("[1,5,5,3]", "[3,3,3,8]", "VALID", 0, 1, NULL), "attribute 'strides'",
             "positive");
  want_error(conv("[1,5,5,3]", "[3,3,3,8]", "VALID", 1, 1, "NHCW"), "attribute 'data_format'",
             "NHCW");

  FloeNodeBuilder *b = op("Conv2D", 2, ph("[1,5,5,3]"), ph("[3,3,3,8]"));
  ilist(b, "strides", 3, 1, 1, 1);
  floe_node_set_attr_string(b, "padding", "SAME");
  want_error(floe_node_finish(b), "attribute 'strides' must have 4 elements", "[1,1,1]");
  b = op("Conv2D", 2, ph("[1,5,5,3]"), ph("[3,3,3,8]"));
  ilist(b, "strides", 4, 2, 1, 1, 1);
  floe_node_set_attr_string(b, "padding", "SAME");
  want_error(floe_node_finish(b), "attribute 'strides'", "batch and channel");
  b = op("Conv2D", 2, ph("[1,5,5,3]"), ph("[3,3,3,8]"));
  ilist(b, "strides", 4, 1, 1, 1, 1);
  ilist(b, "dilations", 4, 1, -1, 1, 1);
  floe_node_set_attr_string(b, "padding", "SAME");
  want_error(floe_node_finish(b), "attribute 'dilations'", "[1,-1,1,1]");
}
END_TEST

static FloeNode *pool(const char *opname, const char *in, int k, int s, const char *padding,
                      const char *fmt) {
  FloeNodeBuilder *b = op(opname, 1, ph(in));
  if (fmt && strcmp(fmt, "NCHW") == 0) {
    ilist(b, "ksize", 4, 1, 1, k, k);
    ilist(b, "strides", 4, 1, 1, s, s);
    floe_node_set_attr_string(b, "data_format", fmt);
  } else {
    ilist(b, "ksize", 4, 1, k, k, 1);
    ilist(b, "strides", 4, 1, s, s, 1);
  }
  floe_node_set_attr_string(b, "padding", padding);
  return floe_node_finish(b);
}

START_TEST(pooling) {
  want(pool("MaxPool", "[1,4,4,2]", 2, 2, "VALID", NULL), 0, "[1,2,2,2]");
  want(pool("MaxPool", "[1,5,5,2]", 3, 2, "SAME", NULL), 0, "[1,3,3,2]");
  want(pool("MaxPool", "[1,5,5,2]", 3, 2, "VALID", NULL), 0, "[1,2,2,2]");
  want(pool("AvgPool", "[1,2,4,4]", 2, 2, "VALID", "NCHW"), 0, "[1,2,2,2]");
  want(pool("AvgPool", "[?,7,?,3]", 2, 2, "SAME", NULL), 0, "[?,4,?,3]");
  want(pool("AvgPool", "?", 2, 2, "SAME", NULL), 0, "[?,?,?,?]");
  want_error(pool("MaxPool", "[1,1,4,2]", 2, 2, "VALID", NULL), "larger than the input", "height");
  want_error(pool("AvgPool", "[4,4,2]", 2, 2, "VALID", NULL), "rank 4", "[4,4,2]");
  FloeNodeBuilder *b = op("MaxPool", 1, ph("[1,4,4,2]"));
  ilist(b, "ksize", 2, 2, 2);
  ilist(b, "strides", 4, 1, 1, 1, 1);
  floe_node_set_attr_string(b, "padding", "VALID");
  want_error(floe_node_finish(b), "attribute 'ksize' must have 4 elements", "[2,2]");
  b = op("MaxPool", 1, ph("[1,4,4,2]"));
  ilist(b, "ksize", 4, 1, 2, 2, 2);
  ilist(b, "strides", 4, 1, 1, 1, 1);
  floe_node_set_attr_string(b, "padding", "VALID");
  want_error(floe_node_finish(b), "attribute 'ksize'", "batch and channel");
}
END_TEST

/* ---- shapes and data movement ------------------------------------------------------- */

START_TEST(reshape) {
  want(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(2, 3, 2)).node, 0, "[3,2]");
  want(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(1, -1)).node, 0, "[6]");
  want(floe_binary(g, "Reshape", NULL, ph("[2,3,4]"), ci(2, -1, 4)).node, 0, "[6,4]");
  want(floe_binary(g, "Reshape", NULL, ph("[1]"), ci(0)).node, 0, "[]");
  want(floe_binary(g, "Reshape", NULL, ph("[0,3]"), ci(2, 3, 0)).node, 0, "[3,0]");
  want(floe_binary(g, "Reshape", NULL, ph("[?,3]"), ci(1, -1)).node, 0, "[?]");
  want(floe_binary(g, "Reshape", NULL, ph("[?,3]"), ci(2, 2, -1)).node, 0, "[2,?]");
  want(floe_binary(g, "Reshape", NULL, ph("?"), ci(2, 2, 3)).node, 0, "[2,3]");
  want(floe_binary(g, "Reshape", NULL, ph("[6]"), ph_t(FLOE_I32, "[3]")).node, 0, "[?,?,?]");
  want(floe_binary(g, "Reshape", NULL, ph("[6]"), ph_t(FLOE_I64, "?")).node, 0, "?");
  /* The shape of a Shape node is known even when its value is only partly known. */
  FloeOutput shp = floe_unary(g, "Shape", NULL, ph("[?,4]"));
  want(floe_binary(g, "Reshape", NULL, ph("[8]"), shp).node, 0, "[2,4]");
  want(floe_binary(g, "Reshape", NULL, ph("[?]"), shp).node, 0, "[?,4]");

  want_error(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(2, 4, 2)).node,
             "shape [2,3] (6 elements)", "[4,2] (8 elements)");
  want_error(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(2, -1, -1)).node,
             "[-1,-1] may hold -1 only once", NULL);
  want_error(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(2, 4, -1)).node,
             "6 is not a multiple of 4", "[4,-1]");
  want_error(floe_binary(g, "Reshape", NULL, ph("[2,3]"), ci(2, -2, 3)).node, "[-2,3]",
             "sizes must be >= 0");
  want_error(floe_binary(g, "Reshape", NULL, ph("[?,3]"), ci(2, 4, 5)).node,
             "20 is not a multiple of 3", "[?,3]");
  /* A shape that is not a vector. */
  int64_t m[4] = {1, 2, 3, 1};
  want_error(floe_binary(g, "Reshape", NULL, ph("[6]"), cmat64(2, 2, m)).node,
             "Reshape shape must be a 1-D tensor", "[2,2]");
}
END_TEST

START_TEST(transpose) {
  want(floe_binary(g, "Transpose", NULL, ph("[2,3,4]"), ci(3, 2, 0, 1)).node, 0, "[4,2,3]");
  want(floe_binary(g, "Transpose", NULL, ph("[2,?]"), ci(2, 1, 0)).node, 0, "[?,2]");
  want(floe_binary(g, "Transpose", NULL, ph("?"), ci(3, 0, 2, 1)).node, 0, "[?,?,?]");
  want(floe_binary(g, "Transpose", NULL, ph("[2,3,4]"), ph_t(FLOE_I32, "[3]")).node, 0,
       "[?,?,?]");
  want(floe_binary(g, "Transpose", NULL, ph("?"), ph_t(FLOE_I32, "[2]")).node, 0, "[?,?]");
  want_error(floe_binary(g, "Transpose", NULL, ph("[2,3,4]"), ci(3, 0, 0, 1)).node,
             "[0,0,1] is not a permutation", NULL);
  want_error(floe_binary(g, "Transpose", NULL, ph("[2,3,4]"), ci(2, 1, 0)).node,
             "perm [1,0] has 2 elements", "[2,3,4]");
  want_error(floe_binary(g, "Transpose", NULL, ph("[2,3]"), ph_t(FLOE_I32, "[3]")).node,
             "3 elements", "[2,3]");
}
END_TEST

static FloeNode *concat(int n, const char *const *shapes, FloeOutput axis) {
  FloeOutput vals[8];
  for (int i = 0; i < n; i++) vals[i] = ph(shapes[i]);
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", NULL);
  floe_node_add_input_list(b, vals, n);
  floe_node_add_input(b, axis);
  return floe_node_finish(b);
}

START_TEST(concat_op) {
  want(concat(2, (const char *[]){"[2,3]", "[2,5]"}, cscalar(1)), 0, "[2,8]");
  want(concat(3, (const char *[]){"[2,3]", "[2,5]", "[2,1]"}, cscalar(-1)), 0, "[2,9]");
  want(concat(2, (const char *[]){"[2,3]", "[4,3]"}, cscalar(0)), 0, "[6,3]");
  want(concat(2, (const char *[]){"[2,3]", "[?,5]"}, cscalar(1)), 0, "[2,8]");
  want(concat(2, (const char *[]){"[2,3]", "[2,?]"}, cscalar(1)), 0, "[2,?]");
  want(concat(2, (const char *[]){"?", "[2,3]"}, cscalar(0)), 0, "[?,3]");
  want(concat(2, (const char *[]){"?", "?"}, cscalar(0)), 0, "?");
  want(concat(1, (const char *[]){"[4,2]"}, cscalar(0)), 0, "[4,2]");
  want(concat(2, (const char *[]){"[2,3]", "[2,5]"}, ph_t(FLOE_I32, "[]")), 0, "[?,?]");
  want_error(concat(2, (const char *[]){"[2,3]", "[3,3]"}, cscalar(1)), "values[1] [3,3]",
             "dimension 0");
  want_error(concat(2, (const char *[]){"[2,3]", "[2,3,1]"}, cscalar(1)), "different ranks",
             "[2,3,1]");
  want_error(concat(2, (const char *[]){"[2,3]", "[2,3]"}, cscalar(2)), "Concat axis 2 is out of range",
             "[2,3]");
  want_error(concat(2, (const char *[]){"[]", "[]"}, cscalar(0)), "scalars", NULL);
}
END_TEST

static FloeNode *split(const char *in, FloeOutput axis, int num) {
  FloeNodeBuilder *b = op("Split", 2, ph(in), axis);
  floe_node_set_attr_int(b, "num_split", num);
  return floe_node_finish(b);
}

START_TEST(split_op) {
  FloeNode *n = split("[6,4]", cscalar(0), 3);
  ck_assert_ptr_nonnull(n);
  ck_assert_int_eq(floe_node_num_outputs(n), 3);
  for (int i = 0; i < 3; i++) want(n, i, "[2,4]");
  n = split("[6,4]", cscalar(-1), 2);
  want(n, 0, "[6,2]");
  want(n, 1, "[6,2]");
  want(split("[?,4]", cscalar(0), 2), 1, "[?,4]");
  want(split("[6,4]", ph_t(FLOE_I32, "[]"), 2), 1, "[?,?]");
  want(split("?", cscalar(0), 2), 0, "?");
  want_error(split("[5,4]", cscalar(0), 2), "size 5", "not divisible by num_split 2");
  want_error(split("[6,4]", cscalar(2), 2), "Split axis 2 is out of range", "[6,4]");
}
END_TEST

START_TEST(slice) {
  want(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(2, 1, 2), ci(2, 2, -1))), 0, "[2,3]");
  want(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(2, 0, 0), ci(2, 4, 5))), 0, "[4,5]");
  want(floe_node_finish(op("Slice", 3, ph("[4,5]"), ph_t(FLOE_I32, "[2]"), ci(2, 2, 3))), 0,
       "[2,3]");
  want(floe_node_finish(op("Slice", 3, ph("[4,5]"), ph_t(FLOE_I32, "[2]"), ci(2, -1, 3))), 0,
       "[?,3]");
  want(floe_node_finish(op("Slice", 3, ph("[?,5]"), ci(2, 1, 1), ci(2, -1, -1))), 0, "[?,4]");
  want(floe_node_finish(op("Slice", 3, ph("?"), ci(3, 0, 0, 0), ph_t(FLOE_I32, "[3]"))), 0,
       "[?,?,?]");
  want_error(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(2, 3, 0), ci(2, 2, 1))),
             "begin [3,0] + size [2,1] exceeds input [4,5]", NULL);
  want_error(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(1, 0), ci(2, 1, 1))),
             "begin has 1 and size 2 elements", "[4,5]");
  want_error(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(2, 0, 6), ci(2, 1, -1))),
             "begin [0,6] is out of range", "[4,5]");
  want_error(floe_node_finish(op("Slice", 3, ph("[4,5]"), ci(2, 0, 0), ci(2, 1, -3))),
             "size [1,-3]", NULL);
}
END_TEST

typedef struct SSMasks {
  int begin, end, ellipsis, new_axis, shrink;
} SSMasks;

static FloeNode *ss(const char *in, FloeOutput b, FloeOutput e, FloeOutput s, SSMasks m) {
  FloeNodeBuilder *nb = op("StridedSlice", 4, ph(in), b, e, s);
  floe_node_set_attr_int(nb, "begin_mask", m.begin);
  floe_node_set_attr_int(nb, "end_mask", m.end);
  floe_node_set_attr_int(nb, "ellipsis_mask", m.ellipsis);
  floe_node_set_attr_int(nb, "new_axis_mask", m.new_axis);
  floe_node_set_attr_int(nb, "shrink_axis_mask", m.shrink);
  return floe_node_finish(nb);
}

START_TEST(strided_slice) {
  const char *x = "[10,8,6]";
  SSMasks none = {0};
  /* x[1:5] */
  want(ss(x, ci(1, 1), ci(1, 5), ci(1, 1), none), 0, "[4,8,6]");
  /* x[:, :] */
  want(ss(x, ci(2, 0, 0), ci(2, 0, 0), ci(2, 1, 1), (SSMasks){.begin = 3, .end = 3}), 0,
       "[10,8,6]");
  /* x[::2] */
  want(ss(x, ci(1, 0), ci(1, 0), ci(1, 2), (SSMasks){.begin = 1, .end = 1}), 0, "[5,8,6]");
  /* x[::3] on 10: 0,3,6,9 */
  want(ss(x, ci(1, 0), ci(1, 0), ci(1, 3), (SSMasks){.begin = 1, .end = 1}), 0, "[4,8,6]");
  /* x[-1] */
  want(ss(x, ci(1, -1), ci(1, 0), ci(1, 1), (SSMasks){.shrink = 1}), 0, "[8,6]");
  /* x[..., 1] */
  want(ss(x, ci(2, 0, 1), ci(2, 0, 2), ci(2, 1, 1), (SSMasks){.ellipsis = 1, .shrink = 2}), 0,
       "[10,8]");
  /* x[:, newaxis] */
  want(ss(x, ci(2, 0, 0), ci(2, 0, 0), ci(2, 1, 1), (SSMasks){.begin = 1, .end = 1, .new_axis = 2}),
       0, "[10,1,8,6]");
  /* x[..., newaxis] */
  want(ss(x, ci(2, 0, 0), ci(2, 0, 0), ci(2, 1, 1), (SSMasks){.ellipsis = 1, .new_axis = 2}), 0,
       "[10,8,6,1]");
  /* x[::-1] */
  want(ss(x, ci(1, 0), ci(1, 0), ci(1, -1), (SSMasks){.begin = 1, .end = 1}), 0, "[10,8,6]");
  /* x[8:2:-2]: 8, 6, 4 */
  want(ss(x, ci(1, 8), ci(1, 2), ci(1, -2), none), 0, "[3,8,6]");
  /* x[5:100] clamps; x[-3:-1]; x[5:2] is empty */
  want(ss(x, ci(1, 5), ci(1, 100), ci(1, 1), none), 0, "[5,8,6]");
  want(ss(x, ci(1, -3), ci(1, -1), ci(1, 1), none), 0, "[2,8,6]");
  want(ss(x, ci(1, 5), ci(1, 2), ci(1, 1), none), 0, "[0,8,6]");
  /* x[1:3, 2, ::2] */
  want(ss(x, ci(3, 1, 2, 0), ci(3, 3, 3, 0), ci(3, 1, 1, 2), (SSMasks){.begin = 4, .end = 4, .shrink = 2}),
       0, "[2,3]");
  /* Unknown dims and non-constant begin keep what the masks say. */
  want(ss("[?,8]", ci(1, 1), ci(1, 3), ci(1, 1), none), 0, "[?,8]");
  want(ss(x, ph_t(FLOE_I32, "[1]"), ci(1, 3), ci(1, 1), none), 0, "[?,8,6]");
  want(ss(x, ph_t(FLOE_I32, "[1]"), ci(1, 3), ci(1, 1), (SSMasks){.shrink = 1}), 0, "[8,6]");
  want(ss(x, ph_t(FLOE_I32, "[2]"), ph_t(FLOE_I32, "[2]"), ci(2, 1, 1), (SSMasks){.begin = 3, .end = 3}),
       0, "[10,8,6]");
  want(ss(x, ph_t(FLOE_I32, "?"), ci(1, 3), ci(1, 1), none), 0, "[?,8,6]");
  want(ss(x, ph_t(FLOE_I32, "?"), ph_t(FLOE_I32, "?"), ph_t(FLOE_I32, "?"), none), 0, "?");
  want(ss("?", ci(1, 0), ci(1, 1), ci(1, 1), none), 0, "?");

  want_error(ss(x, ci(1, 0), ci(1, 1), ci(1, 0), none), "strides[0] must be non-zero", NULL);
  want_error(ss(x, ci(1, 10), ci(1, 11), ci(1, 1), (SSMasks){.shrink = 1}), "index 10",
             "out of bounds for dimension 0 of size 10");
  want_error(ss(x, ci(2, 0, 0), ci(2, 0, 0), ci(2, 1, 1), (SSMasks){.ellipsis = 3}),
             "more than one ellipsis", NULL);
  want_error(ss(x, ci(4, 0, 0, 0, 0), ci(4, 1, 1, 1, 1), ci(4, 1, 1, 1, 1), none),
             "out of range", "only 3 dimensions");
  want_error(ss(x, ci(2, 0, 0), ci(1, 1), ci(2, 1, 1), none), "same length", NULL);
}
END_TEST

START_TEST(gather) {
  want(floe_binary(g, "Gather", NULL, ph("[5,4]"), ph_t(FLOE_I32, "[3]")).node, 0, "[3,4]");
  FloeNodeBuilder *b = op("Gather", 2, ph("[5,4]"), ph_t(FLOE_I64, "[2,3]"));
  floe_node_set_attr_int(b, "axis", 1);
  want(floe_node_finish(b), 0, "[5,2,3]");
  b = op("Gather", 2, ph("[5,4,7]"), ph_t(FLOE_I32, "[]"));
  floe_node_set_attr_int(b, "axis", -2);
  want(floe_node_finish(b), 0, "[5,7]");
  want(floe_binary(g, "Gather", NULL, ph("[5,4]"), ph_t(FLOE_I32, "?")).node, 0, "?");
  b = op("Gather", 2, ph("[5,4]"), ph_t(FLOE_I32, "[3]"));
  floe_node_set_attr_int(b, "axis", 2);
  want_error(floe_node_finish(b), "Gather axis 2 is out of range", "[5,4]");
  want_error(floe_binary(g, "Gather", NULL, ph("[]"), ph_t(FLOE_I32, "[3]")).node, "scalar", NULL);
}
END_TEST

static FloeNode *pad(const char *in, FloeOutput paddings, const char *mode) {
  FloeNodeBuilder *b = op("Pad", 2, ph(in), paddings);
  if (mode) floe_node_set_attr_string(b, "mode", mode);
  return floe_node_finish(b);
}

START_TEST(pad_op) {
  want(pad("[2,3]", cmat64(2, 2, (int64_t[]){1, 1, 2, 0}), NULL), 0, "[4,5]");
  want(pad("[?,3]", cmat64(2, 2, (int64_t[]){1, 1, 2, 0}), NULL), 0, "[?,5]");
  want(pad("?", cmat64(2, 2, (int64_t[]){1, 1, 2, 0}), NULL), 0, "[?,?]");
  want(pad("[3,3]", cmat64(2, 2, (int64_t[]){2, 2, 1, 0}), "REFLECT"), 0, "[7,4]");
  want(pad("[2,3]", ph_t(FLOE_I32, "[2,2]"), NULL), 0, "[?,?]");
  want(pad("?", ph_t(FLOE_I32, "[3,2]"), NULL), 0, "[?,?,?]");
  want_error(pad("[2,3]", cmat64(2, 2, (int64_t[]){2, 0, 0, 0}), "REFLECT"), "REFLECT paddings",
             "[2,3]");
  want_error(pad("[2,3]", cmat64(2, 2, (int64_t[]){-1, 0, 0, 0}), NULL), "[-1,0,0,0]",
             "non-negative");
  want_error(pad("[2,3]", cmat64(3, 2, (int64_t[]){0, 0, 0, 0, 0, 0}), NULL), "[rank, 2]",
             "[3,2]");
  want_error(pad("[2,3]", cmat64(2, 2, (int64_t[]){0, 0, 0, 0}), "SYMMETRIC"), "attribute 'mode'",
             "SYMMETRIC");
}
END_TEST

START_TEST(tile) {
  want(floe_binary(g, "Tile", NULL, ph("[2,3]"), ci(2, 2, 1)).node, 0, "[4,3]");
  want(floe_binary(g, "Tile", NULL, ph("[?,3]"), ci(2, 0, 2)).node, 0, "[0,6]");
  want(floe_binary(g, "Tile", NULL, ph("[?,3]"), ci(2, 2, 2)).node, 0, "[?,6]");
  want(floe_binary(g, "Tile", NULL, ph("?"), ci(2, 2, 2)).node, 0, "[?,?]");
  want(floe_binary(g, "Tile", NULL, ph("[2,3]"), ph_t(FLOE_I32, "[2]")).node, 0, "[?,?]");
  want_error(floe_binary(g, "Tile", NULL, ph("[2,3]"), ci(3, 1, 1, 1)).node, "3 elements",
             "[2,3]");
  want_error(floe_binary(g, "Tile", NULL, ph("[2,3]"), ci(2, 1, -1)).node, "[1,-1]",
             "non-negative");
}
END_TEST

static FloeNode *squeeze(const char *in, int n, const int64_t *dims) {
  FloeNodeBuilder *b = op("Squeeze", 1, ph(in));
  if (n >= 0) floe_node_set_attr_int_list(b, "squeeze_dims", dims, n);
  return floe_node_finish(b);
}

START_TEST(squeeze_op) {
  want(squeeze("[1,3,1]", -1, NULL), 0, "[3]");
  want(squeeze("[1,3,1]", 1, (int64_t[]){0}), 0, "[3,1]");
  want(squeeze("[1,3,1]", 1, (int64_t[]){-1}), 0, "[1,3]");
  want(squeeze("[1,1]", -1, NULL), 0, "[]");
  want(squeeze("[?,3]", -1, NULL), 0, "?");
  want(squeeze("[?,3]", 1, (int64_t[]){0}), 0, "[3]");
  want(squeeze("?", 1, (int64_t[]){0}), 0, "?");
  want_error(squeeze("[1,3,1]", 1, (int64_t[]){1}), "dimension 1 of [1,3,1]", "size is 3");
  want_error(squeeze("[1,3,1]", 1, (int64_t[]){3}), "Squeeze dimension 3 is out of range", NULL);
}
END_TEST

static FloeNode *expand(const char *in, int axis) {
  FloeNodeBuilder *b = op("ExpandDims", 1, ph(in));
  floe_node_set_attr_int(b, "axis", axis);
  return floe_node_finish(b);
}

START_TEST(expand_dims) {
  want(expand("[2,3]", 0), 0, "[1,2,3]");
  want(expand("[2,3]", 1), 0, "[2,1,3]");
  want(expand("[2,3]", 2), 0, "[2,3,1]");
  want(expand("[2,3]", -1), 0, "[2,3,1]");
  want(expand("[2,3]", -3), 0, "[1,2,3]");
  want(expand("[]", 0), 0, "[1]");
  want(expand("?", 0), 0, "?");
  want_error(expand("[2,3]", 3), "ExpandDims axis 3 is out of range", "[2,3]");
  want_error(expand("[2,3]", -4), "axis -4", NULL);
  want_error(expand("[1,1,1,1,1,1,1,1]", 0), "exceed 8 dimensions", NULL);
}
END_TEST

START_TEST(shape_size_rank) {
  FloeNode *s = floe_unary(g, "Shape", NULL, ph("[2,?,3]")).node;
  want(s, 0, "[3]");
  ck_assert_int_eq(floe_node_output_dtype(s, 0), FLOE_I32);
  want(floe_unary(g, "Shape", NULL, ph("?")).node, 0, "[?]");
  want(floe_unary(g, "Size", NULL, ph("[2,3]")).node, 0, "[]");
  FloeNode *r = floe_unary(g, "Rank", NULL, ph("?")).node;
  want(r, 0, "[]");
  ck_assert_int_eq(floe_node_output_dtype(r, 0), FLOE_I32);
}
END_TEST

START_TEST(fill) {
  want(floe_binary(g, "Fill", NULL, ci(2, 2, 3), ph("[]")).node, 0, "[2,3]");
  want(floe_binary(g, "Fill", NULL, ci(0), ph("[]")).node, 0, "[]");
  want(floe_binary(g, "Fill", NULL, ph_t(FLOE_I32, "[2]"), ph("[]")).node, 0, "[?,?]");
  want(floe_binary(g, "Fill", NULL, floe_unary(g, "Shape", NULL, ph("[?,5]")), ph("[]")).node, 0,
       "[?,5]");
  want(floe_binary(g, "Fill", NULL, ph_t(FLOE_I32, "?"), ph("?")).node, 0, "?");
  want_error(floe_binary(g, "Fill", NULL, ci(2, 2, 3), ph("[2]")).node, "value must be a scalar",
             "[2]");
  want_error(floe_binary(g, "Fill", NULL, ci(2, 2, -3), ph("[]")).node, "Fill dims [2,-3]",
             "sizes >= 0");
  want_error(floe_binary(g, "Fill", NULL, ci(9, 1, 1, 1, 1, 1, 1, 1, 1, 1), ph("[]")).node,
             "9 elements", "at most 8");
}
END_TEST

/* ---- reductions --------------------------------------------------------------------- */

static FloeNode *reduce(const char *opname, const char *in, FloeOutput axis, int keep) {
  FloeNodeBuilder *b = op(opname, 2, ph(in), axis);
  floe_node_set_attr_bool(b, "keep_dims", keep);
  return floe_node_finish(b);
}

START_TEST(reductions) {
  static const char *const ops[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    want(reduce(ops[i], "[2,3,4]", ci(1, 1), 0), 0, "[2,4]");
    want(reduce(ops[i], "[2,3,4]", ci(1, 1), 1), 0, "[2,1,4]");
  }
  want(reduce("Sum", "[2,3,4]", cscalar(1), 0), 0, "[2,4]");
  want(reduce("Sum", "[2,3,4]", ci(2, -1, 0), 0), 0, "[3]");
  want(reduce("Sum", "[2,3,4]", ci(3, 0, 1, 2), 0), 0, "[]");
  want(reduce("Sum", "[2,3,4]", ci(3, 0, 1, 2), 1), 0, "[1,1,1]");
  want(reduce("Sum", "[2,3,4]", ci(0), 0), 0, "[2,3,4]");
  want(reduce("Mean", "[?,3]", ci(1, 0), 0), 0, "[3]");
  want(reduce("Mean", "?", ci(1, 0), 0), 0, "?");
  want(reduce("Max", "[2,3,4]", ph_t(FLOE_I32, "[]"), 0), 0, "[?,?]");
  want(reduce("Max", "[2,3,4]", ph_t(FLOE_I32, "[1]"), 1), 0, "[?,?,?]");
  want(reduce("Max", "[2,3,4]", ph_t(FLOE_I32, "[1]"), 0), 0, "?");
  want_error(reduce("Sum", "[2,3]", ci(1, 2), 0), "Sum axis 2 is out of range", "[2,3]");
  want_error(reduce("Prod", "[2,3]", ci(1, -3), 0), "Prod axis -3", NULL);
  want_error(reduce("Sum", "[2,3]", ph_t(FLOE_I32, "[1,1]"), 0), "scalar or 1-D", "[1,1]");
}
END_TEST

START_TEST(arg_reductions) {
  FloeNode *n = floe_binary(g, "ArgMax", NULL, ph("[2,3,4]"), cscalar(1)).node;
  want(n, 0, "[2,4]");
  ck_assert_int_eq(floe_node_output_dtype(n, 0), FLOE_I64);
  want(floe_binary(g, "ArgMin", NULL, ph("[2,3,4]"), cscalar(-1)).node, 0, "[2,3]");
  want(floe_binary(g, "ArgMin", NULL, ph("[5]"), cscalar(0)).node, 0, "[]");
  want(floe_binary(g, "ArgMax", NULL, ph("[2,3,4]"), ph_t(FLOE_I32, "[]")).node, 0, "[?,?]");
  want(floe_binary(g, "ArgMax", NULL, ph("?"), cscalar(0)).node, 0, "?");
  want_error(floe_binary(g, "ArgMax", NULL, ph("[2,3]"), cscalar(5)).node,
             "ArgMax dimension 5 is out of range", "[2,3]");
  want_error(floe_binary(g, "ArgMin", NULL, ph("[]"), cscalar(0)).node, "rank >= 1", NULL);
  want_error(floe_binary(g, "ArgMax", NULL, ph("[2,3]"), ci(1, 0)).node,
             "dimension must be a scalar", "[1]");
}
END_TEST

/* ---- one-hot, losses, random -------------------------------------------------------- */

static FloeNode *one_hot(const char *indices, FloeOutput depth, int axis, const char *on) {
  FloeNodeBuilder *b = op("OneHot", 4, ph_t(FLOE_I64, indices), depth, ph(on), ph("[]"));
  floe_node_set_attr_int(b, "axis", axis);
  return floe_node_finish(b);
}

START_TEST(one_hot_op) {
  want(one_hot("[4]", cscalar(3), -1, "[]"), 0, "[4,3]");
  want(one_hot("[4]", cscalar(3), 0, "[]"), 0, "[3,4]");
  want(one_hot("[2,3]", cscalar(5), 1, "[]"), 0, "[2,5,3]");
  want(one_hot("[2,3]", cscalar(5), 2, "[]"), 0, "[2,3,5]");
  want(one_hot("[4]", ph_t(FLOE_I32, "[]"), -1, "[]"), 0, "[4,?]");
  want(one_hot("?", cscalar(3), -1, "[]"), 0, "?");
  want_error(one_hot("[4]", cscalar(-1), -1, "[]"), "depth must be >= 0", "-1");
  want_error(one_hot("[4]", cscalar(3), 2, "[]"), "OneHot axis 2 is out of range", "[4]");
  want_error(one_hot("[4]", cscalar(3), -1, "[2]"), "on_value must be a scalar", "[2]");
}
END_TEST

START_TEST(cross_entropy) {
  FloeNode *n = floe_binary(g, "SoftmaxCrossEntropyWithLogits", NULL, ph("[8,10]"), ph("[8,10]")).node;
  want(n, 0, "[8]");
  want(n, 1, "[8,10]");
  n = floe_binary(g, "SoftmaxCrossEntropyWithLogits", NULL, ph("[?,10]"), ph("[8,?]")).node;
  want(n, 0, "[8]");
  want(n, 1, "[8,10]");
  n = floe_binary(g, "SoftmaxCrossEntropyWithLogits", NULL, ph("?"), ph("?")).node;
  want(n, 0, "[?]");
  want(n, 1, "[?,?]");
  want_error(floe_binary(g, "SoftmaxCrossEntropyWithLogits", NULL, ph("[8,10]"), ph("[8,9]")).node,
             "[8,10] and labels [8,9]", NULL);
  want_error(floe_binary(g, "SoftmaxCrossEntropyWithLogits", NULL, ph("[8]"), ph("[8]")).node,
             "[batch, classes]", "[8]");

  n = floe_binary(g, "SparseSoftmaxCrossEntropyWithLogits", NULL, ph("[8,10]"),
                  ph_t(FLOE_I64, "[8]")).node;
  want(n, 0, "[8]");
  want(n, 1, "[8,10]");
  n = floe_binary(g, "SparseSoftmaxCrossEntropyWithLogits", NULL, ph("[?,10]"),
                  ph_t(FLOE_I32, "[4]")).node;
  want(n, 0, "[4]");
  want(n, 1, "[4,10]");
  want_error(floe_binary(g, "SparseSoftmaxCrossEntropyWithLogits", NULL, ph("[8,10]"),
                         ph_t(FLOE_I64, "[7]")).node,
             "[8,10] and labels [7]", "batch size");
  want_error(floe_binary(g, "SparseSoftmaxCrossEntropyWithLogits", NULL, ph("[8,10]"),
                         ph_t(FLOE_I64, "[8,1]")).node,
             "labels must be [batch]", "[8,1]");
}
END_TEST

START_TEST(random_ops) {
  static const char *const ops[] = {"RandomUniform", "RandomNormal", "TruncatedNormal"};
  for (size_t i = 0; i < 3; i++) {
    FloeNode *n = floe_unary(g, ops[i], NULL, ci(2, 2, 3)).node;
    want(n, 0, "[2,3]");
    ck_assert_int_eq(floe_node_output_dtype(n, 0), FLOE_F32);
  }
  FloeNodeBuilder *b = op("RandomNormal", 1, ci(0));
  floe_node_set_attr_type(b, "dtype", FLOE_F64);
  FloeNode *n = floe_node_finish(b);
  want(n, 0, "[]");
  ck_assert_int_eq(floe_node_output_dtype(n, 0), FLOE_F64);
  want(floe_unary(g, "RandomUniform", NULL, ph_t(FLOE_I64, "[3]")).node, 0, "[?,?,?]");
  want(floe_unary(g, "RandomUniform", NULL, floe_unary(g, "Shape", NULL, ph("[?,7]"))).node, 0,
       "[?,7]");
  want_error(floe_unary(g, "RandomUniform", NULL, ci(2, 2, -1)).node,
             "RandomUniform shape [2,-1]", "sizes >= 0");
  want_error(floe_unary(g, "TruncatedNormal", NULL, ph_t(FLOE_I32, "[2,2]")).node,
             "must be a 1-D tensor", "[2,2]");
}
END_TEST

/* Every standard op with a shape function is exercised above; this guards the list. */
START_TEST(every_op_is_defined) {
  static const char *const covered[] = {
      "Const", "Placeholder", "Identity", "NoOp", "Add", "Sub", "Mul", "Div", "Pow", "Maximum",
      "Minimum", "Neg", "Abs", "Square", "Exp", "Log", "Sqrt", "Rsqrt", "Relu", "Relu6",
      "LeakyRelu", "Elu", "Gelu", "Sigmoid", "Tanh", "Softplus", "Softmax", "LogSoftmax",
      "MatMul", "BatchMatMul", "BiasAdd", "Conv2D", "MaxPool", "AvgPool", "Reshape", "Transpose",
      "Concat", "Split", "Slice", "StridedSlice", "Gather", "Pad", "Tile", "Squeeze",
      "ExpandDims", "Shape", "Size", "Rank", "Fill", "ZerosLike", "OnesLike", "Cast", "Sum",
      "Mean", "Max", "Min", "Prod", "ArgMax", "ArgMin", "Equal", "NotEqual", "Less", "LessEqual",
      "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "Select", "OneHot",
      "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", "RandomUniform",
      "RandomNormal", "TruncatedNormal"};
  int n = (int)(sizeof covered / sizeof covered[0]);
  for (int i = 0; i < n; i++) ck_assert_msg(floe_op_exists(covered[i]), "%s", covered[i]);
  /* No standard op is missing from the list (plugins may add more after these). */
  for (int i = 0; i < n; i++) ck_assert_str_eq(floe_op_name(i), covered[i]);
}
END_TEST

static Suite *shapes_suite(void) {
  Suite *s = suite_create("shapes");
  struct {
    const char *name;
    const TTest *tests[12];
  } groups[] = {
      {"elementwise", {sources, unary_keep_shape, softmax_axis, broadcasting, select_op}},
      {"nn", {matmul, batch_matmul, bias_add, conv2d, pooling}},
      {"movement", {reshape, transpose, concat_op, split_op, slice, strided_slice, gather, pad_op,
                    tile, squeeze_op, expand_dims}},
      {"values", {shape_size_rank, fill, reductions, arg_reductions, one_hot_op, cross_entropy,
                  random_ops, every_op_is_defined}},
  };
  for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++) {
    TCase *tc = tcase_create(groups[k].name);
    tcase_add_checked_fixture(tc, setup, teardown);
    for (int i = 0; i < 12 && groups[k].tests[i]; i++) tcase_add_test(tc, groups[k].tests[i]);
    suite_add_tcase(s, tc);
  }
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(shapes_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
