/* SPDX-License-Identifier: Apache-2.0 */
/* test_mem_order.c - memory-aware scheduling (core/exec/mem_order.c), white-box: the ranks
 * an executor gives its nodes. Four branches each make a 1 MiB tensor from x and reduce it
 * to a scalar: in rank order each big tensor's reader comes right after it (one big tensor
 * alive at a time, where the graph's order makes all four first); equal branches keep the
 * graph's order; without the option there are no ranks; and a step computes the same
 * values either way. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "exec/exec_private.h"
#include "floe/floe.h"
#include "runtime/runtime.h"

enum { BRANCHES = 4 };

/* x [1024] -> big_k = Tile(x, [256]) (1 MiB) -> small_k = Sum(big_k) -> out = AddN(small). */
static FloeGraph *branches(void) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[1] = {1024};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, d));
  FloeTensor *m = harness_i32(1, (const int64_t[]){1}, (const int32_t[]){256});
  FloeTensor *a = harness_i32(1, (const int64_t[]){1}, (const int32_t[]){0});
  FloeOutput mult = floe_const(g, "mult", m), axes = floe_const(g, "axes", a);
  floe_tensor_release(m);
  floe_tensor_release(a);
  /* every Tile before every Sum in the graph's order: ranks that only followed it would run
   * the four big tensors first */
  FloeOutput big[BRANCHES], small[BRANCHES];
  for (int k = 0; k < BRANCHES; k++) {
    char name[16];
    snprintf(name, sizeof name, "big%d", k);
    big[k] = floe_binary(g, "Tile", name, x, mult);
  }
  for (int k = 0; k < BRANCHES; k++) {
    char name[16];
    snprintf(name, sizeof name, "small%d", k);
    small[k] = floe_binary(g, "Sum", name, big[k], axes);
  }
  FloeNodeBuilder *b = floe_node_begin(g, "AddN", "out");
  floe_node_add_input_list(b, small, BRANCHES);
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  return g;
}

/* An executor for every node of g but the fed x, on rt's first device; *plan_nodes owned by
 * the caller (free after the executor). */
static FloeExecutor *executor(FloeRuntime *rt, FloeGraph *g, bool memory_order,
                              FloeExecNodeSpec **plan_nodes) {
  int n = floe_graph_num_nodes(g), k = 0;
  FloeExecNodeSpec *specs = calloc((size_t)n, sizeof *specs);
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < n; i++) {
    const FloeNode *node = floe_graph_node(g, i);
    if (!strcmp(node->name, "x")) continue;
    specs[k].node = node;
    specs[k].device = rt->devices[0];
    specs[k].kernel = floe__kernel_find(rt, node, rt->devices[0]->props.type, st);
    ck_assert_msg(specs[k].kernel, "%s", floe_status_message(st));
    k++;
  }
  FloeOutput feed = {floe_graph_find(g, "x"), 0}, fetch = {floe_graph_find(g, "out"), 0};
  FloeExecPlan plan = {.rt = rt, .graph = g, .nodes = specs, .num_nodes = k, .feeds = &feed,
                       .num_feeds = 1, .fetches = &fetch, .num_fetches = 1,
                       .memory_order = memory_order};
  FloeExecutor *e = floe__executor_new(&plan, st);
  ck_assert_msg(e, "%s", floe_status_message(st));
  floe_status_free(st);
  *plan_nodes = specs;
  return e;
}

static int rank_of(const FloeExecutor *e, const char *name) {
  for (int i = 0; i < e->num_nodes; i++)
    if (!strcmp(e->nodes[i].node->name, name)) return e->rank[i];
  ck_abort_msg("no node %s", name);
  return -1;
}

START_TEST(each_big_tensor_is_read_before_the_next_is_made) {
  FloeRuntime *rt = harness_runtime(2);
  FloeGraph *g = branches();
  FloeExecNodeSpec *specs;
  FloeExecutor *e = executor(rt, g, true, &specs);
  ck_assert_ptr_nonnull(e->rank);
  int prev = -1;
  for (int k = 0; k < BRANCHES; k++) {
    char big[16], sum[16];
    snprintf(big, sizeof big, "big%d", k);
    snprintf(sum, sizeof sum, "small%d", k);
    int rb = rank_of(e, big), rs = rank_of(e, sum);
    ck_assert_msg(rs == rb + 1, "%s ranked %d, its reader %s %d", big, rb, sum, rs);
    /* equal branches: the graph's order */
    ck_assert_msg(rb > prev, "%s ranked %d after %d", big, rb, prev);
    prev = rs;
  }
  ck_assert_int_gt(rank_of(e, "out"), prev);
  /* every rank once */
  bool *seen = calloc((size_t)e->num_nodes, 1);
  for (int i = 0; i < e->num_nodes; i++) {
    ck_assert(e->rank[i] >= 0 && e->rank[i] < e->num_nodes && !seen[e->rank[i]]);
    seen[e->rank[i]] = true;
  }
  free(seen);
  floe__executor_free(e);
  free(specs);
  /* off: no ranks */
  e = executor(rt, g, false, &specs);
  ck_assert_ptr_null(e->rank);
  floe__executor_free(e);
  free(specs);
  floe_graph_free(g);
  floe_runtime_free(rt);
}
END_TEST

/* The same values with the option on and off, through sessions (2 threads). */
START_TEST(same_values_either_way) {
  FloeGraph *g = branches();
  const int64_t d[1] = {1024};
  FloeTensor *xt = harness_random(FLOE_F32, 1, d, 3, -1, 1);
  FloeFeed feed = {"x", xt};
  const char *fetch = "out";
  FloeTensor *out[2];
  for (int on = 0; on < 2; on++) {
    setenv("FLOE_OPT_MEMORY_SCHEDULING", on ? "1" : "0", 1);
    FloeSession *s = harness_session(g, NULL);
    FloeStatus *st = floe_status_new();
    ck_assert_msg(floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &out[on], st) == FLOE_OK,
                  "%s", floe_status_message(st));
    floe_status_free(st);
    floe_session_free(s);
  }
  unsetenv("FLOE_OPT_MEMORY_SCHEDULING");
  ck_assert(memcmp(floe_tensor_data(out[0]), floe_tensor_data(out[1]), sizeof(float)) == 0);
  /* 4 x 256 x sum(x), computed here */
  double want = 0;
  const float *x = floe_tensor_data(xt);
  for (int i = 0; i < 1024; i++) want += x[i];
  want *= 256 * BRANCHES;
  ck_assert_msg(fabs(*(const float *)floe_tensor_data(out[1]) - want) < 1e-2 * (1 + fabs(want)),
                "out %g, want %g", *(const float *)floe_tensor_data(out[1]), want);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  setenv("FLOE_NUM_THREADS", "2", 0);
  Suite *s = suite_create("mem_order");
  TCase *tc = tcase_create("mem_order");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, each_big_tensor_is_read_before_the_next_is_made);
  tcase_add_test(tc, same_values_either_way);
  suite_add_tcase(s, tc);
  return harness_run_suite(s);
}
