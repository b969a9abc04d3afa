/* SPDX-License-Identifier: Apache-2.0 */
/* test_conv_nd_grad.c - the gradient ops of the N-d convolution and pooling ops
 * (ops_convgrad.def: ConvBackpropInputNd, ConvBackpropFilterNd, PoolGrad).
 *
 * Conv is bilinear, so its two gradients are fixed by <Conv(x, f), dy> = <x, dX> = <f, dF>
 * whatever dy is: checked in f64 (the reference loops) against the forward Conv; the f32
 * path (oneDNN, the batch cut into shards on a 4-thread pool) is checked against f64 on the
 * same values. PoolGrad is checked on hand-worked windows (ties, NaN, both AVG divisors with
 * ceil_mode), and MaxPoolWithIndices' gradient against a scatter-add through its own indices.
 * Bad shapes and attributes give errors naming the node and what is wrong.
 * (Finite-difference checks of all these are in core/test_gradients.) */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static FloeRuntime *rt;

static void setup(void) { rt = harness_runtime(4); }
static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* Window attributes of one case: lists of `rank` entries (pads 2 * rank); all-zero = unset. */
typedef struct Win {
  const char *format, *padding, *pool;
  int rank;
  int64_t strides[5], dil[5], ksize[5], pads[10];
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

static void set_win(FloeNodeBuilder *b, const Win *w) {
  if (w->format) floe_node_set_attr_string(b, "data_format", w->format);
  if (w->padding) floe_node_set_attr_string(b, "padding", w->padding);
  set_list(b, "strides", w->strides, w->rank);
  set_list(b, "dilations", w->dil, w->rank);
  set_list(b, "ksize", w->ksize, w->rank);
  set_list(b, "explicit_paddings", w->pads, 2 * w->rank);
  if (w->groups) floe_node_set_attr_int(b, "groups", w->groups);
  if (w->pool) {
    floe_node_set_attr_string(b, "pooling_type", w->pool);
    floe_node_set_attr_bool(b, "count_include_pad", w->incl);
  }
  if (w->ceil) floe_node_set_attr_bool(b, "ceil_mode", true);
  if (w->storage) floe_node_set_attr_int(b, "storage_order", w->storage);
}

/* op(ins) named "op" with w's attributes; placeholders of unknown shape when dyn. */
static FloeNode *add_op(FloeGraph *g, const char *op, const Win *w, FloeOutput *ins, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  set_win(b, w);
  return floe_node_finish(b);
}

/* Runs op once on the given values (fed through placeholders, of unknown shape when dyn) on
 * rt. Returns the status; out gets output 0 on success. */
static floe_code run_op(const char *op, const Win *w, FloeTensor *const *vals, int n, bool dyn,
                        FloeTensor **out, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  FloeOutput ins[4];
  FloeFeed feeds[4];
  char names[4][8];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    FloeShape s = dyn ? floe_shape_unknown() : floe_tensor_shape(vals[i]);
    ins[i] = floe_placeholder(g, names[i], floe_tensor_dtype(vals[i]), s);
    feeds[i] = (FloeFeed){names[i], vals[i]};
  }
  add_op(g, op, w, ins, n);
  floe_code rc = floe_graph_status(g);
  if (rc != FLOE_OK) {
    floe_graph_error(g, st);
    floe_graph_free(g);
    return rc;
  }
  FloeSession *s = harness_session(g, rt);
  const char *fetch = "op:0";
  rc = floe_session_run(s, feeds, n, &fetch, 1, NULL, 0, out, st);
  floe_session_free(s);
  floe_graph_free(g);
  return rc;
}

static FloeTensor *run_ok(const char *op, const Win *w, FloeTensor *const *vals, int n,
                          const char *what) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  if (run_op(op, w, vals, n, false, &out, st) != FLOE_OK)
    ck_abort_msg("%s %s: %s", what, op, floe_status_message(st));
  floe_status_free(st);
  return out;
}

static FloeTensor *sizes_of(const FloeTensor *t) {
  int64_t n = floe_tensor_rank(t);
  return harness_i64(1, &n, floe_tensor_dims(t));
}

static double dot(const FloeTensor *a, const FloeTensor *b) {
  int64_t n = floe_tensor_num_elements(a);
  ck_assert_int_eq(n, floe_tensor_num_elements(b));
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += harness_get(a, i) * harness_get(b, i);
  return s;
}

/* A copy of t in dt (f32 values are exact in f64). */
static FloeTensor *as(FloeDType dt, const FloeTensor *t) {
  double *v = harness_values(t);
  FloeTensor *r = harness_from_doubles(dt, floe_tensor_rank(t), floe_tensor_dims(t), v);
  free(v);
  return r;
}

/* ---------------------------------------------------------------------------------- */
/* Convolution gradients. */

typedef struct ConvCase {
  Win w;
  int64_t x[5], f[5];
  const char *what;
} ConvCase;

static const ConvCase conv_cases[] = {
    {{.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .rank = 4, .strides = {1, 1, 2, 2},
      .dil = {1, 1, 1, 2}, .pads = {0, 0, 0, 0, 1, 0, 2, 1}, .groups = 2},
     {3, 4, 9, 8}, {3, 2, 2, 6}, "2-D channels first, groups, stride, pads, dilation"},
    {{.padding = "SAME", .rank = 3, .strides = {1, 3, 1}}, {3, 10, 5}, {4, 5, 7},
     "1-D channels last SAME stride 3"},
    {{.format = "CHANNELS_FIRST", .padding = "SAME", .rank = 5, .groups = 3},
     {2, 3, 4, 5, 6}, {3, 2, 3, 1, 3}, "3-D depthwise SAME"},
    {{.rank = 5, .dil = {1, 2, 1, 1, 1}}, {7, 6, 4, 4, 2}, {2, 2, 2, 2, 5},
     "3-D channels last dilation, 7 images"},
    {{.padding = "EXPLICIT", .rank = 4, .strides = {1, 2, 3, 1}, .pads = {0, 0, 2, 0, 0, 3, 0, 0}},
     {9, 7, 8, 3}, {3, 2, 3, 4}, "2-D channels last stride 2x3 uneven pads, 9 images"},
    {{.padding = "SAME", .rank = 4, .strides = {1, 2, 1, 1}, .groups = 2}, {3, 6, 5, 4},
     {3, 3, 2, 6}, "2-D channels last groups 2 SAME stride 2"},
};

/* x, f random; dy random of Conv's output shape; dX, dF from the gradient ops in dt. */
typedef struct ConvRun {
  FloeTensor *x, *f, *y, *dy, *dx, *df;
} ConvRun;

static void conv_run(const ConvCase *c, FloeDType dt, ConvRun *r) {
  int rank = c->w.rank;
  FloeTensor *x64 = harness_random(FLOE_F64, rank, c->x, 21, -1, 1);
  FloeTensor *f64 = harness_random(FLOE_F64, rank, c->f, 22, -1, 1);
  r->x = as(dt, x64);
  r->f = as(dt, f64);
  floe_tensor_release(x64);
  floe_tensor_release(f64);
  r->y = run_ok("Conv", &c->w, (FloeTensor *[]){r->x, r->f}, 2, c->what);
  FloeTensor *dy64 = harness_random(FLOE_F64, rank, floe_tensor_dims(r->y), 23, -1, 1);
  r->dy = as(dt, dy64);
  floe_tensor_release(dy64);
  FloeTensor *xs = sizes_of(r->x), *fs = sizes_of(r->f);
  r->dx = run_ok("ConvBackpropInputNd", &c->w, (FloeTensor *[]){xs, r->f, r->dy}, 3, c->what);
  r->df = run_ok("ConvBackpropFilterNd", &c->w, (FloeTensor *[]){r->x, fs, r->dy}, 3, c->what);
  floe_tensor_release(xs);
  floe_tensor_release(fs);
  ck_assert_int_eq(floe_tensor_num_elements(r->dx), floe_tensor_num_elements(r->x));
  ck_assert_int_eq(floe_tensor_num_elements(r->df), floe_tensor_num_elements(r->f));
}

static void conv_run_free(ConvRun *r) {
  FloeTensor *all[] = {r->x, r->f, r->y, r->dy, r->dx, r->df};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
}

/* <Conv(x, f), dy> = <x, dX> = <f, dF> (f64, the reference loops). */
START_TEST(conv_gradients_are_the_adjoints) {
  const ConvCase *c = &conv_cases[_i];
  ConvRun r;
  conv_run(c, FLOE_F64, &r);
  double y = dot(r.y, r.dy), dx = dot(r.x, r.dx), df = dot(r.f, r.df);
  ck_assert_msg(fabs(y - dx) <= 1e-9 * (1 + fabs(y)), "%s: <Conv(x,f),dy> %.12g, <x,dX> %.12g",
                c->what, y, dx);
  ck_assert_msg(fabs(y - df) <= 1e-9 * (1 + fabs(y)), "%s: <Conv(x,f),dy> %.12g, <f,dF> %.12g",
                c->what, y, df);
  conv_run_free(&r);
}
END_TEST

/* f32 (oneDNN, sharded batches) and bf16 (widened to f32) against f64 on the same values. */
START_TEST(conv_gradients_f32_and_bf16_match_f64) {
  const ConvCase *c = &conv_cases[_i];
  ConvRun r64, r32, r16;
  conv_run(c, FLOE_F64, &r64);
  conv_run(c, FLOE_F32, &r32);
  conv_run(c, FLOE_BF16, &r16);
  FloeTensor *want[2] = {as(FLOE_F32, r64.dx), as(FLOE_F32, r64.df)};
  harness_assert_close(r32.dx, want[0], 1e-4, 1e-4, c->what);
  harness_assert_close(r32.df, want[1], 1e-4, 1e-4, c->what);
  /* bf16 rounds the inputs: compare with f64 on the rounded values themselves */
  FloeTensor *x = as(FLOE_F64, r16.x), *f = as(FLOE_F64, r16.f), *dy = as(FLOE_F64, r16.dy);
  FloeTensor *xs = sizes_of(x), *fs = sizes_of(f);
  FloeTensor *dx = run_ok("ConvBackpropInputNd", &c->w, (FloeTensor *[]){xs, f, dy}, 3, c->what);
  FloeTensor *df = run_ok("ConvBackpropFilterNd", &c->w, (FloeTensor *[]){x, fs, dy}, 3, c->what);
  FloeTensor *got[2] = {as(FLOE_F64, r16.dx), as(FLOE_F64, r16.df)};
  /* one rounding to bf16 (8 bits) of sums of up to a few hundred terms of size <= 1 */
  harness_assert_close(got[0], dx, 1e-2, 0.05, c->what);
  harness_assert_close(got[1], df, 1e-2, 0.05, c->what);
  FloeTensor *rel[] = {want[0], want[1], x, f, dy, xs, fs, dx, df, got[0], got[1]};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) floe_tensor_release(rel[i]);
  conv_run_free(&r64);
  conv_run_free(&r32);
  conv_run_free(&r16);
}
END_TEST

/* Conv2DBackpropFilter (conv_grad.c) cuts the batch like ConvBackpropFilterNd: 5 images on
 * 4 threads make 3 shards of 2, 2, 1, not 4 (a regression test: the unused fourth partial
 * sum was once added in). */
START_TEST(conv2d_filter_gradient_with_fewer_shards_than_threads) {
  Win w = {.padding = "SAME", .rank = 4, .strides = {1, 1, 1, 1}};
  const int64_t xd[4] = {5, 6, 6, 3}, yd[4] = {5, 6, 6, 4};
  FloeTensor *x = harness_random(FLOE_F64, 4, xd, 1, -1, 1);
  FloeTensor *dy = harness_random(FLOE_F64, 4, yd, 2, -1, 1);
  FloeTensor *fs = harness_i32(1, (int64_t[]){4}, (int32_t[]){3, 3, 3, 4});
  FloeTensor *d64 = run_ok("Conv2DBackpropFilter", &w, (FloeTensor *[]){x, fs, dy}, 3, "f64");
  FloeTensor *x32 = as(FLOE_F32, x), *dy32 = as(FLOE_F32, dy), *want = as(FLOE_F32, d64);
  FloeTensor *d32 = run_ok("Conv2DBackpropFilter", &w, (FloeTensor *[]){x32, fs, dy32}, 3, "f32");
  harness_assert_close(d32, want, 1e-4, 1e-4, "Conv2DBackpropFilter, 5 images, 4 threads");
  FloeTensor *rel[] = {x, dy, fs, d64, x32, dy32, want, d32};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) floe_tensor_release(rel[i]);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* PoolGrad. */

static void check_pool_grad(const Win *w, const double *x, const double *g, const double *want,
                            const int64_t *xd, const int64_t *gd, const char *what) {
  for (int k = 0; k < 2; k++) {
    FloeDType dt = k ? FLOE_F64 : FLOE_F32;
    FloeTensor *xt = harness_from_doubles(dt, w->rank, xd, x);
    FloeTensor *gt = harness_from_doubles(dt, w->rank, gd, g);
    FloeTensor *wt = harness_from_doubles(dt, w->rank, xd, want);
    FloeTensor *got = run_ok("PoolGrad", w, (FloeTensor *[]){xt, gt}, 2, what);
    harness_assert_close(got, wt, 1e-6, 1e-6, what);
    floe_tensor_release(xt), floe_tensor_release(gt), floe_tensor_release(wt);
    floe_tensor_release(got);
  }
}

START_TEST(pool_grad_hand_worked) {
  /* MAX, a tie: the window's first maximum (row-major) takes the whole gradient. */
  Win m = {.format = "CHANNELS_FIRST", .pool = "MAX", .rank = 4, .ksize = {1, 1, 2, 2}};
  check_pool_grad(&m, (double[]){2, 2, 2, 1}, (double[]){5}, (double[]){5, 0, 0, 0},
                  (int64_t[]){1, 1, 2, 2}, (int64_t[]){1, 1, 1, 1}, "MAX tie");
  /* MAX with NaN: the first NaN wins (as in the forward Pool), later ones do not. */
  Win mn = {.pool = "MAX", .rank = 3, .ksize = {1, 4, 1}};
  check_pool_grad(&mn, (double[]){1, NAN, 3, NAN}, (double[]){7}, (double[]){0, 7, 0, 0},
                  (int64_t[]){1, 4, 1}, (int64_t[]){1, 1, 1}, "MAX NaN");
  /* AVG, window 3, stride 2, pads (1, 1), ceil over [1,1,1,4]: windows [-1,1], [1,3], [3,5]
   * (5 is past the padded input). Counted padding divides by 3, 3, 2: gradients 3, 6, 4
   * give 3/3, 3/3 + 6/3, 6/3, 6/3 + 4/2. */
  Win a = {.format = "CHANNELS_FIRST", .padding = "EXPLICIT", .pool = "AVG", .rank = 4,
           .ksize = {1, 1, 1, 3}, .strides = {1, 1, 1, 2}, .pads = {0, 0, 0, 0, 0, 0, 1, 1},
           .ceil = true, .incl = true};
  const int64_t xd[4] = {1, 1, 1, 4}, gd[4] = {1, 1, 1, 3};
  const double x[4] = {1, 2, 3, 4}, g[3] = {3, 6, 4};
  check_pool_grad(&a, x, g, (double[]){1, 3, 2, 4}, xd, gd, "AVG counted padding");
  /* Padding not counted: divisors 2, 3, 1. */
  a.incl = false;
  check_pool_grad(&a, x, g, (double[]){1.5, 3.5, 2, 6}, xd, gd, "AVG padding excluded");
}
END_TEST

/* MaxPoolWithIndices' gradient is dy scattered (added) to the flat positions its indices
 * name: with many ties, storage order 1 (column-major indices), padding, dilation, ceil. */
START_TEST(max_pool_with_indices_gradient_follows_the_indices) {
  const int64_t xd[4] = {2, 3, 5, 6};
  FloeTensor *xv = harness_random(FLOE_F64, 4, xd, 31, 0, 3);
  double *v = harness_values(xv);
  for (int64_t i = 0; i < harness_count(4, xd); i++) v[i] = floor(v[i]); /* 0, 1, 2: ties */
  floe_tensor_release(xv);
  xv = harness_from_doubles(FLOE_F64, 4, xd, v);
  free(v);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(4, xd)), dx;
  Win w = {.padding = "EXPLICIT", .rank = 4, .ksize = {1, 1, 3, 2}, .strides = {1, 1, 2, 2},
           .dil = {1, 1, 1, 2}, .pads = {0, 0, 0, 0, 1, 1, 0, 1}, .ceil = true, .storage = 1};
  FloeNode *p = add_op(g, "MaxPoolWithIndices", &w, &x, 1);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeShape ys = floe_node_output_shape(p, 0);
  FloeTensor *R = harness_random(FLOE_F64, 4, ys.dims, 32, -1, 1);
  FloeOutput y = floe_out(p, 0), gy = floe_const(g, NULL, R);
  ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, &gy, &dx, NULL), FLOE_OK);
  FloeSession *s = harness_session(g, rt);
  char dname[128];
  snprintf(dname, sizeof dname, "%s:%d", floe_node_name(dx.node), dx.index);
  const char *fetch[2] = {"op:1", dname};
  FloeTensor *outs[2];
  FloeStatus *st = floe_status_new();
  FloeFeed feed = {"x", xv};
  ck_assert_msg(floe_session_run(s, &feed, 1, fetch, 2, NULL, 0, outs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  /* flat = nc * S + row-major offset; a column-major offset sp is h + w * H */
  int64_t H = xd[2], W = xd[3], S = H * W, n = harness_count(4, xd);
  double *want = calloc((size_t)n, sizeof *want);
  const int64_t *idx = floe_tensor_data(outs[0]);
  for (int64_t e = 0; e < floe_tensor_num_elements(outs[0]); e++) {
    ck_assert_int_ge(idx[e], 0);
    int64_t nc = idx[e] / S, sp = idx[e] % S;
    want[nc * S + (sp % H) * W + sp / H] += harness_get(R, e);
  }
  FloeTensor *wt = harness_from_doubles(FLOE_F64, 4, xd, want);
  harness_assert_close(outs[1], wt, 1e-12, 1e-12, "MaxPoolWithIndices gradient");
  free(want);
  floe_tensor_release(wt), floe_tensor_release(outs[0]), floe_tensor_release(outs[1]);
  floe_tensor_release(R), floe_tensor_release(xv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Errors. */

static void expect_error(floe_code rc, FloeStatus *st, const char *a, const char *b,
                         const char *what) {
  ck_assert_msg(rc != FLOE_OK, "%s: no error", what);
  const char *m = floe_status_message(st);
  ck_assert_msg(strstr(m, a) && (!b || strstr(m, b)), "%s: %s", what, m);
}

START_TEST(bad_shapes_and_attributes_are_errors) {
  FloeStatus *st = floe_status_new();
  Win valid = {.rank = 4};
  const int64_t xd[4] = {1, 5, 5, 2}, fd[4] = {3, 3, 2, 3}, bad_dy[4] = {1, 4, 4, 3};
  FloeTensor *x = harness_random(FLOE_F32, 4, xd, 1, -1, 1);
  FloeTensor *f = harness_random(FLOE_F32, 4, fd, 2, -1, 1);
  FloeTensor *dy = harness_random(FLOE_F32, 4, bad_dy, 3, -1, 1);
  FloeTensor *xs = sizes_of(x), *fs = sizes_of(f), *out = NULL;
  /* out_backprop of the wrong shape: at graph build (static shapes) and at run time */
  expect_error(run_op("ConvBackpropFilterNd", &valid, (FloeTensor *[]){x, fs, dy}, 3, false,
                      &out, st), st, "'op'", "out_backprop [1,4,4,3] does not have the shape "
                      "[1,3,3,3]", "static out_backprop");
  expect_error(run_op("ConvBackpropInputNd", &valid, (FloeTensor *[]){xs, f, dy}, 3, true, &out,
                      st), st, "'op'", "out_backprop [1,4,4,3] does not have the shape [1,3,3,3]",
               "run-time out_backprop");
  /* sizes that are no shape of rank 3 to 5, or negative */
  FloeTensor *two = harness_i32(1, (int64_t[]){2}, (int32_t[]){3, 3});
  expect_error(run_op("ConvBackpropFilterNd", &valid, (FloeTensor *[]){x, two, dy}, 3, true, &out,
                      st), st, "'op'", "filter_sizes must be a vector of 3 to 5 sizes",
               "short filter_sizes");
  FloeTensor *neg = harness_i32(1, (int64_t[]){4}, (int32_t[]){1, -5, 5, 2});
  expect_error(run_op("ConvBackpropInputNd", &valid, (FloeTensor *[]){neg, f, dy}, 3, true, &out,
                      st), st, "'op'", "input_sizes [1,-5,5,2] must hold sizes >= 0",
               "negative input_sizes");
  /* filter channels that do not fit the input */
  FloeTensor *fs_bad = harness_i32(1, (int64_t[]){4}, (int32_t[]){3, 3, 5, 3});
  expect_error(run_op("ConvBackpropFilterNd", &valid, (FloeTensor *[]){x, fs_bad, dy}, 3, true,
                      &out, st), st, "'op'", "does not fit input [1,5,5,2]", "filter channels");
  /* PoolGrad: an unknown pooling type; grad of the wrong shape (static and at run time) */
  Win bad_type = {.pool = "MIN", .rank = 4, .ksize = {1, 2, 2, 1}};
  FloeTensor *g2 = harness_random(FLOE_F32, 4, (int64_t[]){1, 2, 2, 2}, 4, -1, 1);
  expect_error(run_op("PoolGrad", &bad_type, (FloeTensor *[]){x, g2}, 2, false, &out, st), st,
               "'op'", "'pooling_type' must be MAX or AVG, got 'MIN'", "pooling_type");
  Win pool = {.pool = "MAX", .rank = 4, .ksize = {1, 2, 2, 1}, .strides = {1, 2, 2, 1}};
  FloeTensor *g3 = harness_random(FLOE_F32, 4, (int64_t[]){1, 3, 3, 2}, 5, -1, 1);
  expect_error(run_op("PoolGrad", &pool, (FloeTensor *[]){x, g3}, 2, false, &out, st), st, "'op'",
               "grad [1,3,3,2] does not have the shape [1,2,2,2]", "static grad");
  expect_error(run_op("PoolGrad", &pool, (FloeTensor *[]){x, g3}, 2, true, &out, st), st, "'op'",
               "grad [1,3,3,2] does not have the shape [1,2,2,2]", "run-time grad");
  FloeTensor *rel[] = {x, f, dy, xs, fs, two, neg, fs_bad, g2, g3};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) floe_tensor_release(rel[i]);
  floe_status_free(st);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv_nd_grad");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  int n = (int)(sizeof conv_cases / sizeof conv_cases[0]);
  tcase_add_loop_test(tc, conv_gradients_are_the_adjoints, 0, n);
  tcase_add_loop_test(tc, conv_gradients_f32_and_bf16_match_f64, 0, n);
  tcase_add_test(tc, conv2d_filter_gradient_with_fewer_shards_than_threads);
  tcase_add_test(tc, pool_grad_hand_worked);
  tcase_add_test(tc, max_pool_with_indices_gradient_follows_the_indices);
  tcase_add_test(tc, bad_shapes_and_attributes_are_errors);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
