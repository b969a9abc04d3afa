/* SPDX-License-Identifier: Apache-2.0 */
/* partition.c - cuts a placed graph into one piece per device, joined by _Send/_Recv.
 *
 * Every edge whose two ends are on different devices becomes a _Send on the producer's
 * device and a _Recv on the consumer's: one pair per (tensor, destination device), however
 * many consumers read it there. A control edge across devices becomes a _ControlSend and a
 * _Recv of an empty value, which the dependent node waits for.
 *
 * Loops (after TensorFlow's graph partitioning, Yu et al. EuroSys 2018): a device that runs
 * nodes of a while loop's frame needs that frame's iterations of its own, or its _Recvs
 * would have no iteration to run in. So each (frame, device) pair gets a *control loop*,
 * Enter -> Merge -> Switch(pred) -> NextIteration -> Merge, whose pred is the loop's LoopCond
 * (received from the LoopCond's device through a _Send/_Recv pair in every iteration), and
 * every _Recv inside the frame waits for its control loop's Merge. Both sides then agree on
 * (frame, iteration), which the frame scheduler puts in the rendezvous key. A nested frame's
 * control loop enters from its parent's control loop (its Switch's true port), so it runs
 * once per live parent iteration. A loop's NextIteration must share its Merge's device (the
 * placer colocates them): a back edge cut in two would deliver into the wrong iteration.
 */
#include <stdio.h>
#include <string.h>

#include "session.h"

typedef struct Frame {
  const char *name;   /* borrowed from an Enter's frame_name */
  int parent;         /* frame index; -1 for the root */
  int64_t parallel;
  int loop_cond;      /* node id of its LoopCond, -1 until seen */
} Frame;

/* A control loop of one frame on one device. */
typedef struct CtlLoop {
  int frame;
  FloeDevice *dev;
  FloeNode *merge, *sw;
} CtlLoop;

/* A _Send/_Recv pair: (producer node, output index or -1 for control, destination). */
typedef struct Pair {
  int node, index;
  FloeDevice *dst;
  FloeNode *recv;
} Pair;

typedef struct Cutter {
  FloeGraph *g;
  int n0;                  /* nodes of the input graph; later ids are the cutter's */
  FloeDevice **dev;        /* per node, grown with the graph */
  bool *need;
  int *frame;              /* frame of each node's outputs (out_frame), -1 unknown */
  int cap;
  Frame *frames;
  int num_frames, cap_frames;
  CtlLoop *loops;
  int num_loops, cap_loops;
  Pair *pairs;
  int num_pairs, cap_pairs;
  int *frame_recvs;    /* _Recv ids inside a frame: they wait for their control loop */
  int num_frame_recvs, cap_frame_recvs;
  const FloePartitionFed *fed;
  int sends;
  FloeStatus *st;
  char *name;              /* unique()'s last name (owned) */
} Cutter;

static bool grow(void **v, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *n = floe__realloc(*v, (size_t)c * elem);
  if (!n) return false;
  memset((char *)n + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
  *v = n;
  *cap = c;
  return true;
}

static floe_code oom(Cutter *c) {
  return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory partitioning the graph");
}

/* Records a node the cutter made: its device, its frame, part of the step. */
static floe_code adopt(Cutter *c, FloeNode *n, FloeDevice *d, int frame) {
  if (!n) {
    if (!floe_status_code(c->st))
      floe_status_set(c->st, floe_graph_status(c->g) ? floe_graph_status(c->g) : FLOE_INTERNAL,
                      "partitioning: %s", c->g->error_msg ? c->g->error_msg : "a node could not be added");
    return floe_status_code(c->st);
  }
  int old = c->cap;
  if (n->id >= c->cap) {
    int cap = old;
    if (!grow((void **)&c->dev, &cap, n->id + 1, sizeof *c->dev)) return oom(c);
    cap = old;
    if (!grow((void **)&c->need, &cap, n->id + 1, sizeof *c->need)) return oom(c);
    cap = old;
    if (!grow((void **)&c->frame, &cap, n->id + 1, sizeof *c->frame)) return oom(c);
    c->cap = cap;
  }
  c->dev[n->id] = d;
  c->need[n->id] = true;
  c->frame[n->id] = frame;
  return FLOE_OK;
}

/* A fresh node name "_what/a/b" (':' becomes '.'), made unique with a "_N" suffix. The
 * result lives in c->name until the next call; NULL when out of memory. */
static const char *unique(Cutter *c, const char *what, const char *a, const char *b) {
  floe__free(c->name);
  c->name = floe__asprintf("_%s/%s/%s", what, a, b);
  if (!c->name) return NULL;
  for (char *p = c->name; *p; p++)
    if (*p == ':') *p = '.'; /* ':' separates a node from its output index */
  for (int k = 1; floe_graph_find(c->g, c->name); k++) {
    char *next = floe__asprintf("_%s/%s/%s_%d", what, a, b, k);
    if (!next) return NULL;
    for (char *p = next; *p; p++)
      if (*p == ':') *p = '.';
    floe__free(c->name);
    c->name = next;
  }
  return c->name;
}

/* ---- frames ---- */

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

static int frame_of_enter(Cutter *c, const FloeNode *enter, int parent) {
  const char *name = floe__node_attr_str(enter, "frame_name");
  for (int i = 0; i < c->num_frames; i++)
    if (c->frames[i].parent == parent && strcmp(c->frames[i].name, name) == 0) return i;
  if (!grow((void **)&c->frames, &c->cap_frames, c->num_frames + 1, sizeof *c->frames)) return -1;
  c->frames[c->num_frames] = (Frame){name, parent, floe__node_attr_int(enter, "parallel_iterations", 10), -1};
  return c->num_frames++;
}

static bool fed(const Cutter *c, int node, int index) {
  return c->fed && c->fed->is_fed(c->fed->arg, node, index);
}

bool floe__by_data_plane(FloeDType dt, const FloeShape *sh) {
  if (sh->rank < 0) return true;
  double bytes = (double)floe_dtype_size(dt);
  for (int d = 0; d < sh->rank; d++) {
    if (sh->dims[d] < 0) return true;
    bytes *= (double)sh->dims[d];
  }
  return bytes >= (double)(1 << 20);
}

/* A fed value read on another task crosses like any value (the session placed its node on
 * the caller's side); a fed value read on another device of this process is handed to that
 * device's piece directly. */
static bool fed_here(const Cutter *c, int node, int index, const FloeDevice *reader) {
  return fed(c, node, index) && !(reader->remote && !c->dev[node]->remote);
}

/* Frame of every needed node's outputs: breadth first from the roots, as the frame
 * scheduler assigns them (Enter enters a child frame, Exit leaves to the parent). */
static floe_code assign_frames(Cutter *c) {
  FloeGraph *g = c->g;
  int *in_frame = floe__malloc((size_t)(c->n0 ? c->n0 : 1) * sizeof *in_frame);
  int *queue = floe__malloc((size_t)(c->n0 ? c->n0 : 1) * sizeof *queue);
  if (!in_frame || !queue) {
    floe__free(in_frame);
    floe__free(queue);
    return oom(c);
  }
  int qh = 0, qt = 0;
  for (int i = 0; i < c->n0; i++) {
    in_frame[i] = -1;
    c->frame[i] = -1;
  }
  /* Roots: needed nodes none of whose live inputs (not fed) or control inputs are needed. */
  for (int i = 0; i < c->n0; i++) {
    if (!c->need[i]) continue;
    const FloeNode *n = g->nodes[i];
    bool root = true;
    for (int j = 0; j < n->num_inputs && root; j++)
      if (c->need[n->inputs[j].node->id] && !fed(c, n->inputs[j].node->id, n->inputs[j].index))
        root = false;
    for (int k = 0; k < n->num_control && root; k++)
      if (c->need[n->control[k]->id]) root = false;
    if (root) {
      in_frame[i] = 0;
      queue[qt++] = i;
    }
  }
  /* Consumers of each node (data edges not fed, and control edges), as CSR. */
  int *off = floe__calloc((size_t)c->n0 + 2, sizeof *off), *cons = NULL;
  int total = 0;
  for (int m = 0; m < c->n0 && off; m++) {
    if (!c->need[m]) continue;
    const FloeNode *mn = g->nodes[m];
    for (int j = 0; j < mn->num_inputs; j++) off[mn->inputs[j].node->id + 1]++;
    for (int k = 0; k < mn->num_control; k++) off[mn->control[k]->id + 1]++;
  }
  for (int i = 0; off && i < c->n0; i++) off[i + 1] += off[i];
  if (off) total = off[c->n0];
  int *fill = off ? floe__malloc((size_t)(c->n0 + 1) * sizeof *fill) : NULL;
  cons = fill ? floe__malloc((size_t)(total ? total : 1) * sizeof *cons) : NULL;
  if (!cons) {
    floe__free(off);
    floe__free(fill);
    floe__free(in_frame);
    floe__free(queue);
    return oom(c);
  }
  memcpy(fill, off, (size_t)(c->n0 + 1) * sizeof *fill);
  for (int m = 0; m < c->n0; m++) {
    if (!c->need[m]) continue;
    const FloeNode *mn = g->nodes[m];
    for (int j = 0; j < mn->num_inputs; j++)
      if (!fed(c, mn->inputs[j].node->id, mn->inputs[j].index))
        cons[fill[mn->inputs[j].node->id]++] = m;
    for (int k = 0; k < mn->num_control; k++) cons[fill[mn->control[k]->id]++] = m;
  }
  floe_code rc = FLOE_OK;
  while (qh < qt && rc == FLOE_OK) {
    int p = queue[qh++];
    const FloeNode *pn = g->nodes[p];
    int f = in_frame[p];
    if (is_op(pn, "Enter")) {
      f = frame_of_enter(c, pn, f);
      if (f < 0) rc = oom(c);
    } else if (is_op(pn, "Exit") && f > 0) {
      f = c->frames[f].parent;
    }
    if (is_op(pn, "LoopCond") && in_frame[p] > 0) c->frames[in_frame[p]].loop_cond = p;
    c->frame[p] = f;
    for (int e = off[p]; e < fill[p]; e++) {
      int m = cons[e];
      if (in_frame[m] >= 0) continue;
      in_frame[m] = f;
      queue[qt++] = m;
    }
  }
  floe__free(off);
  floe__free(fill);
  floe__free(cons);
  for (int i = 0; i < c->n0; i++)
    if (c->need[i] && c->frame[i] < 0) c->frame[i] = 0; /* on a cycle: the executor says why */
  floe__free(in_frame);
  floe__free(queue);
  return rc;
}

/* ---- pairs ---- */

static void set_pair_attrs(FloeNodeBuilder *b, const char *tensor, FloeDevice *src, FloeDevice *dst) {
  floe_node_set_attr_string(b, "tensor_name", tensor);
  floe_node_set_attr_string(b, "send_device", src->name);
  floe_node_set_attr_int(b, "send_device_incarnation", (int64_t)floe__device_incarnation(src));
  floe_node_set_attr_string(b, "recv_device", dst->name);
}

/* The _Recv on dst of producer `node`'s output `index` (-1: its control edge), made with its
 * _Send the first time. */
static FloeNode *recv_of(Cutter *c, int node, int index, FloeDevice *dst) {
  for (int i = 0; i < c->num_pairs; i++)
    if (c->pairs[i].node == node && c->pairs[i].index == index && c->pairs[i].dst == dst)
      return c->pairs[i].recv;
  FloeGraph *g = c->g;
  FloeNode *src = g->nodes[node];
  FloeDevice *sdev = c->dev[node];
  int frame = c->frame[node];
  char *tensor = index >= 0 ? floe__asprintf("%s:%d", src->name, index)
                             : floe__asprintf("^%s", src->name);
  if (!tensor) {
    oom(c);
    return NULL;
  }
  FloeNodeBuilder *b = floe_node_begin(g, index >= 0 ? "_Send" : "_ControlSend",
                                       unique(c, "send", tensor, dst->short_name));
  if (index >= 0)
    floe_node_add_input(b, (FloeOutput){src, index});
  else
    floe_node_add_control_input(b, src);
  set_pair_attrs(b, tensor, sdev, dst);
  floe_node_set_device(b, sdev->name);
  FloeNode *send = floe_node_finish(b);
  if (adopt(c, send, sdev, frame) != FLOE_OK) {
    floe__free(tensor);
    return NULL;
  }
  c->sends++;
  b = floe_node_begin(g, "_Recv", unique(c, "recv", tensor, dst->short_name));
  set_pair_attrs(b, tensor, sdev, dst);
  floe__free(tensor);
  floe_node_set_device(b, dst->name);
  if (index >= 0) {
    floe_node_set_attr_type(b, "T", src->out_dtypes[index]);
    floe_node_set_attr_shape(b, "shape", src->out_shapes[index]);
  } else {
    floe_node_set_attr_type(b, "T", FLOE_F32);
    floe_node_set_attr_shape(b, "shape", (FloeShape){.rank = 1, .dims = {0}});
  }
  FloeNode *recv = floe_node_finish(b);
  if (adopt(c, recv, dst, frame) != FLOE_OK) return NULL;
  if (!grow((void **)&c->pairs, &c->cap_pairs, c->num_pairs + 1, sizeof *c->pairs)) {
    oom(c);
    return NULL;
  }
  c->pairs[c->num_pairs++] = (Pair){node, index, dst, recv};
  if (frame > 0) {
    if (!grow((void **)&c->frame_recvs, &c->cap_frame_recvs, c->num_frame_recvs + 1, sizeof(int))) {
      oom(c);
      return NULL;
    }
    c->frame_recvs[c->num_frame_recvs++] = recv->id;
  }
  return recv;
}

/* A plumbing node "_what/a/d" of op on d in frame, reading ins (a Merge takes them as its
 * one list). NULL with c->st set on failure. */
static FloeNode *plumb(Cutter *c, const char *op, const char *what, const char *a, FloeDevice *d,
                       int frame, const FloeOutput *ins, int n) {
  FloeNodeBuilder *b = floe_node_begin(c->g, op, unique(c, what, a, d->short_name));
  if (strcmp(op, "Merge") == 0)
    floe_node_add_input_list(b, ins, n);
  else
    for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  floe_node_set_device(b, d->name);
  FloeNode *node = floe_node_finish(b);
  return adopt(c, node, d, frame) == FLOE_OK ? node : NULL;
}

/* An Enter of `in` into frame_name (its frame index `frame`) on d. */
static FloeNode *enter_node(Cutter *c, const char *what, const char *a, FloeDevice *d, int frame,
                            FloeOutput in, const char *frame_name, bool is_constant,
                            int64_t parallel) {
  FloeNodeBuilder *b = floe_node_begin(c->g, "Enter", unique(c, what, a, d->short_name));
  floe_node_add_input(b, in);
  floe_node_set_attr_string(b, "frame_name", frame_name);
  floe_node_set_attr_bool(b, "is_constant", is_constant);
  floe_node_set_attr_int(b, "parallel_iterations", parallel);
  floe_node_set_device(b, d->name);
  FloeNode *node = floe_node_finish(b);
  return adopt(c, node, d, frame) == FLOE_OK ? node : NULL;
}

/* An Enter's value crosses devices before it enters: a copy of the Enter on dst reads the
 * transferred input in the parent frame. (Sent from inside the frame, a non-constant Enter's
 * value would exist in iteration 0 only, while dst's _Recv waits in every iteration.) */
static FloeNode *enter_copy(Cutter *c, FloeNode *enter, FloeDevice *dst) {
  for (int i = 0; i < c->num_pairs; i++)
    if (c->pairs[i].node == enter->id && c->pairs[i].index == -2 && c->pairs[i].dst == dst)
      return c->pairs[i].recv;
  FloeOutput in = enter->inputs[0];
  if (c->need[in.node->id] && !fed(c, in.node->id, in.index) && c->dev[in.node->id] != dst) {
    FloeNode *r = recv_of(c, in.node->id, in.index, dst);
    if (!r) return NULL;
    in = (FloeOutput){r, 0};
  }
  FloeNode *copy = enter_node(c, "enter", enter->name, dst, c->frame[enter->id], in,
                              floe__node_attr_str(enter, "frame_name"),
                              floe__node_attr_bool(enter, "is_constant", false),
                              floe__node_attr_int(enter, "parallel_iterations", 10));
  if (!copy) return NULL;
  if (!grow((void **)&c->pairs, &c->cap_pairs, c->num_pairs + 1, sizeof *c->pairs)) {
    oom(c);
    return NULL;
  }
  c->pairs[c->num_pairs++] = (Pair){enter->id, -2, dst, copy};
  return copy;
}

static floe_code replace_control(FloeNode *n, FloeNode *old, FloeNode *repl, FloeStatus *st) {
  for (int k = 0; k < n->num_control; k++)
    if (n->control[k] == old) {
      for (int m = 0; m < n->num_control; m++)
        if (n->control[m] == repl) { /* already there: drop old */
          n->control[k] = n->control[--n->num_control];
          return FLOE_OK;
        }
      n->control[k] = repl;
      return FLOE_OK;
    }
  return floe_status_set(st, FLOE_INTERNAL, "node '%s' has no control input '%s'", n->name,
                         old->name);
}

/* Cuts every edge of the input graph whose ends are on different devices. */
static floe_code cut_edges(Cutter *c) {
  FloeGraph *g = c->g;
  for (int i = 0; i < c->n0; i++) {
    if (!c->need[i]) continue;
    FloeNode *n = g->nodes[i];
    for (int j = 0; j < n->num_inputs; j++) {
      const FloeNode *src = n->inputs[j].node;
      int idx = n->inputs[j].index;
      if (!c->need[src->id] || fed_here(c, src->id, idx, c->dev[i]) ||
          c->dev[src->id] == c->dev[i])
        continue;
      if (src->out_dtypes[idx] == FLOE_RESOURCE)
        return floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                               "node '%s' (%s) on %s reads the handle of '%s' on %s: a "
                               "variable's handle and the ops that use it must be on one device "
                               "(drop one of the device requests, or allow soft placement)",
                               n->name, n->op->name, c->dev[i]->short_name, src->name,
                               c->dev[src->id]->short_name);
      if (is_op(n, "Merge") && is_op(src, "NextIteration"))
        return floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                               "loop back edge '%s' (%s) -> '%s' (%s) crosses devices: a "
                               "NextIteration must be on its Merge's device",
                               src->name, c->dev[src->id]->short_name, n->name,
                               c->dev[i]->short_name);
      FloeNode *recv = is_op(src, "Enter") ? enter_copy(c, g->nodes[src->id], c->dev[i])
                                           : recv_of(c, src->id, idx, c->dev[i]);
      if (!recv) return floe_status_code(c->st);
      n = g->nodes[i]; /* the node array may have moved; nodes did not */
      if (floe__node_set_input(n, j, (FloeOutput){recv, 0}, c->st) != FLOE_OK)
        return floe_status_code(c->st);
    }
    for (int k = 0; k < n->num_control; k++) {
      FloeNode *src = n->control[k];
      if (src->id >= c->n0 || !c->need[src->id] || c->dev[src->id] == c->dev[i]) continue;
      FloeNode *recv = recv_of(c, src->id, -1, c->dev[i]);
      if (!recv || replace_control(n, src, recv, c->st) != FLOE_OK) return floe_status_code(c->st);
      k = -1; /* the list changed: scan again (cut sources are skipped now) */
    }
  }
  return FLOE_OK;
}

/* ---- control loops ---- */


static CtlLoop *control_loop(Cutter *c, int frame, FloeDevice *d);

/* A scalar in frame `frame` on d that exists once per live iteration of it: the source of a
 * child frame's control loop. */
static FloeOutput loop_source(Cutter *c, int frame, FloeDevice *d) {
  if (frame == 0) {
    FloeTensor *v = floe_tensor_scalar_f32(0.0f, c->st);
    if (!v) return (FloeOutput){NULL, 0};
    FloeNodeBuilder *b = floe_node_begin(c->g, "Const", unique(c, "ctl_src", d->short_name, "0"));
    floe_node_set_attr_tensor(b, "value", v);
    floe_node_set_attr_type(b, "dtype", FLOE_F32);
    floe_node_set_device(b, d->name);
    floe_tensor_release(v);
    FloeNode *k = floe_node_finish(b);
    if (adopt(c, k, d, 0) != FLOE_OK) return (FloeOutput){NULL, 0};
    return (FloeOutput){k, 0};
  }
  CtlLoop *p = control_loop(c, frame, d);
  return p ? (FloeOutput){p->sw, 1} : (FloeOutput){NULL, 0};
}

static CtlLoop *control_loop(Cutter *c, int frame, FloeDevice *d) {
  for (int i = 0; i < c->num_loops; i++)
    if (c->loops[i].frame == frame && c->loops[i].dev == d) return &c->loops[i];
  Frame *f = &c->frames[frame];
  if (f->loop_cond < 0) {
    floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                    "while loop '%s' spans devices but its LoopCond is not part of the run",
                    f->name);
    return NULL;
  }
  FloeOutput src = loop_source(c, f->parent, d);
  if (!src.node) return NULL;
  FloeNode *enter = enter_node(c, "ctl_enter", f->name, d, frame, src, f->name, false,
                               f->parallel);
  if (!enter) return NULL;
  FloeOutput two[2] = {{enter, 0}, {enter, 0}}; /* the back edge is set below */
  FloeNode *merge = plumb(c, "Merge", "ctl_merge", f->name, d, frame, two, 2);
  if (!merge) return NULL;
  /* Registered before the pred's _Recv is made, which waits for this Merge. */
  if (!grow((void **)&c->loops, &c->cap_loops, c->num_loops + 1, sizeof *c->loops)) {
    oom(c);
    return NULL;
  }
  int me = c->num_loops++;
  c->loops[me] = (CtlLoop){frame, d, merge, NULL};
  int lc = f->loop_cond;
  FloeOutput pred = {c->g->nodes[lc], 0};
  if (c->dev[lc] != d) {
    FloeNode *r = recv_of(c, lc, 0, d);
    if (!r) return NULL;
    pred = (FloeOutput){r, 0};
  }
  FloeOutput sw_in[2] = {{merge, 0}, pred};
  FloeNode *sw = plumb(c, "Switch", "ctl_switch", f->name, d, frame, sw_in, 2);
  if (!sw) return NULL;
  FloeOutput nx_in = {sw, 1};
  FloeNode *next = plumb(c, "NextIteration", "ctl_next", f->name, d, frame, &nx_in, 1);
  if (!next) return NULL;
  if (floe__node_set_input(merge, 1, (FloeOutput){next, 0}, c->st) != FLOE_OK) return NULL;
  c->loops[me].sw = sw;
  return &c->loops[me];
}

/* Every _Recv inside a frame waits for its device's control loop of that frame. The list
 * grows while it is walked (a control loop's pred is a _Recv too). */
static floe_code attach_recvs(Cutter *c) {
  for (int i = 0; i < c->num_frame_recvs; i++) {
    FloeNode *r = c->g->nodes[c->frame_recvs[i]];
    CtlLoop *l = control_loop(c, c->frame[r->id], c->dev[r->id]);
    if (!l) return floe_status_code(c->st);
    if (floe__node_add_control(r, l->merge, c->st) != FLOE_OK) return floe_status_code(c->st);
  }
  return FLOE_OK;
}

/* ---- entry ---- */

/* Where each fetch is read: a _Recv on the client for a large value made on another task. */
static floe_code route_fetches(Cutter *c, const FloePartitionFetches *f, FloeOutput *at) {
  for (int k = 0; k < f->num; k++) {
    int node = f->node[k], idx = f->index[k];
    FloeNode *src = c->g->nodes[node];
    at[k] = (FloeOutput){src, idx};
    if (!f->client || !c->need[node] || fed(c, node, idx) || !c->dev[node]->remote ||
        c->frame[node] != 0 || !floe__by_data_plane(src->out_dtypes[idx], &src->out_shapes[idx]))
      continue;
    FloeNode *recv = recv_of(c, node, idx, f->client);
    if (!recv) return floe_status_code(c->st);
    at[k] = (FloeOutput){recv, 0};
  }
  return FLOE_OK;
}

floe_code floe__partition(const FloeGraph *g, const bool *need, FloeDevice *const *device,
                          const FloePartitionFed *fedp, const FloePartitionFetches *fetches,
                          FloePartition *out, FloeStatus *st) {
  memset(out, 0, sizeof *out);
  Cutter c;
  memset(&c, 0, sizeof c);
  c.st = st;
  c.fed = fedp;
  c.n0 = g->num_nodes;
  c.g = floe__graph_clone(g, st);
  if (!c.g) return floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY;
  int cap = 0;
  if (!grow((void **)&c.dev, &cap, c.n0 + 1, sizeof *c.dev)) goto err_oom;
  cap = 0;
  if (!grow((void **)&c.need, &cap, c.n0 + 1, sizeof *c.need)) goto err_oom;
  cap = 0;
  if (!grow((void **)&c.frame, &cap, c.n0 + 1, sizeof *c.frame)) goto err_oom;
  c.cap = cap;
  for (int i = 0; i < c.n0; i++) {
    c.need[i] = need[i];
    c.dev[i] = need[i] ? device[i] : NULL;
  }
  if (!grow((void **)&c.frames, &c.cap_frames, 1, sizeof *c.frames)) goto err_oom;
  c.frames[0] = (Frame){"", -1, 1, -1};
  c.num_frames = 1;
  floe_code rc = assign_frames(&c);
  if (rc == FLOE_OK) rc = cut_edges(&c);
  if (rc == FLOE_OK && fetches && fetches->num > 0) {
    if (!(out->fetch = floe__calloc((size_t)fetches->num, sizeof *out->fetch))) goto err_oom;
    rc = route_fetches(&c, fetches, out->fetch);
  }
  if (rc == FLOE_OK) rc = attach_recvs(&c);
  if (rc == FLOE_OK && floe_graph_status(c.g) != FLOE_OK)
    rc = floe_status_set(st, floe_graph_status(c.g), "partitioning: %s", c.g->error_msg ? c.g->error_msg : "a node could not be added");
  if (rc != FLOE_OK) goto err_free;
  for (int i = 0; i < c.n0 && !out->has_cf; i++)
    if (c.need[i] && (is_op(g->nodes[i], "Switch") || is_op(g->nodes[i], "Merge") ||
                      is_op(g->nodes[i], "Enter")))
      out->has_cf = true;
  out->graph = c.g;
  out->device = c.dev;
  out->need = c.need;
  out->num_sends = c.sends;
  floe__free(c.name);
  floe__free(c.frame);
  floe__free(c.frames);
  floe__free(c.loops);
  floe__free(c.pairs);
  floe__free(c.frame_recvs);
  return FLOE_OK;

err_oom:
  rc = oom(&c);
err_free:
  floe__free(out->fetch);
  out->fetch = NULL;
  floe__free(c.name);
  floe_graph_free(c.g);
  floe__free(c.dev);
  floe__free(c.need);
  floe__free(c.frame);
  floe__free(c.frames);
  floe__free(c.loops);
  floe__free(c.pairs);
  floe__free(c.frame_recvs);
  return rc;
}

void floe__partition_free(FloePartition *p) {
  if (!p) return;
  floe_graph_free(p->graph);
  floe__free(p->device);
  floe__free(p->need);
  floe__free(p->fetch);
  memset(p, 0, sizeof *p);
}
