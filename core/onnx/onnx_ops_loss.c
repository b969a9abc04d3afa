/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_loss.c - ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss as Floe ops.
 *
 * Both pick, for each sample (and each extra position d1..dk), the input at the target class
 * on axis 1, weight it by weight[target] (0 where target == ignore_index) and reduce:
 * 'none' keeps [N, d1..dk], 'sum' adds, 'mean' divides the sum by the sum of the weights. The
 * pick is a product with a one-hot of the target over the class axis moved last. */
#include <string.h>

#include "onnx_internal.h"

static FloeOutput select3(OxCtx *c, FloeOutput cond, FloeOutput t, FloeOutput e) {
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, cond);
  floe_node_add_input(b, t);
  floe_node_add_input(b, e);
  return ox_finish(c, b);
}

static FloeOutput reduce_all(OxCtx *c, FloeOutput x, int rank) {
  int64_t axes[FLOE_MAX_DIMS];
  for (int i = 0; i < rank; i++) axes[i] = i;
  FloeNodeBuilder *b = ox_begin(c, "Sum");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_const_i64(c, axes, rank));
  return ox_finish(c, b);
}

/* The NLL of log-probabilities x [N, C, d1..dk] at integer targets t [N, d1..dk]. */
static floe_code nll(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, FloeOutput t,
                     FloeOutput weight, FloeOutput *loss) {
  FloeShape xs = ox_shape(x), ts = ox_shape(t);
  if (xs.rank < 2)
    return ox_fail(c, xs.rank < 0 ? FLOE_UNIMPLEMENTED : FLOE_INVALID_ARGUMENT,
                   "the input must be [N, C, d1..dk] of known rank, is rank %d", xs.rank);
  if (ts.rank >= 0 && ts.rank != xs.rank - 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the target has rank %d; the input's rank %d needs %d",
                   ts.rank, xs.rank, xs.rank - 1);
  int64_t classes = xs.dims[1];
  if (classes < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "the class dim's size is not known");
  char rbuf[16];
  const char *red = ox_str(n, "reduction", "mean", rbuf, sizeof rbuf);
  if (strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "reduction '%s' (mean, sum or none)", red);
  FloeDType dt = ox_dtype(x);
  int r = xs.rank;
  /* class axis last: [N, d1..dk, C] */
  int64_t perm[FLOE_MAX_DIMS];
  perm[0] = 0;
  for (int i = 2; i < r; i++) perm[i - 1] = i;
  perm[r - 1] = 1;
  FloeOutput xl = r > 2 ? ox_binary(c, "Transpose", x, ox_const_i64(c, perm, r)) : x;
  FloeOutput t64 = ox_cast(c, t, FLOE_I64), valid = {NULL, 0};
  const Onnx__AttributeProto *ia = ox_attr(n, "ignore_index");
  if (ia && ia->has_i) {
    valid = ox_binary(c, "NotEqual", t64, ox_scalar_i64(c, ia->i));
    t64 = select3(c, valid, t64, ox_unary(c, "ZerosLike", t64));
  }
  FloeNodeBuilder *b = ox_begin(c, "OneHot");
  floe_node_add_input(b, t64);
  floe_node_add_input(b, ox_scalar_i32(c, (int32_t)classes));
  floe_node_add_input(b, ox_scalar(c, dt, 1.0));
  floe_node_add_input(b, ox_scalar(c, dt, 0.0));
  floe_node_set_attr_int(b, "axis", -1);
  FloeOutput hot = ox_finish(c, b);
  int64_t last = r - 1;
  b = ox_begin(c, "Sum");
  floe_node_add_input(b, ox_binary(c, "Mul", xl, hot));
  floe_node_add_input(b, ox_const_i64(c, &last, 1));
  FloeOutput picked = ox_finish(c, b); /* [N, d1..dk] */
  FloeOutput w = {NULL, 0};
  if (ox_present(weight)) {
    b = ox_begin(c, "Gather");
    floe_node_add_input(b, ox_cast(c, weight, dt));
    floe_node_add_input(b, t64);
    w = ox_finish(c, b);
  }
  if (ox_present(valid)) {
    FloeOutput v = ox_cast(c, valid, dt);
    w = ox_present(w) ? ox_binary(c, "Mul", w, v) : v;
  }
  FloeOutput l = ox_unary(c, "Neg", picked);
  if (ox_present(w)) l = ox_binary(c, "Mul", l, w);
  if (!strcmp(red, "none")) {
    *loss = l;
  } else {
    FloeOutput total = reduce_all(c, l, r - 1);
    if (!strcmp(red, "sum")) {
      *loss = total;
    } else if (ox_present(w)) {
      *loss = ox_binary(c, "Div", total, reduce_all(c, w, r - 1));
    } else {
      FloeNodeBuilder *sb = ox_begin(c, "Size");
      floe_node_add_input(sb, picked);
      floe_node_set_attr_type(sb, "out_type", FLOE_I64);
      *loss = ox_binary(c, "Div", total, ox_cast(c, ox_finish(c, sb), dt));
    }
  }
  return FLOE_OK;
}

OX_MAP(map_nll) {
  (void)nout;
  if (nin < 2 || !ox_present(in[0]) || !ox_present(in[1]))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "needs the input and the target");
  return nll(c, n, in[0], in[1], nin > 2 ? in[2] : (FloeOutput){NULL, 0}, &out[0]);
}

OX_MAP(map_softmax_xent) {
  if (nin < 2 || !ox_present(in[0]) || !ox_present(in[1]))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "needs the scores and the labels");
  if (ox_shape(in[0]).rank < 2)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the scores must be [N, C, d1..dk]");
  FloeNodeBuilder *b = ox_begin(c, "LogSoftmax");
  floe_node_add_input(b, in[0]);
  floe_node_set_attr_int(b, "axis", 1);
  FloeOutput logp = ox_finish(c, b);
  floe_code rc = nll(c, n, logp, in[1], nin > 2 ? in[2] : (FloeOutput){NULL, 0}, &out[0]);
  if (rc == FLOE_OK && nout > 1) out[1] = logp;
  return rc;
}

const OxOp floe__onnx_ops_loss[] = {
    {"", "NegativeLogLikelihoodLoss", map_nll},
    {"", "SoftmaxCrossEntropyLoss", map_softmax_xent},
    {NULL, NULL, NULL},
};
