/* SPDX-License-Identifier: Apache-2.0 */
/* test_text.c - the text corpus of floe_text.h on a tiny fortune folder written here:
 * tokenization, the fortune format (separators, CRLF, overstriking, files skipped by name),
 * vocabulary order, ties and cut-off, <unk> mapping, the split, the unigram perplexity
 * (worked out by hand below), both batchers (every batch against a naive recomputation),
 * the .npy export, errors and allocation failures.
 *
 * The folder (holdout_every 3: fortunes 2 and 5 are held out):
 *   a: k0 "The cat sat.\nThe cat ran!"        the cat sat . the cat ran !
 *      k1 "A dog sat, the dog ran..."          a dog sat , the dog ran .
 *      (an empty fortune and one without a token: skipped)
 *      k2 "Don't panic: it's the well-known cat!?"
 *                                              don't panic : it's the well-known cat ! ?
 *   b: k3 "c\bca\bat\bt and ___\b\b\bdog\r\n"  cat and dog       (CRLF "%\r" separator)
 *      k4 "The 'cat' -- the END"               the cat the end
 *      k5 "The café? 3.14 'tis rock- well--known"
 *                                              the café ? 3 . 14 tis rock well known
 *   a.dat (NUL bytes), c.u8, .hidden, sub/: not fortune files, skipped.
 * Training counts (k0 k1 k3 k4): the 5, cat 4, dog 3, . 2, ran 2, sat 2, ! 1, , 1, a 1,
 * and 1, end 1; 23 words + 4 <eos> = 27 ids. Vocabulary by count, ties bytewise:
 * <unk> <eos> the cat dog . ran sat ! , a and end; with 7 ids it stops after "ran", cutting
 * the tie of count 2 between "ran" and "sat".
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "floe/floe.h"

static char tmpdir[256];

static void tmp_setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/floe-test-text-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmp_teardown(void) {
  char cmd[640];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s'; rm -rf '%s'", tmpdir, tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static char *path_in(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static void write_bytes(const char *path, const char *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(p, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

static void write_str(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static const char file_a[] =
    "The cat sat.\nThe cat ran!\n%\nA dog sat, the dog ran...\n%\n%\n -- *** --\n%\n"
    "Don't panic: it's the well-known cat!?\n";
static const char file_b[] =
    "c\bca\bat\bt and ___\b\b\bdog\r\n%\r\nThe 'cat' -- the END\n%\n"
    "The caf\xc3\xa9? 3.14 'tis rock- well--known\n";

/* The tiny folder of the header comment, in tmpdir/fortunes. */
static const char *write_fortunes(void) {
  const char *dir = path_in("fortunes");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  char p[600];
  snprintf(p, sizeof p, "%s/a", dir);
  write_str(p, file_a);
  snprintf(p, sizeof p, "%s/b", dir);
  write_str(p, file_b);
  snprintf(p, sizeof p, "%s/a.dat", dir);
  write_bytes(p, "\0\0\0\2zebra\0", 11);
  snprintf(p, sizeof p, "%s/c.u8", dir);
  write_str(p, "zebra zebra zebra\n");
  snprintf(p, sizeof p, "%s/.hidden", dir);
  write_str(p, "zebra zebra zebra\n");
  snprintf(p, sizeof p, "%s/sub", dir);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/sub/d", dir);
  write_str(p, "zebra zebra zebra\n");
  return dir;
}

/* Hand-written: each fortune's tokens, and whether it is held out. */
static const char *const fortune_tokens[6][12] = {
    {"the", "cat", "sat", ".", "the", "cat", "ran", "!", NULL},
    {"a", "dog", "sat", ",", "the", "dog", "ran", ".", NULL},
    {"don't", "panic", ":", "it's", "the", "well-known", "cat", "!", "?", NULL},
    {"cat", "and", "dog", NULL},
    {"the", "cat", "the", "end", NULL},
    {"the", "caf\xc3\xa9", "?", "3", ".", "14", "tis", "rock", "well", "known", NULL},
};
static const int fortune_held_out[6] = {0, 0, 1, 0, 0, 1};
static const char *const full_vocab[] = {"<unk>", "<eos>", "the", "cat", "dog", ".", "ran",
                                         "sat", "!", ",", "a", "and", "end"};

/* The id of tok in the first v words of full_vocab (linear search), 0 when absent. */
static int32_t naive_id(const char *tok, int v) {
  for (int i = 2; i < v; i++)
    if (strcmp(full_vocab[i], tok) == 0) return i;
  return 0;
}

/* The expected id stream of a split for a vocabulary of v ids. */
static int64_t naive_stream(int split, int v, int32_t *out, int64_t *offsets, int64_t *nf) {
  int64_t n = 0;
  *nf = 0;
  offsets[0] = 0;
  for (int k = 0; k < 6; k++) {
    if (fortune_held_out[k] != split) continue;
    for (int t = 0; fortune_tokens[k][t]; t++) out[n++] = naive_id(fortune_tokens[k][t], v);
    out[n++] = 1;
    offsets[++*nf] = n;
  }
  return n;
}

static FloeTextCorpus *load_tiny(int64_t vocab, FloeStatus *st) {
  FloeTextCorpus *c = floe_text_load_dir(write_fortunes(), vocab, 3, st);
  ck_assert_msg(c != NULL, "%s", floe_status_message(st));
  return c;
}

static void check_tokens(const char *text, size_t len, const char *want, int64_t want_n) {
  int64_t n = -1;
  char *got = floe_text_tokenize(text, len, &n, NULL);
  ck_assert_ptr_nonnull(got);
  ck_assert_msg(strcmp(got, want) == 0, "tokens of \"%.*s\": \"%s\", want \"%s\"", (int)len,
                text, got, want);
  ck_assert_int_eq(n, want_n);
  free(got);
}

START_TEST(tokenizer_rules) {
  check_tokens("Don't PANIC: it's well-known!?", 30, "don't\npanic\n:\nit's\nwell-known\n!\n?\n",
               7);
  check_tokens("'tis rock- well--known ...and", 29, "tis\nrock\nwell\nknown\n.\nand\n", 6);
  check_tokens("rock'n'roll x-ray's", 19, "rock'n'roll\nx-ray's\n", 2);
  check_tokens("c\bca\bat\bt ___\b\b\bdog", 19, "cat\ndog\n", 2);
  check_tokens("\b\bab", 4, "ab\n", 1);
  check_tokens("Caf\xc3\xa9 CAF\xc3\x89", 11, "caf\xc3\xa9\ncaf\xc3\x89\n", 2);
  check_tokens("3.14 x/y (a) \"q\" e.g.", 21, "3\n.\n14\nx\ny\na\nq\ne\n.\ng\n.\n", 11);
  check_tokens("a\0b", 3, "a\nb\n", 2); /* NUL separates: text is bytes, not a C string */
  check_tokens("  -- ** '' --", 13, "", 0);
  check_tokens(NULL, 0, "", 0);
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_null(floe_text_tokenize(NULL, 3, NULL, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
}
END_TEST

START_TEST(vocabulary_and_split) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *full = load_tiny(0, st);
  ck_assert_int_eq(floe_text_vocab_size(full), 13);
  for (int i = 0; i < 13; i++) ck_assert_str_eq(floe_text_word(full, i), full_vocab[i]);
  floe_text_corpus_free(full);

  FloeTextCorpus *c = floe_text_load_dir(path_in("fortunes"), 7, 3, st);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(floe_text_vocab_size(c), 7);
  for (int i = 0; i < 7; i++) {
    ck_assert_str_eq(floe_text_word(c, i), full_vocab[i]);
    ck_assert_int_eq(floe_text_id(c, full_vocab[i]), i);
  }
  ck_assert_ptr_null(floe_text_word(c, 7));
  ck_assert_ptr_null(floe_text_word(c, -1));
  ck_assert_int_eq(floe_text_id(c, "sat"), FLOE_TEXT_UNK); /* cut off in the tie */
  ck_assert_int_eq(floe_text_id(c, "zebra"), FLOE_TEXT_UNK); /* only in skipped files */
  ck_assert_int_eq(floe_text_id(c, "The"), FLOE_TEXT_UNK);   /* lookups take lowercase */

  /* Training counts from the hand-written tokens by a naive loop. */
  int64_t want_count[7] = {0};
  for (int k = 0; k < 6; k++) {
    if (fortune_held_out[k]) continue;
    for (int t = 0; fortune_tokens[k][t]; t++) want_count[naive_id(fortune_tokens[k][t], 7)]++;
    want_count[1]++;
  }
  ck_assert_int_eq(want_count[0], 7); /* sat 2, ! , a and end */
  for (int i = 0; i < 7; i++) ck_assert_int_eq(floe_text_count(c, i), want_count[i]);
  ck_assert_int_eq(floe_text_count(c, 7), 0);

  for (int split = 0; split < 2; split++) {
    int32_t want[64];
    int64_t off[8], nf, got_n, got_nf;
    int64_t n = naive_stream(split, 7, want, off, &nf);
    const int32_t *ids = floe_text_ids(c, (FloeTextSplit)split, &got_n);
    const int64_t *got_off = floe_text_fortunes(c, (FloeTextSplit)split, &got_nf);
    ck_assert_int_eq(got_n, n);
    ck_assert_int_eq(got_nf, nf);
    for (int64_t i = 0; i < n; i++) ck_assert_int_eq(ids[i], want[i]);
    for (int64_t k = 0; k <= nf; k++) ck_assert_int_eq(got_off[k], off[k]);
  }
  ck_assert_int_eq(floe_text_fortunes(c, FLOE_TEXT_TRAIN, NULL)[4], 27);
  ck_assert_int_eq(floe_text_fortunes(c, FLOE_TEXT_TEST, NULL)[2], 21);
  ck_assert_double_eq_tol(floe_text_unk_rate(c, FLOE_TEXT_TEST), 15.0 / 21.0, 1e-15);
  ck_assert_double_eq_tol(floe_text_unk_rate(c, FLOE_TEXT_TRAIN), 7.0 / 27.0, 1e-15);
  floe_text_corpus_free(c);

  /* The split does not depend on the vocabulary, and load_files in this order is the
   * same corpus. */
  const char *files[2] = {path_in("fortunes/a"), path_in("fortunes/b")};
  c = floe_text_load_files(files, 2, 7, 3, st);
  ck_assert_ptr_nonnull(c);
  int64_t n;
  floe_text_ids(c, FLOE_TEXT_TEST, &n);
  ck_assert_int_eq(n, 21);
  ck_assert_int_eq(floe_text_count(c, 0), 7);
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

START_TEST(unigram_perplexity_by_hand) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *c = load_tiny(7, st);
  /* Counts <unk> 7, <eos> 4, the 5, cat 4, dog 3, . 2, ran 2: 27 training ids, 7 ids in the
   * vocabulary, so p(w) = (count + 1) / 34. The 21 held-out ids are 15 <unk>, 2 <eos>,
   * 2 the, 1 cat, 1 . (see the header comment). */
  double nll = -(15 * log(8.0 / 34) + 2 * log(5.0 / 34) + 2 * log(6.0 / 34) +
                 log(5.0 / 34) + log(3.0 / 34));
  double want = exp(nll / 21);
  ck_assert_double_eq_tol(floe_text_unigram_perplexity(c, FLOE_TEXT_TEST), want, want * 1e-12);
  /* Training split: 7 <unk>, 4 <eos>, 5 the, 4 cat, 3 dog, 2 ., 2 ran. */
  nll = -(7 * log(8.0 / 34) + 4 * log(5.0 / 34) + 5 * log(6.0 / 34) + 4 * log(5.0 / 34) +
          3 * log(4.0 / 34) + 2 * log(3.0 / 34) + 2 * log(3.0 / 34));
  want = exp(nll / 27);
  ck_assert_double_eq_tol(floe_text_unigram_perplexity(c, FLOE_TEXT_TRAIN), want,
                          want * 1e-12);
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

/* Window i of a batcher over ids[n] with (batch, steps), by the definition. */
static int32_t naive_window(const int32_t *ids, int64_t n, int64_t batch, int64_t steps,
                            int64_t i, int64_t b, int64_t j) {
  int64_t row_len = n / batch;
  return ids[b * row_len + i * steps + j];
}

static void check_windows(const FloeTextCorpus *c, FloeTextSplit split, int64_t batch,
                          int64_t steps, int64_t want_per_epoch) {
  FloeStatus *st = floe_status_new();
  int64_t n;
  const int32_t *ids = floe_text_ids(c, split, &n);
  FloeTextWindows *w = floe_text_windows_new(c, split, batch, steps, st);
  ck_assert_msg(w != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_text_windows_per_epoch(w), want_per_epoch);
  FloeTensor *prev = NULL;
  for (int epoch = 0; epoch < 2; epoch++) {
    floe_text_windows_start_epoch(w, 0);
    for (int64_t i = 0; i < want_per_epoch; i++) {
      FloeTensor *win = NULL, *x = NULL, *y = NULL;
      ck_assert_int_eq(floe_text_windows_next(w, &win, st), 1);
      ck_assert_int_eq(floe_tensor_dtype(win), FLOE_I32);
      ck_assert_int_eq(floe_tensor_dim(win, 0), batch);
      ck_assert_int_eq(floe_tensor_dim(win, 1), steps + 1);
      const int32_t *v = floe_tensor_data(win);
      for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j <= steps; j++)
          ck_assert_int_eq(v[b * (steps + 1) + j], naive_window(ids, n, batch, steps, i, b, j));
      /* Row b continues: the last id of window i - 1 is the first of window i. */
      if (prev && i > 0) {
        const int32_t *pv = floe_tensor_data(prev);
        for (int64_t b = 0; b < batch; b++)
          ck_assert_int_eq(v[b * (steps + 1)], pv[b * (steps + 1) + steps]);
      }
      floe_tensor_release(prev);
      prev = win;
      /* next_xy gives the same window, split into inputs and targets. */
      floe_text_windows_start_epoch(w, i);
      ck_assert_int_eq(floe_text_windows_next_xy(w, &x, &y, st), 1);
      const int32_t *xv = floe_tensor_data(x), *yv = floe_tensor_data(y);
      ck_assert_int_eq(floe_tensor_dim(x, 1), steps);
      ck_assert_int_eq(floe_tensor_dim(y, 1), steps);
      for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < steps; j++) {
          ck_assert_int_eq(xv[b * steps + j], v[b * (steps + 1) + j]);
          ck_assert_int_eq(yv[b * steps + j], v[b * (steps + 1) + j + 1]);
        }
      floe_tensor_release(x);
      floe_tensor_release(y);
    }
    FloeTensor *end = (FloeTensor *)1;
    ck_assert_int_eq(floe_text_windows_next(w, &end, st), 0);
    ck_assert_ptr_null(end);
  }
  floe_tensor_release(prev);
  /* Resuming at window 2 gives window 2. */
  floe_text_windows_start_epoch(w, 2);
  FloeTensor *win = NULL;
  if (want_per_epoch > 2) {
    ck_assert_int_eq(floe_text_windows_next(w, &win, st), 1);
    ck_assert_int_eq(((int32_t *)floe_tensor_data(win))[0],
                     naive_window(ids, n, batch, steps, 2, 0, 0));
    floe_tensor_release(win);
  }
  floe_text_windows_start_epoch(w, 1000);
  ck_assert_int_eq(floe_text_windows_next(w, &win, st), 0);
  floe_text_windows_free(w);
  floe_status_free(st);
}

START_TEST(contiguous_windows) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *c = load_tiny(0, st);
  /* 27 training ids: batch 2 -> rows of 13 -> (13 - 1) / 3 = 4 windows of 4 ids. */
  check_windows(c, FLOE_TEXT_TRAIN, 2, 3, 4);
  check_windows(c, FLOE_TEXT_TRAIN, 1, 26, 1);
  check_windows(c, FLOE_TEXT_TRAIN, 3, 1, 8);
  check_windows(c, FLOE_TEXT_TEST, 2, 4, 2); /* 21 ids -> rows of 10 -> 2 windows */
  /* Too short: 21 held-out ids cannot hold one window of 3 x 7. */
  ck_assert_ptr_null(floe_text_windows_new(c, FLOE_TEXT_TEST, 3, 7, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "held-out split has 21 ids"));
  FloeTextWindows *w = floe_text_windows_new(c, FLOE_TEXT_TEST, 3, 6, NULL); /* just fits */
  ck_assert_int_eq(floe_text_windows_per_epoch(w), 1);
  floe_text_windows_free(w);
  ck_assert_ptr_null(floe_text_windows_new(c, FLOE_TEXT_TRAIN, 0, 3, st));
  ck_assert_ptr_null(floe_text_windows_new(c, FLOE_TEXT_TRAIN, 2, 0, st));
  ck_assert_ptr_null(floe_text_windows_new(c, FLOE_TEXT_TRAIN, INT64_MAX, INT64_MAX, st));
  ck_assert_ptr_null(floe_text_windows_new(NULL, FLOE_TEXT_TRAIN, 2, 3, st));
  ck_assert_int_eq(floe_text_windows_next(NULL, NULL, st), -1);
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

/* The pieces of a split by the definition: fortune k's ids read as <eos> t_0 .. t_n-1, cut
 * into pieces of at most max_len (input, target) pairs. tokens[p] holds len[p] + 1 ids. */
typedef struct Pieces {
  int n;
  int32_t tokens[64][16];
  int32_t len[64];
} Pieces;

static void naive_pieces(const FloeTextCorpus *c, FloeTextSplit split, int max_len,
                         Pieces *p) {
  int64_t nf;
  const int64_t *off = floe_text_fortunes(c, split, &nf);
  const int32_t *ids = floe_text_ids(c, split, NULL);
  p->n = 0;
  for (int64_t k = 0; k < nf; k++) {
    int32_t seq[64];
    int64_t m = 0;
    seq[m++] = FLOE_TEXT_EOS;
    for (int64_t t = off[k]; t < off[k + 1]; t++) seq[m++] = ids[t];
    for (int64_t s = 0; s < m - 1; s += max_len) {
      int64_t len = m - 1 - s < max_len ? m - 1 - s : max_len;
      ck_assert_int_lt(p->n, 64);
      p->len[p->n] = (int32_t)len;
      for (int64_t j = 0; j <= len; j++) p->tokens[p->n][j] = seq[s + j];
      p->n++;
    }
  }
}

/* Reads one epoch of s; each row must be one of the pieces (seen[i] counts them), padded
 * with 0 to the batch's width. Returns the batches read; order[] gets the pieces' indices. */
static int read_epoch(FloeTextSequences *s, const Pieces *p, int max_len, int pad_to_max,
                      int batch, int *order) {
  FloeStatus *st = floe_status_new();
  int nb = 0, k = 0;
  FloeTensor *tok, *len;
  int r;
  while ((r = floe_text_sequences_next(s, &tok, &len, st)) == 1) {
    int64_t bs = floe_tensor_dim(tok, 0), width = floe_tensor_dim(tok, 1) - 1;
    ck_assert_int_eq(floe_tensor_dim(len, 0), bs);
    ck_assert_int_le(bs, batch);
    const int32_t *tv = floe_tensor_data(tok), *lv = floe_tensor_data(len);
    int64_t longest = 0;
    for (int64_t row = 0; row < bs; row++) {
      if (lv[row] > longest) longest = lv[row];
      int match = -1;
      for (int i = 0; i < p->n && match < 0; i++) {
        if (p->len[i] != lv[row]) continue;
        if (memcmp(p->tokens[i], tv + row * (width + 1), (size_t)(lv[row] + 1) * 4) == 0)
          match = i;
      }
      ck_assert_msg(match >= 0, "batch %d row %lld is no piece", nb, (long long)row);
      for (int64_t j = lv[row] + 1; j <= width; j++) ck_assert_int_eq(tv[row * (width + 1) + j], 0);
      order[k++] = match;
    }
    ck_assert_int_eq(width, pad_to_max ? max_len : longest);
    floe_tensor_release(tok);
    floe_tensor_release(len);
    nb++;
  }
  ck_assert_int_eq(r, 0);
  floe_status_free(st);
  return nb;
}

START_TEST(padded_sequences) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *c = load_tiny(0, st);
  Pieces p;
  /* Training fortunes of 9, 9, 4 and 5 ids, max_len 4: pieces of 4 4 1 | 4 4 1 | 4 | 4 1. */
  naive_pieces(c, FLOE_TEXT_TRAIN, 4, &p);
  ck_assert_int_eq(p.n, 9);
  /* In order: the rows are the pieces in order, the last batch short. */
  FloeTextSequences *s = floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 2, 4, 0, 0, st);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(floe_text_sequences_count(s), 9);
  ck_assert_int_eq(floe_text_sequences_num_batches(s), 5);
  int order[64];
  ck_assert_int_eq(read_epoch(s, &p, 4, 0, 2, order), 5);
  for (int i = 0; i < 9; i++) ck_assert_int_eq(order[i], i);
  /* Every target of the split is predicted exactly once: the targets of the pieces, in
   * order, are the id stream. */
  int64_t n;
  const int32_t *ids = floe_text_ids(c, FLOE_TEXT_TRAIN, &n);
  int64_t t = 0;
  for (int i = 0; i < p.n; i++)
    for (int j = 1; j <= p.len[i]; j++) ck_assert_int_eq(p.tokens[i][j], ids[t++]);
  ck_assert_int_eq(t, n);
  floe_text_sequences_free(s);

  /* Shuffled, padded to max_len, remainder dropped: each epoch a permutation of 8 of the 9
   * pieces, fixed by (seed, epoch). */
  int flags = FLOE_TEXT_SHUFFLE | FLOE_TEXT_PAD_TO_MAX | FLOE_TEXT_DROP_REMAINDER;
  s = floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 2, 4, flags, 42, st);
  FloeTextSequences *s2 = floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 2, 4, flags, 42, st);
  ck_assert_int_eq(floe_text_sequences_num_batches(s), 4);
  int o0[64], o1[64], o2[64];
  ck_assert_int_eq(read_epoch(s, &p, 4, 1, 2, o0), 4);
  floe_text_sequences_start_epoch(s, 1, 0);
  ck_assert_int_eq(read_epoch(s, &p, 4, 1, 2, o1), 4);
  floe_text_sequences_start_epoch(s2, 1, 2); /* resume epoch 1 at batch 2 */
  ck_assert_int_eq(read_epoch(s2, &p, 4, 1, 2, o2), 2);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(o2[i], o1[4 + i]);
  int seen[9] = {0}, differ = 0;
  for (int i = 0; i < 8; i++) {
    seen[o0[i]]++;
    differ |= o0[i] != o1[i];
  }
  for (int i = 0; i < 9; i++) ck_assert_int_le(seen[i], 1);
  ck_assert(differ);
  floe_text_sequences_start_epoch(s, 0, 0); /* epoch 0 again: the same order */
  ck_assert_int_eq(read_epoch(s, &p, 4, 1, 2, o1), 4);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(o1[i], o0[i]);
  floe_text_sequences_free(s);
  floe_text_sequences_free(s2);

  /* max_len longer than any fortune: one piece per fortune, width the batch's longest. */
  naive_pieces(c, FLOE_TEXT_TEST, 100, &p);
  ck_assert_int_eq(p.n, 2);
  s = floe_text_sequences_new(c, FLOE_TEXT_TEST, 8, 100, 0, 0, st);
  ck_assert_int_eq(read_epoch(s, &p, 100, 0, 8, order), 1);
  floe_text_sequences_free(s);

  ck_assert_ptr_null(floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 0, 4, 0, 0, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_null(floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 2, 0, 0, 0, st));
  ck_assert_int_eq(floe_text_sequences_next(NULL, NULL, NULL, st), -1);
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

START_TEST(npy_export) {
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *c = load_tiny(7, st);
  const char *out = path_in("npy");
  ck_assert_msg(floe_text_save_npy(c, out, st) == FLOE_OK, "%s", floe_status_message(st));
  const char *names[2] = {"train", "test"};
  char p[600];
  for (int split = 0; split < 2; split++) {
    int32_t want[64];
    int64_t off[8], nf;
    int64_t n = naive_stream(split, 7, want, off, &nf);
    snprintf(p, sizeof p, "%s/%s.npy", out, names[split]);
    FloeTensor *t = floe_tensor_load_npy(p, st);
    ck_assert_msg(t != NULL, "%s", floe_status_message(st));
    ck_assert_int_eq(floe_tensor_dtype(t), FLOE_I32);
    ck_assert_int_eq(floe_tensor_rank(t), 1);
    ck_assert_int_eq(floe_tensor_dim(t, 0), n);
    ck_assert_mem_eq(floe_tensor_data(t), want, (size_t)n * 4);
    floe_tensor_release(t);
    snprintf(p, sizeof p, "%s/%s_fortunes.npy", out, names[split]);
    t = floe_tensor_load_npy(p, st);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(floe_tensor_dtype(t), FLOE_I64);
    ck_assert_int_eq(floe_tensor_dim(t, 0), nf + 1);
    ck_assert_mem_eq(floe_tensor_data(t), off, (size_t)(nf + 1) * 8);
    floe_tensor_release(t);
  }
  snprintf(p, sizeof p, "%s/counts.npy", out);
  FloeTensor *t = floe_tensor_load_npy(p, st);
  ck_assert_ptr_nonnull(t);
  int64_t want_counts[7] = {7, 4, 5, 4, 3, 2, 2};
  ck_assert_int_eq(floe_tensor_dim(t, 0), 7);
  ck_assert_mem_eq(floe_tensor_data(t), want_counts, sizeof want_counts);
  floe_tensor_release(t);
  snprintf(p, sizeof p, "%s/vocab.txt", out);
  FILE *f = fopen(p, "r");
  ck_assert_ptr_nonnull(f);
  char line[64];
  for (int i = 0; i < 7; i++) {
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    line[strcspn(line, "\n")] = '\0';
    ck_assert_str_eq(line, full_vocab[i]);
  }
  ck_assert_ptr_null(fgets(line, sizeof line, f));
  fclose(f);
  /* A second save replaces the files; a folder whose parent is missing is an error. */
  ck_assert_int_eq(floe_text_save_npy(c, out, st), FLOE_OK);
  ck_assert_int_eq(floe_text_save_npy(c, path_in("no/such/dir"), st), FLOE_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "no/such/dir"));
  floe_text_corpus_free(c);
  floe_status_free(st);
}
END_TEST

static void expect_load_error(const char *dir, floe_code code, const char *needle,
                              const char *needle2) {
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_null(floe_text_load_dir(dir, 0, 3, st));
  ck_assert_msg(floe_status_code(st) == code, "%s: %s", floe_code_name(floe_status_code(st)),
                floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), needle), "\"%s\" lacks \"%s\"",
                floe_status_message(st), needle);
  if (needle2)
    ck_assert_msg(strstr(floe_status_message(st), needle2), "\"%s\" lacks \"%s\"",
                  floe_status_message(st), needle2);
  floe_status_free(st);
}

START_TEST(load_errors) {
  char d[600], f[700];
  /* Missing folder: names it, the package and --data. */
  expect_load_error(path_in("missing"), FLOE_NOT_FOUND, "fortunes package", "--data DIR");
  expect_load_error(path_in("missing"), FLOE_NOT_FOUND, path_in("missing"), NULL);
  /* A file given as the folder. */
  write_str(path_in("plain"), "x\n");
  expect_load_error(path_in("plain"), FLOE_INVALID_ARGUMENT, path_in("plain"), NULL);
  /* A folder with only skipped files, and one whose fortunes hold no word. */
  snprintf(d, sizeof d, "%s", path_in("onlydat"));
  ck_assert_int_eq(mkdir(d, 0755), 0);
  snprintf(f, sizeof f, "%s/x.dat", d);
  write_str(f, "words words\n");
  expect_load_error(d, FLOE_INVALID_ARGUMENT, "empty corpus", "holds no fortune file");
  snprintf(d, sizeof d, "%s", path_in("nowords"));
  ck_assert_int_eq(mkdir(d, 0755), 0);
  snprintf(f, sizeof f, "%s/x", d);
  write_str(f, "%\n -- \n%\n***\n");
  expect_load_error(d, FLOE_INVALID_ARGUMENT, "empty corpus", d);
  /* Too few fortunes for a held-out split (holdout_every 3, 2 fortunes). */
  write_str(f, "one\n%\ntwo\n");
  expect_load_error(d, FLOE_INVALID_ARGUMENT, "held-out split", "only 2 fortunes");
  /* A NUL byte: the file and the offset. */
  write_bytes(f, "one\n%\ntw\0o\n", 11);
  expect_load_error(d, FLOE_INVALID_ARGUMENT, f, "offset 8");
  /* Unreadable (only meaningful when not root: root reads anything). */
  if (geteuid() != 0) {
    write_str(f, "one\n%\ntwo\n%\nthree\n");
    ck_assert_int_eq(chmod(f, 0), 0);
    expect_load_error(d, FLOE_PERMISSION_DENIED, f, NULL);
    ck_assert_int_eq(chmod(f, 0644), 0);
  }

  FloeStatus *st = floe_status_new();
  const char *missing[1] = {path_in("nowhere")};
  ck_assert_ptr_null(floe_text_load_files(missing, 1, 0, 0, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), missing[0]));
  const char *a_dir[1] = {path_in("nowords")};
  ck_assert_ptr_null(floe_text_load_files(a_dir, 1, 0, 0, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "not a regular file"));
  /* A FIFO is refused at once, not read (it would block). */
  ck_assert_int_eq(mkfifo(path_in("fifo"), 0644), 0);
  const char *fifo[1] = {path_in("fifo")};
  ck_assert_ptr_null(floe_text_load_files(fifo, 1, 0, 0, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "not a regular file"));
  ck_assert_ptr_null(floe_text_load_files(NULL, 0, 0, 0, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "empty corpus"));
  const char *with_null[2] = {f, NULL};
  ck_assert_ptr_null(floe_text_load_files(with_null, 2, 0, 0, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_null(floe_text_load_dir(d, 1, 3, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "vocabulary size 1"));
  ck_assert_ptr_null(floe_text_load_dir(d, 0, 1, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "holdout_every 1"));
  /* Accessors on NULL are safe. */
  ck_assert_int_eq(floe_text_vocab_size(NULL), 0);
  ck_assert_ptr_null(floe_text_ids(NULL, FLOE_TEXT_TRAIN, NULL));
  ck_assert_int_eq(floe_text_id(NULL, "a"), FLOE_TEXT_UNK);
  ck_assert_int_eq(floe_text_save_npy(NULL, "x", st), FLOE_INVALID_ARGUMENT);
  floe_text_corpus_free(NULL);
  floe_status_free(st);
}
END_TEST

/* Every allocation of loading, batching, tokenizing and exporting fails in turn: a clean
 * FLOE_NO_MEMORY each time (leaks show under check-valgrind / check-asan), then success. */
START_TEST(allocation_failures) {
  const char *dir = write_fortunes();
  const char *out = path_in("npy");
  FloeStatus *st = floe_status_new();
  int n;
  for (n = 1; n < 5000; n++) {
    floe_status_clear(st);
    floe_test_fail_alloc_after(n);
    FloeTextCorpus *c = floe_text_load_dir(dir, 7, 3, st);
    FloeTextWindows *w = c ? floe_text_windows_new(c, FLOE_TEXT_TRAIN, 2, 3, st) : NULL;
    FloeTextSequences *s =
        w ? floe_text_sequences_new(c, FLOE_TEXT_TRAIN, 2, 4, FLOE_TEXT_SHUFFLE, 1, st) : NULL;
    FloeTensor *x = NULL, *y = NULL, *tok = NULL, *len = NULL;
    int r = s ? floe_text_windows_next_xy(w, &x, &y, st) : -1;
    if (r == 1) r = floe_text_sequences_next(s, &tok, &len, st);
    char *tokens = r == 1 ? floe_text_tokenize(file_a, sizeof file_a - 1, NULL, st) : NULL;
    floe_code rc = tokens ? floe_text_save_npy(c, out, st) : FLOE_NO_MEMORY;
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK)
      ck_assert_msg(floe_status_code(st) == FLOE_NO_MEMORY, "N = %d: %s: %s", n,
                    floe_code_name(floe_status_code(st)), floe_status_message(st));
    free(tokens);
    floe_tensor_release(x);
    floe_tensor_release(y);
    floe_tensor_release(tok);
    floe_tensor_release(len);
    floe_text_sequences_free(s);
    floe_text_windows_free(w);
    floe_text_corpus_free(c);
    if (rc == FLOE_OK) break;
  }
  ck_assert_int_gt(n, 20);
  ck_assert_int_lt(n, 5000);
  floe_status_free(st);
}
END_TEST

int main(void) {
  Suite *s = suite_create("text");
  TCase *tc = tcase_create("corpus");
  tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
  tcase_add_test(tc, tokenizer_rules);
  tcase_add_test(tc, vocabulary_and_split);
  tcase_add_test(tc, unigram_perplexity_by_hand);
  tcase_add_test(tc, npy_export);
  tcase_add_test(tc, load_errors);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  tc = tcase_create("batchers");
  tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
  tcase_add_test(tc, contiguous_windows);
  tcase_add_test(tc, padded_sequences);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
