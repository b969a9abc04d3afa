/* SPDX-License-Identifier: Apache-2.0 */
/* floe_text.h - an English text corpus for word-level language models: the fortune files of
 * Debian's `fortunes` package (or any folder of files in the fortune format), a tokenizer,
 * a vocabulary, a train / held-out split, two batchers and the unigram baseline. Included
 * by floe.h.
 *
 * Format: a fortune file is text whose fortunes are separated by lines holding only "%"
 * (a trailing "\r" is allowed). A backspace deletes the byte before it (fortune files use
 * "_\bx" and "x\bx" overstriking for underline and bold; what a terminal shows remains).
 *
 * Tokenizer (one fortune at a time; ASCII letters are lowercased, other bytes kept):
 *  - a word is a run of word bytes (A-Z, a-z, 0-9, and every byte >= 0x80, so UTF-8 letters
 *    stay inside words) in which single apostrophes or hyphens may join two such runs:
 *    "don't", "well-known", "rock'n'roll"; a leading or trailing ' or -, and "--", split;
 *  - each run of one of the sentence punctuation marks . , ; : ! ? is one token holding
 *    that mark once ("..." -> ".", "?!" -> "?" "!"). They are kept, not dropped: they are
 *    about 13% of the fortunes' tokens, mark the sentence boundaries inside multi-sentence
 *    fortunes, and a language model of the text as written must predict them;
 *  - every other byte (spaces, quotes, brackets, slashes, ...) separates tokens;
 *  - the corpus appends <eos> to each fortune; a fortune with no token is skipped (it is no
 *    fortune for the split either).
 *
 * Vocabulary: id 0 = <unk>, id 1 = <eos>, then the vocab_size - 2 most frequent words of
 * the training split, by count (descending), ties broken by the word's bytes (ascending,
 * memcmp order). Every other word, in either split, becomes <unk>.
 *
 * Split: fortunes are numbered from 0 in file order (files sorted by name, bytewise), and
 * fortune k is held out when k % holdout_every == holdout_every - 1 (holdout_every 10:
 * every 10th fortune). Deterministic and independent of the vocabulary size.
 *
 * Thread safety: a FloeTextCorpus is read-only once loaded, so any number of threads may
 * read it and run batchers over it; one batcher is used by one thread at a time.
 */
#ifndef FLOE_TEXT_H
#define FLOE_TEXT_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's fortunes package installs its fortune files. */
#define FLOE_TEXT_FORTUNES_DIR "/usr/share/games/fortunes"
#define FLOE_TEXT_UNK 0
#define FLOE_TEXT_EOS 1

typedef enum FloeTextSplit {
  FLOE_TEXT_TRAIN = 0,
  FLOE_TEXT_TEST = 1 /* the held-out fortunes */
} FloeTextSplit;

typedef struct FloeTextCorpus FloeTextCorpus;

/* Tokenizes len bytes of text as one fortune (no "%" handling, no <eos>). Returns the
 * tokens, each followed by one '\n', in a NUL-terminated malloc'd string the caller frees
 * with free(), and their number in *num_tokens (may be NULL). NULL with status only when
 * out of memory. */
FLOE_API char *floe_text_tokenize(const char *text, size_t len, int64_t *num_tokens,
                                  FloeStatus *status);

/* Loads every fortune file of dir: the regular files whose name neither starts with '.'
 * nor ends in ".dat" or ".u8" (strfile's index and Debian's UTF-8 copies), in name order.
 * dir NULL: FLOE_TEXT_FORTUNES_DIR. vocab_size: ids in all, <unk> and <eos> included (>= 2;
 * 0: 10000); fewer when the training split has fewer distinct words. holdout_every: >= 2
 * (0: 10). A missing dir is FLOE_NOT_FOUND naming it, the fortunes package and --data DIR;
 * an unreadable file, a NUL byte (offset given), no fortune with a word, or an empty
 * held-out split are errors naming the file or folder. Caller owns; free with
 * floe_text_corpus_free. */
FLOE_API FloeTextCorpus *floe_text_load_dir(const char *dir, int64_t vocab_size,
                                            int holdout_every, FloeStatus *status);
/* The same over an explicit list of num_paths files, taken in the order given. */
FLOE_API FloeTextCorpus *floe_text_load_files(const char *const *paths, int num_paths,
                                              int64_t vocab_size, int holdout_every,
                                              FloeStatus *status);
FLOE_API void floe_text_corpus_free(FloeTextCorpus *c);

/* Number of ids (<unk> and <eos> included). */
FLOE_API int64_t floe_text_vocab_size(const FloeTextCorpus *c);
/* Borrowed (valid while c lives): the word of id; "<unk>", "<eos>" for 0 and 1; NULL when id
 * is out of range. */
FLOE_API const char *floe_text_word(const FloeTextCorpus *c, int64_t id);
/* The id of word (as the tokenizer writes it: lowercase), FLOE_TEXT_UNK when it is not in
 * the vocabulary. */
FLOE_API int32_t floe_text_id(const FloeTextCorpus *c, const char *word);
/* Occurrences of id in the training split (<unk>: of all out-of-vocabulary words; <eos>:
 * the training fortunes); 0 when id is out of range. */
FLOE_API int64_t floe_text_count(const FloeTextCorpus *c, int64_t id);

/* Borrowed (valid while c lives): the id stream of a split, every fortune's tokens then
 * <eos>, fortune after fortune; its length in *num_ids (may be NULL). */
FLOE_API const int32_t *floe_text_ids(const FloeTextCorpus *c, FloeTextSplit split,
                                      int64_t *num_ids);
/* Borrowed: num_fortunes + 1 offsets into the split's ids; fortune k is
 * ids[offsets[k] .. offsets[k + 1]), its last id <eos>. *num_fortunes may be NULL. */
FLOE_API const int64_t *floe_text_fortunes(const FloeTextCorpus *c, FloeTextSplit split,
                                           int64_t *num_fortunes);
/* Fraction of the split's ids that are <unk> (0 for an empty split). */
FLOE_API double floe_text_unk_rate(const FloeTextCorpus *c, FloeTextSplit split);
/* Perplexity of the split under the unigram model of the training counts with add-one
 * smoothing over the vocabulary: p(w) = (count(w) + 1) / (training ids + vocab size),
 * exp of the mean of -log p over the split's ids (<eos> and <unk> included). The baseline a
 * language model must beat. */
FLOE_API double floe_text_unigram_perplexity(const FloeTextCorpus *c, FloeTextSplit split);

/* Writes into dir (created if missing; its parent must exist) what another program needs to
 * train on exactly these ids: train.npy and test.npy (i32 [n], the id streams),
 * train_fortunes.npy and test_fortunes.npy (i64 [fortunes + 1], floe_text_fortunes),
 * counts.npy (i64 [vocab], floe_text_count) and vocab.txt (the word of id i on line i + 1).
 * Existing files are replaced. */
FLOE_API floe_code floe_text_save_npy(const FloeTextCorpus *c, const char *dir,
                                      FloeStatus *status);

/* ------------------------------------------------------------------------------------ */
/* Contiguous windows, as TensorFlow's PTB reader cuts them: the split's id stream is cut
 * into batch rows of row_len = n / batch ids each (the rest dropped) and window i holds
 * row[b][i * steps .. i * steps + steps] (steps + 1 ids) of each row b. Inputs are a
 * window's first steps ids and targets its last steps, and row b of window i + 1 continues
 * the text of row b of window i, so a recurrent state carries from one window to the next
 * (truncated backpropagation through time; reset it at each epoch). An epoch has
 * (row_len - 1) / steps windows, the same ones in the same order every epoch. */

typedef struct FloeTextWindows FloeTextWindows;

/* Borrows c, which must outlive the batcher. An error when the split is too short for one
 * window (batch * (steps + 1) ids). Caller owns; free with floe_text_windows_free. */
FLOE_API FloeTextWindows *floe_text_windows_new(const FloeTextCorpus *c, FloeTextSplit split,
                                                int64_t batch, int64_t steps,
                                                FloeStatus *status);
FLOE_API void floe_text_windows_free(FloeTextWindows *w);
FLOE_API int64_t floe_text_windows_per_epoch(const FloeTextWindows *w);
/* Positions w at window start of an epoch (start past the end: the epoch is over). */
FLOE_API void floe_text_windows_start_epoch(FloeTextWindows *w, int64_t start);
/* The next window as a new i32 [batch, steps + 1] tensor (caller releases): 1, 0 at the end
 * of the epoch (*window NULL), -1 with status on error. */
FLOE_API int floe_text_windows_next(FloeTextWindows *w, FloeTensor **window,
                                    FloeStatus *status);
/* The same window as inputs [batch, steps] and targets [batch, steps] (i32, caller releases
 * both). */
FLOE_API int floe_text_windows_next_xy(FloeTextWindows *w, FloeTensor **inputs,
                                       FloeTensor **targets, FloeStatus *status);

/* ------------------------------------------------------------------------------------ */
/* Variable-length sequences, one per fortune: fortune k's ids t_0 .. t_n-1 (t_n-1 = <eos>)
 * are read as <eos> t_0 .. t_n-1 (the <eos> before stands for the end of the fortune before,
 * as in the stream), which gives n (input, target) pairs. A fortune of more than max_len
 * pairs is split into pieces of max_len pairs (the last shorter); piece p is the ids from
 * position p * max_len to p * max_len + len of that sequence, so consecutive pieces share
 * one id and every target is predicted once. A batch is i32 tokens [batch, width + 1] and
 * i32 lengths [batch]: row r holds its piece's lengths[r] + 1 ids, then padding id 0
 * (<unk>: mask it with the lengths); inputs are tokens[:, :width], targets tokens[:, 1:].
 * width is the longest piece of the batch, or max_len with FLOE_TEXT_PAD_TO_MAX. Pieces come
 * in fortune order, or, with FLOE_TEXT_SHUFFLE, in an order fixed by (seed, epoch) alone. */

typedef struct FloeTextSequences FloeTextSequences;

enum {
  FLOE_TEXT_SHUFFLE = 1,       /* a new order of the pieces each epoch */
  FLOE_TEXT_PAD_TO_MAX = 2,    /* every batch has width max_len (static shapes) */
  FLOE_TEXT_DROP_REMAINDER = 4 /* skip a last batch of fewer than batch pieces */
};

/* Borrows c, which must outlive the batcher. flags: FLOE_TEXT_* above, or-ed. Caller owns;
 * free with floe_text_sequences_free. */
FLOE_API FloeTextSequences *floe_text_sequences_new(const FloeTextCorpus *c,
                                                    FloeTextSplit split, int64_t batch,
                                                    int64_t max_len, int flags, uint64_t seed,
                                                    FloeStatus *status);
FLOE_API void floe_text_sequences_free(FloeTextSequences *s);
/* Number of pieces, and of batches per epoch. */
FLOE_API int64_t floe_text_sequences_count(const FloeTextSequences *s);
FLOE_API int64_t floe_text_sequences_num_batches(const FloeTextSequences *s);
/* Positions s at batch start of epoch (epoch picks the shuffled order). */
FLOE_API void floe_text_sequences_start_epoch(FloeTextSequences *s, int64_t epoch,
                                              int64_t start);
/* The next batch as new tensors (caller releases both): 1, 0 at the end of the epoch, -1
 * with status on error. */
FLOE_API int floe_text_sequences_next(FloeTextSequences *s, FloeTensor **tokens,
                                      FloeTensor **lengths, FloeStatus *status);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_TEXT_H */
