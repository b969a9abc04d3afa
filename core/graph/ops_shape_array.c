/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_array.c - shape functions of the standard set's shape and data-movement ops:
 * Reshape, Transpose, Concat, Split, Slice, StridedSlice, Gather, Pad, Tile, Squeeze,
 * ExpandDims, Fill and the ops whose output shape is an input's value. A constant input (or,
 * for a shape-valued input, a Shape node) is read to resolve the output.
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* ---- shapes and data movement ---- */

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
    sctx->output_shapes[0] =
        unknown_dims(in->rank >= 0 ? in->rank : len > FLOE_MAX_DIMS ? -1 : (int)len);
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

/* Output 0: values inputs [0, nvals) joined along axis (have_axis false: not known yet);
 * what: the op's name in messages. */
static floe_code concat_shape(FloeShapeContext *sctx, int nvals, bool have_axis, int64_t axis,
                              const char *what) {
  const FloeShape *vals = sctx->input_shapes;
  int rank = -1, first = -1;
  for (int i = 0; i < nvals; i++) {
    if (vals[i].rank < 0) continue;
    if (rank < 0) {
      rank = vals[i].rank;
      first = i;
    } else if (vals[i].rank != rank) {
      return fail(sctx, "%s values[%d] %s and values[%d] %s have different ranks", what, first,
                  SHAPE_STR(vals[first]), i, SHAPE_STR(vals[i]));
    }
  }
  if (rank == 0)
    return fail(sctx, "%s cannot join scalars (values[%d] is a scalar)", what, first);
  if (rank < 0) {
    sctx->output_shapes[0] = unknown_rank();
    return FLOE_OK;
  }
  if (!have_axis) {
    sctx->output_shapes[0] = unknown_dims(rank);
    return FLOE_OK;
  }
  int ax = 0;
  char axis_what[64];
  snprintf(axis_what, sizeof axis_what, "%s axis", what);
  floe_code c = norm_axis(sctx, axis, rank, axis_what, &vals[first], &ax);
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
        return fail(sctx, "%s values[%d] %s does not match values[%d] %s in dimension %d "
                          "(only axis %d may differ)", what, first, SHAPE_STR(vals[first]), i,
                    SHAPE_STR(vals[i]), d, ax);
    }
    if (out.dims[ax] >= 0)
      out.dims[ax] = vals[i].dims[ax] >= 0 ? out.dims[ax] + vals[i].dims[ax] : FLOE_DIM_UNKNOWN;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_concat(const FloeHostApi *host, FloeShapeContext *sctx) {
  int nvals = sctx->node->num_inputs - 1;
  int64_t axis;
  bool known = const_scalar(sctx, nvals, &axis);
  return concat_shape(sctx, nvals, known, known ? axis : 0, "Concat");
}

/* _FusedElementwise: x's shape, x being its K first inputs joined along concat_axis when
 * K > 1 (a Concat the elementwise pass took in). */
floe_code floe__shape_fused_elementwise(const FloeHostApi *host, FloeShapeContext *sctx) {
  int64_t k = attr_int(sctx, "K", 1);
  if (k < 1 || k > sctx->node->num_inputs)
    return fail(sctx, "_FusedElementwise: K = %lld, but it has %d inputs", (long long)k,
                sctx->node->num_inputs);
  if (k == 1) {
    sctx->output_shapes[0] = sctx->input_shapes[0];
    return FLOE_OK;
  }
  return concat_shape(sctx, (int)k, true, attr_int(sctx, "concat_axis", 0),
                      "_FusedElementwise's concatenation:");
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
    int r = in->rank >= 0 ? in->rank
            : ps->rank == 2 && ps->dims[0] >= 0 && ps->dims[0] <= FLOE_MAX_DIMS
                ? (int)ps->dims[0]
                : -1;
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
  int n = 0; /* set when known; inlined, GCC cannot tell */
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
