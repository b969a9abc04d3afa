#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The tidy command line (issue 19): one-line option errors, floe help, shortest numbers.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
DATA=${FLOE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
one_line_error() { # one_line_error NAME PATTERN COMMAND...: exit 2, stderr exactly one line with PATTERN
  name=$1; pattern=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != 2 ]; then bad "$name: exit $got, want 2"; cat "$tmp/err"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then bad "$name: stderr is not one line"; cat "$tmp/err"
  elif ! grep -q -- "$pattern" "$tmp/err"; then bad "$name: stderr lacks '$pattern'"; cat "$tmp/err"
  elif [ -s "$tmp/out" ]; then bad "$name: wrote to stdout"; cat "$tmp/out"
  else ok; fi
}

# 1. Every subcommand: a bad option is one line naming the option and where the help is.
for c in devices plugins ops run graph train onnx-test; do
  one_line_error "$c --bogus" "^floe $c: unknown option '--bogus'; see 'floe help $c'\$" "$FLOE" $c --bogus
  one_line_error "$c -Z" "^floe $c: unknown option '-Z'" "$FLOE" $c -Z
done
one_line_error "lstm --bogus" "^floe train --model lstm: unknown option '--bogus'; see 'floe help train --model lstm'\$" \
  "$FLOE" train --model lstm --bogus
one_line_error "did you mean" "unknown option '--epohcs' (did you mean --epochs?)" "$FLOE" train --epohcs 3
one_line_error "lstm did you mean" "(did you mean --hidden?)" "$FLOE" train --model lstm --hiden 8
one_line_error "run did you mean" "(did you mean --fetch?)" "$FLOE" run --fetsh z g.floe
one_line_error "ambiguous" "option '--s' is ambiguous (--seed, --stop-after, --save-graph)" "$FLOE" train --s 1
one_line_error "needs a value" "option '--fetch' needs a value" "$FLOE" run --fetch
one_line_error "takes no value" "option '--json' takes no value" "$FLOE" devices --json=1
one_line_error "bad value" "^floe train: --epochs takes N >= 1; see 'floe help train'\$" "$FLOE" train --epochs 0
one_line_error "unknown command" "^floe: unknown command 'trian' (did you mean train?); see 'floe help'\$" "$FLOE" trian

# 2. floe help
"$FLOE" help >"$tmp/out" 2>&1 && grep -q "Commands:" "$tmp/out" && grep -q "^  train " "$tmp/out" && ok \
  || bad "floe help lists the commands"
for c in devices plugins ops run graph train onnx-test; do
  "$FLOE" help $c >"$tmp/h1" 2>&1 || bad "floe help $c failed"
  "$FLOE" $c --help >"$tmp/h2" 2>&1
  if grep -q "^Usage: floe $c" "$tmp/h1" && cmp -s "$tmp/h1" "$tmp/h2"; then ok; else bad "floe help $c differs from floe $c --help"; fi
done
"$FLOE" help train --model lstm >"$tmp/h1" 2>&1 && grep -q "^Usage: floe train --model lstm" "$tmp/h1" && ok \
  || bad "floe help train --model lstm"
one_line_error "help unknown" "^floe help: unknown command 'nosuch'; see 'floe help'\$" "$FLOE" help nosuch

# 5. Shortest numbers: an accuracy of k/500 has at most three decimals in JSON.
if [ -f "$DATA/train-images-idx3-ubyte" ] || [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  "$FLOE" train --data "$DATA" --limit 500 --epochs 1 --json >"$tmp/out" 2>"$tmp/err" || bad "train --json"
  if tail -n 1 "$tmp/out" | grep -Eq '"test_accuracy":(0\.[0-9]{1,3}|1|0),'; then ok
  else bad "test_accuracy is not in shortest form"; tail -n 1 "$tmp/out"; fi
  tail -n 1 "$tmp/out" | grep -Eq '0000000000[0-9]|9999999999[0-9]' && bad "long digit tails in JSON" || ok
else
  echo "SKIP: shortest numbers in train --json: no Fashion-MNIST at $DATA"
fi
# floe run prints f32 values in the shortest form that reads back as the same float
"${top_builddir}/tests/cli/make_graphs" "$tmp" || { echo "FAIL: make_graphs"; exit 1; }
python3 "$HERE/npy.py" write "$tmp/y.npy" 1,2 0.12345679,0.1
"$FLOE" run "$tmp/affine.floe" --feed "y=$tmp/y.npy" --fetch z >"$tmp/out" 2>"$tmp/err" || bad "run y"
grep -q "z: f32\[1,2\] \[0.12345679, 0.1\]" "$tmp/out" && ok || { bad "run: f32 not in shortest form"; cat "$tmp/out" "$tmp/err"; }

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
