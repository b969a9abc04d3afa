/* SPDX-License-Identifier: Apache-2.0 */
/* run_model.c - a deployed application in miniature: links libfloe alone (no libfloe-onnx,
 * no tools) and relies on libfloe finding its plugins by itself.
 *
 *   run_model devices                       print "type short_name" per device, one a line
 *   run_model GRAPH FEED=IN.npy FETCH OUT.npy
 *                                           run a frozen graph: feed one tensor, save one
 *
 * Exit 0 on success; 1 with the library's message on stderr otherwise. */
#include <stdio.h>
#include <string.h>

#include <floe/floe.h>

static int fail(FloeStatus *st, const char *what) {
  fprintf(stderr, "run_model: %s: %s\n", what, floe_status_message(st));
  floe_status_free(st);
  return 1;
}

static int list_devices(FloeStatus *st) {
  FloeRuntime *rt = floe_runtime_default(st);
  if (!rt) return fail(st, "runtime");
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    FloeDeviceInfo info;
    memset(&info, 0, sizeof info);
    if (floe_runtime_device(rt, i, &info) != FLOE_OK) return fail(st, "device");
    printf("%s %s\n", info.type, info.short_name);
  }
  floe_status_free(st);
  return 0;
}

int main(int argc, char **argv) {
  FloeStatus *st = floe_status_new();
  if (!st) return 1;
  if (argc == 2 && strcmp(argv[1], "devices") == 0) return list_devices(st);
  if (argc != 5 || !strchr(argv[2], '=')) {
    fprintf(stderr, "usage: run_model devices | run_model GRAPH FEED=IN.npy FETCH OUT.npy\n");
    floe_status_free(st);
    return 2;
  }
  char feed_name[256];
  const char *eq = strchr(argv[2], '=');
  snprintf(feed_name, sizeof feed_name, "%.*s", (int)(eq - argv[2]), argv[2]);
  FloeGraph *g = floe_graph_load(argv[1], st);
  if (!g) return fail(st, argv[1]);
  FloeTensor *x = floe_tensor_load_npy(eq + 1, st);
  if (!x) return fail(st, eq + 1);
  FloeSession *s = floe_session_new(g, NULL, st);
  floe_graph_free(g);
  if (!s) return fail(st, "session");
  FloeFeed feed = {feed_name, x};
  const char *fetch = argv[3];
  FloeTensor *y = NULL;
  if (floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &y, st) != FLOE_OK) return fail(st, "run");
  if (floe_tensor_save_npy(y, argv[4], st) != FLOE_OK) return fail(st, argv[4]);
  floe_tensor_release(y);
  floe_tensor_release(x);
  floe_session_free(s);
  floe_status_free(st);
  return 0;
}
