#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_lib_abi.sh - the application ABI of libfloe.so.0 and libfloe-onnx.so.0 only grows.
#
# 1. Symbol versions: every symbol either library exports is floe_* in its public node
#    (FLOE_1.0 / FLOE_ONNX_1.0, or a later FLOE_1.N / FLOE_ONNX_1.N) or, for libfloe.so,
#    floe__* in FLOE_PRIVATE (the internals libfloe-onnx uses; core/libfloe.map); nothing
#    unversioned, nothing else.
# 2. When libabigail's abidw and abidiff are installed, each library's ABI is dumped and
#    compared with tests/abi/libfloe.abi / libfloe-onnx.abi (FLOE_PRIVATE suppressed by
#    libfloe.suppr). Additions (abidiff exit bit 4 alone, with no removed or changed
#    function or variable) pass with a note; anything incompatible fails.
#
# After a deliberate addition, or a new soname, regenerate and commit the baselines:
#
#     make abi-baseline        (runs: sh tests/abi/test_lib_abi.sh --update-baseline)
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
ABIDW=${ABIDW:-$(command -v abidw || true)}
ABIDIFF=${ABIDIFF:-$(command -v abidiff || true)}
update=no
[ "${1:-}" = "--update-baseline" ] && update=yes
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-libabi.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0

for lib in libfloe libfloe-onnx; do
  so=$top_builddir/core/.libs/$lib.so.0
  [ -f "$so" ] || { echo "FAIL: $so is not built"; exit 1; }
  case $lib in libfloe) node=FLOE ;; *) node=FLOE_ONNX ;; esac
  # objdump -T: "ADDR FLAGS SECTION SIZE VERSION NAME" for defined dynamic symbols.
  objdump -T "$so" | awk '$4 != "*UND*" && $4 != "*ABS*" && NF >= 7 && $0 ~ / DF | DO / {print $(NF-1), $NF}' \
    >"$tmp/syms" || { echo "FAIL: objdump -T $so"; exit 1; }
  bad=$(awk -v n="$node" -v lib="$lib" '
    $1 ~ "^" n "_1\\.[0-9]+$" && $2 ~ /^floe_[a-z0-9]/ { next }
    lib == "libfloe" && $1 == "FLOE_PRIVATE" && $2 ~ /^floe__/ { next }
    { print "  " $2 " (" $1 ")" }' "$tmp/syms")
  if [ -n "$bad" ]; then
    echo "FAIL: $lib.so exports symbols outside its version nodes (core/$lib.map):"
    echo "$bad"
    fail=1
  else
    echo "PASS: $lib.so: $(grep -c . "$tmp/syms") symbols, all in their version nodes"
  fi
done

if [ -z "$ABIDW" ] || [ -z "$ABIDIFF" ]; then
  echo "SKIP: abidw/abidiff not found (install abigail-tools): library ABI not compared"
  exit $fail
fi
for lib in libfloe libfloe-onnx; do
  so=$top_builddir/core/.libs/$lib.so.0
  baseline=$top_srcdir/tests/abi/$lib.abi
  if ! "$ABIDW" --no-corpus-path --no-comp-dir-path --no-show-locs --out-file "$tmp/$lib.abi" "$so"; then
    echo "FAIL: abidw could not dump $so"; fail=1; continue
  fi
  if ! grep -q '<abi-instr' "$tmp/$lib.abi"; then
    echo "SKIP: $so has no debug information (build with -g): $lib ABI not compared"; continue
  fi
  if [ "$update" = yes ]; then
    cp "$tmp/$lib.abi" "$baseline" && echo "updated $baseline" || fail=1
    continue
  fi
  [ -f "$baseline" ] || { echo "FAIL: $baseline is missing (make abi-baseline)"; fail=1; continue; }
  "$ABIDIFF" --suppressions "$top_srcdir/tests/abi/libfloe.suppr" "$baseline" "$tmp/$lib.abi" \
    >"$tmp/diff.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "PASS: $lib ABI matches tests/abi/$lib.abi"
  elif [ $((rc & 8)) -eq 0 ] && [ $((rc & 3)) -eq 0 ] &&
       ! grep -Eq '[1-9][0-9]* Removed|[1-9][0-9]* Changed' "$tmp/diff.txt"; then
    echo "PASS: $lib ABI only grew since tests/abi/$lib.abi (abidiff exit $rc); when the"
    echo "      additions are released, give them a new version node and run make abi-baseline:"
    grep -E 'Added|^  \[A\]' "$tmp/diff.txt" | head -20
  else
    echo "FAIL: $lib ABI changed incompatibly against tests/abi/$lib.abi (abidiff exit $rc):"
    cat "$tmp/diff.txt"
    echo "      A deliberate break needs a new soname (core/Makefile.am -version-info) and"
    echo "      make abi-baseline; see tests/README.md."
    fail=1
  fi
done
exit $fail
