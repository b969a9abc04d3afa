/* SPDX-License-Identifier: Apache-2.0 */
/* placer.c - which device runs each node, and what the step is estimated to cost.
 *
 * Hard constraints come first: a node's requested device (full or partial name; with
 * allow_soft_placement a device that lacks a kernel gives way to one that has it), kernel
 * availability, colocation groups (a variable's handle with every op that uses it; a loop's
 * NextIteration with its Merge) and device memory capacity. Among what is left:
 *
 *  - without a device list (the default): the requested device, else the session's default
 *    device, else the first device with a kernel, so a program that names no device runs
 *    where it always did;
 *  - with a device list (FloeSessionOptions.devices): the placer of the TensorFlow paper. It
 *    simulates the step node by node in a topological order, and puts each node (each
 *    colocation group, at its first node) on the device where it would finish earliest: the
 *    later of the device being free and every input having arrived (an input from another
 *    device pays the transfer), plus the node's own time there. A node's time is a launch
 *    cost plus the larger of its FLOPs over the device's rate (matrix-class ops at
 *    peak_flops of their dtype, other work at vector_flops) and its bytes over the device's
 *    memory bandwidth, all from the inferred shapes. The estimated step time is when the
 *    last node finishes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "session.h"

/* ---- the cost model ---- */

static int64_t known(int64_t d) { return d < 0 ? 1 : d; } /* an unknown dim counts as 1 */

static int64_t shape_elems(const FloeShape *s) {
  if (s->rank < 0) return 1;
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= known(s->dims[i]);
  return n;
}

static double out_bytes(const FloeNode *n, int i) {
  size_t es = floe_dtype_size(n->out_dtypes[i]);
  return (double)shape_elems(&n->out_shapes[i]) * (double)(es ? es : 4);
}

static double in_bytes(const FloeNode *n, int j) {
  return out_bytes(n->inputs[j].node, n->inputs[j].index);
}

static bool op_is(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

/* Matrix-class work (MatMul, BatchMatMul, convolutions and their gradients): FLOPs, or -1
 * for other ops. */
static double matrix_flops(const FloeNode *n) {
  const char *op = n->op->name;
  if (op_is(n, "MatMul") || op_is(n, "BatchMatMul")) {
    /* out [.., M, N]; K from input 0's dims, whichever of its last two is not M */
    const FloeShape *a = &n->inputs[0].node->out_shapes[n->inputs[0].index];
    const FloeShape *o = &n->out_shapes[0];
    if (a->rank < 2 || o->rank < 2) return 2.0 * (double)shape_elems(o);
    bool ta = floe__node_attr_bool(n, "transpose_a", false) || floe__node_attr_bool(n, "adj_x", false);
    int64_t k = known(a->dims[a->rank - (ta ? 2 : 1)]);
    return 2.0 * (double)shape_elems(o) * (double)k;
  }
  if (strncmp(op, "Conv2D", 6) == 0 || strncmp(op, "_FusedConv2D", 12) == 0) {
    /* every variant does (forward output elements) x (kh*kw*cin) multiply-adds */
    bool bfilter = op_is(n, "Conv2DBackpropFilter"), binput = op_is(n, "Conv2DBackpropInput");
    const FloeShape *filt = bfilter ? &n->out_shapes[0]
                                    : &n->inputs[1].node->out_shapes[n->inputs[1].index];
    const FloeShape *fwd_out = (bfilter || binput) && n->num_inputs > 2
                                   ? &n->inputs[2].node->out_shapes[n->inputs[2].index]
                                   : &n->out_shapes[0];
    if (filt->rank != 4) return 2.0 * (double)shape_elems(fwd_out);
    double per = (double)known(filt->dims[0]) * (double)known(filt->dims[1]) *
                 (double)known(filt->dims[2]);
    return 2.0 * (double)shape_elems(fwd_out) * per;
  }
  return -1;
}

/* FLOPs of other work: a handful per output element (more for transcendental ops), or per
 * input element for reductions. */
static double vector_flops(const FloeNode *n) {
  double in = 0, out = 0;
  for (int j = 0; j < n->num_inputs; j++) {
    size_t es = floe_dtype_size(n->inputs[j].node->out_dtypes[n->inputs[j].index]);
    if (es) in = fmax(in, in_bytes(n, j) / (double)es);
  }
  for (int i = 0; i < n->num_outputs; i++) {
    size_t es = floe_dtype_size(n->out_dtypes[i]);
    if (es) out += out_bytes(n, i) / (double)es;
  }
  const char *op = n->op->name;
  double per = 1;
  if (strstr(op, "Softmax") || op_is(n, "Exp") || op_is(n, "Log") || op_is(n, "Tanh") ||
      op_is(n, "Sigmoid") || strstr(op, "Pool") || strstr(op, "LSTM"))
    per = 8;
  return per * fmax(in, out);
}

/* Nodes the executor routes itself or that only move references: no kernel time. */
static bool is_free(const FloeNode *n) {
  static const char *const ops[] = {"Const", "Placeholder", "Identity", "NoOp", "Reshape",
                                    "Squeeze", "ExpandDims", "Shape", "Size", "Rank",
                                    "Switch", "Merge", "Enter", "Exit", "NextIteration",
                                    "LoopCond", "ControlTrigger", "VarHandleOp", "StopGradient"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (op_is(n, ops[i])) return true;
  return false;
}

double floe__cost_node(const FloeNode *n, const FloeDevice *d) {
  if (is_free(n)) return 0;
  const FloeDeviceProps *p = &d->props;
  double launch = FLOE_HAS_FIELD(p, FloeDeviceProps, launch_overhead) ? p->launch_overhead : 0;
  if (launch <= 0) launch = 1e-6;
  FloeDType dt = n->num_outputs > 0 ? n->out_dtypes[0] : FLOE_F32;
  if ((unsigned)dt >= FLOE_DTYPE_LIMIT) dt = FLOE_F32;
  double peak = p->peak_flops[dt] > 0 ? p->peak_flops[dt] : p->peak_flops[FLOE_F32];
  if (peak <= 0) peak = 1e10;
  double flops = matrix_flops(n), rate = peak;
  if (flops < 0) {
    flops = vector_flops(n);
    double v = FLOE_HAS_FIELD(p, FloeDeviceProps, vector_flops) ? p->vector_flops : 0;
    if (v > 0) rate = v;
  }
  double bytes = 0;
  for (int j = 0; j < n->num_inputs; j++) bytes += in_bytes(n, j);
  for (int i = 0; i < n->num_outputs; i++) bytes += out_bytes(n, i);
  double bw = p->memory_bandwidth > 0 ? p->memory_bandwidth : 10e9;
  return launch + fmax(flops / rate, bytes / bw);
}

double floe__cost_transfer(double bytes, const FloeDevice *src, const FloeDevice *dst) {
  if (src == dst || !src || !dst) return 0;
  if (src->remote || dst->remote) { /* across tasks: the link's figures */
    const FloeDevice *r = dst->remote ? dst : src;
    if (src->remote && dst->remote && src->task == dst->task && !strcmp(src->job, dst->job) &&
        src->host_memory && dst->host_memory)
      return 2e-6; /* both in one other task: by reference there */
    double bw = r->link_bandwidth > 0 ? r->link_bandwidth : 1e9;
    double lat = r->link_latency > 0 ? r->link_latency : 100e-6;
    return lat + bytes / bw;
  }
  if (src->host_memory && dst->host_memory) return 2e-6; /* handed over by reference */
  double bw = 1e30;
  if (!src->host_memory) bw = fmin(bw, src->props.device_to_host_bandwidth > 0 ? src->props.device_to_host_bandwidth : 10e9);
  if (!dst->host_memory) bw = fmin(bw, dst->props.host_to_device_bandwidth > 0 ? dst->props.host_to_device_bandwidth : 10e9);
  return 10e-6 + bytes / bw; /* a fixed cost per transfer (rendezvous, staging) */
}

/* ---- constraints ---- */

typedef struct Placer {
  FloeRuntime *rt;
  const FloeGraph *g;
  const bool *need;
  const FloePartitionFed *fed;
  const FloePlaceOptions *o;
  FloeDevice **cand;        /* the devices the placer may use */
  int num_cand;
  int *group;               /* colocation group (a representative node id) per node */
  int *next;                /* the group's next member after each node, ascending; -1: last.
                             * A group's first member is its representative (the smallest id),
                             * so `for (k = gid; k >= 0; k = next[k])` visits the group. */
  FloeDevice **req;         /* requested device per node (NULL: none) */
  FloePlacement *out;
  FloeStatus *st;
} Placer;

static int find_root(int *parent, int x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

static void unite(int *parent, int a, int b) {
  a = find_root(parent, a);
  b = find_root(parent, b);
  if (a != b) parent[a < b ? b : a] = a < b ? a : b; /* the smaller id leads */
}

/* Colocation: a resource handle with its readers; NextIteration with its Merge. */
static void colocate(Placer *pl) {
  const FloeGraph *g = pl->g;
  for (int i = 0; i < g->num_nodes; i++) pl->group[i] = i;
  for (int i = 0; i < g->num_nodes; i++) {
    if (!pl->need[i]) continue;
    const FloeNode *n = g->nodes[i];
    for (int j = 0; j < n->num_inputs; j++) {
      const FloeNode *src = n->inputs[j].node;
      if (!pl->need[src->id]) continue;
      if (src->out_dtypes[n->inputs[j].index] == FLOE_RESOURCE ||
          (op_is(src, "NextIteration") && op_is(n, "Merge")))
        unite(pl->group, i, src->id);
    }
  }
  for (int i = 0; i < g->num_nodes; i++) pl->group[i] = find_root(pl->group, i);
  /* Link each group's members in ascending order: walking i downwards and inserting each
   * right after its representative leaves every list ascending. */
  for (int i = 0; i < g->num_nodes; i++) pl->next[i] = -1;
  for (int i = g->num_nodes - 1; i >= 0; i--) {
    int gid = pl->group[i];
    if (gid != i) { /* insert i right after the representative */
      pl->next[i] = pl->next[gid];
      pl->next[gid] = i;
    }
  }
}

static bool is_placeholder(const FloeNode *n) { return op_is(n, "Placeholder"); }

/* A node whose outputs are all fed never runs: it stays where its consumers are. */
static bool all_fed(const Placer *pl, const FloeNode *n) {
  if (!pl->fed || n->num_outputs == 0) return false;
  for (int i = 0; i < n->num_outputs; i++)
    if (!pl->fed->is_fed(pl->fed->arg, n->id, i)) return false;
  return true;
}

static bool has_kernel(const Placer *pl, const FloeNode *n, const FloeDevice *d) {
  return floe__kernel_find(pl->rt, n, d->props.type, NULL) != NULL;
}

/* The devices that do have a kernel for n, as "cpu:0, tpu-sim:0" (into buf). */
static const char *kernel_devices(const Placer *pl, const FloeNode *n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < pl->rt->num_devices && used + 2 < len; i++) {
    if (!has_kernel(pl, n, pl->rt->devices[i])) continue;
    int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", pl->rt->devices[i]->short_name);
    if (w > 0) used += (size_t)w;
  }
  return used ? buf : "none";
}

/* Whether every needed member of group gid can run on d (requests and kernels). */
static bool group_fits(const Placer *pl, int gid, const FloeDevice *d) {
  const FloeGraph *g = pl->g;
  for (int i = gid; i >= 0; i = pl->next[i]) {
    if (!pl->need[i] || all_fed(pl, g->nodes[i])) continue;
    if (pl->req[i] && pl->req[i] != d) return false;
    if (!has_kernel(pl, g->nodes[i], d)) return false;
  }
  return true;
}

/* Resolves requests; with soft placement a request without a kernel is dropped. */
static floe_code resolve_requests(Placer *pl) {
  const FloeGraph *g = pl->g;
  for (int i = 0; i < g->num_nodes; i++) {
    pl->req[i] = NULL;
    const FloeNode *n = g->nodes[i];
    if (!pl->need[i] || !n->device || !n->device[0] || all_fed(pl, n)) continue;
    FloeDevice *d = floe__device_find(pl->rt, n->device, pl->o->allow_soft_placement ? NULL : pl->st);
    if (!d) {
      if (pl->o->allow_soft_placement) continue;
      floe__status_prefix(pl->st, "node '%s' (%s) requests device '%s'", n->name, n->op->name,
                          n->device);
      return floe_status_code(pl->st) ? floe_status_code(pl->st) : FLOE_NOT_FOUND;
    }
    if (!has_kernel(pl, n, d)) {
      if (pl->o->allow_soft_placement) continue;
      char list[256];
      FloeStatus why = {FLOE_OK, NULL}; /* names the dtypes and the kernels there are */
      floe__kernel_find(pl->rt, n, d->props.type, &why);
      floe_status_set(pl->st, FLOE_NOT_FOUND,
                      "node '%s' (%s) requests device '%s' (%s): %s; devices with a kernel for "
                      "it: %s (allow_soft_placement lets the placer move it)",
                      n->name, n->op->name, n->device, d->short_name, floe_status_message(&why),
                      kernel_devices(pl, n, list, sizeof list));
      floe_status_clear(&why);
      return FLOE_NOT_FOUND;
    }
    pl->req[i] = d;
  }
  return FLOE_OK;
}

static floe_code no_device(Placer *pl, const FloeNode *n) {
  char list[256];
  if (is_placeholder(n))
    return floe_status_set(pl->st, FLOE_INVALID_ARGUMENT,
                           "placeholder '%s' must be fed (use --feed %s=FILE.npy / a FloeFeed)",
                           n->name, n->name);
  if (pl->rt->num_devices == 0)
    return floe_status_set(pl->st, FLOE_NOT_FOUND,
                           "node '%s' (%s): no device to run it on: no plugin with devices was "
                           "loaded (check FLOE_PLUGIN_PATH and FLOE_PLUGINS)",
                           n->name, n->op->name);
  int gid = pl->group[n->id];
  for (int i = gid; i >= 0; i = pl->next[i]) {
    if (i == n->id || !pl->need[i]) continue;
    return floe_status_set(pl->st, FLOE_INVALID_ARGUMENT,
                           "node '%s' (%s) must share a device with '%s' (%s) (a variable with "
                           "the ops that use it, or a loop's NextIteration with its Merge), and "
                           "no allowed device can run both as requested; devices with a kernel "
                           "for '%s': %s",
                           n->name, n->op->name, pl->g->nodes[i]->name, pl->g->nodes[i]->op->name,
                           n->name, kernel_devices(pl, n, list, sizeof list));
  }
  return floe_status_set(pl->st, FLOE_NOT_FOUND,
                         "node '%s' (%s): no allowed device has a kernel for it; devices with "
                         "one: %s",
                         n->name, n->op->name, kernel_devices(pl, n, list, sizeof list));
}

/* ---- the simple rule ---- */

static floe_code place_simple(Placer *pl) {
  const FloeGraph *g = pl->g;
  for (int i = 0; i < g->num_nodes; i++) {
    if (!pl->need[i] || pl->out->device[i]) continue;
    const FloeNode *n = g->nodes[i];
    int gid = pl->group[i];
    FloeDevice *pick = NULL;
    for (int k = gid; k >= 0 && !pick; k = pl->next[k]) /* a request in the group decides */
      if (pl->need[k] && pl->req[k]) pick = pl->req[k];
    if (pick && !group_fits(pl, gid, pick)) pick = NULL;
    if (!pick && pl->o->default_device && group_fits(pl, gid, pl->o->default_device))
      pick = pl->o->default_device;
    for (int d = 0; d < pl->num_cand && !pick; d++)
      if (group_fits(pl, gid, pl->cand[d])) pick = pl->cand[d];
    if (!pick) {
      if (all_fed(pl, n)) continue;
      return no_device(pl, n);
    }
    for (int k = gid; k >= 0; k = pl->next[k])
      if (pl->need[k]) pl->out->device[k] = pick;
  }
  return FLOE_OK;
}

/* ---- the cost model's greedy simulation ---- */


/* The cost on dev of the group's needed members other than `except`. */
static double group_rest_cost(const Placer *pl, int gid, int except, const FloeDevice *dev) {
  double sum = 0;
  for (int k = gid; k >= 0; k = pl->next[k])
    if (k != except && pl->need[k] && !all_fed(pl, pl->g->nodes[k]))
      sum += floe__cost_node(pl->g->nodes[k], dev);
  return sum;
}

/* When n could start on dev: the device is free and every input (data or control) placed so
 * far has arrived, a cut edge paying its transfer. */
static double ready_at(const Placer *pl, const FloeNode *n, const FloeDevice *dev,
                       const double *finish, const double *busy) {
  double ready = busy[dev->id];
  for (int e = 0; e < n->num_inputs + n->num_control; e++) {
    bool data = e < n->num_inputs;
    const FloeNode *s = data ? n->inputs[e].node : n->control[e - n->num_inputs];
    const FloeDevice *sd = pl->out->device[s->id];
    if (pl->need[s->id] && sd)
      ready = fmax(ready, finish[s->id] + floe__cost_transfer(data ? in_bytes(n, e) : 0, sd, dev));
  }
  return ready;
}

/* Bytes a device holds for the step: its nodes' outputs (an upper bound: nothing is freed). */
static bool fits_memory(const FloeDevice *d, double used, double more) {
  return d->props.memory_bytes == 0 || used + more <= (double)d->props.memory_bytes;
}

static floe_code place_cost(Placer *pl) {
  const FloeGraph *g = pl->g;
  int count = 0;
  int *order = floe__graph_topo_order(pl->g, pl->need, &count);
  double *finish = floe__calloc((size_t)g->num_nodes + 1, sizeof *finish);
  double *busy = floe__calloc((size_t)floe__runtime_device_span(pl->rt) + 1, sizeof *busy);
  double *mem = floe__calloc((size_t)floe__runtime_device_span(pl->rt) + 1, sizeof *mem);
  floe_code rc = FLOE_OK;
  if (!order || !finish || !busy || !mem) {
    rc = floe_status_set(pl->st, FLOE_NO_MEMORY, "out of memory placing the graph");
    goto out;
  }
  double makespan = 0;
  for (int oi = 0; oi < count; oi++) {
    int i = order[oi];
    const FloeNode *n = g->nodes[i];
    if (all_fed(pl, n)) continue; /* fed: never runs, its value is wherever it is wanted */
    double out = 0;
    for (int k = 0; k < n->num_outputs; k++) out += out_bytes(n, k);
    FloeDevice *pick = pl->out->device[i]; /* set when its group was placed */
    double best = INFINITY, best_judged = INFINITY;
    /* The listed devices first; a node none of them can run goes to another device that has
     * a kernel for it (ops a device lacks stay elsewhere). */
    int ncand = pl->num_cand;
    bool any_listed = false;
    for (int d = 0; d < pl->num_cand && !any_listed && !pick; d++)
      any_listed = group_fits(pl, pl->group[i], pl->cand[d]);
    FloeDevice *const *cand = pl->cand;
    if (pick) { /* its group was placed already */
      cand = &pl->out->device[i];
      ncand = 1;
    } else if (!any_listed) {
      cand = pl->rt->devices;
      ncand = pl->rt->num_devices;
    }
    for (int d = 0; d < ncand; d++) {
      FloeDevice *dev = cand[d];
      if (pick && dev != pick) continue;
      if (!pick && !group_fits(pl, pl->group[i], dev)) continue;
      if (!pick && !fits_memory(dev, mem[dev->id], out)) continue;
      double end = ready_at(pl, n, dev, finish, busy) + floe__cost_node(n, dev);
      /* A group is decided at its first node, often a free one (a variable's handle):
       * judge the device by what the whole group will cost there. */
      double judged = end + (pick ? 0 : group_rest_cost(pl, pl->group[i], i, dev));
      if (judged < best_judged) {
        best_judged = judged;
        best = end;
        pl->out->device[i] = dev;
      }
    }
    if (!isfinite(best)) {
      rc = no_device(pl, n);
      goto out;
    }
    FloeDevice *dev = pl->out->device[i];
    if (!pick) /* the group goes where its first node did best */
      for (int k = pl->group[i]; k >= 0; k = pl->next[k])
        if (pl->need[k]) pl->out->device[k] = dev;
    finish[i] = best;
    busy[dev->id] = best;
    mem[dev->id] += out;
    if (pl->out->start) pl->out->start[i] = best - floe__cost_node(n, dev);
    if (pl->out->finish) pl->out->finish[i] = best;
    makespan = fmax(makespan, best);
  }
  pl->out->est_seconds = makespan;
out:
  floe__free(order);
  floe__free(finish);
  floe__free(busy);
  floe__free(mem);
  return rc;
}

/* Estimated step time of a given placement (the same simulation, devices fixed); a node's
 * time is secs[node] when secs is given and holds a value >= 0, else the cost model's. */
static void estimate(Placer *pl, const double *secs) {
  const FloeGraph *g = pl->g;
  int count = 0;
  int *order = floe__graph_topo_order(pl->g, pl->need, &count);
  double *finish = floe__calloc((size_t)g->num_nodes + 1, sizeof *finish);
  double *busy = floe__calloc((size_t)floe__runtime_device_span(pl->rt) + 1, sizeof *busy);
  double makespan = 0;
  for (int oi = 0; order && finish && busy && oi < count; oi++) {
    int i = order[oi];
    const FloeNode *n = g->nodes[i];
    FloeDevice *dev = pl->out->device[i];
    if (!dev) continue;
    double ready = ready_at(pl, n, dev, finish, busy);
    finish[i] = ready + (secs && secs[i] >= 0 ? secs[i] : floe__cost_node(n, dev));
    busy[dev->id] = finish[i];
    if (pl->out->start) pl->out->start[i] = ready;
    if (pl->out->finish) pl->out->finish[i] = finish[i];
    makespan = fmax(makespan, finish[i]);
  }
  pl->out->est_seconds = makespan;
  floe__free(order);
  floe__free(finish);
  floe__free(busy);
}

/* Greedy placement is myopic (a node goes where it finishes first, whatever that costs its
 * consumers), so the simplest alternatives are simulated too: everything on one listed
 * device (nodes it cannot run where they can). A single-device schedule is kept unless the
 * greedy one is estimated faster by more than SPLIT_MARGIN: a split schedule moves data the
 * model prices roughly (fixed transfer costs, host kernels slowed by their neighbours), and
 * within that error the simpler schedule measured as fast or faster (docs/benchmarks.md:
 * the LSTM's greedy schedule was estimated 1.2% faster than all on tpu-sim and measured
 * slower; the cnn's, 3.5% faster and measured 2-3% faster). */
#define SPLIT_MARGIN 0.03
static floe_code try_single_devices(Placer *pl) {
  if (pl->num_cand < 2) return FLOE_OK;
  FloePlacement *best = pl->out;
  FloeDevice **all = pl->cand;
  int num_all = pl->num_cand;
  size_t nn = (size_t)pl->g->num_nodes + 1;
  floe_code rc = FLOE_OK;
  bool greedy_kept = true;
  for (int d = 0; d < num_all && rc == FLOE_OK; d++) {
    FloePlacement alt = {.num_nodes = pl->g->num_nodes};
    alt.device = floe__calloc(nn, sizeof *alt.device);
    alt.start = floe__calloc(nn, sizeof *alt.start);
    alt.finish = floe__calloc(nn, sizeof *alt.finish);
    if (!alt.device || !alt.start || !alt.finish) {
      floe__placement_free(&alt);
      return floe_status_set(pl->st, FLOE_NO_MEMORY, "out of memory placing the graph");
    }
    FloeDevice *one[1] = {all[d]};
    pl->cand = one;
    pl->num_cand = 1;
    pl->out = &alt;
    FloeStatus *keep = pl->st;
    FloeStatus quiet = {FLOE_OK, NULL};
    pl->st = &quiet; /* an alternative that cannot place everything is just not taken */
    floe_code arc = place_cost(pl);
    pl->st = keep;
    floe_status_clear(&quiet);
    pl->cand = all;
    pl->num_cand = num_all;
    pl->out = best;
    double bar = best->est_seconds * (greedy_kept ? 1 + SPLIT_MARGIN : 1);
    if (arc == FLOE_OK && alt.est_seconds < bar) {
      greedy_kept = false;
      FloePlacement old = *best;
      *best = alt;
      floe__placement_free(&old);
    } else {
      floe__placement_free(&alt);
    }
  }
  return rc;
}

floe_code floe__place(FloeRuntime *rt, const FloeGraph *g, const bool *need,
                      const FloePartitionFed *fed, const FloePlaceOptions *o, FloePlacement *out,
                      FloeStatus *st) {
  memset(out, 0, sizeof *out);
  out->num_nodes = g->num_nodes;
  size_t nn = (size_t)g->num_nodes + 1;
  Placer pl = {rt, g, need, fed, o, NULL, 0, NULL, NULL, NULL, out, st};
  out->device = floe__calloc(nn, sizeof *out->device);
  out->start = floe__calloc(nn, sizeof *out->start);
  out->finish = floe__calloc(nn, sizeof *out->finish);
  pl.cand = floe__calloc((size_t)floe__runtime_device_span(rt) + (size_t)o->num_devices + 1,
                        sizeof *pl.cand);
  pl.group = floe__calloc(nn, sizeof *pl.group);
  pl.next = floe__calloc(nn, sizeof *pl.next);
  pl.req = floe__calloc(nn, sizeof *pl.req);
  floe_code rc = FLOE_OK;
  if (!out->device || !out->start || !out->finish || !pl.cand || !pl.group || !pl.next || !pl.req) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory placing the graph");
    goto out;
  }
  if (o->num_devices > 0) {
    for (int i = 0; i < o->num_devices; i++) pl.cand[pl.num_cand++] = o->devices[i];
  } else {
    for (int i = 0; i < rt->num_devices; i++) pl.cand[pl.num_cand++] = rt->devices[i];
  }
  colocate(&pl);
  rc = resolve_requests(&pl);
  if (rc != FLOE_OK) goto out;
  if (o->num_devices > 0) {
    /* requested devices outside the list still count: a request is a hard constraint */
    for (int i = 0; i < g->num_nodes; i++) {
      if (!pl.req[i]) continue;
      bool listed = false;
      for (int d = 0; d < pl.num_cand && !listed; d++) listed = pl.cand[d] == pl.req[i];
      if (!listed) pl.cand[pl.num_cand++] = pl.req[i];
    }
    rc = place_cost(&pl);
    if (rc == FLOE_OK) rc = try_single_devices(&pl);
  } else {
    rc = place_simple(&pl);
    if (rc == FLOE_OK) estimate(&pl, NULL);
  }
  /* Fed nodes never run; give them their first consumer's device for the record. */
  for (int i = 0; rc == FLOE_OK && i < g->num_nodes; i++)
    if (need[i] && !out->device[i]) out->device[i] = pl.num_cand ? pl.cand[0] : NULL;
out:
  floe__free(pl.cand);
  floe__free(pl.group);
  floe__free(pl.next);
  floe__free(pl.req);
  if (rc != FLOE_OK) floe__placement_free(out);
  return rc;
}

void floe__placement_free(FloePlacement *p) {
  if (!p) return;
  floe__free(p->device);
  floe__free(p->start);
  floe__free(p->finish);
  memset(p, 0, sizeof *p);
}

/* The schedule of p->device as it stands, with node times from secs (NULL or < 0: the
 * cost model's). */
void floe__placement_estimate(FloeRuntime *rt, const FloeGraph *g, const bool *need,
                              const double *secs, FloePlacement *p) {
  FloePlaceOptions o = {0};
  Placer pl = {rt, g, need, NULL, &o, NULL, 0, NULL, NULL, NULL, p, NULL};
  estimate(&pl, secs);
}
