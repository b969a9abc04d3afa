#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# kill -9 of a task in the middle of steps: floe run (the chief, timing steps back to back)
# fails within the heartbeat timeout plus 1 s with UNAVAILABLE naming the task and saying
# what to do; the other worker keeps serving; a task restarted in its place (a new
# incarnation) joins a new session that runs; a task that hangs (SIGSTOP) is found by the
# heartbeats within the same bound. Over fabric tcp, then ucx where built (FLOE_TRANSPORT
# picks one); skipped (77) without either.
set -u
each_transport=1
. "${top_srcdir}/tests/dist/common.sh"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

"${top_builddir}/tests/dist/make_cluster_graphs" "$tmp" 2 || { echo "FAIL: make_cluster_graphs"; exit 1; }
printf '%s' "kill-test-secret-0123456789abcdef" >"$tmp/secret"; chmod 600 "$tmp/secret"
export FLOE_JOB_SECRET_FILE="$tmp/secret"
cat >"$tmp/c.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "worker": ["127.0.0.1:$(port)", "127.0.0.1:$(port)"]}}
JSON
server() { # server N: worker N in the background, its pid in $spid
  "$FLOE" server --cluster "$tmp/c.json" --job worker --task "$1" >"$tmp/w$1.out" 2>"$tmp/w$1.err" &
  spid=$!
  pids="$pids $spid"
  i=0; while [ $i -lt 100 ] && ! grep -q ready "$tmp/w$1.out" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
}
server 0; w0=$spid
server 1; w1=$spid

# The chief times steps for up to 60 s; worker 1 is killed once steps are running.
"$FLOE" run "$tmp/big.floe" --cluster "$tmp/c.json" --job chief --task 0 --fetch s --perf \
  --duration 60 --heartbeat-timeout 1 >"$tmp/chief.out" 2>"$tmp/chief.err" &
cpid=$!
pids="$pids $cpid"
sleep 3
kill -9 "$w1"
t0=$(now)
i=0; while [ $i -lt 300 ] && kill -0 "$cpid" 2>/dev/null; do sleep 0.02; i=$((i+1)); done
t1=$(now)
if kill -0 "$cpid" 2>/dev/null; then
  bad "the chief still runs 6 s after worker 1 was killed"; kill -9 "$cpid"
else
  wait "$cpid"; rc=$?
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
  echo "chief ended $took s after kill -9 of worker 1 (exit $rc)"
  if [ "$rc" != 0 ] && grep -qi unavailable "$tmp/chief.err" && grep -q '/job:worker/task:1' "$tmp/chief.err"; then ok; else
    bad "the chief's error: exit $rc, expected "unavailable" naming /job:worker/task:1"; cat "$tmp/chief.err"; fi
  if grep -q 'create a new session' "$tmp/chief.err"; then ok; else bad "the error does not say what to do"; cat "$tmp/chief.err"; fi
  if awk -v t="$took" 'BEGIN{exit !(t <= 2.0)}'; then ok; else bad "took $took s (heartbeat 1 s + 1 s)"; fi
fi
if kill -0 "$w0" 2>/dev/null; then ok; else bad "worker 0 died with worker 1"; cat "$tmp/w0.err"; fi

# Worker 1 again (a new incarnation): a new session over both workers runs.
server 1
mkdir -p "$tmp/out" "$tmp/ref"
"$FLOE" run "$tmp/big_local.floe" --fetch s --out "$tmp/ref" >/dev/null 2>&1
if timeout 60 "$FLOE" run "$tmp/big.floe" --cluster "$tmp/c.json" --job chief --task 0 --fetch s \
    --out "$tmp/out" >/dev/null 2>"$tmp/err" && cmp -s "$tmp/out/s.npy" "$tmp/ref/s.npy"; then ok; else
  bad "a new session after the restart"; cat "$tmp/err"; fi

# A task that hangs (SIGSTOP: its sockets stay open, it answers nothing) is found by the
# heartbeats: the chief fails within the timeout plus 1 s, naming it.
w1=$spid
"$FLOE" run "$tmp/big.floe" --cluster "$tmp/c.json" --job chief --task 0 --fetch s --perf \
  --duration 60 --heartbeat-timeout 1 >"$tmp/chief.out" 2>"$tmp/chief.err" &
cpid=$!
pids="$pids $cpid"
sleep 3
kill -STOP "$w1"
t0=$(now)
i=0; while [ $i -lt 300 ] && kill -0 "$cpid" 2>/dev/null; do sleep 0.02; i=$((i+1)); done
t1=$(now)
kill -CONT "$w1"
if kill -0 "$cpid" 2>/dev/null; then
  bad "the chief still runs 6 s after worker 1 hung"; kill -9 "$cpid"
else
  wait "$cpid"; rc=$?
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
  echo "chief ended $took s after worker 1 hung (exit $rc)"
  if [ "$rc" != 0 ] && grep -qi unavailable "$tmp/chief.err" && grep -q '/job:worker/task:1' "$tmp/chief.err"; then ok; else
    bad "hung worker: exit $rc"; cat "$tmp/chief.err"; fi
  if awk -v t="$took" 'BEGIN{exit !(t <= 2.0)}'; then ok; else bad "hung worker: took $took s (heartbeat 1 s + 1 s)"; cat "$tmp/chief.err"; fi
fi

echo "test_cluster_kill: $pass passed, $fails failed"
[ "$fails" = 0 ]
