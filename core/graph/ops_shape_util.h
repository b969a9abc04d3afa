/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_util.h - helpers of the standard set's shape functions (named in ops_std.def):
 * failing with a message, attributes, constant inputs read at build time, axes,
 * broadcasting. Static inline, so each file calls them by their short names. Graph-private:
 * included by ops_shape_math.c, _nn.c, _array.c, _train.c, _tensor_array.c and _data.c. */
#ifndef FLOE_OPS_SHAPE_UTIL_H
#define FLOE_OPS_SHAPE_UTIL_H

#include <stdio.h>
#include <string.h>

#include "graph.h"

/* A temporary "[2,?,3]" for messages; lives until the end of the enclosing block. */
#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)
#define INTS_STR(v, n) ints_str((v), (n), (char[160]){0}, 160)

/* Longest constant vector read from an input (StridedSlice specs may add axes). */
#define MAX_VEC 32

static inline floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) FLOE__PRINTF(2, 3);

static inline floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe_code c = floe__status_vset(sctx->status, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return c;
}

static inline char *ints_str(const int64_t *v, int n, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)v[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

static inline const char *op_name(const FloeShapeContext *sctx) { return sctx->node->op->name; }

static inline FloeShape unknown_rank(void) { return floe_shape_unknown(); }

/* Rank r with every dim unknown (r < 0: unknown rank). */
static inline FloeShape unknown_dims(int r) {
  FloeShape s = floe_shape_unknown();
  if (r < 0) return s;
  s.rank = r;
  for (int i = 0; i < r; i++) s.dims[i] = FLOE_DIM_UNKNOWN;
  return s;
}

static inline bool fully_known(const FloeShape *s) {
  if (s->rank < 0) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

static inline void set_all_outputs(FloeShapeContext *sctx, FloeShape s) {
  for (int i = 0; i < sctx->node->num_outputs; i++) sctx->output_shapes[i] = s;
}

/* Merge two sizes of what must be one dimension; false when both are known and differ. */
static inline bool merge_dim(int64_t a, int64_t b, int64_t *out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

/* ---- attributes (the graph fills defaults, so absence means a malformed node) ---- */

static inline const FloeAttrValue *attr_of(const FloeShapeContext *sctx, const char *name,
                                    FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

static inline int64_t attr_int(const FloeShapeContext *sctx, const char *name, int64_t dflt) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_INT);
  return v ? v->u.i : dflt;
}

static inline bool attr_bool(const FloeShapeContext *sctx, const char *name) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_BOOL);
  return v && v->u.b;
}

static inline const char *attr_string(const FloeShapeContext *sctx, const char *name,
                               const char *dflt) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_STRING);
  return v ? v->u.s : dflt;
}

/* ---- constant inputs ---- */

static inline const FloeNode *producer(const FloeShapeContext *sctx, int i) {
  return sctx->node->inputs[i].node;
}

/* The value of input i when it comes from a Const node (host memory), else NULL. */
static inline const FloeTensor *const_input(const FloeShapeContext *sctx, int i) {
  const FloeNode *src = producer(sctx, i);
  if (!src || !src->op || strcmp(src->op->name, "Const") != 0) return NULL;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || !floe__tensor_on_host(v->u.tensor))
    return NULL;
  return v->u.tensor;
}

/* Elements of an integer tensor as int64 (at most max); false for other dtypes or more. */
static inline bool tensor_ints(const FloeTensor *t, int64_t *out, int64_t max, int64_t *n) {
  int64_t count = t->num_elements;
  if (count > max) return false;
  const void *data = floe_tensor_data(t);
  for (int64_t i = 0; i < count; i++) {
    switch (t->dtype) {
      case FLOE_I32: out[i] = ((const int32_t *)data)[i]; break;
      case FLOE_I64: out[i] = ((const int64_t *)data)[i]; break;
      case FLOE_I8: out[i] = ((const int8_t *)data)[i]; break;
      case FLOE_U8: out[i] = ((const uint8_t *)data)[i]; break;
      default: return false;
    }
  }
  *n = count;
  return true;
}

/* A constant scalar (rank 0 or one element) integer input. */
static inline bool const_scalar(const FloeShapeContext *sctx, int i, int64_t *out) {
  const FloeTensor *t = const_input(sctx, i);
  int64_t n;
  return t && t->num_elements == 1 && tensor_ints(t, out, 1, &n);
}

/* A constant 1-D integer input: *n values into v (at most MAX_VEC). Errors when the
 * constant is not a vector; returns false in *known when the input is not a constant. */
static inline floe_code const_vector(FloeShapeContext *sctx, int i, const char *what, int64_t *v,
                              int *n, bool *known) {
  *known = false;
  const FloeTensor *t = const_input(sctx, i);
  if (!t) return FLOE_OK;
  FloeShape s = floe_tensor_shape(t);
  if (t->rank != 1) return fail(sctx, "%s must be a 1-D tensor, got shape %s", what, SHAPE_STR(s));
  int64_t count;
  if (!tensor_ints(t, v, MAX_VEC, &count))
    return fail(sctx, "%s must be an integer vector of at most %d elements, got %s%s", what,
                MAX_VEC, floe_dtype_name(t->dtype), SHAPE_STR(s));
  *n = (int)count;
  *known = true;
  return FLOE_OK;
}

/* Length of a 1-D input from its shape (-1 if unknown); errors when its rank is not 1. */
static inline floe_code vector_len(FloeShapeContext *sctx, int i, const char *what, int64_t *len) {
  const FloeShape *s = &sctx->input_shapes[i];
  *len = -1;
  if (s->rank < 0) return FLOE_OK;
  if (s->rank != 1) return fail(sctx, "%s must be a 1-D tensor, got shape %s", what, SHAPE_STR(*s));
  *len = s->dims[0];
  return FLOE_OK;
}

/* A 1-D integer input read as a shape: a Const gives its values as written (negative ones
 * included: Reshape's -1, or an error for the caller to report), *is_const = true; a Shape
 * node gives its input's shape (unknown dims -1); anything else gives its length only.
 * out->rank < 0 when even the length is unknown. */
static inline floe_code shape_vector_input(FloeShapeContext *sctx, int i, const char *what,
                                    FloeShape *out, bool *is_const) {
  int64_t v[MAX_VEC], len;
  int n;
  bool known;
  *is_const = false;
  floe_code c = const_vector(sctx, i, what, v, &n, &known);
  if (c != FLOE_OK) return c;
  if (known) {
    if (n > FLOE_MAX_DIMS)
      return fail(sctx, "%s %s has %d elements; at most %d dimensions are supported", what,
                  INTS_STR(v, n), n, FLOE_MAX_DIMS);
    out->rank = n;
    for (int k = 0; k < n; k++) out->dims[k] = v[k];
    *is_const = true;
    return FLOE_OK;
  }
  const FloeNode *src = producer(sctx, i);
  if (src && src->op && strcmp(src->op->name, "Shape") == 0 && src->num_inputs == 1) {
    const FloeOutput *in = &src->inputs[0];
    *out = in->node->out_shapes[in->index];
    if (out->rank >= 0) return FLOE_OK;
  }
  if ((c = vector_len(sctx, i, what, &len)) != FLOE_OK) return c;
  if (len > FLOE_MAX_DIMS)
    return fail(sctx, "%s has %lld elements; at most %d dimensions are supported", what,
                (long long)len, FLOE_MAX_DIMS);
  *out = unknown_dims((int)len);
  return FLOE_OK;
}

/* An axis in [-rank, rank) made non-negative. */
static inline floe_code norm_axis(FloeShapeContext *sctx, int64_t axis, int rank, const char *what,
                           const FloeShape *shape, int *out) {
  if (axis < -rank || axis >= rank)
    return fail(sctx, "%s %lld is out of range for a tensor of rank %d (shape %s); use a value "
                      "in [%d, %d)", what, (long long)axis, rank, SHAPE_STR(*shape), -rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return FLOE_OK;
}

/* NumPy broadcasting of a and b. */
static inline floe_code broadcast2(FloeShapeContext *sctx, const FloeShape *a, const FloeShape *b,
                            FloeShape *out) {
  if (a->rank < 0 || b->rank < 0) {
    *out = unknown_rank();
    return FLOE_OK;
  }
  int r = a->rank > b->rank ? a->rank : b->rank;
  FloeShape s = unknown_dims(r);
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t x = ia >= 0 ? a->dims[ia] : 1, y = ib >= 0 ? b->dims[ib] : 1;
    if (x >= 0 && y >= 0) {
      if (x != y && x != 1 && y != 1)
        return fail(sctx, "Incompatible shapes for broadcasting: %s vs %s", SHAPE_STR(*a),
                    SHAPE_STR(*b));
      s.dims[i] = x == 1 ? y : x;
    } else if (x < 0 && y < 0) {
      s.dims[i] = FLOE_DIM_UNKNOWN;
    } else {
      /* One unknown: a known size other than 1 decides; a 1 leaves the other's size. */
      int64_t known = x >= 0 ? x : y;
      s.dims[i] = known == 1 ? FLOE_DIM_UNKNOWN : known;
    }
  }
  *out = s;
  return FLOE_OK;
}

/* data_format attribute: false for NHWC, true for NCHW. */
static inline floe_code data_format(FloeShapeContext *sctx, bool *nchw) {
  const char *df = attr_string(sctx, "data_format", "NHWC");
  if (strcmp(df, "NHWC") != 0 && strcmp(df, "NCHW") != 0)
    return fail(sctx, "attribute 'data_format' must be NHWC or NCHW, got '%s'", df);
  *nchw = df[1] == 'C';
  return FLOE_OK;
}

/* Product of the known dims of s (unknown ones skipped); false on overflow. */
static inline bool known_product(const FloeShape *s, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] >= 0 && __builtin_mul_overflow(p, s->dims[i], &p)) return false;
  *out = p;
  return true;
}

/* A shape given as a 1-D input whose known entries must be sizes (>= 0). */
static inline floe_code shape_from_input(FloeShapeContext *sctx, int i, const char *what,
                                  FloeShape *out) {
  bool is_const;
  floe_code c = shape_vector_input(sctx, i, what, out, &is_const);
  if (c != FLOE_OK) return c;
  for (int k = 0; is_const && k < out->rank; k++)
    if (out->dims[k] < 0)
      return fail(sctx, "%s %s must hold sizes >= 0", what, INTS_STR(out->dims, out->rank));
  return FLOE_OK;
}

/* a and b may describe one tensor: ranks and known dims agree. */
static inline bool shapes_compatible(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return false;
  return true;
}

#endif /* FLOE_OPS_SHAPE_UTIL_H */
