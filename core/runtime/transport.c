/* SPDX-License-Identifier: Apache-2.0 */
/* transport.c - the runtime's transport manager: a loopback comm pair over a transport
 * plugin (channel 0), channels to and from other endpoints (floe__transport_connect to a
 * peer's address, floe__transport_accept of a peer's connection), and a progress thread that
 * completes the requests posted through them.
 *
 * Created on first use (a step whose Send/Recv cannot hand a value over by reference), torn
 * down by floe_runtime_free before the plugins shut down. The transport is the one named by
 * FLOE_TRANSPORT, else "fabric" for a runtime that is a task of a cluster (when loaded), else
 * "local". Every posted request has a done callback that runs exactly
 * once on the progress thread (or on the thread tearing the manager down), never under the
 * manager's lock, so callbacks may post again.
 *
 * Tags: the manager clears FLOE_TRANSPORT_TAG_RESERVED (the transport's own bit, ABI 1.4) in
 * every tag it posts, so callers may hand it any 64-bit tag.
 *
 * Waiting while requests are pending, or while idle once the manager has channels to other
 * endpoints or someone waits in floe__transport_accept (a peer's connection set-up, its
 * hellos and rxm's protocols move only under progress, on both sides), in the first way the
 * transport allows (with no channels and nothing pending the thread waits on a condition
 * variable: a lone runtime's loopback needs no progress while idle):
 *  - get_fd and trywait (1.4): progress and test, then trywait; only when it answers FLOE_OK
 *    does the thread sleep in poll() on that fd and on its own eventfd (posts, cancels and
 *    stop write it): with no timeout while no request is outstanding, else for 1 ms doubling
 *    to 16 ms while nothing completes. libfabric 1.17's tcp;ofi_rxm answers FI_SUCCESS to
 *    fi_trywait and then leaves its fd quiet although a posted transfer can move on the next
 *    progress call (seen as 80-250 ms stalls of 524 KB parameter reads in sync replication,
 *    the 90th-percentile step at 150-230 ms against a median of 15; with the bound, 17-22):
 *    a bounded sleep lets a missed wake-up cost at most the bound.
 *  - wait and interrupt (1.4): the thread blocks in wait; posts, cancels and stop interrupt it.
 *  - get_fd alone (1.3): poll() as above, with a 100 ms safety timeout for a missed wake-up.
 *  - none: a condition variable with a short backoff (50 us doubling to 2 ms).
 * A transport that keeps answering "not yet" (trywait) or fails to wait is not spun on: the
 * thread falls back to bounded sleeps. After each progress the thread wakes the callers
 * waiting in floe__transport_accept, which then look for a connection again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"

struct FloeXfer {
  void *req;                 /* the transport's request; NULL once completed or cancelled */
  FloeXferDoneFn done;
  void *arg;
  floe_code code;            /* set on completion */
  size_t size;
  bool is_recv;
  int chan;                  /* the channel it was posted on */
  struct FloeXfer *prev, *next; /* in pending or completed */
};

/* How the progress thread sleeps (see the top of the file). */
typedef enum WaitMode {
  WAIT_FD_TRYWAIT,           /* get_fd + trywait: poll() without a timeout */
  WAIT_BLOCKING,             /* the transport's wait, ended by interrupt */
  WAIT_FD,                   /* get_fd alone: poll() with a safety timeout */
  WAIT_BACKOFF               /* a condition variable with a short backoff */
} WaitMode;

struct FloeTransportMgr {
  const FloeTransportReg *tr;
  const FloeTransportFns *fns;
  void *ctx, *listen_comm, *send_comm, *recv_comm;
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX]; /* listen_comm's address */
  size_t addr_len;
  /* Channels (under mu): [0] is the loopback pair (send_comm, recv_comm); later ones come
   * from floe__transport_connect (sends) and floe__transport_accept (receives); NULL once
   * closed. */
  void **send_chans, **recv_chans;
  int num_send_chans, num_recv_chans;
  int open_chans;            /* channels > 0 not closed, both kinds */
  int accepting;             /* callers waiting in floe__transport_accept */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_cond_t accept_cv;  /* broadcast after each progress while someone accepts */
  FloeXfer *pending;         /* posted, not yet completed */
  FloeXfer *completed;       /* completed or cancelled, callbacks not yet run */
  bool stop;
  int fd;                    /* the transport's fd, or -1 */
  int wake_fd;               /* ours: written on post, cancel and stop */
  WaitMode mode;
  int not_yet;               /* trywait's FLOE_UNAVAILABLE answers in a row */
  int pending_poll_ms;       /* trywait mode, requests outstanding: the next sleep's bound */
  pthread_t thread;
};

enum { BACKOFF_MIN_NS = 50000, BACKOFF_MAX_NS = 2000000, POLL_SAFETY_MS = 100 };
/* After this many "not yet" answers from trywait in a row, poll with a short timeout. */
enum { NOT_YET_LIMIT = 64, NOT_YET_POLL_MS = 1 };
/* trywait mode with requests outstanding: poll() for 1 ms, doubling while nothing completes,
 * up to 16 ms (see the top of the file). */
enum { PENDING_POLL_MIN_MS = 1, PENDING_POLL_MAX_MS = 16 };
/* accept's own naps between looks when no progress woke it (a transport whose connection
 * set-up makes no fd readable): 1 ms doubling to 50 ms. The progress thread's wake-ups are
 * the fast path; these only bound a missed one. */
enum { ACCEPT_NAP_MIN_NS = 1000000, ACCEPT_NAP_MAX_NS = 50000000 };

/* Serialises lazy creation (rare: once per runtime). */
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

static void list_push(FloeXfer **head, FloeXfer *x) {
  x->prev = NULL;
  x->next = *head;
  if (*head) (*head)->prev = x;
  *head = x;
}

static void list_remove(FloeXfer **head, FloeXfer *x) {
  if (x->prev)
    x->prev->next = x->next;
  else
    *head = x->next;
  if (x->next) x->next->prev = x->prev;
  x->prev = x->next = NULL;
}

static void wake(FloeTransportMgr *m) {
  uint64_t one = 1;
  ssize_t w = write(m->wake_fd, &one, sizeof one);
  (void)w; /* a saturated counter is still readable */
  if (m->mode == WAIT_BLOCKING) m->fns->interrupt(m->ctx);
  pthread_cond_signal(&m->cv);
}

/* The transport's own bit is never set by the manager (ABI 1.4). */
static uint64_t wire_tag(uint64_t tag) { return tag & ~FLOE_TRANSPORT_TAG_RESERVED; }

/* Runs the callbacks of every completed request (called with mu held; drops it meanwhile). */
static void run_completed(FloeTransportMgr *m) {
  while (m->completed) {
    FloeXfer *list = m->completed;
    m->completed = NULL;
    pthread_mutex_unlock(&m->mu);
    for (FloeXfer *x = list, *next; x; x = next) {
      next = x->next;
      if (x->done) x->done(x->arg, x->code, x->size);
      floe__free(x);
    }
    pthread_mutex_lock(&m->mu);
  }
}

/* Tests every pending request once (mu held); true when one completed. */
static bool test_pending(FloeTransportMgr *m) {
  if (m->fns->progress) m->fns->progress(m->ctx);
  bool any = false;
  for (FloeXfer *x = m->pending, *next; x; x = next) {
    next = x->next;
    int done = 0;
    size_t size = 0;
    floe_code rc = m->fns->test(x->req, &done, &size);
    if (!done && rc == FLOE_OK) continue;
    /* A failed test() without done: the request is lost to us; report it failed. */
    x->req = NULL;
    x->code = rc;
    x->size = done ? size : 0;
    list_remove(&m->pending, x);
    list_push(&m->completed, x);
    any = true;
  }
  return any;
}

/* Sleeps in poll() on the transport's fd and ours (mu held; dropped meanwhile). */
static void poll_fds(FloeTransportMgr *m, int timeout_ms) {
  pthread_mutex_unlock(&m->mu);
  struct pollfd p[2] = {{.fd = m->fd, .events = POLLIN}, {.fd = m->wake_fd, .events = POLLIN}};
  if (poll(p, 2, timeout_ms) > 0 && (p[1].revents & POLLIN)) {
    uint64_t v;
    ssize_t r = read(m->wake_fd, &v, sizeof v);
    (void)r;
  }
  pthread_mutex_lock(&m->mu);
}

/* The condition-variable sleep of transports that cannot say when to wake (mu held). */
static void backoff_sleep(FloeTransportMgr *m, long *backoff_ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += *backoff_ns;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&m->cv, &m->mu, &ts);
  if (*backoff_ns < BACKOFF_MAX_NS) *backoff_ns *= 2;
}

/* Sleeps until the transport may progress or a post, cancel or stop arrives (mu held; dropped
 * while asleep). Called right after test_pending found nothing. */
static void wait_for_progress(FloeTransportMgr *m, long *backoff_ns) {
  switch (m->mode) {
  case WAIT_FD_TRYWAIT: {
    /* trywait is asked without mu: a transport may take its own locks in it. */
    pthread_mutex_unlock(&m->mu);
    floe_code rc = m->fns->trywait(m->ctx);
    pthread_mutex_lock(&m->mu);
    if (m->stop || m->completed) return;
    if (rc == FLOE_OK) {
      m->not_yet = 0;
      if (m->pending) { /* see the top: bounded while requests are outstanding */
        poll_fds(m, m->pending_poll_ms);
        if (m->pending_poll_ms < PENDING_POLL_MAX_MS) m->pending_poll_ms *= 2;
      } else {
        poll_fds(m, -1);
      }
    } else if (rc == FLOE_UNAVAILABLE && ++m->not_yet < NOT_YET_LIMIT) {
      /* progress is possible at once: the caller progresses and tests again */
    } else {
      /* a transport that never lets us sleep, or failed: sleep briefly, never spin */
      poll_fds(m, rc == FLOE_UNAVAILABLE ? NOT_YET_POLL_MS : POLL_SAFETY_MS);
    }
    return;
  }
  case WAIT_BLOCKING: {
    pthread_mutex_unlock(&m->mu);
    floe_code rc = m->fns->wait(m->ctx, -1);
    pthread_mutex_lock(&m->mu);
    if (rc != FLOE_OK && rc != FLOE_DEADLINE_EXCEEDED && !m->stop) backoff_sleep(m, backoff_ns);
    return;
  }
  case WAIT_FD:
    poll_fds(m, POLL_SAFETY_MS);
    return;
  case WAIT_BACKOFF:
    backoff_sleep(m, backoff_ns);
    return;
  }
}

static void *progress_main(void *arg) {
  FloeTransportMgr *m = arg;
  long backoff_ns = BACKOFF_MIN_NS;
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    if (m->completed) {
      run_completed(m);
      continue;
    }
    if (!m->pending && m->open_chans == 0 && m->accepting == 0) {
      pthread_cond_wait(&m->cv, &m->mu);
      continue;
    }
    bool any = test_pending(m);
    if (m->accepting) pthread_cond_broadcast(&m->accept_cv);
    if (any) {
      backoff_ns = BACKOFF_MIN_NS;
      m->pending_poll_ms = PENDING_POLL_MIN_MS;
      continue;
    }
    wait_for_progress(m, &backoff_ns);
  }
  pthread_cond_broadcast(&m->accept_cv);
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

static const FloeTransportReg *pick_transport(const FloeRuntime *rt, FloeStatus *st) {
  const char *want = getenv("FLOE_TRANSPORT");
  bool named = want && *want;
  if (!named) want = "local";
  /* A task of a cluster talks to other processes: the network transport when there is one
   * ("local" joins runtimes of one process only). */
  if (!named && rt->joined)
    for (int i = 0; i < rt->num_transports; i++)
      if (strcmp(rt->transports[i]->name, "fabric") == 0) return rt->transports[i];
  for (int i = 0; i < rt->num_transports; i++)
    if (strcmp(rt->transports[i]->name, want) == 0) return rt->transports[i];
  if (rt->num_transports == 0) {
    floe_status_set(st, FLOE_UNAVAILABLE,
                    "no transport plugin is loaded, so a tensor cannot move between these "
                    "devices: put the directory of floe-transport-local.so on FLOE_PLUGIN_PATH "
                    "(or install it), and if FLOE_PLUGINS is set, add \"transport-local\" to it");
    return NULL;
  }
  char list[256];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; i < rt->num_transports && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                     rt->transports[i]->name);
    if (w < 0) break;
    used += (size_t)w;
  }
  floe_status_set(st, FLOE_NOT_FOUND,
                  "transport \"%s\"%s is not loaded; loaded transports: %s (set FLOE_TRANSPORT "
                  "to one of them)",
                  want, named ? " (FLOE_TRANSPORT)" : " (the default)", list);
  return NULL;
}

static floe_code transport_failed(FloeStatus *st, const FloeTransportReg *tr, const char *slot,
                                  floe_code rc) {
  return floe_status_set(st, rc == FLOE_OK ? FLOE_INTERNAL : rc,
                         "transport \"%s\" (plugin %s): %s failed (%s)", tr->name,
                         tr->plugin ? tr->plugin->name : "?", slot, floe_code_name(rc));
}

/* listen, connect, accept: the loopback pair every transfer of this runtime goes through. */
static floe_code open_comms(FloeTransportMgr *m, FloeStatus *st) {
  unsigned char *addr = m->addr;
  size_t addr_len = sizeof m->addr;
  floe_code rc = m->fns->listen(m->ctx, addr, &addr_len, &m->listen_comm);
  if (rc != FLOE_OK) return transport_failed(st, m->tr, "listen", rc);
  if (addr_len > sizeof m->addr)
    return floe_status_set(st, FLOE_INTERNAL,
                           "transport \"%s\": listen gave a %zu-byte address (at most %d)",
                           m->tr->name, addr_len, FLOE_TRANSPORT_ADDR_MAX);
  rc = m->fns->connect(m->ctx, addr, addr_len, &m->send_comm);
  if (rc != FLOE_OK) return transport_failed(st, m->tr, "connect", rc);
  /* A transport whose accept completes asynchronously answers UNAVAILABLE meanwhile. */
  for (int tries = 0; tries < 1000; tries++) {
    rc = m->fns->accept(m->listen_comm, &m->recv_comm);
    if (rc != FLOE_UNAVAILABLE) break;
    if (m->fns->progress) m->fns->progress(m->ctx);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (rc != FLOE_OK) return transport_failed(st, m->tr, "accept", rc);
  m->addr_len = addr_len;
  m->send_chans = floe__calloc(1, sizeof *m->send_chans);
  m->recv_chans = floe__calloc(1, sizeof *m->recv_chans);
  if (!m->send_chans || !m->recv_chans)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating the transport manager");
  m->send_chans[0] = m->send_comm;
  m->recv_chans[0] = m->recv_comm;
  m->num_send_chans = m->num_recv_chans = 1;
  return FLOE_OK;
}

static void close_comms(FloeTransportMgr *m) {
  for (int i = 1; i < m->num_send_chans; i++)
    if (m->send_chans[i]) m->fns->close_send(m->send_chans[i]);
  for (int i = 1; i < m->num_recv_chans; i++)
    if (m->recv_chans[i]) m->fns->close_recv(m->recv_chans[i]);
  floe__free(m->send_chans);
  floe__free(m->recv_chans);
  m->send_chans = m->recv_chans = NULL;
  m->num_send_chans = m->num_recv_chans = 0;
  if (m->send_comm) m->fns->close_send(m->send_comm);
  if (m->recv_comm) m->fns->close_recv(m->recv_comm);
  if (m->listen_comm) m->fns->close_listen(m->listen_comm);
  m->send_comm = m->recv_comm = m->listen_comm = NULL;
}

static void mgr_destroy(FloeTransportMgr *m) {
  close_comms(m);
  if (m->ctx) m->fns->finalize(m->ctx);
  if (m->wake_fd >= 0) close(m->wake_fd);
  pthread_cond_destroy(&m->cv);
  pthread_cond_destroy(&m->accept_cv);
  pthread_mutex_destroy(&m->mu);
  floe__free(m);
}

static FloeTransportMgr *mgr_create(FloeRuntime *rt, FloeStatus *st) {
  const FloeTransportReg *tr = pick_transport(rt, st);
  if (!tr) return NULL;
  FloeTransportMgr *m = floe__calloc(1, sizeof *m);
  if (!m) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating the transport manager");
    return NULL;
  }
  m->tr = tr;
  m->fns = &tr->fns;
  m->fd = -1;
  m->wake_fd = -1;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->accept_cv, &ca);
  pthread_condattr_destroy(&ca);
  m->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m->wake_fd < 0) {
    floe_status_set(st, FLOE_UNAVAILABLE, "eventfd for the transport manager: %s",
                    strerror(errno));
    goto err_destroy;
  }
  floe_code rc = m->fns->init(floe__host_api(), &m->ctx);
  if (rc != FLOE_OK) {
    m->ctx = NULL;
    transport_failed(st, tr, "init", rc);
    goto err_destroy;
  }
  if (open_comms(m, st) != FLOE_OK) goto err_destroy;
  if (m->fns->get_fd && m->fns->get_fd(m->ctx, &m->fd) != FLOE_OK) m->fd = -1;
  /* Slots a plugin of an older minor lacks are NULL (the loader copied only its struct). */
  m->pending_poll_ms = PENDING_POLL_MIN_MS;
  if (m->fd >= 0 && m->fns->trywait)
    m->mode = WAIT_FD_TRYWAIT;
  else if (m->fns->wait && m->fns->interrupt)
    m->mode = WAIT_BLOCKING;
  else if (m->fd >= 0)
    m->mode = WAIT_FD;
  else
    m->mode = WAIT_BACKOFF;
  int err = pthread_create(&m->thread, NULL, progress_main, m);
  if (err) {
    floe_status_set(st, FLOE_UNAVAILABLE, "cannot start the transport progress thread: %s",
                    strerror(err));
    goto err_destroy;
  }
  return m;

err_destroy:
  mgr_destroy(m);
  return NULL;
}

FloeTransportMgr *floe__transport_mgr(FloeRuntime *rt, FloeStatus *st) {
  FloeTransportMgr *m = atomic_load_explicit(&rt->transport_mgr, memory_order_acquire);
  if (m) return m;
  pthread_mutex_lock(&create_mu);
  m = atomic_load_explicit(&rt->transport_mgr, memory_order_acquire);
  if (!m) {
    m = mgr_create(rt, st);
    if (m) atomic_store_explicit(&rt->transport_mgr, m, memory_order_release);
  }
  pthread_mutex_unlock(&create_mu);
  return m;
}

void floe__transport_mgr_free(FloeRuntime *rt) {
  FloeTransportMgr *m = atomic_exchange(&rt->transport_mgr, NULL);
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->stop = true;
  wake(m);
  pthread_mutex_unlock(&m->mu);
  pthread_join(m->thread, NULL);
  pthread_mutex_lock(&m->mu);
  /* What completed meanwhile completes as usual; what is still pending is withdrawn. */
  test_pending(m);
  for (FloeXfer *x = m->pending, *next; x; x = next) {
    next = x->next;
    if (x->is_recv && m->fns->cancel) m->fns->cancel(x->req); /* else close_recv frees it */
    x->req = NULL;
    x->code = FLOE_CANCELLED;
    x->size = 0;
    list_remove(&m->pending, x);
    list_push(&m->completed, x);
  }
  run_completed(m); /* posts from these callbacks fail: stop is set */
  pthread_mutex_unlock(&m->mu);
  mgr_destroy(m);
}

const char *floe__transport_name(const FloeTransportMgr *m) { return m->tr->name; }

static floe_code post(FloeTransportMgr *m, int chan, bool is_recv, void *buf, size_t len,
                      uint64_t tag, FloeXferDoneFn done, void *arg, FloeXfer **out,
                      FloeStatus *st) {
  FloeXfer *x = floe__calloc(1, sizeof *x);
  if (!x) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory posting a transfer");
  x->done = done;
  x->arg = arg;
  x->is_recv = is_recv;
  x->chan = chan;
  pthread_mutex_lock(&m->mu);
  if (m->stop) {
    pthread_mutex_unlock(&m->mu);
    floe__free(x);
    return floe_status_set(st, FLOE_CANCELLED, "transport \"%s\": the runtime is shutting down",
                           m->tr->name);
  }
  void *comm = NULL;
  if (chan >= 0 && chan < (is_recv ? m->num_recv_chans : m->num_send_chans))
    comm = is_recv ? m->recv_chans[chan] : m->send_chans[chan];
  if (!comm) {
    pthread_mutex_unlock(&m->mu);
    floe__free(x);
    return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "transport \"%s\": %s channel %d is %s", m->tr->name,
                           is_recv ? "receive" : "send", chan,
                           chan > 0 && chan < (is_recv ? m->num_recv_chans : m->num_send_chans)
                               ? "closed"
                               : "not open");
  }
  floe_code rc = is_recv ? m->fns->irecv(comm, buf, len, wire_tag(tag), NULL, &x->req)
                         : m->fns->isend(comm, buf, len, wire_tag(tag), NULL, &x->req);
  if (rc != FLOE_OK) {
    pthread_mutex_unlock(&m->mu);
    floe__free(x);
    transport_failed(st, m->tr, is_recv ? "irecv" : "isend", rc);
    floe__status_prefix(st, "posting %zu bytes under tag 0x%016llx", len,
                        (unsigned long long)tag);
    return st ? st->code : rc;
  }
  list_push(&m->pending, x);
  if (out) *out = x;
  wake(m);
  pthread_mutex_unlock(&m->mu);
  return FLOE_OK;
}

floe_code floe__transport_isend(FloeTransportMgr *m, const void *buf, size_t len, uint64_t tag,
                                FloeXferDoneFn done, void *arg, FloeStatus *st) {
  return post(m, 0, false, (void *)buf, len, tag, done, arg, NULL, st);
}

floe_code floe__transport_irecv(FloeTransportMgr *m, void *buf, size_t len, uint64_t tag,
                                FloeXferDoneFn done, void *arg, FloeXfer **out, FloeStatus *st) {
  return post(m, 0, true, buf, len, tag, done, arg, out, st);
}

floe_code floe__transport_isend_on(FloeTransportMgr *m, int chan, const void *buf, size_t len,
                                   uint64_t tag, FloeXferDoneFn done, void *arg, FloeStatus *st) {
  return post(m, chan, false, (void *)buf, len, tag, done, arg, NULL, st);
}

floe_code floe__transport_irecv_on(FloeTransportMgr *m, int chan, void *buf, size_t len,
                                   uint64_t tag, FloeXferDoneFn done, void *arg, FloeXfer **out,
                                   FloeStatus *st) {
  return post(m, chan, true, buf, len, tag, done, arg, out, st);
}

/* ---- channels to and from other endpoints ---------------------------------------------- */

floe_code floe__transport_address(FloeTransportMgr *m, void *addr, size_t *len) {
  if (*len < m->addr_len) {
    *len = m->addr_len;
    return FLOE_OUT_OF_RANGE;
  }
  memcpy(addr, m->addr, m->addr_len);
  *len = m->addr_len;
  return FLOE_OK;
}

/* Appends comm to *chans (mu held); the new channel's number, or -1 when out of memory. */
static int add_chan(void ***chans, int *num, void *comm) {
  void **grown = floe__realloc(*chans, (size_t)(*num + 1) * sizeof **chans);
  if (!grown) return -1;
  *chans = grown;
  grown[*num] = comm;
  return (*num)++;
}

int floe__transport_connect(FloeTransportMgr *m, const void *addr, size_t len, FloeStatus *st) {
  if (len == 0 || len > FLOE_TRANSPORT_ADDR_MAX) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "transport \"%s\": a peer's address of %zu bytes (1 to %d expected)",
                    m->tr->name, len, FLOE_TRANSPORT_ADDR_MAX);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  void *comm = NULL;
  floe_code rc = m->stop ? FLOE_CANCELLED : m->fns->connect(m->ctx, addr, len, &comm);
  int chan = -1;
  if (rc == FLOE_OK && (chan = add_chan(&m->send_chans, &m->num_send_chans, comm)) < 0) {
    m->fns->close_send(comm);
    rc = FLOE_NO_MEMORY;
  }
  if (rc == FLOE_OK) {
    m->open_chans++;
    wake(m); /* from now on the thread progresses the transport while idle */
  }
  pthread_mutex_unlock(&m->mu);
  if (rc != FLOE_OK) transport_failed(st, m->tr, "connect", rc);
  return chan;
}

/* now + ns, capped at deadline (CLOCK_MONOTONIC: the manager's condvars use it). */
static struct timespec until(const struct timespec *deadline, long ns) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += ns;
  t.tv_sec += t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  if (t.tv_sec > deadline->tv_sec ||
      (t.tv_sec == deadline->tv_sec && t.tv_nsec > deadline->tv_nsec))
    t = *deadline;
  return t;
}

int floe__transport_accept(FloeTransportMgr *m, int64_t timeout_ms, FloeStatus *st) {
  struct timespec deadline, now;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  if (timeout_ms < 0) timeout_ms = 0;
  deadline.tv_sec += (time_t)(timeout_ms / 1000);
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  deadline.tv_sec += deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  long nap_ns = ACCEPT_NAP_MIN_NS;
  int chan = -1;
  floe_code rc;
  pthread_mutex_lock(&m->mu);
  /* The progress thread now progresses while idle and wakes us after each progress. */
  m->accepting++;
  wake(m);
  for (;;) {
    void *comm = NULL;
    rc = m->stop ? FLOE_CANCELLED : m->fns->accept(m->listen_comm, &comm);
    if (rc == FLOE_OK && (chan = add_chan(&m->recv_chans, &m->num_recv_chans, comm)) < 0) {
      m->fns->close_recv(comm);
      rc = FLOE_NO_MEMORY;
    }
    if (rc != FLOE_UNAVAILABLE) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > deadline.tv_sec ||
        (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)) {
      rc = FLOE_DEADLINE_EXCEEDED;
      break;
    }
    /* Woken by the progress thread, else our own nap ends and we progress once ourselves. */
    struct timespec t = until(&deadline, nap_ns);
    if (pthread_cond_timedwait(&m->accept_cv, &m->mu, &t) == ETIMEDOUT && m->fns->progress)
      m->fns->progress(m->ctx);
    if (nap_ns < ACCEPT_NAP_MAX_NS) nap_ns *= 2;
  }
  m->accepting--;
  if (rc == FLOE_OK) m->open_chans++;
  pthread_mutex_unlock(&m->mu);
  if (rc == FLOE_OK) return chan;
  if (rc == FLOE_DEADLINE_EXCEEDED)
    floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                    "transport \"%s\": no peer connected within %lld ms", m->tr->name,
                    (long long)timeout_ms);
  else
    transport_failed(st, m->tr, "accept", rc);
  return -1;
}

void floe__transport_close_channel(FloeTransportMgr *m, int chan, bool is_recv) {
  pthread_mutex_lock(&m->mu);
  void ***chans = is_recv ? &m->recv_chans : &m->send_chans;
  int num = is_recv ? m->num_recv_chans : m->num_send_chans;
  if (chan <= 0 || chan >= num || !(*chans)[chan]) {
    pthread_mutex_unlock(&m->mu);
    return;
  }
  /* Its requests end now: the transport frees them when the comm closes. */
  for (FloeXfer *x = m->pending, *next; x; x = next) {
    next = x->next;
    if (x->chan != chan || x->is_recv != is_recv) continue;
    if (is_recv && m->fns->cancel) m->fns->cancel(x->req);
    x->req = NULL;
    x->code = FLOE_CANCELLED;
    x->size = 0;
    list_remove(&m->pending, x);
    list_push(&m->completed, x);
  }
  if (is_recv)
    m->fns->close_recv((*chans)[chan]);
  else
    m->fns->close_send((*chans)[chan]);
  (*chans)[chan] = NULL;
  m->open_chans--;
  wake(m);
  pthread_mutex_unlock(&m->mu);
}

floe_code floe__transport_cancel(FloeTransportMgr *m, FloeXfer *x) {
  if (!m->fns->cancel) return FLOE_UNIMPLEMENTED;
  pthread_mutex_lock(&m->mu);
  floe_code rc = FLOE_UNAVAILABLE;
  if (x->req && x->is_recv && m->fns->cancel(x->req) == FLOE_OK) {
    x->req = NULL;
    x->code = FLOE_CANCELLED;
    x->size = 0;
    list_remove(&m->pending, x);
    list_push(&m->completed, x);
    wake(m);
    rc = FLOE_OK;
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}
