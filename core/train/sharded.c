/* SPDX-License-Identifier: Apache-2.0 */
/* sharded.c - sharded (partitioned) variables: one variable split along one axis into
 * shards "<name>/part_<k>", each a VarHandleOp of its own that floe_replica_device_setter
 * places on a ps task (TF's fixed_size_partitioner and variable_axis_size_partitioner). Each
 * shard names the whole (full_name, full_shape) and its place in it (part_axis,
 * part_offset), so checkpoints hold the whole variable and restore into any shard count.
 *
 * The whole is read by a Concat of the shards' reads; an embedding lookup reads only rows:
 * the ids are split by the shard that holds them (a mask per shard, NonZero for their
 * positions; the first and last shards also take ids out of range, which their gather then
 * refuses), each shard gives its rows with a ResourceGather (which runs where the shard
 * lives, so only those rows cross the network), and ScatterND puts each shard's rows back at
 * their positions. floe_minimize differentiates a variable used through ResourceGather by
 * the rows (see optimizer.c).
 */
#include <stdio.h>
#include <string.h>

#include "train.h"

static const FloeShardedVariable no_sharded = {0, 0, {NULL, 0}, NULL};

/* Rows of shard k of n over d (the first d % n shards get one more, as TF splits). */
static int64_t shard_rows(int64_t d, int n, int k) { return d / n + (k < d % n ? 1 : 0); }

static int64_t shard_offset(int64_t d, int n, int k) {
  int64_t off = 0;
  for (int i = 0; i < k; i++) off += shard_rows(d, n, i);
  return off;
}

FloeShardedVariable floe_sharded_variable(FloeGraph *g, const char *name, FloeDType dtype,
                                          FloeShape shape, FloeInitializer init, int axis,
                                          int num_shards, int64_t max_shard_bytes) {
  if (floe_graph_status(g) != FLOE_OK) return no_sharded;
  if (!name || !name[0]) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_sharded_variable: a variable needs a name");
    return no_sharded;
  }
  char sb[128];
  bool known = shape.rank >= 1 && shape.rank <= FLOE_MAX_DIMS;
  for (int i = 0; known && i < shape.rank; i++) known = shape.dims[i] >= 1;
  if (!known || axis < 0 || axis >= shape.rank) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "sharded variable '%s': shape %s with axis %d: the shape must be fully "
                     "known with no zero dims, and the axis one of its dims",
                     name, floe_shape_str(&shape, sb, sizeof sb), axis);
    return no_sharded;
  }
  if ((num_shards > 0) == (max_shard_bytes > 0) || num_shards < 0 || max_shard_bytes < 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "sharded variable '%s': give either num_shards (> 0) or max_shard_bytes "
                     "(> 0), not both (got %d and %lld)",
                     name, num_shards, (long long)max_shard_bytes);
    return no_sharded;
  }
  int64_t d = shape.dims[axis];
  int64_t slice = (int64_t)floe_dtype_size(dtype);
  for (int i = 0; i < shape.rank; i++)
    if (i != axis) slice *= shape.dims[i];
  int64_t n = num_shards;
  if (max_shard_bytes > 0) { /* as few shards as keep each within the bound (>= a slice each) */
    int64_t per = max_shard_bytes / (slice > 0 ? slice : 1);
    if (per < 1) per = 1;
    n = (d + per - 1) / per;
  }
  if (n > d) n = d;
  if (n > 65536) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "sharded variable '%s': %lld shards is more than "
                     "65536", name, (long long)n);
    return no_sharded;
  }
  FloeShardedVariable r = {(int)n, axis, {NULL, 0}, NULL};
  FloeOutput *reads = floe__calloc((size_t)n, sizeof *reads);
  FloeNode **inits = floe__calloc((size_t)n, sizeof *inits);
  if (!reads || !inits) {
    floe__free(reads);
    floe__free(inits);
    floe__graph_fail(g, FLOE_NO_MEMORY, "sharded variable '%s': out of memory", name);
    return no_sharded;
  }
  for (int k = 0; k < (int)n && floe_graph_status(g) == FLOE_OK; k++) {
    char *part = floe__asprintf("%s/part_%d", name, k);
    if (!part) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "sharded variable '%s': out of memory", name);
      break;
    }
    FloeShape ps = shape;
    ps.dims[axis] = shard_rows(d, (int)n, k);
    FloeInitializer ik = init;
    if (ik.seed != 0) ik.seed += k; /* each shard its own stream */
    FloeVarExtra x = {.full_name = name, .full_shape = shape, .axis = axis,
                      .offset = shard_offset(d, (int)n, k)};
    FloeVariable v = floe__variable_ex(g, part, dtype, ps, ik, true, &x);
    floe__free(part);
    reads[k] = v.value;
    inits[k] = v.init;
  }
  if (floe_graph_status(g) == FLOE_OK) {
    const FloeBuildScope sc = {.g = g, .name = name};
    FloeNodeBuilder *b = floe__build_begin(&sc, "Concat", "concat");
    floe_node_add_input_list(b, reads, (int)n);
    floe_node_add_input(b, floe__build_int(&sc, "concat_axis", FLOE_I32, axis));
    r.value = floe_out(floe_node_finish(b), 0);
    b = floe__build_begin(&sc, "NoOp", "init");
    for (int k = 0; k < (int)n; k++) floe_node_add_control_input(b, inits[k]);
    r.init = floe_node_finish(b);
  }
  floe__free(reads);
  floe__free(inits);
  return floe_graph_status(g) == FLOE_OK ? r : no_sharded;
}

/* The shards of sharded variable `name` in order ("<name>/part_<k>"), into out[0..n). */
static bool find_parts(FloeGraph *g, const char *name, int n, FloeNode **out) {
  for (int k = 0; k < n; k++) {
    char *part = floe__asprintf("%s/part_%d", name, k);
    out[k] = part ? floe_graph_find(g, part) : NULL;
    floe__free(part);
    if (!out[k] || strcmp(out[k]->op->name, "VarHandleOp") != 0) return false;
  }
  return true;
}

FloeOutput floe_embedding_lookup_sharded(FloeGraph *g, const char *name,
                                         const FloeShardedVariable *v, FloeOutput ids) {
  FloeOutput none = {NULL, 0};
  if (floe_graph_status(g) != FLOE_OK) return none;
  const char *scope = name ? name : "embedding_lookup";
  if (!v || v->num_shards < 1 || !v->value.node || !ids.node) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_embedding_lookup_sharded '%s': %s", scope,
                     !ids.node ? "the ids are invalid (an earlier builder call failed)"
                               : "not a sharded variable (make it with floe_sharded_variable)");
    return none;
  }
  FloeDType it = floe_node_output_dtype(ids.node, ids.index);
  if (it != FLOE_I32 && it != FLOE_I64) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_embedding_lookup_sharded '%s': ids are %s; "
                     "they must be i32 or i64", scope, floe_dtype_name(it));
    return none;
  }
  if (v->axis != 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_embedding_lookup_sharded '%s': the variable "
                     "is sharded along axis %d; a lookup takes rows of one sharded along axis 0",
                     scope, v->axis);
    return none;
  }
  /* The whole's name: the Concat is "<name>/concat". */
  const char *cname = v->value.node->name;
  size_t nl = strlen(cname) >= 7 ? strlen(cname) - 7 : 0;
  char *whole = floe__asprintf("%.*s", (int)nl, cname);
  FloeNode **parts = floe__calloc((size_t)v->num_shards, sizeof *parts);
  FloeOutput out = none;
  if (!whole || !parts || !find_parts(g, whole, v->num_shards, parts)) {
    floe__graph_fail(g, whole && parts ? FLOE_NOT_FOUND : FLOE_NO_MEMORY,
                     "floe_embedding_lookup_sharded '%s': the shards of '%s' are not in the "
                     "graph", scope, whole ? whole : "?");
    goto done;
  }
  const FloeBuildScope sc = {.g = g, .name = scope};
  FloeDType dt = floe_node_attr_type(parts[0], "dtype");
  if (v->num_shards == 1) { /* no split */
    FloeNodeBuilder *b = floe__build_begin(&sc, "ResourceGather", "rows");
    floe_node_add_input(b, floe_out(parts[0], 0));
    floe_node_add_input(b, ids);
    floe_node_set_attr_type(b, "dtype", dt);
    out = floe_out(floe_node_finish(b), 0);
    goto done;
  }
  const FloeAttrValue *fs = floe__attrs_get(&parts[0]->attrs, "full_shape");
  FloeShape full = fs->u.shape;
  int64_t minus1 = -1, one_col[2] = {-1, 1};
  FloeOutput flat = floe__build_binary(&sc, "Reshape", "ids_flat", ids,
                                       floe__build_ints(&sc, "flat_shape", FLOE_I64, &minus1, 1));
  /* The result, zeros of [n, row dims...], filled shard by shard. */
  FloeNodeBuilder *b = floe__build_begin(&sc, "Shape", "count");
  floe_node_add_input(b, flat);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput count = floe_out(floe_node_finish(b), 0);
  int64_t row_dims[FLOE_MAX_DIMS];
  for (int i = 1; i < full.rank; i++) row_dims[i - 1] = full.dims[i];
  FloeOutput rows_shape = floe__build_ints(&sc, "row_shape", FLOE_I64, row_dims, full.rank - 1);
  b = floe__build_begin(&sc, "Concat", "result_shape");
  FloeOutput cat[2] = {count, rows_shape};
  floe_node_add_input_list(b, cat, full.rank > 1 ? 2 : 1);
  floe_node_add_input(b, floe__build_int(&sc, "result_shape_axis", FLOE_I32, 0));
  FloeOutput result_shape = floe_out(floe_node_finish(b), 0);
  FloeOutput acc = floe__build_binary(&sc, "Fill", "zeros", result_shape,
                                      floe__build_scalar(&sc, "zero", dt, 0.0));
  int64_t d = full.dims[0];
  FloeOutput pos_shape = floe__build_ints(&sc, "pos_shape", FLOE_I64, one_col, 2);
  FloeOutput pos_flat_shape = floe__build_ints(&sc, "pos_flat_shape", FLOE_I64, &minus1, 1);
  for (int k = 0; k < v->num_shards && floe_graph_status(g) == FLOE_OK; k++) {
    char leaf[64];
    int64_t lo = shard_offset(d, v->num_shards, k), hi = lo + shard_rows(d, v->num_shards, k);
    snprintf(leaf, sizeof leaf, "part_%d/lo", k);
    FloeOutput lo_c = floe__build_int(&sc, leaf, it, lo);
    snprintf(leaf, sizeof leaf, "part_%d/hi", k);
    FloeOutput hi_c = floe__build_int(&sc, leaf, it, hi);
    /* The first shard also takes ids below 0, the last those past the end: their
     * ResourceGather then fails, naming the index, instead of a silent zero row. */
    FloeOutput mask;
    if (k == 0) {
      snprintf(leaf, sizeof leaf, "part_%d/below", k);
      mask = floe__build_binary(&sc, "Less", leaf, flat, hi_c);
    } else if (k == v->num_shards - 1) {
      snprintf(leaf, sizeof leaf, "part_%d/at_least", k);
      mask = floe__build_binary(&sc, "GreaterEqual", leaf, flat, lo_c);
    } else {
      snprintf(leaf, sizeof leaf, "part_%d/at_least", k);
      FloeOutput ge = floe__build_binary(&sc, "GreaterEqual", leaf, flat, lo_c);
      snprintf(leaf, sizeof leaf, "part_%d/below", k);
      FloeOutput lt = floe__build_binary(&sc, "Less", leaf, flat, hi_c);
      snprintf(leaf, sizeof leaf, "part_%d/mask", k);
      mask = floe__build_binary(&sc, "LogicalAnd", leaf, ge, lt);
    }
    snprintf(leaf, sizeof leaf, "part_%d/nonzero", k);
    FloeOutput nz = floe__build_unary(&sc, "NonZero", leaf, mask);
    snprintf(leaf, sizeof leaf, "part_%d/positions", k);
    FloeOutput pos = floe__build_binary(&sc, "Reshape", leaf, nz, pos_shape);
    snprintf(leaf, sizeof leaf, "part_%d/positions_flat", k);
    FloeOutput pos_flat = floe__build_binary(&sc, "Reshape", leaf, nz, pos_flat_shape);
    snprintf(leaf, sizeof leaf, "part_%d/ids", k);
    FloeOutput ids_k = floe__build_binary(&sc, "Gather", leaf, flat, pos_flat);
    snprintf(leaf, sizeof leaf, "part_%d/local_ids", k);
    FloeOutput local = floe__build_binary(&sc, "Sub", leaf, ids_k, lo_c);
    snprintf(leaf, sizeof leaf, "part_%d/rows", k);
    b = floe__build_begin(&sc, "ResourceGather", leaf);
    floe_node_add_input(b, floe_out(parts[k], 0));
    floe_node_add_input(b, local);
    floe_node_set_attr_type(b, "dtype", dt);
    FloeOutput rows = floe_out(floe_node_finish(b), 0);
    snprintf(leaf, sizeof leaf, "part_%d/stitch", k);
    FloeOutput ins[3] = {acc, pos, rows};
    acc = floe__build_op(&sc, "ScatterND", leaf, ins, 3);
  }
  /* Back to ids' shape + the row dims. */
  b = floe__build_begin(&sc, "Shape", "ids_shape");
  floe_node_add_input(b, ids);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput ids_shape = floe_out(floe_node_finish(b), 0);
  b = floe__build_begin(&sc, "Concat", "output_shape");
  FloeOutput cat2[2] = {ids_shape, rows_shape};
  floe_node_add_input_list(b, cat2, full.rank > 1 ? 2 : 1);
  floe_node_add_input(b, floe__build_int(&sc, "output_shape_axis", FLOE_I32, 0));
  FloeOutput out_shape = floe_out(floe_node_finish(b), 0);
  out = floe__build_binary(&sc, "Reshape", "output", acc, out_shape);
done:
  floe__free(whole);
  floe__free(parts);
  return floe_graph_status(g) == FLOE_OK ? out : none;
}
