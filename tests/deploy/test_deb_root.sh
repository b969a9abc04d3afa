#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_deb_root.sh - the CPU-only deployment of the README, for real: a fresh Debian 12 root
# (mmdebstrap, variant apt) gets libfloe0 and floe-plugin-cpu from make deb, nothing else of
# Floe, with their Debian dependencies resolved by apt; an exported model (a frozen graph of
# tests/cli/ckpt_model, made on the build machine) runs there under tests/deploy/run_model.c,
# a program that links libfloe alone, compiled here and copied in. Its output must equal the
# build machine's session output (to 1e-5 relative: the packages are built with Debian's
# flags).
#
# Run by `make deb-check` (after `make deb`) and by .ci/run. Needs root (chroot), mmdebstrap,
# the network (the Debian mirror, MIRROR to change it) and the packages in DEB_DIR (default
# _deb/); exits 77 (skipped) with the reason when one is missing.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
DEB_DIR=${DEB_DIR:-$top_builddir/_deb}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CC=${CC:-cc}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root (a fresh root needs chroot): run as root"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (apt-get install mmdebstrap)"
lib=$(ls "$DEB_DIR"/libfloe0_*.deb 2>/dev/null | head -n 1)
cpu=$(ls "$DEB_DIR"/floe-plugin-cpu_*.deb 2>/dev/null | head -n 1)
[ -n "$lib" ] && [ -n "$cpu" ] || skip "no libfloe0 / floe-plugin-cpu package in $DEB_DIR (make deb first)"
[ -x "$top_builddir/tests/cli/ckpt_model" ] || skip "tests/cli/ckpt_model is not built (make -C tests cli/ckpt_model)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-debroot.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/in/debs" "$tmp/in/model" "$tmp/out"
cp "$lib" "$cpu" "$tmp/in/debs/"
# The exported model and the build machine's answer.
if ! FLOE_PLUGIN_PATH="$top_builddir/plugins/cpu/.libs" \
    "$top_builddir/tests/cli/ckpt_model" export "$tmp/in/model" >"$tmp/export.log" 2>&1; then
  echo "FAIL: ckpt_model export"; cat "$tmp/export.log"; exit 1
fi
# Against the build tree's libfloe.so (same symbol versions as the package's); no RUNPATH.
if ! $CC -std=gnu11 -O2 -I"$top_srcdir/sdk/include" -o "$tmp/in/run_model" \
    "$top_srcdir/tests/deploy/run_model.c" -L"$top_builddir/core/.libs" -lfloe; then
  echo "FAIL: cannot compile run_model.c"; exit 1
fi

# In the root: install the two packages, record what is there, run the model.
cat >"$tmp/in/inside.sh" <<'SH'
set -e
cd /tmp/in
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends ./debs/*.deb >/tmp/out/apt.log 2>&1
dpkg-query -W -f '${Package} ${Version}\n' >/tmp/out/packages.txt
ls -R /usr/lib/*/floe >/tmp/out/plugindir.txt
./run_model devices >/tmp/out/devices.txt 2>&1
./run_model model/model.floe x=model/x.npy probs /tmp/out/probs.npy >/tmp/out/run.txt 2>&1
SH
start=$(date +%s)
if ! mmdebstrap --quiet --mode=root --variant=apt --format=directory \
    --customize-hook="mkdir -p \"\$1/tmp/out\"" \
    --customize-hook="copy-in $tmp/in /tmp" \
    --customize-hook='chroot "$1" sh /tmp/in/inside.sh || true' \
    --customize-hook="sync-out /tmp/out $tmp/out" \
    bookworm "$tmp/root" "deb $MIRROR bookworm main" >"$tmp/mmdebstrap.log" 2>&1; then
  echo "FAIL: mmdebstrap (mirror $MIRROR)"; tail -30 "$tmp/mmdebstrap.log"; exit 1
fi
echo "fresh root built and used in $(( $(date +%s) - start )) s"

fails=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
if grep -q '^libfloe0 ' "$tmp/out/packages.txt" && grep -q '^floe-plugin-cpu ' "$tmp/out/packages.txt"; then ok
else bad "libfloe0 / floe-plugin-cpu not installed"; cat "$tmp/out/apt.log" 2>/dev/null; fi
others=$(grep -E '^(floe|libfloe)' "$tmp/out/packages.txt" | grep -Ev '^(libfloe0|floe-plugin-cpu) ')
[ -z "$others" ] && ok || bad "other Floe packages came in: $others"
echo "in the root: $(grep -c . "$tmp/out/packages.txt") packages; Floe's plugin folder:"
sed 's/^/  /' "$tmp/out/plugindir.txt"
if grep -qx 'CPU cpu:0' "$tmp/out/devices.txt"; then ok; else bad "no cpu:0 in the root"; cat "$tmp/out/devices.txt"; fi
if [ -f "$tmp/out/probs.npy" ]; then
  if python3 - "$tmp/out/probs.npy" "$tmp/in/model/want_probs.npy" "$top_srcdir/tests/cli" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import npy
got, want = npy.read(sys.argv[1]), npy.read(sys.argv[2])
assert len(got) == len(want) > 0, (len(got), len(want))
worst = max(abs(g - w) / max(abs(w), 1e-30) for g, w in zip(got, want))
print("root: %d outputs, worst relative difference from the build machine %.3g" % (len(got), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
  then ok; else bad "the root's probs differ from the build machine's"; fi
else
  bad "run_model did not write probs.npy in the root"; cat "$tmp/out/run.txt"
fi
echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
