#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A Floe checkpoint read by the Python safetensors package: every dtype's values, shapes
# and the metadata (format, global_step, variables_hash recomputed here). Python:
# $FLOE_TEST_PYTHON (then it must have safetensors and numpy: CI sets it), else python3, else
# bench/.venv; skips (77) when none has them (tests/setup_venv.sh makes one).
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "${top_srcdir}/tests/find_python.sh"
test_python "safetensors, numpy" "the safetensors and numpy packages" || exit 77
mkdir "$tmp/all" "$tmp/np"
file=$("${top_builddir}/tests/cli/ckpt_model" checkpoint "$tmp/all") || { echo "FAIL: ckpt_model checkpoint"; exit 1; }
npfile=$("${top_builddir}/tests/cli/ckpt_model" checkpoint "$tmp/np" --no-bf16) || { echo "FAIL: ckpt_model checkpoint --no-bf16"; exit 1; }
"$py" - "$file" "$npfile" <<'PY'
import os, sys
sys.path.insert(0, os.environ["top_srcdir"] + "/tests")
from pycheck import check, done
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file

path, np_path = sys.argv[1], sys.argv[2]
# name: (dtype, safetensors dtype, shape, element i); as ckpt_model.c writes them.
want = {
    "dense/kernel": (np.float32, "F32", (2, 3), lambda i: i * 0.5 - 3.0),
    "f64": (np.float64, "F64", (4,), lambda i: i / 3.0 + 0.25),
    "half": (np.float16, "F16", (2, 2), lambda i: i * 0.25 - 1.0),
    "brain": (None, "BF16", (3,), lambda i: i * 2.0 - 5.0),
    "i8": (np.int8, "I8", (5,), lambda i: i * 9 - 100),
    "u8": (np.uint8, "U8", (2, 2, 2), lambda i: i * 7 + 3),
    "scalar_i32": (np.int32, "I32", (), lambda i: i * 1000003 - 123456),
    "i64": (np.int64, "I64", (3,), lambda i: i * 10000000019 - 7),
    "mask": (np.bool_, "BOOL", (6,), lambda i: i % 3 == 1),
    "empty": (np.float32, "F32", (0, 2), lambda i: 0),
}

with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
    names = sorted(f.keys())
    check(names == sorted(want), "keys %s" % names)
    tensors = {k: f.get_tensor(k) for k in names if want[k][1] != "BF16"}
check(meta.get("format") == "floe", "format %r" % meta)
check(meta.get("global_step") == "1234", "global_step %r" % meta)
lines = "".join("%s %s [%s]\n" % (k, want[k][1], ",".join(str(d) for d in want[k][2]))
                for k in sorted(want, key=lambda s: s.encode()))
h = 0xcbf29ce484222325
for b in lines.encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
check(meta.get("variables_hash") == "%016x" % h, "variables_hash %r, want %016x" % (meta, h))

def compare(tensors, what):
    for k, t in tensors.items():
        dt, _, shape, fn = want[k]
        n = int(np.prod(shape)) if shape else 1
        ref = np.array([fn(i) for i in range(n)], dtype=dt).reshape(shape)
        check(t.dtype == dt and t.shape == shape, "%s %s: %s %s" % (what, k, t.dtype, t.shape))
        check(np.array_equal(t, ref), "%s %s: %s, want %s" % (what, k, t.ravel(), ref.ravel()))

compare(tensors, "safe_open")
loaded = load_file(np_path)  # NumPy has no bf16: this file lacks that variable
check(sorted(loaded) == sorted(k for k in want if want[k][1] != "BF16"), "load_file keys %s" % sorted(loaded))
compare(loaded, "load_file")
# bf16 has no NumPy dtype: safetensors' own parser (deserialize, the Rust core every
# framework binding uses) gives the tensor's dtype, shape and raw bytes, widened here to f32
# by hand (a bf16 is the top 16 bits of an f32); with PyTorch, its loader reads it too.
raw = dict(safetensors.deserialize(open(path, "rb").read()))["brain"]
check(raw["dtype"] == "BF16" and list(raw["shape"]) == [3], "brain %s %s" % (raw["dtype"], raw["shape"]))
bits = np.frombuffer(bytes(raw["data"]), dtype="<u2").astype("<u4") << 16
check(list(bits.view("<f4")) == [-5.0, -3.0, -1.0], "brain (deserialize) %s" % bits.view("<f4"))
try:
    import torch
    from safetensors.torch import load_file as load_pt
    b = load_pt(path)["brain"]
    check(b.dtype == torch.bfloat16 and list(b.float()) == [-5.0, -3.0, -1.0], "brain %s" % b)
except ImportError:
    print("note: PyTorch not installed; bf16 checked through safetensors.deserialize")
done()
PY
