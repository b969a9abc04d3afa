/* SPDX-License-Identifier: Apache-2.0 */
/* queue_runner.c - threads that run an enqueue step again and again (TensorFlow's
 * QueueRunner), so an input pipeline runs concurrently with the steps that dequeue.
 *
 * Each thread loops floe_session_run(targets = {enqueue}). FLOE_OUT_OF_RANGE (a reader or
 * an upstream queue ran dry) and FLOE_CANCELLED (the queue was closed) end a thread
 * quietly; the last thread to end runs the close target, so consumers take what is left
 * and then get FLOE_OUT_OF_RANGE. Any other error is kept (the first one) and stops the
 * runner: the failing thread runs the close target at once (it cancels pending enqueues,
 * which unblocks the others). The close target runs at most once.
 */
#include <string.h>

#include "data.h"

struct FloeQueueRunner {
  FloeSession *s;          /* borrowed; outlives the runner */
  char *enqueue, *close;   /* owned */
  int num_threads;
  pthread_t *threads;
  int started;             /* threads created */
  pthread_mutex_t mu;      /* guards the fields below */
  int running;             /* threads not yet ended */
  bool closed;             /* the close target ran (or is running) */
  FloeStatus err;          /* the first error */
  atomic_bool stop;        /* asked to end: threads check it between steps */
  pthread_mutex_t join_mu; /* one joiner at a time (stop and join may race) */
  bool joined;             /* guarded by join_mu */
};

/* Runs the close target unless it ran; a failure becomes the runner's error if it has none. */
static void run_close(FloeQueueRunner *qr) {
  pthread_mutex_lock(&qr->mu);
  bool run = !qr->closed;
  qr->closed = true;
  pthread_mutex_unlock(&qr->mu);
  if (!run) return;
  FloeStatus st = {FLOE_OK, NULL};
  const char *target = qr->close;
  if (floe_session_run(qr->s, NULL, 0, NULL, 0, &target, 1, NULL, &st) != FLOE_OK) {
    pthread_mutex_lock(&qr->mu);
    if (qr->err.code == FLOE_OK) {
      floe__status_copy(&qr->err, &st);
      floe__status_prefix(&qr->err, "queue runner: running the close target '%s'", qr->close);
    }
    pthread_mutex_unlock(&qr->mu);
  }
  floe_status_clear(&st);
}

static void *thread_main(void *arg) {
  FloeQueueRunner *qr = arg;
  const char *target = qr->enqueue;
  bool failed = false;
  while (!atomic_load_explicit(&qr->stop, memory_order_acquire)) {
    FloeStatus st = {FLOE_OK, NULL};
    floe_code rc = floe_session_run(qr->s, NULL, 0, NULL, 0, &target, 1, NULL, &st);
    if (rc == FLOE_OK) continue;
    if (rc != FLOE_OUT_OF_RANGE && rc != FLOE_CANCELLED) {
      pthread_mutex_lock(&qr->mu);
      if (qr->err.code == FLOE_OK) {
        floe__status_copy(&qr->err, &st);
        floe__status_prefix(&qr->err, "queue runner: running '%s'", qr->enqueue);
      }
      pthread_mutex_unlock(&qr->mu);
      atomic_store_explicit(&qr->stop, true, memory_order_release);
      failed = true;
    }
    floe_status_clear(&st);
    break;
  }
  pthread_mutex_lock(&qr->mu);
  bool last = --qr->running == 0;
  pthread_mutex_unlock(&qr->mu);
  if (failed || last) run_close(qr);
  return NULL;
}

FloeQueueRunner *floe_queue_runner_new(FloeSession *s, const char *enqueue_target,
                                       int num_threads, const char *close_target,
                                       FloeStatus *status) {
  if (!s || !enqueue_target || !close_target || num_threads < 1) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "floe_queue_runner_new: give a session, both targets and 1 or more threads "
                    "(got %d)", num_threads);
    return NULL;
  }
  const FloeGraph *g = floe__session_graph(s);
  const char *names[2] = {enqueue_target, close_target};
  for (int i = 0; i < 2; i++) {
    if (floe_graph_find(g, names[i])) continue;
    floe_status_set(status, FLOE_NOT_FOUND,
                    "floe_queue_runner_new: the %s target '%s' is not a node of the session's "
                    "graph", i ? "close" : "enqueue", names[i]);
    return NULL;
  }
  const FloeNode *c = floe_graph_find(g, close_target);
  const FloeAttrValue *cancel = floe__attrs_get(&c->attrs, "cancel_pending_enqueues");
  if (strcmp(c->op->name, "QueueCloseV2") == 0 && cancel && !cancel->u.b) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "floe_queue_runner_new: close target '%s' does not cancel pending enqueues, "
                    "so floe_queue_runner_stop could wait forever on a full queue: build it "
                    "with floe_queue_close(g, name, queue, 1)", close_target);
    return NULL;
  }
  FloeQueueRunner *qr = floe__calloc(1, sizeof *qr);
  if (!qr) goto err_oom;
  qr->enqueue = floe__strdup(enqueue_target);
  qr->close = floe__strdup(close_target);
  qr->threads = floe__calloc((size_t)num_threads, sizeof *qr->threads);
  if (!qr->enqueue || !qr->close || !qr->threads) goto err_free;
  if (pthread_mutex_init(&qr->mu, NULL) != 0) goto err_free;
  if (pthread_mutex_init(&qr->join_mu, NULL) != 0) {
    pthread_mutex_destroy(&qr->mu);
    goto err_free;
  }
  qr->s = s;
  qr->num_threads = num_threads;
  atomic_init(&qr->stop, false);
  return qr;

err_free:
  floe__free(qr->enqueue);
  floe__free(qr->close);
  floe__free(qr->threads);
  floe__free(qr);
err_oom:
  floe_status_set(status, FLOE_NO_MEMORY, "floe_queue_runner_new: out of memory");
  return NULL;
}

floe_code floe_queue_runner_start(FloeQueueRunner *qr, FloeStatus *status) {
  if (!qr) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_queue_runner_start: NULL");
  pthread_mutex_lock(&qr->mu);
  if (qr->started) {
    pthread_mutex_unlock(&qr->mu);
    return floe_status_set(status, FLOE_FAILED_PRECONDITION,
                           "queue runner of '%s': already started (a runner starts once)",
                           qr->enqueue);
  }
  qr->running = qr->num_threads; /* before any thread can end */
  int k = 0, e = 0;
  for (; k < qr->num_threads; k++)
    if ((e = pthread_create(&qr->threads[k], NULL, thread_main, qr)) != 0) break;
  qr->started = k;
  if (k < qr->num_threads) qr->running -= qr->num_threads - k;
  pthread_mutex_unlock(&qr->mu);
  if (k == qr->num_threads) return FLOE_OK;
  floe_queue_runner_stop(qr, NULL);
  return floe_status_set(status, FLOE_RESOURCE_EXHAUSTED,
                         "queue runner of '%s': could start only %d of %d threads: %s",
                         qr->enqueue, k, qr->num_threads, strerror(e));
}

floe_code floe_queue_runner_join(FloeQueueRunner *qr, FloeStatus *status) {
  if (!qr) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_queue_runner_join: NULL");
  pthread_mutex_lock(&qr->join_mu);
  if (!qr->joined) {
    pthread_mutex_lock(&qr->mu);
    int started = qr->started;
    pthread_mutex_unlock(&qr->mu);
    for (int i = 0; i < started; i++) pthread_join(qr->threads[i], NULL);
    qr->joined = started > 0;
  }
  pthread_mutex_unlock(&qr->join_mu);
  pthread_mutex_lock(&qr->mu);
  floe_code rc = floe__status_copy(status, &qr->err);
  pthread_mutex_unlock(&qr->mu);
  return rc;
}

floe_code floe_queue_runner_stop(FloeQueueRunner *qr, FloeStatus *status) {
  if (!qr) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_queue_runner_stop: NULL");
  atomic_store_explicit(&qr->stop, true, memory_order_release);
  pthread_mutex_lock(&qr->mu);
  bool started = qr->started > 0;
  pthread_mutex_unlock(&qr->mu);
  if (started) run_close(qr); /* unblocks enqueues waiting for room */
  return floe_queue_runner_join(qr, status);
}

void floe_queue_runner_free(FloeQueueRunner *qr) {
  if (!qr) return;
  floe_queue_runner_stop(qr, NULL);
  floe_status_clear(&qr->err);
  pthread_mutex_destroy(&qr->join_mu);
  pthread_mutex_destroy(&qr->mu);
  floe__free(qr->enqueue);
  floe__free(qr->close);
  floe__free(qr->threads);
  floe__free(qr);
}
