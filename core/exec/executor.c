/* SPDX-License-Identifier: Apache-2.0 */
/* executor.c - dataflow execution of one prepared set of nodes.
 *
 * floe__executor_new turns a FloeExecPlan into compact arrays: for each node where each
 * input comes from (an entry, i.e. one output of a run node, or a feed), its successors
 * (data consumers and control successors, CSR), its initial pending count, and how many
 * readers each entry has. A step copies the counts into one arena allocation and then
 * runs nodes as their counts reach zero:
 *
 *  - the thread that makes a node ready runs inexpensive nodes inline and hands the others
 *    to the pool, keeping the last one for itself when it has nothing inline to do (TF's
 *    trick), so a chain of cheap nodes never touches a queue, a lock or a condvar;
 *  - a node whose outputs nobody in the step reads (a variable's update) goes to the pool's
 *    deferred queue: it fills a thread that would otherwise idle instead of delaying the
 *    nodes the rest of the step waits for;
 *  - each entry's reader count drops as consumers finish, releasing the tensor as soon as
 *    its last consumer ran;
 *  - counters that only one thread can ever touch (an entry with one reader, a node with
 *    one predecessor) are never written atomically, and a thread running an inline list
 *    settles its completions with the step's shared count once, at the end of the list, so
 *    a chain or a fan-in of cheap nodes does no atomic write per node beyond the kernel's;
 *  - a step's arrays live in one arena that the executor keeps for the next step;
 *  - the first error cancels the step: nodes not yet started are skipped (but still
 *    complete, so every count and reference unwinds the usual way), running and async
 *    nodes finish, and the step ends when nothing is outstanding.
 */
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_private.h"

static const atomic_int never_profile = 0;

static atomic_llong next_step_id = 1;

static void process_list(FloeExecStep *s, ReadyList *inl);

/* Scratch of the kernel's device, owned by ctx until floe__kernel_ctx_free_temps (after
 * compute, or when an async kernel calls done). */
floe_code floe__kernel_ctx_allocate_temp(FloeKernelContext *ctx, size_t bytes, void **out) {
  if (!out)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "node '%s' (%s): allocate_temp: out is NULL", ctx->node->name,
                           ctx->node->op->name);
  *out = NULL;
  if (ctx->num_temps == ctx->cap_temps) {
    int cap = ctx->cap_temps ? 2 * ctx->cap_temps : 4;
    void **temps = floe__realloc(ctx->temps, (size_t)cap * sizeof *temps);
    if (!temps) goto err_oom;
    ctx->temps = temps;
    size_t *sizes = floe__realloc(ctx->temp_sizes, (size_t)cap * sizeof *sizes);
    if (!sizes) goto err_oom;
    ctx->temp_sizes = sizes;
    ctx->cap_temps = cap;
  }
  FloeStatus st = {FLOE_OK, NULL};
  void *p;
  if (floe__device_alloc(ctx->device, bytes, &p, &st) != FLOE_OK) {
    floe_code rc = floe_status_set(ctx->status, st.code, "node '%s' (%s): allocate_temp: %s",
                                   ctx->node->name, ctx->node->op->name,
                                   floe_status_message(&st));
    floe_status_clear(&st);
    return rc;
  }
  ctx->temps[ctx->num_temps] = p;
  ctx->temp_sizes[ctx->num_temps] = bytes;
  ctx->num_temps++;
  *out = p;
  return FLOE_OK;

err_oom:
  return floe_status_set(ctx->status, FLOE_NO_MEMORY,
                         "node '%s' (%s): allocate_temp: out of memory growing the scratch list",
                         ctx->node->name, ctx->node->op->name);
}

/* Frees the blocks ctx_allocate_temp made (owned by ctx) and the lists holding them. */
void floe__kernel_ctx_free_temps(FloeKernelContext *ctx) {
  for (int i = 0; i < ctx->num_temps; i++)
    floe__device_free(ctx->device, ctx->temps[i], ctx->temp_sizes[i]);
  floe__free(ctx->temps);
  floe__free(ctx->temp_sizes);
  ctx->temps = NULL;
  ctx->temp_sizes = NULL;
  ctx->num_temps = ctx->cap_temps = 0;
}

/* Borrowed from the executor's plan (the session's manager); NULL outside a session. */
FloeResourceMgr *floe__kernel_ctx_resources(const FloeKernelContext *ctx) {
  return ctx && ctx->step ? ctx->step->e->resources : NULL;
}

floe_code floe__kernel_ctx_add_step_resource(FloeKernelContext *ctx, FloeResource *r,
                                             FloeStatus *st) {
  FloeExecStep *s = ctx ? ctx->step : NULL;
  if (!s || !s->e->resources)
    return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "a %s lives in a session's resource manager, and this step has none",
                           r->ops->kind);
  pthread_mutex_lock(&s->mu);
  if (s->num_step_objs == s->cap_step_objs) {
    int cap = s->cap_step_objs ? 2 * s->cap_step_objs : 8;
    int64_t *v = floe__realloc(s->step_objs, (size_t)cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&s->mu);
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering a %s",
                             r->ops->kind);
    }
    s->step_objs = v;
    s->cap_step_objs = cap;
  }
  int64_t serial;
  floe_code rc = floe__resources_add_anonymous(s->e->resources, r, &serial, st);
  if (rc == FLOE_OK) s->step_objs[s->num_step_objs++] = serial;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* step borrowed (a kernel context's); safe from any thread while the step runs. */
bool floe__exec_step_cancelled(const FloeExecStep *step) {
  return step && atomic_load_explicit(&step->cancelled, memory_order_relaxed);
}

FloeRendezvous *floe__exec_step_rendezvous(const FloeExecStep *step) {
  return step ? step->ctl.rendezvous : NULL;
}

uint64_t floe__frame_id(uint64_t parent_id, int64_t parent_iter, const char *name) {
  uint64_t h = 1469598103934665603ull ^ parent_id; /* FNV-1a, seeded by the parent */
  for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)((uint64_t)parent_iter >> (8 * i))) * 1099511628211ull;
  for (const char *c = name ? name : ""; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
  return h ? h : 1; /* 0 is the root frame */
}

/* nodes[0..n) in ascending rank (insertion sort: a list of ready nodes is short; the roots,
 * sorted once, may be long but arrive mostly in order). */
static void sort_by_rank(const FloeExecutor *e, int *nodes, int n) {
  for (int i = 1; i < n; i++) {
    int v = nodes[i], j = i;
    while (j > 0 && e->rank[nodes[j - 1]] > e->rank[v]) {
      nodes[j] = nodes[j - 1];
      j--;
    }
    nodes[j] = v;
  }
}

static void list_push(FloeExecStep *s, ReadyList *l, int n) {
  s->next[n] = -1;
  if (l->tail >= 0)
    s->next[l->tail] = n;
  else
    l->head = n;
  l->tail = n;
}

/* ---- errors ---- */


/* Cancels the step: nodes not started are skipped, and the callbacks kernels registered
 * (blocked queue operations) run once, on this thread, outside mu. */
static void step_cancel(FloeExecStep *s) {
  atomic_store_explicit(&s->cancelled, true, memory_order_relaxed);
  pthread_mutex_lock(&s->mu);
  if (s->cancelling) {
    pthread_mutex_unlock(&s->mu);
    return;
  }
  s->cancelling = true;
  s->cancel_thread = pthread_self();
  CancelCb *cbs = s->cancel_cbs;
  int n = s->num_cancel_cbs;
  s->cancel_cbs = NULL;
  s->num_cancel_cbs = s->cap_cancel_cbs = 0;
  floe_code code = s->status.code ? s->status.code : FLOE_CANCELLED;
  char *msg = floe__strdup(s->status.msg ? s->status.msg : "the step was cancelled");
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < n; i++) cbs[i].fn(cbs[i].arg);
  floe__free(cbs);
  /* Other partitions of the step stop too (their Recvs fail with this message). */
  if (s->ctl.on_fail) s->ctl.on_fail(s->ctl.fail_arg, s, code, msg ? msg : "the step failed");
  floe__free(msg);
  pthread_mutex_lock(&s->mu);
  s->cancel_done = true;
  pthread_cond_broadcast(&s->done_cv);
  pthread_mutex_unlock(&s->mu);
}

/* Keeps the first error of the step (prefixed with the node) and cancels the step. */
void floe__exec_step_fail(FloeExecStep *s, const ExecNode *en, floe_code code, const char *msg) {
  const FloeNode *n = en->node;
  pthread_mutex_lock(&s->mu);
  if (s->status.code == FLOE_OK)
    floe_status_set(&s->status, code, "node '%s' (%s): %s", n->name, n->op->name,
                    floe__strip_node_prefix(msg, n));
  pthread_mutex_unlock(&s->mu);
  step_cancel(s);
}

void floe__exec_step_abort(FloeExecStep *s, floe_code code, const char *msg) {
  pthread_mutex_lock(&s->mu);
  if (s->status.code == FLOE_OK) floe_status_set(&s->status, code, "%s", msg);
  pthread_mutex_unlock(&s->mu);
  step_cancel(s);
}

int64_t floe__kernel_ctx_on_cancel(FloeKernelContext *ctx, void (*fn)(void *arg), void *arg) {
  FloeExecStep *s = ctx ? ctx->step : NULL;
  if (!s) return 0;
  pthread_mutex_lock(&s->mu);
  int64_t token = -1;
  if (!s->cancelling) {
    if (s->num_cancel_cbs == s->cap_cancel_cbs) {
      int cap = s->cap_cancel_cbs ? 2 * s->cap_cancel_cbs : 4;
      CancelCb *v = floe__realloc(s->cancel_cbs, (size_t)cap * sizeof *v);
      if (!v) goto out; /* -1: the caller fails the kernel as if cancelled */
      s->cancel_cbs = v;
      s->cap_cancel_cbs = cap;
    }
    token = ++s->next_cancel_token;
    s->cancel_cbs[s->num_cancel_cbs++] = (CancelCb){token, fn, arg};
  }
out:
  pthread_mutex_unlock(&s->mu);
  return token;
}

bool floe__kernel_ctx_cancel_deregister(FloeKernelContext *ctx, int64_t token) {
  FloeExecStep *s = ctx ? ctx->step : NULL;
  if (!s || token <= 0) return true;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->num_cancel_cbs; i++) {
    if (s->cancel_cbs[i].token != token) continue;
    s->cancel_cbs[i] = s->cancel_cbs[--s->num_cancel_cbs];
    pthread_mutex_unlock(&s->mu);
    return true;
  }
  /* Taken by a cancel: wait until the callbacks returned, unless this is one of them. */
  while (s->cancelling && !s->cancel_done && !pthread_equal(s->cancel_thread, pthread_self()))
    pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return false;
}

void floe__exec_step_failf(FloeExecStep *s, const ExecNode *en, floe_code code, const char *fmt,
                           ...) {
  FloeStatus tmp = {FLOE_OK, NULL};
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(&tmp, code, fmt, ap);
  va_end(ap);
  floe__exec_step_fail(s, en, code, floe_status_message(&tmp));
  floe_status_clear(&tmp);
}

/* ---- completion ---- */

static void step_reap(void *arg);

void floe__exec_step_finish(FloeExecStep *s) {
  pthread_mutex_lock(&s->mu);
  s->done = true;
  bool abandoned = s->abandoned;
  pthread_cond_broadcast(&s->done_cv); /* cancel deregistrations wait on it too */
  /* The run thread frees s once it sees done: nothing of s may be touched after this. */
  pthread_mutex_unlock(&s->mu);
  if (!abandoned) return;
  /* Its run returned at the deadline: s is ours to free. On the pool when there is one, so
   * that a kernel's state is not destroyed inside its own done (the session may be gone). */
  FloeThreadPool *pool = s->e->pool;
  if (!pool || floe__pool_schedule(pool, step_reap, s) != FLOE_OK) step_reap(s);
}

void *floe__exec_arm_done(FloeExecStep *s, int n, void (*complete)(void *arg), void *arg) {
  const ExecNode *en = &s->e->nodes[n];
  void *ticket = NULL;
  pthread_mutex_lock(&s->mu);
  /* A long loop's calls: the completed ones go, or the table would grow by one per call. */
  if (s->num_tickets == s->cap_tickets && s->cap_tickets >= FLOE__TICKETS_KEPT)
    floe__tickets_release_fired(s->tickets, &s->num_tickets);
  if (s->num_tickets == s->cap_tickets) {
    int cap = s->cap_tickets ? 2 * s->cap_tickets : 8;
    void **v = floe__realloc(s->tickets, (size_t)cap * sizeof *v);
    if (v) {
      s->tickets = v;
      s->cap_tickets = cap;
    }
  }
  if (s->num_tickets < s->cap_tickets) {
    ticket = floe__ticket_arm(s, n, en->kernel, complete, arg);
    if (ticket) s->tickets[s->num_tickets++] = ticket;
  }
  pthread_mutex_unlock(&s->mu);
  if (!ticket)
    floe__exec_step_failf(s, en, FLOE_NO_MEMORY, "out of memory starting its asynchronous kernel");
  return ticket;
}

void floe__exec_note_done_twice(FloeExecStep *s, int n) {
  int none = 0;
  atomic_compare_exchange_strong(&s->done_twice, &none, n + 1);
}

static void release_use(FloeExecStep *s, int entry) {
  /* An entry with one reader is released by that reader alone: no count to share. */
  if (s->e->uses0[entry] == 1 ||
      atomic_fetch_sub_explicit(&s->uses[entry], 1, memory_order_acq_rel) == 1) {
    floe_tensor_release(s->entries[entry]);
    s->entries[entry] = NULL;
  }
}

static void task_main(void *arg) {
  StepTask *t = arg;
  FloeExecStep *s = t->step;
  ReadyList inl = {-1, -1, 0, false};
  list_push(s, &inl, (int)(t - s->tasks));
  process_list(s, &inl);
}

/* Ready nodes handed to the pool under one lock. */
enum { BATCH = 64 };

typedef struct Batch {
  void *tasks[BATCH];
  int nodes[BATCH];
  int n;
  bool deferred; /* for the pool's deferred queue */
} Batch;

/* Hands the batch to the pool; without a pool or queue space its nodes run on this thread
 * instead: on inl, or (inl NULL) on a list of their own, right now. */
static void flush_batch(FloeExecStep *s, Batch *b, ReadyList *inl) {
  int n = b->n;
  b->n = 0;
  /* Nothing to hand over: s may already be gone (an earlier batch's nodes can finish the
   * step as soon as they are queued). */
  if (n == 0) return;
  FloeThreadPool *pool = s->e->pool;
  for (int i = 0; i < n; i++) s->tasks[b->nodes[i]].step = s; /* published by the queue lock */
  if (pool && (b->deferred ? floe__pool_schedule_deferred(pool, task_main, b->tasks, n)
                           : floe__pool_schedule_batch(pool, task_main, b->tasks, n)) == FLOE_OK)
    return;
  ReadyList own = {-1, -1, 0, false};
  ReadyList *l = inl ? inl : &own;
  for (int i = 0; i < n; i++) list_push(s, l, b->nodes[i]);
  if (!inl) process_list(s, &own);
}

/* Relinks the ready list in ascending rank (memory-aware scheduling). */
static void rank_order(FloeExecStep *s, ReadyList *l) {
  enum { MAX_SORTED = 256 };
  int v[MAX_SORTED], n = 0;
  for (int r = l->head; r >= 0; r = s->next[r]) {
    if (n == MAX_SORTED) return; /* a long list keeps its order */
    v[n++] = r;
  }
  sort_by_rank(s->e, v, n);
  l->head = -1;
  l->tail = -1;
  for (int i = 0; i < n; i++) list_push(s, l, v[i]);
}

static void batch_add(FloeExecStep *s, Batch *b, ReadyList *inl, int n) {
  b->tasks[b->n] = &s->tasks[n];
  b->nodes[b->n++] = n;
  if (b->n == BATCH) flush_batch(s, b, inl);
}

/* Dispatches newly ready nodes: cheap ones join the inline list, the others go to the
 * pool except the last, which this thread keeps when it has nothing inline (TF's trick).
 * inl NULL (an async completion on a foreign thread): everything goes to the pool. */
static void schedule_ready(FloeExecStep *s, ReadyList *ready, ReadyList *inl) {
  FloeExecutor *e = s->e;
  if (e->rank && ready->head >= 0 && s->next[ready->head] >= 0) rank_order(s, ready);
  Batch b, later; /* not zero-filled: only n entries are ever read */
  b.n = later.n = 0;
  b.deferred = false;
  later.deferred = true;
  int keep = -1;
  for (int r = ready->head; r >= 0;) {
    int nx = s->next[r]; /* read first: once handed over, r's link belongs to its runner */
    if (e->nodes[r].deferred) {
      batch_add(s, &later, inl, r);
    } else if (!inl) {
      batch_add(s, &b, NULL, r);
    } else if (e->inline_inexpensive && e->nodes[r].inexpensive) {
      list_push(s, inl, r);
    } else if (inl->hand_off && e->nodes[r].async_slot < 0) {
      batch_add(s, &b, inl, r);
    } else if (e->rank) { /* this thread takes the first in rank order */
      if (keep < 0) keep = r;
      else batch_add(s, &b, inl, r);
    } else {
      if (keep >= 0) batch_add(s, &b, inl, keep);
      keep = r;
    }
    r = nx;
  }
  if (keep >= 0) {
    if (inl->head < 0)
      list_push(s, inl, keep);
    else
      batch_add(s, &b, inl, keep);
  }
  flush_batch(s, &b, inl);
  flush_batch(s, &later, inl);
}

/* Node n ran (or was skipped): drop its inputs, wake its successors, account for it. */
static void node_done(FloeExecStep *s, int n, ReadyList *inl) {
  FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[n];
  for (int j = 0; j < en->num_inputs; j++) {
    int src = e->input_src[en->in_base + j];
    if (src >= 0) release_use(s, src);
  }
  ReadyList ready = {-1, -1, 0, false};
  int k = 0;
  for (int i = 0; i < en->num_succ; i++) {
    int m = e->succ[en->succ_base + i];
    /* A node with one predecessor is made ready by it alone: no count to share. */
    if (e->pending0[m] == 1 ||
        atomic_fetch_sub_explicit(&s->pending[m], 1, memory_order_acq_rel) == 1) {
      list_push(s, &ready, m);
      k++;
    }
  }
  if (!inl) {
    /* Count the new nodes before anyone can finish them; n itself still holds the step. */
    if (k > 1) atomic_fetch_add_explicit(&s->outstanding, k - 1, memory_order_acq_rel);
    if (k == 0 &&
        atomic_fetch_sub_explicit(&s->outstanding, 1, memory_order_acq_rel) == 1)
      floe__exec_step_finish(s);
    if (k > 0) schedule_ready(s, &ready, NULL);
    return;
  }
  /* On an inline list n's completion is settled later; new nodes first use up completions
   * not yet settled, so the shared count never drops below the truth. */
  if (k == 0) {
    inl->settled++;
  } else if (k > 1) {
    int add = k - 1;
    int use = add < inl->settled ? add : inl->settled;
    inl->settled -= use;
    if (add > use) atomic_fetch_add_explicit(&s->outstanding, add - use, memory_order_acq_rel);
  }
  /* One node (a chain) runs here, as schedule_ready would decide, without its setup. */
  if (k == 1 && !e->nodes[ready.head].deferred &&
      ((inl->head < 0 && (!inl->hand_off || e->nodes[ready.head].async_slot >= 0)) ||
       (e->inline_inexpensive && e->nodes[ready.head].inexpensive)))
    list_push(s, inl, ready.head);
  else if (k > 0)
    schedule_ready(s, &ready, inl);
}

/* ---- running one kernel ---- */

/* Gives back the variables the invocation held (unlocking them) and frees its copies. */
void floe__exec_release_inputs(Invocation *inv, const ExecNode *en) {
  if (inv->held) {
    for (int i = 0; i < inv->num_held; i++)
      if (inv->held[i].owner)
        floe__var_end_update(inv->held[i].var, inv->held[i].value, en->lock_vars);
    if (inv->held != inv->held_inline) floe__free(inv->held);
    inv->held = NULL;
    inv->num_held = 0;
  }
  if (!inv->copies) return;
  for (int j = 0; j < en->num_inputs; j++) floe_tensor_release(inv->copies[j]);
  floe__free(inv->copies);
  inv->copies = NULL;
}

/* The known dims of want (a known rank) equal dims'. */
static inline bool dims_fit(const int64_t *dims, const FloeShape *want) {
  for (int d = 0; d < want->rank; d++)
    if (want->dims[d] >= 0 && want->dims[d] != dims[d]) return false;
  return true;
}

/* Fails the step for output i of en's kernel: not set, of another dtype than the node's, or
 * (a plugin's kernel) of a shape its inferred one rules out (what the graph's later nodes
 * were checked against: a [1] where [?,3] was promised would broadcast silently). */
static void bad_output(FloeExecStep *s, const ExecNode *en, int i, const FloeTensor *t) {
  const char *dev = en->device ? en->device->short_name : "host";
  const char *plugin = en->kernel->plugin ? en->kernel->plugin->name : "core";
  FloeDType want = en->node->out_dtypes[i];
  if (!t) {
    floe__exec_step_failf(s, en, FLOE_INTERNAL,
                          "the kernel on %s (plugin '%s') returned without setting output %d: a "
                          "bug in the kernel",
                          dev, plugin, i);
  } else if (t->dtype != want) {
    floe__exec_step_failf(s, en, FLOE_INTERNAL,
                          "the kernel on %s (plugin '%s') set output %d to a %s tensor, the graph "
                          "says %s: a bug in the kernel",
                          dev, plugin, i, floe_dtype_name(t->dtype), floe_dtype_name(want));
  } else {
    char have[160], inferred[160];
    FloeShape sh = {.rank = t->rank};
    memcpy(sh.dims, t->dims, (size_t)t->rank * sizeof sh.dims[0]);
    floe_shape_str(&sh, have, sizeof have);
    floe_shape_str(&en->node->out_shapes[i], inferred, sizeof inferred);
    floe__exec_step_failf(s, en, FLOE_INTERNAL,
                          "output %d has shape %s but shape inference promised %s: a bug in the "
                          "kernel on %s (plugin '%s'), or in the op's shape function",
                          i, have, inferred, dev, plugin);
  }
}

void floe__exec_end_call(FloeExecStep *s, const ExecNode *en, Invocation *inv, floe_code rc,
                         FloeTensor **outs) {
  if (inv->status.code != FLOE_OK) {
    floe__exec_step_fail(s, en, inv->status.code, floe_status_message(&inv->status));
  } else if (rc != FLOE_OK) {
    floe__exec_step_failf(s, en, rc, "the kernel failed with %s and no message", floe_code_name(rc));
  } else if (inv->ctx.output_dead) {
    /* a _Recv of a dead value: the frame scheduler marks its outputs dead */
    if (!s->cf)
      floe__exec_step_failf(s, en, FLOE_INTERNAL, "a dead value arrived in a step without "
                            "control flow (a bug in Floe's partitioning)");
  } else {
    for (int i = 0; i < en->num_outputs; i++) {
      const FloeTensor *t = outs[i];
      const FloeShape *want = &en->node->out_shapes[i];
      /* Known dims and ranks only: an unknown shape costs one comparison. */
      if (t && t->dtype == en->node->out_dtypes[i] &&
          (want->rank < 0 || !en->check_shapes ||
           (t->rank == want->rank && dims_fit(t->dims, want))))
        continue;
      bad_output(s, en, i, t);
      break;
    }
  }
  if (inv->status.code != FLOE_OK) floe_status_clear(&inv->status);
  if (inv->ctx.temps) floe__kernel_ctx_free_temps(&inv->ctx);
  floe__exec_release_inputs(inv, en);
}

/* The plain scheduler's end of a call: the checks, then outputs nobody reads go. */
static void finish_invocation(FloeExecStep *s, int n, Invocation *inv, floe_code rc) {
  FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[n];
  floe__exec_end_call(s, en, inv, rc, s->entries + en->out_base);
  for (int i = 0; i < en->num_outputs; i++) {
    if (e->uses0[en->out_base + i] == 0) {
      floe_tensor_release(s->entries[en->out_base + i]);
      s->entries[en->out_base + i] = NULL;
    }
  }
}

/* ---- profiling ---- */

int64_t floe__exec_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

bool floe__exec_profiling(const FloeExecutor *e) {
  return __builtin_expect(atomic_load_explicit(e->profiling, memory_order_relaxed) != 0, 0);
}

void floe__exec_prof_record(FloeExecStep *s, int n, int64_t t0, int64_t t1,
                            const FloeKernelContext *ctx, bool async) {
  int flags = atomic_load_explicit(s->e->profiling, memory_order_relaxed);
  if ((flags & FLOE__PROF_TRACE) && s->e->trace)
    floe__trace_kernel(s->e->trace, s->ctl.trace_step, ctx, t0, t1, async);
  if (!(flags & FLOE__PROF_COUNTERS)) return;
  const ExecNode *en = &s->e->nodes[n];
  NodeProf *p = &s->e->prof[n];
  int64_t ns = t1 - t0, bytes = 0, device_ns = ctx->device_ns;
  for (int i = 0; i < en->num_outputs; i++) {
    const FloeTensor *t = ctx->outputs[i];
    if (t) bytes += (int64_t)t->nbytes;
  }
  atomic_fetch_add_explicit(&p->calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->total_ns, ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->output_bytes, bytes, memory_order_relaxed);
  if (device_ns > 0) atomic_fetch_add_explicit(&p->device_ns, device_ns, memory_order_relaxed);
  long long m = atomic_load_explicit(&p->max_ns, memory_order_relaxed);
  while (ns > m &&
         !atomic_compare_exchange_weak_explicit(&p->max_ns, &m, ns, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

static _Thread_local int span_depth; /* nested executor stretches of this thread */

int64_t floe__exec_span_begin(const FloeExecutor *e) {
  if (__builtin_expect(!(atomic_load_explicit(e->profiling, memory_order_relaxed) &
                         FLOE__PROF_TRACE) || !e->trace, 1))
    return 0;
  return span_depth++ == 0 ? floe__exec_now_ns() : -1;
}

void floe__exec_span_end(const FloeExecutor *e, int64_t step, int64_t token) {
  if (__builtin_expect(token == 0, 1)) return;
  span_depth--;
  if (token > 0)
    floe__trace_span(e->trace, FLOE__TRACE_ACTIVE, step, e->device_name, token,
                     floe__exec_now_ns(), 0, 0);
}

/* Borrowed node; NULL past the end. Counts read while steps run may be mid-update. */
const FloeNode *floe__executor_profile_node(const FloeExecutor *e, int i, FloeExecProfile *out) {
  if (!e || i < 0 || i >= e->num_nodes) return NULL;
  const NodeProf *p = &e->prof[i];
  out->calls = atomic_load_explicit(&p->calls, memory_order_relaxed);
  out->total_ns = atomic_load_explicit(&p->total_ns, memory_order_relaxed);
  out->max_ns = atomic_load_explicit(&p->max_ns, memory_order_relaxed);
  out->output_bytes = atomic_load_explicit(&p->output_bytes, memory_order_relaxed);
  out->device_ns = atomic_load_explicit(&p->device_ns, memory_order_relaxed);
  out->device = e->nodes[i].device ? e->nodes[i].device->short_name : "host";
  return e->nodes[i].node;
}

void floe__executor_profile_reset(FloeExecutor *e) {
  for (int i = 0; e && i < e->num_nodes; i++) {
    NodeProf *p = &e->prof[i];
    atomic_store_explicit(&p->calls, 0, memory_order_relaxed);
    atomic_store_explicit(&p->total_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&p->max_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&p->output_bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&p->device_ns, 0, memory_order_relaxed);
  }
}

static void async_done(void *arg) {
  StepTask *t = arg;
  FloeExecStep *s = t->step;
  int n = (int)(t - s->tasks);
  Invocation *inv = &s->async_calls[s->e->nodes[n].async_slot];
  floe__exec_mark_running(s, n, -1);
  if (inv->start_ns && inv->status.code == FLOE_OK)
    floe__exec_prof_record(s, n, inv->start_ns, floe__exec_now_ns(), &inv->ctx, true);
  finish_invocation(s, n, inv, FLOE_OK);
  node_done(s, n, NULL);
}

/* Control-flow nodes forward their inputs untouched, wherever those live. */
static bool routes_values(const FloeNode *n) {
  static const char *const ops[] = {"Switch", "Merge", "Enter", "Exit", "NextIteration",
                                    "LoopCond"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (strcmp(n->op->name, ops[i]) == 0) return true;
  return false;
}

/* True when memory of device a (NULL: host) can be read by kernels of device b as is. */
static bool same_space(const FloeDevice *a, const FloeDevice *b) {
  return a == b || ((!a || a->host_memory) && (!b || b->host_memory));
}

/* True when a tensor on `have` must be copied before a kernel on `want` can read it.
 * Resource handles are host scalars read by the core, never copied. */
static bool needs_copy(const FloeTensor *t, const FloeDevice *want) {
  FloeDevice *have = floe__tensor_device(t);
  if (have == want || !t->buf || t->dtype == FLOE_RESOURCE) return false;
  bool have_host = !have || have->host_memory;
  bool want_host = !want || want->host_memory;
  return !(have_host && want_host);
}

static int held_cmp(const void *a, const void *b) {
  const HeldVar *x = a, *y = b;
  if (x->var != y->var) return (uintptr_t)x->var < (uintptr_t)y->var ? -1 : 1;
  return x->input - y->input;
}

/* Replaces each resource input of a plugin's kernel by its variable's value, exclusive to
 * this call (see floe_plugin.h, "Variables"). Variables are taken in address order, each
 * once, so two nodes sharing variables never deadlock. */
static floe_code take_variables(FloeExecStep *s, const ExecNode *en, Invocation *inv,
                                FloeTensor **in) {
  int k = en->num_resources;
  inv->held = k <= INLINE_HELD ? inv->held_inline : floe__malloc((size_t)k * sizeof *inv->held);
  inv->num_held = 0;
  if (!inv->held) {
    floe__exec_step_failf(s, en, FLOE_NO_MEMORY, "out of memory taking %d variables", k);
    return FLOE_NO_MEMORY;
  }
  FloeStatus vst = {FLOE_OK, NULL};
  int n = 0;
  for (int j = 0; j < en->num_inputs && n < k; j++) {
    if (in[j]->dtype != FLOE_RESOURCE) continue;
    char what[32];
    snprintf(what, sizeof what, "input %d", j);
    FloeVar *v = floe__resource_from_handle(in[j], what, &vst);
    if (!v) goto err_fail;
    inv->held[n++] = (HeldVar){v, NULL, j, false};
  }
  qsort(inv->held, (size_t)n, sizeof *inv->held, held_cmp);
  for (int i = 0; i < n; i++) {
    HeldVar *h = &inv->held[i];
    if (i > 0 && h->var == h[-1].var) {
      h->value = h[-1].value; /* the same variable twice: taken once */
    } else {
      h->value = floe__var_begin_update(h->var, en->device, en->lock_vars, &vst);
      if (!h->value) goto err_fail;
      h->owner = true;
    }
    inv->num_held = i + 1;
    in[h->input] = h->value;
  }
  return FLOE_OK;

err_fail:
  floe__exec_step_fail(s, en, vst.code ? vst.code : FLOE_INTERNAL, floe_status_message(&vst));
  floe_status_clear(&vst);
  return FLOE_FAILED_PRECONDITION;
}

/* Gathers n's inputs into the arena, copying those that live on another device into
 * inv->copies (this is where cross-device Send/Recv will plug in), and replacing resource
 * inputs by variable values for kernels that want values. */
static floe_code gather_inputs(FloeExecStep *s, const ExecNode *en, Invocation *inv) {
  FloeExecutor *e = s->e;
  FloeTensor **in = s->in_ptrs + en->in_base;
  for (int j = 0; j < en->num_inputs; j++) {
    int src = e->input_src[en->in_base + j];
    in[j] = src >= 0 ? s->entries[src] : s->feeds[-src - 1];
  }
  return floe__exec_prepare_inputs(s, en, inv, in);
}

floe_code floe__exec_prepare_inputs(FloeExecStep *s, const ExecNode *en, Invocation *inv,
                                    FloeTensor **in) {
  if (en->num_resources && take_variables(s, en, inv, in) != FLOE_OK)
    return FLOE_FAILED_PRECONDITION;
  if (!en->check_copy) return FLOE_OK;
  for (int j = 0; j < en->num_inputs; j++) {
    if (!needs_copy(in[j], en->device)) continue;
    if (!inv->copies) {
      inv->copies = floe__calloc((size_t)en->num_inputs, sizeof *inv->copies);
      if (!inv->copies) {
        floe__exec_step_failf(s, en, FLOE_NO_MEMORY, "out of memory copying inputs to %s",
                   en->device->short_name);
        return FLOE_NO_MEMORY;
      }
    }
    FloeStatus cst = {FLOE_OK, NULL};
    inv->copies[j] = floe__tensor_to_device(in[j], en->device, &cst);
    if (!inv->copies[j]) {
      floe__exec_step_failf(s, en, cst.code ? cst.code : FLOE_INTERNAL, "copying input %d from %s to %s: %s",
                 j, floe_tensor_device_name(in[j]), en->device->short_name,
                 floe_status_message(&cst));
      floe_status_clear(&cst);
      return FLOE_INTERNAL;
    }
    in[j] = inv->copies[j];
  }
  return FLOE_OK;
}

void floe__exec_fill_ctx(FloeExecStep *s, const ExecNode *en, Invocation *inv, FloeTensor **in,
                         FloeTensor **outs) {
  FloeKernelContext *c = &inv->ctx;
  c->temps = NULL;
  c->temp_sizes = NULL;
  c->num_temps = c->cap_temps = 0;
  c->node = en->node;
  c->device = en->device;
  c->inputs = in;
  c->num_inputs = en->num_inputs;
  c->outputs = outs; /* the plain scheduler: straight into the entries */
  c->num_outputs = en->num_outputs;
  c->step = s;
  c->status = &inv->status;
  c->step_id = s->step_id;
  c->device_ns = 0;
  c->frame_id = 0;
  c->iter = 0;
  c->input_src = NULL;
  c->input_dead = false;
  c->output_dead = false;
  c->out_entry = en->out_base;
}

/* A slot being allocated (floe__exec_placed_output). */
static char slot_busy;
#define SLOT_BUSY ((FloeTensor *)&slot_busy)

/* Elements of one index of slot ps's axis for dims (of ps's rank): the product of the dims
 * after the axis; -1 when a dim before it is not 1. */
static int64_t slot_inner(const PlaceSlot *ps, const int64_t *dims) {
  int64_t inner = 1;
  for (int d = 0; d < ps->rank; d++) {
    if (d < ps->axis && dims[d] != 1) return -1;
    if (d > ps->axis) inner *= dims[d];
  }
  return inner;
}

FloeTensor *floe__exec_placed_output(FloeKernelContext *ctx, int i, int rank,
                                     const int64_t *dims) {
  FloeExecStep *s = ctx->step;
  if (!s || !s->e->place_slot || ctx->outputs != s->entries + ctx->out_entry) return NULL;
  const FloeExecutor *e = s->e;
  int entry = ctx->out_entry + i, k = e->place_slot[entry];
  if (k < 0) return NULL;
  const PlaceSlot *ps = &e->slots[k];
  /* the planned place: a block of the slot (dims before the axis 1, its extent along it) */
  if (rank != ps->rank || dims[ps->axis] != e->place_len[entry]) return NULL;
  int64_t inner = slot_inner(ps, dims);
  if (inner < 0) return NULL;
  /* The first producer here allocates the slot; one arriving meanwhile (on another thread)
   * waits the allocation out rather than making a second buffer. */
  FloeTensor *whole = atomic_load_explicit(&s->slot_vals[k], memory_order_acquire);
  FloeStatus st = {FLOE_OK, NULL};
  while (!whole || whole == SLOT_BUSY) {
    if (whole == SLOT_BUSY) {
      sched_yield();
      whole = atomic_load_explicit(&s->slot_vals[k], memory_order_acquire);
      continue;
    }
    if (!atomic_compare_exchange_strong_explicit(&s->slot_vals[k], &whole, SLOT_BUSY,
                                                 memory_order_acq_rel, memory_order_acquire))
      continue; /* whole: what another producer put there */
    int64_t wd[FLOE_MAX_DIMS];
    memcpy(wd, dims, (size_t)rank * sizeof *wd);
    wd[ps->axis] = ps->extent;
    whole = floe__tensor_alloc(ps->device, ps->dtype, rank, wd, &st);
    atomic_store_explicit(&s->slot_vals[k], whole, memory_order_release);
    if (!whole) {
      floe_status_clear(&st); /* no memory for it: the output gets its own (or fails there) */
      return NULL;
    }
  }
  /* the slot's dims after the axis are the first producer's: others must agree */
  for (int d = ps->axis + 1; d < rank; d++)
    if (whole->dims[d] != dims[d]) return NULL;
  int64_t off = e->place_at[entry] * inner * (int64_t)floe_dtype_size(ps->dtype);
  FloeTensor *v = floe__tensor_slice_view(whole, off, rank, dims, &st);
  floe_status_clear(&st);
  return v;
}

/* Whether Concat n's values are the views of its slot its producers wrote (in order, each
 * where plan_concats put it): then its output is the slot, set as its entry, and it has
 * nothing to do. Else it runs its kernel as usual (a producer wrote over an input instead,
 * say), copying. */
static bool concat_in_place(FloeExecStep *s, int n) {
  const FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[n];
  const PlaceSlot *ps = &e->slots[e->concat_slot[n]];
  FloeTensor *whole = atomic_load_explicit(&s->slot_vals[e->concat_slot[n]], memory_order_acquire);
  if (!whole) return false;
  int64_t inner = slot_inner(ps, whole->dims);
  size_t esize = floe_dtype_size(ps->dtype);
  for (int j = 0; j < en->num_inputs - 1; j++) {
    int src = e->input_src[en->in_base + j];
    const FloeTensor *t = s->entries[src];
    if (!t || t->rank != ps->rank || t->num_elements != e->place_len[src] * inner ||
        (t->nbytes && (t->buf != whole->buf ||
                       t->offset != whole->offset + (size_t)(e->place_at[src] * inner) * esize)))
      return false;
  }
  if (e->uses0[en->out_base] > 0) {
    floe_tensor_retain(whole);
    s->entries[en->out_base] = whole;
  }
  return true;
}

bool floe__exec_may_reuse(const FloeKernelContext *ctx, int i) {
  if (!ctx->input_src || i < 0 || i >= ctx->num_inputs || ctx->input_src[i] < 0) return false;
  const FloeExecStep *s = ctx->step;
  int src = ctx->input_src[i];
  FloeTensor *t = ctx->inputs[i];
  /* a copy made for this call, or a variable's value, is not the entry */
  if (!t || t != s->entries[src] || !t->buf) return false;
  /* Every other reader has finished: each drops its use only after its kernel returned
   * (node_done), and the acquire orders their reads before our writes. */
  if (s->e->uses0[src] != 1 &&
      atomic_load_explicit(&s->uses[src], memory_order_acquire) != 1)
    return false;
  return atomic_load_explicit(&t->refs, memory_order_acquire) == 1 &&
         atomic_load_explicit(&t->buf->refs, memory_order_acquire) == 1 &&
         floe__tensor_device(t) == ctx->device;
}

/* Runs (or skips) node n, then completes it unless its kernel is asynchronous. */
static void run_node(FloeExecStep *s, int n, ReadyList *inl) {
  FloeExecutor *e = s->e;
  const ExecNode *en = &e->nodes[n];
  if (!en->kernel || atomic_load_explicit(&s->cancelled, memory_order_relaxed) ||
      (e->concat_slot && e->concat_slot[n] >= 0 && concat_in_place(s, n))) {
    node_done(s, n, inl);
    return;
  }
  const FloeKernelDef *def = &en->kernel->def;
  if (en->async_slot >= 0) {
    Invocation *inv = &s->async_calls[en->async_slot];
    inv->status = (FloeStatus){FLOE_OK, NULL};
    inv->copies = NULL;
    inv->held = NULL;
    inv->num_held = 0;
    if (gather_inputs(s, en, inv) != FLOE_OK) {
      floe__exec_release_inputs(inv, en);
      node_done(s, n, inl);
      return;
    }
    floe__exec_fill_ctx(s, en, inv, s->in_ptrs + en->in_base, s->entries + en->out_base);
    /* an async kernel may take an input no one else reads too (an all-reduce in place): its
     * entry's use is dropped only at node_done, after the kernel completes */
    if (e->reuse_buffers) inv->ctx.input_src = e->input_src + en->in_base;
    s->tasks[n].step = s;
    void *ticket = floe__exec_arm_done(s, n, async_done, &s->tasks[n]);
    if (!ticket) {
      floe__exec_release_inputs(inv, en);
      node_done(s, n, inl);
      return;
    }
    floe__exec_mark_running(s, n, 1);
    inv->start_ns = floe__exec_profiling(e) ? floe__exec_now_ns() : 0;
    /* done may run before this returns, on any thread: n is not ours after the call. */
    def->compute_async(en->state, &inv->ctx, floe__ticket_done, ticket);
    return;
  }
  Invocation inv; /* fill_ctx sets every field of the context */
  inv.status = (FloeStatus){FLOE_OK, NULL};
  inv.copies = NULL;
  inv.held = NULL;
  inv.num_held = 0;
  if (gather_inputs(s, en, &inv) != FLOE_OK) {
    floe__exec_release_inputs(&inv, en);
    node_done(s, n, inl);
    return;
  }
  floe__exec_fill_ctx(s, en, &inv, s->in_ptrs + en->in_base, s->entries + en->out_base);
  if (e->reuse_buffers) inv.ctx.input_src = e->input_src + en->in_base;
  floe_code rc;
  floe__exec_mark_running(s, n, 1);
  if (floe__exec_profiling(e)) {
    int64_t t0 = floe__exec_now_ns();
    rc = def->compute(en->state, &inv.ctx);
    if (rc == FLOE_OK && inv.status.code == FLOE_OK)
      floe__exec_prof_record(s, n, t0, floe__exec_now_ns(), &inv.ctx, false);
  } else {
    rc = def->compute(en->state, &inv.ctx);
  }
  floe__exec_mark_running(s, n, -1);
  finish_invocation(s, n, &inv, rc);
  node_done(s, n, inl);
}

/* Runs the list, and whatever it makes ready inline, to the end; then settles the
 * completions. s may be freed once they are settled, unless this thread finished it. */
static void process_list(FloeExecStep *s, ReadyList *inl) {
  const FloeExecutor *e = s->e; /* outlives s, which the settling below may free */
  int64_t step = s->ctl.trace_step, span = floe__exec_span_begin(e);
  while (inl->head >= 0) {
    int n = inl->head;
    inl->head = s->next[n]; /* n is outstanding, so s is alive */
    if (inl->head < 0) inl->tail = -1;
    run_node(s, n, inl);
  }
  int settled = inl->settled;
  inl->settled = 0;
  floe__exec_span_end(e, step, span);
  if (settled > 0 &&
      atomic_fetch_sub_explicit(&s->outstanding, settled, memory_order_acq_rel) == settled)
    floe__exec_step_finish(s);
}

/* ---- building ---- */

typedef struct FeedKey {
  int node_id, index, feed;
} FeedKey;

static int feed_key_cmp(const void *a, const void *b) {
  const FeedKey *x = a, *y = b;
  if (x->node_id != y->node_id) return x->node_id < y->node_id ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int find_feed(const FeedKey *keys, int n, const FloeOutput *o) {
  FeedKey k = {o->node->id, o->index, 0};
  const FeedKey *hit = bsearch(&k, keys, (size_t)n, sizeof k, feed_key_cmp);
  return hit ? hit->feed : -1;
}

/* Known element count of a shape, or -1. */
static int64_t shape_elements(const FloeShape *sh) {
  if (sh->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < sh->rank; i++) {
    if (sh->dims[i] < 0) return -1;
    n *= sh->dims[i];
    if (n > TINY_ELEMENTS) return n;
  }
  return n;
}

static bool is_tiny(const FloeNode *node) {
  int64_t total = 0;
  for (int j = 0; j < node->num_inputs; j++) {
    const FloeOutput *in = &node->inputs[j];
    int64_t k = shape_elements(&in->node->out_shapes[in->index]);
    if (k < 0 || (total += k) > TINY_ELEMENTS) return false;
  }
  for (int i = 0; i < node->num_outputs; i++) {
    int64_t k = shape_elements(&node->out_shapes[i]);
    if (k < 0 || (total += k) > TINY_ELEMENTS) return false;
  }
  return true;
}

static size_t align_up(size_t n) {
  size_t a = _Alignof(max_align_t);
  return (n + a - 1) / a * a;
}

static void layout_arena(FloeExecutor *e) {
  size_t off = align_up(sizeof(FloeExecStep));
  e->off_pending = off;
  off = align_up(off + (size_t)e->num_nodes * sizeof(atomic_int));
  e->off_uses = off;
  off = align_up(off + (size_t)e->num_entries * sizeof(atomic_int));
  e->off_entries = off;
  off = align_up(off + (size_t)e->num_entries * sizeof(FloeTensor *));
  e->off_in = off;
  off = align_up(off + (size_t)e->total_inputs * sizeof(FloeTensor *));
  e->off_next = off;
  off = align_up(off + (size_t)e->num_nodes * sizeof(int));
  e->off_tasks = off;
  off = align_up(off + (size_t)e->num_nodes * sizeof(StepTask));
  e->off_async = off;
  off = align_up(off + (size_t)e->num_async * sizeof(Invocation));
  e->off_feeds = off;
  off = align_up(off + (size_t)(e->num_feeds + e->num_consts) * sizeof(FloeTensor *));
  e->off_running = off;
  off = align_up(off + (size_t)e->num_nodes * sizeof(atomic_int));
  e->off_slots = off;
  e->arena_size = off + (size_t)e->num_slots * sizeof(_Atomic(FloeTensor *));
}

static void destroy_kernels(FloeExecutor *e) {
  for (int i = 0; i < e->num_nodes; i++) {
    ExecNode *en = &e->nodes[i];
    if (en->created) floe__kernel_release(en->kernel, en->state);
    en->created = false;
  }
}

/* Calls each kernel's create (session-owned states excepted); the error names the node. */
static floe_code create_kernels(FloeExecutor *e, FloeStatus *st) {
  for (int i = 0; i < e->num_nodes; i++) {
    ExecNode *en = &e->nodes[i];
    if (!en->kernel || en->shared) continue;
    if (floe__kernel_instantiate(en->kernel, en->node, en->device, &en->state, &en->created,
                                 st) != FLOE_OK)
      return floe_status_code(st);
  }
  return FLOE_OK;
}

/* Fills input_src, uses0, pending0 and the successor CSR. local_of maps graph node ids to
 * plan indices (-1: not run). */
static floe_code build_edges(FloeExecutor *e, const int *local_of, const FeedKey *feeds,
                             FloeStatus *st) {
  int *deg = floe__calloc((size_t)e->num_nodes + 1, sizeof *deg);
  if (!deg) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
  /* Pass 1: sources of inputs, pending counts, out-degrees. */
  for (int i = 0; i < e->num_nodes; i++) {
    ExecNode *en = &e->nodes[i];
    const FloeNode *node = en->node;
    for (int j = 0; j < node->num_inputs; j++) {
      const FloeOutput *in = &node->inputs[j];
      int f = find_feed(feeds, e->num_feeds + e->num_consts, in);
      if (f >= 0) {
        e->input_src[en->in_base + j] = -(f + 1);
        en->check_copy = true; /* a feed may live anywhere */
        continue;
      }
      int p = local_of[in->node->id];
      if (p < 0 || !e->nodes[p].kernel) {
        floe__free(deg);
        return floe_status_set(st, FLOE_INTERNAL,
                               "node '%s' (%s): input %d ('%s:%d') is neither fed nor computed "
                               "by this step",
                               node->name, node->op->name, j, in->node->name, in->index);
      }
      e->input_src[en->in_base + j] = e->nodes[p].out_base + in->index;
      /* Kernels leave outputs in their device's memory space (ctx_set_output checks it);
       * the frame scheduler's routing nodes (Enter, Merge, Switch, ...) pass on whatever
       * reached them, a feed in host memory say. */
      if (!same_space(e->nodes[p].device, en->device) || routes_values(e->nodes[p].node))
        en->check_copy = true;
      e->uses0[e->nodes[p].out_base + in->index]++;
      e->pending0[i]++;
      deg[p]++;
    }
    for (int c = 0; c < node->num_control; c++) {
      int p = local_of[node->control[c]->id];
      if (p < 0) continue; /* a fully fed node: nothing to wait for */
      e->pending0[i]++;
      deg[p]++;
    }
  }
  int total = 0;
  for (int i = 0; i < e->num_nodes; i++) {
    e->nodes[i].succ_base = total;
    total += deg[i];
    deg[i] = 0;
  }
  e->succ = floe__malloc((size_t)(total ? total : 1) * sizeof *e->succ);
  if (!e->succ) {
    floe__free(deg);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
  }
  /* Pass 2: successor lists. */
  for (int i = 0; i < e->num_nodes; i++) {
    const FloeNode *node = e->nodes[i].node;
    for (int j = 0; j < node->num_inputs; j++) {
      if (e->input_src[e->nodes[i].in_base + j] < 0) continue;
      int p = local_of[node->inputs[j].node->id];
      e->succ[e->nodes[p].succ_base + deg[p]++] = i;
    }
    for (int c = 0; c < node->num_control; c++) {
      int p = local_of[node->control[c]->id];
      if (p >= 0) e->succ[e->nodes[p].succ_base + deg[p]++] = i;
    }
  }
  for (int i = 0; i < e->num_nodes; i++) e->nodes[i].num_succ = deg[i];
  floe__free(deg);
  return FLOE_OK;
}

/* Fetch sources; a fetch counts as one more reader so the entry survives the step. */
static floe_code build_fetches(FloeExecutor *e, const FloeExecPlan *plan, const int *local_of,
                               const FeedKey *feeds, FloeStatus *st) {
  for (int f = 0; f < plan->num_fetches; f++) {
    const FloeOutput *o = &plan->fetches[f];
    int fd = find_feed(feeds, e->num_feeds + e->num_consts, o);
    if (fd >= 0) {
      e->fetch_src[f] = -(fd + 1);
      continue;
    }
    int p = local_of[o->node->id];
    if (p < 0 || !e->nodes[p].kernel)
      return floe_status_set(st, FLOE_INTERNAL, "fetch '%s:%d' is neither fed nor computed",
                             o->node->name, o->index);
    e->fetch_src[f] = e->nodes[p].out_base + o->index;
    e->uses0[e->fetch_src[f]]++;
  }
  return FLOE_OK;
}

static bool plan_valid(const FloeExecPlan *plan, FloeStatus *st) {
  if (!plan || !plan->graph || plan->num_nodes < 0 || plan->num_feeds < 0 ||
      plan->num_fetches < 0) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "executor: invalid plan");
    return false;
  }
  for (int i = 0; i < plan->num_nodes; i++) {
    const FloeExecNodeSpec *ns = &plan->nodes[i];
    if (ns->kernel && !ns->kernel->def.compute && !ns->kernel->def.compute_async) {
      floe_status_set(st, FLOE_INTERNAL, "node '%s' (%s): its kernel has no compute function",
                      ns->node->name, ns->node->op->name);
      return false;
    }
  }
  for (int f = 0; f < plan->num_feeds + plan->num_fetches; f++) {
    const FloeOutput *o =
        f < plan->num_feeds ? &plan->feeds[f] : &plan->fetches[f - plan->num_feeds];
    if (!o->node || o->index < 0 || o->index >= o->node->num_outputs) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT, "executor: invalid feed or fetch %d", f);
      return false;
    }
  }
  return true;
}

/* The axis of Concat node n when its axis input is a Const of one integer (from 0, for an
 * output of rank rank), else -1. */
static int concat_axis(const FloeNode *n, int rank) {
  const FloeOutput *a = &n->inputs[n->num_inputs - 1];
  if (strcmp(a->node->op->name, "Const") != 0) return -1;
  const FloeAttrValue *v = floe__attrs_get(&a->node->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || v->u.tensor->num_elements != 1)
    return -1;
  int64_t ax;
  if (v->u.tensor->dtype == FLOE_I32)
    ax = *(const int32_t *)floe_tensor_data(v->u.tensor);
  else if (v->u.tensor->dtype == FLOE_I64)
    ax = *(const int64_t *)floe_tensor_data(v->u.tensor);
  else
    return -1;
  if (ax < 0) ax += rank;
  return ax >= 0 && ax < rank ? (int)ax : -1;
}

/* Concats computed in place: a Concat on a host-memory device along a constant axis, each
 * value of the output's rank and of a known extent along the axis, produced by a node of this
 * executor on the same device (not a Concat itself) and read by this Concat alone. Each
 * producer's output gets its place in a slot (the Concat's output), which a step allocates
 * when a producer first allocates its output there (floe__exec_placed_output), provided the
 * step's dims before the axis are all 1: each value is then one contiguous block of the
 * output (a blocked concatenation of channel blocks at batch 1, say). Outside control flow. */
static floe_code plan_concats(FloeExecutor *e, const FloeExecPlan *plan, FloeStatus *st) {
  if (plan->force_frames) return FLOE_OK;
  for (int i = 0; i < e->num_nodes; i++)
    if (routes_values(e->nodes[i].node)) return FLOE_OK;
  int *owner = NULL; /* per entry: its node */
  size_t ne = (size_t)(e->num_entries ? e->num_entries : 1);
  for (int i = 0; i < e->num_nodes; i++) {
    const ExecNode *en = &e->nodes[i];
    const FloeNode *n = en->node;
    const FloeShape *y = &n->out_shapes[0];
    if (!en->kernel || strcmp(n->op->name, "Concat") != 0 || n->num_inputs < 3 ||
        !en->device || !en->device->host_memory || y->rank < 1)
      continue;
    int ax = concat_axis(n, y->rank);
    bool ok = ax >= 0;
    for (int d = 0; d < ax && ok; d++) ok = y->dims[d] == 1 || y->dims[d] == FLOE_DIM_UNKNOWN;
    if (!ok) continue;
    if (!owner) {
      owner = floe__malloc(ne * sizeof *owner);
      e->place_slot = floe__malloc(ne * sizeof *e->place_slot);
      e->place_at = floe__calloc(ne, 2 * sizeof *e->place_at);
      e->concat_slot = floe__malloc((size_t)e->num_nodes * sizeof *e->concat_slot);
      if (!owner || !e->place_slot || !e->place_at || !e->concat_slot) {
        floe__free(owner);
        return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
      }
      e->place_len = e->place_at + ne;
      for (int k = 0; k < e->num_nodes; k++) {
        e->concat_slot[k] = -1;
        for (int o = 0; o < e->nodes[k].num_outputs; o++) owner[e->nodes[k].out_base + o] = k;
      }
      for (size_t k = 0; k < ne; k++) e->place_slot[k] = -1;
    }
    int64_t extent = 0;
    for (int j = 0; j < n->num_inputs - 1 && ok; j++) {
      int src = e->input_src[en->in_base + j];
      if (src < 0 || e->uses0[src] != 1 || e->place_slot[src] >= 0) {
        ok = false;
        break;
      }
      const ExecNode *p = &e->nodes[owner[src]];
      const FloeShape *v = &p->node->out_shapes[src - p->out_base];
      ok = p->kernel && p->device == en->device && v->rank == y->rank && v->dims[ax] >= 0 &&
           p->node->out_dtypes[src - p->out_base] == n->out_dtypes[0] &&
           strcmp(p->node->op->name, "Concat") != 0 && !routes_values(p->node);
      if (ok) extent += v->dims[ax];
    }
    if (!ok) continue;
    PlaceSlot *grown = floe__realloc(e->slots, (size_t)(e->num_slots + 1) * sizeof *grown);
    if (!grown) {
      floe__free(owner);
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
    }
    e->slots = grown;
    e->slots[e->num_slots] = (PlaceSlot){.node = i, .device = en->device,
                                         .dtype = n->out_dtypes[0], .rank = y->rank,
                                         .axis = ax, .extent = extent};
    int64_t at = 0;
    for (int j = 0; j < n->num_inputs - 1; j++) {
      int src = e->input_src[en->in_base + j];
      const ExecNode *p = &e->nodes[owner[src]];
      e->place_slot[src] = e->num_slots;
      e->place_at[src] = at;
      e->place_len[src] = p->node->out_shapes[src - p->out_base].dims[ax];
      at += e->place_len[src];
    }
    e->concat_slot[i] = e->num_slots++;
  }
  floe__free(owner);
  if (e->num_slots == 0) {
    floe__free(e->place_slot);
    floe__free(e->place_at);
    floe__free(e->concat_slot);
    e->place_slot = e->concat_slot = NULL;
    e->place_at = e->place_len = NULL;
  }
  return FLOE_OK;
}

/* The value of a Const the executor hands its readers itself (a feed of its own, no kernel
 * run each step), or NULL: a Const on a host-memory device with no inputs, no control inputs
 * and no control successor (is_ctl_pred, by graph id), whose value attribute is a tensor of
 * its dtype. That is exactly what its kernel would output (the value, never written: outputs
 * are read-only to their readers), so a step of a network with hundreds of weights does not
 * spend its start running them one by one ahead of the compute that waits for them. */
static FloeTensor *host_constant(const FloeExecNodeSpec *ns, const bool *is_ctl_pred) {
  const FloeNode *n = ns->node;
  if (!ns->kernel || !ns->device || !ns->device->host_memory || n->num_inputs != 0 ||
      n->num_control != 0 || n->num_outputs != 1 || is_ctl_pred[n->id] ||
      strcmp(n->op->name, "Const") != 0)
    return NULL;
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor ||
      floe_tensor_dtype(v->u.tensor) != n->out_dtypes[0])
    return NULL;
  return v->u.tensor;
}

/* Splits plan's host constants (host_constant) off into feeds of the executor's own: *own
 * is the plan without them, its feeds the caller's followed by theirs (values in
 * e->consts). Outside control flow only (a frame's nodes are scheduled by exec_frames.c).
 * On success *nodes and *feeds hold the arrays own points to (caller frees). */
static floe_code split_constants(FloeExecutor *e, const FloeExecPlan *plan, FloeExecPlan *own,
                                 FloeExecNodeSpec **nodes, FloeOutput **feeds, FloeStatus *st) {
  *own = *plan;
  *nodes = NULL;
  *feeds = NULL;
  if (!plan->const_feeds || plan->force_frames) return FLOE_OK;
  const FloeGraph *g = plan->graph;
  bool *ctl = floe__calloc((size_t)g->num_nodes + 1, sizeof *ctl);
  if (!ctl) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
  int nc = 0;
  for (int i = 0; i < plan->num_nodes; i++) {
    const FloeNode *n = plan->nodes[i].node;
    if (routes_values(n)) {
      floe__free(ctl);
      return FLOE_OK;
    }
    for (int c = 0; c < n->num_control; c++)
      if (n->control[c]->id < g->num_nodes) ctl[n->control[c]->id] = true;
  }
  for (int i = 0; i < plan->num_nodes; i++) nc += host_constant(&plan->nodes[i], ctl) != NULL;
  if (nc == 0) {
    floe__free(ctl);
    return FLOE_OK;
  }
  *nodes = floe__malloc((size_t)(plan->num_nodes - nc + 1) * sizeof **nodes);
  *feeds = floe__malloc((size_t)(plan->num_feeds + nc) * sizeof **feeds);
  e->consts = floe__malloc((size_t)nc * sizeof *e->consts);
  if (!*nodes || !*feeds || !e->consts) {
    floe__free(ctl);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor");
  }
  if (plan->num_feeds) memcpy(*feeds, plan->feeds, (size_t)plan->num_feeds * sizeof **feeds);
  own->num_nodes = 0;
  for (int i = 0; i < plan->num_nodes; i++) {
    FloeTensor *v = host_constant(&plan->nodes[i], ctl);
    if (!v) {
      (*nodes)[own->num_nodes++] = plan->nodes[i];
      continue;
    }
    (*feeds)[plan->num_feeds + e->num_consts] = (FloeOutput){(FloeNode *)plan->nodes[i].node, 0};
    e->consts[e->num_consts++] = v;
  }
  floe__free(ctl);
  own->nodes = *nodes;
  own->feeds = *feeds;
  own->num_feeds = plan->num_feeds + nc;
  return FLOE_OK;
}

/* Caller owns the executor (free with floe__executor_free); the plan's arrays are copied,
 * the graph, devices and kernels it points to are borrowed and must outlive it. */
FloeExecutor *floe__executor_new(const FloeExecPlan *caller_plan, FloeStatus *st) {
  if (!plan_valid(caller_plan, st)) return NULL;
  const FloeGraph *g = caller_plan->graph;
  FloeExecutor *e = floe__calloc(1, sizeof *e);
  int *local_of = NULL;
  FeedKey *feeds = NULL;
  FloeExecNodeSpec *own_nodes = NULL;
  FloeOutput *own_feeds = NULL;
  FloeExecPlan own;
  const FloeExecPlan *plan = &own;
  if (!e) goto err_oom;
  if (split_constants(e, caller_plan, &own, &own_nodes, &own_feeds, st) != FLOE_OK)
    goto err_free;
  atomic_init(&e->spare, NULL);
  e->pool = plan->rt ? plan->rt->pool : NULL;
  e->resources = plan->resources;
  e->inline_inexpensive = plan->inline_inexpensive;
  e->reuse_buffers = plan->reuse_buffers;
  e->profiling = plan->profiling ? plan->profiling : &never_profile;
  e->trace = plan->trace;
  e->device_name = "host";
  for (int i = 0; i < plan->num_nodes; i++)
    if (plan->nodes[i].device) {
      e->device_name = plan->nodes[i].device->short_name;
      break;
    }
  e->force_frames = plan->force_frames;
  e->num_nodes = plan->num_nodes;
  e->num_feeds = caller_plan->num_feeds; /* the caller's; e->num_consts more follow */
  e->num_fetches = plan->num_fetches;
  size_t nn = (size_t)(e->num_nodes ? e->num_nodes : 1);
  e->nodes = floe__calloc(nn, sizeof *e->nodes);
  e->prof = floe__calloc(nn, sizeof *e->prof);
  local_of = floe__malloc((size_t)(g->num_nodes ? g->num_nodes : 1) * sizeof *local_of);
  feeds = floe__malloc((size_t)(plan->num_feeds ? plan->num_feeds : 1) * sizeof *feeds);
  e->pending0 = floe__calloc(nn, sizeof *e->pending0);
  e->roots = floe__malloc(nn * sizeof *e->roots);
  e->fetch_src = floe__malloc((size_t)(plan->num_fetches ? plan->num_fetches : 1) *
                              sizeof *e->fetch_src);
  if (!e->nodes || !e->prof || !local_of || !feeds || !e->pending0 || !e->roots ||
      !e->fetch_src)
    goto err_oom;
  for (int i = 0; i < g->num_nodes; i++) local_of[i] = -1;
  for (int f = 0; f < plan->num_feeds; f++)
    feeds[f] = (FeedKey){plan->feeds[f].node->id, plan->feeds[f].index, f};
  qsort(feeds, (size_t)plan->num_feeds, sizeof *feeds, feed_key_cmp);
  for (int f = 1; f < plan->num_feeds; f++) {
    if (feed_key_cmp(&feeds[f - 1], &feeds[f]) == 0) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s:%d' is fed twice",
                      g->nodes[feeds[f].node_id]->name, feeds[f].index);
      goto err_free;
    }
  }

  int in_total = 0, out_total = 0;
  for (int i = 0; i < e->num_nodes; i++) {
    const FloeExecNodeSpec *ns = &plan->nodes[i];
    ExecNode *en = &e->nodes[i];
    if (local_of[ns->node->id] >= 0) {
      floe_status_set(st, FLOE_INTERNAL, "node '%s' appears twice in the plan", ns->node->name);
      goto err_free;
    }
    local_of[ns->node->id] = i;
    en->node = ns->node;
    en->device = ns->device;
    en->kernel = ns->kernel;
    en->shared = ns->shared;
    en->state = ns->state;
    en->in_base = in_total;
    en->num_inputs = ns->node->num_inputs;
    en->out_base = out_total;
    en->num_outputs = ns->node->num_outputs;
    en->async_slot = -1;
    if (ns->kernel && !ns->kernel->def.compute) en->async_slot = e->num_async++;
    en->check_shapes = ns->kernel && ns->kernel->plugin;
    en->inexpensive = !ns->kernel || (ns->kernel->flags & FLOE_KERNEL_INEXPENSIVE) ||
                      (ns->kernel->def.flags & FLOE_KERNEL_INEXPENSIVE) || is_tiny(ns->node);
    /* Only the core's own kernels (no plugin) see handles, whatever a plugin's flags say. */
    bool raw = ns->kernel && !ns->kernel->plugin &&
               (ns->kernel->flags & FLOE__KERNEL_RAW_RESOURCES);
    if (ns->kernel && !raw) {
      for (int j = 0; j < ns->node->num_inputs; j++) {
        const FloeOutput *in = &ns->node->inputs[j];
        if (in->node->out_dtypes[in->index] == FLOE_RESOURCE) en->num_resources++;
      }
      const FloeAttrValue *ul = floe__attrs_get(&ns->node->attrs, "use_locking");
      en->lock_vars = !ul || ul->kind != FLOE_ATTR_BOOL || ul->u.b;
    }
    in_total += en->num_inputs;
    out_total += en->num_outputs;
  }
  e->total_inputs = in_total;
  e->num_entries = out_total;
  e->input_src = floe__malloc((size_t)(in_total ? in_total : 1) * sizeof *e->input_src);
  e->uses0 = floe__calloc((size_t)(out_total ? out_total : 1), sizeof *e->uses0);
  if (!e->input_src || !e->uses0) goto err_oom;
  if (build_edges(e, local_of, feeds, st) != FLOE_OK) goto err_free;
  if (build_fetches(e, plan, local_of, feeds, st) != FLOE_OK) goto err_free;
  if (plan->concat_in_place && plan_concats(e, plan, st) != FLOE_OK) goto err_free;
  /* Deferred: an expensive node none of whose outputs is read (an update op); without a
   * pool everything runs inline anyway. */
  for (int i = 0; i < e->num_nodes && e->pool; i++) {
    ExecNode *en = &e->nodes[i];
    bool read = false;
    for (int k = 0; k < en->num_outputs && !read; k++) read = e->uses0[en->out_base + k] > 0;
    en->deferred = en->kernel && !en->inexpensive && !read;
  }
  for (int i = 0; i < e->num_nodes; i++)
    if (e->pending0[i] == 0) e->roots[e->num_roots++] = i;
  if (plan->memory_order && e->num_nodes > 1) {
    if (floe__exec_memory_order(e, st) != FLOE_OK) goto err_free;
    sort_by_rank(e, e->roots, e->num_roots);
  }
  layout_arena(e);
  if (floe__cf_build(e, local_of, st) != FLOE_OK) goto err_free;
  if (create_kernels(e, st) != FLOE_OK) goto err_free;
  floe__free(local_of);
  floe__free(feeds);
  floe__free(own_nodes);
  floe__free(own_feeds);
  return e;

err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory building an executor for %d nodes",
                  caller_plan->num_nodes);
err_free:
  floe__free(local_of);
  floe__free(feeds);
  floe__free(own_nodes);
  floe__free(own_feeds);
  floe__executor_free(e);
  return NULL;
}

/* Destroys kernel states and frees e. No step may be running. NULL is a no-op. */
void floe__executor_free(FloeExecutor *e) {
  if (!e) return;
  if (e->nodes) destroy_kernels(e);
  floe__cf_free(e->cf);
  floe__free(e->nodes);
  floe__free(e->prof);
  floe__free(e->input_src);
  floe__free(e->succ);
  floe__free(e->pending0);
  floe__free(e->uses0);
  floe__free(e->roots);
  floe__free(e->rank);
  floe__free(e->fetch_src);
  floe__free(e->consts);
  floe__free(e->place_slot);
  floe__free(e->place_at);
  floe__free(e->concat_slot);
  floe__free(e->slots);
  floe__free(atomic_load(&e->spare));
  floe__free(e);
}

/* ---- one step ---- */

static floe_code step_new(FloeExecutor *e, FloeTensor *const *feeds, FloeExecStep **out,
                          FloeStatus *st) {
  /* Reuse the last step's arena; a concurrent step finds none and makes its own. */
  char *arena = atomic_exchange_explicit(&e->spare, NULL, memory_order_acquire);
  if (!arena) arena = floe__malloc(e->arena_size);
  if (!arena)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a step of %d nodes",
                           e->num_nodes);
  FloeExecStep *s = (FloeExecStep *)arena;
  memset(s, 0, sizeof *s);
  if (pthread_mutex_init(&s->mu, NULL) != 0) goto err_free_arena;
  if (pthread_cond_init(&s->done_cv, NULL) != 0) goto err_destroy_mu;
  s->e = e;
  s->step_id = atomic_fetch_add_explicit(&next_step_id, 1, memory_order_relaxed);
  atomic_init(&s->outstanding, e->num_roots);
  atomic_init(&s->cancelled, false);
  s->pending = (atomic_int *)(arena + e->off_pending);
  s->uses = (atomic_int *)(arena + e->off_uses);
  s->entries = (FloeTensor **)(arena + e->off_entries);
  s->in_ptrs = (FloeTensor **)(arena + e->off_in);
  s->next = (int *)(arena + e->off_next);
  s->tasks = (StepTask *)(arena + e->off_tasks); /* .step set when a task is handed out */
  s->async_calls = (Invocation *)(arena + e->off_async);
  s->feeds = (FloeTensor **)(arena + e->off_feeds);
  s->running = (atomic_int *)(arena + e->off_running); /* zeroed only for a deadline */
  s->slot_vals = (_Atomic(FloeTensor *) *)(arena + e->off_slots);
  for (int k = 0; k < e->num_slots; k++) atomic_init(&s->slot_vals[k], NULL);
  if (e->num_feeds) memcpy(s->feeds, feeds, (size_t)e->num_feeds * sizeof *s->feeds);
  if (e->num_consts)
    memcpy(s->feeds + e->num_feeds, e->consts, (size_t)e->num_consts * sizeof *s->feeds);
  atomic_init(&s->done_twice, 0);
  /* No other thread sees the arena before the step hands out work, so plain copies do. */
  _Static_assert(sizeof(atomic_int) == sizeof(int), "counters are copied as ints");
  memcpy((void *)s->pending, e->pending0, (size_t)e->num_nodes * sizeof(int));
  memcpy((void *)s->uses, e->uses0, (size_t)e->num_entries * sizeof(int));
  memset(s->entries, 0, (size_t)e->num_entries * sizeof *s->entries);
  *out = s;
  return FLOE_OK;

err_destroy_mu:
  pthread_mutex_destroy(&s->mu);
err_free_arena:
  floe__free(arena);
  return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "cannot create the mutex or condition variable of a step");
}

static void step_free(FloeExecStep *s) {
  FloeExecutor *e = s->e;
  /* An outside cancel (timeout, floe_session_close) may still be running callbacks. */
  pthread_mutex_lock(&s->mu);
  while (s->cancelling && !s->cancel_done) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  floe__tickets_release(s->tickets, s->num_tickets); /* a done after this is only counted */
  floe__free(s->tickets);
  if (s->holds_refs) {
    for (int f = 0; f < e->num_feeds; f++) floe_tensor_release(s->feeds[f]);
    floe__rendezvous_release(s->ctl.rendezvous);
  }
  floe__cf_step_free(s);
  for (int i = 0; i < s->num_step_objs; i++) floe__resources_remove(e->resources, s->step_objs[i]);
  floe__free(s->step_objs);
  floe__free(s->cancel_cbs);
  for (int i = 0; i < e->num_entries; i++)
    if (s->entries[i]) floe_tensor_release(s->entries[i]); /* most went with their readers */
  for (int k = 0; k < e->num_slots; k++)
    floe_tensor_release(atomic_load_explicit(&s->slot_vals[k], memory_order_relaxed));
  floe_status_clear(&s->status);
  pthread_cond_destroy(&s->done_cv);
  pthread_mutex_destroy(&s->mu);
  char *expected = NULL;
  if (!atomic_compare_exchange_strong_explicit(&e->spare, &expected, (char *)s,
                                               memory_order_release, memory_order_relaxed))
    floe__free(s);
}

void floe__exec_step_cancel(FloeExecStep *s, floe_code code, const char *why) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", why);
  floe__cf_describe(s, msg, sizeof msg); /* "...: while loop 'w' was at iteration 7" */
  floe__exec_step_abort(s, code, msg);
}

/* At most this many running nodes are named, then "and N more". */
enum { NAMED_RUNNING = 8 };

void floe__exec_describe_running(FloeExecStep *s, char *buf, size_t len) {
  if (!s->deadline_ns || len == 0) return;
  const FloeExecutor *e = s->e;
  size_t at = strlen(buf);
  int named = 0, more = 0;
  for (int n = 0; n < e->num_nodes; n++) {
    if (atomic_load_explicit(&s->running[n], memory_order_relaxed) <= 0) continue;
    if (named == NAMED_RUNNING || at + 1 >= len) {
      more++;
      continue;
    }
    const ExecNode *en = &e->nodes[n];
    int k = snprintf(buf + at, len - at, "%snode '%s' (%s) on %s%s", at ? ", " : "",
                     en->node->name, en->node->op->name,
                     en->device ? en->device->short_name : "host",
                     en->async_slot >= 0 ? " (asynchronous: done not called yet)" : "");
    if (k < 0) break;
    at += (size_t)k < len - at ? (size_t)k : len - at - 1;
    named++;
  }
  if (more && at + 1 < len) snprintf(buf + at, len - at, " and %d more", more);
}

/* Fails the step once its deadline passed, naming the loops and the nodes still running. */
static void step_timeout(FloeExecStep *s, int64_t timeout_ms) {
  char msg[1024], running[768] = "";
  snprintf(msg, sizeof msg, "the run took longer than its timeout of %lld ms%s",
           (long long)timeout_ms, s->e->cf ? ": " : "");
  floe__cf_describe(s, msg, sizeof msg); /* "...: while loop 'w' was at iteration 7" */
  if (s->ctl.describe)
    s->ctl.describe(s->ctl.fail_arg, running, sizeof running);
  else
    floe__exec_describe_running(s, running, sizeof running);
  if (running[0]) {
    size_t at = strlen(msg);
    snprintf(msg + at, sizeof msg - at, "%sstill running: %s", at && msg[at - 1] != ' ' ? "; " : "",
             running);
  }
  floe__exec_step_abort(s, FLOE_DEADLINE_EXCEEDED, msg);
}

void floe__exec_check_deadline(FloeExecStep *s) {
  if (s->deadline_ns && !atomic_load_explicit(&s->cancelled, memory_order_relaxed) &&
      floe__exec_now_ns() >= s->deadline_ns)
    step_timeout(s, s->timeout_ms);
}

/* Waits on s->done_cv (s->mu held) until the CLOCK_MONOTONIC time wake_ns (0: no limit). */
static void wait_until(FloeExecStep *s, int64_t wake_ns) {
  if (!wake_ns) {
    pthread_cond_wait(&s->done_cv, &s->mu);
    return;
  }
  int64_t left = wake_ns - floe__exec_now_ns();
  if (left <= 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
  ts.tv_sec += (time_t)(left / 1000000000);
  ts.tv_nsec += (long)(left % 1000000000);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&s->done_cv, &s->mu, &ts);
}

/* Past the deadline: whether a synchronous kernel of s is still computing, and whether an
 * asynchronous one has not called done yet. */
static void scan_running(const FloeExecStep *s, bool *sync, bool *async) {
  *sync = *async = false;
  for (int n = 0; n < s->e->num_nodes; n++) {
    if (atomic_load_explicit(&s->running[n], memory_order_relaxed) <= 0) continue;
    if (s->e->nodes[n].async_slot >= 0)
      *async = true;
    else
      *sync = true;
  }
}

/* How often a run past its deadline looks whether only asynchronous kernels are left. */
enum { POLL_NS = 1000000 };

/* Blocks until the step is done; on a worker of the pool it keeps running queued tasks
 * meanwhile, so a step started from inside a kernel cannot starve the pool. With a deadline,
 * the step is cancelled when it passes; then (when FloeRunCtl.keep can keep what the step
 * borrows alive) the wait goes on while a synchronous kernel computes (they return, and
 * nothing new starts), for at most another timeout, and stops as soon as only asynchronous
 * kernels that have not called done are left: false then (the step is not done). */
static bool step_wait(FloeExecStep *s) {
  FloeThreadPool *pool = s->e->pool;
  bool helper = floe__pool_in_worker(pool);
  bool timed_out = false;
  int64_t give_up_ns = 0;
  pthread_mutex_lock(&s->mu);
  while (!s->done) {
    int64_t wake_ns = 0;
    if (s->deadline_ns) {
      int64_t now = floe__exec_now_ns();
      if (!timed_out && now >= s->deadline_ns) {
        timed_out = true;
        give_up_ns = now + s->timeout_ms * 1000000;
        pthread_mutex_unlock(&s->mu);
        step_timeout(s, s->timeout_ms);
        pthread_mutex_lock(&s->mu);
        continue;
      }
      if (timed_out && s->ctl.keep) { /* without keep, what s borrows may not outlive it */
        bool sync, async;
        scan_running(s, &sync, &async);
        if (now >= give_up_ns || (async && !sync)) break;
        wake_ns = now + POLL_NS;
      } else if (!timed_out) {
        wake_ns = s->deadline_ns;
      }
    }
    if (!helper) {
      wait_until(s, wake_ns);
      continue;
    }
    pthread_mutex_unlock(&s->mu);
    bool ran = floe__pool_help(pool);
    pthread_mutex_lock(&s->mu);
    /* queued work shows up without a signal: poll every ms */
    int64_t poll = floe__exec_now_ns() + POLL_NS;
    if (!ran && !s->done) wait_until(s, wake_ns && wake_ns < poll ? wake_ns : poll);
  }
  bool done = s->done;
  pthread_mutex_unlock(&s->mu);
  return done;
}

/* An abandoned step ended (its last kernel called done): free it, then let go of what kept
 * its executor and session alive. */
static void step_reap(void *arg) {
  FloeExecStep *s = arg;
  void (*keep)(void *, int) = s->ctl.keep;
  void *keep_arg = s->ctl.keep_arg;
  step_free(s);
  if (keep) keep(keep_arg, -1);
}

/* With control flow a fetched tensor may be dead (an untaken branch): an error naming it. */
static floe_code check_cf_fetches(const FloeExecutor *e, const FloeExecStep *s, FloeStatus *st) {
  for (int f = 0; f < e->num_fetches; f++) {
    int src = e->fetch_src[f];
    if (src < 0 || s->entries[src]) continue;
    for (int i = 0; i < e->num_nodes; i++) {
      const ExecNode *en = &e->nodes[i];
      if (src < en->out_base || src >= en->out_base + en->num_outputs) continue;
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "fetch '%s:%d' was not computed: it is on a branch of a cond "
                             "(Switch) that was not taken in this step",
                             en->node->name, src - en->out_base);
    }
  }
  return FLOE_OK;
}

floe_code floe__executor_run(FloeExecutor *e, FloeTensor *const *feeds, FloeTensor **outputs,
                             FloeStatus *st) {
  return floe__executor_run_ctl(e, feeds, outputs, NULL, st);
}

/* One step. feeds[i] borrowed (in plan order); on success outputs[i] receive new
 * references (in plan order); on error no output is set and st names the failing node. */
floe_code floe__executor_run_ctl(FloeExecutor *e, FloeTensor *const *feeds, FloeTensor **outputs,
                                 const FloeRunCtl *ctl, FloeStatus *st) {
  FloeExecStep *s = NULL;
  floe_code rc = floe__executor_start(e, feeds, ctl, &s, st);
  if (rc != FLOE_OK) return rc;
  return floe__executor_finish(s, outputs, st);
}

floe_code floe__executor_start(FloeExecutor *e, FloeTensor *const *feeds, const FloeRunCtl *ctl,
                               FloeExecStep **out, FloeStatus *st) {
  for (int f = 0; f < e->num_feeds; f++) {
    if (!feeds || !feeds[f])
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "feed %d is NULL", f);
  }
  FloeExecStep *s = NULL;
  floe_code rc = step_new(e, feeds, &s, st);
  if (rc != FLOE_OK) return rc;
  if (ctl) s->ctl = *ctl;
  s->in_worker = floe__pool_in_worker(e->pool);
  floe__pool_set_current(e->pool);
  int64_t timeout = s->ctl.timeout_ms;
  if (timeout > 0) {
    s->timeout_ms = timeout;
    s->deadline_ns = floe__exec_now_ns() + timeout * 1000000;
    memset((void *)s->running, 0, (size_t)e->num_nodes * sizeof *s->running);
  }
  if (s->ctl.attach) s->ctl.attach(s->ctl.arg, s);
  if (e->cf) {
    floe__cf_run(s);
  } else if (e->num_roots > 0) {
    ReadyList roots = {-1, -1, 0, false}, inl = {-1, -1, 0, e->pool && !s->in_worker};
    for (int i = 0; i < e->num_roots; i++) list_push(s, &roots, e->roots[i]);
    schedule_ready(s, &roots, &inl);
    process_list(s, &inl);
  }
  *out = s;
  return FLOE_OK;
}

floe_code floe__executor_finish(FloeExecStep *s, FloeTensor **outputs, FloeStatus *st) {
  FloeExecutor *e = s->e;
  bool done = !(e->cf || e->num_roots > 0) || step_wait(s);
  bool in_worker = s->in_worker;
  void (*keep)(void *, int) = NULL;
  void *keep_arg = s->ctl.keep_arg;
  if (!done) {
    /* Past the deadline with kernels that have not called done: what the step borrows for
     * this call is retained, and its executor and session kept, before the step can be
     * freed by its last kernel. */
    for (int f = 0; f < e->num_feeds; f++) floe_tensor_retain(s->feeds[f]);
    floe__rendezvous_retain(s->ctl.rendezvous);
    s->holds_refs = true;
    keep = s->ctl.keep;
    if (keep) keep(keep_arg, 1);
  }
  if (s->ctl.attach) s->ctl.attach(s->ctl.arg, NULL);
  if (!done) {
    pthread_mutex_lock(&s->mu);
    floe_code code = s->status.code;
    floe__status_copy(st, &s->status);
    done = s->done;
    s->abandoned = !done; /* from here on the last completion frees s */
    pthread_mutex_unlock(&s->mu);
    if (!done) {
      if (!in_worker) floe__pool_set_current(NULL);
      return code;
    }
  }
  /* Every call completed: a done from now on matches no call. */
  floe__tickets_release(s->tickets, s->num_tickets);
  s->num_tickets = 0;
  int twice = atomic_load_explicit(&s->done_twice, memory_order_relaxed);
  if (twice && s->status.code == FLOE_OK) {
    const ExecNode *en = &e->nodes[twice - 1];
    floe_status_set(&s->status, FLOE_INTERNAL,
                    "node '%s' (%s) on %s: the kernel (plugin '%s') called done twice for one "
                    "call: a bug in the kernel; the step's results are not used",
                    en->node->name, en->node->op->name,
                    en->device ? en->device->short_name : "host",
                    en->kernel->plugin ? en->kernel->plugin->name : "core");
  }
  floe_code code = s->status.code;
  if (code != FLOE_OK) {
    floe__status_copy(st, &s->status);
  } else if (e->cf && (code = check_cf_fetches(e, s, st)) != FLOE_OK) {
    /* a fetch on a branch that did not run */
  } else {
    for (int f = 0; f < e->num_fetches; f++) {
      int src = e->fetch_src[f];
      outputs[f] = src >= 0 ? s->entries[src] : s->feeds[-src - 1];
      floe_tensor_retain(outputs[f]);
    }
  }
  step_free(s);
  if (keep) keep(keep_arg, -1); /* kept for an abandonment that came too late */
  /* The caller's thread stops naming a pool that may be freed before its next step. */
  if (!in_worker) floe__pool_set_current(NULL);
  return code;
}
