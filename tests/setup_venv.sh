#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Creates a Python virtual environment (default tests/.venv, git-ignored) with the packages
# the interoperability tests check Floe against: safetensors and numpy (test_safetensors.sh
# reads Floe's checkpoints), onnx and onnxruntime (test_onnx_export.sh runs the exported
# models). Prints the environment's python on stdout, for FLOE_TEST_PYTHON (tests/README.md).
# Only the tests use it; Floe itself never depends on Python.
#   FLOE_TEST_PYTHON=$(sh tests/setup_venv.sh) make check
set -e
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check safetensors numpy onnx onnxruntime >&2
"$venv/bin/python" -c 'import safetensors, numpy, onnx, onnxruntime' >&2
echo "$venv/bin/python"
