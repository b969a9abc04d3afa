#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Dynamic (floe_dynamic_lstm, a while loop) vs fully unrolled LSTM: one training step's time,
# tensor peak and peak RSS, on one batch of mixed lengths (bench/bench_dynamic_rnn.c), in the
# configurations of docs/benchmarks.md "Dynamic vs unrolled RNN: memory":
#   B=64, I=H=256, T=100, fortune lengths (the headline), the same with uniform lengths in
#   [5, 100], B=64, I=H=512 with fortune lengths, and B=256, I=H=128 with fortune lengths
#   (activations outweigh the weight gradients there).
# Usage: bench/run_dynamic_rnn.sh [REPS] [--json]   (after `make`; REPS default 10)
# Environment: FORTUNES_DIR (the fortune folder), FLOE_NUM_THREADS (the runtime's threads).
# Exits non-zero when a configuration's two variants disagree on the loss.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-10}
json=${2:-}
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
make -s -C "$top/bench" bench_dynamic_rnn >/dev/null
bench="$top/bench/bench_dynamic_rnn"
data=${FORTUNES_DIR:+--data=$FORTUNES_DIR}

echo "# machine: $(nproc) cores, $(uname -m), $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
for cfg in "--lengths=fortunes" "--lengths=uniform" "--lengths=fortunes --input=512 --hidden=512" \
  "--lengths=fortunes --batch=256 --input=128 --hidden=128"; do
  echo "# bench_dynamic_rnn --reps=$reps $cfg $json"
  # shellcheck disable=SC2086 # cfg holds several options
  "$bench" --reps="$reps" $cfg $data $json
  echo
done
