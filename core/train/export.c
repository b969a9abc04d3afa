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

/* A cluster session's variables may live on other tasks: every read to freeze is fetched
 * through the session, in one step (one consistent set of values). vals[i] for node i. */
static floe_code read_frozen(FloeSession *s, const FloeGraph *g, const uint8_t *mark,
                             FloeTensor **vals, FloeStatus *st) {
  int n = 0;
  for (int i = 0; i < g->num_nodes; i++) n += mark[i] == FREEZE;
  const char **fetch = floe__calloc((size_t)n + 1, sizeof *fetch);
  FloeTensor **got = floe__calloc((size_t)n + 1, sizeof *got);
  floe_code rc = FLOE_OK;
  if (!fetch || !got) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "export: out of memory");
    goto out;
  }
  for (int i = 0, k = 0; i < g->num_nodes; i++)
    if (mark[i] == FREEZE) fetch[k++] = g->nodes[i]->name;
  if (n > 0 && (rc = floe_session_run(s, NULL, 0, fetch, n, NULL, 0, got, st)) != FLOE_OK) {
    floe__status_prefix(st, "export: reading the variables");
    goto out;
  }
  for (int i = 0, k = 0; i < g->num_nodes; i++)
    if (mark[i] == FREEZE) vals[i] = got[k++];
out:
  floe__free(fetch);
  floe__free(got);
  return rc;
}

/* The Const replacing read node n: its value read, or val (taken) when read already. */
static FloeNode *add_frozen(FloeGraph *out, FloeResourceMgr *m, const FloeNode *n,
                            FloeTensor *val, FloeStatus *st) {
  if (!val) {
    FloeVar *v = floe__ckpt_node_var(m, n->inputs[0].node, st);
    val = v ? floe__var_read(v, st) : NULL;
  }
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
  FloeTensor **vals = floe__calloc((size_t)(g->num_nodes + 1), sizeof *vals);
  FloeGraph *out = floe_graph_new();
  if (!mark || !map || !vals || !out) {
    rc = floe_status_set(&st, FLOE_NO_MEMORY, "export: out of memory");
    goto done;
  }
  if ((rc = mark_needed(g, outputs, num_outputs, mark, &st)) != FLOE_OK) goto done;
  if (floe__session_is_cluster(s) && (rc = read_frozen(s, g, mark, vals, &st)) != FLOE_OK)
    goto done;
  /* Graph order is topological: every input was added before its consumer. */
  for (int i = 0; i < g->num_nodes; i++) {
    if (!mark[i]) continue;
    const FloeNode *n = g->nodes[i];
    if (mark[i] == FREEZE) {
      map[i] = add_frozen(out, m, n, vals[i], &st);
      vals[i] = NULL; /* add_frozen's now */
    } else {
      map[i] = add_copy(out, n, map, &st);
    }
    if (!map[i]) {
      rc = st.code != FLOE_OK ? st.code : FLOE_INTERNAL;
      if (mark[i] == KEEP) floe__status_prefix(&st, "export");
      goto done;
    }
  }
  rc = floe_graph_save(out, path, &st);
done:
  floe_graph_free(out);
  if (vals)
    for (int i = 0; i < g->num_nodes; i++) floe_tensor_release(vals[i]);
  floe__free(vals);
  floe__free(map);
  floe__free(mark);
  return floe__ckpt_finish(status, &st, rc);
}
