/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_math_signal.c - shape functions of ops_math_signal.def (determinants and signal
 * processing ops).
 *
 * Written against the host API alone, as a plugin's would be: input shapes, attributes and
 * the values of constant inputs (lengths, steps, sizes) resolve the outputs; unknown values
 * leave their dims unknown; a definite mismatch is an error naming the op and the shapes. */
#include <stdio.h>

#include "graph.h"
#include "ops_shape.h"

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

/* The value of a constant scalar integer input; false when not known at build time. */
static bool const_int(const FloeHostApi *host, FloeShapeContext *sctx, int i, int64_t *out) {
  const FloeTensor *t = host->shape_input_value(sctx, i);
  if (!t || host->tensor_num_elements(t) != 1) return false;
  const void *d = host->tensor_data(t);
  switch (host->tensor_dtype(t)) {
    case FLOE_I32: *out = *(const int32_t *)d; return true;
    case FLOE_I64: *out = *(const int64_t *)d; return true;
    default: return false;
  }
}

/* Input i must be a scalar (rank 0, or one element of rank 1 as ONNX models often have). */
static floe_code need_scalar(const FloeHostApi *host, FloeShapeContext *sctx, int i,
                             const char *op, const char *what) {
  FloeShape s = host->shape_input(sctx, i);
  if (s.rank > 1 || (s.rank == 1 && s.dims[0] >= 0 && s.dims[0] != 1))
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "%s %s must be a scalar, got %s",
                                 op, what, SHAPE_STR(s));
  return FLOE_OK;
}

static bool attr_flag(const FloeHostApi *host, FloeShapeContext *sctx, const char *name,
                      int dflt) {
  int v = dflt;
  host->attr_bool(host->shape_attrs(sctx), name, &v);
  return v != 0;
}

floe_code floe__shape_matrix_determinant(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape in = host->shape_input(sctx, 0), out = floe_shape_unknown();
  if (in.rank >= 0) {
    if (in.rank < 2)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "MatrixDeterminant needs matrices [..., M, M], got %s",
                                   SHAPE_STR(in));
    int64_t m = in.dims[in.rank - 2], n = in.dims[in.rank - 1];
    if (m >= 0 && n >= 0 && m != n)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "MatrixDeterminant needs square matrices, got %s",
                                   SHAPE_STR(in));
    out = floe_shape_make(in.rank - 2, in.dims);
  }
  host->shape_set_output(sctx, 0, &out);
  return FLOE_OK;
}

floe_code floe__shape_cosine_sum_window(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code rc = need_scalar(host, sctx, 0, "CosineSumWindow", "size");
  if (rc != FLOE_OK) return rc;
  int64_t size = FLOE_DIM_UNKNOWN;
  if (const_int(host, sctx, 0, &size) && size < 0)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "CosineSumWindow size must be >= 0, got %lld", (long long)size);
  FloeShape out = floe_shape_make(1, &size);
  host->shape_set_output(sctx, 0, &out);
  return FLOE_OK;
}

/* The DFT's axis normalised into [0, rank - 2]: negative values count from the end, -2
 * being the last dim before the real/imaginary one. -1 when out of range. */
static int dft_axis(int64_t axis, int rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis <= rank - 2 ? (int)axis : -1;
}

floe_code floe__shape_dft(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape in = host->shape_input(sctx, 0), out = floe_shape_unknown();
  floe_code rc = need_scalar(host, sctx, 1, "DFT", "dft_length");
  if (rc != FLOE_OK) return rc;
  int64_t len = FLOE_DIM_UNKNOWN;
  if (const_int(host, sctx, 1, &len) && len < 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "DFT dft_length must be >= 1, got %lld",
                                 (long long)len);
  if (in.rank >= 0) {
    int64_t axis = 1;
    host->attr_int(host->shape_attrs(sctx), "axis", &axis);
    int ax = dft_axis(axis, in.rank);
    int64_t c = in.rank > 0 ? in.dims[in.rank - 1] : 0;
    if (in.rank < 2 || (c >= 0 && c != 1 && c != 2))
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "DFT input must be [..., 1] (real) or [..., 2] (complex), got %s",
                                   SHAPE_STR(in));
    if (ax < 0)
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "DFT axis %lld is out of range for input %s", (long long)axis,
                                   SHAPE_STR(in));
    bool inverse = attr_flag(host, sctx, "inverse", 0), onesided = attr_flag(host, sctx, "onesided", 0);
    out = in;
    out.dims[ax] = len < 0 ? len : onesided && !inverse ? len / 2 + 1 : len;
    out.dims[in.rank - 1] = inverse && onesided ? 1 : 2;
  }
  host->shape_set_output(sctx, 0, &out);
  return FLOE_OK;
}

floe_code floe__shape_stft(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape sig = host->shape_input(sctx, 0), win = host->shape_input(sctx, 2);
  floe_code rc;
  if ((rc = need_scalar(host, sctx, 1, "STFT", "frame_step")) != FLOE_OK ||
      (rc = need_scalar(host, sctx, 3, "STFT", "frame_length")) != FLOE_OK)
    return rc;
  if (sig.rank >= 0 && (sig.rank != 3 || (sig.dims[2] >= 0 && sig.dims[2] != 1 && sig.dims[2] != 2)))
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "STFT signal must be [batch, length, 1 or 2], got %s", SHAPE_STR(sig));
  if (win.rank >= 0 && win.rank != 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "STFT window must be 1-D, got %s",
                                 SHAPE_STR(win));
  int64_t step = FLOE_DIM_UNKNOWN, flen = win.rank == 1 ? win.dims[0] : FLOE_DIM_UNKNOWN, v;
  if (const_int(host, sctx, 1, &step) && step < 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT, "STFT frame_step must be >= 1, got %lld",
                                 (long long)step);
  if (const_int(host, sctx, 3, &v)) {
    if (v < 1 || (flen >= 0 && v != flen))
      return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                   "STFT frame_length %lld must be >= 1 and the window's length (%s)",
                                   (long long)v, SHAPE_STR(win));
    flen = v;
  }
  int64_t len = sig.rank == 3 ? sig.dims[1] : FLOE_DIM_UNKNOWN;
  if (len >= 0 && flen > len)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "STFT frame_length %lld is longer than the signal %s",
                                 (long long)flen, SHAPE_STR(sig));
  bool onesided = attr_flag(host, sctx, "onesided", 1);
  int64_t dims[4] = {sig.rank == 3 ? sig.dims[0] : FLOE_DIM_UNKNOWN,
                     len >= 0 && flen >= 0 && step >= 0 ? 1 + (len - flen) / step : FLOE_DIM_UNKNOWN,
                     flen < 0 ? flen : onesided ? flen / 2 + 1 : flen, 2};
  FloeShape out = floe_shape_make(4, dims);
  host->shape_set_output(sctx, 0, &out);
  return FLOE_OK;
}

floe_code floe__shape_mel_weight_matrix(const FloeHostApi *host, FloeShapeContext *sctx) {
  static const char *const names[5] = {"num_mel_bins", "dft_length", "sample_rate",
                                       "lower_edge_hertz", "upper_edge_hertz"};
  for (int i = 0; i < 5; i++) {
    floe_code rc = need_scalar(host, sctx, i, "MelWeightMatrix", names[i]);
    if (rc != FLOE_OK) return rc;
  }
  int64_t bins = FLOE_DIM_UNKNOWN, len = FLOE_DIM_UNKNOWN;
  if (const_int(host, sctx, 0, &bins) && bins < 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "MelWeightMatrix num_mel_bins must be >= 1, got %lld", (long long)bins);
  if (const_int(host, sctx, 1, &len) && len < 1)
    return host->shape_set_error(sctx, FLOE_INVALID_ARGUMENT,
                                 "MelWeightMatrix dft_length must be >= 1, got %lld", (long long)len);
  int64_t dims[2] = {len < 0 ? len : len / 2 + 1, bins};
  FloeShape out = floe_shape_make(2, dims);
  host->shape_set_output(sctx, 0, &out);
  return FLOE_OK;
}
