/* SPDX-License-Identifier: Apache-2.0 */
/* opt_dead.c - the optimiser's dead-node removal (optimize.c): a node of the run whose
 * outputs no node of the run reads is there only because a control edge names it (a
 * target's, or another node's "after this"). If it is pure (no side effects: not stateful,
 * not control flow, not a transfer) running it changes nothing but the time, so it goes and
 * each control edge on it becomes control edges on its own inputs (data and control): the
 * order it imposed is kept. Repeated until nothing changes, so a NoOp that waits for 10,000
 * additions of a fed value and constants ends up waiting for the fed value alone. Only ops
 * that cannot fail go: constants and elementwise arithmetic whose shapes are all known (the
 * graph checked they fit): an op that could fail on its values (a Gather's index out of
 * range, a division of integers by zero) would fail the step through its control edge, and
 * still does. Runs with loops or conds are left alone (an edge into a frame means more than
 * an order). */
#include <string.h>

#include "session.h"

/* Per node id: the run's nodes with a control edge on it. */
typedef struct Users {
  FloeNode **v;
  int n, cap;
} Users;

static bool users_add(Users *u, FloeNode *x) {
  for (int i = 0; i < u->n; i++)
    if (u->v[i] == x) return true;
  if (u->n == u->cap) {
    int cap = u->cap ? 2 * u->cap : 4;
    FloeNode **v = floe__realloc(u->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    u->v = v;
    u->cap = cap;
  }
  u->v[u->n++] = x;
  return true;
}

static void users_drop(Users *u, const FloeNode *x) {
  for (int i = 0; i < u->n; i++)
    if (u->v[i] == x) {
      u->v[i] = u->v[--u->n];
      return;
    }
}

static bool known(const FloeShape *s) {
  if (s->rank < 0) return false;
  for (int d = 0; d < s->rank; d++)
    if (s->dims[d] < 0) return false;
  return true;
}

/* n cannot fail when it runs: a constant, or elementwise arithmetic of known shapes. */
static bool cannot_fail(const FloeNode *n) {
  static const char *const safe[] = {
      "Const", "Identity", "Add",  "Sub",  "Mul",     "Maximum", "Minimum", "Neg",  "Abs",
      "Square", "Exp",     "Sqrt", "Rsqrt", "Relu",   "Relu6",   "Sigmoid", "Tanh", "Softplus",
      "Sign",  "Floor",    "Cast", "ZerosLike", "OnesLike", "StopGradient"};
  bool listed = false;
  for (size_t i = 0; i < sizeof safe / sizeof *safe && !listed; i++)
    listed = strcmp(n->op->name, safe[i]) == 0;
  if (!listed) return false;
  for (int k = 0; k < n->num_inputs; k++)
    if (!known(&n->inputs[k].node->out_shapes[n->inputs[k].index])) return false;
  for (int k = 0; k < n->num_outputs; k++)
    if (!known(&n->out_shapes[k])) return false;
  return true;
}

floe_code floe__opt_dead_nodes(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  if (floe__opt_has_control_flow(o)) return FLOE_OK;
  int n0 = o->cap;
  int *reads = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *reads); /* data reads */
  Users *users = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *users);
  int *stack = floe__malloc((size_t)(n0 ? n0 : 1) * sizeof *stack);
  bool *queued = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *queued);
  bool ok = reads && users && stack && queued;
  for (int id = 0; ok && id < n0; id++) {
    if (!o->need[id]) continue;
    FloeNode *x = o->g->nodes[id];
    for (int k = 0; k < x->num_inputs; k++) reads[x->inputs[k].node->id]++;
    for (int c = 0; c < x->num_control && ok; c++) ok = users_add(&users[x->control[c]->id], x);
  }
  int top = 0;
#define PUSH(d)                                                                              \
  do {                                                                                       \
    if (!queued[d]) {                                                                        \
      queued[d] = true;                                                                      \
      stack[top++] = (d);                                                                    \
    }                                                                                        \
  } while (0)
  for (int id = 0; ok && id < n0; id++)
    if (o->need[id] && reads[id] == 0) PUSH(id);
  while (ok && top > 0) {
    FloeNode *n = o->g->nodes[stack[--top]];
    queued[n->id] = false;
    if (!o->need[n->id] || reads[n->id] != 0 || floe__opt_kept(o, n) || !floe__opt_pure(n) ||
        !cannot_fail(n))
      continue;
    /* every control edge on n moves to n's inputs */
    for (int u = 0; ok && u < users[n->id].n; u++) {
      FloeNode *x = users[n->id].v[u];
      if (!o->need[x->id]) continue;
      for (int c = 0; c < x->num_control; c++)
        if (x->control[c] == n) {
          memmove(x->control + c, x->control + c + 1,
                  (size_t)(x->num_control - c - 1) * sizeof *x->control);
          x->num_control--;
          break;
        }
      for (int k = 0; ok && k < n->num_inputs; k++) {
        FloeNode *d = n->inputs[k].node;
        ok = floe__opt_add_control(x, d) && (d == x || users_add(&users[d->id], x));
      }
      for (int c = 0; ok && c < n->num_control; c++) {
        FloeNode *d = n->control[c];
        ok = floe__opt_add_control(x, d) && (d == x || users_add(&users[d->id], x));
      }
    }
    if (!ok) break;
    o->need[n->id] = false;
    ps->removed++;
    ps->rewritten++;
    for (int k = 0; k < n->num_inputs; k++) {
      int d = n->inputs[k].node->id;
      if (--reads[d] == 0) PUSH(d);
    }
    for (int c = 0; c < n->num_control; c++) {
      users_drop(&users[n->control[c]->id], n);
      int d = n->control[c]->id;
      if (reads[d] == 0) PUSH(d);
    }
  }
#undef PUSH
  for (int id = 0; users && id < n0; id++) floe__free(users[id].v);
  floe__free(users);
  floe__free(reads);
  floe__free(stack);
  floe__free(queued);
  if (!ok) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory removing dead nodes");
  return FLOE_OK;
}
