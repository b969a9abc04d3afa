/* SPDX-License-Identifier: Apache-2.0 */
/* test_cluster_inproc.c - a whole cluster in one process, through the public API only: a
 * runtime per task (its own devices, transport manager and server), the chief's session
 * naming the cluster. Lets the sanitizers and valgrind see every thread of the distributed
 * path (rpc servers, coordination, data plane, worker and master services) at once.
 *   - a graph across chief, worker 0, worker 1 and ps 0 returns the one-process values,
 *     step after step (cached registered pieces), a large tensor included;
 *   - a variable on the ps keeps its value across steps (the worker session's resources),
 *     and a frozen export of the chief's session reads it there;
 *   - between-graph replication: each worker's own session (a master in the worker's
 *     process) updates the ps's variable that the chief's session initialised, at once;
 *   - a sharded embedding on the ps trained from a worker: a step moves its rows and
 *     indices (the data plane's count), not the shards, and ends where one process does;
 *   - a while loop whose body crosses tasks, and a cond with an untaken branch on another
 *     task, give the one-process values;
 *   - a worker whose server is freed mid-session: the next step fails UNAVAILABLE naming
 *     it, within the heartbeat timeout and a second;
 *   - a worker restarted (a new incarnation): the session's next step fails ABORTED, and a
 *     new session runs.
 * The suite runs over the local transport, then over fabric (tcp;ofi_rxm) when built. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <check.h>
#include <floe/floe.h>
#include <floe/floe_dist.h>
#include <floe/floe_control.h>
#include <floe/floe_train.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist_ports.h"

#define NW 2

typedef struct Cluster {
  char json[1024];
  FloeRuntime *chief_rt, *rt[NW + 1]; /* workers, then the ps */
  FloeServer *chief, *srv[NW + 1];
} Cluster;

/* The CPU plugin and both transport plugins (make check's folders). */
static char g_path[4096];

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
  for (int i = 0; i <= NW; i++) floe_server_free(c->srv[i]);
  floe_server_free(c->chief);
  for (int i = 0; i <= NW; i++) floe_runtime_free(c->rt[i]);
  floe_runtime_free(c->chief_rt);
}

/* Started again on new ports when one was taken before its server listened
 * (dist_ports.h). */
static void start(Cluster *c, int hb_timeout_ms) {
  setenv("FLOE_JOB_SECRET", "test-cluster-inproc-secret-0123456789", 1);
  unsetenv("FLOE_JOB_SECRET_FILE");
  FloeStatus *st = floe_status_new();
  for (int attempt = 0;; attempt++) {
    memset(c, 0, sizeof *c);
    int p[4];
    dist_free_ports(p, 4);
    snprintf(c->json, sizeof c->json,
             "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\", "
             "\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\"]}, "
             "\"task\": {\"type\": \"chief\", \"index\": 0}}",
             p[0], p[1], p[2], p[3]);
    bool ok = true;
    for (int i = 0; i <= NW && ok; i++) {
      c->rt[i] = runtime();
      FloeServerOptions o;
      floe_server_options_init(&o);
      o.runtime = c->rt[i];
      o.cluster = c->json;
      o.job = i < NW ? "worker" : "ps";
      o.task = i < NW ? i : 0;
      o.heartbeat_interval_ms = 100;
      o.heartbeat_timeout_ms = hb_timeout_ms;
      ok = (c->srv[i] = floe_server_start(&o, st)) != NULL;
    }
    if (ok) {
      c->chief_rt = runtime();
      FloeServerOptions o;
      floe_server_options_init(&o);
      o.runtime = c->chief_rt;
      o.cluster = c->json;
      o.heartbeat_interval_ms = 100;
      o.heartbeat_timeout_ms = hb_timeout_ms;
      ok = (c->chief = floe_server_start(&o, st)) != NULL;
    }
    if (ok) break;
    ck_assert_msg(dist_port_taken(st) && attempt + 1 < DIST_START_ATTEMPTS, "%s",
                  floe_status_message(st));
    stop(c); /* what was not started is NULL: freeing it is a no-op */
  }
  ck_assert(floe_server_is_chief(c->chief));
  floe_status_free(st);
}


static FloeSession *cluster_session(Cluster *c, const FloeGraph *g) {
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c->chief_rt;
  so.cluster = c->json;
  so.cluster_timeout_ms = 20000;
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_status_free(st);
  return s;
}

static FloeOutput op2(FloeGraph *g, const char *op, const char *name, FloeOutput a, FloeOutput b,
                      const char *dev) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  if (dev) floe_node_set_device(nb, dev);
  return floe_out(floe_node_finish(nb), 0);
}

static FloeOutput op1(FloeGraph *g, const char *op, const char *name, FloeOutput a,
                      const char *dev) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, name);
  floe_node_add_input(nb, a);
  if (dev) floe_node_set_device(nb, dev);
  return floe_out(floe_node_finish(nb), 0);
}

/* y = Relu(x @ W) * 2 with MatMul on worker 0, Relu on worker 1; big = Sum(a * a) of a
 * [512, 512] constant on worker 0, squared on the ps (1 MiB crossing twice). */
static FloeGraph *chain(int placed) {
  FloeGraph *g = floe_graph_new();
  const int64_t xd[2] = {2, 3}, wd[2] = {3, 4}, ad[2] = {512, 512}, axd[1] = {2};
  float w[12], *a = malloc(sizeof(float) * 512 * 512);
  for (int i = 0; i < 12; i++) w[i] = (float)(i % 5) - 1.5f;
  for (int i = 0; i < 512 * 512; i++) a[i] = (float)((i * 7) % 13) * 0.25f;
  const int32_t axes[2] = {0, 1};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, w, sizeof w, NULL);
  FloeTensor *at = floe_tensor_from_data(FLOE_F32, 2, ad, a, sizeof(float) * 512 * 512, NULL);
  FloeTensor *axt = floe_tensor_from_data(FLOE_I32, 1, axd, axes, sizeof axes, NULL);
  free(a);
  const char *w0 = placed ? "/job:worker/task:0/device:cpu:0" : NULL;
  const char *w1 = placed ? "/job:worker/task:1/cpu:0" : NULL;
  const char *ps = placed ? "/job:ps/cpu:0" : NULL;
  floe_graph_set_device_scope(g, w0);
  FloeOutput W = floe_const(g, "W", wt);
  FloeOutput A = floe_const(g, "A", at);
  floe_graph_set_device_scope(g, NULL);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput m = op2(g, "MatMul", "m", x, W, w0);
  FloeOutput r = op1(g, "Relu", "r", m, w1);
  op2(g, "Mul", "y", r, floe_const_f32(g, "two", 2.0f), NULL);
  FloeOutput sq = op2(g, "Mul", "sq", A, A, ps);
  op2(g, "Sum", "big", sq, floe_const(g, "axes", axt), NULL);
  floe_tensor_release(wt);
  floe_tensor_release(at);
  floe_tensor_release(axt);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  return g;
}

/* Control flow across tasks: a while loop whose body runs on worker 0 (Mul) and worker 1
 * (Add) while its condition and counter stay on the chief, then a cond whose true branch is
 * on worker 0 and whose false branch, untaken, on worker 1. */
typedef struct Place {
  int placed;
} Place;

static const char *dev_of(const Place *p, int w) {
  if (!p->placed) return NULL;
  return w == 0 ? "/job:worker/task:0/device:cpu:0" : "/job:worker/task:1/device:cpu:0";
}

static floe_code loop_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg;
  (void)n;
  FloeTensor *five = floe_tensor_scalar_i32(5, NULL);
  *pred = op2(g, "Less", "lt", v[0], floe_const(g, "five", five), NULL);
  floe_tensor_release(five);
  return floe_graph_status(g);
}

static floe_code loop_body(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)n;
  const Place *p = arg;
  FloeTensor *one = floe_tensor_scalar_i32(1, NULL);
  next[0] = op2(g, "Add", "inc", v[0], floe_const(g, "one", one), NULL);
  floe_tensor_release(one);
  FloeOutput m = op2(g, "Mul", "scale", v[1], floe_const_f32(g, "k", 1.5f), dev_of(p, 0));
  next[1] = op2(g, "Add", "shift", m, floe_const_f32(g, "c", 1.0f), dev_of(p, 1));
  return floe_graph_status(g);
}

static floe_code branch_true(FloeGraph *g, void *arg, const FloeOutput *in, int nin,
                             FloeOutput *out, int nout) {
  (void)nin;
  (void)nout;
  out[0] = op2(g, "Mul", "twice", in[0], floe_const_f32(g, "two", 2.0f), dev_of(arg, 0));
  return floe_graph_status(g);
}

static floe_code branch_false(FloeGraph *g, void *arg, const FloeOutput *in, int nin,
                              FloeOutput *out, int nout) {
  (void)nin;
  (void)nout;
  out[0] = op2(g, "Add", "plus", in[0], floe_const_f32(g, "hundred", 100.0f), dev_of(arg, 1));
  return floe_graph_status(g);
}

static FloeGraph *control(Place *p) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[1] = {4};
  const float v[4] = {1, -2, 0.5f, 3};
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 1, d, v, sizeof v, NULL);
  FloeTensor *zero = floe_tensor_scalar_i32(0, NULL);
  FloeOutput init[2] = {floe_const(g, "i0", zero), floe_const(g, "acc0", t)};
  FloeOutput res[2];
  floe_while_loop(g, "loop", loop_cond, loop_body, p, init, 2, NULL, res);
  FloeNodeBuilder *b = floe_node_begin(g, "Identity", "acc");
  floe_node_add_input(b, res[1]);
  floe_node_finish(b);
  FloeOutput pred = floe_placeholder(g, "pred", FLOE_BOOL, floe_shape_scalar());
  FloeOutput out;
  floe_cond(g, "cond", pred, &res[1], 1, branch_true, branch_false, p, &out, 1);
  b = floe_node_begin(g, "Identity", "picked");
  floe_node_add_input(b, out);
  floe_node_finish(b);
  floe_tensor_release(t);
  floe_tensor_release(zero);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static void run_control(FloeSession *s, bool pred, FloeTensor **out) {
  uint8_t pv = pred;
  FloeTensor *pt = floe_tensor_from_data(FLOE_BOOL, 0, NULL, &pv, 1, NULL);
  FloeFeed f = {"pred", pt};
  const char *fetch[2] = {"acc", "picked"};
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, &f, 1, fetch, 2, NULL, 0, out, st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
  floe_tensor_release(pt);
}

START_TEST(test_control_flow_across_tasks) {
  Cluster c;
  start(&c, 10000);
  Place pl = {0}, pc = {1};
  FloeGraph *gl = control(&pl), *gc = control(&pc);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c.chief_rt;
  FloeStatus *st = floe_status_new();
  FloeSession *local = floe_session_new(gl, &so, st);
  ck_assert_msg(local != NULL, "%s", floe_status_message(st));
  FloeSession *s = cluster_session(&c, gc);
  for (int k = 0; k < 2; k++) { /* the true branch taken, then the false one */
    FloeTensor *want[2], *got[2];
    run_control(local, k == 0, want);
    run_control(s, k == 0, got);
    for (int i = 0; i < 2; i++) {
      ck_assert_int_eq(floe_tensor_nbytes(got[i]), floe_tensor_nbytes(want[i]));
      ck_assert_msg(!memcmp(floe_tensor_data(got[i]), floe_tensor_data(want[i]),
                            floe_tensor_nbytes(want[i])),
                    "pred %d: fetch %d differs from the one-process value", k == 0, i);
      floe_tensor_release(got[i]);
      floe_tensor_release(want[i]);
    }
  }
  floe_session_free(s);
  floe_session_free(local);
  floe_graph_free(gl);
  floe_graph_free(gc);
  floe_status_free(st);
  stop(&c);
}
END_TEST

static void run_chain(FloeSession *s, FloeTensor **out);

/* The cost model placing over the chief's and the workers' CPUs (links measured when the
 * session starts): the values are the one-process ones wherever the nodes went. */
START_TEST(test_cost_model_over_cluster) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *g = chain(0);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c.chief_rt;
  FloeStatus *st = floe_status_new();
  FloeSession *local = floe_session_new(g, &so, st);
  ck_assert_msg(local != NULL, "%s", floe_status_message(st));
  so.cluster = c.json;
  so.devices = "cpu:0,/job:worker/cpu:0,/job:ps/cpu:0";
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  FloeTensor *want[2], *got[2];
  run_chain(local, want);
  run_chain(s, got);
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(floe_tensor_nbytes(got[k]), floe_tensor_nbytes(want[k]));
    ck_assert(!memcmp(floe_tensor_data(got[k]), floe_tensor_data(want[k]), floe_tensor_nbytes(want[k])));
    floe_tensor_release(got[k]);
    floe_tensor_release(want[k]);
  }
  floe_session_free(s);
  floe_session_free(local);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST

static void run_chain(FloeSession *s, FloeTensor **out) {
  const int64_t xd[2] = {2, 3};
  const float xv[6] = {1, 2, 3, -1, 0.5f, 4};
  FloeTensor *x = floe_tensor_from_data(FLOE_F32, 2, xd, xv, sizeof xv, NULL);
  FloeFeed f = {"x", x};
  const char *fetch[2] = {"y", "big"};
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, &f, 1, fetch, 2, NULL, 0, out, st);
  ck_assert_msg(rc == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
  floe_tensor_release(x);
}

START_TEST(test_chain_matches_one_process) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *gl = chain(0), *gc = chain(1);
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c.chief_rt; /* any runtime: no cluster */
  FloeSession *local = floe_session_new(gl, &so, st);
  ck_assert_msg(local != NULL, "%s", floe_status_message(st));
  FloeSession *s = cluster_session(&c, gc);
  FloeTensor *want[2], *got[2];
  run_chain(local, want);
  for (int step = 0; step < 3; step++) {
    run_chain(s, got);
    for (int k = 0; k < 2; k++) {
      ck_assert_int_eq(floe_tensor_nbytes(got[k]), floe_tensor_nbytes(want[k]));
      ck_assert_msg(!memcmp(floe_tensor_data(got[k]), floe_tensor_data(want[k]),
                            floe_tensor_nbytes(want[k])),
                    "step %d: fetch %d differs from the one-process value", step, k);
      floe_tensor_release(got[k]);
    }
  }
  /* the relu really ran on worker 1 and the matmul on worker 0: their pieces were
   * registered there (the chief holds neither) */
  floe_tensor_release(want[0]);
  floe_tensor_release(want[1]);
  floe_session_free(s);
  floe_session_free(local);
  floe_graph_free(gl);
  floe_graph_free(gc);
  floe_status_free(st);
  stop(&c);
}
END_TEST

START_TEST(test_variable_on_ps_keeps_state) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *g = floe_graph_new();
  floe_graph_set_device_scope(g, "/job:ps/task:0/device:cpu:0");
  FloeVariable v = floe_variable(g, "counter", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  floe_graph_set_device_scope(g, "/job:worker/task:1/device:cpu:0");
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  floe_graph_set_device_scope(g, "/job:ps/task:0/device:cpu:0");
  floe_assign_add(g, "inc", v.handle, one);
  floe_graph_set_device_scope(g, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSession *s = cluster_session(&c, g);
  FloeStatus *st = floe_status_new();
  const char *init = "counter/init", *inc = "inc", *read = "counter/read";
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int i = 0; i < 3; i++)
    ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &inc, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, NULL, 0, &read, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_float_eq(*(float *)floe_tensor_data(out), 3.0f);
  floe_tensor_release(out);
  /* A frozen export reads the variable where it lives: 3, in a graph of one process. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/floe-frozen-%d.floe", (int)getpid());
  ck_assert_msg(floe_export_frozen(s, &read, 1, path, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeGraph *fg = floe_graph_load(path, st);
  unlink(path);
  ck_assert_msg(fg != NULL, "%s", floe_status_message(st));
  FloeSession *fs = floe_session_new(fg, NULL, st);
  ck_assert_msg(fs != NULL, "%s", floe_status_message(st));
  ck_assert_msg(floe_session_run(fs, NULL, 0, &read, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_float_eq(*(float *)floe_tensor_data(out), 3.0f);
  floe_tensor_release(out);
  floe_session_free(fs);
  floe_graph_free(fg);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST

/* The counter graph: the variable and its increment on the ps, the increment's value made
 * on worker w. */
static FloeGraph *counter_graph(int w) {
  FloeGraph *g = floe_graph_new();
  char dev[64];
  floe_graph_set_device_scope(g, "/job:ps/task:0/device:cpu:0");
  FloeVariable v = floe_variable(g, "counter", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  snprintf(dev, sizeof dev, "/job:worker/task:%d/device:cpu:0", w);
  floe_graph_set_device_scope(g, dev);
  FloeOutput one = floe_const_f32(g, "one", 1.0f);
  floe_graph_set_device_scope(g, "/job:ps/task:0/device:cpu:0");
  floe_assign_add(g, "inc", v.handle, one);
  floe_graph_set_device_scope(g, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  (void)v;
  return g;
}

static float read_counter(FloeSession *s) {
  FloeStatus *st = floe_status_new();
  const char *read = "counter/read";
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, NULL, 0, &read, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  float v = *(float *)floe_tensor_data(out);
  floe_tensor_release(out);
  floe_status_free(st);
  return v;
}

/* One worker's training loop, on its own thread: failures are recorded for the test's
 * thread to assert (Check's assertions belong to it). */
typedef struct WorkerLoop {
  Cluster *c;
  int w, steps;
  float first;
  char err[512];
} WorkerLoop;

static void *worker_loop(void *arg) {
  WorkerLoop *wl = arg;
  char json[1024], *task = strstr(wl->c->json, "\"task\"");
  snprintf(json, sizeof json, "%.*s\"task\": {\"type\": \"worker\", \"index\": %d}}",
           (int)(task - wl->c->json), wl->c->json, wl->w);
  FloeGraph *g = counter_graph(wl->w);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = wl->c->rt[wl->w];
  so.cluster = json;
  so.cluster_timeout_ms = 20000;
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  const char *inc = "inc", *read = "counter/read";
  FloeTensor *out = NULL;
  if (!s) {
    snprintf(wl->err, sizeof wl->err, "worker %d: session: %s", wl->w, floe_status_message(st));
  } else if (floe_session_run(s, NULL, 0, &read, 1, NULL, 0, &out, st) != FLOE_OK) {
    snprintf(wl->err, sizeof wl->err, "worker %d: read: %s", wl->w, floe_status_message(st));
  } else {
    wl->first = *(float *)floe_tensor_data(out); /* initialised by the chief's session */
    floe_tensor_release(out);
    for (int i = 0; i < wl->steps && !wl->err[0]; i++)
      if (floe_session_run(s, NULL, 0, NULL, 0, &inc, 1, NULL, st) != FLOE_OK)
        snprintf(wl->err, sizeof wl->err, "worker %d: step %d: %s", wl->w, i,
                 floe_status_message(st));
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return NULL;
}

START_TEST(test_between_graph_workers_share_ps_variables) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *g = counter_graph(0);
  FloeSession *s = cluster_session(&c, g);
  FloeStatus *st = floe_status_new();
  const char *init = "counter/init", *inc = "inc";
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &inc, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  WorkerLoop wl[NW];
  pthread_t th[NW];
  for (int w = 0; w < NW; w++) {
    wl[w] = (WorkerLoop){&c, w, 20, -1.0f, ""};
    ck_assert_int_eq(pthread_create(&th[w], NULL, worker_loop, &wl[w]), 0);
  }
  for (int w = 0; w < NW; w++) pthread_join(th[w], NULL);
  for (int w = 0; w < NW; w++) {
    ck_assert_msg(!wl[w].err[0], "%s", wl[w].err);
    ck_assert_float_ge(wl[w].first, 1.0f);
  }
  /* Every increment of both workers' sessions landed in the one variable. */
  ck_assert_float_eq(read_counter(s), 1.0f + 20.0f * NW);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST


/* emb [1000, 16] in 2 shards on the ps, 6 ids looked up and trained (SGD) from worker 0. */
static FloeGraph *embedding_graph(bool placed) {
  FloeGraph *g = floe_graph_new();
  FloeShardedVariable v = floe_sharded_variable(g, "emb", FLOE_F32,
                                                floe_shape_make(2, (int64_t[]){1000, 16}),
                                                floe_init_uniform(-1, 1, 3), 0, 2, 0);
  FloeOutput ids = floe_placeholder(g, "ids", FLOE_I32, floe_shape_make(1, (int64_t[]){6}));
  FloeOutput rows = floe_embedding_lookup_sharded(g, "lookup", &v, ids);
  FloeOutput sq = floe_unary(g, "Square", "sq", rows);
  FloeTensor *ax = floe_tensor_new(FLOE_I32, 1, (int64_t[]){2}, NULL);
  ((int32_t *)floe_tensor_data(ax))[0] = 0;
  ((int32_t *)floe_tensor_data(ax))[1] = 1;
  FloeOutput axes = floe_const(g, "axes", ax);
  floe_tensor_release(ax);
  FloeOutput loss = floe_binary(g, "Sum", "loss", sq, axes);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  floe_minimize(g, "train", loss, &o, NULL, 0);
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  if (placed) {
    FloeReplicaDeviceOptions ro;
    floe_replica_device_options_init(&ro);
    ro.num_ps = 1;
    ro.worker_device = "/job:worker/task:0";
    FloeStatus *st = floe_status_new();
    ck_assert_msg(floe_replica_device_setter(g, &ro, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    floe_status_free(st);
  }
  return g;
}

static void embedding_steps(FloeSession *s, int steps) {
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < steps; i++) {
    FloeTensor *ids = floe_tensor_new(FLOE_I32, 1, (int64_t[]){6}, NULL);
    int32_t *d = floe_tensor_data(ids);
    for (int k = 0; k < 6; k++) d[k] = (int32_t)((k * 337 + i * 101) % 1000);
    FloeFeed f = {"ids", ids};
    const char *t = "train";
    ck_assert_msg(floe_session_run(s, &f, 1, NULL, 0, &t, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    floe_tensor_release(ids);
  }
  floe_status_free(st);
}

static int64_t ps_bytes(FloeServer *srv, bool sent) {
  FloeTaskTraffic rows[8];
  int n = floe_server_traffic(srv, rows, 8);
  for (int i = 0; i < n && i < 8; i++)
    if (!strcmp(rows[i].task, "/job:ps/replica:0/task:0"))
      return sent ? rows[i].bytes_sent : rows[i].bytes_received;
  return -1;
}

START_TEST(test_sharded_embedding_moves_rows) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *g = embedding_graph(true);
  FloeSession *chief = cluster_session(&c, g);
  FloeStatus *st = floe_status_new();
  const char *init = "init";
  ck_assert_msg(floe_session_run(chief, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  char json[1024], *task = strstr(c.json, "\"task\"");
  snprintf(json, sizeof json, "%.*s\"task\": {\"type\": \"worker\", \"index\": 0}}",
           (int)(task - c.json), c.json);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c.rt[0];
  so.cluster = json;
  so.cluster_timeout_ms = 20000;
  FloeSession *w = floe_session_new(g, &so, st);
  ck_assert_msg(w != NULL, "%s", floe_status_message(st));
  embedding_steps(w, 1); /* pieces registered, channels warm */
  int64_t s0 = ps_bytes(c.srv[0], true), r0 = ps_bytes(c.srv[0], false);
  embedding_steps(w, 4);
  int64_t sent = (ps_bytes(c.srv[0], true) - s0) / 4, got = (ps_bytes(c.srv[0], false) - r0) / 4;
  /* a step: 6 ids and 6 gradient rows of 16 f32 out, 6 rows back; a shard is 32 KB */
  ck_assert_msg(sent > 0 && sent < 2048 && got > 0 && got < 2048,
                "per step %lld bytes to the ps, %lld from it", (long long)sent, (long long)got);
  /* The same five steps in one process end at the same values. */
  FloeGraph *gl = embedding_graph(false);
  FloeSession *local = floe_session_new(gl, NULL, st);
  ck_assert_msg(local != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_session_run(local, NULL, 0, NULL, 0, &init, 1, NULL, st), FLOE_OK);
  embedding_steps(local, 1);
  embedding_steps(local, 4);
  const char *whole = "emb/concat";
  FloeTensor *a = NULL, *b = NULL;
  ck_assert_int_eq(floe_session_run(chief, NULL, 0, &whole, 1, NULL, 0, &a, st), FLOE_OK);
  ck_assert_int_eq(floe_session_run(local, NULL, 0, &whole, 1, NULL, 0, &b, st), FLOE_OK);
  ck_assert(memcmp(floe_tensor_data(a), floe_tensor_data(b), 1000 * 16 * 4) == 0);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_session_free(local);
  floe_graph_free(gl);
  floe_session_free(w);
  floe_session_free(chief);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

START_TEST(test_lost_worker_is_unavailable) {
  Cluster c;
  start(&c, 500);
  FloeGraph *g = chain(1);
  FloeSession *s = cluster_session(&c, g);
  FloeTensor *got[2];
  run_chain(s, got);
  floe_tensor_release(got[0]);
  floe_tensor_release(got[1]);
  /* worker 1 goes away (its server closes every connection and stops heartbeating) */
  floe_server_free(c.srv[1]);
  c.srv[1] = NULL;
  double t0 = now_s();
  const int64_t xd[2] = {2, 3};
  FloeTensor *x = floe_tensor_new(FLOE_F32, 2, xd, NULL);
  FloeFeed f = {"x", x};
  const char *fetch = "y";
  FloeStatus *st = floe_status_new();
  FloeTensor *y = NULL;
  floe_code rc = floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &y, st);
  double took = now_s() - t0;
  ck_assert_int_eq(rc, FLOE_UNAVAILABLE);
  ck_assert_msg(strstr(floe_status_message(st), "/job:worker/task:1") != NULL,
                "the error names the task: %s", floe_status_message(st));
  ck_assert_msg(took < 0.5 + 1.0, "failed after %.2f s (heartbeat timeout 0.5 s)", took);
  floe_tensor_release(x);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST

/* Worker 1 restarts (a new server on its runtime: a new incarnation) between steps: the
 * session that used the old one fails ABORTED, naming both incarnations. */
START_TEST(test_restarted_worker_is_aborted) {
  Cluster c;
  start(&c, 10000);
  FloeGraph *g = chain(1);
  FloeSession *s = cluster_session(&c, g);
  FloeTensor *got[2];
  run_chain(s, got);
  floe_tensor_release(got[0]);
  floe_tensor_release(got[1]);
  floe_server_free(c.srv[1]);
  FloeStatus *st = floe_status_new();
  FloeServerOptions o;
  floe_server_options_init(&o);
  o.runtime = c.rt[1];
  o.cluster = c.json;
  o.job = "worker";
  o.task = 1;
  o.heartbeat_interval_ms = 100;
  c.srv[1] = floe_server_start(&o, st);
  ck_assert_msg(c.srv[1] != NULL, "%s", floe_status_message(st));
  /* it registers again within a few heartbeat intervals */
  floe_code rc = FLOE_OK;
  for (int i = 0; i < 100 && rc == FLOE_OK; i++) {
    const int64_t xd[2] = {2, 3};
    FloeTensor *x = floe_tensor_new(FLOE_F32, 2, xd, NULL);
    FloeFeed f = {"x", x};
    const char *fetch = "y";
    FloeTensor *y = NULL;
    floe_status_clear(st);
    rc = floe_session_run(s, &f, 1, &fetch, 1, NULL, 0, &y, st);
    floe_tensor_release(y);
    floe_tensor_release(x);
    if (rc == FLOE_OK) usleep(50 * 1000);
  }
  ck_assert_msg(rc == FLOE_ABORTED, "%s: %s", floe_code_name(rc), floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), "restart") != NULL &&
                    strstr(floe_status_message(st), "/job:worker/task:1") != NULL, "%s",
                floe_status_message(st));
  floe_session_free(s);
  /* a new session runs on the restarted task */
  s = cluster_session(&c, g);
  run_chain(s, got);
  floe_tensor_release(got[0]);
  floe_tensor_release(got[1]);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  stop(&c);
}
END_TEST

/* The cluster's key-value store: a value set by one task is read by another; a get waits
 * for a set that comes later; a missing key times out naming it; no overwrite refuses. */
typedef struct KvSetLater {
  FloeServer *srv;
} KvSetLater;

static void *kv_set_later(void *arg) {
  KvSetLater *k = arg;
  nanosleep(&(struct timespec){0, 200000000L}, NULL);
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_server_kv_set(k->srv, "later", "v2", 2, 0, st);
  floe_status_free(st);
  return (void *)(intptr_t)rc;
}

START_TEST(test_key_value_store) {
  Cluster c;
  start(&c, 2000);
  FloeStatus *st = floe_status_new();
  void *v = NULL;
  size_t len = 0;
  /* the chief sets, a worker and the ps read */
  ck_assert_msg(floe_server_kv_set(c.chief, "start", "47", 2, 0, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int i = 0; i <= NW; i++) {
    ck_assert_msg(floe_server_kv_get(c.srv[i], "start", 5000, &v, &len, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_uint_eq(len, 2);
    ck_assert_str_eq((const char *)v, "47");
    free(v);
  }
  /* a worker sets, the chief reads; again without overwrite is refused, with it replaces */
  ck_assert(floe_server_kv_set(c.srv[1], "w1", "abc", 3, 0, st) == FLOE_OK);
  ck_assert(floe_server_kv_get(c.chief, "w1", 0, &v, &len, st) == FLOE_OK);
  ck_assert_str_eq((const char *)v, "abc");
  free(v);
  ck_assert_int_eq(floe_server_kv_set(c.srv[0], "w1", "x", 1, 0, st), FLOE_ALREADY_EXISTS);
  ck_assert(floe_server_kv_set(c.srv[0], "w1", "x", 1, 1, st) == FLOE_OK);
  ck_assert(floe_server_kv_get(c.srv[1], "w1", 0, &v, &len, st) == FLOE_OK);
  ck_assert_str_eq((const char *)v, "x");
  free(v);
  /* a get waits for a set that comes 200 ms later */
  KvSetLater k = {c.srv[1]};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, kv_set_later, &k), 0);
  ck_assert_msg(floe_server_kv_get(c.srv[0], "later", 10000, &v, &len, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_str_eq((const char *)v, "v2");
  free(v);
  void *trc = NULL;
  pthread_join(t, &trc);
  ck_assert_int_eq((int)(intptr_t)trc, FLOE_OK);
  /* a key nobody sets: the wait ends, naming the key */
  floe_code rc = floe_server_kv_get(c.srv[0], "never", 300, &v, &len, st);
  ck_assert_msg(rc == FLOE_DEADLINE_EXCEEDED || rc == FLOE_NOT_FOUND, "%s",
                floe_code_name(rc));
  ck_assert_msg(strstr(floe_status_message(st), "never") != NULL, "%s", floe_status_message(st));
  ck_assert_ptr_null(v);
  /* bad arguments */
  ck_assert_int_eq(floe_server_kv_set(NULL, "k", "v", 1, 0, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_server_kv_get(c.chief, NULL, 0, &v, &len, st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  stop(&c);
}
END_TEST

/* Loading the plugins (the fabric transport's libfabric pulls in libinfinipath, whose
 * constructor installs exit()-calling handlers) leaves the process's signal handling alone. */
START_TEST(test_plugins_leave_signals_alone) {
  const int sigs[] = {SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGABRT, SIGILL};
  struct sigaction before[6], after;
  for (int i = 0; i < 6; i++) ck_assert_int_eq(sigaction(sigs[i], NULL, &before[i]), 0);
  FloeRuntime *rt = runtime();
  int n = floe_runtime_num_plugins(rt), fabric = 0;
  for (int i = 0; i < n; i++)
    if (strstr(floe_runtime_plugin(rt, i)->path, "fabric")) fabric = 1;
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(sigaction(sigs[i], NULL, &after), 0);
    ck_assert_msg(after.sa_handler == before[i].sa_handler,
                  "signal %d's handler changed by loading the plugins%s", sigs[i],
                  fabric ? " (the fabric transport among them)" : "");
  }
  floe_runtime_free(rt);
}
END_TEST

static Suite *make_suite(void) {
  Suite *su = suite_create("cluster_inproc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_chain_matches_one_process);
  tcase_add_test(tc, test_variable_on_ps_keeps_state);
  tcase_add_test(tc, test_between_graph_workers_share_ps_variables);
  tcase_add_test(tc, test_sharded_embedding_moves_rows);
  tcase_add_test(tc, test_key_value_store);
  tcase_add_test(tc, test_plugins_leave_signals_alone);
  tcase_add_test(tc, test_lost_worker_is_unavailable);
  tcase_add_test(tc, test_restarted_worker_is_aborted);
  tcase_add_test(tc, test_control_flow_across_tasks);
  tcase_add_test(tc, test_cost_model_over_cluster);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR"),
             *fabric = getenv("FLOE_FABRIC_DIR");
  snprintf(g_path, sizeof g_path, "%s:%s:%s", cpu ? cpu : "", local ? local : "",
           fabric ? fabric : "");
  char so[4200];
  snprintf(so, sizeof so, "%s/floe-transport-fabric.so", fabric ? fabric : ".");
  int failed = 0;
  for (int t = 0; t < 2; t++) {
    if (t == 1 && access(so, R_OK) != 0) {
      printf("fabric transport not built (%s): its round skipped\n", so);
      break;
    }
    setenv("FLOE_TRANSPORT", t == 0 ? "local" : "fabric", 1);
    printf("transport %s\n", t == 0 ? "local" : "fabric");
    SRunner *sr = srunner_create(make_suite()); /* a suite belongs to one runner */
    srunner_run_all(sr, CK_NORMAL);
    failed += srunner_ntests_failed(sr);
    srunner_free(sr);
  }
  return failed ? 1 : 0;
}
