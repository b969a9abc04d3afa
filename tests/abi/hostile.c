/* SPDX-License-Identifier: Apache-2.0 */
/* hostile.c - test plugins whose free-text strings carry terminal control sequences (ESC,
 * BEL, the C1 CSI as UTF-8), for the command line's escaping; one per -D:
 *
 *   ABITEST_HOSTILE_LOAD  floe-abitest-hostile.so: loads; its version string, its op
 *                         AbiTestHostile's documentation, and the error its CPU kernel
 *                         always fails with hold control sequences (names are checked by
 *                         the core, so they cannot).
 *   ABITEST_HOSTILE_FAIL  floe-abitest-hostile-fail.so: init fails with such a message.
 *
 * A file name with control characters (the name a plugin is reported under until it
 * declares one) is made by the tests themselves, by copying one of these. */
#include <string.h>

#include <floe/floe_plugin.h>

/* Clears the screen, sets the window title, rings the bell, and the C1 CSI (U+009B). */
#define HOSTILE "\x1b[2J\x1b]0;owned\x07\xc2\x9b" "31m"

#if defined(ABITEST_HOSTILE_LOAD)

static const FloeHostApi *host;

static floe_code same_shape(const FloeHostApi *h, FloeShapeContext *sctx) {
  FloeShape in = h->shape_input(sctx, 0);
  h->shape_set_output(sctx, 0, &in);
  return FLOE_OK;
}

static floe_code compute(void *state, FloeKernelContext *ctx) {
  return host->ctx_set_error(ctx, FLOE_INTERNAL, "the kernel says " HOSTILE " no");
}

static const char *const inputs[] = {"x: f32"};
static const char *const outputs[] = {"y: f32"};

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-hostile", "6.6.6" HOSTILE);
  if (rc != FLOE_OK) return rc;
  host = h;
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "AbiTestHostile";
  op.inputs = inputs;
  op.num_inputs = 1;
  op.outputs = outputs;
  op.num_outputs = 1;
  op.shape_fn = same_shape;
  op.doc = "y = x, documented " HOSTILE " with control sequences (a test of escaping)";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "AbiTestHostile";
  k.device_type = "CPU";
  k.compute = compute;
  return reg->register_kernel(reg, &k);
}

#elif defined(ABITEST_HOSTILE_FAIL)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest-hostile-fail", "1.0");
  if (rc != FLOE_OK) return rc;
  reg->set_message(reg, "the licence " HOSTILE " expired");
  return FLOE_INTERNAL;
}

#else
#error "build with -DABITEST_HOSTILE_LOAD or -DABITEST_HOSTILE_FAIL"
#endif
