# SPDX-License-Identifier: Apache-2.0
"""Tiny .npy writer/reader for the shell tests (no numpy needed): f32 only."""
import struct
import sys


def write(path, shape, values):
    shape_txt = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape_txt
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def read(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", "not npy"
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode()
    assert "'<f4'" in header, header
    body = data[10 + hlen:]
    return list(struct.unpack("<%df" % (len(body) // 4), body))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        shape = [int(d) for d in sys.argv[3].split(",") if d]
        write(sys.argv[2], shape, [float(v) for v in sys.argv[4].split(",")])
    else:
        print(" ".join("%g" % v for v in read(sys.argv[2])))
