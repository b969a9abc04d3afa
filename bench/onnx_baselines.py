# SPDX-License-Identifier: Apache-2.0
"""The ONNX benchmark's baselines: the same model in ONNX Runtime (resnet.onnx) and PyTorch
(resnet.pt, the network it was exported from) on the same input, timed like bench_onnx.

usage: onnx_baselines.py DIR INPUT.npy ITERS RUNTIME THREADS [TOP1_OUT]
RUNTIME is onnxruntime or torch; prints one JSON line like bench_onnx's."""
import json
import statistics
import sys
import time

import numpy as np


def main():
    d, inp, iters, runtime, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    x = np.load(inp)
    if runtime == "onnxruntime":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(f"{d}/resnet.onnx", so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        run = lambda: sess.run(None, {name: x})[0]
    else:
        import torch
        torch.set_num_threads(threads)
        net = torch.jit.load(f"{d}/resnet.pt").eval()
        xt = torch.from_numpy(x)
        def run():
            with torch.inference_mode():
                return net(xt).numpy()
    for _ in range(3):
        y = run()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        y = run()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(json.dumps({"runtime": runtime, "threads": threads, "batch": x.shape[0], "iters": iters,
                      "median_s": med, "mean_s": sum(times) / len(times),
                      "images_per_s": x.shape[0] / med}))
    if len(sys.argv) > 6:
        np.savetxt(sys.argv[6], y.argmax(axis=1), fmt="%d")


if __name__ == "__main__":
    main()
