/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_alloc.h - the CUDA device's caching best-fit allocator, as pure logic over an abstract
 * "segment source" (cudaMalloc / cudaFree in the plugin, a fake address space in the unit
 * test: tests/core/test_cuda_alloc.c). It never dereferences the addresses it hands out, so
 * it compiles with plain gcc and runs without a GPU.
 *
 * Memory comes from the source in segments (2 MiB for small requests, 20 MiB or the rounded
 * request for large ones) and is cut into blocks: a request takes the smallest free block
 * that fits (best fit over size-class bins), split when the rest is worth keeping; a freed
 * block merges with free neighbours of its segment and stays cached for the next request.
 * Small (<= 1 MiB) and large requests use separate segments, so small tensors never
 * fragment the segments of large ones (the split of PyTorch's caching allocator). When the
 * source is out of memory, fully free cached segments are given back and the request tried
 * once more.
 *
 * Stream safety is the caller's: a block is reusable the moment it is freed, which is right
 * when every use of device memory is ordered on one stream (the plugin's compute stream;
 * copy streams wait on it), as cuda_device.c arranges.
 *
 * Thread-safe: every call takes the allocator's mutex. */
#ifndef FLOE_CUDA_ALLOC_H
#define FLOE_CUDA_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Granularity of blocks and the alignment the source must give segment bases (cudaMalloc
 * guarantees 256 bytes). */
#define CUDA_ALLOC_QUANTUM ((size_t)256)
/* Requests up to this size come from small segments. */
#define CUDA_ALLOC_SMALL_MAX ((size_t)1 << 20)
#define CUDA_ALLOC_SMALL_SEGMENT ((size_t)2 << 20)
#define CUDA_ALLOC_LARGE_SEGMENT ((size_t)20 << 20)
/* Large requests below this take a whole CUDA_ALLOC_LARGE_SEGMENT; above, their own
 * segment rounded to 2 MiB. */
#define CUDA_ALLOC_MEDIUM_MAX ((size_t)10 << 20)

/* Where segments come from. alloc returns 0 and sets *base (aligned to CUDA_ALLOC_QUANTUM),
 * or non-zero when out of memory; free gives a segment back (called only for segments with
 * no block in use, or by cuda_alloc_delete). meta_alloc / meta_free hold the allocator's
 * own bookkeeping (host memory). The struct is copied by cuda_alloc_new; arg is borrowed
 * and must outlive the allocator. */
typedef struct CudaSegmentSource {
  int (*alloc)(void *arg, size_t bytes, uintptr_t *base);
  void (*free)(void *arg, uintptr_t base, size_t bytes);
  void *(*meta_alloc)(size_t bytes);
  void (*meta_free)(void *p);
  void *arg;
} CudaSegmentSource;

typedef struct CudaAllocStats {
  uint64_t in_use;         /* bytes of blocks handed out (rounded sizes) */
  uint64_t requested;      /* bytes asked for by the blocks in use */
  uint64_t peak_in_use;    /* highest in_use so far */
  uint64_t reserved;       /* bytes of segments held from the source */
  uint64_t free_bytes;     /* reserved - in_use: cached, reusable */
  uint64_t largest_free;   /* the largest free block */
  double fragmentation;    /* 1 - largest_free / free_bytes (0 when nothing is free) */
  uint64_t num_segments;   /* held now */
  uint64_t num_allocs, num_frees;   /* calls that succeeded */
  uint64_t segment_allocs; /* source allocations (cache misses) */
  uint64_t oom_retries;    /* times cached segments were given back to retry a request */
  uint64_t failures;       /* requests refused for lack of memory */
} CudaAllocStats;

typedef struct CudaAlloc CudaAlloc;

enum { CUDA_ALLOC_OK = 0, CUDA_ALLOC_NO_MEMORY = 1, CUDA_ALLOC_INVALID = 2 };

/* NULL when meta_alloc fails. Free with cuda_alloc_delete. */
CudaAlloc *cuda_alloc_new(const CudaSegmentSource *src);
/* Gives every segment back to the source (blocks still in use included: the caller is
 * shutting down) and frees the allocator. NULL is a no-op. */
void cuda_alloc_delete(CudaAlloc *a);
/* A block of at least `bytes` (0 counts as 1) aligned to `alignment` (a power of two; up to
 * CUDA_ALLOC_QUANTUM costs nothing, more is served from a larger block). Returns
 * CUDA_ALLOC_OK and sets *out, CUDA_ALLOC_NO_MEMORY (nothing changed but the failure count),
 * or CUDA_ALLOC_INVALID for a bad alignment or an absurd size. The block is the caller's
 * until cuda_alloc_put. */
int cuda_alloc_get(CudaAlloc *a, size_t bytes, size_t alignment, uintptr_t *out);
/* Returns a block from cuda_alloc_get. CUDA_ALLOC_INVALID (and nothing changes) for an
 * address that is not a block in use (a double free). */
int cuda_alloc_put(CudaAlloc *a, uintptr_t ptr);
/* Gives fully free segments back to the source; returns the bytes released. */
size_t cuda_alloc_release_cached(CudaAlloc *a);
/* A consistent snapshot. */
void cuda_alloc_stats(CudaAlloc *a, CudaAllocStats *s);
/* Walks every segment and free list and checks their invariants (blocks tile each segment,
 * free neighbours are merged, bins are sorted and hold exactly the free blocks, counters
 * add up). 0 when they hold, else the number of the first broken rule. For tests. */
int cuda_alloc_check(CudaAlloc *a);

#endif
