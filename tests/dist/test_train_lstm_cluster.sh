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
#    step 60 to 62, then 120 to 122).
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
  if cluster resumed --steps 120 --checkpoint-dir "$tmp/ckpt" --resume; then
    gs2=$(field global_step <"$tmp/resumed.out")
    echo "resume: stopped at global step $gs1, resumed to $gs2"
    if grep -q "resumed from .* at global step $gs1" "$tmp/resumed.out" && [ "$gs1" -ge 60 ] &&
       [ "$gs1" -le 62 ] && [ "$gs2" -ge 120 ] && [ "$gs2" -le 122 ]; then ok; else
      bad "resume: global steps $gs1, then $gs2 (expected 60-62, then 120-122)"; fi
  fi
fi

# ---- refusals -----------------------------------------------------------------------------
if "$FLOE" $LM --replication sync >/dev/null 2>"$tmp/r1.err"; then bad "--replication without --cluster ran"
elif grep -q "go with --cluster" "$tmp/r1.err"; then ok; else bad "refusal: $(cat "$tmp/r1.err")"; fi
if "$FLOE" $LM --cluster env --replication sync --softmax-lr 0.05 >/dev/null 2>"$tmp/r2.err"; then
  bad "sync with --softmax-lr ran"
elif grep -q "drop --softmax-lr" "$tmp/r2.err"; then ok; else bad "refusal: $(cat "$tmp/r2.err")"; fi
echo "test_train_lstm_cluster: $pass passed, $fails failed"
[ "$fails" = 0 ]
