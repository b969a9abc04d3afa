/* SPDX-License-Identifier: Apache-2.0 */
/* run_my_op.c - runs the op of sdk/template/my_plugin.c: y = MySquarePlus(x, alpha = 0.5) and
 * dx = d(sum y)/dx through the gradient the plugin registered, for x = -2, 0, 1.5. Prints
 * "y: ..." and "dx: ..." (tests/examples/test_sdk.sh checks the numbers). Built with
 * pkg-config floe against the installed SDK; the plugin comes from FLOE_PLUGIN_PATH. */
#include <floe/floe.h>
#include <stdio.h>

static void print(const char *what, const FloeTensor *t) {
  const float *v = floe_tensor_data(t);
  printf("%s:", what);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) printf(" %g", v[i]);
  printf("\n");
}

int main(void) {
  FloeStatus *st = floe_status_new();
  FloeGraph *g = NULL;
  FloeSession *s = NULL;
  FloeTensor *x = NULL, *out[2] = {NULL, NULL};
  int rc = 1;
  if (!st) return 1;
  /* Plugins load with the runtime: the custom op is defined from then on. */
  if (!floe_runtime_default(st) || !(g = floe_graph_new())) goto done;
  FloeOutput in = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, (int64_t[]){3}));
  FloeNodeBuilder *b = floe_node_begin(g, "MySquarePlus", "y");
  floe_node_add_input(b, in);
  floe_node_set_attr_float(b, "alpha", 0.5);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  FloeOutput dx;
  floe_gradients(g, &y, 1, &in, 1, NULL, &dx, st);
  floe_unary(g, "Identity", "dx", dx);
  if (floe_graph_status(g) != FLOE_OK) {
    floe_graph_error(g, st);
    goto done;
  }
  if (!(s = floe_session_new(g, NULL, st))) goto done;
  if (!(x = floe_tensor_from_data(FLOE_F32, 1, (int64_t[]){3}, (float[]){-2.0f, 0.0f, 1.5f},
                                  3 * sizeof(float), st)))
    goto done;
  FloeFeed feed = {"x", x};
  const char *fetches[2] = {"y", "dx"};
  if (floe_session_run(s, &feed, 1, fetches, 2, NULL, 0, out, st) != FLOE_OK) goto done;
  print("y", out[0]);
  print("dx", out[1]);
  rc = 0;
done:
  if (rc) fprintf(stderr, "run_my_op: %s\n", floe_status_message(st));
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
  floe_tensor_release(x);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return rc;
}
