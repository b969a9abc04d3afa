#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The out-of-tree plugin example: install Floe into a temporary prefix (DESTDIR staging),
# build examples/custom-kernel against the installed SDK with pkg-config only, and run it.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/stage"
# Everything `make install` puts in place, except that libfloe-onnx is copied rather than
# installed: libtool relinks a library that depends on another of the build while installing
# it, moving the built file aside meanwhile, and the other tests (make check -j) load it from
# the build tree at the same time.
install_part() { d=$1; shift; make -C "$top_builddir/$d" "$@" DESTDIR="$stage" >>"$tmp/install.log" 2>&1; }
if ! { install_part . install-data && install_part plugins/cpu install &&
       install_part plugins/tpu-sim install && install_part plugins/transport/local install &&
       install_part core install-libLTLIBRARIES lib_LTLIBRARIES=libfloe.la &&
       install_part tools install; }; then
  echo "FAIL: make install"; tail -20 "$tmp/install.log"; echo "0 passed, 1 failed"; exit 1
fi
prefix=$(sed -n 's/^prefix=//p' "$top_builddir/sdk/floe.pc")
libdir=$(find "$stage" -name libfloe.so -printf '%h\n' | head -n 1)
cp -P "$top_builddir"/core/.libs/libfloe-onnx.so* "$libdir/"
pcdir="$libdir/pkgconfig"
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$stage"
# The plugin must build with the SDK headers alone: no -lfloe, no libfloe symbols.
cp "$top_srcdir"/examples/custom-kernel/*.c "$top_srcdir"/examples/custom-kernel/Makefile "$tmp/"
# In sanitizer builds the example needs the same instrumentation as libfloe.
if ! make -C "$tmp" CFLAGS="-O2 ${SAN_CFLAGS:-}" >"$tmp/build.log" 2>&1; then
  echo "FAIL: building the example"; cat "$tmp/build.log"; echo "0 passed, 1 failed"; exit 1
fi
fails=0; pass=0
if nm -D --undefined-only "$tmp/floe-hardswish.so" | grep -q ' floe_'; then
  echo "FAIL: the plugin references libfloe symbols"; fails=$((fails+1)); else pass=$((pass+1)); fi
exported=$(nm -D --defined-only "$tmp/floe-hardswish.so" | awk '{print $3}' | grep -c floe_)
[ "$exported" -eq 1 ] && pass=$((pass+1)) || { echo "FAIL: $exported floe_ symbols exported"; fails=$((fails+1)); }
export LD_LIBRARY_PATH="$libdir"
export FLOE_PLUGIN_PATH="$tmp:$libdir/floe/$(sed -n 's/^#define FLOE_ABI_MAJOR  *//p' "$top_srcdir/sdk/include/floe/floe_plugin.h")"
FLOE="$stage$prefix/bin/floe"
"$FLOE" plugins >"$tmp/plugins.txt" 2>&1
grep -q 'hardswish *loaded' "$tmp/plugins.txt" && pass=$((pass+1)) || { echo "FAIL: plugin not loaded"; cat "$tmp/plugins.txt"; fails=$((fails+1)); }
(cd "$tmp" && ./make_graph hardswish.floe >/dev/null) && pass=$((pass+1)) || { echo "FAIL: make_graph"; fails=$((fails+1)); }
python3 "$top_srcdir/tests/cli/npy.py" write "$tmp/x.npy" 5 -4,-1,0,1,4
if "$FLOE" run "$tmp/hardswish.floe" --feed "x=$tmp/x.npy" --fetch y --out "$tmp/o" >"$tmp/run.txt" 2>&1; then
  got=$(python3 "$top_srcdir/tests/cli/npy.py" read "$tmp/o/y.npy")
  # x*relu6(x+3)/6: -4 -> 0, -1 -> -1/3, 0 -> 0, 1 -> 2/3, 4 -> 4
  [ "$got" = "-0 -0.333333 0 0.666667 4" ] || [ "$got" = "0 -0.333333 0 0.666667 4" ] && pass=$((pass+1)) || { echo "FAIL: y = '$got'"; fails=$((fails+1)); }
else
  echo "FAIL: floe run"; cat "$tmp/run.txt"; fails=$((fails+1))
fi
# The plugin's declarative gradient: dx = HardSwish'(x) = 0, (2x+3)/6, 1 below/inside/above [-3, 3].
if "$FLOE" run "$tmp/hardswish.floe" --feed "x=$tmp/x.npy" --fetch dx --out "$tmp/o" >"$tmp/run.txt" 2>&1; then
  got=$(python3 "$top_srcdir/tests/cli/npy.py" read "$tmp/o/dx.npy")
  [ "$got" = "0 0.166667 0.5 0.833333 1" ] && pass=$((pass+1)) || { echo "FAIL: dx = '$got'"; fails=$((fails+1)); }
else
  echo "FAIL: floe run --fetch dx"; cat "$tmp/run.txt"; fails=$((fails+1))
fi
echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
