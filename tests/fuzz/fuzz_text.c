/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_text.c - libFuzzer target for the text corpus reader (tokenizer, vocabulary,
 * held-out split) on one file. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "floe/floe.h"
#include "floe/floe_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  FloeStatus *st = floe_status_new();
  const char *paths[1] = {path};
  FloeTextCorpus *c = floe_text_load_files(paths, 1, 50, 10, st);
  if (!c) {
    FUZZ_NEED_MESSAGE(st);
  } else {
    int64_t n = 0;
    const int32_t *ids = floe_text_ids(c, FLOE_TEXT_TRAIN, &n);
    for (int64_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= floe_text_vocab_size(c)) abort();
    floe_text_corpus_free(c);
  }
  floe_status_free(st);
  close(fd);
  return 0;
}
