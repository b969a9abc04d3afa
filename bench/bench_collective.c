/* SPDX-License-Identifier: Apache-2.0 */
/* bench_collective.c - a collective backend's all_reduce through the plugin ABI (the
 * FloeCollectiveFns a plugin registered), on N rank threads meeting through an in-memory
 * store: the Floe side of bench/gloo_direct, same sizes, same JSON fields
 * ("bench":"floe_<backend>"), so the two compare line by line:
 *
 *   FLOE_PLUGIN_PATH=plugins/collective/gloo/.libs bench/bench_collective --ranks 4
 *   bench/gloo_direct --ranks 4
 *
 * Each operation is issued and waited for (done) before the next, as a step's collective is.
 * It reaches the registry through floe__ internals: it links the objects libfloe is made of. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

static const FloeHostApi *host;
static const FloeCollectiveFns *fns;
static void *backend;
static int nranks = 2;
static size_t min_bytes = 4096, max_bytes = (size_t)64 << 20;
static double seconds = 0.5;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The store: a list under one lock. */
typedef struct Entry {
  char *key;
  char *value;
  size_t len;
  struct Entry *next;
} Entry;
static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t store_cv = PTHREAD_COND_INITIALIZER;
static Entry *entries;

static floe_code store_set(void *arg, const char *key, const void *value, size_t len) {
  Entry *e = calloc(1, sizeof *e);
  e->key = strdup(key);
  e->value = malloc(len + 1);
  memcpy(e->value, value, len);
  e->len = len;
  pthread_mutex_lock(&store_mu);
  e->next = entries;
  entries = e;
  pthread_cond_broadcast(&store_cv);
  pthread_mutex_unlock(&store_mu);
  return FLOE_OK;
}

static floe_code store_get(void *arg, const char *key, int64_t timeout_ms, void **value,
                           size_t *len) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += (timeout_ms < 0 ? 60000 : timeout_ms) / 1000 + 1;
  pthread_mutex_lock(&store_mu);
  for (;;) {
    for (Entry *e = entries; e; e = e->next)
      if (strcmp(e->key, key) == 0) {
        char *v = host->alloc(e->len + 1);
        memcpy(v, e->value, e->len);
        v[e->len] = 0;
        *value = v;
        *len = e->len;
        pthread_mutex_unlock(&store_mu);
        return FLOE_OK;
      }
    if (pthread_cond_timedwait(&store_cv, &store_mu, &dl) == ETIMEDOUT) {
      pthread_mutex_unlock(&store_mu);
      return FLOE_DEADLINE_EXCEEDED;
    }
  }
}

typedef struct Done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  floe_code code;
  char msg[512];
} Done;

static void on_done(void *arg, floe_code code, const char *msg) {
  Done *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->code = code;
  snprintf(d->msg, sizeof d->msg, "%s", msg ? msg : "");
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static floe_code all_reduce(void *comm, float *buf, size_t n, FloeReduceOp op, uint64_t tag,
                            Done *d) {
  pthread_mutex_lock(&d->mu);
  d->calls = 0;
  pthread_mutex_unlock(&d->mu);
  floe_code rc = fns->all_reduce(comm, buf, buf, n, FLOE_F32, op, tag, NULL, on_done, d);
  if (rc != FLOE_OK) return rc;
  pthread_mutex_lock(&d->mu);
  while (!d->calls) pthread_cond_wait(&d->cv, &d->mu);
  rc = d->code;
  pthread_mutex_unlock(&d->mu);
  if (rc != FLOE_OK) fprintf(stderr, "bench_collective: %s\n", d->msg);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static FloeCollectiveStore cstore = {sizeof(FloeCollectiveStore), store_set, store_get, NULL};
static const char *devices[64];

static void *rank_main(void *p) {
  int rank = (int)(intptr_t)p;
  FloeCollectiveGroup g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  g.name = "bench group";
  g.rank = rank;
  g.size = nranks;
  g.devices = devices;
  g.store = &cstore;
  g.timeout_ms = 60000;
  g.host = "127.0.0.1";
  /* Every rank issues the same operations: what the core's check across the ranks
   * guarantees (FLOE_GLOO_CHECK_ARGS=1 makes gloo compare them itself anyway). */
  g.flags = FLOE_COLLECTIVE_ARGS_VERIFIED;
  void *comm = NULL;
  char msg[512];
  floe_code rc = fns->comm_init(backend, &g, &comm, msg, sizeof msg);
  if (rc != FLOE_OK) {
    fprintf(stderr, "bench_collective: rank %d: comm_init: %s\n", rank, msg);
    exit(1);
  }
  Done d;
  memset(&d, 0, sizeof d);
  pthread_mutex_init(&d.mu, NULL);
  pthread_cond_init(&d.cv, NULL);
  float *buf = malloc(max_bytes);
  uint64_t tag = 1;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i + (size_t)rank) % 7);
    float want = 0;
    if (all_reduce(comm, &want, 1, FLOE_REDUCE_SUM, tag++, &d) != FLOE_OK) exit(1); /* barrier */
    double t0 = now_us();
    for (int i = 0; i < 3; i++)
      if (all_reduce(comm, buf, n, FLOE_REDUCE_SUM, tag++, &d) != FLOE_OK) exit(1);
    double per = (now_us() - t0) / 3;
    int it = (int)(seconds * 1e6 / (per > 1 ? per : 1));
    want = rank == 0 ? (float)(it < 5 ? 5 : it > 2000 ? 2000 : it) : 0;
    if (all_reduce(comm, &want, 1, FLOE_REDUCE_SUM, tag++, &d) != FLOE_OK) exit(1);
    int iters = (int)want;
    double *times = malloc(iters * sizeof *times);
    t0 = now_us();
    for (int i = 0; i < iters; i++) {
      double s = now_us();
      if (all_reduce(comm, buf, n, FLOE_REDUCE_SUM, tag++, &d) != FLOE_OK) exit(1);
      times[i] = now_us() - s;
    }
    double mean = (now_us() - t0) / iters;
    qsort(times, iters, sizeof *times, cmp_double);
    double best = times[0], p50 = times[iters / 2];
    free(times);
    if (rank == 0) {
      double algbw = bytes / mean / 1e3;
      printf("{\"bench\":\"floe_%s\",\"ranks\":%d,\"bytes\":%zu,\"dtype\":\"f32\",\"iters\":%d,"
             "\"us_per_op\":%.1f,\"p50_us\":%.1f,\"min_us\":%.1f,\"algbw_gbps\":%.3f,"
             "\"busbw_gbps\":%.3f}\n",
             fns->name, nranks, bytes, iters, mean, p50, best, algbw,
             algbw * 2 * (nranks - 1) / nranks);
      fflush(stdout);
    }
  }
  free(buf);
  fns->comm_free(comm);
  return NULL;
}

int main(int argc, char **argv) {
  const char *name = "gloo";
  static const struct option longopts[] = {
      {"ranks", required_argument, NULL, 'n'},     {"backend", required_argument, NULL, 'b'},
      {"min-bytes", required_argument, NULL, 'm'}, {"max-bytes", required_argument, NULL, 'M'},
      {"seconds", required_argument, NULL, 't'},   {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
      case 'n': nranks = atoi(optarg); break;
      case 'b': name = optarg; break;
      case 'm': min_bytes = strtoull(optarg, NULL, 0); break;
      case 'M': max_bytes = strtoull(optarg, NULL, 0); break;
      case 't': seconds = atof(optarg); break;
      case 'h':
        printf("usage: bench_collective [--ranks N] [--backend NAME] [--min-bytes B] "
               "[--max-bytes B] [--seconds S]\n(the plugins come from FLOE_PLUGIN_PATH)\n");
        return 0;
      default: return 2;
    }
  }
  if (nranks < 2 || nranks > 64 || min_bytes < 4 || min_bytes > max_bytes) {
    fprintf(stderr, "bench_collective: need 2 <= --ranks <= 64, 4 <= --min-bytes <= --max-bytes\n");
    return 2;
  }
  FloeStatus st = {FLOE_OK, NULL};
  FloeRuntime *rt = floe_runtime_new(NULL, &st);
  if (!rt) {
    fprintf(stderr, "bench_collective: %s\n", floe_status_message(&st));
    return 1;
  }
  for (int i = 0; i < rt->num_collectives; i++)
    if (strcmp(rt->collectives[i]->name, name) == 0) fns = &rt->collectives[i]->fns;
  if (!fns) {
    fprintf(stderr, "bench_collective: no backend \"%s\" among the plugins of FLOE_PLUGIN_PATH\n",
            name);
    return 1;
  }
  host = floe__host_api();
  if (fns->init(host, &backend) != FLOE_OK) return 1;
  for (int r = 0; r < nranks; r++) devices[r] = "/job:localhost/replica:0/task:0/device:CPU:0";
  pthread_t th[64];
  for (int r = 0; r < nranks; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  fns->finalize(backend);
  floe_runtime_free(rt);
  return 0;
}
