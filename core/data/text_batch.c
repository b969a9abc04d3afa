/* SPDX-License-Identifier: Apache-2.0 */
/* text_batch.c - batches of a text corpus (floe_text.h): contiguous windows for truncated
 * backpropagation through time, as TensorFlow's PTB reader cuts them, and padded
 * variable-length sequences, one or more per fortune, for dynamic RNNs. Both read the
 * corpus through its public accessors and only borrow its arrays. */
#include <string.h>

#include "data.h"

static const char *split_name(FloeTextSplit split) {
  return split == FLOE_TEXT_TEST ? "held-out" : "training";
}

/* ------------------------------------------------------------------------------------ */
/* Windows. */

struct FloeTextWindows {
  const int32_t *ids;         /* borrowed from the corpus */
  int64_t batch, steps;
  int64_t row_len, per_epoch; /* row b is ids[b * row_len .. (b + 1) * row_len) */
  int64_t next;               /* the next window of the epoch */
};

FloeTextWindows *floe_text_windows_new(const FloeTextCorpus *c, FloeTextSplit split,
                                       int64_t batch, int64_t steps, FloeStatus *status) {
  if (!c || batch < 1 || steps < 1) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "floe_text_windows_new: %s (batch %lld, steps %lld: both must be >= 1)",
                    c ? "bad sizes" : "no corpus", (long long)batch, (long long)steps);
    return NULL;
  }
  int64_t n = 0;
  const int32_t *ids = floe_text_ids(c, split, &n);
  /* n / batch >= steps + 1, written so that nothing overflows. */
  if (batch > n || n / batch - 1 < steps) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "the %s split has %lld ids: too few for one window of batch %lld x "
                    "(steps %lld + 1) ids; use a smaller batch or fewer steps",
                    split_name(split), (long long)n, (long long)batch, (long long)steps);
    return NULL;
  }
  FloeTextWindows *w = floe__calloc(1, sizeof *w);
  if (!w) {
    floe_status_set(status, FLOE_NO_MEMORY, "floe_text_windows_new: out of memory");
    return NULL;
  }
  w->ids = ids;
  w->batch = batch;
  w->steps = steps;
  w->row_len = n / batch;
  w->per_epoch = (w->row_len - 1) / steps;
  return w;
}

void floe_text_windows_free(FloeTextWindows *w) { floe__free(w); }

int64_t floe_text_windows_per_epoch(const FloeTextWindows *w) { return w ? w->per_epoch : 0; }

void floe_text_windows_start_epoch(FloeTextWindows *w, int64_t start) {
  if (w) w->next = start < 0 ? 0 : start > w->per_epoch ? w->per_epoch : start;
}

/* Copies columns [from, from + width) of window w->next into dst [batch, width]. */
static void window_fill(const FloeTextWindows *w, int32_t *dst, int64_t from, int64_t width) {
  for (int64_t b = 0; b < w->batch; b++)
    memcpy(dst + b * width, w->ids + b * w->row_len + w->next * w->steps + from,
           (size_t)width * sizeof *dst);
}

static FloeTensor *window_tensor(const FloeTextWindows *w, int64_t from, int64_t width,
                                 FloeStatus *st) {
  int64_t dims[2] = {w->batch, width};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_I32, 2, dims, st);
  if (t) window_fill(w, floe_tensor_data(t), from, width);
  return t;
}

int floe_text_windows_next(FloeTextWindows *w, FloeTensor **window, FloeStatus *status) {
  if (!w || !window) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_text_windows_next: NULL argument");
    return -1;
  }
  *window = NULL;
  if (w->next >= w->per_epoch) return 0;
  if (!(*window = window_tensor(w, 0, w->steps + 1, status))) return -1;
  w->next++;
  return 1;
}

int floe_text_windows_next_xy(FloeTextWindows *w, FloeTensor **inputs, FloeTensor **targets,
                              FloeStatus *status) {
  if (!w || !inputs || !targets) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_text_windows_next_xy: NULL argument");
    return -1;
  }
  *inputs = *targets = NULL;
  if (w->next >= w->per_epoch) return 0;
  FloeTensor *x = window_tensor(w, 0, w->steps, status);
  FloeTensor *y = x ? window_tensor(w, 1, w->steps, status) : NULL;
  if (!y) {
    floe_tensor_release(x);
    return -1;
  }
  *inputs = x;
  *targets = y;
  w->next++;
  return 1;
}

/* ------------------------------------------------------------------------------------ */
/* Sequences. A piece's ids are ids[start .. start + len] (len + 1 of them); start is one
 * before its first target, which for a fortune's first piece is the <eos> of the fortune
 * before, or -1 (read as <eos>) for the split's first fortune. */

typedef struct TextPiece {
  int64_t start;
  int32_t len;
} TextPiece;

struct FloeTextSequences {
  const int32_t *ids; /* borrowed from the corpus */
  TextPiece *pieces;
  int64_t *order;     /* the order of order_epoch (shuffle only) */
  int64_t n, batch, max_len;
  int flags;
  uint64_t seed;
  int64_t order_epoch; /* -1: none drawn yet */
  int64_t pos;         /* the next piece, a position in the epoch's order */
};

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, range) without modulo bias (Lemire's multiply-and-reject). */
static uint64_t bounded(uint64_t *x, uint64_t range) {
  unsigned __int128 m = (unsigned __int128)splitmix64(x) * range;
  if ((uint64_t)m < range) {
    uint64_t threshold = (0 - range) % range;
    while ((uint64_t)m < threshold) m = (unsigned __int128)splitmix64(x) * range;
  }
  return (uint64_t)(m >> 64);
}

/* Fisher-Yates from a state that depends on (seed, epoch) only. */
static void sequences_permute(FloeTextSequences *s, int64_t epoch) {
  uint64_t e = (uint64_t)epoch, x = s->seed ^ splitmix64(&e);
  for (int64_t i = 0; i < s->n; i++) s->order[i] = i;
  for (int64_t i = s->n - 1; i > 0; i--) {
    int64_t j = (int64_t)bounded(&x, (uint64_t)i + 1), t = s->order[i];
    s->order[i] = s->order[j];
    s->order[j] = t;
  }
  s->order_epoch = epoch;
}

FloeTextSequences *floe_text_sequences_new(const FloeTextCorpus *c, FloeTextSplit split,
                                           int64_t batch, int64_t max_len, int flags,
                                           uint64_t seed, FloeStatus *status) {
  if (!c || batch < 1 || max_len < 1 || max_len >= INT32_MAX) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "floe_text_sequences_new: %s (batch %lld must be >= 1, max_len %lld 1 to "
                    "2^31 - 2)",
                    c ? "bad sizes" : "no corpus", (long long)batch, (long long)max_len);
    return NULL;
  }
  int64_t nf = 0;
  const int64_t *off = floe_text_fortunes(c, split, &nf);
  FloeTextSequences *s = floe__calloc(1, sizeof *s);
  if (!s) goto err_oom;
  s->ids = floe_text_ids(c, split, NULL);
  for (int64_t k = 0; k < nf; k++) s->n += (off[k + 1] - off[k] + max_len - 1) / max_len;
  s->pieces = floe__malloc((size_t)(s->n ? s->n : 1) * sizeof *s->pieces);
  if (!s->pieces) goto err_oom;
  s->n = 0;
  for (int64_t k = 0; k < nf; k++)
    for (int64_t p = off[k]; p < off[k + 1]; p += max_len) {
      int64_t len = off[k + 1] - p < max_len ? off[k + 1] - p : max_len;
      s->pieces[s->n++] = (TextPiece){p - 1, (int32_t)len};
    }
  s->batch = batch;
  s->max_len = max_len;
  s->flags = flags;
  s->seed = seed;
  s->order_epoch = -1;
  if (flags & FLOE_TEXT_SHUFFLE) {
    s->order = floe__malloc((size_t)(s->n ? s->n : 1) * sizeof *s->order);
    if (!s->order) goto err_oom;
  }
  floe_text_sequences_start_epoch(s, 0, 0);
  return s;

err_oom:
  floe_text_sequences_free(s);
  floe_status_set(status, FLOE_NO_MEMORY, "floe_text_sequences_new: out of memory (%lld "
                  "fortunes of the %s split)", (long long)nf, split_name(split));
  return NULL;
}

void floe_text_sequences_free(FloeTextSequences *s) {
  if (!s) return;
  floe__free(s->pieces);
  floe__free(s->order);
  floe__free(s);
}

int64_t floe_text_sequences_count(const FloeTextSequences *s) { return s ? s->n : 0; }

int64_t floe_text_sequences_num_batches(const FloeTextSequences *s) {
  if (!s) return 0;
  return s->flags & FLOE_TEXT_DROP_REMAINDER ? s->n / s->batch
                                             : (s->n + s->batch - 1) / s->batch;
}

void floe_text_sequences_start_epoch(FloeTextSequences *s, int64_t epoch, int64_t start) {
  if (!s) return;
  if (epoch < 0) epoch = 0;
  if (start < 0) start = 0;
  if ((s->flags & FLOE_TEXT_SHUFFLE) && s->order_epoch != epoch) sequences_permute(s, epoch);
  s->pos = start >= floe_text_sequences_num_batches(s) ? s->n : start * s->batch;
}

/* The piece at position k of the epoch's order. */
static const TextPiece *piece_at(const FloeTextSequences *s, int64_t k) {
  return &s->pieces[s->flags & FLOE_TEXT_SHUFFLE ? s->order[k] : k];
}

int floe_text_sequences_next(FloeTextSequences *s, FloeTensor **tokens, FloeTensor **lengths,
                             FloeStatus *status) {
  if (!s || !tokens || !lengths) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_text_sequences_next: NULL argument");
    return -1;
  }
  *tokens = *lengths = NULL;
  int64_t left = s->n - s->pos;
  if (left <= 0 || ((s->flags & FLOE_TEXT_DROP_REMAINDER) && left < s->batch)) return 0;
  int64_t bs = left < s->batch ? left : s->batch, width = 0;
  for (int64_t k = s->pos; k < s->pos + bs; k++)
    if (piece_at(s, k)->len > width) width = piece_at(s, k)->len;
  if (s->flags & FLOE_TEXT_PAD_TO_MAX) width = s->max_len;
  int64_t tdims[2] = {bs, width + 1};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_I32, 2, tdims, status);
  FloeTensor *l = t ? floe__tensor_alloc(NULL, FLOE_I32, 1, &bs, status) : NULL;
  if (!l) {
    floe_tensor_release(t);
    return -1;
  }
  int32_t *tok = floe_tensor_data(t), *len = floe_tensor_data(l);
  memset(tok, 0, floe_tensor_nbytes(t)); /* padding: id 0 */
  for (int64_t r = 0; r < bs; r++) {
    const TextPiece *p = piece_at(s, s->pos + r);
    int32_t *row = tok + r * (width + 1);
    for (int64_t j = 0; j <= p->len; j++)
      row[j] = p->start + j < 0 ? FLOE_TEXT_EOS : s->ids[p->start + j];
    len[r] = p->len;
  }
  s->pos += bs;
  *tokens = t;
  *lengths = l;
  return 1;
}
