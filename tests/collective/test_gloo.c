/* SPDX-License-Identifier: Apache-2.0 */
/* test_gloo.c - the Gloo collective backend (plugins/collective/gloo) through the plugin ABI:
 * the runtime loads floe-collective-gloo.so, and the test drives the FloeCollectiveFns it
 * registered with groups of 2, 3 and 4 ranks, each rank a thread of this process meeting the
 * others through an in-memory store (what the core's in-process table gives a backend).
 *
 * Expected values are computed here, element by element, from the inputs each rank made
 * (small integers, so every dtype holds them and the sums exactly; products of 1s and 2s);
 * f16 values are encoded and decoded by the test's own plain conversions. Skips (exit 77)
 * when the plugin was not built (configure found no libgloo-dev). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

#define PLUGIN_FILE "floe-collective-gloo.so"
#define OP_WAIT_MS 30000 /* a done that has not come by then is a failure (no hang) */

static const FloeHostApi *host;
static const FloeCollectiveFns *fns;
static void *backend;
static FloeRuntime *rt;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---------------------------------------------------------------------------------------- */
/* The store: one table per group, shared by its rank threads. */

typedef struct Entry {
  char *key;
  void *value;
  size_t len;
  struct Entry *next;
} Entry;

typedef struct Store {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Entry *entries;
  int64_t timeout_ms;
  int sets, gets;
} Store;

static floe_code store_set(void *arg, const char *key, const void *value, size_t len) {
  Store *s = arg;
  pthread_mutex_lock(&s->mu);
  s->sets++;
  for (Entry *e = s->entries; e; e = e->next)
    if (strcmp(e->key, key) == 0) {
      pthread_mutex_unlock(&s->mu);
      return FLOE_ALREADY_EXISTS;
    }
  Entry *e = calloc(1, sizeof *e);
  e->key = strdup(key);
  e->value = malloc(len ? len : 1);
  memcpy(e->value, value, len);
  e->len = len;
  e->next = s->entries;
  s->entries = e;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return FLOE_OK;
}

static floe_code store_get(void *arg, const char *key, int64_t timeout_ms, void **value,
                           size_t *len) {
  Store *s = arg;
  if (timeout_ms < 0) timeout_ms = s->timeout_ms;
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (timeout_ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&s->mu);
  s->gets++;
  for (;;) {
    for (Entry *e = s->entries; e; e = e->next)
      if (strcmp(e->key, key) == 0) {
        char *v = host->alloc(e->len + 1);
        memcpy(v, e->value, e->len);
        v[e->len] = 0;
        *value = v;
        *len = e->len;
        pthread_mutex_unlock(&s->mu);
        return FLOE_OK;
      }
    if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) {
      pthread_mutex_unlock(&s->mu);
      return FLOE_DEADLINE_EXCEEDED;
    }
  }
}

static void store_init(Store *s, int64_t timeout_ms) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->timeout_ms = timeout_ms;
}

static void store_destroy(Store *s) {
  for (Entry *e = s->entries, *next; e; e = next) {
    next = e->next;
    free(e->key);
    free(e->value);
    free(e);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
}

/* ---------------------------------------------------------------------------------------- */
/* Groups: size threads, each joins with comm_init, then runs the scenario with its comm. */

typedef struct Group Group;
typedef void (*RankFn)(Group *g, int rank, void *comm);

struct Group {
  char name[64];
  int size;
  int joining;             /* ranks that call comm_init (< size: the others never come) */
  int64_t timeout_ms;
  size_t group_bytes;      /* FloeCollectiveGroup's struct_size given (1.5's is shorter) */
  uint32_t flags;          /* FloeCollectiveGroup.flags given */
  Store store;
  FloeCollectiveStore cstore;
  const char *devices[8];
  pthread_barrier_t barrier;
  RankFn fn;
  void *arg;
  void *comm[8];
  floe_code init_rc[8];
  char init_msg[8][512];
  double init_ms[8];
  pthread_mutex_t err_mu;
  char err[1024];          /* the first failed expectation (checked on the main thread) */
};

typedef struct RankArg {
  Group *g;
  int rank;
} RankArg;

static void group_fail(Group *g, const char *fmt, ...) {
  pthread_mutex_lock(&g->err_mu);
  if (!g->err[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&g->err_mu);
}

static void *rank_main(void *p) {
  RankArg *a = p;
  Group *g = a->g;
  FloeCollectiveGroup cg;
  memset(&cg, 0, sizeof cg);
  cg.struct_size = g->group_bytes;
  cg.flags = g->flags;
  cg.name = g->name;
  cg.rank = a->rank;
  cg.size = g->size;
  cg.devices = g->devices;
  cg.store = &g->cstore;
  cg.timeout_ms = g->timeout_ms;
  cg.host = "127.0.0.1";
  double t0 = now_ms();
  g->init_rc[a->rank] =
      fns->comm_init(backend, &cg, &g->comm[a->rank], g->init_msg[a->rank], sizeof g->init_msg[0]);
  g->init_ms[a->rank] = now_ms() - t0;
  if (g->init_rc[a->rank] == FLOE_OK && g->fn) {
    pthread_barrier_wait(&g->barrier);
    g->fn(g, a->rank, g->comm[a->rank]);
  }
  return NULL;
}

static void group_init(Group *g, int size, int64_t timeout_ms, const char *label) {
  static int serial;
  memset(g, 0, sizeof *g);
  snprintf(g->name, sizeof g->name, "test group %d (%s)", ++serial, label);
  g->size = g->joining = size;
  g->timeout_ms = timeout_ms;
  g->group_bytes = sizeof(FloeCollectiveGroup);
  store_init(&g->store, timeout_ms);
  g->cstore.struct_size = sizeof g->cstore;
  g->cstore.set = store_set;
  g->cstore.get = store_get;
  g->cstore.arg = &g->store;
  for (int r = 0; r < size; r++) g->devices[r] = "/job:localhost/replica:0/task:0/device:CPU:0";
  pthread_mutex_init(&g->err_mu, NULL);
}

/* Runs fn on every joining rank (after all joined), then frees the comms. Returns when every
 * rank thread has ended. */
static void group_run(Group *g, RankFn fn) {
  pthread_t th[8];
  RankArg args[8];
  g->fn = fn;
  pthread_barrier_init(&g->barrier, NULL, (unsigned)g->joining);
  for (int r = 0; r < g->joining; r++) {
    args[r].g = g;
    args[r].rank = r;
    ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < g->joining; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < g->joining; r++)
    if (g->comm[r]) fns->comm_free(g->comm[r]);
  pthread_barrier_destroy(&g->barrier);
}

static void group_destroy(Group *g) {
  store_destroy(&g->store);
  pthread_mutex_destroy(&g->err_mu);
}

static void group_check(Group *g) {
  for (int r = 0; r < g->joining; r++)
    ck_assert_msg(g->init_rc[r] == FLOE_OK, "%s rank %d: comm_init: %s (%s)", g->name, r,
                  floe_code_name(g->init_rc[r]), g->init_msg[r]);
  ck_assert_msg(!g->err[0], "%s: %s", g->name, g->err);
}

/* ---------------------------------------------------------------------------------------- */
/* Completions. */

typedef struct Done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  floe_code code;
  char msg[1024];
} Done;

static void done_init(Done *d) {
  memset(d, 0, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
}

static void done_destroy(Done *d) {
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
}

static void on_done(void *arg, floe_code code, const char *msg) {
  Done *d = arg;
  pthread_mutex_lock(&d->mu);
  if (d->calls++ == 0) {
    d->code = code;
    snprintf(d->msg, sizeof d->msg, "%s", msg ? msg : "");
  }
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* The code done reported, or -1 when it did not come within ms. */
static int done_wait(Done *d, int ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += ms / 1000;
  dl.tv_nsec += (long)(ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&d->mu);
  while (d->calls == 0)
    if (pthread_cond_timedwait(&d->cv, &d->mu, &dl) == ETIMEDOUT) break;
  int rc = d->calls ? (int)d->code : -1;
  pthread_mutex_unlock(&d->mu);
  return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Values: the test's own encodings of every dtype. */

static const FloeDType kDtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                    FLOE_I32, FLOE_I64, FLOE_U8,  FLOE_I8};
static const FloeReduceOp kOps[] = {FLOE_REDUCE_SUM, FLOE_REDUCE_MEAN, FLOE_REDUCE_MAX,
                                    FLOE_REDUCE_MIN, FLOE_REDUCE_PROD};
static const char *op_name(FloeReduceOp op) {
  static const char *n[] = {"SUM", "MEAN", "MAX", "MIN", "PROD"};
  return n[op];
}

static size_t esize(FloeDType dt) { return host->dtype_size(dt); }

/* Half precision by its definition: sign, 5-bit exponent (bias 15), 10-bit fraction. Exact
 * for the test's inputs; outputs of MEAN are compared with a tolerance. */
static uint16_t to_half(double v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = fabs(v);
  if (a == 0) return sign;
  int e;
  double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int exp = e - 1 + 15;
  if (exp <= 0) return (uint16_t)(sign | (uint16_t)lround(a / ldexp(1, -24)));
  uint16_t frac = (uint16_t)lround((m * 2 - 1) * 1024);
  if (frac == 1024) {
    frac = 0;
    exp++;
  }
  return (uint16_t)(sign | (exp << 10) | frac);
}

static double from_half(uint16_t h) {
  int exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v = exp == 0 ? ldexp(frac, -24) : ldexp(1024 + frac, exp - 25);
  return h & 0x8000 ? -v : v;
}

static uint16_t to_bf16(double v) {
  float f = (float)v; /* the inputs have at most 8 significant bits: exact */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void put(void *buf, FloeDType dt, size_t i, double v) {
  switch (dt) {
    case FLOE_F32: ((float *)buf)[i] = (float)v; break;
    case FLOE_F64: ((double *)buf)[i] = v; break;
    case FLOE_F16: ((uint16_t *)buf)[i] = to_half(v); break;
    case FLOE_BF16: ((uint16_t *)buf)[i] = to_bf16(v); break;
    case FLOE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FLOE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case FLOE_U8: ((uint8_t *)buf)[i] = (uint8_t)(int)v; break;
    case FLOE_I8: ((int8_t *)buf)[i] = (int8_t)(int)v; break;
    default: break;
  }
}

static double get(const void *buf, FloeDType dt, size_t i) {
  switch (dt) {
    case FLOE_F32: return ((const float *)buf)[i];
    case FLOE_F64: return ((const double *)buf)[i];
    case FLOE_F16: return from_half(((const uint16_t *)buf)[i]);
    case FLOE_BF16: return from_bf16(((const uint16_t *)buf)[i]);
    case FLOE_I32: return ((const int32_t *)buf)[i];
    case FLOE_I64: return (double)((const int64_t *)buf)[i];
    case FLOE_U8: return ((const uint8_t *)buf)[i];
    case FLOE_I8: return ((const int8_t *)buf)[i];
    default: return NAN;
  }
}

static bool is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Rank r's input element i: -3..3 (0..6 unsigned) for sums and extremes; 1 or 2 for
 * products, so that every dtype holds every partial result exactly. */
static double input(FloeDType dt, FloeReduceOp op, int r, size_t i) {
  if (op == FLOE_REDUCE_PROD) return (double)((i * 5 + (size_t)r) % 2 + 1);
  double v = (double)((i * 7 + (size_t)r * 3 + i / 11) % 7);
  return dt == FLOE_U8 ? v : v - 3;
}

/* The reduction of element i over ranks 0..n-1, as the ABI defines it. */
static double expected(FloeDType dt, FloeReduceOp op, int n, size_t i) {
  double acc = input(dt, op, 0, i);
  for (int r = 1; r < n; r++) {
    double v = input(dt, op, r, i);
    switch (op) {
      case FLOE_REDUCE_SUM:
      case FLOE_REDUCE_MEAN: acc += v; break;
      case FLOE_REDUCE_MAX: acc = v > acc ? v : acc; break;
      case FLOE_REDUCE_MIN: acc = v < acc ? v : acc; break;
      case FLOE_REDUCE_PROD: acc *= v; break;
      default: break;
    }
  }
  if (op == FLOE_REDUCE_MEAN) acc = is_float(dt) ? acc / n : trunc(acc / n);
  return acc;
}

static bool close_enough(FloeDType dt, FloeReduceOp op, double got, double want) {
  if (op == FLOE_REDUCE_MEAN && is_float(dt)) {
    double tol = dt == FLOE_F16 ? 1e-3 : dt == FLOE_BF16 ? 8e-3 : 1e-6;
    return fabs(got - want) <= tol * fabs(want) + 1e-6;
  }
  return got == want;
}

/* Issues one operation and waits for it: the code done reported (-1: none in time). */
typedef enum Kind { AR, AG, RS, BC } Kind;

static int op_sync(void *comm, Kind k, const void *in, void *out, size_t count, FloeDType dt,
                   FloeReduceOp op, int root, uint64_t tag, char *msg, size_t msg_len) {
  Done d;
  done_init(&d);
  floe_code rc = FLOE_OK;
  switch (k) {
    case AR: rc = fns->all_reduce(comm, in, out, count, dt, op, tag, NULL, on_done, &d); break;
    case AG: rc = fns->all_gather(comm, in, out, count, dt, tag, NULL, on_done, &d); break;
    case RS: rc = fns->reduce_scatter(comm, in, out, count, dt, op, tag, NULL, on_done, &d); break;
    case BC: rc = fns->broadcast(comm, out, count, dt, root, tag, NULL, on_done, &d); break;
  }
  int got = rc == FLOE_OK ? done_wait(&d, OP_WAIT_MS) : (int)rc;
  if (msg) snprintf(msg, msg_len, "%s", rc == FLOE_OK ? d.msg : "refused by the call");
  if (rc == FLOE_OK && got >= 0) {
    usleep(1000); /* a second done would show as calls == 2 */
    pthread_mutex_lock(&d.mu);
    if (d.calls != 1) got = -2;
    pthread_mutex_unlock(&d.mu);
  }
  done_destroy(&d);
  return got;
}

static const char *rc_name(int rc) {
  return rc == -1 ? "no done in time" : rc == -2 ? "done ran twice" : floe_code_name((floe_code)rc);
}

/* ---------------------------------------------------------------------------------------- */
/* Setup. */

static void setup(void) {
  const char *dir = getenv("FLOE_GLOO_DIR");
  ck_assert_msg(dir && *dir, "FLOE_GLOO_DIR is not set (run through make check)");
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = dir;
  o.num_threads = 1;
  o.skip_install_dir = 1;
  FloeStatus st = {FLOE_OK, NULL};
  rt = floe_runtime_new(&o, &st);
  ck_assert_msg(rt != NULL, "runtime on %s: %s", dir, floe_status_message(&st));
  fns = NULL;
  for (int i = 0; i < rt->num_collectives; i++)
    if (strcmp(rt->collectives[i]->name, "gloo") == 0) fns = &rt->collectives[i]->fns;
  for (int i = 0; i < floe_runtime_num_plugins(rt) && !fns; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    ck_abort_msg("no gloo backend: plugin %s is %s: %s", p->name, floe_plugin_state_name(p->state),
                 p->message);
  }
  ck_assert_msg(fns != NULL, "no plugin in %s registered a collective backend \"gloo\"", dir);
  host = floe__host_api();
  ck_assert_int_eq(fns->init(host, &backend), FLOE_OK);
}

static void teardown(void) {
  fns->finalize(backend);
  floe_runtime_free(rt);
}

START_TEST(test_registration) {
  ck_assert_str_eq(fns->device_type, "CPU");
  for (size_t i = 0; i < sizeof kDtypes / sizeof kDtypes[0]; i++)
    ck_assert_msg(fns->dtypes & FLOE_DTYPE_BIT(kDtypes[i]), "dtype %s missing from the mask",
                  host->dtype_name(kDtypes[i]));
  ck_assert(!(fns->dtypes & FLOE_DTYPE_BIT(FLOE_BOOL)));
  ck_assert(!(fns->dtypes & FLOE_DTYPE_BIT(FLOE_RESOURCE)));
  ck_assert_ptr_nonnull(fns->comm_abort);
  bool found = false;
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (strcmp(p->name, "collective-gloo") != 0) continue;
    found = true;
    ck_assert_int_eq(p->state, FLOE_PLUGIN_LOADED);
    ck_assert_int_eq(p->num_collectives, 1);
    ck_assert_int_eq(p->negotiated_minor, FLOE_ABI_MINOR);
  }
  ck_assert(found);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* all_reduce: every dtype and op, several counts, on 2, 3 and 4 ranks (one group each). */

static const size_t kCounts[] = {0, 1, 7, 1000};

static void check_all_reduce(Group *g, int rank, void *comm, FloeDType dt, FloeReduceOp op,
                             size_t count, uint64_t tag, bool in_place) {
  size_t es = esize(dt);
  void *in = malloc(count * es + 1), *out = in_place ? in : malloc(count * es + 1);
  for (size_t i = 0; i < count; i++) put(in, dt, i, input(dt, op, rank, i));
  if (!in_place) memset(out, 0x5a, count * es);
  char msg[1024];
  int rc = op_sync(comm, AR, in, out, count, dt, op, 0, tag, msg, sizeof msg);
  if (rc != FLOE_OK) {
    group_fail(g, "rank %d: all_reduce %zu x %s %s: %s (%s)", rank, count, host->dtype_name(dt),
               op_name(op), rc_name(rc), msg);
  } else {
    for (size_t i = 0; i < count; i++) {
      double want = expected(dt, op, g->size, i), got = get(out, dt, i);
      if (dt == FLOE_U8) want = (double)(uint8_t)(int)want;
      if (dt == FLOE_I8) want = (double)(int8_t)(int)want;
      if (!close_enough(dt, op, got, want)) {
        group_fail(g, "rank %d: all_reduce %zu x %s %s%s: element %zu is %g, expected %g", rank,
                   count, host->dtype_name(dt), op_name(op), in_place ? " in place" : "", i, got,
                   want);
        break;
      }
    }
  }
  if (!in_place) free(out);
  free(in);
}

static void all_reduce_cases(Group *g, int rank, void *comm) {
  uint64_t tag = 1000;
  for (size_t d = 0; d < sizeof kDtypes / sizeof kDtypes[0]; d++)
    for (size_t o = 0; o < sizeof kOps / sizeof kOps[0]; o++)
      for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; c++)
        check_all_reduce(g, rank, comm, kDtypes[d], kOps[o], kCounts[c], tag++, c == 2);
  /* Large: several of Gloo's 1 MiB segments per rank. */
  check_all_reduce(g, rank, comm, FLOE_F32, FLOE_REDUCE_SUM, (size_t)1 << 20, tag++, false);
  check_all_reduce(g, rank, comm, FLOE_I64, FLOE_REDUCE_MAX, 300000, tag++, true);
}

static void run_sizes_flags(RankFn fn, const char *label, uint32_t flags) {
  for (int n = 2; n <= 4; n++) {
    Group g;
    group_init(&g, n, 20000, label);
    g.flags = flags;
    double t0 = now_ms();
    group_run(&g, fn);
    if (getenv("FLOE_TEST_VERBOSE"))
      fprintf(stderr, "%s, %d ranks: %.0f ms\n", label, n, now_ms() - t0);
    group_check(&g);
    group_destroy(&g);
  }
}

static void run_sizes(RankFn fn, const char *label) { run_sizes_flags(fn, label, 0); }

START_TEST(test_all_reduce) { run_sizes(all_reduce_cases, "all_reduce"); }
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* all_gather, reduce_scatter, broadcast. */

static void all_gather_cases(Group *g, int rank, void *comm) {
  static const FloeDType dts[] = {FLOE_F32, FLOE_U8, FLOE_I64, FLOE_F16};
  uint64_t tag = 2000;
  for (size_t d = 0; d < 4; d++)
    for (size_t c = 0; c < sizeof kCounts / sizeof kCounts[0]; c++)
      for (int in_place = 0; in_place < 2; in_place++) {
        FloeDType dt = dts[d];
        size_t count = kCounts[c], es = esize(dt), n = (size_t)g->size;
        char *out = malloc(n * count * es + 1), *in = in_place ? out + rank * count * es
                                                                : malloc(count * es + 1);
        memset(out, 0x5a, n * count * es);
        for (size_t i = 0; i < count; i++) put(in, dt, i, input(dt, FLOE_REDUCE_SUM, rank, i));
        char msg[1024];
        int rc = op_sync(comm, AG, in, out, count, dt, 0, 0, tag++, msg, sizeof msg);
        if (rc != FLOE_OK)
          group_fail(g, "rank %d: all_gather %zu x %s: %s (%s)", rank, count,
                     host->dtype_name(dt), rc_name(rc), msg);
        for (size_t r = 0; rc == FLOE_OK && r < n; r++)
          for (size_t i = 0; i < count; i++) {
            double want = input(dt, FLOE_REDUCE_SUM, (int)r, i), got = get(out, dt, r * count + i);
            if (got != want) {
              group_fail(g, "rank %d: all_gather %zu x %s%s: block %zu element %zu is %g, not %g",
                         rank, count, host->dtype_name(dt), in_place ? " in place" : "", r, i,
                         got, want);
              r = n;
              break;
            }
          }
        if (!in_place) free(in);
        free(out);
      }
}

START_TEST(test_all_gather) { run_sizes(all_gather_cases, "all_gather"); }
END_TEST

static void reduce_scatter_cases(Group *g, int rank, void *comm) {
  static const FloeDType dts[] = {FLOE_F32, FLOE_I32, FLOE_F16, FLOE_U8, FLOE_F64};
  static const size_t counts[] = {0, 1, 7, 1000, 70000};
  uint64_t tag = 3000;
  size_t n = (size_t)g->size;
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t o = 0; o < sizeof kOps / sizeof kOps[0]; o++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        FloeDType dt = dts[d];
        FloeReduceOp op = kOps[o];
        size_t count = counts[c], es = esize(dt);
        if (count == 70000 && (op != FLOE_REDUCE_SUM || dt != FLOE_F32)) continue;
        char *in = malloc(n * count * es + 1), *out = malloc(count * es + 1);
        /* Block b of rank r holds what element b * count + i of an all_reduce input holds. */
        for (size_t i = 0; i < n * count; i++) put(in, dt, i, input(dt, op, rank, i));
        memset(out, 0x5a, count * es);
        char msg[1024];
        int rc = op_sync(comm, RS, in, out, count, dt, op, 0, tag++, msg, sizeof msg);
        if (rc != FLOE_OK)
          group_fail(g, "rank %d: reduce_scatter %zu x %s %s: %s (%s)", rank, count,
                     host->dtype_name(dt), op_name(op), rc_name(rc), msg);
        for (size_t i = 0; rc == FLOE_OK && i < count; i++) {
          double want = expected(dt, op, g->size, rank * count + i), got = get(out, dt, i);
          if (dt == FLOE_U8) want = (double)(uint8_t)(int)want;
          if (!close_enough(dt, op, got, want)) {
            group_fail(g, "rank %d: reduce_scatter %zu x %s %s: element %zu is %g, expected %g",
                       rank, count, host->dtype_name(dt), op_name(op), i, got, want);
            break;
          }
        }
        free(in);
        free(out);
      }
}

START_TEST(test_reduce_scatter) { run_sizes(reduce_scatter_cases, "reduce_scatter"); }
END_TEST

static void broadcast_cases(Group *g, int rank, void *comm) {
  static const FloeDType dts[] = {FLOE_F64, FLOE_U8, FLOE_BF16};
  static const size_t counts[] = {0, 1, 7, 1000, 200000};
  uint64_t tag = 4000;
  for (int root = 0; root < g->size; root++)
    for (size_t d = 0; d < 3; d++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        FloeDType dt = dts[d];
        size_t count = counts[c], es = esize(dt);
        char *buf = malloc(count * es + 1);
        for (size_t i = 0; i < count; i++)
          put(buf, dt, i, rank == root ? input(dt, FLOE_REDUCE_SUM, root, i) : 0);
        char msg[1024];
        int rc = op_sync(comm, BC, NULL, buf, count, dt, 0, root, tag++, msg, sizeof msg);
        if (rc != FLOE_OK)
          group_fail(g, "rank %d: broadcast %zu x %s from %d: %s (%s)", rank, count,
                     host->dtype_name(dt), root, rc_name(rc), msg);
        for (size_t i = 0; rc == FLOE_OK && i < count; i++) {
          double want = input(dt, FLOE_REDUCE_SUM, root, i), got = get(buf, dt, i);
          if (got != want) {
            group_fail(g, "rank %d: broadcast %zu x %s from root %d: element %zu is %g, not %g",
                       rank, count, host->dtype_name(dt), root, i, got, want);
            break;
          }
        }
        free(buf);
      }
}

START_TEST(test_broadcast) { run_sizes(broadcast_cases, "broadcast"); }
END_TEST

/* A group of one: every operation is a copy (or nothing), without a network. */
static void single_cases(Group *g, int rank, void *comm) {
  float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
  char msg[512];
  int rc = op_sync(comm, AR, in, out, 5, FLOE_F32, FLOE_REDUCE_MEAN, 0, 1, msg, sizeof msg);
  if (rc != FLOE_OK || memcmp(in, out, sizeof in) != 0)
    group_fail(g, "all_reduce on one rank: %s (%s)", rc_name(rc), msg);
  memset(out, 0, sizeof out);
  rc = op_sync(comm, AG, in, out, 5, FLOE_F32, 0, 0, 2, msg, sizeof msg);
  if (rc != FLOE_OK || memcmp(in, out, sizeof in) != 0)
    group_fail(g, "all_gather on one rank: %s (%s)", rc_name(rc), msg);
  rc = op_sync(comm, BC, NULL, in, 5, FLOE_F32, 0, 0, 3, msg, sizeof msg);
  if (rc != FLOE_OK) group_fail(g, "broadcast on one rank: %s (%s)", rc_name(rc), msg);
  rc = op_sync(comm, BC, NULL, in, 5, FLOE_F32, 0, 1, 4, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "root 1"))
    group_fail(g, "broadcast from root 1 of a group of one: %s (%s)", rc_name(rc), msg);
}

START_TEST(test_single_rank) {
  Group g;
  group_init(&g, 1, 5000, "one rank");
  group_run(&g, single_cases);
  group_check(&g);
  ck_assert_int_eq(g.store.sets, 0); /* no rendezvous for a group of one */
  group_destroy(&g);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Concurrency: operations issued all at once, in a different order on every rank. */

#define NCONC 12

static void concurrent_cases(Group *g, int rank, void *comm) {
  Done d[NCONC];
  int32_t *in[NCONC], *out[NCONC];
  const size_t count = 5000;
  int order[NCONC];
  for (int k = 0; k < NCONC; k++) order[k] = k;
  /* Rank 0 ascending, rank 1 descending, rank 2 a rotation, rank 3 even then odd. */
  for (int k = 0; k < NCONC; k++) {
    switch (rank % 4) {
      case 0: order[k] = k; break;
      case 1: order[k] = NCONC - 1 - k; break;
      case 2: order[k] = (k + 5) % NCONC; break;
      case 3: order[k] = k < NCONC / 2 ? 2 * k : 2 * (k - NCONC / 2) + 1; break;
    }
  }
  for (int k = 0; k < NCONC; k++) {
    done_init(&d[k]);
    in[k] = malloc(count * g->size * sizeof(int32_t));
    out[k] = malloc(count * g->size * sizeof(int32_t));
    for (size_t i = 0; i < count * g->size; i++) in[k][i] = (int32_t)(rank * 1000 + k * 10 + i % 7);
  }
  for (int j = 0; j < NCONC; j++) {
    int k = order[j];
    uint64_t tag = 0x5000000000000000ull + (uint64_t)k * 0x100000001ull;
    floe_code rc;
    if (k % 3 == 2)
      rc = fns->all_gather(comm, in[k], out[k], count, FLOE_I32, tag, NULL, on_done, &d[k]);
    else
      rc = fns->all_reduce(comm, in[k], out[k], count, FLOE_I32, FLOE_REDUCE_SUM, tag, NULL,
                           on_done, &d[k]);
    if (rc != FLOE_OK) group_fail(g, "rank %d: operation %d refused: %s", rank, k, floe_code_name(rc));
  }
  for (int k = 0; k < NCONC; k++) {
    int rc = done_wait(&d[k], OP_WAIT_MS);
    if (rc != FLOE_OK) {
      group_fail(g, "rank %d: concurrent operation %d: %s (%s)", rank, k, rc_name(rc), d[k].msg);
      continue;
    }
    for (size_t i = 0; i < count; i++) {
      int64_t want = 0;
      if (k % 3 == 2) {
        for (int r = 0; r < g->size; r++) {
          want = r * 1000 + k * 10 + (int64_t)(i % 7);
          if (out[k][r * count + i] != want) {
            group_fail(g, "rank %d: concurrent all_gather %d: block %d element %zu is %d, not %lld",
                       rank, k, r, i, out[k][r * count + i], (long long)want);
            i = count;
            break;
          }
        }
        continue;
      }
      for (int r = 0; r < g->size; r++) want += r * 1000 + k * 10 + (int64_t)(i % 7);
      if (out[k][i] != want) {
        group_fail(g, "rank %d: concurrent all_reduce %d: element %zu is %d, not %lld", rank, k, i,
                   out[k][i], (long long)want);
        break;
      }
    }
  }
  for (int k = 0; k < NCONC; k++) {
    done_destroy(&d[k]);
    free(in[k]);
    free(out[k]);
  }
}

START_TEST(test_concurrent_orders) { run_sizes(concurrent_cases, "concurrent"); }
END_TEST

/* The caller (the core) checked every operation's arguments across the ranks: no header goes
 * before the data, and the operations still meet by tag in any order. */
START_TEST(test_args_verified_by_caller) {
  run_sizes_flags(concurrent_cases, "concurrent, verified", FLOE_COLLECTIVE_ARGS_VERIFIED);
  run_sizes_flags(all_gather_cases, "all_gather, verified", FLOE_COLLECTIVE_ARGS_VERIFIED);
  run_sizes_flags(broadcast_cases, "broadcast, verified", FLOE_COLLECTIVE_ARGS_VERIFIED);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Failures. */

START_TEST(test_rank_never_joins) {
  Group g;
  group_init(&g, 3, 1500, "missing rank");
  g.joining = 2; /* rank 2 never comes */
  double t0 = now_ms();
  group_run(&g, NULL);
  double took = now_ms() - t0;
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(g.init_rc[r] == FLOE_DEADLINE_EXCEEDED, "rank %d: %s (%s)", r,
                  floe_code_name(g.init_rc[r]), g.init_msg[r]);
    ck_assert_msg(strstr(g.init_msg[r], g.name) && strstr(g.init_msg[r], "rank 2") &&
                      strstr(g.init_msg[r], "1500 ms"),
                  "rank %d's message names the group, the missing rank and the timeout: %s", r,
                  g.init_msg[r]);
    ck_assert_ptr_null(g.comm[r]);
  }
  ck_assert_msg(took < 1500 + 3000, "comm_init took %.0f ms for a 1500 ms timeout", took);
  group_destroy(&g);
}
END_TEST

static void bad_args_cases(Group *g, int rank, void *comm) {
  bool buf[4] = {0};
  char msg[1024];
  int rc = op_sync(comm, AR, buf, buf, 4, FLOE_BOOL, FLOE_REDUCE_SUM, 0, 1, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "bool") || !strstr(msg, "not supported") ||
      !strstr(msg, g->name))
    group_fail(g, "all_reduce of bool: %s (%s)", rc_name(rc), msg);
  float f[4] = {0};
  rc = op_sync(comm, AR, f, f, 4, FLOE_F32, (FloeReduceOp)99, 0, 2, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "reduce op 99"))
    group_fail(g, "all_reduce with op 99: %s (%s)", rc_name(rc), msg);
  rc = op_sync(comm, RS, f, f, 2, FLOE_RESOURCE, FLOE_REDUCE_SUM, 0, 3, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "not supported"))
    group_fail(g, "reduce_scatter of resource: %s (%s)", rc_name(rc), msg);
  rc = op_sync(comm, BC, NULL, f, 4, FLOE_F32, 0, 7, 4, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "root 7"))
    group_fail(g, "broadcast from root 7: %s (%s)", rc_name(rc), msg);
  rc = op_sync(comm, AG, NULL, f, 4, FLOE_F32, 0, 0, 5, msg, sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "NULL"))
    group_fail(g, "all_gather from NULL: %s (%s)", rc_name(rc), msg);
  /* No done function: refused by the call itself. */
  if (fns->all_reduce(comm, f, f, 4, FLOE_F32, FLOE_REDUCE_SUM, 6, NULL, NULL, NULL) == FLOE_OK)
    group_fail(g, "all_reduce without a done function was accepted");
  /* The comm still works after refusals. */
  float x[3] = {1, 2, 3}, y[3];
  rc = op_sync(comm, AR, x, y, 3, FLOE_F32, FLOE_REDUCE_SUM, 0, 7, msg, sizeof msg);
  if (rc != FLOE_OK || y[2] != 3.0f * g->size)
    group_fail(g, "all_reduce after refusals: %s (%s), y[2] = %g", rc_name(rc), msg, y[2]);
}

START_TEST(test_bad_arguments) {
  Group g;
  group_init(&g, 2, 10000, "bad arguments");
  group_run(&g, bad_args_cases);
  group_check(&g);
  group_destroy(&g);
}
END_TEST

/* The ranks disagree on the count: both fail with the two counts named, nobody crashes. */
static void mismatch_cases(Group *g, int rank, void *comm) {
  float f[16] = {0};
  char msg[1024];
  int rc = op_sync(comm, AR, f, f, rank == 0 ? 7 : 9, FLOE_F32, FLOE_REDUCE_SUM, 0, 11, msg,
                   sizeof msg);
  if (rc != FLOE_INVALID_ARGUMENT || !strstr(msg, "7 x f32") || !strstr(msg, "9 x f32"))
    group_fail(g, "rank %d: all_reduce of 7 against 9: %s (%s)", rank, rc_name(rc), msg);
  /* The comm is broken now: a later operation fails at once, saying why. */
  rc = op_sync(comm, AR, f, f, 4, FLOE_F32, FLOE_REDUCE_SUM, 0, 12, msg, sizeof msg);
  if (rc == FLOE_OK || !strstr(msg, "broke earlier"))
    group_fail(g, "rank %d: all_reduce on a broken comm: %s (%s)", rank, rc_name(rc), msg);
}

START_TEST(test_mismatched_counts) {
  Group g;
  group_init(&g, 2, 10000, "mismatch");
  group_run(&g, mismatch_cases);
  group_check(&g);
  group_destroy(&g);
}
END_TEST

/* A caller of ABI 1.5 gives a shorter group, without flags: the backend compares the
 * arguments itself, as before. */
START_TEST(test_mismatched_counts_abi_1_5_caller) {
  Group g;
  group_init(&g, 2, 10000, "mismatch, 1.5 group");
  g.group_bytes = offsetof(FloeCollectiveGroup, flags);
  g.flags = FLOE_COLLECTIVE_ARGS_VERIFIED; /* beyond struct_size: must not be read */
  group_run(&g, mismatch_cases);
  group_check(&g);
  group_destroy(&g);
}
END_TEST

/* Rank 1 never issues the operation rank 0 waits in; rank 0 aborts it. */
static void abort_cases(Group *g, int rank, void *comm) {
  float f[1000] = {0};
  if (rank == 1) {
    pthread_barrier_wait(&g->barrier); /* rank 0 issued and is waiting */
    pthread_barrier_wait(&g->barrier); /* rank 0 aborted */
    return;
  }
  Done d;
  done_init(&d);
  floe_code rc = fns->all_reduce(comm, f, f, 1000, FLOE_F32, FLOE_REDUCE_SUM, 21, NULL, on_done, &d);
  if (rc != FLOE_OK) group_fail(g, "all_reduce refused: %s", floe_code_name(rc));
  usleep(200 * 1000);
  pthread_barrier_wait(&g->barrier);
  if (d.calls) group_fail(g, "the operation completed without its peer: %s", d.msg);
  double t0 = now_ms();
  fns->comm_abort(comm);
  double abort_ms = now_ms() - t0;
  int got = done_wait(&d, 5000);
  double done_ms = now_ms() - t0;
  if (got != FLOE_ABORTED || !strstr(d.msg, "abort"))
    group_fail(g, "aborted all_reduce: %s (%s)", rc_name(got), d.msg);
  if (abort_ms > 500 || done_ms > 2000)
    group_fail(g, "comm_abort took %.0f ms, its done came %.0f ms after it", abort_ms, done_ms);
  fns->comm_abort(comm); /* idempotent */
  char msg[1024];
  int later = op_sync(comm, AR, f, f, 4, FLOE_F32, FLOE_REDUCE_SUM, 0, 22, msg, sizeof msg);
  if (later != FLOE_ABORTED)
    group_fail(g, "an operation after comm_abort: %s (%s)", rc_name(later), msg);
  done_destroy(&d);
  pthread_barrier_wait(&g->barrier);
}

START_TEST(test_abort) {
  Group g;
  group_init(&g, 2, 20000, "abort"); /* far above the test's waits: the abort ends it */
  group_run(&g, abort_cases);
  group_check(&g);
  group_destroy(&g);
}
END_TEST

/* Rank 1 never issues the operation: rank 0's fails at the group's timeout. */
static void timeout_cases(Group *g, int rank, void *comm) {
  if (rank == 1) return;
  float f[10] = {0};
  char msg[1024];
  double t0 = now_ms();
  int rc = op_sync(comm, AR, f, f, 10, FLOE_F32, FLOE_REDUCE_SUM, 0, 31, msg, sizeof msg);
  double took = now_ms() - t0;
  if (rc != FLOE_DEADLINE_EXCEEDED || !strstr(msg, g->name) || !strstr(msg, "timeout"))
    group_fail(g, "all_reduce without its peer: %s (%s)", rc_name(rc), msg);
  if (took < 700 || took > 700 + 3000)
    group_fail(g, "all_reduce without its peer failed after %.0f ms (timeout 700 ms)", took);
}

START_TEST(test_operation_timeout) {
  Group g;
  group_init(&g, 2, 700, "timeout");
  group_run(&g, timeout_cases);
  group_check(&g);
  group_destroy(&g);
}
END_TEST

static Suite *gloo_suite(void) {
  Suite *s = suite_create("gloo");
  TCase *tc = tcase_create("gloo");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_registration);
  tcase_add_test(tc, test_all_reduce);
  tcase_add_test(tc, test_all_gather);
  tcase_add_test(tc, test_reduce_scatter);
  tcase_add_test(tc, test_broadcast);
  tcase_add_test(tc, test_single_rank);
  tcase_add_test(tc, test_concurrent_orders);
  tcase_add_test(tc, test_rank_never_joins);
  tcase_add_test(tc, test_bad_arguments);
  tcase_add_test(tc, test_mismatched_counts);
  tcase_add_test(tc, test_mismatched_counts_abi_1_5_caller);
  tcase_add_test(tc, test_args_verified_by_caller);
  tcase_add_test(tc, test_abort);
  tcase_add_test(tc, test_operation_timeout);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const char *dir = getenv("FLOE_GLOO_DIR");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", PLUGIN_FILE);
  if (!dir || access(path, R_OK) != 0) {
    printf("SKIP: %s was not built (configure did not find libgloo-dev: install it and "
           "run configure again)\n",
           dir ? path : "FLOE_GLOO_DIR unset; " PLUGIN_FILE);
    return 77;
  }
  SRunner *sr = srunner_create(gloo_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
