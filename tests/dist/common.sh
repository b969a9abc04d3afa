# SPDX-License-Identifier: Apache-2.0
# common.sh - what the cluster scripts share (sourced): the floe command, the plugin folders
# make check names (CPU, local, fabric and ucx transports), a temporary folder removed at exit
# with the processes in $pids, and the pass/fail counters. Skips (77) without the network
# transport FLOE_TRANSPORT names (default fabric): tasks in separate processes need one.
FLOE="${top_builddir}/tools/floe"
NPY="${top_srcdir}/tests/cli/npy.py"
FLOE_PLUGIN_PATH="${FLOE_PLUGIN_PATH:+$FLOE_PLUGIN_PATH:}${FLOE_TRANSPORT_DIR:-}:${FLOE_FABRIC_DIR:-}:${FLOE_UCX_DIR:-}"
export FLOE_PLUGIN_PATH
# FLOE_TRANSPORT=ucx make check ... runs the same scripts over the ucx transport.
export FLOE_TRANSPORT="${FLOE_TRANSPORT:-fabric}"
[ -e "${top_builddir}/plugins/transport/${FLOE_TRANSPORT}/.libs/floe-transport-${FLOE_TRANSPORT}.so" ] ||
  { echo "SKIP: the ${FLOE_TRANSPORT} transport was not built (configure found no library for it)"; exit 77; }
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
