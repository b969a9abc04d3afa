/* SPDX-License-Identifier: Apache-2.0 */
/* exec_frames.c - the scheduler for graphs with control flow (Switch, Merge, Enter, Exit,
 * NextIteration, LoopCond), after TensorFlow's design (Yu et al., EuroSys 2018).
 *
 * A node may run many times in one step: once per (frame, iteration) it belongs to. A
 * *frame* is one execution of a while loop: made by the first Enter that reaches it from a
 * parent (frame, iteration), it holds at most parallel_iterations live iterations, each with
 * its own pending counts, dead counts and input slots (arrays over the whole plan: simple,
 * and cheap next to the kernels a loop body runs). Values are delivered to consumers' input
 * slots; a node is ready when its pending count reaches zero.
 *
 *  - Dead values: Switch sends its input to one port and a dead marker to the other. A node
 *    with a dead input does not run and sends dead on every output (control edges too).
 *    Merge runs on its first live input, or dead once every data input is dead (and
 *    ControlTrigger is never dead: it only waits for its control inputs); a loop's
 *    Merge counts the inputs that cannot arrive in an iteration (the back edge in iteration
 *    0, the Enter after it) as dead from the start.
 *  - Enter delivers into iteration 0 of the child frame (a constant Enter into every
 *    iteration); NextIteration into the next iteration (waiting in a queue while
 *    parallel_iterations are live); Exit into the parent frame, once: its live value, or
 *    dead when the frame ends without one.
 *  - Iterations end in order: the oldest ends when none of its nodes is ready or running and
 *    no child frame of it is alive (iteration 0 also waits for every Enter); a frame ends
 *    when its last iteration ended and every Enter arrived.
 *
 * One mutex per step guards every frame; kernels run outside it. The root frame's single
 * iteration holds the nodes outside loops. A cancelled step delivers nothing more: running
 * nodes finish, the rest never become ready, and the step ends when nothing is running.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_private.h"

enum CfKind { CF_NONE = 0, CF_SWITCH, CF_MERGE, CF_ENTER, CF_EXIT, CF_NEXT, CF_LOOPCOND, CF_TRIGGER };

/* The dead marker in slots and outputs; never dereferenced. */
static FloeTensor dead_marker;
#define DEAD (&dead_marker)

/* Merge: dead[] holds dead data inputs; this bit says a live one arrived. */
#define LIVE_BIT (1 << 30)

typedef struct StaticFrame {
  const char *name;        /* the Enters' frame_name (borrowed from the graph) */
  int parent;              /* static id; -1 for the root */
  int parallel;            /* parallel_iterations */
  int num_enters;
  int *exits, num_exits;   /* Exit nodes leaving it */
  int *merges, num_merges; /* its loop Merges (with a back edge): their dead counts start
                              at the inputs that cannot arrive in an iteration */
} StaticFrame;

struct FloeCfExec {
  uint8_t *kind;           /* enum CfKind per node */
  int *frame;              /* static frame per node */
  int *child;              /* Enter: the static frame it enters */
  bool *const_enter;
  int *exit_index;         /* Exit: its index in its frame's exits */
  int *pending0;           /* data inputs not fed + control inputs; Merge: control + 1 */
  int *num_data;           /* Merge: data inputs not fed */
  int *back_edges;         /* Merge: inputs from NextIteration */
  bool *has_fetch;
  int *cons_off, *cons_node, *cons_slot; /* consumers of each entry (CSR) */
  int *ctl_off, *ctl_node;               /* control successors of each node (CSR) */
  int *roots, num_roots;
  StaticFrame *frames;
  int num_frames;
};

typedef struct CfIter {
  int iter;
  int outstanding;         /* its nodes ready or running, plus its live child frames */
  int *pending, *dead;     /* per node */
  FloeTensor **slots;      /* per flattened input; NULL, a reference, or DEAD */
} CfIter;

typedef struct CfFrame {
  int sid;
  uint64_t id;             /* floe__frame_id of its path (0: the root), for rendezvous keys */
  struct CfFrame *parent;
  CfIter *parent_iter;
  int pending_enters;      /* Enters that have not arrived */
  int first, next;         /* oldest live iteration; iterations made so far */
  int cap;                 /* parallel_iterations: ring size */
  CfIter **ring;
  int num_inv, cap_inv;    /* constant Enters' values, given to every iteration */
  int *inv_node;
  FloeTensor **inv_val;
  int num_q, cap_q;        /* NextIteration values waiting for iteration `next` */
  int *q_node;
  FloeTensor **q_val;
  bool *exit_done;         /* per exit of the static frame: delivered to the parent */
  struct CfFrame *link;    /* the step's list of live frames */
} CfFrame;

/* One activation of a node: (node, frame, iteration). */
typedef struct CfTask {
  FloeExecStep *s;
  int n;
  CfFrame *f;
  CfIter *it;
  struct CfTask *next;     /* ready lists */
  Invocation inv;          /* async kernels: lives until done */
  FloeTensor **ins;        /* the kernel's inputs: borrowed from the slots, then replaced
                              by variable values and copies (owned by inv) */
  FloeTensor *outs[];      /* the node's outputs, then its inputs (ins) */
} CfTask;

struct FloeCfStep {
  pthread_mutex_t mu;
  int outstanding;         /* tasks ready or running (guarded by mu) */
  CfFrame *root;
  CfFrame *frames;         /* every live frame but the root */
  bool oom;                /* an allocation failed: the step fails, nothing more runs */
};

typedef struct TaskList {
  CfTask *head, *tail;
  int n;
} TaskList;

static void tl_push(TaskList *l, CfTask *t) {
  t->next = NULL;
  if (l->tail)
    l->tail->next = t;
  else
    l->head = t;
  l->tail = t;
  l->n++;
}

/* ---- building ---- */

static bool is_send(const FloeNode *n) {
  return strcmp(n->op->name, "_Send") == 0 || strcmp(n->op->name, "_ControlSend") == 0;
}

static int cf_kind_of(const FloeNode *n) {
  static const struct {
    const char *op;
    int kind;
  } ops[] = {{"Switch", CF_SWITCH}, {"Merge", CF_MERGE},        {"Enter", CF_ENTER},
             {"Exit", CF_EXIT},     {"NextIteration", CF_NEXT}, {"LoopCond", CF_LOOPCOND},
             {"ControlTrigger", CF_TRIGGER}};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (strcmp(n->op->name, ops[i].op) == 0) return ops[i].kind;
  return CF_NONE;
}

void floe__cf_free(FloeCfExec *cf) {
  if (!cf) return;
  for (int i = 0; i < cf->num_frames; i++) {
    floe__free(cf->frames[i].exits);
    floe__free(cf->frames[i].merges);
  }
  floe__free(cf->frames);
  floe__free(cf->kind);
  floe__free(cf->frame);
  floe__free(cf->child);
  floe__free(cf->const_enter);
  floe__free(cf->exit_index);
  floe__free(cf->pending0);
  floe__free(cf->num_data);
  floe__free(cf->back_edges);
  floe__free(cf->has_fetch);
  floe__free(cf->cons_off);
  floe__free(cf->cons_node);
  floe__free(cf->cons_slot);
  floe__free(cf->ctl_off);
  floe__free(cf->ctl_node);
  floe__free(cf->roots);
  floe__free(cf);
}

/* The static frame (name, parent), added when new; -1 when out of memory. */
static int static_frame(FloeCfExec *cf, const FloeNode *enter, int parent) {
  const char *name = floe__node_attr_str(enter, "frame_name");
  for (int i = 1; i < cf->num_frames; i++)
    if (cf->frames[i].parent == parent && strcmp(cf->frames[i].name, name) == 0) return i;
  StaticFrame *v = floe__realloc(cf->frames, (size_t)(cf->num_frames + 1) * sizeof *v);
  if (!v) return -1;
  cf->frames = v;
  int64_t par = floe__node_attr_int(enter, "parallel_iterations", 10);
  v[cf->num_frames] = (StaticFrame){name, parent, par < 1 ? 1 : (int)par, 0, NULL, 0, NULL, 0};
  return cf->num_frames++;
}

/* The frame a node's outputs go to. */
static int out_frame(const FloeCfExec *cf, int p) {
  if (cf->kind[p] == CF_ENTER) return cf->child[p];
  if (cf->kind[p] == CF_EXIT) return cf->frames[cf->frame[p]].parent;
  return cf->frame[p];
}

/* Assigns every node its frame by walking the edges from the roots. */
static floe_code assign_frames(FloeExecutor *e, FloeCfExec *cf, FloeStatus *st) {
  int *queue = floe__malloc((size_t)e->num_nodes * sizeof *queue);
  if (!queue) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory analysing loops");
  int qh = 0, qt = 0;
  for (int i = 0; i < e->num_nodes; i++) cf->frame[i] = -1;
  for (int r = 0; r < cf->num_roots; r++) {
    cf->frame[cf->roots[r]] = 0;
    queue[qt++] = cf->roots[r];
  }
  floe_code rc = FLOE_OK;
  while (qh < qt && rc == FLOE_OK) {
    int p = queue[qh++];
    const FloeNode *pn = e->nodes[p].node;
    if (cf->kind[p] == CF_ENTER) {
      cf->child[p] = static_frame(cf, pn, cf->frame[p]);
      if (cf->child[p] < 0) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory analysing loops");
        break;
      }
      cf->frames[cf->child[p]].num_enters++;
    } else if (cf->kind[p] == CF_EXIT && cf->frame[p] == 0) {
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "node '%s' (Exit) is not inside a while loop: no Enter leads to it",
                           pn->name);
      break;
    }
    int f = out_frame(cf, p);
    const ExecNode *en = &e->nodes[p];
    for (int k = 0; k < en->num_outputs; k++) {
      int ent = en->out_base + k;
      for (int c = cf->cons_off[ent]; c < cf->cons_off[ent + 1] && rc == FLOE_OK; c++) {
        int m = cf->cons_node[c];
        if (cf->frame[m] < 0) {
          cf->frame[m] = f;
          queue[qt++] = m;
        } else if (cf->frame[m] != f) {
          rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "node '%s' (%s) takes inputs from two loop frames ('%s' is in "
                               "'%s', another input in '%s'): a value entering a while loop "
                               "must pass through Enter, and one leaving it through Exit",
                               e->nodes[m].node->name, e->nodes[m].node->op->name, pn->name,
                               cf->frames[f].name, cf->frames[cf->frame[m]].name);
        }
      }
    }
    for (int c = cf->ctl_off[p]; c < cf->ctl_off[p + 1] && rc == FLOE_OK; c++) {
      int m = cf->ctl_node[c];
      if (cf->frame[m] < 0) {
        cf->frame[m] = f;
        queue[qt++] = m;
      } else if (cf->frame[m] != f) {
        rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "node '%s' (%s) has a control input from '%s' in another loop "
                             "frame ('%s', not '%s')",
                             e->nodes[m].node->name, e->nodes[m].node->op->name, pn->name,
                             cf->frames[f].name, cf->frames[cf->frame[m]].name);
      }
    }
  }
  for (int i = 0; i < e->num_nodes && rc == FLOE_OK; i++) {
    if (cf->frame[i] < 0)
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "node '%s' (%s) can never run: it is on a cycle that no Merge "
                           "enters (a loop's back edge must go NextIteration -> Merge)",
                           e->nodes[i].node->name, e->nodes[i].node->op->name);
  }
  floe__free(queue);
  return rc;
}

/* Consumers per entry and control successors per node, from the executor's arrays;
 * local_of maps graph node ids to plan indices (-1: not in the step). */
static floe_code build_edges(FloeExecutor *e, const int *local_of, FloeCfExec *cf,
                             FloeStatus *st) {
  cf->cons_off = floe__calloc((size_t)e->num_entries + 1, sizeof(int));
  cf->ctl_off = floe__calloc((size_t)e->num_nodes + 1, sizeof(int));
  if (!cf->cons_off || !cf->ctl_off) goto oom;
  for (int i = 0; i < e->total_inputs; i++)
    if (e->input_src[i] >= 0) cf->cons_off[e->input_src[i] + 1]++;
  for (int m = 0; m < e->num_nodes; m++) {
    const FloeNode *node = e->nodes[m].node;
    for (int c = 0; c < node->num_control; c++) {
      int p = local_of[node->control[c]->id];
      if (p >= 0) cf->ctl_off[p + 1]++;
    }
  }
  for (int i = 0; i < e->num_entries; i++) cf->cons_off[i + 1] += cf->cons_off[i];
  for (int i = 0; i < e->num_nodes; i++) cf->ctl_off[i + 1] += cf->ctl_off[i];
  int nc = cf->cons_off[e->num_entries], nt = cf->ctl_off[e->num_nodes];
  cf->cons_node = floe__malloc((size_t)(nc ? nc : 1) * sizeof(int));
  cf->cons_slot = floe__malloc((size_t)(nc ? nc : 1) * sizeof(int));
  cf->ctl_node = floe__malloc((size_t)(nt ? nt : 1) * sizeof(int));
  int *fill = floe__calloc((size_t)(e->num_entries + e->num_nodes + 1), sizeof(int));
  if (!cf->cons_node || !cf->cons_slot || !cf->ctl_node || !fill) {
    floe__free(fill);
    goto oom;
  }
  for (int m = 0; m < e->num_nodes; m++) {
    const ExecNode *en = &e->nodes[m];
    for (int j = 0; j < en->num_inputs; j++) {
      int src = e->input_src[en->in_base + j];
      if (src < 0) continue;
      int at = cf->cons_off[src] + fill[src]++;
      cf->cons_node[at] = m;
      cf->cons_slot[at] = en->in_base + j;
    }
    for (int c = 0; c < en->node->num_control; c++) {
      int p = local_of[en->node->control[c]->id];
      if (p >= 0) cf->ctl_node[cf->ctl_off[p] + fill[e->num_entries + p]++] = m;
    }
  }
  floe__free(fill);
  return FLOE_OK;
oom:
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory analysing loops");
}

floe_code floe__cf_build(FloeExecutor *e, const int *local_of, FloeStatus *st) {
  bool any = false;
  for (int i = 0; i < e->num_nodes && !any; i++) any = cf_kind_of(e->nodes[i].node) != CF_NONE;
  if (!any && !e->force_frames) return FLOE_OK;
  FloeCfExec *cf = floe__calloc(1, sizeof *cf);
  size_t nn = (size_t)(e->num_nodes ? e->num_nodes : 1);
  if (!cf) goto oom;
  cf->kind = floe__calloc(nn, 1);
  cf->frame = floe__calloc(nn, sizeof(int));
  cf->child = floe__calloc(nn, sizeof(int));
  cf->const_enter = floe__calloc(nn, sizeof(bool));
  cf->exit_index = floe__calloc(nn, sizeof(int));
  cf->pending0 = floe__calloc(nn, sizeof(int));
  cf->num_data = floe__calloc(nn, sizeof(int));
  cf->back_edges = floe__calloc(nn, sizeof(int));
  cf->has_fetch = floe__calloc(nn, sizeof(bool));
  cf->roots = floe__calloc(nn, sizeof(int));
  cf->frames = floe__calloc(1, sizeof *cf->frames);
  if (!cf->kind || !cf->frame || !cf->child || !cf->const_enter || !cf->exit_index ||
      !cf->pending0 || !cf->num_data || !cf->back_edges || !cf->has_fetch || !cf->roots ||
      !cf->frames)
    goto oom;
  cf->frames[0] = (StaticFrame){"", -1, 1, 0, NULL, 0, NULL, 0};
  cf->num_frames = 1;
  if (build_edges(e, local_of, cf, st) != FLOE_OK) goto fail;
  for (int i = 0; i < e->num_nodes; i++) {
    const ExecNode *en = &e->nodes[i];
    cf->kind[i] = (uint8_t)cf_kind_of(en->node);
    cf->const_enter[i] = cf->kind[i] == CF_ENTER &&
                         floe__attrs_get(&en->node->attrs, "is_constant") &&
                         floe__attrs_get(&en->node->attrs, "is_constant")->u.b;
    int data = 0, back = 0;
    for (int j = 0; j < en->num_inputs; j++) {
      int src = e->input_src[en->in_base + j];
      if (src < 0) continue;
      data++;
      if (strcmp(en->node->inputs[j].node->op->name, "NextIteration") == 0) back++;
    }
    int ctl = e->pending0[i] - data; /* the plain scheduler counted both */
    cf->num_data[i] = data;
    cf->back_edges[i] = back;
    cf->pending0[i] = cf->kind[i] == CF_MERGE ? ctl + 1 : e->pending0[i];
    if (cf->kind[i] == CF_MERGE && data == 0) cf->pending0[i] = ctl; /* fed: runs live */
    if (cf->pending0[i] == 0) cf->roots[cf->num_roots++] = i;
  }
  for (int f = 0; f < e->num_fetches; f++) {
    int src = e->fetch_src[f];
    if (src < 0) continue;
    for (int i = 0; i < e->num_nodes; i++)
      if (src >= e->nodes[i].out_base && src < e->nodes[i].out_base + e->nodes[i].num_outputs)
        cf->has_fetch[i] = true;
  }
  if (assign_frames(e, cf, st) != FLOE_OK) goto fail;
  for (int i = 0; i < e->num_nodes; i++) {
    const ExecNode *en = &e->nodes[i];
    if (cf->has_fetch[i] && cf->frame[i] != 0) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "node '%s' (%s) is fetched but runs inside while loop '%s': fetch the "
                      "loop's outputs (its Exit nodes) instead",
                      en->node->name, en->node->op->name, cf->frames[cf->frame[i]].name);
      goto fail;
    }
    for (int j = 0; j < en->num_inputs; j++) {
      if (e->input_src[en->in_base + j] < 0 && cf->frame[i] != 0) {
        floe_status_set(st, FLOE_INVALID_ARGUMENT,
                        "node '%s' (%s) runs inside while loop '%s' and input %d is fed: feed "
                        "a value outside the loop and pass it in through the loop's inputs",
                        en->node->name, en->node->op->name, cf->frames[cf->frame[i]].name, j);
        goto fail;
      }
    }
    if ((cf->kind[i] == CF_NEXT || cf->kind[i] == CF_LOOPCOND) && cf->frame[i] == 0) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "node '%s' (%s) is not inside a while loop: no Enter leads to it",
                      en->node->name, en->node->op->name);
      goto fail;
    }
    StaticFrame *sf = &cf->frames[cf->frame[i]];
    if (cf->kind[i] == CF_MERGE && cf->back_edges[i] > 0) {
      int *m = floe__realloc(sf->merges, (size_t)(sf->num_merges + 1) * sizeof *m);
      if (!m) goto oom;
      sf->merges = m;
      m[sf->num_merges++] = i;
    }
    if (cf->kind[i] != CF_EXIT) continue;
    int *x = floe__realloc(sf->exits, (size_t)(sf->num_exits + 1) * sizeof *x);
    if (!x) goto oom;
    sf->exits = x;
    cf->exit_index[i] = sf->num_exits;
    x[sf->num_exits++] = i;
  }
  e->cf = cf;
  return FLOE_OK;
oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory analysing loops");
fail:
  floe__cf_free(cf);
  return floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY;
}

/* ---- frames and iterations (everything below runs under the step's cf->mu) ---- */

static void value_release(FloeTensor *t) {
  if (t && t != DEAD) floe_tensor_release(t);
}

static CfIter *iter_new(FloeExecStep *s, CfFrame *f, int iter) {
  FloeExecutor *e = s->e;
  FloeCfExec *cf = e->cf;
  size_t nn = (size_t)e->num_nodes, ni = (size_t)e->total_inputs;
  CfIter *it = floe__malloc(sizeof *it + 2 * nn * sizeof(int) + ni * sizeof(FloeTensor *) + 8);
  if (!it) return NULL;
  it->iter = iter;
  it->outstanding = 0;
  it->slots = (FloeTensor **)(it + 1);
  it->pending = (int *)(it->slots + ni);
  it->dead = it->pending + nn;
  memset(it->slots, 0, ni * sizeof(FloeTensor *));
  memcpy(it->pending, cf->pending0, nn * sizeof(int));
  memset(it->dead, 0, nn * sizeof(int));
  /* A loop Merge waits for one of: the Enter (iteration 0) or the back edge (after). */
  const StaticFrame *sf = &cf->frames[f->sid];
  for (int k = 0; k < sf->num_merges; k++) {
    int i = sf->merges[k];
    it->dead[i] = iter == 0 ? cf->back_edges[i] : cf->num_data[i] - cf->back_edges[i];
  }
  return it;
}

static void iter_free(FloeExecStep *s, CfIter *it) {
  for (int i = 0; i < s->e->total_inputs; i++) value_release(it->slots[i]);
  floe__free(it);
}

static CfTask *task_new(FloeExecStep *s, int n, CfFrame *f, CfIter *it) {
  int no = s->e->nodes[n].num_outputs, ni = s->e->nodes[n].num_inputs;
  CfTask *t = floe__malloc(sizeof *t + (size_t)(no + ni + 1) * sizeof(FloeTensor *));
  if (!t) return NULL;
  t->ins = t->outs + no;
  t->s = s;
  t->n = n;
  t->f = f;
  t->it = it;
  t->next = NULL;
  for (int k = 0; k < no; k++) t->outs[k] = NULL;
  return t;
}

/* n's pending count in it reached zero: it becomes a task. */
static void make_ready(FloeExecStep *s, int n, CfFrame *f, CfIter *it, TaskList *ready) {
  CfTask *t = task_new(s, n, f, it);
  if (!t) {
    s->cf->oom = true;
    return;
  }
  it->outstanding++;
  s->cf->outstanding++;
  tl_push(ready, t);
}

/* Delivers v (a new reference, or DEAD) to input slot `slot` of node m in iteration it. */
static void deliver(FloeExecStep *s, int m, int slot, FloeTensor *v, CfFrame *f, CfIter *it,
                    TaskList *ready) {
  FloeCfExec *cf = s->e->cf;
  if (cf->kind[m] == CF_MERGE) {
    if (v == DEAD) {
      it->dead[m]++;
      if (it->dead[m] == cf->num_data[m] && --it->pending[m] == 0) make_ready(s, m, f, it, ready);
      return;
    }
    if (it->dead[m] & LIVE_BIT) { /* a second live input: the first one won */
      floe_tensor_release(v);
      return;
    }
    it->dead[m] |= LIVE_BIT;
    it->slots[slot] = v;
    if (--it->pending[m] == 0) make_ready(s, m, f, it, ready);
    return;
  }
  if (v == DEAD)
    it->dead[m]++;
  else
    it->slots[slot] = v;
  if (--it->pending[m] == 0) make_ready(s, m, f, it, ready);
}

/* A control edge into m (dead when its source was). */
static void deliver_control(FloeExecStep *s, int m, bool dead, CfFrame *f, CfIter *it,
                            TaskList *ready) {
  int kind = s->e->cf->kind[m];
  if (dead && kind != CF_MERGE && kind != CF_TRIGGER) it->dead[m]++;
  if (--it->pending[m] == 0) make_ready(s, m, f, it, ready);
}

/* Sends node n's outputs (references taken over; DEAD allowed) and its control signal to
 * its consumers in (f, it). */
static void propagate(FloeExecStep *s, int n, FloeTensor *const *outs, bool dead, CfFrame *f,
                      CfIter *it, TaskList *ready) {
  FloeExecutor *e = s->e;
  FloeCfExec *cf = e->cf;
  const ExecNode *en = &e->nodes[n];
  for (int k = 0; k < en->num_outputs; k++) {
    int ent = en->out_base + k;
    FloeTensor *v = outs[k];
    for (int c = cf->cons_off[ent]; c < cf->cons_off[ent + 1]; c++) {
      if (v != DEAD) floe_tensor_retain(v);
      deliver(s, cf->cons_node[c], cf->cons_slot[c], v, f, it, ready);
    }
  }
  for (int c = cf->ctl_off[n]; c < cf->ctl_off[n + 1]; c++)
    deliver_control(s, cf->ctl_node[c], dead, f, it, ready);
}

/* Gives a new iteration the loop invariants. */
static void give_invariants(FloeExecStep *s, CfFrame *f, CfIter *it, TaskList *ready) {
  for (int i = 0; i < f->num_inv; i++) {
    FloeTensor *v = f->inv_val[i];
    if (v != DEAD) floe_tensor_retain(v);
    FloeTensor *outs[1] = {v};
    propagate(s, f->inv_node[i], outs, v == DEAD, f, it, ready);
    value_release(v);
  }
}

/* Makes iteration f->next (room in the ring is the caller's check). */
static CfIter *start_iteration(FloeExecStep *s, CfFrame *f, TaskList *ready) {
  CfIter *it = iter_new(s, f, f->next);
  if (!it) {
    s->cf->oom = true;
    return NULL;
  }
  f->ring[f->next % f->cap] = it;
  f->next++;
  give_invariants(s, f, it, ready);
  return it;
}

static CfFrame *frame_new(FloeExecStep *s, int sid, CfFrame *parent, CfIter *parent_iter) {
  const StaticFrame *sf = &s->e->cf->frames[sid];
  CfFrame *f = floe__calloc(1, sizeof *f);
  if (!f) return NULL;
  f->sid = sid;
  f->parent = parent;
  f->parent_iter = parent_iter;
  f->id = parent ? floe__frame_id(parent->id, parent_iter->iter, sf->name) : 0;
  f->pending_enters = sf->num_enters;
  f->cap = sf->parallel;
  f->ring = floe__calloc((size_t)f->cap, sizeof *f->ring);
  f->exit_done = floe__calloc((size_t)(sf->num_exits ? sf->num_exits : 1), sizeof(bool));
  if (!f->ring || !f->exit_done) {
    floe__free(f->ring);
    floe__free(f->exit_done);
    floe__free(f);
    return NULL;
  }
  return f;
}

static void frame_free(FloeExecStep *s, CfFrame *f) {
  for (int i = f->first; i < f->next; i++)
    if (f->ring[i % f->cap]) iter_free(s, f->ring[i % f->cap]);
  for (int i = 0; i < f->num_inv; i++) value_release(f->inv_val[i]);
  for (int i = 0; i < f->num_q; i++) value_release(f->q_val[i]);
  floe__free(f->inv_node);
  floe__free(f->inv_val);
  floe__free(f->q_node);
  floe__free(f->q_val);
  floe__free(f->ring);
  floe__free(f->exit_done);
  floe__free(f);
}

/* The live child frame sid of (parent, parent_iter), made (with iteration 0) if missing. */
static CfFrame *child_frame(FloeExecStep *s, int sid, CfFrame *parent, CfIter *parent_iter,
                            TaskList *ready) {
  for (CfFrame *f = s->cf->frames; f; f = f->link)
    if (f->sid == sid && f->parent == parent && f->parent_iter == parent_iter) return f;
  CfFrame *f = frame_new(s, sid, parent, parent_iter);
  if (!f) {
    s->cf->oom = true;
    return NULL;
  }
  f->link = s->cf->frames;
  s->cf->frames = f;
  parent_iter->outstanding++; /* the parent iteration waits for the frame */
  if (!start_iteration(s, f, ready)) return NULL;
  return f;
}

static bool push_pair(int **nodes, FloeTensor ***vals, int *n, int *cap, int node, FloeTensor *v) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 4;
    int *a = floe__realloc(*nodes, (size_t)c * sizeof *a);
    if (!a) return false;
    *nodes = a;
    FloeTensor **b = floe__realloc(*vals, (size_t)c * sizeof *b);
    if (!b) return false;
    *vals = b;
    *cap = c;
  }
  (*nodes)[*n] = node;
  (*vals)[(*n)++] = v;
  return true;
}

static void frame_unlink(FloeExecStep *s, CfFrame *f) {
  for (CfFrame **p = &s->cf->frames; *p; p = &(*p)->link) {
    if (*p == f) {
      *p = f->link;
      return;
    }
  }
}

/* Ends the iterations of f that are done, oldest first, and f itself (and then its parent's
 * iterations) when nothing is left. */
static void cleanup(FloeExecStep *s, CfFrame *f, TaskList *ready) {
  FloeCfExec *cf = s->e->cf;
  while (f && f->sid != 0) {
    while (f->first < f->next) {
      CfIter *it = f->ring[f->first % f->cap];
      if (it->outstanding > 0 || (f->first == 0 && f->pending_enters > 0)) break;
      f->ring[f->first % f->cap] = NULL;
      iter_free(s, it);
      f->first++;
      if (f->num_q > 0 && f->next - f->first < f->cap) {
        CfIter *nit = start_iteration(s, f, ready);
        int q = f->num_q;
        f->num_q = 0;
        for (int i = 0; i < q; i++) {
          if (nit) {
            FloeTensor *outs[1] = {f->q_val[i]};
            propagate(s, f->q_node[i], outs, false, f, nit, ready);
          }
          value_release(f->q_val[i]);
        }
      }
    }
    if (f->first < f->next || f->pending_enters > 0) return;
    /* The frame is over: exits that never saw a live value leave dead. */
    const StaticFrame *sf = &cf->frames[f->sid];
    for (int x = 0; x < sf->num_exits; x++) {
      if (f->exit_done[x]) continue;
      int n = sf->exits[x];
      FloeTensor *outs[1] = {DEAD};
      propagate(s, n, outs, true, f->parent, f->parent_iter, ready);
    }
    CfFrame *parent = f->parent;
    CfIter *pit = f->parent_iter;
    frame_unlink(s, f);
    frame_free(s, f);
    pit->outstanding--;
    if (parent->sid == 0) return;
    f = parent;
  }
}

/* Routes node n's outputs by its kind, then ends what finished. outs' references are
 * consumed. */
static void complete(FloeExecStep *s, CfTask *t, bool dead, TaskList *ready) {
  FloeExecutor *e = s->e;
  FloeCfExec *cf = e->cf;
  int n = t->n;
  CfFrame *f = t->f;
  CfIter *it = t->it;
  const ExecNode *en = &e->nodes[n];
  /* Inputs are consumed. */
  for (int j = 0; j < en->num_inputs; j++) {
    value_release(it->slots[en->in_base + j]);
    it->slots[en->in_base + j] = NULL;
  }
  bool cancelled = atomic_load_explicit(&s->cancelled, memory_order_relaxed) || s->cf->oom;
  if (!cancelled && cf->has_fetch[n] && f->sid == 0) {
    for (int k = 0; k < en->num_outputs; k++) {
      FloeTensor *v = t->outs[k];
      if (v == DEAD || !v) continue;
      floe_tensor_retain(v);
      value_release(s->entries[en->out_base + k]);
      s->entries[en->out_base + k] = v;
    }
  }
  if (!cancelled) {
    switch (cf->kind[n]) {
    case CF_ENTER: {
      CfFrame *child = child_frame(s, cf->child[n], f, it, ready);
      if (!child) break;
      child->pending_enters--;
      if (cf->const_enter[n]) {
        FloeTensor *v = t->outs[0];
        if (!push_pair(&child->inv_node, &child->inv_val, &child->num_inv, &child->cap_inv, n,
                       v)) {
          s->cf->oom = true;
          break;
        }
        t->outs[0] = NULL; /* kept by the frame */
        for (int i = child->first; i < child->next; i++) {
          if (v != DEAD) floe_tensor_retain(v);
          FloeTensor *o[1] = {v};
          propagate(s, n, o, dead, child, child->ring[i % child->cap], ready);
          value_release(v);
        }
      } else {
        propagate(s, n, t->outs, dead, child, child->ring[0], ready);
      }
      cleanup(s, child, ready); /* an all-dead loop can end right here */
      break;
    }
    case CF_EXIT:
      if (!dead) {
        f->exit_done[cf->exit_index[n]] = true;
        propagate(s, n, t->outs, false, f->parent, f->parent_iter, ready);
      }
      break;
    case CF_NEXT:
      if (dead) break;
      if (it->iter + 1 < f->next) {
        propagate(s, n, t->outs, false, f, f->ring[(it->iter + 1) % f->cap], ready);
      } else if (f->next - f->first < f->cap) {
        CfIter *nit = start_iteration(s, f, ready);
        if (nit) propagate(s, n, t->outs, false, f, nit, ready);
      } else if (push_pair(&f->q_node, &f->q_val, &f->num_q, &f->cap_q, n, t->outs[0])) {
        t->outs[0] = NULL; /* waits for a free iteration */
      } else {
        s->cf->oom = true;
      }
      break;
    default:
      propagate(s, n, t->outs, dead, f, it, ready);
    }
  }
  for (int k = 0; k < en->num_outputs; k++) value_release(t->outs[k]);
  it->outstanding--;
  s->cf->outstanding--;
  cleanup(s, f, ready);
}

/* ---- running ---- */

static void dispatch(FloeExecStep *s, TaskList *ready, TaskList *inl);

/* The control-flow ops themselves: no kernel, only routing. Returns false (step failed)
 * when the predicate cannot be read. */
static bool run_cf(FloeExecStep *s, CfTask *t) {
  FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[t->n];
  FloeTensor **in = t->it->slots + en->in_base;
  switch (e->cf->kind[t->n]) {
  case CF_SWITCH: {
    FloeStatus st = {FLOE_OK, NULL};
    FloeTensor *p = floe__tensor_to_device(in[1], NULL, &st);
    if (!p || p->num_elements != 1) {
      floe__exec_step_failf(s, en, p ? FLOE_INVALID_ARGUMENT : st.code,
                            "the predicate must be a single bool, got %lld elements%s%s",
                            p ? (long long)p->num_elements : 0LL, p ? "" : ": ",
                            p ? "" : floe_status_message(&st));
      floe_tensor_release(p);
      floe_status_clear(&st);
      return false;
    }
    bool taken = *((const uint8_t *)p->buf->data + p->offset) != 0;
    floe_tensor_release(p);
    floe_tensor_retain(in[0]);
    t->outs[taken ? 1 : 0] = in[0];
    t->outs[taken ? 0 : 1] = DEAD;
    return true;
  }
  case CF_MERGE: {
    int live = -1;
    for (int j = 0; j < en->num_inputs && live < 0; j++)
      if (in[j] && in[j] != DEAD) live = j;
    FloeStatus st = {FLOE_OK, NULL};
    FloeTensor *idx = floe__tensor_alloc(NULL, FLOE_I32, 0, NULL, &st);
    if (!idx || live < 0) {
      floe__exec_step_failf(s, en, idx ? FLOE_INTERNAL : st.code, "%s",
                            idx ? "ran without a live input" : floe_status_message(&st));
      floe_tensor_release(idx);
      floe_status_clear(&st);
      return false;
    }
    *(int32_t *)((char *)idx->buf->data + idx->offset) = live;
    floe_tensor_retain(in[live]);
    t->outs[0] = in[live];
    t->outs[1] = idx;
    return true;
  }
  case CF_TRIGGER:
    return true;
  default: /* Enter, Exit, NextIteration, LoopCond: forward */
    floe_tensor_retain(in[0]);
    t->outs[0] = in[0];
    return true;
  }
}

static bool task_dead(const FloeExecStep *s, const CfTask *t) {
  const FloeCfExec *cf = s->e->cf;
  int d = t->it->dead[t->n];
  if (cf->kind[t->n] == CF_MERGE) return cf->num_data[t->n] > 0 && !(d & LIVE_BIT);
  return d > 0;
}

static void finish_task(FloeExecStep *s, CfTask *t, bool dead, TaskList *inl) {
  FloeCfStep *c = s->cf;
  TaskList ready = {NULL, NULL, 0};
  pthread_mutex_lock(&c->mu);
  complete(s, t, dead, &ready);
  bool oom = c->oom;
  bool finished = c->outstanding == 0;
  pthread_mutex_unlock(&c->mu);
  floe__free(t);
  if (oom) floe__exec_step_abort(s, FLOE_NO_MEMORY, "out of memory running a loop iteration");
  if (finished) {
    floe__exec_step_finish(s); /* s may be gone now */
    return;
  }
  if (ready.n) dispatch(s, &ready, inl);
}

static void async_done(void *arg) {
  CfTask *t = arg;
  FloeExecStep *s = t->s;
  const ExecNode *en = &s->e->nodes[t->n];
  floe__exec_mark_running(s, t->n, -1);
  if (t->inv.start_ns && t->inv.status.code == FLOE_OK)
    floe__exec_prof_record(s, t->n, t->inv.start_ns, floe__exec_now_ns(), &t->inv.ctx, true);
  bool dead = t->inv.ctx.output_dead && t->inv.status.code == FLOE_OK;
  floe__exec_end_call(s, en, &t->inv, FLOE_OK, t->outs);
  if (dead)
    for (int k = 0; k < en->num_outputs; k++) {
      value_release(t->outs[k]);
      t->outs[k] = DEAD;
    }
  finish_task(s, t, dead, NULL);
}

/* Runs one task; an async kernel's completion comes later through async_done. */
static void run_task(FloeExecStep *s, CfTask *t, TaskList *inl) {
  FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[t->n];
  bool dead = task_dead(s, t);
  /* A _Send runs on a dead input too: the flag travels to its _Recv. */
  bool send_dead = dead && en->kernel && is_send(en->node);
  if ((dead && !send_dead) || !en->kernel ||
      atomic_load_explicit(&s->cancelled, memory_order_relaxed)) {
    /* A node without a kernel has only fed outputs: nobody reads them from here, and its
     * control successors go on as usual. */
    for (int k = 0; k < en->num_outputs; k++) t->outs[k] = DEAD;
    finish_task(s, t, dead || en->kernel, inl);
    return;
  }
  if (e->cf->kind[t->n] != CF_NONE) {
    bool ok = run_cf(s, t);
    finish_task(s, t, !ok, inl);
    return;
  }
  /* The node's slots in this iteration are its own until it completes: no lock needed. */
  FloeTensor **in = t->ins;
  memcpy(in, t->it->slots + en->in_base, (size_t)en->num_inputs * sizeof *in);
  if (send_dead)
    for (int j = 0; j < en->num_inputs; j++) in[j] = NULL; /* never hand DEAD to a kernel */
  Invocation *inv = &t->inv;
  inv->status = (FloeStatus){FLOE_OK, NULL};
  inv->copies = NULL;
  inv->held = NULL;
  inv->num_held = 0;
  inv->start_ns = 0;
  if (!send_dead && floe__exec_prepare_inputs(s, en, inv, in) != FLOE_OK) {
    floe__exec_release_inputs(inv, en);
    finish_task(s, t, true, inl);
    return;
  }
  floe__exec_fill_ctx(s, en, inv, in, t->outs);
  inv->ctx.frame_id = t->f->id;
  inv->ctx.iter = t->it->iter;
  inv->ctx.input_dead = send_dead;
  const FloeKernelDef *def = &en->kernel->def;
  if (en->async_slot >= 0) {
    void *ticket = floe__exec_arm_done(s, t->n, async_done, t);
    if (!ticket) {
      floe__exec_release_inputs(inv, en);
      finish_task(s, t, true, inl);
      return;
    }
    floe__exec_mark_running(s, t->n, 1);
    inv->start_ns = floe__exec_profiling(e) ? floe__exec_now_ns() : 0;
    def->compute_async(en->state, &inv->ctx, floe__ticket_done, ticket);
    return;
  }
  floe_code rc;
  floe__exec_mark_running(s, t->n, 1);
  if (floe__exec_profiling(e)) {
    int64_t t0 = floe__exec_now_ns();
    rc = def->compute(en->state, &inv->ctx);
    if (rc == FLOE_OK && inv->status.code == FLOE_OK)
      floe__exec_prof_record(s, t->n, t0, floe__exec_now_ns(), &inv->ctx, false);
  } else {
    rc = def->compute(en->state, &inv->ctx);
  }
  floe__exec_mark_running(s, t->n, -1);
  floe__exec_end_call(s, en, inv, rc, t->outs);
  bool failed = atomic_load_explicit(&s->cancelled, memory_order_relaxed);
  if (failed)
    for (int k = 0; k < en->num_outputs; k++) {
      value_release(t->outs[k]);
      t->outs[k] = DEAD;
    }
  finish_task(s, t, failed, inl);
}

static void task_main(void *arg) {
  CfTask *t = arg;
  FloeExecStep *s = t->s;
  TaskList inl = {NULL, NULL, 0};
  tl_push(&inl, t);
  dispatch(s, &inl, NULL);
}

/* Runs ready tasks: cheap ones here; expensive ones on the pool, keeping one for this
 * thread when it has nothing else (inl: the caller's own list, drained by its loop; NULL:
 * this call drains what it keeps). */
static void dispatch(FloeExecStep *s, TaskList *ready, TaskList *inl) {
  FloeExecutor *e = s->e;
  TaskList local = {NULL, NULL, 0};
  TaskList *mine = inl ? inl : &local;
  CfTask *keep = NULL;
  for (CfTask *t = ready->head, *nx; t; t = nx) {
    nx = t->next;
    bool cheap = e->cf->kind[t->n] != CF_NONE ||
                 (e->inline_inexpensive && e->nodes[t->n].inexpensive) || !e->pool;
    if (cheap) {
      tl_push(mine, t);
      continue;
    }
    if (keep) {
      void *arg = keep;
      if (floe__pool_schedule_batch(e->pool, task_main, &arg, 1) != FLOE_OK) tl_push(mine, keep);
    }
    keep = t;
  }
  if (keep) {
    void *arg = keep;
    if (mine->n == 0 || floe__pool_schedule_batch(e->pool, task_main, &arg, 1) != FLOE_OK)
      tl_push(mine, keep);
  }
  if (inl) return;
  int64_t step = s->ctl.trace_step, span = floe__exec_span_begin(e);
  for (unsigned k = 1; local.head; k++) {
    if (k % 256 == 0) floe__exec_check_deadline(s); /* a loop may run here for ever */
    CfTask *t = local.head;
    local.head = t->next;
    if (!local.head) local.tail = NULL;
    local.n--;
    run_task(s, t, &local);
  }
  floe__exec_span_end(e, step, span); /* e outlives s, which the last task may free */
}

void floe__cf_run(FloeExecStep *s) {
  FloeExecutor *e = s->e;
  FloeCfExec *cf = e->cf;
  FloeCfStep *c = floe__calloc(1, sizeof *c);
  CfFrame *root = c ? floe__calloc(1, sizeof *root) : NULL;
  CfIter *it = root ? iter_new(s, root, 0) : NULL;
  if (!c || !root || !it || pthread_mutex_init(&c->mu, NULL) != 0) {
    floe__free(it);
    floe__free(root);
    floe__free(c);
    floe__exec_step_abort(s, FLOE_NO_MEMORY, "out of memory starting a step with loops");
    floe__exec_step_finish(s);
    return;
  }
  root->cap = 1;
  root->ring = &root->parent_iter; /* one iteration: the ring is this one pointer */
  root->parent_iter = it;
  root->next = 1;
  c->root = root;
  pthread_mutex_lock(&s->mu); /* floe__cf_describe may look from another thread */
  s->cf = c;
  pthread_mutex_unlock(&s->mu);
  /* Feeds sit in the root iteration's slots. */
  for (int i = 0; i < e->total_inputs; i++) {
    int src = e->input_src[i];
    if (src >= 0) continue;
    it->slots[i] = s->feeds[-src - 1];
    floe_tensor_retain(it->slots[i]);
  }
  TaskList ready = {NULL, NULL, 0};
  pthread_mutex_lock(&c->mu);
  for (int r = 0; r < cf->num_roots; r++) make_ready(s, cf->roots[r], root, it, &ready);
  bool finished = c->outstanding == 0;
  bool oom = c->oom;
  pthread_mutex_unlock(&c->mu);
  if (oom) floe__exec_step_abort(s, FLOE_NO_MEMORY, "out of memory starting a step with loops");
  if (finished)
    floe__exec_step_finish(s);
  else
    dispatch(s, &ready, NULL);
}

void floe__cf_step_free(FloeExecStep *s) {
  FloeCfStep *c = s->cf;
  if (!c) return;
  while (c->frames) {
    CfFrame *f = c->frames;
    c->frames = f->link;
    frame_free(s, f);
  }
  CfIter *it = c->root->parent_iter;
  iter_free(s, it);
  floe__free(c->root);
  pthread_mutex_destroy(&c->mu);
  floe__free(c);
  s->cf = NULL;
}

void floe__cf_describe(FloeExecStep *s, char *buf, size_t len) {
  pthread_mutex_lock(&s->mu);
  FloeCfStep *c = s->cf; /* lives until the step is freed, after its canceller let go */
  pthread_mutex_unlock(&s->mu);
  if (!c || len == 0) return;
  pthread_mutex_lock(&c->mu);
  size_t at = strlen(buf);
  for (CfFrame *f = c->frames; f && at + 1 < len; f = f->link) {
    const char *sep = at && buf[at - 1] != ' ' ? "; " : "";
    int n = snprintf(buf + at, len - at, "%swhile loop '%s' was at iteration %d", sep,
                     s->e->cf->frames[f->sid].name, f->next - 1);
    if (n < 0) break;
    at += (size_t)n;
    if (at >= len) at = len - 1;
  }
  pthread_mutex_unlock(&c->mu);
}
