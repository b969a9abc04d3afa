/* SPDX-License-Identifier: Apache-2.0 */
/* base.h - libfloe's base layer (core/base/): memory with fault injection, status, dtypes,
 * tensors and their buffers, the memory of any device and copies between places, attribute
 * values, .npy files, the thread pool. It calls nothing above it; every other layer's
 * header includes this one. */
#ifndef FLOE__LAYER_BASE_H
#define FLOE__LAYER_BASE_H

#include <sys/types.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "floe/floe.h"
#include "floe/floe_plugin.h"

#define FLOE__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FLOE__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Internals that libfloe-onnx.so uses: exported from libfloe.so (nothing else may use them,
 * and they carry no stability promise); every other floe__ symbol is hidden. */
#if defined(__GNUC__)
#define FLOE__SHARED __attribute__((visibility("default")))
#else
#define FLOE__SHARED
#endif

/* ------------------------------------------------------------------------------------ */
/* alloc.c: every core allocation goes through these so tests can make the Nth fail. */
FLOE__SHARED void *floe__malloc(size_t n);
FLOE__SHARED void *floe__calloc(size_t count, size_t size);
FLOE__SHARED void *floe__realloc(void *p, size_t n);
FLOE__SHARED void floe__free(void *p);
FLOE__SHARED char *floe__strdup(const char *s);
FLOE__SHARED char *floe__strndup(const char *s, size_t n);
/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF): the length of the
 * sequence at s[0..n) (n >= 1), or 0 when it is invalid. */
size_t floe__utf8_seq_len(const uint8_t *s, size_t n);
/* n when s[0..n) is valid UTF-8, else the offset of the first byte that is not. */
size_t floe__utf8_check(const char *s, size_t n);
/* malloc'd printf; NULL on failure. */
FLOE__SHARED char *floe__asprintf(const char *fmt, ...) FLOE__PRINTF(1, 2);
FLOE__SHARED char *floe__vasprintf(const char *fmt, va_list ap);
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
FLOE__SHARED void floe__status_prefix(FloeStatus *s, const char *fmt, ...)
    FLOE__PRINTF(2, 3);
/* Copy code and message from src to dst (dst may be NULL). Returns src's code. */
floe_code floe__status_copy(FloeStatus *dst, const FloeStatus *src);
/* The one errno -> status mapping of every file reader and writer: sets st (may be NULL)
 * to the code of err (ENOENT NOT_FOUND; EACCES, EPERM, EROFS PERMISSION_DENIED; ENOSPC,
 * EDQUOT, EFBIG, EMFILE, ENFILE RESOURCE_EXHAUSTED; ENOMEM NO_MEMORY; EISDIR, ENOTDIR,
 * ENAMETOOLONG, ELOOP INVALID_ARGUMENT; EEXIST ALREADY_EXISTS; EIO DATA_LOSS; else UNKNOWN)
 * and the message fmt ... ": " strerror(err). Returns the code. */
FLOE__SHARED floe_code floe__status_from_errno(FloeStatus *st, int err, const char *fmt, ...)
    FLOE__PRINTF(3, 4);
/* ------------------------------------------------------------------------------------ */
/* file.c: whole-file reads and replacements for every reader and writer of the core. */
/* "a FIFO", "a directory", "a character device", ... for messages. Static string. */
const char *floe__file_kind(mode_t mode);
/* Opens path for reading without blocking on a FIFO; anything but a regular file is
 * INVALID_ARGUMENT naming what it is. On OK *fd (caller closes) and *size are set. */
FLOE__SHARED floe_code floe__file_open_read(const char *path, int *fd, uint64_t *size,
                                            FloeStatus *st);
/* The whole of the regular file path in *buf (floe__malloc'd, caller frees with floe__free;
 * one spare byte past *len) and *len. Errors name the path. */
FLOE__SHARED floe_code floe__file_read_all(const char *path, uint8_t **buf, size_t *len,
                                           FloeStatus *st);
/* RESOURCE_EXHAUSTED (naming path and the limit) when writing bytes to one file would pass
 * the process's file-size limit (ulimit -f), which would otherwise raise SIGXFSZ. */
FLOE__SHARED floe_code floe__file_check_size_limit(const char *path, uint64_t bytes,
                                                   FloeStatus *st);
/* The file that writing path replaces: path itself, or the file a symbolic link at path
 * names (written through). An existing directory, FIFO, device or socket there is
 * INVALID_ARGUMENT: never replaced. *target is floe__malloc'd (caller frees). */
FLOE__SHARED floe_code floe__file_write_target(const char *path, char **target, FloeStatus *st);
/* Replaces the file at path (see floe__file_write_target) with buf[0..len) atomically: a
 * temporary file beside it, written, fsynced and renamed over it; on any error the old file
 * is as it was and the temporary file is gone. Borrows buf. */
FLOE__SHARED floe_code floe__file_replace(const char *path, const void *buf, size_t len,
                                          FloeStatus *st);

/* Used when a FloeStatus cannot be allocated: a static status with code NO_MEMORY. */
#define FLOE__OOM_MESSAGE "out of memory"

/* ------------------------------------------------------------------------------------ */
/* dtype.c */
/* Parse "f32", "float32", "float", "i64", "int64", "bool", ... (same as floe_dtype_from_name). */
/* Name of a type set mask, e.g. "{f32,f64}", into buf. */
char *floe__dtype_mask_str(uint32_t mask, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* tensor.c */
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

FLOE__SHARED void floe__attrs_init(FloeAttrs *a);
FLOE__SHARED void floe__attrs_clear(FloeAttrs *a); /* frees everything */
/* Deep copy. */
FLOE__SHARED floe_code floe__attrs_copy(FloeAttrs *dst, const FloeAttrs *src,
                                      FloeStatus *st);
/* Find by name; NULL if absent. */
const FloeAttrValue *floe__attrs_get(const FloeAttrs *a, const char *name);
/* Set (replacing); takes ownership of *v's owned members (v is left zeroed). */
FLOE__SHARED floe_code floe__attrs_set(FloeAttrs *a, const char *name, FloeAttrValue *v,
                                     FloeStatus *st);
floe_code floe__attr_value_copy(FloeAttrValue *dst, const FloeAttrValue *src, FloeStatus *st);
void floe__attr_value_clear(FloeAttrValue *v);
bool floe__attr_value_equal(const FloeAttrValue *a, const FloeAttrValue *b);
const char *floe__attr_kind_name(FloeAttrKind k); /* "int", "list(int)", ... */
/* Printable value (short; long lists and tensors abbreviated) into buf. */
char *floe__attr_value_str(const FloeAttrValue *v, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* Devices as places for memory (the runtime layer finds and names them). */
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
  int id;                   /* index in rt->devices; a remote device: num_devices + its index
                             * among the remote ones (placer arrays hold both) */
  /* The task that holds it: "" and -1 for a runtime that is no task of a cluster. */
  char job[64];
  int task;
  /* A device of another task of the cluster (runtime.c: floe__runtime_set_remote): props
   * and names only, no plugin and no functions; nothing runs on it in this process. */
  bool remote;
  uint64_t remote_incarnation; /* what floe__device_incarnation says for it there */
  double link_bandwidth;    /* bytes/s from this task to it (0: the cost model's default) */
  double link_latency;      /* seconds per transfer from this task to it (0: default) */
} FloeDevice;

/* device_mem.c */
/* Allocate on a device (NULL: host). */
floe_code floe__device_alloc(FloeDevice *dev, size_t bytes, void **ptr, FloeStatus *st);
void floe__device_free(FloeDevice *dev, void *ptr, size_t bytes);
/* Copy between any two places (NULL device = host memory). */
floe_code floe__device_copy(FloeDevice *dst_dev, void *dst, FloeDevice *src_dev, const void *src,
                            size_t n, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* threadpool.c */
FloeThreadPool *floe__pool_new(int num_threads, FloeStatus *st);
void floe__pool_free(FloeThreadPool *p);  /* joins workers after draining queued tasks */
floe_code floe__pool_schedule(FloeThreadPool *p, FloeTaskFn fn, void *arg);
void floe__pool_parallel_for(FloeThreadPool *p, int64_t n, int64_t cost_per_unit,
                             FloeParallelFn fn, void *arg);
int floe__pool_size(const FloeThreadPool *p);
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

/* ------------------------------------------------------------------------------------ */
/* The host table plugins and shape functions receive (FloeHostApi): assembled at the top
 * (core/host.c) from functions of every layer; the one internal symbol every layer may use.
 * Process lifetime. */
const FloeHostApi *floe__host_api(void);

#endif /* FLOE__LAYER_BASE_H */
