/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_nn.c - shape functions of the standard set's matrix products, BiasAdd, 2-D
 * convolution and pooling, and of the fused LSTM cells and their gradients (ops_rnn.def).
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

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
    if (x[i] <= 0)
      return fail(sctx, "attribute '%s' must be positive, got %s", name, INTS_STR(x, n));
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
