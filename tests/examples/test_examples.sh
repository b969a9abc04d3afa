#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# examples/train-mlp and examples/onnx-classify, built against the installed SDK with their
# own Makefiles (pkg-config only) and run:
#  - train-mlp: 2 epochs straight, and 1 epoch then --resume; the resumed run must print the
#    same second epoch and write a byte-identical checkpoint; the step count and the accuracy
#    must be sane.
#  - onnx-classify: an MLP trained by `floe train --model mlp --export` and written as ONNX
#    by `floe export --onnx` (what the example's README tells users to do); the example's top 5 and probabilities must
#    equal a softmax (in Python) of the logits `floe run` computes for the same image (read
#    from the IDX file by Python), and its top-1 must match the labels of most test images.
set -u
FM=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$FM/t10k-images-idx3-ubyte.gz" ] && [ ! -f "$FM/t10k-images-idx3-ubyte" ]; then
  echo "SKIP: Fashion-MNIST not found in $FM"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/examples/sdk_install.sh"
sdk_install || { echo "0 passed, 1 failed"; exit 1; }
pass=0; fails=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }

# ---- train-mlp
T="$tmp/train-mlp"
mkdir -p "$T"
cp "$top_srcdir"/examples/train-mlp/train_mlp.c "$top_srcdir"/examples/train-mlp/Makefile "$T/"
if make -C "$T" CFLAGS="-O2 ${SAN_CFLAGS:-}" >"$T/build.log" 2>&1; then ok; else
  bad "building train-mlp"; cat "$T/build.log"; fi
if [ -x "$T/train_mlp" ]; then
  (cd "$T" && ./train_mlp --data "$FM" --epochs 2 --checkpoint-dir A) >"$T/a.txt" 2>&1 ||
    bad "train_mlp: $(cat "$T/a.txt")"
  (cd "$T" && ./train_mlp --data "$FM" --epochs 2 --stop-after 1 --checkpoint-dir B) \
    >"$T/b1.txt" 2>&1 || bad "train_mlp --stop-after 1: $(cat "$T/b1.txt")"
  (cd "$T" && ./train_mlp --data "$FM" --epochs 2 --resume --checkpoint-dir B) \
    >"$T/b2.txt" 2>&1 || bad "train_mlp --resume: $(cat "$T/b2.txt")"
  cat "$T/a.txt" "$T/b1.txt" "$T/b2.txt"
  # 10000 examples in batches of 64: 157 steps an epoch.
  steps=$(( (10000 + 63) / 64 ))
  s1=$(printf '%010d' $steps); s2=$(printf '%010d' $((2 * steps)))
  grep -q "^epoch 1/2 step $steps " "$T/a.txt" && grep -q "^epoch 2/2 step $((2 * steps)) " "$T/a.txt" &&
    ok || bad "step counts of the straight run"
  grep -q "^resumed from B/ckpt-$s1.safetensors at step $steps\$" "$T/b2.txt" &&
    ! grep -q "^epoch 1/2" "$T/b2.txt" && ok || bad "the resumed run did not continue at step $steps"
  a2=$(grep '^epoch 2/2' "$T/a.txt" | sed 's/ checkpoint .*//')
  b2=$(grep '^epoch 2/2' "$T/b2.txt" | sed 's/ checkpoint .*//')
  [ -n "$a2" ] && [ "$a2" = "$b2" ] && ok || bad "resumed epoch 2 '$b2' != straight '$a2'"
  cmp "$T/A/ckpt-$s2.safetensors" "$T/B/ckpt-$s2.safetensors" && ok ||
    bad "the resumed run's final checkpoint differs from the straight run's"
  l1=$(sed -n 's/^epoch 1\/2 .* loss \([0-9.]*\) .*/\1/p' "$T/a.txt")
  l2=$(sed -n 's/^epoch 2\/2 .* loss \([0-9.]*\) .*/\1/p' "$T/a.txt")
  acc=$(sed -n 's/^epoch 2\/2 .* accuracy \([0-9.]*\) .*/\1/p' "$T/a.txt")
  awk "BEGIN{exit !($l2 < $l1 && $acc > 0.75)}" 2>/dev/null && ok ||
    bad "loss $l1 -> $l2, test accuracy $acc (want falling loss, accuracy > 0.75)"
  # Errors come with the library's message and a failing exit status.
  if (cd "$T" && ./train_mlp --data "$tmp/nowhere" >"$T/err.txt" 2>&1); then
    bad "train_mlp with no data succeeded"
  else
    grep -q "^train_mlp: .*$tmp/nowhere" "$T/err.txt" && ok || bad "no data: $(cat "$T/err.txt")"
  fi
fi

# ---- onnx-classify
O="$tmp/onnx-classify"
mkdir -p "$O"
cp "$top_srcdir"/examples/onnx-classify/onnx_classify.c "$top_srcdir"/examples/onnx-classify/Makefile "$O/"
if make -C "$O" CFLAGS="-O2 ${SAN_CFLAGS:-}" >"$O/build.log" 2>&1; then ok; else
  bad "building onnx-classify"; cat "$O/build.log"; fi
FLOE="$top_builddir/tools/floe"
if [ -x "$O/onnx_classify" ] &&
   "$FLOE" train --model mlp --data "$FM" --epochs 2 --limit 10000 --export "$O/mlp.floe" \
     >"$O/train.txt" 2>&1 &&
   "$FLOE" export "$O/mlp.floe" --onnx "$O/model.onnx" >>"$O/train.txt" 2>&1; then
  ok
  for i in 0 1 2; do
    # Test image i as the models see it (pixels / 255), read from the IDX file by Python.
    python3 - "$FM" $i "$O/x$i.npy" <<'PY'
import gzip, os, struct, sys
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "cli"))
import npy
d, i, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
p = os.path.join(d, "t10k-images-idx3-ubyte")
raw = gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read()
assert struct.unpack(">I", raw[:4])[0] == 0x803
npy.write(out, [1, 784], [b / 255.0 for b in raw[16 + 784 * i:16 + 784 * (i + 1)]])
PY
    if ! "$FLOE" run "$O/model.onnx" --input "x=$O/x$i.npy" --out "$O/o$i" >"$O/run$i.txt" 2>&1; then
      bad "floe run on image $i: $(cat "$O/run$i.txt")"; continue
    fi
    # The oracle: softmax of floe run's logits, the 5 largest as "class probability".
    python3 - "$O/o$i/logits.npy" >"$O/want$i.txt" <<'PY'
import math, os, sys
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "cli"))
import npy
z = npy.read(sys.argv[1])
m = max(z); e = [math.exp(v - m) for v in z]; s = sum(e)
for c in sorted(range(len(z)), key=lambda c: (-e[c], c))[:5]:
    print(c, "%.6f" % (e[c] / s))
PY
    for how in "--index $i" "$O/x$i.npy"; do
      # shellcheck disable=SC2086
      if "$O/onnx_classify" "$O/model.onnx" $how --data "$FM" >"$O/got.txt" 2>&1; then
        sed -n 's/^[1-5]\. class \([0-9]\) .* p = \([0-9.]*\)$/\1 \2/p' "$O/got.txt" >"$O/got5.txt"
        # Same classes in the same order, probabilities within 2e-6.
        if paste -d' ' "$O/want$i.txt" "$O/got5.txt" | awk 'NF != 4 || $1 != $3 ||
             ($2 - $4) > 2e-6 || ($4 - $2) > 2e-6 { bad = 1 } END { exit bad || NR != 5 }'; then
          ok
        else
          bad "image $i ($how): got"; cat "$O/got.txt"; echo "want (floe run + softmax):"; cat "$O/want$i.txt"
        fi
      else
        bad "onnx_classify $how: $(cat "$O/got.txt")"
      fi
    done
  done
  # A trained model: its top-1 is the label for most test images (chance is 1 in 10).
  right=0
  for i in $(seq 0 19); do
    "$O/onnx_classify" "$O/model.onnx" --index "$i" --data "$FM" >"$O/c.txt" 2>&1 ||
      { bad "onnx_classify --index $i: $(cat "$O/c.txt")"; break; }
    label=$(sed -n 's/^test image [0-9]* (label \([0-9]\),.*/\1/p' "$O/c.txt")
    top=$(sed -n 's/^1\. class \([0-9]\) .*/\1/p' "$O/c.txt")
    [ -n "$label" ] && [ "$label" = "$top" ] && right=$((right+1))
  done
  echo "onnx-classify: top-1 right on $right of test images 0-19"
  [ "$right" -ge 13 ] && ok || bad "top-1 right on only $right of 20 test images"
  # Errors carry the library's message.
  "$O/onnx_classify" "$O/model.onnx" --index 10000 --data "$FM" >"$O/e.txt" 2>&1 &&
    bad "--index 10000 succeeded" ||
    { grep -q "^onnx_classify: --index 10000: the test set has images 0 to 9999" "$O/e.txt" && ok ||
      bad "--index 10000: $(cat "$O/e.txt")"; }
  "$O/onnx_classify" "$O/missing.onnx" >"$O/e.txt" 2>&1 && bad "a missing model succeeded" ||
    { grep -q "^onnx_classify: .*missing.onnx" "$O/e.txt" && ok || bad "missing model: $(cat "$O/e.txt")"; }
else
  bad "making the trained ONNX model: $(cat "$O/train.txt" 2>/dev/null)"
fi

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
