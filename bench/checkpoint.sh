#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# checkpoint.sh - checkpoint write time against bytes (docs/benchmarks.md "Checkpoints"),
# from the build tree after `make -C bench bench_checkpoint`: bench_checkpoint's cluster in one
# process (a chief and 1 or 2 ps tasks over FLOE_TRANSPORT, default fabric: tcp on loopback)
# with 8 f32 variables totalling each of SIZES MiB; the sharded save (each ps writes its file)
# against the single-file save (every value fetched to the chief), REPEAT times alternating,
# then each one's restore with its files dropped from the page cache; medians. DIR is where the
# checkpoints go (default a folder in /tmp: the disk measured is that one's).
#   SIZES=1,16,128,512 PS=1,2 REPEAT=3 DIR=/var/tmp/ck sh bench/checkpoint.sh
set -eu
b=${top_builddir:-.}
SIZES=${SIZES:-1,16,128,512}
PS=${PS:-1,2}
REPEAT=${REPEAT:-3}
export FLOE_PLUGIN_PATH="$b/plugins/cpu/.libs:$b/plugins/transport/local/.libs:$b/plugins/transport/fabric/.libs"
export FLOE_TRANSPORT=${FLOE_TRANSPORT:-fabric}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$b/bench/bench_checkpoint" --sizes "$SIZES" --ps "$PS" --repeat "$REPEAT" ${DIR:+--dir "$DIR"} |
  tee "$out" >&2
echo "medians of $REPEAT saves and restores of each (transport $FLOE_TRANSPORT):"
python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["ps"], r["mib"]), {})[r["kind"]] = r
print("| ps | MiB | sharded save (s) | MB/s | fsync | single save (s) | MB/s | fsync | single / sharded | sharded restore (s) | single restore (s) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (ps, mib), k in sorted(rows.items()):
    a, b = k["sharded"], k["single"]
    num = lambda x, key, f: f % x[key] if x.get(key) is not None and x[key] >= 0 else "failed"
    pct = lambda x: "%.0f%%" % (100 * x["fsync_share"]) if x.get("save_s") is not None else "-"
    print("| %d | %g | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        ps, mib, num(a, "save_s", "%.3f"), num(a, "save_mbs", "%.0f"), pct(a),
        num(b, "save_s", "%.3f"), num(b, "save_mbs", "%.0f"), pct(b),
        num(a, "save_vs_single", "%.2f"), num(a, "restore_s", "%.3f"), num(b, "restore_s", "%.3f")))
errors = {x.get("error") for k in rows.values() for x in k.values()} - {None}
for e in sorted(errors):
    print("failed:", e)
PY
