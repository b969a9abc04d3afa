/* SPDX-License-Identifier: Apache-2.0 */
/* test_onnx_text.c - ONNX TfIdfVectorizer on models built with onnx_builder: bad attributes
 * (mode, gram lengths, ngram_counts or ngram_indexes that do not fit the pool, weights of the
 * wrong length, missing attributes) are import errors naming the node and what is wrong;
 * string items are unsupported, naming STRING; a bad run-time rank is a run error; and the
 * three modes with skips, a permuted ngram_indexes, weights, min_gram_length 2, a pool that
 * lists an n-gram twice and an empty row match counts worked out by hand in the comments. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe.h"
#include "floe/floe_onnx.h"
#include "onnx_builder.h"

enum { T_FLOAT = 1, T_INT32 = 6, T_INT64 = 7, T_STRING = 8 };

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* One TfIdfVectorizer node "tfidf_node" from graph input x to output y. */
typedef struct Spec {
  const char *mode;
  int64_t min, max, skip;
  const int64_t *counts, *idx, *pool;
  size_t nc, ni, np;
  const float *w; /* NULL: no weights attribute */
  size_t nw;
  int elem;       /* x's ONNX element type */
  int rank;       /* x's rank; -1: unknown shape */
  int64_t dims[3];
  const char *omit;  /* an attribute left out, or NULL */
  int pool_strings;  /* give pool_strings (["a"]) as well */
} Spec;

/* The hand-worked table: n-grams 0:"1" 1:"3" 2:"1 2" 3:"2 1" 4:"3 1", sent to coordinates
 * 3, 0, 4, 1, 2 with weights 0.5, 2, 1.5, 3, 0.25. */
static const int64_t k_counts[] = {0, 2};
static const int64_t k_idx[] = {3, 0, 4, 1, 2};
static const int64_t k_pool[] = {1, 3, 1, 2, 2, 1, 3, 1};
static const float k_w[] = {0.5f, 2.0f, 1.5f, 3.0f, 0.25f};

static Spec base_spec(const char *mode) {
  return (Spec){mode,  1,   2,  1,  k_counts,     k_idx,   k_pool,     LEN(k_counts),
                LEN(k_idx), LEN(k_pool), k_w, LEN(k_w), T_INT64, 2, {2, 6}, NULL, 0};
}

static void attr_strings_a(Onnx__NodeProto *n) {
  Onnx__AttributeProto *a = onnx_builder_alloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = "pool_strings";
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
  a->strings = onnx_builder_alloc(1, sizeof *a->strings);
  a->strings[0].data = (uint8_t *)"a";
  a->strings[0].len = 1;
  a->n_strings = 1;
  n->attribute[n->n_attribute++] = a;
}

static FloeOnnxModel *import(const Spec *s, FloeStatus *st) {
  Model md;
  ob_model_init(&md, 9);
  ob_add_typed_input(&md, "x", s->elem, s->rank < 0 ? 0 : s->rank, s->dims);
  if (s->rank < 0) md.ins[0]->type->tensor_type->shape = NULL;
  ob_add_output(&md, "y");
  Onnx__NodeProto *n = ob_add_node(&md, "TfIdfVectorizer", "tfidf_node", "x", NULL, NULL, "y");
#define OMIT(a) (s->omit && !strcmp(s->omit, a))
  if (!OMIT("mode")) ob_attr_string(n, "mode", s->mode);
  if (!OMIT("min_gram_length")) ob_attr_int(n, "min_gram_length", s->min);
  if (!OMIT("max_gram_length")) ob_attr_int(n, "max_gram_length", s->max);
  if (!OMIT("max_skip_count")) ob_attr_int(n, "max_skip_count", s->skip);
  if (!OMIT("ngram_counts")) ob_attr_ints(n, "ngram_counts", s->counts, s->nc);
  if (!OMIT("ngram_indexes")) ob_attr_ints(n, "ngram_indexes", s->idx, s->ni);
  if (!OMIT("pool_int64s")) ob_attr_ints(n, "pool_int64s", s->pool, s->np);
#undef OMIT
  if (s->w) ob_attr_floats(n, "weights", s->w, s->nw);
  if (s->pool_strings) attr_strings_a(n);
  size_t len;
  uint8_t *buf = ob_pack(&md, &len);
  FloeOnnxModel *m = floe_onnx_import(buf, len, "test model", NULL, st);
  free(buf);
  return m;
}

/* The import fails with code, naming the node (when node) and containing `what`. */
static void expect_import_error(const Spec *s, floe_code code, int node, const char *what) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = import(s, st);
  ck_assert_msg(m == NULL, "the import succeeded; wanted an error about '%s'", what);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, what) && (!node || strstr(msg, "tfidf_node")),
                "message '%s' lacks the node or '%s'", msg, what);
  ck_assert_msg(floe_status_code(st) == code, "code %d, want %d (%s)", floe_status_code(st), code,
                msg);
  floe_status_free(st);
}

/* Imports and runs on x; returns y, or NULL with err holding the run's message. */
static FloeTensor *run(const Spec *s, FloeTensor *x, char *err, size_t cap) {
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = import(s, st);
  ck_assert_msg(m != NULL, "import: %s", floe_status_message(st));
  FloeFeed f = {floe_onnx_model_input_node(m, 0), x};
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *ses = floe_session_new(floe_onnx_model_graph(m), &so, st);
  ck_assert_msg(ses != NULL, "session: %s", floe_status_message(st));
  const char *fetch = floe_onnx_model_output_fetch(m, 0);
  FloeTensor *y = NULL;
  if (floe_session_run(ses, &f, 1, &fetch, 1, NULL, 0, &y, st) != FLOE_OK) {
    snprintf(err, cap, "%s", floe_status_message(st));
    y = NULL;
  }
  floe_session_free(ses);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return y;
}

static FloeTensor *ints(FloeDType dt, int rank, const int64_t *dims, const int64_t *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  FloeTensor *t = floe_tensor_new(dt, rank, dims, NULL);
  ck_assert_ptr_nonnull(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == FLOE_I32) ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
    else ((int64_t *)floe_tensor_data(t))[i] = v[i];
  }
  return t;
}

/* Runs s on x (values v) and compares y, of shape [rows?, n / rows], with want exactly. */
static void expect_run(const Spec *s, FloeDType dt, const int64_t *v, const float *want,
                       int64_t ny) {
  FloeTensor *x = ints(dt, s->rank, s->dims, v);
  char err[1024] = "";
  FloeTensor *y = run(s, x, err, sizeof err);
  ck_assert_msg(y != NULL, "run: %s", err);
  ck_assert_int_eq(floe_tensor_dtype(y), FLOE_F32);
  ck_assert_int_eq(floe_tensor_rank(y), s->rank);
  if (s->rank == 2) ck_assert_int_eq(floe_tensor_dims(y)[0], s->dims[0]);
  ck_assert_int_eq(floe_tensor_num_elements(y), ny);
  const float *got = floe_tensor_data(y);
  for (int64_t i = 0; i < ny; i++)
    ck_assert_msg(got[i] == want[i], "%s: element %lld is %g, want %g", s->mode, (long long)i,
                  got[i], want[i]);
  floe_tensor_release(y);
  floe_tensor_release(x);
}

/* ---- import errors ---- */

START_TEST(bad_attributes_are_import_errors) {
  Spec s = base_spec("BM25");
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "mode 'BM25' is not one of TF, IDF, TFIDF");

  s = base_spec("TF");
  s.min = 3;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "max_gram_length 2 is less than min_gram_length 3");
  s = base_spec("TF");
  s.min = 0;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "min_gram_length");
  s = base_spec("TF");
  s.skip = -1;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "max_skip_count");

  /* ngram_counts against the pool of 8 items. */
  static const int64_t odd[] = {0, 3}, past[] = {0, 9}, back[] = {0, 4, 2}, late[] = {1, 2},
                       none[] = {0};
  s = base_spec("TF");
  s.counts = odd; /* 5 items of 2-grams */
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "not a whole number of 2-grams");
  s.counts = past;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "ngram_counts[1] = 9 is beyond the pool of 8");
  s.counts = back;
  s.nc = 3;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "ngram_counts[2] = 2 is less than ngram_counts[1]");
  s.counts = late;
  s.nc = 2;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "ngram_counts[0] must be 0");
  s.counts = none;
  s.nc = 0;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "ngram_counts must not be empty");

  /* ngram_indexes: one per n-gram, each in range. */
  static const int64_t four[] = {3, 0, 4, 1}, neg[] = {3, 0, -1, 1, 2};
  s = base_spec("TF");
  s.idx = four;
  s.ni = 4;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1,
                      "ngram_indexes has 4 entries but the pool holds 5 n-grams");
  s = base_spec("TF");
  s.idx = neg;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "ngram_indexes[2] = -1 is out of range");
  s = base_spec("TFIDF");
  s.nw = 4;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "weights has 4 entries, not one per n-gram (5)");

  /* Required attributes, and inputs that are not integers. */
  s = base_spec("TF");
  s.omit = "mode";
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "attribute mode is required");
  s.omit = "pool_int64s";
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "attribute pool_int64s is required");
  s = base_spec("TF");
  s.elem = T_FLOAT;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "must be INT32 or INT64");
  s = base_spec("TF");
  s.rank = 3;
  s.dims[2] = 2;
  expect_import_error(&s, FLOE_INVALID_ARGUMENT, 1, "must be [C] or [N, C]");
}
END_TEST

START_TEST(string_items_are_unsupported) {
  Spec s = base_spec("TF");
  s.elem = T_STRING;
  expect_import_error(&s, FLOE_UNIMPLEMENTED, 0, "STRING");
  s = base_spec("TF");
  s.pool_strings = 1;
  expect_import_error(&s, FLOE_UNIMPLEMENTED, 1, "pool_strings");
}
END_TEST

/* An input whose rank is only known at run time: a bad one is a run error naming the node. */
START_TEST(bad_run_time_rank_is_a_run_error) {
  Spec s = base_spec("TF");
  s.rank = -1;
  static const int64_t d[3] = {1, 2, 3}, v[6] = {1, 2, 3, 1, 2, 3};
  FloeTensor *x = ints(FLOE_I64, 3, d, v);
  char err[1024] = "";
  FloeTensor *y = run(&s, x, err, sizeof err);
  ck_assert_msg(y == NULL, "the run succeeded");
  ck_assert_msg(strstr(err, "tfidf_node") && strstr(err, "[C] or [N, C]"), "message '%s'", err);
  floe_tensor_release(x);
}
END_TEST

/* ---- results worked out by hand ----
 * Row 0: 1 2 1 2 3 1. 1-grams: "1" x3, "3" x1. Skip 0 pairs (1,2) (2,1) (1,2) (2,3) (3,1):
 * "1 2" x2, "2 1" x1, "3 1" x1. Skip 1 pairs (x0,x2)..: (1,1) (2,2) (1,3) (2,1): "2 1" +1.
 * Counts by n-gram: 3 1 2 2 1.
 * Row 1: 3 3 2 1 0 0. 1-grams: "1" x1, "3" x2. Skip 0: (3,3) (3,2) (2,1) (1,0) (0,0): "2 1"
 * x1. Skip 1: (3,2) (3,1) (2,0) (1,0): "3 1" x1. Counts by n-gram: 1 2 0 1 1.
 * Coordinates 3 0 4 1 2: y[c] gets n-gram k with c = idx[k]. */
static const int64_t k_x[12] = {1, 2, 1, 2, 3, 1, 3, 3, 2, 1, 0, 0};

START_TEST(tf_idf_tfidf_with_skips) {
  /* TF: row 0 y = [c1, c3, c4, c0, c2] = [1, 2, 1, 3, 2]; row 1 [2, 1, 1, 1, 0]. */
  static const float tf[10] = {1, 2, 1, 3, 2, 2, 1, 1, 1, 0};
  /* IDF: the weight of each n-gram found: [2, 3, 0.25, 0.5, 1.5]; row 1 lacks n-gram 2. */
  static const float idf[10] = {2, 3, 0.25f, 0.5f, 1.5f, 2, 3, 0.25f, 0.5f, 0};
  /* TFIDF: counts times weights: row 0 n-grams 1.5 2 3 6 0.25, row 1 0.5 4 0 3 0.25. */
  static const float tfidf[10] = {2, 6, 0.25f, 1.5f, 3, 4, 3, 0.25f, 0.5f, 0};
  Spec s = base_spec("TF");
  expect_run(&s, FLOE_I64, k_x, tf, 10);
  s.w = NULL; /* TF ignores weights; so does TFIDF without them */
  expect_run(&s, FLOE_I64, k_x, tf, 10);
  s.mode = "TFIDF";
  expect_run(&s, FLOE_I64, k_x, tf, 10);
  s = base_spec("IDF");
  s.elem = T_INT32;
  expect_run(&s, FLOE_I32, k_x, idf, 10);
  s = base_spec("TFIDF");
  expect_run(&s, FLOE_I64, k_x, tfidf, 10);
  /* IDF without weights: 1 where an n-gram is found. */
  static const float ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  s = base_spec("IDF");
  s.w = NULL;
  expect_run(&s, FLOE_I64, k_x, ones, 10);
  /* Skip 0 only: row 0 loses the skip-1 "2 1" (coordinate 1: 2 -> 1); row 1 its "3 1"
   * (coordinate 2: 1 -> 0). */
  static const float skip0[10] = {1, 1, 1, 3, 2, 2, 1, 0, 1, 0};
  s = base_spec("TF");
  s.skip = 0;
  expect_run(&s, FLOE_I64, k_x, skip0, 10);
}
END_TEST

START_TEST(bigrams_only_on_one_row) {
  /* min_gram_length 2: the 1-grams are not counted; row 0 of k_x as a 1-D i32 input. */
  static const float want[5] = {0, 2, 1, 0, 2};
  Spec s = base_spec("TF");
  s.min = 2;
  s.elem = T_INT32;
  s.rank = 1;
  s.dims[0] = 6;
  expect_run(&s, FLOE_I32, k_x, want, 5);
}
END_TEST

START_TEST(repeated_pool_entries_and_empty_rows) {
  /* The pool lists "7" twice (coordinates 0 and 2) and "7 7" once (coordinate 1), 3-grams
   * none; x = 7 5 7 7: "7" x3 for both entries, "7 7" at skip 0 (x2,x3), skip 1 (x0,x2),
   * skip 2 (x0,x3): 3. */
  static const int64_t counts[] = {0, 2, 4}, idx[] = {0, 2, 1}, pool[] = {7, 7, 7, 7};
  static const int64_t x[4] = {7, 5, 7, 7};
  static const float want[3] = {3, 3, 3};
  Spec s = {"TF", 1, 3, 4, counts, idx, pool, 3, 3, 4, NULL, 0, T_INT64, 1, {4}, NULL, 0};
  expect_run(&s, FLOE_I64, x, want, 3);
  /* Rows of no items give zeros of the output's width. */
  static const float zeros[6] = {0};
  s.rank = 2;
  s.dims[0] = 2;
  s.dims[1] = 0;
  expect_run(&s, FLOE_I64, x, zeros, 6);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_text");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, bad_attributes_are_import_errors);
  tcase_add_test(tc, string_items_are_unsupported);
  tcase_add_test(tc, bad_run_time_rank_is_a_run_error);
  suite_add_tcase(s, tc);
  tc = tcase_create("results");
  tcase_add_test(tc, tf_idf_tfidf_with_skips);
  tcase_add_test(tc, bigrams_only_on_one_row);
  tcase_add_test(tc, repeated_pool_entries_and_empty_rows);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
