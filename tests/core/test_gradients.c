/* SPDX-License-Identifier: Apache-2.0 */
/* test_gradients.c - every differentiable op of the standard set, checked against central
 * finite differences in f64, plus the algorithm of floe_gradients (paths summed,
 * StopGradient, integer edges, grad_ys, unreachable xs, ops without a gradient).
 *
 * A case builds op(x...) from placeholders, takes y = sum_k <out_k, R_k> with fixed random
 * R_k (R_k passed as grad_ys), and compares every element of every float input's gradient
 * with (y(x + eps e_j) - y(x - eps e_j)) / 2 eps, where y is evaluated by running the
 * forward graph and taking the dot products here. Inputs avoid kinks (Relu, Abs near 0,
 * ties of Max). A coverage test fails when an op of the standard set is neither checked
 * here nor registered as not differentiable. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;

static void runtime_setup(void) { rt = harness_runtime(2); }

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

static FloeSession *session_new(FloeGraph *g, const char *what) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  return harness_session_opts(g, &o, what);
}

static void run(FloeSession *s, const FloeFeed *feeds, int nf, const char *const *fetches, int n,
                FloeTensor **outs, const char *what) {
  harness_run(s, feeds, nf, fetches, n, NULL, 0, outs, what);
}

/* splitmix64 */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(uint64_t *s) {
  return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------------------------ */
/* Case descriptions.
 *
 * inputs: space-separated, in the op's input order: TYPE[DIMS] then an optional
 *   ":lo,hi"  uniform values (floats; default -1,1),
 *   "~lo,hi"  magnitudes uniform in [lo, hi) with a random sign (away from 0),
 *   "=v,v,.." explicit values.
 * TYPE is f (f64, a placeholder: differentiated), i32, i64 or b (constants, or fed
 * placeholders in dyn cases). DIMS is "2x3"; "[]" is a scalar; no brackets means a 1-D
 * tensor of the explicit values.
 * attrs: "name=Kvalue;..." with K in i (int), f (float), b (bool), s (string), l (int
 * list), t (type).
 * lists: input counts per op argument ("3,1" for Concat of three), NULL: one each.
 * nout: outputs differentiated (0: all). dyn: unknown static shapes, constants fed. */
typedef struct Case {
  const char *op;
  const char *inputs;
  const char *attrs;
  const char *lists;
  int nout;
  bool dyn;
} Case;

#define MAXIN 8
#define MAXV 256

typedef struct InSpec {
  FloeDType dt;
  bool is_float;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  double lo, hi;
  bool away;
  int nvals;
  double vals[MAXV];
} InSpec;

/* The dtype of "f" inputs (f64 for finite differences; f32 for the f32 comparison). */
static FloeDType float_dtype = FLOE_F64;

static const char *parse_dims(const char *p, InSpec *s) {
  s->rank = 0;
  if (*p != '[') return p;
  p++;
  while (*p && *p != ']') {
    char *end;
    s->dims[s->rank++] = strtoll(p, &end, 10);
    p = end;
    if (*p == 'x') p++;
  }
  ck_assert_msg(*p == ']', "bad dims");
  return p + 1;
}

static void parse_input(const char *tok, InSpec *s) {
  memset(s, 0, sizeof *s);
  const char *p = tok;
  if (strncmp(p, "i32", 3) == 0)
    s->dt = FLOE_I32, p += 3;
  else if (strncmp(p, "i64", 3) == 0)
    s->dt = FLOE_I64, p += 3;
  else if (*p == 'f')
    s->dt = float_dtype, s->is_float = true, p++;
  else if (*p == 'b')
    s->dt = FLOE_BOOL, p++;
  else
    ck_abort_msg("bad input spec %s", tok);
  bool has_dims = *p == '[';
  p = parse_dims(p, s);
  s->lo = -1;
  s->hi = 1;
  if (*p == ':' || *p == '~') {
    s->away = *p == '~';
    char *end;
    s->lo = strtod(p + 1, &end);
    ck_assert_msg(*end == ',', "bad range in %s", tok);
    s->hi = strtod(end + 1, &end);
    p = end;
  } else if (*p == '=') {
    p++;
    s->nvals = 0;
    while (*p) {
      char *end;
      ck_assert_int_lt(s->nvals, MAXV);
      s->vals[s->nvals++] = strtod(p, &end);
      ck_assert_msg(end != p, "bad value in %s", tok);
      p = end;
      if (*p == ',') p++;
    }
    if (!has_dims) {
      s->rank = 1;
      s->dims[0] = s->nvals;
    }
    ck_assert_msg(harness_count(s->rank, s->dims) == s->nvals, "%s: %d values", tok, s->nvals);
  }
  ck_assert_msg(*p == '\0', "trailing text in %s", tok);
  ck_assert_msg(s->is_float || s->nvals > 0 || harness_count(s->rank, s->dims) == 0,
                "%s: constants need values", tok);
}

static FloeTensor *make_value(const InSpec *s, uint64_t *seed) {
  int64_t n = harness_count(s->rank, s->dims);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) {
    if (s->nvals)
      v[i] = s->vals[i];
    else if (s->away)
      v[i] = (uniform(seed) < 0.5 ? -1 : 1) * (s->lo + (s->hi - s->lo) * uniform(seed));
    else
      v[i] = s->lo + (s->hi - s->lo) * uniform(seed);
  }
  FloeTensor *t = harness_from_doubles(s->dt, s->rank, s->dims, v);
  free(v);
  return t;
}

static void parse_int_list(const char *p, int64_t *v, int *n) {
  *n = 0;
  while (*p) {
    char *end;
    v[(*n)++] = strtoll(p, &end, 10);
    ck_assert_msg(end != p, "bad int list");
    p = end;
    if (*p == ',') p++;
  }
}

static void set_attrs(FloeNodeBuilder *b, const char *spec) {
  if (!spec) return;
  char *copy = strdup(spec), *save = NULL;
  for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(item, '=');
    ck_assert_msg(eq && eq[1], "bad attr %s", item);
    *eq = '\0';
    const char *val = eq + 2;
    int64_t list[16];
    int n;
    switch (eq[1]) {
      case 'i':
        floe_node_set_attr_int(b, item, strtoll(val, NULL, 10));
        break;
      case 'f':
        floe_node_set_attr_float(b, item, strtod(val, NULL));
        break;
      case 'b':
        floe_node_set_attr_bool(b, item, atoi(val));
        break;
      case 's':
        floe_node_set_attr_string(b, item, val);
        break;
      case 't':
        floe_node_set_attr_type(b, item, floe_dtype_from_name(val));
        break;
      case 'l':
        parse_int_list(val, list, &n);
        floe_node_set_attr_int_list(b, item, list, n);
        break;
      default:
        ck_abort_msg("bad attr kind in %s", spec);
    }
  }
  free(copy);
}

/* ------------------------------------------------------------------------------------ */
/* The cases. */

#define NHWC_S1_SAME "strides=l1,1,1,1;padding=sSAME"
/* Channels first, 2 groups, stride 2, dilation 2, uneven explicit paddings. */
#define CF_GROUPS_ATTRS                                                                  \
  "data_format=sCHANNELS_FIRST;groups=i2;strides=l1,1,2,2;dilations=l1,1,1,2;"           \
  "padding=sEXPLICIT;explicit_paddings=l0,0,0,0,1,0,2,1"
/* Pool windows with dilation, uneven paddings and ceil_mode (MAX), counted padding (AVG). */
#define POOL_MAX_CF_ATTRS                                                                \
  "pooling_type=sMAX;data_format=sCHANNELS_FIRST;ksize=l1,1,3,2;strides=l1,1,2,2;"       \
  "dilations=l1,1,2,1;padding=sEXPLICIT;explicit_paddings=l0,0,0,0,1,1,0,1;ceil_mode=b1"
#define POOL_AVG_CF_ATTRS                                                                \
  "pooling_type=sAVG;data_format=sCHANNELS_FIRST;ksize=l1,1,3,3;strides=l1,1,2,2;"       \
  "padding=sEXPLICIT;explicit_paddings=l0,0,0,0,1,1,1,1;ceil_mode=b1;count_include_pad=b1"
static const Case cases[] = {
    /* broadcasting binary ops */
    {.op = "Add", .inputs = "f[2x3] f[2x3]"},
    {.op = "Add", .inputs = "f[2x3] f[3]"},
    {.op = "Add", .inputs = "f[2x1x3] f[4x1]"},
    {.op = "Add", .inputs = "f[] f[2x2]"},
    {.op = "Add", .inputs = "f[2x1x3] f[4x1]", .dyn = true},
    {.op = "Sub", .inputs = "f[2x3] f[1x3]"},
    {.op = "Sub", .inputs = "f[3] f[2x3]"},
    {.op = "Mul", .inputs = "f[2x3] f[2x3]"},
    {.op = "Mul", .inputs = "f[2x3] f[3x2x1]"},
    {.op = "Mul", .inputs = "f[2x3] f[3x2x1]", .dyn = true},
    {.op = "Div", .inputs = "f[2x3] f[3]~0.5,2"},
    {.op = "Div", .inputs = "f[3] f[2x3]~0.5,2"},
    {.op = "Pow", .inputs = "f[2x3]:0.5,2 f[2x3]"},
    {.op = "Pow", .inputs = "f[2x3]:0.5,2 f[]:-2,2"},
    {.op = "Maximum", .inputs = "f[2x3] f[3]"},
    {.op = "Maximum", .inputs = "f[2x3] f[2x3]"},
    {.op = "Minimum", .inputs = "f[2x3] f[2x1]"},
    /* unary */
    {.op = "Neg", .inputs = "f[2x3]"},
    {.op = "Abs", .inputs = "f[2x3]~0.1,1"},
    {.op = "Square", .inputs = "f[2x3]"},
    {.op = "Exp", .inputs = "f[2x3]"},
    {.op = "Log", .inputs = "f[2x3]:0.5,2"},
    {.op = "Sqrt", .inputs = "f[2x3]:0.5,2"},
    {.op = "Rsqrt", .inputs = "f[2x3]:0.5,2"},
    {.op = "Sin", .inputs = "f[2x3]:-3,3"},
    {.op = "Cos", .inputs = "f[2x3]:-3,3"},
    /* ONNX math family (grad_math_signal.c) */
    {.op = "Erf", .inputs = "f[2x3]:-2,2"},
    {.op = "Tan", .inputs = "f[2x3]:-1.2,1.2"},
    {.op = "Asin", .inputs = "f[2x3]:-0.8,0.8"},
    {.op = "Acos", .inputs = "f[2x3]:-0.8,0.8"},
    {.op = "Atan", .inputs = "f[2x3]:-3,3"},
    {.op = "Sinh", .inputs = "f[2x3]:-2,2"},
    {.op = "Cosh", .inputs = "f[2x3]:-2,2"},
    {.op = "Asinh", .inputs = "f[2x3]:-3,3"},
    {.op = "Acosh", .inputs = "f[2x3]:1.2,3"},
    {.op = "Atanh", .inputs = "f[2x3]:-0.8,0.8"},
    {.op = "FloorMod", .inputs = "f[2x3]:-5,5 f[3]~0.7,2"},
    {.op = "TruncateMod", .inputs = "f[2x3]:-5,5 f[2x1]~0.7,2"},
    {.op = "Identity", .inputs = "f[2x3]"},
    {.op = "SqrtGrad", .inputs = "f[2x3]:0.5,2 f[2x3]"},
    {.op = "RsqrtGrad", .inputs = "f[2x3]:0.5,2 f[2x3]"},
    {.op = "AddN", .inputs = "f[2x3] f[2x3] f[2x3]", .lists = "3"},
    {.op = "AddN", .inputs = "f[4]", .lists = "1"},
    {.op = "Select", .inputs = "b[2x3]=1,0,0,1,1,0 f[2x3] f[2x3]"},
    {.op = "Select", .inputs = "b[3]=0,1,1 f[2x3] f[1]"},
    {.op = "Select", .inputs = "b[2x1]=1,0 f[3] f[2x3]", .dyn = true},
    {.op = "Cast", .inputs = "f[2x3]", .attrs = "DstT=tf64"},
    /* reductions */
    {.op = "Sum", .inputs = "f[2x3x4] i32=1"},
    {.op = "Sum", .inputs = "f[2x3x4] i32=1", .attrs = "keep_dims=b1"},
    {.op = "Sum", .inputs = "f[2x3x4] i32=0,2"},
    {.op = "Sum", .inputs = "f[2x3x4] i32=-1", .attrs = "keep_dims=b1"},
    {.op = "Sum", .inputs = "f[2x3x4] i32[]=0"},
    {.op = "Sum", .inputs = "f[2x3] i32[0]="},
    {.op = "Sum", .inputs = "f[2x3x4] i64=0,1,2"},
    {.op = "Sum", .inputs = "f[2x3x4] i32=0,2", .attrs = "keep_dims=b1", .dyn = true},
    {.op = "Mean", .inputs = "f[2x3x4] i32=1"},
    {.op = "Mean", .inputs = "f[2x3x4] i32=0,2", .attrs = "keep_dims=b1"},
    {.op = "Mean", .inputs = "f[2x3x4] i32=-1", .dyn = true},
    {.op = "Max", .inputs = "f[3x4] i32=1"},
    {.op = "Max", .inputs = "f[3x4] i32=0", .attrs = "keep_dims=b1"},
    {.op = "Max", .inputs = "f[2x3x2] i32=0,2"},
    {.op = "Min", .inputs = "f[3x4] i32=1", .attrs = "keep_dims=b1"},
    {.op = "Min", .inputs = "f[3x4] i32=0,1"},
    {.op = "Prod", .inputs = "f[2x3] i32=1"},
    {.op = "Prod", .inputs = "f[3x4] i32=0", .attrs = "keep_dims=b1"},
    /* zeros: none, one (the derivative at the zero is the product of the others) and two */
    {.op = "Prod", .inputs = "f[3x4]=0.5,0,2,1.5,0,1.2,0,0.7,1.1,0.9,-1.3,0.8 i32=1"},
    {.op = "Prod",
     .inputs = "f[4x3]=0.5,0,0,0,1.2,0.9,2,0,-1.3,1.5,0.7,0.8 i32=0",
     .attrs = "keep_dims=b1"},
    {.op = "Prod", .inputs = "f[3]=0,0,2 i32[0]="},
    {.op = "Prod", .inputs = "f[3x4]=0.5,0,2,1.5,0,1.2,0,0.7,1.1,0.9,-1.3,0.8 i32=-1", .dyn = true},
    {.op = "Max", .inputs = "f[3x4] i32=1", .attrs = "keep_dims=b1", .dyn = true},
    /* matrix products */
    {.op = "MatMul", .inputs = "f[2x3] f[3x4]"},
    {.op = "MatMul", .inputs = "f[3x2] f[3x4]", .attrs = "transpose_a=b1"},
    {.op = "MatMul", .inputs = "f[2x3] f[4x3]", .attrs = "transpose_b=b1"},
    {.op = "MatMul", .inputs = "f[3x2] f[4x3]", .attrs = "transpose_a=b1;transpose_b=b1"},
    {.op = "BatchMatMul", .inputs = "f[2x2x3] f[2x3x4]"},
    {.op = "BatchMatMul", .inputs = "f[2x3x2] f[2x3x4]", .attrs = "adj_x=b1"},
    {.op = "BatchMatMul", .inputs = "f[2x2x3] f[2x4x3]", .attrs = "adj_y=b1"},
    {.op = "BatchMatMul", .inputs = "f[2x3x2] f[2x4x3]", .attrs = "adj_x=b1;adj_y=b1"},
    {.op = "BatchMatMul", .inputs = "f[2x2x3] f[3x4]"},
    {.op = "BatchMatMul", .inputs = "f[1x2x3] f[3x2x3x2]"},
    {.op = "BatchMatMul", .inputs = "f[1x2x3] f[3x2x3x2]", .dyn = true},
    {.op = "BatchMatMul", .inputs = "f[3x2] f[2x4x3]", .attrs = "adj_x=b1;adj_y=b1"},
    /* activations */
    {.op = "Relu", .inputs = "f[2x3]~0.1,1"},
    {.op = "Relu6", .inputs = "f[2x4]=-1,0.5,3,5.5,7,8,-0.2,2"},
    {.op = "LeakyRelu", .inputs = "f[2x3]~0.1,1"},
    {.op = "LeakyRelu", .inputs = "f[2x3]~0.1,1", .attrs = "alpha=f-0.3"},
    {.op = "Elu", .inputs = "f[2x3]~0.1,2"},
    {.op = "Elu", .inputs = "f[2x3]~0.1,2", .attrs = "alpha=f0.5"},
    {.op = "Gelu", .inputs = "f[2x4]:-3,3"},
    {.op = "Gelu", .inputs = "f[2x4]:-3,3", .attrs = "approximate=b1"},
    {.op = "Sigmoid", .inputs = "f[2x3]:-3,3"},
    {.op = "Tanh", .inputs = "f[2x3]:-2,2"},
    {.op = "Softplus", .inputs = "f[2x3]:-3,3"},
    {.op = "Softmax", .inputs = "f[2x5]:-2,2"},
    {.op = "Softmax", .inputs = "f[3x4]:-2,2", .attrs = "axis=i0"},
    {.op = "Softmax", .inputs = "f[2x3x4]:-2,2", .attrs = "axis=i1"},
    {.op = "LogSoftmax", .inputs = "f[2x5]:-2,2"},
    {.op = "LogSoftmax", .inputs = "f[2x3x4]:-2,2", .attrs = "axis=i-2"},
    /* Labels rows sum to 1: backprop = softmax - labels is d loss / d features only for
     * distributions (TF's contract). */
    {.op = "SoftmaxCrossEntropyWithLogits",
     .inputs = "f[3x5]:-2,2 f[3x5]=0.2,0.1,0.3,0.15,0.25,0,0,1,0,0,0.5,0.1,0.1,0.1,0.2",
     .nout = 1},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .inputs = "f[3x5]:-2,2 i64=1,4,0", .nout = 1},
    {.op = "SparseSoftmaxCrossEntropyWithLogits", .inputs = "f[2x4]:-2,2 i32=3,0", .nout = 1},
    /* bias, convolution, pooling */
    {.op = "BiasAdd", .inputs = "f[2x3x4] f[4]"},
    {.op = "BiasAdd", .inputs = "f[3x4] f[4]"},
    {.op = "BiasAdd", .inputs = "f[2x3x2x2] f[3]", .attrs = "data_format=sNCHW"},
    {.op = "Conv2D", .inputs = "f[1x5x5x2] f[3x3x2x3]", .attrs = NHWC_S1_SAME},
    {.op = "Conv2D", .inputs = "f[1x5x5x2] f[3x3x2x3]", .attrs = "strides=l1,1,1,1;padding=sVALID"},
    {.op = "Conv2D", .inputs = "f[2x5x5x2] f[3x3x2x2]", .attrs = "strides=l1,2,2,1;padding=sSAME"},
    {.op = "Conv2D", .inputs = "f[1x6x6x1] f[3x3x1x2]", .attrs = "strides=l1,2,2,1;padding=sSAME"},
    {.op = "Conv2D", .inputs = "f[1x6x5x2] f[2x3x2x2]", .attrs = "strides=l1,2,2,1;padding=sVALID"},
    {.op = "Conv2D",
     .inputs = "f[1x2x5x5] f[3x3x2x3]",
     .attrs = "strides=l1,1,2,2;padding=sSAME;data_format=sNCHW"},
    {.op = "Conv2D",
     .inputs = "f[1x6x6x2] f[2x2x2x2]",
     .attrs = "strides=l1,1,1,1;padding=sVALID;dilations=l1,2,2,1"},
    {.op = "Conv2D", .inputs = "f[1x5x5x2] f[3x3x2x3]", .attrs = NHWC_S1_SAME, .dyn = true},
    {.op = "_FusedConv2DBiasRelu", .inputs = "f[1x5x5x2] f[3x3x2x3] f[3]", .attrs = NHWC_S1_SAME},
    {.op = "_FusedConv2DBiasRelu", .inputs = "f[2x2x5x5] f[3x3x2x3] f[3]",
     .attrs = "strides=l1,1,2,2;padding=sSAME;data_format=sNCHW"},
    {.op = "MaxPool",
     .inputs = "f[1x4x4x2]",
     .attrs = "ksize=l1,2,2,1;strides=l1,2,2,1;padding=sVALID"},
    {.op = "MaxPool",
     .inputs = "f[1x4x4x2]",
     .attrs = "ksize=l1,3,3,1;strides=l1,1,1,1;padding=sSAME"},
    {.op = "MaxPool",
     .inputs = "f[2x5x5x1]",
     .attrs = "ksize=l1,3,3,1;strides=l1,2,2,1;padding=sSAME"},
    {.op = "MaxPool",
     .inputs = "f[1x2x5x4]",
     .attrs = "ksize=l1,1,2,2;strides=l1,1,2,1;padding=sVALID;data_format=sNCHW"},
    {.op = "AvgPool",
     .inputs = "f[1x4x4x2]",
     .attrs = "ksize=l1,2,2,1;strides=l1,2,2,1;padding=sVALID"},
    {.op = "AvgPool",
     .inputs = "f[1x4x4x2]",
     .attrs = "ksize=l1,3,3,1;strides=l1,1,1,1;padding=sSAME"},
    {.op = "AvgPool",
     .inputs = "f[2x5x5x1]",
     .attrs = "ksize=l1,3,3,1;strides=l1,2,2,1;padding=sSAME"},
    {.op = "AvgPool",
     .inputs = "f[1x2x5x4]",
     .attrs = "ksize=l1,1,2,2;strides=l1,1,2,1;padding=sSAME;data_format=sNCHW"},
    /* N-d convolution and pooling (ops_conv.def; gradients in grad_conv.c) */
    {.op = "Conv", .inputs = "f[1x5x5x2] f[3x3x2x3]", .attrs = "padding=sSAME"},
    {.op = "Conv", .inputs = "f[1x4x7x6] f[3x2x2x4]", .attrs = CF_GROUPS_ATTRS},
    {.op = "Conv", .inputs = "f[2x7x3] f[3x3x2]", .attrs = "strides=l1,2,1"},
    {.op = "Conv",
     .inputs = "f[1x2x4x3x3] f[2x2x2x2x2]",
     .attrs = "data_format=sCHANNELS_FIRST;strides=l1,1,2,2,1;padding=sSAME"},
    {.op = "Conv", .inputs = "f[2x5x6x2] f[3x3x2x2]", .attrs = "strides=l1,2,2,1;padding=sSAME",
     .dyn = true},
    {.op = "Conv", .inputs = "f[2x6x5x4] f[3x3x2x6]",
     .attrs = "groups=i2;strides=l1,2,1,1;padding=sSAME"},
    /* negative paddings and output padding: the adjoint Conv reads a cropped dy */
    {.op = "ConvTranspose",
     .inputs = "f[1x2x3x4] f[3x3x2x2]",
     .attrs = "data_format=sCHANNELS_FIRST;strides=l1,1,2,2;padding=sEXPLICIT;"
              "explicit_paddings=l0,0,0,0,1,0,0,-1;output_padding=l0,0,1,1"},
    {.op = "ConvTranspose", .inputs = "f[1x5x4] f[2x3x4]", .attrs = "dilations=l1,2,1;groups=i2"},
    {.op = "ConvTranspose",
     .inputs = "f[2x3x3x2] f[2x3x3x2]",
     .attrs = "strides=l1,2,1,1;padding=sEXPLICIT;explicit_paddings=l0,0,1,1,0,2,0,0"},
    {.op = "ConvTranspose",
     .inputs = "f[1x2x3x3] f[2x2x3x2]",
     .attrs = "data_format=sCHANNELS_FIRST;strides=l1,1,2,2;output_padding=l0,0,1,0",
     .dyn = true},
    {.op = "Pool", .inputs = "f[2x3x7x6]", .attrs = POOL_MAX_CF_ATTRS},
    {.op = "Pool", .inputs = "f[1x2x6x5]", .attrs = POOL_AVG_CF_ATTRS},
    {.op = "Pool",
     .inputs = "f[1x5x4x6x2]",
     .attrs = "pooling_type=sAVG;ksize=l1,2,3,2,1;strides=l1,2,2,2,1;padding=sSAME"},
    {.op = "Pool",
     .inputs = "f[2x7x3]",
     .attrs = "pooling_type=sMAX;ksize=l1,3,1;strides=l1,2,1;padding=sSAME"},
    {.op = "Pool",
     .inputs = "f[2x5x5x3]",
     .attrs = "pooling_type=sMAX;ksize=l1,3,3,1;strides=l1,2,2,1;padding=sSAME"},
    {.op = "Pool",
     .inputs = "f[1x2x5x5]",
     .attrs = "pooling_type=sAVG;data_format=sCHANNELS_FIRST;ksize=l1,1,3,3;strides=l1,1,2,2;"
              "padding=sEXPLICIT;explicit_paddings=l0,0,0,0,1,1,1,1",
     .dyn = true},
    {.op = "MaxPoolWithIndices",
     .inputs = "f[2x2x5x6]",
     .attrs = "ksize=l1,1,2,3;strides=l1,1,2,2;ceil_mode=b1;storage_order=i1",
     .nout = 1},
    {.op = "MaxPoolWithIndices",
     .inputs = "f[1x1x4x4]",
     .attrs = "ksize=l1,1,3,3;padding=sEXPLICIT;explicit_paddings=l0,0,0,0,1,1,1,1",
     .nout = 1},
    /* gradient ops (second derivatives) */
    {.op = "ReluGrad", .inputs = "f[2x3] f[2x3]~0.1,1"},
    {.op = "Relu6Grad", .inputs = "f[2x4] f[2x4]=-1,0.5,3,5.5,7,8,-0.2,2"},
    {.op = "LeakyReluGrad", .inputs = "f[2x3] f[2x3]~0.1,1", .attrs = "alpha=f0.3"},
    {.op = "EluGrad", .inputs = "f[2x3] f[2x3]~0.1,0.9"},
    {.op = "EluGrad", .inputs = "f[2x3] f[2x3]~0.1,0.4", .attrs = "alpha=f0.5"},
    {.op = "GeluGrad", .inputs = "f[2x4] f[2x4]:-3,3"},
    {.op = "GeluGrad", .inputs = "f[2x4] f[2x4]:-3,3", .attrs = "approximate=b1"},
    {.op = "SigmoidGrad", .inputs = "f[2x3]:0.1,0.9 f[2x3]"},
    {.op = "TanhGrad", .inputs = "f[2x3]:-0.9,0.9 f[2x3]"},
    {.op = "SoftplusGrad", .inputs = "f[2x3] f[2x3]:-3,3"},
    {.op = "BiasAddGrad", .inputs = "f[2x3x4]"},
    {.op = "BiasAddGrad", .inputs = "f[2x3x2x2]", .attrs = "data_format=sNCHW"},
    {.op = "Conv2DBackpropInput",
     .inputs = "i32=1,5,5,2 f[3x3x2x3] f[1x5x5x3]",
     .attrs = NHWC_S1_SAME},
    {.op = "Conv2DBackpropInput",
     .inputs = "i32=1,5,5,2 f[3x3x2x3] f[1x2x2x3]",
     .attrs = "strides=l1,2,2,1;padding=sVALID"},
    {.op = "Conv2DBackpropFilter",
     .inputs = "f[1x5x5x2] i32=3,3,2,3 f[1x5x5x3]",
     .attrs = NHWC_S1_SAME},
    {.op = "Conv2DBackpropFilter",
     .inputs = "f[1x5x5x2] i32=3,3,2,3 f[1x3x3x3]",
     .attrs = "strides=l1,2,2,1;padding=sSAME"},
    {.op = "AvgPoolGrad",
     .inputs = "i32=1,4,4,2 f[1x2x2x2]",
     .attrs = "ksize=l1,2,2,1;strides=l1,2,2,1;padding=sVALID"},
    {.op = "AvgPoolGrad",
     .inputs = "i32=1,5,5,1 f[1x3x3x1]",
     .attrs = "ksize=l1,3,3,1;strides=l1,2,2,1;padding=sSAME"},
    {.op = "ConvBackpropInputNd", .inputs = "i32=1,5,5,2 f[3x3x2x3] f[1x5x5x3]",
     .attrs = "padding=sSAME"},
    {.op = "ConvBackpropInputNd", .inputs = "i32=1,4,7,6 f[3x2x2x4] f[1x4x3x4]",
     .attrs = CF_GROUPS_ATTRS},
    {.op = "ConvBackpropFilterNd", .inputs = "f[1x5x5x2] i32=3,3,2,3 f[1x5x5x3]",
     .attrs = "padding=sSAME"},
    {.op = "ConvBackpropFilterNd", .inputs = "f[2x7x3] i64=3,3,2 f[2x3x2]",
     .attrs = "strides=l1,2,1"},
    {.op = "PoolGrad", .inputs = "f[1x2x6x5] f[1x2x4x3]", .attrs = POOL_AVG_CF_ATTRS},
    {.op = "PoolGrad", .inputs = "f[1x4x4x2] f[1x2x2x2]",
     .attrs = "pooling_type=sAVG;ksize=l1,2,2,1;strides=l1,2,2,1"},
    /* shapes and data movement */
    {.op = "Reshape", .inputs = "f[2x3] i32=3,2"},
    {.op = "Reshape", .inputs = "f[2x3] i32=-1"},
    {.op = "Reshape", .inputs = "f[2x3] i64=3,-1", .dyn = true},
    {.op = "Squeeze", .inputs = "f[2x1x3x1]"},
    {.op = "Squeeze", .inputs = "f[2x1x3x1]", .attrs = "squeeze_dims=l1"},
    {.op = "ExpandDims", .inputs = "f[2x3]", .attrs = "axis=i1"},
    {.op = "ExpandDims", .inputs = "f[2x3]", .attrs = "axis=i-1", .dyn = true},
    {.op = "Transpose", .inputs = "f[2x3x4] i32=2,0,1"},
    {.op = "Transpose", .inputs = "f[2x3x4] i64=1,2,0"},
    {.op = "Transpose", .inputs = "f[2x3x4] i32=2,0,1", .dyn = true},
    {.op = "Concat", .inputs = "f[2x3] f[2x2] i32[]=1", .lists = "2,1"},
    {.op = "Concat", .inputs = "f[1x3] f[2x3] f[3x3] i32[]=0", .lists = "3,1"},
    {.op = "Concat", .inputs = "f[2x3] f[2x1] i64[]=-1", .lists = "2,1"},
    {.op = "Concat", .inputs = "f[2x3] i32[]=1", .lists = "1,1"},
    {.op = "Concat", .inputs = "f[2x3] f[2x2] f[2x1] i32[]=1", .lists = "3,1", .dyn = true},
    {.op = "Concat", .inputs = "f[2x3] f[2x1] i64[]=-1", .lists = "2,1", .dyn = true},
    {.op = "Split", .inputs = "f[4x3] i32[]=0", .attrs = "num_split=i2"},
    {.op = "Split", .inputs = "f[2x6] i32[]=1", .attrs = "num_split=i3"},
    {.op = "Split", .inputs = "f[2x6] i32[]=-1", .attrs = "num_split=i3", .nout = 2},
    {.op = "Split", .inputs = "f[2x6] i32[]=1", .attrs = "num_split=i3", .dyn = true},
    {.op = "Slice", .inputs = "f[3x4] i32=1,0 i32=2,-1"},
    {.op = "Slice", .inputs = "f[3x4x2] i64=0,1,1 i64=3,2,1"},
    {.op = "Slice", .inputs = "f[3x4] i32=1,0 i32=2,-1", .dyn = true},
    {.op = "StridedSlice", .inputs = "f[4x5] i32=1,0 i32=4,5 i32=2,1"},
    {.op = "StridedSlice",
     .inputs = "f[4x5] i32=3,4 i32=0,0 i32=-1,-2",
     .attrs = "begin_mask=i0;end_mask=i1"},
    {.op = "StridedSlice",
     .inputs = "f[4x5] i32=1,0 i32=2,5 i32=1,1",
     .attrs = "shrink_axis_mask=i1"},
    {.op = "StridedSlice", .inputs = "f[4x5] i32=0,1 i32=0,4 i32=1,2", .attrs = "new_axis_mask=i1"},
    {.op = "StridedSlice",
     .inputs = "f[2x3x4] i32=1,1 i32=2,3 i32=1,1",
     .attrs = "ellipsis_mask=i1"},
    {.op = "StridedSlice", .inputs = "f[4x5] i64=1,0 i64=4,5 i64=2,1", .dyn = true},
    {.op = "Gather", .inputs = "f[5x3] i32=4,0,4"},
    {.op = "Gather", .inputs = "f[3x4] i32[2x2]=3,0,1,3", .attrs = "axis=i1"},
    {.op = "Gather", .inputs = "f[5x3] i64=4,0,4", .dyn = true},
    {.op = "Pad", .inputs = "f[2x3] i32[2x2]=1,0,2,1"},
    {.op = "Pad", .inputs = "f[2x3] i32[2x2]=1,0,2,1", .attrs = "constant_value=f1.5"},
    {.op = "Pad", .inputs = "f[3x4] i32[2x2]=1,2,2,1", .attrs = "mode=sREFLECT"},
    {.op = "Pad", .inputs = "f[3x4] i64[2x2]=1,2,2,1", .attrs = "mode=sREFLECT", .dyn = true},
    {.op = "Tile", .inputs = "f[2x3] i32=2,3"},
    /* indexing ops (ops_index.def) */
    {.op = "Trilu", .inputs = "f[3x4] i64[]=1"},
    {.op = "Trilu", .inputs = "f[2x3x3] i64[]=-1", .attrs = "upper=b0"},
    {.op = "Cumsum", .inputs = "f[3x4] i32[]=1"},
    {.op = "Cumsum", .inputs = "f[5] i64[]=0", .attrs = "exclusive=b1;reverse=b1"},
    {.op = "ReverseSequence", .inputs = "f[4x3] i64=2,4,0", .attrs = "seq_dim=i0;batch_dim=i1"},
    {.op = "SqueezeAxes", .inputs = "f[2x1x3x1] i64=1,-1"},
    {.op = "UnsqueezeAxes", .inputs = "f[2x3] i64=0,3"},
    {.op = "UnsqueezeAxes", .inputs = "f[2x3] i64=0,3", .dyn = true},
    {.op = "SplitV", .inputs = "f[5x3] i64=2,-1,1 i32[]=0", .attrs = "num_split=i3"},
    {.op = "SplitV", .inputs = "f[2x5] i64=4,1 i32[]=-1", .attrs = "num_split=i2", .nout = 1},
    {.op = "SliceAxes", .inputs = "f[5x4] i64=-1,1 i64=-100,4 i64=0,1 i64=-2,2"},
    {.op = "SliceAxes", .inputs = "f[5x4] i64=1 i64=3 i64=-1 i64=1", .dyn = true},
    {.op = "SliceAxesGrad", .inputs = "i64=5,4 i64=-1,1 i64=-100,4 i64=0,1 i64=-2,2 f[3x2]"},
    {.op = "GatherElements", .inputs = "f[3x4] i64[3x2]=0,-1,3,2,1,1", .attrs = "axis=i1"},
    {.op = "GatherND", .inputs = "f[3x4x2] i64[2x2]=2,3,0,-1"},
    {.op = "TopK", .inputs = "f[3x5] i64[]=2", .nout = 1},
    {.op = "TopK", .inputs = "f[4x3] i64[]=3", .attrs = "axis=i0;largest=b0", .nout = 1},
    {.op = "ScatterElements", .inputs = "f[3x4] i64[3x2]=1,1,0,3,-2,2 f[3x2]", .attrs = "axis=i1"},
    {.op = "ScatterElements", .inputs = "f[3x4] i64[2x4]=0,2,2,0,0,1,2,0 f[2x4]",
     .attrs = "reduction=sadd"},
    {.op = "ScatterND", .inputs = "f[4x3] i64[3x1]=3,1,3 f[3x3]"},
    {.op = "ScatterND", .inputs = "f[4x3] i64[2x2]=3,1,3,1 f[2]", .attrs = "reduction=sadd"},
    {.op = "Tile", .inputs = "f[2x1x3] i32=1,3,2", .dyn = true},
    {.op = "Fill", .inputs = "i32=2,3 f[]"},
    {.op = "Fill", .inputs = "i32=2,3 f[]", .dyn = true},
    {.op = "BroadcastTo", .inputs = "f[3] i32=2,3"},
    {.op = "BroadcastTo", .inputs = "f[2x1] i32=3,2,4"},
    {.op = "BroadcastTo", .inputs = "f[2x1] i32=3,2,4", .dyn = true},
    {.op = "SumToShape", .inputs = "f[2x3x4] i32=3,1"},
    {.op = "SumToShape", .inputs = "f[2x3x4] i32=2,1,4", .dyn = true},
    {.op = "ExpandReduced", .inputs = "f[2x4] i32=2,3,4 i32=1"},
    {.op = "ExpandReduced", .inputs = "f[2x1x4] i32=2,3,4 i32=1", .attrs = "keep_dims=b1"},
    {.op = "ExpandReduced", .inputs = "f[3] i32=2,3,4 i32=0,2", .attrs = "mean=b1"},
    {.op = "SliceGrad", .inputs = "i32=3,4 i32=1,1 f[2x2]"},
    {.op = "StridedSliceGrad", .inputs = "i32=4,5 i32=1,0 i32=4,5 i32=2,1 f[2x5]"},
    {.op = "StridedSliceGrad",
     .inputs = "i32=4,5 i32=1,0 i32=2,5 i32=1,1 f[5]",
     .attrs = "shrink_axis_mask=i1"},
    {.op = "GatherGrad", .inputs = "i32=5,3 i32=4,0,4 f[3x3]"},
    {.op = "GatherGrad", .inputs = "i32=3,4 i32[2x2]=3,0,1,3 f[3x2x2]", .attrs = "axis=i1"},
    {.op = "PadGrad", .inputs = "f[5x6] i32[2x2]=1,1,2,1"},
    {.op = "PadGrad", .inputs = "f[6x7] i32[2x2]=1,2,2,1", .attrs = "mode=sREFLECT"},
    {.op = "TileGrad", .inputs = "f[4x9] i32=2,3"},
    /* recurrent cells: h and c (act is not differentiable) */
    {.op = "LSTMCell", .inputs = "f[2x3] f[2x4] f[2x4] f[7x16] f[16]", .nout = 2},
    {.op = "LSTMCell",
     .inputs = "f[3x2] f[3x5]:-2,2 f[3x5] f[7x20] f[20]",
     .attrs = "forget_bias=f1.5",
     .nout = 2},
    {.op = "LSTMCell", .inputs = "f[1x1] f[1x3] f[1x3] f[4x12] f[12]", .nout = 2, .dyn = true},
    {.op = "LSTMCellRecurrent", .inputs = "f[2x16] f[2x4] f[2x4] f[4x16]", .nout = 2},
    {.op = "LSTMCellRecurrent",
     .inputs = "f[3x20]:-2,2 f[3x5]:-2,2 f[3x5] f[5x20]",
     .attrs = "forget_bias=f1.5",
     .nout = 2,
     .dyn = true},
};
#define NUM_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Ops of the standard set that are differentiable but checked by dedicated tests below
 * rather than by finite differences. */
static const char *const checked_elsewhere[] = {
    "MaxPoolGrad", /* its gradient is an error: maxpool_grad_second_derivative_is_an_error */
    "_FusedMaxPoolGradRelu", /* the same error (MaxPoolGrad's second derivative) */
    /* conds and while loops: finite differences in core/test_control_flow */
    "Switch", "Merge", "Enter", "Exit", "NextIteration",
    /* TensorArrays: finite differences through whole graphs in test_tensor_array. */
    "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
    "TensorArrayStackV3", "TensorArrayUnstackV3",
    "TensorArrayConcatV3", "TensorArraySplitV3",
    /* their gradients are errors: ops/test_lstm.c, second_derivative_is_an_error */
    "LSTMCellGrad", "LSTMCellBackprop", "LSTMCellRecurrentBackprop",
    /* no gradient yet, an error: ops/test_fused_conv, gradient_is_an_error; the same
     * function for _FusedElementwise (core/test_optimize, fused_elementwise_errors) and
     * _FusedMatMul (core/test_fuse, fused_matmul_errors) */
    "_FusedConv", "_FusedElementwise", "_FusedMatMul",
    /* each the other's gradient, checked in ops/test_blocked_conv (AVX-512 machines have the
     * kernels) */
    "_ToBlocked", "_FromBlocked",
    /* no gradient yet, an error: core/test_onnx_resize, gradient_is_an_error */
    "Resize", "GridSample", "RoiAlign", "RNN", "GRU", "LSTM",
};

/* A copy of gradients.c's not_differentiable[] table: ops through which no gradient flows.
 * Each must be registered as such (has_gradient); an op missing from both lists fails. */
static const char *const not_differentiable[] = {
    "LoopCond",
    "ControlTrigger",
    "Const",
    "Placeholder",
    "NoOp",
    "StopGradient",
    "Shape",
    "Size",
    "_Send", "_ControlSend", "_Recv", /* added by the partitioner after differentiation */
    /* a variable's rows (floe_minimize differentiates the variable through them), and
     * synchronous replication's accumulators and token queue */
    "ResourceGather", "ResourceGatherGrad", "ConditionalAccumulator", "AccumulatorApplyGradient",
    "AccumulatorTakeGradient", "AccumulatorSetGlobalStep", "AccumulatorNumAccumulated",
    "AccumulatorNumDropped", "SyncTokenQueue",
    "Rank",
    "ZerosLike",
    "OnesLike",
    "ArgMax",
    "ArgMin",
    "Equal",
    "NotEqual",
    "Less",
    "LessEqual",
    "Greater",
    "GreaterEqual",
    "LogicalAnd",
    "LogicalOr",
    "LogicalNot",
    "OneHot",
    "RandomUniform",
    "RandomNormal",
    "TruncatedNormal",
    "StatelessRandomUniform",
    "StatelessRandomNormal",
    "LogUniformCandidateSampler",
    "BatchedNonMaxSuppression", /* grad_resize.c */
    /* grad_control.c: collectives stop the gradient */
    "CollectiveReduce",
    "CollectiveGather",
    "CollectiveReduceScatter",
    "CollectiveBcastSend",
    "CollectiveBcastRecv",
    "Sign",
    "Floor",
    "InvertPermutation",
    "ConcatOffset",
    "VarHandleOp",
    "ReadVariableOp",
    "AssignVariableOp",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "VarIsInitializedOp",
    "ResourceApplyGradientDescent",
    "ResourceApplyMomentum",
    "ResourceApplyAdam",
    "ResourceApplyRMSProp",
    "ResourceApplyAdagrad",
    "Save",
    "SaveShard",
    "Restore",
    /* TensorArrays and stacks (their handles, sizes and the loop gradients' stacks). */
    "TensorArrayV3",
    "TensorArraySizeV3",
    "TensorArrayCloseV3",
    "TensorArrayGradV3",
    "StackV2",
    "StackPushV2",
    "StackPopV2",
    "StackCloseV2",
    /* Queues and readers (queue.c's floe__grads_register_data). */
    "FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2", "QueueEnqueueV2",
    "QueueEnqueueManyV2", "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2",
    "QueueCloseV2", "QueueSizeV2", "QueueIsClosedV2", "TextLineReaderV2",
    "FixedLengthRecordReaderV2", "IdxRecordReader", "ReaderRead", "ReaderReadUpTo",
    "ReaderSeek",
    /* ONNX math family (grad_math_signal.c): rounding, predicates, shifts, and ops whose float
     * inputs only act through floors (MelWeightMatrix) or that take none. */
    "Ceil", "Round", "IsNan", "IsInf", "LeftShift", "RightShift", "CosineSumWindow",
    "MelWeightMatrix",
    /* Indices and sizes (grad_index.c, as TensorFlow has them). */
    "NonZero", "Range", "Unique",
    /* Text features (gradients.c's list): integer items in, counts out. */
    "TfIdfVectorizer",
};

/* Standard ops whose gradients are not written yet: differentiating through them is an
 * error naming the op (gradient_pending_ops_are_errors). */
static const char *const gradient_pending[] = {"MatrixDeterminant", "DFT", "STFT"};

/* ------------------------------------------------------------------------------------ */
/* The finite-difference check of one case. */

typedef struct Built {
  FloeGraph *g;
  int nin;
  InSpec spec[MAXIN];
  FloeTensor *value[MAXIN]; /* fed values (floats and, in dyn cases, constants) */
  char name[MAXIN][8];      /* placeholder names ("" for graph constants) */
  FloeOutput in[MAXIN];
  FloeNode *node;
  int nout;
  char fetch[8][16];
  const char *fetches[8];
} Built;

static void build_case(const Case *k, int idx, Built *bt) {
  memset(bt, 0, sizeof *bt);
  bt->g = floe_graph_new();
  char *copy = strdup(k->inputs), *save = NULL;
  uint64_t seed = 0x5eed0000u + (uint64_t)idx * 7919u;
  for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    ck_assert_int_lt(bt->nin, MAXIN);
    InSpec *s = &bt->spec[bt->nin];
    parse_input(tok, s);
    FloeTensor *v = make_value(s, &seed);
    if (s->is_float || k->dyn) {
      snprintf(bt->name[bt->nin], sizeof bt->name[0], "%s%d", s->is_float ? "x" : "c", bt->nin);
      FloeShape sh = k->dyn ? floe_shape_unknown() : floe_tensor_shape(v);
      bt->in[bt->nin] = floe_placeholder(bt->g, bt->name[bt->nin], s->dt, sh);
      bt->value[bt->nin] = v;
    } else {
      bt->in[bt->nin] = floe_const(bt->g, NULL, v);
      floe_tensor_release(v);
    }
    bt->nin++;
  }
  free(copy);
  FloeNodeBuilder *b = floe_node_begin(bt->g, k->op, "op");
  if (k->lists) {
    int64_t sizes[MAXIN];
    int nl, at = 0;
    parse_int_list(k->lists, sizes, &nl);
    for (int l = 0; l < nl; l++) {
      floe_node_add_input_list(b, bt->in + at, (int)sizes[l]);
      at += (int)sizes[l];
    }
    ck_assert_int_eq(at, bt->nin);
  } else {
    for (int i = 0; i < bt->nin; i++) floe_node_add_input(b, bt->in[i]);
  }
  set_attrs(b, k->attrs);
  bt->node = floe_node_finish(b);
  ck_assert_msg(bt->node, "case %d %s: %s", idx, k->op, floe_graph_error(bt->g, NULL));
  ck_assert_str_eq(floe_node_op(bt->node), k->op);
  bt->nout = k->nout ? k->nout : floe_node_num_outputs(bt->node);
  ck_assert_int_le(bt->nout, 8);
  for (int j = 0; j < bt->nout; j++) {
    snprintf(bt->fetch[j], sizeof bt->fetch[j], "op:%d", j);
    bt->fetches[j] = bt->fetch[j];
  }
}

static int make_feeds(const Built *bt, FloeFeed *feeds) {
  int nf = 0;
  for (int i = 0; i < bt->nin; i++)
    if (bt->value[i]) feeds[nf++] = (FloeFeed){bt->name[i], bt->value[i]};
  return nf;
}

/* sum_j <outs[j], R[j]> */
static double dot_all(FloeTensor *const *outs, FloeTensor *const *R, int n) {
  double acc = 0;
  for (int j = 0; j < n; j++) {
    ck_assert_int_eq(floe_tensor_num_elements(outs[j]), floe_tensor_num_elements(R[j]));
    ck_assert_int_eq(floe_tensor_dtype(outs[j]), FLOE_F64);
    const double *a = floe_tensor_data(outs[j]), *r = floe_tensor_data(R[j]);
    for (int64_t e = 0; e < floe_tensor_num_elements(R[j]); e++) acc += a[e] * r[e];
  }
  return acc;
}

static bool shape_eq(const FloeShape *a, const FloeShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* One case built in a float dtype, with its analytic gradients computed. */
typedef struct Run {
  char what[240];
  Built bt;
  FloeFeed feeds[MAXIN];
  int nf;
  FloeSession *fwd;         /* the forward graph only (made before any gradient node) */
  FloeTensor *R[8];         /* grad_ys */
  int nx, xi[MAXIN];        /* float inputs: their input index */
  FloeTensor *grads[MAXIN]; /* their gradients */
} Run;

static void case_gradients(int idx, FloeDType dt, Run *r) {
  const Case *k = &cases[idx];
  memset(r, 0, sizeof *r);
  snprintf(r->what, sizeof r->what, "case %d %s: %s(%s)%s%s%s", idx, floe_dtype_name(dt), k->op,
           k->inputs, k->attrs ? " " : "", k->attrs ? k->attrs : "", k->dyn ? " dyn" : "");
  const char *what = r->what;
  Built *bt = &r->bt;
  float_dtype = dt;
  build_case(k, idx, bt);
  r->nf = make_feeds(bt, r->feeds);
  r->fwd = session_new(bt->g, what);
  FloeTensor *outs[8];
  run(r->fwd, r->feeds, r->nf, bt->fetches, bt->nout, outs, what);
  FloeOutput ys[8], gys[8];
  uint64_t seed = 0xabcdefu + (uint64_t)idx;
  for (int j = 0; j < bt->nout; j++) {
    /* R has the output's dtype (a Cast case's output is not dt). */
    InSpec rs = {
        .dt = floe_tensor_dtype(outs[j]), .rank = floe_tensor_rank(outs[j]), .lo = -1, .hi = 1};
    memcpy(rs.dims, floe_tensor_dims(outs[j]), sizeof(int64_t) * (size_t)rs.rank);
    r->R[j] = make_value(&rs, &seed);
    ys[j] = floe_out(bt->node, j);
    gys[j] = floe_const(bt->g, NULL, r->R[j]);
    floe_tensor_release(outs[j]);
  }
  FloeOutput xs[MAXIN], dxs[MAXIN];
  for (int i = 0; i < bt->nin; i++)
    if (bt->spec[i].is_float) {
      r->xi[r->nx] = i;
      xs[r->nx++] = bt->in[i];
    }
  FloeStatus *st = floe_status_new();
  if (floe_gradients(bt->g, ys, bt->nout, xs, r->nx, gys, dxs, st) != FLOE_OK)
    ck_abort_msg("%s: floe_gradients: %s", what, floe_status_message(st));
  floe_status_free(st);
  char dnames[MAXIN][160];
  const char *dfetch[MAXIN];
  for (int i = 0; i < r->nx; i++) {
    ck_assert_msg(dxs[i].node != NULL, "%s: input %d has no gradient", what, r->xi[i]);
    ck_assert_int_eq(floe_node_output_dtype(dxs[i].node, dxs[i].index), dt);
    if (!k->dyn) {
      /* Static shapes stay complete through the gradient graph. */
      FloeShape got = floe_node_output_shape(dxs[i].node, dxs[i].index);
      FloeShape want = floe_tensor_shape(bt->value[r->xi[i]]);
      char a[64], b[64];
      ck_assert_msg(shape_eq(&got, &want), "%s: gradient of input %d has static shape %s, want %s",
                    what, r->xi[i], floe_shape_str(&got, a, sizeof a),
                    floe_shape_str(&want, b, sizeof b));
    }
    snprintf(dnames[i], sizeof dnames[i], "%s:%d", floe_node_name(dxs[i].node), dxs[i].index);
    dfetch[i] = dnames[i];
  }
  FloeSession *bwd = session_new(bt->g, what);
  run(bwd, r->feeds, r->nf, dfetch, r->nx, r->grads, what);
  floe_session_free(bwd);
  for (int i = 0; i < r->nx; i++)
    ck_assert_int_eq(floe_tensor_num_elements(r->grads[i]),
                     floe_tensor_num_elements(bt->value[r->xi[i]]));
}

static void run_free(Run *r) {
  for (int i = 0; i < r->nx; i++) floe_tensor_release(r->grads[i]);
  floe_session_free(r->fwd);
  for (int j = 0; j < r->bt.nout; j++) floe_tensor_release(r->R[j]);
  for (int i = 0; i < r->bt.nin; i++) floe_tensor_release(r->bt.value[i]);
  floe_graph_free(r->bt.g);
}

/* f64: every gradient element against central differences of y = sum_j <out_j, R_j>. */
START_TEST(finite_differences) {
  Run r;
  case_gradients(_i, FLOE_F64, &r);
  const double eps = 1e-6, tol = 1e-6;
  FloeTensor *outs[8];
  for (int i = 0; i < r.nx; i++) {
    FloeTensor *x = r.bt.value[r.xi[i]];
    double *xv = floe_tensor_data(x);
    const double *gv = floe_tensor_data(r.grads[i]);
    for (int64_t e = 0; e < floe_tensor_num_elements(x); e++) {
      double keep = xv[e], lp, lm;
      xv[e] = keep + eps;
      run(r.fwd, r.feeds, r.nf, r.bt.fetches, r.bt.nout, outs, r.what);
      lp = dot_all(outs, r.R, r.bt.nout);
      for (int j = 0; j < r.bt.nout; j++) floe_tensor_release(outs[j]);
      xv[e] = keep - eps;
      run(r.fwd, r.feeds, r.nf, r.bt.fetches, r.bt.nout, outs, r.what);
      lm = dot_all(outs, r.R, r.bt.nout);
      for (int j = 0; j < r.bt.nout; j++) floe_tensor_release(outs[j]);
      xv[e] = keep;
      double fd = (lp - lm) / (2 * eps);
      ck_assert_msg(fabs(gv[e] - fd) <= tol * fmax(1.0, fabs(fd)),
                    "%s: d/d input %d [%lld] = %.12g, finite differences give %.12g", r.what,
                    r.xi[i], (long long)e, gv[e], fd);
    }
  }
  run_free(&r);
}
END_TEST

/* f32 (the training dtype): every gradient function builds and runs, and agrees with the f64
 * gradient of the same inputs to f32 precision. */
START_TEST(f32_matches_f64) {
  Run r32, r64;
  case_gradients(_i, FLOE_F32, &r32);
  case_gradients(_i, FLOE_F64, &r64);
  for (int i = 0; i < r32.nx; i++) {
    int64_t n = floe_tensor_num_elements(r64.grads[i]);
    double scale = 0;
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(harness_get(r64.grads[i], e)));
    for (int64_t e = 0; e < n; e++) {
      double a = harness_get(r32.grads[i], e), b = harness_get(r64.grads[i], e);
      ck_assert_msg(fabs(a - b) <= 1e-4 * (scale + 1), "%s: d/d input %d [%lld] = %.8g, f64: %.8g",
                    r32.what, r32.xi[i], (long long)e, a, b);
    }
  }
  run_free(&r32);
  run_free(&r64);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Coverage of the standard op set. */

static bool in_list(const char *op, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(op, list[i]) == 0) return true;
  return false;
}

START_TEST(every_standard_op_is_checked_or_not_differentiable) {
  int n = floe_op_count();
  ck_assert_int_gt(n, 100);
  char missing[2048] = "";
  for (int i = 0; i < n; i++) {
    const char *op = floe_op_name(i);
    const FloeOpInfo *info = floe__op_lookup(op);
    if (!info || info->plugin) continue; /* custom ops of plugins are theirs to check */
    bool nd = in_list(op, not_differentiable, FLOE__ARRAY_LEN(not_differentiable));
    bool checked = in_list(op, checked_elsewhere, FLOE__ARRAY_LEN(checked_elsewhere));
    if (in_list(op, gradient_pending, FLOE__ARRAY_LEN(gradient_pending))) {
      ck_assert_msg(!nd && !checked && !floe_op_has_gradient(op),
                    "op %s is listed as gradient-pending but has a gradient entry", op);
      continue;
    }
    for (int c = 0; c < NUM_CASES && !checked; c++) checked = strcmp(cases[c].op, op) == 0;
    ck_assert_msg(!(nd && checked), "op %s is both checked and listed as not differentiable", op);
    if (!nd && !checked && strlen(missing) + strlen(op) + 3 < sizeof missing) {
      strcat(missing, " ");
      strcat(missing, op);
    }
    ck_assert_msg(floe_op_has_gradient(op), "op %s has no gradient registration", op);
  }
  ck_assert_msg(missing[0] == '\0',
                "ops with neither a gradient check here nor a not-differentiable entry:%s",
                missing);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The algorithm of floe_gradients. */

static FloeTensor *vec_f64(int n, const double *v) {
  int64_t d[1] = {n};
  return harness_f64(1, d, v);
}

/* Runs the fetches of g (fed x = xv) and returns the values of fetch 0..n. */
static void run_graph(FloeGraph *g, const char *feed, FloeTensor *xv, const char *const *fetches,
                      int n, FloeTensor **outs) {
  FloeSession *s = session_new(g, "graph");
  FloeFeed f = {feed, xv};
  run(s, xv ? &f : NULL, xv ? 1 : 0, fetches, n, outs, "graph");
  floe_session_free(s);
}

static const char *out_name(FloeOutput o, char *buf, size_t len) {
  snprintf(buf, len, "%s:%d", floe_node_name(o.node), o.index);
  return buf;
}

/* y = x * x + exp(x): x reaches y over three paths, summed with AddN. */
START_TEST(paths_are_summed) {
  FloeGraph *g = floe_graph_new();
  const int64_t d3[1] = {3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(1, d3));
  FloeOutput y =
      floe_binary(g, "Add", "y", floe_binary(g, "Mul", NULL, x, x), floe_unary(g, "Exp", NULL, x));
  FloeOutput dx;
  ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, NULL), FLOE_OK);
  ck_assert_ptr_nonnull(dx.node);
  ck_assert_str_eq(floe_node_op(dx.node), "AddN");
  const double xv[3] = {0.5, -1.0, 2.0};
  FloeTensor *xt = vec_f64(3, xv), *out;
  char buf[128];
  const char *fetch = out_name(dx, buf, sizeof buf);
  run_graph(g, "x", xt, &fetch, 1, &out);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(((double *)floe_tensor_data(out))[i], 2 * xv[i] + exp(xv[i]), 1e-12);
  floe_tensor_release(out);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

/* y = x * StopGradient(x): the stopped factor is a constant, so dy/dx = x, not 2x. */
START_TEST(stop_gradient_blocks) {
  FloeGraph *g = floe_graph_new();
  const int64_t d3[1] = {3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(1, d3));
  FloeOutput y = floe_binary(g, "Mul", "y", x, floe_unary(g, "StopGradient", NULL, x));
  FloeOutput z = floe_unary(g, "StopGradient", "z", floe_unary(g, "Exp", NULL, x));
  FloeOutput dx, dz;
  ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, NULL), FLOE_OK);
  /* Only through StopGradient: x does not influence z as far as gradients go. */
  ck_assert_int_eq(floe_gradients(g, &z, 1, &x, 1, NULL, &dz, NULL), FLOE_OK);
  ck_assert_ptr_null(dz.node);
  const double xv[3] = {0.5, -1.0, 2.0};
  FloeTensor *xt = vec_f64(3, xv), *out;
  char buf[128];
  const char *fetch = out_name(dx, buf, sizeof buf);
  run_graph(g, "x", xt, &fetch, 1, &out);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(((double *)floe_tensor_data(out))[i], xv[i], 1e-15);
  floe_tensor_release(out);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

/* Integer inputs (Gather's indices, a Cast from an integer) get no gradient; the float
 * input next to them does. Casting f64 to an integer stops the gradient too. */
START_TEST(integer_inputs_get_no_gradient) {
  FloeGraph *g = floe_graph_new();
  const int64_t d3[1] = {3}, d2[1] = {2};
  FloeOutput p = floe_placeholder(g, "p", FLOE_F64, floe_shape_make(1, d3));
  FloeOutput idx = floe_placeholder(g, "idx", FLOE_I32, floe_shape_make(1, d2));
  FloeNodeBuilder *b = floe_node_begin(g, "Gather", "gather");
  floe_node_add_input(b, p);
  floe_node_add_input(b, idx);
  FloeOutput gat = floe_out(floe_node_finish(b), 0);
  b = floe_node_begin(g, "Cast", "idx_f");
  floe_node_add_input(b, idx);
  floe_node_set_attr_type(b, "DstT", FLOE_F64);
  FloeOutput idx_f = floe_out(floe_node_finish(b), 0);
  b = floe_node_begin(g, "Cast", "p_i");
  floe_node_add_input(b, p);
  floe_node_set_attr_type(b, "DstT", FLOE_I32);
  FloeOutput p_i = floe_out(floe_node_finish(b), 0);
  b = floe_node_begin(g, "Cast", "p_i_f");
  floe_node_add_input(b, p_i);
  floe_node_set_attr_type(b, "DstT", FLOE_F64);
  FloeOutput p_i_f = floe_out(floe_node_finish(b), 0);
  FloeOutput ys[2] = {floe_binary(g, "Mul", "y", gat, idx_f), p_i_f};
  FloeOutput xs[2] = {p, idx}, dxs[2];
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_gradients(g, ys, 2, xs, 2, NULL, dxs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_ptr_nonnull(dxs[0].node);
  ck_assert_ptr_null(dxs[1].node);
  /* d y / d p = scatter-add of idx (as float) at idx; the Cast to int contributes nothing. */
  const double pv[3] = {1.5, -2.0, 0.25};
  const int32_t iv[2] = {2, 2};
  FloeTensor *pt = vec_f64(3, pv), *it = harness_i32(1, d2, iv), *out;
  FloeSession *s = session_new(g, "integer");
  FloeFeed f[2] = {{"p", pt}, {"idx", it}};
  char buf[128];
  const char *fetch = out_name(dxs[0], buf, sizeof buf);
  run(s, f, 2, &fetch, 1, &out, "integer");
  const double want[3] = {0, 0, 4};
  for (int i = 0; i < 3; i++) ck_assert_double_eq(((double *)floe_tensor_data(out))[i], want[i]);
  floe_tensor_release(out);
  floe_session_free(s);
  floe_tensor_release(pt);
  floe_tensor_release(it);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* Cast f64 -> f32 passes the gradient back cast to f64 (exactly: f32 -> f64 is exact). */
START_TEST(cast_between_floats) {
  FloeGraph *g = floe_graph_new();
  const int64_t d3[1] = {3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(1, d3));
  FloeNodeBuilder *b = floe_node_begin(g, "Cast", "y");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "DstT", FLOE_F32);
  FloeOutput y = floe_out(floe_node_finish(b), 0);
  const float rv[3] = {0.1f, -3.5f, 7.25f};
  FloeTensor *rt32 = harness_f32(1, d3, rv);
  FloeOutput r = floe_const(g, "r", rt32), dx;
  ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, &r, &dx, NULL), FLOE_OK);
  ck_assert_int_eq(floe_node_output_dtype(dx.node, dx.index), FLOE_F64);
  FloeTensor *out;
  char buf[128];
  const char *fetch = out_name(dx, buf, sizeof buf);
  run_graph(g, NULL, NULL, &fetch, 1, &out);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(((double *)floe_tensor_data(out))[i], (double)rv[i]);
  floe_tensor_release(out);
  floe_tensor_release(rt32);
  floe_graph_free(g);
}
END_TEST

/* grad_ys = R gives the gradient of sum(y * R), which is built here explicitly too. */
START_TEST(grad_ys_weights_the_ys) {
  FloeGraph *g = floe_graph_new();
  const int64_t d23[2] = {2, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, d23));
  FloeOutput y = floe_unary(g, "Tanh", "y", floe_unary(g, "Sin", NULL, x));
  FloeOutput y2 = floe_unary(g, "Exp", "y2", x);
  FloeTensor *rv = harness_random(FLOE_F64, 2, d23, 17, -1, 1);
  FloeTensor *rv2 = harness_random(FLOE_F64, 2, d23, 18, -1, 1);
  FloeOutput r = floe_const(g, "r", rv), r2 = floe_const(g, "r2", rv2);
  FloeOutput ys[2] = {y, y2}, gys[2] = {r, r2}, dx_a, dx_b, dx_c;
  ck_assert_int_eq(floe_gradients(g, ys, 2, &x, 1, gys, &dx_a, NULL), FLOE_OK);
  FloeTensor *axes = harness_i32(1, (int64_t[]){2}, (int32_t[]){0, 1});
  FloeOutput ax = floe_const(g, "axes", axes);
  FloeOutput l =
      floe_binary(g, "Add", "l", floe_binary(g, "Sum", NULL, floe_binary(g, "Mul", NULL, y, r), ax),
                  floe_binary(g, "Sum", NULL, floe_binary(g, "Mul", NULL, y2, r2), ax));
  ck_assert_int_eq(floe_gradients(g, &l, 1, &x, 1, NULL, &dx_b, NULL), FLOE_OK);
  /* A NULL entry of grad_ys means ones. */
  FloeOutput gys_null[2] = {{NULL, 0}, {NULL, 0}};
  ck_assert_int_eq(floe_gradients(g, ys, 2, &x, 1, gys_null, &dx_c, NULL), FLOE_OK);
  FloeTensor *xv = harness_random(FLOE_F64, 2, d23, 19, -2, 2), *out[3];
  char b1[128], b2[128], b3[128];
  const char *fetches[3] = {out_name(dx_a, b1, sizeof b1), out_name(dx_b, b2, sizeof b2),
                            out_name(dx_c, b3, sizeof b3)};
  run_graph(g, "x", xv, fetches, 3, out);
  harness_assert_close(out[0], out[1], 1e-14, 1e-15, "grad_ys vs explicit sum");
  const double *xd = floe_tensor_data(xv), *rd = floe_tensor_data(rv), *r2d = floe_tensor_data(rv2);
  for (int i = 0; i < 6; i++) {
    double t = tanh(sin(xd[i])), want = (1 - t * t) * cos(xd[i]) * rd[i] + exp(xd[i]) * r2d[i];
    ck_assert_double_eq_tol(((double *)floe_tensor_data(out[0]))[i], want, 1e-12);
    double want1 = (1 - t * t) * cos(xd[i]) + exp(xd[i]);
    ck_assert_double_eq_tol(((double *)floe_tensor_data(out[2]))[i], want1, 1e-12);
  }
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_tensor_release(xv);
  floe_tensor_release(rv);
  floe_tensor_release(rv2);
  floe_tensor_release(axes);
  floe_graph_free(g);
}
END_TEST

/* An x that does not reach y gets an invalid output; the call still succeeds. */
START_TEST(unreachable_x_gives_invalid_output) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F64, floe_shape_scalar());
  FloeOutput b = floe_placeholder(g, "b", FLOE_F64, floe_shape_scalar());
  FloeOutput y = floe_unary(g, "Exp", "y", a);
  floe_unary(g, "Exp", "unused", b);
  FloeOutput xs[2] = {b, a}, dxs[2];
  ck_assert_int_eq(floe_gradients(g, &y, 1, xs, 2, NULL, dxs, NULL), FLOE_OK);
  ck_assert_ptr_null(dxs[0].node);
  ck_assert_ptr_nonnull(dxs[1].node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  floe_graph_free(g);
}
END_TEST

/* Gradients not asked for are not built: the data input of a first layer. */
START_TEST(unneeded_input_gradients_are_not_built) {
  FloeGraph *g = floe_graph_new();
  const int64_t dx_[2] = {4, 3}, dw[2] = {3, 2};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(2, dx_));
  FloeOutput w = floe_placeholder(g, "w", FLOE_F64, floe_shape_make(2, dw));
  FloeOutput y = floe_matmul(g, "y", x, w, 0, 0);
  FloeOutput dwo;
  ck_assert_int_eq(floe_gradients(g, &y, 1, &w, 1, NULL, &dwo, NULL), FLOE_OK);
  int matmuls = 0;
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    if (strncmp(floe_node_name(n), "gradients/", 10) == 0 && strcmp(floe_node_op(n), "MatMul") == 0)
      matmuls++;
  }
  ck_assert_int_eq(matmuls, 1);
  floe_graph_free(g);
}
END_TEST

/* An op without a gradient function on the path is an error naming the node and the op. */
START_TEST(op_without_gradient_is_an_error) {
  const char *ins[] = {"x: T"}, *outs[] = {"y: T"}, *attrs[] = {"T: type in {float}"};
  FloeOpDef def = {sizeof def, "GradTestNoGradient", ins, 1, outs, 1, attrs, 1, 0, NULL, NULL};
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe__op_register(&def, "test", st) == FLOE_OK, "%s", floe_status_message(st));
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_scalar());
  FloeOutput h = floe_unary(g, "GradTestNoGradient", "custom", floe_unary(g, "Exp", NULL, x));
  FloeOutput y = floe_unary(g, "Sin", "y", h), dx;
  ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, st), FLOE_UNIMPLEMENTED);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "'custom'") && strstr(msg, "GradTestNoGradient"), "%s", msg);
  ck_assert_ptr_null(dx.node);
  ck_assert_int_eq(floe_graph_status(g), FLOE_UNIMPLEMENTED);
  /* Off the paths from the xs (fed by another placeholder), the same op is harmless. */
  FloeGraph *g2 = floe_graph_new();
  x = floe_placeholder(g2, "x", FLOE_F64, floe_shape_scalar());
  FloeOutput other = floe_placeholder(g2, "other", FLOE_F64, floe_shape_scalar());
  h = floe_unary(g2, "GradTestNoGradient", "custom", other);
  y = floe_binary(g2, "Mul", "y", h, x);
  floe_status_clear(st);
  ck_assert_msg(floe_gradients(g2, &y, 1, &x, 1, NULL, &dx, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_ptr_nonnull(dx.node);
  floe_graph_free(g2);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* The pending ops fail autodiff with an error naming the node and the op. */
START_TEST(gradient_pending_ops_are_errors) {
  FloeStatus *st = floe_status_new();
  for (size_t i = 0; i < FLOE__ARRAY_LEN(gradient_pending); i++) {
    const char *op = gradient_pending[i];
    bool dft = strcmp(op, "DFT") == 0, stft = strcmp(op, "STFT") == 0;
    FloeGraph *g = floe_graph_new();
    int64_t dims[3] = {2, 4, dft ? 2 : stft ? 1 : 4}, w = 2;
    FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(3, dims)), y, dx;
    FloeTensor *extra[3] = {NULL, NULL, NULL};
    if (dft) extra[0] = floe_tensor_scalar_i64(4, NULL);
    if (stft) {
      extra[0] = floe_tensor_scalar_i64(1, NULL);
      extra[1] = floe_tensor_new(FLOE_F64, 1, &w, NULL);
      extra[2] = floe_tensor_scalar_i64(2, NULL);
    }
    FloeNodeBuilder *b = floe_node_begin(g, op, "pending");
    floe_node_add_input(b, x);
    for (int k = 0; k < 3 && extra[k]; k++) {
      floe_node_add_input(b, floe_const(g, NULL, extra[k]));
      floe_tensor_release(extra[k]);
    }
    y = floe_out(floe_node_finish(b), 0);
    ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", op, floe_graph_error(g, st));
    floe_status_clear(st);
    ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, st), FLOE_UNIMPLEMENTED);
    const char *msg = floe_status_message(st);
    ck_assert_msg(strstr(msg, "'pending'") && strstr(msg, op), "%s", msg);
    floe_graph_free(g);
  }
  floe_status_free(st);
}
END_TEST

/* The N-d MAX Pool's gradient (PoolGrad) has no gradient in its incoming gradient (it would
 * gather from each window's maximum): differentiating through it is an error naming it. */
START_TEST(pool_grad_max_second_derivative_is_an_error) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[4] = {1, 1, 4, 4};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(4, d));
  FloeNodeBuilder *b = floe_node_begin(g, "Pool", "pool");
  floe_node_add_input(b, x);
  floe_node_set_attr_string(b, "pooling_type", "MAX");
  floe_node_set_attr_string(b, "data_format", "CHANNELS_FIRST");
  floe_node_set_attr_int_list(b, "ksize", (int64_t[]){1, 1, 2, 2}, 4);
  FloeOutput y = floe_out(floe_node_finish(b), 0), dx, ddx;
  FloeOutput s = floe_unary(g, "Square", NULL, y);
  ck_assert_int_eq(floe_gradients(g, &s, 1, &x, 1, NULL, &dx, NULL), FLOE_OK);
  ck_assert_str_eq(floe_node_op(dx.node), "PoolGrad");
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_gradients(g, &dx, 1, &x, 1, NULL, &ddx, st), FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(st), floe_node_name(dx.node)) &&
                    strstr(floe_status_message(st), "MAX pooling"),
                "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* MaxPoolGrad has no gradient op: differentiating through it is an error naming it. */
START_TEST(maxpool_grad_second_derivative_is_an_error) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[4] = {1, 4, 4, 1};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(4, d));
  FloeNodeBuilder *b = floe_node_begin(g, "MaxPool", "pool");
  floe_node_add_input(b, x);
  floe_node_set_attr_int_list(b, "ksize", (int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_int_list(b, "strides", (int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_string(b, "padding", "VALID");
  FloeOutput y = floe_out(floe_node_finish(b), 0), dx, ddx;
  FloeOutput s = floe_unary(g, "Square", NULL, y);
  ck_assert_int_eq(floe_gradients(g, &s, 1, &x, 1, NULL, &dx, NULL), FLOE_OK);
  ck_assert_str_eq(floe_node_op(dx.node), "MaxPoolGrad");
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_gradients(g, &dx, 1, &x, 1, NULL, &ddx, st), FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(st), floe_node_name(dx.node)) &&
                    strstr(floe_status_message(st), "MaxPoolGrad"),
                "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* A gradient reaching the backprop output of the cross-entropy ops is an error. */
START_TEST(xent_backprop_output_gradient_is_an_error) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {2, 3};
  FloeOutput f = floe_placeholder(g, "f", FLOE_F64, floe_shape_make(2, d));
  FloeOutput l = floe_placeholder(g, "l", FLOE_F64, floe_shape_make(2, d));
  FloeNodeBuilder *b = floe_node_begin(g, "SoftmaxCrossEntropyWithLogits", "xent");
  floe_node_add_input(b, f);
  floe_node_add_input(b, l);
  FloeNode *xn = floe_node_finish(b);
  FloeOutput bp = floe_out(xn, 1), df;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_gradients(g, &bp, 1, &f, 1, NULL, &df, st), FLOE_UNIMPLEMENTED);
  ck_assert_msg(strstr(floe_status_message(st), "'xent'") &&
                    strstr(floe_status_message(st), "second derivative"),
                "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* Ops registered as not differentiable stop the gradient without an error. */
START_TEST(not_differentiable_ops_stop_gradients) {
  const char *ops[] = {"Floor", "Sign", "ZerosLike", "OnesLike", "StopGradient"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_scalar());
    FloeOutput y =
        floe_binary(g, "Add", "y", floe_unary(g, ops[i], NULL, x), floe_unary(g, "Neg", NULL, x));
    FloeOutput dx;
    ck_assert_int_eq(floe_gradients(g, &y, 1, &x, 1, NULL, &dx, NULL), FLOE_OK);
    ck_assert_str_eq(floe_node_op(dx.node), "Neg"); /* only the Neg path contributes */
    floe_graph_free(g);
  }
}
END_TEST

/* A small convolutional classifier: conv, relu, pool, reshape, matmul, bias, concat,
 * split, softmax cross-entropy, mean. Returns the loss; xs get the three weights. */
static FloeOutput small_model(FloeGraph *g, FloeOutput *xs) {
  const int64_t dx_[4] = {2, 4, 4, 3}, dw[4] = {3, 3, 3, 4}, dw2[2] = {16, 6}, db[1] = {6};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F64, floe_shape_make(4, dx_));
  xs[0] = floe_placeholder(g, "w", FLOE_F64, floe_shape_make(4, dw));
  xs[1] = floe_placeholder(g, "w2", FLOE_F64, floe_shape_make(2, dw2));
  xs[2] = floe_placeholder(g, "b", FLOE_F64, floe_shape_make(1, db));
  FloeNodeBuilder *b = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, xs[0]);
  floe_node_set_attr_int_list(b, "strides", (int64_t[]){1, 1, 1, 1}, 4);
  floe_node_set_attr_string(b, "padding", "SAME");
  FloeOutput h = floe_unary(g, "Relu", NULL, floe_out(floe_node_finish(b), 0));
  b = floe_node_begin(g, "MaxPool", "pool");
  floe_node_add_input(b, h);
  floe_node_set_attr_int_list(b, "ksize", (int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_int_list(b, "strides", (int64_t[]){1, 2, 2, 1}, 4);
  floe_node_set_attr_string(b, "padding", "VALID");
  h = floe_out(floe_node_finish(b), 0);
  FloeTensor *shape = harness_i32(1, (int64_t[]){2}, (int32_t[]){2, -1});
  h = floe_binary(g, "Reshape", NULL, h, floe_const(g, NULL, shape));
  floe_tensor_release(shape);
  h = floe_binary(g, "BiasAdd", NULL, floe_matmul(g, NULL, h, xs[1], 0, 0), xs[2]);
  FloeTensor *axis = floe_tensor_scalar_i32(1, NULL);
  FloeOutput ax = floe_const(g, NULL, axis);
  floe_tensor_release(axis);
  b = floe_node_begin(g, "Split", "split");
  floe_node_add_input(b, h);
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", 2);
  FloeNode *sp = floe_node_finish(b);
  b = floe_node_begin(g, "Concat", "concat");
  FloeOutput parts[2] = {floe_unary(g, "Tanh", NULL, floe_out(sp, 1)), floe_out(sp, 0)};
  floe_node_add_input_list(b, parts, 2);
  floe_node_add_input(b, ax);
  h = floe_out(floe_node_finish(b), 0);
  FloeTensor *labels = harness_i64(1, (int64_t[]){2}, (int64_t[]){1, 5});
  b = floe_node_begin(g, "SparseSoftmaxCrossEntropyWithLogits", "xent");
  floe_node_add_input(b, h);
  floe_node_add_input(b, floe_const(g, NULL, labels));
  floe_tensor_release(labels);
  FloeOutput loss = floe_out(floe_node_finish(b), 0);
  FloeTensor *a0 = floe_tensor_scalar_i32(0, NULL);
  loss = floe_binary(g, "Mean", "loss", loss, floe_const(g, NULL, a0));
  floe_tensor_release(a0);
  return loss;
}

/* Fault injection: with the Nth allocation failing, floe_gradients fails cleanly (a code,
 * the graph's sticky error, no crash; leaks show under check-valgrind), for every N until
 * it succeeds. */
START_TEST(allocation_failures_are_clean) {
  int n;
  for (n = 1; n < 20000; n++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput xs[3], dxs[3];
    FloeOutput loss = small_model(g, xs);
    ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
    FloeStatus st = {FLOE_OK, NULL};
    floe_test_fail_alloc_after(n);
    floe_code rc = floe_gradients(g, &loss, 1, xs, 3, NULL, dxs, &st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      for (int i = 0; i < 3; i++) ck_assert_ptr_nonnull(dxs[i].node);
      floe_status_clear(&st);
      floe_graph_free(g);
      break;
    }
    ck_assert_msg(rc == FLOE_NO_MEMORY, "N=%d: %s", n, floe_status_message(&st));
    ck_assert_int_eq(floe_graph_status(g), FLOE_NO_MEMORY);
    for (int i = 0; i < 3; i++) ck_assert_ptr_null(dxs[i].node);
    floe_status_clear(&st);
    floe_graph_free(g);
  }
  ck_assert_int_gt(n, 50); /* the walk did fail allocations on the way */
  ck_assert_int_lt(n, 20000);
}
END_TEST

/* The same model's gradients, checked by finite differences on the weights. */
START_TEST(small_model_finite_differences) {
  FloeGraph *g = floe_graph_new();
  FloeOutput xs[3], dxs[3];
  FloeOutput loss = small_model(g, xs);
  FloeSession *fwd = session_new(g, "model");
  ck_assert_int_eq(floe_gradients(g, &loss, 1, xs, 3, NULL, dxs, NULL), FLOE_OK);
  FloeSession *bwd = session_new(g, "model");
  const int64_t dx_[4] = {2, 4, 4, 3}, dw[4] = {3, 3, 3, 4}, dw2[2] = {16, 6}, db[1] = {6};
  FloeTensor *vals[4] = {harness_random(FLOE_F64, 4, dx_, 1, -1, 1),
                         harness_random(FLOE_F64, 4, dw, 2, -0.5, 0.5),
                         harness_random(FLOE_F64, 2, dw2, 3, -0.5, 0.5),
                         harness_random(FLOE_F64, 1, db, 4, -0.5, 0.5)};
  FloeFeed feeds[4] = {{"x", vals[0]}, {"w", vals[1]}, {"w2", vals[2]}, {"b", vals[3]}};
  char names[3][160];
  const char *fetches[3];
  for (int i = 0; i < 3; i++) fetches[i] = out_name(dxs[i], names[i], sizeof names[i]);
  FloeTensor *grads[3], *out;
  run(bwd, feeds, 4, fetches, 3, grads, "model");
  const char *lname = "loss";
  for (int i = 0; i < 3; i++) {
    double *v = floe_tensor_data(vals[i + 1]);
    const double *gv = floe_tensor_data(grads[i]);
    for (int64_t e = 0; e < floe_tensor_num_elements(vals[i + 1]); e += 7) {
      double keep = v[e], lp, lm;
      v[e] = keep + 1e-6;
      run(fwd, feeds, 4, &lname, 1, &out, "model");
      lp = *(double *)floe_tensor_data(out);
      floe_tensor_release(out);
      v[e] = keep - 1e-6;
      run(fwd, feeds, 4, &lname, 1, &out, "model");
      lm = *(double *)floe_tensor_data(out);
      floe_tensor_release(out);
      v[e] = keep;
      double fd = (lp - lm) / 2e-6;
      ck_assert_msg(fabs(gv[e] - fd) <= 1e-6 * fmax(1.0, fabs(fd)),
                    "weight %d [%lld]: %.12g vs %.12g", i, (long long)e, gv[e], fd);
    }
    floe_tensor_release(grads[i]);
  }
  for (int i = 0; i < 4; i++) floe_tensor_release(vals[i]);
  floe_session_free(bwd);
  floe_session_free(fwd);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gradients");
  TCase *tc = tcase_create("finite_differences");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, finite_differences, 0, NUM_CASES);
  tcase_add_loop_test(tc, f32_matches_f64, 0, NUM_CASES);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("coverage");
  tcase_add_test(tc, every_standard_op_is_checked_or_not_differentiable);
  suite_add_tcase(s, tc);
  tc = tcase_create("algorithm");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, paths_are_summed);
  tcase_add_test(tc, stop_gradient_blocks);
  tcase_add_test(tc, integer_inputs_get_no_gradient);
  tcase_add_test(tc, cast_between_floats);
  tcase_add_test(tc, grad_ys_weights_the_ys);
  tcase_add_test(tc, unreachable_x_gives_invalid_output);
  tcase_add_test(tc, unneeded_input_gradients_are_not_built);
  tcase_add_test(tc, op_without_gradient_is_an_error);
  tcase_add_test(tc, gradient_pending_ops_are_errors);
  tcase_add_test(tc, pool_grad_max_second_derivative_is_an_error);
  tcase_add_test(tc, maxpool_grad_second_derivative_is_an_error);
  tcase_add_test(tc, xent_backprop_output_gradient_is_an_error);
  tcase_add_test(tc, not_differentiable_ops_stop_gradients);
  tcase_add_test(tc, small_model_finite_differences);
  tcase_add_test(tc, allocation_failures_are_clean);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
