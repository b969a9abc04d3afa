/* ops_shape.c - shape functions of the standard op set (named in ops_std.def).
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. When
 * an input comes from a Const (or, for shape-valued inputs, from a Shape node) its value
 * is read to resolve the output: Reshape's shape, Transpose's perm, axes, paddings, ...
 */
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

/* A temporary "[2,?,3]" for messages; lives until the end of the enclosing block. */
#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)
#define INTS_STR(v, n) ints_str((v), (n), (char[160]){0}, 160)

/* Longest constant vector read from an input (StridedSlice specs may add axes). */
#define MAX_VEC 32

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) FLOE__PRINTF(2, 3);

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe_code c = floe__status_vset(sctx->status, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return c;
}

static char *ints_str(const int64_t *v, int n, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)v[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

static const char *op_name(const FloeShapeContext *sctx) { return sctx->node->op->name; }

static FloeShape unknown_rank(void) { return floe_shape_unknown(); }

/* Rank r with every dim unknown (r < 0: unknown rank). */
static FloeShape unknown_dims(int r) {
  FloeShape s = floe_shape_unknown();
  if (r < 0) return s;
  s.rank = r;
  for (int i = 0; i < r; i++) s.dims[i] = FLOE_DIM_UNKNOWN;
  return s;
}

static bool fully_known(const FloeShape *s) {
  if (s->rank < 0) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

static void set_all_outputs(FloeShapeContext *sctx, FloeShape s) {
  for (int i = 0; i < sctx->node->num_outputs; i++) sctx->output_shapes[i] = s;
}

/* Merge two sizes of what must be one dimension; false when both are known and differ. */
static bool merge_dim(int64_t a, int64_t b, int64_t *out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

/* ---- attributes (the graph fills defaults, so absence means a malformed node) ---- */

static const FloeAttrValue *attr_of(const FloeShapeContext *sctx, const char *name,
                                    FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

static int64_t attr_int(const FloeShapeContext *sctx, const char *name, int64_t dflt) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_INT);
  return v ? v->u.i : dflt;
}

static bool attr_bool(const FloeShapeContext *sctx, const char *name) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_BOOL);
  return v && v->u.b;
}

static const char *attr_string(const FloeShapeContext *sctx, const char *name,
                               const char *dflt) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_STRING);
  return v ? v->u.s : dflt;
}

/* ---- constant inputs ---- */

static const FloeNode *producer(const FloeShapeContext *sctx, int i) {
  return sctx->node->inputs[i].node;
}

/* The value of input i when it comes from a Const node (host memory), else NULL. */
static const FloeTensor *const_input(const FloeShapeContext *sctx, int i) {
  const FloeNode *src = producer(sctx, i);
  if (!src || !src->op || strcmp(src->op->name, "Const") != 0) return NULL;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor || !floe__tensor_on_host(v->u.tensor))
    return NULL;
  return v->u.tensor;
}

/* Elements of an integer tensor as int64 (at most max); false for other dtypes or more. */
static bool tensor_ints(const FloeTensor *t, int64_t *out, int64_t max, int64_t *n) {
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
static bool const_scalar(const FloeShapeContext *sctx, int i, int64_t *out) {
  const FloeTensor *t = const_input(sctx, i);
  int64_t n;
  return t && t->num_elements == 1 && tensor_ints(t, out, 1, &n);
}

/* A constant 1-D integer input: *n values into v (at most MAX_VEC). Errors when the
 * constant is not a vector; returns false in *known when the input is not a constant. */
static floe_code const_vector(FloeShapeContext *sctx, int i, const char *what, int64_t *v,
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
static floe_code vector_len(FloeShapeContext *sctx, int i, const char *what, int64_t *len) {
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
static floe_code shape_vector_input(FloeShapeContext *sctx, int i, const char *what,
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
static floe_code norm_axis(FloeShapeContext *sctx, int64_t axis, int rank, const char *what,
                           const FloeShape *shape, int *out) {
  if (axis < -rank || axis >= rank)
    return fail(sctx, "%s %lld is out of range for a tensor of rank %d (shape %s); use a value "
                      "in [%d, %d)", what, (long long)axis, rank, SHAPE_STR(*shape), -rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return FLOE_OK;
}

/* ---- sources and element-wise ---- */

floe_code floe__shape_const(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "value", FLOE_ATTR_TENSOR);
  sctx->output_shapes[0] = v && v->u.tensor ? floe_tensor_shape(v->u.tensor) : unknown_rank();
  return FLOE_OK;
}

floe_code floe__shape_placeholder(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "shape", FLOE_ATTR_SHAPE);
  sctx->output_shapes[0] = v ? v->u.shape : unknown_rank();
  return FLOE_OK;
}

/* Same shape as input 0; ops with an "axis" (Softmax) also check it against the rank. */
floe_code floe__shape_unchanged(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  const FloeAttrValue *axis = attr_of(sctx, "axis", FLOE_ATTR_INT);
  if (axis && in->rank >= 0) {
    int a;
    if (in->rank == 0)
      return fail(sctx, "%s needs an input of rank >= 1, got a scalar", op_name(sctx));
    floe_code c = norm_axis(sctx, axis->u.i, in->rank, "attribute 'axis'", in, &a);
    if (c != FLOE_OK) return c;
  }
  set_all_outputs(sctx, *in);
  return FLOE_OK;
}

/* NumPy broadcasting of a and b. */
static floe_code broadcast2(FloeShapeContext *sctx, const FloeShape *a, const FloeShape *b,
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

floe_code floe__shape_broadcast_pair(FloeShapeContext *sctx, const FloeShape *a,
                                     const FloeShape *b, FloeShape *out) {
  return broadcast2(sctx, a, b, out);
}

static floe_code broadcast_all(FloeShapeContext *sctx) {
  FloeShape s = sctx->input_shapes[0];
  for (int i = 1; i < sctx->node->num_inputs; i++) {
    floe_code c = broadcast2(sctx, &s, &sctx->input_shapes[i], &s);
    if (c != FLOE_OK) {
      /* Name every input when more than two take part (Select). */
      if (sctx->node->num_inputs > 2) {
        floe__status_prefix(sctx->status, "%s inputs %s, %s, %s", op_name(sctx),
                            SHAPE_STR(sctx->input_shapes[0]), SHAPE_STR(sctx->input_shapes[1]),
                            SHAPE_STR(sctx->input_shapes[2]));
      }
      return c;
    }
  }
  set_all_outputs(sctx, s);
  return FLOE_OK;
}

floe_code floe__shape_broadcast(const FloeHostApi *host, FloeShapeContext *sctx) {
  return broadcast_all(sctx);
}

floe_code floe__shape_select(const FloeHostApi *host, FloeShapeContext *sctx) {
  return broadcast_all(sctx);
}

floe_code floe__shape_scalar(const FloeHostApi *host, FloeShapeContext *sctx) {
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_shape(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t r = sctx->input_shapes[0].rank;
  sctx->output_shapes[0] = floe_shape_make(1, &r);
  return FLOE_OK;
}

/* ---- linear algebra and nn ---- */

floe_code floe__shape_matmul(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *a = &sctx->input_shapes[0], *b = &sctx->input_shapes[1];
  bool ta = attr_bool(sctx, "transpose_a"), tb = attr_bool(sctx, "transpose_b");
  if (a->rank >= 0 && a->rank != 2)
    return fail(sctx, "MatMul input 'a' must be a matrix (rank 2), got shape %s", SHAPE_STR(*a));
  if (b->rank >= 0 && b->rank != 2)
    return fail(sctx, "MatMul input 'b' must be a matrix (rank 2), got shape %s", SHAPE_STR(*b));
  int64_t m = a->rank == 2 ? a->dims[ta ? 1 : 0] : -1, ka = a->rank == 2 ? a->dims[ta ? 0 : 1] : -1;
  int64_t kb = b->rank == 2 ? b->dims[tb ? 1 : 0] : -1, n = b->rank == 2 ? b->dims[tb ? 0 : 1] : -1;
  int64_t k;
  if (!merge_dim(ka, kb, &k))
    return fail(sctx, "Matrix size-incompatible: a %s (transpose_a=%d) and b %s (transpose_b=%d) "
                      "have inner dimensions %lld and %lld", SHAPE_STR(*a), ta, SHAPE_STR(*b), tb,
                (long long)ka, (long long)kb);
  int64_t dims[2] = {m, n};
  sctx->output_shapes[0] = floe_shape_make(2, dims);
  return FLOE_OK;
}

floe_code floe__shape_batch_matmul(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0], *y = &sctx->input_shapes[1];
  bool adj_x = attr_bool(sctx, "adj_x"), adj_y = attr_bool(sctx, "adj_y");
  if (x->rank >= 0 && x->rank < 2)
    return fail(sctx, "BatchMatMul input 'x' must have rank >= 2, got shape %s", SHAPE_STR(*x));
  if (y->rank >= 0 && y->rank < 2)
    return fail(sctx, "BatchMatMul input 'y' must have rank >= 2, got shape %s", SHAPE_STR(*y));
  if (x->rank < 0 || y->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int rx = x->rank, ry = y->rank;
  int64_t m = x->dims[rx - (adj_x ? 1 : 2)], kx = x->dims[rx - (adj_x ? 2 : 1)];
  int64_t ky = y->dims[ry - (adj_y ? 1 : 2)], n = y->dims[ry - (adj_y ? 2 : 1)], k;
  if (!merge_dim(kx, ky, &k))
    return fail(sctx, "BatchMatMul: x %s (adj_x=%d) and y %s (adj_y=%d) have inner dimensions "
                      "%lld and %lld", SHAPE_STR(*x), adj_x, SHAPE_STR(*y), adj_y, (long long)kx,
                (long long)ky);
  FloeShape bx = floe_shape_make(rx - 2, x->dims), by = floe_shape_make(ry - 2, y->dims), out;
  if (broadcast2(sctx, &bx, &by, &out) != FLOE_OK)
    return fail(sctx, "BatchMatMul: batch dimensions of x %s and y %s do not broadcast",
                SHAPE_STR(*x), SHAPE_STR(*y));
  out.dims[out.rank] = m;
  out.dims[out.rank + 1] = n;
  out.rank += 2;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* data_format attribute: false for NHWC, true for NCHW. */
static floe_code data_format(FloeShapeContext *sctx, bool *nchw) {
  const char *df = attr_string(sctx, "data_format", "NHWC");
  if (strcmp(df, "NHWC") != 0 && strcmp(df, "NCHW") != 0)
    return fail(sctx, "attribute 'data_format' must be NHWC or NCHW, got '%s'", df);
  *nchw = df[1] == 'C';
  return FLOE_OK;
}

floe_code floe__shape_bias_add(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape v = sctx->input_shapes[0];
  const FloeShape *b = &sctx->input_shapes[1];
  bool nchw = false;
  floe_code c = data_format(sctx, &nchw);
  if (c != FLOE_OK) return c;
  if (b->rank >= 0 && b->rank != 1)
    return fail(sctx, "BiasAdd bias must be 1-D, got shape %s", SHAPE_STR(*b));
  int min_rank = nchw ? 2 : 1;
  if (v.rank >= 0 && v.rank < min_rank)
    return fail(sctx, "BiasAdd value must have rank >= %d for %s, got shape %s", min_rank,
                nchw ? "NCHW" : "NHWC", SHAPE_STR(v));
  if (v.rank >= 0 && b->rank == 1) {
    int ch = nchw ? 1 : v.rank - 1;
    if (!merge_dim(v.dims[ch], b->dims[0], &v.dims[ch]))
      return fail(sctx, "BiasAdd bias %s does not match the channel dimension of value %s",
                  SHAPE_STR(*b), SHAPE_STR(sctx->input_shapes[0]));
  }
  sctx->output_shapes[0] = v;
  return FLOE_OK;
}

/* A list(int) attribute of exactly 4 positive entries whose batch and channel entries
 * are 1 (when batch_channel_one). */
static floe_code window_attr(FloeShapeContext *sctx, const char *name, bool nchw,
                             bool batch_channel_one, const int64_t **out) {
  const FloeAttrValue *v = attr_of(sctx, name, FLOE_ATTR_INT_LIST);
  if (!v) return fail(sctx, "%s needs attribute '%s' (a list of 4 ints)", op_name(sctx), name);
  const int64_t *x = v->u.ilist.v;
  int n = (int)v->u.ilist.n;
  if (n != 4)
    return fail(sctx, "attribute '%s' must have 4 elements (%s order), got %s", name,
                nchw ? "NCHW" : "NHWC", INTS_STR(x, n));
  for (int i = 0; i < 4; i++)
    if (x[i] <= 0) return fail(sctx, "attribute '%s' must be positive, got %s", name, INTS_STR(x, n));
  int ch = nchw ? 1 : 3;
  if (batch_channel_one && (x[0] != 1 || x[ch] != 1))
    return fail(sctx, "attribute '%s' %s must be 1 in the batch and channel dimensions (%s)",
                name, INTS_STR(x, n), nchw ? "NCHW" : "NHWC");
  *out = x;
  return FLOE_OK;
}

static floe_code padding_attr(FloeShapeContext *sctx, bool *same) {
  const char *p = attr_string(sctx, "padding", "");
  if (strcmp(p, "SAME") != 0 && strcmp(p, "VALID") != 0)
    return fail(sctx, "attribute 'padding' must be SAME or VALID, got '%s'", p);
  *same = p[0] == 'S';
  return FLOE_OK;
}

/* TensorFlow's windowed output size: SAME ceil(in / s); VALID ceil((in - eff + 1) / s)
 * with eff = (k - 1) * d + 1, an error when the window is larger than the input. */
static floe_code window_out(FloeShapeContext *sctx, int64_t in, int64_t k, int64_t s, int64_t d,
                            bool same, const char *dim, int64_t *out) {
  *out = FLOE_DIM_UNKNOWN;
  if (in < 0) return FLOE_OK;
  if (same) {
    *out = (in + s - 1) / s;
    return FLOE_OK;
  }
  if (k < 0) return FLOE_OK;
  int64_t eff = (k - 1) * d + 1;
  if (in < eff)
    return fail(sctx, "%s: the %s window (size %lld, dilation %lld: %lld) is larger than the "
                      "input (%lld) with VALID padding", op_name(sctx), dim, (long long)k,
                (long long)d, (long long)eff, (long long)in);
  *out = (in - eff) / s + 1;
  return FLOE_OK;
}

floe_code floe__shape_conv2d(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0], *f = &sctx->input_shapes[1];
  bool nchw = false, same = false;
  const int64_t *strides, *dil;
  floe_code c;
  if ((c = data_format(sctx, &nchw)) != FLOE_OK || (c = padding_attr(sctx, &same)) != FLOE_OK ||
      (c = window_attr(sctx, "strides", nchw, true, &strides)) != FLOE_OK ||
      (c = window_attr(sctx, "dilations", nchw, true, &dil)) != FLOE_OK)
    return c;
  if (x->rank >= 0 && x->rank != 4)
    return fail(sctx, "Conv2D input must have rank 4 (%s), got shape %s", nchw ? "NCHW" : "NHWC",
                SHAPE_STR(*x));
  if (f->rank >= 0 && f->rank != 4)
    return fail(sctx, "Conv2D filter must have rank 4 ([kh,kw,in,out]), got shape %s",
                SHAPE_STR(*f));
  int hi = nchw ? 2 : 1, wi = nchw ? 3 : 2, ci = nchw ? 1 : 3;
  FloeShape in = x->rank == 4 ? *x : unknown_dims(4), fl = f->rank == 4 ? *f : unknown_dims(4);
  int64_t cin;
  if (!merge_dim(in.dims[ci], fl.dims[2], &cin))
    return fail(sctx, "Conv2D input %s has %lld channels but filter %s expects %lld",
                SHAPE_STR(*x), (long long)in.dims[ci], SHAPE_STR(*f), (long long)fl.dims[2]);
  FloeShape out = unknown_dims(4);
  out.dims[0] = in.dims[0];
  out.dims[ci] = fl.dims[3];
  if ((c = window_out(sctx, in.dims[hi], fl.dims[0], strides[hi], dil[hi], same, "height",
                      &out.dims[hi])) != FLOE_OK ||
      (c = window_out(sctx, in.dims[wi], fl.dims[1], strides[wi], dil[wi], same, "width",
                      &out.dims[wi])) != FLOE_OK)
    return c;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_pool(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *x = &sctx->input_shapes[0];
  bool nchw = false, same = false;
  const int64_t *ksize, *strides;
  floe_code c;
  if ((c = data_format(sctx, &nchw)) != FLOE_OK || (c = padding_attr(sctx, &same)) != FLOE_OK ||
      (c = window_attr(sctx, "ksize", nchw, true, &ksize)) != FLOE_OK ||
      (c = window_attr(sctx, "strides", nchw, true, &strides)) != FLOE_OK)
    return c;
  if (x->rank >= 0 && x->rank != 4)
    return fail(sctx, "%s input must have rank 4 (%s), got shape %s", op_name(sctx),
                nchw ? "NCHW" : "NHWC", SHAPE_STR(*x));
  int hi = nchw ? 2 : 1, wi = nchw ? 3 : 2;
  FloeShape out = x->rank == 4 ? *x : unknown_dims(4);
  if ((c = window_out(sctx, out.dims[hi], ksize[hi], strides[hi], 1, same, "height",
                      &out.dims[hi])) != FLOE_OK ||
      (c = window_out(sctx, out.dims[wi], ksize[wi], strides[wi], 1, same, "width",
                      &out.dims[wi])) != FLOE_OK)
    return c;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* ---- shapes and data movement ---- */

/* Product of the known dims of s (unknown ones skipped); false on overflow. */
static bool known_product(const FloeShape *s, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] >= 0 && __builtin_mul_overflow(p, s->dims[i], &p)) return false;
  *out = p;
  return true;
}

floe_code floe__shape_reshape(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  FloeShape t;
  bool is_const;
  floe_code c = shape_vector_input(sctx, 1, "Reshape shape", &t, &is_const);
  if (c != FLOE_OK) return c;
  if (t.rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int n_unknown = 0, unknown_at = -1;
  for (int i = 0; i < t.rank; i++) {
    if (t.dims[i] >= 0) continue;
    if (is_const && t.dims[i] != -1)
      return fail(sctx, "Reshape shape %s holds %lld; sizes must be >= 0, or -1 once to infer",
                  INTS_STR(t.dims, t.rank), (long long)t.dims[i]);
    n_unknown++;
    unknown_at = i;
  }
  if (is_const && n_unknown > 1)
    return fail(sctx, "Reshape shape %s may hold -1 only once", INTS_STR(t.dims, t.rank));
  int64_t p, q;
  if (!known_product(&t, &p))
    return fail(sctx, "Reshape shape %s overflows", INTS_STR(t.dims, t.rank));
  if (fully_known(in)) {
    if (!known_product(in, &q)) return fail(sctx, "Reshape input %s overflows", SHAPE_STR(*in));
    if (n_unknown == 0 && p != q)
      return fail(sctx, "Cannot reshape a tensor of shape %s (%lld elements) into shape %s "
                        "(%lld elements)", SHAPE_STR(*in), (long long)q, INTS_STR(t.dims, t.rank),
                  (long long)p);
    if (n_unknown > 0 && (p == 0 ? q != 0 : q % p != 0))
      return fail(sctx, "Cannot reshape a tensor of shape %s (%lld elements) into shape %s: "
                        "%lld is not a multiple of %lld", SHAPE_STR(*in), (long long)q,
                  INTS_STR(t.dims, t.rank), (long long)q, (long long)p);
    if (n_unknown == 1 && p != 0) t.dims[unknown_at] = q / p;
  } else if (in->rank >= 0 && n_unknown == 0 && known_product(in, &q) && q > 0 && p % q != 0) {
    /* The known input dims must divide the output's element count. */
    return fail(sctx, "Cannot reshape a tensor of shape %s into shape %s: %lld is not a "
                      "multiple of %lld", SHAPE_STR(*in), INTS_STR(t.dims, t.rank), (long long)p,
                (long long)q);
  }
  for (int i = 0; i < t.rank; i++)
    if (t.dims[i] < 0) t.dims[i] = FLOE_DIM_UNKNOWN;
  sctx->output_shapes[0] = t;
  return FLOE_OK;
}

floe_code floe__shape_transpose(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t perm[MAX_VEC], len;
  int n;
  bool known;
  floe_code c = const_vector(sctx, 1, "Transpose perm", perm, &n, &known);
  if (c != FLOE_OK) return c;
  if (!known) {
    if ((c = vector_len(sctx, 1, "Transpose perm", &len)) != FLOE_OK) return c;
    if (in->rank >= 0 && len >= 0 && len != in->rank)
      return fail(sctx, "Transpose perm has %lld elements for an input of shape %s",
                  (long long)len, SHAPE_STR(*in));
    sctx->output_shapes[0] = unknown_dims(in->rank >= 0 ? in->rank : len > FLOE_MAX_DIMS ? -1 : (int)len);
    return FLOE_OK;
  }
  if (in->rank >= 0 && n != in->rank)
    return fail(sctx, "Transpose perm %s has %d elements for an input of shape %s",
                INTS_STR(perm, n), n, SHAPE_STR(*in));
  if (n > FLOE_MAX_DIMS)
    return fail(sctx, "Transpose perm %s has more than %d elements", INTS_STR(perm, n),
                FLOE_MAX_DIMS);
  bool seen[FLOE_MAX_DIMS] = {false};
  FloeShape out = unknown_dims(n);
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
      return fail(sctx, "Transpose perm %s is not a permutation of 0..%d", INTS_STR(perm, n),
                  n - 1);
    seen[perm[i]] = true;
    if (in->rank >= 0) out.dims[i] = in->dims[perm[i]];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_concat(const FloeHostApi *host, FloeShapeContext *sctx) {
  int nvals = sctx->node->num_inputs - 1;
  const FloeShape *vals = sctx->input_shapes;
  int rank = -1, first = -1;
  for (int i = 0; i < nvals; i++) {
    if (vals[i].rank < 0) continue;
    if (rank < 0) {
      rank = vals[i].rank;
      first = i;
    } else if (vals[i].rank != rank) {
      return fail(sctx, "Concat values[%d] %s and values[%d] %s have different ranks", first,
                  SHAPE_STR(vals[first]), i, SHAPE_STR(vals[i]));
    }
  }
  if (rank == 0) return fail(sctx, "Concat cannot join scalars (values[%d] is a scalar)", first);
  if (rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int64_t axis;
  if (!const_scalar(sctx, nvals, &axis)) {
    sctx->output_shapes[0] = unknown_dims(rank);
    return FLOE_OK;
  }
  int ax = 0;
  floe_code c = norm_axis(sctx, axis, rank, "Concat axis", &vals[first], &ax);
  if (c != FLOE_OK) return c;
  FloeShape out = unknown_dims(rank);
  out.dims[ax] = 0;
  for (int i = 0; i < nvals; i++) {
    if (vals[i].rank < 0) {
      out.dims[ax] = FLOE_DIM_UNKNOWN;
      continue;
    }
    for (int d = 0; d < rank; d++) {
      if (d == ax) continue;
      if (!merge_dim(out.dims[d], vals[i].dims[d], &out.dims[d]))
        return fail(sctx, "Concat values[%d] %s does not match values[%d] %s in dimension %d "
                          "(only axis %d may differ)", first, SHAPE_STR(vals[first]), i,
                    SHAPE_STR(vals[i]), d, ax);
    }
    if (out.dims[ax] >= 0)
      out.dims[ax] = vals[i].dims[ax] >= 0 ? out.dims[ax] + vals[i].dims[ax] : FLOE_DIM_UNKNOWN;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_split(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t num = attr_int(sctx, "num_split", sctx->node->num_outputs), axis;
  if (in->rank < 0) {
    set_all_outputs(sctx, unknown_rank());
    return FLOE_OK;
  }
  if (in->rank == 0) return fail(sctx, "Split cannot split a scalar");
  if (!const_scalar(sctx, 1, &axis)) {
    set_all_outputs(sctx, unknown_dims(in->rank));
    return FLOE_OK;
  }
  int ax = 0;
  floe_code c = norm_axis(sctx, axis, in->rank, "Split axis", in, &ax);
  if (c != FLOE_OK) return c;
  FloeShape out = *in;
  if (in->dims[ax] >= 0) {
    if (num <= 0 || in->dims[ax] % num != 0)
      return fail(sctx, "Split: dimension %d of %s (size %lld) is not divisible by num_split %lld",
                  ax, SHAPE_STR(*in), (long long)in->dims[ax], (long long)num);
    out.dims[ax] = in->dims[ax] / num;
  }
  set_all_outputs(sctx, out);
  return FLOE_OK;
}

floe_code floe__shape_slice(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t begin[MAX_VEC], size[MAX_VEC], blen, slen;
  int nb = 0, ns = 0;
  bool bk, sk;
  floe_code c;
  if ((c = const_vector(sctx, 1, "Slice begin", begin, &nb, &bk)) != FLOE_OK ||
      (c = const_vector(sctx, 2, "Slice size", size, &ns, &sk)) != FLOE_OK ||
      (c = vector_len(sctx, 1, "Slice begin", &blen)) != FLOE_OK ||
      (c = vector_len(sctx, 2, "Slice size", &slen)) != FLOE_OK)
    return c;
  if (bk) blen = nb;
  if (sk) slen = ns;
  int64_t rank = in->rank;
  if (rank < 0) rank = blen >= 0 ? blen : slen;
  if ((blen >= 0 && blen != rank) || (slen >= 0 && slen != rank))
    return fail(sctx, "Slice of %s: begin has %lld and size %lld elements; both need one per "
                      "dimension", SHAPE_STR(*in), (long long)blen, (long long)slen);
  if (rank < 0 || rank > FLOE_MAX_DIMS) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  FloeShape out = unknown_dims((int)rank);
  for (int i = 0; i < rank; i++) {
    int64_t dim = in->rank >= 0 ? in->dims[i] : -1, b = bk ? begin[i] : -1, s = sk ? size[i] : -2;
    if (bk && (b < 0 || (dim >= 0 && b > dim)))
      return fail(sctx, "Slice begin %s is out of range for input %s in dimension %d",
                  INTS_STR(begin, nb), SHAPE_STR(*in), i);
    if (sk && s < -1)
      return fail(sctx, "Slice size %s holds %lld; sizes must be >= 0, or -1 for 'to the end'",
                  INTS_STR(size, ns), (long long)s);
    if (s >= 0) {
      if (bk && dim >= 0 && b + s > dim)
        return fail(sctx, "Slice begin %s + size %s exceeds input %s in dimension %d",
                    INTS_STR(begin, nb), INTS_STR(size, ns), SHAPE_STR(*in), i);
      out.dims[i] = s;
    } else if (s == -1 && bk && dim >= 0) {
      out.dims[i] = dim - b;
    }
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* StridedSlice, following TensorFlow's ValidateStridedSliceOp: the sparse spec (with
 * ellipsis and new-axis entries) is expanded to one entry per input dimension, each is
 * canonicalised against its size, and the final shape drops shrunk dims and adds new
 * axes. Without constant begin/end/strides the rank is still derived from the masks. */
enum { SS_NEW_AXIS = -1, SS_SHRINK = -2 };

typedef struct DenseSpec {
  int64_t begin[FLOE_MAX_DIMS], end[FLOE_MAX_DIMS], strides[FLOE_MAX_DIMS];
  uint64_t begin_mask, end_mask, shrink_mask;
  int gather[MAX_VEC + FLOE_MAX_DIMS]; /* dense dim, SS_NEW_AXIS or SS_SHRINK */
  int num_gather;
} DenseSpec;

typedef struct SparseSpec {
  int n;                     /* entries, including an implicit trailing ellipsis */
  const int64_t *begin, *end, *strides; /* NULL when not constant */
  uint64_t begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_mask;
  int new_axis_after_ellipsis;
} SparseSpec;

static floe_code build_dense(FloeShapeContext *sctx, const SparseSpec *sp, int rank,
                             DenseSpec *d) {
  int full = 0;
  memset(d, 0, sizeof *d);
  for (int i = 0; i < sp->n; i++) {
    uint64_t bit = 1ull << i;
    if (sp->ellipsis_mask & bit) {
      int next = rank - (sp->n - i) + 1 + sp->new_axis_after_ellipsis;
      if (next > rank) next = rank;
      for (; full < next; full++) {
        d->begin[full] = d->end[full] = 0;
        d->strides[full] = 1;
        d->begin_mask |= 1ull << full;
        d->end_mask |= 1ull << full;
        d->gather[d->num_gather++] = full;
      }
    } else if (sp->new_axis_mask & bit) {
      d->gather[d->num_gather++] = SS_NEW_AXIS;
    } else {
      if (full == rank)
        return fail(sctx, "StridedSlice: index %d of the slice spec is out of range; the input "
                          "has only %d dimensions", i, rank);
      d->begin[full] = sp->begin ? sp->begin[i] : 0;
      d->end[full] = sp->end ? sp->end[i] : 0;
      d->strides[full] = sp->strides ? sp->strides[i] : 1;
      d->begin_mask |= ((sp->begin_mask >> i) & 1) << full;
      d->end_mask |= ((sp->end_mask >> i) & 1) << full;
      if (sp->shrink_mask & bit) {
        d->gather[d->num_gather++] = SS_SHRINK;
        d->shrink_mask |= 1ull << full;
      } else {
        d->gather[d->num_gather++] = full;
      }
      full++;
    }
  }
  return FLOE_OK;
}

/* Size of dense dim i; -1 when unknown. */
static floe_code strided_dim(FloeShapeContext *sctx, const SparseSpec *sp, DenseSpec *d, int i,
                             int64_t dim, int64_t *size) {
  int64_t stride = d->strides[i];
  bool shrink = d->shrink_mask >> i & 1, bm = d->begin_mask >> i & 1, em = d->end_mask >> i & 1;
  bool values = sp->begin && sp->end;
  *size = FLOE_DIM_UNKNOWN;
  if (!sp->strides) return FLOE_OK;
  if (stride == 0) return fail(sctx, "StridedSlice strides[%d] must be non-zero", i);
  if (shrink && stride <= 0)
    return fail(sctx, "StridedSlice: dimension %d is shrunk (an index, not a range) and needs "
                      "a positive stride, got %lld", i, (long long)stride);
  if (dim < 0) {
    if (shrink) *size = 1;
    return FLOE_OK;
  }
  int64_t interval;
  if (values) {
    int64_t b = d->begin[i], e = d->end[i];
    if (shrink) {
      int64_t fwd = b < 0 ? dim + b : b;
      if (fwd < 0 || fwd >= dim)
        return fail(sctx, "StridedSlice: index %lld is out of bounds for dimension %d of size "
                          "%lld", (long long)b, i, (long long)dim);
      b = fwd;
      e = fwd + 1;
    } else {
      /* Masked ends take the full range in the stride's direction; others clamp. */
      int64_t lo = stride > 0 ? 0 : -1, hi = stride > 0 ? dim : dim - 1;
      int64_t bf = b < 0 ? dim + b : b, ef = e < 0 ? dim + e : e;
      b = bm ? (stride > 0 ? lo : hi) : bf < lo ? lo : bf > hi ? hi : bf;
      e = em ? (stride > 0 ? hi : lo) : ef < lo ? lo : ef > hi ? hi : ef;
    }
    interval = e - b;
  } else if (shrink) {
    interval = 1;
  } else if (bm && em) {
    interval = stride < 0 ? -dim : dim;
  } else {
    return FLOE_OK;
  }
  if (interval == 0 || ((interval < 0) != (stride < 0)))
    *size = 0;
  else
    *size = interval / stride + (interval % stride != 0);
  return FLOE_OK;
}

floe_code floe__shape_strided_slice(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t vals[3][MAX_VEC], lens[3];
  bool known[3];
  static const char *const what[3] = {"StridedSlice begin", "StridedSlice end",
                                      "StridedSlice strides"};
  int64_t n = -1;
  for (int k = 0; k < 3; k++) {
    int cnt = 0;
    floe_code c = const_vector(sctx, k + 1, what[k], vals[k], &cnt, &known[k]);
    if (c == FLOE_OK && !known[k]) c = vector_len(sctx, k + 1, what[k], &lens[k]);
    if (c != FLOE_OK) return c;
    if (known[k]) lens[k] = cnt;
    if (lens[k] < 0) continue;
    if (n >= 0 && lens[k] != n)
      return fail(sctx, "StridedSlice begin, end and strides must have the same length; %s "
                        "has %lld elements, not %lld", what[k], (long long)lens[k], (long long)n);
    n = lens[k];
  }
  if (in->rank < 0 || n < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  if (n > MAX_VEC - 1)
    return fail(sctx, "StridedSlice spec has %lld entries; at most %d are supported",
                (long long)n, MAX_VEC - 1);
  uint64_t used = (1ull << n) - 1;
  SparseSpec sp = {
      .n = (int)n,
      .begin = known[0] ? vals[0] : NULL,
      .end = known[1] ? vals[1] : NULL,
      .strides = known[2] ? vals[2] : NULL,
      .begin_mask = (uint64_t)attr_int(sctx, "begin_mask", 0) & used,
      .end_mask = (uint64_t)attr_int(sctx, "end_mask", 0) & used,
      .ellipsis_mask = (uint64_t)attr_int(sctx, "ellipsis_mask", 0) & used,
      .new_axis_mask = (uint64_t)attr_int(sctx, "new_axis_mask", 0) & used,
      .shrink_mask = (uint64_t)attr_int(sctx, "shrink_axis_mask", 0) & used,
  };
  if (__builtin_popcountll(sp.ellipsis_mask) > 1)
    return fail(sctx, "StridedSlice ellipsis_mask 0x%llx sets more than one ellipsis",
                (unsigned long long)sp.ellipsis_mask);
  bool seen = false;
  for (int i = 0; i < sp.n; i++) {
    if (seen && (sp.new_axis_mask >> i & 1)) sp.new_axis_after_ellipsis++;
    if (sp.ellipsis_mask >> i & 1) seen = true;
  }
  if (!seen) sp.ellipsis_mask |= 1ull << sp.n++; /* an implicit ellipsis at the end */

  DenseSpec d;
  floe_code c = build_dense(sctx, &sp, in->rank, &d);
  if (c != FLOE_OK) return c;
  int64_t sizes[FLOE_MAX_DIMS];
  for (int i = 0; i < in->rank; i++)
    if ((c = strided_dim(sctx, &sp, &d, i, in->dims[i], &sizes[i])) != FLOE_OK) return c;
  FloeShape out = floe_shape_scalar();
  for (int g = 0; g < d.num_gather; g++) {
    if (d.gather[g] == SS_SHRINK) continue;
    if (out.rank == FLOE_MAX_DIMS)
      return fail(sctx, "StridedSlice result of %s would have more than %d dimensions",
                  SHAPE_STR(*in), FLOE_MAX_DIMS);
    out.dims[out.rank++] = d.gather[g] == SS_NEW_AXIS ? 1 : sizes[d.gather[g]];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_gather(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *p = &sctx->input_shapes[0], *idx = &sctx->input_shapes[1];
  int64_t axis = attr_int(sctx, "axis", 0);
  if (p->rank == 0) return fail(sctx, "Gather params must have rank >= 1, got a scalar");
  if (p->rank < 0 || idx->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int ax = 0;
  floe_code c = norm_axis(sctx, axis, p->rank, "Gather axis", p, &ax);
  if (c != FLOE_OK) return c;
  int r = p->rank - 1 + idx->rank;
  if (r > FLOE_MAX_DIMS)
    return fail(sctx, "Gather of params %s with indices %s would have rank %d (more than %d)",
                SHAPE_STR(*p), SHAPE_STR(*idx), r, FLOE_MAX_DIMS);
  FloeShape out = unknown_dims(r);
  int k = 0;
  for (int i = 0; i < ax; i++) out.dims[k++] = p->dims[i];
  for (int i = 0; i < idx->rank; i++) out.dims[k++] = idx->dims[i];
  for (int i = ax + 1; i < p->rank; i++) out.dims[k++] = p->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_pad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0], *ps = &sctx->input_shapes[1];
  const char *mode = attr_string(sctx, "mode", "CONSTANT");
  bool reflect = strcmp(mode, "REFLECT") == 0, edge = strcmp(mode, "EDGE") == 0;
  if (!reflect && !edge && strcmp(mode, "CONSTANT") != 0)
    return fail(sctx, "Pad attribute 'mode' must be CONSTANT, REFLECT or EDGE, got '%s'", mode);
  if (ps->rank >= 0 && (ps->rank != 2 || (ps->dims[1] >= 0 && ps->dims[1] != 2) ||
                        (in->rank >= 0 && ps->dims[0] >= 0 && ps->dims[0] != in->rank)))
    return fail(sctx, "Pad paddings must have shape [rank, 2] = [%d,2] for input %s, got %s",
                in->rank, SHAPE_STR(*in), SHAPE_STR(*ps));
  const FloeTensor *t = const_input(sctx, 1);
  int64_t pad[2 * FLOE_MAX_DIMS], n;
  if (!t || !tensor_ints(t, pad, 2 * FLOE_MAX_DIMS, &n)) {
    int r = in->rank >= 0 ? in->rank : ps->rank == 2 && ps->dims[0] >= 0 && ps->dims[0] <= FLOE_MAX_DIMS ? (int)ps->dims[0] : -1;
    sctx->output_shapes[0] = unknown_dims(r);
    return FLOE_OK;
  }
  int r = (int)(n / 2);
  if (in->rank >= 0) r = in->rank;
  FloeShape out = unknown_dims(r);
  for (int i = 0; i < r; i++) {
    int64_t before = pad[2 * i], after = pad[2 * i + 1], dim = in->rank >= 0 ? in->dims[i] : -1;
    if (before < 0 || after < 0)
      return fail(sctx, "Pad paddings %s must be non-negative", INTS_STR(pad, (int)n));
    if (reflect && dim >= 0 && (before >= dim || after >= dim))
      return fail(sctx, "Pad REFLECT paddings %s must be smaller than the input %s in dimension "
                        "%d", INTS_STR(pad, (int)n), SHAPE_STR(*in), i);
    if (edge && dim == 0 && (before || after))
      return fail(sctx, "Pad EDGE cannot pad the empty dimension %d of %s", i, SHAPE_STR(*in));
    if (dim >= 0) out.dims[i] = dim + before + after;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_tile(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t m[MAX_VEC], len;
  int n;
  bool known;
  floe_code c = const_vector(sctx, 1, "Tile multiples", m, &n, &known);
  if (c == FLOE_OK && !known) c = vector_len(sctx, 1, "Tile multiples", &len);
  if (c != FLOE_OK) return c;
  if (known) len = n;
  if (in->rank >= 0 && len >= 0 && len != in->rank)
    return fail(sctx, "Tile multiples has %lld elements for an input of shape %s",
                (long long)len, SHAPE_STR(*in));
  int r = in->rank >= 0 ? in->rank : len >= 0 && len <= FLOE_MAX_DIMS ? (int)len : -1;
  FloeShape out = unknown_dims(r);
  for (int i = 0; known && i < r; i++) {
    if (m[i] < 0)
      return fail(sctx, "Tile multiples %s must be non-negative", INTS_STR(m, n));
    int64_t dim = in->rank >= 0 ? in->dims[i] : -1;
    if (m[i] == 0)
      out.dims[i] = 0;
    else if (dim >= 0 && __builtin_mul_overflow(dim, m[i], &out.dims[i]))
      return fail(sctx, "Tile of %s by %s overflows", SHAPE_STR(*in), INTS_STR(m, n));
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_squeeze(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  const FloeAttrValue *v = attr_of(sctx, "squeeze_dims", FLOE_ATTR_INT_LIST);
  size_t nd = v ? v->u.ilist.n : 0;
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  bool drop[FLOE_MAX_DIMS] = {false};
  if (nd == 0) {
    for (int i = 0; i < in->rank; i++) {
      /* An unknown dim may or may not be 1, so the rank is unknown. */
      if (in->dims[i] < 0) {
        sctx->output_shapes[0] = unknown_rank();
        return FLOE_OK;
      }
      drop[i] = in->dims[i] == 1;
    }
  }
  for (size_t k = 0; k < nd; k++) {
    int ax = 0;
    floe_code c = norm_axis(sctx, v->u.ilist.v[k], in->rank, "Squeeze dimension", in, &ax);
    if (c != FLOE_OK) return c;
    if (in->dims[ax] >= 0 && in->dims[ax] != 1)
      return fail(sctx, "Squeeze cannot remove dimension %d of %s: its size is %lld, not 1", ax,
                  SHAPE_STR(*in), (long long)in->dims[ax]);
    drop[ax] = true;
  }
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++)
    if (!drop[i]) out.dims[out.rank++] = in->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_expand_dims(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  int64_t axis = attr_int(sctx, "axis", 0);
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  if (in->rank == FLOE_MAX_DIMS)
    return fail(sctx, "ExpandDims of %s would exceed %d dimensions", SHAPE_STR(*in), FLOE_MAX_DIMS);
  int ax = 0;
  floe_code c = norm_axis(sctx, axis, in->rank + 1, "ExpandDims axis", in, &ax);
  if (c != FLOE_OK) return c;
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++) {
    if (i == ax) out.dims[out.rank++] = 1;
    out.dims[out.rank++] = in->dims[i];
  }
  if (ax == in->rank) out.dims[out.rank++] = 1;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* A shape given as a 1-D input whose known entries must be sizes (>= 0). */
static floe_code shape_from_input(FloeShapeContext *sctx, int i, const char *what,
                                  FloeShape *out) {
  bool is_const;
  floe_code c = shape_vector_input(sctx, i, what, out, &is_const);
  if (c != FLOE_OK) return c;
  for (int k = 0; is_const && k < out->rank; k++)
    if (out->dims[k] < 0)
      return fail(sctx, "%s %s must hold sizes >= 0", what, INTS_STR(out->dims, out->rank));
  return FLOE_OK;
}

floe_code floe__shape_fill(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *value = &sctx->input_shapes[1];
  if (value->rank > 0)
    return fail(sctx, "Fill value must be a scalar, got shape %s", SHAPE_STR(*value));
  return shape_from_input(sctx, 0, "Fill dims", &sctx->output_shapes[0]);
}

floe_code floe__shape_from_shape_input(const FloeHostApi *host, FloeShapeContext *sctx) {
  char what[64];
  snprintf(what, sizeof what, "%s shape", op_name(sctx));
  return shape_from_input(sctx, 0, what, &sctx->output_shapes[0]);
}

/* ---- reductions ---- */

floe_code floe__shape_reduce(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0], *axis_shape = &sctx->input_shapes[1];
  bool keep = attr_bool(sctx, "keep_dims");
  const FloeTensor *t = const_input(sctx, 1);
  int64_t axes[MAX_VEC], n;
  if (axis_shape->rank > 1)
    return fail(sctx, "%s axis must be a scalar or 1-D, got shape %s", op_name(sctx),
                SHAPE_STR(*axis_shape));
  if (!t || !tensor_ints(t, axes, MAX_VEC, &n)) {
    /* Unknown axes: keep_dims keeps the rank; one scalar axis removes one dim. */
    int r = -1;
    if (in->rank >= 0 && keep) r = in->rank;
    if (in->rank > 0 && !keep && axis_shape->rank == 0) r = in->rank - 1;
    sctx->output_shapes[0] = unknown_dims(r);
    return FLOE_OK;
  }
  if (n == 0) {
    sctx->output_shapes[0] = *in;
    return FLOE_OK;
  }
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  bool reduced[FLOE_MAX_DIMS] = {false};
  for (int64_t k = 0; k < n; k++) {
    int ax = 0;
    char what[48];
    snprintf(what, sizeof what, "%s axis", op_name(sctx));
    floe_code c = norm_axis(sctx, axes[k], in->rank, what, in, &ax);
    if (c != FLOE_OK) return c;
    reduced[ax] = true;
  }
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++) {
    if (!reduced[i])
      out.dims[out.rank++] = in->dims[i];
    else if (keep)
      out.dims[out.rank++] = 1;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_arg_reduce(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0], *dshape = &sctx->input_shapes[1];
  if (dshape->rank > 0)
    return fail(sctx, "%s dimension must be a scalar, got shape %s", op_name(sctx),
                SHAPE_STR(*dshape));
  if (in->rank == 0) return fail(sctx, "%s needs an input of rank >= 1, got a scalar", op_name(sctx));
  if (in->rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  int64_t dim;
  if (!const_scalar(sctx, 1, &dim)) {
    sctx->output_shapes[0] = unknown_dims(in->rank - 1);
    return FLOE_OK;
  }
  int ax = 0;
  char what[48];
  snprintf(what, sizeof what, "%s dimension", op_name(sctx));
  floe_code c = norm_axis(sctx, dim, in->rank, what, in, &ax);
  if (c != FLOE_OK) return c;
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < in->rank; i++)
    if (i != ax) out.dims[out.rank++] = in->dims[i];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* ---- one-hot and losses ---- */

floe_code floe__shape_one_hot(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *idx = &sctx->input_shapes[0];
  int64_t axis = attr_int(sctx, "axis", -1), depth = FLOE_DIM_UNKNOWN;
  const char *names[4] = {"indices", "depth", "on_value", "off_value"};
  for (int i = 1; i < 4; i++)
    if (sctx->input_shapes[i].rank > 0)
      return fail(sctx, "OneHot %s must be a scalar, got shape %s", names[i],
                  SHAPE_STR(sctx->input_shapes[i]));
  if (const_scalar(sctx, 1, &depth) && depth < 0)
    return fail(sctx, "OneHot depth must be >= 0, got %lld", (long long)depth);
  if (idx->rank < 0) {
    if (axis < -1) return fail(sctx, "OneHot axis must be -1 or in [0, rank], got %lld", (long long)axis);
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  if (axis < -1 || axis > idx->rank)
    return fail(sctx, "OneHot axis %lld is out of range for indices %s; use -1 or a value in "
                      "[0, %d]", (long long)axis, SHAPE_STR(*idx), idx->rank);
  if (idx->rank == FLOE_MAX_DIMS)
    return fail(sctx, "OneHot of indices %s would exceed %d dimensions", SHAPE_STR(*idx),
                FLOE_MAX_DIMS);
  int ax = axis == -1 ? idx->rank : (int)axis;
  FloeShape out = floe_shape_scalar();
  for (int i = 0; i < idx->rank; i++) {
    if (i == ax) out.dims[out.rank++] = depth;
    out.dims[out.rank++] = idx->dims[i];
  }
  if (ax == idx->rank) out.dims[out.rank++] = depth;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* Writes loss [batch] and backprop [batch, classes] from a merged features shape. */
static void xent_outputs(FloeShapeContext *sctx, int64_t batch, int64_t classes) {
  int64_t dims[2] = {batch, classes};
  sctx->output_shapes[0] = floe_shape_make(1, dims);
  sctx->output_shapes[1] = floe_shape_make(2, dims);
}

floe_code floe__shape_xent(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *f = &sctx->input_shapes[0], *l = &sctx->input_shapes[1];
  if (f->rank >= 0 && f->rank != 2)
    return fail(sctx, "SoftmaxCrossEntropyWithLogits features must be [batch, classes], got %s",
                SHAPE_STR(*f));
  if (l->rank >= 0 && l->rank != 2)
    return fail(sctx, "SoftmaxCrossEntropyWithLogits labels must be [batch, classes], got %s",
                SHAPE_STR(*l));
  FloeShape fs = f->rank == 2 ? *f : unknown_dims(2), ls = l->rank == 2 ? *l : unknown_dims(2);
  int64_t b, c;
  if (!merge_dim(fs.dims[0], ls.dims[0], &b) || !merge_dim(fs.dims[1], ls.dims[1], &c))
    return fail(sctx, "SoftmaxCrossEntropyWithLogits features %s and labels %s must have the "
                      "same shape", SHAPE_STR(*f), SHAPE_STR(*l));
  xent_outputs(sctx, b, c);
  return FLOE_OK;
}

floe_code floe__shape_sparse_xent(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *f = &sctx->input_shapes[0], *l = &sctx->input_shapes[1];
  if (f->rank >= 0 && f->rank != 2)
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits features must be [batch, classes], "
                      "got %s", SHAPE_STR(*f));
  if (l->rank >= 0 && l->rank != 1)
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits labels must be [batch], got %s",
                SHAPE_STR(*l));
  int64_t fb = f->rank == 2 ? f->dims[0] : -1, c = f->rank == 2 ? f->dims[1] : -1;
  int64_t lb = l->rank == 1 ? l->dims[0] : -1, b;
  if (!merge_dim(fb, lb, &b))
    return fail(sctx, "SparseSoftmaxCrossEntropyWithLogits features %s and labels %s disagree "
                      "on the batch size", SHAPE_STR(*f), SHAPE_STR(*l));
  xent_outputs(sctx, b, c);
  return FLOE_OK;
}

/* ---- training ops ---- */

floe_code floe__shape_from_shape_input1(const FloeHostApi *host, FloeShapeContext *sctx) {
  char what[64];
  snprintf(what, sizeof what, "%s shape", op_name(sctx));
  return shape_from_input(sctx, 1, what, &sctx->output_shapes[0]);
}

floe_code floe__shape_addn(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeShape out = sctx->input_shapes[0];
  for (int i = 1; i < sctx->node->num_inputs; i++) {
    const FloeShape *s = &sctx->input_shapes[i];
    if (s->rank < 0) continue;
    if (out.rank < 0) {
      out = *s;
      continue;
    }
    if (s->rank != out.rank)
      return fail(sctx, "AddN inputs must have one shape, got %s and %s", SHAPE_STR(out),
                  SHAPE_STR(*s));
    for (int k = 0; k < out.rank; k++) {
      if (out.dims[k] < 0) out.dims[k] = s->dims[k];
      else if (s->dims[k] >= 0 && s->dims[k] != out.dims[k])
        return fail(sctx, "AddN inputs must have one shape, got %s and input %d %s",
                    SHAPE_STR(out), i, SHAPE_STR(*s));
    }
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* Every shape (and offset) is a vector of the rank's length. */
floe_code floe__shape_concat_offset(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *cd = &sctx->input_shapes[0];
  if (cd->rank > 0)
    return fail(sctx, "ConcatOffset concat_dim must be a scalar, got shape %s", SHAPE_STR(*cd));
  int64_t len = -1;
  for (int i = 0; i < sctx->node->num_outputs; i++) {
    int64_t li;
    char what[48];
    snprintf(what, sizeof what, "ConcatOffset shape[%d]", i);
    floe_code c = vector_len(sctx, 1 + i, what, &li);
    if (c != FLOE_OK) return c;
    if (!merge_dim(len, li, &len))
      return fail(sctx, "ConcatOffset shapes must all have one length (the rank); shape[%d] "
                        "has %lld elements, another %lld", i, (long long)li, (long long)len);
  }
  set_all_outputs(sctx, unknown_dims(1));
  for (int i = 0; i < sctx->node->num_outputs; i++) sctx->output_shapes[i].dims[0] = len;
  return FLOE_OK;
}

/* The target shape (input 1) when the input (input 0) broadcasts to it; a target dim that
 * is unknown takes the input's dim when that is known and not 1. */
floe_code floe__shape_broadcast_to(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "BroadcastTo shape", &out);
  if (c != FLOE_OK) return c;
  if (in->rank < 0 || out.rank < 0) {
    sctx->output_shapes[0] = out;
    return FLOE_OK;
  }
  if (in->rank > out.rank)
    return fail(sctx, "BroadcastTo cannot broadcast an input of shape %s to shape %s: the "
                      "target has fewer dims (%d < %d)", SHAPE_STR(*in), SHAPE_STR(out),
                out.rank, in->rank);
  for (int i = 0; i < in->rank; i++) {
    int64_t have = in->dims[i], *want = &out.dims[out.rank - in->rank + i];
    if (have < 0 || have == 1) continue;
    if (*want >= 0 && *want != have)
      return fail(sctx, "BroadcastTo cannot broadcast an input of shape %s to shape %s: dim "
                        "%d is %lld, not %lld or 1", SHAPE_STR(*in), SHAPE_STR(out),
                  out.rank - in->rank + i, (long long)*want, (long long)have);
    *want = have;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* The target shape (input 1), checked to broadcast to the input's shape (input 0). */
floe_code floe__shape_sum_to_shape(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "SumToShape shape", &out);
  if (c != FLOE_OK) return c;
  for (int i = 0; in->rank >= 0 && i < out.rank; i++) {
    int d = in->rank - out.rank + i;
    int64_t want = out.dims[i], have = d >= 0 ? in->dims[d] : 1;
    if (want >= 0 && have >= 0 && want != have && want != 1)
      return fail(sctx, "SumToShape cannot sum an input of shape %s to shape %s: the shape "
                        "must broadcast to the input's", SHAPE_STR(*in), SHAPE_STR(out));
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* input_shape (input 1); with a constant axis, grad's shape is checked against it and fills
 * its unknown kept dims. */
floe_code floe__shape_expand_reduced(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0], *axis_shape = &sctx->input_shapes[2];
  bool keep = attr_bool(sctx, "keep_dims");
  FloeShape out;
  floe_code c = shape_from_input(sctx, 1, "ExpandReduced input_shape", &out);
  if (c != FLOE_OK) return c;
  if (axis_shape->rank > 1)
    return fail(sctx, "ExpandReduced axis must be a scalar or 1-D, got shape %s",
                SHAPE_STR(*axis_shape));
  const FloeTensor *t = const_input(sctx, 2);
  int64_t axes[MAX_VEC], n;
  sctx->output_shapes[0] = out;
  if (!t || !tensor_ints(t, axes, MAX_VEC, &n) || out.rank < 0) return FLOE_OK;
  bool red[FLOE_MAX_DIMS] = {false};
  for (int64_t k = 0; k < n; k++) {
    int ax = 0;
    if ((c = norm_axis(sctx, axes[k], out.rank, "ExpandReduced axis", &out, &ax)) != FLOE_OK)
      return c;
    red[ax] = true;
  }
  int gi = 0;
  for (int i = 0; i < out.rank; i++) gi += !red[i] || keep;
  if (g->rank >= 0 && g->rank != gi)
    return fail(sctx, "ExpandReduced grad %s has rank %d, but input_shape %s reduced along axis "
                      "%s (keep_dims=%d) has rank %d", SHAPE_STR(*g), g->rank, SHAPE_STR(out),
                INTS_STR(axes, (int)n), keep, gi);
  for (int i = 0, k = 0; g->rank >= 0 && i < out.rank; i++) {
    if (red[i] && !keep) continue;
    int64_t gd = g->dims[k++];
    if (red[i] ? (gd >= 0 && gd != 1) : !merge_dim(out.dims[i], gd, &out.dims[i]))
      return fail(sctx, "ExpandReduced grad %s does not match input_shape %s reduced along "
                        "axis %s (keep_dims=%d)", SHAPE_STR(*g),
                  SHAPE_STR(sctx->output_shapes[0]), INTS_STR(axes, (int)n), keep);
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* [C]: the channel dim of out_backprop (last for NHWC, dim 1 for NCHW). */
floe_code floe__shape_bias_add_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *in = &sctx->input_shapes[0];
  bool nchw = false;
  floe_code c = data_format(sctx, &nchw);
  if (c != FLOE_OK) return c;
  FloeShape out = unknown_dims(1);
  if (in->rank >= 0 && in->rank < 2)
    return fail(sctx, "BiasAddGrad needs out_backprop of rank >= 2, got %s", SHAPE_STR(*in));
  if (in->rank >= 2) out.dims[0] = nchw ? in->dims[1] : in->dims[in->rank - 1];
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* grad's dims less the paddings (a constant [rank, 2] input); REFLECT paddings must stay
 * below the input's dims, as for Pad. */
floe_code floe__shape_pad_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0], *ps = &sctx->input_shapes[1];
  const char *mode = attr_string(sctx, "mode", "CONSTANT");
  bool reflect = strcmp(mode, "REFLECT") == 0;
  if (!reflect && strcmp(mode, "CONSTANT") != 0)
    return fail(sctx, "PadGrad attribute 'mode' must be CONSTANT or REFLECT, got '%s'", mode);
  int r = g->rank;
  if (ps->rank >= 0) {
    int64_t pr = ps->rank == 2 ? ps->dims[0] : -2;
    if (ps->rank != 2 || (ps->dims[1] >= 0 && ps->dims[1] != 2) || (r >= 0 && pr >= 0 && pr != r))
      return fail(sctx, "PadGrad paddings must have shape [rank, 2] = [%d,2] for grad %s, got %s",
                  r, SHAPE_STR(*g), SHAPE_STR(*ps));
    if (r < 0 && pr >= 0 && pr <= FLOE_MAX_DIMS) r = (int)pr;
  }
  const FloeTensor *t = const_input(sctx, 1);
  int64_t pad[2 * FLOE_MAX_DIMS], n;
  FloeShape out = unknown_dims(r);
  if (!t || !tensor_ints(t, pad, 2 * FLOE_MAX_DIMS, &n) || r < 0 || n != 2 * r) {
    sctx->output_shapes[0] = out;
    return FLOE_OK;
  }
  for (int i = 0; i < r; i++) {
    int64_t b = pad[2 * i], a = pad[2 * i + 1], dim = g->rank >= 0 ? g->dims[i] : -1;
    int64_t in = dim - b - a;
    if (b < 0 || a < 0)
      return fail(sctx, "PadGrad paddings %s must be non-negative", INTS_STR(pad, (int)n));
    if (dim < 0) continue;
    if (in < 0 || (reflect && (a || b) && (b >= in || a >= in)))
      return fail(sctx, "PadGrad paddings %s do not fit grad %s in dimension %d: the input size "
                        "left (%lld) must be >= 0%s", INTS_STR(pad, (int)n), SHAPE_STR(*g), i,
                  (long long)in, reflect ? " and larger than each padding (REFLECT)" : "");
    out.dims[i] = in;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* grad's dims divided by the multiples (a constant vector), which must divide them. */
floe_code floe__shape_tile_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *g = &sctx->input_shapes[0];
  int64_t m[MAX_VEC], len;
  int n;
  bool known;
  floe_code c = const_vector(sctx, 1, "TileGrad multiples", m, &n, &known);
  if (c == FLOE_OK && !known) c = vector_len(sctx, 1, "TileGrad multiples", &len);
  if (c != FLOE_OK) return c;
  if (known) len = n;
  if (g->rank >= 0 && len >= 0 && len != g->rank)
    return fail(sctx, "TileGrad multiples has %lld elements for grad of shape %s",
                (long long)len, SHAPE_STR(*g));
  int r = g->rank >= 0 ? g->rank : len >= 0 && len <= FLOE_MAX_DIMS ? (int)len : -1;
  FloeShape out = unknown_dims(r);
  for (int i = 0; known && i < r; i++) {
    int64_t dim = g->rank >= 0 ? g->dims[i] : -1;
    if (m[i] < 1 || (dim >= 0 && dim % m[i] != 0))
      return fail(sctx, "TileGrad multiples %s do not divide grad %s: dimension %d needs a "
                        "multiple >= 1 that divides it", INTS_STR(m, n), SHAPE_STR(*g), i);
    if (dim >= 0) out.dims[i] = dim / m[i];
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

/* The shape attribute of the VarHandleOp feeding input 0, when it is one. */
floe_code floe__shape_read_variable(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeNode *src = sctx->node->inputs[0].node;
  const FloeAttrValue *v = src ? floe__attrs_get(&src->attrs, "shape") : NULL;
  sctx->output_shapes[0] =
      (src && strcmp(src->op->name, "VarHandleOp") == 0 && v && v->kind == FLOE_ATTR_SHAPE)
          ? v->u.shape
          : floe_shape_unknown();
  return FLOE_OK;
}

/* Merge: the shape every input agrees on (dims that differ become unknown); value_index is
 * a scalar. */
floe_code floe__shape_merge(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  FloeShape out = sctx->input_shapes[0];
  int n = sctx->node->num_inputs;
  for (int j = 1; j < n && out.rank >= 0; j++) {
    const FloeShape *in = &sctx->input_shapes[j];
    if (in->rank != out.rank) {
      out = unknown_rank();
      break;
    }
    for (int d = 0; d < out.rank; d++)
      if (in->dims[d] != out.dims[d]) out.dims[d] = -1;
  }
  sctx->output_shapes[0] = out;
  sctx->output_shapes[1] = floe_shape_scalar();
  return FLOE_OK;
}

/* ---- TensorArrays and stacks (ops_rnn.def) ---- */

/* a and b may describe one tensor: ranks and known dims agree. */
static bool shapes_compatible(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return false;
  return true;
}

/* What both a and b say (they are compatible). */
static FloeShape shape_merge(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0) return *b;
  FloeShape m = *a;
  for (int i = 0; b->rank >= 0 && i < m.rank; i++)
    if (m.dims[i] < 0) m.dims[i] = b->dims[i];
  return m;
}

static floe_code need_scalar(FloeShapeContext *sctx, int i, const char *what) {
  const FloeShape *s = &sctx->input_shapes[i];
  if (s->rank > 0)
    return fail(sctx, "%s %s must be a scalar, got shape %s", op_name(sctx), what,
                SHAPE_STR(*s));
  return FLOE_OK;
}

/* The element shape a reading op produces: its element_shape attribute merged with the
 * declaration of the TensorArray behind input 0. */
static floe_code ta_read_elem(FloeShapeContext *sctx, FloeShape *elem, int64_t *size) {
  FloeDType dt;
  FloeShape decl;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, size);
  const FloeAttrValue *v = attr_of(sctx, "element_shape", FLOE_ATTR_SHAPE);
  FloeShape own = v ? v->u.shape : unknown_rank();
  if (!shapes_compatible(&own, &decl))
    return fail(sctx, "%s element_shape %s contradicts the TensorArray's element shape %s",
                op_name(sctx), SHAPE_STR(own), SHAPE_STR(decl));
  *elem = shape_merge(&own, &decl);
  return FLOE_OK;
}

/* A value written as one element (or, rows, each row of it) must fit the declaration. */
static floe_code ta_check_value(FloeShapeContext *sctx, const FloeShape *value, bool rows) {
  FloeDType dt;
  FloeShape decl;
  int64_t size;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, &size);
  FloeShape elem = *value;
  if (rows && value->rank >= 0) {
    elem.rank = value->rank - 1;
    for (int i = 0; i < elem.rank; i++) elem.dims[i] = value->dims[i + 1];
  }
  if (!shapes_compatible(&elem, &decl))
    return fail(sctx, "%s: the value's %s %s does not match the TensorArray's element shape %s",
                op_name(sctx), rows ? "rows have shape" : "shape is", SHAPE_STR(elem),
                SHAPE_STR(decl));
  return FLOE_OK;
}

/* [n] ++ elem, or unknown when elem's rank is. */
static FloeShape rows_of(int64_t n, const FloeShape *elem) {
  if (elem->rank < 0 || elem->rank >= FLOE_MAX_DIMS) return unknown_rank();
  FloeShape s;
  s.rank = elem->rank + 1;
  s.dims[0] = n;
  for (int i = 0; i < elem->rank; i++) s.dims[i + 1] = elem->dims[i];
  return s;
}

floe_code floe__shape_tensor_array(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = need_scalar(sctx, 0, "size");
  if (c != FLOE_OK) return c;
  int64_t n;
  if (const_scalar(sctx, 0, &n) && n < 0)
    return fail(sctx, "TensorArrayV3 size must be >= 0, got %lld", (long long)n);
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_ta_write(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c;
  if ((c = need_scalar(sctx, 1, "index")) != FLOE_OK ||
      (c = need_scalar(sctx, 3, "flow_in")) != FLOE_OK ||
      (c = ta_check_value(sctx, &sctx->input_shapes[2], false)) != FLOE_OK)
    return c;
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_ta_read(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t size;
  floe_code c = need_scalar(sctx, 1, "index");
  if (c == FLOE_OK) c = ta_read_elem(sctx, &sctx->output_shapes[0], &size);
  return c;
}

floe_code floe__shape_ta_gather(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t n, size;
  FloeShape elem;
  floe_code c = vector_len(sctx, 1, "TensorArrayGatherV3 indices", &n);
  if (c == FLOE_OK) c = ta_read_elem(sctx, &elem, &size);
  if (c == FLOE_OK) sctx->output_shapes[0] = rows_of(n, &elem);
  return c;
}

floe_code floe__shape_ta_scatter(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t n;
  const FloeShape *v = &sctx->input_shapes[2];
  floe_code c = vector_len(sctx, 1, "TensorArrayScatterV3 indices", &n);
  if (c != FLOE_OK) return c;
  if (v->rank == 0)
    return fail(sctx, "TensorArrayScatterV3 value must have rank >= 1 (one row per index), "
                      "got a scalar");
  int64_t rows;
  if (v->rank > 0 && !merge_dim(n, v->dims[0], &rows))
    return fail(sctx, "TensorArrayScatterV3 has %lld indices but the value %s has %lld rows",
                (long long)n, SHAPE_STR(*v), (long long)v->dims[0]);
  if ((c = ta_check_value(sctx, v, true)) != FLOE_OK) return c;
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_ta_stack(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t size;
  FloeShape elem;
  floe_code c = ta_read_elem(sctx, &elem, &size);
  if (c == FLOE_OK) sctx->output_shapes[0] = rows_of(size, &elem);
  return c;
}

floe_code floe__shape_ta_concat(const FloeHostApi *host, FloeShapeContext *sctx) {
  FloeDType dt;
  FloeShape decl;
  int64_t size;
  floe__ta_static_info(sctx->node->inputs[0], &dt, &decl, &size);
  const FloeAttrValue *v = attr_of(sctx, "element_shape_except0", FLOE_ATTR_SHAPE);
  FloeShape rest = v ? v->u.shape : unknown_rank();
  if (decl.rank == 0)
    return fail(sctx, "TensorArrayConcatV3: the TensorArray holds scalars, which cannot be "
                      "concatenated (use TensorArrayStackV3)");
  if (decl.rank >= 1) {
    FloeShape tail = unknown_rank();
    tail.rank = decl.rank - 1;
    for (int i = 0; i < tail.rank; i++) tail.dims[i] = decl.dims[i + 1];
    if (!shapes_compatible(&rest, &tail))
      return fail(sctx, "TensorArrayConcatV3 element_shape_except0 %s contradicts the "
                        "TensorArray's element shape %s", SHAPE_STR(rest), SHAPE_STR(decl));
    rest = shape_merge(&rest, &tail);
  }
  sctx->output_shapes[0] = rows_of(-1, &rest);
  int64_t n = size;
  sctx->output_shapes[1] = floe_shape_make(1, &n);
  return FLOE_OK;
}

floe_code floe__shape_ta_split(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *v = &sctx->input_shapes[1], *l = &sctx->input_shapes[2];
  if (v->rank == 0)
    return fail(sctx, "TensorArraySplitV3 value must have rank >= 1 (its rows are cut into the "
                      "elements), got a scalar");
  if (l->rank >= 0 && l->rank != 1)
    return fail(sctx, "TensorArraySplitV3 lengths must be a vector (rows per element), got "
                      "shape %s", SHAPE_STR(*l));
  floe_code c = need_scalar(sctx, 3, "flow_in");
  if (c == FLOE_OK) sctx->output_shapes[0] = floe_shape_scalar();
  return c;
}

floe_code floe__shape_ta_unstack(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *v = &sctx->input_shapes[1];
  if (v->rank == 0)
    return fail(sctx, "TensorArrayUnstackV3 value must have rank >= 1 (its rows become the "
                      "elements), got a scalar");
  floe_code c = ta_check_value(sctx, v, true);
  if (c == FLOE_OK) sctx->output_shapes[0] = floe_shape_scalar();
  return c;
}

floe_code floe__shape_ta_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  set_all_outputs(sctx, floe_shape_scalar());
  return FLOE_OK;
}

floe_code floe__shape_stack_push(const FloeHostApi *host, FloeShapeContext *sctx) {
  sctx->output_shapes[0] = sctx->input_shapes[1];
  return FLOE_OK;
}

floe_code floe__shape_stack_pop(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr_of(sctx, "elem_shape", FLOE_ATTR_SHAPE);
  sctx->output_shapes[0] = v ? v->u.shape : unknown_rank();
  return FLOE_OK;
}

/* ---- recurrent cells (ops_rnn.def) ---- */

/* The sizes of an LSTM cell's operands, and w's rows (input + hidden). */
enum { LSTM_B, LSTM_I, LSTM_H, LSTM_NSIZES, LSTM_IH = LSTM_NSIZES, LSTM_NONE };

/* One operand: input index, name, layout, rank, and each dim as a size times a multiple. */
typedef struct LstmOperand {
  int input;
  const char *name, *layout;
  int rank;
  int size[2], mult[2];
} LstmOperand;

static const char *const lstm_size_names[LSTM_NSIZES] = {"batch", "input", "hidden"};

static const LstmOperand lstm_cell_operands[] = {
    {0, "x", "[batch, input]", 2, {LSTM_B, LSTM_I}, {1, 1}},
    {1, "h_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {2, "c_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {3, "w", "[input + hidden, 4 * hidden]", 2, {LSTM_IH, LSTM_H}, {1, 4}},
    {4, "b", "[4 * hidden]", 1, {LSTM_H, LSTM_NONE}, {4, 0}},
};

static const LstmOperand lstm_grad_operands[] = {
    {0, "x", "[batch, input]", 2, {LSTM_B, LSTM_I}, {1, 1}},
    {1, "h_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {2, "c_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {3, "w", "[input + hidden, 4 * hidden]", 2, {LSTM_IH, LSTM_H}, {1, 4}},
    {4, "c", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {5, "act", "[batch, 4 * hidden]", 2, {LSTM_B, LSTM_H}, {1, 4}},
    {6, "dh", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {7, "dc", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
};

static const LstmOperand lstm_rec_operands[] = {
    {0, "gates_x", "[batch, 4 * hidden]", 2, {LSTM_B, LSTM_H}, {1, 4}},
    {1, "h_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {2, "c_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {3, "w_h", "[hidden, 4 * hidden]", 2, {LSTM_H, LSTM_H}, {1, 4}},
};

/* w_h, with w_transposed: [4 * hidden, hidden]. */
static const LstmOperand lstm_w_h_transposed = {2, "w_h", "[4 * hidden, hidden] (w_transposed)",
                                                2, {LSTM_H, LSTM_H}, {4, 1}};

static const LstmOperand lstm_rec_grad_operands[] = {
    {0, "h_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {1, "c_prev", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {2, "w_h", "[hidden, 4 * hidden]", 2, {LSTM_H, LSTM_H}, {1, 4}},
    {3, "c", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {4, "act", "[batch, 4 * hidden]", 2, {LSTM_B, LSTM_H}, {1, 4}},
    {5, "dh", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
    {6, "dc", "[batch, hidden]", 2, {LSTM_B, LSTM_H}, {1, 1}},
};

/* Merges `got` (a dim of operand `in`: mult times size k; -1 unknown) into sizes[k], first
 * set by operand from[k]. */
static floe_code lstm_merge(FloeShapeContext *sctx, const char *in, int64_t got, int64_t mult,
                            int k, int64_t *sizes, const char **from) {
  if (got < 0) return FLOE_OK;
  if (got % mult)
    return fail(sctx, "%s: %s has %lld columns, not 4 * hidden (a multiple of 4): the gates i, "
                      "f, g, o take hidden columns each", op_name(sctx), in, (long long)got);
  int64_t v = got / mult;
  if (sizes[k] >= 0 && sizes[k] != v)
    return fail(sctx, "%s: %s gives %s size %lld but %s gives %lld", op_name(sctx), in,
                lstm_size_names[k], (long long)v, from[k], (long long)sizes[k]);
  if (sizes[k] < 0) {
    sizes[k] = v;
    from[k] = in;
  }
  return FLOE_OK;
}

/* Checks the operands' ranks and agreement and resolves batch, input and hidden sizes. */
static floe_code lstm_sizes(FloeShapeContext *sctx, const LstmOperand *ops, int n,
                            int64_t *sizes) {
  const char *from[LSTM_NSIZES] = {NULL, NULL, NULL};
  int64_t w_rows = -1;
  for (int k = 0; k < LSTM_NSIZES; k++) sizes[k] = -1;
  for (int j = 0; j < n; j++) {
    const FloeShape *s = &sctx->input_shapes[ops[j].input];
    if (s->rank >= 0 && s->rank != ops[j].rank)
      return fail(sctx, "%s: %s must have rank %d, %s, got shape %s", op_name(sctx),
                  ops[j].name, ops[j].rank, ops[j].layout, SHAPE_STR(*s));
  }
  for (int j = 0; j < n; j++) {
    const FloeShape *s = &sctx->input_shapes[ops[j].input];
    if (s->rank < 0) continue;
    for (int d = 0; d < s->rank; d++) {
      if (ops[j].size[d] == LSTM_IH) {
        w_rows = s->dims[d];
        continue;
      }
      floe_code c = lstm_merge(sctx, ops[j].name, s->dims[d], ops[j].mult[d], ops[j].size[d],
                               sizes, from);
      if (c != FLOE_OK) return c;
    }
  }
  if (w_rows < 0) return FLOE_OK;
  int64_t in = sizes[LSTM_I], hid = sizes[LSTM_H];
  if ((in >= 0 && hid >= 0 && in + hid != w_rows) || (in >= 0 && in > w_rows) ||
      (hid >= 0 && hid > w_rows))
    return fail(sctx, "%s: w has %lld rows but must have input + hidden = %s + %s rows (w is "
                      "[input + hidden, 4 * hidden]: x's weights, then h_prev's)",
                op_name(sctx), (long long)w_rows, in >= 0 ? INTS_STR(&in, 1) : "?",
                hid >= 0 ? INTS_STR(&hid, 1) : "?");
  if (in < 0 && hid >= 0) sizes[LSTM_I] = w_rows - hid;
  if (hid < 0 && in >= 0) sizes[LSTM_H] = w_rows - in;
  return FLOE_OK;
}

static int64_t times4(int64_t v) { return v >= 0 ? 4 * v : -1; }

/* Resolves the sizes from ops and sets the outputs, one letter each in `outs`: 'i' [batch,
 * input], 'h' [batch, hidden], 'g' [batch, 4 * hidden]. */
static floe_code lstm_outputs(FloeShapeContext *sctx, const LstmOperand *ops, int n,
                              const char *outs) {
  int64_t s[LSTM_NSIZES];
  floe_code c = lstm_sizes(sctx, ops, n, s);
  if (c != FLOE_OK) return c;
  for (int k = 0; outs[k]; k++) {
    int64_t d[2] = {s[LSTM_B], outs[k] == 'i'   ? s[LSTM_I]
                               : outs[k] == 'h' ? s[LSTM_H]
                                                : times4(s[LSTM_H])};
    sctx->output_shapes[k] = floe_shape_make(2, d);
  }
  return FLOE_OK;
}

floe_code floe__shape_lstm_cell(const FloeHostApi *host, FloeShapeContext *sctx) {
  return lstm_outputs(sctx, lstm_cell_operands, FLOE__ARRAY_LEN(lstm_cell_operands), "hhg");
}

floe_code floe__shape_lstm_cell_grad(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t s[LSTM_NSIZES];
  floe_code c = lstm_sizes(sctx, lstm_grad_operands, FLOE__ARRAY_LEN(lstm_grad_operands), s);
  if (c != FLOE_OK) return c;
  int64_t b = s[LSTM_B], in = s[LSTM_I], hid = s[LSTM_H];
  /* dw is shaped like w, whose rows may be known when input and hidden are not. */
  const FloeShape *w = &sctx->input_shapes[3];
  int64_t w_rows = in >= 0 && hid >= 0 ? in + hid : w->rank == 2 ? w->dims[0] : -1;
  int64_t bi[2] = {b, in}, bh[2] = {b, hid}, wd[2] = {w_rows, times4(hid)}, bd[1] = {wd[1]};
  sctx->output_shapes[0] = floe_shape_make(2, bi);
  sctx->output_shapes[1] = floe_shape_make(2, bh);
  sctx->output_shapes[2] = floe_shape_make(2, bh);
  sctx->output_shapes[3] = floe_shape_make(2, wd);
  sctx->output_shapes[4] = floe_shape_make(1, bd);
  return FLOE_OK;
}

floe_code floe__shape_lstm_cell_backprop(const FloeHostApi *host, FloeShapeContext *sctx) {
  return lstm_outputs(sctx, lstm_grad_operands, FLOE__ARRAY_LEN(lstm_grad_operands), "ihhg");
}

floe_code floe__shape_lstm_cell_recurrent(const FloeHostApi *host, FloeShapeContext *sctx) {
  return lstm_outputs(sctx, lstm_rec_operands, FLOE__ARRAY_LEN(lstm_rec_operands), "hhg");
}

floe_code floe__shape_lstm_cell_recurrent_backprop(const FloeHostApi *host,
                                                   FloeShapeContext *sctx) {
  LstmOperand ops[FLOE__ARRAY_LEN(lstm_rec_grad_operands)];
  memcpy(ops, lstm_rec_grad_operands, sizeof ops);
  if (attr_bool(sctx, "w_transposed")) ops[2] = lstm_w_h_transposed;
  return lstm_outputs(sctx, ops, FLOE__ARRAY_LEN(ops), "ghh");
}

/* ---- queues and readers (ops_data.def) ---- */

static bool is_queue_op(const FloeNode *n) {
  return n && n->op &&
         (strcmp(n->op->name, "FIFOQueueV2") == 0 ||
          strcmp(n->op->name, "PaddingFIFOQueueV2") == 0 ||
          strcmp(n->op->name, "RandomShuffleQueueV2") == 0);
}

floe_code floe__shape_queue(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *types = attr_of(sctx, "component_types", FLOE_ATTR_TYPE_LIST);
  const FloeAttrValue *shapes = attr_of(sctx, "shapes", FLOE_ATTR_SHAPE_LIST);
  size_t nc = types ? types->u.tlist.n : 0, ns = shapes ? shapes->u.slist.n : 0;
  bool padding = strcmp(op_name(sctx), "PaddingFIFOQueueV2") == 0;
  if (ns != 0 && ns != nc)
    return fail(sctx, "%zu shapes for %zu component types: give one shape per component, or "
                      "none", ns, nc);
  if (padding && ns == 0)
    return fail(sctx, "a PaddingFIFOQueueV2 needs one shape per component (dims may be -1: "
                      "they are padded)");
  for (size_t i = 0; i < ns; i++) {
    const FloeShape *s = &shapes->u.slist.v[i];
    if (padding && s->rank < 0)
      return fail(sctx, "shapes[%zu] has an unknown rank: a PaddingFIFOQueueV2 pads dims, "
                        "so it needs each component's rank", i);
    if (!padding && !fully_known(s))
      return fail(sctx, "shapes[%zu] = %s is not fully defined: a %s stores whole shapes "
                        "(a PaddingFIFOQueueV2 takes unknown dims)", i, SHAPE_STR(*s),
                  op_name(sctx));
  }
  int64_t cap = attr_int(sctx, "capacity", -1), min_after = attr_int(sctx, "min_after_dequeue", 0);
  if (cap == 0 || cap < -1)
    return fail(sctx, "capacity %lld: give a size >= 1, or -1 for an unbounded queue",
                (long long)cap);
  if (min_after < 0 || (cap > 0 && min_after >= cap))
    return fail(sctx, "min_after_dequeue %lld must be >= 0 and below the capacity %lld (a "
                      "dequeue waits for more than min_after_dequeue elements)",
                (long long)min_after, (long long)cap);
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

/* timeout_ms other than -1 (wait until done, closed or cancelled) is not implemented. */
static floe_code check_timeout(FloeShapeContext *sctx) {
  int64_t t = attr_int(sctx, "timeout_ms", -1);
  if (t == -1) return FLOE_OK;
  return floe_status_set(sctx->status, FLOE_UNIMPLEMENTED,
                         "timeout_ms = %lld: only -1 is implemented (a blocked queue operation "
                         "ends when it completes, when the queue closes or when its run is "
                         "cancelled: give the run a timeout with floe_session_run_opts)",
                         (long long)t);
}

/* Checks components against the queue op feeding input 0, when it is one; many: each
 * component is [n, element...]. */
floe_code floe__shape_queue_enqueue(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = check_timeout(sctx);
  if (c != FLOE_OK) return c;
  bool many = strcmp(op_name(sctx), "QueueEnqueueManyV2") == 0;
  int nc = sctx->node->num_inputs - 1;
  int64_t n = -1;
  for (int i = 0; many && i < nc; i++) {
    const FloeShape *s = &sctx->input_shapes[1 + i];
    if (s->rank == 0)
      return fail(sctx, "component %d is a scalar: enqueue_many takes [n, ...] components "
                        "(n elements)", i);
    if (s->rank > 0 && !merge_dim(n, s->dims[0], &n))
      return fail(sctx, "component %d has %lld elements (shape %s) but an earlier one has "
                        "%lld: every component needs the same first dimension", i,
                  (long long)s->dims[0], SHAPE_STR(*s), (long long)n);
  }
  const FloeNode *q = producer(sctx, 0);
  if (!is_queue_op(q)) return FLOE_OK;
  const FloeAttrValue *types = floe__attrs_get(&q->attrs, "component_types");
  const FloeAttrValue *shapes = floe__attrs_get(&q->attrs, "shapes");
  if (!types || types->kind != FLOE_ATTR_TYPE_LIST || (size_t)nc != types->u.tlist.n)
    return fail(sctx, "queue '%s' has %zu components; got %d", q->name,
                types ? types->u.tlist.n : 0, nc);
  for (int i = 0; i < nc; i++) {
    FloeDType dt = sctx->node->inputs[1 + i].node->out_dtypes[sctx->node->inputs[1 + i].index];
    if (dt != types->u.tlist.v[i])
      return fail(sctx, "queue '%s': component %d is %s, expected %s", q->name, i,
                  floe_dtype_name(dt), floe_dtype_name(types->u.tlist.v[i]));
    if (!shapes || shapes->kind != FLOE_ATTR_SHAPE_LIST || shapes->u.slist.n == 0) continue;
    FloeShape got = sctx->input_shapes[1 + i];
    if (many && got.rank > 0) {
      memmove(got.dims, got.dims + 1, (size_t)(got.rank - 1) * sizeof got.dims[0]);
      got.rank--;
    }
    if (!shapes_compatible(&got, &shapes->u.slist.v[i]))
      return fail(sctx, "queue '%s': component %d has %sshape %s, expected %s", q->name, i,
                  many ? "element " : "", SHAPE_STR(got), SHAPE_STR(shapes->u.slist.v[i]));
  }
  return FLOE_OK;
}

/* The queue's element shapes (from the queue op feeding input 0), with a leading batch
 * dim for many / up_to. */
floe_code floe__shape_queue_dequeue(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = check_timeout(sctx);
  if (c != FLOE_OK) return c;
  const char *op = op_name(sctx);
  bool batched = strcmp(op, "QueueDequeueV2") != 0;
  int64_t n = -1;
  if (batched && sctx->input_shapes[1].rank > 0)
    return fail(sctx, "n must be a scalar, got shape %s", SHAPE_STR(sctx->input_shapes[1]));
  if (batched && const_scalar(sctx, 1, &n) && n < 0)
    return fail(sctx, "n = %lld: dequeue at least 0 elements", (long long)n);
  if (strcmp(op, "QueueDequeueUpToV2") == 0) n = -1; /* fewer at the end */
  const FloeNode *q = producer(sctx, 0);
  const FloeAttrValue *types = is_queue_op(q) ? floe__attrs_get(&q->attrs, "component_types") : NULL;
  const FloeAttrValue *shapes = is_queue_op(q) ? floe__attrs_get(&q->attrs, "shapes") : NULL;
  const FloeAttrValue *mine = attr_of(sctx, "component_types", FLOE_ATTR_TYPE_LIST);
  if (types && mine && !floe__attr_value_equal(types, mine)) {
    char a[128], b[128];
    return fail(sctx, "component_types %s differ from those of queue '%s', %s",
                floe__attr_value_str(mine, a, sizeof a), q->name,
                floe__attr_value_str(types, b, sizeof b));
  }
  for (int i = 0; i < sctx->node->num_outputs; i++) {
    FloeShape s = unknown_rank();
    if (shapes && shapes->kind == FLOE_ATTR_SHAPE_LIST && (size_t)i < shapes->u.slist.n)
      s = shapes->u.slist.v[i];
    if (batched) {
      if (s.rank >= 0 && s.rank < FLOE_MAX_DIMS) {
        memmove(s.dims + 1, s.dims, (size_t)s.rank * sizeof s.dims[0]);
        s.rank++;
        s.dims[0] = n;
      } else {
        s = unknown_rank();
      }
    }
    sctx->output_shapes[i] = s;
  }
  return FLOE_OK;
}

floe_code floe__shape_reader(const FloeHostApi *host, FloeShapeContext *sctx) {
  const char *files = attr_string(sctx, "files", "");
  if (!files[0]) return fail(sctx, "files is empty: give one or more paths separated by ';'");
  if (attr_int(sctx, "num_epochs", 1) < 0)
    return fail(sctx, "num_epochs %lld: give 1 or more (0: read the files again without end)",
                (long long)attr_int(sctx, "num_epochs", 1));
  if (attr_int(sctx, "skip_header_lines", 0) < 0 || attr_int(sctx, "max_records", -1) < -1)
    return fail(sctx, "skip_header_lines must be >= 0 and max_records >= -1");
  if (strcmp(op_name(sctx), "FixedLengthRecordReaderV2") == 0) {
    int64_t rb = attr_int(sctx, "record_bytes", 0), hb = attr_int(sctx, "header_bytes", 0);
    int64_t fb = attr_int(sctx, "footer_bytes", 0), hop = attr_int(sctx, "hop_bytes", 0);
    if (rb < 1 || hb < 0 || fb < 0 || hop < 0)
      return fail(sctx, "record_bytes %lld must be >= 1 and header_bytes %lld, footer_bytes "
                        "%lld, hop_bytes %lld >= 0", (long long)rb, (long long)hb,
                  (long long)fb, (long long)hop);
    const FloeAttrValue *dt = attr_of(sctx, "dtype", FLOE_ATTR_TYPE);
    const FloeAttrValue *sh = attr_of(sctx, "shape", FLOE_ATTR_SHAPE);
    size_t es = dt ? floe_dtype_size(dt->u.type) : 1;
    if (sh && sh->u.shape.rank >= 0) {
      int64_t k;
      if (!fully_known(&sh->u.shape) || !known_product(&sh->u.shape, &k))
        return fail(sctx, "shape %s is not fully defined: a record is record_bytes bytes",
                    SHAPE_STR(sh->u.shape));
      if (k * (int64_t)es != rb)
        return fail(sctx, "shape %s of %s is %lld bytes, but record_bytes is %lld",
                    SHAPE_STR(sh->u.shape), dt ? floe_dtype_name(dt->u.type) : "u8",
                    (long long)(k * (int64_t)es), (long long)rb);
    } else if (es == 0 || rb % (int64_t)es != 0) {
      return fail(sctx, "record_bytes %lld is not a whole number of %s elements",
                  (long long)rb, dt ? floe_dtype_name(dt->u.type) : "u8");
    }
  }
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_reader_read(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *types = attr_of(sctx, "dtypes", FLOE_ATTR_TYPE_LIST);
  const FloeAttrValue *shapes = attr_of(sctx, "shapes", FLOE_ATTR_SHAPE_LIST);
  int64_t nr = attr_int(sctx, "N", 1);
  size_t nt = types ? types->u.tlist.n : 0, ns = shapes ? shapes->u.slist.n : 0;
  if ((int64_t)nt != nr)
    return fail(sctx, "%zu dtypes for %lld readers: give one per reader", nt, (long long)nr);
  if (ns != 0 && ns != nt)
    return fail(sctx, "%zu shapes for %lld readers: give one per reader, or none", ns,
                (long long)nr);
  bool up_to = strcmp(op_name(sctx), "ReaderReadUpTo") == 0;
  if (up_to && sctx->input_shapes[nr].rank > 0)
    return fail(sctx, "num_records must be a scalar, got shape %s",
                SHAPE_STR(sctx->input_shapes[nr]));
  sctx->output_shapes[0] = up_to ? unknown_dims(1) : floe_shape_scalar();
  for (size_t i = 0; i < nt; i++) {
    FloeShape s = i < ns ? shapes->u.slist.v[i] : unknown_rank();
    if (up_to) {
      if (s.rank >= 0 && s.rank < FLOE_MAX_DIMS) {
        memmove(s.dims + 1, s.dims, (size_t)s.rank * sizeof s.dims[0]);
        s.rank++;
        s.dims[0] = -1;
      } else {
        s = unknown_rank();
      }
    }
    sctx->output_shapes[1 + i] = s;
  }
  return FLOE_OK;
}

/* ---- candidate sampling ---- */

floe_code floe__shape_candidate_sampler(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeShape *t = &sctx->input_shapes[0];
  int64_t num_true = attr_int(sctx, "num_true", 1), k = attr_int(sctx, "num_sampled", 1);
  int64_t range = attr_int(sctx, "range_max", 1);
  if (range <= 0 || k <= 0 || num_true <= 0)
    return fail(sctx, "range_max (%lld), num_sampled (%lld) and num_true (%lld) must be >= 1",
                (long long)range, (long long)k, (long long)num_true);
  if (attr_bool(sctx, "unique") && k > range)
    return fail(sctx, "num_sampled %lld is more than range_max %lld with unique=true: sample "
                      "fewer, or set unique=false", (long long)k, (long long)range);
  if (t->rank >= 0 && t->rank != 2)
    return fail(sctx, "true_classes must be [batch, num_true], got %s", SHAPE_STR(*t));
  if (t->rank == 2 && t->dims[1] >= 0 && t->dims[1] != num_true)
    return fail(sctx, "true_classes %s has %lld columns, but num_true is %lld", SHAPE_STR(*t),
                (long long)t->dims[1], (long long)num_true);
  FloeShape s = unknown_dims(1);
  s.dims[0] = k;
  sctx->output_shapes[0] = s;
  sctx->output_shapes[2] = s;
  sctx->output_shapes[1] = unknown_dims(2);
  sctx->output_shapes[1].dims[0] = t->rank == 2 ? t->dims[0] : FLOE_DIM_UNKNOWN;
  sctx->output_shapes[1].dims[1] = num_true;
  return FLOE_OK;
}
