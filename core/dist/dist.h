/* SPDX-License-Identifier: Apache-2.0 */
/* dist.h - libfloe's distributed layer (core/dist/): cluster specs (TF_CONFIG-style JSON,
 * PMIx under mpirun/srun), the control plane's framed and signed messages, the job secret
 * and the mutual challenge-response that opens every control connection, and connections
 * over TCP with a deadline on every read and write. It calls the session layer and below;
 * train, data and the top may call it. Nothing here is public API (floe__*). */
#ifndef FLOE__LAYER_DIST_H
#define FLOE__LAYER_DIST_H

#include "session/session.h"

/* ------------------------------------------------------------------------------------ */
/* cluster.c: which tasks make up the job, and which one this process is. */

#define FLOE__CLUSTER_MAX_TASKS 4096            /* over all jobs */
#define FLOE__CLUSTER_MAX_BYTES (1u << 20)      /* a spec's JSON, from a file or a variable */
#define FLOE__JOB_NAME_MAX 63                   /* FloeDeviceName.job holds 63 + NUL */
#define FLOE__HOST_MAX 253                      /* a DNS name's longest text form */

typedef struct FloeClusterTask {
  char *address; /* "host:port" as written in the spec (owned) */
  char *host;    /* "10.0.0.1", "::1" (no brackets), "node-3.example" (owned) */
  int port;      /* 1..65535 */
} FloeClusterTask;

typedef struct FloeClusterJob {
  char *name;              /* [a-z][a-z0-9_]*, at most FLOE__JOB_NAME_MAX bytes (owned) */
  int num_tasks;           /* >= 1 */
  FloeClusterTask *tasks;  /* task i of the job (owned) */
} FloeClusterJob;

/* A task of a spec by position: jobs[job].tasks[task]. */
typedef struct FloeTaskRef {
  int job, task;
} FloeTaskRef;

typedef struct FloeClusterSpec {
  int num_jobs;
  FloeClusterJob *jobs;  /* in the order the spec gives them (owned) */
  int num_tasks;         /* over all jobs */
  FloeTaskRef self;      /* this process's task; job -1 when the spec names none */
  char *source;          /* where it came from, for messages: "FLOE_CONFIG", "TF_CONFIG",
                          * "cluster.json", "PMIx (namespace N)" (owned) */
} FloeClusterSpec;

/* Parses TF_CONFIG-compatible JSON, json[0..len) (need not end in NUL):
 *   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
 *    "task": {"type": "worker", "index": 0}}
 * ("environment" and "rpc_layer", which TF's launchers add, are accepted and ignored). source
 * names where the text came from and starts every error message ("TF_CONFIG: cluster.worker[1]:
 * ..."). Validation is strict: UTF-8, no duplicate keys, job names [a-z][a-z0-9_]*, addresses
 * host:port (IPv4, [IPv6] or a host name; port 1-65535), no address twice, at most
 * FLOE__CLUSTER_MAX_TASKS tasks, the task's type a job of the cluster and its index in range.
 * "task" may be absent (self.job is then -1). On OK *out is the caller's
 * (floe__cluster_free); on error *out is NULL and st says what and where. */
floe_code floe__cluster_parse(const char *json, size_t len, const char *source,
                              FloeClusterSpec **out, FloeStatus *st);
/* The spec of the environment: FLOE_CONFIG when set (it wins), else TF_CONFIG; out->source
 * says which. NOT_FOUND when neither is set. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_env(FloeClusterSpec **out, FloeStatus *st);
/* The spec in the file path (at most FLOE__CLUSTER_MAX_BYTES): TF_CONFIG's form, or the
 * "cluster" object alone. job (NULL: the file's "task", if any) and task name this process's
 * task and take precedence over the file's "task". Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_file(const char *path, const char *job, int task,
                                  FloeClusterSpec **out, FloeStatus *st);
/* Builds a spec from addresses (borrowed, n of them): addresses[0] the chief, the rest
 * workers 0..n-2; rank is this process's index in addresses. Every address is validated as
 * in a spec. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_addresses(const char *const *addresses, int n, int rank,
                                       const char *source, FloeClusterSpec **out,
                                       FloeStatus *st);
void floe__cluster_free(FloeClusterSpec *spec); /* NULL is fine */

/* The job named name, or -1. */
int floe__cluster_find_job(const FloeClusterSpec *spec, const char *name);
/* The task a name like "/job:worker/task:1" (or "/job:worker/replica:0/task:1", with any
 * device part) names. NOT_FOUND naming the jobs or the job's task count when there is no
 * such task; INVALID_ARGUMENT for a name that does not parse or names no job. */
floe_code floe__cluster_lookup(const FloeClusterSpec *spec, const char *name, FloeTaskRef *out,
                               FloeStatus *st);
/* The task that holds the device dn (parsed by floe_device_name_parse): no job, or job
 * "localhost" when the cluster has no such job, is this process's task; a job without a task
 * is task 0 when the job has one task (else INVALID_ARGUMENT: ambiguous); replica must be 0
 * or unspecified. */
floe_code floe__cluster_task_of_device(const FloeClusterSpec *spec, const FloeDeviceName *dn,
                                       FloeTaskRef *out, FloeStatus *st);
/* The task's address ("host:port", borrowed from spec); NULL for a ref out of range. */
const char *floe__cluster_address(const FloeClusterSpec *spec, FloeTaskRef ref);
/* "/job:J/task:T" into buf (cap bytes); returns buf. */
char *floe__cluster_task_name(const FloeClusterSpec *spec, FloeTaskRef ref, char *buf,
                              size_t cap);

/* "host:port" split and checked: IPv4 dotted quad, [IPv6] in brackets, or a host name (RFC
 * 1123 labels); port 1-65535 (0 too when allow_port0: "any free port" for a listener). host
 * gets the host without brackets (FLOE__HOST_MAX + 1 bytes). On error st says what is wrong
 * with the address, prefixed by what (the field or option it came from). */
floe_code floe__hostport_parse(const char *addr, bool allow_port0, const char *what,
                               char host[FLOE__HOST_MAX + 1], int *port, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* pmix.c: the cluster under a PMIx launcher (Open MPI's mpirun, Slurm's srun). libpmix.so.2
 * is dlopened only here, only when the environment shows a launcher, and never linked. */

/* True when PMIX_RANK and PMIX_NAMESPACE are set: this process was started by a PMIx
 * launcher. */
bool floe__pmix_detect(void);
typedef struct FloePmix FloePmix;
/* dlopens library (NULL: "libpmix.so.2"), resolves the functions used and calls PMIx_Init;
 * *rank and *size are this process's rank and the job's size. UNIMPLEMENTED when Floe was
 * built without pmix.h; UNAVAILABLE naming the library and dlerror() when it cannot be
 * loaded; the PMIx error string when PMIx_Init fails. The caller owns *out
 * (floe__pmix_close, which calls PMIx_Finalize; the library stays loaded). */
floe_code floe__pmix_open(const char *library, FloePmix **out, int *rank, int *size,
                          FloeStatus *st);
/* Every rank publishes blob[0..len) (at most 64 KiB) under key; after a fence, blobs[r]
 * (floe__malloc'd, caller frees each and the array) and lens[r] hold rank r's, for the job's
 * size ranks. Collective: every rank must call it. */
floe_code floe__pmix_allgather(FloePmix *p, const char *key, const void *blob, size_t len,
                               uint8_t ***blobs, size_t **lens, FloeStatus *st);
void floe__pmix_close(FloePmix *p);
/* The cluster under a launcher: rank 0 the chief, ranks 1.. workers 0.., from the
 * "host:port" each rank publishes (my_address: this process's, already bound). Opens and
 * closes PMIx around one allgather. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_pmix(const char *my_address, FloeClusterSpec **out,
                                  FloeStatus *st);

#endif /* FLOE__LAYER_DIST_H */
