#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe train --model lstm end to end on Debian's fortunes: a small model trained for a few
# hundred windows must beat the unigram baseline's held-out perplexity, with the full softmax
# at the default learning rates and with the sampled softmax; the JSON keys; the errors; the
# output named as the mlp's (header, epoch and summary lines, progress line, --profile, JSON).
# Skipped when fortunes is not installed.
set -u
FLOE="${top_builddir}/tools/floe"
DATA=/usr/share/games/fortunes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
check_fails() { # NAME STATUS PATTERN COMMAND...: exit STATUS and PATTERN on stderr's first line
  name=$1; want=$2; pattern=$3; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != "$want" ]; then bad "$name: exit $got, want $want"; cat "$tmp/err"
  elif ! head -n 1 "$tmp/err" | grep -q -- "$pattern"; then bad "$name: stderr lacks '$pattern'"; cat "$tmp/err"
  else ok; fi
}
# json KEY: the number under KEY in $tmp/out's last line
json() { tail -n 1 "$tmp/out" | sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }

"$FLOE" train --model lstm --help >"$tmp/out" 2>&1 && grep -q -- "--sampled-softmax" "$tmp/out" \
  && ok || bad "--model lstm --help"
check_fails "missing corpus" 1 "fortunes" "$FLOE" train --model lstm --data "$tmp/none"
grep -q -- "--data DIR" "$tmp/err" && ok || { bad "missing corpus: no --data DIR hint"; cat "$tmp/err"; }
check_fails "sampled >= vocab" 2 "smaller than --vocab" "$FLOE" train --model lstm --vocab 100 --sampled-softmax 100
check_fails "bad --hidden" 2 "--hidden takes an integer" "$FLOE" train --model lstm --hidden 0
check_fails "bad --softmax-lr" 2 "--softmax-lr takes a number greater than 0 and at most 3.4e+38, got '0'" "$FLOE" train --model lstm --softmax-lr 0
check_fails "bad --clip" 2 "--clip takes a number from 0 to 3.4e+38, got '-1'" "$FLOE" train --model lstm --clip -1
check_fails "unknown option" 2 "unknown option" "$FLOE" train --model lstm --bogus

if [ ! -d "$DATA" ]; then
  echo "SKIP: $DATA is missing (apt-get install fortunes)"
  [ "$fails" = 0 ] && exit 77 || exit 1
fi

# A small model (one layer of 128) for a few hundred windows of 32 x 20 words: well below the
# unigram perplexity. The full softmax at the default rates (Adam at 1e-3, the output layer
# at 0.05), under 0.6 of the unigram (0.49 here; 0.82 with the output layer at
# 1e-3, the old default). The sampled softmax, cheaper per window, gets more windows and
# --lr 0.01: under 0.8. (The default run itself, 2 x 512 for one epoch of 206 windows of
# 64 x 35, is too slow for the suite: it ends at about 0.43 of the unigram perplexity.)
for soft in full sampled; do
  extra="--steps 300"; want_ratio=0.6; want_lr=0.001
  [ "$soft" = sampled ] && extra="--steps 600 --sampled-softmax 512 --lr 0.01" && want_ratio=0.8 && want_lr=0.01
  # shellcheck disable=SC2086
  if "$FLOE" train --model lstm --hidden 128 --layers 1 --batch 32 --bptt 20 \
      --eval-windows 40 --seed 3 $extra --json >"$tmp/out" 2>"$tmp/err"; then
    ppl=$(json perplexity); uni=$(json unigram_perplexity); wps=$(json words_per_sec)
    echo "$soft softmax: perplexity $ppl, unigram $uni, $wps words/s"
    if awk -v p="$ppl" -v u="$uni" -v r="$want_ratio" 'BEGIN { exit !(p > 1 && u > 1 && p < r * u) }'; then ok
    else bad "$soft softmax: perplexity $ppl not well below the unigram $uni"; fi
    tail -n 1 "$tmp/out" | grep -q "\"softmax\":\"$soft\"" && [ -n "$wps" ] && ok \
      || bad "$soft softmax: JSON lacks softmax or words_per_sec"
    # The output layer's rate: its own 0.05 with either softmax, whatever --lr is.
    awk -v s="$(json softmax_lr)" -v l="$(json lr)" -v w="$want_lr" 'BEGIN { exit !(s == 0.05 && l == w) }' && ok \
      || bad "$soft softmax: softmax_lr $(json softmax_lr) and lr $(json lr), want 0.05 and $want_lr"
  else
    bad "$soft softmax run failed"; cat "$tmp/err"
  fi
done

# Named as the other models name the same things (tools/cmd_train.c). A pipe gets a header,
# a line per epoch ("epoch E/N loss L perplexity P words/s R seconds S": L the epoch's mean
# training loss, P the held-out perplexity evaluated after it) and a summary line, with the
# names --json uses. Two steps past one epoch make two epochs; final_loss is the last epoch's
# mean loss, as its line says (the mlp's is too), last_loss the last window's.
small="--hidden 8 --layers 1 --vocab 50 --batch 512 --bptt 100 --eval-windows 1 --threads 2"
# shellcheck disable=SC2086
"$FLOE" train --model lstm $small --steps 1 >"$tmp/out" 2>"$tmp/err" || { bad "lstm small run"; cat "$tmp/err"; }
per=$(sed -n 's/^floe train: lstm on fortunes ([0-9]* training, [0-9]* test words), adam, constant learning rate, batch 512 x 100 words, 1 steps (\([0-9]*\) per epoch), 1 layer of 8, vocab 50, full softmax$/\1/p' "$tmp/out")
if [ -z "$per" ]; then bad "lstm header"; cat "$tmp/out"; per=9; else ok; fi
# shellcheck disable=SC2086
"$FLOE" train --model lstm $small --steps $((per + 2)) >"$tmp/pipe" 2>"$tmp/err" || { bad "lstm two epochs"; cat "$tmp/err"; }
# shellcheck disable=SC2086
"$FLOE" train --model lstm $small --steps $((per + 2)) --json >"$tmp/out" 2>"$tmp/err" || { bad "lstm two epochs --json"; cat "$tmp/err"; }
python3 - "$tmp/pipe" "$tmp/out" "$per" <<'PY' && ok || bad "lstm output: names, epoch lines, final_loss"
import json, re, sys
pipe, out, per = open(sys.argv[1]).read(), open(sys.argv[2]).read().splitlines(), int(sys.argv[3])
lines = pipe.splitlines()
assert lines[0].startswith("floe train: lstm on fortunes ("), lines
ep = [re.fullmatch(r"epoch (\d)/2 loss ([0-9.]+) perplexity ([0-9.]+) words/s (\d+) seconds ([0-9.]+)", l) for l in lines[1:3]]
assert all(ep) and [m.group(1) for m in ep] == ["1", "2"], lines
assert re.fullmatch(r"perplexity [0-9.]+ unigram_perplexity [0-9.]+ words/s \d+ wall_seconds [0-9.]+ peak_rss_mb \d+", lines[3]), lines
assert len(lines) == 4, lines
# --json prints the same lines, then the JSON
assert [re.sub(r"words/s \d+ seconds [0-9.]+", "", l) for l in out[:3]] == \
       [re.sub(r"words/s \d+ seconds [0-9.]+", "", l) for l in lines[:3]], (out, lines)
d = json.loads(out[-1])
for k in ("model", "epochs", "batch", "optimizer", "seed", "lr_schedule", "lr", "threads", "steps",
          "train_seconds", "final_loss", "wall_seconds", "peak_rss_mb", "words_per_sec",
          "perplexity", "unigram_perplexity", "last_loss", "train_words", "test_words"):
    assert k in d, (k, d)
assert (d["model"], d["epochs"], d["steps"], d["optimizer"], d["lr_schedule"], d["threads"]) == \
       ("lstm", 2, per + 2, "adam", "constant", 2), d
e2 = re.fullmatch(r"epoch 2/2 loss ([0-9.]+) perplexity ([0-9.]+) .*", out[2])
assert abs(d["final_loss"] - float(e2.group(1))) < 1e-6 and d["final_loss"] != d["last_loss"], (d, out[2])
assert "%.1f" % d["perplexity"] == e2.group(2), (d, out[2])
assert d["train_words"] > d["test_words"] > 0 and d["train_seconds"] > 0, d
PY
# The same keys mean the same things in the mlp's JSON (when Fashion-MNIST is here).
MNIST=${FLOE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ -e "$MNIST/train-images-idx3-ubyte.gz" ] || [ -e "$MNIST/train-images-idx3-ubyte" ]; then
  "$FLOE" train --model mlp --data "$MNIST" --limit 256 --epochs 1 --steps 2 --threads 2 --json >"$tmp/mlp" 2>"$tmp/err" \
    || { bad "mlp --json"; cat "$tmp/err"; }
  python3 - "$tmp/mlp" "$tmp/out" <<'PY' && ok || bad "mlp and lstm: shared JSON keys and line styles"
import json, re, sys
mlp, lstm = (open(p).read().splitlines() for p in sys.argv[1:])
a, b = json.loads(mlp[-1]), json.loads(lstm[-1])
for k in ("model", "epochs", "batch", "optimizer", "seed", "lr_schedule", "lr", "threads", "steps",
          "train_seconds", "final_loss", "wall_seconds", "peak_rss_mb", "step_peak_tensor_mb"):
    assert k in a and k in b and type(a[k]) == type(b[k]), (k, a.get(k), b.get(k))
assert 0 < b["step_peak_tensor_mb"] < b["peak_rss_mb"], b
assert a["lr"] == 0.001 and a["steps"] == 2, a
assert re.fullmatch(r"epoch 1/1 loss [0-9.]+ test_accuracy [0-9.]+ samples/s \d+ seconds [0-9.]+", mlp[1]), mlp
PY
else
  echo "SKIP: the mlp comparison: no Fashion-MNIST at $MNIST"
fi
# On a terminal: the progress line of the other models (bar, percent, words/s, running loss,
# eta) within the width, then the epoch line over it.
if command -v script >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  script -qec "stty cols 80; '$FLOE' train --model lstm $small --steps 3" /dev/null >"$tmp/tty" 2>&1 </dev/null \
    || bad "lstm on a terminal"
  python3 - "$tmp/tty" <<'PY' && ok || bad "lstm progress on a terminal"
import re, sys
text = open(sys.argv[1], "rb").read().decode(errors="replace").replace("\x1b[K", "")
segs = [s for s in re.split(r"[\r\n]", text) if s.startswith("epoch 1/1 [")]
assert segs and all(len(s) <= 79 for s in segs), segs
assert all(re.fullmatch(r"epoch 1/1 \[[#.]+\] +\d+%  words/s \d+  loss [0-9.]+  eta \S+(  testing\.\.\.)?", s) for s in segs), segs
assert re.search(r"^epoch 1/1 loss [0-9.]+ perplexity [0-9.]+ words/s \d+ seconds", text.replace("\r", "\n"), re.M), text
PY
else
  echo "SKIP: lstm progress: no script(1)"
fi
# --profile: the other models' table and step breakdown on stderr; in the JSON with --json.
# shellcheck disable=SC2086
"$FLOE" train --model lstm $small --steps 3 --profile >"$tmp/out" 2>"$tmp/err" || { bad "lstm --profile"; cat "$tmp/err"; }
grep -q "^kernel time per op type and device over 2 training steps" "$tmp/err" \
  && grep -Eq "^step [0-9.]+ ms x [0-9.]+ threads: kernels" "$tmp/err" && ok || { bad "lstm --profile table"; cat "$tmp/err"; }
# shellcheck disable=SC2086
"$FLOE" train --model lstm $small --steps 3 --profile --json >"$tmp/out" 2>"$tmp/err" || { bad "lstm --profile --json"; cat "$tmp/err"; }
tail -n 1 "$tmp/out" | python3 -c "
import json, sys
d = json.load(sys.stdin)
assert d['profile'] and d['breakdown']['steps'] == 2 and d['steps'] == 3, d" && [ ! -s "$tmp/err" ] && ok \
  || { bad "lstm --profile --json"; cat "$tmp/err"; tail -n 1 "$tmp/out"; }

echo "$pass checks passed, $fails failed"
[ "$fails" = 0 ]
