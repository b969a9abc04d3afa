/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_inspect.c - floe inspect FILE: what a Floe graph, ONNX model, safetensors or .npy file
 * holds, recognised by its first bytes (not its name). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <floe/floe_onnx.h>

#include "cli.h"
#include "table.h"

#define CMD "inspect"
#define SAFETENSORS_HEADER_MAX (100u << 20) /* 100 MB */

static const char inspect_help[] =
    "Usage: floe inspect FILE [--json]\n"
    "Summarise FILE, recognised by its content: a Floe graph (nodes by op, parameters,\n"
    "inputs, outputs, FLOPs per step), an ONNX model (the same, after import), a\n"
    "safetensors file (tensors, totals, metadata) or a .npy file (dtype, shape, order,\n"
    "min/max/mean). Parameters: a graph's variables, or without any its floating-point\n"
    "constants. --json prints the same as one JSON object.\n"
    "FLOPs (a multiply-add is 2) per node from its shapes, by category; dims of unknown\n"
    "size count as 1 (FLOPs per example); nodes of unknown shapes are counted as such:\n"
    "  matmul       MatMul, BatchMatMul: 2*M*N*K\n"
    "  conv         Conv2D, Conv, the fused convolutions: 2 * output elements *\n"
    "               kh*kw*cin/groups; their gradients as the forward convolution;\n"
    "               ConvTranspose: 2 * input elements * kh*kw*cout/groups\n"
    "  pooling      MaxPool, AvgPool, Pool: output elements * window size (their\n"
    "               gradients the same); RoiAlign: 8 per bilinear sample\n"
    "  softmax      Softmax, LogSoftmax: 5 per element (max, sub, exp, sum, div); sparse\n"
    "               softmax cross-entropy 6 per logit, dense 8 (ONNX's BatchNormalization\n"
    "               and LayerNormalization import as elementwise ops and reductions)\n"
    "  reduction    Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, Cumsum, BiasAddGrad, ...:\n"
    "               input elements\n"
    "  recurrent    LSTMCell, x [B,I], h [B,H]: 2*B*(I+H)*4H + 13*B*H (bias, gates,\n"
    "               c and h updates); its gradients: the product again for d[x,h]\n"
    "               (twice with dw) + 20*B*H (24 with db); ONNX's RNN, GRU and LSTM: a\n"
    "               cell's count per step and direction\n"
    "  elementwise  arithmetic, activations, comparisons, BiasAdd and their gradients:\n"
    "               one per output element (AddN: N-1)\n"
    "  optimizer    ResourceApply*: per gradient element, GradientDescent 2, Momentum 4,\n"
    "               Adam 12, RMSProp 11, Adagrad 7\n"
    "  other        Resize, GridSample (2 per tap), DFT and STFT (5*n*log2 n per\n"
    "               transform), MatrixDeterminant (2/3*n^3), TfIdfVectorizer\n"
    "Data movement, Const, Identity, Cast, Select, logical, index and selection ops,\n"
    "generators, variables, queues and control flow count 0. A while loop's body is\n"
    "counted once, not once per iteration (its trip count is not in the graph).\n";

/* ---------------------------------------------------------------- shared helpers */

static void json_shape(JsonWriter *w, const FloeShape *s) {
  if (s->rank < 0) {
    json_null(w);
    return;
  }
  json_begin_array(w);
  for (int d = 0; d < s->rank; d++) s->dims[d] < 0 ? json_null(w) : json_int(w, s->dims[d]);
  json_end_array(w);
}

static const char *shape_text(const FloeShape *s, char *buf, size_t len) {
  if (s->rank < 0) return "unknown";
  return floe_shape_str(s, buf, len);
}

/* s with control characters (from a damaged file's names) as '?', so an error stays one
 * line; in place. */
static char *one_line(char *s) {
  for (char *p = s; p && *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return s;
}

/* A count (an integral double): an integer while exact, else the shortest double. */
static void json_count(JsonWriter *w, double v) {
  if (v >= 0 && v <= 9007199254740992.0 && v == floor(v)) json_uint(w, (uint64_t)v);
  else json_double(w, v);
}

/* A statistic: integral values as integers, others in the shortest form. */
static const char *num_text(char buf[32], double v) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    snprintf(buf, 32, "%.0f", v);
    return buf;
  }
  return json_format_double(buf, v);
}

static void json_num(JsonWriter *w, double v) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) json_int(w, (int64_t)v);
  else json_double(w, v);
}

/* ---------------------------------------------------------------- graphs and ONNX models */

typedef struct {
  const char *op;
  int count;
} OpCount;

typedef struct {
  const FloeNode *node;
  int index;
} NodeIndex;

static int cmp_node_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const NodeIndex *)a)->node, y = (uintptr_t)((const NodeIndex *)b)->node;
  return x < y ? -1 : x > y;
}

static int cmp_op_count(const void *a, const void *b) {
  const OpCount *x = a, *y = b;
  if (x->count != y->count) return y->count - x->count;
  return strcmp(x->op, y->op);
}

static int is_float_dtype(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* ---------------------------------------------------------------- FLOPs
 * Conventional counts, one multiply-add being 2 FLOPs, per node from the shapes shape
 * inference gave it (a dim of unknown size counts as 1, so with an unknown batch dim the
 * figures are per example), in categories:
 *   matmul       MatMul, BatchMatMul: 2*M*N*K (M*N the output's elements, batch included).
 *   conv         Conv2D, Conv, _FusedConv, _FusedConv2DBiasRelu: 2 * output elements * the
 *                filter's elements per output channel (kh*kw*cin/groups; the filter is
 *                [spatial..., in/groups, out]); the gradients Conv2DBackpropInput,
 *                ConvBackpropInputNd, Conv2DBackpropFilter and ConvBackpropFilterNd as the
 *                forward convolution (2 * out_backprop elements * filter elements per output
 *                channel); ConvTranspose: 2 * input elements * the filter's elements per input
 *                channel (its filter is [spatial..., out/groups, in]). The fused ops' bias,
 *                add and relu: one per output element each, under elementwise.
 *   pooling      MaxPool, AvgPool, Pool, MaxPoolWithIndices: output elements * window size
 *                (the product of ksize); their gradients (MaxPoolGrad, AvgPoolGrad, PoolGrad,
 *                _FusedMaxPoolGradRelu) the same over the forward output (the gradient);
 *                RoiAlign: 8 per bilinear sample (4 taps, a multiply-add each),
 *                sampling_ratio^2 samples per output element (2^2 when adaptive, 0).
 *   softmax      Softmax, LogSoftmax: 5 per element (max, subtract, exp, sum, divide);
 *                SparseSoftmaxCrossEntropyWithLogits: 6 per logit (the softmax and the
 *                gradient's subtraction); SoftmaxCrossEntropyWithLogits: 8 per logit (and the
 *                loss's multiply-add with the labels). The ONNX importer makes
 *                BatchNormalization, LayerNormalization and InstanceNormalization of
 *                elementwise ops and reductions (Mean), counted there.
 *   reduction    Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, Cumsum, BiasAddGrad, SumToShape,
 *                TileGrad: input elements; GatherGrad: the gradient's elements.
 *   recurrent    LSTMCell, x [B,I], h_prev [B,H]: 2*B*(I+H)*4H (the gates' product) +
 *                13*B*H (bias 4*B*H, the gates' nonlinearities 4*B*H, c = f*c_prev + i*g
 *                3*B*H, h = o*tanh(c) 2*B*H: what the primitive cell's ops count);
 *                LSTMCellRecurrent: 2*B*H*4H + 13*B*H; LSTMCellBackprop: 2*B*4H*(I+H)
 *                (d[x, h_prev]) + 20*B*H (the gate gradients, 5 per gate element);
 *                LSTMCellGrad: that + 2*(I+H)*B*4H (dw) + 4*B*H (db);
 *                LSTMCellRecurrentBackprop: 2*B*4H*H + 20*B*H; RNN, GRU and LSTM over
 *                x [S,B,I] with G gates (1, 3, 4) in D directions:
 *                S*D*B*H*(2*G*(I+H) + G + e), e the gates' other elementwise work per
 *                hidden unit (RNN 1, GRU 8, LSTM 9).
 *   elementwise  arithmetic, activations, comparisons and their gradients (Add, Mul, Relu,
 *                Sigmoid, BiasAdd, ReluGrad, Equal, ...): one per output element; AddN: N-1
 *                per output element; ExpandReduced with mean and ScatterElements/ScatterND
 *                with a reduction, AssignAdd/AssignSubVariableOp: one per element written.
 *   optimizer    ResourceApply*, per element of the gradient: GradientDescent 2, Momentum 4
 *                (Nesterov 6), Adam 12 (Nesterov 15), RMSProp 11, Adagrad 7.
 *   other        Resize and GridSample: 2 per tap per output element (linear 2 and cubic 4
 *                taps per resized dim, nearest none); DFT: 5*n*log2(n) per transform of length
 *                n; STFT: that per frame and the window's product; MatrixDeterminant:
 *                2/3*n^3 per matrix; TfIdfVectorizer: one per output element.
 * Everything else counts 0: data movement and shapes (Reshape, Transpose, Concat, Gather,
 * Slice, Pad, Tile, ...), Const, Identity, Cast, Select, logical ops, index and selection ops
 * (TopK, Unique, NonZero, BatchedNonMaxSuppression), generators (Fill, Range, random ops,
 * CosineSumWindow, MelWeightMatrix), variables, queues, TensorArrays and control flow. A while
 * loop's body counts once (the trip count is a run-time value). */

enum { FC_MATMUL, FC_CONV, FC_POOL, FC_SOFTMAX, FC_REDUCE, FC_RNN, FC_ELEM, FC_OPT, FC_OTHER, FC_N };
static const char *const flop_category[FC_N] = {"matmul",    "conv",      "pooling",
                                                "softmax",   "reduction", "recurrent",
                                                "elementwise", "optimizer", "other"};

enum {
  R_OUT = 1,    /* k per element of output 0 */
  R_INPUT,      /* k per element of input arg */
  R_ADDN,       /* (inputs - 1) per output element */
  R_MATMUL,
  R_CONV,       /* k: 0, or the fused epilogue per output element (-1: from the attributes) */
  R_CONV_BP_IN, /* filter input 1, out_backprop input 2 */
  R_CONV_BP_FILTER, /* out_backprop input 2, the filter's shape is the output's */
  R_CONV_T,
  R_POOL,       /* output elements * window; k: epilogue per output element */
  R_POOL_GRAD,  /* input arg has the forward output's shape; k: epilogue */
  R_ROI,
  R_LSTM_CELL, R_LSTM_REC, R_LSTM_BP, R_LSTM_GRAD, R_LSTM_REC_BP,
  R_RNN_SEQ,    /* arg: gates; k: the other elementwise work per hidden unit */
  R_OPTIM,      /* k per element of the gradient, input arg; nesterov adds `extra` */
  R_EXPAND_REDUCED, R_SCATTER, R_RESIZE, R_GRID, R_DFT, R_STFT, R_DET
};

typedef struct {
  const char *op;
  unsigned char rule, cat;
  signed char arg;
  float k, extra;
} FlopRule;

static const FlopRule flop_rules[] = {
    {"MatMul", R_MATMUL, FC_MATMUL, 0, 0, 0},
    {"BatchMatMul", R_MATMUL, FC_MATMUL, 0, 0, 0},
    {"Conv2D", R_CONV, FC_CONV, 0, 0, 0},
    {"Conv", R_CONV, FC_CONV, 0, 0, 0},
    {"_FusedConv", R_CONV, FC_CONV, 0, -1, 0},
    {"_FusedConv2DBiasRelu", R_CONV, FC_CONV, 0, 2, 0},
    {"Conv2DBackpropInput", R_CONV_BP_IN, FC_CONV, 0, 0, 0},
    {"ConvBackpropInputNd", R_CONV_BP_IN, FC_CONV, 0, 0, 0},
    {"Conv2DBackpropFilter", R_CONV_BP_FILTER, FC_CONV, 0, 0, 0},
    {"ConvBackpropFilterNd", R_CONV_BP_FILTER, FC_CONV, 0, 0, 0},
    {"ConvTranspose", R_CONV_T, FC_CONV, 0, 0, 0},
    {"MaxPool", R_POOL, FC_POOL, 0, 0, 0},
    {"AvgPool", R_POOL, FC_POOL, 0, 0, 0},
    {"Pool", R_POOL, FC_POOL, 0, 0, 0},
    {"MaxPoolWithIndices", R_POOL, FC_POOL, 0, 0, 0},
    {"MaxPoolGrad", R_POOL_GRAD, FC_POOL, 1, 0, 0},
    {"_FusedMaxPoolGradRelu", R_POOL_GRAD, FC_POOL, 1, 1, 0},
    {"AvgPoolGrad", R_POOL_GRAD, FC_POOL, 1, 0, 0},
    {"PoolGrad", R_POOL_GRAD, FC_POOL, 1, 0, 0},
    {"RoiAlign", R_ROI, FC_POOL, 0, 8, 0},
    {"Softmax", R_OUT, FC_SOFTMAX, 0, 5, 0},
    {"LogSoftmax", R_OUT, FC_SOFTMAX, 0, 5, 0},
    {"SparseSoftmaxCrossEntropyWithLogits", R_INPUT, FC_SOFTMAX, 0, 6, 0},
    {"SoftmaxCrossEntropyWithLogits", R_INPUT, FC_SOFTMAX, 0, 8, 0},
    {"Sum", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"Mean", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"Max", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"Min", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"Prod", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"ArgMax", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"ArgMin", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"Cumsum", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"BiasAddGrad", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"SumToShape", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"TileGrad", R_INPUT, FC_REDUCE, 0, 1, 0},
    {"GatherGrad", R_INPUT, FC_REDUCE, 2, 1, 0},
    {"LSTMCell", R_LSTM_CELL, FC_RNN, 0, 0, 0},
    {"LSTMCellRecurrent", R_LSTM_REC, FC_RNN, 0, 0, 0},
    {"LSTMCellBackprop", R_LSTM_BP, FC_RNN, 0, 0, 0},
    {"LSTMCellGrad", R_LSTM_GRAD, FC_RNN, 0, 0, 0},
    {"LSTMCellRecurrentBackprop", R_LSTM_REC_BP, FC_RNN, 0, 0, 0},
    {"RNN", R_RNN_SEQ, FC_RNN, 1, 1, 0},
    {"GRU", R_RNN_SEQ, FC_RNN, 3, 8, 0},
    {"LSTM", R_RNN_SEQ, FC_RNN, 4, 9, 0},
    {"AddN", R_ADDN, FC_ELEM, 0, 1, 0},
    {"ExpandReduced", R_EXPAND_REDUCED, FC_ELEM, 0, 1, 0},
    {"ScatterElements", R_SCATTER, FC_ELEM, 2, 1, 0},
    {"ScatterND", R_SCATTER, FC_ELEM, 2, 1, 0},
    {"AssignAddVariableOp", R_INPUT, FC_ELEM, 1, 1, 0},
    {"AssignSubVariableOp", R_INPUT, FC_ELEM, 1, 1, 0},
    {"ResourceApplyGradientDescent", R_OPTIM, FC_OPT, 2, 2, 0},
    {"ResourceApplyMomentum", R_OPTIM, FC_OPT, 3, 4, 2},
    {"ResourceApplyAdam", R_OPTIM, FC_OPT, 9, 12, 3},
    {"ResourceApplyRMSProp", R_OPTIM, FC_OPT, 7, 11, 0},
    {"ResourceApplyAdagrad", R_OPTIM, FC_OPT, 4, 7, 0},
    {"Resize", R_RESIZE, FC_OTHER, 0, 0, 0},
    {"GridSample", R_GRID, FC_OTHER, 0, 0, 0},
    {"DFT", R_DFT, FC_OTHER, 0, 0, 0},
    {"STFT", R_STFT, FC_OTHER, 0, 0, 0},
    {"MatrixDeterminant", R_DET, FC_OTHER, 0, 0, 0},
    {"TfIdfVectorizer", R_OUT, FC_OTHER, 0, 1, 0},
};

/* One FLOP per output element (category elementwise). */
static const char *const elementwise_ops[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum", "FloorMod", "TruncateMod",
    "LeftShift", "RightShift", "Neg", "Abs", "Square", "Exp", "Log", "Sqrt", "Rsqrt", "Sign",
    "Floor", "Ceil", "Round", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "Relu", "Relu6", "LeakyRelu", "Elu", "Gelu", "Sigmoid",
    "Tanh", "Softplus", "BiasAdd", "ReluGrad", "Relu6Grad", "LeakyReluGrad", "EluGrad",
    "GeluGrad", "SigmoidGrad", "TanhGrad", "SoftplusGrad", "SqrtGrad", "RsqrtGrad", "Equal",
    "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "IsNan", "IsInf", NULL};

static const FlopRule *flop_rule(const char *op) {
  static const FlopRule elementwise = {"", R_OUT, FC_ELEM, 0, 1, 0};
  for (size_t i = 0; i < sizeof flop_rules / sizeof flop_rules[0]; i++)
    if (!strcmp(op, flop_rules[i].op)) return &flop_rules[i];
  for (int i = 0; elementwise_ops[i]; i++)
    if (!strcmp(op, elementwise_ops[i])) return &elementwise;
  return NULL;
}

/* Elements of s with unknown dims counted as 1 (*unknown_dim set); -1 for an unknown rank. */
static double numel(const FloeShape *s, int *unknown_dim) {
  if (s->rank < 0) return -1;
  double n = 1;
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 0) *unknown_dim = 1;
    else n *= (double)s->dims[d];
  }
  return n;
}

static int64_t dim1(const FloeShape *s, int d, int *unknown_dim) {
  if (s->dims[d] < 0) {
    *unknown_dim = 1;
    return 1;
  }
  return s->dims[d];
}

/* The shape of n's input i (unknown when it has none). */
static FloeShape input_shape(const FloeNode *n, int i) {
  if (i >= floe_node_num_inputs(n)) return floe_shape_unknown();
  FloeOutput in = floe_node_input(n, i);
  return in.node ? floe_node_output_shape(in.node, in.index) : floe_shape_unknown();
}

/* ---- attributes: the public API has no getter for them, so the few counts that need one
 * (a pool's window, a resize's mode, ...) read the graph's serialization, whose format
 * docs/graph-format.md documents. Made once per graph, when first needed. */

typedef struct {
  const unsigned char *name, *attrs, *end; /* attrs: the attribute list's first byte */
  uint32_t name_len, nattrs;
} NodeAttrs;

typedef struct {
  int state; /* 0 not made, 1 made, -1 failed */
  unsigned char *buf;
  NodeAttrs *nodes;
  uint32_t n;
} AttrIndex;

static int rd_u32(const unsigned char **p, const unsigned char *end, uint32_t *v) {
  if (end - *p < 4) return -1;
  *v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 | (uint32_t)(*p)[3] << 24;
  *p += 4;
  return 0;
}

static int rd_skip(const unsigned char **p, const unsigned char *end, uint64_t n) {
  if ((uint64_t)(end - *p) < n) return -1;
  *p += n;
  return 0;
}

static int rd_str(const unsigned char **p, const unsigned char *end, const unsigned char **s,
                  uint32_t *len) {
  if (rd_u32(p, end, len)) return -1;
  *s = *p;
  return rd_skip(p, end, *len);
}

static int cmp_node_attrs(const void *a, const void *b) {
  const NodeAttrs *x = a, *y = b;
  uint32_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int attr_index_make(AttrIndex *ai, const FloeGraph *g) {
  FloeStatus *st = floe_status_new();
  void *buf = NULL;
  size_t len = 0;
  ai->state = -1;
  if (!st || floe_graph_serialize(g, &buf, &len, st) != FLOE_OK) {
    floe_status_free(st);
    return -1;
  }
  floe_status_free(st);
  ai->buf = buf;
  const unsigned char *p = ai->buf + 12, *end = ai->buf + len;
  uint32_t count;
  if (len < 20 || rd_u32(&p, end, &count) || !(ai->nodes = calloc((size_t)count + 1, sizeof *ai->nodes)))
    return -1;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t rec, slen, k;
    const unsigned char *s;
    if (rd_u32(&p, end, &rec) || (uint64_t)(end - p) < rec) return -1;
    const unsigned char *r = p, *rend = p + rec;
    NodeAttrs *na = &ai->nodes[i];
    if (rd_str(&r, rend, &na->name, &na->name_len) || rd_str(&r, rend, &s, &slen) ||
        rd_str(&r, rend, &s, &slen) || rd_u32(&r, rend, &k))
      return -1;
    for (uint32_t l = 0; l < k; l++) { /* input lists */
      uint32_t m;
      if (rd_u32(&r, rend, &m) || rd_skip(&r, rend, 8ull * m)) return -1;
    }
    if (rd_u32(&r, rend, &k) || rd_skip(&r, rend, 4ull * k) || rd_u32(&r, rend, &na->nattrs))
      return -1;
    na->attrs = r, na->end = rend;
    p = rend;
  }
  ai->n = count;
  qsort(ai->nodes, count, sizeof *ai->nodes, cmp_node_attrs);
  ai->state = 1;
  return 0;
}

static void attr_index_free(AttrIndex *ai) {
  free(ai->buf);
  free(ai->nodes);
}

/* The value of n's attribute `name` (*tag its kind tag, *v its first byte, *end its record's
 * end); -1 when not found. */
static int node_attr(AttrIndex *ai, const FloeGraph *g, const FloeNode *n, const char *name,
                     int *tag, const unsigned char **v, const unsigned char **vend) {
  if (ai->state == 0) attr_index_make(ai, g);
  if (ai->state < 0) return -1;
  const char *nn = floe_node_name(n);
  NodeAttrs key = {.name = (const unsigned char *)nn, .name_len = (uint32_t)strlen(nn)};
  const NodeAttrs *na = bsearch(&key, ai->nodes, ai->n, sizeof *ai->nodes, cmp_node_attrs);
  if (!na) return -1;
  const unsigned char *p = na->attrs, *end = na->end;
  for (uint32_t i = 0; i < na->nattrs; i++) {
    const unsigned char *an;
    uint32_t alen, m;
    if (rd_str(&p, end, &an, &alen) || end - p < 1) return -1;
    int t = *p++;
    if (alen == strlen(name) && !memcmp(an, name, alen)) {
      *tag = t, *v = p, *vend = end;
      return 0;
    }
    int32_t rank;
    int bad;
    switch (t) { /* skip the value */
      case 1: case 2: bad = rd_skip(&p, end, 8); break;
      case 3: bad = rd_skip(&p, end, 1); break;
      case 4: bad = rd_u32(&p, end, &m) || rd_skip(&p, end, m); break;
      case 5: bad = rd_skip(&p, end, 4); break;
      case 6:
        bad = rd_u32(&p, end, &m);
        rank = (int32_t)m;
        bad = bad || rd_skip(&p, end, rank > 0 ? 8ull * (uint32_t)rank : 0);
        break;
      case 7: {
        uint32_t dt, r;
        bad = rd_u32(&p, end, &dt) || rd_u32(&p, end, &r) || rd_skip(&p, end, 8ull * r);
        uint32_t lo = 0, hi = 0;
        bad = bad || rd_u32(&p, end, &lo) || rd_u32(&p, end, &hi) ||
              rd_skip(&p, end, (uint64_t)lo | (uint64_t)hi << 32);
        break;
      }
      case 8: case 9: bad = rd_u32(&p, end, &m) || rd_skip(&p, end, 8ull * m); break;
      case 10: bad = rd_u32(&p, end, &m) || rd_skip(&p, end, 4ull * m); break;
      case 11:
        bad = rd_u32(&p, end, &m);
        for (uint32_t s = 0; s < m && !bad; s++) {
          uint32_t r;
          bad = rd_u32(&p, end, &r) || rd_skip(&p, end, (int32_t)r > 0 ? 8ull * r : 0);
        }
        break;
      default: bad = 1;
    }
    if (bad) return -1;
  }
  return -1;
}

/* An int attribute (tag 1); dflt when absent. */
static int64_t attr_int(AttrIndex *ai, const FloeGraph *g, const FloeNode *n, const char *name,
                        int64_t dflt) {
  int tag;
  const unsigned char *v, *end;
  if (node_attr(ai, g, n, name, &tag, &v, &end) || tag != 1 || end - v < 8) return dflt;
  uint64_t u = 0;
  for (int i = 7; i >= 0; i--) u = u << 8 | v[i];
  return (int64_t)u;
}

/* A bool attribute (tag 3); dflt when absent. */
static int attr_bool(AttrIndex *ai, const FloeGraph *g, const FloeNode *n, const char *name,
                     int dflt) {
  int tag;
  const unsigned char *v, *end;
  if (node_attr(ai, g, n, name, &tag, &v, &end) || tag != 3 || end - v < 1) return dflt;
  return v[0] != 0;
}

/* Whether string attribute `name` (tag 4) equals want; dflt when absent. */
static int attr_is(AttrIndex *ai, const FloeGraph *g, const FloeNode *n, const char *name,
                   const char *want, int dflt) {
  int tag;
  const unsigned char *v, *end, *s;
  uint32_t len;
  if (node_attr(ai, g, n, name, &tag, &v, &end) || tag != 4 || rd_str(&v, end, &s, &len))
    return dflt;
  return len == strlen(want) && !strncasecmp((const char *)s, want, len);
}

/* The product of int-list attribute `name` (tag 8); -1 when absent (an empty list is 1). */
static double attr_list_product(AttrIndex *ai, const FloeGraph *g, const FloeNode *n,
                                const char *name) {
  int tag;
  const unsigned char *v, *end;
  uint32_t m;
  if (node_attr(ai, g, n, name, &tag, &v, &end) || tag != 8 || rd_u32(&v, end, &m) ||
      (uint64_t)(end - v) < 8ull * m)
    return -1;
  double prod = 1;
  for (uint32_t i = 0; i < m; i++) {
    uint64_t u = 0;
    for (int b = 7; b >= 0; b--) u = u << 8 | v[8 * i + (uint32_t)b];
    prod *= (double)(int64_t)u;
  }
  return prod;
}

/* FLOPs of node n of g by category into f[FC_N] (zeros for ops not counted); -1 when a shape
 * or attribute they need is not known, else 0. */
static int node_flops(AttrIndex *ai, const FloeGraph *g, const FloeNode *n, double f[FC_N],
                      int *unknown_dim) {
  for (int c = 0; c < FC_N; c++) f[c] = 0;
  const FlopRule *r = flop_rule(floe_node_op(n));
  if (!r) return 0;
  int *u = unknown_dim, uo = 0, ui = 0;
  FloeShape out = floe_node_num_outputs(n) > 0 ? floe_node_output_shape(n, 0) : floe_shape_unknown();
  FloeShape in = input_shape(n, r->rule == R_RNN_SEQ ? 0 : r->arg);
  /* The elements of output 0 and of input arg; a case that uses one sets *unknown_dim for
   * its unknown dims (EO, EI). */
  double eo_ = numel(&out, &uo), ei_ = numel(&in, &ui), v = 0, epilogue = 0;
#define EO (*u |= uo, eo_)
#define EI (*u |= ui, ei_)
  switch (r->rule) {
    case R_OUT:
      if (EO < 0) return -1;
      v = r->k * EO;
      break;
    case R_INPUT:
      if (EI < 0) return -1;
      v = r->k * EI;
      break;
    case R_ADDN:
      if (EO < 0) return -1;
      v = (floe_node_num_inputs(n) - 1) * EO;
      break;
    case R_MATMUL: {
      FloeShape a = input_shape(n, 0);
      if (out.rank < 2 || a.rank < 2) return -1;
      /* a is [.., M, K] or [.., K, M] (transposed): K is its last two dims over M. */
      int64_t m = dim1(&out, out.rank - 2, u);
      int64_t a2 = dim1(&a, a.rank - 2, u) * dim1(&a, a.rank - 1, u);
      v = m > 0 ? 2.0 * EO * (double)(a2 / m) : 0;
      break;
    }
    case R_CONV:
    case R_CONV_BP_IN:
    case R_CONV_BP_FILTER:
    case R_CONV_T: {
      /* The filter ([spatial..., in, out]) and the elements its every column serves. */
      FloeShape fs = r->rule == R_CONV_BP_FILTER ? out : input_shape(n, 1);
      FloeShape data = r->rule == R_CONV ? out : r->rule == R_CONV_T ? input_shape(n, 0)
                                                                     : input_shape(n, 2);
      double ed = numel(&data, u), ef = numel(&fs, u);
      if (ed < 0 || ef < 0 || fs.rank < 3) return -1;
      v = 2.0 * ed * ef / (double)dim1(&fs, fs.rank - 1, u);
      if (r->k > 0) epilogue = r->k * EO;
      else if (r->k < 0)
        epilogue = EO * (attr_bool(ai, g, n, "fused_bias", 0) + attr_bool(ai, g, n, "fused_add", 0) +
                         attr_bool(ai, g, n, "fused_relu", 0));
      break;
    }
    case R_POOL:
    case R_POOL_GRAD: {
      double window = attr_list_product(ai, g, n, "ksize"), e = r->rule == R_POOL ? EO : EI;
      if (window < 0 || e < 0) return -1;
      v = e * window;
      if (r->k > 0) {
        if (EO < 0) return -1;
        epilogue = r->k * EO;
      }
      break;
    }
    case R_ROI: {
      if (EO < 0) return -1;
      int64_t s = attr_int(ai, g, n, "sampling_ratio", 0);
      if (s <= 0) s = 2;
      v = r->k * EO * (double)(s * s);
      break;
    }
    case R_LSTM_CELL:
    case R_LSTM_REC:
    case R_LSTM_BP:
    case R_LSTM_GRAD:
    case R_LSTM_REC_BP: {
      FloeShape x = input_shape(n, 0), h = input_shape(n, r->rule == R_LSTM_REC_BP ? 0 : 1);
      if (h.rank != 2 || (r->rule != R_LSTM_REC && r->rule != R_LSTM_REC_BP && x.rank != 2))
        return -1;
      double B = (double)dim1(&h, 0, u), H = (double)dim1(&h, 1, u);
      double I = r->rule == R_LSTM_REC || r->rule == R_LSTM_REC_BP ? 0 : (double)dim1(&x, 1, u);
      double mm = 2 * B * (I + H) * 4 * H; /* the gates' product (I = 0: h_prev's part) */
      v = r->rule == R_LSTM_CELL || r->rule == R_LSTM_REC ? mm + 13 * B * H
          : r->rule == R_LSTM_GRAD                         ? 2 * mm + 20 * B * H + 4 * B * H
                                                           : mm + 20 * B * H;
      break;
    }
    case R_RNN_SEQ: {
      FloeShape x = input_shape(n, 0), rs = input_shape(n, 2);
      if (x.rank != 3 || rs.rank != 3) return -1;
      double S = (double)dim1(&x, 0, u), B = (double)dim1(&x, 1, u), I = (double)dim1(&x, 2, u);
      double D = (double)dim1(&rs, 0, u), H = (double)dim1(&rs, 2, u), G = r->arg;
      v = S * D * B * H * (2 * G * (I + H) + G + r->k);
      break;
    }
    case R_OPTIM:
      if (EI < 0) return -1;
      v = EI * (r->k + (attr_bool(ai, g, n, "use_nesterov", 0) ? r->extra : 0));
      break;
    case R_EXPAND_REDUCED:
      if (EO < 0) return -1;
      v = attr_bool(ai, g, n, "mean", 0) ? EO : 0;
      break;
    case R_SCATTER:
      if (EI < 0) return -1;
      v = attr_is(ai, g, n, "reduction", "none", 1) ? 0 : EI;
      break;
    case R_RESIZE:
    case R_GRID: {
      FloeShape x = input_shape(n, 0);
      if (EO < 0 || x.rank < 0 || (r->rule == R_RESIZE && x.rank != out.rank)) return -1;
      int dims = 0; /* the dims interpolated */
      if (r->rule == R_GRID) dims = x.rank - 2;
      else
        for (int d = 0; d < x.rank; d++) dims += x.dims[d] != out.dims[d];
      int taps = attr_is(ai, g, n, "mode", "linear", 0) || attr_is(ai, g, n, "mode", "bilinear", 0) ? 2
                 : attr_is(ai, g, n, "mode", "cubic", 0) || attr_is(ai, g, n, "mode", "bicubic", 0) ? 4
                                                                                                 : 0;
      v = taps && dims > 0 ? 2.0 * EO * pow(taps, dims) : 0;
      break;
    }
    case R_DFT: {
      if (in.rank < 2) return -1;
      int64_t axis = attr_int(ai, g, n, "axis", 1);
      if (axis < 0) axis += in.rank;
      if (axis < 0 || axis >= in.rank - 1) return -1;
      double len = (double)dim1(&in, (int)axis, u), last = (double)dim1(&in, in.rank - 1, u);
      v = len > 1 ? EI / (len * last) * 5 * len * log2(len) : 0;
      break;
    }
    case R_STFT: {
      FloeShape w = input_shape(n, 2);
      if (out.rank != 4 || w.rank != 1) return -1;
      double frames = (double)dim1(&out, 0, u) * (double)dim1(&out, 1, u), len = (double)dim1(&w, 0, u);
      v = frames * (len + (len > 1 ? 5 * len * log2(len) : 0));
      break;
    }
    case R_DET: {
      if (in.rank < 2) return -1;
      double m = (double)dim1(&in, in.rank - 1, u), e = EI;
      v = m > 0 ? e / (m * m) * 2.0 / 3.0 * m * m * m : 0;
      break;
    }
    default: return 0;
  }
#undef EO
#undef EI
  f[r->cat] += v;
  f[FC_ELEM] += epilogue;
  return 0;
}

typedef struct {
  const char *name;
  FloeDType dtype;
  FloeShape shape;
} IoInfo;

static int summarize_graph(const char *path, const char *format, const FloeGraph *g,
                           const IoInfo *ins, int nin, const IoInfo *outs, int nout, int opset,
                           int json) {
  int nn = floe_graph_num_nodes(g);
  OpCount *ops = calloc((size_t)nn + 1, sizeof *ops);
  if (!ops) return cli_error(CMD, "out of memory");
  int nops = 0, flops_unknown = 0, unknown_dim = 0;
  double params = 0, param_bytes = 0, flops = 0, flops_by[FC_N] = {0};
  AttrIndex attrs = {0};
  double var_params = 0, var_bytes = 0;
  int nvars = 0, nseen = 0;
  const FloeNode **seen = calloc((size_t)nn + 1, sizeof *seen); /* variables counted */
  if (!seen) {
    free(ops);
    return cli_error(CMD, "out of memory");
  }
  for (int i = 0; i < nn; i++) {
    FloeNode *n = floe_graph_node(g, i);
    const char *op = floe_node_op(n);
    int k;
    for (k = 0; k < nops && strcmp(ops[k].op, op); k++) {}
    if (k == nops) ops[nops++].op = op;
    ops[k].count++;
    if ((!strcmp(op, "Const") || !strcmp(op, "Variable") || !strcmp(op, "VariableV2")) &&
        floe_node_num_outputs(n) > 0 && is_float_dtype(floe_node_output_dtype(n, 0))) {
      FloeShape s = floe_node_output_shape(n, 0);
      int unk = 0;
      double e = numel(&s, &unk);
      if (e >= 0 && !unk) {
        params += e;
        param_bytes += e * (double)floe_dtype_size(floe_node_output_dtype(n, 0));
      }
    }
    /* A variable's value shape is what reads it (or the value first assigned to it). */
    if (!strcmp(op, "VarHandleOp")) nvars++;
    int is_read = !strcmp(op, "ReadVariableOp"), is_assign = !strcmp(op, "AssignVariableOp");
    if ((is_read && floe_node_num_outputs(n) > 0) || (is_assign && floe_node_num_inputs(n) > 1)) {
      FloeNode *h = floe_node_input(n, 0).node;
      int s_i;
      for (s_i = 0; s_i < nseen && seen[s_i] != h; s_i++) {}
      FloeOutput v = is_read ? (FloeOutput){n, 0} : floe_node_input(n, 1);
      FloeShape vs = floe_node_output_shape(v.node, v.index);
      int unk = 0;
      double e = numel(&vs, &unk);
      if (h && s_i == nseen && !strcmp(floe_node_op(h), "VarHandleOp") && e >= 0 && !unk) {
        seen[nseen++] = h;
        var_params += e;
        var_bytes += e * (double)floe_dtype_size(floe_node_output_dtype(v.node, v.index));
      }
    }
    double f[FC_N];
    if (node_flops(&attrs, g, n, f, &unknown_dim) < 0) flops_unknown++;
    else
      for (int c = 0; c < FC_N; c++) flops += f[c], flops_by[c] += f[c];
  }
  attr_index_free(&attrs);
  qsort(ops, (size_t)nops, sizeof *ops, cmp_op_count);
  free(seen);
  /* A graph with variables (a training graph): they are its parameters (optimiser slots
   * included), its constants are hyperparameters. Without (frozen, ONNX): the floating-point
   * constants. */
  if (nvars) params = var_params, param_bytes = var_bytes;

  /* Outputs of a Floe graph: nodes with outputs that no node consumes. */
  IoInfo *gouts = NULL;
  if (!outs) {
    NodeIndex *idx = malloc(((size_t)nn + 1) * sizeof *idx);
    char *used = calloc((size_t)nn + 1, 1);
    gouts = calloc((size_t)nn + 1, sizeof *gouts);
    if (!idx || !used || !gouts) {
      free(idx), free(used), free(gouts), free(ops);
      return cli_error(CMD, "out of memory");
    }
    for (int i = 0; i < nn; i++) idx[i].node = floe_graph_node(g, i), idx[i].index = i;
    qsort(idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      for (int k = 0; k < floe_node_num_inputs(n); k++) {
        NodeIndex key = {floe_node_input(n, k).node, 0};
        NodeIndex *hit = bsearch(&key, idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
        if (hit) used[hit->index] = 1;
      }
      for (int k = 0; k < floe_node_num_control_inputs(n); k++) {
        NodeIndex key = {floe_node_control_input(n, k), 0};
        NodeIndex *hit = bsearch(&key, idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
        if (hit) used[hit->index] = 1;
      }
    }
    nout = 0;
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      const char *op = floe_node_op(n);
      if (used[i] || floe_node_num_outputs(n) < 1 || !strcmp(op, "Placeholder") ||
          !strcmp(op, "Const"))
        continue;
      gouts[nout].name = floe_node_name(n);
      gouts[nout].dtype = floe_node_output_dtype(n, 0);
      gouts[nout].shape = floe_node_output_shape(n, 0);
      nout++;
    }
    outs = gouts;
    free(idx), free(used);
  }
  IoInfo *gins = NULL;
  if (!ins) {
    gins = calloc((size_t)nn + 1, sizeof *gins);
    if (!gins) {
      free(gouts), free(ops);
      return cli_error(CMD, "out of memory");
    }
    nin = 0;
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      if (strcmp(floe_node_op(n), "Placeholder") || floe_node_num_outputs(n) < 1) continue;
      gins[nin].name = floe_node_name(n);
      gins[nin].dtype = floe_node_output_dtype(n, 0);
      gins[nin].shape = floe_node_output_shape(n, 0);
      nin++;
    }
    ins = gins;
  }

  int rc = 0;
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, format);
    if (opset > 0) json_key(&w, "opset"), json_int(&w, opset);
    json_key(&w, "nodes"), json_int(&w, nn);
    json_key(&w, "ops"), json_begin_array(&w);
    for (int k = 0; k < nops; k++) {
      json_begin_object(&w);
      json_key(&w, "op"), json_string(&w, ops[k].op);
      json_key(&w, "count"), json_int(&w, ops[k].count);
      json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "parameters"), json_count(&w, params);
    json_key(&w, "parameter_bytes"), json_count(&w, param_bytes);
    json_key(&w, "variables"), json_int(&w, nvars);
    for (int io = 0; io < 2; io++) {
      const IoInfo *v = io ? outs : ins;
      json_key(&w, io ? "outputs" : "inputs"), json_begin_array(&w);
      for (int i = 0; i < (io ? nout : nin); i++) {
        json_begin_object(&w);
        json_key(&w, "name"), json_string(&w, v[i].name);
        json_key(&w, "dtype"), json_string(&w, floe_dtype_name(v[i].dtype));
        json_key(&w, "shape"), json_shape(&w, &v[i].shape);
        json_end_object(&w);
      }
      json_end_array(&w);
    }
    json_key(&w, "flops");
    json_begin_object(&w);
    json_key(&w, "total"), json_count(&w, flops);
    for (int c = 0; c < FC_N; c++) json_key(&w, flop_category[c]), json_count(&w, flops_by[c]);
    json_key(&w, "per_example"), json_bool(&w, unknown_dim);
    json_key(&w, "nodes_unknown"), json_int(&w, flops_unknown);
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%s: %s", path, format);
    if (opset > 0) printf(" (opset %d)", opset);
    printf("\nnodes: %d\nparameters: %.0f (%.0f bytes)", nn, params, param_bytes);
    if (nvars) printf(" in %d variables (optimiser slots included)", nvars);
    printf("\n");
    printf("FLOPs%s: %.0f", unknown_dim ? " per example (batch=1)" : " per step", flops);
    for (int c = 0, first = 1; c < FC_N; c++) /* the categories that have any */
      if (flops_by[c] > 0) printf("%s%s %.0f", first ? " (" : ", ", flop_category[c], flops_by[c]), first = 0;
    if (flops > 0) printf(")");
    if (flops_unknown) printf("; %d nodes unknown (shapes not known)", flops_unknown);
    printf("\n");
    for (int io = 0; io < 2; io++) {
      const IoInfo *v = io ? outs : ins;
      int cnt = io ? nout : nin;
      printf("\n%s: %d\n", io ? "outputs" : "inputs", cnt);
      if (!cnt) continue;
      Table *t = table_new(3, "lll");
      if (!t) {
        rc = cli_error(CMD, "out of memory");
        break;
      }
      table_row(t, "NAME", "DTYPE", "SHAPE");
      for (int i = 0; i < cnt; i++) {
        char buf[200];
        table_row(t, v[i].name, floe_dtype_name(v[i].dtype), shape_text(&v[i].shape, buf, sizeof buf));
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
    printf("\nnodes by op:\n");
    Table *t = table_new(2, "lr");
    if (!t) rc = cli_error(CMD, "out of memory");
    else {
      table_row(t, "OP", "COUNT");
      for (int k = 0; k < nops; k++) {
        char c[24];
        snprintf(c, sizeof c, "%d", ops[k].count);
        table_row(t, ops[k].op, c);
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
  }
  free(gins), free(gouts), free(ops);
  return rc;
}

static int inspect_floe_graph(const char *path, int json) {
  if (!cli_runtime(CMD)) return 1;
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(CMD, "out of memory");
  FloeGraph *g = floe_graph_load(path, st);
  int rc;
  char *msg = g ? NULL : one_line(strdup(floe_status_message(st)));
  if (!g && !msg) rc = cli_error(CMD, "out of memory");
  else if (!g && strstr(msg, path)) rc = cli_error(CMD, "%s", msg);
  else if (!g) rc = cli_error(CMD, "%s: %s", path, msg);
  else rc = summarize_graph(path, "Floe graph", g, NULL, 0, NULL, 0, 0, json);
  free(msg);
  floe_graph_free(g);
  floe_status_free(st);
  return rc;
}

/* 1 when the model imports; 0 (with *err set, malloc'd) when not. -1 is a printed error. */
static int inspect_onnx(const char *path, int json, char **err, int *rc) {
  if (!cli_runtime(CMD)) return *rc = 1, -1;
  FloeStatus *st = floe_status_new();
  if (!st) return *rc = cli_error(CMD, "out of memory"), -1;
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  FloeOnnxModel *m = floe_onnx_import_file(path, &o, st);
  if (!m) {
    *err = one_line(strdup(floe_status_message(st)));
    floe_status_free(st);
    return 0;
  }
  floe_status_free(st);
  int nin = floe_onnx_model_num_inputs(m), nout = floe_onnx_model_num_outputs(m);
  IoInfo *ins = calloc((size_t)nin + 1, sizeof *ins), *outs = calloc((size_t)nout + 1, sizeof *outs);
  if (!ins || !outs) {
    free(ins), free(outs), floe_onnx_model_free(m);
    return *rc = cli_error(CMD, "out of memory"), -1;
  }
  for (int i = 0; i < nin; i++) {
    ins[i].name = floe_onnx_model_input_name(m, i);
    ins[i].dtype = floe_onnx_model_input_dtype(m, i);
    ins[i].shape = floe_onnx_model_input_shape(m, i);
  }
  for (int i = 0; i < nout; i++) {
    FloeOutput o2 = floe_onnx_model_output(m, i);
    outs[i].name = floe_onnx_model_output_name(m, i);
    outs[i].dtype = floe_onnx_model_output_dtype(m, i);
    outs[i].shape = o2.node ? floe_node_output_shape(o2.node, o2.index) : floe_shape_unknown();
  }
  *rc = summarize_graph(path, "ONNX model", floe_onnx_model_graph(m), ins, nin, outs, nout,
                        floe_onnx_model_opset(m), json);
  free(ins), free(outs);
  floe_onnx_model_free(m);
  return 1;
}

/* ---------------------------------------------------------------- safetensors */

/* A bounded reader of the JSON header: every read checks p < end. */
typedef struct {
  const char *p, *start, *end;
  const char *err; /* what was wrong, at offset p - start */
} JP;

static void jp_ws(JP *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int jp_fail(JP *j, const char *what) {
  if (!j->err) j->err = what;
  return -1;
}

static int jp_char(JP *j, char c) {
  jp_ws(j);
  if (j->p >= j->end || *j->p != c) return -1;
  j->p++;
  return 0;
}

/* A JSON string into a malloc'd, NUL-terminated *out (\u escapes to UTF-8). */
static int jp_string(JP *j, char **out) {
  jp_ws(j);
  if (j->p >= j->end || *j->p != '"') return jp_fail(j, "expected a string");
  j->p++;
  size_t cap = 16, n = 0;
  char *s = malloc(cap);
  if (!s) return jp_fail(j, "out of memory");
  for (;;) {
    if (j->p >= j->end) {
      free(s);
      return jp_fail(j, "unterminated string");
    }
    unsigned char c = (unsigned char)*j->p++;
    char buf[4];
    size_t k = 1;
    if (c == '"') break;
    if (c < 0x20) {
      free(s);
      return jp_fail(j, "control character in a string");
    }
    buf[0] = (char)c;
    if (c == '\\') {
      if (j->p >= j->end) {
        free(s);
        return jp_fail(j, "unterminated string");
      }
      c = (unsigned char)*j->p++;
      const char *esc = strchr("\"\\/bfnrt", c);
      if (c && esc) buf[0] = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
      else if (c == 'u' && j->end - j->p >= 4) {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          char h = *j->p++;
          v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0'
                                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
          if (v > 0xffff) break;
        }
        if (v > 0xffff || v == 0) {
          free(s);
          return jp_fail(j, "bad \\u escape");
        }
        if (v < 0x80) buf[0] = (char)v;
        else if (v < 0x800) buf[0] = (char)(0xc0 | v >> 6), buf[1] = (char)(0x80 | (v & 0x3f)), k = 2;
        else
          buf[0] = (char)(0xe0 | v >> 12), buf[1] = (char)(0x80 | ((v >> 6) & 0x3f)),
          buf[2] = (char)(0x80 | (v & 0x3f)), k = 3;
      } else {
        free(s);
        return jp_fail(j, "bad escape in a string");
      }
    }
    if (n + k + 1 > cap) {
      char *t = realloc(s, cap *= 2);
      if (!t) {
        free(s);
        return jp_fail(j, "out of memory");
      }
      s = t;
    }
    memcpy(s + n, buf, k);
    n += k;
  }
  s[n] = 0;
  *out = s;
  return 0;
}

/* A non-negative integer below 2^53. */
static int jp_uint(JP *j, uint64_t *v) {
  jp_ws(j);
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "expected a non-negative integer");
  uint64_t x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    x = x * 10 + (uint64_t)(*j->p++ - '0');
    if (x > (1ull << 53)) return jp_fail(j, "integer too large");
  }
  *v = x;
  return 0;
}

/* Skips any JSON value (depth-limited). */
static int jp_skip(JP *j, int depth) {
  jp_ws(j);
  if (depth > 64) return jp_fail(j, "nested too deeply");
  if (j->p >= j->end) return jp_fail(j, "expected a value");
  char c = *j->p;
  if (c == '"') {
    char *s;
    if (jp_string(j, &s)) return -1;
    free(s);
    return 0;
  }
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    if (!jp_char(j, close)) return 0;
    for (;;) {
      if (c == '{') {
        char *k;
        if (jp_string(j, &k)) return -1;
        free(k);
        if (jp_char(j, ':')) return jp_fail(j, "expected ':'");
      }
      if (jp_skip(j, depth + 1)) return -1;
      if (!jp_char(j, close)) return 0;
      if (jp_char(j, ',')) return jp_fail(j, "expected ',' or a closing bracket");
    }
  }
  const char *lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i]);
    if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) {
      j->p += n;
      return 0;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    while (j->p < j->end && strchr("+-.eE0123456789", *j->p) && *j->p) j->p++;
    return 0;
  }
  return jp_fail(j, "expected a value");
}

typedef struct {
  char *name, *dtype;
  int rank;
  uint64_t dims[FLOE_MAX_DIMS];
  uint64_t begin, end;
} StTensor;

static size_t st_dtype_size(const char *dt) {
  static const struct {
    const char *name;
    size_t size;
  } t[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
           {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
           {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(dt, t[i].name)) return t[i].size;
  return 0;
}

/* One tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static int jp_tensor(JP *j, StTensor *t) {
  int have = 0;
  if (jp_char(j, '{')) return jp_fail(j, "expected '{' (a tensor's entry)");
  if (!jp_char(j, '}')) return jp_fail(j, "empty tensor entry");
  for (;;) {
    char *k;
    if (jp_string(j, &k)) return -1;
    if (jp_char(j, ':')) {
      free(k);
      return jp_fail(j, "expected ':'");
    }
    int r = 0;
    if (!strcmp(k, "dtype")) {
      free(t->dtype), t->dtype = NULL;
      r = jp_string(j, &t->dtype);
      if (!r && !st_dtype_size(t->dtype)) r = jp_fail(j, "unknown dtype");
      have |= 1;
    } else if (!strcmp(k, "shape")) {
      t->rank = 0;
      if (jp_char(j, '[')) r = jp_fail(j, "expected '[' (shape)");
      else if (jp_char(j, ']'))
        for (;;) {
          if (t->rank == FLOE_MAX_DIMS) {
            r = jp_fail(j, "shape has too many dims");
            break;
          }
          if ((r = jp_uint(j, &t->dims[t->rank++]))) break;
          if (!jp_char(j, ']')) break;
          if (jp_char(j, ',')) {
            r = jp_fail(j, "expected ',' or ']' (shape)");
            break;
          }
        }
      have |= 2;
    } else if (!strcmp(k, "data_offsets")) {
      if (jp_char(j, '[') || jp_uint(j, &t->begin) || jp_char(j, ',') || jp_uint(j, &t->end) ||
          jp_char(j, ']'))
        r = jp_fail(j, "expected [begin, end] (data_offsets)");
      have |= 4;
    } else r = jp_skip(j, 1);
    free(k);
    if (r) return -1;
    if (!jp_char(j, '}')) break;
    if (jp_char(j, ',')) return jp_fail(j, "expected ',' or '}'");
  }
  if (have != 7) return jp_fail(j, "tensor entry lacks dtype, shape or data_offsets");
  return 0;
}

static int inspect_safetensors(const char *path, FILE *f, uint64_t fsize, int json) {
  unsigned char lb[8];
  if (fseek(f, 0, SEEK_SET) || fread(lb, 1, 8, f) != 8)
    return cli_error(CMD, "%s: truncated: no 8-byte header length at offset 0", path);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lb[i];
  if (hlen > SAFETENSORS_HEADER_MAX)
    return cli_error(CMD, "%s: header length %llu at offset 0 is over the %u-byte limit", path,
                     (unsigned long long)hlen, SAFETENSORS_HEADER_MAX);
  if (hlen > fsize - 8)
    return cli_error(CMD, "%s: truncated: header length %llu at offset 0 but the file has %llu bytes",
                     path, (unsigned long long)hlen, (unsigned long long)fsize);
  char *h = malloc(hlen + 1);
  if (!h) return cli_error(CMD, "out of memory");
  if (fread(h, 1, hlen, f) != hlen) {
    free(h);
    return cli_error(CMD, "%s: read error in the header: %s", path, strerror(errno));
  }
  uint64_t data_size = fsize - 8 - hlen;
  JP j = {h, h, h + hlen, NULL};
  StTensor *ts = NULL;
  char **meta = NULL; /* key, value pairs */
  size_t nt = 0, capt = 0, nm = 0, capm = 0;
  int rc = 0;
  if (jp_char(&j, '{')) jp_fail(&j, "expected '{'");
  else if (jp_char(&j, '}'))
    for (;;) {
      char *k;
      if (jp_string(&j, &k)) break;
      if (jp_char(&j, ':')) {
        free(k);
        jp_fail(&j, "expected ':'");
        break;
      }
      if (!strcmp(k, "__metadata__")) {
        free(k);
        if (jp_char(&j, '{')) {
          jp_fail(&j, "expected '{' (__metadata__)");
          break;
        }
        if (jp_char(&j, '}'))
          for (;;) {
            char *mk, *mv;
            if (jp_string(&j, &mk)) break;
            if (jp_char(&j, ':') || jp_string(&j, &mv)) {
              free(mk);
              jp_fail(&j, "expected ':' and a string (__metadata__)");
              break;
            }
            if (nm + 2 > capm) {
              char **t = realloc(meta, (capm = capm * 2 + 8) * sizeof *t);
              if (!t) {
                free(mk), free(mv);
                jp_fail(&j, "out of memory");
                break;
              }
              meta = t;
            }
            meta[nm++] = mk, meta[nm++] = mv;
            if (!jp_char(&j, '}')) break;
            if (jp_char(&j, ',')) {
              jp_fail(&j, "expected ',' or '}' (__metadata__)");
              break;
            }
          }
        if (j.err) break;
      } else {
        if (nt == capt) {
          StTensor *t = realloc(ts, (capt = capt * 2 + 8) * sizeof *t);
          if (!t) {
            free(k);
            jp_fail(&j, "out of memory");
            break;
          }
          ts = t;
        }
        memset(&ts[nt], 0, sizeof ts[nt]);
        ts[nt].name = k;
        nt++;
        if (jp_tensor(&j, &ts[nt - 1])) break;
      }
      if (!jp_char(&j, '}')) break;
      if (jp_char(&j, ',')) {
        jp_fail(&j, "expected ',' or '}'");
        break;
      }
    }
  if (j.err)
    rc = cli_error(CMD, "%s: bad safetensors header at offset %llu: %s", path,
                   (unsigned long long)(8 + (uint64_t)(j.p - j.start)), j.err);
  double params = 0, bytes = 0;
  for (size_t i = 0; i < nt && !rc; i++) {
    StTensor *t = &ts[i];
    one_line(t->name);
    double e = 1;
    for (int d = 0; d < t->rank; d++) e *= (double)t->dims[d];
    double want = e * (double)st_dtype_size(t->dtype);
    if (t->end < t->begin || t->end > data_size)
      rc = cli_error(CMD, "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes",
                     path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)data_size);
    else if ((double)(t->end - t->begin) != want)
      rc = cli_error(CMD, "%s: tensor '%s': data_offsets hold %llu bytes, its dtype and shape need %.0f",
                     path, t->name, (unsigned long long)(t->end - t->begin), want);
    params += e, bytes += want;
  }
  if (!rc && json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, "safetensors");
    json_key(&w, "tensors"), json_begin_array(&w);
    for (size_t i = 0; i < nt; i++) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, ts[i].name);
      json_key(&w, "dtype"), json_string(&w, ts[i].dtype);
      json_key(&w, "shape"), json_begin_array(&w);
      for (int d = 0; d < ts[i].rank; d++) json_uint(&w, ts[i].dims[d]);
      json_end_array(&w);
      json_key(&w, "bytes"), json_uint(&w, ts[i].end - ts[i].begin);
      json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "parameters"), json_count(&w, params);
    json_key(&w, "bytes"), json_count(&w, bytes);
    json_key(&w, "metadata"), json_begin_object(&w);
    for (size_t i = 0; i < nm; i += 2) json_key(&w, meta[i]), json_string(&w, meta[i + 1]);
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
  } else if (!rc) {
    printf("%s: safetensors\ntensors: %zu\nparameters: %.0f (%.0f bytes)\n\n", path, nt, params,
           bytes);
    Table *t = table_new(4, "llrl");
    if (!t) rc = cli_error(CMD, "out of memory");
    else {
      table_row(t, "DTYPE", "SHAPE", "BYTES", "NAME");
      for (size_t i = 0; i < nt; i++) {
        char shape[200], b[32];
        int len = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < ts[i].rank; d++)
          len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%llu", d ? "," : "",
                          (unsigned long long)ts[i].dims[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        snprintf(b, sizeof b, "%llu", (unsigned long long)(ts[i].end - ts[i].begin));
        table_row(t, ts[i].dtype, shape, b, ts[i].name);
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
    printf("\nmetadata: %zu\n", nm / 2);
    for (size_t i = 0; i < nm; i += 2) printf("  %s: %s\n", meta[i], meta[i + 1]);
  }
  for (size_t i = 0; i < nt; i++) free(ts[i].name), free(ts[i].dtype);
  for (size_t i = 0; i < nm; i++) free(meta[i]);
  free(ts), free(meta), free(h);
  return rc;
}

/* ---------------------------------------------------------------- .npy */

/* The value of 'key' in the header dict: a pointer just past "'key':" and spaces, or NULL. */
static const char *npy_field(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

static int inspect_npy(const char *path, FILE *f, uint64_t fsize, int json) {
  unsigned char pre[12];
  if (fseek(f, 0, SEEK_SET) || fread(pre, 1, 10, f) != 10)
    return cli_error(CMD, "%s: truncated .npy preamble (needs 10 bytes at offset 0)", path);
  int major = pre[6];
  uint64_t hlen, hoff;
  if (major == 1) hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8, hoff = 10;
  else if (major == 2 || major == 3) {
    if (fread(pre + 10, 1, 2, f) != 2)
      return cli_error(CMD, "%s: truncated .npy header length at offset 8", path);
    hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
    hoff = 12;
  } else
    return cli_error(CMD, "%s: unsupported .npy version %d.%d at offset 6", path, major, pre[7]);
  if (hlen > fsize - hoff || hlen > (1u << 20))
    return cli_error(CMD, "%s: truncated: .npy header length %llu at offset 8, file has %llu bytes",
                     path, (unsigned long long)hlen, (unsigned long long)fsize);
  char *h = malloc(hlen + 1);
  if (!h) return cli_error(CMD, "out of memory");
  if (fread(h, 1, hlen, f) != hlen) {
    free(h);
    return cli_error(CMD, "%s: read error in the .npy header: %s", path, strerror(errno));
  }
  h[hlen] = 0;
  size_t hstr = strlen(h);
  if (hstr != hlen) {
    free(h);
    return cli_error(CMD, "%s: NUL byte in the .npy header at offset %llu", path,
                     (unsigned long long)(hoff + hstr));
  }
  char descr[32] = "";
  int fortran = -1, rank = 0;
  uint64_t dims[32];
  const char *p = npy_field(h, "descr");
  if (p && *p == '\'') {
    const char *q = strchr(p + 1, '\'');
    if (q && q - p - 1 < (long)sizeof descr) memcpy(descr, p + 1, (size_t)(q - p - 1)), descr[q - p - 1] = 0;
  }
  if ((p = npy_field(h, "fortran_order"))) fortran = !strncmp(p, "True", 4) ? 1 : !strncmp(p, "False", 5) ? 0 : -1;
  int shape_ok = 0;
  if ((p = npy_field(h, "shape")) && *p == '(') {
    p++;
    for (;;) {
      while (*p == ' ') p++;
      if (*p == ')') {
        shape_ok = 1;
        break;
      }
      if (*p < '0' || *p > '9' || rank == 32) break;
      char *e;
      errno = 0;
      unsigned long long v = strtoull(p, &e, 10);
      if (errno || v > (1ull << 53)) break;
      dims[rank++] = v;
      p = e;
      while (*p == ' ') p++;
      if (*p == ',') p++;
      else if (*p != ')') break;
    }
  }
  free(h);
  if (!*descr) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'descr'", path, (unsigned long long)hoff);
  if (fortran < 0) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'fortran_order'", path, (unsigned long long)hoff);
  if (!shape_ok) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'shape'", path, (unsigned long long)hoff);
  char order = descr[0], kind = descr[1];
  char *e;
  long isz = strtol(descr + 2, &e, 10);
  int numeric = strchr("<>|=", order) && descr[1] && strchr("biuf", kind) && !*e && isz > 0 &&
                ((kind == 'f' && (isz == 2 || isz == 4 || isz == 8)) ||
                 (kind != 'f' && (isz == 1 || isz == 2 || isz == 4 || isz == 8)));
  double elems = 1;
  for (int d = 0; d < rank; d++) elems *= (double)dims[d];
  uint64_t data_off = hoff + hlen;
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  double esize = !*e && isz > 0 ? (double)isz * (kind == 'U' ? 4 : 1) : 0;
  if (esize > 0 && elems * esize > (double)(fsize - data_off))
    return cli_error(CMD, "%s: truncated: %.0f elements of %s need %.0f bytes at offset %llu, the file has %llu",
                     path, elems, descr, elems * esize, (unsigned long long)data_off,
                     (unsigned long long)(fsize - data_off));
  if (numeric) {
    if (elems * (double)isz > (double)(fsize - data_off))
      return cli_error(CMD, "%s: truncated: %.0f elements of %s need %.0f bytes at offset %llu, the file has %llu",
                       path, elems, descr, elems * (double)isz, (unsigned long long)data_off,
                       (unsigned long long)(fsize - data_off));
    int swap = order == '>';
    unsigned char buf[8192];
    uint64_t left = (uint64_t)elems;
    while (left) {
      size_t n = left < sizeof buf / (size_t)isz ? (size_t)left : sizeof buf / (size_t)isz;
      if (fread(buf, (size_t)isz, n, f) != n)
        return cli_error(CMD, "%s: read error in the data: %s", path, strerror(errno));
      for (size_t i = 0; i < n; i++) {
        unsigned char b[8];
        for (long k = 0; k < isz; k++) b[k] = buf[i * (size_t)isz + (size_t)(swap ? isz - 1 - k : k)];
        uint64_t u = 0;
        for (long k = isz - 1; k >= 0; k--) u = u << 8 | b[k];
        double v;
        if (kind == 'f') {
          if (isz == 2) v = half_to_double((uint16_t)u);
          else if (isz == 4) {
            float x;
            uint32_t u32 = (uint32_t)u;
            memcpy(&x, &u32, 4);
            v = x;
          } else memcpy(&v, &u, 8);
        } else if (kind == 'i') {
          int sh = 64 - 8 * (int)isz;
          v = (double)((int64_t)(u << sh) >> sh);
        } else v = kind == 'b' ? (u != 0) : (double)u;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
      }
      left -= n;
    }
  }
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, "npy");
    json_key(&w, "dtype"), json_string(&w, descr);
    json_key(&w, "shape"), json_begin_array(&w);
    for (int d = 0; d < rank; d++) json_uint(&w, dims[d]);
    json_end_array(&w);
    json_key(&w, "order"), json_string(&w, fortran ? "F" : "C");
    json_key(&w, "elements"), json_count(&w, elems);
    if (numeric && elems > 0) {
      json_key(&w, "min"), json_num(&w, mn);
      json_key(&w, "max"), json_num(&w, mx);
      json_key(&w, "mean"), json_num(&w, sum / elems);
    }
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%s: npy (version %d.%d)\ndtype: %s\nshape: (", path, major, pre[7], descr);
    for (int d = 0; d < rank; d++) printf("%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
    printf("%s)\norder: %s\nelements: %.0f\n", rank == 1 ? "," : "", fortran ? "F (Fortran)" : "C",
           elems);
    if (numeric && elems > 0) {
      char a[32], b[32], c[32];
      printf("min: %s\nmax: %s\nmean: %s\n", num_text(a, mn), num_text(b, mx),
             num_text(c, sum / elems));
    } else if (!numeric)
      printf("(no statistics for dtype %s)\n", descr);
  }
  return 0;
}

/* ---------------------------------------------------------------- dispatch */

int cmd_inspect(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c, json = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":jh", opts, NULL)) != -1) {
    if (c == 'j') json = 1;
    else if (c == 'h') {
      printf("%s", inspect_help);
      return 0;
    } else
      return cli_bad_option(CMD, c, argv, opts);
  }
  if (optind >= argc) return cli_usage(CMD, "missing FILE");
  if (optind + 1 < argc) return cli_usage(CMD, "unexpected argument");
  const char *path = argv[optind];
  FILE *f = fopen(path, "rb");
  if (!f) return cli_error(CMD, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
    int e = errno;
    fclose(f);
    return cli_error(CMD, "%s: %s", path, S_ISDIR(sb.st_mode) ? "is a directory" : strerror(e));
  }
  uint64_t fsize = (uint64_t)sb.st_size;
  unsigned char head[16] = {0};
  size_t nhead = fread(head, 1, sizeof head, f);
  int rc;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | head[i];
  if (nhead >= 8 && !memcmp(head, "FLOEGRPH", 8)) {
    fclose(f);
    return inspect_floe_graph(path, json);
  }
  if (nhead >= 6 && !memcmp(head, "\x93NUMPY", 6)) rc = inspect_npy(path, f, fsize, json);
  else if (nhead >= 9 && head[8] == '{' && hlen >= 2)
    rc = inspect_safetensors(path, f, fsize, json); /* length checked there */
  else {
    fclose(f);
    char *err = NULL;
    int orc = 0;
    if (nhead > 0) {
      int r = inspect_onnx(path, json, &err, &orc);
      if (r != 0) return orc;
    }
    /* A ModelProto starts with field 1 (ir_version, varint): tag 0x08. Such a file that the
     * importer refuses is a damaged model; anything else is not a model at all. */
    if (nhead > 0 && head[0] == 0x08 && err) rc = cli_error(CMD, "%s", err);
    else {
      char hex[3 * 16 + 1] = "";
      for (size_t i = 0, len = 0; i < nhead && i < 8; i++)
        len += (size_t)snprintf(hex + len, sizeof hex - len, "%s%02x", i ? " " : "", head[i]);
      rc = cli_error(CMD,
                     "%s: not a Floe graph, ONNX model, safetensors or .npy file (first bytes: %s)",
                     path, nhead ? hex : "none, the file is empty");
    }
    free(err);
    return rc;
  }
  fclose(f);
  return rc;
}
