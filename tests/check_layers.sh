#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check_layers.sh - calls between libfloe's layers point down (docs/architecture.md):
#   base < graph < runtime < exec < session < dist < train, data < top (core/*.c) < onnx
# train and data are siblings: neither calls the other. It reads the compiled objects with
# nm: an object of one layer that uses an internal symbol (floe__*) defined in a higher (or
# sibling) layer fails the check, naming both files and the symbol. The one exception is
# floe__host_api, the host table every layer hands to plugins and shape functions (it is
# assembled at the top from functions of every layer).
#
# Usage: check_layers.sh [CORE_BUILDDIR]   (default: $top_builddir/core, else ../core)
# Exit 0: no upward call; 1: upward calls (listed); 77: no objects (nothing built).
set -u
core=${1:-${top_builddir:-..}/core}
NM=${NM:-nm}
layers="base graph runtime exec session dist train data top onnx"
rank() {
  case $1 in
  base) echo 0 ;; graph) echo 1 ;; runtime) echo 2 ;; exec) echo 3 ;; session) echo 4 ;;
  dist) echo 5 ;; train | data) echo 6 ;; top) echo 7 ;; onnx) echo 8 ;;
  esac
}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
found=0
for l in $layers; do
  if [ "$l" = top ]; then dir=$core/.libs; else dir=$core/$l/.libs; fi
  for o in "$dir"/*.o; do
    [ -f "$o" ] || continue
    found=1
    # the source file's name: libtool objects are named <library>-<file>.o
    src=$(basename "$o" .o)
    src=${src##*-}.c
    if [ "$l" = top ]; then src=core/$src; else src=core/$l/$src; fi
    r=$(rank "$l")
    "$NM" --defined-only "$o" | awk -v l="$l" -v r="$r" -v s="$src" \
      '$3 ~ /^floe__/ {print $3, l, r, s}' >>"$tmp/defs"
    "$NM" --undefined-only "$o" | awk -v l="$l" -v r="$r" -v s="$src" \
      '$2 ~ /^floe__/ {print $2, l, r, s}' >>"$tmp/uses"
  done
done
if [ "$found" = 0 ]; then
  echo "check_layers: no objects under $core (build first)"
  exit 77
fi
: >>"$tmp/defs"
: >>"$tmp/uses"
# Every use joined with the definition's layer: upward (or sideways between train and data)
# is a violation. A symbol defined in two layers' objects (none should be) counts as the
# lowest.
awk '
  NR == FNR { if (!($1 in dr) || $3 < dr[$1]) { dr[$1] = $3; dl[$1] = $2; ds[$1] = $4 }; next }
  !($1 in dr) || $1 == "floe__host_api" { next }
  dr[$1] > $3 || (dr[$1] == $3 && dl[$1] != $2) {
    key = $4 " " $1
    if (key in seen) next
    seen[key] = 1
    printf "%s (%s) uses %s, defined in %s (%s): a layer may call only the layers below it\n",
      $4, $2, $1, ds[$1], dl[$1]
    bad++
  }
  END { exit bad > 0 }
' "$tmp/defs" "$tmp/uses"
rc=$?
if [ "$rc" = 0 ]; then
  echo "check_layers: $(wc -l <"$tmp/uses") internal references, none upward"
fi
exit "$rc"
