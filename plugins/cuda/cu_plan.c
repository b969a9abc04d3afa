/* SPDX-License-Identifier: Apache-2.0 */
/* cu_plan.c - broadcasting and reduction plans of the CUDA kernels (see cu_plan.h). */
#include "cu_plan.h"

#include <string.h>

int cu_broadcast_plan(int n, const int *ranks, const int64_t *const *dims, int out_rank,
                      const int64_t *out_dims, CuBcast *p) {
  memset(p, 0, sizeof *p);
  int64_t total = 1;
  for (int d = 0; d < out_rank; d++) total *= out_dims[d];
  p->n = total;
  p->rank = 1;
  p->dims[0] = total == 0 ? 0 : 1;
  if (total == 0) return 0;
  /* Per input and output dim: the element stride, 0 where broadcast (size 1). */
  int64_t st[CU_MAX_INPUTS][CU_MAX_DIMS];
  for (int k = 0; k < n; k++) {
    if (ranks[k] > out_rank) return -1;
    int64_t stride = 1;
    for (int d = out_rank - 1; d >= 0; d--) {
      int id = d - (out_rank - ranks[k]);
      int64_t size = id >= 0 ? dims[k][id] : 1;
      if (size != out_dims[d] && size != 1) return -1;
      st[k][d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  /* Drop size-1 dims; merge neighbours where every input is full in both or broadcast in
   * both (full neighbours are contiguous: the outer stride is the inner's times its size). */
  int r = 0;
  for (int d = 0; d < out_rank; d++) {
    if (out_dims[d] == 1) continue;
    int merge = r > 0;
    for (int k = 0; merge && k < n; k++) merge = (st[k][d] == 0) == (p->strides[k][r - 1] == 0);
    if (merge) {
      p->dims[r - 1] *= out_dims[d];
      for (int k = 0; k < n; k++) p->strides[k][r - 1] = st[k][d];
    } else {
      p->dims[r] = out_dims[d];
      for (int k = 0; k < n; k++) p->strides[k][r] = st[k][d];
      r++;
    }
  }
  p->rank = r ? r : 1;
  return 0;
}

void cu_reduce_plan(int rank, const int64_t *dims, const int *red, CuReducePlan *p) {
  memset(p, 0, sizeof *p);
  int cr[CU_MAX_DIMS], n = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 1) continue;
    if (n && cr[n - 1] == (red[i] != 0)) {
      p->dims[n - 1] *= dims[i];
    } else {
      p->dims[n] = dims[i];
      cr[n++] = red[i] != 0;
    }
  }
  p->rank = n;
  p->outer = p->r = p->inner = 1;
  int blocks = 0;
  for (int i = 0; i < n; i++) blocks += cr[i] && (i == 0 || !cr[i - 1]);
  if (blocks <= 1) {
    int i = 0;
    for (; i < n && !cr[i]; i++) p->outer *= p->dims[i];
    for (; i < n && cr[i]; i++) p->r *= p->dims[i];
    for (; i < n; i++) p->inner *= p->dims[i];
    return;
  }
  p->transpose = 1;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!cr[i]) p->perm[k++] = i, p->outer *= p->dims[i];
  for (int i = 0; i < n; i++)
    if (cr[i]) p->perm[k++] = i, p->r *= p->dims[i];
}
