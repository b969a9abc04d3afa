#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Control flow across the tasks of a cluster: a while loop whose body runs on the workers
# and a cond whose untaken branch is on a worker, over two processes (chief + 1 worker) and
# three (chief + 2), started by floe launch; the fetches must equal the one-process run of
# the same graph without device requests, byte for byte. Over fabric, then ucx where built
# (FLOE_TRANSPORT picks one); skipped (77) without either.
set -u
each_transport=1
. "${top_srcdir}/tests/dist/common.sh"

# Control flow across tasks, in two processes (chief + 1 worker) and three (chief + 2):
# a while loop whose body runs on the workers, a cond whose untaken branch is on a worker.
python3 - "$tmp" <<'PY'
import struct, sys
for name, v in (("t", 1), ("f", 0)):
    h = "{'descr': '|b1', 'fortran_order': False, 'shape': (), }"
    h += " " * (64 - (10 + len(h) + 1) % 64) + "\n"
    open("%s/pred_%s.npy" % (sys.argv[1], name), "wb").write(
        b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + bytes([v]))
PY
for w in 1 2; do
  mkdir -p "$tmp/cf$w"
  "${top_builddir}/tests/dist/make_cluster_graphs" "$tmp/cf$w" "$w" || bad "make_cluster_graphs $w"
  for p in t f; do
    mkdir -p "$tmp/cf$w/ref_$p" "$tmp/cf$w/out_$p"
    "$FLOE" run "$tmp/cf$w/control_local.floe" --feed pred="$tmp/pred_$p.npy" --fetch acc \
      --fetch picked --out "$tmp/cf$w/ref_$p" >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; bad "control reference"; }
    if timeout 120 "$FLOE" launch --workers "$w" --provider "tcp;ofi_rxm" -- "$FLOE" run \
        "$tmp/cf$w/control.floe" --cluster env --feed pred="$tmp/pred_$p.npy" --fetch acc \
        --fetch picked --out "$tmp/cf$w/out_$p" >"$tmp/out" 2>"$tmp/err"; then
      if cmp -s "$tmp/cf$w/out_$p/acc.npy" "$tmp/cf$w/ref_$p/acc.npy" &&
         cmp -s "$tmp/cf$w/out_$p/picked.npy" "$tmp/cf$w/ref_$p/picked.npy"; then ok; else
        bad "control flow over $((w + 1)) processes (pred $p): values differ"; fi
    else
      bad "control flow over $((w + 1)) processes (pred $p)"; cat "$tmp/err"
    fi
  done
done

echo "test_cluster_control: $pass passed, $fails failed"
[ "$fails" = 0 ]
