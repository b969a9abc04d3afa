/* SPDX-License-Identifier: Apache-2.0 */
/* test_replica.c - floe_replica_device_setter through the public API: an MLP with Adam's
 * slots and the global step placed over two ps tasks round-robin and greedily by bytes
 * (figures worked out by hand from the layer sizes), updates left to follow their variables,
 * everything else on the worker, variables that already request a device kept, and the
 * refusals (no graph, old options, num_ps, a bad job or worker device, a group whose
 * variables request two devices). */
#include <stdbool.h>
#include <check.h>
#include <floe/floe.h>
#include <floe/floe_train.h>
#include <stdio.h>
#include <string.h>

/* x [4, 8] -> dense 16 -> dense 2, loss, Adam: kernels 8x16 and 16x2, biases 16 and 2. */
static FloeGraph *mlp(void) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (int64_t[]){4, 8}));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I32, floe_shape_make(1, (int64_t[]){4}));
  FloeOutput h = floe_layer_dense(g, "d1", x, 16, FLOE_ACT_RELU, 1);
  FloeOutput logits = floe_layer_dense(g, "d2", h, 2, FLOE_ACT_NONE, 2);
  FloeOutput loss = floe_sparse_softmax_cross_entropy(g, "loss", logits, y);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_ADAM);
  floe_minimize(g, "train", loss, &o, NULL, 0);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  return g;
}

static const char *dev(FloeGraph *g, const char *name) {
  FloeNode *n = floe_graph_find(g, name);
  ck_assert_msg(n != NULL, "no node %s", name);
  return floe_node_device(n);
}

static bool takes_resource(FloeNode *n) {
  for (int j = 0; j < floe_node_num_inputs(n); j++) {
    FloeOutput in = floe_node_input(n, j);
    if (floe_node_output_dtype(in.node, in.index) == FLOE_RESOURCE) return true;
  }
  return false;
}

/* Every variable on a ps, each slot with its variable, resource users unplaced, the rest on
 * the worker. */
static void check_layout(FloeGraph *g, const char *worker) {
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    const char *d = floe_node_device(n);
    if (!strcmp(floe_node_op(n), "VarHandleOp"))
      ck_assert_msg(!strncmp(d, "/job:ps/task:", 13), "%s on %s", floe_node_name(n), d);
    else if (takes_resource(n))
      ck_assert_msg(!d[0], "%s (%s) on %s", floe_node_name(n), floe_node_op(n), d);
    else
      ck_assert_msg(!strcmp(d, worker), "%s on '%s'", floe_node_name(n), d);
  }
  const char *vars[] = {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};
  for (int i = 0; i < 4; i++) {
    char m[96], v[96];
    snprintf(m, sizeof m, "%s/m", vars[i]);
    snprintf(v, sizeof v, "%s/v", vars[i]);
    ck_assert_str_eq(dev(g, m), dev(g, vars[i]));
    ck_assert_str_eq(dev(g, v), dev(g, vars[i]));
  }
}

START_TEST(test_round_robin) {
  FloeGraph *g = mlp();
  FloeReplicaDeviceOptions o;
  floe_replica_device_options_init(&o);
  o.num_ps = 2;
  o.worker_device = "/job:worker/task:1";
  int64_t bytes[2] = {-1, -1};
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_replica_device_setter(g, &o, bytes, st) == FLOE_OK, "%s", floe_status_message(st));
  check_layout(g, "/job:worker/task:1");
  /* Groups in order of their first variable: d1/kernel (+m, v: 3 x 512 B), d1/bias (3 x 64),
   * d2/kernel (3 x 128), d2/bias (3 x 8), global_step (8 B, made by floe_minimize after the
   * layers), alternating ps 0 and 1. */
  ck_assert_str_eq(dev(g, "d1/kernel"), "/job:ps/task:0/device:cpu:0");
  ck_assert_str_eq(dev(g, "d1/bias"), "/job:ps/task:1/device:cpu:0");
  ck_assert_str_eq(dev(g, "d2/kernel"), "/job:ps/task:0/device:cpu:0");
  ck_assert_str_eq(dev(g, "d2/bias"), "/job:ps/task:1/device:cpu:0");
  ck_assert_str_eq(dev(g, "global_step"), "/job:ps/task:0/device:cpu:0");
  ck_assert_int_eq(bytes[0], 3 * (512 + 128) + 8);
  ck_assert_int_eq(bytes[1], 3 * (64 + 8));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(test_greedy_by_bytes) {
  FloeGraph *g = mlp();
  FloeReplicaDeviceOptions o;
  floe_replica_device_options_init(&o);
  o.num_ps = 2;
  o.strategy = FLOE_PS_GREEDY_BYTES;
  o.worker_device = "/job:worker/task:0/device:cpu:0";
  int64_t bytes[2];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_replica_device_setter(g, &o, bytes, st) == FLOE_OK, "%s", floe_status_message(st));
  check_layout(g, "/job:worker/task:0/device:cpu:0");
  /* d1/kernel's 1536 B go to ps 0; every later group is smaller than that, so all of them
   * go to ps 1 (192 + 384 + 24 + 8 < 1536). */
  ck_assert_str_eq(dev(g, "d1/kernel"), "/job:ps/task:0/device:cpu:0");
  ck_assert_str_eq(dev(g, "d1/bias"), "/job:ps/task:1/device:cpu:0");
  ck_assert_str_eq(dev(g, "d2/kernel"), "/job:ps/task:1/device:cpu:0");
  ck_assert_str_eq(dev(g, "d2/bias"), "/job:ps/task:1/device:cpu:0");
  ck_assert_str_eq(dev(g, "global_step"), "/job:ps/task:1/device:cpu:0");
  ck_assert_int_eq(bytes[0], 1536);
  ck_assert_int_eq(bytes[1], 192 + 384 + 24 + 8);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(test_requests_kept) {
  FloeGraph *g = mlp();
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_node_request_device(floe_graph_find(g, "d2/kernel"),
                                            "/job:ps/task:2/device:cpu:0", st), FLOE_OK);
  ck_assert_int_eq(floe_node_request_device(floe_graph_find(g, "d1/MatMul"), "/job:chief",
                                            st), FLOE_OK);
  FloeReplicaDeviceOptions o;
  floe_replica_device_options_init(&o);
  o.num_ps = 3;
  ck_assert_msg(floe_replica_device_setter(g, &o, NULL, st) == FLOE_OK, "%s", floe_status_message(st));
  /* The kernel's slots follow its request; without worker_device other nodes stay free. */
  ck_assert_str_eq(dev(g, "d2/kernel/m"), "/job:ps/task:2/device:cpu:0");
  ck_assert_str_eq(dev(g, "d2/kernel/v"), "/job:ps/task:2/device:cpu:0");
  ck_assert_str_eq(dev(g, "d1/MatMul"), "/job:chief");
  ck_assert_str_eq(dev(g, "x"), "");
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

static void refused(FloeGraph *g, const FloeReplicaDeviceOptions *o, floe_code code,
                    const char *needle) {
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_replica_device_setter(g, o, NULL, st), code);
  ck_assert_msg(strstr(floe_status_message(st), needle), "'%s' lacks '%s'",
                floe_status_message(st), needle);
  floe_status_free(st);
}

START_TEST(test_refusals) {
  FloeGraph *g = mlp();
  FloeReplicaDeviceOptions o;
  floe_replica_device_options_init(&o);
  refused(NULL, &o, FLOE_INVALID_ARGUMENT, "graph is NULL");
  refused(g, NULL, FLOE_INVALID_ARGUMENT, "options_init");
  o.num_ps = 0;
  refused(g, &o, FLOE_INVALID_ARGUMENT, "num_ps is 0");
  o.num_ps = 1;
  o.ps_job = "Ps";
  refused(g, &o, FLOE_INVALID_ARGUMENT, "\"Ps\"");
  o.ps_job = NULL;
  o.strategy = (FloePsStrategy)7;
  refused(g, &o, FLOE_INVALID_ARGUMENT, "strategy 7");
  o.strategy = FLOE_PS_ROUND_ROBIN;
  o.worker_device = "/job:worker/task:x";
  refused(g, &o, FLOE_INVALID_ARGUMENT, "worker_device");
  o.worker_device = NULL;
  /* d1/kernel and its slot m asked for two places: nothing may be changed. */
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_node_request_device(floe_graph_find(g, "d1/kernel"),
                                            "/job:ps/task:0", st), FLOE_OK);
  ck_assert_int_eq(floe_node_request_device(floe_graph_find(g, "d1/kernel/m"),
                                            "/job:ps/task:1", st), FLOE_OK);
  refused(g, &o, FLOE_INVALID_ARGUMENT, "one device");
  ck_assert_str_eq(dev(g, "d2/kernel"), "");
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replica");
  TCase *tc = tcase_create("device_setter");
  tcase_add_test(tc, test_round_robin);
  tcase_add_test(tc, test_greedy_by_bytes);
  tcase_add_test(tc, test_requests_kept);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
