# SPDX-License-Identifier: Apache-2.0
"""ONNX Runtime on one torchvision model (bench/torchvision_export.py), every graph
optimisation on, timed like bench_onnx: warm-up runs, then ITERS runs; one JSON line.

usage: torchvision_ort.py MODEL.onnx INPUT.npy ITERS THREADS TOP1_OUT"""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    model, inp, iters, threads, top1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = np.load(inp)
    name = sess.get_inputs()[0].name
    for _ in range(3):
        y = sess.run(None, {name: x})[0]
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        y = sess.run(None, {name: x})[0]
        ts.append(time.perf_counter() - t)
    with open(top1, "w") as f:
        f.write("".join("%d\n" % i for i in y.argmax(axis=1)))
    med = statistics.median(ts)
    print(json.dumps({"runtime": "onnxruntime", "threads": threads, "batch": int(x.shape[0]),
                      "iters": iters, "median_s": med, "images_per_s": x.shape[0] / med}))


if __name__ == "__main__":
    main()
