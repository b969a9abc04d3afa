#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check_readme.sh - README.md's "Using the library" snippet is the region of
# examples/train-mlp/train_mlp.c between its README:begin and README:end lines, byte for byte,
# so the snippet compiles and runs as the example does (tests/examples/test_examples.sh) and
# cannot go stale. The snippet must also compile on its own with the SDK headers.
# Then it shows that it notices: copies with one byte changed in either file must fail.
#
#     top_srcdir=$PWD sh tests/check_readme.sh     # from the source tree
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/floe-readme.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

# The first ```c block after the "## Using the library" heading of $1.
readme_block() {
  awk '/^## Using the library$/ { s = 1; next }
       s == 1 && /^```c$/ { s = 2; next }
       s == 2 && /^```$/ { exit }
       s == 2 { print }' "$1"
}
# The lines strictly between "/* README:begin */" and "/* README:end */" of $1.
source_region() {
  awk '/^\/\* README:end \*\/$/ { exit } s { print } /^\/\* README:begin \*\/$/ { s = 1 }' "$1"
}
# 0 when README $1's snippet equals source $2's region (and neither is empty), else 1 with
# the difference.
compare() {
  readme_block "$1" >"$tmp/readme.c"
  source_region "$2" >"$tmp/region.c"
  if [ ! -s "$tmp/readme.c" ] || [ ! -s "$tmp/region.c" ]; then
    echo "no snippet in $1 or no README region in $2"; return 1
  fi
  if ! cmp -s "$tmp/readme.c" "$tmp/region.c"; then
    echo "the snippet of $1 differs from the README region of $2:"
    diff -u "$tmp/region.c" "$tmp/readme.c" | head -20
    return 1
  fi
}

readme=$top_srcdir/README.md
src=$top_srcdir/examples/train-mlp/train_mlp.c
fail=0
if compare "$readme" "$src"; then
  echo "ok: README.md's snippet is examples/train-mlp/train_mlp.c's README region"
else
  echo "FAIL: copy the region into README.md (or change the example)"; fail=1
fi
# The snippet alone: its own #includes, the SDK headers, no warnings.
if ! $CC -std=gnu11 -Wall -Wextra -Werror -Wno-unused-function -I"$top_srcdir/sdk/include" \
    -fsyntax-only -x c "$tmp/readme.c" 2>"$tmp/cc.txt"; then
  echo "FAIL: README.md's snippet does not compile on its own:"; cat "$tmp/cc.txt"; fail=1
fi

# One byte changed in the README's snippet, then in the example's region: both must fail.
sed '/^## Using the library$/,$ s/"loss"/"lost"/' "$readme" >"$tmp/README.md"
sed 's/"loss"/"lost"/' "$src" >"$tmp/train_mlp.c"
cmp -s "$readme" "$tmp/README.md" && { echo "FAIL: the self-test changed nothing"; fail=1; }
if compare "$tmp/README.md" "$src" >/dev/null; then
  echo "FAIL: a changed README snippet went unnoticed"; fail=1
fi
if compare "$readme" "$tmp/train_mlp.c" >/dev/null; then
  echo "FAIL: a changed example region went unnoticed"; fail=1
fi
[ "$fail" -eq 0 ] && echo "ok: a one-byte change in either is reported"
exit $fail
