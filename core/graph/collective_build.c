/* SPDX-License-Identifier: Apache-2.0 */
/* collective_build.c - the builders of floe_collective.h: one node of ops_collective.def each. */
#include <string.h>

#include "floe/floe_collective.h"
#include "graph.h"

void floe_collective_options_init(FloeCollectiveOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

/* A node of op with the group's attributes; NULL (and g's error) when opts is unusable. */
static FloeNodeBuilder *begin(FloeGraph *g, const char *op, const char *name,
                              const FloeCollectiveOptions *opts) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  if (!opts || opts->struct_size < offsetof(FloeCollectiveOptions, timeout_ms) + sizeof(int64_t)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s '%s': FloeCollectiveOptions is NULL or not initialised (call "
                     "floe_collective_options_init)",
                     op, name ? name : "(automatic)");
    floe_node_finish(nb);
    return NULL;
  }
  floe_node_set_attr_int(nb, "group_size", opts->group_size);
  floe_node_set_attr_int(nb, "group_key", opts->group_key);
  floe_node_set_attr_int(nb, "instance_key", opts->instance_key);
  floe_node_set_attr_string(nb, "communication_hint",
                            opts->backend && *opts->backend ? opts->backend : "auto");
  floe_node_set_attr_int(nb, "timeout_ms", opts->timeout_ms);
  return nb;
}

static FloeOutput with_input(FloeGraph *g, const char *op, const char *name, FloeOutput x,
                             const char *merge, const FloeCollectiveOptions *opts) {
  FloeNodeBuilder *nb = begin(g, op, name, opts);
  if (!nb) return floe_out(NULL, 0);
  floe_node_add_input(nb, x);
  if (merge) floe_node_set_attr_string(nb, "merge_op", merge);
  return floe_out(floe_node_finish(nb), 0);
}

static const char *merge_name(FloeGraph *g, const char *op, FloeReduceOp r) {
  static const char *const names[] = {"sum", "mean", "max", "min", "prod"};
  if ((unsigned)r < sizeof names / sizeof *names) return names[r];
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                   "%s: reduction %d is not one of FLOE_REDUCE_SUM, MEAN, MAX, MIN, PROD", op,
                   (int)r);
  return NULL;
}

FloeOutput floe_all_reduce(FloeGraph *g, const char *name, FloeOutput x, FloeReduceOp op,
                           const FloeCollectiveOptions *opts) {
  const char *m = merge_name(g, "CollectiveReduce", op);
  if (!m) return floe_out(NULL, 0);
  return with_input(g, "CollectiveReduce", name, x, m, opts);
}

FloeOutput floe_all_gather(FloeGraph *g, const char *name, FloeOutput x,
                           const FloeCollectiveOptions *opts) {
  return with_input(g, "CollectiveGather", name, x, NULL, opts);
}

FloeOutput floe_reduce_scatter(FloeGraph *g, const char *name, FloeOutput x, FloeReduceOp op,
                               const FloeCollectiveOptions *opts) {
  const char *m = merge_name(g, "CollectiveReduceScatter", op);
  if (!m) return floe_out(NULL, 0);
  return with_input(g, "CollectiveReduceScatter", name, x, m, opts);
}

FloeOutput floe_broadcast_send(FloeGraph *g, const char *name, FloeOutput x,
                               const FloeCollectiveOptions *opts) {
  return with_input(g, "CollectiveBcastSend", name, x, NULL, opts);
}

FloeOutput floe_broadcast_recv(FloeGraph *g, const char *name, FloeDType dt, FloeShape shape,
                               const FloeCollectiveOptions *opts) {
  FloeNodeBuilder *nb = begin(g, "CollectiveBcastRecv", name, opts);
  if (!nb) return floe_out(NULL, 0);
  floe_node_set_attr_type(nb, "T", dt);
  floe_node_set_attr_shape(nb, "shape", shape);
  return floe_out(floe_node_finish(nb), 0);
}
