/* SPDX-License-Identifier: Apache-2.0 */
/* test_sampled_softmax.c - floe_sampled_softmax_loss against the full softmax it stands in
 * for, computed here in plain C.
 *
 * With every class sampled (num_sampled = num_classes, unique) the loss is the full
 * cross-entropy up to the log of expected counts near 1; with fewer, its gradient averaged
 * over many draws points where the full softmax's does. Then the errors of bad arguments. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

enum { N = 6, H = 5, V = 40 };

typedef struct Problem {
  double w[V * H], b[V], x[N * H];
  int64_t y[N];
} Problem;

/* Fixed random weights with a frequency-like bias (class 0 most likely), so the sampled
 * classes matter. */
static void problem_init(Problem *p) {
  uint64_t s = 12345;
  for (int i = 0; i < V * H; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p->w[i] = ((double)(s >> 11) * 0x1p-53 - 0.5);
  }
  for (int c = 0; c < V; c++) p->b[c] = -0.08 * c;
  for (int i = 0; i < N * H; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p->x[i] = 2 * ((double)(s >> 11) * 0x1p-53 - 0.5);
  }
  const int64_t y[N] = {0, 1, 3, 7, 15, 33};
  memcpy(p->y, y, sizeof y);
}

/* Full softmax: mean cross-entropy and its gradients (dw [V,H], db [V], dx [N,H]). */
static double full_softmax(const Problem *p, double *dw, double *db, double *dx) {
  memset(dw, 0, sizeof(double) * V * H);
  memset(db, 0, sizeof(double) * V);
  memset(dx, 0, sizeof(double) * N * H);
  double loss = 0;
  for (int n = 0; n < N; n++) {
    double z[V], mx = -INFINITY, sum = 0;
    for (int c = 0; c < V; c++) {
      z[c] = p->b[c];
      for (int h = 0; h < H; h++) z[c] += p->x[n * H + h] * p->w[c * H + h];
      mx = z[c] > mx ? z[c] : mx;
    }
    for (int c = 0; c < V; c++) sum += exp(z[c] - mx);
    loss += (mx + log(sum) - z[p->y[n]]) / N;
    for (int c = 0; c < V; c++) {
      double g = (exp(z[c] - mx) / sum - (c == p->y[n])) / N;
      db[c] += g;
      for (int h = 0; h < H; h++) {
        dw[c * H + h] += g * p->x[n * H + h];
        dx[n * H + h] += g * p->w[c * H + h];
      }
    }
  }
  return loss;
}

typedef struct Built {
  FloeGraph *g;
  FloeSession *s;
  FloeFeed feeds[4];
  FloeTensor *t[4];
} Built;

/* loss = floe_sampled_softmax_loss on placeholders fed from p, and its gradients. */
static Built build(const Problem *p, int64_t k, int unique) {
  Built m = {.g = floe_graph_new()};
  FloeOutput w = floe_placeholder(m.g, "w", FLOE_F64, floe_shape_make(2, (int64_t[]){V, H}));
  FloeOutput b = floe_placeholder(m.g, "b", FLOE_F64, floe_shape_make(1, (int64_t[]){V}));
  FloeOutput x = floe_placeholder(m.g, "x", FLOE_F64, floe_shape_make(2, (int64_t[]){N, H}));
  FloeOutput y = floe_placeholder(m.g, "y", FLOE_I64, floe_shape_make(1, (int64_t[]){N}));
  FloeOutput loss = floe_sampled_softmax_loss(m.g, "ss", w, b, x, y, k, V, unique, 99);
  floe_unary(m.g, "Identity", "loss", loss);
  FloeOutput xs[3] = {w, b, x}, dxs[3];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(m.g, &loss, 1, xs, 3, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  floe_unary(m.g, "Identity", "dw", dxs[0]);
  floe_unary(m.g, "Identity", "db", dxs[1]);
  floe_unary(m.g, "Identity", "dx", dxs[2]);
  m.s = harness_session(m.g, NULL);
  m.t[0] = harness_f64(2, (int64_t[]){V, H}, p->w);
  m.t[1] = harness_f64(1, (int64_t[]){V}, p->b);
  m.t[2] = harness_f64(2, (int64_t[]){N, H}, p->x);
  m.t[3] = harness_i64(1, (int64_t[]){N}, p->y);
  const char *names[4] = {"w", "b", "x", "y"};
  for (int i = 0; i < 4; i++) m.feeds[i] = (FloeFeed){names[i], m.t[i]};
  return m;
}

static void built_free(Built *m) {
  for (int i = 0; i < 4; i++) floe_tensor_release(m->t[i]);
  floe_session_free(m->s);
  floe_graph_free(m->g);
}

/* One run: the loss, and the gradients added to acc (dw, db, dx back to back). */
static double run_once(Built *m, double *acc) {
  const char *fetch[4] = {"loss", "dw", "db", "dx"};
  FloeTensor *out[4];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(m->s, m->feeds, 4, fetch, 4, NULL, 0, out, st) == FLOE_OK,
                "%s", floe_status_message(st));
  floe_status_free(st);
  double loss = *(const double *)floe_tensor_data(out[0]);
  int64_t off = 0;
  for (int i = 1; i < 4; i++) {
    const double *g = floe_tensor_data(out[i]);
    for (int64_t j = 0; j < floe_tensor_num_elements(out[i]); j++) acc[off + j] += g[j];
    off += floe_tensor_num_elements(out[i]);
  }
  for (int i = 0; i < 4; i++) floe_tensor_release(out[i]);
  return loss;
}

static double cosine(const double *a, const double *b, int n) {
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / sqrt(aa * bb);
}

enum { G = V * H + V + N * H }; /* gradient elements: dw, db, dx */

/* Every class sampled: the sampled loss is the full one up to log(expected count) ~ 0. */
START_TEST(test_all_classes_is_full_softmax) {
  Problem p;
  problem_init(&p);
  double full[G];
  double want = full_softmax(&p, full, full + V * H, full + V * H + V);
  Built m = build(&p, V, 1);
  double acc[G] = {0};
  for (int r = 0; r < 5; r++) {
    double got = run_once(&m, acc);
    ck_assert_msg(fabs(got - want) < 0.03, "run %d: loss %.5f, full softmax %.5f", r, got, want);
  }
  for (int i = 0; i < G; i++) acc[i] /= 5;
  double c = cosine(acc, full, G);
  ck_assert_msg(c > 0.999, "gradient cosine %.5f with the full softmax", c);
  built_free(&m);
}
END_TEST

/* A quarter of the classes per draw: the mean gradient over 400 draws agrees with the
 * full softmax's in direction, each of dw, db, dx separately (cosine > 0.98: about 0.99
 * here, 0.77 for db without the log-expected-count correction). */
START_TEST(test_mean_gradient_matches_full_softmax) {
  Problem p;
  problem_init(&p);
  double full[G];
  full_softmax(&p, full, full + V * H, full + V * H + V);
  for (int unique = 0; unique < 2; unique++) {
    Built m = build(&p, V / 4, unique);
    double acc[G] = {0};
    const int runs = 400;
    for (int r = 0; r < runs; r++) run_once(&m, acc);
    const int off[4] = {0, V * H, V * H + V, G};
    const char *what[3] = {"dw", "db", "dx"};
    for (int i = 0; i < 3; i++) {
      double c = cosine(acc + off[i], full + off[i], off[i + 1] - off[i]);
      ck_assert_msg(c > 0.98, "unique=%d %s: cosine %.4f with the full softmax", unique,
                    what[i], c);
    }
    built_free(&m);
  }
}
END_TEST

static void expect_error(FloeGraph *g, const char *want) {
  const char *err = floe_graph_error(g, NULL);
  ck_assert_msg(floe_graph_status(g) != FLOE_OK && err && strstr(err, want),
                "error '%s', want '%s'", err ? err : "(none)", want);
}

START_TEST(test_bad_arguments) {
  FloeShape wd = floe_shape_make(2, (int64_t[]){V, H}), bd = floe_shape_make(1, (int64_t[]){V});
  FloeShape xd = floe_shape_make(2, (int64_t[]){N, H}), yd = floe_shape_make(1, (int64_t[]){N});
  for (int c = 0; c < 4; c++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput w = floe_placeholder(g, "w", FLOE_F32, wd), b = floe_placeholder(g, "b", FLOE_F32, bd);
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, xd);
    FloeOutput y = floe_placeholder(g, "y", c == 0 ? FLOE_F32 : FLOE_I32, yd);
    int64_t k = c == 1 ? V + 1 : c == 2 ? 0 : 4;
    if (c == 3) x = floe_out(NULL, 0);
    FloeOutput loss = floe_sampled_softmax_loss(g, "ss", w, b, x, y, k, V, 1, 1);
    ck_assert_ptr_null(loss.node);
    const char *want[4] = {"loss 'ss': labels 'y' are f32",
                           "node 'ss/sampler' (LogUniformCandidateSampler): num_sampled 41 is "
                           "more than range_max 40",
                           "num_sampled 0 and num_classes 40 must be >= 1",
                           "layer 'ss' (sampled_softmax_loss): its input is invalid"};
    expect_error(g, want[c]);
    floe_graph_free(g);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("sampled_softmax");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_all_classes_is_full_softmax);
  tcase_add_test(tc, test_mean_gradient_matches_full_softmax);
  tcase_add_test(tc, test_bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
