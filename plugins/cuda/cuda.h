/* SPDX-License-Identifier: Apache-2.0 */
/* cuda.h - shared declarations of the CUDA plugin (internal to floe-cuda.so).
 *
 * Execution model. Each device has one compute stream; every kernel of the device is
 * enqueued on it and compute returns without waiting (the GPU runs behind the host). That
 * one stream orders everything: a kernel reading another's output is enqueued after it;
 * memory freed to the caching allocator (cuda_alloc.h) can be handed out again at once,
 * since its next user is enqueued later on the same stream. The synchronous copies of the
 * device slots use their own streams (h2d, d2h, d2d): each first waits for an event
 * recorded on the compute stream (so it sees finished results and never overwrites memory
 * a queued kernel still reads), then the compute stream waits for an event recorded after
 * the copy (a copy then a kernel), and the copy returns when its bytes are in place.
 * Kernels that need host values (axes, shapes, labels to check) copy them back with a
 * synchronous read: the only places a kernel waits for the GPU.
 *
 * FLOE_CUDA_PROFILE=1 times each kernel with events, waits for it, and reports the time
 * with ctx_report_device_time (slow: for profiling and debugging). Without it a fault inside
 * a kernel (CUDA errors are asynchronous) is reported by a later call on the device, which
 * may belong to another node; with it, by the node whose kernel faulted. */
#ifndef FLOE_CUDA_H
#define FLOE_CUDA_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <floe/floe_plugin.h>

#include "cu_kernels.h"
#include "cu_plan.h"
#include "cuda_alloc.h"

/* The plugin's one exported symbol (plugin.c). */
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg);

/* The host table, set once by floe_plugin_init. */
extern const FloeHostApi *cu_host;

/* MatMul precision (FLOE_CUDA_MATMUL). */
typedef enum CudaMatmulMode { CUDA_MM_F32, CUDA_MM_TF32, CUDA_MM_BF16 } CudaMatmulMode;

/* Pinned staging for synchronous copies of pageable host memory: CUDA_STAGE_SLOTS pairs
 * of chunks, a copy holding one pair (double buffering) at a time. */
#define CUDA_STAGE_CHUNK ((size_t)4 << 20)
#define CUDA_STAGE_SLOTS 2

typedef struct CudaStage {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *chunk[CUDA_STAGE_SLOTS][2]; /* cudaHostAlloc'd */
  cudaEvent_t done[CUDA_STAGE_SLOTS][2];
  bool busy[CUDA_STAGE_SLOTS];
} CudaStage;

/* One GPU: FloeDeviceFns.state. Created by cuda_device_new, freed by its destroy slot. */
typedef struct CudaDevice {
  int ordinal;
  char name[96];
  FloeDeviceProps props; /* filled once at creation */
  cudaStream_t compute, h2d, d2h, d2d;
  CudaAlloc *alloc;
  CudaStage stage;
  pthread_mutex_t blas_mu; /* the cuBLAS handle's math mode is set per call */
  cublasHandle_t blas;
  void *blas_workspace;    /* cublasSetWorkspace, so GEMMs never allocate */
  pthread_mutex_t dnn_mu;  /* cuDNN handles are not thread-safe */
  cudnnHandle_t dnn;
  CudaMatmulMode matmul;
  bool profile;            /* FLOE_CUDA_PROFILE */
  bool log_stats;          /* FLOE_LOG_LEVEL >= info: allocator statistics at shutdown */
  struct CudaDevice *live_next; /* the process's list of live devices (cuda_device_find) */
} CudaDevice;

/* Probes device `ordinal` and builds its state (streams, allocator, staging, handles).
 * NULL with a reason in why (len bytes) on failure. */
CudaDevice *cuda_device_new(int ordinal, char *why, size_t len);
/* Fills the device table for d (slots of cuda_device.c). */
void cuda_device_fns(CudaDevice *d, FloeDeviceFns *fns);
/* The live devices of the process (every runtime's) of GPU `ordinal`: returns how many,
 * *out the last one found (borrowed: it lives until its runtime's shutdown). */
int cuda_device_find(int ordinal, CudaDevice **out);

/* ------------------------------------------------------------------------------------ */
/* Kernel plumbing (cuda_util.c). */

/* One kernel invocation: the device, made current on the calling thread, and (profiling)
 * its events. cu_begin records errors on ctx. */
typedef struct CuCall {
  CudaDevice *dev;
  FloeKernelContext *ctx;
  cudaEvent_t start, stop; /* profiling only */
} CuCall;

floe_code cu_begin(FloeKernelContext *ctx, CuCall *c);
/* Checks a launcher's result (0, a cudaError_t or CU_UNSUPPORTED naming `what`), and when
 * profiling waits for the kernel and reports its time. Returns FLOE_OK or the recorded
 * error. Call exactly once per successful cu_begin. */
floe_code cu_end(CuCall *c, int launch_rc, const char *what);
/* Ends a begun call that launched nothing (an error was recorded): no time is reported. */
void cu_abort(CuCall *c);

/* Records "what failed: <CUDA error name>: <string>" on ctx; returns FLOE_INTERNAL
 * (FLOE_RESOURCE_EXHAUSTED for cudaErrorMemoryAllocation). */
floe_code cu_fail_cuda(FloeKernelContext *ctx, cudaError_t e, const char *what);
floe_code cu_fail_blas(FloeKernelContext *ctx, cublasStatus_t e, const char *what);
floe_code cu_fail_dnn(FloeKernelContext *ctx, cudnnStatus_t e, const char *what);

/* Copies input i (an integer tensor of at most max elements: axes, shapes, a depth) to the
 * host as int64, waiting for the compute stream. *n = its element count. */
floe_code cu_read_index_input(CuCall *c, int i, const char *what, int64_t *out, int max,
                              int *n);
/* Copies `bytes` of device memory at src into host dst after the compute stream's work. */
floe_code cu_read_device(CuCall *c, void *dst, const void *src, size_t bytes, const char *what);

/* "[2,3]" of dims into buf (returns buf). */
#define CU_SHAPE_STR_MAX 192
char *cu_shape_str(char *buf, size_t len, int rank, const int64_t *dims);

/* NumPy broadcasting of n (<= 3) tensors: the output shape and a collapsed plan. Records
 * "incompatible shapes for broadcasting: [2,3] vs [4]" on ctx on failure. */
floe_code cu_broadcast(FloeKernelContext *ctx, int n, const FloeTensor *const *in, int *rank,
                       int64_t *dims, CuBcast *p);
/* Registers a kernel of device type "CUDA" (see cpu_add_kernel). */
floe_code cu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                        uint32_t dtypes, uint32_t flags,
                        floe_code (*compute)(void *state, FloeKernelContext *ctx),
                        floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                            void *user_data, void **state),
                        void (*destroy)(void *state), void *user_data);

/* Each kernel file registers its kernels; the first failure is returned. */
floe_code cu_register_elementwise(FloePluginRegistrar *reg); /* k_elementwise.c */
floe_code cu_register_array(FloePluginRegistrar *reg);       /* k_array.c */
floe_code cu_register_reduce(FloePluginRegistrar *reg);      /* k_reduce.c */
floe_code cu_register_blas(FloePluginRegistrar *reg);        /* k_blas.c */
floe_code cu_register_dnn(FloePluginRegistrar *reg);         /* k_dnn.c */
#ifdef HAVE_NCCL
/* The "nccl" collective backend (nccl.c): registered when libnccl.so.2 loads (FLOE_OK
 * without registering when it does not, or the core has no collective slot). */
floe_code cu_register_nccl(FloePluginRegistrar *reg);
#endif

#endif
