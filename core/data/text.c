/* SPDX-License-Identifier: Apache-2.0 */
/* text.c - the fortune text corpus of floe_text.h: fortune files, the tokenizer, the
 * vocabulary, the train / held-out split, the unigram baseline and the .npy export.
 *
 * Loading makes two passes: every token of every fortune goes into a table of distinct words
 * (the token stream keeps each word's index in the table), then the training split's counts
 * pick the vocabulary and the stream is mapped to ids. Both passes together hold the text of
 * one file at a time, the distinct words and one int32 per token: about 4 MB for Debian's
 * fortunes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"

#define TEXT_DEFAULT_VOCAB 10000
#define TEXT_DEFAULT_HOLDOUT 10

/* ------------------------------------------------------------------------------------ */
/* Word tables: words in one arena (each NUL-terminated, so also C strings), found by an
 * open-addressing hash of their indices. Used for the distinct words while loading and for
 * the vocabulary (index = id) of a corpus. */

typedef struct WordTable {
  char *text;            /* the words, each followed by '\0' */
  size_t text_len, text_cap;
  int64_t *off;          /* [cap] start of word i in text */
  uint32_t *len;         /* [cap] */
  int64_t *count;        /* [cap] occurrences in the training split */
  int32_t n, cap;
  int32_t *slots;        /* [nslots] word index, -1 for empty; nslots a power of two */
  size_t nslots;
} WordTable;

static uint64_t word_hash(const char *w, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)w[i]) * 0x100000001b3ull;
  return h;
}

static const char *table_word(const WordTable *t, int32_t i) { return t->text + t->off[i]; }

/* The slot holding word w, or the empty slot where it would go. */
static size_t table_slot(const WordTable *t, const char *w, size_t len) {
  size_t mask = t->nslots - 1, s = (size_t)word_hash(w, len) & mask;
  for (;; s = (s + 1) & mask) {
    int32_t i = t->slots[s];
    if (i < 0 || (t->len[i] == len && memcmp(table_word(t, i), w, len) == 0)) return s;
  }
}

static void table_free(WordTable *t) {
  floe__free(t->text);
  floe__free(t->off);
  floe__free(t->len);
  floe__free(t->count);
  floe__free(t->slots);
  memset(t, 0, sizeof *t);
}

/* Doubles the slots (kept at most half full) and rehashes. */
static bool table_grow_slots(WordTable *t) {
  size_t n = t->nslots ? t->nslots * 2 : 1024;
  int32_t *slots = floe__malloc(n * sizeof *slots);
  if (!slots) return false;
  memset(slots, 0xff, n * sizeof *slots);
  floe__free(t->slots);
  t->slots = slots;
  t->nslots = n;
  for (int32_t i = 0; i < t->n; i++) t->slots[table_slot(t, table_word(t, i), t->len[i])] = i;
  return true;
}

static bool table_reserve(WordTable *t, size_t text_more) {
  if (t->n == t->cap) {
    if (t->cap > INT32_MAX / 2) return false;
    int32_t cap = t->cap ? t->cap * 2 : 1024;
    int64_t *off = floe__realloc(t->off, (size_t)cap * sizeof *off);
    if (!off) return false;
    t->off = off;
    uint32_t *len = floe__realloc(t->len, (size_t)cap * sizeof *len);
    if (!len) return false;
    t->len = len;
    int64_t *count = floe__realloc(t->count, (size_t)cap * sizeof *count);
    if (!count) return false;
    t->count = count;
    t->cap = cap;
  }
  if (t->text_len + text_more > t->text_cap) {
    size_t cap = t->text_cap ? t->text_cap : 16384;
    while (cap < t->text_len + text_more) cap *= 2;
    char *text = floe__realloc(t->text, cap);
    if (!text) return false;
    t->text = text;
    t->text_cap = cap;
  }
  return (size_t)(t->n + 1) * 2 <= t->nslots || table_grow_slots(t);
}

/* The index of w, added (count 0) when new; -1 when out of memory. */
static int32_t table_add(WordTable *t, const char *w, size_t len) {
  if (t->nslots) {
    int32_t i = t->slots[table_slot(t, w, len)];
    if (i >= 0) return i;
  }
  if (len > UINT32_MAX || !table_reserve(t, len + 1)) return -1;
  int32_t i = t->n++;
  t->off[i] = (int64_t)t->text_len;
  t->len[i] = (uint32_t)len;
  t->count[i] = 0;
  memcpy(t->text + t->text_len, w, len);
  t->text[t->text_len + len] = '\0';
  t->text_len += len + 1;
  t->slots[table_slot(t, w, len)] = i;
  return i;
}

static int32_t table_find(const WordTable *t, const char *w, size_t len) {
  return t->nslots ? t->slots[table_slot(t, w, len)] : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Tokenizer. */

static bool word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

static bool punct_byte(unsigned char c) {
  return c == '.' || c == ',' || c == ';' || c == ':' || c == '!' || c == '?';
}

/* Copies src[0..len) to dst (room for len bytes), each backspace deleting the byte before
 * it and ASCII letters lowercased; returns the length written. */
static size_t text_normalize(char *dst, const char *src, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c == '\b') {
      if (n) n--;
    } else {
      dst[n++] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
  }
  return n;
}

typedef bool (*TokenFn)(void *arg, const char *tok, size_t len);

/* Calls emit for each token of normalized text s[0..len) (floe_text.h's rules); stops and
 * returns false when emit does. */
static bool text_scan(const char *s, size_t len, TokenFn emit, void *arg) {
  size_t i = 0;
  while (i < len) {
    unsigned char c = (unsigned char)s[i];
    size_t j = i + 1;
    if (word_byte(c)) {
      for (;;) {
        while (j < len && word_byte((unsigned char)s[j])) j++;
        if (j + 1 < len && (s[j] == '\'' || s[j] == '-') && word_byte((unsigned char)s[j + 1]))
          j += 2;
        else
          break;
      }
      if (!emit(arg, s + i, j - i)) return false;
    } else if (punct_byte(c)) {
      while (j < len && s[j] == (char)c) j++;
      if (!emit(arg, s + i, 1)) return false;
    }
    i = j;
  }
  return true;
}

static bool emit_text(void *arg, const char *tok, size_t len) {
  FloeByteBuf *b = arg;
  floe__buf_put(b, tok, len);
  floe__buf_put(b, "\n", 1);
  return !b->oom;
}

char *floe_text_tokenize(const char *text, size_t len, int64_t *num_tokens,
                         FloeStatus *status) {
  if (num_tokens) *num_tokens = 0;
  if (!text && len) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_text_tokenize: text is NULL");
    return NULL;
  }
  char *norm = floe__malloc(len ? len : 1);
  FloeByteBuf out = {NULL, 0, 0, false};
  if (!norm) goto err_oom;
  size_t n = text_normalize(norm, text, len);
  if (!text_scan(norm, n, emit_text, &out)) goto err_oom;
  floe__buf_put(&out, "", 1);
  if (out.oom) goto err_oom;
  floe__free(norm);
  if (num_tokens)
    for (size_t i = 0; i < out.len; i++) *num_tokens += out.p[i] == '\n';
  return (char *)out.p;

err_oom:
  floe__free(norm);
  floe__free(out.p);
  floe_status_set(status, FLOE_NO_MEMORY, "floe_text_tokenize: out of memory (%zu bytes of text)",
                  len);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Loading. */

struct FloeTextCorpus {
  WordTable vocab;                   /* id i = word i; count[i] = training occurrences */
  int32_t *ids[2];                   /* per split */
  int64_t num_ids[2];
  int64_t *fortunes[2];              /* per split: num_fortunes + 1 offsets into ids */
  int64_t num_fortunes[2];
};

/* What the first pass gathers: the distinct words, and every fortune's tokens as indices of
 * them. */
typedef struct TextBuild {
  WordTable words;
  int32_t *toks;      /* word indices, fortune after fortune (no <eos>) */
  int64_t num_toks, cap_toks;
  int64_t *ends;      /* [num_fortunes] end of fortune k in toks */
  int64_t num_fortunes, cap_fortunes;
  char *scratch;      /* one fortune, normalized */
  size_t cap_scratch;
} TextBuild;

static void build_free(TextBuild *b) {
  table_free(&b->words);
  floe__free(b->toks);
  floe__free(b->ends);
  floe__free(b->scratch);
}

static bool emit_index(void *arg, const char *tok, size_t len) {
  TextBuild *b = arg;
  int32_t i = table_add(&b->words, tok, len);
  if (i < 0) return false;
  if (b->num_toks == b->cap_toks) {
    int64_t cap = b->cap_toks ? b->cap_toks * 2 : 65536;
    int32_t *t = floe__realloc(b->toks, (size_t)cap * sizeof *t);
    if (!t) return false;
    b->toks = t;
    b->cap_toks = cap;
  }
  b->toks[b->num_toks++] = i;
  return true;
}

/* Tokenizes one fortune's raw text into b; a fortune with no token leaves no trace. */
static bool build_fortune(TextBuild *b, const char *raw, size_t len) {
  if (len > b->cap_scratch) {
    char *s = floe__realloc(b->scratch, len);
    if (!s) return false;
    b->scratch = s;
    b->cap_scratch = len;
  }
  int64_t before = b->num_toks;
  size_t n = text_normalize(b->scratch, raw, len);
  if (!text_scan(b->scratch, n, emit_index, b)) return false;
  if (b->num_toks == before) return true;
  if (b->num_fortunes == b->cap_fortunes) {
    int64_t cap = b->cap_fortunes ? b->cap_fortunes * 2 : 4096;
    int64_t *e = floe__realloc(b->ends, (size_t)cap * sizeof *e);
    if (!e) return false;
    b->ends = e;
    b->cap_fortunes = cap;
  }
  b->ends[b->num_fortunes++] = b->num_toks;
  return true;
}

/* True when the line data[start..end) (without its '\n') separates fortunes. */
static bool separator_line(const char *data, size_t start, size_t end) {
  size_t n = end - start;
  return (n == 1 || (n == 2 && data[start + 1] == '\r')) && data[start] == '%';
}

/* Cuts a file's contents at its "%" lines and tokenizes each fortune. */
static bool build_file(TextBuild *b, const char *data, size_t len) {
  size_t start = 0, line = 0;
  while (line < len) {
    const char *nl = memchr(data + line, '\n', len - line);
    size_t end = nl ? (size_t)(nl - data) : len;
    if (separator_line(data, line, end)) {
      if (!build_fortune(b, data + start, line - start)) return false;
      start = nl ? end + 1 : len;
    }
    line = nl ? end + 1 : len;
  }
  return build_fortune(b, data + start, len - start);
}

/* Reads a whole regular file into a new buffer (caller frees); NULL with st naming path.
 * O_NONBLOCK: a FIFO given as a fortune file is refused, not waited on. */
static char *read_file(const char *path, size_t *len, FloeStatus *st) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    floe__status_from_errno(st, errno, "cannot open fortune file %s", path);
    return NULL;
  }
  struct stat sb;
  char *buf = NULL;
  size_t got = 0;
  if (fstat(fd, &sb) != 0) goto err_io;
  if (!S_ISREG(sb.st_mode)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "fortune file %s is not a regular file", path);
    goto err;
  }
  buf = floe__malloc((size_t)sb.st_size + 1);
  if (!buf) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading %s (%lld bytes)", path,
                    (long long)sb.st_size);
    goto err;
  }
  while (got < (size_t)sb.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) goto err_io;
    if (r == 0) break; /* shrunk while we read: take what is there */
    got += (size_t)r;
  }
  close(fd);
  *len = got;
  return buf;

err_io:;
  int e = errno;
  floe_status_set(st, FLOE_DATA_LOSS, "cannot read fortune file %s at offset %zu: %s", path,
                  got, strerror(e));
err:
  floe__free(buf);
  close(fd);
  return NULL;
}

static floe_code build_paths(TextBuild *b, const char *const *paths, int num_paths,
                             FloeStatus *st) {
  for (int p = 0; p < num_paths; p++) {
    size_t len = 0;
    char *data = read_file(paths[p], &len, st);
    if (!data) return floe_status_code(st);
    const char *nul = memchr(data, '\0', len);
    if (nul) {
      floe__free(data);
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: offset %lld: NUL byte: not a text fortune file (strfile's "
                             ".dat index? pass the text file beside it)",
                             paths[p], (long long)(nul - data));
    }
    bool ok = build_file(b, data, len);
    floe__free(data);
    if (!ok)
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory tokenizing %s", paths[p]);
  }
  return FLOE_OK;
}

static bool held_out(int64_t k, int every) { return k % every == every - 1; }

/* A vocabulary candidate: a word seen in the training split. */
typedef struct VocabCand {
  int64_t count;
  const char *w;
  uint32_t len;
  int32_t index; /* in the build's word table */
} VocabCand;

static int cand_cmp(const void *pa, const void *pb) {
  const VocabCand *a = pa, *b = pb;
  if (a->count != b->count) return a->count > b->count ? -1 : 1;
  int c = memcmp(a->w, b->w, a->len < b->len ? a->len : b->len);
  if (c) return c;
  return (a->len > b->len) - (a->len < b->len);
}

/* Picks the vocabulary from the training counts of b's words; fills map[word index] = id. */
static bool corpus_vocab(FloeTextCorpus *c, TextBuild *b, int every, int64_t vocab_size,
                         int32_t *map) {
  WordTable *w = &b->words;
  for (int64_t k = 0, start = 0; k < b->num_fortunes; start = b->ends[k++])
    if (!held_out(k, every))
      for (int64_t t = start; t < b->ends[k]; t++) w->count[b->toks[t]]++;
  VocabCand *cand = floe__malloc((size_t)(w->n ? w->n : 1) * sizeof *cand);
  if (!cand) return false;
  int64_t nc = 0;
  for (int32_t i = 0; i < w->n; i++) {
    map[i] = FLOE_TEXT_UNK;
    if (w->count[i] > 0)
      cand[nc++] = (VocabCand){w->count[i], table_word(w, i), w->len[i], i};
  }
  qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
  bool ok = table_add(&c->vocab, "<unk>", 5) == FLOE_TEXT_UNK &&
            table_add(&c->vocab, "<eos>", 5) == FLOE_TEXT_EOS;
  for (int64_t j = 0; ok && j < nc && j < vocab_size - 2; j++) {
    int32_t id = table_add(&c->vocab, cand[j].w, cand[j].len);
    ok = id >= 0;
    if (ok) map[cand[j].index] = id;
  }
  floe__free(cand);
  return ok;
}

/* Maps b's stream to the ids of both splits, with <eos> after each fortune, and counts the
 * training ids. */
static bool corpus_ids(FloeTextCorpus *c, const TextBuild *b, int every, const int32_t *map) {
  int64_t nf[2] = {0, 0}, ni[2] = {0, 0};
  for (int64_t k = 0, start = 0; k < b->num_fortunes; start = b->ends[k++]) {
    int s = held_out(k, every);
    nf[s]++;
    ni[s] += b->ends[k] - start + 1;
  }
  for (int s = 0; s < 2; s++) {
    c->ids[s] = floe__malloc((size_t)ni[s] * sizeof *c->ids[s]);
    c->fortunes[s] = floe__malloc((size_t)(nf[s] + 1) * sizeof *c->fortunes[s]);
    if (!c->ids[s] || !c->fortunes[s]) return false;
    c->fortunes[s][0] = 0;
  }
  for (int64_t k = 0, start = 0; k < b->num_fortunes; start = b->ends[k++]) {
    int s = held_out(k, every);
    int32_t *dst = c->ids[s] + c->num_ids[s];
    for (int64_t t = start; t < b->ends[k]; t++) *dst++ = map[b->toks[t]];
    *dst++ = FLOE_TEXT_EOS;
    c->num_ids[s] = dst - c->ids[s];
    c->fortunes[s][++c->num_fortunes[s]] = c->num_ids[s];
  }
  for (int32_t i = 0; i < c->vocab.n; i++) c->vocab.count[i] = 0;
  for (int64_t t = 0; t < c->num_ids[FLOE_TEXT_TRAIN]; t++)
    c->vocab.count[c->ids[FLOE_TEXT_TRAIN][t]]++;
  return true;
}

/* The corpus of paths; `what` names them in errors (the folder, or the first file). */
static FloeTextCorpus *corpus_load(const char *const *paths, int num_paths, const char *what,
                                   int64_t vocab_size, int every, FloeStatus *st) {
  TextBuild b;
  memset(&b, 0, sizeof b);
  FloeTextCorpus *c = NULL;
  int32_t *map = NULL;
  if (build_paths(&b, paths, num_paths, st) != FLOE_OK) goto err;
  if (b.num_fortunes == 0) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "empty corpus: no fortune in %s (%d file%s) holds a word; fortune files "
                    "are text with fortunes separated by lines holding only %%",
                    what, num_paths, num_paths == 1 ? "" : "s");
    goto err;
  }
  if (b.num_fortunes < every) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s holds only %lld fortunes: the held-out split (every %d-th fortune) "
                    "is empty; give at least %d fortunes or hold out more often",
                    what, (long long)b.num_fortunes, every, every);
    goto err;
  }
  c = floe__calloc(1, sizeof *c);
  map = floe__malloc((size_t)(b.words.n ? b.words.n : 1) * sizeof *map);
  if (!c || !map || !corpus_vocab(c, &b, every, vocab_size, map) ||
      !corpus_ids(c, &b, every, map)) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory building the corpus of %s (%lld tokens)",
                    what, (long long)b.num_toks);
    goto err;
  }
  floe__free(map);
  build_free(&b);
  return c;

err:
  floe__free(map);
  floe_text_corpus_free(c);
  build_free(&b);
  return NULL;
}

static bool check_params(int64_t *vocab_size, int *every, FloeStatus *st) {
  if (*vocab_size == 0) *vocab_size = TEXT_DEFAULT_VOCAB;
  if (*every == 0) *every = TEXT_DEFAULT_HOLDOUT;
  if (*vocab_size < 2 || *vocab_size > INT32_MAX) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "vocabulary size %lld: it must be 2 (<unk>, <eos>) to 2^31 - 1",
                    (long long)*vocab_size);
    return false;
  }
  if (*every < 2) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "holdout_every %d: it must be >= 2 (every k-th fortune is held out)", *every);
    return false;
  }
  return true;
}

FloeTextCorpus *floe_text_load_files(const char *const *paths, int num_paths,
                                     int64_t vocab_size, int holdout_every,
                                     FloeStatus *status) {
  if (!check_params(&vocab_size, &holdout_every, status)) return NULL;
  if (!paths || num_paths <= 0) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "empty corpus: no fortune file given (%d paths)", num_paths);
    return NULL;
  }
  for (int i = 0; i < num_paths; i++)
    if (!paths[i]) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT, "fortune file %d of %d is NULL", i,
                      num_paths);
      return NULL;
    }
  char *what = floe__asprintf("%s%s", paths[0], num_paths > 1 ? " and the files after it" : "");
  if (!what) {
    floe_status_set(status, FLOE_NO_MEMORY, "out of memory");
    return NULL;
  }
  FloeTextCorpus *c = corpus_load(paths, num_paths, what, vocab_size, holdout_every, status);
  floe__free(what);
  return c;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool fortune_name(const char *name) {
  size_t n = strlen(name);
  if (name[0] == '.') return false;
  if (n >= 4 && strcmp(name + n - 4, ".dat") == 0) return false;
  return !(n >= 3 && strcmp(name + n - 3, ".u8") == 0);
}

/* The paths of dir's fortune files, sorted by name (caller frees each and the array). */
static char **list_fortune_files(const char *dir, int *num, FloeStatus *st) {
  *num = 0;
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    if (e == ENOENT)
      floe_status_set(st, FLOE_NOT_FOUND,
                      "fortune directory %s not found: install Debian's fortunes package "
                      "(apt-get install fortunes) or pass --data DIR naming a folder of "
                      "fortune files",
                      dir);
    else
      floe__status_from_errno(st, e, "cannot open fortune directory %s", dir);
    return NULL;
  }
  char **paths = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!fortune_name(de->d_name)) continue;
    char *p = floe__asprintf("%s/%s", dir, de->d_name);
    if (!p) goto err_oom;
    struct stat sb;
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      floe__free(p);
      continue; /* sub-folders, dangling links: not fortune files */
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **np = floe__realloc(paths, (size_t)cap * sizeof *np);
      if (!np) {
        floe__free(p);
        goto err_oom;
      }
      paths = np;
    }
    paths[n++] = p;
  }
  closedir(d);
  if (n == 0) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "empty corpus: %s holds no fortune file (regular files not named *.dat, "
                    "*.u8 or .*); pass --data DIR naming a folder of fortune files",
                    dir);
    floe__free(paths);
    return NULL;
  }
  qsort(paths, (size_t)n, sizeof *paths, name_cmp);
  *num = n;
  return paths;

err_oom:
  closedir(d);
  for (int i = 0; i < n; i++) floe__free(paths[i]);
  floe__free(paths);
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing %s", dir);
  return NULL;
}

FloeTextCorpus *floe_text_load_dir(const char *dir, int64_t vocab_size, int holdout_every,
                                   FloeStatus *status) {
  if (!check_params(&vocab_size, &holdout_every, status)) return NULL;
  if (!dir) dir = FLOE_TEXT_FORTUNES_DIR;
  int n = 0;
  char **paths = list_fortune_files(dir, &n, status);
  if (!paths) return NULL;
  FloeTextCorpus *c =
      corpus_load((const char *const *)paths, n, dir, vocab_size, holdout_every, status);
  for (int i = 0; i < n; i++) floe__free(paths[i]);
  floe__free(paths);
  return c;
}

void floe_text_corpus_free(FloeTextCorpus *c) {
  if (!c) return;
  table_free(&c->vocab);
  for (int s = 0; s < 2; s++) {
    floe__free(c->ids[s]);
    floe__free(c->fortunes[s]);
  }
  floe__free(c);
}

/* ------------------------------------------------------------------------------------ */
/* Accessors. */

static int split_index(FloeTextSplit split) { return split == FLOE_TEXT_TEST ? 1 : 0; }

int64_t floe_text_vocab_size(const FloeTextCorpus *c) { return c ? c->vocab.n : 0; }

const char *floe_text_word(const FloeTextCorpus *c, int64_t id) {
  return c && id >= 0 && id < c->vocab.n ? table_word(&c->vocab, (int32_t)id) : NULL;
}

int32_t floe_text_id(const FloeTextCorpus *c, const char *word) {
  if (!c || !word) return FLOE_TEXT_UNK;
  int32_t id = table_find(&c->vocab, word, strlen(word));
  return id < 0 ? FLOE_TEXT_UNK : id;
}

int64_t floe_text_count(const FloeTextCorpus *c, int64_t id) {
  return c && id >= 0 && id < c->vocab.n ? c->vocab.count[id] : 0;
}

const int32_t *floe_text_ids(const FloeTextCorpus *c, FloeTextSplit split, int64_t *num_ids) {
  if (num_ids) *num_ids = c ? c->num_ids[split_index(split)] : 0;
  return c ? c->ids[split_index(split)] : NULL;
}

const int64_t *floe_text_fortunes(const FloeTextCorpus *c, FloeTextSplit split,
                                  int64_t *num_fortunes) {
  if (num_fortunes) *num_fortunes = c ? c->num_fortunes[split_index(split)] : 0;
  return c ? c->fortunes[split_index(split)] : NULL;
}

double floe_text_unk_rate(const FloeTextCorpus *c, FloeTextSplit split) {
  int64_t n = 0, unk = 0;
  const int32_t *ids = floe_text_ids(c, split, &n);
  for (int64_t i = 0; i < n; i++) unk += ids[i] == FLOE_TEXT_UNK;
  return n ? (double)unk / (double)n : 0.0;
}

double floe_text_unigram_perplexity(const FloeTextCorpus *c, FloeTextSplit split) {
  int64_t n = 0;
  const int32_t *ids = floe_text_ids(c, split, &n);
  if (!n) return NAN;
  double denom = (double)c->num_ids[FLOE_TEXT_TRAIN] + (double)c->vocab.n, nll = 0.0;
  for (int64_t i = 0; i < n; i++) nll -= log(((double)c->vocab.count[ids[i]] + 1.0) / denom);
  return exp(nll / (double)n);
}

/* ------------------------------------------------------------------------------------ */
/* .npy export. */

static floe_code save_array(const char *dir, const char *name, FloeDType dt, const void *data,
                            int64_t n, FloeStatus *st) {
  FloeTensor *t = floe__tensor_alloc(NULL, dt, 1, &n, st);
  if (!t) return floe_status_code(st);
  if (n) memcpy(floe_tensor_data(t), data, floe_tensor_nbytes(t));
  char *path = floe__asprintf("%s/%s", dir, name);
  floe_code rc = path ? floe_tensor_save_npy(t, path, st)
                      : floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  floe__free(path);
  floe_tensor_release(t);
  return rc;
}

static floe_code save_vocab(const FloeTextCorpus *c, const char *dir, FloeStatus *st) {
  char *path = floe__asprintf("%s/vocab.txt", dir);
  if (!path) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  FILE *f = fopen(path, "w");
  if (!f) {
    floe_code rc = floe__status_from_errno(st, errno, "%s: cannot create", path);
    floe__free(path);
    return rc;
  }
  for (int32_t i = 0; i < c->vocab.n; i++) fprintf(f, "%s\n", table_word(&c->vocab, i));
  floe_code rc = FLOE_OK;
  bool bad = ferror(f) != 0;
  int e = bad ? errno : 0; /* the failed write's */
  if (fclose(f) != 0) { /* closed either way */
    if (!bad) e = errno;
    bad = true;
  }
  if (bad && e)
    rc = floe__status_from_errno(st, e, "%s: write failed", path);
  else if (bad)
    rc = floe_status_set(st, FLOE_DATA_LOSS, "%s: write failed", path);
  floe__free(path);
  return rc;
}

floe_code floe_text_save_npy(const FloeTextCorpus *c, const char *dir, FloeStatus *status) {
  if (!c || !dir)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_text_save_npy: %s is NULL",
                           c ? "dir" : "the corpus");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return floe__status_from_errno(status, errno, "cannot create the folder %s", dir);
  static const char *const ids_name[2] = {"train.npy", "test.npy"};
  static const char *const fortunes_name[2] = {"train_fortunes.npy", "test_fortunes.npy"};
  for (int s = 0; s < 2; s++) {
    floe_code rc = save_array(dir, ids_name[s], FLOE_I32, c->ids[s], c->num_ids[s], status);
    if (rc == FLOE_OK)
      rc = save_array(dir, fortunes_name[s], FLOE_I64, c->fortunes[s], c->num_fortunes[s] + 1,
                      status);
    if (rc != FLOE_OK) return rc;
  }
  floe_code rc = save_array(dir, "counts.npy", FLOE_I64, c->vocab.count, c->vocab.n, status);
  return rc == FLOE_OK ? save_vocab(c, dir, status) : rc;
}
