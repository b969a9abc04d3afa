/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_text_features.c - the shape function of TfIdfVectorizer (ops_text_features.def).
 * It checks the whole n-gram table (mode, gram lengths, ngram_counts against the pool,
 * ngram_indexes, weights) so that a bad table is an error when the node is built, naming
 * what is wrong; the CPU kernel checks again what its memory safety rests on. */
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

/* Output coordinates above this would make an absurd output; ONNX's own are small. */
#define TFIDF_MAX_INDEX 2147483647LL

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) FLOE__PRINTF(2, 3);

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe_code c = floe__status_vset(sctx->status, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return c;
}

static int64_t attr_int(const FloeShapeContext *sctx, const char *name) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  return v && v->kind == FLOE_ATTR_INT ? v->u.i : 0;
}

/* An int-list attribute (empty when absent). */
static const int64_t *attr_ints(const FloeShapeContext *sctx, const char *name, size_t *n) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  *n = v && v->kind == FLOE_ATTR_INT_LIST ? v->u.ilist.n : 0;
  return *n ? v->u.ilist.v : NULL;
}

/* ngram_counts against the pool: starts at 0, non-decreasing, whole n-grams in each stretch;
 * *total gets the number of n-grams. */
static floe_code check_counts(FloeShapeContext *sctx, const int64_t *counts, size_t nc,
                              size_t npool, int64_t *total) {
  *total = 0;
  if (nc == 0) return fail(sctx, "TfIdfVectorizer ngram_counts must not be empty");
  if (counts[0] != 0)
    return fail(sctx, "TfIdfVectorizer ngram_counts[0] must be 0 (the pool starts with the "
                      "1-grams), got %lld", (long long)counts[0]);
  for (size_t g = 1; g < nc; g++)
    if (counts[g] < counts[g - 1])
      return fail(sctx, "TfIdfVectorizer ngram_counts[%zu] = %lld is less than ngram_counts[%zu] "
                        "= %lld (the list must not decrease)", g, (long long)counts[g], g - 1,
                  (long long)counts[g - 1]);
  for (size_t g = 0; g < nc; g++)
    if (counts[g] > (int64_t)npool)
      return fail(sctx, "TfIdfVectorizer ngram_counts[%zu] = %lld is beyond the pool of %zu "
                        "items", g, (long long)counts[g], npool);
  for (size_t g = 0; g < nc; g++) {
    int64_t start = counts[g], end = g + 1 < nc ? counts[g + 1] : (int64_t)npool;
    if ((end - start) % (int64_t)(g + 1))
      return fail(sctx, "TfIdfVectorizer ngram_counts: the %zu-grams take %lld pool items, "
                        "not a whole number of %zu-grams", g + 1, (long long)(end - start), g + 1);
    *total += (end - start) / (int64_t)(g + 1);
  }
  return FLOE_OK;
}

floe_code floe__shape_tfidf_vectorizer(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  const FloeAttrValue *mv = floe__attrs_get(&sctx->node->attrs, "mode");
  const char *mode = mv && mv->kind == FLOE_ATTR_STRING ? mv->u.s : "";
  if (strcmp(mode, "TF") && strcmp(mode, "IDF") && strcmp(mode, "TFIDF"))
    return fail(sctx, "TfIdfVectorizer mode '%s' is not one of TF, IDF, TFIDF", mode);
  int64_t lo = attr_int(sctx, "min_gram_length"), hi = attr_int(sctx, "max_gram_length");
  if (hi < lo)
    return fail(sctx, "TfIdfVectorizer max_gram_length %lld is less than min_gram_length %lld",
                (long long)hi, (long long)lo);
  size_t nc, ni, np;
  const int64_t *counts = attr_ints(sctx, "ngram_counts", &nc);
  const int64_t *idx = attr_ints(sctx, "ngram_indexes", &ni);
  attr_ints(sctx, "pool", &np);
  int64_t total;
  floe_code c = check_counts(sctx, counts, nc, np, &total);
  if (c != FLOE_OK) return c;
  if ((int64_t)ni != total)
    return fail(sctx, "TfIdfVectorizer ngram_indexes has %zu entries but the pool holds %lld "
                      "n-grams (one output coordinate per n-gram)", ni, (long long)total);
  int64_t size = 0;
  for (size_t k = 0; k < ni; k++) {
    if (idx[k] < 0 || idx[k] > TFIDF_MAX_INDEX)
      return fail(sctx, "TfIdfVectorizer ngram_indexes[%zu] = %lld is out of range [0, %lld]", k,
                  (long long)idx[k], TFIDF_MAX_INDEX);
    if (idx[k] + 1 > size) size = idx[k] + 1;
  }
  const FloeAttrValue *wv = floe__attrs_get(&sctx->node->attrs, "weights");
  size_t nw = wv && wv->kind == FLOE_ATTR_FLOAT_LIST ? wv->u.flist.n : 0;
  if (nw && nw != ni)
    return fail(sctx, "TfIdfVectorizer weights has %zu entries, not one per n-gram (%zu)", nw,
                ni);
  const FloeShape *x = &sctx->input_shapes[0];
  FloeShape out = floe_shape_unknown();
  if (x->rank == 1 || x->rank == 2) {
    out = *x;
    out.dims[x->rank - 1] = size;
  } else if (x->rank >= 0) {
    return fail(sctx, "TfIdfVectorizer input must be [C] or [N, C], got shape %s",
                SHAPE_STR(*x));
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}
