#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_check_layers.sh - check_layers.sh itself: on a tree of two tiny objects it passes a
# call down (exec -> base), and fails an upward call (base -> exec) and a sideways one (train
# -> data), naming the file, the symbol and both layers; dist sits between session and train.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
obj() { # LAYER FILE SOURCE
  mkdir -p "$tmp/core/$1/.libs"
  printf '%s\n' "$3" >"$tmp/$2.c"
  "$cc" -c -o "$tmp/core/$1/.libs/libfloe_la-$2.o" "$tmp/$2.c" || fail "cannot compile $2.c"
}
obj base low 'int floe__low(void) { return 1; }'
obj exec high 'int floe__low(void); int floe__high(void) { return floe__low(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core") || fail "a downward call was refused: $out"

# the planted upward call: base calls exec
obj base planted 'int floe__high(void); int floe__planted(void) { return floe__high(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core")
rc=$?
[ "$rc" = 1 ] || fail "an upward call passed (exit $rc): $out"
want="core/base/planted.c (base) uses floe__high, defined in core/exec/high.c (exec)"
echo "$out" | grep -q "$want" ||
  fail "the upward call is not named: $out"
rm "$tmp/core/base/.libs/libfloe_la-planted.o"

# siblings: train may not call data
obj data reader 'int floe__read(void) { return 2; }'
obj train trainer 'int floe__read(void); int floe__train(void) { return floe__read(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core")
[ $? = 1 ] || fail "train -> data passed: $out"
echo "$out" | grep -q "uses floe__read, defined in core/data/reader.c (data)" ||
  fail "the sideways call is not named: $out"
rm "$tmp/core/train/.libs/libfloe_la-trainer.o"

# dist sits between session and train: train may call it, session may not
obj dist wire 'int floe__wire(void) { return 4; }'
obj train caller 'int floe__wire(void); int floe__caller(void) { return floe__wire(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core") || fail "train -> dist was refused: $out"
obj session sess 'int floe__wire(void); int floe__sess(void) { return floe__wire(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core")
[ $? = 1 ] || fail "session -> dist passed: $out"
echo "$out" | grep -q "core/session/sess.c (session) uses floe__wire, defined in core/dist/wire.c (dist)" ||
  fail "the upward call into dist is not named: $out"
rm "$tmp/core/session/.libs/libfloe_la-sess.o"

# the host table is the one exception
obj top host 'int floe__host_api(void) { return 3; }'
obj graph shapes 'int floe__host_api(void); int floe__shape(void) { return floe__host_api(); }'
out=$(sh "$here/check_layers.sh" "$tmp/core") || fail "floe__host_api was refused: $out"
echo "PASS: downward calls and floe__host_api pass; upward and sideways calls fail, named"
