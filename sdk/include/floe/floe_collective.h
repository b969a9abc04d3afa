/* SPDX-License-Identifier: Apache-2.0 */
/* floe_collective.h - collective operations in the graph (docs/collectives.md).
 *
 * A group is group_size devices, each running its collective ops with one group_key: the
 * devices of one process (FLOE_CPU_DEVICES=4 gives four CPU devices), or of several tasks
 * of a cluster, each task building its own graph (between-graph replication). Each op is
 * an instance: every member runs the op of one instance_key once per step, with the same
 * shape and dtype. Ranks follow the members' full device names (job, then task, then
 * device). Put each op on its member's device (floe_node_set_device /
 * floe_graph_set_device_scope).
 *
 * The bytes move through a backend: the built-in ring ("ring": over Floe's transport, the
 * reference every backend is tested against), or a collective plugin's ("gloo").
 * FloeCollectiveOptions.backend picks one per op; NULL or "auto" takes FLOE_COLLECTIVE, else
 * the ring.
 *
 * Builders record g's sticky error on failure (the message names the node) and return an
 * invalid output; outputs are borrowed from g. name NULL: an automatic name. */
#ifndef FLOE_COLLECTIVE_H
#define FLOE_COLLECTIVE_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FloeCollectiveOptions {
  size_t struct_size;        /* sizeof(FloeCollectiveOptions) */
  int group_size;            /* devices in the group (>= 1) */
  int64_t group_key;         /* names the group; the same on every member */
  int64_t instance_key;      /* names the operation within the group; the same on every member */
  const char *backend;       /* NULL/"auto", "ring", or a plugin's ("gloo"); copied */
  int64_t timeout_ms;        /* how long the group may take to form (0: 5 minutes) */
} FloeCollectiveOptions;

/* Zeroes opts and sets struct_size. */
FLOE_API void floe_collective_options_init(FloeCollectiveOptions *opts);

/* CollectiveReduce: every member gets op over the members' x, elementwise. */
FLOE_API FloeOutput floe_all_reduce(FloeGraph *g, const char *name, FloeOutput x, FloeReduceOp op,
                                    const FloeCollectiveOptions *opts);
/* CollectiveGather: the members' x ([n, ...] each) concatenated along dim 0 by rank. */
FLOE_API FloeOutput floe_all_gather(FloeGraph *g, const char *name, FloeOutput x,
                                    const FloeCollectiveOptions *opts);
/* CollectiveReduceScatter: x is [group_size * n, ...] on every member; rank r gets rows
 * [r * n, (r + 1) * n) of op over the members' x. */
FLOE_API FloeOutput floe_reduce_scatter(FloeGraph *g, const char *name, FloeOutput x,
                                        FloeReduceOp op, const FloeCollectiveOptions *opts);
/* CollectiveBcastSend: x goes to every other member; the output is x. */
FLOE_API FloeOutput floe_broadcast_send(FloeGraph *g, const char *name, FloeOutput x,
                                        const FloeCollectiveOptions *opts);
/* CollectiveBcastRecv: the sender's x, which has dtype dt and the fully defined shape. */
FLOE_API FloeOutput floe_broadcast_recv(FloeGraph *g, const char *name, FloeDType dt,
                                        FloeShape shape, const FloeCollectiveOptions *opts);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_COLLECTIVE_H */
