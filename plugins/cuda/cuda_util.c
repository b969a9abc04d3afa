/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_util.c - plumbing shared by the CUDA kernels: the per-call device context and its
 * error checks, synchronous reads of small inputs, broadcasting plans, registration. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cuda.h"

const FloeHostApi *cu_host;

floe_code cu_fail_cuda(FloeKernelContext *ctx, cudaError_t e, const char *what) {
  (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
  return cu_host->ctx_set_error(ctx,
                                e == cudaErrorMemoryAllocation ? FLOE_RESOURCE_EXHAUSTED
                                                               : FLOE_INTERNAL,
                                "%s failed on the GPU: %s: %s", what, cudaGetErrorName(e),
                                cudaGetErrorString(e));
}

floe_code cu_fail_blas(FloeKernelContext *ctx, cublasStatus_t e, const char *what) {
  return cu_host->ctx_set_error(ctx,
                                e == CUBLAS_STATUS_ALLOC_FAILED ? FLOE_RESOURCE_EXHAUSTED
                                                                : FLOE_INTERNAL,
                                "%s failed in cuBLAS: %s (%s)", what, cublasGetStatusName(e),
                                cublasGetStatusString(e));
}

floe_code cu_fail_dnn(FloeKernelContext *ctx, cudnnStatus_t e, const char *what) {
  char detail[256] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  return cu_host->ctx_set_error(ctx,
                                e == CUDNN_STATUS_ALLOC_FAILED ? FLOE_RESOURCE_EXHAUSTED
                                                               : FLOE_INTERNAL,
                                "%s failed in cuDNN: %s%s%s", what, cudnnGetErrorString(e),
                                detail[0] ? ": " : "", detail);
}

floe_code cu_begin(FloeKernelContext *ctx, CuCall *c) {
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->dev = cu_host->ctx_device_state(ctx);
  cudaError_t e = cudaSetDevice(c->dev->ordinal); /* executor threads serve every device */
  if (e != cudaSuccess) return cu_fail_cuda(ctx, e, "selecting the GPU");
  if (!c->dev->profile) return FLOE_OK;
  if ((e = cudaEventCreate(&c->start)) != cudaSuccess ||
      (e = cudaEventCreate(&c->stop)) != cudaSuccess ||
      (e = cudaEventRecord(c->start, c->dev->compute)) != cudaSuccess) {
    if (c->start) cudaEventDestroy(c->start);
    if (c->stop) cudaEventDestroy(c->stop);
    c->start = c->stop = NULL;
    return cu_fail_cuda(ctx, e, "creating profiling events");
  }
  return FLOE_OK;
}

/* Waits for the call's kernels: an error inside one (an illegal address) is then pinned on
 * this node instead of surfacing at a later call, as it does without profiling. */
static floe_code report_time(CuCall *c, const char *what) {
  float ms = 0;
  cudaError_t e = cudaEventRecord(c->stop, c->dev->compute);
  if (e == cudaSuccess) e = cudaEventSynchronize(c->stop);
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, c->start, c->stop);
  if (e != cudaSuccess) return cu_fail_cuda(c->ctx, e, what);
  if (FLOE_HAS_FIELD(cu_host, FloeHostApi, ctx_report_device_time))
    cu_host->ctx_report_device_time(c->ctx, (int64_t)((double)ms * 1e6));
  return FLOE_OK;
}

floe_code cu_end(CuCall *c, int launch_rc, const char *what) {
  floe_code rc = FLOE_OK;
  if (launch_rc == CU_UNSUPPORTED)
    rc = cu_host->ctx_set_error(c->ctx, FLOE_UNIMPLEMENTED,
                                "%s has no CUDA kernel for these dtypes (run the node on the "
                                "CPU)",
                                what);
  else if (launch_rc != 0)
    rc = cu_fail_cuda(c->ctx, (cudaError_t)launch_rc, what);
  if (c->start) {
    if (rc == FLOE_OK) rc = report_time(c, what);
    cudaEventDestroy(c->start);
    cudaEventDestroy(c->stop);
    c->start = c->stop = NULL;
  }
  return rc;
}

void cu_abort(CuCall *c) {
  if (!c->start) return;
  cudaEventDestroy(c->start);
  cudaEventDestroy(c->stop);
  c->start = c->stop = NULL;
}

floe_code cu_read_device(CuCall *c, void *dst, const void *src, size_t bytes, const char *what) {
  if (bytes == 0) return FLOE_OK;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->dev->compute);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->dev->compute);
  return e == cudaSuccess ? FLOE_OK : cu_fail_cuda(c->ctx, e, what);
}

floe_code cu_read_index_input(CuCall *c, int i, const char *what, int64_t *out, int max,
                              int *n) {
  const FloeTensor *t = cu_host->ctx_input(c->ctx, i);
  FloeDType dt = cu_host->tensor_dtype(t);
  int64_t count = cu_host->tensor_num_elements(t);
  if ((dt != FLOE_I32 && dt != FLOE_I64) || cu_host->tensor_rank(t) > 1)
    return cu_host->ctx_set_error(c->ctx, FLOE_INVALID_ARGUMENT,
                                  "%s must be an i32 or i64 scalar or 1-D tensor, got %s of "
                                  "rank %d",
                                  what, cu_host->dtype_name(dt), cu_host->tensor_rank(t));
  if (max > 64) max = 64; /* the host buffer below */
  if (count > max)
    return cu_host->ctx_set_error(c->ctx, FLOE_INVALID_ARGUMENT,
                                  "%s has %" PRId64 " elements; at most %d are allowed", what,
                                  count, max);
  union {
    int32_t i32[64];
    int64_t i64[64];
  } buf;
  floe_code rc = cu_read_device(c, &buf, cu_host->tensor_data(t),
                                (size_t)count * cu_host->dtype_size(dt), what);
  if (rc != FLOE_OK) return rc;
  for (int64_t k = 0; k < count; k++) out[k] = dt == FLOE_I32 ? buf.i32[k] : buf.i64[k];
  *n = (int)count;
  return FLOE_OK;
}

char *cu_shape_str(char *buf, size_t len, int rank, const int64_t *dims) {
  size_t at = 0;
  at += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, i ? "," : "", dims[i]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

/* ------------------------------------------------------------------------------------ */
/* Broadcasting. */

floe_code cu_broadcast(FloeKernelContext *ctx, int n, const FloeTensor *const *in, int *rank,
                       int64_t *dims, CuBcast *p) {
  int ranks[CU_MAX_INPUTS] = {0};
  const int64_t *d[CU_MAX_INPUTS] = {NULL};
  int r = 0;
  for (int k = 0; k < n; k++) {
    ranks[k] = cu_host->tensor_rank(in[k]);
    d[k] = cu_host->tensor_dims(in[k]);
    if (ranks[k] > r) r = ranks[k];
  }
  int ok = 1;
  for (int i = 0; i < r && ok; i++) {
    int64_t size = 1;
    for (int k = 0; k < n; k++) {
      int id = i - (r - ranks[k]);
      int64_t s = id >= 0 ? d[k][id] : 1;
      if (s == size || s == 1) continue;
      if (size == 1)
        size = s;
      else
        ok = 0;
    }
    dims[i] = size;
  }
  if (ok && cu_broadcast_plan(n, ranks, d, r, dims, p) == 0) {
    *rank = r;
    return FLOE_OK;
  }
  char msg[3 * CU_SHAPE_STR_MAX + 16] = "";
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    if (k) at += (size_t)snprintf(msg + at, sizeof msg - at, " vs ");
    char s[CU_SHAPE_STR_MAX];
    at += (size_t)snprintf(msg + at, sizeof msg - at, "%s", cu_shape_str(s, sizeof s, ranks[k], d[k]));
  }
  return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                "incompatible shapes for broadcasting: %s", msg);
}

floe_code cu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data) {
  return floe_plugin_add_kernel(reg, "CUDA", op, constraint_attr, dtypes, flags, compute, create,
                                destroy, user_data);
}
