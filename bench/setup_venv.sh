#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Creates bench/.venv (git-ignored) with the baselines Floe is measured against:
# tensorflow-cpu and torch from PyPI. Only bench/ uses it; Floe never depends on it.
# Where PyPI cannot be reached, Debian's python3-torch (1.13) is the fallback for torch.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/.venv/bin/python" ] || python3 -m venv "$here/.venv"
"$here/.venv/bin/pip" install -q --upgrade pip
"$here/.venv/bin/pip" install -q tensorflow-cpu torch numpy safetensors onnx onnxruntime
# torchvision's models for bench/run_torchvision.sh; without its dependencies, so that it does
# not replace the torch above (it only needs pillow besides)
"$here/.venv/bin/pip" install -q --no-deps torchvision && "$here/.venv/bin/pip" install -q pillow
"$here/.venv/bin/python" -c 'import tensorflow, torch; print("tensorflow", tensorflow.__version__, "torch", torch.__version__)'
