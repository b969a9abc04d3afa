/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_nn.c - ONNX convolution, pooling and normalisation as Floe ops. ONNX is
 * channels-first with [out, in, spatial...] filters: convolutions run as Floe's N-d Conv and
 * ConvTranspose (ops_conv.def) on a transposed ([spatial..., in, out]) filter, which constant
 * folding transposes once at import when it is an initializer; pools run as Floe's Pool. */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

/* The spatial geometry of a conv or pool: kernel, strides, dilations and explicit pads
 * (begin, end) per spatial dim, auto_pad resolved against the input's spatial size. */
typedef struct Geom {
  int nsp; /* spatial dims: 1 to 3 */
  int64_t k[3], s[3], d[3], pb[3], pe[3];
  int same; /* SAME_UPPER on spatial sizes the graph does not know: Floe's SAME padding */
} Geom;

static floe_code geometry(OxCtx *c, const Onnx__NodeProto *n, FloeShape xs, const int64_t *kernel,
                          Geom *g) {
  memset(g, 0, sizeof *g);
  g->nsp = xs.rank - 2;
  if (g->nsp < 1 || g->nsp > 3)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "%d spatial dims (Floe runs 1 to 3)", g->nsp);
  const int64_t *v;
  int k;
  for (int i = 0; i < g->nsp; i++) {
    g->k[i] = kernel[i];
    g->s[i] = g->d[i] = 1;
  }
  if ((k = ox_ints(n, "strides", &v)) >= 0) {
    if (k != g->nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "strides has %d values, not %d", k, g->nsp);
    for (int i = 0; i < k; i++) g->s[i] = v[i];
  }
  if ((k = ox_ints(n, "dilations", &v)) >= 0) {
    if (k != g->nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "dilations has %d values, not %d", k, g->nsp);
    for (int i = 0; i < k; i++) g->d[i] = v[i];
  }
  if ((k = ox_ints(n, "pads", &v)) >= 0) {
    if (k != 2 * g->nsp)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "pads has %d values, not %d", k, 2 * g->nsp);
    for (int i = 0; i < g->nsp; i++) {
      g->pb[i] = v[i];
      g->pe[i] = v[g->nsp + i];
    }
  }
  for (int i = 0; i < g->nsp; i++)
    if (g->s[i] < 1 || g->d[i] < 1 || g->k[i] < 1 || g->pb[i] < 0 || g->pe[i] < 0)
      return ox_fail(c, FLOE_INVALID_ARGUMENT,
                     "kernel (%lld), strides (%lld), dilations (%lld) or pads (%lld, %lld) of "
                     "spatial dim %d out of range", (long long)g->k[i], (long long)g->s[i],
                     (long long)g->d[i], (long long)g->pb[i], (long long)g->pe[i], i);
  char buf[32];
  const char *ap = ox_str(n, "auto_pad", "NOTSET", buf, sizeof buf);
  if (!strcmp(ap, "VALID")) {
    for (int i = 0; i < g->nsp; i++) g->pb[i] = g->pe[i] = 0;
  } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int i = 0; i < g->nsp; i++) {
      int64_t in = xs.dims[2 + i];
      if (in < 0 && !strcmp(ap, "SAME_UPPER")) {
        g->same = 1; /* Floe's SAME puts the odd element last too */
        continue;
      }
      if (in < 0)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "auto_pad SAME_LOWER on a spatial dim of unknown size");
      int64_t o = (in + g->s[i] - 1) / g->s[i];
      int64_t total = (o - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1 - in;
      if (total < 0) total = 0;
      int64_t small = total / 2;
      g->pb[i] = !strcmp(ap, "SAME_UPPER") ? small : total - small;
      g->pe[i] = total - g->pb[i];
    }
  } else if (strcmp(ap, "NOTSET")) {
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
  }
  return FLOE_OK;
}

/* strides, dilations, padding and explicit_paddings of g on a CHANNELS_FIRST Floe window op
 * (every list one entry per dim: 1, or no padding, for N and C). */
static void set_window(FloeNodeBuilder *b, const Geom *g, int with_format) {
  int r = g->nsp + 2;
  int64_t st[5] = {1, 1}, dl[5] = {1, 1}, pads[10] = {0};
  for (int i = 0; i < g->nsp; i++) {
    st[2 + i] = g->s[i];
    dl[2 + i] = g->d[i];
    pads[2 * (2 + i)] = g->pb[i];
    pads[2 * (2 + i) + 1] = g->pe[i];
  }
  floe_node_set_attr_int_list(b, "strides", st, r);
  floe_node_set_attr_int_list(b, "dilations", dl, r);
  floe_node_set_attr_string(b, "padding", g->same ? "SAME" : "EXPLICIT");
  if (!g->same) floe_node_set_attr_int_list(b, "explicit_paddings", pads, 2 * r);
  if (with_format) floe_node_set_attr_string(b, "data_format", "CHANNELS_FIRST");
}

/* ONNX's [out, in, spatial...] filter as Floe's [spatial..., in, out]; a constant filter is
 * transposed once, at import (constant folding). */
static FloeOutput floe_filter(OxCtx *c, FloeOutput w, int rank) {
  int64_t perm[5];
  for (int i = 0; i < rank - 2; i++) perm[i] = 2 + i;
  perm[rank - 2] = 1;
  perm[rank - 1] = 0;
  return ox_binary(c, "Transpose", w, ox_const_i64(c, perm, rank));
}

static FloeOutput add_bias(OxCtx *c, FloeOutput y, FloeOutput bias) {
  FloeNodeBuilder *b = ox_begin(c, "BiasAdd");
  floe_node_add_input(b, y);
  floe_node_add_input(b, bias);
  floe_node_set_attr_string(b, "data_format", "NCHW");
  return ox_finish(c, b);
}

/* The rank of a conv's input from it or its filter; fails unless 3 to 5. */
static int conv_rank(OxCtx *c, FloeShape xs, FloeShape ws) {
  int r = xs.rank >= 0 ? xs.rank : ws.rank;
  if (r < 3 || r > 5) {
    ox_fail(c, FLOE_UNIMPLEMENTED, "input of rank %d (Floe runs ranks 3 to 5)", r);
    return -1;
  }
  if (ws.rank >= 0 && ws.rank != r) {
    ox_fail(c, FLOE_INVALID_ARGUMENT, "filter of rank %d for an input of rank %d", ws.rank, r);
    return -1;
  }
  return r;
}

/* The kernel's spatial size: kernel_shape, else the filter's known dims. */
static floe_code kernel_of(OxCtx *c, const Onnx__NodeProto *n, FloeShape ws, int r,
                           int64_t *kernel) {
  const int64_t *ks;
  int nk = ox_ints(n, "kernel_shape", &ks);
  if (nk >= 0 && nk != r - 2)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "kernel_shape has %d values, not %d", nk, r - 2);
  for (int i = 0; i < r - 2; i++) {
    kernel[i] = nk > i ? ks[i] : ws.rank == r ? ws.dims[2 + i] : -1;
    if (kernel[i] < 0) kernel[i] = 1; /* only auto_pad needs it, and then it is known */
  }
  return FLOE_OK;
}

floe_code floe__onnx_conv(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, FloeOutput w,
                          FloeOutput *y) {
  FloeShape xs = ox_shape(x), ws = ox_shape(w);
  int r = conv_rank(c, xs, ws);
  if (r < 0) return floe_status_code(c->st);
  if (xs.rank < 0) {
    xs.rank = r;
    for (int i = 0; i < r; i++) xs.dims[i] = -1;
  }
  int64_t kernel[3];
  Geom g;
  floe_code rc;
  if ((rc = kernel_of(c, n, ws, r, kernel)) != FLOE_OK ||
      (rc = geometry(c, n, xs, kernel, &g)) != FLOE_OK)
    return rc;
  int64_t groups = ox_int(n, "group", 1);
  if (groups < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "group %lld", (long long)groups);
  FloeNodeBuilder *b = ox_begin(c, "Conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, floe_filter(c, w, r));
  set_window(b, &g, 1);
  floe_node_set_attr_int(b, "groups", groups);
  *y = ox_finish(c, b);
  return ox_check(c);
}

OX_MAP(map_conv) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  FloeOutput y;
  if (rc != FLOE_OK || (rc = floe__onnx_conv(c, n, in[0], in[1], &y)) != FLOE_OK) return rc;
  if (nin > 2 && ox_present(in[2])) y = add_bias(c, y, in[2]);
  out[0] = y;
  return FLOE_OK;
}

/* ConvTranspose as Floe's ConvTranspose: pads from output_shape or auto_pad as ONNX's
 * reference computes them (floor division; a negative total adds zeros). */
OX_MAP(map_conv_transpose) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]), ws = ox_shape(in[1]);
  int r = conv_rank(c, xs, ws);
  if (r < 0) return floe_status_code(c->st);
  int nsp = r - 2;
  int64_t kernel[3];
  if ((rc = kernel_of(c, n, ws, r, kernel)) != FLOE_OK) return rc;
  /* Geometry without auto_pad (resolved below, ConvTranspose's way). */
  Geom g;
  memset(&g, 0, sizeof g);
  g.nsp = nsp;
  const int64_t *v;
  int k;
  int64_t opad[3] = {0, 0, 0};
  for (int i = 0; i < nsp; i++) g.k[i] = kernel[i], g.s[i] = g.d[i] = 1;
  struct { const char *name; int64_t *dst; int count; } lists[] = {
      {"strides", g.s, nsp}, {"dilations", g.d, nsp}, {"output_padding", opad, nsp}};
  for (int l = 0; l < 3; l++)
    if ((k = ox_ints(n, lists[l].name, &v)) >= 0) {
      if (k != lists[l].count)
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "%s has %d values, not %d", lists[l].name, k, nsp);
      memcpy(lists[l].dst, v, (size_t)k * sizeof *v);
    }
  if ((k = ox_ints(n, "pads", &v)) >= 0) {
    if (k != 2 * nsp) return ox_fail(c, FLOE_INVALID_ARGUMENT, "pads has %d values", k);
    for (int i = 0; i < nsp; i++) g.pb[i] = v[i], g.pe[i] = v[nsp + i];
  }
  for (int i = 0; i < nsp; i++)
    if (g.s[i] < 1 || g.d[i] < 1 || opad[i] < 0 || g.pb[i] < 0 || g.pe[i] < 0)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "strides, dilations, output_padding or pads out of range");
  char buf[32];
  const char *ap = ox_str(n, "auto_pad", "NOTSET", buf, sizeof buf);
  int upper = !strcmp(ap, "SAME_UPPER"), same = upper || !strcmp(ap, "SAME_LOWER");
  if (!same && strcmp(ap, "NOTSET") && strcmp(ap, "VALID"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
  if (!strcmp(ap, "VALID"))
    for (int i = 0; i < nsp; i++) g.pb[i] = g.pe[i] = 0;
  const int64_t *os;
  int nos = ox_ints(n, "output_shape", &os);
  if (nos >= 0 || same) {
    int64_t target[3];
    if (nos >= 0 && nos != nsp && nos != r)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "output_shape has %d values", nos);
    for (int i = 0; i < nsp; i++) {
      if (xs.rank != r || xs.dims[2 + i] < 0)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "output_shape or auto_pad on a spatial dim of unknown size");
      target[i] = nos >= 0 ? os[nos - nsp + i] : xs.dims[2 + i] * g.s[i];
      int64_t total = g.s[i] * (xs.dims[2 + i] - 1) + opad[i] + (g.k[i] - 1) * g.d[i] + 1 - target[i];
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); /* floor */
      g.pb[i] = upper ? half : total - half;
      g.pe[i] = total - g.pb[i];
    }
  }
  int64_t groups = ox_int(n, "group", 1);
  if (groups < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "group %lld", (long long)groups);
  FloeNodeBuilder *b = ox_begin(c, "ConvTranspose");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, floe_filter(c, in[1], r));
  set_window(b, &g, 1);
  int64_t op[5] = {0, 0};
  for (int i = 0; i < nsp; i++) op[2 + i] = opad[i];
  floe_node_set_attr_int_list(b, "output_padding", op, r);
  floe_node_set_attr_int(b, "groups", groups);
  FloeOutput y = ox_finish(c, b);
  if (nin > 2 && ox_present(in[2])) y = add_bias(c, y, in[2]);
  out[0] = y;
  return FLOE_OK;
}

/* MaxPool (with Indices when its second output is used) and AveragePool as Floe's Pool. */
static floe_code pool(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                      FloeOutput *out, int nout, int is_max) {
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  if (xs.rank < 3 || xs.rank > 5)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "input of rank %d (Floe runs ranks 3 to 5)", xs.rank);
  const int64_t *ks;
  int nk = ox_ints(n, "kernel_shape", &ks);
  if (nk != xs.rank - 2)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "kernel_shape has %d values, not %d", nk, xs.rank - 2);
  Geom g;
  if ((rc = geometry(c, n, xs, ks, &g)) != FLOE_OK) return rc;
  int indices = is_max && nout > 1 && n->n_output > 1 && *n->output[1];
  int64_t storage = ox_int(n, "storage_order", 0);
  if (storage != 0 && storage != 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "storage_order %lld", (long long)storage);
  FloeNodeBuilder *b = ox_begin(c, indices ? "MaxPoolWithIndices" : "Pool");
  floe_node_add_input(b, in[0]);
  int64_t ksize[5] = {1, 1};
  for (int i = 0; i < g.nsp; i++) ksize[2 + i] = g.k[i];
  floe_node_set_attr_int_list(b, "ksize", ksize, g.nsp + 2);
  set_window(b, &g, !indices);
  floe_node_set_attr_bool(b, "ceil_mode", ox_int(n, "ceil_mode", 0) != 0);
  if (indices) {
    floe_node_set_attr_int(b, "storage_order", storage);
    FloeNode *p = ox_finish_node(c, b);
    if (!p) return ox_check(c);
    out[0] = floe_out(p, 0);
    out[1] = floe_out(p, 1);
    return FLOE_OK;
  }
  floe_node_set_attr_string(b, "pooling_type", is_max ? "MAX" : "AVG");
  if (!is_max) floe_node_set_attr_bool(b, "count_include_pad", ox_int(n, "count_include_pad", 0) != 0);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}
OX_MAP(map_max_pool) { return pool(c, n, in, nin, out, nout, 1); }
OX_MAP(map_average_pool) { return pool(c, n, in, nin, out, nout, 0); }

/* MaxUnpool: X's values scattered into zeros at the flat positions I holds (MaxPool's
 * Indices, which count in the unpooled shape the attributes give), as GatherGrad over the
 * flattened unpooled tensor; a larger output_shape then pads each dim at its end. */
OX_MAP(map_max_unpool) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  const int64_t *ks;
  int nk = ox_ints(n, "kernel_shape", &ks);
  if (xs.rank < 3 || nk != xs.rank - 2)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "kernel_shape has %d values for an input of rank %d",
                   nk, xs.rank);
  Geom g;
  if ((rc = geometry(c, n, xs, ks, &g)) != FLOE_OK) return rc;
  int64_t dims[5] = {xs.dims[0], xs.dims[1]}, total = 1, flat = -1;
  for (int i = 0; i < xs.rank; i++)
    if (xs.dims[i] < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "MaxUnpool of an input of unknown shape");
  for (int i = 0; i < g.nsp; i++)
    dims[2 + i] = (xs.dims[2 + i] - 1) * g.s[i] + g.k[i] - g.pb[i] - g.pe[i];
  for (int i = 0; i < xs.rank; i++) total *= dims[i];
  FloeNodeBuilder *b = ox_begin(c, "GatherGrad");
  floe_node_add_input(b, ox_const_i64(c, &total, 1));
  floe_node_add_input(b, ox_binary(c, "Reshape", ox_cast(c, in[1], FLOE_I64), ox_const_i64(c, &flat, 1)));
  floe_node_add_input(b, ox_binary(c, "Reshape", in[0], ox_const_i64(c, &flat, 1)));
  FloeOutput y = ox_binary(c, "Reshape", ox_finish(c, b), ox_const_i64(c, dims, xs.rank));
  if (nin > 2 && ox_present(in[2])) {
    /* paddings [rank, 2]: 0 before, output_shape - unpooled after (a negative one is the Pad
     * kernel's error). Constant folding computes it when output_shape is a constant. */
    int64_t zeros[5] = {0}, col[2] = {-1, 1};
    FloeOutput after = ox_binary(c, "Sub", ox_cast(c, in[2], FLOE_I64), ox_const_i64(c, dims, xs.rank));
    FloeOutput cols[2] = {ox_binary(c, "Reshape", ox_const_i64(c, zeros, xs.rank), ox_const_i64(c, col, 2)),
                          ox_binary(c, "Reshape", after, ox_const_i64(c, col, 2))};
    b = ox_begin(c, "Concat");
    floe_node_add_input_list(b, cols, 2);
    floe_node_add_input(b, ox_scalar_i32(c, 1));
    FloeOutput pads = ox_finish(c, b);
    b = ox_begin(c, "Pad");
    floe_node_add_input(b, y);
    floe_node_add_input(b, pads);
    y = ox_finish(c, b);
  }
  out[0] = y;
  return FLOE_OK;
}

static floe_code global_pool(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out,
                             const char *op) {
  floe_code rc = ox_need(c, in, nin, 1);
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
OX_MAP(map_global_average_pool) { OX_UNUSED; return global_pool(c, in, nin, out, "Mean"); }
OX_MAP(map_global_max_pool) { OX_UNUSED; return global_pool(c, in, nin, out, "Max"); }

/* A per-channel [C] vector shaped [C, 1, ...] to broadcast against an N,C,... tensor. */
static FloeOutput per_channel(OxCtx *c, FloeOutput v, int rank) {
  FloeShape s = ox_shape(v);
  if (rank <= 2 || s.rank != 1) return v;
  int64_t dims[FLOE_MAX_DIMS];
  dims[0] = -1;
  for (int i = 1; i < rank - 1; i++) dims[i] = 1;
  return ox_binary(c, "Reshape", v, ox_const_i64(c, dims, rank - 1));
}

/* y = (x - mean) * scale / sqrt(var + eps) + bias with per-channel [C] statistics. */
static FloeOutput batch_norm(OxCtx *c, FloeOutput x, const FloeOutput *in, FloeOutput mean,
                             FloeOutput var, int r, float eps) {
  FloeDType dt = ox_dtype(x);
  FloeOutput inv = ox_unary(c, "Rsqrt", ox_binary(c, "Add", ox_cast(c, var, dt), ox_scalar(c, dt, eps)));
  FloeOutput mul = ox_binary(c, "Mul", ox_cast(c, in[1], dt), inv);
  FloeOutput sub = ox_binary(c, "Sub", ox_cast(c, in[2], dt),
                             ox_binary(c, "Mul", ox_cast(c, mean, dt), mul));
  FloeOutput y = ox_binary(c, "Mul", x, per_channel(c, mul, r));
  return ox_binary(c, "Add", y, per_channel(c, sub, r));
}

/* Training mode (opset 14+): normalises with the batch's statistics (the population
 * variance over every dim but the channel) and outputs the running statistics
 * input * momentum + batch * (1 - momentum). */
static floe_code batch_norm_training(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                     FloeOutput *out, int nout, int r, float eps) {
  FloeDType dt = ox_dtype(in[0]);
  int64_t axes[FLOE_MAX_DIMS];
  axes[0] = 0;
  for (int i = 2; i < r; i++) axes[i - 1] = i;
  FloeOutput ax = ox_const_i64(c, axes, r - 1);
  FloeNodeBuilder *b = ox_begin(c, "Mean");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ax);
  FloeOutput mean = ox_finish(c, b);
  FloeOutput d = ox_binary(c, "Sub", in[0], per_channel(c, mean, r));
  b = ox_begin(c, "Mean");
  floe_node_add_input(b, ox_unary(c, "Square", d));
  floe_node_add_input(b, ax);
  FloeOutput var = ox_finish(c, b);
  out[0] = batch_norm(c, in[0], in, mean, var, r, eps);
  float m = ox_float(n, "momentum", 0.9f);
  FloeOutput keep = ox_scalar(c, dt, m), take = ox_scalar(c, dt, 1.0 - m);
  for (int i = 1; i < nout && i < 3; i++) {
    FloeOutput now = i == 1 ? mean : var;
    out[i] = ox_binary(c, "Add", ox_binary(c, "Mul", ox_cast(c, in[2 + i], dt), keep),
                       ox_binary(c, "Mul", now, take));
  }
  return ox_check(c);
}

OX_MAP(map_batch_norm) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 5);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  if (r < 2) return ox_fail(c, FLOE_INVALID_ARGUMENT, "input of rank %d (needs N, C, ...)", r);
  float eps = ox_float(n, "epsilon", 1e-5f);
  if (c->opset >= 14 && ox_int(n, "training_mode", 0))
    return batch_norm_training(c, n, in, out, nout, r, eps);
  if (nout > 1)
    for (int i = 1; i < nout; i++)
      if (n->output[i] && *n->output[i] && c->opset >= 9)
        return ox_fail(c, FLOE_UNIMPLEMENTED,
                       "BatchNormalization's statistics outputs outside training mode");
  out[0] = batch_norm(c, in[0], in, in[3], in[4], r, eps);
  /* Opset < 9 inference graphs may name the statistics outputs: the running values. */
  for (int i = 1; i < nout; i++) out[i] = ox_identity(c, in[i % 2 ? 3 : 4]);
  return FLOE_OK;
}

/* Normalises x over its dims [first, rank): sets *centred = x - mean, *mean and *inv_std =
 * 1 / sqrt(var + epsilon), all with the reduced dims kept. */
static void normalise(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, int first, int r,
                      FloeOutput *centred, FloeOutput *mean, FloeOutput *inv_std) {
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = first; i < r; i++) axes[i - first] = i;
  FloeOutput ax = ox_const_i64(c, axes, r - first);
  FloeNodeBuilder *b = ox_begin(c, "Mean");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  *mean = ox_finish(c, b);
  *centred = ox_binary(c, "Sub", x, *mean);
  b = ox_begin(c, "Mean");
  floe_node_add_input(b, ox_unary(c, "Square", *centred));
  floe_node_add_input(b, ax);
  floe_node_set_attr_bool(b, "keep_dims", 1);
  FloeOutput var = ox_finish(c, b);
  FloeOutput eps = ox_scalar(c, ox_dtype(x), ox_float(n, "epsilon", 1e-5f));
  *inv_std = ox_unary(c, "Rsqrt", ox_binary(c, "Add", var, eps));
}

OX_MAP(map_instance_norm) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  FloeOutput d, mean, inv;
  normalise(c, n, in[0], 2, r, &d, &mean, &inv);
  FloeOutput y = ox_binary(c, "Mul", d, inv);
  y = ox_binary(c, "Mul", y, per_channel(c, in[1], r));
  out[0] = ox_binary(c, "Add", y, per_channel(c, in[2], r));
  return FLOE_OK;
}

OX_MAP(map_layer_norm) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", -1), r, "axis", &axis)) != FLOE_OK) return rc;
  FloeOutput d, mean, inv_std;
  normalise(c, n, in[0], axis, r, &d, &mean, &inv_std);
  FloeOutput y = ox_binary(c, "Mul", ox_binary(c, "Mul", d, inv_std), in[1]);
  if (nin > 2 && ox_present(in[2])) y = ox_binary(c, "Add", y, in[2]);
  out[0] = y;
  if (nout > 1) out[1] = mean;
  if (nout > 2) out[2] = inv_std;
  return FLOE_OK;
}

OX_MAP(map_lrn) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
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
    {"", "ConvTranspose", map_conv_transpose},
    {"", "MaxUnpool", map_max_unpool},
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
