/* SPDX-License-Identifier: Apache-2.0 */
/* runtime.c - a runtime: its thread pool, plugins and devices, and their listings. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"

/* Every FloeRuntimeOptions ever released has at least struct_size and plugin_path. */
#define FIELD_END_PLUGIN_PATH (offsetof(FloeRuntimeOptions, plugin_path) + sizeof(const char *))

/* num_threads from the options, else $FLOE_NUM_THREADS, else the online cores. */
static floe_code pick_num_threads(const FloeRuntimeOptions *opts, int *out, FloeStatus *st) {
  if (FLOE_HAS_FIELD(opts, FloeRuntimeOptions, num_threads) && opts->num_threads != 0) {
    if (opts->num_threads < 0 || opts->num_threads > 4096)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "FloeRuntimeOptions.num_threads is %d: use 1..4096, or 0 for the "
                             "number of cores",
                             opts->num_threads);
    *out = opts->num_threads;
    return FLOE_OK;
  }
  const char *env = getenv("FLOE_NUM_THREADS");
  if (env && *env) {
    char *end;
    errno = 0;
    long n = strtol(env, &end, 10);
    if (errno || *end != '\0' || n < 1 || n > 4096)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "FLOE_NUM_THREADS=\"%s\" is not a thread count: use 1..4096, or unset "
                             "it for the number of cores",
                             env);
    *out = (int)n;
    return FLOE_OK;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  *out = cores >= 1 ? (int)(cores > 4096 ? 4096 : cores) : 1;
  return FLOE_OK;
}

static uint64_t draw_seed(void) {
  uint64_t seed;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
  /* No entropy yet (early boot): time and pid still differ between runs and processes. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  return seed;
}

/* Names follow load order: the Nth device of a type is "TYPE:N"; the short name is lower
 * case with '-' for '_' ("TPU_SIM" -> "tpu-sim:0"). */
static void name_devices(FloeRuntime *rt) {
  for (int i = 0; i < rt->num_devices; i++) {
    FloeDevice *d = rt->devices[i];
    int index = 0;
    for (int j = 0; j < i; j++)
      if (strcmp(rt->devices[j]->props.type, d->props.type) == 0) index++;
    d->index = index;
    snprintf(d->name, sizeof d->name, "/job:%s/replica:0/task:%d/device:%s:%d",
             rt->joined ? rt->job : "localhost", rt->joined ? rt->task : 0, d->props.type, index);
    if (rt->joined) snprintf(d->job, sizeof d->job, "%s", rt->job);
    d->task = rt->joined ? rt->task : -1;
    char lower[sizeof d->props.type];
    size_t k = 0;
    for (; d->props.type[k] && k + 1 < sizeof lower; k++)
      lower[k] = d->props.type[k] == '_' ? '-' : (char)tolower((unsigned char)d->props.type[k]);
    lower[k] = '\0';
    snprintf(d->short_name, sizeof d->short_name, "%s:%d", lower, index);
  }
}

/* Caller owns the runtime (floe_runtime_free); opts and its strings are borrowed for the
 * call, sets (the core's kernel sets, registered after the plugins' kernels) too. */
FloeRuntime *floe__runtime_create(const FloeRuntimeOptions *opts, const FloeKernelSetFn *sets,
                                  int num_sets, FloeStatus *status) {
  if (opts && opts->struct_size < FIELD_END_PLUGIN_PATH) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "FloeRuntimeOptions.struct_size is %zu: set it to sizeof(FloeRuntimeOptions)",
                    opts->struct_size);
    return NULL;
  }
  if (floe__ops_init(status) != FLOE_OK) return NULL;
  FloeRuntime *rt = floe__calloc(1, sizeof *rt);
  if (!rt) {
    floe_status_set(status, FLOE_NO_MEMORY, "out of memory creating a runtime");
    return NULL;
  }
  if (pick_num_threads(opts, &rt->num_threads, status) != FLOE_OK) goto err_free_rt;
  rt->pool = floe__pool_new(rt->num_threads, status);
  if (!rt->pool) goto err_free_rt;
  if (floe__plugins_load(rt, opts, status) != FLOE_OK) goto err_free_plugins;
  /* After the plugins: a plugin's kernel of a device's own type wins over the core's. */
  for (int i = 0; i < num_sets; i++)
    if (sets[i](rt, status) != FLOE_OK) goto err_free_plugins;
  name_devices(rt);
  rt->seed = draw_seed();
  if (pthread_mutex_init(&rt->cluster_mu, NULL) != 0) {
    floe_status_set(status, FLOE_RESOURCE_EXHAUSTED, "cannot create the runtime's mutex");
    floe__pool_free(rt->pool);
    floe__plugins_shutdown(rt);
    floe__free(rt);
    return NULL;
  }
  atomic_init(&rt->remote, NULL);
  atomic_init(&rt->remote_span, 0);
  return rt;

err_free_plugins:
  floe__pool_free(rt->pool);
  floe__plugins_shutdown(rt);
  floe__free(rt);
  return NULL;
err_free_rt:
  floe__free(rt);
  return NULL;
}

/* Frees rt and everything its plugins registered; the default runtime is never freed. */
void floe_runtime_free(FloeRuntime *rt) {
  /* The default runtime is borrowed by everyone until exit. */
  if (!rt || rt->is_default) return;
  /* Workers may still run plugin code: join them before any shutdown hook. */
  floe__pool_free(rt->pool);
  /* The progress thread runs transport plugin code: stop it before the plugins go. */
  floe__collective_mgr_stop(rt);
  floe__transport_mgr_free(rt);
  floe__collective_mgr_free(rt);
  floe__plugins_shutdown(rt);
  for (int i = 0; i < rt->num_retired; i++) floe__free(rt->retired[i]);
  floe__free(rt->retired);
  pthread_mutex_destroy(&rt->cluster_mu);
  floe__free(rt);
}

/* ---- clusters ---- */

floe_code floe__runtime_join(FloeRuntime *rt, const char *job, int task, FloeStatus *st) {
  if (!job || !job[0] || strlen(job) >= sizeof rt->job || task < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "joining a cluster: the job name must be 1-63 bytes and the task >= 0");
  pthread_mutex_lock(&rt->cluster_mu);
  floe_code rc = FLOE_OK;
  if (rt->joined) {
    if (strcmp(rt->job, job) != 0 || rt->task != task)
      rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "this runtime is already /job:%s/task:%d of a cluster; it cannot "
                           "also be /job:%s/task:%d (use another runtime for another task)",
                           rt->job, rt->task, job, task);
  } else {
    snprintf(rt->job, sizeof rt->job, "%s", job);
    rt->task = task;
    rt->joined = true;
    name_devices(rt);
  }
  pthread_mutex_unlock(&rt->cluster_mu);
  return rc;
}

static bool retire(FloeRuntime *rt, void *p) { /* under cluster_mu */
  if (!p) return true;
  if (rt->num_retired == rt->cap_retired) {
    int cap = rt->cap_retired ? 2 * rt->cap_retired : 8;
    void **r = floe__realloc(rt->retired, (size_t)cap * sizeof *r);
    if (!r) return false;
    rt->retired = r;
    rt->cap_retired = cap;
  }
  rt->retired[rt->num_retired++] = p;
  return true;
}

floe_code floe__runtime_set_remote(FloeRuntime *rt, const FloeDevice *devs, int n,
                                   FloeStatus *st) {
  if (n < 0 || (n > 0 && !devs))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "set_remote: no devices given");
  /* One block: the set, the records, the pointer array. */
  size_t bytes = sizeof(struct FloeRemoteSet) + (size_t)n * (sizeof(FloeDevice) + sizeof(FloeDevice *));
  void *block = floe__calloc(1, bytes);
  if (!block) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding remote devices");
  struct FloeRemoteSet *set = block;
  FloeDevice *recs = (FloeDevice *)(void *)(set + 1);
  FloeDevice **arr = (FloeDevice **)(void *)(recs + n);
  set->n = n;
  set->devices = arr;
  pthread_mutex_lock(&rt->cluster_mu);
  if (!retire(rt, block)) {
    pthread_mutex_unlock(&rt->cluster_mu);
    floe__free(block);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory adding remote devices");
  }
  for (int i = 0; i < n; i++) {
    FloeDevice *d = &recs[i];
    *d = devs[i];
    d->rt = rt;
    d->plugin = NULL;
    memset(&d->fns, 0, sizeof d->fns);
    d->remote = true;
    d->id = rt->num_devices + i;
    d->host_memory = (d->props.flags & FLOE_DEVICE_HOST_MEMORY) != 0;
    arr[i] = d;
  }
  if (n > atomic_load(&rt->remote_span)) atomic_store(&rt->remote_span, n);
  atomic_store(&rt->remote, set);
  pthread_mutex_unlock(&rt->cluster_mu);
  return FLOE_OK;
}

int floe__runtime_device_span(const FloeRuntime *rt) {
  return rt->num_devices + atomic_load(&((FloeRuntime *)rt)->remote_span);
}

FloeDevice **floe__runtime_remote(const FloeRuntime *rt, int *n) {
  struct FloeRemoteSet *set = atomic_load(&((FloeRuntime *)rt)->remote);
  *n = set ? set->n : 0;
  return set ? set->devices : NULL;
}

/* Counts of rt's registries (0 for a NULL runtime); nothing is allocated. */
int floe_runtime_num_plugins(const FloeRuntime *rt) { return rt ? rt->num_plugins : 0; }

/* Borrowed from rt (the report and its strings), NULL for a bad index. */
const FloePluginReport *floe_runtime_plugin(const FloeRuntime *rt, int i) {
  if (!rt || i < 0 || i >= rt->num_plugins) return NULL;
  return &rt->plugins[i]->report;
}

/* Static strings. */
const char *floe_plugin_state_name(FloePluginState s) {
  switch (s) {
    case FLOE_PLUGIN_LOADED: return "loaded";
    case FLOE_PLUGIN_UNAVAILABLE: return "unavailable";
    case FLOE_PLUGIN_REFUSED: return "refused";
    case FLOE_PLUGIN_FAILED: return "failed";
    case FLOE_PLUGIN_DUPLICATE: return "duplicate";
    case FLOE_PLUGIN_FILTERED: return "filtered";
  }
  return "unknown";
}

int floe_runtime_num_devices(const FloeRuntime *rt) { return rt ? rt->num_devices : 0; }

/* info's strings are borrowed from rt. */
floe_code floe_runtime_device(const FloeRuntime *rt, int i, FloeDeviceInfo *info) {
  if (!rt || !info || i < 0 || i >= rt->num_devices) return FLOE_OUT_OF_RANGE;
  const FloeDevice *d = rt->devices[i];
  info->name = d->name;
  info->short_name = d->short_name;
  info->type = d->props.type;
  info->plugin = d->plugin->name;
  info->description = d->props.description;
  info->memory_bytes = d->props.memory_bytes;
  info->peak_flops_f32 = d->props.peak_flops[FLOE_F32];
  info->memory_bandwidth = d->props.memory_bandwidth;
  info->index = d->index;
  return FLOE_OK;
}

/* The core's own kernels (device type "*", e.g. the variable ops) count for every device
 * type, since they run on any device. */
int floe_runtime_num_kernels_for(const FloeRuntime *rt, const char *op, const char *device_type) {
  if (!rt || !op) return 0;
  int n = 0;
  for (int i = 0; i < rt->num_kernels; i++) {
    const FloeKernelReg *k = rt->kernels[i];
    if (strcmp(k->op, op) == 0 &&
        (!device_type || strcmp(k->device_type, "*") == 0 ||
         strcasecmp(k->device_type, device_type) == 0))
      n++;
  }
  return n;
}

int floe_runtime_num_kernels(const FloeRuntime *rt) { return rt ? rt->num_kernels : 0; }

/* info's strings are borrowed from rt. */
floe_code floe_runtime_kernel(const FloeRuntime *rt, int i, FloeKernelInfo *info) {
  if (!info || info->struct_size < offsetof(FloeKernelInfo, priority) + sizeof info->priority)
    return FLOE_INVALID_ARGUMENT;
  if (!rt || i < 0 || i >= rt->num_kernels) return FLOE_OUT_OF_RANGE;
  const FloeKernelReg *k = rt->kernels[i];
  info->op = k->op;
  info->device_type = k->device_type;
  info->plugin = k->plugin ? k->plugin->name : "core";
  info->priority = k->priority;
  if (info->struct_size >= offsetof(FloeKernelInfo, num_constraints) + sizeof(int))
    info->num_constraints = (int)k->num_constraints;
  return FLOE_OK;
}

/* *attr is borrowed from rt. */
floe_code floe_runtime_kernel_constraint(const FloeRuntime *rt, int i, int j, const char **attr,
                                         uint32_t *dtypes) {
  if (!attr || !dtypes) return FLOE_INVALID_ARGUMENT;
  if (!rt || i < 0 || i >= rt->num_kernels) return FLOE_OUT_OF_RANGE;
  const FloeKernelReg *k = rt->kernels[i];
  if (j < 0 || (size_t)j >= k->num_constraints) return FLOE_OUT_OF_RANGE;
  *attr = k->constraints[j].attr;
  *dtypes = k->constraints[j].dtypes;
  return FLOE_OK;
}
