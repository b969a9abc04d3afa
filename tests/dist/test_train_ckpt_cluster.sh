#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Consistent sharded checkpoints of floe train --cluster (over fabric tcp unless
# FLOE_TRANSPORT says otherwise):
#  - async, chief + worker + 2 ps: each epoch's checkpoint is one index and one file per ps
#    (the ps tasks write them), whole, and the global step it names is the one its
#    global_step variable holds (the workers were paused, their updates drained);
#  - sync, chief + worker + 1 ps: the epoch-1 checkpoint (written by the chief's update thread
#    between two updates) and the last one likewise consistent; a run resumed from the
#    sharded checkpoint ends at the global step of one that ran through;
#  - the chief killed (_exit 137) at each phase of its update thread's save after an epoch
#    (FLOE_TEST_CKPT_CRASH: before-shards, after-shards, after-index-temp, after-commit): the
#    newest committed checkpoint is whole and equals, variable by variable, either the
#    previous one or the new one a run without the crash writes;
#  - kill -9 of a ps while the chief saves: the newest committed checkpoint is whole;
#  - Ctrl-C (SIGINT) of the chief, async and sync: it saves a sharded checkpoint at the step
#    it names, consistent, and exits 130.
# Skipped (77) without the fabric transport or Fashion-MNIST.
set -u
. "${top_srcdir}/tests/dist/common.sh"
DATA=/usr/share/datasets/fashion-mnist
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
  { echo "SKIP: Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)"; exit 77; }
CHECK=$CKPT_CHECK
TRAIN="train --threads 1 --data $DATA --limit 3000 --epochs 2"
launch() { n=$1; shift; timeout 300 "$FLOE" launch --workers 1 --ps "$n" --every-task -- "$FLOE" $TRAIN --cluster env "$@"; }

# ---- async: the workers paused for each epoch's checkpoint --------------------------------
a="$tmp/async"
if launch 2 --checkpoint-dir "$a" --json >"$tmp/a.out" 2>"$tmp/a.err"; then
  ls "$a" >"$tmp/a.ls"
  if grep -q "ckpt-0000000094.index.json" "$tmp/a.ls" && [ "$(grep -c index.json "$tmp/a.ls")" = 2 ] &&
     [ "$(ls "$a/ckpt-0000000094.shards")" = "$(printf 'chief-0.safetensors\nps-0.safetensors\nps-1.safetensors')" ] ||
     [ "$(ls "$a/ckpt-0000000094.shards")" = "$(printf 'ps-0.safetensors\nps-1.safetensors')" ]; then ok; else
    bad "async: the checkpoints: $(cat "$tmp/a.ls") / $(ls "$a/ckpt-0000000094.shards")"; fi
  consistent "$a"
  consistent "$a" 0  # the epoch-1 checkpoint, at whatever step the workers had reached
else
  bad "async with checkpoints: $(tail -5 "$tmp/a.err")"
fi

# ---- sync: the update thread's checkpoint, and a resume from a sharded one --------------
s1="$tmp/sync"
if launch 1 --replication sync --checkpoint-dir "$s1" --json >"$tmp/s.out" 2>"$tmp/s.err"; then
  consistent "$s1" 0  # epoch 1's, written by the update thread between two updates
  consistent "$s1"
else
  bad "sync with checkpoints: $(tail -5 "$tmp/s.err")"
fi

# ---- the chief killed at each phase of its update thread's save --------------------------
# ref: a sync run stopped after epoch 1 (checkpoint 23: 46 of the epoch's 47 batches); new: it
# resumed to the end (47). Resumed, the run's first save is at the end of that epoch's last
# batch, not the run's last: the chief asks its update thread for it, which writes it between
# two updates while the chief's steps go on (step 25); that save is the one killed.
ref="$tmp/ref"
launch 1 --replication sync --stop-after 1 --checkpoint-dir "$ref" >/dev/null 2>"$tmp/ref.err" ||
  bad "the reference's first half: $(tail -3 "$tmp/ref.err")"
prev=$($CHECK "$ref" | cut -d' ' -f1,2)
cp -r "$ref" "$tmp/new"
launch 1 --replication sync --checkpoint-dir "$tmp/new" --resume --json >"$tmp/new.out" 2>"$tmp/new.err" ||
  bad "the reference's second half: $(tail -3 "$tmp/new.err")"
new=$($CHECK "$tmp/new" 23 | cut -d' ' -f1,2)  # its first checkpoint after 23
if grep -q '"global_step": *47[,}]' "$tmp/new.out" &&
   [ "${prev%% *}" = 23 ] && [ "${new%% *}" -gt 23 ] && [ "${new%% *}" -lt 47 ]; then ok; else
  bad "reference checkpoints: $prev / $new"; fi
for phase in before-shards after-shards after-index-temp after-commit; do
  d="$tmp/crash-$phase"; cp -r "$ref" "$d"
  FLOE_TEST_CKPT_CRASH=$phase launch 1 --replication sync --checkpoint-dir "$d" --resume \
    >"$tmp/c.out" 2>"$tmp/c.err"; rc=$?
  got=$($CHECK "$d" | cut -d' ' -f1,2)
  case $phase in after-commit) want=$new ;; *) want=$prev ;; esac
  if [ "$rc" != 0 ] && grep -q "FLOE_TEST_CKPT_CRASH=$phase" "$tmp/c.err" && [ "$got" = "$want" ]; then
    echo "killed $phase in the update thread's save: the newest checkpoint is step ${got%% *}, whole"; ok
  else
    bad "killed $phase (exit $rc): newest '$got', expected '$want'"; tail -3 "$tmp/c.err"
  fi
  $CHECK "$d" >/dev/null || bad "killed $phase: not whole"
done

# ---- kill -9 of a ps while the chief saves ------------------------------------------------
# An async run whose checkpoints are big enough to take a while; ps 0 is killed as soon as
# the folder of the first checkpoint after 47 appears.
k="$tmp/kill"
cat >"$tmp/k.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"], "ps": ["127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"]}}
JSON
printf '%s' "train-ckpt-cluster-secret-0123456789ab" >"$tmp/secret"; chmod 600 "$tmp/secret"
export FLOE_JOB_SECRET_FILE="$tmp/secret"
"$FLOE" train --threads 1 --data "$DATA" --limit 3000 --epochs 4 --cluster "$tmp/k.json" --job ps \
  --task 0 --heartbeat-timeout 1 >/dev/null 2>&1 &
p_ps=$!; pids="$pids $p_ps"
"$FLOE" train --threads 1 --data "$DATA" --limit 3000 --epochs 4 --cluster "$tmp/k.json" --job chief \
  --task 0 --heartbeat-timeout 1 --checkpoint-dir "$k" >"$tmp/k.out" 2>"$tmp/k.err" &
p_chief=$!; pids="$pids $p_chief"
i=0; while [ $i -lt 3000 ] && ! ls "$k" 2>/dev/null | grep -q "ckpt-0000000094.shards"; do sleep 0.01; i=$((i+1)); done
kill -9 "$p_ps"
wait "$p_chief"; rc=$?
if [ "$rc" != 0 ] && $CHECK "$k" >/dev/null; then
  echo "ps killed during the save of step 94: the chief failed (exit $rc); newest checkpoint $($CHECK "$k" | cut -d' ' -f1), whole"; ok
else
  bad "ps killed during a save: exit $rc, $($CHECK "$k" 2>&1)"; tail -3 "$tmp/k.err"
fi

# ---- Ctrl-C of the chief: a sharded checkpoint, consistent, then exit 130 ------------------
# (async: the workers paused; sync: the update thread stopped first). SIGINT reaches the chief
# alone: the ps must serve for the save.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for mode in async sync; do
  rep=; [ $mode = sync ] && rep="--replication sync"
  echo "{\"cluster\": {\"chief\": [\"127.0.0.1:$(port)\"], \"worker\": [\"127.0.0.1:$(port)\"], \"ps\": [\"127.0.0.1:$(port)\"]}}" >"$tmp/i.json"
  # 40 epochs: the interrupt must land before the end (a loaded machine can be slow to send
  # it; with 6 the sync run once finished, exit 0, before SIGINT arrived)
  A="train --threads 1 --data $DATA --limit 3000 --epochs 40 --cluster $tmp/i.json $rep"
  "$FLOE" $A --job ps --task 0 >/dev/null 2>&1 & p_ps=$!
  "$FLOE" $A --job worker --task 0 --checkpoint-dir "$tmp/int-$mode" >/dev/null 2>&1 & p_w=$!
  "$FLOE" $A --job chief --task 0 --checkpoint-dir "$tmp/int-$mode" >"$tmp/i.out" 2>"$tmp/i.err" & p_c=$!
  pids="$pids $p_ps $p_w $p_c"
  i=0; while ! grep -q "^epoch 1/40" "$tmp/i.out" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
  kill -INT "$p_c"; wait "$p_c"; rc=$?
  at=$(sed -n 's/^floe train: interrupted at global step \([0-9]*\); checkpoint saved in .*/\1/p' "$tmp/i.err")
  got=$($CHECK "$tmp/int-$mode" | cut -d' ' -f1)
  if [ "$rc" = 130 ] && [ -n "$at" ] && [ "$got" = "$at" ]; then
    echo "$mode, Ctrl-C of the chief: exit 130, checkpoint at global step $at"; ok
  else
    bad "$mode, Ctrl-C of the chief: exit $rc, said step '$at', newest checkpoint '$got'"; tail -3 "$tmp/i.err"
  fi
  consistent "$tmp/int-$mode"
  kill "$p_ps" "$p_w" 2>/dev/null; wait "$p_ps" "$p_w" 2>/dev/null
done

echo "test_train_ckpt_cluster: $pass passed, $fails failed"
[ "$fails" = 0 ]
