/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - a task of a cluster in this process: floe_server_* (floe_dist.h) and the chief's
 * server that sessions naming a cluster start (master.c).
 *
 * A server binds exactly its task's address (the rpc server: a thread per connection,
 * every connection authenticated with the job's secret), opens the data plane (the
 * runtime's transport, a channel per peer task), serves the worker service, and:
 *  - in the chief (/job:chief/task:0, or /job:worker/task:0 when the cluster has no chief,
 *    TF's rule): runs the coordination service, with its own TaskInfo registered;
 *  - in every other task: runs an agent thread that keeps trying to reach the chief,
 *    registers (incarnation, devices, transport address), heartbeats, and when the chief is
 *    lost (or reports a cluster error) fails the steps running here, drops the worker
 *    sessions and starts over, waiting for the next chief.
 * One server per runtime: the runtime joins the cluster as the server's task, so its
 * devices are named /job:J/replica:0/task:T/device:TYPE:N from then on.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "dist.pb-c.h"

#define MAX_WATCHERS 64

typedef struct Watcher {
  int id;
  FloeServerErrorFn fn;
  void *arg;
} Watcher;

struct FloeServer {
  FloeRuntime *rt;
  FloeClusterSpec *spec;
  FloeTaskRef self_ref, chief_ref;
  bool is_chief;
  FloeTaskIdentity self;
  char task_name[128];
  FloeJobSecret *secret;
  FloeCoordOptions coord_opts;
  FloeRpcServer *rpc;
  FloeDataPlane *dp;
  FloeWorkerService *worker;
  FloeCoordService *coord;
  Floe__Dist__TaskInfo *info;   /* packed and unpacked: one floe__wire_free */
  void (*log)(void *arg, const char *msg);
  void *log_arg;
  bool until_chief_leaves;
  /* the agent thread (not the chief) */
  pthread_t agent_thread;
  bool agent_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;                /* under mu */
  bool agent_failed;            /* under mu: the agent reported the chief lost */
  char *agent_error;            /* under mu */
  bool chief_left;              /* under mu: a chief was registered with, then lost */
  FloeCoordAgent *agent;        /* under mu: while registered with the chief */
  int agent_users;              /* under mu: callers of floe__server_wait_all using it */
  Watcher watchers[MAX_WATCHERS];
  int num_watchers, next_watch;
  int stop_pipe[2];             /* floe_server_stop writes, join polls */
  bool owns_transport;          /* the data plane opened the runtime's transport manager */
  /* Under PMIx: the launcher's job, kept open for one fence that every rank joins, the chief
   * when it stops and the others at start, so they learn at once that it is done (a
   * heartbeat timeout later otherwise). NULL when the spec came from elsewhere. */
  FloePmix *pmix;
  bool in_registry;
  bool collectives;             /* the runtime's collectives use this server (FloeCollEnv) */
};

/* ---- the registry: one server per runtime -------------------------------------------------- */

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static FloeServer *g_reg[64];
static int g_num_reg;

static FloeServer *registry_find(const FloeRuntime *rt) { /* under g_reg_mu */
  for (int i = 0; i < g_num_reg; i++)
    if (g_reg[i]->rt == rt) return g_reg[i];
  return NULL;
}

static void registry_remove(FloeServer *s) {
  pthread_mutex_lock(&g_reg_mu);
  for (int i = 0; i < g_num_reg; i++)
    if (g_reg[i] == s) {
      g_reg[i] = g_reg[--g_num_reg];
      break;
    }
  pthread_mutex_unlock(&g_reg_mu);
}

/* ---- logging and errors ---------------------------------------------------------------------- */

static void slog(FloeServer *s, const char *fmt, ...) FLOE__PRINTF(2, 3);
static void slog(FloeServer *s, const char *fmt, ...) {
  if (!s->log) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->log(s->log_arg, buf);
}

static void rpc_log(void *arg, const char *msg) {
  FloeServer *s = arg;
  if (s->log) s->log(s->log_arg, msg);
}

static void fan_out(FloeServer *s, floe_code code, const char *msg) {
  Watcher w[MAX_WATCHERS];
  pthread_mutex_lock(&s->mu);
  int n = s->num_watchers;
  memcpy(w, s->watchers, (size_t)n * sizeof *w);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < n; i++) w[i].fn(w[i].arg, code, msg);
}

/* The chief's coordination service found an error (a task lost or restarted). */
static void on_coord_error(void *arg, floe_code code, const char *msg) {
  FloeServer *s = arg;
  slog(s, "cluster error (%s): %s", floe_code_name(code), msg);
  fan_out(s, code, msg);
}

int floe__server_watch(FloeServer *s, FloeServerErrorFn fn, void *arg) {
  pthread_mutex_lock(&s->mu);
  int id = 0;
  if (s->num_watchers < MAX_WATCHERS) {
    id = ++s->next_watch;
    s->watchers[s->num_watchers++] = (Watcher){id, fn, arg};
  }
  pthread_mutex_unlock(&s->mu);
  return id;
}

void floe__server_unwatch(FloeServer *s, int id) {
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->num_watchers; i++)
    if (s->watchers[i].id == id) {
      s->watchers[i] = s->watchers[--s->num_watchers];
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

/* ---- accessors --------------------------------------------------------------------------------- */

const FloeClusterSpec *floe__server_spec(const FloeServer *s) { return s->spec; }
const FloeTaskIdentity *floe__server_identity(const FloeServer *s) { return &s->self; }
FloeDataPlane *floe__server_dataplane(FloeServer *s) { return s->dp; }
FloeCoordService *floe__server_coord(FloeServer *s) { return s->coord; }

/* CLOCK_REALTIME (the condition variables' clock) ms from now. */
static struct timespec realtime_after(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Another task's agent into *out, once it has registered with the chief (within timeout_ms;
 * < 0: no limit), held until agent_release; FLOE_UNAVAILABLE when it has not. */
static floe_code agent_acquire(FloeServer *s, int64_t timeout_ms, FloeCoordAgent **out,
                               FloeStatus *st) {
  struct timespec end = realtime_after(timeout_ms < 0 ? INT32_MAX : timeout_ms);
  pthread_mutex_lock(&s->mu);
  while (!s->agent && !s->stopping)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &end) != 0) break;
  FloeCoordAgent *agent = s->stopping ? NULL : s->agent;
  if (agent) s->agent_users++;
  pthread_mutex_unlock(&s->mu);
  *out = agent;
  if (agent) return FLOE_OK;
  return floe_status_set(st, FLOE_UNAVAILABLE, "%s has not registered with the chief %s within "
                         "%" PRId64 " ms: start the chief's server (or check that its address "
                         "in the cluster is right and reachable from here)", s->task_name,
                         floe__cluster_address(s->spec, s->chief_ref), timeout_ms);
}

static void agent_release(FloeServer *s) {
  pthread_mutex_lock(&s->mu);
  s->agent_users--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

floe_code floe__server_wait_all(FloeServer *s, int64_t timeout_ms, FloeCoordInfos *out,
                                FloeStatus *st) {
  if (s->coord) return floe__coord_service_wait_all(s->coord, timeout_ms, out, st);
  FloeCoordAgent *agent;
  floe_code rc = agent_acquire(s, timeout_ms, &agent, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__coord_agent_wait_all(agent, timeout_ms, out, st);
  agent_release(s);
  return rc;
}

floe_code floe_server_kv_set(FloeServer *s, const char *key, const void *value, size_t len,
                             int overwrite, FloeStatus *st) {
  if (!s || !key || (len && !value))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "floe_server_kv_set: NULL server, key or value");
  if (s->coord) return floe__coord_service_kv_insert(s->coord, key, value, len, overwrite, st);
  FloeCoordAgent *agent;
  floe_code rc = agent_acquire(s, 60000, &agent, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__coord_agent_kv_insert(agent, key, value, len, overwrite, st);
  agent_release(s);
  return rc;
}

floe_code floe_server_kv_get(FloeServer *s, const char *key, int64_t timeout_ms, void **value,
                             size_t *len, FloeStatus *st) {
  if (!s || !key || !value || !len)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "floe_server_kv_get: NULL server, key, value or len");
  *value = NULL;
  *len = 0;
  if (s->coord) return floe__coord_service_kv_get(s->coord, key, timeout_ms, value, len, st);
  FloeCoordAgent *agent;
  floe_code rc = agent_acquire(s, timeout_ms, &agent, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__coord_agent_kv_get(agent, key, timeout_ms, value, len, st);
  agent_release(s);
  return rc;
}

FloeConnOptions floe__server_conn_options(const FloeServer *s) {
  FloeConnOptions o = {0};
  o.secret = s->secret;
  o.self = s->self;
  o.timeout_ms = 10000;
  o.expect_task = -1;
  return o;
}

const char *floe_server_address(const FloeServer *s) {
  return s && s->rpc ? floe__rpc_server_address(s->rpc) : "";
}
const char *floe_server_task(const FloeServer *s) { return s ? s->task_name : ""; }
int floe_server_is_chief(const FloeServer *s) { return s && s->is_chief; }
const char *floe_server_job(const FloeServer *s) { return s ? s->self.job : ""; }
int floe_server_task_index(const FloeServer *s) { return s ? s->self.task : -1; }

int floe_server_traffic(FloeServer *s, FloeTaskTraffic *out, int cap) {
  if (!s || !s->dp) return 0;
  return floe__dataplane_traffic(s->dp, out, out ? cap : 0);
}

int floe_server_job_size(const FloeServer *s, const char *job) {
  if (!s || !job) return 0;
  for (int j = 0; j < s->spec->num_jobs; j++)
    if (strcmp(s->spec->jobs[j].name, job) == 0) return s->spec->jobs[j].num_tasks;
  return 0;
}

void floe_server_options_init(FloeServerOptions *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

/* ---- the cluster spec ---------------------------------------------------------------------------- */

/* The spec cluster names: NULL or "env" is FLOE_CONFIG, else TF_CONFIG, else PMIx when a
 * launcher started this process. Under PMIx this task's address is not known before it
 * listens, so *listener (the caller's, else NULL) is the socket already bound to it: the
 * server must start on it, not bind the address again. */
/* The data plane listens on the task's own host too, unless the environment says otherwise:
 * fabric's FLOE_FABRIC_HOST takes the host as written; ucx's FLOE_UCX_HOST takes only an
 * address, so a name gives the first address it resolves to (the one the control listener
 * binds). A wildcard host leaves both alone: the peers could not reach it. */
static void dataplane_host_default(const char *host) {
  if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::")) return;
  const char *fh = getenv("FLOE_FABRIC_HOST");
  if (!fh || !*fh) setenv("FLOE_FABRIC_HOST", host, 0);
  const char *uh = getenv("FLOE_UCX_HOST");
  if (uh && *uh) return;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char addr[INET6_ADDRSTRLEN];
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return;
  const void *a = res->ai_family == AF_INET6
                      ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                      : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
  if ((res->ai_family == AF_INET || res->ai_family == AF_INET6) &&
      inet_ntop(res->ai_family, a, addr, sizeof addr))
    setenv("FLOE_UCX_HOST", addr, 0);
  freeaddrinfo(res);
}

static floe_code resolve_spec(const char *cluster, const char *job, int task, FloeClusterSpec **out,
                              FloeListener **listener, FloePmix **pmix, FloeStatus *st) {
  *out = NULL;
  *listener = NULL;
  *pmix = NULL;
  floe_code rc;
  if (!cluster || !cluster[0] || strcmp(cluster, "env") == 0) {
    rc = floe__cluster_from_env(out, st);
    if (rc == FLOE_NOT_FOUND && floe__pmix_detect()) {
      floe_status_clear(st);
      rc = floe__cluster_listen_pmix(out, listener, pmix, st);
      if (rc != FLOE_OK)
        floe__status_prefix(st, "the cluster from the launcher (mpirun/srun: PMIX_RANK=%s; "
                            "FLOE_CONFIG and TF_CONFIG unset)", getenv("PMIX_RANK"));
    } else if (rc == FLOE_NOT_FOUND) {
      return floe_status_set(st, FLOE_NOT_FOUND,
                             "no cluster: set FLOE_CONFIG or TF_CONFIG (TF_CONFIG-style JSON), "
                             "give a cluster file, or start the processes with mpirun/srun");
    }
  } else if (cluster[0] == '{') {
    rc = floe__cluster_parse(cluster, strlen(cluster), "the cluster option", out, st);
  } else {
    rc = floe__cluster_from_file(cluster, job, job ? task : 0, out, st);
  }
  if (rc != FLOE_OK) return rc;
  if (job) {
    int j = floe__cluster_find_job(*out, job);
    /* Under PMIx the rank fixes the task: the listener is bound to that task's address. */
    bool other = *listener && (j != (*out)->self.job || task != (*out)->self.task);
    if (j < 0 || task < 0 || task >= (*out)->jobs[j].num_tasks || other) {
      if (other)
        floe_status_set(st, FLOE_INVALID_ARGUMENT,
                        "%s: this rank is %s/task:%d, not /job:%s/task:%d: under mpirun/srun "
                        "the rank names the task (rank 0 the chief, rank r worker r-1): drop "
                        "--job and --task",
                        (*out)->source, (*out)->jobs[(*out)->self.job].name,
                        (*out)->self.task, job, task);
      else
        floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s has no task /job:%s/task:%d",
                        (*out)->source, job, task);
      floe__cluster_free(*out);
      *out = NULL;
      floe__listener_close(*listener);
      *listener = NULL;
      floe__pmix_close(*pmix);
      *pmix = NULL;
      return FLOE_INVALID_ARGUMENT;
    }
    (*out)->self = (FloeTaskRef){j, task};
  }
  return FLOE_OK;
}

/* The chief: /job:chief/task:0, else /job:worker/task:0 (TF's rule without a chief). */
static floe_code chief_of(const FloeClusterSpec *spec, FloeTaskRef *out, FloeStatus *st) {
  int j = floe__cluster_find_job(spec, "chief");
  if (j < 0) j = floe__cluster_find_job(spec, "worker");
  if (j < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s has neither a \"chief\" nor a \"worker\" job: one of them leads",
                           spec->source);
  *out = (FloeTaskRef){j, 0};
  return FLOE_OK;
}

/* ---- this task's TaskInfo ---------------------------------------------------------------------- */

static floe_code build_info(FloeServer *s, FloeStatus *st) {
  Floe__Dist__TaskInfo info = FLOE__DIST__TASK_INFO__INIT;
  Floe__Dist__TaskId id = FLOE__DIST__TASK_ID__INIT;
  id.job = s->self.job;
  id.task = s->self.task;
  id.incarnation = s->self.incarnation;
  info.task = &id;
  info.address = (char *)floe__rpc_server_address(s->rpc);
  int nd = s->rt->num_devices;
  Floe__Dist__DeviceInfo *dis = floe__calloc((size_t)nd + 1, sizeof *dis);
  Floe__Dist__DeviceInfo **dip = floe__calloc((size_t)nd + 1, sizeof *dip);
  double *flops = floe__calloc((size_t)nd * FLOE_DTYPE_LIMIT + 1, sizeof *flops);
  floe_code rc = FLOE_OK;
  if (!dis || !dip || !flops) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory describing the task");
    goto out;
  }
  for (int i = 0; i < nd; i++) {
    const FloeDevice *d = s->rt->devices[i];
    Floe__Dist__DeviceInfo *di = &dis[i];
    floe__dist__device_info__init(di);
    di->name = (char *)d->name;
    di->type = (char *)d->props.type;
    di->description = (char *)d->props.description;
    di->memory_bytes = d->props.memory_bytes;
    di->n_peak_flops = FLOE_DTYPE_LIMIT;
    di->peak_flops = flops + (size_t)i * FLOE_DTYPE_LIMIT;
    memcpy(di->peak_flops, d->props.peak_flops, sizeof d->props.peak_flops);
    di->memory_bandwidth = d->props.memory_bandwidth;
    di->host_to_device_bandwidth = d->props.host_to_device_bandwidth;
    di->device_to_host_bandwidth = d->props.device_to_host_bandwidth;
    di->peer_bandwidth = d->props.peer_bandwidth;
    di->flags = d->props.flags;
    di->ordinal = d->props.ordinal;
    di->vector_flops = d->props.vector_flops;
    di->launch_overhead = d->props.launch_overhead;
    di->index = d->index;
    di->incarnation = floe__device_incarnation(d);
    dip[i] = di;
  }
  info.n_devices = (size_t)nd;
  info.devices = dip;
  if ((rc = floe__dataplane_fill_info(s->dp, &info.base, st)) != FLOE_OK) goto out;
  /* One self-contained copy (floe__wire_free frees it). */
  ProtobufCMessage *copy = NULL;
  rc = floe__wire_copy(&info.base, &copy, st);
  s->info = (Floe__Dist__TaskInfo *)copy;
  floe__dataplane_info_clear(&info.base);
out:
  floe__free(dis);
  floe__free(dip);
  floe__free(flops);
  return rc;
}

/* ---- the agent thread (tasks other than the chief) ------------------------------------------------ */

static void on_agent_error(void *arg, floe_code code, const char *msg) {
  FloeServer *s = arg;
  pthread_mutex_lock(&s->mu);
  if (!s->agent_failed) {
    s->agent_failed = true;
    floe__free(s->agent_error);
    s->agent_error = floe__asprintf("%s: %s", floe_code_name(code), msg ? msg : "");
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Waits up to ms on s->cv (under s->mu); true when stopping. */
static bool nap(FloeServer *s, int ms) {
  struct timespec ts = realtime_after(ms);
  while (!s->stopping && !s->agent_failed)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) != 0) break;
  return s->stopping;
}

static void *agent_main(void *arg) {
  FloeServer *s = arg;
  const char *chief = floe__cluster_address(s->spec, s->chief_ref);
  char chief_name[96];
  floe__cluster_task_name(s->spec, s->chief_ref, chief_name, sizeof chief_name);
  bool told_waiting = false;
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    pthread_mutex_unlock(&s->mu);
    FloeConnOptions co = floe__server_conn_options(s);
    co.expect_job = s->spec->jobs[s->chief_ref.job].name;
    co.expect_task = s->chief_ref.task;
    co.timeout_ms = 2000;
    FloeCoordAgent *agent = NULL;
    FloeStatus st = {FLOE_OK, NULL};
    floe_code rc = floe__coord_agent_start(chief, &co, &s->coord_opts, 2000, s->info,
                                           on_agent_error, s, &agent, &st);
    pthread_mutex_lock(&s->mu);
    if (rc != FLOE_OK) {
      if (!told_waiting) {
        slog(s, "waiting for the chief %s at %s: %s", chief_name, chief, floe_status_message(&st));
        told_waiting = true;
      }
      floe_status_clear(&st);
      if (nap(s, 500)) break;
      continue;
    }
    slog(s, "registered with the chief %s at %s", chief_name, chief);
    told_waiting = false;
    s->agent = agent;
    pthread_cond_broadcast(&s->cv);
    bool stopping = false, lost = false;
    char *why = NULL;
    for (;;) {
      while (!s->stopping && !s->agent_failed) pthread_cond_wait(&s->cv, &s->mu);
      floe__free(why);
      why = s->agent_failed && s->agent_error ? floe__strdup(s->agent_error) : NULL;
      s->agent_failed = false;
      stopping = s->stopping;
      pthread_mutex_unlock(&s->mu);
      lost = !stopping && floe__coord_agent_chief_lost(agent);
      if (stopping || lost) break;
      /* Another task was lost: what runs here for the chief's sessions fails now (their
       * master ends the sessions), and so do the sessions this task is the master of
       * (between-graph replication); this task stays registered. */
      slog(s, "cluster error: %s: the steps running here are stopped", why ? why : "");
      floe__worker_service_abort_running(s->worker, FLOE_UNAVAILABLE, why ? why : "");
      fan_out(s, FLOE_UNAVAILABLE, why ? why : "another task of the cluster was lost");
      pthread_mutex_lock(&s->mu);
    }
    /* Callers of floe__server_wait_all finish with the agent first (its calls fail fast
     * once the chief is gone or the server stops). */
    pthread_mutex_lock(&s->mu);
    s->agent = NULL;
    while (s->agent_users > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    floe__coord_agent_free(agent);
    if (lost) {
      char msg[768];
      snprintf(msg, sizeof msg, "the chief %s was lost (%s)", chief_name, why ? why : "");
      slog(s, "%s: its sessions here are dropped; waiting for a chief again", msg);
      floe__worker_service_reset(s->worker, FLOE_UNAVAILABLE, msg);
      floe__dataplane_drop_peer(s->dp, s->spec->jobs[s->chief_ref.job].name, s->chief_ref.task);
      fan_out(s, FLOE_UNAVAILABLE, msg);
    }
    floe__free(why);
    pthread_mutex_lock(&s->mu);
    if (!stopping) {
      s->chief_left = true;
      pthread_cond_broadcast(&s->cv);
      if (s->until_chief_leaves) {
        char b = 1;
        ssize_t w = write(s->stop_pipe[1], &b, 1);
        (void)w;
        /* and it never registers again: a chief that comes back (a new one, or the same
         * re-forming the cluster) must not count this incarnation, which is on its way out,
         * as a member */
        break;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------------- */

/* PMIx's thread: every rank joined the fence, so the chief is done with the job. */
static void on_chief_done(void *arg, floe_code code) {
  FloeServer *s = arg;
  slog(s, code == FLOE_OK ? "the chief is done with the job" : "the launcher's fence failed: "
       "the job is ending");
  if (s->until_chief_leaves) {
    char b = 1;
    ssize_t w = write(s->stop_pipe[1], &b, 1);
    (void)w;
  }
}

/* ---- the collectives of this task's process (runtime.h: FloeCollEnv) ---- */

static floe_code coll_kv_set(void *arg, const char *key, const void *value, size_t len,
                             FloeStatus *st) {
  return floe_server_kv_set(arg, key, value, len, 0, st);
}

static floe_code coll_kv_get(void *arg, const char *key, int64_t timeout_ms, void **value,
                             size_t *len, FloeStatus *st) {
  return floe_server_kv_get(arg, key, timeout_ms, value, len, st);
}

static floe_code coll_kv_erase(void *arg, const char *key, FloeStatus *st) {
  FloeServer *s = arg;
  if (s->coord) return floe__coord_service_kv_erase(s->coord, key, st);
  FloeCoordAgent *agent;
  floe_code rc = agent_acquire(s, 60000, &agent, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__coord_agent_kv_erase(agent, key, st);
  agent_release(s);
  return rc;
}

static int coll_channel(void *arg, const char *device, bool is_send, FloeStatus *st) {
  FloeServer *s = arg;
  const FloeRendezvousRoute *r = floe__dataplane_route(s->dp);
  return r->channel(r->arg, device, is_send, st);
}

static void coll_count(void *arg, int chan, bool is_send, int64_t bytes) {
  FloeServer *s = arg;
  const FloeRendezvousRoute *r = floe__dataplane_route(s->dp);
  if (r->count) r->count(r->arg, chan, is_send, bytes);
}

/* Groups of collective ops meet through the coordination service's store and move their
 * bytes over the data plane; backends with a network of their own listen on the task's host. */
static floe_code install_collectives(FloeServer *s, const FloeClusterTask *me, FloeStatus *st) {
  FloeCollEnv env = {coll_kv_set, coll_kv_get, coll_channel, coll_count, s, "", coll_kv_erase};
  if (strcmp(me->host, "0.0.0.0") != 0 && strcmp(me->host, "::") != 0)
    snprintf(env.host, sizeof env.host, "%s", me->host);
  return floe__collective_set_env(s->rt, &env, "the task joined a cluster", st);
}

static void server_destroy(FloeServer *s) {
  if (!s) return;
  if (s->collectives) {
    FloeStatus cst = {FLOE_OK, NULL};
    char why[200];
    snprintf(why, sizeof why, "the server of %s is stopping", s->task_name);
    floe__collective_set_env(s->rt, NULL, why, &cst);
    floe_status_clear(&cst);
  }
  if (s->pmix) {
    FloeStatus st = {FLOE_OK, NULL};
    if (s->is_chief && floe__pmix_fence(s->pmix, &st) != FLOE_OK)
      slog(s, "telling the other ranks the chief is done: %s", floe_status_message(&st));
    floe_status_clear(&st);
    floe__pmix_close(s->pmix); /* no on_chief_done after this */
    s->pmix = NULL;
  }
  if (s->in_registry) registry_remove(s);
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (s->agent_started) pthread_join(s->agent_thread, NULL);
  floe__coord_service_free(s->coord);
  if (s->worker) floe__worker_service_reset(s->worker, FLOE_CANCELLED, "the server is stopping");
  floe__rpc_server_free(s->rpc); /* joins every handler */
  floe__worker_service_free(s->worker);
  floe__dataplane_free(s->dp);
  /* A transport the server opened goes with it: its endpoints (libfabric's shm regions in
   * /dev/shm among them) would otherwise last until the runtime is freed, which for the
   * process's default runtime is never. */
  if (s->owns_transport) floe__transport_mgr_free(s->rt);
  floe__wire_free(s->info ? &s->info->base : NULL);
  floe__secret_free(s->secret);
  floe__cluster_free(s->spec);
  floe__free(s->agent_error);
  if (s->stop_pipe[0] >= 0) close(s->stop_pipe[0]);
  if (s->stop_pipe[1] >= 0) close(s->stop_pipe[1]);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  floe__free(s);
}

static floe_code server_start(FloeRuntime *rt, const FloeServerOptions *o, const char *cluster,
                              FloeServer **out, FloeStatus *st) {
  *out = NULL;
  FloeListener *bound = NULL; /* under PMIx: the socket the spec's address names */
  FloeServer *s = floe__calloc(1, sizeof *s);
  if (!s) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting a server");
  s->stop_pipe[0] = s->stop_pipe[1] = -1;
  if (pthread_mutex_init(&s->mu, NULL) != 0 || pthread_cond_init(&s->cv, NULL) != 0) {
    floe__free(s);
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create the server's mutex");
  }
  s->rt = rt;
  s->log = o ? o->log : NULL;
  s->log_arg = o ? o->log_arg : NULL;
  s->until_chief_leaves = o && FLOE_HAS_FIELD(o, FloeServerOptions, until_chief_leaves) &&
                          o->until_chief_leaves;
  s->coord_opts.heartbeat_interval_ms = o ? o->heartbeat_interval_ms : 0;
  s->coord_opts.heartbeat_timeout_ms = o ? o->heartbeat_timeout_ms : 0;
  floe_code rc;
  if (pipe(s->stop_pipe) != 0) {
    rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a pipe: %s", strerror(errno));
    goto fail;
  }
  fcntl(s->stop_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(s->stop_pipe[1], F_SETFD, FD_CLOEXEC);
  fcntl(s->stop_pipe[1], F_SETFL, O_NONBLOCK);
  rc = resolve_spec(cluster, o ? o->job : NULL, o ? o->task : 0, &s->spec, &bound, &s->pmix, st);
  if (rc != FLOE_OK) goto fail;
  if ((rc = chief_of(s->spec, &s->chief_ref, st)) != FLOE_OK) goto fail;
  s->self_ref = s->spec->self.job >= 0 ? s->spec->self : s->chief_ref;
  s->is_chief = s->self_ref.job == s->chief_ref.job && s->self_ref.task == s->chief_ref.task;
  const FloeClusterJob *job = &s->spec->jobs[s->self_ref.job];
  snprintf(s->self.job, sizeof s->self.job, "%s", job->name);
  s->self.task = s->self_ref.task;
  if ((rc = floe__auth_random((uint8_t *)&s->self.incarnation, sizeof s->self.incarnation, st)) != FLOE_OK)
    goto fail;
  snprintf(s->task_name, sizeof s->task_name, "/job:%s/replica:0/task:%d", s->self.job, s->self.task);
  if ((rc = floe__secret_from_env(&s->secret, st)) != FLOE_OK) {
    if (s->pmix)
      floe__status_prefix(st, "%s (give every rank the same secret: mpirun -x "
                          "FLOE_JOB_SECRET_FILE=FILE, or set it in the job script for srun)",
                          s->spec->source);
    goto fail;
  }
  if ((rc = floe__runtime_join(rt, s->self.job, s->self.task, st)) != FLOE_OK) goto fail;
  FloeRpcServerOptions ro = {0};
  ro.conn = floe__server_conn_options(s);
  ro.log = rpc_log;
  ro.log_arg = s;
  const char *addr = floe__cluster_address(s->spec, s->self_ref);
  rc = bound ? floe__rpc_server_start_on(bound, &ro, &s->rpc, st)
             : floe__rpc_server_start(addr, &ro, &s->rpc, st);
  bound = NULL; /* the rpc server's now, or closed */
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "serving %s at %s", s->task_name, addr);
    goto fail;
  }
  /* The data plane listens on the task's own host too (the transports bind FLOE_FABRIC_HOST
   * or FLOE_UCX_HOST, else 127.0.0.1): a cluster across machines works without setting them,
   * and nothing listens on an interface the spec did not name. An explicit setting wins. */
  const FloeClusterTask *me = &job->tasks[s->self_ref.task];
  dataplane_host_default(me->host);
  s->owns_transport = atomic_load(&rt->transport_mgr) == NULL;
  if ((rc = floe__dataplane_new(rt, s->secret, &s->self, &s->dp, st)) != FLOE_OK) goto fail;
  if ((rc = floe__worker_service_start(rt, s->dp, s->rpc, &s->worker, st)) != FLOE_OK) goto fail;
  if ((rc = build_info(s, st)) != FLOE_OK) goto fail;
  if ((rc = install_collectives(s, me, st)) != FLOE_OK) goto fail;
  s->collectives = true;
  if (s->is_chief) {
    rc = floe__coord_service_start(s->spec, &s->coord_opts, s->info, s->rpc,
                                   on_coord_error, s, &s->coord, st);
    if (rc != FLOE_OK) goto fail;
  } else {
    int e = pthread_create(&s->agent_thread, NULL, agent_main, s);
    if (e != 0) {
      rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot start the agent thread: %s",
                           strerror(e));
      goto fail;
    }
    s->agent_started = true;
    if (s->pmix && (rc = floe__pmix_fence_nb(s->pmix, on_chief_done, s, st)) != FLOE_OK)
      goto fail;
  }
  *out = s;
  return FLOE_OK;
fail:
  floe__listener_close(bound);
  server_destroy(s);
  return rc;
}

FloeServer *floe_server_start(const FloeServerOptions *opts, FloeStatus *status) {
  FloeRuntime *rt = opts && opts->runtime ? opts->runtime : floe_runtime_default(status);
  if (!rt) return NULL;
  pthread_mutex_lock(&g_reg_mu);
  FloeServer *s = registry_find(rt);
  if (s) {
    pthread_mutex_unlock(&g_reg_mu);
    floe_status_set(status, FLOE_ALREADY_EXISTS, "this runtime serves %s already (one task per "
                    "runtime: use another runtime)", s->task_name);
    return NULL;
  }
  if (g_num_reg == (int)(sizeof g_reg / sizeof g_reg[0])) {
    pthread_mutex_unlock(&g_reg_mu);
    floe_status_set(status, FLOE_RESOURCE_EXHAUSTED, "%d servers run in this process already",
                    g_num_reg);
    return NULL;
  }
  if (server_start(rt, opts, opts ? opts->cluster : NULL, &s, status) == FLOE_OK) {
    g_reg[g_num_reg++] = s;
    s->in_registry = true;
  }
  pthread_mutex_unlock(&g_reg_mu);
  return s;
}

floe_code floe__server_for_session(FloeRuntime *rt, const char *cluster, FloeServer **out,
                                   FloeStatus *st) {
  pthread_mutex_lock(&g_reg_mu);
  FloeServer *s = registry_find(rt);
  floe_code rc = FLOE_OK;
  if (!s) {
    if (g_num_reg == (int)(sizeof g_reg / sizeof g_reg[0])) {
      rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "%d servers run in this process already",
                           g_num_reg);
    } else {
      FloeServerOptions o;
      floe_server_options_init(&o);
      o.runtime = rt;
      rc = server_start(rt, &o, cluster, &s, st);
      if (rc == FLOE_OK) {
        g_reg[g_num_reg++] = s;
        s->in_registry = true;
      }
    }
  }
  pthread_mutex_unlock(&g_reg_mu);
  *out = rc == FLOE_OK ? s : NULL;
  return rc;
}

floe_code floe_server_join(FloeServer *s, int64_t timeout_ms, FloeStatus *status) {
  if (!s) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_server_join: no server");
  struct pollfd p = {s->stop_pipe[0], POLLIN, 0};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int wait = -1;
    if (timeout_ms >= 0) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      int64_t spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
      if (spent >= timeout_ms)
        return floe_status_set(status, FLOE_DEADLINE_EXCEEDED, "%s still serving after %" PRId64
                               " ms", s->task_name, timeout_ms);
      wait = (int)(timeout_ms - spent);
    }
    int r = poll(&p, 1, wait);
    if (r > 0) return FLOE_OK;
    if (r < 0 && errno != EINTR)
      return floe_status_set(status, FLOE_INTERNAL, "waiting for the server: %s", strerror(errno));
  }
}

void floe_server_stop(FloeServer *s) {
  if (!s) return;
  char b = 1;
  ssize_t w = write(s->stop_pipe[1], &b, 1); /* async-signal-safe; a full pipe is stopped already */
  (void)w;
}

void floe_server_free(FloeServer *s) { server_destroy(s); }
