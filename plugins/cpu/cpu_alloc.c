/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_alloc.c - host memory for the CPU device, with a cache of large blocks.
 *
 * Large buffers (activations, gradients) are freed and asked for again at the same sizes
 * every step. glibc returns big blocks to the kernel (munmap), so each step would pay a page
 * fault per 4 KiB touched; keeping freed large blocks for reuse removes that cost. Sizes
 * round up to quarter powers of two (at most 25% slack), so a block serves any request of
 * its class. The cache is bounded and is emptied before an allocation is reported failed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_alloc.h"

enum { CACHE_MIN_BYTES = 64 * 1024, ALIGN = 64, NUM_CLASSES = 4 * 64 };

typedef struct FreeBlock {
  struct FreeBlock *next;
} FreeBlock;

struct CpuAllocator {
  pthread_mutex_t lock;
  FreeBlock *free[NUM_CLASSES];
  size_t cached_bytes, max_cached_bytes;
  CpuAllocStats stats;
};

/* Class index and the size it rounds up to: 2^k * (4 + q) / 4, q in 0..3. */
static int size_class(size_t bytes, size_t *rounded) {
  int k = 63 - __builtin_clzll((unsigned long long)bytes);
  size_t base = (size_t)1 << k;
  size_t quarter = base / 4;
  size_t q = (bytes - base + quarter - 1) / quarter; /* 0..4 */
  if (q == 4) {
    k++;
    q = 0;
    base <<= 1;
    quarter = base / 4;
  }
  *rounded = base + q * quarter;
  return k * 4 + (int)q;
}

CpuAllocator *cpu_allocator_new(void) {
  CpuAllocator *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  pthread_mutex_init(&a->lock, NULL);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t ram = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : (1ull << 32);
  a->max_cached_bytes = (size_t)(ram / 8 < (2ull << 30) ? ram / 8 : (2ull << 30));
  return a;
}

/* Frees every cached block. Caller holds the lock. */
static void drain_locked(CpuAllocator *a) {
  for (int c = 0; c < NUM_CLASSES; c++) {
    while (a->free[c]) {
      FreeBlock *b = a->free[c];
      a->free[c] = b->next;
      free(b);
    }
  }
  a->cached_bytes = 0;
}

void cpu_allocator_free_all(CpuAllocator *a) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  drain_locked(a);
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

void *cpu_allocator_get(CpuAllocator *a, size_t bytes, size_t alignment) {
  if (alignment < ALIGN) alignment = ALIGN;
  if (bytes < CACHE_MIN_BYTES || alignment > ALIGN) {
    size_t n = (bytes + alignment - 1) / alignment * alignment;
    return aligned_alloc(alignment, n ? n : alignment);
  }
  size_t rounded;
  int c = size_class(bytes, &rounded);
  pthread_mutex_lock(&a->lock);
  FreeBlock *b = a->free[c];
  if (b) {
    a->free[c] = b->next;
    a->cached_bytes -= rounded;
    a->stats.hits++;
  } else {
    a->stats.misses++;
  }
  pthread_mutex_unlock(&a->lock);
  if (b) return b;
  void *p = aligned_alloc(ALIGN, rounded);
  if (!p) { /* give the cache back to the system and try once more */
    pthread_mutex_lock(&a->lock);
    drain_locked(a);
    pthread_mutex_unlock(&a->lock);
    p = aligned_alloc(ALIGN, rounded);
  }
  return p;
}

void cpu_allocator_put(CpuAllocator *a, void *ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes < CACHE_MIN_BYTES) {
    free(ptr);
    return;
  }
  size_t rounded;
  int c = size_class(bytes, &rounded);
  pthread_mutex_lock(&a->lock);
  if (a->cached_bytes + rounded <= a->max_cached_bytes) {
    FreeBlock *b = ptr;
    b->next = a->free[c];
    a->free[c] = b;
    a->cached_bytes += rounded;
    ptr = NULL;
  }
  pthread_mutex_unlock(&a->lock);
  free(ptr); /* over the bound: back to the system */
}

CpuAllocStats cpu_allocator_stats(CpuAllocator *a) {
  pthread_mutex_lock(&a->lock);
  CpuAllocStats s = a->stats;
  s.cached_bytes = a->cached_bytes;
  pthread_mutex_unlock(&a->lock);
  return s;
}
