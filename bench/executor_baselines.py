# SPDX-License-Identifier: Apache-2.0
"""Executor-overhead baselines for bench/bench_executor.c: the same 10,000 scalar adds as
a chain (a = a + 1) and as independent adds (x + c_i, distinct constants), in TensorFlow (a tf.function graph) and PyTorch eager.
Prints one JSON object per system and thread setting on stdout."""
import argparse
import json
import os
import statistics
import sys
import time


def median_time(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_torch(nodes, reps, threads):
    import torch
    torch.set_num_threads(threads)
    x = torch.tensor(0.0)
    one = torch.tensor(1.0)

    def chain():
        a = x
        for _ in range(nodes):
            a = a + one
        return a

    consts = [torch.tensor(float(i)) for i in range(nodes)]

    def wide():
        for c in consts:
            _ = x + c

    assert float(chain()) == nodes
    return {"system": "pytorch-eager", "version": torch.__version__, "threads": threads,
            "chain_us_per_node": median_time(chain, reps) / nodes * 1e6,
            "wide_us_per_node": median_time(wide, reps) / nodes * 1e6}


def bench_tf(nodes, reps, threads, grappler):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    # Grappler rewrites the 10,000 identical adds (CSE, arithmetic folding) before the
    # executor sees them; with it off, the executor runs every node as Floe's does.
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not grappler})
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    one = tf.constant(1.0)

    @tf.function
    def chain(x):
        a = x
        for _ in range(nodes):
            a = a + one
        return a

    @tf.function
    def wide(x):
        # Distinct constants: identical adds would be merged by common-subexpression
        # elimination, which runs even with Grappler off.
        outs = [x + tf.constant(float(i)) for i in range(nodes)]
        # Returned control dependencies keep every add alive (unused adds would be pruned).
        with tf.control_dependencies(outs):
            return tf.identity(x)

    x = tf.constant(0.0)
    assert float(chain(x)) == nodes
    wide(x)
    return {"system": "tensorflow-graph" + ("" if grappler else "-no-grappler"),
            "version": tf.__version__, "threads": threads,
            "chain_us_per_node": median_time(lambda: chain(x), reps) / nodes * 1e6,
            "wide_us_per_node": median_time(lambda: wide(x), reps) / nodes * 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--system", choices=["torch", "tf", "tf-no-grappler"], required=True)
    a = ap.parse_args()
    try:
        if a.system == "torch":
            result = bench_torch(a.nodes, a.reps, a.threads)
        else:
            result = bench_tf(a.nodes, a.reps, a.threads, a.system == "tf")
        print(json.dumps(result))
    except ImportError as e:
        print(json.dumps({"system": a.system, "error": str(e)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
