#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ONNX's own backend test cases (Debian's libonnx-testdata: node, simple, pytorch-converted,
# pytorch-operator) through `floe onnx-test`. Fails when the node set's pass rate drops
# below NODE_FLOOR percent, or when a case listed in conformance_pass.txt (the cases that
# passed when the list was last updated with `make -C tests update-onnx-conformance`) stops
# passing. The expected outputs are ONNX's, not Floe's.
set -u
D=${ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
NODE_FLOOR=${NODE_FLOOR:-85}
here=$(cd "$(dirname "$0")" && pwd)
floe=${top_builddir:-../..}/tools/floe
if [ ! -d "$D/node" ]; then
  echo "SKIP: ONNX test data not found at $D/node (apt-get install libonnx-testdata)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$floe" onnx-test --json "$D/node" "$D/simple" "$D/pytorch-converted" "$D/pytorch-operator" \
  > "$out/all.jsonl" 2> "$out/err.txt"
status=$?
if [ "$status" -gt 1 ] || ! tail -n 1 "$out/all.jsonl" | grep -q '"total":'; then
  echo "FAIL: floe onnx-test did not finish (exit $status)"; tail -n 5 "$out/err.txt"; exit 1
fi
tail -n 1 "$out/all.jsonl"
grep '"result":"pass"' "$out/all.jsonl" | sed 's/.*"case":"\([^"]*\)".*/\1/' | sort > "$out/pass.txt"
node_total=$(grep -c '"case":"node/' "$out/all.jsonl")
node_pass=$(grep -c '^node/' "$out/pass.txt")
echo "node: $node_pass of $node_total pass"
rc=0
if [ $((node_pass * 100)) -lt $((node_total * NODE_FLOOR)) ]; then
  echo "FAIL: node pass rate below $NODE_FLOOR%"; rc=1
fi
sort "$here/conformance_pass.txt" > "$out/want.txt"
comm -23 "$out/want.txt" "$out/pass.txt" > "$out/lost.txt"
if [ -s "$out/lost.txt" ]; then
  echo "FAIL: cases that passed before and no longer do:"
  while read -r c; do grep "\"case\":\"$c\"" "$out/all.jsonl"; done < "$out/lost.txt"
  rc=1
fi
# Unlisted passes are fine (update the list to keep them).
exit $rc
