/* SPDX-License-Identifier: Apache-2.0 */
/* arena.c - a chip's HBM: one anonymous mapping of the whole capacity, carved best-fit.
 *
 * The mapping is MAP_NORESERVE, so a 16 GiB chip costs address space only; pages are
 * committed when first written and stay committed for reuse (a real HBM does not shrink
 * either). Free blocks are kept in host memory, in address order, so freeing coalesces with
 * both neighbours in one pass and no bookkeeping ever sits where a kernel could overwrite
 * it. Every block is a multiple of TPU_GRANULE bytes, so the size handed back to free
 * rounds exactly as it did at allocation. Allocation scans all free blocks: a training step
 * holds tens of live buffers, not thousands, and best fit keeps the arena unfragmented for
 * the repeating sizes of a step. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tpusim.h"

#define TPU_GRANULE ((size_t)256) /* block size unit and minimum alignment */

struct TpuFree {
  size_t off, size; /* bytes from the arena's base; a multiple of TPU_GRANULE */
  TpuFree *next;    /* the next free block in address order */
};

int tpu_arena_init(TpuArena *a, size_t capacity) {
  memset(a, 0, sizeof *a);
  capacity = capacity / TPU_GRANULE * TPU_GRANULE;
  if (capacity == 0) return EINVAL;
  void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return errno ? errno : ENOMEM;
  TpuFree *f = tpu_host->alloc(sizeof *f);
  if (!f) {
    munmap(p, capacity);
    return ENOMEM;
  }
  *f = (TpuFree){0, capacity, NULL};
  a->base = p;
  a->capacity = capacity;
  a->free_list = f;
  pthread_mutex_init(&a->lock, NULL);
  return 0;
}

void tpu_arena_destroy(TpuArena *a) {
  if (!a->base) return;
  for (TpuFree *f = a->free_list, *next; f; f = next) {
    next = f->next;
    tpu_host->free(f);
  }
  munmap(a->base, a->capacity);
  pthread_mutex_destroy(&a->lock);
  memset(a, 0, sizeof *a);
}

static size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - TPU_GRANULE) return 0;
  return (bytes + TPU_GRANULE - 1) / TPU_GRANULE * TPU_GRANULE;
}

void *tpu_arena_alloc(TpuArena *a, size_t bytes, size_t alignment) {
  size_t size = round_size(bytes);
  if (size == 0 || size > a->capacity) return NULL;
  if (alignment < TPU_GRANULE) alignment = TPU_GRANULE;
  if (alignment & (alignment - 1)) return NULL;
  /* A spare node for the split made below, taken before the lock (host->alloc may be slow). */
  TpuFree *spare = tpu_host->alloc(sizeof *spare);
  void *result = NULL;
  TpuFree *removed = NULL; /* a block used whole leaves the list; its node is freed below */
  pthread_mutex_lock(&a->lock);
  TpuFree *best = NULL, *best_prev = NULL, *prev = NULL;
  size_t best_pad = 0;
  for (TpuFree *f = a->free_list; f; prev = f, f = f->next) {
    size_t start = (f->off + alignment - 1) & ~(alignment - 1);
    size_t pad = start - f->off;
    if (pad > f->size || f->size - pad < size) continue;
    if (!best || f->size < best->size) {
      best = f;
      best_prev = prev;
      best_pad = pad;
      if (f->size == size && pad == 0) break; /* exact */
    }
  }
  if (!best) goto out_unlock;
  size_t tail = best->size - best_pad - size;
  /* A block splits into [pad][allocated][tail]; pad and tail stay free. */
  if (best_pad && tail) {
    if (!spare) goto out_unlock;
    TpuFree *t = spare;
    spare = NULL;
    *t = (TpuFree){best->off + best_pad + size, tail, best->next};
    result = a->base + best->off + best_pad;
    best->size = best_pad;
    best->next = t;
  } else if (best_pad) {
    result = a->base + best->off + best_pad;
    best->size = best_pad;
  } else if (tail) {
    result = a->base + best->off;
    best->off += size;
    best->size = tail;
  } else {
    result = a->base + best->off;
    if (best_prev) best_prev->next = best->next;
    else a->free_list = best->next;
    removed = best;
  }
  a->in_use += size;
  if (a->in_use > a->peak) a->peak = a->in_use;
out_unlock:
  pthread_mutex_unlock(&a->lock);
  if (spare) tpu_host->free(spare);
  if (removed) tpu_host->free(removed);
  return result;
}

void tpu_arena_free(TpuArena *a, void *p, size_t bytes) {
  if (!p || !tpu_arena_holds(a, p, 1)) return; /* not ours: never link foreign memory in */
  size_t off = (size_t)((char *)p - a->base), size = round_size(bytes);
  if (size == 0 || size > a->capacity - off) return;
  TpuFree *node = tpu_host->alloc(sizeof *node);
  pthread_mutex_lock(&a->lock);
  TpuFree *prev = NULL, *next = a->free_list;
  while (next && next->off < off) {
    prev = next;
    next = next->next;
  }
  /* A block overlapping a free one is a double free: ignored rather than corrupting. */
  bool overlaps = (prev && prev->off + prev->size > off) || (next && off + size > next->off);
  if (overlaps) goto out_unlock;
  a->in_use -= size <= a->in_use ? size : a->in_use;
  bool join_prev = prev && prev->off + prev->size == off;
  bool join_next = next && off + size == next->off;
  if (join_prev && join_next) {
    prev->size += size + next->size;
    prev->next = next->next;
    tpu_host->free(next); /* host->free takes no lock of ours: safe under the arena's */
  } else if (join_prev) {
    prev->size += size;
  } else if (join_next) {
    next->off = off;
    next->size += size;
  } else if (node) {
    *node = (TpuFree){off, size, next};
    if (prev) prev->next = node;
    else a->free_list = node;
    node = NULL;
  } /* else: no node for the bookkeeping; the block is lost to this arena, never reused */
out_unlock:
  pthread_mutex_unlock(&a->lock);
  if (node) tpu_host->free(node);
}
