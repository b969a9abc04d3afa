#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Peak memory of the cnn and LSTM training steps with the memory passes off and on, side by
# side in one run: `floe train --json`'s step_peak_tensor_mb (the most tensor bytes a step
# after the first had alive at once above those alive when it began) and peak_rss_mb, with
# buffer reuse (FLOE_OPT_BUFFER_REUSE) and memory-aware scheduling
# (FLOE_OPT_MEMORY_SCHEDULING) each off and on, at 1 and 2 threads; the runs of one
# setting alternate with the others' (ROUNDS times) and the table shows each setting's
# median. The losses must agree between settings at one thread count (the passes change
# only where results are written and the order of independent nodes).
# Usage: ROUNDS=3 sh bench/memory.sh   (after `make`)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-3}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_WAIT_POLICY=passive FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
floe="$top/tools/floe"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq 1 "$rounds"); do
  for t in 1 2; do
    for reuse in 0 1; do
      for sched in 0 1; do
        for model in cnn lstm; do
          if [ $model = cnn ]; then args="--model cnn --epochs 1 --limit 5000 --input feed"
          else args="--model lstm --steps 30"; fi
          # shellcheck disable=SC2086 # args is a list of options
          FLOE_OPT_BUFFER_REUSE=$reuse FLOE_OPT_MEMORY_SCHEDULING=$sched \
            "$floe" train $args --threads "$t" --json 2>/dev/null | grep '^{' | tail -n 1 |
            sed "s/}$/,\"reuse\":$reuse,\"sched\":$sched,\"t\":$t,\"round\":$round}/" >>"$out"
        done
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | threads | buffer reuse | memory scheduling | step peak (MiB) | peak RSS (MB) | loss |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for m in ("cnn", "lstm"):
    for t in (1, 2):
        losses = set()
        for reuse in (0, 1):
            for sched in (0, 1):
                r = [x for x in rows if x["model"] == m and x["t"] == t and x["reuse"] == reuse and x["sched"] == sched]
                if not r:
                    continue
                peak = statistics.median(x["step_peak_tensor_mb"] for x in r)
                rss = statistics.median(x["peak_rss_mb"] for x in r)
                loss = r[0]["final_loss"]
                losses.add(round(loss, 6))
                print("| %s | %d | %s | %s | %.1f (%s) | %.0f | %.6f |" % (
                    m, t, "on" if reuse else "off", "on" if sched else "off", peak,
                    ", ".join("%.1f" % x["step_peak_tensor_mb"] for x in r), rss, loss))
        if len(losses) > 1:
            print("memory.sh: %s at %d threads: the settings' losses differ: %s" % (m, t, losses))
PY
