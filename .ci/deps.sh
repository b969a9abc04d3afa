#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs everything Floe needs to build and test on Debian 12 (run as root): fortunes is
# the English text of the LSTM language model (floe train --model lstm, its tests); python3-venv
# makes the tests' Python environment (tests/setup_venv.sh); debhelper, lintian and mmdebstrap
# build and check the Debian packages (make deb, deb-check); libssl-dev and libjansson-dev are
# core/dist's (HMAC-SHA256, cluster specs), libpmix-dev its PMIx headers and openmpi-bin the
# mpirun its PMIx test runs under; libfabric-dev builds the
# fabric transport and libfabric-bin brings fi_info (the provider list); libucx-dev builds the
# ucx transport; iproute2 (ip, tc, ss) runs the cluster tests across network namespaces
# (tests/dist/test_netns.sh); nftables (nft: packet loss) and iptables (NFQUEUE: delays where
# the kernel has no netem) inject the faults of tests/dist/test_chaos.sh; libgloo-dev builds
# the Gloo collective backend (plugins/collective/gloo).
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  build-essential autoconf automake libtool pkg-config \
  check libsubunit-dev libopenblas-dev libdnnl-dev \
  abigail-tools valgrind python3 python3-venv binutils dataset-fashion-mnist zlib1g-dev fortunes \
  libprotobuf-c-dev protobuf-c-compiler libonnx-testdata \
  libssl-dev libjansson-dev libpmix-dev openmpi-bin \
  libfabric-dev libfabric-bin libucx-dev iproute2 nftables iptables libgloo-dev \
  debhelper lintian mmdebstrap
