/* SPDX-License-Identifier: Apache-2.0 */
/* floe.h - the application API of Floe.
 *
 * Conventions:
 *  - Functions that can fail return a floe_code and, when given a non-NULL FloeStatus*,
 *    fill it with the code and a message naming what was wrong (the node, the file and
 *    offset, the shapes) and what to do.
 *  - Graph building uses a sticky error: the first error is kept in the graph and every
 *    later building call is a no-op returning NULL / an invalid output, so user code checks
 *    floe_graph_status() once at the end.
 *  - Ownership is written above each function: "caller owns" means the caller frees with the
 *    matching *_free / *_release; "borrowed" means valid as long as the named owner lives.
 */
#ifndef FLOE_H
#define FLOE_H

#include <stdio.h>

#include "floe_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* Version. */

/* The loaded library's version, "MAJOR.MINOR.PATCH" (equal to FLOE_VERSION_STRING of the
 * floe_version.h it was built with). Static storage owned by libfloe: never free it; valid
 * for the life of the process. */
FLOE_API const char *floe_version(void);

/* ------------------------------------------------------------------------------------ */
/* Status. */

typedef struct FloeStatus FloeStatus;

/* Caller owns the result; free with floe_status_free. NULL only when out of memory. */
FLOE_API FloeStatus *floe_status_new(void);
FLOE_API void floe_status_free(FloeStatus *s);
FLOE_API floe_code floe_status_code(const FloeStatus *s);
/* Borrowed: valid until the status is next modified or freed. "" when OK. */
FLOE_API const char *floe_status_message(const FloeStatus *s);
/* Set code and printf-style message; returns code. s may be NULL (then only returns). */
FLOE_API floe_code floe_status_set(FloeStatus *s, floe_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
FLOE_API void floe_status_clear(FloeStatus *s);
/* Static strings: "INVALID_ARGUMENT", "invalid argument". */
FLOE_API const char *floe_code_name(floe_code code);
FLOE_API const char *floe_code_message(floe_code code);

/* ------------------------------------------------------------------------------------ */
/* Data types. */

FLOE_API size_t floe_dtype_size(FloeDType dt);     /* 0 for an invalid dtype */
FLOE_API const char *floe_dtype_name(FloeDType dt); /* "f32"; "invalid" */
/* Accepts "f32", "float32", "float", "int64", "bool", ... Returns FLOE_DTYPE_INVALID if
 * unknown. */
FLOE_API FloeDType floe_dtype_from_name(const char *name);

/* Half-precision conversions (round to nearest even). */
FLOE_API uint16_t floe_f32_to_f16(float f);
FLOE_API float floe_f16_to_f32(uint16_t h);
FLOE_API uint16_t floe_f32_to_bf16(float f);
FLOE_API float floe_bf16_to_f32(uint16_t b);

/* ------------------------------------------------------------------------------------ */
/* Tensors (host memory). Reference counted: new/copy return a tensor with one reference;
 * floe_tensor_release drops one and frees on the last. Thread-safe counts. */

/* Caller owns the result: a zero-filled dense host tensor. NULL + status on bad
 * dims (rank > FLOE_MAX_DIMS, negative dims, size overflow) or out of memory. */
FLOE_API FloeTensor *floe_tensor_new(FloeDType dt, int rank, const int64_t *dims,
                                     FloeStatus *status);
/* Like floe_tensor_new, then copies nbytes from data (must equal the tensor's size). */
FLOE_API FloeTensor *floe_tensor_from_data(FloeDType dt, int rank, const int64_t *dims,
                                           const void *data, size_t nbytes,
                                           FloeStatus *status);
/* Scalars. Caller owns. */
FLOE_API FloeTensor *floe_tensor_scalar_f32(float v, FloeStatus *status);
FLOE_API FloeTensor *floe_tensor_scalar_i32(int32_t v, FloeStatus *status);
FLOE_API FloeTensor *floe_tensor_scalar_i64(int64_t v, FloeStatus *status);
/* A view with a new shape of the same element count sharing t's buffer (no copy). Caller
 * owns the view; t stays owned by its owner. */
FLOE_API FloeTensor *floe_tensor_reshape(FloeTensor *t, int rank, const int64_t *dims,
                                         FloeStatus *status);
/* A deep copy in host memory (copies from a device if needed). Caller owns. */
FLOE_API FloeTensor *floe_tensor_copy(const FloeTensor *t, FloeStatus *status);
FLOE_API void floe_tensor_retain(FloeTensor *t);
FLOE_API void floe_tensor_release(FloeTensor *t); /* NULL is a no-op */

FLOE_API FloeDType floe_tensor_dtype(const FloeTensor *t);
FLOE_API int floe_tensor_rank(const FloeTensor *t);
FLOE_API int64_t floe_tensor_dim(const FloeTensor *t, int i);
/* Borrowed: rank entries, valid while t lives. */
FLOE_API const int64_t *floe_tensor_dims(const FloeTensor *t);
FLOE_API FloeShape floe_tensor_shape(const FloeTensor *t);
FLOE_API int64_t floe_tensor_num_elements(const FloeTensor *t);
FLOE_API size_t floe_tensor_nbytes(const FloeTensor *t);
/* Borrowed pointer to host data (NULL for an empty tensor, or one in device memory). */
FLOE_API void *floe_tensor_data(const FloeTensor *t);
/* Name of the device holding the buffer ("host" for host tensors). Borrowed. */
FLOE_API const char *floe_tensor_device_name(const FloeTensor *t);

/* NumPy .npy files (format 1.0-3.0, little-endian, C order). Caller owns the tensor. The
 * error names the file and the byte offset of what could not be read. */
FLOE_API FloeTensor *floe_tensor_load_npy(const char *path, FloeStatus *status);
FLOE_API floe_code floe_tensor_save_npy(const FloeTensor *t, const char *path,
                                        FloeStatus *status);
/* In-memory variants; save returns a malloc'd buffer the caller frees with free(). */
FLOE_API FloeTensor *floe_tensor_parse_npy(const void *buf, size_t len, const char *what,
                                           FloeStatus *status);
FLOE_API floe_code floe_tensor_serialize_npy(const FloeTensor *t, void **buf, size_t *len,
                                             FloeStatus *status);

/* Shapes. */
FLOE_API FloeShape floe_shape_unknown(void);
FLOE_API FloeShape floe_shape_make(int rank, const int64_t *dims); /* dims may hold -1 */
FLOE_API FloeShape floe_shape_scalar(void);
/* Writes "[2,?,3]" or "<unknown>" into buf (always NUL-terminated); returns buf. */
FLOE_API char *floe_shape_str(const FloeShape *s, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* Runtime: the plugins and devices of one process (or of one test). */

typedef struct FloeRuntime FloeRuntime;

typedef struct FloeRuntimeOptions {
  size_t struct_size;       /* sizeof(FloeRuntimeOptions) */
  const char *plugin_path;  /* colon-separated folders, the whole search (replaces the
                             * installed folder); NULL or "": $FLOE_PLUGIN_PATH, and when that
                             * is unset or empty the folder floe/<ABI major> beside libfloe */
  const char *plugins;      /* comma-separated names; NULL: $FLOE_PLUGINS; "" or NULL: all */
  int num_threads;          /* inter-op and intra-op pool size; 0: $FLOE_NUM_THREADS or cores */
  int skip_install_dir;     /* non-zero: no plugin path set means no plugins (the installed
                             * folder beside libfloe is not searched) */
} FloeRuntimeOptions;

/* Loads plugins and creates devices. A plugin that fails is reported (see
 * floe_runtime_plugin_*) and skipped: the runtime still succeeds. Caller owns; free with
 * floe_runtime_free after every session using it is freed and every tensor its sessions
 * returned is released (their buffers belong to the runtime's device allocators; copy a
 * tensor with floe_tensor_copy to keep it longer). */
FLOE_API FloeRuntime *floe_runtime_new(const FloeRuntimeOptions *opts, FloeStatus *status);
FLOE_API void floe_runtime_free(FloeRuntime *rt);
/* The process-wide runtime configured from the environment, created on first use.
 * Borrowed: lives until process exit. NULL + status if it cannot be created. */
FLOE_API FloeRuntime *floe_runtime_default(FloeStatus *status);

/* Plugins the loader considered, in discovery order. Strings are borrowed from rt. */
typedef enum FloePluginState {
  FLOE_PLUGIN_LOADED = 0,      /* initialised, its registrations are live */
  FLOE_PLUGIN_UNAVAILABLE = 1, /* loaded but not usable here (e.g. no GPU); see message */
  FLOE_PLUGIN_REFUSED = 2,     /* not loaded: dlopen failed, no entry symbol, ABI mismatch */
  FLOE_PLUGIN_FAILED = 3,      /* init returned an error; nothing registered */
  FLOE_PLUGIN_DUPLICATE = 4,   /* same real path or same name as an earlier plugin */
  FLOE_PLUGIN_FILTERED = 5     /* not in FLOE_PLUGINS */
} FloePluginState;

typedef struct FloePluginReport {
  const char *name;      /* declared name, or the file's stem when never declared */
  const char *path;      /* real path of the .so */
  const char *version;   /* declared version or "" */
  FloePluginState state;
  uint32_t abi_major, abi_minor; /* declared by the plugin (0 if unknown) */
  uint32_t negotiated_minor;
  int num_devices, num_kernels, num_ops, num_transports;
  const char *message;   /* why refused / failed / unavailable; "" when loaded */
  int num_collectives;   /* collective backends registered (ABI 1.5) */
} FloePluginReport;

FLOE_API int floe_runtime_num_plugins(const FloeRuntime *rt);
FLOE_API const FloePluginReport *floe_runtime_plugin(const FloeRuntime *rt, int i);
FLOE_API const char *floe_plugin_state_name(FloePluginState s); /* "loaded", ... */

typedef struct FloeDeviceInfo {
  const char *name;        /* "/job:localhost/replica:0/task:0/device:CPU:0"; borrowed */
  const char *short_name;  /* "cpu:0"; borrowed */
  const char *type;        /* "CPU" */
  const char *plugin;      /* plugin name */
  const char *description;
  uint64_t memory_bytes;
  double peak_flops_f32;
  double memory_bandwidth;
  int index;               /* ordinal among devices of its type */
} FloeDeviceInfo;

FLOE_API int floe_runtime_num_devices(const FloeRuntime *rt);
/* Fills *info with borrowed strings; FLOE_OUT_OF_RANGE for a bad index. */
FLOE_API floe_code floe_runtime_device(const FloeRuntime *rt, int i, FloeDeviceInfo *info);
/* Number of kernels registered for op (any device); 0 if none. */
FLOE_API int floe_runtime_num_kernels_for(const FloeRuntime *rt, const char *op,
                                          const char *device_type);
/* The kernels registered in rt, in registration order (plugins' in load order, then the
 * core's own), for tools and tests that go through every kernel of a device type. Nothing is
 * allocated; thread-safe (rt's registry does not change after floe_runtime_new). */
typedef struct FloeKernelInfo {
  size_t struct_size;      /* set by the caller: sizeof(FloeKernelInfo) */
  const char *op;          /* "MatMul"; borrowed from rt */
  const char *device_type; /* "CPU", "TPU_SIM"; "*" for the core's own kernels (variables,
                            * control flow, Send/Recv), which run on any device; borrowed */
  const char *plugin;      /* name of the plugin that registered it; "core" for "*" kernels */
  int32_t priority;        /* among matching kernels the highest wins */
  int num_constraints;     /* type constraints (floe_runtime_kernel_constraint) */
} FloeKernelInfo;
FLOE_API int floe_runtime_num_kernels(const FloeRuntime *rt); /* 0 for NULL */
/* Fills *info (strings borrowed from rt). FLOE_OUT_OF_RANGE for a bad index or NULL rt,
 * FLOE_INVALID_ARGUMENT when info is NULL or its struct_size is too small. */
FLOE_API floe_code floe_runtime_kernel(const FloeRuntime *rt, int i, FloeKernelInfo *info);
/* Type constraint j of kernel i: the op's type attribute (*attr, borrowed from rt) and the
 * dtypes the kernel accepts for it (*dtypes, a mask of FLOE_DTYPE_BIT). A kernel with none
 * accepts every dtype its op allows. FLOE_OUT_OF_RANGE for a bad rt, i or j,
 * FLOE_INVALID_ARGUMENT for a NULL out pointer. */
FLOE_API floe_code floe_runtime_kernel_constraint(const FloeRuntime *rt, int i, int j,
                                                  const char **attr, uint32_t *dtypes);

/* Device names: canonical "/job:J/replica:R/task:T/device:TYPE:N"; short forms "cpu:0",
 * "CPU", "/device:CPU:0" are accepted. Parses into parts (-1 / "" for unspecified). */
typedef struct FloeDeviceName {
  char job[64];
  int replica, task;
  char type[32];  /* upper-cased */
  int index;
} FloeDeviceName;
FLOE_API floe_code floe_device_name_parse(const char *s, FloeDeviceName *out, FloeStatus *status);

/* ------------------------------------------------------------------------------------ */
/* Ops (the registry of op definitions: standard set + plugins' custom ops). */

/* Non-zero if op is defined (standard ops always are; custom ops once their plugin loaded). */
FLOE_API int floe_op_exists(const char *op);
/* Number of defined ops and their names (borrowed, live until process exit). */
FLOE_API int floe_op_count(void);
FLOE_API const char *floe_op_name(int i);
/* An op's signature, as spec strings in the op-definition grammar of floe_plugin.h: input
 * "x: T", output "y: N*T", attribute "T: type in {f32,f64} = f32" (defaults abbreviated as in
 * graph dumps). which is FLOE_OP_ARG_INPUT, _OUTPUT or _ATTR. */
#define FLOE_OP_ARG_INPUT 0
#define FLOE_OP_ARG_OUTPUT 1
#define FLOE_OP_ARG_ATTR 2
/* Number of inputs, outputs or attributes of op; -1 if op is not defined or which is bad. */
FLOE_API int floe_op_num_args(const char *op, int which);
/* Writes the spec of argument i into the caller's buf (cap bytes; NUL-terminated and cut
 * short when cap is too small, as snprintf). Returns the length the whole spec needs, or -1
 * for an undefined op, a bad which or i, or a NULL buf with cap > 0. Nothing is allocated. */
FLOE_API int floe_op_arg_spec(const char *op, int which, int i, char *buf, size_t cap);
/* The op's one-line description ("" when it has none), borrowed: lives until process exit.
 * NULL if op is not defined. */
FLOE_API const char *floe_op_doc(const char *op);
/* Name of the plugin that defined op (borrowed, lives until process exit); NULL for the
 * standard ops and for an undefined op. */
FLOE_API const char *floe_op_plugin(const char *op);

/* ------------------------------------------------------------------------------------ */
/* Graphs. */

typedef struct FloeGraph FloeGraph;
typedef struct FloeNode FloeNode;         /* owned by its graph */
typedef struct FloeNodeBuilder FloeNodeBuilder;

/* One output of a node. A NULL node means "invalid" (a failed earlier call). */
typedef struct FloeOutput {
  FloeNode *node;
  int index;
} FloeOutput;

/* Caller owns; free with floe_graph_free. NULL only when out of memory. */
FLOE_API FloeGraph *floe_graph_new(void);
FLOE_API void floe_graph_free(FloeGraph *g);
/* The sticky error: FLOE_OK, or the first error's code (message via floe_graph_error). */
FLOE_API floe_code floe_graph_status(const FloeGraph *g);
/* Borrowed; "" when OK. Copies code+message into status when status is non-NULL. */
FLOE_API const char *floe_graph_error(const FloeGraph *g, FloeStatus *status);
/* Forget the sticky error (nodes that failed were never added). */
FLOE_API void floe_graph_clear_error(FloeGraph *g);

/* Node building: begin, add inputs and attributes, finish. finish validates the node
 * against its op definition (inputs, dtypes, attributes), runs shape inference and adds it;
 * on any error it records the sticky error naming the node, op and shapes and returns
 * NULL. The builder is freed by finish (or floe_node_builder_abandon). name may be NULL: a
 * unique name is made from the op ("Add", "Add_1", ...). */
FLOE_API FloeNodeBuilder *floe_node_begin(FloeGraph *g, const char *op, const char *name);
FLOE_API void floe_node_add_input(FloeNodeBuilder *b, FloeOutput in);
FLOE_API void floe_node_add_input_list(FloeNodeBuilder *b, const FloeOutput *ins, int n);
FLOE_API void floe_node_add_control_input(FloeNodeBuilder *b, FloeNode *dep);
FLOE_API void floe_node_set_device(FloeNodeBuilder *b, const char *device);
/* Nodes added to g from now on without a device of their own request `device` (a full or
 * partial name, copied; NULL or "" ends the scope), like TensorFlow's `with tf.device()`.
 * The scope is not part of the graph: clones and saved graphs keep only the nodes' own
 * requests. */
FLOE_API void floe_graph_set_device_scope(FloeGraph *g, const char *device);
/* The current scope ("" when none); borrowed until the next call that sets it. */
FLOE_API const char *floe_graph_device_scope(const FloeGraph *g);
FLOE_API void floe_node_set_attr_int(FloeNodeBuilder *b, const char *name, int64_t v);
FLOE_API void floe_node_set_attr_float(FloeNodeBuilder *b, const char *name, double v);
FLOE_API void floe_node_set_attr_bool(FloeNodeBuilder *b, const char *name, int v);
FLOE_API void floe_node_set_attr_type(FloeNodeBuilder *b, const char *name, FloeDType v);
FLOE_API void floe_node_set_attr_string(FloeNodeBuilder *b, const char *name, const char *v);
FLOE_API void floe_node_set_attr_shape(FloeNodeBuilder *b, const char *name, FloeShape v);
/* The graph takes its own reference; the caller keeps theirs. */
FLOE_API void floe_node_set_attr_tensor(FloeNodeBuilder *b, const char *name, FloeTensor *v);
FLOE_API void floe_node_set_attr_int_list(FloeNodeBuilder *b, const char *name,
                                          const int64_t *v, int n);
FLOE_API void floe_node_set_attr_float_list(FloeNodeBuilder *b, const char *name,
                                            const double *v, int n);
FLOE_API void floe_node_set_attr_type_list(FloeNodeBuilder *b, const char *name,
                                           const FloeDType *v, int n);
/* Returns the node (borrowed from g) or NULL on error (sticky error set). */
FLOE_API FloeNode *floe_node_finish(FloeNodeBuilder *b);
FLOE_API void floe_node_builder_abandon(FloeNodeBuilder *b);

/* Convenience: output i of node (invalid if node is NULL). */
FLOE_API FloeOutput floe_out(FloeNode *node, int index);

/* Node queries; strings borrowed from the graph. */
FLOE_API int floe_graph_num_nodes(const FloeGraph *g);
FLOE_API FloeNode *floe_graph_node(const FloeGraph *g, int i); /* in insertion order */
FLOE_API FloeNode *floe_graph_find(const FloeGraph *g, const char *name);
FLOE_API const char *floe_node_name(const FloeNode *n);
FLOE_API const char *floe_node_op(const FloeNode *n);
FLOE_API const char *floe_node_device(const FloeNode *n); /* requested device or "" */
/* Changes n's requested device (copied; NULL or "": none), e.g. to place an imported or
 * loaded graph by hand. Sessions made from the graph earlier keep their copy. */
FLOE_API floe_code floe_node_request_device(FloeNode *n, const char *device, FloeStatus *status);
FLOE_API int floe_node_num_inputs(const FloeNode *n);
FLOE_API FloeOutput floe_node_input(const FloeNode *n, int i);
FLOE_API int floe_node_num_control_inputs(const FloeNode *n);
FLOE_API FloeNode *floe_node_control_input(const FloeNode *n, int i);
FLOE_API int floe_node_num_outputs(const FloeNode *n);
FLOE_API FloeDType floe_node_output_dtype(const FloeNode *n, int i);
FLOE_API FloeShape floe_node_output_shape(const FloeNode *n, int i);
/* The value of node's type attribute `name` ("T", "dtype", "DstT"), or FLOE_DTYPE_INVALID
 * when it has no type attribute of that name (or n or name is NULL). */
FLOE_API FloeDType floe_node_attr_type(const FloeNode *n, const char *name);
/* The value of node's string attribute `name` (a VarHandleOp's "container"), borrowed from
 * the node; "" when it has none of that name (or n or name is NULL). */
FLOE_API const char *floe_node_attr_string(const FloeNode *n, const char *name);
/* 1 when a kernel registered for device_type itself accepts node's type attributes (the
 * dtypes it would run with), 0 otherwise. The core's kernels for any device ("*") do not
 * count: this asks whether the device's own plugin implements the node. Nothing is
 * allocated; node is borrowed from its graph. Thread-safe (rt's registry is read-only
 * after floe_runtime_new). */
FLOE_API int floe_runtime_device_has_kernel(const FloeRuntime *rt, const FloeNode *node,
                                            const char *device_type);

/* Graph files (format in docs/graph-format.md). save writes atomically (temp + rename).
 * load: caller owns the graph; errors name the file, the byte offset and what was
 * expected. Custom ops in the file must be defined (their plugin loaded) before load. */
FLOE_API floe_code floe_graph_save(const FloeGraph *g, const char *path, FloeStatus *status);
FLOE_API FloeGraph *floe_graph_load(const char *path, FloeStatus *status);
/* In memory: serialize returns a malloc'd buffer the caller frees with free(). */
FLOE_API floe_code floe_graph_serialize(const FloeGraph *g, void **buf, size_t *len,
                                        FloeStatus *status);
FLOE_API FloeGraph *floe_graph_deserialize(const void *buf, size_t len, const char *what,
                                           FloeStatus *status);
/* Graphviz DOT to `out`. */
FLOE_API floe_code floe_graph_write_dot(const FloeGraph *g, FILE *out, FloeStatus *status);
/* The same with node i filled in the colour of devices[i] (a device name; NULL: not placed),
 * one colour per distinct device, and a legend. devices borrowed for the call. */
FLOE_API floe_code floe_graph_write_dot_devices(const FloeGraph *g, const char *const *devices,
                                                FILE *out, FloeStatus *status);

/* Common builders (each a floe_node_begin..finish; NULL name = automatic). */
FLOE_API FloeOutput floe_placeholder(FloeGraph *g, const char *name, FloeDType dt, FloeShape shape);
/* The graph takes its own reference to value. */
FLOE_API FloeOutput floe_const(FloeGraph *g, const char *name, FloeTensor *value);
FLOE_API FloeOutput floe_const_f32(FloeGraph *g, const char *name, float v);
FLOE_API FloeOutput floe_unary(FloeGraph *g, const char *op, const char *name, FloeOutput x);
FLOE_API FloeOutput floe_binary(FloeGraph *g, const char *op, const char *name, FloeOutput a,
                                FloeOutput b);
FLOE_API FloeOutput floe_matmul(FloeGraph *g, const char *name, FloeOutput a, FloeOutput b,
                                int transpose_a, int transpose_b);

/* ------------------------------------------------------------------------------------ */
/* Sessions. */

typedef struct FloeSession FloeSession;

typedef struct FloeSessionOptions {
  size_t struct_size;       /* sizeof(FloeSessionOptions) */
  FloeRuntime *runtime;     /* NULL: floe_runtime_default() */
  const char *device;       /* default device for unplaced nodes; NULL: best available */
  int inline_inexpensive;   /* 1 (default when 0-initialised: see floe_session_options_init) */
  /* Heterogeneous devices. devices: a comma-separated list ("cpu,tpu-sim", "cpu:0,cuda:0";
   * a type without an index means every device of that type) among which the cost-model
   * placer puts each node where the simulated step finishes earliest. NULL or "": no cost
   * model; a node runs on its requested device, else `device`, else the first device with a
   * kernel for it. Borrowed for the call. */
  const char *devices;
  /* 1: a node whose requested device has no kernel for it (or does not exist) is placed
   * elsewhere instead of failing the run. */
  int allow_soft_placement;
  /* 1: f32 tensors crossing devices travel as bf16 (lossy: about 3 significant digits;
   * halves the bytes moved). */
  int compress_transfers;
  /* Since 1.4. A cluster to run the session's graph on (docs/distributed.md): NULL or "":
   * this process alone. "env": the cluster of the environment (FLOE_CONFIG, else TF_CONFIG,
   * else PMIx under mpirun/srun). Text starting with '{': a TF_CONFIG-style spec. Anything
   * else: the path of a file holding one. This process is the spec's task (the chief when
   * the spec names none): it serves that task's address, waits for every other task's
   * server (cluster_timeout_ms), places nodes over every task's devices
   * ("/job:worker/task:1/device:cpu:0"; names without a job are this task's) and runs each
   * task's piece there. Borrowed for the call. */
  const char *cluster;
  int cluster_timeout_ms;   /* waiting for the other tasks; 0: 60000 */
} FloeSessionOptions;

FLOE_API void floe_session_options_init(FloeSessionOptions *opts);

/* The session keeps a reference-counted snapshot of the graph's current nodes: nodes added
 * to g later are not seen. g may be freed after this call. Caller owns the session. A step
 * that a run left behind at its deadline (FloeRunOptions.timeout_ms) keeps using the session
 * until its last asynchronous kernel calls done; floe_session_free returns at once and the
 * session is freed then. */
FLOE_API FloeSession *floe_session_new(const FloeGraph *g, const FloeSessionOptions *opts,
                                       FloeStatus *status);
FLOE_API void floe_session_free(FloeSession *s);

/* A feed: the tensor to use for "node" or "node:index" (the node is not run). */
typedef struct FloeFeed {
  const char *name;
  FloeTensor *value; /* borrowed for the call */
} FloeFeed;

/* Run one step: computes fetches ("node" or "node:index") and runs targets (node names) for
 * their side effects, executing only what they need. On success outputs[i] holds a new
 * reference to fetch i (caller releases each), in host memory wherever it was computed
 * (floe_tensor_data reads it). On error no outputs are set and the status
 * names the failing node. Safe to call concurrently from several threads. */
FLOE_API floe_code floe_session_run(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                                    const char *const *fetches, int num_fetches,
                                    const char *const *targets, int num_targets,
                                    FloeTensor **outputs, FloeStatus *status);
/* Per-run options (floe_run_options_init fills the defaults). */
typedef struct FloeRunOptions {
  size_t struct_size;  /* sizeof(FloeRunOptions) */
  int64_t timeout_ms;  /* > 0: a run still going after this long is cancelled and fails with
                          FLOE_DEADLINE_EXCEEDED, naming the while loops it was in and the
                          nodes still running (name, op, device). It returns once no kernel of
                          it is computing (at most another timeout_ms), without waiting for
                          asynchronous kernels that have not called done: the step lives on
                          until they do, and the session with it (floe_session_free then
                          leaves its freeing to the last of them); 0: none */
  /* NULL: none. Else, when the session traces (floe_session_set_tracing), a run that
   * succeeds writes its own step split there (steps = 1; see FloeStepSplit), also while other
   * threads run the same session; steps = 0 when this run was not traced. The caller owns
   * the struct (struct_size set); borrowed for the call. Readers of options made before this
   * field existed (a smaller struct_size) take it as NULL. */
  struct FloeStepSplit *split;
} FloeRunOptions;
FLOE_API void floe_run_options_init(FloeRunOptions *opts);
/* floe_session_run with options (opts NULL: the defaults). */
FLOE_API floe_code floe_session_run_opts(FloeSession *s, const FloeRunOptions *opts,
                                         const FloeFeed *feeds, int num_feeds,
                                         const char *const *fetches, int num_fetches,
                                         const char *const *targets, int num_targets,
                                         FloeTensor **outputs, FloeStatus *status);
/* Cancels every run of s in progress (they fail with FLOE_CANCELLED; blocked queue
 * operations wake, loops stop); later runs go on as usual. Thread-safe; NULL is a no-op. */
FLOE_API void floe_session_cancel(FloeSession *s);
/* Cancels the runs in progress, closes every queue and other resource (whatever waits on
 * one fails with FLOE_CANCELLED) and refuses later runs. Thread-safe, may be called while
 * runs are in progress (from another thread or a signal-free callback); the session must
 * still be freed with floe_session_free once every run returned. NULL is a no-op. */
FLOE_API void floe_session_close(FloeSession *s);
/* Number of prepared executors cached (one per feeds/fetches/targets signature). */
FLOE_API int floe_session_num_cached(const FloeSession *s);

/* Placement: where a run would put each node, and what the cost model expects it to cost,
 * without running anything. feeds: what the run would feed; a feed's value may be NULL (the
 * name is enough), and a value's shape refines the shapes the costs are computed from (a
 * batch dim left unknown in the graph counts as 1 otherwise); every Placeholder is taken as
 * fed too. With no fetches and no targets, every node no other node
 * reads is a target. */
typedef struct FloeNodePlacement {
  const char *node;     /* node name (in the session's graph, or a fused node's) */
  const char *op;
  const char *device;   /* short device name, e.g. "tpu-sim:0" */
  int graph_index;      /* the node's index in the session's graph; -1 for a fused node */
  double start;         /* simulated start, seconds from the step's start */
  double seconds;       /* simulated duration */
} FloeNodePlacement;
/* On success *rows is one malloc'd block (rows, then the strings they point to) of *num_rows
 * rows that the caller frees with free(); *est_seconds (may be NULL) is the simulated step
 * time; *num_transfers (may be NULL) counts the _Send nodes partitioning would add (-1 when
 * out of memory counting them). */
FLOE_API floe_code floe_session_placement(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                                          const char *const *fetches, int num_fetches,
                                          const char *const *targets, int num_targets,
                                          FloeNodePlacement **rows, int *num_rows,
                                          double *est_seconds, int *num_transfers,
                                          FloeStatus *status);
/* The same, and *measured (may be NULL): the step time the same schedule gives when every
 * node takes the mean time it took in this session's profiled runs so far
 * (floe_session_set_profiling): its device's own time where the device reports one (GPU
 * events, tpu-sim's cycle model), else its wall time; nodes that never ran and transfers
 * keep the cost model's figures. -1 when it could not be computed. */
FLOE_API floe_code floe_session_placement_measured(FloeSession *s, const FloeFeed *feeds,
                                                   int num_feeds, const char *const *fetches,
                                                   int num_fetches, const char *const *targets,
                                                   int num_targets, FloeNodePlacement **rows,
                                                   int *num_rows, double *est_seconds,
                                                   int *num_transfers, double *measured,
                                                   FloeStatus *status);

/* The graph optimiser. A session runs its passes on each run's graph between pruning and
 * placement: arithmetic (identities, constant chains, transposes and reshapes of their own
 * kind), cse (common subexpressions), dead_nodes (pure nodes nobody reads), fusion (chains
 * into fused kernels, the blocked layout). FLOE_OPT_<NAME>=0 in the environment turns one
 * off (FLOE_OPT_ARITHMETIC, FLOE_OPT_CSE, FLOE_OPT_DEAD_NODES, FLOE_OPT_FUSION), and
 * FLOE_OPTIMIZE=0 all of them. */
typedef struct FloeOptPassStats {
  const char *name;      /* the pass; static */
  int enabled;           /* 0: switched off */
  int nodes_before;      /* the run's nodes before the pass */
  int nodes_after;       /* and after it */
  int rewritten;         /* rewrites it made: merges, folds, fused chains, removals */
  int removed;           /* nodes it took out of the run */
  int added;             /* nodes it put in (constants, fused nodes, layout conversions) */
  int conversions;       /* layout conversions and transposes in the run after it */
  double seconds;        /* the time it took */
} FloeOptPassStats;

/* The graph a run of fetches / targets (none: every sink of the graph, as
 * floe_session_placement) would execute, after the optimiser: *graph (caller frees with
 * floe_graph_free) holds the run's nodes (and what fed nodes read); *passes (caller frees
 * with free()) gets *num_passes entries, one per pass in order. feeds name the fed outputs
 * (values may be NULL). */
FLOE_API floe_code floe_session_optimized(FloeSession *s, const FloeFeed *feeds, int num_feeds,
                                          const char *const *fetches, int num_fetches,
                                          const char *const *targets, int num_targets,
                                          FloeGraph **graph, FloeOptPassStats **passes,
                                          int *num_passes, FloeStatus *status);

/* What crossed devices in this session's runs so far (every _Send that completed). */
typedef struct FloeTransferStats {
  size_t struct_size;     /* sizeof(FloeTransferStats), set by the caller */
  int64_t transfers;      /* values sent */
  int64_t by_reference;   /* of those, handed over without a copy (two host-memory devices) */
  int64_t wire_bytes;     /* bytes posted to the transport (bf16 when compress_transfers) */
  int64_t tensor_bytes;   /* the same values' bytes as tensors: wire_bytes / tensor_bytes is
                             what compression kept */
} FloeTransferStats;
FLOE_API floe_code floe_session_transfer_stats(FloeSession *s, FloeTransferStats *out,
                                               FloeStatus *status);

/* Profiling: per op type, what the kernels of this session's runs cost. */
typedef struct FloeOpProfile {
  const char *op;       /* op type, e.g. "MatMul", and for a fused node what it fused,
                         * "_FusedConv(Conv+BiasAdd+Relu)"; borrowed, valid while the session
                         * lives */
  int64_t calls;        /* kernel invocations */
  int64_t total_ns;     /* wall time inside the kernels' compute (async kernels: until done) */
  int64_t max_ns;       /* the longest single invocation */
  int64_t output_bytes; /* bytes of the outputs the invocations produced */
  const char *device;   /* short device name, e.g. "tpu-sim:0"; borrowed like op */
  int64_t device_ns;    /* time the device itself reported (GPU events, a simulator's cycle
                         * model); 0 when its kernels report none */
} FloeOpProfile;

/* on != 0 starts a new profile (every count back to zero) and times each kernel from then
 * on; 0 stops timing and keeps the counts. Off (the default) costs one branch per node.
 * Thread-safe; steps already running may be counted partly. NULL s is a no-op. */
FLOE_API void floe_session_set_profiling(FloeSession *s, int on);
/* The counts gathered since profiling was last turned on, one row per op type that ran,
 * sorted by total_ns (largest first). On success *rows is a malloc'd array of *num_rows
 * rows (NULL when none) that the caller frees with free(). Thread-safe. */
FLOE_API floe_code floe_session_profile(FloeSession *s, FloeOpProfile **rows, int *num_rows,
                                        FloeStatus *status);

/* Tracing: a timeline of this session's steps. FLOE_TRACE_START drops the events gathered
 * so far and records, from then on, every kernel invocation (node, op, device, thread, start and
 * end, input and output types, output bytes), the spans each executor thread spends in the
 * executor, and each run's start and end; FLOE_TRACE_RESUME records again keeping them;
 * FLOE_TRACE_OFF (0) stops recording and keeps the events. Off (the default) costs the
 * executor one branch per node, the same one profiling tests. Events
 * are kept in memory (a few hundred bytes each) until the next on or the session's free.
 * Thread-safe; steps already running may be recorded partly. NULL s is a no-op. */
enum { FLOE_TRACE_OFF = 0, FLOE_TRACE_START = 1, FLOE_TRACE_RESUME = 2 };
FLOE_API void floe_session_set_tracing(FloeSession *s, int mode);
/* Writes the events recorded so far to path (created or truncated; the caller owns the
 * file) as a Chrome trace (Trace Event Format JSON, opened by Perfetto and chrome://tracing):
 * process 1 holds the runs ("step" spans on the calling threads), one process per device
 * holds a thread per executor thread with an "executor" span for each stretch the thread
 * spent in the executor and, inside it, one complete event ("ph":"X") per kernel whose args
 * name the node, op, device, step, output bytes and the inputs' and outputs' types
 * ("f32[64,784]"); each _Send is joined to its _Recv by a flow ("ph":"s" / "f"). Times are
 * microseconds from the first event. An unwritable path is an error naming it and errno's
 * message. Thread-safe (steps may run meanwhile; their later events are not written). */
FLOE_API floe_code floe_session_trace_write(FloeSession *s, const char *path, FloeStatus *status);
/* Where the time of the traced runs went, summed over every run recorded (see
 * docs/benchmarks.md, "Step breakdown"). For each run: its wall time W, the executors' part
 * of it E, and the T threads that took part (those with an executor span in it, plus the
 * caller's); T x W thread time is split into
 *   kernels:    summed time inside synchronous kernels other than transfers,
 *   transfers:  summed time inside synchronous _Send/_Recv/_ControlSend kernels,
 *   framework:  executor spans minus the kernels and transfers in them (scheduling, input
 *               gathering, releasing), plus W - E on the caller (lookup, feeds, fetch copies),
 *   tracing:    the time spent recording the kernel events themselves (the cost of being
 *               traced, taken out of framework so that it does not pass for the executor's),
 *   idle:       the rest: threads waiting (on the pool, on a value, on an async kernel).
 * The five add up to thread_ns exactly. */
typedef struct FloeStepBreakdown {
  size_t struct_size;     /* sizeof(FloeStepBreakdown), set by the caller */
  int64_t steps;          /* runs summed */
  int64_t wall_ns;        /* their wall times, summed */
  int64_t thread_ns;      /* their T x W, summed: kernel + transfer + framework + tracing +
                             idle */
  int64_t kernel_ns, transfer_ns, framework_ns, idle_ns;
  int64_t tracing_ns;     /* recording the events (see above) */
  int64_t dropped_events; /* events lost to an allocation failure (then the sums are low) */
} FloeStepBreakdown;
/* Fills *out from the events recorded since tracing last started. Thread-safe. */
FLOE_API floe_code floe_session_step_breakdown(FloeSession *s, FloeStepBreakdown *out,
                                               FloeStatus *status);

/* The step split (docs/benchmarks.md, "Step split"): each traced run's wall time, from its
 * start t0 to its end t1 on the calling thread, cut at one instant into three parts that add
 * up to it exactly, from this process's own events (the pieces a distributed step runs on
 * other tasks are seen here only through the values they send). Every set below is a union
 * of intervals over all of this process's threads, never a sum over threads:
 *   C: the synchronous kernels other than transfers (the compute kernels);
 *   L: the end of the last of them that started before the step's last synchronous
 *      _Send/_ControlSend began (of the last of them when nothing was sent; t0 when none
 *      ran): the compute whose results the sends carry. A kernel after it (synchronous
 *      replication's local step, set from the token the step waited for) counts after L;
 *   B (busy): C, the synchronous _Send/_ControlSend kernels, the executor threads' stretches
 *      (scheduling between kernels) and the caller's own work before the executors start;
 *   compute:     |[t0, L] & B|: before its last compute kernel ended, the time this process
 *                was running something of the step;
 *   wait_params: |[t0, L] - B|: before it, the time nothing of the step ran here (every
 *                thread waited: on a _Recv of a value from another task, a variable from a
 *                ps task for instance, or on another asynchronous kernel);
 *   send_grads:  t1 - L: after it, sending its results (the gradients) and waiting while the
 *                other tasks apply them (and, under synchronous replication, for the token of
 *                the next global step), until the run returned. */
typedef struct FloeStepSplit {
  size_t struct_size;     /* sizeof(FloeStepSplit), set by the caller */
  int64_t steps;          /* runs summed */
  int64_t wall_ns;        /* their wall times: compute + wait_params + send_grads exactly */
  int64_t compute_ns, wait_params_ns, send_grads_ns;
  int64_t kernel_ns;      /* of compute_ns: |C & [t0, L]| (the rest: scheduling, sends, the
                             caller's own work) */
  int64_t tracing_ns;     /* recording these runs' events: the cost of measuring them */
} FloeStepSplit;
/* Fills *out with the split of every run recorded since tracing last started (the runs of
 * every thread: for one run's own, see FloeRunOptions.split). The caller owns *out; its
 * struct_size must cover at least this first version's fields. Thread-safe. */
FLOE_API floe_code floe_session_step_split(FloeSession *s, FloeStepSplit *out,
                                           FloeStatus *status);

/* The same counts per node (a node in several cached signatures adds up), including the
 * _Send/_Recv nodes partitioning added. On success *rows is one malloc'd block (rows, then
 * the strings they point to) that the caller frees with free(); in no particular order. */
typedef struct FloeNodeProfile {
  const char *node, *op, *device;
  int64_t calls, total_ns, device_ns;
} FloeNodeProfile;
FLOE_API floe_code floe_session_profile_nodes(FloeSession *s, FloeNodeProfile **rows,
                                              int *num_rows, FloeStatus *status);

/* Memory: the bytes of tensor data buffers alive in this process (host and every device's,
 * counted when a buffer is made and when its last reference goes; views and tensors
 * sharing a buffer add nothing), and the most alive at once since the process started or
 * since the last floe_memory_reset_peak. Kernel scratch memory and the devices' caches of
 * freed blocks are not tensors and are not counted (peak RSS shows them). Thread-safe; a
 * reset while other threads allocate may miss a rise that races with it. */
typedef struct FloeMemoryStats {
  size_t struct_size;        /* sizeof(FloeMemoryStats), set by the caller */
  int64_t live_tensor_bytes; /* alive now */
  int64_t peak_tensor_bytes; /* high-water mark */
} FloeMemoryStats;
/* Fills *out (nothing when out is NULL or its struct_size is too small). */
FLOE_API void floe_memory_stats(FloeMemoryStats *out);
/* Starts a new high-water mark at the bytes alive now. */
FLOE_API void floe_memory_reset_peak(void);

/* ------------------------------------------------------------------------------------ */
/* Testing hooks. */

/* Fault injection: make the Nth core allocation from now fail (1 = the next one), and every
 * one after it; 0 turns it off. Returns the number of allocations counted since the last
 * call (counting happens only while armed). Process-wide. */
FLOE_API long floe_test_fail_alloc_after(long n);

#ifdef __cplusplus
}
#endif

/* Training: autodiff, variables, optimisers, checkpoints, layers, data. */
#include "floe_train.h"
/* Control flow: cond and while loops. */
#include "floe_control.h"
/* TensorArrays: per-step lists of tensors for dynamic RNNs. */
#include "floe_tensor_array.h"
/* Recurrent cells. */
#include "floe_rnn.h"
/* Text corpora for language models: fortunes, vocabulary, batchers. */
#include "floe_text.h"
/* Input pipelines: queues, readers, the queue runner. */
#include "floe_data.h"

#endif /* FLOE_H */
