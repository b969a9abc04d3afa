#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A cluster across network namespaces: the chief in one, worker 0 in another, joined by a
# veth pair (10.77.N.1 and 10.77.N.2), so every byte crosses a real (virtual) link rather
# than loopback; then the same with the link limited by tbf (20 Mbit/s), a large tensor
# still arriving whole. The data plane binds each task's own address (fabric tcp). Needs
# root and ip(8); otherwise skipped (exit 77) with the reason.
set -u
FLOE="${top_builddir}/tools/floe"
# the CPU plugin and the transports (make check names their folders)
FLOE_PLUGIN_PATH="${FLOE_PLUGIN_PATH:+$FLOE_PLUGIN_PATH:}${FLOE_TRANSPORT_DIR:-}:${FLOE_FABRIC_DIR:-}"
export FLOE_PLUGIN_PATH
NPY="${top_srcdir}/tests/cli/npy.py"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "SKIP: no ip(8) (iproute2)"; exit 77; }
[ -e "${top_builddir}/plugins/transport/fabric/.libs/floe-transport-fabric.so" ] ||
  { echo "SKIP: the fabric transport was not built"; exit 77; }
n=$(( $$ % 200 + 20 ))
a="floe-a$$"; b="floe-b$$"
tmp=$(mktemp -d)
spid=""
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip link add "va$n" netns "$a" type veth peer name "vb$n" netns "$b" || { echo "SKIP: no veth"; exit 77; }
ip -n "$a" addr add "10.77.$n.1/24" dev "va$n"; ip -n "$b" addr add "10.77.$n.2/24" dev "vb$n"
ip -n "$a" link set "va$n" up; ip -n "$b" link set "vb$n" up
ip -n "$a" link set lo up; ip -n "$b" link set lo up
fails=0; pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }

"${top_builddir}/tests/dist/make_cluster_graphs" "$tmp" 1 || { echo "FAIL: make_cluster_graphs"; exit 1; }
python3 "$NPY" write "$tmp/x.npy" 2,3 1,2,3,-1,0.5,4
mkdir -p "$tmp/ref" "$tmp/out"
"$FLOE" run "$tmp/big_local.floe" --fetch s --out "$tmp/ref" >/dev/null 2>&1 || bad "reference"
printf '%s' "netns-test-secret-0123456789abcdef" >"$tmp/secret"; chmod 600 "$tmp/secret"
cat >"$tmp/c.json" <<JSON
{"cluster": {"chief": ["10.77.$n.1:7470"], "worker": ["10.77.$n.2:7471"]}}
JSON
export FLOE_JOB_SECRET_FILE="$tmp/secret" FLOE_TRANSPORT=fabric FLOE_FABRIC_PROVIDER="tcp;ofi_rxm"

run_once() { # run_once LABEL: one worker server in b, the chief in a; the big graph
  ip netns exec "$b" "$FLOE" server --cluster "$tmp/c.json" --job worker --task 0 \
    >"$tmp/srv.out" 2>"$tmp/srv.err" &
  spid=$!
  i=0; while [ $i -lt 100 ] && ! grep -q ready "$tmp/srv.out" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
  t0=$(date +%s.%N)
  if ip netns exec "$a" timeout 120 "$FLOE" run "$tmp/big.floe" --cluster "$tmp/c.json" \
      --job chief --task 0 --fetch s --out "$tmp/out" >/dev/null 2>"$tmp/err"; then
    t1=$(date +%s.%N)
    if cmp -s "$tmp/out/s.npy" "$tmp/ref/s.npy"; then ok; else bad "$1: value differs"; fi
    echo "$1: $(awk -v a="$t0" -v b="$t1" "BEGIN{printf \"%.2f\", b - a}") s"
  else
    bad "$1: the run failed"; cat "$tmp/err" "$tmp/srv.err"
  fi
  kill -TERM "$spid"; wait "$spid"; spid=""
  # the worker listened only on its own address
  if grep -q "ready at 10.77.$n.2:7471" "$tmp/srv.out"; then ok; else bad "$1: ready line"; cat "$tmp/srv.out"; fi
}
run_once "veth"
if tc -n "$a" qdisc add dev "va$n" root tbf rate 20mbit burst 32kbit latency 400ms 2>/dev/null &&
   tc -n "$b" qdisc add dev "vb$n" root tbf rate 20mbit burst 32kbit latency 400ms 2>/dev/null; then
  run_once "veth + tbf 20 Mbit/s"
else
  echo "note: tbf not available here; the limited-link case was not run"
fi
echo "test_netns: $pass passed, $fails failed"
[ "$fails" = 0 ]
