/* SPDX-License-Identifier: Apache-2.0 */
/* master.c - floe_session_new, and sessions of a cluster (TF's master).
 *
 * A session whose options name a cluster makes its process a master: the runtime's server
 * for its task (server.c; the chief's when the spec names no task) is started, every
 * other task's registration awaited (the chief's coordination service, directly or through
 * this task's agent: any task may be a master, as every worker is in between-graph
 * replication), their devices become remote FloeDevice records of the runtime
 * (names, properties and the incarnation their rendezvous keys carry), so the session's
 * placer and partitioner work unchanged over the whole cluster. A worker session is created
 * on every task (which connects its data plane to the others), and the session runs.
 *
 * Per run signature, the partitioned graph's nodes on another task form that task's piece
 * (multi_exec.c groups them): piece_build cuts it out as a graph of its own (fed values
 * become placeholders), registers it there (RegisterGraph) and keeps the handle. Per step,
 * piece_start sends RunGraph with the step's random 64-bit id and a fresh random request
 * id on a connection of the task's pool, from a thread of its own that waits for the
 * answer in short slices, so that an abort (CleanupGraph to the task) or a cluster error
 * (the task stopped heartbeating) ends the wait; piece_done reports, piece_finish hands
 * the fetched values over.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist.h"
#include "dist.pb-c.h"

#define RECV_SLICE_MS 200
#define RECV_WHOLE_MS 120000 /* reading one answer once it began */
#define CLEANUP_TIMEOUT_MS 5000
#define REGISTER_TIMEOUT_MS 120000 /* a large piece takes a while to build there */

typedef struct Master Master;

typedef struct Peer {
  char name[96];             /* "/job:worker/task:1" */
  char job[FLOE__JOB_NAME_MAX + 1];
  int task;
  FloeConnPool *pool;
} Peer;

/* A CleanupGraph to send (the cleanup thread sends them, so that a step's failure never
 * waits on a peer that may itself be the one hanging). */
typedef struct Cleanup {
  struct Peer *peer;
  uint64_t step_id;
  floe_code code;
  char *msg;
  struct Cleanup *next;
} Cleanup;

struct Master {
  FloeServer *server;
  FloeRuntime *rt;
  char *handle;              /* the worker sessions' */
  Peer *peers;
  int num_peers;
  FloeRemotePieceFns fns;
  FloeSession *session;      /* set once created */
  int watch_id;
  pthread_mutex_t mu;
  floe_code error;           /* the cluster's first error while the session lives */
  char *error_msg;
  Cleanup *cleanups;         /* under mu: to send, oldest first */
  bool cleanup_stop;         /* under mu */
  bool cleanup_started;
  pthread_t cleanup_thread;
  pthread_cond_t cleanup_cv;
};

typedef struct Piece {
  Master *m;
  Peer *peer;
  char *handle;              /* the registered graph's */
  char **feeds, **fetches;   /* "name:index" in the registered graph */
  int num_feeds, num_fetches;
} Piece;

typedef struct Call {
  Piece *pc;
  uint64_t step_id;
  FloeTensor *const *feeds;
  int64_t timeout_ms;
  FloeRemoteDoneFn done;
  void *done_arg;
  pthread_t thread;
  pthread_mutex_t mu;
  bool abort;                /* under mu */
  floe_code abort_code;
  char *abort_msg;
  /* the result, read by finish after the thread was joined */
  FloeStatus st;
  Floe__Dist__RunGraphResponse *resp;
} Call;

static Peer *peer_of(Master *m, const FloeDevice *d) {
  for (int i = 0; i < m->num_peers; i++)
    if (m->peers[i].task == d->task && strcmp(m->peers[i].job, d->job) == 0) return &m->peers[i];
  return NULL;
}

/* A task that answers NOT_FOUND for this session's worker session or graph lost them: it
 * restarted (a new incarnation) since the session began. */
static void restarted(FloeStatus *st, const Peer *peer) {
  if (floe_status_code(st) != FLOE_NOT_FOUND) return;
  char *msg = floe__strdup(floe_status_message(st));
  floe_status_set(st, FLOE_ABORTED, "%s restarted since this session began (its state for the "
                  "session is gone): %s", peer->name, msg ? msg : "");
  floe__free(msg);
}

/* What to do, after an error that a lost or restarted task caused. */
static void add_hint(FloeStatus *st, const char *task) {
  floe_code code = floe_status_code(st);
  if (code != FLOE_UNAVAILABLE && code != FLOE_ABORTED) return;
  char *msg = floe__strdup(floe_status_message(st));
  if (!msg) return;
  if (code == FLOE_UNAVAILABLE)
    floe_status_set(st, code, "%s; %s is unavailable: the other tasks dropped the step; when "
                    "it is back (restart its server: floe server), create a new session", msg,
                    task ? task : "a task");
  else
    floe_status_set(st, code, "%s; create a new session: it runs on the tasks as they are now",
                    msg);
  floe__free(msg);
}

static floe_code cluster_error(Master *m, FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  floe_code rc = m->error;
  if (rc != FLOE_OK) floe_status_set(st, rc, "%s", m->error_msg ? m->error_msg : "cluster error");
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* ---- building a task's piece ------------------------------------------------------------ */

static char **names_new(int n) { return floe__calloc((size_t)n + 1, sizeof(char *)); }
static void names_free(char **v, int n) {
  for (int i = 0; v && i < n; i++) floe__free(v[i]);
  floe__free(v);
}

static void piece_free(void *arg, void *p) {
  (void)arg;
  Piece *pc = p;
  if (!pc) return;
  if (pc->handle) { /* deregister: best effort (the task may be gone) */
    Floe__Dist__DeregisterGraphRequest rq = FLOE__DIST__DEREGISTER_GRAPH_REQUEST__INIT;
    rq.graph_handle = pc->handle;
    ProtobufCMessage *resp = NULL;
    FloeStatus ignore = {FLOE_OK, NULL};
    if (cluster_error(pc->m, &ignore) == FLOE_OK)
      floe__conn_pool_call(pc->peer->pool, FLOE__WIRE_DEREGISTER_GRAPH, &rq.base,
                           FLOE__WIRE_DEREGISTER_GRAPH_RESPONSE, CLEANUP_TIMEOUT_MS, &resp,
                           &ignore);
    floe__wire_free(resp);
    floe_status_clear(&ignore);
  }
  names_free(pc->feeds, pc->num_feeds);
  names_free(pc->fetches, pc->num_fetches);
  floe__free(pc->handle);
  floe__free(pc);
}

/* The task's nodes of g as a graph of their own: a clone keeping what they reach, with each
 * fed value they read replaced by a placeholder "_floe_feed_K", every node naming its
 * device. */
static FloeGraph *cut_piece(const FloeGraph *g, const bool *run, FloeDevice *const *dev,
                            const FloeDevice *any, const FloeOutput *feeds, int num_feeds,
                            FloeStatus *st) {
  FloeGraph *c = floe__graph_clone(g, st);
  if (!c) return NULL;
  int n0 = c->num_nodes;
  FloeNode **roots = floe__calloc((size_t)(n0 + num_feeds) + 1, sizeof *roots);
  if (!roots) {
    floe_graph_free(c);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory cutting a task's piece");
    return NULL;
  }
  int nr = 0;
  for (int i = 0; i < n0; i++) {
    if (!run[i]) continue;
    FloeNode *n = c->nodes[i];
    char *d = floe__strdup(dev[i]->name);
    if (!d) goto oom;
    floe__free(n->device);
    n->device = d;
    roots[nr++] = n;
  }
  for (int k = 0; k < num_feeds; k++) {
    const FloeNode *src = feeds[k].node;
    int idx = feeds[k].index;
    char name[64];
    snprintf(name, sizeof name, "_floe_feed_%d", k);
    FloeOutput ph = floe_placeholder(c, name, src->out_dtypes[idx], src->out_shapes[idx]);
    if (!ph.node) {
      floe_status_set(st, c->error ? c->error : FLOE_INTERNAL, "adding the placeholder of feed "
                      "%s:%d to a task's piece: %s", src->name, idx,
                      c->error_msg ? c->error_msg : "failed");
      goto fail;
    }
    char *d = floe__strdup(any->name);
    if (!d) goto oom;
    floe__free(ph.node->device);
    ph.node->device = d;
    for (int i = 0; i < n0; i++) {
      if (!run[i]) continue;
      FloeNode *n = c->nodes[i];
      for (int j = 0; j < n->num_inputs; j++)
        if (n->inputs[j].node->id == src->id && n->inputs[j].index == idx &&
            floe__node_set_input(n, j, ph, st) != FLOE_OK)
          goto fail;
    }
    roots[nr++] = ph.node;
  }
  floe__graph_keep_reachable(c, roots, nr);
  floe__free(roots);
  return c;
oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory cutting a task's piece");
fail:
  floe__free(roots);
  floe_graph_free(c);
  return NULL;
}

static floe_code piece_build(void *arg, const FloeDevice *device, const FloeGraph *g,
                             const bool *run, FloeDevice *const *dev, const FloeOutput *feeds,
                             int num_feeds, const FloeOutput *fetches, int num_fetches,
                             void **out, FloeStatus *st) {
  Master *m = arg;
  *out = NULL;
  Peer *peer = peer_of(m, device);
  if (!peer)
    return floe_status_set(st, FLOE_INTERNAL, "device %s is on no task of the cluster",
                           device->name);
  Piece *pc = floe__calloc(1, sizeof *pc);
  if (!pc) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a piece");
  pc->m = m;
  pc->peer = peer;
  pc->feeds = names_new(num_feeds);
  pc->fetches = names_new(num_fetches);
  if (!pc->feeds || !pc->fetches) goto oom;
  for (; pc->num_feeds < num_feeds; pc->num_feeds++)
    if (!(pc->feeds[pc->num_feeds] = floe__asprintf("_floe_feed_%d:0", pc->num_feeds))) goto oom;
  for (; pc->num_fetches < num_fetches; pc->num_fetches++) {
    const FloeOutput *o = &fetches[pc->num_fetches];
    if (!(pc->fetches[pc->num_fetches] = floe__asprintf("%s:%d", o->node->name, o->index)))
      goto oom;
  }
  FloeGraph *piece = cut_piece(g, run, dev, device, feeds, num_feeds, st);
  if (!piece) goto fail;
  bool cf = false;
  for (int i = 0; i < piece->num_nodes && !cf; i++) {
    const char *op = piece->nodes[i]->op->name;
    cf = !strcmp(op, "Enter") || !strcmp(op, "Exit") || !strcmp(op, "Switch") ||
         !strcmp(op, "Merge") || !strcmp(op, "NextIteration") || !strcmp(op, "LoopCond");
  }
  void *buf = NULL;
  size_t len = 0;
  floe_code rc = floe_graph_serialize(piece, &buf, &len, st);
  floe_graph_free(piece);
  if (rc != FLOE_OK) goto fail;
  Floe__Dist__RegisterGraphRequest rq = FLOE__DIST__REGISTER_GRAPH_REQUEST__INIT;
  rq.session_handle = m->handle;
  rq.graph.data = buf;
  rq.graph.len = len;
  rq.n_feeds = (size_t)pc->num_feeds;
  rq.feeds = pc->feeds;
  rq.n_fetches = (size_t)pc->num_fetches;
  rq.fetches = pc->fetches;
  rq.control_flow = cf;
  ProtobufCMessage *resp = NULL;
  rc = floe__conn_pool_call(peer->pool, FLOE__WIRE_REGISTER_GRAPH, &rq.base,
                            FLOE__WIRE_REGISTER_GRAPH_RESPONSE, REGISTER_TIMEOUT_MS, &resp, st);
  free(buf);
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "registering the piece of %s", peer->name);
    goto fail;
  }
  Floe__Dist__RegisterGraphResponse *r = (Floe__Dist__RegisterGraphResponse *)resp;
  if (floe__status_from_proto(r->status, st) != FLOE_OK || !r->graph_handle) {
    if (floe_status_code(st) == FLOE_OK)
      floe_status_set(st, FLOE_INTERNAL, "%s answered RegisterGraph without a handle", peer->name);
    restarted(st, peer);
    floe__status_prefix(st, "%s refused its piece of the graph", peer->name);
    floe__wire_free(resp);
    goto fail;
  }
  pc->handle = floe__strdup(r->graph_handle);
  floe__wire_free(resp);
  if (!pc->handle) goto oom;
  *out = pc;
  return FLOE_OK;
oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a piece");
fail:
  piece_free(m, pc);
  return floe_status_code(st) ? floe_status_code(st) : FLOE_INTERNAL;
}

/* ---- running a step of a piece --------------------------------------------------------------- */

/* Queues CleanupGraph(step, code, msg) for c's task; msg taken over (may be NULL). */
static void queue_cleanup(Call *c, floe_code code, char *msg) {
  Master *m = c->pc->m;
  Cleanup *q = floe__calloc(1, sizeof *q);
  if (!q) { /* the task's own deadline or the session's end drops the step there anyway */
    floe__free(msg);
    return;
  }
  *q = (Cleanup){c->pc->peer, c->step_id, code, msg, NULL};
  pthread_mutex_lock(&m->mu);
  Cleanup **tail = &m->cleanups;
  while (*tail) tail = &(*tail)->next;
  *tail = q;
  pthread_cond_broadcast(&m->cleanup_cv);
  pthread_mutex_unlock(&m->mu);
}

static void *cleanup_main(void *arg) {
  Master *m = arg;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (!m->cleanups && !m->cleanup_stop) pthread_cond_wait(&m->cleanup_cv, &m->mu);
    Cleanup *q = m->cleanups;
    if (!q) break; /* stopping and nothing left */
    m->cleanups = q->next;
    /* At the session's end, what is left goes with the worker sessions; after a cluster
     * error the tasks have stopped the session's steps themselves (the error reached them
     * with their heartbeats), and the task in error may hang: nothing is sent then. */
    bool stop = m->cleanup_stop || m->error != FLOE_OK;
    pthread_mutex_unlock(&m->mu);
    if (!stop) {
      Floe__Dist__CleanupGraphRequest rq = FLOE__DIST__CLEANUP_GRAPH_REQUEST__INIT;
      rq.step_id = q->step_id;
      rq.code = (int32_t)q->code;
      rq.message = q->msg ? q->msg : (char *)"";
      ProtobufCMessage *resp = NULL;
      FloeStatus ignore = {FLOE_OK, NULL};
      floe__conn_pool_call(q->peer->pool, FLOE__WIRE_CLEANUP_GRAPH, &rq.base,
                           FLOE__WIRE_CLEANUP_GRAPH_RESPONSE, CLEANUP_TIMEOUT_MS, &resp,
                           &ignore);
      floe__wire_free(resp);
      floe_status_clear(&ignore);
    }
    floe__free(q->msg);
    floe__free(q);
    pthread_mutex_lock(&m->mu);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

static void *call_main(void *arg) {
  Call *c = arg;
  Piece *pc = c->pc;
  Master *m = pc->m;
  FloeConn *conn = NULL;
  Floe__Dist__NamedTensor *nts = floe__calloc((size_t)pc->num_feeds + 1, sizeof *nts);
  Floe__Dist__NamedTensor **ntp = floe__calloc((size_t)pc->num_feeds + 1, sizeof *ntp);
  Floe__Dist__Tensor *tps = floe__calloc((size_t)pc->num_feeds + 1, sizeof *tps);
  int encoded = 0;
  bool broken = false;
  if (!nts || !ntp || !tps) {
    floe_status_set(&c->st, FLOE_NO_MEMORY, "out of memory sending a step");
    goto out;
  }
  if (cluster_error(m, &c->st) != FLOE_OK) goto out;
  for (; encoded < pc->num_feeds; encoded++) {
    floe__dist__named_tensor__init(&nts[encoded]);
    nts[encoded].name = pc->feeds[encoded];
    if (floe__tensor_to_proto(c->feeds[encoded], &tps[encoded], &c->st) != FLOE_OK) goto out;
    nts[encoded].tensor = &tps[encoded];
    ntp[encoded] = &nts[encoded];
  }
  Floe__Dist__RunGraphRequest rq = FLOE__DIST__RUN_GRAPH_REQUEST__INIT;
  rq.graph_handle = pc->handle;
  rq.step_id = c->step_id;
  if (floe__auth_random((uint8_t *)&rq.request_id, sizeof rq.request_id, &c->st) != FLOE_OK)
    goto out;
  rq.request_id |= 1; /* 0 is never an id */
  rq.n_feeds = (size_t)pc->num_feeds;
  rq.feeds = ntp;
  rq.n_fetches = (size_t)pc->num_fetches;
  rq.fetches = pc->fetches;
  rq.timeout_ms = c->timeout_ms;
  if (floe__conn_pool_get(pc->peer->pool, &conn, &c->st) != FLOE_OK) {
    floe__status_prefix(&c->st, "reaching %s for step %016" PRIx64, pc->peer->name, c->step_id);
    broken = true; /* no connection to give back; the hint below applies */
    goto out;
  }
  if (floe__conn_send(conn, FLOE__WIRE_RUN_GRAPH, &rq.base, 0, &c->st) != FLOE_OK) {
    broken = true;
    goto out;
  }
  /* The answer, in slices: between them an abort is passed on (once) and a cluster error
   * (the task died) ends the wait. */
  bool cleaned = false;
  int64_t waited = 0;
  for (;;) {
    FloeStatus rs = {FLOE_OK, NULL};
    floe_code rc = floe__conn_wait(conn, RECV_SLICE_MS, &rs);
    if (rc == FLOE_OK) { /* the answer (a large one may take a while to read) */
      uint16_t type = 0;
      ProtobufCMessage *msg = NULL;
      rc = floe__conn_recv(conn, RECV_WHOLE_MS, &type, &msg, &rs);
      if (rc == FLOE_OK && type != FLOE__WIRE_RUN_GRAPH_RESPONSE) {
        floe_status_set(&rs, FLOE_INTERNAL, "%s answered RunGraph with a %s", pc->peer->name,
                        floe__wire_type_name(type));
        floe__wire_free(msg);
        rc = FLOE_INTERNAL;
      }
      if (rc == FLOE_OK) {
        c->resp = (Floe__Dist__RunGraphResponse *)msg;
        break;
      }
    }
    if (rc != FLOE_DEADLINE_EXCEEDED) {
      floe__status_copy(&c->st, &rs);
      floe_status_clear(&rs);
      floe__status_prefix(&c->st, "waiting for %s to run its piece of step %016" PRIx64,
                          pc->peer->name, c->step_id);
      broken = true;
      goto out;
    }
    floe_status_clear(&rs);
    waited += RECV_SLICE_MS;
    pthread_mutex_lock(&c->mu);
    bool ab = c->abort && !cleaned;
    floe_code ac = c->abort_code;
    char *am = ab && c->abort_msg ? floe__strdup(c->abort_msg) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (ab) {
      queue_cleanup(c, ac, am); /* takes am */
      cleaned = true;
    } else {
      floe__free(am);
    }
    if (cluster_error(m, &c->st) != FLOE_OK) {
      floe__status_prefix(&c->st, "step %016" PRIx64 " on %s", c->step_id, pc->peer->name);
      broken = true; /* its answer, if any, would come on this connection later */
      goto out;
    }
    /* The task's own deadline ends the step there; past it (and a grace period) the task
     * is not answering. */
    if (c->timeout_ms > 0 && waited > c->timeout_ms + 10000) {
      floe_status_set(&c->st, FLOE_DEADLINE_EXCEEDED, "%s did not answer step %016" PRIx64
                      " within its timeout of %" PRId64 " ms (+10 s)", pc->peer->name,
                      c->step_id, c->timeout_ms);
      broken = true;
      goto out;
    }
  }
  if (floe__status_from_proto(c->resp->status, &c->st) != FLOE_OK) {
    restarted(&c->st, pc->peer);
    floe__status_prefix(&c->st, "%s", pc->peer->name);
  }
  else if ((int)c->resp->n_fetches != pc->num_fetches)
    floe_status_set(&c->st, FLOE_INTERNAL, "%s returned %zu values for %d fetches",
                    pc->peer->name, c->resp->n_fetches, pc->num_fetches);
out:
  if (conn) floe__conn_pool_put(pc->peer->pool, conn, broken);
  for (int i = 0; i < encoded; i++) floe__tensor_proto_clear(&tps[i]);
  floe__free(nts);
  floe__free(ntp);
  floe__free(tps);
  if (broken || floe_status_code(&c->st) == FLOE_ABORTED) add_hint(&c->st, pc->peer->name);
  floe_code code = floe_status_code(&c->st);
  c->done(c->done_arg, code, code ? floe_status_message(&c->st) : NULL);
  return NULL;
}

static floe_code piece_start(void *arg, void *piece, uint64_t step_id, FloeTensor *const *feeds,
                             int64_t timeout_ms, FloeRemoteDoneFn done, void *done_arg,
                             void **call, FloeStatus *st) {
  (void)arg;
  Call *c = floe__calloc(1, sizeof *c);
  if (!c) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a step");
  c->pc = piece;
  c->step_id = step_id;
  c->feeds = feeds;
  c->timeout_ms = timeout_ms;
  c->done = done;
  c->done_arg = done_arg;
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    floe__free(c);
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a mutex");
  }
  int e = pthread_create(&c->thread, NULL, call_main, c);
  if (e != 0) {
    pthread_mutex_destroy(&c->mu);
    floe__free(c);
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot start a thread for a step on "
                           "%s: %s", ((Piece *)piece)->peer->name, strerror(e));
  }
  *call = c;
  return FLOE_OK;
}

static floe_code piece_finish(void *arg, void *call, FloeTensor **outputs, FloeStatus *st) {
  (void)arg;
  Call *c = call;
  pthread_join(c->thread, NULL);
  Piece *pc = c->pc;
  floe_code rc = floe_status_code(&c->st);
  if (rc != FLOE_OK) {
    floe__status_copy(st, &c->st);
  } else {
    int k = 0;
    for (; k < pc->num_fetches; k++) {
      const Floe__Dist__NamedTensor *nt = c->resp->fetches[k];
      char what[160];
      snprintf(what, sizeof what, "value of %s from %s", pc->fetches[k], pc->peer->name);
      if (!nt || !(outputs[k] = floe__tensor_from_proto(nt->tensor, what, st))) break;
    }
    if (k < pc->num_fetches) {
      if (floe_status_code(st) == FLOE_OK)
        floe_status_set(st, FLOE_INTERNAL, "%s returned no value for %s", pc->peer->name,
                        pc->fetches[k]);
      for (int i = 0; i < k; i++) {
        floe_tensor_release(outputs[i]);
        outputs[i] = NULL;
      }
      rc = floe_status_code(st);
    }
  }
  floe__wire_free(c->resp ? &c->resp->base : NULL);
  floe_status_clear(&c->st);
  floe__free(c->abort_msg);
  pthread_mutex_destroy(&c->mu);
  floe__free(c);
  return rc;
}

static void piece_abort(void *arg, void *call, floe_code code, const char *msg) {
  (void)arg;
  Call *c = call;
  pthread_mutex_lock(&c->mu);
  if (!c->abort) {
    c->abort = true;
    c->abort_code = code ? code : FLOE_ABORTED;
    c->abort_msg = floe__strdup(msg ? msg : "");
  }
  pthread_mutex_unlock(&c->mu);
}

/* ---- the session ------------------------------------------------------------------------------ */

static void on_cluster_error(void *arg, floe_code code, const char *msg) {
  Master *m = arg;
  pthread_mutex_lock(&m->mu);
  bool first = m->error == FLOE_OK;
  if (first) {
    FloeStatus h = {FLOE_OK, NULL};
    floe_status_set(&h, code, "%s", msg ? msg : "");
    add_hint(&h, NULL);
    m->error = code;
    m->error_msg = floe__strdup(floe_status_message(&h));
    floe_status_clear(&h);
    msg = m->error_msg;
  }
  FloeSession *s = m->session;
  pthread_mutex_unlock(&m->mu);
  if (first && s) floe__session_abort(s, code, msg);
}

static void master_free(Master *m) {
  if (!m) return;
  if (m->watch_id > 0) floe__server_unwatch(m->server, m->watch_id);
  if (m->cleanup_started) {
    pthread_mutex_lock(&m->mu);
    m->cleanup_stop = true;
    pthread_cond_broadcast(&m->cleanup_cv);
    pthread_mutex_unlock(&m->mu);
    /* After a cluster error a peer may hang: wake a cleanup waiting on it (nothing more is
     * sent to the tasks then: their sessions are dropped when the chief's error reaches
     * them, or when they see this chief gone). */
    FloeStatus ignore = {FLOE_OK, NULL};
    if (cluster_error(m, &ignore) != FLOE_OK)
      for (int i = 0; i < m->num_peers; i++)
        if (m->peers[i].pool) floe__conn_pool_shutdown(m->peers[i].pool);
    floe_status_clear(&ignore);
    pthread_join(m->cleanup_thread, NULL);
  }
  for (int i = 0; i < m->num_peers; i++) {
    Peer *p = &m->peers[i];
    if (!p->pool) continue;
    FloeStatus ignore = {FLOE_OK, NULL};
    if (m->handle && cluster_error(m, &ignore) == FLOE_OK) {
      Floe__Dist__DeleteWorkerSessionRequest rq = FLOE__DIST__DELETE_WORKER_SESSION_REQUEST__INIT;
      rq.session_handle = m->handle;
      ProtobufCMessage *resp = NULL;
      floe__conn_pool_call(p->pool, FLOE__WIRE_DELETE_WORKER_SESSION, &rq.base,
                           FLOE__WIRE_DELETE_WORKER_SESSION_RESPONSE, CLEANUP_TIMEOUT_MS, &resp,
                           &ignore);
      floe__wire_free(resp);
    }
    floe_status_clear(&ignore);
    floe__conn_pool_free(p->pool);
  }
  floe__free(m->peers);
  floe__free(m->handle);
  floe__free(m->error_msg);
  pthread_cond_destroy(&m->cleanup_cv);
  pthread_mutex_destroy(&m->mu);
  floe__free(m);
}

static void master_release(void *arg) { master_free(arg); }

/* The other tasks' devices as records of this runtime. */
static floe_code add_remote_devices(Master *m, Floe__Dist__TaskInfo **infos, int n,
                                    FloeStatus *st) {
  const FloeTaskIdentity *me = floe__server_identity(m->server);
  int total = 0;
  for (int i = 0; i < n; i++)
    if (!(infos[i]->task && infos[i]->task->task == me->task && !strcmp(infos[i]->task->job, me->job)))
      total += (int)infos[i]->n_devices;
  FloeDevice *devs = floe__calloc((size_t)total + 1, sizeof *devs);
  if (!devs) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding remote devices");
  int k = 0;
  for (int i = 0; i < n; i++) {
    const Floe__Dist__TaskInfo *ti = infos[i];
    if (ti->task->task == me->task && !strcmp(ti->task->job, me->job)) continue;
    for (size_t j = 0; j < ti->n_devices; j++) {
      const Floe__Dist__DeviceInfo *di = ti->devices[j];
      FloeDevice *d = &devs[k++];
      snprintf(d->job, sizeof d->job, "%s", ti->task->job);
      d->task = ti->task->task;
      snprintf(d->props.type, sizeof d->props.type, "%s", di->type ? di->type : "");
      snprintf(d->props.description, sizeof d->props.description, "%s",
               di->description ? di->description : "");
      d->props.struct_size = sizeof d->props;
      d->props.memory_bytes = di->memory_bytes;
      for (size_t f = 0; f < di->n_peak_flops && f < FLOE_DTYPE_LIMIT; f++)
        d->props.peak_flops[f] = di->peak_flops[f];
      d->props.memory_bandwidth = di->memory_bandwidth;
      d->props.host_to_device_bandwidth = di->host_to_device_bandwidth;
      d->props.device_to_host_bandwidth = di->device_to_host_bandwidth;
      d->props.peer_bandwidth = di->peer_bandwidth;
      d->props.flags = di->flags;
      d->props.ordinal = di->ordinal;
      d->props.vector_flops = di->vector_flops;
      d->props.launch_overhead = di->launch_overhead;
      d->index = di->index;
      d->remote_incarnation = di->incarnation;
      snprintf(d->name, sizeof d->name, "/job:%s/replica:0/task:%d/device:%s:%d", d->job,
               d->task, d->props.type, d->index);
      char lower[sizeof d->props.type];
      size_t q = 0;
      for (; d->props.type[q] && q + 1 < sizeof lower; q++)
        lower[q] = d->props.type[q] == '_' ? '-' : (char)(d->props.type[q] | 0x20);
      lower[q] = '\0';
      snprintf(d->short_name, sizeof d->short_name, "%s/%d/%s:%d", d->job, d->task, lower,
               d->index);
    }
  }
  floe_code rc = floe__runtime_set_remote(m->rt, devs, k, st);
  floe__free(devs);
  return rc;
}

typedef struct CreateCall {
  Master *m;
  Peer *peer;
  Floe__Dist__TaskInfo **infos;
  int n;
  int64_t timeout_ms;
  pthread_t thread;
  FloeStatus st;
} CreateCall;

static void *create_main(void *arg) {
  CreateCall *cc = arg;
  Floe__Dist__CreateWorkerSessionRequest rq = FLOE__DIST__CREATE_WORKER_SESSION_REQUEST__INIT;
  rq.session_handle = cc->m->handle;
  rq.n_cluster = (size_t)cc->n;
  rq.cluster = cc->infos;
  rq.timeout_ms = cc->timeout_ms;
  ProtobufCMessage *resp = NULL;
  if (floe__conn_pool_call(cc->peer->pool, FLOE__WIRE_CREATE_WORKER_SESSION, &rq.base,
                           FLOE__WIRE_CREATE_WORKER_SESSION_RESPONSE, (int)cc->timeout_ms + 5000,
                           &resp, &cc->st) == FLOE_OK) {
    Floe__Dist__CreateWorkerSessionResponse *r = (void *)resp;
    floe__status_from_proto(r->status, &cc->st);
  }
  if (floe_status_code(&cc->st) != FLOE_OK)
    floe__status_prefix(&cc->st, "creating the session on %s", cc->peer->name);
  floe__wire_free(resp);
  return NULL;
}

/* ---- the links' figures for the cost model ---------------------------------------------------- */

/* Seconds of one step fetching a tensor of n floats made on dev (a remote device) into this
 * task: the median of a few steps, after one warm-up (which registers the piece). */
static double probe_once(Master *m, const FloeDevice *dev, int64_t n, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  FloeTensor *t = g ? floe_tensor_new(FLOE_F32, 1, &n, st) : NULL;
  double best = -1;
  if (!t) goto out;
  floe_graph_set_device_scope(g, dev->name);
  FloeOutput c = floe_const(g, "probe", t);
  floe_graph_set_device_scope(g, NULL);
  FloeNodeBuilder *b = floe_node_begin(g, "Identity", "here");
  floe_node_add_input(b, c);
  floe_node_finish(b);
  if (floe_graph_status(g) != FLOE_OK) goto out;
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = m->rt;
  FloeSessionCluster cl = {&m->fns, floe__dataplane_route(floe__server_dataplane(m->server)),
                           NULL, NULL};
  FloeSession *s = floe__session_create(g, &so, &cl, st);
  if (!s) goto out;
  double times[5];
  int k = 0;
  const char *fetch = "here";
  for (int i = 0; i < 6; i++) {
    FloeTensor *o = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &o, st) != FLOE_OK) break;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    floe_tensor_release(o);
    if (i > 0) times[k++] = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  }
  floe_session_free(s);
  if (k == 5) {
    for (int i = 1; i < 5; i++) /* insertion sort: the median of five */
      for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
        double x = times[j];
        times[j] = times[j - 1];
        times[j - 1] = x;
      }
    best = times[2];
  }
out:
  floe_tensor_release(t);
  floe_graph_free(g);
  return best;
}

/* Measures each task's link as the cost model sees it, by fetching 4 bytes and 1 MiB from
 * one of its devices through the session's own path (the rendezvous, the data plane, the
 * control plane's RunGraph): the small step's time is the latency, the difference the
 * bandwidth. The figures go on the task's remote devices. A failed probe leaves the model's
 * defaults (and is not an error: the session may still run). */
static void measure_links(Master *m) {
  int n;
  FloeDevice **remote = floe__runtime_remote(m->rt, &n);
  if (n <= 0) return;
  FloeDevice *copy = floe__calloc((size_t)n, sizeof *copy);
  if (!copy) return;
  for (int i = 0; i < n; i++) copy[i] = *remote[i];
  bool changed = false;
  for (int p = 0; p < m->num_peers; p++) {
    const FloeDevice *dev = NULL;
    for (int i = 0; i < n && !dev; i++)
      if (copy[i].task == m->peers[p].task && !strcmp(copy[i].job, m->peers[p].job)) dev = remote[i];
    if (!dev) continue;
    FloeStatus st = {FLOE_OK, NULL};
    double small = probe_once(m, dev, 1, &st);
    double big = small > 0 ? probe_once(m, dev, 262144, &st) : -1;
    floe_status_clear(&st);
    if (small <= 0 || big <= 0) continue;
    double bw = big > small ? 1048576.0 / (big - small) : 1e10;
    for (int i = 0; i < n; i++)
      if (copy[i].task == m->peers[p].task && !strcmp(copy[i].job, m->peers[p].job)) {
        copy[i].link_latency = small;
        copy[i].link_bandwidth = bw;
        changed = true;
      }
  }
  FloeStatus ignore = {FLOE_OK, NULL};
  if (changed) floe__runtime_set_remote(m->rt, copy, n, &ignore);
  floe_status_clear(&ignore);
  floe__free(copy);
}

static FloeSession *master_session_new(const FloeGraph *g, const FloeSessionOptions *opts,
                                       FloeStatus *st) {
  FloeRuntime *rt = opts->runtime ? opts->runtime : floe_runtime_default(st);
  if (!rt) return NULL;
  int64_t timeout = FLOE_HAS_FIELD(opts, FloeSessionOptions, cluster_timeout_ms) &&
                            opts->cluster_timeout_ms > 0
                        ? opts->cluster_timeout_ms
                        : 60000;
  FloeServer *srv;
  if (floe__server_for_session(rt, opts->cluster, &srv, st) != FLOE_OK) return NULL;
  Master *m = floe__calloc(1, sizeof *m);
  if (!m || pthread_mutex_init(&m->mu, NULL) != 0) {
    floe__free(m);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a session");
    return NULL;
  }
  if (pthread_cond_init(&m->cleanup_cv, NULL) != 0) {
    pthread_mutex_destroy(&m->mu);
    floe__free(m);
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a condition variable");
    return NULL;
  }
  m->server = srv;
  m->rt = rt;
  FloeCoordInfos all = {0, NULL};
  CreateCall *calls = NULL;
  FloeSession *s = NULL;
  if (floe__server_wait_all(srv, timeout, &all, st) != FLOE_OK) {
    floe__status_prefix(st, "waiting %" PRId64 " ms for every task of the cluster to register", timeout);
    goto fail;
  }
  Floe__Dist__TaskInfo **infos = all.infos;
  int n = all.n;
  if (add_remote_devices(m, infos, n, st) != FLOE_OK) goto fail;
  const FloeTaskIdentity *me = floe__server_identity(srv);
  m->peers = floe__calloc((size_t)n + 1, sizeof *m->peers);
  uint64_t r = 0;
  if (floe__auth_random((uint8_t *)&r, sizeof r, st) != FLOE_OK) goto fail;
  m->handle = floe__asprintf("session-%016" PRIx64, r);
  calls = floe__calloc((size_t)n + 1, sizeof *calls);
  if (!m->peers || !m->handle || !calls) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a session");
    goto fail;
  }
  for (int i = 0; i < n; i++) {
    const Floe__Dist__TaskId *id = infos[i]->task;
    if (id->task == me->task && !strcmp(id->job, me->job)) continue;
    Peer *p = &m->peers[m->num_peers];
    snprintf(p->job, sizeof p->job, "%s", id->job);
    p->task = id->task;
    snprintf(p->name, sizeof p->name, "/job:%s/task:%d", id->job, id->task);
    FloeConnOptions co = floe__server_conn_options(srv);
    co.timeout_ms = 3000; /* connect and handshake: a live peer answers in milliseconds */
    co.expect_job = p->job;
    co.expect_task = p->task;
    if (floe__conn_pool_new(infos[i]->address, &co, &p->pool, st) != FLOE_OK) goto fail;
    m->num_peers++;
  }
  /* Every task connects its data plane to the others while this one does too. */
  int started = 0;
  for (int i = 0; i < m->num_peers; i++) {
    CreateCall *cc = &calls[i];
    *cc = (CreateCall){m, &m->peers[i], infos, n, timeout, 0, {FLOE_OK, NULL}};
    if (pthread_create(&cc->thread, NULL, create_main, cc) != 0) {
      floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot start a thread");
      break;
    }
    started++;
  }
  FloeStatus own = {FLOE_OK, NULL};
  if (started == m->num_peers)
    floe__dataplane_connect(floe__server_dataplane(srv), (ProtobufCMessage *const *)infos, n,
                            timeout, &own);
  for (int i = 0; i < started; i++) pthread_join(calls[i].thread, NULL);
  floe_code rc = floe_status_code(st);
  for (int i = 0; i < started; i++) {
    if (rc == FLOE_OK && floe_status_code(&calls[i].st) != FLOE_OK) {
      floe__status_copy(st, &calls[i].st);
      rc = floe_status_code(st);
    }
    floe_status_clear(&calls[i].st);
  }
  if (rc == FLOE_OK && floe_status_code(&own) != FLOE_OK) {
    floe__status_copy(st, &own);
    rc = floe_status_code(st);
  }
  floe_status_clear(&own);
  if (rc != FLOE_OK) goto fail;
  if (pthread_create(&m->cleanup_thread, NULL, cleanup_main, m) != 0) {
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot start the session's cleanup thread");
    goto fail;
  }
  m->cleanup_started = true;
  m->fns = (FloeRemotePieceFns){m, piece_build, piece_free, piece_start, piece_finish, piece_abort};
  FloeSessionCluster cl = {&m->fns, floe__dataplane_route(floe__server_dataplane(srv)),
                           master_release, m};
  m->watch_id = floe__server_watch(srv, on_cluster_error, m);
  /* Only the cost model uses the figures: a session that names no device list skips it. */
  if (FLOE_HAS_FIELD(opts, FloeSessionOptions, devices) && opts->devices && opts->devices[0])
    measure_links(m);
  s = floe__session_create(g, opts, &cl, st);
  if (!s) goto fail;
  pthread_mutex_lock(&m->mu);
  m->session = s;
  bool failed = m->error != FLOE_OK;
  pthread_mutex_unlock(&m->mu);
  if (failed) floe__session_abort(s, m->error, m->error_msg);
  floe__coord_infos_clear(&all);
  floe__free(calls);
  return s;
fail:
  floe__coord_infos_clear(&all);
  floe__free(calls);
  master_free(m);
  return NULL;
}

/* Caller owns the session (floe_session_free); see floe.h. */
FloeSession *floe_session_new(const FloeGraph *g, const FloeSessionOptions *opts,
                              FloeStatus *status) {
  if (opts && FLOE_HAS_FIELD(opts, FloeSessionOptions, cluster) && opts->cluster &&
      opts->cluster[0]) {
    if (!g) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_session_new: the graph is NULL");
      return NULL;
    }
    return master_session_new(g, opts, status);
  }
  return floe__session_create(g, opts, NULL, status);
}
