#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Two builds of Floe side by side, interleaved round by round so that the machine's noise
# falls on both alike: the executor's overhead (bench_executor: 10,000 scalar adds, chain and
# independent, us per node) and one epoch of `floe train --model mlp` and `--model cnn`
# (training samples/s). For a change that must not slow anything down: A = the code before
# it, B = after (each a built tree: `make` and `make -C bench bench_executor`).
#
# Usage: bench/run_ab.sh TREE_A TREE_B [ROUNDS]   (default 5 rounds; threads: FLOE_AB_THREADS,
#        default 2). Prints one JSON line per measurement, then the medians and B/A ratios.
set -eu
a=$(cd "$1" && pwd)
b=$(cd "$2" && pwd)
rounds=${3:-5}
threads=${FLOE_AB_THREADS:-2}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS="$threads"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in "$a" "$b"; do
  [ -x "$t/bench/bench_executor" ] || make -s -C "$t/bench" bench_executor >/dev/null
done
one() { # LABEL TREE
  export FLOE_PLUGIN_PATH="$2/plugins/cpu/.libs"
  "$2/bench/bench_executor" --reps 20 --threads "$threads" --json |
    sed "s/^{/{\"build\":\"$1\",\"what\":\"executor\",/" | tee -a "$out"
  for m in mlp cnn; do
    "$2/tools/floe" train --model "$m" --epochs 1 --threads "$threads" --json | tail -n 1 |
      sed "s/^{/{\"build\":\"$1\",\"what\":\"train\",/" | tee -a "$out"
  done
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then one A "$a"; one B "$b"; else one B "$b"; one A "$a"; fi
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(build, pick):
    v = [pick(r) for r in rows if r["build"] == build and pick(r) is not None]
    return statistics.median(v) if v else None
metrics = []
for k in sorted({k for r in rows if r["what"] == "executor" for k in r if k.endswith("_us_per_node")}):
    metrics.append(("executor " + k + " (lower is better)",
                    lambda r, k=k: r.get(k) if r["what"] == "executor" else None))
for m in ("mlp", "cnn"):
    metrics.append(("train %s samples/s (higher is better)" % m,
                    lambda r, m=m: r["samples_per_sec"] if r["what"] == "train" and r["model"] == m else None))
print()
for name, pick in metrics:
    x, y = med("A", pick), med("B", pick)
    if x and y:
        print("%-52s A %10.4g  B %10.4g  B/A %.3f" % (name, x, y, y / x))
PY
