# SPDX-License-Identifier: Apache-2.0
# find_python.sh - the Python the interoperability tests use (sourced; tests/README.md).
# test_python "safetensors, numpy" "the safetensors and numpy packages" sets py to
# $FLOE_TEST_PYTHON, which must import them (else the test fails at once, so CI cannot skip
# it by accident), else to python3 or bench/.venv's python when one does; when none does it
# prints a SKIP line and returns 1.
test_python() {
  if [ -n "${FLOE_TEST_PYTHON:-}" ] && ! "$FLOE_TEST_PYTHON" -c "import $1"; then
    echo "FAIL: FLOE_TEST_PYTHON=$FLOE_TEST_PYTHON cannot import $1"
    exit 1
  fi
  py=
  for p in "${FLOE_TEST_PYTHON:-}" python3 "${top_srcdir}/bench/.venv/bin/python"; do
    [ -n "$p" ] || continue
    if "$p" -c "import $1" >/dev/null 2>&1; then py=$p; return 0; fi
  done
  echo "SKIP: no Python with $2 (tried \$FLOE_TEST_PYTHON, python3 and bench/.venv;"
  echo "      FLOE_TEST_PYTHON=\$(sh tests/setup_venv.sh) make check, see tests/README.md)"
  return 1
}
