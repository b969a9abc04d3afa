#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Ctrl-C during floe train: a checkpoint at the next step boundary, the resume command printed,
# exit status 130; the printed command resumes and ends as an uninterrupted run does. Without
# --checkpoint-dir it stops cleanly and says nothing was saved.
set -u
FLOE="${top_builddir}/tools/floe"
DATA=${FLOE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if ! [ -f "$DATA/train-images-idx3-ubyte" ] && ! [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: no Fashion-MNIST at $DATA"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
ARGS="--data $DATA --limit 20000 --epochs 6 --seed 3 --input feed"

# interrupt RUN_NAME EXTRA...: starts floe train, waits for its first epoch line, sends SIGINT
interrupt() {
  name=$1; shift
  "$FLOE" train $ARGS "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  i=0
  while ! grep -q "^epoch 1/6" "$tmp/$name.out" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  kill -INT $pid
  wait $pid
  echo $?
}

status=$(interrupt ckpt --checkpoint-dir "$tmp/ck")
[ "$status" = 130 ] && ok || { bad "with --checkpoint-dir: exit $status, want 130"; cat "$tmp/ckpt.err"; }
grep -q "^floe train: interrupted at global step [0-9]*; checkpoint saved in $tmp/ck" "$tmp/ckpt.err" && ok \
  || { bad "no interrupted/saved message"; cat "$tmp/ckpt.err"; }
resume=$(grep "^floe train .* --resume$" "$tmp/ckpt.err")
[ -n "$resume" ] && ok || { bad "no resume command"; cat "$tmp/ckpt.err"; }
ls "$tmp/ck"/*.safetensors >/dev/null 2>&1 && ok || bad "no checkpoint written"
step=$(sed -n 's/^floe train: interrupted at global step \([0-9]*\);.*/\1/p' "$tmp/ckpt.err")
# step 313 is an epoch's end (20000 / 64 batches): a Ctrl-C mid-epoch gives a step that is not
[ -n "$step" ] && [ "$step" -gt 313 ] && ok || bad "interrupted at step '$step', not in epoch 2 or later"

# The printed command, run as printed (the floe of this build tree), resumes at that step.
resume_cmd=$(printf '%s' "$resume" | sed "s|^floe |'$FLOE' |")
eval "$resume_cmd --json" >"$tmp/resumed.out" 2>"$tmp/resumed.err" && ok || { bad "resume failed"; cat "$tmp/resumed.err"; }
grep -q "^resumed from .* at global step $step " "$tmp/resumed.out" && ok || { bad "did not resume at step $step"; cat "$tmp/resumed.out"; }
"$FLOE" train $ARGS --json >"$tmp/whole.out" 2>"$tmp/whole.err" || bad "uninterrupted run"
python3 - "$tmp/resumed.out" "$tmp/whole.out" <<'PY' && ok || bad "resumed run differs from an uninterrupted one"
import json, sys
r, w = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:])
assert r["global_step"] == w["global_step"], (r, w)
assert r["test_accuracy"] == w["test_accuracy"], (r["test_accuracy"], w["test_accuracy"])
PY

status=$(interrupt plain)
[ "$status" = 130 ] && ok || { bad "without --checkpoint-dir: exit $status, want 130"; cat "$tmp/plain.err"; }
grep -q "^floe train: interrupted at global step [0-9]*; nothing saved (no --checkpoint-dir)$" "$tmp/plain.err" && ok \
  || { bad "without --checkpoint-dir: message"; cat "$tmp/plain.err"; }

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
