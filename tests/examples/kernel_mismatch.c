/* SPDX-License-Identifier: Apache-2.0 */
/* kernel_mismatch.c - a plugin whose kernel has the wrong type: it takes a const context
 * and an extra argument. With floe-plugin.pc's Cflags this must not compile
 * (tests/examples/test_sdk.sh): -DMISMATCH_CAST hides it behind a cast (which
 * -Werror=cast-function-type refuses), -DMATCHING is the correct kernel, which must build. */
#include <floe/floe_plugin.h>
#include <string.h>

#ifdef MATCHING
static floe_code compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  (void)ctx;
  return FLOE_OK;
}
#else
static floe_code compute(void *state, const FloeKernelContext *ctx, int extra) {
  (void)state;
  (void)ctx;
  return extra ? FLOE_INTERNAL : FLOE_OK;
}
#endif

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  (void)host;
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "mismatch", "0");
  if (rc != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "Square";
  k.device_type = "CPU";
#ifdef MISMATCH_CAST
  k.compute = (floe_code (*)(void *, FloeKernelContext *))compute;
#else
  k.compute = compute;
#endif
  return reg->register_kernel(reg, &k);
}
