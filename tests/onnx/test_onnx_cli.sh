#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe run / graph / onnx-test on ONNX models from libonnx-testdata: running a model with
# .pb and .npy inputs, drawing it, and the errors for truncated files, unsupported ops and
# wrong outputs (an expected output corrupted here must be reported as a failure with its
# worst element).
set -u
D=${ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
floe=${top_builddir:-../..}/tools/floe
if [ ! -d "$D/pytorch-converted" ]; then
  echo "SKIP: ONNX test data not found at $D (apt-get install libonnx-testdata)"; exit 77
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C=$D/pytorch-converted/test_Conv2d

# run with a .pb input, outputs written by ONNX name
"$floe" run "$C/model.onnx" --input 0="$C/test_data_set_0/input_0.pb" --out "$t/o" > "$t/run.txt" \
  || fail "floe run: $(cat "$t/run.txt")"
grep -q '^3: f32\[2,4,5,4\]' "$t/run.txt" || fail "run output: $(cat "$t/run.txt")"
[ -f "$t/o/3.npy" ] || fail "no $t/o/3.npy"
"$floe" run "$C/model.onnx" --input 0="$C/test_data_set_0/input_0.pb" --json > "$t/run.json" \
  || fail "floe run --json"
grep -q '"shape":\[2,4,5,4\]' "$t/run.json" || fail "run --json: $(cat "$t/run.json")"

# --trainable: the weights are variables (initialised before the step), same result
"$floe" run "$C/model.onnx" --trainable --input 0="$C/test_data_set_0/input_0.pb" --out "$t/v" \
  > "$t/runv.txt" || fail "floe run --trainable: $(cat "$t/runv.txt")"
cmp -s "$t/o/3.npy" "$t/v/3.npy" || fail "--trainable changed the result"
"$floe" graph "$C/model.onnx" --trainable | grep -q ' = VarHandleOp(' || fail "no variables with --trainable"

# graph and DOT
"$floe" graph "$C/model.onnx" > "$t/graph.txt" || fail "floe graph"
grep -q ' = Conv(' "$t/graph.txt" || fail "graph lacks the convolution: $(cat "$t/graph.txt")"
"$floe" graph "$C/model.onnx" --dot > "$t/g.dot" || fail "floe graph --dot"
head -1 "$t/g.dot" | grep -q '^digraph' || fail "not DOT"

# a truncated model: an error naming the file and the byte offset, exit 1, no crash
head -c 100 "$C/model.onnx" > "$t/cut.onnx"
"$floe" run "$t/cut.onnx" > "$t/cut.txt" 2>&1
[ $? -eq 1 ] || fail "truncated model: exit status"
grep -q "cut.onnx.*byte offset" "$t/cut.txt" || fail "truncated model: $(cat "$t/cut.txt")"

# onnx-test on one good case, then on a copy whose expected output is corrupted
"$floe" onnx-test "$C" > "$t/ok.txt" || fail "onnx-test $(cat "$t/ok.txt")"
grep -q '^pass.*pytorch-converted/test_Conv2d' "$t/ok.txt" || fail "$(cat "$t/ok.txt")"
mkdir -p "$t/suite/test_Conv2d_bad/test_data_set_0"
cp "$C/model.onnx" "$t/suite/test_Conv2d_bad/"
cp "$C/test_data_set_0/input_0.pb" "$t/suite/test_Conv2d_bad/test_data_set_0/"
# the last 4 bytes are the last float of raw_data: make it 1e6 larger
python3 - "$C/test_data_set_0/output_0.pb" "$t/suite/test_Conv2d_bad/test_data_set_0/output_0.pb" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
v = struct.unpack('<f', b[-4:])[0]
b[-4:] = struct.pack('<f', v + 1e6)
open(sys.argv[2], 'wb').write(b)
PY
"$floe" onnx-test --json "$t/suite" > "$t/bad.json"
[ $? -eq 1 ] || fail "a failing case must make onnx-test exit 1"
grep -q '"result":"fail"' "$t/bad.json" || fail "$(cat "$t/bad.json")"
grep -q 'worst \[159\]' "$t/bad.json" || fail "worst element not named: $(cat "$t/bad.json")"
tail -n 1 "$t/bad.json" | grep -q '"total":1,"passed":0,"failed":1,"unsupported":0' \
  || fail "summary: $(tail -n 1 "$t/bad.json")"

# damaged test data fails the case (exit 1), naming the file, never passes or counts as
# unsupported: an empty input_0.pb (it read as a tensor of type UNDEFINED, "unsupported",
# exit 0); a malformed data.json or a NaN tolerance (silently ignored: the case passed)
mk_case() { rm -rf "$t/d"; mkdir -p "$t/d/$1/test_data_set_0"; cp "$C/model.onnx" "$t/d/$1/";
  cp "$C"/test_data_set_0/*.pb "$t/d/$1/test_data_set_0/"; }
mk_case empty_input; : > "$t/d/empty_input/test_data_set_0/input_0.pb"
"$floe" onnx-test "$t/d" > "$t/e.txt"
[ $? -eq 1 ] && grep -q "^fail.*input_0.pb'.*no data type (UNDEFINED): an empty or damaged TensorProto" "$t/e.txt" ||
  fail "empty input_0.pb: $(cat "$t/e.txt")"
for j in '{"rtol": 0.001' '{"rtol": NaN}' '{"atol": -1}' '{"rtol": 0.001} x' '[]'; do
  mk_case bad_json; printf '%s' "$j" > "$t/d/bad_json/data.json"
  "$floe" onnx-test "$t/d" > "$t/e.txt"
  [ $? -eq 1 ] && grep -q "^fail.*data.json: offset [0-9]*: " "$t/e.txt" || fail "data.json '$j': $(cat "$t/e.txt")"
done
mk_case good_json; printf '%s' '{"atol": 1e-07, "model_name": "m", "rtol": 0.001, "x": [1, {"y": null}]}' > "$t/d/good_json/data.json"
"$floe" onnx-test "$t/d" > "$t/e.txt" || fail "a valid data.json: $(cat "$t/e.txt")"

# a case Floe cannot run (a STRING input: no such dtype) is unsupported, names what is missing,
# and does not fail the run
U="$D/node/test_strnormalizer_export_monday_casesensintive_lower"
if [ -d "$U" ]; then
  "$floe" onnx-test "$U" > "$t/u.txt" || fail "unsupported case exit status"
  grep -q '^unsupported.*STRING' "$t/u.txt" || fail "$(cat "$t/u.txt")"
fi

# fine-tuning an imported classifier: initializers become variables that floe train updates
# (an untrained MLP from make_onnx_mlp; chance is 0.1)
FM=/usr/share/datasets/fashion-mnist
if [ -f "$FM/train-images-idx3-ubyte.gz" ] || [ -f "$FM/train-images-idx3-ubyte" ]; then
  # finetune NAME EPOCHS MIN [MAKE_OPTION]: make_onnx_mlp's model, trained, beats MIN
  finetune() {
    # shellcheck disable=SC2086 # ${4:-}: an option, or nothing
    "${top_builddir:-../..}/tests/onnx/make_onnx_mlp" ${4:-} "$t/$1.onnx" || fail "make_onnx_mlp ${4:-}"
    "$floe" train --onnx "$t/$1.onnx" --epochs "$2" --limit 2000 --json > "$t/$1.txt" 2>&1 \
      || fail "floe train --onnx $1.onnx: $(cat "$t/$1.txt")"
    acc=$(tail -n 1 "$t/$1.txt" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/')
    awk "BEGIN{exit !($acc > $3)}" || fail "fine-tuned $1 accuracy $acc (want > $3)"
    echo "fine-tuned ONNX $1: test accuracy $acc"
  }
  finetune mlp 2 0.5
  # an untrained CNN (Conv 3x3 pads 1, Relu, MaxPool 2, Flatten, Gemm): its gradients run
  # through the N-d Conv and Pool (ConvBackpropFilterNd, PoolGrad)
  finetune cnn 1 0.4 --cnn
  # an RGB model of 56x56 images: the 28x28 grey images are enlarged (each pixel 2x2 times,
  # in all 3 channels) to fit
  finetune rgb 1 0.4 --rgb56
  "$floe" train --onnx "$C/model.onnx" --epochs 1 > "$t/bad.txt" 2>&1
  [ $? -ne 0 ] && grep -q "it must be \[N,784\] or \[N,C,H,W\] with C 1 or 3" "$t/bad.txt" \
    && grep -q "model.onnx: input '.*' is \[" "$t/bad.txt" \
    || fail "a model of the wrong input shape: $(cat "$t/bad.txt")"
else
  echo "(Fashion-MNIST not installed: fine-tuning not checked)"
fi
echo "ok"
