/* SPDX-License-Identifier: Apache-2.0 */
/* test_tensor_array.c - TensorArrays and stacks (core/exec/tensor_array.c, tensor_array_build.c,
 * stack.c, grad_tensor_array.c): every op's result against values computed here, every
 * error and what its message names, the gradient TensorArray's semantics (summed writes,
 * zeros for unwritten elements), gradients through straight-line graphs against central
 * finite differences in f64, handles that outlive their step, and concurrent writes and
 * pushes in one step (and concurrent steps) on a multi-threaded runtime. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;

static void runtime_setup(void) { rt = harness_runtime(4); }

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* ---- helpers ---- */

static FloeOutput ci32(FloeGraph *g, int32_t v) {
  FloeTensor *t = harness_i32(0, NULL, &v);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput ci32v(FloeGraph *g, const int32_t *v, int n) {
  int64_t d = n;
  FloeTensor *t = harness_i32(1, &d, v);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput ci64v(FloeGraph *g, const int64_t *v, int n) {
  int64_t d = n;
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, &d, NULL);
  memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput cval(FloeGraph *g, FloeDType dt, int rank, const int64_t *dims,
                       const double *v) {
  FloeTensor *t = harness_from_doubles(dt, rank, dims, v);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeShape shape1(int64_t a) { return floe_shape_make(1, &a); }

static FloeTensorArrayOptions opts_elem(FloeShape elem) {
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.element_shape = elem;
  return o;
}

static FloeSession *session_new(FloeGraph *g) { return harness_session(g, rt); }

/* One run; *msg (when non-NULL) gets a malloc'd copy of the message. */
static floe_code run(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches,
                     int n, const char *target, FloeTensor **outs, char **msg) {
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feeds, nf, fetches, n, target ? &target : NULL,
                                  target ? 1 : 0, outs, st);
  if (msg) *msg = strdup(floe_status_message(st));
  floe_status_free(st);
  return rc;
}

static void run_ok(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches,
                   int n, FloeTensor **outs) {
  char *msg;
  floe_code rc = run(s, feeds, nf, fetches, n, NULL, outs, &msg);
  ck_assert_msg(rc == FLOE_OK, "run: %s", msg);
  free(msg);
}

static void mentions(const char *msg, const char *part) {
  ck_assert_msg(strstr(msg, part) != NULL, "'%s' not in: %s", part, msg);
}

/* Builds nothing more; runs fetch on a fresh session and expects code with every part of
 * parts (NULL-terminated) in the message. */
static void expect_error(FloeGraph *g, const FloeFeed *feeds, int nf, const char *fetch,
                         floe_code code, const char *const *parts) {
  FloeSession *s = session_new(g);
  FloeTensor *out = NULL;
  char *msg;
  floe_code rc = run(s, feeds, nf, &fetch, 1, NULL, &out, &msg);
  ck_assert_msg(rc == code, "fetching %s: got %s (%s), want %s", fetch, floe_code_name(rc), msg,
                floe_code_name(code));
  for (int i = 0; parts[i]; i++) mentions(msg, parts[i]);
  free(msg);
  floe_session_free(s);
}

static void assert_values(const FloeTensor *t, const double *want, int64_t n, const char *what) {
  ck_assert_msg(floe_tensor_num_elements(t) == n, "%s: %lld elements, want %lld", what,
                (long long)floe_tensor_num_elements(t), (long long)n);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(harness_get(t, i) == want[i], "%s[%lld] = %g, want %g", what, (long long)i,
                  harness_get(t, i), want[i]);
}

static void assert_shape(FloeShape s, int rank, const int64_t *dims, const char *what) {
  ck_assert_msg(s.rank == rank, "%s: rank %d, want %d", what, s.rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(s.dims[i] == dims[i], "%s: dim %d is %lld, want %lld", what, i,
                  (long long)s.dims[i], (long long)dims[i]);
}

/* ---- values ---- */

START_TEST(write_read_size) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F32, ci32(g, 3), &o);
  const double b[2] = {3, 4}, c[2] = {-7, 0.25};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, shape1(2));
  ta = floe_ta_write(g, "w0", ta, ci32(g, 0), x);
  ta = floe_ta_write(g, "w1", ta, ci32(g, 1), cval(g, FLOE_F32, 1, (int64_t[]){2}, b));
  ta = floe_ta_write(g, "w2", ta, ci32(g, 2), cval(g, FLOE_F32, 1, (int64_t[]){2}, c));
  FloeOutput r2 = floe_ta_read(g, "r2", ta, ci32(g, 2));
  floe_ta_read(g, "r0", ta, ci32(g, 0));
  floe_ta_read(g, "r1", ta, ci32(g, 1));
  floe_ta_size(g, "size", ta);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  assert_shape(floe_node_output_shape(r2.node, 0), 1, (int64_t[]){2}, "r2's static shape");
  ck_assert_int_eq(floe_node_output_dtype(r2.node, 0), FLOE_F32);

  FloeSession *s = session_new(g);
  const float a[2] = {1.5f, -2.0f};
  FloeTensor *xv = harness_f32(1, (int64_t[]){2}, a);
  FloeFeed f = {"x", xv};
  const char *fetches[] = {"r2", "r0", "r1", "size"};
  FloeTensor *out[4];
  run_ok(s, &f, 1, fetches, 4, out);
  assert_values(out[0], c, 2, "read 2");
  assert_values(out[1], (const double[]){1.5, -2}, 2, "read 0");
  assert_values(out[2], b, 2, "read 1");
  assert_values(out[3], (const double[]){3}, 1, "size");
  /* Stored by reference: reading index 0 gives back the very tensor that was written. */
  ck_assert_ptr_eq(out[1], xv);
  for (int i = 0; i < 4; i++) floe_tensor_release(out[i]);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(dynamic_size_grows) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.dynamic_size = 1;
  o.element_shape = floe_shape_scalar();
  FloeTensorArray ta = floe_tensor_array(g, "dyn", FLOE_I32, ci32(g, 1), &o);
  ta = floe_ta_write(g, "w", ta, ci32(g, 4), ci32(g, 77));
  FloeOutput st = floe_ta_stack(g, "st", ta);
  floe_ta_size(g, "size", ta);
  floe_ta_read(g, "r4", ta, ci32(g, 4));
  floe_ta_read(g, "r2", ta, ci32(g, 2));
  /* The size of a dynamic array is not known statically. */
  assert_shape(floe_node_output_shape(st.node, 0), 1, (int64_t[]){-1}, "stack's shape");
  FloeSession *s = session_new(g);
  const char *fetches[] = {"size", "r4"};
  FloeTensor *out[2];
  run_ok(s, NULL, 0, fetches, 2, out);
  assert_values(out[0], (const double[]){5}, 1, "size after writing index 4");
  assert_values(out[1], (const double[]){77}, 1, "read 4");
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_session_free(s);
  /* The indices it grew over were never written. */
  const char *parts[] = {"TensorArray 'dyn'", "could not read index 2 (size 5)",
                         "has not been written", NULL};
  expect_error(g, NULL, 0, "r2", FLOE_INVALID_ARGUMENT, parts);
  floe_graph_free(g);
}
END_TEST

START_TEST(unstack_gather_stack_scatter) {
  FloeGraph *g = floe_graph_new();
  enum { R = 4, C = 3 };
  double xv[R * C];
  for (int i = 0; i < R * C; i++) xv[i] = 10.0 * (i / C) + (i % C) + 0.5;
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, (int64_t[]){R, C}));
  FloeTensorArrayOptions o = opts_elem(shape1(C));
  o.clear_after_read = 0;
  FloeTensorArray t1 = floe_tensor_array(g, "t1", FLOE_F64, ci32(g, R), &o);
  t1 = floe_ta_unstack(g, "unstack", t1, x);
  const int32_t gi[4] = {3, 0, 3, 1};
  FloeOutput ga = floe_ta_gather(g, "gather", t1, ci32v(g, gi, 4));
  FloeOutput sk = floe_ta_stack(g, "stack", t1);
  floe_ta_read(g, "read2", t1, ci32(g, 2));
  /* Static shapes from the declaration: [4 indices, 3] and [size 4, 3]. */
  assert_shape(floe_node_output_shape(ga.node, 0), 2, (int64_t[]){4, C}, "gather's shape");
  assert_shape(floe_node_output_shape(sk.node, 0), 2, (int64_t[]){R, C}, "stack's shape");

  /* Scatter two rows of y to indices 2 and 0 of a second array, then gather them back. */
  const double yv[4] = {1, 2, 3, 4};
  FloeTensorArray t2 = floe_tensor_array(g, "t2", FLOE_F64, ci32(g, 3), NULL);
  t2 = floe_ta_scatter(g, "scatter", t2, ci32v(g, (const int32_t[]){2, 0}, 2),
                       cval(g, FLOE_F64, 2, (int64_t[]){2, 2}, yv));
  floe_ta_gather(g, "gather2", t2, ci32v(g, (const int32_t[]){0, 2}, 2));

  FloeSession *s = session_new(g);
  FloeTensor *xt = harness_f64(2, (int64_t[]){R, C}, xv);
  FloeFeed f = {"x", xt};
  const char *fetches[] = {"gather", "stack", "read2", "gather2"};
  FloeTensor *out[4];
  run_ok(s, &f, 1, fetches, 4, out);
  double want[4 * C];
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < C; j++) want[k * C + j] = xv[gi[k] * C + j];
  assert_values(out[0], want, 4 * C, "gather [3,0,3,1]");
  assert_values(out[1], xv, R * C, "stack of the unstacked rows");
  assert_values(out[2], xv + 2 * C, C, "read 2");
  /* The element is a view of row 2 of the fed tensor, not a copy. */
  ck_assert_ptr_eq(floe_tensor_data(out[2]), (char *)floe_tensor_data(xt) + 2 * C * sizeof(double));
  assert_values(out[3], (const double[]){3, 4, 1, 2}, 4, "gather [0,2] after scatter to [2,0]");
  for (int i = 0; i < 4; i++) floe_tensor_release(out[i]);
  floe_tensor_release(xt);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(stack_of_nothing) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  FloeTensorArray known = floe_tensor_array(g, "known", FLOE_F32, ci32(g, 0), &o);
  floe_ta_stack(g, "s_known", known);
  FloeTensorArray unknown = floe_tensor_array(g, "unknown", FLOE_F32, ci32(g, 0), NULL);
  floe_ta_stack(g, "s_unknown", unknown);
  FloeSession *s = session_new(g);
  const char *fetch = "s_known";
  FloeTensor *out;
  run_ok(s, NULL, 0, &fetch, 1, &out);
  assert_shape(floe_tensor_shape(out), 2, (int64_t[]){0, 2}, "stack of an empty array");
  floe_tensor_release(out);
  floe_session_free(s);
  const char *parts[] = {"TensorArray 'unknown'", "could not gather 0 elements (size 0)",
                         "element shape is unknown", NULL};
  expect_error(g, NULL, 0, "s_unknown", FLOE_INVALID_ARGUMENT, parts);
  floe_graph_free(g);
}
END_TEST

/* Concat: elements of different row counts one after the other, their lengths, an empty
 * array, and elements that disagree past their first dimension. */
START_TEST(concat_ragged_elements) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o = opts_elem(floe_shape_make(2, (int64_t[]){-1, 2}));
  FloeTensorArray t = floe_tensor_array(g, "t", FLOE_F64, ci32(g, 3), &o);
  const double a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[6] = {7, 8, 9, 10, 11, 12};
  t = floe_ta_write(g, "w0", t, ci32(g, 0), cval(g, FLOE_F64, 2, (int64_t[]){2, 2}, a));
  t = floe_ta_write(g, "w2", t, ci32(g, 2), cval(g, FLOE_F64, 2, (int64_t[]){3, 2}, c));
  t = floe_ta_write(g, "w1", t, ci32(g, 1), cval(g, FLOE_F64, 2, (int64_t[]){1, 2}, b));
  FloeOutput lengths;
  FloeOutput all = floe_ta_concat(g, "concat", t, &lengths);
  assert_shape(floe_node_output_shape(all.node, 0), 2, (int64_t[]){-1, 2}, "concat's shape");
  assert_shape(floe_node_output_shape(lengths.node, 1), 1, (int64_t[]){3}, "lengths' shape");
  FloeTensorArray e = floe_tensor_array(g, "empty", FLOE_F32, ci32(g, 0), &o);
  floe_ta_concat(g, "concat_empty", e, NULL);
  FloeTensorArray bad = floe_tensor_array(g, "bad", FLOE_F64, ci32(g, 2), NULL);
  bad = floe_ta_write(g, "b0", bad, ci32(g, 0), cval(g, FLOE_F64, 2, (int64_t[]){2, 2}, a));
  bad = floe_ta_write(g, "b1", bad, ci32(g, 1), cval(g, FLOE_F64, 2, (int64_t[]){2, 1}, b));
  floe_ta_concat(g, "concat_bad", bad, NULL);
  FloeSession *s = session_new(g);
  const char *fetches[] = {"concat:0", "concat:1", "concat_empty"};
  FloeTensor *out[3];
  run_ok(s, NULL, 0, fetches, 3, out);
  const double want[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  assert_shape(floe_tensor_shape(out[0]), 2, (int64_t[]){6, 2}, "concat");
  assert_values(out[0], want, 12, "concat of 2 + 1 + 3 rows");
  ck_assert_int_eq(floe_tensor_dtype(out[1]), FLOE_I64);
  assert_values(out[1], (const double[]){2, 1, 3}, 3, "lengths");
  assert_shape(floe_tensor_shape(out[2]), 2, (int64_t[]){0, 2}, "concat of an empty array");
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_session_free(s);
  const char *parts[] = {"TensorArray 'bad'", "could not concatenate index 1", "[2,1]", NULL};
  expect_error(g, NULL, 0, "concat_bad", FLOE_INVALID_ARGUMENT, parts);
  floe_graph_free(g);
}
END_TEST

/* Split cuts rows by lengths into elements of different row counts; concat glues them back;
 * lengths that do not add up to the rows are refused with the array untouched. */
START_TEST(split_then_concat) {
  FloeGraph *g = floe_graph_new();
  double xv[12];
  for (int i = 0; i < 12; i++) xv[i] = i + 0.25;
  FloeOutput x = cval(g, FLOE_F64, 2, (int64_t[]){6, 2}, xv);
  FloeOutput lengths = ci64v(g, (const int64_t[]){2, 1, 3}, 3);
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.clear_after_read = 0;
  FloeTensorArray t = floe_tensor_array(g, "t", FLOE_F64, ci32(g, 3), &o);
  t = floe_ta_split(g, "split", t, x, lengths);
  floe_ta_read(g, "r2", t, ci32(g, 2));
  floe_ta_concat(g, "back", t, NULL);
  FloeOutput bad_len = ci64v(g, (const int64_t[]){2, 3}, 2);
  FloeTensorArray u = floe_tensor_array(g, "u", FLOE_F64, ci32(g, 2), NULL);
  u = floe_ta_split(g, "bad_split", u, x, bad_len);
  FloeSession *s = session_new(g);
  const char *fetches[] = {"r2", "back"};
  FloeTensor *out[2];
  run_ok(s, NULL, 0, fetches, 2, out);
  assert_shape(floe_tensor_shape(out[0]), 2, (int64_t[]){3, 2}, "element 2");
  assert_values(out[0], xv + 6, 6, "element 2: rows 3..5");
  assert_values(out[1], xv, 12, "concat of the split");
  for (int i = 0; i < 2; i++) floe_tensor_release(out[i]);
  floe_session_free(s);
  const char *parts[] = {"TensorArray 'u'", "lengths add up to 5 rows, not 6", NULL};
  expect_error(g, NULL, 0, "bad_split", FLOE_INVALID_ARGUMENT, parts);
  floe_graph_free(g);
}
END_TEST

/* ---- errors ---- */

/* A 3-element f32 array "arr" of element shape [2] with index 0 written. */
static FloeTensorArray arr3(FloeGraph *g, int clear_after_read) {
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  o.clear_after_read = clear_after_read;
  FloeTensorArray ta = floe_tensor_array(g, "arr", FLOE_F32, ci32(g, 3), &o);
  return floe_ta_write(g, "w0", ta, ci32(g, 0),
                       cval(g, FLOE_F32, 1, (int64_t[]){2}, (const double[]){1, 2}));
}

START_TEST(errors_of_writes) {
  const double v2[2] = {5, 6}, v3[3] = {1, 2, 3};
  FloeGraph *g = floe_graph_new();
  FloeTensorArray ta = arr3(g, 1);
  FloeTensorArray again = floe_ta_write(g, "again", ta, ci32(g, 0),
                                        cval(g, FLOE_F32, 1, (int64_t[]){2}, v2));
  floe_ta_write(g, "past", ta, ci32(g, 3), cval(g, FLOE_F32, 1, (int64_t[]){2}, v2));
  floe_ta_write(g, "neg", ta, ci32(g, -1), cval(g, FLOE_F32, 1, (int64_t[]){2}, v2));
  floe_ta_write(g, "f64", ta, ci32(g, 1), cval(g, FLOE_F64, 1, (int64_t[]){2}, v2));
  FloeOutput p = floe_placeholder(g, "p", FLOE_F32, floe_shape_unknown());
  floe_ta_write(g, "shape", ta, ci32(g, 1), p);
  ck_assert_ptr_nonnull(again.flow.node);
  const char *twice[] = {"node 'again' (TensorArrayWriteV3)", "TensorArray 'arr'",
                         "could not write to index 0 (size 3)", "already been written", NULL};
  expect_error(g, NULL, 0, "again", FLOE_INVALID_ARGUMENT, twice);
  const char *past[] = {"TensorArray 'arr'", "could not write to index 3",
                        "the size is 3 and dynamic_size is false", NULL};
  expect_error(g, NULL, 0, "past", FLOE_OUT_OF_RANGE, past);
  const char *neg[] = {"TensorArray 'arr'", "could not write to index -1", NULL};
  expect_error(g, NULL, 0, "neg", FLOE_OUT_OF_RANGE, neg);
  const char *dt[] = {"TensorArray 'arr'", "could not write to index 1",
                      "the value is f64 but the TensorArray holds f32", NULL};
  expect_error(g, NULL, 0, "f64", FLOE_INVALID_ARGUMENT, dt);
  FloeTensor *bad = harness_from_doubles(FLOE_F32, 1, (int64_t[]){3}, v3);
  FloeFeed f = {"p", bad};
  const char *sh[] = {"TensorArray 'arr'", "could not write to index 1 (size 3)",
                      "the value's shape [3] does not match the element shape [2]", NULL};
  expect_error(g, &f, 1, "shape", FLOE_INVALID_ARGUMENT, sh);
  floe_tensor_release(bad);
  /* A value whose static shape contradicts the declaration fails when it is built. */
  floe_ta_write(g, "static", ta, ci32(g, 1), cval(g, FLOE_F32, 1, (int64_t[]){3}, v3));
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  const char *msg = floe_graph_error(g, NULL);
  mentions(msg, "static");
  mentions(msg, "[3] does not match the TensorArray's element shape [2]");
  floe_graph_free(g);
}
END_TEST

START_TEST(errors_of_reads) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArray ta = arr3(g, 1);
  floe_ta_read(g, "unwritten", ta, ci32(g, 2));
  floe_ta_read(g, "past", ta, ci32(g, 5));
  FloeOutput first = floe_ta_read(g, "first", ta, ci32(g, 0));
  /* The second read of index 0 runs after the first. */
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayReadV3", "second");
  floe_node_add_input(b, ta.handle);
  floe_node_add_input(b, ci32(g, 0));
  floe_node_add_input(b, ta.flow);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_add_control_input(b, first.node);
  floe_node_finish(b);
  /* Nodes that read with another dtype or element shape than the array holds. */
  b = floe_node_begin(g, "TensorArrayReadV3", "as_f64");
  floe_node_add_input(b, ta.handle);
  floe_node_add_input(b, ci32(g, 0));
  floe_node_add_input(b, ta.flow);
  floe_node_set_attr_type(b, "dtype", FLOE_F64);
  floe_node_finish(b);
  FloeTensorArray loose = floe_tensor_array(g, "loose", FLOE_F32, ci32(g, 1), NULL);
  loose = floe_ta_write(g, "lw", loose, ci32(g, 0),
                        cval(g, FLOE_F32, 1, (int64_t[]){2}, (const double[]){1, 2}));
  b = floe_node_begin(g, "TensorArrayReadV3", "as_5");
  floe_node_add_input(b, loose.handle);
  floe_node_add_input(b, ci32(g, 0));
  floe_node_add_input(b, loose.flow);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_set_attr_shape(b, "element_shape", shape1(5));
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  const char *unwritten[] = {"node 'unwritten' (TensorArrayReadV3)", "TensorArray 'arr'",
                             "could not read index 2 (size 3): it has not been written", NULL};
  expect_error(g, NULL, 0, "unwritten", FLOE_INVALID_ARGUMENT, unwritten);
  const char *past[] = {"TensorArray 'arr'", "could not read index 5: the size is 3", NULL};
  expect_error(g, NULL, 0, "past", FLOE_OUT_OF_RANGE, past);
  const char *twice[] = {"node 'second'", "TensorArray 'arr'",
                         "could not read index 0 (size 3) twice", "clear_after_read = false",
                         NULL};
  expect_error(g, NULL, 0, "second", FLOE_INVALID_ARGUMENT, twice);
  const char *dt[] = {"TensorArray 'arr'", "it holds f32 but this node reads f64", NULL};
  expect_error(g, NULL, 0, "as_f64", FLOE_INVALID_ARGUMENT, dt);
  const char *sh[] = {"TensorArray 'loose'",
                      "index 0 holds a tensor of shape [2] but this node expects [5]", NULL};
  expect_error(g, NULL, 0, "as_5", FLOE_INVALID_ARGUMENT, sh);
  floe_graph_free(g);
}
END_TEST

START_TEST(errors_of_gather_scatter_stack) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArray ta = floe_tensor_array(g, "mixed", FLOE_F32, ci32(g, 2), NULL);
  ta = floe_ta_write(g, "m0", ta, ci32(g, 0),
                     cval(g, FLOE_F32, 1, (int64_t[]){2}, (const double[]){1, 2}));
  ta = floe_ta_write(g, "m1", ta, ci32(g, 1),
                     cval(g, FLOE_F32, 1, (int64_t[]){3}, (const double[]){1, 2, 3}));
  floe_ta_stack(g, "stack", ta);
  /* Without clear_after_read = false, one gather may not read an element twice. */
  FloeTensorArray two = arr3(g, 1);
  floe_ta_gather(g, "repeat", two, ci32v(g, (const int32_t[]){0, 0}, 2));
  FloeOutput p = floe_placeholder(g, "p", FLOE_F32, floe_shape_unknown());
  FloeTensorArray sc = floe_tensor_array(g, "sc", FLOE_F32, ci32(g, 4), NULL);
  floe_ta_scatter(g, "scatter", sc, ci32v(g, (const int32_t[]){0, 1, 2}, 3), p);
  FloeTensorArray neg = floe_tensor_array(g, "negsize", FLOE_F32,
                                          floe_placeholder(g, "n", FLOE_I32, floe_shape_scalar()),
                                          NULL);
  floe_ta_size(g, "negsize_size", neg);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  const char *mixed[] = {"TensorArray 'mixed'", "could not stack index 0 (shape [2]) with "
                         "index 1 (shape [3])", NULL};
  expect_error(g, NULL, 0, "stack", FLOE_INVALID_ARGUMENT, mixed);
  const char *repeat[] = {"TensorArray 'arr'", "could not read index 0 twice in one gather",
                          NULL};
  expect_error(g, NULL, 0, "repeat", FLOE_INVALID_ARGUMENT, repeat);
  FloeTensor *two_rows = harness_from_doubles(FLOE_F32, 2, (int64_t[]){2, 2},
                                              (const double[]){1, 2, 3, 4});
  FloeFeed f = {"p", two_rows};
  const char *rows[] = {"TensorArray 'sc'", "could not scatter 3 indices: the value [2,2] has "
                        "2 rows", NULL};
  expect_error(g, &f, 1, "scatter", FLOE_INVALID_ARGUMENT, rows);
  floe_tensor_release(two_rows);
  int32_t m2 = -2;
  FloeTensor *nt = harness_i32(0, NULL, &m2);
  FloeFeed fn = {"n", nt};
  const char *size[] = {"TensorArray 'negsize'", "the size must be >= 0, got -2", NULL};
  expect_error(g, &fn, 1, "negsize_size", FLOE_INVALID_ARGUMENT, size);
  floe_tensor_release(nt);
  floe_graph_free(g);
}
END_TEST

START_TEST(errors_name_and_close) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  o.tensor_array_name = "my_steps";
  FloeTensorArray ta = floe_tensor_array(g, "node_name", FLOE_F32, ci32(g, 2), &o);
  floe_ta_read(g, "r", ta, ci32(g, 1));
  /* Close, then read what was written. */
  FloeTensorArray c = arr3(g, 1);
  FloeNode *close = floe_ta_close(g, "close", c);
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayReadV3", "after_close");
  floe_node_add_input(b, c.handle);
  floe_node_add_input(b, ci32(g, 0));
  floe_node_add_input(b, c.flow);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_add_control_input(b, close);
  floe_node_finish(b);
  /* A handle that is not a TensorArray's: the builder cannot tell the dtype, and a node
   * built by hand fails when it runs. */
  FloeVariable v = floe_variable(g, "var", FLOE_F32, shape1(2), floe_init_zeros());
  FloeTensorArray fake = {v.handle, c.flow};
  b = floe_node_begin(g, "TensorArraySizeV3", "var_size");
  floe_node_add_input(b, fake.handle);
  floe_node_add_input(b, fake.flow);
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  const char *named[] = {"TensorArray 'my_steps'", "could not read index 1 (size 2)", NULL};
  expect_error(g, NULL, 0, "r", FLOE_INVALID_ARGUMENT, named);
  const char *closed[] = {"TensorArray 'arr'", "has been closed", NULL};
  expect_error(g, NULL, 0, "after_close", FLOE_FAILED_PRECONDITION, closed);
  const char *var[] = {"node 'var_size'", "expected a TensorArray handle", NULL};
  expect_error(g, NULL, 0, "var_size", FLOE_INVALID_ARGUMENT, var);

  floe_ta_read(g, "var_read", fake, ci32(g, 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  mentions(floe_graph_error(g, NULL), "cannot tell the dtype of the TensorArray behind 'var:0'");
  floe_graph_free(g);
}
END_TEST

/* Mistakes the graph can see are errors when the node is built. */
START_TEST(errors_when_building) {
  struct {
    const char *what, *part;
  } cases[] = {
      {"short options", "options are too short (struct_size 4)"},
      {"negative size", "TensorArrayV3 size must be >= 0, got -1"},
      {"scatter rows", "TensorArrayScatterV3 has 3 indices but the value [2,2] has 2 rows"},
      {"unstack scalar", "TensorArrayUnstackV3 value must have rank >= 1"},
      {"read element_shape", "element_shape [3] contradicts the TensorArray's element shape [2]"},
  };
  for (size_t c = 0; c < FLOE__ARRAY_LEN(cases); c++) {
    FloeGraph *g = floe_graph_new();
    FloeTensorArrayOptions o = opts_elem(shape1(2));
    FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F32, ci32(g, 3), &o);
    ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
    FloeOutput v22 = cval(g, FLOE_F32, 2, (int64_t[]){2, 2}, (const double[]){1, 2, 3, 4});
    switch (c) {
      case 0:
        o.struct_size = 4;
        ta = floe_tensor_array(g, "short", FLOE_F32, ci32(g, 3), &o);
        ck_assert_ptr_null(ta.handle.node);
        break;
      case 1: floe_tensor_array(g, "neg", FLOE_F32, ci32(g, -1), NULL); break;
      case 2: floe_ta_scatter(g, "sc", ta, ci32v(g, (const int32_t[]){0, 1, 2}, 3), v22); break;
      case 3: floe_ta_unstack(g, "un", ta, ci32(g, 1)); break;
      default: {
        FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayReadV3", "r");
        floe_node_add_input(b, ta.handle);
        floe_node_add_input(b, ci32(g, 0));
        floe_node_add_input(b, ta.flow);
        floe_node_set_attr_type(b, "dtype", FLOE_F32);
        floe_node_set_attr_shape(b, "element_shape", shape1(3));
        floe_node_finish(b);
      }
    }
    ck_assert_msg(floe_graph_status(g) != FLOE_OK, "%s: no error", cases[c].what);
    mentions(floe_graph_error(g, NULL), cases[c].part);
    /* Later builder calls are no-ops under the sticky error. */
    FloeOutput r = floe_ta_read(g, NULL, ta, ci32(g, 0));
    ck_assert_ptr_null(r.node);
    floe_graph_free(g);
  }
}
END_TEST

/* ---- the gradient TensorArray ---- */

/* The gradient array of `fwd` (source "s") as a FloeTensorArray. */
static FloeTensorArray grad_of(FloeGraph *g, const char *name, FloeTensorArray fwd) {
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayGradV3", name);
  floe_node_add_input(b, fwd.handle);
  floe_node_add_input(b, fwd.flow);
  floe_node_set_attr_string(b, "source", "s");
  FloeNode *n = floe_node_finish(b);
  FloeTensorArray ta = {floe_out(n, 0), floe_out(n, 1)};
  return ta;
}

START_TEST(gradient_array_sums_and_zero_fills) {
  FloeGraph *g = floe_graph_new();
  /* Forward: elements of shapes [2] and [3] (no declared element shape); 2 never written. */
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.dynamic_size = 1;
  FloeTensorArray fwd = floe_tensor_array(g, "fwd", FLOE_F64, ci32(g, 3), &o);
  fwd = floe_ta_write(g, "w0", fwd, ci32(g, 0),
                      cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){9, 9}));
  fwd = floe_ta_write(g, "w1", fwd, ci32(g, 1),
                      cval(g, FLOE_F64, 1, (int64_t[]){3}, (const double[]){9, 9, 9}));
  FloeTensorArray gr = grad_of(g, "grad", fwd);
  /* The same gradient array for the same source. */
  FloeTensorArray gr2 = grad_of(g, "grad2", fwd);
  gr = floe_ta_write(g, "g0a", gr, ci32(g, 0),
                     cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){1, 2}));
  gr = floe_ta_write(g, "g0b", gr, ci32(g, 0),
                     cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){10, 20}));
  gr2.flow = gr.flow;
  gr2 = floe_ta_write(g, "g0c", gr2, ci32(g, 0),
                      cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){100, 200}));
  floe_ta_read(g, "sum0", gr2, ci32(g, 0));
  floe_ta_read(g, "zero1", gr2, ci32(g, 1));
  floe_ta_size(g, "gsize", gr2);
  /* Writing a gradient of another shape than the forward element's is an error. */
  floe_ta_write(g, "g1bad", gr, ci32(g, 1),
                cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){1, 2}));
  /* Index 2 was never written forward: its shape is unknown, so it cannot read as zeros. */
  floe_ta_read(g, "zero2", gr, ci32(g, 2));
  /* Once a gradient array exists, the dynamic forward array may not grow. */
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayWriteV3", "grow");
  floe_node_add_input(b, fwd.handle);
  floe_node_add_input(b, ci32(g, 7));
  floe_node_add_input(b, cval(g, FLOE_F64, 1, (int64_t[]){2}, (const double[]){1, 2}));
  floe_node_add_input(b, gr.flow);
  floe_node_finish(b);
  grad_of(g, "gradgrad", gr);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  FloeSession *s = session_new(g);
  const char *fetches[] = {"sum0", "zero1", "gsize"};
  FloeTensor *out[3];
  run_ok(s, NULL, 0, fetches, 3, out);
  assert_values(out[0], (const double[]){111, 222}, 2, "three writes to index 0, summed");
  assert_values(out[1], (const double[]){0, 0, 0}, 3, "unwritten index 1: zeros of [3]");
  assert_values(out[2], (const double[]){3}, 1, "the gradient array's size");
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_session_free(s);
  const char *bad[] = {"TensorArray 'fwd@s'", "could not write the gradient of index 1",
                       "it has shape [2] but the element it is the gradient of had shape [3]",
                       NULL};
  expect_error(g, NULL, 0, "g1bad", FLOE_INVALID_ARGUMENT, bad);
  const char *zero2[] = {"TensorArray 'fwd@s'", "could not read index 2 (size 3)",
                         "reads it as zeros only when its shape is known", NULL};
  expect_error(g, NULL, 0, "zero2", FLOE_INVALID_ARGUMENT, zero2);
  const char *grow[] = {"TensorArray 'fwd'", "could not write to index 7",
                        "a gradient TensorArray was made from it", NULL};
  expect_error(g, NULL, 0, "grow", FLOE_FAILED_PRECONDITION, grow);
  const char *gg[] = {"TensorArray 'fwd@s'", "has no gradient TensorArray of its own", NULL};
  expect_error(g, NULL, 0, "gradgrad", FLOE_INVALID_ARGUMENT, gg);
  floe_graph_free(g);
}
END_TEST

/* ---- gradients against finite differences ---- */

/* Checks d(sum(y * w)) / dx (floe_gradients with grad_ys = w) at xv against central
 * differences of the forward graph, element by element. */
static void check_gradient(FloeGraph *g, FloeOutput x, FloeOutput y, const FloeTensor *wv,
                           FloeTensor *xv, const char *what) {
  FloeTensor *wt = floe_tensor_copy(wv, NULL);
  FloeOutput w = floe_const(g, "w", wt);
  floe_tensor_release(wt);
  FloeOutput dx;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_gradients(g, &y, 1, &x, 1, &w, &dx, st);
  ck_assert_msg(rc == FLOE_OK, "%s: floe_gradients: %s", what, floe_status_message(st));
  floe_status_free(st);
  ck_assert_ptr_nonnull(dx.node);
  char yname[256], dxname[256];
  snprintf(yname, sizeof yname, "%s:%d", floe_node_name(y.node), y.index);
  snprintf(dxname, sizeof dxname, "%s:%d", floe_node_name(dx.node), dx.index);
  FloeSession *s = session_new(g);
  FloeFeed f = {floe_node_name(x.node), xv};
  const char *fetch = dxname;
  FloeTensor *grad;
  run_ok(s, &f, 1, &fetch, 1, &grad);
  int64_t n = floe_tensor_num_elements(xv);
  ck_assert_int_eq(floe_tensor_num_elements(grad), n);
  double *xd = floe_tensor_data(xv);
  const double *wd = floe_tensor_data(wv);
  const double eps = 1e-6;
  for (int64_t j = 0; j < n; j++) {
    double f2[2], x0 = xd[j];
    for (int side = 0; side < 2; side++) {
      xd[j] = x0 + (side ? -eps : eps);
      FloeTensor *yv;
      const char *yf = yname;
      run_ok(s, &f, 1, &yf, 1, &yv);
      ck_assert_int_eq(floe_tensor_num_elements(yv), floe_tensor_num_elements(wv));
      double sum = 0;
      for (int64_t k = 0; k < floe_tensor_num_elements(yv); k++) sum += harness_get(yv, k) * wd[k];
      f2[side] = sum;
      floe_tensor_release(yv);
    }
    xd[j] = x0;
    double fd = (f2[0] - f2[1]) / (2 * eps), got = harness_get(grad, j);
    ck_assert_msg(fabs(got - fd) <= 1e-6 * (1 + fabs(fd)), "%s: d/dx[%lld] = %.10g, finite "
                  "differences say %.10g", what, (long long)j, got, fd);
  }
  floe_tensor_release(grad);
  floe_session_free(s);
}

static FloeTensor *random_f64(int rank, const int64_t *dims, uint64_t seed) {
  return harness_random(FLOE_F64, rank, dims, seed, -1, 1);
}

/* unstack -> read some (one twice) -> math -> write -> stack, into an array larger than x
 * has rows (its gradient is sliced back to x's rows), with index 1 never read (its gradient
 * is zeros). */
START_TEST(gradient_unstack_read_write_stack) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, (int64_t[]){4, 3}));
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.clear_after_read = 0;
  FloeTensorArray in = floe_tensor_array(g, "in", FLOE_F64, ci32(g, 5), &o);
  in = floe_ta_unstack(g, "unstack", in, x);
  FloeOutput r0 = floe_ta_read(g, "r0", in, ci32(g, 0));
  FloeOutput r2 = floe_ta_read(g, "r2", in, ci32(g, 2));
  FloeOutput r2b = floe_ta_read(g, "r2b", in, ci32(g, 2));
  FloeOutput r3 = floe_ta_read(g, "r3", in, ci32(g, 3));
  FloeOutput y0 = floe_binary(g, "Mul", "y0", r0, r2);
  FloeOutput y1 = floe_unary(g, "Tanh", "y1", r2b);
  FloeOutput y2 = floe_binary(g, "Mul", "y2", r3, floe_unary(g, "Sin", "sin3", r0));
  FloeTensorArray out = floe_tensor_array(g, "out", FLOE_F64, ci32(g, 3), NULL);
  out = floe_ta_write(g, "w0", out, ci32(g, 0), y0);
  out = floe_ta_write(g, "w1", out, ci32(g, 1), y1);
  out = floe_ta_write(g, "w2", out, ci32(g, 2), y2);
  FloeOutput y = floe_ta_stack(g, "y", out);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = random_f64(2, (int64_t[]){4, 3}, 11);
  FloeTensor *wv = random_f64(2, (int64_t[]){3, 3}, 12);
  check_gradient(g, x, y, wv, xv, "unstack/read/write/stack");
  floe_tensor_release(xv);
  floe_tensor_release(wv);
  floe_graph_free(g);
}
END_TEST

/* split -> read (elements of 2, 1 and 3 rows) -> math -> write -> concat: the gradient
 * splits into the gradient array and concatenates it back. */
START_TEST(gradient_split_read_write_concat) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, (int64_t[]){6, 2}));
  FloeOutput lengths = ci64v(g, (const int64_t[]){2, 1, 3}, 3);
  FloeTensorArray in = floe_tensor_array(g, "in", FLOE_F64, ci32(g, 3), NULL);
  in = floe_ta_split(g, "split", in, x, lengths);
  FloeOutput r0 = floe_ta_read(g, "r0", in, ci32(g, 0));
  FloeOutput r1 = floe_ta_read(g, "r1", in, ci32(g, 1));
  FloeOutput r2 = floe_ta_read(g, "r2", in, ci32(g, 2));
  FloeTensorArray out = floe_tensor_array(g, "out", FLOE_F64, ci32(g, 3), NULL);
  out = floe_ta_write(g, "w0", out, ci32(g, 0), floe_unary(g, "Tanh", NULL, r2));
  out = floe_ta_write(g, "w1", out, ci32(g, 1), floe_binary(g, "Mul", NULL, r0, r0));
  out = floe_ta_write(g, "w2", out, ci32(g, 2), floe_unary(g, "Sin", NULL, r1));
  FloeOutput y = floe_ta_concat(g, "y", out, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = random_f64(2, (int64_t[]){6, 2}, 31);
  FloeTensor *wv = random_f64(2, (int64_t[]){6, 2}, 32);
  check_gradient(g, x, y, wv, xv, "split/read/write/concat");
  floe_tensor_release(xv);
  floe_tensor_release(wv);
  floe_graph_free(g);
}
END_TEST

/* scatter -> gather with repeated indices: the gradient of the repeated element is the sum
 * of its rows' gradients (summed writes into the gradient array). */
START_TEST(gradient_scatter_gather_repeats) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, (int64_t[]){3, 2}));
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  o.clear_after_read = 0;
  FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F64, ci32(g, 3), &o);
  ta = floe_ta_scatter(g, "scatter", ta, ci32v(g, (const int32_t[]){2, 0, 1}, 3), x);
  FloeOutput ga = floe_ta_gather(g, "gather", ta, ci32v(g, (const int32_t[]){0, 0, 2, 1, 0}, 5));
  FloeOutput y = floe_binary(g, "Mul", "sq", ga, ga);
  FloeTensor *xv = random_f64(2, (int64_t[]){3, 2}, 21);
  FloeTensor *wv = random_f64(2, (int64_t[]){5, 2}, 22);
  check_gradient(g, x, y, wv, xv, "scatter/gather with repeats");
  floe_tensor_release(xv);
  floe_tensor_release(wv);
  floe_graph_free(g);
}
END_TEST

/* write -> read of the same element twice and a gather, mixing the op kinds: three paths
 * into one element's gradient. */
START_TEST(gradient_write_read_gather) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, shape1(3));
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.clear_after_read = 0;
  FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F64, ci32(g, 2), &o);
  ta = floe_ta_write(g, "w0", ta, ci32(g, 0), x);
  ta = floe_ta_write(g, "w1", ta, ci32(g, 1), floe_unary(g, "Exp", "ex", x));
  FloeOutput a = floe_ta_read(g, "a", ta, ci32(g, 0));
  FloeOutput b = floe_ta_read(g, "b", ta, ci32(g, 1));
  FloeOutput both = floe_ta_gather(g, "both", ta, ci32v(g, (const int32_t[]){1, 0}, 2));
  FloeOutput ab = floe_binary(g, "Mul", "ab", a, b);
  FloeOutput y = floe_binary(g, "Mul", "y", both, ab); /* [2,3] * [3] */
  FloeTensor *xv = random_f64(1, (int64_t[]){3}, 31);
  FloeTensor *wv = random_f64(2, (int64_t[]){2, 3}, 32);
  check_gradient(g, x, y, wv, xv, "write/read/gather");
  floe_tensor_release(xv);
  floe_tensor_release(wv);
  floe_graph_free(g);
}
END_TEST

/* ---- step scoping ---- */

START_TEST(handle_from_an_earlier_run) {
  FloeGraph *g = floe_graph_new();
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F32, ci32(g, 2), &o);
  ta = floe_ta_write(g, "w", ta, ci32(g, 0),
                     cval(g, FLOE_F32, 1, (int64_t[]){2}, (const double[]){1, 2}));
  floe_ta_read(g, "r", ta, ci32(g, 0));
  FloeOutput st = floe__stack_new(g, "st", FLOE_F32, 0);
  floe__stack_pop(g, "pop", st, FLOE_F32, floe_shape_unknown(), NULL);
  floe_variable(g, "var", FLOE_F32, shape1(2), floe_init_zeros());
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = session_new(g);
  const char *fetches[] = {"ta:0", "r", "st"};
  FloeTensor *out[3];
  run_ok(s, NULL, 0, fetches, 3, out);
  ck_assert_int_eq(floe_tensor_dtype(out[0]), FLOE_RESOURCE);
  /* Fed back into a later run, the handles name objects of a step that ended. */
  FloeFeed f = {"ta:0", out[0]};
  const char *r = "r";
  FloeTensor *v = NULL;
  char *msg;
  ck_assert_int_eq(run(s, &f, 1, &r, 1, NULL, &v, &msg), FLOE_FAILED_PRECONDITION);
  mentions(msg, "the TensorArray this handle named no longer exists");
  free(msg);
  FloeFeed fs = {"st", out[2]};
  const char *pop = "pop";
  ck_assert_int_eq(run(s, &fs, 1, &pop, 1, NULL, &v, &msg), FLOE_FAILED_PRECONDITION);
  mentions(msg, "the stack this handle named no longer exists");
  free(msg);
  /* A stack's handle where a TensorArray's is expected, and a handle of no object. */
  FloeFeed fx = {"ta:0", out[2]};
  ck_assert_int_eq(run(s, &fx, 1, &r, 1, NULL, &v, &msg), FLOE_FAILED_PRECONDITION);
  free(msg);
  FloeTensor *zero = floe_tensor_new(FLOE_RESOURCE, 0, NULL, NULL);
  FloeFeed fz = {"ta:0", zero};
  ck_assert_int_eq(run(s, &fz, 1, &r, 1, NULL, &v, &msg), FLOE_INVALID_ARGUMENT);
  mentions(msg, "resource handles cannot be fed");
  free(msg);
  floe_tensor_release(zero);
  /* A TensorArray's handle fed where a variable's goes. */
  FloeFeed fv = {"var", out[0]};
  const char *vr = "var/read";
  ck_assert_int_eq(run(s, &fv, 1, &vr, 1, NULL, &v, &msg), FLOE_INVALID_ARGUMENT);
  mentions(msg, "expected a variable's handle");
  free(msg);
  /* The session still works. */
  run_ok(s, NULL, 0, &r, 1, &v);
  assert_values(v, (const double[]){1, 2}, 2, "read after the failed runs");
  floe_tensor_release(v);
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- concurrency ---- */

enum { NW = 32, WLEN = 1100 }; /* > 1,024 elements: the products do not run inline */

/* NW writes, each of a product computed on its own (large enough not to run inline), into
 * a dynamic array that starts empty (each write may grow it), and NW more into index 0 of
 * the gradient array of a one-element array (each adds to the same sum). The stack and the
 * read wait for every write's flow. */
static FloeGraph *many_writes_graph(void) {
  FloeGraph *g = floe_graph_new();
  FloeOutput base = floe_placeholder(g, "base", FLOE_F32, shape1(WLEN));
  FloeTensorArrayOptions o;
  floe_tensor_array_options_init(&o);
  o.dynamic_size = 1;
  FloeTensorArray ta = floe_tensor_array(g, "many", FLOE_F32, ci32(g, 0), &o);
  FloeTensorArray one = floe_tensor_array(g, "one", FLOE_F32, ci32(g, 1), NULL);
  one = floe_ta_write(g, "one_w", one, ci32(g, 0), base);
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayGradV3", "one_grad");
  floe_node_add_input(b, one.handle);
  floe_node_add_input(b, one.flow);
  floe_node_set_attr_string(b, "source", "test");
  FloeNode *gn = floe_node_finish(b);
  FloeTensorArray grad = {floe_out(gn, 0), floe_out(gn, 1)};
  FloeOutput flows[NW], gflows[NW];
  for (int i = 0; i < NW; i++) {
    FloeOutput k = cval(g, FLOE_F32, 0, NULL, (const double[]){i + 1.0});
    FloeOutput v = floe_binary(g, "Mul", NULL, base, k);
    flows[i] = floe_ta_write(g, NULL, ta, ci32(g, i), v).flow;
    gflows[i] = floe_ta_write(g, NULL, grad, ci32(g, 0), v).flow;
  }
  b = floe_node_begin(g, "AddN", "all_written");
  floe_node_add_input_list(b, flows, NW);
  ta.flow = floe_out(floe_node_finish(b), 0);
  floe_ta_stack(g, "stacked", ta);
  b = floe_node_begin(g, "AddN", "all_summed");
  floe_node_add_input_list(b, gflows, NW);
  grad.flow = floe_out(floe_node_finish(b), 0);
  floe_ta_read(g, "sum", grad, ci32(g, 0));
  return g;
}

static FloeTensor *many_base(void) {
  double v[WLEN];
  for (int j = 0; j < WLEN; j++) v[j] = (j % 97) * 0.25 - 3;
  return harness_from_doubles(FLOE_F32, 1, (int64_t[]){WLEN}, v);
}

/* Every product of base is a multiple of 0.25 below 2^13: sums of them are exact in f32,
 * in any order. */
static void check_many(FloeSession *s, FloeTensor *base) {
  FloeFeed f = {"base", base};
  const char *fetches[] = {"stacked", "sum"};
  FloeTensor *out[2];
  run_ok(s, &f, 1, fetches, 2, out);
  assert_shape(floe_tensor_shape(out[0]), 2, (int64_t[]){NW, WLEN}, "stack of the writes");
  const float *d = floe_tensor_data(out[0]), *bd = floe_tensor_data(base);
  int bad = -1;
  for (int i = 0; i < NW * WLEN && bad < 0; i++)
    if (d[i] != bd[i % WLEN] * (float)(i / WLEN + 1)) bad = i;
  ck_assert_msg(bad < 0, "row %d [%d] = %g, want %g", bad / WLEN, bad % WLEN, d[bad],
                bd[bad % WLEN] * (float)(bad / WLEN + 1));
  const float *sum = floe_tensor_data(out[1]);
  for (int j = 0; j < WLEN && bad < 0; j++)
    if (sum[j] != bd[j] * (float)(NW * (NW + 1) / 2)) bad = j;
  ck_assert_msg(bad < 0, "summed gradient [%d] = %g, want %g", bad, sum[bad],
                bd[bad] * (float)(NW * (NW + 1) / 2));
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
}

START_TEST(concurrent_writes_in_one_step) {
  FloeGraph *g = many_writes_graph();
  FloeSession *s = session_new(g);
  FloeTensor *base = many_base();
  for (int rep = 0; rep < 4; rep++) check_many(s, base);
  floe_tensor_release(base);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

typedef struct StepArg {
  FloeSession *s;
  FloeTensor *base;
} StepArg;

static void *steps_thread(void *p) {
  StepArg *a = p;
  for (int rep = 0; rep < 3; rep++) check_many(a->s, a->base);
  return NULL;
}

/* Concurrent steps of one session: each has its own array. */
START_TEST(concurrent_steps) {
  FloeGraph *g = many_writes_graph();
  FloeSession *s = session_new(g);
  FloeTensor *base = many_base();
  StepArg a = {s, base};
  pthread_t t[3];
  for (int i = 0; i < 3; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, steps_thread, &a), 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  floe_tensor_release(base);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- stacks ---- */

START_TEST(stack_push_pop_order) {
  FloeGraph *g = floe_graph_new();
  FloeOutput h = floe__stack_new(g, "st", FLOE_F32, 0);
  FloeOutput one = cval(g, FLOE_F32, 0, NULL, (const double[]){1});
  /* Each push's element depends on the one before: pushes 1, 2, 3 in that order. */
  FloeOutput p1 = floe__stack_push(g, "p1", h, one, false, NULL);
  FloeOutput p2 = floe__stack_push(g, "p2", h, floe_binary(g, "Add", NULL, p1, one), true, NULL);
  FloeOutput p3 = floe__stack_push(g, "p3", h, floe_binary(g, "Add", NULL, p2, one), false, NULL);
  FloeOutput o1 = floe__stack_pop(g, "o1", h, FLOE_F32, floe_shape_scalar(), p3.node);
  FloeOutput o2 = floe__stack_pop(g, "o2", h, FLOE_F32, floe_shape_unknown(), o1.node);
  floe__stack_pop(g, "o3", h, FLOE_F32, floe_shape_unknown(), o2.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_int_eq(floe_node_output_shape(o1.node, 0).rank, 0);
  ck_assert_int_eq(floe_node_output_shape(p2.node, 0).rank, 0);
  FloeSession *s = session_new(g);
  const char *fetches[] = {"o1", "o2", "o3", "p3"};
  FloeTensor *out[4];
  for (int rep = 0; rep < 3; rep++) { /* a fresh stack each step */
    run_ok(s, NULL, 0, fetches, 4, out);
    assert_values(out[0], (const double[]){3}, 1, "first pop");
    assert_values(out[1], (const double[]){2}, 1, "second pop");
    assert_values(out[2], (const double[]){1}, 1, "third pop");
    assert_values(out[3], (const double[]){3}, 1, "the push's output");
    ck_assert_ptr_eq(out[0], out[3]); /* the pushed tensor itself, no copy */
    for (int i = 0; i < 4; i++) floe_tensor_release(out[i]);
  }
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(stack_errors) {
  FloeGraph *g = floe_graph_new();
  FloeOutput h = floe__stack_new(g, "st", FLOE_F32, 0);
  floe__stack_pop(g, "empty", h, FLOE_F32, floe_shape_unknown(), NULL);
  FloeOutput small = floe__stack_new(g, "small", FLOE_F32, 2);
  FloeOutput v2 = cval(g, FLOE_F32, 1, (int64_t[]){2}, (const double[]){1, 2});
  FloeOutput a = floe__stack_push(g, "a", small, v2, false, NULL);
  FloeOutput b = floe__stack_push(g, "b", small, v2, false, a.node);
  floe__stack_push(g, "c", small, v2, false, b.node);
  floe__stack_push(g, "int", h, ci32(g, 1), false, NULL);
  FloeOutput top = floe__stack_push(g, "top", h, v2, false, NULL);
  floe__stack_pop(g, "as_f64", h, FLOE_F64, floe_shape_unknown(), top.node);
  floe__stack_pop(g, "as_3", h, FLOE_F32, shape1(3), top.node);
  FloeOutput h2 = floe__stack_new(g, "closing", FLOE_F32, 0);
  FloeOutput pushed = floe__stack_push(g, "pushed", h2, v2, false, NULL);
  FloeNodeBuilder *nb = floe_node_begin(g, "StackCloseV2", "close");
  floe_node_add_input(nb, h2);
  floe_node_add_control_input(nb, pushed.node);
  FloeNode *close = floe_node_finish(nb);
  floe__stack_pop(g, "after_close", h2, FLOE_F32, floe_shape_unknown(), close);
  floe__stack_close(g, "close_st", h);
  nb = floe_node_begin(g, "StackV2", "unnamed_node");
  floe_node_add_input(nb, ci32(g, 0));
  floe_node_set_attr_type(nb, "elem_type", FLOE_F32);
  floe_node_set_attr_string(nb, "stack_name", "named");
  FloeOutput named = floe_out(floe_node_finish(nb), 0);
  floe__stack_pop(g, "named_pop", named, FLOE_F32, floe_shape_unknown(), NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  const char *empty[] = {"node 'empty' (StackPopV2)", "stack 'st' is empty", NULL};
  expect_error(g, NULL, 0, "empty", FLOE_INVALID_ARGUMENT, empty);
  const char *full[] = {"node 'c'", "stack 'small' is full: it holds its max_size of 2", NULL};
  expect_error(g, NULL, 0, "c", FLOE_INVALID_ARGUMENT, full);
  const char *dt[] = {"stack 'st' holds f32; could not push a i32 tensor", NULL};
  expect_error(g, NULL, 0, "int", FLOE_INVALID_ARGUMENT, dt);
  const char *pop_dt[] = {"stack 'st' holds f32 but this node pops f64", NULL};
  expect_error(g, NULL, 0, "as_f64", FLOE_INVALID_ARGUMENT, pop_dt);
  const char *pop_sh[] = {"stack 'st': the top element has shape [2] but this node pops [3]",
                          NULL};
  expect_error(g, NULL, 0, "as_3", FLOE_INVALID_ARGUMENT, pop_sh);
  const char *closed[] = {"stack 'closing' has been closed", NULL};
  expect_error(g, NULL, 0, "after_close", FLOE_FAILED_PRECONDITION, closed);
  const char *named_empty[] = {"node 'named_pop'", "stack 'named' is empty", NULL};
  expect_error(g, NULL, 0, "named_pop", FLOE_INVALID_ARGUMENT, named_empty);
  FloeSession *s = session_new(g);
  char *msg;
  ck_assert_int_eq(run(s, NULL, 0, NULL, 0, "close_st", NULL, &msg), FLOE_OK);
  free(msg);
  floe_session_free(s);
  /* max_size beyond i32 fails when built. */
  floe__stack_new(g, "huge", FLOE_F32, (int64_t)1 << 40);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  mentions(floe_graph_error(g, NULL), "stack 'huge': max_size 1099511627776");
  floe_graph_free(g);
}
END_TEST

enum { NP = 24, PLEN = WLEN };

/* NP pushes that may run concurrently, then NP pops after all of them: the pops return
 * each pushed element once. */
START_TEST(stack_concurrent_pushes) {
  FloeGraph *g = floe_graph_new();
  FloeOutput base = floe_placeholder(g, "base", FLOE_F32, shape1(PLEN));
  FloeOutput h = floe__stack_new(g, "st", FLOE_F32, NP);
  FloeNodeBuilder *all = floe_node_begin(g, "NoOp", "all_pushed");
  for (int i = 0; i < NP; i++) {
    FloeOutput k = cval(g, FLOE_F32, 0, NULL, (const double[]){i + 1.0});
    FloeOutput p = floe__stack_push(g, NULL, h, floe_binary(g, "Mul", NULL, base, k), false, NULL);
    floe_node_add_control_input(all, p.node);
  }
  FloeNode *after = floe_node_finish(all);
  const char *fetches[NP];
  char names[NP][16];
  for (int i = 0; i < NP; i++) {
    snprintf(names[i], sizeof names[i], "pop%d", i);
    fetches[i] = names[i];
    after = floe__stack_pop(g, names[i], h, FLOE_F32, shape1(PLEN), after).node;
  }
  FloeSession *s = session_new(g);
  FloeTensor *bv = many_base();
  FloeFeed f = {"base", bv};
  const float *bd = floe_tensor_data(bv);
  for (int rep = 0; rep < 3; rep++) {
    FloeTensor *out[NP];
    run_ok(s, &f, 1, fetches, NP, out);
    bool seen[NP] = {false};
    for (int i = 0; i < NP; i++) {
      const float *d = floe_tensor_data(out[i]);
      int k = (int)lroundf(d[1] / bd[1]) - 1; /* base[1] = -2.75 */
      ck_assert_msg(k >= 0 && k < NP && !seen[k], "pop %d: unexpected element", i);
      seen[k] = true;
      int bad = -1;
      for (int j = 0; j < PLEN && bad < 0; j++)
        if (d[j] != bd[j] * (float)(k + 1)) bad = j;
      ck_assert_msg(bad < 0, "pop %d [%d] = %g, want %g", i, bad, d[bad], bd[bad] * (k + 1));
      floe_tensor_release(out[i]);
    }
  }
  floe_tensor_release(bv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- allocation failures ---- */

/* One step with every kind of object and op: unstack (views), read, gather, a gradient
 * array (made, summed, zero-filled, stacked) and a stack push and pop. */
static FloeGraph *walk_graph(void) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (int64_t[]){3, 2}));
  FloeTensorArrayOptions o = opts_elem(shape1(2));
  o.clear_after_read = 0;
  FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F32, ci32(g, 3), &o);
  ta = floe_ta_unstack(g, "unstack", ta, x);
  FloeOutput r = floe_ta_read(g, "r", ta, ci32(g, 1));
  floe_ta_gather(g, "gather", ta, ci32v(g, (const int32_t[]){2, 0}, 2));
  FloeTensorArray gr = grad_of(g, "grad", ta);
  gr = floe_ta_write(g, "g1", gr, ci32(g, 0), r);
  gr = floe_ta_write(g, "g2", gr, ci32(g, 0), r);
  floe_ta_stack(g, "gstack", gr);
  FloeOutput h = floe__stack_new(g, "st", FLOE_F32, 0);
  FloeOutput p = floe__stack_push(g, "push", h, r, false, NULL);
  floe__stack_pop(g, "pop", h, FLOE_F32, shape1(2), p.node);
  return g;
}

/* For N = 1, 2, ... the Nth core allocation of a step (and every later one) fails: the
 * step ends in FLOE_NO_MEMORY with a message, or, once N is past its last allocation, in
 * the right values. Leaks of the failure paths are caught by make check-asan. */
START_TEST(step_allocation_failures) {
  FloeGraph *g = walk_graph();
  FloeSession *s = session_new(g);
  const double xs[6] = {1, 2, 3, 4, 5, 6};
  FloeTensor *xv = harness_from_doubles(FLOE_F32, 2, (int64_t[]){3, 2}, xs);
  FloeFeed f = {"x", xv};
  const char *fetches[] = {"gather", "gstack", "pop"};
  FloeStatus *st = floe_status_new();
  bool done = false;
  long n;
  for (n = 1; n < 100000 && !done; n++) {
    FloeTensor *out[3] = {NULL, NULL, NULL};
    floe_status_clear(st);
    floe_test_fail_alloc_after(n);
    floe_code rc = floe_session_run(s, &f, 1, fetches, 3, NULL, 0, out, st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      assert_values(out[0], (const double[]){5, 6, 1, 2}, 4, "gather");
      assert_values(out[1], (const double[]){6, 8, 0, 0, 0, 0}, 6, "gradient stack");
      assert_values(out[2], (const double[]){3, 4}, 2, "pop");
      for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
      done = true;
      break;
    }
    ck_assert_msg(rc == FLOE_NO_MEMORY, "N=%ld: expected NO_MEMORY, got %s: %s", n,
                  floe_code_name(rc), floe_status_message(st));
    ck_assert_msg(strlen(floe_status_message(st)) > 0, "N=%ld: no message", n);
    for (int i = 0; i < 3; i++) ck_assert_ptr_null(out[i]);
  }
  ck_assert_msg(done, "never succeeded");
  ck_assert_int_gt(n, 10);
  floe_status_free(st);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* The coverage list of test_gradients: every op of ops_rnn.def is differentiated here or
 * registered as not differentiable. */
START_TEST(gradient_registrations) {
  const char *grads[] = {"TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3",
                         "TensorArrayScatterV3", "TensorArrayStackV3", "TensorArrayUnstackV3"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(grads); i++)
    ck_assert_msg(floe_op_has_gradient(grads[i]), "%s", grads[i]);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tensor_array");
  TCase *tc = tcase_create("values");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, write_read_size);
  tcase_add_test(tc, dynamic_size_grows);
  tcase_add_test(tc, unstack_gather_stack_scatter);
  tcase_add_test(tc, stack_of_nothing);
  tcase_add_test(tc, concat_ragged_elements);
  tcase_add_test(tc, split_then_concat);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, errors_of_writes);
  tcase_add_test(tc, errors_of_reads);
  tcase_add_test(tc, errors_of_gather_scatter_stack);
  tcase_add_test(tc, errors_name_and_close);
  tcase_add_test(tc, errors_when_building);
  tcase_add_test(tc, handle_from_an_earlier_run);
  suite_add_tcase(s, tc);
  tc = tcase_create("gradients");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, gradient_array_sums_and_zero_fills);
  tcase_add_test(tc, gradient_unstack_read_write_stack);
  tcase_add_test(tc, gradient_scatter_gather_repeats);
  tcase_add_test(tc, gradient_split_read_write_concat);
  tcase_add_test(tc, gradient_write_read_gather);
  tcase_add_test(tc, gradient_registrations);
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, concurrent_writes_in_one_step);
  tcase_add_test(tc, concurrent_steps);
  suite_add_tcase(s, tc);
  tc = tcase_create("stacks");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, stack_push_pop_order);
  tcase_add_test(tc, stack_errors);
  tcase_add_test(tc, stack_concurrent_pushes);
  suite_add_tcase(s, tc);
  tc = tcase_create("alloc_fail");
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, step_allocation_failures);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
