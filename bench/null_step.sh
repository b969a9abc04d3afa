#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# null_step.sh - the paper's null-step microbenchmark (TensorFlow OSDI 2016, section 6.2):
# steps whose workers only fetch the model from the ps tasks, for 1, 2 and 4 workers and 1
# and 2 ps tasks, scalar, dense and sparse models, each cluster started by floe launch on
# this machine and timed by floe run --perf (median and 90th percentile of the step, ms).
#
#   sh bench/null_step.sh            (from the build tree)
#
# TRANSPORT (default fabric) and PROVIDER (default "tcp;ofi_rxm") pick the data plane;
# DENSE_BYTES (default 16 MiB: the paper's 100 MB dense model, scaled to a 2-core machine
# whose 4 workers would otherwise share 400 MB of copies a step), SPARSE_ROWS (default 128K
# rows of 64 f32: 32 MB; a registered piece travels in one control frame of at most 64 MiB,
# so larger constant tables wait for variables on ps tasks), REPEAT (default 200 steps,
# 20 for dense), WORKERS ("1 2 4"), PS ("1 2").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here}
top=$(cd "$build/.." && pwd)
FLOE=$top/tools/floe
transport=${TRANSPORT:-fabric}
provider=${PROVIDER:-tcp;ofi_rxm}
dense=${DENSE_BYTES:-16777216}
rows=${SPARSE_ROWS:-131072}
repeat=${REPEAT:-200}
make -s -C "$build" null_step_graphs >/dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-null.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), transport $transport ($provider)"
printf '%-7s %7s %3s %10s %10s\n' model workers ps p50_ms p90_ms
for w in ${WORKERS:-1 2 4}; do
  for p in ${PS:-1 2}; do
    "$build/null_step_graphs" "$tmp" "$w" "$p" "$dense" "$rows"
    for kind in scalar dense sparse; do
      n=$repeat
      [ "$kind" = dense ] && n=$(( repeat / 10 > 5 ? repeat / 10 : 5 ))
      if "$FLOE" launch --workers "$w" --ps "$p" --transport "$transport" --provider "$provider" -- \
          "$FLOE" run "$tmp/null_${kind}_w${w}_ps${p}.floe" --cluster env --fetch out --perf \
          --warmup 5 --repeat "$n" --json >"$tmp/out.json" 2>"$tmp/err"; then
        python3 - "$tmp/out.json" "$kind" "$w" "$p" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
lat = d.get("latency_ms") or d.get("latency") or {}
p50 = lat.get("p50"); p90 = lat.get("p90")
print("%-7s %7s %3s %10.3f %10.3f" % (sys.argv[2], sys.argv[3], sys.argv[4], p50, p90))
PY
      else
        printf '%-7s %7s %3s %10s (%s)\n' "$kind" "$w" "$p" failed "$(tail -1 "$tmp/err")"
      fi
    done
  done
done
