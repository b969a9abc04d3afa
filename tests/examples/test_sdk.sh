#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The plugin SDK as an author meets it, against a temporary installation:
#  - sdk/template/my_plugin.c builds with `pkg-config --cflags floe-plugin` alone, warning-free
#    (-Wall -Wextra -Werror) with cc and, when installed, gcc and clang; it exports one symbol
#    and needs none of libfloe's; it loads, and its new op runs with its gradient (checked
#    against hand-worked numbers);
#  - floe-plugin.pc's Cflags turn a kernel of the wrong function type into a compile error,
#    assigned directly or through a cast, while the same file with the right type builds.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/examples/sdk_install.sh"
sdk_install || { echo "0 passed, 1 failed"; exit 1; }
pass=0; fails=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
PCFLAGS=$(pkg-config --cflags floe-plugin)
compilers=${CC:-cc}
for c in gcc clang; do command -v $c >/dev/null 2>&1 && compilers="$compilers $c"; done

# The template, as its header says to build it.
mkdir -p "$tmp/plugin"
cp "$top_srcdir/sdk/template/my_plugin.c" "$tmp/"
for c in $compilers; do
  # shellcheck disable=SC2086
  if $c -O2 -fPIC -shared -Wall -Wextra -Werror $PCFLAGS ${SAN_CFLAGS:-} "$tmp/my_plugin.c" \
      -o "$tmp/plugin/floe-myplugin.so" 2>"$tmp/cc.txt"; then ok; else
    bad "$c: the template does not build with the SDK flags"; cat "$tmp/cc.txt"; fi
done
# Built last by the last compiler; the checks below use that file.
so="$tmp/plugin/floe-myplugin.so"
if nm -D --undefined-only "$so" | grep -q ' floe_'; then bad "the template references libfloe symbols"; else ok; fi
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -c floe_)
[ "$exported" -eq 1 ] && ok || bad "the template exports $exported floe_ symbols"
export FLOE_PLUGIN_PATH="$tmp/plugin:$FLOE_PLUGIN_PATH"
"$top_builddir/tools/floe" plugins >"$tmp/plugins.txt" 2>&1
grep -q 'myplugin *loaded' "$tmp/plugins.txt" && ok || { bad "template not loaded"; cat "$tmp/plugins.txt"; }
# Its op and gradient in a graph, from a program built with pkg-config floe.
# shellcheck disable=SC2086
if ${CC:-cc} -O2 ${SAN_CFLAGS:-} $(pkg-config --cflags floe) "$top_srcdir/tests/examples/run_my_op.c" \
    -o "$tmp/run_my_op" $(pkg-config --libs floe) 2>"$tmp/cc.txt"; then
  if "$tmp/run_my_op" >"$tmp/run.txt" 2>&1; then
    # x = -2, 0, 1.5: y = x * x + 0.5 = 4.5, 0.5, 2.75; dx = 2 * x = -4, 0, 3.
    grep -qx 'y: 4.5 0.5 2.75' "$tmp/run.txt" && grep -qx 'dx: -4 0 3' "$tmp/run.txt" && ok ||
      { bad "MySquarePlus gave"; cat "$tmp/run.txt"; }
  else
    bad "run_my_op: $(cat "$tmp/run.txt")"
  fi
else
  bad "building run_my_op"; cat "$tmp/cc.txt"
fi

# A mismatched kernel does not compile with the pc's flags; the matching one does.
for c in $compilers; do
  for variant in MISMATCH_DIRECT MISMATCH_CAST; do
    # shellcheck disable=SC2086
    if $c -fPIC -shared $PCFLAGS -D$variant "$top_srcdir/tests/examples/kernel_mismatch.c" \
        -o "$tmp/mm.so" >"$tmp/mm.txt" 2>&1; then
      bad "$c: a kernel of the wrong type ($variant) compiled with $PCFLAGS"
    else
      grep -q 'incompatible\|cast' "$tmp/mm.txt" && ok || { bad "$c $variant failed otherwise:"; cat "$tmp/mm.txt"; }
    fi
  done
  # shellcheck disable=SC2086
  $c -fPIC -shared $PCFLAGS -DMATCHING "$top_srcdir/tests/examples/kernel_mismatch.c" \
    -o "$tmp/mm.so" >"$tmp/mm.txt" 2>&1 && ok || { bad "$c: the matching kernel failed:"; cat "$tmp/mm.txt"; }
done

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
