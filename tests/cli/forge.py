# SPDX-License-Identifier: Apache-2.0
"""Hostile files for the shell tests (no numpy needed).

  forge.py ckpt-step FILE [--meta N] [--var NAME=N]
      rewrite a safetensors checkpoint in place: the metadata's global_step (the header is
      written again, padded to a multiple of 8) and/or the value of an I64 scalar tensor.
  forge.py ckpt-nan FILE NAME
      set the first element of the F32 tensor NAME to NaN.
  forge.py idx-images FILE N ROWS COLS [MAGIC]
      an IDX images file (u8 [N, ROWS, COLS], magic 0x803 unless given) of made-up pixels.
  forge.py idx-labels FILE N [CLASSES]
      an IDX labels file (u8 [N]) of labels i % CLASSES (default 10).
"""
import json
import struct
import sys


def read_ckpt(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), bytearray(data[8 + n:])


def write_ckpt(path, header, body):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(body))


def main(argv):
    cmd = argv[1]
    if cmd == "ckpt-step":
        header, body = read_ckpt(argv[2])
        args = argv[3:]
        while args:
            opt, val = args[0], args[1]
            args = args[2:]
            if opt == "--meta":
                header["__metadata__"]["global_step"] = val
            elif opt == "--var":
                name, num = val.split("=")
                t = header[name]
                assert t["dtype"] == "I64" and t["shape"] == [], t
                b = t["data_offsets"][0]
                body[b:b + 8] = struct.pack("<q", int(num))
            else:
                raise SystemExit("forge.py: unknown option " + opt)
        write_ckpt(argv[2], header, body)
    elif cmd == "ckpt-nan":
        header, body = read_ckpt(argv[2])
        t = header[argv[3]]
        assert t["dtype"] == "F32", t
        b = t["data_offsets"][0]
        body[b:b + 4] = struct.pack("<f", float("nan"))
        write_ckpt(argv[2], header, body)
    elif cmd == "idx-images":
        n, rows, cols = int(argv[3]), int(argv[4]), int(argv[5])
        magic = int(argv[6], 0) if len(argv) > 6 else 0x803
        with open(argv[2], "wb") as f:
            f.write(struct.pack(">IIII", magic, n, rows, cols))
            f.write(bytes((i * 7) % 256 for i in range(n * rows * cols)))
    elif cmd == "idx-labels":
        n = int(argv[3])
        classes = int(argv[4]) if len(argv) > 4 else 10
        with open(argv[2], "wb") as f:
            f.write(struct.pack(">II", 0x801, n))
            f.write(bytes(i % classes for i in range(n)))
    else:
        raise SystemExit("forge.py: unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
