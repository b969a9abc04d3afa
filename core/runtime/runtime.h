/* SPDX-License-Identifier: Apache-2.0 */
/* runtime.h - libfloe's runtime layer (core/runtime/): plugins (discovery, loading, the
 * registrar), runtimes and their devices, the kernel registry and kernel choice, and the
 * transport manager. */
#ifndef FLOE__LAYER_RUNTIME_H
#define FLOE__LAYER_RUNTIME_H

#include "graph/graph.h"

/* ------------------------------------------------------------------------------------ */
/* Kernel flag (core only): the kernel gets its resource inputs as handles, not values. */
#define FLOE__KERNEL_RAW_RESOURCES 0x80000000u
/* Kernel flag (core only): the kernel serves only devices whose memory is host memory (a
 * reader's or a queue's state and tensors live there, as with TensorFlow's CPU-only queue
 * and reader kernels), so the placer puts the node and its colocation group on such a
 * device and Send/Recv carry what it produces to other devices. */
#define FLOE__KERNEL_HOST_ONLY 0x40000000u

typedef struct FloeKernelReg {
  char *op;
  char *device_type;
  FloeTypeConstraint *constraints; /* attr strings owned */
  size_t num_constraints;
  int32_t priority;
  uint32_t flags;
  FloeKernelDef def;        /* copied, zero-extended; op/device_type/constraints point above */
  FloePlugin *plugin;
} FloeKernelReg;

/* A collective backend (ABI 1.5), as a plugin registered it. */
typedef struct FloeCollectiveReg {
  FloeCollectiveFns fns;    /* copied, zero-extended; name/device_type point below */
  char *name;
  char *device_type;        /* upper case; "CPU" for host memory */
  FloePlugin *plugin;
} FloeCollectiveReg;

typedef struct FloeTransportReg {
  FloeTransportFns fns;     /* copied, zero-extended */
  char *name;
  FloePlugin *plugin;
} FloeTransportReg;

struct FloePlugin {
  FloePluginReport report;  /* strings below are owned by the plugin record */
  char *name, *path, *version, *message;
  void *handle;             /* dlopen handle (never closed) */
  void (*shutdown)(void *);
  void *shutdown_arg;
};

struct FloeRemoteSet {
  int n;
  FloeDevice **devices; /* n of them, in the same block */
};

struct FloeRuntime {
  FloePlugin **plugins;
  int num_plugins;
  FloeDevice **devices;
  int num_devices;
  FloeKernelReg **kernels;
  int num_kernels;
  FloeTransportReg **transports;
  int num_transports;
  FloeCollectiveReg **collectives;
  int num_collectives;
  FloeThreadPool *pool;
  int num_threads;
  uint64_t seed;            /* drawn at creation: incarnation and default random seeds */
  /* transport.c: created on first use, freed by floe_runtime_free before plugins shut down */
  _Atomic(struct FloeTransportMgr *) transport_mgr;
  /* collective.c: created on first use, freed by floe_runtime_free before the transport */
  _Atomic(struct FloeCollMgr *) coll_mgr;
  bool is_default;          /* floe_runtime_default's: floe_runtime_free leaves it alone */
  /* runtime.c: the cluster this runtime is a task of (floe__runtime_join, set_remote). */
  pthread_mutex_t cluster_mu;
  bool joined;              /* job/task below are set; device names carry them */
  char job[64];
  int task;
  /* The devices of the other tasks: one set replaced whole with one atomic store (the
   * count travels with the array); replaced sets are kept until the runtime is freed. */
  _Atomic(struct FloeRemoteSet *) remote;
  atomic_int remote_span;   /* the largest set ever: every device id < num_devices + it */
  void **retired;           /* under cluster_mu */
  int num_retired, cap_retired;
};

/* A set of the core's own kernels (device type "*"), added to a new runtime's registry. */
typedef floe_code (*FloeKernelSetFn)(struct FloeRuntime *rt, FloeStatus *st);
/* runtime.c: a runtime (floe_runtime_new's work, for builtin.c): thread pool, plugins, then
 * the core's kernel sets (borrowed for the call) and device names. Caller owns it. */
struct FloeRuntime *floe__runtime_create(const FloeRuntimeOptions *opts,
                                         const FloeKernelSetFn *sets, int num_sets,
                                         FloeStatus *status);

/* plugin.c: discover + load every plugin into rt (called by floe_runtime_new). A plugin that
 * fails is recorded in rt->plugins with its reason; only internal errors (OOM) fail. */
floe_code floe__plugins_load(struct FloeRuntime *rt, const FloeRuntimeOptions *opts,
                             FloeStatus *st);
void floe__plugins_shutdown(struct FloeRuntime *rt);

/* device.c */
/* The device name names (local ones; remote ones only when the name gives their job). With
 * remote devices of several tasks matching, INVALID_ARGUMENT (ambiguous, naming them). */
FloeDevice *floe__device_find(const struct FloeRuntime *rt, const char *name, FloeStatus *st);
/* Whether d (local or remote) is one of the devices n names (a remote one: n gives its job;
 * no task: every task of the job). */
bool floe__device_name_matches(const struct FloeRuntime *rt, const FloeDevice *d,
                               const FloeDeviceName *n);

/* runtime.c: clusters. join makes rt task `task` of job `job`: its devices' full names
 * become "/job:J/replica:0/task:T/device:TYPE:N" (names with /job:localhost still find
 * them). Once per runtime; again with the same job and task is a no-op, with another one
 * FAILED_PRECONDITION. Call it before sessions place nodes on rt. */
floe_code floe__runtime_join(struct FloeRuntime *rt, const char *job, int task, FloeStatus *st);
/* Replaces the devices of the other tasks by copies of devs[0..n) (their name, short_name,
 * props, job, task, remote_incarnation and link figures are used; the rest is set here).
 * The previous ones stay valid until rt is freed. */
floe_code floe__runtime_set_remote(struct FloeRuntime *rt, const FloeDevice *devs, int n,
                                   FloeStatus *st);
/* One more than the largest device id there has been (local and remote): the size of
 * arrays indexed by FloeDevice.id. */
int floe__runtime_device_span(const struct FloeRuntime *rt);
/* The remote devices now (borrowed; *n their number). */
FloeDevice **floe__runtime_remote(const struct FloeRuntime *rt, int *n);

/* kernel.c: the best kernel for node on a device type (constraints checked against the
 * node's type attributes; highest priority wins). NULL + st naming the node, op, dtypes and
 * the device types that do have a kernel when none matches. */
const FloeKernelReg *floe__kernel_find(const struct FloeRuntime *rt, const FloeNode *node,
                                       const char *device_type, FloeStatus *st);
/* One kernel instance for node on dev: *state from the kernel's create (then *created is
 * true and floe__kernel_release is due) or its user_data. The error names the node. */
floe_code floe__kernel_instantiate(const FloeKernelReg *k, const FloeNode *node, FloeDevice *dev,
                                   void **state, bool *created, FloeStatus *st);
void floe__kernel_release(const FloeKernelReg *k, void *state);
/* Drops a leading "node 'name' (Op): " for node from msg (host.c's setters add it). */
const char *floe__strip_node_prefix(const char *msg, const FloeNode *n);
/* What a kernel's create sees (the host table's init_* accessors). */
struct FloeKernelInit {
  const FloeNode *node;
  FloeDevice *device;
  FloeStatus *status;
};

/* ------------------------------------------------------------------------------------ */
/* transport.c: the runtime's transport manager (rt->transport_mgr). A loopback comm pair over
 * the transport plugin FLOE_TRANSPORT names (default "local") and a progress thread. Every
 * function is thread-safe. */
typedef struct FloeTransportMgr FloeTransportMgr;
/* One posted request; valid until its done callback has returned (the manager frees it). */
typedef struct FloeXfer FloeXfer;
/* Runs exactly once per posted request, on the progress thread (or on the thread freeing the
 * runtime), never under the manager's lock: code is the transport's (FLOE_CANCELLED when
 * withdrawn), size the bytes it reported. */
typedef void (*FloeXferDoneFn)(void *arg, floe_code code, size_t size);
/* rt's manager, created on first use (borrowed from rt); NULL + st naming FLOE_PLUGIN_PATH /
 * FLOE_PLUGINS when no transport is loaded, or FLOE_TRANSPORT's choice when it is not. */
FloeTransportMgr *floe__transport_mgr(struct FloeRuntime *rt, FloeStatus *st);
/* runtime.c: joins the progress thread, withdraws pending requests (their callbacks run with
 * FLOE_CANCELLED), closes the comms. Before floe__plugins_shutdown. */
void floe__transport_mgr_free(struct FloeRuntime *rt);
const char *floe__transport_name(const FloeTransportMgr *m); /* borrowed */
/* Post len bytes under tag. buf is borrowed until done runs (the transport may read it
 * until then / writes it then). irecv's *out (may be NULL) is the handle for cancel. */
floe_code floe__transport_isend(FloeTransportMgr *m, const void *buf, size_t len, uint64_t tag,
                                FloeXferDoneFn done, void *arg, FloeStatus *st);
floe_code floe__transport_irecv(FloeTransportMgr *m, void *buf, size_t len, uint64_t tag,
                                FloeXferDoneFn done, void *arg, FloeXfer **out, FloeStatus *st);
/* Withdraws a posted receive whose done has not returned: FLOE_OK (done will run with
 * FLOE_CANCELLED), FLOE_UNAVAILABLE (it completed or is completing: done runs as usual), or
 * FLOE_UNIMPLEMENTED (the transport has no cancel slot: the receive stays posted). */
floe_code floe__transport_cancel(FloeTransportMgr *m, FloeXfer *x);

/* Channels to other endpoints (other runtimes, processes, machines). Channel 0 is the
 * loopback pair floe__transport_isend/irecv use. Once a channel is open the progress thread
 * waits in the transport (its fd, or its wait) even with nothing posted, so peers' set-up
 * and unexpected messages move while this side is idle. The distributed layer connects to each peer
 * task's address, accepts each peer's connection, tells them apart and authenticates them
 * with messages of its own on the new channels, then routes tensors through them. */
/* This endpoint's address blob (what a peer passes to floe__transport_connect): copied into
 * addr; FLOE_OUT_OF_RANGE with *len set to the size needed when *len is too small. */
floe_code floe__transport_address(FloeTransportMgr *m, void *addr, size_t *len);
/* A send channel to the endpoint at addr (copied by the transport): its number (>= 1), or -1
 * and st (the transport's refusal, e.g. another libfabric version named). */
int floe__transport_connect(FloeTransportMgr *m, const void *addr, size_t len, FloeStatus *st);
/* The next peer's connection to this endpoint, as a receive channel (>= 1); waits up to
 * timeout_ms, then -1 and FLOE_DEADLINE_EXCEEDED (FLOE_CANCELLED once the runtime is being
 * freed: stop accepting before floe_runtime_free). Meanwhile the progress thread progresses
 * the transport and wakes it after each progress (a nap growing to 50 ms, with a progress of
 * its own, covers a connection that made no fd readable). Peers are accepted in the order
 * their connections arrive. */
int floe__transport_accept(FloeTransportMgr *m, int64_t timeout_ms, FloeStatus *st);
/* As floe__transport_isend / irecv on a channel; FLOE_FAILED_PRECONDITION for a channel not
 * open or closed. */
floe_code floe__transport_isend_on(FloeTransportMgr *m, int chan, const void *buf, size_t len,
                                   uint64_t tag, FloeXferDoneFn done, void *arg, FloeStatus *st);
floe_code floe__transport_irecv_on(FloeTransportMgr *m, int chan, void *buf, size_t len,
                                   uint64_t tag, FloeXferDoneFn done, void *arg, FloeXfer **out,
                                   FloeStatus *st);
/* Closes a channel (a dead or refused peer): its pending requests' callbacks run with
 * FLOE_CANCELLED; later posts on it fail. Channel 0 and unknown channels are left alone. */
void floe__transport_close_channel(FloeTransportMgr *m, int chan, bool is_recv);

/* ------------------------------------------------------------------------------------ */
/* collective.c: the runtime's collectives (rt->coll_mgr). A group is group_size devices
 * that run collective ops under one group_key; each device is a member with a rank (the
 * members' full names sorted by job, task and device). Membership is settled through a
 * store: the cluster's key-value store when a server runs in this process (its
 * FloeCollEnv), else a table in the runtime (every member in this process). A member talks
 * to its group through a backend: the built-in ring (collective_ring.c: over the transport
 * manager's channels, the route of the env) or a plugin's (FloeCollectiveFns). Every
 * function is thread-safe. */
typedef struct FloeCollMgr FloeCollMgr;
typedef struct FloeCollComm FloeCollComm; /* one member's connection through one backend */

/* What a server gives the collectives of its process (core/dist). kv_set: FLOE_OK or
 * FLOE_ALREADY_EXISTS (never overwrites); kv_get waits up to timeout_ms (0: looks once) and
 * gives a malloc'd value (free() it). channel: as FloeRendezvousRoute.channel (0: the device
 * is in this process). host: where backends with their own network listen. */
typedef struct FloeCollEnv {
  floe_code (*kv_set)(void *arg, const char *key, const void *value, size_t len, FloeStatus *st);
  floe_code (*kv_get)(void *arg, const char *key, int64_t timeout_ms, void **value, size_t *len,
                      FloeStatus *st);
  int (*channel)(void *arg, const char *device, bool is_send, FloeStatus *st);
  /* Optional: bytes moved on a channel (> 0), for the data plane's traffic figures. */
  void (*count)(void *arg, int chan, bool is_send, int64_t bytes);
  void *arg;
  char host[256];
  /* Removes key (a missing key is no error): keys of short-lived records go once read. */
  floe_code (*kv_erase)(void *arg, const char *key, FloeStatus *st);
} FloeCollEnv;
/* Installs env (copied; arg must stay valid until the next call), or NULL to go back to the
 * runtime's own table. Either way every group formed so far is aborted first (its pending
 * operations fail with FLOE_ABORTED and `why`) and forgotten. */
floe_code floe__collective_set_env(struct FloeRuntime *rt, const FloeCollEnv *env,
                                   const char *why, FloeStatus *st);

typedef enum FloeCollKind {
  FLOE__COLL_ALL_REDUCE = 0,
  FLOE__COLL_ALL_GATHER = 1,
  FLOE__COLL_REDUCE_SCATTER = 2,
  FLOE__COLL_BCAST_SEND = 3,
  FLOE__COLL_BCAST_RECV = 4
} FloeCollKind;

/* Called once per submitted operation, on any thread: st OK or why it failed (borrowed for
 * the call). */
typedef void (*FloeCollDoneFn)(void *arg, const FloeStatus *st);

/* One collective operation of one member. Strings are borrowed for the submit call; in and
 * out until done runs. count: elements of in (all_reduce, all_gather, broadcast) or of out
 * (reduce_scatter: in holds group_size * count); out holds count elements, group_size *
 * count for all_gather. Broadcast: BCAST_SEND's buffer is in (out may be NULL), BCAST_RECV's
 * out. */
typedef struct FloeCollRequest {
  FloeCollKind kind;
  int64_t group_key;
  int group_size;
  int64_t instance_key;
  const char *device;      /* the member: its device's full name */
  const char *hint;        /* "auto" (or NULL/""), "ring", or a backend's name */
  const char *node;        /* the op's node, for messages */
  const void *in;
  void *out;
  size_t count;
  FloeDType dtype;
  FloeReduceOp op;
  int64_t timeout_ms;      /* forming the group and connecting; <= 0: FLOE__COLL_TIMEOUT_MS */
  FloeCollDoneFn done;
  void *arg;
} FloeCollRequest;
#define FLOE__COLL_TIMEOUT_MS 300000

/* Submits rq; its done runs exactly once when this returns FLOE_OK (never otherwise: st
 * says why). The first operation of a member forms the group and connects the backend on a
 * thread of the manager; later ones start at once. *comm (may be NULL) is a reference to
 * the member's comm the caller releases with floe__coll_comm_release, for
 * floe__coll_comm_abort. */
/* Where the buffers of rq go: *on_device false when the backend rq would use works on host
 * memory (values on another device travel through the host), true when it works on the
 * memory of dev's own type (a "CUDA" backend for a CUDA device: the kernel hands it device
 * buffers). FLOE_INVALID_ARGUMENT naming both when the backend's memory is another device
 * type's; the backend's errors (unknown, dtype) as floe__collective_submit gives them. */
floe_code floe__collective_memory(struct FloeRuntime *rt, const FloeCollRequest *rq,
                                  const struct FloeDevice *dev, bool *on_device, FloeStatus *st);
floe_code floe__collective_submit(struct FloeRuntime *rt, const FloeCollRequest *rq,
                                  FloeCollComm **comm, FloeStatus *st);
/* Fails every pending and later operation of c with FLOE_ABORTED and why (copied); the
 * member must re-form (a new group_key) to run again. Never blocks long. */
void floe__coll_comm_abort(FloeCollComm *c, const char *why);
void floe__coll_comm_release(FloeCollComm *c);
/* runtime.c: stop aborts every group and waits (a while) for their operations, before
 * floe__transport_mgr_free; free, after it (what was still out has been cancelled), frees
 * the rest and finalises the backends, before the plugins shut down. */
void floe__collective_mgr_stop(struct FloeRuntime *rt);
void floe__collective_mgr_free(struct FloeRuntime *rt);
/* The name of op ("sum"); and the op a name gives (false: none). */
const char *floe__reduce_op_name(FloeReduceOp op);
bool floe__reduce_op_parse(const char *name, FloeReduceOp *op);
/* dst[i] = op(dst[i], src[i]) for n elements of dt; false for a dtype it cannot reduce. */
bool floe__reduce_into(void *dst, const void *src, size_t n, FloeDType dt, FloeReduceOp op);
/* dst[i] = op(a[i], b[i]): one pass where a copy then a reduce would take two. dst may be a
 * or b (element by element), no other overlap. */
bool floe__reduce3(void *dst, const void *a, const void *b, size_t n, FloeDType dt,
                   FloeReduceOp op);
/* x[i] /= d for n elements of dt (MEAN's last step). */
void floe__scale_down(void *x, size_t n, FloeDType dt, int d);
#define FLOE__COLL_DTYPES                                                                    \
  (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_F16) |          \
   FLOE_DTYPE_BIT(FLOE_BF16) | FLOE_DTYPE_BIT(FLOE_I8) | FLOE_DTYPE_BIT(FLOE_U8) |           \
   FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64))

/* collective_ring.c: the built-in ring as a backend table (ctx: the FloeCollMgr, given by
 * init's caller through floe__ring_set_mgr). Chunks of FLOE_COLLECTIVE_CHUNK_BYTES (default
 * 1 MiB) pipelined around the ring: reduce-scatter then all-gather, 2(n-1)/n of the data
 * sent by each rank. */
extern const FloeCollectiveFns floe__ring_fns;
/* For the ring's comm_init: rt's transport manager and the channel to a member's device
 * (env's route; 0 in process), waiting up to timeout_ms for a peer not connected yet. */
int floe__coll_channel(FloeCollMgr *m, const char *device, bool is_send, int64_t timeout_ms,
                       FloeStatus *st);
struct FloeTransportMgr *floe__coll_transport(FloeCollMgr *m, FloeStatus *st);
/* Tells the env (when it counts) that bytes went out or came in on chan. */
void floe__coll_count(FloeCollMgr *m, int chan, bool is_send, int64_t bytes);

#endif /* FLOE__LAYER_RUNTIME_H */
