/* SPDX-License-Identifier: Apache-2.0 */
/* collective.c - the runtime's collectives: groups, their members' ranks, backends, and the
 * life of one operation from submit to done (runtime.h).
 *
 * A member is one device in one group (group_key, group_size). Its first operation through a
 * backend makes a comm and a thread that settles the member's rank (if no other comm did)
 * and connects the backend (its comm_init waits for the other ranks); operations submitted
 * meanwhile wait in the comm and start when it is ready, or fail with its error. Ranks come
 * from slots in the store: each member claims the first free slot "g/<key>/<size>/slot/<i>"
 * with its device's name (or finds its name already there, when it asks again), waits for
 * all group_size slots, and sorts the names by job, task and device: the same order on every
 * rank, and independent of who came first. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h"

/* A pair of the runtime's own store (no server in this process). */
typedef struct KvEntry {
  char *key;
  void *value;
  size_t len;
} KvEntry;

/* What the ranks must agree on for one execution of an instance (the argument check). */
typedef struct CollArgs {
  int kind;                /* FloeCollKind; both broadcasts as FLOE__COLL_BCAST_SEND */
  int dtype;
  int op;                  /* FloeReduceOp; -1 for the kinds without one */
  uint64_t count;
} CollArgs;

/* One instance of a member: its executions, and the argument check of its last arguments. */
typedef struct SeqEntry {
  int64_t instance_key;
  uint64_t count;          /* executions so far: the next one's number */
  bool has_last;
  CollArgs last;           /* the arguments of the last execution submitted */
  struct CollOp *checking; /* the operation whose check of `last` still runs, else NULL */
  floe_code check_code;    /* that check failed: its code and message (NULL without */
  char *check_err;         /* memory); operations with `last` fail the same way */
} SeqEntry;

typedef struct Member {
  int64_t group_key;
  int size;
  char *device;
  char *name;              /* "group K (size N)", for messages */
  uint64_t generation;     /* the manager's when made: a later set_env ends its waits */
  bool resolving, resolved;
  floe_code err;           /* resolution failed: every comm of the member fails with it */
  char *errmsg;
  int rank;
  char **devices;          /* size names, by rank */
  SeqEntry *seqs;
  int num_seqs;
} Member;

typedef struct Backend {
  const char *name;
  const char *device_type;
  uint32_t dtypes;
  const FloeCollectiveFns *fns;
  void *ctx;
  bool inited;
} Backend;

/* An operation on its way through a comm. */
typedef struct CollOp {
  FloeCollComm *c;
  FloeCollRequest rq;      /* strings below, copied */
  char *node;
  uint64_t tag;
  uint64_t seq;            /* the execution of rq.instance_key: the same on every rank */
  CollArgs args;
  bool check;              /* compare args across the ranks before issuing it */
  bool checked;            /* check_finish ran for it */
  bool has_prev;
  CollArgs prev;           /* the instance's arguments before (check: for the message) */
  floe_code fail_code;     /* fail it when it starts, with fail_msg (its arguments' check */
  char *fail_msg;          /* failed) */
  struct CollOp *waiters;  /* check: operations with the same args waiting for its outcome */
  bool published;          /* check: its own record is in the store */
  int check_rank;          /* check: the next rank whose record it reads */
  int64_t check_deadline;  /* check: monotonic ms */
  struct CollOp *next;     /* the comm's queue while it forms, a checking op's waiters, or
                            * the manager's checks */
} CollOp;

enum { COMM_FORMING, COMM_READY, COMM_FAILED };

struct FloeCollComm {
  atomic_int refs;         /* the manager's list holds one */
  FloeCollMgr *m;
  Member *mem;
  int backend;
  int state;
  floe_code err;
  char *errmsg;
  void *comm;              /* the backend's, once READY */
  FloeCollectiveStore store;
  CollOp *queue, **queue_tail;
  int inflight;            /* operations given to the backend, not yet done */
  bool forming;            /* its forming thread has not ended (it uses mem) */
  /* A plugin backend's broadcasts: each instance's sender, once announced or read (under
   * m->mu), so the store holds one key per instance, read once per rank. */
  struct BcastRoot {
    int64_t instance;
    int root;
  } *roots;
  int num_roots;
};

struct FloeCollMgr {
  FloeRuntime *rt;
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* CLOCK_MONOTONIC: store waits, threads ending, inflight */
  bool has_env;
  FloeCollEnv env;
  KvEntry *kv;
  int num_kv;
  Member **members;
  int num_members;
  FloeCollComm **comms;
  int num_comms;
  Backend *backends;       /* [0] the ring, then rt->collectives */
  int num_backends;
  int threads;             /* forming threads running */
  FloeCollComm **zombies;  /* aborted comms with operations still out (reap) */
  int num_zombies;
  Member **zombie_members;
  int num_zombie_members;
  uint64_t generation;     /* bumped by set_env: a forming thread of an older one gives up */
  CollOp *checks;          /* operations whose arguments the checker compares */
  bool checker;            /* the checker thread runs (it ends when checks is empty) */
  bool checks_added;       /* since the checker last took the list */
};

/* ------------------------------------------------------------------------------------ */
/* Reductions. */

static const char *const op_names[] = {"sum", "mean", "max", "min", "prod"};

const char *floe__reduce_op_name(FloeReduceOp op) {
  return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : "?";
}

bool floe__reduce_op_parse(const char *name, FloeReduceOp *op) {
  for (unsigned i = 0; name && i < sizeof op_names / sizeof *op_names; i++)
    if (strcmp(name, op_names[i]) == 0) {
      *op = (FloeReduceOp)i;
      return true;
    }
  return false;
}

#define REDUCE_LOOP(T, COMBINE)                                                              \
  do {                                                                                       \
    T *d = dst;                                                                              \
    const T *x = a, *y = b;                                                                  \
    for (size_t i = 0; i < n; i++) d[i] = COMBINE(x[i], y[i]);                               \
  } while (0)
#define C_SUM(p, q) ((p) + (q))
#define C_PROD(p, q) ((p) * (q))
#define C_MAX(p, q) ((q) > (p) || (q) != (q) ? (q) : (p))
#define C_MIN(p, q) ((q) < (p) || (q) != (q) ? (q) : (p))
#define REDUCE_TYPED(T)                                                                      \
  do {                                                                                       \
    switch (op) {                                                                            \
    case FLOE_REDUCE_SUM:                                                                    \
    case FLOE_REDUCE_MEAN: REDUCE_LOOP(T, C_SUM); return true;                               \
    case FLOE_REDUCE_PROD: REDUCE_LOOP(T, C_PROD); return true;                              \
    case FLOE_REDUCE_MAX: REDUCE_LOOP(T, C_MAX); return true;                                \
    case FLOE_REDUCE_MIN: REDUCE_LOOP(T, C_MIN); return true;                                \
    default: break;                                                                          \
    }                                                                                        \
    return false;                                                                            \
  } while (0)

/* Half-precision values: combined in f32, rounded back once per pair. */
static bool reduce_half(uint16_t *d, const uint16_t *x, const uint16_t *y, size_t n, bool bf16,
                        FloeReduceOp op) {
  for (size_t i = 0; i < n; i++) {
    float p = bf16 ? floe_bf16_to_f32(x[i]) : floe_f16_to_f32(x[i]);
    float q = bf16 ? floe_bf16_to_f32(y[i]) : floe_f16_to_f32(y[i]);
    switch (op) {
    case FLOE_REDUCE_SUM:
    case FLOE_REDUCE_MEAN: p = C_SUM(p, q); break;
    case FLOE_REDUCE_PROD: p = C_PROD(p, q); break;
    case FLOE_REDUCE_MAX: p = C_MAX(p, q); break;
    case FLOE_REDUCE_MIN: p = C_MIN(p, q); break;
    default: return false;
    }
    d[i] = bf16 ? floe_f32_to_bf16(p) : floe_f32_to_f16(p);
  }
  return true;
}

bool floe__reduce3(void *dst, const void *a, const void *b, size_t n, FloeDType dt,
                   FloeReduceOp op) {
  switch (dt) {
  case FLOE_F32: REDUCE_TYPED(float);
  case FLOE_F64: REDUCE_TYPED(double);
  case FLOE_I32: REDUCE_TYPED(int32_t);
  case FLOE_I64: REDUCE_TYPED(int64_t);
  case FLOE_I8: REDUCE_TYPED(int8_t);
  case FLOE_U8: REDUCE_TYPED(uint8_t);
  case FLOE_F16: return reduce_half(dst, a, b, n, false, op);
  case FLOE_BF16: return reduce_half(dst, a, b, n, true, op);
  default: return false;
  }
}

bool floe__reduce_into(void *dst, const void *src, size_t n, FloeDType dt, FloeReduceOp op) {
  return floe__reduce3(dst, dst, src, n, dt, op);
}

void floe__scale_down(void *x, size_t n, FloeDType dt, int d) {
#define SCALE(T)                                                                             \
  for (size_t i = 0; i < n; i++) ((T *)x)[i] = (T)(((T *)x)[i] / (T)d);                      \
  break
  switch (dt) {
  case FLOE_F32: SCALE(float);
  case FLOE_F64: SCALE(double);
  case FLOE_I32: SCALE(int32_t);
  case FLOE_I64: SCALE(int64_t);
  case FLOE_I8: SCALE(int8_t);
  case FLOE_U8: SCALE(uint8_t);
  case FLOE_F16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t *)x)[i] = floe_f32_to_f16(floe_f16_to_f32(((uint16_t *)x)[i]) / (float)d);
    break;
  case FLOE_BF16:
    for (size_t i = 0; i < n; i++)
      ((uint16_t *)x)[i] = floe_f32_to_bf16(floe_bf16_to_f32(((uint16_t *)x)[i]) / (float)d);
    break;
  default: break;
  }
#undef SCALE
}

/* ------------------------------------------------------------------------------------ */
/* The manager. */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits on m->cv until deadline (monotonic ms); false once it passed. */
static bool wait_until(FloeCollMgr *m, int64_t deadline) {
  int64_t left = deadline - now_ms();
  if (left <= 0) return false;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += left / 1000;
  ts.tv_nsec += (left % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  return pthread_cond_timedwait(&m->cv, &m->mu, &ts) != ETIMEDOUT || now_ms() < deadline;
}

static FloeCollMgr *mgr_get(FloeRuntime *rt, FloeStatus *st) {
  FloeCollMgr *m = atomic_load(&rt->coll_mgr);
  if (m) return m;
  pthread_mutex_lock(&rt->cluster_mu);
  m = atomic_load(&rt->coll_mgr);
  if (m) goto out;
  m = floe__calloc(1, sizeof *m);
  Backend *b = floe__calloc((size_t)rt->num_collectives + 1, sizeof *b);
  if (!m || !b) {
    floe__free(m);
    floe__free(b);
    m = NULL;
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory for the runtime's collectives");
    goto out;
  }
  m->rt = rt;
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  b[0] = (Backend){"ring", "CPU", FLOE__COLL_DTYPES, &floe__ring_fns, m, true};
  for (int i = 0; i < rt->num_collectives; i++) {
    const FloeCollectiveReg *r = rt->collectives[i];
    b[i + 1] = (Backend){r->name, r->device_type, r->fns.dtypes, &r->fns, NULL, false};
  }
  m->backends = b;
  m->num_backends = rt->num_collectives + 1;
  atomic_store(&rt->coll_mgr, m);
out:
  pthread_mutex_unlock(&rt->cluster_mu);
  return m;
}

FloeTransportMgr *floe__coll_transport(FloeCollMgr *m, FloeStatus *st) {
  return floe__transport_mgr(m->rt, st);
}

void floe__coll_count(FloeCollMgr *m, int chan, bool is_send, int64_t bytes) {
  if (chan <= 0) return;
  pthread_mutex_lock(&m->mu);
  void (*count)(void *, int, bool, int64_t) = m->has_env ? m->env.count : NULL;
  void *arg = m->env.arg;
  pthread_mutex_unlock(&m->mu);
  if (count) count(arg, chan, is_send, bytes);
}

int floe__coll_channel(FloeCollMgr *m, const char *device, bool is_send, int64_t timeout_ms,
                       FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  FloeCollEnv env = m->env;
  bool has_env = m->has_env;
  uint64_t gen = m->generation;
  pthread_mutex_unlock(&m->mu);
  if (!has_env || !env.channel) return 0;
  int64_t deadline = now_ms() + timeout_ms;
  int64_t nap_ms = 1;
  for (;;) {
    FloeStatus cst = {FLOE_OK, NULL};
    int chan = env.channel(env.arg, device, is_send, &cst);
    if (chan >= 0) {
      floe_status_clear(&cst);
      return chan;
    }
    /* A peer not connected yet (its session is still starting) comes within the timeout. */
    if (cst.code != FLOE_UNAVAILABLE || now_ms() >= deadline) {
      floe_status_set(st, cst.code == FLOE_OK ? FLOE_INTERNAL : cst.code, "%s",
                      floe_status_message(&cst));
      floe_status_clear(&cst);
      return -1;
    }
    floe_status_clear(&cst);
    pthread_mutex_lock(&m->mu);
    bool reset = m->generation != gen;
    pthread_mutex_unlock(&m->mu);
    if (reset) {
      floe_status_set(st, FLOE_ABORTED, "stopped waiting for a connection to %s: the runtime's "
                      "collectives were reset (its server stopped or changed)", device);
      return -1;
    }
    struct timespec ts = {0, nap_ms * 1000000};
    nanosleep(&ts, NULL);
    if (nap_ms < 50) nap_ms *= 2;
  }
}

/* ---- the store: the env's, or the runtime's own table (under m->mu) ---- */

static floe_code store_set(FloeCollMgr *m, const char *key, const void *value, size_t len,
                           FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  if (m->has_env) {
    FloeCollEnv env = m->env;
    pthread_mutex_unlock(&m->mu);
    return env.kv_set(env.arg, key, value, len, st);
  }
  for (int i = 0; i < m->num_kv; i++)
    if (strcmp(m->kv[i].key, key) == 0) {
      pthread_mutex_unlock(&m->mu);
      return floe_status_set(st, FLOE_ALREADY_EXISTS, "key \"%s\" is already set", key);
    }
  KvEntry *kv = floe__realloc(m->kv, (size_t)(m->num_kv + 1) * sizeof *kv);
  char *k = floe__strdup(key);
  void *v = floe__malloc(len + 1);
  if (kv) m->kv = kv;
  if (!kv || !k || !v) {
    pthread_mutex_unlock(&m->mu);
    floe__free(k);
    floe__free(v);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory storing key \"%s\"", key);
  }
  if (len) memcpy(v, value, len);
  ((char *)v)[len] = '\0';
  m->kv[m->num_kv++] = (KvEntry){k, v, len};
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return FLOE_OK;
}

/* Removes key (a missing one is no error). */
static floe_code store_erase(FloeCollMgr *m, const char *key, FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  if (m->has_env) {
    FloeCollEnv env = m->env;
    pthread_mutex_unlock(&m->mu);
    return env.kv_erase ? env.kv_erase(env.arg, key, st) : FLOE_OK;
  }
  for (int i = 0; i < m->num_kv; i++)
    if (strcmp(m->kv[i].key, key) == 0) {
      floe__free(m->kv[i].key);
      floe__free(m->kv[i].value);
      m->kv[i] = m->kv[--m->num_kv];
      break;
    }
  pthread_mutex_unlock(&m->mu);
  return FLOE_OK;
}

/* *value floe__malloc'd (NUL after len bytes). */
static floe_code gone(FloeCollMgr *m, const char *key, FloeStatus *st) {
  (void)m;
  return floe_status_set(st, FLOE_ABORTED, "stopped waiting for key \"%s\": the runtime's "
                         "collectives were reset (its server stopped or changed)", key);
}

/* Waits (up to timeout_ms; 0 looks once) for key, giving up once the manager's generation is
 * no longer gen (set_env reset the groups). *value floe__malloc'd (NUL after len bytes). */
static floe_code store_get(FloeCollMgr *m, uint64_t gen, const char *key, int64_t timeout_ms,
                           void **value, size_t *len, FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  if (m->generation != gen) {
    pthread_mutex_unlock(&m->mu);
    return gone(m, key, st);
  }
  if (m->has_env) {
    FloeCollEnv env = m->env;
    pthread_mutex_unlock(&m->mu);
    void *v = NULL;
    size_t n = 0;
    /* In slices, so that a reset is noticed within one. */
    int64_t deadline = now_ms() + (timeout_ms < 0 ? INT64_MAX / 4 : timeout_ms);
    floe_code rc;
    for (;;) {
      int64_t left = deadline - now_ms();
      int64_t slice = left < 0 ? 0 : left > 200 ? 200 : left;
      rc = env.kv_get(env.arg, key, slice, &v, &n, st);
      if (rc == FLOE_NOT_FOUND) rc = FLOE_DEADLINE_EXCEEDED; /* what a wait of 0 ms says */
      if (rc != FLOE_DEADLINE_EXCEEDED || now_ms() >= deadline) break;
      floe_status_clear(st);
      pthread_mutex_lock(&m->mu);
      bool reset = m->generation != gen;
      pthread_mutex_unlock(&m->mu);
      if (reset) return gone(m, key, st);
    }
    if (rc == FLOE_DEADLINE_EXCEEDED) {
      floe_status_clear(st);
      return floe_status_set(st, FLOE_DEADLINE_EXCEEDED, "key \"%s\" did not come within %lld "
                             "ms", key, (long long)timeout_ms);
    }
    if (rc != FLOE_OK) return rc;
    *value = floe__malloc(n + 1);
    if (!*value) {
      free(v);
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading key \"%s\"", key);
    }
    memcpy(*value, v, n);
    ((char *)*value)[n] = '\0';
    *len = n;
    free(v);
    return FLOE_OK;
  }
  int64_t deadline = now_ms() + (timeout_ms < 0 ? INT64_MAX / 4 : timeout_ms);
  for (;;) {
    for (int i = 0; i < m->num_kv; i++)
      if (strcmp(m->kv[i].key, key) == 0) {
        *value = floe__malloc(m->kv[i].len + 1);
        if (!*value) {
          pthread_mutex_unlock(&m->mu);
          return floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading key \"%s\"", key);
        }
        memcpy(*value, m->kv[i].value, m->kv[i].len + 1);
        *len = m->kv[i].len;
        pthread_mutex_unlock(&m->mu);
        return FLOE_OK;
      }
    if (m->has_env || !wait_until(m, deadline)) break;
    if (m->generation != gen) {
      pthread_mutex_unlock(&m->mu);
      return gone(m, key, st);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return floe_status_set(st, FLOE_DEADLINE_EXCEEDED, "key \"%s\" did not come within %lld ms",
                         key, (long long)timeout_ms);
}

/* ---- ranks ---- */

/* Orders full device names by job, then task as a number, then the rest. */
static int device_cmp(const void *pa, const void *pb) {
  const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
  const char *ta = strstr(a, "/task:"), *tb = strstr(b, "/task:");
  if (ta && tb) {
    size_t ja = (size_t)(ta - a), jb = (size_t)(tb - b);
    int c = strncmp(a, b, ja < jb ? ja : jb);
    if (c) return c;
    if (ja != jb) return ja < jb ? -1 : 1;
    long na = strtol(ta + 6, NULL, 10), nb = strtol(tb + 6, NULL, 10);
    if (na != nb) return na < nb ? -1 : 1;
  }
  return strcmp(a, b);
}

/* Claims a slot and waits for the group; fills mem->rank and mem->devices. */
static floe_code resolve_member(FloeCollMgr *m, Member *mem, int64_t timeout_ms,
                                FloeStatus *st) {
  char key[160];
  int mine = -1;
  char **names = floe__calloc((size_t)mem->size, sizeof *names);
  if (!names) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory forming %s", mem->name);
  floe_code rc = FLOE_OK;
  for (int i = 0; i < mem->size && mine < 0; i++) {
    snprintf(key, sizeof key, "floe.coll/g/%lld/%d/slot/%d", (long long)mem->group_key,
             mem->size, i);
    FloeStatus kst = {FLOE_OK, NULL};
    rc = store_set(m, key, mem->device, strlen(mem->device), &kst);
    if (rc == FLOE_OK) {
      mine = i;
    } else if (rc == FLOE_ALREADY_EXISTS) {
      void *v = NULL;
      size_t n = 0;
      floe_status_clear(&kst);
      rc = store_get(m, mem->generation, key, 0, &v, &n, &kst);
      if (rc == FLOE_OK) {
        names[i] = v;
        if (strcmp(v, mem->device) == 0) mine = i;
      }
    }
    if (rc != FLOE_OK) {
      floe_status_set(st, rc, "%s: device %s could not join: %s", mem->name, mem->device,
                      floe_status_message(&kst));
      floe_status_clear(&kst);
      goto out;
    }
  }
  if (mine < 0) {
    char list[512];
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < mem->size && used < sizeof list; i++) {
      int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                       names[i] ? names[i] : "?");
      if (w < 0) break;
      used += (size_t)w;
    }
    rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "%s is full (%s) and device %s is not in it: give each group of "
                         "devices its own group_key, and every member the same group_size",
                         mem->name, list, mem->device);
    goto out;
  }
  if (!names[mine] && !(names[mine] = floe__strdup(mem->device))) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory forming %s", mem->name);
    goto out;
  }
  int64_t deadline = now_ms() + timeout_ms;
  for (int i = 0; i < mem->size; i++) {
    if (names[i]) continue;
    snprintf(key, sizeof key, "floe.coll/g/%lld/%d/slot/%d", (long long)mem->group_key,
             mem->size, i);
    size_t n = 0;
    int64_t left = deadline - now_ms();
    FloeStatus kst = {FLOE_OK, NULL};
    rc = store_get(m, mem->generation, key, left > 0 ? left : 0, (void **)&names[i], &n, &kst);
    if (rc != FLOE_OK) {
      int joined = 0;
      for (int j = 0; j < mem->size; j++) joined += names[j] != NULL;
      floe_status_set(st, rc,
                      "%s: %d of %d members joined within %lld ms (device %s waited): %s; "
                      "every member must run its collective op with this group_key",
                      mem->name, joined, mem->size, (long long)timeout_ms, mem->device,
                      floe_status_message(&kst));
      floe_status_clear(&kst);
      goto out;
    }
  }
  qsort(names, (size_t)mem->size, sizeof *names, device_cmp);
  for (int i = 0; i < mem->size; i++)
    if (strcmp(names[i], mem->device) == 0) mem->rank = i;
  mem->devices = names;
  names = NULL;
out:
  if (names)
    for (int i = 0; i < mem->size; i++) floe__free(names[i]);
  floe__free(names);
  return rc;
}

/* ---- comms ---- */

void floe__coll_comm_release(FloeCollComm *c) {
  if (!c) return;
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  /* The last reference: the manager's list let go (the runtime is going). */
  floe__free(c->errmsg);
  floe__free(c->roots);
  floe__free(c);
}

static floe_code plug_store_set(void *arg, const char *key, const void *value, size_t len) {
  FloeCollComm *c = arg;
  char k[320];
  if (!key || strlen(key) > 200) return FLOE_INVALID_ARGUMENT;
  snprintf(k, sizeof k, "floe.coll/g/%lld/%d/%s/%s", (long long)c->mem->group_key, c->mem->size,
           c->m->backends[c->backend].name, key);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = store_set(c->m, k, value, len, &st);
  floe_status_clear(&st);
  return rc;
}

static floe_code plug_store_erase(void *arg, const char *key) {
  FloeCollComm *c = arg;
  char k[320];
  if (!key || strlen(key) > 200) return FLOE_INVALID_ARGUMENT;
  snprintf(k, sizeof k, "floe.coll/g/%lld/%d/%s/%s", (long long)c->mem->group_key, c->mem->size,
           c->m->backends[c->backend].name, key);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = store_erase(c->m, k, &st);
  floe_status_clear(&st);
  return rc;
}

static floe_code plug_store_get(void *arg, const char *key, int64_t timeout_ms, void **value,
                                size_t *len) {
  FloeCollComm *c = arg;
  char k[320];
  if (!key || strlen(key) > 200 || !value || !len) return FLOE_INVALID_ARGUMENT;
  snprintf(k, sizeof k, "floe.coll/g/%lld/%d/%s/%s", (long long)c->mem->group_key, c->mem->size,
           c->m->backends[c->backend].name, key);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = store_get(c->m, c->mem->generation, k,
                           timeout_ms < 0 ? FLOE__COLL_TIMEOUT_MS : timeout_ms, value, len, &st);
  floe_status_clear(&st);
  return rc;
}

static void op_free(CollOp *op) {
  if (!op) return;
  floe__free(op->node);
  floe__free(op->fail_msg);
  floe__free(op);
}

static void check_finish(CollOp *op, floe_code code, const char *msg);

/* op ended (or it never started: code and msg say why). */
static void op_done(void *arg, floe_code code, const char *msg) {
  CollOp *op = arg;
  FloeCollComm *c = op->c;
  FloeCollMgr *m = c->m;
  /* A check that never ran (its comm failed first) still settles the operations waiting. */
  if (op->check && !op->checked) check_finish(op, code == FLOE_OK ? FLOE_INTERNAL : code, msg);
  FloeStatus st = {FLOE_OK, NULL};
  if (code != FLOE_OK)
    floe_status_set(&st, code, "%s: %s", op->node, msg && *msg ? msg : floe_code_name(code));
  op->rq.done(op->rq.arg, &st);
  floe_status_clear(&st);
  pthread_mutex_lock(&m->mu);
  c->inflight--;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  floe__coll_comm_release(c);
  op_free(op);
}

/* Runs fn(arg) on a detached thread of the manager (m->threads counts it; fn ends with
 * thread_end); false when no thread could start. */
static bool spawn(FloeCollMgr *m, void *(*fn)(void *), void *arg) {
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&m->mu);
  m->threads++;
  pthread_mutex_unlock(&m->mu);
  int err = pthread_create(&th, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  if (err) {
    pthread_mutex_lock(&m->mu);
    m->threads--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
  }
  return err == 0;
}

static void thread_end(FloeCollMgr *m) {
  pthread_mutex_lock(&m->mu);
  m->threads--;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

/* ---- the argument check ----
 * Ranks must issue the same kind, count, dtype and op for each execution of an instance: a
 * backend handed mismatched operations may crash (Gloo's receive path enforces sizes by
 * ending the process). The core compares them through the store when an instance's
 * arguments may have changed: on its first execution, and whenever they differ from its
 * last execution's on this rank. A rank whose arguments changed publishes them under
 * "args/<instance>/<execution>/<rank>" and waits for every other rank's; it issues the
 * operation only if all are equal. A rank whose arguments did not change issues it at once
 * (after the check of those arguments succeeded). So an operation reaches the backend only
 * with arguments every rank was seen to share: if rank A keeps its arguments while rank B
 * changes its own, B waits for A's record, which never comes, and fails naming both; B never
 * issues the operation, so A's waits for B and fails on the group's timeout (or an abort),
 * its message completed from B's record (op_backend_done). */

static const char *const kind_names[] = {"all-reduce", "all-gather", "reduce-scatter",
                                         "broadcast", "broadcast"};

static CollArgs args_of(const FloeCollRequest *rq) {
  bool reduces = rq->kind == FLOE__COLL_ALL_REDUCE || rq->kind == FLOE__COLL_REDUCE_SCATTER;
  return (CollArgs){rq->kind == FLOE__COLL_BCAST_RECV ? FLOE__COLL_BCAST_SEND : (int)rq->kind,
                    (int)rq->dtype, reduces ? (int)rq->op : -1, (uint64_t)rq->count};
}

static bool args_eq(const CollArgs *a, const CollArgs *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->count == b->count;
}

/* "all-reduce of 1000 x f32 (sum)" */
static void args_text(const CollArgs *a, char *buf, size_t cap) {
  const char *kind = a->kind >= 0 && a->kind < 5 ? kind_names[a->kind] : "an unknown operation";
  int n = snprintf(buf, cap, "%s of %llu x %s", kind, (unsigned long long)a->count,
                   floe_dtype_name((FloeDType)a->dtype));
  if (a->op >= 0 && n > 0 && (size_t)n < cap)
    snprintf(buf + (size_t)n, cap - (size_t)n, " (%s)", floe__reduce_op_name((FloeReduceOp)a->op));
}

/* "collective group 7 (size 2), instance 3, execution 5" */
static void exec_name(const CollOp *op, char *buf, size_t cap) {
  snprintf(buf, cap, "%s, instance %lld, execution %llu", op->c->mem->name,
           (long long)op->rq.instance_key, (unsigned long long)op->seq);
}

static void args_key(const CollOp *op, int rank, char *key, size_t cap) {
  const Member *mem = op->c->mem;
  snprintf(key, cap, "floe.coll/g/%lld/%d/args/%lld/%llu/%d", (long long)mem->group_key,
           mem->size, (long long)op->rq.instance_key, (unsigned long long)op->seq, rank);
}

/* Rank's arguments for op's execution, waiting up to timeout_ms for them (0: looks once). */
static floe_code args_get(const CollOp *op, int rank, int64_t timeout_ms, CollArgs *a,
                          FloeStatus *st) {
  char key[192];
  args_key(op, rank, key, sizeof key);
  void *v = NULL;
  size_t n = 0;
  floe_code rc = store_get(op->c->m, op->c->mem->generation, key, timeout_ms, &v, &n, st);
  if (rc != FLOE_OK) return rc;
  unsigned long long count = 0;
  bool ok = sscanf(v, "%d %d %d %llu", &a->kind, &a->dtype, &a->op, &count) == 4;
  a->count = count;
  floe__free(v);
  return ok ? FLOE_OK : floe_status_set(st, FLOE_INTERNAL, "key \"%s\" holds no arguments", key);
}

/* One look at op's check: publishes its record (the first time), then reads the other ranks'
 * in rank order as far as they have come. False while records are missing and time is left;
 * true when the check ended: *rc FLOE_OK (every rank's arguments equal), or why not in msg.
 * *progress is set when a record came. */
static bool check_poll(CollOp *op, floe_code *rc, char *msg, size_t cap, bool *progress) {
  const Member *mem = op->c->mem;
  char where[192], mine[128], theirs[128];
  FloeStatus st = {FLOE_OK, NULL};
  *rc = FLOE_OK;
  if (!op->published) {
    char key[192], val[96];
    args_key(op, mem->rank, key, sizeof key);
    snprintf(val, sizeof val, "%d %d %d %llu", op->args.kind, op->args.dtype, op->args.op,
             (unsigned long long)op->args.count);
    *rc = store_set(op->c->m, key, val, strlen(val), &st);
    op->published = *rc == FLOE_OK;
  }
  while (*rc == FLOE_OK && op->check_rank < mem->size) {
    int r = op->check_rank;
    CollArgs a;
    if (r != mem->rank) {
      floe_status_clear(&st);
      *rc = args_get(op, r, 0, &a, &st);
      if (*rc == FLOE_DEADLINE_EXCEEDED && now_ms() < op->check_deadline) {
        floe_status_clear(&st);
        return false;
      }
      if (*rc != FLOE_OK || !args_eq(&a, &op->args)) break;
      *progress = true;
    }
    op->check_rank++;
  }
  if (*rc == FLOE_OK && op->check_rank == mem->size) return true;
  int r = op->check_rank;
  long long timeout = (long long)(op->rq.timeout_ms > 0 ? op->rq.timeout_ms
                                                        : FLOE__COLL_TIMEOUT_MS);
  exec_name(op, where, sizeof where);
  args_text(&op->args, mine, sizeof mine);
  if (!op->published) {
    snprintf(msg, cap, "%s: cannot publish this rank's arguments to check them across the "
             "ranks: %s", where, floe_status_message(&st));
  } else if (*rc == FLOE_DEADLINE_EXCEEDED && op->has_prev) {
    args_text(&op->prev, theirs, sizeof theirs);
    snprintf(msg, cap, "%s: rank %d (%s) did not check its arguments within %lld ms: they are "
             "likely still those of the execution before, %s, which this rank changed to %s; "
             "every member must change an instance's count, dtype or op at the same execution "
             "(or rank %d is stuck or gone)", where, r, mem->devices[r], timeout, theirs, mine, r);
  } else if (*rc == FLOE_DEADLINE_EXCEEDED) {
    snprintf(msg, cap, "%s: rank %d (%s) did not issue its %s within %lld ms (this rank issued "
             "%s): every member must run it, or rank %d is stuck or gone", where, r,
             mem->devices[r], kind_names[op->args.kind], timeout, mine, r);
  } else if (*rc != FLOE_OK) {
    snprintf(msg, cap, "%s: cannot read rank %d's arguments: %s", where, r,
             floe_status_message(&st));
  } else {
    CollArgs a;
    FloeStatus ast = {FLOE_OK, NULL};
    if (args_get(op, r, 0, &a, &ast) == FLOE_OK) args_text(&a, theirs, sizeof theirs);
    else snprintf(theirs, sizeof theirs, "other arguments");
    floe_status_clear(&ast);
    *rc = FLOE_INVALID_ARGUMENT;
    snprintf(msg, cap, "%s: rank %d (%s) issued %s where this rank (rank %d, %s) issued %s: "
             "every member must issue the same kind, count, dtype and op for one instance",
             where, r, mem->devices[r], theirs, mem->rank, mem->device, mine);
  }
  floe_status_clear(&st);
  return true;
}

static SeqEntry *seq_find(Member *mem, int64_t instance_key) {
  for (int i = 0; i < mem->num_seqs; i++)
    if (mem->seqs[i].instance_key == instance_key) return &mem->seqs[i];
  return NULL;
}

static void op_start(CollOp *op);

/* Settles op's check: records its outcome for the instance (a later operation with the same
 * arguments then runs without checking, or fails as this one did), then starts the
 * operations that waited for it (they fail with msg when code is not FLOE_OK). */
static void check_finish(CollOp *op, floe_code code, const char *msg) {
  FloeCollComm *c = op->c;
  FloeCollMgr *m = c->m;
  char where[192];
  exec_name(op, where, sizeof where);
  pthread_mutex_lock(&m->mu);
  op->checked = true;
  SeqEntry *e = seq_find(c->mem, op->rq.instance_key);
  if (e && e->checking == op) {
    e->checking = NULL;
    e->check_code = code;
    floe__free(e->check_err);
    e->check_err = code == FLOE_OK ? NULL : floe__strdup(msg ? msg : "");
  }
  CollOp *w = op->waiters;
  op->waiters = NULL;
  pthread_mutex_unlock(&m->mu);
  while (w) {
    CollOp *next = w->next;
    w->next = NULL;
    if (code != FLOE_OK) {
      w->fail_code = code;
      w->fail_msg = floe__asprintf("not issued: its arguments are those whose check across the "
                                   "ranks failed at %s: %s", where, msg ? msg : "");
    }
    op_start(w);
    w = next;
  }
}

/* Whether op checks its arguments across the ranks: on its instance's first execution, and
 * when they differ from the last execution's. Returns the operation whose check of the same
 * arguments still runs (op waits for it), else NULL; op fails at its start when that check
 * failed. Under m->mu, once op has its comm. */
static CollOp *check_plan(SeqEntry *e, CollOp *op) {
  op->args = args_of(&op->rq);
  if (!e->has_last || !args_eq(&e->last, &op->args)) {
    op->check = true;
    op->has_prev = e->has_last;
    op->prev = e->last;
    e->has_last = true;
    e->last = op->args;
    e->checking = op;
    e->check_code = FLOE_OK;
    floe__free(e->check_err);
    e->check_err = NULL;
    return NULL;
  }
  if (e->checking) return e->checking;
  if (e->check_code != FLOE_OK) {
    op->fail_code = e->check_code;
    op->fail_msg = floe__asprintf("not issued: its arguments are those whose check across the "
                                  "ranks failed: %s", e->check_err ? e->check_err : "");
  }
  return NULL;
}

/* A failed operation that was not checked may have met a rank whose arguments changed (that
 * rank checks, never issues it, and this one times out): that rank's record says so. Writes
 * the explanation into out; false when no rank's record differs, or the store cannot say
 * (it is not asked again: a store that is gone must not delay the failure rank by rank). */
static bool explain_failure(const CollOp *op, const char *msg, char *out, size_t cap) {
  const Member *mem = op->c->mem;
  for (int r = 0; r < mem->size; r++) {
    if (r == mem->rank) continue;
    CollArgs a;
    FloeStatus st = {FLOE_OK, NULL};
    floe_code rc = args_get(op, r, 0, &a, &st);
    floe_status_clear(&st);
    if (rc != FLOE_OK && rc != FLOE_DEADLINE_EXCEEDED) return false;
    if (rc != FLOE_OK || args_eq(&a, &op->args)) continue;
    char where[192], mine[128], theirs[128];
    exec_name(op, where, sizeof where);
    args_text(&op->args, mine, sizeof mine);
    args_text(&a, theirs, sizeof theirs);
    snprintf(out, cap, "%s: rank %d (%s) issued %s where this rank (rank %d) issued %s, "
             "unchanged since the execution before: every member must change an instance's "
             "count, dtype or op at the same execution (the backend: %s)", where, r,
             mem->devices[r], theirs, mem->rank, mine, msg && *msg ? msg : "failed");
    return true;
  }
  return false;
}

/* The backend's completion of op. */
static void op_backend_done(void *arg, floe_code code, const char *msg) {
  CollOp *op = arg;
  char why[1536];
  /* Its check's record has been read by every rank that checked (each read it before issuing,
   * and a reduction or gather ends on a rank only once every rank issued it) and goes, so the
   * store holds the records of checks in progress only. Not a broadcast's: it ends on a
   * receiver once the sender's bytes came, whether or not another receiver has issued (read
   * the records) yet; its records stay (one per rank each time its shape changes). */
  if (code == FLOE_OK && op->check && op->published && op->rq.kind != FLOE__COLL_BCAST_SEND &&
      op->rq.kind != FLOE__COLL_BCAST_RECV) {
    char key[192];
    FloeStatus est = {FLOE_OK, NULL};
    args_key(op, op->c->mem->rank, key, sizeof key);
    store_erase(op->c->m, key, &est);
    floe_status_clear(&est);
  }
  if (code != FLOE_OK && op->c->backend != 0 && !op->check && op->c->mem->size > 1 &&
      explain_failure(op, msg, why, sizeof why)) {
    op_done(op, FLOE_INVALID_ARGUMENT, why);
    return;
  }
  op_done(op, code, msg);
}

/* The store's key naming the sender of an instance's broadcasts (one per instance). */
static floe_code bcast_key(const CollOp *op, char *key, size_t cap) {
  snprintf(key, cap, "bcast/%lld", (long long)op->rq.instance_key);
  return FLOE_OK;
}

/* The sender of instance's broadcasts as this comm knows it (-1: not yet). */
static int root_known(FloeCollComm *c, int64_t instance) {
  int root = -1;
  pthread_mutex_lock(&c->m->mu);
  for (int i = 0; i < c->num_roots && root < 0; i++)
    if (c->roots[i].instance == instance) root = c->roots[i].root;
  pthread_mutex_unlock(&c->m->mu);
  return root;
}

static void root_learn(FloeCollComm *c, int64_t instance, int root) {
  pthread_mutex_lock(&c->m->mu);
  bool have = false;
  for (int i = 0; i < c->num_roots && !have; i++) have = c->roots[i].instance == instance;
  struct BcastRoot *v = have ? NULL : floe__realloc(c->roots, (size_t)(c->num_roots + 1) * sizeof *v);
  if (v) { /* out of memory: it is read from the store again next time */
    c->roots = v;
    c->roots[c->num_roots++] = (struct BcastRoot){instance, root};
  }
  pthread_mutex_unlock(&c->m->mu);
}

/* The sender announces itself for op's instance (once: later executions find it known).
 * FLOE_OK, or the op failed (done ran). */
static floe_code bcast_announce(CollOp *op) {
  FloeCollComm *c = op->c;
  int me = c->mem->rank;
  int64_t inst = op->rq.instance_key;
  int known = root_known(c, inst);
  if (known == me) return FLOE_OK;
  char key[64], val[16], msg[256];
  bcast_key(op, key, sizeof key);
  snprintf(val, sizeof val, "%d", me);
  floe_code rc = known >= 0 ? FLOE_ALREADY_EXISTS : plug_store_set(c, key, val, strlen(val));
  int other = known;
  if (rc == FLOE_ALREADY_EXISTS && other < 0) { /* announced before: by this rank? */
    void *v = NULL;
    size_t n = 0;
    if (plug_store_get(c, key, 0, &v, &n) == FLOE_OK) other = (int)strtol(v, NULL, 10);
    floe__free(v);
    if (other == me) rc = FLOE_OK;
  }
  if (rc == FLOE_OK) {
    root_learn(c, inst, me);
    return FLOE_OK;
  }
  if (rc == FLOE_ALREADY_EXISTS)
    snprintf(msg, sizeof msg, "%s, instance %lld: rank %d sent this instance's broadcast before, "
             "and now rank %d sends it: one member sends an instance's broadcasts (give each "
             "sender its own instance_key)", c->mem->name, (long long)inst, other, me);
  else
    snprintf(msg, sizeof msg, "could not announce the broadcast's sender in the store (%s)",
             floe_code_name(rc));
  op_done(op, rc == FLOE_ALREADY_EXISTS ? FLOE_INVALID_ARGUMENT : rc, msg);
  return rc;
}

/* Hands op to the ready comm's backend; failures complete it at once. root: the broadcast's
 * (-1: unknown, for the ring, which reads it from its messages). */
static void op_issue(CollOp *op, int root) {
  FloeCollComm *c = op->c;
  FloeCollMgr *m = c->m;
  const FloeCollectiveFns *f = m->backends[c->backend].fns;
  const FloeCollRequest *rq = &op->rq;
  FloeCollectiveDoneFn done = op_backend_done;
  floe_code rc;
  switch (rq->kind) {
  case FLOE__COLL_ALL_REDUCE:
    rc = f->all_reduce(c->comm, rq->in, rq->out, rq->count, rq->dtype, rq->op, op->tag, NULL,
                       done, op);
    break;
  case FLOE__COLL_ALL_GATHER:
    rc = f->all_gather(c->comm, rq->in, rq->out, rq->count, rq->dtype, op->tag, NULL, done, op);
    break;
  case FLOE__COLL_REDUCE_SCATTER:
    rc = f->reduce_scatter(c->comm, rq->in, rq->out, rq->count, rq->dtype, rq->op, op->tag,
                           NULL, done, op);
    break;
  case FLOE__COLL_BCAST_SEND:
    rc = f->broadcast(c->comm, (void *)rq->in, rq->count, rq->dtype, c->mem->rank, op->tag,
                      NULL, done, op);
    break;
  default:
    rc = f->broadcast(c->comm, rq->out, rq->count, rq->dtype, root, op->tag, NULL, done, op);
    break;
  }
  if (rc != FLOE_OK) {
    char msg[200];
    snprintf(msg, sizeof msg, "collective backend \"%s\" refused the %s of %zu %s elements (%s)",
             m->backends[c->backend].name, kind_names[rq->kind], rq->count,
             floe_dtype_name(rq->dtype), floe_code_name(rc));
    op_done(op, rc, msg);
  }
}

/* A plugin's broadcast needs the root on every rank: the sender publishes its rank under
 * the operation's tag and the receivers wait for it here, off the kernel's thread. */
static void *bcast_recv_main(void *p) {
  CollOp *op = p;
  FloeCollComm *c = op->c;
  FloeCollMgr *m = c->m;
  char key[64];
  bcast_key(op, key, sizeof key);
  void *v = NULL;
  size_t n = 0;
  floe_code rc = plug_store_get(c, key, op->rq.timeout_ms > 0 ? op->rq.timeout_ms : -1, &v, &n);
  int root = -1;
  if (rc == FLOE_OK) {
    root = (int)strtol(v, NULL, 10);
    floe__free(v);
    if (root >= 0 && root < c->mem->size) root_learn(c, op->rq.instance_key, root);
  }
  if (rc != FLOE_OK || root < 0 || root >= c->mem->size) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: no rank announced itself as this broadcast's sender (%s): "
             "one member must run CollectiveBcastSend with the same instance_key",
             c->mem->name, floe_code_name(rc == FLOE_OK ? FLOE_INTERNAL : rc));
    op_done(op, rc == FLOE_OK ? FLOE_INTERNAL : rc, msg);
  } else {
    op_issue(op, root);
  }
  thread_end(m);
  return NULL;
}

/* Issues op, whose comm is ready and whose arguments every rank shares. */
static void op_proceed(CollOp *op) {
  FloeCollComm *c = op->c;
  bool plugin = c->backend != 0;
  if (plugin && op->rq.kind == FLOE__COLL_BCAST_SEND && bcast_announce(op) != FLOE_OK) return;
  int root = plugin && op->rq.kind == FLOE__COLL_BCAST_RECV
                 ? root_known(c, op->rq.instance_key) : -1;
  if (root >= 0) {
    op_issue(op, root);
    return;
  }
  if (plugin && op->rq.kind == FLOE__COLL_BCAST_RECV) {
    if (!spawn(c->m, bcast_recv_main, op))
      op_done(op, FLOE_RESOURCE_EXHAUSTED, "cannot start a thread for the broadcast");
    return;
  }
  op_issue(op, -1);
}

/* The manager's checker: one thread for every check of the process, so a step that checks
 * many instances at once (their first execution) costs one thread and one store request at
 * a time, and no check waits behind another (records are read without waiting: a rank's
 * record may come only after another check of its ended). Ends when no check is left. */
static void *checker_main(void *p) {
  FloeCollMgr *m = p;
  int64_t nap_ms = 1;
  pthread_mutex_lock(&m->mu);
  while (m->checks) {
    CollOp *list = m->checks, *left = NULL;
    m->checks = NULL;
    m->checks_added = false;
    pthread_mutex_unlock(&m->mu);
    bool progress = false;
    while (list) {
      CollOp *op = list;
      list = op->next;
      op->next = NULL;
      floe_code rc;
      char msg[1024] = "";
      if (!check_poll(op, &rc, msg, sizeof msg, &progress)) {
        op->next = left;
        left = op;
        continue;
      }
      check_finish(op, rc, msg);
      if (rc == FLOE_OK) op_proceed(op);
      else op_done(op, rc, msg);
      progress = true;
    }
    pthread_mutex_lock(&m->mu);
    while (left) {
      CollOp *op = left;
      left = op->next;
      op->next = m->checks;
      m->checks = op;
    }
    /* The runtime's own store wakes m->cv when a key comes; the cluster's is polled. */
    nap_ms = progress ? 1 : nap_ms < 20 ? nap_ms * 2 : 20;
    if (m->checks && !progress && !m->checks_added) wait_until(m, now_ms() + nap_ms);
  }
  m->checker = false;
  pthread_mutex_unlock(&m->mu);
  thread_end(m);
  return NULL;
}

/* Gives op to the checker (starting it if it does not run). */
static void check_enqueue(CollOp *op) {
  FloeCollMgr *m = op->c->m;
  op->check_deadline = now_ms() + (op->rq.timeout_ms > 0 ? op->rq.timeout_ms
                                                         : FLOE__COLL_TIMEOUT_MS);
  pthread_mutex_lock(&m->mu);
  op->next = m->checks;
  m->checks = op;
  m->checks_added = true;
  bool start = !m->checker;
  m->checker = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (!start || spawn(m, checker_main, m)) return;
  pthread_mutex_lock(&m->mu);
  CollOp *list = m->checks;
  m->checks = NULL;
  m->checker = false;
  pthread_mutex_unlock(&m->mu);
  while (list) {
    CollOp *next = list->next;
    list->next = NULL;
    op_done(list, FLOE_RESOURCE_EXHAUSTED, "cannot start a thread to check the operation's "
                                           "arguments across the ranks");
    list = next;
  }
}

/* Starts op on its comm (ready, or failed: then op fails with the comm's error). */
static void op_start(CollOp *op) {
  FloeCollComm *c = op->c;
  FloeCollMgr *m = c->m;
  pthread_mutex_lock(&m->mu);
  int state = c->state;
  c->inflight++; /* op_done gives it back */
  pthread_mutex_unlock(&m->mu);
  if (state != COMM_READY) {
    op_done(op, c->err ? c->err : FLOE_ABORTED, c->errmsg ? c->errmsg : "the group was aborted");
    return;
  }
  if (op->fail_code != FLOE_OK) {
    op_done(op, op->fail_code, op->fail_msg ? op->fail_msg : "its arguments' check failed");
    return;
  }
  if (op->check) {
    check_enqueue(op);
    return;
  }
  op_proceed(op);
}

typedef struct FormArg {
  FloeCollComm *c;
  int64_t timeout_ms;
  uint64_t generation;
} FormArg;

static void *form_main(void *p) {
  FormArg a = *(FormArg *)p;
  floe__free(p);
  FloeCollComm *c = a.c;
  FloeCollMgr *m = c->m;
  Member *mem = c->mem;
  Backend *b = &m->backends[c->backend];
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = FLOE_OK;

  /* The member's rank: one comm resolves it, the others wait. */
  pthread_mutex_lock(&m->mu);
  while (mem->resolving) pthread_cond_wait(&m->cv, &m->mu);
  bool need = !mem->resolved && mem->err == FLOE_OK;
  if (need) mem->resolving = true;
  pthread_mutex_unlock(&m->mu);
  if (need) {
    rc = resolve_member(m, mem, a.timeout_ms, &st);
    pthread_mutex_lock(&m->mu);
    mem->resolving = false;
    if (rc == FLOE_OK) {
      mem->resolved = true;
    } else {
      mem->err = rc;
      mem->errmsg = floe__strdup(floe_status_message(&st));
    }
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
  }
  pthread_mutex_lock(&m->mu);
  if (mem->err != FLOE_OK && rc == FLOE_OK) {
    rc = mem->err;
    floe_status_set(&st, rc, "%s", mem->errmsg ? mem->errmsg : "the group did not form");
  }
  bool init_backend = rc == FLOE_OK && !b->inited;
  pthread_mutex_unlock(&m->mu);

  if (init_backend) {
    void *ctx = NULL;
    floe_code irc = b->fns->init(floe__host_api(), &ctx);
    pthread_mutex_lock(&m->mu);
    if (irc == FLOE_OK && !b->inited) {
      b->ctx = ctx;
      b->inited = true;
      ctx = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    if (ctx) b->fns->finalize(ctx);
    if (irc != FLOE_OK)
      rc = floe_status_set(&st, irc, "collective backend \"%s\": init failed (%s)", b->name,
                           floe_code_name(irc));
  }
  if (rc == FLOE_OK) {
    /* Plugins' operations are checked across the ranks first (check_plan); the ring checks
     * each transfer's size itself. */
    FloeCollectiveGroup g = {sizeof g, mem->name, mem->rank, mem->size,
                             (const char *const *)mem->devices, &c->store, a.timeout_ms, "",
                             c->backend != 0 ? FLOE_COLLECTIVE_ARGS_VERIFIED : 0};
    pthread_mutex_lock(&m->mu);
    char host[256];
    snprintf(host, sizeof host, "%s", m->has_env ? m->env.host : "127.0.0.1");
    pthread_mutex_unlock(&m->mu);
    g.host = host;
    char msg[512] = "";
    void *comm = NULL;
    rc = b->fns->comm_init(b->ctx, &g, &comm, msg, sizeof msg);
    if (rc == FLOE_OK) {
      c->comm = comm;
    } else {
      floe_status_set(&st, rc, "%s: backend \"%s\" could not connect rank %d (%s): %s",
                      mem->name, b->name, mem->rank, mem->device, *msg ? msg : floe_code_name(rc));
    }
  }

  pthread_mutex_lock(&m->mu);
  if (c->state == COMM_FORMING) {
    if (rc == FLOE_OK) {
      c->state = COMM_READY;
    } else {
      c->state = COMM_FAILED;
      c->err = rc;
      c->errmsg = floe__strdup(floe_status_message(&st));
    }
  }
  CollOp *q = c->queue;
  c->queue = NULL;
  c->queue_tail = &c->queue;
  pthread_mutex_unlock(&m->mu);
  floe_status_clear(&st);
  while (q) {
    CollOp *next = q->next;
    op_start(q);
    q = next;
  }
  pthread_mutex_lock(&m->mu);
  m->threads--;
  c->forming = false;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  floe__coll_comm_release(c);
  return NULL;
}

static Member *member_find_or_add(FloeCollMgr *m, const FloeCollRequest *rq, FloeStatus *st) {
  for (int i = 0; i < m->num_members; i++) {
    Member *mem = m->members[i];
    if (mem->group_key == rq->group_key && strcmp(mem->device, rq->device) == 0) {
      if (mem->size != rq->group_size) {
        floe_status_set(st, FLOE_INVALID_ARGUMENT,
                        "group_key %lld: device %s is in it with group_size %d, so it cannot "
                        "be %d here: give the other group another group_key",
                        (long long)rq->group_key, rq->device, mem->size, rq->group_size);
        return NULL;
      }
      return mem;
    }
  }
  Member **v = floe__realloc(m->members, (size_t)(m->num_members + 1) * sizeof *v);
  if (v) m->members = v;
  Member *mem = floe__calloc(1, sizeof *mem);
  if (!v || !mem || !(mem->device = floe__strdup(rq->device)) ||
      !(mem->name = floe__asprintf("collective group %lld (size %d)", (long long)rq->group_key,
                                   rq->group_size))) {
    if (mem) floe__free(mem->device);
    floe__free(mem);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a collective group");
    return NULL;
  }
  mem->group_key = rq->group_key;
  mem->size = rq->group_size;
  mem->generation = m->generation;
  m->members[m->num_members++] = mem;
  return mem;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* mem's record of instance_key, made on its first execution; NULL without memory. Valid
 * under m->mu until the next call adds one. */
static SeqEntry *seq_entry(Member *mem, int64_t instance_key) {
  SeqEntry *e = seq_find(mem, instance_key);
  if (e) return e;
  SeqEntry *v = floe__realloc(mem->seqs, (size_t)(mem->num_seqs + 1) * sizeof *v);
  if (!v) return NULL;
  mem->seqs = v;
  mem->seqs[mem->num_seqs] = (SeqEntry){.instance_key = instance_key};
  return &mem->seqs[mem->num_seqs++];
}

static int pick_backend(FloeCollMgr *m, const FloeCollRequest *rq, FloeStatus *st) {
  const char *want = rq->hint;
  if (!want || !*want || strcmp(want, "auto") == 0) {
    const char *env = getenv("FLOE_COLLECTIVE");
    want = env && *env ? env : "ring";
  }
  for (int i = 0; i < m->num_backends; i++) {
    if (strcmp(m->backends[i].name, want) != 0) continue;
    if (!(m->backends[i].dtypes & FLOE_DTYPE_BIT(rq->dtype))) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "%s: collective backend \"%s\" does not reduce or move %s values",
                      rq->node, want, floe_dtype_name(rq->dtype));
      return -1;
    }
    return i;
  }
  char list[256];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; i < m->num_backends && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", m->backends[i].name);
    if (w < 0) break;
    used += (size_t)w;
  }
  floe_status_set(st, FLOE_NOT_FOUND,
                  "%s: collective backend \"%s\" is not loaded; loaded: %s (a plugin brings "
                  "its backend: put its directory on FLOE_PLUGIN_PATH)",
                  rq->node, want, list);
  return -1;
}

floe_code floe__collective_memory(FloeRuntime *rt, const FloeCollRequest *rq,
                                 const FloeDevice *dev, bool *on_device, FloeStatus *st) {
  *on_device = false;
  FloeCollMgr *m = mgr_get(rt, st);
  if (!m) return st->code;
  int b = pick_backend(m, rq, st);
  if (b < 0) return st->code;
  const char *want = m->backends[b].device_type;
  if (!want || !*want || strcmp(want, "CPU") == 0) return FLOE_OK; /* host buffers */
  if (!dev->host_memory && strcmp(want, dev->props.type) == 0) {
    *on_device = true;
    return FLOE_OK;
  }
  return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "%s: collective backend \"%s\" works on %s memory and the node is on "
                         "%s (a %s device): place the collective on a %s device, or choose a "
                         "backend for host memory (ring, gloo) in communication_hint",
                         rq->node, m->backends[b].name, want, dev->name, dev->props.type, want);
}

floe_code floe__collective_submit(FloeRuntime *rt, const FloeCollRequest *rq,
                                  FloeCollComm **comm_out, FloeStatus *st) {
  if (comm_out) *comm_out = NULL;
  if (!rq || !rq->done || !rq->device || !rq->node)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "collective request without a device, "
                                                      "node or done callback");
  if (rq->group_size < 1 || rq->group_size > 4096)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: group_size %d: give the number of devices in the group (1 to "
                           "4096)", rq->node, rq->group_size);
  FloeCollMgr *m = mgr_get(rt, st);
  if (!m) return st->code;
  int b = pick_backend(m, rq, st);
  if (b < 0) return st->code;
  int64_t timeout = rq->timeout_ms > 0 ? rq->timeout_ms : FLOE__COLL_TIMEOUT_MS;

  CollOp *op = floe__calloc(1, sizeof *op);
  if (!op || !(op->node = floe__strdup(rq->node))) {
    floe__free(op);
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", rq->node);
  }
  op->rq = *rq;
  op->rq.node = op->node;
  op->rq.device = NULL;
  op->rq.hint = NULL;

  pthread_mutex_lock(&m->mu);
  Member *mem = member_find_or_add(m, rq, st);
  if (!mem) goto err_unlock;
  SeqEntry *e = seq_entry(mem, rq->instance_key);
  if (!e) {
    floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory for a collective instance", rq->node);
    goto err_unlock;
  }
  op->seq = e->count++; /* the execution: the same number on every rank */
  op->tag = mix64((uint64_t)rq->instance_key ^ mix64(op->seq)) & ~FLOE_TRANSPORT_TAG_RESERVED;
  FloeCollComm *c = NULL;
  for (int i = 0; i < m->num_comms && !c; i++)
    if (m->comms[i]->mem == mem && m->comms[i]->backend == b) c = m->comms[i];
  if (!c) {
    FloeCollComm **v = floe__realloc(m->comms, (size_t)(m->num_comms + 1) * sizeof *v);
    if (v) m->comms = v;
    FormArg *fa = floe__malloc(sizeof *fa);
    c = floe__calloc(1, sizeof *c);
    if (!v || !fa || !c) {
      floe__free(fa);
      floe__free(c);
      floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", rq->node);
      goto err_unlock;
    }
    atomic_init(&c->refs, 2); /* the list's and the forming thread's */
    c->m = m;
    c->mem = mem;
    c->backend = b;
    c->state = COMM_FORMING;
    c->forming = true;
    c->queue_tail = &c->queue;
    c->store = (FloeCollectiveStore){sizeof c->store, plug_store_set, plug_store_get, c,
                                     plug_store_erase};
    *fa = (FormArg){c, timeout, m->generation};
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&th, &attr, form_main, fa);
    pthread_attr_destroy(&attr);
    if (err) {
      floe__free(fa);
      floe__free(c);
      floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "%s: cannot start a thread to form %s",
                      rq->node, mem->name);
      goto err_unlock;
    }
    m->threads++;
    m->comms[m->num_comms++] = c;
  }
  atomic_fetch_add(&c->refs, 1); /* the op's */
  op->c = c;
  if (comm_out) {
    atomic_fetch_add(&c->refs, 1);
    *comm_out = c;
  }
  /* Only now: an op that failed above never becomes e->checking. */
  CollOp *check = b != 0 && mem->size > 1 ? check_plan(e, op) : NULL;
  if (check) { /* starts when the check of the same arguments ends */
    CollOp **w = &check->waiters;
    while (*w) w = &(*w)->next;
    *w = op;
    pthread_mutex_unlock(&m->mu);
    return FLOE_OK;
  }
  if (c->state == COMM_FORMING) {
    *c->queue_tail = op;
    c->queue_tail = &op->next;
    pthread_mutex_unlock(&m->mu);
    return FLOE_OK;
  }
  pthread_mutex_unlock(&m->mu);
  op_start(op);
  return FLOE_OK;

err_unlock:
  pthread_mutex_unlock(&m->mu);
  op_free(op);
  return st->code;
}

void floe__coll_comm_abort(FloeCollComm *c, const char *why) {
  if (!c) return;
  FloeCollMgr *m = c->m;
  pthread_mutex_lock(&m->mu);
  void *comm = NULL;
  if (c->state != COMM_FAILED && c->mem) {
    if (c->state == COMM_READY) comm = c->comm;
    c->state = COMM_FAILED;
    c->err = FLOE_ABORTED;
    c->errmsg = floe__asprintf("%s was aborted: %s", c->mem->name, why ? why : "no reason given");
  }
  const FloeCollectiveFns *f = m->backends[c->backend].fns;
  pthread_mutex_unlock(&m->mu);
  if (comm && f->comm_abort) f->comm_abort(comm);
}

static void member_free(Member *mem) {
  if (mem->devices)
    for (int j = 0; j < mem->size; j++) floe__free(mem->devices[j]);
  floe__free(mem->devices);
  floe__free(mem->device);
  floe__free(mem->name);
  floe__free(mem->errmsg);
  for (int i = 0; i < mem->num_seqs; i++) floe__free(mem->seqs[i].check_err);
  floe__free(mem->seqs);
  floe__free(mem);
}

/* Frees comms (and their members) whose operations are all done; keeps the others in
 * m->zombies for later (a send stuck on a hung peer ends when the transport closes). Takes
 * and gives back m->mu. wait_ms: how long to wait for operations to end first. */
static void reap(FloeCollMgr *m, FloeCollComm **comms, int n, Member **members, int nm,
                 int64_t wait_ms) {
  int64_t deadline = now_ms() + wait_ms;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    bool busy = false;
    for (int i = 0; i < n && !busy; i++) busy = comms[i]->inflight > 0 || comms[i]->forming;
    if (!busy || !wait_until(m, deadline)) break;
  }
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < n; i++) {
    FloeCollComm *c = comms[i];
    pthread_mutex_lock(&m->mu);
    bool busy = c->inflight > 0 || c->forming;
    if (busy) {
      FloeCollComm **z = floe__realloc(m->zombies, (size_t)(m->num_zombies + 1) * sizeof *z);
      if (z) {
        m->zombies = z;
        m->zombies[m->num_zombies++] = c;
      }
      /* Without memory for the list the comm is leaked rather than freed under its ops. */
    }
    pthread_mutex_unlock(&m->mu);
    if (busy) continue;
    if (c->comm) m->backends[c->backend].fns->comm_free(c->comm);
    c->comm = NULL;
    c->mem = NULL;
    floe__coll_comm_release(c);
  }
  /* A zombie's member stays: its ops may still read it. */
  for (int i = 0; i < nm; i++) {
    bool used = false;
    pthread_mutex_lock(&m->mu);
    for (int j = 0; j < m->num_zombies && !used; j++) used = m->zombies[j]->mem == members[i];
    if (used) {
      Member **v = floe__realloc(m->zombie_members,
                                 (size_t)(m->num_zombie_members + 1) * sizeof *v);
      if (v) {
        m->zombie_members = v;
        m->zombie_members[m->num_zombie_members++] = members[i];
      }
    }
    pthread_mutex_unlock(&m->mu);
    if (!used) member_free(members[i]);
  }
}

floe_code floe__collective_set_env(FloeRuntime *rt, const FloeCollEnv *env, const char *why,
                                   FloeStatus *st) {
  FloeCollMgr *m = mgr_get(rt, st);
  if (!m) return st->code;
  /* Abort and forget every group of the old store. */
  pthread_mutex_lock(&m->mu);
  int n = m->num_comms;
  FloeCollComm **comms = m->comms;
  Member **members = m->members;
  int num_members = m->num_members;
  m->comms = NULL;
  m->num_comms = 0;
  m->members = NULL;
  m->num_members = 0;
  m->generation++;
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < n; i++) floe__coll_comm_abort(comms[i], why);
  reap(m, comms, n, members, num_members, 5000);
  floe__free(comms);
  floe__free(members);
  pthread_mutex_lock(&m->mu);
  if (env) {
    m->env = *env;
    m->has_env = true;
  } else {
    memset(&m->env, 0, sizeof m->env);
    m->has_env = false;
  }
  pthread_mutex_unlock(&m->mu);
  return FLOE_OK;
}

void floe__collective_mgr_stop(FloeRuntime *rt) {
  if (!atomic_load(&rt->coll_mgr)) return;
  FloeStatus st = {FLOE_OK, NULL};
  floe__collective_set_env(rt, NULL, "the runtime is being freed", &st);
  floe_status_clear(&st);
}

void floe__collective_mgr_free(FloeRuntime *rt) {
  FloeCollMgr *m = atomic_load(&rt->coll_mgr);
  if (!m) return;
  /* The transport is closed: what the zombies waited for has completed or was cancelled. */
  FloeCollComm **z = m->zombies;
  Member **zm = m->zombie_members;
  int nz = m->num_zombies, nzm = m->num_zombie_members;
  m->zombies = NULL;
  m->zombie_members = NULL;
  m->num_zombies = m->num_zombie_members = 0;
  reap(m, z, nz, zm, nzm, 60000);
  floe__free(z);
  floe__free(zm);
  /* Threads of the manager's (forming, broadcast receivers) end within a store wait's slice
   * of the reset; none may outlive m. */
  pthread_mutex_lock(&m->mu);
  while (m->threads > 0) pthread_cond_wait(&m->cv, &m->mu);
  pthread_mutex_unlock(&m->mu);
  for (int i = 1; i < m->num_backends; i++)
    if (m->backends[i].inited) m->backends[i].fns->finalize(m->backends[i].ctx);
  for (int i = 0; i < m->num_kv; i++) {
    floe__free(m->kv[i].key);
    floe__free(m->kv[i].value);
  }
  floe__free(m->kv);
  floe__free(m->backends);
  floe__free(m->zombies);
  floe__free(m->zombie_members);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  atomic_store(&rt->coll_mgr, NULL);
  floe__free(m);
}
