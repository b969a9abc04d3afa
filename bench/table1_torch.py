# SPDX-License-Identifier: Apache-2.0
"""The paper's Table 1 networks (AlexNet, VGG-11 "OxfordNet", GoogLeNet) trained on this CPU
by PyTorch, and exported for Floe.

export OUTDIR MODEL: OUTDIR/MODEL.onnx, torchvision's MODEL with 10 classes and seeded
  random weights (no download) in inference form (dropout off, batch norm with its running
  statistics: what `floe train --onnx` trains, the same computation on both sides). Batch
  norm's statistics are first measured on the first 64 training images (a pass in training
  mode): with the default ones (mean 0, variance 1) GoogLeNet's small initial weights shrink
  its activations layer after layer, its logits are all but 0 and no loss falls in 20 steps.
train MODEL BATCH STEPS EPOCHS LR THREADS: trains that model (the same construction) with
  Adam at a constant LR on the first BATCH*STEPS Fashion-MNIST training images, enlarged to
  3x224x224 as `floe train --onnx` enlarges them (each pixel 8x8 times, in all 3 channels,
  scaled to [0, 1]), STEPS steps an epoch; prints one JSON line: the median step time
  (the first step left out), each epoch's mean loss.

Fashion-MNIST comes from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
or $FASHION_MNIST_DIR)."""
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torchvision


def build(name):
    torch.manual_seed(0)
    kw = {"weights": None, "num_classes": 10}
    if name == "googlenet":
        kw.update(aux_logits=False, init_weights=True)
    m = getattr(torchvision.models, name)(**kw)
    bns = [b for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    if bns:
        for b in bns:
            b.momentum = None  # a plain average over the calibration pass
        m.train()
        with torch.no_grad():
            m(images(64)[0])
    return m.eval()


def export(out, name):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name + ".onnx")
    torch.onnx.export(build(name), torch.zeros(1, 3, 224, 224), path, input_names=["x"],
                      output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
    print(path)


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(n):
    """The first n training images enlarged to [n, 3, 224, 224], and their labels."""
    d = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    im = idx(os.path.join(d, "train-images-idx3-ubyte.gz"))[:n].astype(np.float32) / 255
    labels = torch.from_numpy(idx(os.path.join(d, "train-labels-idx1-ubyte.gz"))[:n].astype(np.int64))
    x = torch.from_numpy(im).repeat_interleave(8, 1).repeat_interleave(8, 2)
    return x[:, None].expand(n, 3, 224, 224).contiguous(), labels


def train(name, batch, steps, epochs, lr, threads):
    torch.set_num_threads(threads)
    n = batch * steps
    x, labels = images(n)
    m = build(name)
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    times, epoch_loss = [], []
    for _ in range(epochs):
        order = torch.randperm(n, generator=g)
        total = 0.0
        for s in range(steps):
            i = order[s * batch:(s + 1) * batch]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(m(x[i]), labels[i])
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            total += loss.item()
        epoch_loss.append(total / steps)
    print(json.dumps({"system": "torch", "model": name, "threads": threads, "batch": batch,
                      "step_ms": statistics.median(times[1:]) * 1e3,
                      "epoch_loss": epoch_loss}))


def main():
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    else:
        name, batch, steps, epochs, lr, threads = sys.argv[2:8]
        train(name, int(batch), int(steps), int(epochs), float(lr), int(threads))


if __name__ == "__main__":
    main()
