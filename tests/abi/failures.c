/* SPDX-License-Identifier: Apache-2.0 */
/* failures.c - test plugins that fail in each way the loader reports, one per -D:
 *
 *   ABITEST_NOENTRY    floe-abitest-noentry.so: exports the wrong symbol (REFUSED).
 *   ABITEST_INITFAIL   floe-abitest-initfail.so: registers a device, then init fails with a
 *                      message (FAILED, nothing registered).
 *   ABITEST_BADOP      floe-abitest-badop.so: registers a kernel for an op nobody defines
 *                      and returns that error (FAILED, message names the op).
 *   ABITEST_BADGRAD    floe-abitest-badgrad.so: registers a gradient for the standard op Relu,
 *                      which has one (FAILED at commit, message names the op).
 *   ABITEST_UNAVAIL    floe-abitest-unavail.so: "not usable here" (UNAVAILABLE + reason).
 *   ABITEST_NODECLARE  floe-abitest-nodeclare.so: registers without declaring and returns
 *                      FLOE_OK anyway (FAILED).
 */
#include <string.h>

#include <floe/floe_plugin.h>

/* The plugins that get as far as registering a device. */
#if defined(ABITEST_INITFAIL) || defined(ABITEST_BADOP) || defined(ABITEST_NODECLARE)
static floe_code dev_props(void *state, FloeDeviceProps *p) {
  strcpy(p->type, "ABIBAD");
  return FLOE_OK;
}
static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  return FLOE_RESOURCE_EXHAUSTED;
}
static void dev_deallocate(void *state, void *ptr, size_t bytes) {}
static floe_code dev_copy(void *state, void *dst, const void *src, size_t n) { return FLOE_OK; }

static floe_code register_bad_device(FloePluginRegistrar *reg) {
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
#endif

#if defined(ABITEST_NOENTRY)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init_v2(const FloeHostApi *host, FloePluginRegistrar *reg) {
  return FLOE_OK;
}

#elif defined(ABITEST_INITFAIL)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-initfail", "1.0");
  if (rc != FLOE_OK) return rc;
  if ((rc = register_bad_device(reg)) != FLOE_OK) return rc;
  reg->set_message(reg, "simulated failure: licence server %s unreachable", "lic.example");
  return FLOE_INTERNAL;
}

#elif defined(ABITEST_BADOP)

static floe_code compute(void *state, FloeKernelContext *ctx) { return FLOE_OK; }

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-badop", "1.0");
  if (rc != FLOE_OK) return rc;
  if ((rc = register_bad_device(reg)) != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "NoSuchOpForAbiTest";
  k.device_type = "ABIBAD";
  k.compute = compute;
  return reg->register_kernel(reg, &k);
}

#elif defined(ABITEST_BADGRAD)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-badgrad", "1.0");
  if (rc != FLOE_OK) return rc;
  static const char *const from[] = {"dy:0"};
  static const int32_t grads[] = {0};
  FloeGradientDef gd;
  memset(&gd, 0, sizeof gd);
  gd.struct_size = sizeof gd;
  gd.op = "Relu";
  gd.grad_op = "Identity";
  gd.grad_inputs = from;
  gd.num_grad_inputs = 1;
  gd.input_grads = grads;
  gd.num_input_grads = 1;
  return reg->register_gradient(reg, &gd); /* staged: accepted here, refused at commit */
}

#elif defined(ABITEST_UNAVAIL)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-unavail", "1.0");
  if (rc != FLOE_OK) return rc;
  reg->set_message(reg, "no ABIBAD accelerator on this machine");
  return FLOE_UNAVAILABLE;
}

#elif defined(ABITEST_NODECLARE)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  if (register_bad_device(reg) != FLOE_FAILED_PRECONDITION) return FLOE_INTERNAL;
  return FLOE_OK;
}

#else
#error "build with one of -DABITEST_NOENTRY, -DABITEST_INITFAIL, -DABITEST_BADOP, -DABITEST_UNAVAIL, -DABITEST_NODECLARE"
#endif
