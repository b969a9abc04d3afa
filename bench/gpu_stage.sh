#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Packs what bench/gpu_check.sh needs on a GPU machine that has the NVIDIA driver, CUDA,
# cuBLAS, cuDNN and PyTorch but none of Floe's Debian libraries: the built Floe (libfloe,
# the cpu, cuda, tpu-sim and local-transport plugins, `floe`, ops/test_cuda,
# ops/test_devices, bench_cuda_matmul), the shared libraries they need that such a machine
# lacks (OpenBLAS, oneDNN and theirs, protobuf-c, subunit) and Fashion-MNIST, into
# STAGE (default .gpu, which .git/info/exclude should ignore), about 45 MB.
#
# Usage, from the top of a tree configured with the CUDA plugin:
#   bench/gpu_stage.sh [STAGE]      then carry STAGE and run bench/gpu_check.sh STAGE there
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
stage=${1:-$top/.gpu}
data=${FLOE_DATA:-/usr/share/datasets/fashion-mnist}
cd "$top"
make -s -j"$(nproc)"
[ -f plugins/cuda/.libs/floe-cuda.so ] || {
  echo "gpu_stage: no CUDA plugin was built: configure it with the CUDA toolkit" >&2
  exit 1
}
make -s -C tests ops/test_cuda ops/test_devices
make -s -C bench bench_cuda_matmul

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t=$tmp/floe
mkdir -p "$t/lib" "$t/bin"
for p in cpu cuda tpu-sim transport/local; do
  mkdir -p "$t/plugins/$p/.libs"
  cp plugins/$p/.libs/*.so "$t/plugins/$p/.libs/"
done
cp -L core/.libs/libfloe.so.0 core/.libs/libfloe-onnx.so.0 "$t/lib/"
cp tools/.libs/floe tests/ops/.libs/test_cuda tests/ops/.libs/test_devices \
  bench/.libs/bench_cuda_matmul "$t/bin/"
# Third-party libraries from outside the system's CUDA and C/C++ runtime: the machine's own
# libstdc++, libgomp, libz and libc are newer and stay in use.
for f in "$t"/bin/* "$t"/plugins/*/.libs/*.so "$t"/plugins/transport/*/.libs/*.so; do
  LD_LIBRARY_PATH="$t/lib" ldd "$f"
done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -E 'lib(openblas|dnnl|gfortran|quadmath|OpenCL|protobuf-c|subunit)[.]' |
  while read -r l; do cp -L "$l" "$t/lib/"; done
strip --strip-unneeded "$t"/bin/* "$t"/lib/*.so* "$t"/plugins/*/.libs/*.so \
  "$t"/plugins/transport/*/.libs/*.so
rm -rf "$stage"
mkdir -p "$stage/data"
tar -C "$tmp" -cJf "$stage/floe.tar.xz" floe
cp "$data"/*-ubyte* "$stage/data/"
du -sh "$stage"
