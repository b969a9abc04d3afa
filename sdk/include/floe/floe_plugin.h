/* SPDX-License-Identifier: Apache-2.0 */
/* floe_plugin.h - the stable plugin ABI of Floe.
 *
 * A plugin is a shared object that exports exactly one symbol:
 *
 *     FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host,
 *                                                   FloePluginRegistrar *reg);
 *
 * It links nothing from libfloe: every core service comes through `host`. It builds with
 * this header (and floe_types.h) alone, plus its own third-party libraries.
 *
 * Rules (sdk/README.md is the guide):
 *  - Major must match; minor is negotiated (the core works with min(core, plugin)).
 *  - Every struct crossing the boundary starts with `size_t struct_size`; a reader checks
 *    FLOE_HAS_FIELD(ptr, Type, field) before touching a field added after 1.0.
 *  - Function tables and enums are append-only. Optional slots may be NULL.
 *  - Errors are values: every call returns a floe_code; nothing longjmps or exits.
 *  - Ownership is written next to each field.
 *
 * Life of a plugin: the core dlopens it, calls floe_plugin_init once per runtime. The
 * plugin first calls reg->declare() with its name and ABI version, then registers its
 * devices, kernels, ops, transports and collective backends. Registrations are staged and only committed when
 * init returns FLOE_OK and the versions agree, so a failing init leaves nothing behind.
 * Returning FLOE_UNAVAILABLE means "loaded, but not usable on this machine" (a GPU plugin
 * with no GPU): the core records the reason (reg->set_message) and registers nothing.
 * At runtime shutdown the core calls the shutdown hook (if set), then each device's
 * destroy slot. Plugins are never dlclose()d while the process runs.
 */
#ifndef FLOE_PLUGIN_H
#define FLOE_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "floe_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLOE_ABI_MAJOR 1
#define FLOE_ABI_MINOR 7

/* Visibility of the one exported symbol (plugins build with -fvisibility=hidden). */
#if defined(__GNUC__)
#define FLOE_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define FLOE_PLUGIN_EXPORT
#endif

/* True when a struct of the given (reader-observed) size contains `field`. */
#define FLOE_HAS_FIELD(ptr, Type, field) \
  ((ptr) != NULL && (ptr)->struct_size >= offsetof(Type, field) + sizeof(((Type *)0)->field))

/* Opaque handles owned by the core. */
typedef struct FloeKernelInit FloeKernelInit;       /* kernel construction (attrs, dtypes) */
typedef struct FloeKernelContext FloeKernelContext; /* one kernel invocation */
typedef struct FloeShapeContext FloeShapeContext;   /* one shape-function invocation */
typedef struct FloeAttrs FloeAttrs;                 /* a node's attributes */

/* Opaque handles owned by the plugin (the core only passes them back). */
typedef struct FloeStream FloeStream;
typedef struct FloeEvent FloeEvent;

/* Log levels for host->log. */
typedef enum FloeLogLevel {
  FLOE_LOG_ERROR = 0,
  FLOE_LOG_WARNING = 1,
  FLOE_LOG_INFO = 2,
  FLOE_LOG_DEBUG = 3
} FloeLogLevel;

/* Body of a parallel loop: process indices [begin, end). */
typedef void (*FloeParallelFn)(void *arg, int64_t begin, int64_t end);
/* A closure run on the shared thread pool. */
typedef void (*FloeTaskFn)(void *arg);
/* Completion callback of an asynchronous kernel; call exactly once. */
typedef void (*FloeDoneFn)(void *done_arg);

/* ------------------------------------------------------------------------------------ */
/* Host API: the core's services, passed to floe_plugin_init. Lives as long as the process;
 * plugins may keep the pointer. Every slot of ABI 1.0 is non-NULL; a slot added by a later
 * minor (marked "since 1.x") is there only when FLOE_HAS_FIELD(host, FloeHostApi, slot)
 * says so (an older core has a shorter table), and is then non-NULL. */
typedef struct FloeHostApi {
  size_t struct_size;
  uint32_t abi_major; /* the core's FLOE_ABI_MAJOR */
  uint32_t abi_minor; /* the core's FLOE_ABI_MINOR (the table is handed out before declare) */

  /* Logging: printed only when the user asked (FLOE_LOG_LEVEL). */
  void (*log)(FloeLogLevel level, const char *fmt, ...);

  /* General-purpose memory of the core (honours the core's fault injection).
   * Memory from alloc is freed with free, never with libc free(). */
  void *(*alloc)(size_t bytes);
  void (*free)(void *ptr);

  /* Tensors. Handles passed to a kernel are borrowed for the duration of the call unless
   * retained. All tensor data of a host-memory device is directly addressable. */
  FloeDType (*tensor_dtype)(const FloeTensor *t);
  int (*tensor_rank)(const FloeTensor *t);
  const int64_t *(*tensor_dims)(const FloeTensor *t);  /* rank entries, borrowed */
  int64_t (*tensor_num_elements)(const FloeTensor *t);
  size_t (*tensor_nbytes)(const FloeTensor *t);
  void *(*tensor_data)(const FloeTensor *t);            /* device address; NULL if empty */
  void (*tensor_retain)(FloeTensor *t);
  void (*tensor_release)(FloeTensor *t);
  size_t (*dtype_size)(FloeDType dt);
  const char *(*dtype_name)(FloeDType dt);

  /* Attributes (kernel construction, invocation and shape functions all hand out a
   * FloeAttrs). Getters return FLOE_NOT_FOUND if absent, FLOE_INVALID_ARGUMENT if the
   * attribute has another kind. Returned pointers are borrowed for the life of the node. */
  floe_code (*attr_int)(const FloeAttrs *a, const char *name, int64_t *out);
  floe_code (*attr_float)(const FloeAttrs *a, const char *name, double *out);
  floe_code (*attr_bool)(const FloeAttrs *a, const char *name, int *out);
  floe_code (*attr_type)(const FloeAttrs *a, const char *name, FloeDType *out);
  floe_code (*attr_string)(const FloeAttrs *a, const char *name, const char **out);
  floe_code (*attr_shape)(const FloeAttrs *a, const char *name, FloeShape *out);
  floe_code (*attr_tensor)(const FloeAttrs *a, const char *name, const FloeTensor **out);
  floe_code (*attr_int_list)(const FloeAttrs *a, const char *name, const int64_t **out, size_t *n);
  floe_code (*attr_float_list)(const FloeAttrs *a, const char *name, const double **out, size_t *n);
  floe_code (*attr_type_list)(const FloeAttrs *a, const char *name, const FloeDType **out, size_t *n);

  /* Kernel construction (inside FloeKernelDef.create). */
  const FloeAttrs *(*init_attrs)(const FloeKernelInit *init);
  const char *(*init_node_name)(const FloeKernelInit *init);
  int (*init_num_inputs)(const FloeKernelInit *init);
  FloeDType (*init_input_dtype)(const FloeKernelInit *init, int i);
  int (*init_num_outputs)(const FloeKernelInit *init);
  FloeDType (*init_output_dtype)(const FloeKernelInit *init, int i);
  void *(*init_device_state)(const FloeKernelInit *init); /* FloeDeviceFns.state of the device */
  floe_code (*init_set_error)(FloeKernelInit *init, floe_code code, const char *fmt, ...);

  /* Kernel invocation (inside compute / compute_async). */
  const FloeAttrs *(*ctx_attrs)(const FloeKernelContext *ctx);
  const char *(*ctx_node_name)(const FloeKernelContext *ctx);
  const char *(*ctx_op)(const FloeKernelContext *ctx);
  int (*ctx_num_inputs)(const FloeKernelContext *ctx);
  const FloeTensor *(*ctx_input)(const FloeKernelContext *ctx, int i); /* borrowed */
  int (*ctx_num_outputs)(const FloeKernelContext *ctx);
  FloeDType (*ctx_output_dtype)(const FloeKernelContext *ctx, int i);
  /* Allocate output i on the kernel's device; *out is borrowed (the core owns it). */
  floe_code (*ctx_allocate_output)(FloeKernelContext *ctx, int i, int rank, const int64_t *dims,
                                   FloeTensor **out);
  /* Make output i a view of input `input` with a new shape of the same element count
   * (no copy: Identity, Reshape, Squeeze, ExpandDims). */
  floe_code (*ctx_forward_input)(FloeKernelContext *ctx, int input, int output, int rank,
                                 const int64_t *dims);
  /* Make output i the tensor t (the core takes its own reference; the caller keeps theirs).
   * t must live in the kernel's device memory (e.g. a Const's value on a host device). */
  floe_code (*ctx_set_output)(FloeKernelContext *ctx, int i, FloeTensor *t);
  /* Scratch memory on the kernel's device, freed by the core when compute returns (or, for
   * an async kernel, when done is called). */
  floe_code (*ctx_allocate_temp)(FloeKernelContext *ctx, size_t bytes, void **out);
  /* Record an error; the core prefixes the node's name and op. Returns `code`. */
  floe_code (*ctx_set_error)(FloeKernelContext *ctx, floe_code code, const char *fmt, ...);
  void *(*ctx_device_state)(const FloeKernelContext *ctx);
  int64_t (*ctx_step_id)(const FloeKernelContext *ctx);
  /* Non-zero once the step was cancelled (another node failed, or the user cancelled). */
  int (*ctx_cancelled)(const FloeKernelContext *ctx);

  /* Shared thread pool. parallel_for splits [0, n) into shards of roughly equal cost
   * (cost_per_unit in nanoseconds-ish units; 0 = unknown) and runs them on the intra-op
   * pool, the caller taking part; it returns when all shards are done. */
  void (*parallel_for)(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg);
  int (*num_threads)(void);
  /* Run fn(arg) later on the inter-op pool (for async kernels). */
  floe_code (*schedule)(FloeTaskFn fn, void *arg);

  /* Shape functions (FloeOpDef.shape_fn). */
  const FloeAttrs *(*shape_attrs)(const FloeShapeContext *sctx);
  const char *(*shape_node_name)(const FloeShapeContext *sctx);
  int (*shape_num_inputs)(const FloeShapeContext *sctx);
  FloeShape (*shape_input)(const FloeShapeContext *sctx, int i);
  FloeDType (*shape_input_dtype)(const FloeShapeContext *sctx, int i);
  /* The value of input i when it is known at graph-building time (a Const), else NULL. */
  const FloeTensor *(*shape_input_value)(const FloeShapeContext *sctx, int i);
  int (*shape_num_outputs)(const FloeShapeContext *sctx);
  void (*shape_set_output)(FloeShapeContext *sctx, int i, const FloeShape *shape);
  floe_code (*shape_set_error)(FloeShapeContext *sctx, floe_code code, const char *fmt, ...);

  /* Since 1.1. Make output `output` a view (no copy) of the contiguous block of input
   * `input` that starts byte_offset bytes into its data (a multiple of the element size) and
   * holds the elements of dims (Split along the first dim, a Slice of whole rows). Returns
   * FLOE_OUT_OF_RANGE, recorded like ctx_set_error, when the block does not fit in the input.
   * The view's data need not be aligned beyond its element size: kernels must not assume
   * more of any input. */
  floe_code (*ctx_forward_input_slice)(FloeKernelContext *ctx, int input, int output,
                                       size_t byte_offset, int rank, const int64_t *dims);

  /* Since 1.3. The time this invocation takes on its device as the device measures it (GPU
   * events) or simulates it (a cycle model), in nanoseconds; called at most once per
   * invocation, before compute returns (or done is called). The profiler shows it next to
   * the host-side time, and step statistics sum it per device. */
  void (*ctx_report_device_time)(FloeKernelContext *ctx, int64_t ns);

  /* Since 1.7. Buffer reuse: makes output `output` input `input`'s own tensor, for the
   * kernel to write over, when this call is the last reader of that tensor and nothing else
   * holds it (not fed, fetched, sent, a constant's or a variable's value, a view of another
   * tensor), it lives on the kernel's device, and it has the output's dtype and exactly the
   * dims given. Returns FLOE_OK with *out the output (borrowed, the core owns it: the same
   * memory ctx_input(input) points to), or FLOE_NOT_FOUND, recording nothing, when any of
   * that does not hold or the user switched reuse off (FLOE_OPT_BUFFER_REUSE=0): the kernel
   * then allocates its output as usual. An input or output index out of range is recorded
   * like ctx_set_error (FLOE_OUT_OF_RANGE). The kernel must read each input element before
   * it writes the output element at the same place, and nothing it writes may be read again
   * as input (an elementwise map); restrict-qualified code must not see the two pointers
   * as different objects. */
  floe_code (*ctx_reuse_input)(FloeKernelContext *ctx, int input, int output, int rank,
                               const int64_t *dims, FloeTensor **out);
} FloeHostApi;

/* ------------------------------------------------------------------------------------ */
/* Devices. */

/* Device property flags. */
#define FLOE_DEVICE_HOST_MEMORY 0x1u /* buffers are ordinary host memory (the CPU) */

/* Description of one device, filled by FloeDeviceFns.get_props. Plain data, no pointers. */
typedef struct FloeDeviceProps {
  size_t struct_size;        /* set by the core before the call */
  char type[32];             /* device type, e.g. "CPU", "CUDA", "TPU_SIM" */
  char description[128];     /* human readable, e.g. the processor model */
  uint64_t memory_bytes;     /* capacity of device memory */
  double peak_flops[FLOE_DTYPE_LIMIT]; /* indexed by FloeDType; 0 = unsupported/unknown */
  double memory_bandwidth;   /* bytes/s */
  double host_to_device_bandwidth; /* bytes/s */
  double device_to_host_bandwidth; /* bytes/s */
  double peer_bandwidth;     /* bytes/s between two devices of this plugin */
  uint32_t flags;            /* FLOE_DEVICE_* */
  int32_t ordinal;           /* index among this plugin's devices of the same type */
  /* Since 1.3 (a reader checks FLOE_HAS_FIELD; the core zero-fills them for older plugins).
   * peak_flops is the rate of matrix-class work (MatMul, BatchMatMul, convolutions); a device
   * whose other work (elementwise, reductions) is slower says so in vector_flops. */
  double vector_flops;       /* FLOP/s of f32 elementwise work; 0 = peak_flops[FLOE_F32] */
  double launch_overhead;    /* seconds of fixed cost per kernel launch; 0 = unknown */
} FloeDeviceProps;

/* One device instance. The struct passed to register_device is copied by the core; `state`
 * is owned by the plugin and must live until destroy (or plugin shutdown). */
typedef struct FloeDeviceFns {
  size_t struct_size;
  void *state;

  floe_code (*get_props)(void *state, FloeDeviceProps *props);           /* required */
  /* Device memory. allocate must honour alignment (a power of two, >= 64). */
  floe_code (*allocate)(void *state, size_t bytes, size_t alignment, void **ptr); /* required */
  void (*deallocate)(void *state, void *ptr, size_t bytes);              /* required */
  /* Synchronous copies: return when the bytes are in place. */
  floe_code (*copy_h2d)(void *state, void *dst, const void *src, size_t n); /* required */
  floe_code (*copy_d2h)(void *state, void *dst, const void *src, size_t n); /* required */
  floe_code (*copy_d2d)(void *state, void *dst, const void *src, size_t n); /* required */
  /* Asynchronous copies, ordered on `stream`; optional (NULL: the core copies synchronously). */
  floe_code (*copy_h2d_async)(void *state, FloeStream *s, void *dst, const void *src, size_t n);
  floe_code (*copy_d2h_async)(void *state, FloeStream *s, void *dst, const void *src, size_t n);
  floe_code (*copy_d2d_async)(void *state, FloeStream *s, void *dst, const void *src, size_t n);
  /* Streams and events; optional as a group (NULL: the device is synchronous). */
  floe_code (*stream_create)(void *state, FloeStream **out);
  void (*stream_destroy)(void *state, FloeStream *s);
  floe_code (*stream_synchronize)(void *state, FloeStream *s);
  floe_code (*event_create)(void *state, FloeEvent **out);
  void (*event_destroy)(void *state, FloeEvent *e);
  floe_code (*event_record)(void *state, FloeEvent *e, FloeStream *s);
  floe_code (*stream_wait_event)(void *state, FloeStream *s, FloeEvent *e);
  /* FLOE_OK when complete, FLOE_UNAVAILABLE while pending, another code on failure. */
  floe_code (*event_query)(void *state, FloeEvent *e);
  floe_code (*event_synchronize)(void *state, FloeEvent *e);
  /* Optional: fill n bytes with `value` (NULL: the core copies a host buffer of zeros). */
  floe_code (*memset)(void *state, void *dst, int value, size_t n);
  /* Optional: release the device state at shutdown. */
  void (*destroy)(void *state);
} FloeDeviceFns;

/* ------------------------------------------------------------------------------------ */
/* Kernels. */

/* Kernel flags. */
#define FLOE_KERNEL_INEXPENSIVE 0x1u /* cheap: the executor runs it inline */

/* Restrict a type attribute of the op (e.g. "T") to a set of dtypes (FLOE_DTYPE_BIT mask). */
typedef struct FloeTypeConstraint {
  const char *attr;
  uint32_t dtypes;
} FloeTypeConstraint;

/* A kernel: code for one op on one device type. The struct and everything it points to are
 * copied by the core during register_kernel; function pointers must stay valid while the
 * process runs. */
typedef struct FloeKernelDef {
  size_t struct_size;
  const char *op;          /* op name, e.g. "MatMul" */
  const char *device_type; /* e.g. "CPU" */
  const FloeTypeConstraint *constraints; /* may be NULL when num_constraints == 0 */
  size_t num_constraints;
  int32_t priority;        /* among matching kernels the highest priority wins */
  uint32_t flags;          /* FLOE_KERNEL_* */
  void *user_data;         /* passed to create; borrowed, must outlive the plugin */

  /* Optional: build per-node state (cached primitives, parsed attributes). *state is
   * passed to compute and destroy. NULL: state = user_data. */
  floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                      void **state);
  /* Exactly one of compute / compute_async is non-NULL. Compute may run concurrently for
   * different steps with the same state: state must be read-only or internally locked. */
  floe_code (*compute)(void *state, FloeKernelContext *ctx);
  /* Asynchronous: return promptly and call done(done_arg) exactly once, from any thread,
   * after outputs are set or an error is recorded with ctx_set_error. done_arg is a ticket
   * (not a pointer): a second done fails the step while it runs and is ignored after it
   * ended. A run past its deadline returns without waiting for done; the context stays
   * valid until done is called, which must happen before the runtime is freed. */
  void (*compute_async)(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *done_arg);
  /* Optional: free what create made. */
  void (*destroy)(void *state);
} FloeKernelDef;

/* ------------------------------------------------------------------------------------ */
/* Op definitions (custom ops). Strings use the same grammar as the core's standard ops:
 *
 *   input/output:  "name: T"       a dtype given by type attribute T
 *                  "name: f32"     a fixed dtype
 *                  "name: N*T"     a list of N tensors of type T (N an int attribute)
 *                  "name: Tlist"   a list with one dtype per element (list(type) attribute)
 *   attribute:     "name: kind [>= min] [in {dtype,...}] [= default]"
 *                  kind is int, float, bool, string, type, shape, tensor, list(int),
 *                  list(float), list(type); e.g. "T: type in {f32,f64} = f32",
 *                  "N: int >= 1", "alpha: float = 0.2", "strides: list(int) = [1,1]".
 */

#define FLOE_OP_STATEFUL 0x1u /* has side effects: never pruned by CSE or constant folding */

typedef floe_code (*FloeShapeFn)(const FloeHostApi *host, FloeShapeContext *sctx);

/* Copied by the core during register_op (strings included). */
typedef struct FloeOpDef {
  size_t struct_size;
  const char *name;
  const char *const *inputs;
  size_t num_inputs;
  const char *const *outputs;
  size_t num_outputs;
  const char *const *attrs;
  size_t num_attrs;
  uint32_t flags;          /* FLOE_OP_* */
  FloeShapeFn shape_fn;    /* optional: NULL leaves output shapes unknown */
  const char *doc;         /* optional one-line description */
} FloeOpDef;

/* Variables (since 1.2). An op input declared `resource` (a FLOE_RESOURCE handle) is, for
 * every kernel a plugin provides, replaced by the core with the variable's current value:
 * ctx_input(i) is then a tensor of the variable's dtype and shape, exclusively the kernel's
 * for this call (the core copies the value first if a reader still holds it), which the
 * kernel updates in place through tensor_data. With the op's use_locking attribute true (or
 * absent) the variable stays locked until compute returns. An uninitialised variable fails
 * the node before the kernel runs, naming the variable. */

/* ------------------------------------------------------------------------------------ */
/* Gradients (since 1.2). A plugin that defines an op can say how to differentiate it,
 * declaratively: the gradient of the forward op is one node of `grad_op` (an op the plugin
 * also defines, or a standard one) whose inputs are taken from the forward node, and whose
 * outputs are the gradients of the forward inputs. The core adds that node wherever
 * floe_gradients needs the op's gradient. Copied by the core during register_gradient. */
typedef struct FloeGradientDef {
  size_t struct_size;
  const char *op;        /* the forward op, e.g. "HardSwish" */
  const char *grad_op;   /* the op computing input gradients, e.g. "HardSwishGrad" */
  /* grad_op's inputs in order, each "dy:J" (the gradient arriving at forward output J;
   * zeros when none arrives), "x:I" (forward input I) or "y:J" (forward output J). */
  const char *const *grad_inputs;
  size_t num_grad_inputs;
  /* For each forward input I (num_input_grads entries): the grad_op output that is its
   * gradient, or -1 for "no gradient" (an integer index input, say). */
  const int32_t *input_grads;
  size_t num_input_grads;
  /* Attributes copied from the forward node to the grad_op node (e.g. "T", "alpha");
   * others take grad_op's defaults. */
  const char *const *copy_attrs;
  size_t num_copy_attrs;
} FloeGradientDef;

/* ------------------------------------------------------------------------------------ */
/* Transports (reserved in 1.0: the in-process `local` and libfabric transports fill it).
 * Shaped like NCCL's net plugins: connection setup exchanges opaque address blobs; data
 * moves with non-blocking tagged sends and receives, completed by test(). The rendezvous
 * above maps a key (source device + incarnation, destination device, tensor name, frame,
 * iteration) to a 64-bit tag; nothing above the transport assumes one process. */

#define FLOE_TRANSPORT_ADDR_MAX 128 /* bytes in an address blob */
/* Since 1.4: the top tag bit belongs to the transport (its own control messages, such as a
 * network transport's connection hello). Callers pass tags with this bit clear; a transport
 * may refuse others with FLOE_INVALID_ARGUMENT. The core's transport manager clears it. */
#define FLOE_TRANSPORT_TAG_RESERVED ((uint64_t)1 << 63)

typedef struct FloeTransportFns {
  size_t struct_size;
  const char *name;     /* e.g. "local", "fabric"; copied */

  floe_code (*init)(const FloeHostApi *host, void **ctx);
  void (*finalize)(void *ctx);
  /* Listen for peers; fills addr (<= FLOE_TRANSPORT_ADDR_MAX bytes) to give to them. */
  floe_code (*listen)(void *ctx, void *addr, size_t *addr_len, void **listen_comm);
  floe_code (*connect)(void *ctx, const void *addr, size_t addr_len, void **send_comm);
  floe_code (*accept)(void *listen_comm, void **recv_comm);
  /* Register memory for zero-copy transfer; optional (NULL: no registration needed). */
  floe_code (*reg_mr)(void *comm, void *buf, size_t len, void **mhandle);
  void (*dereg_mr)(void *comm, void *mhandle);
  /* Non-blocking; *request is completed with test(). */
  floe_code (*isend)(void *send_comm, const void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request);
  floe_code (*irecv)(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request);
  /* *done = 1 when complete (the request is then freed), *size = bytes moved. */
  floe_code (*test)(void *request, int *done, size_t *size);
  /* Drive progress; optional for transports with their own threads. */
  floe_code (*progress)(void *ctx);
  /* A file descriptor that becomes readable when progress is possible; optional. */
  floe_code (*get_fd)(void *ctx, int *fd);
  void (*close_send)(void *send_comm);
  void (*close_recv)(void *recv_comm);
  void (*close_listen)(void *listen_comm);
  /* Since 1.3; optional. Withdraws a posted irecv that has not matched a send (an aborted
   * step): FLOE_OK and the request is freed, or FLOE_UNAVAILABLE when it already completed
   * or is completing (test() then finishes it as usual). NULL: a posted irecv stays until
   * it completes or its comm is closed. */
  floe_code (*cancel)(void *request);

  /* Waiting (since 1.4; all optional). A thread that has nothing to do until a request
   * completes sleeps in one of two ways, never by calling progress in a loop:
   *
   *  - With get_fd: call progress and test, then trywait, and poll() the fd only when
   *    trywait answered FLOE_OK. The fd alone is not enough for transports (libfabric's)
   *    that may hold completions or owe progress without it being readable.
   *  - Without an fd (get_fd NULL or failing for this ctx): call progress and test, then
   *    wait; another thread calls interrupt to end that wait early.
   *
   * trywait: FLOE_OK when it is safe to sleep on get_fd's fd now (anything that needs
   * progress will make it readable); FLOE_UNAVAILABLE when progress may be possible at once
   * (call progress and test first, then try again, like libfabric's fi_trywait). Other codes:
   * waiting on the fd is broken; sleep with a bounded timeout. Only for a ctx whose get_fd
   * succeeded. Called from one thread at a time, without locks the transport's own
   * completions might need.
   *
   * wait: blocks until progress may be possible, interrupt is called, or timeout_ms passes
   * (timeout_ms < 0: no limit; 0: do not block). FLOE_OK: woken (possibly spuriously: call
   * progress and test); FLOE_DEADLINE_EXCEEDED: the timeout passed; other codes: waiting is
   * broken. Completions the transport reads while waiting are kept for test(). An interrupt
   * that arrives while nobody waits makes the next wait return at once (no lost wake-up).
   *
   * interrupt: wakes the thread blocked in wait on ctx (or the next one to wait). Thread-safe,
   * callable from any thread between init and finalize, also with the caller's own locks
   * held: it never blocks and never calls back. NULL when wait is NULL. */
  floe_code (*trywait)(void *ctx);
  floe_code (*wait)(void *ctx, int timeout_ms);
  void (*interrupt)(void *ctx);
} FloeTransportFns;

/* ------------------------------------------------------------------------------------ */
/* Collective backends (since 1.5). A backend runs collective operations (all-reduce,
 * all-gather, reduce-scatter, broadcast) among the ranks of a group, each rank a device of
 * some task of the job, on buffers in the memory of its device type (host memory for
 * "CPU"). The core's graph ops (CollectiveReduce, CollectiveGather,
 * CollectiveReduceScatter, CollectiveBcastSend/Recv) resolve the group (which devices, in
 * which rank order), choose a backend (their `communication_hint`, else FLOE_COLLECTIVE,
 * else the core's built-in ring) and call it. Shaped like Gloo's and NCCL's APIs; a
 * backend brings its own network (Gloo's tcp, NCCL's) and meets its peers through the
 * store the core hands it. */

/* FloeReduceOp (how values are combined) is in floe_types.h. */

/* A key-value store shared by the group's ranks (the cluster's coordination service, or a
 * table in the process when every rank is in it), for a backend's rendezvous: each rank
 * publishes its address and reads the others'. Keys are the backend's own (at most 200
 * bytes, printable); the core puts them in a namespace of the group's name and
 * incarnation, so two groups, or a re-formed group, never see each other's keys. Valid
 * from comm_init until comm_free returns; callable from any thread. */
typedef struct FloeCollectiveStore {
  size_t struct_size;
  /* Stores value[0..len) under key (copied; at most 64 KiB). Setting a key twice is
   * FLOE_ALREADY_EXISTS. */
  floe_code (*set)(void *arg, const char *key, const void *value, size_t len);
  /* Waits up to timeout_ms (< 0: the group's timeout) for key: FLOE_OK with *value
   * allocated with host->alloc (the caller frees it with host->free; a 0 byte follows its
   * len bytes), FLOE_DEADLINE_EXCEEDED when it did not come, FLOE_UNAVAILABLE when the
   * store is gone (the chief died). */
  floe_code (*get)(void *arg, const char *key, int64_t timeout_ms, void **value, size_t *len);
  void *arg; /* the core's; pass back unchanged */
  /* Since 1.6 (check FLOE_HAS_FIELD(store, FloeCollectiveStore, erase)): removes key (a key
   * that is not there is no error). The store holds a bounded number of keys (a cluster's
   * coordination service: 4,096): a backend that writes a key per operation (or per batch
   * of them) erases each once every rank has read it. */
  floe_code (*erase)(void *arg, const char *key);
} FloeCollectiveStore;

/* One rank's view of a group; borrowed for comm_init (copy what is kept). */
typedef struct FloeCollectiveGroup {
  size_t struct_size;
  /* Names the group in messages and logs, e.g. "group 7 (incarnation 1)". */
  const char *name;
  int rank;                       /* this rank, 0 <= rank < size */
  int size;                       /* ranks in the group (>= 1) */
  const char *const *devices;     /* devices[r]: rank r's full device name */
  const FloeCollectiveStore *store;
  int64_t timeout_ms;             /* how long a rendezvous or an operation may wait (> 0) */
  /* The host this rank should listen on for its peers (an interface address; "" when the
   * backend should choose): the task's address's host in a cluster, 127.0.0.1 when every
   * rank is in one process. */
  const char *host;
  /* Since 1.6 (check FLOE_HAS_FIELD(group, FloeCollectiveGroup, flags)): what the caller
   * guarantees of the operations it will issue on this comm, FLOE_COLLECTIVE_* bits. */
  uint32_t flags;
} FloeCollectiveGroup;

/* FloeCollectiveGroup.flags (since 1.6). ARGS_VERIFIED: for every operation issued on the
 * comm, every rank issues the same kind, count, dtype, op and root under its tag (checked
 * across the ranks before the operation is issued), so the backend need not compare them
 * itself. The core sets it: it compares an instance's arguments through the store on its
 * first execution and whenever they change, and never issues an operation whose arguments
 * were not found equal on every rank (docs/collectives.md, "How arguments are checked").
 * Without it a backend must expect ranks that disagree, and fail them with a message
 * rather than crash. */
#define FLOE_COLLECTIVE_ARGS_VERIFIED 1u

/* Completion of one operation: code FLOE_OK, or an error with msg (borrowed for the call;
 * may be NULL) saying what failed (the peer that died, the sizes that disagreed). Runs
 * exactly once per operation accepted (the call returned FLOE_OK), on any thread, possibly
 * before the call returns; never while the backend holds a lock it needs to accept
 * another operation. */
typedef void (*FloeCollectiveDoneFn)(void *arg, floe_code code, const char *msg);

typedef struct FloeCollectiveFns {
  size_t struct_size;
  const char *name;         /* "gloo", "nccl": the communication_hint naming it; copied */
  /* Memory of the buffers: NULL or "CPU" for host memory; else a device type ("CUDA").
   * Copied. */
  const char *device_type;
  uint32_t dtypes;          /* FLOE_DTYPE_BIT mask of the element types it reduces */

  floe_code (*init)(const FloeHostApi *host, void **ctx);
  void (*finalize)(void *ctx);
  /* Joins the group as group->rank; blocks until every rank joined (the rendezvous through
   * group->store) or group->timeout_ms passes. On failure writes why into msg[0..msg_len)
   * (NUL-terminated) and returns the code (FLOE_DEADLINE_EXCEEDED: a rank never came). The
   * core calls it on a thread of its own, never on a kernel's. *comm is the backend's,
   * freed with comm_free. */
  floe_code (*comm_init)(void *ctx, const FloeCollectiveGroup *group, void **comm, char *msg,
                         size_t msg_len);
  /* Operations. Non-blocking: FLOE_OK when accepted (done runs later, exactly once), else
   * an error code and done never runs. Buffers are borrowed until done runs; in and out may
   * be the same buffer for all_reduce. `tag` names the operation identically on every rank
   * (the graph op's instance key and its execution count): operations of one comm may be
   * issued concurrently and in a different order on different ranks, and a backend matches
   * them by tag. stream: the device's stream the buffers are ready on (NULL for host
   * memory; also NULL for a device whose work the core does not put on streams: the
   * buffers are then ready in the order of the device's own queue, which a backend of the
   * device's plugin orders its operation after, as the CUDA plugin's nccl does on its
   * compute stream); done means the result is in out. The core hands a backend whose
   * device_type is the node's device type that device's buffers; a backend for host memory
   * gets host buffers (values on other devices are copied through the host).
   *
   * all_reduce: out[i] = op over ranks of in[i], i < count, on every rank.
   * all_gather: out[r * count + i] = in[i] of rank r (out holds size * count elements).
   * reduce_scatter: out[i] = op over ranks of in[rank * count + i] (in holds size * count).
   * broadcast: buf of rank root is copied into buf of every other rank. */
  floe_code (*all_reduce)(void *comm, const void *in, void *out, size_t count, FloeDType dtype,
                          FloeReduceOp op, uint64_t tag, FloeStream *stream,
                          FloeCollectiveDoneFn done, void *done_arg);
  floe_code (*all_gather)(void *comm, const void *in, void *out, size_t count, FloeDType dtype,
                          uint64_t tag, FloeStream *stream, FloeCollectiveDoneFn done,
                          void *done_arg);
  floe_code (*reduce_scatter)(void *comm, const void *in, void *out, size_t count,
                              FloeDType dtype, FloeReduceOp op, uint64_t tag, FloeStream *stream,
                              FloeCollectiveDoneFn done, void *done_arg);
  floe_code (*broadcast)(void *comm, void *buf, size_t count, FloeDType dtype, int root,
                         uint64_t tag, FloeStream *stream, FloeCollectiveDoneFn done,
                         void *done_arg);
  /* Optional. Fails every pending and later operation of comm with FLOE_ABORTED (a rank of
   * the group died, the step was cancelled); never blocks; thread-safe. NULL: the core
   * waits for pending operations to fail on their own (the group's timeout). */
  void (*comm_abort)(void *comm);
  /* Waits for the comm's pending operations to finish (done runs for each), then frees it. */
  void (*comm_free)(void *comm);
} FloeCollectiveFns;

/* ------------------------------------------------------------------------------------ */
/* Registration. */

/* What a plugin says of itself; copied by the core. */
typedef struct FloePluginInfo {
  size_t struct_size;
  const char *name;     /* short name: "cpu", "tpu-sim"; matches FLOE_PLUGINS */
  const char *version;  /* the plugin's own version string */
  uint32_t abi_major;   /* FLOE_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;   /* FLOE_ABI_MINOR the plugin was built with */
} FloePluginInfo;

/* Passed to floe_plugin_init; valid only during that call. The first slots (struct_size,
 * core, declare) are frozen across majors so any plugin can be told its version is
 * refused. */
typedef struct FloePluginRegistrar FloePluginRegistrar;
struct FloePluginRegistrar {
  size_t struct_size;
  void *core; /* opaque; pass back unchanged */

  /* Must be called first. Returns FLOE_ABI_MISMATCH when the major differs: init must then
   * return that code. */
  floe_code (*declare)(FloePluginRegistrar *reg, const FloePluginInfo *info);
  floe_code (*register_device)(FloePluginRegistrar *reg, const FloeDeviceFns *dev);
  floe_code (*register_kernel)(FloePluginRegistrar *reg, const FloeKernelDef *kernel);
  floe_code (*register_op)(FloePluginRegistrar *reg, const FloeOpDef *op);
  floe_code (*register_transport)(FloePluginRegistrar *reg, const FloeTransportFns *transport);
  /* Why init failed or the plugin is unusable here; copied. */
  void (*set_message)(FloePluginRegistrar *reg, const char *fmt, ...);
  /* Called once at runtime shutdown, before device destroy slots. Optional. */
  void (*set_shutdown)(FloePluginRegistrar *reg, void (*shutdown)(void *arg), void *arg);
  /* Since 1.2 (check FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_gradient)): how to
   * differentiate an op. The forward op must be defined (by this plugin or the standard
   * set) and have no gradient yet; grad_op must exist when floe_gradients first uses it.
   * Errors name the op and the spec that is wrong. */
  floe_code (*register_gradient)(FloePluginRegistrar *reg, const FloeGradientDef *grad);
  /* Since 1.5 (check FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_collective)): a
   * collective backend. Its name must be new; every slot but comm_abort is required. */
  floe_code (*register_collective)(FloePluginRegistrar *reg, const FloeCollectiveFns *coll);
};

/* The one entry point every plugin exports. */
typedef floe_code (*FloePluginInitFn)(const FloeHostApi *host, FloePluginRegistrar *reg);
#define FLOE_PLUGIN_INIT_SYMBOL "floe_plugin_init"

/* Convenience for plugins: declare with this header's ABI version (C and C++). */
static inline floe_code floe_plugin_declare_current(FloePluginRegistrar *reg, const char *name,
                                                    const char *version) {
  FloePluginInfo info;
  info.struct_size = sizeof info;
  info.name = name;
  info.version = version;
  info.abi_major = FLOE_ABI_MAJOR;
  info.abi_minor = FLOE_ABI_MINOR;
  return reg->declare(reg, &info);
}
#define FLOE_PLUGIN_DECLARE(reg, plugin_name, plugin_version) \
  floe_plugin_declare_current((reg), (plugin_name), (plugin_version))

/* Convenience for plugins: registers a synchronous kernel of op for device_type with at most
 * one type constraint (constraint_attr NULL: none) and priority 0. create and destroy may be
 * NULL. The registrar copies the definition (strings included); function pointers and
 * user_data must outlive the plugin. */
static inline floe_code floe_plugin_add_kernel(
    FloePluginRegistrar *reg, const char *device_type, const char *op,
    const char *constraint_attr, uint32_t dtypes, uint32_t flags,
    floe_code (*compute)(void *state, FloeKernelContext *ctx),
    floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                        void **state),
    void (*destroy)(void *state), void *user_data) {
  FloeTypeConstraint c;
  FloeKernelDef k;
  unsigned char *zero = (unsigned char *)&k;
  for (size_t i = 0; i < sizeof k; i++) zero[i] = 0; /* no <string.h> needed */
  c.attr = constraint_attr;
  c.dtypes = dtypes;
  k.struct_size = sizeof k;
  k.op = op;
  k.device_type = device_type;
  k.constraints = constraint_attr ? &c : NULL;
  k.num_constraints = constraint_attr ? 1 : 0;
  k.flags = flags;
  k.user_data = user_data;
  k.create = create;
  k.compute = compute;
  k.destroy = destroy;
  return reg->register_kernel(reg, &k);
}

/* Layout pins of ABI 1.0 to 1.7 (x86_64 / aarch64 LP64). Changing one breaks every plugin. */
#if defined(__LP64__) && !defined(__cplusplus)
_Static_assert(sizeof(FloeShape) == 72, "FloeShape layout changed");
_Static_assert(offsetof(FloePluginRegistrar, declare) == 16, "registrar frozen prefix changed");
_Static_assert(offsetof(FloeHostApi, log) == 16, "FloeHostApi prefix changed");
_Static_assert(offsetof(FloeHostApi, ctx_forward_input_slice) == 480,
               "FloeHostApi slots of 1.0 changed (1.1 appends ctx_forward_input_slice)");
_Static_assert(offsetof(FloeDeviceProps, vector_flops) == 344,
               "FloeDeviceProps fields of 1.0 changed (1.3 appends vector_flops)");
_Static_assert(sizeof(FloeDeviceProps) == 360, "FloeDeviceProps layout changed");
_Static_assert(offsetof(FloeHostApi, ctx_report_device_time) == 488,
               "FloeHostApi slots of 1.1 changed (1.3 appends ctx_report_device_time)");
_Static_assert(offsetof(FloeHostApi, ctx_reuse_input) == 496,
               "FloeHostApi slots of 1.3 changed (1.7 appends ctx_reuse_input)");
_Static_assert(sizeof(FloeKernelDef) == 88, "FloeKernelDef layout changed");
_Static_assert(sizeof(FloeOpDef) == 88, "FloeOpDef layout changed");
_Static_assert(sizeof(FloePluginInfo) == 32, "FloePluginInfo layout changed");
_Static_assert(offsetof(FloePluginRegistrar, register_gradient) == 72,
               "FloePluginRegistrar slots of 1.0 changed (1.2 appends register_gradient)");
_Static_assert(sizeof(FloeGradientDef) == 72, "FloeGradientDef layout changed");
_Static_assert(offsetof(FloeTransportFns, close_listen) == 128,
               "FloeTransportFns slots of 1.0 changed");
_Static_assert(offsetof(FloeTransportFns, cancel) == 136,
               "FloeTransportFns slots of 1.3 changed (1.3 appends cancel)");
_Static_assert(offsetof(FloeTransportFns, trywait) == 144,
               "FloeTransportFns slots of 1.3 changed (1.4 appends trywait, wait, interrupt)");
_Static_assert(sizeof(FloeTransportFns) == 168, "FloeTransportFns layout changed");
_Static_assert(offsetof(FloePluginRegistrar, register_collective) == 80,
               "FloePluginRegistrar slots of 1.2 changed (1.5 appends register_collective)");
_Static_assert(sizeof(FloeCollectiveFns) == 104, "FloeCollectiveFns layout changed");
_Static_assert(offsetof(FloeCollectiveGroup, flags) == 56,
               "FloeCollectiveGroup fields of 1.5 changed (1.6 appends flags)");
_Static_assert(sizeof(FloeCollectiveGroup) == 64, "FloeCollectiveGroup layout changed");
_Static_assert(offsetof(FloeCollectiveStore, erase) == 32,
               "FloeCollectiveStore fields of 1.5 changed (1.6 appends erase)");
_Static_assert(sizeof(FloeCollectiveStore) == 40, "FloeCollectiveStore layout changed");
#endif

#ifdef __cplusplus
}
#endif
#endif /* FLOE_PLUGIN_H */
