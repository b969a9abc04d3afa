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

#endif /* FLOE__LAYER_RUNTIME_H */
