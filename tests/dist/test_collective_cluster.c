/* SPDX-License-Identifier: Apache-2.0 */
/* test_collective_cluster.c - collective ops across the tasks of a cluster, each task a
 * runtime and a server in this process and each worker running its own session (between-
 * graph replication, as data-parallel training does): the group forms through the
 * coordination service's store and the ring moves its bytes over the data plane.
 *   - all-reduce (sum, mean), all-gather, reduce-scatter and broadcast over 3 workers, step
 *     after step, against values computed here; with every collective backend loaded (the
 *     ring, and gloo when its plugin is on FLOE_PLUGIN_PATH);
 *   - a worker whose server is freed after the first step: the others' next step fails,
 *     naming what is unavailable, within the heartbeat timeout and a few seconds;
 *   - a group one member short fails by its timeout, counting who came;
 *   - (plugin backends) a count that changes on one worker only: the core's check across the
 *     ranks through the coordination service fails every worker, naming both counts;
 *   - (plugin backends) 2,100 steps of an all-reduce whose count changes every step and of a
 *     broadcast: the store (at most 4,096 keys) keeps only what is in flight;
 *   - a group of two workers, all-reduces small (the ring's recursive doubling) and large;
 *   - data-parallel training (floe_allreduce_minimize after floe_broadcast_variables): 3
 *     replicas that start apart end bitwise equal, where one process on the whole batch
 *     ends, with tensor fusion (one collective) and without (one per variable).
 * The suite runs over the local transport, then fabric, then ucx (each when built). */
#include <arpa/inet.h>
#include <check.h>
#include <floe/floe.h>
#include <floe/floe_collective.h>
#include <floe/floe_dist.h>
#include <floe/floe_train.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist_ports.h"

#define NW 3
#define COUNT 300000 /* elements: 1.2 MB, a few 1 MiB chunks around the ring */

static char g_path[4096];
static const char *g_backend = "ring";

typedef struct Cluster {
  char json[1024];
  FloeRuntime *rt[NW];
  FloeServer *srv[NW];
} Cluster;

static FloeRuntime *runtime(void) {
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {0};
  o.struct_size = sizeof o;
  o.plugin_path = g_path[0] ? g_path : NULL;
  FloeRuntime *rt = floe_runtime_new(&o, st);
  ck_assert_msg(rt != NULL, "%s", floe_status_message(st));
  floe_status_free(st);
  return rt;
}

static void stop(Cluster *c) {
  for (int i = 0; i < NW; i++) floe_server_free(c->srv[i]);
  for (int i = 0; i < NW; i++) floe_runtime_free(c->rt[i]);
}

/* Workers 0..NW-1; worker 0 is the chief (no chief job); started again on new ports when
 * one was taken before its server listened (dist_ports.h). */
static void start(Cluster *c, int hb_timeout_ms) {
  setenv("FLOE_JOB_SECRET", "test-collective-cluster-secret-0123456789", 1);
  unsetenv("FLOE_JOB_SECRET_FILE");
  FloeStatus *st = floe_status_new();
  for (int attempt = 0;; attempt++) {
    memset(c, 0, sizeof *c);
    int p[NW];
    dist_free_ports(p, NW);
    snprintf(c->json, sizeof c->json,
             "{\"cluster\": {\"worker\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\", \"127.0.0.1:%d\"]}, "
             "\"task\": {\"type\": \"worker\", \"index\": 0}}",
             p[0], p[1], p[2]);
    bool ok = true;
    for (int i = NW - 1; i >= 0 && ok; i--) {
      c->rt[i] = runtime();
      FloeServerOptions o;
      floe_server_options_init(&o);
      o.runtime = c->rt[i];
      o.cluster = c->json;
      o.job = "worker";
      o.task = i;
      o.heartbeat_interval_ms = 100;
      o.heartbeat_timeout_ms = hb_timeout_ms;
      c->srv[i] = floe_server_start(&o, st);
      ok = c->srv[i] != NULL;
    }
    if (ok) break;
    ck_assert_msg(dist_port_taken(st) && attempt + 1 < DIST_START_ATTEMPTS, "%s",
                  floe_status_message(st));
    stop(c); /* servers and runtimes not started are NULL: freeing them is a no-op */
  }
  floe_status_free(st);
}

static double input_value(int r, int64_t j, int step) { return (r + 1) * 0.5 + (j % 17) + step; }

/* A new graph whose nodes go to worker w's CPU. */
static FloeGraph *task_graph(int w) {
  FloeGraph *g = floe_graph_new();
  char dev[64];
  snprintf(dev, sizeof dev, "/job:worker/task:%d/device:CPU:0", w);
  floe_graph_set_device_scope(g, dev);
  return g;
}

/* Worker w's session of graph g on its own runtime, in the cluster; NULL: st says why. */
static FloeSession *task_session(Cluster *c, int w, FloeGraph *g, FloeStatus *st) {
  char json[1024], *task = strstr(c->json, "\"task\"");
  snprintf(json, sizeof json, "%.*s\"task\": {\"type\": \"worker\", \"index\": %d}}",
           (int)(task - c->json), c->json, w);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c->rt[w];
  so.cluster = json;
  so.cluster_timeout_ms = 20000;
  return floe_session_new(g, &so, st);
}

/* Worker w's graph: its input on its own CPU and the five collectives of group 1. */
static FloeGraph *worker_graph(int w, int group_size, int64_t timeout_ms) {
  FloeGraph *g = task_graph(w);
  int64_t dims[1] = {COUNT};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, dims));
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = group_size;
  o.group_key = 1;
  o.backend = g_backend;
  o.timeout_ms = timeout_ms;
  o.instance_key = 1;
  floe_all_reduce(g, "sum", x, FLOE_REDUCE_SUM, &o);
  o.instance_key = 2;
  floe_all_reduce(g, "mean", x, FLOE_REDUCE_MEAN, &o);
  o.instance_key = 3;
  floe_all_gather(g, "gather", x, &o);
  o.instance_key = 4;
  floe_reduce_scatter(g, "scatter", x, FLOE_REDUCE_SUM, &o);
  o.instance_key = 5;
  if (w == 1) floe_broadcast_send(g, "bcast", x, &o);
  else floe_broadcast_recv(g, "bcast", FLOE_F32, floe_shape_make(1, dims), &o);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

typedef struct Worker {
  Cluster *c;
  int w, steps, group_size;
  int64_t timeout_ms;
  floe_code code;        /* of the first failing step */
  int failed_step;
  double fail_after_s;   /* seconds from the failing step's start to its failure */
  char err[1024];
  pthread_barrier_t *after_first; /* NULL: none; else every worker waits here after step 0 */
} Worker;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check_outputs(Worker *wk, int step, FloeTensor **outs) {
  const float *sum = floe_tensor_data(outs[0]), *mean = floe_tensor_data(outs[1]),
              *gather = floe_tensor_data(outs[2]), *scatter = floe_tensor_data(outs[3]),
              *bcast = floe_tensor_data(outs[4]);
  int n = wk->group_size;
  ck_assert_int_eq(floe_tensor_num_elements(outs[2]), (int64_t)COUNT * n);
  ck_assert_int_eq(floe_tensor_num_elements(outs[3]), COUNT / n);
  for (int64_t j = 0; j < COUNT; j += 7) {
    double s = 0;
    for (int r = 0; r < n; r++) s += input_value(r, j, step);
    ck_assert_msg(fabs(sum[j] - s) < 1e-3, "worker %d step %d: sum[%lld] = %g, want %g", wk->w,
                  step, (long long)j, sum[j], s);
    ck_assert_msg(fabs(mean[j] - s / n) < 1e-3, "worker %d: mean[%lld]", wk->w, (long long)j);
    for (int r = 0; r < n; r++)
      ck_assert_msg(fabs(gather[r * COUNT + j] - input_value(r, j, step)) < 1e-4,
                    "worker %d: gather rank %d [%lld]", wk->w, r, (long long)j);
    ck_assert_msg(fabs(bcast[j] - input_value(1, j, step)) < 1e-4, "worker %d: bcast[%lld]",
                  wk->w, (long long)j);
  }
  for (int64_t j = 0; j < COUNT / n; j += 5) {
    double s = 0;
    for (int r = 0; r < n; r++) s += input_value(r, wk->w * (COUNT / n) + j, step);
    ck_assert_msg(fabs(scatter[j] - s) < 1e-3, "worker %d: scatter[%lld] = %g, want %g", wk->w,
                  (long long)j, scatter[j], s);
  }
}

static void *worker_main(void *arg) {
  Worker *wk = arg;
  FloeGraph *g = worker_graph(wk->w, wk->group_size, wk->timeout_ms);
  FloeStatus *st = floe_status_new();
  FloeSession *s = task_session(wk->c, wk->w, g, st);
  wk->failed_step = -1;
  if (!s) {
    wk->code = floe_status_code(st);
    snprintf(wk->err, sizeof wk->err, "worker %d: session: %s", wk->w, floe_status_message(st));
  }
  for (int step = 0; s && step < wk->steps; step++) {
    int64_t dims[1] = {COUNT};
    FloeTensor *x = floe_tensor_new(FLOE_F32, 1, dims, NULL);
    float *xv = floe_tensor_data(x);
    for (int64_t j = 0; j < COUNT; j++) xv[j] = (float)input_value(wk->w, j, step);
    FloeFeed f = {"x", x};
    const char *fetch[5] = {"sum", "mean", "gather", "scatter", "bcast"};
    FloeTensor *outs[5] = {0};
    FloeRunOptions ro;
    floe_run_options_init(&ro);
    ro.timeout_ms = 30000;
    double t0 = now_s();
    floe_code rc = floe_session_run_opts(s, &ro, &f, 1, fetch, 5, NULL, 0, outs, st);
    floe_tensor_release(x);
    if (rc != FLOE_OK) {
      wk->code = rc;
      wk->failed_step = step;
      wk->fail_after_s = now_s() - t0;
      snprintf(wk->err, sizeof wk->err, "worker %d step %d: %s", wk->w, step,
               floe_status_message(st));
      break;
    }
    check_outputs(wk, step, outs);
    for (int i = 0; i < 5; i++) floe_tensor_release(outs[i]);
    if (step == 0 && wk->after_first) pthread_barrier_wait(wk->after_first);
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

START_TEST(test_collectives_across_tasks) {
  Cluster c;
  start(&c, 10000);
  Worker wk[NW];
  pthread_t th[NW];
  for (int w = 0; w < NW; w++) {
    wk[w] = (Worker){.c = &c, .w = w, .steps = 4, .group_size = NW};
    ck_assert_int_eq(pthread_create(&th[w], NULL, worker_main, &wk[w]), 0);
  }
  for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < NW; w++) ck_assert_msg(!wk[w].err[0], "%s", wk[w].err);
  /* The group's bytes crossed the data plane: every worker sent to its ring neighbour. */
  FloeTaskTraffic tt[NW];
  int peers = floe_server_traffic(c.srv[0], tt, NW);
  int64_t sent = 0;
  for (int i = 0; i < peers && i < NW; i++) sent += tt[i].bytes_sent;
  printf("%s: worker 0 sent %lld bytes to its peers over 4 steps\n", g_backend,
         (long long)sent);
  stop(&c);
}
END_TEST

/* Worker 2's server goes after the first step; workers 0 and 1 then wait on a dead rank. */
START_TEST(test_dead_member_fails_the_others) {
  Cluster c;
  start(&c, 1500);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, NW + 1);
  Worker wk[NW];
  pthread_t th[NW];
  for (int w = 0; w < NW; w++) {
    wk[w] = (Worker){.c = &c, .w = w, .steps = w == 2 ? 1 : 3, .group_size = NW,
                     .after_first = &bar};
    ck_assert_int_eq(pthread_create(&th[w], NULL, worker_main, &wk[w]), 0);
  }
  pthread_barrier_wait(&bar); /* every worker finished step 0 */
  pthread_join(th[2], NULL);
  floe_server_free(c.srv[2]);
  c.srv[2] = NULL;
  for (int w = 0; w < 2; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < 2; w++) {
    ck_assert_msg(wk[w].failed_step == 1, "worker %d: failed at step %d: %s", w,
                  wk[w].failed_step, wk[w].err);
    ck_assert_msg(wk[w].code != FLOE_OK, "worker %d did not fail", w);
    ck_assert_msg(wk[w].fail_after_s < 1.5 + 6.0, "worker %d took %.1f s to fail: %s", w,
                  wk[w].fail_after_s, wk[w].err);
    printf("%s: worker %d failed after %.2f s: %s\n", g_backend, w, wk[w].fail_after_s,
           wk[w].err);
  }
  pthread_barrier_destroy(&bar);
  stop(&c);
}
END_TEST

/* Only workers 0 and 1 run a group of 3: it never fills. */
START_TEST(test_group_short_of_a_member) {
  Cluster c;
  start(&c, 10000);
  Worker wk[2];
  pthread_t th[2];
  for (int w = 0; w < 2; w++) {
    wk[w] = (Worker){.c = &c, .w = w, .steps = 1, .group_size = NW, .timeout_ms = 1000};
    ck_assert_int_eq(pthread_create(&th[w], NULL, worker_main, &wk[w]), 0);
  }
  for (int w = 0; w < 2; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < 2; w++) {
    ck_assert_msg(wk[w].code == FLOE_DEADLINE_EXCEEDED, "worker %d: %s", w, wk[w].err);
    ck_assert_msg(strstr(wk[w].err, "2 of 3 members joined"), "worker %d: %s", w, wk[w].err);
  }
  stop(&c);
}
END_TEST

/* ---- the core's argument check through the coordination service's store ---- */

#define CHANGE_STEPS 3

typedef struct ChangeWorker {
  Cluster *c;
  int w;
  int failed_step;       /* -1: none */
  floe_code code;
  char err[2048];
} ChangeWorker;

/* An all-reduce of a fed vector (instance 9): 1000 elements at steps 0 and 1, then 2000 on
 * worker 2 alone. */
static void *change_main(void *arg) {
  ChangeWorker *cw = arg;
  FloeGraph *g = task_graph(cw->w);
  int64_t any[1] = {-1};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, any));
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = NW;
  o.group_key = 3;
  o.instance_key = 9;
  o.backend = g_backend;
  o.timeout_ms = 1500;
  floe_all_reduce(g, "sum", x, FLOE_REDUCE_SUM, &o);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = task_session(cw->c, cw->w, g, st);
  cw->failed_step = -1;
  for (int step = 0; step < CHANGE_STEPS && cw->failed_step < 0; step++) {
    int64_t dims[1] = {step == 2 && cw->w == 2 ? 2000 : 1000};
    FloeTensor *t = floe_tensor_new(FLOE_F32, 1, dims, NULL);
    float *v = floe_tensor_data(t);
    for (int64_t j = 0; j < dims[0]; j++) v[j] = (float)input_value(cw->w, j, step);
    FloeFeed f = {"x", t};
    const char *fetch = "sum";
    FloeTensor *out = NULL;
    floe_code rc = s ? floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &out, st)
                     : floe_status_code(st);
    floe_tensor_release(t);
    if (out) floe_tensor_release(out);
    if (rc != FLOE_OK) {
      cw->failed_step = step;
      cw->code = rc;
      snprintf(cw->err, sizeof cw->err, "%s", floe_status_message(st));
    }
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

/* Worker 2 alone changes the count at execution 2: it checks and fails naming both counts;
 * the others, unchanged, issue the operation, which fails on the group's timeout and is
 * explained from worker 2's record. The ring checks each transfer's size itself instead: its
 * round is skipped. */
START_TEST(test_count_changes_on_one_worker) {
  if (strcmp(g_backend, "ring") == 0) return;
  Cluster c;
  start(&c, 10000);
  ChangeWorker cw[NW];
  pthread_t th[NW];
  for (int w = 0; w < NW; w++) {
    cw[w] = (ChangeWorker){.c = &c, .w = w};
    ck_assert_int_eq(pthread_create(&th[w], NULL, change_main, &cw[w]), 0);
  }
  for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < NW; w++) {
    printf("%s: worker %d: %s\n", g_backend, w, cw[w].err);
    ck_assert_msg(cw[w].failed_step == 2, "worker %d failed at step %d: %s", w,
                  cw[w].failed_step, cw[w].err);
    ck_assert_msg(strstr(cw[w].err, "instance 9") && strstr(cw[w].err, "execution 2") &&
                      strstr(cw[w].err, "1000 x f32") && strstr(cw[w].err, "2000 x f32"),
                  "worker %d: %s", w, cw[w].err);
    ck_assert_int_eq(cw[w].code, w == 2 ? FLOE_DEADLINE_EXCEEDED : FLOE_INVALID_ARGUMENT);
  }
  stop(&c);
}
END_TEST

/* ---- two workers: the ring's recursive doubling over the data plane ---- */

typedef struct PairWorker {
  Cluster *c;
  int w;
  char err[1024];
} PairWorker;

/* An all-reduce (sum, max) of workers 0 and 1 at sizes that go by recursive doubling (a
 * small all-reduce of a power-of-two group: each rank swaps its whole tensor with its
 * partner) and by the ring (past FLOE_COLLECTIVE_RD_BYTES, 1 MiB), three steps each. */
static void *pair_main(void *arg) {
  PairWorker *pw = arg;
  static const int64_t counts[3] = {7, 60000, 400000};
  FloeGraph *g = task_graph(pw->w);
  int64_t any[1] = {-1};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, any));
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = 2;
  o.group_key = 5;
  o.backend = g_backend;
  o.timeout_ms = 20000;
  o.instance_key = 1;
  floe_all_reduce(g, "sum", x, FLOE_REDUCE_SUM, &o);
  o.instance_key = 2;
  floe_all_reduce(g, "max", x, FLOE_REDUCE_MAX, &o);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = task_session(pw->c, pw->w, g, st);
  if (!s) snprintf(pw->err, sizeof pw->err, "session: %s", floe_status_message(st));
  for (int k = 0; s && k < 3 && !pw->err[0]; k++)
    for (int step = 0; step < 3 && !pw->err[0]; step++) {
      int64_t dims[1] = {counts[k]};
      FloeTensor *t = floe_tensor_new(FLOE_F32, 1, dims, NULL);
      float *v = floe_tensor_data(t);
      for (int64_t j = 0; j < dims[0]; j++) v[j] = (float)input_value(pw->w, j, step);
      FloeFeed f = {"x", t};
      const char *fetch[2] = {"sum", "max"};
      FloeTensor *out[2] = {NULL, NULL};
      floe_code rc = floe_session_run(s, &f, 1, fetch, 2, NULL, 0, out, st);
      floe_tensor_release(t);
      if (rc != FLOE_OK) {
        snprintf(pw->err, sizeof pw->err, "worker %d, %lld values, step %d: %s", pw->w,
                 (long long)dims[0], step, floe_status_message(st));
        break;
      }
      const float *sum = floe_tensor_data(out[0]), *mx = floe_tensor_data(out[1]);
      for (int64_t j = 0; j < dims[0] && !pw->err[0]; j++) {
        float a = (float)input_value(0, j, step), b = (float)input_value(1, j, step);
        if (sum[j] != a + b || mx[j] != (a > b ? a : b))
          snprintf(pw->err, sizeof pw->err, "worker %d, %lld values, step %d: [%lld] sum %g max "
                   "%g, want %g and %g", pw->w, (long long)dims[0], step, (long long)j, sum[j],
                   mx[j], a + b, a > b ? a : b);
      }
      floe_tensor_release(out[0]);
      floe_tensor_release(out[1]);
    }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

START_TEST(test_two_workers) {
  Cluster c;
  start(&c, 10000);
  PairWorker pw[2];
  pthread_t th[2];
  for (int w = 0; w < 2; w++) {
    pw[w] = (PairWorker){.c = &c, .w = w};
    ck_assert_int_eq(pthread_create(&th[w], NULL, pair_main, &pw[w]), 0);
  }
  for (int w = 0; w < 2; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < 2; w++) ck_assert_msg(!pw[w].err[0], "%s", pw[w].err);
  stop(&c);
}
END_TEST

/* ---- the coordination service's store stays bounded ---- */

/* More executions than the store holds keys (4,096): an all-reduce whose count changes at
 * every step on every worker (so the core checks its arguments every time: a record per
 * rank per execution) and a broadcast from worker 0 (its sender's announcement). */
#define BOUNDED_STEPS 2100

typedef struct BoundedWorker {
  Cluster *c;
  int w;
  int failed_step; /* -1: none */
  char err[2048];
} BoundedWorker;

static void *bounded_main(void *arg) {
  BoundedWorker *bw = arg;
  FloeGraph *g = task_graph(bw->w);
  int64_t any[1] = {-1}, four[1] = {4};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, any));
  FloeCollectiveOptions o;
  floe_collective_options_init(&o);
  o.group_size = NW;
  o.group_key = 4;
  o.backend = g_backend;
  o.timeout_ms = 20000;
  o.instance_key = 11;
  floe_all_reduce(g, "sum", x, FLOE_REDUCE_SUM, &o);
  o.instance_key = 12;
  FloeOutput y = floe_placeholder(g, "y", FLOE_F32, floe_shape_make(1, four));
  if (bw->w == 0) floe_broadcast_send(g, "bcast", y, &o);
  else floe_broadcast_recv(g, "bcast", FLOE_F32, floe_shape_make(1, four), &o);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = task_session(bw->c, bw->w, g, st);
  bw->failed_step = s ? -1 : 0;
  if (!s) snprintf(bw->err, sizeof bw->err, "%s", floe_status_message(st));
  for (int step = 0; s && step < BOUNDED_STEPS && bw->failed_step < 0; step++) {
    int64_t dims[1] = {step % 2 ? 200 : 100};
    FloeTensor *t = floe_tensor_new(FLOE_F32, 1, dims, NULL), *u = floe_tensor_new(FLOE_F32, 1, four, NULL);
    float *v = floe_tensor_data(t), *b = floe_tensor_data(u);
    for (int64_t j = 0; j < dims[0]; j++) v[j] = (float)(bw->w + j);
    for (int j = 0; j < 4; j++) b[j] = (float)(step + j);
    FloeFeed f[2] = {{"x", t}, {"y", u}};
    const char *fetch[2] = {"sum", "bcast"};
    FloeTensor *out[2] = {NULL, NULL};
    floe_code rc = floe_session_run(s, f, bw->w == 0 ? 2 : 1, fetch, 2, NULL, 0, out, st);
    if (rc == FLOE_OK) { /* the sum of the three workers' w + j; the sender's values */
      const float *sum = floe_tensor_data(out[0]), *bc = floe_tensor_data(out[1]);
      if (sum[dims[0] - 1] != (float)(3 * (dims[0] - 1) + 3) || bc[3] != (float)(step + 3)) {
        rc = FLOE_INTERNAL;
        floe_status_set(st, rc, "step %d: sum[-1] %g, bcast[3] %g", step, sum[dims[0] - 1],
                        bc[3]);
      }
    }
    floe_tensor_release(t);
    floe_tensor_release(u);
    for (int k = 0; k < 2; k++)
      if (out[k]) floe_tensor_release(out[k]);
    if (rc != FLOE_OK) {
      bw->failed_step = step;
      snprintf(bw->err, sizeof bw->err, "%s", floe_status_message(st));
    }
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

/* Plugin backends (the ring keeps nothing in the store per operation), over one transport
 * (the store is the same over each). */
START_TEST(test_store_stays_bounded) {
  const char *t = getenv("FLOE_TRANSPORT");
  if (strcmp(g_backend, "ring") == 0 || (t && strcmp(t, "local") != 0)) return;
  Cluster c;
  start(&c, 10000);
  BoundedWorker bw[NW];
  pthread_t th[NW];
  double t0 = now_s();
  for (int w = 0; w < NW; w++) {
    bw[w] = (BoundedWorker){.c = &c, .w = w};
    ck_assert_int_eq(pthread_create(&th[w], NULL, bounded_main, &bw[w]), 0);
  }
  for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
  printf("%s: %d steps of a checked all-reduce and a broadcast in %.1f s\n", g_backend,
         BOUNDED_STEPS, now_s() - t0);
  for (int w = 0; w < NW; w++)
    ck_assert_msg(bw[w].failed_step < 0, "worker %d failed at step %d: %s", w,
                  bw[w].failed_step, bw[w].err);
  stop(&c);
}
END_TEST

/* ---- data-parallel training (floe_allreduce_minimize, floe_broadcast_variables) ---- */

#define DP_ROWS 6  /* the global batch: NW replicas of 2 rows */
#define DP_IN 5
#define DP_OUT 3
#define DP_STEPS 3

static float dp_x(int i, int j) { return (float)((i * 7 + j * 3) % 11) / 5.0f - 1.0f; }
static float dp_y(int i, int j) { return (float)((i + 2 * j) % 5) / 4.0f; }

/* rows [lo, hi) of the data as constants; W (seed) and b; loss = mean((xW + b - y)^2). */
static FloeOutput dp_model(FloeGraph *g, int lo, int hi, int64_t seed) {
  int64_t xd[2] = {hi - lo, DP_IN}, yd[2] = {hi - lo, DP_OUT};
  FloeTensor *xt = floe_tensor_new(FLOE_F32, 2, xd, NULL);
  FloeTensor *yt = floe_tensor_new(FLOE_F32, 2, yd, NULL);
  float *xv = floe_tensor_data(xt), *yv = floe_tensor_data(yt);
  for (int i = lo; i < hi; i++) {
    for (int j = 0; j < DP_IN; j++) xv[(i - lo) * DP_IN + j] = dp_x(i, j);
    for (int j = 0; j < DP_OUT; j++) yv[(i - lo) * DP_OUT + j] = dp_y(i, j);
  }
  FloeOutput x = floe_const(g, "x", xt), y = floe_const(g, "y", yt);
  floe_tensor_release(xt);
  floe_tensor_release(yt);
  int64_t wd[2] = {DP_IN, DP_OUT}, bd[1] = {DP_OUT};
  FloeVariable w = floe_variable(g, "w", FLOE_F32, floe_shape_make(2, wd),
                                 floe_init_uniform(-1, 1, seed));
  FloeVariable b = floe_variable(g, "b", FLOE_F32, floe_shape_make(1, bd),
                                 floe_init_uniform(-0.5, 0.5, seed + 100));
  FloeOutput pred = floe_binary(g, "Add", "pred", floe_matmul(g, "xw", x, w.value, 0, 0), b.value);
  FloeOutput sq = floe_unary(g, "Square", "sq", floe_binary(g, "Sub", "err", pred, y));
  int64_t ad[1] = {2};
  FloeTensor *axes = floe_tensor_new(FLOE_I32, 1, ad, NULL);
  ((int32_t *)floe_tensor_data(axes))[0] = 0;
  ((int32_t *)floe_tensor_data(axes))[1] = 1;
  FloeOutput ax = floe_const(g, "axes", axes);
  floe_tensor_release(axes);
  return floe_binary(g, "Mean", "loss", sq, ax);
}

/* w and b after DP_STEPS of SGD on the whole batch in one process, from worker 0's init. */
static void dp_reference(float *w, float *b) {
  FloeGraph *g = floe_graph_new();
  FloeOutput loss = dp_model(g, 0, DP_ROWS, 10);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.1;
  floe_minimize(g, "train", loss, &o, NULL, 0);
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeRuntime *rt = runtime();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  const char *init = "init", *train = "train", *fetch[2] = {"w/read", "b/read"};
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  for (int i = 0; i < DP_STEPS; i++)
    ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &train, 1, NULL, st), FLOE_OK);
  FloeTensor *out[2];
  ck_assert_int_eq(floe_session_run(s, NULL, 0, fetch, 2, NULL, 0, out, st), FLOE_OK);
  memcpy(w, floe_tensor_data(out[0]), sizeof(float) * DP_IN * DP_OUT);
  memcpy(b, floe_tensor_data(out[1]), sizeof(float) * DP_OUT);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
  floe_status_free(st);
}

typedef struct DpWorker {
  Cluster *c;
  int w;
  int64_t fusion_bytes;
  float wv[DP_IN * DP_OUT], bv[DP_OUT];
  int collectives;  /* CollectiveReduce nodes in the training step */
  char err[1024];
} DpWorker;

static void *dp_main(void *arg) {
  DpWorker *d = arg;
  FloeGraph *g = task_graph(d->w);
  /* Different initial values on every replica: the broadcast makes them worker 0's. */
  FloeOutput loss = dp_model(g, 2 * d->w, 2 * d->w + 2, 10 + d->w);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.1;
  FloeAllReduceOptions ao;
  floe_all_reduce_options_init(&ao);
  ao.group_size = NW;
  ao.group_key = 7;
  ao.fusion_bytes = d->fusion_bytes;
  ao.backend = g_backend;
  floe_allreduce_minimize(g, "train", loss, &o, &ao, NULL, 0);
  floe_variables_initializer(g, "init");
  floe_broadcast_variables(g, "sync", d->w == 0, &ao);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  for (int i = 0; i < floe_graph_num_nodes(g); i++)
    d->collectives += !strcmp(floe_node_op(floe_graph_node(g, i)), "CollectiveReduce");
  FloeStatus *st = floe_status_new();
  FloeSession *s = task_session(d->c, d->w, g, st);
  const char *init = "init", *sync = "sync", *train = "train", *fetch[2] = {"w/read", "b/read"};
  FloeTensor *out[2] = {0};
  if (!s || floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) != FLOE_OK ||
      floe_session_run(s, NULL, 0, NULL, 0, &sync, 1, NULL, st) != FLOE_OK) {
    snprintf(d->err, sizeof d->err, "worker %d: start: %s", d->w, floe_status_message(st));
    goto out;
  }
  for (int i = 0; i < DP_STEPS; i++)
    if (floe_session_run(s, NULL, 0, NULL, 0, &train, 1, NULL, st) != FLOE_OK) {
      snprintf(d->err, sizeof d->err, "worker %d: step %d: %s", d->w, i, floe_status_message(st));
      goto out;
    }
  if (floe_session_run(s, NULL, 0, fetch, 2, NULL, 0, out, st) != FLOE_OK) {
    snprintf(d->err, sizeof d->err, "worker %d: read: %s", d->w, floe_status_message(st));
    goto out;
  }
  memcpy(d->wv, floe_tensor_data(out[0]), sizeof d->wv);
  memcpy(d->bv, floe_tensor_data(out[1]), sizeof d->bv);
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
out:
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

/* Replicas that start apart, synced by the broadcast, each training on its third of the
 * batch with averaged gradients, end where one process training on the whole batch ends;
 * with and without fusion (one collective for both variables, or one each). */
START_TEST(test_data_parallel_matches_one_process) {
  float rw[DP_IN * DP_OUT], rb[DP_OUT];
  dp_reference(rw, rb);
  const int64_t fusions[2] = {4 << 20, 0};
  for (int f = 0; f < 2; f++) {
    Cluster c;
    start(&c, 10000);
    DpWorker d[NW];
    pthread_t th[NW];
    for (int w = 0; w < NW; w++) {
      memset(&d[w], 0, sizeof d[w]);
      d[w].c = &c;
      d[w].w = w;
      d[w].fusion_bytes = fusions[f];
      ck_assert_int_eq(pthread_create(&th[w], NULL, dp_main, &d[w]), 0);
    }
    for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
    for (int w = 0; w < NW; w++) {
      ck_assert_msg(!d[w].err[0], "%s", d[w].err);
      ck_assert_int_eq(d[w].collectives, f == 0 ? 1 : 2);
      for (int i = 0; i < DP_IN * DP_OUT; i++) {
        ck_assert_msg(fabsf(d[w].wv[i] - rw[i]) < 1e-5f, "fusion %lld: worker %d w[%d] = %g, one "
                      "process %g", (long long)fusions[f], w, i, d[w].wv[i], rw[i]);
        /* Every rank got the same sums: bitwise equal replicas. */
        ck_assert_msg(memcmp(&d[w].wv[i], &d[0].wv[i], sizeof(float)) == 0,
                      "worker %d w[%d] differs from worker 0's", w, i);
      }
      for (int i = 0; i < DP_OUT; i++)
        ck_assert_msg(fabsf(d[w].bv[i] - rb[i]) < 1e-5f, "worker %d b[%d] = %g, one process %g",
                      w, i, d[w].bv[i], rb[i]);
    }
    stop(&c);
  }
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("collective_cluster");
  TCase *tc = tcase_create("cluster");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_collectives_across_tasks);
  tcase_add_test(tc, test_dead_member_fails_the_others);
  tcase_add_test(tc, test_group_short_of_a_member);
  tcase_add_test(tc, test_count_changes_on_one_worker);
  tcase_add_test(tc, test_store_stays_bounded);
  tcase_add_test(tc, test_two_workers);
  tcase_add_test(tc, test_data_parallel_matches_one_process);
  suite_add_tcase(s, tc);
  return s;
}

/* Whether a collective backend named name is loaded (a plugin of the path registered it). */
static bool backend_loaded(const char *name) {
  if (strcmp(name, "ring") == 0) return true;
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {0};
  o.struct_size = sizeof o;
  o.plugin_path = g_path[0] ? g_path : NULL;
  FloeRuntime *rt = floe_runtime_new(&o, st);
  if (!rt) printf("no runtime to look for backend %s: %s\n", name, floe_status_message(st));
  floe_status_free(st);
  if (!rt) return false;
  bool found = false;
  for (int i = 0; i < floe_runtime_num_plugins(rt) && !found; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    found = p->num_collectives > 0 && strstr(p->name, name) != NULL;
  }
  floe_runtime_free(rt);
  return found;
}

int main(void) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR"),
             *fabric = getenv("FLOE_FABRIC_DIR"), *ucx = getenv("FLOE_UCX_DIR"),
             *coll = getenv("FLOE_COLLECTIVE_DIR");
  snprintf(g_path, sizeof g_path, "%s:%s:%s:%s:%s", cpu ? cpu : "", local ? local : "",
           fabric ? fabric : "", ucx ? ucx : "", coll ? coll : "");
  const char *transports[] = {"local", "fabric", "ucx"};
  const char *dirs[] = {local, fabric, ucx};
  const char *backends[] = {"ring", "gloo"};
  int failed = 0;
  for (int t = 0; t < 3; t++) {
    char so[4200];
    snprintf(so, sizeof so, "%s/floe-transport-%s.so", dirs[t] ? dirs[t] : ".", transports[t]);
    if (access(so, R_OK) != 0) {
      printf("transport %s not built (%s): its round skipped\n", transports[t], so);
      continue;
    }
    setenv("FLOE_TRANSPORT", transports[t], 1);
    for (int b = 0; b < 2; b++) {
      if (!backend_loaded(backends[b])) {
        printf("collective backend %s not loaded: its round skipped\n", backends[b]);
        continue;
      }
      g_backend = backends[b];
      printf("transport %s, backend %s\n", transports[t], backends[b]);
      SRunner *sr = srunner_create(make_suite());
      srunner_run_all(sr, CK_NORMAL);
      failed += srunner_ntests_failed(sr);
      srunner_free(sr);
    }
  }
  return failed ? 1 : 0;
}
