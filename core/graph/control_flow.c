/* SPDX-License-Identifier: Apache-2.0 */
/* control_flow.c - floe_cond and floe_while_loop: the user's callbacks build the branches
 * and the body; these builders wire Switch, Merge, Enter, Exit, NextIteration and LoopCond
 * around them as TensorFlow's tf.cond / tf.while_loop do (Yu et al., EuroSys 2018).
 *
 * After a callback ran, its nodes are scanned (they are the graph's newest: ids from the
 * callback's start on):
 *  - an input built before the construct enters a loop as a constant Enter (one per value
 *    and loop), so the body sees it in every iteration;
 *  - a node with no input that depends on the branch or iteration (a Const, or one reading
 *    only invariants) gets a control input from the construct's pivot, so it runs only
 *    when the branch is taken or the iteration runs, and is dead otherwise.
 */
#include <stdio.h>
#include <string.h>

#include "graph.h"

/* ---- node helpers (errors land in the graph's sticky error) ---- */

static FloeNode *node1(FloeGraph *g, const char *op, const char *name, const FloeOutput *ins,
                       int n, FloeNode *control) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  if (n == 1)
    floe_node_add_input(b, ins[0]);
  else if (n > 1 && strcmp(op, "Merge") == 0)
    floe_node_add_input_list(b, ins, n);
  else
    for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  if (control) floe_node_add_control_input(b, control);
  return floe_node_finish(b);
}

static FloeNode *enter_node(FloeGraph *g, const char *name, FloeOutput v, const char *frame,
                            bool constant, int parallel) {
  FloeNodeBuilder *b = floe_node_begin(g, "Enter", name);
  floe_node_add_input(b, v);
  floe_node_set_attr_string(b, "frame_name", frame);
  floe_node_set_attr_bool(b, "is_constant", constant);
  floe_node_set_attr_int(b, "parallel_iterations", parallel);
  return floe_node_finish(b);
}

static floe_code fail(FloeGraph *g, floe_code code, const char *fmt, const char *a,
                      const char *b) {
  floe__graph_fail(g, code, fmt, a, b);
  return code;
}

/* ---- nodes the scans leave alone ---- */

static _Thread_local struct {
  int *ids;
  int n, cap;
} excluded;

floe_code floe__cf_exclude(const FloeNode *n) {
  if (excluded.n == excluded.cap) {
    int cap = excluded.cap ? 2 * excluded.cap : 16;
    int *v = floe__realloc(excluded.ids, (size_t)cap * sizeof *v);
    if (!v) return FLOE_NO_MEMORY;
    excluded.ids = v;
    excluded.cap = cap;
  }
  excluded.ids[excluded.n++] = n->id;
  return FLOE_OK;
}

int floe__cf_exclude_count(void) { return excluded.n; }

void floe__cf_exclude_truncate(int n) {
  if (n <= 0)
    floe__cf_exclude_clear();
  else if (n < excluded.n)
    excluded.n = n;
}

void floe__cf_exclude_clear(void) {
  floe__free(excluded.ids);
  excluded.ids = NULL;
  excluded.n = excluded.cap = 0;
}

static bool is_excluded(int id) {
  for (int i = 0; i < excluded.n; i++)
    if (excluded.ids[i] == id) return true;
  return false;
}

/* ---- capture ---- */

typedef struct Capture {
  FloeOutput *from, *to; /* external value -> its constant Enter */
  int n, cap;
} Capture;

static FloeOutput capture_enter(FloeGraph *g, Capture *c, FloeOutput v, const char *frame,
                                int parallel) {
  for (int i = 0; i < c->n; i++)
    if (c->from[i].node == v.node && c->from[i].index == v.index) return c->to[i];
  char name[256];
  FloeNode *e = enter_node(g, floe__build_name_in(g, name, sizeof name, frame, "invariant"), v,
                           frame, true, parallel);
  FloeOutput out = floe_out(e, 0);
  if (!e) return out;
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 8;
    FloeOutput *a = floe__realloc(c->from, (size_t)cap * sizeof *a);
    if (a) c->from = a;
    FloeOutput *b = a ? floe__realloc(c->to, (size_t)cap * sizeof *b) : NULL;
    if (b) c->to = b;
    if (!a || !b) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building while loop '%s'", frame);
      return (FloeOutput){NULL, 0};
    }
    c->cap = cap;
  }
  c->from[c->n] = v;
  c->to[c->n++] = out;
  return out;
}

/* Scans nodes [start, end) built by a callback of the construct whose own nodes begin at
 * first: external inputs enter the loop `frame` (NULL: a cond, nothing to enter), and
 * nodes depending on nothing inside get a control input from pivot. */
/* How a region's outside values come in: through constant Enters of a loop frame, or
 * through Switches on a cond's predicate (so a branch not taken sees them dead, and their
 * gradients from it are dead too, merged with the other branch's). */
typedef struct Capturer {
  const char *frame;   /* a loop: its frame; NULL: a cond */
  int parallel;
  const char *cond;    /* a cond: its name */
  FloeOutput pred;
  int port;            /* the branch: 1 true, 0 false */
  Capture *cap;
} Capturer;

/* The Switch (output 0) that lets outside value v into cond c's branches. */
static FloeOutput capture_switch(FloeGraph *g, Capturer *c, FloeOutput v) {
  Capture *k = c->cap;
  for (int i = 0; i < k->n; i++)
    if (k->from[i].node == v.node && k->from[i].index == v.index) return floe_out(k->to[i].node, c->port);
  char name[256];
  FloeOutput pair[2] = {v, c->pred};
  FloeNodeBuilder *b =
      floe_node_begin(g, "Switch", floe__build_name_in(g, name, sizeof name, c->cond, "capture"));
  floe_node_add_input(b, pair[0]);
  floe_node_add_input(b, pair[1]);
  FloeNode *sw = floe_node_finish(b);
  if (!sw) return (FloeOutput){NULL, 0};
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 8;
    FloeOutput *a = floe__realloc(k->from, (size_t)cap * sizeof *a);
    if (a) k->from = a;
    FloeOutput *bb = a ? floe__realloc(k->to, (size_t)cap * sizeof *bb) : NULL;
    if (bb) k->to = bb;
    if (!a || !bb) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building cond '%s'", c->cond);
      return (FloeOutput){NULL, 0};
    }
    k->cap = cap;
  }
  k->from[k->n] = v;
  k->to[k->n++] = floe_out(sw, 0);
  return floe_out(sw, c->port);
}

static floe_code scan_region(FloeGraph *g, int first, int start, int end, FloeNode *pivot,
                             Capturer *cp) {
  FloeStatus st = {FLOE_OK, NULL};
  /* inside[id - first]: the node depends on the construct's flow. */
  bool *inside = floe__calloc((size_t)(end - first + 1), sizeof *inside);
  if (!inside) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a cond or while loop");
    return FLOE_NO_MEMORY;
  }
  for (int id = first; id < start; id++) inside[id - first] = true;
  floe_code rc = FLOE_OK;
  for (int id = start; id < end && rc == FLOE_OK; id++) {
    FloeNode *n = floe_graph_node(g, id);
    if (is_excluded(id)) continue;
    bool dep = false;
    for (int j = 0; j < n->num_inputs && rc == FLOE_OK; j++) {
      FloeOutput in = n->inputs[j];
      if (in.node->id >= first && !is_excluded(in.node->id)) {
        if (in.node->id < end && inside[in.node->id - first]) dep = true;
        continue;
      }
      if (!cp) continue;
      /* Resources (variable handles) need no gating: what reads them is gated. */
      if (!cp->frame && in.node->out_dtypes[in.index] == FLOE_RESOURCE) continue;
      FloeOutput e = cp->frame ? capture_enter(g, cp->cap, in, cp->frame, cp->parallel)
                               : capture_switch(g, cp, in);
      if (!e.node) {
        rc = floe_graph_status(g);
        break;
      }
      rc = floe__node_set_input(n, j, e, &st);
    }
    for (int c = 0; c < n->num_control && rc == FLOE_OK; c++) {
      const FloeNode *d = n->control[c];
      if (d->id >= first) {
        if (d->id < end && inside[d->id - first]) dep = true;
      } else if (cp && cp->frame) {
        rc = fail(g, FLOE_INVALID_ARGUMENT,
                  "node '%s' inside while loop '%s' has a control input from outside the loop: "
                  "make the loop wait for it instead (a control input of the loop's inputs)",
                  n->name, cp->frame);
      }
    }
    if (rc == FLOE_OK && !dep && n != pivot) rc = floe__node_add_control(n, pivot, &st);
    inside[id - first] = true;
  }
  if (st.code != FLOE_OK) {
    floe__graph_fail(g, st.code, "%s", floe_status_message(&st));
    floe_status_clear(&st);
  }
  floe__free(inside);
  return rc;
}

static floe_code graph_code(const FloeGraph *g, floe_code fallback);

/* Nodes of [start, end) whose results nothing in the region uses, nor outs: an update or
 * other side effect the user wants run. They become control inputs of each of `to` (the
 * loop's Exits, the branch's outputs), so pruning to the construct's results keeps them. */
static floe_code keep_sinks(FloeGraph *g, int start, int end, const FloeOutput *outs, int n,
                            FloeNode *const *to, int num_to, const char *trigger) {
  if (end <= start) return FLOE_OK;
  bool *used = floe__calloc((size_t)(end - start), sizeof *used);
  if (!used) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a cond or while loop");
    return FLOE_NO_MEMORY;
  }
  for (int id = start; id < end; id++) {
    const FloeNode *nd = floe_graph_node(g, id);
    for (int j = 0; j < nd->num_inputs; j++) {
      int k = nd->inputs[j].node->id;
      if (k >= start && k < end) used[k - start] = true;
    }
    for (int c = 0; c < nd->num_control; c++) {
      int k = nd->control[c]->id;
      if (k >= start && k < end) used[k - start] = true;
    }
  }
  for (int i = 0; i < n; i++)
    if (outs[i].node && outs[i].node->id >= start && outs[i].node->id < end)
      used[outs[i].node->id - start] = true;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = FLOE_OK;
  /* In a loop the side effects go through a ControlTrigger: in the last iteration they are
   * dead, and an Exit taking them directly would be dead too. */
  FloeNodeBuilder *b = trigger ? floe_node_begin(g, "ControlTrigger", trigger) : NULL;
  int sinks = 0;
  for (int id = start; id < end && rc == FLOE_OK; id++) {
    if (used[id - start] || is_excluded(id)) continue;
    sinks++;
    if (b)
      floe_node_add_control_input(b, floe_graph_node(g, id));
    else
      for (int t = 0; t < num_to && rc == FLOE_OK; t++)
        rc = floe__node_add_control(to[t], floe_graph_node(g, id), &st);
  }
  if (b && sinks == 0) {
    floe_node_builder_abandon(b);
  } else if (b) {
    FloeNode *trig = floe_node_finish(b);
    if (!trig) rc = graph_code(g, FLOE_INVALID_ARGUMENT);
    for (int t = 0; t < num_to && rc == FLOE_OK; t++)
      rc = floe__node_add_control(to[t], trig, &st);
  }
  if (rc != FLOE_OK) {
    floe__graph_fail(g, rc, "%s", floe_status_message(&st));
    floe_status_clear(&st);
  }
  floe__free(used);
  return rc;
}

static floe_code graph_code(const FloeGraph *g, floe_code fallback) {
  floe_code c = floe_graph_status(g);
  return c != FLOE_OK ? c : fallback;
}

/* ---- cond ---- */

/* Runs one branch and makes its outputs wait for the pivot (so an output that merely
 * forwards an outside value is dead when the branch is not taken). */
static floe_code build_branch(FloeGraph *g, const char *name, const char *which, int first,
                              FloeNode *pivot, Capturer *cp, FloeBranchFn fn, void *arg,
                              const FloeOutput *ins, int num_ins, FloeOutput *outs,
                              int num_outputs) {
  int start = floe_graph_num_nodes(g);
  for (int i = 0; i < num_outputs; i++) outs[i] = (FloeOutput){NULL, 0};
  floe_code rc = fn(g, arg, ins, num_ins, outs, num_outputs);
  if (rc != FLOE_OK || floe_graph_status(g) != FLOE_OK) {
    if (floe_graph_status(g) == FLOE_OK)
      floe__graph_fail(g, rc, "cond '%s': the %s branch failed (%s)", name, which,
                       floe_code_name(rc));
    return graph_code(g, rc);
  }
  for (int i = 0; i < num_outputs; i++) {
    if (!outs[i].node) {
      char idx[16];
      snprintf(idx, sizeof idx, "%d", i);
      return fail(g, FLOE_INVALID_ARGUMENT, "cond: the %s branch did not set output %s", which,
                  idx);
    }
  }
  int end = floe_graph_num_nodes(g);
  rc = scan_region(g, first, start, end, pivot, cp);
  FloeNode **wrapped = floe__calloc((size_t)num_outputs, sizeof *wrapped);
  if (!wrapped) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building cond '%s'", name);
    return FLOE_NO_MEMORY;
  }
  FloeOutput *raw = floe__calloc((size_t)num_outputs, sizeof *raw);
  if (raw) memcpy(raw, outs, (size_t)num_outputs * sizeof *raw);
  int num_wrapped = 0;
  for (int i = 0; i < num_outputs && rc == FLOE_OK && raw; i++) {
    if (outs[i].node->out_dtypes[outs[i].index] == FLOE_RESOURCE) continue;
    char nm[256], what[64];
    snprintf(what, sizeof what, "%s_out_%d", which, i);
    FloeNode *id =
        node1(g, "Identity", floe__build_name_in(g, nm, sizeof nm, name, what), &outs[i], 1, pivot);
    if (!id) {
      rc = graph_code(g, FLOE_INVALID_ARGUMENT);
      break;
    }
    outs[i] = floe_out(id, 0);
    wrapped[num_wrapped++] = id;
  }
  if (!raw) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building cond '%s'", name);
    rc = FLOE_NO_MEMORY;
  }
  if (rc == FLOE_OK) rc = keep_sinks(g, start, end, raw, num_outputs, wrapped, num_wrapped, NULL);
  floe__free(raw);
  floe__free(wrapped);
  return rc;
}

floe_code floe_cond(FloeGraph *g, const char *name, FloeOutput pred, const FloeOutput *inputs,
                    int num_inputs, FloeBranchFn true_fn, FloeBranchFn false_fn, void *arg,
                    FloeOutput *outputs, int num_outputs) {
  if (!g) return FLOE_INVALID_ARGUMENT;
  if (floe_graph_status(g) != FLOE_OK) return floe_graph_status(g);
  if (!name || !*name || !true_fn || !false_fn || num_inputs < 0 || num_outputs < 1 ||
      (num_inputs && !inputs) || !outputs || !pred.node)
    return fail(g, FLOE_INVALID_ARGUMENT,
                "floe_cond%s%s: needs a name, a predicate, both branch functions, at least one "
                "output and arrays for the counts given",
                name ? " " : "", name ? name : "");
  for (int i = 0; i < num_outputs; i++) outputs[i] = (FloeOutput){NULL, 0};
  FloeOutput *buf = floe__calloc((size_t)(2 * num_inputs + 2 * num_outputs + 1), sizeof *buf);
  if (!buf) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building cond '%s'", name);
    return FLOE_NO_MEMORY;
  }
  FloeOutput *ins_t = buf, *ins_f = buf + num_inputs, *outs_t = buf + 2 * num_inputs,
             *outs_f = outs_t + num_outputs;
  char nm[256];
  int first = floe_graph_num_nodes(g);
  floe_code rc = FLOE_INVALID_ARGUMENT;
  FloeOutput pp[2] = {pred, pred};
  FloeNode *sw =
      node1(g, "Switch", floe__build_name_in(g, nm, sizeof nm, name, "switch_pred"), pp, 2, NULL);
  if (!sw) goto out;
  FloeOutput t1 = floe_out(sw, 1), t0 = floe_out(sw, 0);
  FloeNode *pivot_t =
      node1(g, "Identity", floe__build_name_in(g, nm, sizeof nm, name, "pivot_t"), &t1, 1, NULL);
  FloeNode *pivot_f =
      node1(g, "Identity", floe__build_name_in(g, nm, sizeof nm, name, "pivot_f"), &t0, 1, NULL);
  if (!pivot_t || !pivot_f) goto out;
  for (int i = 0; i < num_inputs; i++) {
    char what[32];
    snprintf(what, sizeof what, "switch_%d", i);
    FloeOutput pair[2] = {inputs[i], pred};
    FloeNode *s =
        node1(g, "Switch", floe__build_name_in(g, nm, sizeof nm, name, what), pair, 2, NULL);
    if (!s) goto out;
    ins_f[i] = floe_out(s, 0);
    ins_t[i] = floe_out(s, 1);
  }
  Capture switches = {NULL, NULL, 0, 0};
  Capturer cp = {NULL, 0, name, pred, 1, &switches};
  rc = build_branch(g, name, "true", first, pivot_t, &cp, true_fn, arg, ins_t, num_inputs,
                    outs_t, num_outputs);
  cp.port = 0;
  if (rc == FLOE_OK)
    rc = build_branch(g, name, "false", first, pivot_f, &cp, false_fn, arg, ins_f, num_inputs,
                      outs_f, num_outputs);
  floe__free(switches.from);
  floe__free(switches.to);
  if (rc != FLOE_OK) goto out;
  for (int i = 0; i < num_outputs; i++) {
    char what[32];
    snprintf(what, sizeof what, "merge_%d", i);
    FloeOutput pair[2] = {outs_f[i], outs_t[i]};
    FloeNode *m =
        node1(g, "Merge", floe__build_name_in(g, nm, sizeof nm, name, what), pair, 2, NULL);
    if (!m) {
      rc = graph_code(g, FLOE_INVALID_ARGUMENT);
      goto out;
    }
    outputs[i] = floe_out(m, 0);
  }
  rc = FLOE_OK;
out:
  floe__free(buf);
  if (rc != FLOE_OK) {
    for (int i = 0; i < num_outputs; i++) outputs[i] = (FloeOutput){NULL, 0};
    rc = graph_code(g, rc);
  }
  return rc;
}

/* ---- while loops ---- */

void floe_while_options_init(FloeWhileOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->parallel_iterations = 10;
}

/* True when a value of shape v may flow into a loop variable declared with shape inv. */
static bool shape_fits(const FloeShape *inv, const FloeShape *v) {
  if (inv->rank < 0) return true;
  if (v->rank != inv->rank) return false;
  for (int d = 0; d < inv->rank; d++)
    if (inv->dims[d] >= 0 && v->dims[d] != inv->dims[d]) return false;
  return true;
}

typedef struct Loop {
  FloeGraph *g;
  const char *name;
  int parallel;
  int n;          /* user variables; a counter follows them when maximum_iterations > 0 */
  int total;
  FloeNode **merge, **sw, **exit;
  FloeOutput *vars, *next;
  Capture cap;
} Loop;

static void loop_free(Loop *l) {
  floe__free(l->merge);
  floe__free(l->vars);
  floe__free(l->cap.from);
  floe__free(l->cap.to);
}

static floe_code loop_user_fail(Loop *l, const char *which, floe_code rc) {
  if (floe_graph_status(l->g) == FLOE_OK)
    floe__graph_fail(l->g, rc ? rc : FLOE_INVALID_ARGUMENT,
                     "while loop '%s': the %s function failed (%s)", l->name, which,
                     floe_code_name(rc));
  return graph_code(l->g, rc);
}

/* Enter + Merge per variable (the Merge's second input is set to the back edge later). */
static floe_code build_heads(Loop *l, const FloeOutput *init, const FloeShape *invariants) {
  char nm[256], what[32];
  for (int i = 0; i < l->total; i++) {
    snprintf(what, sizeof what, "enter_%d", i);
    FloeNode *e = enter_node(l->g, floe__build_name_in(l->g, nm, sizeof nm, l->name, what), init[i],
                             l->name, false, l->parallel);
    if (!e) return graph_code(l->g, FLOE_INVALID_ARGUMENT);
    FloeOutput pair[2] = {floe_out(e, 0), floe_out(e, 0)};
    snprintf(what, sizeof what, "merge_%d", i);
    FloeNode *m = node1(l->g, "Merge", floe__build_name_in(l->g, nm, sizeof nm, l->name, what),
                        pair, 2, NULL);
    if (!m) return graph_code(l->g, FLOE_INVALID_ARGUMENT);
    if (invariants && i < l->n) m->out_shapes[0] = invariants[i];
    l->merge[i] = m;
    l->vars[i] = floe_out(m, 0);
  }
  return FLOE_OK;
}

/* An outside constant made visible in the loop. */
static FloeOutput loop_const_i32(Loop *l, const char *what, int64_t v) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe_tensor_new(FLOE_I32, 0, NULL, &st);
  if (!t) {
    floe__graph_fail(l->g, st.code, "%s", floe_status_message(&st));
    floe_status_clear(&st);
    return (FloeOutput){NULL, 0};
  }
  *(int32_t *)floe_tensor_data(t) = (int32_t)v;
  char nm[256];
  FloeOutput c = floe_const(l->g, floe__build_name_in(l->g, nm, sizeof nm, l->name, what), t);
  floe_tensor_release(t);
  if (!c.node) return c;
  return capture_enter(l->g, &l->cap, c, l->name, l->parallel);
}

floe_code floe_while_loop(FloeGraph *g, const char *name, FloeLoopCondFn cond,
                          FloeLoopBodyFn body, void *arg, const FloeOutput *loop_vars, int n,
                          const FloeWhileOptions *opts, FloeOutput *results) {
  if (!g) return FLOE_INVALID_ARGUMENT;
  if (floe_graph_status(g) != FLOE_OK) return floe_graph_status(g);
  FloeWhileOptions o;
  floe_while_options_init(&o);
  if (opts) {
    o.parallel_iterations = opts->parallel_iterations > 0 ? opts->parallel_iterations : 10;
    o.maximum_iterations = opts->maximum_iterations;
    o.shape_invariants = opts->shape_invariants;
  }
  if (!name || !*name || !cond || !body || n < 1 || !loop_vars || !results ||
      o.maximum_iterations < 0 || o.maximum_iterations > INT32_MAX)
    return fail(g, FLOE_INVALID_ARGUMENT,
                "floe_while_loop%s%s: needs a name, cond and body functions, at least one loop "
                "variable, a results array and maximum_iterations in [0, 2^31)",
                name ? " " : "", name ? name : "");
  for (int i = 0; i < n; i++) {
    results[i] = (FloeOutput){NULL, 0};
    if (!loop_vars[i].node)
      return fail(g, FLOE_INVALID_ARGUMENT,
                  "while loop '%s': a loop variable is invalid (from a failed builder call?)%s",
                  name, "");
  }
  Loop l = {.g = g, .name = name, .parallel = o.parallel_iterations, .n = n};
  l.total = n + (o.maximum_iterations > 0);
  /* One block: merge, sw, exit (nodes); vars, next, init (outputs). */
  l.merge = floe__calloc((size_t)l.total * 3, sizeof(FloeNode *));
  l.vars = floe__calloc((size_t)l.total * 3, sizeof(FloeOutput));
  if (!l.merge || !l.vars) {
    loop_free(&l);
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building while loop '%s'", name);
    return FLOE_NO_MEMORY;
  }
  l.sw = l.merge + l.total;
  l.exit = l.sw + l.total;
  l.next = l.vars + l.total;
  FloeOutput *init = l.next + l.total;
  memcpy(init, loop_vars, (size_t)n * sizeof *init);
  char nm[256], what[32];
  floe_code rc;
  int first = floe_graph_num_nodes(g);
  if (o.maximum_iterations > 0) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeTensor *zero = floe_tensor_new(FLOE_I32, 0, NULL, &st);
    if (!zero) {
      floe__graph_fail(g, st.code, "%s", floe_status_message(&st));
      floe_status_clear(&st);
      rc = graph_code(g, FLOE_NO_MEMORY);
      goto out;
    }
    *(int32_t *)floe_tensor_data(zero) = 0;
    init[n] = floe_const(g, floe__build_name_in(g, nm, sizeof nm, name, "iterations_init"), zero);
    floe_tensor_release(zero);
    first = floe_graph_num_nodes(g);
  }
  if ((rc = build_heads(&l, init, o.shape_invariants)) != FLOE_OK) goto out;

  /* The condition. */
  int start = floe_graph_num_nodes(g);
  FloeOutput pred = {NULL, 0};
  rc = cond(g, arg, l.vars, n, &pred);
  if (rc != FLOE_OK || floe_graph_status(g) != FLOE_OK) {
    rc = loop_user_fail(&l, "condition", rc);
    goto out;
  }
  if (!pred.node || pred.node->out_dtypes[pred.index] != FLOE_BOOL) {
    rc = fail(g, FLOE_INVALID_ARGUMENT,
              "while loop '%s': the condition must produce a bool scalar%s", name, "");
    goto out;
  }
  Capturer cp = {name, l.parallel, NULL, {NULL, 0}, 0, &l.cap};
  rc = scan_region(g, first, start, floe_graph_num_nodes(g), l.merge[0], &cp);
  if (rc != FLOE_OK) goto out;
  if (o.maximum_iterations > 0) {
    FloeOutput max = loop_const_i32(&l, "maximum_iterations", o.maximum_iterations);
    FloeOutput lt = floe_binary(
        g, "Less", floe__build_name_in(g, nm, sizeof nm, name, "below_maximum"), l.vars[n], max);
    pred = floe_binary(g, "LogicalAnd", floe__build_name_in(g, nm, sizeof nm, name, "continue"),
                       pred, lt);
    if (!pred.node) {
      rc = graph_code(g, FLOE_INVALID_ARGUMENT);
      goto out;
    }
  }
  FloeNode *lc = node1(g, "LoopCond", floe__build_name_in(g, nm, sizeof nm, name, "loop_cond"),
                       &pred, 1, NULL);
  if (!lc) {
    rc = graph_code(g, FLOE_INVALID_ARGUMENT);
    goto out;
  }

  /* Switch, Exit and the body's view of each variable. */
  FloeOutput *body_in = l.next; /* reused: next values are set after the body */
  for (int i = 0; i < l.total; i++) {
    FloeOutput pair[2] = {l.vars[i], floe_out(lc, 0)};
    snprintf(what, sizeof what, "switch_%d", i);
    l.sw[i] = node1(g, "Switch", floe__build_name_in(g, nm, sizeof nm, name, what), pair, 2, NULL);
    if (!l.sw[i]) break;
    FloeOutput f = floe_out(l.sw[i], 0), t = floe_out(l.sw[i], 1);
    snprintf(what, sizeof what, "exit_%d", i);
    l.exit[i] = node1(g, "Exit", floe__build_name_in(g, nm, sizeof nm, name, what), &f, 1, NULL);
    snprintf(what, sizeof what, "body_%d", i);
    FloeNode *id =
        node1(g, "Identity", floe__build_name_in(g, nm, sizeof nm, name, what), &t, 1, NULL);
    if (!l.exit[i] || !id) break;
    body_in[i] = floe_out(id, 0);
  }
  if (floe_graph_status(g) != FLOE_OK) {
    rc = graph_code(g, FLOE_INVALID_ARGUMENT);
    goto out;
  }

  /* The body. */
  FloeOutput *next = floe__calloc((size_t)l.total, sizeof *next);
  if (!next) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building while loop '%s'", name);
    rc = FLOE_NO_MEMORY;
    goto out;
  }
  start = floe_graph_num_nodes(g);
  rc = body(g, arg, body_in, n, next);
  if (rc != FLOE_OK || floe_graph_status(g) != FLOE_OK) {
    floe__free(next);
    rc = loop_user_fail(&l, "body", rc);
    goto out;
  }
  int body_end = floe_graph_num_nodes(g);
  rc = scan_region(g, first, start, body_end, body_in[0].node, &cp);
  if (rc == FLOE_OK)
    rc = keep_sinks(g, start, body_end, next, n, l.exit, l.total,
                    floe__build_name_in(g, nm, sizeof nm, name, "side_effects"));
  if (rc == FLOE_OK && o.maximum_iterations > 0) {
    FloeOutput one = loop_const_i32(&l, "one", 1);
    next[n] = floe_binary(g, "Add", floe__build_name_in(g, nm, sizeof nm, name, "iterations_next"),
                          body_in[n], one);
  }
  /* A variable the body never reads leaves its body Identity unused: the NextIteration
   * waits for it, so no enclosing loop or cond takes it for a side effect of its own frame. */
  bool *unread = rc == FLOE_OK ? floe__calloc((size_t)l.total, sizeof *unread) : NULL;
  for (int i = 0; unread && i < l.total; i++) unread[i] = true;
  for (int id = start; unread && id < body_end; id++) {
    const FloeNode *nd = floe_graph_node(g, id);
    for (int j = 0; j < l.total; j++) {
      for (int k = 0; k < nd->num_inputs; k++)
        if (nd->inputs[k].node == body_in[j].node) unread[j] = false;
      for (int k = 0; k < nd->num_control; k++)
        if (nd->control[k] == body_in[j].node) unread[j] = false;
    }
  }
  for (int i = 0; unread && i < l.total; i++)
    if (next[i].node == body_in[i].node) unread[i] = false;
  /* Back edges, after checking each value fits its variable. */
  for (int i = 0; i < l.total && rc == FLOE_OK; i++) {
    if (!next[i].node) {
      rc = fail(g, FLOE_INVALID_ARGUMENT, "while loop '%s': the body did not set a value for "
                "a loop variable%s", name, "");
      break;
    }
    const FloeShape *want = &l.merge[i]->out_shapes[0];
    const FloeShape *got = &next[i].node->out_shapes[next[i].index];
    if (next[i].node->out_dtypes[next[i].index] != l.merge[i]->out_dtypes[0] ||
        !shape_fits(want, got)) {
      char a[96], b[96];
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "while loop '%s': loop variable %d enters as %s %s but the body makes "
                       "it %s %s: keep its dtype, and give a shape invariant "
                       "(FloeWhileOptions.shape_invariants) where its shape may change",
                       name, i, floe_dtype_name(l.merge[i]->out_dtypes[0]),
                       floe_shape_str(want, a, sizeof a),
                       floe_dtype_name(next[i].node->out_dtypes[next[i].index]),
                       floe_shape_str(got, b, sizeof b));
      rc = FLOE_INVALID_ARGUMENT;
      break;
    }
    snprintf(what, sizeof what, "next_%d", i);
    FloeNode *ni = node1(g, "NextIteration", floe__build_name_in(g, nm, sizeof nm, name, what),
                         &next[i], 1, NULL);
    if (!ni) {
      rc = graph_code(g, FLOE_INVALID_ARGUMENT);
      break;
    }
    FloeStatus st = {FLOE_OK, NULL};
    if ((unread && unread[i] && floe__node_add_control(ni, body_in[i].node, &st) != FLOE_OK) ||
        floe__node_set_input(l.merge[i], 1, floe_out(ni, 0), &st) != FLOE_OK) {
      floe__graph_fail(g, st.code, "%s", floe_status_message(&st));
      floe_status_clear(&st);
      rc = graph_code(g, FLOE_INTERNAL);
    }
  }
  floe__free(next);
  floe__free(unread);
  if (rc != FLOE_OK) goto out;
  for (int i = 0; i < n; i++) results[i] = floe_out(l.exit[i], 0);
out:
  loop_free(&l);
  if (rc != FLOE_OK) rc = graph_code(g, rc);
  return rc;
}
