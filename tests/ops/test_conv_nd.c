/* SPDX-License-Identifier: Apache-2.0 */
/* test_conv_nd.c - the N-d Conv, ConvTranspose, Pool and MaxPoolWithIndices (ops_conv.def).
 *
 * The f32 paths (oneDNN) are checked against the f64 reference loops on the same values;
 * ConvTranspose, which runs the reference loop in every dtype, is checked as Conv's adjoint
 * (<Conv(u, w), x> = <u, ConvTranspose(x, w)> for every u and x), which it is by definition;
 * MaxPoolWithIndices' indices are checked by reading the input back at them. Bad attributes
 * and shapes give errors naming what is wrong. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The attributes of one case: lists of `rank` entries (pads: 2 * rank), 0 entries = unset. */
typedef struct Win {
  const char *format, *padding, *pool;
  int rank;
  int64_t strides[5], dil[5], ksize[5], pads[10], op[5];
  int64_t groups;
  bool ceil, incl;
  int64_t storage;
} Win;

static void set_list(FloeNodeBuilder *b, const char *name, const int64_t *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i]) {
      floe_node_set_attr_int_list(b, name, v, n);
      return;
    }
}

static void set_win(FloeNodeBuilder *b, void *arg) {
  const Win *w = arg;
  if (w->format) floe_node_set_attr_string(b, "data_format", w->format);
  if (w->padding) floe_node_set_attr_string(b, "padding", w->padding);
  set_list(b, "strides", w->strides, w->rank);
  set_list(b, "dilations", w->dil, w->rank);
  set_list(b, "ksize", w->ksize, w->rank);
  set_list(b, "explicit_paddings", w->pads, 2 * w->rank);
  set_list(b, "output_padding", w->op, w->rank);
  if (w->groups) floe_node_set_attr_int(b, "groups", w->groups);
  if (w->pool) {
    floe_node_set_attr_string(b, "pooling_type", w->pool);
    floe_node_set_attr_bool(b, "ceil_mode", w->ceil);
    floe_node_set_attr_bool(b, "count_include_pad", w->incl);
  }
  if (w->storage) floe_node_set_attr_int(b, "storage_order", w->storage);
}

/* op on inputs, in f32 and again in f64 (the same values): the outputs must agree. */
static void check_f32_vs_f64(const char *op, const Win *w, int n_in, const int64_t dims[][5],
                             const char *what) {
  FloeTensor *in32[2], *in64[2], *o32 = NULL, *o64 = NULL;
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < n_in; i++) {
    in64[i] = harness_random(FLOE_F64, w->rank, dims[i], 11 + (uint64_t)i, -1, 1);
    double *v = harness_values(in64[i]);
    in32[i] = harness_from_doubles(FLOE_F32, w->rank, dims[i], v);
    free(v);
    floe_tensor_release(in64[i]);
    v = harness_values(in32[i]); /* f64 inputs hold exactly the f32 values */
    in64[i] = harness_from_doubles(FLOE_F64, w->rank, dims[i], v);
    free(v);
  }
  ck_assert_msg(harness_run_op(op, NULL, in32, n_in, NULL, 0, set_win, (void *)w, &o32, 1, st) ==
                    FLOE_OK, "%s f32: %s", what, floe_status_message(st));
  ck_assert_msg(harness_run_op(op, NULL, in64, n_in, NULL, 0, set_win, (void *)w, &o64, 1, st) ==
                    FLOE_OK, "%s f64: %s", what, floe_status_message(st));
  double *v = harness_values(o64);
  int rank = floe_tensor_rank(o64);
  FloeTensor *want = harness_from_doubles(FLOE_F32, rank, floe_tensor_dims(o64), v);
  free(v);
  harness_assert_close(o32, want, 1e-4, 1e-5, what);
  floe_tensor_release(want);
  floe_tensor_release(o32);
  floe_tensor_release(o64);
  for (int i = 0; i < n_in; i++) {
    floe_tensor_release(in32[i]);
    floe_tensor_release(in64[i]);
  }
  floe_status_free(st);
}

START_TEST(conv_dnnl_matches_reference) {
  /* channels first, groups 2, stride 2, asymmetric explicit pads, dilation */
  Win a = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .rank = 4,
           .strides = {1, 1, 2, 2}, .dil = {1, 1, 1, 2}, .pads = {0, 0, 0, 0, 1, 0, 2, 1},
           .groups = 2};
  check_f32_vs_f64("Conv", &a, 2, (const int64_t[][5]){{2, 4, 9, 8}, {3, 2, 2, 6}},
                   "Conv 2-D groups pads dilation");
  /* channels last 1-D SAME stride 3 */
  Win b = {.padding = "SAME", .rank = 3, .strides = {1, 3, 1}};
  check_f32_vs_f64("Conv", &b, 2, (const int64_t[][5]){{3, 10, 5}, {4, 5, 7}}, "Conv 1-D SAME");
  /* channels first 3-D depthwise with pads */
  Win c = {.format = "CHANNELS_FIRST", .padding = "SAME", .rank = 5, .groups = 3};
  check_f32_vs_f64("Conv", &c, 2, (const int64_t[][5]){{1, 3, 4, 5, 6}, {3, 2, 3, 1, 3}},
                   "Conv 3-D depthwise SAME");
  /* channels last 3-D VALID, dilation, batch large enough to be cut into shards */
  Win d = {.rank = 5, .dil = {1, 2, 1, 1, 1}};
  check_f32_vs_f64("Conv", &d, 2, (const int64_t[][5]){{7, 6, 4, 4, 2}, {2, 2, 2, 2, 5}},
                   "Conv 3-D channels last dilation");
}
END_TEST

START_TEST(pool_dnnl_matches_reference) {
  Win a = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .pool = "MAX", .rank = 4,
           .ksize = {1, 1, 3, 2}, .strides = {1, 1, 2, 2}, .dil = {1, 1, 2, 1},
           .pads = {0, 0, 0, 0, 1, 1, 0, 1}, .ceil = true};
  check_f32_vs_f64("Pool", &a, 1, (const int64_t[][5]){{2, 3, 9, 6}}, "MAX dilated ceil");
  Win b = a;
  b.pool = "AVG";
  b.dil[2] = 1;
  check_f32_vs_f64("Pool", &b, 1, (const int64_t[][5]){{2, 3, 9, 6}}, "AVG ceil, pads excluded");
  Win c = b;
  c.incl = true;
  c.ceil = false;
  check_f32_vs_f64("Pool", &c, 1, (const int64_t[][5]){{2, 3, 9, 6}}, "AVG pads counted");
  c.ceil = true; /* a window past the padded input: the reference loop in both dtypes */
  check_f32_vs_f64("Pool", &c, 1, (const int64_t[][5]){{2, 3, 8, 6}}, "AVG pads counted, ceil");
  Win d = {.padding = "SAME", .pool = "AVG", .rank = 5, .ksize = {1, 2, 3, 2, 1},
           .strides = {1, 2, 2, 1, 1}};
  check_f32_vs_f64("Pool", &d, 1, (const int64_t[][5]){{3, 5, 4, 3, 2}}, "AVG 3-D SAME");
  /* one large channels-last image: MAX pooling cut into blocks of rows across the pool */
  Win e = {.padding = "SAME", .pool = "MAX", .rank = 4, .ksize = {1, 3, 3, 1},
           .strides = {1, 2, 2, 1}};
  check_f32_vs_f64("Pool", &e, 1, (const int64_t[][5]){{1, 33, 40, 64}}, "MAX rows SAME");
  Win f = {.padding = "EXPLICIT", .pool = "MAX", .rank = 4, .ksize = {1, 3, 2, 1},
           .strides = {1, 2, 3, 1}, .dil = {1, 2, 1, 1}, .pads = {0, 0, 1, 2, 0, 1, 0, 0},
           .ceil = true};
  check_f32_vs_f64("Pool", &f, 1, (const int64_t[][5]){{1, 30, 41, 64}},
                   "MAX rows dilated, pads, ceil");
  Win g = {.pool = "MAX", .rank = 3, .ksize = {1, 4, 1}, .strides = {1, 3, 1}};
  check_f32_vs_f64("Pool", &g, 1, (const int64_t[][5]){{1, 1000, 80}}, "MAX rows 1-D VALID");
}
END_TEST

/* AVG with counted padding and ceil_mode: the divisor counts the padded input, never past
 * it. [1,1,1,4] input 1,2,3,4, window 3, stride 2, pads (1, 1), ceil: windows [-1,1], [1,3],
 * [3,5] -> (0+1+2)/3, (2+3+4)/3, (4+0)/2 (position 5 is past the padded input). */
START_TEST(avg_pool_ceil_divisor) {
  Win w = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .pool = "AVG", .rank = 4,
           .ksize = {1, 1, 1, 3}, .strides = {1, 1, 1, 2}, .pads = {0, 0, 0, 0, 0, 0, 1, 1},
           .ceil = true, .incl = true};
  for (int dt = 0; dt < 2; dt++) {
    int64_t dims[4] = {1, 1, 1, 4}, odims[4] = {1, 1, 1, 3};
    double x[4] = {1, 2, 3, 4}, y[3] = {1, 3, 2};
    FloeDType t = dt ? FLOE_F64 : FLOE_F32;
    FloeTensor *in = harness_from_doubles(t, 4, dims, x), *out = NULL;
    FloeTensor *want = harness_from_doubles(t, 4, odims, y);
    FloeStatus *st = floe_status_new();
    ck_assert_msg(harness_run_op("Pool", NULL, &in, 1, NULL, 0, set_win, &w, &out, 1, st) ==
                      FLOE_OK, "%s", floe_status_message(st));
    harness_assert_close(out, want, 1e-6, 1e-6, "AVG ceil divisor");
    floe_tensor_release(in);
    floe_tensor_release(out);
    floe_tensor_release(want);
    floe_status_free(st);
  }
}
END_TEST

static double dot(const FloeTensor *a, const FloeTensor *b) {
  int64_t n = floe_tensor_num_elements(a);
  ck_assert_int_eq(n, floe_tensor_num_elements(b));
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += harness_get(a, i) * harness_get(b, i);
  return s;
}

/* <Conv(u, w), x> == <u, ConvTranspose(x, w)> with u shaped like ConvTranspose's output. */
static void check_adjoint(Win *w, const int64_t *u_dims, const int64_t *f_dims,
                          const int64_t *x_dims, const char *what) {
  FloeStatus *st = floe_status_new();
  FloeTensor *u = harness_random(FLOE_F64, w->rank, u_dims, 3, -1, 1);
  FloeTensor *f = harness_random(FLOE_F64, w->rank, f_dims, 4, -1, 1);
  FloeTensor *x = harness_random(FLOE_F64, w->rank, x_dims, 5, -1, 1);
  FloeTensor *cu = NULL, *tx = NULL, *in[2] = {u, f};
  Win fwd = *w;
  memset(fwd.op, 0, sizeof fwd.op);
  ck_assert_msg(harness_run_op("Conv", NULL, in, 2, NULL, 0, set_win, &fwd, &cu, 1, st) == FLOE_OK,
                "%s Conv: %s", what, floe_status_message(st));
  in[0] = x;
  ck_assert_msg(harness_run_op("ConvTranspose", NULL, in, 2, NULL, 0, set_win, w, &tx, 1, st) ==
                    FLOE_OK, "%s ConvTranspose: %s", what, floe_status_message(st));
  for (int i = 0; i < w->rank; i++) {
    ck_assert_int_eq(floe_tensor_dims(cu)[i], x_dims[i]);
    ck_assert_int_eq(floe_tensor_dims(tx)[i], u_dims[i]);
  }
  double l = dot(cu, x), r = dot(u, tx);
  ck_assert_msg(fabs(l - r) <= 1e-9 * (1 + fabs(l)), "%s: <Conv u, x> %.12g != <u, ConvT x> %.12g",
                what, l, r);
  floe_tensor_release(u), floe_tensor_release(f), floe_tensor_release(x);
  floe_tensor_release(cu), floe_tensor_release(tx);
  floe_status_free(st);
}

START_TEST(conv_transpose_is_adjoint) {
  /* u [1,4,8,7] -(filter [3,2,2,3], groups 2, stride 2x3, pads (1,0),(2,1), dilation 2x1)->
   * x [1,3,3,3]; 8+1+0-5 = 4 -> 3 rows, remainder 0; 7+2+1-2 = 8 -> 3 cols, remainder 2:
   * output_padding 0 and 2 makes the transpose's output u's shape again. */
  Win a = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .rank = 4,
           .strides = {1, 1, 2, 3}, .dil = {1, 1, 2, 1}, .pads = {0, 0, 0, 0, 1, 0, 2, 1},
           .op = {0, 0, 0, 2}, .groups = 2};
  /* Conv filter [k..., in / groups, out]: in = 4 (u's channels), out = 6 (x's channels). */
  check_adjoint(&a, (const int64_t[]){1, 4, 8, 7}, (const int64_t[]){3, 2, 2, 6},
                (const int64_t[]){1, 6, 3, 3}, "2-D groups");
  /* channels last 1-D */
  Win b = {.rank = 3, .strides = {1, 2, 1}, .op = {0, 1, 0}};
  check_adjoint(&b, (const int64_t[]){2, 9, 3}, (const int64_t[]){2, 3, 4},
                (const int64_t[]){2, 4, 4}, "1-D");
  /* 3-D */
  Win c = {.format = "CHANNELS_FIRST", .rank = 5, .strides = {1, 1, 2, 1, 2}};
  check_adjoint(&c, (const int64_t[]){1, 2, 5, 3, 5}, (const int64_t[]){3, 2, 3, 2, 2},
                (const int64_t[]){1, 2, 2, 2, 2}, "3-D");
}
END_TEST

START_TEST(max_pool_indices_point_at_maxima) {
  for (int order = 0; order < 2; order++) {
    Win w = {.padding = "EXPLICIT", .rank = 4, .ksize = {1, 1, 3, 2}, .strides = {1, 1, 2, 1},
             .pads = {0, 0, 0, 0, 1, 1, 0, 1}, .storage = order};
    int64_t dims[4] = {2, 3, 5, 4};
    FloeTensor *x = harness_random(FLOE_F32, 4, dims, 9, -1, 1), *out[2] = {NULL, NULL};
    FloeStatus *st = floe_status_new();
    ck_assert_msg(harness_run_op("MaxPoolWithIndices", NULL, &x, 1, NULL, 0, set_win, &w, out, 2,
                                 st) == FLOE_OK, "%s", floe_status_message(st));
    int64_t n = floe_tensor_num_elements(out[0]), H = 5, W = 4;
    for (int64_t i = 0; i < n; i++) {
      int64_t idx = (int64_t)harness_get(out[1], i), plane = idx / (H * W), sp = idx % (H * W);
      int64_t h = order ? sp % H : sp / W, wc = order ? sp / H : sp % W;
      double at = harness_get(x, plane * H * W + h * W + wc);
      ck_assert_msg(at == harness_get(out[0], i), "index %lld of output %lld reads %g, not %g",
                    (long long)idx, (long long)i, at, harness_get(out[0], i));
    }
    floe_tensor_release(x), floe_tensor_release(out[0]), floe_tensor_release(out[1]);
    floe_status_free(st);
  }
}
END_TEST

/* A bad attribute or shape: the error names it. */
static void expect_error(const char *op, int n_in, const int64_t dims[][5], int rank,
                         const Win *w, const char *needle) {
  FloeTensor *in[2], *out = NULL;
  for (int i = 0; i < n_in; i++) in[i] = harness_random(FLOE_F32, rank, dims[i], 1, -1, 1);
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, NULL, in, n_in, NULL, 0, set_win, (void *)w, &out, 1, st);
  ck_assert_msg(rc != FLOE_OK, "%s should fail (%s)", op, needle);
  ck_assert_msg(strstr(floe_status_message(st), needle), "'%s' does not say '%s'",
                floe_status_message(st), needle);
  if (out) floe_tensor_release(out);
  for (int i = 0; i < n_in; i++) floe_tensor_release(in[i]);
  floe_status_free(st);
}

START_TEST(bad_attributes_and_shapes) {
  Win groups = {.format = "CHANNELS_FIRST", .rank = 4, .groups = 3};
  expect_error("Conv", 2, (const int64_t[][5]){{1, 4, 5, 5}, {3, 3, 2, 6}}, 4, &groups,
               "groups");
  Win pads = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .rank = 4,
              .pads = {0, 0, 0, 0, 1, -1, 0, 0}};
  expect_error("Conv", 2, (const int64_t[][5]){{1, 2, 5, 5}, {3, 3, 2, 2}}, 4, &pads,
               "explicit_paddings");
  Win chan = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .rank = 4,
              .pads = {0, 0, 1, 1, 0, 0, 0, 0}};
  expect_error("Conv", 2, (const int64_t[][5]){{1, 2, 5, 5}, {3, 3, 2, 2}}, 4, &chan,
               "batch and channel");
  Win s3 = {.rank = 3, .strides = {1, 2, 2}}; /* 3 entries for a rank-4 input */
  expect_error("Conv", 2, (const int64_t[][5]){{1, 5, 5, 2}, {3, 3, 2, 2}}, 4, &s3, "strides");
  Win big = {.rank = 4};
  expect_error("Conv", 2, (const int64_t[][5]){{1, 2, 2, 2}, {3, 3, 2, 2}}, 4, &big, "window");
  Win fmt = {.format = "NCHW", .rank = 4};
  expect_error("Conv", 2, (const int64_t[][5]){{1, 2, 5, 5}, {3, 3, 2, 2}}, 4, &fmt,
               "CHANNELS_FIRST");
  Win rank2 = {.rank = 2};
  expect_error("Conv", 2, (const int64_t[][5]){{4, 4}, {2, 2}}, 2, &rank2, "rank");
  Win pool = {.pool = "MIN", .rank = 4, .ksize = {1, 2, 2, 1}};
  expect_error("Pool", 1, (const int64_t[][5]){{1, 4, 4, 2}}, 4, &pool, "pooling_type");
  Win nok = {.pool = "MAX", .rank = 4};
  expect_error("Pool", 1, (const int64_t[][5]){{1, 4, 4, 2}}, 4, &nok, "ksize");
  Win same_t = {.padding = "SAME", .rank = 4};
  expect_error("ConvTranspose", 2, (const int64_t[][5]){{1, 4, 4, 2}, {2, 2, 3, 2}}, 4, &same_t,
               "padding");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("conv_nd");
  TCase *tc = tcase_create("conv_nd");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, conv_dnnl_matches_reference);
  tcase_add_test(tc, pool_dnnl_matches_reference);
  tcase_add_test(tc, avg_pool_ceil_divisor);
  tcase_add_test(tc, conv_transpose_is_adjoint);
  tcase_add_test(tc, max_pool_indices_point_at_maxima);
  tcase_add_test(tc, bad_attributes_and_shapes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Two pool threads unless the caller chose, so batches are cut into shards. */
  setenv("FLOE_NUM_THREADS", "2", 0);
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
