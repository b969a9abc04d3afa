/* SPDX-License-Identifier: Apache-2.0 */
/* graph.c - graph building: nodes validated against their op definitions, shape inference,
 * a name index, and the sticky error that lets callers check once at the end. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* Flattened outputs of one node; guards against an absurd N from a file or a caller. */
#define MAX_NODE_OUTPUTS (1 << 16)

struct FloeNodeBuilder {
  FloeGraph *g;
  char *op;
  char *name; /* NULL: automatic */
  char *device;
  FloeOutput *inputs;
  int num_inputs, cap_inputs;
  int *lists; /* inputs per op input argument */
  int num_lists, cap_lists;
  FloeNode **control;
  int num_control, cap_control;
  FloeAttrs attrs;
};

/* ------------------------------------------------------------------------------------ */
/* Sticky error. */

void floe__graph_fail(FloeGraph *g, floe_code code, const char *fmt, ...) {
  if (!g || g->error != FLOE_OK || code == FLOE_OK) return;
  g->error = code;
  va_list ap;
  va_start(ap, fmt);
  g->error_msg = floe__vasprintf(fmt, ap);
  va_end(ap);
}

/* Moves st's code and message into the sticky error (first error wins); clears st. */
static void graph_fail_status(FloeGraph *g, FloeStatus *st) {
  if (g->error == FLOE_OK && st->code != FLOE_OK) {
    g->error = st->code;
    g->error_msg = st->msg;
    st->msg = NULL;
    st->code = FLOE_OK;
  }
  floe_status_clear(st);
}

floe_code floe_graph_status(const FloeGraph *g) { return g ? g->error : FLOE_INVALID_ARGUMENT; }

const char *floe_graph_error(const FloeGraph *g, FloeStatus *status) {
  if (!g) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "graph is NULL");
    return "graph is NULL";
  }
  if (g->error == FLOE_OK) {
    floe_status_clear(status);
    return "";
  }
  const char *msg = g->error_msg ? g->error_msg : floe_code_message(g->error);
  floe_status_set(status, g->error, "%s", msg);
  return msg;
}

void floe_graph_clear_error(FloeGraph *g) {
  if (!g) return;
  floe__free(g->error_msg);
  g->error_msg = NULL;
  g->error = FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Graph lifetime and the name index (open addressing, linear probing, load <= 1/2). */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int find_index(const FloeGraph *g, const char *name) {
  if (!g->name_cap) return -1;
  size_t mask = (size_t)g->name_cap - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
    int idx = g->name_table[i];
    if (idx < 0) return -1;
    if (strcmp(g->nodes[idx]->name, name) == 0) return idx;
  }
}

static void table_insert(int *table, int cap, FloeNode *const *nodes, int idx) {
  size_t mask = (size_t)cap - 1;
  size_t i = hash_name(nodes[idx]->name) & mask;
  while (table[i] >= 0) i = (i + 1) & mask;
  table[i] = idx;
}

/* Makes room for one more node so that inserting it cannot fail. */
static floe_code reserve_node(FloeGraph *g, FloeStatus *st) {
  if (g->num_nodes == INT_MAX / 4)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "graph has too many nodes (%d)",
                           g->num_nodes);
  if (g->num_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 16;
    FloeNode **nodes = floe__realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory growing the graph");
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  if ((g->num_nodes + 1) * 2 > g->name_cap) {
    int cap = g->name_cap ? g->name_cap * 2 : 32;
    int *table = floe__malloc((size_t)cap * sizeof *table);
    if (!table)
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory growing the node name index");
    for (int i = 0; i < cap; i++) table[i] = -1;
    for (int i = 0; i < g->num_nodes; i++) table_insert(table, cap, g->nodes, i);
    floe__free(g->name_table);
    g->name_table = table;
    g->name_cap = cap;
  }
  return FLOE_OK;
}

FloeGraph *floe_graph_new(void) {
  FloeGraph *g = floe__calloc(1, sizeof *g);
  if (!g) return NULL;
  /* A registry that cannot start is reported through the graph's sticky error. */
  FloeStatus st = {FLOE_OK, NULL};
  if (floe__ops_init(&st) != FLOE_OK) {
    if (st.code == FLOE_OK) st.code = FLOE_INTERNAL;
    graph_fail_status(g, &st);
  }
  return g;
}

static void node_free(FloeNode *n) {
  if (!n) return;
  floe__free(n->name);
  floe__free(n->device);
  floe__attrs_clear(&n->attrs);
  floe__free(n->inputs);
  floe__free(n->input_arg);
  floe__free(n->control);
  floe__free(n->out_dtypes);
  floe__free(n->out_shapes);
  floe__free(n);
}

void floe_graph_free(FloeGraph *g) {
  if (!g) return;
  for (int i = 0; i < g->num_nodes; i++) node_free(g->nodes[i]);
  floe__free(g->nodes);
  floe__free(g->name_table);
  floe__free(g->error_msg);
  floe__free(g->device_scope);
  floe__free(g);
}

/* Drops every node that no root reaches through data or control inputs; the kept nodes keep
 * their order and names and are renumbered. Nothing can fail: the arrays only shrink. */
void floe__graph_keep_reachable(FloeGraph *g, FloeNode *const *roots, int num_roots) {
  if (!g || g->num_nodes == 0) return;
  bool *live = floe__calloc((size_t)g->num_nodes, sizeof *live);
  int *stack = floe__malloc((size_t)g->num_nodes * sizeof *stack);
  if (!live || !stack) { /* out of memory: keep everything, which is still correct */
    floe__free(live);
    floe__free(stack);
    return;
  }
  int top = 0;
  for (int i = 0; i < num_roots; i++)
    if (roots[i] && !live[roots[i]->id]) live[roots[i]->id] = true, stack[top++] = roots[i]->id;
  while (top) {
    const FloeNode *n = g->nodes[stack[--top]];
    for (int j = 0; j < n->num_inputs; j++) {
      int id = n->inputs[j].node->id;
      if (!live[id]) live[id] = true, stack[top++] = id;
    }
    for (int j = 0; j < n->num_control; j++) {
      int id = n->control[j]->id;
      if (!live[id]) live[id] = true, stack[top++] = id;
    }
  }
  int k = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    if (!live[i]) {
      node_free(g->nodes[i]);
      continue;
    }
    g->nodes[k] = g->nodes[i];
    g->nodes[k]->id = k;
    k++;
  }
  g->num_nodes = k;
  for (int i = 0; i < g->name_cap; i++) g->name_table[i] = -1;
  for (int i = 0; i < k; i++) table_insert(g->name_table, g->name_cap, g->nodes, i);
  floe__free(live);
  floe__free(stack);
}

void floe_graph_set_device_scope(FloeGraph *g, const char *device) {
  if (!g || g->error != FLOE_OK) return;
  char *d = NULL;
  if (device && device[0] && !(d = floe__strdup(device))) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory copying device scope '%s'", device);
    return;
  }
  floe__free(g->device_scope);
  g->device_scope = d;
}

const char *floe_graph_device_scope(const FloeGraph *g) {
  return g && g->device_scope ? g->device_scope : "";
}

/* ------------------------------------------------------------------------------------ */
/* Names. */

static bool name_is_valid(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s == ':' || (unsigned char)*s < 0x20 || *s == 0x7f) return false;
  return true;
}

static bool suffix_taken(const FloeGraph *g, char *buf, size_t len, const char *base, int64_t k) {
  snprintf(buf, len, "%s_%" PRId64, base, k);
  return find_index(g, buf) >= 0;
}

/* "base", else the first free "base_k". Gallop then bisect: O(log k) probes when
 * base_1..base_k are taken, the usual case; a linear scan settles gaps the bisection
 * stepped over. Caller owns the result. */
static char *unique_name(const FloeGraph *g, const char *base, FloeStatus *st) {
  size_t len = strlen(base) + 24;
  char *buf = floe__malloc(len);
  if (!buf) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory naming a node of op %s", base);
    return NULL;
  }
  snprintf(buf, len, "%s", base);
  if (find_index(g, buf) < 0) return buf;
  int64_t lo = 0, hi = 1; /* lo taken (0 stands for base itself), hi probed next */
  while (hi < ((int64_t)1 << 40) && suffix_taken(g, buf, len, base, hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (suffix_taken(g, buf, len, base, mid))
      lo = mid;
    else
      hi = mid;
  }
  if (suffix_taken(g, buf, len, base, hi))
    for (hi = 1; suffix_taken(g, buf, len, base, hi); hi++) continue;
  return buf;
}

/* ------------------------------------------------------------------------------------ */
/* Messages. */

static void node_prefix(FloeStatus *st, const char *name, const char *op) {
  floe__status_prefix(st, "node '%s' (%s)", name, op);
}

/* "x: T, values: N*T" for an op's input arguments. */
static char *args_str(const FloeArgDef *args, int n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++) {
    const FloeArgDef *a = &args[i];
    const char *type = a->fixed != FLOE_DTYPE_INVALID ? floe_dtype_name(a->fixed)
                       : a->type_attr                 ? a->type_attr
                       : a->type_list_attr            ? a->type_list_attr
                                                      : "?";
    used += (size_t)snprintf(buf + used, len - used, "%s%s: %s%s%s", i ? ", " : "", a->name,
                             a->number_attr ? a->number_attr : "", a->number_attr ? "*" : "",
                             type);
  }
  return buf;
}

/* First flattened input of argument `arg`. */
static int arg_first_input(const FloeNode *n, int arg) {
  for (int i = 0; i < n->num_inputs; i++)
    if (n->input_arg[i] >= arg) return i;
  return n->num_inputs;
}

static bool arg_is_list(const FloeArgDef *a) { return a->number_attr || a->type_list_attr; }

/* "input 2 (values[1]) from 'c:0'" */
static char *input_str(const FloeNode *n, int i, char *buf, size_t len) {
  const FloeArgDef *a = &n->op->inputs[n->input_arg[i]];
  const FloeNode *src = n->inputs[i].node;
  char pos[48] = "";
  if (arg_is_list(a)) snprintf(pos, sizeof pos, "[%d]", i - arg_first_input(n, n->input_arg[i]));
  snprintf(buf, len, "input %d (%s%s) from '%s:%d'", i, a->name, pos, src->name,
           n->inputs[i].index);
  return buf;
}

static FloeDType input_dtype(const FloeNode *n, int i) {
  return n->inputs[i].node->out_dtypes[n->inputs[i].index];
}

/* ------------------------------------------------------------------------------------ */
/* Validation steps of floe__graph_add_node. Each returns FLOE_OK or sets st (unprefixed). */

/* Copies and checks the inputs: argument count, list sizes, and that each input is an
 * existing output of a node of g. */
static floe_code take_inputs(FloeGraph *g, FloeNode *n, const FloeNodeSpec *spec,
                             FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  int num_lists = spec->list_sizes ? spec->num_lists : spec->num_inputs;
  char args[256];
  if (spec->num_inputs < 0 || num_lists < 0 || (spec->num_inputs > 0 && !spec->inputs))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "bad input array (%d inputs)",
                           spec->num_inputs);
  bool has_list_arg = false;
  for (int a = 0; a < op->num_inputs; a++) has_list_arg |= arg_is_list(&op->inputs[a]);
  if (num_lists != op->num_inputs)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "op %s takes %d input argument%s (%s) but %d %s given%s", op->name,
                           op->num_inputs, op->num_inputs == 1 ? "" : "s",
                           args_str(op->inputs, op->num_inputs, args, sizeof args), num_lists,
                           num_lists == 1 ? "was" : "were",
                           has_list_arg && num_lists > op->num_inputs
                               ? "; pass list arguments with floe_node_add_input_list"
                               : "");
  int total = 0;
  for (int a = 0; a < num_lists; a++) {
    int k = spec->list_sizes ? spec->list_sizes[a] : 1;
    if (k < 0 || k > INT_MAX - total)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "input argument '%s' has bad size %d",
                             op->inputs[a].name, k);
    if (k != 1 && !arg_is_list(&op->inputs[a]))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "input argument '%s' takes exactly one tensor, got %d",
                             op->inputs[a].name, k);
    total += k;
  }
  if (total != spec->num_inputs)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "input list sizes add up to %d but %d inputs were given", total,
                           spec->num_inputs);
  if (total) {
    n->inputs = floe__malloc((size_t)total * sizeof *n->inputs);
    n->input_arg = floe__malloc((size_t)total * sizeof *n->input_arg);
    if (!n->inputs || !n->input_arg)
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying %d inputs", total);
  }
  for (int a = 0, i = 0; a < num_lists; a++) {
    int k = spec->list_sizes ? spec->list_sizes[a] : 1;
    for (int j = 0; j < k; j++, i++) {
      FloeOutput in = spec->inputs[i];
      const char *arg = op->inputs[a].name;
      if (!in.node)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "input %d (%s) is invalid: it comes from a builder call that "
                               "failed (its FloeOutput has no node)",
                               i, arg);
      if (in.node->graph != g || in.node->id < 0 || in.node->id >= g->num_nodes ||
          g->nodes[in.node->id] != in.node)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "input %d (%s) is node '%s' of another graph", i, arg,
                               in.node->name);
      if (in.index < 0 || in.index >= in.node->num_outputs)
        return floe_status_set(st, FLOE_OUT_OF_RANGE,
                               "input %d (%s) asks for output %d of node '%s' (%s), which has "
                               "%d output%s",
                               i, arg, in.index, in.node->name, in.node->op->name,
                               in.node->num_outputs, in.node->num_outputs == 1 ? "" : "s");
      n->inputs[i] = in;
      n->input_arg[i] = a;
    }
  }
  n->num_inputs = total;
  return FLOE_OK;
}

static floe_code take_control(FloeGraph *g, FloeNode *n, const FloeNodeSpec *spec,
                              FloeStatus *st) {
  if (spec->num_control < 0 || (spec->num_control > 0 && !spec->control))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "bad control input array (%d)",
                           spec->num_control);
  for (int i = 0; i < spec->num_control; i++) {
    const FloeNode *c = spec->control[i];
    if (!c)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "control input %d is NULL (a node from a failed builder call?)", i);
    if (c->graph != g || c->id < 0 || c->id >= g->num_nodes || g->nodes[c->id] != c)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "control input %d is node '%s' of another graph", i, c->name);
  }
  if (spec->num_control) {
    n->control = floe__malloc((size_t)spec->num_control * sizeof *n->control);
    if (!n->control)
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying control inputs");
    memcpy(n->control, spec->control, (size_t)spec->num_control * sizeof *n->control);
  }
  n->num_control = spec->num_control;
  return FLOE_OK;
}

static bool dtype_valid(FloeDType dt) { return floe_dtype_size(dt) != 0; }

static bool shape_valid(const FloeShape *s) {
  if (s->rank < FLOE_RANK_UNKNOWN || s->rank > FLOE_MAX_DIMS) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < FLOE_DIM_UNKNOWN) return false;
  return true;
}

/* Every given attribute must be declared by the op with the same kind. */
static floe_code check_given_attrs(const FloeNode *n, FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  for (int i = 0; i < n->attrs.n; i++) {
    const char *name = n->attrs.names[i];
    const FloeAttrValue *v = &n->attrs.values[i];
    const FloeAttrDef *def = floe__op_attr(op, name);
    if (!def) {
      char known[256];
      size_t used = 0;
      known[0] = '\0';
      for (int k = 0; k < op->num_attrs && used < sizeof known; k++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "",
                                 op->attrs[k].name);
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "unknown attribute '%s' (op %s has %s%s)", name, op->name,
                             op->num_attrs ? "attributes " : "no attributes", known);
    }
    if (def->kind != v->kind)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "attribute '%s' must be %s, got %s",
                             name, floe__attr_kind_name(def->kind),
                             floe__attr_kind_name(v->kind));
    if (v->kind == FLOE_ATTR_TYPE && !dtype_valid(v->u.type))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "attribute '%s' is not a dtype (%d)",
                             name, (int)v->u.type);
    if (v->kind == FLOE_ATTR_TYPE_LIST)
      for (size_t k = 0; k < v->u.tlist.n; k++)
        if (!dtype_valid(v->u.tlist.v[k]))
          return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                 "attribute '%s' element %zu is not a dtype (%d)", name, k,
                                 (int)v->u.tlist.v[k]);
    if (v->kind == FLOE_ATTR_TENSOR && !v->u.tensor)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "attribute '%s' has no tensor", name);
    if (v->kind == FLOE_ATTR_SHAPE && !shape_valid(&v->u.shape))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "attribute '%s' is not a valid shape",
                             name);
    if (v->kind == FLOE_ATTR_SHAPE_LIST)
      for (size_t k = 0; k < v->u.slist.n; k++)
        if (!shape_valid(&v->u.slist.v[k]))
          return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                 "attribute '%s' element %zu is not a valid shape (rank -1 to "
                                 "%d, dims >= -1)",
                                 name, k, FLOE_MAX_DIMS);
  }
  return FLOE_OK;
}

static floe_code set_attr(FloeNode *n, const char *name, FloeAttrValue *v, FloeStatus *st) {
  if (floe__attrs_set(&n->attrs, name, v, st) == FLOE_OK) return FLOE_OK;
  floe__attr_value_clear(v);
  return FLOE_NO_MEMORY;
}

/* List sizes set number attributes ("N*T"); list(type) arguments set their type list. */
static floe_code infer_list_attrs(FloeNode *n, FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  for (int a = 0; a < op->num_inputs; a++) {
    const FloeArgDef *arg = &op->inputs[a];
    int first = arg_first_input(n, a), k = arg_first_input(n, a + 1) - first;
    if (arg->number_attr) {
      const FloeAttrValue *v = floe__attrs_get(&n->attrs, arg->number_attr);
      if (v && v->u.i != k)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "attribute %s = %" PRId64 " but input argument '%s' has %d "
                               "tensor%s",
                               arg->number_attr, v->u.i, arg->name, k, k == 1 ? "" : "s");
      if (!v) {
        FloeAttrValue nv = {.kind = FLOE_ATTR_INT, .u.i = k};
        if (set_attr(n, arg->number_attr, &nv, st) != FLOE_OK) return FLOE_NO_MEMORY;
      }
    }
    if (arg->type_list_attr) {
      const FloeAttrValue *v = floe__attrs_get(&n->attrs, arg->type_list_attr);
      if (v) {
        bool same = v->u.tlist.n == (size_t)k;
        for (int j = 0; same && j < k; j++) same = v->u.tlist.v[j] == input_dtype(n, first + j);
        if (!same) {
          char want[128], got[128];
          FloeAttrValue gv = {.kind = FLOE_ATTR_TYPE_LIST};
          FloeDType dts[8];
          gv.u.tlist.v = dts;
          gv.u.tlist.n = (size_t)(k < 8 ? k : 8);
          for (size_t j = 0; j < gv.u.tlist.n; j++) dts[j] = input_dtype(n, first + (int)j);
          return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                 "input argument '%s' has dtypes %s%s but attribute %s = %s",
                                 arg->name, floe__attr_value_str(&gv, got, sizeof got),
                                 k > 8 ? "..." : "", arg->type_list_attr,
                                 floe__attr_value_str(v, want, sizeof want));
        }
      } else {
        FloeAttrValue nv = {.kind = FLOE_ATTR_TYPE_LIST};
        if (k) {
          nv.u.tlist.v = floe__malloc((size_t)k * sizeof(FloeDType));
          if (!nv.u.tlist.v)
            return floe_status_set(st, FLOE_NO_MEMORY, "out of memory inferring %s",
                                   arg->type_list_attr);
          for (int j = 0; j < k; j++) nv.u.tlist.v[j] = input_dtype(n, first + j);
        }
        nv.u.tlist.n = (size_t)k;
        if (set_attr(n, arg->type_list_attr, &nv, st) != FLOE_OK) return FLOE_NO_MEMORY;
      }
    }
  }
  return FLOE_OK;
}

/* Fixed dtypes are checked; type attributes are inferred from the inputs that use them.
 * from[a] records which input set attribute a (-1: given by the caller, -2: unset) so a
 * conflict can name both sides. */
static floe_code infer_type_attrs(FloeNode *n, int *from, FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  char in1[192], in2[192];
  for (int a = 0; a < op->num_attrs; a++)
    from[a] = floe__attrs_get(&n->attrs, op->attrs[a].name) ? -1 : -2;
  for (int i = 0; i < n->num_inputs; i++) {
    const FloeArgDef *arg = &op->inputs[n->input_arg[i]];
    FloeDType dt = input_dtype(n, i);
    if (arg->fixed != FLOE_DTYPE_INVALID) {
      if (dt != arg->fixed)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s has dtype %s but must be %s",
                               input_str(n, i, in1, sizeof in1), floe_dtype_name(dt),
                               floe_dtype_name(arg->fixed));
      continue;
    }
    if (!arg->type_attr) continue;
    const FloeAttrDef *def = floe__op_attr(op, arg->type_attr);
    if (!def || def->kind != FLOE_ATTR_TYPE)
      return floe_status_set(st, FLOE_INTERNAL, "op %s: input '%s' names type attribute '%s', "
                             "which is not a declared type attribute", op->name, arg->name,
                             arg->type_attr);
    int ai = (int)(def - op->attrs);
    const FloeAttrValue *v = floe__attrs_get(&n->attrs, arg->type_attr);
    if (!v) {
      FloeAttrValue nv = {.kind = FLOE_ATTR_TYPE, .u.type = dt};
      if (set_attr(n, arg->type_attr, &nv, st) != FLOE_OK) return FLOE_NO_MEMORY;
      from[ai] = i;
    } else if (v->u.type != dt) {
      if (from[ai] < 0)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s has dtype %s but attribute %s = %s",
                               input_str(n, i, in1, sizeof in1), floe_dtype_name(dt),
                               arg->type_attr, floe_dtype_name(v->u.type));
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s has dtype %s but %s has dtype %s (both are type %s)",
                             input_str(n, i, in1, sizeof in1), floe_dtype_name(dt),
                             input_str(n, from[ai], in2, sizeof in2),
                             floe_dtype_name(input_dtype(n, from[ai])), arg->type_attr);
    }
  }
  return FLOE_OK;
}

/* Defaults, required attributes, type constraints and minimums. */
static floe_code complete_attrs(FloeNode *n, const int *from, FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  for (int a = 0; a < op->num_attrs; a++) {
    const FloeAttrDef *def = &op->attrs[a];
    const FloeAttrValue *v = floe__attrs_get(&n->attrs, def->name);
    if (!v) {
      if (!def->has_default)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "missing required attribute '%s' (%s)", def->name,
                               floe__attr_kind_name(def->kind));
      FloeAttrValue nv;
      if (floe__attr_value_copy(&nv, &def->def, st) != FLOE_OK) return FLOE_NO_MEMORY;
      if (set_attr(n, def->name, &nv, st) != FLOE_OK) return FLOE_NO_MEMORY;
      v = floe__attrs_get(&n->attrs, def->name);
    }
    char allowed[96], src[200] = "";
    if (from[a] >= 0) {
      char in[192];
      snprintf(src, sizeof src, " (from %s)", input_str(n, from[a], in, sizeof in));
    }
    if (v->kind == FLOE_ATTR_TYPE && def->allowed && !(def->allowed & FLOE_DTYPE_BIT(v->u.type)))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "type attribute %s = %s%s is not allowed (allowed: %s)", def->name,
                             floe_dtype_name(v->u.type), src,
                             floe__dtype_mask_str(def->allowed, allowed, sizeof allowed));
    if (v->kind == FLOE_ATTR_TYPE_LIST && def->allowed)
      for (size_t k = 0; k < v->u.tlist.n; k++)
        if (!(def->allowed & FLOE_DTYPE_BIT(v->u.tlist.v[k])))
          return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                 "type list attribute %s element %zu = %s is not allowed "
                                 "(allowed: %s)",
                                 def->name, k, floe_dtype_name(v->u.tlist.v[k]),
                                 floe__dtype_mask_str(def->allowed, allowed, sizeof allowed));
    if (def->has_min) {
      int64_t have = v->kind == FLOE_ATTR_INT          ? v->u.i
                     : v->kind == FLOE_ATTR_INT_LIST   ? (int64_t)v->u.ilist.n
                     : v->kind == FLOE_ATTR_FLOAT_LIST ? (int64_t)v->u.flist.n
                     : v->kind == FLOE_ATTR_TYPE_LIST  ? (int64_t)v->u.tlist.n
                     : v->kind == FLOE_ATTR_SHAPE_LIST ? (int64_t)v->u.slist.n
                                                       : def->min;
      if (have < def->min)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "attribute %s %s %" PRId64 " is below its minimum %" PRId64,
                               def->name, v->kind == FLOE_ATTR_INT ? "=" : "has length", have,
                               def->min);
    }
  }
  return FLOE_OK;
}

/* Output dtypes from the output arguments and the now complete attributes. */
static floe_code compute_outputs(FloeNode *n, FloeStatus *st) {
  const FloeOpInfo *op = n->op;
  int64_t total = 0;
  for (int pass = 0; pass < 2; pass++) {
    int k = 0;
    for (int a = 0; a < op->num_outputs; a++) {
      const FloeArgDef *arg = &op->outputs[a];
      int64_t count = 1;
      const FloeAttrValue *tl = NULL, *num = NULL;
      FloeDType dt = arg->fixed;
      bool declared = true;
      if (arg->number_attr) {
        num = floe__attrs_get(&n->attrs, arg->number_attr);
        declared = num && num->kind == FLOE_ATTR_INT;
        count = declared ? num->u.i : 0;
      }
      if (arg->type_list_attr) {
        tl = floe__attrs_get(&n->attrs, arg->type_list_attr);
        declared = declared && tl && tl->kind == FLOE_ATTR_TYPE_LIST;
        count = declared ? (int64_t)tl->u.tlist.n : 0;
      }
      if (arg->type_attr) {
        const FloeAttrValue *v = floe__attrs_get(&n->attrs, arg->type_attr);
        dt = v && v->kind == FLOE_ATTR_TYPE ? v->u.type : FLOE_DTYPE_INVALID;
      }
      if (!declared || (!tl && !dtype_valid(dt)))
        return floe_status_set(st, FLOE_INTERNAL,
                               "op %s: output '%s' refers to an attribute the op does not "
                               "declare",
                               op->name, arg->name);
      if (count < 0)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "attribute %s = %" PRId64 " is negative (it counts output '%s')",
                               arg->number_attr, count, arg->name);
      if (pass == 0) {
        if (count > MAX_NODE_OUTPUTS - total)
          return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                 "output '%s' would have %" PRId64 " tensors (at most %d)",
                                 arg->name, count, MAX_NODE_OUTPUTS);
        total += count;
        continue;
      }
      for (int64_t j = 0; j < count; j++, k++) {
        n->out_dtypes[k] = tl ? tl->u.tlist.v[j] : dt;
        n->out_shapes[k] = floe_shape_unknown();
      }
    }
    if (pass == 0 && total) {
      n->out_dtypes = floe__malloc((size_t)total * sizeof *n->out_dtypes);
      n->out_shapes = floe__malloc((size_t)total * sizeof *n->out_shapes);
      if (!n->out_dtypes || !n->out_shapes)
        return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for %" PRId64 " outputs",
                               total);
    }
  }
  n->num_outputs = (int)total;
  return FLOE_OK;
}

/* ", inputs: f32[2,3], i32[]" appended to shape errors so the message shows the shapes. */
static char *inputs_summary(const FloeNode *n, const FloeShape *in, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  if (!n->num_inputs) return buf;
  used += (size_t)snprintf(buf, len, " (inputs: ");
  for (int i = 0; i < n->num_inputs && used < len; i++) {
    char s[128];
    used += (size_t)snprintf(buf + used, len - used, "%s%s%s", i ? ", " : "",
                             floe_dtype_name(input_dtype(n, i)), floe_shape_str(&in[i], s, sizeof s));
  }
  if (used < len) snprintf(buf + used, len - used, ")");
  return buf;
}

floe_code floe__infer_shapes(FloeNode *n, FloeStatus *st) {
  floe_code rc = FLOE_OK;
  FloeShape *in = NULL, *out = NULL;
  if (!n->op->shape_fn) {
    for (int i = 0; i < n->num_outputs; i++) n->out_shapes[i] = floe_shape_unknown();
    return FLOE_OK;
  }
  if (n->num_inputs) {
    in = floe__malloc((size_t)n->num_inputs * sizeof *in);
    if (!in) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory inferring shapes");
      goto err_prefix;
    }
    for (int i = 0; i < n->num_inputs; i++)
      in[i] = n->inputs[i].node->out_shapes[n->inputs[i].index];
  }
  if (n->num_outputs) {
    out = floe__malloc((size_t)n->num_outputs * sizeof *out);
    if (!out) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory inferring shapes");
      goto err_prefix;
    }
    for (int i = 0; i < n->num_outputs; i++) out[i] = floe_shape_unknown();
  }
  FloeStatus sst = {FLOE_OK, NULL};
  struct FloeShapeContext ctx = {.node = n, .input_shapes = in, .output_shapes = out,
                                 .status = &sst};
  floe_code fn_rc = n->op->shape_fn(floe__host_api(), &ctx);
  if (fn_rc != FLOE_OK || sst.code != FLOE_OK) {
    char summary[512];
    rc = sst.code != FLOE_OK ? sst.code : fn_rc;
    floe_status_set(st, rc, "%s%s",
                    sst.code != FLOE_OK ? floe_status_message(&sst)
                                        : "shape function failed without a message",
                    inputs_summary(n, in, summary, sizeof summary));
    floe_status_clear(&sst);
    goto err_prefix;
  }
  for (int i = 0; i < n->num_outputs; i++) {
    if (!shape_valid(&out[i])) {
      rc = floe_status_set(st, FLOE_INTERNAL, "shape function produced an invalid shape "
                           "(rank %d) for output %d", (int)out[i].rank, i);
      goto err_prefix;
    }
    n->out_shapes[i] = out[i];
  }
  floe__free(in);
  floe__free(out);
  return FLOE_OK;

err_prefix:
  node_prefix(st, n->name, n->op->name);
  floe__free(in);
  floe__free(out);
  return rc;
}

FloeNode *floe__graph_add_node(FloeGraph *g, const FloeNodeSpec *spec, FloeStatus *st) {
  const FloeOpInfo *op = spec->op ? floe__op_lookup(spec->op) : NULL;
  const char *label = spec->name ? spec->name : spec->op ? spec->op : "?";
  int *from = NULL;
  if (!op) {
    if (!spec->op)
      floe_status_set(st, FLOE_INVALID_ARGUMENT, "node '%s': no op given", label);
    else
      floe_status_set(st, FLOE_NOT_FOUND,
                      "node '%s': unknown op '%s' (not a standard op; a custom op must be "
                      "registered by its plugin first)",
                      label, spec->op);
    return NULL;
  }
  if (spec->name && !name_is_valid(spec->name)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "node '%s' (%s): invalid name: names are non-empty and contain no ':' "
                    "or control characters",
                    spec->name, op->name);
    return NULL;
  }
  if (spec->name && find_index(g, spec->name) >= 0) {
    const FloeNode *old = g->nodes[find_index(g, spec->name)];
    floe_status_set(st, FLOE_ALREADY_EXISTS,
                    "node '%s' (%s): the graph already has a node named '%s' (%s); node names "
                    "must be unique",
                    spec->name, op->name, old->name, old->op->name);
    return NULL;
  }
  FloeNode *n = floe__calloc(1, sizeof *n);
  if (!n) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding node '%s' (%s)", label, op->name);
    return NULL;
  }
  n->op = op;
  n->graph = g;
  n->id = g->num_nodes;
  floe__attrs_init(&n->attrs);
  n->name = spec->name ? floe__strdup(spec->name) : unique_name(g, op->name, st);
  if (!n->name) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding node '%s' (%s)", label, op->name);
    goto err_free_node;
  }
  if (spec->device && spec->device[0]) {
    n->device = floe__strdup(spec->device);
    if (!n->device) {
      floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying a device name");
      goto err_prefix;
    }
  }
  if (spec->attrs && floe__attrs_copy(&n->attrs, spec->attrs, st) != FLOE_OK) goto err_prefix;
  if (take_inputs(g, n, spec, st) != FLOE_OK) goto err_prefix;
  if (check_given_attrs(n, st) != FLOE_OK) goto err_prefix;
  if (infer_list_attrs(n, st) != FLOE_OK) goto err_prefix;
  from = floe__malloc((size_t)(op->num_attrs ? op->num_attrs : 1) * sizeof *from);
  if (!from) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory inferring attributes");
    goto err_prefix;
  }
  if (infer_type_attrs(n, from, st) != FLOE_OK) goto err_prefix;
  if (complete_attrs(n, from, st) != FLOE_OK) goto err_prefix;
  if (take_control(g, n, spec, st) != FLOE_OK) goto err_prefix;
  if (compute_outputs(n, st) != FLOE_OK) goto err_prefix;
  if (floe__infer_shapes(n, st) != FLOE_OK) goto err_free_from; /* already prefixed */
  if (reserve_node(g, st) != FLOE_OK) goto err_prefix;
  floe__free(from);
  g->nodes[g->num_nodes++] = n;
  table_insert(g->name_table, g->name_cap, g->nodes, n->id);
  return n;

err_prefix:
  node_prefix(st, n->name ? n->name : label, op->name);
err_free_from:
  floe__free(from);
err_free_node:
  node_free(n);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Clone and output names. */

static FloeNode *clone_node(const FloeNode *s, FloeGraph *c, FloeStatus *st) {
  FloeNode *n = floe__calloc(1, sizeof *n);
  if (!n) goto err_oom;
  n->id = s->id;
  n->op = s->op;
  n->graph = c;
  floe__attrs_init(&n->attrs);
  n->name = floe__strdup(s->name);
  if (!n->name) goto err_free_node;
  if (s->device && !(n->device = floe__strdup(s->device))) goto err_free_node;
  if (floe__attrs_copy(&n->attrs, &s->attrs, st) != FLOE_OK) goto err_free_node;
  if (s->num_inputs) {
    n->inputs = floe__malloc((size_t)s->num_inputs * sizeof *n->inputs);
    n->input_arg = floe__malloc((size_t)s->num_inputs * sizeof *n->input_arg);
    if (!n->inputs || !n->input_arg) goto err_free_node;
    for (int i = 0; i < s->num_inputs; i++) {
      n->inputs[i].node = NULL; /* set once every node exists: loops have back edges */
      n->inputs[i].index = s->inputs[i].index;
    }
    memcpy(n->input_arg, s->input_arg, (size_t)s->num_inputs * sizeof *n->input_arg);
  }
  n->num_inputs = s->num_inputs;
  if (s->num_control) {
    n->control = floe__malloc((size_t)s->num_control * sizeof *n->control);
    if (!n->control) goto err_free_node;
    for (int i = 0; i < s->num_control; i++) n->control[i] = NULL; /* likewise */
  }
  n->num_control = s->num_control;
  if (s->num_outputs) {
    n->out_dtypes = floe__malloc((size_t)s->num_outputs * sizeof *n->out_dtypes);
    n->out_shapes = floe__malloc((size_t)s->num_outputs * sizeof *n->out_shapes);
    if (!n->out_dtypes || !n->out_shapes) goto err_free_node;
    memcpy(n->out_dtypes, s->out_dtypes, (size_t)s->num_outputs * sizeof *n->out_dtypes);
    memcpy(n->out_shapes, s->out_shapes, (size_t)s->num_outputs * sizeof *n->out_shapes);
  }
  n->num_outputs = s->num_outputs;
  return n;

err_free_node:
  node_free(n);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying node '%s'", s->name);
  return NULL;
}

FloeGraph *floe__graph_clone(const FloeGraph *g, FloeStatus *st) {
  FloeGraph *c = floe__calloc(1, sizeof *c);
  if (!c) goto err_oom;
  c->error = g->error;
  if (g->error_msg && !(c->error_msg = floe__strdup(g->error_msg))) goto err_free_graph;
  if (g->cap_nodes) {
    c->nodes = floe__malloc((size_t)g->cap_nodes * sizeof *c->nodes);
    if (!c->nodes) goto err_free_graph;
    c->cap_nodes = g->cap_nodes;
  }
  if (g->name_cap) {
    c->name_table = floe__malloc((size_t)g->name_cap * sizeof *c->name_table);
    if (!c->name_table) goto err_free_graph;
    memcpy(c->name_table, g->name_table, (size_t)g->name_cap * sizeof *c->name_table);
    c->name_cap = g->name_cap;
  }
  for (int i = 0; i < g->num_nodes; i++) {
    FloeNode *n = clone_node(g->nodes[i], c, st);
    if (!n) goto err_free_graph_quiet;
    c->nodes[c->num_nodes++] = n;
  }
  /* Inputs may name later nodes (NextIteration -> Merge), so they are linked last. */
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *s = g->nodes[i];
    FloeNode *n = c->nodes[i];
    for (int j = 0; j < s->num_inputs; j++) n->inputs[j].node = c->nodes[s->inputs[j].node->id];
    for (int j = 0; j < s->num_control; j++) n->control[j] = c->nodes[s->control[j]->id];
  }
  return c;

err_free_graph:
  floe_graph_free(c);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying a graph of %d nodes",
                  g->num_nodes);
  return NULL;
err_free_graph_quiet:
  floe_graph_free(c);
  return NULL;
}

floe_code floe__graph_resolve_output(const FloeGraph *g, const char *name, FloeOutput *out,
                                     FloeStatus *st) {
  out->node = NULL;
  out->index = 0;
  if (!name) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "output name is NULL");
  const char *colon = strrchr(name, ':');
  size_t len = colon ? (size_t)(colon - name) : strlen(name);
  long index = 0;
  if (colon) {
    const char *d = colon + 1;
    bool ok = *d != '\0' && strlen(d) <= 9;
    for (; ok && *d; d++) {
      ok = *d >= '0' && *d <= '9';
      index = index * 10 + (*d - '0');
    }
    if (!ok)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "'%s': expected \"node\" or \"node:index\" with a non-negative "
                             "index", name);
  }
  char *node_name = floe__strndup(name, len);
  if (!node_name) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory resolving '%s'", name);
  int idx = find_index(g, node_name);
  floe__free(node_name);
  if (idx < 0)
    return floe_status_set(st, FLOE_NOT_FOUND, "'%s': the graph has no node named '%.*s'", name,
                           (int)len, name);
  FloeNode *n = g->nodes[idx];
  if (index >= n->num_outputs)
    return floe_status_set(st, FLOE_OUT_OF_RANGE, "'%s': node '%s' (%s) has %d output%s", name,
                           n->name, n->op->name, n->num_outputs, n->num_outputs == 1 ? "" : "s");
  out->node = n;
  out->index = (int)index;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Node builder. Every call is a no-op once the graph has an error; a builder problem is
 * recorded at once as the graph's sticky error, naming the node being built. */

FLOE__PRINTF(3, 4)
static void builder_fail(FloeNodeBuilder *b, floe_code code, const char *fmt, ...) {
  FloeGraph *g = b->g;
  if (g->error != FLOE_OK) return;
  va_list ap;
  va_start(ap, fmt);
  char *body = floe__vasprintf(fmt, ap);
  va_end(ap);
  FloeStatus st = {FLOE_OK, NULL};
  char *auto_name = b->name ? NULL : unique_name(g, b->op, &st);
  floe_status_clear(&st);
  const char *label = b->name ? b->name : auto_name ? auto_name : b->op;
  floe__graph_fail(g, code, "node '%s' (%s): %s", label, b->op,
                   body ? body : floe_code_message(code));
  floe__free(auto_name);
  floe__free(body);
}

static bool builder_live(const FloeNodeBuilder *b) { return b && b->g->error == FLOE_OK; }

static void builder_free(FloeNodeBuilder *b) {
  floe__free(b->op);
  floe__free(b->name);
  floe__free(b->device);
  floe__free(b->inputs);
  floe__free(b->lists);
  floe__free(b->control);
  floe__attrs_clear(&b->attrs);
  floe__free(b);
}

/* Grows *p (elements of esize) to hold need elements. */
static bool grow(void **p, int *cap, int need, size_t esize) {
  if (need <= *cap) return true;
  int c = *cap ? *cap : 4;
  while (c < need) {
    if (c > INT_MAX / 2) return false;
    c *= 2;
  }
  void *q = floe__realloc(*p, (size_t)c * esize);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

/* Caller owns the builder until floe_node_finish or floe_node_builder_abandon frees it.
 * NULL (a no-op builder) when g already has an error or memory runs out. */
FloeNodeBuilder *floe_node_begin(FloeGraph *g, const char *op, const char *name) {
  if (!g || g->error != FLOE_OK) return NULL;
  FloeNodeBuilder *b = floe__calloc(1, sizeof *b);
  if (!b) goto err_oom;
  b->g = g;
  floe__attrs_init(&b->attrs);
  b->op = floe__strdup(op ? op : "?");
  if (!b->op) goto err_free_builder;
  if (name && !(b->name = floe__strdup(name))) goto err_free_builder;
  if (!op) builder_fail(b, FLOE_INVALID_ARGUMENT, "no op given");
  return b;

err_free_builder:
  builder_free(b);
err_oom:
  floe__graph_fail(g, FLOE_NO_MEMORY, "node '%s' (%s): out of memory starting the node",
                   name ? name : op ? op : "?", op ? op : "?");
  return NULL;
}

static void push_list(FloeNodeBuilder *b, const FloeOutput *ins, int n) {
  if (!grow((void **)&b->inputs, &b->cap_inputs, b->num_inputs + n, sizeof *b->inputs) ||
      !grow((void **)&b->lists, &b->cap_lists, b->num_lists + 1, sizeof *b->lists)) {
    builder_fail(b, FLOE_NO_MEMORY, "out of memory adding input argument %d", b->num_lists);
    return;
  }
  for (int i = 0; i < n; i++) b->inputs[b->num_inputs++] = ins[i];
  b->lists[b->num_lists++] = n;
}

void floe_node_add_input(FloeNodeBuilder *b, FloeOutput in) { floe_node_add_input_list(b, &in, 1); }

void floe_node_add_input_list(FloeNodeBuilder *b, const FloeOutput *ins, int n) {
  if (!builder_live(b)) return;
  if (n < 0 || (n > 0 && !ins)) {
    builder_fail(b, FLOE_INVALID_ARGUMENT, "input argument %d: bad list (%d inputs)",
                 b->num_lists, n);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (!ins[i].node) {
      if (n == 1)
        builder_fail(b, FLOE_INVALID_ARGUMENT,
                     "input %d is invalid: it comes from a builder call that failed (its "
                     "FloeOutput has no node)",
                     b->num_inputs);
      else
        builder_fail(b, FLOE_INVALID_ARGUMENT,
                     "input %d (element %d of input argument %d) is invalid: it comes from a "
                     "builder call that failed (its FloeOutput has no node)",
                     b->num_inputs + i, i, b->num_lists);
      return;
    }
  }
  push_list(b, ins, n);
}

void floe_node_add_control_input(FloeNodeBuilder *b, FloeNode *dep) {
  if (!builder_live(b)) return;
  if (!dep) {
    builder_fail(b, FLOE_INVALID_ARGUMENT,
                 "control input %d is NULL (a node from a builder call that failed?)",
                 b->num_control);
    return;
  }
  if (!grow((void **)&b->control, &b->cap_control, b->num_control + 1, sizeof *b->control)) {
    builder_fail(b, FLOE_NO_MEMORY, "out of memory adding a control input");
    return;
  }
  b->control[b->num_control++] = dep;
}

void floe_node_set_device(FloeNodeBuilder *b, const char *device) {
  if (!builder_live(b)) return;
  char *d = NULL;
  if (device && !(d = floe__strdup(device))) {
    builder_fail(b, FLOE_NO_MEMORY, "out of memory copying device '%s'", device);
    return;
  }
  floe__free(b->device);
  b->device = d;
}

/* Stores v (taking its owned members) under name, or records why it cannot. */
static void builder_set(FloeNodeBuilder *b, const char *name, FloeAttrValue *v) {
  if (!name) {
    builder_fail(b, FLOE_INVALID_ARGUMENT, "attribute name is NULL");
    floe__attr_value_clear(v);
    return;
  }
  FloeStatus st = {FLOE_OK, NULL};
  if (floe__attrs_set(&b->attrs, name, v, &st) != FLOE_OK) {
    floe__attr_value_clear(v);
    builder_fail(b, st.code, "%s", floe_status_message(&st));
  }
  floe_status_clear(&st);
}

void floe_node_set_attr_int(FloeNodeBuilder *b, const char *name, int64_t v) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_INT, .u.i = v};
  builder_set(b, name, &av);
}

void floe_node_set_attr_float(FloeNodeBuilder *b, const char *name, double v) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_FLOAT, .u.f = v};
  builder_set(b, name, &av);
}

void floe_node_set_attr_bool(FloeNodeBuilder *b, const char *name, int v) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_BOOL, .u.b = v != 0};
  builder_set(b, name, &av);
}

void floe_node_set_attr_type(FloeNodeBuilder *b, const char *name, FloeDType v) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_TYPE, .u.type = v};
  builder_set(b, name, &av);
}

void floe_node_set_attr_string(FloeNodeBuilder *b, const char *name, const char *v) {
  if (!builder_live(b)) return;
  if (!v) {
    builder_fail(b, FLOE_INVALID_ARGUMENT, "string attribute '%s' is NULL", name ? name : "?");
    return;
  }
  FloeAttrValue av = {.kind = FLOE_ATTR_STRING, .u.s = floe__strdup(v)};
  if (!av.u.s) {
    builder_fail(b, FLOE_NO_MEMORY, "out of memory copying attribute '%s'", name ? name : "?");
    return;
  }
  builder_set(b, name, &av);
}

void floe_node_set_attr_shape(FloeNodeBuilder *b, const char *name, FloeShape v) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_SHAPE, .u.shape = v};
  builder_set(b, name, &av);
}

void floe_node_set_attr_tensor(FloeNodeBuilder *b, const char *name, FloeTensor *v) {
  if (!builder_live(b)) return;
  if (!v) {
    builder_fail(b, FLOE_INVALID_ARGUMENT, "tensor attribute '%s' is NULL", name ? name : "?");
    return;
  }
  floe_tensor_retain(v);
  FloeAttrValue av = {.kind = FLOE_ATTR_TENSOR, .u.tensor = v};
  builder_set(b, name, &av);
}

/* Copies n elements of esize into a new array (NULL when n == 0); false on bad input or
 * no memory, recorded in the builder. */
static bool copy_list(FloeNodeBuilder *b, const char *name, const void *v, int n, size_t esize,
                      void **out) {
  *out = NULL;
  if (n < 0 || (n > 0 && !v)) {
    builder_fail(b, FLOE_INVALID_ARGUMENT, "list attribute '%s' has bad length %d",
                 name ? name : "?", n);
    return false;
  }
  if (!n) return true;
  *out = floe__malloc((size_t)n * esize);
  if (!*out) {
    builder_fail(b, FLOE_NO_MEMORY, "out of memory copying attribute '%s'", name ? name : "?");
    return false;
  }
  memcpy(*out, v, (size_t)n * esize);
  return true;
}

void floe_node_set_attr_int_list(FloeNodeBuilder *b, const char *name, const int64_t *v, int n) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_INT_LIST};
  if (!copy_list(b, name, v, n, sizeof *v, (void **)&av.u.ilist.v)) return;
  av.u.ilist.n = (size_t)n;
  builder_set(b, name, &av);
}

void floe_node_set_attr_float_list(FloeNodeBuilder *b, const char *name, const double *v,
                                   int n) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_FLOAT_LIST};
  if (!copy_list(b, name, v, n, sizeof *v, (void **)&av.u.flist.v)) return;
  av.u.flist.n = (size_t)n;
  builder_set(b, name, &av);
}

void floe_node_set_attr_type_list(FloeNodeBuilder *b, const char *name, const FloeDType *v,
                                  int n) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_TYPE_LIST};
  if (!copy_list(b, name, v, n, sizeof *v, (void **)&av.u.tlist.v)) return;
  av.u.tlist.n = (size_t)n;
  builder_set(b, name, &av);
}

void floe_node_set_attr_shape_list(FloeNodeBuilder *b, const char *name, const FloeShape *v,
                                   int n) {
  if (!builder_live(b)) return;
  FloeAttrValue av = {.kind = FLOE_ATTR_SHAPE_LIST};
  if (!copy_list(b, name, v, n, sizeof *v, (void **)&av.u.slist.v)) return;
  av.u.slist.n = (size_t)n;
  builder_set(b, name, &av);
}

/* Frees b. Returns the new node (borrowed from the graph) or NULL with the sticky error
 * set. */
FloeNode *floe_node_finish(FloeNodeBuilder *b) {
  if (!b) return NULL;
  FloeGraph *g = b->g;
  FloeNode *n = NULL;
  if (g->error == FLOE_OK) {
    FloeNodeSpec spec = {
        .op = b->op,
        .name = b->name,
        .device = b->device ? b->device : g->device_scope,
        .inputs = b->inputs,
        .num_inputs = b->num_inputs,
        .list_sizes = b->lists,
        .num_lists = b->num_lists,
        .control = b->control,
        .num_control = b->num_control,
        .attrs = &b->attrs,
    };
    FloeStatus st = {FLOE_OK, NULL};
    n = floe__graph_add_node(g, &spec, &st);
    if (!n) {
      if (st.code == FLOE_OK) st.code = FLOE_INTERNAL;
      graph_fail_status(g, &st);
    }
  }
  builder_free(b);
  return n;
}

void floe_node_builder_abandon(FloeNodeBuilder *b) {
  if (b) builder_free(b);
}

FloeOutput floe_out(FloeNode *node, int index) {
  FloeOutput o = {node, node ? index : 0};
  return o;
}

/* ------------------------------------------------------------------------------------ */
/* Queries. */

int floe_graph_num_nodes(const FloeGraph *g) { return g ? g->num_nodes : 0; }

FloeNode *floe_graph_node(const FloeGraph *g, int i) {
  return g && i >= 0 && i < g->num_nodes ? g->nodes[i] : NULL;
}

FloeNode *floe_graph_find(const FloeGraph *g, const char *name) {
  if (!g || !name) return NULL;
  int idx = find_index(g, name);
  return idx < 0 ? NULL : g->nodes[idx];
}

const char *floe_node_name(const FloeNode *n) { return n ? n->name : ""; }
const char *floe_node_op(const FloeNode *n) { return n ? n->op->name : ""; }
const char *floe_node_device(const FloeNode *n) { return n && n->device ? n->device : ""; }
int floe_node_num_inputs(const FloeNode *n) { return n ? n->num_inputs : 0; }

FloeOutput floe_node_input(const FloeNode *n, int i) {
  if (!n || i < 0 || i >= n->num_inputs) return floe_out(NULL, 0);
  return n->inputs[i];
}

int floe_node_num_control_inputs(const FloeNode *n) { return n ? n->num_control : 0; }

FloeNode *floe_node_control_input(const FloeNode *n, int i) {
  return n && i >= 0 && i < n->num_control ? n->control[i] : NULL;
}

int floe_node_num_outputs(const FloeNode *n) { return n ? n->num_outputs : 0; }

FloeDType floe_node_output_dtype(const FloeNode *n, int i) {
  return n && i >= 0 && i < n->num_outputs ? n->out_dtypes[i] : FLOE_DTYPE_INVALID;
}

FloeShape floe_node_output_shape(const FloeNode *n, int i) {
  return n && i >= 0 && i < n->num_outputs ? n->out_shapes[i] : floe_shape_unknown();
}

/* ------------------------------------------------------------------------------------ */
/* Convenience builders. */

FloeOutput floe_placeholder(FloeGraph *g, const char *name, FloeDType dt, FloeShape shape) {
  FloeNodeBuilder *b = floe_node_begin(g, "Placeholder", name);
  floe_node_set_attr_type(b, "dtype", dt);
  floe_node_set_attr_shape(b, "shape", shape);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_const(FloeGraph *g, const char *name, FloeTensor *value) {
  FloeNodeBuilder *b = floe_node_begin(g, "Const", name);
  floe_node_set_attr_tensor(b, "value", value);
  if (value) floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(value));
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_const_f32(FloeGraph *g, const char *name, float v) {
  if (!g || g->error != FLOE_OK) return floe_out(NULL, 0);
  FloeTensor *t = floe_tensor_scalar_f32(v, NULL);
  if (!t) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "node '%s' (Const): out of memory making its value",
                     name ? name : "Const");
    return floe_out(NULL, 0);
  }
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

FloeOutput floe_unary(FloeGraph *g, const char *op, const char *name, FloeOutput x) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, x);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_binary(FloeGraph *g, const char *op, const char *name, FloeOutput a,
                       FloeOutput b) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  return floe_out(floe_node_finish(nb), 0);
}

FloeOutput floe_matmul(FloeGraph *g, const char *name, FloeOutput a, FloeOutput b,
                       int transpose_a, int transpose_b) {
  FloeNodeBuilder *nb = floe_node_begin(g, "MatMul", name);
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  floe_node_set_attr_bool(nb, "transpose_a", transpose_a);
  floe_node_set_attr_bool(nb, "transpose_b", transpose_b);
  return floe_out(floe_node_finish(nb), 0);
}

/* ---- edits of existing nodes, for the control-flow builders (control_flow.c) ---- */

floe_code floe__node_add_control(FloeNode *n, FloeNode *dep, FloeStatus *st) {
  if (!dep || dep->graph != n->graph)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "node '%s': bad control input", n->name);
  for (int i = 0; i < n->num_control; i++)
    if (n->control[i] == dep) return FLOE_OK;
  FloeNode **v = floe__realloc(n->control, (size_t)(n->num_control + 1) * sizeof *v);
  if (!v) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding a control input");
  n->control = v;
  n->control[n->num_control++] = dep;
  return FLOE_OK;
}

floe_code floe__node_set_input(FloeNode *n, int j, FloeOutput v, FloeStatus *st) {
  if (j < 0 || j >= n->num_inputs || !v.node || v.node->graph != n->graph || v.index < 0 ||
      v.index >= v.node->num_outputs)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "node '%s': bad input %d", n->name, j);
  FloeDType have = n->inputs[j].node->out_dtypes[n->inputs[j].index];
  FloeDType want = v.node->out_dtypes[v.index];
  if (have != want)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "node '%s' (%s): input %d is %s, '%s:%d' is %s", n->name,
                           n->op->name, j, floe_dtype_name(have), v.node->name, v.index,
                           floe_dtype_name(want));
  n->inputs[j] = v;
  return FLOE_OK;
}

floe_code floe_node_request_device(FloeNode *n, const char *device, FloeStatus *status) {
  if (!n) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_node_request_device: NULL node");
  char *d = NULL;
  if (device && device[0] && !(d = floe__strdup(device)))
    return floe_status_set(status, FLOE_NO_MEMORY, "node '%s': out of memory copying device '%s'",
                           n->name, device);
  floe__free(n->device);
  n->device = d;
  return FLOE_OK;
}

/* A loop's back edge: a Merge's input from a NextIteration. */
static bool back_edge(const FloeNode *n, const FloeNode *src) {
  return strcmp(n->op->name, "Merge") == 0 && strcmp(src->op->name, "NextIteration") == 0;
}

#define NEED(i) (!need || need[i])

/* Kahn's algorithm over data and control edges, loop back edges left out; what a cycle
 * keeps out goes last, by id (the executor reports the cycle). */
int *floe__graph_topo_order(const FloeGraph *g, const bool *need, int *count) {
  int n = g->num_nodes;
  int *indeg = floe__calloc((size_t)n + 1, sizeof *indeg);
  int *order = floe__malloc(((size_t)n + 1) * sizeof *order);
  int *off = floe__calloc((size_t)n + 2, sizeof *off);
  int *cons = NULL, *fill = NULL;
  if (!indeg || !order || !off) goto fail;
  for (int i = 0; i < n; i++) {
    if (!NEED(i)) continue;
    const FloeNode *x = g->nodes[i];
    for (int j = 0; j < x->num_inputs; j++) {
      const FloeNode *s = x->inputs[j].node;
      if (!NEED(s->id) || back_edge(x, s)) continue;
      off[s->id + 1]++;
      indeg[i]++;
    }
    for (int k = 0; k < x->num_control; k++)
      if (NEED(x->control[k]->id)) {
        off[x->control[k]->id + 1]++;
        indeg[i]++;
      }
  }
  for (int i = 0; i < n; i++) off[i + 1] += off[i];
  cons = floe__malloc((size_t)(off[n] ? off[n] : 1) * sizeof *cons);
  fill = floe__malloc(((size_t)n + 1) * sizeof *fill);
  if (!cons || !fill) goto fail;
  memcpy(fill, off, ((size_t)n + 1) * sizeof *fill);
  for (int i = 0; i < n; i++) {
    if (!NEED(i)) continue;
    const FloeNode *x = g->nodes[i];
    for (int j = 0; j < x->num_inputs; j++) {
      const FloeNode *s = x->inputs[j].node;
      if (!NEED(s->id) || back_edge(x, s)) continue;
      cons[fill[s->id]++] = i;
    }
    for (int k = 0; k < x->num_control; k++)
      if (NEED(x->control[k]->id)) cons[fill[x->control[k]->id]++] = i;
  }
  int h = 0, t = 0;
  for (int i = 0; i < n; i++)
    if (NEED(i) && indeg[i] == 0) order[t++] = i;
  while (h < t) {
    int p = order[h++];
    for (int e = off[p]; e < off[p + 1]; e++)
      if (--indeg[cons[e]] == 0) order[t++] = cons[e];
  }
  for (int i = 0; i < n; i++) /* what a cycle kept out goes last (the executor reports it) */
    if (NEED(i) && indeg[i] > 0) order[t++] = i;
  *count = t;
  floe__free(indeg);
  floe__free(off);
  floe__free(cons);
  floe__free(fill);
  return order;
fail:
  floe__free(indeg);
  floe__free(order);
  floe__free(off);
  floe__free(cons);
  floe__free(fill);
  return NULL;
}
#undef NEED

/* Copies attribute `name` of from onto b as it is (nothing when from lacks it). */
void floe__node_copy_attr(const FloeNode *from, FloeNodeBuilder *b, const char *name) {
  const FloeAttrValue *v = floe__attrs_get(&from->attrs, name);
  if (!v) return;
  switch (v->kind) {
    case FLOE_ATTR_INT: floe_node_set_attr_int(b, name, v->u.i); break;
    case FLOE_ATTR_FLOAT: floe_node_set_attr_float(b, name, v->u.f); break;
    case FLOE_ATTR_BOOL: floe_node_set_attr_bool(b, name, v->u.b); break;
    case FLOE_ATTR_STRING: floe_node_set_attr_string(b, name, v->u.s); break;
    case FLOE_ATTR_TYPE: floe_node_set_attr_type(b, name, v->u.type); break;
    case FLOE_ATTR_SHAPE: floe_node_set_attr_shape(b, name, v->u.shape); break;
    case FLOE_ATTR_TENSOR: floe_node_set_attr_tensor(b, name, v->u.tensor); break;
    case FLOE_ATTR_INT_LIST:
      floe_node_set_attr_int_list(b, name, v->u.ilist.v, (int)v->u.ilist.n);
      break;
    case FLOE_ATTR_FLOAT_LIST:
      floe_node_set_attr_float_list(b, name, v->u.flist.v, (int)v->u.flist.n);
      break;
    case FLOE_ATTR_TYPE_LIST:
      floe_node_set_attr_type_list(b, name, v->u.tlist.v, (int)v->u.tlist.n);
      break;
    case FLOE_ATTR_SHAPE_LIST:
      floe_node_set_attr_shape_list(b, name, v->u.slist.v, (int)v->u.slist.n);
      break;
    default: break;
  }
}

/* ---- typed lookups on a node's attributes ---- */

const FloeAttrValue *floe__node_attr(const FloeNode *n, const char *name, FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

int64_t floe__node_attr_int(const FloeNode *n, const char *name, int64_t dflt) {
  const FloeAttrValue *v = floe__node_attr(n, name, FLOE_ATTR_INT);
  return v ? v->u.i : dflt;
}

bool floe__node_attr_bool(const FloeNode *n, const char *name, bool dflt) {
  const FloeAttrValue *v = floe__node_attr(n, name, FLOE_ATTR_BOOL);
  return v ? v->u.b != 0 : dflt;
}

const char *floe__node_attr_str(const FloeNode *n, const char *name) {
  const FloeAttrValue *v = floe__node_attr(n, name, FLOE_ATTR_STRING);
  return v && v->u.s ? v->u.s : "";
}
