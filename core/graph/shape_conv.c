/* SPDX-License-Identifier: Apache-2.0 */
/* shape_conv.c - shape functions of the N-d convolution and pooling ops (ops_conv.def).
 *
 * The window rules here are the ones the CPU kernels apply (plugins/cpu/window_nd.c): a
 * definite mismatch is an error naming the attribute or shapes, unknown dims propagate. */
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) FLOE__PRINTF(2, 3);

static floe_code fail(FloeShapeContext *sctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe_code c = floe__status_vset(sctx->status, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return c;
}

static const FloeAttrValue *attr(const FloeShapeContext *sctx, const char *name,
                                 FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&sctx->node->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

/* The window attributes of one node, resolved for an input of rank `rank`. */
typedef struct Win {
  int rank, ns, c_dim, sp0; /* sp0: index of the first spatial dim */
  int64_t k[FLOE_MAX_DIMS], s[FLOE_MAX_DIMS], d[FLOE_MAX_DIMS], op[FLOE_MAX_DIMS];
  int64_t pb[FLOE_MAX_DIMS], pe[FLOE_MAX_DIMS];
  int pad; /* 'V', 'S', 'E' */
  bool ceil_mode;
} Win;

/* A list attribute with one entry per input dim (1 for N and C; `zero`: 0 for them and
 * >= 0 elsewhere, else >= 1), or empty for dflt everywhere. */
static floe_code win_list(FloeShapeContext *sctx, const Win *w, const char *name, bool zero,
                          int64_t dflt, int64_t *out) {
  const FloeAttrValue *v = attr(sctx, name, FLOE_ATTR_INT_LIST);
  size_t n = v ? v->u.ilist.n : 0;
  for (int i = 0; i < w->rank; i++) out[i] = (i == 0 || i == w->c_dim) ? (zero ? 0 : 1) : dflt;
  if (n == 0) return FLOE_OK;
  if (n != (size_t)w->rank)
    return fail(sctx, "%s: attribute '%s' has %zu entries; the input has rank %d",
                sctx->node->op->name, name, n, w->rank);
  for (int i = 0; i < w->rank; i++) {
    int64_t x = v->u.ilist.v[i];
    bool edge = i == 0 || i == w->c_dim;
    if ((edge && x != (zero ? 0 : 1)) || (!edge && x < (zero ? 0 : 1)))
      return fail(sctx, "%s: attribute '%s' entry %d is %lld; it must be %s", sctx->node->op->name,
                  name, i, (long long)x,
                  edge ? (zero ? "0 for the batch and channel dims" : "1 for the batch and channel dims")
                       : (zero ? ">= 0" : ">= 1"));
    out[i] = x;
  }
  return FLOE_OK;
}

static floe_code win_parse(FloeShapeContext *sctx, int rank, bool channels_first, bool pooling,
                           bool transpose, Win *w) {
  memset(w, 0, sizeof *w);
  w->rank = rank;
  w->ns = rank - 2;
  w->c_dim = channels_first ? 1 : rank - 1;
  w->sp0 = channels_first ? 2 : 1;
  const char *op = sctx->node->op->name;
  if (w->ns < 1 || w->ns > 3)
    return fail(sctx, "%s needs an input of rank 3 to 5 (1 to 3 spatial dims), got rank %d", op,
                rank);
  floe_code c;
  if ((c = win_list(sctx, w, "strides", false, 1, w->s)) != FLOE_OK ||
      (c = win_list(sctx, w, "dilations", false, 1, w->d)) != FLOE_OK)
    return c;
  if (pooling) {
    const FloeAttrValue *k = attr(sctx, "ksize", FLOE_ATTR_INT_LIST);
    if (!k || k->u.ilist.n == 0) return fail(sctx, "%s needs attribute 'ksize'", op);
    if ((c = win_list(sctx, w, "ksize", false, 1, w->k)) != FLOE_OK) return c;
    const FloeAttrValue *cm = attr(sctx, "ceil_mode", FLOE_ATTR_BOOL);
    w->ceil_mode = cm && cm->u.b;
  }
  if (transpose && (c = win_list(sctx, w, "output_padding", true, 0, w->op)) != FLOE_OK) return c;
  const FloeAttrValue *p = attr(sctx, "padding", FLOE_ATTR_STRING);
  const char *pad = p ? p->u.s : "VALID";
  if (!strcmp(pad, "VALID")) w->pad = 'V';
  else if (!strcmp(pad, "SAME") && !transpose) w->pad = 'S';
  else if (!strcmp(pad, "EXPLICIT")) w->pad = 'E';
  else
    return fail(sctx, "%s: attribute 'padding' must be %s, got '%s'", op,
                transpose ? "VALID or EXPLICIT" : "VALID, SAME or EXPLICIT", pad);
  if (w->pad != 'E') return FLOE_OK;
  const FloeAttrValue *e = attr(sctx, "explicit_paddings", FLOE_ATTR_INT_LIST);
  if (!e || e->u.ilist.n != (size_t)(2 * rank))
    return fail(sctx, "%s: EXPLICIT padding needs explicit_paddings with %d entries (a pair per "
                      "input dim), got %zu", op, 2 * rank, e ? e->u.ilist.n : (size_t)0);
  for (int i = 0; i < rank; i++) {
    int64_t b = e->u.ilist.v[2 * i], a = e->u.ilist.v[2 * i + 1];
    bool edge = i == 0 || i == w->c_dim;
    if ((edge && (b || a)) || (!transpose && (b < 0 || a < 0)))
      return fail(sctx, "%s: explicit_paddings (%lld, %lld) of dim %d must be %s", op,
                  (long long)b, (long long)a, i, edge ? "0 for the batch and channel dims" : ">= 0");
    w->pb[i] = b;
    w->pe[i] = a;
  }
  return FLOE_OK;
}

/* Output size of spatial dim i of a forward window op (conv or pool). */
static floe_code win_out(FloeShapeContext *sctx, const Win *w, int i, int64_t in, int64_t k,
                         int64_t *out) {
  *out = FLOE_DIM_UNKNOWN;
  if (in < 0) return FLOE_OK;
  if (w->pad == 'S') {
    *out = (in + w->s[i] - 1) / w->s[i];
    return FLOE_OK;
  }
  if (k < 0) return FLOE_OK;
  int64_t eff = (k - 1) * w->d[i] + 1, len = in + w->pb[i] + w->pe[i];
  if (len < eff)
    return fail(sctx, "%s: the window of dim %d (size %lld, dilation %lld) is larger than the "
                      "padded input (%lld)", sctx->node->op->name, i, (long long)k,
                (long long)w->d[i], (long long)len);
  int64_t o = (len - eff) / w->s[i] + 1;
  if (w->ceil_mode && (len - eff) % w->s[i]) {
    o++;
    if ((o - 1) * w->s[i] >= in + w->pb[i]) o--; /* the last window must start inside */
  }
  *out = o;
  return FLOE_OK;
}

static bool channels_first(FloeShapeContext *sctx, const char *dflt, floe_code *c) {
  const FloeAttrValue *v = attr(sctx, "data_format", FLOE_ATTR_STRING);
  const char *df = v ? v->u.s : dflt;
  *c = FLOE_OK;
  if (!strcmp(df, "CHANNELS_FIRST")) return true;
  if (!strcmp(df, "CHANNELS_LAST")) return false;
  *c = fail(sctx, "%s: attribute 'data_format' must be CHANNELS_FIRST or CHANNELS_LAST, got '%s'",
            sctx->node->op->name, df);
  return false;
}

/* Rank of the op from its input and filter (the filter's rank is the input's). */
static int conv_rank(const FloeShape *x, const FloeShape *f) {
  return x->rank >= 0 ? x->rank : f->rank;
}

/* The output *res of Conv (or ConvTranspose) with the node's attributes for input x and
 * filter f. */
static floe_code conv_out(FloeShapeContext *sctx, const FloeShape *x, const FloeShape *f,
                          bool transpose, FloeShape *res) {
  const char *op = sctx->node->op->name;
  floe_code c;
  bool cf = channels_first(sctx, "CHANNELS_LAST", &c);
  if (c != FLOE_OK) return c;
  int rank = conv_rank(x, f);
  *res = floe_shape_unknown();
  if (rank < 0) return FLOE_OK;
  if (x->rank >= 0 && f->rank >= 0 && x->rank != f->rank)
    return fail(sctx, "%s: input %s and filter %s must have the same rank", op, SHAPE_STR(*x),
                SHAPE_STR(*f));
  Win w;
  if ((c = win_parse(sctx, rank, cf, false, transpose, &w)) != FLOE_OK) return c;
  const FloeAttrValue *gv = attr(sctx, "groups", FLOE_ATTR_INT);
  int64_t groups = gv ? gv->u.i : 1;
  int64_t in_c = x->rank >= 0 ? x->dims[w.c_dim] : FLOE_DIM_UNKNOWN;
  int64_t f_in = f->rank >= 0 ? f->dims[rank - 2] : FLOE_DIM_UNKNOWN;
  int64_t f_out = f->rank >= 0 ? f->dims[rank - 1] : FLOE_DIM_UNKNOWN;
  FloeShape out = floe_shape_unknown();
  out.rank = rank;
  for (int i = 0; i < rank; i++) out.dims[i] = FLOE_DIM_UNKNOWN;
  if (x->rank >= 0) out.dims[0] = x->dims[0];
  if (!transpose) {
    if (in_c >= 0 && f_in >= 0 && in_c != f_in * groups)
      return fail(sctx, "%s: input %s has %lld channels but filter %s with %lld groups reads %lld",
                  op, SHAPE_STR(*x), (long long)in_c, SHAPE_STR(*f), (long long)groups,
                  (long long)(f_in * groups));
    if (f_out >= 0 && f_out % groups)
      return fail(sctx, "%s: filter %s has %lld output channels, not a multiple of %lld groups", op,
                  SHAPE_STR(*f), (long long)f_out, (long long)groups);
    out.dims[w.c_dim] = f_out;
  } else {
    if (in_c >= 0 && f_out >= 0 && in_c != f_out)
      return fail(sctx, "%s: input %s has %lld channels but filter %s maps %lld", op,
                  SHAPE_STR(*x), (long long)in_c, SHAPE_STR(*f), (long long)f_out);
    if (f_out >= 0 && f_out % groups)
      return fail(sctx, "%s: filter %s has %lld input channels, not a multiple of %lld groups", op,
                  SHAPE_STR(*f), (long long)f_out, (long long)groups);
    out.dims[w.c_dim] = f_in >= 0 ? f_in * groups : FLOE_DIM_UNKNOWN;
  }
  for (int j = 0; j < w.ns; j++) {
    int i = w.sp0 + j;
    int64_t in = x->rank >= 0 ? x->dims[i] : FLOE_DIM_UNKNOWN;
    int64_t k = f->rank >= 0 ? f->dims[j] : FLOE_DIM_UNKNOWN;
    if (!transpose) {
      if ((c = win_out(sctx, &w, i, in, k, &out.dims[i])) != FLOE_OK) return c;
    } else if (in >= 0 && k >= 0) {
      int64_t o = (in - 1) * w.s[i] + (k - 1) * w.d[i] + 1 + w.op[i] - w.pb[i] - w.pe[i];
      if (o < 0)
        return fail(sctx, "%s: dim %d of the output would have %lld elements", op, i,
                    (long long)o);
      out.dims[i] = o;
    }
  }
  *res = out;
  return FLOE_OK;
}

/* Conv and ConvTranspose. */
static floe_code shape_conv_common(FloeShapeContext *sctx, bool transpose) {
  return conv_out(sctx, &sctx->input_shapes[0], &sctx->input_shapes[1], transpose,
                  &sctx->output_shapes[0]);
}

floe_code floe__shape_conv_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  return shape_conv_common(sctx, false);
}

static bool flag(const FloeShapeContext *sctx, const char *name) {
  const FloeAttrValue *v = attr(sctx, name, FLOE_ATTR_BOOL);
  return v && v->u.b;
}

static int64_t block_of(const FloeShapeContext *sctx) {
  const FloeAttrValue *v = attr(sctx, "block", FLOE_ATTR_INT);
  return v ? v->u.i : 16;
}

/* Blocked [N, ceil(C / block), spatial..., block] from channels-last x (rank 3 to 5); a last
 * block that C does not fill is padded. */
static floe_code to_blocked(FloeShapeContext *sctx, const FloeShape *x, int64_t block,
                            FloeShape *out) {
  const char *op = sctx->node->op->name;
  *out = floe_shape_unknown();
  if (x->rank < 0) return FLOE_OK;
  if (x->rank < 3 || x->rank > 5)
    return fail(sctx, "%s: the channels-last input %s must have rank 3 to 5", op,
                SHAPE_STR(*x));
  int64_t c = x->dims[x->rank - 1];
  out->rank = x->rank + 1;
  out->dims[0] = x->dims[0];
  out->dims[1] = c >= 0 ? (c + block - 1) / block : FLOE_DIM_UNKNOWN;
  for (int i = 1; i < x->rank - 1; i++) out->dims[i + 1] = x->dims[i];
  out->dims[x->rank] = block;
  return FLOE_OK;
}

/* Channels-last [N, spatial..., C] from blocked x: C is `channels` when it is not 0 (it must
 * fall in the last block), else the blocks' whole width. */
static floe_code from_blocked(FloeShapeContext *sctx, const FloeShape *x, int64_t block,
                              int64_t channels, FloeShape *out) {
  const char *op = sctx->node->op->name;
  *out = floe_shape_unknown();
  if (x->rank < 0) return FLOE_OK;
  if (x->rank < 4 || x->rank > 6 || (x->dims[x->rank - 1] >= 0 && x->dims[x->rank - 1] != block))
    return fail(sctx, "%s: the blocked input %s must be [N, C / %lld, 1 to 3 spatial dims, %lld]",
                op, SHAPE_STR(*x), (long long)block, (long long)block);
  int64_t blocks = x->dims[1];
  if (channels > 0 && blocks >= 0 && (channels + block - 1) / block != blocks)
    return fail(sctx, "%s: %lld channels do not fill the last of the %lld blocks of %lld of %s",
                op, (long long)channels, (long long)blocks, (long long)block, SHAPE_STR(*x));
  out->rank = x->rank - 1;
  out->dims[0] = x->dims[0];
  for (int i = 2; i < x->rank - 1; i++) out->dims[i - 1] = x->dims[i];
  out->dims[out->rank - 1] = channels > 0 ? channels
                             : blocks >= 0 ? blocks * block
                                           : FLOE_DIM_UNKNOWN;
  return FLOE_OK;
}

floe_code floe__shape_to_blocked(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  return to_blocked(sctx, &sctx->input_shapes[0], block_of(sctx), &sctx->output_shapes[0]);
}

floe_code floe__shape_from_blocked(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  const FloeAttrValue *ch = attr(sctx, "channels", FLOE_ATTR_INT);
  return from_blocked(sctx, &sctx->input_shapes[0], block_of(sctx), ch ? ch->u.i : 0,
                      &sctx->output_shapes[0]);
}

/* _FusedConv's bias (input 2) against the oc output channels (unknown: FLOE_DIM_UNKNOWN). */
static floe_code fused_bias(FloeShapeContext *sctx, int64_t oc) {
  const FloeShape *b = &sctx->input_shapes[2];
  if (b->rank >= 0 && b->rank != 1)
    return fail(sctx, "_FusedConv: the bias must be 1-D, got %s", SHAPE_STR(*b));
  if (b->rank == 1 && b->dims[0] >= 0 && oc >= 0 && b->dims[0] != oc)
    return fail(sctx, "_FusedConv: bias %s does not match the %lld output channels",
                SHAPE_STR(*b), (long long)oc);
  return FLOE_OK;
}

/* A blocked _FusedConv: the channels-last convolution's shapes, blocked, broadcast with the
 * blocked side input. */
static floe_code shape_fused_conv_blocked(FloeShapeContext *sctx, bool bias, bool add) {
  FloeShape x, y;
  floe_code c;
  bool plain = flag(sctx, "plain_input"), cf = channels_first(sctx, "CHANNELS_LAST", &c);
  if (c != FLOE_OK) return c;
  if (cf && !plain)
    return fail(sctx, "_FusedConv: a blocked one must be CHANNELS_LAST (or CHANNELS_FIRST with "
                      "plain_input)");
  /* The input's channels are the filter's (groups x its input channels): a last block they
   * do not fill is padding. */
  const FloeShape *f = &sctx->input_shapes[1];
  const FloeAttrValue *gv = attr(sctx, "groups", FLOE_ATTR_INT);
  int64_t fc = f->rank >= 3 && f->dims[f->rank - 2] >= 0 ? f->dims[f->rank - 2] * (gv ? gv->u.i : 1)
                                                         : 0;
  if (plain)
    x = sctx->input_shapes[0];
  else if ((c = from_blocked(sctx, &sctx->input_shapes[0], 16, fc, &x)) != FLOE_OK)
    return c;
  if ((c = conv_out(sctx, &x, &sctx->input_shapes[1], false, &y)) != FLOE_OK) return c;
  if (cf && y.rank >= 3) { /* [N, O, spatial...] -> [N, spatial..., O] */
    int64_t o = y.dims[1];
    memmove(&y.dims[1], &y.dims[2], (size_t)(y.rank - 2) * sizeof y.dims[0]);
    y.dims[y.rank - 1] = o;
  }
  if ((c = to_blocked(sctx, &y, 16, &sctx->output_shapes[0])) != FLOE_OK) return c;
  const FloeShape *out = &sctx->output_shapes[0];
  if (bias && (c = fused_bias(sctx, y.rank >= 0 ? y.dims[y.rank - 1] : FLOE_DIM_UNKNOWN)))
    return c;
  FloeShape conv = *out;
  if (add)
    return floe__shape_broadcast_pair(sctx, &conv, &sctx->input_shapes[2 + bias],
                                      &sctx->output_shapes[0]);
  return FLOE_OK;
}

/* _FusedConv: Conv's output, checked against the bias and broadcast with the side input. */
floe_code floe__shape_fused_conv(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  bool bias = flag(sctx, "fused_bias"), add = flag(sctx, "fused_add");
  int nargs = sctx->node->num_inputs - 2;
  if (nargs != (int)bias + (int)add)
    return fail(sctx, "_FusedConv: %d extra inputs, but fused_bias and fused_add ask for %d",
                nargs, (int)bias + (int)add);
  if (flag(sctx, "blocked")) return shape_fused_conv_blocked(sctx, bias, add);
  floe_code c = shape_conv_common(sctx, false);
  if (c != FLOE_OK) return c;
  FloeShape out = sctx->output_shapes[0];
  if (bias) {
    bool cf = channels_first(sctx, "CHANNELS_LAST", &c);
    if ((c = fused_bias(sctx, out.rank >= 0 ? out.dims[cf ? 1 : out.rank - 1]
                                            : FLOE_DIM_UNKNOWN)) != FLOE_OK)
      return c;
  }
  if (add &&
      (c = floe__shape_broadcast_pair(sctx, &out, &sctx->input_shapes[2 + bias], &out)) != FLOE_OK)
    return c;
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}

floe_code floe__shape_conv_transpose(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  return shape_conv_common(sctx, true);
}

/* The output *res of a pooling op with the node's attributes (with_indices:
 * MaxPoolWithIndices, channels first, no pooling_type) for input x. */
static floe_code pool_out(FloeShapeContext *sctx, const FloeShape *x, bool with_indices,
                          FloeShape *res) {
  const char *op = sctx->node->op->name;
  floe_code c;
  bool cf = with_indices || channels_first(sctx, "CHANNELS_LAST", &c);
  if (!with_indices && c != FLOE_OK) return c;
  if (!with_indices) {
    const FloeAttrValue *t = attr(sctx, "pooling_type", FLOE_ATTR_STRING);
    if (!t || (strcmp(t->u.s, "MAX") && strcmp(t->u.s, "AVG")))
      return fail(sctx, "%s: attribute 'pooling_type' must be MAX or AVG, got '%s'", op,
                  t ? t->u.s : "");
  }
  const FloeAttrValue *k = attr(sctx, "ksize", FLOE_ATTR_INT_LIST);
  int rank = x->rank >= 0 ? x->rank : (k ? (int)k->u.ilist.n : -1);
  FloeShape out = floe_shape_unknown();
  if (rank >= 0) {
    Win w;
    if ((c = win_parse(sctx, rank, cf, true, false, &w)) != FLOE_OK) return c;
    out.rank = rank;
    for (int i = 0; i < rank; i++) out.dims[i] = x->rank >= 0 ? x->dims[i] : FLOE_DIM_UNKNOWN;
    for (int j = 0; j < w.ns; j++) {
      int i = w.sp0 + j;
      if ((c = win_out(sctx, &w, i, out.dims[i], w.k[i], &out.dims[i])) != FLOE_OK) return c;
    }
  }
  *res = out;
  return FLOE_OK;
}

/* Pool and MaxPoolWithIndices (its outputs share the shape). */
floe_code floe__shape_pool_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  FloeShape out;
  floe_code c = pool_out(sctx, &sctx->input_shapes[0], sctx->node->num_outputs > 1, &out);
  if (c != FLOE_OK) return c;
  for (int i = 0; i < sctx->node->num_outputs; i++) sctx->output_shapes[i] = out;
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* The gradient ops (ops_convgrad.def). */

/* A gradient input g (named `name`) must have the forward op's output shape want where
 * both are known. */
static floe_code check_fwd_out(FloeShapeContext *sctx, const FloeShape *g, const char *name,
                               const FloeShape *want, const char *fwd) {
  bool ok = g->rank < 0 || want->rank < 0 || g->rank == want->rank;
  for (int i = 0; ok && g->rank >= 0 && i < g->rank && i < want->rank; i++)
    ok = g->dims[i] < 0 || want->dims[i] < 0 || g->dims[i] == want->dims[i];
  if (ok) return FLOE_OK;
  return fail(sctx, "%s: %s %s does not have the shape %s of the %s output it is the gradient "
                    "of", sctx->node->op->name, name, SHAPE_STR(*g), SHAPE_STR(*want), fwd);
}

/* ConvBackpropInputNd (sizes: input 0) and ConvBackpropFilterNd (sizes: input 1): the
 * output has the shape the sizes input holds; out_backprop must have Conv's output shape. */
static floe_code shape_conv_backprop(const FloeHostApi *host, FloeShapeContext *sctx,
                                     int sizes) {
  floe_code c = sizes == 0 ? floe__shape_from_shape_input(host, sctx)
                           : floe__shape_from_shape_input1(host, sctx);
  if (c != FLOE_OK) return c;
  FloeShape sz = sctx->output_shapes[0], y;
  const FloeShape *x = sizes == 0 ? &sz : &sctx->input_shapes[0];
  const FloeShape *f = sizes == 0 ? &sctx->input_shapes[1] : &sz;
  if (x->rank >= 0 && f->rank >= 0 && x->rank != f->rank)
    return fail(sctx, "%s: %s %s and %s %s must have the same rank", sctx->node->op->name,
                sizes == 0 ? "input_sizes" : "input", SHAPE_STR(*x),
                sizes == 0 ? "filter" : "filter_sizes", SHAPE_STR(*f));
  if ((c = conv_out(sctx, x, f, false, &y)) != FLOE_OK) return c;
  return check_fwd_out(sctx, &sctx->input_shapes[2], "out_backprop", &y, "Conv");
}

floe_code floe__shape_conv_backprop_input_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  return shape_conv_backprop(host, sctx, 0);
}

floe_code floe__shape_conv_backprop_filter_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  return shape_conv_backprop(host, sctx, 1);
}

/* PoolGrad: orig_input's shape; grad must have Pool's output shape. */
floe_code floe__shape_pool_grad_nd(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  const FloeShape *x = &sctx->input_shapes[0];
  FloeShape y;
  floe_code c = pool_out(sctx, x, false, &y);
  if (c != FLOE_OK) return c;
  if ((c = check_fwd_out(sctx, &sctx->input_shapes[1], "grad", &y, "Pool")) != FLOE_OK) return c;
  sctx->output_shapes[0] = *x;
  return FLOE_OK;
}
