/* SPDX-License-Identifier: Apache-2.0 */
/* exec.h - libfloe's execution layer (core/exec/): kernel contexts, the executor and its
 * frames, resources (variables, queues' and arrays' objects), the core's own kernels,
 * TensorArrays and stacks, and Send/Recv with their rendezvous. */
#ifndef FLOE__LAYER_EXEC_H
#define FLOE__LAYER_EXEC_H

#include "runtime/runtime.h"

/* ------------------------------------------------------------------------------------ */
/* Kernel invocation contexts (the host table's ctx_* accessors; executor.c fills them). */
typedef struct FloeExecStep FloeExecStep;

struct FloeKernelContext {
  const FloeNode *node;
  FloeDevice *device;
  FloeTensor **inputs;      /* borrowed from the step's entries */
  int num_inputs;
  FloeTensor **outputs;     /* owned references, set by allocate/forward/set_output */
  int num_outputs;
  void **temps;             /* scratch allocations freed after compute */
  size_t *temp_sizes;
  int num_temps, cap_temps;
  FloeExecStep *step;
  FloeStatus *status;       /* kernel-set error */
  int64_t step_id;
  int64_t device_ns;        /* ctx_report_device_time; 0 = none reported */
  /* Where this activation runs: the frame (0: root; else floe__frame_id of its path) and the
   * iteration in it. Send/Recv put both in their rendezvous key. */
  uint64_t frame_id;
  int64_t iter;
  /* Per input: the step entry it reads (>= 0; < 0: a feed); NULL where no input may be
   * written over (the frame scheduler, asynchronous kernels, buffer reuse off). */
  const int *input_src;
  bool input_dead;          /* _Send / _ControlSend run on a dead input to pass the flag on */
  bool output_dead;         /* set by _Recv when a dead flag arrived: its outputs are dead */
  int out_entry;            /* the step entry of output 0 (the plain scheduler's) */
};
/* executor.c: for host->ctx_allocate_output, output i of rank/dims as a view into the output
 * of the Concat that alone reads it (concat_in_place), made on the step's first such call;
 * a new reference, or NULL when the output is not placed (or not of the planned size): then
 * it is allocated as usual. */
FloeTensor *floe__exec_placed_output(FloeKernelContext *ctx, int i, int rank,
                                     const int64_t *dims);
/* executor.c: true when ctx's input i may be written over by its kernel (host->
 * ctx_reuse_input): a step entry whose only reader left is this call, held by nothing else
 * (no other reference to the tensor or its buffer: not fed, fetched, sent, a constant's or
 * a variable's value, a view), on the kernel's device. */
bool floe__exec_may_reuse(const FloeKernelContext *ctx, int i);
/* executor.c: host->ctx_allocate_temp (the block is ctx's), and freeing the blocks (after
 * compute, or when an async kernel calls done), which resets ctx->temps. */
floe_code floe__kernel_ctx_allocate_temp(FloeKernelContext *ctx, size_t bytes, void **out);
void floe__kernel_ctx_free_temps(FloeKernelContext *ctx);

/* ------------------------------------------------------------------------------------ */
/* executor.c: runs a fixed set of nodes of one graph, each with a chosen device and kernel. */
typedef struct FloeExecutor FloeExecutor;

typedef struct FloeExecNodeSpec {
  const FloeNode *node;
  FloeDevice *device;
  const FloeKernelReg *kernel;  /* NULL for fed nodes' outputs (never run) */
  /* Stateful ops: the session owns one kernel instance per node, shared by all its
   * executors, so state (a random op's call counter) survives across run signatures.
   * shared: use `state` as the kernel state; the executor never creates or destroys it. */
  bool shared;
  void *state;
} FloeExecNodeSpec;

typedef struct FloeExecPlan {
  struct FloeRuntime *rt;
  const FloeGraph *graph;       /* borrowed; outlives the executor */
  /* Nodes to run (a closed set: every input of a run node is produced by another run node
   * or is a feed). */
  FloeExecNodeSpec *nodes;
  int num_nodes;
  /* Feeds: outputs supplied by the caller at each run, in this order. */
  FloeOutput *feeds;
  int num_feeds;
  /* Fetches: outputs returned at each run, in this order. */
  FloeOutput *fetches;
  int num_fetches;
  bool inline_inexpensive;
  struct FloeResourceMgr *resources; /* the session's variables; borrowed, outlives e */
  /* Non-zero: time each kernel (floe_session_set_profiling); borrowed, outlives e; NULL:
   * never. */
  const atomic_int *profiling;
  /* Where kernel and executor-thread spans go while *profiling has FLOE__PROF_TRACE (the
   * session's; borrowed, outlives e); NULL: never traced. */
  struct FloeTraceSink *trace;
  /* Use the frame scheduler even without control-flow nodes: a partition whose _Recv may
   * deliver a dead value (the whole graph has control flow) needs dead-value handling. */
  bool force_frames;
  /* Kernels may write their outputs over inputs whose last reader they are
   * (ctx_reuse_input); false: never (FLOE_OPT_BUFFER_REUSE=0). */
  bool reuse_buffers;
  /* Ready nodes run in a memory-aware order (mem_order.c); false: as they became ready
   * (FLOE_OPT_MEMORY_SCHEDULING=0). */
  bool memory_order;
  /* Consts on host-memory devices are not run: the executor hands their values to their
   * readers as feeds of its own (executor.c, host_constant); false: they run each step
   * (FLOE_OPT_CONSTANT_FOLDING=0). */
  bool const_feeds;
  /* Concats whose values are contiguous blocks of their output and read by them alone take
   * those values written in place by their producers (executor.c, plan_concats); false:
   * they copy (FLOE_OPT_BUFFER_REUSE=0). */
  bool concat_in_place;
} FloeExecPlan;

/* Builds per-node kernel state (FloeKernelDef.create). Caller owns the executor; the plan is
 * copied. */
FloeExecutor *floe__executor_new(const FloeExecPlan *plan, FloeStatus *st);
void floe__executor_free(FloeExecutor *e);
/* One step: feeds[i] borrowed; on success outputs[i] are new references. Thread-safe:
 * several steps may run concurrently on one executor. */
floe_code floe__executor_run(FloeExecutor *e, FloeTensor *const *feeds, FloeTensor **outputs,
                             FloeStatus *st);
/* How one step may be stopped from outside: a timeout, and a hook that sees the step when
 * it starts (attach(arg, step)) and when it ends (attach(arg, NULL), before it is freed), so
 * that floe__exec_step_cancel can reach it meanwhile. */
typedef struct FloeRunCtl {
  int64_t timeout_ms;  /* > 0: the step fails with FLOE_DEADLINE_EXCEEDED after this long */
  void (*attach)(void *arg, FloeExecStep *step);
  void *arg;
  /* The step's rendezvous (borrowed, outlives the step), where its _Send/_Recv meet; NULL
   * when the step has none. */
  struct FloeRendezvous *rendezvous;
  /* Called once, on the failing thread, when the step fails or is cancelled (code and msg
   * borrowed for the call): a multi-device step aborts its rendezvous and cancels its other
   * partitions from here. */
  void (*on_fail)(void *arg, FloeExecStep *step, floe_code code, const char *msg);
  void *fail_arg;
  /* The session step this step belongs to in trace events (floe__trace_next_step); 0: none. */
  int64_t trace_step;
  /* Appends to buf the nodes still running in every piece of the step (fail_arg), for the
   * message of a step past its deadline; NULL: the step's own (floe__exec_describe_running). */
  void (*describe)(void *fail_arg, char *buf, size_t len);
  /* A run past its deadline whose asynchronous kernels have not all called done returns
   * without them: keep(keep_arg, +1) before it returns, keep(keep_arg, -1) once the step was
   * freed (on another thread, when the last kernel finished), so that what the step borrows
   * (its executor, the session) outlives it. NULL: nothing to keep. */
  void (*keep)(void *keep_arg, int delta);
  void *keep_arg;
} FloeRunCtl;
/* Appends "node 'n' (Op) on dev" for each node of step with a kernel computing, or
 * asynchronous and not yet done (known only for steps with a timeout), to buf. */
void floe__exec_describe_running(FloeExecStep *step, char *buf, size_t len);
/* The step's rendezvous (FloeRunCtl.rendezvous), or NULL. */
struct FloeRendezvous *floe__exec_step_rendezvous(const FloeExecStep *step);
/* Starts a step and returns at once: *out is the running step, to be passed to
 * floe__executor_finish exactly once. feeds are borrowed until then; ctl is copied. */
floe_code floe__executor_start(FloeExecutor *e, FloeTensor *const *feeds, const FloeRunCtl *ctl,
                               FloeExecStep **out, FloeStatus *st);
/* Waits for a started step (helping the pool meanwhile when on one of its workers), fills
 * outputs as floe__executor_run does on success, and frees the step. Past the step's
 * deadline it waits for the synchronous kernels still computing (at most another timeout),
 * then returns FLOE_DEADLINE_EXCEEDED without waiting for asynchronous kernels that have not
 * called done: the step then lives on (its feeds and rendezvous retained, FloeRunCtl.keep
 * told) and is freed when the last of them calls done. */
floe_code floe__executor_finish(FloeExecStep *step, FloeTensor **outputs, FloeStatus *st);
/* The id of one frame execution: a hash of its parent's id, the parent's iteration and the
 * frame's name, the same in every partition of a step. */
uint64_t floe__frame_id(uint64_t parent_id, int64_t parent_iter, const char *name);
/* floe__executor_run with ctl (NULL: as floe__executor_run). */
floe_code floe__executor_run_ctl(FloeExecutor *e, FloeTensor *const *feeds, FloeTensor **outputs,
                                 const FloeRunCtl *ctl, FloeStatus *st);
/* done_ticket.c: dones that matched no call in flight (a kernel calling done after its step
 * ended, or with a made-up argument), counted since the process started. */
int64_t floe__exec_num_late_dones(void);
/* The most asynchronous calls that were in flight or remembered at once (the slots of the
 * tickets' table, which never shrinks). */
int64_t floe__exec_num_ticket_slots(void);
/* A step whose calls fill this many tickets frees those whose call completed (a long loop's
 * calls are remembered for about this many, not one slot per call). */
enum { FLOE__TICKETS_KEPT = 1024 };
/* Fails step (attached, not yet detached) with code and why, and cancels it: blocked
 * kernels are woken and loops stop; the message names the loops that were running. */
void floe__exec_step_cancel(FloeExecStep *step, floe_code code, const char *why);
/* Bits of the profiling word (FloeExecPlan.profiling): per-node counters, and trace
 * events. Zero: the executor pays one branch per node. */
enum { FLOE__PROF_COUNTERS = 1, FLOE__PROF_TRACE = 2 };

/* trace.c: the events of traced steps (floe_session_set_tracing). */
typedef enum FloeTraceKind {
  FLOE__TRACE_KERNEL = 0, /* one kernel invocation */
  FLOE__TRACE_ACTIVE = 1, /* a thread inside the executor (scheduling and kernels) */
  FLOE__TRACE_STEP = 2    /* one session run, on the caller's thread */
} FloeTraceKind;
typedef struct FloeTraceEvent {
  FloeTraceKind kind;
  bool async;         /* a kernel that finished through done: t1 is when done was called */
  bool transfer;      /* _Send, _Recv, _ControlSend */
  int64_t t0, t1;     /* CLOCK_MONOTONIC ns */
  int64_t x0, x1;     /* STEP: the executors' span inside [t0, t1] */
  int64_t tid;        /* the OS thread id of the recording thread */
  int64_t step;       /* the session step (FloeRunCtl.trace_step); 0: outside a session */
  const char *device; /* short name, borrowed from the runtime; NULL for STEP */
  const char *op;     /* KERNEL: op name (borrowed from the op registry) */
  char *name;         /* KERNEL: node name (owned) */
  char *args;         /* KERNEL: JSON members for the inputs' and outputs' types (owned) */
  char *flow_key;     /* transfers: the pair's key, same on both sides (owned) */
  int64_t bytes;      /* KERNEL: output bytes */
  int64_t record_ns;  /* KERNEL: the time recording it took (the breakdown's "tracing") */
} FloeTraceEvent;
typedef struct FloeTraceSink FloeTraceSink;
FloeTraceSink *floe__trace_new(void); /* NULL when out of memory */
void floe__trace_free(FloeTraceSink *t);
void floe__trace_clear(FloeTraceSink *t); /* drops every event */
int64_t floe__trace_next_step(FloeTraceSink *t);
int64_t floe__exec_now_ns(void); /* CLOCK_MONOTONIC in ns: the clock of trace events */
int64_t floe__trace_thread_id(void);
/* Records a finished kernel of ctx (inputs and outputs still set). Thread-safe. */
void floe__trace_kernel(FloeTraceSink *t, int64_t step, const FloeKernelContext *ctx, int64_t t0,
                        int64_t t1, bool async);
/* Records an ACTIVE span (x0, x1 unused) or a STEP (x0..x1 the executors' part). */
void floe__trace_span(FloeTraceSink *t, FloeTraceKind kind, int64_t step, const char *device,
                      int64_t t0, int64_t t1, int64_t x0, int64_t x1);
/* The Chrome trace of every event so far into path (created or truncated). */
floe_code floe__trace_write(FloeTraceSink *t, const char *path, FloeStatus *st);
/* Sums the recorded session steps into *out (see floe_session_step_breakdown). */
floe_code floe__trace_breakdown(FloeTraceSink *t, FloeStepBreakdown *out, FloeStatus *st);
/* Where the sink stands (for floe__trace_split of a run that starts now). */
typedef struct FloeTraceMark {
  uint64_t clears; /* how many times it was cleared */
  size_t n;        /* events held */
} FloeTraceMark;
FloeTraceMark floe__trace_mark(FloeTraceSink *t);
/* Sets *out (its struct_size kept) to the split (floe_session_step_split) of session step
 * `step`, looking at the events recorded since `since` only (a mark taken before the step
 * started), or of every recorded step when step is 0 (since unused). */
floe_code floe__trace_split(FloeTraceSink *t, int64_t step, FloeTraceMark since,
                            FloeStepSplit *out, FloeStatus *st);
/* trace_split.c: adds to *acc the split of one step from its n events (v: borrowed, any
 * order, every one of the same step, its STEP event among them). A step with no STEP event
 * adds nothing. FLOE_NO_MEMORY when scratch space cannot be had (acc untouched). */
floe_code floe__step_split_add(const FloeTraceEvent *const *v, size_t n, FloeStepSplit *acc,
                               FloeStatus *st);

/* Per-node kernel counters gathered while plan->profiling is set. */
typedef struct FloeExecProfile {
  int64_t calls, total_ns, max_ns, output_bytes;
  int64_t device_ns; /* the device's own (measured or simulated) time, summed */
  const char *device; /* the node's device's short name (borrowed from the runtime) */
} FloeExecProfile;
/* Node i's counters into *out; returns the node (borrowed), or NULL when i is out of range. */
const FloeNode *floe__executor_profile_node(const FloeExecutor *e, int i, FloeExecProfile *out);
/* Zeroes every node's counters (steps running meanwhile may add to the new counts). */
void floe__executor_profile_reset(FloeExecutor *e);
/* executor.c, for host.c's ctx_cancelled: true once the step was cancelled (a node failed). */
bool floe__exec_step_cancelled(const FloeExecStep *step);

/* ------------------------------------------------------------------------------------ */
/* resource.c */
typedef struct FloeVar {
  atomic_int refs;          /* the manager holds one while the variable is live */
  char *container, *name;   /* owned */
  FloeDType dtype;
  FloeShape shape;          /* declared (VarHandleOp's shape attribute) */
  pthread_mutex_t mu;       /* guards value, busy, updaters; taken with floe__var_lock */
  pthread_cond_t cv;        /* signalled when busy clears or updaters drops to 0 */
  bool busy;                /* a locking update is computing on value (async kernels end it
                               on another thread, so it is a flag, not mu held) */
  int updaters;             /* non-locking (Hogwild) updaters holding a reference to value */
  FloeTensor *value;        /* one reference; NULL until initialised */
  bool dead;                /* its container was reset: reads fail, the object stays valid */
} FloeVar;

typedef struct FloeResourceMgr FloeResourceMgr;

/* Caller owns. NULL only when out of memory (st set). */
FloeResourceMgr *floe__resources_new(FloeStatus *st);
/* Frees every variable (their values are released). No step may be running. */
void floe__resources_free(FloeResourceMgr *m);
/* The live variable (container, name), created uninitialised with dtype and shape if
 * missing. An existing variable with another dtype or an incompatible shape is
 * FLOE_INVALID_ARGUMENT naming it and both. Borrowed: valid until the manager is freed
 * (reset containers keep their dead objects until then). Thread-safe. */
FloeVar *floe__resources_lookup(FloeResourceMgr *m, const char *container, const char *name,
                                FloeDType dtype, const FloeShape *shape, FloeStatus *st);
/* Marks every variable of container dead and drops it from the lookup table (and releases
 * their values); closes and drops the container's resource objects. Thread-safe. */
floe_code floe__resources_reset(FloeResourceMgr *m, const char *container, FloeStatus *st);
/* The variable a resource handle tensor (dtype FLOE_RESOURCE, scalar) points at. Errors
 * (wrong dtype, dead variable) name `what`. */
FloeVar *floe__resource_from_handle(const FloeTensor *handle, const char *what, FloeStatus *st);
/* A new host scalar FLOE_RESOURCE tensor pointing at v. Caller owns. */
FloeTensor *floe__resource_handle_new(FloeVar *v, FloeStatus *st);
/* A new reference to the value, or FLOE_FAILED_PRECONDITION "variable 'name' is not
 * initialised: run its initializer ('name/init' or floe_variables_initializer) first". */
FloeTensor *floe__var_read(FloeVar *v, FloeStatus *st);
/* Sets the value (takes a new reference to t; no copy). Checks dtype, and the declared
 * shape when validate_shape. */
floe_code floe__var_assign(FloeVar *v, FloeTensor *t, bool validate_shape, FloeStatus *st);
/* With floe__var_lock held: makes v->value exclusive (copies it into a new buffer on the
 * same device when another reference to the tensor or its buffer exists) and returns it
 * (borrowed; valid while the lock is held). FLOE_FAILED_PRECONDITION naming v when
 * uninitialised. */
FloeTensor *floe__var_value_for_update_locked(FloeVar *v, FloeStatus *st);
/* Takes mu and waits until no locking update runs: the value is then the caller's alone
 * until floe__var_unlock. Every access to value goes through this. */
void floe__var_lock(FloeVar *v);
void floe__var_unlock(FloeVar *v);
/* For the executor: the value of v made exclusive and moved to dev's memory space if it
 * lives elsewhere, as a new reference the caller gives back with floe__var_end_update.
 * lock: waits for unlocked updaters to finish, then v stays busy (readers and other
 * updaters wait) until then; else the caller writes in place unlocked (Hogwild), beside
 * other unlocked updaters and readers, and v only counts it as an updater. */
FloeTensor *floe__var_begin_update(FloeVar *v, struct FloeDevice *dev, bool lock,
                                   FloeStatus *st);
void floe__var_end_update(FloeVar *v, FloeTensor *value, bool lock);
/* For the checkpoint module: every live variable of container, sorted by name. *out is a
 * floe__malloc'd array of borrowed pointers (caller frees the array). */
floe_code floe__resources_list(FloeResourceMgr *m, const char *container, FloeVar ***out,
                               int *n, FloeStatus *st);

/* Resource objects other than variables (queues, readers, TensorArrays, stacks): each
 * embeds a FloeResource as its first member. Shared ones are found by (container, name) and
 * live until their container is reset or the session closes; anonymous ones (a step's
 * TensorArrays) are registered by a kernel and removed when their step ends. Handles name
 * an object by serial, so a handle that outlived its object is an error, never a dangling
 * pointer. */
typedef struct FloeResource FloeResource;
typedef struct FloeResourceOps {
  const char *kind;                   /* "FIFOQueue", "TensorArray", ... (for messages) */
  /* Optional: wake and fail everything waiting on r (its session is closing, its container
   * is reset or its step ended). Called with no manager lock held; may run more than once. */
  void (*close)(FloeResource *r);
  void (*destroy)(FloeResource *r);   /* frees r (its last reference went) */
} FloeResourceOps;
struct FloeResource {
  const FloeResourceOps *ops;
  atomic_int refs;
  int64_t serial;                     /* set when added to a manager */
  char *container, *name;             /* owned; NULL for anonymous objects */
};
/* One reference held by the caller. */
void floe__resource_init(FloeResource *r, const FloeResourceOps *ops);
void floe__resource_retain(FloeResource *r);
void floe__resource_release(FloeResource *r); /* NULL is a no-op; the last calls destroy */
/* The object (container, name) of kind ops, made with make(arg, st) (one reference, which
 * the manager takes) when missing. Returns a new reference; an existing object of another
 * kind is FLOE_INVALID_ARGUMENT naming both kinds. Thread-safe. */
FloeResource *floe__resources_find_or_add(FloeResourceMgr *m, const char *container,
                                          const char *name, const FloeResourceOps *ops,
                                          FloeResource *(*make)(void *arg, FloeStatus *st),
                                          void *arg, FloeStatus *st);
/* Registers r without a name (the manager takes a new reference; the caller keeps its own);
 * *serial is what floe__resources_remove takes. */
floe_code floe__resources_add_anonymous(FloeResourceMgr *m, FloeResource *r, int64_t *serial,
                                        FloeStatus *st);
/* Drops object serial from m (closing it); unknown serials are ignored. */
void floe__resources_remove(FloeResourceMgr *m, int64_t serial);
/* Closes every object (session close): blocked operations fail, new objects start closed. */
void floe__resources_close_all(FloeResourceMgr *m);
/* A new host scalar FLOE_RESOURCE tensor naming r. Caller owns. */
FloeTensor *floe__resource_obj_handle(const FloeResource *r, FloeStatus *st);
/* The object a handle names, as a new reference, when it is of kind want; errors name
 * `what` (e.g. "input 0") and say what the handle was instead. */
FloeResource *floe__resources_from_handle(FloeResourceMgr *m, const FloeTensor *handle,
                                          const FloeResourceOps *want, const char *what,
                                          FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* core_kernels.c */
/* Adds the executor's own kernels (device_type "*": any device: Const, the variable ops,
 * control flow, TensorArrays and stacks, Send/Recv) to rt's kernel registry: one of
 * builtin.c's kernel sets. floe__kernel_find prefers a plugin's kernel of the device's type
 * and falls back to "*". */
floe_code floe__exec_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* core_kernels.c: adds one core kernel (device_type "*") for op to rt. flags: FLOE_KERNEL_*
 * and FLOE__KERNEL_RAW_RESOURCES (without it the executor hands the kernel variable values
 * in place of its resource inputs, as it does for plugins' kernels). */
floe_code floe__core_kernel_add(struct FloeRuntime *rt, const char *op, uint32_t flags,
                                floe_code (*compute)(void *state, FloeKernelContext *ctx),
                                FloeStatus *st);
/* executor.c, for core kernels: registers r (anonymous) with the session's manager until
 * ctx's step ends (then it is closed and dropped); the caller keeps its reference. */
floe_code floe__kernel_ctx_add_step_resource(FloeKernelContext *ctx, FloeResource *r,
                                             FloeStatus *st);
/* executor.c, for core kernels that wait (queues): fn(arg) is called once, on the thread
 * that cancels ctx's step (a node failed, a timeout, floe_session_close), without step
 * locks held. Returns a token > 0; -1 when the step is already cancelled (or no memory):
 * the kernel then fails with FLOE_CANCELLED itself; 0 outside a step (never called). */
int64_t floe__kernel_ctx_on_cancel(FloeKernelContext *ctx, void (*fn)(void *arg), void *arg);
/* Removes a callback before the kernel completes: true when it will never run; false when
 * a cancel took it, after it has returned (unless called from inside the callback). */
bool floe__kernel_ctx_cancel_deregister(FloeKernelContext *ctx, int64_t token);
/* executor.c, for core kernels: the resource manager of the session running ctx. */
FloeResourceMgr *floe__kernel_ctx_resources(const FloeKernelContext *ctx);
/* core_kernels.c: adds one asynchronous core kernel (device type "*"); flags as for
 * floe__core_kernel_add. compute_async returns promptly and calls done(done_arg) exactly
 * once, from any thread, after setting the outputs or ctx->status. */
floe_code floe__core_kernel_add_async(struct FloeRuntime *rt, const char *op, uint32_t flags,
                                      void (*compute_async)(void *state, FloeKernelContext *ctx,
                                                            FloeDoneFn done, void *done_arg),
                                      FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* TensorArrays and stacks: step-scoped resource objects for dynamic RNNs and loop
 * gradients (tensor_array.c, stack.c). */
/* tensor_array.c: adds the TensorArray and stack kernels (called by
 * floe__exec_kernels_register). stack.c: the stack kernels (called by the former). */
floe_code floe__tensor_array_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
floe_code floe__stack_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* tensor_array.c, for core kernels that set outputs themselves (stack.c):
 * kctx_fail moves st's error (cleared) into the kernel's status and returns its code;
 * kctx_set_output makes t (the caller's reference, given up) output i;
 * kctx_to_device returns t (the caller's reference, given up) in memory the kernel's device
 * uses, copied when it lives elsewhere (NULL t or failure: NULL, st set);
 * kctx_scalar_i32 reads input i, an i32 scalar (copied to the host when on a device);
 * errors name `what` in the kernel's status. */
floe_code floe__kctx_fail(FloeKernelContext *ctx, FloeStatus *st);
void floe__kctx_set_output(FloeKernelContext *ctx, int i, FloeTensor *t);
FloeTensor *floe__kctx_to_device(FloeKernelContext *ctx, FloeTensor *t, FloeStatus *st);
floe_code floe__kctx_scalar_i32(FloeKernelContext *ctx, int i, const char *what, int64_t *out);
/* stack.c: builders for core code (loop gradients save forward values per iteration and
 * pop them in reverse). Like the public builders they record g's sticky error and return
 * an invalid output / NULL on failure; outputs and nodes are borrowed from g. name NULL:
 * automatic names.
 * stack_new: StackV2 (and a Const "<name>/max_size"): a stack of elem_type holding at most
 *   max_size elements (<= 0: unbounded); the output is its handle.
 * stack_push: StackPushV2; the output is elem itself, available once it is pushed.
 *   swap_memory: an element in a device's own memory waits in host memory.
 * stack_pop: StackPopV2 of the top element, which must have elem_type and fit elem_shape
 *   (floe_shape_unknown(): any shape); elem_shape is the output's static shape.
 * after (push and pop; NULL: none): a node that must run first (a control input), which is
 *   what orders pushes and pops that no data edge orders. Pushes and pops of one stack that
 *   may run concurrently happen in an unspecified order.
 * stack_close: StackCloseV2 (releases the elements; the step's end does it anyway). */
FloeOutput floe__stack_new(FloeGraph *g, const char *name, FloeDType elem_type,
                           int64_t max_size);
FloeOutput floe__stack_push(FloeGraph *g, const char *name, FloeOutput handle, FloeOutput elem,
                            bool swap_memory, FloeNode *after);
FloeOutput floe__stack_pop(FloeGraph *g, const char *name, FloeOutput handle,
                           FloeDType elem_type, FloeShape elem_shape, FloeNode *after);
FloeNode *floe__stack_close(FloeGraph *g, const char *name, FloeOutput handle);
/* resource.c, for session.c: true when t is the handle of a resource object (not of a
 * variable): such handles name their object by serial, so feeding one back into a later
 * run is safe (a stale one is an error when used). */
bool floe__resource_is_obj_handle(const FloeTensor *t);

/* ------------------------------------------------------------------------------------ */
/* rendezvous.c: where a Send meets its Recv; bytes move through a transport plugin.
 *
 * A rendezvous is one step's meeting table, shared by every device partition of the step.
 * A key names one transfer: the producing device and its incarnation (a number drawn when
 * the device's runtime starts, so a restarted peer is told apart), the consuming device,
 * the edge's tensor name, and the frame and iteration it belongs to. Keys hold device
 * *names*, never pointers: nothing above the transport may assume one process.
 *
 * Send never blocks. Recv is asynchronous: done runs exactly once, on the receiving call
 * (when the value is already there) or on whatever thread completes the transfer. A dead
 * tensor (from an untaken branch) travels as a flag; a control edge sends an empty tensor.
 * Abort fails every pending and every later Recv of the step with the abort's code and
 * message; Sends after an abort are dropped. The table is freed when the step ends.
 *
 * Moving the bytes: when the two devices are in one process and both read host memory (two
 * CPU devices) the value is handed over by reference, unless opts.force_transport is set;
 * otherwise the sender copies the value to host memory when its device is not host memory,
 * posts it through the runtime's transport (the "local" plugin, FLOE_TRANSPORT picks
 * another) under a 64-bit tag derived from (step id, key), and the receiver posts a receive
 * under the same tag, then copies into the consuming device. With opts.route, a Send whose
 * destination is on another task posts on that task's send channel and a Recv whose source
 * is on another task on its receive channel (same tags); a channel closed under a pending
 * Recv (its task died or was dropped) fails it with UNAVAILABLE. */
typedef struct FloeRendezvous FloeRendezvous;

typedef struct FloeRendezvousKey {
  /* full device name, e.g. "/job:localhost/replica:0/task:0/device:CPU:0" */
  const char *src_device;
  uint64_t src_incarnation;  /* floe__device_incarnation(src) */
  const char *dst_device;    /* full device name */
  const char *tensor;        /* the edge: "producer:index", or "^producer" for a control edge */
  uint64_t frame_id;         /* 0: the root frame; else floe__frame_id of the frame path */
  int64_t iter;              /* iteration within the frame (0 in the root frame) */
} FloeRendezvousKey;

/* Where the devices of a key live when a step spans processes (core/dist's data plane
 * provides it). channel(arg, device, is_send, st): 0 when device (a full name) is in this
 * process; else the transport manager's channel to use for it: a send channel to the task
 * holding device when is_send (a Send whose destination is there), a receive channel from
 * it otherwise (a Recv whose source is there); -1 with st set (an unknown task, a peer that
 * died: UNAVAILABLE naming it) fails the Send or Recv. Thread-safe; never blocks long. */
typedef struct FloeRendezvousRoute {
  int (*channel)(void *arg, const char *device, bool is_send, FloeStatus *st);
  void *arg;
  /* Optional (NULL: none): a value of `bytes` (its payload as posted or received) went out or
   * came in on channel chan (> 0). Called with no rendezvous lock held. */
  void (*count)(void *arg, int chan, bool is_send, int64_t bytes);
} FloeRendezvousRoute;

typedef struct FloeRendezvousOptions {
  bool force_transport;      /* move host-to-host values through the transport too (tests) */
  bool compress_bf16;        /* f32 values of >= FLOE__RV_BF16_MIN elements travel as bf16
                                (lossy; halves their bytes) */
  const FloeRendezvousRoute *route; /* borrowed, outlives the rendezvous; NULL: every
                                       device is in this process */
} FloeRendezvousOptions;
#define FLOE__RV_BF16_MIN 1024

/* Bytes and transfers a rendezvous moved (floe__rendezvous_stats). */
typedef struct FloeRendezvousStats {
  int64_t sends, recvs;          /* calls that completed */
  int64_t by_reference;          /* of the sends, handed over in process without a copy */
  int64_t wire_bytes;            /* payload bytes posted to the transport (after compression) */
  int64_t tensor_bytes;          /* the same values' bytes before compression */
} FloeRendezvousStats;

/* Called exactly once per Recv. On success t is a new reference the callee owns (an empty
 * tensor for a control edge; NULL when is_dead), in dst's memory; on failure st says why
 * (borrowed for the call) and t is NULL. */
typedef void (*FloeRecvDoneFn)(void *arg, const FloeStatus *st, FloeTensor *t, bool is_dead);

/* A step's table. rt borrowed (outlives r); opts copied (NULL: defaults). NULL on OOM with
 * st set. */
FloeRendezvous *floe__rendezvous_new(struct FloeRuntime *rt, int64_t step_id,
                                     const FloeRendezvousOptions *opts, FloeStatus *st);
/* Frees r once every Recv's done has returned and every transfer it posted has completed
 * or been cancelled; an unmatched Send's value is released. NULL is a no-op. */
void floe__rendezvous_free(FloeRendezvous *r);
/* An extra reference to r's memory (not to its matching): a step that outlives its run
 * (FloeRunCtl.keep) holds one so its late kernels never touch freed memory; release drops it
 * (the last of free and the releases frees r). NULL is a no-op for both. */
void floe__rendezvous_retain(FloeRendezvous *r);
void floe__rendezvous_release(FloeRendezvous *r);
/* Never blocks. t is borrowed (the rendezvous takes its own reference or copy); NULL with
 * is_dead. Two Sends of one key: FLOE_ALREADY_EXISTS naming the key. */
floe_code floe__rendezvous_send(FloeRendezvous *r, const FloeRendezvousKey *key, FloeTensor *t,
                                bool is_dead, FloeStatus *st);
/* Asynchronous: done(arg, ...) runs once, possibly before this returns. dst is the device
 * the value is wanted on (borrowed; NULL: host memory). */
void floe__rendezvous_recv(FloeRendezvous *r, const FloeRendezvousKey *key,
                           struct FloeDevice *dst, FloeRecvDoneFn done, void *arg);
/* Fails every pending and later Recv with code and why (copied). Thread-safe; the first
 * abort wins. */
void floe__rendezvous_abort(FloeRendezvous *r, floe_code code, const char *why);
void floe__rendezvous_stats(const FloeRendezvous *r, FloeRendezvousStats *out);
/* The key in text, "src;incarnation(hex);dst;tensor;frame(hex):iter" (floe__malloc'd;
 * caller frees), as errors name it. */
char *floe__rendezvous_key_string(const FloeRendezvousKey *key);
/* The device's incarnation: drawn from the runtime's seed and the device's id. */
uint64_t floe__device_incarnation(const struct FloeDevice *d);
/* collective_kernels.c: the kernels of the collective ops (ops_collective.def; any device
 * type, asynchronous). */
floe_code floe__collective_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* sendrecv.c: the kernels of _Send, _ControlSend and _Recv (any device type). */
floe_code floe__sendrecv_kernels_register(struct FloeRuntime *rt, FloeStatus *st);

/* rendezvous.c: the wire format of one transfer through a transport. A message under tag
 * T = floe__rendezvous_tag(step, key) (low bit 0) starts with a header of
 * FLOE__RV_HEADER_BYTES; when header and payload fit in FLOE__RV_MESSAGE_MAX bytes the
 * payload follows the header in that one message, else the header travels alone, flagged
 * FLOE__RV_SPLIT, and the payload follows under T | 1 (the receiver always posts a
 * FLOE__RV_MESSAGE_MAX-byte buffer under T, so a small value costs one message: rxm sends up
 * to 16 KiB eagerly). Header fields, little-endian, at byte offsets: 0 magic u32
 * (FLOE__RV_MAGIC), 4 version u16 (FLOE__RV_VERSION), 6 flags u16 (FLOE__RV_*), 8 dtype u32
 * (FloeDType of the value as received), 12 rank u32, 16 dims i64[FLOE_MAX_DIMS] (unused
 * ones 0), 80 payload bytes u64. With FLOE__RV_BF16 an f32 value travels as bf16 (2 bytes an
 * element). */
#define FLOE__RV_HEADER_BYTES 88
#define FLOE__RV_MESSAGE_MAX 16384
#define FLOE__RV_MAGIC 0x31565246u /* "FRV1" */
#define FLOE__RV_VERSION 2
#define FLOE__RV_DEAD 0x1u
#define FLOE__RV_CONTROL 0x2u
#define FLOE__RV_BF16 0x4u
#define FLOE__RV_SPLIT 0x8u
/* The 64-bit tag of a key in a step (low bit 0); pure. */
uint64_t floe__rendezvous_tag(int64_t step_id, const FloeRendezvousKey *key);
/* f32 <-> bf16: round to nearest even, NaN stays NaN (quiet, sign kept), infinities kept. */
uint16_t floe__f32_to_bf16(float f);
float floe__bf16_to_f32(uint16_t h);
/* Pending Recvs of r (waiting for a Send, or with a transfer in flight); for tests that need
 * to know a Recv has been posted before they act. */
int floe__rendezvous_num_pending(FloeRendezvous *r);

#endif /* FLOE__LAYER_EXEC_H */
