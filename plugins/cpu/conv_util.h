/* SPDX-License-Identifier: Apache-2.0 */
/* conv_util.h - what conv.c and conv_grad.c share: the window attributes and geometry of
 * the convolution and pooling ops (TensorFlow's rules), and oneDNN primitives built once per
 * shape and cached in a node's kernel state. Internal to floe-cpu.so. */
#ifndef FLOE_CPU_CONV_UTIL_H
#define FLOE_CPU_CONV_UTIL_H

#include <dnnl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

/* ------------------------------------------------------------------------------------ */
/* Window attributes and geometry. */

typedef struct CpuConvAttrs {
  bool nchw, same;
  int64_t stride[2], dilation[2]; /* H, W */
  int64_t ksize[2];               /* pooling window (H, W); 0 for convolutions */
} CpuConvAttrs;

/* Reads data_format, padding, strides and, for convolutions, dilations or, for pooling,
 * ksize from the node's attributes, as Conv2D / MaxPool define them. Errors are recorded on
 * init (naming the attribute and its value) and returned. */
floe_code cpu_conv_parse_attrs(const FloeHostApi *host, FloeKernelInit *init, bool pooling,
                               CpuConvAttrs *a);

/* Geometry of one call, in logical (N, C, H, W) terms. */
typedef struct CpuConvGeo {
  int64_t n, c, h, w; /* input */
  int64_t o, kh, kw;  /* output channels (= c for pooling) and window */
  int64_t oh, ow;     /* output */
  int64_t pad_t, pad_b, pad_l, pad_r;
} CpuConvGeo;

/* Sets g's output size and padding from its input size, window and a's strides and
 * dilations (TensorFlow's SAME / VALID rules; SAME puts the odd padding pixel after).
 * Returns false when a VALID window is larger than the input. */
bool cpu_conv_geo_finish(const CpuConvAttrs *a, CpuConvGeo *g);

/* The dims of logical (n, c, h, w) in the data format's order. */
static inline void cpu_conv_dims(bool nchw, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t out[4]) {
  out[0] = n;
  out[nchw ? 1 : 3] = c;
  out[nchw ? 2 : 1] = h;
  out[nchw ? 3 : 2] = w;
}

/* "strides 2x2, dilations 1x1, SAME" for error messages; returns buf. */
const char *cpu_conv_attrs_str(const CpuConvAttrs *a, char *buf, size_t len);

/* ------------------------------------------------------------------------------------ */
/* oneDNN primitives cached per shape.
 *
 * A node's state holds one CpuDnnlCache. Each call names its shape by a key; the first call
 * with a key builds the primitive (through the caller's build function) and the reorders
 * between the tensors' layouts and the layouts the primitive chose, and later calls reuse
 * them. Several computes may use one cache at once (the lock guards only the bookkeeping);
 * scratchpads are per call. */

#define CPU_DNNL_SLOTS 8    /* distinct shapes kept per node */
#define CPU_DNNL_KEY_LEN 14 /* the N-d conv keys on 13 sizes and flags */
#define CPU_DNNL_MAX_ARGS 4

/* One argument of a primitive. The build function sets arg, output, keep and user; the
 * cache fills md and reorder. */
typedef struct CpuDnnlArg {
  int arg;                 /* DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, ... */
  bool output;             /* written by the primitive (else read) */
  bool keep;               /* an input whose reordered form is kept while its bytes stay the
                            * same (a filter in inference); at most one per primitive */
  bool inout;              /* an output the primitive also reads (a sum post-op): its tensor
                            * holds the addend when the call starts */
  int64_t keep_tag;        /* kept inputs of equal layouts but different tags (parts of one
                            * filter) are kept apart */
  dnnl_memory_desc_t user; /* the tensor's layout */
  dnnl_memory_desc_t md;   /* the primitive's layout */
  dnnl_primitive_t reorder; /* user -> md for inputs, md -> user for outputs; NULL if equal */
  dnnl_primitive_t reorder_in; /* user -> md for an inout output with a reorder */
} CpuDnnlArg;

/* Creates the primitive descriptor *pd on eng with attr (scratchpad mode is set) and fills
 * args[0..*num_args) (arg, output, keep, user; at most CPU_DNNL_MAX_ARGS). On failure
 * returns the status and sets *what to the step that failed ("convolution descriptor").
 * arg is the caller's build_arg. */
typedef dnnl_status_t (*CpuDnnlBuildFn)(const void *arg, dnnl_engine_t eng,
                                        const_dnnl_primitive_attr_t attr,
                                        dnnl_primitive_desc_t *pd, CpuDnnlArg *args,
                                        int *num_args, const char **what);

typedef struct CpuDnnlPrim CpuDnnlPrim;
typedef struct CpuDnnlKeep CpuDnnlKeep;
#define CPU_DNNL_KEEPS 4 /* kept inputs per node (one per pair of layouts) */

typedef struct CpuDnnlCache {
  dnnl_engine_t engine;
  /* The kept input never changes while its address stays the same (the kernel knows it is a
   * Const's value): it is matched by address, not by comparing its bytes. Set once, before
   * the first run. */
  bool keep_by_address;
  pthread_mutex_t lock; /* guards slots, keeps, clock and the primitives' idle contexts */
  CpuDnnlPrim *slots[CPU_DNNL_SLOTS];
  CpuDnnlKeep *keeps[CPU_DNNL_KEEPS]; /* the first NULL ends the list */
  uint64_t clock;
} CpuDnnlCache;

/* Creates the engine; on failure records the error on init and returns its code. The cache
 * is released with cpu_dnnl_cache_destroy. */
floe_code cpu_dnnl_cache_init(CpuDnnlCache *c, const FloeHostApi *host, FloeKernelInit *init);
void cpu_dnnl_cache_destroy(CpuDnnlCache *c);

/* Runs the primitive of key (built with build(build_arg, ...) the first time) on the tensors
 * data[i] (borrowed, in the layout args[i].user the build function gave them): inputs are
 * reordered in where needed, outputs reordered out, and the call returns when the results
 * are in place. op names the primitive in error messages. Errors go to ctx; ctx_lock (NULL
 * outside cpu_dnnl_for_batch) serialises the calls into ctx of concurrent shards. */
floe_code cpu_dnnl_run(CpuDnnlCache *c, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                       const char *op,
                       const int64_t key[CPU_DNNL_KEY_LEN], CpuDnnlBuildFn build,
                       const void *build_arg, void *const *data);

/* A batch of images cut into shards that run at once on the shared pool, each through a
 * primitive built for its own (smaller) batch and run on one OpenMP thread. oneDNN's
 * OpenMP team per call fights the other kernels of a step for the cores (every kernel of the
 * step that runs at the same time brings its own team); shards on the pool run wherever a
 * thread is free, and all on the caller when none is.
 *
 * cpu_dnnl_batch_shards(n): how many shards a batch of n is cut into (1 with one thread or
 * one image: then the primitive gets the whole batch and OpenMP's threads).
 * cpu_dnnl_for_batch runs fn for images [first, first + count) of shard `shard` (0 ..
 * shards - 1; shard 0 takes the first images), every shard once, and returns the first
 * failure (each failure is recorded on ctx). fn passes ctx_lock on to cpu_dnnl_run and takes
 * it around any other call into ctx (NULL when the batch is not cut). */
typedef floe_code (*CpuBatchShardFn)(void *arg, FloeKernelContext *ctx,
                                     pthread_mutex_t *ctx_lock, int64_t first, int64_t count,
                                     int shard);
int cpu_dnnl_batch_shards(int64_t n);
floe_code cpu_dnnl_for_batch(FloeKernelContext *ctx, int64_t n, int shards, CpuBatchShardFn fn,
                             void *arg);

/* A convolution descriptor (forward when prop is a forward kind, else backward data or
 * weights per which) for geometry g and attributes a with the given memory descriptors;
 * bias (forward only) may be NULL. */
typedef enum CpuConvPass { CPU_CONV_FORWARD, CPU_CONV_BACKWARD_DATA, CPU_CONV_BACKWARD_WEIGHTS }
    CpuConvPass;
dnnl_status_t cpu_dnnl_conv_desc(dnnl_convolution_desc_t *cd, CpuConvPass pass,
                                 dnnl_prop_kind_t prop, const CpuConvAttrs *a,
                                 const CpuConvGeo *g, const dnnl_memory_desc_t *src,
                                 const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                 const dnnl_memory_desc_t *dst);

/* Maps a oneDNN failure to a Floe error on ctx: "oneDNN <what> failed: <status>". */
floe_code cpu_dnnl_fail(FloeKernelContext *ctx, dnnl_status_t st, const char *what);

#endif
