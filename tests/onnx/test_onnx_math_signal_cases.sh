#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The math family's extra ONNX cases (tests/fixtures/onnx_math_signal, made with NumPy as the oracle
# by tests/fixtures/make_onnx_math_signal_cases.py) all pass `floe onnx-test`.
set -u
FLOE="${top_builddir}/tools/floe"
CASES="${top_srcdir}/tests/fixtures/onnx_math_signal"
out=$(FLOE_PLUGINS=cpu "$FLOE" onnx-test "$CASES" --json 2>&1)
summary=$(printf '%s\n' "$out" | tail -n 1)
total=$(printf '%s' "$summary" | sed -n 's/.*"total":\([0-9]*\).*/\1/p')
passed=$(printf '%s' "$summary" | sed -n 's/.*"passed":\([0-9]*\).*/\1/p')
if [ -n "$total" ] && [ "$total" -ge 21 ] && [ "$total" = "$passed" ]; then
  echo "PASS: $passed of $total cases"
  exit 0
fi
printf '%s\n' "$out" | grep -v '"result":"pass"'
echo "FAIL: ${passed:-?} of ${total:-?} cases passed"
exit 1
