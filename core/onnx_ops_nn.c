/* onnx_ops_nn.c - ONNX convolution, pooling and normalisation as Floe ops. ONNX is NCHW with
 * OIHW filters: convolutions run as Floe's NCHW Conv2D on a transposed (HWIO) filter; 1-D
 * convolutions and pools run as 2-D ones with a height of 1. */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define MAP(fn)                                                                                \
  static floe_code fn(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,      \
                      FloeOutput *out, int nout)
#define UNUSED_ARGS (void)n, (void)in, (void)nin, (void)out, (void)nout

static floe_code need(OxCtx *c, const FloeOutput *in, int nin, int min) {
  if (nin < min)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "needs at least %d inputs, has %d", min, nin);
  for (int i = 0; i < min; i++)
    if (!ox_present(in[i]))
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is required but empty", i);
  return FLOE_OK;
}

static FloeOutput expand_dims(OxCtx *c, FloeOutput x, int axis) {
  FloeNodeBuilder *b = ox_begin(c, "ExpandDims");
  floe_node_add_input(b, x);
  floe_node_set_attr_int(b, "axis", axis);
  return ox_finish(c, b);
}

static FloeOutput squeeze(OxCtx *c, FloeOutput x, int axis) {
  int64_t a = axis;
  FloeNodeBuilder *b = ox_begin(c, "Squeeze");
  floe_node_add_input(b, x);
  floe_node_set_attr_int_list(b, "squeeze_dims", &a, 1);
  return ox_finish(c, b);
}

/* The spatial geometry of a conv or pool: kernel, strides, dilations and explicit pads (begin
 * then end per spatial dim), auto_pad resolved against the input's known spatial size. */
typedef struct Geom {
  int nsp; /* spatial dims: 1 or 2 */
  int64_t k[2], s[2], d[2], pb[2], pe[2];
  int ceil_mode;
} Geom;

static floe_code geometry(OxCtx *c, const Onnx__NodeProto *n, FloeShape xs, const int64_t *kernel,
                          Geom *g) {
  g->nsp = xs.rank - 2;
  if (g->nsp < 1 || g->nsp > 2)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "%d spatial dims (Floe runs 1 and 2)", g->nsp);
  const int64_t *v;
  int k;
  for (int i = 0; i < g->nsp; i++) {
    g->k[i] = kernel[i];
    g->s[i] = g->d[i] = 1;
    g->pb[i] = g->pe[i] = 0;
  }
  if ((k = ox_ints(n, "strides", &v)) >= 0) {
    if (k != g->nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "strides has %d values", k);
    for (int i = 0; i < k; i++) g->s[i] = v[i];
  }
  if ((k = ox_ints(n, "dilations", &v)) >= 0) {
    if (k != g->nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "dilations has %d values", k);
    for (int i = 0; i < k; i++) g->d[i] = v[i];
  }
  if ((k = ox_ints(n, "pads", &v)) >= 0) {
    if (k != 2 * g->nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "pads has %d values", k);
    for (int i = 0; i < g->nsp; i++) {
      g->pb[i] = v[i];
      g->pe[i] = v[g->nsp + i];
    }
  }
  g->ceil_mode = (int)ox_int(n, "ceil_mode", 0);
  char buf[32];
  const char *ap = ox_str(n, "auto_pad", "NOTSET", buf, sizeof buf);
  if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int i = 0; i < g->nsp; i++) {
      int64_t in = xs.dims[2 + i];
      if (in < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "auto_pad on a spatial dim of unknown size");
      int64_t o = (in + g->s[i] - 1) / g->s[i];
      int64_t total = (o - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1 - in;
      if (total < 0) total = 0;
      int64_t small = total / 2, big = total - small;
      g->pb[i] = !strcmp(ap, "SAME_UPPER") ? small : big;
      g->pe[i] = total - g->pb[i];
    }
  } else if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) {
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
  }
  for (int i = 0; i < g->nsp; i++)
    if (g->s[i] < 1 || g->d[i] < 1 || g->k[i] < 1 || g->pb[i] < 0 || g->pe[i] < 0)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "kernel, strides, dilations or pads out of range");
  return FLOE_OK;
}

/* x padded in its spatial dims (NC + nsp) by the geometry's pads, plus extra at the end. */
static FloeOutput pad_spatial(OxCtx *c, FloeOutput x, const Geom *g, const int64_t *extra,
                              double value) {
  int r = g->nsp + 2, any = 0;
  int64_t pd[2] = {r, 2}, p[2 * (FLOE_MAX_DIMS)] = {0};
  for (int i = 0; i < g->nsp; i++) {
    p[2 * (2 + i)] = g->pb[i];
    p[2 * (2 + i) + 1] = g->pe[i] + (extra ? extra[i] : 0);
    any |= p[2 * (2 + i)] || p[2 * (2 + i) + 1];
  }
  if (!any) return x;
  FloeTensor *t = floe_tensor_new(FLOE_I64, 2, pd, NULL);
  if (t) memcpy(floe_tensor_data(t), p, (size_t)(2 * r) * sizeof(int64_t));
  FloeNodeBuilder *b = ox_begin(c, "Pad");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_const(c, t));
  floe_node_set_attr_float(b, "constant_value", value);
  return ox_finish(c, b);
}

static void list4(int64_t *l, int64_t h, int64_t w) {
  l[0] = l[1] = 1;
  l[2] = h;
  l[3] = w;
}

MAP(map_conv) {
  UNUSED_ARGS;
  floe_code rc = need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]), ws = ox_shape(in[1]);
  if (xs.rank < 3 || ws.rank != xs.rank)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "input rank %d / filter rank %d (needs known, equal, >= 3)",
                   xs.rank, ws.rank);
  int64_t kernel[2];
  const int64_t *ks;
  int nk = ox_ints(n, "kernel_shape", &ks);
  for (int i = 0; i < xs.rank - 2 && i < 2; i++) kernel[i] = nk > i ? ks[i] : ws.dims[2 + i];
  Geom g;
  if ((rc = geometry(c, n, xs, kernel, &g)) != FLOE_OK) return rc;
  int64_t groups = ox_int(n, "group", 1);
  FloeOutput x = in[0], w = in[1];
  if (g.nsp == 1) {
    x = expand_dims(c, x, 2);
    w = expand_dims(c, w, 2);
    g.nsp = 2;
    g.k[1] = g.k[0], g.s[1] = g.s[0], g.d[1] = g.d[0], g.pb[1] = g.pb[0], g.pe[1] = g.pe[0];
    g.k[0] = g.s[0] = g.d[0] = 1;
    g.pb[0] = g.pe[0] = 0;
  }
  x = pad_spatial(c, x, &g, NULL, 0.0);
  /* OIHW -> HWIO */
  int64_t perm[4] = {2, 3, 1, 0};
  w = ox_binary(c, "Transpose", w, ox_const_i64(c, perm, 4));
  int64_t strides[4], dil[4];
  list4(strides, g.s[0], g.s[1]);
  list4(dil, g.d[0], g.d[1]);
  FloeOutput *xg = NULL, *wg = NULL, *yg = NULL;
  FloeOutput y;
  if (groups < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "group %lld", (long long)groups);
  if (groups > 1) {
    xg = floe__calloc((size_t)groups, sizeof *xg);
    wg = floe__calloc((size_t)groups, sizeof *wg);
    yg = floe__calloc((size_t)groups, sizeof *yg);
    if (!xg || !wg || !yg) {
      floe__free(xg), floe__free(wg), floe__free(yg);
      return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
    }
    FloeNodeBuilder *b = ox_begin(c, "Split");
    floe_node_add_input(b, x);
    floe_node_add_input(b, ox_scalar_i32(c, 1));
    floe_node_set_attr_int(b, "num_split", groups);
    FloeNode *sx = ox_finish_node(c, b);
    b = ox_begin(c, "Split");
    floe_node_add_input(b, w);
    floe_node_add_input(b, ox_scalar_i32(c, 3));
    floe_node_set_attr_int(b, "num_split", groups);
    FloeNode *sw = ox_finish_node(c, b);
    for (int64_t i = 0; sx && sw && i < groups; i++) {
      b = ox_begin(c, "Conv2D");
      floe_node_add_input(b, floe_out(sx, (int)i));
      floe_node_add_input(b, floe_out(sw, (int)i));
      floe_node_set_attr_int_list(b, "strides", strides, 4);
      floe_node_set_attr_int_list(b, "dilations", dil, 4);
      floe_node_set_attr_string(b, "padding", "VALID");
      floe_node_set_attr_string(b, "data_format", "NCHW");
      yg[i] = ox_finish(c, b);
    }
    b = ox_begin(c, "Concat");
    floe_node_add_input_list(b, yg, (int)groups);
    floe_node_add_input(b, ox_scalar_i32(c, 1));
    y = ox_finish(c, b);
    floe__free(xg), floe__free(wg), floe__free(yg);
  } else {
    FloeNodeBuilder *b = ox_begin(c, "Conv2D");
    floe_node_add_input(b, x);
    floe_node_add_input(b, w);
    floe_node_set_attr_int_list(b, "strides", strides, 4);
    floe_node_set_attr_int_list(b, "dilations", dil, 4);
    floe_node_set_attr_string(b, "padding", "VALID");
    floe_node_set_attr_string(b, "data_format", "NCHW");
    y = ox_finish(c, b);
  }
  if (nin > 2 && ox_present(in[2])) {
    FloeNodeBuilder *b = ox_begin(c, "BiasAdd");
    floe_node_add_input(b, y);
    floe_node_add_input(b, in[2]);
    floe_node_set_attr_string(b, "data_format", "NCHW");
    y = ox_finish(c, b);
  }
  if (xs.rank == 3) y = squeeze(c, y, 2);
  out[0] = y;
  return FLOE_OK;
}

/* Max and average pooling; `global` pools the whole spatial extent. */
static floe_code pool(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                      FloeOutput *out, int nout, int is_max) {
  floe_code rc = need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  if (xs.rank < 3) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of rank %d", xs.rank);
  if (is_max && nout > 1 && n->n_output > 1 && *n->output[1])
    return ox_fail(c, FLOE_UNIMPLEMENTED, "MaxPool's Indices output");
  const int64_t *ks;
  int nk = ox_ints(n, "kernel_shape", &ks);
  if (nk != xs.rank - 2) return ox_fail(c, FLOE_INVALID_ARGUMENT, "kernel_shape has %d values", nk);
  Geom g;
  if ((rc = geometry(c, n, xs, ks, &g)) != FLOE_OK) return rc;
  for (int i = 0; i < g.nsp; i++)
    if (g.d[i] != 1) return ox_fail(c, FLOE_UNIMPLEMENTED, "pooling with dilations");
  int include_pad = (int)ox_int(n, "count_include_pad", 0);
  int padded = 0;
  for (int i = 0; i < g.nsp; i++) padded |= g.pb[i] || g.pe[i];
  /* ceil_mode: extend the end so the last partial window counts. */
  int64_t extra[2] = {0, 0};
  if (g.ceil_mode)
    for (int i = 0; i < g.nsp; i++) {
      int64_t len = xs.dims[2 + i] + g.pb[i] + g.pe[i];
      if (len < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "ceil_mode on a dim of unknown size");
      int64_t o = (len - g.k[i] + g.s[i] - 1) / g.s[i] + 1;
      /* the last window must start inside the input or the begin padding */
      if ((o - 1) * g.s[i] >= xs.dims[2 + i] + g.pb[i]) o--;
      extra[i] = (o - 1) * g.s[i] + g.k[i] - len;
      if (extra[i] < 0) extra[i] = 0;
      padded |= extra[i] > 0;
    }
  if (!is_max && padded && !include_pad && (extra[0] || extra[1] || 1)) {
    int any_pad = 0;
    for (int i = 0; i < g.nsp; i++) any_pad |= g.pb[i] || g.pe[i] || extra[i];
    if (any_pad)
      return ox_fail(c, FLOE_UNIMPLEMENTED,
                     "AveragePool with padding that is not counted (count_include_pad = 0)");
  }
  FloeOutput x = in[0];
  if (g.nsp == 1) {
    x = expand_dims(c, x, 2);
    g.nsp = 2;
    g.k[1] = g.k[0], g.s[1] = g.s[0], g.pb[1] = g.pb[0], g.pe[1] = g.pe[0], extra[1] = extra[0];
    g.k[0] = g.s[0] = 1;
    g.pb[0] = g.pe[0] = extra[0] = 0;
  }
  x = pad_spatial(c, x, &g, extra, is_max ? -INFINITY : 0.0);
  int64_t ksize[4], strides[4];
  list4(ksize, g.k[0], g.k[1]);
  list4(strides, g.s[0], g.s[1]);
  FloeNodeBuilder *b = ox_begin(c, is_max ? "MaxPool" : "AvgPool");
  floe_node_add_input(b, x);
  floe_node_set_attr_int_list(b, "ksize", ksize, 4);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", "VALID");
  floe_node_set_attr_string(b, "data_format", "NCHW");
  FloeOutput y = ox_finish(c, b);
  if (xs.rank == 3) y = squeeze(c, y, 2);
  out[0] = y;
  return FLOE_OK;
}
MAP(map_max_pool) { return pool(c, n, in, nin, out, nout, 1); }
MAP(map_average_pool) { return pool(c, n, in, nin, out, nout, 0); }

static floe_code global_pool(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out,
                             const char *op) {
  floe_code rc = need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = 2; i < r; i++) axes[i - 2] = i;
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ox_const_i64(c, axes, r - 2));
  floe_node_set_attr_bool(b, "keep_dims", 1);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}
MAP(map_global_average_pool) { UNUSED_ARGS; return global_pool(c, in, nin, out, "Mean"); }
MAP(map_global_max_pool) { UNUSED_ARGS; return global_pool(c, in, nin, out, "Max"); }

/* A per-channel [C] vector shaped [C, 1, ...] to broadcast against an N,C,... tensor. */
static FloeOutput per_channel(OxCtx *c, FloeOutput v, int rank) {
  FloeShape s = ox_shape(v);
  if (rank <= 2 || s.rank != 1) return v;
  int64_t dims[FLOE_MAX_DIMS];
  dims[0] = -1;
  for (int i = 1; i < rank - 1; i++) dims[i] = 1;
  return ox_binary(c, "Reshape", v, ox_const_i64(c, dims, rank - 1));
}

MAP(map_batch_norm) {
  UNUSED_ARGS;
  floe_code rc = need(c, in, nin, 5);
  if (rc != FLOE_OK) return rc;
  if (c->opset >= 14 && ox_int(n, "training_mode", 0))
    return ox_fail(c, FLOE_UNIMPLEMENTED, "BatchNormalization in training mode");
  if (nout > 1)
    for (int i = 1; i < nout; i++)
      if (n->output[i] && *n->output[i] && c->opset >= 9)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "BatchNormalization's running statistics outputs");
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  FloeDType dt = ox_dtype(in[0]);
  float eps = ox_float(n, "epsilon", 1e-5f);
  /* y = (x - mean) * scale / sqrt(var + eps) + bias */
  FloeOutput inv = ox_unary(c, "Rsqrt", ox_binary(c, "Add", ox_cast(c, in[4], dt), ox_scalar(c, dt, eps)));
  FloeOutput mul = ox_binary(c, "Mul", ox_cast(c, in[1], dt), inv);
  FloeOutput sub = ox_binary(c, "Sub", ox_cast(c, in[2], dt),
                             ox_binary(c, "Mul", ox_cast(c, in[3], dt), mul));
  FloeOutput y = ox_binary(c, "Mul", in[0], per_channel(c, mul, r));
  out[0] = ox_binary(c, "Add", y, per_channel(c, sub, r));
  /* Opset < 9 inference graphs may name the statistics outputs: the running values. */
  for (int i = 1; i < nout; i++) out[i] = ox_identity(c, in[i % 2 ? 3 : 4]);
  return FLOE_OK;
}

MAP(map_instance_norm) {
  UNUSED_ARGS;
  floe_code rc = need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  FloeDType dt = ox_dtype(in[0]);
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = 2; i < r; i++) axes[i - 2] = i;
  FloeOutput ax = ox_const_i64(c, axes, r - 2);
  FloeNodeBuilder *b = ox_begin(c, "Mean");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput mean = ox_finish(c, b);
  FloeOutput d = ox_binary(c, "Sub", in[0], mean);
  b = ox_begin(c, "Mean");
  floe_node_add_input(b, ox_unary(c, "Square", d));
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput var = ox_finish(c, b);
  FloeOutput inv = ox_unary(c, "Rsqrt", ox_binary(c, "Add", var, ox_scalar(c, dt, ox_float(n, "epsilon", 1e-5f))));
  FloeOutput y = ox_binary(c, "Mul", d, inv);
  y = ox_binary(c, "Mul", y, per_channel(c, in[1], r));
  out[0] = ox_binary(c, "Add", y, per_channel(c, in[2], r));
  return FLOE_OK;
}

MAP(map_layer_norm) {
  UNUSED_ARGS;
  floe_code rc = need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", -1), r, "axis", &axis)) != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = axis; i < r; i++) axes[i - axis] = i;
  FloeOutput ax = ox_const_i64(c, axes, r - axis);
  FloeNodeBuilder *b = ox_begin(c, "Mean");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput mean = ox_finish(c, b);
  FloeOutput d = ox_binary(c, "Sub", in[0], mean);
  b = ox_begin(c, "Mean");
  floe_node_add_input(b, ox_unary(c, "Square", d));
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput var = ox_finish(c, b);
  FloeOutput inv_std = ox_unary(
      c, "Rsqrt", ox_binary(c, "Add", var, ox_scalar(c, dt, ox_float(n, "epsilon", 1e-5f))));
  FloeOutput y = ox_binary(c, "Mul", ox_binary(c, "Mul", d, inv_std), in[1]);
  if (nin > 2 && ox_present(in[2])) y = ox_binary(c, "Add", y, in[2]);
  out[0] = y;
  if (nout > 1) out[1] = mean;
  if (nout > 2) out[2] = inv_std;
  return FLOE_OK;
}

MAP(map_lrn) {
  UNUSED_ARGS;
  floe_code rc = need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  if (xs.rank != 4) return ox_fail(c, FLOE_UNIMPLEMENTED, "LRN on rank %d (Floe runs rank 4)", xs.rank);
  int64_t size = ox_int(n, "size", 0);
  if (size < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "size must be >= 1");
  float alpha = ox_float(n, "alpha", 1e-4f), beta = ox_float(n, "beta", 0.75f),
        bias = ox_float(n, "bias", 1.0f);
  FloeDType dt = ox_dtype(in[0]);
  /* square_sum over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]: pad C and sum a
   * size-wide window with an average pool over a [N, 1, C, H*W] view. */
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  for (int i = 2; i < 4; i++)
    if (xs.dims[i] < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "LRN on spatial dims of unknown size");
  FloeOutput sq = ox_unary(c, "Square", in[0]);
  int64_t v4[4] = {-1, 1, xs.dims[1], xs.dims[2] * xs.dims[3]};
  FloeOutput x4 = ox_binary(c, "Reshape", sq, ox_const_i64(c, v4, 4));
  int64_t pd[2] = {4, 2}, p[8] = {0, 0, 0, 0, lo, hi, 0, 0};
  FloeTensor *pt = floe_tensor_new(FLOE_I64, 2, pd, NULL);
  if (pt) memcpy(floe_tensor_data(pt), p, sizeof p);
  FloeNodeBuilder *b = ox_begin(c, "Pad");
  floe_node_add_input(b, x4);
  floe_node_add_input(b, ox_const(c, pt));
  FloeOutput padded = ox_finish(c, b);
  int64_t ksize[4] = {1, 1, size, 1}, strides[4] = {1, 1, 1, 1};
  b = ox_begin(c, "AvgPool");
  floe_node_add_input(b, padded);
  floe_node_set_attr_int_list(b, "ksize", ksize, 4);
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", "VALID");
  floe_node_set_attr_string(b, "data_format", "NCHW");
  int64_t back[4] = {-1, xs.dims[1], xs.dims[2], xs.dims[3]};
  FloeOutput avg = ox_binary(c, "Reshape", ox_finish(c, b), ox_const_i64(c, back, 4));
  /* avg = square_sum / size; y = x / (bias + alpha / size * square_sum) ^ beta */
  FloeOutput base = ox_binary(c, "Add", ox_scalar(c, dt, bias),
                              ox_binary(c, "Mul", avg, ox_scalar(c, dt, alpha)));
  out[0] = ox_binary(c, "Div", in[0], ox_binary(c, "Pow", base, ox_scalar(c, dt, beta)));
  return FLOE_OK;
}

const OxOp floe__onnx_ops_nn[] = {
    {"", "Conv", map_conv},
    {"", "MaxPool", map_max_pool},
    {"", "AveragePool", map_average_pool},
    {"", "GlobalAveragePool", map_global_average_pool},
    {"", "GlobalMaxPool", map_global_max_pool},
    {"", "BatchNormalization", map_batch_norm},
    {"", "InstanceNormalization", map_instance_norm},
    {"", "LayerNormalization", map_layer_norm},
    {"", "LRN", map_lrn},
    {NULL, NULL, NULL},
};
