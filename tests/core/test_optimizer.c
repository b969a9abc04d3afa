/* SPDX-License-Identifier: Apache-2.0 */
/* test_optimizer.c - the optimiser API of floe_train.h: defaults, learning-rate schedules
 * evaluated at many steps against their formulas, the global norm, clipping and weight
 * decay checked on one SGD step against values computed here, floe_minimize converging on a
 * least-squares problem with every optimiser, the global step, slot variables and their
 * initialisation, the update ordering, Adam's first two steps against a hand-written
 * reference, and errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"

/* ------------------------------------------------------------------------------------ */
/* Helpers. */

static double fetch_scalar(FloeSession *s, const FloeFeed *feeds, int nf, const char *name) {
  FloeTensor *t = harness_fetch(s, feeds, nf, name);
  ck_assert_int_eq(floe_tensor_num_elements(t), 1);
  double v = harness_get(t, 0);
  floe_tensor_release(t);
  return v;
}

/* "name" for output 0 of a node, "name:i" otherwise (into buf). */
static const char *out_name(FloeOutput o, char *buf, size_t len) {
  if (o.index == 0)
    snprintf(buf, len, "%s", floe_node_name(o.node));
  else
    snprintf(buf, len, "%s:%d", floe_node_name(o.node), o.index);
  return buf;
}

static FloeOutput const_tensor(FloeGraph *g, const char *name, FloeTensor *t) {
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput i32_vec(FloeGraph *g, const char *name, int n, const int32_t *v) {
  int64_t d = n;
  return const_tensor(g, name, harness_i32(1, &d, v));
}

/* Sum over every dim of a rank-r tensor. */
static FloeOutput sum_all(FloeGraph *g, const char *name, FloeOutput x, int r) {
  static const int32_t axes[] = {0, 1, 2, 3};
  char buf[64];
  snprintf(buf, sizeof buf, "%s/axes", name);
  FloeNodeBuilder *b = floe_node_begin(g, "Sum", name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, i32_vec(g, buf, r, axes));
  return floe_out(floe_node_finish(b), 0);
}

/* ------------------------------------------------------------------------------------ */
/* Options. */

START_TEST(test_defaults) {
  FloeOptimizerOptions o;
  for (int k = FLOE_OPT_SGD; k <= FLOE_OPT_ADAGRAD; k++) {
    floe_optimizer_options_init(&o, (FloeOptimizerKind)k);
    ck_assert_uint_eq(o.struct_size, sizeof o);
    ck_assert_int_eq(o.kind, k);
    double lr = k == FLOE_OPT_ADAM || k == FLOE_OPT_RMSPROP ? 1e-3 : 1e-2;
    ck_assert_double_eq(o.learning_rate, lr);
    ck_assert_double_eq(o.momentum, k == FLOE_OPT_MOMENTUM ? 0.9 : 0.0);
    ck_assert_int_eq(o.nesterov, 0);
    ck_assert_double_eq(o.beta1, 0.9);
    ck_assert_double_eq(o.beta2, 0.999);
    ck_assert_double_eq(o.epsilon, 1e-7);
    ck_assert_double_eq(o.rho, 0.9);
    ck_assert_double_eq(o.initial_accumulator, 0.1);
    ck_assert_double_eq(o.weight_decay, 0.0);
    ck_assert_double_eq(o.clip_global_norm, 0.0);
    ck_assert_int_eq(o.use_locking, 1);
    ck_assert_int_eq(o.schedule, FLOE_LR_CONSTANT);
  }
  ck_assert_int_eq(floe_optimizer_kind_from_name("sgd"), FLOE_OPT_SGD);
  ck_assert_int_eq(floe_optimizer_kind_from_name("momentum"), FLOE_OPT_MOMENTUM);
  ck_assert_int_eq(floe_optimizer_kind_from_name("adam"), FLOE_OPT_ADAM);
  ck_assert_int_eq(floe_optimizer_kind_from_name("rmsprop"), FLOE_OPT_RMSPROP);
  ck_assert_int_eq(floe_optimizer_kind_from_name("adagrad"), FLOE_OPT_ADAGRAD);
  ck_assert_int_eq(floe_optimizer_kind_from_name("Adam"), FLOE_OPT_ADAM);
  ck_assert_int_eq(floe_optimizer_kind_from_name("lbfgs"), -1);
  ck_assert_int_eq(floe_optimizer_kind_from_name(""), -1);
  ck_assert_int_eq(floe_optimizer_kind_from_name(NULL), -1);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Schedules. */

static double ref_lr(const FloeOptimizerOptions *o, int64_t step) {
  double lr = o->learning_rate;
  switch (o->schedule) {
    case FLOE_LR_CONSTANT: return lr;
    case FLOE_LR_EXPONENTIAL: {
      double p = (double)step / (double)o->decay_steps;
      if (o->staircase) p = floor(p);
      return lr * pow(o->decay_rate, p);
    }
    case FLOE_LR_PIECEWISE:
      for (int i = 0; i < o->num_boundaries; i++)
        if (step < o->boundaries[i]) return o->values[i];
      return o->values[o->num_boundaries];
    case FLOE_LR_COSINE: {
      double m = step < o->decay_steps ? (double)step : (double)o->decay_steps;
      double pi = 3.14159265358979323846;
      return lr * (o->cosine_alpha +
                   (1 - o->cosine_alpha) * (1 + cos(pi * m / (double)o->decay_steps)) / 2);
    }
  }
  ck_abort_msg("bad schedule");
  return 0;
}

static void check_schedule(const FloeOptimizerOptions *o, const char *what) {
  static const int64_t steps[] = {0,   1,    2,    3,    5,      9,       10,      11,
                                  19,  20,   21,   49,   50,     51,      99,      100,
                                  101, 250,  999,  1000, 1001,   4321,    100000,  1234567,
                                  16777217, 1099511627776LL};
  FloeGraph *g = floe_graph_new();
  FloeOutput step = floe_placeholder(g, "step", FLOE_I64, floe_shape_scalar());
  FloeOutput lr = floe_learning_rate(g, "lr", o, step);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", what, floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_output_dtype(lr.node, lr.index), FLOE_F32);
  char name[128];
  out_name(lr, name, sizeof name);
  ck_assert_msg(strncmp(name, "lr/", 3) == 0, "%s: output %s is not under lr/", what, name);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    FloeTensor *t = floe_tensor_scalar_i64(steps[i], NULL);
    FloeFeed f = {"step", t};
    double got = fetch_scalar(s, &f, 1, name);
    double want = (float)ref_lr(o, steps[i]);
    ck_assert_msg(fabs(got - want) <= 1e-6 * fabs(want) + 1e-12,
                  "%s at step %lld: %.9g, want %.9g", what, (long long)steps[i], got, want);
    floe_tensor_release(t);
  }
  floe_session_free(s);
}

START_TEST(test_schedules) {
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.3;
  check_schedule(&o, "constant");

  o.schedule = FLOE_LR_EXPONENTIAL;
  o.decay_steps = 100;
  o.decay_rate = 0.5;
  check_schedule(&o, "exponential");
  o.staircase = 1;
  check_schedule(&o, "exponential staircase");
  o.decay_steps = 7;
  o.decay_rate = 0.97;
  check_schedule(&o, "exponential staircase 7");

  o.schedule = FLOE_LR_PIECEWISE;
  o.num_boundaries = 3;
  o.boundaries[0] = 10, o.boundaries[1] = 20, o.boundaries[2] = 50;
  o.values[0] = 1.0, o.values[1] = 0.5, o.values[2] = 0.1, o.values[3] = 0.01;
  check_schedule(&o, "piecewise");
  o.num_boundaries = 0;
  o.values[0] = 0.25;
  check_schedule(&o, "piecewise, one piece");
  o.num_boundaries = FLOE_LR_MAX_PIECES;
  for (int i = 0; i < FLOE_LR_MAX_PIECES; i++) o.boundaries[i] = 3 * i + 1;
  for (int i = 0; i <= FLOE_LR_MAX_PIECES; i++) o.values[i] = 1.0 / (i + 1);
  check_schedule(&o, "piecewise, 17 pieces");

  o.schedule = FLOE_LR_COSINE;
  o.learning_rate = 0.1;
  o.decay_steps = 100;
  o.cosine_alpha = 0.0;
  check_schedule(&o, "cosine");
  o.cosine_alpha = 0.1;
  o.decay_steps = 1000;
  check_schedule(&o, "cosine alpha 0.1");
}
END_TEST

/* A bad schedule is the graph's sticky error; later builders are no-ops. */
static void expect_schedule_error(const FloeOptimizerOptions *o, const char *needle,
                                  FloeDType step_dt) {
  FloeGraph *g = floe_graph_new();
  FloeOutput step = floe_placeholder(g, "step", step_dt, floe_shape_scalar());
  FloeOutput lr = floe_learning_rate(g, "lr", o, step);
  ck_assert_ptr_null(lr.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), needle), "message '%s' lacks '%s'",
                floe_graph_error(g, NULL), needle);
  ck_assert_ptr_null(floe_const_f32(g, "after", 1.0f).node);
  floe_graph_free(g);
}

START_TEST(test_schedule_errors) {
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.schedule = FLOE_LR_EXPONENTIAL;
  o.decay_rate = 0.5;
  expect_schedule_error(&o, "decay_steps", FLOE_I64);
  o.schedule = FLOE_LR_COSINE;
  expect_schedule_error(&o, "decay_steps", FLOE_I64);
  o.schedule = FLOE_LR_PIECEWISE;
  o.num_boundaries = 2;
  o.boundaries[0] = 10, o.boundaries[1] = 10;
  expect_schedule_error(&o, "boundaries", FLOE_I64);
  o.num_boundaries = FLOE_LR_MAX_PIECES + 1;
  expect_schedule_error(&o, "num_boundaries", FLOE_I64);
  o.schedule = FLOE_LR_EXPONENTIAL;
  o.decay_steps = 10;
  expect_schedule_error(&o, "f32", FLOE_F32); /* the step must be an integer */
  o.learning_rate = -1;
  expect_schedule_error(&o, "learning_rate", FLOE_I64);
  expect_schedule_error(NULL, "NULL", FLOE_I64);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Global norm. */

START_TEST(test_global_norm) {
  FloeGraph *g = floe_graph_new();
  int64_t d3 = 3, d22[2] = {2, 2};
  FloeTensor *a = harness_random(FLOE_F32, 1, &d3, 1, -2, 2);
  FloeTensor *b = harness_random(FLOE_F64, 2, d22, 2, -2, 2);
  FloeTensor *c = harness_random(FLOE_F32, 0, NULL, 3, -2, 2);
  double want = 0;
  FloeTensor *all[3] = {a, b, c};
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < floe_tensor_num_elements(all[k]); i++)
      want += harness_get(all[k], i) * harness_get(all[k], i);
  want = sqrt(want);
  FloeOutput ts[3] = {floe_const(g, "a", a), floe_const(g, "b", b), floe_const(g, "c", c)};
  FloeOutput norm = floe_global_norm(g, "norm", ts, 3);
  FloeOutput one = floe_global_norm(g, "norm_a", ts, 1);
  FloeOutput none = floe_global_norm(g, "norm_none", NULL, 0);
  ck_assert_int_eq(floe_node_output_dtype(norm.node, norm.index), FLOE_F32);
  char n_all[128], n_one[128], n_none[128]; /* names die with the graph */
  out_name(norm, n_all, sizeof n_all);
  out_name(one, n_one, sizeof n_one);
  out_name(none, n_none, sizeof n_none);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  double got = fetch_scalar(s, NULL, 0, n_all);
  ck_assert_msg(fabs(got - want) <= 1e-6 * want, "norm %.9g, want %.9g", got, want);
  double wa = 0;
  for (int64_t i = 0; i < 3; i++) wa += harness_get(a, i) * harness_get(a, i);
  got = fetch_scalar(s, NULL, 0, n_one);
  ck_assert_msg(fabs(got - sqrt(wa)) <= 1e-6 * sqrt(wa), "norm %.9g, want %.9g", got, sqrt(wa));
  ck_assert_double_eq(fetch_scalar(s, NULL, 0, n_none), 0.0);
  floe_session_free(s);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(c);

  /* An integer tensor has no norm. */
  g = floe_graph_new();
  FloeOutput i = const_tensor(g, "i", floe_tensor_scalar_i32(3, NULL));
  ck_assert_ptr_null(floe_global_norm(g, "bad", &i, 1).node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  floe_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* One SGD step on a linear loss: the gradient is known exactly, so weight decay and
 * clipping can be checked value by value. */

static void clip_case(double clip, double wd, double lr) {
  /* loss = sum(a * ca) + sum(b * cb), a f32 [3], b f64 [2,2]: d/da = ca, d/db = cb. */
  const float ca[3] = {3.0f, -4.0f, 1.5f};
  const double cb[4] = {0.5, -2.0, 2.5, 1.0};
  const double a0 = 0.5, b0 = -0.25;
  FloeGraph *g = floe_graph_new();
  int64_t d3 = 3, d22[2] = {2, 2};
  FloeVariable a = floe_variable(g, "a", FLOE_F32, floe_shape_make(1, &d3),
                                 floe_init_constant(a0));
  FloeVariable b = floe_variable(g, "b", FLOE_F64, floe_shape_make(2, d22),
                                 floe_init_constant(b0));
  FloeOutput la = sum_all(g, "la", floe_binary(g, "Mul", "ma", a.value,
                                               const_tensor(g, "ca", harness_f32(1, &d3, ca))),
                          1);
  FloeOutput lb = sum_all(g, "lb", floe_binary(g, "Mul", "mb", b.value,
                                               const_tensor(g, "cb", harness_f64(2, d22, cb))),
                          2);
  FloeNodeBuilder *nb = floe_node_begin(g, "Cast", "lb32");
  floe_node_add_input(nb, lb);
  floe_node_set_attr_type(nb, "DstT", FLOE_F32);
  FloeOutput loss = floe_binary(g, "Add", "loss", la, floe_out(floe_node_finish(nb), 0));
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = lr;
  o.clip_global_norm = clip;
  o.weight_decay = wd;
  FloeNode *train = floe_minimize(g, NULL, loss, &o, NULL, 0);
  ck_assert_msg(train != NULL, "minimize: %s", floe_graph_error(g, NULL));
  ck_assert_str_eq(floe_node_name(train), "train");
  floe_variables_initializer(g, NULL);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  harness_run_target(s, "init");
  harness_run_target(s, "train");

  /* Reference: g = c + wd * w; scale = clip / max(|g|, clip); w -= lr * scale * g. */
  double ga[3], gb[4], sq = 0;
  for (int i = 0; i < 3; i++) {
    ga[i] = ca[i] + wd * a0;
    sq += ga[i] * ga[i];
  }
  for (int i = 0; i < 4; i++) {
    gb[i] = cb[i] + wd * b0;
    sq += gb[i] * gb[i];
  }
  double norm = sqrt(sq);
  double scale = clip > 0 ? clip / (norm > clip ? norm : clip) : 1.0;
  double lr32 = (float)lr; /* the learning rate is an f32 scalar */
  FloeTensor *got_a = harness_fetch(s, NULL, 0, "a/read");
  FloeTensor *got_b = harness_fetch(s, NULL, 0, "b/read");
  char what[96];
  for (int i = 0; i < 3; i++) {
    double want = a0 - lr32 * scale * ga[i];
    snprintf(what, sizeof what, "a[%d] clip %g wd %g", i, clip, wd);
    ck_assert_msg(fabs(harness_get(got_a, i) - want) <= 1e-6 * fabs(want) + 1e-7,
                  "%s: %.9g, want %.9g", what, harness_get(got_a, i), want);
  }
  for (int i = 0; i < 4; i++) {
    double want = b0 - lr32 * scale * gb[i];
    /* the clipping factor is computed in f32 */
    ck_assert_msg(fabs(harness_get(got_b, i) - want) <= 1e-6 * fabs(want) + 1e-7,
                  "b[%d] clip %g wd %g: %.12g, want %.12g", i, clip, wd, harness_get(got_b, i),
                  want);
  }
  floe_tensor_release(got_a);
  floe_tensor_release(got_b);
  floe_session_free(s);
}

START_TEST(test_clip_and_weight_decay) {
  clip_case(0, 0, 0.25);      /* neither */
  clip_case(1e6, 0, 0.25);    /* clip above the norm: unchanged */
  clip_case(2.0, 0, 0.25);    /* norm ~6.3: scaled to 2 */
  clip_case(0, 0.1, 0.25);    /* weight decay only */
  clip_case(1.5, 0.3, 0.125); /* both: the norm of the decayed gradients is clipped */
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Least squares: y = X w* + b*, loss = mean((X w + b - y)^2). */

#define LS_N 64
#define LS_D 4

typedef struct LsModel {
  FloeGraph *g;
  FloeVariable w, b;
  FloeOutput loss;
} LsModel;

static LsModel ls_model(FloeDType dt) {
  LsModel m;
  m.g = floe_graph_new();
  FloeGraph *g = m.g;
  int64_t xd[2] = {LS_N, LS_D}, wd[2] = {LS_D, 1}, yd[2] = {LS_N, 1}, bd = 1;
  FloeTensor *x = harness_random(dt, 2, xd, 42, -1, 1);
  const double w_true[LS_D] = {1.5, -2.0, 0.5, 3.0}, b_true = 0.7;
  double y[LS_N];
  for (int i = 0; i < LS_N; i++) {
    y[i] = b_true;
    for (int j = 0; j < LS_D; j++) y[i] += harness_get(x, i * LS_D + j) * w_true[j];
  }
  m.w = floe_variable(g, "w", dt, floe_shape_make(2, wd), floe_init_zeros());
  m.b = floe_variable(g, "b", dt, floe_shape_make(1, &bd), floe_init_zeros());
  FloeOutput xo = const_tensor(g, "x", x);
  FloeOutput yo = const_tensor(g, "y", harness_from_doubles(dt, 2, yd, y));
  FloeOutput pred = floe_binary(g, "Add", "pred", floe_matmul(g, "xw", xo, m.w.value, 0, 0),
                                m.b.value);
  FloeOutput err = floe_unary(g, "Square", "sq", floe_binary(g, "Sub", "err", pred, yo));
  FloeNodeBuilder *nb = floe_node_begin(g, "Mean", "loss");
  floe_node_add_input(nb, err);
  floe_node_add_input(nb, i32_vec(g, "loss/axes", 2, (const int32_t[]){0, 1}));
  m.loss = floe_out(floe_node_finish(nb), 0);
  return m;
}

typedef struct TrainCase {
  const char *what;
  FloeOptimizerKind kind;
  double lr;
  int nesterov, use_locking, steps;
  FloeDType dt;
} TrainCase;

static const TrainCase train_cases[] = {
    {"sgd", FLOE_OPT_SGD, 0.3, 0, 1, 300, FLOE_F32},
    {"sgd f64", FLOE_OPT_SGD, 0.3, 0, 1, 300, FLOE_F64},
    {"momentum", FLOE_OPT_MOMENTUM, 0.05, 0, 1, 300, FLOE_F32},
    {"momentum nesterov", FLOE_OPT_MOMENTUM, 0.05, 1, 1, 300, FLOE_F32},
    {"adam", FLOE_OPT_ADAM, 0.05, 0, 1, 400, FLOE_F32},
    {"adam nesterov f64", FLOE_OPT_ADAM, 0.05, 1, 1, 400, FLOE_F64},
    {"rmsprop", FLOE_OPT_RMSPROP, 0.01, 0, 1, 600, FLOE_F32},
    {"rmsprop unlocked", FLOE_OPT_RMSPROP, 0.01, 0, 0, 600, FLOE_F32},
    {"adagrad", FLOE_OPT_ADAGRAD, 0.5, 0, 1, 400, FLOE_F32},
};

START_TEST(test_converges) {
  const TrainCase *c = &train_cases[_i];
  LsModel m = ls_model(c->dt);
  /* A trainable variable the loss does not use: skipped, left alone. */
  FloeVariable unused = floe_variable(m.g, "unused", c->dt, floe_shape_scalar(),
                                      floe_init_constant(5.0));
  (void)unused;
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, c->kind);
  o.learning_rate = c->lr;
  o.nesterov = c->nesterov;
  o.use_locking = c->use_locking;
  FloeNode *train = floe_minimize(m.g, "opt", m.loss, &o, NULL, 0);
  ck_assert_msg(train != NULL, "%s: %s", c->what, floe_graph_error(m.g, NULL));
  floe_variables_initializer(m.g, NULL);
  FloeSession *s = harness_session(m.g, NULL);
  floe_graph_free(m.g);
  harness_run_target(s, "init");
  double first = fetch_scalar(s, NULL, 0, "loss");
  for (int i = 0; i < c->steps; i++) harness_run_target(s, "opt");
  double last = fetch_scalar(s, NULL, 0, "loss");
  ck_assert_msg(last < first / 100, "%s: loss %g -> %g after %d steps", c->what, first, last,
                c->steps);
  ck_assert_double_eq(fetch_scalar(s, NULL, 0, "global_step/read"), (double)c->steps);
  ck_assert_double_eq(fetch_scalar(s, NULL, 0, "unused/read"), 5.0);
  floe_session_free(s);
}
END_TEST

/* Explicit variables: only those are updated; the step counts once per run. */
START_TEST(test_explicit_vars_and_step) {
  LsModel m = ls_model(FLOE_F32);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.2;
  FloeNode *train = floe_minimize(m.g, NULL, m.loss, &o, &m.w, 1);
  ck_assert_msg(train != NULL, "%s", floe_graph_error(m.g, NULL));
  floe_variables_initializer(m.g, "init_all");
  FloeSession *s = harness_session(m.g, NULL);
  floe_graph_free(m.g);
  harness_run_target(s, "init_all");
  ck_assert_double_eq(fetch_scalar(s, NULL, 0, "global_step/read"), 0.0);
  for (int i = 1; i <= 7; i++) {
    harness_run_target(s, "train");
    ck_assert_double_eq(fetch_scalar(s, NULL, 0, "global_step/read"), (double)i);
  }
  ck_assert_double_eq(fetch_scalar(s, NULL, 0, "b/read"), 0.0);
  FloeTensor *w = harness_fetch(s, NULL, 0, "w/read");
  double moved = 0;
  for (int i = 0; i < LS_D; i++) moved += fabs(harness_get(w, i));
  ck_assert_msg(moved > 0.1, "w did not move (%g)", moved);
  floe_tensor_release(w);
  floe_session_free(s);
}
END_TEST

/* Two optimisers of one step, the second with its own rate and increment_global_step 0:
 * both variables move, and the step counts once per run. */
START_TEST(test_second_optimizer_does_not_count) {
  LsModel m = ls_model(FLOE_F32);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.2;
  FloeNode *first = floe_minimize(m.g, "train_w", m.loss, &o, &m.w, 1);
  o.learning_rate = 0.05;
  o.increment_global_step = 0;
  FloeNode *second = floe_minimize(m.g, "train_b", m.loss, &o, &m.b, 1);
  ck_assert_msg(first && second, "%s", floe_graph_error(m.g, NULL));
  FloeNodeBuilder *nb = floe_node_begin(m.g, "NoOp", "train");
  floe_node_add_control_input(nb, first);
  floe_node_add_control_input(nb, second);
  floe_node_finish(nb);
  floe_variables_initializer(m.g, "init_all");
  FloeSession *s = harness_session(m.g, NULL);
  floe_graph_free(m.g);
  harness_run_target(s, "init_all");
  for (int i = 1; i <= 3; i++) {
    harness_run_target(s, "train");
    ck_assert_double_eq(fetch_scalar(s, NULL, 0, "global_step/read"), (double)i);
  }
  ck_assert_msg(fabs(fetch_scalar(s, NULL, 0, "b/read")) > 1e-6, "b did not move");
  floe_session_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Slots. */

static int has_var(const FloeVariable *vs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(floe_node_name(vs[i].handle.node), name) == 0) return 1;
  return 0;
}

START_TEST(test_slots) {
  static const struct {
    FloeOptimizerKind kind;
    const char *slots[2];
    double init;
  } cases[] = {
      {FLOE_OPT_SGD, {NULL, NULL}, 0},
      {FLOE_OPT_MOMENTUM, {"momentum", NULL}, 0},
      {FLOE_OPT_ADAM, {"m", "v"}, 0},
      {FLOE_OPT_RMSPROP, {"rms", "mom"}, 0},
      {FLOE_OPT_ADAGRAD, {"accumulator", NULL}, 0.1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    LsModel m = ls_model(FLOE_F32);
    FloeOptimizerOptions o;
    floe_optimizer_options_init(&o, cases[c].kind);
    ck_assert_ptr_nonnull(floe_minimize(m.g, NULL, m.loss, &o, NULL, 0));
    FloeVariable vs[32];
    int n_all = floe_graph_variables(m.g, 0, vs, 32);
    int n_slots = (cases[c].slots[0] != NULL) + (cases[c].slots[1] != NULL);
    /* w, b, global_step and each slot of w and b */
    ck_assert_int_eq(n_all, 3 + 2 * n_slots);
    ck_assert(has_var(vs, n_all, "global_step"));
    char name[64];
    for (int k = 0; k < n_slots; k++) {
      snprintf(name, sizeof name, "w/%s", cases[c].slots[k]);
      ck_assert_msg(has_var(vs, n_all, name), "no slot %s", name);
      snprintf(name, sizeof name, "b/%s", cases[c].slots[k]);
      ck_assert_msg(has_var(vs, n_all, name), "no slot %s", name);
    }
    FloeVariable tv[32];
    int n_tr = floe_graph_variables(m.g, 1, tv, 32);
    ck_assert_int_eq(n_tr, 2);
    ck_assert(has_var(tv, n_tr, "w") && has_var(tv, n_tr, "b"));

    /* The initializer covers the slots: set them to garbage-free known values. */
    floe_variables_initializer(m.g, NULL);
    FloeSession *s = harness_session(m.g, NULL);
    floe_graph_free(m.g);
    harness_run_target(s, "init");
    for (int k = 0; k < n_slots; k++) {
      snprintf(name, sizeof name, "w/%s/read", cases[c].slots[k]);
      FloeTensor *t = harness_fetch(s, NULL, 0, name);
      ck_assert_int_eq(floe_tensor_num_elements(t), LS_D);
      ck_assert_int_eq(floe_tensor_dtype(t), FLOE_F32);
      for (int i = 0; i < LS_D; i++)
        ck_assert_msg(fabs(harness_get(t, i) - cases[c].init) < 1e-7, "%s[%d] = %g", name, i,
                      harness_get(t, i));
      floe_tensor_release(t);
    }
    /* And training from there works (every slot initialised). */
    harness_run_target(s, "train");
    floe_session_free(s);
  }
}
END_TEST

/* True when `from` is reached from `to` going up its data and control inputs. */
static int is_ancestor(FloeGraph *g, FloeNode *from, FloeNode *to) {
  int n = floe_graph_num_nodes(g), top = 0, found = 0;
  char *seen = calloc((size_t)n, 1);
  FloeNode **stack = malloc((size_t)n * sizeof *stack);
  ck_assert(seen && stack);
  stack[top++] = to;
  while (top > 0 && !found) {
    FloeNode *x = stack[--top];
    int ni = floe_node_num_inputs(x), nc = floe_node_num_control_inputs(x);
    for (int k = 0; k < ni + nc; k++) {
      FloeNode *y = k < ni ? floe_node_input(x, k).node : floe_node_control_input(x, k - ni);
      int id = -1;
      for (int q = 0; q < n; q++)
        if (floe_graph_node(g, q) == y) id = q;
      if (y == from) found = 1;
      if (id >= 0 && !seen[id]) {
        seen[id] = 1;
        stack[top++] = y;
      }
    }
  }
  free(seen);
  free(stack);
  return found;
}

/* The update of a variable runs after every read of it and every node fed by such a read
 * (so every gradient, the loss and the weight decay see the values from before the step);
 * without clipping (which ties every gradient to every other through the global norm) it
 * need not wait for other variables' gradients: b's update does not wait for w's
 * gradient. The step's increment comes after every update, and the returned NoOp after the
 * increment. */
START_TEST(test_ordering) {
  for (int clip = 0; clip < 2; clip++) {
    LsModel m = ls_model(FLOE_F32);
    FloeOptimizerOptions o;
    floe_optimizer_options_init(&o, FLOE_OPT_ADAM);
    o.clip_global_norm = clip ? 1.0 : 0;
    o.weight_decay = 0.01;
    FloeNode *train = floe_minimize(m.g, NULL, m.loss, &o, NULL, 0);
    ck_assert_ptr_nonnull(train);
    FloeNode *updates[8];
    int nu = 0;
    for (int i = 0; i < floe_graph_num_nodes(m.g); i++) {
      FloeNode *n = floe_graph_node(m.g, i);
      if (strcmp(floe_node_op(n), "ResourceApplyAdam") == 0) updates[nu++] = n;
    }
    ck_assert_int_eq(nu, 2);
    for (int u = 0; u < nu; u++) {
      ck_assert_int_eq(floe_node_num_inputs(updates[u]), 10);
      FloeNode *handle = floe_node_input(updates[u], 0).node;
      int checked = 0;
      for (int i = 0; i < floe_graph_num_nodes(m.g); i++) {
        FloeNode *x = floe_graph_node(m.g, i);
        int reads = !strcmp(floe_node_op(x), "ReadVariableOp") &&
                    floe_node_input(x, 0).node == handle;
        for (int k = 0; k < floe_node_num_inputs(x) && !reads; k++) {
          FloeNode *in = floe_node_input(x, k).node;
          reads = !strcmp(floe_node_op(in), "ReadVariableOp") &&
                  floe_node_input(in, 0).node == handle;
        }
        if (!reads || x == updates[u]) continue;
        ck_assert_msg(is_ancestor(m.g, x, updates[u]), "%s does not wait for %s",
                      floe_node_name(updates[u]), floe_node_name(x));
        checked++;
      }
      ck_assert_int_ge(checked, 3); /* the read, the forward use, the weight decay */
    }
    FloeNode *uw = strstr(floe_node_name(updates[0]), "/w") ? updates[0] : updates[1];
    FloeNode *ub = uw == updates[0] ? updates[1] : updates[0];
    FloeNode *grad_w = floe_node_input(uw, 9).node;
    if (clip) grad_w = floe_node_input(grad_w, 0).node; /* before the scaling: in the norm */
    ck_assert_int_eq(is_ancestor(m.g, grad_w, ub), clip);
    ck_assert_int_eq(floe_node_num_control_inputs(train), 1);
    FloeNode *inc = floe_node_control_input(train, 0);
    ck_assert_str_eq(floe_node_op(inc), "AssignAddVariableOp");
    ck_assert_str_eq(floe_node_name(floe_node_input(inc, 0).node), "global_step");
    for (int u = 0; u < nu; u++) {
      int dep = 0;
      for (int k = 0; k < floe_node_num_control_inputs(inc); k++)
        dep |= floe_node_control_input(inc, k) == updates[u];
      ck_assert_msg(dep, "the step's increment does not wait for %s",
                    floe_node_name(updates[u]));
    }
    floe_graph_free(m.g);
  }
}
END_TEST

/* loss = w1 * w2: w2's gradient reads w1 (and w1's reads w2), so each update must wait for
 * the other variable's gradient too, and one SGD step uses the values from before it:
 * w1' = w1 - lr * w2, w2' = w2 - lr * w1, run after run. */
START_TEST(test_ordering_cross_reads) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w1 = floe_variable(g, "w1", FLOE_F64, floe_shape_scalar(), floe_init_constant(2.0));
  FloeVariable w2 = floe_variable(g, "w2", FLOE_F64, floe_shape_scalar(), floe_init_constant(-3.0));
  FloeOutput loss = floe_binary(g, "Mul", "loss", w1.value, w2.value);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.25;
  ck_assert_ptr_nonnull(floe_minimize(g, NULL, loss, &o, NULL, 0));
  FloeNode *u1 = NULL, *u2 = NULL;
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    if (strcmp(floe_node_op(n), "ResourceApplyGradientDescent") != 0) continue;
    if (floe_node_input(n, 0).node == w1.handle.node) u1 = n;
    else u2 = n;
  }
  ck_assert(u1 && u2);
  /* Each gradient is the other variable's read, scaled by the loss's gradient. */
  ck_assert(is_ancestor(g, floe_node_input(u2, 2).node, u1));
  ck_assert(is_ancestor(g, floe_node_input(u1, 2).node, u2));
  floe_variables_initializer(g, NULL);
  char r1[64], r2[64];
  snprintf(r1, sizeof r1, "%s", floe_node_name(w1.value.node));
  snprintf(r2, sizeof r2, "%s", floe_node_name(w2.value.node));
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  harness_run_target(s, "init");
  double a = 2.0, b = -3.0;
  for (int step = 0; step < 20; step++) {
    harness_run_target(s, "train");
    double na = a - 0.25 * b, nb = b - 0.25 * a;
    a = na;
    b = nb;
    ck_assert_double_eq_tol(fetch_scalar(s, NULL, 0, r1), a, 1e-12 * fabs(a));
    ck_assert_double_eq_tol(fetch_scalar(s, NULL, 0, r2), b, 1e-12 * fabs(b));
  }
  floe_session_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Adam's first two steps on loss = 0.5 * w^2 (gradient w), against the formulas written
 * out here; lr 0.1 so step 1 moves w from 1 to about 0.9 (Adam's first step is lr). */

START_TEST(test_adam_two_steps) {
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    FloeGraph *g = floe_graph_new();
    FloeVariable w = floe_variable(g, "w", FLOE_F64, floe_shape_scalar(), floe_init_constant(1.0));
    FloeTensor *half = harness_from_doubles(FLOE_F64, 0, NULL, (const double[]){0.5});
    FloeOutput loss = floe_binary(g, "Mul", "loss", floe_unary(g, "Square", "sq", w.value),
                                  const_tensor(g, "half", half));
    FloeOptimizerOptions o;
    floe_optimizer_options_init(&o, FLOE_OPT_ADAM);
    o.learning_rate = 0.1;
    o.nesterov = nesterov;
    ck_assert_ptr_nonnull(floe_minimize(g, NULL, loss, &o, NULL, 0));
    floe_variables_initializer(g, NULL);
    FloeSession *s = harness_session(g, NULL);
    floe_graph_free(g);
    harness_run_target(s, "init");

    const double lr = (float)0.1, b1 = 0.9, b2 = 0.999, eps = 1e-7;
    double x = 1.0, m = 0, v = 0;
    for (int t = 1; t <= 2; t++) {
      double grad = x;
      m = b1 * m + (1 - b1) * grad;
      v = b2 * v + (1 - b2) * grad * grad;
      double lr_t = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
      double dir = nesterov ? b1 * m + (1 - b1) * grad : m;
      x -= lr_t * dir / (sqrt(v) + eps);
      harness_run_target(s, "train");
      double got = fetch_scalar(s, NULL, 0, "w/read");
      ck_assert_msg(fabs(got - x) <= 1e-12, "nesterov %d step %d: w %.15g, want %.15g",
                    nesterov, t, got, x);
      ck_assert_msg(fabs(fetch_scalar(s, NULL, 0, "w/m/read") - m) <= 1e-12, "m at step %d", t);
      ck_assert_msg(fabs(fetch_scalar(s, NULL, 0, "w/v/read") - v) <= 1e-12, "v at step %d", t);
      if (t == 1 && !nesterov) /* by hand: m = 0.1, v = 0.001, lr_t = 0.1 sqrt(0.001) / 0.1 */
        ck_assert_msg(fabs(got - 0.9) < 1e-5, "first step: %.9g", got);
    }
    floe_session_free(s);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Errors. */

START_TEST(test_minimize_errors) {
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);

  /* No variables at all. */
  FloeGraph *g = floe_graph_new();
  FloeOutput c = floe_const_f32(g, "c", 1.0f);
  ck_assert_ptr_null(floe_minimize(g, NULL, c, &o, NULL, 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert(strstr(floe_graph_error(g, NULL), "trainable"));
  floe_graph_free(g);

  /* A loss that depends on none of them. */
  g = floe_graph_new();
  floe_variable(g, "w", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  c = floe_const_f32(g, "c", 1.0f);
  ck_assert_ptr_null(floe_minimize(g, NULL, c, &o, NULL, 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "depends on none"), "%s",
                floe_graph_error(g, NULL));
  floe_graph_free(g);

  /* Bad options. */
  static const struct {
    const char *field;
    int which;
  } bad[] = {{"NULL", 0}, {"kind", 1}, {"clip_global_norm", 2}, {"weight_decay", 3},
             {"beta1", 4}, {"decay_steps", 5}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    g = floe_graph_new();
    FloeVariable w = floe_variable(g, "w", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
    FloeOutput loss = floe_unary(g, "Square", "loss", w.value);
    floe_optimizer_options_init(&o, FLOE_OPT_ADAM);
    switch (bad[i].which) {
      case 1: o.kind = (FloeOptimizerKind)9; break;
      case 2: o.clip_global_norm = -1; break;
      case 3: o.weight_decay = -0.5; break;
      case 4: o.beta1 = 1.0; break;
      case 5: o.schedule = FLOE_LR_COSINE; break;
      default: break;
    }
    ck_assert_ptr_null(floe_minimize(g, NULL, loss, bad[i].which ? &o : NULL, NULL, 0));
    ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
    ck_assert_msg(strstr(floe_graph_error(g, NULL), bad[i].field), "'%s' lacks '%s'",
                  floe_graph_error(g, NULL), bad[i].field);
    floe_graph_free(g);
  }

  /* A sticky error already there: a no-op. */
  g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  FloeOutput loss = floe_unary(g, "Square", "loss", w.value);
  floe_unary(g, "NoSuchOp", "bad", loss);
  int before = floe_graph_num_nodes(g);
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  ck_assert_ptr_null(floe_minimize(g, NULL, loss, &o, NULL, 0));
  ck_assert_int_eq(floe_graph_num_nodes(g), before);
  floe_graph_free(g);
}
END_TEST

static Suite *optimizer_suite(void) {
  Suite *s = suite_create("optimizer");
  TCase *tc = tcase_create("api");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_schedules);
  tcase_add_test(tc, test_schedule_errors);
  tcase_add_test(tc, test_global_norm);
  tcase_add_test(tc, test_minimize_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("training");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_clip_and_weight_decay);
  tcase_add_loop_test(tc, test_converges, 0, (int)(sizeof train_cases / sizeof train_cases[0]));
  tcase_add_test(tc, test_explicit_vars_and_step);
  tcase_add_test(tc, test_second_optimizer_does_not_count);
  tcase_add_test(tc, test_slots);
  tcase_add_test(tc, test_ordering);
  tcase_add_test(tc, test_ordering_cross_reads);
  tcase_add_test(tc, test_adam_two_steps);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(optimizer_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
