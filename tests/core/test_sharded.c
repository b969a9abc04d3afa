/* SPDX-License-Identifier: Apache-2.0 */
/* test_sharded.c - sharded variables through the public API:
 *  - shard sizes: a fixed count (10 rows over 3: 4, 3, 3) and a byte bound (10 rows of 12
 *    bytes within 40 bytes: 4 shards of 3, 3, 2, 2), the shards' names and the whole's
 *    concatenation;
 *  - a checkpoint of the unsharded variable restores into 3 shards, and the embedding
 *    lookup across shards equals Gather on the unsharded variable, bitwise, ids repeated and
 *    in any order;
 *  - training through the lookup (SGD) gives bitwise the unsharded model's values;
 *  - a model trained with Adam in 3 shards restores into 2 shards and into one variable,
 *    values and Adam's slots alike, and a 2-shard checkpoint back into 3;
 *  - the sampled softmax over sharded weights and biases (3 shards) equals the one over
 *    the whole variables: the loss, and the values after 3 SGD steps;
 *  - refusals: both a count and a byte bound, a bad axis, ids out of range (naming the
 *    index), a float id. */
#include <stdbool.h>
#include <check.h>
#include <math.h>
#include <floe/floe.h>
#include <floe/floe_train.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static FloeShape s2(int64_t a, int64_t b) { return floe_shape_make(2, (int64_t[]){a, b}); }

static FloeTensor *run1(FloeSession *s, const char *fetch, const FloeFeed *f, int nf) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, f, nf, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s: %s",
                fetch, floe_status_message(st));
  floe_status_free(st);
  return out;
}

static void target(FloeSession *s, const char *t, const FloeFeed *f, int nf) {
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, f, nf, NULL, 0, &t, 1, NULL, st) == FLOE_OK, "%s: %s", t,
                floe_status_message(st));
  floe_status_free(st);
}

static void same(FloeTensor *a, FloeTensor *b, const char *what) {
  ck_assert_int_eq(floe_tensor_num_elements(a), floe_tensor_num_elements(b));
  ck_assert_msg(memcmp(floe_tensor_data(a), floe_tensor_data(b),
                       (size_t)floe_tensor_num_elements(a) * 4) == 0, "%s differs", what);
}

/* emb [10, 3] (uniform, seed 5) sharded n ways (0: one plain variable), ids fed, a loss
 * sum(lookup * w) with fixed w; trained with opt when given. */
static FloeGraph *model(int shards, FloeOptimizerKind opt, bool train) {
  FloeGraph *g = floe_graph_new();
  FloeOutput ids = floe_placeholder(g, "ids", FLOE_I32, s2(2, 3));
  FloeOutput rows;
  if (shards == 0) {
    FloeVariable v = floe_variable(g, "emb", FLOE_F32, s2(10, 3), floe_init_uniform(-1, 1, 5));
    rows = floe_binary(g, "Gather", "rows", v.value, ids);
    floe_unary(g, "Identity", "whole", v.value);
  } else {
    FloeShardedVariable v = floe_sharded_variable(g, "emb", FLOE_F32, s2(10, 3),
                                                  floe_init_uniform(-1, 1, 5), 0, shards, 0);
    rows = floe_embedding_lookup_sharded(g, "lookup", &v, ids);
    floe_unary(g, "Identity", "rows", rows);
    floe_unary(g, "Identity", "whole", v.value);
  }
  if (train) {
    FloeTensor *w = floe_tensor_new(FLOE_F32, 3, (int64_t[]){2, 3, 3}, NULL);
    float *wd = floe_tensor_data(w);
    for (int i = 0; i < 18; i++) wd[i] = (float)(i % 7) - 2.5f;
    FloeOutput wc = floe_const(g, "w", w);
    floe_tensor_release(w);
    FloeOutput prod = floe_binary(g, "Mul", "prod", rows, wc);
    FloeTensor *ax = floe_tensor_new(FLOE_I32, 1, (int64_t[]){3}, NULL);
    for (int i = 0; i < 3; i++) ((int32_t *)floe_tensor_data(ax))[i] = i;
    FloeOutput axes = floe_const(g, "axes", ax);
    floe_tensor_release(ax);
    FloeOutput loss = floe_binary(g, "Sum", "loss", prod, axes);
    FloeOptimizerOptions o;
    floe_optimizer_options_init(&o, opt);
    floe_minimize(g, "train", loss, &o, NULL, 0);
  }
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static FloeTensor *ids_tensor(int round) {
  static const int32_t v[2][6] = {{9, 0, 4, 3, 3, 7}, {1, 2, 9, 9, 5, 6}};
  FloeTensor *t = floe_tensor_new(FLOE_I32, 2, (int64_t[]){2, 3}, NULL);
  memcpy(floe_tensor_data(t), v[round % 2], sizeof v[0]);
  return t;
}

static FloeSession *session(FloeGraph *g) {
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_status_free(st);
  return s;
}

static char *save(FloeSession *s, const char *sub) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
  FloeStatus *st = floe_status_new();
  char *path = NULL;
  ck_assert_msg(floe_checkpoint_save(s, dir, NULL, 1, 0, &path, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  return path;
}

static void restore(FloeSession *s, const char *path) {
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_checkpoint_restore(s, path, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
}

START_TEST(test_shard_sizes) {
  FloeGraph *g = floe_graph_new();
  FloeShardedVariable a = floe_sharded_variable(g, "a", FLOE_F32, s2(10, 3), floe_init_zeros(), 0,
                                                3, 0);
  FloeShardedVariable b = floe_sharded_variable(g, "b", FLOE_F32, s2(10, 3), floe_init_zeros(), 0,
                                                0, 40);
  FloeShardedVariable c = floe_sharded_variable(g, "c", FLOE_F32, s2(4, 10), floe_init_zeros(), 1,
                                                3, 0);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(a.num_shards, 3);
  ck_assert_int_eq(b.num_shards, 4);
  ck_assert_int_eq(c.num_shards, 3);
  const int64_t ra[] = {4, 3, 3}, rb[] = {3, 3, 2, 2}, rc[] = {4, 3, 3};
  for (int k = 0; k < 4; k++) {
    char name[32];
    if (k < 3) {
      snprintf(name, sizeof name, "a/part_%d/read", k);
      ck_assert_int_eq(floe_node_output_shape(floe_graph_find(g, name), 0).dims[0], ra[k]);
      snprintf(name, sizeof name, "c/part_%d/read", k);
      ck_assert_int_eq(floe_node_output_shape(floe_graph_find(g, name), 0).dims[1], rc[k]);
    }
    snprintf(name, sizeof name, "b/part_%d/read", k);
    ck_assert_int_eq(floe_node_output_shape(floe_graph_find(g, name), 0).dims[0], rb[k]);
  }
  FloeShape whole = floe_node_output_shape(a.value.node, 0);
  ck_assert(whole.rank == 2 && whole.dims[0] == 10 && whole.dims[1] == 3);
  ck_assert_str_eq(floe_node_name(a.init), "a/init");
  floe_graph_free(g);
}
END_TEST

START_TEST(test_lookup_equals_gather) {
  FloeGraph *g0 = model(0, FLOE_OPT_SGD, false), *g3 = model(3, FLOE_OPT_SGD, false);
  FloeSession *s0 = session(g0), *s3 = session(g3);
  target(s0, "init", NULL, 0);
  char *path = save(s0, "plain");
  restore(s3, path); /* one variable into 3 shards */
  free(path);
  for (int round = 0; round < 2; round++) {
    FloeTensor *ids = ids_tensor(round);
    FloeFeed f = {"ids", ids};
    FloeTensor *a = run1(s0, "rows", &f, 1), *b = run1(s3, "rows", &f, 1);
    FloeShape sh = floe_tensor_shape(b);
    ck_assert(sh.rank == 3 && sh.dims[0] == 2 && sh.dims[1] == 3 && sh.dims[2] == 3);
    same(a, b, "the lookup");
    floe_tensor_release(a);
    floe_tensor_release(b);
    floe_tensor_release(ids);
  }
  FloeTensor *a = run1(s0, "whole", NULL, 0), *b = run1(s3, "whole", NULL, 0);
  same(a, b, "the whole");
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_session_free(s0);
  floe_session_free(s3);
  floe_graph_free(g0);
  floe_graph_free(g3);
}
END_TEST

static void train_steps(FloeSession *s, int steps) {
  for (int i = 0; i < steps; i++) {
    FloeTensor *ids = ids_tensor(i);
    FloeFeed f = {"ids", ids};
    target(s, "train", &f, 1);
    floe_tensor_release(ids);
  }
}

START_TEST(test_training_through_lookup) {
  FloeGraph *g0 = model(0, FLOE_OPT_SGD, true), *g3 = model(3, FLOE_OPT_SGD, true);
  FloeSession *s0 = session(g0), *s3 = session(g3);
  target(s0, "init", NULL, 0);
  char *path = save(s0, "train0");
  restore(s3, path);
  free(path);
  train_steps(s0, 3);
  train_steps(s3, 3);
  FloeTensor *a = run1(s0, "whole", NULL, 0), *b = run1(s3, "whole", NULL, 0);
  same(a, b, "the trained values");
  /* rows 8 was never looked up: unchanged; row 9 was (twice in one batch) */
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_session_free(s0);
  floe_session_free(s3);
  floe_graph_free(g0);
  floe_graph_free(g3);
}
END_TEST

/* A sampled softmax over 20 classes of dim 4, 6 rows, 5 classes sampled: weights and biases
 * whole (shards 0) or in `shards` shards; SGD on them. */
static FloeGraph *sampled_model(int shards) {
  FloeGraph *g = floe_graph_new();
  FloeTensor *x = floe_tensor_new(FLOE_F32, 2, (int64_t[]){6, 4}, NULL);
  float *xd = floe_tensor_data(x);
  for (int i = 0; i < 24; i++) xd[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  FloeOutput in = floe_const(g, "inputs", x);
  floe_tensor_release(x);
  FloeTensor *y = floe_tensor_new(FLOE_I64, 1, (int64_t[]){6}, NULL);
  const int64_t lab[6] = {0, 3, 19, 3, 7, 12};
  memcpy(floe_tensor_data(y), lab, sizeof lab);
  FloeOutput labels = floe_const(g, "labels", y);
  floe_tensor_release(y);
  FloeInitializer wi = floe_init_uniform(-1, 1, 11), bi = floe_init_uniform(-0.5, 0.5, 12);
  FloeOutput loss;
  if (shards == 0) {
    FloeVariable w = floe_variable(g, "sw", FLOE_F32, s2(20, 4), wi);
    FloeVariable b = floe_variable(g, "sb", FLOE_F32, floe_shape_make(1, (int64_t[]){20}), bi);
    loss = floe_sampled_softmax_loss(g, "sampled", w.value, b.value, in, labels, 5, 20, 1, 3);
    floe_unary(g, "Identity", "w_whole", w.value);
    floe_unary(g, "Identity", "b_whole", b.value);
  } else {
    FloeShardedVariable w = floe_sharded_variable(g, "sw", FLOE_F32, s2(20, 4), wi, 0, shards, 0);
    FloeShardedVariable b = floe_sharded_variable(g, "sb", FLOE_F32,
                                                  floe_shape_make(1, (int64_t[]){20}), bi, 0,
                                                  shards, 0);
    loss = floe_sampled_softmax_loss_sharded(g, "sampled", &w, &b, in, labels, 5, 20, 1, 3);
    floe_unary(g, "Identity", "w_whole", w.value);
    floe_unary(g, "Identity", "b_whole", b.value);
  }
  floe_unary(g, "Identity", "loss", loss);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.5;
  floe_minimize(g, "train", loss, &o, NULL, 0);
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static void close_to(FloeTensor *a, FloeTensor *b, const char *what) {
  int64_t n = floe_tensor_num_elements(a);
  ck_assert_int_eq(n, floe_tensor_num_elements(b));
  const float *x = floe_tensor_data(a), *y = floe_tensor_data(b);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(fabsf(x[i] - y[i]) <= 1e-5f * (1 + fabsf(x[i])), "%s[%lld]: %g vs %g", what,
                  (long long)i, x[i], y[i]);
}

START_TEST(test_sampled_softmax_sharded) {
  FloeGraph *g0 = sampled_model(0), *g3 = sampled_model(3);
  FloeSession *s0 = session(g0), *s3 = session(g3);
  target(s0, "init", NULL, 0);
  char *path = save(s0, "sampled0");
  restore(s3, path); /* the same starting values */
  free(path);
  FloeTensor *l0 = run1(s0, "loss", NULL, 0), *l3 = run1(s3, "loss", NULL, 0);
  ck_assert_msg(*(float *)floe_tensor_data(l0) > 0.1f, "a loss of %g", *(float *)floe_tensor_data(l0));
  close_to(l0, l3, "the loss");
  floe_tensor_release(l0);
  floe_tensor_release(l3);
  FloeTensor *w_before = run1(s0, "w_whole", NULL, 0);
  for (int i = 0; i < 3; i++) {
    target(s0, "train", NULL, 0);
    target(s3, "train", NULL, 0);
  }
  const char *names[2] = {"w_whole", "b_whole"};
  for (int k = 0; k < 2; k++) {
    FloeTensor *a = run1(s0, names[k], NULL, 0), *b = run1(s3, names[k], NULL, 0);
    close_to(a, b, names[k]);
    if (k == 0) /* training moved the true classes' rows at least */
      ck_assert_msg(memcmp(floe_tensor_data(a), floe_tensor_data(w_before), 80 * 4) != 0,
                    "training changed nothing");
    floe_tensor_release(a);
    floe_tensor_release(b);
  }
  floe_tensor_release(w_before);
  floe_session_free(s0);
  floe_session_free(s3);
  floe_graph_free(g0);
  floe_graph_free(g3);
}
END_TEST

/* The Adam slot m of emb, whole (concatenating a sharded model's). */
static FloeTensor *slot_m(FloeSession *s, int shards) {
  if (shards == 0) return run1(s, "emb/m/read", NULL, 0);
  FloeTensor *whole = floe_tensor_new(FLOE_F32, 2, (int64_t[]){10, 3}, NULL);
  size_t off = 0;
  for (int k = 0; k < shards; k++) {
    char name[64];
    snprintf(name, sizeof name, "emb/part_%d/m/read", k);
    FloeTensor *p = run1(s, name, NULL, 0);
    memcpy((char *)floe_tensor_data(whole) + off, floe_tensor_data(p),
           (size_t)floe_tensor_num_elements(p) * 4);
    off += (size_t)floe_tensor_num_elements(p) * 4;
    floe_tensor_release(p);
  }
  return whole;
}

START_TEST(test_restore_across_shard_counts) {
  FloeGraph *g3 = model(3, FLOE_OPT_ADAM, true), *g2 = model(2, FLOE_OPT_ADAM, true),
            *g0 = model(0, FLOE_OPT_ADAM, true), *g3b = model(3, FLOE_OPT_ADAM, true);
  FloeSession *s3 = session(g3), *s2 = session(g2), *s0 = session(g0), *s3b = session(g3b);
  target(s3, "init", NULL, 0);
  train_steps(s3, 2);
  char *p3 = save(s3, "three");
  restore(s2, p3);
  restore(s0, p3);
  char *p2 = save(s2, "two");
  restore(s3b, p2);
  FloeTensor *w3 = run1(s3, "whole", NULL, 0), *w2 = run1(s2, "whole", NULL, 0),
             *w0 = run1(s0, "whole", NULL, 0), *w3b = run1(s3b, "whole", NULL, 0);
  same(w3, w2, "3 -> 2 shards");
  same(w3, w0, "3 shards -> one variable");
  same(w3, w3b, "3 -> 2 -> 3 shards");
  FloeTensor *m3 = slot_m(s3, 3), *m2 = slot_m(s2, 2), *m0 = slot_m(s0, 0);
  same(m3, m2, "Adam's m, 3 -> 2 shards");
  same(m3, m0, "Adam's m, 3 shards -> one variable");
  /* Training goes on alike from both. */
  train_steps(s3, 1);
  train_steps(s0, 1);
  FloeTensor *n3 = run1(s3, "whole", NULL, 0), *n0 = run1(s0, "whole", NULL, 0);
  same(n3, n0, "a step after the restore");
  FloeTensor *all[] = {w3, w2, w0, w3b, m3, m2, m0, n3, n0};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
  free(p3);
  free(p2);
  floe_session_free(s3);
  floe_session_free(s2);
  floe_session_free(s0);
  floe_session_free(s3b);
  floe_graph_free(g3);
  floe_graph_free(g2);
  floe_graph_free(g0);
  floe_graph_free(g3b);
}
END_TEST

START_TEST(test_refusals) {
  FloeGraph *g = floe_graph_new();
  floe_sharded_variable(g, "x", FLOE_F32, s2(10, 3), floe_init_zeros(), 0, 2, 100);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "not both"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  g = floe_graph_new();
  floe_sharded_variable(g, "x", FLOE_F32, s2(10, 3), floe_init_zeros(), 2, 2, 0);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "axis 2"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  g = floe_graph_new();
  FloeShardedVariable v = floe_sharded_variable(g, "x", FLOE_F32, s2(10, 3), floe_init_zeros(),
                                                0, 3, 0);
  FloeOutput fid = floe_placeholder(g, "fid", FLOE_F32, floe_shape_make(1, (int64_t[]){2}));
  floe_embedding_lookup_sharded(g, "bad", &v, fid);
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "i32 or i64"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  /* ids out of range fail when the step runs, naming the index */
  FloeGraph *g3 = model(3, FLOE_OPT_SGD, false);
  FloeSession *s = session(g3);
  target(s, "init", NULL, 0);
  for (int bad = 0; bad < 2; bad++) {
    FloeTensor *ids = ids_tensor(0);
    ((int32_t *)floe_tensor_data(ids))[4] = bad ? 10 : -1;
    FloeFeed f = {"ids", ids};
    const char *fetch = "rows";
    FloeTensor *out = NULL;
    FloeStatus *st = floe_status_new();
    ck_assert_int_eq(floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st), FLOE_INVALID_ARGUMENT);
    ck_assert_msg(strstr(floe_status_message(st), "outside variable 'emb/part_"), "%s",
                  floe_status_message(st));
    floe_status_free(st);
    floe_tensor_release(ids);
  }
  floe_session_free(s);
  floe_graph_free(g3);
}
END_TEST

int main(void) {
  /* a private folder for the checkpoints (mkdtemp's template), in $TMPDIR or else /tmp */
  const char *base = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/floe-sharded-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(g_dir)) return 1;
  Suite *s = suite_create("sharded");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_shard_sizes);
  tcase_add_test(tc, test_lookup_equals_gather);
  tcase_add_test(tc, test_training_through_lookup);
  tcase_add_test(tc, test_restore_across_shard_counts);
  tcase_add_test(tc, test_sampled_softmax_sharded);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) failed++;
  return failed ? 1 : 0;
}
