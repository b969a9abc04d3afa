/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_device.c - one GPU as a Floe device: properties, the caching allocator over
 * cudaMalloc, synchronous copies through pinned staging on their own streams, the
 * stream / event slots, and teardown. See cuda.h for the ordering rules. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

#define BLAS_WORKSPACE ((size_t)32 << 20)

/* ------------------------------------------------------------------------------------ */
/* Properties. */

/* Per SM and clock: FP32 lanes x 2 (FMA), and dense BF16 tensor-core FLOPs, by compute
 * capability. From NVIDIA's architecture whitepapers: H100 SXM 989 TFLOP/s BF16 over 132
 * SMs at 1.83 GHz = 4096 / SM / clock; A100 312 TFLOP/s over 108 SMs at 1.41 GHz = 2048;
 * consumer Ampere / Ada 512. */
static void per_sm_clock(int major, int minor, double *f32, double *bf16, double *f64) {
  int cc = major * 10 + minor;
  *f32 = (cc == 80 || cc < 80) ? 128.0 : 256.0; /* 64 FP32 lanes before GA10x, then 128 */
  if (cc >= 90) {
    *bf16 = 4096.0;
    *f64 = 128.0;
  } else if (cc == 80) {
    *bf16 = 2048.0;
    *f64 = 64.0;
  } else if (cc >= 80) {
    *bf16 = 512.0;
    *f64 = *f32 / 64.0;
  } else {
    *bf16 = 0.0; /* no BF16 tensor cores before Ampere */
    *f64 = cc == 70 ? 64.0 : *f32 / 32.0;
  }
}

static void fill_props(CudaDevice *d, const struct cudaDeviceProp *p, int clock_khz,
                       int mem_khz, int bus_bits) {
  FloeDeviceProps *o = &d->props;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  snprintf(o->type, sizeof o->type, "CUDA");
  snprintf(o->description, sizeof o->description, "%.64s, %d SMs, compute %d.%d, %.1f GiB",
           p->name, p->multiProcessorCount, p->major, p->minor,
           (double)p->totalGlobalMem / (1u << 30));
  o->memory_bytes = p->totalGlobalMem;
  double f32, bf16, f64;
  per_sm_clock(p->major, p->minor, &f32, &bf16, &f64);
  double sm_hz = (double)p->multiProcessorCount * clock_khz * 1e3;
  double vec = sm_hz * f32;
  /* peak_flops is the rate of matrix-class work: MatMul in the configured precision. */
  o->peak_flops[FLOE_F32] = d->matmul == CUDA_MM_F32 || bf16 == 0 ? vec
                            : d->matmul == CUDA_MM_TF32 ? sm_hz * bf16 / 2 /* TF32 = half */
                                                        : sm_hz * bf16;
  o->peak_flops[FLOE_BF16] = bf16 > 0 ? sm_hz * bf16 : vec;
  o->peak_flops[FLOE_F16] = o->peak_flops[FLOE_BF16];
  o->peak_flops[FLOE_F64] = sm_hz * f64;
  o->peak_flops[FLOE_I32] = vec / 2;
  o->peak_flops[FLOE_I64] = vec / 8;
  /* DDR: two transfers per memory clock over the bus. */
  o->memory_bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;
  /* Host links: PCIe 5 x16 on Hopper, 4 before (what pinned copies reach in practice);
   * the core stages device-to-device copies through the host, so peers get half. */
  double pcie = p->major >= 9 ? 50e9 : 24e9;
  o->host_to_device_bandwidth = pcie;
  o->device_to_host_bandwidth = pcie;
  o->peer_bandwidth = pcie / 2;
  o->flags = 0;
  o->ordinal = d->ordinal;
  if (FLOE_HAS_FIELD(o, FloeDeviceProps, launch_overhead)) { /* since 1.3 */
    o->vector_flops = vec;
    o->launch_overhead = 5e-6;
  }
}

static floe_code get_props(void *state, FloeDeviceProps *props) {
  CudaDevice *d = state;
  size_t keep = props->struct_size < sizeof d->props ? props->struct_size : sizeof d->props;
  memcpy((char *)props + sizeof props->struct_size, (const char *)&d->props + sizeof(size_t),
         keep - sizeof(size_t));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Memory. */

static int segment_alloc(void *arg, size_t bytes, uintptr_t *base) {
  CudaDevice *d = arg;
  void *p = NULL;
  if (cudaSetDevice(d->ordinal) != cudaSuccess) return 1;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return 1;
  }
  *base = (uintptr_t)p;
  return 0;
}

static void segment_free(void *arg, uintptr_t base, size_t bytes) {
  CudaDevice *d = arg;
  (void)bytes;
  cudaSetDevice(d->ordinal);
  cudaFree((void *)base); /* waits for the device: queued kernels may still use it */
}

static void *meta_alloc(size_t n) { return cu_host->alloc(n); }
static void meta_free(void *p) { cu_host->free(p); }

static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  CudaDevice *d = state;
  uintptr_t p = 0;
  int rc = cuda_alloc_get(d->alloc, bytes, alignment, &p);
  if (rc == CUDA_ALLOC_INVALID) return FLOE_INVALID_ARGUMENT;
  if (rc != CUDA_ALLOC_OK) return FLOE_NO_MEMORY;
  *ptr = (void *)p;
  return FLOE_OK;
}

static void dev_deallocate(void *state, void *ptr, size_t bytes) {
  CudaDevice *d = state;
  (void)bytes;
  if (ptr && cuda_alloc_put(d->alloc, (uintptr_t)ptr) != CUDA_ALLOC_OK)
    cu_host->log(FLOE_LOG_ERROR, "cuda:%d: deallocate of %p, which this device did not hand "
                 "out (or freed twice)", d->ordinal, ptr);
}

/* ------------------------------------------------------------------------------------ */
/* Synchronous copies. */

static floe_code cuda_code(cudaError_t e, int ordinal, const char *what) {
  if (e == cudaSuccess) return FLOE_OK;
  (void)cudaGetLastError();
  cu_host->log(FLOE_LOG_WARNING, "cuda:%d: %s: %s", ordinal, what, cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? FLOE_NO_MEMORY : FLOE_INTERNAL;
}

/* Makes `s` wait for everything enqueued on the compute stream so far. */
static cudaError_t after_compute(CudaDevice *d, cudaStream_t s) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return e;
  e = cudaEventRecord(ev, d->compute);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ev, 0);
  cudaEventDestroy(ev); /* released once the wait is satisfied */
  return e;
}

/* Makes the compute stream wait for everything enqueued on `s` so far. */
static cudaError_t before_compute(CudaDevice *d, cudaStream_t s) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return e;
  e = cudaEventRecord(ev, s);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(d->compute, ev, 0);
  cudaEventDestroy(ev);
  return e;
}

static int stage_take(CudaStage *st) {
  pthread_mutex_lock(&st->mu);
  int slot;
  for (;;) {
    for (slot = 0; slot < CUDA_STAGE_SLOTS && st->busy[slot]; slot++) {
    }
    if (slot < CUDA_STAGE_SLOTS) break;
    pthread_cond_wait(&st->cv, &st->mu);
  }
  st->busy[slot] = true;
  pthread_mutex_unlock(&st->mu);
  return slot;
}

static void stage_give(CudaStage *st, int slot) {
  pthread_mutex_lock(&st->mu);
  st->busy[slot] = false;
  pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

/* Pageable host -> device in chunks through two pinned buffers: the memcpy into one
 * overlaps the DMA out of the other. */
static cudaError_t h2d_staged(CudaDevice *d, char *dst, const char *src, size_t n) {
  int slot = stage_take(&d->stage);
  cudaError_t e = cudaSuccess;
  size_t k = 0;
  for (size_t off = 0; off < n && e == cudaSuccess; off += CUDA_STAGE_CHUNK, k++) {
    size_t len = n - off < CUDA_STAGE_CHUNK ? n - off : CUDA_STAGE_CHUNK;
    int b = (int)(k & 1);
    if (k >= 2 && (e = cudaEventSynchronize(d->stage.done[slot][b])) != cudaSuccess) break;
    memcpy(d->stage.chunk[slot][b], src + off, len);
    e = cudaMemcpyAsync(dst + off, d->stage.chunk[slot][b], len, cudaMemcpyHostToDevice, d->h2d);
    if (e == cudaSuccess) e = cudaEventRecord(d->stage.done[slot][b], d->h2d);
  }
  cudaError_t s = cudaStreamSynchronize(d->h2d); /* also when a chunk failed: buffers idle */
  stage_give(&d->stage, slot);
  return e != cudaSuccess ? e : s;
}

/* Device -> pageable host: chunk k's DMA runs while chunk k-1 is copied out. */
static cudaError_t d2h_staged(CudaDevice *d, char *dst, const char *src, size_t n) {
  int slot = stage_take(&d->stage);
  cudaError_t e = cudaSuccess;
  size_t chunks = (n + CUDA_STAGE_CHUNK - 1) / CUDA_STAGE_CHUNK;
  for (size_t k = 0; k <= chunks && e == cudaSuccess; k++) {
    if (k < chunks) { /* issue chunk k */
      size_t off = k * CUDA_STAGE_CHUNK, len = n - off < CUDA_STAGE_CHUNK ? n - off : CUDA_STAGE_CHUNK;
      int b = (int)(k & 1);
      e = cudaMemcpyAsync(d->stage.chunk[slot][b], src + off, len, cudaMemcpyDeviceToHost, d->d2h);
      if (e == cudaSuccess) e = cudaEventRecord(d->stage.done[slot][b], d->d2h);
    }
    if (k >= 1 && e == cudaSuccess) { /* drain chunk k-1 */
      size_t off = (k - 1) * CUDA_STAGE_CHUNK, len = n - off < CUDA_STAGE_CHUNK ? n - off : CUDA_STAGE_CHUNK;
      int b = (int)((k - 1) & 1);
      e = cudaEventSynchronize(d->stage.done[slot][b]);
      if (e == cudaSuccess) memcpy(dst + off, d->stage.chunk[slot][b], len);
    }
  }
  cudaError_t s = cudaStreamSynchronize(d->d2h);
  stage_give(&d->stage, slot);
  return e != cudaSuccess ? e : s;
}

static floe_code copy_h2d(void *state, void *dst, const void *src, size_t n) {
  CudaDevice *d = state;
  if (n == 0) return FLOE_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = after_compute(d, d->h2d); /* dst may be read by queued kernels */
  if (e == cudaSuccess) e = h2d_staged(d, dst, src, n);
  /* Already complete; the event keeps "a copy, then a kernel" explicit on the streams. */
  if (e == cudaSuccess) e = before_compute(d, d->h2d);
  return cuda_code(e, d->ordinal, "copy to the device");
}

static floe_code copy_d2h(void *state, void *dst, const void *src, size_t n) {
  CudaDevice *d = state;
  if (n == 0) return FLOE_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = after_compute(d, d->d2h); /* src is written by queued kernels */
  if (e == cudaSuccess) e = d2h_staged(d, dst, src, n);
  return cuda_code(e, d->ordinal, "copy from the device");
}

static floe_code copy_d2d(void *state, void *dst, const void *src, size_t n) {
  CudaDevice *d = state;
  if (n == 0) return FLOE_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = after_compute(d, d->d2d);
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d->d2d);
  if (e == cudaSuccess) e = before_compute(d, d->d2d);
  if (e == cudaSuccess) e = cudaStreamSynchronize(d->d2d);
  return cuda_code(e, d->ordinal, "copy within the device");
}

/* Ordered on the caller's stream, and with the compute stream on both sides: the copy sees
 * finished kernels' results, and kernels enqueued later see the copy's bytes. */
static floe_code copy_async(CudaDevice *d, FloeStream *fs, void *dst, const void *src, size_t n,
                            enum cudaMemcpyKind kind) {
  cudaStream_t s = (cudaStream_t)fs;
  if (n == 0) return FLOE_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = after_compute(d, s);
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, n, kind, s);
  if (e == cudaSuccess) e = before_compute(d, s);
  return cuda_code(e, d->ordinal, "asynchronous copy");
}

static floe_code copy_h2d_async(void *st, FloeStream *s, void *dst, const void *src, size_t n) {
  return copy_async(st, s, dst, src, n, cudaMemcpyHostToDevice);
}
static floe_code copy_d2h_async(void *st, FloeStream *s, void *dst, const void *src, size_t n) {
  return copy_async(st, s, dst, src, n, cudaMemcpyDeviceToHost);
}
static floe_code copy_d2d_async(void *st, FloeStream *s, void *dst, const void *src, size_t n) {
  return copy_async(st, s, dst, src, n, cudaMemcpyDeviceToDevice);
}

static floe_code dev_memset(void *state, void *dst, int value, size_t n) {
  CudaDevice *d = state;
  if (n == 0) return FLOE_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaMemsetAsync(dst, value, n, d->compute); /* ordered with kernels */
  return cuda_code(e, d->ordinal, "memset");
}

/* ------------------------------------------------------------------------------------ */
/* Streams and events: FloeStream / FloeEvent are cudaStream_t / cudaEvent_t. */

static floe_code stream_create(void *state, FloeStream **out) {
  CudaDevice *d = state;
  cudaStream_t s;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) *out = (FloeStream *)s;
  return cuda_code(e, d->ordinal, "stream_create");
}

static void stream_destroy(void *state, FloeStream *s) {
  CudaDevice *d = state;
  cudaSetDevice(d->ordinal);
  cudaStreamDestroy((cudaStream_t)s);
}

static floe_code stream_synchronize(void *state, FloeStream *s) {
  CudaDevice *d = state;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)s);
  return cuda_code(e, d->ordinal, "stream_synchronize");
}

static floe_code event_create(void *state, FloeEvent **out) {
  CudaDevice *d = state;
  cudaEvent_t ev;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) *out = (FloeEvent *)ev;
  return cuda_code(e, d->ordinal, "event_create");
}

static void event_destroy(void *state, FloeEvent *ev) {
  CudaDevice *d = state;
  cudaSetDevice(d->ordinal);
  cudaEventDestroy((cudaEvent_t)ev);
}

static floe_code event_record(void *state, FloeEvent *ev, FloeStream *s) {
  CudaDevice *d = state;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s);
  return cuda_code(e, d->ordinal, "event_record");
}

static floe_code stream_wait_event(void *state, FloeStream *s, FloeEvent *ev) {
  CudaDevice *d = state;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)ev, 0);
  return cuda_code(e, d->ordinal, "stream_wait_event");
}

static floe_code event_query(void *state, FloeEvent *ev) {
  CudaDevice *d = state;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaEventQuery((cudaEvent_t)ev);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return FLOE_UNAVAILABLE;
  }
  return cuda_code(e, d->ordinal, "event_query");
}

static floe_code event_synchronize(void *state, FloeEvent *ev) {
  CudaDevice *d = state;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e == cudaSuccess) e = cudaEventSynchronize((cudaEvent_t)ev);
  return cuda_code(e, d->ordinal, "event_synchronize");
}

/* ------------------------------------------------------------------------------------ */
/* Life. */

static void log_stats(CudaDevice *d) {
  CudaAllocStats s;
  cuda_alloc_stats(d->alloc, &s);
  cu_host->log(FLOE_LOG_INFO,
               "cuda:%d allocator: in use %llu B (peak %llu B), reserved %llu B in %llu "
               "segments, largest free block %llu B, fragmentation %.3f, %llu allocations, "
               "%llu segment allocations, %llu out-of-memory retries, %llu refusals",
               d->ordinal, (unsigned long long)s.in_use, (unsigned long long)s.peak_in_use,
               (unsigned long long)s.reserved, (unsigned long long)s.num_segments,
               (unsigned long long)s.largest_free, s.fragmentation,
               (unsigned long long)s.num_allocs, (unsigned long long)s.segment_allocs,
               (unsigned long long)s.oom_retries, (unsigned long long)s.failures);
}

/* Every live device of the process, all runtimes' (cuda_device_find). */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static CudaDevice *live_head;

int cuda_device_find(int ordinal, CudaDevice **out) {
  int n = 0;
  pthread_mutex_lock(&live_mu);
  for (CudaDevice *d = live_head; d; d = d->live_next)
    if (d->ordinal == ordinal) {
      *out = d;
      n++;
    }
  pthread_mutex_unlock(&live_mu);
  return n;
}

static void device_free(CudaDevice *d) {
  pthread_mutex_lock(&live_mu);
  for (CudaDevice **p = &live_head; *p; p = &(*p)->live_next)
    if (*p == d) {
      *p = d->live_next;
      break;
    }
  pthread_mutex_unlock(&live_mu);
  cudaSetDevice(d->ordinal);
  cudaDeviceSynchronize();
  if (d->alloc) {
    log_stats(d);
    cuda_alloc_delete(d->alloc);
  }
  for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
    for (int b = 0; b < 2; b++) {
      if (d->stage.chunk[i][b]) cudaFreeHost(d->stage.chunk[i][b]);
      if (d->stage.done[i][b]) cudaEventDestroy(d->stage.done[i][b]);
    }
  if (d->blas) cublasDestroy(d->blas);
  if (d->blas_workspace) cudaFree(d->blas_workspace);
  if (d->dnn) cudnnDestroy(d->dnn);
  cudaStream_t *streams[] = {&d->compute, &d->h2d, &d->d2h, &d->d2d};
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++)
    if (*streams[i]) cudaStreamDestroy(*streams[i]);
  pthread_mutex_destroy(&d->stage.mu);
  pthread_cond_destroy(&d->stage.cv);
  pthread_mutex_destroy(&d->blas_mu);
  pthread_mutex_destroy(&d->dnn_mu);
  cu_host->free(d);
}

static void dev_destroy(void *state) { device_free(state); }

static CudaMatmulMode matmul_mode(void) {
  const char *m = getenv("FLOE_CUDA_MATMUL");
  if (m && !strcmp(m, "tf32")) return CUDA_MM_TF32;
  if (m && !strcmp(m, "bf16")) return CUDA_MM_BF16;
  return CUDA_MM_F32;
}

/* Everything the device holds besides memory: on failure, why names the call. */
static int device_setup(CudaDevice *d, char *why, size_t len) {
  cudaError_t e;
#define TRY(call)                                                                            \
  if ((e = (call)) != cudaSuccess) {                                                         \
    snprintf(why, len, "%s: %s", #call, cudaGetErrorString(e));                              \
    return -1;                                                                               \
  }
  TRY(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
  TRY(cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking));
  TRY(cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking));
  TRY(cudaStreamCreateWithFlags(&d->d2d, cudaStreamNonBlocking));
  for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
    for (int b = 0; b < 2; b++) {
      TRY(cudaHostAlloc(&d->stage.chunk[i][b], CUDA_STAGE_CHUNK, cudaHostAllocPortable));
      TRY(cudaEventCreateWithFlags(&d->stage.done[i][b], cudaEventDisableTiming));
    }
  TRY(cudaMalloc(&d->blas_workspace, BLAS_WORKSPACE));
#undef TRY
  cublasStatus_t bs = cublasCreate(&d->blas);
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(d->blas, d->compute);
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(d->blas, d->blas_workspace, BLAS_WORKSPACE);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(why, len, "cuBLAS setup: %s", cublasGetStatusString(bs));
    return -1;
  }
  cudnnStatus_t ds = cudnnCreate(&d->dnn);
  if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(d->dnn, d->compute);
  if (ds != CUDNN_STATUS_SUCCESS) {
    snprintf(why, len, "cuDNN setup: %s", cudnnGetErrorString(ds));
    return -1;
  }
  CudaSegmentSource src = {segment_alloc, segment_free, meta_alloc, meta_free, d};
  if (!(d->alloc = cuda_alloc_new(&src))) {
    snprintf(why, len, "out of host memory for the allocator");
    return -1;
  }
  return 0;
}

CudaDevice *cuda_device_new(int ordinal, char *why, size_t len) {
  CudaDevice *d = cu_host->alloc(sizeof *d);
  if (!d) {
    snprintf(why, len, "out of memory");
    return NULL;
  }
  memset(d, 0, sizeof *d);
  d->ordinal = ordinal;
  pthread_mutex_init(&d->stage.mu, NULL);
  pthread_cond_init(&d->stage.cv, NULL);
  pthread_mutex_init(&d->blas_mu, NULL);
  pthread_mutex_init(&d->dnn_mu, NULL);
  d->matmul = matmul_mode();
  const char *prof = getenv("FLOE_CUDA_PROFILE");
  d->profile = prof && *prof && strcmp(prof, "0") != 0;

  struct cudaDeviceProp p;
  int clock = 0, mem = 0, bus = 0;
  cudaError_t e = cudaSetDevice(ordinal);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&p, ordinal);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, ordinal);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&mem, cudaDevAttrMemoryClockRate, ordinal);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, ordinal);
  if (e != cudaSuccess) {
    snprintf(why, len, "reading the properties of GPU %d: %s", ordinal, cudaGetErrorString(e));
    goto err_free;
  }
  snprintf(d->name, sizeof d->name, "%.95s", p.name);
  fill_props(d, &p, clock, mem, bus);
  if (device_setup(d, why, len) != 0) goto err_free;
  pthread_mutex_lock(&live_mu);
  d->live_next = live_head;
  live_head = d;
  pthread_mutex_unlock(&live_mu);
  return d;

err_free:
  (void)cudaGetLastError();
  device_free(d);
  return NULL;
}

void cuda_device_fns(CudaDevice *d, FloeDeviceFns *f) {
  memset(f, 0, sizeof *f);
  f->struct_size = sizeof *f;
  f->state = d;
  f->get_props = get_props;
  f->allocate = dev_allocate;
  f->deallocate = dev_deallocate;
  f->copy_h2d = copy_h2d;
  f->copy_d2h = copy_d2h;
  f->copy_d2d = copy_d2d;
  f->copy_h2d_async = copy_h2d_async;
  f->copy_d2h_async = copy_d2h_async;
  f->copy_d2d_async = copy_d2d_async;
  f->stream_create = stream_create;
  f->stream_destroy = stream_destroy;
  f->stream_synchronize = stream_synchronize;
  f->event_create = event_create;
  f->event_destroy = event_destroy;
  f->event_record = event_record;
  f->stream_wait_event = stream_wait_event;
  f->event_query = event_query;
  f->event_synchronize = event_synchronize;
  f->memset = dev_memset;
  f->destroy = dev_destroy;
}
