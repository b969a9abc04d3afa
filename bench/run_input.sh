#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Feed-fed against queue-fed training (floe train --input feed|queue), and how much of the
# input time the queue hides, side by side in one run:
#
#  1. bench/bench_input: the same epochs trained five ways, in rotation, medians and minima:
#     input alone (batcher / runner + dequeue), training alone (one pre-made batch), feed-fed,
#     queue-fed; hidden = (input_queue + train - queue) / input_queue. Fashion-MNIST's input
#     is about 1% of a step, below the noise, so the mlp is also measured with simulated
#     preprocessing (--prep 20: 40 element-wise passes over each batch, in both inputs).
#  2. floe train itself, PAIRS alternating feed / queue runs of one epoch: median samples/s
#     of each and the geometric mean of the per-pair ratios (a pair shares the machine's
#     load, so the ratio is steadier than either number).
#
# Usage: bench/run_input.sh [mlp|cnn|all] [PAIRS]   (after `make` and `make -C bench bench`)
# Prints the JSON lines, then a summary table.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
models=${1:-all}
[ "$models" = all ] && models="mlp cnn"
pairs=${2:-6}
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
[ -x "$top/bench/bench_input" ] || make -s -C "$top/bench" bench_input

for m in $models; do
  # The CNN's steps are 30x the MLP's: fewer examples keep the run short.
  if [ "$m" = mlp ]; then lim=20000; tl=60000; else lim=2560; tl=6400; fi
  if [ "$m" = mlp ]; then preps="0 20"; else preps=0; fi
  for p in $preps; do
    "$top/bench/bench_input" --model "$m" --limit "$lim" --repeats 7 --prep "$p" |
      sed 's/^{/{"kind":"modes",/' | tee -a "$out"
  done
  i=0
  while [ "$i" -lt "$pairs" ]; do
    for inp in feed queue; do
      "$top/tools/floe" train --model "$m" --epochs 1 --limit "$tl" --input "$inp" --json |
        tail -n 1 | sed 's/^{/{"kind":"train",/' | tee -a "$out"
    done
    i=$((i + 1))
  done
done

python3 - "$out" "$pairs" <<'PY'
import json, math, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print()
notes = []
print("bench_input (seconds, median of 7; hidden from the medians and from the minima):")
print()
print("| model | prep | input alone, feed / queue | train alone | feed-fed | queue-fed | hidden |")
print("| --- | ---: | --- | ---: | ---: | ---: | --- |")
for b in (r for r in rows if r["kind"] == "modes"):
    print("| %s | %d | %.4f / %.4f | %.3f | %.3f | %.3f | %.0f%% (minima: %.0f%%) |" % (
        b["model"], b["prep"], b["input_feed_s"], b["input_queue_s"], b["train_s"], b["feed_s"],
        b["queue_s"], 100 * b["hidden"], 100 * b["hidden_min"]))
print()
print("floe train, one epoch, alternating pairs:")
print()
print("| model | samples/s, feed / queue (medians) | queue / feed (geometric mean of %s pairs, range) |" % sys.argv[2])
print("| --- | --- | --- |")
for m in ("mlp", "cnn"):
    runs = [r for r in rows if r["kind"] == "train" and r["model"] == m]
    if not runs:
        continue
    feed = [r["samples_per_sec"] for r in runs if r["input"] == "feed"]
    queue = [r["samples_per_sec"] for r in runs if r["input"] == "queue"]
    ratios = [q / f for f, q in zip(feed, queue)]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print("| %s | %.0f / %.0f | %.2f (%.2f..%.2f) |" % (
        m, statistics.median(feed), statistics.median(queue), geo, min(ratios), max(ratios)))
    losses = {r["final_loss"] for r in runs}
    notes.append("%s: the %d floe train runs %s the same final loss" % (
        m, len(runs), "all have" if len(losses) == 1 else "do NOT have"))
print()
print("\n".join(notes))
PY
