#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One graph across the tasks of a cluster on this machine: floe launch starts the servers
# (worker and ps tasks) and runs `floe run --cluster env` as the chief; its fetched values
# must equal the one-process run of the same graph without device requests, byte for byte
# (every op here is exact in f32 on both sides), over fabric's tcp;ofi_rxm and shm, and over
# ucx's tcp where that plugin was built (the local transport stays inside one process:
# dist/test_cluster_inproc covers it). Then floe server alone: its ready line, SIGTERM, a
# wrong secret. Skipped (77) without the fabric transport.
set -u
. "${top_srcdir}/tests/dist/common.sh"

"${top_builddir}/tests/dist/make_cluster_graphs" "$tmp" 2 || { echo "FAIL: make_cluster_graphs"; exit 1; }
python3 "$NPY" write "$tmp/x.npy" 2,3 1,2,3,-1,0.5,4
export FLOE_LOG_LEVEL=${FLOE_LOG_LEVEL:-}

# The reference: one process.
mkdir -p "$tmp/ref" "$tmp/ref_big"
"$FLOE" run "$tmp/chain_local.floe" --feed x="$tmp/x.npy" --fetch y --fetch z --out "$tmp/ref" \
  >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; bad "reference run"; }
"$FLOE" run "$tmp/big_local.floe" --fetch s --out "$tmp/ref_big" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; bad "reference run (big)"; }

transports="fabric:tcp;ofi_rxm fabric:shm"
# The ucx transport too where it was built (its transports by FLOE_UCX_TLS).
[ -e "${top_builddir}/plugins/transport/ucx/.libs/floe-transport-ucx.so" ] &&
  transports="$transports ucx:tcp"
for tr in $transports; do
  name=${tr%%:*}
  args="--transport $name"
  prov=${tr#*:}
  if [ "$name" = ucx ]; then
    export FLOE_UCX_TLS="$prov"
    set --
  else
    set -- --provider "$prov"
  fi
  out="$tmp/out_$(echo "$tr" | tr -c 'a-z0-9\n' _)"
  mkdir -p "$out"
  echo "# chain over $tr"
  if timeout 120 "$FLOE" launch --workers 2 --ps 1 $args "$@" -- \
      "$FLOE" run "$tmp/chain.floe" --cluster env --feed x="$tmp/x.npy" --fetch y --fetch z \
      --out "$out" >"$tmp/out" 2>"$tmp/err"; then
    if cmp -s "$out/y.npy" "$tmp/ref/y.npy" && cmp -s "$out/z.npy" "$tmp/ref/z.npy"; then ok; else
      bad "chain over $tr: values differ from one process"
      python3 "$NPY" read "$out/y.npy"; python3 "$NPY" read "$tmp/ref/y.npy"; fi
  else
    bad "chain over $tr (exit $?)"; cat "$tmp/err"
  fi
  if timeout 120 "$FLOE" launch --workers 2 $args "$@" -- \
      "$FLOE" run "$tmp/big.floe" --cluster env --fetch s --out "$out" >"$tmp/out" 2>"$tmp/err"; then
    if cmp -s "$out/s.npy" "$tmp/ref_big/s.npy"; then ok; else bad "big over $tr: values differ"; fi
  else
    bad "big over $tr (exit $?)"; cat "$tmp/err"
  fi
done

# A device of no task: the error names the device and the cluster's devices.
if timeout 120 "$FLOE" launch --workers 1 -- "$FLOE" run "$tmp/chain.floe" --cluster env \
    --feed x="$tmp/x.npy" --fetch y >"$tmp/out" 2>"$tmp/err"; then
  bad "a graph asking for /job:worker/task:1 and /job:ps/task:0 ran on 1 worker, no ps"
elif grep -q 'job:ps' "$tmp/err" || grep -q 'task:1' "$tmp/err"; then ok; else
  bad "missing task: message lacks the device"; cat "$tmp/err"; fi

# floe server alone: one ready line naming its task and address; SIGTERM ends it (0).
printf '%s' "0123456789abcdef0123456789abcdef" >"$tmp/secret"
chmod 600 "$tmp/secret"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
port2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$tmp/c.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$port2"], "worker": ["127.0.0.1:$port"]}}
JSON
FLOE_JOB_SECRET_FILE="$tmp/secret" "$FLOE" server --cluster "$tmp/c.json" --job worker --task 0 \
  >"$tmp/srv.out" 2>"$tmp/srv.err" &
spid=$!
pids="$pids $spid"
i=0
while [ $i -lt 100 ] && ! grep -q ready "$tmp/srv.out" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
if grep -q "floe server: /job:worker/replica:0/task:0 ready at 127.0.0.1:$port" "$tmp/srv.out"; then ok; else
  bad "floe server's ready line"; cat "$tmp/srv.out" "$tmp/srv.err"; fi
# listening on exactly its address (its transport endpoint aside, which is not TCP-listening
# on the control port)
if command -v ss >/dev/null 2>&1; then
  if ss -ltnH "sport = :$port" | grep -q "127.0.0.1:$port"; then ok; else bad "not listening on 127.0.0.1:$port"; fi
fi
# A chief with the wrong secret is refused and logged; the server keeps serving.
printf '%s' "ffffffffffffffffffffffffffffffff" >"$tmp/wrong"
chmod 600 "$tmp/wrong"
FLOE_JOB_SECRET_FILE="$tmp/wrong" timeout 60 "$FLOE" run "$tmp/chain.floe" --cluster "$tmp/c.json" \
  --job chief --task 0 --feed x="$tmp/x.npy" --fetch y >"$tmp/out" 2>"$tmp/err" &
cpid=$!
sleep 3
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
if grep -qi 'secret\|proof\|refused' "$tmp/srv.err"; then ok; else bad "wrong secret not logged by the server"; cat "$tmp/srv.err"; fi
if kill -0 "$spid" 2>/dev/null; then ok; else bad "server died after a bad peer"; fi
kill -TERM "$spid"
i=0
while [ $i -lt 100 ] && kill -0 "$spid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
if kill -0 "$spid" 2>/dev/null; then bad "floe server still running 10 s after SIGTERM"; else
  wait "$spid"; rc=$?
  if [ "$rc" = 0 ]; then ok; else bad "floe server exited $rc after SIGTERM"; fi
fi

echo "test_cluster: $pass passed, $fails failed"
[ "$fails" = 0 ]
