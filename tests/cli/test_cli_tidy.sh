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
for c in devices plugins ops run graph train onnx-test inspect; do
  one_line_error "$c --bogus" "^floe $c: unknown option '--bogus'; see 'floe help $c'\$" "$FLOE" $c --bogus
  one_line_error "$c -Z" "^floe $c: unknown option '-Z'" "$FLOE" $c -Z
done
one_line_error "lstm --bogus" "^floe train --model lstm: unknown option '--bogus'; see 'floe help train --model lstm'\$" \
  "$FLOE" train --model lstm --bogus
one_line_error "did you mean" "unknown option '--epohcs' (did you mean --epochs?)" "$FLOE" train --epohcs 3
one_line_error "lstm did you mean" "(did you mean --hidden?)" "$FLOE" train --model lstm --hiden 8
one_line_error "run did you mean" "(did you mean --fetch?)" "$FLOE" run --fetsh z g.floe
one_line_error "ambiguous" "option '--s' is ambiguous (--seed, --stop-after, --save-graph, --steps)" "$FLOE" train --s 1
one_line_error "needs a value" "option '--fetch' needs a value" "$FLOE" run --fetch
one_line_error "takes no value" "option '--json' takes no value" "$FLOE" devices --json=1
one_line_error "bad value" "^floe train: --epochs takes an integer from 1 to 1000000, got '0'; see 'floe help train'\$" "$FLOE" train --epochs 0
one_line_error "unknown command" "^floe: unknown command 'trian' (did you mean train?); see 'floe help'\$" "$FLOE" trian

# 2. floe help
"$FLOE" help >"$tmp/out" 2>&1 && grep -q "Commands:" "$tmp/out" && grep -q "^  train " "$tmp/out" && ok \
  || bad "floe help lists the commands"
for c in devices plugins ops run graph train onnx-test inspect; do
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

# 4. Tables align: every row of a table has its columns at the header's columns.
aligned() { # aligned NAME: in every row, the character before each header cell's start is a space
  python3 - "$tmp/out" <<'PY' && ok || { bad "$1: columns do not align"; cat "$tmp/out"; }
import sys
rows = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
head = rows[0]
starts = [i for i in range(1, len(head)) if head[i] != " " and head[i - 1] == " "]
assert len(rows) > 1 and starts, rows
for r in rows[1:]:
    for s in starts:
        if s <= len(r) and r[s - 1] != " ":
            sys.exit("column at %d cut in row %r" % (s, r))
PY
}
"$FLOE" devices >"$tmp/out" 2>/dev/null || bad "devices"; aligned devices
"$FLOE" plugins >"$tmp/out" 2>/dev/null; grep -v '^[a-z-]*: ' "$tmp/out" >"$tmp/t"; mv "$tmp/t" "$tmp/out"; aligned plugins
"$FLOE" ops >"$tmp/out" 2>/dev/null || bad "ops"; aligned ops

# 6. floe ops OP and --device
"$FLOE" ops MatMul >"$tmp/out" 2>"$tmp/err" || bad "ops MatMul"
grep -q "^  a: T$" "$tmp/out" && grep -q "^  product: T$" "$tmp/out" && grep -q "^  transpose_a: bool = false$" "$tmp/out" \
  && grep -q "^  T: type in {f32" "$tmp/out" && grep -Eq "^  CPU +cpu +T=f32" "$tmp/out" && ok || { bad "ops MatMul content"; cat "$tmp/out"; }
# Its description (ops_std.def's doc), on the lines below the name.
sed -n 2p "$tmp/out" | grep -q "^  Matrix product of a \[M,K\] and b \[K,N\]" && ok || { bad "ops MatMul doc"; cat "$tmp/out"; }
"$FLOE" ops MatMul --json >"$tmp/out" || bad "ops MatMul --json"
python3 - "$tmp/out" <<'PY' && ok || bad "ops MatMul --json content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["op"] == "MatMul" and [i["name"] for i in d["inputs"]] == ["a", "b"], d
assert [(o["name"], o["type_attr"], o["dtype"]) for o in d["outputs"]] == [("product", "T", None)], d
assert [i["spec"] for i in d["inputs"]] == ["a: T", "b: T"], d
ta = [a for a in d["attributes"] if a["name"] == "transpose_a"][0]
assert ta["type"] == "bool" and ta["has_default"] and ta["default"] is False, ta
assert d["doc"].startswith("Matrix product of a [M,K] and b [K,N]") and d["doc"].endswith("."), d
assert any(k["device_type"] == "CPU" and "f32" in k["dtypes"] for k in d["kernels"]), d
assert any(c["attr"] == "T" and "f32" in c["dtypes"] for k in d["kernels"] for c in k["constraints"]), d
PY
# The attributes, inputs and outputs of --json are fields, defaults JSON values of their
# attribute's type (not the spec text): Conv2D, Concat (a list of N inputs), LeakyRelu (a
# float), Placeholder (an unknown shape), FIFOQueueV2 (list(type)), QueueEnqueueV2 (an input
# whose dtypes a list(type) attribute gives, and a fixed-dtype resource input).
for op in Conv2D Concat LeakyRelu Placeholder FIFOQueueV2 QueueEnqueueV2; do
  "$FLOE" ops "$op" --json >"$tmp/op_$op.json" || bad "ops $op --json"
done
python3 - "$tmp" <<'PY' && ok || bad "ops OP --json fields"
import json, sys
def op(name):
    d = json.load(open("%s/op_%s.json" % (sys.argv[1], name)))
    return d, {a["name"]: a for a in d["attributes"]}
d, a = op("Conv2D")
assert list(a) == ["T", "strides", "padding", "data_format", "dilations"], list(a)
assert a["strides"]["type"] == "list(int)" and not a["strides"]["has_default"] and a["strides"]["default"] is None, a["strides"]
assert a["dilations"]["type"] == "list(int)" and a["dilations"]["default"] == [1, 1, 1, 1], a["dilations"]
assert a["data_format"]["type"] == "string" and a["data_format"]["default"] == "NHWC", a["data_format"]
assert a["padding"]["type"] == "string" and not a["padding"]["has_default"], a["padding"]
assert a["T"]["type"] == "type" and a["T"]["allowed"] == ["f32", "f64", "f16", "bf16"] and a["T"]["min"] is None, a["T"]
assert a["strides"]["allowed"] is None and a["strides"]["spec"] == "strides: list(int)", a["strides"]
assert [(i["name"], i["type_attr"], i["is_list"]) for i in d["inputs"]] == [("input", "T", False), ("filter", "T", False)], d
d, a = op("Concat")
v = d["inputs"][0]
assert (v["name"], v["type_attr"], v["number_attr"], v["is_list"], v["dtype"]) == ("values", "T", "N", True, None), v
assert a["N"]["type"] == "int" and a["N"]["min"] == 1 and not a["N"]["has_default"], a["N"]
assert a["Tidx"]["default"] == "i32" and a["Tidx"]["allowed"] == ["i32", "i64"], a["Tidx"]
d, a = op("LeakyRelu")
assert a["alpha"]["type"] == "float" and a["alpha"]["default"] == 0.2, a["alpha"]
assert isinstance(a["alpha"]["default"], float), a["alpha"]
d, a = op("Placeholder")
assert a["shape"]["type"] == "shape" and a["shape"]["has_default"] and a["shape"]["default"] is None, a["shape"]
assert d["outputs"][0]["type_attr"] == "dtype", d
d, a = op("FIFOQueueV2")
assert a["component_types"]["type"] == "list(type)" and a["component_types"]["min"] == 1, a
assert a["capacity"]["default"] == -1 and a["shapes"]["default"] == [] and a["container"]["default"] == "", a
d, a = op("QueueEnqueueV2")
h, c = d["inputs"]
assert (h["name"], h["dtype"], h["type_attr"], h["is_list"]) == ("handle", "resource", None, False), h
assert (c["type_list_attr"], c["number_attr"], c["dtype"], c["is_list"]) == ("Tcomponents", None, None, True), c
PY
# A long description wraps at the terminal's width, words whole, and says all of the doc.
"$FLOE" ops --json Resize >"$tmp/json" || bad "ops --json Resize"
for cols in 40 100; do
  COLUMNS=$cols "$FLOE" ops Resize >"$tmp/out" || bad "ops Resize ($cols columns)"
  python3 - "$tmp/json" "$tmp/out" $cols <<'PY' && ok || { bad "ops Resize doc wrapped to $cols columns"; cat "$tmp/out"; }
import json, sys
doc = json.load(open(sys.argv[1]))["doc"]
lines = open(sys.argv[2]).read().split("\n")
cols = int(sys.argv[3])
body = lines[1:lines.index("Inputs:")]
assert len(body) >= 2 and all(l.startswith("  ") and len(l) < cols for l in body), body
assert " ".join(l.strip() for l in body) == doc, (body, doc)
PY
done
"$FLOE" ops Matmul >"$tmp/out" 2>"$tmp/err"; [ $? = 1 ] && grep -q "no op 'Matmul' (did you mean MatMul?)" "$tmp/err" && ok || bad "ops Matmul"
"$FLOE" ops --device cpu --json >"$tmp/tpu" || bad "ops --device cpu"
"$FLOE" ops --device /device:CPU:0 --json >"$tmp/tpu2" || bad "ops --device /device:CPU:0"
"$FLOE" ops --json >"$tmp/all" || bad "ops --json"
python3 - "$tmp/tpu" "$tmp/tpu2" "$tmp/all" <<'PY' && ok || bad "ops --device filters"
import json, sys
tpu, tpu2, every = (json.load(open(p)) for p in sys.argv[1:])
assert tpu == tpu2 and 0 < len(tpu) < len(every), (len(tpu), len(every))
assert all("CPU" in o["device_types"].split(",") or "*" in o["device_types"].split(",") for o in tpu)
assert "MatMul" in [o["op"] for o in tpu] and "Placeholder" not in [o["op"] for o in tpu]
PY
"$FLOE" ops --device nosuch >"$tmp/out" 2>"$tmp/err"; [ $? = 1 ] && grep -q "no device or device type 'nosuch'" "$tmp/err" && ok || bad "ops --device nosuch"

# 3. The progress line of floe train fits the terminal (a 60- and a 100-column pseudo-terminal)
# and the terminal names the fields as a pipe does.
if [ -f "$DATA/train-images-idx3-ubyte" ] || [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  if command -v script >/dev/null 2>&1; then
    for cols in 60 100; do
      script -qec "stty cols $cols; '$FLOE' train --data '$DATA' --limit 20000 --epochs 1" /dev/null \
        >"$tmp/tty" 2>&1 </dev/null || bad "train on a terminal"
      python3 - "$tmp/tty" "$cols" <<'PY' && ok || bad "progress on $cols columns"
import re, sys
text = open(sys.argv[1], "rb").read().decode(errors="replace").replace("\x1b[K", "").replace("\r", "\n")
cols = int(sys.argv[2])
segs = [s for s in re.split(r"[\r\n]", text) if "%" in s and s.startswith("epoch")]
assert segs, text
long = [s for s in segs if len(s) > cols - 1]
assert not long, long
if cols >= 100:
    assert any("[#" in s for s in segs), segs
assert re.search(r"^epoch 1/1 loss [0-9.]+ test_accuracy [0-9.]+ samples/s [0-9]+ seconds", text, re.M), text
assert re.search(r"^test_accuracy [0-9.]+ samples/s [0-9]+ wall_seconds", text, re.M), text
PY
    done
    "$FLOE" train --data "$DATA" --limit 500 --epochs 1 >"$tmp/out" 2>&1
    grep -Eq "^epoch 1/1 loss [0-9.]+ test_accuracy [0-9.]+ samples/s [0-9]+ seconds" "$tmp/out" \
      && grep -Eq "^test_accuracy [0-9.]+ samples/s [0-9]+ wall_seconds" "$tmp/out" && ok \
      || { bad "train to a pipe: field names"; cat "$tmp/out"; }
  else
    echo "SKIP: progress width: no script(1)"
  fi
fi

# 9. floe plugins warns (stderr and --json) about a FLOE_PLUGINS name matching no plugin, a
# FLOE_PLUGIN_PATH folder that does not exist, a stray shared object, a floe-*.so that is no plugin.
mkdir "$tmp/pl"
: >"$tmp/pl/stray.so"
echo junk >"$tmp/pl/floe-junk.so"
cpu_dir=$(dirname "$("$FLOE" plugins --json | python3 -c 'import json,sys; print([p["path"] for p in json.load(sys.stdin)["plugins"] if p["name"] == "cpu"][0])')")
FLOE_PLUGIN_PATH="$cpu_dir:$tmp/pl:$tmp/nosuchdir" FLOE_PLUGINS=cpu,nosuch,junk "$FLOE" plugins >"$tmp/out" 2>"$tmp/err" || bad "plugins with warnings"
for w in "FLOE_PLUGINS names 'nosuch'" "FLOE_PLUGIN_PATH folder '$tmp/nosuchdir' does not exist" "'$tmp/pl/stray.so' is not loaded" \
         "'$tmp/pl/floe-junk.so' is not a working plugin"; do
  grep -q "^floe plugins: warning: $w" "$tmp/err" && ok || { bad "plugins: no warning $w"; cat "$tmp/err"; }
done
[ "$(wc -l <"$tmp/err")" -eq 4 ] && ok || { bad "plugins: not four warnings"; cat "$tmp/err"; }
grep -q "^cpu  *loaded" "$tmp/out" && ok || bad "plugins: cpu not loaded beside the warnings"
FLOE_PLUGIN_PATH="$cpu_dir:$tmp/pl:$tmp/nosuchdir" FLOE_PLUGINS=cpu,nosuch,junk "$FLOE" plugins --json >"$tmp/out" 2>/dev/null
python3 - "$tmp/out" <<'PY' && ok || bad "plugins --json warnings"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["warnings"]) == 4 and any("nosuch'" in w for w in d["warnings"]), d
assert [p["state"] for p in d["plugins"] if p["name"] == "cpu"] == ["loaded"], d
PY
FLOE_PLUGIN_PATH="$cpu_dir" "$FLOE" plugins >"$tmp/out" 2>"$tmp/err"; [ ! -s "$tmp/err" ] && ok || { bad "plugins: warnings for a clean path"; cat "$tmp/err"; }

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
