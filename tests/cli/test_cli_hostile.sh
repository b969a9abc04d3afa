#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The floe command against hostile plugins and kernels (the ABI test plugins of tests/abi):
#  - --timeout: a kernel that never calls done (AbiTestMisbehave, mode never_done) cannot
#    hang floe run, whose error names the node still running; floe train takes the option.
# Every command runs under timeout(1) as a hang guard only: nothing here waits for a time.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
ABI="${FLOE_TEST_PLUGIN_DIR:?run through make check}"
CPU="${FLOE_PLUGIN_PATH:?run through make check}"
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
guard() { timeout 120 "$@"; }
# run NAME STATUS COMMAND...: expect exit STATUS (stdout in $tmp/out, stderr in $tmp/err).
run() {
  name=$1; want=$2; shift 2
  guard "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" = "$want" ]; then ok; return 0; fi
  bad "$name: exit $got, want $want"; cat "$tmp/err"; return 1
}
has() { # has NAME FILE TEXT: FILE contains TEXT (fixed string)
  if grep -qF -- "$3" "$2"; then ok; else bad "$1: no '$3' in:"; cat "$2"; fi
}

"${top_builddir}/tests/cli/make_graphs" "$tmp" || { echo "FAIL: make_graphs"; exit 1; }
"${top_builddir}/tests/cli/make_abi_graphs" "$tmp" || { echo "FAIL: make_abi_graphs"; exit 1; }
python3 "$HERE/npy.py" write "$tmp/x.npy" 2,3 1,2,3,4,5,6

# ---- --timeout ----
abi_env="env FLOE_PLUGIN_PATH=$CPU:$ABI FLOE_PLUGINS=cpu,abitest"
run "run --timeout, a kernel that never calls done" 1 \
  $abi_env "$FLOE" run "$tmp/hang.floe" --feed "x=$tmp/x.npy" --fetch out --timeout 0.2
has "run --timeout message" "$tmp/err" "the run took longer than its timeout of 200 ms"
has "run --timeout names the node" "$tmp/err" \
  "still running: node 'hang' (AbiTestMisbehave) on cpu:0 (asynchronous: done not called yet)"
run "run --timeout --perf" 1 $abi_env "$FLOE" run "$tmp/hang.floe" --perf --fetch out \
  --warmup 1 --timeout 0.05
has "run --perf --timeout" "$tmp/err" "warm-up step 1: "
has "run --perf --timeout names the node" "$tmp/err" "node 'hang' (AbiTestMisbehave)"
run "run --timeout, in time" 0 $abi_env "$FLOE" run "$tmp/hang.floe" --feed "x=$tmp/x.npy" \
  --fetch side --timeout 600
has "run --timeout, in time: the value" "$tmp/out" "side: f32[2,3] [2, 3, 4, 5, 6, 7]"
for v in 0 -1 abc 0.0001 1e7 ""; do
  run "run --timeout '$v'" 2 "$FLOE" run "$tmp/affine.floe" --fetch z --timeout "$v"
  has "run --timeout '$v' says the bounds" "$tmp/err" "--timeout takes seconds from 0.001 to 1000000"
done
for m in mlp lstm; do
  run "train --model $m --timeout abc" 2 "$FLOE" train --model "$m" --timeout abc
  has "train --model $m --timeout says the bounds" "$tmp/err" "--timeout takes seconds from 0.001 to 1000000"
done
run "train --help: --timeout" 0 "$FLOE" train --help
has "train --help: --timeout" "$tmp/out" "--timeout S            a deadline for each step"
run "run --help: --timeout" 0 "$FLOE" run --help
has "run --help: --timeout" "$tmp/out" "--timeout S           a deadline for each step"

if [ -r "$DATA/train-images-idx3-ubyte.gz" ] || [ -r "$DATA/train-images-idx3-ubyte" ]; then
  run "train --timeout, in time" 0 "$FLOE" train --limit 256 --epochs 1 --timeout 600
else
  echo "SKIP (no Fashion-MNIST in $DATA): floe train --timeout"
fi

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
