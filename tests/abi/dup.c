/* SPDX-License-Identifier: Apache-2.0 */
/* dup.c - built twice (floe-abitest-dup-a.so, floe-abitest-dup-b.so): two files declaring
 * the same plugin name. The first loads; the second is reported DUPLICATE. Each registers
 * a device whose type names its file, so a test can see which one was kept. */
#include <string.h>

#include <floe/floe_plugin.h>

static floe_code dev_props(void *state, FloeDeviceProps *p) {
  strcpy(p->type, ABITEST_DUP_TYPE);
  return FLOE_OK;
}
static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  return FLOE_RESOURCE_EXHAUSTED;
}
static void dev_deallocate(void *state, void *ptr, size_t bytes) {}
static floe_code dev_copy(void *state, void *dst, const void *src, size_t n) { return FLOE_OK; }

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-dup", ABITEST_DUP_TYPE);
  if (rc != FLOE_OK) return rc;
  FloeDeviceFns d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.get_props = dev_props;
  d.allocate = dev_allocate;
  d.deallocate = dev_deallocate;
  d.copy_h2d = dev_copy;
  d.copy_d2h = dev_copy;
  d.copy_d2d = dev_copy;
  return reg->register_device(reg, &d);
}
