#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check_spdx.sh - every source file of Floe starts with its license line
# ("SPDX-License-Identifier: Apache-2.0" within its first two lines, after a #! line if any).
# It walks the source tree (not git, so it works in a release tarball); generated files
# (Makefile.in, configure, protobuf-c output, config.h) and test data are not sources.
# Exit 0: all have it; 1: the files without it are listed.
set -u
src=${top_srcdir:-..}
missing=0
for f in $(cd "$src" && find core plugins sdk tools tests examples bench .ci \
    -path tests/fixtures -prune -o -name .venv -prune -o -path '*/.libs' -prune -o -path '*/.deps' -prune -o \
    -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.def' -o -name '*.map' \
    -o -name '*.proto' -o -name '*.sh' -o -name '*.py' -o -name 'Makefile.am' -o -name '*.inc' \
    -o -name '*.pc.in' -o -name '*.supp' -o -name run \) -print 2>/dev/null | sort); do
  case $f in *.pb-c.c | *.pb-c.h | */config.h) continue ;; esac
  if ! head -n 2 "$src/$f" | grep -q 'SPDX-License-Identifier: Apache-2.0'; then
    echo "check_spdx: $f has no 'SPDX-License-Identifier: Apache-2.0' line at its top" >&2
    missing=1
  fi
done
for f in LICENSE NOTICE; do
  [ -f "$src/$f" ] || { echo "check_spdx: $f is missing" >&2; missing=1; }
done
exit $missing
