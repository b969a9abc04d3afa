#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# data_parallel.sh - data-parallel training (between-graph replication) of the mlp and the
# cnn on 1, 2 and 4 training tasks (the chief + 0, 1, 3 workers) with 1 and 2 ps tasks, with
# floe train --cluster under floe launch --every-task (every task on this machine's cores,
# fabric tcp over loopback). Every training task writes its JSON line (--json); for each
# run and each task this prints examples/s (the task's own), its median step, and its steps
# split into compute, wait_params and send_grads (per-step means in ms: the step split of
# docs/benchmarks.md, "Step split"), then the run's examples/s summed over the tasks.
# Async replication throughout; sync for the mlp on 2 and 4 tasks with 1 ps; allreduce (no
# ps) for every model on 2 and 4 tasks, beside sync on 1 ps (ALLREDUCE=0 skips them;
# ONLY_ALLREDUCE=1 runs only them).
#
#   sh bench/data_parallel.sh      (from the build tree; LIMIT examples, default 6400;
#                                   MODELS, default "mlp cnn"; SYNC=0 skips the sync runs)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here}
top=$(cd "$build/.." && pwd)
FLOE=$top/tools/floe
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
limit=${LIMIT:-6400}
models=${MODELS:-mlp cnn}
sync=${SYNC:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-dp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
export FLOE_TRANSPORT=${TRANSPORT:-fabric}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "$limit examples, 1 epoch, batch 64, --threads 1 in every task"
# run MODEL TASKS PS REPLICATION: one table
run() {
  model=$1 tasks=$2 ps=$3 repl=$4
  label="$model, $tasks training task$([ "$tasks" = 1 ] || echo s), $ps ps, $repl"
  start=$(date +%s.%N)
  if "$FLOE" launch --workers $((tasks - 1)) --ps "$ps" --every-task -- "$FLOE" train \
      --cluster env --model "$model" --data "$DATA" --limit "$limit" --epochs 1 --threads 1 \
      --replication "$repl" --json >"$tmp/out" 2>"$tmp/err"; then
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')
    python3 - "$tmp/out" "$tmp/err" "$label" "$secs" <<'PY'
import json, sys
rows = [json.loads(l) for f in sys.argv[1:3] for l in open(f) if l.startswith('{"model"')]
rows.sort(key=lambda d: (not d["cluster_task"].startswith("/job:chief"), d["cluster_task"]))
chief = rows[0]
print("## %s (%.0f s with the test; test accuracy %.4f)" % (sys.argv[3], float(sys.argv[4]),
      chief["test_accuracy"]))
print("| task | steps | examples/s | step p50 ms | step mean ms | compute | wait_params | "
      "send_grads | (kernels) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
total = 0
for d in rows:
    s = d["step_split_ms"] or {}
    total += d["samples_per_sec"]
    task = d["cluster_task"].replace("/replica:0", "").replace("/job:", "")
    print("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (task, d["steps"],
          d["samples_per_sec"], d["step_time_p50_ms"], s.get("wall", 0), s.get("compute", 0),
          s.get("wait_params", 0), s.get("send_grads", 0), s.get("kernels", 0)))
tr = sum(d["step_split_ms"]["tracing"] + d["step_split_ms"]["overhead"] for d in rows) / len(rows)
print("| all | %d | %.0f | | | | | | |" % (sum(d["steps"] for d in rows), total))
if chief.get("replication") == "allreduce":
    print("(bytes per step to/from the other tasks: %.0f / %.0f, %s, fusion %d; measuring cost "
          "%.2f ms a step)\n" % (chief["bytes_to_peers_per_step"], chief["bytes_from_peers_per_step"],
                                 chief["collective"], chief["fusion_bytes"], tr))
else:
    print("(bytes per step to/from the ps tasks: %.0f / %.0f; measuring cost %.2f ms a step)\n" % (
          sum(chief["bytes_to_ps_per_step"]), sum(chief["bytes_from_ps_per_step"]), tr))
PY
  else
    echo "## $label: failed: $(tail -1 "$tmp/err")"
  fi
}
if [ "${ONLY_ALLREDUCE:-0}" != 1 ]; then
for model in $models; do
  for ps in 1 2; do
    for tasks in 1 2 4; do run "$model" "$tasks" "$ps" async; done
  done
done
fi
if [ "$sync" = 1 ] && [ "${ONLY_ALLREDUCE:-0}" != 1 ]; then
  for tasks in 2 4; do run mlp "$tasks" 1 sync; done
fi
# No ps tasks: every task holds the variables, gradients averaged by all-reduce (the ring);
# against sync on 1 ps, the same global batch per step.
if [ "${ALLREDUCE:-1}" = 1 ]; then
  for model in $models; do
    for tasks in 2 4; do
      run "$model" "$tasks" 0 allreduce
      # (the mlp's sync runs above already, unless only these run)
      if [ "$model" != mlp ] || [ "$sync" != 1 ] || [ "${ONLY_ALLREDUCE:-0}" = 1 ]; then
        run "$model" "$tasks" 1 sync
      fi
    done
  done
fi
