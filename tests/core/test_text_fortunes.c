/* SPDX-License-Identifier: Apache-2.0 */
/* test_text_fortunes.c - the real corpus: Debian's fortune files load into sane figures
 * (a full 10,000-id vocabulary in frequency order, tens of thousands of held-out ids, every
 * 10th fortune held out, a modest <unk> rate, a unigram perplexity in the hundreds) and the
 * LSTM benchmark's windows fit. Prints the figures. Skipped (exit 77) when the fortunes
 * package is not installed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "floe/floe.h"

START_TEST(fortunes_corpus) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *c = floe_text_load_dir(NULL, 10000, 10, st);
  ck_assert_msg(c != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_text_vocab_size(c), 10000);
  int64_t ntr, nte, ftr, fte;
  const int32_t *train = floe_text_ids(c, FLOE_TEXT_TRAIN, &ntr);
  floe_text_ids(c, FLOE_TEXT_TEST, &nte);
  floe_text_fortunes(c, FLOE_TEXT_TRAIN, &ftr);
  floe_text_fortunes(c, FLOE_TEXT_TEST, &fte);
  ck_assert_int_gt(ntr, 100000);
  ck_assert_int_gt(nte, 10000);
  ck_assert_int_eq(fte, (ftr + fte) / 10);
  /* Every vocabulary word occurs in training, in non-increasing order of count; the counts
   * add up to the training ids. */
  int64_t sum = floe_text_count(c, 0) + floe_text_count(c, 1);
  for (int64_t id = 2; id < 10000; id++) {
    ck_assert_int_gt(floe_text_count(c, id), 0);
    if (id > 2) ck_assert_int_le(floe_text_count(c, id), floe_text_count(c, id - 1));
    sum += floe_text_count(c, id);
  }
  ck_assert_int_eq(sum, ntr);
  ck_assert_int_eq(floe_text_count(c, FLOE_TEXT_EOS), ftr);
  int64_t the = floe_text_id(c, "the");
  ck_assert(the >= 2 && the < 8);
  ck_assert_int_eq(train[ntr - 1], FLOE_TEXT_EOS);
  double unk_tr = floe_text_unk_rate(c, FLOE_TEXT_TRAIN), unk_te = floe_text_unk_rate(c, FLOE_TEXT_TEST);
  double ppl = floe_text_unigram_perplexity(c, FLOE_TEXT_TEST);
  ck_assert(unk_tr > 0 && unk_tr < 0.2);
  ck_assert(unk_te > 0 && unk_te < 0.2);
  ck_assert(isfinite(ppl) && ppl > 100 && ppl < 10000);
  FloeTextWindows *w = floe_text_windows_new(c, FLOE_TEXT_TRAIN, 64, 35, st);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_gt(floe_text_windows_per_epoch(w), 100);
  printf("fortunes: vocabulary %lld ids; training %lld ids in %lld fortunes, held-out %lld ids "
         "in %lld fortunes; <unk> rate %.2f%% (training) %.2f%% (held-out); unigram "
         "perplexity of the held-out split %.1f; %lld windows of 64 x 35 per epoch\n",
         (long long)floe_text_vocab_size(c), (long long)ntr, (long long)ftr, (long long)nte,
         (long long)fte, 100 * unk_tr, 100 * unk_te, ppl,
         (long long)floe_text_windows_per_epoch(w));
  floe_text_windows_free(w);
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

int main(void) {
  struct stat sb;
  if (stat(FLOE_TEXT_FORTUNES_DIR, &sb) != 0) {
    printf("SKIP: %s not found: install Debian's fortunes package (apt-get install fortunes) "
           "to check the real corpus\n",
           FLOE_TEXT_FORTUNES_DIR);
    return 77;
  }
  Suite *s = suite_create("text_fortunes");
  TCase *tc = tcase_create("fortunes");
  tcase_add_test(tc, fortunes_corpus);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
