/* SPDX-License-Identifier: Apache-2.0 */
/* opt_elementwise.c - chains of elementwise ops in one pass over memory: a run of f32 ops,
 * each the only reader of the one before, becomes one _FusedElementwise node that reads its
 * input once and writes its output once (DenseNet's batch norm and ReLU before each
 * convolution: Mul, Add, Relu; an activation after a pooling or a concatenation).
 *
 * A step is a unary op (Neg, Abs, Square, Exp, Log, Sqrt, Rsqrt, Relu, Relu6, LeakyRelu, Elu,
 * Sigmoid, Tanh, Softplus) or a binary one (Add, Sub, Mul, Div, Maximum, Minimum) of the chain's
 * value and an operand that broadcasts to the value's shape without growing it (a scalar, a
 * per-channel vector, a tensor of its shape: every dim of the operand 1 or known and equal).
 * The chain's first node reads a value of its output's shape; each later node reads the
 * previous one's output, which nothing else reads. No node of a chain is fed, fetched or a
 * target, or has control inputs but the first (they move to the fused node); all ask for the
 * same device, which must have the fused kernel (the session's check). Runs with loops or
 * conds are left alone. The fused kernel runs each op's own row function, so the values are
 * bitwise the unfused ones. Runs after fusion: what a convolution can take as post-ops is
 * taken there first.
 *
 * A chain whose value comes from a Concat that nothing else reads (DenseNet's batch norm of
 * each layer's concatenated features) takes the Concat in: the fused node reads the Concat's
 * values where they are, in parts (its K inputs first, concat_axis), and the joined tensor
 * is never written; then even a chain of one op is worth fusing. */
#include <string.h>

#include "session.h"

enum { MAX_STEPS = 16, MAX_PARTS = 1024 };

static const char *const unary_ops[] = {"Neg",  "Abs",       "Square", "Exp",     "Log",
                                        "Sqrt", "Rsqrt",     "Relu",   "Relu6",   "LeakyRelu",
                                        "Elu",  "Sigmoid",   "Tanh",   "Softplus"};
static const char *const binary_ops[] = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum"};

static bool in_list(const char *op, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(op, list[i]) == 0) return true;
  return false;
}

/* An operand of shape s broadcasts to y without growing it. */
static bool operand_fits(const FloeShape *s, const FloeShape *y) {
  if (s->rank < 0 || s->rank > y->rank) return false;
  for (int i = 0; i < s->rank; i++) {
    int64_t d = s->dims[i], e = y->dims[y->rank - s->rank + i];
    if (d != 1 && (d < 0 || d != e)) return false;
  }
  return true;
}

static const FloeShape *shape_of(FloeOutput x) { return &x.node->out_shapes[x.index]; }

/* Whether n can be a step whose chain value is input `at` (-1: any input of n's shape, for
 * a chain's first node; the one chosen in *at). */
static bool step(const FloeOpt *o, const FloeNode *n, int *at) {
  if (!o->need[n->id] || floe__opt_kept(o, n) || n->num_outputs != 1 ||
      n->out_dtypes[0] != FLOE_F32 || n->out_shapes[0].rank < 0)
    return false;
  const FloeShape *y = &n->out_shapes[0];
  bool unary = in_list(n->op->name, unary_ops, sizeof unary_ops / sizeof *unary_ops);
  bool binary = in_list(n->op->name, binary_ops, sizeof binary_ops / sizeof *binary_ops);
  if (!(unary && n->num_inputs == 1) && !(binary && n->num_inputs == 2)) return false;
  for (int i = 0; i < n->num_inputs; i++) {
    if ((*at >= 0 && *at != i) || !floe__opt_same_shape(shape_of(n->inputs[i]), y)) continue;
    if (binary && (!operand_fits(shape_of(n->inputs[1 - i]), y) ||
                   n->inputs[1 - i].node == n->inputs[i].node))
      continue;
    *at = i;
    return true;
  }
  return false;
}

/* Per node id: the node reading it when that is its only reader in the run and reads its
 * output 0 through one data edge (input index in at[]), else NULL. Caller frees both. */
static bool sole_readers(const FloeOpt *o, FloeNode ***user, int **at) {
  int *readers = floe__opt_readers(o);
  *user = floe__calloc((size_t)(o->cap ? o->cap : 1), sizeof **user);
  *at = floe__calloc((size_t)(o->cap ? o->cap : 1), sizeof **at);
  if (!readers || !*user || !*at) {
    floe__free(readers);
    return false;
  }
  for (int id = 0; id < o->cap; id++) {
    if (!o->need[id]) continue;
    FloeNode *r = o->g->nodes[id];
    for (int k = 0; k < r->num_inputs; k++) {
      FloeOutput x = r->inputs[k];
      if (readers[x.node->id] == 1 && x.index == 0) {
        (*user)[x.node->id] = r;
        (*at)[x.node->id] = k;
      }
    }
  }
  floe__free(readers);
  return true;
}

static bool same_request(const FloeNode *a, const FloeNode *b) {
  const char *x = a->device ? a->device : "", *y = b->device ? b->device : "";
  return strcmp(x, y) == 0;
}

/* The Concat chain value input `at` of head comes from when the fused node can read its
 * values instead (f32 values of known rank, a constant axis, head its only reader, nothing
 * else asking for it), with the axis (from 0) in *axis; else NULL. */
static FloeNode *concat_in(const FloeOpt *o, const FloeNode *head, int at, FloeNode *const *user,
                           const int *user_at, int n_orig, int64_t *axis) {
  FloeOutput x = head->inputs[at];
  FloeNode *c = x.node;
  if (x.index != 0 || c->id >= n_orig || !o->need[c->id] || strcmp(c->op->name, "Concat") != 0 ||
      user[c->id] != head || user_at[c->id] != at || floe__opt_kept(o, c) || c->num_control ||
      !same_request(c, head) || c->num_inputs < 3 || c->num_inputs - 1 > MAX_PARTS)
    return NULL;
  const FloeShape *y = &c->out_shapes[0];
  int64_t ax;
  double unused;
  FloeOutput a = c->inputs[c->num_inputs - 1];
  if (c->out_dtypes[0] != FLOE_F32 || y->rank < 1 ||
      !(floe__const_scalar(a, FLOE_I32, &unused, &ax) ||
        floe__const_scalar(a, FLOE_I64, &unused, &ax)) ||
      ax < -y->rank || ax >= y->rank)
    return NULL;
  for (int i = 0; i < c->num_inputs - 1; i++) {
    FloeOutput v = c->inputs[i];
    if (v.node->out_dtypes[v.index] != FLOE_F32 || shape_of(v)->rank != y->rank) return NULL;
  }
  *axis = ax < 0 ? ax + y->rank : ax;
  return c;
}

/* The fused node for chain[0..n) (chain value input at[i] of each; from Concat cat's values
 * joined along axis when cat is not NULL), or NULL. */
static FloeNode *fuse_chain(FloeOpt *o, FloeNode *const *chain, const int *at, int n,
                            const FloeNode *cat, int64_t axis) {
  FloeOutput operands[MAX_STEPS];
  double alpha[MAX_STEPS];
  char steps[MAX_STEPS * 24] = "", ops[MAX_STEPS * 16 + 8] = "";
  int m = 0;
  if (cat) snprintf(ops, sizeof ops, "Concat+");
  for (int i = 0; i < n; i++) {
    const FloeNode *s = chain[i];
    size_t l = strlen(steps), lo = strlen(ops);
    if (s->num_inputs == 2) {
      operands[m] = s->inputs[1 - at[i]];
      snprintf(steps + l, sizeof steps - l, "%s%s:%s%d", i ? "," : "", s->op->name,
               at[i] == 1 ? "~" : "", m);
      m++;
    } else {
      snprintf(steps + l, sizeof steps - l, "%s%s", i ? "," : "", s->op->name);
    }
    snprintf(ops + lo, sizeof ops - lo, "%s%s", i ? "+" : "", s->op->name);
    const FloeAttrValue *a = floe__node_attr(s, "alpha", FLOE_ATTR_FLOAT); /* LeakyRelu, Elu */
    alpha[i] = a ? a->u.f : 0.0;
  }
  char *name = NULL;
  for (int i = 0; !name || floe_graph_find(o->g, name); i++) {
    floe__free(name);
    name = i ? floe__asprintf("%s/_fused_elementwise_%d", chain[n - 1]->name, i)
             : floe__asprintf("%s/_fused_elementwise", chain[n - 1]->name);
    if (!name) return NULL;
  }
  FloeNodeBuilder *b = floe_node_begin(o->g, "_FusedElementwise", name);
  floe__free(name);
  if (cat) {
    floe_node_add_input_list(b, cat->inputs, cat->num_inputs - 1);
    floe_node_set_attr_int(b, "concat_axis", axis);
  } else {
    floe_node_add_input(b, chain[0]->inputs[at[0]]);
  }
  floe_node_add_input_list(b, operands, m);
  floe_node_set_attr_type(b, "T", FLOE_F32);
  floe_node_set_attr_string(b, "steps", steps);
  floe_node_set_attr_float_list(b, "alpha", alpha, (size_t)n);
  floe_node_set_attr_string(b, "fused_ops", ops);
  for (int c = 0; c < chain[0]->num_control; c++)
    floe_node_add_control_input(b, chain[0]->control[c]);
  if (chain[0]->device && chain[0]->device[0]) floe_node_set_device(b, chain[0]->device);
  FloeNode *f = floe_node_finish(b);
  if (!f || !floe__opt_grow(o)) return NULL;
  if (o->ok && !o->ok(o->arg, chain[n - 1], f)) return NULL; /* left unused: not in need */
  o->need[f->id] = true;
  return f;
}

floe_code floe__opt_elementwise(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  if (floe__opt_has_control_flow(o)) return FLOE_OK;
  int n_orig = o->g->num_nodes, num = 0;
  int *order = floe__graph_topo_order(o->g, o->need, &num);
  FloeNode **user = NULL;
  int *user_at = NULL;
  bool have_users = sole_readers(o, &user, &user_at);
  FloeOutput *fwd = floe__calloc((size_t)(n_orig ? n_orig : 1), sizeof *fwd);
  floe_code rc = FLOE_OK;
  if (!order || !have_users || !fwd) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory fusing elementwise ops");
    goto done;
  }
  int fused = 0, joined = 0;
  for (int i = 0; i < num; i++) {
    FloeNode *head = o->g->nodes[order[i]];
    int at[MAX_STEPS];
    FloeNode *chain[MAX_STEPS];
    at[0] = -1;
    /* a node fused already is out of the run: step() refuses it */
    if (head->id >= n_orig || !step(o, head, &at[0])) continue;
    chain[0] = head;
    int n = 1;
    for (;;) {
      FloeNode *r = n < MAX_STEPS ? user[chain[n - 1]->id] : NULL;
      int k = r ? user_at[chain[n - 1]->id] : -1;
      if (!r || r->id >= n_orig || r->num_control || !same_request(r, head) ||
          !step(o, r, &k))
        break;
      at[n] = k;
      chain[n++] = r;
    }
    int64_t axis = 0;
    FloeNode *cat = concat_in(o, head, at[0], user, user_at, n_orig, &axis);
    if (n < 2 && !cat) continue;
    FloeNode *f = fuse_chain(o, chain, at, n, cat, axis);
    if (!f) {
      if (floe_graph_status(o->g) != FLOE_OK) {
        rc = floe_graph_status(o->g);
        floe_status_set(st, rc, "%s", floe_graph_error(o->g, NULL));
        goto done;
      }
      continue;
    }
    for (int k = 0; k < n; k++) o->need[chain[k]->id] = false;
    if (cat) o->need[cat->id] = false;
    fwd[chain[n - 1]->id] = floe_out(f, 0);
    ps->rewritten++;
    ps->removed += n + (cat != NULL);
    fused++;
    joined += cat != NULL;
  }
  if (fused) rc = floe__opt_apply_forward(o, fwd, n_orig, st);
  /* the Concats' axes */
  if (rc == FLOE_OK && joined && floe__opt_prune_unused(o) < 0)
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory fusing elementwise ops");
done:
  floe__free(order);
  floe__free(user);
  floe__free(user_at);
  floe__free(fwd);
  return rc;
}
