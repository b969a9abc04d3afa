#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Recovery from a dead task. floe launch --every-task --max-restarts N starts a failed task
# again alone (--restart task, the default there): the other tasks, told by FLOE_RECOVER,
# free their sessions and servers, re-form the cluster with it in the same processes, and
# every task resumes from the last checkpoint committed in --checkpoint-dir. With --restart
# job every task starts again. A sync run (chief + worker + 1 ps, 3 epochs of 3,000 examples,
# checkpoints after each epoch) with a fixed data order:
#  - two uninterrupted runs end with the same bytes (the reference is deterministic);
#  - kill -9 of the worker at global step 30 (FLOE_TEST_KILL_AT_STEP: the chief sends the
#    signal once the global step reaches it, in the job's first start only), of the ps at
#    step 40 and of the chief at step 30: only that task starts again (exactly one restart,
#    the job never restarts), the other two recover in their processes, everyone resumes
#    from the epoch-1 checkpoint, and the final checkpoint is bitwise the uninterrupted
#    run's; the times from the kill to the survivors' recovery and from there to the first
#    step after it are printed;
#  - the same kill of the worker with --restart job: every task starts again, bitwise the same;
#  - the worker hanging (SIGSTOP) at step 30: found by the heartbeats (timeout 1 s); the
#    cluster cannot re-form (the hung task holds its address), so the chief exits 75 after
#    5 s and launch starts the whole job again: bitwise the same;
#  - allreduce replication (chief + worker, no ps): the worker killed at step 30 starts again
#    alone, the chief forms new collective groups with it, bitwise like its uninterrupted run;
#  - without --max-restarts the kill fails the job (as before); a task failing every time
#    uses the restarts up and launch exits with its status; --restart's bad uses.
# Over fabric tcp, then ucx where built. Skipped (77) without a transport or Fashion-MNIST.
set -u
each_transport=1
. "${top_srcdir}/tests/dist/common.sh"
DATA=/usr/share/datasets/fashion-mnist
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
  { echo "SKIP: Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)"; exit 77; }
TRAIN="train --threads 1 --data $DATA --cluster env --replication sync --limit 3000 --epochs 3"
LAUNCH="launch --workers 1 --ps 1 --every-task"

# The newest checkpoint of folder $1 as "STEP DIGEST GLOBAL_STEP" (the digest of every
# variable, assembled from its shards: tests/dist/ckpt_check.py), for comparing two runs' ends.
final_ckpt() { python3 "${top_srcdir}/tests/dist/ckpt_check.py" "$1" 2>&1; }
same_end() { # same_end A B: the newest checkpoints of A and B hold the same values
  fa=$(final_ckpt "$1"); fb=$(final_ckpt "$2")
  [ -n "$fa" ] && [ "$fa" = "$fb" ] && [ "${fa%% *}" = 70 ]
}
# Seconds between the first lines of $1 matching $2 and $3 (lines stamped by stamp()).
stamp() { python3 -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.monotonic(), line))'; }
between() { awk -v a="$2" -v b="$3" 'index($0, a) && !ta { ta = $1 } index($0, b) && !tb { tb = $1 }
  END { if (ta && tb) printf "%.2f", tb - ta; else print "?" }' "$1"; }

# ---- the reference, twice ----------------------------------------------------------------
for r in ref ref2; do
  timeout 300 "$FLOE" $LAUNCH -- "$FLOE" $TRAIN --checkpoint-dir "$tmp/$r" >"$tmp/$r.out" 2>"$tmp/$r.err" ||
    bad "uninterrupted run $r: $(tail -3 "$tmp/$r.err")"
done
if same_end "$tmp/ref" "$tmp/ref2"; then ok; else
  bad "two uninterrupted runs differ (or did not reach global step 70): $(final_ckpt "$tmp/ref"); $(final_ckpt "$tmp/ref2")"; fi

# ---- kill -9 (or SIGSTOP) of a task at a chosen step, restarted ----------------------------
recover() { # recover NAME TASK STEP SIGNAL SCOPE: launch's stderr stamped line by line
  name=$1
  (FLOE_TEST_KILL_AT_STEP=$3 FLOE_TEST_KILL_TASK=$2 FLOE_TEST_KILL_SIGNAL=$4 \
    timeout 300 "$FLOE" $LAUNCH --max-restarts 2 --restart "$5" -- "$FLOE" $TRAIN \
    --heartbeat-timeout 1 --checkpoint-dir "$tmp/$name" 2>&1 >"$tmp/$name.out"; echo "exit $?") |
    stamp >"$tmp/$name.err"
  if grep -q "^[0-9.]* exit 0$" "$tmp/$name.err"; then ok; else
    bad "$name: launch failed"; tail -5 "$tmp/$name.err"; fi
  alone=$(grep -c 'starts again alone (restart' "$tmp/$name.err")
  job=$(grep -c 'every task starts again (restart' "$tmp/$name.err")
  case "$4/$5" in
    KILL/task) want="1 0" ;;  # the dead task alone; the others recover in their processes
    KILL/job) want="0 1" ;;
    STOP/task) want="0 1" ;;  # the hung task holds its address: the chief gives up (75)
  esac
  if [ "$alone $job" = "$want" ] && ! grep -q 'restart 2 of 2' "$tmp/$name.err"; then ok; else
    bad "$name: expected restarts (alone, job) $want, saw $alone $job"; grep 'floe launch' "$tmp/$name.err"; fi
  # the two survivors recovered in their processes, once each (and the restarted task too
  # when it had joined the cluster before the chief saw the failure: 2 or 3 in all)
  if [ "$4/$5" = KILL/task ]; then
    n1=$(grep -c '\[recovery 1 of 2\]' "$tmp/$name.err")
    if [ "$n1" -ge 2 ] && [ "$n1" -le 3 ] && ! grep -q '\[recovery 2 of 2\]' "$tmp/$name.err"; then ok; else
      bad "$name: expected the two other tasks to recover once in their processes"
      grep 'recovery' "$tmp/$name.err"; fi
  fi
  if [ "$4/$5" = STOP/task ]; then
    if grep -q 'did not re-form within 5 s' "$tmp/$name.err" &&
       grep -q 'chief/task:0 .* ended with status 75' "$tmp/$name.err"; then ok; else
      bad "$name: the chief did not give up re-forming with status 75"; fi
  fi
  # resumed from the checkpoint after epoch 1 (47 batches: 2 a global step, and the update
  # thread writes it between two updates), at its step
  if grep -q "resumed from .*ckpt-0*\([0-9]*\)[.a-z]* at global step \1 (epoch 2, batch [0-9])" \
       "$tmp/$name.out"; then ok; else
    bad "$name: did not resume from the epoch-1 checkpoint"; grep resumed "$tmp/$name.out"; fi
  if same_end "$tmp/ref" "$tmp/$name"; then ok; else
    bad "$name: the final checkpoint is not bitwise the uninterrupted run's"; fi
  if [ "$5" = task ] && [ "$4" = KILL ]; then
    det=$(between "$tmp/$name.err" "test hook: kill" "[recovery 1 of 2]")
    rec=$(between "$tmp/$name.err" "[recovery 1 of 2]" "first step after recovery")
    echo "$name: recovery began $det s after the signal; the first step $rec s after that"
  else
    det=$(between "$tmp/$name.err" "test hook: kill" "stopping the other tasks")
    rec=$(between "$tmp/$name.err" "every task starts again" "first step after recovery")
    echo "$name: detected $det s after the signal; the first step after recovery $rec s after the restart"
  fi
}
recover kill_worker /job:worker/task:0 30 KILL task
recover kill_ps /job:ps/task:0 40 KILL task
recover kill_chief /job:chief/task:0 30 KILL task
recover kill_worker_job /job:worker/task:0 30 KILL job
recover hang_worker /job:worker/task:0 30 STOP task
# a hang is found by the heartbeats: at least the timeout (1 s) after the signal
hang=$(between "$tmp/hang_worker.err" "test hook: kill" "sent no heartbeat")
if awk -v d="$hang" 'BEGIN{exit !(d != "?" && d >= 0.9 && d <= 10)}'; then ok; else
  bad "hang detection took $hang s (heartbeat timeout 1 s)"; fi

# ---- allreduce (no ps): the collective groups form again in the new processes --------------
AR="train --threads 1 --data $DATA --cluster env --replication allreduce --limit 3000 --epochs 3"
timeout 300 "$FLOE" launch --workers 1 --every-task -- "$FLOE" $AR --checkpoint-dir "$tmp/ar_ref" \
  >/dev/null 2>"$tmp/ar_ref.err" || bad "allreduce reference: $(tail -3 "$tmp/ar_ref.err")"
FLOE_TEST_KILL_AT_STEP=30 FLOE_TEST_KILL_TASK=/job:worker/task:0 timeout 300 "$FLOE" launch \
  --workers 1 --every-task --max-restarts 1 -- "$FLOE" $AR --heartbeat-timeout 1 \
  --checkpoint-dir "$tmp/ar" >"$tmp/ar.out" 2>"$tmp/ar.err" || bad "allreduce recovery: $(tail -3 "$tmp/ar.err")"
if grep -q "starts again alone (restart 1 of 1)" "$tmp/ar.err" &&
   grep -q '\[recovery 1 of 1\]' "$tmp/ar.err" && same_end "$tmp/ar_ref" "$tmp/ar"; then ok; else
  bad "allreduce: not restarted alone and recovered, or its final checkpoint differs"; tail -5 "$tmp/ar.err"; fi

# ---- no restarts: the kill fails the job ----------------------------------------------------
if FLOE_TEST_KILL_AT_STEP=30 FLOE_TEST_KILL_TASK=/job:worker/task:0 timeout 300 "$FLOE" $LAUNCH -- \
     "$FLOE" $TRAIN --heartbeat-timeout 1 --checkpoint-dir "$tmp/norestart" >"$tmp/nr.out" 2>"$tmp/nr.err"; then
  bad "without --max-restarts the killed job succeeded"
elif grep -q "starts again" "$tmp/nr.err"; then bad "restarted without --max-restarts"; else ok; fi

# ---- a task failing every time: the restarts are used up ------------------------------------
timeout 60 "$FLOE" launch --workers 1 --every-task --max-restarts 2 -- sh -c 'exit 3' >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
if [ "$rc" = 3 ] && [ "$(grep -c 'starts again' "$tmp/f.err")" = 2 ]; then ok; else
  bad "a task failing each time: exit $rc, $(grep -c 'starts again' "$tmp/f.err") restarts"; cat "$tmp/f.err"; fi
# the same with servers and a chief COMMAND (floe launch without --every-task)
timeout 60 "$FLOE" launch --workers 1 --max-restarts 1 -- sh -c 'exit 4' >"$tmp/g.out" 2>"$tmp/g.err"
rc=$?
if [ "$rc" = 4 ] && [ "$(grep -c 'starts again' "$tmp/g.err")" = 1 ]; then ok; else
  bad "servers and a failing chief: exit $rc"; cat "$tmp/g.err"; fi
if timeout 60 "$FLOE" launch --workers 1 --max-restarts 3 -- true 2>"$tmp/h.err" &&
   ! grep -q 'starts again' "$tmp/h.err"; then ok; else bad "a chief that succeeds was restarted"; fi
if "$FLOE" launch --workers 1 --max-restarts -1 -- true 2>"$tmp/u.err"; then bad "--max-restarts -1 taken"
elif grep -q -- "--max-restarts" "$tmp/u.err"; then ok; else bad "--max-restarts -1: $(cat "$tmp/u.err")"; fi

# --restart: task or job; task needs --every-task (servers and a chief COMMAND cannot re-form)
for bad_args in "--restart task" "--restart all" "--every-task --restart"; do
  if "$FLOE" launch --workers 1 --max-restarts 1 $bad_args -- true >/dev/null 2>"$tmp/r.err"; then
    bad "launch $bad_args was taken"
  elif grep -q -- "--restart\|requires an argument" "$tmp/r.err"; then ok; else
    bad "launch $bad_args: $(cat "$tmp/r.err")"; fi
done

echo "test_train_restart: $pass passed, $fails failed"
[ "$fails" = 0 ]
