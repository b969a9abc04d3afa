/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_index.c - shape functions of the indexing ops (ops_index.def).
 *
 * As in ops_shape_*.c: unknown dims and ranks propagate, only definite mismatches are errors,
 * and index-valued inputs that come from a Const are read to resolve the output. Ops whose
 * result size depends on the values (NonZero, Unique) give unknown dims there.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

/* Longest constant vector read from an input. */
#define MAX_VEC 64

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) FLOE__PRINTF(2, 3);

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe_code c = floe__status_vset(sctx->status, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return c;
}

static const char *op_name(const FloeShapeContext *sctx) { return sctx->node->op->name; }

static FloeShape unknown_dims(int r) {
  FloeShape s = floe_shape_unknown();
  if (r < 0) return s;
  s.rank = r;
  for (int i = 0; i < r; i++) s.dims[i] = FLOE_DIM_UNKNOWN;
  return s;
}

static int64_t attr_int(const FloeShapeContext *sctx, const char *name, int64_t dflt) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  return v && v->kind == FLOE_ATTR_INT ? v->u.i : dflt;
}

/* Input i's values as int64 when it is an integer Const of at most max elements: the count,
 * else -1. */
static int const_ints(const FloeShapeContext *sctx, int i, int64_t *out, int max) {
  const FloeNode *src = sctx->node->inputs[i].node;
  if (!src || !src->op || strcmp(src->op->name, "Const") != 0) return -1;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || !floe__tensor_on_host(v->u.tensor))
    return -1;
  const FloeTensor *t = v->u.tensor;
  if (t->num_elements > max) return -1;
  const void *d = floe_tensor_data(t);
  for (int64_t k = 0; k < t->num_elements; k++) {
    switch (t->dtype) {
      case FLOE_I32: out[k] = ((const int32_t *)d)[k]; break;
      case FLOE_I64: out[k] = ((const int64_t *)d)[k]; break;
      default: return -1;
    }
  }
  return (int)t->num_elements;
}

/* A Const's floating or integer scalar as a double (Range's bounds). */
static bool const_number(const FloeShapeContext *sctx, int i, double *out) {
  const FloeNode *src = sctx->node->inputs[i].node;
  if (!src || !src->op || strcmp(src->op->name, "Const") != 0) return false;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || !floe__tensor_on_host(v->u.tensor) ||
      v->u.tensor->num_elements != 1)
    return false;
  const void *d = floe_tensor_data(v->u.tensor);
  switch (v->u.tensor->dtype) {
    case FLOE_F32: *out = *(const float *)d; return true;
    case FLOE_F64: *out = *(const double *)d; return true;
    case FLOE_I8: *out = *(const int8_t *)d; return true;
    case FLOE_I32: *out = *(const int32_t *)d; return true;
    case FLOE_I64: *out = (double)*(const int64_t *)d; return true;
    default: return false;
  }
}

static floe_code norm_axis(FloeShapeContext *sctx, int64_t axis, const FloeShape *in,
                           const char *what, int *out) {
  *out = 0;
  if (axis < -in->rank || axis >= in->rank)
    return fail(sctx, "%s %s %lld is out of range for an input of shape %s; use a value in "
                      "[%d, %d)", op_name(sctx), what, (long long)axis, SHAPE_STR(*in),
                -in->rank, in->rank);
  *out = (int)(axis < 0 ? axis + in->rank : axis);
  return FLOE_OK;
}

/* The length of a 1-D input (-1 unknown); an error when it is known not to be 1-D. */
static floe_code vector_len(FloeShapeContext *sctx, int i, const char *what, int64_t *len) {
  const FloeShape *s = &sctx->input_shapes[i];
  *len = -1;
  if (s->rank < 0) return FLOE_OK;
  if (s->rank != 1)
    return fail(sctx, "%s %s must be a 1-D tensor, got shape %s", op_name(sctx), what,
                SHAPE_STR(*s));
  *len = s->dims[0];
  return FLOE_OK;
}

/* ---- gathers and scatters ---- */

floe_code floe__shape_gather_elements(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *d = &sctx->input_shapes[0], *idx = &sctx->input_shapes[1];
  if (d->rank == 0) return fail(sctx, "GatherElements data must have rank >= 1, got a scalar");
  if (d->rank > 0) {
    int a;
    floe_code c = norm_axis(sctx, attr_int(sctx, "axis", 0), d, "axis", &a);
    if (c != FLOE_OK) return c;
    if (idx->rank >= 0 && idx->rank != d->rank)
      return fail(sctx, "GatherElements indices %s must have the rank of data %s",
                  SHAPE_STR(*idx), SHAPE_STR(*d));
  }
  sctx->output_shapes[0] = idx->rank >= 0 ? *idx : unknown_dims(d->rank);
  return FLOE_OK;
}

floe_code floe__shape_scatter(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *d = &sctx->input_shapes[0], *idx = &sctx->input_shapes[1],
                  *up = &sctx->input_shapes[2];
  bool elements = strcmp(op_name(sctx), "ScatterElements") == 0;
  if (elements) {
    if (d->rank == 0) return fail(sctx, "ScatterElements data must have rank >= 1");
    if (d->rank > 0) {
      int a;
      floe_code c = norm_axis(sctx, attr_int(sctx, "axis", 0), d, "axis", &a);
      if (c != FLOE_OK) return c;
    }
    bool bad = (d->rank >= 0 && idx->rank >= 0 && d->rank != idx->rank) ||
               (idx->rank >= 0 && up->rank >= 0 && idx->rank != up->rank);
    for (int i = 0; !bad && idx->rank >= 0 && up->rank == idx->rank && i < idx->rank; i++)
      bad = idx->dims[i] >= 0 && up->dims[i] >= 0 && idx->dims[i] != up->dims[i];
    if (bad)
      return fail(sctx, "ScatterElements indices %s and updates %s must have one shape, of "
                        "the rank of data %s", SHAPE_STR(*idx), SHAPE_STR(*up), SHAPE_STR(*d));
  } else if (idx->rank == 0) {
    return fail(sctx, "ScatterND indices must have rank >= 1, got a scalar");
  } else if (idx->rank > 0 && d->rank >= 0 && idx->dims[idx->rank - 1] >= 0) {
    int64_t q = idx->dims[idx->rank - 1];
    if (q > d->rank)
      return fail(sctx, "ScatterND indices %s address %lld dims of data %s", SHAPE_STR(*idx),
                  (long long)q, SHAPE_STR(*d));
    if (up->rank >= 0 && up->rank != idx->rank - 1 + d->rank - q)
      return fail(sctx, "ScatterND updates %s must have rank %lld for indices %s and data %s",
                  SHAPE_STR(*up), (long long)(idx->rank - 1 + d->rank - q), SHAPE_STR(*idx),
                  SHAPE_STR(*d));
  }
  sctx->output_shapes[0] = *d;
  return FLOE_OK;
}

floe_code floe__shape_gather_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *d = &sctx->input_shapes[0], *idx = &sctx->input_shapes[1];
  int64_t b = attr_int(sctx, "batch_dims", 0);
  if (b < 0) return fail(sctx, "GatherND batch_dims must be >= 0, got %lld", (long long)b);
  if (idx->rank == 0) return fail(sctx, "GatherND indices must have rank >= 1, got a scalar");
  if (d->rank < 0 || idx->rank < 0 || idx->dims[idx->rank - 1] < 0) {
    sctx->output_shapes[0] = floe_shape_unknown();
    return FLOE_OK;
  }
  int64_t q = idx->dims[idx->rank - 1];
  if (b >= idx->rank || b >= d->rank || b + q > d->rank)
    return fail(sctx, "GatherND of data %s by indices %s with batch_dims %lld: batch_dims must "
                      "be below both ranks and batch_dims + indices' last dim at most data's "
                      "rank", SHAPE_STR(*d), SHAPE_STR(*idx), (long long)b);
  int r = idx->rank - 1 + d->rank - (int)(b + q);
  if (r > FLOE_MAX_DIMS)
    return fail(sctx, "GatherND result would have rank %d (more than %d)", r, FLOE_MAX_DIMS);
  FloeShape out = unknown_dims(r);
  int k = 0;
  for (int i = 0; i < idx->rank - 1; i++) {
    out.dims[k] = idx->dims[i];
    if (i < b && out.dims[k] < 0) out.dims[k] = d->dims[i];
    k++;
  }
  for (int i = (int)(b + q); i < d->rank; i++) out.dims[k++] = d->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* ---- sequences ---- */

floe_code floe__shape_range(const FloeHostApi *host, FloeShapeContext *sctx) {
  for (int i = 0; i < 3; i++)
    if (sctx->input_shapes[i].rank > 0)
      return fail(sctx, "Range inputs must be scalars, got input %d of shape %s", i,
                  SHAPE_STR(sctx->input_shapes[i]));
  FloeShape out = unknown_dims(1);
  double s, l, d;
  if (const_number(sctx, 0, &s) && const_number(sctx, 1, &l) && const_number(sctx, 2, &d)) {
    if (d == 0) return fail(sctx, "Range delta must not be 0");
    double n = ceil((l - s) / d);
    out.dims[0] = n > 0 ? (int64_t)n : 0;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* ---- value-dependent sizes ---- */

floe_code floe__shape_non_zero(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  FloeShape out = unknown_dims(2);
  if (x->rank >= 0) out.dims[0] = x->rank ? x->rank : 1;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_top_k(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0], *ks = &sctx->input_shapes[1];
  if (ks->rank > 1 || (ks->rank == 1 && ks->dims[0] >= 0 && ks->dims[0] != 1))
    return fail(sctx, "TopK k must be a scalar or a 1-element vector, got shape %s",
                SHAPE_STR(*ks));
  if (x->rank == 0) return fail(sctx, "TopK input must have rank >= 1, got a scalar");
  FloeShape out = *x;
  if (x->rank > 0) {
    int a;
    floe_code c = norm_axis(sctx, attr_int(sctx, "axis", -1), x, "axis", &a);
    if (c != FLOE_OK) return c;
    int64_t k;
    out.dims[a] = FLOE_DIM_UNKNOWN;
    if (const_ints(sctx, 1, &k, 1) == 1) {
      if (k < 0 || (x->dims[a] >= 0 && k > x->dims[a]))
        return fail(sctx, "TopK k = %lld is outside [0, %lld] for input %s", (long long)k,
                    (long long)x->dims[a], SHAPE_STR(*x));
      out.dims[a] = k;
    }
  }
  sctx->output_shapes[0] = sctx->output_shapes[1] = out;
  return FLOE_OK;
}

floe_code floe__shape_unique(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  FloeShape y = *x, inv = unknown_dims(1);
  if (x->rank == 0) return fail(sctx, "Unique input must have rank >= 1, got a scalar");
  if (x->rank > 0) {
    int a;
    floe_code c = norm_axis(sctx, attr_int(sctx, "axis", 0), x, "axis", &a);
    if (c != FLOE_OK) return c;
    inv.dims[0] = x->dims[a];
    y.dims[a] = FLOE_DIM_UNKNOWN;
  }
  sctx->output_shapes[0] = y;
  sctx->output_shapes[1] = sctx->output_shapes[3] = unknown_dims(1);
  sctx->output_shapes[2] = inv;
  return FLOE_OK;
}

/* ---- slicing and reshaping by run-time values ---- */

/* One ONNX Slice axis: the number of elements taken from a dim of size dim. */
static int64_t slice_count(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    return end > start ? (end - start + step - 1) / step : 0;
  }
  start = start < 0 ? -1 : start > dim - 1 ? dim - 1 : start;
  end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
  return start > end ? (start - end + (-step) - 1) / (-step) : 0;
}

floe_code floe__shape_slice_axes(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  const char *names[4] = {"starts", "ends", "axes", "steps"};
  int64_t len[4], v[4][MAX_VEC];
  int known[4];
  for (int i = 0; i < 4; i++) {
    floe_code c = vector_len(sctx, i + 1, names[i], &len[i]);
    if (c != FLOE_OK) return c;
    if (i && len[i] >= 0 && len[0] >= 0 && len[i] != len[0])
      return fail(sctx, "SliceAxes %s has %lld values and starts %lld: they must be equally long",
                  names[i], (long long)len[i], (long long)len[0]);
    known[i] = const_ints(sctx, i + 1, v[i], MAX_VEC);
  }
  if (x->rank < 0) {
    sctx->output_shapes[0] = *x;
    return FLOE_OK;
  }
  if (x->rank == 0) return fail(sctx, "SliceAxes input must have rank >= 1, got a scalar");
  FloeShape out = *x;
  if (known[2] < 0) {
    sctx->output_shapes[0] = unknown_dims(x->rank);
    return FLOE_OK;
  }
  for (int i = 0; i < known[2]; i++) {
    int a;
    floe_code c = norm_axis(sctx, v[2][i], x, "axes entry", &a);
    if (c != FLOE_OK) return c;
    bool all = known[0] > i && known[1] > i && known[3] > i;
    if (all && v[3][i] == 0) return fail(sctx, "SliceAxes steps[%d] is 0", i);
    out.dims[a] = all && x->dims[a] >= 0 ? slice_count(x->dims[a], v[0][i], v[1][i], v[3][i])
                                         : FLOE_DIM_UNKNOWN;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_squeeze_axes(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  int64_t len, axes[MAX_VEC];
  floe_code c = vector_len(sctx, 1, "axes", &len);
  if (c != FLOE_OK) return c;
  int n = const_ints(sctx, 1, axes, MAX_VEC);
  if (len == 0 && x->rank >= 0) { /* every dim of size 1: known only when every dim is */
    FloeShape out = floe_shape_scalar();
    for (int i = 0; i < x->rank; i++) {
      if (x->dims[i] < 0) {
        sctx->output_shapes[0] = floe_shape_unknown();
        return FLOE_OK;
      }
      if (x->dims[i] != 1) out.dims[out.rank++] = x->dims[i];
    }
    sctx->output_shapes[0] = out;
    return FLOE_OK;
  }
  if (x->rank < 0 || len < 0 || len > x->rank) {
    if (x->rank >= 0 && len > x->rank)
      return fail(sctx, "SqueezeAxes of %s: %lld axes for rank %d", SHAPE_STR(*x), (long long)len,
                  x->rank);
    sctx->output_shapes[0] = unknown_dims(x->rank >= 0 && len >= 0 ? x->rank - (int)len : -1);
    return FLOE_OK;
  }
  if (n < 0) {
    sctx->output_shapes[0] = unknown_dims(x->rank - (int)len);
    return FLOE_OK;
  }
  bool drop[FLOE_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if ((c = norm_axis(sctx, axes[i], x, "axes entry", &a)) != FLOE_OK) return c;
    if (drop[a]) return fail(sctx, "SqueezeAxes axis %d is given twice", a);
    if (x->dims[a] >= 0 && x->dims[a] != 1)
      return fail(sctx, "SqueezeAxes cannot remove dim %d of size %lld from %s", a,
                  (long long)x->dims[a], SHAPE_STR(*x));
    drop[a] = true;
  }
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) out.dims[out.rank++] = x->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_unsqueeze_axes(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  int64_t len, axes[MAX_VEC];
  floe_code c = vector_len(sctx, 1, "axes", &len);
  if (c != FLOE_OK) return c;
  if (x->rank < 0 || len < 0) {
    sctx->output_shapes[0] = unknown_dims(x->rank >= 0 && len >= 0 ? x->rank + (int)len : -1);
    return FLOE_OK;
  }
  int r = x->rank + (int)len;
  if (r > FLOE_MAX_DIMS)
    return fail(sctx, "UnsqueezeAxes of %s by %lld axes exceeds %d dimensions", SHAPE_STR(*x),
                (long long)len, FLOE_MAX_DIMS);
  FloeShape out = unknown_dims(r);
  int n = const_ints(sctx, 1, axes, MAX_VEC);
  if (n >= 0) {
    bool ins[FLOE_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
      if (axes[i] < -r || axes[i] >= r)
        return fail(sctx, "UnsqueezeAxes axis %lld is out of range for a result of rank %d",
                    (long long)axes[i], r);
      int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
      if (ins[a]) return fail(sctx, "UnsqueezeAxes axis %d is given twice", a);
      ins[a] = true;
    }
    for (int i = 0, k = 0; i < r; i++) out.dims[i] = ins[i] ? 1 : x->dims[k++];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_split_v(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  int num = sctx->node->num_outputs;
  int64_t len, sizes[MAX_VEC], axis;
  floe_code c = vector_len(sctx, 1, "size_splits", &len);
  if (c != FLOE_OK) return c;
  if (len >= 0 && len != num)
    return fail(sctx, "SplitV size_splits has %lld values for %d outputs", (long long)len, num);
  int a = -1;
  if (x->rank >= 0 && const_ints(sctx, 2, &axis, 1) == 1) {
    if (x->rank == 0) return fail(sctx, "SplitV input must have rank >= 1, got a scalar");
    if ((c = norm_axis(sctx, axis, x, "axis", &a)) != FLOE_OK) return c;
  }
  int n = num <= MAX_VEC ? const_ints(sctx, 1, sizes, MAX_VEC) : -1;
  if (n == num && a >= 0) {
    int64_t sum = 0, rest = -1;
    for (int i = 0; i < n; i++) {
      if (sizes[i] < -1 || (sizes[i] == -1 && rest >= 0))
        return fail(sctx, "SplitV size_splits may hold sizes >= 0 and one -1");
      if (sizes[i] == -1) rest = i; else sum += sizes[i];
    }
    if (x->dims[a] >= 0 && (sum > x->dims[a] || (rest < 0 && sum != x->dims[a])))
      return fail(sctx, "SplitV sizes add up to %lld, not to dim %d of %s", (long long)sum, a,
                  SHAPE_STR(*x));
    if (rest >= 0) sizes[rest] = x->dims[a] >= 0 ? x->dims[a] - sum : FLOE_DIM_UNKNOWN;
  }
  for (int i = 0; i < num; i++) {
    FloeShape o = x->rank >= 0 ? *x : floe_shape_unknown();
    if (x->rank >= 0) {
      for (int k = 0; a < 0 && k < x->rank; k++) o.dims[k] = FLOE_DIM_UNKNOWN;
      if (a >= 0) o.dims[a] = n == num ? sizes[i] : FLOE_DIM_UNKNOWN;
    }
    sctx->output_shapes[i] = o;
  }
  return FLOE_OK;
}
