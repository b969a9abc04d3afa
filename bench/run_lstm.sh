#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# LSTM word language-model training throughput side by side in one run: `floe train --model
# lstm` against PyTorch (nn.LSTM) and TensorFlow (Keras LSTM) from bench/lstm_baselines.py,
# with the same model (embedding 512, 2 x LSTM 512, full softmax over 10,000 ids), batch
# (64), unrolled steps (35, state carried between windows), optimiser (Adam 1e-3, constant;
# Floe's output layer otherwise has its own 0.05 by default, so --softmax-lr 0.001 unless
# FLOE_LSTM_ARGS asks for the sampled softmax) and data: the fortune corpus as Floe tokenizes it, written once by bench/lstm_corpus and
# read by the baselines. Every system gets 1 and 2 threads, each with OMP_WAIT_POLICY=passive
# and active; the best setting of each is compared (words/s). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset for all.
#
# Usage: bench/run_lstm.sh [STEPS] [EVAL_WINDOWS]   (after `make` and bench/setup_venv.sh)
#   STEPS: timed training steps of each baseline and Floe's --steps (default 100)
#   EVAL_WINDOWS: held-out windows the baselines evaluate for a perplexity (default 0: none)
# Environment: PYTHON (default bench/.venv/bin/python), FORTUNES_DIR (--data of the corpus),
#   FLOE_LSTM_ARGS (more `floe train` options, e.g. "--sampled-softmax 1024"), ROUNDS (how
#   many times the whole set of runs repeats, default 1: on a shared machine the load changes
#   within minutes, and each round's ratio shows how much that moves the result).
# Floe is skipped, with a message, while `floe train --help` does not list the lstm model.
# Prints one JSON line per run, then a summary table.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-100}
eval_windows=${2:-0}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export FLOE_PLUGIN_PATH="$top/plugins/cpu/.libs"
py=${PYTHON:-$top/bench/.venv/bin/python}
floe="$top/tools/floe"
out=$(mktemp)
data=$(mktemp -d)
trap 'rm -rf "$out" "$data"' EXIT

make -s -C "$top/bench" lstm_corpus >/dev/null
"$top/bench/lstm_corpus" "$data" ${FORTUNES_DIR:+--data "$FORTUNES_DIR"} |
  sed 's/^{/{"corpus":true,/' | tee -a "$out"
# The ids the baselines read are the text as floe_text.h defines it (an independent Python
# tokenizer agrees), so every system trains on the same data.
python3 "$top/bench/check_text_corpus.py" "$data" ${FORTUNES_DIR:+--data "$FORTUNES_DIR"}

run_floe=yes
if [ ! -x "$floe" ]; then
  echo "run_lstm.sh: skipping Floe: $floe is not built (run make)" >&2
  run_floe=no
elif ! "$floe" train --help 2>&1 | grep -q lstm; then
  echo "run_lstm.sh: skipping Floe: this build's \`floe train\` has no lstm model" \
    "(\`floe train --help\` does not list it); measuring the baselines only" >&2
  run_floe=no
fi
run_py=yes
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "run_lstm.sh: skipping the baselines: $py has no numpy (run bench/setup_venv.sh or set PYTHON)" >&2
  run_py=no
fi

rounds=${ROUNDS:-1}
for round in $(seq 1 "$rounds"); do
for t in 1 2; do
  # The full softmax with the baselines' one Adam (the sampled one keeps its output rate).
  case " ${FLOE_LSTM_ARGS:-} " in *" --sampled-softmax"*) one_rate= ;; *) one_rate="--softmax-lr 0.001" ;; esac
  for w in passive active; do
    if [ $run_floe = yes ]; then
      # shellcheck disable=SC2086 # FLOE_LSTM_ARGS is a list of options
      if ! OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$floe" train --model lstm --steps "$steps" \
          --threads "$t" $one_rate ${FORTUNES_DIR:+--data "$FORTUNES_DIR"} $FLOE_LSTM_ARGS --json \
          >"$data/floe.out" 2>&1; then
        echo "run_lstm.sh: floe train --model lstm failed:" >&2
        tail -n 3 "$data/floe.out" >&2
      else
        grep '^{' "$data/floe.out" | tail -n 1 |
          sed "s/^{/{\"system\":\"floe\",\"round\":$round,\"threads\":$t,\"omp_wait_policy\":\"$w\",/" |
          tee -a "$out"
      fi
    fi
    if [ $run_py = yes ]; then
      for sys in torch tf; do
        if OMP_WAIT_POLICY=$w OMP_NUM_THREADS=$t "$py" "$top/bench/lstm_baselines.py" \
            --system $sys --data "$data" --threads "$t" --steps "$steps" \
            --eval-windows "$eval_windows" --json >"$data/py.out" 2>"$data/py.err"; then
          sed "s/^{/{\"round\": $round, /" "$data/py.out" | tee -a "$out"
        else
          echo "run_lstm.sh: the $sys baseline failed:" >&2
          tail -n 3 "$data/py.err" >&2
        fi
      done
    fi
  done
done
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
corpus = next((r for r in rows if r.get("corpus")), None)
best = {}
for r in rows:
    if r.get("corpus") or "words_per_sec" not in r:
        continue
    s = r["system"]
    if s not in best or r["words_per_sec"] > best[s]["words_per_sec"]:
        best[s] = r
print()
if corpus:
    print("corpus: %d ids in the vocabulary, %d training ids, %d held-out ids (<unk> %.1f%%); "
          "unigram perplexity of the held-out split %.1f"
          % (corpus["vocab"], corpus["train_ids"], corpus["test_ids"],
             100 * corpus["unk_rate_test"], corpus["unigram_perplexity"]))
fmt = "%-11s %-16s %-12s %11s %10s %11s %8s"
print(fmt % ("system", "version", "threads", "words/s", "loss", "perplexity", "RSS MB"))
for s, r in sorted(best.items()):
    ppl = r.get("perplexity", r.get("test_perplexity"))
    # the last step's loss: Floe's final_loss is its last epoch's mean (as floe train's other
    # models), its last_loss the last window's, the baselines' final_loss
    loss = r.get("last_loss", r.get("final_loss"))
    print(fmt % (s, str(r.get("version", ""))[:16],
                 "%s %s" % (r.get("threads", "?"), (r.get("omp_wait_policy") or "")[:4]),
                 "%.0f" % r["words_per_sec"], "%.3f" % loss if loss is not None else "-",
                 "%.1f" % ppl if ppl else "-", "%.0f" % r.get("peak_rss_mb", 0)))
rounds = sorted({r.get("round", 1) for r in rows if "words_per_sec" in r})
if len(rounds) > 1:
    for k in rounds:
        top = {}
        for r in rows:
            if "words_per_sec" in r and r.get("round", 1) == k:
                top[r["system"]] = max(top.get(r["system"], 0), r["words_per_sec"])
        base = max((v for s, v in top.items() if s != "floe"), default=0)
        if "floe" in top and base:
            print("round %d: floe %.0f, fastest baseline %.0f words/s: %.2fx"
                  % (k, top["floe"], base, top["floe"] / base))
f = best.get("floe")
others = [r for s, r in best.items() if s != "floe"]
if others:
    o = max(others, key=lambda r: r["words_per_sec"])
    if f:
        print("floe / fastest baseline (%s) = %.2fx words/s (target 1.2x)"
              % (o["system"], f["words_per_sec"] / o["words_per_sec"]))
    else:
        print("no Floe figure: fastest baseline %s at %.0f words/s" % (o["system"], o["words_per_sec"]))
PY
