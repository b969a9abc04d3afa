/* SPDX-License-Identifier: Apache-2.0 */
/* test_candidate_sampler.c - LogUniformCandidateSampler.
 *
 * A reference written here from TensorFlow's description (LogUniformSampler: draw
 * floor(exp(u log(R + 1))) - 1; unique: draw until K distinct ids; expected count of an id
 * of probability p after T draws: p K when T == K, else 1 - (1 - p)^T) on the Philox stream
 * of f64 RandomUniform (checked against that op here, so the layout is not assumed) gives
 * the ids and counts value by value; then the ids' range and uniqueness, a chi-square test
 * of the frequencies against the log-uniform law (which the usual wrong formulas fail), and
 * the errors of bad attributes and bad true classes. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---------------------------------------------------------------------------------- */
/* Running the op. */

typedef struct Sampler {
  int64_t num_true, num_sampled, range_max, seed, seed2;
  bool unique;
  FloeDType classes_dt;
} Sampler;

/* A graph holding "cls" (a placeholder of cfg's dtype, [?, num_true]) and "samp"; the
 * graph's sticky error is left for the caller. */
static FloeGraph *sampler_graph(const Sampler *cfg, FloeShape cls_shape) {
  FloeGraph *g = floe_graph_new();
  FloeOutput cls = floe_placeholder(g, "cls", cfg->classes_dt, cls_shape);
  FloeNodeBuilder *b = floe_node_begin(g, "LogUniformCandidateSampler", "samp");
  floe_node_add_input(b, cls);
  floe_node_set_attr_int(b, "num_true", cfg->num_true);
  floe_node_set_attr_int(b, "num_sampled", cfg->num_sampled);
  floe_node_set_attr_int(b, "range_max", cfg->range_max);
  floe_node_set_attr_bool(b, "unique", cfg->unique);
  floe_node_set_attr_int(b, "seed", cfg->seed);
  floe_node_set_attr_int(b, "seed2", cfg->seed2);
  floe_node_finish(b);
  return g;
}

static FloeSession *sampler_session(const Sampler *cfg) {
  const int64_t d[2] = {-1, cfg->num_true};
  FloeGraph *g = sampler_graph(cfg, floe_shape_make(2, d));
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  return s;
}

/* A [batch, num_true] tensor of cfg's dtype holding v. */
static FloeTensor *classes(const Sampler *cfg, int64_t batch, const int64_t *v) {
  const int64_t d[2] = {batch, cfg->num_true};
  FloeTensor *t = harness_tensor(cfg->classes_dt, 2, d, NULL);
  for (int64_t i = 0; i < batch * cfg->num_true; i++) {
    if (cfg->classes_dt == FLOE_I32)
      ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
    else
      ((int64_t *)floe_tensor_data(t))[i] = v[i];
  }
  return t;
}

/* One run: out[0] ids, out[1] true counts, out[2] sampled counts (caller releases). Returns
 * the status code, the message in st. */
static floe_code run(FloeSession *s, FloeTensor *cls, FloeTensor *out[3], FloeStatus *st) {
  const char *fetch[3] = {"samp:0", "samp:1", "samp:2"};
  FloeFeed feed = {"cls", cls};
  return floe_session_run(s, &feed, 1, fetch, 3, NULL, 0, out, st);
}

static void run_ok(FloeSession *s, FloeTensor *cls, FloeTensor *out[3]) {
  FloeStatus *st = floe_status_new();
  floe_code rc = run(s, cls, out, st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
}

static void release3(FloeTensor *out[3]) {
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
}

/* ---------------------------------------------------------------------------------- */
/* Reference. */

/* Element j of call c of an f64 RandomUniform with these seeds (its own session). */
typedef struct Uniforms {
  FloeSession *s;
  FloeTensor *t; /* the current call's draws */
  int64_t n;
} Uniforms;

static Uniforms uniforms_new(int64_t seed, int64_t seed2, int64_t n) {
  FloeGraph *g = floe_graph_new();
  const int64_t one = 1;
  FloeTensor *shape = harness_i64(1, &one, &n);
  FloeNodeBuilder *b = floe_node_begin(g, "RandomUniform", "u");
  floe_node_add_input(b, floe_const(g, "shape", shape));
  floe_tensor_release(shape);
  floe_node_set_attr_type(b, "dtype", FLOE_F64);
  floe_node_set_attr_int(b, "seed", seed);
  floe_node_set_attr_int(b, "seed2", seed2);
  floe_node_finish(b);
  Uniforms u = {harness_session(g, NULL), NULL, n};
  floe_graph_free(g);
  return u;
}

/* The next call's draws. */
static void uniforms_next(Uniforms *u) {
  floe_tensor_release(u->t);
  FloeStatus *st = floe_status_new();
  const char *fetch = "u";
  ck_assert_msg(floe_session_run(u->s, NULL, 0, &fetch, 1, NULL, 0, &u->t, st) == FLOE_OK,
                "%s", floe_status_message(st));
  floe_status_free(st);
}

static void uniforms_free(Uniforms *u) {
  floe_tensor_release(u->t);
  floe_session_free(u->s);
}

static double log_uniform_p(int64_t v, int64_t range) {
  return (log((double)(v + 2)) - log((double)(v + 1))) / log((double)range + 1.0);
}

static double ref_count(double p, int64_t k, int64_t tries) {
  if (tries == k) return p * (double)k;
  return 1.0 - pow(1.0 - p, (double)tries); /* exact enough for the p used here */
}

/* TF's sample of one call from the uniforms of u; returns the number of draws. */
static int64_t ref_sample(const Sampler *cfg, const Uniforms *u, int64_t *ids) {
  const double *x = floe_tensor_data(u->t);
  double lr = log((double)cfg->range_max + 1.0);
  int64_t n = 0, t = 0;
  while (n < cfg->num_sampled) {
    ck_assert_msg(t < u->n, "the reference ran out of uniforms");
    int64_t v = ((int64_t)floor(exp(x[t++] * lr)) - 1) % cfg->range_max;
    bool dup = false;
    for (int64_t i = 0; cfg->unique && i < n && !dup; i++) dup = ids[i] == v;
    if (!dup) ids[n++] = v;
  }
  return t;
}

/* ---------------------------------------------------------------------------------- */

/* Ids and both expected counts equal the reference's, call after call, for unique and not,
 * i32 and i64 true classes. */
START_TEST(test_matches_reference) {
  const Sampler cases[] = {
      {1, 64, 10000, 5, 9, true, FLOE_I64},  {2, 64, 10000, 5, 9, false, FLOE_I64},
      {1, 1024, 10000, 11, 3, true, FLOE_I32}, {3, 30, 40, 123, -4, true, FLOE_I32},
      {1, 40, 40, 7, 0, true, FLOE_I64},     {1, 8, 1, 7, 1, false, FLOE_I64},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const Sampler *cfg = &cases[ci];
    FloeSession *s = sampler_session(cfg);
    Uniforms u = uniforms_new(cfg->seed, cfg->seed2, 200000);
    int64_t batch = 5, nt = batch * cfg->num_true, tv[64];
    for (int64_t i = 0; i < nt; i++) tv[i] = (i * 7919) % cfg->range_max;
    FloeTensor *cls = classes(cfg, batch, tv);
    int64_t *ids = malloc((size_t)cfg->num_sampled * sizeof *ids);
    for (int call = 0; call < 3; call++) {
      FloeTensor *out[3];
      run_ok(s, cls, out);
      uniforms_next(&u);
      int64_t tries = ref_sample(cfg, &u, ids);
      ck_assert_int_eq(floe_tensor_dtype(out[0]), FLOE_I64);
      ck_assert_int_eq(floe_tensor_dtype(out[1]), FLOE_F32);
      ck_assert_int_eq(floe_tensor_num_elements(out[0]), cfg->num_sampled);
      ck_assert_int_eq(floe_tensor_num_elements(out[2]), cfg->num_sampled);
      ck_assert_int_eq(floe_tensor_rank(out[1]), 2);
      ck_assert_int_eq(floe_tensor_dims(out[1])[0], batch);
      ck_assert_int_eq(floe_tensor_dims(out[1])[1], cfg->num_true);
      const int64_t *got = floe_tensor_data(out[0]);
      const float *sc = floe_tensor_data(out[2]), *tc = floe_tensor_data(out[1]);
      for (int64_t j = 0; j < cfg->num_sampled; j++) {
        ck_assert_msg(got[j] == ids[j], "case %zu call %d id %lld: %lld, want %lld", ci, call,
                      (long long)j, (long long)got[j], (long long)ids[j]);
        double want = ref_count(log_uniform_p(ids[j], cfg->range_max), cfg->num_sampled, tries);
        ck_assert_msg(fabs(sc[j] - want) <= 2e-6 * want + 1e-12,
                      "case %zu sampled count %lld: %.9g, want %.9g", ci, (long long)j,
                      (double)sc[j], want);
      }
      for (int64_t i = 0; i < nt; i++) {
        double want = ref_count(log_uniform_p(tv[i], cfg->range_max), cfg->num_sampled, tries);
        ck_assert_msg(fabs(tc[i] - want) <= 2e-6 * want + 1e-12,
                      "case %zu true count %lld: %.9g, want %.9g", ci, (long long)i,
                      (double)tc[i], want);
      }
      release3(out);
    }
    free(ids);
    floe_tensor_release(cls);
    uniforms_free(&u);
    floe_session_free(s);
  }
}
END_TEST

/* Ids in range; distinct when unique (all of the range when num_sampled == range_max);
 * without unique, small ranges repeat ids; the stream moves on each call and repeats in a
 * new session with the same seeds. */
START_TEST(test_range_and_uniqueness) {
  const Sampler full = {1, 50, 50, 3, 1, true, FLOE_I64}, big = {1, 1024, 10000, 4, 2, true,
                                                                    FLOE_I64};
  const Sampler rep = {1, 200, 50, 3, 1, false, FLOE_I64};
  const Sampler *cases[3] = {&full, &big, &rep};
  for (int ci = 0; ci < 3; ci++) {
    const Sampler *cfg = cases[ci];
    FloeSession *s = sampler_session(cfg), *s2 = sampler_session(cfg);
    int64_t zero = 0;
    FloeTensor *cls = classes(cfg, 1, &zero);
    char *seen = malloc((size_t)cfg->range_max);
    FloeTensor *prev = NULL;
    for (int call = 0; call < 10; call++) {
      FloeTensor *out[3], *out2[3];
      run_ok(s, cls, out);
      run_ok(s2, cls, out2);
      const int64_t *ids = floe_tensor_data(out[0]);
      ck_assert_msg(memcmp(ids, floe_tensor_data(out2[0]), floe_tensor_nbytes(out[0])) == 0,
                    "case %d call %d: two sessions with the same seeds differ", ci, call);
      if (prev && cfg != &full)
        ck_assert_msg(memcmp(ids, floe_tensor_data(prev), floe_tensor_nbytes(prev)) != 0,
                      "case %d call %d repeats the last call", ci, call);
      memset(seen, 0, (size_t)cfg->range_max);
      int64_t dups = 0;
      for (int64_t j = 0; j < cfg->num_sampled; j++) {
        ck_assert_msg(ids[j] >= 0 && ids[j] < cfg->range_max, "case %d id %lld out of range",
                      ci, (long long)ids[j]);
        dups += seen[ids[j]];
        seen[ids[j]] = 1;
      }
      if (cfg->unique)
        ck_assert_msg(dups == 0, "case %d call %d: %lld repeated ids", ci, call, (long long)dups);
      else
        ck_assert_msg(dups > 0, "case %d: 200 draws from 50 ids never repeated", ci);
      /* Unique expected counts are probabilities; with every id taken each is ~1. */
      const float *sc = floe_tensor_data(out[2]);
      for (int64_t j = 0; cfg->unique && j < cfg->num_sampled; j++)
        ck_assert_msg(sc[j] > 0 && sc[j] <= 1.0f + 1e-6f, "case %d count %g", ci, (double)sc[j]);
      floe_tensor_release(prev);
      prev = out[0];
      floe_tensor_retain(prev);
      release3(out);
      release3(out2);
    }
    floe_tensor_release(prev);
    free(seen);
    floe_tensor_release(cls);
    floe_session_free(s);
    floe_session_free(s2);
  }
}
END_TEST

/* Pearson's chi-square of counts[0..r) (n draws) against probabilities p. */
static double chi_square(const int64_t *counts, const double *p, int64_t r, int64_t n) {
  double x = 0;
  for (int64_t k = 0; k < r; k++) {
    double e = p[k] * (double)n;
    x += ((double)counts[k] - e) * ((double)counts[k] - e) / e;
  }
  return x;
}

/* 200,000 draws with replacement over 50 ids follow P(k) = log((k+2)/(k+1)) / log(51): the
 * chi-square (49 degrees of freedom) stays under 49 + 6 sd = 108 (p < 1e-7 by chance), while
 * the same counts are far from the usual slips (log(R) for log(R + 1), no "- 1", uniform). */
START_TEST(test_log_uniform_frequencies) {
  const int64_t range = 50, calls = 200, k = 1000, n = calls * k;
  const Sampler cfg = {1, k, range, 77, 5, false, FLOE_I64};
  FloeSession *s = sampler_session(&cfg);
  int64_t zero = 0, counts[50] = {0};
  FloeTensor *cls = classes(&cfg, 1, &zero);
  for (int64_t c = 0; c < calls; c++) {
    FloeTensor *out[3];
    run_ok(s, cls, out);
    const int64_t *ids = floe_tensor_data(out[0]);
    for (int64_t j = 0; j < k; j++) counts[ids[j]]++;
    release3(out);
  }
  double p[50], slip_log_r[50], slip_no_minus1[50], uniform[50];
  for (int64_t v = 0; v < range; v++) {
    p[v] = log_uniform_p(v, range);
    /* floor(exp(u log R)) - 1 never reaches R - 1; its mass goes to ... nowhere: renormalise
     * over the ids it reaches. */
    slip_log_r[v] = v < range - 1 ? log((double)(v + 2) / (double)(v + 1)) / log((double)range)
                                  : 1e-9;
    /* floor(exp(u log(R + 1))) mod R: id v holds P(v - 1), id 0 also P(R - 1). */
    slip_no_minus1[v] = v == 0 ? log_uniform_p(range - 1, range) : log_uniform_p(v - 1, range);
    uniform[v] = 1.0 / (double)range;
  }
  double x = chi_square(counts, p, range, n);
  ck_assert_msg(x < 108, "chi-square %.1f against the log-uniform law (49 dof)", x);
  ck_assert_msg(chi_square(counts, slip_log_r, range, n) > 1000, "log(R) slip not detected");
  ck_assert_msg(chi_square(counts, slip_no_minus1, range, n) > 1000, "-1 slip not detected");
  ck_assert_msg(chi_square(counts, uniform, range, n) > 1000, "uniform not detected");
  floe_tensor_release(cls);
  floe_session_free(s);
}
END_TEST

/* Building the graph fails with `msg` in an error naming the node. */
static void expect_build_error(const Sampler *cfg, FloeShape cls_shape, const char *msg) {
  FloeGraph *g = sampler_graph(cfg, cls_shape);
  const char *err = floe_graph_error(g, NULL);
  ck_assert_msg(floe_graph_status(g) != FLOE_OK, "no error for '%s'", msg);
  ck_assert_msg(err && strstr(err, "samp") && strstr(err, msg), "error '%s', want '%s'",
                err ? err : "(none)", msg);
  floe_graph_free(g);
}

START_TEST(test_bad_attributes) {
  const int64_t d[2] = {-1, 1};
  FloeShape cls = floe_shape_make(2, d);
  Sampler too_many = {1, 11, 10, 1, 1, true, FLOE_I64};
  expect_build_error(&too_many, cls, "num_sampled 11 is more than range_max 10");
  Sampler no_range = {1, 4, 0, 1, 1, false, FLOE_I64};
  expect_build_error(&no_range, cls, "range_max = 0 is below its minimum 1");
  no_range.range_max = -5;
  expect_build_error(&no_range, cls, "range_max = -5 is below its minimum 1");
  Sampler no_samples = {1, 0, 10, 1, 1, false, FLOE_I64};
  expect_build_error(&no_samples, cls, "num_sampled = 0 is below its minimum 1");
  Sampler two_true = {2, 4, 10, 1, 1, false, FLOE_I64};
  expect_build_error(&two_true, cls, "num_true is 2");
  Sampler fine = {1, 4, 10, 1, 1, true, FLOE_I64};
  expect_build_error(&fine, floe_shape_make(1, d), "true_classes must be [batch, num_true]");
  /* Without unique, more samples than ids is fine. */
  too_many.unique = false;
  FloeGraph *g = sampler_graph(&too_many, cls);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
}
END_TEST

/* A true class outside [0, range_max), or true classes of the wrong width fed to a graph
 * that could not check them, fail the run with the node named; the session still works. */
START_TEST(test_bad_true_classes) {
  Sampler cfg = {1, 4, 10, 1, 1, true, FLOE_I32};
  FloeGraph *g = sampler_graph(&cfg, floe_shape_unknown());
  FloeSession *s = harness_session(g, NULL);
  floe_graph_free(g);
  FloeStatus *st = floe_status_new();
  const int64_t bad_values[2] = {10, -1};
  for (int i = 0; i < 2; i++) {
    FloeTensor *cls = classes(&cfg, 1, &bad_values[i]), *out[3] = {0};
    ck_assert_int_eq(run(s, cls, out, st), FLOE_INVALID_ARGUMENT);
    const char *m = floe_status_message(st);
    ck_assert_msg(strstr(m, "samp") && strstr(m, "outside [0, range_max 10)"), "%s", m);
    floe_tensor_release(cls);
  }
  FloeTensor *wide = harness_i32(2, (int64_t[]){1, 2}, (const int32_t[]){1, 2}), *out[3] = {0};
  ck_assert_int_eq(run(s, wide, out, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "samp") &&
                    strstr(floe_status_message(st), "true_classes must be i32/i64 [batch, 1]"),
                "%s", floe_status_message(st));
  floe_tensor_release(wide);
  int64_t ok = 3;
  FloeTensor *cls = classes(&cfg, 1, &ok);
  run_ok(s, cls, out);
  release3(out);
  floe_tensor_release(cls);
  floe_status_free(st);
  floe_session_free(s);
}
END_TEST

/* Inferred shapes: [num_sampled], [batch, num_true], [num_sampled]. */
START_TEST(test_shapes) {
  Sampler cfg = {3, 17, 100, 1, 1, true, FLOE_I64};
  FloeGraph *g = sampler_graph(&cfg, floe_shape_make(2, (int64_t[]){8, 3}));
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeNode *n = floe_graph_find(g, "samp");
  ck_assert_ptr_nonnull(n);
  FloeShape a = floe_node_output_shape(n, 0), b = floe_node_output_shape(n, 1),
            c = floe_node_output_shape(n, 2);
  ck_assert_int_eq(a.rank, 1);
  ck_assert_int_eq(a.dims[0], 17);
  ck_assert_int_eq(b.rank, 2);
  ck_assert_int_eq(b.dims[0], 8);
  ck_assert_int_eq(b.dims[1], 3);
  ck_assert_int_eq(c.rank, 1);
  ck_assert_int_eq(c.dims[0], 17);
  floe_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("candidate_sampler");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_matches_reference);
  tcase_add_test(tc, test_range_and_uniqueness);
  tcase_add_test(tc, test_log_uniform_frequencies);
  tcase_add_test(tc, test_bad_attributes);
  tcase_add_test(tc, test_bad_true_classes);
  tcase_add_test(tc, test_shapes);
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
