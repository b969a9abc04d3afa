#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe inspect: Floe graphs, ONNX models, safetensors and .npy files, recognised by content;
# the real numbers of the MLP (parameters, FLOPs), FLOPs by category of pooling, softmax,
# reductions and LSTM cells (hand-made graphs, the CNN, the LSTM language model, a training
# graph's optimiser), a checkpoint's totals, .npy statistics; and
# damaged, truncated, unknown and missing files: one error line, exit 1, no crash.
set -u
FLOE="${top_builddir}/tools/floe"
DATA=${FLOE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
has() { # has NAME PATTERN: $tmp/out has a line matching the extended regex PATTERN
  if grep -Eq -- "$2" "$tmp/out"; then ok; else bad "$1: no line matching '$2'"; cat "$tmp/out"; fi
}
inspect() { # inspect NAME ARGS...: exit 0, nothing on stderr
  name=$1; shift
  "$FLOE" inspect "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != 0 ] || [ -s "$tmp/err" ]; then bad "$name: exit $got"; cat "$tmp/err"; else ok; fi
}
fails_one_line() { # fails_one_line NAME PATTERN FILE: exit 1, stderr one line with PATTERN
  "$FLOE" inspect "$3" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != 1 ]; then bad "$1: exit $got, want 1"; cat "$tmp/err"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then bad "$1: stderr is not one line"; cat "$tmp/err"
  elif ! grep -q -- "$2" "$tmp/err"; then bad "$1: stderr lacks '$2'"; cat "$tmp/err"
  elif [ -s "$tmp/out" ]; then bad "$1: wrote to stdout"; cat "$tmp/out"
  else ok; fi
}
json_get() { # json_get EXPR: python expression over j (the JSON in $tmp/out)
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$tmp/out"
}
want() { # want NAME GOT EXPECTED
  if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', want '$3'"; fi
}

# Help and usage.
"$FLOE" help inspect >"$tmp/out" 2>&1 && grep -q "Usage: floe inspect FILE" "$tmp/out" && ok || bad "help inspect"
"$FLOE" help >"$tmp/out" 2>&1; grep -q "^  inspect " "$tmp/out" && ok || bad "inspect not in floe help"
"$FLOE" inspect >/dev/null 2>"$tmp/err"; [ $? = 2 ] && grep -q "missing FILE" "$tmp/err" && ok || bad "no FILE"

# .npy files written by hand (no numpy): the statistics of known values.
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
def npy(name, descr, shape, data, fortran=False):
    st = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, st)
    h += " " * ((64 - 10 - len(h) - 1) % 64) + "\n"
    open(d + "/" + name, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
npy("f.npy", "<f4", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, -6))
npy("be.npy", ">i2", [4], struct.pack(">4h", -3, 7, 100, -200), fortran=True)
npy("u.npy", "<U3", [2], b"\0" * 24)
PY
# The extension means nothing: a .npy named .bin is still a .npy.
cp "$tmp/f.npy" "$tmp/f.bin"
inspect "npy text" "$tmp/f.bin"
has "npy dtype" "^dtype: <f4$"; has "npy shape" "^shape: \(2, 3\)$"; has "npy order" "^order: C$"
has "npy elements" "^elements: 6$"; has "npy min" "^min: -6$"; has "npy max" "^max: 5$"
has "npy mean" "^mean: 1.5$"
inspect "npy json" --json "$tmp/f.npy"
want "npy json" "$(json_get '[j["format"], j["dtype"], j["shape"], j["order"], j["elements"], j["min"], j["max"], j["mean"]]')" \
  "['npy', '<f4', [2, 3], 'C', 6, -6, 5, 1.5]"
inspect "npy big-endian" --json "$tmp/be.npy"
want "npy >i2" "$(json_get '[j["order"], j["min"], j["max"], j["mean"]]')" "['F', -200, 100, -24]"
inspect "npy unicode" "$tmp/u.npy"
has "npy unicode: no stats" "no statistics for dtype <U3"

# safetensors written by hand: metadata, totals, the aligned table.
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
def st(name, h, data):
    open(d + "/" + name, "wb").write(struct.pack("<Q", len(h)) + h.encode() + data)
st("ok.safetensors", '{"__metadata__":{"note":"hi"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},'
   '"bias":{"dtype":"I64","shape":[],"data_offsets":[24,32]}}', b"\0" * 32)
st("badjson.st", '{"w":{"dtype":"F32","shape":[2,3,"data_offsets":[0,24]}}', b"\0" * 24)
st("baddtype.st", '{"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}}', b"\0" * 8)
st("badsize.st", '{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"\0" * 8)
open(d + "/huge.st", "wb").write(struct.pack("<Q", 1 << 40) + b"{" + b" " * 20)
open(d + "/text.txt", "wb").write(b"hello world, not a model")
open(d + "/empty", "wb").close()
PY
inspect "safetensors text" "$tmp/ok.safetensors"
has "st params" "^parameters: 7 \(32 bytes\)$"; has "st metadata" "^  note: hi$"
has "st header" "^DTYPE +SHAPE +BYTES +NAME$"; has "st row" "^F32 +\[2,3\] +24 +w$"; has "st scalar" "^I64 +\[\] +8 +bias$"
inspect "safetensors json" --json "$tmp/ok.safetensors"
want "st json" "$(json_get '[j["parameters"], j["bytes"], j["metadata"], [t["name"] for t in j["tensors"]]]')" \
  "[7, 32, {'note': 'hi'}, ['w', 'bias']]"

# FLOPs of each kind of op on graphs of fixed shapes (tests/cli/make_graphs.c), by hand:
"${top_builddir}/tests/cli/make_graphs" "$tmp" || bad "make_graphs"
# output elements x window: MaxPool 2x2 to [2,3,3,3], AvgPool 3x3 to [2,4,4,3], Pool 3x3 to [2,2,2,3]
pool=$((2*3*3*3*4 + 2*4*4*3*9 + 2*2*2*3*9))
# logits [4,10]: Softmax and LogSoftmax 5 per element, the sparse cross-entropy 6 per logit
softmax=$((40*5 + 40*5 + 40*6))
# Sum, Mean and ArgMax over axis 1: their 40 input elements each
reduction=$((40*3))
# LSTMCell, x [B=3,I=5], h [3,H=4]: the gates' product 2*B*(I+H)*4H and 13*B*H elementwise
lstm=$((2*3*(5+4)*(4*4) + 13*3*4))
inspect "flops graph" "$tmp/flops.floe"
has "flops by category" "^FLOPs per step: $((pool+softmax+reduction+lstm)) \(pooling $pool, softmax $softmax, reduction $reduction, recurrent $lstm\)$"
inspect "flops graph json" --json "$tmp/flops.floe"
want "flops json" "$(json_get '[j["flops"][k] for k in ("total", "matmul", "conv", "pooling", "softmax", "reduction", "recurrent", "elementwise", "optimizer", "other", "per_example", "nodes_unknown")]')" \
  "[$((pool+softmax+reduction+lstm)), 0, 0, $pool, $softmax, $reduction, $lstm, 0, 0, 0, False, 0]"
# The same cell of primitive ops counts the same: MatMul [3,9] x [9,16], and BiasAdd on
# [3,16], three Sigmoid, two Tanh, three Mul and an Add on [3,4].
inspect "primitive lstm" --json "$tmp/lstm_primitive.floe"
want "primitive lstm flops" "$(json_get '[j["flops"][k] for k in ("total", "matmul", "elementwise", "recurrent")]')" \
  "[$lstm, $((2*3*9*16)), $((3*16 + 9*3*4)), 0]"
# A node of unknown rank: counted as unknown, said so.
inspect "unranked" "$tmp/unranked.floe"
has "unranked" "^FLOPs per step: 0; 1 nodes unknown \(shapes not known\)$"

# Unknown, missing, damaged files.
fails_one_line "text file" "text.txt: not a Floe graph, ONNX model, safetensors or .npy file (first bytes: 68 65 6c 6c 6f 20 77 6f)" "$tmp/text.txt"
fails_one_line "empty file" "empty: not a Floe graph, ONNX model, safetensors or .npy file" "$tmp/empty"
fails_one_line "missing file" "nope: No such file or directory" "$tmp/nope"
fails_one_line "directory" "is a directory" "$tmp"
fails_one_line "st bad json" "badjson.st: bad safetensors header at offset 41" "$tmp/badjson.st"
fails_one_line "st bad dtype" "unknown dtype" "$tmp/baddtype.st"
fails_one_line "st bad size" "tensor 'w': data_offsets hold 8 bytes, its dtype and shape need 12" "$tmp/badsize.st"
fails_one_line "st huge header" "header length 1099511627776 at offset 0 is over" "$tmp/huge.st"
head -c 60 "$tmp/ok.safetensors" >"$tmp/st_trunc.st"
fails_one_line "st truncated header" "st_trunc.st: truncated: header length" "$tmp/st_trunc.st"
head -c 60 "$tmp/f.npy" >"$tmp/npy_hdr.npy"
fails_one_line "npy truncated header" "npy_hdr.npy: truncated: .npy header length 118 at offset 8" "$tmp/npy_hdr.npy"
head -c 140 "$tmp/f.npy" >"$tmp/npy_data.npy"
fails_one_line "npy truncated data" "npy_data.npy: truncated: 6 elements of <f4 need 24 bytes at offset 128" "$tmp/npy_data.npy"
python3 -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[11:18]=b'XXXXXXX'; open(sys.argv[2],'wb').write(d)" \
  "$tmp/f.npy" "$tmp/npy_bad.npy"
fails_one_line "npy damaged header" "npy_bad.npy: .npy header at offset 10 lacks a readable 'descr'" "$tmp/npy_bad.npy"

# A trained MLP: its frozen graph, the ONNX export, the checkpoint.
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
  echo "SKIP: graph, ONNX and checkpoint checks: no Fashion-MNIST at $DATA"
else
  "$FLOE" train --model mlp --epochs 1 --limit 256 --export "$tmp/mlp.floe" --checkpoint-dir "$tmp/ck" \
    >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train mlp"; }
  "$FLOE" export "$tmp/mlp.floe" --onnx "$tmp/mlp.onnx" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "export mlp"; }
  # 784*512+512 + 512*256+256 + 256*10+10 parameters; 2*(784*512+512*256+256*10) MatMul FLOPs
  # per example; BiasAdd/Add and Relu one per output element: (512+256+10) + (512+256).
  params=535818; mm=$((2*(784*512+512*256+256*10))); ew=$((512+256+10+512+256))
  cp "$tmp/mlp.floe" "$tmp/mlp.data" # content, not the name
  for f in mlp.data mlp.onnx; do
    inspect "$f" "$tmp/$f"
    has "$f params" "^parameters: $params \($((params*4)) bytes\)$"
    has "$f flops" "^FLOPs per example \(batch=1\): $((mm+ew)) \(matmul $mm, elementwise $ew\)$"
    has "$f input" "^x +f32 +\[\?,784\]$"; has "$f output" "^logits +f32 +\[\?,10\]$"
    has "$f matmuls" "^MatMul +3$"; has "$f ops header" "^OP +COUNT$"
    inspect "$f json" --json "$tmp/$f"
    want "$f json" "$(json_get '[j["parameters"], j["flops"]["matmul"], j["flops"]["per_example"], j["inputs"][0]["shape"], [o["name"] for o in j["outputs"]]]')" \
      "[$params, $mm, True, [None, 784], ['logits']]"
  done
  has "onnx format" '"format":"ONNX model"'
  # The CNN: 5x5 convolutions 1->32 on 28x28 and 32->64 on 14x14 (same padding), then
  # 3136->1024->10 dense layers; the ONNX import's Conv (N-d) counts like Conv2D.
  "$FLOE" train --model cnn --epochs 1 --limit 128 --export "$tmp/cnn.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train cnn"; }
  "$FLOE" export "$tmp/cnn.floe" --onnx "$tmp/cnn.onnx" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "export cnn"; }
  # Its 2x2 max-pools: 14x14x32 and 7x7x64 outputs, 4 elements per window.
  conv=$((2*(28*28*32*5*5*1 + 14*14*64*5*5*32))); cmm=$((2*(3136*1024 + 1024*10)))
  cpool=$(((14*14*32 + 7*7*64)*4))
  for f in cnn.floe cnn.onnx; do
    inspect "$f json" --json "$tmp/$f"
    want "$f conv flops" "$(json_get '[j["flops"]["conv"], j["flops"]["matmul"], j["flops"]["pooling"]]')" "[$conv, $cmm, $cpool]"
  done
  ck=$(ls "$tmp"/ck/*.safetensors | tail -n 1)
  # weights and the two Adam moments of each, and the i64 global step
  inspect "checkpoint" --json "$ck"
  want "checkpoint totals" "$(json_get '[j["parameters"], j["bytes"], len(j["tensors"]), "global_step" in j["metadata"]]')" \
    "[$((3*params+1)), $((12*params+8)), 19, True]"
  # The training graph: its variables (weights, Adam's two moments, the step) are its parameters.
  "$FLOE" train --model mlp --epochs 1 --limit 128 --save-graph "$tmp/train.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "save-graph"; }
  inspect "training graph" "$tmp/train.floe"
  has "training graph params" "^parameters: $((3*params+1)) \($((12*params+8)) bytes\) in 19 variables"
  # Adam: 12 FLOPs per element of each weight's gradient; the sparse cross-entropy 6 per logit.
  inspect "training graph json" --json "$tmp/train.floe"
  want "training graph flops" "$(json_get '[j["flops"]["optimizer"], j["flops"]["softmax"]]')" "[$((12*params)), 60]"
  head -c 300 "$tmp/mlp.floe" >"$tmp/g_trunc"
  fails_one_line "graph truncated" "g_trunc: offset [0-9]*: truncated" "$tmp/g_trunc"
  head -c 3000 "$tmp/mlp.onnx" >"$tmp/o_trunc"
  fails_one_line "onnx truncated" "o_trunc'*: not a readable ONNX ModelProto: at byte offset" "$tmp/o_trunc"
  size=$(wc -c <"$ck")
  head -c $((size-100)) "$ck" >"$tmp/ck_short"
  fails_one_line "checkpoint truncated" "ck_short: tensor '.*': data_offsets \[.*\] outside the" "$tmp/ck_short"
  # Random damage: never a crash, always one error line (or a summary).
  python3 - "$FLOE" "$tmp" <<'PY' && ok || bad "damaged files"
import random, subprocess, sys
floe, d = sys.argv[1], sys.argv[2]
random.seed(7)
fails = 0
for src in ["mlp.floe", "mlp.onnx", "ok.safetensors", "f.npy"]:
    data = open(d + "/" + src, "rb").read()
    for i in range(25):
        b = bytearray(data)
        if i % 3 == 0: b = b[:random.randrange(len(b))]
        else:
            for _ in range(random.randint(1, 4)):
                b[random.randrange(min(len(b), 1024))] = random.randrange(256)
        open(d + "/fz", "wb").write(b)
        p = subprocess.run([floe, "inspect", d + "/fz"], capture_output=True)
        err = p.stderr.decode(errors="replace").splitlines()
        if p.returncode not in (0, 1) or len(err) != (p.returncode == 1):
            fails += 1
            print("damaged %s #%d: exit %d, stderr %r" % (src, i, p.returncode, err[:3]))
sys.exit(fails > 0)
PY
fi

# The LSTM language model's exported inference graph (fixed shapes: FLOPs per step): 2 layers
# of H=8 over T=3 steps of B=2 rows, embedding width I=H, vocabulary V=20. Each of the 2*3
# LSTMCells 2*B*(I+H)*4H + 13*B*H; the output layer's MatMul 2*(T*B)*H*V and its Add T*B*V.
FORTUNES=/usr/share/games/fortunes
if [ ! -d "$FORTUNES" ]; then
  echo "SKIP: LSTM graph checks: no fortunes at $FORTUNES"
else
  "$FLOE" train --model lstm --hidden 8 --layers 2 --vocab 20 --batch 2 --bptt 3 --steps 1 \
    --eval-windows 1 --export "$tmp/lstm.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train lstm"; }
  rec=$((2*3*(2*2*(8+8)*(4*8) + 13*2*8))); lmm=$((2*(3*2)*8*20)); lew=$((3*2*20))
  inspect "lstm graph" "$tmp/lstm.floe"
  has "lstm flops" "^FLOPs per step: $((rec+lmm+lew)) \(matmul $lmm, recurrent $rec, elementwise $lew\)$"
  has "lstm cells" "^LSTMCell +6$"
fi

echo "test_inspect: $pass passed, $fails failed"
[ "$fails" = 0 ]
