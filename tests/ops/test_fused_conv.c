/* SPDX-License-Identifier: Apache-2.0 */
/* test_fused_conv.c - _FusedConv (ops_conv.def), the convolution the fusion pass makes.
 *
 * Every combination of its post-ops (bias, side input, ReLU) on several geometries, batch
 * sizes and pool sizes (whole batches, batches cut into shards, single images cut into
 * blocks of rows) is checked against the unfused ops computing the same function in f64
 * (Conv's reference loops, BiasAdd, Add, Relu) on the same values. Side inputs that
 * broadcast, empty convolutions, a constant filter kept by address, a fed filter changed in
 * place between runs, and bad inputs (errors naming what is wrong) are checked too. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* One convolution's attributes and shapes. side: the side input's shape when it is not the
 * output's (side_rank 0: the output's shape). */
typedef struct Geo {
  const char *name;
  bool cf;
  int rank;
  int64_t x[5], f[5];
  const char *padding;
  int64_t strides[5], dil[5], pads[10], groups;
  int side_rank;
  int64_t side[5];
} Geo;

enum { BIAS = 1, ADD = 2, RELU = 4 };

static void set_list(FloeNodeBuilder *b, const char *name, const int64_t *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i]) {
      floe_node_set_attr_int_list(b, name, v, n);
      return;
    }
}

static void set_conv_attrs(FloeNodeBuilder *b, const Geo *g) {
  floe_node_set_attr_string(b, "data_format", g->cf ? "CHANNELS_FIRST" : "CHANNELS_LAST");
  if (g->padding) floe_node_set_attr_string(b, "padding", g->padding);
  set_list(b, "strides", g->strides, g->rank);
  set_list(b, "dilations", g->dil, g->rank);
  set_list(b, "explicit_paddings", g->pads, 2 * g->rank);
  if (g->groups) floe_node_set_attr_int(b, "groups", g->groups);
}

/* The filter's output channels. */
static int64_t out_channels(const Geo *g) { return g->f[g->rank - 1]; }

/* Inputs of one case, in f32 and the same values in f64. */
typedef struct Inputs {
  FloeTensor *t32[4], *t64[4]; /* x, f, bias, side (NULL when absent) */
} Inputs;

/* Random f32 values in [-1, 1), and *t64 the same values in f64. */
static FloeTensor *pair(int rank, const int64_t *dims, uint64_t seed, FloeTensor **t64) {
  FloeTensor *r = harness_random(FLOE_F32, rank, dims, seed, -1, 1);
  double *v = harness_values(r);
  *t64 = harness_from_doubles(FLOE_F64, rank, dims, v);
  free(v);
  return r;
}

/* f64 reference: [Relu]([Add]([BiasAdd](Conv(x, f), bias), side)) with fusion off. */
static FloeTensor *reference(const Geo *g, unsigned post, FloeTensor *const *in) {
  setenv("FLOE_FUSION", "0", 1);
  FloeGraph *gr = floe_graph_new();
  FloeOutput x = floe_placeholder(gr, "x", FLOE_F64, floe_tensor_shape(in[0]));
  FloeOutput f = floe_placeholder(gr, "f", FLOE_F64, floe_tensor_shape(in[1]));
  FloeNodeBuilder *b = floe_node_begin(gr, "Conv", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  set_conv_attrs(b, g);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  FloeFeed feeds[4] = {{"x", in[0]}, {"f", in[1]}};
  int nf = 2;
  if (post & BIAS) {
    FloeOutput bias = floe_placeholder(gr, "b", FLOE_F64, floe_tensor_shape(in[2]));
    b = floe_node_begin(gr, "BiasAdd", "biased");
    floe_node_add_input(b, y);
    floe_node_add_input(b, bias);
    floe_node_set_attr_string(b, "data_format", g->cf ? "NCHW" : "NHWC");
    y = floe_out(floe_node_finish(b), 0);
    feeds[nf++] = (FloeFeed){"b", in[2]};
  }
  if (post & ADD) {
    y = floe_binary(gr, "Add", "sum", y,
                    floe_placeholder(gr, "s", FLOE_F64, floe_tensor_shape(in[3])));
    feeds[nf++] = (FloeFeed){"s", in[3]};
  }
  if (post & RELU) y = floe_unary(gr, "Relu", "relu", y);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(gr, NULL);
  const char *fetch = floe_node_name(y.node);
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, feeds, nf, &fetch, 1, NULL, 0, &out, st) == FLOE_OK,
                "reference: %s", floe_status_message(st));
  floe_session_free(s);
  floe_graph_free(gr);
  floe_status_free(st);
  unsetenv("FLOE_FUSION");
  return out;
}

/* A graph of one _FusedConv on placeholders (shapes known when `shapes`, else unknown). */
static FloeGraph *fused_graph(const Geo *g, unsigned post, FloeTensor *const *in, bool shapes) {
  FloeGraph *gr = floe_graph_new();
  const char *names[4] = {"x", "f", "b", "s"};
  FloeOutput ph[4], args[2];
  int na = 0;
  for (int i = 0; i < 4; i++)
    if (in[i])
      ph[i] = floe_placeholder(gr, names[i], floe_tensor_dtype(in[i]),
                               shapes ? floe_tensor_shape(in[i]) : floe_shape_unknown());
  if (post & BIAS) args[na++] = ph[2];
  if (post & ADD) args[na++] = ph[3];
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "fused");
  floe_node_add_input(b, ph[0]);
  floe_node_add_input(b, ph[1]);
  floe_node_add_input_list(b, args, na);
  set_conv_attrs(b, g);
  floe_node_set_attr_bool(b, "fused_bias", (post & BIAS) != 0);
  floe_node_set_attr_bool(b, "fused_add", (post & ADD) != 0);
  floe_node_set_attr_bool(b, "fused_relu", (post & RELU) != 0);
  floe_node_finish(b);
  return gr;
}

/* Runs the graph's "fused" on the inputs on rt (NULL: the default runtime); the status code,
 * *out a new reference on success. */
static floe_code run_fused(FloeGraph *gr, FloeRuntime *rt, FloeTensor *const *in, FloeTensor **out,
                           FloeStatus *st) {
  const char *names[4] = {"x", "f", "b", "s"};
  FloeFeed feeds[4];
  int nf = 0;
  for (int i = 0; i < 4; i++)
    if (in[i]) feeds[nf++] = (FloeFeed){names[i], in[i]};
  const char *fetch = "fused";
  return harness_run_graph(gr, rt, feeds, nf, &fetch, 1, out, st);
}

static void make_inputs(const Geo *g, unsigned post, int64_t batch, uint64_t seed, Inputs *in) {
  memset(in, 0, sizeof *in);
  int64_t xd[5];
  memcpy(xd, g->x, sizeof xd);
  xd[0] = batch;
  in->t32[0] = pair(g->rank, xd, seed, &in->t64[0]);
  in->t32[1] = pair(g->rank, g->f, seed + 1, &in->t64[1]);
  if (post & BIAS) {
    int64_t bd = out_channels(g);
    in->t32[2] = pair(1, &bd, seed + 2, &in->t64[2]);
  }
  if (post & ADD) {
    /* The side input has the output's shape (from a plain f64 convolution) unless given. */
    int rank = g->side_rank;
    int64_t sd[5];
    if (rank) {
      memcpy(sd, g->side, sizeof sd);
    } else {
      FloeTensor *conv = reference(g, 0, in->t64);
      rank = floe_tensor_rank(conv);
      memcpy(sd, floe_tensor_dims(conv), (size_t)rank * sizeof *sd);
      floe_tensor_release(conv);
    }
    in->t32[3] = pair(rank, sd, seed + 3, &in->t64[3]);
  }
}

static void free_inputs(Inputs *in) {
  for (int i = 0; i < 4; i++) {
    floe_tensor_release(in->t32[i]);
    floe_tensor_release(in->t64[i]);
  }
}

/* _FusedConv in f32 against the f64 reference on the same values. */
static void check_case(const Geo *g, unsigned post, int64_t batch, FloeRuntime *rt) {
  char what[160];
  snprintf(what, sizeof what, "%s batch %lld%s%s%s", g->name, (long long)batch,
           post & BIAS ? " +bias" : "", post & ADD ? " +side" : "", post & RELU ? " relu" : "");
  Inputs in;
  make_inputs(g, post, batch, 100 + post + (uint64_t)batch, &in);
  FloeTensor *want64 = reference(g, post, in.t64);
  double *v = harness_values(want64);
  FloeTensor *want = harness_from_doubles(FLOE_F32, floe_tensor_rank(want64),
                                          floe_tensor_dims(want64), v);
  free(v);
  FloeGraph *gr = fused_graph(g, post, in.t32, true);
  FloeStatus *st = floe_status_new();
  FloeTensor *got = NULL;
  ck_assert_msg(run_fused(gr, rt, in.t32, &got, st) == FLOE_OK, "%s: %s", what,
                floe_status_message(st));
  harness_assert_close(got, want, 1e-4, 1e-4, what);
  floe_tensor_release(got);
  floe_tensor_release(want);
  floe_tensor_release(want64);
  floe_graph_free(gr);
  floe_status_free(st);
  free_inputs(&in);
}

/* Small geometries: the formats, groups, strides, dilations, paddings and ranks. */
static const Geo small[] = {
    {.name = "CL 2-D SAME", .rank = 4, .x = {0, 9, 7, 5}, .f = {3, 3, 5, 8}, .padding = "SAME"},
    {.name = "CF 2-D groups 2 stride 2 pads dilation", .cf = true, .rank = 4, .x = {0, 4, 9, 8},
     .f = {3, 2, 2, 6}, .padding = "EXPLICIT", .strides = {1, 1, 2, 2}, .dil = {1, 1, 1, 2},
     .pads = {0, 0, 0, 0, 1, 0, 2, 1}, .groups = 2},
    {.name = "CL 1-D dilation 2 pads", .rank = 3, .x = {0, 12, 3}, .f = {3, 3, 4},
     .padding = "EXPLICIT", .dil = {1, 2, 1}, .pads = {0, 0, 2, 1, 0, 0}},
    {.name = "CF 3-D", .cf = true, .rank = 5, .x = {0, 2, 4, 5, 3}, .f = {2, 2, 2, 2, 3}},
};

/* Large enough (over a million multiply-adds) for single images to be cut into blocks of rows
 * or of output channels. */
static const Geo large[] = {
    {.name = "CL 2-D 32x32x32 SAME", .rank = 4, .x = {0, 32, 32, 32}, .f = {3, 3, 32, 32},
     .padding = "SAME"},
    {.name = "CL 2-D 33x31 stride 2 pads", .rank = 4, .x = {0, 33, 31, 16},
     .f = {3, 3, 16, 64}, .padding = "EXPLICIT", .strides = {1, 2, 2, 1},
     .pads = {0, 0, 1, 1, 0, 1, 0, 0}},
    {.name = "CF 2-D 30x20 dilation 2", .cf = true, .rank = 4, .x = {0, 16, 30, 20},
     .f = {3, 3, 16, 32}, .padding = "SAME", .dil = {1, 1, 2, 1}},
    /* Filters larger than an image: single images are cut into blocks of output channels. */
    {.name = "CL 2-D 4x4x256 -> 256", .rank = 4, .x = {0, 4, 4, 256}, .f = {3, 3, 256, 256},
     .padding = "SAME"},
    {.name = "CL 2-D 6x6x200 -> 40 (uneven channel blocks)", .rank = 4, .x = {0, 6, 6, 200},
     .f = {3, 3, 200, 40}, .padding = "SAME"},
    {.name = "CF 2-D 8x8x128 -> 96 stride 2", .cf = true, .rank = 4, .x = {0, 128, 8, 8},
     .f = {3, 3, 128, 96}, .padding = "EXPLICIT", .strides = {1, 1, 2, 2},
     .pads = {0, 0, 0, 0, 1, 1, 1, 1}},
};

START_TEST(every_post_op_combination_matches_unfused) {
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
    for (unsigned post = 0; post < 8; post++)
      for (int64_t batch = 1; batch <= 3; batch += 2) check_case(&small[i], post, batch, NULL);
}
END_TEST

START_TEST(batches_and_row_blocks_on_several_pool_sizes) {
  const int threads[3] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    FloeRuntime *rt = harness_runtime(threads[t]);
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
      check_case(&large[i], BIAS | ADD | RELU, 1, rt);
      check_case(&large[i], BIAS | RELU, 1, rt);
      check_case(&large[i], ADD, 3, rt);
    }
    floe_runtime_free(rt);
  }
}
END_TEST

START_TEST(side_inputs_that_broadcast) {
  Geo g = {.name = "CL side [8]", .rank = 4, .x = {0, 5, 4, 3}, .f = {3, 3, 3, 8},
           .padding = "SAME", .side_rank = 1, .side = {8}};
  for (unsigned post = ADD; post < 8; post = (post + 1) | ADD) check_case(&g, post, 2, NULL);
  Geo h = {.name = "CF side [4,1,1]", .cf = true, .rank = 4, .x = {0, 3, 5, 4},
           .f = {1, 2, 3, 4}, .side_rank = 3, .side = {4, 1, 1}};
  check_case(&h, BIAS | ADD | RELU, 2, NULL);
  /* A side input with more images than the convolution: the output grows to its shape. */
  Geo k = {.name = "CL side [3,4,3,6] on one image", .rank = 4, .x = {0, 4, 3, 2},
           .f = {1, 1, 2, 6}, .side_rank = 4, .side = {3, 4, 3, 6}};
  check_case(&k, BIAS | ADD | RELU, 1, NULL);
}
END_TEST

START_TEST(empty_convolution_is_the_epilogue_of_zeros) {
  /* No input channels: the convolution sums over nothing. */
  Geo g = {.name = "CL no input channels", .rank = 4, .x = {0, 4, 4, 0}, .f = {3, 3, 0, 5},
           .padding = "SAME"};
  for (unsigned post = 0; post < 8; post++) check_case(&g, post, 2, NULL);
  Geo h = {.name = "CF no input channels, side broadcast", .cf = true, .rank = 4,
           .x = {0, 0, 3, 3}, .f = {1, 1, 0, 4}, .side_rank = 1, .side = {3}};
  check_case(&h, BIAS | ADD | RELU, 2, NULL);
}
END_TEST

/* A filter from a Const with filter_constant: the kernel keeps the prepared filter by
 * address; every run gives the reference values. */
START_TEST(constant_filter_kept_by_address) {
  const Geo *g = &large[0];
  Inputs in;
  make_inputs(g, BIAS | RELU, 1, 7, &in);
  FloeTensor *want64 = reference(g, BIAS | RELU, in.t64);
  double *v = harness_values(want64);
  FloeTensor *want = harness_from_doubles(FLOE_F32, 4, floe_tensor_dims(want64), v);
  free(v);
  FloeGraph *gr = floe_graph_new();
  FloeOutput x = floe_placeholder(gr, "x", FLOE_F32, floe_tensor_shape(in.t32[0]));
  FloeOutput f = floe_const(gr, "f", in.t32[1]), bias = floe_const(gr, "b", in.t32[2]);
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "fused");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  floe_node_add_input_list(b, &bias, 1);
  set_conv_attrs(b, g);
  floe_node_set_attr_bool(b, "fused_bias", 1);
  floe_node_set_attr_bool(b, "fused_relu", 1);
  floe_node_set_attr_bool(b, "filter_constant", 1);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(gr, NULL);
  FloeFeed feed = {"x", in.t32[0]};
  const char *fetch = "fused";
  for (int run = 0; run < 3; run++) {
    FloeTensor *got = NULL;
    ck_assert_msg(floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &got, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    harness_assert_close(got, want, 1e-4, 1e-4, "constant filter");
    floe_tensor_release(got);
  }
  floe_session_free(s);
  floe_graph_free(gr);
  floe_status_free(st);
  floe_tensor_release(want);
  floe_tensor_release(want64);
  free_inputs(&in);
}
END_TEST

/* A fed filter (no filter_constant) whose bytes the caller changes in place between runs:
 * the second run must use the new values, though the tensor and its address are the same. */
START_TEST(fed_filter_changed_in_place_is_seen) {
  const Geo *g = &small[0];
  Inputs in;
  make_inputs(g, BIAS, 2, 9, &in);
  FloeGraph *gr = fused_graph(g, BIAS, in.t32, true);
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(gr, NULL);
  FloeFeed feeds[3] = {{"x", in.t32[0]}, {"f", in.t32[1]}, {"b", in.t32[2]}};
  const char *fetch = "fused";
  for (int run = 0; run < 3; run++) {
    FloeTensor *got = NULL, *want64 = reference(g, BIAS, in.t64);
    ck_assert_msg(floe_session_run(s, feeds, 3, &fetch, 1, NULL, 0, &got, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    double *v = harness_values(want64);
    FloeTensor *want = harness_from_doubles(FLOE_F32, 4, floe_tensor_dims(want64), v);
    free(v);
    harness_assert_close(got, want, 1e-4, 1e-4, "fed filter");
    floe_tensor_release(got);
    floe_tensor_release(want);
    floe_tensor_release(want64);
    /* New filter values in the same tensors. */
    float *f32 = floe_tensor_data(in.t32[1]);
    double *f64 = floe_tensor_data(in.t64[1]);
    for (int64_t i = 0; i < floe_tensor_num_elements(in.t32[1]); i++) {
      f32[i] = -f32[i] * 0.5f + (float)(i % 3) * 0.25f;
      f64[i] = f32[i];
    }
  }
  floe_session_free(s);
  floe_graph_free(gr);
  floe_status_free(st);
  free_inputs(&in);
}
END_TEST

/* The first failure of building or running _FusedConv on inputs with these dims, flags
 * `post` and the number of list arguments `nargs` (-1: what post asks for); shapes known to
 * the graph when `shapes`. Returns the code; the message goes to msg. */
static floe_code try_bad(const int64_t *bias_dims, int bias_rank, const int64_t *side_dims,
                         int side_rank, unsigned post, int nargs, bool shapes, FloeDType dt,
                         char *msg, size_t len) {
  const Geo *g = &small[0]; /* x [2,9,7,5], f [3,3,5,8] -> [2,9,7,8] */
  int64_t xd[4] = {2, 9, 7, 5};
  FloeTensor *in[4] = {harness_random(dt, 4, xd, 1, -1, 1), harness_random(dt, 4, g->f, 2, -1, 1),
                       bias_rank ? harness_random(dt, bias_rank, bias_dims, 3, -1, 1) : NULL,
                       side_rank ? harness_random(dt, side_rank, side_dims, 4, -1, 1) : NULL};
  FloeGraph *gr = floe_graph_new();
  const char *names[4] = {"x", "f", "b", "s"};
  FloeOutput ph[4], args[2];
  int na = 0;
  for (int i = 0; i < 4; i++)
    if (in[i])
      ph[i] = floe_placeholder(gr, names[i], dt,
                               shapes ? floe_tensor_shape(in[i]) : floe_shape_unknown());
  if (in[2]) args[na++] = ph[2];
  if (in[3]) args[na++] = ph[3];
  if (nargs >= 0) na = nargs;
  FloeNodeBuilder *b = floe_node_begin(gr, "_FusedConv", "fused");
  floe_node_add_input(b, ph[0]);
  floe_node_add_input(b, ph[1]);
  floe_node_add_input_list(b, args, na);
  set_conv_attrs(b, g);
  floe_node_set_attr_bool(b, "fused_bias", (post & BIAS) != 0);
  floe_node_set_attr_bool(b, "fused_add", (post & ADD) != 0);
  floe_node_set_attr_bool(b, "fused_relu", (post & RELU) != 0);
  floe_node_finish(b);
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code rc = run_fused(gr, NULL, in, &out, st);
  snprintf(msg, len, "%s", floe_status_message(st));
  floe_tensor_release(out);
  floe_status_free(st);
  floe_graph_free(gr);
  for (int i = 0; i < 4; i++) floe_tensor_release(in[i]);
  return rc;
}

#define ASSERT_FAILS_WITH(call, text)                                                         \
  do {                                                                                        \
    char m_[512];                                                                             \
    floe_code rc_ = (call);                                                                   \
    ck_assert_msg(rc_ != FLOE_OK, "expected an error containing \"%s\"", text);              \
    ck_assert_msg(strstr(m_, text) != NULL, "error \"%s\" does not say \"%s\"", m_, text);   \
  } while (0)

START_TEST(bad_inputs_are_errors) {
  const int64_t b8[1] = {8}, b5[1] = {5}, b2x4[2] = {2, 4}, s_bad[4] = {2, 9, 7, 3};
  const int64_t s_ok[4] = {2, 9, 7, 8};
  /* At graph building (known shapes). */
  ASSERT_FAILS_WITH(try_bad(b8, 1, NULL, 0, BIAS, 0, true, FLOE_F32, m_, sizeof m_),
                    "extra inputs");
  ASSERT_FAILS_WITH(try_bad(b8, 1, s_ok, 4, BIAS, -1, true, FLOE_F32, m_, sizeof m_),
                    "extra inputs");
  ASSERT_FAILS_WITH(try_bad(b5, 1, NULL, 0, BIAS, -1, true, FLOE_F32, m_, sizeof m_),
                    "does not match the 8 output channels");
  ASSERT_FAILS_WITH(try_bad(b2x4, 2, NULL, 0, BIAS, -1, true, FLOE_F32, m_, sizeof m_),
                    "must be 1-D");
  ASSERT_FAILS_WITH(try_bad(NULL, 0, s_bad, 4, ADD, -1, true, FLOE_F32, m_, sizeof m_),
                    "Incompatible shapes");
  /* At run time (shapes unknown to the graph): the kernel's checks. */
  ASSERT_FAILS_WITH(try_bad(b5, 1, NULL, 0, BIAS | RELU, -1, false, FLOE_F32, m_, sizeof m_),
                    "bias [5] does not match the 8 output channels");
  ASSERT_FAILS_WITH(try_bad(b2x4, 2, NULL, 0, BIAS, -1, false, FLOE_F32, m_, sizeof m_),
                    "does not match the 8 output channels");
  ASSERT_FAILS_WITH(try_bad(b8, 1, s_bad, 4, BIAS | ADD, -1, false, FLOE_F32, m_, sizeof m_),
                    "does not broadcast");
  /* The CPU runs it in f32 only (the fusion pass leaves other dtypes unfused). */
  ASSERT_FAILS_WITH(try_bad(b8, 1, NULL, 0, BIAS, -1, true, FLOE_F64, m_, sizeof m_),
                    "no allowed device has a kernel");
  /* And a good call of the same shapes works. */
  char m[512];
  ck_assert_msg(try_bad(b8, 1, s_ok, 4, BIAS | ADD | RELU, -1, false, FLOE_F32, m, sizeof m) ==
                    FLOE_OK, "%s", m);
}
END_TEST

/* Differentiating through a _FusedConv built directly is an error naming it (the fusion
 * pass makes it only after autodiff). */
START_TEST(gradient_is_an_error) {
  const Geo *g = &small[0];
  Inputs in;
  make_inputs(g, BIAS | RELU, 1, 5, &in);
  FloeGraph *gr = fused_graph(g, BIAS | RELU, in.t32, true);
  FloeStatus *st = floe_status_new();
  FloeOutput y = floe_out(floe_graph_find(gr, "fused"), 0);
  FloeOutput x = floe_out(floe_graph_find(gr, "x"), 0), dx;
  ck_assert_int_eq(floe_gradients(gr, &y, 1, &x, 1, NULL, &dx, st), FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(st), "'fused' (_FusedConv)"), "%s",
                floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(gr);
  free_inputs(&in);
}
END_TEST

int main(void) {
  setenv("FLOE_NUM_THREADS", "2", 0);
  Suite *s = suite_create("fused_conv");
  TCase *tc = tcase_create("fused_conv");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, every_post_op_combination_matches_unfused);
  tcase_add_test(tc, batches_and_row_blocks_on_several_pool_sizes);
  tcase_add_test(tc, side_inputs_that_broadcast);
  tcase_add_test(tc, empty_convolution_is_the_epilogue_of_zeros);
  tcase_add_test(tc, constant_filter_kept_by_address);
  tcase_add_test(tc, fed_filter_changed_in_place_is_seen);
  tcase_add_test(tc, bad_inputs_are_errors);
  tcase_add_test(tc, gradient_is_an_error);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
