#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Replays every fuzz target over its kept inputs (tests/fuzz/regress/<target>/: what the
# fuzzer or a probe once crashed, hung or misled on, plus small valid seeds), with the
# plain driver fuzz/replay.c: each input must be handled (loaded, or refused with a message)
# without a crash. onnx_stack replays the ONNX inputs on a thread with a 256 KB stack.
set -u
R="$top_srcdir/tests/fuzz/regress"
pass=0; fails=0
for t in graph npy safetensors idx text onnx onnx_stack wire cluster; do
  dir="$R/$t"
  [ "$t" = onnx_stack ] && dir="$R/onnx"
  n=$(ls "$dir" | wc -l)
  if [ "$n" -eq 0 ]; then echo "FAIL: no inputs in $dir"; fails=$((fails+1)); continue; fi
  if out=$("./fuzz/replay_$t" "$dir" 2>&1) && [ "$out" = "$n inputs replayed" ]; then
    echo "$t: $out"; pass=$((pass+1))
  else
    echo "FAIL: replay_$t $dir: $out"; fails=$((fails+1))
  fi
done
echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
