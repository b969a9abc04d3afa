#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# floe train --model lstm across processes (chief + 1 worker + 2 ps, fabric tcp), a small
# model (vocab 2000, 1 layer of 64, 150 windows of 16 x 10 words):
#  - async, the embedding and the softmax in 2 shards (one per ps): held-out perplexity
#    within 5% of one process on the same windows; the global step 150 (one a window: the
#    softmax's own Adam does not count it again) or up to 2 windows more: a task stops once the
#    global step its window read says the end, and that read, taken as its window starts,
#    may miss the other task's window in flight and the one it starts meanwhile;
#  - the full softmax reads the whole softmax weight every step (at least vocab x hidden x 4
#    bytes from the ps tasks per step), the sampled softmax (64 words) only the rows a window
#    needs: less than half the full softmax's bytes from the ps tasks per step;
#  - sync (2 gradients a global step): 75 global steps, nothing stale, the model learns
#    (perplexity below a third of the vocabulary's 2000);
#  - --checkpoint-dir and --resume on the cluster: 60 windows, then resumed to 120 (global
#    step 60 to 62, then 120 to 122); the checkpoints are sharded (one file per ps, written
#    there), whole, and the step each index names is its global_step variable's; resumed
#    from the index;
#  - sync with --checkpoint-dir over two epochs: epoch 1's checkpoint (written by the chief's
#    update thread between two updates) and the last are whole and consistent likewise;
#  - allreduce (no ps), chief + 1 worker, on the four fortune files (a 17,867-word training split,
#    so whole epochs are quick), 2 epochs at batch 16:
#    . the global step is (windows per epoch / 2, rounded down) x 2, the windows per epoch
#      read from the run's own header line; each task ran that many steps;
#    . both tasks end with the same variables: their JSON lines' variables_checksum are equal,
#      and equal to the CRC-32 this script computes from the chief's last checkpoint;
#    . each step sends the other task the gradients' bytes (every variable's, dense: the
#      ring sends 2(n-1)/n of them, all for n = 2), + < 1 KiB;
#    . it learns: test perplexity below 0.8 x the unigram perplexity (one process reaches
#      0.68-0.71 of it, seeds 1-3);
#    . it matches one process at batch 32 (the same number of updates of 2 x 16 rows; not
#      the same windows: a 32-row cut of the corpus shifts each row by a few words) within 5%
#      in perplexity: measured 0.7-1.3% apart over seeds 1-3, while one process's own
#      perplexity moves 3.5% from seed to seed;
#    . a chief alone (R = 1) ends bitwise like one process on the same windows: its checksum
#      equals the CRC-32 of the one process's checkpoint, and so does the perplexity;
#    . the sampled softmax (256 words) learns too, the tasks stay equal, and its gradients
#      cross as whole (dense) tensors: the same bytes per step as the full softmax;
#    . --steps 60 is 30 global steps; resumed with --steps 120 it ends at 60, the worker
#      holding the chief's restored values (checksums equal);
#    . the worker killed (-9) in epoch 2 under floe launch --max-restarts 1: it starts again
#      alone, the chief re-forms the cluster in its process, both go on from the epoch-1
#      checkpoint (where the state starts from zeros anyway) and end bitwise like the
#      uninterrupted run;
#    . refused: a ps job, --softmax-shards, a --softmax-lr of its own.
# Skipped (77) without the fabric transport or the fortunes.
set -u
. "${top_srcdir}/tests/dist/common.sh"
[ -d /usr/share/games/fortunes ] ||
  { echo "SKIP: the fortunes are not installed (Debian's fortunes package)"; exit 77; }
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); v=d[sys.argv[1]]; print(json.dumps(v) if isinstance(v,list) else v)' "$1"; }
V=2000; H=64
LM="train --model lstm --threads 1 --vocab $V --hidden $H --layers 1 --batch 16 --bptt 10 --steps 150 --eval-windows 20 --json"
cluster() { # cluster OUT ARGS...: chief + 1 worker + 2 ps
  out=$1; shift
  timeout 300 "$FLOE" launch --workers 1 --ps 2 --every-task -- "$FLOE" $LM --cluster env "$@" \
    >"$tmp/$out.out" 2>"$tmp/$out.err" || { bad "$out: $(tail -5 "$tmp/$out.err")"; return 1; }
}
sum() { python3 -c 'import json,sys; print(int(sum(json.loads(sys.argv[1]))))' "$1"; }

# ---- async against one process ------------------------------------------------------------
"$FLOE" $LM --softmax-shards 2 >"$tmp/one.out" 2>"$tmp/one.err" || bad "one process: $(cat "$tmp/one.err")"
if cluster full; then
  p1=$(field perplexity <"$tmp/one.out"); p2=$(field perplexity <"$tmp/full.out")
  echo "perplexity: one process $p1, async chief + 1 worker over 2 ps $p2"
  if awk -v a="$p1" -v b="$p2" 'BEGIN{d=(b-a)/a; if(d<0)d=-d; exit !(d <= 0.05)}'; then ok; else
    bad "async perplexity $p2 is not within 5% of one process's $p1"; fi
  gs=$(field global_step <"$tmp/full.out"); st=$(field steps <"$tmp/full.out")
  sh=$(field softmax_shards <"$tmp/full.out")
  if [ "$gs" -ge 150 ] && [ "$gs" -le 152 ] && [ "$st" -ge 30 ] && [ "$st" -le 120 ] &&
     [ "$sh" = 2 ]; then ok; else
    bad "global step $gs (expected 150 to 152), chief's steps $st (about 75), shards $sh (2)"; fi
  full=$(sum "$(field bytes_from_ps_per_step <"$tmp/full.out")")
  echo "full softmax: $full bytes from the ps tasks per step (the softmax weight alone: $((V*H*4)))"
  if [ "$full" -ge $((V*H*4)) ]; then ok; else bad "the full softmax moved $full < $((V*H*4)) bytes"; fi
  if cluster sampled --sampled-softmax 64; then
    smp=$(sum "$(field bytes_from_ps_per_step <"$tmp/sampled.out")")
    echo "sampled softmax (64): $smp bytes from the ps tasks per step"
    if [ $((2 * smp)) -lt "$full" ]; then ok; else bad "sampled $smp is not under half of full $full"; fi
  fi
fi

# ---- sync ---------------------------------------------------------------------------------
if cluster sync --replication sync --sampled-softmax 64; then
  gs=$(field global_step <"$tmp/sync.out"); stale=$(field stale_gradients_dropped <"$tmp/sync.out")
  p=$(field perplexity <"$tmp/sync.out")
  echo "sync: global step $gs, stale $stale, perplexity $p"
  if [ "$gs" = 75 ] && [ "$stale" = 0 ]; then ok; else bad "sync: global step $gs (75), stale $stale (0)"; fi
  if awk -v p="$p" -v v="$V" 'BEGIN{exit !(p < v / 3)}'; then ok; else bad "sync perplexity $p"; fi
fi

# ---- checkpoints and --resume on the cluster ------------------------------------------------
if cluster first --steps 60 --checkpoint-dir "$tmp/ckpt"; then
  gs1=$(field global_step <"$tmp/first.out")
  consistent "$tmp/ckpt"  # sharded, written by the ps tasks, at the global step it names
  if cluster resumed --steps 120 --checkpoint-dir "$tmp/ckpt" --resume; then
    gs2=$(field global_step <"$tmp/resumed.out")
    echo "resume: stopped at global step $gs1, resumed to $gs2"
    # async: the checkpoint holds the step the workers were paused at, and the chief's JSON
    # reads the global step at another moment: a worker's last window in flight may land
    # before either (both are in 60-62, not always equal)
    ck1=$(grep -o "resumed from .*ckpt-0*[0-9]*.index.json at global step [0-9]*" "$tmp/resumed.out" |
          sed 's/.*ckpt-0*\([0-9]*\)\.index\.json at global step \([0-9]*\)/\1 \2/')
    if [ -n "$ck1" ] && [ "${ck1% *}" = "${ck1#* }" ] && [ "${ck1% *}" -ge 60 ] &&
       [ "${ck1% *}" -le 62 ] && [ "$gs1" -ge 60 ] && [ "$gs1" -le 62 ] &&
       [ "$gs2" -ge 120 ] && [ "$gs2" -le 122 ]; then ok; else
      bad "resume: global steps $gs1 (checkpoint: ${ck1:-none}), then $gs2 (expected 60-62, then 120-122)"; fi
    consistent "$tmp/ckpt"
    [ "$(ls "$tmp/ckpt"/*.shards/ | sort -u | grep -c safetensors)" = 2 ] && ok ||
      bad "async checkpoints: not one file per ps: $(ls -R "$tmp/ckpt")"
  fi
fi

# ---- allreduce (no ps tasks) ----------------------------------------------------------------
D="$tmp/fortunes"; mkdir -p "$D"
for f in fortunes goedel kids food; do cp "/usr/share/games/fortunes/$f" "$D/" || bad "no fortune file $f"; done

# ---- sync checkpoints: epoch 1's by the chief's update thread, the last after it stopped ----
# (the four files: 111 windows an epoch, so --steps 150 ends in epoch 2)
if cluster sync_ck --replication sync --data "$D" --checkpoint-dir "$tmp/sync_ckpt"; then
  n=$(ls "$tmp/sync_ckpt" | grep -c 'index\.json$')
  if [ "$n" = 2 ] && [ "$(field global_step <"$tmp/sync_ck.out")" = 75 ]; then ok; else
    bad "sync checkpoints: $(ls "$tmp/sync_ckpt"), global step $(field global_step <"$tmp/sync_ck.out")"; fi
  consistent "$tmp/sync_ckpt" 0  # epoch 1's, written between two updates
  consistent "$tmp/sync_ckpt"
fi
AR="train --model lstm --threads 1 --vocab $V --hidden $H --layers 1 --bptt 10 --eval-windows 20 --data $D --lr 0.01 --json"
arun() { # arun OUT ARGS...: chief + 1 worker, allreduce; the worker's lines on OUT.err
  out=$1; shift
  timeout 300 "$FLOE" launch --workers 1 ${LAUNCH:-} --every-task -- "$FLOE" $AR --cluster env \
    --replication allreduce "$@" >"$tmp/$out.out" 2>"$tmp/$out.err" || { bad "$out: $(tail -5 "$tmp/$out.err")"; return 1; }
}
task_field() { # task_field FILE KEY: KEY of every training task's JSON line in FILE, one a line
  python3 -c 'import json,sys; [print(json.loads(l)[sys.argv[2]]) for l in open(sys.argv[1]) if l.startswith("{\"model\"")]' "$1" "$2"
}
cat >"$tmp/ckcrc.py" <<'PY'
# The newest checkpoint of a folder (a single file, or a sharded one's index whose variables
# are whole: one part each, as allreduce's chief writes them): CRC-32 of its tensors in name
# order, each as its name, a NUL byte and its raw bytes; then its global step.
import glob, json, os, struct, sys, zlib
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
path = max(glob.glob(sys.argv[1] + "/ckpt-*.safetensors") + glob.glob(sys.argv[1] + "/ckpt-*.index.json"),
           key=lambda p: (int(os.path.basename(p)[5:].split(".")[0]), p.endswith(".json")))
tensors = {}
if path.endswith(".index.json"):
    index = json.load(open(path))
    step = index["metadata"]["global_step"]
    for name, v in index["variables"].items():
        assert len(v["parts"]) == 1, (name, "in parts")
        q = v["parts"][0]
        head, body = load(os.path.join(sys.argv[1], q["file"]))
        b, e = head[q["tensor"]]["data_offsets"]
        tensors[name] = body[b:e]
else:
    head, body = load(path)
    step = head["__metadata__"]["global_step"]
    tensors = {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}
crc = 0
for name in sorted(tensors):
    crc = zlib.crc32(tensors[name], zlib.crc32(name.encode() + b"\0", crc))
print("%08x %s" % (crc, step))
PY
# Every variable's gradient, dense (bytes): embedding and softmax weights [V, H] each, the
# softmax biases [V], the LSTM's kernel [2H, 4H] (input and state) and bias [4H].
GRAD=$(((2*V*H + V + 2*H*4*H + 4*H) * 4))
if arun ar --batch 16 --epochs 2 --checkpoint-dir "$tmp/ar_ckpt"; then
  n=$(sed -n 's/.* epochs of \([0-9]*\) steps.*/\1/p' "$tmp/ar.out" | head -1)
  want=$((n / 2 * 2))
  gs=$(field global_step <"$tmp/ar.out")
  steps=$(task_field "$tmp/ar.out" steps; task_field "$tmp/ar.err" steps)
  echo "allreduce: $n windows an epoch, global step $gs (plan: $n / 2 x 2 epochs = $want); steps of each task: $(echo $steps)"
  if [ -n "$n" ] && [ "$gs" = "$want" ] && [ "$(echo $steps)" = "$want $want" ]; then ok; else
    bad "allreduce: global step $gs, steps $(echo $steps), expected $want"; fi
  sums=$(task_field "$tmp/ar.out" variables_checksum; task_field "$tmp/ar.err" variables_checksum)
  ck=$(python3 "$tmp/ckcrc.py" "$tmp/ar_ckpt")
  echo "allreduce: variables_checksum of the chief and the worker: $(echo $sums); the chief's last checkpoint: $ck"
  set -- $sums
  if [ $# = 2 ] && [ "$1" = "$2" ] && [ "$ck" = "$1 $want" ]; then ok; else
    bad "allreduce: the tasks' variables differ, or differ from the checkpoint"; fi
  to=$(field bytes_to_peers_per_step <"$tmp/ar.out"); fr=$(field bytes_from_peers_per_step <"$tmp/ar.out")
  echo "allreduce: $to bytes a step to the other task, $fr from it; the gradients: $GRAD"
  if awk -v t="$to" -v f="$fr" -v g="$GRAD" 'BEGIN{exit !(t >= g && t <= g + 1024 && f >= g && f <= g + 1024)}'; then ok; else
    bad "allreduce: bytes per step $to / $fr, expected the gradients' $GRAD"; fi
  p=$(field perplexity <"$tmp/ar.out"); u=$(field unigram_perplexity <"$tmp/ar.out")
  "$FLOE" $AR --softmax-lr 0.01 --batch 32 --epochs 2 >"$tmp/one32.out" 2>&1 || bad "one process, batch 32: $(tail -3 "$tmp/one32.out")"
  p1=$(field perplexity <"$tmp/one32.out")
  echo "allreduce: perplexity $p (unigram $u); one process at batch 32: $p1"
  if awk -v p="$p" -v u="$u" 'BEGIN{exit !(p < 0.8 * u)}'; then ok; else bad "allreduce perplexity $p is not below 0.8 x $u"; fi
  if awk -v a="$p1" -v b="$p" 'BEGIN{d=(b-a)/a; if(d<0)d=-d; exit !(d <= 0.05)}'; then ok; else
    bad "allreduce perplexity $p is not within 5% of one process's $p1 at batch 32"; fi
  # the worker killed in epoch 2: it starts again alone, the chief re-forms the cluster in its
  # process, and both go on from the epoch-1 checkpoint to the same end
  LAUNCH="--max-restarts 1"; export FLOE_TEST_KILL_AT_STEP=$((n / 2 + 15)) FLOE_TEST_KILL_TASK=/job:worker/task:0
  arun kill --batch 16 --epochs 2 --checkpoint-dir "$tmp/kill_ckpt"; r=$?
  unset LAUNCH FLOE_TEST_KILL_AT_STEP FLOE_TEST_KILL_TASK
  if [ "$r" = 0 ]; then
    ks=$(task_field "$tmp/kill.out" variables_checksum; task_field "$tmp/kill.err" variables_checksum)
    echo "allreduce, the worker killed at global step $((n / 2 + 15)), restarted alone, the chief recovered in its process: checksums $(echo $ks), global step $(field global_step <"$tmp/kill.out")"
    if grep -q "kill -9 of /job:worker/task:0" "$tmp/kill.err" &&
       grep -q "starts again alone (restart 1 of 1)" "$tmp/kill.err" &&
       grep -q "\[recovery 1 of 1\]" "$tmp/kill.err" &&
       [ "$(echo $ks)" = "$1 $1" ] && [ "$(field global_step <"$tmp/kill.out")" = "$want" ]; then ok; else
      bad "allreduce recovery: checksums $(echo $ks), uninterrupted $1"; fi
  fi
fi

# a chief alone (R = 1) against one process on the same windows: bitwise
printf '%s' "lstm-cluster-secret-0123456789ab" >"$tmp/secret"; chmod 600 "$tmp/secret"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "{\"cluster\": {\"chief\": [\"127.0.0.1:$(port)\"]}}" >"$tmp/alone.json"
"$FLOE" $AR --softmax-lr 0.01 --batch 16 --epochs 1 --checkpoint-dir "$tmp/one16" >"$tmp/one16.out" 2>&1 ||
  bad "one process, batch 16: $(tail -3 "$tmp/one16.out")"
if FLOE_JOB_SECRET_FILE="$tmp/secret" timeout 300 "$FLOE" $AR --batch 16 --epochs 1 \
    --cluster "$tmp/alone.json" --job chief --task 0 --replication allreduce >"$tmp/alone.out" 2>"$tmp/alone.err"; then
  ck=$(python3 "$tmp/ckcrc.py" "$tmp/one16"); a=$(field variables_checksum <"$tmp/alone.out")
  echo "allreduce, the chief alone: checksum $a, perplexity $(field perplexity <"$tmp/alone.out"); one process: checkpoint $ck, perplexity $(field perplexity <"$tmp/one16.out")"
  if [ "$ck" = "$a $(field global_step <"$tmp/alone.out")" ] &&
     [ "$(field perplexity <"$tmp/alone.out")" = "$(field perplexity <"$tmp/one16.out")" ]; then ok; else
    bad "allreduce of one task differs from one process"; fi
else
  bad "allreduce, the chief alone: $(tail -3 "$tmp/alone.err")"
fi

# the sampled softmax under allreduce: dense gradients, the same draws on both tasks
if arun smp --batch 16 --epochs 2 --sampled-softmax 256 --lr 0.02; then
  ss=$(task_field "$tmp/smp.out" variables_checksum; task_field "$tmp/smp.err" variables_checksum)
  p=$(field perplexity <"$tmp/smp.out"); u=$(field unigram_perplexity <"$tmp/smp.out")
  to=$(field bytes_to_peers_per_step <"$tmp/smp.out")
  echo "allreduce, sampled softmax (256): perplexity $p (unigram $u), checksums $(echo $ss), $to bytes a step to the other task"
  set -- $ss
  if [ $# = 2 ] && [ "$1" = "$2" ] && awk -v p="$p" -v u="$u" -v t="$to" -v g="$GRAD" \
       'BEGIN{exit !(p < 0.8 * u && t >= g && t <= g + 1024)}'; then ok; else
    bad "allreduce, sampled softmax: perplexity $p, checksums $ss, bytes $to"; fi
fi

# --steps and --resume: 60 windows are 30 global steps; resumed to 120 windows, 60
if arun st1 --batch 16 --steps 60 --checkpoint-dir "$tmp/ar_resume" &&
   arun st2 --batch 16 --steps 120 --checkpoint-dir "$tmp/ar_resume" --resume; then
  g1=$(field global_step <"$tmp/st1.out"); g2=$(field global_step <"$tmp/st2.out")
  rs=$(task_field "$tmp/st2.out" variables_checksum; task_field "$tmp/st2.err" variables_checksum)
  echo "allreduce --steps 60: global step $g1; resumed with --steps 120: $g2, checksums $(echo $rs)"
  set -- $rs
  if [ "$g1" = 30 ] && [ "$g2" = 60 ] && grep -q "resumed from .* at global step 30" "$tmp/st2.out" &&
     [ $# = 2 ] && [ "$1" = "$2" ]; then ok; else bad "allreduce resume: $g1, $g2, checksums $rs"; fi
fi

# ---- refusals -----------------------------------------------------------------------------
if "$FLOE" $LM --replication sync >/dev/null 2>"$tmp/r1.err"; then bad "--replication without --cluster ran"
elif grep -q "go with --cluster" "$tmp/r1.err"; then ok; else bad "refusal: $(cat "$tmp/r1.err")"; fi
if "$FLOE" $LM --cluster env --replication sync --softmax-lr 0.05 >/dev/null 2>"$tmp/r2.err"; then
  bad "sync with --softmax-lr ran"
elif grep -q "drop --softmax-lr" "$tmp/r2.err"; then ok; else bad "refusal: $(cat "$tmp/r2.err")"; fi
cat >"$tmp/withps.json" <<JSON
{"cluster": {"chief": ["127.0.0.1:$(port)"], "ps": ["127.0.0.1:$(port)"]}}
JSON
if FLOE_JOB_SECRET_FILE="$tmp/secret" "$FLOE" $AR --cluster "$tmp/withps.json" --job chief --task 0 \
    --replication allreduce >/dev/null 2>"$tmp/r3.err"; then bad "allreduce with a ps job ran"
elif grep -q "would idle" "$tmp/r3.err"; then ok; else bad "refusal: $(cat "$tmp/r3.err")"; fi
if "$FLOE" $AR --cluster env --replication allreduce --softmax-shards 2 >/dev/null 2>"$tmp/r4.err"; then
  bad "allreduce with --softmax-shards ran"
elif grep -q "drop --softmax-shards" "$tmp/r4.err"; then ok; else bad "refusal: $(cat "$tmp/r4.err")"; fi
if "$FLOE" $AR --cluster env --replication allreduce --softmax-lr 0.05 >/dev/null 2>"$tmp/r5.err"; then
  bad "allreduce with --softmax-lr ran"
elif grep -q "replication allreduce trains every variable with one Adam.*drop --softmax-lr" "$tmp/r5.err"; then ok
else bad "refusal: $(cat "$tmp/r5.err")"; fi
echo "test_train_lstm_cluster: $pass passed, $fails failed"
[ "$fails" = 0 ]
