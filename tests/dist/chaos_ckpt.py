# SPDX-License-Identifier: Apache-2.0
"""What test_chaos.sh needs to know of checkpoints on disk, in one place (no numpy):

  python3 chaos_ckpt.py latest DIR     prints "STEP PATH" of the newest committed
                                       checkpoint (docs/checkpoints.md: a file named
                                       ckpt-<10 to 19 digits>.safetensors, newest by the
                                       step in the name; its metadata must say the same
                                       step), or nothing when there is none
  python3 chaos_ckpt.py steps DIR     prints the steps of every committed checkpoint
  python3 chaos_ckpt.py at DIR STEP    prints the path of the checkpoint of STEP, or nothing
  python3 chaos_ckpt.py frozen CKPT GRAPH
                                       exit 0 when the frozen graph file GRAPH (floe train
                                       --export) holds every variable of checkpoint CKPT
                                       that it reads (a Const "<name>/read"), bit for bit:
                                       docs/graph-format.md stores a tensor's bytes as they
                                       are; else prints which not, exit 1
  python3 chaos_ckpt.py same A B       exit 0 when checkpoints A and B hold the same
                                       tensors (names, dtypes, shapes and bytes) and the
                                       same global step; else prints what differs, exit 1

Checkpoints are single safetensors files (ckpt-<step>.safetensors) or sharded ones (an index
ckpt-<step>.index.json naming each variable's parts in the files of ckpt-<step>.shards/:
docs/checkpoints.md); a variable of a sharded one is its parts assembled, and the index's
global step is its metadata's. Other formats change this file only."""
import json
import os
import re
import struct
import sys

NAME = re.compile(r"^ckpt-([0-9]{10,19})\.(safetensors|index\.json)$")
SIZE = {"F32": 4, "F64": 8, "I64": 8, "I32": 4, "BF16": 2, "F16": 2, "U8": 1, "I8": 1, "BOOL": 1}


def load_file(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return meta, tensors


def load(path):
    """(metadata, {name: (dtype, shape, bytes)}) of a checkpoint: a file, or an index whose
    variables are assembled from their parts."""
    if not path.endswith(".index.json"):
        return load_file(path)
    folder = os.path.dirname(path)
    index = json.load(open(path))
    files = {rel: load_file(os.path.join(folder, rel))[1] for rel in index["files"]}
    tensors = {}
    for name, v in index["variables"].items():
        parts = sorted(v["parts"], key=lambda q: q["offset"])
        shape = v["shape"]
        if len(parts) == 1 and list(files[parts[0]["file"]][parts[0]["tensor"]][1]) == list(shape):
            whole = files[parts[0]["file"]][parts[0]["tensor"]][2]
        else:
            ax = parts[0]["axis"]
            outer, inner = 1, SIZE[v["dtype"]]
            for x in shape[:ax]:
                outer *= x
            for x in shape[ax + 1:]:
                inner *= x
            rows = [bytearray() for _ in range(outer)]
            for q in parts:
                _, qshape, data = files[q["file"]][q["tensor"]]
                r = qshape[ax]
                for o in range(outer):
                    rows[o] += data[o * r * inner:(o + 1) * r * inner]
            whole = b"".join(bytes(x) for x in rows)
        tensors[name] = (v["dtype"], shape, whole)
    return index["metadata"], tensors


def committed(folder):
    """{step: path} of the committed checkpoints in folder (temporary files are not)."""
    out = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        m = NAME.match(name)
        if m and (m.group(2) == "index.json" or int(m.group(1)) not in out):
            out[int(m.group(1))] = os.path.join(folder, name)  # an index wins a tie
    return out


def latest(folder):
    ck = committed(folder)
    if not ck:
        return 0
    step = max(ck)
    meta, _ = load(ck[step])
    if int(meta.get("global_step", -1)) != step:
        print("%s: its metadata says global step %s" % (ck[step], meta.get("global_step")),
              file=sys.stderr)
        return 1
    print(step, ck[step])
    return 0


def same(a, b):
    ma, ta = load(a)
    mb, tb = load(b)
    bad = []
    if ma.get("global_step") != mb.get("global_step"):
        bad.append("global step %s against %s" % (ma.get("global_step"), mb.get("global_step")))
    for k in sorted(set(ta) | set(tb)):
        if k not in ta or k not in tb:
            bad.append("%s: only in %s" % (k, a if k in ta else b))
        elif ta[k][:2] != tb[k][:2]:
            bad.append("%s: %s %s against %s %s" % (k, ta[k][0], ta[k][1], tb[k][0], tb[k][1]))
        elif ta[k][2] != tb[k][2]:
            what = "bytes differ"
            if ta[k][0] == "F32":
                n = len(ta[k][2]) // 4
                x = struct.unpack("<%df" % n, ta[k][2])
                y = struct.unpack("<%df" % n, tb[k][2])
                diff = [abs(p - q) for p, q in zip(x, y) if p != q]
                what = "%d of %d values differ, by up to %g" % (len(diff), n, max(diff))
            bad.append("%s: %s" % (k, what))
    for line in bad:
        print("%s vs %s: %s" % (a, b, line))
    return 1 if bad else 0


def frozen(ckpt, graph):
    _, tensors = load(ckpt)
    with open(graph, "rb") as f:
        g = f.read()
    found, bad = 0, []
    for name, (_, _, data) in sorted(tensors.items()):
        if (name + "/read").encode() not in g:
            continue  # not in the inference graph (optimiser slots, the global step)
        found += 1
        if data not in g:
            bad.append(name)
    for name in bad:
        print("%s: the value of %s in %s is not the checkpoint's" % (graph, name, ckpt))
    if not found:
        print("%s holds none of the variables of %s" % (graph, ckpt))
    return 0 if found and not bad else 1


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "latest":
        sys.exit(latest(sys.argv[2]))
    if cmd == "steps":
        print(" ".join(str(s) for s in sorted(committed(sys.argv[2]))))
        sys.exit(0)
    if cmd == "at":
        path = committed(sys.argv[2]).get(int(sys.argv[3]))
        if path:
            print(path)
        sys.exit(0)
    if cmd == "frozen":
        sys.exit(frozen(sys.argv[2], sys.argv[3]))
    if cmd == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    sys.exit("usage: chaos_ckpt.py latest DIR | steps DIR | at DIR STEP | frozen CKPT GRAPH | same A B")
