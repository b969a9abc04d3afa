/* SPDX-License-Identifier: Apache-2.0 */
/* floe_dist.h - the tasks of a cluster (docs/distributed.md).
 *
 * A cluster is jobs of tasks ("chief", "worker", "ps"), each task a process with an address
 * (TF_CONFIG's spec). Every task but the chief runs a server (floe_server_start, or the
 * `floe server` command); the chief is the process whose session names the cluster
 * (FloeSessionOptions.cluster): it starts its own server, waits for the others, places the
 * graph over every task's devices and runs each task's piece there. Every connection proves
 * the job's secret (FLOE_JOB_SECRET_FILE, a 0600 file, or FLOE_JOB_SECRET). */
#ifndef FLOE_DIST_H
#define FLOE_DIST_H

#include "floe/floe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FloeServer FloeServer;

typedef struct FloeServerOptions {
  size_t struct_size;        /* sizeof(FloeServerOptions) */
  FloeRuntime *runtime;      /* NULL: floe_runtime_default() */
  /* The cluster, as FloeSessionOptions.cluster: NULL or "env" the environment's
   * (FLOE_CONFIG, else TF_CONFIG, else PMIx under mpirun/srun), text starting with '{' a
   * spec, anything else a file holding one. Borrowed for the call. */
  const char *cluster;
  const char *job;           /* this task (NULL: the spec's "task") */
  int task;
  int heartbeat_interval_ms; /* 0: 1000 */
  int heartbeat_timeout_ms;  /* 0: 10000: a task silent this long is unavailable */
  /* Told of what the server refuses or drops (a failed handshake, a bad frame, a lost
   * chief), one line each, on the server's threads; NULL: nothing is reported. */
  void (*log)(void *arg, const char *msg);
  void *log_arg;
  /* 1: floe_server_join returns once the chief this task registered with is gone (the
   * tasks of a job started together, as by mpirun, end with their chief), and the server
   * never registers with a chief again (a process that goes on starts a new server). */
  int until_chief_leaves;
} FloeServerOptions;

FLOE_API void floe_server_options_init(FloeServerOptions *opts);
/* Binds the task's address (only that address) and serves: the worker service, the data
 * plane, and the chief's coordination once a chief is up (it keeps trying to reach one).
 * Caller owns the server (floe_server_free). */
FLOE_API FloeServer *floe_server_start(const FloeServerOptions *opts, FloeStatus *status);
/* "host:port" bound and "/job:worker/replica:0/task:1" (borrowed from s). */
FLOE_API const char *floe_server_address(const FloeServer *s);
FLOE_API const char *floe_server_task(const FloeServer *s);
/* 1 when s serves the cluster's chief (/job:chief/task:0, or /job:worker/task:0 when there
 * is no chief job): the coordination service runs in its process. Sessions naming the
 * cluster may run in any task's process (each worker's, under between-graph replication). */
FLOE_API int floe_server_is_chief(const FloeServer *s);
/* This task's job name ("worker"; borrowed from s) and index in it. */
FLOE_API const char *floe_server_job(const FloeServer *s);
FLOE_API int floe_server_task_index(const FloeServer *s);
/* The number of tasks of job `job` in s's cluster; 0 when it has no such job (or s or job
 * is NULL). */
FLOE_API int floe_server_job_size(const FloeServer *s, const char *job);

/* What this task's data plane moved to and from one peer task, over every session of the
 * process since the server started: values and their payload bytes as posted to or taken
 * from the transport (headers and the transport's own framing not counted). */
typedef struct FloeTaskTraffic {
  char task[128];          /* "/job:ps/replica:0/task:0" */
  int64_t values_sent, bytes_sent;
  int64_t values_received, bytes_received;
} FloeTaskTraffic;
/* Fills out[0..min(cap, peers)) (out may be NULL with cap 0) and returns the number of peer
 * tasks, so a caller can size its array. Thread-safe. */
FLOE_API int floe_server_traffic(FloeServer *s, FloeTaskTraffic *out, int cap);
/* The cluster's key-value store, kept by the chief's coordination service (TF's
 * coordination-service KeyValue): small values any task may store and any task may wait
 * for, e.g. where a resumed run starts. Keys and values are bounded (256 bytes and 64 KiB;
 * 4096 keys, 16 MiB in all: an error says which bound). kv_set stores value[0..len) under
 * key (copied); an existing key is FLOE_ALREADY_EXISTS unless overwrite. kv_get waits up to
 * timeout_ms (0: looks once; < 0: no limit) for key: FLOE_DEADLINE_EXCEEDED naming it when it
 * does not come, and a lost chief or a cluster error ends the wait. On success *value is
 * malloc'd (the caller frees it with free(); a 0 byte follows its len bytes) and *len its
 * length. A task that has not yet registered with the chief waits for that first (within
 * timeout_ms). Thread-safe. */
FLOE_API floe_code floe_server_kv_set(FloeServer *s, const char *key, const void *value,
                                      size_t len, int overwrite, FloeStatus *status);
FLOE_API floe_code floe_server_kv_get(FloeServer *s, const char *key, int64_t timeout_ms,
                                      void **value, size_t *len, FloeStatus *status);
/* Waits until floe_server_stop (0) or timeout_ms passes (FLOE_DEADLINE_EXCEEDED; < 0 waits
 * for ever). */
FLOE_API floe_code floe_server_join(FloeServer *s, int64_t timeout_ms, FloeStatus *status);
/* Asks join to return; async-signal-safe (a SIGTERM handler may call it). */
FLOE_API void floe_server_stop(FloeServer *s);
/* Stops serving (steps running here fail with CANCELLED), closes every connection, frees.
 * When the server opened the runtime's transport (nothing had moved a tensor through it
 * before), it closes it too: free every session of the runtime first. NULL is fine. */
FLOE_API void floe_server_free(FloeServer *s);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_DIST_H */
