#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The paper's Table 1 networks trained on this CPU, side by side in one run: AlexNet, VGG-11
# ("OxfordNet") and GoogLeNet from torchvision (10 classes, seeded weights, inference form:
# dropout off, batch norm on its running statistics), 224x224 RGB images, batch 16, Adam at
# a constant learning rate, on the first 16 x STEPS Fashion-MNIST training images enlarged to
# 3x224x224 (each pixel 8x8 times in every channel). PyTorch (bench/.venv) trains the
# module; Floe trains the same module exported to ONNX (`floe train --onnx M.onnx`: every
# initializer a variable). Both run EPOCHS epochs of STEPS steps; the table has the median
# step time (PyTorch: the better of 1 and 2 threads, OMP_WAIT_POLICY=passive), the ratio
# (PyTorch's time / Floe's: above 1, Floe is faster) and each epoch's mean loss, which must
# fall on both.
# Usage: STEPS=10 EPOCHS=2 MODELS="alexnet vgg11 googlenet" sh bench/table1.sh
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
steps=${STEPS:-10}
epochs=${EPOCHS:-2}
models=${MODELS:-alexnet vgg11 googlenet}
lr=${LR:-0.0001}
dir=${TABLE1_DIR:-/tmp/floe-table1}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
py="$top/bench/.venv/bin/python"
[ -x "$py" ] || { echo "table1.sh: no bench/.venv (run bench/setup_venv.sh)" >&2; exit 1; }
mkdir -p "$dir"
out="$dir/results.jsonl"
: >"$out"
for m in $models; do
  [ -f "$dir/$m.onnx" ] || "$py" "$top/bench/table1_torch.py" export "$dir" "$m" >/dev/null
  for t in 1 2; do
    OMP_NUM_THREADS=$t "$py" "$top/bench/table1_torch.py" train "$m" 16 "$steps" "$epochs" "$lr" "$t" >>"$out"
  done
  "$top/tools/floe" train --onnx "$dir/$m.onnx" --batch 16 --limit $((16 * steps)) \
    --epochs "$epochs" --lr "$lr" --lr-schedule constant --optimizer adam --threads 2 \
    --json >"$dir/$m.floe.out" 2>&1 || { echo "table1.sh: floe train $m failed:" >&2; tail -n 5 "$dir/$m.floe.out" >&2; continue; }
  python3 - "$dir/$m.floe.out" "$m" >>"$out" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
d = json.loads([l for l in lines if l.startswith("{")][-1])
loss = [float(m.group(1)) for l in lines for m in [re.match(r"epoch \d+/\d+ loss ([0-9.e+-]+)", l)] if m]
print(json.dumps({"system": "floe", "model": sys.argv[2], "threads": 2, "batch": 16,
                  "step_ms": d["step_time_p50_ms"], "epoch_loss": loss,
                  "step_peak_tensor_mb": d.get("step_peak_tensor_mb")}))
PY
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | PyTorch step (ms, best of 1 and 2 threads) | Floe step (ms) | PyTorch / Floe | loss by epoch, PyTorch | loss by epoch, Floe |")
print("| --- | --- | --- | --- | --- | --- |")
for m in dict.fromkeys(r["model"] for r in rows):
    torch = [r for r in rows if r["model"] == m and r["system"] == "torch"]
    floe = [r for r in rows if r["model"] == m and r["system"] == "floe"]
    if not torch or not floe:
        continue
    best = min(torch, key=lambda r: r["step_ms"])
    f = floe[0]
    print("| %s | %.0f (%d threads; %s) | %.0f | %.2f | %s | %s |" % (
        m, best["step_ms"], best["threads"],
        ", ".join("%.0f" % r["step_ms"] for r in torch), f["step_ms"], best["step_ms"] / f["step_ms"],
        " > ".join("%.3f" % x for x in best["epoch_loss"]), " > ".join("%.3f" % x for x in f["epoch_loss"])))
PY
