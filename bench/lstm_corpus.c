/* SPDX-License-Identifier: Apache-2.0 */
/* lstm_corpus.c - writes the fortune corpus as Floe tokenizes it (floe_text.h) into a folder
 * of .npy files, so the Python baselines (lstm_baselines.py) train on exactly Floe's ids:
 * train.npy, test.npy (i32 id streams), train_fortunes.npy, test_fortunes.npy, counts.npy,
 * vocab.txt. Prints one JSON line with the corpus' figures.
 *
 * Usage: lstm_corpus OUT_DIR [--data DIR] [--vocab N] [--holdout-every K]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "floe/floe.h"

static int usage(const char *msg) {
  if (msg) fprintf(stderr, "lstm_corpus: %s\n", msg);
  fprintf(stderr,
          "Usage: lstm_corpus OUT_DIR [--data DIR] [--vocab N] [--holdout-every K]\n"
          "  --data DIR           folder of fortune files (default %s)\n"
          "  --vocab N            ids in the vocabulary, <unk> and <eos> included (10000)\n"
          "  --holdout-every K    hold out every K-th fortune (10)\n",
          FLOE_TEXT_FORTUNES_DIR);
  return 2;
}

int main(int argc, char **argv) {
  const char *data = NULL;
  long vocab = 10000, every = 10;
  static const struct option opts[] = {{"data", required_argument, NULL, 'd'},
                                       {"vocab", required_argument, NULL, 'v'},
                                       {"holdout-every", required_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "d:v:k:h", opts, NULL)) != -1) {
    switch (c) {
      case 'd': data = optarg; break;
      case 'v':
        vocab = strtol(optarg, &end, 10);
        if (*end || vocab < 2) return usage("--vocab takes N >= 2");
        break;
      case 'k':
        every = strtol(optarg, &end, 10);
        if (*end || every < 2 || every > 1000000) return usage("--holdout-every takes K >= 2");
        break;
      case 'h': usage(NULL); return 0;
      default: return usage(NULL);
    }
  }
  if (optind + 1 != argc) return usage("one OUT_DIR expected");
  const char *out = argv[optind];
  FloeStatus *st = floe_status_new();
  if (!st) return 1;
  FloeTextCorpus *corpus = floe_text_load_dir(data, vocab, (int)every, st);
  if (!corpus || floe_text_save_npy(corpus, out, st) != FLOE_OK) {
    fprintf(stderr, "lstm_corpus: %s\n", floe_status_message(st));
    floe_text_corpus_free(corpus);
    floe_status_free(st);
    return 1;
  }
  int64_t ntr, nte, ftr, fte;
  floe_text_ids(corpus, FLOE_TEXT_TRAIN, &ntr);
  floe_text_ids(corpus, FLOE_TEXT_TEST, &nte);
  floe_text_fortunes(corpus, FLOE_TEXT_TRAIN, &ftr);
  floe_text_fortunes(corpus, FLOE_TEXT_TEST, &fte);
  printf("{\"vocab\": %lld, \"train_ids\": %lld, \"test_ids\": %lld, \"train_fortunes\": %lld, "
         "\"test_fortunes\": %lld, \"unk_rate_test\": %.6f, \"unigram_perplexity\": %.4f}\n",
         (long long)floe_text_vocab_size(corpus), (long long)ntr, (long long)nte,
         (long long)ftr, (long long)fte, floe_text_unk_rate(corpus, FLOE_TEXT_TEST),
         floe_text_unigram_perplexity(corpus, FLOE_TEXT_TEST));
  floe_text_corpus_free(corpus);
  floe_status_free(st);
  return 0;
}
