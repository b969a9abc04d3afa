/* SPDX-License-Identifier: Apache-2.0 */
/* make_abi_graphs.c - writes graph files made of the ABI test plugins' custom ops (loaded
 * from $FLOE_TEST_PLUGIN_DIR) for test_cli_hostile.sh:
 *   hang.floe: x [?,3] f32; hang = AbiTestMisbehave(x) with mode never_done (its kernel
 *     never calls done); out = hang + x; side = x + 1 (does not need hang).
 *   hostile.floe: y = AbiTestHostile(x), whose kernel fails with control sequences in its
 *     message. */
#include <floe/floe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int save(FloeGraph *g, const char *dir, const char *file, FloeStatus *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_abi_graphs: %s: %s%s\n", file, floe_graph_error(g, NULL),
            floe_status_message(st));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = getenv("FLOE_TEST_PLUGIN_DIR");
  if (argc != 2 || !dir) {
    fprintf(stderr, "usage: FLOE_TEST_PLUGIN_DIR=DIR make_abi_graphs OUTDIR\n");
    return 2;
  }
  FloeStatus *st = floe_status_new();
  /* The ops exist once a runtime loaded their plugins. */
  FloeRuntimeOptions o = {sizeof o, dir, "abitest,abitest-hostile", 1, 1};
  FloeRuntime *rt = floe_runtime_new(&o, st);
  if (!rt) {
    fprintf(stderr, "make_abi_graphs: %s\n", floe_status_message(st));
    return 1;
  }
  const int64_t xd[2] = {-1, 3};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeNodeBuilder *b = floe_node_begin(g, "AbiTestMisbehave", "hang");
  floe_node_add_input(b, x);
  floe_node_set_attr_string(b, "mode", "never_done");
  floe_binary(g, "Add", "out", floe_out(floe_node_finish(b), 0), x);
  floe_binary(g, "Add", "side", x, floe_const_f32(g, "one", 1.0f));
  int rc = save(g, argv[1], "hang.floe", st);
  floe_graph_free(g);
  g = floe_graph_new();
  x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  floe_unary(g, "AbiTestHostile", "y", x);
  rc |= save(g, argv[1], "hostile.floe", st);
  floe_graph_free(g);
  floe_runtime_free(rt);
  floe_status_free(st);
  return rc;
}
