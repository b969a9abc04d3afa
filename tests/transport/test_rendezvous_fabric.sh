#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_rendezvous_fabric.sh - the core's own path over the fabric transport: the "core" case of
# core/test_rendezvous (Send/Recv's rendezvous, the transport manager and its progress thread,
# transfers to and from the fake accelerator, aborts, allocation failures) run again with
# FLOE_TRANSPORT=fabric, once over tcp;ofi_rxm and once over shm. The manager waits with
# get_fd + trywait on tcp and with wait + interrupt on shm. Skipped (77) when the fabric
# plugin was not built.
set -u
dir=${FLOE_FABRIC_DIR:-}
prog=${top_builddir:-..}/tests/core/test_rendezvous
if [ -z "$dir" ] || [ ! -f "$dir/floe-transport-fabric.so" ]; then
  echo "SKIP: the fabric transport was not built (no libfabric found, or --enable-fabric=no)"
  exit 77
fi
if [ ! -x "$prog" ]; then
  echo "SKIP: $prog is not built (it needs Check)"
  exit 77
fi
fail=0
for prov in "tcp;ofi_rxm" shm; do
  echo "== FLOE_TRANSPORT=fabric FLOE_FABRIC_PROVIDER=$prov"
  if ! FLOE_TRANSPORT=fabric FLOE_FABRIC_PROVIDER=$prov FLOE_TRANSPORT_DIR=$dir \
      CK_RUN_CASE=core "$prog"; then
    echo "FAIL: core/test_rendezvous over fabric ($prov)"
    fail=1
  fi
done
exit $fail
