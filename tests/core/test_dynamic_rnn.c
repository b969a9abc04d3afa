/* SPDX-License-Identifier: Apache-2.0 */
/* test_dynamic_rnn.c - floe_dynamic_lstm: outputs and final states against an LSTM written
 * out in plain C here, rows stopping at their own lengths (and only those rows computed:
 * the profile's LSTMCellRecurrent output bytes), and gradients against central finite differences. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

enum { T = 5, B = 3, I = 2, H = 3 };
static const int32_t lens[B] = {5, 3, 1};

static FloeRuntime *rt;

static void setup(void) { rt = harness_runtime(2); }

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* Deterministic inputs in [-1, 1). */
static double val(int k) { return sin(1.7 * k + 0.3); }

typedef struct Data {
  double x[T * B * I], w[(I + H) * 4 * H], b[4 * H], h0[B * H], c0[B * H];
} Data;

static void data_init(Data *d) {
  for (int k = 0; k < T * B * I; k++) d->x[k] = val(k);
  for (int k = 0; k < (I + H) * 4 * H; k++) d->w[k] = 0.4 * val(100 + k);
  for (int k = 0; k < 4 * H; k++) d->b[k] = 0.2 * val(300 + k);
  for (int k = 0; k < B * H; k++) {
    d->h0[k] = 0.3 * val(400 + k);
    d->c0[k] = 0.3 * val(500 + k);
  }
}

static double sigm(double v) { return 1 / (1 + exp(-v)); }

/* The LSTM in plain C: out [T, B, H], final h and c [B, H]. */
static void reference(const Data *d, double *out, double *hf, double *cf) {
  double h[B * H], c[B * H];
  memcpy(h, d->h0, sizeof h);
  memcpy(c, d->c0, sizeof c);
  memset(out, 0, sizeof(double) * T * B * H);
  for (int t = 0; t < T; t++)
    for (int r = 0; r < B; r++) {
      if (t >= lens[r]) continue;
      double gates[4 * H];
      for (int j = 0; j < 4 * H; j++) {
        double acc = d->b[j];
        for (int k = 0; k < I; k++) acc += d->x[(t * B + r) * I + k] * d->w[k * 4 * H + j];
        for (int k = 0; k < H; k++) acc += h[r * H + k] * d->w[(I + k) * 4 * H + j];
        gates[j] = acc;
      }
      for (int j = 0; j < H; j++) {
        double ig = sigm(gates[j]), fg = sigm(gates[H + j]), gg = tanh(gates[2 * H + j]),
               og = sigm(gates[3 * H + j]);
        c[r * H + j] = fg * c[r * H + j] + ig * gg;
        h[r * H + j] = og * tanh(c[r * H + j]);
        out[(t * B + r) * H + j] = h[r * H + j];
      }
    }
  memcpy(hf, h, sizeof h);
  memcpy(cf, c, sizeof c);
}

typedef struct Model {
  FloeGraph *g;
  FloeOutput x, w, b, h0, c0, out, loss;
  FloeLSTMState final;
} Model;

/* feature_dim: I, or -1 (unknown until run: the loop then runs LSTMCell on x itself);
 * project: floe_dynamic_lstm's project_inputs. */
static Model build_x(FloeLSTMFused fused, int64_t feature_dim, int project) {
  Model m = {.g = floe_graph_new()};
  const int64_t dx[3] = {T, B, feature_dim}, dw[2] = {I + H, 4 * H}, db[1] = {4 * H},
                ds[2] = {B, H};
  m.x = floe_placeholder(m.g, "x", FLOE_F64, floe_shape_make(3, dx));
  m.w = floe_placeholder(m.g, "w", FLOE_F64, floe_shape_make(2, dw));
  m.b = floe_placeholder(m.g, "b", FLOE_F64, floe_shape_make(1, db));
  m.h0 = floe_placeholder(m.g, "h0", FLOE_F64, floe_shape_make(2, ds));
  m.c0 = floe_placeholder(m.g, "c0", FLOE_F64, floe_shape_make(2, ds));
  const int64_t dl[1] = {B};
  FloeTensor *lt = harness_i32(1, dl, lens);
  FloeOutput l = floe_const(m.g, "lengths", lt);
  floe_tensor_release(lt);
  FloeDynamicRNNOptions o;
  floe_dynamic_rnn_options_init(&o);
  o.cell.fused = fused;
  o.project_inputs = project;
  m.out = floe_dynamic_lstm(m.g, "rnn", m.x, l, (FloeLSTMState){m.h0, m.c0}, m.w, m.b, &o,
                            &m.final);
  ck_assert_msg(floe_graph_status(m.g) == FLOE_OK, "%s", floe_graph_error(m.g, NULL));
  floe_unary(m.g, "Identity", "out", m.out);
  floe_unary(m.g, "Identity", "hf", m.final.h);
  floe_unary(m.g, "Identity", "cf", m.final.c);
  /* loss = sum(out * out) + sum(hf * cf) */
  FloeTensor *ax3 = harness_i32(1, (const int64_t[]){3}, (const int32_t[]){0, 1, 2});
  FloeTensor *ax2 = harness_i32(1, (const int64_t[]){2}, (const int32_t[]){0, 1});
  FloeNodeBuilder *b = floe_node_begin(m.g, "Sum", NULL);
  floe_node_add_input(b, floe_binary(m.g, "Mul", NULL, m.out, m.out));
  floe_node_add_input(b, floe_const(m.g, NULL, ax3));
  FloeOutput s1 = floe_out(floe_node_finish(b), 0);
  b = floe_node_begin(m.g, "Sum", NULL);
  floe_node_add_input(b, floe_binary(m.g, "Mul", NULL, m.final.h, m.final.c));
  floe_node_add_input(b, floe_const(m.g, NULL, ax2));
  FloeOutput s2 = floe_out(floe_node_finish(b), 0);
  floe_tensor_release(ax3);
  floe_tensor_release(ax2);
  m.loss = floe_binary(m.g, "Add", "loss", s1, s2);
  return m;
}

static FloeSession *session(FloeGraph *g) { return harness_session(g, rt); }

static void feeds_of(const Data *d, FloeTensor **t, FloeFeed *f) {
  const int64_t dx[3] = {T, B, I}, dw[2] = {I + H, 4 * H}, db[1] = {4 * H}, ds[2] = {B, H};
  t[0] = harness_f64(3, dx, d->x);
  t[1] = harness_f64(2, dw, d->w);
  t[2] = harness_f64(1, db, d->b);
  t[3] = harness_f64(2, ds, d->h0);
  t[4] = harness_f64(2, ds, d->c0);
  const char *names[5] = {"x", "w", "b", "h0", "c0"};
  for (int i = 0; i < 5; i++) f[i] = (FloeFeed){names[i], t[i]};
}

static void run(FloeSession *s, const Data *d, const char *const *fetch, int n, FloeTensor **out) {
  FloeTensor *t[5];
  FloeFeed f[5];
  feeds_of(d, t, f);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, f, 5, fetch, n, NULL, 0, out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  for (int i = 0; i < 5; i++) floe_tensor_release(t[i]);
}

START_TEST(matches_a_plain_lstm_and_stops_at_each_length) {
  Data d;
  data_init(&d);
  double want[T * B * H], hf[B * H], cf[B * H];
  reference(&d, want, hf, cf);
  /* The fused cell on inputs projected before the loop (project_inputs 1), the fused cell
   * on x in the loop (the default with lengths, and what an unknown input size gives), the
   * primitive-op cell. */
  const char *cell_op[4] = {"LSTMCellRecurrent", "LSTMCell", "LSTMCell", NULL};
  for (int v = 0; v < 4; v++) {
    Model m = v == 0   ? build_x(FLOE_LSTM_FUSED_ALWAYS, I, 1)
              : v == 1 ? build_x(FLOE_LSTM_FUSED_ALWAYS, I, -1)
              : v == 2 ? build_x(FLOE_LSTM_FUSED_ALWAYS, -1, 1)
                       : build_x(FLOE_LSTM_FUSED_NEVER, I, -1);
    FloeSession *s = session(m.g);
    floe_session_set_profiling(s, 1);
    const char *fetch[3] = {"out", "hf", "cf"};
    FloeTensor *got[3];
    run(s, &d, fetch, 3, got);
    ck_assert_int_eq(floe_tensor_dim(got[0], 0), T);
    for (int k = 0; k < T * B * H; k++)
      ck_assert_msg(fabs(harness_get(got[0], k) - want[k]) < 1e-12, "out[%d]: %g vs %g", k,
                    harness_get(got[0], k), want[k]);
    for (int k = 0; k < B * H; k++) {
      ck_assert(fabs(harness_get(got[1], k) - hf[k]) < 1e-12);
      ck_assert(fabs(harness_get(got[2], k) - cf[k]) < 1e-12);
    }
    if (cell_op[v]) {
      /* Only the rows inside their sequences ran: 5 + 3 + 1 rows of h, c [H] and the
       * activations [4H], in f64. (The fused loop runs LSTMCellRecurrent on the inputs'
       * projection, made for all steps before the loop.) */
      FloeOpProfile *rows;
      int nr;
      ck_assert(floe_session_profile(s, &rows, &nr, NULL) == FLOE_OK);
      int64_t bytes = -1, calls = 0;
      for (int r = 0; r < nr; r++)
        if (strcmp(rows[r].op, cell_op[v]) == 0) {
          bytes = rows[r].output_bytes;
          calls = rows[r].calls;
        }
      free(rows);
      ck_assert_int_eq(calls, 5); /* the longest sequence's steps, not more */
      ck_assert_int_eq(bytes, (int64_t)(5 + 3 + 1) * 6 * H * 8);
    }
    for (int i = 0; i < 3; i++) floe_tensor_release(got[i]);
    floe_session_free(s);
    floe_graph_free(m.g);
  }
}
END_TEST

static double loss_at(FloeSession *s, const Data *d) {
  const char *fetch[1] = {"loss"};
  FloeTensor *out;
  run(s, d, fetch, 1, &out);
  double v = harness_get(out, 0);
  floe_tensor_release(out);
  return v;
}

/* _i: project_inputs 1, 0. */
START_TEST(gradients_match_finite_differences) {
  Data d;
  data_init(&d);
  int project = _i == 0;
  Model m = build_x(FLOE_LSTM_FUSED_ALWAYS, I, project);
  FloeOutput xs[5] = {m.x, m.w, m.b, m.h0, m.c0}, dxs[5];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(m.g, &m.loss, 1, xs, 5, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const char *names[5] = {"dx", "dw", "db", "dh0", "dc0"};
  for (int i = 0; i < 5; i++) {
    ck_assert_ptr_nonnull(dxs[i].node);
    floe_unary(m.g, "Identity", names[i], dxs[i]);
  }
  FloeSession *s = session(m.g);
  FloeTensor *got[5];
  floe_session_set_profiling(s, 1);
  run(s, &d, names, 5, got);
  /* No weight-gradient product per step: projected, the inputs' projection before the loop
   * and after the backward loop one product each for dx, dw_x and dw_h; not projected, one
   * for dw after the loop (T = 5 products inside it otherwise). */
  FloeOpProfile *rows;
  int nr;
  ck_assert(floe_session_profile(s, &rows, &nr, NULL) == FLOE_OK);
  int64_t matmuls = 0, transposes = 0;
  for (int r = 0; r < nr; r++) {
    if (strcmp(rows[r].op, "MatMul") == 0) matmuls = rows[r].calls;
    if (strcmp(rows[r].op, "Transpose") == 0) transposes = rows[r].calls;
  }
  free(rows);
  ck_assert_int_eq(matmuls, project ? 4 : 1);
  /* w_h^T for the backward steps is made once, outside the backward loop. */
  ck_assert_int_eq(transposes, project ? 1 : 0);
  floe_session_set_profiling(s, 0);
  double *params[5] = {d.x, d.w, d.b, d.h0, d.c0};
  const int sizes[5] = {T * B * I, (I + H) * 4 * H, 4 * H, B * H, B * H};
  const double eps = 1e-6;
  for (int p = 0; p < 5; p++)
    for (int k = 0; k < sizes[p]; k++) {
      double keep = params[p][k];
      params[p][k] = keep + eps;
      double up = loss_at(s, &d);
      params[p][k] = keep - eps;
      double down = loss_at(s, &d);
      params[p][k] = keep;
      double fd = (up - down) / (2 * eps), an = harness_get(got[p], k);
      ck_assert_msg(fabs(fd - an) <= 1e-6 * (1 + fabs(fd)), "%s[%d]: analytic %.10g, fd %.10g",
                    names[p], k, an, fd);
    }
  for (int i = 0; i < 5; i++) floe_tensor_release(got[i]);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(m.g);
}
END_TEST

/* A weight of the wrong height is refused when the loop is built, naming it. */
START_TEST(weight_shape_errors_name_the_loop) {
  FloeGraph *g = floe_graph_new();
  const int64_t dx[3] = {T, B, I}, dw[2] = {I + H + 1, 4 * H}, db[1] = {4 * H}, ds[2] = {B, H};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(3, dx));
  FloeOutput w = floe_placeholder(g, "w", FLOE_F64, floe_shape_make(2, dw));
  FloeOutput b = floe_placeholder(g, "b", FLOE_F64, floe_shape_make(1, db));
  FloeOutput h0 = floe_placeholder(g, "h0", FLOE_F64, floe_shape_make(2, ds));
  FloeOutput out = floe_dynamic_lstm(g, "rnn", x, (FloeOutput){NULL, 0},
                                     (FloeLSTMState){h0, h0}, w, b, NULL, NULL);
  ck_assert_ptr_null(out.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  const char *msg = floe_graph_error(g, NULL);
  ck_assert_msg(strstr(msg, "'rnn'") && strstr(msg, "w has 6 rows") &&
                    strstr(msg, "[input + hidden, 4 * hidden]"),
                "%s", msg);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dynamic_rnn");
  TCase *tc = tcase_create("lstm");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, matches_a_plain_lstm_and_stops_at_each_length);
  tcase_add_loop_test(tc, gradients_match_finite_differences, 0, 2);
  tcase_add_test(tc, weight_shape_errors_name_the_loop);
  tcase_add_checked_fixture(tc, setup, teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
