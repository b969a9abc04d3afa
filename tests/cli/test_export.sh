#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe_export_frozen end to end: a classifier trained a few SGD steps in a session is exported
# as a frozen graph, and `floe run` with only the CPU plugin gives the session's output.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }

"${top_builddir}/tests/cli/ckpt_model" export "$tmp" >"$tmp/log" 2>&1 || { cat "$tmp/log"; echo "FAIL: ckpt_model export"; exit 1; }

# Only what "probs" needs, variables frozen into constants.
if FLOE_PLUGINS=cpu "$FLOE" graph "$tmp/model.floe" >"$tmp/graph" 2>"$tmp/err"; then ok; else bad "floe graph"; cat "$tmp/err"; fi
for op in VarHandleOp ReadVariableOp AssignVariableOp ResourceApply Placeholder.*labels SparseSoftmax; do
  if grep -q "$op" "$tmp/graph"; then bad "frozen graph still has $op"; cat "$tmp/graph"; else ok; fi
done
for node in "x = Placeholder" "hidden/kernel/read = Const" "out/bias/read = Const" "probs = Softmax"; do
  if grep -q "$node" "$tmp/graph"; then ok; else bad "frozen graph lacks '$node'"; cat "$tmp/graph"; fi
done

# floe run with the CPU plugin alone reproduces the session's output bit for bit.
if FLOE_PLUGINS=cpu "$FLOE" run "$tmp/model.floe" --feed "x=$tmp/x.npy" --fetch probs --out "$tmp/o" >"$tmp/out" 2>"$tmp/err"; then ok; else bad "floe run"; cat "$tmp/err"; fi
got=$(python3 "$HERE/npy.py" read "$tmp/o/probs.npy" 2>&1)
want=$(python3 "$HERE/npy.py" read "$tmp/want_probs.npy" 2>&1)
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else bad "probs: floe run gave '$got', the session '$want'"; fi
if cmp -s "$tmp/o/probs.npy" "$tmp/want_probs.npy"; then ok; else bad "probs.npy files differ"; fi
# Each row is a distribution over 3 classes (not a vacuous comparison of zeros).
python3 - "$tmp/o/probs.npy" "$HERE" <<'PY' && ok || bad "probs are not distributions"
import sys
sys.path.insert(0, sys.argv[2])
import npy
p = npy.read(sys.argv[1])
assert len(p) == 18, p
for r in range(6):
    row = p[3 * r:3 * r + 3]
    assert all(0 < v < 1 for v in row) and abs(sum(row) - 1) < 1e-5, row
PY

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
