/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_text.c - ONNX text-feature ops: TfIdfVectorizer as Floe's op of the same name
 * (ops_text_features.def), for integer items. String items are unsupported: Floe has no
 * string dtype (a STRING graph input is refused when the inputs are imported, a pool_strings
 * here). */
#include <string.h>

#include "onnx_internal.h"

/* The ONNX attributes that must be given, each with no default. */
static floe_code require(OxCtx *c, const Onnx__NodeProto *n, const char *const *names, int k) {
  for (int i = 0; i < k; i++)
    if (!ox_attr(n, names[i]))
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute %s is required", names[i]);
  return FLOE_OK;
}

static floe_code map_tfidf(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                           FloeOutput *out, int nout) {
  (void)nout;
  if (nin < 1 || !ox_present(in[0])) return ox_fail(c, FLOE_INVALID_ARGUMENT, "input X is required");
  if (ox_attr(n, "pool_strings"))
    return ox_fail(c, FLOE_UNIMPLEMENTED, "pool_strings (n-grams of STRING items): Floe has no "
                                          "string dtype; only pool_int64s is supported");
  static const char *const req[] = {"mode",         "min_gram_length", "max_gram_length",
                                    "max_skip_count", "ngram_counts",  "ngram_indexes",
                                    "pool_int64s"};
  floe_code rc = require(c, n, req, (int)(sizeof req / sizeof req[0]));
  if (rc != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  if (dt != FLOE_I32 && dt != FLOE_I64)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "input X must be INT32 or INT64 (or STRING), got %s",
                   floe_dtype_name(dt));
  const int64_t *counts, *idx, *pool;
  const float *wf;
  int nc = ox_ints(n, "ngram_counts", &counts), ni = ox_ints(n, "ngram_indexes", &idx);
  int np = ox_ints(n, "pool_int64s", &pool), nw = ox_floats(n, "weights", &wf);
  if (nc < 0 || ni < 0 || np < 0)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "ngram_counts, ngram_indexes and pool_int64s must "
                                             "be lists of ints");
  double *w = NULL;
  if (nw > 0) {
    if (!(w = floe__malloc((size_t)nw * sizeof *w)))
      return ox_fail(c, FLOE_NO_MEMORY, "out of memory for %d weights", nw);
    for (int i = 0; i < nw; i++) w[i] = wf[i];
  }
  char mode[64];
  FloeNodeBuilder *b = ox_begin(c, "TfIdfVectorizer");
  floe_node_add_input(b, in[0]);
  floe_node_set_attr_string(b, "mode", ox_str(n, "mode", "", mode, sizeof mode));
  floe_node_set_attr_int(b, "min_gram_length", ox_int(n, "min_gram_length", 0));
  floe_node_set_attr_int(b, "max_gram_length", ox_int(n, "max_gram_length", 0));
  floe_node_set_attr_int(b, "max_skip_count", ox_int(n, "max_skip_count", 0));
  floe_node_set_attr_int_list(b, "ngram_counts", counts, nc);
  floe_node_set_attr_int_list(b, "ngram_indexes", idx, ni);
  floe_node_set_attr_int_list(b, "pool", pool, np);
  floe_node_set_attr_float_list(b, "weights", w, nw > 0 ? nw : 0);
  out[0] = ox_finish(c, b);
  floe__free(w);
  return FLOE_OK;
}

const OxOp floe__onnx_ops_text[] = {
    {"", "TfIdfVectorizer", map_tfidf},
    {NULL, NULL, NULL},
};
