#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The floe command end to end: devices, plugins, ops, graph, run, and its errors.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
check() { # check NAME COMMAND...: expect success
  name=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then pass=$((pass+1)); else
    echo "FAIL: $name (exit $?)"; cat "$tmp/err"; fails=$((fails+1)); fi
}
check_fails() { # check_fails NAME PATTERN COMMAND...: expect failure with PATTERN on stderr
  name=$1; pattern=$2; shift 2
  if "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: $name succeeded"; fails=$((fails+1))
  elif grep -q -- "$pattern" "$tmp/err"; then pass=$((pass+1)); else
    echo "FAIL: $name: stderr lacks '$pattern':"; cat "$tmp/err"; fails=$((fails+1)); fi
}
expect_out() { # expect_out NAME PATTERN: the last command's stdout contains PATTERN
  if grep -q -- "$2" "$tmp/out"; then pass=$((pass+1)); else
    echo "FAIL: $1: stdout lacks '$2':"; cat "$tmp/out"; fails=$((fails+1)); fi
}

"${top_builddir}/tests/cli/make_graphs" "$tmp" || { echo "FAIL: make_graphs"; exit 1; }

check "help" "$FLOE" --help; expect_out "help" "Commands:"
for c in devices plugins ops run graph; do check "$c --help" "$FLOE" $c --help; expect_out "$c --help" "Usage: floe $c"; done

check "devices --json" "$FLOE" devices --json
python3 - "$tmp/out" <<'PY' || { echo "FAIL: devices --json content"; fails=$((fails+1)); }
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and d, d
cpu = [x for x in d if x["type"] == "CPU"]
assert cpu and cpu[0]["plugin"] == "cpu" and cpu[0]["memory_bytes"] > 0, d
assert cpu[0]["name"].endswith("/device:CPU:0"), cpu[0]["name"]
PY
check "devices" "$FLOE" devices; expect_out "devices" "cpu:0"
check "plugins" "$FLOE" plugins; expect_out "plugins" "loaded"
check "plugins --json" "$FLOE" plugins --json; expect_out "plugins --json" '"state":"loaded"'
check "ops" "$FLOE" ops; expect_out "ops" "Conv2D"

check "graph" "$FLOE" graph "$tmp/affine.floe"; expect_out "graph" "mm = MatMul(x, W)"
check "graph --dot" "$FLOE" graph "$tmp/affine.floe" --dot; expect_out "graph --dot" "digraph"
check "graph --json" "$FLOE" graph "$tmp/affine.floe" --json; expect_out "graph --json" '"op":"Relu"'
check "graph --placement" "$FLOE" graph "$tmp/affine.floe" --placement
expect_out "graph --placement" "estimated step time"
expect_out "graph --placement device" "MatMul  *cpu:0"
check "graph --placement --dot" "$FLOE" graph "$tmp/affine.floe" --placement --dot
expect_out "graph --placement --dot" "fillcolor"
check "graph --placement --json" "$FLOE" graph "$tmp/affine.floe" --placement --json
expect_out "graph --placement --json" '"estimated_step_seconds"'
# The graph optimiser: the three adds fold into one, the Identity goes, the two Exps merge.
check "graph --optimized" "$FLOE" graph "$tmp/chain.floe" --optimized
expect_out "graph --optimized passes" "# pass arithmetic on : 9 nodes -> 6, 2 rewritten"
expect_out "graph --optimized cse" "# pass cse        on : 6 nodes -> 5, 1 rewritten, 1 removed"
expect_out "graph --optimized folded" "= Add(x, "
if grep -q "e2 = Exp" "$tmp/out"; then echo "FAIL: the second Exp was not merged"; fails=$((fails+1)); fi
check "graph --optimized --dot" "$FLOE" graph "$tmp/chain.floe" --optimized --dot
expect_out "graph --optimized --dot" "// pass dead_nodes"
expect_out "graph --optimized --dot graph" "digraph"
check "graph --optimized, all off" env FLOE_OPTIMIZE=0 "$FLOE" graph "$tmp/chain.floe" --optimized
expect_out "graph --optimized, all off" "# pass arithmetic off: 9 nodes -> 9"
check_fails "graph --devices alone" "--placement" "$FLOE" graph "$tmp/affine.floe" --devices cpu
check_fails "graph --placement unknown device" "nosuch" "$FLOE" graph "$tmp/affine.floe" --placement --devices nosuch

# x = [[1,2,3],[-1,0,0]]: x@W = [[5,2],[-1,1]]; +b = [[5.5,-8],[-0.5,-9]]; relu = [[5.5,0],[0,0]]
python3 "$HERE/npy.py" write "$tmp/x.npy" 2,3 1,2,3,-1,0,0
check "run --out" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z --fetch y:0 --out "$tmp/o"
got=$(python3 "$HERE/npy.py" read "$tmp/o/z.npy")
[ "$got" = "5.5 0 0 0" ] && pass=$((pass+1)) || { echo "FAIL: z = '$got'"; fails=$((fails+1)); }
got=$(python3 "$HERE/npy.py" read "$tmp/o/y_0.npy")
[ "$got" = "5.5 -8 -0.5 -9" ] && pass=$((pass+1)) || { echo "FAIL: y = '$got'"; fails=$((fails+1)); }
check "run print" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z; expect_out "run print" "z: f32\[2,2\] \[5.5, 0, 0, 0\]"
check "run --json" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z --json; expect_out "run --json" '"shape":\[2,2\]'
# Feeding an intermediate tensor cuts the graph: x is not needed.
python3 "$HERE/npy.py" write "$tmp/y.npy" 1,2 -1,2
check "run feed intermediate" "$FLOE" run "$tmp/affine.floe" --feed "y=$tmp/y.npy" --fetch z; expect_out "feed intermediate" "\[0, 2\]"

check_fails "no args" "Usage" "$FLOE"
check_fails "unknown command" "unknown command" "$FLOE" frobnicate
check_fails "missing graph" "nonexistent.floe" "$FLOE" run "$tmp/nonexistent.floe" --fetch z
printf 'FLOEGRPH garbage' >"$tmp/bad.floe"
check_fails "corrupt graph" "bad.floe" "$FLOE" graph "$tmp/bad.floe"
check_fails "unknown fetch" "nosuch" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch nosuch
check_fails "unfed placeholder" "x" "$FLOE" run "$tmp/affine.floe" --fetch z
check_fails "bad feed spec" "NAME=FILE" "$FLOE" run "$tmp/affine.floe" --feed x --fetch z
check_fails "missing feed file" "nope.npy" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/nope.npy" --fetch z
python3 "$HERE/npy.py" write "$tmp/x4.npy" 2,4 1,2,3,4,5,6,7,8
check_fails "wrong feed shape" "\[2,4\]" "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x4.npy" --fetch z
check_fails "nothing to fetch" "nothing to do" "$FLOE" run "$tmp/affine.floe"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
