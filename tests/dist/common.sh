# SPDX-License-Identifier: Apache-2.0
# common.sh - what the cluster scripts share (sourced): the floe command, the plugin folders
# make check names (CPU, local and fabric transports), a temporary folder removed at exit
# with the processes in $pids, and the pass/fail counters. Skips (77) without the fabric
# transport: tasks in separate processes need a network transport.
FLOE="${top_builddir}/tools/floe"
NPY="${top_srcdir}/tests/cli/npy.py"
FLOE_PLUGIN_PATH="${FLOE_PLUGIN_PATH:+$FLOE_PLUGIN_PATH:}${FLOE_TRANSPORT_DIR:-}:${FLOE_FABRIC_DIR:-}"
export FLOE_PLUGIN_PATH
[ -e "${top_builddir}/plugins/transport/fabric/.libs/floe-transport-fabric.so" ] ||
  { echo "SKIP: the fabric transport was not built (configure found no libfabric)"; exit 77; }
export FLOE_TRANSPORT=fabric
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
