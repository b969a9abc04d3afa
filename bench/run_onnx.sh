#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ONNX inference benchmark: a small ResNet exported from PyTorch (bench/onnx_export.py), run
# by Floe (bench_onnx), ONNX Runtime and PyTorch on the same inputs, side by side, at batch 1
# and 32. Each baseline gets its best thread setting of 1 and 2 (PyTorch with passive OpenMP
# waiting); Floe uses its default pool. Prints each run's JSON, the throughput ratios and
# whether the top-1 predictions agree. The three run one after the other ROUNDS times
# (default 3): this machine's speed drifts over seconds, so each round's ratios compare runs
# made moments apart, and the summary line gives the median round's ratio and the range.
# usage: [ROUNDS=N] bench/run_onnx.sh [ITERS_B1] [ITERS_B32]   (from the build tree's top
# directory)
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=$here/.venv/bin/python
it1=${1:-200}
it32=${2:-20}
rounds=${ROUNDS:-3}
out=${ONNX_BENCH_DIR:-/tmp/floe-onnx-bench}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive
[ -f "$out/resnet.onnx" ] || "$py" "$here/onnx_export.py" "$out" 32 >/dev/null 2>&1
make -s -C bench bench_onnx >/dev/null
export FLOE_PLUGIN_PATH=${FLOE_PLUGIN_PATH:-$(pwd)/plugins/cpu/.libs}
best() { # RUNTIME INPUT ITERS TOP1 -> best JSON line of threads 1 and 2
  a=$(OMP_NUM_THREADS=1 "$py" "$here/onnx_baselines.py" "$out" "$2" "$3" "$1" 1 "$4.t1")
  b=$(OMP_NUM_THREADS=2 "$py" "$here/onnx_baselines.py" "$out" "$2" "$3" "$1" 2 "$4.t2")
  ia=$(echo "$a" | sed 's/.*"images_per_s": \([0-9.]*\).*/\1/')
  ib=$(echo "$b" | sed 's/.*"images_per_s": \([0-9.]*\).*/\1/')
  if awk "BEGIN{exit !($ia >= $ib)}"; then echo "$a"; cp "$4.t1" "$4"; else echo "$b"; cp "$4.t2" "$4"; fi
}
ips() { echo "$1" | sed 's/.*"images_per_s": *\([0-9.]*\).*/\1/'; }
for b in 1 32; do
  it=$it1; [ "$b" = 32 ] && it=$it32
  ro=""; rt=""
  for r in $(seq "$rounds"); do
    f=$(bench/bench_onnx "$out/resnet.onnx" "$out/input_b$b.npy" "$it" "$out/top1_floe_b$b.txt")
    o=$(best onnxruntime "$out/input_b$b.npy" "$it" "$out/top1_ort_b$b.txt")
    t=$(best torch "$out/input_b$b.npy" "$it" "$out/top1_torch_b$b.txt")
    echo "$f"; echo "$o"; echo "$t"
    fi_=$(ips "$f"); oi=$(ips "$o"); ti=$(ips "$t")
    same_o=$(cmp -s "$out/top1_floe_b$b.txt" "$out/top1_ort_b$b.txt" && echo yes || echo NO)
    same_t=$(cmp -s "$out/top1_floe_b$b.txt" "$out/top1_torch_b$b.txt" && echo yes || echo NO)
    awk -v b="$b" -v r="$r" -v f="$fi_" -v o="$oi" -v t="$ti" -v so="$same_o" -v st="$same_t" 'BEGIN{
      printf "batch %s round %s: Floe %.1f img/s; / ONNX Runtime %.2fx; / PyTorch %.2fx; top-1 same as ORT: %s, as PyTorch: %s\n",
        b, r, f, f / o, f / t, so, st }'
    ro="$ro $(awk -v f="$fi_" -v o="$oi" 'BEGIN{printf "%.4f", f / o}')"
    rt="$rt $(awk -v f="$fi_" -v t="$ti" 'BEGIN{printf "%.4f", f / t}')"
  done
  med() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END{m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.2fx (%.2f-%.2f)", m, v[1], v[NR]}'; }
  echo "batch $b over $rounds rounds: Floe / ONNX Runtime $(med "$ro"); Floe / PyTorch $(med "$rt")"
done
