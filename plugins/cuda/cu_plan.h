/* SPDX-License-Identifier: Apache-2.0 */
/* cu_plan.h - the host-side planning of the CUDA kernels, in plain C (no CUDA header), so
 * tests/core/test_cuda_plan.c checks it on any machine: broadcasting plans for the
 * elementwise kernels and the layout of a reduction over any set of axes. Pure functions,
 * thread-safe. */
#ifndef FLOE_CU_PLAN_H
#define FLOE_CU_PLAN_H

#include <stdint.h>

#include "cu_kernels.h"

/* The plan of n (<= CU_MAX_INPUTS) inputs of ranks[k] / dims[k] broadcast (NumPy rules,
 * aligned on the last dim) to out_rank / out_dims (<= CU_MAX_DIMS): size-1 output dims
 * dropped, neighbouring dims where every input is full in both or broadcast in both merged.
 * Output element i reads input k at sum_d coord_d(i) * strides[k][d] (coordinates over
 * p->dims, innermost last). Returns 0, or -1 when an input dim is neither the output's nor
 * 1. */
int cu_broadcast_plan(int n, const int *ranks, const int64_t *const *dims, int out_rank,
                      const int64_t *out_dims, CuBcast *p);

/* How to reduce x (rank, dims; rank <= CU_MAX_DIMS) over the dims marked in red[]: after
 * dropping size-1 dims and merging runs of equally marked dims (rank / dims below), either
 * the reduced dims are one block and x already is [outer, r, inner] (transpose = 0), or x is
 * first transposed by perm (output dim i = collapsed dim perm[i]: kept dims, then reduced
 * ones) and reduced as [outer, r, 1]. */
typedef struct CuReducePlan {
  int transpose;
  int rank;                 /* collapsed */
  int64_t dims[CU_MAX_DIMS];
  int perm[CU_MAX_DIMS];
  int64_t outer, r, inner;
} CuReducePlan;

void cu_reduce_plan(int rank, const int64_t *dims, const int *red, CuReducePlan *p);

#endif
