#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe train end to end on the real Fashion-MNIST (Debian's dataset-fashion-mnist): the JSON
# summary, exact resume from a checkpoint (with either input), queue-fed and feed-fed runs
# training identically, the frozen export run by `floe run`, the CNN, and the errors. Runs
# use --limit so the whole script takes seconds.
set -u
FLOE="${top_builddir}/tools/floe"
HERE="${top_srcdir}/tests/cli"
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
check() { # check NAME COMMAND...: expect success
  name=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then ok; else
    echo "FAIL: $name (exit $?)"; cat "$tmp/err"; fails=$((fails+1)); fi
}
check_fails() { # check_fails NAME STATUS PATTERN COMMAND...: expect exit STATUS and PATTERN
  # on stderr, which is exactly one line.
  name=$1; want=$2; pattern=$3; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != "$want" ]; then bad "$name: exit $got, want $want"; cat "$tmp/err"
  elif ! head -n 1 "$tmp/err" | grep -q -- "$pattern"; then bad "$name: stderr lacks '$pattern'"; cat "$tmp/err"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then bad "$name: not one line"; cat "$tmp/err"
  else ok; fi
}

# Errors need no dataset.
check "train --help" "$FLOE" train --help
grep -q "Usage: floe train" "$tmp/out" && grep -q -- "--checkpoint-dir" "$tmp/out" && ok || bad "train --help text"
grep -q -- "--input queue|feed     queue (default)" "$tmp/out" && ok || bad "train --help: --input and its default"
check_fails "missing --data" 1 "dataset-fashion-mnist" "$FLOE" train --data "$tmp/none"
grep -q -- "--data DIR" "$tmp/err" && grep -q "$tmp/none/train-images-idx3-ubyte" "$tmp/err" && ok \
  || { bad "missing --data: message lacks --data DIR or the path"; cat "$tmp/err"; }
check_fails "bad --model" 2 "mlp, cnn or lstm" "$FLOE" train --model rnn
check_fails "bad --epochs" 2 "epochs" "$FLOE" train --epochs 0
check_fails "bad --optimizer" 2 "adam" "$FLOE" train --optimizer lbfgs
check_fails "--resume alone" 2 "checkpoint-dir" "$FLOE" train --resume
check_fails "unknown option" 2 "unknown option '--bogus'" "$FLOE" train --bogus
check_fails "missing value" 2 "'--batch' needs a value" "$FLOE" train --batch
check_fails "bad --lr-schedule" 2 "cosine or constant" "$FLOE" train --lr-schedule linear
check_fails "bad --input" 2 "--input takes queue or feed" "$FLOE" train --input files
check_fails "--stop-after past the plan" 2 "--stop-after 3 is past the last epoch (--epochs 2)" \
  "$FLOE" train --epochs 2 --stop-after 3

if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
  echo "SKIP: Fashion-MNIST is not in $DATA (apt-get install dataset-fashion-mnist);" \
       "$pass error checks passed"
  [ "$fails" -eq 0 ] || exit 1
  exit 77
fi

# (a) The JSON summary: the last line of stdout, every field present and sane.
check "json run" "$FLOE" train --limit 2000 --epochs 1 --json
tail -n 1 "$tmp/out" >"$tmp/a.json"
python3 - "$tmp/a.json" <<'PY' && ok || { bad "--json fields"; cat "$tmp/out"; }
import json, math, sys
d = json.load(open(sys.argv[1]))
for k in ("model", "epochs", "batch", "samples_per_sec", "test_accuracy", "final_loss",
          "wall_seconds", "peak_rss_mb", "step_peak_tensor_mb"):
    assert k in d, k
assert d["model"] == "mlp" and d["epochs"] == 1 and d["batch"] == 64, d
assert d["input"] == "queue", d  # the default
assert d["train_examples"] == 2000 and d["test_examples"] == 2000, d
assert d["global_step"] == 32, d  # ceil(2000 / 64) steps
assert d["samples_per_sec"] > 0 and d["wall_seconds"] > 0 and d["peak_rss_mb"] > 1, d
# a step's activations and gradients: 64 x 128 hidden values at least, under the RSS
assert 64 * 128 * 4 / 2**20 < d["step_peak_tensor_mb"] < d["peak_rss_mb"], d
# Better than chance (0.1) after one epoch, and a loss below chance's ln(10).
assert 0.5 < d["test_accuracy"] <= 1, d
assert 0 < d["final_loss"] < math.log(10), d
PY
# Not a terminal: one plain line per epoch before the summary.
n=$(grep -c "^epoch 1/1 loss [0-9.]* test_accuracy [0-9.]* samples/s [0-9]* seconds" "$tmp/out")
[ "$n" = 1 ] && ok || { bad "plain epoch line"; cat "$tmp/out"; }

# (a2) --profile: per op type, as many kernel calls as the model implies. 500 examples in
# batches of 64 are 8 steps; each runs 3 forward products (fused with their bias, and with
# the ReLU on the two hidden layers: _FusedMatMul), 3 MatMuls for the weights' gradients and
# 2 for the inputs' (the first layer's input needs none), and one Adam per kernel and bias.
check "json profile" "$FLOE" train --limit 500 --epochs 1 --json --profile
tail -n 1 "$tmp/out" >"$tmp/p.json"
python3 - "$tmp/p.json" <<'PY' && ok || { bad "--profile JSON"; cat "$tmp/out"; }
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["op"]: r for r in d["profile"]}
hidden, last = rows["_FusedMatMul(MatMul+BiasAdd+Relu)"], rows["_FusedMatMul(MatMul+BiasAdd)"]
assert rows["MatMul"]["calls"] == 5 * 8, rows["MatMul"]
assert hidden["calls"] == 2 * 8 and last["calls"] == 8, rows
assert rows["ResourceApplyAdam"]["calls"] == 6 * 8, rows["ResourceApplyAdam"]
assert "Relu" not in rows and "BiasAdd" not in rows and rows["ReluGrad"]["calls"] == 2 * 8, rows
# The first layer's forward output alone is 64 x 512 f32 per full step (7 full + 1 of 52).
assert hidden["output_bytes"] >= (7 * 64 + 52) * 512 * 4, hidden
t = [r["total_ns"] for r in d["profile"]]
assert t == sorted(t, reverse=True) and all(0 <= r["max_ns"] <= r["total_ns"] for r in d["profile"])
PY
check "table profile" "$FLOE" train --limit 200 --epochs 1 --profile
grep -q "^kernel time per op type and device over 4 training steps" "$tmp/err" \
  && grep -q "^MatMul  *cpu:0 " "$tmp/err" \
  && ok || { bad "--profile table"; cat "$tmp/err"; }

# (b) Exact resume. With a constant learning rate, 2 epochs in one go equal 1 epoch, then a
# resumed second. The default cosine schedule spans the planned --epochs, so there the first
# run plans 2 epochs and stops after 1 (--stop-after); a run that planned 1 epoch took a
# different schedule, and its loss must differ (the schedule is really applied).
resume_check() { # resume_check TAG FIRST_RUN_ARGS... : full 2-epoch run vs stop + resume
  tag=$1; shift
  check "$tag two epochs" "$FLOE" train --limit 1000 --epochs 2 $sched $inp --json
  tail -n 1 "$tmp/out" >"$tmp/full-$tag.json"
  rm -rf "$tmp/ck"
  check "$tag first epoch" "$FLOE" train --limit 1000 "$@" $sched $inp --checkpoint-dir "$tmp/ck" --json
  tail -n 1 "$tmp/out" >"$tmp/first-$tag.json"
  ls "$tmp/ck"/ckpt-*.safetensors >/dev/null 2>&1 && ok || bad "$tag: no checkpoint written"
  check "$tag resumed" "$FLOE" train --limit 1000 --epochs 2 $sched $inp --checkpoint-dir "$tmp/ck" --resume --json
  grep -q "resumed from .* at global step 16 (epoch 2, batch 0)" "$tmp/out" && ok || { bad "$tag: resume message"; cat "$tmp/out"; }
  tail -n 1 "$tmp/out" >"$tmp/resumed-$tag.json"
  python3 - "$tmp/full-$tag.json" "$tmp/resumed-$tag.json" <<'PY' && ok || { bad "$tag: resume differs"; cat "$tmp/full-$tag.json" "$tmp/resumed-$tag.json"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("final_loss", "test_accuracy", "global_step", "lr_schedule"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["global_step"] == 32, a
PY
}
# The queue-fed input (the default) resumes exactly too: its readers are placed where the
# checkpoint's global step says, and they give the feed path's batches.
inp=""
sched="--lr-schedule constant"
resume_check constant --epochs 1
sched=""
resume_check cosine --epochs 2 --stop-after 1
inp="--input feed"
resume_check feed-cosine --epochs 2 --stop-after 1
inp=""

# (c) Both inputs train on the same batches in the same order: the same results, bit for bit.
check "feed input" "$FLOE" train --limit 1000 --epochs 2 --input feed --json
tail -n 1 "$tmp/out" >"$tmp/feed.json"
python3 - "$tmp/feed.json" "$tmp/full-cosine.json" "$tmp/full-feed-cosine.json" <<'PY' && ok || { bad "feed and queue differ"; cat "$tmp/feed.json" "$tmp/full-cosine.json"; }
import json, sys
f, q, f2 = (json.load(open(p)) for p in sys.argv[1:4])
assert f["input"] == "feed" and q["input"] == "queue", (f, q)
for k in ("final_loss", "test_accuracy", "global_step"):
    assert f[k] == q[k] == f2[k], (k, f[k], q[k], f2[k])
PY
grep -q '"lr_schedule":"cosine"' "$tmp/full-cosine.json" && ok || { bad "default schedule"; cat "$tmp/full-cosine.json"; }
# Planning 1 epoch decays the rate to 0 within it: a different first epoch from the 2-epoch plan.
check "cosine one-epoch plan" "$FLOE" train --limit 1000 --epochs 1 --json
tail -n 1 "$tmp/out" >"$tmp/one.json"
python3 - "$tmp/one.json" "$tmp/first-cosine.json" "$tmp/first-constant.json" <<'PY' && ok || { bad "cosine schedule not applied"; cat "$tmp/one.json" "$tmp/first-cosine.json"; }
import json, sys
one, first_cos, first_const = (json.load(open(p))["final_loss"] for p in sys.argv[1:4])
# Same data and weights: only the rates differ (1-epoch cosine < 2-epoch cosine < constant).
assert len({one, first_cos, first_const}) == 3, (one, first_cos, first_const)
PY

# (d) Export the frozen inference graph and run it with floe run.
check "export" "$FLOE" train --limit 500 --epochs 1 --export "$tmp/mlp.floe"
vals=$(python3 -c "print(','.join(str((i % 29) / 29) for i in range(2 * 784)))")
python3 "$HERE/npy.py" write "$tmp/x.npy" 2,784 "$vals"
check "run export" "$FLOE" run "$tmp/mlp.floe" --feed "x=$tmp/x.npy" --fetch logits --out "$tmp/o"
grep -q "logits: f32\[2,10\]" "$tmp/out" && ok || { bad "exported logits"; cat "$tmp/out"; }
check "graph export" "$FLOE" graph "$tmp/mlp.floe"
grep -q "VarHandleOp\|Adam\|global_step" "$tmp/out" && { bad "export keeps training state"; cat "$tmp/out"; } || ok

# The CNN trains too (NHWC batches, conv and pool gradients), the same from either input.
check "cnn" "$FLOE" train --model cnn --limit 300 --batch 50 --epochs 1 --json
tail -n 1 "$tmp/out" >"$tmp/cnn-queue.json"
check "cnn feed" "$FLOE" train --model cnn --limit 300 --batch 50 --epochs 1 --input feed --json
tail -n 1 "$tmp/out" >"$tmp/cnn-feed.json"
python3 - "$tmp/cnn-queue.json" "$tmp/cnn-feed.json" <<'PY' && ok || { bad "cnn run"; cat "$tmp/cnn-queue.json" "$tmp/cnn-feed.json"; }
import json, sys
q, f = (json.load(open(p)) for p in sys.argv[1:3])
assert q['model'] == 'cnn' and q['global_step'] == 6 and 0 < q['final_loss'] < 10, q
assert q['input'] == 'queue' and f['input'] == 'feed' and q['final_loss'] == f['final_loss'], (q, f)
PY

# Across devices: the CNN placed by the cost model on cpu + tpu-sim (convolutions
# and products on the chip, through the local transport), with and without bf16 transfers,
# against the CPU alone on the same 640 examples; and two CPU devices.
devpath="$FLOE_PLUGIN_PATH:$FLOE_TPUSIM_PLUGIN_DIR:$FLOE_TRANSPORT_DIR"
check "cnn cpu" "$FLOE" train --model cnn --limit 640 --epochs 1 --json
tail -n 1 "$tmp/out" >"$tmp/dev-cpu.json"
check "cnn cpu,tpu-sim" env FLOE_PLUGIN_PATH="$devpath" "$FLOE" train --model cnn --limit 640 \
  --epochs 1 --devices cpu,tpu-sim --json --profile
tail -n 1 "$tmp/out" >"$tmp/dev-tpu.json"
check "cnn cpu,tpu-sim bf16" env FLOE_PLUGIN_PATH="$devpath" "$FLOE" train --model cnn --limit 640 \
  --epochs 1 --devices cpu,tpu-sim --compress-transfers --json
tail -n 1 "$tmp/out" >"$tmp/dev-bf16.json"
check "mlp two cpus" env FLOE_CPU_DEVICES=2 "$FLOE" train --limit 640 --epochs 1 --devices cpu --json
tail -n 1 "$tmp/out" >"$tmp/dev-2cpu.json"
python3 - "$tmp"/dev-cpu.json "$tmp"/dev-tpu.json "$tmp"/dev-bf16.json "$tmp"/dev-2cpu.json <<'PY' \
  && ok || { bad "cnn across devices"; cat "$tmp"/dev-*.json; }
import json, sys
cpu, tpu, bf16, two = (json.load(open(p)) for p in sys.argv[1:5])
# 640 examples: about 0.56 test accuracy; bf16 products move it a little, not to chance
assert abs(tpu['test_accuracy'] - cpu['test_accuracy']) < 0.05, (cpu, tpu)
assert abs(bf16['test_accuracy'] - cpu['test_accuracy']) < 0.05, (cpu, bf16)
assert tpu['transfers'] > 0 and tpu['transfer_wire_bytes'] == tpu['transfer_tensor_bytes'], tpu
assert bf16['transfer_wire_bytes'] < 0.6 * bf16['transfer_tensor_bytes'], bf16
rows = {(r['op'], r['device']) for r in tpu['profile']}
assert ('Conv2D', 'tpu-sim:0') in rows and ('Conv2DBackpropFilter', 'tpu-sim:0') in rows, rows
assert two['transfers'] > 0 and two['test_accuracy'] > 0.3, two
PY

# Under a file-size limit smaller than a checkpoint (ulimit -f 100: 50 or 100 KB, by shell): one
# message naming the checkpoint and the limit, exit status 1, nothing left in the folder (it
# was killed by SIGXFSZ with no message, its temporary file left behind).
(ulimit -f 100 && exec "$FLOE" train --steps 5 --checkpoint-dir "$tmp/fsz") >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "ckpt-0000000005.safetensors: writing [0-9]* bytes would pass the process's file-size limit of [0-9]* bytes (ulimit -f)" "$tmp/err" &&
  [ -z "$(ls -A "$tmp/fsz")" ] && ok || { bad "ulimit -f: exit $rc, left: $(ls -A "$tmp/fsz")"; cat "$tmp/err"; }

echo "test_train: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
