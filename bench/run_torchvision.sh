#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Inference of torchvision classification models, Floe against ONNX Runtime, side by side
# (docs/benchmarks.md "torchvision models"): each model is built with seeded random weights
# and exported by torch.onnx (bench/torchvision_export.py, needs torchvision and pillow in
# bench/.venv: bench/setup_venv.sh), then run by Floe (bench_onnx: import, the session's
# optimiser, its default thread pool) and by ONNX Runtime with every optimisation on and its
# best of 1 and 2 threads (bench/torchvision_ort.py), on the same seeded batch, alternately
# ROUNDS times (default 3; this machine's speed drifts). Prints each run's JSON line, then per
# model and batch the median round's ratio Floe / ONNX Runtime (images/s), its range, and
# whether the top-1 class of every image agreed in every round.
# usage: [ROUNDS=N] [ITERS=N] bench/run_torchvision.sh [MODEL...]   (from the build tree)
#   default models: mobilenet_v2 mobilenet_v3_small squeezenet1_1 shufflenet_v2_x1_0
#   efficientnet_b0 googlenet densenet121 resnet50 vgg11; batches BATCHES (default "1 8")
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=$here/.venv/bin/python
rounds=${ROUNDS:-3}
iters=${ITERS:-30}
batches=${BATCHES:-1 8}
out=${TORCHVISION_BENCH_DIR:-/tmp/floe-torchvision-bench}
models=${*:-mobilenet_v2 mobilenet_v3_small squeezenet1_1 shufflenet_v2_x1_0 efficientnet_b0 googlenet densenet121 resnet50 vgg11}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive
make -s -C bench bench_onnx >/dev/null
export FLOE_PLUGIN_PATH=${FLOE_PLUGIN_PATH:-$(pwd)/plugins/cpu/.libs}
ips() { echo "$1" | sed 's/.*"images_per_s": *\([0-9.]*\).*/\1/'; }
for m in $models; do
  # shellcheck disable=SC2086
  [ -f "$out/$m.onnx" ] || "$py" "$here/torchvision_export.py" "$out" "$m" $batches >/dev/null 2>&1 ||
    { echo "$m: export failed (is torchvision in bench/.venv?)"; continue; }
  for b in $batches; do
    in=$out/${m}_b$b.npy
    ratios=""; same=yes
    for r in $(seq "$rounds"); do
      f=$(bench/bench_onnx "$out/$m.onnx" "$in" "$iters" "$out/top1_floe.txt" 2>/dev/null) ||
        { echo "$m batch $b: Floe failed"; same=failed; break; }
      o1=$(OMP_NUM_THREADS=1 "$py" "$here/torchvision_ort.py" "$out/$m.onnx" "$in" "$iters" 1 "$out/top1_ort1.txt")
      o2=$(OMP_NUM_THREADS=2 "$py" "$here/torchvision_ort.py" "$out/$m.onnx" "$in" "$iters" 2 "$out/top1_ort2.txt")
      echo "$m $f"; echo "$m $o1"; echo "$m $o2"
      o=$(awk -v a="$(ips "$o1")" -v b="$(ips "$o2")" 'BEGIN{print (a > b) ? a : b}')
      cmp -s "$out/top1_floe.txt" "$out/top1_ort1.txt" || same=NO
      ratios="$ratios $(awk -v f="$(ips "$f")" -v o="$o" 'BEGIN{printf "%.4f", f / o}')"
    done
    [ "$same" = failed ] && continue
    echo "$ratios" | tr ' ' '\n' | grep . | sort -g | awk -v m="$m" -v b="$b" -v s="$same" -v n="$rounds" \
      '{v[NR]=$1} END{med=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2;
        printf "%s batch %s: Floe / ONNX Runtime %.2fx (%.2f-%.2f over %d rounds), top-1 identical: %s\n", m, b, med, v[1], v[NR], n, s}'
  done
done
