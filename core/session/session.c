/* SPDX-License-Identifier: Apache-2.0 */
/* session.c - the application's entry to running graphs: resolve names, prune, fuse,
 * place, cache one executor per (feeds, fetches, targets) signature, run.
 *
 * A run resolves its names to (node id, output) pairs and sorts them into a canonical
 * signature, so "x" and "x:0", or the same fetches in another order, share one executor.
 * Executors are built outside the session lock; a run that finds its signature being built
 * by another thread waits for it instead of building a second one. Fusion (fuse.c) rewrites
 * a private clone of the graph for the run's nodes, kept with the executor; FLOE_FUSION=0 in
 * the environment turns it off.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

typedef struct CacheEntry {
  int *key;               /* the canonical signature (see make_key) */
  int key_len;
  uint64_t hash;
  FloeMultiExec *exec;    /* NULL while its builder works */
  FloeGraph *graph;       /* the fused or partitioned clone exec runs, or NULL (it runs the
                             session's) */
  struct CacheEntry *next;
} CacheEntry;

/* The kernel instance of a stateful node, shared by every executor of the session. */
typedef struct SharedKernel {
  const FloeKernelReg *kernel;
  void *state;
  bool made, created;
} SharedKernel;

struct FloeSession {
  FloeGraph *graph;       /* the session's own copy */
  FloeRuntime *rt;        /* borrowed */
  FloeDevice *default_device; /* NULL: the first device with a kernel */
  FloeDevice **devices;    /* FloeSessionOptions.devices: the cost model places among these */
  int num_devices;
  bool soft_placement;     /* allow_soft_placement */
  bool compress;           /* compress_transfers: f32 crosses devices as bf16 */
  bool inline_inexpensive;
  pthread_mutex_t mu;
  pthread_cond_t built_cv; /* broadcast when an entry stops being built */
  CacheEntry *cache;       /* guarded by mu */
  SharedKernel *shared;    /* by graph node id, allocated on first use; guarded by mu */
  atomic_int num_cached;
  FloeResourceMgr *resources; /* the session's variables; outlives its executors */
  bool borrowed_resources; /* a sibling's: its parent's, freed with the parent */
  atomic_int profiling;    /* FLOE__PROF_* bits (set_profiling, set_tracing); read by every
                              executor */
  FloeTraceSink *trace;    /* events while FLOE__PROF_TRACE is set */
  _Atomic int64_t xfers, xfers_by_ref, wire_bytes, tensor_bytes; /* transfer totals */
  FloeExecStep **active;   /* steps running now (guarded by mu), for cancel and close */
  int num_active, cap_active;
  bool closed;             /* floe_session_close ran (guarded by mu) */
  FloeSessionCluster cluster; /* a cluster session's (remote NULL: none) */
  /* Steps whose runs returned at their deadline while asynchronous kernels had not called
   * done (guarded by mu): they use the session's executors until those kernels finish. */
  int left_behind;
  bool free_pending;       /* floe_session_free ran meanwhile: the last of them frees s */
  char **labels;           /* profile rows' names of fused nodes ("_FusedConv(Conv+Relu)"), */
  int num_labels;          /* kept for the session's life (guarded by mu) */
};

/* One resolved feed or fetch; pos is its place in the caller's arrays. */
typedef struct SigItem {
  int node_id, index, pos;
} SigItem;

/* Everything one run works with, resolved and in canonical order. */
typedef struct RunSig {
  SigItem *feeds, *fetches;
  int *targets;            /* node ids */
  int num_feeds, num_fetches, num_targets; /* unique, sorted */
  int *fetch_map;          /* caller fetch i -> canonical fetch */
} RunSig;

/* "cpu,tpu-sim:1": each item a device name; one without an index means every device of its
 * type. *out (floe__malloc'd, caller frees) lists each device once, in the order given. */
static floe_code parse_devices(FloeRuntime *rt, const char *list, FloeDevice ***out, int *n,
                               FloeStatus *st) {
  int nr;
  FloeDevice **remote = floe__runtime_remote(rt, &nr);
  *out = floe__calloc((size_t)(rt->num_devices + nr) + 1, sizeof **out);
  *n = 0;
  if (!*out) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the device list");
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[160];
    if (len == 0 || len >= sizeof item) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "session devices \"%s\": an empty or over-long item; give names such as "
                      "\"cpu,tpu-sim\" or \"cpu:0,cuda:0\"", list);
      goto err;
    }
    memcpy(item, p, len);
    item[len] = '\0';
    FloeDeviceName dn;
    if (floe_device_name_parse(item, &dn, st) != FLOE_OK) goto err;
    int found = 0;
    for (int i = 0; i < rt->num_devices + nr; i++) {
      FloeDevice *d = i < rt->num_devices ? rt->devices[i] : remote[i - rt->num_devices];
      if (!dn.type[0] || !floe__device_name_matches(rt, d, &dn)) continue;
      found++;
      bool dup = false;
      for (int k = 0; k < *n && !dup; k++) dup = (*out)[k] == d;
      if (!dup) (*out)[(*n)++] = d;
    }
    if (!found) {
      FloeDevice *none = floe__device_find(rt, item, st); /* its message lists the devices */
      (void)none;
      if (floe_status_code(st) == FLOE_OK)
        floe_status_set(st, FLOE_NOT_FOUND, "no device '%s'", item);
      floe__status_prefix(st, "session devices \"%s\"", list);
      goto err;
    }
    p += len;
    if (*p == ',') p++;
  }
  return FLOE_OK;
err:
  floe__free(*out);
  *out = NULL;
  *n = 0;
  return floe_status_code(st) ? floe_status_code(st) : FLOE_INVALID_ARGUMENT;
}

/* Fills *opts (caller's storage) with the defaults: default runtime, best device, inline
 * execution of inexpensive nodes. */
void floe_session_options_init(FloeSessionOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->inline_inexpensive = 1;
}

/* ---- names ---- */

static int min3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

/* Edit distance, or a large number for names too long to bother with. */
static int edit_distance(const char *a, const char *b) {
  enum { MAXLEN = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la > MAXLEN || lb > MAXLEN) return 1 << 20;
  int row[MAXLEN + 1];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      row[j] = min3(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]));
      diag = up;
    }
  }
  return row[lb];
}

/* Appends "; did you mean 'x'?" to st when a node name is close to `name`. */
static void suggest_node(const FloeGraph *g, const char *name, FloeStatus *st) {
  char base[80];
  const char *colon = strrchr(name, ':');
  size_t len = colon ? (size_t)(colon - name) : strlen(name);
  if (len >= sizeof base || g->num_nodes > 100000) return; /* too costly to be worth it */
  memcpy(base, name, len);
  base[len] = '\0';
  const char *best = NULL;
  int best_d = (int)len / 3 + 1; /* at most about a third of the name may differ */
  for (int i = 0; i < g->num_nodes; i++) {
    int d = edit_distance(base, g->nodes[i]->name);
    if (d > 0 && d <= best_d && (!best || d < best_d)) {
      best = g->nodes[i]->name;
      best_d = d;
    }
  }
  if (!best || !st || st->code == FLOE_OK) return;
  char *msg = floe__asprintf("%s (did you mean '%s'?)", floe_status_message(st), best);
  if (!msg) return; /* the plain message still stands */
  floe__free(st->msg);
  st->msg = msg;
}

static floe_code resolve_output(const FloeGraph *g, const char *what, const char *name,
                                SigItem *out, int pos, FloeStatus *st) {
  FloeOutput o;
  floe_code rc = floe__graph_resolve_output(g, name, &o, st);
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "%s", what);
    if (rc == FLOE_NOT_FOUND && name) suggest_node(g, name, st);
    return rc;
  }
  *out = (SigItem){o.node->id, o.index, pos};
  return FLOE_OK;
}

static int item_cmp(const void *a, const void *b) {
  const SigItem *x = a, *y = b;
  if (x->node_id != y->node_id) return x->node_id < y->node_id ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return x < y ? -1 : x > y;
}

static bool is_fed(const RunSig *sig, int node_id, int index) {
  SigItem k = {node_id, index, 0};
  return bsearch(&k, sig->feeds, (size_t)sig->num_feeds, sizeof k, item_cmp) != NULL;
}

/* A node whose every output is fed need not run (nodes without outputs always run). */
static bool fully_fed(const RunSig *sig, const FloeNode *n) {
  if (n->num_outputs == 0) return false;
  for (int i = 0; i < n->num_outputs; i++)
    if (!is_fed(sig, n->id, i)) return false;
  return true;
}

static void run_sig_free(RunSig *sig) {
  floe__free(sig->feeds);
  floe__free(sig->fetches);
  floe__free(sig->targets);
  floe__free(sig->fetch_map);
}

/* Checks a fed tensor against the dtype and (partial) shape the graph declares for it. */
static floe_code check_feed(const FloeGraph *g, const FloeFeed *f, const SigItem *it,
                            FloeStatus *st) {
  const FloeNode *n = g->nodes[it->node_id];
  FloeDType want = n->out_dtypes[it->index];
  const FloeTensor *t = f->value;
  /* A variable's handle is a pointer into a session's resource manager: only VarHandleOp
   * makes one. An object's handle (TensorArray, stack) names its object by serial and is
   * looked up, never dereferenced, so it may come back from an earlier run. */
  bool obj = want == FLOE_RESOURCE && floe__resource_is_obj_handle(t);
  if (!obj && (t->dtype == FLOE_RESOURCE || want == FLOE_RESOURCE))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "feed '%s': resource handles cannot be fed, except a TensorArray's "
                           "or stack's handle fetched from a run; '%s' (%s) %s",
                           f->name, n->name, n->op->name,
                           want == FLOE_RESOURCE
                               ? "produces a handle; the fed tensor is not one of those"
                               : "is fed a tensor of dtype resource");
  if (t->dtype != want)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "feed '%s': the tensor is %s but '%s' (%s) produces %s", f->name,
                           floe_dtype_name(t->dtype), n->name, n->op->name,
                           floe_dtype_name(want));
  const FloeShape *sh = &n->out_shapes[it->index];
  bool ok = sh->rank < 0 || sh->rank == t->rank;
  for (int d = 0; ok && sh->rank >= 0 && d < sh->rank; d++)
    ok = sh->dims[d] < 0 || sh->dims[d] == t->dims[d];
  if (!ok) {
    char have[128], decl[128];
    FloeShape ts = floe_shape_make(t->rank, t->dims);
    floe_shape_str(&ts, have, sizeof have);
    floe_shape_str(sh, decl, sizeof decl);
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "feed '%s': shape %s does not match the shape %s declared by '%s' "
                           "(%s)",
                           f->name, have, decl, n->name, n->op->name);
  }
  return FLOE_OK;
}

/* Resolves and canonicalises the run's names; errors name the offending name. */
/* The value of a feed that only names what is fed (placement without a run): never read. */
static FloeTensor names_only;

static floe_code resolve_sig(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                             const char *const *fetches, int num_fetches,
                             const char *const *targets, int num_targets, RunSig *sig,
                             FloeStatus *st) {
  const FloeGraph *g = s->graph;
  memset(sig, 0, sizeof *sig);
  sig->feeds = floe__malloc((size_t)(num_feeds ? num_feeds : 1) * sizeof *sig->feeds);
  sig->fetches = floe__malloc((size_t)(num_fetches ? num_fetches : 1) * sizeof *sig->fetches);
  sig->targets = floe__malloc((size_t)(num_targets ? num_targets : 1) * sizeof *sig->targets);
  sig->fetch_map = floe__malloc((size_t)(num_fetches ? num_fetches : 1) * sizeof(int));
  if (!sig->feeds || !sig->fetches || !sig->targets || !sig->fetch_map)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
  floe_code rc;
  for (int i = 0; i < num_feeds; i++) {
    if (!feeds[i].value)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "feed '%s' has no tensor (value NULL)",
                             feeds[i].name ? feeds[i].name : "(null)");
    if ((rc = resolve_output(g, "feed", feeds[i].name, &sig->feeds[i], i, st)) != FLOE_OK)
      return rc;
    if (feeds[i].value != &names_only && (rc = check_feed(g, &feeds[i], &sig->feeds[i], st)) != FLOE_OK)
      return rc;
  }
  qsort(sig->feeds, (size_t)num_feeds, sizeof *sig->feeds, item_cmp);
  for (int i = 1; i < num_feeds; i++)
    if (item_cmp(&sig->feeds[i - 1], &sig->feeds[i]) == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "feeds '%s' and '%s' name the same "
                             "tensor", feeds[sig->feeds[i - 1].pos].name,
                             feeds[sig->feeds[i].pos].name);
  sig->num_feeds = num_feeds;

  for (int i = 0; i < num_fetches; i++)
    if ((rc = resolve_output(g, "fetch", fetches[i], &sig->fetches[i], i, st)) != FLOE_OK)
      return rc;
  qsort(sig->fetches, (size_t)num_fetches, sizeof *sig->fetches, item_cmp);
  int u = 0;
  for (int i = 0; i < num_fetches; i++) {
    if (u == 0 || item_cmp(&sig->fetches[u - 1], &sig->fetches[i]) != 0)
      sig->fetches[u++] = sig->fetches[i];
    sig->fetch_map[sig->fetches[i].pos] = u - 1;
  }
  sig->num_fetches = u;

  for (int i = 0; i < num_targets; i++) {
    const FloeNode *n = floe_graph_find(g, targets[i]);
    if (!n) {
      floe_status_set(st, FLOE_NOT_FOUND, "target '%s': the graph has no node of that name",
                      targets[i] ? targets[i] : "(null)");
      if (targets[i]) suggest_node(g, targets[i], st);
      return FLOE_NOT_FOUND;
    }
    sig->targets[i] = n->id;
  }
  qsort(sig->targets, (size_t)num_targets, sizeof *sig->targets, int_cmp);
  u = 0;
  for (int i = 0; i < num_targets; i++)
    if (u == 0 || sig->targets[u - 1] != sig->targets[i]) sig->targets[u++] = sig->targets[i];
  sig->num_targets = u;
  return FLOE_OK;
}

/* ---- building an executor ---- */

/* Marks every node the fetches and targets need, stopping at fed outputs. */
static floe_code prune(const FloeGraph *g, const RunSig *sig, bool *need, FloeStatus *st) {
  int *stack = floe__malloc((size_t)(g->num_nodes ? g->num_nodes : 1) * sizeof *stack);
  if (!stack) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory pruning the graph");
  int top = 0;
  for (int i = 0; i < sig->num_fetches; i++) {
    const SigItem *f = &sig->fetches[i];
    if (!is_fed(sig, f->node_id, f->index) && !need[f->node_id]) {
      need[f->node_id] = true;
      stack[top++] = f->node_id;
    }
  }
  for (int i = 0; i < sig->num_targets; i++) {
    const FloeNode *n = g->nodes[sig->targets[i]];
    if (!fully_fed(sig, n) && !need[n->id]) {
      need[n->id] = true;
      stack[top++] = n->id;
    }
  }
  while (top > 0) {
    const FloeNode *n = g->nodes[stack[--top]];
    for (int j = 0; j < n->num_inputs; j++) {
      const FloeOutput *in = &n->inputs[j];
      if (is_fed(sig, in->node->id, in->index) || need[in->node->id]) continue;
      need[in->node->id] = true;
      stack[top++] = in->node->id;
    }
    for (int c = 0; c < n->num_control; c++) {
      const FloeNode *p = n->control[c];
      if (fully_fed(sig, p) || need[p->id]) continue;
      need[p->id] = true;
      stack[top++] = p->id;
    }
  }
  floe__free(stack);
  return FLOE_OK;
}

/* Device and kernel of a node: its requested device, else the session's default device,
 * else the first device that has a kernel for it. */
static floe_code place_node(const FloeSession *s, const FloeNode *n, FloeExecNodeSpec *spec,
                            FloeStatus *st) {
  FloeRuntime *rt = s->rt;
  spec->node = n;
  if (strcmp(n->op->name, "Placeholder") == 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "placeholder '%s' must be fed (use --feed %s=FILE.npy / a FloeFeed)",
                           n->name, n->name);
  if (n->device && n->device[0]) {
    FloeDevice *dev = floe__device_find(rt, n->device, st);
    if (!dev) {
      floe__status_prefix(st, "node '%s' (%s) requests device '%s'", n->name, n->op->name,
                          n->device);
      return floe_status_code(st) ? floe_status_code(st) : FLOE_NOT_FOUND;
    }
    spec->device = dev;
    spec->kernel = floe__kernel_find(rt, n, dev->props.type, st);
    if (!spec->kernel) {
      floe__status_prefix(st, "node '%s' (%s) requests device '%s' (%s)", n->name, n->op->name,
                          n->device, dev->short_name);
      return floe_status_code(st) ? floe_status_code(st) : FLOE_NOT_FOUND;
    }
    return FLOE_OK;
  }
  if (s->default_device) {
    spec->device = s->default_device;
    spec->kernel = floe__kernel_find(rt, n, s->default_device->props.type, NULL);
    if (spec->kernel) return FLOE_OK;
  }
  for (int i = 0; i < rt->num_devices; i++) {
    spec->device = rt->devices[i];
    spec->kernel = floe__kernel_find(rt, n, rt->devices[i]->props.type, NULL);
    if (spec->kernel) return FLOE_OK;
  }
  if (rt->num_devices == 0)
    return floe_status_set(st, FLOE_NOT_FOUND,
                           "node '%s' (%s): no device to run it on: no plugin with devices was "
                           "loaded (check FLOE_PLUGIN_PATH and FLOE_PLUGINS)",
                           n->name, n->op->name);
  /* Ask again with a status: its message names the device types that have a kernel. */
  floe__kernel_find(rt, n, rt->devices[0]->props.type, st);
  if (floe_status_code(st) == FLOE_OK)
    floe_status_set(st, FLOE_NOT_FOUND, "node '%s' (%s): no device has a kernel for it",
                    n->name, n->op->name);
  return floe_status_code(st);
}

/* Gives a stateful node the session's one kernel instance, making it on first use, so its
 * state (e.g. a random op's call counter) does not restart with each new run signature. */
static floe_code share_kernel(FloeSession *s, const FloeNode *n, FloeExecNodeSpec *spec,
                              FloeStatus *st) {
  floe_code rc = FLOE_OK;
  pthread_mutex_lock(&s->mu);
  if (!s->shared) {
    s->shared = floe__calloc((size_t)s->graph->num_nodes, sizeof *s->shared);
    if (!s->shared) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
      goto out;
    }
  }
  SharedKernel *k = &s->shared[n->id];
  if (!k->made) {
    rc = floe__kernel_instantiate(spec->kernel, n, spec->device, &k->state, &k->created, st);
    if (rc != FLOE_OK) goto out;
    k->kernel = spec->kernel;
    k->made = true;
  }
  /* Placement is deterministic, so every executor picks the same kernel for n. */
  spec->kernel = k->kernel;
  spec->shared = true;
  spec->state = k->state;
out:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* FloeFuseCheck: the fused node lands where the chain's anchor would, with a kernel. */
static bool fuse_ok(void *arg, const FloeNode *anchor, const FloeNode *fused) {
  const FloeSession *s = arg;
  /* With the cost model the anchor may land on any listed device with a kernel for it. */
  for (int i = 0; i < s->num_devices; i++) {
    const char *t = s->devices[i]->props.type;
    if (floe__kernel_find(s->rt, anchor, t, NULL) && !floe__kernel_find(s->rt, fused, t, NULL))
      return false;
  }
  FloeExecNodeSpec a, f;
  memset(&a, 0, sizeof a);
  memset(&f, 0, sizeof f);
  return place_node(s, anchor, &a, NULL) == FLOE_OK && place_node(s, fused, &f, NULL) == FLOE_OK &&
         a.device == f.device && f.kernel;
}

/* The run's graph after the optimiser (optimize.c): a clone of g (*clone, caller owns) when
 * a pass changed something, else g itself. need is updated to the returned graph's nodes.
 * report (NULL: none) gets one entry per pass. NULL on error. */
static const FloeGraph *optimize(FloeSession *s, const RunSig *sig, bool **need,
                                 FloeGraph **clone, FloeOptPassStats *report, FloeStatus *st) {
  const FloeGraph *g = s->graph;
  *clone = NULL;
  if (!report && !floe__opt_any_on()) return g;
  int n = g->num_nodes ? g->num_nodes : 1;
  bool *pinned = floe__calloc((size_t)n, sizeof *pinned);
  bool *target = floe__calloc((size_t)n, sizeof *target);
  FloeGraph *c = pinned && target ? floe__graph_clone(g, st) : NULL;
  if (!c) {
    floe__free(pinned);
    floe__free(target);
    if (!floe_status_code(st)) floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    return NULL;
  }
  for (int i = 0; i < sig->num_feeds; i++) pinned[sig->feeds[i].node_id] = true;
  for (int i = 0; i < sig->num_fetches; i++) pinned[sig->fetches[i].node_id] = true;
  for (int i = 0; i < sig->num_targets; i++) target[sig->targets[i]] = true;
  FloeOpt o = {.g = c, .need = *need, .cap = g->num_nodes, .n_orig = g->num_nodes,
               .pinned = pinned, .target = target, .ok = fuse_ok, .arg = s, .rt = s->rt};
  int changes = 0;
  floe_code rc = floe__optimize(&o, report, &changes, st);
  *need = o.need;
  floe__free(pinned);
  floe__free(target);
  if (rc != FLOE_OK || changes == 0) {
    /* an unchanged clone is dropped: need still describes g (nothing was added) */
    floe_graph_free(c);
    return rc == FLOE_OK ? g : NULL;
  }
  *clone = c;
  return c;
}

static bool sig_is_fed(void *arg, int node, int index) { return is_fed(arg, node, index); }

/* Prune, fuse, place, partition: the run's nodes, each with its device and kernel, in the
 * graph they run in (*clone, caller owns, when it is not the session's). */
/* Shapes as this run's feeds make them: on a private clone (made when *clone is NULL), each
 * fed output takes its value's shape and every other needed node is inferred again, in id
 * order (inputs come first but for loop back edges, which keep their shapes). A shape
 * function that now fails leaves its node's shapes as they were. The placer's costs then
 * count the batch the run feeds, not an unknown dim taken as 1. *saved (caller frees)
 * receives the needed nodes' shapes as they were, for restore_shapes once placed: the
 * executor checks kernels' outputs against the shapes its nodes carry, and later runs may
 * feed another batch. */
static floe_code refine_shapes(const RunSig *sig, const FloeFeed *values,
                               const FloeGraph **g, FloeGraph **clone, const bool *need,
                               FloeShape **saved, FloeStatus *st) {
  bool any = false;
  for (int i = 0; i < sig->num_feeds && !any; i++) {
    const FloeTensor *v = values[sig->feeds[i].pos].value;
    const FloeShape *have = &(*g)->nodes[sig->feeds[i].node_id]->out_shapes[sig->feeds[i].index];
    if (!v || v == &names_only) continue;
    any = have->rank != v->rank;
    for (int d = 0; d < have->rank && !any; d++) any = have->dims[d] != v->dims[d];
  }
  if (!any) return FLOE_OK;
  if (!*clone) {
    *clone = floe__graph_clone(*g, st);
    if (!*clone) return floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY;
  }
  FloeGraph *c = *clone;
  size_t outs = 0;
  for (int i = 0; i < c->num_nodes; i++)
    if (need[i]) outs += (size_t)c->nodes[i]->num_outputs;
  *saved = floe__malloc((outs ? outs : 1) * sizeof **saved);
  bool *fed = floe__calloc((size_t)c->num_nodes + 1, sizeof *fed);
  if (!fed || !*saved) {
    floe__free(fed);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
  }
  outs = 0;
  for (int i = 0; i < c->num_nodes; i++)
    for (int k = 0; need[i] && k < c->nodes[i]->num_outputs; k++)
      (*saved)[outs++] = c->nodes[i]->out_shapes[k];
  for (int i = 0; i < sig->num_feeds; i++) {
    const FloeTensor *v = values[sig->feeds[i].pos].value;
    if (!v || v == &names_only) continue;
    FloeShape *sh = &c->nodes[sig->feeds[i].node_id]->out_shapes[sig->feeds[i].index];
    sh->rank = v->rank;
    for (int d = 0; d < v->rank; d++) sh->dims[d] = v->dims[d];
    fed[sig->feeds[i].node_id] = true;
  }
  for (int i = 0; i < c->num_nodes; i++) {
    if (!need[i] || fed[i]) continue;
    FloeStatus ist = {FLOE_OK, NULL};
    /* a shape function that fails writes nothing: the node keeps its shapes */
    if (floe__infer_shapes(c->nodes[i], &ist) != FLOE_OK) floe_status_clear(&ist);
  }
  floe__free(fed);
  *g = c;
  return FLOE_OK;
}

/* Puts back the shapes refine_shapes saved (NULL: it changed nothing) and frees them. */
static void restore_shapes(FloeGraph *c, const bool *need, FloeShape *saved) {
  if (!saved) return;
  size_t outs = 0;
  for (int i = 0; i < c->num_nodes; i++)
    for (int k = 0; need[i] && k < c->nodes[i]->num_outputs; k++)
      c->nodes[i]->out_shapes[k] = saved[outs++];
  floe__free(saved);
}

/* This process's first host-memory device: where a cluster session's large feeds enter and
 * fetches arrive. */
static FloeDevice *client_device(const FloeSession *s) {
  for (int i = 0; i < s->rt->num_devices; i++)
    if (s->rt->devices[i]->host_memory) return s->rt->devices[i];
  return NULL;
}

/* A cluster session's large feeds enter on this process's side: a fed node read on another
 * task whose value is large or of unknown size (floe__by_data_plane) is placed (and counted
 * as needed) on this process's first host-memory device, so the partitioner sends the value
 * to its readers through the data plane, as any transfer between tasks, rather than inside
 * the step's message to that task (bounded at 64 MiB: a restored variable can be larger).
 * Its placement is free to choose: a fed node never runs. True when one moved. */
static bool feeds_to_client(const FloeSession *s, const RunSig *sig, const FloeGraph *g,
                            bool *need, FloePlacement *pl) {
  if (!s->cluster.remote || sig->num_feeds == 0) return false;
  FloeDevice *here = client_device(s);
  bool moved = false;
  if (!here) return false;
  for (int j = 0; j < g->num_nodes; j++) {
    if (!need[j] || !pl->device[j] || !pl->device[j]->remote) continue;
    const FloeNode *n = g->nodes[j];
    for (int k = 0; k < n->num_inputs; k++) {
      const FloeNode *src = n->inputs[k].node;
      if (src->id >= g->num_nodes || !fully_fed(sig, src) || (need[src->id] &&
          !(pl->device[src->id] && pl->device[src->id]->remote)) ||
          !floe__by_data_plane(src->out_dtypes[n->inputs[k].index],
                               &src->out_shapes[n->inputs[k].index]))
        continue;
      need[src->id] = true;
      pl->device[src->id] = here;
      moved = true;
    }
  }
  return moved;
}

/* Whether a fetch of the run is made on another task and large or of unknown size: then the
 * partitioner brings it here by a transfer (FloePartitionFetches). */
static bool fetches_to_client(const FloeSession *s, const RunSig *sig, const FloeGraph *g,
                              const FloePlacement *pl) {
  if (!s->cluster.remote || !client_device(s)) return false;
  for (int i = 0; i < sig->num_fetches; i++) {
    const FloeNode *n = g->nodes[sig->fetches[i].node_id];
    int k = sig->fetches[i].index;
    if (pl->device[n->id] && pl->device[n->id]->remote && !is_fed(sig, n->id, k) &&
        floe__by_data_plane(n->out_dtypes[k], &n->out_shapes[k]))
      return true;
  }
  return false;
}

static floe_code plan_run(FloeSession *s, const RunSig *sig, const FloeFeed *values, bool cut,
                          FloeGraph **clone, FloePartition *part, FloePlacement *pl, bool **needp,
                          FloeOptPassStats *report, FloeStatus *st) {
  const FloeGraph *g = s->graph;
  *clone = NULL;
  memset(part, 0, sizeof *part);
  memset(pl, 0, sizeof *pl);
  bool *need = floe__calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof *need);
  *needp = need;
  if (!need) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
  if (prune(g, sig, need, st) != FLOE_OK) return floe_status_code(st);
  if (!(g = optimize(s, sig, needp, clone, report, st))) return floe_status_code(st);
  need = *needp;
  /* Only worth a clone when the cost model places. */
  FloeShape *saved = NULL;
  if (values && s->num_devices > 0 &&
      refine_shapes(sig, values, &g, clone, need, &saved, st) != FLOE_OK) {
    floe__free(saved);
    return floe_status_code(st);
  }
  FloePartitionFed fed = {sig_is_fed, (void *)sig};
  FloePlaceOptions po = {s->default_device, s->devices, s->num_devices, s->soft_placement};
  floe_code rc = floe__place(s->rt, g, need, &fed, &po, pl, st);
  /* An executor's nodes keep the graph's own shapes (saved: *clone is the refined graph);
   * floe_session_placement goes on computing costs with the refined ones. */
  if (cut)
    restore_shapes(*clone, need, saved);
  else
    floe__free(saved);
  if (rc != FLOE_OK) return rc;
  FloeDevice *first = NULL;
  /* a feed or fetch to move through the data plane is a transfer to cut */
  bool many = feeds_to_client(s, sig, g, need, pl);
  many = fetches_to_client(s, sig, g, pl) || many;
  for (int i = 0; i < g->num_nodes && !many; i++) {
    if (!need[i] || fully_fed(sig, g->nodes[i])) continue;
    if (!first) first = pl->device[i];
    many = pl->device[i] != first;
  }
  if (!many || !cut) return FLOE_OK;
  int *fetch_node = floe__malloc((size_t)(2 * sig->num_fetches + 1) * sizeof *fetch_node);
  if (!fetch_node) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
  for (int i = 0; i < sig->num_fetches; i++) {
    fetch_node[i] = sig->fetches[i].node_id;
    fetch_node[sig->num_fetches + i] = sig->fetches[i].index;
  }
  FloePartitionFetches pf = {sig->num_fetches, fetch_node, fetch_node + sig->num_fetches,
                             s->cluster.remote ? client_device(s) : NULL};
  rc = floe__partition(g, need, pl->device, &fed, &pf, part, st);
  floe__free(fetch_node);
  if (rc != FLOE_OK) return rc;
  if (*clone) floe_graph_free(*clone);
  *clone = part->graph; /* the cache entry owns it from here */
  part->graph = NULL;
  return FLOE_OK;
}

static FloeMultiExec *build_executor(FloeSession *s, const RunSig *sig, const FloeFeed *values,
                                     FloeGraph **clone, FloeStatus *st) {
  FloeMultiExec *e = NULL;
  FloeExecNodeSpec *specs = NULL;
  FloeOutput *outs = NULL;
  FloePartition part;
  FloePlacement pl;
  bool *need = NULL;
  if (plan_run(s, sig, values, true, clone, &part, &pl, &need, NULL, st) != FLOE_OK) goto out;
  const FloeGraph *g = *clone ? *clone : s->graph;
  bool *run = part.need ? part.need : need;
  FloeDevice **dev = part.device ? part.device : pl.device;
  specs = floe__calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof *specs);
  outs = floe__malloc((size_t)(sig->num_feeds + sig->num_fetches + 1) * sizeof *outs);
  if (!specs || !outs) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    goto out;
  }
  FloeMultiPlan plan = {.rt = s->rt, .graph = g, .nodes = specs,
                        .inline_inexpensive = s->inline_inexpensive, .force_frames = part.has_cf,
                        .reuse_buffers = floe__opt_buffer_reuse_on(),
                        .memory_order = floe__opt_memory_scheduling_on(),
                        .const_feeds = floe__opt_constant_folding_on(),
                        .concat_in_place = floe__opt_buffer_reuse_on(),
                        .resources = s->resources, .profiling = &s->profiling, .trace = s->trace,
                        .rv_opts = {.compress_bf16 = s->compress, .route = s->cluster.route},
                        .remote = s->cluster.remote};
  for (int i = 0; i < g->num_nodes; i++) {
    if (!run[i]) continue;
    const FloeNode *n = g->nodes[i];
    /* a fed node feeds_to_client placed here: its readers (the _Sends) take the feed */
    if (i < s->graph->num_nodes && fully_fed(sig, n) && !dev[i]->remote && part.need) continue;
    FloeExecNodeSpec *spec = &specs[plan.num_nodes];
    spec->node = n;
    spec->device = dev[i];
    /* A fed node never runs: it needs no kernel (its outputs come from the caller). */
    if (!(i < s->graph->num_nodes && fully_fed(sig, n))) {
      spec->kernel = floe__kernel_find(s->rt, n, dev[i]->props.type, st);
      if (!spec->kernel) {
        floe__status_prefix(st, "placing node '%s' (%s) on %s", n->name, n->op->name,
                            dev[i]->short_name);
        goto out;
      }
    }
    if (spec->kernel && i < s->graph->num_nodes && (n->op->flags & FLOE_OP_STATEFUL) &&
        !dev[i]->remote && share_kernel(s, n, spec, st) != FLOE_OK)
      goto out;
    plan.num_nodes++;
  }
  plan.feeds = outs;
  plan.num_feeds = sig->num_feeds;
  plan.fetches = outs + sig->num_feeds;
  plan.num_fetches = sig->num_fetches;
  for (int i = 0; i < sig->num_feeds; i++)
    outs[i] = (FloeOutput){g->nodes[sig->feeds[i].node_id], sig->feeds[i].index};
  for (int i = 0; i < sig->num_fetches; i++)
    plan.fetches[i] = part.fetch ? part.fetch[i]
                                 : (FloeOutput){g->nodes[sig->fetches[i].node_id],
                                                sig->fetches[i].index};
  e = floe__multi_exec_new(&plan, st);
out:
  if (!e && *clone) {
    floe_graph_free(*clone);
    *clone = NULL;
  }
  floe__partition_free(&part);
  floe__placement_free(&pl);
  floe__free(need);
  floe__free(specs);
  floe__free(outs);
  return e;
}

/* ---- the executor cache ---- */

/* [num_feeds, (id, index)..., num_fetches, (id, index)..., num_targets, id...] */
static int *make_key(const RunSig *sig, int *len, uint64_t *hash) {
  int n = 3 + 2 * sig->num_feeds + 2 * sig->num_fetches + sig->num_targets;
  int *k = floe__malloc((size_t)n * sizeof *k);
  if (!k) return NULL;
  int p = 0;
  k[p++] = sig->num_feeds;
  for (int i = 0; i < sig->num_feeds; i++) {
    k[p++] = sig->feeds[i].node_id;
    k[p++] = sig->feeds[i].index;
  }
  k[p++] = sig->num_fetches;
  for (int i = 0; i < sig->num_fetches; i++) {
    k[p++] = sig->fetches[i].node_id;
    k[p++] = sig->fetches[i].index;
  }
  k[p++] = sig->num_targets;
  for (int i = 0; i < sig->num_targets; i++) k[p++] = sig->targets[i];
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the ints */
  for (int i = 0; i < n; i++) h = (h ^ (uint32_t)k[i]) * 1099511628211ull;
  *len = n;
  *hash = h;
  return k;
}

static CacheEntry *cache_find(FloeSession *s, const int *key, int len, uint64_t hash) {
  for (CacheEntry *c = s->cache; c; c = c->next)
    if (c->hash == hash && c->key_len == len && memcmp(c->key, key, (size_t)len * sizeof *key) == 0)
      return c;
  return NULL;
}

static void cache_unlink(FloeSession *s, CacheEntry *dead) {
  for (CacheEntry **pp = &s->cache; *pp; pp = &(*pp)->next) {
    if (*pp == dead) {
      *pp = dead->next;
      return;
    }
  }
}

/* The executor for sig, built on first use; concurrent first uses build it once. */
static FloeMultiExec *get_executor(FloeSession *s, const RunSig *sig, const FloeFeed *values,
                                   FloeStatus *st) {
  int len;
  uint64_t hash;
  int *key = make_key(sig, &len, &hash);
  if (!key) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    return NULL;
  }
  pthread_mutex_lock(&s->mu);
  for (;;) {
    CacheEntry *c = cache_find(s, key, len, hash);
    if (!c) break;
    if (c->exec) {
      pthread_mutex_unlock(&s->mu);
      floe__free(key);
      return c->exec;
    }
    /* Another run builds it; if that fails the entry goes away and we try ourselves. */
    pthread_cond_wait(&s->built_cv, &s->mu);
  }
  CacheEntry *c = floe__calloc(1, sizeof *c);
  if (!c) {
    pthread_mutex_unlock(&s->mu);
    floe__free(key);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    return NULL;
  }
  c->key = key;
  c->key_len = len;
  c->hash = hash;
  c->next = s->cache;
  s->cache = c;
  pthread_mutex_unlock(&s->mu);

  FloeGraph *clone;
  FloeMultiExec *e = build_executor(s, sig, values, &clone, st);

  pthread_mutex_lock(&s->mu);
  if (e) {
    c->exec = e;
    c->graph = clone;
    atomic_fetch_add(&s->num_cached, 1);
  } else {
    cache_unlink(s, c);
    floe__free(c->key);
    floe__free(c);
  }
  pthread_cond_broadcast(&s->built_cv);
  pthread_mutex_unlock(&s->mu);
  return e;
}

/* ---- public API ---- */

/* Caller owns the session (floe_session_free); g is copied and may be freed afterwards.
 * The runtime (opts->runtime or the default one) is borrowed and must outlive the session. */
FloeSession *floe__session_create(const FloeGraph *g, const FloeSessionOptions *opts,
                                  const FloeSessionCluster *cluster, FloeStatus *status) {
  if (!g) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_session_new: the graph is NULL");
    return NULL;
  }
  if (g->error != FLOE_OK) {
    floe_status_set(status, FLOE_FAILED_PRECONDITION,
                    "the graph has an error from building it (fix it first): %s",
                    g->error_msg ? g->error_msg : floe_code_message(g->error));
    return NULL;
  }
  FloeSessionOptions o;
  floe_session_options_init(&o);
  if (opts) {
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, runtime)) o.runtime = opts->runtime;
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, device)) o.device = opts->device;
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, inline_inexpensive))
      o.inline_inexpensive = opts->inline_inexpensive;
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, devices)) o.devices = opts->devices;
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, allow_soft_placement))
      o.allow_soft_placement = opts->allow_soft_placement;
    if (FLOE_HAS_FIELD(opts, FloeSessionOptions, compress_transfers))
      o.compress_transfers = opts->compress_transfers;
  }
  FloeRuntime *rt = o.runtime ? o.runtime : floe_runtime_default(status);
  if (!rt) return NULL;
  FloeSession *s = floe__calloc(1, sizeof *s);
  if (!s) goto err_oom;
  s->rt = rt;
  s->inline_inexpensive = o.inline_inexpensive != 0;
  if (o.device && o.device[0]) {
    s->default_device = floe__device_find(rt, o.device, status);
    if (!s->default_device) {
      floe__status_prefix(status, "session default device '%s'", o.device);
      goto err_free_session;
    }
  }
  s->soft_placement = o.allow_soft_placement != 0;
  s->compress = o.compress_transfers != 0;
  if (o.devices && o.devices[0] &&
      parse_devices(rt, o.devices, &s->devices, &s->num_devices, status) != FLOE_OK)
    goto err_free_session;
  s->graph = floe__graph_clone(g, status);
  if (!s->graph) goto err_free_session;
  s->resources = floe__resources_new(status);
  if (!s->resources) goto err_free_graph;
  s->trace = floe__trace_new();
  if (!s->trace) {
    floe_status_set(status, FLOE_NO_MEMORY, "out of memory creating a session");
    goto err_free_resources;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) goto err_no_mutex;
  if (pthread_cond_init(&s->built_cv, NULL) != 0) goto err_destroy_mu;
  atomic_init(&s->num_cached, 0);
  atomic_init(&s->profiling, 0);
  if (cluster) s->cluster = *cluster;
  return s;

err_destroy_mu:
  pthread_mutex_destroy(&s->mu);
err_no_mutex:
  floe_status_set(status, FLOE_RESOURCE_EXHAUSTED, "cannot create the session's mutex");
  floe__trace_free(s->trace);
err_free_resources:
  floe__resources_free(s->resources);
err_free_graph:
  floe_graph_free(s->graph);
err_free_session:
  floe__free(s->devices);
  floe__free(s);
  return NULL;
err_oom:
  floe_status_set(status, FLOE_NO_MEMORY, "out of memory creating a session");
  return NULL;
}

static void session_destroy(FloeSession *s);

/* Frees the session and its cached executors. No run may be in progress. NULL is a no-op.
 * Steps that runs left behind at their deadline (kernels that have not called done) still
 * use it: then the last of them to end frees it. */
void floe_session_free(FloeSession *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  bool later = s->left_behind > 0;
  s->free_pending = later;
  pthread_mutex_unlock(&s->mu);
  if (!later) session_destroy(s);
}

/* FloeMultiRunCtl.keep: a step left behind (+1), or one of those ended and was freed (-1). */
static void keep_session(void *arg, int delta) {
  FloeSession *s = arg;
  pthread_mutex_lock(&s->mu);
  s->left_behind += delta;
  bool destroy = s->left_behind == 0 && s->free_pending;
  pthread_mutex_unlock(&s->mu);
  if (destroy) session_destroy(s);
}

static void session_destroy(FloeSession *s) {
  for (CacheEntry *c = s->cache, *nx; c; c = nx) {
    nx = c->next;
    floe__multi_exec_free(c->exec);
    floe_graph_free(c->graph);
    floe__free(c->key);
    floe__free(c);
  }
  for (int i = 0; s->shared && i < s->graph->num_nodes; i++)
    if (s->shared[i].created) floe__kernel_release(s->shared[i].kernel, s->shared[i].state);
  floe__free(s->shared);
  floe__free(s->active);
  for (int i = 0; i < s->num_labels; i++) floe__free(s->labels[i]);
  floe__free(s->labels);
  floe__free(s->devices);
  if (!s->borrowed_resources) /* after every executor: none can hold a variable */
    floe__resources_free(s->resources);
  floe__trace_free(s->trace);
  pthread_cond_destroy(&s->built_cv);
  pthread_mutex_destroy(&s->mu);
  floe_graph_free(s->graph);
  if (s->cluster.release) s->cluster.release(s->cluster.arg); /* after the remote pieces */
  floe__free(s);
}

static void cancel_active(FloeSession *s, floe_code code, const char *why);
void floe__session_abort(FloeSession *s, floe_code code, const char *why) {
  cancel_active(s, code, why);
}

/* Borrowed, valid while s lives. */
const FloeGraph *floe__session_graph(const FloeSession *s) { return s->graph; }
bool floe__session_is_cluster(const FloeSession *s) { return s && s->cluster.remote != NULL; }

FloeResourceMgr *floe__session_resources(FloeSession *s) { return s->resources; }
FloeRuntime *floe__session_runtime(const FloeSession *s) { return s->rt; }

/* Caller frees the sibling (floe_session_free) before s. */
FloeSession *floe__session_sibling(FloeSession *s, const FloeGraph *g, FloeStatus *status) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = s->rt;
  FloeSessionCluster cl = s->cluster;
  cl.release = NULL; /* the parent's to release */
  cl.arg = NULL;
  FloeSession *sib = floe__session_create(g, &o, s->cluster.remote ? &cl : NULL, status);
  if (!sib) return NULL;
  floe__resources_free(sib->resources);
  sib->resources = s->resources;
  sib->borrowed_resources = true;
  return sib;
}

/* Thread-safe; a step running meanwhile sees either the old variables or fails naming the
 * variable that went away. container NULL is the default container "". */
floe_code floe_session_reset_container(FloeSession *s, const char *container,
                                       FloeStatus *status) {
  if (!s)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_reset_container: the session is NULL");
  return floe__resources_reset(s->resources, container ? container : "", status);
}

/* Thread-safe; counts executors fully built. */
int floe_session_num_cached(const FloeSession *s) {
  return s ? atomic_load(&s->num_cached) : 0;
}

void floe_run_options_init(FloeRunOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

/* A run's step joins (started) or leaves the session's list of active steps. */
static void track_step(void *arg, FloeExecStep *step, bool started) {
  FloeSession *s = arg;
  pthread_mutex_lock(&s->mu);
  if (started) {
    if (s->num_active == s->cap_active) {
      int cap = s->cap_active ? 2 * s->cap_active : 8;
      FloeExecStep **v = floe__realloc(s->active, (size_t)cap * sizeof *v);
      if (v) {
        s->active = v;
        s->cap_active = cap;
      }
    }
    /* Without room the step runs uncancellable by close (its timeout still holds). */
    if (s->num_active < s->cap_active) s->active[s->num_active++] = step;
    if (s->closed) floe__exec_step_cancel(step, FLOE_CANCELLED, "the session was closed");
  } else {
    for (int i = 0; i < s->num_active; i++) {
      if (s->active[i] == step) {
        s->active[i] = s->active[--s->num_active];
        break;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
}

/* Cancels every step running now with code and why. */
static void cancel_active(FloeSession *s, floe_code code, const char *why) {
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->num_active; i++) floe__exec_step_cancel(s->active[i], code, why);
  pthread_mutex_unlock(&s->mu);
}

void floe_session_cancel(FloeSession *s) {
  if (s) cancel_active(s, FLOE_CANCELLED, "the run was cancelled (floe_session_cancel)");
}

void floe_session_close(FloeSession *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  pthread_mutex_unlock(&s->mu);
  cancel_active(s, FLOE_CANCELLED, "the session was closed");
  floe__resources_close_all(s->resources);
}

floe_code floe_session_run(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                           const char *const *fetches, int num_fetches,
                           const char *const *targets, int num_targets, FloeTensor **outputs,
                           FloeStatus *user_status) {
  return floe_session_run_opts(s, NULL, feeds, num_feeds, fetches, num_fetches, targets,
                               num_targets, outputs, user_status);
}

/* Feeds borrowed for the call; on success outputs[i] are new references the caller
 * releases; on error outputs are left untouched. Thread-safe. */
floe_code floe_session_run_opts(FloeSession *s, const FloeRunOptions *opts,
                                const FloeFeed *feeds, int num_feeds,
                                const char *const *fetches, int num_fetches,
                                const char *const *targets, int num_targets,
                                FloeTensor **outputs, FloeStatus *user_status) {
  /* Codes are read back from the status below, so there always is one. */
  FloeStatus local = {FLOE_OK, NULL};
  FloeStatus *status = user_status ? user_status : &local;
  if (!s || num_feeds < 0 || num_fetches < 0 || num_targets < 0 ||
      (num_feeds && !feeds) || (num_fetches && (!fetches || !outputs)) ||
      (num_targets && !targets))
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_run: NULL session, or a NULL array with a non-zero "
                           "count");
  if (opts && (opts->struct_size < sizeof(size_t) + sizeof(int64_t) || opts->timeout_ms < 0))
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_run_opts: options not made by floe_run_options_init, "
                           "or a negative timeout");
  FloeStepSplit *split = opts && opts->struct_size >= offsetof(FloeRunOptions, split) +
                                                          sizeof opts->split
                             ? opts->split : NULL;
  if (split && split->struct_size < sizeof *split)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_run_opts: opts->split->struct_size is not "
                           "sizeof(FloeStepSplit)");
  pthread_mutex_lock(&s->mu);
  bool closed = s->closed;
  pthread_mutex_unlock(&s->mu);
  if (closed)
    return floe_status_set(status, FLOE_CANCELLED,
                           "the session was closed (floe_session_close): make a new one");
  /* A traced run records its span; its events carry its number. */
  int64_t trace_step = 0, t0 = 0, x0 = 0, x1 = 0;
  FloeTraceMark mark = {0, 0};
  if (atomic_load_explicit(&s->profiling, memory_order_relaxed) & FLOE__PROF_TRACE) {
    trace_step = floe__trace_next_step(s->trace);
    if (split) mark = floe__trace_mark(s->trace);
    t0 = floe__exec_now_ns();
  }
  RunSig sig;
  FloeTensor **ordered = NULL;
  floe_code rc = resolve_sig(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets,
                             &sig, status);
  if (rc != FLOE_OK) goto out;
  FloeMultiExec *e = get_executor(s, &sig, feeds, status);
  if (!e) {
    rc = floe_status_code(status) ? floe_status_code(status) : FLOE_NO_MEMORY;
    goto out;
  }
  /* Feeds then fetches, in the executor's canonical order. */
  ordered = floe__calloc((size_t)(sig.num_feeds + sig.num_fetches + 1), sizeof *ordered);
  if (!ordered) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory preparing a run");
    goto out;
  }
  for (int i = 0; i < sig.num_feeds; i++) ordered[i] = feeds[sig.feeds[i].pos].value;
  FloeTensor **got = ordered + sig.num_feeds;
  FloeRendezvousStats rs;
  memset(&rs, 0, sizeof rs);
  FloeMultiRunCtl ctl = {.timeout_ms = opts ? opts->timeout_ms : 0, .track = track_step, .arg = s,
                         .stats = &rs, .trace_step = trace_step, .keep = keep_session,
                         .keep_arg = s};
  x0 = trace_step ? floe__exec_now_ns() : 0;
  rc = floe__multi_exec_run(e, ordered, got, &ctl, status);
  x1 = trace_step ? floe__exec_now_ns() : 0;
  atomic_fetch_add(&s->xfers, rs.sends);
  atomic_fetch_add(&s->xfers_by_ref, rs.by_reference);
  atomic_fetch_add(&s->wire_bytes, rs.wire_bytes);
  atomic_fetch_add(&s->tensor_bytes, rs.tensor_bytes);
  if (rc != FLOE_OK) goto out;
  /* Fetched values come back in host memory, wherever they were computed. */
  for (int i = 0; i < sig.num_fetches; i++) {
    FloeDevice *d = floe__tensor_device(got[i]);
    if (!d || d->host_memory || got[i]->dtype == FLOE_RESOURCE) continue;
    FloeTensor *h = floe__tensor_to_device(got[i], NULL, status);
    if (!h) {
      rc = floe_status_code(status) ? floe_status_code(status) : FLOE_NO_MEMORY;
      floe__status_prefix(status, "copying fetch %d to host memory", i);
      for (int k = 0; k < sig.num_fetches; k++) floe_tensor_release(got[k]);
      goto out;
    }
    floe_tensor_release(got[i]);
    got[i] = h;
  }
  for (int i = 0; i < num_fetches; i++) {
    outputs[i] = got[sig.fetch_map[i]];
    floe_tensor_retain(outputs[i]);
  }
  for (int i = 0; i < sig.num_fetches; i++) floe_tensor_release(got[i]);
  if (status) floe_status_clear(status);
out:
  floe__free(ordered);
  run_sig_free(&sig);
  floe_status_clear(&local);
  if (trace_step && x1) /* runs that reached the executors */
    floe__trace_span(s->trace, FLOE__TRACE_STEP, trace_step, NULL, t0, floe__exec_now_ns(), x0,
                     x1);
  if (split && rc == FLOE_OK) { /* the run stands even when its split cannot be had */
    FloeStatus ignore = {FLOE_OK, NULL};
    if (!trace_step || floe__trace_split(s->trace, trace_step, mark, split, &ignore) != FLOE_OK)
      *split = (FloeStepSplit){.struct_size = split->struct_size};
    floe_status_clear(&ignore);
  }
  return rc;
}

/* ---- profiling ---- */

/* Thread-safe. Counters live in each executor (new ones start at zero); turning profiling
 * on zeroes the existing ones. */
void floe_session_set_profiling(FloeSession *s, int on) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  /* no step adds to a counter while it is zeroed... */
  atomic_fetch_and(&s->profiling, ~FLOE__PROF_COUNTERS);
  if (on) {
    for (CacheEntry *c = s->cache; c; c = c->next)
      for (int k = 0; k < floe__multi_exec_num_pieces(c->exec); k++)
        floe__executor_profile_reset(floe__multi_exec_piece(c->exec, k));
    atomic_fetch_or(&s->profiling, FLOE__PROF_COUNTERS); /* ...apart from one in its kernel */
  }
  pthread_mutex_unlock(&s->mu);
}

/* Thread-safe: the sink takes events from any thread under its own lock. */
void floe_session_set_tracing(FloeSession *s, int mode) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  if (mode != FLOE_TRACE_OFF) {
    if (mode != FLOE_TRACE_RESUME) floe__trace_clear(s->trace);
    atomic_fetch_or(&s->profiling, FLOE__PROF_TRACE);
  } else {
    atomic_fetch_and(&s->profiling, ~FLOE__PROF_TRACE);
  }
  pthread_mutex_unlock(&s->mu);
}

floe_code floe_session_trace_write(FloeSession *s, const char *path, FloeStatus *status) {
  if (!s || !path)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_trace_write: NULL session or path");
  return floe__trace_write(s->trace, path, status);
}

floe_code floe_session_step_breakdown(FloeSession *s, FloeStepBreakdown *out,
                                      FloeStatus *status) {
  if (!s || !out || out->struct_size < sizeof *out)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_step_breakdown: NULL session or out, or "
                           "out->struct_size is not sizeof(FloeStepBreakdown)");
  return floe__trace_breakdown(s->trace, out, status);
}

floe_code floe_session_step_split(FloeSession *s, FloeStepSplit *out, FloeStatus *status) {
  if (!s || !out || out->struct_size < sizeof *out)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_step_split: NULL session or out, or out->struct_size "
                           "is not sizeof(FloeStepSplit)");
  return floe__trace_split(s->trace, 0, (FloeTraceMark){0, 0}, out, status);
}

static int profile_cmp(const void *a, const void *b) {
  const FloeOpProfile *x = a, *y = b;
  if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
  return strcmp(x->op, y->op);
}

/* Adds node's counters to the row of its (op type, device), appending one if new. */
/* A profile row's name for node: its op, or for a fused node the op and what it fused
 * ("_FusedConv(Conv+BiasAdd+Relu)", kept by the session). Caller holds s->mu. */
static const char *op_label(FloeSession *s, const FloeNode *node) {
  const FloeAttrValue *v = floe__attrs_get(&node->attrs, "fused_ops");
  if (!v || v->kind != FLOE_ATTR_STRING || !v->u.s[0]) return node->op->name;
  char buf[320];
  snprintf(buf, sizeof buf, "%s(%s)", node->op->name, v->u.s);
  for (int i = 0; i < s->num_labels; i++)
    if (strcmp(s->labels[i], buf) == 0) return s->labels[i];
  char **l = floe__realloc(s->labels, (size_t)(s->num_labels + 1) * sizeof *l);
  if (!l) return node->op->name;
  s->labels = l;
  if (!(l[s->num_labels] = floe__strdup(buf))) return node->op->name;
  return l[s->num_labels++];
}

static void profile_add(FloeSession *s, FloeOpProfile *rows, int *n, const FloeNode *node,
                        const char *device, const FloeExecProfile *p) {
  const char *op = op_label(s, node);
  int i = 0;
  while (i < *n && (strcmp(rows[i].op, op) != 0 || strcmp(rows[i].device, device) != 0)) i++;
  if (i == *n) rows[(*n)++] = (FloeOpProfile){.op = op, .device = device};
  rows[i].device_ns += p->device_ns;
  rows[i].calls += p->calls;
  rows[i].total_ns += p->total_ns;
  rows[i].output_bytes += p->output_bytes;
  if (p->max_ns > rows[i].max_ns) rows[i].max_ns = p->max_ns;
}

/* On success *rows is malloc'd (caller frees with free()), NULL when nothing ran; op names
 * are borrowed from the session's graph. */
floe_code floe_session_profile(FloeSession *s, FloeOpProfile **rows, int *num_rows,
                               FloeStatus *status) {
  if (!s || !rows || !num_rows)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_profile: NULL session, rows or num_rows");
  *rows = NULL;
  *num_rows = 0;
  pthread_mutex_lock(&s->mu);
  /* At most one row per node that ran: size for the largest executor's node count. */
  int cap = 0;
  for (CacheEntry *c = s->cache; c; c = c->next) {
    FloeExecProfile p;
    for (int k = 0; k < floe__multi_exec_num_pieces(c->exec); k++)
      for (int i = 0; floe__executor_profile_node(floe__multi_exec_piece(c->exec, k), i, &p); i++)
        cap++;
  }
  FloeOpProfile *r = cap ? floe__malloc((size_t)cap * sizeof *r) : NULL;
  if (cap && !r) {
    pthread_mutex_unlock(&s->mu);
    return floe_status_set(status, FLOE_NO_MEMORY, "out of memory gathering a profile of %d "
                           "nodes", cap);
  }
  int n = 0;
  for (CacheEntry *c = s->cache; c; c = c->next) {
    FloeExecProfile p;
    const FloeNode *node;
    for (int k = 0; k < floe__multi_exec_num_pieces(c->exec); k++) {
      FloeExecutor *x = floe__multi_exec_piece(c->exec, k);
      for (int i = 0; (node = floe__executor_profile_node(x, i, &p)); i++)
        if (p.calls > 0) profile_add(s, r, &n, node, p.device, &p);
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (n == 0) {
    floe__free(r);
    return FLOE_OK;
  }
  qsort(r, (size_t)n, sizeof *r, profile_cmp);
  *rows = r;
  *num_rows = n;
  return FLOE_OK;
}

/* ---- placement, for looking at ---- */

/* Every Placeholder, plus the caller's feed names, as feeds of one scalar each. */
static floe_code placement_feeds(const FloeGraph *g, const FloeFeed *given, int n,
                                 FloeTensor *dummy, FloeFeed **out, int *num) {
  int cap = n;
  for (int i = 0; i < g->num_nodes; i++) cap += strcmp(g->nodes[i]->op->name, "Placeholder") == 0;
  FloeFeed *f = floe__calloc((size_t)cap + 1, sizeof *f);
  if (!f) return FLOE_NO_MEMORY;
  int k = 0;
  for (int i = 0; i < n; i++)
    f[k++] = (FloeFeed){given[i].name, given[i].value ? given[i].value : dummy};
  for (int i = 0; i < g->num_nodes; i++) {
    if (strcmp(g->nodes[i]->op->name, "Placeholder") != 0) continue;
    bool named = false;
    for (int j = 0; j < n && !named; j++) {
      const char *nm = given[j].name ? given[j].name : "";
      size_t len = strlen(g->nodes[i]->name);
      named = strncmp(nm, g->nodes[i]->name, len) == 0 && (nm[len] == '\0' || nm[len] == ':');
    }
    if (!named) f[k++] = (FloeFeed){g->nodes[i]->name, dummy};
  }
  *out = f;
  *num = k;
  return FLOE_OK;
}

/* Nodes no other node reads (data or control): the targets of "the whole graph". */
static const char **sink_names(const FloeGraph *g, int *num) {
  bool *read = floe__calloc((size_t)g->num_nodes + 1, sizeof *read);
  const char **t = floe__calloc((size_t)g->num_nodes + 1, sizeof *t);
  if (!read || !t) {
    floe__free(read);
    floe__free(t);
    return NULL;
  }
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *n = g->nodes[i];
    for (int j = 0; j < n->num_inputs; j++) read[n->inputs[j].node->id] = true;
    for (int k = 0; k < n->num_control; k++) read[n->control[k]->id] = true;
  }
  int k = 0;
  for (int i = 0; i < g->num_nodes; i++)
    if (!read[i] && strcmp(g->nodes[i]->op->name, "Placeholder") != 0) t[k++] = g->nodes[i]->name;
  floe__free(read);
  *num = k;
  return t;
}

/* Distinct (producer output or control edge, destination device) pairs that cross devices:
 * the _Send nodes partitioning adds. -1 when out of memory. */
typedef struct Crossing {
  int node, index, dst;
} Crossing;

static int crossing_cmp(const void *a, const void *b) {
  const Crossing *x = a, *y = b;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  if (x->index != y->index) return x->index < y->index ? -1 : 1;
  return x->dst < y->dst ? -1 : x->dst > y->dst;
}

static int count_transfers(const FloeGraph *g, const bool *need, const RunSig *sig,
                           FloeDevice *const *dev) {
  int edges = 0;
  for (int i = 0; i < g->num_nodes; i++)
    if (need[i]) edges += g->nodes[i]->num_inputs + g->nodes[i]->num_control;
  Crossing *v = floe__malloc((size_t)(edges + 1) * sizeof *v);
  if (!v) return -1;
  int n = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    if (!need[i]) continue;
    const FloeNode *x = g->nodes[i];
    for (int e = 0; e < x->num_inputs + x->num_control; e++) {
      bool data = e < x->num_inputs;
      const FloeNode *src = data ? x->inputs[e].node : x->control[e - x->num_inputs];
      int idx = data ? x->inputs[e].index : -1;
      if (need[src->id] && dev[src->id] != dev[i] && !(data && is_fed(sig, src->id, idx)))
        v[n++] = (Crossing){src->id, idx, dev[i]->id};
    }
  }
  qsort(v, (size_t)n, sizeof *v, crossing_cmp);
  int count = 0;
  for (int k = 0; k < n; k++) count += k == 0 || crossing_cmp(&v[k - 1], &v[k]) != 0;
  floe__free(v);
  return count;
}

/* Replays the placement's schedule with each node's mean time from the profiled runs so far
 * (its device's own time when reported, else its wall time), into *out. */
static void measured_times(FloeSession *s, const FloeGraph *g, FloePlacement *pl,
                           const bool *need, double *out) {
  double *secs = floe__malloc(((size_t)pl->num_nodes + 1) * sizeof *secs);
  if (!secs) {
    *out = -1;
    return;
  }
  for (int i = 0; i < pl->num_nodes; i++) secs[i] = -1;
  double *sum = floe__calloc((size_t)pl->num_nodes + 1, sizeof *sum);
  int64_t *calls = floe__calloc((size_t)pl->num_nodes + 1, sizeof *calls);
  pthread_mutex_lock(&s->mu);
  for (CacheEntry *c = s->cache; c && sum && calls; c = c->next)
    for (int p = 0; p < floe__multi_exec_num_pieces(c->exec); p++) {
      FloeExecutor *x = floe__multi_exec_piece(c->exec, p);
      FloeExecProfile pr;
      const FloeNode *node;
      for (int i = 0; (node = floe__executor_profile_node(x, i, &pr)); i++) {
        if (pr.calls == 0) continue;
        const FloeNode *mine = floe_graph_find(g, node->name);
        if (!mine || mine->id >= pl->num_nodes) continue;
        sum[mine->id] += (double)(pr.device_ns > 0 ? pr.device_ns : pr.total_ns) * 1e-9;
        calls[mine->id] += pr.calls;
      }
    }
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; sum && calls && i < pl->num_nodes; i++)
    if (calls[i] > 0) secs[i] = sum[i] / (double)calls[i];
  FloePlacement m = *pl;
  double *start = floe__calloc((size_t)pl->num_nodes + 1, sizeof *start);
  double *finish = floe__calloc((size_t)pl->num_nodes + 1, sizeof *finish);
  if (start && finish && sum && calls) {
    m.start = start;
    m.finish = finish;
    floe__placement_estimate(s->rt, g, need, secs, &m);
    *out = m.est_seconds;
  } else {
    *out = -1;
  }
  floe__free(start);
  floe__free(finish);
  floe__free(sum);
  floe__free(calls);
  floe__free(secs);
}

floe_code floe_session_placement(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                                 const char *const *fetches, int num_fetches,
                                 const char *const *targets, int num_targets,
                                 FloeNodePlacement **rows, int *num_rows, double *est_seconds,
                                 int *num_transfers, FloeStatus *status) {
  return floe_session_placement_measured(s, feeds, num_feeds, fetches, num_fetches, targets,
                                         num_targets, rows, num_rows, est_seconds, num_transfers,
                                         NULL, status);
}

floe_code floe_session_placement_measured(FloeSession *s, const FloeFeed *feeds,
                                          int num_feeds, const char *const *fetches,
                                          int num_fetches, const char *const *targets,
                                          int num_targets, FloeNodePlacement **rows,
                                          int *num_rows, double *est_seconds,
                                          int *num_transfers, double *measured,
                                          FloeStatus *status) {
  if (!s || !rows || !num_rows || num_feeds < 0 || num_fetches < 0 || num_targets < 0 ||
      (num_feeds && !feeds) || (num_fetches && !fetches) || (num_targets && !targets))
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_placement: NULL session or rows, or a NULL array with "
                           "a non-zero count");
  *rows = NULL;
  *num_rows = 0;
  FloeTensor *dummy = &names_only;
  FloeFeed *fd = NULL;
  int nfd = 0;
  const char **sinks = NULL;
  FloeGraph *clone = NULL;
  bool *need = NULL;
  FloePartition part;
  FloePlacement pl;
  memset(&part, 0, sizeof part);
  memset(&pl, 0, sizeof pl);
  RunSig sig;
  memset(&sig, 0, sizeof sig);
  floe_code rc = placement_feeds(s->graph, feeds, num_feeds, dummy, &fd, &nfd);
  if (rc != FLOE_OK) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory placing the graph");
    goto out;
  }
  if (num_fetches == 0 && num_targets == 0) {
    sinks = sink_names(s->graph, &num_targets);
    if (!sinks) {
      rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory placing the graph");
      goto out;
    }
    targets = sinks;
  }
  rc = resolve_sig(s, fd, nfd, fetches, num_fetches, targets, num_targets, &sig, status);
  if (rc == FLOE_OK) rc = plan_run(s, &sig, fd, false, &clone, &part, &pl, &need, NULL, status);
  if (rc != FLOE_OK) goto out;
  const FloeGraph *g = clone ? clone : s->graph; /* the fused clone, if fusion applied */
  if (measured) measured_times(s, g, &pl, need, measured);
  int n = 0;
  size_t strings = 0;
  for (int i = 0; i < pl.num_nodes; i++) { /* the placed graph's nodes keep their ids in g */
    if (!need[i] || !pl.device[i]) continue;
    n++;
    strings += strlen(g->nodes[i]->name) + strlen(g->nodes[i]->op->name) +
               strlen(pl.device[i]->short_name) + 3;
  }
  char *block = malloc((size_t)n * sizeof(FloeNodePlacement) + strings + 1);
  if (!block) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory placing the graph");
    goto out;
  }
  FloeNodePlacement *r = (FloeNodePlacement *)block;
  char *str = block + (size_t)n * sizeof(FloeNodePlacement);
  int k = 0;
  for (int i = 0; i < pl.num_nodes && k < n; i++) {
    if (!need[i] || !pl.device[i]) continue;
    const FloeNode *nd = g->nodes[i];
    const char *parts[3] = {nd->name, nd->op->name, pl.device[i]->short_name};
    const char *copies[3];
    for (int p = 0; p < 3; p++) {
      size_t len = strlen(parts[p]) + 1;
      memcpy(str, parts[p], len);
      copies[p] = str;
      str += len;
    }
    bool original = i < s->graph->num_nodes && strcmp(s->graph->nodes[i]->name, nd->name) == 0;
    r[k++] = (FloeNodePlacement){copies[0], copies[1], copies[2], original ? i : -1, pl.start[i],
                                 pl.finish[i] - pl.start[i]};
  }
  *rows = r;
  *num_rows = k;
  if (est_seconds) *est_seconds = pl.est_seconds;
  if (num_transfers) *num_transfers = count_transfers(g, need, &sig, pl.device);
out:
  run_sig_free(&sig);
  floe__partition_free(&part);
  floe__placement_free(&pl);
  if (clone) floe_graph_free(clone);
  floe__free(need);
  floe__free(fd);
  floe__free(sinks);
  return rc;
}

floe_code floe_session_profile_nodes(FloeSession *s, FloeNodeProfile **rows, int *num_rows,
                                     FloeStatus *status) {
  if (!s || !rows || !num_rows)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_profile_nodes: NULL session, rows or num_rows");
  *rows = NULL;
  *num_rows = 0;
  pthread_mutex_lock(&s->mu);
  int n = 0;
  size_t strings = 0;
  for (int pass = 0; pass < 2; pass++) {
    FloeNodeProfile *r = pass ? *rows : NULL;
    char *str = pass ? (char *)(r + n) : NULL;
    int k = 0;
    for (CacheEntry *c = s->cache; c; c = c->next) {
      for (int p = 0; p < floe__multi_exec_num_pieces(c->exec); p++) {
        FloeExecutor *x = floe__multi_exec_piece(c->exec, p);
        FloeExecProfile pr;
        const FloeNode *node;
        for (int i = 0; (node = floe__executor_profile_node(x, i, &pr)); i++) {
          if (pr.calls == 0) continue;
          const char *parts[3] = {node->name, node->op->name, pr.device};
          if (!pass) {
            n++;
            for (int q = 0; q < 3; q++) strings += strlen(parts[q]) + 1;
            continue;
          }
          const char *copies[3];
          for (int q = 0; q < 3; q++) {
            size_t len = strlen(parts[q]) + 1;
            memcpy(str, parts[q], len);
            copies[q] = str;
            str += len;
          }
          r[k++] = (FloeNodeProfile){copies[0], copies[1], copies[2], pr.calls, pr.total_ns,
                                     pr.device_ns};
        }
      }
    }
    if (!pass) {
      if (n == 0) break;
      *rows = malloc((size_t)n * sizeof **rows + strings);
      if (!*rows) {
        pthread_mutex_unlock(&s->mu);
        return floe_status_set(status, FLOE_NO_MEMORY, "out of memory gathering a profile of %d "
                               "nodes", n);
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  *num_rows = n;
  return FLOE_OK;
}

floe_code floe_session_transfer_stats(FloeSession *s, FloeTransferStats *out, FloeStatus *status) {
  if (!s || !out || out->struct_size < sizeof *out)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_transfer_stats: NULL session or stats, or struct_size "
                           "not set to sizeof(FloeTransferStats)");
  out->transfers = atomic_load(&s->xfers);
  out->by_reference = atomic_load(&s->xfers_by_ref);
  out->wire_bytes = atomic_load(&s->wire_bytes);
  out->tensor_bytes = atomic_load(&s->tensor_bytes);
  return FLOE_OK;
}

floe_code floe_session_optimized(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                                 const char *const *fetches, int num_fetches,
                                 const char *const *targets, int num_targets,
                                 FloeGraph **graph, FloeOptPassStats **passes, int *num_passes,
                                 FloeStatus *status) {
  if (!s || !graph || !passes || !num_passes || num_feeds < 0 || num_fetches < 0 ||
      num_targets < 0 || (num_feeds && !feeds) || (num_fetches && !fetches) ||
      (num_targets && !targets))
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_session_optimized: NULL session, graph or passes, or a NULL "
                           "array with a non-zero count");
  *graph = NULL;
  *passes = NULL;
  *num_passes = 0;
  FloeFeed *fd = NULL;
  int nfd = 0;
  const char **sinks = NULL;
  FloeGraph *clone = NULL, *out = NULL;
  bool *need = NULL;
  FloeNode **roots = NULL;
  RunSig sig;
  memset(&sig, 0, sizeof sig);
  int np = floe__opt_num_passes();
  FloeOptPassStats *report = calloc((size_t)np, sizeof *report);
  floe_code rc = report ? placement_feeds(s->graph, feeds, num_feeds, &names_only, &fd, &nfd)
                        : FLOE_NO_MEMORY;
  if (rc == FLOE_OK && num_fetches == 0 && num_targets == 0) {
    if (!(sinks = sink_names(s->graph, &num_targets))) rc = FLOE_NO_MEMORY;
    targets = sinks;
  }
  if (rc != FLOE_OK) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory optimising the graph");
    goto out;
  }
  rc = resolve_sig(s, fd, nfd, fetches, num_fetches, targets, num_targets, &sig, status);
  if (rc != FLOE_OK) goto out;
  const FloeGraph *g = s->graph;
  need = floe__calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof *need);
  if (!need) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory optimising the graph");
    goto out;
  }
  if ((rc = prune(g, &sig, need, status)) != FLOE_OK) goto out;
  if (!(g = optimize(s, &sig, &need, &clone, report, status))) {
    rc = floe_status_code(status);
    goto out;
  }
  /* The run's nodes alone, in a graph of their own. */
  if (!(out = floe__graph_clone(g, status))) {
    rc = floe_status_code(status) ? floe_status_code(status) : FLOE_NO_MEMORY;
    goto out;
  }
  int nr = 0;
  roots = floe__malloc((size_t)(g->num_nodes ? g->num_nodes : 1) * sizeof *roots);
  if (!roots) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory optimising the graph");
    goto out;
  }
  for (int i = 0; i < g->num_nodes; i++)
    if (need[i]) roots[nr++] = out->nodes[i];
  floe__graph_keep_reachable(out, roots, nr);
  *graph = out;
  out = NULL;
  *passes = report;
  report = NULL;
  *num_passes = np;
out:
  run_sig_free(&sig);
  if (clone) floe_graph_free(clone);
  if (out) floe_graph_free(out);
  floe__free(roots);
  floe__free(need);
  floe__free(fd);
  floe__free(sinks);
  free(report);
  return rc;
}
