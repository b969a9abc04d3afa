/* SPDX-License-Identifier: Apache-2.0 */
/* grad_control.c - gradients through conds and while loops.
 *
 * Conds: the gradient of a Merge goes back through a Switch on "this input was the live
 * one" (its value_index), so only the branch taken gets a gradient; the gradient of a
 * Switch merges the gradients of its two outputs (one of them dead).
 *
 * While loops (built by floe_while_loop) are differentiated as a whole, as in TensorFlow:
 *  - the forward loop gets an iteration counter, and every forward value the backward pass
 *    needs is written, in the iteration that made it, into a TensorArray at that
 *    iteration's index (so parallel iterations may write in any order);
 *  - a backward while loop runs the forward trip count N in reverse: its iteration k
 *    reads the values of forward iteration N-1-k and applies the gradients of one forward
 *    iteration (floe_gradients of the body's next values with respect to its inputs,
 *    without following the back edges), carrying the loop variables' gradients and summing
 *    those of the loop invariants (weights read in the body);
 *  - the counter's last value (N) waits for every write, so the backward loop, which needs
 *    N, starts only once the forward values are all saved.
 * A loop inside a loop body is not differentiated (an error says so).
 */
#include <stdio.h>
#include <string.h>

#include "train.h"

/* ---- conds ---- */

/* Merge(inputs) -> (output, value_index): input i gets dy where value_index == i. */
static floe_code grad_merge(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  FloeOutput dy = floe__grad_dy(c, 0);
  FloeOutput index = floe_out((FloeNode *)c->node, 1);
  for (int i = 0; i < c->node->num_inputs; i++) {
    if (!c->need_dx[i]) continue;
    FloeTensor *t = floe_tensor_scalar_i32(i, NULL);
    if (!t) {
      floe__graph_fail(c->g, FLOE_NO_MEMORY, "out of memory differentiating '%s'", c->node->name);
      return FLOE_NO_MEMORY;
    }
    FloeNodeBuilder *b = floe__grad_begin(c, "Const");
    floe_node_set_attr_tensor(b, "value", t);
    floe_node_set_attr_type(b, "dtype", FLOE_I32);
    floe_tensor_release(t);
    FloeOutput ic = floe_out(floe_node_finish(b), 0);
    FloeOutput live = floe__grad_binary(c, "Equal", index, ic);
    b = floe__grad_begin(c, "Switch");
    floe_node_add_input(b, dy);
    floe_node_add_input(b, live);
    c->dx[i] = floe_out(floe_node_finish(b), 1);
  }
  return FLOE_OK;
}

/* Switch(data, pred) -> (false, true): data gets whichever output's gradient is live. An
 * output no gradient reaches contributes zeros, made from a Switch on the forward data and
 * predicate again, so they are live exactly when that output was (TF's _SwitchGrad). */
static floe_code grad_switch(FloeGradCtx *c, FloeStatus *st) {
  (void)st;
  if (!c->need_dx[0]) return FLOE_OK;
  FloeOutput g[2];
  for (int j = 0; j < 2; j++) {
    g[j] = c->dy[j];
    if (g[j].node) continue;
    FloeNodeBuilder *b = floe__grad_begin(c, "Switch");
    floe_node_add_input(b, c->node->inputs[0]);
    floe_node_add_input(b, c->node->inputs[1]);
    FloeOutput again = floe_out(floe_node_finish(b), j);
    g[j] = floe__grad_unary(c, "ZerosLike", again);
  }
  FloeNodeBuilder *b = floe__grad_begin(c, "Merge");
  floe_node_add_input_list(b, g, 2);
  c->dx[0] = floe_out(floe_node_finish(b), 0);
  return FLOE_OK;
}

/* Enter, Exit and NextIteration are differentiated with their whole loop (floe__grad_while);
 * reaching one alone means a loop floe_gradients cannot treat as a unit. */
static floe_code grad_loop_part(FloeGradCtx *c, FloeStatus *st) {
  const FloeAttrValue *f = floe__attrs_get(&c->node->attrs, "frame_name");
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s)%s%s%s belongs to a while loop that "
                         "cannot be differentiated as a whole here (a loop nested in the body "
                         "of another, or one not built by floe_while_loop)",
                         c->node->name, c->node->op->name, f ? " of loop '" : "",
                         f && f->kind == FLOE_ATTR_STRING ? f->u.s : "", f ? "'" : "");
}

floe_code floe__grads_register_control(FloeStatus *st) {
  floe_code rc = floe__grad_register("Merge", grad_merge, st);
  if (rc == FLOE_OK) rc = floe__grad_register("Enter", grad_loop_part, st);
  if (rc == FLOE_OK) rc = floe__grad_register("Exit", grad_loop_part, st);
  if (rc == FLOE_OK) rc = floe__grad_register("NextIteration", grad_loop_part, st);
  if (rc == FLOE_OK) rc = floe__grad_register("Switch", grad_switch, st);
  if (rc == FLOE_OK) rc = floe__grad_register("LoopCond", NULL, st);
  if (rc == FLOE_OK) rc = floe__grad_register("ControlTrigger", NULL, st);
  /* Collectives stop the gradient: data-parallel training all-reduces gradients, it does not
   * differentiate through an all-reduce (whose gradient would be collectives of its own, with
   * instance keys every rank must agree on). */
  static const char *const collectives[] = {"CollectiveReduce", "CollectiveGather",
                                            "CollectiveReduceScatter", "CollectiveBcastSend",
                                            "CollectiveBcastRecv"};
  for (size_t i = 0; rc == FLOE_OK && i < sizeof collectives / sizeof *collectives; i++)
    rc = floe__grad_register(collectives[i], NULL, st);
  return rc;
}

/* ---- finding loops ---- */

static const char *frame_of(const FloeNode *enter) {
  const FloeAttrValue *v = floe__attrs_get(&enter->attrs, "frame_name");
  return v && v->kind == FLOE_ATTR_STRING && v->u.s ? v->u.s : "";
}

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

static bool is_const_enter(const FloeNode *n) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "is_constant");
  return v && v->kind == FLOE_ATTR_BOOL && v->u.b;
}

/* The Enter that starts loop variable `exit` (Exit <- Switch <- Merge <- Enter), or NULL. */
static const FloeNode *enter_of_exit(const FloeNode *exit) {
  const FloeNode *sw = exit->inputs[0].node;
  if (!is_op(sw, "Switch")) return NULL;
  const FloeNode *m = sw->inputs[0].node;
  if (!is_op(m, "Merge") || m->num_inputs < 1) return NULL;
  const FloeNode *e = m->inputs[0].node;
  return is_op(e, "Enter") ? e : NULL;
}

typedef struct Consumers {
  int *off, *node; /* CSR over node ids: data and control consumers */
} Consumers;

static void consumers_free(Consumers *c) {
  floe__free(c->off);
  floe__free(c->node);
}

static floe_code consumers_build(const FloeGraph *g, int n, Consumers *c, FloeStatus *st) {
  c->off = floe__calloc((size_t)n + 1, sizeof(int));
  if (!c->off) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  for (int id = 0; id < n; id++) {
    const FloeNode *nd = g->nodes[id];
    for (int j = 0; j < nd->num_inputs; j++)
      if (nd->inputs[j].node->id < n) c->off[nd->inputs[j].node->id + 1]++;
    for (int j = 0; j < nd->num_control; j++)
      if (nd->control[j]->id < n) c->off[nd->control[j]->id + 1]++;
  }
  for (int id = 0; id < n; id++) c->off[id + 1] += c->off[id];
  c->node = floe__malloc((size_t)(c->off[n] + 1) * sizeof(int));
  int *fill = floe__calloc((size_t)n + 1, sizeof(int));
  if (!c->node || !fill) {
    floe__free(fill);
    consumers_free(c);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  }
  for (int id = 0; id < n; id++) {
    const FloeNode *nd = g->nodes[id];
    for (int j = 0; j < nd->num_inputs; j++) {
      int p = nd->inputs[j].node->id;
      if (p < n) c->node[c->off[p] + fill[p]++] = id;
    }
    for (int j = 0; j < nd->num_control; j++) {
      int p = nd->control[j]->id;
      if (p < n) c->node[c->off[p] + fill[p]++] = id;
    }
  }
  floe__free(fill);
  return FLOE_OK;
}

void floe__grad_loops_free(FloeGradLoop *loops, int n) {
  for (int i = 0; loops && i < n; i++) {
    floe__free(loops[i].vars);
    floe__free(loops[i].inv);
  }
  floe__free(loops);
}

static floe_code add_var(FloeGradLoop *L, const FloeNode *exit, FloeStatus *st) {
  const FloeNode *sw = exit->inputs[0].node, *m = sw->inputs[0].node, *e = m->inputs[0].node;
  FloeGradLoopVar v = {(FloeNode *)e, (FloeNode *)m, (FloeNode *)sw, (FloeNode *)exit, NULL};
  for (int i = 0; i < L->num_vars; i++)
    if (L->vars[i].exit == exit) return FLOE_OK;
  FloeGradLoopVar *a = floe__realloc(L->vars, (size_t)(L->num_vars + 1) * sizeof *a);
  if (!a) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  L->vars = a;
  L->vars[L->num_vars++] = v;
  return FLOE_OK;
}

/* Walks loop L from its Enters, marking loop_of for every node inside (nested loops
 * included) and collecting its Exits, invariants and whether it nests a loop. */
static floe_code walk_loop(const FloeGraph *g, int n, const Consumers *cons, int li,
                           FloeGradLoop *L, int *loop_of, FloeStatus *st) {
  int *stack = floe__malloc((size_t)n * sizeof *stack);
  if (!stack) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
  int top = 0;
  for (int id = 0; id < n; id++) {
    const FloeNode *nd = g->nodes[id];
    if (is_op(nd, "Enter") && strcmp(frame_of(nd), L->name) == 0 && loop_of[id] < 0) {
      loop_of[id] = li;
      stack[top++] = id;
    }
  }
  floe_code rc = FLOE_OK;
  while (top > 0 && rc == FLOE_OK) {
    int p = stack[--top];
    const FloeNode *pn = g->nodes[p];
    if (is_op(pn, "Enter")) {
      if (strcmp(frame_of(pn), L->name) != 0) {
        L->nested = true;
      } else if (is_const_enter(pn)) {
        FloeNode **a = floe__realloc(L->inv, (size_t)(L->num_inv + 1) * sizeof *a);
        if (!a) {
          rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
          break;
        }
        L->inv = a;
        L->inv[L->num_inv++] = (FloeNode *)pn;
      }
    }
    if (is_op(pn, "Exit")) {
      const FloeNode *e = enter_of_exit(pn);
      if (e && strcmp(frame_of(e), L->name) == 0) {
        if (p > L->last_exit_id) L->last_exit_id = p;
        rc = add_var(L, pn, st);
        continue; /* its consumers are outside */
      }
    }
    for (int c = cons->off[p]; c < cons->off[p + 1]; c++) {
      int m = cons->node[c];
      if (loop_of[m] >= 0) continue;
      loop_of[m] = li;
      stack[top++] = m;
    }
  }
  floe__free(stack);
  return rc;
}

floe_code floe__grad_find_loops(const FloeGraph *g, int n, int *loop_of, FloeGradLoop **out,
                                int *num, FloeStatus *st) {
  *out = NULL;
  *num = 0;
  for (int id = 0; id < n; id++) loop_of[id] = -1;
  Consumers cons = {NULL, NULL};
  floe_code rc = FLOE_OK;
  bool any = false;
  for (int id = 0; id < n && !any; id++) any = is_op(g->nodes[id], "Enter");
  if (!any) return FLOE_OK;
  if ((rc = consumers_build(g, n, &cons, st)) != FLOE_OK) return rc;
  /* A top-level loop's Enters take their input from outside every loop: loops are found in
   * id order, and an Enter reached by an earlier loop's walk is nested in it. */
  for (int id = 0; id < n && rc == FLOE_OK; id++) {
    const FloeNode *nd = g->nodes[id];
    if (!is_op(nd, "Enter") || loop_of[id] >= 0) continue;
    FloeGradLoop *a = floe__realloc(*out, (size_t)(*num + 1) * sizeof *a);
    if (!a) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in floe_gradients");
      break;
    }
    *out = a;
    FloeGradLoop *L = &a[*num];
    memset(L, 0, sizeof *L);
    L->name = frame_of(nd);
    L->last_exit_id = -1;
    rc = walk_loop(g, n, &cons, *num, L, loop_of, st);
    (*num)++;
    for (int i = 0; i < L->num_vars && rc == FLOE_OK; i++) {
      FloeGradLoopVar *v = &L->vars[i];
      const FloeNode *m = v->merge;
      if (m->num_inputs != 2 || !is_op(m->inputs[1].node, "NextIteration"))
        rc = floe_status_set(st, FLOE_UNIMPLEMENTED,
                             "floe_gradients: while loop '%s' was not built by floe_while_loop "
                             "(its Merge '%s' has no NextIteration back edge)",
                             L->name, m->name);
      for (int c = cons.off[v->sw->id]; c < cons.off[v->sw->id + 1] && rc == FLOE_OK; c++) {
        FloeNode *u = g->nodes[cons.node[c]];
        if (is_op(u, "Identity") && u->inputs[0].node == v->sw && u->inputs[0].index == 1)
          v->body = u;
      }
      if (rc == FLOE_OK && !v->body)
        rc = floe_status_set(st, FLOE_UNIMPLEMENTED,
                             "floe_gradients: while loop '%s' was not built by floe_while_loop "
                             "(Switch '%s' has no body Identity)",
                             L->name, v->sw->name);
    }
  }
  consumers_free(&cons);
  return rc;
}

/* ---- the gradient of one loop ---- */

typedef struct Saved {
  FloeOutput fwd;     /* the forward value */
  FloeOutput handle;  /* its TensorArray (outside both loops) */
  FloeNode *write;    /* the forward write */
} Saved;

/* An invariant whose per-iteration gradient is a^T g (a MatMul with transpose_a, as a
 * weight's in x W): the backward loop writes a and g into two TensorArrays at the forward
 * iteration's index, and one product over every iteration's rows after the loop replaces
 * a product and an accumulation per iteration (sum_t a_t^T g_t = [a_0; a_1; ...]^T [g_0;
 * g_1; ...]). A weight of an RNN gets one [I, T*B] x [T*B, N] product, where the K = B
 * products and the [I, N] additions per step cost several times more. */
typedef struct Hoisted {
  FloeOutput ta[2]; /* the TensorArrays of a and g (outside both loops); NULL: not hoisted */
  FloeDType dtype;
} Hoisted;

typedef struct GradLoopBuild {
  FloeGraph *g;
  const FloeGradLoop *L;
  const int *loop_of;
  int li;
  int num_walked;          /* loop_of covers node ids below this */
  FloeOutput n_iters;      /* the forward trip count N (outside) */
  FloeNode *counter_body;  /* the forward counter inside the body (the write index) */
  FloeNode *counter_next;  /* the counter's increment: waits for every write */
  FloeNode *writes_done;   /* ControlTrigger between the writes and counter_next (lazy) */
  FloeOutput zero_flow;    /* f32 0, outside */
  int *fvar;               /* float loop variables (indices into L->vars) */
  int num_fvar;
  int *finv;               /* invariants whose gradient is wanted */
  int num_finv;
  Saved *saved;
  int num_saved, cap_saved;
  FloeNode **fwd_extra;    /* forward-side nodes made for the gradient (shape_forward) */
  int num_fwd_extra, cap_fwd_extra;
  const char *bwd_frame;   /* the backward loop's name (its frame) */
  int bwd_first;           /* nodes below this id were made before the backward loop */
  bool can_hoist;          /* the forward body has no cond: every iteration runs it all */
  Hoisted *hoisted;        /* per entry of finv: its product made after the loop, if any */
  FloeStatus *st;
} GradLoopBuild;

/* Nodes "<name>/<leaf>" made unique (name NULL: leaf itself). */
static FloeBuildScope loop_scope(FloeGraph *g, const char *name) {
  return (FloeBuildScope){.g = g, .name = name, .unique = true,
                          .fail = floe__build_fail_message,
                          .arg = "out of memory building a loop gradient"};
}

/* A scalar Const (dt: i32 or f32) called name. */
static FloeOutput scalar_const(FloeGraph *g, const char *name, FloeDType dt, double v) {
  const FloeBuildScope s = loop_scope(g, NULL);
  return floe__build_scalar(&s, name, dt, v);
}

static FloeNode *enter_in(FloeGraph *g, const char *name, FloeOutput v, const char *frame,
                          bool constant) {
  FloeNodeBuilder *b = floe_node_begin(g, "Enter", name);
  floe_node_add_input(b, v);
  floe_node_set_attr_string(b, "frame_name", frame);
  floe_node_set_attr_bool(b, "is_constant", constant);
  return floe_node_finish(b);
}

/* Adds an iteration counter to the forward loop: N (its Exit) and its value in the body. */
static floe_code add_counter(GradLoopBuild *B) {
  FloeGraph *g = B->g;
  const FloeGradLoop *L = B->L;
  char nm[256], scope[200];
  snprintf(scope, sizeof scope, "%s/grad_counter", L->name);
  FloeNode *lc = L->vars[0].sw->inputs[1].node;
  const FloeBuildScope cs = loop_scope(g, scope); /* scope is short: no name is cut */
  FloeOutput zero = floe__build_scalar(&cs, "zero", FLOE_I32, 0);
  FloeOutput one = floe__build_scalar(&cs, "one", FLOE_I32, 1);
  if (!zero.node || !one.node) return floe_graph_status(g);
  FloeNode *e =
      enter_in(g, floe__build_name_in(g, nm, sizeof nm, scope, "enter"), zero, L->name, false);
  FloeNode *e1 =
      enter_in(g, floe__build_name_in(g, nm, sizeof nm, scope, "one_in"), one, L->name, true);
  if (!e || !e1) return floe_graph_status(g);
  FloeOutput pair[2] = {floe_out(e, 0), floe_out(e, 0)};
  FloeNodeBuilder *b = floe__build_begin(&cs, "Merge", "merge");
  floe_node_add_input_list(b, pair, 2);
  FloeNode *m = floe_node_finish(b);
  if (!m) return floe_graph_status(g);
  FloeNode *sw = floe__build_binary(&cs, "Switch", "switch", floe_out(m, 0), floe_out(lc, 0)).node;
  if (!sw) return floe_graph_status(g);
  FloeNode *ex = floe__build_unary(&cs, "Exit", "n", floe_out(sw, 0)).node;
  FloeNode *id = floe__build_unary(&cs, "Identity", "index", floe_out(sw, 1)).node;
  if (!ex || !id) return floe_graph_status(g);
  FloeNode *add =
      floe__build_binary(&cs, "Add", "next_value", floe_out(id, 0), floe_out(e1, 0)).node;
  if (!add) return floe_graph_status(g);
  FloeNode *ni = floe__build_unary(&cs, "NextIteration", "next", floe_out(add, 0)).node;
  if (!ni) return floe_graph_status(g);
  if (floe__node_set_input(m, 1, floe_out(ni, 0), B->st) != FLOE_OK) return B->st->code;
  B->n_iters = floe_out(ex, 0);
  B->counter_body = id;
  B->counter_next = add;
  B->zero_flow = floe__build_scalar(&cs, "flow", FLOE_F32, 0);
  return floe_graph_status(g);
}

/* A growing TensorArray, node "<scope>/<what>", of dtype and element shape (size 0,
 * dynamic), named ta_name in its errors (NULL: the node's name); *size gets its size
 * constant. NULL with the graph's error set on failure. */
static FloeNode *growing_ta(FloeGraph *g, const char *scope, const char *what, FloeDType dtype,
                            FloeShape shape, bool clear_after_read, const char *ta_name,
                            FloeNode **size) {
  char nm[512];
  FloeOutput sz =
      scalar_const(g, floe__build_name_in(g, nm, sizeof nm, scope, "size"), FLOE_I32, 0);
  *size = sz.node;
  FloeNodeBuilder *b =
      floe_node_begin(g, "TensorArrayV3", floe__build_name_in(g, nm, sizeof nm, scope, what));
  floe_node_add_input(b, sz);
  floe_node_set_attr_type(b, "dtype", dtype);
  floe_node_set_attr_shape(b, "element_shape", shape);
  floe_node_set_attr_bool(b, "dynamic_size", true);
  floe_node_set_attr_bool(b, "clear_after_read", clear_after_read);
  floe_node_set_attr_string(b, "tensor_array_name", ta_name ? ta_name : nm);
  return floe_node_finish(b);
}

/* TensorArrayWriteV3(handle, index, value, flow) named "<scope>/write". */
static FloeNode *ta_write(FloeGraph *g, const char *scope, FloeOutput handle, FloeOutput index,
                          FloeOutput value, FloeOutput flow) {
  char nm[512];
  FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayWriteV3",
                                       floe__build_name_in(g, nm, sizeof nm, scope, "write"));
  floe_node_add_input(b, handle);
  floe_node_add_input(b, index);
  floe_node_add_input(b, value);
  floe_node_add_input(b, flow);
  return floe_node_finish(b);
}

/* Marks nodes made while a loop body is built as outside it (floe__cf_exclude). */
static floe_code exclude_all(FloeGraph *g, FloeNode *const *made, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (floe__cf_exclude(made[i]) != FLOE_OK) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
      return FLOE_NO_MEMORY;
    }
  return FLOE_OK;
}

/* The TensorArray holding forward value x per iteration (written in the forward body). */
static Saved *saved_for(GradLoopBuild *B, FloeOutput x) {
  for (int i = 0; i < B->num_saved; i++)
    if (B->saved[i].fwd.node == x.node && B->saved[i].fwd.index == x.index) return &B->saved[i];
  if (B->num_saved == B->cap_saved) {
    int cap = B->cap_saved ? 2 * B->cap_saved : 8;
    Saved *a = floe__realloc(B->saved, (size_t)cap * sizeof *a);
    if (!a) {
      floe__graph_fail(B->g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
      return NULL;
    }
    B->saved = a;
    B->cap_saved = cap;
  }
  FloeGraph *g = B->g;
  const char *frame = B->L->name;
  char nm[512], scope[300];
  snprintf(scope, sizeof scope, "%s/saved/%s_%d", frame, x.node->name, x.index);
  FloeNode *size;
  /* clear_after_read false: several gradient nodes may read one element. */
  FloeNode *ta = growing_ta(g, scope, "ta", x.node->out_dtypes[x.index],
                            x.node->out_shapes[x.index], false, scope, &size);
  if (!ta) return NULL;
  FloeNode *h_in = enter_in(g, floe__build_name_in(g, nm, sizeof nm, scope, "handle_in"),
                            floe_out(ta, 0), frame, true);
  FloeNode *f_in = enter_in(g, floe__build_name_in(g, nm, sizeof nm, scope, "flow_in"),
                            B->zero_flow, frame, true);
  if (!h_in || !f_in) return NULL;
  FloeNode *w = ta_write(g, scope, floe_out(h_in, 0), floe_out(B->counter_body, 0), x,
                         floe_out(f_in, 0));
  if (!w) return NULL;
  /* N waits for every write: the backward loop starts once all are saved. A value dead in
   * an iteration (a branch not taken) is not written then, and its dead write must not
   * stop the counter: writes reach it through a ControlTrigger. */
  if (!B->writes_done) {
    FloeNodeBuilder *b =
        floe_node_begin(g, "ControlTrigger", floe__build_name_in(g, nm, sizeof nm, frame, "saved"));
    floe_node_add_control_input(b, w);
    B->writes_done = floe_node_finish(b);
    if (!B->writes_done || floe__cf_exclude(B->writes_done) != FLOE_OK) return NULL;
    if (floe__node_add_control(B->counter_next, B->writes_done, B->st) != FLOE_OK) {
      floe__graph_fail(g, B->st->code, "%s", floe_status_message(B->st));
      return NULL;
    }
  } else if (floe__node_add_control(B->writes_done, w, B->st) != FLOE_OK) {
    floe__graph_fail(g, B->st->code, "%s", floe_status_message(B->st));
    return NULL;
  }
  /* Made while the backward body is being built, but they belong to the forward side:
   * the backward loop's builder must leave them alone. */
  FloeNode *made[] = {size, ta, h_in, f_in, w};
  if (exclude_all(g, made, FLOE__ARRAY_LEN(made)) != FLOE_OK) return NULL;
  Saved *s = &B->saved[B->num_saved++];
  s->fwd = x;
  s->handle = floe_out(ta, 0);
  s->write = w;
  return s;
}

/* Points every input of the nodes [start, end) that is a forward value of the loop at its
 * saved copy for backward index idx (or, for an invariant, at the value outside). */
static bool is_forward(const GradLoopBuild *B, const FloeNode *n) {
  if (n->id < B->num_walked) return B->loop_of[n->id] == B->li;
  for (int i = 0; i < B->num_fwd_extra; i++)
    if (B->fwd_extra[i] == n) return true;
  return false;
}

static floe_code substitute(GradLoopBuild *B, int start, int end, FloeOutput idx);

/* Shape, Size, Rank of a forward value: computed in the forward loop, so only the small
 * result is saved, not the tensor (a Slice's or Concat's gradient needs only shapes). n's
 * consumers among [n+1, end) take the forward copy instead (saved and read back by the
 * caller's substitution); n is left unused. */
static floe_code shape_forward(GradLoopBuild *B, FloeNode *n, int end) {
  FloeGraph *g = B->g;
  char nm[256];
  FloeNodeBuilder *b =
      floe_node_begin(g, n->op->name, floe__build_name_in(g, nm, sizeof nm, n->name, "forward"));
  floe_node_add_input(b, n->inputs[0]);
  floe__node_copy_attr(n, b, "out_type");
  FloeNode *f = floe_node_finish(b);
  if (!f || floe__cf_exclude(f) != FLOE_OK) return floe_graph_status(g) ? floe_graph_status(g) : FLOE_NO_MEMORY;
  /* f counts as forward for the substitution below: its result is saved per iteration. */
  if (B->num_fwd_extra == B->cap_fwd_extra) {
    int cap = B->cap_fwd_extra ? 2 * B->cap_fwd_extra : 8;
    FloeNode **v = floe__realloc(B->fwd_extra, (size_t)cap * sizeof *v);
    if (!v) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
      return FLOE_NO_MEMORY;
    }
    B->fwd_extra = v;
    B->cap_fwd_extra = cap;
  }
  B->fwd_extra[B->num_fwd_extra++] = f;
  FloeOutput fo = floe_out(f, 0);
  for (int id = n->id + 1; id < end; id++) {
    FloeNode *u = g->nodes[id];
    for (int j = 0; j < u->num_inputs; j++)
      if (u->inputs[j].node == n && floe__node_set_input(u, j, fo, B->st) != FLOE_OK) {
        floe__graph_fail(g, B->st->code, "%s", floe_status_message(B->st));
        return B->st->code;
      }
  }
  /* n has no consumer left: the builder's scans leave it out, and nothing runs it. */
  if (floe__cf_exclude(n) != FLOE_OK) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
    return FLOE_NO_MEMORY;
  }
  return FLOE_OK;
}

static floe_code substitute(GradLoopBuild *B, int start, int end, FloeOutput idx) {
  FloeGraph *g = B->g;
  for (int id = start; id < end; id++) {
    FloeNode *n = g->nodes[id];
    if ((is_op(n, "Shape") || is_op(n, "Size") || is_op(n, "Rank")) && n->num_inputs == 1 &&
        is_forward(B, n->inputs[0].node)) {
      floe_code rc = shape_forward(B, n, end);
      if (rc != FLOE_OK) return rc;
      continue;
    }
    /* A read runs only when the node needing it does: gated by one of its backward inputs
     * (dead when the branch it differentiates was not taken in that iteration). */
    FloeOutput gate_in = {NULL, 0};
    for (int j = 0; j < n->num_inputs && !gate_in.node; j++) {
      FloeOutput in = n->inputs[j];
      if (!is_forward(B, in.node) && in.node->out_dtypes[in.index] != FLOE_RESOURCE) gate_in = in;
    }
    FloeNode *gate = NULL; /* an Identity of that input: dead exactly when the value is (a
                              control edge from a Switch would carry the node, not the port) */
    for (int j = 0; j < n->num_inputs; j++) {
      FloeOutput in = n->inputs[j];
      if (!is_forward(B, in.node)) continue;
      FloeOutput repl;
      if (is_op(in.node, "Enter") && is_const_enter(in.node)) {
        repl = in.node->inputs[0];
      } else {
        Saved *s = saved_for(B, in);
        if (!s) return floe_graph_status(g) ? floe_graph_status(g) : FLOE_NO_MEMORY;
        char nm[256];
        if (gate_in.node && !gate) {
          floe__build_name_in(g, nm, sizeof nm, s->write->name, "gate");
          gate = floe_unary(g, "Identity", nm, gate_in).node;
          if (!gate) return floe_graph_status(g);
        }
        FloeNodeBuilder *b = floe_node_begin(
            g, "TensorArrayReadV3", floe__build_name_in(g, nm, sizeof nm, s->write->name, "read"));
        floe_node_add_input(b, s->handle);
        floe_node_add_input(b, idx);
        floe_node_add_input(b, B->zero_flow);
        floe_node_set_attr_type(b, "dtype", in.node->out_dtypes[in.index]);
        if (gate) floe_node_add_control_input(b, gate);
        FloeNode *r = floe_node_finish(b);
        if (!r) return floe_graph_status(g);
        /* The read is made after the write; keep its shape for later shape checks. */
        r->out_shapes[0] = in.node->out_shapes[in.index];
        repl = floe_out(r, 0);
      }
      if (floe__node_set_input(n, j, repl, B->st) != FLOE_OK) {
        floe__graph_fail(g, B->st->code, "%s", floe_status_message(B->st));
        return B->st->code;
      }
    }
    /* A control input from the forward loop (a TensorArray write barrier) is already
     * satisfied: the backward loop needs N, which waits for the forward iterations. */
    for (int c = 0; c < n->num_control;) {
      if (is_forward(B, n->control[c])) {
        n->control[c] = n->control[--n->num_control];
      } else {
        c++;
      }
    }
  }
  return FLOE_OK;
}

/* d (a gradient made in the backward body, whose nodes are ids >= start) is a^T g of two
 * per-iteration values of rank 2: its operands (NULL when it is not). */
static bool hoistable(const GradLoopBuild *B, FloeOutput d, int start, FloeOutput *ops) {
  FloeNode *n = d.node;
  if (!B->can_hoist || !n || n->id < start || !is_op(n, "MatMul") ||
      !floe__node_attr_bool(n, "transpose_a", false) ||
      floe__node_attr_bool(n, "transpose_b", false))
    return false;
  for (int j = 0; j < 2; j++) {
    ops[j] = n->inputs[j];
    if (ops[j].node->id < start || ops[j].node->out_shapes[ops[j].index].rank != 2) return false;
  }
  return true;
}

/* Writes a and g (ops) of invariant entry k into TensorArrays at forward index idx, the
 * writes made control inputs of the backward counter's increment `step` (so the loop's
 * last counter value comes only after every write). The per-iteration product d is left
 * unused and out of the loop. */
static floe_code hoist(GradLoopBuild *B, int k, FloeNode *d, const FloeOutput *ops,
                       FloeOutput idx, FloeNode *step) {
  FloeGraph *g = B->g;
  char nm[512], scope[300];
  snprintf(scope, sizeof scope, "%s/hoisted/%s", B->bwd_frame, d->name);
  Hoisted *h = &B->hoisted[k];
  h->dtype = d->out_dtypes[0];
  /* Made outside the loop (excluded from its body); the loop builder brings them in. */
  FloeOutput zero =
      scalar_const(g, floe__build_name_in(g, nm, sizeof nm, scope, "flow"), FLOE_F32, 0);
  if (!zero.node) return floe_graph_status(g);
  FloeNode *made[6] = {zero.node, d};
  for (int j = 0; j < 2; j++) {
    FloeShape es = ops[j].node->out_shapes[ops[j].index];
    es.dims[0] = -1; /* rows may differ between iterations (floe_dynamic_lstm's) */
    FloeNode *ta =
        growing_ta(g, scope, j ? "g" : "a", h->dtype, es, true, NULL, &made[2 + 2 * j]);
    if (!ta) return floe_graph_status(g);
    made[3 + 2 * j] = ta;
    h->ta[j] = floe_out(ta, 0);
    FloeNode *w = ta_write(g, scope, h->ta[j], idx, ops[j], zero);
    if (!w) return floe_graph_status(g);
    if (floe__node_add_control(step, w, B->st) != FLOE_OK) {
      floe__graph_fail(g, B->st->code, "%s", floe_status_message(B->st));
      return B->st->code;
    }
  }
  return exclude_all(g, made, FLOE__ARRAY_LEN(made));
}

/* After the backward loop (whose counter Exit `done` comes after every write): the hoisted
 * invariant's gradient, concat(a)^T concat(g). */
static FloeOutput hoisted_product(GradLoopBuild *B, const Hoisted *h, FloeNode *done) {
  FloeGraph *g = B->g;
  FloeOutput parts[2];
  for (int j = 0; j < 2; j++) {
    FloeNodeBuilder *b = floe_node_begin(g, "TensorArrayConcatV3", NULL);
    floe_node_add_input(b, h->ta[j]);
    floe_node_add_input(b, B->zero_flow);
    floe_node_set_attr_type(b, "dtype", h->dtype);
    floe_node_add_control_input(b, done);
    parts[j] = floe_out(floe_node_finish(b), 0);
  }
  FloeNodeBuilder *b = floe_node_begin(g, "MatMul", NULL);
  floe_node_add_input(b, parts[0]);
  floe_node_add_input(b, parts[1]);
  floe_node_set_attr_bool(b, "transpose_a", true);
  return floe_out(floe_node_finish(b), 0);
}

/* Loop-invariant code motion for the backward body [start, end): a node that is not stateful
 * nor control flow, has no control inputs, and reads only values from outside the backward
 * loop (or nodes moved out already) computes the same in every iteration, so it is left out
 * of the loop (excluded from the body; the loop builder brings its value in through a
 * constant Enter) and runs once. E.g. a transposed weight a gradient function makes. A node
 * with no inputs at all (a Const) moves too. */
static floe_code hoist_invariants(GradLoopBuild *B, int start, int end) {
  static const char *const cf[] = {"Enter", "Exit", "Merge", "Switch", "NextIteration",
                                   "LoopCond", "ControlTrigger"};
  enum { MOVED = 1, WAITED = 2 }; /* per body node */
  unsigned char *flag = floe__calloc((size_t)(end - start + 1), 1);
  if (!flag) {
    floe__graph_fail(B->g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
    return FLOE_NO_MEMORY;
  }
  /* A node some body node waits for (a read's gate) stays: control edges cannot cross into
   * the loop. */
  for (int id = start; id < end; id++)
    for (int c = 0; c < B->g->nodes[id]->num_control; c++) {
      int src = B->g->nodes[id]->control[c]->id;
      if (src >= start && src < end) flag[src - start] |= WAITED;
    }
  floe_code rc = FLOE_OK;
  for (int id = start; id < end && rc == FLOE_OK; id++) {
    FloeNode *n = B->g->nodes[id];
    bool ok = !(n->op->flags & FLOE_OP_STATEFUL) && n->num_control == 0 &&
              !(flag[id - start] & WAITED);
    for (size_t k = 0; ok && k < FLOE__ARRAY_LEN(cf); k++) ok = !is_op(n, cf[k]);
    for (int j = 0; ok && j < n->num_inputs; j++) {
      int src = n->inputs[j].node->id;
      ok = src < B->bwd_first || (src >= start && src < id && (flag[src - start] & MOVED));
    }
    if (ok) {
      flag[id - start] |= MOVED;
      rc = exclude_all(B->g, &n, 1);
    }
  }
  floe__free(flag);
  return rc;
}

/* Backward loop condition: k < N. */
static floe_code bwd_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)n;
  GradLoopBuild *B = arg;
  *pred = floe_binary(g, "Less", NULL, v[0], B->n_iters);
  return floe_graph_status(g);
}

/* Backward loop body: the gradient of forward iteration N-1-k. v = [k, dv..., dinv...]. */
static floe_code bwd_body(FloeGraph *g, void *arg, const FloeOutput *v, int n,
                          FloeOutput *next) {
  (void)n;
  GradLoopBuild *B = arg;
  const FloeGradLoop *L = B->L;
  FloeOutput one = scalar_const(g, NULL, FLOE_I32, 1);
  FloeOutput idx = floe_binary(g, "Sub", NULL, floe_binary(g, "Sub", NULL, B->n_iters, one), v[0]);
  next[0] = floe_binary(g, "Add", NULL, v[0], one);
  if (floe_graph_status(g) != FLOE_OK) return floe_graph_status(g);
  int nf = B->num_fvar, ni = B->num_finv;
  FloeOutput *buf = floe__calloc((size_t)(4 * nf + 2 * ni + 1), sizeof *buf);
  if (!buf) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "out of memory building a loop gradient");
    return FLOE_NO_MEMORY;
  }
  FloeOutput *ys = buf, *gys = buf + nf, *xs = buf + 2 * nf, *dxs = xs + nf + ni;
  for (int i = 0; i < nf; i++) {
    const FloeGradLoopVar *lv = &L->vars[B->fvar[i]];
    ys[i] = lv->merge->inputs[1].node->inputs[0]; /* what NextIteration passes on */
    gys[i] = v[1 + i];
    xs[i] = floe_out(lv->body, 0);
  }
  for (int k = 0; k < ni; k++) xs[nf + k] = floe_out(L->inv[B->finv[k]], 0);
  int start = floe_graph_num_nodes(g);
  floe_code rc = floe__gradients_body(g, ys, nf, xs, nf + ni, gys, dxs, B->st);
  if (rc == FLOE_OK) rc = substitute(B, start, floe_graph_num_nodes(g), idx);
  for (int i = 0; i < nf && rc == FLOE_OK; i++)
    next[1 + i] = dxs[i].node ? dxs[i] : floe_unary(g, "ZerosLike", NULL, v[1 + i]);
  for (int k = 0; k < ni && rc == FLOE_OK; k++) {
    FloeOutput ops[2];
    if (hoistable(B, dxs[nf + k], start, ops)) {
      rc = hoist(B, k, dxs[nf + k].node, ops, idx, next[0].node);
      next[1 + nf + k] = v[1 + nf + k]; /* unused: the product after the loop replaces it */
      continue;
    }
    next[1 + nf + k] =
        dxs[nf + k].node ? floe_binary(g, "Add", NULL, v[1 + nf + k], dxs[nf + k]) : v[1 + nf + k];
  }
  floe__free(buf);
  if (rc == FLOE_OK) rc = hoist_invariants(B, start, floe_graph_num_nodes(g));
  return rc == FLOE_OK ? floe_graph_status(g) : rc;
}

/* Whether the forward body holds a Switch other than the loop's own: a cond, whose untaken
 * branch leaves some iterations without the values a hoisted product would gather. */
static bool has_cond(const GradLoopBuild *B) {
  for (int id = 0; id < B->num_walked; id++) {
    if (B->loop_of[id] != B->li || !is_op(B->g->nodes[id], "Switch")) continue;
    bool own = false;
    for (int i = 0; i < B->L->num_vars && !own; i++) own = B->L->vars[i].sw == B->g->nodes[id];
    if (!own) return true;
  }
  return false;
}

floe_code floe__grad_while(FloeGraph *g, const FloeGradLoop *L, int li, const int *loop_of,
                           int num_walked, const FloeOutput *dexit, const bool *need_inv, FloeOutput *dinit,
                           FloeOutput *dinv, FloeStatus *st) {
  for (int i = 0; i < L->num_vars; i++) dinit[i] = (FloeOutput){NULL, 0};
  for (int k = 0; k < L->num_inv; k++) dinv[k] = (FloeOutput){NULL, 0};
  if (L->nested)
    return floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "floe_gradients: while loop '%s' has a while loop in its body; "
                           "gradients through nested loops are not supported yet",
                           L->name);
  GradLoopBuild B = {.g = g, .L = L, .loop_of = loop_of, .li = li, .st = st};
  B.fvar = floe__calloc((size_t)L->num_vars + 1, sizeof(int));
  B.finv = floe__calloc((size_t)L->num_inv + 1, sizeof(int));
  B.hoisted = floe__calloc((size_t)L->num_inv + 1, sizeof *B.hoisted);
  int total = 1 + L->num_vars + L->num_inv;
  FloeOutput *init = floe__calloc((size_t)total, sizeof *init);
  FloeOutput *res = floe__calloc((size_t)total, sizeof *res);
  floe_code rc = FLOE_OK;
  if (!B.fvar || !B.finv || !B.hoisted || !init || !res) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory building a loop gradient");
    goto out;
  }
  B.num_walked = num_walked;
  if ((rc = add_counter(&B)) != FLOE_OK) goto fail_graph;
  char nm[256];
  init[0] = scalar_const(g, floe__build_name_in(g, nm, sizeof nm, L->name, "grad/k0"), FLOE_I32, 0);
  for (int i = 0; i < L->num_vars; i++) {
    FloeDType dt = L->vars[i].exit->out_dtypes[0];
    if (!(FLOE_DTYPES_FLOAT & FLOE_DTYPE_BIT(dt))) continue;
    B.fvar[B.num_fvar] = i;
    init[1 + B.num_fvar++] =
        dexit[i].node ? dexit[i]
                      : floe_unary(g, "ZerosLike", NULL, floe_out(L->vars[i].exit, 0));
  }
  for (int k = 0; k < L->num_inv; k++) {
    FloeOutput outer = L->inv[k]->inputs[0];
    if (!need_inv[k] || !(FLOE_DTYPES_FLOAT & FLOE_DTYPE_BIT(outer.node->out_dtypes[outer.index])))
      continue;
    B.finv[B.num_finv] = k;
    init[1 + B.num_fvar + B.num_finv++] = floe_unary(g, "ZerosLike", NULL, outer);
  }
  if (floe_graph_status(g) != FLOE_OK) goto fail_graph;
  int nv = 1 + B.num_fvar + B.num_finv;
  FloeWhileOptions o;
  floe_while_options_init(&o);
  snprintf(nm, sizeof nm, "%s_grad", L->name);
  for (int k = 1; floe_graph_find(g, nm); k++) snprintf(nm, sizeof nm, "%s_grad_%d", L->name, k);
  B.bwd_frame = nm;
  B.bwd_first = floe_graph_num_nodes(g);
  B.can_hoist = !has_cond(&B);
  rc = floe_while_loop(g, nm, bwd_cond, bwd_body, &B, init, nv, &o, res);
  floe__cf_exclude_clear();
  if (rc != FLOE_OK) goto fail_graph;
  for (int i = 0; i < B.num_fvar; i++) dinit[B.fvar[i]] = res[1 + i];
  for (int k = 0; k < B.num_finv; k++)
    dinv[B.finv[k]] = B.hoisted[k].ta[0].node ? hoisted_product(&B, &B.hoisted[k], res[0].node)
                                              : res[1 + B.num_fvar + k];
  if (floe_graph_status(g) != FLOE_OK) goto fail_graph;
  goto out;
fail_graph:
  if (floe_graph_status(g) != FLOE_OK && floe_status_code(st) == FLOE_OK) floe_graph_error(g, st);
  rc = floe_status_code(st) ? floe_status_code(st) : floe_graph_status(g);
  if (rc == FLOE_OK) rc = FLOE_INTERNAL;
out:
  floe__free(B.fvar);
  floe__free(B.finv);
  floe__free(B.hoisted);
  floe__free(B.saved);
  floe__free(B.fwd_extra);
  floe__free(init);
  floe__free(res);
  return rc;
}
