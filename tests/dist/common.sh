# SPDX-License-Identifier: Apache-2.0
# common.sh - what the cluster scripts share (sourced): the floe command, the plugin folders
# make check names (CPU, local, fabric and ucx transports), a temporary folder removed at exit
# with the processes in $pids, and the pass/fail counters. Skips (77) without the network
# transport FLOE_TRANSPORT names (default fabric): tasks in separate processes need one.
FLOE="${top_builddir}/tools/floe"
NPY="${top_srcdir}/tests/cli/npy.py"
# (each folder once: a script that runs itself per transport sources this twice, and a folder
# named twice makes every process warn that it skipped the same plugins again)
for d in "${FLOE_TRANSPORT_DIR:-}" "${FLOE_FABRIC_DIR:-}" "${FLOE_UCX_DIR:-}"; do
  [ -n "$d" ] || continue
  case ":${FLOE_PLUGIN_PATH:-}:" in *":$d:"*) ;; *) FLOE_PLUGIN_PATH="${FLOE_PLUGIN_PATH:+$FLOE_PLUGIN_PATH:}$d" ;; esac
done
export FLOE_PLUGIN_PATH
# A script that sets each_transport=1 before sourcing this runs itself once per network
# transport built (fabric, then ucx) when FLOE_TRANSPORT is unset: 1 if any run failed, 77 if
# none could run.
if [ "${each_transport:-0}" = 1 ] && [ -z "${FLOE_TRANSPORT:-}" ]; then
  all=77
  for t in fabric ucx; do
    if [ ! -e "${top_builddir}/plugins/transport/$t/.libs/floe-transport-$t.so" ]; then
      echo "SKIP over $t: the $t transport was not built"; continue; fi
    echo "== FLOE_TRANSPORT=$t"
    FLOE_TRANSPORT=$t sh "$0" "$@"; r=$?
    if [ "$r" != 0 ] && [ "$r" != 77 ]; then all=1; elif [ "$r" = 0 ] && [ "$all" = 77 ]; then all=0; fi
  done
  exit "$all"
fi
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
# consistent DIR [STEP]: the newest sharded checkpoint of DIR (with STEP: the first past it) is
# whole (ckpt_check.py) and the step its index names is its global_step variable's value.
CKPT_CHECK="python3 ${top_srcdir}/tests/dist/ckpt_check.py"
consistent() {
  out=$($CKPT_CHECK "$@") || { bad "$1: $out"; return 1; }
  s=$(echo "$out" | cut -d' ' -f1); g=$(echo "$out" | cut -d' ' -f3)
  if [ "$s" = "$g" ]; then ok; else bad "$1: index step $s, global_step variable $g"; return 1; fi
}
