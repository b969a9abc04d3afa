#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The floe command against hostile plugins and kernels (the ABI test plugins of tests/abi):
#  - --timeout: a kernel that never calls done (AbiTestMisbehave, mode never_done) cannot
#    hang floe run, whose error names the node still running; floe train takes the option;
#  - a plugin that fails to initialise (FLOE_CPU_DEVICES=abc) stops floe run and floe train
#    with its reason instead of running the graph elsewhere without a word; FLOE_PLUGINS
#    leaves it out on purpose; a device asked for with --devices that is missing fails;
#  - control characters in what plugins say (version, op documentation, init and kernel
#    messages, a plugin file's name) reach the terminal escaped as \xNN.
# Every command runs under timeout(1) as a hang guard only: nothing here waits for a time.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
ABI="${FLOE_TEST_PLUGIN_DIR:?run through make check}"
CPU="${FLOE_PLUGIN_PATH:?run through make check}"
TPU="${FLOE_TPUSIM_PLUGIN_DIR:?run through make check}"
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
# No control character but newline in FILE, and no C1 control as UTF-8 (U+0080..U+009F).
clean() {
  n=$(LC_ALL=C tr -cd '\000-\011\013-\037\177' <"$2" | wc -c)
  if [ "$n" -ne 0 ]; then bad "$1: $n raw control characters:"; od -c "$2" | head -20
  elif LC_ALL=C grep -q "$(printf '\302[\200-\237]')" "$2"; then bad "$1: a raw C1 control"
  else ok; fi
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

# ---- plugins that fail to load ----
both="$CPU:$TPU"
run "FLOE_CPU_DEVICES=abc: run refuses" 1 env FLOE_PLUGIN_PATH="$both" FLOE_CPU_DEVICES=abc \
  "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z
has "FLOE_CPU_DEVICES=abc: the plugin and the reason" "$tmp/err" \
  "floe run: plugin 'cpu' failed to initialise: "
has "FLOE_CPU_DEVICES=abc: the variable" "$tmp/err" 'FLOE_CPU_DEVICES="abc": expected a number of devices from 1 to 64'
has "FLOE_CPU_DEVICES=abc: how to go on" "$tmp/err" "FLOE_PLUGINS=tpu-sim"
[ ! -s "$tmp/out" ] && ok || { bad "FLOE_CPU_DEVICES=abc: ran anyway:"; cat "$tmp/out"; }
run "FLOE_CPU_DEVICES=abc, cpu left out on purpose" 0 env FLOE_PLUGIN_PATH="$both" \
  FLOE_CPU_DEVICES=abc FLOE_PLUGINS=tpu-sim "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z
has "cpu left out: the value" "$tmp/out" "z: f32[2,2] [5.5, 0, 14.5, 0]"
run "--devices cpu with no CPU" 1 env FLOE_PLUGIN_PATH="$both" FLOE_PLUGINS=tpu-sim \
  "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z --devices cpu
has "--devices cpu with no CPU: says so" "$tmp/err" 'no device matches "cpu"'
# A file that is no plugin is refused: a warning, and the run goes on.
mkdir "$tmp/pl"
cp "$ABI/floe-abitest-noentry.so" "$tmp/pl/"
run "a refused plugin: run goes on" 0 env FLOE_PLUGIN_PATH="$CPU:$tmp/pl" \
  "$FLOE" run "$tmp/affine.floe" --feed "x=$tmp/x.npy" --fetch z
has "a refused plugin: warning" "$tmp/err" "floe run: warning: plugin 'abitest-noentry' was not loaded: "
if [ -r "$DATA/train-images-idx3-ubyte.gz" ] || [ -r "$DATA/train-images-idx3-ubyte" ]; then
  run "FLOE_CPU_DEVICES=abc: train refuses" 1 env FLOE_PLUGIN_PATH="$both" FLOE_CPU_DEVICES=abc \
    "$FLOE" train --limit 256 --epochs 1
  has "train: the plugin and the reason" "$tmp/err" "floe train: plugin 'cpu' failed to initialise: "
  run "train --timeout, in time" 0 "$FLOE" train --limit 256 --epochs 1 --timeout 600
else
  echo "SKIP (no Fashion-MNIST in $DATA): floe train with FLOE_CPU_DEVICES=abc and --timeout"
fi

# ---- control characters from plugins ----
esc=$(printf '\033')
mkdir "$tmp/hostile"
cp "$ABI/floe-abitest-hostile.so" "$ABI/floe-abitest-hostile-fail.so" "$tmp/hostile/"
cp "$ABI/floe-abitest-noentry.so" "$tmp/hostile/floe-${esc}[31mred.so"
hostile_env="env FLOE_PLUGIN_PATH=$CPU:$tmp/hostile"
run "plugins" 0 $hostile_env "$FLOE" plugins
cat "$tmp/out" "$tmp/err" >"$tmp/all"
clean "plugins" "$tmp/all"
has "plugins: a file name escaped" "$tmp/all" 'floe-\x1B[31mred.so'
has "plugins: an init message escaped" "$tmp/all" 'the licence \x1B[2J\x1B]0;owned\x07\xC2\x9B31m expired'
run "plugins --json" 0 $hostile_env "$FLOE" plugins --json
clean "plugins --json" "$tmp/out"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/out" && ok || bad "plugins --json: not JSON"
has "plugins --json: the version" "$tmp/out" '6.6.6\u001b[2J'
run "ops OP" 0 $hostile_env "$FLOE" ops AbiTestHostile
cat "$tmp/out" "$tmp/err" >"$tmp/all"
clean "ops OP" "$tmp/all"
has "ops OP: the documentation escaped" "$tmp/all" 'documented \x1B[2J\x1B]0;owned\x07\xC2\x9B31m with'
run "ops" 0 $hostile_env "$FLOE" ops
clean "ops" "$tmp/err"
run "run: a plugin's init message" 1 $hostile_env "$FLOE" run "$tmp/affine.floe" \
  --feed "x=$tmp/x.npy" --fetch z
clean "run: a plugin's init message" "$tmp/err"
has "run: the failing plugin, escaped" "$tmp/err" "plugin 'abitest-hostile-fail' failed to initialise"
has "run: the refused file, escaped" "$tmp/err" "warning: plugin '\\x1B[31mred' was not loaded"
run "run: a kernel's error" 1 env FLOE_PLUGIN_PATH="$CPU:$tmp/hostile" FLOE_PLUGINS=cpu,abitest-hostile \
  "$FLOE" run "$tmp/hostile.floe" --feed "x=$tmp/x.npy" --fetch y
clean "run: a kernel's error" "$tmp/err"
has "run: the kernel's error escaped" "$tmp/err" \
  "node 'y' (AbiTestHostile): the kernel says \\x1B[2J\\x1B]0;owned\\x07\\xC2\\x9B31m no"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
