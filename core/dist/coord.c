/* SPDX-License-Identifier: Apache-2.0 */
/* coord.c - the coordination service (in the chief, on its rpc server) and each other task's
 * agent of it, after TensorFlow's coordination service: registration with an incarnation,
 * heartbeats and a watchdog, waiting for every task, errors fanned out to all, barriers and
 * a key-value store.
 *
 * The service keeps one slot per task of the spec, in spec order, under one mutex; one
 * condition variable (monotonic clock) wakes every waiter (registrations, barriers, keys,
 * errors, the free), and each waiter re-checks its own condition against its own deadline.
 * A request is answered for the task its connection proved to be, never for the task the
 * request names: the two must agree. Errors are recorded under the mutex and told to
 * on_error after it is released, so the callback may call back into the service. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dist.h"
#include "dist.pb-c.h"

#define DEFAULT_INTERVAL_MS 1000
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_REGISTER_MS 60000
#define NAME_MAX_LEN (FLOE__JOB_NAME_MAX + 32)
#define MISSING_NAMED 8 /* tasks named in a "did not arrive" message; the rest counted */

static const uint16_t k_types[] = {FLOE__WIRE_REGISTER_TASK, FLOE__WIRE_HEARTBEAT,
                                   FLOE__WIRE_WAIT_FOR_ALL_TASKS, FLOE__WIRE_REPORT_ERROR,
                                   FLOE__WIRE_BARRIER, FLOE__WIRE_KV_INSERT, FLOE__WIRE_KV_GET};

void floe__coord_infos_clear(FloeCoordInfos *infos) {
  if (!infos) return;
  for (int i = 0; i < infos->n; i++)
    if (infos->infos) floe__wire_free(&infos->infos[i]->base);
  floe__free(infos->infos);
  infos->infos = NULL;
  infos->n = 0;
}

static floe_code copy_info(const Floe__Dist__TaskInfo *in, Floe__Dist__TaskInfo **out,
                           FloeStatus *st) {
  struct ProtobufCMessage *m = NULL;
  floe_code rc = floe__wire_copy(&in->base, &m, st);
  *out = (Floe__Dist__TaskInfo *)m;
  return rc;
}

static int64_t deadline_after(int64_t timeout_ms) {
  return timeout_ms < 0 ? INT64_MAX : floe__dist_now_ms() + timeout_ms;
}

/* ------------------------------------------------------------------------------------ */
/* The service's state */

typedef struct TaskSlot {
  const char *job;                 /* borrowed from the spec */
  int task;
  char name[NAME_MAX_LEN];         /* "/job:worker/task:1" */
  bool registered;
  uint64_t incarnation;
  Floe__Dist__TaskInfo *info;      /* owned (floe__wire_free) */
  int64_t last_seen_ms;            /* its registration or last heartbeat */
  int64_t registered_ms;           /* when this incarnation registered */
  bool silent;                     /* the watchdog reported this incarnation */
} TaskSlot;

typedef struct Barrier {
  char *id;
  bool *member, *arrived;          /* per slot */
  bool done;
  FloeStatus result;
  uint64_t order;                  /* creation order, for eviction */
  int waiters;
} Barrier;

typedef struct KvEntry {
  char *key;
  uint8_t *value;
  size_t len;
} KvEntry;

struct FloeCoordService {
  const FloeClusterSpec *spec;
  int heartbeat_timeout_ms, heartbeat_interval_ms;
  FloeRpcServer *server;
  FloeCoordErrorFn on_error;
  void *err_arg;
  int n;                           /* slots: spec->num_tasks */
  int self;                        /* the chief's slot */
  uint64_t leader_incarnation;
  pthread_t watchdog;
  pthread_mutex_t mu;
  pthread_cond_t cv;               /* any change a waiter may be waiting for */
  bool stopping;
  TaskSlot *slots;
  FloeStatus error;                /* the first error of the cluster (code OK: none) */
  int64_t error_ms;                /* when it was recorded */
  Barrier **barriers;
  int n_barriers;
  uint64_t barrier_order;
  KvEntry *kv;
  int n_kv;
  size_t kv_bytes;
};

/* The slot of job/task, or -1. */
static int slot_of(const FloeCoordService *c, const char *job, int task) {
  for (int i = 0; i < c->n; i++)
    if (c->slots[i].task == task && strcmp(c->slots[i].job, job) == 0) return i;
  return -1;
}

static char *id_str(const char *job, int task, uint64_t inc, char *buf, size_t cap) {
  snprintf(buf, cap, "/job:%s/task:%d (incarnation %016" PRIx64 ")", job, task, inc);
  return buf;
}

/* Keeps the cluster's first error, wakes every waiter and tells on_error. No lock held. */
static void record_error(FloeCoordService *c, floe_code code, const char *msg) {
  pthread_mutex_lock(&c->mu);
  if (c->error.code == FLOE_OK) {
    floe_status_set(&c->error, code, "%s", msg);
    c->error_ms = floe__dist_now_ms();
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->on_error) c->on_error(c->err_arg, code, msg);
}

/* The caller of a request: its proven identity (peer) must be a task of the spec, and the
 * task the request names (claimed; NULL for requests that name none) must be that task.
 * With need_registered, it must be registered under that incarnation. Under c->mu. */
static floe_code check_caller(FloeCoordService *c, const FloeTaskIdentity *peer,
                              const Floe__Dist__TaskId *claimed, bool has_claim,
                              bool need_registered, int *slot, FloeStatus *st) {
  char who[128], what[128];
  id_str(peer->job, peer->task, peer->incarnation, who, sizeof who);
  int i = slot_of(c, peer->job, peer->task);
  if (i < 0)
    return floe_status_set(st, FLOE_NOT_FOUND,
                           "%s is not a task of the cluster (%s): refused", who,
                           c->spec->source ? c->spec->source : "the spec");
  if (has_claim) {
    if (!claimed || !claimed->job)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: the request names no task",
                             who);
    if (strcmp(claimed->job, peer->job) != 0 || claimed->task != peer->task ||
        claimed->incarnation != peer->incarnation)
      return floe_status_set(st, FLOE_PERMISSION_DENIED,
                             "a connection proven as %s speaks for %s: refused (a task may "
                             "speak only for itself)",
                             who, id_str(claimed->job, claimed->task, claimed->incarnation,
                                         what, sizeof what));
  }
  if (i == c->self && peer->incarnation != c->slots[i].incarnation)
    return floe_status_set(st, FLOE_PERMISSION_DENIED,
                           "%s claims the chief's own task, which this service is: refused",
                           who);
  if (need_registered) {
    const TaskSlot *t = &c->slots[i];
    if (!t->registered)
      return floe_status_set(st, FLOE_FAILED_PRECONDITION, "%s has not registered", who);
    if (t->incarnation != peer->incarnation)
      return floe_status_set(st, FLOE_ABORTED,
                             "%s is not the registered incarnation of its task (%016" PRIx64
                             "): it was replaced by a restart",
                             who, t->incarnation);
  }
  *slot = i;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Registration, heartbeats, the watchdog */

/* Registers (or re-registers) slot i with info (task set). Under c->mu; *restart gets the
 * ABORTED message when a new incarnation replaced a registered one ("" otherwise). */
static floe_code register_locked(FloeCoordService *c, int i, const Floe__Dist__TaskInfo *info,
                                 char *restart, size_t cap, FloeStatus *st) {
  TaskSlot *t = &c->slots[i];
  uint64_t inc = info->task->incarnation;
  restart[0] = '\0';
  Floe__Dist__TaskInfo *copy = NULL;
  floe_code rc = copy_info(info, &copy, st);
  if (rc != FLOE_OK) return rc;
  if (t->registered && t->incarnation != inc)
    snprintf(restart, cap,
             "%s restarted: incarnation %016" PRIx64 " was replaced by %016" PRIx64
             " (the old one's work is lost)",
             t->name, t->incarnation, inc);
  if (t->info) floe__wire_free(&t->info->base);
  t->info = copy;
  if (!t->registered || t->incarnation != inc) {
    t->silent = false;
    t->registered_ms = floe__dist_now_ms();
  }
  t->registered = true;
  t->incarnation = inc;
  t->last_seen_ms = floe__dist_now_ms();
  /* Every task registered and none silent: the cluster is whole again, and new work (a new
   * session, a barrier) may start; what failed before stays failed for those who saw it. */
  bool whole = true;
  for (int k = 0; k < c->n && whole; k++) whole = c->slots[k].registered && !c->slots[k].silent;
  if (whole) floe_status_clear(&c->error);
  pthread_cond_broadcast(&c->cv);
  return FLOE_OK;
}

static void *watchdog_main(void *arg) {
  FloeCoordService *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping) {
    int64_t now = floe__dist_now_ms();
    int64_t next = now + c->heartbeat_timeout_ms;
    int found = -1;
    int64_t silent_ms = 0;
    for (int i = 0; i < c->n && found < 0; i++) {
      TaskSlot *t = &c->slots[i];
      if (i == c->self || !t->registered || t->silent) continue;
      int64_t due = t->last_seen_ms + c->heartbeat_timeout_ms;
      if (now > due) {
        t->silent = true;
        found = i;
        silent_ms = now - t->last_seen_ms;
      } else if (due + 1 < next) {
        next = due + 1;
      }
    }
    if (found >= 0) {
      char msg[512], who[128];
      TaskSlot *t = &c->slots[found];
      snprintf(msg, sizeof msg,
               "%s sent no heartbeat for %" PRId64 " ms (heartbeat timeout %d ms): the task "
               "is down, stalled or cut off",
               id_str(t->job, t->task, t->incarnation, who, sizeof who), silent_ms,
               c->heartbeat_timeout_ms);
      pthread_mutex_unlock(&c->mu);
      record_error(c, FLOE_UNAVAILABLE, msg);
      pthread_mutex_lock(&c->mu);
      continue; /* look again at once: another may be silent too */
    }
    floe__dist_cond_wait_until(&c->cv, &c->mu, next);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Waiting for every task */

/* Names the first tasks matching missing() into buf. */
static void name_tasks(const FloeCoordService *c, const bool *pick, char *buf, size_t cap) {
  size_t len = 0;
  int shown = 0, more = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->n; i++) {
    if (!pick[i]) continue;
    if (shown == MISSING_NAMED) {
      more++;
      continue;
    }
    int w = snprintf(buf + len, cap - len, "%s%s", shown ? ", " : "", c->slots[i].name);
    if (w > 0 && (size_t)w < cap - len) len += (size_t)w;
    shown++;
  }
  if (more) snprintf(buf + len, cap - len, " and %d more", more);
}

static floe_code stopping_error(FloeStatus *st) {
  return floe_status_set(st, FLOE_UNAVAILABLE, "the coordination service is shutting down");
}

/* Waits (under c->mu) until every slot is registered, then copies the infos into *out. */
static floe_code wait_all_locked(FloeCoordService *c, int64_t timeout_ms, FloeCoordInfos *out,
                                 FloeStatus *st) {
  int64_t deadline = deadline_after(timeout_ms);
  for (;;) {
    if (c->stopping) return stopping_error(st);
    /* A task lost (and not back under a new incarnation) fails the wait; an error the
     * cluster recovered from does not. */
    for (int i = 0; i < c->n; i++)
      if (c->slots[i].registered && c->slots[i].silent)
        return floe_status_set(st, FLOE_UNAVAILABLE, "waiting for every task: %s is lost: %s",
                               c->slots[i].name, c->error.code ? floe_status_message(&c->error)
                                                               : "it stopped heartbeating");
    int missing = 0;
    for (int i = 0; i < c->n; i++) missing += !c->slots[i].registered;
    if (!missing) break;
    if (!floe__dist_cond_wait_until(&c->cv, &c->mu, deadline)) {
      bool *pick = floe__calloc((size_t)c->n, sizeof *pick);
      char names[1024] = "";
      if (pick) {
        for (int i = 0; i < c->n; i++) pick[i] = !c->slots[i].registered;
        name_tasks(c, pick, names, sizeof names);
        floe__free(pick);
      }
      return floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                             "%d of %d tasks did not register within %" PRId64 " ms: %s",
                             missing, c->n, timeout_ms, names);
    }
  }
  out->infos = floe__calloc((size_t)c->n, sizeof *out->infos);
  if (!out->infos) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for task infos");
  for (int i = 0; i < c->n; i++) {
    floe_code rc = copy_info(c->slots[i].info, &out->infos[i], st);
    if (rc != FLOE_OK) {
      out->n = i;
      floe__coord_infos_clear(out);
      return rc;
    }
  }
  out->n = c->n;
  return FLOE_OK;
}

floe_code floe__coord_service_wait_all(FloeCoordService *c, int64_t timeout_ms,
                                       FloeCoordInfos *out, FloeStatus *st) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&c->mu);
  floe_code rc = wait_all_locked(c, timeout_ms, out, st);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Barriers */

static void barrier_free(Barrier *b) {
  if (!b) return;
  floe__free(b->id);
  floe__free(b->member);
  floe__free(b->arrived);
  floe_status_clear(&b->result);
  floe__free(b);
}

/* Room for one more barrier: evicts the oldest finished one nobody waits on. Under c->mu. */
static floe_code barrier_room(FloeCoordService *c, FloeStatus *st) {
  if (c->n_barriers < FLOE__COORD_MAX_BARRIERS) return FLOE_OK;
  int oldest = -1;
  for (int i = 0; i < c->n_barriers; i++) {
    Barrier *b = c->barriers[i];
    if (b->done && b->waiters == 0 &&
        (oldest < 0 || b->order < c->barriers[oldest]->order))
      oldest = i;
  }
  if (oldest < 0)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "%d barriers are pending at once, the most allowed "
                           "(FLOE__COORD_MAX_BARRIERS)",
                           FLOE__COORD_MAX_BARRIERS);
  barrier_free(c->barriers[oldest]);
  c->barriers[oldest] = c->barriers[--c->n_barriers];
  return FLOE_OK;
}

/* Slot i arrives at barrier id whose members are picked (n slots). Under c->mu. */
static floe_code barrier_locked(FloeCoordService *c, int i, const char *id, int64_t timeout_ms,
                                const bool *pick, FloeStatus *st) {
  Barrier *b = NULL;
  for (int k = 0; k < c->n_barriers && !b; k++)
    if (strcmp(c->barriers[k]->id, id) == 0) b = c->barriers[k];
  if (b) {
    if (memcmp(b->member, pick, (size_t)c->n * sizeof *pick) != 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "barrier \"%s\": %s names other tasks than the barrier's first "
                             "caller did",
                             id, c->slots[i].name);
  } else {
    floe_code rc = barrier_room(c, st);
    if (rc != FLOE_OK) return rc;
    b = floe__calloc(1, sizeof *b);
    if (b) {
      b->id = floe__strdup(id);
      b->member = floe__calloc((size_t)c->n, sizeof *b->member);
      b->arrived = floe__calloc((size_t)c->n, sizeof *b->arrived);
    }
    if (!b || !b->id || !b->member || !b->arrived) {
      barrier_free(b);
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for barrier \"%s\"", id);
    }
    memcpy(b->member, pick, (size_t)c->n * sizeof *pick);
    b->order = c->barrier_order++;
    c->barriers[c->n_barriers++] = b;
  }
  if (!b->member[i])
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "barrier \"%s\": %s is not among its tasks", id, c->slots[i].name);
  if (!b->done) {
    b->arrived[i] = true;
    bool all = true;
    for (int k = 0; k < c->n; k++) all &= !b->member[k] || b->arrived[k];
    if (all) {
      b->done = true;
      pthread_cond_broadcast(&c->cv);
    }
  }
  int64_t deadline = deadline_after(timeout_ms);
  b->waiters++;
  while (!b->done && !c->stopping) {
    if (c->error.code != FLOE_OK) {
      b->done = true;
      floe_status_set(&b->result, c->error.code, "barrier \"%s\" failed: the cluster failed: %s",
                      id, floe_status_message(&c->error));
      pthread_cond_broadcast(&c->cv);
      break;
    }
    if (!floe__dist_cond_wait_until(&c->cv, &c->mu, deadline)) {
      bool *missing = floe__calloc((size_t)c->n, sizeof *missing);
      char names[1024] = "(out of memory naming them)";
      if (missing) {
        for (int k = 0; k < c->n; k++) missing[k] = b->member[k] && !b->arrived[k];
        name_tasks(c, missing, names, sizeof names);
        floe__free(missing);
      }
      b->done = true;
      floe_status_set(&b->result, FLOE_DEADLINE_EXCEEDED,
                      "barrier \"%s\" timed out after %" PRId64 " ms (%s's wait): %s did not "
                      "arrive",
                      id, timeout_ms, c->slots[i].name, names);
      pthread_cond_broadcast(&c->cv);
    }
  }
  b->waiters--;
  if (!b->done) return stopping_error(st);
  if (b->result.code == FLOE_OK) return FLOE_OK;
  return floe__status_copy(st, &b->result);
}

static floe_code check_barrier_id(const char *id, FloeStatus *st) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "a barrier needs an id");
  if (n > FLOE__COORD_MAX_BARRIER_ID)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "a barrier id of %zu bytes is longer than FLOE__COORD_MAX_BARRIER_ID "
                           "(%d)",
                           n, FLOE__COORD_MAX_BARRIER_ID);
  return FLOE_OK;
}

/* The members of a barrier as picked slots: the named tasks (job, task), or all. */
typedef struct NamedTask {
  const char *job;
  int task;
} NamedTask;

static floe_code barrier_pick(FloeCoordService *c, const NamedTask *tasks, int n_tasks,
                              bool *pick, FloeStatus *st) {
  for (int i = 0; i < c->n; i++) pick[i] = n_tasks == 0;
  for (int k = 0; k < n_tasks; k++) {
    int i = tasks[k].job ? slot_of(c, tasks[k].job, tasks[k].task) : -1;
    if (i < 0)
      return floe_status_set(st, FLOE_NOT_FOUND,
                             "a barrier names /job:%s/task:%d, which is not a task of the "
                             "cluster",
                             tasks[k].job ? tasks[k].job : "(none)", tasks[k].task);
    pick[i] = true;
  }
  return FLOE_OK;
}

/* A barrier for slot i: checks, picks and waits. Takes c->mu. */
static floe_code barrier(FloeCoordService *c, int i, const char *id, int64_t timeout_ms,
                         const NamedTask *tasks, int n_tasks, FloeStatus *st) {
  floe_code rc = check_barrier_id(id, st);
  if (rc != FLOE_OK) return rc;
  bool *pick = floe__calloc((size_t)c->n, sizeof *pick);
  if (!pick) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for barrier \"%s\"", id);
  pthread_mutex_lock(&c->mu);
  rc = barrier_pick(c, tasks, n_tasks, pick, st);
  if (rc == FLOE_OK) rc = barrier_locked(c, i, id, timeout_ms, pick, st);
  pthread_mutex_unlock(&c->mu);
  floe__free(pick);
  return rc;
}

floe_code floe__coord_service_barrier(FloeCoordService *c, const char *id, int64_t timeout_ms,
                                      const FloeTaskIdentity *tasks, int n_tasks,
                                      FloeStatus *st) {
  NamedTask *named = NULL;
  if (n_tasks > 0 && tasks) {
    named = floe__calloc((size_t)n_tasks, sizeof *named);
    if (!named) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a barrier");
    for (int k = 0; k < n_tasks; k++) named[k] = (NamedTask){tasks[k].job, tasks[k].task};
  }
  floe_code rc = barrier(c, c->self, id, timeout_ms, named, named ? n_tasks : 0, st);
  floe__free(named);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* The key-value store */

static int kv_find(const FloeCoordService *c, const char *key) {
  for (int i = 0; i < c->n_kv; i++)
    if (strcmp(c->kv[i].key, key) == 0) return i;
  return -1;
}

static floe_code check_key(const char *key, FloeStatus *st) {
  size_t n = key ? strlen(key) : 0;
  if (n == 0) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "a key-value key is empty");
  if (n > FLOE__COORD_MAX_KEY)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "a key of %zu bytes is longer than FLOE__COORD_MAX_KEY (%d)", n,
                           FLOE__COORD_MAX_KEY);
  return FLOE_OK;
}

floe_code floe__coord_service_kv_insert(FloeCoordService *c, const char *key, const void *value,
                                        size_t len, bool allow_overwrite, FloeStatus *st) {
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  if (len > FLOE__COORD_MAX_VALUE)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "the value of key \"%s\" has %zu bytes, more than "
                           "FLOE__COORD_MAX_VALUE (%u)",
                           key, len, FLOE__COORD_MAX_VALUE);
  uint8_t *copy = floe__malloc(len + 1);
  if (!copy) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for key \"%s\"", key);
  if (len) memcpy(copy, value, len);
  copy[len] = 0;
  size_t klen = strlen(key);
  pthread_mutex_lock(&c->mu);
  int i = kv_find(c, key);
  size_t bytes = c->kv_bytes + len + (i < 0 ? klen : 0) - (i >= 0 ? c->kv[i].len : 0);
  if (i >= 0 && !allow_overwrite) {
    rc = floe_status_set(st, FLOE_ALREADY_EXISTS,
                         "key \"%s\" is already in the store (insert with allow_overwrite to "
                         "replace it)",
                         key);
  } else if (i < 0 && c->n_kv >= FLOE__COORD_MAX_KEYS) {
    rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "the store holds %d keys, the most allowed (FLOE__COORD_MAX_KEYS): "
                         "key \"%s\" refused",
                         c->n_kv, key);
  } else if (bytes > FLOE__COORD_MAX_KV_BYTES) {
    rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "key \"%s\" would bring the store to %zu bytes, more than "
                         "FLOE__COORD_MAX_KV_BYTES (%u)",
                         key, bytes, FLOE__COORD_MAX_KV_BYTES);
  } else if (i >= 0) {
    floe__free(c->kv[i].value);
    c->kv[i].value = copy;
    c->kv[i].len = len;
    copy = NULL;
  } else {
    char *k = floe__strdup(key);
    KvEntry *grown = k ? floe__realloc(c->kv, (size_t)(c->n_kv + 1) * sizeof *grown) : NULL;
    if (!grown) {
      floe__free(k);
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory for key \"%s\"", key);
    } else {
      c->kv = grown;
      c->kv[c->n_kv++] = (KvEntry){k, copy, len};
      copy = NULL;
    }
  }
  if (rc == FLOE_OK) {
    c->kv_bytes = bytes;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  floe__free(copy);
  return rc;
}

floe_code floe__coord_service_kv_erase(FloeCoordService *c, const char *key, FloeStatus *st) {
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  pthread_mutex_lock(&c->mu);
  int i = kv_find(c, key);
  if (i >= 0) {
    c->kv_bytes -= strlen(c->kv[i].key) + c->kv[i].len;
    floe__free(c->kv[i].key);
    floe__free(c->kv[i].value);
    c->kv[i] = c->kv[--c->n_kv];
  }
  pthread_mutex_unlock(&c->mu);
  return FLOE_OK;
}

floe_code floe__coord_service_kv_get(FloeCoordService *c, const char *key, int64_t timeout_ms,
                                     void **value, size_t *len, FloeStatus *st) {
  *value = NULL;
  *len = 0;
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  int64_t deadline = deadline_after(timeout_ms);
  pthread_mutex_lock(&c->mu);
  int i;
  while ((i = kv_find(c, key)) < 0) {
    if (c->stopping) {
      rc = stopping_error(st);
      break;
    }
    if (!floe__dist_cond_wait_until(&c->cv, &c->mu, deadline)) {
      rc = timeout_ms == 0
               ? floe_status_set(st, FLOE_NOT_FOUND, "key \"%s\" is not in the store", key)
               : floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                                 "key \"%s\" was not inserted within %" PRId64 " ms", key,
                                 timeout_ms);
      break;
    }
  }
  if (i >= 0) {
    uint8_t *v = floe__malloc(c->kv[i].len + 1);
    if (!v) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory for the value of key \"%s\"", key);
    } else {
      memcpy(v, c->kv[i].value, c->kv[i].len + 1);
      *value = v;
      *len = c->kv[i].len;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Errors */

floe_code floe__coord_service_error(FloeCoordService *c, FloeStatus *st) {
  pthread_mutex_lock(&c->mu);
  floe_code rc = c->error.code;
  if (rc != FLOE_OK) floe__status_copy(st, &c->error);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void floe__coord_service_report(FloeCoordService *c, floe_code code, const char *msg) {
  record_error(c, code == FLOE_OK ? FLOE_UNKNOWN : code, msg ? msg : "(no message)");
}

static bool code_valid(int32_t code) {
  switch (code) {
#define COORD_CODE_CASE(name, value, msg) case value:
    FLOE_CODE_MAP(COORD_CODE_CASE)
#undef COORD_CODE_CASE
    return code != FLOE_OK;
  default:
    return false;
  }
}

static floe_code check_report(floe_code code, const char *msg, FloeStatus *st) {
  if (!code_valid((int32_t)code))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "an error report needs an error code (not OK, one this build "
                           "knows), not %d",
                           (int)code);
  size_t n = msg ? strlen(msg) : 0;
  if (n > FLOE__COORD_MAX_MESSAGE)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "an error report's message of %zu bytes is longer than "
                           "FLOE__COORD_MAX_MESSAGE (%d)",
                           n, FLOE__COORD_MAX_MESSAGE);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Handlers */

/* Sends a response whose only field of note is its status (field 1 of every response). */
static floe_code respond(FloeConn *conn, uint16_t type, struct ProtobufCMessage *resp,
                         Floe__Dist__Status **status_field, const FloeStatus *outcome,
                         FloeStatus *st) {
  Floe__Dist__Status s;
  floe__status_to_proto(outcome, &s);
  *status_field = &s;
  floe_code rc = floe__conn_send(conn, type, resp, 0, st);
  *status_field = NULL;
  return rc;
}

static floe_code on_register(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                             const Floe__Dist__RegisterTaskRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  char restart[512] = "";
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = c->stopping ? stopping_error(&out)
                             : check_caller(c, peer, q->task, true, false, &i, &out);
  if (rc == FLOE_OK && i == c->self)
    rc = floe_status_set(&out, FLOE_PERMISSION_DENIED,
                         "%s is the chief's own task, registered by the service itself",
                         c->slots[i].name);
  if (rc == FLOE_OK) {
    Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
    if (q->info) info = *q->info;
    info.task = q->task; /* the proven task, whatever the info says */
    rc = register_locked(c, i, &info, restart, sizeof restart, &out);
  }
  pthread_mutex_unlock(&c->mu);
  /* A restart is told to the chief's sessions (their state on the old incarnation is gone)
   * but is no error of the cluster's: the task is back. */
  if (restart[0] && c->on_error) c->on_error(c->err_arg, FLOE_ABORTED, restart);
  Floe__Dist__RegisterTaskResponse r = FLOE__DIST__REGISTER_TASK_RESPONSE__INIT;
  r.leader_incarnation = c->leader_incarnation;
  r.heartbeat_interval_ms = c->heartbeat_interval_ms;
  r.heartbeat_timeout_ms = c->heartbeat_timeout_ms;
  rc = respond(conn, FLOE__WIRE_REGISTER_TASK_RESPONSE, &r.base, &r.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_heartbeat(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                              const Floe__Dist__HeartbeatRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL}, err = {FLOE_OK, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = c->stopping ? stopping_error(&out)
                             : check_caller(c, peer, q->task, true, true, &i, &out);
  if (rc == FLOE_OK) c->slots[i].last_seen_ms = floe__dist_now_ms();
  /* An error from before this incarnation registered is not news to it (it registered
   * after its chief's loss, say): only newer ones are sent. */
  if (rc == FLOE_OK && c->error_ms >= c->slots[i].registered_ms) floe__status_copy(&err, &c->error);
  pthread_mutex_unlock(&c->mu);
  Floe__Dist__Status cluster;
  floe__status_to_proto(&err, &cluster);
  Floe__Dist__HeartbeatResponse r = FLOE__DIST__HEARTBEAT_RESPONSE__INIT;
  r.leader_incarnation = c->leader_incarnation;
  r.cluster_error = &cluster;
  rc = respond(conn, FLOE__WIRE_HEARTBEAT_RESPONSE, &r.base, &r.status, &out, st);
  floe_status_clear(&out);
  floe_status_clear(&err);
  return rc;
}

static floe_code on_wait_all(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                             const Floe__Dist__WaitForAllTasksRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  FloeCoordInfos infos = {0, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = check_caller(c, peer, q->task, true, true, &i, &out);
  if (rc == FLOE_OK) rc = wait_all_locked(c, q->timeout_ms, &infos, &out);
  pthread_mutex_unlock(&c->mu);
  Floe__Dist__TaskId *ids = infos.n ? floe__calloc((size_t)infos.n, sizeof *ids) : NULL;
  Floe__Dist__TaskId **idp = infos.n ? floe__calloc((size_t)infos.n, sizeof *idp) : NULL;
  Floe__Dist__WaitForAllTasksResponse r = FLOE__DIST__WAIT_FOR_ALL_TASKS_RESPONSE__INIT;
  if (rc == FLOE_OK && infos.n && (!ids || !idp)) {
    rc = floe_status_set(&out, FLOE_NO_MEMORY, "out of memory answering WAIT_FOR_ALL_TASKS");
  } else if (rc == FLOE_OK) {
    for (int k = 0; k < infos.n; k++) {
      ids[k] = *infos.infos[k]->task;
      idp[k] = &ids[k];
    }
    r.n_tasks = r.n_infos = (size_t)infos.n;
    r.tasks = idp;
    r.infos = infos.infos;
  }
  rc = respond(conn, FLOE__WIRE_WAIT_FOR_ALL_TASKS_RESPONSE, &r.base, &r.status, &out, st);
  floe__free(ids);
  floe__free(idp);
  floe__coord_infos_clear(&infos);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_report(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                           const Floe__Dist__ReportErrorRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = check_caller(c, peer, q->task, true, true, &i, &out);
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK) rc = check_report((floe_code)q->code, q->message, &out);
  if (rc == FLOE_OK) {
    char who[128];
    char *msg = floe__asprintf("%s reported: %s",
                               id_str(peer->job, peer->task, peer->incarnation, who, sizeof who),
                               q->message && q->message[0] ? q->message : "(no message)");
    if (!msg) rc = floe_status_set(&out, FLOE_NO_MEMORY, "out of memory for an error report");
    else record_error(c, (floe_code)q->code, msg);
    floe__free(msg);
  }
  Floe__Dist__ReportErrorResponse r = FLOE__DIST__REPORT_ERROR_RESPONSE__INIT;
  rc = respond(conn, FLOE__WIRE_REPORT_ERROR_RESPONSE, &r.base, &r.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_barrier(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                            const Floe__Dist__BarrierRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = check_caller(c, peer, q->task, true, true, &i, &out);
  pthread_mutex_unlock(&c->mu);
  NamedTask *named = NULL;
  if (rc == FLOE_OK && q->n_tasks > (size_t)c->n)
    rc = floe_status_set(&out, FLOE_INVALID_ARGUMENT,
                         "barrier \"%s\" names %zu tasks; the cluster has %d", q->id, q->n_tasks,
                         c->n);
  if (rc == FLOE_OK && q->n_tasks) {
    named = floe__calloc(q->n_tasks, sizeof *named);
    if (!named) rc = floe_status_set(&out, FLOE_NO_MEMORY, "out of memory for a barrier");
    for (size_t k = 0; named && k < q->n_tasks; k++)
      named[k] = (NamedTask){q->tasks[k] ? q->tasks[k]->job : NULL,
                             q->tasks[k] ? q->tasks[k]->task : 0};
  }
  if (rc == FLOE_OK) rc = barrier(c, i, q->id, q->timeout_ms, named, (int)q->n_tasks, &out);
  floe__free(named);
  Floe__Dist__BarrierResponse r = FLOE__DIST__BARRIER_RESPONSE__INIT;
  rc = respond(conn, FLOE__WIRE_BARRIER_RESPONSE, &r.base, &r.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_kv_insert(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                              const Floe__Dist__KvInsertRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = check_caller(c, peer, NULL, false, true, &i, &out);
  pthread_mutex_unlock(&c->mu);
  if (rc == FLOE_OK && q->erase)
    floe__coord_service_kv_erase(c, q->key, &out);
  else if (rc == FLOE_OK)
    floe__coord_service_kv_insert(c, q->key, q->value.data, q->value.len, q->allow_overwrite,
                                  &out);
  Floe__Dist__KvInsertResponse r = FLOE__DIST__KV_INSERT_RESPONSE__INIT;
  rc = respond(conn, FLOE__WIRE_KV_INSERT_RESPONSE, &r.base, &r.status, &out, st);
  floe_status_clear(&out);
  return rc;
}

static floe_code on_kv_get(FloeCoordService *c, FloeConn *conn, const FloeTaskIdentity *peer,
                           const Floe__Dist__KvGetRequest *q, FloeStatus *st) {
  FloeStatus out = {FLOE_OK, NULL};
  pthread_mutex_lock(&c->mu);
  int i = -1;
  floe_code rc = check_caller(c, peer, NULL, false, true, &i, &out);
  pthread_mutex_unlock(&c->mu);
  void *value = NULL;
  size_t len = 0;
  if (rc == FLOE_OK) floe__coord_service_kv_get(c, q->key, q->timeout_ms, &value, &len, &out);
  Floe__Dist__KvGetResponse r = FLOE__DIST__KV_GET_RESPONSE__INIT;
  r.value.data = value;
  r.value.len = len;
  rc = respond(conn, FLOE__WIRE_KV_GET_RESPONSE, &r.base, &r.status, &out, st);
  floe__free(value);
  floe_status_clear(&out);
  return rc;
}

static floe_code coord_handle(void *arg, FloeConn *conn, const FloeTaskIdentity *peer,
                              uint16_t type, const struct ProtobufCMessage *req, FloeStatus *st) {
  FloeCoordService *c = arg;
  switch (type) {
  case FLOE__WIRE_REGISTER_TASK:
    return on_register(c, conn, peer, (const Floe__Dist__RegisterTaskRequest *)req, st);
  case FLOE__WIRE_HEARTBEAT:
    return on_heartbeat(c, conn, peer, (const Floe__Dist__HeartbeatRequest *)req, st);
  case FLOE__WIRE_WAIT_FOR_ALL_TASKS:
    return on_wait_all(c, conn, peer, (const Floe__Dist__WaitForAllTasksRequest *)req, st);
  case FLOE__WIRE_REPORT_ERROR:
    return on_report(c, conn, peer, (const Floe__Dist__ReportErrorRequest *)req, st);
  case FLOE__WIRE_BARRIER:
    return on_barrier(c, conn, peer, (const Floe__Dist__BarrierRequest *)req, st);
  case FLOE__WIRE_KV_INSERT:
    return on_kv_insert(c, conn, peer, (const Floe__Dist__KvInsertRequest *)req, st);
  case FLOE__WIRE_KV_GET:
    return on_kv_get(c, conn, peer, (const Floe__Dist__KvGetRequest *)req, st);
  default:
    return floe_status_set(st, FLOE_INTERNAL, "the coordination service got a %s request",
                           floe__wire_type_name(type));
  }
}

/* ------------------------------------------------------------------------------------ */
/* The service's life */

floe_code floe__coord_service_start(const FloeClusterSpec *spec, const FloeCoordOptions *o,
                                    const Floe__Dist__TaskInfo *self_info,
                                    FloeRpcServer *server, FloeCoordErrorFn on_error,
                                    void *err_arg, FloeCoordService **out, FloeStatus *st) {
  *out = NULL;
  if (spec->self.job < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "coordination service: the cluster spec (%s) names no task for this "
                           "process (the chief)",
                           spec->source ? spec->source : "?");
  if (!self_info || !self_info->task)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "coordination service: the chief's TaskInfo names no task");
  FloeCoordService *c = floe__calloc(1, sizeof *c);
  if (!c) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for the coordination service");
  c->spec = spec;
  c->heartbeat_interval_ms = o && o->heartbeat_interval_ms > 0 ? o->heartbeat_interval_ms
                                                               : DEFAULT_INTERVAL_MS;
  c->heartbeat_timeout_ms = o && o->heartbeat_timeout_ms > 0 ? o->heartbeat_timeout_ms
                                                             : DEFAULT_TIMEOUT_MS;
  c->server = server;
  c->on_error = on_error;
  c->err_arg = err_arg;
  c->n = spec->num_tasks;
  c->leader_incarnation = self_info->task->incarnation;
  c->slots = floe__calloc((size_t)c->n, sizeof *c->slots);
  c->barriers = floe__calloc(FLOE__COORD_MAX_BARRIERS, sizeof *c->barriers);
  if (!c->slots || !c->barriers) {
    floe__free(c->slots);
    floe__free(c->barriers);
    floe__free(c);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for the coordination service");
  }
  for (int j = 0, i = 0; j < spec->num_jobs; j++)
    for (int t = 0; t < spec->jobs[j].num_tasks; t++, i++) {
      c->slots[i].job = spec->jobs[j].name;
      c->slots[i].task = t;
      snprintf(c->slots[i].name, sizeof c->slots[i].name, "/job:%s/task:%d",
               spec->jobs[j].name, t);
      if (j == spec->self.job && t == spec->self.task) c->self = i;
    }
  pthread_mutex_init(&c->mu, NULL);
  floe__dist_cond_init(&c->cv);
  Floe__Dist__TaskId self_id = *self_info->task;
  self_id.job = (char *)c->slots[c->self].job;
  self_id.task = c->slots[c->self].task;
  Floe__Dist__TaskInfo info = *self_info;
  info.task = &self_id;
  char ignored[8];
  floe_code rc = register_locked(c, c->self, &info, ignored, sizeof ignored, st);
  if (rc == FLOE_OK && pthread_create(&c->watchdog, NULL, watchdog_main, c) != 0)
    rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "coordination service: cannot start its watchdog thread");
  if (rc != FLOE_OK) {
    if (c->slots[c->self].info) floe__wire_free(&c->slots[c->self].info->base);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    floe__free(c->slots);
    floe__free(c->barriers);
    floe__free(c);
    return rc;
  }
  for (size_t k = 0; k < FLOE__ARRAY_LEN(k_types); k++)
    floe__rpc_server_handle(server, k_types[k], coord_handle, c);
  *out = c;
  return FLOE_OK;
}

void floe__coord_service_free(FloeCoordService *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stopping = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  /* Each removal waits out that type's calls in progress, woken above. */
  for (size_t k = 0; k < FLOE__ARRAY_LEN(k_types); k++)
    floe__rpc_server_handle(c->server, k_types[k], NULL, NULL);
  pthread_join(c->watchdog, NULL);
  for (int i = 0; i < c->n; i++)
    if (c->slots[i].info) floe__wire_free(&c->slots[i].info->base);
  for (int i = 0; i < c->n_barriers; i++) barrier_free(c->barriers[i]);
  for (int i = 0; i < c->n_kv; i++) {
    floe__free(c->kv[i].key);
    floe__free(c->kv[i].value);
  }
  floe__free(c->kv);
  floe__free(c->barriers);
  floe__free(c->slots);
  floe_status_clear(&c->error);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  floe__free(c);
}

/* ------------------------------------------------------------------------------------ */
/* The agent */

struct FloeCoordAgent {
  FloeConnPool *pool;
  FloeTaskIdentity self;
  int heartbeat_interval_ms, heartbeat_timeout_ms;
  int slack_ms;                    /* a call's time beyond what the request waits */
  uint64_t leader_incarnation;
  FloeCoordErrorFn on_error;
  void *err_arg;
  pthread_t heartbeat;
  pthread_mutex_t mu;
  pthread_cond_t cv;               /* stopping */
  bool stopping, told;           /* told: the chief lost was reported */
  char *told_cluster;            /* the last cluster error reported */
};

static Floe__Dist__TaskId agent_id(const FloeCoordAgent *a) {
  Floe__Dist__TaskId t = FLOE__DIST__TASK_ID__INIT;
  t.job = (char *)a->self.job;
  t.task = a->self.task;
  t.incarnation = a->self.incarnation;
  return t;
}

/* Tells on_error, once for the agent's life. */
/* The chief lost (chief_lost: its heartbeats failed or were refused) is told once; a
 * cluster error the chief reports (another task lost) once per distinct error. */
static void agent_tell(FloeCoordAgent *a, floe_code code, const char *msg, bool chief_lost) {
  pthread_mutex_lock(&a->mu);
  bool first;
  if (chief_lost) {
    first = !a->told;
    a->told = true;
  } else {
    first = !a->told && (!a->told_cluster || strcmp(a->told_cluster, msg ? msg : "") != 0);
    if (first) {
      floe__free(a->told_cluster);
      a->told_cluster = floe__strdup(msg ? msg : "");
    }
  }
  pthread_mutex_unlock(&a->mu);
  if (first && a->on_error) a->on_error(a->err_arg, code, msg);
}

bool floe__coord_agent_chief_lost(FloeCoordAgent *a) {
  pthread_mutex_lock(&a->mu);
  bool lost = a->told;
  pthread_mutex_unlock(&a->mu);
  return lost;
}

/* The call's timeout for a request that waits wait_ms on the chief (< 0: no limit). */
static int call_timeout(const FloeCoordAgent *a, int64_t wait_ms) {
  if (wait_ms < 0 || wait_ms > INT32_MAX - a->slack_ms) return INT32_MAX;
  return (int)wait_ms + a->slack_ms;
}

/* One request and its response; the response's status (field 1 of every response) becomes
 * the result. On OK *resp is the caller's (floe__wire_free; may be NULL to drop it). */
static floe_code agent_call(FloeCoordAgent *a, uint16_t type, const struct ProtobufCMessage *req,
                            uint16_t resp_type, int timeout_ms, struct ProtobufCMessage **resp,
                            FloeStatus *st) {
  struct ProtobufCMessage *m = NULL;
  if (resp) *resp = NULL;
  floe_code rc = floe__conn_pool_call(a->pool, type, req, resp_type, timeout_ms, &m, st);
  if (rc != FLOE_OK) return rc;
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "status");
  const Floe__Dist__Status *s = NULL;
  if (f) memcpy(&s, (const uint8_t *)m + f->offset, sizeof s);
  rc = floe__status_from_proto(s, st);
  if (rc == FLOE_OK && resp) *resp = m;
  else floe__wire_free(m);
  return rc;
}

static void *heartbeat_main(void *arg) {
  FloeCoordAgent *a = arg;
  int64_t last_ok = floe__dist_now_ms();
  for (;;) {
    int64_t next = floe__dist_now_ms() + a->heartbeat_interval_ms;
    pthread_mutex_lock(&a->mu);
    while (!a->stopping && floe__dist_cond_wait_until(&a->cv, &a->mu, next)) {
    }
    bool stop = a->stopping;
    pthread_mutex_unlock(&a->mu);
    if (stop) break;
    Floe__Dist__TaskId id = agent_id(a);
    Floe__Dist__HeartbeatRequest q = FLOE__DIST__HEARTBEAT_REQUEST__INIT;
    q.task = &id;
    FloeStatus st = {FLOE_OK, NULL};
    struct ProtobufCMessage *m = NULL;
    floe_code rc = floe__conn_pool_call(a->pool, FLOE__WIRE_HEARTBEAT, &q.base,
                                        FLOE__WIRE_HEARTBEAT_RESPONSE, a->heartbeat_timeout_ms,
                                        &m, &st);
    int64_t now = floe__dist_now_ms();
    if (rc == FLOE_OK) {
      const Floe__Dist__HeartbeatResponse *r = (const Floe__Dist__HeartbeatResponse *)m;
      FloeStatus err = {FLOE_OK, NULL};
      if (floe__status_from_proto(r->status, &st) != FLOE_OK) {
        floe__status_prefix(&st, "the chief refused a heartbeat");
        agent_tell(a, st.code, floe_status_message(&st), true);
      } else if (floe__status_from_proto(r->cluster_error, &err) != FLOE_OK) {
        last_ok = now;
        agent_tell(a, err.code, floe_status_message(&err), false);
      } else {
        last_ok = now;
      }
      floe_status_clear(&err);
      floe__wire_free(m);
    } else if (now - last_ok > a->heartbeat_timeout_ms) {
      char *msg = floe__asprintf("the chief at %s has not answered heartbeats for %" PRId64
                                 " ms (heartbeat timeout %d ms): %s",
                                 floe__conn_pool_address(a->pool), now - last_ok,
                                 a->heartbeat_timeout_ms, floe_status_message(&st));
      bool stopping;
      pthread_mutex_lock(&a->mu);
      stopping = a->stopping;
      pthread_mutex_unlock(&a->mu);
      if (!stopping)
        agent_tell(a, FLOE_UNAVAILABLE, msg ? msg : "the chief stopped answering heartbeats",
                   true);
      floe__free(msg);
    }
    floe_status_clear(&st);
  }
  return NULL;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Registers with the chief, retrying while it is not up, until deadline. */
static floe_code agent_register(FloeCoordAgent *a, const Floe__Dist__TaskInfo *info,
                                int register_ms, int conn_timeout_ms, FloeStatus *st) {
  Floe__Dist__TaskId id = agent_id(a);
  Floe__Dist__TaskInfo mine = FLOE__DIST__TASK_INFO__INIT;
  if (info) mine = *info;
  mine.task = &id;
  Floe__Dist__RegisterTaskRequest q = FLOE__DIST__REGISTER_TASK_REQUEST__INIT;
  q.task = &id;
  q.info = &mine;
  int64_t deadline = floe__dist_now_ms() + register_ms;
  int64_t backoff = 50;
  for (int attempt = 1;; attempt++) {
    int64_t left = deadline - floe__dist_now_ms();
    int timeout = (int)(left < conn_timeout_ms ? (left > 1 ? left : 1) : conn_timeout_ms);
    struct ProtobufCMessage *m = NULL;
    floe_code rc = floe__conn_pool_call(a->pool, FLOE__WIRE_REGISTER_TASK, &q.base,
                                        FLOE__WIRE_REGISTER_TASK_RESPONSE, timeout, &m, st);
    if (rc == FLOE_OK) {
      const Floe__Dist__RegisterTaskResponse *r = (const Floe__Dist__RegisterTaskResponse *)m;
      rc = floe__status_from_proto(r->status, st);
      if (rc == FLOE_OK) {
        a->leader_incarnation = r->leader_incarnation;
        /* The chief's settings win: heartbeats often enough for its timeout, and the same
         * timeout for taking the chief for lost. */
        if (r->heartbeat_interval_ms > 0 && r->heartbeat_interval_ms < a->heartbeat_interval_ms)
          a->heartbeat_interval_ms = r->heartbeat_interval_ms;
        if (r->heartbeat_timeout_ms > 0) a->heartbeat_timeout_ms = r->heartbeat_timeout_ms;
      } else floe__status_prefix(st, "the chief at %s refused to register this task",
                               floe__conn_pool_address(a->pool));
      floe__wire_free(m);
      return rc;
    }
    /* Not up yet (nothing listens, or it does not answer yet): try again; anything else (a
     * refused handshake) will not change by waiting. */
    bool again = rc == FLOE_UNAVAILABLE || rc == FLOE_DEADLINE_EXCEEDED;
    left = deadline - floe__dist_now_ms();
    if (!again || left <= 0) {
      floe__status_prefix(st, "could not register with the chief at %s within %d ms (%d "
                          "attempt%s)",
                          floe__conn_pool_address(a->pool), register_ms, attempt,
                          attempt == 1 ? "" : "s");
      return rc;
    }
    floe_status_clear(st);
    sleep_ms(backoff < left ? backoff : left); /* the last attempt at the deadline */
    backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
  }
}

floe_code floe__coord_agent_start(const char *chief_address, const FloeConnOptions *conn,
                                  const FloeCoordOptions *o, int register_timeout_ms,
                                  const Floe__Dist__TaskInfo *info, FloeCoordErrorFn on_error,
                                  void *err_arg, FloeCoordAgent **out, FloeStatus *st) {
  *out = NULL;
  char who[128];
  id_str(conn->self.job, conn->self.task, conn->self.incarnation, who, sizeof who);
  if (info && info->task &&
      (!info->task->job || strcmp(info->task->job, conn->self.job) != 0 ||
       info->task->task != conn->self.task || info->task->incarnation != conn->self.incarnation))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "coordination agent of %s: its TaskInfo names another task", who);
  FloeCoordAgent *a = floe__calloc(1, sizeof *a);
  if (!a) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a coordination agent");
  floe_code rc = floe__conn_pool_new(chief_address, conn, &a->pool, st);
  if (rc != FLOE_OK) {
    floe__free(a);
    return rc;
  }
  a->self = conn->self;
  a->heartbeat_interval_ms = o && o->heartbeat_interval_ms > 0 ? o->heartbeat_interval_ms
                                                               : DEFAULT_INTERVAL_MS;
  a->heartbeat_timeout_ms = o && o->heartbeat_timeout_ms > 0 ? o->heartbeat_timeout_ms
                                                             : DEFAULT_TIMEOUT_MS;
  int conn_timeout = conn->timeout_ms > 0 ? conn->timeout_ms : DEFAULT_TIMEOUT_MS;
  a->slack_ms = conn_timeout;
  a->on_error = on_error;
  a->err_arg = err_arg;
  pthread_mutex_init(&a->mu, NULL);
  floe__dist_cond_init(&a->cv);
  rc = agent_register(a, info, register_timeout_ms > 0 ? register_timeout_ms
                                                       : DEFAULT_REGISTER_MS,
                      conn_timeout, st);
  if (rc == FLOE_OK && pthread_create(&a->heartbeat, NULL, heartbeat_main, a) != 0)
    rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "coordination agent of %s: cannot start its heartbeat thread", who);
  if (rc != FLOE_OK) {
    floe__conn_pool_free(a->pool);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    floe__free(a);
    return rc;
  }
  *out = a;
  return FLOE_OK;
}

const FloeTaskIdentity *floe__coord_agent_self(const FloeCoordAgent *a) {
  return &a->self;
}

uint64_t floe__coord_agent_leader_incarnation(const FloeCoordAgent *a) {
  return a->leader_incarnation;
}

floe_code floe__coord_agent_wait_all(FloeCoordAgent *a, int64_t timeout_ms, FloeCoordInfos *out,
                                     FloeStatus *st) {
  memset(out, 0, sizeof *out);
  Floe__Dist__TaskId id = agent_id(a);
  Floe__Dist__WaitForAllTasksRequest q = FLOE__DIST__WAIT_FOR_ALL_TASKS_REQUEST__INIT;
  q.task = &id;
  q.timeout_ms = timeout_ms;
  struct ProtobufCMessage *m = NULL;
  floe_code rc = agent_call(a, FLOE__WIRE_WAIT_FOR_ALL_TASKS, &q.base,
                            FLOE__WIRE_WAIT_FOR_ALL_TASKS_RESPONSE, call_timeout(a, timeout_ms),
                            &m, st);
  if (rc != FLOE_OK) return rc;
  const Floe__Dist__WaitForAllTasksResponse *r = (const Floe__Dist__WaitForAllTasksResponse *)m;
  if (r->n_infos > FLOE__CLUSTER_MAX_TASKS) {
    floe__wire_free(m);
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "the chief at %s sent %zu task infos, more than a cluster has (%d)",
                           floe__conn_pool_address(a->pool), r->n_infos,
                           FLOE__CLUSTER_MAX_TASKS);
  }
  out->infos = floe__calloc(r->n_infos ? r->n_infos : 1, sizeof *out->infos);
  if (!out->infos) rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory for task infos");
  for (size_t i = 0; rc == FLOE_OK && i < r->n_infos; i++) {
    if ((rc = copy_info(r->infos[i], &out->infos[i], st)) == FLOE_OK) out->n = (int)i + 1;
  }
  floe__wire_free(m);
  if (rc != FLOE_OK) floe__coord_infos_clear(out);
  return rc;
}

floe_code floe__coord_agent_report(FloeCoordAgent *a, floe_code code, const char *msg,
                                   FloeStatus *st) {
  floe_code rc = check_report(code, msg, st);
  if (rc != FLOE_OK) return rc;
  Floe__Dist__TaskId id = agent_id(a);
  Floe__Dist__ReportErrorRequest q = FLOE__DIST__REPORT_ERROR_REQUEST__INIT;
  q.task = &id;
  q.code = code;
  q.message = (char *)(msg ? msg : "");
  return agent_call(a, FLOE__WIRE_REPORT_ERROR, &q.base, FLOE__WIRE_REPORT_ERROR_RESPONSE,
                    a->slack_ms, NULL, st);
}

floe_code floe__coord_agent_barrier(FloeCoordAgent *a, const char *id, int64_t timeout_ms,
                                    const FloeTaskIdentity *tasks, int n_tasks,
                                    FloeStatus *st) {
  floe_code rc = check_barrier_id(id, st);
  if (rc != FLOE_OK) return rc;
  if (n_tasks > FLOE__CLUSTER_MAX_TASKS)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "barrier \"%s\" names %d tasks, more than a cluster has (%d)", id,
                           n_tasks, FLOE__CLUSTER_MAX_TASKS);
  if (!tasks) n_tasks = 0;
  Floe__Dist__TaskId *ids = n_tasks ? floe__calloc((size_t)n_tasks, sizeof *ids) : NULL;
  Floe__Dist__TaskId **idp = n_tasks ? floe__calloc((size_t)n_tasks, sizeof *idp) : NULL;
  if (n_tasks && (!ids || !idp)) {
    floe__free(ids);
    floe__free(idp);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for barrier \"%s\"", id);
  }
  for (int k = 0; k < n_tasks; k++) {
    floe__dist__task_id__init(&ids[k]);
    ids[k].job = (char *)tasks[k].job;
    ids[k].task = tasks[k].task;
    idp[k] = &ids[k];
  }
  Floe__Dist__TaskId me = agent_id(a);
  Floe__Dist__BarrierRequest q = FLOE__DIST__BARRIER_REQUEST__INIT;
  q.id = (char *)id;
  q.timeout_ms = timeout_ms;
  q.task = &me;
  q.n_tasks = (size_t)n_tasks;
  q.tasks = idp;
  rc = agent_call(a, FLOE__WIRE_BARRIER, &q.base, FLOE__WIRE_BARRIER_RESPONSE,
                  call_timeout(a, timeout_ms), NULL, st);
  floe__free(ids);
  floe__free(idp);
  return rc;
}

floe_code floe__coord_agent_kv_insert(FloeCoordAgent *a, const char *key, const void *value,
                                      size_t len, bool allow_overwrite, FloeStatus *st) {
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  if (len > FLOE__COORD_MAX_VALUE)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "the value of key \"%s\" has %zu bytes, more than "
                           "FLOE__COORD_MAX_VALUE (%u)",
                           key, len, FLOE__COORD_MAX_VALUE);
  Floe__Dist__KvInsertRequest q = FLOE__DIST__KV_INSERT_REQUEST__INIT;
  q.key = (char *)key;
  q.value.data = (uint8_t *)value;
  q.value.len = len;
  q.allow_overwrite = allow_overwrite;
  return agent_call(a, FLOE__WIRE_KV_INSERT, &q.base, FLOE__WIRE_KV_INSERT_RESPONSE, a->slack_ms,
                    NULL, st);
}

floe_code floe__coord_agent_kv_erase(FloeCoordAgent *a, const char *key, FloeStatus *st) {
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  Floe__Dist__KvInsertRequest q = FLOE__DIST__KV_INSERT_REQUEST__INIT;
  q.key = (char *)key;
  q.erase = true;
  return agent_call(a, FLOE__WIRE_KV_INSERT, &q.base, FLOE__WIRE_KV_INSERT_RESPONSE, a->slack_ms,
                    NULL, st);
}

floe_code floe__coord_agent_kv_get(FloeCoordAgent *a, const char *key, int64_t timeout_ms,
                                   void **value, size_t *len, FloeStatus *st) {
  *value = NULL;
  *len = 0;
  floe_code rc = check_key(key, st);
  if (rc != FLOE_OK) return rc;
  Floe__Dist__KvGetRequest q = FLOE__DIST__KV_GET_REQUEST__INIT;
  q.key = (char *)key;
  q.timeout_ms = timeout_ms;
  struct ProtobufCMessage *m = NULL;
  rc = agent_call(a, FLOE__WIRE_KV_GET, &q.base, FLOE__WIRE_KV_GET_RESPONSE,
                  call_timeout(a, timeout_ms), &m, st);
  if (rc != FLOE_OK) return rc;
  const Floe__Dist__KvGetResponse *r = (const Floe__Dist__KvGetResponse *)m;
  uint8_t *v = floe__malloc(r->value.len + 1);
  if (!v) {
    floe__wire_free(m);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for the value of key \"%s\"", key);
  }
  if (r->value.len) memcpy(v, r->value.data, r->value.len);
  v[r->value.len] = 0;
  *value = v;
  *len = r->value.len;
  floe__wire_free(m);
  return FLOE_OK;
}

void floe__coord_agent_free(FloeCoordAgent *a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stopping = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  floe__conn_pool_shutdown(a->pool);
  pthread_join(a->heartbeat, NULL);
  floe__conn_pool_free(a->pool);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  floe__free(a->told_cluster);
  floe__free(a);
}
