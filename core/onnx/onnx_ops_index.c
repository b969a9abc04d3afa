/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_index.c - ONNX indexing and data-movement ops (GatherElements, Scatter*, GatherND,
 * Trilu, CumSum, Range, EyeLike, NonZero, Compress, TopK, OneHot, ReverseSequence, Unique,
 * DepthToSpace, SpaceToDepth) as Floe ops (ops_index.def) or exact compositions of them.
 * Einsum is in onnx_ops_einsum.c. */
#include <string.h>

#include "onnx_internal.h"

static int present(const FloeOutput *in, int nin, int i) { return i < nin && ox_present(in[i]); }

static FloeOutput reshape(OxCtx *c, FloeOutput x, const int64_t *dims, int r) {
  return ox_binary(c, "Reshape", x, ox_const_i64(c, dims, r));
}

/* A scalar of x's first element (a 0-D or one-element input), as i64. */
static FloeOutput scalar_i64(OxCtx *c, FloeOutput x) {
  return reshape(c, ox_cast(c, x, FLOE_I64), NULL, 0);
}

/* The reduction attribute of the scatters, checked ("none" when absent). */
static const char *reduction(OxCtx *c, const Onnx__NodeProto *n, char *buf, size_t cap) {
  const char *r = ox_str(n, "reduction", "none", buf, cap);
  static const char *const ok[] = {"none", "add", "mul", "max", "min"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (!strcmp(r, ok[i])) return r;
  ox_fail(c, FLOE_INVALID_ARGUMENT, "reduction '%s' is not one of none, add, mul, max, min", r);
  return NULL;
}

/* Op `op` on (x, indices[, updates]) with an axis in [-rank, rank) made non-negative. */
static floe_code by_axis(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                         FloeOutput *out, const char *op, int with_reduction) {
  floe_code rc = ox_need(c, in, nin, with_reduction ? 3 : 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the data"), axis;
  if (r < 0) return floe_status_code(c->st);
  if ((rc = ox_axis(c, ox_int(n, "axis", 0), r, "axis", &axis)) != FLOE_OK) return rc;
  char buf[16];
  const char *red = with_reduction ? reduction(c, n, buf, sizeof buf) : "none";
  if (!red) return floe_status_code(c->st);
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  if (with_reduction) floe_node_add_input(b, in[2]);
  floe_node_set_attr_int(b, "axis", axis);
  if (with_reduction) floe_node_set_attr_string(b, "reduction", red);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_gather_elements) {
  OX_UNUSED;
  return by_axis(c, n, in, nin, out, "GatherElements", 0);
}

/* Scatter (opsets 9-10) is ScatterElements without a reduction. */
OX_MAP(map_scatter_elements) {
  OX_UNUSED;
  return by_axis(c, n, in, nin, out, "ScatterElements", 1);
}

OX_MAP(map_gather_nd) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "GatherND");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_set_attr_int(b, "batch_dims", ox_int(n, "batch_dims", 0));
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_scatter_nd) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  char buf[16];
  const char *red = reduction(c, n, buf, sizeof buf);
  if (!red) return floe_status_code(c->st);
  FloeNodeBuilder *b = ox_begin(c, "ScatterND");
  for (int i = 0; i < 3; i++) floe_node_add_input(b, in[i]);
  floe_node_set_attr_string(b, "reduction", red);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* --- matrices and sequences --- */

static FloeOutput trilu(OxCtx *c, FloeOutput x, FloeOutput k, int upper) {
  FloeNodeBuilder *b = ox_begin(c, "Trilu");
  floe_node_add_input(b, x);
  floe_node_add_input(b, k);
  floe_node_set_attr_bool(b, "upper", upper);
  return ox_finish(c, b);
}

OX_MAP(map_trilu) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeOutput k = present(in, nin, 1) ? scalar_i64(c, in[1]) : ox_scalar_i64(c, 0);
  out[0] = trilu(c, in[0], k, ox_int(n, "upper", 1) != 0);
  return FLOE_OK;
}

OX_MAP(map_cumsum) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "Cumsum");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, scalar_i64(c, in[1]));
  floe_node_set_attr_bool(b, "exclusive", ox_int(n, "exclusive", 0) != 0);
  floe_node_set_attr_bool(b, "reverse", ox_int(n, "reverse", 0) != 0);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_range) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  FloeNodeBuilder *b = ox_begin(c, "Range");
  for (int i = 0; i < 3; i++) floe_node_add_input(b, in[i]);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* The dims of x as an i64 vector: a constant when every dim is known (so what is built from
 * it folds while importing), else Shape(x). */
static FloeOutput dims_of(OxCtx *c, FloeOutput x) {
  FloeShape s = ox_shape(x);
  int known = s.rank >= 0;
  for (int i = 0; known && i < s.rank; i++) known = s.dims[i] >= 0;
  if (known) return ox_const_i64(c, s.dims, s.rank);
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  return ox_finish(c, b);
}

/* EyeLike: ones on the k-th diagonal, as triu(ones, k) != triu(ones, k + 1). */
OX_MAP(map_eye_like) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  if (r != 2) return ox_fail(c, FLOE_INVALID_ARGUMENT, "the input must be 2-D, got rank %d", r);
  FloeDType dt = ox_dtype(in[0]);
  const Onnx__AttributeProto *da = ox_attr(n, "dtype");
  if (da && da->has_i) {
    dt = floe__onnx_dtype((int32_t)da->i);
    if (dt == FLOE_DTYPE_INVALID)
      return ox_fail(c, FLOE_UNIMPLEMENTED, "dtype %s has no Floe equivalent",
                     floe__onnx_dtype_name((int32_t)da->i));
  }
  int64_t k = ox_int(n, "k", 0);
  k = k > INT64_MAX / 2 ? INT64_MAX / 2 : k < INT64_MIN / 2 ? INT64_MIN / 2 : k;
  FloeNodeBuilder *b = ox_begin(c, "Fill");
  floe_node_add_input(b, dims_of(c, in[0]));
  floe_node_add_input(b, ox_scalar(c, FLOE_U8, 1));
  FloeOutput ones = ox_finish(c, b);
  FloeOutput diag = ox_binary(c, "NotEqual", trilu(c, ones, ox_scalar_i64(c, k), 1),
                              trilu(c, ones, ox_scalar_i64(c, k + 1), 1));
  out[0] = ox_cast(c, diag, dt);
  return FLOE_OK;
}

OX_MAP(map_reverse_sequence) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input"), bd, td;
  if (r < 0) return floe_status_code(c->st);
  if ((rc = ox_axis(c, ox_int(n, "batch_axis", 1), r, "batch_axis", &bd)) != FLOE_OK ||
      (rc = ox_axis(c, ox_int(n, "time_axis", 0), r, "time_axis", &td)) != FLOE_OK)
    return rc;
  if (bd == td) return ox_fail(c, FLOE_INVALID_ARGUMENT, "batch_axis and time_axis are equal");
  FloeNodeBuilder *b = ox_begin(c, "ReverseSequence");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_set_attr_int(b, "seq_dim", td);
  floe_node_set_attr_int(b, "batch_dim", bd);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* --- value-dependent sizes --- */

OX_MAP(map_non_zero) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  out[0] = ox_unary(c, "NonZero", in[0]);
  return FLOE_OK;
}

/* Compress: the positions where condition holds, gathered along axis (of the flattened input
 * without one). */
OX_MAP(map_compress) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int64_t flat = -1;
  FloeOutput x = in[0];
  int axis = 0;
  if (ox_attr(n, "axis")) {
    int r = ox_rank(c, x, "the input");
    if (r < 0) return floe_status_code(c->st);
    if ((rc = ox_axis(c, ox_int(n, "axis", 0), r, "axis", &axis)) != FLOE_OK) return rc;
  } else {
    x = reshape(c, x, &flat, 1);
  }
  FloeOutput idx = reshape(c, ox_unary(c, "NonZero", ox_cast(c, in[1], FLOE_BOOL)), &flat, 1);
  FloeNodeBuilder *b = ox_begin(c, "Gather");
  floe_node_add_input(b, x);
  floe_node_add_input(b, idx);
  floe_node_set_attr_int(b, "axis", axis);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_top_k) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, c->opset < 10 ? 1 : 2);
  if (rc != FLOE_OK) return rc;
  FloeOutput k = c->opset < 10 ? ox_scalar_i64(c, ox_int(n, "k", -1)) : scalar_i64(c, in[1]);
  if (c->opset < 10 && !ox_attr(n, "k"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute 'k' is required");
  FloeNodeBuilder *b = ox_begin(c, "TopK");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, k);
  floe_node_set_attr_int(b, "axis", ox_int(n, "axis", -1));
  floe_node_set_attr_bool(b, "largest", ox_int(n, "largest", 1) != 0);
  floe_node_set_attr_bool(b, "sorted", ox_int(n, "sorted", 1) != 0);
  FloeNode *node = ox_finish_node(c, b);
  for (int i = 0; node && i < nout && i < 2; i++) out[i] = floe_out(node, i);
  return ox_check(c);
}

OX_MAP(map_unique) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeOutput x = in[0];
  int axis = 0;
  if (ox_attr(n, "axis")) {
    int r = ox_rank(c, x, "the input");
    if (r < 0) return floe_status_code(c->st);
    if ((rc = ox_axis(c, ox_int(n, "axis", 0), r, "axis", &axis)) != FLOE_OK) return rc;
  } else {
    int64_t flat = -1;
    x = reshape(c, x, &flat, 1);
  }
  FloeNodeBuilder *b = ox_begin(c, "Unique");
  floe_node_add_input(b, x);
  floe_node_set_attr_int(b, "axis", axis);
  floe_node_set_attr_bool(b, "sorted", ox_int(n, "sorted", 1) != 0);
  FloeNode *node = ox_finish_node(c, b);
  for (int i = 0; node && i < nout && i < 4; i++) out[i] = floe_out(node, i);
  return ox_check(c);
}

/* OneHot: indices (any numeric type, negative ones counted from depth) through Floe's
 * OneHot, whose out-of-range indices give all-off rows as ONNX's do. */
OX_MAP(map_one_hot) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the indices");
  if (r < 0) return floe_status_code(c->st);
  int64_t axis = ox_int(n, "axis", -1);
  if (axis < -r - 1 || axis > r)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "axis %lld is outside [%d, %d]", (long long)axis,
                   -r - 1, r);
  if (axis < 0) axis += r + 1;
  FloeOutput depth = scalar_i64(c, in[1]);
  FloeOutput idx = ox_cast(c, in[0], FLOE_I64);
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, ox_binary(c, "Less", idx, ox_scalar_i64(c, 0)));
  floe_node_add_input(b, ox_binary(c, "Add", idx, depth));
  floe_node_add_input(b, idx);
  idx = ox_finish(c, b);
  FloeOutput vals[2];
  for (int i = 0; i < 2; i++) {
    b = ox_begin(c, "Gather");
    floe_node_add_input(b, reshape(c, in[2], (int64_t[]){-1}, 1));
    floe_node_add_input(b, ox_scalar_i64(c, i));
    vals[i] = ox_finish(c, b);
  }
  b = ox_begin(c, "OneHot");
  floe_node_add_input(b, idx);
  floe_node_add_input(b, ox_cast(c, depth, FLOE_I32));
  floe_node_add_input(b, vals[1]);
  floe_node_add_input(b, vals[0]);
  floe_node_set_attr_int(b, "axis", axis == r ? -1 : axis);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* --- DepthToSpace and SpaceToDepth: a reshape, a transpose and a reshape --- */

/* Dim i of x as a one-element i64 vector (a constant when known). */
static FloeOutput dim_of(OxCtx *c, FloeOutput x, int i) {
  FloeShape s = ox_shape(x);
  if (s.rank > i && s.dims[i] >= 0) return ox_const_i64(c, &s.dims[i], 1);
  int64_t be = i, sz = 1;
  FloeNodeBuilder *b = ox_begin(c, "Slice");
  floe_node_add_input(b, dims_of(c, x));
  floe_node_add_input(b, ox_const_i64(c, &be, 1));
  floe_node_add_input(b, ox_const_i64(c, &sz, 1));
  return ox_finish(c, b);
}

static FloeOutput concat_dims(OxCtx *c, FloeOutput *parts, int k) {
  FloeNodeBuilder *b = ox_begin(c, "Concat");
  floe_node_add_input_list(b, parts, k);
  floe_node_add_input(b, ox_scalar_i32(c, 0));
  return ox_finish(c, b);
}

/* y = reshape(transpose(reshape(x, s6), perm), s4); the shapes are i64 vectors. */
static FloeOutput shuffle(OxCtx *c, FloeOutput x, FloeOutput s6, const int64_t *perm,
                          FloeOutput s4) {
  FloeOutput t = ox_binary(c, "Transpose", ox_binary(c, "Reshape", x, s6), ox_const_i64(c, perm, 6));
  return ox_binary(c, "Reshape", t, s4);
}

static floe_code space_depth(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                             FloeOutput *out, int to_space) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  if (r != 4) return ox_fail(c, FLOE_INVALID_ARGUMENT, "the input must be 4-D (N, C, H, W)");
  int64_t bs = ox_int(n, "blocksize", 0);
  if (bs < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "blocksize must be >= 1");
  char mbuf[8];
  const char *mode = to_space ? ox_str(n, "mode", "DCR", mbuf, sizeof mbuf) : "DCR";
  int crd = !strcmp(mode, "CRD");
  if (!crd && strcmp(mode, "DCR"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "mode must be DCR or CRD, got '%s'", mode);
  FloeShape s = ox_shape(in[0]);
  int64_t bb = bs * bs;
  if (to_space && s.dims[1] >= 0 && s.dims[1] % bb)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "channels %lld are not a multiple of blocksize^2",
                   (long long)s.dims[1]);
  for (int i = 2; !to_space && i < 4; i++)
    if (s.dims[i] >= 0 && s.dims[i] % bs)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "dim %d (%lld) is not a multiple of blocksize", i,
                     (long long)s.dims[i]);
  FloeOutput N = dim_of(c, in[0], 0), C = dim_of(c, in[0], 1), H = dim_of(c, in[0], 2),
             W = dim_of(c, in[0], 3), B = ox_const_i64(c, &bs, 1), BB = ox_const_i64(c, &bb, 1);
  if (to_space) {
    FloeOutput Cb = ox_binary(c, "Div", C, BB);
    FloeOutput o4[4] = {N, Cb, ox_binary(c, "Mul", H, B), ox_binary(c, "Mul", W, B)};
    FloeOutput dcr[6] = {N, B, B, Cb, H, W}, crd6[6] = {N, Cb, B, B, H, W};
    static const int64_t p_dcr[6] = {0, 3, 4, 1, 5, 2}, p_crd[6] = {0, 1, 4, 2, 5, 3};
    out[0] = shuffle(c, in[0], concat_dims(c, crd ? crd6 : dcr, 6), crd ? p_crd : p_dcr,
                     concat_dims(c, o4, 4));
  } else {
    FloeOutput Hb = ox_binary(c, "Div", H, B), Wb = ox_binary(c, "Div", W, B);
    FloeOutput s6[6] = {N, C, Hb, B, Wb, B}, o4[4] = {N, ox_binary(c, "Mul", C, BB), Hb, Wb};
    static const int64_t perm[6] = {0, 3, 5, 1, 2, 4};
    out[0] = shuffle(c, in[0], concat_dims(c, s6, 6), perm, concat_dims(c, o4, 4));
  }
  return ox_check(c);
}

OX_MAP(map_depth_to_space) {
  (void)nout;
  return space_depth(c, n, in, nin, out, 1);
}

OX_MAP(map_space_to_depth) {
  (void)nout;
  return space_depth(c, n, in, nin, out, 0);
}

const OxOp floe__onnx_ops_index[] = {
    {"", "GatherElements", map_gather_elements},
    {"", "ScatterElements", map_scatter_elements},
    {"", "Scatter", map_scatter_elements},
    {"", "GatherND", map_gather_nd},
    {"", "ScatterND", map_scatter_nd},
    {"", "Trilu", map_trilu},
    {"", "CumSum", map_cumsum},
    {"", "Range", map_range},
    {"", "EyeLike", map_eye_like},
    {"", "ReverseSequence", map_reverse_sequence},
    {"", "NonZero", map_non_zero},
    {"", "Compress", map_compress},
    {"", "TopK", map_top_k},
    {"", "Unique", map_unique},
    {"", "OneHot", map_one_hot},
    {"", "DepthToSpace", map_depth_to_space},
    {"", "SpaceToDepth", map_space_to_depth},
    {"", "Einsum", floe__onnx_map_einsum},
    {NULL, NULL, NULL},
};
