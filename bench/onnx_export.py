# SPDX-License-Identifier: Apache-2.0
"""Makes the ONNX benchmark's fixture: a small ResNet (ResNet-18's layout at half width,
3x64x64 inputs, 10 classes) exported from PyTorch, the same network as TorchScript for the
PyTorch baseline, and a seeded input batch. Weights and batch-norm statistics are random
with a fixed seed (the benchmark measures speed and top-1 agreement, not accuracy).

usage: onnx_export.py OUTDIR [BATCH]
writes OUTDIR/resnet.onnx, OUTDIR/resnet.pt, OUTDIR/input_b1.npy, OUTDIR/input_bN.npy"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128, 256), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main():
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    net = ResNet()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    net.eval()
    rng = np.random.default_rng(1)
    x1 = rng.standard_normal((1, 3, 64, 64), dtype=np.float32)
    xb = rng.standard_normal((batch, 3, 64, 64), dtype=np.float32)
    np.save(f"{out}/input_b1.npy", x1)
    np.save(f"{out}/input_b{batch}.npy", xb)
    example = torch.from_numpy(x1)
    with torch.no_grad():
        torch.onnx.export(net, example, f"{out}/resnet.onnx", opset_version=13,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          do_constant_folding=True, dynamo=False)
        torch.jit.trace(net, example).save(f"{out}/resnet.pt")
    print(f"wrote {out}/resnet.onnx, resnet.pt, input_b1.npy, input_b{batch}.npy")


if __name__ == "__main__":
    main()
