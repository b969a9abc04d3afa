/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_math_signal.c - the ONNX math family's (ops_math_signal.def) import and run paths
 * that ONNX's own test cases do not reach: bad attributes and shapes must fail with an error
 * naming the node and what is wrong (never a crash), run-time errors must name the node, and
 * a few results with values worked out by hand (remainder signs, shifts past the width,
 * window endpoints).
 *
 * Models are written here with a small protobuf encoder (one node between graph inputs and
 * outputs), so each case says exactly what the file holds. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>
#include <floe/floe_onnx.h>

/* ------------------------------------------------------------------------------------ */
/* A protobuf writer: varints and length-delimited fields into a growing buffer. */

typedef struct Pb {
  uint8_t *d;
  size_t n, cap;
} Pb;

static void pb_byte(Pb *b, uint8_t v) {
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 256;
    b->d = realloc(b->d, b->cap);
    ck_assert_ptr_nonnull(b->d);
  }
  b->d[b->n++] = v;
}
static void pb_varint(Pb *b, uint64_t v) {
  for (; v >= 0x80; v >>= 7) pb_byte(b, (uint8_t)(v | 0x80));
  pb_byte(b, (uint8_t)v);
}
static void pb_int(Pb *b, int field, int64_t v) {
  pb_varint(b, (uint64_t)field << 3);
  pb_varint(b, (uint64_t)v);
}
static void pb_bytes(Pb *b, int field, const void *p, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2);
  pb_varint(b, n);
  for (size_t i = 0; i < n; i++) pb_byte(b, ((const uint8_t *)p)[i]);
}
static void pb_str(Pb *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }
static void pb_msg(Pb *b, int field, Pb *sub) { /* appends and frees sub */
  pb_bytes(b, field, sub->d, sub->n);
  free(sub->d);
  *sub = (Pb){0};
}

/* ONNX element types. */
enum { T_FLOAT = 1, T_UINT8 = 2, T_INT32 = 6, T_INT64 = 7, T_UINT16 = 4 };

/* A graph input or output: name, element type and dims (rank -1: no shape; dim -1: a
 * symbolic "n"). */
typedef struct Val {
  const char *name;
  int type;
  int rank;
  int64_t dims[4];
} Val;

/* An attribute: int (s NULL) or string. */
typedef struct Attr {
  const char *name;
  int64_t i;
  const char *s;
} Attr;

static void value_info(Pb *g, int field, const Val *v) {
  Pb vi = {0}, tp = {0}, tt = {0}, sh = {0};
  if (v->rank >= 0) {
    for (int i = 0; i < v->rank; i++) {
      Pb dim = {0};
      if (v->dims[i] >= 0)
        pb_int(&dim, 1, v->dims[i]);
      else
        pb_str(&dim, 2, "n");
      pb_msg(&sh, 1, &dim);
    }
  }
  pb_int(&tt, 1, v->type);
  if (v->rank >= 0) {
    if (v->rank == 0) pb_bytes(&tt, 2, "", 0); /* a scalar: an empty shape */
    else pb_msg(&tt, 2, &sh);
  }
  pb_msg(&tp, 1, &tt);
  pb_str(&vi, 1, v->name);
  pb_msg(&vi, 2, &tp);
  pb_msg(g, field, &vi);
}

/* A model of one node `op` (named "node"), its inputs the graph's inputs (an empty name
 * leaves an optional input out) and its outputs the graph's outputs. */
static Pb model(int opset, const char *op, const Val *ins, int nin, const Val *outs, int nout,
                const Attr *attrs, int nattr) {
  Pb node = {0}, g = {0}, m = {0}, os = {0};
  for (int i = 0; i < nin; i++) pb_str(&node, 1, ins[i].name);
  for (int i = 0; i < nout; i++) pb_str(&node, 2, outs[i].name);
  pb_str(&node, 3, "node");
  pb_str(&node, 4, op);
  for (int i = 0; i < nattr; i++) {
    Pb a = {0};
    pb_str(&a, 1, attrs[i].name);
    if (attrs[i].s) {
      pb_str(&a, 4, attrs[i].s);
      pb_int(&a, 20, 3); /* STRING */
    } else {
      pb_int(&a, 3, attrs[i].i);
      pb_int(&a, 20, 2); /* INT */
    }
    pb_msg(&node, 5, &a);
  }
  pb_msg(&g, 1, &node);
  pb_str(&g, 2, "test");
  for (int i = 0; i < nin; i++)
    if (*ins[i].name) value_info(&g, 11, &ins[i]);
  for (int i = 0; i < nout; i++) value_info(&g, 12, &outs[i]);
  pb_int(&m, 1, 8);
  pb_msg(&m, 7, &g);
  pb_str(&os, 1, "");
  pb_int(&os, 2, opset);
  pb_msg(&m, 8, &os);
  return m;
}

/* Imports; on failure *code / msg (copied into buf) say why. */
static FloeOnnxModel *import(Pb *m, floe_code *code, char *buf, size_t cap) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *om = floe_onnx_import(m->d, m->n, "test model", NULL, st);
  *code = floe_status_code(st);
  snprintf(buf, cap, "%s", floe_status_message(st) ? floe_status_message(st) : "");
  floe_status_free(st);
  free(m->d);
  *m = (Pb){0};
  return om;
}

/* Import must fail with `code` and a message naming the node and holding `what`. */
static void expect_import_error(Pb m, floe_code code, const char *what) {
  char msg[1024];
  floe_code got;
  FloeOnnxModel *om = import(&m, &got, msg, sizeof msg);
  ck_assert_msg(om == NULL, "import succeeded; expected an error about '%s'", what);
  ck_assert_msg(got == code, "code %d, expected %d: %s", (int)got, (int)code, msg);
  ck_assert_msg(strstr(msg, "node 'node'") != NULL, "message does not name the node: %s", msg);
  ck_assert_msg(strstr(msg, what) != NULL, "message lacks '%s': %s", what, msg);
}

/* Runs an imported model on feeds (in graph input order) and fetches output 0. Returns the
 * run's code; *out (caller releases) on success, msg on failure. */
static floe_code run(FloeOnnxModel *om, FloeTensor **feeds, int nfeed, FloeTensor **out,
                     char *msg, size_t cap) {
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *s = floe_session_new(floe_onnx_model_graph(om), &so, st);
  ck_assert_msg(s != NULL, "session: %s", floe_status_message(st));
  FloeFeed f[8];
  for (int i = 0; i < nfeed; i++) f[i] = (FloeFeed){floe_onnx_model_input_node(om, i), feeds[i]};
  const char *fetch = floe_onnx_model_output_fetch(om, 0);
  floe_code rc = floe_session_run(s, f, nfeed, &fetch, 1, NULL, 0, out, st);
  snprintf(msg, cap, "%s", rc == FLOE_OK ? "" : floe_status_message(st));
  floe_session_free(s);
  floe_status_free(st);
  return rc;
}

static FloeTensor *vec_i32(const int32_t *v, int64_t n) {
  return floe_tensor_from_data(FLOE_I32, 1, &n, v, (size_t)n * sizeof *v, NULL);
}
static FloeTensor *scalar_i32(int32_t v) {
  return floe_tensor_from_data(FLOE_I32, 0, NULL, &v, sizeof v, NULL);
}
static FloeTensor *scalar_i64(int64_t v) {
  return floe_tensor_from_data(FLOE_I64, 0, NULL, &v, sizeof v, NULL);
}
static FloeTensor *scalar_f32(float v) {
  return floe_tensor_from_data(FLOE_F32, 0, NULL, &v, sizeof v, NULL);
}

/* ------------------------------------------------------------------------------------ */
/* Import errors. */

static const Val X4 = {"x", T_INT32, 1, {4}}, Y4 = {"y", T_INT32, 1, {4}}, Z4 = {"z", T_INT32, 1, {4}};

START_TEST(test_mod_bad_fmod) {
  Val in[2] = {X4, Y4};
  Attr a = {"fmod", 2, NULL};
  expect_import_error(model(13, "Mod", in, 2, &Z4, 1, &a, 1), FLOE_INVALID_ARGUMENT,
                      "fmod must be 0 or 1, got 2");
}
END_TEST

START_TEST(test_bitshift_bad_direction) {
  Val in[2] = {X4, Y4};
  Attr a = {"direction", 0, "UP"};
  expect_import_error(model(11, "BitShift", in, 2, &Z4, 1, &a, 1), FLOE_INVALID_ARGUMENT,
                      "direction must be LEFT or RIGHT, got UP");
  expect_import_error(model(11, "BitShift", in, 2, &Z4, 1, NULL, 0), FLOE_INVALID_ARGUMENT,
                      "direction must be LEFT or RIGHT, got none");
}
END_TEST

START_TEST(test_dft_bad_axis_and_shape) {
  Val x = {"x", T_FLOAT, 3, {1, 10, 1}}, y = {"y", T_FLOAT, 3, {1, 10, 2}};
  Attr a = {"axis", 2, NULL};
  expect_import_error(model(17, "DFT", &x, 1, &y, 1, &a, 1), FLOE_INVALID_ARGUMENT,
                      "axis 2 is out of range for an input of rank 3");
  Val x3 = {"x", T_FLOAT, 3, {1, 10, 3}};
  expect_import_error(model(17, "DFT", &x3, 1, &y, 1, NULL, 0), FLOE_INVALID_ARGUMENT,
                      "DFT input must be [..., 1] (real) or [..., 2] (complex), got [1,10,3]");
}
END_TEST

START_TEST(test_det_not_square) {
  Val x = {"x", T_FLOAT, 3, {4, 2, 3}}, y = {"y", T_FLOAT, 1, {4}};
  expect_import_error(model(11, "Det", &x, 1, &y, 1, NULL, 0), FLOE_INVALID_ARGUMENT,
                      "MatrixDeterminant needs square matrices, got [4,2,3]");
}
END_TEST

START_TEST(test_window_bad_dtype) {
  Val size = {"size", T_INT32, 0, {0}}, y = {"y", T_UINT16, 1, {-1}};
  Attr a = {"output_datatype", T_UINT16, NULL};
  expect_import_error(model(17, "HannWindow", &size, 1, &y, 1, &a, 1), FLOE_UNIMPLEMENTED,
                      "output_datatype UINT16");
}
END_TEST

START_TEST(test_mvn_bad_axes) {
  Val x = {"x", T_FLOAT, 4, {2, 3, 4, 5}}, y = {"y", T_FLOAT, 4, {2, 3, 4, 5}};
  Pb m = model(13, "MeanVarianceNormalization", &x, 1, &y, 1, NULL, 0);
  /* The default axes import; a wrong one does not. */
  char msg[1024];
  floe_code code;
  FloeOnnxModel *om = import(&m, &code, msg, sizeof msg);
  ck_assert_msg(om != NULL, "%s", msg);
  floe_onnx_model_free(om);
  /* axes = [5]: an INTS attribute, written by hand. */
  Pb node = {0}, a = {0}, g = {0}, mm = {0}, os = {0};
  pb_str(&node, 1, "x");
  pb_str(&node, 2, "y");
  pb_str(&node, 3, "node");
  pb_str(&node, 4, "MeanVarianceNormalization");
  pb_str(&a, 1, "axes");
  pb_int(&a, 8, 5);
  pb_int(&a, 20, 7); /* INTS */
  pb_msg(&node, 5, &a);
  pb_msg(&g, 1, &node);
  value_info(&g, 11, &x);
  value_info(&g, 12, &y);
  pb_int(&mm, 1, 8);
  pb_msg(&mm, 7, &g);
  pb_str(&os, 1, "");
  pb_int(&os, 2, 13);
  pb_msg(&mm, 8, &os);
  expect_import_error(mm, FLOE_INVALID_ARGUMENT, "axes");
}
END_TEST

START_TEST(test_stft_frame_longer_than_signal) {
  Val in[4] = {{"signal", T_FLOAT, 3, {1, 8, 1}}, {"step", T_INT64, 0, {0}}, {"", 0, -1, {0}},
               {"len", T_INT64, 0, {0}}};
  Val y = {"y", T_FLOAT, 4, {1, -1, -1, 2}};
  /* Known at import: a constant frame length is checked by the shape function... (here it is a
   * graph input, so the kernel checks it at run time). */
  Pb m = model(17, "STFT", in, 4, &y, 1, NULL, 0);
  char msg[1024];
  floe_code code;
  FloeOnnxModel *om = import(&m, &code, msg, sizeof msg);
  ck_assert_msg(om != NULL, "%s", msg);
  int64_t dims[3] = {1, 8, 1};
  float sig[8] = {0};
  FloeTensor *feeds[3] = {floe_tensor_from_data(FLOE_F32, 3, dims, sig, sizeof sig, NULL),
                          scalar_i64(2), scalar_i64(16)};
  FloeTensor *out = NULL;
  floe_code rc = run(om, feeds, 3, &out, msg, sizeof msg);
  ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(msg, "frame_length 16 is longer than the signal [1,8,1]"), "%s", msg);
  ck_assert_msg(strstr(msg, "node/"), "message does not name the node: %s", msg);
  for (int i = 0; i < 3; i++) floe_tensor_release(feeds[i]);
  floe_onnx_model_free(om);
}
END_TEST

START_TEST(test_mel_edges_past_nyquist) {
  Val in[5] = {{"bins", T_INT32, 0, {0}}, {"len", T_INT32, 0, {0}}, {"rate", T_INT32, 0, {0}},
               {"lo", T_FLOAT, 0, {0}}, {"hi", T_FLOAT, 0, {0}}};
  Val y = {"y", T_FLOAT, 2, {-1, -1}};
  Pb m = model(17, "MelWeightMatrix", in, 5, &y, 1, NULL, 0);
  char msg[1024];
  floe_code code;
  FloeOnnxModel *om = import(&m, &code, msg, sizeof msg);
  ck_assert_msg(om != NULL, "%s", msg);
  FloeTensor *feeds[5] = {scalar_i32(8), scalar_i32(16), scalar_i32(8000), scalar_f32(0),
                          scalar_f32(12000)};
  FloeTensor *out = NULL;
  floe_code rc = run(om, feeds, 5, &out, msg, sizeof msg);
  ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(msg, "outside [0, 9)") && strstr(msg, "upper_edge_hertz 12000"), "%s", msg);
  for (int i = 0; i < 5; i++) floe_tensor_release(feeds[i]);
  floe_onnx_model_free(om);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Results worked out by hand. */

/* Runs Mod(x, y) on int32 [4] vectors with attribute fmod; returns the run's code. */
static floe_code run_mod(int fmod, const int32_t *x, const int32_t *y, int32_t *z, char *msg,
                         size_t cap) {
  Val in[2] = {X4, Y4};
  Attr a = {"fmod", fmod, NULL};
  Pb m = model(13, "Mod", in, 2, &Z4, 1, &a, 1);
  floe_code code;
  FloeOnnxModel *om = import(&m, &code, msg, cap);
  ck_assert_msg(om != NULL, "%s", msg);
  FloeTensor *feeds[2] = {vec_i32(x, 4), vec_i32(y, 4)}, *out = NULL;
  floe_code rc = run(om, feeds, 2, &out, msg, cap);
  if (rc == FLOE_OK) {
    memcpy(z, floe_tensor_data(out), 4 * sizeof *z);
    floe_tensor_release(out);
  }
  floe_tensor_release(feeds[0]);
  floe_tensor_release(feeds[1]);
  floe_onnx_model_free(om);
  return rc;
}

START_TEST(test_mod_signs) {
  const int32_t x[4] = {-7, 7, -7, 7}, y[4] = {3, 3, -3, -3};
  /* -7 = 3 * -3 + 2; 7 = 3 * 2 + 1; -7 = -3 * 2 - 1; 7 = -3 * -3 - 2 */
  const int32_t floor_mod[4] = {2, 1, -1, -2}, trunc_mod[4] = {-1, 1, -1, 1};
  int32_t z[4];
  char msg[1024];
  ck_assert_msg(run_mod(0, x, y, z, msg, sizeof msg) == FLOE_OK, "%s", msg);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(z[i], floor_mod[i]);
  ck_assert_msg(run_mod(1, x, y, z, msg, sizeof msg) == FLOE_OK, "%s", msg);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(z[i], trunc_mod[i]);
  /* INT32_MIN % -1 overflows in C: the remainder is 0. */
  const int32_t xm[4] = {INT32_MIN, INT32_MIN, 5, -5}, ym[4] = {-1, 1, -1, -1};
  ck_assert_msg(run_mod(0, xm, ym, z, msg, sizeof msg) == FLOE_OK, "%s", msg);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(z[i], 0);
}
END_TEST

START_TEST(test_mod_by_zero_fails) {
  const int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 0, 1, 1};
  int32_t z[4];
  char msg[1024];
  ck_assert_int_eq(run_mod(0, x, y, z, msg, sizeof msg), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(msg, "division by zero") && strstr(msg, "flat index 1"), "%s", msg);
  ck_assert_msg(strstr(msg, "node/"), "message does not name the node: %s", msg);
}
END_TEST

START_TEST(test_shift_past_width) {
  Val in[2] = {{"x", T_UINT8, 1, {4}}, {"y", T_UINT8, 1, {4}}};
  Val z = {"z", T_UINT8, 1, {4}};
  const uint8_t x[4] = {0x81, 0x81, 0x81, 0x81}, y[4] = {1, 7, 8, 200};
  const uint8_t left[4] = {0x02, 0x80, 0, 0}, right[4] = {0x40, 0x01, 0, 0};
  for (int dir = 0; dir < 2; dir++) {
    Attr a = {"direction", 0, dir ? "RIGHT" : "LEFT"};
    Pb m = model(11, "BitShift", in, 2, &z, 1, &a, 1);
    char msg[1024];
    floe_code code;
    FloeOnnxModel *om = import(&m, &code, msg, sizeof msg);
    ck_assert_msg(om != NULL, "%s", msg);
    int64_t n = 4;
    FloeTensor *feeds[2] = {floe_tensor_from_data(FLOE_U8, 1, &n, x, 4, NULL),
                            floe_tensor_from_data(FLOE_U8, 1, &n, y, 4, NULL)};
    FloeTensor *out = NULL;
    ck_assert_msg(run(om, feeds, 2, &out, msg, sizeof msg) == FLOE_OK, "%s", msg);
    const uint8_t *got = floe_tensor_data(out);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(got[i], dir ? right[i] : left[i]);
    floe_tensor_release(out);
    floe_tensor_release(feeds[0]);
    floe_tensor_release(feeds[1]);
    floe_onnx_model_free(om);
  }
}
END_TEST

START_TEST(test_window_endpoints) {
  /* A symmetric Hann window is 0 at both ends and 1 in the middle of an odd length; a
   * periodic one is 0 at the start only. One symmetric point is [1]. */
  struct { int periodic; int64_t size; double first, mid, last; } c[3] = {
      {0, 9, 0, 1, 0}, {1, 8, 0, 1, 0.5 - 0.5 * cos(2 * M_PI * 7 / 8)}, {0, 1, 1, 1, 1}};
  for (int k = 0; k < 3; k++) {
    Val size = {"size", T_INT64, 0, {0}}, y = {"y", T_FLOAT, 1, {-1}};
    Attr a = {"periodic", c[k].periodic, NULL};
    Pb m = model(17, "HannWindow", &size, 1, &y, 1, &a, 1);
    char msg[1024];
    floe_code code;
    FloeOnnxModel *om = import(&m, &code, msg, sizeof msg);
    ck_assert_msg(om != NULL, "%s", msg);
    FloeTensor *feed = scalar_i64(c[k].size), *out = NULL;
    ck_assert_msg(run(om, &feed, 1, &out, msg, sizeof msg) == FLOE_OK, "%s", msg);
    ck_assert_int_eq(floe_tensor_num_elements(out), c[k].size);
    const float *w = floe_tensor_data(out);
    ck_assert_double_eq_tol(w[0], c[k].first, 1e-6);
    ck_assert_double_eq_tol(w[c[k].size / 2], c[k].mid, 1e-6);
    ck_assert_double_eq_tol(w[c[k].size - 1], c[k].last, 1e-6);
    floe_tensor_release(out);
    floe_tensor_release(feed);
    floe_onnx_model_free(om);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("onnx_math_signal");
  TCase *errors = tcase_create("errors");
  tcase_add_test(errors, test_mod_bad_fmod);
  tcase_add_test(errors, test_bitshift_bad_direction);
  tcase_add_test(errors, test_dft_bad_axis_and_shape);
  tcase_add_test(errors, test_det_not_square);
  tcase_add_test(errors, test_window_bad_dtype);
  tcase_add_test(errors, test_mvn_bad_axes);
  tcase_add_test(errors, test_stft_frame_longer_than_signal);
  tcase_add_test(errors, test_mel_edges_past_nyquist);
  tcase_add_test(errors, test_mod_by_zero_fails);
  suite_add_tcase(s, errors);
  TCase *values = tcase_create("values");
  tcase_add_test(values, test_mod_signs);
  tcase_add_test(values, test_shift_past_width);
  tcase_add_test(values, test_window_endpoints);
  suite_add_tcase(s, values);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
