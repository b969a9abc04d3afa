#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Measuring: floe run --perf (graph files and ONNX models: counts, percentiles, throughput,
# --duration), --threads/--devices/--profile on run, --steps on every train model, --trace
# files checked as Chrome traces (kernel args, per-track order, paired flows, names), the
# step breakdown's parts adding up, and the errors.
set -u
FLOE="${top_builddir}/tools/floe"
DATA=/usr/share/datasets/fashion-mnist
FORTUNES=/usr/share/games/fortunes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
check() { # check NAME COMMAND...: expect success, stdout in $tmp/out
  name=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then ok; else
    echo "FAIL: $name (exit $?)"; cat "$tmp/err"; fails=$((fails+1)); fi
}
check_fails() { # check_fails NAME STATUS PATTERN COMMAND...: exit STATUS, PATTERN on stderr
  name=$1; want=$2; pattern=$3; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
  if [ "$got" != "$want" ]; then bad "$name: exit $got, want $want"; cat "$tmp/err"
  elif ! grep -q -- "$pattern" "$tmp/err"; then bad "$name: stderr lacks '$pattern'"; cat "$tmp/err"
  else ok; fi
}
pycheck() { # pycheck NAME FILE PYTHON: the code gets the parsed JSON of FILE as d
  name=$1; file=$2; code=$3
  if python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
$code" "$file" >"$tmp/py" 2>&1; then ok; else bad "$name"; cat "$tmp/py"; fi
}
# The breakdown's parts add up to its thread time, exactly, and it covers the steps.
BREAKDOWN='
def parts(b, steps=None):
    assert b["steps"] >= 1, b
    if steps is not None: assert b["steps"] == steps, (b["steps"], steps)
    s = b["kernel_ns"] + b["framework_ns"] + b["transfer_ns"] + b["idle_ns"] + b["tracing_ns"]
    assert s == b["thread_ns"], (s, b)
    assert min(b["kernel_ns"], b["framework_ns"], b["transfer_ns"], b["idle_ns"]) >= 0, b
    assert b["threads"] >= 1 and b["step_ms"] > 0, b
    assert abs(b["thread_ms"] - b["step_ms"] * b["threads"]) <= 1e-6 * b["thread_ms"] + 1e-9, b
'
# A Chrome trace: every kernel names its node and op, events on a track do not go back in
# time, every flow start has its finish, every process and thread is named.
TRACE='
def trace(d, want_flows=False):
    ev = d["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    kern = [e for e in xs if e.get("cat") in ("kernel", "transfer")]
    assert kern, "no kernel events"
    for e in kern:
        a = e["args"]
        assert a["node"] and a["op"] and a["device"] and e["name"] == a["node"], e
        assert isinstance(a["inputs"], list) and isinstance(a["outputs"], list), e
        assert a["bytes"] >= 0 and e["dur"] >= 0, e
    last = {}
    for e in xs:
        k = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(k, 0), ("track goes back", e)
        last[k] = e["ts"]
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in xs:
        assert e["pid"] in procs and (e["pid"], e["tid"]) in threads, ("unnamed track", e)
    s = sorted(e["id"] for e in ev if e["ph"] == "s")
    f = sorted(e["id"] for e in ev if e["ph"] == "f")
    assert s == f and len(set(s)) == len(s), ("unpaired flows", s, f)
    if want_flows:
        assert s, "no flows"
        ops = {e["args"]["op"] for e in kern if e["cat"] == "transfer"}
        assert "_Send" in ops and "_Recv" in ops, ops
    return kern
'

"${top_builddir}/tests/cli/make_graphs" "$tmp" || { echo "FAIL: make_graphs"; exit 1; }
G="$tmp/affine.floe"

# ---- floe run --perf on a graph file ----
check "perf" "$FLOE" run "$G" --fetch z --perf --warmup 2 --repeat 25 --shape x=16,3 --json
cp "$tmp/out" "$tmp/perf.json"
pycheck "perf json" "$tmp/perf.json" "$BREAKDOWN
assert d['mode'] == 'perf' and d['repeat'] == 25 and d['warmup'] == 2, d
l = d['latency_ms']
assert 0 < l['min'] <= l['p50'] <= l['p90'] <= l['p99'] <= l['max'], l
assert l['min'] <= l['mean'] <= l['max'], l
assert d['batch'] == 16, d
assert abs(d['samples_per_sec'] - 16 * d['runs_per_sec']) <= 1e-6 * d['samples_per_sec'], d
assert abs(d['runs_per_sec'] - 25 / d['total_seconds']) <= 1e-6 * d['runs_per_sec'], d
parts(d['breakdown'], d['breakdown_steps_traced_separately'])"
check "perf text" "$FLOE" run "$G" --fetch z --perf --repeat 5
grep -q "^latency ms: min .* p50 .* p90 .* p99 " "$tmp/out" && grep -q "runs/s" "$tmp/out" \
  && grep -q "step .* ms x .* threads: kernels .*framework .*transfers .*idle " "$tmp/out" \
  && ok || { bad "perf text lines"; cat "$tmp/out"; }
grep -q "note: input 'x' leaves dim 0 unknown: using 1" "$tmp/err" && ok \
  || { bad "perf: no note for the unknown batch dim"; cat "$tmp/err"; }
check "perf duration" "$FLOE" run "$G" --fetch z --perf --duration 0.2 --warmup 0 --json
pycheck "perf duration json" "$tmp/out" "
assert d['repeat'] >= 1 and d['total_seconds'] >= 0.2 and d['duration_seconds'] == 0.2, d"

# ---- --threads, --devices, --profile, --trace on one run ----
# (y = x w + b is one fused product, _FusedMatMul; z = Relu(y), fetched, runs on its own)
python3 "${top_srcdir}/tests/cli/npy.py" write "$tmp/x.npy" 2,3 1,2,3,-1,0,0
check "run one step --profile --trace" "$FLOE" run "$G" --fetch z --feed x="$tmp/x.npy" \
  --threads 1 --devices cpu --profile --trace "$tmp/one.trace.json" --json
pycheck "run one step json" "$tmp/out" "$BREAKDOWN$TRACE
assert d['outputs'][0]['shape'] == [2, 2], d
assert {'_FusedMatMul(MatMul+Add)', 'Relu'} <= {r['op'] for r in d['profile']}, d['profile']
parts(d['breakdown'], 1)
t = trace(json.load(open(d['trace'])))
mm = [e for e in t if e['args']['op'] == '_FusedMatMul']
assert len(mm) == 1 and mm[0]['args']['inputs'] == ['f32[2,3]', 'f32[3,2]', 'f32[2]'], mm
assert mm[0]['args']['outputs'] == ['f32[2,2]'] and mm[0]['args']['bytes'] == 16, mm"
check "run --profile perf" "$FLOE" run "$G" --fetch z --perf --repeat 4 --threads 1 --devices cpu \
  --profile --trace "$tmp/run.trace.json" --json
pycheck "run --profile json" "$tmp/out" "$BREAKDOWN$TRACE
ops = {r['op'] for r in d['profile']}
assert {'_FusedMatMul(MatMul+Add)', 'Relu'} <= ops, ops
assert all(r['calls'] == 4 for r in d['profile'] if r['op'] in ('_FusedMatMul(MatMul+Add)', 'Relu')), d['profile']
assert d['threads'] == 1 and d['devices'] == 'cpu', d
parts(d['breakdown'], 4)
t = trace(json.load(open(d['trace'])))
assert sum(1 for e in t if e['args']['op'] == '_FusedMatMul') == 4, 'one product per step'"
check "run --profile text" "$FLOE" run "$G" --fetch z --perf --repeat 3 --profile
grep -q "^_FusedMatMul(MatMul+Add) " "$tmp/out" && grep -q "step .* threads: kernels" "$tmp/out" && ok \
  || { bad "run --profile table"; cat "$tmp/out"; }

# ---- ONNX models ----
if "${top_builddir}/tests/onnx/make_onnx_mlp" "$tmp/mlp.onnx" >/dev/null 2>&1; then
  check "onnx perf" "$FLOE" run "$tmp/mlp.onnx" --perf --repeat 6 --profile --json
  pycheck "onnx perf json" "$tmp/out" "$BREAKDOWN
l = d['latency_ms']
assert d['repeat'] == 6 and l['p50'] <= l['p90'] <= l['p99'], d
assert d['profile'], d
parts(d['breakdown'], 6)"
  check "onnx one step --trace" "$FLOE" run "$tmp/mlp.onnx" --trace "$tmp/onnx.trace.json" \
    --perf --repeat 2 --shape image=3,784 --json
  pycheck "onnx trace" "$tmp/onnx.trace.json" "$TRACE
trace(d)"
else
  bad "make_onnx_mlp"
fi

# ---- errors ----
check_fails "bad --repeat" 2 "--repeat takes an integer from 1 to 100000000, got '0'" "$FLOE" run "$G" --fetch z --perf --repeat 0
check_fails "bad --repeat text" 2 "--repeat takes an integer from 1 to 100000000, got 'x'" "$FLOE" run "$G" --fetch z --perf --repeat x
check_fails "repeat and duration" 2 "not both" "$FLOE" run "$G" --fetch z --perf --repeat 3 \
  --duration 1
check_fails "repeat without perf" 2 "go with --perf" "$FLOE" run "$G" --fetch z --repeat 3
check_fails "bad --shape" 2 "--shape takes NAME=D0,D1" "$FLOE" run "$G" --fetch z --perf \
  --shape x=4,a
check_fails "unknown --shape input" 1 "--shape y=4,3: no such input" "$FLOE" run "$G" --fetch z \
  --perf --shape y=4,3
check_fails "unranked input" 1 "the shape of input 'x' is unknown (its rank too): give --shape x=" \
  "$FLOE" run "$tmp/unranked.floe" --fetch z --perf
check "unranked input with --shape" "$FLOE" run "$tmp/unranked.floe" --fetch z --perf --repeat 2 \
  --shape x=2,2
check_fails "unwritable --trace" 1 "cannot write the trace $tmp/no/such/dir/t.json: No such file or directory" \
  "$FLOE" run "$G" --fetch z --perf --repeat 2 --trace "$tmp/no/such/dir/t.json"
check_fails "unwritable --trace (one step)" 1 "cannot write the trace $tmp/no/t.json" \
  "$FLOE" run "$G" --target z --feed x="$tmp/x.npy" --trace "$tmp/no/t.json"

# ---- floe train --steps, --trace and the breakdown ----
if [ ! -d "$DATA" ]; then
  echo "SKIP (train part): Fashion-MNIST not found at $DATA"
else
  for m in "mlp --input queue" "mlp --input feed" "cnn --input feed"; do
    check "train --steps ($m)" "$FLOE" train --model $m --limit 640 --epochs 2 --steps 3 \
      --batch 32 --json --profile
    tail -n 1 "$tmp/out" >"$tmp/j"
    pycheck "train --steps ($m) json" "$tmp/j" "$BREAKDOWN
assert d['steps'] == 3 and d['global_step'] == 3, d
assert 0 <= d['test_accuracy'] <= 1, d
parts(d['breakdown'])"
  done
  check_fails "train bad --steps" 2 "--steps takes an integer from 1 to" "$FLOE" train --steps 0
  if [ -f "$tmp/mlp.onnx" ]; then
    check "train --onnx --steps" "$FLOE" train --onnx "$tmp/mlp.onnx" --limit 640 --epochs 1 \
      --steps 2 --json
    tail -n 1 "$tmp/out" >"$tmp/j"
    pycheck "train --onnx --steps json" "$tmp/j" "
assert d['steps'] == 2 and d['global_step'] == 2, d"
  fi
  # Across devices: transfers appear as paired flows between two device tracks.
  devpath="$FLOE_PLUGIN_PATH:$FLOE_TPUSIM_PLUGIN_DIR:$FLOE_TRANSPORT_DIR"
  check "train --trace across devices" env FLOE_PLUGIN_PATH="$devpath" "$FLOE" train --model cnn --input feed --limit 64 \
    --batch 32 --epochs 1 --steps 1 --devices cpu,tpu-sim --trace "$tmp/train.trace.json" \
    --profile --json
  pycheck "train trace" "$tmp/train.trace.json" "$TRACE
k = trace(d, want_flows=True)
devs = {e['args']['device'] for e in k}
assert len(devs) >= 2, devs
mm = [e for e in k if e['args']['op'] == 'MatMul']
assert mm and all(o.startswith('f32[') for e in mm for o in e['args']['outputs']), mm[:1]"
  tail -n 1 "$tmp/out" >"$tmp/j"
  pycheck "train trace breakdown" "$tmp/j" "$BREAKDOWN
parts(d['breakdown'], 1)
assert d['breakdown']['transfer_ns'] > 0, d['breakdown']"
  check_fails "train unwritable --trace" 1 "cannot write the trace $tmp/no/t.json: No such file" \
    "$FLOE" train --limit 64 --epochs 1 --steps 1 --trace "$tmp/no/t.json"
fi
if [ ! -d "$FORTUNES" ]; then
  echo "SKIP (lstm part): fortunes not found at $FORTUNES"
else
  check "lstm --steps --trace" "$FLOE" train --model lstm --steps 3 --hidden 32 --vocab 200 \
    --bptt 5 --batch 8 --eval-windows 2 --profile --trace "$tmp/lstm.trace.json" --json
  tail -n 1 "$tmp/out" >"$tmp/j"
  pycheck "lstm json" "$tmp/j" "$BREAKDOWN
assert d['steps'] == 3, d
parts(d['breakdown'], 2)"
  pycheck "lstm trace" "$tmp/lstm.trace.json" "$TRACE
trace(d)"
fi

echo "test_measure: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
