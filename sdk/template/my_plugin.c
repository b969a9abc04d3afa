/* SPDX-License-Identifier: Apache-2.0 */
/* my_plugin.c - template of a Floe plugin. Copy it, rename "myplugin", fill in.
 *
 * Build:  cc -O2 -fPIC -shared $(pkg-config --cflags floe-plugin) my_plugin.c -o floe-myplugin.so
 * Use:    FLOE_PLUGIN_PATH=$PWD floe plugins
 *
 * The file name must start with "floe-": the loader only considers floe-*.so files.
 */
#include <floe/floe_plugin.h>
#include <string.h>

static const FloeHostApi *host; /* the core's services; valid for the whole process */

/* A kernel: read inputs, allocate outputs through the host, compute. Errors are values. */
static floe_code my_square_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = host->ctx_input(ctx, 0);
  FloeTensor *y;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  const float *in = host->tensor_data(x);
  float *out = host->tensor_data(y);
  for (int64_t i = 0; i < host->tensor_num_elements(x); i++) out[i] = in[i] * in[i];
  return FLOE_OK;
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  /* 1. Declare first: name, version and the ABI this file was compiled against. */
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "myplugin", "0.1");
  if (rc != FLOE_OK) return rc; /* e.g. FLOE_ABI_MISMATCH: the core explains why */
  host = h;

  /* 2. Optionally say "not usable here":
   *    reg->set_message(reg, "no device found"); return FLOE_UNAVAILABLE; */

  /* 3. Register kernels (and devices, ops, transports). Here: a second kernel for the
   *    standard op Square on the CPU, f32 only, preferred over the built-in one. */
  FloeTypeConstraint f32 = {"T", FLOE_DTYPE_BIT(FLOE_F32)};
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "Square";
  k.device_type = "CPU";
  k.constraints = &f32;
  k.num_constraints = 1;
  k.priority = 10;
  k.compute = my_square_compute;
  return reg->register_kernel(reg, &k);
}
