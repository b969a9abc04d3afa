/* SPDX-License-Identifier: Apache-2.0 */
/* window_nd.c - attributes and per-call geometry of the N-d window ops (the rules of
 * core/graph/ops_conv.def, which core/graph/shape_conv.c applies to shapes). */
#include "window_nd.h"

#include <math.h>
#include <string.h>

#include "cpu_util.h"

static const char *const kind_op[] = {"Conv", "ConvTranspose", "Pool", "Pool",
                                      "MaxPoolWithIndices"};

/* An optional int list of at most max entries into v (*n = 0 when absent). */
static floe_code get_list(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                          size_t max, int64_t *v, size_t *n) {
  const int64_t *p = NULL;
  size_t k = 0;
  floe_code rc = host->attr_int_list(host->init_attrs(init), name, &p, &k);
  *n = 0;
  if (rc == FLOE_NOT_FOUND) return FLOE_OK;
  if (rc != FLOE_OK) return host->init_set_error(init, rc, "attribute %s must be a list of ints", name);
  if (k > max)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute %s has %zu entries; at most %zu", name, k, max);
  if (k) memcpy(v, p, k * sizeof *v);
  *n = k;
  return FLOE_OK;
}

floe_code wnd_parse(const FloeHostApi *host, FloeKernelInit *init, WndKind kind, WndAttrs *a) {
  const FloeAttrs *at = host->init_attrs(init);
  memset(a, 0, sizeof *a);
  a->kind = kind;
  a->groups = 1;
  const char *s = "CHANNELS_LAST";
  if (kind == WND_POOL_IDX) s = "CHANNELS_FIRST";
  else host->attr_string(at, "data_format", &s);
  if (strcmp(s, "CHANNELS_FIRST") && strcmp(s, "CHANNELS_LAST"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be CHANNELS_FIRST or CHANNELS_LAST, got \"%s\"", s);
  a->cf = !strcmp(s, "CHANNELS_FIRST");
  s = "VALID";
  host->attr_string(at, "padding", &s);
  if (!strcmp(s, "VALID")) a->pad = 'V';
  else if (!strcmp(s, "SAME") && kind != WND_CONV_T) a->pad = 'S';
  else if (!strcmp(s, "EXPLICIT")) a->pad = 'E';
  else
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "padding \"%s\" is not one of %s", s,
                                kind == WND_CONV_T ? "VALID, EXPLICIT" : "VALID, SAME, EXPLICIT");
  floe_code rc;
  if ((rc = get_list(host, init, "strides", WND_MAX_RANK, a->strides, &a->n_strides)) ||
      (rc = get_list(host, init, "dilations", WND_MAX_RANK, a->dil, &a->n_dil)) ||
      (rc = get_list(host, init, "ksize", WND_MAX_RANK, a->ksize, &a->n_ksize)) ||
      (rc = get_list(host, init, "explicit_paddings", 2 * WND_MAX_RANK, a->pads, &a->n_pads)) ||
      (rc = get_list(host, init, "output_padding", WND_MAX_RANK, a->op, &a->n_op)))
    return rc;
  if (a->pad == 'E' && a->n_pads == 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "EXPLICIT padding needs explicit_paddings");
  if (kind == WND_CONV || kind == WND_CONV_T) {
    host->attr_int(at, "groups", &a->groups);
    if (a->groups < 1)
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "groups must be >= 1, got %lld",
                                  (long long)a->groups);
    return FLOE_OK;
  }
  if (a->n_ksize == 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "attribute ksize is required");
  int b = 0;
  if (host->attr_bool(at, "ceil_mode", &b) == FLOE_OK) a->ceil_mode = b;
  b = 0;
  if (host->attr_bool(at, "count_include_pad", &b) == FLOE_OK) a->include_pad = b;
  if (kind == WND_POOL_IDX) {
    host->attr_int(at, "storage_order", &a->storage_order);
    if (a->storage_order != 0 && a->storage_order != 1)
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "storage_order must be 0 or 1");
    return FLOE_OK;
  }
  s = "";
  host->attr_string(at, "pooling_type", &s);
  if (!strcmp(s, "AVG")) a->kind = WND_POOL_AVG;
  else if (strcmp(s, "MAX"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "pooling_type must be MAX or AVG, got \"%s\"", s);
  return FLOE_OK;
}

void wnd_strides(bool cf, int ns, int64_t c, const int64_t *sp, int64_t st[5]) {
  /* sp: 3 spatial sizes, the last ns real. */
  int64_t inner = cf ? 1 : c;
  for (int j = 2; j >= 0; j--) {
    bool real = j >= 3 - ns;
    st[2 + j] = real ? inner : 0;
    if (real) inner *= sp[j];
  }
  if (cf) {
    st[1] = inner;
    inner *= c;
  } else {
    st[1] = 1;
  }
  st[0] = inner;
}

int64_t wnd_rows(WndGeo *g, const WndGeo *whole, int d, int64_t r0, int64_t r1) {
  const WndGeo *w = whole;
  int64_t lo = r0 * w->s[d] - w->pb[d];
  int64_t hi = (r1 - 1) * w->s[d] - w->pb[d] + (w->k[d] - 1) * w->d[d] + 1;
  g->pb[d] = lo < 0 ? -lo : 0;
  g->pe[d] = hi > w->in[d] ? hi - w->in[d] : 0;
  if (lo < 0) lo = 0;
  if (hi > w->in[d]) hi = w->in[d];
  g->in[d] = hi - lo;
  g->out[d] = r1 - r0;
  return lo;
}

void wnd_dnnl_conv_dims(const WndGeo *g, int64_t *strides, int64_t *dil, int64_t *pad_l,
                        int64_t *pad_r, int64_t *src_dims, int64_t *dst_dims) {
  int off = 3 - g->ns;
  src_dims[0] = dst_dims[0] = g->n;
  src_dims[1] = g->c;
  dst_dims[1] = g->o;
  for (int j = 0; j < g->ns; j++) {
    strides[j] = g->s[off + j];
    dil[j] = g->d[off + j] - 1; /* oneDNN counts from 0 */
    pad_l[j] = g->pb[off + j];
    pad_r[j] = g->pe[off + j];
    src_dims[2 + j] = g->in[off + j];
    dst_dims[2 + j] = g->out[off + j];
  }
}

void wnd_out_dims(const WndAttrs *a, const WndGeo *g, int64_t *dims) {
  int sp0 = a->cf ? 2 : 1;
  dims[0] = g->n;
  dims[a->cf ? 1 : g->rank - 1] = g->o;
  for (int j = 0; j < g->ns; j++) dims[sp0 + j] = g->out[3 - g->ns + j];
}

/* One list entry of dim i (dflt when the list is empty); checks the batch / channel rule. */
static floe_code list_entry(FloeKernelContext *ctx, const char *name, const int64_t *v, size_t n,
                            int rank, int i, bool edge, int64_t dflt, int64_t edge_val,
                            int64_t min, int64_t *out) {
  if (n == 0) {
    *out = edge ? edge_val : dflt;
    return FLOE_OK;
  }
  if (n != (size_t)rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s has %zu entries; the input has rank %d", name, n, rank);
  *out = v[i];
  if ((edge && v[i] != edge_val) || (!edge && v[i] < min))
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "%s entry %d is %lld; it must be %s %lld", name, i,
        (long long)v[i], edge ? "(batch / channel dim)" : ">=", (long long)(edge ? edge_val : min));
  return FLOE_OK;
}

floe_code wnd_geo(const WndAttrs *a, FloeKernelContext *ctx, const FloeTensor *x,
                  const FloeTensor *f, WndGeo *g) {
  return wnd_geo_dims(a, ctx, cpu_host->tensor_rank(x), cpu_host->tensor_dims(x), f, g);
}

floe_code wnd_geo_dims(const WndAttrs *a, FloeKernelContext *ctx, int r, const int64_t *d,
                       const FloeTensor *f, WndGeo *g) {
  /* Shapes are formatted for error messages only (this runs on every call). */
  char sx_buf[CPU_SHAPE_STR_MAX], sf_buf[CPU_SHAPE_STR_MAX];
#define SX cpu_shape_str(sx_buf, sizeof sx_buf, r, d)
#define SF cpu_shape_str(sf_buf, sizeof sf_buf, cpu_host->tensor_rank(f), cpu_host->tensor_dims(f))
  if (r < 3 || r > 5)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input %s must have rank 3 to 5 (1 to 3 spatial dims)", SX);
  memset(g, 0, sizeof *g);
  g->rank = r;
  g->ns = r - 2;
  g->groups = a->groups;
  int cd = a->cf ? 1 : r - 1, sp0 = a->cf ? 2 : 1, off = 3 - g->ns;
  g->n = d[0];
  g->c = d[cd];
  for (int j = 0; j < 3; j++) {
    g->in[j] = g->k[j] = g->s[j] = g->d[j] = g->out[j] = 1;
    g->pb[j] = g->pe[j] = 0;
  }
  for (int j = 0; j < g->ns; j++) g->in[off + j] = d[sp0 + j];
  if (f) {
    const int64_t *fd = cpu_host->tensor_dims(f);
    if (cpu_host->tensor_rank(f) != r)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter %s must have the rank of input %s", SF, SX);
    for (int j = 0; j < g->ns; j++) g->k[off + j] = fd[j];
    int64_t fi = fd[r - 2], fo = fd[r - 1];
    bool ok;
    if (a->kind == WND_CONV) {
      ok = fi * a->groups == g->c && fo % a->groups == 0;
      g->o = fo;
    } else {
      ok = fo == g->c && fo % a->groups == 0;
      g->o = fi * a->groups;
    }
    if (!ok)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter %s does not fit input %s (%s) with %lld groups", SF,
                                     SX, a->cf ? "channels first" : "channels last",
                                     (long long)a->groups);
  } else {
    g->o = g->c;
  }
  floe_code rc;
  for (int i = 0; i < r; i++) {
    bool edge = i == 0 || i == cd;
    int64_t s, dl, k, op = 0, pb = 0, pe = 0;
    if ((rc = list_entry(ctx, "strides", a->strides, a->n_strides, r, i, edge, 1, 1, 1, &s)) ||
        (rc = list_entry(ctx, "dilations", a->dil, a->n_dil, r, i, edge, 1, 1, 1, &dl)) ||
        (rc = list_entry(ctx, "output_padding", a->op, a->n_op, r, i, edge, 0, 0, 0, &op)))
      return rc;
    if (!f && (rc = list_entry(ctx, "ksize", a->ksize, a->n_ksize, r, i, edge, 1, 1, 1, &k)))
      return rc;
    if (a->pad == 'E') {
      if (a->n_pads != (size_t)(2 * r))
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "explicit_paddings has %zu entries; the input has rank %d",
                                       a->n_pads, r);
      pb = a->pads[2 * i];
      pe = a->pads[2 * i + 1];
      if ((edge && (pb || pe)) || (a->kind != WND_CONV_T && (pb < 0 || pe < 0)))
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "explicit_paddings (%lld, %lld) of dim %d must be %s",
                                       (long long)pb, (long long)pe, i,
                                       edge ? "0 (batch / channel dim)" : ">= 0");
    }
    if (edge) continue;
    int j = off + i - sp0;
    g->s[j] = s;
    g->d[j] = dl;
    if (!f) g->k[j] = k;
    if (g->k[j] < 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "empty window in dim %d", i);
    int64_t eff = (g->k[j] - 1) * dl + 1, in = g->in[j];
    if (a->kind == WND_CONV_T) {
      g->pb[j] = pb;
      g->pe[j] = pe;
      g->out[j] = (in - 1) * s + eff + op - pb - pe;
      if (g->out[j] < 0)
        return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "dim %d of the output of input %s would be negative", i, SX);
      continue;
    }
    if (a->pad == 'S') {
      int64_t o = (in + s - 1) / s, total = (o - 1) * s + eff - in;
      if (total < 0) total = 0;
      pb = total / 2;
      pe = total - pb;
    }
    g->pb[j] = pb;
    g->pe[j] = pe;
    int64_t len = in + pb + pe;
    if (len < eff)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "%s: input %s is smaller in dim %d than the window (size %lld, dilation %lld) with its "
          "padding", kind_op[a->kind], SX, i, (long long)g->k[j], (long long)dl);
    int64_t o = (len - eff) / s + 1;
    if (a->ceil_mode && (len - eff) % s) {
      o++;
      if ((o - 1) * s >= in + pb) o--;
    }
    g->out[j] = o;
  }
  return FLOE_OK;
}
#undef SX
#undef SF

void wnd_to_f64(FloeDType dt, const void *src, double *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
      case FLOE_F32: dst[i] = ((const float *)src)[i]; break;
      case FLOE_F64: dst[i] = ((const double *)src)[i]; break;
      case FLOE_F16: dst[i] = cpu_f16_to_f32(((const uint16_t *)src)[i]); break;
      case FLOE_BF16: dst[i] = cpu_bf16_to_f32(((const uint16_t *)src)[i]); break;
      case FLOE_I8: dst[i] = ((const int8_t *)src)[i]; break;
      case FLOE_U8: dst[i] = ((const uint8_t *)src)[i]; break;
      case FLOE_I32: dst[i] = ((const int32_t *)src)[i]; break;
      case FLOE_I64: dst[i] = (double)((const int64_t *)src)[i]; break;
      default: dst[i] = 0;
    }
  }
}

/* v rounded to the nearest integer and clamped to [lo, hi]. */
static double clamp_round(double v, double lo, double hi) {
  v = nearbyint(v);
  return v < lo ? lo : v > hi ? hi : v;
}

void wnd_from_f64(FloeDType dt, const double *src, void *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = src[i];
    switch (dt) {
      case FLOE_F32: ((float *)dst)[i] = (float)v; break;
      case FLOE_F64: ((double *)dst)[i] = v; break;
      case FLOE_F16: ((uint16_t *)dst)[i] = cpu_f32_to_f16((float)v); break;
      case FLOE_BF16: ((uint16_t *)dst)[i] = cpu_f32_to_bf16((float)v); break;
      case FLOE_I8: ((int8_t *)dst)[i] = (int8_t)clamp_round(v, -128, 127); break;
      case FLOE_U8: ((uint8_t *)dst)[i] = (uint8_t)clamp_round(v, 0, 255); break;
      case FLOE_I32: ((int32_t *)dst)[i] = (int32_t)clamp_round(v, -2147483648.0, 2147483647.0); break;
      case FLOE_I64: ((int64_t *)dst)[i] = (int64_t)clamp_round(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
      default: break;
    }
  }
}
