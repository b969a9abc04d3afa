#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_headers.sh - the installed headers stand alone, and the plugin ABI is unchanged.
#
# 1. Each public header compiles alone (included twice, for its guard) as C99, C11 and C++11
#    with -Wall -Wextra -Werror -pedantic, using $CC / $CXX; floe_plugin.h's macros
#    (FLOE_PLUGIN_DECLARE, FLOE_HAS_FIELD) are expanded in each language too.
# 2. When libabigail's abidw and abidiff are installed, a tiny shared object whose exported
#    functions take every struct and enum of floe_plugin.h is built with -g, its ABI dumped,
#    and compared with tests/abi/baseline.abi. Any difference fails: the plugin ABI only
#    changes on purpose. The baselines of earlier minors (tests/abi/baseline-1.N.abi) must
#    differ from today's only compatibly: abidiff may report additions (exit bit 4) but never
#    an incompatible change (bit 8), so plugins built against any 1.N still load.
#
# When the ABI changes deliberately (slots appended for a new minor, or a new major), bump
# FLOE_ABI_MINOR / FLOE_ABI_MAJOR, keep the old baseline as tests/abi/baseline-1.N.abi (N the
# old minor), regenerate the baseline and commit both with the change:
#
#     top_srcdir=$PWD sh tests/abi/test_headers.sh --update-baseline
#
# (from the source tree; CC, ABIDW and ABIDIFF default to cc, abidw and abidiff).
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
CC=${CC:-cc}
CXX=${CXX:-c++}
ABIDW=${ABIDW:-$(command -v abidw || true)}
ABIDIFF=${ABIDIFF:-$(command -v abidiff || true)}
inc=$top_srcdir/sdk/include
baseline=$top_srcdir/tests/abi/baseline.abi
update=no
[ "${1:-}" = "--update-baseline" ] && update=yes

tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-headers.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0

for h in floe_types.h floe.h floe_plugin.h floe_train.h floe_control.h floe_tensor_array.h \
    floe_rnn.h floe_text.h floe_data.h; do
  {
    printf '#include <floe/%s>\n#include <floe/%s>\n' "$h" "$h"
    if [ "$h" = floe_plugin.h ]; then
      cat <<'SRC'
floe_code header_test_declare(FloePluginRegistrar *reg);
floe_code header_test_declare(FloePluginRegistrar *reg) {
  const FloeHostApi *host = NULL;
  if (FLOE_HAS_FIELD(host, FloeHostApi, shape_set_error)) return FLOE_INTERNAL;
  return FLOE_PLUGIN_DECLARE(reg, "header-test", "1.0");
}
SRC
    else
      printf 'int header_test_dummy;\n'
    fi
  } > "$tmp/t.c"
  cp "$tmp/t.c" "$tmp/t.cc"
  for std in c99 c11; do
    if ! $CC -std=$std -Wall -Wextra -Werror -pedantic -I"$inc" -c "$tmp/t.c" -o "$tmp/t.o"; then
      echo "FAIL: floe/$h does not compile alone as $std"
      fail=1
    fi
  done
  if ! $CXX -std=c++11 -Wall -Wextra -Werror -pedantic -I"$inc" -c "$tmp/t.cc" -o "$tmp/t.o"; then
    echo "FAIL: floe/$h does not compile alone as C++11"
    fail=1
  fi
done

if [ -z "$ABIDW" ] || [ -z "$ABIDIFF" ]; then
  echo "SKIP: abidw/abidiff not found (install abigail-tools): plugin ABI not compared"
  exit $fail
fi

cat > "$tmp/probe.c" <<'SRC'
/* Every type of the plugin ABI, reachable from an exported function. */
#include <floe/floe_plugin.h>
#define PROBE(T) void floe_abi_probe_##T(const T *p); void floe_abi_probe_##T(const T *p) { (void)p; }
PROBE(FloeHostApi)
PROBE(FloePluginRegistrar)
PROBE(FloePluginInfo)
PROBE(FloeDeviceProps)
PROBE(FloeDeviceFns)
PROBE(FloeTypeConstraint)
PROBE(FloeKernelDef)
PROBE(FloeOpDef)
PROBE(FloeTransportFns)
PROBE(FloeGradientDef)
PROBE(FloeShape)
PROBE(FloeLogLevel)
PROBE(floe_code)
PROBE(FloeDType)
PROBE(FloePluginInitFn)
SRC
if ! $CC -g -O0 -fPIC -shared -fdebug-prefix-map="$tmp"=abi-probe -I"$inc" "$tmp/probe.c" -o "$tmp/libfloe-abi-probe.so"; then
  echo "FAIL: cannot build the ABI probe"
  exit 1
fi
if ! "$ABIDW" --no-corpus-path --no-comp-dir-path --no-show-locs \
    --out-file "$tmp/current.abi" "$tmp/libfloe-abi-probe.so"; then
  echo "FAIL: abidw could not dump the ABI probe"
  exit 1
fi
if [ "$update" = yes ]; then
  cp "$tmp/current.abi" "$baseline" && echo "updated $baseline"
  exit $?
fi
if [ ! -f "$baseline" ]; then
  echo "FAIL: $baseline is missing (see the top of this script to generate it)"
  exit 1
fi
"$ABIDIFF" "$baseline" "$tmp/current.abi"
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: the plugin ABI differs from tests/abi/baseline.abi (abidiff exit $rc)."
  echo "      If the change is deliberate, bump the ABI version and regenerate the baseline"
  echo "      (see the top of tests/abi/test_headers.sh)."
  fail=1
else
  echo "PASS: plugin ABI matches tests/abi/baseline.abi"
fi
for old in "$top_srcdir"/tests/abi/baseline-*.abi; do
  [ -f "$old" ] || continue
  "$ABIDIFF" "$old" "$tmp/current.abi" >"$tmp/old.txt"
  rc=$?
  # Appending is fine; moving, deleting, retyping or renumbering anything is not. (A slot
  # whose function type takes a struct that only grew at its end shows as a "data member
  # change" too, so retyping is caught by its "type name changed" line instead.)
  if [ $((rc & 8)) -ne 0 ] || [ $((rc & 3)) -ne 0 ] ||
     grep -Eq 'offset changed|data member deletion|type name changed|[1-9][0-9]* Removed|value changed|enumerator deletion|type changed from' "$tmp/old.txt"; then
    echo "FAIL: incompatible change against $(basename "$old") (abidiff exit $rc):"
    cat "$tmp/old.txt"
    fail=1
  else
    echo "PASS: compatible with $(basename "$old") (abidiff exit $rc: additions only)"
  fi
done
exit $fail
