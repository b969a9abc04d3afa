/* SPDX-License-Identifier: Apache-2.0 */
/* build.c - small graph-building helpers shared by the builders of the layers above (layers,
 * optimisers, recurrent cells, variables, gradient functions) and control flow: node names
 * under a scope, one-op nodes and constants. They use only the graph API: a failure is the
 * graph's sticky error and an invalid output, and once the graph has failed they build
 * nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

static FloeOutput no_output(void) { return floe_out(NULL, 0); }

char *floe__build_name(const FloeGraph *g, const char *scope, const char *leaf, bool unique) {
  char *name = floe__asprintf("%s/%s", scope, leaf);
  for (int k = 1; unique && name && floe_graph_find(g, name); k++) {
    floe__free(name);
    name = floe__asprintf("%s/%s_%d", scope, leaf, k);
  }
  return name;
}

char *floe__build_name_in(const FloeGraph *g, char *buf, size_t len, const char *scope,
                          const char *leaf) {
  snprintf(buf, len, "%s/%s", scope, leaf);
  size_t base = strlen(buf);
  for (int k = 1; floe_graph_find(g, buf); k++) snprintf(buf + base, len - base, "_%d", k);
  return buf;
}

/* Records why node leaf (of op; never NULL) under s cannot be built: in s's own words when
 * it has them, else "node '<name>/<leaf>' (<op>): out of memory[ making its value]". */
static void build_fail(const FloeBuildScope *s, const char *op, const char *leaf,
                       const FloeStatus *why) {
  if (s->fail) {
    s->fail(s, op, leaf, why);
    return;
  }
  floe__graph_fail(s->g, FLOE_NO_MEMORY, "node '%s%s%s' (%s): out of memory%s",
                   s->name ? s->name : "", s->name ? "/" : "", leaf, op,
                   why ? " making its value" : "");
}

void floe__build_fail_message(const FloeBuildScope *s, const char *op, const char *leaf,
                              const FloeStatus *why) {
  (void)op;
  (void)leaf;
  (void)why;
  floe__graph_fail(s->g, FLOE_NO_MEMORY, "%s", (const char *)s->arg);
}

static bool live(const FloeBuildScope *s) { return s->g && floe_graph_status(s->g) == FLOE_OK; }

FloeNodeBuilder *floe__build_begin(const FloeBuildScope *s, const char *op, const char *leaf) {
  if (!live(s)) return NULL;
  FloeNodeBuilder *b;
  if (!s->name) {
    b = floe_node_begin(s->g, op, leaf);
  } else {
    char *name = floe__build_name(s->g, s->name, leaf ? leaf : op, s->unique);
    if (!name) {
      build_fail(s, op, leaf ? leaf : op, NULL);
      return NULL;
    }
    b = floe_node_begin(s->g, op, name);
    floe__free(name);
  }
  if (s->device && *s->device) floe_node_set_device(b, s->device);
  return b;
}

FloeOutput floe__build_op(const FloeBuildScope *s, const char *op, const char *leaf,
                          const FloeOutput *ins, int n) {
  return floe__build_op_like(s, op, leaf, ins, n, NULL, NULL);
}

FloeOutput floe__build_op_like(const FloeBuildScope *s, const char *op, const char *leaf,
                               const FloeOutput *ins, int n, const FloeNode *from,
                               const char *const *attrs) {
  FloeNodeBuilder *b = floe__build_begin(s, op, leaf);
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  if (from) floe__node_copy_attrs(from, b, attrs);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe__build_unary(const FloeBuildScope *s, const char *op, const char *leaf,
                             FloeOutput x) {
  return floe__build_op(s, op, leaf, &x, 1);
}

FloeOutput floe__build_binary(const FloeBuildScope *s, const char *op, const char *leaf,
                              FloeOutput a, FloeOutput b) {
  const FloeOutput ins[2] = {a, b};
  return floe__build_op(s, op, leaf, ins, 2);
}

FloeOutput floe__build_cast(const FloeBuildScope *s, const char *leaf, FloeOutput x,
                            FloeDType dt) {
  FloeNodeBuilder *b = floe__build_begin(s, "Cast", leaf);
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "DstT", dt);
  return floe_out(floe_node_finish(b), 0);
}

void floe__node_copy_attrs(const FloeNode *from, FloeNodeBuilder *b, const char *const *names) {
  for (int i = 0; names && names[i]; i++) floe__node_copy_attr(from, b, names[i]);
}

/* ---- constants ---- */

bool floe__build_store(void *data, FloeDType dt, int64_t i, double v, bool round_ints) {
  switch (dt) {
    case FLOE_F32: ((float *)data)[i] = (float)v; break;
    case FLOE_F64: ((double *)data)[i] = v; break;
    case FLOE_F16: ((uint16_t *)data)[i] = floe_f32_to_f16((float)v); break;
    case FLOE_BF16: ((uint16_t *)data)[i] = floe_f32_to_bf16((float)v); break;
    case FLOE_I8: ((int8_t *)data)[i] = round_ints ? (int8_t)llround(v) : (int8_t)v; break;
    case FLOE_U8: ((uint8_t *)data)[i] = round_ints ? (uint8_t)llround(v) : (uint8_t)v; break;
    case FLOE_I32: ((int32_t *)data)[i] = round_ints ? (int32_t)llround(v) : (int32_t)v; break;
    case FLOE_I64: ((int64_t *)data)[i] = round_ints ? (int64_t)llround(v) : (int64_t)v; break;
    case FLOE_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    default: return false;
  }
  return true;
}

FloeTensor *floe__build_filled_tensor(FloeDType dt, int rank, const int64_t *dims, double v,
                                      bool round_ints, FloeStatus *st) {
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) return NULL;
  void *data = floe_tensor_data(t);
  for (int64_t i = 0; i < t->num_elements; i++)
    if (!floe__build_store(data, dt, i, v, round_ints)) break; /* no such value: zeros */
  return t;
}

FloeTensor *floe__build_ints_tensor(FloeDType dt, int rank, const int64_t *v, int n,
                                    FloeStatus *st) {
  const int64_t dims[1] = {n};
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) return NULL;
  void *data = floe_tensor_data(t);
  for (int i = 0; i < n && i < t->num_elements; i++) {
    if (dt == FLOE_I64) ((int64_t *)data)[i] = v[i];
    else ((int32_t *)data)[i] = (int32_t)v[i];
  }
  return t;
}

FloeOutput floe__build_const(const FloeBuildScope *s, const char *leaf, FloeTensor *t,
                             const FloeStatus *why) {
  if (!t) {
    const FloeStatus oom = {FLOE_NO_MEMORY, NULL};
    build_fail(s, "Const", leaf ? leaf : "Const", why ? why : &oom);
    return no_output();
  }
  FloeNodeBuilder *b = floe__build_begin(s, "Const", leaf);
  floe_node_set_attr_tensor(b, "value", t);
  floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(t));
  floe_tensor_release(t);
  return floe_out(floe_node_finish(b), 0);
}

/* floe__build_const of the tensor make returned, with its status. */
static FloeOutput const_made(const FloeBuildScope *s, const char *leaf, FloeTensor *t,
                             FloeStatus *st) {
  FloeOutput o = floe__build_const(s, leaf, t, st);
  floe__free(st->msg);
  return o;
}

FloeOutput floe__build_filled(const FloeBuildScope *s, const char *leaf, FloeDType dt, int rank,
                              const int64_t *dims, double v) {
  if (!live(s)) return no_output();
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__build_filled_tensor(dt, rank, dims, v, s->round_ints, &st);
  return const_made(s, leaf, t, &st);
}

FloeOutput floe__build_scalar(const FloeBuildScope *s, const char *leaf, FloeDType dt,
                              double v) {
  return floe__build_filled(s, leaf, dt, 0, NULL, v);
}

FloeOutput floe__build_int(const FloeBuildScope *s, const char *leaf, FloeDType dt, int64_t v) {
  if (!live(s)) return no_output();
  FloeStatus st = {FLOE_OK, NULL};
  return const_made(s, leaf, floe__build_ints_tensor(dt, 0, &v, 1, &st), &st);
}

FloeOutput floe__build_ints(const FloeBuildScope *s, const char *leaf, FloeDType dt,
                            const int64_t *v, int n) {
  if (!live(s)) return no_output();
  FloeStatus st = {FLOE_OK, NULL};
  return const_made(s, leaf, floe__build_ints_tensor(dt, 1, v, n, &st), &st);
}
