/* SPDX-License-Identifier: Apache-2.0 */
/* make_graphs.c - writes the graph files the command-line tests run:
 *   affine.floe: y = x @ W + b, z = Relu(y), with x a [?,3] f32 placeholder.
 *   unranked.floe: z = Relu(x), with x an f32 placeholder of unknown rank.
 * W and b are fixed so the test knows the expected numbers. */
#include <floe/floe.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_graphs DIR\n");
    return 2;
  }
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_new();
  int64_t xd[] = {-1, 3}, wd[] = {3, 2}, bd[] = {2};
  float w[] = {1, -1, 2, 0, 0, 1}, b[] = {0.5f, -10};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, wd, w, sizeof w, st);
  FloeTensor *bt = floe_tensor_from_data(FLOE_F32, 1, bd, b, sizeof b, st);
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput mm = floe_matmul(g, "mm", x, floe_const(g, "W", wt), 0, 0);
  FloeOutput y = floe_binary(g, "Add", "y", mm, floe_const(g, "b", bt));
  floe_unary(g, "Relu", "z", y);
  floe_tensor_release(wt);
  floe_tensor_release(bt);
  char path[4096];
  snprintf(path, sizeof path, "%s/affine.floe", argv[1]);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graphs: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  floe_graph_free(g);
  g = floe_graph_new();
  floe_unary(g, "Relu", "z", floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown()));
  snprintf(path, sizeof path, "%s/unranked.floe", argv[1]);
  if (floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK) {
    fprintf(stderr, "make_graphs: %s%s\n", floe_graph_error(g, NULL), floe_status_message(st));
    return 1;
  }
  floe_graph_free(g);
  floe_status_free(st);
  return 0;
}
