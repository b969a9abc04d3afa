/* SPDX-License-Identifier: Apache-2.0 */
/* train_cluster.c - floe train's tasks on a cluster (train_cluster.h). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <floe/floe_train.h>

#include "cli.h"
#include "train_cluster.h"
#include "train_signal.h"

int train_cluster_option(TrainCluster *c, const char *name, const char *arg) {
  long long v;
  if (!strcmp(name, "cluster")) {
    c->spec = arg;
    return 0;
  }
  c->given = 1;
  if (!strcmp(name, "job")) {
    c->job = arg;
  } else if (!strcmp(name, "task")) {
    if (cli_int_option("train", "--task", arg, 0, 4095, &v)) return 2;
    c->task = (int)v;
  } else if (!strcmp(name, "replication")) {
    if (strcmp(arg, "async") && strcmp(arg, "sync") && strcmp(arg, "allreduce"))
      return cli_usage("train", "--replication takes async, sync or allreduce");
    c->sync = !strcmp(arg, "sync");
    c->allreduce = !strcmp(arg, "allreduce");
  } else if (!strcmp(name, "fusion-bytes")) {
    if (cli_int_option("train", "--fusion-bytes", arg, 0, (long long)1 << 40, &v)) return 2;
    c->fusion_bytes = v;
  } else if (!strcmp(name, "collective")) {
    c->collective = arg;
  } else if (!strcmp(name, "ps-tasks")) { /* under mpirun/srun: ranks 1..M are the ps tasks */
    if (cli_int_option("train", "--ps-tasks", arg, 0, 4095, &v)) return 2;
    setenv("FLOE_PS_TASKS", arg, 1);
  } else if (!strcmp(name, "replicas-to-aggregate")) {
    if (cli_int_option("train", "--replicas-to-aggregate", arg, 1, 65536, &v)) return 2;
    c->aggregate = (int)v;
  } else if (!strcmp(name, "ps-strategy")) {
    if (strcmp(arg, "round-robin") && strcmp(arg, "greedy"))
      return cli_usage("train", "--ps-strategy takes round-robin or greedy");
    c->greedy = !strcmp(arg, "greedy");
  } else if (!strcmp(name, "heartbeat-timeout")) {
    if (cli_number_option("train", "--heartbeat-timeout", arg, 0.05, 0, 3600,
                          &c->heartbeat_timeout))
      return 2;
  } else {
    return 1;
  }
  return 0;
}

int train_cluster_check_options(const TrainCluster *c) {
  if (c->given && !c->spec)
    return cli_usage("train", "--job, --task, --replication, --replicas-to-aggregate, "
                     "--ps-tasks, --ps-strategy, --heartbeat-timeout, --fusion-bytes and "
                     "--collective go with --cluster");
  if (c->aggregate && !c->sync)
    return cli_usage("train", "--replicas-to-aggregate goes with --replication sync");
  if ((c->fusion_bytes >= 0 || c->collective) && !c->allreduce)
    return cli_usage("train", "--fusion-bytes and --collective go with --replication allreduce");
  return 0;
}

int64_t train_step_mem_begin(void) {
  FloeMemoryStats m = {.struct_size = sizeof m};
  floe_memory_stats(&m);
  floe_memory_reset_peak();
  return m.live_tensor_bytes;
}

void train_step_mem_end(TrainStepTimes *t, int64_t live_before) {
  FloeMemoryStats m = {.struct_size = sizeof m};
  floe_memory_stats(&m);
  if (t->n == 0) return; /* the first step: one-time copies (optimiser slots shared with
                            their initial values), not a step's working set */
  if (m.peak_tensor_bytes - live_before > t->peak_bytes)
    t->peak_bytes = m.peak_tensor_bytes - live_before;
}

int train_step_times_add(TrainStepTimes *t, double secs) {
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 1024;
    double *v = realloc(t->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = secs;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double train_step_times_quantile(TrainStepTimes *t, double q) {
  if (t->n == 0) return NAN;
  qsort(t->v, (size_t)t->n, sizeof *t->v, cmp_double);
  int64_t k = (int64_t)ceil(q * (double)t->n) - 1;
  return t->v[k < 0 ? 0 : k >= t->n ? t->n - 1 : k];
}

int train_fetch_global_step(FloeSession *s, const FloeRunOptions *ro, const char *step_name,
                            int64_t *step, FloeStatus *st) {
  FloeTensor *v = NULL;
  if (floe_session_run_opts(s, ro, NULL, 0, &step_name, 1, NULL, 0, &v, st) != FLOE_OK) return -1;
  *step = *(const int64_t *)floe_tensor_data(v);
  floe_tensor_release(v);
  return 0;
}

int train_wait_global_step(FloeSession *s, const FloeRunOptions *ro, const char *step_name,
                           int64_t end, int64_t *step, FloeStatus *st, const char *tool) {
  for (;;) {
    if (train_fetch_global_step(s, ro, step_name, step, st))
      return cli_error(tool, "waiting for the other tasks' steps: %s", floe_status_message(st));
    if (*step >= end) return 0;
    if (train_sigint_pending())
      return cli_error(tool, "interrupted while waiting for the other tasks' steps (global "
                       "step %lld of %lld)", (long long)*step, (long long)end);
    nanosleep(&(struct timespec){0, 20000000L}, NULL);
  }
}

/* One number per ps: values[k] / steps (0 without steps). */
static void per_ps_json(JsonWriter *w, const char *key, const int64_t *values, int n,
                        int64_t steps) {
  json_key(w, key);
  json_begin_array(w);
  for (int k = 0; k < n; k++)
    json_double(w, steps ? (double)values[k] / (double)steps : 0);
  json_end_array(w);
}

void train_cluster_json(JsonWriter *w, const TrainCluster *c, int64_t steps, int K,
                        int64_t stale) {
  json_key(w, "cluster_task"), json_string(w, floe_server_task(c->server));
  json_key(w, "replication"),
      json_string(w, c->allreduce ? "allreduce" : c->sync ? "sync" : "async");
  if (c->allreduce) {
    json_key(w, "collective"), json_string(w, c->collective ? c->collective : "auto");
    FloeAllReduceOptions ao; /* the library's default when --fusion-bytes was not given */
    floe_all_reduce_options_init(&ao);
    json_key(w, "fusion_bytes"),
        json_int(w, c->fusion_bytes >= 0 ? c->fusion_bytes : ao.fusion_bytes);
    json_key(w, "bytes_to_peers_per_step"),
        json_double(w, steps ? (double)c->to_peers / (double)steps : 0);
    json_key(w, "bytes_from_peers_per_step"),
        json_double(w, steps ? (double)c->from_peers / (double)steps : 0);
  }
  if (c->sync) {
    json_key(w, "replicas_to_aggregate"), json_int(w, K);
    json_key(w, "stale_gradients_dropped"), json_int(w, stale);
  }
  json_key(w, "replicas"), json_int(w, c->replicas);
  json_key(w, "ps_tasks"), json_int(w, c->num_ps);
  json_key(w, "ps_strategy"), json_string(w, c->greedy ? "greedy" : "round-robin");
  json_key(w, "ps_variable_bytes");
  json_begin_array(w);
  for (int k = 0; k < c->num_ps; k++) json_int(w, c->ps_bytes[k]);
  json_end_array(w);
  /* What one of this task's steps moved to (gradients) and from (parameters) each ps. */
  per_ps_json(w, "bytes_to_ps_per_step", c->to_ps, c->num_ps, steps);
  per_ps_json(w, "bytes_from_ps_per_step", c->from_ps, c->num_ps, steps);
}

void train_cluster_allreduce_options(const TrainCluster *c, FloeAllReduceOptions *ao) {
  floe_all_reduce_options_init(ao);
  ao->group_size = c->replicas;
  if (c->fusion_bytes >= 0) ao->fusion_bytes = c->fusion_bytes;
  ao->backend = c->collective;
}

/* The target that gives every task the chief's variables. */
#define BROADCAST_VARIABLES "broadcast_variables"

void train_cluster_add_broadcast(const TrainCluster *c, FloeGraph *g) {
  if (!c->allreduce) return;
  FloeAllReduceOptions ao; /* every variable, slots and global step too: the chief's values */
  train_cluster_allreduce_options(c, &ao);
  floe_broadcast_variables(g, BROADCAST_VARIABLES, c->is_chief, &ao);
}

int train_cluster_broadcast(const TrainCluster *c, FloeSession *s, const FloeRunOptions *ro,
                            const char *step_name, int64_t *step, const char *tool) {
  if (!c->allreduce) return 0;
  FloeStatus *st = floe_status_new();
  const char *bc = BROADCAST_VARIABLES;
  int rc = 0;
  if (!st)
    rc = cli_error(tool, "out of memory");
  else if (floe_session_run_opts(s, ro, NULL, 0, NULL, 0, &bc, 1, NULL, st) != FLOE_OK)
    rc = cli_error(tool, "taking the chief's variables: %s", floe_status_message(st));
  else if (train_fetch_global_step(s, ro, step_name, step, st))
    rc = cli_error(tool, "reading the global step: %s", floe_status_message(st));
  floe_status_free(st);
  return rc;
}

int train_cluster_checksum_json(JsonWriter *w, const TrainCluster *c, FloeSession *s,
                                const TrainVars *v, const char *tool) {
  if (!c->allreduce) return 0;
  FloeStatus *st = floe_status_new();
  uint32_t crc = 0;
  if (!st || train_vars_checksum(s, v, &crc, st)) {
    int rc = cli_error(tool, "reading the variables for their checksum: %s",
                       st ? floe_status_message(st) : "out of memory");
    floe_status_free(st);
    return rc;
  }
  floe_status_free(st);
  char hex[16];
  snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
  json_key(w, "variables_checksum"), json_string(w, hex);
  return 0;
}

int train_cluster_start(TrainCluster *c, FloeRuntime *rt, const char *tool) {
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(tool, "out of memory");
  FloeServerOptions sv;
  floe_server_options_init(&sv);
  sv.runtime = rt;
  sv.cluster = c->spec;
  sv.job = c->job;
  sv.task = c->task < 0 ? 0 : c->task;
  sv.until_chief_leaves = 1;
  if (c->heartbeat_timeout > 0) {
    sv.heartbeat_timeout_ms = (int)(c->heartbeat_timeout * 1000);
    int iv = sv.heartbeat_timeout_ms / 10;
    sv.heartbeat_interval_ms = iv < 10 ? 10 : iv > 1000 ? 1000 : iv;
  }
  c->server = floe_server_start(&sv, st);
  if (!c->server) {
    int rc = cli_error(tool, "--cluster %s: %s", c->spec, floe_status_message(st));
    floe_status_free(st);
    return rc;
  }
  floe_status_free(st);
  const char *job = floe_server_job(c->server);
  int index = floe_server_task_index(c->server);
  int chiefs = floe_server_job_size(c->server, "chief");
  int workers = floe_server_job_size(c->server, "worker");
  c->num_ps = floe_server_job_size(c->server, "ps");
  c->is_chief = floe_server_is_chief(c->server);
  c->is_ps = strcmp(job, "ps") == 0;
  if (!c->is_ps && strcmp(job, "chief") != 0 && strcmp(job, "worker") != 0)
    return cli_error(tool, "--cluster: this task is %s: floe train runs as a chief, worker or "
                     "ps task", floe_server_task(c->server));
  if (c->num_ps < 1 && !c->allreduce)
    return cli_error(tool, "--cluster: the cluster has no ps job: replicated training keeps "
                     "the variables on ps tasks (floe launch --ps M, or a \"ps\" job in the "
                     "cluster spec), or on every training task with --replication allreduce");
  if (c->num_ps > 0 && c->allreduce)
    return cli_error(tool, "--cluster: --replication allreduce keeps the variables on every "
                     "training task, so the cluster's %d ps task%s would idle: start it "
                     "without them (floe launch --ps 0)", c->num_ps, c->num_ps == 1 ? "" : "s");
  c->replicas = (chiefs > 0 ? 1 : 0) + workers;
  c->replica = strcmp(job, "chief") == 0 ? 0 : (chiefs > 0 ? 1 : 0) + index;
  snprintf(c->worker_device, sizeof c->worker_device, "/job:%s/task:%d", job, index);
  c->cap_rows = chiefs + workers + c->num_ps;
  c->ps_bytes = calloc((size_t)c->num_ps + 1, sizeof *c->ps_bytes);
  c->to_ps = calloc((size_t)c->num_ps + 1, sizeof *c->to_ps);
  c->from_ps = calloc((size_t)c->num_ps + 1, sizeof *c->from_ps);
  c->rows = calloc((size_t)c->cap_rows, sizeof *c->rows);
  c->mark = calloc((size_t)c->cap_rows, sizeof *c->mark);
  if (!c->ps_bytes || !c->to_ps || !c->from_ps || !c->rows || !c->mark)
    return cli_error(tool, "out of memory");
  train_cluster_test_publish_pid(c);
  return 0;
}

/* ---- the test hook that kills a task at a chosen global step ---- */

static int g_recoveries;         /* in-process recoveries begun */
static double g_recovery_t0;     /* when the last one's failure was seen */

int train_recover_budget(void) {
  const char *r = getenv("FLOE_RECOVER");
  int k = r && *r ? atoi(r) : 0;
  return k > 0 ? k : 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void train_recovery_begin(void) {
  g_recovery_t0 = now_s();
  g_recoveries++;
}

int train_recoveries(void) { return g_recoveries; }

double train_recovery_seconds(void) { return now_s() - g_recovery_t0; }

void train_cluster_session_options(const TrainCluster *c, FloeSessionOptions *so) {
  so->cluster = c->spec;
  if (c->spec && c->is_chief && g_recoveries > 0)
    so->cluster_timeout_ms = c->heartbeat_timeout > 0 && c->heartbeat_timeout < 6
                                 ? 5000 : (int)(c->heartbeat_timeout * 1000) + 60000;
}

int train_cluster_session_failed(const TrainCluster *c, const FloeSessionOptions *so,
                                 FloeStatus *st, const char *tool) {
  int rc = cli_error(tool, "%s", floe_status_message(st));
  if (!c->spec || !c->is_chief || g_recoveries == 0) return rc;
  /* a task that does not come back (one that hangs holds its address): floe launch starts
   * the whole job again */
  fprintf(stderr, "floe %s: the cluster did not re-form within %.0f s: the whole job must "
          "start again (exit %d)\n", tool, so->cluster_timeout_ms / 1000.0,
          TRAIN_EXIT_REFORM_FAILED);
  return TRAIN_EXIT_REFORM_FAILED;
}

int train_recoverable(int rc, int cluster_up, int fatal) {
  return rc != 0 && rc != 2 && rc != 130 && rc != TRAIN_EXIT_REFORM_FAILED && cluster_up &&
         !fatal && !train_sigint_pending() && train_recover_budget() > 0;
}

int train_recovering(int (*run)(int argc, char **argv, int *reform), int argc, char **argv) {
  for (;;) {
    int reform = 0, rc = run(argc, argv, &reform);
    if (!reform) return rc;
    if (g_recoveries >= train_recover_budget()) {
      fprintf(stderr, "floe train: the %d recoveries in this process are used up\n",
              train_recover_budget());
      return rc;
    }
    train_recovery_begin();
    fprintf(stderr, "floe train: [recovery %d of %d] the cluster lost a task: this task's "
            "session and server are freed; it joins the cluster again and resumes from the "
            "last checkpoint\n", g_recoveries, train_recover_budget());
  }
}

int train_restart_count(void) {
  const char *r = getenv("FLOE_RESTART");
  int k = r && *r ? atoi(r) : 0;
  return (k > 0 ? k : 0) + g_recoveries;
}

int train_restart_resumes(const char *checkpoint_dir, int *resume) {
  int k = train_restart_count();
  if (!k) return 0;
  const char *what = g_recoveries ? "recovery in this process" : "restart of the job";
  if (checkpoint_dir) {
    if (!*resume)
      fprintf(stderr, "floe train: %s: resuming from the last checkpoint in %s\n", what,
              checkpoint_dir);
    *resume = 1;
  } else {
    fprintf(stderr, "floe train: %s without --checkpoint-dir: training starts again from "
            "scratch\n", what);
  }
  return k;
}

/* FLOE_TEST_KILL_AT_STEP, or -1 when unset or in a restarted job (FLOE_RESTART > 0). */
static int64_t test_kill_step(void) {
  const char *e = getenv("FLOE_TEST_KILL_AT_STEP");
  if (!e || !*e || train_restart_count() > 0) return -1;
  char *end = NULL;
  long long s = strtoll(e, &end, 10);
  return end && !*end && s >= 0 ? s : -1;
}

#define TEST_PID_KEY "floe_test/pid"

void train_cluster_test_publish_pid(TrainCluster *c) {
  if (test_kill_step() < 0) return;
  char key[256], pid[32];
  snprintf(key, sizeof key, TEST_PID_KEY "%s", c->worker_device);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  FloeStatus *st = floe_status_new();
  if (st && floe_server_kv_set(c->server, key, pid, strlen(pid), 1, st) != FLOE_OK)
    fprintf(stderr, "floe train: test hook: publishing this task's pid: %s\n",
            floe_status_message(st));
  floe_status_free(st);
}

void train_cluster_test_kill(TrainCluster *c, int64_t global_step) {
  static int done;
  int64_t at = test_kill_step();
  if (done || at < 0 || global_step < at || !c->is_chief) return;
  done = 1;
  const char *who = getenv("FLOE_TEST_KILL_TASK");
  if (!who || !*who) who = c->worker_device;
  char key[256];
  snprintf(key, sizeof key, TEST_PID_KEY "%s", who);
  FloeStatus *st = floe_status_new();
  void *v = NULL;
  size_t len = 0;
  if (!st || floe_server_kv_get(c->server, key, 10000, &v, &len, st) != FLOE_OK) {
    fprintf(stderr, "floe train: test hook: no pid for %s: %s\n", who,
            st ? floe_status_message(st) : "out of memory");
  } else {
    char buf[32];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < 31 ? len : 31), (const char *)v);
    int pid = atoi(buf);
    const char *sig = getenv("FLOE_TEST_KILL_SIGNAL"); /* STOP: a task that hangs */
    int stop = sig && !strcmp(sig, "STOP");
    fprintf(stderr, "floe train: test hook: kill -%s of %s (pid %d) at global step %lld\n",
            stop ? "STOP" : "9", who, pid, (long long)global_step);
    fflush(stderr);
    if (pid > 0) kill(pid, stop ? SIGSTOP : SIGKILL);
  }
  free(v);
  floe_status_free(st);
}

void train_cluster_count_begin(TrainCluster *c) {
  int n = floe_server_traffic(c->server, c->mark, c->cap_rows);
  c->num_mark = n < c->cap_rows ? n : c->cap_rows;
}

/* The ps index of a task name "/job:ps/replica:0/task:K", else -1. */
static int ps_index(const char *task, int num_ps) {
  const char *p = strstr(task, "/task:");
  if (strncmp(task, "/job:ps/", 8) != 0 || !p) return -1;
  int k = atoi(p + 6);
  return k >= 0 && k < num_ps ? k : -1;
}

void train_cluster_count_end(TrainCluster *c) {
  int n = floe_server_traffic(c->server, c->rows, c->cap_rows);
  if (n > c->cap_rows) n = c->cap_rows;
  for (int i = 0; i < n; i++) {
    int k = ps_index(c->rows[i].task, c->num_ps);
    int64_t sent = c->rows[i].bytes_sent, got = c->rows[i].bytes_received;
    for (int j = 0; j < c->num_mark; j++) /* peers keep their rows' order; match by name */
      if (!strcmp(c->mark[j].task, c->rows[i].task)) {
        sent -= c->mark[j].bytes_sent;
        got -= c->mark[j].bytes_received;
        break;
      }
    if (k < 0) {
      c->to_peers += sent;
      c->from_peers += got;
      continue;
    }
    c->to_ps[k] += sent;
    c->from_ps[k] += got;
  }
}

/* A variable each task keeps for itself (a replica's local step). */
static int is_local(FloeGraph *g, const char *var) {
  return !strcmp(floe_node_attr_string(floe_graph_find(g, var), "container"), "local");
}

int train_cluster_place(TrainCluster *c, FloeGraph *g, const TrainVars *v, const char *tool) {
  if (c->allreduce) { /* every replica computes and keeps everything itself */
    FloeStatus *st = floe_status_new();
    int rc = 0;
    for (int i = 0; st && !rc && i < floe_graph_num_nodes(g); i++) {
      FloeNode *n = floe_graph_node(g, i);
      if (!*floe_node_device(n) && floe_node_request_device(n, c->worker_device, st) != FLOE_OK)
        rc = cli_error(tool, "placing the graph on %s: %s", c->worker_device,
                       floe_status_message(st));
    }
    if (!st) rc = cli_error(tool, "out of memory");
    floe_status_free(st);
    return rc;
  }
  for (int i = 0; i < v->n; i++) {
    if (is_local(g, v->names[i])) continue;
    char name[512];
    snprintf(name, sizeof name, "ready/%s", v->names[i]);
    FloeNodeBuilder *b = floe_node_begin(g, "VarIsInitializedOp", name);
    floe_node_add_input(b, floe_out(floe_graph_find(g, v->names[i]), 0));
    floe_node_finish(b);
  }
  if (floe_graph_status(g) != FLOE_OK)
    return cli_error(tool, "building the readiness checks: %s", floe_graph_error(g, NULL));
  FloeReplicaDeviceOptions o;
  floe_replica_device_options_init(&o);
  o.num_ps = c->num_ps;
  o.worker_device = c->worker_device;
  o.strategy = c->greedy ? FLOE_PS_GREEDY_BYTES : FLOE_PS_ROUND_ROBIN;
  FloeStatus *st = floe_status_new();
  int rc = 0;
  if (!st || floe_replica_device_setter(g, &o, c->ps_bytes, st) != FLOE_OK)
    rc = cli_error(tool, "placing the variables on the ps tasks: %s",
                   st ? floe_status_message(st) : "out of memory");
  floe_status_free(st);
  return rc;
}

int train_cluster_wait_ready(const TrainCluster *c, FloeGraph *g, FloeSession *s,
                             const TrainVars *v, int64_t timeout_ms, const char *tool) {
  (void)c;
  const char **fetch = calloc((size_t)v->n + 1, sizeof *fetch);
  char **names = calloc((size_t)v->n + 1, sizeof *names);
  FloeTensor **got = calloc((size_t)v->n + 1, sizeof *got);
  FloeStatus *st = floe_status_new();
  int rc = 1;
  if (!fetch || !names || !got || !st) {
    rc = cli_error(tool, "out of memory");
    goto out;
  }
  int k = 0; /* the shared variables' checks, fetched at once */
  for (int i = 0; i < v->n; i++) {
    if (is_local(g, v->names[i])) continue;
    size_t len = strlen(v->names[i]) + 8;
    if (!(names[k] = malloc(len))) {
      rc = cli_error(tool, "out of memory");
      goto out;
    }
    snprintf(names[k], len, "ready/%s", v->names[i]);
    fetch[k] = names[k];
    k++;
  }
  double end = now_s() + (double)timeout_ms / 1000.0;
  for (;;) {
    if (floe_session_run(s, NULL, 0, fetch, k, NULL, 0, got, st) != FLOE_OK) {
      rc = cli_error(tool, "waiting for the chief to initialise the variables: %s",
                     floe_status_message(st));
      goto out;
    }
    int missing = -1;
    for (int i = 0; i < k; i++) {
      if (missing < 0 && !*(const unsigned char *)floe_tensor_data(got[i])) missing = i;
      floe_tensor_release(got[i]);
      got[i] = NULL;
    }
    if (missing < 0) {
      rc = 0;
      break;
    }
    if (now_s() > end) {
      rc = cli_error(tool, "the chief did not initialise variable '%s' within %.0f s: is the "
                     "chief's floe train running (with the same model options)?",
                     names[missing] + 6, (double)timeout_ms / 1000.0);
      break;
    }
    nanosleep(&(struct timespec){0, 50000000L}, NULL);
  }
out:
  for (int i = 0; names && names[i]; i++) free(names[i]);
  free(names);
  free(fetch);
  free(got);
  floe_status_free(st);
  return rc;
}

/* The key the chief publishes its starting global step under. */
#define START_STEP_KEY "floe_train/start_step"

int train_cluster_publish_start(const TrainCluster *c, int64_t step, const char *tool) {
  char v[32];
  int n = snprintf(v, sizeof v, "%lld", (long long)step);
  FloeStatus *st = floe_status_new();
  int rc = 0;
  if (!st || floe_server_kv_set(c->server, START_STEP_KEY, v, (size_t)n, 1, st) != FLOE_OK)
    rc = cli_error(tool, "publishing the starting global step to the other tasks: %s",
                   st ? floe_status_message(st) : "out of memory");
  floe_status_free(st);
  return rc;
}

int train_cluster_start_step(const TrainCluster *c, int64_t timeout_ms, int64_t *step,
                             const char *tool) {
  FloeStatus *st = floe_status_new();
  void *v = NULL;
  size_t len = 0;
  int rc = 0;
  if (!st || floe_server_kv_get(c->server, START_STEP_KEY, timeout_ms, &v, &len, st) != FLOE_OK) {
    rc = cli_error(tool, "waiting for the chief's starting global step: %s; is the chief's "
                   "floe train running (with the same options)?",
                   st ? floe_status_message(st) : "out of memory");
  } else {
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (len == 0 || !end || *end || x < 0)
      rc = cli_error(tool, "the chief published a starting global step of \"%.40s\": not a "
                     "step (another program's key \"%s\"?)", (const char *)v, START_STEP_KEY);
    else
      *step = x;
  }
  free(v);
  floe_status_free(st);
  return rc;
}

/* The chief's word that the job ended (under in-process recovery): the other tasks then stop
 * serving instead of waiting to re-form the cluster once it leaves. */
#define FINISHED_KEY "floe_train/finished"

/* A task's acknowledgement of FINISHED_KEY: "floe_train/finished/<its task name>". */
static void finished_ack_key(const char *task, char *key, size_t cap) {
  snprintf(key, cap, FINISHED_KEY "/%s", task);
}

void train_cluster_finish(TrainCluster *c) {
  if (!c->server || !c->is_chief || train_recover_budget() == 0) return;
  FloeStatus *st = floe_status_new();
  if (!st || floe_server_kv_set(c->server, FINISHED_KEY, "1", 1, 1, st) != FLOE_OK) {
    floe_status_free(st);
    return; /* best effort: then they re-form until launch's SIGTERM */
  }
  /* each other task says it saw it (up to 5 s in all), so none is left re-forming */
  static const char *const jobs[] = {"worker", "ps"};
  double end = now_s() + 5;
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < floe_server_job_size(c->server, jobs[j]); i++) {
      char task[96], key[160];
      snprintf(task, sizeof task, "/job:%s/replica:0/task:%d", jobs[j], i);
      finished_ack_key(task, key, sizeof key);
      void *v = NULL;
      size_t len = 0;
      int64_t left = (int64_t)((end - now_s()) * 1000);
      if (left > 0 && floe_server_kv_get(c->server, key, left, &v, &len, st) == FLOE_OK) free(v);
      floe_status_clear(st);
    }
  floe_status_free(st);
}

int train_cluster_serve(TrainCluster *c, const char *tool) {
  int rc;
  if (train_recover_budget() == 0) return cli_server_serve(tool, c->server, -1);
  /* under in-process recovery: look for the chief's word that the job ended every 50 ms */
  for (;;) {
    rc = cli_server_serve(tool, c->server, 50);
    if (rc != -1) break;
    FloeStatus *st = floe_status_new();
    void *v = NULL;
    size_t len = 0;
    if (st && floe_server_kv_get(c->server, FINISHED_KEY, 0, &v, &len, st) == FLOE_OK) {
      char key[160];
      free(v);
      finished_ack_key(floe_server_task(c->server), key, sizeof key);
      floe_server_kv_set(c->server, key, "1", 1, 1, st); /* best effort */
      floe_status_free(st);
      return 0;
    }
    floe_status_free(st);
  }
  if (rc == 0 && !cli_server_signalled()) {
    fprintf(stderr, "floe train: %s: the chief left before the job ended (SIGTERM ends it): "
            "waiting for it to re-form the cluster\n", floe_server_task(c->server));
    return TRAIN_REFORM;
  }
  return rc;
}

void train_cluster_free(TrainCluster *c) {
  floe_server_free(c->server);
  free(c->ps_bytes);
  free(c->to_ps);
  free(c->from_ps);
  free(c->rows);
  free(c->mark);
  c->server = NULL;
  c->ps_bytes = c->to_ps = c->from_ps = NULL;
  c->rows = c->mark = NULL;
}

static void *updater_main(void *arg) {
  TrainUpdater *u = arg;
  FloeStatus *st = floe_status_new();
  while (!atomic_load(&u->stop)) {
    if (atomic_load(&u->save_state) == 1) { /* between two updates: the variables are still */
      pthread_mutex_lock(&u->mu);
      int go = !atomic_load(&u->stop); /* once stop is asked, the stopper's save is the one */
      u->saving = go;
      pthread_mutex_unlock(&u->mu);
      if (!go) break;
      u->save_rc = u->save(u->save_arg, u->save_msg, sizeof u->save_msg);
      atomic_store(&u->save_state, 2);
      pthread_mutex_lock(&u->mu);
      u->saving = 0;
      pthread_mutex_unlock(&u->mu);
    }
    floe_code rc = st ? floe_session_run(u->s, NULL, 0, NULL, 0, &u->target, 1, NULL, st)
                      : FLOE_NO_MEMORY;
    if (rc != FLOE_OK) {
      if (!atomic_load(&u->stop)) {
        u->rc = rc;
        snprintf(u->msg, sizeof u->msg, "%s", st ? floe_status_message(st) : "out of memory");
      }
      break;
    }
    u->updates++;
  }
  floe_status_free(st);
  atomic_store(&u->exited, 1);
  return NULL;
}

int train_updater_start(TrainUpdater *u, FloeSession *s, const char *target, const char *tool) {
  u->s = s;
  u->target = target;
  u->rc = FLOE_OK;
  u->updates = 0;
  atomic_init(&u->stop, 0);
  atomic_init(&u->exited, 0);
  atomic_init(&u->save_state, 0);
  u->saving = 0;
  if (pthread_mutex_init(&u->mu, NULL) != 0)
    return cli_error(tool, "cannot start the chief's update thread (mutex)");
  if (pthread_create(&u->thread, NULL, updater_main, u) != 0) {
    pthread_mutex_destroy(&u->mu);
    return cli_error(tool, "cannot start the chief's update thread");
  }
  u->started = 1;
  return 0;
}

int train_updater_stop(TrainUpdater *u, const char *tool) {
  if (!u->started) return 0;
  atomic_store(&u->stop, 1);
  /* The update waits for gradients that will not come: cancel it, and again until the
   * thread is out (one that had just looked at stop starts one more step after a cancel).
   * A checkpoint the thread is writing is let finish: cancelling would fail its runs. */
  while (!atomic_load(&u->exited)) {
    pthread_mutex_lock(&u->mu);
    if (!u->saving) floe_session_cancel(u->s);
    pthread_mutex_unlock(&u->mu);
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  pthread_join(u->thread, NULL);
  pthread_mutex_destroy(&u->mu);
  u->started = 0;
  return u->rc == FLOE_OK ? 0 : cli_error(tool, "the chief's update step: %s", u->msg);
}

void train_updater_request_save(TrainUpdater *u, TrainSaveFn fn, void *arg) {
  u->save = fn;
  u->save_arg = arg;
  atomic_store(&u->save_state, 1);
}

int train_updater_save_result(TrainUpdater *u) {
  if (atomic_load(&u->save_state) != 2) return 0;
  atomic_store(&u->save_state, 0);
  return u->save_rc == 0 ? 1 : -1;
}

/* ---- consistent checkpoints ---- */

#define PAUSE_KEY "floe_train/pause"   /* the chief: the number of the pause asked */
#define RESUME_KEY "floe_train/resume" /* the chief: the last pause released */
#define PAUSE_CHECK_S 0.05             /* a worker looks for a pause at most this often */

/* The integer under key: 1, 0 when absent, -1 on error (st says). */
static int kv_int(FloeServer *srv, const char *key, int64_t *v, FloeStatus *st) {
  void *val = NULL;
  size_t len = 0;
  floe_code rc = floe_server_kv_get(srv, key, 0, &val, &len, st);
  if (rc == FLOE_DEADLINE_EXCEEDED || rc == FLOE_NOT_FOUND) {
    floe_status_clear(st);
    return 0;
  }
  if (rc != FLOE_OK) return -1;
  *v = strtoll(val, NULL, 10);
  free(val);
  return 1;
}

static int kv_put_int(FloeServer *srv, const char *key, int64_t v, FloeStatus *st) {
  char b[32];
  int n = snprintf(b, sizeof b, "%lld", (long long)v);
  return floe_server_kv_set(srv, key, b, (size_t)n, 1, st) == FLOE_OK ? 0 : -1;
}

int train_cluster_pause_workers(TrainCluster *c, const char *tool) {
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(tool, "out of memory");
  int rc = 0, workers = floe_server_job_size(c->server, "worker");
  int64_t n = ++c->pauses;
  if (kv_put_int(c->server, PAUSE_KEY, n, st)) {
    rc = cli_error(tool, "asking the workers to pause for a checkpoint: %s",
                   floe_status_message(st));
    goto out;
  }
  double end = now_s() + 120;
  for (int w = 0; w < workers && !rc; w++) {
    char ack[64], done[64];
    snprintf(ack, sizeof ack, "floe_train/paused/worker-%d", w);
    snprintf(done, sizeof done, "floe_train/done/worker-%d", w);
    for (;;) {
      int64_t v = 0, d = 0;
      int a = kv_int(c->server, ack, &v, st), f = a < 0 ? -1 : kv_int(c->server, done, &d, st);
      if (a < 0 || f < 0) {
        rc = cli_error(tool, "waiting for /job:worker/task:%d to pause for a checkpoint: %s", w,
                       floe_status_message(st));
        break;
      }
      if ((a && v >= n) || f) break;
      /* Ctrl-C does not end the wait: the save goes on, then the run stops at its next step
       * boundary or saves there (a second Ctrl-C kills) */
      if (now_s() > end) {
        rc = cli_error(tool, "/job:worker/task:%d did not pause for a checkpoint within 120 s",
                       w);
        break;
      }
      nanosleep(&(struct timespec){0, 2000000L}, NULL);
    }
  }
out:
  floe_status_free(st);
  return rc;
}

int train_cluster_resume_workers(TrainCluster *c, const char *tool) {
  FloeStatus *st = floe_status_new();
  int rc = 0;
  if (!st || kv_put_int(c->server, RESUME_KEY, c->pauses, st))
    rc = cli_error(tool, "releasing the workers after a checkpoint: %s",
                   st ? floe_status_message(st) : "out of memory");
  floe_status_free(st);
  return rc;
}

int train_cluster_pause_point(TrainCluster *c, const char *tool) {
  double t = now_s();
  if (t - c->pause_checked < PAUSE_CHECK_S) return 0;
  c->pause_checked = t;
  c->pause_checks++;
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(tool, "out of memory");
  int64_t n = 0;
  int rc = 0, k = kv_int(c->server, PAUSE_KEY, &n, st);
  if (k < 0) {
    rc = cli_error(tool, "looking for a checkpoint's pause: %s", floe_status_message(st));
  } else if (k && n > c->pauses) { /* this task's last step returned: its updates are applied */
    char ack[64];
    snprintf(ack, sizeof ack, "floe_train/paused/worker-%d", floe_server_task_index(c->server));
    if (kv_put_int(c->server, ack, n, st)) {
      rc = cli_error(tool, "acknowledging a checkpoint's pause: %s", floe_status_message(st));
    } else {
      for (;;) {
        int64_t r = 0;
        int g = kv_int(c->server, RESUME_KEY, &r, st);
        if (g < 0) {
          rc = cli_error(tool, "waiting for the chief's checkpoint: %s", floe_status_message(st));
          break;
        }
        if (g && r >= n) break;
        if (train_sigint_pending()) {
          rc = cli_error(tool, "interrupted while the chief saves a checkpoint");
          break;
        }
        nanosleep(&(struct timespec){0, 2000000L}, NULL);
      }
      c->pauses = n;
      c->paused_seconds += now_s() - t;
    }
  }
  floe_status_free(st);
  return rc;
}

void train_cluster_worker_done(TrainCluster *c) {
  FloeStatus *st = floe_status_new();
  char key[64];
  snprintf(key, sizeof key, "floe_train/done/worker-%d", floe_server_task_index(c->server));
  if (st) kv_put_int(c->server, key, 1, st); /* best effort: else the chief's wait says */
  floe_status_free(st);
}

/* FLOE_TEST_CKPT_CRASH: the phase a test kills the process at. */
static int crash_at(void *arg, FloeCheckpointPhase ph, const char *path) {
  (void)path;
  static const char *names[] = {"", "before-shards", "after-shards", "after-index-temp",
                                "after-commit"};
  const char *want = arg;
  if ((int)ph >= 1 && (int)ph <= 4 && !strcmp(want, names[ph])) {
    fprintf(stderr, "floe train: FLOE_TEST_CKPT_CRASH=%s: exiting at that phase\n", want);
    fflush(stderr);
    _exit(137);
  }
  return 0;
}

int train_cluster_save(FloeSession *s, const char *dir, const char *step_name,
                       const TrainVars *vars, int64_t *step, char *msg, size_t len) {
  FloeStatus *st = floe_status_new();
  if (!st) return snprintf(msg, len, "out of memory"), -1;
  int64_t gs = 0;
  char desc[512];
  int rc = -1, nf;
  if (train_fetch_global_step(s, NULL, step_name, &gs, st)) {
    snprintf(msg, len, "reading the global step: %s", floe_status_message(st));
  } else if ((nf = train_vars_nonfinite(s, vars, desc, sizeof desc, st)) != 0) {
    snprintf(msg, len, "at global step %lld: %s", (long long)gs,
             nf < 0 ? floe_status_message(st) : desc);
  } else {
    FloeCheckpointShardOptions o;
    floe_checkpoint_shard_options_init(&o);
    const char *crash = getenv("FLOE_TEST_CKPT_CRASH");
    if (crash && *crash) o.phase = crash_at, o.phase_arg = (void *)crash;
    if (floe_checkpoint_save_sharded(s, dir, NULL, gs, 3, &o, NULL, st) != FLOE_OK) {
      snprintf(msg, len, "%s", floe_status_message(st));
    } else {
      rc = 0;
      if (step) *step = gs;
    }
  }
  floe_status_free(st);
  return rc;
}

int train_cluster_save_fn(void *arg, char *msg, size_t len) {
  TrainSaveArgs *a = arg;
  return train_cluster_save(a->s, a->dir, a->step_name, a->vars, &a->step, msg, len);
}

int train_cluster_checkpoint(TrainCluster *c, TrainUpdater *u, TrainSaveArgs *a, int all_done,
                             const char *tool) {
  int r = u->started || u->save ? train_updater_save_result(u) : 0;
  if (r < 0) return cli_error(tool, "saving a checkpoint: %s", u->save_msg);
  if (r > 0) printf("checkpoint saved at global step %lld\n", (long long)a->step);
  if (c->sync && u->started) { /* written by the update thread between two updates */
    train_updater_request_save(u, train_cluster_save_fn, a);
    return 0;
  }
  int pause = !c->sync && !c->allreduce && !all_done;
  char msg[1024];
  if (pause && train_cluster_pause_workers(c, tool)) return 1;
  int rc = train_cluster_save_fn(a, msg, sizeof msg);
  if (pause && train_cluster_resume_workers(c, tool)) return 1;
  return rc ? cli_error(tool, "saving a checkpoint: %s", msg) : 0;
}

/* See train_cluster.h. */
void train_cluster_straggle(const TrainCluster *c) {
  static double mean_ms = -1;
  static unsigned short xs[3];
  if (mean_ms < 0) {
    const char *e = getenv("FLOE_TEST_STEP_DELAY_MEAN_MS");
    const char *who = getenv("FLOE_TEST_STEP_DELAY_TASK"); /* "/job:worker/task:1" */
    char me[160];
    snprintf(me, sizeof me, "%s", c->worker_device);
    mean_ms = e && *e && (!who || !*who || !strcmp(who, me)) ? atof(e) : 0;
    if (!(mean_ms > 0 && mean_ms < 3600000)) mean_ms = 0;
    unsigned long seed = (unsigned long)getpid();
    xs[0] = (unsigned short)seed, xs[1] = (unsigned short)(seed >> 16), xs[2] = 0x330e;
  }
  if (mean_ms <= 0) return;
  double u = erand48(xs); /* [0, 1): the delay -mean ln(1 - u), exponential */
  double ms = -mean_ms * log(1.0 - u);
  struct timespec d = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
  nanosleep(&d, NULL);
}

/* ---- the step split ---- */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void train_split_init(TrainSplit *p, FloeSession *s, int keep) {
  memset(p, 0, sizeof *p);
  p->s = s;
  p->keep = keep;
  p->sum.struct_size = p->last.struct_size = sizeof(FloeStepSplit);
}

void train_split_begin(TrainSplit *p, FloeRunOptions *ro) {
  if (!p->keep) {
    int64_t t0 = now_ns();
    floe_session_set_tracing(p->s, FLOE_TRACE_START); /* drops the last step's events */
    p->overhead_ns += now_ns() - t0;
  }
  p->last.steps = 0;
  ro->split = &p->last;
}

void train_split_end(TrainSplit *p, FloeRunOptions *ro, int ok) {
  if (!p->keep) {
    int64_t t0 = now_ns();
    floe_session_set_tracing(p->s, FLOE_TRACE_OFF);
    p->overhead_ns += now_ns() - t0;
  }
  ro->split = NULL;
  if (!ok || p->last.steps <= 0) return;
  if (p->warmups < 1) { /* the first builds the executors and wakes the kernels' libraries */
    p->warmups++;
    return;
  }
  p->sum.steps += p->last.steps;
  p->sum.wall_ns += p->last.wall_ns;
  p->sum.compute_ns += p->last.compute_ns;
  p->sum.wait_params_ns += p->last.wait_params_ns;
  p->sum.send_grads_ns += p->last.send_grads_ns;
  p->sum.kernel_ns += p->last.kernel_ns;
  p->sum.tracing_ns += p->last.tracing_ns;
}

void train_split_json(JsonWriter *w, const TrainSplit *p) {
  const FloeStepSplit *s = &p->sum;
  if (s->steps <= 0) {
    json_null(w);
    return;
  }
  double n = (double)s->steps;
  json_begin_object(w);
  json_key(w, "steps"), json_int(w, s->steps);
  json_key(w, "wall"), json_double(w, (double)s->wall_ns * 1e-6 / n);
  json_key(w, "compute"), json_double(w, (double)s->compute_ns * 1e-6 / n);
  json_key(w, "wait_params"), json_double(w, (double)s->wait_params_ns * 1e-6 / n);
  json_key(w, "send_grads"), json_double(w, (double)s->send_grads_ns * 1e-6 / n);
  json_key(w, "kernels"), json_double(w, (double)s->kernel_ns * 1e-6 / n);
  json_key(w, "tracing"), json_double(w, (double)s->tracing_ns * 1e-6 / n);
  json_key(w, "overhead"), json_double(w, (double)p->overhead_ns * 1e-6 / n);
  json_end_object(w);
}

int train_cluster_worker_json(const TrainCluster *c, const char *model, int64_t steps,
                              const char *rate_key, double rate, double train_secs,
                              TrainStepTimes *times, int K, int64_t stale, const TrainSplit *split,
                              FloeSession *s, const TrainVars *v, const char *tool) {
  JsonWriter w;
  json_init(&w, stdout);
  json_begin_object(&w);
  json_key(&w, "model"), json_string(&w, model);
  json_key(&w, "steps"), json_int(&w, steps);
  json_key(&w, rate_key), json_double(&w, rate);
  json_key(&w, "train_seconds"), json_double(&w, train_secs);
  json_key(&w, "step_time_p50_ms"), json_double(&w, train_step_times_quantile(times, 0.5) * 1e3);
  json_key(&w, "step_time_p90_ms"), json_double(&w, train_step_times_quantile(times, 0.9) * 1e3);
  train_cluster_json(&w, c, steps, K, stale);
  int rc = train_cluster_checksum_json(&w, c, s, v, tool);
  json_key(&w, "step_split_ms"), train_split_json(&w, split);
  json_end_object(&w);
  json_finish(&w);
  return rc;
}
