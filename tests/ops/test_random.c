/* SPDX-License-Identifier: Apache-2.0 */
/* test_random.c - RandomUniform, RandomNormal and TruncatedNormal.
 *
 * A reference Philox-4x32-10 written here (checked against the known-answer vectors of
 * Random123) reproduces the documented layout of random.c, so the kernels are checked value
 * by value; then statistics over 1e6 samples, the truncation bound, reproducibility across
 * sessions, fresh numbers on every run, and identical results with one and two threads. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const FloeDType float_dtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16};
static const char *const dists[] = {"RandomUniform", "RandomNormal", "TruncatedNormal"};

/* ---------------------------------------------------------------------------------- */
/* Reference generator. */

static void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The four words of `block` for call c: key = seed ^ mix64(c), counter = (block, seed2). */
static void words(uint64_t seed, uint64_t seed2, uint64_t c, uint64_t block, uint32_t w[4]) {
  uint64_t key = seed ^ mix64(c);
  w[0] = (uint32_t)block;
  w[1] = (uint32_t)(block >> 32);
  w[2] = (uint32_t)seed2;
  w[3] = (uint32_t)(seed2 >> 32);
  philox4x32_10(w, (uint32_t)key, (uint32_t)(key >> 32));
}

/* Element i of call c of dist (0 uniform, 1 normal, 2 truncated) in dtype dt, before any
 * rounding to the dtype: uniforms exactly, normals as the exact value of the formula. */
static double ref_value(int dist, FloeDType dt, uint64_t seed, uint64_t seed2, uint64_t c,
                        int64_t i) {
  uint32_t w[4];
  for (uint64_t attempt = 0;; attempt++) {
    if (dt == FLOE_F64) {
      words(seed, seed2, c, (uint64_t)(i / 2) | attempt << 48, w);
      uint64_t a = (uint64_t)w[0] << 32 | w[1], b = (uint64_t)w[2] << 32 | w[3];
      if (dist == 0) return (double)(((i & 1) ? b : a) >> 11) * 0x1p-53;
      double u1 = (double)((a >> 11) + 1) * 0x1p-53, u2 = (double)(b >> 11) * 0x1p-53;
      double r = sqrt(-2.0 * log(u1)), t = 6.28318530717958647692 * u2;
      double z = (i & 1) ? r * sin(t) : r * cos(t);
      if (dist == 1 || fabs(z) <= 2.0) return z;
    } else {
      words(seed, seed2, c, (uint64_t)(i / 4) | attempt << 48, w);
      if (dist == 0) {
        int bits = dt == FLOE_F16 ? 11 : dt == FLOE_BF16 ? 8 : 24;
        return ldexp((double)(w[i % 4] >> (32 - bits)), -bits);
      }
      /* The kernel computes in f32; the reference in f64 from the same u1, u2. */
      int p = (int)(i % 4) & ~1;
      double u1 = (double)((w[p] >> 8) + 1) * 0x1p-24, u2 = (double)(w[p + 1] >> 8) * 0x1p-24;
      double r = sqrt(-2.0 * log(u1)), t = 6.28318530717958647692 * u2;
      double z = (i & 1) ? r * sin(t) : r * cos(t);
      if (dist == 1 || fabs(z) <= 2.0) return z;
    }
  }
}

/* The reference value as the output dtype rounds it (within tolerance() of the kernel's). */
static double ref_stored(int dist, FloeDType dt, uint64_t seed, uint64_t seed2, uint64_t c,
                         int64_t i) {
  double v = ref_value(dist, dt, seed, seed2, c, i);
  switch (dt) {
    case FLOE_F32: return (float)v;
    case FLOE_F16: return floe_f16_to_f32(floe_f32_to_f16((float)v));
    case FLOE_BF16: return floe_bf16_to_f32(floe_f32_to_bf16((float)v));
    default: return v;
  }
}

/* Tolerance of a kernel value (relative to 1 + |want|): uniform values are exact; normals
 * are f32 arithmetic (about 1e-6 of the angle times a radius up to 6) rounded to the dtype. */
static double tolerance(int dist, FloeDType dt) {
  if (dist == 0) return 0;
  switch (dt) {
    case FLOE_F64: return 1e-12;
    case FLOE_F16: return 1e-3;
    case FLOE_BF16: return 8e-3;
    default: return 4e-6;
  }
}

/* ---------------------------------------------------------------------------------- */
/* Running the ops. */

/* A session holding `op` ("rnd") of dtype dt, seeds and a constant shape of index type st. */
static FloeSession *make_session(FloeRuntime *rt, const char *op, FloeDType dt, int rank,
                                 const int64_t *dims, FloeDType st, int64_t seed, int64_t seed2) {
  FloeGraph *g = floe_graph_new();
  int64_t n = rank;
  FloeTensor *shape = harness_tensor(st, 1, &n, NULL);
  for (int i = 0; i < rank; i++) {
    if (st == FLOE_I32)
      ((int32_t *)floe_tensor_data(shape))[i] = (int32_t)dims[i];
    else
      ((int64_t *)floe_tensor_data(shape))[i] = dims[i];
  }
  FloeOutput s = floe_const(g, "shape", shape);
  floe_tensor_release(shape);
  FloeNodeBuilder *b = floe_node_begin(g, op, "rnd");
  floe_node_add_input(b, s);
  floe_node_set_attr_type(b, "dtype", dt);
  floe_node_set_attr_int(b, "seed", seed);
  floe_node_set_attr_int(b, "seed2", seed2);
  floe_node_finish(b);
  FloeStatus *status = floe_status_new();
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  FloeSession *sess = floe_session_new(g, &so, status);
  ck_assert_msg(sess != NULL, "%s", floe_status_message(status));
  floe_graph_free(g);
  floe_status_free(status);
  return sess;
}

/* One run of "rnd"; caller releases. */
static FloeTensor *draw(FloeSession *s) {
  FloeStatus *st = floe_status_new();
  const char *fetch = "rnd";
  FloeTensor *out = NULL;
  floe_code rc = floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
  return out;
}

/* A fresh session's first draw. */
static FloeTensor *draw_once(FloeRuntime *rt, const char *op, FloeDType dt, int rank,
                             const int64_t *dims, int64_t seed, int64_t seed2) {
  FloeSession *s = make_session(rt, op, dt, rank, dims, FLOE_I64, seed, seed2);
  FloeTensor *t = draw(s);
  floe_session_free(s);
  return t;
}

static bool same_bytes(const FloeTensor *a, const FloeTensor *b) {
  return floe_tensor_nbytes(a) == floe_tensor_nbytes(b) &&
         (floe_tensor_nbytes(a) == 0 ||
          memcmp(floe_tensor_data(a), floe_tensor_data(b), floe_tensor_nbytes(a)) == 0);
}

/* ---------------------------------------------------------------------------------- */

START_TEST(test_philox_known_answers) {
  /* Random123's kat_vectors for philox4x32 with 10 rounds. */
  const uint32_t in[3][6] = {
      {0, 0, 0, 0, 0, 0},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0},
  };
  const uint32_t want[3][4] = {
      {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int v = 0; v < 3; v++) {
    uint32_t c[4] = {in[v][0], in[v][1], in[v][2], in[v][3]};
    philox4x32_10(c, in[v][4], in[v][5]);
    for (int k = 0; k < 4; k++) ck_assert_uint_eq(c[k], want[v][k]);
  }
}
END_TEST

/* Every element of the first two runs equals the reference. */
START_TEST(test_values_match_reference) {
  const int64_t sizes[] = {1, 3, 5, 7, 8, 67, 1000, 40001};
  for (int d = 0; d < 3; d++)
    for (size_t t = 0; t < 4; t++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        FloeDType dt = float_dtypes[t];
        int64_t seed = 1234 + (int64_t)s, seed2 = -77;
        FloeSession *sess = make_session(NULL, dists[d], dt, 1, &sizes[s],
                                         s % 2 ? FLOE_I32 : FLOE_I64, seed, seed2);
        for (uint64_t c = 0; c < 2; c++) {
          FloeTensor *out = draw(sess);
          ck_assert_int_eq(floe_tensor_dtype(out), dt);
          ck_assert_int_eq(floe_tensor_num_elements(out), sizes[s]);
          double tol = tolerance(d, dt), got = 0, want = 0;
          int64_t i = 0;
          for (; i < sizes[s]; i++) { /* one assertion per tensor: Check logs each one */
            want = ref_stored(d, dt, (uint64_t)seed, (uint64_t)seed2, c, i);
            got = harness_get(out, i);
            if (fabs(got - want) > tol * (1 + fabs(want))) break;
          }
          ck_assert_msg(i == sizes[s], "%s %s n=%lld run %d element %lld: %.17g, want %.17g",
                        dists[d], floe_dtype_name(dt), (long long)sizes[s], (int)c,
                        (long long)i, got, want);
          floe_tensor_release(out);
        }
        floe_session_free(sess);
      }
}
END_TEST

START_TEST(test_statistics) {
  const int64_t n = 1000000;
  /* Truncated at 2 sigma: variance 1 - 2 * 2 phi(2) / (Phi(2) - Phi(-2)). */
  double phi2 = exp(-2.0) / sqrt(2 * M_PI), mass = erf(2 / sqrt(2.0));
  double trunc_var = 1 - 4 * phi2 / mass;
  for (int d = 0; d < 3; d++)
    for (size_t t = 0; t < 4; t++) {
      FloeDType dt = float_dtypes[t];
      FloeTensor *x = draw_once(NULL, dists[d], dt, 2, (int64_t[]){1000, 1000}, 42, 7);
      double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
      int64_t within1 = 0;
      for (int64_t i = 0; i < n; i++) {
        double v = harness_get(x, i);
        sum += v;
        sq += v * v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        within1 += fabs(v) <= 1.0;
      }
      double mean = sum / n, var = sq / n - mean * mean;
      const char *name = floe_dtype_name(dt);
      if (d == 0) {
        /* 5+ standard errors: sd(mean) = 0.29e-3, sd(var) = 0.75e-4. */
        ck_assert_msg(lo >= 0 && hi < 1, "%s uniform range [%g, %g]", name, lo, hi);
        ck_assert_msg(fabs(mean - 0.5) < 0.003, "%s uniform mean %g", name, mean);
        ck_assert_msg(fabs(var - 1.0 / 12) < 0.001, "%s uniform var %g", name, var);
      } else if (d == 1) {
        /* sd(mean) = 1e-3, sd(var) = 1.4e-3; P(|z| <= 1) = 0.6827 (sd 0.5e-3). */
        ck_assert_msg(fabs(mean) < 0.006, "%s normal mean %g", name, mean);
        ck_assert_msg(fabs(var - 1) < 0.012, "%s normal var %g", name, var);
        ck_assert_msg(fabs((double)within1 / n - 0.6827) < 0.004, "%s normal P(|z|<=1) %g",
                      name, (double)within1 / n);
        ck_assert_msg(lo < -4 && hi > 4, "%s normal tails [%g, %g]", name, lo, hi);
      } else {
        ck_assert_msg(lo >= -2 && hi <= 2, "%s truncated range [%g, %g]", name, lo, hi);
        ck_assert_msg(lo < -1.99 && hi > 1.99, "%s truncated tails [%g, %g]", name, lo, hi);
        ck_assert_msg(fabs(mean) < 0.006, "%s truncated mean %g", name, mean);
        ck_assert_msg(fabs(var - trunc_var) < 0.01, "%s truncated var %g, want %g", name, var,
                      trunc_var);
      }
      floe_tensor_release(x);
    }
}
END_TEST

START_TEST(test_reproducible) {
  const int64_t dims[2] = {37, 29};
  for (int d = 0; d < 3; d++) {
    /* Same seeds, new session: same numbers; the second run differs from the first. */
    FloeSession *s1 = make_session(NULL, dists[d], FLOE_F32, 2, dims, FLOE_I32, 5, 6);
    FloeSession *s2 = make_session(NULL, dists[d], FLOE_F32, 2, dims, FLOE_I64, 5, 6);
    FloeTensor *a1 = draw(s1), *a2 = draw(s1), *b1 = draw(s2), *b2 = draw(s2);
    ck_assert_msg(same_bytes(a1, b1), "%s: first runs differ across sessions", dists[d]);
    ck_assert_msg(same_bytes(a2, b2), "%s: second runs differ across sessions", dists[d]);
    ck_assert_msg(!same_bytes(a1, a2), "%s: the second run repeats the first", dists[d]);
    /* Either seed changes the numbers. */
    FloeTensor *c = draw_once(NULL, dists[d], FLOE_F32, 2, dims, 5, 7);
    FloeTensor *e = draw_once(NULL, dists[d], FLOE_F32, 2, dims, 4, 6);
    ck_assert(!same_bytes(a1, c) && !same_bytes(a1, e) && !same_bytes(c, e));
    FloeTensor *all[] = {a1, a2, b1, b2, c, e};
    for (int i = 0; i < 6; i++) floe_tensor_release(all[i]);
    floe_session_free(s1);
    floe_session_free(s2);
  }
}
END_TEST

START_TEST(test_unseeded) {
  /* seed = seed2 = 0: two nodes of one graph differ, and each run draws anew. */
  FloeGraph *g = floe_graph_new();
  int64_t n = 1, dim = 64;
  FloeTensor *shape = harness_tensor(FLOE_I64, 1, &n, &dim);
  FloeOutput s = floe_const(g, "shape", shape);
  floe_tensor_release(shape);
  const char *names[2] = {"r0", "r1"};
  for (int i = 0; i < 2; i++) {
    FloeNodeBuilder *b = floe_node_begin(g, "RandomNormal", names[i]);
    floe_node_add_input(b, s);
    floe_node_finish(b);
  }
  FloeStatus *st = floe_status_new();
  FloeSession *sess = harness_session(g, NULL);
  FloeTensor *o1[2], *o2[2];
  ck_assert_int_eq(floe_session_run(sess, NULL, 0, names, 2, NULL, 0, o1, st), FLOE_OK);
  ck_assert_int_eq(floe_session_run(sess, NULL, 0, names, 2, NULL, 0, o2, st), FLOE_OK);
  ck_assert(!same_bytes(o1[0], o1[1]));
  ck_assert(!same_bytes(o1[0], o2[0]));
  ck_assert(!same_bytes(o1[1], o2[1]));
  for (int i = 0; i < 2; i++) {
    floe_tensor_release(o1[i]);
    floe_tensor_release(o2[i]);
  }
  floe_session_free(sess);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

START_TEST(test_thread_count_independent) {
  /* One runtime with one thread, one with two: the same bytes for large draws (sharded on
   * the two-thread pool) over two runs each. */
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt[2];
  for (int k = 0; k < 2; k++) {
    FloeRuntimeOptions ro = {sizeof ro, NULL, NULL, k + 1, 1};
    rt[k] = floe_runtime_new(&ro, st);
    ck_assert_msg(rt[k] != NULL, "%s", floe_status_message(st));
  }
  const int64_t dims[1] = {1000003};
  for (int d = 0; d < 3; d++)
    for (size_t t = 0; t < 4; t++) {
      FloeSession *s[2];
      FloeTensor *out[2][2];
      for (int k = 0; k < 2; k++) {
        s[k] = make_session(rt[k], dists[d], float_dtypes[t], 1, dims, FLOE_I64, 99, 100);
        out[k][0] = draw(s[k]);
        out[k][1] = draw(s[k]);
      }
      for (int r = 0; r < 2; r++)
        ck_assert_msg(same_bytes(out[0][r], out[1][r]), "%s %s run %d differs with 1 and 2 "
                      "threads", dists[d], floe_dtype_name(float_dtypes[t]), r);
      /* Spot-check the far end against the reference too. */
      for (int64_t i = dims[0] - 5; i < dims[0]; i++) {
        double want = ref_stored(d, float_dtypes[t], 99, 100, 1, i);
        ck_assert(fabs(harness_get(out[1][1], i) - want) <=
                  tolerance(d, float_dtypes[t]) * (1 + fabs(want)));
      }
      for (int k = 0; k < 2; k++) {
        floe_tensor_release(out[k][0]);
        floe_tensor_release(out[k][1]);
        floe_session_free(s[k]);
      }
    }
  floe_runtime_free(rt[0]);
  floe_runtime_free(rt[1]);
  floe_status_free(st);
}
END_TEST

/* Sets dtype and seeds for harness runs. */
static void set_random_attrs(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "dtype", *(const FloeDType *)arg);
  floe_node_set_attr_int(b, "seed", 3);
}

START_TEST(test_shapes_and_errors) {
  for (int d = 0; d < 3; d++)
    for (size_t t = 0; t < 4; t++) {
      FloeDType dt = float_dtypes[t];
      /* A zero dim gives an empty tensor; an empty shape gives a scalar. */
      FloeTensor *x = draw_once(NULL, dists[d], dt, 3, (int64_t[]){2, 0, 3}, 1, 2);
      ck_assert_int_eq(floe_tensor_rank(x), 3);
      ck_assert_int_eq(floe_tensor_num_elements(x), 0);
      floe_tensor_release(x);
      x = draw_once(NULL, dists[d], dt, 0, NULL, 1, 2);
      ck_assert_int_eq(floe_tensor_rank(x), 0);
      double want = ref_stored(d, dt, 1, 2, 0, 0);
      ck_assert(fabs(harness_get(x, 0) - want) <= tolerance(d, dt) * (1 + fabs(want)));
      floe_tensor_release(x);
    }
  /* A negative size and a shape that is not 1-D are errors naming what is wrong. */
  FloeDType dt = FLOE_F32;
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  int32_t neg[2] = {3, -4};
  FloeTensor *shape = harness_i32(1, (int64_t[]){2}, neg);
  floe_code rc = harness_run_op("RandomNormal", NULL, &shape, 1, NULL, 0, set_random_attrs, &dt,
                                &out, 1, st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(floe_status_message(st), "[3,-4]"),
                "%s: %s", floe_code_name(rc), floe_status_message(st));
  floe_tensor_release(shape);
  shape = harness_i32(2, (int64_t[]){1, 2}, (int32_t[]){3, 4});
  rc = harness_run_op("RandomUniform", NULL, &shape, 1, NULL, 0, set_random_attrs, &dt, &out, 1,
                      st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT && strstr(floe_status_message(st), "[1,2]"),
                "%s: %s", floe_code_name(rc), floe_status_message(st));
  ck_assert_ptr_null(out);
  floe_tensor_release(shape);
  floe_status_free(st);
}
END_TEST

static Suite *random_suite(void) {
  Suite *s = suite_create("random");
  TCase *tc = tcase_create("reference");
  tcase_add_test(tc, test_philox_known_answers);
  tcase_add_test(tc, test_values_match_reference);
  tcase_add_test(tc, test_shapes_and_errors);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  tc = tcase_create("statistics");
  tcase_add_test(tc, test_statistics);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  tc = tcase_create("determinism");
  tcase_add_test(tc, test_reproducible);
  tcase_add_test(tc, test_unseeded);
  tcase_add_test(tc, test_thread_count_independent);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(random_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
