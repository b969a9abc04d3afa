/* SPDX-License-Identifier: Apache-2.0 */
/* bench_allreduce.c - all-reduce through Floe's graph ops, end to end: N ranks, each a task
 * of a cluster with its own runtime and server in this process (as test_collective_cluster
 * runs them), each running its own session whose step is one CollectiveReduce (sum, f32) of
 * a fed tensor; the bytes cross the transport FLOE_TRANSPORT names (fabric: tcp;ofi_rxm over
 * loopback; ucx: tcp). One JSON line per size:
 *   {"bench":"floe_ring","transport":"fabric","ranks":4,"bytes":4096,"iters":200,
 *    "p50_us":..., "mean_us":..., "busbw_gbs":...}
 * busbw: bytes * 2(n-1)/n / time, what each rank sends (NCCL's bus bandwidth).
 *
 * --fusion: instead, 200 gradients of 4 KiB per step: "unfused" (200 CollectiveReduce ops)
 * against "fused" (floe_all_reduce_n packing them into one buffer).
 *
 * --api: the backend through the runtime's collective manager (floe__collective_submit) on
 * buffers reused from one operation to the next, without a session around it: the
 * algorithm's own cost, as bench_collective and gloo_direct measure theirs ("floe_api_ring").
 * It reaches the manager through floe__ internals: it links the objects libfloe is made of.
 *
 *   bench/bench_allreduce --ranks 4 --backend ring     (gloo: the plugin on FLOE_PLUGIN_PATH)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <floe/floe.h>
#include <floe/floe_collective.h>
#include <floe/floe_dist.h>
#include <floe/floe_train.h>

#include "core.h"

#define MAX_RANKS 8
#define NFUSE 200

static int nranks = 2;
static const char *backend = "ring";
static size_t min_bytes = 4096, max_bytes = (size_t)64 << 20;
static int fusion_mode, api_mode;
static char json_spec[4096];
static FloeRuntime *rts[MAX_RANKS];
static FloeServer *srvs[MAX_RANKS];
static pthread_barrier_t bar;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int free_port(void) {
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
      getsockname(fd, (struct sockaddr *)&a, &len)) {
    perror("bench_allreduce: a free port");
    exit(1);
  }
  close(fd);
  return ntohs(a.sin_port);
}

static void die(const char *what, FloeStatus *st) {
  fprintf(stderr, "bench_allreduce: %s: %s\n", what, st ? floe_status_message(st) : "failed");
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int iters_for(size_t bytes) {
  size_t it = ((size_t)256 << 20) / bytes;
  return it < 5 ? 5 : it > 200 ? 200 : (int)it;
}

/* Rank r's graph: one CollectiveReduce per size (instance key = its index), on its CPU. */
static FloeGraph *size_graph(int r) {
  FloeGraph *g = floe_graph_new();
  char dev[64];
  snprintf(dev, sizeof dev, "/job:worker/task:%d/device:CPU:0", r);
  floe_graph_set_device_scope(g, dev);
  int k = 0;
  for (size_t b = min_bytes; b <= max_bytes; b *= 4, k++) {
    char xn[32], rn[32];
    snprintf(xn, sizeof xn, "x%d", k);
    snprintf(rn, sizeof rn, "r%d", k);
    int64_t d[1] = {(int64_t)(b / 4)};
    FloeOutput x = floe_placeholder(g, xn, FLOE_F32, floe_shape_make(1, d));
    FloeCollectiveOptions o;
    floe_collective_options_init(&o);
    o.group_size = nranks;
    o.group_key = 1;
    o.instance_key = k + 1;
    o.backend = backend;
    floe_all_reduce(g, rn, x, FLOE_REDUCE_SUM, &o);
  }
  return g;
}

/* Rank r's graph of NFUSE 4 KiB gradients: all-reduced one by one ("unfused"), or packed. */
static FloeGraph *fusion_graph(int r, int fused) {
  FloeGraph *g = floe_graph_new();
  char dev[64];
  snprintf(dev, sizeof dev, "/job:worker/task:%d/device:CPU:0", r);
  floe_graph_set_device_scope(g, dev);
  FloeOutput xs[NFUSE], out[NFUSE];
  int64_t d[1] = {1024};
  for (int i = 0; i < NFUSE; i++) {
    char n[32];
    snprintf(n, sizeof n, "g%d", i);
    FloeTensor *t = floe_tensor_new(FLOE_F32, 1, d, NULL);
    float *v = floe_tensor_data(t);
    for (int j = 0; j < 1024; j++) v[j] = (float)(i + j + r);
    xs[i] = floe_const(g, n, t);
    floe_tensor_release(t);
  }
  FloeAllReduceOptions o;
  floe_all_reduce_options_init(&o);
  o.group_size = nranks;
  o.group_key = 2 + fused;
  o.backend = backend;
  o.fusion_bytes = fused ? (int64_t)4 << 20 : 0;
  floe_all_reduce_n(g, "ar", xs, NFUSE, &o, out);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "step");
  for (int i = 0; i < NFUSE; i++) floe_node_add_control_input(b, out[i].node);
  floe_node_finish(b);
  return g;
}

static FloeSession *session_of(int r, FloeGraph *g, FloeStatus *st) {
  char json[4200], *task = strstr(json_spec, "\"task\"");
  snprintf(json, sizeof json, "%.*s\"task\": {\"type\": \"worker\", \"index\": %d}}",
           (int)(task - json_spec), json_spec, r);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rts[r];
  so.cluster = json;
  so.cluster_timeout_ms = 60000;
  FloeSession *s = floe_session_new(g, &so, st);
  if (!s) die("session", st);
  return s;
}

static void report(const char *what, size_t bytes, int iters, double *t) {
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  double sum = 0;
  for (int i = 0; i < iters; i++) sum += t[i];
  double p50 = t[iters / 2];
  double busbw = bytes ? (double)bytes * 2.0 * (nranks - 1) / nranks / (p50 * 1e-6) / 1e9 : 0;
  const char *tr = getenv("FLOE_TRANSPORT");
  printf("{\"bench\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"iters\":%d,"
         "\"p50_us\":%.1f,\"mean_us\":%.1f,\"busbw_gbs\":%.3f}\n",
         what, tr ? tr : "fabric", nranks, bytes, iters, p50, sum / iters, busbw);
  fflush(stdout);
}

typedef struct Wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  floe_code code;
} Wait;

static void api_done(void *arg, const FloeStatus *st) {
  Wait *w = arg;
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  w->code = st->code;
  if (st->code != FLOE_OK) fprintf(stderr, "bench_allreduce: %s\n", floe_status_message(st));
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* --api: rank r's all-reduces straight through the manager, one at a time. */
static FloeSession *session_of(int r, FloeGraph *g, FloeStatus *st);

static void api_rank(int r) {
  char dev[64];
  snprintf(dev, sizeof dev, "/job:worker/replica:0/task:%d/device:CPU:0", r);
  /* A session connects the data plane to the other tasks, as a training run's does. */
  FloeGraph *g0 = floe_graph_new();
  floe_graph_set_device_scope(g0, dev);
  floe_node_finish(floe_node_begin(g0, "NoOp", "nothing"));
  FloeStatus *st0 = floe_status_new();
  FloeSession *s0 = session_of(r, g0, st0);
  float *in = calloc(max_bytes / 4, sizeof *in), *out = calloc(max_bytes / 4, sizeof *out);
  memset(out, 0, max_bytes); /* touched once, as a training step's buffers are */
  Wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, FLOE_OK};
  int k = 0;
  for (size_t b = min_bytes; b <= max_bytes; b *= 4, k++) {
    int iters = iters_for(b);
    double *t = calloc((size_t)iters, sizeof *t);
    for (int i = 0; i < iters + 2; i++) {
      FloeCollRequest rq = {0};
      rq.kind = FLOE__COLL_ALL_REDUCE;
      rq.group_key = 9;
      rq.group_size = nranks;
      rq.instance_key = k + 1;
      rq.device = dev;
      rq.hint = backend;
      rq.node = "bench";
      rq.in = in;
      rq.out = out;
      rq.count = b / 4;
      rq.dtype = FLOE_F32;
      rq.op = FLOE_REDUCE_SUM;
      rq.done = api_done;
      rq.arg = &w;
      pthread_barrier_wait(&bar);
      w.done = 0;
      FloeStatus st = {FLOE_OK, NULL};
      double t0 = now_us();
      if (floe__collective_submit(rts[r], &rq, NULL, &st) != FLOE_OK) die("submit", &st);
      pthread_mutex_lock(&w.mu);
      while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
      pthread_mutex_unlock(&w.mu);
      if (w.code != FLOE_OK) exit(1);
      if (i >= 2) t[i - 2] = now_us() - t0;
    }
    char what[64];
    snprintf(what, sizeof what, "floe_api_%s", backend);
    if (r == 0) report(what, b, iters, t);
    free(t);
  }
  free(in);
  free(out);
  floe_session_free(s0);
  floe_graph_free(g0);
  floe_status_free(st0);
}

static void *rank_main(void *arg) {
  int r = (int)(intptr_t)arg;
  if (api_mode) {
    api_rank(r);
    return NULL;
  }
  FloeStatus *st = floe_status_new();
  char what[64];
  if (fusion_mode) {
    for (int fused = 0; fused < 2; fused++) {
      FloeGraph *g = fusion_graph(r, fused);
      if (floe_graph_status(g) != FLOE_OK) die(floe_graph_error(g, NULL), NULL);
      FloeSession *s = session_of(r, g, st);
      const char *target = "step";
      double t[60];
      for (int i = 0; i < 63; i++) {
        pthread_barrier_wait(&bar);
        double t0 = now_us();
        if (floe_session_run(s, NULL, 0, NULL, 0, &target, 1, NULL, st) != FLOE_OK) die("step", st);
        if (i >= 3) t[i - 3] = now_us() - t0;
      }
      snprintf(what, sizeof what, "floe_%s_%s_200x4KiB", backend, fused ? "fused" : "unfused");
      if (r == 0) report(what, (size_t)NFUSE * 4096, 60, t);
      floe_session_free(s);
      floe_graph_free(g);
    }
    floe_status_free(st);
    return NULL;
  }
  FloeGraph *g = size_graph(r);
  if (floe_graph_status(g) != FLOE_OK) die(floe_graph_error(g, NULL), NULL);
  FloeSession *s = session_of(r, g, st);
  int k = 0;
  for (size_t b = min_bytes; b <= max_bytes; b *= 4, k++) {
    int64_t d[1] = {(int64_t)(b / 4)};
    FloeTensor *x = floe_tensor_new(FLOE_F32, 1, d, NULL);
    memset(floe_tensor_data(x), 0, b);
    char xn[32], rn[32];
    snprintf(xn, sizeof xn, "x%d", k);
    snprintf(rn, sizeof rn, "r%d", k);
    FloeFeed f = {xn, x};
    const char *fetch = rn;
    int iters = iters_for(b);
    double *t = calloc((size_t)iters, sizeof *t);
    for (int i = 0; i < iters + 2; i++) {
      pthread_barrier_wait(&bar); /* every rank starts the step together */
      FloeTensor *out = NULL;
      double t0 = now_us();
      if (floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) die("step", st);
      if (i >= 2) t[i - 2] = now_us() - t0;
      floe_tensor_release(out);
    }
    snprintf(what, sizeof what, "floe_%s", backend);
    if (r == 0) report(what, b, iters, t);
    free(t);
    floe_tensor_release(x);
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"ranks", required_argument, NULL, 'n'},
                                       {"backend", required_argument, NULL, 'b'},
                                       {"min-bytes", required_argument, NULL, 'm'},
                                       {"max-bytes", required_argument, NULL, 'M'},
                                       {"fusion", no_argument, NULL, 'f'},
                                       {"api", no_argument, NULL, 'a'},
                                       {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'n') nranks = atoi(optarg);
    else if (c == 'b') backend = optarg;
    else if (c == 'm') min_bytes = (size_t)atoll(optarg);
    else if (c == 'M') max_bytes = (size_t)atoll(optarg);
    else if (c == 'f') fusion_mode = 1;
    else if (c == 'a') api_mode = 1;
    else {
      fprintf(stderr, "usage: bench_allreduce [--ranks N] [--backend ring|gloo] [--min-bytes B] "
                      "[--max-bytes B] [--fusion | --api]\n");
      return 2;
    }
  }
  if (nranks < 2 || nranks > MAX_RANKS || min_bytes < 4 || max_bytes < min_bytes) {
    fprintf(stderr, "bench_allreduce: --ranks 2..%d, 4 <= --min-bytes <= --max-bytes\n", MAX_RANKS);
    return 2;
  }
  setenv("FLOE_JOB_SECRET", "bench-allreduce-secret-0123456789abcdef", 1);
  unsetenv("FLOE_JOB_SECRET_FILE");
  size_t used = (size_t)snprintf(json_spec, sizeof json_spec, "{\"cluster\": {\"worker\": [");
  for (int r = 0; r < nranks; r++)
    used += (size_t)snprintf(json_spec + used, sizeof json_spec - used, "%s\"127.0.0.1:%d\"",
                             r ? ", " : "", free_port());
  snprintf(json_spec + used, sizeof json_spec - used,
           "]}, \"task\": {\"type\": \"worker\", \"index\": 0}}");
  FloeStatus *st = floe_status_new();
  for (int r = nranks - 1; r >= 0; r--) {
    FloeRuntimeOptions ro = {0};
    ro.struct_size = sizeof ro;
    ro.num_threads = 1;
    if (!(rts[r] = floe_runtime_new(&ro, st))) die("runtime", st);
    FloeServerOptions o;
    floe_server_options_init(&o);
    o.runtime = rts[r];
    o.cluster = json_spec;
    o.job = "worker";
    o.task = r;
    if (!(srvs[r] = floe_server_start(&o, st))) die("server", st);
  }
  pthread_barrier_init(&bar, NULL, (unsigned)nranks);
  pthread_t th[MAX_RANKS];
  for (int r = 0; r < nranks; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < nranks; r++) floe_server_free(srvs[r]);
  for (int r = 0; r < nranks; r++) floe_runtime_free(rts[r]);
  floe_status_free(st);
  return 0;
}
