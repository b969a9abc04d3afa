# SPDX-License-Identifier: Apache-2.0
"""The torchvision benchmark's fixtures: a classification model of torchvision built with
seeded random weights (no download) and seeded batch-norm statistics, exported by torch.onnx
(opset 17, the batch dimension dynamic), and a seeded input batch per batch size. The
benchmark measures speed and top-1 agreement between runtimes, not accuracy.

usage: torchvision_export.py OUTDIR MODEL BATCH [BATCH...]
writes OUTDIR/MODEL.onnx and OUTDIR/MODEL_bN.npy (3x224x224 images, or 299x299 for
inception_v3)"""
import os
import sys

import numpy as np
import torch
import torchvision


def main():
    out, name, batches = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3:]]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    kw = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    m = getattr(torchvision.models, name)(**kw).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():  # statistics that are not the identity
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
    side = 299 if name == "inception_v3" else 224
    onnx_path = os.path.join(out, name + ".onnx")
    x0 = torch.randn(1, 3, side, side, generator=g)
    torch.onnx.export(m, x0, onnx_path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    for b in batches:
        x = torch.randn(b, 3, side, side, generator=torch.Generator().manual_seed(100 + b))
        np.save(os.path.join(out, "%s_b%d.npy" % (name, b)), x.numpy())
    print(onnx_path)


if __name__ == "__main__":
    main()
