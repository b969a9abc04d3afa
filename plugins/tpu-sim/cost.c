/* SPDX-License-Identifier: Apache-2.0 */
/* cost.c - the cycle cost model of a tpu-sim chip: the one place its timing comes from.
 *
 * The chip (figures from FLOE_TPUSIM_*, see plugin.c):
 *   clock        f   = FLOE_TPUSIM_CLOCK_HZ          (default 940e6 Hz)
 *   HBM          B   = FLOE_TPUSIM_HBM_BW            (default 600e9 bytes/s)
 *   launch       L   = FLOE_TPUSIM_LAUNCH_NS         (default 2000 ns per kernel)
 *   matrix unit  a 128 x 128 systolic array of bf16 multipliers with f32 adders
 *   vector unit  8 x 128 = 1024 f32 lanes, one operation per lane per cycle
 *
 * Matrix ops (MatMul, BatchMatMul, the convolutions as their im2col products). The array
 * computes one 128 x 128 tile of the output at a time: the K operand pairs stream through
 * it in K cycles, plus the pipeline's fill and drain, 128 cycles each as the operands skew
 * across the rows and the results leave across the columns. For a batch of [M,K] x [K,N]:
 *
 *   tiles   = batch * ceil(M / 128) * ceil(N / 128)
 *   cycles  = tiles * (K + 2 * 128)
 *   t_mxu   = cycles / f
 *   t_hbm   = bytes / B           (operands read once, result written once, f32 in HBM)
 *   t       = max(t_mxu, t_hbm) + L
 *
 * Vector ops (elementwise, reductions, softmax, optimiser updates): `ops` lane operations
 * (elements times the operations each needs: 1 for an add, a few for exp or a divide, as
 * each kernel documents where it reports):
 *
 *   t_vpu   = ceil(ops / 1024) / f
 *   t       = max(t_vpu, bytes / B) + L
 *
 * Peaks given to the placer: matrix 2 * 128 * 128 * f FLOP/s (one multiply-add per cell
 * per cycle; 30.8 TFLOP/s at 940 MHz), vector 1024 * f FLOP/s. */
#include <math.h>

#include "tpusim.h"

#define TPU_ARRAY 128     /* systolic array side */
#define TPU_LANES 1024    /* vector unit: 8 sublanes x 128 lanes */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

double tpu_cost_matmul_ns(const TpuConfig *c, int64_t batch, int64_t m, int64_t n, int64_t k,
                          double bytes) {
  double tiles = (double)batch * (double)ceil_div(m, TPU_ARRAY) * (double)ceil_div(n, TPU_ARRAY);
  if (m == 0 || n == 0 || batch == 0) tiles = 0;
  double cycles = tiles * ((double)k + 2.0 * TPU_ARRAY);
  double t_mxu = cycles / c->clock_hz * 1e9;
  double t_hbm = bytes / c->hbm_bw * 1e9;
  return fmax(t_mxu, t_hbm) + c->launch_ns;
}

double tpu_cost_vector_ns(const TpuConfig *c, double ops, double bytes) {
  double t_vpu = ceil(ops / TPU_LANES) / c->clock_hz * 1e9;
  double t_hbm = bytes / c->hbm_bw * 1e9;
  return fmax(t_vpu, t_hbm) + c->launch_ns;
}

double tpu_cost_peak_matrix_flops(const TpuConfig *c) {
  return 2.0 * TPU_ARRAY * TPU_ARRAY * c->clock_hz;
}

double tpu_cost_peak_vector_flops(const TpuConfig *c) { return (double)TPU_LANES * c->clock_hz; }

void tpu_report_ns(FloeKernelContext *ctx, double ns) {
  if (!FLOE_HAS_FIELD(tpu_host, FloeHostApi, ctx_report_device_time)) return;
  int64_t v = ns < 1.0 ? 1 : ns > 9e18 ? INT64_MAX : (int64_t)llround(ns);
  tpu_host->ctx_report_device_time(ctx, v);
}
