/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_alloc.h - the CPU device's allocator: aligned host memory, large blocks cached. */
#ifndef FLOE_CPU_ALLOC_H
#define FLOE_CPU_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef struct CpuAllocator CpuAllocator;

typedef struct CpuAllocStats {
  uint64_t hits, misses; /* large allocations served from the cache / from the system */
  size_t cached_bytes;   /* bytes held for reuse now */
} CpuAllocStats;

/* NULL on out of memory. Free with cpu_allocator_free_all (releases every cached block). */
CpuAllocator *cpu_allocator_new(void);
void cpu_allocator_free_all(CpuAllocator *a);
/* Memory of at least `bytes` aligned to max(alignment, 64); NULL on failure. Return it with
 * cpu_allocator_put and the same `bytes`. */
void *cpu_allocator_get(CpuAllocator *a, size_t bytes, size_t alignment);
void cpu_allocator_put(CpuAllocator *a, void *ptr, size_t bytes);
CpuAllocStats cpu_allocator_stats(CpuAllocator *a);

#endif
