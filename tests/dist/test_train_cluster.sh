#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe train across processes (between-graph replication), over fabric tcp:
#  - floe launch --every-task: chief + 1 worker + 2 ps (greedy): every global batch trained
#    once (global step = batches per epoch x epochs), test accuracy within 0.02 of one
#    process on the same data, the variables' bytes per ps as the layer sizes give them, and
#    what each step moves to and from the ps tasks equal to the model's bytes (+ < 1 KiB of
#    scalars); the chief's and the worker's JSON lines split their steps (step_split_ms);
#  - sync, chief + worker: test accuracy within 0.01 of one process training on their two
#    batches as one (batch 128), 157 global steps, nothing stale;
#  - sync with a backup (3 training tasks, 2 gradients per step) and a straggler injected
#    (FLOE_TEST_STEP_DELAY_MEAN_MS, 400 ms): the chief's median step stays under half the
#    straggler's delay, and stale gradients are dropped and counted;
#  - round-robin placement, and a run stopped after epoch 1 resumed on the cluster from its
#    checkpoint to the same global step as one that ran through, async (47, then 94) and
#    sync (2 batches a global step: 23, then 47), and resumed once more at its end (47:
#    nothing more trained);
#  - kill -9 of the ps, then of the worker, mid-training: the chief fails within the
#    heartbeat timeout plus 2 s with UNAVAILABLE naming the task;
#  - the cnn, async, chief + worker + 1 ps, 1,280 examples: every batch once (global step 20),
#    and it learns (test accuracy above 0.4 after 20 batches, 0.1 being chance);
#  - allreduce (no ps): chief + worker train like one process on batches of 128, sending
#    the gradients' bytes to each other once a step;
#  - refusals: cluster options without --cluster, a cluster without a ps job, allreduce with
#    a ps job, --fusion-bytes without allreduce.
# Skipped (77) without the fabric transport or Fashion-MNIST.
set -u
. "${top_srcdir}/tests/dist/common.sh"
DATA=/usr/share/datasets/fashion-mnist
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
  { echo "SKIP: Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)"; exit 77; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); v=d[sys.argv[1]]; print(json.dumps(v) if isinstance(v,list) else v)' "$1"; }
TRAIN="train --threads 1 --data $DATA"

# mlp 784-512-256-10: its parameters' bytes, and Adam's three copies (variable, m, v).
K1=$((784*512*4)); REST=$(((512 + 512*256 + 256 + 256*10 + 10)*4)); PARAMS=$((K1 + REST))

# ---- async, chief + worker + 2 ps (greedy), against one process -------------------------
"$FLOE" $TRAIN --limit 10000 --epochs 2 --input feed --json >"$tmp/one.out" 2>"$tmp/one.err" ||
  { bad "one process: $(cat "$tmp/one.err")"; }
if timeout 300 "$FLOE" launch --workers 1 --ps 2 --every-task -- "$FLOE" $TRAIN --cluster env \
    --limit 10000 --epochs 2 --ps-strategy greedy --json >"$tmp/async.out" 2>"$tmp/async.err"; then
  gs=$(field global_step <"$tmp/async.out")
  if [ "$gs" = 314 ]; then ok; else bad "global step $gs, expected 2 x 157 batches"; fi
  a1=$(field test_accuracy <"$tmp/one.out"); a2=$(field test_accuracy <"$tmp/async.out")
  echo "test accuracy: one process $a1, async chief + 1 worker $a2"
  if awk -v a="$a1" -v b="$a2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 0.02)}'; then ok; else
    bad "async accuracy $a2 is not within 0.02 of one process's $a1"; fi
  pb=$(field ps_variable_bytes <"$tmp/async.out")
  # greedy: dense1/kernel's group (3 x K1) on ps 0, everything else (3 x REST + the global
  # step's 8 bytes) on ps 1
  if [ "$pb" = "[$((3*K1)), $((3*REST + 8))]" ]; then ok; else bad "greedy placement: $pb"; fi
  cat >"$tmp/bytes.py" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); p = int(sys.argv[2])
to, fr = sum(d["bytes_to_ps_per_step"]), sum(d["bytes_from_ps_per_step"])
print("per step: %.0f bytes to the ps tasks, %.0f from them; the parameters: %d" % (to, fr, p))
sys.exit(0 if p <= to <= p + 1024 and p <= fr <= p + 1024 else 1)
PY
  if python3 "$tmp/bytes.py" "$tmp/async.out" "$PARAMS"; then ok; else bad "bytes per step to/from the ps tasks"; fi
  # Every training task's line (the worker's on launch's stderr) splits its steps: 156 of its
  # 157 (the first left out), the three parts adding up to the step, compute holding the
  # compute kernels, some wait for the ps tasks' values.
  cat >"$tmp/split.py" <<'PY'
import json, sys
lines = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith('{"model"')]
tasks = sorted(d["cluster_task"] for d in lines)
print("step splits of", tasks)
assert tasks == ["/job:chief/replica:0/task:0", "/job:worker/replica:0/task:0"], tasks
for d in lines:
    s = d["step_split_ms"]
    print("%s: %d steps, %.2f ms = compute %.2f + wait_params %.2f + send_grads %.2f (kernels "
          "%.2f, tracing %.2f)" % (d["cluster_task"], s["steps"], s["wall"], s["compute"],
          s["wait_params"], s["send_grads"], s["kernels"], s["tracing"]))
    assert s["steps"] == d["steps"] - 1 == 156, (s["steps"], d["steps"])
    assert abs(s["compute"] + s["wait_params"] + s["send_grads"] - s["wall"]) < 1e-3 * s["wall"]
    assert 0 < s["kernels"] <= s["compute"] and s["wait_params"] > 0 and s["send_grads"] > 0
PY
  if python3 "$tmp/split.py" "$tmp/async.out" "$tmp/async.err"; then ok; else bad "the step splits"; fi
else
  bad "floe launch --every-task: $(tail -5 "$tmp/async.err")"
fi

# ---- sync, chief + worker, against one process with their two batches as one ------------
# Each global step averages the gradients of batches 2i and 2i+1 of 64: one batch of 128.
"$FLOE" $TRAIN --limit 10000 --epochs 2 --input feed --batch 128 --json >"$tmp/one128.out" 2>&1 ||
  bad "one process, batch 128"
if timeout 300 "$FLOE" launch --workers 1 --ps 1 --every-task -- "$FLOE" $TRAIN --cluster env \
    --replication sync --limit 10000 --epochs 2 --json >"$tmp/sync.out" 2>"$tmp/sync.err"; then
  a1=$(field test_accuracy <"$tmp/one128.out"); a2=$(field test_accuracy <"$tmp/sync.out")
  echo "test accuracy: one process (batch 128) $a1, sync chief + 1 worker (2 x 64) $a2"
  if awk -v a="$a1" -v b="$a2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 0.01)}'; then ok; else
    bad "sync accuracy $a2 is not within 0.01 of one process's $a1"; fi
  # 2 x 157 batches of 64 make 157 global steps; no replica is a backup, nothing is stale
  if [ "$(field global_step <"$tmp/sync.out")" = 157 ] &&
     [ "$(field stale_gradients_dropped <"$tmp/sync.out")" = 0 ]; then ok; else
    bad "sync: global step $(field global_step <"$tmp/sync.out"), stale $(field stale_gradients_dropped <"$tmp/sync.out")"; fi
else
  bad "sync: $(tail -5 "$tmp/sync.err")"
fi

# ---- allreduce, chief + worker, no ps: the same as sync's batch of 128 ----------------------
# Every task holds the variables; each step averages both tasks' gradients with one fused
# all-reduce (the ring), so it trains like one process on batches of 128, and each task
# sends its ring neighbour 2(n-1)/n of the gradients' bytes: all of them for two tasks.
if timeout 300 "$FLOE" launch --workers 1 --every-task -- "$FLOE" $TRAIN --cluster env \
    --replication allreduce --limit 10000 --epochs 2 --json >"$tmp/ar.out" 2>"$tmp/ar.err"; then
  a1=$(field test_accuracy <"$tmp/one128.out"); a2=$(field test_accuracy <"$tmp/ar.out")
  echo "test accuracy: one process (batch 128) $a1, allreduce chief + 1 worker (2 x 64) $a2"
  if awk -v a="$a1" -v b="$a2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 0.01)}'; then ok; else
    bad "allreduce accuracy $a2 is not within 0.01 of one process's $a1"; fi
  if [ "$(field global_step <"$tmp/ar.out")" = 157 ]; then ok; else
    bad "allreduce: global step $(field global_step <"$tmp/ar.out"), expected 157"; fi
  cat >"$tmp/peers.py" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); p = int(sys.argv[2])
to = d["bytes_to_peers_per_step"]
print("allreduce: %.0f bytes a step to the other task; the gradients: %d; fusion %d, %s" %
      (to, p, d["fusion_bytes"], d["collective"]))
sys.exit(0 if p <= to <= p + 1024 and d["ps_tasks"] == 0 else 1)
PY
  if python3 "$tmp/peers.py" "$tmp/ar.out" "$PARAMS"; then ok; else bad "allreduce bytes per step"; fi
else
  bad "allreduce: $(tail -5 "$tmp/ar.err")"
fi

# ---- sync with a backup: a straggling worker never holds a step --------------------------
# Chief + 2 workers, 2 gradients per step; worker 1 sleeps 400 ms (mean, exponential) before
# each step. With the backup the others go on without it: the chief's median step stays far
# below the straggler's delay (a step that waited would take at least that: without a backup
# the median is the delay's, bench/replication.sh), and the straggler's late gradients are
# dropped and counted.
if FLOE_TEST_STEP_DELAY_MEAN_MS=400 FLOE_TEST_STEP_DELAY_TASK=/job:worker/task:1 timeout 300 \
    "$FLOE" launch --workers 2 --ps 1 --every-task -- "$FLOE" $TRAIN --cluster env \
    --replication sync --replicas-to-aggregate 2 --limit 3000 --epochs 1 --json \
    >"$tmp/backup.out" 2>"$tmp/backup.err"; then
  p50=$(field step_time_p50_ms <"$tmp/backup.out"); stale=$(field stale_gradients_dropped <"$tmp/backup.out")
  echo "backup: the chief's median step $p50 ms (the straggler sleeps 400 ms on average); stale gradients dropped: $stale"
  if awk -v p="$p50" 'BEGIN{exit !(p < 200)}' && [ "$stale" -ge 1 ]; then ok; else
    bad "a straggler held sync steps despite a backup"; fi
else
  bad "sync with a backup: $(tail -5 "$tmp/backup.err")"
fi

# ---- round-robin; stopped after epoch 1, resumed on the cluster --------------------------
ck="$tmp/ckpt"
timeout 300 "$FLOE" launch --workers 1 --ps 2 --every-task -- "$FLOE" $TRAIN --cluster env \
  --limit 3000 --epochs 2 --stop-after 1 --checkpoint-dir "$ck" --json >"$tmp/r1.out" 2>"$tmp/r1.err" ||
  bad "the first half: $(tail -5 "$tmp/r1.err")"
pb=$(field ps_variable_bytes <"$tmp/r1.out" 2>/dev/null)
# round-robin over groups in order: the kernels (and the global step) on ps 0, biases on ps 1
if [ "$pb" = "[$((3*(784*512 + 512*256 + 256*10)*4 + 8)), $((3*(512 + 256 + 10)*4))]" ]; then ok; else
  bad "round-robin placement: $pb"; fi
if [ "$(field global_step <"$tmp/r1.out" 2>/dev/null)" = 47 ]; then ok; else bad "first half's global step"; fi
timeout 300 "$FLOE" launch --workers 1 --ps 2 --every-task -- "$FLOE" $TRAIN --cluster env \
  --limit 3000 --epochs 2 --checkpoint-dir "$ck" --resume --json >"$tmp/r2.out" 2>"$tmp/r2.err" ||
  bad "the resumed half: $(tail -5 "$tmp/r2.err")"
if grep -q "resumed from .* at global step 47" "$tmp/r2.out" &&
   [ "$(field global_step <"$tmp/r2.out" 2>/dev/null)" = 94 ]; then ok; else
  bad "resume on the cluster"; cat "$tmp/r2.out" "$tmp/r2.err"; fi

# the same under sync replication: 2 batches a global step, 23 after the first epoch's 47
ck2="$tmp/ckpt_sync"
timeout 300 "$FLOE" launch --workers 1 --ps 1 --every-task -- "$FLOE" $TRAIN --cluster env \
  --replication sync --limit 3000 --epochs 2 --stop-after 1 --checkpoint-dir "$ck2" --json \
  >"$tmp/s1.out" 2>"$tmp/s1.err" || bad "sync, the first half: $(tail -5 "$tmp/s1.err")"
timeout 300 "$FLOE" launch --workers 1 --ps 1 --every-task -- "$FLOE" $TRAIN --cluster env \
  --replication sync --limit 3000 --epochs 2 --checkpoint-dir "$ck2" --resume --json \
  >"$tmp/s2.out" 2>"$tmp/s2.err" || bad "sync, the resumed half: $(tail -5 "$tmp/s2.err")"
if [ "$(field global_step <"$tmp/s1.out" 2>/dev/null)" = 23 ] &&
   grep -q "resumed from .* at global step 23" "$tmp/s2.out" &&
   [ "$(field global_step <"$tmp/s2.out" 2>/dev/null)" = 47 ]; then ok; else
  bad "sync resume on the cluster"; cat "$tmp/s1.out" "$tmp/s2.out"; fi
# resumed again from its last checkpoint: nothing is left, and no task takes a step past it
timeout 300 "$FLOE" launch --workers 1 --ps 1 --every-task -- "$FLOE" $TRAIN --cluster env \
  --replication sync --limit 3000 --epochs 2 --checkpoint-dir "$ck2" --resume --json \
  >"$tmp/s3.out" 2>"$tmp/s3.err" || bad "sync, resumed at the end: $(tail -5 "$tmp/s3.err")"
if grep -q "resumed from .* at global step 47" "$tmp/s3.out" &&
   [ "$(field global_step <"$tmp/s3.out" 2>/dev/null)" = 47 ]; then ok; else
  bad "sync resumed at the end went on to global step $(field global_step <"$tmp/s3.out" 2>/dev/null)"; fi

# ---- kill -9 of a ps, then of a worker, mid-training -------------------------------------
printf '%s' "train-cluster-secret-0123456789ab" >"$tmp/secret"; chmod 600 "$tmp/secret"
export FLOE_JOB_SECRET_FILE="$tmp/secret"
killed_run() { # killed_run JOB: chief, worker 0 and ps 0 train; JOB's task 0 is killed
  cat >"$tmp/c.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "worker": ["127.0.0.1:$(port)"], "ps": ["127.0.0.1:$(port)"]}}
JSON
  for t in ps worker chief; do
    "$FLOE" $TRAIN --limit 20000 --epochs 50 --cluster "$tmp/c.json" --job $t --task 0 \
      --heartbeat-timeout 1 >"$tmp/$t.out" 2>"$tmp/$t.err" &
    eval "p_$t=$!"; pids="$pids $!"
  done
  # the chief prints "on a cluster" once the variables are initialised: steps follow
  i=0; while [ $i -lt 300 ] && ! grep -q "on a cluster" "$tmp/chief.out" 2>/dev/null; do
    sleep 0.1; i=$((i+1)); done
  sleep 2
  eval "victim=\$p_$1"
  kill -9 "$victim"
  t0=$(now)
  i=0; while [ $i -lt 300 ] && kill -0 "$p_chief" 2>/dev/null; do sleep 0.02; i=$((i+1)); done
  t1=$(now)
  if kill -0 "$p_chief" 2>/dev/null; then
    bad "the chief still trains 6 s after kill -9 of /job:$1/task:0"
  else
    wait "$p_chief"; rc=$?
    took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
    echo "the chief ended $took s after kill -9 of /job:$1/task:0 (exit $rc)"
    if [ "$rc" != 0 ] && grep -qi unavailable "$tmp/chief.err" && grep -q "/job:$1/task:0" "$tmp/chief.err"; then ok; else
      bad "kill -9 of /job:$1/task:0: exit $rc"; cat "$tmp/chief.err"; fi
    if awk -v t="$took" 'BEGIN{exit !(t <= 3.0)}'; then ok; else bad "took $took s (heartbeat 1 s + 2 s)"; fi
  fi
  for p in $p_ps $p_worker $p_chief; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}
killed_run ps
killed_run worker

# ---- the cnn ----------------------------------------------------------------------------
if timeout 300 "$FLOE" launch --workers 1 --ps 1 --every-task -- "$FLOE" $TRAIN --model cnn \
    --cluster env --limit 1280 --epochs 1 --json >"$tmp/cnn.out" 2>"$tmp/cnn.err"; then
  gs=$(field global_step <"$tmp/cnn.out"); acc=$(field test_accuracy <"$tmp/cnn.out")
  echo "cnn on a cluster: global step $gs, test accuracy $acc"
  if [ "$gs" = 20 ] && awk -v a="$acc" 'BEGIN{exit !(a > 0.4)}'; then ok; else
    bad "cnn: global step $gs (20), accuracy $acc (> 0.4)"; fi
else
  bad "cnn on a cluster: $(tail -5 "$tmp/cnn.err")"
fi

# ---- refusals ----------------------------------------------------------------------------
"$FLOE" train --replication async >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" = 2 ] && grep -q "go with --cluster" "$tmp/err"; then ok; else bad "--replication without --cluster: $rc"; fi
"$FLOE" train --replication bsp --cluster env >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" = 2 ] && grep -q "replication takes" "$tmp/err"; then ok; else bad "--replication bsp: $rc"; fi
cat >"$tmp/nops.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "worker": ["127.0.0.1:$(port)"]}}
JSON
"$FLOE" $TRAIN --cluster "$tmp/nops.json" --job chief --task 0 >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" = 1 ] && grep -q "no ps job" "$tmp/err"; then ok; else bad "a cluster without ps: $rc"; cat "$tmp/err"; fi
cat >"$tmp/withps.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "ps": ["127.0.0.1:$(port)"]}}
JSON
"$FLOE" $TRAIN --cluster "$tmp/withps.json" --job chief --task 0 --replication allreduce \
  >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" = 1 ] && grep -q "would idle" "$tmp/err"; then ok; else bad "allreduce with a ps: $rc"; cat "$tmp/err"; fi
"$FLOE" train --cluster env --fusion-bytes 1024 >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" = 2 ] && grep -q "go with --replication allreduce" "$tmp/err"; then ok; else bad "--fusion-bytes without allreduce: $rc"; fi

echo "test_train_cluster: $pass passed, $fails failed"
[ "$fails" = 0 ]
