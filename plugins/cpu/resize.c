/* SPDX-License-Identifier: Apache-2.0 */
/* resize.c - ONNX's resampling and detection ops of the CPU plugin: Resize, GridSample,
 * RoiAlign and BatchedNonMaxSuppression (semantics in core/graph/ops_resize.def).
 *
 * Resize is separable: each resized dim is one pass over the data, in dim order, turning
 * [outer, in, inner] into [outer, out, inner] with per-output-index taps (input indices and
 * weights) computed once per pass. Nearest mode is a gather of whole elements (exact for
 * every dtype); linear and cubic interpolate in f64. GridSample and RoiAlign read their
 * operands as f64 and write the output's dtype; NMS works in f32 as ONNX Runtime does, so
 * ties at the IoU threshold fall the same way. Kernels have no mutable state: one node may
 * run in concurrent steps.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

#define SHAPE(t)                                                                 \
  cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX,                 \
                cpu_host->tensor_rank(t), cpu_host->tensor_dims(t))

/* ------------------------------------------------------------------------------------ */
/* f64 views of any numeric dtype (shared with rnn_onnx.c through cpu.h). */

static double load_f64(FloeDType dt, const void *p, int64_t i) {
  switch (dt) {
    case FLOE_F32: return ((const float *)p)[i];
    case FLOE_F64: return ((const double *)p)[i];
    case FLOE_F16: return cpu_f16_to_f32(((const uint16_t *)p)[i]);
    case FLOE_BF16: return cpu_bf16_to_f32(((const uint16_t *)p)[i]);
    case FLOE_I8: return ((const int8_t *)p)[i];
    case FLOE_U8: return ((const uint8_t *)p)[i];
    case FLOE_I32: return ((const int32_t *)p)[i];
    case FLOE_I64: return (double)((const int64_t *)p)[i];
    default: return 0;
  }
}

/* Integers: rounded half to even and saturated (NaN gives 0). */
static int64_t saturate(double v, double lo, double hi) {
  if (v != v) return 0;
  v = nearbyint(v);
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return hi >= 9.2e18 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}

static void store_f64(FloeDType dt, void *p, int64_t i, double v) {
  switch (dt) {
    case FLOE_F32: ((float *)p)[i] = (float)v; break;
    case FLOE_F64: ((double *)p)[i] = v; break;
    case FLOE_F16: ((uint16_t *)p)[i] = cpu_f32_to_f16((float)v); break;
    case FLOE_BF16: ((uint16_t *)p)[i] = cpu_f32_to_bf16((float)v); break;
    case FLOE_I8: ((int8_t *)p)[i] = (int8_t)saturate(v, INT8_MIN, INT8_MAX); break;
    case FLOE_U8: ((uint8_t *)p)[i] = (uint8_t)saturate(v, 0, UINT8_MAX); break;
    case FLOE_I32: ((int32_t *)p)[i] = (int32_t)saturate(v, INT32_MIN, INT32_MAX); break;
    case FLOE_I64: ((int64_t *)p)[i] = saturate(v, -9223372036854775808.0, 9.3e18); break;
    default: break;
  }
}

void cpu_to_f64(FloeDType dt, const void *src, double *dst, int64_t n) {
  if (dt == FLOE_F64) {
    memcpy(dst, src, (size_t)n * sizeof *dst);
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = load_f64(dt, src, i);
}

void cpu_from_f64(FloeDType dt, const double *src, void *dst, int64_t n) {
  if (dt == FLOE_F64) {
    memcpy(dst, src, (size_t)n * sizeof *src);
    return;
  }
  for (int64_t i = 0; i < n; i++) store_f64(dt, dst, i, src[i]);
}

/* An f64 copy of input i in ctx's temporary memory; NULL after recording an error. */
static double *input_f64(FloeKernelContext *ctx, int i) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  int64_t n = cpu_host->tensor_num_elements(t);
  void *buf = NULL;
  if (cpu_host->ctx_allocate_temp(ctx, (size_t)(n > 0 ? n : 1) * sizeof(double), &buf) !=
      FLOE_OK)
    return NULL;
  if (n > 0) cpu_to_f64(cpu_host->tensor_dtype(t), cpu_host->tensor_data(t), buf, n);
  return buf;
}

/* Index of name in names[0..n), or -1. */
static int lookup(const char *name, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

/* String attribute `attr` as its index in names; records an error naming the choices. */
static floe_code attr_choice(const FloeHostApi *host, FloeKernelInit *init, const char *attr,
                             const char *const *names, int n, int *out) {
  const char *s = NULL;
  if (host->attr_string(host->init_attrs(init), attr, &s) != FLOE_OK) {
    *out = 0; /* the op definition's default comes first in names */
    return FLOE_OK;
  }
  if ((*out = lookup(s, names, n)) >= 0) return FLOE_OK;
  char list[256] = "";
  for (int i = 0; i < n; i++) {
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, names[i], sizeof list - strlen(list) - 1);
  }
  return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "unknown %s '%s' (one of: %s)", attr,
                              s, list);
}

static double attr_f(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                     double dflt) {
  double v;
  return host->attr_float(host->init_attrs(init), name, &v) == FLOE_OK ? v : dflt;
}

static int64_t attr_i(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                      int64_t dflt) {
  int64_t v;
  int b;
  if (host->attr_int(host->init_attrs(init), name, &v) == FLOE_OK) return v;
  if (host->attr_bool(host->init_attrs(init), name, &b) == FLOE_OK) return b;
  return dflt;
}

static void state_free(void *state) { cpu_host->free(state); }

/* ------------------------------------------------------------------------------------ */
/* Resize. */

enum { RM_NEAREST, RM_LINEAR, RM_CUBIC };
enum { CT_HALF_PIXEL, CT_PYTORCH_HALF_PIXEL, CT_ASYMMETRIC, CT_ALIGN_CORNERS,
       CT_TF_HALF_PIXEL_FOR_NN, CT_TF_CROP_AND_RESIZE };
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };

static const char *const mode_names[] = {"nearest", "linear", "cubic"};
static const char *const ctm_names[] = {"half_pixel",   "pytorch_half_pixel",   "asymmetric",
                                        "align_corners", "tf_half_pixel_for_nn",
                                        "tf_crop_and_resize"};
static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil", "simple"};

typedef struct ResizeState {
  int mode, ctm, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
} ResizeState;

static floe_code resize_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  (void)user_data;
  ResizeState s;
  floe_code rc;
  if ((rc = attr_choice(host, init, "mode", mode_names, 3, &s.mode)) != FLOE_OK ||
      (rc = attr_choice(host, init, "coordinate_transformation_mode", ctm_names, 6, &s.ctm)) !=
          FLOE_OK ||
      (rc = attr_choice(host, init, "nearest_mode", nearest_names, 5, &s.nearest)) != FLOE_OK)
    return rc;
  s.cubic_a = attr_f(host, init, "cubic_coeff_a", -0.75);
  s.extrapolation = attr_f(host, init, "extrapolation_value", 0.0);
  s.exclude_outside = attr_i(host, init, "exclude_outside", 0) != 0;
  ResizeState *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *p = s;
  *state = p;
  return FLOE_OK;
}

/* One resized dim: the output size and, per output index, its taps. idx[o * taps + k] are
 * clamped input indices; a negative first index marks an output that is extrapolation_value
 * (-2) or zero (-1: exclude_outside left no tap). */
typedef struct Axis {
  int64_t in, out;
  double scale; /* output / input, as ONNX's reference uses it */
  double roi_start, roi_end;
  bool skip;    /* left alone: scale 1, same size, identity roi */
  int taps;
  int64_t *idx;
  double *w;
} Axis;

/* The input coordinate of output index o. */
static double source_coord(const ResizeState *s, const Axis *a, int64_t o, bool *extrapolated) {
  double in = (double)a->in, width = a->scale * in, y = (double)o, x;
  *extrapolated = false;
  switch (s->ctm) {
    case CT_PYTORCH_HALF_PIXEL: x = width == 1 ? -0.5 : (y + 0.5) / a->scale - 0.5; break;
    case CT_ASYMMETRIC: x = y / a->scale; break;
    case CT_ALIGN_CORNERS: x = width == 1 ? 0 : y * (in - 1) / (width - 1); break;
    case CT_TF_HALF_PIXEL_FOR_NN: x = (y + 0.5) / a->scale; break;
    case CT_TF_CROP_AND_RESIZE:
      x = width == 1 ? (a->roi_end - a->roi_start) * (in - 1) / 2
                     : y * (a->roi_end - a->roi_start) * (in - 1) / (width - 1);
      x += a->roi_start * (in - 1);
      *extrapolated = !(x >= 0 && x <= in - 1); /* NaN from a NaN roi too */
      break;
    default: x = (y + 0.5) / a->scale - 0.5; break;
  }
  return x;
}

static void cubic_coeffs(double r, double A, double *c) {
  double s = 1 - r;
  c[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
  c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
  c[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
  c[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
}

/* Taps of output o. As ONNX's reference, a coordinate that is a whole number p takes the
 * neighbours left of it (ratio 1 on [p-1, p] for linear, [p-2, p+1] for cubic), which only
 * matters for which zero-weight taps exclude_outside sees. */
static void axis_taps(const ResizeState *s, const Axis *a, int64_t o, int64_t *idx, double *w) {
  bool extra;
  double x = source_coord(s, a, o, &extra);
  if (extra) {
    idx[0] = -2;
    return;
  }
  double fl = floor(x);
  int64_t p = (int64_t)fl;
  bool whole = x == fl;
  int64_t first;
  double c[4];
  if (s->mode == RM_NEAREST) {
    double r = x - fl;
    int64_t pick;
    switch (s->nearest) {
      case NM_ROUND_PREFER_CEIL: pick = r < 0.5 ? p : p + 1; break;
      case NM_FLOOR: pick = p; break;
      case NM_CEIL: pick = whole ? p : p + 1; break;
      case NM_SIMPLE: pick = a->scale < 1 ? (int64_t)ceil(x) : p; break;
      default: pick = r <= 0.5 ? p : p + 1; break;
    }
    if (s->exclude_outside && (pick < 0 || pick >= a->in))
      idx[0] = -1;
    else
      idx[0] = pick < 0 ? 0 : pick >= a->in ? a->in - 1 : pick;
    return;
  }
  if (s->mode == RM_LINEAR) {
    double r = whole ? 1 : x - fl;
    first = whole ? p - 1 : p;
    c[0] = 1 - r;
    c[1] = r;
  } else {
    cubic_coeffs(whole ? 1 : x - fl, s->cubic_a, c);
    first = whole ? p - 2 : p - 1;
  }
  double sum = 0;
  for (int k = 0; k < a->taps; k++) {
    int64_t j = first + k;
    if (s->exclude_outside && (j < 0 || j >= a->in)) c[k] = 0;
    sum += c[k];
    idx[k] = j < 0 ? 0 : j >= a->in ? a->in - 1 : j;
  }
  for (int k = 0; k < a->taps; k++) w[k] = s->exclude_outside && sum != 0 ? c[k] / sum : c[k];
}

/* Sizes, scales and rois of every dim from the inputs; errors recorded on ctx. */
static floe_code resize_axes(FloeKernelContext *ctx, const ResizeState *s, int rank,
                             const int64_t *dims, Axis *ax) {
  const FloeTensor *roi = cpu_host->ctx_input(ctx, 1), *sc = cpu_host->ctx_input(ctx, 2),
                   *sz = cpu_host->ctx_input(ctx, 3);
  int64_t nroi = cpu_host->tensor_num_elements(roi), nsc = cpu_host->tensor_num_elements(sc),
          nsz = cpu_host->tensor_num_elements(sz);
  if ((nsc > 0) == (nsz > 0))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "exactly one of scales %s and sizes %s must be given (non-empty)",
                                   SHAPE(sc), SHAPE(sz));
  if ((nsc > 0 ? nsc : nsz) != rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s has %lld values for x of shape %s (one per dim)",
                                   nsc > 0 ? "scales" : "sizes", (long long)(nsc > 0 ? nsc : nsz),
                                   cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX,
                                                 rank, dims));
  if (nroi != 0 && nroi != 2 * rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "roi has %lld values, needs %d (starts then ends per dim)",
                                   (long long)nroi, 2 * rank);
  if (s->ctm == CT_TF_CROP_AND_RESIZE && nroi == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "coordinate_transformation_mode tf_crop_and_resize needs roi");
  const float *scales = cpu_host->tensor_data(sc), *rois = cpu_host->tensor_data(roi);
  const int64_t *sizes = cpu_host->tensor_data(sz);
  for (int i = 0; i < rank; i++) {
    Axis *a = &ax[i];
    a->in = dims[i];
    if (nsc > 0) {
      a->scale = scales[i];
      if (!(a->scale > 0) || isinf(a->scale))
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "scales[%d] is %g (must be positive and finite)", i,
                                       a->scale);
      double o = floor(a->scale * (double)a->in);
      if (o > (double)INT32_MAX * 64)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "scales[%d] = %g makes dim %d of size %.0f", i, a->scale,
                                       i, o);
      a->out = (int64_t)o;
    } else {
      a->out = sizes[i];
      if (a->out < 0)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "sizes[%d] is %lld", i,
                                       (long long)a->out);
      a->scale = a->in > 0 ? (double)a->out / (double)a->in : 1;
    }
    if (a->in == 0 && a->out > 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "dim %d is empty and cannot be resized to %lld", i,
                                     (long long)a->out);
    a->roi_start = nroi ? rois[i] : 0;
    a->roi_end = nroi ? rois[rank + i] : 1;
    /* ONNX's reference leaves such a dim alone (math.isclose: relative 1e-9). */
    a->skip = fabs(a->scale - 1) <= 1e-9 * fmax(fabs(a->scale), 1) && a->out == a->in &&
              (!nroi || (a->roi_start == 0 && fabs(a->roi_end - 1) <= 1e-9 * fmax(fabs(a->roi_end), 1)));
    a->taps = s->mode == RM_NEAREST ? 1 : s->mode == RM_LINEAR ? 2 : 4;
  }
  return FLOE_OK;
}

typedef struct Gather {
  const ResizeState *s;
  FloeDType dt;
  const void *x;
  void *y;
  int rank;
  const Axis *ax;
} Gather;

/* Nearest: out element = in element at the taps' indices; the last dim (in pass order) that
 * extrapolates or has no tap decides the value of one that does. Output elements
 * [begin, end). */
static void resize_gather(void *arg, int64_t begin, int64_t end) {
  const Gather *g = arg;
  const ResizeState *s = g->s;
  FloeDType dt = g->dt;
  const void *x = g->x;
  void *y = g->y;
  int rank = g->rank;
  const Axis *ax = g->ax;
  size_t es = cpu_host->dtype_size(dt);
  int64_t in_stride[FLOE_MAX_DIMS], o[FLOE_MAX_DIMS] = {0};
  for (int i = rank - 1, st = 1; i >= 0; i--) {
    in_stride[i] = st;
    st *= ax[i].in;
  }
  for (int i = rank - 1, rest = begin; i >= 0; i--) {
    o[i] = rest % ax[i].out;
    rest /= ax[i].out;
  }
  for (int64_t e = begin; e < end; e++) {
    int64_t off = 0;
    int special = 0; /* 0: a copy, -1: zero, -2: extrapolation_value */
    for (int i = 0; i < rank; i++) {
      int64_t j = ax[i].skip ? o[i] : ax[i].idx[o[i]];
      if (j < 0) special = (int)j;
      else off += j * in_stride[i];
    }
    if (special == 0)
      memcpy((char *)y + (size_t)e * es, (const char *)x + (size_t)off * es, es);
    else
      store_f64(dt, y, e, special == -2 ? s->extrapolation : 0.0);
    for (int i = rank - 1; i >= 0 && ++o[i] == ax[i].out; i--) o[i] = 0;
  }
}

typedef struct Pass {
  const ResizeState *s;
  const Axis *a;
  const double *src;
  double *dst;
  int64_t inner;
} Pass;

/* Linear and cubic: one pass per resized dim, [outer, in, inner] -> [outer, out, inner];
 * rows [begin, end) of the [outer * out] output rows. */
static void resize_pass(void *arg, int64_t begin, int64_t end) {
  const Pass *p = arg;
  const ResizeState *s = p->s;
  const Axis *a = p->a;
  int64_t inner = p->inner;
  for (int64_t row = begin; row < end; row++) {
    int64_t u = row / a->out, o = row % a->out;
    const double *sb = p->src + u * a->in * inner;
    const int64_t *idx = a->idx + o * a->taps;
    const double *w = a->w + o * a->taps;
    double *d = p->dst + row * inner;
    if (idx[0] < 0) {
      double v = idx[0] == -2 ? s->extrapolation : 0.0;
      for (int64_t i = 0; i < inner; i++) d[i] = v;
      continue;
    }
    for (int64_t i = 0; i < inner; i++) d[i] = 0;
    for (int k = 0; k < a->taps; k++) {
      const double *sr = sb + idx[k] * inner;
      for (int64_t i = 0; i < inner; i++) d[i] += w[k] * sr[i];
    }
  }
}

static floe_code resize_compute(void *state, FloeKernelContext *ctx) {
  const ResizeState *s = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(xt);
  int rank = cpu_host->tensor_rank(xt);
  const int64_t *dims = cpu_host->tensor_dims(xt);
  Axis ax[FLOE_MAX_DIMS];
  floe_code rc = resize_axes(ctx, s, rank, dims, ax);
  if (rc != FLOE_OK) return rc;
  int64_t odims[FLOE_MAX_DIMS], total = 1, taps_total = 0;
  for (int i = 0; i < rank; i++) {
    odims[i] = ax[i].out;
    total *= ax[i].out;
    taps_total += ax[i].skip ? 0 : ax[i].out * ax[i].taps;
  }
  FloeTensor *yt;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &yt)) != FLOE_OK) return rc;
  if (total == 0) return FLOE_OK;
  void *tap_mem;
  size_t tap_bytes = (size_t)(taps_total > 0 ? taps_total : 1) * (sizeof(int64_t) + sizeof(double));
  if ((rc = cpu_host->ctx_allocate_temp(ctx, tap_bytes, &tap_mem)) != FLOE_OK) return rc;
  int64_t *ip = tap_mem;
  double *wp = (double *)(ip + (taps_total > 0 ? taps_total : 1));
  for (int i = 0; i < rank; i++) {
    if (ax[i].skip) continue;
    ax[i].idx = ip, ax[i].w = wp;
    for (int64_t o = 0; o < ax[i].out; o++)
      axis_taps(s, &ax[i], o, ip + o * ax[i].taps, wp + o * ax[i].taps);
    ip += ax[i].out * ax[i].taps, wp += ax[i].out * ax[i].taps;
  }
  if (s->mode == RM_NEAREST) {
    Gather g = {s, dt, cpu_host->tensor_data(xt), cpu_host->tensor_data(yt), rank, ax};
    cpu_parallel_elements(total, 4 * rank, resize_gather, &g);
    return FLOE_OK;
  }
  /* Two f64 buffers, each large enough for any intermediate shape. */
  int64_t cur[FLOE_MAX_DIMS], biggest = cpu_host->tensor_num_elements(xt), n = biggest;
  memcpy(cur, dims, (size_t)rank * sizeof *cur);
  for (int i = 0; i < rank; i++) {
    if (ax[i].skip || !n) continue;
    n /= cur[i];
    if (ax[i].out > INT64_MAX / 16 / n)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "resizing dim %d to %lld makes too large an intermediate", i,
                                     (long long)ax[i].out);
    n *= ax[i].out;
    cur[i] = ax[i].out;
    if (n > biggest) biggest = n;
  }
  double *buf[2];
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)biggest * sizeof(double), (void **)&buf[0])) !=
          FLOE_OK ||
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)biggest * sizeof(double), (void **)&buf[1])) !=
          FLOE_OK)
    return rc;
  cpu_to_f64(dt, cpu_host->tensor_data(xt), buf[0], cpu_host->tensor_num_elements(xt));
  memcpy(cur, dims, (size_t)rank * sizeof *cur);
  int b = 0;
  for (int i = 0; i < rank; i++) {
    if (ax[i].skip) continue;
    int64_t outer = 1, inner = 1;
    for (int j = 0; j < i; j++) outer *= cur[j];
    for (int j = i + 1; j < rank; j++) inner *= cur[j];
    Pass p = {s, &ax[i], buf[b], buf[1 - b], inner};
    cpu_parallel_for(outer * ax[i].out, 2 * ax[i].taps * inner + 4, resize_pass, &p);
    cur[i] = ax[i].out;
    b = 1 - b;
  }
  cpu_from_f64(dt, buf[b], cpu_host->tensor_data(yt), total);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* GridSample. */

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GP_ZEROS, GP_BORDER, GP_REFLECTION };
static const char *const gs_mode_names[] = {"bilinear", "nearest", "bicubic"};
static const char *const gs_pad_names[] = {"zeros", "border", "reflection"};

typedef struct GridState {
  int mode, padding;
  bool align_corners;
} GridState;

static floe_code grid_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  (void)user_data;
  GridState s;
  floe_code rc;
  if ((rc = attr_choice(host, init, "mode", gs_mode_names, 3, &s.mode)) != FLOE_OK ||
      (rc = attr_choice(host, init, "padding_mode", gs_pad_names, 3, &s.padding)) != FLOE_OK)
    return rc;
  s.align_corners = attr_i(host, init, "align_corners", 0) != 0;
  GridState *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *p = s;
  *state = p;
  return FLOE_OK;
}

/* Mirrors x into [lo, hi] (repeatedly, as many times as it takes). */
static double reflect(double x, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    double d = lo - x, n = floor(d / range), r = d - n * range;
    return fmod(n, 2) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    double d = x - hi, n = floor(d / range), r = d - n * range;
    return fmod(n, 2) == 0 ? hi - r : lo + r;
  }
  return x;
}

typedef struct GridImage {
  const double *px; /* [H, W] */
  int64_t h, w;
  int padding;
  double lo[2], hi[2]; /* reflection borders of y, x */
} GridImage;

static double pixel_at(const GridImage *im, int64_t r, int64_t c) {
  if (im->padding == GP_ZEROS) {
    if (r < 0 || r >= im->h || c < 0 || c >= im->w) return 0;
  } else if (im->padding == GP_REFLECTION) {
    r = (int64_t)reflect((double)r, im->lo[0], im->hi[0]);
    c = (int64_t)reflect((double)c, im->lo[1], im->hi[1]);
  }
  r = r < 0 ? 0 : r >= im->h ? im->h - 1 : r;
  c = c < 0 ? 0 : c >= im->w ? im->w - 1 : c;
  return im->px[r * im->w + c];
}

/* The source coordinate (denormalised) of normalised g along a dim of size n, padded
 * except for bicubic, whose taps alone are padded (PyTorch's grid_sample and ONNX Runtime;
 * ONNX's reference implementation clamps a bicubic coordinate for border padding too). */
static double grid_coord(const GridState *s, double g, int64_t n, double lo, double hi) {
  double x = s->align_corners ? (g + 1) / 2 * (double)(n - 1) : ((g + 1) * (double)n - 1) / 2;
  if (s->mode == GS_NEAREST) x = nearbyint(x);
  if (s->mode != GS_BICUBIC && (x < lo || x > hi)) {
    if (s->padding == GP_BORDER) x = x < 0 ? 0 : x > (double)(n - 1) ? (double)(n - 1) : x;
    else if (s->padding == GP_REFLECTION) x = reflect(x, lo, hi);
  }
  return x;
}

/* Far enough outside that every tap is outside too, near enough to convert to int64. */
#define GRID_FAR 1e15

static double grid_sample_at(const GridState *s, const GridImage *im, double y, double x) {
  if (y != y || x != x) return NAN;
  y = y < -GRID_FAR ? -GRID_FAR : y > GRID_FAR ? GRID_FAR : y;
  x = x < -GRID_FAR ? -GRID_FAR : x > GRID_FAR ? GRID_FAR : x;
  if (s->mode == GS_NEAREST) return pixel_at(im, (int64_t)y, (int64_t)x);
  double fy = floor(y), fx = floor(x), ty = y - fy, tx = x - fx;
  int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
  if (s->mode == GS_BILINEAR) {
    double top = (1 - tx) * pixel_at(im, y0, x0) + tx * pixel_at(im, y0, x0 + 1);
    double bot = (1 - tx) * pixel_at(im, y0 + 1, x0) + tx * pixel_at(im, y0 + 1, x0 + 1);
    return (1 - ty) * top + ty * bot;
  }
  double cy[4], cx[4], v = 0;
  cubic_coeffs(ty, -0.75, cy);
  cubic_coeffs(tx, -0.75, cx);
  for (int i = 0; i < 4; i++) {
    double row = 0;
    for (int j = 0; j < 4; j++) row += cx[j] * pixel_at(im, y0 - 1 + i, x0 - 1 + j);
    v += cy[i] * row;
  }
  return v;
}

static floe_code grid_compute(void *state, FloeKernelContext *ctx) {
  const GridState *s = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0), *gt = cpu_host->ctx_input(ctx, 1);
  const int64_t *xd = cpu_host->tensor_dims(xt), *gd = cpu_host->tensor_dims(gt);
  if (cpu_host->tensor_rank(xt) != 4 || cpu_host->tensor_rank(gt) != 4 || gd[3] != 2 ||
      gd[0] != xd[0])
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x must be [N,C,H,W] and grid [N,H_out,W_out,2], got %s and %s",
                                   SHAPE(xt), SHAPE(gt));
  int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], Ho = gd[1], Wo = gd[2];
  int64_t yd[4] = {N, C, Ho, Wo};
  FloeTensor *yt;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 4, yd, &yt);
  if (rc != FLOE_OK || N * C * Ho * Wo == 0) return rc;
  if (H == 0 || W == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "x %s has no pixels to sample",
                                   SHAPE(xt));
  double *x = input_f64(ctx, 0), *g = input_f64(ctx, 1), *y;
  if (!x || !g) return FLOE_NO_MEMORY;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(N * C * Ho * Wo) * sizeof *y, (void **)&y)) !=
      FLOE_OK)
    return rc;
  GridImage im = {.h = H, .w = W, .padding = s->padding};
  im.lo[0] = s->align_corners ? 0 : -0.5, im.hi[0] = s->align_corners ? H - 1 : H - 0.5;
  im.lo[1] = s->align_corners ? 0 : -0.5, im.hi[1] = s->align_corners ? W - 1 : W - 0.5;
  for (int64_t n = 0; n < N; n++)
    for (int64_t p = 0; p < Ho * Wo; p++) {
      const double *gp = g + (n * Ho * Wo + p) * 2;
      double cx = grid_coord(s, gp[0], W, im.lo[1], im.hi[1]);
      double cy = grid_coord(s, gp[1], H, im.lo[0], im.hi[0]);
      for (int64_t c = 0; c < C; c++) {
        im.px = x + (n * C + c) * H * W;
        y[(n * C + c) * Ho * Wo + p] = grid_sample_at(s, &im, cy, cx);
      }
    }
  cpu_from_f64(cpu_host->tensor_dtype(yt), y, cpu_host->tensor_data(yt), N * C * Ho * Wo);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* RoiAlign. */

static const char *const roi_mode_names[] = {"avg", "max"};
static const char *const roi_ctm_names[] = {"half_pixel", "output_half_pixel"};

typedef struct RoiState {
  int max_mode, output_half_pixel;
  int64_t out_h, out_w, sampling_ratio;
  double spatial_scale;
} RoiState;

static floe_code roi_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  (void)user_data;
  RoiState s;
  floe_code rc;
  if ((rc = attr_choice(host, init, "mode", roi_mode_names, 2, &s.max_mode)) != FLOE_OK ||
      (rc = attr_choice(host, init, "coordinate_transformation_mode", roi_ctm_names, 2,
                        &s.output_half_pixel)) != FLOE_OK)
    return rc;
  s.out_h = attr_i(host, init, "output_height", 1);
  s.out_w = attr_i(host, init, "output_width", 1);
  s.sampling_ratio = attr_i(host, init, "sampling_ratio", 0);
  s.spatial_scale = attr_f(host, init, "spatial_scale", 1.0);
  if (s.out_h < 1 || s.out_w < 1 || s.sampling_ratio < 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "output_height %lld, output_width %lld must be >= 1 and "
                                "sampling_ratio %lld >= 0",
                                (long long)s.out_h, (long long)s.out_w,
                                (long long)s.sampling_ratio);
  RoiState *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *p = s;
  *state = p;
  return FLOE_OK;
}

/* One bilinear sample of an [H, W] map: four positions and weights (all 0 outside). */
typedef struct Sample {
  int64_t pos[4];
  double w[4];
} Sample;

static Sample roi_sample(double y, double x, int64_t H, int64_t W) {
  Sample s = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  if (!(y >= -1.0 && y <= (double)H && x >= -1.0 && x <= (double)W)) return s; /* NaN too */
  y = y < 0 ? 0 : y;
  x = x < 0 ? 0 : x;
  int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
  if (yl >= H - 1) yh = yl = H - 1, y = (double)yl;
  else yh = yl + 1;
  if (xl >= W - 1) xh = xl = W - 1, x = (double)xl;
  else xh = xl + 1;
  double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = yl * W + xl, s.pos[1] = yl * W + xh, s.pos[2] = yh * W + xl, s.pos[3] = yh * W + xh;
  s.w[0] = hy * hx, s.w[1] = hy * lx, s.w[2] = ly * hx, s.w[3] = ly * lx;
  return s;
}

/* Most bilinear samples one output bin may take (sampling_ratio 0 on a huge roi). */
#define ROI_MAX_SAMPLES (1 << 24)

/* y [C, oh, ow] of one roi over the maps m [C, H, W]; false when its sampling grid would
 * exceed ROI_MAX_SAMPLES per bin. */
static bool roi_one(const RoiState *s, const double *roi, const double *m, int64_t C, int64_t H,
                    int64_t W, double *y) {
  double off = s->output_half_pixel ? 0 : 0.5;
  double x1 = roi[0] * s->spatial_scale - off, y1 = roi[1] * s->spatial_scale - off;
  double rw = roi[2] * s->spatial_scale - off - x1, rh = roi[3] * s->spatial_scale - off - y1;
  if (s->output_half_pixel) rw = fmax(rw, 1.0), rh = fmax(rh, 1.0);
  double bh = rh / (double)s->out_h, bw = rw / (double)s->out_w;
  double fgh = s->sampling_ratio > 0 ? (double)s->sampling_ratio : ceil(rh / (double)s->out_h);
  double fgw = s->sampling_ratio > 0 ? (double)s->sampling_ratio : ceil(rw / (double)s->out_w);
  fgh = fgh > 0 ? fgh : 0, fgw = fgw > 0 ? fgw : 0; /* NaN: none */
  if (fgh * fgw > ROI_MAX_SAMPLES) return false;
  int64_t gh = (int64_t)fgh, gw = (int64_t)fgw;
  double count = gh * gw > 1 ? (double)(gh * gw) : 1;
  for (int64_t ph = 0; ph < s->out_h; ph++)
    for (int64_t pw = 0; pw < s->out_w; pw++)
      for (int64_t c = 0; c < C; c++) {
        const double *mc = m + c * H * W;
        double acc = 0;
        bool first = true;
        for (int64_t iy = 0; iy < gh; iy++) {
          double sy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
          for (int64_t ix = 0; ix < gw; ix++) {
            double sx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
            Sample sm = roi_sample(sy, sx, H, W);
            if (!s->max_mode) {
              for (int k = 0; k < 4; k++) acc += sm.w[k] * mc[sm.pos[k]];
              continue;
            }
            double v = sm.w[0] * mc[sm.pos[0]];
            for (int k = 1; k < 4; k++) v = fmax(v, sm.w[k] * mc[sm.pos[k]]);
            acc = first ? v : fmax(acc, v);
            first = false;
          }
        }
        y[(c * s->out_h + ph) * s->out_w + pw] = s->max_mode ? acc : acc / count;
      }
  return true;
}

static floe_code roi_compute(void *state, FloeKernelContext *ctx) {
  const RoiState *s = state;
  const FloeTensor *xt = cpu_host->ctx_input(ctx, 0), *rt = cpu_host->ctx_input(ctx, 1),
                   *bt = cpu_host->ctx_input(ctx, 2);
  const int64_t *xd = cpu_host->tensor_dims(xt), *rd = cpu_host->tensor_dims(rt);
  if (cpu_host->tensor_rank(xt) != 4 || cpu_host->tensor_rank(rt) != 2 || rd[1] != 4 ||
      cpu_host->tensor_rank(bt) != 1 || cpu_host->tensor_dims(bt)[0] != rd[0])
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x must be [N,C,H,W], rois [num_rois,4] and batch_indices "
                                   "[num_rois], got %s, %s and %s",
                                   SHAPE(xt), SHAPE(rt), SHAPE(bt));
  int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], R = rd[0];
  int64_t yd[4] = {R, C, s->out_h, s->out_w};
  FloeTensor *yt;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 4, yd, &yt);
  int64_t per = C * s->out_h * s->out_w;
  if (rc != FLOE_OK || R * per == 0) return rc;
  const void *bi = cpu_host->tensor_data(bt);
  bool i32 = cpu_host->tensor_dtype(bt) == FLOE_I32;
  for (int64_t r = 0; r < R; r++) {
    int64_t b = i32 ? ((const int32_t *)bi)[r] : ((const int64_t *)bi)[r];
    if (b < 0 || b >= N)
      return cpu_host->ctx_set_error(ctx, FLOE_OUT_OF_RANGE,
                                     "batch_indices[%lld] = %lld is outside x's batch of %lld",
                                     (long long)r, (long long)b, (long long)N);
  }
  if (H == 0 || W == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "x %s has no pixels", SHAPE(xt));
  double *x = input_f64(ctx, 0), *rois = input_f64(ctx, 1), *y;
  if (!x || !rois) return FLOE_NO_MEMORY;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(R * per) * sizeof *y, (void **)&y)) != FLOE_OK)
    return rc;
  for (int64_t r = 0; r < R; r++) {
    int64_t b = i32 ? ((const int32_t *)bi)[r] : ((const int64_t *)bi)[r];
    if (!roi_one(s, rois + 4 * r, x + b * C * H * W, C, H, W, y + r * per))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "roi %lld (%g, %g, %g, %g) would take more than %d samples "
                                     "per output bin (set sampling_ratio)",
                                     (long long)r, rois[4 * r], rois[4 * r + 1], rois[4 * r + 2],
                                     rois[4 * r + 3], ROI_MAX_SAMPLES);
  }
  cpu_from_f64(cpu_host->tensor_dtype(yt), y, cpu_host->tensor_data(yt), R * per);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* BatchedNonMaxSuppression. */

typedef struct Box {
  float y0, x0, y1, x1; /* min and max corners */
} Box;

static Box box_of(const float *b, bool center) {
  Box r;
  if (center) {
    r.x0 = b[0] - b[2] / 2, r.x1 = b[0] + b[2] / 2;
    r.y0 = b[1] - b[3] / 2, r.y1 = b[1] + b[3] / 2;
  } else {
    r.y0 = fminf(b[0], b[2]), r.y1 = fmaxf(b[0], b[2]);
    r.x0 = fminf(b[1], b[3]), r.x1 = fmaxf(b[1], b[3]);
  }
  return r;
}

/* Whether b overlaps a by more than thr (boxes of no area never suppress). */
static bool suppresses(const Box *a, const Box *b, float thr) {
  float ix0 = fmaxf(a->x0, b->x0), ix1 = fminf(a->x1, b->x1);
  float iy0 = fmaxf(a->y0, b->y0), iy1 = fminf(a->y1, b->y1);
  if (ix1 <= ix0 || iy1 <= iy0) return false;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  float area_a = (a->x1 - a->x0) * (a->y1 - a->y0), area_b = (b->x1 - b->x0) * (b->y1 - b->y0);
  float uni = area_a + area_b - inter;
  if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > thr;
}

typedef struct Cand {
  float score;
  int64_t index;
} Cand;

static int cand_order(const void *pa, const void *pb) {
  const Cand *a = pa, *b = pb;
  bool an = a->score != a->score, bn = b->score != b->score; /* NaN scores go last */
  if (an != bn) return an ? 1 : -1;
  if (!an && a->score != b->score) return a->score > b->score ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* An optional scalar input: false when empty; records an error for more than one value. */
static floe_code optional_scalar(FloeKernelContext *ctx, int i, const char *name, bool *given,
                                 double *v) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  int64_t n = cpu_host->tensor_num_elements(t);
  *given = n > 0;
  if (n > 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must hold one value (or none), got shape %s", name,
                                   SHAPE(t));
  if (n == 1) *v = load_f64(cpu_host->tensor_dtype(t), cpu_host->tensor_data(t), 0);
  return FLOE_OK;
}

static floe_code nms_compute(void *state, FloeKernelContext *ctx) {
  bool center = *(const int64_t *)state != 0;
  const FloeTensor *bt = cpu_host->ctx_input(ctx, 0), *st = cpu_host->ctx_input(ctx, 1);
  const int64_t *bd = cpu_host->tensor_dims(bt), *sd = cpu_host->tensor_dims(st);
  if (cpu_host->tensor_rank(bt) != 3 || cpu_host->tensor_rank(st) != 3 || bd[2] != 4 ||
      bd[0] != sd[0] || bd[1] != sd[2])
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "boxes must be [batch,boxes,4] and scores "
                                   "[batch,classes,boxes], got %s and %s",
                                   SHAPE(bt), SHAPE(st));
  bool has_max, has_iou, has_thr;
  double max_out = 0, iou = 0, thr = 0;
  floe_code rc;
  if ((rc = optional_scalar(ctx, 2, "max_output_boxes_per_class", &has_max, &max_out)) != FLOE_OK ||
      (rc = optional_scalar(ctx, 3, "iou_threshold", &has_iou, &iou)) != FLOE_OK ||
      (rc = optional_scalar(ctx, 4, "score_threshold", &has_thr, &thr)) != FLOE_OK)
    return rc;
  if (has_iou && (iou < 0 || iou > 1))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "iou_threshold %g is outside [0, 1]", iou);
  int64_t B = bd[0], NB = bd[1], NC = sd[1];
  int64_t limit = max_out >= (double)NB ? NB : max_out > 0 ? (int64_t)max_out : 0;
  /* Selected triples, at most B * NC * limit; candidates and boxes of one class. */
  int64_t cap = B * NC * limit;
  int64_t *sel;
  Cand *cand;
  Box *boxes, *kept;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(cap > 0 ? cap : 1) * 3 * sizeof *sel,
                                        (void **)&sel)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(NB > 0 ? NB : 1) * sizeof *cand,
                                        (void **)&cand)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(NB > 0 ? NB : 1) * sizeof *boxes,
                                        (void **)&boxes)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(NB > 0 ? NB : 1) * sizeof *kept,
                                        (void **)&kept)) != FLOE_OK)
    return rc;
  const float *bx = cpu_host->tensor_data(bt), *sc = cpu_host->tensor_data(st);
  int64_t k = 0;
  for (int64_t b = 0; b < B && limit > 0; b++) {
    for (int64_t i = 0; i < NB; i++) boxes[i] = box_of(bx + (b * NB + i) * 4, center);
    for (int64_t c = 0; c < NC; c++) {
      const float *s = sc + (b * NC + c) * NB;
      int64_t nc = 0, nk = 0;
      for (int64_t i = 0; i < NB; i++)
        if (!has_thr || s[i] > (float)thr) cand[nc++] = (Cand){s[i], i};
      qsort(cand, (size_t)nc, sizeof *cand, cand_order);
      for (int64_t i = 0; i < nc && nk < limit; i++) {
        const Box *bi = &boxes[cand[i].index];
        bool drop = false;
        for (int64_t j = 0; j < nk && !drop; j++) drop = suppresses(&kept[j], bi, (float)iou);
        if (drop) continue;
        kept[nk++] = *bi;
        sel[3 * k] = b, sel[3 * k + 1] = c, sel[3 * k + 2] = cand[i].index;
        k++;
      }
    }
  }
  int64_t yd[2] = {k, 3};
  FloeTensor *yt;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 2, yd, &yt)) != FLOE_OK) return rc;
  if (k) memcpy(cpu_host->tensor_data(yt), sel, (size_t)k * 3 * sizeof *sel);
  return FLOE_OK;
}

static floe_code nms_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  (void)user_data;
  int64_t *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *p = attr_i(host, init, "center_point_box", 0);
  if (*p != 0 && *p != 1) {
    int64_t v = *p;
    host->free(p);
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "center_point_box %lld (0 or 1)",
                                (long long)v);
  }
  *state = p;
  return FLOE_OK;
}

floe_code cpu_register_resize(FloePluginRegistrar *reg) {
  floe_code rc;
  if ((rc = cpu_add_kernel(reg, "Resize", "T", FLOE_DTYPES_NUMERIC, 0, resize_compute,
                           resize_create, state_free, NULL)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "GridSample", "T", FLOE_DTYPES_FLOAT, 0, grid_compute,
                           grid_create, state_free, NULL)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "RoiAlign", "T", FLOE_DTYPES_FLOAT, 0, roi_compute, roi_create,
                           state_free, NULL)) != FLOE_OK ||
      (rc = cpu_add_kernel(reg, "BatchedNonMaxSuppression", NULL, 0, 0, nms_compute, nms_create,
                           state_free, NULL)) != FLOE_OK)
    return rc;
  return FLOE_OK;
}
