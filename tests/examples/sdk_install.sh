# SPDX-License-Identifier: Apache-2.0
# sdk_install.sh - sourced by the example and SDK tests: installs what an application or a
# plugin author needs (headers, .pc files, libfloe, libfloe-onnx, the CPU plugin) into a
# DESTDIR staging folder under $tmp, and points pkg-config there. Sets stage, libdir and
# plugindir, exports PKG_CONFIG_PATH, PKG_CONFIG_SYSROOT_DIR, LD_LIBRARY_PATH and
# FLOE_PLUGIN_PATH (the installed plugins only). Returns non-zero with the log shown on failure.
#
# libfloe-onnx is copied rather than installed, as in tests/cli/test_custom_kernel.sh:
# libtool relinks a library that depends on another of the build while installing it, moving
# the built file aside meanwhile, and the other tests (make check -j) load it at that time.
sdk_install() {
  stage="$tmp/stage"
  _log="$tmp/install.log"
  _part() { _d=$1; shift; make -C "$top_builddir/$_d" "$@" DESTDIR="$stage" >>"$_log" 2>&1; }
  if ! { _part . install-data && _part plugins/cpu install &&
         _part core install-libLTLIBRARIES lib_LTLIBRARIES=libfloe.la; }; then
    echo "FAIL: make install"; tail -20 "$_log"; return 1
  fi
  libdir=$(find "$stage" -name libfloe.so -printf '%h\n' | head -n 1)
  [ -n "$libdir" ] || { echo "FAIL: no libfloe.so installed"; return 1; }
  cp -P "$top_builddir"/core/.libs/libfloe-onnx.so* "$libdir/" || return 1
  PKG_CONFIG_PATH="$libdir/pkgconfig"; PKG_CONFIG_SYSROOT_DIR="$stage"
  export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
  # The plugin folder as the installed floe-plugin.pc says (pkg-config does not put the
  # sysroot in front of variables).
  plugindir=$(pkg-config --variable=plugindir floe-plugin) || { echo "FAIL: no plugindir"; return 1; }
  case $plugindir in "$stage"/*) ;; *) plugindir="$stage$plugindir" ;; esac
  ls "$plugindir"/floe-cpu.so >/dev/null || { echo "FAIL: no floe-cpu.so in $plugindir"; return 1; }
  LD_LIBRARY_PATH="$libdir"; FLOE_PLUGIN_PATH="$plugindir"
  export LD_LIBRARY_PATH FLOE_PLUGIN_PATH
}
