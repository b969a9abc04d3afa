#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Training throughput side by side in one run: `floe train` against PyTorch and TensorFlow
# (bench/train_baselines.py) on the same model, batch (64), optimiser (Adam 1e-3) and data
# (Fashion-MNIST). Every system gets 1 and 2 threads, each with OMP_WAIT_POLICY=passive and
# active; the best setting of each is compared. OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset for all.
#
# Usage: bench/run_train.sh [mlp|cnn|all] [BASELINE_STEPS]   (after `make` and
#        bench/setup_venv.sh; Debian's python3-torch (1.13) is measured too when installed)
# Prints one JSON line per run, then a summary table.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
models=${1:-all}
[ "$models" = all ] && models="mlp cnn"
steps=${2:-}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
venv="$top/bench/.venv/bin/python"
deb_py=/usr/bin/python3 # Debian's interpreter, where apt's python3-torch lands
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for m in $models; do
  if [ -z "$steps" ]; then
    if [ "$m" = mlp ]; then s=900; else s=150; fi
  else
    s=$steps
  fi
  for t in 1 2; do
    for w in passive active; do
      # Floe: one epoch (the JSON's samples_per_sec excludes evaluation), with the constant
      # learning rate the baselines use; the wait policy matters to its mid-sized products,
      # which still run on OpenMP threads.
      OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$top/tools/floe" train --model "$m" --epochs 1 \
        --threads "$t" --lr-schedule constant --json |
        tail -n 1 |
        sed "s/^{/{\"system\":\"floe\",\"omp_wait_policy\":\"$w\",/" | tee -a "$out"
      if [ -x "$venv" ]; then
        OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$venv" "$top/bench/train_baselines.py" \
          --system torch --model "$m" --threads "$t" --steps "$s" | tee -a "$out"
        OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$venv" "$top/bench/train_baselines.py" \
          --system tf --model "$m" --threads "$t" --steps "$s" | tee -a "$out"
      fi
      if "$deb_py" -c 'import torch' 2>/dev/null; then
        OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$deb_py" "$top/bench/train_baselines.py" \
          --system torch --model "$m" --threads "$t" --steps "$s" |
          sed 's/"system": "pytorch"/"system": "pytorch-debian"/' | tee -a "$out"
      fi
    done
  done
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
best = {}
for r in rows:
    k = (r["model"], r["system"])
    if k not in best or r["samples_per_sec"] > best[k]["samples_per_sec"]:
        best[k] = r
print()
print("%-5s %-15s %-14s %8s %14s %10s" % ("model", "system", "version", "threads", "samples/s", "RSS MB"))
for (m, s), r in sorted(best.items()):
    print("%-5s %-15s %-14s %8s %14.0f %10.0f" % (m, s, str(r.get("version", ""))[:14],
          "%s%s" % (r["threads"], " " + r["omp_wait_policy"][:4] if r.get("omp_wait_policy") else ""),
          r["samples_per_sec"], r["peak_rss_mb"]))
for m in sorted({m for m, _ in best}):
    f = best.get((m, "floe"))
    others = [r for (mm, s), r in best.items() if mm == m and s != "floe"]
    if f and others:
        o = max(others, key=lambda r: r["samples_per_sec"])
        print("%s: floe / fastest baseline (%s) = %.2fx samples/s; peak RSS %.0f MB vs %.0f MB"
              % (m, o["system"], f["samples_per_sec"] / o["samples_per_sec"], f["peak_rss_mb"],
                 min(r["peak_rss_mb"] for r in others)))
PY
