/* SPDX-License-Identifier: Apache-2.0 */
/* multi_exec.c - one step over device partitions: an executor per device, started
 * together, meeting at one rendezvous per step.
 *
 * The partitioned graph (partition.c) has every node on one device; each device's nodes
 * form a closed set (their inputs come from the same device, from a _Recv, or from a feed),
 * so each becomes a plain executor. A step starts every piece, then waits for each. When a
 * piece fails or is cancelled, the step's rendezvous is aborted (every pending and later
 * _Recv fails with that error) and the other pieces are cancelled, so a step never hangs on
 * a value that will not come; the error reported is the first piece's.
 *
 * Nodes on another task's devices (a cluster session: FloeDevice.remote) form one piece per
 * task, which the plan's FloeRemotePieceFns build (the master registers the piece's graph
 * there) and run (RunGraph under the step's random 64-bit id, the id the task's rendezvous
 * uses too). A remote piece's failure fails the step like a local one's, and a local failure
 * asks every remote piece to abort.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "session.h"

typedef struct Piece {
  FloeDevice *device;      /* a remote piece: one device of its task */
  FloeExecutor *exec;      /* NULL for a remote piece */
  void *remote;            /* the remote piece (FloeRemotePieceFns.build's) */
  int *feed_of;            /* piece feed k -> the run's feed index */
  int num_feeds;
  int *fetch_of;           /* piece fetch k -> the run's fetch index */
  int num_fetches;
} Piece;

struct FloeMultiExec {
  FloeRuntime *rt;
  Piece *pieces;
  int num_pieces;
  int num_fetches;
  bool rendezvous;         /* some piece has a _Send or _Recv */
  FloeRendezvousOptions rv_opts;
  const FloeRemotePieceFns *rfns;
  int num_remote;          /* remote pieces (the last ones) */
};

int floe__multi_exec_num_pieces(const FloeMultiExec *m) { return m ? m->num_pieces : 0; }

FloeExecutor *floe__multi_exec_piece(const FloeMultiExec *m, int i) {
  return m && i >= 0 && i < m->num_pieces ? m->pieces[i].exec : NULL;
}

void floe__multi_exec_free(FloeMultiExec *m) {
  if (!m) return;
  for (int i = 0; i < m->num_pieces; i++) {
    floe__executor_free(m->pieces[i].exec);
    if (m->pieces[i].remote) m->rfns->free(m->rfns->arg, m->pieces[i].remote);
    floe__free(m->pieces[i].feed_of);
    floe__free(m->pieces[i].fetch_of);
  }
  floe__free(m->pieces);
  floe__free(m);
}

static bool is_transfer(const FloeNode *n) {
  const char *op = n->op->name;
  return strcmp(op, "_Send") == 0 || strcmp(op, "_Recv") == 0 || strcmp(op, "_ControlSend") == 0;
}

/* The piece's executor: its device's nodes, the feeds they read, the fetches they make (a
 * fetched feed goes with the first piece). */
/* The same task (remote pieces gather a task's devices). */
static bool same_task(const FloeDevice *a, const FloeDevice *b) {
  return a && b && a->remote && b->remote && a->task == b->task && strcmp(a->job, b->job) == 0;
}

static bool in_piece(const Piece *pc, const FloeDevice *d) {
  return d == pc->device || (pc->device && pc->device->remote && same_task(d, pc->device));
}

static floe_code build_remote(FloeMultiExec *m, const FloeMultiPlan *plan, Piece *pc,
                              const FloeExecNodeSpec *specs, int num_specs, const bool *mine,
                              const FloeOutput *feeds, const FloeOutput *fetches,
                              FloeStatus *st) {
  const FloeGraph *g = plan->graph;
  FloeDevice **dev = floe__calloc((size_t)g->num_nodes + 1, sizeof *dev);
  if (!dev) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
  for (int i = 0; i < num_specs; i++) dev[specs[i].node->id] = specs[i].device;
  floe_code rc = m->rfns->build(m->rfns->arg, pc->device, g, mine, dev, feeds, pc->num_feeds,
                                fetches, pc->num_fetches, &pc->remote, st);
  floe__free(dev);
  return rc;
}

static floe_code build_piece(FloeMultiExec *m, const FloeMultiPlan *plan, int p, FloeStatus *st) {
  Piece *pc = &m->pieces[p];
  const FloeGraph *g = plan->graph;
  FloeExecNodeSpec *specs = floe__malloc((size_t)(plan->num_nodes + 1) * sizeof *specs);
  bool *mine = floe__calloc((size_t)g->num_nodes + 1, sizeof *mine);
  FloeOutput *outs = floe__malloc((size_t)(plan->num_feeds + plan->num_fetches + 1) * sizeof *outs);
  pc->feed_of = floe__malloc((size_t)(plan->num_feeds + 1) * sizeof(int));
  pc->fetch_of = floe__malloc((size_t)(plan->num_fetches + 1) * sizeof(int));
  floe_code rc = FLOE_OK;
  if (!specs || !mine || !outs || !pc->feed_of || !pc->fetch_of) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    goto out;
  }
  FloeExecPlan ep = {.rt = plan->rt, .graph = g, .nodes = specs,
                     .inline_inexpensive = plan->inline_inexpensive,
                     .resources = plan->resources, .profiling = plan->profiling,
                     .trace = plan->trace, .force_frames = plan->force_frames,
                     .reuse_buffers = plan->reuse_buffers,
                     .memory_order = plan->memory_order, .const_feeds = plan->const_feeds,
                     .concat_in_place = plan->concat_in_place};
  for (int i = 0; i < plan->num_nodes; i++) {
    if (!in_piece(pc, plan->nodes[i].device)) continue;
    specs[ep.num_nodes++] = plan->nodes[i];
    mine[plan->nodes[i].node->id] = true;
  }
  for (int f = 0; f < plan->num_feeds; f++) {
    const FloeNode *fn = plan->feeds[f].node;
    bool read = false;
    for (int i = 0; i < ep.num_nodes && !read; i++) {
      const FloeNode *n = specs[i].node;
      for (int j = 0; j < n->num_inputs && !read; j++)
        read = n->inputs[j].node == fn && n->inputs[j].index == plan->feeds[f].index;
    }
    for (int k = 0; k < plan->num_fetches && !read && p == 0; k++)
      read = plan->fetches[k].node == fn && plan->fetches[k].index == plan->feeds[f].index;
    if (!read) continue;
    pc->feed_of[pc->num_feeds] = f;
    outs[pc->num_feeds++] = plan->feeds[f];
  }
  ep.feeds = outs;
  ep.num_feeds = pc->num_feeds;
  ep.fetches = outs + pc->num_feeds;
  for (int k = 0; k < plan->num_fetches; k++) {
    const FloeOutput *o = &plan->fetches[k];
    bool fed = false;
    for (int f = 0; f < plan->num_feeds && !fed; f++)
      fed = plan->feeds[f].node == o->node && plan->feeds[f].index == o->index;
    if (fed ? p != 0 : !mine[o->node->id]) continue;
    pc->fetch_of[pc->num_fetches] = k;
    ep.fetches[pc->num_fetches++] = *o;
  }
  ep.num_fetches = pc->num_fetches;
  if (pc->device && pc->device->remote) {
    rc = build_remote(m, plan, pc, specs, ep.num_nodes, mine, outs, ep.fetches, st);
    goto out;
  }
  pc->exec = floe__executor_new(&ep, st);
  if (!pc->exec) rc = floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY;
out:
  floe__free(specs);
  floe__free(mine);
  floe__free(outs);
  return rc;
}

FloeMultiExec *floe__multi_exec_new(const FloeMultiPlan *plan, FloeStatus *st) {
  FloeMultiExec *m = floe__calloc(1, sizeof *m);
  FloeDevice **devs = floe__malloc((size_t)(plan->num_nodes + 1) * sizeof *devs);
  if (!m || !devs) {
    floe__free(m);
    floe__free(devs);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    return NULL;
  }
  m->rt = plan->rt;
  m->num_fetches = plan->num_fetches;
  m->rv_opts = plan->rv_opts;
  m->rfns = plan->remote;
  /* Local devices first (piece 0 returns fetched feeds), then one piece per remote task. */
  int nd = 0, nremote = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < plan->num_nodes; i++) {
      FloeDevice *d = plan->nodes[i].device;
      if (d && d->remote != (pass == 1)) continue;
      int k = 0;
      while (k < nd && !(devs[k] == d || same_task(devs[k], d))) k++;
      if (k == nd) {
        devs[nd++] = d;
        if (pass == 1) nremote++;
      }
      if (is_transfer(plan->nodes[i].node)) m->rendezvous = true;
    }
  if (nremote > 0 && !plan->remote) {
    floe_status_set(st, FLOE_FAILED_PRECONDITION,
                    "nodes are placed on another task's device (%s) but this session runs no "
                    "cluster: give the session a cluster (FloeSessionOptions.cluster)",
                    devs[nd - 1]->name);
    floe__free(devs);
    floe__free(m);
    return NULL;
  }
  if (nd == nremote) { /* nothing to run here: one empty local piece returns fetched feeds */
    memmove(devs + 1, devs, (size_t)nd * sizeof *devs);
    devs[0] = NULL;
    nd++;
  }
  m->num_remote = nremote;
  m->pieces = floe__calloc((size_t)nd, sizeof *m->pieces);
  if (!m->pieces) {
    floe__free(devs);
    floe__free(m);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory preparing a run");
    return NULL;
  }
  m->num_pieces = nd;
  for (int p = 0; p < nd; p++) {
    m->pieces[p].device = devs[p];
    if (build_piece(m, plan, p, st) != FLOE_OK) {
      floe__free(devs);
      floe__multi_exec_free(m);
      return NULL;
    }
  }
  floe__free(devs);
  return m;
}

/* ---- one step ---- */

typedef struct Run Run;

typedef struct PieceRun {
  Run *run;
  FloeExecStep *step;      /* attached and not yet detached (guarded by run->mu) */
} PieceRun;

typedef struct RemoteRun {
  Run *run;
  void *call;              /* between start and finish */
  bool done;               /* under run->mu */
} RemoteRun;

struct Run {
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* a remote piece's done */
  atomic_bool failed;
  FloeRendezvous *rv;
  PieceRun *pr;
  int n;
  const FloeMultiRunCtl *outer;
  const FloeRemotePieceFns *rfns;
  RemoteRun *rr;           /* per piece; used for the remote ones */
};

static void piece_attach(void *arg, FloeExecStep *step) {
  PieceRun *pr = arg;
  Run *r = pr->run;
  pthread_mutex_lock(&r->mu);
  FloeExecStep *was = pr->step;
  pr->step = step;
  pthread_mutex_unlock(&r->mu);
  if (r->outer && r->outer->track) r->outer->track(r->outer->arg, step ? step : was, step != NULL);
}

/* A piece failed: the others stop, and no _Recv waits for a value that will not come. */
static void piece_failed(void *arg, FloeExecStep *step, floe_code code, const char *msg) {
  Run *r = arg;
  if (atomic_exchange(&r->failed, true)) return;
  floe__rendezvous_abort(r->rv, code, msg);
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n; i++)
    if (r->pr[i].step && r->pr[i].step != step) floe__exec_step_cancel(r->pr[i].step, code, msg);
  /* abort may call done at once, which takes r->mu: collect the calls first */
  int nc = 0;
  void *calls[r->n + 1];
  for (int i = 0; r->rr && i < r->n; i++)
    if (r->rr[i].call && !r->rr[i].done) calls[nc++] = r->rr[i].call;
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < nc; i++) r->rfns->abort(r->rfns->arg, calls[i], code, msg);
}

/* A remote piece's step ended: a failure fails the whole step. */
static void remote_done(void *arg, floe_code code, const char *msg) {
  RemoteRun *rr = arg;
  Run *r = rr->run;
  if (code != FLOE_OK) piece_failed(r, NULL, code, msg ? msg : floe_code_message(code));
  pthread_mutex_lock(&r->mu);
  rr->done = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* The nodes still running in every piece (for the message of a run past its deadline). */
static void piece_describe(void *arg, char *buf, size_t len) {
  Run *r = arg;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n; i++)
    if (r->pr[i].step) floe__exec_describe_running(r->pr[i].step, buf, len);
  pthread_mutex_unlock(&r->mu);
}

/* The one-piece case: the executor's attach hook, told to the caller's track hook. */
typedef struct OneTrack {
  const FloeMultiRunCtl *ctl;
  FloeExecStep *step;
} OneTrack;

static void one_attach(void *arg, FloeExecStep *step) {
  OneTrack *t = arg;
  if (step) t->step = step;
  t->ctl->track(t->ctl->arg, t->step, step != NULL);
}

/* One device, no transfers (the common case): the piece's executor runs the step itself,
 * with no rendezvous and no bookkeeping of pieces. */
static floe_code run_one_piece(FloeMultiExec *m, FloeTensor *const *feeds, FloeTensor **outputs,
                               const FloeMultiRunCtl *ctl, FloeStatus *st) {
  Piece *pc = &m->pieces[0];
  OneTrack t = {ctl, NULL};
  FloeRunCtl one = {ctl ? ctl->timeout_ms : 0, ctl && ctl->track ? one_attach : NULL, &t,
                    NULL, NULL, NULL, ctl ? ctl->trace_step : 0, NULL,
                    ctl ? ctl->keep : NULL, ctl ? ctl->keep_arg : NULL};
  FloeTensor *small_f[8], *small_o[8];
  FloeTensor **pf = pc->num_feeds <= 8 ? small_f : floe__malloc((size_t)pc->num_feeds * sizeof *pf);
  FloeTensor **po = pc->num_fetches <= 8 ? small_o : floe__malloc((size_t)pc->num_fetches * sizeof *po);
  floe_code rc;
  if (!pf || !po) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a step");
  } else {
    for (int k = 0; k < pc->num_feeds; k++) pf[k] = feeds[pc->feed_of[k]];
    rc = floe__executor_run_ctl(pc->exec, pf, po, &one, st);
    for (int k = 0; rc == FLOE_OK && k < pc->num_fetches; k++) outputs[pc->fetch_of[k]] = po[k];
  }
  if (pf != small_f) floe__free(pf);
  if (po != small_o) floe__free(po);
  return rc;
}

floe_code floe__multi_exec_run(FloeMultiExec *m, FloeTensor *const *feeds, FloeTensor **outputs,
                               const FloeMultiRunCtl *ctl, FloeStatus *st) {
  for (int k = 0; k < m->num_fetches; k++) outputs[k] = NULL;
  if (m->num_pieces == 1 && !m->rendezvous) return run_one_piece(m, feeds, outputs, ctl, st);
  Run r;
  memset(&r, 0, sizeof r);
  r.n = m->num_pieces;
  r.outer = ctl;
  r.rfns = m->rfns;
  int64_t timeout_ms = ctl ? ctl->timeout_ms : 0;
  atomic_init(&r.failed, false);
  FloeExecStep **steps = floe__calloc((size_t)r.n, sizeof *steps);
  FloeTensor ***pfeeds = floe__calloc((size_t)r.n, sizeof *pfeeds);
  r.pr = floe__calloc((size_t)r.n, sizeof *r.pr);
  r.rr = m->num_remote ? floe__calloc((size_t)r.n, sizeof *r.rr) : NULL;
  if (!steps || !pfeeds || !r.pr || (m->num_remote && !r.rr) ||
      pthread_mutex_init(&r.mu, NULL) != 0) {
    floe__free(steps);
    floe__free(pfeeds);
    floe__free(r.pr);
    floe__free(r.rr);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a step");
  }
  if (pthread_cond_init(&r.cv, NULL) != 0) {
    pthread_mutex_destroy(&r.mu);
    floe__free(steps);
    floe__free(pfeeds);
    floe__free(r.pr);
    floe__free(r.rr);
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a condition variable");
  }
  floe_code rc = FLOE_OK;
  static atomic_llong next_step = 1;
  uint64_t step_id = ctl && ctl->step_id ? ctl->step_id : (uint64_t)atomic_fetch_add(&next_step, 1);
  /* Across tasks the id must not repeat between processes or runs: 64 random-looking bits
   * from this runtime's random seed and the counter. */
  if (m->num_remote && !(ctl && ctl->step_id)) step_id = mix64(m->rt->seed ^ mix64(step_id)) | 1;
  if (m->rendezvous) {
    FloeRendezvousOptions o = m->rv_opts;
    if (ctl && ctl->rv_opts) o = *ctl->rv_opts;
    r.rv = floe__rendezvous_new(m->rt, (int64_t)step_id, &o, st);
    if (!r.rv) rc = floe_status_code(st) ? floe_status_code(st) : FLOE_NO_MEMORY;
  }
  int started = 0, local = m->num_pieces - m->num_remote;
  for (int p = 0; p < r.n && rc == FLOE_OK; p++) {
    Piece *pc = &m->pieces[p];
    pfeeds[p] = floe__malloc((size_t)(pc->num_feeds + 1) * sizeof **pfeeds);
    if (!pfeeds[p]) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a step");
      break;
    }
    for (int k = 0; k < pc->num_feeds; k++) pfeeds[p][k] = feeds[pc->feed_of[k]];
    r.pr[p].run = &r;
    if (pc->remote) {
      r.rr[p].run = &r;
      void *call = NULL;
      rc = m->rfns->start(m->rfns->arg, pc->remote, step_id, pfeeds[p], timeout_ms, remote_done,
                          &r.rr[p], &call, st);
      if (rc != FLOE_OK) break;
      pthread_mutex_lock(&r.mu);
      r.rr[p].call = call;
      bool abort_now = atomic_load(&r.failed) && !r.rr[p].done;
      pthread_mutex_unlock(&r.mu);
      /* a failure before the call was recorded missed it: abort it here */
      if (abort_now) m->rfns->abort(m->rfns->arg, call, FLOE_CANCELLED, "the step failed");
      started++;
      continue;
    }
    FloeRunCtl pctl = {timeout_ms, piece_attach, &r.pr[p], r.rv, piece_failed, &r,
                       ctl ? ctl->trace_step : 0, piece_describe,
                       ctl ? ctl->keep : NULL, ctl ? ctl->keep_arg : NULL};
    rc = floe__executor_start(pc->exec, pfeeds[p], &pctl, &steps[p], st);
    if (rc == FLOE_OK) started++;
  }
  if (rc != FLOE_OK) /* pieces already running must not wait for the ones that never ran */
    piece_failed(&r, NULL, rc, floe_status_message(st));
  /* Wait for every piece; the first failure (in time) is the step's error. */
  FloeStatus first = {FLOE_OK, NULL};
  bool have_first = false, first_local = false;
  (void)local;
  for (int p = 0; p < started; p++) {
    Piece *pc = &m->pieces[p];
    FloeTensor *po[pc->num_fetches + 1];
    FloeStatus pst = {FLOE_OK, NULL};
    floe_code prc;
    if (pc->remote) {
      pthread_mutex_lock(&r.mu);
      while (!r.rr[p].done) pthread_cond_wait(&r.cv, &r.mu);
      void *call = r.rr[p].call;
      r.rr[p].call = NULL;
      pthread_mutex_unlock(&r.mu);
      prc = m->rfns->finish(m->rfns->arg, call, po, &pst);
    } else {
      prc = floe__executor_finish(steps[p], po, &pst);
    }
    if (prc == FLOE_OK) {
      for (int k = 0; k < pc->num_fetches; k++) outputs[pc->fetch_of[k]] = po[k];
    } else if (!have_first || (first.code == FLOE_CANCELLED && prc != FLOE_CANCELLED) ||
               (first.code == FLOE_ABORTED && prc != FLOE_ABORTED && prc != FLOE_CANCELLED) ||
               (pc->remote && first_local && prc == first.code)) {
      /* a piece cancelled because another failed says less than the one that failed; a
       * local Recv that lost its transfer says less than the remote piece's own failure
       * (which names the task and what to do) */
      floe_status_clear(&first);
      floe__status_copy(&first, &pst);
      have_first = true;
      first_local = !pc->remote;
    }
    floe_status_clear(&pst);
  }
  if (rc == FLOE_OK && have_first) {
    rc = first.code;
    floe__status_copy(st, &first);
  }
  if (rc != FLOE_OK) /* no half-filled outputs on error */
    for (int p = 0; p < started; p++)
      for (int k = 0; k < m->pieces[p].num_fetches; k++) {
        FloeTensor **o = &outputs[m->pieces[p].fetch_of[k]];
        if (*o) floe_tensor_release(*o);
        *o = NULL;
      }
  floe_status_clear(&first);
  if (r.rv && ctl && ctl->stats) floe__rendezvous_stats(r.rv, ctl->stats);
  floe__rendezvous_free(r.rv);
  for (int p = 0; p < r.n; p++) floe__free(pfeeds[p]);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  floe__free(steps);
  floe__free(pfeeds);
  floe__free(r.pr);
  floe__free(r.rr);
  return rc;
}
