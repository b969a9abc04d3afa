/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_safetensors.c - libFuzzer target for the checkpoint reader: the file is opened and
 * validated (header, layout, hash) and every tensor read. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "core.h"
#include "train/checkpoint_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  FloeStatus *st = floe_status_new();
  FloeSafetensorsFile f;
  if (floe__safetensors_open(path, &f, st) != FLOE_OK) {
    FUZZ_NEED_MESSAGE(st);
  } else {
    for (int i = 0; i < f.n; i++) {
      FloeTensor *t = floe__safetensors_read(&f, &f.e[i], st);
      if (!t) FUZZ_NEED_MESSAGE(st);
      floe_tensor_release(t);
    }
    floe__safetensors_close(&f);
  }
  floe_status_free(st);
  close(fd);
  return 0;
}
