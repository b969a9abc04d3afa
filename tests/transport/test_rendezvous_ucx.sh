#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_rendezvous_ucx.sh - the core's own path over the ucx transport: the "core" case of
# core/test_rendezvous (Send/Recv's rendezvous, the transport manager and its progress thread,
# transfers to and from the fake accelerator, aborts, allocation failures) run again with
# FLOE_TRANSPORT=ucx over UCX's tcp transport. The manager waits with get_fd (the worker's
# event fd) + trywait (ucp_worker_arm). Skipped (77) when the ucx plugin was not built.
set -u
dir=${FLOE_UCX_DIR:-}
prog=${top_builddir:-..}/tests/core/test_rendezvous
if [ -z "$dir" ] || [ ! -f "$dir/floe-transport-ucx.so" ]; then
  echo "SKIP: the ucx transport was not built (no UCX found, or --enable-ucx=no)"
  exit 77
fi
if [ ! -x "$prog" ]; then
  echo "SKIP: $prog is not built (it needs Check)"
  exit 77
fi
echo "== FLOE_TRANSPORT=ucx FLOE_UCX_TLS=tcp"
if ! FLOE_TRANSPORT=ucx FLOE_UCX_TLS=tcp FLOE_TRANSPORT_DIR=$dir CK_RUN_CASE=core "$prog"; then
  echo "FAIL: core/test_rendezvous over ucx (tcp)"
  exit 1
fi
exit 0
