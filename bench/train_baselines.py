# SPDX-License-Identifier: Apache-2.0
"""Training-throughput baselines for `floe train`: the same models (mlp 784-512-256-10 ReLU;
cnn conv5x5x32-pool-conv5x5x64-pool-dense1024-dense10, NHWC / NCHW as each framework
prefers), batch, optimiser (Adam, lr 1e-3) and data (Fashion-MNIST from Debian's
dataset-fashion-mnist, shuffled each epoch) in PyTorch and TensorFlow (a Keras model with a
tf.function training step), on the CPU, or PyTorch on a GPU (--device cuda): each batch is
copied to the GPU as Floe's steps copy theirs, and --precision f32 (the default) turns off
TF32 in cuBLAS and cuDNN, as Floe's FLOE_CUDA_MATMUL=f32 does (tf32 allows it in both;
bf16 runs the model under autocast to bfloat16).

Prints one JSON object on stdout: system, version, model, batch, threads, steps,
samples_per_sec (training steps only, after warm-up), final_loss, peak_rss_mb."""
import argparse
import gzip
import json
import os
import resource
import struct
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xff
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir):
    x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    return x, y


def batches(x, y, batch, seed):
    """Endless shuffled batches, a new permutation each epoch; drops the short last batch."""
    rng = np.random.default_rng(seed)
    n = len(x) // batch * batch
    while True:
        perm = rng.permutation(len(x))[:n]
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            yield x[idx], y[idx]


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_torch(model_name, x, y, batch, steps, warmup, threads, device="cpu", precision="f32"):
    import contextlib
    import torch
    import torch.nn as nn
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    if device != "cpu":
        tf32 = precision != "f32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True  # its best setting for fixed shapes
    if model_name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                              nn.ReLU(), nn.Linear(256, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(),
                              nn.Linear(1024, 10))
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    cast = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if precision == "bf16"
            else contextlib.nullcontext())
    it = batches(x, y, batch, 1)
    loss = None
    t0 = None
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        xb, yb = next(it)
        xt = torch.from_numpy(xb).reshape(batch, 1, 28, 28).to(device)
        yt = torch.from_numpy(yb).to(device)
        opt.zero_grad(set_to_none=True)
        with cast:
            loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
    final = float(loss.detach())  # waits for the GPU's queued steps
    dt = time.perf_counter() - t0
    r = {"system": "pytorch", "version": torch.__version__, "samples_per_sec": steps * batch / dt,
         "final_loss": final, "device": device}
    if device != "cpu":
        r["gpu"] = torch.cuda.get_device_name()
        r["precision"] = precision
    return r


def run_tf(model_name, x, y, batch, steps, warmup, threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.random.set_seed(1)
    L = tf.keras.layers
    if model_name == "mlp":
        model = tf.keras.Sequential([tf.keras.Input((28, 28)), L.Flatten(),
                                     L.Dense(512, activation="relu"),
                                     L.Dense(256, activation="relu"), L.Dense(10)])
    else:
        model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)),
                                     L.Conv2D(32, 5, padding="same", activation="relu"),
                                     L.MaxPool2D(2),
                                     L.Conv2D(64, 5, padding="same", activation="relu"),
                                     L.MaxPool2D(2), L.Flatten(),
                                     L.Dense(1024, activation="relu"), L.Dense(10)])
    opt = tf.keras.optimizers.Adam(learning_rate=1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    it = batches(x, y, batch, 1)
    shape = (batch, 28, 28) if model_name == "mlp" else (batch, 28, 28, 1)
    loss = None
    t0 = None
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        xb, yb = next(it)
        loss = train_step(tf.constant(xb.reshape(shape)), tf.constant(yb))
    final = float(loss)
    dt = time.perf_counter() - t0
    return {"system": "tensorflow", "version": tf.__version__,
            "samples_per_sec": steps * batch / dt, "final_loss": final}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--system", choices=["torch", "tf"], required=True)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N (torch only)")
    ap.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="f32",
                    help="matrix precision on a GPU (torch only)")
    a = ap.parse_args()
    x, y = load(a.data)
    if a.system == "torch":
        r = run_torch(a.model, x, y, a.batch, a.steps, a.warmup, a.threads, a.device, a.precision)
    elif a.device != "cpu":
        ap.error("--device is for --system torch")
    else:
        r = run_tf(a.model, x, y, a.batch, a.steps, a.warmup, a.threads)
    r.update({"model": a.model, "batch": a.batch, "threads": a.threads, "steps": a.steps,
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
              "peak_rss_mb": peak_rss_mb()})
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
