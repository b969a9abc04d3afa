#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# replication.sh - the paper's replication findings (TensorFlow OSDI 2016, section 6.3 and
# figure 8) on this machine, with floe train --cluster under floe launch --every-task (every
# task on this machine's cores, fabric tcp over loopback):
#
#  1. backup workers: chief + 4 workers, 1 ps, mlp, one worker a straggler (an exponential
#     delay of mean DELAY_MS before each of its steps, FLOE_TEST_STEP_DELAY_MEAN_MS); sync
#     aggregating all 5 gradients (no backup) against 4 (one backup) and 3 (two): the chief's
#     median and 90th-percentile step time, global steps per second, examples applied per
#     second (global steps x gradients per step x batch), stale gradients dropped;
#  2. async against sync, the same cluster without the straggler.
#
#   sh bench/replication.sh          (from the build tree; LIMIT examples, default 12800)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here}
top=$(cd "$build/.." && pwd)
FLOE=$top/tools/floe
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
limit=${LIMIT:-12800}
delay=${DELAY_MS:-150}
workers=${WORKERS:-4}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-repl.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
export FLOE_TRANSPORT=${TRANSPORT:-fabric}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "chief + $workers workers + 1 ps, mlp, $limit examples, 1 epoch, --threads 1"
printf '%-26s %9s %9s %11s %10s %7s %9s\n' run p50_ms p90_ms gsteps_per_s examples_s stale accuracy
run() { # run LABEL STRAGGLER(0/1) ARGS...
  label=$1 strag=$2
  shift 2
  if [ "$strag" = 1 ]; then
    export FLOE_TEST_STEP_DELAY_MEAN_MS=$delay FLOE_TEST_STEP_DELAY_TASK=/job:worker/task:$((workers - 1))
  else
    unset FLOE_TEST_STEP_DELAY_MEAN_MS FLOE_TEST_STEP_DELAY_TASK
  fi
  if "$FLOE" launch --workers "$workers" --ps 1 --every-task -- "$FLOE" train --cluster env \
      --data "$DATA" --limit "$limit" --epochs 1 --threads 1 --json "$@" \
      >"$tmp/out" 2>"$tmp/err"; then
    python3 - "$tmp/out" "$label" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
gs = d["global_step"] / d["train_seconds"] if d["train_seconds"] else 0
ex = gs * d.get("replicas_to_aggregate", 1) * d["batch"]  # examples applied per second
print("%-26s %9.2f %9.2f %11.1f %10.0f %7s %9.4f" % (sys.argv[2], d["step_time_p50_ms"],
      d["step_time_p90_ms"], gs, ex, d.get("stale_gradients_dropped", "-"), d["test_accuracy"]))
PY
  else
    printf '%-26s failed: %s\n' "$label" "$(tail -1 "$tmp/err")"
  fi
}
n=$((workers + 1))
echo "## 1. a straggler (mean delay ${delay} ms) on /job:worker/task:$((workers - 1))"
run "sync, no backup (K=$n)" 1 --replication sync --replicas-to-aggregate $n
run "sync, 1 backup (K=$((n - 1)))" 1 --replication sync --replicas-to-aggregate $((n - 1))
run "sync, 2 backups (K=$((n - 2)))" 1 --replication sync --replicas-to-aggregate $((n - 2))
run "async" 1 --replication async
echo "## 2. no straggler"
run "sync (K=$n)" 0 --replication sync
run "async" 0 --replication async
