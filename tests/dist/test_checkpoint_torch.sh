#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A sharded checkpoint of a cluster read by Python's safetensors package, as
# docs/checkpoints.md "Sharded checkpoints" says a reader does: test_checkpoint_sharded's case
# "python" saves, from a chief and 2 ps tasks in one process, emb [10, 4] f32 in 3 shards
# (parts 0 and 2 on ps 0, part 1 on ps 1), bias [3] f64 on ps 1 and step (i64, a scalar) on
# ps 0, at step 1000; restores it into one process and writes that state as a single file.
# Here Python loads each shard file (safetensors.numpy; safetensors.torch too when torch is
# installed), checks that weight_map names every tensor of every file (and only those), that
# each variable's parts tile it, assembles every variable (numpy.concatenate; torch.cat) and
# compares it with the values the test assigned (their formula, written again below) and with
# Floe's restored file; with torch, the docs' snippet itself is run on the checkpoint.
# Python: tests/find_python.sh's (FLOE_TEST_PYTHON, made by tests/setup_venv.sh, must have
# safetensors and numpy); skipped (77) when none has them; torch is optional.
set -u
. "${top_srcdir}/tests/find_python.sh"
test_python "safetensors, numpy" "the safetensors and numpy packages" || exit 77
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! CK_RUN_CASE=python FLOE_TEST_CKPT_OUT="$tmp" FLOE_TRANSPORT=local \
     "${top_builddir}/tests/dist/test_checkpoint_sharded" >"$tmp/write.log" 2>&1; then
  echo "FAIL: writing the checkpoint (test_checkpoint_sharded, case python):"
  cat "$tmp/write.log"
  exit 1
fi
"$py" - "$tmp" "${top_srcdir}/docs/checkpoints.md" <<'PY'
import json, os, re, sys
sys.path.insert(0, os.environ["top_srcdir"] + "/tests")
from pycheck import check, done
import numpy as np
from safetensors.numpy import load_file as np_load

out, doc = sys.argv[1], sys.argv[2]
d = os.path.join(out, "run1")

index = json.load(open(os.path.join(d, "ckpt-0000001000.index.json")))
files = sorted(index["files"])
check(files == ["ckpt-0000001000.shards/ps-0.safetensors",
                "ckpt-0000001000.shards/ps-1.safetensors"], "files %s" % files)
shards = {f: np_load(os.path.join(d, f)) for f in files}
# weight_map: every tensor of every shard file, to the file holding it, and nothing else
held = {t: f for f, ts in shards.items() for t in ts}
check(index["weight_map"] == held, "weight_map %s, the files hold %s" % (index["weight_map"], held))
check({p["file"] for p in index["variables"]["emb"]["parts"]} == set(files),
      "emb's parts are not on both ps tasks: %s" % index["variables"]["emb"]["parts"])

def assemble(loaded, cat):
    state = {}
    for name, v in index["variables"].items():
        parts = sorted(v["parts"], key=lambda p: p["offset"])
        ts = [loaded[p["file"]][p["tensor"]] for p in parts]
        at = 0
        for p, t in zip(parts, ts):
            check(list(t.shape) == p["shape"], "%s: part %s has shape %s" % (name, p, list(t.shape)))
            if v["shape"]:
                check(p["offset"] == at and p["axis"] == parts[0]["axis"], "%s: part %s" % (name, p))
                at += p["shape"][p["axis"]]
        if v["shape"]:
            check(at == v["shape"][parts[0]["axis"]], "%s: parts end at %d of %s" % (name, at, v["shape"]))
        state[name] = ts[0] if not v["shape"] else cat(ts, parts[0]["axis"])
        check(list(state[name].shape) == v["shape"], "%s: assembled %s" % (name, list(state[name].shape)))
    return state

def same(a, b, what):
    check(sorted(a) == sorted(b), "%s: variables %s against %s" % (what, sorted(a), sorted(b)))
    for k in a:
        if k in b:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            check(x.dtype == y.dtype and np.array_equal(x, y), "%s: %s is %r, expected %r" % (what, k, x, y))

state = assemble(shards, lambda ts, axis: np.concatenate(ts, axis=axis))
# state 7 of test_checkpoint_sharded.c: emb[r][c] = 700 + (4 r + c) / 2, bias[i] = 7 - i / 4
want = {"emb": np.array([[700 + (4 * r + c) * 0.5 for c in range(4)] for r in range(10)], np.float32),
        "bias": np.array([7 - i * 0.25 for i in range(3)], np.float64),
        "step": np.array(1007, np.int64)}
same(state, want, "assembled with numpy")
same(np_load(os.path.join(out, "restored", "ref-0000001000.safetensors")), want,
     "Floe's restore into one process")
try:
    import torch
    from safetensors.torch import load_file as torch_load
except ImportError:
    torch = None
if torch is None:
    print("torch is not installed in %s: torch.cat and the docs' snippet not run" % sys.executable)
else:
    tstate = assemble({f: torch_load(os.path.join(d, f)) for f in files},
                      lambda ts, axis: torch.cat(ts, dim=axis))
    same({k: v.numpy() for k, v in tstate.items()}, want, "assembled with torch.cat")
    # the snippet of docs/checkpoints.md, as printed there, from the folder holding run1
    text = open(doc).read()
    m = re.search(r"\*\*Reading with PyTorch's `safetensors`\*\*.*?```python\n(.*?)```", text, re.S)
    check(m is not None, "no Python snippet under 'Reading with PyTorch's safetensors' in %s" % doc)
    if m:
        os.chdir(out)
        g = {}
        exec(m.group(1), g)
        same({k: v.numpy() for k, v in g["state"].items()}, want, "the docs' snippet")
done("test_checkpoint_torch")
PY
