#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_version.sh - floe_version(), FLOE_VERSION_* (version_check) and `floe --version` all
# say configure.ac's version.
set -u
top_builddir=${top_builddir:-.}
v=$("$top_builddir/tests/deploy/version_check") || { echo "FAIL: version_check"; exit 1; }
cli=$("$top_builddir/tools/floe" --version) || { echo "FAIL: floe --version exits non-zero"; exit 1; }
if [ "$cli" != "floe $v" ]; then
  echo "FAIL: floe --version says '$cli', floe_version() '$v'"; exit 1
fi
echo "PASS: version $v everywhere"
