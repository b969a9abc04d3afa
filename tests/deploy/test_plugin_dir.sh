#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_plugin_dir.sh - where libfloe finds its plugins (core/runtime/plugin.c, README's
# deployment section):
#  1. a copied tree (lib/libfloe.so.0 + lib/floe/<ABI major>/floe-cpu.so), moved anywhere, runs
#     an exported model with no environment variables at all: libfloe looks beside itself;
#  2. a plugin in lib/floe/ (no ABI folder) is not found;
#  3. FLOE_PLUGIN_PATH alone replaces that folder (its plugins only); an empty one is unset.
# The program (tests/deploy/run_model.c) is compiled here against the copied libfloe with
# $CC, and finds it through its RUNPATH $ORIGIN/../lib, the way a deployed application would.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
CC=${CC:-cc}
abi=$(sed -n 's/^#define FLOE_ABI_MAJOR  *//p' "$top_srcdir/sdk/include/floe/floe_plugin.h")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-plugindir.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
# No environment but what sanitizer builds need to run at all.
bare() {
  env -i ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} ${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} \
    ${TSAN_OPTIONS:+TSAN_OPTIONS="$TSAN_OPTIONS"} "$@"
}

libs=$top_builddir/core/.libs
[ -f "$libs/libfloe.so.0" ] || { echo "SKIP: $libs/libfloe.so.0 not built"; exit 77; }
# A tree as an application would ship it: bin/, lib/, lib/floe/<major>/.
mkdir -p "$tmp/model" "$tmp/app/bin" "$tmp/app/lib/floe/$abi" "$tmp/other" "$tmp/old/bin" "$tmp/old/lib/floe"
cp -P "$libs"/libfloe.so* "$tmp/app/lib/" && cp -P "$libs"/libfloe.so* "$tmp/old/lib/"
cp "$top_builddir/plugins/cpu/.libs/floe-cpu.so" "$tmp/app/lib/floe/$abi/"
cp "$top_builddir/plugins/cpu/.libs/floe-cpu.so" "$tmp/old/lib/floe/"
cp "$top_builddir/plugins/tpu-sim/.libs/floe-tpu-sim.so" "$tmp/other/"
for d in app old; do
  if ! $CC -std=gnu11 ${SAN_CFLAGS:-} -I"$top_srcdir/sdk/include" -o "$tmp/$d/bin/run_model" \
      "$top_srcdir/tests/deploy/run_model.c" -L"$tmp/$d/lib" -lfloe -Wl,-rpath,'$ORIGIN/../lib'; then
    echo "FAIL: cannot compile run_model.c"; exit 1
  fi
done
# Moved after it was made: nothing may remember the first place.
mv "$tmp/app" "$tmp/moved"
app=$tmp/moved

# 1. Devices, then an exported model, with no environment.
bare "$app/bin/run_model" devices >"$tmp/dev.txt" 2>&1
if grep -qx 'CPU cpu:0' "$tmp/dev.txt" && ! grep -q TPU_SIM "$tmp/dev.txt"; then ok; else
  bad "copied tree: expected the CPU plugin beside libfloe alone"; cat "$tmp/dev.txt"; fi
if FLOE_PLUGIN_PATH="$top_builddir/plugins/cpu/.libs" "$top_builddir/tests/cli/ckpt_model" export "$tmp/model" >"$tmp/log" 2>&1; then
  if bare "$app/bin/run_model" "$tmp/model/model.floe" "x=$tmp/model/x.npy" probs "$tmp/probs.npy" \
      >"$tmp/run.txt" 2>&1; then
    if cmp -s "$tmp/probs.npy" "$tmp/model/want_probs.npy"; then ok; else
      bad "copied tree: the exported model's probs differ from the session's that exported it"; fi
  else bad "copied tree: run_model failed"; cat "$tmp/run.txt"; fi
else bad "ckpt_model export"; cat "$tmp/log"; fi

# 2. Plugins of no ABI folder are not looked at.
bare "$tmp/old/bin/run_model" devices >"$tmp/dev.txt" 2>&1
if ! grep -q CPU "$tmp/dev.txt"; then ok; else
  bad "lib/floe/floe-cpu.so was loaded: only lib/floe/$abi/ may be searched"; cat "$tmp/dev.txt"; fi

# 3. FLOE_PLUGIN_PATH replaces the folder beside libfloe; empty is the same as unset.
bare FLOE_PLUGIN_PATH="$tmp/other" "$app/bin/run_model" devices >"$tmp/dev.txt" 2>&1
if grep -q '^TPU_SIM ' "$tmp/dev.txt" && ! grep -q '^CPU ' "$tmp/dev.txt"; then ok; else
  bad "FLOE_PLUGIN_PATH=$tmp/other: expected tpu-sim alone (it replaces lib/floe/$abi)"; cat "$tmp/dev.txt"; fi
bare FLOE_PLUGIN_PATH= "$app/bin/run_model" devices >"$tmp/dev.txt" 2>&1
if grep -qx 'CPU cpu:0' "$tmp/dev.txt"; then ok; else
  bad "an empty FLOE_PLUGIN_PATH must act as unset"; cat "$tmp/dev.txt"; fi

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
