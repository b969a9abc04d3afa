/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_idx.c - libFuzzer target for the IDX reader (plain and gzip). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "core.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  FloeStatus *st = floe_status_new();
  FloeIdxInfo info;
  void *values = NULL;
  if (floe__idx_read_file(path, &info, &values, st) != FLOE_OK) FUZZ_NEED_MESSAGE(st);
  floe__free(values);
  floe_status_free(st);
  close(fd);
  return 0;
}
