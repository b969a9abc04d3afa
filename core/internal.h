/* internal.h - libfloe's internal structures and the entry function of each module.
 *
 * Modules (one file or two each), in the order of one step:
 *   alloc.c status.c dtype.c   memory with fault injection, status, dtypes and halves
 *   tensor.c npy.c             tensors and buffers, .npy files
 *   attrs.c                    attribute values and lists
 *   opdef.c ops_std.c ops_shape.c   op registry, spec parser, the standard op set, shape fns
 *   graph.c graph_io.c dot.c   graph building (sticky error), files, Graphviz
 *   plugin.c host.c            plugin loader + registrar, the FloeHostApi table
 *   runtime.c device.c kernel.c  runtime, devices and names, kernel registry/selection
 *   threadpool.c               inter-op / intra-op pool
 *   executor.c                 dataflow execution of one prepared graph
 *   session.c                  prune, place, cache executors, run
 */
#ifndef FLOE_INTERNAL_H
#define FLOE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "floe/floe.h"
#include "floe/floe_plugin.h"

#define FLOE__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FLOE__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------------------ */
/* alloc.c: every core allocation goes through these so tests can make the Nth fail. */
void *floe__malloc(size_t n);
void *floe__calloc(size_t count, size_t size);
void *floe__realloc(void *p, size_t n);
void floe__free(void *p);
char *floe__strdup(const char *s);
char *floe__strndup(const char *s, size_t n);
/* malloc'd printf; NULL on failure. */
char *floe__asprintf(const char *fmt, ...) FLOE__PRINTF(1, 2);
char *floe__vasprintf(const char *fmt, va_list ap);
/* A growable byte buffer for file writers (graph files, checkpoints). oom is sticky: after a
 * failed growth every later put is a no-op, so writers check once at the end. The owner
 * frees p with floe__free. */
typedef struct FloeByteBuf {
  uint8_t *p;
  size_t len, cap;
  bool oom;
} FloeByteBuf;
void floe__buf_put(FloeByteBuf *b, const void *src, size_t n);
/* Aligned host memory (alignment a power of two >= 64) for tensor buffers. */
void *floe__aligned_alloc(size_t alignment, size_t n);
void floe__aligned_free(void *p);

/* ------------------------------------------------------------------------------------ */
/* status.c */
struct FloeStatus {
  floe_code code;
  char *msg; /* floe__malloc'd; NULL when OK */
};
floe_code floe__status_vset(FloeStatus *s, floe_code code, const char *fmt, va_list ap);
/* Prefix the message of s with "prefix: " (for adding context such as a node name). */
void floe__status_prefix(FloeStatus *s, const char *fmt, ...) FLOE__PRINTF(2, 3);
/* Copy code and message from src to dst (dst may be NULL). Returns src's code. */
floe_code floe__status_copy(FloeStatus *dst, const FloeStatus *src);
/* Used when a FloeStatus cannot be allocated: a static status with code NO_MEMORY. */
#define FLOE__OOM_MESSAGE "out of memory"

/* ------------------------------------------------------------------------------------ */
/* dtype.c */
/* Parse "f32", "float32", "float", "i64", "int64", "bool", ... (same as floe_dtype_from_name). */
/* Name of a type set mask, e.g. "{f32,f64}", into buf. */
char *floe__dtype_mask_str(uint32_t mask, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* tensor.c */
struct FloeDevice;

/* A block of memory on one device. Freed by the allocator that made it (the device's
 * deallocate slot, or floe__aligned_free for host buffers) when the last reference goes.
 * Small host-memory tensors are one allocation: the tensor that made the buffer, the
 * buffer and the data (embedded), freed with floe__free when the buffer's last reference
 * goes, even if that tensor went first. */
typedef struct FloeBuffer {
  atomic_int refs;
  bool embedded;             /* in one floe__malloc block with its first tensor and data */
  void *data;
  size_t size;
  struct FloeDevice *device; /* NULL: plain host memory made by the core */
} FloeBuffer;

struct FloeTensor {
  atomic_int refs;
  FloeDType dtype;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  int64_t num_elements;
  size_t nbytes;
  FloeBuffer *buf; /* NULL when nbytes == 0 */
  size_t offset;   /* byte offset of this tensor's data in buf */
};

/* Validate dims and compute element count and bytes (overflow-checked). */
floe_code floe__shape_bytes(FloeDType dt, int rank, const int64_t *dims, int64_t *num_elements,
                            size_t *nbytes, FloeStatus *st);
/* A tensor with a new buffer on dev (NULL: host). Contents uninitialised. Caller owns. */
FloeTensor *floe__tensor_alloc(struct FloeDevice *dev, FloeDType dt, int rank,
                               const int64_t *dims, FloeStatus *st);
/* A view sharing src's buffer with another shape of the same byte size. Caller owns. */
FloeTensor *floe__tensor_view(FloeTensor *src, int rank, const int64_t *dims, FloeStatus *st);
/* A view of the contiguous block of src that starts byte_offset bytes into src's data (a
 * multiple of the element size) and holds dims' elements: Split, Slice without copies.
 * FLOE_OUT_OF_RANGE when the block does not fit inside src. Caller owns. */
FloeTensor *floe__tensor_slice_view(FloeTensor *src, int64_t byte_offset, int rank,
                                    const int64_t *dims, FloeStatus *st);
/* Copy to another device (NULL: host). Returns a new reference (src itself, retained, when
 * it already lives there). */
FloeTensor *floe__tensor_to_device(FloeTensor *src, struct FloeDevice *dev, FloeStatus *st);
struct FloeDevice *floe__tensor_device(const FloeTensor *t);
/* True when the data can be read directly by the host. */
bool floe__tensor_on_host(const FloeTensor *t);
/* Deep equality of dtype, shape and bytes (host tensors). */
bool floe__tensor_equal(const FloeTensor *a, const FloeTensor *b);

/* ------------------------------------------------------------------------------------ */
/* attrs.c */
typedef enum FloeAttrKind {
  FLOE_ATTR_NONE = 0,
  FLOE_ATTR_INT = 1,
  FLOE_ATTR_FLOAT = 2,
  FLOE_ATTR_BOOL = 3,
  FLOE_ATTR_STRING = 4,
  FLOE_ATTR_TYPE = 5,
  FLOE_ATTR_SHAPE = 6,
  FLOE_ATTR_TENSOR = 7,
  FLOE_ATTR_INT_LIST = 8,
  FLOE_ATTR_FLOAT_LIST = 9,
  FLOE_ATTR_TYPE_LIST = 10,
  FLOE_ATTR_SHAPE_LIST = 11 /* queues' component shapes */
} FloeAttrKind;

typedef struct FloeAttrValue {
  FloeAttrKind kind;
  union {
    int64_t i;
    double f;
    int b;
    char *s;          /* owned */
    FloeDType type;
    FloeShape shape;
    FloeTensor *tensor; /* one reference owned */
    struct {
      int64_t *v;     /* owned */
      size_t n;
    } ilist;
    struct {
      double *v;
      size_t n;
    } flist;
    struct {
      FloeDType *v;
      size_t n;
    } tlist;
    struct {
      FloeShape *v;   /* owned */
      size_t n;
    } slist;
  } u;
} FloeAttrValue;

/* A node's attributes: a small array (nodes have few attributes), names owned. */
struct FloeAttrs {
  int n, cap;
  char **names;
  FloeAttrValue *values;
};

void floe__attrs_init(FloeAttrs *a);
void floe__attrs_clear(FloeAttrs *a); /* frees everything */
/* Deep copy. */
floe_code floe__attrs_copy(FloeAttrs *dst, const FloeAttrs *src, FloeStatus *st);
/* Find by name; NULL if absent. */
const FloeAttrValue *floe__attrs_get(const FloeAttrs *a, const char *name);
/* Set (replacing); takes ownership of *v's owned members (v is left zeroed). */
floe_code floe__attrs_set(FloeAttrs *a, const char *name, FloeAttrValue *v, FloeStatus *st);
floe_code floe__attr_value_copy(FloeAttrValue *dst, const FloeAttrValue *src, FloeStatus *st);
void floe__attr_value_clear(FloeAttrValue *v);
bool floe__attr_value_equal(const FloeAttrValue *a, const FloeAttrValue *b);
const char *floe__attr_kind_name(FloeAttrKind k); /* "int", "list(int)", ... */
/* Printable value (short; long lists and tensors abbreviated) into buf. */
char *floe__attr_value_str(const FloeAttrValue *v, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* opdef.c: op definitions, parsed from the spec strings of ops_std.def / FloeOpDef. */

/* Core-only op flags (beside FLOE_OP_STATEFUL). */
#define FLOE__OP_SOURCE 0x100u /* no inputs, output known without running (Const, Placeholder) */

typedef struct FloeArgDef {
  char *name;
  FloeDType fixed;      /* a fixed dtype, or FLOE_DTYPE_INVALID */
  char *type_attr;      /* "T" when typed by an attribute, else NULL */
  char *number_attr;    /* "N" for "N*T" lists, else NULL */
  char *type_list_attr; /* "Tlist" for list(type) lists, else NULL */
} FloeArgDef;

typedef struct FloeAttrDef {
  char *name;
  FloeAttrKind kind;
  bool has_default;
  FloeAttrValue def;   /* default value when has_default */
  bool has_min;
  int64_t min;         /* for int ("N: int >= 1") and list lengths */
  uint32_t allowed;    /* dtype mask for type / list(type); 0 = any */
} FloeAttrDef;

typedef struct FloeOpInfo {
  char *name;
  FloeArgDef *inputs;
  int num_inputs;
  FloeArgDef *outputs;
  int num_outputs;
  FloeAttrDef *attrs;
  int num_attrs;
  uint32_t flags;        /* FLOE_OP_STATEFUL | FLOE__OP_* */
  FloeShapeFn shape_fn;  /* NULL: unknown output shapes */
  char *doc;
  char *plugin;          /* name of the plugin that defined it; NULL for the standard set */
} FloeOpInfo;

/* Parse and add an op definition (all strings copied). Errors name the op and the spec
 * string that does not parse. FLOE_ALREADY_EXISTS if the name is taken. */
floe_code floe__op_register(const FloeOpDef *def, const char *plugin, FloeStatus *st);
/* Lookup by name; the result lives until process exit. Thread-safe. NULL if unknown. */
const FloeOpInfo *floe__op_lookup(const char *name);
const FloeAttrDef *floe__op_attr(const FloeOpInfo *op, const char *name);
/* Registers the standard op set once (idempotent, thread-safe); called by every entry
 * point that needs ops. Returns non-OK only on out-of-memory or a broken spec. */
floe_code floe__ops_init(FloeStatus *st);

/* ops_std.c / ops_shape.c: the shape functions named in ops_std.def, declared there. */

/* ------------------------------------------------------------------------------------ */
/* graph.c */


struct FloeNode {
  int id;                 /* index in graph->nodes */
  char *name;
  const FloeOpInfo *op;
  char *device;           /* requested device as typed; NULL/"" = none */
  FloeAttrs attrs;        /* complete: defaults filled in and type attrs inferred */
  int num_inputs;         /* flattened over the op's input arguments */
  FloeOutput *inputs;
  int *input_arg;         /* for each flattened input, the op input argument it belongs to */
  int num_control;
  struct FloeNode **control;
  int num_outputs;        /* flattened */
  FloeDType *out_dtypes;
  FloeShape *out_shapes;  /* inferred (may be partially unknown) */
  struct FloeGraph *graph;
};

struct FloeGraph {
  FloeNode **nodes;
  int num_nodes, cap_nodes;
  /* name -> node index: open addressing, power-of-two capacity */
  int *name_table;
  int name_cap;
  floe_code error;        /* sticky */
  char *error_msg;
  char *device_scope;     /* floe_graph_set_device_scope; NULL: none */
};

/* Removes the nodes no root reaches (by data or control edges), renumbering the rest in
 * order. Pointers to removed nodes dangle afterwards. */
void floe__graph_keep_reachable(FloeGraph *g, FloeNode *const *roots, int num_roots);
/* Deep copy of a graph (nodes renumbered identically). Caller owns. */
FloeGraph *floe__graph_clone(const FloeGraph *g, FloeStatus *st);
/* Set the sticky error (first one wins) from a status or a message. */
void floe__graph_fail(FloeGraph *g, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);
/* Parse "node" or "node:3" into a node and output index; errors name the string. */
floe_code floe__graph_resolve_output(const FloeGraph *g, const char *name, FloeOutput *out,
                                     FloeStatus *st);
/* Add a fully described node (used by graph_io when loading and by graph building).
 * Validates against the op (arity, dtypes, attrs), fills defaults, infers type attrs and
 * shapes. On error returns NULL with st set (the graph's sticky error is not touched). */
typedef struct FloeNodeSpec {
  const char *op;
  const char *name;
  const char *device;
  const FloeOutput *inputs;
  int num_inputs;
  const int *list_sizes;  /* inputs per op input argument, or NULL: one each */
  int num_lists;
  FloeNode *const *control;
  int num_control;
  const FloeAttrs *attrs; /* copied */
} FloeNodeSpec;
FloeNode *floe__graph_add_node(FloeGraph *g, const FloeNodeSpec *spec, FloeStatus *st);

/* Edits for the control-flow builders: a loop's Merge gets its back edge once the body
 * exists. add_control: dep (same graph) becomes a control input of n (once). set_input:
 * input j of n becomes v, of the same dtype; shapes are not re-inferred. */
floe_code floe__node_add_control(FloeNode *n, FloeNode *dep, FloeStatus *st);
floe_code floe__node_set_input(FloeNode *n, int j, FloeOutput v, FloeStatus *st);

/* attrs.c: a node's attribute `name` when it has one of `kind` (else NULL / the default;
 * strings: "" when absent). Borrowed from the node. */
const FloeAttrValue *floe__node_attr(const FloeNode *n, const char *name, FloeAttrKind kind);
int64_t floe__node_attr_int(const FloeNode *n, const char *name, int64_t dflt);
bool floe__node_attr_bool(const FloeNode *n, const char *name, bool dflt);
const char *floe__node_attr_str(const FloeNode *n, const char *name);

/* Node ids of g, each after its inputs (data and control; a loop's back edge, a Merge's
 * input from a NextIteration, does not count); nodes on a cycle without such an edge come
 * last, by id. need (NULL: every node) restricts it; *count gets the number listed.
 * floe__malloc'd (caller frees); NULL when out of memory. */
int *floe__graph_topo_order(const FloeGraph *g, const bool *need, int *count);

/* Shape inference of one node (called by add_node; exposed for re-inference). */
floe_code floe__infer_shapes(FloeNode *n, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* Shape contexts (host.c provides the accessors; graph.c fills the struct). */
struct FloeShapeContext {
  const FloeNode *node;       /* inputs, attrs */
  FloeShape *input_shapes;    /* num_inputs */
  FloeShape *output_shapes;   /* num_outputs, written by the shape fn */
  FloeStatus *status;         /* set by shape_set_error */
};

/* ------------------------------------------------------------------------------------ */
/* devices, kernels, plugins, runtime */

typedef struct FloePlugin FloePlugin;
typedef struct FloeThreadPool FloeThreadPool;

typedef struct FloeDevice {
  struct FloeRuntime *rt;
  FloePlugin *plugin;
  FloeDeviceFns fns;        /* copied, zero-extended to the core's struct size */
  FloeDeviceProps props;
  char name[160];           /* "/job:localhost/replica:0/task:0/device:CPU:0" */
  char short_name[48];      /* "cpu:0" */
  int index;                /* ordinal among devices of its type */
  bool host_memory;         /* props.flags & FLOE_DEVICE_HOST_MEMORY */
  int id;                   /* index in rt->devices */
} FloeDevice;

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

struct FloeRuntime {
  FloePlugin **plugins;
  int num_plugins;
  FloeDevice **devices;
  int num_devices;
  FloeKernelReg **kernels;
  int num_kernels;
  FloeTransportReg **transports;
  int num_transports;
  FloeThreadPool *pool;
  int num_threads;
  uint64_t seed;            /* drawn at creation: incarnation and default random seeds */
  /* transport.c: created on first use, freed by floe_runtime_free before plugins shut down */
  _Atomic(struct FloeTransportMgr *) transport_mgr;
  bool is_default;          /* floe_runtime_default's: floe_runtime_free leaves it alone */
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

/* host.c: the one host table (process lifetime). */
const FloeHostApi *floe__host_api(void);

/* device.c */
FloeDevice *floe__device_find(const struct FloeRuntime *rt, const char *name, FloeStatus *st);
/* Allocate on a device (NULL: host). */
floe_code floe__device_alloc(FloeDevice *dev, size_t bytes, void **ptr, FloeStatus *st);
void floe__device_free(FloeDevice *dev, void *ptr, size_t bytes);
/* Copy between any two places (NULL device = host memory). */
floe_code floe__device_copy(FloeDevice *dst_dev, void *dst, FloeDevice *src_dev, const void *src,
                            size_t n, FloeStatus *st);

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

/* ------------------------------------------------------------------------------------ */
/* threadpool.c */
FloeThreadPool *floe__pool_new(int num_threads, FloeStatus *st);
void floe__pool_free(FloeThreadPool *p);  /* joins workers after draining queued tasks */
floe_code floe__pool_schedule(FloeThreadPool *p, FloeTaskFn fn, void *arg);
void floe__pool_parallel_for(FloeThreadPool *p, int64_t n, int64_t cost_per_unit,
                             FloeParallelFn fn, void *arg);
int floe__pool_size(const FloeThreadPool *p);

/* ------------------------------------------------------------------------------------ */
/* Kernel invocation contexts (host.c accessors; executor.c fills them). */
struct FloeKernelInit {
  const FloeNode *node;
  FloeDevice *device;
  FloeStatus *status;
};

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
  bool input_dead;          /* _Send / _ControlSend run on a dead input to pass the flag on */
  bool output_dead;         /* set by _Recv when a dead flag arrived: its outputs are dead */
};

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
  /* Use the frame scheduler even without control-flow nodes: a partition whose _Recv may
   * deliver a dead value (the whole graph has control flow) needs dead-value handling. */
  bool force_frames;
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
} FloeRunCtl;
/* The step's rendezvous (FloeRunCtl.rendezvous), or NULL. */
struct FloeRendezvous *floe__exec_step_rendezvous(const FloeExecStep *step);
/* Starts a step and returns at once: *out is the running step, to be passed to
 * floe__executor_finish exactly once. feeds are borrowed until then; ctl is copied. */
floe_code floe__executor_start(FloeExecutor *e, FloeTensor *const *feeds, const FloeRunCtl *ctl,
                               FloeExecStep **out, FloeStatus *st);
/* Waits for a started step (helping the pool meanwhile when on one of its workers), fills
 * outputs as floe__executor_run does on success, and frees the step. */
floe_code floe__executor_finish(FloeExecStep *step, FloeTensor **outputs, FloeStatus *st);
/* The id of one frame execution: a hash of its parent's id, the parent's iteration and the
 * frame's name, the same in every partition of a step. */
uint64_t floe__frame_id(uint64_t parent_id, int64_t parent_iter, const char *name);
/* floe__executor_run with ctl (NULL: as floe__executor_run). */
floe_code floe__executor_run_ctl(FloeExecutor *e, FloeTensor *const *feeds, FloeTensor **outputs,
                                 const FloeRunCtl *ctl, FloeStatus *st);
/* Fails step (attached, not yet detached) with code and why, and cancels it: blocked
 * kernels are woken and loops stop; the message names the loops that were running. */
void floe__exec_step_cancel(FloeExecStep *step, floe_code code, const char *why);
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

/* ------------------------------------------------------------------------------------ */
/* Executor engineer's additions (threadpool.c, executor.c), called from other modules. */
/* threadpool.c, for executor.c: true on a worker thread of p. */
bool floe__pool_in_worker(const FloeThreadPool *p);
/* threadpool.c: the pool host->parallel_for / schedule use on this thread: a worker's own
 * pool, or the one the executor names while the calling thread runs a step (NULL: none;
 * then the default runtime's pool). Borrowed. */
void floe__pool_set_current(FloeThreadPool *p);
FloeThreadPool *floe__pool_current(void);
/* threadpool.c, for executor.c: runs one queued task on the calling thread, if any. */
bool floe__pool_help(FloeThreadPool *p);
/* threadpool.c, for executor.c: queues fn(args[i]) for i < n under one lock (all or none). */
floe_code floe__pool_schedule_batch(FloeThreadPool *p, FloeTaskFn fn, void *const *args, int n);
/* The same on the pool's deferred queue: its tasks start only when no normal task is
 * queued (work that nothing else waits for). */
floe_code floe__pool_schedule_deferred(FloeThreadPool *p, FloeTaskFn fn, void *const *args,
                                       int n);
/* executor.c, for host.c's ctx_cancelled: true once the step was cancelled (a node failed). */
bool floe__exec_step_cancelled(const FloeExecStep *step);
/* End of the executor engineer's additions. */

/* ------------------------------------------------------------------------------------ */
/* Runtime engineer's additions (host.c, runtime.c), called from other modules. */
/* executor.c: host->ctx_allocate_temp (the block is ctx's), and freeing the blocks (after
 * compute, or when an async kernel calls done), which resets ctx->temps. */
floe_code floe__kernel_ctx_allocate_temp(FloeKernelContext *ctx, size_t bytes, void **out);
void floe__kernel_ctx_free_temps(FloeKernelContext *ctx);
/* builtin.c, for host.c: the default runtime's pool if it was created, else NULL. */
FloeThreadPool *floe__runtime_default_pool(void);
/* End of the runtime engineer's additions. */

/* ------------------------------------------------------------------------------------ */
/* Heterogeneous devices (issue 5).
 *   rendezvous.c   where a Send meets its Recv; bytes move through a transport plugin
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
 * under the same tag, then copies into the consuming device. */
typedef struct FloeRendezvous FloeRendezvous;

typedef struct FloeRendezvousKey {
  const char *src_device;    /* full device name, e.g. "/job:localhost/replica:0/task:0/device:CPU:0" */
  uint64_t src_incarnation;  /* floe__device_incarnation(src) */
  const char *dst_device;    /* full device name */
  const char *tensor;        /* the edge: "producer:index", or "^producer" for a control edge */
  uint64_t frame_id;         /* 0: the root frame; else floe__frame_id of the frame path */
  int64_t iter;              /* iteration within the frame (0 in the root frame) */
} FloeRendezvousKey;

typedef struct FloeRendezvousOptions {
  bool force_transport;      /* move host-to-host values through the transport too (tests) */
  bool compress_bf16;        /* f32 values of >= FLOE__RV_BF16_MIN elements travel as bf16
                                (lossy; halves their bytes) */
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
/* sendrecv.c: the kernels of _Send, _ControlSend and _Recv (any device type). */
floe_code floe__sendrecv_kernels_register(struct FloeRuntime *rt, FloeStatus *st);

/* partition.c: one piece per device, joined by _Send/_Recv (see the file's comment). */
typedef struct FloePartitionFed {
  bool (*is_fed)(void *arg, int node, int index); /* the run feeds node:index */
  void *arg;
} FloePartitionFed;
typedef struct FloePartition {
  FloeGraph *graph;        /* owned: the input graph's nodes (same ids), then the cutter's */
  struct FloeDevice **device; /* per node of graph (owned array; devices borrowed) */
  bool *need;              /* per node of graph: runs in the step (owned) */
  int num_sends;           /* _Send and _ControlSend nodes added */
  bool has_cf;             /* the run has control flow: every piece needs the frame scheduler */
} FloePartition;
/* g borrowed; need and device are per node of g (device[i] read only where need[i]); fed
 * may be NULL. On success *out is filled (floe__partition_free releases it); on error st
 * names the edge or loop that cannot be cut. */
floe_code floe__partition(const FloeGraph *g, const bool *need, struct FloeDevice *const *device,
                          const FloePartitionFed *fed, FloePartition *out, FloeStatus *st);
void floe__partition_free(FloePartition *p);

/* placer.c: a device per node (see the file's comment). */
typedef struct FloePlaceOptions {
  struct FloeDevice *default_device;  /* the session's `device`; NULL: none */
  struct FloeDevice **devices;        /* the cost model places among these (borrowed) */
  int num_devices;                    /* 0: the simple rule among every device */
  bool allow_soft_placement;
} FloePlaceOptions;
typedef struct FloePlacement {
  struct FloeDevice **device;  /* per node (owned array; devices borrowed); NULL: not needed */
  double *start, *finish;      /* per node: the simulated schedule, seconds (owned) */
  double est_seconds;          /* the simulated step time */
  int num_nodes;               /* of the placed graph: the length of the arrays above */
} FloePlacement;
/* g, need and fed borrowed. On error st names the node, the device it asked for and the
 * devices that have a kernel for it. */
floe_code floe__place(struct FloeRuntime *rt, const FloeGraph *g, const bool *need,
                      const FloePartitionFed *fed, const FloePlaceOptions *o, FloePlacement *out,
                      FloeStatus *st);
void floe__placement_free(FloePlacement *p);
/* Fills p->start, finish and est_seconds for p->device as it stands; node i takes secs[i]
 * seconds where secs is given and secs[i] >= 0, else the cost model's time. */
void floe__placement_estimate(struct FloeRuntime *rt, const FloeGraph *g, const bool *need,
                              const double *secs, FloePlacement *p);
/* The cost model: seconds node n takes on d; seconds to move bytes from src to dst. */
double floe__cost_node(const FloeNode *n, const struct FloeDevice *d);
double floe__cost_transfer(double bytes, const struct FloeDevice *src, const struct FloeDevice *dst);

/* multi_exec.c: one step over device pieces (see the file's comment). */
typedef struct FloeMultiExec FloeMultiExec;
typedef struct FloeMultiPlan {
  struct FloeRuntime *rt;
  const FloeGraph *graph;       /* the partitioned graph; borrowed, outlives the result */
  FloeExecNodeSpec *nodes;      /* every node of the step, each with its device and kernel */
  int num_nodes;
  FloeOutput *feeds;
  int num_feeds;
  FloeOutput *fetches;
  int num_fetches;
  bool inline_inexpensive;
  bool force_frames;            /* FloePartition.has_cf */
  struct FloeResourceMgr *resources;
  const atomic_int *profiling;
  FloeRendezvousOptions rv_opts;
} FloeMultiPlan;
typedef struct FloeMultiRunCtl {
  int64_t timeout_ms;
  /* Told of each piece's step when it starts (started true) and before it is freed
   * (started false), so that a cancel can reach it meanwhile. */
  void (*track)(void *arg, FloeExecStep *step, bool started);
  void *arg;
  const FloeRendezvousOptions *rv_opts; /* NULL: the plan's */
  FloeRendezvousStats *stats;           /* filled after the step when not NULL */
} FloeMultiRunCtl;
/* Plan copied, its arrays borrowed for the call. Caller owns the result. */
FloeMultiExec *floe__multi_exec_new(const FloeMultiPlan *plan, FloeStatus *st);
void floe__multi_exec_free(FloeMultiExec *m);
/* As floe__executor_run_ctl: feeds in plan order (borrowed); on success outputs[i] are new
 * references in plan order. Thread-safe. */
floe_code floe__multi_exec_run(FloeMultiExec *m, FloeTensor *const *feeds, FloeTensor **outputs,
                               const FloeMultiRunCtl *ctl, FloeStatus *st);
int floe__multi_exec_num_pieces(const FloeMultiExec *m);
FloeExecutor *floe__multi_exec_piece(const FloeMultiExec *m, int i); /* borrowed */

/* ------------------------------------------------------------------------------------ */
/* Training (issue 3).
 *   resource.c       resource manager: variables by (container, name), copy-on-write values
 *   core_kernels.c   kernels the core provides for every device type (variables, Save/Restore)
 *   gradients.c      floe_gradients and the gradient registry (core + plugin declarative)
 *   grad_math.c grad_nn.c grad_array.c  gradient functions of the standard op set
 *   variables.c      floe_variable & co, initialisers
 *   optimizer.c      floe_minimize, schedules, clipping, weight decay
 *   checkpoint.c     safetensors save/restore, export of frozen graphs
 *   layers.c idx.c   layer builders, IDX reader and batcher */

/* resource.c ----------------------------------------------------------------------- */
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

/* core_kernels.c ------------------------------------------------------------------- */
/* Kernel flag (core only): the kernel gets its resource inputs as handles, not values. */
#define FLOE__KERNEL_RAW_RESOURCES 0x80000000u
/* Kernel flag (core only): the kernel serves only devices whose memory is host memory (a
 * reader's or a queue's state and tensors live there, as with TensorFlow's CPU-only queue
 * and reader kernels), so the placer puts the node and its colocation group on such a
 * device and Send/Recv carry what it produces to other devices. */
#define FLOE__KERNEL_HOST_ONLY 0x40000000u
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
/* checkpoint.c: registers the Save and Restore kernels (called by
 * floe__core_kernels_register). */
floe_code floe__checkpoint_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
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

/* session.c, for checkpoint.c and the export: the session's graph copy and resources
 * (borrowed, live as long as the session). */
const FloeGraph *floe__session_graph(const FloeSession *s);
FloeResourceMgr *floe__session_resources(FloeSession *s);
struct FloeRuntime *floe__session_runtime(const FloeSession *s);

/* gradients.c ---------------------------------------------------------------------- */
/* What a gradient function works with: the forward node, the gradients arriving at its
 * outputs, and the input gradients it produces. */
typedef struct FloeGradCtx {
  FloeGraph *g;
  const FloeNode *node;   /* forward node */
  const FloeOutput *dy;   /* [node->num_outputs]; .node NULL: no gradient reaches output j */
  FloeOutput *dx;         /* [node->num_inputs], preset invalid; set those with a gradient */
  const char *scope;      /* "gradients/<node name>" */
  const bool *need_dx;    /* [node->num_inputs]: dx[i] is wanted (a float input on a path
                             from the xs); functions may skip building the others */
} FloeGradCtx;
/* Builds the nodes of the input gradients. On error sets st (naming the node) or leaves the
 * graph's sticky error, and returns non-OK. */
typedef floe_code (*FloeGradFn)(FloeGradCtx *c, FloeStatus *st);

/* Registers fn for op (NULL fn: op is not differentiable: no gradient flows through it, and
 * reaching it is not an error). FLOE_ALREADY_EXISTS when op has one. Thread-safe. */
floe_code floe__grad_register(const char *op, FloeGradFn fn, FloeStatus *st);
/* A plugin's declarative gradient (validated against the op registry). */
floe_code floe__grad_register_def(const FloeGradientDef *def, const char *plugin,
                                  FloeStatus *st);
/* grad_registry.c: the standard "not differentiable" entries (idempotent). */
floe_code floe__grad_registry_init(FloeStatus *st);
/* grad_registry.c: whether op has an entry, and its function and plugin definition (either
 * may be NULL; both NULL: not differentiable). Thread-safe; *def lives as long as the
 * process. fn, def may be NULL. */
bool floe__grad_lookup(const char *op, FloeGradFn *fn, const FloeGradientDef **def);
/* grad_registry.c: a FloeGradientDef's grad_inputs entry "dy:J", "x:I" or "y:J" -> kind
 * ('d', 'x', 'y') and index; false when malformed. */
bool floe__grad_input_parse(const char *s, char *kind, long *idx);
/* gradients.c: fills the registry with the standard set (the not-differentiable entries and
 * the functions of grad_*.c) once (idempotent, thread-safe). */
floe_code floe__grads_init(FloeStatus *st);
/* grad_math.c, grad_nn.c, grad_array.c: called by floe__grads_init. */
floe_code floe__grads_register_math(FloeStatus *st);
floe_code floe__grads_register_nn(FloeStatus *st);
floe_code floe__grads_register_array(FloeStatus *st);
/* grad_math2.c: the ONNX math family's ops (ops_math2.def). */
floe_code floe__grads_register_math2(FloeStatus *st);
floe_code floe__grads_register_index(FloeStatus *st); /* grad_index.c (issue 6) */

/* Helpers for gradient functions (gradients.c). All record the graph's sticky error on
 * failure and return an invalid output, like the public builders. */
/* dy[j], or ZerosLike(output j) when no gradient reaches it. */
FloeOutput floe__grad_dy(FloeGradCtx *c, int j);
/* floe_node_begin with the unique name "<scope>/<op>" (then "<scope>/<op>_1", ...). */
FloeNodeBuilder *floe__grad_begin(FloeGradCtx *c, const char *op);
/* One-output ops under the scope. */
FloeOutput floe__grad_unary(FloeGradCtx *c, const char *op, FloeOutput x);
FloeOutput floe__grad_binary(FloeGradCtx *c, const char *op, FloeOutput a, FloeOutput b);
/* A scalar or 1-D constant of the node's dtype / i32 under the scope. */
FloeOutput floe__grad_scalar(FloeGradCtx *c, FloeDType dt, double v);
FloeOutput floe__grad_i32_vec(FloeGradCtx *c, const int64_t *v, int n);
/* The shape of x as an i32 vector: a Const when statically known, else a Shape node. */
FloeOutput floe__grad_shape_of(FloeGradCtx *c, FloeOutput x);
/* Sums g down to the shape of x (a broadcasting operand) with SumToShape; returns g when
 * both shapes are statically known and equal. */
FloeOutput floe__grad_sum_to(FloeGradCtx *c, FloeOutput g, FloeOutput x);
/* The forward node's dtype / shape of an input or output. */
FloeDType floe__grad_input_dtype(const FloeGradCtx *c, int i);
/* The value of forward input i when its producer is a host Const, else NULL (borrowed
 * from the graph). */
const FloeTensor *floe__grad_const_input(const FloeGradCtx *c, int i);
/* Copies the forward node's attribute `name` (when it has one) onto b. */
void floe__grad_copy_attr(const FloeGradCtx *c, FloeNodeBuilder *b, const char *name);
/* Sets attribute `name` of node `from` on b (nothing when from lacks it). */
void floe__node_copy_attr(const FloeNode *from, FloeNodeBuilder *b, const char *name);

/* grad_control.c: gradients of conds and while loops ------------------------------- */
floe_code floe__grads_register_control(FloeStatus *st);
/* One loop variable of a loop built by floe_while_loop. */
typedef struct FloeGradLoopVar {
  FloeNode *enter, *merge, *sw, *exit, *body; /* body: the Identity of the Switch's true port */
} FloeGradLoopVar;
/* A top-level while loop of a graph (borrowed nodes; arrays owned). */
typedef struct FloeGradLoop {
  const char *name;       /* its frame (borrowed from an Enter's attribute) */
  FloeGradLoopVar *vars;
  int num_vars;
  FloeNode **inv;         /* its constant Enters (loop invariants) */
  int num_inv;
  int last_exit_id;       /* the largest id among its Exits */
  bool nested;            /* a loop runs inside its body */
} FloeGradLoop;
/* Finds the top-level loops among nodes [0, n): loop_of[id] = the loop a node is in (nested
 * loops count as their outer loop's) or -1. *out (caller frees with floe__grad_loops_free). */
floe_code floe__grad_find_loops(const FloeGraph *g, int n, int *loop_of, FloeGradLoop **out,
                                int *num, FloeStatus *st);
void floe__grad_loops_free(FloeGradLoop *loops, int n);
/* Builds the backward loop of L (index li in loop_of, which covers ids below num_walked):
 * dexit[i] the gradient reaching loop variable i's Exit (node NULL: none); need_inv[k]:
 * the gradient of invariant k's outside value is wanted. Sets dinit[i] (the gradient of
 * variable i's initial value) and dinv[k] (node NULL where none). */
floe_code floe__grad_while(FloeGraph *g, const FloeGradLoop *L, int li, const int *loop_of,
                           int num_walked, const FloeOutput *dexit, const bool *need_inv,
                           FloeOutput *dinit, FloeOutput *dinv, FloeStatus *st);
/* gradients.c, for grad_control.c: floe_gradients of one loop iteration (back edges are not
 * followed and loops are not treated as units). */
floe_code floe__gradients_body(FloeGraph *g, const FloeOutput *ys, int num_ys,
                               const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                               FloeOutput *dxs, FloeStatus *st);
/* control_flow.c: nodes the next floe_while_loop / floe_cond scan must leave alone (the
 * caller made them for another frame while building a body; thread-local), and the reset. */
floe_code floe__cf_exclude(const FloeNode *n);
void floe__cf_exclude_clear(void);
/* How many nodes are excluded; dropping those excluded after the first n (a construct
 * built inside another one gives its nodes back to the outer one). */
int floe__cf_exclude_count(void);
void floe__cf_exclude_truncate(int n);

/* ---- graph rewrites (fuse.c) ---- */

/* Whether `fused` may replace the chain whose main node is `anchor`: true when it would run
 * on the device the anchor would (placement and kernel availability). */
typedef bool (*FloeFuseCheck)(void *arg, const FloeNode *anchor, const FloeNode *fused);
/* Fuses chains of the step's nodes in g, a session-private graph, in place (see fuse.c).
 * *need (g->num_nodes entries, the step's nodes) is reallocated to cover the nodes added
 * and updated (fused chains out, fused nodes in); pinned[id] (original ids): fed or fetched
 * nodes, never fused. *num_fused: chains replaced. On error g may hold unused nodes. */
floe_code floe__fuse_graph(FloeGraph *g, bool **need, const bool *pinned, FloeFuseCheck ok,
                           void *arg, int *num_fused, FloeStatus *st);
/* False when no chain floe__fuse_graph knows can end among the step's nodes of g (need):
 * then there is no need to clone the graph for it. */
bool floe__fuse_may_apply(const FloeGraph *g, const bool *need);

/* ------------------------------------------------------------------------------------ */
/* TensorArrays and stacks (issue 4): step-scoped resource objects for dynamic RNNs and
 * loop gradients. ops_rnn.def, tensor_array.c (object, kernels), tensor_array_build.c
 * (floe_tensor_array.h builders), stack.c (object, kernels, builders below),
 * grad_tensor_array.c (gradients), shape functions in ops_shape.c. */

/* ops_shape.c: the shape functions named in ops_rnn.def. */
floe_code floe__shape_tensor_array(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_write(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_read(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_gather(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_scatter(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_stack(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_concat(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_split(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_unstack(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_ta_grad(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_stack_push(const FloeHostApi *host, FloeShapeContext *sctx);
floe_code floe__shape_stack_pop(const FloeHostApi *host, FloeShapeContext *sctx);

/* tensor_array.c: adds the TensorArray and stack kernels (called by
 * floe__core_kernels_register). stack.c: the stack kernels (called by the former). */
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
/* tensor_array_build.c: what the graph says about the TensorArray behind handle, read from
 * the TensorArrayV3 node that made it (followed through TensorArrayGradV3 and pass-through
 * ops: Identity, Enter, Exit, Switch, Merge, NextIteration). Returns that node (borrowed
 * from its graph), or NULL when it cannot be told; *dtype (FLOE_DTYPE_INVALID), *elem (the
 * declared element shape, unknown) and *size (a Const size of an array that cannot grow,
 * else -1) say what is known. Pure; thread-safe on a graph nobody modifies. */
const FloeNode *floe__ta_static_info(FloeOutput handle, FloeDType *dtype, FloeShape *elem,
                                     int64_t *size);
/* grad_tensor_array.c: called by floe__grads_init. */
floe_code floe__grads_register_tensor_array(FloeStatus *st);
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
/* End of TensorArrays and stacks. */
/* ---- recurrent cells (grad_rnn.c) ---- */

/* Registers the gradients of LSTMCell and LSTMCellRecurrent (a backprop node and, for the
 * weight, a MatMul) and of the backprop ops and LSTMCellGrad (an error: no second
 * derivative). Called by floe__grads_init. */
floe_code floe__grads_register_rnn(FloeStatus *st);
/* grad_resize.c: the ops of ops_resize.def. */
floe_code floe__grads_register_resize(FloeStatus *st);
/* grad_conv.c: the N-d convolution and pooling ops (ops_conv.def, ops_convgrad.def). */
floe_code floe__grads_register_conv(FloeStatus *st);
/* rnn.c: whether the default runtime (floe_runtime_default) has a kernel for op, the
 * "used when present" test of the fused cells. */
bool floe__lstm_kernel_present(const char *op);
/* Text corpora (issue 4): text.c (fortune files, tokenizer, vocabulary, split, unigram
 * baseline, .npy export) and text_batch.c (windows, padded sequences). Both speak only
 * floe_text.h's API to each other; nothing internal is shared. */
/* ---- Input pipelines (issue 4): queue.c, reader.c, data_builders.c, queue_runner.c ---- */
/* core_kernels.c: adds one asynchronous core kernel (device type "*"); flags as for
 * floe__core_kernel_add. compute_async returns promptly and calls done(done_arg) exactly
 * once, from any thread, after setting the outputs or ctx->status. */
floe_code floe__core_kernel_add_async(struct FloeRuntime *rt, const char *op, uint32_t flags,
                                      void (*compute_async)(void *state, FloeKernelContext *ctx,
                                                            FloeDoneFn done, void *done_arg),
                                      FloeStatus *st);
/* queue.c, reader.c: register the queue and reader kernels (floe__core_kernels_register). */
floe_code floe__queue_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
floe_code floe__reader_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* idx.c, for reader.c: the batcher's permutation of epoch `epoch` (a Fisher-Yates shuffle
 * of 0..n-1 from (seed, epoch)) into order[n] (caller's array). */
void floe__idx_permutation(uint64_t seed, int64_t epoch, int64_t n, uint32_t *order);
/* idx.c: an IDX file of any element type (u8, i8, i32, f32, f64; i16 refused), plain or
 * gzip. header only (data NULL) or whole: *data (floe__malloc'd, caller frees) holds
 * dims[0] items in host byte order. Errors name the path and the byte offset. */
typedef struct FloeIdxInfo {
  FloeDType dtype;
  int rank;                     /* of the whole file: items have rank - 1 */
  int64_t dims[FLOE_MAX_DIMS];
} FloeIdxInfo;
floe_code floe__idx_read_file(const char *path, FloeIdxInfo *info, void **data, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* Rendezvous helper's additions (rendezvous.c, transport.c), issue 5.
 *
 * transport.c: the runtime's transport manager (rt->transport_mgr). A loopback comm pair over
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

/* rendezvous.c: the wire format of one transfer through a transport. A header message of
 * FLOE__RV_HEADER_BYTES under tag T = floe__rendezvous_tag(step, key) (low bit 0), then the
 * payload under T | 1 (always sent, possibly empty). Header fields, little-endian, at byte
 * offsets: 0 magic u32 (FLOE__RV_MAGIC), 4 version u16 (FLOE__RV_VERSION), 6 flags u16
 * (FLOE__RV_*), 8 dtype u32 (FloeDType of the value as received), 12 rank u32, 16 dims
 * i64[FLOE_MAX_DIMS] (unused ones 0), 80 payload bytes u64. With FLOE__RV_BF16 an f32 value
 * travels as bf16 (2 bytes an element). */
#define FLOE__RV_HEADER_BYTES 88
#define FLOE__RV_MAGIC 0x31565246u /* "FRV1" */
#define FLOE__RV_VERSION 1
#define FLOE__RV_DEAD 0x1u
#define FLOE__RV_CONTROL 0x2u
#define FLOE__RV_BF16 0x4u
/* The 64-bit tag of a key in a step (low bit 0); pure. */
uint64_t floe__rendezvous_tag(int64_t step_id, const FloeRendezvousKey *key);
/* f32 <-> bf16: round to nearest even, NaN stays NaN (quiet, sign kept), infinities kept. */
uint16_t floe__f32_to_bf16(float f);
float floe__bf16_to_f32(uint16_t h);
/* Pending Recvs of r (waiting for a Send, or with a transfer in flight); for tests that need
 * to know a Recv has been posted before they act. */
int floe__rendezvous_num_pending(FloeRendezvous *r);
/* End of the rendezvous helper's additions. */

#endif /* FLOE_INTERNAL_H */
