/* SPDX-License-Identifier: Apache-2.0 */
/* worker.c - the worker service every task runs (TF's worker.proto, cut to what Floe uses).
 *
 * A master (a session in the chief, or in any task under between-graph replication) creates
 * a worker session here (its resources: variables and queues, the task's own shared by
 * every session that does not ask to isolate them, as TF's servers share them by default;
 * and the cluster view, whose data-plane
 * channels are connected before the answer), registers the pieces of its graph (a graph file
 * whose every node names one of this task's devices, with the feeds and fetches the piece
 * takes and returns), runs steps of them under the master's random 64-bit step id (the id
 * both sides' rendezvous use, so Sends and Recvs across tasks meet), and cleans up: a
 * CleanupGraph aborts whatever of that step still runs here.
 *
 * Replays: every RunGraph carries a random request id; an id seen among the last
 * FLOE__REQUEST_WINDOW is refused (a replayed or duplicated request never runs a step
 * twice). Aborted step ids are remembered too, so a RunGraph that arrives after its step was
 * cleaned up fails at once instead of waiting for peers that are gone.
 *
 * Locking: w->mu guards the sessions, graphs, running steps and both windows. Steps run on
 * the connection's thread (the rpc server gives each connection its own), never under mu.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dist.h"
#include "dist.pb-c.h"

#define FLOE__REQUEST_WINDOW 100000
#define ABORTED_WINDOW 4096
#define MAX_GRAPHS 4096 /* registered at once, over all sessions */

typedef struct WSession WSession;

typedef struct WGraph {
  char *handle;
  WSession *ws;
  FloeGraph *graph;
  FloeMultiExec *exec;
  char **feeds, **fetches;
  int num_feeds, num_fetches;
  int refs;                /* under mu: the registry's + one per RunGraph using it */
  struct WGraph *next;
} WGraph;

struct WSession {
  char *handle;
  FloeResourceMgr *resources;  /* the service's shared one, or its own when owns_resources */
  bool owns_resources;
  int refs;                /* under mu: the registry's + one per graph */
  bool dropped;            /* deleted or reset: no new graph or step */
  WSession *next;
};

typedef struct Running {
  FloeWorkerService *w;
  uint64_t step_id;
  FloeExecStep **steps;    /* the pieces attached now */
  int num_steps, cap_steps;
  struct Running *next;
} Running;

struct FloeWorkerService {
  FloeRuntime *rt;
  FloeDataPlane *dp;
  FloeRpcServer *server;
  FloeResourceMgr *shared;  /* the task's resources, for every session that does not isolate */
  pthread_mutex_t mu;
  WSession *sessions;
  WGraph *graphs;
  int num_graphs;
  Running *running;
  /* request ids: a ring in arrival order and an open-addressing set over it */
  uint64_t *req_ring;
  int req_next, req_count;
  uint64_t *req_set;       /* 0: empty slot (0 itself is never accepted as an id) */
  size_t req_cap;
  uint64_t aborted[ABORTED_WINDOW];
  floe_code aborted_code[ABORTED_WINDOW];
  int aborted_next;
};

/* ---- tensors on the wire ---------------------------------------------------------------- */

floe_code floe__tensor_to_proto(const FloeTensor *t, Floe__Dist__Tensor *out, FloeStatus *st) {
  floe__dist__tensor__init(out);
  FloeTensor *host = NULL;
  const FloeTensor *src = t;
  if (t->buf && !floe_tensor_data(t) && floe_tensor_nbytes(t) > 0) {
    host = floe_tensor_copy(t, st); /* device memory: to the host first */
    if (!host) return floe_status_code(st);
    src = host;
  }
  out->dtype = (int32_t)floe_tensor_dtype(src);
  out->n_shape = (size_t)floe_tensor_rank(src);
  out->shape = floe__malloc((out->n_shape + 1) * sizeof *out->shape);
  size_t nb = floe_tensor_nbytes(src);
  out->data.data = floe__malloc(nb + 1);
  if (!out->shape || !out->data.data) {
    floe__free(out->shape);
    floe__free(out->data.data);
    floe_tensor_release(host);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory encoding a %zu-byte tensor", nb);
  }
  for (size_t i = 0; i < out->n_shape; i++) out->shape[i] = floe_tensor_dim(src, (int)i);
  if (nb) memcpy(out->data.data, floe_tensor_data(src), nb);
  out->data.len = nb;
  floe_tensor_release(host);
  return FLOE_OK;
}

void floe__tensor_proto_clear(Floe__Dist__Tensor *p) {
  if (!p) return;
  floe__free(p->shape);
  floe__free(p->data.data);
  p->shape = NULL;
  p->data.data = NULL;
}

FloeTensor *floe__tensor_from_proto(const Floe__Dist__Tensor *p, const char *what,
                                    FloeStatus *st) {
  if (!p) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: no tensor", what);
    return NULL;
  }
  if (p->dtype <= 0 || p->dtype >= FLOE_DTYPE_LIMIT || floe_dtype_size((FloeDType)p->dtype) == 0) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: dtype %d is not one Floe knows", what,
                    p->dtype);
    return NULL;
  }
  if (p->n_shape > FLOE_MAX_DIMS) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: rank %zu is more than %d", what, p->n_shape,
                    FLOE_MAX_DIMS);
    return NULL;
  }
  FloeTensor *t = floe_tensor_new((FloeDType)p->dtype, (int)p->n_shape, p->shape, st);
  if (!t) {
    floe__status_prefix(st, "%s", what);
    return NULL;
  }
  if (floe_tensor_nbytes(t) != p->data.len) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: %zu bytes of data for a %s tensor of %" PRId64 " elements (%zu bytes)",
                    what, p->data.len, floe_dtype_name((FloeDType)p->dtype),
                    floe_tensor_num_elements(t), floe_tensor_nbytes(t));
    floe_tensor_release(t);
    return NULL;
  }
  if (p->data.len) memcpy(floe_tensor_data(t), p->data.data, p->data.len);
  return t;
}

/* ---- registry ---------------------------------------------------------------------------- */

static char *new_handle(const char *prefix) {
  uint64_t r = 0;
  FloeStatus ignore = {FLOE_OK, NULL};
  if (floe__auth_random((uint8_t *)&r, sizeof r, &ignore) != FLOE_OK) r = (uint64_t)(uintptr_t)&r;
  floe_status_clear(&ignore);
  return floe__asprintf("%s-%016" PRIx64, prefix, r);
}

static WSession *find_session(FloeWorkerService *w, const char *handle) { /* under mu */
  for (WSession *s = w->sessions; s; s = s->next)
    if (!s->dropped && strcmp(s->handle, handle) == 0) return s;
  return NULL;
}

static WGraph *find_graph(FloeWorkerService *w, const char *handle) { /* under mu */
  for (WGraph *g = w->graphs; g; g = g->next)
    if (strcmp(g->handle, handle) == 0) return g;
  return NULL;
}

static void session_unref(WSession *s) { /* under mu; the last reference frees */
  if (--s->refs > 0) return;
  if (s->owns_resources) floe__resources_free(s->resources);
  floe__free(s->handle);
  floe__free(s);
}

static void free_names(char **v, int n) {
  for (int i = 0; v && i < n; i++) floe__free(v[i]);
  floe__free(v);
}

/* The graph's memory goes when its last RunGraph is done; its session reference with it. */
static void graph_unref(FloeWorkerService *w, WGraph *g) { /* under mu */
  if (--g->refs > 0) return;
  (void)w;
  floe__multi_exec_free(g->exec);
  floe_graph_free(g->graph);
  free_names(g->feeds, g->num_feeds);
  free_names(g->fetches, g->num_fetches);
  session_unref(g->ws);
  floe__free(g->handle);
  floe__free(g);
}

static void unlink_graph(FloeWorkerService *w, WGraph *dead) { /* under mu */
  for (WGraph **pp = &w->graphs; *pp; pp = &(*pp)->next)
    if (*pp == dead) {
      *pp = dead->next;
      w->num_graphs--;
      graph_unref(w, dead);
      return;
    }
}

static void unlink_session(FloeWorkerService *w, WSession *s) { /* under mu */
  s->dropped = true;
  for (WGraph **pp = &w->graphs; *pp;) {
    WGraph *g = *pp;
    if (g->ws == s) {
      *pp = g->next;
      w->num_graphs--;
      graph_unref(w, g);
    } else {
      pp = &g->next;
    }
  }
  for (WSession **pp = &w->sessions; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      session_unref(s);
      return;
    }
}

/* ---- request ids and aborted steps -------------------------------------------------------- */

static size_t set_slot(const FloeWorkerService *w, uint64_t id) {
  uint64_t h = id * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & (w->req_cap - 1);
}

static void set_remove(FloeWorkerService *w, uint64_t id) { /* backward-shift deletion */
  size_t i = set_slot(w, id);
  while (w->req_set[i] != id) {
    if (!w->req_set[i]) return;
    i = (i + 1) & (w->req_cap - 1);
  }
  w->req_set[i] = 0;
  for (size_t j = (i + 1) & (w->req_cap - 1); w->req_set[j]; j = (j + 1) & (w->req_cap - 1)) {
    uint64_t v = w->req_set[j];
    size_t home = set_slot(w, v);
    /* v may move into the hole at i when its home is not within (i, j] cyclically */
    bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!between) {
      w->req_set[i] = v;
      w->req_set[j] = 0;
      i = j;
    }
  }
}

/* True when id is new (and now remembered); false for a repeat. Under mu. */
static bool request_fresh(FloeWorkerService *w, uint64_t id) {
  size_t i = set_slot(w, id);
  for (; w->req_set[i]; i = (i + 1) & (w->req_cap - 1))
    if (w->req_set[i] == id) return false;
  if (w->req_count == FLOE__REQUEST_WINDOW) { /* forget the oldest */
    set_remove(w, w->req_ring[w->req_next]);
    w->req_count--;
    i = set_slot(w, id);
    while (w->req_set[i]) i = (i + 1) & (w->req_cap - 1);
  }
  w->req_set[i] = id;
  w->req_ring[w->req_next] = id;
  w->req_next = (w->req_next + 1) % FLOE__REQUEST_WINDOW;
  w->req_count++;
  return true;
}

static floe_code aborted_code(const FloeWorkerService *w, uint64_t step_id) { /* under mu */
  for (int i = 0; i < ABORTED_WINDOW; i++)
    if (w->aborted[i] == step_id && step_id) return w->aborted_code[i];
  return FLOE_OK;
}

/* ---- handlers ------------------------------------------------------------------------------ */

static floe_code reply(FloeConn *c, uint16_t type, ProtobufCMessage *msg, FloeStatus *st) {
  return floe__conn_send(c, type, msg, 0, st);
}

static floe_code reply_status(FloeConn *c, uint16_t type, ProtobufCMessage *resp,
                              Floe__Dist__Status **slot, const FloeStatus *outcome,
                              FloeStatus *st) {
  Floe__Dist__Status sp = FLOE__DIST__STATUS__INIT;
  floe__status_to_proto(outcome, &sp);
  *slot = &sp;
  return reply(c, type, resp, st);
}

static floe_code on_create_session(FloeWorkerService *w, FloeConn *c,
                                   const Floe__Dist__CreateWorkerSessionRequest *rq,
                                   FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  Floe__Dist__CreateWorkerSessionResponse resp = FLOE__DIST__CREATE_WORKER_SESSION_RESPONSE__INIT;
  WSession *s = NULL;
  if (!rq->session_handle || !rq->session_handle[0] || strlen(rq->session_handle) > 128) {
    floe_status_set(&out, FLOE_INVALID_ARGUMENT, "CreateWorkerSession: a session handle of 1-128 bytes is needed");
    goto done;
  }
  /* The data plane first: the master runs nothing before every task answered. */
  int64_t timeout = rq->timeout_ms > 0 ? rq->timeout_ms : 60000;
  if (floe__dataplane_connect(w->dp, (ProtobufCMessage *const *)rq->cluster, (int)rq->n_cluster,
                              timeout, &out) != FLOE_OK)
    goto done;
  s = floe__calloc(1, sizeof *s);
  if (s) s->handle = floe__strdup(rq->session_handle);
  if (s && s->handle) {
    s->owns_resources = rq->isolate;
    s->resources = rq->isolate ? floe__resources_new(&out) : w->shared;
  }
  if (!s || !s->handle || !s->resources) {
    if (floe_status_code(&out) == FLOE_OK) floe_status_set(&out, FLOE_NO_MEMORY, "out of memory creating a worker session");
    if (s) floe__free(s->handle);
    floe__free(s);
    goto done;
  }
  s->refs = 1;
  pthread_mutex_lock(&w->mu);
  if (find_session(w, s->handle)) {
    floe_status_set(&out, FLOE_ALREADY_EXISTS, "worker session %s exists already", s->handle);
    session_unref(s);
  } else {
    s->next = w->sessions;
    w->sessions = s;
  }
  pthread_mutex_unlock(&w->mu);
done:;
  floe_code rc = reply_status(c, FLOE__WIRE_CREATE_WORKER_SESSION_RESPONSE, &resp.base,
                              &resp.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_delete_session(FloeWorkerService *w, FloeConn *c,
                                   const Floe__Dist__DeleteWorkerSessionRequest *rq,
                                   FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&w->mu);
  WSession *s = rq->session_handle ? find_session(w, rq->session_handle) : NULL;
  if (s)
    unlink_session(w, s);
  else
    floe_status_set(&out, FLOE_NOT_FOUND, "no worker session %s here",
                    rq->session_handle ? rq->session_handle : "(none)");
  pthread_mutex_unlock(&w->mu);
  Floe__Dist__DeleteWorkerSessionResponse resp = FLOE__DIST__DELETE_WORKER_SESSION_RESPONSE__INIT;
  floe_code rc = reply_status(c, FLOE__WIRE_DELETE_WORKER_SESSION_RESPONSE, &resp.base,
                              &resp.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static char **copy_names(char **v, size_t n) {
  char **out = floe__calloc(n + 1, sizeof *out);
  for (size_t i = 0; out && i < n; i++)
    if (!(out[i] = floe__strdup(v[i] ? v[i] : ""))) {
      free_names(out, (int)i);
      return NULL;
    }
  return out;
}

/* The executor of a registered piece: every node on the device it names (one of this task's:
 * the master placed it), with the kernel this runtime has for it. */
static FloeMultiExec *build_exec(FloeWorkerService *w, WGraph *wg, bool control_flow,
                                 FloeStatus *st) {
  const FloeGraph *g = wg->graph;
  FloeExecNodeSpec *specs = floe__calloc((size_t)g->num_nodes + 1, sizeof *specs);
  FloeOutput *outs = floe__calloc((size_t)(wg->num_feeds + wg->num_fetches) + 1, sizeof *outs);
  bool *fed = floe__calloc((size_t)g->num_nodes + 1, sizeof *fed);
  FloeMultiExec *e = NULL;
  if (!specs || !outs || !fed) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a registered graph");
    goto out;
  }
  for (int i = 0; i < wg->num_feeds; i++) {
    if (floe__graph_resolve_output(g, wg->feeds[i], &outs[i], st) != FLOE_OK) goto out;
    fed[outs[i].node->id] = true;
  }
  for (int i = 0; i < wg->num_fetches; i++)
    if (floe__graph_resolve_output(g, wg->fetches[i], &outs[wg->num_feeds + i], st) != FLOE_OK)
      goto out;
  FloeMultiPlan plan = {.rt = w->rt, .graph = g, .nodes = specs, .inline_inexpensive = true,
                        .force_frames = control_flow, .resources = wg->ws->resources,
                        .rv_opts = {.route = floe__dataplane_route(w->dp)}};
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *n = g->nodes[i];
    FloeExecNodeSpec *sp = &specs[plan.num_nodes++];
    sp->node = n;
    if (!n->device || !n->device[0]) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT, "node '%s' (%s) names no device: the master "
                      "places every node of a registered graph", n->name, n->op->name);
      goto out;
    }
    sp->device = floe__device_find(w->rt, n->device, st);
    if (!sp->device || sp->device->remote) {
      if (sp->device)
        floe_status_set(st, FLOE_INVALID_ARGUMENT, "device %s is not this task's", n->device);
      floe__status_prefix(st, "node '%s' (%s) of a registered graph", n->name, n->op->name);
      goto out;
    }
    if (fed[i]) continue; /* fed: never runs here */
    sp->kernel = floe__kernel_find(w->rt, n, sp->device->props.type, st);
    if (!sp->kernel) {
      floe__status_prefix(st, "node '%s' (%s) on %s", n->name, n->op->name, sp->device->name);
      goto out;
    }
  }
  plan.feeds = outs;
  plan.num_feeds = wg->num_feeds;
  plan.fetches = outs + wg->num_feeds;
  plan.num_fetches = wg->num_fetches;
  e = floe__multi_exec_new(&plan, st);
out:
  floe__free(specs);
  floe__free(outs);
  floe__free(fed);
  return e;
}

static floe_code on_register(FloeWorkerService *w, FloeConn *c,
                             const Floe__Dist__RegisterGraphRequest *rq, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  Floe__Dist__RegisterGraphResponse resp = FLOE__DIST__REGISTER_GRAPH_RESPONSE__INIT;
  WGraph *wg = floe__calloc(1, sizeof *wg);
  if (!wg) {
    floe_status_set(&out, FLOE_NO_MEMORY, "out of memory registering a graph");
    goto done;
  }
  pthread_mutex_lock(&w->mu);
  WSession *s = rq->session_handle ? find_session(w, rq->session_handle) : NULL;
  if (s) s->refs++;
  bool full = w->num_graphs >= MAX_GRAPHS;
  pthread_mutex_unlock(&w->mu);
  if (!s) {
    floe_status_set(&out, FLOE_NOT_FOUND, "RegisterGraph: no worker session %s here (the task "
                    "restarted, or the session was closed)", rq->session_handle ? rq->session_handle : "(none)");
    floe__free(wg);
    goto done;
  }
  wg->ws = s;
  wg->refs = 1;
  if (full) {
    floe_status_set(&out, FLOE_RESOURCE_EXHAUSTED, "RegisterGraph: %d graphs are registered "
                    "here already (the most at once): deregister some", MAX_GRAPHS);
    goto fail;
  }
  wg->graph = floe_graph_deserialize(rq->graph.data, rq->graph.len, "RegisterGraph", &out);
  if (!wg->graph) goto fail;
  wg->num_feeds = (int)rq->n_feeds;
  wg->num_fetches = (int)rq->n_fetches;
  wg->feeds = copy_names(rq->feeds, rq->n_feeds);
  wg->fetches = copy_names(rq->fetches, rq->n_fetches);
  wg->handle = new_handle("graph");
  if (!wg->feeds || !wg->fetches || !wg->handle) {
    floe_status_set(&out, FLOE_NO_MEMORY, "out of memory registering a graph");
    goto fail;
  }
  wg->exec = build_exec(w, wg, rq->control_flow, &out);
  if (!wg->exec) goto fail;
  pthread_mutex_lock(&w->mu);
  if (s->dropped) {
    floe_status_set(&out, FLOE_ABORTED, "worker session %s was closed meanwhile", s->handle);
    pthread_mutex_unlock(&w->mu);
    goto fail;
  }
  wg->next = w->graphs;
  w->graphs = wg;
  w->num_graphs++;
  pthread_mutex_unlock(&w->mu);
  resp.graph_handle = wg->handle;
  goto done;
fail:
  pthread_mutex_lock(&w->mu);
  graph_unref(w, wg);
  pthread_mutex_unlock(&w->mu);
done:;
  floe_code rc = reply_status(c, FLOE__WIRE_REGISTER_GRAPH_RESPONSE, &resp.base, &resp.status,
                              &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_deregister(FloeWorkerService *w, FloeConn *c,
                               const Floe__Dist__DeregisterGraphRequest *rq, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&w->mu);
  WGraph *g = rq->graph_handle ? find_graph(w, rq->graph_handle) : NULL;
  if (g)
    unlink_graph(w, g);
  else
    floe_status_set(&out, FLOE_NOT_FOUND, "no graph %s registered here",
                    rq->graph_handle ? rq->graph_handle : "(none)");
  pthread_mutex_unlock(&w->mu);
  Floe__Dist__DeregisterGraphResponse resp = FLOE__DIST__DEREGISTER_GRAPH_RESPONSE__INIT;
  floe_code rc = reply_status(c, FLOE__WIRE_DEREGISTER_GRAPH_RESPONSE, &resp.base, &resp.status,
                              &out, st);
  floe_status_clear(&out);
  return rc;
}

/* The executor's pieces of a running step, for CleanupGraph. */
static void track(void *arg, FloeExecStep *step, bool started) {
  Running *r = arg;
  FloeWorkerService *w = r->w;
  pthread_mutex_lock(&w->mu);
  if (started) {
    if (r->num_steps == r->cap_steps) {
      int cap = r->cap_steps ? 2 * r->cap_steps : 4;
      FloeExecStep **v = floe__realloc(r->steps, (size_t)cap * sizeof *v);
      if (v) {
        r->steps = v;
        r->cap_steps = cap;
      }
    }
    if (r->num_steps < r->cap_steps) r->steps[r->num_steps++] = step;
  } else {
    for (int i = 0; i < r->num_steps; i++)
      if (r->steps[i] == step) {
        r->steps[i] = r->steps[--r->num_steps];
        break;
      }
  }
  pthread_mutex_unlock(&w->mu);
}

static floe_code on_run(FloeWorkerService *w, FloeConn *c, const Floe__Dist__RunGraphRequest *rq,
                        FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  Floe__Dist__RunGraphResponse resp = FLOE__DIST__RUN_GRAPH_RESPONSE__INIT;
  FloeTensor **feeds = NULL, **outputs = NULL;
  Floe__Dist__NamedTensor *nts = NULL, **ntp = NULL;
  Floe__Dist__Tensor *tps = NULL;
  int nf = 0, nout = 0;
  struct {
    Running r;
  } run = {{.w = w}};
  bool linked = false;
  pthread_mutex_lock(&w->mu);
  WGraph *g = rq->graph_handle ? find_graph(w, rq->graph_handle) : NULL;
  floe_code ab = aborted_code(w, rq->step_id);
  if (!rq->request_id || !request_fresh(w, rq->request_id)) {
    floe_status_set(&out, FLOE_ALREADY_EXISTS, "RunGraph: request id %016" PRIx64 " was seen "
                    "already (a replayed or repeated request is not run again)", rq->request_id);
    g = NULL;
  } else if (!g) {
    floe_status_set(&out, FLOE_NOT_FOUND, "RunGraph: no graph %s registered here (the task "
                    "restarted, or the graph was deregistered)", rq->graph_handle ? rq->graph_handle : "(none)");
  } else if (ab != FLOE_OK) {
    floe_status_set(&out, ab, "RunGraph: step %016" PRIx64 " was aborted already", rq->step_id);
    g = NULL;
  } else {
    g->refs++;
    run.r.step_id = rq->step_id;
    run.r.next = w->running;
    w->running = &run.r;
    linked = true;
  }
  pthread_mutex_unlock(&w->mu);
  if (!g) goto done;
  if ((int)rq->n_feeds != g->num_feeds || (int)rq->n_fetches != g->num_fetches) {
    floe_status_set(&out, FLOE_INVALID_ARGUMENT, "RunGraph %s: %zu feeds and %zu fetches given; "
                    "the graph was registered with %d and %d", g->handle, rq->n_feeds,
                    rq->n_fetches, g->num_feeds, g->num_fetches);
    goto done;
  }
  feeds = floe__calloc((size_t)g->num_feeds + 1, sizeof *feeds);
  outputs = floe__calloc((size_t)g->num_fetches + 1, sizeof *outputs);
  if (!feeds || !outputs) {
    floe_status_set(&out, FLOE_NO_MEMORY, "out of memory running a step");
    goto done;
  }
  for (; nf < g->num_feeds; nf++) {
    const Floe__Dist__NamedTensor *nt = rq->feeds[nf];
    if (!nt || !nt->name || strcmp(nt->name, g->feeds[nf]) != 0) {
      floe_status_set(&out, FLOE_INVALID_ARGUMENT, "RunGraph %s: feed %d is \"%s\"; the graph "
                      "was registered with \"%s\" there", g->handle, nf,
                      nt && nt->name ? nt->name : "", g->feeds[nf]);
      goto done;
    }
    char what[160];
    snprintf(what, sizeof what, "RunGraph feed \"%s\"", nt->name);
    if (!(feeds[nf] = floe__tensor_from_proto(nt->tensor, what, &out))) goto done;
  }
  for (int i = 0; i < g->num_fetches; i++)
    if (!rq->fetches[i] || strcmp(rq->fetches[i], g->fetches[i]) != 0) {
      floe_status_set(&out, FLOE_INVALID_ARGUMENT, "RunGraph %s: fetch %d is \"%s\"; the graph "
                      "was registered with \"%s\" there", g->handle, i,
                      rq->fetches[i] ? rq->fetches[i] : "", g->fetches[i]);
      goto done;
    }
  FloeMultiRunCtl ctl = {.timeout_ms = rq->timeout_ms > 0 ? rq->timeout_ms : 0, .track = track,
                         .arg = &run.r, .step_id = rq->step_id};
  if (floe__multi_exec_run(g->exec, feeds, outputs, &ctl, &out) != FLOE_OK) goto done;
  nout = g->num_fetches;
  nts = floe__calloc((size_t)nout + 1, sizeof *nts);
  ntp = floe__calloc((size_t)nout + 1, sizeof *ntp);
  tps = floe__calloc((size_t)nout + 1, sizeof *tps);
  if (!nts || !ntp || !tps) {
    floe_status_set(&out, FLOE_NO_MEMORY, "out of memory returning a step's values");
    goto done;
  }
  for (int i = 0; i < nout; i++) {
    floe__dist__named_tensor__init(&nts[i]);
    nts[i].name = g->fetches[i];
    if (floe__tensor_to_proto(outputs[i], &tps[i], &out) != FLOE_OK) goto done;
    nts[i].tensor = &tps[i];
    ntp[i] = &nts[i];
  }
  resp.n_fetches = (size_t)nout;
  resp.fetches = ntp;
done:
  if (linked) {
    pthread_mutex_lock(&w->mu);
    for (Running **pp = &w->running; *pp; pp = &(*pp)->next)
      if (*pp == &run.r) {
        *pp = run.r.next;
        break;
      }
    graph_unref(w, g);
    pthread_mutex_unlock(&w->mu);
  }
  if (floe_status_code(&out) != FLOE_OK) {
    resp.n_fetches = 0;
    resp.fetches = NULL;
  }
  floe_code rc = reply_status(c, FLOE__WIRE_RUN_GRAPH_RESPONSE, &resp.base, &resp.status, &out, st);
  for (int i = 0; i < nf; i++) floe_tensor_release(feeds[i]);
  for (int i = 0; outputs && i < nout; i++) floe_tensor_release(outputs[i]);
  for (int i = 0; tps && i < nout; i++) floe__tensor_proto_clear(&tps[i]);
  floe__free(feeds);
  floe__free(outputs);
  floe__free(nts);
  floe__free(ntp);
  floe__free(tps);
  floe__free(run.r.steps);
  floe_status_clear(&out);
  return rc;
}

/* Aborts what step_id runs here and remembers it (code FLOE_OK: forgets nothing, aborts
 * nothing: the step ended and there is nothing to drop, since rendezvous tables are per
 * step and freed with it). */
static void abort_step(FloeWorkerService *w, uint64_t step_id, floe_code code, const char *msg) {
  pthread_mutex_lock(&w->mu);
  w->aborted[w->aborted_next] = step_id;
  w->aborted_code[w->aborted_next] = code;
  w->aborted_next = (w->aborted_next + 1) % ABORTED_WINDOW;
  for (Running *r = w->running; r; r = r->next)
    if (r->step_id == step_id)
      for (int i = 0; i < r->num_steps; i++) floe__exec_step_cancel(r->steps[i], code, msg);
  pthread_mutex_unlock(&w->mu);
}

static floe_code on_cleanup(FloeWorkerService *w, FloeConn *c,
                            const Floe__Dist__CleanupGraphRequest *rq, FloeStatus *st) {
  if (rq->code != FLOE_OK && rq->step_id) {
    floe_code code = rq->code > 0 && rq->code < 64 ? (floe_code)rq->code : FLOE_ABORTED;
    char msg[512];
    snprintf(msg, sizeof msg, "the master aborted step %016" PRIx64 ": %s", rq->step_id,
             rq->message ? rq->message : "");
    abort_step(w, rq->step_id, code, msg);
  }
  FloeStatus out = {FLOE_OK, NULL};
  Floe__Dist__CleanupGraphResponse resp = FLOE__DIST__CLEANUP_GRAPH_RESPONSE__INIT;
  return reply_status(c, FLOE__WIRE_CLEANUP_GRAPH_RESPONSE, &resp.base, &resp.status, &out, st);
}

static floe_code handle(void *arg, FloeConn *c, const FloeTaskIdentity *peer, uint16_t type,
                        const ProtobufCMessage *req, FloeStatus *st) {
  (void)peer;
  FloeWorkerService *w = arg;
  switch (type) {
  case FLOE__WIRE_CREATE_WORKER_SESSION:
    return on_create_session(w, c, (const void *)req, st);
  case FLOE__WIRE_DELETE_WORKER_SESSION:
    return on_delete_session(w, c, (const void *)req, st);
  case FLOE__WIRE_REGISTER_GRAPH:
    return on_register(w, c, (const void *)req, st);
  case FLOE__WIRE_DEREGISTER_GRAPH:
    return on_deregister(w, c, (const void *)req, st);
  case FLOE__WIRE_RUN_GRAPH:
    return on_run(w, c, (const void *)req, st);
  case FLOE__WIRE_CLEANUP_GRAPH:
    return on_cleanup(w, c, (const void *)req, st);
  default:
    return floe_status_set(st, FLOE_INTERNAL, "the worker service got a %s",
                           floe__wire_type_name(type));
  }
}

static const uint16_t kTypes[] = {FLOE__WIRE_CREATE_WORKER_SESSION, FLOE__WIRE_DELETE_WORKER_SESSION,
                                  FLOE__WIRE_REGISTER_GRAPH, FLOE__WIRE_DEREGISTER_GRAPH,
                                  FLOE__WIRE_RUN_GRAPH, FLOE__WIRE_CLEANUP_GRAPH};

floe_code floe__worker_service_start(FloeRuntime *rt, FloeDataPlane *dp, FloeRpcServer *server,
                                     FloeWorkerService **out, FloeStatus *st) {
  *out = NULL;
  FloeWorkerService *w = floe__calloc(1, sizeof *w);
  size_t cap = 1;
  while (cap < 2 * (size_t)FLOE__REQUEST_WINDOW) cap <<= 1;
  FloeStatus ignore = {FLOE_OK, NULL};
  if (w) {
    w->req_ring = floe__calloc(FLOE__REQUEST_WINDOW, sizeof *w->req_ring);
    w->req_set = floe__calloc(cap, sizeof *w->req_set);
    w->shared = floe__resources_new(&ignore);
    floe_status_clear(&ignore);
  }
  if (!w || !w->req_ring || !w->req_set || !w->shared || pthread_mutex_init(&w->mu, NULL) != 0) {
    if (w) {
      floe__free(w->req_ring);
      floe__free(w->req_set);
      floe__resources_free(w->shared);
    }
    floe__free(w);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting the worker service");
  }
  w->req_cap = cap;
  w->rt = rt;
  w->dp = dp;
  w->server = server;
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; i++)
    floe__rpc_server_handle(server, kTypes[i], handle, w);
  *out = w;
  return FLOE_OK;
}

void floe__worker_service_abort_running(FloeWorkerService *w, floe_code code, const char *why) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  for (Running *r = w->running; r; r = r->next)
    for (int i = 0; i < r->num_steps; i++) floe__exec_step_cancel(r->steps[i], code, why);
  pthread_mutex_unlock(&w->mu);
}

void floe__worker_service_reset(FloeWorkerService *w, floe_code code, const char *why) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  for (Running *r = w->running; r; r = r->next)
    for (int i = 0; i < r->num_steps; i++) floe__exec_step_cancel(r->steps[i], code, why);
  while (w->sessions) unlink_session(w, w->sessions);
  pthread_mutex_unlock(&w->mu);
}

void floe__worker_service_free(FloeWorkerService *w) {
  if (!w) return;
  /* The rpc server was freed first: it joined every handler, so nothing runs here now. */
  floe__worker_service_reset(w, FLOE_CANCELLED, "the task's server is stopping");
  pthread_mutex_destroy(&w->mu);
  floe__resources_free(w->shared);
  floe__free(w->req_ring);
  floe__free(w->req_set);
  floe__free(w);
}
