#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe export --onnx on the frozen models of `floe train --model mlp|cnn|lstm --export`
# (trained a few steps): onnx.checker accepts each file, and ONNX Runtime and Floe's own
# importer (`floe run MODEL.onnx`) give the outputs `floe run` gives for the Floe graph, on
# random inputs, within 1e-5 of the outputs' scale. An op without a mapping fails naming the
# node. Python: $FLOE_TEST_PYTHON (then it must have onnx, onnxruntime and numpy: CI sets it),
# else python3, else bench/.venv; skips (77) when none has them, or without the datasets.
set -u
FLOE="${top_builddir}/tools/floe"
MNIST=/usr/share/datasets/fashion-mnist
FORTUNES=/usr/share/games/fortunes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }

# Errors that need neither Python nor data.
"$FLOE" export --help >"$tmp/out" 2>&1 && grep -q -- "--onnx OUT.onnx" "$tmp/out" && ok || bad "export --help"
"$FLOE" export "$tmp/none.floe" --onnx "$tmp/none.onnx" >"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] && grep -q "none.floe" "$tmp/err" && ok || { bad "missing graph file"; cat "$tmp/err"; }
"$FLOE" export "$tmp/none.floe" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q -- "--onnx" "$tmp/err" && ok || { bad "no --onnx: usage error"; cat "$tmp/err"; }

. "${top_srcdir}/tests/find_python.sh"
if ! test_python "onnx, onnxruntime, numpy" "onnx, onnxruntime and numpy"; then
  [ "$fails" = 0 ] && exit 77 || exit 1
fi
if [ ! -d "$MNIST" ] || [ ! -d "$FORTUNES" ]; then
  echo "SKIP: $MNIST or $FORTUNES is missing (apt-get install dataset-fashion-mnist fortunes)"
  [ "$fails" = 0 ] && exit 77 || exit 1
fi

# Each model a few steps from its random start, so the weights are not the initial ones.
"$FLOE" train --model mlp --epochs 1 --limit 256 --export "$tmp/mlp.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train mlp"; }
"$FLOE" train --model cnn --epochs 1 --limit 128 --export "$tmp/cnn.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train cnn"; }
"$FLOE" train --model lstm --hidden 32 --layers 2 --batch 4 --bptt 6 --vocab 500 --steps 20 \
  --eval-windows 2 --export "$tmp/lstm.floe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "train lstm"; }
for m in mlp cnn lstm; do
  if "$FLOE" export "$tmp/$m.floe" --onnx "$tmp/$m.onnx" --opset 17 >"$tmp/log" 2>&1; then ok
  else bad "export $m"; cat "$tmp/log"; fi
done

# The training graph (a while loop, Adam's updates): the error names a node and its op, and
# no file is left.
"$FLOE" train --model lstm --hidden 8 --layers 1 --vocab 50 --save-graph "$tmp/train.floe" >/dev/null 2>&1 || bad "save-graph"
"$FLOE" export "$tmp/train.floe" --onnx "$tmp/bad.onnx" >"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] && grep -q "node '[^']*' (op [A-Za-z]*)" "$tmp/err" && [ ! -e "$tmp/bad.onnx" ] && ok \
  || { bad "training graph: want an error naming the node and op, and no file"; cat "$tmp/err"; }

FLOE="$FLOE" "$py" - "$tmp" <<'PY' && ok || bad "the ONNX models differ from the Floe graphs"
import os, subprocess, sys
import numpy as np
import onnx
import onnxruntime as ort

tmp, floe = sys.argv[1], os.environ["FLOE"]
rng = np.random.default_rng(7)
models = {
    "mlp": ({"x": rng.random((5, 784), dtype=np.float32)}, ["logits"]),
    "cnn": ({"x": rng.random((3, 28, 28, 1), dtype=np.float32)}, ["logits"]),
    "lstm": (dict({"x": rng.integers(0, 500, (4, 6)).astype(np.int32)},
                  **{"%s%d" % (s, l): rng.standard_normal((4, 32)).astype(np.float32) * 0.5
                     for s in "hc" for l in range(2)}),
             ["logits", "next_h0", "next_c0", "next_h1", "next_c1"]),
}
fails = 0
for name, (feeds, fetches) in models.items():
    path = os.path.join(tmp, name + ".onnx")
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17, model.opset_import
    feed_args, input_args = [], []
    for k, v in feeds.items():
        f = os.path.join(tmp, "%s_%s.npy" % (name, k))
        np.save(f, v)
        feed_args += ["--feed", "%s=%s" % (k, f)]
        input_args += ["--input", "%s=%s" % (k, f)]
    fetch_args = sum((["--fetch", f] for f in fetches), [])
    out_floe, out_rt = os.path.join(tmp, name + "_floe"), os.path.join(tmp, name + "_rt")
    subprocess.run([floe, "run", os.path.join(tmp, name + ".floe")] + feed_args + fetch_args +
                   ["--out", out_floe], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([floe, "run", path] + input_args + fetch_args + ["--out", out_rt], check=True,
                   stdout=subprocess.DEVNULL)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = dict(zip(fetches, sess.run(fetches, feeds)))
    for f in fetches:
        want = np.load(os.path.join(out_floe, f + ".npy"))
        scale = float(np.abs(want).max())
        for who, val in (("onnxruntime", got[f]), ("floe run .onnx", np.load(os.path.join(out_rt, f + ".npy")))):
            err = float(np.abs(val.astype(np.float64) - want).max()) if val.shape == want.shape else float("inf")
            good = val.shape == want.shape and scale > 1e-3 and err <= 1e-5 * scale
            print("%-5s %-8s %-15s shape %-12s max |error| %.3g (max |value| %.3g)%s" % (
                name, f, who, "x".join(map(str, val.shape)), err, scale, "" if good else "  FAIL"))
            fails += not good
sys.exit(1 if fails else 0)
PY

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
