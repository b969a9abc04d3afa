#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gloo_compare.sh - the gloo backend's all_reduce through Floe (bench_collective) against
# Gloo's ring allreduce called directly (gloo_direct), run alternately REPEAT times per rank
# count; prints per size the best median (p50_us) of each and their ratio (floe / direct; the
# target is <= 1.1). Run from the build tree after `make -C bench gloo_direct bench_collective`.
#   RANKS="2 4" REPEAT=3 MAX_BYTES=67108864 sh bench/gloo_compare.sh
set -eu
b=${top_builddir:-.}
RANKS=${RANKS:-2 3 4}
REPEAT=${REPEAT:-3}
MAX_BYTES=${MAX_BYTES:-67108864}
SECONDS_PER_SIZE=${SECONDS_PER_SIZE:-0.3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for n in $RANKS; do
  i=0
  while [ "$i" -lt "$REPEAT" ]; do
    "$b/bench/gloo_direct" --ranks "$n" --max-bytes "$MAX_BYTES" --seconds "$SECONDS_PER_SIZE" >>"$out"
    FLOE_PLUGIN_PATH="$b/plugins/collective/gloo/.libs" "$b/bench/bench_collective" --ranks "$n" \
      --max-bytes "$MAX_BYTES" --seconds "$SECONDS_PER_SIZE" >>"$out"
    i=$((i + 1))
  done
done
python3 - "$out" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        k = (d["ranks"], d["bytes"], d["bench"])
        best[k] = min(best.get(k, float("inf")), d["p50_us"])
print("%5s %10s %12s %12s %7s" % ("ranks", "bytes", "direct_us", "floe_us", "ratio"))
for (n, size, bench) in sorted(k for k in best if k[2] == "gloo_direct"):
    a, f = best[(n, size, bench)], best.get((n, size, "floe_gloo"))
    print("%5d %10d %12.1f %12s %7s" % (n, size, a, "%.1f" % f if f else "-",
                                        "%.2f" % (f / a) if f else "-"))
PY
