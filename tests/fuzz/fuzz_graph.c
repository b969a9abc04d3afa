/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_graph.c - libFuzzer target for Floe's graph file reader (docs/graph-format.md). A
 * file that loads must serialize again and load to the same bytes. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <string.h>

#include "floe/floe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_deserialize(data, size, "fuzz.floe", st);
  if (!g) {
    FUZZ_NEED_MESSAGE(st);
  } else {
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (floe_graph_serialize(g, &a, &na, st) == FLOE_OK) {
      FloeGraph *h = floe_graph_deserialize(a, na, "again.floe", st);
      if (!h) abort(); /* what Floe writes, Floe reads */
      if (floe_graph_serialize(h, &b, &nb, st) != FLOE_OK || na != nb || memcmp(a, b, na))
        abort(); /* not a fixed point */
      floe_graph_free(h);
    } else {
      FUZZ_NEED_MESSAGE(st);
    }
    free(a);
    free(b);
    floe_graph_free(g);
  }
  floe_status_free(st);
  return 0;
}
