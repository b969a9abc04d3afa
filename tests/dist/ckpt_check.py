# SPDX-License-Identifier: Apache-2.0
# ckpt_check.py DIR [STEP] - the newest committed sharded checkpoint of DIR (prefix ckpt; with
# STEP: the first one past that step), checked whole with the standard library only: every
# file the index names is there with its size, its safetensors header parses, its save_id
# and global_step are the index's, and every variable's parts tile it. Prints one line,
# "STEP DIGEST GS" (DIGEST: sha256 over each variable, in name order, of its name and
# assembled little-endian bytes; GS: the value of the tensor named global_step), or exits 1
# naming what is wrong.
import hashlib, json, os, re, struct, sys

d = sys.argv[1]
idx = sorted(f for f in os.listdir(d) if re.fullmatch(r"ckpt-\d{10,19}\.index\.json", f))
if len(sys.argv) > 2:
    idx = [f for f in idx if int(f[5:-11]) > int(sys.argv[2])][:1]
if not idx:
    print("no committed index in", d); sys.exit(1)
index = json.load(open(os.path.join(d, idx[-1])))
meta = index["metadata"]
assert meta["format"] == "floe-sharded", meta
step = int(meta["global_step"])
heads = {}
for rel, f in index["files"].items():
    p = os.path.join(d, rel)
    if not os.path.exists(p) or os.path.getsize(p) != f["size"]:
        print("%s: missing or not %d bytes" % (p, f["size"])); sys.exit(1)
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    m = h.pop("__metadata__")
    if m.get("save_id") != f["save_id"] or int(m["global_step"]) != step:
        print("%s: of another save" % p); sys.exit(1)
    heads[rel] = (h, raw[8 + n:])
size = {"F32": 4, "F64": 8, "I64": 8, "I32": 4, "BF16": 2, "F16": 2, "U8": 1, "I8": 1, "BOOL": 1}
dig = hashlib.sha256()
gs = None
for name in sorted(index["variables"]):
    v = index["variables"][name]
    es = size[v["dtype"]]
    shape = v["shape"]
    parts = sorted(v["parts"], key=lambda q: q["offset"])
    if not shape:  # a scalar: one part
        h, data = heads[parts[0]["file"]]
        b0, b1 = h[parts[0]["tensor"]]["data_offsets"]
        whole = data[b0:b1]
    else:
        ax = parts[0]["axis"]
        outer = 1
        for x in shape[:ax]: outer *= x
        inner = es
        for x in shape[ax + 1:]: inner *= x
        rows = [bytearray() for _ in range(outer)]
        at = 0
        for q in parts:
            h, data = heads[q["file"]]
            t = h[q["tensor"]]
            assert t["dtype"] == v["dtype"] and q["offset"] == at, (name, q)
            b0, b1 = t["data_offsets"]
            r = t["shape"][ax]
            for o in range(outer):
                rows[o] += data[b0 + o * r * inner:b0 + (o + 1) * r * inner]
            at += r
        assert at == shape[ax], (name, at, shape)
        whole = b"".join(bytes(r) for r in rows)
    dig.update(name.encode() + b"\0" + whole)
    if name == "global_step":
        gs = struct.unpack("<q", whole)[0]
print(step, dig.hexdigest(), gs)
