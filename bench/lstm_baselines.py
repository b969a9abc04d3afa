# SPDX-License-Identifier: Apache-2.0
"""Word language-model training baselines for `floe train --model lstm`: the same model,
data, batching and optimiser in PyTorch (nn.LSTM) and TensorFlow (a Keras LSTM with a
tf.function training step), on the CPU.

Model: embedding (V, 512) -> LSTM 2 layers x 512 -> dense 512 x V -> full softmax,
cross-entropy averaged over batch and time; Adam, lr 1e-3, constant; no dropout, no
clipping; each framework's default initialisers. Data: the fortune corpus exactly as Floe
tokenizes it, read from the .npy files bench/lstm_corpus writes (--data), cut into windows as
TensorFlow's PTB reader (and floe_text_windows_new) does: the training ids in `batch` rows,
windows of steps + 1 ids, inputs the first `steps` and targets the last `steps`; the LSTM
state is carried from one window to the next (truncated BPTT) and reset at each epoch.

Prints one JSON object on stdout (--json) or a line of text: system, version, threads,
batch, steps_unrolled, train_steps, words_per_sec (target words of the timed steps, after
--warmup untimed ones, per second), final_loss (the last step's), mean_loss_last10,
unigram_perplexity (of the held-out ids, from counts.npy: the baseline to beat),
test_perplexity (with --eval-windows K: over the first K held-out windows, else null) and
peak_rss_mb."""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np


def load_corpus(d):
    train = np.load(os.path.join(d, "train.npy"))
    test = np.load(os.path.join(d, "test.npy"))
    counts = np.load(os.path.join(d, "counts.npy"))
    for name, a, dt in (("train.npy", train, np.int32), ("test.npy", test, np.int32),
                        ("counts.npy", counts, np.int64)):
        if a.dtype != dt or a.ndim != 1:
            sys.exit("%s/%s: expected a 1-D %s array, found %s %s (rerun bench/lstm_corpus)"
                     % (d, name, np.dtype(dt).name, a.dtype, a.shape))
    vocab = len(counts)
    if train.max() >= vocab or test.max() >= vocab or min(train.min(), test.min()) < 0:
        sys.exit("%s: ids outside the vocabulary of %d (rerun bench/lstm_corpus)" % (d, vocab))
    return train, test, counts


def unigram_perplexity(counts, test, train_len):
    """Add-one smoothed unigram model of the training counts (floe_text_unigram_perplexity)."""
    p = (counts.astype(np.float64) + 1.0) / (train_len + len(counts))
    return float(np.exp(-np.mean(np.log(p[test]))))


class Windows:
    """Endless PTB windows over ids: (x, y, new_epoch) with x, y int [batch, steps]."""

    def __init__(self, ids, batch, steps):
        row_len = len(ids) // batch
        self.data = ids[:batch * row_len].reshape(batch, row_len)
        self.steps = steps
        self.per_epoch = (row_len - 1) // steps
        if self.per_epoch < 1:
            sys.exit("%d ids are too few for one window of %d x (%d + 1)" % (len(ids), batch, steps))
        self.i = 0

    def next(self):
        new_epoch = self.i == 0
        s = self.i * self.steps
        w = self.data[:, s:s + self.steps + 1]
        self.i = (self.i + 1) % self.per_epoch
        return w[:, :-1], w[:, 1:], new_epoch


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_torch(a, train, test, vocab):
    import torch
    import torch.nn as nn
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, a.embed)
            self.lstm = nn.LSTM(a.embed, a.hidden, a.layers, batch_first=True)
            self.out = nn.Linear(a.hidden, vocab)

        def forward(self, x, state):
            y, state = self.lstm(self.emb(x), state)
            return self.out(y), state

    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()

    def zero_state():
        z = torch.zeros(a.layers, a.batch, a.hidden)
        return (z, z.clone())

    windows = Windows(train, a.batch, a.seq)
    state, losses, t0 = None, [], None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        x, y, new_epoch = windows.next()
        if new_epoch:
            state = zero_state()
        xt, yt = torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))
        opt.zero_grad(set_to_none=True)
        logits, state = model(xt, state)
        loss = loss_fn(logits.reshape(-1, vocab), yt.reshape(-1))
        loss.backward()
        opt.step()
        state = tuple(s.detach() for s in state)
        losses.append(float(loss.detach()))
    dt = time.perf_counter() - t0

    test_ppl = None
    if a.eval_windows:
        ev = Windows(test, a.batch, a.seq)
        total, n = 0.0, 0
        with torch.no_grad():
            state = zero_state()
            for _ in range(min(a.eval_windows, ev.per_epoch)):
                x, y, _ = ev.next()
                logits, state = model(torch.from_numpy(x.astype(np.int64)), state)
                total += float(loss_fn(logits.reshape(-1, vocab),
                                       torch.from_numpy(y.astype(np.int64)).reshape(-1)))
                n += 1
        test_ppl = math.exp(total / n)
    return {"system": "pytorch", "version": torch.__version__, "seconds": dt,
            "losses": losses, "test_perplexity": test_ppl}


def run_tf(a, train, test, vocab):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.random.set_seed(1)
    keras = tf.keras
    L = keras.layers
    x_in = keras.Input((a.seq,), batch_size=a.batch, dtype="int32")
    states_in = [keras.Input((a.hidden,), batch_size=a.batch) for _ in range(2 * a.layers)]
    h = L.Embedding(vocab, a.embed)(x_in)
    states_out = []
    for i in range(a.layers):
        h, hs, cs = L.LSTM(a.hidden, return_sequences=True, return_state=True)(
            h, initial_state=[states_in[2 * i], states_in[2 * i + 1]])
        states_out += [hs, cs]
    logits = L.Dense(vocab)(h)
    model = keras.Model([x_in] + states_in, [logits] + states_out)
    opt = keras.optimizers.Adam(learning_rate=a.lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y, states):
        with tf.GradientTape() as tape:
            out = model([x] + states, training=True)
            loss = loss_fn(y, out[0])
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, out[1:]

    @tf.function
    def eval_step(x, y, states):
        out = model([x] + states, training=False)
        return loss_fn(y, out[0]), out[1:]

    def zero_state():
        return [tf.zeros((a.batch, a.hidden)) for _ in range(2 * a.layers)]

    windows = Windows(train, a.batch, a.seq)
    state, losses, t0 = None, [], None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        x, y, new_epoch = windows.next()
        if new_epoch:
            state = zero_state()
        loss, state = train_step(tf.constant(x), tf.constant(y), state)
        state = list(state)
        losses.append(float(loss))
    dt = time.perf_counter() - t0

    test_ppl = None
    if a.eval_windows:
        ev = Windows(test, a.batch, a.seq)
        total, n, state = 0.0, 0, zero_state()
        for _ in range(min(a.eval_windows, ev.per_epoch)):
            x, y, _ = ev.next()
            loss, state = eval_step(tf.constant(x), tf.constant(y), state)
            state = list(state)
            total += float(loss)
            n += 1
        test_ppl = math.exp(total / n)
    return {"system": "tensorflow", "version": tf.__version__, "seconds": dt,
            "losses": losses, "test_perplexity": test_ppl}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["torch", "tf"], required=True)
    ap.add_argument("--data", required=True,
                    help="folder written by bench/lstm_corpus (train.npy, test.npy, counts.npy)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed training steps first")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=35, help="steps unrolled (window length)")
    ap.add_argument("--embed", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-windows", type=int, default=0,
                    help="held-out windows for test_perplexity (0: none)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--steps >= 1, --warmup >= 0 and --threads >= 1")
    train, test, counts = load_corpus(a.data)
    vocab = len(counts)
    fn = run_torch if a.system == "torch" else run_tf
    r = fn(a, train, test, vocab)
    losses = r.pop("losses")
    seconds = r.pop("seconds")
    r.update({"threads": a.threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
              "batch": a.batch, "steps_unrolled": a.seq, "train_steps": a.steps,
              "warmup_steps": a.warmup, "vocab": vocab,
              "words_per_sec": a.steps * a.batch * a.seq / seconds,
              "final_loss": losses[-1], "mean_loss_last10": float(np.mean(losses[-10:])),
              "unigram_perplexity": unigram_perplexity(counts, test, len(train)),
              "peak_rss_mb": peak_rss_mb()})
    if a.json:
        print(json.dumps(r))
    else:
        print("%s %s, %d threads: %.0f words/s, loss %.3f after %d steps (mean of the last 10 "
              "%.3f), held-out perplexity %s (unigram %.1f), peak RSS %.0f MB"
              % (r["system"], r["version"], a.threads, r["words_per_sec"], r["final_loss"],
                 a.warmup + a.steps, r["mean_loss_last10"],
                 "%.1f" % r["test_perplexity"] if r["test_perplexity"] else "not measured",
                 r["unigram_perplexity"], r["peak_rss_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
