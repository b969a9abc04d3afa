/* SPDX-License-Identifier: Apache-2.0 */
/* test_optimizers.c - the fused optimiser kernels (ResourceApply*) and AssignAdd /
 * AssignSubVariableOp of the CPU plugin, run on real variables over several steps and
 * compared after every step with double-precision references of the formulas (written
 * here in ops_std.def's form); f32 and f64, Nesterov variants, use_locking on and off,
 * variables large enough to be split over the pool, denormals flushed, and mismatched
 * shapes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ------------------------------------------------------------------------------------ */
/* References: one step on doubles. s[] holds the op's scalar inputs in op order. */

enum { K_SGD, K_MOMENTUM, K_ADAM, K_RMSPROP, K_ADAGRAD, NUM_KINDS };

typedef struct Kind {
  const char *op;
  const char *roles;  /* per input: r resource, s scalar, g gradient (as in the op) */
  int has_nesterov;
} Kind;

static const Kind kinds[NUM_KINDS] = {
    [K_SGD] = {"ResourceApplyGradientDescent", "rsg", 0},
    [K_MOMENTUM] = {"ResourceApplyMomentum", "rrsgs", 1},
    [K_ADAM] = {"ResourceApplyAdam", "rrrssssssg", 1},
    [K_RMSPROP] = {"ResourceApplyRMSProp", "rrrssssg", 0},
    [K_ADAGRAD] = {"ResourceApplyAdagrad", "rrssg", 0},
};

static void ref_step(int kind, int nesterov, int64_t n, double *var, double *s1, double *s2,
                     const double *g, const double *s) {
  for (int64_t i = 0; i < n; i++) {
    switch (kind) {
      case K_SGD: var[i] -= s[0] * g[i]; break; /* alpha */
      case K_MOMENTUM: {                        /* lr, momentum */
        double lr = s[0], mom = s[1];
        s1[i] = s1[i] * mom + g[i];
        var[i] -= lr * (nesterov ? g[i] + mom * s1[i] : s1[i]);
        break;
      }
      case K_ADAM: { /* beta1_power, beta2_power, lr, beta1, beta2, epsilon */
        double b1p = s[0], b2p = s[1], lr = s[2], b1 = s[3], b2 = s[4], eps = s[5];
        double lr_t = lr * sqrt(1 - b2p) / (1 - b1p);
        s1[i] = b1 * s1[i] + (1 - b1) * g[i];
        s2[i] = b2 * s2[i] + (1 - b2) * g[i] * g[i];
        double m = nesterov ? b1 * s1[i] + (1 - b1) * g[i] : s1[i];
        var[i] -= lr_t * m / (sqrt(s2[i]) + eps);
        break;
      }
      case K_RMSPROP: { /* lr, rho, momentum, epsilon */
        double lr = s[0], rho = s[1], mom = s[2], eps = s[3];
        s1[i] = rho * s1[i] + (1 - rho) * g[i] * g[i];
        s2[i] = mom * s2[i] + lr * g[i] / sqrt(s1[i] + eps);
        var[i] -= s2[i];
        break;
      }
      case K_ADAGRAD: { /* lr, epsilon */
        double lr = s[0], eps = s[1];
        s1[i] += g[i] * g[i];
        var[i] -= lr * g[i] / (sqrt(s1[i]) + eps);
        break;
      }
      default: ck_abort_msg("bad kind");
    }
  }
}

/* The scalars of step t (1-based), in op order. */
static int step_scalars(int kind, int t, double *s) {
  switch (kind) {
    case K_SGD: s[0] = 0.1 / t; return 1;
    case K_MOMENTUM: s[0] = 0.05; s[1] = 0.9; return 2;
    case K_ADAM:
      s[0] = pow(0.9, t); s[1] = pow(0.999, t); s[2] = 0.01;
      s[3] = 0.9; s[4] = 0.999; s[5] = 1e-7;
      return 6;
    case K_RMSPROP: s[0] = 0.01; s[1] = 0.9; s[2] = 0.5; s[3] = 1e-6; return 4;
    case K_ADAGRAD: s[0] = 0.1; s[1] = 1e-7; return 2;
    default: ck_abort_msg("bad kind"); return 0;
  }
}

/* ------------------------------------------------------------------------------------ */
/* Several steps of one optimiser against the reference. */

typedef struct Case {
  int kind;
  FloeDType dt;
  int nesterov;
  int use_locking;
  int rank;
  int64_t dims[2];
  int steps;
} Case;

static void run_case(const Case *c) {
  const Kind *k = &kinds[c->kind];
  int nin = (int)strlen(k->roles);
  int64_t n = harness_count(c->rank, c->dims);
  FloeGraph *g = floe_graph_new();
  FloeOutput ins[10];
  int nres = 0;
  char name[32];
  for (int i = 0; i < nin; i++) {
    snprintf(name, sizeof name, "in%d", i);
    if (k->roles[i] == 'r') {
      snprintf(name, sizeof name, "var%d", nres++);
      ins[i] = harness_variable(g, name, c->dt, c->rank, c->dims);
    } else if (k->roles[i] == 's') {
      ins[i] = floe_placeholder(g, name, c->dt, floe_shape_scalar());
    } else {
      ins[i] = floe_placeholder(g, name, c->dt, floe_shape_make(c->rank, c->dims));
    }
  }
  FloeNodeBuilder *b = floe_node_begin(g, k->op, "update");
  for (int i = 0; i < nin; i++) floe_node_add_input(b, ins[i]);
  floe_node_set_attr_bool(b, "use_locking", c->use_locking);
  if (k->has_nesterov) floe_node_set_attr_bool(b, "use_nesterov", c->nesterov);
  floe_node_finish(b);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);

  /* Initial values: var in [-1, 1); slots positive where a square root reads them. */
  double *ref[3] = {NULL, NULL, NULL};
  FloeTensor *init[3];
  FloeFeed feeds[10];
  const char *targets[3];
  char init_names[3][32], init_targets[3][32];
  for (int r = 0; r < nres; r++) {
    init[r] = harness_random(c->dt, c->rank, c->dims, 100 + (uint64_t)r, r ? 0.1 : -1.0, 1.0);
    ref[r] = harness_values(init[r]);
    snprintf(init_names[r], sizeof init_names[r], "var%d/init_value", r);
    snprintf(init_targets[r], sizeof init_targets[r], "var%d/init", r);
    feeds[r] = (FloeFeed){init_names[r], init[r]};
    targets[r] = init_targets[r];
  }
  harness_run(s, feeds, nres, NULL, 0, targets, nres, NULL, "init");
  for (int r = 0; r < nres; r++) floe_tensor_release(init[r]);

  char what[160], in_names[10][16], read_names[3][32];
  const char *reads[3];
  for (int r = 0; r < nres; r++) {
    snprintf(read_names[r], sizeof read_names[r], "var%d/read", r);
    reads[r] = read_names[r];
  }
  for (int t = 1; t <= c->steps; t++) {
    double sc[6];
    step_scalars(c->kind, t, sc);
    FloeTensor *fed[10] = {NULL};
    double *grad = NULL, scalars[6];
    int nf = 0, ns = 0;
    for (int i = 0; i < nin; i++) {
      if (k->roles[i] == 'r') continue;
      snprintf(in_names[i], sizeof in_names[i], "in%d", i);
      if (k->roles[i] == 's') {
        fed[i] = harness_from_doubles(c->dt, 0, NULL, &sc[ns]);
        scalars[ns++] = harness_get(fed[i], 0); /* rounded as fed */
      } else {
        fed[i] = harness_random(c->dt, c->rank, c->dims, 1000 + (uint64_t)t, -1.0, 1.0);
        grad = harness_values(fed[i]);
      }
      feeds[nf++] = (FloeFeed){in_names[i], fed[i]};
    }
    const char *upd = "update";
    harness_run(s, feeds, nf, NULL, 0, &upd, 1, NULL, k->op);
    ref_step(c->kind, c->nesterov, n, ref[0], ref[1], ref[2], grad, scalars);

    FloeTensor *got[3] = {NULL};
    harness_run(s, NULL, 0, reads, nres, NULL, 0, got, "read");
    for (int r = 0; r < nres; r++) {
      FloeTensor *want = harness_from_doubles(c->dt, c->rank, c->dims, ref[r]);
      snprintf(what, sizeof what, "%s %s nesterov=%d locking=%d n=%lld step %d, %s", k->op,
               floe_dtype_name(c->dt), c->nesterov, c->use_locking, (long long)n, t,
               r == 0 ? "var" : r == 1 ? "slot 1" : "slot 2");
      if (c->dt == FLOE_F64)
        harness_assert_close(got[r], want, 1e-12, 1e-13, what);
      else
        harness_assert_close(got[r], want, 2e-5, 2e-6, what);
      floe_tensor_release(want);
      floe_tensor_release(got[r]);
    }
    for (int i = 0; i < nin; i++) floe_tensor_release(fed[i]);
    free(grad);
  }
  for (int r = 0; r < nres; r++) free(ref[r]);
  floe_session_free(s);
}

/* Every kind x {f32, f64} x {nesterov off, on where it exists} x {locking on, off}. */
#define NUM_SMALL_CASES (NUM_KINDS * 2 * 2 * 2)

START_TEST(test_small) {
  int i = _i;
  Case c = {.kind = i % NUM_KINDS,
            .dt = (i / NUM_KINDS) % 2 ? FLOE_F64 : FLOE_F32,
            .nesterov = (i / (NUM_KINDS * 2)) % 2,
            .use_locking = (i / (NUM_KINDS * 4)) % 2 == 0,
            .rank = 2,
            .dims = {3, 5},
            .steps = 5};
  if (c.nesterov && !kinds[c.kind].has_nesterov) return;
  run_case(&c);
}
END_TEST

/* Big enough to be split over the pool; odd size so the last block is partial. */
START_TEST(test_large) {
  int i = _i;
  Case c = {.kind = i % NUM_KINDS,
            .dt = i / NUM_KINDS ? FLOE_F64 : FLOE_F32,
            .nesterov = kinds[i % NUM_KINDS].has_nesterov,
            .use_locking = 1,
            .rank = 2,
            .dims = {301, 257},
            .steps = 2};
  run_case(&c);
}
END_TEST

START_TEST(test_scalar_and_empty) {
  Case c = {.kind = K_ADAM, .dt = FLOE_F32, .rank = 0, .steps = 3, .use_locking = 1};
  run_case(&c);
  Case e = {.kind = K_RMSPROP, .dt = FLOE_F64, .rank = 1, .dims = {0}, .steps = 1,
            .use_locking = 1};
  run_case(&e);
}
END_TEST

/* Whether this machine honours MXCSR's FTZ/DAZ: x86 does, valgrind's emulated CPU ignores
 * them (so make check-valgrind cannot see a flush), and other architectures have no MXCSR. */
static int machine_flushes_denormals(void) {
#if defined(__x86_64__) || defined(__SSE2__)
  unsigned csr = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(csr | 0x8040u);
  volatile float tiny = 1e-38f;
  volatile float half = tiny * 0.5f;
  __builtin_ia32_ldmxcsr(csr);
  return half == 0.0f;
#else
  return 0;
#endif
}

/* Denormals are flushed to zero inside an update, as TensorFlow runs its kernels (FTZ and
 * DAZ): Adam's first moment of a weight whose gradient stays 0 shrinks by beta1 each step
 * into the denormal range, where every step would cost ~50x more. A denormal m reads as 0,
 * so m becomes 0 and var does not move; normal values update as the formula says; and the
 * calling thread's floating-point mode is back afterwards. */
START_TEST(test_adam_flushes_denormals) {
  const int64_t d4[1] = {4};
  FloeGraph *g = floe_graph_new();
  FloeOutput ins[10];
  static const char *const vars[3] = {"var0", "var1", "var2"};
  for (int i = 0; i < 3; i++) ins[i] = harness_variable(g, vars[i], FLOE_F32, 1, d4);
  char names[7][8];
  for (int i = 3; i < 10; i++) {
    snprintf(names[i - 3], sizeof names[i - 3], "in%d", i);
    ins[i] = floe_placeholder(g, names[i - 3], FLOE_F32,
                              i < 9 ? floe_shape_scalar() : floe_shape_make(1, d4));
  }
  FloeNodeBuilder *b = floe_node_begin(g, "ResourceApplyAdam", "update");
  for (int i = 0; i < 10; i++) floe_node_add_input(b, ins[i]);
  floe_node_finish(b);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);

  const float var0[4] = {1, 2, 3, 4}, m0[4] = {1e-39f, -1e-39f, 0.5f, 1e-40f};
  const float v0[4] = {0.25f, 0.25f, 0.25f, 0.25f}, grad[4] = {0, 0, 0, 0};
  const float *init[3] = {var0, m0, v0};
  FloeTensor *t[10];
  FloeFeed feeds[10];
  const char *targets[3];
  char iv[3][32], it[3][32];
  for (int r = 0; r < 3; r++) {
    t[r] = harness_f32(1, d4, init[r]);
    snprintf(iv[r], sizeof iv[r], "%s/init_value", vars[r]);
    snprintf(it[r], sizeof it[r], "%s/init", vars[r]);
    feeds[r] = (FloeFeed){iv[r], t[r]};
    targets[r] = it[r];
  }
  harness_run(s, feeds, 3, NULL, 0, targets, 3, NULL, "init");
  double sc[6];
  step_scalars(K_ADAM, 1, sc);
  for (int i = 0; i < 6; i++) {
    double v = (float)sc[i];
    t[3 + i] = harness_from_doubles(FLOE_F32, 0, NULL, &v);
    sc[i] = v; /* as fed */
  }
  t[9] = harness_f32(1, d4, grad);
  for (int i = 3; i < 10; i++) feeds[i - 3] = (FloeFeed){names[i - 3], t[i]};
  const char *upd = "update";
  harness_run(s, feeds, 7, NULL, 0, &upd, 1, NULL, "update");
  const char *reads[3] = {"var0/read", "var1/read", "var2/read"};
  FloeTensor *got[3];
  harness_run(s, NULL, 0, reads, 3, NULL, 0, got, "read");
  const float *var = floe_tensor_data(got[0]), *m = floe_tensor_data(got[1]);
  for (int i = 0; machine_flushes_denormals() && i < 4; i++) {
    if (i == 2) continue;
    ck_assert_msg(m[i] == 0.0f, "m[%d] = %g: the denormal was not flushed", i, m[i]);
    ck_assert_msg(var[i] == var0[i], "var[%d] moved to %.9g with m = 0", i, var[i]);
  }
  double rv[4], rm[4], rvv[4], rg[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; i++) rv[i] = var0[i], rm[i] = m0[i], rvv[i] = v0[i];
  ref_step(K_ADAM, 0, 4, rv, rm, rvv, rg, sc);
  ck_assert_msg(fabs(m[2] - rm[2]) <= 2e-6 && fabs(var[2] - rv[2]) <= 2e-5 * fabs(rv[2]),
                "normal element: m %g var %.9g, want %g %.9g", m[2], var[2], rm[2], rv[2]);
  volatile float tiny = 1e-38f;
  volatile float half = tiny * 0.5f;
  ck_assert_msg(half != 0.0f, "the update left this thread flushing denormals");
  for (int i = 0; i < 3; i++) floe_tensor_release(got[i]);
  for (int i = 0; i < 10; i++) floe_tensor_release(t[i]);
  floe_session_free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Rejected inputs: each case names the shapes (or the scalar) in the error. */

/* Runs `op` with var and slots of var_dims / slot_dims, grad of grad_dims and scalars of
 * scalar_rank; returns the code and the message in msg. */
static floe_code run_shapes(int kind, const int64_t *var_dims, const int64_t *slot_dims,
                            int grad_rank, const int64_t *grad_dims, int scalar_rank,
                            char *msg, size_t len) {
  const Kind *k = &kinds[kind];
  int nin = (int)strlen(k->roles), nres = 0;
  FloeGraph *g = floe_graph_new();
  FloeOutput ins[10];
  FloeTensor *fed[10] = {NULL};
  FloeFeed feeds[20];
  const char *targets[3];
  char names[10][32], inits[3][32], init_names[3][32];
  int nf = 0;
  int64_t one = 1;
  for (int i = 0; i < nin; i++) {
    if (k->roles[i] == 'r') {
      const int64_t *d = nres == 0 ? var_dims : slot_dims;
      snprintf(names[i], sizeof names[i], "var%d", nres);
      ins[i] = harness_variable(g, names[i], FLOE_F32, 1, d);
      snprintf(init_names[nres], sizeof init_names[nres], "var%d/init_value", nres);
      snprintf(inits[nres], sizeof inits[nres], "var%d/init", nres);
      feeds[nf++] = (FloeFeed){init_names[nres], fed[i] = harness_random(FLOE_F32, 1, d, 7, 0.1, 1)};
      targets[nres] = inits[nres];
      nres++;
      continue;
    }
    snprintf(names[i], sizeof names[i], "in%d", i);
    if (k->roles[i] == 's')
      fed[i] = harness_random(FLOE_F32, scalar_rank, &one, 3, 0.1, 0.5);
    else
      fed[i] = harness_random(FLOE_F32, grad_rank, grad_dims, 5, -1, 1);
    ins[i] = floe_placeholder(g, names[i], FLOE_F32, floe_tensor_shape(fed[i]));
    feeds[nf++] = (FloeFeed){names[i], fed[i]};
  }
  FloeNodeBuilder *b = floe_node_begin(g, k->op, "update");
  for (int i = 0; i < nin; i++) floe_node_add_input(b, ins[i]);
  floe_node_finish(b);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  /* The init feeds come first in feeds; the update needs the others. */
  harness_run(s, feeds, nres, NULL, 0, targets, nres, NULL, "init");
  FloeStatus *st = floe_status_new();
  const char *upd = "update";
  floe_code rc = floe_session_run(s, feeds + nres, nf - nres, NULL, 0, &upd, 1, NULL, st);
  snprintf(msg, len, "%s", floe_status_message(st));
  floe_status_free(st);
  floe_session_free(s);
  for (int i = 0; i < nin; i++) floe_tensor_release(fed[i]);
  return rc;
}

START_TEST(test_shape_mismatch) {
  char msg[512];
  int64_t four = 4, five = 5;
  for (int kind = 0; kind < NUM_KINDS; kind++) {
    /* grad [5] for var [4] */
    floe_code rc = run_shapes(kind, &four, &four, 1, &five, 0, msg, sizeof msg);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s grad: %s", kinds[kind].op, msg);
    ck_assert_msg(strstr(msg, "[4]") && strstr(msg, "[5]"), "%s: message '%s'",
                  kinds[kind].op, msg);
    /* a scalar fed as [1] */
    rc = run_shapes(kind, &four, &four, 1, &four, 1, msg, sizeof msg);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s scalar: %s", kinds[kind].op, msg);
    ck_assert_msg(strstr(msg, "scalar") != NULL, "%s: message '%s'", kinds[kind].op, msg);
    if (kind == K_SGD) continue;
    /* a slot [5] for var [4] */
    rc = run_shapes(kind, &four, &five, 1, &four, 0, msg, sizeof msg);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s slot: %s", kinds[kind].op, msg);
    ck_assert_msg(strstr(msg, "[4]") && strstr(msg, "[5]"), "%s: message '%s'",
                  kinds[kind].op, msg);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* AssignAddVariableOp / AssignSubVariableOp. */

static void assign_case(FloeDType dt, int sub, int rank, const int64_t *dims, double lo,
                        double hi) {
  const char *op = sub ? "AssignSubVariableOp" : "AssignAddVariableOp";
  FloeGraph *g = floe_graph_new();
  FloeOutput h = harness_variable(g, "var", dt, rank, dims);
  FloeOutput v = floe_placeholder(g, "value", dt, floe_shape_make(rank, dims));
  FloeNodeBuilder *b = floe_node_begin(g, op, "update");
  floe_node_add_input(b, h);
  floe_node_add_input(b, v);
  floe_node_finish(b);
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);

  FloeTensor *init = harness_random(dt, rank, dims, 11, lo, hi);
  double *ref = harness_values(init);
  const char *init_target = "var/init", *upd = "update", *read = "var/read";
  harness_run(s, &(FloeFeed){"var/init_value", init}, 1, NULL, 0, &init_target, 1, NULL, "init");
  int64_t n = harness_count(rank, dims);
  int is_f = dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
  for (int t = 0; t < 3; t++) {
    FloeTensor *val = harness_random(dt, rank, dims, 20 + (uint64_t)t, lo, hi);
    double *vv = harness_values(val);
    harness_run(s, &(FloeFeed){"value", val}, 1, NULL, 0, &upd, 1, NULL, op);
    /* The reference wraps (integers) or rounds (floats) each step like the variable. */
    for (int64_t i = 0; i < n; i++) {
      double r = sub ? ref[i] - vv[i] : ref[i] + vv[i];
      int64_t w = (int64_t)r;
      switch (dt) {
        case FLOE_I8: r = (int8_t)(uint8_t)w; break;
        case FLOE_U8: r = (uint8_t)w; break;
        case FLOE_I32: r = (int32_t)(uint32_t)w; break;
        default: break;
      }
      ref[i] = r;
    }
    FloeTensor *want = harness_from_doubles(dt, rank, dims, ref);
    if (is_f)
      for (int64_t i = 0; i < n; i++) ref[i] = harness_get(want, i);
    FloeTensor *got = NULL;
    harness_run(s, NULL, 0, &read, 1, NULL, 0, &got, "read");
    char what[96];
    snprintf(what, sizeof what, "%s %s step %d", op, floe_dtype_name(dt), t);
    harness_assert_close(got, want, dt == FLOE_F64 ? 1e-15 : 1e-6, 0, what);
    floe_tensor_release(got);
    floe_tensor_release(want);
    floe_tensor_release(val);
    free(vv);
  }
  free(ref);
  floe_tensor_release(init);
  floe_session_free(s);
}

START_TEST(test_assign_add_sub) {
  const int64_t small[2] = {3, 7}, big[1] = {50001};
  static const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                  FLOE_I8,  FLOE_U8,  FLOE_I32, FLOE_I64};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    FloeDType dt = dts[i];
    /* Integers near the top of their range so sums wrap. */
    double lo = dt == FLOE_I8 ? -128 : dt == FLOE_U8 ? 0 : dt == FLOE_I32 ? -2.1e9 : -1000;
    double hi = dt == FLOE_I8 ? 128 : dt == FLOE_U8 ? 256 : dt == FLOE_I32 ? 2.1e9 : 1000;
    if (dt == FLOE_I64) lo = -1e15, hi = 1e15;
    for (int sub = 0; sub < 2; sub++) {
      assign_case(dt, sub, 2, small, lo, hi);
      assign_case(dt, sub, 0, NULL, lo, hi);
    }
  }
  assign_case(FLOE_F32, 0, 1, big, -1, 1);
  assign_case(FLOE_F64, 1, 1, big, -1, 1);
  assign_case(FLOE_F16, 0, 1, big, -1, 1);
}
END_TEST

START_TEST(test_assign_shape_mismatch) {
  for (int sub = 0; sub < 2; sub++) {
    FloeGraph *g = floe_graph_new();
    int64_t d3 = 3, d4 = 4;
    FloeOutput h = harness_variable(g, "var", FLOE_F32, 1, &d3);
    FloeOutput v = floe_placeholder(g, "value", FLOE_F32, floe_shape_make(1, &d4));
    FloeNodeBuilder *b = floe_node_begin(g, sub ? "AssignSubVariableOp" : "AssignAddVariableOp",
                                         "update");
    floe_node_add_input(b, h);
    floe_node_add_input(b, v);
    floe_node_finish(b);
    FloeSession *s = harness_session(g, NULL);
    floe_graph_free(g);
    FloeTensor *init = harness_random(FLOE_F32, 1, &d3, 1, 0, 1);
    FloeTensor *val = harness_random(FLOE_F32, 1, &d4, 2, 0, 1);
    const char *init_target = "var/init", *upd = "update", *read = "var/read";
    harness_run(s, &(FloeFeed){"var/init_value", init}, 1, NULL, 0, &init_target, 1, NULL, "init");
    FloeStatus *st = floe_status_new();
    floe_code rc = floe_session_run(s, &(FloeFeed){"value", val}, 1, NULL, 0, &upd, 1, NULL, st);
    ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
    ck_assert_msg(strstr(floe_status_message(st), "[3]") &&
                      strstr(floe_status_message(st), "[4]"),
                  "message '%s'", floe_status_message(st));
    floe_status_free(st);
    /* The failed update left the variable alone. */
    FloeTensor *got = NULL;
    harness_run(s, NULL, 0, &read, 1, NULL, 0, &got, "read");
    harness_assert_close(got, init, 0, 0, "unchanged after a failed update");
    floe_tensor_release(got);
    floe_tensor_release(init);
    floe_tensor_release(val);
    floe_session_free(s);
  }
}
END_TEST

static Suite *optimizers_suite(void) {
  Suite *s = suite_create("optimizers");
  TCase *tc = tcase_create("updates");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_small, 0, NUM_SMALL_CASES);
  tcase_add_loop_test(tc, test_large, 0, NUM_KINDS * 2);
  tcase_add_test(tc, test_scalar_and_empty);
  tcase_add_test(tc, test_adam_flushes_denormals);
  suite_add_tcase(s, tc);

  tc = tcase_create("assign");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_assign_add_sub);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_shape_mismatch);
  tcase_add_test(tc, test_assign_shape_mismatch);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(optimizers_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
