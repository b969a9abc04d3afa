/* SPDX-License-Identifier: Apache-2.0 */
/* variables.c - variables and initialisers as ordinary graph nodes (floe_train.h).
 *
 * A variable "w" is three nodes: "w" (VarHandleOp), "w/read" (ReadVariableOp) and "w/init"
 * (AssignVariableOp of the initialiser's value, built from plain ops under
 * "w/initializer/"). Random initialisers take the initialiser's seed as `seed` and a hash
 * of the variable's name as `seed2`, so variables sharing a seed still differ and a graph
 * built twice draws the same values.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train.h"

/* Up to this many elements a constant initialiser is one Const; beyond, a Fill of a scalar
 * (the graph, and its file, stay small). */
enum { CONST_MAX_ELEMENTS = 1024 };

/* stddev of a standard normal truncated to [-2, 2], as Keras divides by. */
#define TRUNCATED_NORMAL_STDDEV 0.87962566103423978

static const FloeVariable NO_VARIABLE = {{NULL, 0}, {NULL, 0}, NULL};

/* ---- initialisers ---- */

FloeInitializer floe_init_zeros(void) { return (FloeInitializer){FLOE_INIT_ZEROS, 0, 0, 0}; }
FloeInitializer floe_init_constant(double value) {
  return (FloeInitializer){FLOE_INIT_CONSTANT, value, 0, 0};
}
FloeInitializer floe_init_uniform(double lo, double hi, int64_t seed) {
  return (FloeInitializer){FLOE_INIT_UNIFORM, lo, hi, seed};
}
FloeInitializer floe_init_normal(double mean, double stddev, int64_t seed) {
  return (FloeInitializer){FLOE_INIT_NORMAL, mean, stddev, seed};
}
FloeInitializer floe_init_truncated_normal(double mean, double stddev, int64_t seed) {
  return (FloeInitializer){FLOE_INIT_TRUNCATED_NORMAL, mean, stddev, seed};
}
FloeInitializer floe_init_glorot_uniform(int64_t seed) {
  return (FloeInitializer){FLOE_INIT_GLOROT_UNIFORM, 0, 0, seed};
}
FloeInitializer floe_init_glorot_normal(int64_t seed) {
  return (FloeInitializer){FLOE_INIT_GLOROT_NORMAL, 0, 0, seed};
}
FloeInitializer floe_init_he_normal(int64_t seed) {
  return (FloeInitializer){FLOE_INIT_HE_NORMAL, 0, 0, seed};
}

/* ---- small builders (all record the sticky error and return invalid outputs) ---- */

static bool graph_ok(const FloeGraph *g) { return g && g->error == FLOE_OK; }

/* "<prefix>/<suffix>", floe__malloc'd; NULL (sticky error set) when out of memory. */
static char *join_name(FloeGraph *g, const char *prefix, const char *suffix) {
  char *s = floe__build_name(g, prefix, suffix, false);
  if (!s) floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory naming '%s/%s'", prefix, suffix);
  return s;
}

/* The initialiser's failures name the node. */
static void init_build_fail(const FloeBuildScope *s, const char *op, const char *leaf,
                            const FloeStatus *why) {
  (void)op;
  if (!why)
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "out of memory naming '%s/%s'", s->name, leaf);
  else
    floe__graph_fail(s->g, why->code ? why->code : FLOE_NO_MEMORY, "node '%s/%s' (Const): %s",
                     s->name, leaf, floe_status_message(why));
}

/* An initialiser's nodes: "<scope>/<leaf>", its integer constants rounded to nearest. */
static FloeBuildScope init_scope(FloeGraph *g, const char *scope) {
  return (FloeBuildScope){.g = g, .name = scope, .round_ints = true, .fail = init_build_fail};
}

/* 31 bits of FNV-1a 32 of the variable's name: seed2 of its random initialiser. */
static int64_t name_seed(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return (int64_t)(h & 0x7fffffffu);
}

/* fan_in / fan_out of a weight shape (floe_train.h): [in, out]; HWIO and other ranks >= 3:
 * the receptive field (all dims but the last two) times in / out; rank 0 and 1: the size. */
static void fans(const FloeShape *s, double *fan_in, double *fan_out) {
  if (s->rank <= 1) {
    double n = s->rank == 1 ? (double)s->dims[0] : 1.0;
    *fan_in = *fan_out = n;
    return;
  }
  double receptive = 1.0;
  for (int i = 0; i < s->rank - 2; i++) receptive *= (double)s->dims[i];
  *fan_in = (double)s->dims[s->rank - 2] * receptive;
  *fan_out = (double)s->dims[s->rank - 1] * receptive;
}

static const char *init_kind_name(FloeInitKind k) {
  switch (k) {
    case FLOE_INIT_ZEROS: return "zeros";
    case FLOE_INIT_CONSTANT: return "constant";
    case FLOE_INIT_UNIFORM: return "uniform";
    case FLOE_INIT_NORMAL: return "normal";
    case FLOE_INIT_TRUNCATED_NORMAL: return "truncated normal";
    case FLOE_INIT_GLOROT_UNIFORM: return "Glorot uniform";
    case FLOE_INIT_GLOROT_NORMAL: return "Glorot normal";
    case FLOE_INIT_HE_NORMAL: return "He normal";
  }
  return "unknown";
}

/* zeros / constant: one Const, or Fill of a scalar for big shapes. */
static FloeOutput build_constant(FloeGraph *g, const char *scope, FloeDType dt,
                                 const FloeShape *shape, double v) {
  int64_t n = 1;
  for (int i = 0; i < shape->rank && n <= CONST_MAX_ELEMENTS; i++) n *= shape->dims[i];
  const FloeBuildScope bs = init_scope(g, scope);
  if (n <= CONST_MAX_ELEMENTS)
    return floe__build_filled(&bs, "value", dt, shape->rank, shape->dims, v);
  FloeOutput dims = floe__build_ints(&bs, "shape", FLOE_I64, shape->dims, shape->rank);
  FloeOutput scalar = floe__build_scalar(&bs, "fill_value", dt, v);
  return floe__build_binary(&bs, "Fill", "value", dims, scalar);
}

/* op(shape) * scale + offset, the multiply and add left out when they change nothing. */
static FloeOutput build_random(FloeGraph *g, const char *scope, const char *var_name,
                               const char *op, FloeDType dt, const FloeShape *shape,
                               int64_t seed, double scale, double offset) {
  const FloeBuildScope bs = init_scope(g, scope);
  FloeOutput dims = floe__build_ints(&bs, "shape", FLOE_I64, shape->dims, shape->rank);
  FloeNodeBuilder *b = floe__build_begin(&bs, op, "random");
  floe_node_add_input(b, dims);
  floe_node_set_attr_type(b, "dtype", dt);
  /* seed 0 asks for a per-process seed: the kernel draws one when both seeds are 0. */
  floe_node_set_attr_int(b, "seed", seed);
  floe_node_set_attr_int(b, "seed2", seed ? name_seed(var_name) : 0);
  FloeOutput r = floe_out(floe_node_finish(b), 0);
  if (scale != 1.0)
    r = floe__build_binary(&bs, "Mul", "mul", r, floe__build_scalar(&bs, "scale", dt, scale));
  if (offset != 0.0)
    r = floe__build_binary(&bs, "Add", "add", r, floe__build_scalar(&bs, "offset", dt, offset));
  return r;
}

/* The initial value of variable `name` under "<name>/initializer/". */
/* fan_shape: the shape whose fans the Glorot and He initialisers use (a shard's: the whole
 * variable's). */
static FloeOutput build_initializer(FloeGraph *g, const char *name, FloeDType dt,
                                    const FloeShape *shape, const FloeShape *fan_shape,
                                    const FloeInitializer *init) {
  FloeInitKind k = init->kind;
  bool random = k != FLOE_INIT_ZEROS && k != FLOE_INIT_CONSTANT;
  if (random && !(FLOE_DTYPES_FLOAT & FLOE_DTYPE_BIT(dt))) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "variable '%s': the %s initialiser needs a float dtype, not %s (use zeros or "
                     "a constant)",
                     name, init_kind_name(k), floe_dtype_name(dt));
    return floe_out(NULL, 0);
  }
  if (!isfinite(init->a) || !isfinite(init->b) ||
      ((k == FLOE_INIT_NORMAL || k == FLOE_INIT_TRUNCATED_NORMAL) && init->b < 0) ||
      (k == FLOE_INIT_UNIFORM && init->b < init->a)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "variable '%s': bad %s initialiser parameters (%g, %g): %s", name,
                     init_kind_name(k), init->a, init->b,
                     k == FLOE_INIT_UNIFORM ? "need finite lo <= hi"
                                            : "need a finite mean and a finite stddev >= 0");
    return floe_out(NULL, 0);
  }
  char *scope = join_name(g, name, "initializer");
  if (!scope) return floe_out(NULL, 0);
  double fan_in, fan_out;
  fans(fan_shape, &fan_in, &fan_out);
  double fan_sum = fan_in + fan_out > 0 ? fan_in + fan_out : 1.0;
  if (fan_in <= 0) fan_in = 1.0;
  FloeOutput o = floe_out(NULL, 0);
  switch (k) {
    case FLOE_INIT_ZEROS:
      o = build_constant(g, scope, dt, shape, 0.0);
      break;
    case FLOE_INIT_CONSTANT:
      o = build_constant(g, scope, dt, shape, init->a);
      break;
    case FLOE_INIT_UNIFORM:
      o = build_random(g, scope, name, "RandomUniform", dt, shape, init->seed, init->b - init->a,
                       init->a);
      break;
    case FLOE_INIT_NORMAL:
      o = build_random(g, scope, name, "RandomNormal", dt, shape, init->seed, init->b, init->a);
      break;
    case FLOE_INIT_TRUNCATED_NORMAL:
      o = build_random(g, scope, name, "TruncatedNormal", dt, shape, init->seed, init->b,
                       init->a);
      break;
    case FLOE_INIT_GLOROT_UNIFORM: {
      double limit = sqrt(6.0 / fan_sum);
      o = build_random(g, scope, name, "RandomUniform", dt, shape, init->seed, 2 * limit, -limit);
      break;
    }
    case FLOE_INIT_GLOROT_NORMAL:
      o = build_random(g, scope, name, "TruncatedNormal", dt, shape, init->seed,
                       sqrt(2.0 / fan_sum) / TRUNCATED_NORMAL_STDDEV, 0.0);
      break;
    case FLOE_INIT_HE_NORMAL:
      o = build_random(g, scope, name, "TruncatedNormal", dt, shape, init->seed,
                       sqrt(2.0 / fan_in) / TRUNCATED_NORMAL_STDDEV, 0.0);
      break;
    default:
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "variable '%s': unknown initialiser kind %d",
                       name, (int)k);
      break;
  }
  floe__free(scope);
  return o;
}

/* ---- variables ---- */

static bool is_var_handle(const FloeNode *n) {
  return n && strcmp(n->op->name, "VarHandleOp") == 0;
}

/* The node "<name>/<suffix>" when it exists and runs op, else NULL. */
static FloeNode *find_companion(const FloeGraph *g, const char *name, const char *suffix,
                                const char *op) {
  char buf[256];
  int len = snprintf(buf, sizeof buf, "%s/%s", name, suffix);
  FloeNode *n = NULL;
  if (len >= 0 && (size_t)len < sizeof buf) {
    n = floe_graph_find(g, buf);
  } else {
    char *s = floe__asprintf("%s/%s", name, suffix);
    if (!s) return NULL;
    n = floe_graph_find(g, s);
    floe__free(s);
  }
  return n && strcmp(n->op->name, op) == 0 ? n : NULL;
}

static FloeDType attr_dtype(const FloeNode *n) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "dtype");
  return v && v->kind == FLOE_ATTR_TYPE ? v->u.type : FLOE_DTYPE_INVALID;
}

static FloeShape attr_shape(const FloeNode *n) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "shape");
  return v && v->kind == FLOE_ATTR_SHAPE ? v->u.shape : floe_shape_unknown();
}

static bool shapes_equal(const FloeShape *a, const FloeShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* ReadVariableOp of handle (dtype dt) called name. */
static FloeOutput read_node(FloeGraph *g, const char *name, FloeOutput handle, FloeDType dt) {
  FloeNodeBuilder *b = floe_node_begin(g, "ReadVariableOp", name);
  floe_node_add_input(b, handle);
  floe_node_set_attr_type(b, "dtype", dt);
  return floe_out(floe_node_finish(b), 0);
}

static FloeVariable make_variable(FloeGraph *g, const char *name, FloeDType dtype,
                                  FloeShape shape, FloeInitializer init, bool trainable,
                                  const FloeVarExtra *x) {
  if (!graph_ok(g)) return NO_VARIABLE;
  if (!name || !*name) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_variable: a variable needs a name");
    return NO_VARIABLE;
  }
  char want[128], have[128];
  FloeNode *old = floe_graph_find(g, name);
  if (old) {
    if (!is_var_handle(old)) {
      floe__graph_fail(g, FLOE_ALREADY_EXISTS,
                       "variable '%s': the graph has a node of that name that is not a variable "
                       "(op %s)",
                       name, old->op->name);
      return NO_VARIABLE;
    }
    FloeShape os = attr_shape(old);
    if (attr_dtype(old) != dtype || !shapes_equal(&os, &shape)) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "variable '%s' exists as %s %s; asked for %s %s (one name, one variable: "
                       "choose another name)",
                       name, floe_dtype_name(attr_dtype(old)),
                       floe_shape_str(&os, have, sizeof have), floe_dtype_name(dtype),
                       floe_shape_str(&shape, want, sizeof want));
      return NO_VARIABLE;
    }
    return floe_variable_get(g, name);
  }
  bool known = shape.rank >= 0 && shape.rank <= FLOE_MAX_DIMS;
  for (int i = 0; known && i < shape.rank; i++) known = shape.dims[i] >= 0;
  if (!known) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "variable '%s': its shape %s must be fully known", name,
                     floe_shape_str(&shape, want, sizeof want));
    return NO_VARIABLE;
  }
  if (!(FLOE_DTYPES_ALL & FLOE_DTYPE_BIT(dtype)) || floe_dtype_size(dtype) == 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "variable '%s': %s is not a data type", name,
                     floe_dtype_name(dtype));
    return NO_VARIABLE;
  }
  FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", name);
  floe_node_set_attr_type(b, "dtype", dtype);
  floe_node_set_attr_shape(b, "shape", shape);
  floe_node_set_attr_bool(b, "trainable", trainable);
  if (x && x->container) floe_node_set_attr_string(b, "container", x->container);
  if (x && x->full_name) { /* a shard */
    floe_node_set_attr_string(b, "full_name", x->full_name);
    floe_node_set_attr_shape(b, "full_shape", x->full_shape);
    floe_node_set_attr_int(b, "part_axis", x->axis);
    floe_node_set_attr_int(b, "part_offset", x->offset);
  }
  FloeVariable v = NO_VARIABLE;
  v.handle = floe_out(floe_node_finish(b), 0);
  FloeOutput value = build_initializer(g, name, dtype, &shape,
                                       x && x->full_name ? &x->full_shape : &shape, &init);
  char *nm = join_name(g, name, "init");
  if (!nm) return NO_VARIABLE;
  b = floe_node_begin(g, "AssignVariableOp", nm);
  floe__free(nm);
  floe_node_add_input(b, v.handle);
  floe_node_add_input(b, value);
  v.init = floe_node_finish(b);
  if (!(nm = join_name(g, name, "read"))) return NO_VARIABLE;
  v.value = read_node(g, nm, v.handle, dtype);
  floe__free(nm);
  return graph_ok(g) ? v : NO_VARIABLE;
}

/* The nodes belong to g. On error (sticky) every member is invalid / NULL. */
FloeVariable floe_variable(FloeGraph *g, const char *name, FloeDType dtype, FloeShape shape,
                           FloeInitializer init) {
  return make_variable(g, name, dtype, shape, init, true, NULL);
}

FloeVariable floe_variable_untrained(FloeGraph *g, const char *name, FloeDType dtype,
                                     FloeShape shape, FloeInitializer init) {
  return make_variable(g, name, dtype, shape, init, false, NULL);
}

/* Adds "<name>/read" when the graph lacks it (a hand-built VarHandleOp). */
FloeVariable floe_variable_get(FloeGraph *g, const char *name) {
  if (!graph_ok(g)) return NO_VARIABLE;
  FloeNode *n = name ? floe_graph_find(g, name) : NULL;
  if (!is_var_handle(n)) {
    floe__graph_fail(g, n ? FLOE_INVALID_ARGUMENT : FLOE_NOT_FOUND,
                     "floe_variable_get: '%s' %s", name ? name : "(null)",
                     n ? "is not a variable (VarHandleOp)" : "is not a node of the graph");
    return NO_VARIABLE;
  }
  FloeVariable v = {floe_out(n, 0), floe_out(NULL, 0), NULL};
  v.init = find_companion(g, name, "init", "AssignVariableOp");
  FloeNode *r = find_companion(g, name, "read", "ReadVariableOp");
  if (r) {
    v.value = floe_out(r, 0);
  } else {
    char *nm = join_name(g, name, "read");
    if (!nm) return NO_VARIABLE;
    v.value = read_node(g, nm, v.handle, attr_dtype(n));
    floe__free(nm);
  }
  return graph_ok(g) ? v : NO_VARIABLE;
}

/* Members are borrowed from g; value is invalid for a VarHandleOp without "<name>/read". */
int floe_graph_variables(const FloeGraph *g, int trainable_only, FloeVariable *out, int cap) {
  if (!g) return 0;
  int count = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    FloeNode *n = g->nodes[i];
    if (!is_var_handle(n)) continue;
    if (trainable_only) {
      const FloeAttrValue *t = floe__attrs_get(&n->attrs, "trainable");
      if (t && t->kind == FLOE_ATTR_BOOL && !t->u.b) continue;
    }
    if (out && count < cap) {
      FloeNode *r = find_companion(g, n->name, "read", "ReadVariableOp");
      out[count] = (FloeVariable){floe_out(n, 0), floe_out(r, 0),
                                  find_companion(g, n->name, "init", "AssignVariableOp")};
    }
    count++;
  }
  return count;
}

/* name NULL: "init", or "init_1", "init_2", ... when taken. */
FloeNode *floe_variables_initializer(FloeGraph *g, const char *name) {
  if (!graph_ok(g)) return NULL;
  char auto_name[32];
  if (!name) {
    snprintf(auto_name, sizeof auto_name, "init");
    for (int k = 1; floe_graph_find(g, auto_name); k++)
      snprintf(auto_name, sizeof auto_name, "init_%d", k);
    name = auto_name;
  }
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", name);
  int num_nodes = g->num_nodes; /* the NoOp is not in g yet */
  for (int i = 0; i < num_nodes; i++) {
    FloeNode *n = g->nodes[i];
    if (!is_var_handle(n)) continue;
    FloeNode *init = find_companion(g, n->name, "init", "AssignVariableOp");
    if (init) floe_node_add_control_input(b, init);
  }
  return floe_node_finish(b);
}

static FloeNode *assign_op(FloeGraph *g, const char *op, const char *name, FloeOutput handle,
                           FloeOutput value) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, handle);
  floe_node_add_input(b, value);
  return floe_node_finish(b);
}

FloeNode *floe_assign(FloeGraph *g, const char *name, FloeOutput handle, FloeOutput value) {
  return assign_op(g, "AssignVariableOp", name, handle, value);
}

FloeNode *floe_assign_add(FloeGraph *g, const char *name, FloeOutput handle, FloeOutput value) {
  return assign_op(g, "AssignAddVariableOp", name, handle, value);
}

FloeNode *floe_assign_sub(FloeGraph *g, const char *name, FloeOutput handle, FloeOutput value) {
  return assign_op(g, "AssignSubVariableOp", name, handle, value);
}

/* The dtype comes from the VarHandleOp that makes handle. */
FloeOutput floe_read_variable(FloeGraph *g, const char *name, FloeOutput handle) {
  if (!graph_ok(g)) return floe_out(NULL, 0);
  if (!handle.node || !is_var_handle(handle.node)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_read_variable '%s': the handle must be the output of a VarHandleOp%s",
                     name ? name : "ReadVariableOp",
                     handle.node ? "" : " (it is invalid: an earlier builder call failed)");
    return floe_out(NULL, 0);
  }
  return read_node(g, name, handle, attr_dtype(handle.node));
}

/* See train.h. */
FloeVariable floe__variable_local(FloeGraph *g, const char *name, FloeDType dtype, FloeShape shape,
                                  FloeInitializer init) {
  FloeVarExtra x = {.container = FLOE__LOCAL_CONTAINER};
  return make_variable(g, name, dtype, shape, init, false, &x);
}

/* See train.h. */
FloeVariable floe__variable_ex(FloeGraph *g, const char *name, FloeDType dtype, FloeShape shape,
                               FloeInitializer init, bool trainable, const FloeVarExtra *x) {
  return make_variable(g, name, dtype, shape, init, trainable, x);
}

/* See train.h. */
FloeVariable floe__variable_slot(FloeGraph *g, const FloeNode *primary, const char *name,
                                 const char *slot, FloeDType dtype, FloeShape shape,
                                 FloeInitializer init) {
  const char *full = floe_node_attr_string(primary, "full_name");
  if (!full[0]) return make_variable(g, name, dtype, shape, init, false, NULL);
  const FloeAttrValue *fs = floe__attrs_get(&primary->attrs, "full_shape");
  char *slot_full = floe__asprintf("%s/%s", full, slot);
  if (!slot_full || !fs) {
    floe__free(slot_full);
    floe__graph_fail(g, FLOE_NO_MEMORY, "variable '%s': out of memory", name);
    return NO_VARIABLE;
  }
  FloeVarExtra x = {.full_name = slot_full, .full_shape = fs->u.shape,
                    .axis = (int)floe__node_attr_int(primary, "part_axis", 0),
                    .offset = floe__node_attr_int(primary, "part_offset", 0)};
  FloeVariable v = make_variable(g, name, dtype, shape, init, false, &x);
  floe__free(slot_full);
  return v;
}
