/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_plan.c - the CUDA kernels' host-side planning (plugins/cuda/cu_plan.c), without a
 * GPU: broadcasting plans against a naive per-element offset computation, and reduction
 * plans executed on the CPU (transpose and row sums as the GPU kernels do them) against a
 * naive reduction. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/cuda/cu_plan.h"

static uint64_t rng_state;

static int64_t rnd(int64_t n) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (int64_t)((rng_state >> 33) % (uint64_t)n);
}

static int64_t count(int r, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < r; i++) n *= d[i];
  return n;
}

/* Offset of output element i in input k the plain way: coordinates over the output dims,
 * the input's row-major strides, 0 where the input has size 1 (or no dim). */
static int64_t naive_offset(int out_rank, const int64_t *od, int rank, const int64_t *d, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int o = out_rank - 1; o >= 0; o--) {
    int64_t c = i % od[o];
    i /= od[o];
    int id = o - (out_rank - rank);
    if (id < 0) continue;
    if (d[id] != 1) off += c * stride;
    stride *= d[id];
  }
  return off;
}

static int64_t plan_offset(const CuBcast *p, int k, int64_t i) {
  int64_t off = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    off += (i % p->dims[d]) * p->strides[k][d];
    i /= p->dims[d];
  }
  return off;
}

START_TEST(test_broadcast_known) {
  /* [N,H,W,C] + [C] collapses to [N*H*W, C]. */
  int64_t x[4] = {2, 3, 4, 5}, b[1] = {5};
  const int64_t *dims[2] = {x, b};
  int ranks[2] = {4, 1};
  CuBcast p;
  ck_assert_int_eq(cu_broadcast_plan(2, ranks, dims, 4, x, &p), 0);
  ck_assert_int_eq(p.rank, 2);
  ck_assert_int_eq(p.dims[0], 24);
  ck_assert_int_eq(p.dims[1], 5);
  ck_assert_int_eq(p.strides[0][0], 5);
  ck_assert_int_eq(p.strides[0][1], 1);
  ck_assert_int_eq(p.strides[1][0], 0);
  ck_assert_int_eq(p.strides[1][1], 1);
  ck_assert_int_eq(p.n, 120);
  /* Same shapes: one flat dim. */
  dims[1] = x;
  ranks[1] = 4;
  ck_assert_int_eq(cu_broadcast_plan(2, ranks, dims, 4, x, &p), 0);
  ck_assert_int_eq(p.rank, 1);
  ck_assert_int_eq(p.dims[0], 120);
  /* A scalar output. */
  ck_assert_int_eq(cu_broadcast_plan(2, (const int[]){0, 0}, dims, 0, x, &p), 0);
  ck_assert_int_eq(p.n, 1);
  ck_assert_int_eq(p.rank, 1);
  /* An empty output. */
  int64_t z[2] = {3, 0};
  dims[0] = dims[1] = z;
  ck_assert_int_eq(cu_broadcast_plan(2, (const int[]){2, 2}, dims, 2, z, &p), 0);
  ck_assert_int_eq(p.n, 0);
  /* Incompatible: [3] into [2, 4]. */
  int64_t o[2] = {2, 4}, bad[1] = {3};
  dims[0] = bad;
  ck_assert_int_eq(cu_broadcast_plan(1, (const int[]){1}, dims, 2, o, &p), -1);
}
END_TEST

START_TEST(test_broadcast_random) {
  rng_state = 7;
  for (int trial = 0; trial < 2000; trial++) {
    int out_rank = (int)rnd(6);
    int64_t od[CU_MAX_DIMS];
    for (int d = 0; d < out_rank; d++) od[d] = 1 + rnd(4);
    int n = 1 + (int)rnd(3);
    int64_t in[3][CU_MAX_DIMS];
    int ranks[3];
    const int64_t *dims[3];
    for (int k = 0; k < n; k++) {
      ranks[k] = out_rank ? out_rank - (int)rnd(out_rank + 1) : 0;
      for (int d = 0; d < ranks[k]; d++) {
        int64_t full = od[out_rank - ranks[k] + d];
        in[k][d] = rnd(3) == 0 ? 1 : full;
      }
      dims[k] = in[k];
    }
    CuBcast p;
    ck_assert_int_eq(cu_broadcast_plan(n, ranks, dims, out_rank, od, &p), 0);
    int64_t total = count(out_rank, od);
    ck_assert_int_eq(p.n, total);
    ck_assert_int_eq(count(p.rank, p.dims), total);
    for (int d = 1; d < p.rank; d++) { /* neighbours differ in some input's kind */
      int differ = 0;
      for (int k = 0; k < n; k++) differ |= (p.strides[k][d] == 0) != (p.strides[k][d - 1] == 0);
      ck_assert_msg(differ, "trial %d: dims %d and %d could have merged", trial, d - 1, d);
    }
    for (int64_t i = 0; i < total; i++)
      for (int k = 0; k < n; k++)
        ck_assert_msg(plan_offset(&p, k, i) == naive_offset(out_rank, od, ranks[k], dims[k], i),
                      "trial %d: element %lld of input %d", trial, (long long)i, k);
  }
}
END_TEST

/* The reduction the GPU does with plan p, on the CPU: transpose (out dim i = dim perm[i])
 * into scratch when asked, then sum [outer, r, inner]. */
static void reduce_by_plan(const CuReducePlan *p, const double *x, double *out) {
  int64_t n = p->outer * p->r * p->inner;
  double *t = malloc((size_t)(n ? n : 1) * sizeof *t);
  ck_assert_ptr_nonnull(t);
  if (p->transpose) {
    int64_t stride[CU_MAX_DIMS], acc = 1, od[CU_MAX_DIMS];
    for (int d = p->rank - 1; d >= 0; d--) stride[d] = acc, acc *= p->dims[d];
    for (int i = 0; i < p->rank; i++) od[i] = p->dims[p->perm[i]];
    for (int64_t e = 0; e < n; e++) {
      int64_t rem = e, off = 0;
      for (int d = p->rank - 1; d >= 0; d--) {
        off += (rem % od[d]) * stride[p->perm[d]];
        rem /= od[d];
      }
      t[e] = x[off];
    }
  } else {
    memcpy(t, x, (size_t)n * sizeof *t);
  }
  for (int64_t o = 0; o < p->outer; o++)
    for (int64_t i = 0; i < p->inner; i++) {
      double s = 0;
      for (int64_t j = 0; j < p->r; j++) s += t[(o * p->r + j) * p->inner + i];
      out[o * p->inner + i] = s;
    }
  free(t);
}

START_TEST(test_reduce_random) {
  rng_state = 11;
  int transposed = 0;
  for (int trial = 0; trial < 1000; trial++) {
    int rank = 1 + (int)rnd(5);
    int64_t d[CU_MAX_DIMS];
    int red[CU_MAX_DIMS];
    for (int i = 0; i < rank; i++) d[i] = 1 + rnd(4), red[i] = (int)rnd(2);
    int64_t n = count(rank, d), kept = 1;
    for (int i = 0; i < rank; i++) kept *= red[i] ? 1 : d[i];
    double *x = malloc((size_t)n * sizeof *x), *want = calloc((size_t)kept, sizeof *want),
           *got = calloc((size_t)kept, sizeof *got);
    for (int64_t e = 0; e < n; e++) x[e] = (double)rnd(1000);
    /* Naive: each element adds into the output at its kept coordinates (row-major). */
    for (int64_t e = 0; e < n; e++) {
      int64_t rem = e, o = 0, ostride = 1;
      for (int i = rank - 1; i >= 0; i--) {
        int64_t c = rem % d[i];
        rem /= d[i];
        if (!red[i]) o += c * ostride, ostride *= d[i];
      }
      want[o] += x[e];
    }
    CuReducePlan p;
    cu_reduce_plan(rank, d, red, &p);
    ck_assert_int_eq(p.outer * p.inner, kept);
    ck_assert_int_eq(p.outer * p.r * p.inner, n);
    transposed += p.transpose;
    reduce_by_plan(&p, x, got);
    for (int64_t o = 0; o < kept; o++)
      ck_assert_msg(got[o] == want[o], "trial %d: output %lld: %g, want %g", trial, (long long)o,
                    got[o], want[o]);
    free(x);
    free(want);
    free(got);
  }
  ck_assert_int_gt(transposed, 50); /* both paths were exercised */
}
END_TEST

START_TEST(test_reduce_known) {
  CuReducePlan p;
  /* Sum over dims 0 and 2 of [2, 3, 4]: not one block, so kept dim 1 first. */
  cu_reduce_plan(3, (const int64_t[]){2, 3, 4}, (const int[]){1, 0, 1}, &p);
  ck_assert_int_eq(p.transpose, 1);
  ck_assert_int_eq(p.perm[0], 1);
  ck_assert_int_eq(p.outer, 3);
  ck_assert_int_eq(p.r, 8);
  /* BiasAddGrad NHWC [2, 5, 5, 8]: [1, 50, 8]. */
  cu_reduce_plan(4, (const int64_t[]){2, 5, 5, 8}, (const int[]){1, 1, 1, 0}, &p);
  ck_assert_int_eq(p.transpose, 0);
  ck_assert_int_eq(p.outer, 1);
  ck_assert_int_eq(p.r, 50);
  ck_assert_int_eq(p.inner, 8);
  /* A size-1 reduced dim between kept ones vanishes: no transpose. */
  cu_reduce_plan(3, (const int64_t[]){4, 1, 6}, (const int[]){0, 1, 0}, &p);
  ck_assert_int_eq(p.transpose, 0);
  ck_assert_int_eq(p.r, 1);
  ck_assert_int_eq(p.outer * p.inner, 24);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_plan");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_broadcast_known);
  tcase_add_test(tc, test_broadcast_random);
  tcase_add_test(tc, test_reduce_random);
  tcase_add_test(tc, test_reduce_known);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
