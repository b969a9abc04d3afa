/* SPDX-License-Identifier: Apache-2.0 */
/* tfidf.c - TfIdfVectorizer (ops_text_features.def) on the CPU.
 *
 * create turns the attributes into a lookup table: the pool's n-grams of each length in
 * use, sorted by their items, so that each n-gram of x is found by binary search. compute
 * walks every row's n-grams (each length, each skip), counts the pool's n-grams it finds and
 * writes the row's weighted counts; rows run in parallel. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

/* As the core's shape function allows (ops_shape_text_features.c). */
#define TFIDF_MAX_INDEX 2147483647LL

enum { MODE_TF, MODE_IDF, MODE_TFIDF };

/* One n-gram of the pool. */
typedef struct TfEntry {
  const int64_t *items; /* into TfState.pool */
  int64_t n;            /* its length (qsort's comparator has no other context) */
  int64_t id;           /* its number in pool order */
} TfEntry;

/* The pool's n-grams of one length, sorted by items (then id). */
typedef struct TfGroup {
  int64_t n;                  /* items per n-gram */
  const TfEntry *begin, *end; /* into TfState.entries */
} TfGroup;

typedef struct TfState {
  int mode;
  int64_t skip;        /* max_skip_count */
  int64_t num_ngrams;  /* entries of index[] and weight[] */
  int64_t size;        /* output coordinates per row */
  int64_t *index;      /* n-gram id -> output coordinate */
  double *weight;      /* n-gram id -> weight; NULL: all 1 */
  int64_t *pool;       /* a copy of the pool attribute */
  TfEntry *entries;
  TfGroup *groups;     /* the lengths min_gram_length.. that the pool has n-grams of */
  int num_groups;
} TfState;

static void tfidf_free(void *p) {
  TfState *s = p;
  if (!s) return;
  cpu_host->free(s->index);
  cpu_host->free(s->weight);
  cpu_host->free(s->pool);
  cpu_host->free(s->entries);
  cpu_host->free(s->groups);
  cpu_host->free(s);
}

/* Lexicographic order of the items (entries of one length), then by id. */
static int entry_cmp(const void *pa, const void *pb) {
  const TfEntry *a = pa, *b = pb;
  for (int64_t j = 0; j < a->n; j++)
    if (a->items[j] != b->items[j]) return a->items[j] < b->items[j] ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static void *dup_ints(const int64_t *v, size_t n) {
  void *p = cpu_host->alloc(n ? n * sizeof *v : 1);
  if (p && n) memcpy(p, v, n * sizeof *v);
  return p;
}

/* Checks ngram_counts against the pool and ngram_indexes against the n-grams (as the shape
 * function does); *size gets the output coordinates per row. */
static floe_code check_table(FloeKernelInit *init, const int64_t *counts, size_t nc,
                             size_t npool, const int64_t *idx, size_t nidx, int64_t *size) {
  const FloeHostApi *h = cpu_host;
  int64_t total = 0;
  if (nc == 0 || counts[0] != 0)
    return h->init_set_error(init, FLOE_INVALID_ARGUMENT,
                             "ngram_counts must be non-empty and start at 0");
  for (size_t g = 0; g < nc; g++) {
    int64_t start = counts[g], end = g + 1 < nc ? counts[g + 1] : (int64_t)npool;
    if (end < start || end > (int64_t)npool || (end - start) % (int64_t)(g + 1))
      return h->init_set_error(init, FLOE_INVALID_ARGUMENT,
                               "ngram_counts[%zu] does not give whole %zu-grams within the pool",
                               g, g + 1);
    total += (end - start) / (int64_t)(g + 1);
  }
  if (total != (int64_t)nidx)
    return h->init_set_error(init, FLOE_INVALID_ARGUMENT,
                             "ngram_indexes has %zu entries, the pool %lld n-grams", nidx,
                             (long long)total);
  *size = 0;
  for (size_t k = 0; k < nidx; k++) {
    if (idx[k] < 0 || idx[k] > TFIDF_MAX_INDEX)
      return h->init_set_error(init, FLOE_INVALID_ARGUMENT,
                               "ngram_indexes[%zu] = %lld is out of range", k, (long long)idx[k]);
    if (idx[k] + 1 > *size) *size = idx[k] + 1;
  }
  return FLOE_OK;
}

/* Sorted entries for the lengths lo..hi (those the pool has). */
static floe_code build_groups(TfState *s, const int64_t *counts, size_t nc, int64_t lo,
                              int64_t hi, size_t npool) {
  s->entries = cpu_host->alloc((s->num_ngrams ? (size_t)s->num_ngrams : 1) * sizeof *s->entries);
  s->groups = cpu_host->alloc((nc ? nc : 1) * sizeof *s->groups);
  if (!s->entries || !s->groups) return FLOE_NO_MEMORY;
  TfEntry *e = s->entries;
  int64_t id = 0;
  for (size_t g = 0; g < nc; g++) {
    int64_t n = (int64_t)g + 1, start = counts[g];
    int64_t end = g + 1 < nc ? counts[g + 1] : (int64_t)npool, k = (end - start) / n;
    if (n < lo || n > hi || k == 0) {
      id += k;
      continue;
    }
    TfGroup *gr = &s->groups[s->num_groups++];
    gr->n = n;
    gr->begin = e;
    for (int64_t j = 0; j < k; j++) *e++ = (TfEntry){s->pool + start + j * n, n, id++};
    gr->end = e;
    qsort((void *)gr->begin, (size_t)k, sizeof *e, entry_cmp);
  }
  return FLOE_OK;
}

static floe_code tfidf_create(const FloeHostApi *h, FloeKernelInit *init, void *user_data,
                              void **state) {
  (void)user_data;
  const FloeAttrs *a = h->init_attrs(init);
  const char *mode = "";
  int64_t lo = 0, hi = 0, skip = -1;
  const int64_t *counts = NULL, *idx = NULL, *pool = NULL;
  const double *w = NULL;
  size_t nc = 0, ni = 0, np = 0, nw = 0;
  if (h->attr_string(a, "mode", &mode) != FLOE_OK ||
      h->attr_int(a, "min_gram_length", &lo) != FLOE_OK ||
      h->attr_int(a, "max_gram_length", &hi) != FLOE_OK ||
      h->attr_int(a, "max_skip_count", &skip) != FLOE_OK ||
      h->attr_int_list(a, "ngram_counts", &counts, &nc) != FLOE_OK ||
      h->attr_int_list(a, "ngram_indexes", &idx, &ni) != FLOE_OK ||
      h->attr_int_list(a, "pool", &pool, &np) != FLOE_OK)
    return h->init_set_error(init, FLOE_INVALID_ARGUMENT, "missing or mistyped attributes");
  if (h->attr_float_list(a, "weights", &w, &nw) != FLOE_OK) nw = 0;
  int m = !strcmp(mode, "TF") ? MODE_TF : !strcmp(mode, "IDF") ? MODE_IDF
          : !strcmp(mode, "TFIDF") ? MODE_TFIDF : -1;
  if (m < 0) return h->init_set_error(init, FLOE_INVALID_ARGUMENT, "mode '%s' is unknown", mode);
  if (lo < 1 || hi < lo || skip < 0)
    return h->init_set_error(init, FLOE_INVALID_ARGUMENT, "bad gram lengths or skip count");
  if (nw && nw != ni)
    return h->init_set_error(init, FLOE_INVALID_ARGUMENT, "weights must have one per n-gram");
  int64_t size = 0;
  floe_code rc = check_table(init, counts, nc, np, idx, ni, &size);
  if (rc != FLOE_OK) return rc;
  TfState *s = h->alloc(sizeof *s);
  if (!s) return h->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *s = (TfState){.mode = m, .skip = skip, .num_ngrams = (int64_t)ni, .size = size};
  s->index = dup_ints(idx, ni);
  s->pool = dup_ints(pool, np);
  s->weight = nw ? h->alloc(nw * sizeof *w) : NULL;
  if (!s->index || !s->pool || (nw && !s->weight) ||
      build_groups(s, counts, nc, lo, hi, np) != FLOE_OK) {
    tfidf_free(s);
    return h->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  }
  if (nw) memcpy(s->weight, w, nw * sizeof *w);
  *state = s;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

/* The n-gram of x at items x[0], x[step], ... against an entry: <0, 0, >0. */
static int window_cmp(const int64_t *x, int64_t step, const int64_t *items, int64_t n) {
  for (int64_t j = 0; j < n; j++, x += step)
    if (*x != items[j]) return *x < items[j] ? -1 : 1;
  return 0;
}

/* Per-row scratch: a count per n-gram and the ids counted so far. */
typedef struct TfScratch {
  int64_t *count, *touched;
  int64_t num_touched;
} TfScratch;

/* Counts every pool entry equal to the n-gram at x (step apart). */
static void count_window(const TfGroup *g, const int64_t *x, int64_t step, TfScratch *sc) {
  const TfEntry *lo = g->begin, *hi = g->end; /* first entry >= the window */
  while (lo < hi) {
    const TfEntry *mid = lo + (hi - lo) / 2;
    if (window_cmp(x, step, mid->items, g->n) > 0) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < g->end && window_cmp(x, step, lo->items, g->n) == 0; lo++)
    if (sc->count[lo->id]++ == 0) sc->touched[sc->num_touched++] = lo->id;
}

/* One row of x [c] into y [size]. */
static void tfidf_row(const TfState *s, const int64_t *x, int64_t c, float *y, TfScratch *sc) {
  for (int gi = 0; gi < s->num_groups; gi++) {
    const TfGroup *g = &s->groups[gi];
    /* A 1-gram is the same at every skip: taken once. Beyond c no n-gram fits. */
    int64_t max_skip = g->n == 1 ? 0 : (s->skip < c ? s->skip : c);
    for (int64_t sk = 0; sk <= max_skip; sk++) {
      int64_t span = (g->n - 1) * (sk + 1); /* from the first item to the last */
      for (int64_t i = 0; i + span < c; i++) count_window(g, x + i, sk + 1, sc);
    }
  }
  memset(y, 0, (size_t)s->size * sizeof *y);
  for (int64_t t = 0; t < sc->num_touched; t++) {
    int64_t id = sc->touched[t], n = sc->count[id];
    double w = s->weight ? s->weight[id] : 1.0;
    double v = s->mode == MODE_TF ? (double)n : s->mode == MODE_IDF ? w : (double)n * w;
    y[s->index[id]] += (float)v;
    sc->count[id] = 0;
  }
  sc->num_touched = 0;
}

typedef struct TfJob {
  const TfState *s;
  const int64_t *x;
  int64_t c;
  float *y;
  atomic_int failed; /* a shard could not get its scratch */
} TfJob;

static void tfidf_rows(void *arg, int64_t begin, int64_t end) {
  TfJob *j = arg;
  size_t k = j->s->num_ngrams ? (size_t)j->s->num_ngrams : 1;
  TfScratch sc = {cpu_host->alloc(2 * k * sizeof(int64_t)), NULL, 0};
  if (!sc.count) {
    atomic_store(&j->failed, 1);
    return;
  }
  memset(sc.count, 0, k * sizeof(int64_t));
  sc.touched = sc.count + k;
  for (int64_t r = begin; r < end; r++)
    tfidf_row(j->s, j->x + r * j->c, j->c, j->y + r * j->s->size, &sc);
  cpu_host->free(sc.count);
}

static floe_code tfidf_compute(void *state, FloeKernelContext *ctx) {
  const FloeHostApi *h = cpu_host;
  const TfState *s = state;
  const FloeTensor *x = h->ctx_input(ctx, 0);
  int r = h->tensor_rank(x);
  if (r != 1 && r != 2)
    return h->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "input must be [C] or [N, C], got rank %d",
                            r);
  const int64_t *d = h->tensor_dims(x);
  int64_t rows = r == 2 ? d[0] : 1, c = d[r - 1], yd[2] = {rows, s->size};
  FloeTensor *y;
  floe_code rc = h->ctx_allocate_output(ctx, 0, r, r == 2 ? yd : yd + 1, &y);
  if (rc != FLOE_OK) return rc;
  if (rows * c == 0) { /* no n-grams: all zeros */
    if (rows) memset(h->tensor_data(y), 0, (size_t)(rows * s->size) * sizeof(float));
    return FLOE_OK;
  }
  const int64_t *xv = h->tensor_data(x);
  if (h->tensor_dtype(x) == FLOE_I32) { /* items compared as int64, as the pool holds them */
    int64_t *wide, n = rows * c;
    if ((rc = h->ctx_allocate_temp(ctx, (size_t)n * sizeof *wide, (void **)&wide)) != FLOE_OK)
      return rc;
    const int32_t *narrow = h->tensor_data(x);
    for (int64_t i = 0; i < n; i++) wide[i] = narrow[i];
    xv = wide;
  }
  TfJob j = {s, xv, c, h->tensor_data(y), 0};
  int64_t lengths = s->num_groups ? s->num_groups : 1;
  int64_t skips = s->skip < c ? s->skip + 1 : c + 1;
  cpu_parallel_for(rows, c * lengths * skips * 16 + s->size, tfidf_rows, &j);
  if (atomic_load(&j.failed))
    return h->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory for the n-gram counts");
  return FLOE_OK;
}

floe_code cpu_register_tfidf(FloePluginRegistrar *reg) {
  return cpu_add_kernel(reg, "TfIdfVectorizer", "T", FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64),
                        0, tfidf_compute, tfidf_create, tfidf_free, NULL);
}
