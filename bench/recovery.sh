#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# recovery.sh - from a failure to training again (docs/benchmarks.md "Recovery"): floe launch
# --every-task --max-restarts 1 --restart SCOPE runs floe train --cluster env --replication
# sync (chief + worker + 1 ps, mlp, 3 epochs of 3,000 Fashion-MNIST examples, a checkpoint
# after each epoch), and the chief's test hook (FLOE_TEST_KILL_AT_STEP) sends SIGKILL to the
# worker or the ps, or SIGSTOP to the worker (a hang), at global step 30. SCOPE task: the dead
# task starts again alone and the others re-form the cluster in their processes (a hang ends
# in a restart of the job after the chief's 5 s re-form wait); job: every task starts again.
# Every line launch and the tasks write is stamped as it comes; for each run:
#   detect  = from the hook's line (the signal) to the first of a survivor's "[recovery 1
#             of" (task) or launch's "stopping the other tasks" (job);
#   stop    = from there to "every task starts again" (the other tasks stopped; 0 when the
#             job did not restart);
#   first   = from there to the chief's "first step after recovery" (start-up or re-forming,
#             cluster, restore, one step);
#   total   = detect + stop + first.
# Each case runs REPEAT times over each transport in TRANSPORTS and each scope in SCOPES; the
# medians are printed.
#   REPEAT=5 TRANSPORTS="fabric ucx" SCOPES="task job" HEARTBEAT=1 sh bench/recovery.sh
set -eu
b=${top_builddir:-.}
REPEAT=${REPEAT:-5}
TRANSPORTS=${TRANSPORTS:-fabric ucx}
SCOPES=${SCOPES:-task job}
HEARTBEAT=${HEARTBEAT:-1}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
P="$b/plugins/cpu/.libs:$b/plugins/transport/local/.libs:$b/plugins/transport/fabric/.libs"
export FLOE_PLUGIN_PATH="$P:$b/plugins/transport/ucx/.libs"
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
F="$b/tools/floe"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stamp() { python3 -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write("%.4f %s" % (time.monotonic(), line))'; }
echo "case transport scope detect_s stop_s first_s total_s"
for tr in $TRANSPORTS; do
 for sc in $SCOPES; do
  for c in "kill_worker /job:worker/task:0 KILL" "kill_ps /job:ps/task:0 KILL" \
           "hang_worker /job:worker/task:0 STOP"; do
    set -- $c
    i=0
    while [ "$i" -lt "$REPEAT" ]; do
      rm -rf "$tmp/ck"
      (FLOE_TRANSPORT=$tr FLOE_TEST_KILL_AT_STEP=30 FLOE_TEST_KILL_TASK=$2 FLOE_TEST_KILL_SIGNAL=$3 \
        timeout 300 "$F" launch --workers 1 --ps 1 --every-task --max-restarts 1 --restart "$sc" \
        -- "$F" train --threads 1 --data "$DATA" --cluster env --replication sync --limit 3000 \
        --epochs 3 --heartbeat-timeout "$HEARTBEAT" --checkpoint-dir "$tmp/ck" 2>&1 >/dev/null) |
        stamp >"$tmp/log"
      awk -v c="$1" -v tr="$tr" -v sc="$sc" '
        index($0, "test hook: kill") && !a { a = $1 }
        (index($0, "stopping the other tasks") || index($0, "[recovery 1 of")) && !d { d = $1 }
        index($0, "every task starts again") && !s { s = $1 }
        index($0, "first step after recovery") && !f { f = $1 }
        END { if (!s) s = d
              if (a && d && f) printf "%s %s %s %.3f %.3f %.3f %.3f\n", c, tr, sc, d - a, s - d, f - s, f - a
              else printf "%s %s %s failed\n", c, tr, sc }' "$tmp/log"
      i=$((i + 1))
    done
  done
 done
done | tee "$tmp/all" >&2
echo "medians of $REPEAT runs (heartbeat timeout $HEARTBEAT s):"
python3 - "$tmp/all" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 7: continue
    rows.setdefault((f[0], f[1], f[2]), []).append([float(x) for x in f[3:]])
print("%-12s %-9s %-5s %8s %8s %8s %8s" % ("case", "transport", "scope", "detect", "stop", "first", "total"))
for (c, t, sc), v in rows.items():
    m = [statistics.median(col) for col in zip(*v)]
    print("%-12s %-9s %-5s %8.3f %8.3f %8.3f %8.3f" % (c, t, sc, *m))
PY
