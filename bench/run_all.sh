#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# All benchmarks of docs/benchmarks.md, side by side in one run on this machine.
# Usage: bench/run_all.sh   (after `make`; the baselines need bench/setup_venv.sh)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
make -s -C "$top/bench" bench >/dev/null
echo "== date: $(date -u +%Y-%m-%dT%H:%MZ); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); cores: $(nproc)"
echo "== executor overhead (us per node; baselines at 1 and 2 threads)"
"$top/bench/run_executor.sh" 20 2>/dev/null
echo "== MatMul 1024^3 f32: session vs raw cblas_sgemm"
"$top/bench/bench_matmul" --json
echo "== Conv2D 64x28x28x32 -> 64, 5x5: session vs raw oneDNN"
"$top/bench/bench_conv" --json
echo "== LSTM cell step f32 (B=64 and B=20, I=H=512): fused LSTMCell vs primitive ops"
"$top/bench/bench_lstm" --json
