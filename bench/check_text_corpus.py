# SPDX-License-Identifier: Apache-2.0
"""Checks a folder written by bench/lstm_corpus against an independent reimplementation of
floe_text.h's corpus rules in plain Python (standard library only): same tokens, vocabulary,
split, ids and counts. It documents the tokenizer for readers of the baselines and guards
that they train on the text as floe_text.h defines it.

Usage: check_text_corpus.py CORPUS_DIR [--data FORTUNES_DIR] [--holdout-every K]
Prints one line and exits 0 when everything matches, 1 naming the first difference."""
import argparse
import array
import ast
import os
import re
import sys

# A word: runs of word bytes (ASCII letters, digits, bytes >= 0x80) joined by single ' or -;
# a punctuation token: a run of one of . , ; : ! ? (kept once); anything else separates.
WORD = rb"[a-z0-9\x80-\xff]"
TOKEN = re.compile(rb"%s+(?:['\-]%s+)*|\.+|,+|;+|:+|!+|\?+" % (WORD, WORD))


def normalize(text):
    """A backspace deletes the byte before it; ASCII letters are lowercased."""
    out = bytearray()
    for c in text:
        if c == 8:
            if out:
                out.pop()
        else:
            out.append(c)
    return bytes(out).lower()  # bytes.lower() changes ASCII A-Z only


def tokens(text):
    return [m.group(0)[:1] if m.group(0)[:1] in b".,;:!?" else m.group(0)
            for m in TOKEN.finditer(normalize(text))]


def fortunes(path):
    """The fortunes of one file: text between lines holding only '%' (or '%\\r')."""
    cur = []
    with open(path, "rb") as f:
        data = f.read()
    for line in data.split(b"\n"):
        if line in (b"%", b"%\r"):
            yield b"\n".join(cur)
            cur = []
        else:
            cur.append(line)
    yield b"\n".join(cur)


def load_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        sys.exit("%s: not a .npy file" % path)
    hlen = int.from_bytes(data[8:10], "little")
    hdr = ast.literal_eval(data[10:10 + hlen].decode("latin1"))
    code = {"<i4": "i", "<i8": "q"}[hdr["descr"]]
    a = array.array(code)
    a.frombytes(data[10 + hlen:])
    if sys.byteorder != "little":
        a.byteswap()
    return list(a)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus_dir")
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--holdout-every", type=int, default=10)
    a = ap.parse_args()
    names = sorted(n for n in os.listdir(a.data)
                   if not n.startswith(".") and not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(a.data, n)))
    every = a.holdout_every
    toks = [t for n in names for t in map(tokens, fortunes(os.path.join(a.data, n))) if t]
    train = [t for k, t in enumerate(toks) if k % every != every - 1]
    test = [t for k, t in enumerate(toks) if k % every == every - 1]
    with open(os.path.join(a.corpus_dir, "vocab.txt"), "rb") as f:
        vocab = f.read().split(b"\n")[:-1]
    counts = {}
    for t in train:
        for w in t:
            counts[w] = counts.get(w, 0) + 1
    want_vocab = [b"<unk>", b"<eos>"] + sorted(counts, key=lambda w: (-counts[w], w))[:len(vocab) - 2]
    if vocab != want_vocab:
        i = next(i for i, (x, y) in enumerate(zip(vocab + [None], want_vocab + [None])) if x != y)
        sys.exit("vocab.txt line %d: %r, the rules give %r" % (i + 1, vocab[i] if i < len(vocab)
                 else None, want_vocab[i] if i < len(want_vocab) else None))
    ids = {w: i for i, w in enumerate(vocab)}
    for split, fs in (("train", train), ("test", test)):
        want = []
        for t in fs:
            want += [ids.get(w, 0) for w in t] + [1]
        got = load_npy(os.path.join(a.corpus_dir, split + ".npy"))
        if got != want:
            n = min(len(got), len(want))
            i = next((i for i in range(n) if got[i] != want[i]), n)
            sys.exit("%s.npy differs at id %d of %d (expected %d ids)" % (split, i, len(got), len(want)))
    want_counts = [0] * len(vocab)
    for t in train:
        for w in t:
            want_counts[ids.get(w, 0)] += 1
        want_counts[1] += 1
    if load_npy(os.path.join(a.corpus_dir, "counts.npy")) != want_counts:
        sys.exit("counts.npy differs from the training counts")
    print("check_text_corpus: %s matches the Python tokenizer on %d files (%d fortunes, %d "
          "training and %d held-out ids, %d vocabulary ids)"
          % (a.corpus_dir, len(names), len(toks), sum(len(t) + 1 for t in train),
             sum(len(t) + 1 for t in test), len(vocab)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
