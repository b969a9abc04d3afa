/* test_fuse.c - the session's graph rewrites (core/fuse.c): a conv -> bias -> relu ->
 * max-pool model and its gradients computed with fusion on and off (FLOE_FUSION=0) give the
 * same values; the fused ops really run (the profile names them) and the replaced ones do
 * not; a chain is left alone when an inner result is fetched or has another consumer; the
 * user's graph is not changed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

typedef struct Model {
  FloeGraph *g;
  char loss[64], dx[64], df[64], db[64], biased[64];
  int num_nodes;
} Model;

/* x [3,8,8,2] -> Conv2D 3x3x2x4 SAME -> BiasAdd -> Relu -> MaxPool 2x2 -> sum of squares;
 * gradients at x, the filter and the bias. extra_consumer: the conv output also feeds an
 * Identity whose sum is added to the loss (so Conv2D has two consumers). */
static Model model(FloeDType dt, int extra_consumer) {
  Model m;
  memset(&m, 0, sizeof m);
  FloeGraph *g = m.g = floe_graph_new();
  const int64_t xd[4] = {3, 8, 8, 2}, fd[4] = {3, 3, 2, 4}, bd[1] = {4};
  FloeTensor *xt = harness_random(dt, 4, xd, 1, -1, 1);
  FloeTensor *ft = harness_random(dt, 4, fd, 2, -0.5, 0.5);
  FloeTensor *bt = harness_random(dt, 1, bd, 3, -0.3, 0.3);
  FloeOutput x = floe_const(g, "x", xt), f = floe_const(g, "f", ft), b = floe_const(g, "b", bt);
  floe_tensor_release(xt); /* the graph holds its own references */
  floe_tensor_release(ft);
  floe_tensor_release(bt);
  FloeNodeBuilder *nb = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(nb, x);
  floe_node_add_input(nb, f);
  floe_node_set_attr_int_list(nb, "strides", (const int64_t[]){1, 1, 1, 1}, 4);
  floe_node_set_attr_string(nb, "padding", "SAME");
  FloeOutput conv = floe_out(floe_node_finish(nb), 0);
  FloeOutput biased = floe_binary(g, "BiasAdd", "biased", conv, b);
  FloeOutput relu = floe_unary(g, "Relu", "relu", biased);
  nb = floe_node_begin(g, "MaxPool", "pool");
  floe_node_add_input(nb, relu);
  floe_node_set_attr_int_list(nb, "ksize", (const int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_int_list(nb, "strides", (const int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_string(nb, "padding", "VALID");
  FloeOutput pool = floe_out(floe_node_finish(nb), 0);
  FloeOutput sq = floe_unary(g, "Square", "sq", pool);
  FloeTensor *axes_t = harness_i32(1, (const int64_t[]){4}, (const int32_t[]){0, 1, 2, 3});
  FloeOutput axes = floe_const(g, "axes", axes_t);
  floe_tensor_release(axes_t);
  FloeOutput loss = floe_binary(g, "Sum", "loss0", sq, axes);
  if (extra_consumer) {
    FloeOutput other = floe_binary(g, "Sum", "other", floe_unary(g, "Identity", "id", conv), axes);
    loss = floe_binary(g, "Add", "loss1", loss, other);
  }
  FloeOutput xs[3] = {x, f, b}, dxs[3];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(g, &loss, 1, xs, 3, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  snprintf(m.loss, sizeof m.loss, "%s", floe_node_name(loss.node));
  snprintf(m.dx, sizeof m.dx, "%s", floe_node_name(dxs[0].node));
  snprintf(m.df, sizeof m.df, "%s", floe_node_name(dxs[1].node));
  snprintf(m.db, sizeof m.db, "%s", floe_node_name(dxs[2].node));
  snprintf(m.biased, sizeof m.biased, "biased");
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  m.num_nodes = floe_graph_num_nodes(g);
  return m;
}

/* Runs the fetches with fusion on or off; outs[i] new references; *ran gets how many times
 * op `watch` ran (from the profile). */
static void run(const Model *m, int fusion, const char *const *fetches, int n, FloeTensor **outs,
                const char *watch, int64_t *ran) {
  setenv("FLOE_FUSION", fusion ? "1" : "0", 1);
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(m->g, NULL, st);
  ck_assert_msg(s, "%s", floe_status_message(st));
  floe_session_set_profiling(s, 1);
  ck_assert_msg(floe_session_run(s, NULL, 0, fetches, n, NULL, 0, outs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeOpProfile *rows;
  int nr;
  ck_assert(floe_session_profile(s, &rows, &nr, st) == FLOE_OK);
  *ran = 0;
  for (int i = 0; i < nr; i++)
    if (!strcmp(rows[i].op, watch)) *ran = rows[i].calls;
  free(rows);
  floe_session_free(s);
  floe_status_free(st);
  unsetenv("FLOE_FUSION");
}

static int64_t ran_op(const Model *m, int fusion, const char *const *fetches, int n,
                      const char *watch) {
  FloeTensor *outs[4];
  int64_t ran;
  run(m, fusion, fetches, n, outs, watch, &ran);
  for (int i = 0; i < n; i++) floe_tensor_release(outs[i]);
  return ran;
}

START_TEST(test_fused_equals_unfused) {
  const FloeDType dts[2] = {FLOE_F32, FLOE_F64};
  for (int d = 0; d < 2; d++) {
    Model m = model(dts[d], 0);
    const char *fetches[4] = {m.loss, m.dx, m.df, m.db};
    FloeTensor *on[4], *off[4];
    int64_t fused_conv, plain_conv;
    run(&m, 1, fetches, 4, on, "_FusedConv2DBiasRelu", &fused_conv);
    run(&m, 0, fetches, 4, off, "_FusedConv2DBiasRelu", &plain_conv);
    ck_assert_int_eq(fused_conv, 1);
    ck_assert_int_eq(plain_conv, 0);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "_FusedMaxPoolGradRelu"), 1);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "BiasAdd"), 0);
    ck_assert_int_eq(ran_op(&m, 1, fetches, 4, "MaxPoolGrad"), 0);
    ck_assert_int_eq(ran_op(&m, 0, fetches, 4, "MaxPoolGrad"), 1);
    double tol = dts[d] == FLOE_F32 ? 1e-5 : 1e-12;
    for (int i = 0; i < 4; i++) {
      harness_assert_close(on[i], off[i], tol, tol, fetches[i]);
      floe_tensor_release(on[i]);
      floe_tensor_release(off[i]);
    }
    /* The session fused a clone: the user's graph is as it was. */
    ck_assert_int_eq(floe_graph_num_nodes(m.g), m.num_nodes);
    for (int i = 0; i < floe_graph_num_nodes(m.g); i++)
      ck_assert(strncmp(floe_node_op(floe_graph_node(m.g, i)), "_Fused", 6) != 0);
    floe_graph_free(m.g);
  }
}
END_TEST

START_TEST(test_fetched_or_shared_results_are_not_fused) {
  /* Fetching the BiasAdd's output keeps the forward chain as it is (the backward one still
   * fuses). */
  Model m = model(FLOE_F32, 0);
  const char *fetches[2] = {m.dx, m.biased};
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "_FusedConv2DBiasRelu"), 0);
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "BiasAdd"), 1);
  ck_assert_int_eq(ran_op(&m, 1, fetches, 2, "_FusedMaxPoolGradRelu"), 1);
  floe_graph_free(m.g);
  /* The convolution's output read by another op too: no forward fusion, same values. */
  m = model(FLOE_F32, 1);
  const char *f2[2] = {m.loss, m.df};
  ck_assert_int_eq(ran_op(&m, 1, f2, 2, "_FusedConv2DBiasRelu"), 0);
  ck_assert_int_eq(ran_op(&m, 1, f2, 2, "Conv2D"), 1);
  FloeTensor *on[2], *off[2];
  int64_t ran;
  run(&m, 1, f2, 2, on, "Conv2D", &ran);
  run(&m, 0, f2, 2, off, "Conv2D", &ran);
  for (int i = 0; i < 2; i++) {
    harness_assert_close(on[i], off[i], 1e-5, 1e-5, f2[i]);
    floe_tensor_release(on[i]);
    floe_tensor_release(off[i]);
  }
  floe_graph_free(m.g);
}
END_TEST

int main(void) {
  setenv("FLOE_NUM_THREADS", "2", 0);
  Suite *s = suite_create("fuse");
  TCase *tc = tcase_create("fuse");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fused_equals_unfused);
  tcase_add_test(tc, test_fetched_or_shared_results_are_not_fused);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
