/* SPDX-License-Identifier: Apache-2.0 */
/* optimize.c - the graph optimiser: the passes a session runs on one run's private graph
 * between pruning and placement (session.c, plan_run), in this order:
 *
 *   constant_folding (opt_const.c) nodes whose data inputs are all constants computed once,
 *               when the run is planned, and replaced by a Const
 *   arithmetic  (opt_arith.c) Identity, x*1, x/1, x-0, x+(-0) and a Reshape of a Reshape
 *               dropped; a Transpose of a Transpose made one (or none); a chain of adds
 *               (subtractions) or of multiplications by scalar constants made one op with
 *               the constants combined (floats: one rounding instead of one per op)
 *   cse         (opt_cse.c) common subexpressions: nodes of one op, attributes, inputs,
 *               control inputs and device request computed once
 *   dead_nodes  (opt_dead.c) stateless nodes whose results nobody reads (kept in the run
 *               only by control edges): gone, the control edges passed on to their inputs
 *   fusion      (fuse.c) chains into fused kernels, and the blocked layout
 *   elementwise (opt_elementwise.c) chains of elementwise ops, each the only reader of the
 *               one before, into one _FusedElementwise pass over memory
 *
 * and, not passes over the graph: memory-aware scheduling, the executors taking ready nodes
 * in an order that keeps live bytes low (core/exec/mem_order.c; FLOE_OPT_MEMORY_SCHEDULING=0
 * turns it off), and buffer reuse, kernels writing outputs over inputs whose last reader
 * they are (ctx_reuse_input; FLOE_OPT_BUFFER_REUSE=0 turns it off).
 *
 * Each pass is its own module with one entry; FLOE_OPT_<NAME>=0 (FLOE_OPT_CONSTANT_FOLDING,
 * FLOE_OPT_ARITHMETIC, FLOE_OPT_CSE, FLOE_OPT_DEAD_NODES, FLOE_OPT_FUSION (FLOE_FUSION=0
 * too), FLOE_OPT_ELEMENTWISE) switches one off
 * and FLOE_OPTIMIZE=0 all of them. The session's graph never changes: the passes rewrite a
 * clone, keeping node ids (the session indexes its nodes' shared state, feeds and fetches by
 * id): they add nodes, rewire inputs and take nodes out of the run (need[id] = false), and
 * never touch a fed, fetched or target node's place in the run. What they must not touch:
 * stateful ops (variables, queues, random ops, collectives), control flow (Switch, Merge,
 * Enter, Exit, NextIteration, LoopCond) and transfers. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"

typedef struct Pass {
  const char *name;
  const char *env;
  FloeOptPassFn run;
} Pass;

static const Pass passes[] = {
    {"constant_folding", "FLOE_OPT_CONSTANT_FOLDING", floe__opt_constant_folding},
    {"arithmetic", "FLOE_OPT_ARITHMETIC", floe__opt_arithmetic},
    {"cse", "FLOE_OPT_CSE", floe__opt_cse},
    {"dead_nodes", "FLOE_OPT_DEAD_NODES", floe__opt_dead_nodes},
    {"fusion", "FLOE_OPT_FUSION", floe__opt_fusion},
    {"elementwise", "FLOE_OPT_ELEMENTWISE", floe__opt_elementwise},
};
#define NUM_PASSES ((int)(sizeof passes / sizeof passes[0]))

static bool env_off(const char *name) {
  const char *e = getenv(name);
  return e && strcmp(e, "0") == 0;
}

static bool pass_on(int i) {
  if (env_off("FLOE_OPTIMIZE") || env_off(passes[i].env)) return false;
  return strcmp(passes[i].name, "fusion") != 0 || !env_off("FLOE_FUSION");
}

int floe__opt_num_passes(void) { return NUM_PASSES; }

bool floe__opt_buffer_reuse_on(void) {
  return !env_off("FLOE_OPTIMIZE") && !env_off("FLOE_OPT_BUFFER_REUSE");
}

bool floe__opt_memory_scheduling_on(void) {
  return !env_off("FLOE_OPTIMIZE") && !env_off("FLOE_OPT_MEMORY_SCHEDULING");
}

bool floe__opt_constant_folding_on(void) {
  return !env_off("FLOE_OPTIMIZE") && !env_off("FLOE_OPT_CONSTANT_FOLDING");
}

bool floe__opt_any_on(void) {
  for (int i = 0; i < NUM_PASSES; i++)
    if (pass_on(i)) return true;
  return false;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_need(const FloeOpt *o) {
  int n = 0;
  for (int i = 0; i < o->cap; i++) n += o->need[i];
  return n;
}

floe_code floe__optimize(FloeOpt *o, FloeOptPassStats *report, int *changes, FloeStatus *st) {
  *changes = 0;
  for (int i = 0; i < NUM_PASSES; i++) {
    FloeOptPassStats ps;
    memset(&ps, 0, sizeof ps);
    ps.name = passes[i].name;
    ps.enabled = pass_on(i);
    ps.nodes_before = count_need(o);
    double t0 = now_s();
    if (ps.enabled) {
      int added_from = o->g->num_nodes;
      floe_code rc = passes[i].run(o, &ps, st);
      if (rc != FLOE_OK) {
        floe__status_prefix(st, "graph optimiser, pass %s", passes[i].name);
        return rc;
      }
      if (!floe__opt_grow(o))
        return floe_status_set(st, FLOE_NO_MEMORY, "out of memory optimising the graph");
      for (int id = added_from; id < o->cap; id++) ps.added += o->need[id];
    }
    ps.seconds = now_s() - t0;
    ps.nodes_after = count_need(o);
    for (int id = 0; id < o->cap; id++)
      if (o->need[id] && (!strcmp(o->g->nodes[id]->op->name, "_ToBlocked") ||
                          !strcmp(o->g->nodes[id]->op->name, "_FromBlocked") ||
                          !strcmp(o->g->nodes[id]->op->name, "Transpose")))
        ps.conversions++;
    *changes += ps.rewritten + ps.removed + ps.added;
    if (report) report[i] = ps;
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Helpers the passes share. */

bool floe__opt_grow(FloeOpt *o) {
  int want = o->g->num_nodes;
  if (want <= o->cap) return true;
  bool *n = floe__realloc(o->need, (size_t)want * sizeof *n);
  if (!n) return false;
  for (int i = o->cap; i < want; i++) n[i] = false;
  o->need = n;
  o->cap = want;
  return true;
}

bool floe__opt_same_shape(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0 || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool floe__opt_kept(const FloeOpt *o, const FloeNode *n) {
  return n->id < o->n_orig && (o->pinned[n->id] || (o->target && o->target[n->id]));
}

bool floe__opt_control_flow(const FloeNode *n) {
  static const char *const cf[] = {"Switch", "Merge",   "Enter",        "Exit",  "NextIteration",
                                   "LoopCond", "ControlTrigger", "_Send", "_Recv", "_ControlSend"};
  for (size_t i = 0; i < sizeof cf / sizeof *cf; i++)
    if (strcmp(n->op->name, cf[i]) == 0) return true;
  return false;
}

bool floe__opt_pure(const FloeNode *n) {
  return !(n->op->flags & FLOE_OP_STATEFUL) && !floe__opt_control_flow(n) &&
         strcmp(n->op->name, "Placeholder") != 0 && strcmp(n->op->name, "NoOp") != 0;
}

bool floe__opt_has_control_flow(const FloeOpt *o) {
  for (int id = 0; id < o->cap; id++)
    if (o->need[id] && floe__opt_control_flow(o->g->nodes[id]) &&
        strcmp(o->g->nodes[id]->op->name, "_Send") != 0 &&
        strcmp(o->g->nodes[id]->op->name, "_Recv") != 0)
      return true;
  return false;
}

int *floe__opt_readers(const FloeOpt *o) {
  int *r = floe__calloc((size_t)(o->cap ? o->cap : 1), sizeof *r);
  if (!r) return NULL;
  for (int id = 0; id < o->cap; id++) {
    if (!o->need[id]) continue;
    const FloeNode *x = o->g->nodes[id];
    for (int k = 0; k < x->num_inputs; k++) r[x->inputs[k].node->id]++;
    for (int c = 0; c < x->num_control; c++) r[x->control[c]->id]++;
  }
  return r;
}

/* Drops control input c of x (by position). */
static void drop_control(FloeNode *x, int c) {
  memmove(x->control + c, x->control + c + 1, (size_t)(x->num_control - c - 1) * sizeof *x->control);
  x->num_control--;
}

bool floe__opt_add_control(FloeNode *x, FloeNode *dep) {
  if (dep == x) return true;
  for (int c = 0; c < x->num_control; c++)
    if (x->control[c] == dep) return true;
  FloeNode **v = floe__realloc(x->control, (size_t)(x->num_control + 1) * sizeof *v);
  if (!v) return false;
  x->control = v;
  x->control[x->num_control++] = dep;
  return true;
}

floe_code floe__opt_apply_forward(FloeOpt *o, const FloeOutput *fwd, int n_fwd, FloeStatus *st) {
  for (int id = 0; id < o->cap; id++) {
    if (!o->need[id]) continue;
    FloeNode *x = o->g->nodes[id];
    for (int k = 0; k < x->num_inputs; k++)
      for (int guard = 0; guard < n_fwd && x->inputs[k].node->id < n_fwd &&
                          fwd[x->inputs[k].node->id].node && x->inputs[k].index == 0;
           guard++)
        x->inputs[k] = fwd[x->inputs[k].node->id];
    for (int c = 0; c < x->num_control; c++) {
      FloeNode *d = x->control[c];
      for (int guard = 0; guard < n_fwd && d->id < n_fwd && fwd[d->id].node; guard++)
        d = fwd[d->id].node;
      if (d == x->control[c]) continue;
      drop_control(x, c--);
      if (!floe__opt_add_control(x, d))
        return floe_status_set(st, FLOE_NO_MEMORY, "out of memory optimising the graph");
    }
  }
  return FLOE_OK;
}

int floe__opt_prune_unused(FloeOpt *o) {
  int *readers = floe__opt_readers(o);
  if (!readers) return -1;
  int *stack = floe__malloc((size_t)(o->cap ? o->cap : 1) * sizeof *stack);
  if (!stack) {
    floe__free(readers);
    return -1;
  }
  int top = 0, removed = 0;
  for (int id = 0; id < o->cap; id++)
    if (o->need[id] && readers[id] == 0) stack[top++] = id;
  while (top > 0) {
    FloeNode *n = o->g->nodes[stack[--top]];
    if (!o->need[n->id] || readers[n->id] != 0 || floe__opt_kept(o, n) || !floe__opt_pure(n))
      continue;
    o->need[n->id] = false;
    removed++;
    for (int k = 0; k < n->num_inputs; k++)
      if (--readers[n->inputs[k].node->id] == 0) stack[top++] = n->inputs[k].node->id;
    for (int c = 0; c < n->num_control; c++)
      if (--readers[n->control[c]->id] == 0) stack[top++] = n->control[c]->id;
  }
  floe__free(stack);
  floe__free(readers);
  return removed;
}

FloeNode *floe__opt_const(FloeOpt *o, const char *base, FloeTensor *value, const FloeNode *near) {
  char *name = NULL;
  for (int i = 0; !name || floe_graph_find(o->g, name); i++) {
    floe__free(name);
    name = i ? floe__asprintf("%s/_opt_const_%d", base, i) : floe__asprintf("%s/_opt_const", base);
    if (!name) return NULL;
  }
  FloeNodeBuilder *b = floe_node_begin(o->g, "Const", name);
  floe__free(name);
  floe_node_set_attr_tensor(b, "value", value);
  floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(value));
  if (near->device && near->device[0]) floe_node_set_device(b, near->device);
  FloeNode *n = floe_node_finish(b);
  if (!n || !floe__opt_grow(o)) return NULL;
  o->need[n->id] = true;
  return n;
}
