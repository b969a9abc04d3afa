/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_resize.c - shape functions of the ops in ops_resize.def (Resize, GridSample,
 * RoiAlign, BatchedNonMaxSuppression, RNN, GRU, LSTM). They use only the host API's shape
 * slots, as a plugin's would. Unknown dims and ranks propagate; definite mismatches are
 * errors naming the operand and its shape. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

static FloeShape unknown_dims(int r) {
  FloeShape s = floe_shape_unknown();
  if (r < 0) return s;
  s.rank = r;
  for (int i = 0; i < r; i++) s.dims[i] = FLOE_DIM_UNKNOWN;
  return s;
}

static int64_t attr_int(const FloeHostApi *host, const FloeShapeContext *sctx, const char *name,
                        int64_t dflt) {
  int64_t v;
  return host->attr_int(host->shape_attrs(sctx), name, &v) == FLOE_OK ? v : dflt;
}

static const char *attr_str(const FloeHostApi *host, const FloeShapeContext *sctx,
                            const char *name, const char *dflt) {
  const char *v;
  return host->attr_string(host->shape_attrs(sctx), name, &v) == FLOE_OK ? v : dflt;
}

/* Input i's rank must be `rank` when known. */
static floe_code want_rank(const FloeHostApi *host, FloeShapeContext *sctx, int i,
                           const char *what, int rank, const char *layout) {
  FloeShape s = host->shape_input(sctx, i);
  if (s.rank >= 0 && s.rank != rank)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "%s must be %s, got shape %s",
                                 what, layout, SHAPE_STR(s));
  return FLOE_OK;
}

static int64_t dim_or_unknown(FloeShape s, int i) { return s.rank > i ? s.dims[i] : -1; }

floe_code floe__shape_resize(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape x = host->shape_input(sctx, 0);
  const FloeTensor *scales = host->shape_input_value(sctx, 2);
  const FloeTensor *sizes = host->shape_input_value(sctx, 3);
  FloeShape y = unknown_dims(x.rank);
  if (sizes && host->tensor_dtype(sizes) == FLOE_I64 && host->tensor_num_elements(sizes) > 0) {
    int64_t n = host->tensor_num_elements(sizes);
    const int64_t *v = host->tensor_data(sizes);
    if (x.rank >= 0 && n != x.rank)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "sizes has %lld values for x of shape %s (one per dim)",
                                   (long long)n, SHAPE_STR(x));
    if (n > FLOE_MAX_DIMS)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "sizes has %lld values",
                                   (long long)n);
    y.rank = (int)n;
    for (int64_t i = 0; i < n; i++) {
      if (v[i] < 0)
        return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "sizes[%lld] is %lld",
                                     (long long)i, (long long)v[i]);
      y.dims[i] = v[i];
    }
  } else if (scales && host->tensor_dtype(scales) == FLOE_F32 &&
             host->tensor_num_elements(scales) > 0 && x.rank >= 0) {
    int64_t n = host->tensor_num_elements(scales);
    const float *v = host->tensor_data(scales);
    if (n != x.rank)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "scales has %lld values for x of shape %s (one per dim)",
                                   (long long)n, SHAPE_STR(x));
    for (int i = 0; i < x.rank; i++) {
      if (!(v[i] > 0) || isinf(v[i]))
        return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                     "scales[%d] is %g (must be positive and finite)", i,
                                     (double)v[i]);
      if (x.dims[i] >= 0) y.dims[i] = (int64_t)floor((double)v[i] * (double)x.dims[i]);
    }
  }
  host->shape_set_output(sctx, 0, &y);
  return FLOE_OK;
}

floe_code floe__shape_grid_sample(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code rc;
  if ((rc = want_rank(host, sctx, 0, "x", 4, "[N,C,H,W]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 1, "grid", 4, "[N,H_out,W_out,2]")) != FLOE_OK)
    return rc;
  FloeShape x = host->shape_input(sctx, 0), g = host->shape_input(sctx, 1);
  int64_t gl = dim_or_unknown(g, 3), xn = dim_or_unknown(x, 0), gn = dim_or_unknown(g, 0);
  if (gl >= 0 && gl != 2)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "grid must be [N,H_out,W_out,2], got shape %s", SHAPE_STR(g));
  if (xn >= 0 && gn >= 0 && xn != gn)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "x %s and grid %s differ in their batch dim", SHAPE_STR(x),
                                 SHAPE_STR(g));
  int64_t d[4] = {xn >= 0 ? xn : gn, dim_or_unknown(x, 1), dim_or_unknown(g, 1),
                  dim_or_unknown(g, 2)};
  FloeShape y = floe_shape_make(4, d);
  host->shape_set_output(sctx, 0, &y);
  return FLOE_OK;
}

floe_code floe__shape_roi_align(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code rc;
  if ((rc = want_rank(host, sctx, 0, "x", 4, "[N,C,H,W]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 1, "rois", 2, "[num_rois,4]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 2, "batch_indices", 1, "[num_rois]")) != FLOE_OK)
    return rc;
  FloeShape x = host->shape_input(sctx, 0), r = host->shape_input(sctx, 1),
            bi = host->shape_input(sctx, 2);
  int64_t nr = dim_or_unknown(r, 0), nb = dim_or_unknown(bi, 0), rc4 = dim_or_unknown(r, 1);
  if ((rc4 >= 0 && rc4 != 4) || (nr >= 0 && nb >= 0 && nr != nb))
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "rois must be [num_rois,4] and batch_indices [num_rois], got "
                                 "%s and %s",
                                 SHAPE_STR(r), SHAPE_STR(bi));
  int64_t oh = attr_int(host, sctx, "output_height", 1), ow = attr_int(host, sctx, "output_width", 1);
  if (oh < 1 || ow < 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "output_height %lld and output_width %lld must be >= 1",
                                 (long long)oh, (long long)ow);
  int64_t d[4] = {nr >= 0 ? nr : nb, dim_or_unknown(x, 1), oh, ow};
  FloeShape y = floe_shape_make(4, d);
  host->shape_set_output(sctx, 0, &y);
  return FLOE_OK;
}

floe_code floe__shape_nms(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code rc;
  if ((rc = want_rank(host, sctx, 0, "boxes", 3, "[batch,boxes,4]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 1, "scores", 3, "[batch,classes,boxes]")) != FLOE_OK)
    return rc;
  FloeShape b = host->shape_input(sctx, 0), s = host->shape_input(sctx, 1);
  int64_t b4 = dim_or_unknown(b, 2);
  int bad = b4 >= 0 && b4 != 4;
  for (int i = 0; i < 3; i += 2) { /* batch and box counts */
    int64_t bd = dim_or_unknown(b, i == 0 ? 0 : 1), sd = dim_or_unknown(s, i);
    bad |= bd >= 0 && sd >= 0 && bd != sd;
  }
  if (bad)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "boxes must be [batch,boxes,4] and scores [batch,classes,boxes], "
                                 "got %s and %s",
                                 SHAPE_STR(b), SHAPE_STR(s));
  int64_t d[2] = {FLOE_DIM_UNKNOWN, 3};
  FloeShape y = floe_shape_make(2, d);
  host->shape_set_output(sctx, 0, &y);
  return FLOE_OK;
}

/* RNN, GRU and LSTM: y [S,D,B,H], then [D,B,H] for y_h (and y_c). */
floe_code floe__shape_rnn(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code rc;
  if ((rc = want_rank(host, sctx, 0, "x", 3, "[seq_length,batch,input]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 1, "w", 3, "[directions,gates*hidden,input]")) != FLOE_OK ||
      (rc = want_rank(host, sctx, 2, "r", 3, "[directions,gates*hidden,hidden]")) != FLOE_OK)
    return rc;
  const char *dir = attr_str(host, sctx, "direction", "forward");
  int64_t nd;
  if (!strcmp(dir, "forward") || !strcmp(dir, "reverse"))
    nd = 1;
  else if (!strcmp(dir, "bidirectional"))
    nd = 2;
  else
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "direction '%s' (forward, reverse or bidirectional)", dir);
  FloeShape x = host->shape_input(sctx, 0), r = host->shape_input(sctx, 2);
  int64_t hid = attr_int(host, sctx, "hidden_size", 0);
  int64_t rh = dim_or_unknown(r, 2), rd = dim_or_unknown(r, 0);
  if (hid < 0)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "hidden_size %lld", (long long)hid);
  if (hid > 0 && rh >= 0 && rh != hid)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "r %s does not have hidden_size %lld as its last dim",
                                 SHAPE_STR(r), (long long)hid);
  if (rd >= 0 && rd != nd)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "r %s must have %lld directions (direction %s)", SHAPE_STR(r),
                                 (long long)nd, dir);
  if (hid == 0) hid = rh;
  int64_t seq = dim_or_unknown(x, 0), batch = dim_or_unknown(x, 1);
  int64_t yd[4] = {seq, nd, batch, hid}, hd[3] = {nd, batch, hid};
  FloeShape y = floe_shape_make(4, yd), h = floe_shape_make(3, hd);
  host->shape_set_output(sctx, 0, &y);
  for (int i = 1; i < host->shape_num_outputs(sctx); i++) host->shape_set_output(sctx, i, &h);
  return FLOE_OK;
}
