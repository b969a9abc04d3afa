/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce.c - data-parallel training without parameter servers (floe_train.h): gradients
 * all-reduced across replicas with tensor fusion, and the replicas' variables made equal at
 * the start by a broadcast from the root. The collectives are floe_collective.h's ops; this
 * file only builds graphs. */
#include <stdio.h>
#include <string.h>

#include "train.h"

void floe_all_reduce_options_init(FloeAllReduceOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->group_size = 1;
  o->group_key = 1;
  o->instance_key = 1;
  o->op = FLOE_REDUCE_MEAN;
  o->fusion_bytes = (int64_t)4 << 20;
}

static bool options_ok(FloeGraph *g, const char *what, const char *name,
                       const FloeAllReduceOptions *o) {
  if (!o || o->struct_size < sizeof *o) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s '%s': FloeAllReduceOptions is NULL or older than this library (call "
                     "floe_all_reduce_options_init)", what, name);
    return false;
  }
  if (o->group_size < 1 || (o->op != FLOE_REDUCE_MEAN && o->op != FLOE_REDUCE_SUM) ||
      o->fusion_bytes < 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s '%s': group_size %d must be >= 1, op MEAN or SUM, fusion_bytes >= 0",
                     what, name, o->group_size);
    return false;
  }
  return true;
}

static FloeCollectiveOptions coll_opts(const FloeAllReduceOptions *o, int64_t instance) {
  FloeCollectiveOptions c;
  floe_collective_options_init(&c);
  c.group_size = o->group_size;
  c.group_key = o->group_key;
  c.instance_key = instance;
  c.backend = o->backend;
  return c;
}

/* A 1-D i64 constant of n values. */
static FloeOutput const_i64(FloeGraph *g, const char *name, const int64_t *v, int n) {
  int64_t d[1] = {n};
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, d, NULL);
  if (!t) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "'%s': out of memory", name);
    return floe_out(NULL, 0);
  }
  if (n) memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput reshape(FloeGraph *g, const char *name, FloeOutput x, const int64_t *dims,
                          int rank) {
  char sn[512];
  snprintf(sn, sizeof sn, "%s/shape", name);
  FloeOutput shape = const_i64(g, sn, dims, rank);
  FloeNodeBuilder *b = floe_node_begin(g, "Reshape", name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, shape);
  return floe_out(floe_node_finish(b), 0);
}

/* One fused buffer: xs[lo..hi) packed flat, reduced, cut apart and shaped back. */
static void reduce_bucket(FloeGraph *g, const char *scope, int bucket, const FloeOutput *xs,
                          int lo, int hi, const FloeAllReduceOptions *o, FloeOutput *out) {
  char name[512];
  FloeCollectiveOptions c = coll_opts(o, o->instance_key + bucket);
  if (hi - lo == 1) {
    snprintf(name, sizeof name, "%s/%d", scope, bucket);
    out[lo] = floe_all_reduce(g, name, xs[lo], o->op, &c);
    return;
  }
  FloeOutput *flat = floe__calloc((size_t)(hi - lo), sizeof *flat);
  if (!flat) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "'%s': out of memory", scope);
    return;
  }
  for (int i = lo; i < hi; i++) {
    char fn[512];
    snprintf(fn, sizeof fn, "%s/%d/flat/%d", scope, bucket, i - lo);
    int64_t minus1 = -1;
    flat[i - lo] = reshape(g, fn, xs[i], &minus1, 1);
  }
  char an[512];
  snprintf(an, sizeof an, "%s/%d/pack/axis", scope, bucket);
  FloeTensor *zero = floe_tensor_scalar_i32(0, NULL);
  FloeOutput axis = zero ? floe_const(g, an, zero) : floe_out(NULL, 0);
  floe_tensor_release(zero);
  snprintf(name, sizeof name, "%s/%d/pack", scope, bucket);
  FloeNodeBuilder *cat = floe_node_begin(g, "Concat", name);
  floe_node_add_input_list(cat, flat, hi - lo);
  floe_node_add_input(cat, axis);
  floe__free(flat);
  FloeOutput packed = floe_out(floe_node_finish(cat), 0);
  snprintf(name, sizeof name, "%s/%d", scope, bucket);
  FloeOutput red = floe_all_reduce(g, name, packed, o->op, &c);
  int64_t off = 0;
  for (int i = lo; i < hi && floe_graph_status(g) == FLOE_OK; i++) {
    const FloeShape *s = &xs[i].node->out_shapes[xs[i].index];
    int64_t len = 1;
    for (int d = 0; d < s->rank; d++) len *= s->dims[d];
    char sl[400], bn[512], zn[512], un[512];
    snprintf(sl, sizeof sl, "%s/%d/unpack/%d", scope, bucket, i - lo);
    snprintf(bn, sizeof bn, "%s/begin", sl);
    snprintf(zn, sizeof zn, "%s/size", sl);
    snprintf(un, sizeof un, "%s/shaped", sl);
    FloeNodeBuilder *b = floe_node_begin(g, "Slice", sl);
    floe_node_add_input(b, red);
    floe_node_add_input(b, const_i64(g, bn, &off, 1));
    floe_node_add_input(b, const_i64(g, zn, &len, 1));
    FloeOutput piece = floe_out(floe_node_finish(b), 0);
    out[i] = reshape(g, un, piece, s->dims, s->rank);
    off += len;
  }
}

floe_code floe_all_reduce_n(FloeGraph *g, const char *name, const FloeOutput *xs, int n,
                            const FloeAllReduceOptions *o, FloeOutput *out) {
  if (floe_graph_status(g) != FLOE_OK) return floe_graph_status(g);
  const char *scope = name ? name : "all_reduce";
  if (!options_ok(g, "floe_all_reduce_n", scope, o)) return floe_graph_status(g);
  if (n < 0 || (n > 0 && (!xs || !out))) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_all_reduce_n '%s': %d tensors (xs and out must hold n each)", scope, n);
    return floe_graph_status(g);
  }
  for (int i = 0; i < n; i++) {
    if (!xs[i].node || xs[i].node->graph != g) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_all_reduce_n '%s': tensor %d is invalid or of another graph", scope,
                       i);
      return floe_graph_status(g);
    }
    const FloeShape *s = &xs[i].node->out_shapes[xs[i].index];
    bool known = s->rank >= 0;
    for (int d = 0; known && d < s->rank; d++) known = s->dims[d] >= 0;
    if (!known) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_all_reduce_n '%s': tensor %d ('%s') has no fully defined shape: "
                       "every replica must reduce the same shapes",
                       scope, i, floe_node_name(xs[i].node));
      return floe_graph_status(g);
    }
  }
  /* Buckets of consecutive tensors of one dtype, each at most fusion_bytes. */
  int bucket = 0, lo = 0;
  int64_t bytes = 0;
  for (int i = 0; i <= n; i++) {
    int64_t b = 0;
    FloeDType dt = FLOE_DTYPE_INVALID;
    if (i < n) {
      const FloeShape *s = &xs[i].node->out_shapes[xs[i].index];
      dt = xs[i].node->out_dtypes[xs[i].index];
      b = (int64_t)floe_dtype_size(dt);
      for (int d = 0; d < s->rank; d++) b *= s->dims[d];
    }
    bool flush = i == n || (i > lo && (o->fusion_bytes == 0 || bytes + b > o->fusion_bytes ||
                                       dt != xs[lo].node->out_dtypes[xs[lo].index]));
    if (flush && i > lo) {
      reduce_bucket(g, scope, bucket++, xs, lo, i, o, out);
      lo = i;
      bytes = 0;
    }
    bytes += b;
  }
  return floe_graph_status(g);
}

FloeNode *floe_broadcast_variables(FloeGraph *g, const char *name, int is_root,
                                   const FloeAllReduceOptions *o) {
  if (floe_graph_status(g) != FLOE_OK) return NULL;
  const char *scope = name ? name : "broadcast_variables";
  if (!options_ok(g, "floe_broadcast_variables", scope, o)) return NULL;
  int n = floe_graph_variables(g, 0, NULL, 0);
  FloeVariable *vars = n > 0 ? floe__calloc((size_t)n, sizeof *vars) : NULL;
  FloeNode **deps = n > 0 ? floe__calloc((size_t)n, sizeof *deps) : NULL;
  if (n > 0 && (!vars || !deps)) {
    floe__free(vars);
    floe__free(deps);
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_broadcast_variables '%s': out of memory", scope);
    return NULL;
  }
  n = floe_graph_variables(g, 0, vars, n);
  for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++) {
    const char *var = floe_node_name(vars[i].handle.node);
    FloeCollectiveOptions c = coll_opts(o, o->instance_key + 1000000 + i);
    char bn[512], an[512];
    snprintf(bn, sizeof bn, "%s/%s", scope, var);
    if (is_root) {
      deps[i] = floe_broadcast_send(g, bn, vars[i].value, &c).node;
      continue;
    }
    FloeNode *read = vars[i].value.node;
    FloeOutput v = floe_broadcast_recv(g, bn, read->out_dtypes[vars[i].value.index],
                                       read->out_shapes[vars[i].value.index], &c);
    snprintf(an, sizeof an, "%s/%s/assign", scope, var);
    FloeNodeBuilder *b = floe_node_begin(g, "AssignVariableOp", an);
    floe_node_add_input(b, vars[i].handle);
    floe_node_add_input(b, v);
    deps[i] = floe_node_finish(b);
  }
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", scope);
  for (int i = 0; i < n; i++)
    if (deps[i]) floe_node_add_control_input(b, deps[i]);
  FloeNode *done = floe_node_finish(b);
  floe__free(vars);
  floe__free(deps);
  return floe_graph_status(g) == FLOE_OK ? done : NULL;
}
