/* SPDX-License-Identifier: Apache-2.0 */
/* test_blocked_conv.c - the blocked layout (ops_conv.def): _ToBlocked / _FromBlocked, the
 * blocked _FusedConv, and the session's layout pass that makes them (core/session/fuse.c).
 *
 * The converters are checked element by element against the index rule of the op's
 * definition, computed here. A blocked _FusedConv is checked against the channels-last
 * _FusedConv of the same values (itself checked against f64 reference loops in
 * test_fused_conv) on geometries that take each of its paths: Winograd (3x3, stride 1) and
 * direct convolutions, whole images split across the pool, and single images cut into
 * blocks of rows (gathered into scratch) or of output channels (a constant filter's block
 * copied dense, a fed filter read through a strided view). The layout pass is checked on a
 * small residual network: same outputs with and without it, converters only at the chain's
 * ends, and none where the CPU lacks AVX-512 (the plugin registers no converter there). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "harness.h"

static FloeOutput convert(FloeGraph *gr, const char *op, const char *name, FloeOutput x) {
  FloeNodeBuilder *b = floe_node_begin(gr, op, name);
  floe_node_add_input(b, x);
  return floe_out(floe_node_finish(b), 0);
}

/* _FromBlocked of x, a blocked tensor of `channels` channels (its last block padded when
 * that is not a multiple of 16). */
static FloeOutput from_blocked(FloeGraph *gr, const char *name, FloeOutput x, int64_t channels) {
  FloeNodeBuilder *b = floe_node_begin(gr, "_FromBlocked", name);
  floe_node_add_input(b, x);
  if (channels % 16) floe_node_set_attr_int(b, "channels", channels);
  return floe_out(floe_node_finish(b), 0);
}

/* Whether the CPU plugin registered the converters (it does on AVX-512 machines). */
static bool have_converters(void) {
  FloeRuntime *rt = harness_runtime(1);
  bool have = false;
  for (int i = 0; i < floe_runtime_num_kernels(rt); i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    if (floe_runtime_kernel(rt, i, &k) == FLOE_OK && strcmp(k.op, "_ToBlocked") == 0 &&
        strcmp(k.device_type, "CPU") == 0)
      have = true;
  }
  floe_runtime_free(rt);
  return have;
}

/* Skips the rest of a test that needs the converters where the plugin has none. */
#define NEED_CONVERTERS()                                                                 \
  do {                                                                                   \
    if (!have_converters()) {                                                            \
      printf("%s: skipped: this CPU lacks AVX-512, so the plugin has no blocked layout\n", \
             __func__);                                                                  \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* ---------------------------------------------------------------------------------- */
/* Converters. */

typedef struct ConvAttrs {
  int64_t block;    /* 16: the default, not set */
  int64_t channels; /* _FromBlocked's channels; 0: not set */
} ConvAttrs;

static void block_attr(FloeNodeBuilder *b, void *arg) {
  const ConvAttrs *a = arg;
  if (a && a->block != 16) floe_node_set_attr_int(b, "block", a->block);
  if (a && a->channels) floe_node_set_attr_int(b, "channels", a->channels);
}

/* _ToBlocked moves (n, s, c) to (n, c / block, s, c % block), the lanes of a last block c
 * does not fill zero; _FromBlocked (told the channels when a block is padded) moves it back. */
static void round_trip(int rank, const int64_t *dims, int64_t block) {
  FloeTensor *x = harness_random(FLOE_F32, rank, dims, 11, -1, 1);
  FloeTensor *y = NULL, *z = NULL;
  FloeStatus *st = floe_status_new();
  int64_t c = dims[rank - 1], px = 1, blocks = (c + block - 1) / block;
  ConvAttrs to = {block, 0}, from = {block, c % block ? c : 0};
  ck_assert_msg(harness_run_op("_ToBlocked", NULL, &x, 1, NULL, 0, block_attr, &to, &y, 1, st) ==
                    FLOE_OK,
                "%s", floe_status_message(st));
  for (int i = 1; i < rank - 1; i++) px *= dims[i];
  ck_assert_int_eq(floe_tensor_rank(y), rank + 1);
  ck_assert_int_eq(floe_tensor_dim(y, 1), blocks);
  ck_assert_int_eq(floe_tensor_dim(y, rank), block);
  const float *xv = floe_tensor_data(x), *yv = floe_tensor_data(y);
  for (int64_t n = 0; n < dims[0]; n++)
    for (int64_t p = 0; p < px; p++)
      for (int64_t k = 0; k < blocks * block; k++) {
        float want = k < c ? xv[(n * px + p) * c + k] : 0.0f;
        float got = yv[((n * blocks + k / block) * px + p) * block + k % block];
        ck_assert_msg(got == want, "(%lld, %lld, %lld): %g, want %g", (long long)n,
                      (long long)p, (long long)k, got, want);
      }
  ck_assert_msg(harness_run_op("_FromBlocked", NULL, &y, 1, NULL, 0, block_attr, &from, &z, 1,
                               st) == FLOE_OK,
                "%s", floe_status_message(st));
  harness_assert_close(z, x, 0, 0, "_FromBlocked(_ToBlocked(x))");
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_tensor_release(z);
  floe_status_free(st);
}

START_TEST(converters_round_trip) {
  NEED_CONVERTERS();
  round_trip(4, (int64_t[]){2, 3, 5, 32}, 16);
  round_trip(3, (int64_t[]){3, 7, 48}, 16);
  round_trip(5, (int64_t[]){1, 2, 3, 4, 16}, 16);
  round_trip(4, (int64_t[]){2, 4, 4, 24}, 8);
  round_trip(4, (int64_t[]){0, 4, 4, 16}, 16);
  /* padded: a last block the channels do not fill */
  round_trip(4, (int64_t[]){2, 3, 5, 24}, 16);
  round_trip(3, (int64_t[]){1, 7, 5}, 16);
  round_trip(5, (int64_t[]){2, 2, 3, 2, 40}, 16);
  round_trip(4, (int64_t[]){2, 4, 4, 20}, 8);
}
END_TEST

static void expect_error(const char *op, FloeTensor *x, const ConvAttrs *attrs,
                         const char *needle) {
  FloeStatus *st = floe_status_new();
  FloeTensor *y = NULL;
  floe_code rc = harness_run_op(op, NULL, &x, 1, NULL, 0, block_attr, (void *)attrs, &y, 1, st);
  ck_assert_msg(rc != FLOE_OK, "%s accepted a bad input", op);
  ck_assert_msg(strstr(floe_status_message(st), needle), "%s: message \"%s\" lacks \"%s\"", op,
                floe_status_message(st), needle);
  floe_tensor_release(y);
  floe_status_free(st);
}

START_TEST(converter_errors_name_the_shape) {
  NEED_CONVERTERS();
  /* 40 channels do not fit 2 blocks of 16, nor 8: the channels attribute against the tensor
   * (caught by the graph's shape check) */
  FloeTensor *a = harness_random(FLOE_F32, 5, (int64_t[]){1, 2, 2, 2, 16}, 1, -1, 1);
  expect_error("_FromBlocked", a, &(ConvAttrs){16, 40}, "40 channels");
  expect_error("_FromBlocked", a, &(ConvAttrs){16, 8}, "[1,2,2,2,16]");
  FloeTensor *b = harness_random(FLOE_F32, 2, (int64_t[]){4, 16}, 1, -1, 1);
  expect_error("_ToBlocked", b, NULL, "[4,16]");
  FloeTensor *c = harness_random(FLOE_F32, 5, (int64_t[]){1, 2, 2, 2, 8}, 1, -1, 1);
  expect_error("_FromBlocked", c, NULL, "[1,2,2,2,8]");
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(c);
}
END_TEST

/* The gradient of each converter is the other: with dy = w, dx is w moved back; with 24
 * channels (a padded last block) _ToBlocked's gradient drops the padding's lanes and
 * _FromBlocked's gives them zero. */
START_TEST(converter_gradients_are_each_other) {
  NEED_CONVERTERS();
  for (int to = 0; to < 2; to++)
    for (int64_t C = 24; C <= 32; C += 8) {
      int64_t cl[4] = {2, 3, 4, C}, bl[5] = {2, 2, 3, 4, 16};
      FloeGraph *gr = floe_graph_new();
      FloeShape xs = to ? floe_shape_make(4, cl) : floe_shape_make(5, bl);
      FloeOutput x = floe_placeholder(gr, "x", FLOE_F64, xs);
      FloeOutput y = to ? convert(gr, "_ToBlocked", "y", x) : from_blocked(gr, "y", x, C);
      FloeTensor *w = harness_random(FLOE_F64, to ? 5 : 4, to ? bl : cl, 21, -1, 1);
      FloeOutput dy = floe_const(gr, "w", w), dx;
      FloeStatus *st = floe_status_new();
      ck_assert_msg(floe_gradients(gr, &y, 1, &x, 1, &dy, &dx, st) == FLOE_OK, "%s",
                    floe_status_message(st));
      FloeRuntime *rt = harness_runtime(1);
      FloeSession *s = harness_session(gr, rt);
      FloeTensor *xv = harness_random(FLOE_F64, xs.rank, xs.dims, 22, -1, 1), *g = NULL;
      FloeFeed feed = {"x", xv};
      const char *fetch = floe_node_name(dx.node);
      ck_assert_msg(floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &g, st) == FLOE_OK, "%s",
                    floe_status_message(st));
      ck_assert_int_eq(floe_tensor_num_elements(g), to ? 24 * C : 24 * 32);
      const double *gv = floe_tensor_data(g), *wv = floe_tensor_data(w);
      for (int64_t n = 0; n < 2; n++)
        for (int64_t p = 0; p < 12; p++)
          for (int64_t c = 0; c < 32; c++) {
            int64_t icl = (n * 12 + p) * C + c, ibl = ((n * 2 + c / 16) * 12 + p) * 16 + c % 16;
            if (to && c >= C) continue; /* padding: not in dx */
            double got = to ? gv[icl] : gv[ibl];
            double want = to ? wv[ibl] : c < C ? wv[icl] : 0.0;
            ck_assert_msg(got == want, "%s gradient, %lld channels, at (%lld, %lld, %lld): %g, "
                          "want %g", to ? "_ToBlocked" : "_FromBlocked", (long long)C,
                          (long long)n, (long long)p, (long long)c, got, want);
          }
      floe_tensor_release(g);
      floe_tensor_release(xv);
      floe_tensor_release(w);
      floe_status_free(st);
      floe_session_free(s);
      floe_runtime_free(rt);
      floe_graph_free(gr);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The blocked _FusedConv against the channels-last one. */

typedef struct Geo {
  const char *name;
  int64_t h, w, c, o, k, stride, dil;
  const char *padding;
  int64_t groups;
} Geo;

/* Large enough to be cut into parts for a single image (over a million multiply-adds):
 * rows where the image is larger than the filter, output channels where it is smaller,
 * input channels for a 1x1 with many more inputs than outputs. */
static const Geo geos[] = {
    {"3x3 same (Winograd), rows", 24, 23, 32, 32, 3, 1, 1, "SAME", 1},
    {"3x3 stride 2, rows", 25, 24, 32, 64, 3, 2, 1, "SAME", 1},
    {"1x1 stride 2, one part", 8, 8, 16, 48, 1, 2, 1, "VALID", 1},
    {"3x3 dilated, rows", 32, 32, 16, 16, 3, 1, 2, "SAME", 1},
    {"5x5 valid, channel blocks", 16, 14, 48, 32, 5, 1, 1, "VALID", 1},
    {"3x3 deep (Winograd), channel blocks", 4, 4, 128, 128, 3, 1, 1, "SAME", 1},
    {"3-channel first layer (plain input), rows", 64, 60, 3, 32, 3, 1, 1, "SAME", 1},
    {"3-channel 7x7 stride 2 (plain input)", 33, 30, 3, 16, 7, 2, 1, "SAME", 1},
    {"3x3 depthwise, channel blocks", 40, 40, 64, 64, 3, 1, 1, "SAME", 64},
    {"3x3 depthwise of 16 channels, rows", 64, 60, 16, 16, 3, 1, 1, "SAME", 16},
    {"1x1 64 -> 16 (one output block, written in place), rows", 55, 55, 64, 16, 1, 1, 1,
     "SAME", 1},
    {"3x3 depthwise stride 2, channel blocks", 81, 80, 48, 48, 3, 2, 1, "SAME", 48},
    {"3x3 depthwise, one part", 14, 13, 32, 32, 3, 1, 1, "SAME", 32},
    {"3x3 two groups of 16 -> 32", 12, 12, 32, 64, 3, 1, 1, "SAME", 2},
    /* channels that are not whole blocks: the last block padded */
    {"1x1 24 -> 144 (padded input), rows", 28, 28, 24, 144, 1, 1, 1, "SAME", 1},
    {"1x1 144 -> 24 (padded output), channel blocks", 28, 28, 144, 24, 1, 1, 1, "SAME", 1},
    {"3x3 40 -> 40 (padded both), rows", 20, 20, 40, 40, 3, 1, 1, "SAME", 1},
    {"3x3 depthwise of 24 channels (padded), channel blocks", 60, 60, 24, 24, 3, 1, 1, "SAME", 24},
    {"3x3 stride 2 20 -> 8 (padded, under a block), one part", 25, 24, 20, 8, 3, 2, 1, "SAME", 1},
    {"3-channel first layer -> 24 (plain input, padded output)", 32, 30, 3, 24, 3, 1, 1, "SAME", 1},
    /* one image of a 1x1 with at least 4 input blocks an output block: input channel parts,
     * their sums added after (the last part's block padded in the second) */
    {"1x1 144 -> 24, input channel parts", 56, 56, 144, 24, 1, 1, 1, "SAME", 1},
    {"1x1 200 -> 16 (padded input), input channel parts", 40, 40, 200, 16, 1, 1, 1, "SAME", 1},
};

enum { BIAS = 1, ADD = 2, RELU = 4, SILU = 8 }; /* SILU: the activations Save,Sigmoid,Gate */

typedef struct Case {
  const Geo *g;
  unsigned post;
  bool constant; /* the filter is a Const (filter_constant), else fed */
  bool blocked;
} Case;

static void conv_attrs(FloeNodeBuilder *b, const Case *k) {
  const Geo *g = k->g;
  floe_node_set_attr_string(b, "padding", g->padding);
  int64_t s[4] = {1, g->stride, g->stride, 1}, d[4] = {1, g->dil, g->dil, 1};
  floe_node_set_attr_int_list(b, "strides", s, 4);
  floe_node_set_attr_int_list(b, "dilations", d, 4);
  if (k->post & BIAS) floe_node_set_attr_bool(b, "fused_bias", 1);
  if (k->post & ADD) floe_node_set_attr_bool(b, "fused_add", 1);
  if (k->post & RELU) floe_node_set_attr_bool(b, "fused_relu", 1);
  if (k->post & SILU) { /* applied by each part of the convolution to its own output */
    floe_node_set_attr_string(b, "activations", "Save,Sigmoid,Gate");
    floe_node_set_attr_float_list(b, "activation_alpha", (const double[]){0, 0, 0}, 3);
  }
  if (k->constant) floe_node_set_attr_bool(b, "filter_constant", 1);
  if (g->groups > 1) floe_node_set_attr_int(b, "groups", g->groups);
  if (k->blocked) floe_node_set_attr_bool(b, "blocked", 1);
  if (k->blocked && k->g->c < 16) floe_node_set_attr_bool(b, "plain_input", 1);
}

/* A copy of t that outlives its runtime (whose device memory holds t); releases t. */
static FloeTensor *own_copy(FloeTensor *t) {
  FloeShape sh = floe_tensor_shape(t);
  FloeTensor *c = harness_f32(sh.rank, sh.dims, floe_tensor_data(t));
  floe_tensor_release(t);
  return c;
}

/* Output of one _FusedConv (blocked: its inputs converted in and its output converted back,
 * so the result is channels-last either way). in: x, f, bias, side. */
static FloeTensor *run_case(const Case *k, FloeTensor *const *in, int threads) {
  setenv("FLOE_FUSION", "0", 1); /* the graph as built: no layout pass */
  FloeGraph *gr = floe_graph_new();
  FloeOutput x = floe_placeholder(gr, "x", FLOE_F32, floe_tensor_shape(in[0]));
  FloeOutput f = k->constant ? floe_const(gr, "f", in[1])
                             : floe_placeholder(gr, "f", FLOE_F32, floe_tensor_shape(in[1]));
  FloeFeed feeds[4] = {{"x", in[0]}};
  int nf = 1;
  if (!k->constant) feeds[nf++] = (FloeFeed){"f", in[1]};
  FloeOutput args[2];
  int na = 0;
  if (k->post & BIAS) {
    args[na++] = floe_placeholder(gr, "b", FLOE_F32, floe_tensor_shape(in[2]));
    feeds[nf++] = (FloeFeed){"b", in[2]};
  }
  if (k->post & ADD) {
    FloeOutput s = floe_placeholder(gr, "s", FLOE_F32, floe_tensor_shape(in[3]));
    feeds[nf++] = (FloeFeed){"s", in[3]};
    args[na++] = k->blocked ? convert(gr, "_ToBlocked", "s_blocked", s) : s;
  }
  if (k->blocked && k->g->c >= 16) x = convert(gr, "_ToBlocked", "x_blocked", x);
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  floe_node_add_input_list(b, args, na);
  conv_attrs(b, k);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  if (k->blocked) y = from_blocked(gr, "y", y, k->g->o);
  const char *fetch = floe_node_name(y.node);
  FloeRuntime *rt = harness_runtime(threads);
  FloeSession *s = harness_session(gr, rt);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  /* Twice: the second call finds the cached primitives and the kept filter. */
  for (int i = 0; i < 2; i++) {
    floe_tensor_release(out);
    out = NULL;
    ck_assert_msg(floe_session_run(s, feeds, nf, &fetch, 1, NULL, 0, &out, st) == FLOE_OK,
                  "%s: %s", k->g->name, floe_status_message(st));
  }
  floe_status_free(st);
  floe_session_free(s);
  FloeTensor *copy = own_copy(out);
  floe_runtime_free(rt);
  floe_graph_free(gr);
  unsetenv("FLOE_FUSION");
  return copy;
}

static int64_t out_size(int64_t in, const Geo *g) {
  int64_t eff = (g->k - 1) * g->dil + 1;
  return strcmp(g->padding, "SAME") == 0 ? (in + g->stride - 1) / g->stride
                                         : (in - eff) / g->stride + 1;
}

static void check_geo(const Geo *g, int64_t batch, int threads) {
  int64_t xd[4] = {batch, g->h, g->w, g->c};
  int64_t fd[4] = {g->k, g->k, g->c / (g->groups > 1 ? g->groups : 1), g->o};
  int64_t yd[4] = {batch, out_size(g->h, g), out_size(g->w, g), g->o};
  uint64_t seed = (uint64_t)(g - geos) * 131 + (uint64_t)batch * 7 + (uint64_t)threads;
  FloeTensor *in[4] = {harness_random(FLOE_F32, 4, xd, seed, -1, 1),
                       harness_random(FLOE_F32, 4, fd, seed + 1, -0.2, 0.2),
                       harness_random(FLOE_F32, 1, &g->o, seed + 2, -1, 1),
                       harness_random(FLOE_F32, 4, yd, seed + 3, -1, 1)};
  static const unsigned posts[] = {BIAS | ADD | RELU, RELU, BIAS, ADD, BIAS | SILU};
  for (size_t p = 0; p < sizeof posts / sizeof *posts; p++)
    for (int constant = 0; constant < 2; constant++) {
      Case k = {g, posts[p], constant, false};
      FloeTensor *want = run_case(&k, in, threads);
      k.blocked = true;
      FloeTensor *got = run_case(&k, in, threads);
      char what[160];
      snprintf(what, sizeof what, "%s, batch %lld, %d threads, post %u, %s filter", g->name,
               (long long)batch, threads, posts[p], constant ? "constant" : "fed");
      /* Winograd reassociates the sums: a few ulps of the terms' magnitude. */
      harness_assert_close(got, want, 1e-4, 1e-4, what);
      floe_tensor_release(want);
      floe_tensor_release(got);
    }
  for (int i = 0; i < 4; i++) floe_tensor_release(in[i]);
}

START_TEST(blocked_matches_channels_last) {
  NEED_CONVERTERS();
  const Geo *g = &geos[_i];
  check_geo(g, 3, 2); /* whole images on two threads */
  check_geo(g, 1, 2); /* one image: blocks of rows or of output channels */
  check_geo(g, 1, 4);
  check_geo(g, 2, 1); /* one thread: one primitive */
}
END_TEST

/* A blocked first layer reading a channels-first image (plain_input, CHANNELS_FIRST, as the
 * layout pass makes it from Transpose + channels-last conv) equals the channels-last one on
 * the transposed image: whole images, and one image cut into rows (read through strides). */
static FloeTensor *first_layer(FloeTensor *const *in, bool cf, int threads, bool stride2) {
  setenv("FLOE_FUSION", "0", 1);
  FloeGraph *gr = floe_graph_new();
  FloeOutput x = floe_placeholder(gr, "x", FLOE_F32, floe_tensor_shape(in[0]));
  if (!cf) {
    int32_t pv[4] = {0, 2, 3, 1};
    FloeTensor *perm = harness_i32(1, (int64_t[]){4}, pv);
    x = floe_binary(gr, "Transpose", "to_nhwc", x, floe_const(gr, "perm", perm));
    floe_tensor_release(perm);
  }
  FloeOutput bias = floe_const(gr, "b", in[2]);
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, floe_const(gr, "f", in[1]));
  floe_node_add_input_list(b, &bias, 1);
  floe_node_set_attr_string(b, "data_format", cf ? "CHANNELS_FIRST" : "CHANNELS_LAST");
  floe_node_set_attr_string(b, "padding", "EXPLICIT");
  int64_t s = stride2 ? 2 : 1;
  int64_t st_cl[4] = {1, s, s, 1}, st_cf[4] = {1, 1, s, s};
  int64_t p_cl[8] = {0, 0, 2, 1, 0, 3, 0, 0}, p_cf[8] = {0, 0, 0, 0, 2, 1, 0, 3};
  floe_node_set_attr_int_list(b, "strides", cf ? st_cf : st_cl, 4);
  floe_node_set_attr_int_list(b, "explicit_paddings", cf ? p_cf : p_cl, 8);
  floe_node_set_attr_bool(b, "fused_bias", 1);
  floe_node_set_attr_bool(b, "fused_relu", 1);
  floe_node_set_attr_bool(b, "filter_constant", 1);
  floe_node_set_attr_bool(b, "blocked", 1);
  floe_node_set_attr_bool(b, "plain_input", 1);
  FloeOutput y = convert(gr, "_FromBlocked", "y", floe_out(floe_node_finish(b), 0));
  const char *fetch = floe_node_name(y.node);
  FloeRuntime *rt = harness_runtime(threads);
  FloeSession *ss = harness_session(gr, rt);
  FloeStatus *st = floe_status_new();
  FloeFeed feed = {"x", in[0]};
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(ss, &feed, 1, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  floe_session_free(ss);
  out = own_copy(out);
  floe_runtime_free(rt);
  floe_graph_free(gr);
  unsetenv("FLOE_FUSION");
  return out;
}

START_TEST(channels_first_first_layer) {
  NEED_CONVERTERS();
  for (int batch = 1; batch <= 3; batch += 2)
    for (int threads = 1; threads <= 4; threads *= 2)
      for (int stride2 = 0; stride2 < 2; stride2++) {
        int64_t xd[4] = {batch, 3, 64, 61}, fd[4] = {3, 3, 3, 32}, bd[1] = {32};
        FloeTensor *in[3] = {harness_random(FLOE_F32, 4, xd, 31, -1, 1),
                             harness_random(FLOE_F32, 4, fd, 32, -0.3, 0.3),
                             harness_random(FLOE_F32, 1, bd, 33, -1, 1)};
        FloeTensor *want = first_layer(in, false, threads, stride2);
        FloeTensor *got = first_layer(in, true, threads, stride2);
        char what[96];
        snprintf(what, sizeof what, "channels-first first layer, batch %d, %d threads, stride %d",
                 batch, threads, stride2 ? 2 : 1);
        harness_assert_close(got, want, 1e-5, 1e-5, what);
        floe_tensor_release(want);
        floe_tensor_release(got);
        for (int i = 0; i < 3; i++) floe_tensor_release(in[i]);
      }
}
END_TEST

START_TEST(blocked_side_input_broadcasts) {
  NEED_CONVERTERS();
  /* A side input of one image added to each of two: broadcast in the blocked dims. */
  const Geo *g = &geos[0];
  int64_t xd[4] = {2, g->h, g->w, g->c}, fd[4] = {3, 3, g->c, g->o};
  int64_t sd[4] = {1, g->h, g->w, g->o};
  FloeTensor *in[4] = {harness_random(FLOE_F32, 4, xd, 5, -1, 1),
                       harness_random(FLOE_F32, 4, fd, 6, -0.2, 0.2), NULL,
                       harness_random(FLOE_F32, 4, sd, 7, -1, 1)};
  Case k = {g, ADD | RELU, true, false};
  FloeTensor *want = run_case(&k, in, 2);
  k.blocked = true;
  FloeTensor *got = run_case(&k, in, 2);
  harness_assert_close(got, want, 1e-4, 1e-4, "broadcast side input");
  floe_tensor_release(want);
  floe_tensor_release(got);
  for (int i = 0; i < 4; i++) floe_tensor_release(in[i]);
}
END_TEST

/* A blocked _FusedConv (groups: its groups attribute, 0: none) of x [1, 1 or 2, 4, 4, 16]
 * and filter f fed to placeholders of unknown shape fails at run time with a message holding
 * want1 and want2. */
static void blocked_run_fails(int64_t blocks, const int64_t *fd, int64_t groups,
                              const char *want1, const char *want2) {
  int64_t bd[5] = {1, blocks, 4, 4, 16};
  FloeTensor *xb = harness_random(FLOE_F32, 5, bd, 3, -1, 1);
  FloeTensor *fb = harness_random(FLOE_F32, 4, fd, 4, -1, 1);
  FloeGraph *gr = floe_graph_new();
  FloeShape unknown = floe_shape_unknown();
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "conv");
  floe_node_add_input(b, floe_placeholder(gr, "x", FLOE_F32, unknown));
  floe_node_add_input(b, floe_placeholder(gr, "f", FLOE_F32, unknown));
  floe_node_add_input_list(b, NULL, 0);
  floe_node_set_attr_bool(b, "blocked", 1);
  if (groups) floe_node_set_attr_int(b, "groups", groups);
  floe_node_set_attr_string(b, "padding", "SAME");
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  const char *fetch = floe_node_name(y.node);
  FloeRuntime *rt = harness_runtime(1);
  FloeSession *s = harness_session(gr, rt);
  FloeStatus *st = floe_status_new();
  FloeFeed feeds[2] = {{"x", xb}, {"f", fb}};
  FloeTensor *out = NULL;
  ck_assert_int_ne(floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), want1) && strstr(floe_status_message(st), want2),
                "%s", floe_status_message(st));
  floe_status_free(st);
  floe_session_free(s);
  floe_runtime_free(rt);
  floe_graph_free(gr);
  floe_tensor_release(xb);
  floe_tensor_release(fb);
}

/* Groups of a few channels (8 here) have no blocked kernel: the error names the groups. */
START_TEST(blocked_grouped_conv_needs_whole_blocks) {
  blocked_run_fails(2, (const int64_t[]){3, 3, 8, 32}, 4, "4 groups", "32 input");
}
END_TEST

START_TEST(blocked_conv_rejects_bad_inputs) {
  /* Channels-last data where blocked data is expected: an error naming the shape. */
  int64_t xd[4] = {1, 4, 4, 16}, fd[4] = {3, 3, 16, 16};
  FloeTensor *in[2] = {harness_random(FLOE_F32, 4, xd, 1, -1, 1),
                       harness_random(FLOE_F32, 4, fd, 2, -1, 1)};
  FloeGraph *gr = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "conv");
  floe_node_add_input(b, floe_placeholder(gr, "x", FLOE_F32, floe_tensor_shape(in[0])));
  floe_node_add_input(b, floe_const(gr, "f", in[1]));
  floe_node_add_input_list(b, NULL, 0);
  floe_node_set_attr_bool(b, "blocked", 1);
  ck_assert_ptr_null(floe_node_finish(b));
  ck_assert_msg(strstr(floe_graph_error(gr, NULL), "[1,4,4,16]"), "%s",
                floe_graph_error(gr, NULL));
  floe_graph_free(gr);
  /* A filter reading more channels than the blocks hold: the kernel says so (shape unknown
   * at build). */
  blocked_run_fails(1, (const int64_t[]){3, 3, 24, 16}, 0, "reads 24 channels", "in 1 blocks");
  floe_tensor_release(in[0]);
  floe_tensor_release(in[1]);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The session's layout pass. */

static FloeOutput conv(FloeGraph *gr, const char *name, FloeOutput x, int64_t k, int64_t c,
                       int64_t o, int64_t stride, uint64_t seed) {
  int64_t fd[4] = {k, k, c, o};
  FloeTensor *f = harness_random(FLOE_F32, 4, fd, seed, -0.3, 0.3);
  char fname[64];
  snprintf(fname, sizeof fname, "%s_f", name);
  FloeNodeBuilder *b = floe_node_begin(gr, "Conv", name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, floe_const(gr, fname, f));
  floe_node_set_attr_string(b, "padding", "SAME");
  int64_t s[4] = {1, stride, stride, 1};
  floe_node_set_attr_int_list(b, "strides", s, 4);
  floe_tensor_release(f);
  return floe_out(floe_node_finish(b), 0);
}

/* The mean of channels-last x over its two spatial dims (axes 1, 2), as node `name` (its axes
 * Const `name`_axes); keep_dims as told. */
static FloeOutput spatial_mean(FloeGraph *gr, const char *name, FloeOutput x, bool keep_dims) {
  char an[64];
  snprintf(an, sizeof an, "%s_axes", name);
  FloeNodeBuilder *m = floe_node_begin(gr, "Mean", name);
  floe_node_add_input(m, x);
  FloeTensor *axes = harness_i64(1, (int64_t[]){2}, (int64_t[]){1, 2});
  floe_node_add_input(m, floe_const(gr, an, axes));
  floe_tensor_release(axes);
  if (keep_dims) floe_node_set_attr_bool(m, "keep_dims", 1);
  return floe_out(floe_node_finish(m), 0);
}

/* A channels-last 2x2 MAX pool of stride 2 of x with padding ("VALID" or "SAME"). */
static FloeOutput max_pool2(FloeGraph *gr, const char *name, FloeOutput x, const char *padding) {
  FloeNodeBuilder *pb = floe_node_begin(gr, "Pool", name);
  floe_node_add_input(pb, x);
  floe_node_set_attr_string(pb, "pooling_type", "MAX");
  int64_t k[4] = {1, 2, 2, 1};
  floe_node_set_attr_int_list(pb, "ksize", k, 4);
  floe_node_set_attr_int_list(pb, "strides", k, 4);
  floe_node_set_attr_string(pb, "padding", padding);
  return floe_out(floe_node_finish(pb), 0);
}

/* A residual network: a 3-channel stem, a pooling (MAX, or AVG with explicit padding,
 * ceil_mode and the padding counted), two blocks (one with a strided 1x1 shortcut), global
 * average pooling. */
static FloeGraph *resnet(const char **fetch, bool avg, bool nchw) {
  FloeGraph *gr = floe_graph_new();
  FloeShape xs = {4, {-1, 13, 12, 3}}, xcf = {4, {-1, 3, 13, 12}};
  FloeOutput x = floe_placeholder(gr, "x", FLOE_F32, nchw ? xcf : xs);
  if (nchw) { /* an ONNX image: channels first, transposed for the channels-last stem */
    int32_t pv[4] = {0, 2, 3, 1};
    FloeTensor *perm = harness_i32(1, (int64_t[]){4}, pv);
    x = floe_binary(gr, "Transpose", "to_nhwc", x, floe_const(gr, "perm", perm));
    floe_tensor_release(perm);
  }
  FloeOutput s = floe_unary(gr, "Relu", "stem_relu", conv(gr, "stem", x, 3, 3, 16, 1, 1));
  FloeNodeBuilder *pb = floe_node_begin(gr, "Pool", "pool0");
  floe_node_add_input(pb, s);
  floe_node_set_attr_string(pb, "pooling_type", avg ? "AVG" : "MAX");
  int64_t k[4] = {1, 3, 3, 1}, st[4] = {1, 2, 2, 1}, pads[8] = {0, 0, 1, 0, 0, 1, 0, 0};
  floe_node_set_attr_int_list(pb, "ksize", k, 4);
  floe_node_set_attr_int_list(pb, "strides", st, 4);
  if (avg) {
    floe_node_set_attr_string(pb, "padding", "EXPLICIT");
    floe_node_set_attr_int_list(pb, "explicit_paddings", pads, 8);
    floe_node_set_attr_bool(pb, "ceil_mode", 1);
    floe_node_set_attr_bool(pb, "count_include_pad", 1);
  } else {
    floe_node_set_attr_string(pb, "padding", "SAME");
  }
  s = floe_out(floe_node_finish(pb), 0);
  FloeOutput a = floe_unary(gr, "Relu", "a1", conv(gr, "c1", s, 3, 16, 16, 1, 2));
  a = floe_unary(gr, "Relu", "a2", floe_binary(gr, "Add", "add1", conv(gr, "c2", a, 3, 16, 16, 1, 3), s));
  FloeOutput d = conv(gr, "down", a, 1, 16, 32, 2, 4);
  FloeOutput bb = floe_unary(gr, "Relu", "b1", conv(gr, "c3", a, 3, 16, 32, 2, 5));
  bb = floe_unary(gr, "Relu", "b2", floe_binary(gr, "Add", "add2", conv(gr, "c4", bb, 3, 32, 32, 1, 6), d));
  FloeOutput y = spatial_mean(gr, "pool", bb, false);
  ck_assert_msg(floe_graph_status(gr) == FLOE_OK, "%s", floe_graph_error(gr, NULL));
  *fetch = floe_node_name(y.node);
  return gr;
}

/* Runs gr (freed) once on `threads` threads with profiling; *rows, *n: its per-node profile
 * (the caller frees *rows). Returns the fetched tensor. */
static FloeTensor *run_profiled(FloeGraph *gr, int threads, const FloeFeed *feeds, int nf,
                                const char *fetch, FloeNodeProfile **rows, int *n) {
  FloeRuntime *rt = harness_runtime(threads);
  FloeSession *s = harness_session(gr, rt);
  floe_session_set_profiling(s, 1);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, feeds, nf, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(floe_session_profile_nodes(s, rows, n, st), FLOE_OK);
  floe_status_free(st);
  floe_session_free(s);
  out = own_copy(out);
  floe_runtime_free(rt);
  floe_graph_free(gr);
  return out;
}

/* Runs the network on x; *blocked_nodes: nodes of converter ops that ran. */
static FloeTensor *run_resnet(FloeTensor *x, bool avg, bool nchw, int threads, int *to,
                              int *from, int *transposes) {
  const char *fetch;
  FloeGraph *gr = resnet(&fetch, avg, nchw);
  FloeFeed feed = {"x", x};
  FloeNodeProfile *rows = NULL;
  int n = 0;
  FloeTensor *out = run_profiled(gr, threads, &feed, 1, fetch, &rows, &n);
  *to = *from = *transposes = 0;
  for (int i = 0; i < n; i++) {
    *to += strcmp(rows[i].op, "_ToBlocked") == 0;
    *from += strcmp(rows[i].op, "_FromBlocked") == 0;
    *transposes += strcmp(rows[i].op, "Transpose") == 0;
  }
  free(rows);
  return out;
}

static bool cpu_has_avx512(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

START_TEST(layout_pass_blocks_conv_chains) {
  /* _i: bit 0 one image on 4 threads (else 3 on 2), bit 1 AVG pooling, bit 2 NCHW input */
  bool one = _i & 1, avg = _i & 2, nchw = _i & 4;
  int64_t xd[4] = {one ? 1 : 3, 13, 12, 3}, xcf[4] = {one ? 1 : 3, 3, 13, 12};
  FloeTensor *x = harness_random(FLOE_F32, 4, nchw ? xcf : xd, 9, -1, 1);
  int threads = one ? 4 : 2, to, from, tr;
  setenv("FLOE_BLOCKED_LAYOUT", "0", 1);
  FloeTensor *want = run_resnet(x, avg, nchw, threads, &to, &from, &tr);
  ck_assert_int_eq(to + from, 0);
  ck_assert_int_eq(tr, nchw);
  unsetenv("FLOE_BLOCKED_LAYOUT");
  FloeTensor *got = run_resnet(x, avg, nchw, threads, &to, &from, &tr);
  harness_assert_close(got, want, 1e-4, 1e-4, "network with the blocked layout");
  /* (ONEDNN_MAX_CPU_ISA=AVX2 hides AVX-512 from the plugin: no converters then either.) */
  bool have = have_converters();
  ck_assert_msg(!have || cpu_has_avx512(), "converters registered on a CPU without AVX-512");
  if (have) {
    /* The stem reads its 3 channels as they are and writes blocked data; the pooling and
     * the blocks stay blocked; one converter back before the mean. */
    ck_assert_int_eq(to, 0);
    ck_assert_int_eq(from, 1);
    ck_assert_int_eq(tr, 0); /* an NCHW image is read before its Transpose */
  } else {
    ck_assert_int_eq(to + from, 0);
  }
  floe_tensor_release(x);
  floe_tensor_release(want);
  floe_tensor_release(got);
}
END_TEST

/* Concatenations in the blocked layout: two convolutions' outputs joined along the channels
 * (axis 3, or -1), scaled, shifted and activated as a batch norm and ReLU would, scaled by a
 * squeeze-excitation's gate (a mean keeping dims, a sigmoid) and pooled, then a third conv's output joined with a fed channels-last
 * tensor (converted once) before a mean. Along another axis (2) the concatenation stays
 * channels-last: the convolutions' outputs go back before it. The batch norm's constants are
 * reshaped to the blocked shape while the graph is optimised (no Reshape runs), and by
 * Reshapes each step with constant folding off: the same bits. */
START_TEST(layout_pass_blocks_concat) {
  int axis = _i == 0 ? 3 : _i == 1 ? -1 : 2;
  FloeTensor *got = NULL, *want = NULL, *unfolded = NULL;
  int64_t xd[4] = {2, 9, 8, 16}, zd[4] = {2, 4, 4, 16}, zd2[4] = {2, 4, 8, 32};
  FloeTensor *x = harness_random(FLOE_F32, 4, xd, 11, -1, 1);
  FloeTensor *z = harness_random(FLOE_F32, 4, axis == 2 ? zd2 : zd, 12, -1, 1);
  /* blocked: 0 no, 1 yes, 2 yes with constant folding off */
  for (int blocked = 0; blocked < 3; blocked++) {
    if (!blocked) setenv("FLOE_BLOCKED_LAYOUT", "0", 1);
    if (blocked == 2) setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
    FloeGraph *gr = floe_graph_new();
    FloeOutput xp = floe_placeholder(gr, "x", FLOE_F32, (FloeShape){4, {-1, 9, 8, 16}});
    FloeOutput zp = floe_placeholder(gr, "z", FLOE_F32, (FloeShape){4, {-1, -1, -1, -1}});
    FloeOutput a = floe_unary(gr, "Relu", "ra", conv(gr, "ca", xp, 3, 16, 16, 1, 21));
    FloeOutput b = floe_unary(gr, "Relu", "rb", conv(gr, "cb", xp, 1, 16, axis == 2 ? 16 : 32, 1, 22));
    FloeTensor *ax = harness_i32(0, NULL, (int32_t[]){axis});
    FloeOutput ab[2] = {a, b};
    FloeNodeBuilder *cb = floe_node_begin(gr, "Concat", "cat1");
    floe_node_add_input_list(cb, ab, 2);
    floe_node_add_input(cb, floe_const(gr, "axis1", ax));
    FloeOutput cat = floe_out(floe_node_finish(cb), 0);
    /* a batch norm's scale and shift per channel, then 2 - x and a ReLU: elementwise ops
     * stay in the blocked layout, the constant on the left of Sub too */
    int64_t ch = axis == 2 ? 16 : 48, kd[4] = {1, 1, 1, ch};
    FloeTensor *k1 = harness_random(FLOE_F32, 1, &ch, 31, 0.5, 1.5);
    FloeTensor *k2 = harness_random(FLOE_F32, 4, kd, 32, -0.5, 0.5);
    cat = floe_binary(gr, "Mul", "scale", cat, floe_const(gr, "k1", k1));
    cat = floe_binary(gr, "Add", "shift", cat, floe_const(gr, "k2", k2));
    cat = floe_unary(gr, "Relu", "act",
                     floe_binary(gr, "Sub", "flip", floe_const_f32(gr, "two", 2.0f), cat));
    floe_tensor_release(k1);
    floe_tensor_release(k2);
    /* a squeeze-excitation: the per-image channel means (kept dims), a sigmoid, scaling */
    FloeOutput gate = floe_unary(gr, "Sigmoid", "gate", spatial_mean(gr, "squeeze", cat, true));
    cat = floe_binary(gr, "Mul", "excite", gate, cat);
    FloeOutput p = max_pool2(gr, "pool", cat, "VALID");
    int64_t cin = axis == 2 ? 16 : 48, cout = axis == 2 ? 32 : 16;
    FloeOutput c = conv(gr, "cc", p, 1, cin, cout, 1, 23);
    FloeOutput cz[2] = {c, zp};
    cb = floe_node_begin(gr, "Concat", "cat2");
    floe_node_add_input_list(cb, cz, 2);
    floe_node_add_input(cb, floe_const(gr, "axis2", ax));
    floe_tensor_release(ax);
    FloeOutput cat2 = floe_out(floe_node_finish(cb), 0);
    spatial_mean(gr, "mean", cat2, false);
    ck_assert_msg(floe_graph_status(gr) == FLOE_OK, "%s", floe_graph_error(gr, NULL));
    FloeFeed feeds[2] = {{"x", x}, {"z", z}};
    FloeNodeProfile *rows = NULL;
    int n = 0, to = 0, from = 0, reshapes = 0;
    FloeTensor *out = run_profiled(gr, 2, feeds, 2, "mean", &rows, &n);
    for (int i = 0; i < n; i++) {
      to += strcmp(rows[i].op, "_ToBlocked") == 0;
      from += strcmp(rows[i].op, "_FromBlocked") == 0;
      reshapes += strcmp(rows[i].op, "Reshape") == 0;
    }
    free(rows);
    unsetenv("FLOE_BLOCKED_LAYOUT");
    unsetenv("FLOE_OPT_CONSTANT_FOLDING");
    if (!blocked) {
      ck_assert_int_eq(to + from, 0);
      want = out;
    } else if (blocked == 2) {
      unfolded = out;
      /* k1 and k2 in the blocked shape: Reshapes that run each step */
      if (have_converters() && axis != 2) ck_assert_int_eq(reshapes, 2);
    } else {
      got = out;
      if (have_converters() && axis != 2) {
        ck_assert_int_eq(to, 1);   /* z */
        ck_assert_int_eq(from, 1); /* before the mean */
        /* k1 and k2 reshaped to [1, 3, 1, 1, 16] while the graph was optimised */
        ck_assert_int_eq(reshapes, 0);
      } else if (have_converters()) {
        /* ca and cb go back before cat1; the pool and cc convert again around cc */
        ck_assert_int_ge(from, 3);
      }
    }
  }
  harness_assert_close(got, want, 1e-4, 1e-4, "concatenations with the blocked layout");
  harness_assert_close(unfolded, got, 0, 0, "the blocked layout with constant folding off");
  floe_tensor_release(unfolded);
  floe_tensor_release(got);
  floe_tensor_release(want);
  floe_tensor_release(x);
  floe_tensor_release(z);
}
END_TEST

/* The padding of a padded blocked output is zero after every activation, and its real lanes
 * are the channels-last convolution's: 20 -> 24 channels (3x3: rows of one image on two
 * threads, whole images on one) and 160 -> 24 (1x1: input channel parts for one image).
 * Tails: a sigmoid after a bias (maps 0 elsewhere: the padding is cleared after it), SiLU and
 * Relu6 (map 0 to 0: the padding oneDNN left zero is not cleared again) and a bare ReLU. */
START_TEST(padded_output_padding_is_zero) {
  NEED_CONVERTERS();
  static const struct {
    const char *acts;
    int n;
  } tails[] = {{"Sigmoid", 1}, {"Save,Sigmoid,Gate", 3}, {"Relu6", 1}, {NULL, 0}};
  for (int shape = 0; shape < 2; shape++)
    for (size_t t = 0; t < sizeof tails / sizeof *tails; t++)
      for (int batch = 1; batch <= 3; batch += 2) {
        int64_t c = shape ? 160 : 20, k = shape ? 1 : 3, h = shape ? 40 : 9, w = shape ? 40 : 7;
        int64_t xd[4] = {batch, h, w, c}, fd[4] = {k, k, c, 24}, o = 24;
        FloeTensor *xv = harness_random(FLOE_F32, 4, xd, 41, -1, 1);
        FloeTensor *fv = harness_random(FLOE_F32, 4, fd, 42, -0.3, 0.3);
        FloeTensor *bv = harness_random(FLOE_F32, 1, &o, 43, -1, 1);
        FloeTensor *out[2] = {NULL, NULL};
        for (int blocked = 0; blocked < 2; blocked++) {
          setenv("FLOE_FUSION", "0", 1);
          FloeGraph *gr = floe_graph_new();
          FloeOutput x = floe_placeholder(gr, "x", FLOE_F32, floe_tensor_shape(xv));
          if (blocked) x = convert(gr, "_ToBlocked", "xb", x);
          FloeOutput bias = floe_const(gr, "b", bv);
          FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "conv");
          floe_node_add_input(b, x);
          floe_node_add_input(b, floe_const(gr, "f", fv));
          floe_node_add_input_list(b, &bias, 1);
          floe_node_set_attr_string(b, "padding", "SAME");
          floe_node_set_attr_bool(b, "fused_bias", 1);
          if (tails[t].acts) {
            floe_node_set_attr_string(b, "activations", tails[t].acts);
            floe_node_set_attr_float_list(b, "activation_alpha", (const double[]){0, 0, 0},
                                          tails[t].n);
          } else {
            floe_node_set_attr_bool(b, "fused_relu", 1);
          }
          if (blocked) floe_node_set_attr_bool(b, "blocked", 1);
          floe_node_finish(b);
          FloeRuntime *rt = harness_runtime(batch == 1 ? 2 : 1);
          FloeSession *ss = harness_session(gr, rt);
          FloeStatus *st = floe_status_new();
          FloeFeed feed = {"x", xv};
          const char *fetch = "conv";
          ck_assert_msg(floe_session_run(ss, &feed, 1, &fetch, 1, NULL, 0, &out[blocked], st) ==
                            FLOE_OK,
                        "%s", floe_status_message(st));
          out[blocked] = own_copy(out[blocked]);
          floe_status_free(st);
          floe_session_free(ss);
          floe_runtime_free(rt);
          floe_graph_free(gr);
          unsetenv("FLOE_FUSION");
        }
        ck_assert_int_eq(floe_tensor_dim(out[1], 1), 2);
        const float *cl = floe_tensor_data(out[0]), *bl = floe_tensor_data(out[1]);
        const char *tail = tails[t].acts ? tails[t].acts : "Relu";
        int64_t px = h * w;
        for (int64_t n = 0; n < batch; n++)
          for (int64_t p = 0; p < px; p++)
            for (int64_t ch = 0; ch < 32; ch++) {
              float got = bl[((n * 2 + ch / 16) * px + p) * 16 + ch % 16];
              float want = ch < o ? cl[(n * px + p) * o + ch] : 0.0f;
              ck_assert_msg(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)),
                            "%lldx%lld, %s, batch %d (%lld, %lld, %lld): %g, want %g",
                            (long long)k, (long long)k, tail, batch, (long long)n,
                            (long long)p, (long long)ch, got, want);
            }
        floe_tensor_release(out[0]);
        floe_tensor_release(out[1]);
        floe_tensor_release(xv);
        floe_tensor_release(fv);
        floe_tensor_release(bv);
      }
}
END_TEST

/* The layout pass on channel counts that are not whole blocks (24, 40): a stem, pointwise
 * and 3x3 convolutions, a residual sum of two padded tensors, a max pool and a scaling
 * (blocked: 0 times a scalar is 0), a sigmoid and a shift by a constant (which would fill the padding:
 * they go channels-last), convolutions again, a mean. The same result with the layout off,
 * with padding off and on. With padding on: blocked from the stem to the sigmoid, one
 * conversion; the sum and the scaling ran blocked, the sigmoid not, and the padded
 * convolutions after it not either (padding joins only a chain blocked already). */
static FloeTensor *run_padded_net(FloeTensor *x, const char *layout, const char *padding,
                                  int *conversions, bool *scale_blocked, bool *gate_blocked) {
  setenv("FLOE_BLOCKED_LAYOUT", layout, 1);
  setenv("FLOE_BLOCKED_PADDING", padding, 1);
  FloeGraph *gr = floe_graph_new();
  FloeOutput xp = floe_placeholder(gr, "x", FLOE_F32, (FloeShape){4, {-1, 10, 9, 3}});
  FloeOutput s = floe_unary(gr, "Relu", "stem_relu", conv(gr, "stem", xp, 3, 3, 16, 1, 51));
  FloeOutput a = floe_unary(gr, "Relu", "a", conv(gr, "ca", s, 1, 16, 24, 1, 52));
  FloeOutput l = conv(gr, "cl", a, 1, 24, 40, 1, 53), r = conv(gr, "cr", a, 3, 24, 40, 1, 54);
  FloeOutput sum = floe_binary(gr, "Mul", "scale",
                               max_pool2(gr, "pool", floe_binary(gr, "Add", "sum", l, r), "SAME"),
                               floe_const_f32(gr, "k", 0.5f));
  FloeOutput g = floe_binary(gr, "Add", "shift", floe_unary(gr, "Sigmoid", "gate", sum),
                             floe_const_f32(gr, "one", 1.0f));
  FloeOutput y = floe_unary(gr, "Relu", "y", conv(gr, "cy", conv(gr, "cg", g, 1, 40, 24, 2, 55),
                                                  3, 24, 40, 1, 56));
  spatial_mean(gr, "mean", y, false);
  ck_assert_msg(floe_graph_status(gr) == FLOE_OK, "%s", floe_graph_error(gr, NULL));
  FloeFeed feed = {"x", x};
  FloeNodeProfile *rows = NULL;
  int n = 0;
  FloeTensor *out = run_profiled(gr, 2, &feed, 1, "mean", &rows, &n);
  *conversions = 0;
  *scale_blocked = *gate_blocked = false;
  for (int i = 0; i < n; i++) {
    *conversions += !strcmp(rows[i].op, "_ToBlocked") || !strcmp(rows[i].op, "_FromBlocked");
    *scale_blocked |= !strcmp(rows[i].node, "scale/_blocked");
    *gate_blocked |= !strcmp(rows[i].node, "gate/_blocked");
  }
  free(rows);
  unsetenv("FLOE_BLOCKED_LAYOUT");
  unsetenv("FLOE_BLOCKED_PADDING");
  return out;
}

START_TEST(layout_pass_pads_channels) {
  int64_t xd[4] = {_i ? 3 : 1, 10, 9, 3};
  FloeTensor *x = harness_random(FLOE_F32, 4, xd, 57, -1, 1);
  int off, whole, padded;
  bool scale, gate;
  FloeTensor *want = run_padded_net(x, "0", "1", &off, &scale, &gate);
  FloeTensor *got_whole = run_padded_net(x, "1", "0", &whole, &scale, &gate);
  ck_assert(!scale && !gate);
  FloeTensor *got = run_padded_net(x, "1", "1", &padded, &scale, &gate);
  ck_assert_int_eq(off, 0);
  harness_assert_close(got_whole, want, 1e-4, 1e-4, "whole blocks only");
  harness_assert_close(got, want, 1e-4, 1e-4, "padded blocks");
  if (have_converters()) {
    ck_assert_int_eq(padded, 1);
    ck_assert_msg(scale && !gate, "scaling blocked %d, sigmoid blocked %d", scale, gate);
  }
  floe_tensor_release(x);
  floe_tensor_release(want);
  floe_tensor_release(got_whole);
  floe_tensor_release(got);
}
END_TEST

int main(void) {
#if defined(__SANITIZE_THREAD__)
  /* A pool of one thread runs a convolution on OpenMP's threads, whose barriers (libgomp's
   * futexes) ThreadSanitizer cannot see: every buffer handed to such a region would look
   * raced. Under ThreadSanitizer OpenMP gets one thread; Floe's own pool is what it checks. */
  setenv("OMP_NUM_THREADS", "1", 1);
#endif
  Suite *s = suite_create("blocked_conv");
  TCase *tc = tcase_create("blocked_conv");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, converters_round_trip);
  tcase_add_test(tc, converter_errors_name_the_shape);
  tcase_add_test(tc, converter_gradients_are_each_other);
  tcase_add_loop_test(tc, blocked_matches_channels_last, 0, (int)(sizeof geos / sizeof *geos));
  tcase_add_test(tc, blocked_side_input_broadcasts);
  tcase_add_test(tc, channels_first_first_layer);
  tcase_add_test(tc, blocked_conv_rejects_bad_inputs);
  tcase_add_test(tc, blocked_grouped_conv_needs_whole_blocks);
  tcase_add_loop_test(tc, layout_pass_blocks_conv_chains, 0, 8);
  tcase_add_loop_test(tc, layout_pass_blocks_concat, 0, 3);
  tcase_add_test(tc, padded_output_padding_is_zero);
  tcase_add_loop_test(tc, layout_pass_pads_channels, 0, 2);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
