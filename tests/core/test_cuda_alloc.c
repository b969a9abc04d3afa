/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_alloc.c - the CUDA plugin's caching allocator (plugins/cuda/cuda_alloc.c) over a
 * fake segment source: no GPU needed, so it runs everywhere. The fake hands out addresses in
 * an unmapped range: the allocator must never dereference them (a touch would crash). */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../plugins/cuda/cuda_alloc.h"

#define MIB ((size_t)1 << 20)
#define KIB ((size_t)1 << 10)

/* A device of `capacity` bytes; segments are placed at increasing addresses. */
typedef struct FakeSource {
  size_t capacity, used;
  uintptr_t next;
  int allocs, frees;
  int fail_next; /* refuse the next n segment allocations */
} FakeSource;

static int fake_alloc(void *arg, size_t bytes, uintptr_t *base) {
  FakeSource *f = arg;
  if (f->fail_next > 0) {
    f->fail_next--;
    return 1;
  }
  if (f->used + bytes > f->capacity) return 1;
  f->used += bytes;
  *base = f->next;
  f->next += bytes + 64 * MIB; /* gaps: blocks of two segments are never adjacent */
  f->allocs++;
  return 0;
}

static void fake_free(void *arg, uintptr_t base, size_t bytes) {
  FakeSource *f = arg;
  ck_assert_uint_ge(base, 0x100000000000ull);
  ck_assert_uint_ge(f->used, bytes);
  f->used -= bytes;
  f->frees++;
}

/* Bookkeeping memory with a fault hook: the meta allocation number fail_at fails. */
static long meta_count, meta_live, meta_fail_at = -1;
static pthread_mutex_t meta_mu = PTHREAD_MUTEX_INITIALIZER;

static void *meta_alloc(size_t n) {
  pthread_mutex_lock(&meta_mu);
  long k = meta_count++;
  void *p = k == meta_fail_at ? NULL : malloc(n);
  if (p) meta_live++;
  pthread_mutex_unlock(&meta_mu);
  return p;
}

static void meta_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&meta_mu);
  meta_live--;
  pthread_mutex_unlock(&meta_mu);
  free(p);
}

static CudaAlloc *new_alloc(FakeSource *f, size_t capacity) {
  *f = (FakeSource){capacity, 0, 0x100000000000ull, 0, 0, 0};
  CudaSegmentSource src = {fake_alloc, fake_free, meta_alloc, meta_free, f};
  CudaAlloc *a = cuda_alloc_new(&src);
  ck_assert_ptr_nonnull(a);
  return a;
}

static uintptr_t get(CudaAlloc *a, size_t bytes) {
  uintptr_t p = 0;
  ck_assert_int_eq(cuda_alloc_get(a, bytes, 64, &p), CUDA_ALLOC_OK);
  ck_assert_int_eq(cuda_alloc_check(a), 0);
  return p;
}

static void put(CudaAlloc *a, uintptr_t p) {
  ck_assert_int_eq(cuda_alloc_put(a, p), CUDA_ALLOC_OK);
  ck_assert_int_eq(cuda_alloc_check(a), 0);
}

static CudaAllocStats stats(CudaAlloc *a) {
  CudaAllocStats s;
  cuda_alloc_stats(a, &s);
  return s;
}

START_TEST(test_reuse_and_alignment) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 1024 * MIB);
  uintptr_t p = get(a, 1000);
  ck_assert_uint_eq(p % 256, 0);
  CudaAllocStats s = stats(a);
  ck_assert_uint_eq(s.in_use, 1024); /* 1000 rounded to the 256-byte quantum */
  ck_assert_uint_eq(s.requested, 1000);
  ck_assert_uint_eq(s.reserved, 2 * MIB); /* one small segment */
  put(a, p);
  uintptr_t q = get(a, 900); /* served from the cache: same block, no new segment */
  ck_assert_uint_eq(q, p);
  ck_assert_int_eq(f.allocs, 1);
  put(a, q);
  /* Alignment above the quantum is honoured. */
  uintptr_t r = 0;
  ck_assert_int_eq(cuda_alloc_get(a, 10, 4096, &r), CUDA_ALLOC_OK);
  ck_assert_uint_eq(r % 4096, 0);
  put(a, r);
  /* A large request takes a 20 MiB segment; a huge one its own rounded to 2 MiB. */
  uintptr_t big = get(a, 3 * MIB), huge = get(a, 33 * MIB + 5);
  s = stats(a);
  ck_assert_uint_eq(s.reserved, 2 * MIB + 20 * MIB + 34 * MIB);
  /* The huge block's rest (under 1 MiB) is not worth a block: it stays with it. */
  ck_assert_uint_eq(s.in_use, 3 * MIB + 34 * MIB);
  put(a, big);
  put(a, huge);
  /* Bad arguments. */
  ck_assert_int_eq(cuda_alloc_get(a, 10, 48, &r), CUDA_ALLOC_INVALID);
  ck_assert_int_eq(cuda_alloc_get(a, 10, 0, &r), CUDA_ALLOC_INVALID);
  ck_assert_int_eq(cuda_alloc_put(a, p + 256), CUDA_ALLOC_INVALID); /* never handed out */
  ck_assert_int_eq(cuda_alloc_put(a, p), CUDA_ALLOC_INVALID);       /* freed already */
  ck_assert_int_eq(cuda_alloc_check(a), 0);
  ck_assert_uint_eq(cuda_alloc_release_cached(a), 56 * MIB);
  ck_assert_uint_eq(f.used, 0);
  cuda_alloc_delete(a);
  ck_assert_int_eq(meta_live, 0);
}
END_TEST

START_TEST(test_best_fit) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 1024 * MIB);
  /* [A 1K][s][C 2K][s][E 4K][s][rest of the segment] with s kept in use as separators. */
  uintptr_t A = get(a, 1 * KIB), s1 = get(a, 256), C = get(a, 2 * KIB), s2 = get(a, 256);
  uintptr_t E = get(a, 4 * KIB), s3 = get(a, 256);
  ck_assert_uint_eq(C, A + 1 * KIB + 256); /* carved in address order from one segment */
  put(a, A);
  put(a, C);
  put(a, E);
  /* 1.5 KiB: the 2 KiB hole is the smallest that fits (not the first, not the largest). */
  uintptr_t x = get(a, 1536);
  ck_assert_uint_eq(x, C);
  /* 3 KiB: only the 4 KiB hole (and the segment's tail) fit; the hole is smaller. */
  uintptr_t y = get(a, 3 * KIB);
  ck_assert_uint_eq(y, E);
  /* 1 KiB: A's hole fits exactly; the 512 B left of C's is too small. */
  ck_assert_uint_eq(get(a, 1 * KIB), A);
  ck_assert_int_eq(f.allocs, 1);
  cuda_alloc_delete(a); /* blocks still in use: all given back */
  ck_assert_uint_eq(f.used, 0);
  ck_assert_int_eq(meta_live, 0);
  (void)s1, (void)s2, (void)s3;
}
END_TEST

START_TEST(test_merge_and_fragmentation) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 1024 * MIB);
  /* Four 512 KiB blocks fill one 2 MiB small segment exactly. */
  uintptr_t b[4];
  for (int i = 0; i < 4; i++) b[i] = get(a, 512 * KIB);
  ck_assert_int_eq(f.allocs, 1);
  CudaAllocStats s = stats(a);
  ck_assert_uint_eq(s.free_bytes, 0);
  ck_assert(s.fragmentation == 0.0);
  put(a, b[0]);
  put(a, b[2]);
  s = stats(a); /* two separate 512 KiB holes: 1 - 512K / 1M */
  ck_assert_uint_eq(s.free_bytes, 1 * MIB);
  ck_assert_uint_eq(s.largest_free, 512 * KIB);
  ck_assert_double_eq_tol(s.fragmentation, 0.5, 1e-12);
  put(a, b[1]); /* merges with both neighbours: one 1.5 MiB hole */
  s = stats(a);
  ck_assert_uint_eq(s.largest_free, 1536 * KIB);
  ck_assert(s.fragmentation == 0.0);
  ck_assert_uint_eq(s.peak_in_use, 2 * MIB);
  ck_assert_uint_eq(s.in_use, 512 * KIB);
  /* 1 MiB now fits in the merged hole without a new segment. */
  uintptr_t m = get(a, 1 * MIB);
  ck_assert_uint_eq(m, b[0]);
  ck_assert_int_eq(f.allocs, 1);
  put(a, m);
  put(a, b[3]);
  ck_assert_uint_eq(stats(a).num_segments, 1); /* cached, not given back */
  ck_assert_uint_eq(cuda_alloc_release_cached(a), 2 * MIB);
  s = stats(a);
  ck_assert_uint_eq(s.reserved, 0);
  ck_assert_uint_eq(s.num_allocs, 5);
  ck_assert_uint_eq(s.num_frees, 5);
  cuda_alloc_delete(a);
  ck_assert_int_eq(meta_live, 0);
}
END_TEST

START_TEST(test_out_of_memory) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 8 * MIB);
  put(a, get(a, 100 * KIB)); /* leaves a cached 2 MiB small segment */
  /* 7 MiB: a 20 MiB segment cannot fit, nor 8 MiB beside the cache; the cached segment is
   * given back and the request retried. */
  uintptr_t p = get(a, 7 * MIB);
  CudaAllocStats s = stats(a);
  ck_assert_uint_eq(s.oom_retries, 1);
  ck_assert_uint_eq(s.reserved, 8 * MIB);
  ck_assert_uint_eq(f.used, 8 * MIB);
  /* The segment's free last MiB belongs to the large pool, so a small request needs a new
   * small segment, which does not fit: refused, state unchanged. */
  uintptr_t q = 0;
  ck_assert_int_eq(cuda_alloc_get(a, 1, 64, &q), CUDA_ALLOC_NO_MEMORY);
  s = stats(a);
  ck_assert_uint_eq(s.failures, 1);
  ck_assert_uint_eq(s.num_allocs, 2);
  ck_assert_int_eq(cuda_alloc_check(a), 0);
  put(a, p);
  ck_assert_int_eq(cuda_alloc_get(a, 1, 64, &q), CUDA_ALLOC_OK); /* after a retry */
  put(a, q);
  cuda_alloc_delete(a);
  ck_assert_uint_eq(f.used, 0);
  ck_assert_int_eq(meta_live, 0);
}
END_TEST

/* Every bookkeeping allocation of a sequence fails in turn: each failure is clean (a refused
 * request, an unsplit block), the invariants hold and nothing leaks. */
START_TEST(test_meta_fault_walk) {
  int completed = 0;
  for (long n = 0; n < 200 && !completed; n++) {
    meta_count = 0;
    meta_fail_at = n;
    FakeSource f = {1024 * MIB, 0, 0x100000000000ull, 0, 0, 0};
    CudaSegmentSource src = {fake_alloc, fake_free, meta_alloc, meta_free, &f};
    CudaAlloc *a = cuda_alloc_new(&src);
    if (!a) {
      ck_assert_int_eq(meta_live, 0);
      continue;
    }
    uintptr_t p[6] = {0};
    int ok = 1;
    for (int i = 0; i < 6; i++) {
      int rc = cuda_alloc_get(a, (size_t)(i + 1) * 300 * KIB, 64, &p[i]);
      ck_assert(rc == CUDA_ALLOC_OK || rc == CUDA_ALLOC_NO_MEMORY);
      if (rc != CUDA_ALLOC_OK) p[i] = 0, ok = 0;
      ck_assert_int_eq(cuda_alloc_check(a), 0);
    }
    for (int i = 0; i < 6; i += 2)
      if (p[i]) put(a, p[i]);
    for (int i = 1; i < 6; i += 2)
      if (p[i]) put(a, p[i]);
    ck_assert_uint_eq(stats(a).in_use, 0);
    cuda_alloc_release_cached(a);
    ck_assert_uint_eq(f.used, 0);
    cuda_alloc_delete(a);
    ck_assert_int_eq(meta_live, 0);
    completed = ok && meta_count <= n; /* ran the whole sequence without reaching the fault */
  }
  meta_fail_at = -1;
  ck_assert_msg(completed, "the fault walk never reached a clean run");
}
END_TEST

/* Random gets and puts against a list of live blocks: no two overlap, all stay inside the
 * reserved segments, the counters match a recount. */
START_TEST(test_random_stress) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 4096 * MIB);
  enum { LIVE = 64, STEPS = 3000 };
  uintptr_t addr[LIVE] = {0};
  size_t size[LIVE] = {0};
  uint64_t rng = 12345;
  for (int step = 0; step < STEPS; step++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int k = (int)((rng >> 33) % LIVE);
    if (addr[k]) {
      put(a, addr[k]);
      addr[k] = 0;
      continue;
    }
    /* Mostly small sizes, now and then a large one. */
    size_t n = (rng >> 40) % 8 == 0 ? (size_t)((rng >> 20) % (24 * MIB)) + 1
                                    : (size_t)((rng >> 20) % (600 * KIB)) + 1;
    addr[k] = get(a, n);
    size[k] = n;
    for (int j = 0; j < LIVE; j++)
      if (j != k && addr[j])
        ck_assert_msg(addr[j] + size[j] <= addr[k] || addr[k] + size[k] <= addr[j],
                      "blocks %d and %d overlap", j, k);
  }
  uint64_t want = 0;
  for (int j = 0; j < LIVE; j++) want += addr[j] ? size[j] : 0;
  ck_assert_uint_eq(stats(a).requested, want);
  for (int j = 0; j < LIVE; j++)
    if (addr[j]) put(a, addr[j]);
  CudaAllocStats s = stats(a);
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.free_bytes, s.reserved);
  ck_assert_uint_le(s.largest_free, s.free_bytes);
  cuda_alloc_release_cached(a);
  ck_assert_uint_eq(stats(a).reserved, 0);
  ck_assert_uint_eq(f.used, 0);
  cuda_alloc_delete(a);
  ck_assert_int_eq(meta_live, 0);
}
END_TEST

typedef struct Worker {
  CudaAlloc *a;
  int seed;
} Worker;

static void *worker(void *arg) {
  Worker *w = arg;
  uintptr_t held[16] = {0};
  uint64_t rng = (uint64_t)w->seed;
  for (int i = 0; i < 2000; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int k = (int)((rng >> 33) % 16);
    if (held[k]) {
      if (cuda_alloc_put(w->a, held[k]) != CUDA_ALLOC_OK) return (void *)1;
      held[k] = 0;
    } else if (cuda_alloc_get(w->a, (size_t)((rng >> 20) % (256 * KIB)) + 1, 64, &held[k]) !=
               CUDA_ALLOC_OK) {
      return (void *)1;
    }
  }
  for (int k = 0; k < 16; k++)
    if (held[k] && cuda_alloc_put(w->a, held[k]) != CUDA_ALLOC_OK) return (void *)1;
  return NULL;
}

START_TEST(test_threads) {
  FakeSource f;
  CudaAlloc *a = new_alloc(&f, 1024 * MIB);
  pthread_t t[4];
  Worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (Worker){a, i + 1};
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    ck_assert_ptr_null(r);
  }
  ck_assert_int_eq(cuda_alloc_check(a), 0);
  CudaAllocStats s = stats(a);
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.num_allocs, s.num_frees);
  cuda_alloc_delete(a);
  ck_assert_uint_eq(f.used, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_alloc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_reuse_and_alignment);
  tcase_add_test(tc, test_best_fit);
  tcase_add_test(tc, test_merge_and_fragmentation);
  tcase_add_test(tc, test_out_of_memory);
  tcase_add_test(tc, test_meta_fault_walk);
  tcase_add_test(tc, test_random_stress);
  tcase_add_test(tc, test_threads);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
