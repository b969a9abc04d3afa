/* SPDX-License-Identifier: Apache-2.0 */
/* make_graph.c - builds and saves a graph that uses the HardSwish op of the plugin:
 *   y = HardSwish(x) for a placeholder x of shape [?], and dx = d sum(y) / dx, which
 *   floe_gradients builds from the gradient the plugin registered (HardSwishGrad).
 * Built against the installed application API: cc make_graph.c $(pkg-config --cflags --libs floe)
 * Run with FLOE_PLUGIN_PATH pointing at floe-hardswish.so so the op is defined. */
#include <floe/floe.h>
#include <stdio.h>

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "hardswish.floe";
  FloeStatus *st = floe_status_new();
  if (!floe_runtime_default(st)) { /* loads the plugins, which define HardSwish */
    fprintf(stderr, "make_graph: %s\n", floe_status_message(st));
    return 1;
  }
  FloeGraph *g = floe_graph_new();
  int64_t unknown = -1;
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, &unknown));
  FloeOutput y = floe_unary(g, "HardSwish", "y", x), dx;
  if (floe_graph_status(g) == FLOE_OK && floe_gradients(g, &y, 1, &x, 1, NULL, &dx, st) == FLOE_OK)
    floe_unary(g, "Identity", "dx", dx);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graph: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  printf("wrote %s\n", path);
  floe_graph_free(g);
  floe_status_free(st);
  return 0;
}
