/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_npy.c - libFuzzer target for the .npy reader. A tensor that parses must serialize
 * and parse back to the same bytes. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <string.h>

#include "floe/floe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FloeStatus *st = floe_status_new();
  FloeTensor *t = floe_tensor_parse_npy(data, size, "fuzz.npy", st);
  if (!t) {
    FUZZ_NEED_MESSAGE(st);
  } else {
    void *buf = NULL;
    size_t len = 0;
    if (floe_tensor_serialize_npy(t, &buf, &len, st) != FLOE_OK) abort();
    FloeTensor *u = floe_tensor_parse_npy(buf, len, "again.npy", st);
    if (!u || floe_tensor_nbytes(u) != floe_tensor_nbytes(t) ||
        (floe_tensor_nbytes(t) &&
         memcmp(floe_tensor_data(u), floe_tensor_data(t), floe_tensor_nbytes(t))))
      abort();
    floe_tensor_release(u);
    free(buf);
    floe_tensor_release(t);
  }
  floe_status_free(st);
  return 0;
}
