/* SPDX-License-Identifier: Apache-2.0 */
/* opt_const.c - constant folding: a node of the run whose data inputs are all constants is
 * computed once, when the run is planned, and its output becomes a Const.
 *
 * Producers first, so a chain of such nodes (a batch norm's scale, rsqrt(var + eps) * gamma,
 * computed from its parameters every step as imported) folds whole. A node folds when it is
 * pure (floe__opt_pure: no state, no randomness, no control flow), has one output of a known
 * shape of at most FOLD_MAX_ELEMENTS elements, has no control inputs (a Const inside a loop
 * frame hangs on the frame's pivot by one: it is not a constant of the run), is neither fed
 * nor fetched nor a target, is not asked to run on a device other than a CPU nor on a named
 * task of a cluster, and every data input is a Const that is not fed and has no control
 * inputs. It is evaluated on the session's runtime in a session of its own (this pass is off
 * inside that session), on the CPU; a node that fails there (an integer division by zero)
 * stays, so the run raises that error as it did. Floats are computed by the same kernels the
 * run would use: results are bitwise those of the unfolded graph. */
#define _GNU_SOURCE /* strcasestr */
#include <string.h>

#include "session.h"

/* Largest output folded (elements): larger constants would cost memory for little. */
#define FOLD_MAX_ELEMENTS ((int64_t)1 << 22)

/* Set while a folding session runs on this thread: the pass does nothing in it. */
static __thread int folding;

static bool is_const(const FloeOpt *o, FloeOutput x) {
  const FloeNode *c = x.node;
  return strcmp(c->op->name, "Const") == 0 && c->num_control == 0 &&
         !(c->id < o->n_orig && o->pinned[c->id]) && floe__attrs_get(&c->attrs, "value");
}

static bool foldable(const FloeOpt *o, const FloeNode *n) {
  if (!o->need[n->id] || n->num_outputs != 1 || n->num_control != 0 || n->num_inputs == 0 ||
      (n->op->flags & FLOE__OP_SOURCE) || !floe__opt_pure(n) || floe__opt_kept(o, n))
    return false;
  /* asked to run on another kind of device (its kernel there may round otherwise), or on a
   * task of a cluster (where it was put on purpose, transfers and all) */
  if (n->device && n->device[0] && (!strcasestr(n->device, "cpu") || strstr(n->device, "/job:")))
    return false;
  if (!floe__shape_at_most(&n->out_shapes[0], FOLD_MAX_ELEMENTS)) return false;
  for (int i = 0; i < n->num_inputs; i++)
    if (!is_const(o, n->inputs[i])) return false;
  return true;
}

bool floe__shape_at_most(const FloeShape *s, int64_t max_elements) {
  if (s->rank < 0) return false;
  int64_t count = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0 || (s->dims[i] && count > max_elements / s->dims[i])) return false;
    count *= s->dims[i];
  }
  return true;
}

FloeTensor *floe__eval_node(FloeRuntime *rt, const FloeNode *n, FloeTensor *const *values) {
  FloeStatus *st = floe_status_new();
  FloeGraph *tg = floe_graph_new();
  FloeOutput *ins = floe__calloc((size_t)n->num_inputs + 1, sizeof *ins);
  int *sizes = floe__calloc((size_t)n->op->num_inputs + 1, sizeof *sizes);
  FloeSession *sess = NULL;
  FloeTensor *value = NULL;
  if (!st || !tg || !ins || !sizes) goto done;
  for (int i = 0; i < n->num_inputs; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "in%d", i);
    ins[i] = floe_const(tg, nm, values[i]);
    sizes[n->input_arg[i]]++; /* inputs per op argument, as n has them */
  }
  FloeNodeSpec spec = {.op = n->op->name, .name = "fold", .inputs = ins,
                       .num_inputs = n->num_inputs, .list_sizes = sizes,
                       .num_lists = n->op->num_inputs, .attrs = &n->attrs};
  if (floe_graph_status(tg) != FLOE_OK || !floe__graph_add_node(tg, &spec, st)) goto done;
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  so.device = "cpu:0";
  const char *fetch = "fold";
  folding++;
  if (!(sess = floe_session_new(tg, &so, st)) ||
      floe_session_run(sess, NULL, 0, &fetch, 1, NULL, 0, &value, st) != FLOE_OK)
    value = NULL;
  folding--;
done:
  floe_session_free(sess);
  floe_graph_free(tg);
  floe__free(ins);
  floe__free(sizes);
  floe_status_free(st);
  return value;
}

/* n's output computed from its constant inputs (a new reference), or NULL. */
static FloeTensor *evaluate(FloeRuntime *rt, const FloeNode *n) {
  FloeTensor **values = floe__calloc((size_t)n->num_inputs + 1, sizeof *values);
  if (!values) return NULL;
  for (int i = 0; i < n->num_inputs; i++)
    values[i] = floe__attrs_get(&n->inputs[i].node->attrs, "value")->u.tensor;
  FloeTensor *v = floe__eval_node(rt, n, values);
  floe__free(values);
  return v;
}

floe_code floe__opt_constant_folding(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  if (folding || !o->rt) return FLOE_OK;
  int n_orig = o->g->num_nodes, num = 0;
  int *order = floe__graph_topo_order(o->g, o->need, &num);
  FloeOutput *fwd = floe__calloc((size_t)(n_orig ? n_orig : 1), sizeof *fwd);
  if (!order || !fwd) {
    floe__free(order);
    floe__free(fwd);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory folding constants");
  }
  floe_code rc = FLOE_OK;
  int folded = 0;
  for (int i = 0; i < num && rc == FLOE_OK; i++) {
    FloeNode *n = o->g->nodes[order[i]];
    if (n->id >= n_orig) continue;
    /* inputs folded before this node: read their Consts */
    for (int k = 0; k < n->num_inputs; k++) {
      FloeOutput x = n->inputs[k];
      if (x.node->id < n_orig && fwd[x.node->id].node && x.index == 0)
        n->inputs[k] = fwd[x.node->id];
    }
    if (!foldable(o, n)) continue;
    FloeTensor *v = evaluate(o->rt, n);
    if (!v) continue;
    FloeNode *c = floe__opt_const(o, n->name, v, n);
    floe_tensor_release(v);
    if (!c) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory folding constants");
      break;
    }
    fwd[n->id] = floe_out(c, 0);
    folded++;
  }
  if (rc == FLOE_OK && folded) rc = floe__opt_apply_forward(o, fwd, n_orig, st);
  if (rc == FLOE_OK && folded) {
    int removed = floe__opt_prune_unused(o);
    if (removed < 0)
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory folding constants");
    else
      ps->removed += removed;
  }
  ps->rewritten += folded;
  floe__free(order);
  floe__free(fwd);
  return rc;
}
