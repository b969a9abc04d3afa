/* SPDX-License-Identifier: Apache-2.0 */
/* test_lstm.c - the LSTM cell of floe_rnn.h, fused (LSTMCell / LSTMCellGrad on the CPU
 * plugin) and from primitive ops:
 * - forward: both forms against a double-precision loop written here (and each other), f32
 *   and f64, over batch / input / hidden sizes including 1, 0 inputs, odd sizes, hidden
 *   sizes beyond one block of the kernel's elementwise pass and products large enough to be
 *   split over the pool (the suite runs with 2 pool threads), with and without forget_bias;
 * - gradients through floe_gradients: fused against primitive, and both against central
 *   finite differences in f64, for x, h_prev, c_prev, w and b, with losses on h and c, on h
 *   only and on c only; f32 fused against primitive at a large size;
 * - what reaches act only, the second derivative, FLOE_LSTM_FUSED_AUTO with and without a
 *   kernel, floe_lstm_weights, one training step through the fused cell;
 * - errors: static shapes (the op's shape functions and the builder), dtypes, shapes only
 *   known when the kernels run, bad options and arguments. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------------------------ */
/* Helpers */

/* "node:index" of o into buf. */
static const char *out_name(FloeOutput o, char *buf, size_t len) {
  ck_assert_ptr_nonnull(o.node);
  snprintf(buf, len, "%s:%d", floe_node_name(o.node), o.index);
  return buf;
}

static void run(FloeSession *s, const FloeFeed *feeds, int nf, const FloeOutput *outs, int n,
                FloeTensor **vals) {
  char names[16][128];
  const char *fetches[16];
  ck_assert_int_le(n, 16);
  for (int i = 0; i < n; i++) fetches[i] = out_name(outs[i], names[i], sizeof names[i]);
  harness_run(s, feeds, nf, fetches, n, NULL, 0, vals, NULL);
}

static FloeLSTMOptions opts_of(FloeLSTMFused fused, double forget_bias) {
  FloeLSTMOptions o;
  floe_lstm_options_init(&o);
  o.fused = fused;
  o.forget_bias = forget_bias;
  return o;
}

/* The cell's operands: placeholders x, h, c, w, b and values fed to them. */
typedef struct Operands {
  int64_t batch, in, hid;
  FloeDType dt;
  FloeOutput ph[5];
  FloeTensor *val[5];
} Operands;

static const char *const ph_names[5] = {"x", "h", "c", "w", "b"};

/* Placeholders of static (or, dynamic, unknown) shapes and random values: x, h, c in
 * [-1, 1), w scaled by 1/sqrt(I+H) and b small, so the gates cover their nonlinear range
 * without saturating. */
static void operands_make(FloeGraph *g, Operands *op, FloeDType dt, int64_t bt, int64_t in,
                          int64_t hid, uint64_t seed, bool dynamic) {
  op->batch = bt;
  op->in = in;
  op->hid = hid;
  op->dt = dt;
  int64_t dims[5][2] = {{bt, in}, {bt, hid}, {bt, hid}, {in + hid, 4 * hid}, {4 * hid, 0}};
  double scale = 2.0 / sqrt((double)(in + hid));
  double lo[5] = {-1, -1, -1, -scale, -0.5}, hi[5] = {1, 1, 1, scale, 0.5};
  for (int k = 0; k < 5; k++) {
    int rank = k == 4 ? 1 : 2;
    FloeShape shape = dynamic ? floe_shape_unknown() : floe_shape_make(rank, dims[k]);
    op->ph[k] = floe_placeholder(g, ph_names[k], dt, shape);
    op->val[k] = harness_random(dt, rank, dims[k], seed * 10 + (uint64_t)k, lo[k], hi[k]);
  }
}

static void operands_free(Operands *op) {
  for (int k = 0; k < 5; k++) floe_tensor_release(op->val[k]);
}

static void operands_feeds(const Operands *op, FloeFeed *feeds) {
  for (int k = 0; k < 5; k++) feeds[k] = (FloeFeed){ph_names[k], op->val[k]};
}

static FloeLSTMState cell(FloeGraph *g, const char *name, const Operands *op,
                          FloeLSTMFused fused, double forget_bias) {
  FloeLSTMOptions o = opts_of(fused, forget_bias);
  FloeLSTMState prev = {op->ph[1], op->ph[2]};
  return floe_lstm_cell(g, name, op->ph[0], prev, op->ph[3], op->ph[4], &o);
}

/* The fused cell's LSTMCell node (its outputs h, c, act). */
static FloeNode *fused_node(FloeGraph *g, const char *cell_name) {
  char name[128];
  snprintf(name, sizeof name, "%s/LSTMCell", cell_name);
  FloeNode *n = floe_graph_find(g, name);
  ck_assert_msg(n != NULL, "no node %s", name);
  ck_assert_str_eq(floe_node_op(n), "LSTMCell");
  return n;
}

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* The cell in double precision, the obvious way: h, c [B,H] and act [B,4H]. */
static void reference_cell(const Operands *op, double forget_bias, double *h, double *c,
                           double *act) {
  int64_t B = op->batch, I = op->in, H = op->hid;
  double *x = harness_values(op->val[0]), *hp = harness_values(op->val[1]);
  double *cp = harness_values(op->val[2]), *w = harness_values(op->val[3]);
  double *b = harness_values(op->val[4]);
  for (int64_t r = 0; r < B; r++) {
    for (int64_t col = 0; col < 4 * H; col++) {
      double s = b[col];
      for (int64_t k = 0; k < I; k++) s += x[r * I + k] * w[k * 4 * H + col];
      for (int64_t k = 0; k < H; k++) s += hp[r * H + k] * w[(I + k) * 4 * H + col];
      int gate = (int)(col / H);
      act[r * 4 * H + col] = gate == 2   ? tanh(s)
                             : gate == 1 ? sigmoid(s + forget_bias)
                                         : sigmoid(s);
    }
    for (int64_t j = 0; j < H; j++) {
      const double *a = act + r * 4 * H;
      double cn = a[H + j] * cp[r * H + j] + a[j] * a[2 * H + j];
      c[r * H + j] = cn;
      h[r * H + j] = a[3 * H + j] * tanh(cn);
    }
  }
  free(x);
  free(hp);
  free(cp);
  free(w);
  free(b);
}

static void assert_values(const FloeTensor *got, const double *want, int64_t n, double tol,
                          const char *what) {
  ck_assert_int_eq(floe_tensor_num_elements(got), n);
  for (int64_t i = 0; i < n; i++) {
    double gv = harness_get(got, i);
    ck_assert_msg(fabs(gv - want[i]) <= tol * (1.0 + fabs(want[i])),
                  "%s: element %lld is %.12g, want %.12g (tol %g)", what, (long long)i, gv,
                  want[i], tol);
  }
}

/* ------------------------------------------------------------------------------------ */
/* Forward */

typedef struct Size {
  int64_t batch, in, hid;
  double forget_bias;
} Size;

static const Size forward_sizes[] = {
    {1, 1, 1, 0.0},     {1, 3, 5, 0.0},    {2, 3, 4, 1.0},   {5, 7, 3, -0.5},
    {3, 0, 4, 0.0},     {4, 9, 1, 2.0},    {64, 33, 17, 1.0}, {3, 300, 260, 0.5},
    {64, 256, 256, 0.0}, /* x @ w is 2^24 multiply-adds: split over the pool */
};

static void check_forward(FloeDType dt, const Size *sz, bool dynamic) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, dt, sz->batch, sz->in, sz->hid, 1, dynamic);
  FloeLSTMState fs = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, sz->forget_bias);
  FloeLSTMState ps = cell(g, "prim", &op, FLOE_LSTM_FUSED_NEVER, sz->forget_bias);
  FloeOutput outs[5] = {fs.h, fs.c, floe_out(fused_node(g, "fused"), 2), ps.h, ps.c};
  FloeSession *s = harness_session(g, NULL);
  FloeFeed feeds[5];
  operands_feeds(&op, feeds);
  FloeTensor *v[5];
  run(s, feeds, 5, outs, 5, v);

  int64_t bh = sz->batch * sz->hid;
  double *h = malloc((size_t)(bh + 1) * sizeof *h), *c = malloc((size_t)(bh + 1) * sizeof *c);
  double *act = malloc((size_t)(4 * bh + 1) * sizeof *act);
  reference_cell(&op, sz->forget_bias, h, c, act);
  double tol = dt == FLOE_F64 ? 1e-12 : 1e-5;
  char what[160];
  const char *labels[5] = {"fused h", "fused c", "fused act", "primitive h", "primitive c"};
  const double *want[5] = {h, c, act, h, c};
  for (int k = 0; k < 5; k++) {
    snprintf(what, sizeof what, "%s, %s B=%lld I=%lld H=%lld fb=%g%s", labels[k],
             floe_dtype_name(dt), (long long)sz->batch, (long long)sz->in, (long long)sz->hid,
             sz->forget_bias, dynamic ? " (unknown static shapes)" : "");
    ck_assert_int_eq(floe_tensor_dtype(v[k]), dt);
    assert_values(v[k], want[k], k == 2 ? 4 * bh : bh, tol, what);
  }
  /* The two forms agree with each other at least as closely. */
  harness_assert_close(v[0], v[3], tol, tol, "fused h vs primitive h");
  harness_assert_close(v[1], v[4], tol, tol, "fused c vs primitive c");
  for (int k = 0; k < 5; k++) floe_tensor_release(v[k]);
  free(h);
  free(c);
  free(act);
  operands_free(&op);
  floe_session_free(s);
  floe_graph_free(g);
}

START_TEST(forward_f32) { check_forward(FLOE_F32, &forward_sizes[_i], false); }
END_TEST

START_TEST(forward_f64) { check_forward(FLOE_F64, &forward_sizes[_i], false); }
END_TEST

/* Shapes known only when the kernels run. */
START_TEST(forward_unknown_shapes) {
  check_forward(FLOE_F32, &forward_sizes[2], true);
  check_forward(FLOE_F64, &forward_sizes[3], true);
}
END_TEST

/* Both forms of an empty batch give empty outputs. */
START_TEST(forward_empty_batch) {
  Size sz = {0, 3, 4, 0.0};
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F32, sz.batch, sz.in, sz.hid, 2, false);
  FloeLSTMState fs = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.0);
  FloeLSTMState ps = cell(g, "prim", &op, FLOE_LSTM_FUSED_NEVER, 0.0);
  FloeOutput outs[4] = {fs.h, fs.c, ps.h, ps.c};
  FloeSession *s = harness_session(g, NULL);
  FloeFeed feeds[5];
  operands_feeds(&op, feeds);
  FloeTensor *v[4];
  run(s, feeds, 5, outs, 4, v);
  for (int k = 0; k < 4; k++) {
    FloeShape sh = floe_tensor_shape(v[k]);
    ck_assert_int_eq(sh.rank, 2);
    ck_assert_int_eq(sh.dims[0], 0);
    ck_assert_int_eq(sh.dims[1], 4);
    floe_tensor_release(v[k]);
  }
  operands_free(&op);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Gradients */

enum { LOSS_HC, LOSS_H, LOSS_C };

/* Loss weights Rh, Rc (constants) and the gradients of sum(h Rh) + sum(c Rc) (or one of the
 * two terms) at x, h, c, w, b for one form of the cell. */
typedef struct GradGraph {
  FloeLSTMState st;
  FloeOutput d[5];
} GradGraph;

static void build_grads(FloeGraph *g, const Operands *op, const char *name, FloeLSTMFused fused,
                        double fb, int loss, FloeOutput rh, FloeOutput rc, GradGraph *gg) {
  gg->st = cell(g, name, op, fused, fb);
  FloeOutput ys[2], gys[2];
  int n = 0;
  if (loss != LOSS_C) ys[n] = gg->st.h, gys[n++] = rh;
  if (loss != LOSS_H) ys[n] = gg->st.c, gys[n++] = rc;
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(g, ys, n, op->ph, 5, gys, gg->d, st) == FLOE_OK, "gradients: %s",
                floe_status_message(st));
  floe_status_free(st);
  for (int k = 0; k < 5; k++) ck_assert_msg(gg->d[k].node, "%s: no gradient at %s", name, ph_names[k]);
}

static double loss_of(const FloeTensor *h, const FloeTensor *c, const FloeTensor *rh,
                      const FloeTensor *rc, int loss) {
  double l = 0;
  for (int64_t i = 0; i < floe_tensor_num_elements(h); i++) {
    if (loss != LOSS_C) l += harness_get(h, i) * harness_get(rh, i);
    if (loss != LOSS_H) l += harness_get(c, i) * harness_get(rc, i);
  }
  return l;
}

/* Fused gradients == primitive gradients (to tol) and, in f64, == central differences of
 * the fused forward pass. */
static void check_grads(FloeDType dt, const Size *sz, int loss, double tol, bool finite_diff) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, dt, sz->batch, sz->in, sz->hid, 3, false);
  int64_t bh[2] = {sz->batch, sz->hid};
  FloeTensor *rhv = harness_random(dt, 2, bh, 77, -1, 1), *rcv = harness_random(dt, 2, bh, 78, -1, 1);
  FloeOutput rh = floe_const(g, "Rh", rhv), rc = floe_const(g, "Rc", rcv);
  GradGraph fg, pg;
  build_grads(g, &op, "fused", FLOE_LSTM_FUSED_ALWAYS, sz->forget_bias, loss, rh, rc, &fg);
  build_grads(g, &op, "prim", FLOE_LSTM_FUSED_NEVER, sz->forget_bias, loss, rh, rc, &pg);
  FloeSession *s = harness_session(g, NULL);
  FloeFeed feeds[5];
  operands_feeds(&op, feeds);
  FloeOutput outs[12] = {fg.d[0], fg.d[1], fg.d[2], fg.d[3], fg.d[4], pg.d[0],
                         pg.d[1], pg.d[2], pg.d[3], pg.d[4], fg.st.h, fg.st.c};
  FloeTensor *v[12];
  run(s, feeds, 5, outs, 12, v);
  char what[160];
  for (int k = 0; k < 5; k++) {
    snprintf(what, sizeof what, "d%s fused vs primitive, %s B=%lld I=%lld H=%lld fb=%g loss %s",
             ph_names[k], floe_dtype_name(dt), (long long)sz->batch, (long long)sz->in,
             (long long)sz->hid, sz->forget_bias,
             loss == LOSS_HC ? "h+c" : loss == LOSS_H ? "h" : "c");
    harness_assert_close(v[k], v[5 + k], tol, tol, what);
  }
  if (finite_diff) {
    const double eps = 1e-6;
    FloeOutput hc[2] = {fg.st.h, fg.st.c};
    for (int k = 0; k < 5; k++) {
      double *p = floe_tensor_data(op.val[k]);
      for (int64_t e = 0; e < floe_tensor_num_elements(op.val[k]); e++) {
        double keep = p[e], l[2];
        for (int side = 0; side < 2; side++) {
          FloeTensor *o[2];
          p[e] = keep + (side ? -eps : eps);
          run(s, feeds, 5, hc, 2, o);
          l[side] = loss_of(o[0], o[1], rhv, rcv, loss);
          floe_tensor_release(o[0]);
          floe_tensor_release(o[1]);
        }
        p[e] = keep;
        double fd = (l[0] - l[1]) / (2 * eps), an = harness_get(v[k], e);
        ck_assert_msg(fabs(an - fd) <= 1e-8 * (1.0 + fabs(fd)),
                      "d%s[%lld]: fused %.12g, finite differences %.12g (loss %d, fb %g)",
                      ph_names[k], (long long)e, an, fd, loss, sz->forget_bias);
        double pn = harness_get(v[5 + k], e);
        ck_assert_msg(fabs(pn - fd) <= 1e-8 * (1.0 + fabs(fd)),
                      "d%s[%lld]: primitive %.12g, finite differences %.12g", ph_names[k],
                      (long long)e, pn, fd);
      }
    }
  }
  for (int k = 0; k < 12; k++) floe_tensor_release(v[k]);
  floe_tensor_release(rhv);
  floe_tensor_release(rcv);
  operands_free(&op);
  floe_session_free(s);
  floe_graph_free(g);
}

static const Size grad_sizes[] = {{2, 3, 4, 0.0}, {3, 5, 6, 0.7}, {1, 1, 1, -1.0}, {4, 2, 3, 0.0},
                                  {2, 0, 3, 0.5}};

START_TEST(gradients_f64_loss_h_and_c) {
  check_grads(FLOE_F64, &grad_sizes[_i], LOSS_HC, 1e-12, true);
}
END_TEST

START_TEST(gradients_f64_loss_h_only) {
  check_grads(FLOE_F64, &grad_sizes[_i], LOSS_H, 1e-12, true);
}
END_TEST

START_TEST(gradients_f64_loss_c_only) {
  check_grads(FLOE_F64, &grad_sizes[_i], LOSS_C, 1e-12, true);
}
END_TEST

/* f32, small and large (the backward products split over the pool, hidden size beyond one
 * block of the elementwise pass). */
START_TEST(gradients_f32) {
  check_grads(FLOE_F32, &grad_sizes[1], LOSS_HC, 1e-5, false);
  const Size big = {64, 256, 256, 1.0}, odd = {5, 300, 260, 0.0};
  check_grads(FLOE_F32, &big, LOSS_HC, 1e-4, false);
  check_grads(FLOE_F32, &odd, LOSS_H, 1e-4, false);
}
END_TEST

/* A loss on the gate activations alone: nothing flows back through act. */
START_TEST(act_output_is_not_differentiable) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F64, 2, 3, 4, 4, false);
  cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.0);
  FloeOutput act = floe_out(fused_node(g, "fused"), 2), d[5];
  ck_assert_int_eq(floe_gradients(g, &act, 1, op.ph, 5, NULL, d, NULL), FLOE_OK);
  for (int k = 0; k < 5; k++) ck_assert_ptr_null(d[k].node);
  operands_free(&op);
  floe_graph_free(g);
}
END_TEST

START_TEST(second_derivative_is_an_error) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F64, 2, 3, 4, 5, false);
  FloeLSTMState s = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.0);
  FloeOutput d[5], dd[1];
  ck_assert_int_eq(floe_gradients(g, &s.h, 1, op.ph, 5, NULL, d, NULL), FLOE_OK);
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_gradients(g, &d[3], 1, op.ph, 1, NULL, dd, st), FLOE_UNIMPLEMENTED);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "LSTMCellBackprop") && strstr(msg, "second derivative") &&
                    strstr(msg, "gradients/fused/LSTMCell/LSTMCellBackprop"),
                "message: %s", msg);
  ck_assert_int_eq(floe_graph_status(g), FLOE_UNIMPLEMENTED);
  floe_status_free(st);
  operands_free(&op);
  floe_graph_free(g);
  /* The same for the recurrent cell's backprop (gates_x = x, w_h = a [H, 4H] weight). */
  g = floe_graph_new();
  const int64_t bg[2] = {2, 16}, bh[2] = {2, 4}, wh[2] = {4, 16};
  FloeOutput gx = floe_placeholder(g, "gx", FLOE_F64, floe_shape_make(2, bg));
  FloeOutput h = floe_placeholder(g, "h", FLOE_F64, floe_shape_make(2, bh));
  FloeOutput w = floe_placeholder(g, "w", FLOE_F64, floe_shape_make(2, wh));
  FloeNodeBuilder *b = floe_node_begin(g, "LSTMCellRecurrent", "rec");
  floe_node_add_input(b, gx);
  floe_node_add_input(b, h);
  floe_node_add_input(b, h);
  floe_node_add_input(b, w);
  FloeOutput rh = floe_out(floe_node_finish(b), 0), dgx;
  ck_assert_int_eq(floe_gradients(g, &rh, 1, &gx, 1, NULL, &dgx, NULL), FLOE_OK);
  st = floe_status_new();
  ck_assert_int_eq(floe_gradients(g, &dgx, 1, &h, 1, NULL, dd, st), FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(st), "LSTMCellRecurrentBackprop") &&
                    strstr(floe_status_message(st), "second derivative"),
                "message: %s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The builder */

static int count_op(const FloeGraph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < floe_graph_num_nodes(g); i++)
    n += strcmp(floe_node_op(floe_graph_node(g, i)), op) == 0;
  return n;
}

/* With the CPU plugin loaded the default runtime has an LSTMCell kernel: auto fuses f32 and
 * f64 cells; f16 has no fused op and is built from primitive ops. */
START_TEST(auto_uses_the_kernel_when_present) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F32, 2, 3, 4, 6, false);
  FloeLSTMState s = cell(g, "c32", &op, FLOE_LSTM_FUSED_AUTO, 0.0);
  ck_assert_ptr_eq(s.h.node, fused_node(g, "c32"));
  ck_assert_int_eq(count_op(g, "MatMul"), 0);
  /* The same name again: fresh node names. */
  FloeLSTMState s2 = cell(g, "c32", &op, FLOE_LSTM_FUSED_AUTO, 0.0);
  ck_assert_str_eq(floe_node_name(s2.h.node), "c32/LSTMCell_1");
  operands_free(&op);
  floe_graph_free(g);

  g = floe_graph_new();
  operands_make(g, &op, FLOE_F16, 2, 3, 4, 6, false);
  s = cell(g, "c16", &op, FLOE_LSTM_FUSED_AUTO, 0.5);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_int_eq(count_op(g, "LSTMCell"), 0);
  ck_assert_int_eq(count_op(g, "MatMul"), 1);
  ck_assert_str_eq(floe_node_name(s.h.node), "c16/h");
  ck_assert_str_eq(floe_node_name(s.c.node), "c16/c");
  operands_free(&op);
  floe_graph_free(g);
}
END_TEST

/* Without an LSTMCell kernel in the default runtime (no plugin loaded), auto builds the
 * primitive form. The default runtime is made once per process, so the check runs in a
 * fresh process: this program run again with FLOE_TEST_LSTM_CHILD set (see main). */
static char self_path[4096];

static int auto_without_kernel_child(void) {
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F32, 2, 3, 4, 7, false);
  FloeLSTMState s = cell(g, "cell", &op, FLOE_LSTM_FUSED_AUTO, 0.0);
  int ok = floe_graph_status(g) == FLOE_OK && count_op(g, "LSTMCell") == 0 &&
           count_op(g, "MatMul") == 1 && s.h.node &&
           strcmp(floe_node_name(s.h.node), "cell/h") == 0 &&
           floe_runtime_num_kernels_for(floe_runtime_default(NULL), "LSTMCell", NULL) == 0;
  operands_free(&op);
  floe_graph_free(g);
  return ok ? 0 : 1;
}

START_TEST(auto_without_kernel_builds_primitive_ops) {
  ck_assert_msg(self_path[0], "cannot find this program (/proc/self/exe)");
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("FLOE_TEST_LSTM_CHILD", "auto-without-kernel", 1);
    setenv("FLOE_PLUGINS", "no-such-plugin", 1);
    execl(self_path, self_path, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "auto with no LSTMCell kernel did not build the primitive cell (status %d)",
                status);
}
END_TEST

/* With the Nth allocation failing, building both forms and their gradients fails cleanly
 * (the graph's sticky error is "out of memory", no crash; leaks show under valgrind), for
 * every N until it succeeds. */
START_TEST(allocation_failures_are_clean) {
  long n;
  for (n = 1; n < 100000; n++) {
    FloeGraph *g = floe_graph_new();
    Operands op;
    operands_make(g, &op, FLOE_F32, 2, 3, 4, 12, false);
    floe_test_fail_alloc_after(n);
    FloeLSTMState f = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.5);
    FloeLSTMState p = cell(g, "prim", &op, FLOE_LSTM_FUSED_NEVER, 0.5);
    FloeOutput ys[2] = {f.h, p.c}, d[5];
    floe_code rc = floe_gradients(g, ys, 2, op.ph, 5, NULL, d, NULL);
    floe_test_fail_alloc_after(0);
    bool done = floe_graph_status(g) == FLOE_OK;
    if (done) {
      ck_assert_int_eq(rc, FLOE_OK);
      for (int k = 0; k < 5; k++) ck_assert_ptr_nonnull(d[k].node);
    } else {
      ck_assert_msg(floe_graph_status(g) == FLOE_NO_MEMORY, "N=%ld: %s", n,
                    floe_graph_error(g, NULL));
      ck_assert_int_ne(rc, FLOE_OK);
      if (!f.h.node) ck_assert_ptr_null(p.h.node); /* nothing is built after a failure */
    }
    operands_free(&op);
    floe_graph_free(g);
    if (done) break;
  }
  ck_assert_int_gt(n, 20); /* allocations really did fail on the way */
  ck_assert_int_lt(n, 100000);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Weights and training */

typedef struct Weights {
  FloeVariable w, b;
} Weights;

START_TEST(weights_are_uniform_and_shared) {
  FloeGraph *g = floe_graph_new();
  Weights w, again;
  floe_lstm_weights(g, "lstm", FLOE_F32, 3, 4, 11, &w.w, &w.b);
  floe_lstm_weights(g, "lstm", FLOE_F32, 3, 4, 11, &again.w, &again.b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_str_eq(floe_node_name(w.w.handle.node), "lstm/kernel");
  ck_assert_str_eq(floe_node_name(w.b.handle.node), "lstm/bias");
  ck_assert_ptr_eq(again.w.handle.node, w.w.handle.node);
  ck_assert_ptr_eq(again.b.handle.node, w.b.handle.node);
  const char *init = floe_node_name(floe_variables_initializer(g, NULL));
  FloeSession *s = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeOutput outs[2] = {w.w.value, w.b.value};
  FloeTensor *v[2];
  run(s, NULL, 0, outs, 2, v);
  FloeShape ws = floe_tensor_shape(v[0]), bs = floe_tensor_shape(v[1]);
  ck_assert_int_eq(ws.rank, 2);
  ck_assert_int_eq(ws.dims[0], 7);
  ck_assert_int_eq(ws.dims[1], 16);
  ck_assert_int_eq(bs.rank, 1);
  ck_assert_int_eq(bs.dims[0], 16);
  /* 1/sqrt(4) = 0.5: every value in [-0.5, 0.5), spread over the range, kernel != bias. */
  for (int k = 0; k < 2; k++) {
    double lo = 1, hi = -1;
    for (int64_t i = 0; i < floe_tensor_num_elements(v[k]); i++) {
      double x = harness_get(v[k], i);
      ck_assert_msg(x >= -0.5 && x < 0.5, "value %g outside [-0.5, 0.5)", x);
      lo = fmin(lo, x);
      hi = fmax(hi, x);
    }
    ck_assert_msg(lo < -0.2 && hi > 0.2, "values in [%g, %g]: not spread", lo, hi);
  }
  ck_assert(harness_get(v[0], 0) != harness_get(v[1], 0));
  floe_tensor_release(v[0]);
  floe_tensor_release(v[1]);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* The fused cell in a training step on variables: SGD lowers a squared error. */
START_TEST(training_step_lowers_the_loss) {
  FloeGraph *g = floe_graph_new();
  Weights w;
  floe_lstm_weights(g, "lstm", FLOE_F32, 3, 5, 3, &w.w, &w.b);
  int64_t xd[2] = {4, 3}, hd[2] = {4, 5};
  FloeTensor *xv = harness_random(FLOE_F32, 2, xd, 1, -1, 1);
  FloeTensor *hv = harness_random(FLOE_F32, 2, hd, 2, -1, 1);
  FloeTensor *tv = harness_random(FLOE_F32, 2, hd, 3, -0.5, 0.5);
  FloeLSTMState prev = {floe_const(g, "h0", hv), floe_const(g, "c0", hv)};
  FloeLSTMOptions o = opts_of(FLOE_LSTM_FUSED_ALWAYS, 1.0);
  FloeLSTMState s = floe_lstm_cell(g, "cell", floe_const(g, "x", xv), prev, w.w.value,
                                   w.b.value, &o);
  FloeOutput diff = floe_binary(g, "Sub", "diff", s.h, floe_const(g, "target", tv));
  FloeOutput sq = floe_unary(g, "Square", "sq", diff);
  const int64_t n2[1] = {2};
  FloeTensor *axes = harness_i32(1, n2, (const int32_t[]){0, 1});
  FloeOutput loss = floe_binary(g, "Sum", "loss", sq, floe_const(g, "axes", axes));
  FloeOptimizerOptions oo;
  floe_optimizer_options_init(&oo, FLOE_OPT_SGD);
  oo.learning_rate = 0.2;
  FloeNode *train = floe_minimize(g, "train", loss, &oo, NULL, 0);
  const char *init = floe_node_name(floe_variables_initializer(g, NULL));
  const char *step = floe_node_name(train);
  FloeSession *sess = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(sess, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  double first = 0, last = 0;
  for (int it = 0; it < 20; it++) {
    FloeTensor *l;
    run(sess, NULL, 0, &loss, 1, &l);
    last = harness_get(l, 0);
    if (it == 0) first = last;
    floe_tensor_release(l);
    ck_assert_msg(floe_session_run(sess, NULL, 0, NULL, 0, &step, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
  }
  ck_assert_msg(last < 0.7 * first, "loss %g -> %g after 20 steps", first, last);
  floe_status_free(st);
  floe_tensor_release(xv);
  floe_tensor_release(hv);
  floe_tensor_release(tv);
  floe_tensor_release(axes);
  floe_session_free(sess);
  floe_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Errors */

/* The graph's error contains every fragment (NULL-terminated). */
static void assert_graph_error(FloeGraph *g, floe_code code, const char *const *frags) {
  ck_assert_int_eq(floe_graph_status(g), code);
  const char *msg = floe_graph_error(g, NULL);
  for (int i = 0; frags[i]; i++)
    ck_assert_msg(strstr(msg, frags[i]), "error lacks \"%s\": %s", frags[i], msg);
}

/* An LSTMCell node named "op" on placeholders of the given shapes (rank 1 for b). */
static void op_with_shapes(const char *opname, int n, const int64_t (*dims)[2], const int *ranks,
                           FloeDType dt, const char *const *frags) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, opname, "op");
  for (int k = 0; k < n; k++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", k);
    floe_node_add_input(b, floe_placeholder(g, name, dt, floe_shape_make(ranks[k], dims[k])));
  }
  floe_node_finish(b);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT, frags);
  floe_graph_free(g);
}

START_TEST(static_shape_errors) {
  const int r5[5] = {2, 2, 2, 2, 1};
  /* x [2,3], h [2,4], c [2,4], w [7,16], b [16] is right; each case breaks one. */
  const int64_t batch[5][2] = {{2, 3}, {3, 4}, {2, 4}, {7, 16}, {16, 0}};
  op_with_shapes("LSTMCell", 5, batch, r5, FLOE_F32,
                 (const char *const[]){"'op'", "LSTMCell", "batch", "[3,4]", "[2,3]", NULL});
  const int64_t rows[5][2] = {{2, 3}, {2, 4}, {2, 4}, {8, 16}, {16, 0}};
  op_with_shapes("LSTMCell", 5, rows, r5, FLOE_F32,
                 (const char *const[]){"'op'", "w has 8 rows", "input + hidden", "[8,16]", NULL});
  const int64_t cols[5][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 18}, {16, 0}};
  op_with_shapes("LSTMCell", 5, cols, r5, FLOE_F32,
                 (const char *const[]){"'op'", "18 columns", "multiple of 4", NULL});
  const int64_t bias[5][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {12, 0}};
  op_with_shapes("LSTMCell", 5, bias, r5, FLOE_F64,
                 (const char *const[]){"'op'", "hidden size 3", "[12]", NULL});
  const int r1[5] = {1, 2, 2, 2, 1};
  const int64_t rank[5][2] = {{2, 0}, {2, 4}, {2, 4}, {7, 16}, {16, 0}};
  op_with_shapes("LSTMCell", 5, rank, r1, FLOE_F32,
                 (const char *const[]){"'op'", "x must have rank 2", "[batch, input]", NULL});
  /* The gradient op: act must be [batch, 4 * hidden]. */
  const int r8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
  const int64_t g8[8][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {2, 4}, {2, 12}, {2, 4}, {2, 4}};
  op_with_shapes("LSTMCellGrad", 8, g8, r8, FLOE_F32,
                 (const char *const[]){"'op'", "LSTMCellGrad", "act", "hidden size 3", NULL});
  const int r4[4] = {2, 2, 2, 2};
  const int64_t rec[4][2] = {{2, 16}, {2, 4}, {2, 4}, {5, 16}};
  op_with_shapes("LSTMCellRecurrent", 4, rec, r4, FLOE_F32,
                 (const char *const[]){"'op'", "LSTMCellRecurrent", "w_h", "hidden size 5", NULL});
  op_with_shapes("LSTMCellBackprop", 8, g8, r8, FLOE_F32,
                 (const char *const[]){"'op'", "LSTMCellBackprop", "act", "hidden size 3", NULL});
}
END_TEST

START_TEST(dtype_errors) {
  const int r5[5] = {2, 2, 2, 2, 1};
  const int64_t ok[5][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {16, 0}};
  op_with_shapes("LSTMCell", 5, ok, r5, FLOE_F16, (const char *const[]){"'op'", "f16", NULL});
  /* Mixed dtypes through the op and the builder. */
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, "LSTMCell", "op");
  for (int k = 0; k < 5; k++)
    floe_node_add_input(b, floe_placeholder(g, ph_names[k], k == 3 ? FLOE_F64 : FLOE_F32,
                                            floe_shape_make(r5[k], ok[k])));
  floe_node_finish(b);
  ck_assert_int_ne(floe_graph_status(g), FLOE_OK);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "'op'"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);

  g = floe_graph_new();
  FloeOutput in[5];
  for (int k = 0; k < 5; k++)
    in[k] = floe_placeholder(g, ph_names[k], k == 2 ? FLOE_F64 : FLOE_F32,
                             floe_shape_make(r5[k], ok[k]));
  FloeLSTMState prev = {in[1], in[2]};
  FloeLSTMState s = floe_lstm_cell(g, "cell", in[0], prev, in[3], in[4], NULL);
  ck_assert_ptr_null(s.h.node);
  ck_assert_ptr_null(s.c.node);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                     (const char *const[]){"'cell'", "prev.c", "f64", "f32", NULL});
  floe_graph_free(g);

  /* The fused op has no f16 kernel or definition: ALWAYS is refused with a way out. */
  g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F16, 2, 3, 4, 8, false);
  s = cell(g, "cell", &op, FLOE_LSTM_FUSED_ALWAYS, 0.0);
  ck_assert_ptr_null(s.h.node);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                     (const char *const[]){"'cell'", "f16", "FLOE_LSTM_FUSED_AUTO", NULL});
  operands_free(&op);
  floe_graph_free(g);
}
END_TEST

/* The builder checks the shapes it knows, for both forms, before adding any node. */
START_TEST(builder_errors) {
  for (int fused = FLOE_LSTM_FUSED_ALWAYS; fused <= FLOE_LSTM_FUSED_NEVER; fused++) {
    FloeGraph *g = floe_graph_new();
    int64_t xd[2] = {2, 3}, hd[2] = {2, 4}, wd[2] = {8, 16}, bd[1] = {16};
    FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
    FloeLSTMState prev = {floe_placeholder(g, "h", FLOE_F32, floe_shape_make(2, hd)),
                          floe_placeholder(g, "c", FLOE_F32, floe_shape_make(2, hd))};
    FloeOutput w = floe_placeholder(g, "w", FLOE_F32, floe_shape_make(2, wd));
    FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_make(1, bd));
    int before = floe_graph_num_nodes(g);
    FloeLSTMOptions o = opts_of((FloeLSTMFused)fused, 0.0);
    FloeLSTMState s = floe_lstm_cell(g, "cell", x, prev, w, b, &o);
    ck_assert_ptr_null(s.h.node);
    assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                       (const char *const[]){"'cell'", "rows are not input + hidden",
                                             "w [8,16]", "x [2,3]", NULL});
    ck_assert_int_eq(floe_graph_num_nodes(g), before);
    floe_graph_free(g);
  }
  /* An invalid argument (a failed builder call), bad options, a graph already failed. */
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F32, 2, 3, 4, 9, false);
  FloeLSTMState prev = {op.ph[1], floe_out(NULL, 0)};
  FloeLSTMState s = floe_lstm_cell(g, NULL, op.ph[0], prev, op.ph[3], op.ph[4], NULL);
  ck_assert_ptr_null(s.h.node);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                     (const char *const[]){"'lstm_cell'", "prev.c is invalid", NULL});
  /* Sticky: a later valid call is a no-op. */
  s = cell(g, "later", &op, FLOE_LSTM_FUSED_NEVER, 0.0);
  ck_assert_ptr_null(s.h.node);
  ck_assert_ptr_null(floe_graph_find(g, "later/h"));
  floe_graph_clear_error(g);
  FloeLSTMOptions bad = opts_of(FLOE_LSTM_FUSED_ALWAYS, 0.0);
  bad.fused = (FloeLSTMFused)7;
  prev.c = op.ph[2];
  s = floe_lstm_cell(g, "cell", op.ph[0], prev, op.ph[3], op.ph[4], &bad);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT, (const char *const[]){"'cell'", "fused = 7", NULL});
  floe_graph_clear_error(g);
  bad = opts_of(FLOE_LSTM_FUSED_ALWAYS, NAN);
  s = floe_lstm_cell(g, "cell", op.ph[0], prev, op.ph[3], op.ph[4], &bad);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT, (const char *const[]){"forget_bias", NULL});
  floe_graph_clear_error(g);
  bad = opts_of(FLOE_LSTM_FUSED_ALWAYS, 0.0);
  bad.struct_size = 4;
  s = floe_lstm_cell(g, "cell", op.ph[0], prev, op.ph[3], op.ph[4], &bad);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                     (const char *const[]){"struct_size", "floe_lstm_options_init", NULL});
  floe_graph_clear_error(g);
  /* Weights. */
  Weights wts;
  floe_lstm_weights(g, "wts", FLOE_I32, 3, 4, 1, &wts.w, &wts.b);
  ck_assert_ptr_null(wts.w.handle.node);
  ck_assert_ptr_null(wts.b.value.node);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT, (const char *const[]){"'wts'", "i32", NULL});
  floe_graph_clear_error(g);
  floe_lstm_weights(g, "wts", FLOE_F32, 3, 0, 1, &wts.w, NULL);
  assert_graph_error(g, FLOE_INVALID_ARGUMENT,
                     (const char *const[]){"'wts'", "hidden_size 0", NULL});
  operands_free(&op);
  floe_graph_free(g);
  /* A NULL graph is a no-op. */
  FloeOutput none = floe_out(NULL, 0);
  FloeLSTMState nothing = {none, none};
  s = floe_lstm_cell(NULL, "cell", none, nothing, none, none, NULL);
  ck_assert_ptr_null(s.h.node);
}
END_TEST

/* Shapes known only at run time: the kernels' errors name the node and the shapes. */
static void run_expect_error(const char *opname, int n, const int64_t (*dims)[2],
                             const int *ranks, const char *const *frags) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, opname, "op");
  FloeFeed feeds[8];
  FloeTensor *vals[8];
  char names[8][8];
  for (int k = 0; k < n; k++) {
    snprintf(names[k], sizeof names[k], "in%d", k);
    floe_node_add_input(b, floe_placeholder(g, names[k], FLOE_F32, floe_shape_unknown()));
    vals[k] = harness_random(FLOE_F32, ranks[k], dims[k], (uint64_t)k + 1, -1, 1);
    feeds[k] = (FloeFeed){names[k], vals[k]};
  }
  floe_node_finish(b);
  FloeSession *s = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  const char *fetch = "op:0";
  FloeTensor *out = NULL;
  ck_assert_int_eq(floe_session_run(s, feeds, n, &fetch, 1, NULL, 0, &out, st),
                   FLOE_INVALID_ARGUMENT);
  const char *msg = floe_status_message(st);
  for (int i = 0; frags[i]; i++)
    ck_assert_msg(strstr(msg, frags[i]), "error lacks \"%s\": %s", frags[i], msg);
  ck_assert_ptr_null(out);
  floe_status_free(st);
  for (int k = 0; k < n; k++) floe_tensor_release(vals[k]);
  floe_session_free(s);
  floe_graph_free(g);
}

START_TEST(run_time_shape_errors) {
  const int r5[5] = {2, 2, 2, 2, 1};
  const int64_t w_rows[5][2] = {{2, 3}, {2, 4}, {2, 4}, {8, 16}, {16, 0}};
  run_expect_error("LSTMCell", 5, w_rows, r5,
                   (const char *const[]){"'op'", "LSTMCell", "w must be", "[7,16]", "got [8,16]",
                                         "x [2,3]", "h_prev [2,4]", NULL});
  const int64_t c_batch[5][2] = {{2, 3}, {2, 4}, {3, 4}, {7, 16}, {16, 0}};
  run_expect_error("LSTMCell", 5, c_batch, r5,
                   (const char *const[]){"'op'", "c_prev must be", "[2,4]", "got [3,4]", NULL});
  const int64_t b_size[5][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {15, 0}};
  run_expect_error("LSTMCell", 5, b_size, r5,
                   (const char *const[]){"'op'", "b must be", "[16]", "got [15]", NULL});
  const int r5x[5] = {1, 2, 2, 2, 1};
  const int64_t x_rank[5][2] = {{3, 0}, {2, 4}, {2, 4}, {7, 16}, {16, 0}};
  run_expect_error("LSTMCell", 5, x_rank, r5x,
                   (const char *const[]){"'op'", "x must be [batch, input]", "got x [3]", NULL});
  const int r8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
  const int64_t dc_shape[8][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {2, 4}, {2, 16}, {2, 4}, {2, 5}};
  run_expect_error("LSTMCellGrad", 8, dc_shape, r8,
                   (const char *const[]){"'op'", "LSTMCellGrad", "dc must be", "got [2,5]", NULL});
  const int64_t act_shape[8][2] = {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {2, 4}, {2, 12}, {2, 4}, {2, 4}};
  run_expect_error("LSTMCellGrad", 8, act_shape, r8,
                   (const char *const[]){"'op'", "act must be", "[2,16]", "got [2,12]", NULL});
  const int r4[4] = {2, 2, 2, 2};
  const int64_t wh_rows[4][2] = {{2, 16}, {2, 4}, {2, 4}, {5, 16}};
  run_expect_error("LSTMCellRecurrent", 4, wh_rows, r4,
                   (const char *const[]){"'op'", "LSTMCellRecurrent", "w_h must be",
                                         "[hidden, 4 * hidden]", "[4,16]", "got [5,16]",
                                         "h_prev [2,4]", NULL});
  const int64_t gx_cols[4][2] = {{2, 12}, {2, 4}, {2, 4}, {4, 16}};
  run_expect_error("LSTMCellRecurrent", 4, gx_cols, r4,
                   (const char *const[]){"'op'", "gates_x must be", "[2,16]", "got [2,12]", NULL});
  const int r7[7] = {2, 2, 2, 2, 2, 2, 2};
  const int64_t rdc[7][2] = {{2, 4}, {2, 4}, {4, 16}, {2, 4}, {2, 16}, {2, 4}, {3, 4}};
  run_expect_error("LSTMCellRecurrentBackprop", 7, rdc, r7,
                   (const char *const[]){"'op'", "LSTMCellRecurrentBackprop", "dc must be",
                                         "got [3,4]", NULL});
  run_expect_error("LSTMCellBackprop", 8, dc_shape, r8,
                   (const char *const[]){"'op'", "LSTMCellBackprop", "dc must be", "got [2,5]",
                                         NULL});
}
END_TEST

/* LSTMCellBackprop (what the gradient uses, checked against finite differences above) and
 * LSTMCellGrad agree: the same dx, dh_prev, dc_prev, and LSTMCellGrad's dw and db are
 * [x, h_prev]^T @ d_gates and d_gates' column sums, computed here by plain loops. */
START_TEST(backprop_and_grad_agree) {
  const int64_t bt = 3, in = 4, hid = 5, g4 = 4 * hid;
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F64, bt, in, hid, 17, false);
  FloeLSTMState s = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.0);
  FloeNode *fwd = fused_node(g, "fused");
  const int64_t bh[2] = {bt, hid};
  FloeOutput dh = floe_placeholder(g, "dh", FLOE_F64, floe_shape_make(2, bh));
  FloeOutput dc = floe_placeholder(g, "dc", FLOE_F64, floe_shape_make(2, bh));
  FloeNode *nodes[2];
  const char *ops[2] = {"LSTMCellGrad", "LSTMCellBackprop"};
  for (int k = 0; k < 2; k++) {
    FloeNodeBuilder *b = floe_node_begin(g, ops[k], ops[k]);
    for (int i = 0; i < 4; i++) floe_node_add_input(b, op.ph[i]);
    floe_node_add_input(b, s.c);
    floe_node_add_input(b, floe_out(fwd, 2));
    floe_node_add_input(b, dh);
    floe_node_add_input(b, dc);
    nodes[k] = floe_node_finish(b);
  }
  FloeSession *sess = harness_session(g, NULL);
  FloeFeed feeds[7];
  operands_feeds(&op, feeds);
  FloeTensor *dh_v = harness_random(FLOE_F64, 2, bh, 91, -1, 1);
  FloeTensor *dc_v = harness_random(FLOE_F64, 2, bh, 92, -1, 1);
  feeds[5] = (FloeFeed){"dh", dh_v};
  feeds[6] = (FloeFeed){"dc", dc_v};
  FloeOutput outs[9];
  for (int i = 0; i < 5; i++) outs[i] = floe_out(nodes[0], i);
  for (int i = 0; i < 4; i++) outs[5 + i] = floe_out(nodes[1], i);
  FloeTensor *v[9] = {0};
  run(sess, feeds, 7, outs, 9, v);
  for (int i = 0; i < 3; i++) {
    size_t n = (size_t)floe_tensor_num_elements(v[i]);
    ck_assert_int_eq((long)n, (long)floe_tensor_num_elements(v[5 + i]));
    const double *a = floe_tensor_data(v[i]), *b = floe_tensor_data(v[5 + i]);
    for (size_t j = 0; j < n; j++) ck_assert_double_eq_tol(a[j], b[j], 1e-12);
  }
  const double *dg = floe_tensor_data(v[8]), *x = floe_tensor_data(op.val[0]),
               *h = floe_tensor_data(op.val[1]), *dw = floe_tensor_data(v[3]),
               *db = floe_tensor_data(v[4]);
  ck_assert_int_eq(floe_tensor_dims(v[8])[0], bt);
  ck_assert_int_eq(floe_tensor_dims(v[8])[1], g4);
  double dg_abs = 0;
  for (int64_t j = 0; j < g4; j++) {
    double sum = 0;
    for (int64_t r = 0; r < bt; r++) sum += dg[r * g4 + j], dg_abs += fabs(dg[r * g4 + j]);
    ck_assert_double_eq_tol(db[j], sum, 1e-12);
    for (int64_t i = 0; i < in + hid; i++) {
      double w = 0;
      for (int64_t r = 0; r < bt; r++)
        w += (i < in ? x[r * in + i] : h[r * hid + i - in]) * dg[r * g4 + j];
      ck_assert_double_eq_tol(dw[i * g4 + j], w, 1e-12);
    }
  }
  ck_assert(dg_abs > 0.1); /* the comparison saw real gradients, not zeros */
  for (int i = 0; i < 9; i++) floe_tensor_release(v[i]);
  floe_tensor_release(dh_v);
  floe_tensor_release(dc_v);
  floe_session_free(sess);
  operands_free(&op);
  floe_graph_free(g);
}
END_TEST

/* LSTMCellRecurrent on gates_x = x @ w[0:I] + b (computed here by plain loops) with
 * w_h = w[I:] gives LSTMCell's h, c and act; its backprop gives LSTMCellBackprop's d_gates,
 * dh_prev and dc_prev; and floe_gradients through it (w_h's gradient a MatMul) matches
 * LSTMCell's dw rows I.. . */
START_TEST(recurrent_cell_matches_the_cell) {
  const int64_t bt = 3, in = 4, hid = 5, g4 = 4 * hid;
  FloeGraph *g = floe_graph_new();
  Operands op;
  operands_make(g, &op, FLOE_F64, bt, in, hid, 23, false);
  FloeLSTMState s = cell(g, "fused", &op, FLOE_LSTM_FUSED_ALWAYS, 0.5);
  FloeNode *fwd = fused_node(g, "fused");
  const int64_t bg[2] = {bt, g4}, wh[2] = {hid, g4}, bh[2] = {bt, hid};
  FloeOutput gx = floe_placeholder(g, "gx", FLOE_F64, floe_shape_make(2, bg));
  FloeOutput whp = floe_placeholder(g, "wh", FLOE_F64, floe_shape_make(2, wh));
  FloeNodeBuilder *b = floe_node_begin(g, "LSTMCellRecurrent", "rec");
  floe_node_add_input(b, gx);
  floe_node_add_input(b, op.ph[1]);
  floe_node_add_input(b, op.ph[2]);
  floe_node_add_input(b, whp);
  floe_node_set_attr_float(b, "forget_bias", 0.5);
  FloeNode *rec = floe_node_finish(b);
  FloeOutput dh = floe_placeholder(g, "dh", FLOE_F64, floe_shape_make(2, bh));
  FloeOutput dc = floe_placeholder(g, "dc", FLOE_F64, floe_shape_make(2, bh));
  b = floe_node_begin(g, "LSTMCellBackprop", "bp");
  for (int i = 0; i < 4; i++) floe_node_add_input(b, op.ph[i]);
  floe_node_add_input(b, s.c);
  floe_node_add_input(b, floe_out(fwd, 2));
  floe_node_add_input(b, dh);
  floe_node_add_input(b, dc);
  FloeNode *bp = floe_node_finish(b);
  b = floe_node_begin(g, "LSTMCellRecurrentBackprop", "rbp");
  floe_node_add_input(b, op.ph[1]);
  floe_node_add_input(b, op.ph[2]);
  floe_node_add_input(b, whp);
  floe_node_add_input(b, floe_out(rec, 1));
  floe_node_add_input(b, floe_out(rec, 2));
  floe_node_add_input(b, dh);
  floe_node_add_input(b, dc);
  FloeNode *rbp = floe_node_finish(b);
  /* d(h . dh + c . dc) / d w_h through the registered gradient, and the same for w. */
  FloeOutput dwh, dw;
  FloeOutput ys[2] = {floe_out(rec, 0), floe_out(rec, 1)}, gys[2] = {dh, dc};
  ck_assert_int_eq(floe_gradients(g, ys, 2, &whp, 1, gys, &dwh, NULL), FLOE_OK);
  FloeOutput fys[2] = {s.h, s.c};
  ck_assert_int_eq(floe_gradients(g, fys, 2, &op.ph[3], 1, gys, &dw, NULL), FLOE_OK);

  /* gates_x and w_h by plain loops from the cell's operands. */
  const double *x = floe_tensor_data(op.val[0]), *w = floe_tensor_data(op.val[3]),
               *bias = floe_tensor_data(op.val[4]);
  double gxv[3 * 20], whv[5 * 20];
  for (int64_t r = 0; r < bt; r++)
    for (int64_t j = 0; j < g4; j++) {
      double v = bias[j];
      for (int64_t i = 0; i < in; i++) v += x[r * in + i] * w[i * g4 + j];
      gxv[r * g4 + j] = v;
    }
  memcpy(whv, w + in * g4, sizeof whv);
  FloeTensor *gx_t = harness_f64(2, bg, gxv), *wh_t = harness_f64(2, wh, whv);
  FloeTensor *dh_v = harness_random(FLOE_F64, 2, bh, 93, -1, 1);
  FloeTensor *dc_v = harness_random(FLOE_F64, 2, bh, 94, -1, 1);
  FloeFeed feeds[9];
  operands_feeds(&op, feeds);
  feeds[5] = (FloeFeed){"gx", gx_t};
  feeds[6] = (FloeFeed){"wh", wh_t};
  feeds[7] = (FloeFeed){"dh", dh_v};
  feeds[8] = (FloeFeed){"dc", dc_v};
  FloeSession *sess = harness_session(g, NULL);
  FloeOutput outs[14] = {floe_out(fwd, 0), floe_out(rec, 0), floe_out(fwd, 1), floe_out(rec, 1),
                         floe_out(fwd, 2), floe_out(rec, 2), floe_out(bp, 3), floe_out(rbp, 0),
                         floe_out(bp, 1), floe_out(rbp, 1), floe_out(bp, 2), floe_out(rbp, 2),
                         dw, dwh};
  FloeTensor *v[14] = {0};
  run(sess, feeds, 9, outs, 14, v);
  for (int p = 0; p < 6; p++) {
    int64_t n = floe_tensor_num_elements(v[2 * p]);
    ck_assert_int_eq(n, floe_tensor_num_elements(v[2 * p + 1]));
    for (int64_t k = 0; k < n; k++)
      ck_assert_msg(fabs(harness_get(v[2 * p], k) - harness_get(v[2 * p + 1], k)) < 1e-12,
                    "pair %d [%lld]: %g vs %g", p, (long long)k, harness_get(v[2 * p], k),
                    harness_get(v[2 * p + 1], k));
  }
  /* dw_h is dw's rows I.. */
  ck_assert_int_eq(floe_tensor_num_elements(v[13]), hid * g4);
  for (int64_t k = 0; k < hid * g4; k++)
    ck_assert(fabs(harness_get(v[13], k) - harness_get(v[12], in * g4 + k)) < 1e-12);
  for (int i = 0; i < 14; i++) floe_tensor_release(v[i]);
  floe_tensor_release(gx_t);
  floe_tensor_release(wh_t);
  floe_tensor_release(dh_v);
  floe_tensor_release(dc_v);
  floe_session_free(sess);
  operands_free(&op);
  floe_graph_free(g);
}
END_TEST

static Suite *lstm_suite(void) {
  Suite *s = suite_create("lstm");
  int nf = (int)(sizeof forward_sizes / sizeof forward_sizes[0]);
  int ng = (int)(sizeof grad_sizes / sizeof grad_sizes[0]);
  TCase *tc = tcase_create("forward");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, forward_f32, 0, nf);
  tcase_add_loop_test(tc, forward_f64, 0, nf);
  tcase_add_test(tc, forward_unknown_shapes);
  tcase_add_test(tc, forward_empty_batch);
  suite_add_tcase(s, tc);
  tc = tcase_create("gradients");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, gradients_f64_loss_h_and_c, 0, ng);
  tcase_add_loop_test(tc, gradients_f64_loss_h_only, 0, ng);
  tcase_add_loop_test(tc, gradients_f64_loss_c_only, 0, ng);
  tcase_add_test(tc, gradients_f32);
  tcase_add_test(tc, act_output_is_not_differentiable);
  tcase_add_test(tc, second_derivative_is_an_error);
  tcase_add_test(tc, backprop_and_grad_agree);
  tcase_add_test(tc, recurrent_cell_matches_the_cell);
  suite_add_tcase(s, tc);
  tc = tcase_create("builder");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, auto_without_kernel_builds_primitive_ops);
  tcase_add_test(tc, auto_uses_the_kernel_when_present);
  tcase_add_test(tc, weights_are_uniform_and_shared);
  tcase_add_test(tc, training_step_lowers_the_loss);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_set_timeout(tc, 60); /* allocation_failures_are_clean took > 4 s under TSan on a busy machine */
  tcase_add_test(tc, static_shape_errors);
  tcase_add_test(tc, dtype_errors);
  tcase_add_test(tc, builder_errors);
  tcase_add_test(tc, run_time_shape_errors);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const char *child = getenv("FLOE_TEST_LSTM_CHILD");
  if (child && strcmp(child, "auto-without-kernel") == 0) return auto_without_kernel_child();
  ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  self_path[len > 0 ? len : 0] = '\0';
  /* Two pool threads unless the caller chose: the large cases split their products and
   * elementwise passes over the pool whatever the machine's core count. */
  setenv("FLOE_NUM_THREADS", "2", 0);
  SRunner *sr = srunner_create(lstm_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
