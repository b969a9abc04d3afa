#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# allreduce.sh - all-reduce side by side in one run (docs/benchmarks.md "Collectives"), from
# the build tree after `make -C bench bench_allreduce gloo_direct bench_collective`:
#   - Floe's built-in ring through the graph ops (bench_allreduce --backend ring) over fabric
#     and over ucx, and the gloo backend through the graph ops (--backend gloo), against
#     Gloo's ring allreduce called directly (gloo_direct), 4 KiB to 64 MiB, 2 and 4 ranks;
#   - the ring through the runtime's collective manager without a session (--api: the
#     algorithm's own cost, what gloo_direct measures of Gloo's), over fabric and ucx;
#   - the gloo backend through the plugin ABI (bench_collective) against Gloo direct (the
#     backend's own overhead, no graph);
#   - 200 gradients of 4 KiB a step, unfused and fused (floe_all_reduce_n), ring and gloo;
#   - with GLOO_HEADER=1, the gloo backend's two rows again with FLOE_GLOO_CHECK_ARGS=1 (its
#     own argument header before every operation, as before the core checked the arguments:
#     "floe_gloo_hdr").
# Each configuration runs REPEAT times, alternating; the best median (p50_us) of each is kept.
#   RANKS="2 4" REPEAT=2 [MAX_BYTES=1048576] [GLOO_HEADER=1] sh bench/allreduce.sh
set -eu
b=${top_builddir:-.}
RANKS=${RANKS:-2 4}
REPEAT=${REPEAT:-2}
MAX_BYTES=${MAX_BYTES:-67108864}
GLOO_HEADER=${GLOO_HEADER:-0}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
P="$b/plugins/cpu/.libs:$b/plugins/transport/local/.libs:$b/plugins/transport/fabric/.libs"
P="$P:$b/plugins/transport/ucx/.libs:$b/plugins/collective/gloo/.libs"
export FLOE_PLUGIN_PATH="$P"
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
for n in $RANKS; do
  i=0
  while [ "$i" -lt "$REPEAT" ]; do
    "$b/bench/gloo_direct" --ranks "$n" --max-bytes "$MAX_BYTES" --seconds 0.3 >>"$out"
    FLOE_TRANSPORT=fabric "$b/bench/bench_allreduce" --ranks "$n" --max-bytes "$MAX_BYTES" >>"$out"
    FLOE_TRANSPORT=ucx "$b/bench/bench_allreduce" --ranks "$n" --max-bytes "$MAX_BYTES" >>"$out"
    FLOE_TRANSPORT=fabric "$b/bench/bench_allreduce" --ranks "$n" --api --max-bytes "$MAX_BYTES" >>"$out"
    FLOE_TRANSPORT=ucx "$b/bench/bench_allreduce" --ranks "$n" --api --max-bytes "$MAX_BYTES" >>"$out"
    FLOE_TRANSPORT=fabric "$b/bench/bench_allreduce" --ranks "$n" --backend gloo \
      --max-bytes "$MAX_BYTES" >>"$out"
    "$b/bench/bench_collective" --ranks "$n" --max-bytes "$MAX_BYTES" --seconds 0.3 >>"$out"
    if [ "$GLOO_HEADER" = 1 ]; then
      hdr='s/"bench":"floe_gloo"/"bench":"floe_gloo_hdr"/'
      FLOE_GLOO_CHECK_ARGS=1 FLOE_TRANSPORT=fabric "$b/bench/bench_allreduce" --ranks "$n" \
        --backend gloo --max-bytes "$MAX_BYTES" | sed "$hdr" >>"$out"
      FLOE_GLOO_CHECK_ARGS=1 "$b/bench/bench_collective" --ranks "$n" --max-bytes "$MAX_BYTES" \
        --seconds 0.3 | sed "$hdr" >>"$out"
    fi
    for be in ring gloo; do
      FLOE_TRANSPORT=fabric "$b/bench/bench_allreduce" --ranks "$n" --backend "$be" --fusion >>"$out"
    done
    i=$((i + 1))
  done
done
python3 - "$out" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    name = d["bench"] + ("/" + d["transport"] if d["bench"].startswith("floe_") and
                         "transport" in d else "")
    k = (d["ranks"], d["bytes"], name)
    best[k] = min(best.get(k, float("inf")), d["p50_us"])
names = sorted({k[2] for k in best if "200x4KiB" not in k[2]})
for n in sorted({k[0] for k in best}):
    print("%d ranks: p50 us (best of runs); ratios against gloo_direct" % n)
    print("%10s " % "bytes" + " ".join("%22s" % x for x in names))
    for size in sorted({k[1] for k in best if k[0] == n and "200x4KiB" not in k[2]}):
        base = best.get((n, size, "gloo_direct"))
        row = []
        for x in names:
            v = best.get((n, size, x))
            row.append("%22s" % ("-" if v is None else "%.0f (%.2f)" % (v, v / base) if base
                                 else "%.0f" % v))
        print("%10d " % size + " ".join(row))
    for (r, size, x), v in sorted(best.items()):
        if r == n and "200x4KiB" in x:
            print("  %-40s %.0f us a step" % (x, v))
PY
