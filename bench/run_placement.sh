#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run_placement.sh - placement quality on cpu + tpu-sim: the cnn and the LSTM
# training graphs, each placed by the cost-model placer and by simple alternatives (all on
# one device; matrix-class ops on the accelerator), with estimated and measured step times
# (bench_placement.c explains "measured"). Run from the build tree after `make`:
#     sh bench/run_placement.sh [STEPS]
set -eu
steps=${1:-3}
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$top/bench" bench_placement >/dev/null
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs:$top/plugins/tpu-sim/.libs:$top/plugins/transport/local/.libs"
"$top/tools/floe" train --model cnn --input feed --save-graph "$tmp/cnn.floe" >/dev/null
"$top/tools/floe" train --model lstm --hidden 256 --layers 2 --bptt 35 --vocab 10000 \
  --save-graph "$tmp/lstm.floe" > "$tmp/lstm.txt"
lstm_target=$(sed -n 's/.*(target \([^,]*\),.*/\1/p' "$tmp/lstm.txt")
echo "== cnn (batch 64) on cpu + tpu-sim"
"$top/bench/bench_placement" "$tmp/cnn.floe" --steps "$steps" --batch 64
echo "== lstm LM (2 x 256, bptt 35, batch 64) on cpu + tpu-sim"
"$top/bench/bench_placement" "$tmp/lstm.floe" --target "$lstm_target" --steps "$steps" --batch 64
