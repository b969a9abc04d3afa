#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# lstm_ps.sh - the paper's language-model finding (TensorFlow OSDI 2016, section 6.4 and
# figure 9) on this machine: the LSTM language model trained data-parallel (async) by R
# training tasks, its embedding and softmax sharded over 1, 2 and 4 ps tasks, every task in a
# network namespace of its own whose link to the others (a veth to one bridge) is limited by
# tbf to RATE in each direction, as a machine's NIC would be. With more ps tasks the softmax's
# bytes are spread over more links: the steps get faster; the sampled softmax moves only
# the rows a window needs.
#
#   sudo sh bench/lstm_ps.sh          (from the build tree; needs root, ip(8) and tc(8))
# Environment: RATE (tbf, default 100mbit), REPLICAS (training tasks, default 4), STEPS
# (windows per training task, default 12), VOCAB (10000), HIDDEN (64), PS_LIST ("1 2 4").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here}
top=$(cd "$build/.." && pwd)
FLOE=$top/tools/floe
rate=${RATE:-100mbit}
replicas=${REPLICAS:-4}
steps=${STEPS:-12}
vocab=${VOCAB:-10000}
hidden=${HIDDEN:-64}
ps_list=${PS_LIST:-"1 2 4"}
[ "$(id -u)" = 0 ] || { echo "lstm_ps.sh: needs root (network namespaces)" >&2; exit 1; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "lstm_ps.sh: needs ip and tc (iproute2)" >&2; exit 1; }
export FLOE_PLUGIN_PATH=${FLOE_PLUGIN_PATH:-$top/plugins/cpu/.libs:$top/plugins/transport/fabric/.libs}
export FLOE_TRANSPORT=fabric FLOE_FABRIC_PROVIDER="tcp;ofi_rxm"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-lstm-ps.XXXXXX")
net=$(( $$ % 200 + 20 ))
hub="flh$$"
maxtasks=$((replicas + 4))
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  i=0
  while [ $i -lt $maxtasks ]; do ip netns del "flt$$-$i" 2>/dev/null || true; i=$((i + 1)); done
  ip netns del "$hub" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
# The hub: a bridge; task i: a namespace with 10.79.$net.(i+1), its veth limited both ways.
ip netns add "$hub"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
i=0
while [ $i -lt $maxtasks ]; do
  ns="flt$$-$i"
  ip netns add "$ns"
  ip link add "ft$i" netns "$ns" type veth peer name "fh$i" netns "$hub"
  ip -n "$ns" addr add "10.79.$net.$((i + 1))/24" dev "ft$i"
  ip -n "$ns" link set "ft$i" up
  ip -n "$ns" link set lo up
  ip -n "$hub" link set "fh$i" master br0 up
  tc -n "$ns" qdisc add dev "ft$i" root tbf rate "$rate" burst 64kbit latency 400ms
  tc -n "$hub" qdisc add dev "fh$i" root tbf rate "$rate" burst 64kbit latency 400ms
  i=$((i + 1))
done
printf '%s' "lstm-ps-bench-secret-0123456789abcdef" >"$tmp/secret"
chmod 600 "$tmp/secret"
export FLOE_JOB_SECRET_FILE="$tmp/secret"
total=$((replicas * steps))
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "every task in its own network namespace, links limited by tbf to $rate each way;" \
  "$replicas training tasks (async), LSTM 1 x $hidden, vocab $vocab, batch 16 x 10 words," \
  "$steps windows per task, embedding and softmax sharded over the ps tasks, --threads 1"
printf '%-8s %3s %10s %11s %11s %13s %13s %11s\n' softmax ps p50_ms p90_ms words_s MB_from_ps_step MB_to_ps_step perplexity
run() { # run SOFTMAX PS ARGS...
  sm=$1 nps=$2
  shift 2
  # tasks: 0 the chief, 1..replicas-1 the workers, then the ps tasks
  w="" p=""
  i=1
  while [ $i -lt "$replicas" ]; do w="$w${w:+, }\"10.79.$net.$((i + 1)):7600\""; i=$((i + 1)); done
  k=0
  while [ $k -lt "$nps" ]; do p="$p${p:+, }\"10.79.$net.$((replicas + k + 1)):7600\""; k=$((k + 1)); done
  printf '{"cluster": {"chief": ["10.79.%s.1:7600"]%s, "ps": [%s]}}\n' "$net" \
    "${w:+, \"worker\": [$w]}" "$p" >"$tmp/spec.json"
  args="train --model lstm --cluster $tmp/spec.json --threads 1 --vocab $vocab --hidden $hidden
        --layers 1 --batch 16 --bptt 10 --steps $total --eval-windows 4 --json $*"
  pids=""
  k=0
  while [ $k -lt "$nps" ]; do
    ip netns exec "flt$$-$((replicas + k))" "$FLOE" $args --job ps --task $k >"$tmp/ps$k.out" 2>&1 &
    pids="$pids $!"
    k=$((k + 1))
  done
  i=1
  while [ $i -lt "$replicas" ]; do
    ip netns exec "flt$$-$i" "$FLOE" $args --job worker --task $((i - 1)) >"$tmp/w$i.out" 2>&1 &
    pids="$pids $!"
    i=$((i + 1))
  done
  if ip netns exec "flt$$-0" timeout 900 "$FLOE" $args --job chief --task 0 >"$tmp/chief.out" 2>"$tmp/chief.err"; then
    for q in $pids; do wait "$q" || true; done
    pids=""
    python3 - "$tmp" "$replicas" "$sm" "$nps" <<'PY'
import glob, json, re, sys
tmp, replicas, sm, nps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
d = json.loads(open(tmp + "/chief.out").read().strip().splitlines()[-1])
# words/s of every training task: the chief's JSON, the workers' epoch lines
wps = d["words_per_sec"]
for f in glob.glob(tmp + "/w*.out"):
    m = re.findall(r"words/s ([0-9.]+)", open(f).read())
    if m: wps += float(m[-1])
print("%-8s %3s %10.1f %11.1f %11.0f %13.3f %13.3f %11.1f" % (sm, nps, d["step_time_p50_ms"],
      d["step_time_p90_ms"], wps, sum(d["bytes_from_ps_per_step"]) / 1e6,
      sum(d["bytes_to_ps_per_step"]) / 1e6, d["perplexity"]))
PY
  else
    for q in $pids; do kill -9 "$q" 2>/dev/null || true; wait "$q" 2>/dev/null || true; done
    pids=""
    printf '%-8s %3s failed: %s\n' "$sm" "$nps" "$(tail -1 "$tmp/chief.err")"
  fi
}
for nps in $ps_list; do run full "$nps"; done
for nps in $ps_list; do run sampled "$nps" --sampled-softmax 64; done
