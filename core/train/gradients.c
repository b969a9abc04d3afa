/* SPDX-License-Identifier: Apache-2.0 */
/* gradients.c - automatic differentiation (floe_gradients).
 *
 * As in the TensorFlow paper: the gradient of a graph is more graph. Walking back from the
 * ys, each node on a path between the xs and the ys gets its registered gradient function,
 * which adds the nodes computing its input gradients from its output gradients; gradients
 * reaching one tensor along several paths are summed with AddN. Node ids are a topological
 * order (a node's inputs exist before it), so one descending sweep visits every node after
 * all of its consumers.
 *
 * Gradient functions come from the registry (graph/grad_registry.c): the standard set's C
 * functions (grad_*.c, registered by floe__grads_init here), "not differentiable" entries
 * (no gradient flows and reaching them is fine), and plugins' declarative FloeGradientDef
 * (ABI 1.2), turned into one node of the plugin's grad op. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

floe_code floe__grads_init(FloeStatus *st) {
  static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
  static bool std_done;
  pthread_mutex_lock(&init_mu);
  floe_code rc = FLOE_OK;
  if (!std_done) {
    rc = floe__grad_registry_init(st);
    if (rc == FLOE_OK) rc = floe__grads_register_math(st);
    if (rc == FLOE_OK) rc = floe__grads_register_nn(st);
    if (rc == FLOE_OK) rc = floe__grads_register_array(st);
    if (rc == FLOE_OK) rc = floe__grads_register_index(st);
    if (rc == FLOE_OK) rc = floe__grads_register_control(st);
    if (rc == FLOE_OK) rc = floe__grads_register_tensor_array(st);
    if (rc == FLOE_OK) rc = floe__grads_register_rnn(st);
    if (rc == FLOE_OK) rc = floe__grads_register_math_signal(st);
    if (rc == FLOE_OK) rc = floe__grads_register_resize(st);
    if (rc == FLOE_OK) rc = floe__grads_register_conv(st);
    std_done = rc == FLOE_OK;
  }
  pthread_mutex_unlock(&init_mu);
  return rc;
}

int floe_op_has_gradient(const char *op) {
  if (!op || floe__grads_init(NULL) != FLOE_OK) return 0;
  return floe__grad_lookup(op, NULL, NULL);
}

/* ------------------------------------------------------------------------------------ */
/* Helpers for gradient functions. */

static bool is_float(FloeDType dt) { return (FLOE_DTYPES_FLOAT & FLOE_DTYPE_BIT(dt)) != 0; }

static FloeOutput invalid_output(void) {
  FloeOutput o = {NULL, 0};
  return o;
}

FloeDType floe__grad_input_dtype(const FloeGradCtx *c, int i) {
  FloeOutput in = c->node->inputs[i];
  return in.node->out_dtypes[in.index];
}

/* The gradient builders' failures name the forward node (s->arg). */
static void grad_build_fail(const FloeBuildScope *s, const char *op, const char *leaf,
                            const FloeStatus *why) {
  (void)op;
  (void)leaf;
  const FloeNode *n = s->arg;
  if (why)
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "out of memory building a gradient constant of '%s'",
                     n->name);
  else
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "out of memory naming a gradient node of '%s'", n->name);
}

FloeNodeBuilder *floe__grad_begin(FloeGradCtx *c, const char *op) {
  return floe__build_begin(&c->build, op, NULL);
}

FloeOutput floe__grad_unary(FloeGradCtx *c, const char *op, FloeOutput x) {
  return floe__build_unary(&c->build, op, NULL, x);
}

FloeOutput floe__grad_binary(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b) {
  return floe__build_binary(&c->build, op, NULL, a, b);
}

FloeOutput floe__grad_op(FloeGradCtx *c, const char *op, const FloeOutput *ins, int n,
                         const char *const *attrs) {
  return floe__build_op_like(&c->build, op, NULL, ins, n, c->node, attrs);
}

FloeNodeBuilder *floe__grad_begin_op(FloeGradCtx *c, const char *op, const FloeOutput *ins, int n,
                                     const char *const *attrs) {
  FloeNodeBuilder *b = floe__grad_begin(c, op);
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  floe__node_copy_attrs(c->node, b, attrs);
  return b;
}

FloeOutput floe__grad_cast(FloeGradCtx *c, FloeOutput x, FloeDType to) {
  return floe__build_cast(&c->build, NULL, x, to);
}

FloeOutput floe__grad_scalar(FloeGradCtx *c, FloeDType dt, double v) {
  return floe__build_scalar(&c->build, NULL, dt, v);
}

FloeOutput floe__grad_i32_vec(FloeGradCtx *c, const int64_t *v, int n) {
  return floe__build_ints(&c->build, NULL, FLOE_I32, v, n);
}

static bool shape_known(const FloeShape *s) {
  if (s->rank < 0) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

static bool shape_equal(const FloeShape *a, const FloeShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

FloeOutput floe__grad_shape_of(FloeGradCtx *c, FloeOutput x) {
  if (!x.node) return invalid_output();
  FloeShape s = floe_node_output_shape(x.node, x.index);
  if (shape_known(&s)) return floe__grad_i32_vec(c, s.dims, s.rank);
  FloeNodeBuilder *b = floe__grad_begin(c, "Shape");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "out_type", FLOE_I32);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe__grad_sum_to(FloeGradCtx *c, FloeOutput g, FloeOutput x) {
  if (!g.node || !x.node) return invalid_output();
  FloeShape gs = floe_node_output_shape(g.node, g.index);
  FloeShape xs = floe_node_output_shape(x.node, x.index);
  if (shape_known(&gs) && shape_known(&xs) && shape_equal(&gs, &xs)) return g;
  return floe__grad_binary(c, "SumToShape", g, floe__grad_shape_of(c, x));
}

FloeOutput floe__grad_dy(FloeGradCtx *c, int j) {
  if (c->dy[j].node) return c->dy[j];
  return floe__grad_unary(c, "ZerosLike", floe_out((FloeNode *)c->node, j));
}

floe_code floe__grad_concat_outputs(FloeGradCtx *c, FloeOutput axis, FloeStatus *st) {
  int n = c->node->num_outputs;
  FloeOutput *parts = floe__calloc((size_t)n, sizeof *parts);
  if (!parts)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory differentiating '%s'", c->node->name);
  for (int j = 0; j < n; j++) parts[j] = floe__grad_dy(c, j);
  FloeNodeBuilder *b = floe__grad_begin(c, "Concat");
  floe_node_add_input_list(b, parts, n);
  floe_node_add_input(b, axis);
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  floe__free(parts);
  return FLOE_OK;
}

const FloeTensor *floe__grad_const_input(const FloeGradCtx *c, int i) {
  const FloeNode *src = c->node->inputs[i].node;
  if (!src || strcmp(src->op->name, "Const") != 0) return NULL;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || !floe__tensor_on_host(v->u.tensor))
    return NULL;
  return v->u.tensor;
}

void floe__grad_copy_attr(const FloeGradCtx *c, FloeNodeBuilder *b, const char *name) {
  floe__node_copy_attr(c->node, b, name);
}

/* ------------------------------------------------------------------------------------ */
/* A plugin's declarative gradient: one node of def->grad_op. */

static floe_code grad_from_def(FloeGradCtx *c, const FloeGradientDef *d, FloeStatus *st) {
  const FloeNode *n = c->node;
  if (!floe__op_lookup(d->grad_op))
    return floe_status_set(st, FLOE_NOT_FOUND,
                           "node '%s' (%s): its gradient op %s is not defined (is the plugin "
                           "that defines it loaded?)",
                           n->name, n->op->name, d->grad_op);
  FloeOutput *ins = floe__calloc(d->num_grad_inputs ? d->num_grad_inputs : 1, sizeof *ins);
  FloeAttrs attrs;
  floe__attrs_init(&attrs);
  if (!ins) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory differentiating '%s'", n->name);
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < d->num_grad_inputs; i++) {
    char kind;
    long idx;
    floe__grad_input_parse(d->grad_inputs[i], &kind, &idx); /* validated at registration */
    long limit = kind == 'x' ? n->num_inputs : n->num_outputs;
    if (idx >= limit)
      rc = floe_status_set(st, FLOE_OUT_OF_RANGE,
                           "node '%s' (%s): gradient input \"%s\" is out of range (%ld %s)",
                           n->name, n->op->name, d->grad_inputs[i], limit,
                           kind == 'x' ? "inputs" : "outputs");
    else if (kind == 'd')
      ins[i] = floe__grad_dy(c, (int)idx);
    else if (kind == 'x')
      ins[i] = n->inputs[idx];
    else
      ins[i] = floe_out((FloeNode *)n, (int)idx);
  }
  for (size_t i = 0; rc == FLOE_OK && i < d->num_copy_attrs; i++) {
    const FloeAttrValue *v = floe__attrs_get(&n->attrs, d->copy_attrs[i]);
    if (!v) continue;
    FloeAttrValue copy;
    if ((rc = floe__attr_value_copy(&copy, v, st)) == FLOE_OK)
      rc = floe__attrs_set(&attrs, d->copy_attrs[i], &copy, st);
  }
  if (rc == FLOE_OK && floe_graph_status(c->g) != FLOE_OK) {
    floe_graph_error(c->g, st);
    rc = floe_graph_status(c->g);
  }
  if (rc == FLOE_OK) {
    char *name = floe__build_name(c->g, c->scope, d->grad_op, true);
    if (!name) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory differentiating '%s'", n->name);
    } else {
      FloeNodeSpec spec = {.op = d->grad_op,
                           .name = name,
                           .device = n->device,
                           .inputs = ins,
                           .num_inputs = (int)d->num_grad_inputs,
                           .attrs = &attrs};
      FloeNode *gn = floe__graph_add_node(c->g, &spec, st);
      floe__free(name);
      if (!gn) {
        floe__status_prefix(st, "node '%s' (%s): building its gradient with %s", n->name,
                            n->op->name, d->grad_op);
        rc = floe_status_code(st);
      } else {
        for (int i = 0; i < n->num_inputs && (size_t)i < d->num_input_grads; i++) {
          int32_t k = d->input_grads[i];
          if (k < 0) continue;
          if (k >= gn->num_outputs) {
            rc = floe_status_set(st, FLOE_OUT_OF_RANGE,
                                 "node '%s' (%s): input_grads[%d] = %d but %s has %d outputs",
                                 n->name, n->op->name, i, (int)k, d->grad_op, gn->num_outputs);
            break;
          }
          c->dx[i] = floe_out(gn, k);
        }
      }
    }
  }
  floe__attrs_clear(&attrs);
  floe__free(ins);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* floe_gradients. */

/* Gradients arriving at one output: a small growable list. */
typedef struct Contribs {
  FloeOutput *v;
  int n, cap;
} Contribs;

typedef struct Walk {
  FloeGraph *g;
  int num_nodes;          /* nodes present when the walk began */
  int *out_base;          /* node id -> index of its output 0 in contribs */
  Contribs *contribs;     /* per (node, output) */
  bool *from_x, *to_y;
} Walk;

static floe_code contrib_add(Walk *w, FloeOutput at, FloeOutput g, FloeStatus *st) {
  Contribs *c = &w->contribs[w->out_base[at.node->id] + at.index];
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 2;
    FloeOutput *v = floe__realloc(c->v, (size_t)cap * sizeof *v);
    if (!v) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
    c->v = v;
    c->cap = cap;
  }
  c->v[c->n++] = g;
  return FLOE_OK;
}

/* The sum of the gradients reaching output `index` of node (invalid when none). Several are
 * summed once with AddN, and the list collapses to that sum. */
static FloeOutput contrib_sum(Walk *w, FloeNode *node, int index, FloeStatus *st) {
  Contribs *c = &w->contribs[w->out_base[node->id] + index];
  if (c->n == 0) return invalid_output();
  if (c->n == 1) return c->v[0];
  size_t len = strlen(node->name) + 40;
  char *name = floe__malloc(len);
  if (!name) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
    return invalid_output();
  }
  snprintf(name, len, "gradients/%s/AddN", node->name);
  for (int k = 1; floe_graph_find(w->g, name); k++)
    snprintf(name, len, "gradients/%s/AddN_%d", node->name, k);
  FloeNodeBuilder *b = floe_node_begin(w->g, "AddN", name);
  floe__free(name);
  floe_node_add_input_list(b, c->v, c->n);
  FloeOutput sum = floe_out(floe_node_finish(b), 0);
  if (!sum.node) {
    floe_graph_error(w->g, st);
    return invalid_output();
  }
  c->v[0] = sum;
  c->n = 1;
  return sum;
}

static floe_code check_output(const FloeGraph *g, FloeOutput o, const char *what, int i,
                              FloeStatus *st) {
  if (!o.node || o.node->graph != g || o.index < 0 || o.index >= o.node->num_outputs)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "floe_gradients: %s[%d] is not an output of this graph (a NULL node "
                           "comes from an earlier failed call: check floe_graph_status)",
                           what, i);
  return FLOE_OK;
}

static void walk_free(Walk *w) {
  if (w->contribs) {
    int total = w->out_base[w->num_nodes];
    for (int i = 0; i < total; i++) floe__free(w->contribs[i].v);
  }
  floe__free(w->contribs);
  floe__free(w->out_base);
  floe__free(w->from_x);
  floe__free(w->to_y);
}

/* True when op is registered as not differentiable. */
static bool not_differentiable_op(const char *op) {
  FloeGradFn fn;
  const FloeGradientDef *def;
  return floe__grad_lookup(op, &fn, &def) && !fn && !def;
}

static bool is_x(const FloeOutput *xs, int n, const FloeNode *node) {
  for (int i = 0; i < n; i++)
    if (xs[i].node == node) return true;
  return false;
}

/* A loop's back edge: NextIteration into a Merge. */
static bool back_edge(const FloeNode *n, const FloeOutput *in) {
  return strcmp(in->node->op->name, "NextIteration") == 0 && strcmp(n->op->name, "Merge") == 0;
}

/* Marks what xs reach (forward) and what reaches ys (backward), over data edges. Sweeps
 * repeat until nothing changes: ids are a topological order except for loops (a Merge's
 * back edge, and the Enters a loop builder adds for values its body captured). Without
 * follow_back, back edges are ignored (one loop iteration). */
static void mark_paths(Walk *w, const FloeOutput *ys, int num_ys, const FloeOutput *xs, int num_xs,
                       bool follow_back) {
  FloeGraph *g = w->g;
  int lo = w->num_nodes;
  for (int i = 0; i < num_xs; i++) {
    w->from_x[xs[i].node->id] = true;
    if (xs[i].node->id < lo) lo = xs[i].node->id;
  }
  /* Forward: a node is reached when any input comes from a reached node (ids are a
   * topological order but for back edges). Nothing flows out of a non-differentiable node
   * (StopGradient, Shape, ...) unless it is an x itself, so an op without a gradient
   * beyond one is no error. */
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = lo; id < w->num_nodes; id++) {
      FloeNode *n = g->nodes[id];
      if (w->from_x[id] || not_differentiable_op(n->op->name)) continue;
      for (int k = 0; k < n->num_inputs; k++) {
        const FloeOutput *in = &n->inputs[k];
        if (in->node->id >= w->num_nodes || (!follow_back && back_edge(n, in))) continue;
        if (w->from_x[in->node->id]) {
          w->from_x[id] = true;
          changed = true;
          break;
        }
      }
    }
  }
  for (int i = 0; i < num_ys; i++) w->to_y[ys[i].node->id] = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = w->num_nodes - 1; id >= 0; id--) {
      if (!w->to_y[id]) continue;
      FloeNode *n = g->nodes[id];
      for (int k = 0; k < n->num_inputs; k++) {
        const FloeOutput *in = &n->inputs[k];
        if (in->node->id >= w->num_nodes || (!follow_back && back_edge(n, in))) continue;
        if (!w->to_y[in->node->id]) changed = true;
        w->to_y[in->node->id] = true;
      }
    }
  }
}

/* Keys of the nodes [0, num_nodes) in reverse topological order over data and control
 * edges, loop back edges left out; every node of loop L (loop_of) is the one key
 * num_nodes + L. *order: floe__malloc'd, caller frees. A cycle without a back edge is an
 * error naming a node on it. */
static floe_code reverse_topo(Walk *w, const int *loop_of, int num_loops, int **order, int *n,
                              FloeStatus *st) {
  FloeGraph *g = w->g;
  int nn = w->num_nodes, nk = nn + num_loops;
  /* CSR of consumer -> producer edges between keys, and each key's consumer count. */
  int *off = floe__calloc((size_t)nk + 2, sizeof *off);
  int *fill = floe__calloc((size_t)nk + 1, sizeof *fill);
  int *pending = floe__calloc((size_t)nk + 1, sizeof *pending); /* consumers not yet emitted */
  bool *present = floe__calloc((size_t)nk + 1, sizeof *present);
  int *queue = floe__malloc(((size_t)nk + 1) * sizeof *queue);
  int *prod = NULL;
  if (!off || !fill || !pending || !present || !queue) goto oom;
#define KEY(id) (loop_of && loop_of[id] >= 0 ? nn + loop_of[id] : (id))
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      for (int k = 0; k < nk; k++) off[k + 1] += off[k];
      prod = floe__malloc(((size_t)off[nk] + 1) * sizeof *prod);
      if (!prod) goto oom;
    }
    for (int id = 0; id < nn; id++) {
      const FloeNode *nd = g->nodes[id];
      int kc = KEY(id);
      present[kc] = true;
      for (int j = 0; j < nd->num_inputs + nd->num_control; j++) {
        const FloeNode *p = j < nd->num_inputs ? nd->inputs[j].node : nd->control[j - nd->num_inputs];
        if (p->id >= nn || (j < nd->num_inputs && back_edge(nd, &nd->inputs[j]))) continue;
        int kp = KEY(p->id);
        if (kp == kc) continue;
        if (pass == 0) {
          off[kc + 1]++;
          pending[kp]++;
        } else {
          prod[off[kc] + fill[kc]++] = kp;
        }
      }
    }
  }
#undef KEY
  /* Kahn's algorithm from the keys nothing consumes. */
  int qh = 0, qt = 0, want = 0;
  for (int k = 0; k < nk; k++) {
    want += present[k];
    if (present[k] && pending[k] == 0) queue[qt++] = k;
  }
  while (qh < qt) {
    int k = queue[qh++];
    for (int e = off[k]; e < off[k + 1]; e++)
      if (--pending[prod[e]] == 0) queue[qt++] = prod[e];
  }
  floe_code rc = FLOE_OK;
  if (qt != want) {
    int bad = 0;
    while (bad < nn && !(pending[loop_of && loop_of[bad] >= 0 ? nn + loop_of[bad] : bad] > 0)) bad++;
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "floe_gradients: node '%s' (%s) is on a cycle that is not a while loop "
                         "built by floe_while_loop",
                         bad < nn ? g->nodes[bad]->name : "?",
                         bad < nn ? g->nodes[bad]->op->name : "?");
  }
  floe__free(off);
  floe__free(fill);
  floe__free(pending);
  floe__free(present);
  floe__free(prod);
  if (rc != FLOE_OK) {
    floe__free(queue);
    return rc;
  }
  *order = queue;
  *n = qt;
  return FLOE_OK;
oom:
  floe__free(off);
  floe__free(fill);
  floe__free(pending);
  floe__free(present);
  floe__free(queue);
  floe__free(prod);
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
}

/* The gradient of a whole while loop (the sweep reached its last Exit): contributions to
 * its initial values and to the outside values its body reads. */
static floe_code backprop_loop(Walk *w, const FloeGradLoop *L, int li, const int *loop_of,
                               FloeStatus *st) {
  int nv = L->num_vars, ni = L->num_inv;
  FloeOutput *dexit = floe__calloc((size_t)(2 * nv + ni + 1), sizeof *dexit);
  bool *need_inv = floe__calloc((size_t)ni + 1, sizeof *need_inv);
  if (!dexit || !need_inv) {
    floe__free(dexit);
    floe__free(need_inv);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  }
  FloeOutput *dinit = dexit + nv, *dinv = dinit + nv;
  floe_code rc = FLOE_OK;
  bool any = false;
  for (int i = 0; i < nv && rc == FLOE_OK; i++) {
    dexit[i] = contrib_sum(w, L->vars[i].exit, 0, st);
    if (!dexit[i].node && floe_status_code(st) != FLOE_OK) rc = floe_status_code(st);
    any = any || dexit[i].node;
  }
  bool wanted = false;
  for (int k = 0; k < ni; k++) {
    need_inv[k] = w->from_x[L->inv[k]->inputs[0].node->id];
    wanted = wanted || need_inv[k];
  }
  for (int i = 0; i < nv; i++) wanted = wanted || w->from_x[L->vars[i].enter->inputs[0].node->id];
  if (rc == FLOE_OK && any && wanted)
    rc = floe__grad_while(w->g, L, li, loop_of, w->num_nodes, dexit, need_inv, dinit, dinv, st);
  for (int i = 0; i < nv && rc == FLOE_OK && any && wanted; i++) {
    FloeOutput in = L->vars[i].enter->inputs[0];
    if (dinit[i].node && w->from_x[in.node->id]) rc = contrib_add(w, in, dinit[i], st);
  }
  for (int k = 0; k < ni && rc == FLOE_OK && any && wanted; k++)
    if (dinv[k].node) rc = contrib_add(w, L->inv[k]->inputs[0], dinv[k], st);
  floe__free(dexit);
  floe__free(need_inv);
  return rc;
}

/* Runs node's gradient function and routes the input gradients it made. */
static floe_code backprop_node(Walk *w, FloeNode *n, const FloeOutput *dy, FloeStatus *st) {
  FloeGraph *g = w->g;
  bool any_needed = false;
  bool *need = floe__calloc((size_t)(n->num_inputs ? n->num_inputs : 1), sizeof *need);
  FloeOutput *dx = floe__calloc((size_t)(n->num_inputs ? n->num_inputs : 1), sizeof *dx);
  size_t slen = strlen(n->name) + 16;
  char *scope = floe__malloc(slen);
  floe_code rc = FLOE_OK;
  if (!need || !dx || !scope) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory differentiating '%s'", n->name);
    goto out;
  }
  snprintf(scope, slen, "gradients/%s", n->name);
  for (int k = 0; k < n->num_inputs; k++) {
    FloeOutput in = n->inputs[k];
    need[k] = w->from_x[in.node->id] && is_float(in.node->out_dtypes[in.index]);
    any_needed = any_needed || need[k];
  }
  if (!any_needed) goto out;

  FloeGradFn fn;
  const FloeGradientDef *def;
  bool found = floe__grad_lookup(n->op->name, &fn, &def);
  if (!found) {
    rc = floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s) lies between the xs and the ys but op "
                         "%s has no gradient function: wrap the path in StopGradient, or "
                         "register a gradient for %s (a plugin: reg->register_gradient)",
                         n->name, n->op->name, n->op->name, n->op->name);
    goto out;
  }
  if (!fn && !def) goto out; /* not differentiable: nothing flows */

  /* Gradient nodes live where their forward node was asked to. */
  FloeGradCtx c = {.g = g, .node = n, .dy = dy, .dx = dx, .scope = scope, .need_dx = need,
                   .build = {.g = g, .name = scope, .unique = true, .device = n->device,
                             .fail = grad_build_fail, .arg = n}};
  rc = def ? grad_from_def(&c, def, st) : fn(&c, st);
  if (rc == FLOE_OK && floe_graph_status(g) != FLOE_OK) {
    floe_graph_error(g, st);
    rc = floe_graph_status(g);
  }
  if (rc != FLOE_OK) {
    if (!strstr(floe_status_message(st), n->name))
      floe__status_prefix(st, "floe_gradients: gradient of node '%s' (%s)", n->name, n->op->name);
    goto out;
  }
  for (int k = 0; k < n->num_inputs && rc == FLOE_OK; k++) {
    if (!need[k] || !dx[k].node) continue;
    FloeOutput in = n->inputs[k];
    FloeDType want = in.node->out_dtypes[in.index];
    FloeDType got = floe_node_output_dtype(dx[k].node, dx[k].index);
    if (got != want) {
      rc = floe_status_set(st, FLOE_INTERNAL,
                           "floe_gradients: the gradient of node '%s' (%s) for input %d is %s, "
                           "the input is %s",
                           n->name, n->op->name, k, floe_dtype_name(got), floe_dtype_name(want));
      break;
    }
    rc = contrib_add(w, in, dx[k], st);
  }
out:
  floe__free(scope);
  floe__free(dx);
  floe__free(need);
  return rc;
}

static floe_code gradients_impl(FloeGraph *g, const FloeOutput *ys, int num_ys,
                                const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                                FloeOutput *dxs, FloeStatus *status, bool top);

floe_code floe_gradients(FloeGraph *g, const FloeOutput *ys, int num_ys, const FloeOutput *xs,
                         int num_xs, const FloeOutput *grad_ys, FloeOutput *dxs,
                         FloeStatus *status) {
  return gradients_impl(g, ys, num_ys, xs, num_xs, grad_ys, dxs, status, true);
}

floe_code floe__gradients_body(FloeGraph *g, const FloeOutput *ys, int num_ys,
                               const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                               FloeOutput *dxs, FloeStatus *st) {
  return gradients_impl(g, ys, num_ys, xs, num_xs, grad_ys, dxs, st, false);
}

/* top: the user's call (loops are differentiated as units); else one loop iteration. */
static floe_code gradients_impl(FloeGraph *g, const FloeOutput *ys, int num_ys,
                                const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                                FloeOutput *dxs, FloeStatus *status, bool top) {
  FloeStatus local = {FLOE_OK, NULL};
  FloeStatus *st = status ? status : &local;
  floe_code rc;
  if (!g) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_gradients: graph is NULL");
  if (floe_graph_status(g) != FLOE_OK) {
    floe_graph_error(g, st);
    rc = floe_graph_status(g);
    goto done;
  }
  if (num_ys < 1 || num_xs < 0 || !ys || (num_xs && (!xs || !dxs))) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "floe_gradients: needs at least one y, and xs and dxs arrays of num_xs");
    goto fail;
  }
  for (int i = 0; i < num_xs; i++) dxs[i] = invalid_output();
  if ((rc = floe__grads_init(st)) != FLOE_OK) goto fail;
  for (int i = 0; i < num_ys; i++) {
    if ((rc = check_output(g, ys[i], "ys", i, st)) != FLOE_OK) goto fail;
    FloeDType dt = ys[i].node->out_dtypes[ys[i].index];
    if (!is_float(dt)) {
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "floe_gradients: ys[%d] ('%s:%d') is %s; only float tensors have "
                           "gradients",
                           i, ys[i].node->name, ys[i].index, floe_dtype_name(dt));
      goto fail;
    }
    if (grad_ys && grad_ys[i].node) {
      if ((rc = check_output(g, grad_ys[i], "grad_ys", i, st)) != FLOE_OK) goto fail;
      FloeDType gd = grad_ys[i].node->out_dtypes[grad_ys[i].index];
      if (gd != dt) {
        rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "floe_gradients: grad_ys[%d] is %s but ys[%d] ('%s') is %s", i,
                             floe_dtype_name(gd), i, ys[i].node->name, floe_dtype_name(dt));
        goto fail;
      }
    }
  }
  for (int i = 0; i < num_xs; i++)
    if ((rc = check_output(g, xs[i], "xs", i, st)) != FLOE_OK) goto fail;

  Walk w;
  memset(&w, 0, sizeof w);
  w.g = g;
  w.num_nodes = g->num_nodes;
  w.out_base = floe__malloc((size_t)(w.num_nodes + 1) * sizeof *w.out_base);
  w.from_x = floe__calloc((size_t)w.num_nodes + 1, sizeof *w.from_x);
  w.to_y = floe__calloc((size_t)w.num_nodes + 1, sizeof *w.to_y);
  if (!w.out_base || !w.from_x || !w.to_y) {
    walk_free(&w);
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
    goto fail;
  }
  int total = 0;
  for (int id = 0; id < w.num_nodes; id++) {
    w.out_base[id] = total;
    total += g->nodes[id]->num_outputs;
  }
  w.out_base[w.num_nodes] = total;
  w.contribs = floe__calloc((size_t)total + 1, sizeof *w.contribs);
  if (!w.contribs) {
    walk_free(&w);
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
    goto fail;
  }
  mark_paths(&w, ys, num_ys, xs, num_xs, top);
  int *loop_of = top ? floe__malloc((size_t)(w.num_nodes + 1) * sizeof *loop_of) : NULL;
  FloeGradLoop *loops = NULL;
  int num_loops = 0;
  if (top && !loop_of) rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  if (loop_of && rc == FLOE_OK)
    rc = floe__grad_find_loops(g, w.num_nodes, loop_of, &loops, &num_loops, st);

  /* Seeds: grad_ys, or ones shaped like each y. */
  for (int i = 0; i < num_ys && rc == FLOE_OK; i++) {
    if (!w.from_x[ys[i].node->id]) continue; /* no x influences it */
    FloeOutput seed = grad_ys ? grad_ys[i] : invalid_output();
    if (!seed.node) {
      size_t len = strlen(ys[i].node->name) + 32;
      char *name = floe__malloc(len);
      if (!name) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
        break;
      }
      snprintf(name, len, "gradients/%s/OnesLike", ys[i].node->name);
      for (int k = 1; floe_graph_find(g, name); k++)
        snprintf(name, len, "gradients/%s/OnesLike_%d", ys[i].node->name, k);
      FloeNodeBuilder *b = floe_node_begin(g, "OnesLike", name);
      floe_node_add_input(b, ys[i]);
      seed = floe_out(floe_node_finish(b), 0);
      floe__free(name);
      if (!seed.node) {
        floe_graph_error(g, st);
        rc = floe_graph_status(g);
        break;
      }
    }
    rc = contrib_add(&w, ys[i], seed, st);
  }

  /* One sweep in reverse topological order (each loop one unit): a node is visited after
   * every consumer of its outputs. */
  int *order = NULL, num_order = 0;
  if (rc == FLOE_OK) rc = reverse_topo(&w, loop_of, num_loops, &order, &num_order, st);
  FloeOutput *dy = NULL;
  int dy_cap = 0;
  for (int k = 0; k < num_order && rc == FLOE_OK; k++) {
    int key = order[k];
    if (key >= w.num_nodes) { /* a loop, differentiated whole */
      int li = key - w.num_nodes;
      rc = backprop_loop(&w, &loops[li], li, loop_of, st);
      continue;
    }
    int id = key;
    if (!w.from_x[id] || !w.to_y[id]) continue;
    FloeNode *n = g->nodes[id];
    if (!top && is_x(xs, num_xs, n)) continue; /* one iteration: the gradient stops at xs */
    if (n->num_outputs > dy_cap) {
      FloeOutput *v = floe__realloc(dy, (size_t)n->num_outputs * sizeof *v);
      if (!v) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
        break;
      }
      dy = v;
      dy_cap = n->num_outputs;
    }
    bool any = false;
    for (int j = 0; j < n->num_outputs && rc == FLOE_OK; j++) {
      dy[j] = contrib_sum(&w, n, j, st);
      if (!dy[j].node && floe_status_code(st) != FLOE_OK) rc = floe_status_code(st);
      any = any || dy[j].node != NULL;
    }
    if (rc != FLOE_OK || !any) continue;
    rc = backprop_node(&w, n, dy, st);
  }
  floe__free(dy);
  floe__free(order);
  floe__grad_loops_free(loops, num_loops);
  floe__free(loop_of);
  for (int i = 0; i < num_xs && rc == FLOE_OK; i++) {
    if (!w.to_y[xs[i].node->id]) continue;
    dxs[i] = contrib_sum(&w, xs[i].node, xs[i].index, st);
    if (!dxs[i].node && floe_status_code(st) != FLOE_OK) rc = floe_status_code(st);
  }
  walk_free(&w);
  if (rc == FLOE_OK) goto done;
fail:
  for (int i = 0; i < num_xs && dxs; i++) dxs[i] = invalid_output();
  if (floe_graph_status(g) == FLOE_OK)
    floe__graph_fail(g, rc, "%s", floe_status_message(st));
done:
  if (st == &local) floe_status_clear(&local);
  return rc;
}
