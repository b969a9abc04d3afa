/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_alloc.c - caching best-fit allocator over a segment source (see cuda_alloc.h).
 * Plain C: no CUDA header, so the unit test builds it with gcc on any machine. */
#include "cuda_alloc.h"

#include <pthread.h>
#include <string.h>

#define NUM_BINS 64
enum { POOL_SMALL, POOL_LARGE, NUM_POOLS };

typedef struct Segment Segment;

/* A run of bytes inside a segment; blocks of one segment tile it in address order. */
typedef struct Block {
  uintptr_t addr;
  size_t size;
  struct Block *prev, *next;         /* neighbours in the segment (NULL at its ends) */
  struct Block *bin_prev, *bin_next; /* free: its bin's list, sorted by (size, addr) */
  struct Block *hash_next;           /* in use: chain of the address table */
  Segment *seg;
  uintptr_t user;                    /* in use: the address handed out (aligned) */
  size_t requested;                  /* in use: bytes asked for */
  int free;
} Block;

struct Segment {
  uintptr_t base;
  size_t size;
  int pool;
  Block *first;
  Segment *prev, *next; /* all segments of the allocator */
};

typedef struct Pool {
  Block *bins[NUM_BINS]; /* bins[b]: free blocks with floor(log2(size)) == b */
} Pool;

struct CudaAlloc {
  pthread_mutex_t mu;
  CudaSegmentSource src;
  Pool pools[NUM_POOLS];
  Segment *segments;
  Block **table; /* blocks in use by user address; table_size a power of two */
  size_t table_size, table_count;
  CudaAllocStats st;
};

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static int bin_of(size_t size) { return 63 - __builtin_clzll((unsigned long long)size); }

/* ---------------------------------------------------------------------------------- */
/* Free lists. */

static void bin_insert(CudaAlloc *a, Block *b) {
  Block **head = &a->pools[b->seg->pool].bins[bin_of(b->size)];
  Block *prev = NULL, *cur = *head;
  while (cur && (cur->size < b->size || (cur->size == b->size && cur->addr < b->addr))) {
    prev = cur;
    cur = cur->bin_next;
  }
  b->bin_prev = prev;
  b->bin_next = cur;
  if (cur) cur->bin_prev = b;
  if (prev)
    prev->bin_next = b;
  else
    *head = b;
}

static void bin_remove(CudaAlloc *a, Block *b) {
  Block **head = &a->pools[b->seg->pool].bins[bin_of(b->size)];
  if (b->bin_prev)
    b->bin_prev->bin_next = b->bin_next;
  else
    *head = b->bin_next;
  if (b->bin_next) b->bin_next->bin_prev = b->bin_prev;
  b->bin_prev = b->bin_next = NULL;
}

/* The smallest free block of the pool holding at least `need` bytes. Lists are sorted, so
 * the first fit of need's bin is the best there; any block of a higher bin is larger, and
 * the head of the first non-empty one is the smallest of them. */
static Block *best_fit(CudaAlloc *a, int pool, size_t need) {
  Pool *p = &a->pools[pool];
  for (Block *b = p->bins[bin_of(need)]; b; b = b->bin_next)
    if (b->size >= need) return b;
  for (int i = bin_of(need) + 1; i < NUM_BINS; i++)
    if (p->bins[i]) return p->bins[i];
  return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Address table of blocks in use. */

static size_t hash_addr(uintptr_t p, size_t size) {
  uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 32) & (size - 1);
}

static int table_grow(CudaAlloc *a) {
  size_t n = a->table_size ? a->table_size * 2 : 256;
  Block **t = a->src.meta_alloc(n * sizeof *t);
  if (!t) return -1;
  memset(t, 0, n * sizeof *t);
  for (size_t i = 0; i < a->table_size; i++) {
    Block *b = a->table[i];
    while (b) {
      Block *next = b->hash_next;
      size_t h = hash_addr(b->user, n);
      b->hash_next = t[h];
      t[h] = b;
      b = next;
    }
  }
  if (a->table) a->src.meta_free(a->table);
  a->table = t;
  a->table_size = n;
  return 0;
}

static void table_insert(CudaAlloc *a, Block *b) {
  size_t h = hash_addr(b->user, a->table_size);
  b->hash_next = a->table[h];
  a->table[h] = b;
  a->table_count++;
}

static Block *table_take(CudaAlloc *a, uintptr_t user) {
  if (!a->table_size) return NULL;
  Block **pp = &a->table[hash_addr(user, a->table_size)];
  for (; *pp; pp = &(*pp)->hash_next) {
    if ((*pp)->user != user) continue;
    Block *b = *pp;
    *pp = b->hash_next;
    b->hash_next = NULL;
    a->table_count--;
    return b;
  }
  return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Segments. */

static size_t segment_size(int pool, size_t need) {
  if (pool == POOL_SMALL) return CUDA_ALLOC_SMALL_SEGMENT;
  if (need < CUDA_ALLOC_MEDIUM_MAX) return CUDA_ALLOC_LARGE_SEGMENT;
  return round_up(need, (size_t)2 << 20);
}

/* A new segment holding one free block (binned). NULL when the source or meta memory is
 * out. */
static Block *segment_new(CudaAlloc *a, int pool, size_t need) {
  size_t size = segment_size(pool, need);
  Segment *s = a->src.meta_alloc(sizeof *s);
  Block *b = s ? a->src.meta_alloc(sizeof *b) : NULL;
  if (!b) goto err_free_meta;
  uintptr_t base = 0;
  if (a->src.alloc(a->src.arg, size, &base) != 0) {
    /* Near capacity a 20 MiB segment may not fit where the request would. */
    size_t least = pool == POOL_SMALL ? size : round_up(need, (size_t)2 << 20);
    if (least == size || a->src.alloc(a->src.arg, least, &base) != 0) goto err_free_meta;
    size = least;
  }
  *s = (Segment){base, size, pool, b, NULL, a->segments};
  if (a->segments) a->segments->prev = s;
  a->segments = s;
  memset(b, 0, sizeof *b);
  b->addr = base;
  b->size = size;
  b->seg = s;
  b->free = 1;
  bin_insert(a, b);
  a->st.reserved += size;
  a->st.num_segments++;
  a->st.segment_allocs++;
  return b;

err_free_meta:
  if (b) a->src.meta_free(b);
  if (s) a->src.meta_free(s);
  return NULL;
}

static void segment_unlink(CudaAlloc *a, Segment *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    a->segments = s->next;
  if (s->next) s->next->prev = s->prev;
}

static size_t release_cached_locked(CudaAlloc *a) {
  size_t released = 0;
  Segment *s = a->segments;
  while (s) {
    Segment *next = s->next;
    Block *b = s->first;
    if (b->free && !b->next) { /* one free block covering the segment */
      bin_remove(a, b);
      segment_unlink(a, s);
      a->src.free(a->src.arg, s->base, s->size);
      a->st.reserved -= s->size;
      a->st.num_segments--;
      released += s->size;
      a->src.meta_free(b);
      a->src.meta_free(s);
    }
    s = next;
  }
  return released;
}

/* ---------------------------------------------------------------------------------- */

CudaAlloc *cuda_alloc_new(const CudaSegmentSource *src) {
  CudaAlloc *a = src->meta_alloc(sizeof *a);
  if (!a) return NULL;
  memset(a, 0, sizeof *a);
  a->src = *src;
  if (table_grow(a) != 0) {
    src->meta_free(a);
    return NULL;
  }
  pthread_mutex_init(&a->mu, NULL);
  return a;
}

void cuda_alloc_delete(CudaAlloc *a) {
  if (!a) return;
  Segment *s = a->segments;
  while (s) {
    Segment *next = s->next;
    for (Block *b = s->first; b;) {
      Block *bn = b->next;
      a->src.meta_free(b);
      b = bn;
    }
    a->src.free(a->src.arg, s->base, s->size);
    a->src.meta_free(s);
    s = next;
  }
  a->src.meta_free(a->table);
  pthread_mutex_destroy(&a->mu);
  a->src.meta_free(a);
}

/* Cuts b (free, unbinned) to `size` bytes, the rest a new free block after it. Keeps b whole
 * when the rest is too small to be worth a block, or when meta memory is out. */
static void split(CudaAlloc *a, Block *b, size_t size) {
  size_t rest = b->size - size;
  size_t min_rest = b->seg->pool == POOL_SMALL ? CUDA_ALLOC_QUANTUM : CUDA_ALLOC_SMALL_MAX;
  if (rest < min_rest) return;
  Block *r = a->src.meta_alloc(sizeof *r);
  if (!r) return;
  memset(r, 0, sizeof *r);
  r->addr = b->addr + size;
  r->size = rest;
  r->seg = b->seg;
  r->free = 1;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  bin_insert(a, r);
}

int cuda_alloc_get(CudaAlloc *a, size_t bytes, size_t alignment, uintptr_t *out) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > ((size_t)1 << 30) ||
      bytes > ((size_t)1 << 62))
    return CUDA_ALLOC_INVALID;
  size_t need = round_up(bytes ? bytes : 1, CUDA_ALLOC_QUANTUM);
  if (alignment > CUDA_ALLOC_QUANTUM) need += alignment - CUDA_ALLOC_QUANTUM;
  int pool = need <= CUDA_ALLOC_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
  pthread_mutex_lock(&a->mu);
  int rc = CUDA_ALLOC_NO_MEMORY;
  if (a->table_count + 1 > a->table_size && table_grow(a) != 0) goto out_unlock;
  Block *b = best_fit(a, pool, need);
  if (!b) b = segment_new(a, pool, need);
  if (!b && release_cached_locked(a) > 0) {
    a->st.oom_retries++;
    b = segment_new(a, pool, need);
  }
  if (!b) goto out_unlock;
  bin_remove(a, b);
  split(a, b, need);
  b->free = 0;
  b->user = (b->addr + alignment - 1) & ~(uintptr_t)(alignment - 1);
  b->requested = bytes;
  table_insert(a, b);
  a->st.in_use += b->size;
  a->st.requested += bytes;
  if (a->st.in_use > a->st.peak_in_use) a->st.peak_in_use = a->st.in_use;
  a->st.num_allocs++;
  *out = b->user;
  rc = CUDA_ALLOC_OK;

out_unlock:
  if (rc == CUDA_ALLOC_NO_MEMORY) a->st.failures++;
  pthread_mutex_unlock(&a->mu);
  return rc;
}

/* Folds b's successor (free) into b. */
static void merge_next(CudaAlloc *a, Block *b) {
  Block *n = b->next;
  bin_remove(a, n);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  a->src.meta_free(n);
}

int cuda_alloc_put(CudaAlloc *a, uintptr_t ptr) {
  pthread_mutex_lock(&a->mu);
  Block *b = table_take(a, ptr);
  if (!b) {
    pthread_mutex_unlock(&a->mu);
    return CUDA_ALLOC_INVALID;
  }
  a->st.in_use -= b->size;
  a->st.requested -= b->requested;
  a->st.num_frees++;
  b->free = 1;
  b->user = 0;
  b->requested = 0;
  if (b->next && b->next->free) merge_next(a, b);
  if (b->prev && b->prev->free) {
    Block *p = b->prev;
    bin_remove(a, p); /* b itself is not binned yet */
    p->next = b->next;
    if (b->next) b->next->prev = p;
    p->size += b->size;
    a->src.meta_free(b);
    b = p;
  }
  bin_insert(a, b);
  pthread_mutex_unlock(&a->mu);
  return CUDA_ALLOC_OK;
}

size_t cuda_alloc_release_cached(CudaAlloc *a) {
  pthread_mutex_lock(&a->mu);
  size_t n = release_cached_locked(a);
  pthread_mutex_unlock(&a->mu);
  return n;
}

static uint64_t largest_free_locked(const CudaAlloc *a) {
  uint64_t best = 0;
  for (int p = 0; p < NUM_POOLS; p++)
    for (int i = NUM_BINS - 1; i >= 0; i--) {
      const Block *b = a->pools[p].bins[i];
      if (!b) continue;
      while (b->bin_next) b = b->bin_next; /* sorted: the last is the largest */
      if (b->size > best) best = b->size;
      break;
    }
  return best;
}

void cuda_alloc_stats(CudaAlloc *a, CudaAllocStats *s) {
  pthread_mutex_lock(&a->mu);
  *s = a->st;
  s->free_bytes = a->st.reserved - a->st.in_use;
  s->largest_free = largest_free_locked(a);
  s->fragmentation =
      s->free_bytes ? 1.0 - (double)s->largest_free / (double)s->free_bytes : 0.0;
  pthread_mutex_unlock(&a->mu);
}

/* Rule numbers returned by cuda_alloc_check. */
static int check_locked(const CudaAlloc *a) {
  uint64_t reserved = 0, in_use = 0, nseg = 0, used_blocks = 0, free_blocks = 0;
  for (const Segment *s = a->segments; s; s = s->next) {
    nseg++;
    reserved += s->size;
    uintptr_t at = s->base;
    if (!s->first || s->first->prev) return 1;
    for (const Block *b = s->first; b; b = b->next) {
      if (b->seg != s || b->addr != at || b->size == 0) return 2; /* blocks tile it */
      if (b->next && b->next->prev != b) return 3;
      if (b->free && b->next && b->next->free) return 4; /* free neighbours merged */
      if (b->free) {
        free_blocks++;
      } else {
        used_blocks++;
        in_use += b->size;
        if (b->user < b->addr || b->user + b->requested > b->addr + b->size) return 5;
      }
      at += b->size;
    }
    if (at != s->base + s->size) return 6;
  }
  if (reserved != a->st.reserved || nseg != a->st.num_segments) return 7;
  if (in_use != a->st.in_use || used_blocks != a->table_count) return 8;
  uint64_t binned = 0;
  for (int p = 0; p < NUM_POOLS; p++)
    for (int i = 0; i < NUM_BINS; i++)
      for (const Block *b = a->pools[p].bins[i]; b; b = b->bin_next) {
        binned++;
        if (!b->free || bin_of(b->size) != i || b->seg->pool != p) return 9;
        if (b->bin_next && (b->bin_next->size < b->size ||
                            (b->bin_next->size == b->size && b->bin_next->addr < b->addr)))
          return 10; /* sorted */
      }
  if (binned != free_blocks) return 11;
  return 0;
}

int cuda_alloc_check(CudaAlloc *a) {
  pthread_mutex_lock(&a->mu);
  int r = check_locked(a);
  pthread_mutex_unlock(&a->mu);
  return r;
}
