/* SPDX-License-Identifier: Apache-2.0 */
/* export.c - the export of frozen inference graphs (docs/checkpoints.md): the nodes some
 * outputs need, with every read of a variable replaced by a Const of its value, written as
 * a graph file. */
#include <string.h>

#include "checkpoint_private.h"

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

enum { UNNEEDED = 0, KEEP = 1, FREEZE = 2 };

/* A ReadVariableOp of a VarHandleOp: becomes a Const of the variable's value. */
static bool freezable(const FloeNode *n) {
  return is_op(n, "ReadVariableOp") && n->num_inputs == 1 &&
         is_op(n->inputs[0].node, "VarHandleOp");
}

static bool uses_resources(const FloeNode *n) {
  for (int i = 0; i < n->num_inputs; i++)
    if (n->inputs[i].node->out_dtypes[n->inputs[i].index] == FLOE_RESOURCE) return true;
  for (int i = 0; i < n->num_outputs; i++)
    if (n->out_dtypes[i] == FLOE_RESOURCE) return true;
  return false;
}

/* Marks what outputs need (data and control inputs), stopping at freezable reads. */
static floe_code mark_needed(const FloeGraph *g, const char *const *outputs, int num_outputs,
                             uint8_t *mark, FloeStatus *st) {
  int *stack = floe__malloc((size_t)(g->num_nodes + num_outputs + 1) * sizeof *stack);
  if (!stack) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  int top = 0;
  for (int i = 0; i < num_outputs; i++) {
    FloeOutput o;
    if (floe__graph_resolve_output(g, outputs[i], &o, st) != FLOE_OK) {
      floe__free(stack);
      floe__status_prefix(st, "export: output %d", i);
      return st->code;
    }
    stack[top++] = o.node->id;
  }
  /* Each node is pushed at most once after the outputs (marked when pushed). */
  for (int i = 0; i < top; i++) mark[stack[i]] = freezable(g->nodes[stack[i]]) ? FREEZE : KEEP;
  while (top > 0) {
    const FloeNode *n = g->nodes[stack[--top]];
    if (mark[n->id] == FREEZE) continue;
    for (int i = 0; i < n->num_inputs + n->num_control; i++) {
      const FloeNode *in = i < n->num_inputs ? n->inputs[i].node : n->control[i - n->num_inputs];
      if (mark[in->id]) continue;
      mark[in->id] = freezable(in) ? FREEZE : KEEP;
      stack[top++] = in->id;
    }
  }
  floe__free(stack);
  /* Name the node that works on a variable rather than the VarHandleOp it needs. */
  int culprit = -1;
  for (int i = 0; i < g->num_nodes; i++)
    if (mark[i] == KEEP && uses_resources(g->nodes[i]) &&
        (culprit < 0 || (is_op(g->nodes[culprit], "VarHandleOp") &&
                         !is_op(g->nodes[i], "VarHandleOp"))))
      culprit = i;
  if (culprit >= 0)
      return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                             "export: node '%s' (%s) is needed by the outputs and works on a "
                             "variable, which a frozen graph does not have (only reads of "
                             "variables become constants); export outputs of an inference "
                             "graph that does not update state",
                             g->nodes[culprit]->name, g->nodes[culprit]->op->name);
  return FLOE_OK;
}

/* The Const replacing read node n. */
static FloeNode *add_frozen(FloeGraph *out, FloeResourceMgr *m, const FloeNode *n,
                            FloeStatus *st) {
  FloeVar *v = floe__ckpt_node_var(m, n->inputs[0].node, st);
  FloeTensor *val = v ? floe__var_read(v, st) : NULL;
  if (!val) {
    floe__status_prefix(st, "export: freezing '%s'", n->name);
    return NULL;
  }
  FloeTensor *host = floe_tensor_copy(val, st);
  floe_tensor_release(val);
  if (!host) return NULL;
  FloeAttrs attrs;
  floe__attrs_init(&attrs);
  FloeAttrValue tv = {.kind = FLOE_ATTR_TENSOR, .u.tensor = host};
  FloeAttrValue dv = {.kind = FLOE_ATTR_TYPE, .u.type = host->dtype};
  FloeNode *c = NULL;
  if (floe__attrs_set(&attrs, "value", &tv, st) == FLOE_OK &&
      floe__attrs_set(&attrs, "dtype", &dv, st) == FLOE_OK) {
    FloeNodeSpec spec = {.op = "Const", .name = n->name, .attrs = &attrs};
    c = floe__graph_add_node(out, &spec, st);
  } else {
    floe__attr_value_clear(&tv);
  }
  floe__attrs_clear(&attrs);
  return c;
}

/* A copy of n in out, its inputs mapped through map, placed nowhere. */
static FloeNode *add_copy(FloeGraph *out, const FloeNode *n, FloeNode *const *map,
                          FloeStatus *st) {
  int nargs = n->op->num_inputs;
  FloeOutput *ins = floe__malloc((size_t)(n->num_inputs + 1) * sizeof *ins);
  int *sizes = floe__calloc((size_t)(nargs + 1), sizeof *sizes);
  FloeNode **ctl = floe__malloc((size_t)(n->num_control + 1) * sizeof *ctl);
  FloeNode *c = NULL;
  if (!ins || !sizes || !ctl) {
    floe_status_set(st, FLOE_NO_MEMORY, "export: out of memory copying node '%s'", n->name);
    goto out;
  }
  for (int i = 0; i < n->num_inputs; i++) {
    ins[i].node = map[n->inputs[i].node->id];
    ins[i].index = n->inputs[i].index;
    sizes[n->input_arg[i]]++;
  }
  for (int i = 0; i < n->num_control; i++) ctl[i] = map[n->control[i]->id];
  FloeNodeSpec spec = {.op = n->op->name,
                       .name = n->name,
                       .inputs = ins,
                       .num_inputs = n->num_inputs,
                       .list_sizes = sizes,
                       .num_lists = nargs,
                       .control = ctl,
                       .num_control = n->num_control,
                       .attrs = &n->attrs};
  c = floe__graph_add_node(out, &spec, st);
out:
  floe__free(ins);
  floe__free(sizes);
  floe__free(ctl);
  return c;
}

floe_code floe_export_frozen(FloeSession *s, const char *const *outputs, int num_outputs,
                             const char *path, FloeStatus *status) {
  if (!s || !path || !outputs || num_outputs <= 0)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "export: needs a session, a path and at least one output");
  const FloeGraph *g = floe__session_graph(s);
  FloeResourceMgr *m = floe__session_resources(s);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc;
  uint8_t *mark = floe__calloc((size_t)(g->num_nodes + 1), 1);
  FloeNode **map = floe__calloc((size_t)(g->num_nodes + 1), sizeof *map);
  FloeGraph *out = floe_graph_new();
  if (!mark || !map || !out) {
    rc = floe_status_set(&st, FLOE_NO_MEMORY, "export: out of memory");
    goto done;
  }
  if ((rc = mark_needed(g, outputs, num_outputs, mark, &st)) != FLOE_OK) goto done;
  /* Graph order is topological: every input was added before its consumer. */
  for (int i = 0; i < g->num_nodes; i++) {
    if (!mark[i]) continue;
    const FloeNode *n = g->nodes[i];
    map[i] = mark[i] == FREEZE ? add_frozen(out, m, n, &st) : add_copy(out, n, map, &st);
    if (!map[i]) {
      rc = st.code != FLOE_OK ? st.code : FLOE_INTERNAL;
      if (mark[i] == KEEP) floe__status_prefix(&st, "export");
      goto done;
    }
  }
  rc = floe_graph_save(out, path, &st);
done:
  floe_graph_free(out);
  floe__free(map);
  floe__free(mark);
  return floe__ckpt_finish(status, &st, rc);
}
