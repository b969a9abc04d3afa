#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Executor overhead, side by side in one run: Floe's bench_executor (with the graph optimiser,
# and without: FLOE_OPTIMIZE=0), TensorFlow (tf.function graph, with Grappler and without)
# and PyTorch eager on the same 10,000 scalar adds, chain and independent. Baselines
# get each thread setting in {1, 2} and OMP_WAIT_POLICY=passive; the best is reported.
# Usage: bench/run_executor.sh [REPS]   (after `make` and bench/setup_venv.sh)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-20}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive
py="$top/bench/.venv/bin/python"
make -s -C "$top/bench" bench_executor >/dev/null
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
for t in 1 2; do
  "$top/bench/bench_executor" --reps "$reps" --threads "$t" --json | sed "s/}$/,\"threads\":$t}/"
  FLOE_OPTIMIZE=0 "$top/bench/bench_executor" --reps "$reps" --threads "$t" --json |
    sed "s/}$/,\"threads\":$t}/; s/\"system\":\"floe\"/\"system\":\"floe-no-optimizer\"/"
  OMP_NUM_THREADS=$t "$py" "$top/bench/executor_baselines.py" --system torch --threads "$t" --reps "$reps"
  "$py" "$top/bench/executor_baselines.py" --system tf --threads "$t" --reps "$reps"
  "$py" "$top/bench/executor_baselines.py" --system tf-no-grappler --threads "$t" --reps "$reps"
done
