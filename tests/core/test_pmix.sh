#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_pmix.sh - the cluster under a PMIx launcher: mpirun -np 2 runs core/pmix_rank, whose
# ranks publish their addresses through PMIx (libpmix.so.2, dlopened by core/dist/pmix.c) and
# each check the cluster they read back. Also: libfloe.so has no DT_NEEDED on libpmix (it is
# loaded only under a launcher). Skips (exit 77) without mpirun or without PMIx in the build.
set -u
b=${top_builddir:-..}
fail() { echo "FAIL: $*"; exit 1; }
lib=$b/core/.libs/libfloe.so
if [ -f "$lib" ] && command -v readelf >/dev/null; then
  needed=$(readelf -d "$lib" | grep NEEDED)
  echo "$needed" | grep -qi pmix && fail "libfloe.so links libpmix (it must only dlopen it): $needed"
  echo "libfloe.so: no DT_NEEDED on libpmix"
fi
if ! grep -q '^#define FLOE_HAVE_PMIX_H 1' "$b/config.h"; then
  echo "SKIP: Floe was built without pmix.h (install libpmix-dev and reconfigure)"; exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (install openmpi-bin to test the PMIx path)"; exit 77
fi
# Open MPI refuses root unless told; the tests run as whoever runs make check.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under make check-asan: libpmix has no frame pointers, so LeakSanitizer's fast unwinder
# stops inside it and cannot match tests/lsan.supp's libpmix entry; unwind slowly here.
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
out=$(timeout 60 mpirun -np 2 --oversubscribe ./core/pmix_rank 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "mpirun -np 2 core/pmix_rank exited $rc"
echo "$out" | grep -q "^rank 0 of 2: ok" || fail "rank 0 did not finish"
echo "$out" | grep -q "^rank 1 of 2: ok" || fail "rank 1 did not finish"
echo "PASS: PMIx cluster of 2 ranks"
