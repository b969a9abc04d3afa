/* SPDX-License-Identifier: Apache-2.0 */
/* test_layers.c - the layer builders of floe_train.h run through real sessions: output
 * shapes; dense and conv2d forward against loops written here on the fetched weights;
 * pooling and flatten; dropout masks (rate, scale, (seed, step) determinism, inference
 * identity); batch norm (normalisation and the moving-average formula); embedding rows;
 * the cross-entropy loss; shared weights when a layer is built twice; errors. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

static FloeRuntime *rt;

static void runtime_setup(void) { rt = harness_runtime(2); }

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* A session on g with every variable initialised. */
static FloeSession *session_init(FloeGraph *g) { return harness_session_init(g, rt); }

/* Runs fetches with up to two feeds (name NULL: none). Caller releases outputs. */
static void run(FloeSession *s, const char *f1, FloeTensor *v1, const char *f2, FloeTensor *v2,
                const char *const *fetches, int n, FloeTensor **out) {
  FloeFeed feeds[2] = {{f1, v1}, {f2, v2}};
  harness_run(s, feeds, f2 ? 2 : f1 ? 1 : 0, fetches, n, NULL, 0, out, NULL);
}

static FloeTensor *fetch1(FloeSession *s, const char *f1, FloeTensor *v1, const char *name) {
  FloeTensor *t = NULL;
  run(s, f1, v1, NULL, NULL, &name, 1, &t);
  return t;
}

static const char *name_of(FloeOutput o) {
  ck_assert_ptr_nonnull(o.node);
  return floe_node_name(o.node);
}

static void assert_shape(FloeOutput o, int rank, const int64_t *dims) {
  FloeShape s = floe_node_output_shape(o.node, o.index);
  char got[64], want[64];
  FloeShape w = floe_shape_make(rank, dims);
  ck_assert_msg(s.rank == rank, "%s: shape %s, want %s", floe_node_name(o.node),
                floe_shape_str(&s, got, sizeof got), floe_shape_str(&w, want, sizeof want));
  for (int i = 0; i < rank; i++)
    ck_assert_msg(s.dims[i] == dims[i], "%s: shape %s, want %s", floe_node_name(o.node),
                  floe_shape_str(&s, got, sizeof got), floe_shape_str(&w, want, sizeof want));
}

static void assert_graph_error(FloeGraph *g, const char *a, const char *b) {
  ck_assert_int_ne(floe_graph_status(g), FLOE_OK);
  const char *msg = floe_graph_error(g, NULL);
  ck_assert_msg(strstr(msg, a) != NULL, "'%s' not in: %s", a, msg);
  if (b) ck_assert_msg(strstr(msg, b) != NULL, "'%s' not in: %s", b, msg);
}

/* ---- dense ---- */

START_TEST(dense_forward_and_shared_weights) {
  enum { B = 3, IN = 4, OUT = 5 };
  FloeGraph *g = floe_graph_new();
  const int64_t xd[2] = {-1, IN}, od[2] = {-1, OUT};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput y = floe_layer_dense(g, "d", x, OUT, FLOE_ACT_RELU, 7);
  FloeOutput lin = floe_layer_dense(g, "lin", x, OUT, FLOE_ACT_NONE, 8);
  /* Built again: the same variables, new ops. */
  int nvars = floe_graph_variables(g, 0, NULL, 0);
  FloeOutput y2 = floe_layer_dense(g, "d", x, OUT, FLOE_ACT_RELU, 7);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(nvars, 4);
  ck_assert_int_eq(floe_graph_variables(g, 1, NULL, 0), 4);
  ck_assert_ptr_ne(y.node, y2.node);
  assert_shape(y, 2, od);
  assert_shape(lin, 2, od);
  /* A non-zero bias, so BiasAdd is checked too. */
  float bv[OUT] = {0.5f, -0.25f, 1.0f, -2.0f, 0.125f};
  const int64_t bd[1] = {OUT};
  FloeTensor *bt = harness_f32(1, bd, bv);
  FloeNode *set_b = floe_assign(g, "set_bias", floe_variable_get(g, "d/bias").handle,
                                floe_const(g, "bias_value", bt));
  FloeSession *s = session_init(g);
  FloeStatus *st = floe_status_new();
  const char *t = floe_node_name(set_b);
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &t, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const int64_t xdims[2] = {B, IN};
  FloeTensor *xv = harness_random(FLOE_F32, 2, xdims, 11, -1, 1);
  const char *fetches[5] = {name_of(y), name_of(y2), "d/kernel/read", "d/bias/read",
                            name_of(lin)};
  FloeTensor *out[5];
  run(s, "x", xv, NULL, NULL, fetches, 5, out);
  const float *X = floe_tensor_data(xv), *W = floe_tensor_data(out[2]),
              *bias = floe_tensor_data(out[3]), *Y = floe_tensor_data(out[0]),
              *Y2 = floe_tensor_data(out[1]);
  ck_assert_int_eq(floe_tensor_dim(out[2], 0), IN);
  ck_assert_int_eq(floe_tensor_dim(out[2], 1), OUT);
  ck_assert_mem_eq(bias, bv, sizeof bv);
  /* Glorot uniform bound sqrt(6 / (in + out)), and not all zero. */
  double bound = sqrt(6.0 / (IN + OUT)), wsum = 0;
  for (int i = 0; i < IN * OUT; i++) {
    ck_assert_double_le(fabs(W[i]), bound);
    wsum += fabs(W[i]);
  }
  ck_assert_double_gt(wsum, 0.1);
  for (int b = 0; b < B; b++)
    for (int o = 0; o < OUT; o++) {
      double acc = bias[o];
      for (int i = 0; i < IN; i++) acc += (double)X[b * IN + i] * W[i * OUT + o];
      double want = acc > 0 ? acc : 0;
      ck_assert_msg(fabs(Y[b * OUT + o] - want) < 1e-5, "y[%d,%d] = %g, want %g", b, o,
                    Y[b * OUT + o], want);
      ck_assert_float_eq(Y2[b * OUT + o], Y[b * OUT + o]);
    }
  /* The linear layer has its own weights: it does not equal the relu layer before relu. */
  ck_assert(memcmp(floe_tensor_data(out[4]), Y, sizeof(float) * B * OUT) != 0);
  for (int i = 0; i < 5; i++) floe_tensor_release(out[i]);
  floe_tensor_release(xv);
  floe_tensor_release(bt);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---- conv2d, pooling, flatten ---- */

START_TEST(conv_pool_flatten) {
  enum { N = 2, H = 6, W = 5, C = 3, F = 4, K = 3 };
  FloeGraph *g = floe_graph_new();
  const int64_t xd[4] = {N, H, W, C};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput same = floe_layer_conv2d(g, "c", x, F, K, K, 1, "SAME", FLOE_ACT_NONE, 3);
  FloeOutput valid2 = floe_layer_conv2d(g, "cv", x, F, K, K, 2, "VALID", FLOE_ACT_RELU, 4);
  FloeOutput mp = floe_layer_max_pool(g, "mp", same, 2, 2, "VALID");
  FloeOutput ap = floe_layer_avg_pool(g, "ap", same, 3, 1, "SAME");
  FloeOutput fl = floe_layer_flatten(g, "fl", mp);
  const int64_t ud[4] = {-1, 8, 8, 2};
  FloeOutput u = floe_placeholder(g, "u", FLOE_F32, floe_shape_make(4, ud));
  FloeOutput ufl = floe_layer_flatten(g, "ufl", u);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  const int64_t s_same[4] = {N, H, W, F}, s_valid[4] = {N, 2, 2, F}, s_mp[4] = {N, 3, 2, F},
                s_fl[2] = {N, 3 * 2 * F}, s_ufl[2] = {-1, 128};
  assert_shape(same, 4, s_same);
  assert_shape(valid2, 4, s_valid);
  assert_shape(mp, 4, s_mp);
  assert_shape(ap, 4, s_same);
  assert_shape(fl, 2, s_fl);
  assert_shape(ufl, 2, s_ufl);
  FloeSession *s = session_init(g);
  FloeTensor *xv = harness_random(FLOE_F32, 4, xd, 5, -1, 1);
  const char *fetches[6] = {name_of(same), "c/kernel/read", name_of(mp), name_of(fl),
                            name_of(valid2), "cv/kernel/read"};
  FloeTensor *out[6];
  run(s, "x", xv, NULL, NULL, fetches, 6, out);
  const float *X = floe_tensor_data(xv), *Y = floe_tensor_data(out[0]),
              *Kw = floe_tensor_data(out[1]), *MP = floe_tensor_data(out[2]),
              *V = floe_tensor_data(out[4]), *Kv = floe_tensor_data(out[5]);
  /* SAME, stride 1: pad (K-1)/2 = 1 on each side; bias is zero. */
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++)
        for (int f = 0; f < F; f++) {
          double acc = 0;
          for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
              for (int c = 0; c < C; c++) {
                int ih = h + i - 1, iw = w + j - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (double)X[((n * H + ih) * W + iw) * C + c] *
                       Kw[((i * K + j) * C + c) * F + f];
              }
          ck_assert_msg(fabs(Y[((n * H + h) * W + w) * F + f] - acc) < 1e-5, "conv (%d,%d,%d,%d)",
                        n, h, w, f);
        }
  /* VALID, stride 2, relu. */
  for (int n = 0; n < N; n++)
    for (int h = 0; h < 2; h++)
      for (int w = 0; w < 2; w++)
        for (int f = 0; f < F; f++) {
          double acc = 0;
          for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
              for (int c = 0; c < C; c++)
                acc += (double)X[((n * H + 2 * h + i) * W + 2 * w + j) * C + c] *
                       Kv[((i * K + j) * C + c) * F + f];
          double want = acc > 0 ? acc : 0;
          ck_assert_msg(fabs(V[((n * 2 + h) * 2 + w) * F + f] - want) < 1e-5, "valid conv");
        }
  /* Max pool 2x2 stride 2 VALID of the SAME conv; flatten keeps the order. */
  for (int n = 0; n < N; n++)
    for (int h = 0; h < 3; h++)
      for (int w = 0; w < 2; w++)
        for (int f = 0; f < F; f++) {
          float m = -INFINITY;
          for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
              float v = Y[((n * H + 2 * h + i) * W + 2 * w + j) * F + f];
              if (v > m) m = v;
            }
          ck_assert_float_eq(MP[((n * 3 + h) * 2 + w) * F + f], m);
        }
  ck_assert_mem_eq(floe_tensor_data(out[3]), MP, sizeof(float) * N * 3 * 2 * F);
  for (int i = 0; i < 6; i++) floe_tensor_release(out[i]);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- dropout ---- */

START_TEST(dropout_masks) {
  enum { R = 200, C = 500 };
  const double rate = 0.3;
  FloeGraph *g = floe_graph_new();
  const int64_t xd[2] = {R, C};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput step = floe_placeholder(g, "step", FLOE_I64, floe_shape_scalar());
  FloeOutput d1 = floe_layer_dropout(g, "drop", x, rate, 1, 17, step);
  FloeOutput d2 = floe_layer_dropout(g, "drop", x, rate, 1, 17, step); /* same seed */
  FloeOutput d3 = floe_layer_dropout(g, "other", x, rate, 1, 18, step);
  FloeOutput nostep = floe_layer_dropout(g, "nostep", x, rate, 1, 17, floe_out(NULL, 0));
  FloeOutput inf = floe_layer_dropout(g, "drop", x, rate, 0, 17, step);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  ck_assert_ptr_eq(inf.node, x.node); /* inference: identity */
  assert_shape(d1, 2, xd);
  FloeSession *s = session_init(g);
  FloeTensor *xv = harness_random(FLOE_F32, 2, xd, 9, 0.5, 2.0);
  const float *X = floe_tensor_data(xv);
  FloeTensor *s5 = floe_tensor_scalar_i64(5, NULL), *s6 = floe_tensor_scalar_i64(6, NULL);
  const char *fetches[4] = {name_of(d1), name_of(d2), name_of(d3), name_of(nostep)};
  FloeTensor *a[4], *b[4];
  run(s, "x", xv, "step", s5, fetches, 4, a);
  run(s, "x", xv, "step", s5, fetches, 4, b);
  const float *A = floe_tensor_data(a[0]);
  int64_t zeros = 0, n = (int64_t)R * C;
  for (int64_t i = 0; i < n; i++) {
    if (A[i] == 0.0f) {
      zeros++;
    } else {
      double want = X[i] / (1.0 - rate);
      ck_assert_msg(fabs(A[i] - want) <= 1e-6 * want, "kept element %lld: %g, want %g",
                    (long long)i, A[i], want);
    }
  }
  /* 100000 draws: the dropped fraction is within 7 standard deviations (0.0014) of rate. */
  double frac = (double)zeros / (double)n;
  ck_assert_msg(fabs(frac - rate) < 0.01, "dropped %.4f, want %.2f", frac, rate);
  /* The same (seed, step): the same mask, run to run and layer to layer. */
  for (int k = 0; k < 4; k++)
    ck_assert_mem_eq(floe_tensor_data(a[k]), floe_tensor_data(b[k]), sizeof(float) * n);
  ck_assert_mem_eq(floe_tensor_data(a[0]), floe_tensor_data(a[1]), sizeof(float) * n);
  /* Another seed, another mask; another step, another mask. */
  ck_assert(memcmp(floe_tensor_data(a[0]), floe_tensor_data(a[2]), sizeof(float) * n) != 0);
  FloeTensor *c[4];
  run(s, "x", xv, "step", s6, fetches, 4, c);
  ck_assert(memcmp(floe_tensor_data(a[0]), floe_tensor_data(c[0]), sizeof(float) * n) != 0);
  /* Without a step the mask is (seed, 0): it does not change with the step fed. */
  ck_assert_mem_eq(floe_tensor_data(a[3]), floe_tensor_data(c[3]), sizeof(float) * n);
  for (int k = 0; k < 4; k++) {
    floe_tensor_release(a[k]);
    floe_tensor_release(b[k]);
    floe_tensor_release(c[k]);
  }
  floe_tensor_release(xv);
  floe_tensor_release(s5);
  floe_tensor_release(s6);
  floe_session_free(s);
  floe_graph_free(g);
  /* An input of unknown batch size: the mask's shape comes from Shape at run time. */
  g = floe_graph_new();
  const int64_t ud[2] = {-1, 50}, fd[2] = {40, 50};
  x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, ud));
  FloeOutput du = floe_layer_dropout(g, "drop", x, 0.5, 1, 3, floe_out(NULL, 0));
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  assert_shape(du, 2, ud);
  s = session_init(g);
  FloeTensor *ones = harness_random(FLOE_F32, 2, fd, 1, 1.0, 1.0);
  FloeTensor *dv = fetch1(s, "x", ones, name_of(du));
  ck_assert_int_eq(floe_tensor_dim(dv, 0), 40);
  int dropped = 0;
  for (int i = 0; i < 2000; i++) {
    float v = ((float *)floe_tensor_data(dv))[i];
    ck_assert(v == 0.0f || v == 2.0f);
    dropped += v == 0.0f;
  }
  ck_assert_msg(dropped > 850 && dropped < 1150, "dropped %d of 2000 at rate 0.5", dropped);
  floe_tensor_release(dv);
  floe_tensor_release(ones);
  floe_session_free(s);
  floe_graph_free(g);
  /* A rate outside [0, 1) is a graph error naming the layer. */
  g = floe_graph_new();
  x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  floe_layer_dropout(g, "bad", x, 1.0, 1, 1, floe_out(NULL, 0));
  assert_graph_error(g, "layer 'bad' (dropout)", "rate 1");
  floe_graph_free(g);
}
END_TEST

/* ---- batch norm ---- */

START_TEST(batch_norm_training_and_inference) {
  enum { N = 4, H = 2, W = 3, C = 3 };
  const double momentum = 0.9, eps = 1e-3;
  FloeGraph *g = floe_graph_new();
  const int64_t xd[4] = {N, H, W, C};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput tr = floe_layer_batch_norm(g, "bn", x, 1, momentum, eps);
  FloeOutput in = floe_layer_batch_norm(g, "bn", x, 0, momentum, eps);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_graph_variables(g, 0, NULL, 0), 4);
  ck_assert_int_eq(floe_graph_variables(g, 1, NULL, 0), 2); /* gamma, beta */
  assert_shape(tr, 4, xd);
  assert_shape(in, 4, xd);
  FloeSession *s = session_init(g);
  /* Channel c has mean about 3c and spread about c + 1. */
  double xs[N * H * W * C];
  for (int i = 0; i < N * H * W; i++)
    for (int c = 0; c < C; c++)
      xs[i * C + c] = 3.0 * c + (c + 1) * sin(1.7 * i + c);
  FloeTensor *xv = harness_from_doubles(FLOE_F32, 4, xd, xs);
  const float *X = floe_tensor_data(xv);
  double mean[C] = {0}, var[C] = {0}, mm[C], mv[C];
  const int M = N * H * W;
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) mean[c] += X[i * C + c] / (double)M;
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) var[c] += pow(X[i * C + c] - mean[c], 2) / M;
  for (int c = 0; c < C; c++) mm[c] = 0, mv[c] = 1;
  for (int round = 0; round < 2; round++) {
    FloeTensor *y = fetch1(s, "x", xv, name_of(tr));
    const float *Y = floe_tensor_data(y);
    double ym[C] = {0}, yv[C] = {0};
    for (int i = 0; i < M; i++)
      for (int c = 0; c < C; c++) {
        double want = (X[i * C + c] - mean[c]) / sqrt(var[c] + eps);
        ck_assert_msg(fabs(Y[i * C + c] - want) < 1e-4, "y[%d,%d] = %g, want %g", i, c,
                      Y[i * C + c], want);
        ym[c] += Y[i * C + c] / M;
      }
    for (int i = 0; i < M; i++)
      for (int c = 0; c < C; c++) yv[c] += pow(Y[i * C + c] - ym[c], 2) / M;
    for (int c = 0; c < C; c++) {
      ck_assert_double_lt(fabs(ym[c]), 1e-5);
      ck_assert_double_lt(fabs(yv[c] - var[c] / (var[c] + eps)), 1e-4);
      ck_assert_double_gt(yv[c], 0.99);
    }
    floe_tensor_release(y);
    /* Each training step moves the averages by the formula. */
    for (int c = 0; c < C; c++) {
      mm[c] = momentum * mm[c] + (1 - momentum) * mean[c];
      mv[c] = momentum * mv[c] + (1 - momentum) * var[c];
    }
    const char *names[2] = {"bn/moving_mean/read", "bn/moving_variance/read"};
    FloeTensor *mo[2];
    run(s, NULL, NULL, NULL, NULL, names, 2, mo);
    for (int c = 0; c < C; c++) {
      ck_assert_msg(fabs(((float *)floe_tensor_data(mo[0]))[c] - mm[c]) < 1e-5,
                    "round %d moving_mean[%d] = %g, want %g", round, c,
                    ((float *)floe_tensor_data(mo[0]))[c], mm[c]);
      ck_assert_msg(fabs(((float *)floe_tensor_data(mo[1]))[c] - mv[c]) < 1e-5,
                    "round %d moving_variance[%d] = %g, want %g", round, c,
                    ((float *)floe_tensor_data(mo[1]))[c], mv[c]);
    }
    floe_tensor_release(mo[0]);
    floe_tensor_release(mo[1]);
  }
  /* Inference uses the moving statistics and changes nothing. */
  FloeTensor *y = fetch1(s, "x", xv, name_of(in));
  const float *Y = floe_tensor_data(y);
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) {
      double want = (X[i * C + c] - mm[c]) / sqrt(mv[c] + eps);
      ck_assert_msg(fabs(Y[i * C + c] - want) < 1e-4, "inference y[%d,%d]", i, c);
    }
  floe_tensor_release(y);
  FloeTensor *m2 = fetch1(s, NULL, NULL, "bn/moving_mean/read");
  ck_assert_double_lt(fabs(((float *)floe_tensor_data(m2))[2] - mm[2]), 1e-5);
  floe_tensor_release(m2);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- embedding and loss ---- */

START_TEST(embedding_gathers_rows) {
  enum { V = 7, D = 4 };
  FloeGraph *g = floe_graph_new();
  const int64_t id[2] = {2, 3}, od[3] = {2, 3, D};
  FloeOutput ids = floe_placeholder(g, "ids", FLOE_I32, floe_shape_make(2, id));
  FloeOutput e = floe_layer_embedding(g, "emb", ids, V, D, 3);
  FloeOutput ids8 = floe_placeholder(g, "ids8", FLOE_U8, floe_shape_make(2, id));
  FloeOutput e8 = floe_layer_embedding(g, "emb", ids8, V, D, 3);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  assert_shape(e, 3, od);
  assert_shape(e8, 3, od);
  FloeSession *s = session_init(g);
  const int32_t iv[6] = {0, 6, 3, 3, 1, 5};
  const uint8_t iv8[6] = {0, 6, 3, 3, 1, 5};
  FloeTensor *it = harness_i32(2, id, iv), *it8 = harness_tensor(FLOE_U8, 2, id, iv8);
  const char *fetches[3] = {name_of(e), name_of(e8), "emb/embeddings/read"};
  FloeTensor *out[3];
  run(s, "ids", it, "ids8", it8, fetches, 3, out);
  const float *E = floe_tensor_data(out[0]), *T = floe_tensor_data(out[2]);
  ck_assert_int_eq(floe_tensor_dim(out[2], 0), V);
  for (int i = 0; i < V * D; i++) ck_assert_double_le(fabs(T[i]), 0.05);
  for (int k = 0; k < 6; k++)
    ck_assert_mem_eq(E + k * D, T + iv[k] * D, sizeof(float) * D);
  ck_assert_mem_eq(floe_tensor_data(out[1]), E, sizeof(float) * 6 * D);
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_tensor_release(it);
  floe_tensor_release(it8);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(cross_entropy_loss) {
  enum { B = 4, K = 5 };
  FloeGraph *g = floe_graph_new();
  const int64_t ld[2] = {B, K}, yd[1] = {B};
  FloeOutput logits = floe_placeholder(g, "logits", FLOE_F32, floe_shape_make(2, ld));
  FloeOutput labels = floe_placeholder(g, "labels", FLOE_I64, floe_shape_make(1, yd));
  FloeOutput loss = floe_sparse_softmax_cross_entropy(g, "loss", logits, labels);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  assert_shape(loss, 0, NULL);
  FloeSession *s = session_init(g);
  FloeTensor *lv = harness_random(FLOE_F32, 2, ld, 3, -3, 3);
  const int64_t yv[B] = {0, 4, 2, 2};
  FloeTensor *yt = harness_i64(1, yd, yv);
  const char *f = name_of(loss);
  FloeTensor *out;
  run(s, "logits", lv, "labels", yt, &f, 1, &out);
  const float *L = floe_tensor_data(lv);
  double want = 0;
  for (int b = 0; b < B; b++) {
    double mx = L[b * K], z = 0;
    for (int k = 1; k < K; k++) mx = fmax(mx, L[b * K + k]);
    for (int k = 0; k < K; k++) z += exp(L[b * K + k] - mx);
    want += (log(z) + mx - L[b * K + yv[b]]) / B;
  }
  ck_assert_msg(fabs(*(float *)floe_tensor_data(out) - want) < 1e-5, "loss %g, want %g",
                *(float *)floe_tensor_data(out), want);
  floe_tensor_release(out);
  floe_tensor_release(lv);
  floe_tensor_release(yt);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- training through the layers ---- */

/* dense - batch norm - dropout - dense trained with floe_minimize: every op the layers add
 * has a gradient, the moving averages move, and the loss falls. The labels are a fixed
 * function of the inputs (the argmax of three fixed linear scores). */
START_TEST(layers_train_end_to_end) {
  enum { B = 32, IN = 8, K = 3 };
  FloeGraph *g = floe_graph_new();
  const int64_t xd[2] = {B, IN}, yd[1] = {B};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I64, floe_shape_make(1, yd));
  FloeVariable step = floe_global_step(g);
  FloeOutput h = floe_layer_dense(g, "fc1", x, 16, FLOE_ACT_RELU, 1);
  h = floe_layer_batch_norm(g, "bn", h, 1, 0.9, 1e-3);
  h = floe_layer_dropout(g, "drop", h, 0.1, 1, 5, step.value);
  FloeOutput logits = floe_layer_dense(g, "fc2", h, K, FLOE_ACT_NONE, 2);
  FloeOutput loss = floe_sparse_softmax_cross_entropy(g, "loss", logits, y);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_ADAM);
  o.learning_rate = 0.02;
  FloeNode *train = floe_minimize(g, "train", loss, &o, NULL, 0);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSession *s = session_init(g);
  FloeTensor *xv = harness_random(FLOE_F32, 2, xd, 21, -1, 1);
  const float *X = floe_tensor_data(xv);
  int64_t labels[B];
  for (int b = 0; b < B; b++) {
    double best = -1e9;
    for (int k = 0; k < K; k++) {
      double sc = 0;
      for (int i = 0; i < IN; i++) sc += X[b * IN + i] * sin(1.0 + 3 * k + 0.7 * i);
      if (sc > best) best = sc, labels[b] = k;
    }
  }
  FloeTensor *yv = harness_i64(1, yd, labels);
  FloeFeed feeds[2] = {{"x", xv}, {"y", yv}};
  const char *fetch = name_of(loss), *target = floe_node_name(train);
  FloeStatus *st = floe_status_new();
  double first = 0, last = 0;
  for (int i = 0; i < 60; i++) {
    FloeTensor *lv;
    ck_assert_msg(floe_session_run(s, feeds, 2, &fetch, 1, &target, 1, &lv, st) == FLOE_OK,
                  "step %d: %s", i, floe_status_message(st));
    double v = *(float *)floe_tensor_data(lv);
    ck_assert(isfinite(v));
    if (i == 0) first = v;
    last = v;
    floe_tensor_release(lv);
  }
  ck_assert_msg(last < 0.5 * first, "loss %g -> %g", first, last);
  FloeTensor *mm = fetch1(s, NULL, NULL, "bn/moving_mean/read");
  double moved = 0;
  for (int c = 0; c < 16; c++) moved += fabs(((float *)floe_tensor_data(mm))[c]);
  ck_assert_double_gt(moved, 0.01);
  FloeTensor *gs = fetch1(s, NULL, NULL, name_of(step.value));
  ck_assert_int_eq(*(int64_t *)floe_tensor_data(gs), 60);
  floe_tensor_release(gs);
  floe_tensor_release(mm);
  floe_tensor_release(xv);
  floe_tensor_release(yv);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Fault simulation: building every layer kind (twice, sharing weights) with the Nth core
 * allocation failing, for N = 1, 2, ...: each attempt ends in a sticky FLOE_NO_MEMORY, or
 * in a complete graph once N passes the last allocation. */
static floe_code build_all(FloeGraph *g) {
  const int64_t xd[4] = {-1, 8, 8, 2}, id[1] = {5};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeOutput ids = floe_placeholder(g, "ids", FLOE_I32, floe_shape_make(1, id));
  FloeOutput labels = floe_placeholder(g, "labels", FLOE_I64, floe_shape_make(1, id));
  for (int training = 1; training >= 0; training--) {
    FloeOutput h = floe_layer_conv2d(g, "conv", x, 3, 3, 3, 1, "SAME", FLOE_ACT_RELU, 1);
    h = floe_layer_batch_norm(g, "bn", h, training, 0.9, 1e-3);
    h = floe_layer_max_pool(g, "mp", h, 2, 2, "VALID");
    h = floe_layer_avg_pool(g, "ap", h, 2, 1, "SAME");
    h = floe_layer_flatten(g, "flat", h);
    h = floe_layer_dropout(g, "drop", h, 0.2, training, 3, floe_out(NULL, 0));
    h = floe_layer_dense(g, "fc", h, 4, FLOE_ACT_SOFTMAX, 2);
    floe_sparse_softmax_cross_entropy(g, "loss", h, labels);
    floe_layer_embedding(g, "emb", ids, 10, 4, 5);
  }
  return floe_graph_status(g);
}

START_TEST(allocation_failures) {
  FloeGraph *ref = floe_graph_new();
  ck_assert_msg(build_all(ref) == FLOE_OK, "%s", floe_graph_error(ref, NULL));
  int want_nodes = floe_graph_num_nodes(ref);
  floe_graph_free(ref);
  int n;
  for (n = 1; n < 100000; n++) {
    FloeGraph *g = floe_graph_new();
    ck_assert_ptr_nonnull(g);
    floe_test_fail_alloc_after(n);
    floe_code rc = build_all(g);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      ck_assert_int_eq(floe_graph_num_nodes(g), want_nodes);
      floe_graph_free(g);
      break;
    }
    ck_assert_msg(rc == FLOE_NO_MEMORY, "N = %d: %s: %s", n, floe_code_name(rc),
                  floe_graph_error(g, NULL));
    floe_graph_free(g);
  }
  ck_assert_int_gt(n, 100);
  ck_assert_int_lt(n, 100000);
}
END_TEST

/* ---- errors ---- */

START_TEST(layer_errors_name_the_layer) {
  const int64_t d3[3] = {2, 3, 4}, d4[4] = {1, 4, 4, 2};
  FloeGraph *g = floe_graph_new();
  floe_layer_dense(g, "fc", floe_placeholder(g, "x", FLOE_F32, floe_shape_make(3, d3)), 5,
                   FLOE_ACT_NONE, 1);
  assert_graph_error(g, "layer 'fc' (dense)", "[2,3,4]");
  floe_graph_free(g);
  g = floe_graph_new();
  floe_layer_conv2d(g, "cv", floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, d4)), 3, 3,
                    3, 1, "FULL", FLOE_ACT_NONE, 1);
  assert_graph_error(g, "layer 'cv' (conv2d)", "FULL");
  floe_graph_free(g);
  g = floe_graph_new();
  floe_layer_dense(g, "fc", floe_out(NULL, 0), 5, FLOE_ACT_NONE, 1);
  assert_graph_error(g, "layer 'fc' (dense)", "invalid");
  floe_graph_free(g);
  g = floe_graph_new();
  floe_layer_dense(g, "fc", floe_placeholder(g, "x", FLOE_I32, floe_shape_make(2, d3)), 5,
                   FLOE_ACT_NONE, 1);
  assert_graph_error(g, "layer 'fc' (dense)", "float");
  floe_graph_free(g);
  /* The same name with another input width: the variable's shape disagrees. */
  g = floe_graph_new();
  const int64_t a[2] = {2, 3}, b[2] = {2, 4};
  floe_layer_dense(g, "fc", floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, a)), 5,
                   FLOE_ACT_NONE, 1);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  floe_layer_dense(g, "fc", floe_placeholder(g, "y", FLOE_F32, floe_shape_make(2, b)), 5,
                   FLOE_ACT_NONE, 1);
  assert_graph_error(g, "fc/kernel", NULL);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("layers");
  TCase *tc = tcase_create("layers");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  tcase_add_test(tc, dense_forward_and_shared_weights);
  tcase_add_test(tc, conv_pool_flatten);
  tcase_add_test(tc, dropout_masks);
  tcase_add_test(tc, batch_norm_training_and_inference);
  tcase_add_test(tc, embedding_gathers_rows);
  tcase_add_test(tc, cross_entropy_loss);
  tcase_add_test(tc, layers_train_end_to_end);
  tcase_add_test(tc, layer_errors_name_the_layer);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
