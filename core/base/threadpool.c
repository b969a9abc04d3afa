/* SPDX-License-Identifier: Apache-2.0 */
/* threadpool.c - the inter-op / intra-op thread pool.
 *
 * N workers share two FIFOs of (fn, arg) tasks, each a power-of-two ring, under one mutex:
 * the normal queue and a deferred one, taken from only when the normal queue is empty (work
 * nothing else in a step waits for, such as a variable's update, so that it fills idle
 * threads instead of delaying the step's critical path). The rings are preallocated so
 * scheduling does not allocate (one only grows, by doubling, when more tasks are queued than
 * ever before). Idle workers sleep on one condition
 * variable and a schedule wakes at most one of them, and only when one is idle. The lock
 * is held only for a few loads and stores, so it spins briefly before sleeping (adaptive):
 * with tasks of a microsecond, a worker put to sleep on a busy lock costs more than the task.
 *
 * A worker that finds no task, and a parallel_for caller waiting for its helpers, first spin
 * for a while (FLOE_POOL_SPIN_US, 1000 us by default; 0: never) before sleeping: a kernel of
 * tens of microseconds that hands half its work to a sleeping thread would wait longer for
 * the wake-up than for the work (batch-1 inference: one step is a chain of such kernels). On
 * a virtual machine whose host is busy, a sleeping thread's virtual CPU halts and takes
 * hundreds of microseconds to come back: 50 us of spinning left a batch-1 ResNet step at
 * 2.6-2.9 ms where 1000 us gave 2.0-2.1 ms in the same minutes (equal when the host is
 * quiet). An idle worker burns at most that long after its last task. The spin reads one
 * atomic and pauses; the decision to sleep is still taken under the lock, so no wake-up is
 * lost.
 *
 * Workers are pinned, each to one of the CPUs the process may run on, taken in turn across
 * every pool of the process, when a pool has no more workers than there are such CPUs
 * (FLOE_POOL_PIN=0: never). Unpinned, the scheduler's wake-ups pulled the two workers of a
 * batch-1 step onto one virtual CPU, the chain's thread sharing it with a spinning helper,
 * for tens of steps at a time: MobileNetV3-small's p90 step 1.8-3.9 ms against a median of
 * 1.3, and 1.3-1.5 ms pinned (2 vCPUs). Placing them apart only at the start did not last.
 *
 * parallel_for splits [0, n) into shards claimed from an atomic range, from its front by the
 * caller and from its back by helper tasks. When the caller runs out of shards it withdraws the helpers still
 * queued (they become tombstones) and waits only for helpers already running shards, so a
 * parallel_for called from inside a worker never waits on queued work and cannot deadlock,
 * even on a pool of one thread.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"

typedef struct PoolTask {
  FloeTaskFn fn; /* NULL: a withdrawn parallel_for helper (skipped) */
  void *arg;
} PoolTask;

typedef struct TaskRing {
  PoolTask *ring; /* capacity a power of two */
  size_t cap, head, count;
} TaskRing;

struct FloeThreadPool {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;  /* workers wait here for tasks */
  TaskRing q[2];           /* [0] normal, [1] deferred */
  int idle;                /* workers waiting on work_cv */
  atomic_size_t queued;    /* entries of q[0] and q[1] (tombstones too), read by spinners */
  atomic_int spinners;     /* idle workers spinning now */
  int64_t spin_ns;         /* how long an idle thread spins before sleeping */
  bool stop;
  int num_threads;
  int started;             /* workers actually created (for cleanup) */
  pthread_t *threads;
};

/* The pool whose worker this thread is (NULL on other threads). */
static _Thread_local FloeThreadPool *tls_worker_pool;
/* The pool this thread's parallel work goes to: its own pool on a worker, the running step's
 * on a thread that runs one (floe__pool_set_current), else NULL. */
static _Thread_local FloeThreadPool *tls_current_pool;

enum { POOL_INITIAL_CAP = 1024 };

/* Pops the next live task, normal ones first; the caller holds p->mu. False when both
 * queues are empty. */
static bool pop_locked(FloeThreadPool *p, PoolTask *out) {
  for (int k = 0; k < 2; k++) {
    TaskRing *q = &p->q[k];
    while (q->count > 0) {
      PoolTask t = q->ring[q->head];
      q->head = (q->head + 1) & (q->cap - 1);
      q->count--;
      atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
      if (t.fn) {
        *out = t;
        return true;
      }
    }
  }
  return false;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Spins up to ns nanoseconds until *v (an atomic count) is zero (want_zero) or non-zero;
 * true when it happened. */
static bool spin_until(const atomic_size_t *v, bool want_zero, int64_t ns) {
  if (ns <= 0) return false;
  int64_t end = now_ns() + ns;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      bool zero = atomic_load_explicit(v, memory_order_acquire) == 0;
      if (zero == want_zero) return true;
      cpu_relax();
    }
    if (now_ns() >= end) return false;
  }
}

/* FLOE_POOL_SPIN_US, else 1000 (microseconds an idle thread spins before sleeping). */
#define POOL_SPIN_US_DEFAULT 1000
static int64_t spin_setting(void) {
  const char *e = getenv("FLOE_POOL_SPIN_US");
  char *end;
  long v = e && *e ? strtol(e, &end, 10) : POOL_SPIN_US_DEFAULT;
  if (e && *e && (*end || v < 0)) v = POOL_SPIN_US_DEFAULT;
  if (v > 100000) v = 100000;
  return (int64_t)v * 1000;
}

static void *worker_main(void *arg) {
  FloeThreadPool *p = arg;
  tls_worker_pool = p;
  tls_current_pool = p;
  pthread_mutex_lock(&p->mu);
  bool spun = false; /* spun since the last task: sleep when none came */
  for (;;) {
    PoolTask t;
    if (pop_locked(p, &t)) {
      pthread_mutex_unlock(&p->mu);
      t.fn(t.arg);
      pthread_mutex_lock(&p->mu);
      spun = false;
      continue;
    }
    if (p->stop) break;
    /* At most num_threads - 1 spinners: the thread that hands out work (often the caller
     * of a step, not a worker) keeps a core of its own. */
    if (!spun && p->spin_ns > 0 &&
        atomic_fetch_add_explicit(&p->spinners, 1, memory_order_relaxed) < p->num_threads - 1) {
      pthread_mutex_unlock(&p->mu);
      spin_until(&p->queued, false, p->spin_ns);
      atomic_fetch_sub_explicit(&p->spinners, 1, memory_order_relaxed);
      pthread_mutex_lock(&p->mu);
      spun = true;
      continue; /* a task that came meanwhile is popped under the lock */
    }
    if (!spun && p->spin_ns > 0) atomic_fetch_sub_explicit(&p->spinners, 1, memory_order_relaxed);
    spun = false;
    p->idle++;
    pthread_cond_wait(&p->work_cv, &p->mu);
    p->idle--;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Doubles the ring, unwrapping it; the caller holds p->mu. */
static floe_code grow_locked(TaskRing *q) {
  PoolTask *ring = floe__malloc(2 * q->cap * sizeof *ring);
  if (!ring) return FLOE_NO_MEMORY;
  for (size_t i = 0; i < q->count; i++) ring[i] = q->ring[(q->head + i) & (q->cap - 1)];
  floe__free(q->ring);
  q->ring = ring;
  q->cap *= 2;
  q->head = 0;
  return FLOE_OK;
}

/* Queues (fn, args[i]) for i < n, or n copies of (fn, arg) when args is NULL, on queue k
 * under one lock, and wakes up to n idle workers. */
static floe_code push_n(FloeThreadPool *p, int k, FloeTaskFn fn, void *const *args, void *arg,
                        int n) {
  TaskRing *q = &p->q[k];
  pthread_mutex_lock(&p->mu);
  while (q->count + (size_t)n > q->cap) {
    if (grow_locked(q) != FLOE_OK) {
      pthread_mutex_unlock(&p->mu);
      return FLOE_NO_MEMORY;
    }
  }
  for (int i = 0; i < n; i++) {
    q->ring[(q->head + q->count) & (q->cap - 1)] = (PoolTask){fn, args ? args[i] : arg};
    q->count++;
  }
  atomic_fetch_add_explicit(&p->queued, (size_t)n, memory_order_release);
  int wake = n < p->idle ? n : p->idle;
  for (int i = 0; i < wake; i++) pthread_cond_signal(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  return FLOE_OK;
}

/* The next CPU a pinned worker takes, counted across the process's pools. */
static atomic_int next_pin;

/* Pins thread t to one of the CPUs the process may run on (in turn), unless FLOE_POOL_PIN=0
 * or the pool has more workers than those CPUs. A failure leaves the thread unpinned. */
static void pin_worker(pthread_t t, int num_threads) {
  const char *e = getenv("FLOE_POOL_PIN");
  cpu_set_t allowed, one;
  if ((e && strcmp(e, "0") == 0) || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return;
  int n = CPU_COUNT(&allowed);
  if (n < 2 || num_threads > n) return;
  int k = atomic_fetch_add_explicit(&next_pin, 1, memory_order_relaxed) % n;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed) && k-- == 0) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      pthread_setaffinity_np(t, sizeof one, &one);
      return;
    }
}

/* Caller owns the pool; free with floe__pool_free. num_threads < 1 is taken as 1. */
FloeThreadPool *floe__pool_new(int num_threads, FloeStatus *st) {
  if (num_threads < 1) num_threads = 1;
  FloeThreadPool *p = floe__calloc(1, sizeof *p);
  if (!p) goto err_oom;
  p->num_threads = num_threads;
  atomic_init(&p->queued, 0);
  atomic_init(&p->spinners, 0);
  p->spin_ns = spin_setting();
  for (int k = 0; k < 2; k++) {
    p->q[k].cap = POOL_INITIAL_CAP;
    p->q[k].ring = floe__malloc(p->q[k].cap * sizeof *p->q[k].ring);
  }
  if (!p->q[0].ring || !p->q[1].ring) goto err_free_ring;
  p->threads = floe__calloc((size_t)num_threads, sizeof *p->threads);
  if (!p->threads) goto err_free_ring;
  pthread_mutexattr_t ma;
  if (pthread_mutexattr_init(&ma) != 0) goto err_free_threads;
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  int mrc = pthread_mutex_init(&p->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  if (mrc != 0) goto err_free_threads;
  if (pthread_cond_init(&p->work_cv, NULL) != 0) goto err_destroy_mu;
  for (int i = 0; i < num_threads; i++) {
    int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
    if (rc != 0) {
      floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                      "cannot start thread %d of %d of the thread pool: %s (lower "
                      "FLOE_NUM_THREADS)",
                      i + 1, num_threads, strerror(rc));
      floe__pool_free(p);
      return NULL;
    }
    p->started++;
    pin_worker(p->threads[i], num_threads);
  }
  return p;

err_destroy_mu:
  pthread_mutex_destroy(&p->mu);
err_free_threads:
  floe__free(p->threads);
err_free_ring:
  floe__free(p->q[0].ring);
  floe__free(p->q[1].ring);
  floe__free(p);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a thread pool of %d threads",
                  num_threads);
  return NULL;
}

/* Runs every task still queued, then joins the workers and frees p. NULL is a no-op. */
void floe__pool_free(FloeThreadPool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->work_cv);
  pthread_mutex_destroy(&p->mu);
  floe__free(p->threads);
  floe__free(p->q[0].ring);
  floe__free(p->q[1].ring);
  floe__free(p);
}

/* Worker threads of p (1 for NULL, which runs everything inline). */
int floe__pool_size(const FloeThreadPool *p) { return p ? p->num_threads : 1; }

/* fn(arg) runs later on a worker. FLOE_NO_MEMORY only when the queue had to grow and could
 * not (the task is then not queued: the caller may run it itself). */
floe_code floe__pool_schedule(FloeThreadPool *p, FloeTaskFn fn, void *arg) {
  if (!p || !fn) return FLOE_INVALID_ARGUMENT;
  return push_n(p, 0, fn, NULL, arg, 1);
}

/* fn(args[i]) for each i < n runs later on a worker; one lock for all. FLOE_NO_MEMORY only
 * when the queue had to grow and could not: then none was queued. */
floe_code floe__pool_schedule_batch(FloeThreadPool *p, FloeTaskFn fn, void *const *args, int n) {
  if (!p || !fn || n < 0 || (n > 0 && !args)) return FLOE_INVALID_ARGUMENT;
  return n ? push_n(p, 0, fn, args, NULL, n) : FLOE_OK;
}

/* As floe__pool_schedule_batch, on the deferred queue: run only when no normal task waits. */
floe_code floe__pool_schedule_deferred(FloeThreadPool *p, FloeTaskFn fn, void *const *args,
                                       int n) {
  if (!p || !fn || n < 0 || (n > 0 && !args)) return FLOE_INVALID_ARGUMENT;
  return n ? push_n(p, 1, fn, args, NULL, n) : FLOE_OK;
}

/* True on one of p's own worker threads. */
bool floe__pool_in_worker(const FloeThreadPool *p) { return p && tls_worker_pool == p; }

void floe__pool_set_current(FloeThreadPool *p) { tls_current_pool = p; }
FloeThreadPool *floe__pool_current(void) { return tls_current_pool; }

/* Runs one queued task of p on the calling thread (a waiter lending a hand); false when the
 * queue was empty. */
bool floe__pool_help(FloeThreadPool *p) {
  if (!p) return false;
  PoolTask t;
  pthread_mutex_lock(&p->mu);
  bool got = pop_locked(p, &t);
  pthread_mutex_unlock(&p->mu);
  if (got) t.fn(t.arg);
  return got;
}

/* ---- parallel_for ---- */

typedef struct ParallelJob {
  FloeParallelFn fn;
  void *arg;
  int64_t n, shard;    /* units in all, units per shard */
  int64_t num_shards;
  /* Shards not yet claimed: [low 32 bits, high 32 bits). The caller claims from the front,
   * helpers from the back, so each thread's shards are contiguous: the caller's share of
   * the output is the first part, as the parts of the kernel before it were. */
  atomic_ullong left;
  FloeThreadPool *pool;
  atomic_size_t helpers_out; /* helpers queued or running; changed under pool->mu */
  bool waiting;        /* the caller sleeps on done_cv; guarded by pool->mu */
  pthread_cond_t done_cv;
} ParallelJob;

static void run_shards(ParallelJob *j, bool front) {
  for (;;) {
    unsigned long long v = atomic_load_explicit(&j->left, memory_order_relaxed), w;
    int64_t s;
    do {
      uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
      if (lo >= hi) return;
      s = front ? lo : hi - 1;
      w = front ? ((unsigned long long)hi << 32) | (lo + 1)
                : ((unsigned long long)(hi - 1) << 32) | lo;
    } while (!atomic_compare_exchange_weak_explicit(&j->left, &v, w, memory_order_relaxed,
                                                    memory_order_relaxed));
    int64_t begin = s * j->shard;
    int64_t end = begin + j->shard < j->n ? begin + j->shard : j->n;
    j->fn(j->arg, begin, end);
  }
}

static void parallel_helper(void *arg) {
  ParallelJob *j = arg;
  run_shards(j, false);
  FloeThreadPool *p = j->pool;
  pthread_mutex_lock(&p->mu);
  /* The caller cannot return (and pop j off its stack) before we unlock. */
  if (atomic_fetch_sub_explicit(&j->helpers_out, 1, memory_order_release) == 1 && j->waiting)
    pthread_cond_signal(&j->done_cv);
  pthread_mutex_unlock(&p->mu);
}

/* Work worth one shard, in cost units (about 10 us): below it threads cost more than they
 * save. */
enum { SHARD_MIN_COST = 10000 };

/* Shards for n units of cost_per_unit each (0: unknown, taken as expensive). */
static int64_t shard_count(const FloeThreadPool *p, int64_t n, int64_t cost_per_unit) {
  int64_t participants = (int64_t)floe__pool_size(p) + 1;
  int64_t max_shards = 4 * participants; /* a few per thread smooths uneven shards */
  int64_t shards;
  if (cost_per_unit <= 0) {
    shards = max_shards;
  } else {
    int64_t per_shard = SHARD_MIN_COST / cost_per_unit;
    if (per_shard < 1) per_shard = 1;
    shards = n / per_shard;
  }
  if (shards > max_shards) shards = max_shards;
  if (shards > n) shards = n;
  return shards < 1 ? 1 : shards;
}

/* Runs fn over [0, n) in shards on the pool and the calling thread; returns when every
 * shard is done. Safe from inside a worker of p (nested loops run on the caller if no
 * worker is free). p may be NULL (runs inline). */
void floe__pool_parallel_for(FloeThreadPool *p, int64_t n, int64_t cost_per_unit,
                             FloeParallelFn fn, void *arg) {
  if (n <= 0) return;
  int64_t shards = p ? shard_count(p, n, cost_per_unit) : 1;
  if (shards <= 1) {
    fn(arg, 0, n);
    return;
  }
  ParallelJob j = {.fn = fn, .arg = arg, .n = n, .pool = p};
  atomic_init(&j.helpers_out, 0);
  j.shard = (n + shards - 1) / shards;
  j.num_shards = (n + j.shard - 1) / j.shard;
  atomic_init(&j.left, (unsigned long long)j.num_shards << 32);
  int helpers = j.num_shards - 1 < p->num_threads ? (int)(j.num_shards - 1) : p->num_threads;
  if (pthread_cond_init(&j.done_cv, NULL) != 0) helpers = 0;
  if (helpers > 0) {
    atomic_store_explicit(&j.helpers_out, (size_t)helpers, memory_order_relaxed);
    /* Without queue space the caller simply runs every shard itself. */
    if (push_n(p, 0, parallel_helper, NULL, &j, helpers) != FLOE_OK)
      atomic_store_explicit(&j.helpers_out, 0, memory_order_relaxed);
  }
  run_shards(&j, true);
  if (helpers <= 0) return;
  pthread_mutex_lock(&p->mu);
  /* Withdraw helpers that never started: they would find no shard left anyway. */
  TaskRing *q = &p->q[0];
  for (size_t i = 0; i < q->count && atomic_load(&j.helpers_out) > 0; i++) {
    PoolTask *t = &q->ring[(q->head + i) & (q->cap - 1)];
    if (t->fn == parallel_helper && t->arg == &j) {
      t->fn = NULL;
      atomic_fetch_sub_explicit(&j.helpers_out, 1, memory_order_relaxed);
    }
  }
  if (atomic_load(&j.helpers_out) > 0) {
    /* Helpers still running their last shard: spin for them before sleeping. The lock is
     * taken again either way, so j outlives the helper's unlock. */
    pthread_mutex_unlock(&p->mu);
    spin_until(&j.helpers_out, true, p->spin_ns);
    pthread_mutex_lock(&p->mu);
  }
  j.waiting = true;
  while (atomic_load(&j.helpers_out) > 0) pthread_cond_wait(&j.done_cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_cond_destroy(&j.done_cv);
}
