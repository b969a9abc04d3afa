#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# transport.sh - the fabric transport against libfabric alone, side by side in one run:
# bench/raw_fabric (own blocking libfabric program) and bench/bench_transport (the same
# ping-pong and stream through the plugin's FloeTransportFns), for tcp;ofi_rxm and shm,
# interleaved ROUNDS times (default 2) and the best of each kept (the machine is shared).
# Prints one-way latency (us) up to 64 KiB and bandwidth (GB/s) from 1 MiB up, with the
# ratios floe/raw; then the core's transport manager against the plugin's own loopback pair
# in one process (bench_transport --manager).
#
#   sh bench/transport.sh [PROVIDER...]      (from the build tree; default: tcp;ofi_rxm shm)
#
# Both programs run with the libfabric settings the plugin makes for itself
# (FI_OFI_RXM_ENABLE_DYN_RBUF=0, FI_OFI_RXM_CM_PROGRESS_INTERVAL=0: see
# plugins/transport/README.md), so the comparison is of the same libfabric configuration.
# MAX_BYTES (default 64 MiB) bounds the sizes; RAW=1 leaves out the manager table.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here}
rounds=${ROUNDS:-2}
max=${MAX_BYTES:-67108864}
[ $# -gt 0 ] || set -- "tcp;ofi_rxm" shm
make -s -C "$build" raw_fabric bench_transport >/dev/null
export FI_OFI_RXM_ENABLE_DYN_RBUF=${FI_OFI_RXM_ENABLE_DYN_RBUF:-0}
export FI_OFI_RXM_CM_PROGRESS_INTERVAL=${FI_OFI_RXM_CM_PROGRESS_INTERVAL:-0}
out=$(mktemp "${TMPDIR:-/tmp}/floe-transport.XXXXXX")
trap 'rm -f "$out"' EXIT INT TERM

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), libfabric $(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p')"
for prov in "$@"; do
  r=0
  while [ "$r" -lt "$rounds" ]; do
    "$build/raw_fabric" "$prov" "$max" >>"$out" 2>/dev/null
    "$build/bench_transport" "$prov" "$max" >>"$out" 2>/dev/null
    r=$((r + 1))
  done
  if [ "${RAW:-0}" != 1 ]; then
    "$build/bench_transport" --manager "$prov" "$max" >>"$out" 2>/dev/null || true
  fi
done

# Best of the rounds per (impl, provider, kind, size): lowest latency, highest bandwidth.
awk -v provs="$*" '
function human(b) {
  if (b >= 1048576) return sprintf("%d MiB", b / 1048576)
  if (b >= 1024) return sprintf("%d KiB", b / 1024)
  return sprintf("%d B", b)
}
{
  k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
  if (!(k in best) || ($3 == "lat" && $5 < best[k]) || ($3 == "bw" && $5 > best[k])) best[k] = $5
  sizes[$4] = 1
}
function table(prov, a, b, la, lb,    s, n, i, j, t, x, y) {
  n = 0
  for (s in sizes) list[++n] = s + 0
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) { t = list[i]; list[i] = list[j]; list[j] = t }
  printf "\n%s: one-way latency (us)\n%-8s %10s %10s %8s\n", prov, "size", la, lb, lb "/" la
  for (i = 1; i <= n; i++) {
    x = best[a, prov, "lat", list[i]]; y = best[b, prov, "lat", list[i]]
    if (x != "" && y != "") printf "%-8s %10.2f %10.2f %8.2f\n", human(list[i]), x, y, y / x
  }
  printf "%s: bandwidth (GB/s)\n%-8s %10s %10s %8s\n", prov, "size", la, lb, lb "/" la
  for (i = 1; i <= n; i++) {
    if (list[i] < 1048576) continue
    x = best[a, prov, "bw", list[i]]; y = best[b, prov, "bw", list[i]]
    if (x != "" && y != "") printf "%-8s %10.3f %10.3f %8.2f\n", human(list[i]), x, y, y / x
  }
}
END {
  np = split(provs, p, " ")
  # provider names hold no spaces except none; "tcp;ofi_rxm" is one word
  for (i = 1; i <= np; i++) {
    prov = p[i]
    if (prov == "tcp;ofi_rxm" || prov == "tcp") name = "tcp;ofi_rxm"; else name = prov
    table(name, "raw", "floe", "raw", "floe")
  }
  for (i = 1; i <= np; i++) {
    prov = p[i]
    if (prov == "tcp;ofi_rxm" || prov == "tcp") name = "tcp;ofi_rxm"; else name = prov
    if (("loop-plugin", name, "lat", 4) in best) {
      printf "\n(one process, loopback: send posted to receive completed)"
      table(name, "loop-plugin", "loop-manager", "plugin", "manager")
    }
  }
}' "$out"
