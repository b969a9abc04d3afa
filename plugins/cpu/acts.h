/* SPDX-License-Identifier: Apache-2.0 */
/* acts.h - the elementwise tail a fused node (_FusedConv, _FusedMatMul) applies to its output
 * in place: the "activations" attribute names the ops in order, comma-separated, and
 * activation_alpha holds each one's parameter (the constant of Add/Sub/Mul/Maximum/Minimum,
 * LeakyRelu's and Elu's alpha). Each op computes what its unfused kernel (elementwise.c)
 * computes, so a fused node gives bitwise the same results as the chain it replaced. */
#ifndef FLOE_CPU_ACTS_H
#define FLOE_CPU_ACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

#define CPU_MAX_ACTS 8
#define CPU_ACT_BLOCK 512 /* elements one pass of the tail takes at once (stays in L1) */

typedef struct CpuAct {
  int kind;
  float a; /* the constant or alpha */
} CpuAct;

typedef struct CpuActs {
  CpuAct act[CPU_MAX_ACTS];
  int n;
} CpuActs;

/* Parses the node's "activations" and activation_alpha into *acts (n = 0 when it has none).
 * Names: Relu, Relu6, Sigmoid, Tanh, LeakyRelu, Elu, Add, Sub, Mul, Maximum, Minimum,
 * ConstMaximum, ConstMinimum (the constant first: which of two equal zeros is returned),
 * and Save ... Gate pairs (not nested: the value at Save times the value at Gate, SiLU and
 * HardSwish). An unknown name, a missing alpha or an unpaired Save sets init's error naming
 * `op` and returns it. */
floe_code cpu_acts_parse(const FloeHostApi *host, FloeKernelInit *init, const char *op,
                         CpuActs *acts);

/* y[0, n) = the tail applied to y, in order; n <= CPU_ACT_BLOCK. */
void cpu_acts_block(const CpuActs *acts, float *y, int64_t n);

/* Whether the tail is a clip to [*lo, *hi] (lo <= hi): Relu6, Relu (hi = +inf), or a
 * Maximum (or ConstMaximum) with lo and a Minimum (or ConstMinimum) with hi in either
 * order, which a oneDNN primitive can apply as its clip post-op while it writes. Its values
 * are the tail's but for a NaN (clipped to lo there, kept here) and a -0 (+0 there where
 * lo is 0). */
bool cpu_acts_clip(const CpuActs *acts, float *lo, float *hi);

/* Whether the tail is SiLU (Save, Sigmoid, Gate: x sigmoid(x)), which a oneDNN primitive can
 * apply as its swish post-op while it writes. Its values are within a few ulps of the
 * tail's, not the same bits: oneDNN's exp is its own (tests/core/test_fuse states the
 * bound). */
bool cpu_acts_swish(const CpuActs *acts);

/* Whether the tail is a hard sigmoid, Minimum(Maximum(x * alpha + beta ...)) as imported:
 * Mul, Add, Minimum 1, Maximum 0 (*swish false), or a HardSwish, the same between Save and
 * Gate with alpha 1/6 and beta 1/2 (*swish true): oneDNN's linear and clip post-ops, or its
 * hardswish one, within a few ulps of the tail's bits (tests/core/test_fuse). */
bool cpu_acts_hard(const CpuActs *acts, bool *swish, float *alpha, float *beta);

/* The tail over the n-element y, in parallel on the plugin's pool. */
void cpu_acts_run(const CpuActs *acts, float *y, int64_t n);
/* The same on the calling thread alone (a part of a kernel's output, while it is in cache). */
void cpu_acts_serial(const CpuActs *acts, float *y, int64_t n);

#endif
