/* SPDX-License-Identifier: Apache-2.0 */
/* test_views.c - kernels fed views: inputs whose data starts inside a larger buffer, at an
 * offset that is not 64-byte and mostly not even 16-byte aligned.
 *
 * Split along a leading dim and Slice/StridedSlice of a contiguous block return views
 * (ctx_forward_input_slice, ABI 1.1), so every op downstream of them reads such inputs. Each
 * case builds a subgraph on every piece of a Split in one graph, then runs the same subgraph
 * on a fresh (aligned, offset 0) copy of each piece fed through a Placeholder, and compares;
 * the copies are cut from the input on the host, not by Floe. Also: the views really share
 * the input's buffer and keep it alive, and the core's slice views check their bounds. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "core.h"

/* ---------------------------------------------------------------------------------- */
/* Graph helpers. */

/* A Const holding t; the graph takes its own reference and t is released. */
static FloeOutput const_of(FloeGraph *g, FloeTensor *t) {
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput const_i32(FloeGraph *g, int rank, const int64_t *dims, const int32_t *v) {
  return const_of(g, harness_i32(rank, dims, v));
}

static FloeOutput scalar_i32(FloeGraph *g, int32_t v) { return const_i32(g, 0, NULL, &v); }

static FloeOutput vector_i32(FloeGraph *g, int n, const int32_t *v) {
  int64_t d = n;
  return const_i32(g, 1, &d, v);
}

/* Random constant of dtype dt (values in [-2, 2), or integers in [-9, 9)). */
static FloeOutput const_random(FloeGraph *g, FloeDType dt, int rank, const int64_t *dims,
                               uint64_t seed) {
  bool integral = !(FLOE_DTYPE_BIT(dt) & FLOE_DTYPES_FLOAT);
  return const_of(g, harness_random(dt, rank, dims, seed, integral ? -9 : -2, integral ? 9 : 2));
}

static FloeDType dtype_of(FloeOutput o) { return floe_node_output_dtype(o.node, o.index); }

static FloeNodeBuilder *begin(FloeGraph *g, const char *op, const FloeOutput *ins, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, op, NULL);
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  return b;
}

static FloeOutput finish(FloeNodeBuilder *b) { return floe_out(floe_node_finish(b), 0); }

static FloeOutput reshape(FloeGraph *g, FloeOutput x, int rank, const int32_t *dims) {
  FloeOutput ins[2] = {x, vector_i32(g, rank, dims)};
  return finish(begin(g, "Reshape", ins, 2));
}

static FloeNode *split(FloeGraph *g, FloeOutput x, int32_t axis, int n) {
  FloeOutput ins[2] = {x, scalar_i32(g, axis)};
  FloeNodeBuilder *b = begin(g, "Split", ins, 2);
  floe_node_set_attr_int(b, "num_split", n);
  return floe_node_finish(b);
}

/* Runs g (consumed) feeding `feeds`, fetching `outs`; the results land in res. */
static void run_graph(FloeGraph *g, const FloeFeed *feeds, int nfeeds, const FloeOutput *outs,
                      int nouts, FloeTensor **res, const char *what) {
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: building: %s", what,
                floe_graph_error(g, NULL));
  char names[16][96];
  const char *fetches[16];
  ck_assert_int_le(nouts, 16);
  for (int i = 0; i < nouts; i++) {
    snprintf(names[i], sizeof names[i], "%s:%d", floe_node_name(outs[i].node), outs[i].index);
    fetches[i] = names[i];
  }
  FloeSession *s = harness_session_opts(g, NULL, what);
  floe_graph_free(g);
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feeds, nfeeds, fetches, nouts, NULL, 0, res, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s (%s)", what, floe_code_name(rc), floe_status_message(st));
  floe_session_free(s);
  floe_status_free(st);
}

static void tol_for(FloeDType dt, double *rtol, double *atol) {
  switch (dt) {
    case FLOE_F64: *rtol = *atol = 1e-12; break;
    case FLOE_F32: *rtol = *atol = 1e-5; break;
    case FLOE_F16:
    case FLOE_BF16: *rtol = *atol = 4e-3; break;
    default: *rtol = *atol = 0; break; /* integers and bool: exact */
  }
}

/* ---------------------------------------------------------------------------------- */
/* The driver: a subgraph on views vs. the same subgraph on fresh copies. */

typedef FloeOutput (*BuildFn)(FloeGraph *g, const FloeOutput *in, const void *arg);

typedef struct Sub {
  const char *what;
  BuildFn build;
  const void *arg;
  int arity;      /* pieces read: piece i (1), or pieces i and i+1 (2) */
  uint32_t types; /* FLOE_DTYPE_BIT mask of the input dtypes it applies to */
} Sub;

/* Splits x along axis (every dim before it 1, so the pieces are blocks: views) into n
 * pieces, applies sub to each in one graph, and to a host-cut copy of each in another. */
static void check_sub(FloeTensor *x, int axis, int n, const Sub *sub) {
  FloeDType dt = floe_tensor_dtype(x);
  if (!(sub->types & FLOE_DTYPE_BIT(dt))) return;
  int rank = floe_tensor_rank(x);
  int64_t pdims[FLOE_MAX_DIMS];
  memcpy(pdims, floe_tensor_dims(x), (size_t)rank * sizeof *pdims);
  for (int i = 0; i < axis; i++) ck_assert_int_eq(pdims[i], 1);
  pdims[axis] /= n;
  size_t chunk = floe_tensor_nbytes(x) / (size_t)n;
  char what[160];

  FloeGraph *g = floe_graph_new();
  FloeOutput xin = floe_placeholder(g, "x", dt, floe_tensor_shape(x));
  FloeNode *sp = split(g, xin, axis, n);
  FloeOutput outs[16];
  for (int i = 0; i < n; i++) {
    FloeOutput in[2] = {floe_out(sp, i), floe_out(sp, (i + 1) % n)};
    outs[i] = sub->build(g, in, sub->arg);
  }
  FloeTensor *got[16];
  snprintf(what, sizeof what, "%s on %s views", sub->what, floe_dtype_name(dt));
  FloeFeed feed = {"x", x};
  run_graph(g, &feed, 1, outs, n, got, what);

  for (int i = 0; i < n; i++) {
    FloeTensor *p[2];
    FloeFeed feeds[2];
    static const char *const names[2] = {"p0", "p1"};
    FloeGraph *g2 = floe_graph_new();
    FloeOutput in[2];
    for (int k = 0; k < sub->arity; k++) {
      size_t at = (size_t)((i + k) % n) * chunk;
      p[k] = harness_tensor(dt, rank, pdims, (const char *)floe_tensor_data(x) + at);
      in[k] = floe_placeholder(g2, names[k], dt, floe_tensor_shape(p[k]));
      feeds[k] = (FloeFeed){names[k], p[k]};
    }
    FloeOutput out = sub->build(g2, in, sub->arg);
    FloeTensor *want;
    snprintf(what, sizeof what, "%s on a %s copy of piece %d", sub->what, floe_dtype_name(dt),
             i);
    run_graph(g2, feeds, sub->arity, &out, 1, &want, what);
    double rtol, atol;
    tol_for(floe_tensor_dtype(want), &rtol, &atol);
    snprintf(what, sizeof what, "%s on %s piece %d (byte offset %zu)", sub->what,
             floe_dtype_name(dt), i, (size_t)i * chunk);
    harness_assert_close(got[i], want, rtol, atol, what);
    floe_tensor_release(want);
    for (int k = 0; k < sub->arity; k++) floe_tensor_release(p[k]);
    floe_tensor_release(got[i]);
  }
}

static void check_subs(FloeTensor *x, int axis, int n, const Sub *subs, size_t nsubs) {
  for (size_t i = 0; i < nsubs; i++) check_sub(x, axis, n, &subs[i]);
}

/* ---------------------------------------------------------------------------------- */
/* Subgraph builders. arg is usually the op name. */

static FloeOutput b_unary(FloeGraph *g, const FloeOutput *in, const void *op) {
  return floe_unary(g, op, NULL, in[0]);
}

static FloeOutput b_binary(FloeGraph *g, const FloeOutput *in, const void *op) {
  return floe_binary(g, op, NULL, in[0], in[1]);
}

/* op(view [1,C], const [3,1]) and op(const [3,1], that): broadcasting both ways. */
static FloeOutput b_bcast(FloeGraph *g, const FloeOutput *in, const void *op) {
  int64_t d[2] = {3, 1};
  FloeOutput c = const_random(g, dtype_of(in[0]), 2, d, 7);
  FloeOutput y = floe_binary(g, op, NULL, in[0], c);
  return floe_binary(g, op, NULL, c, y);
}

static FloeOutput b_cast(FloeGraph *g, const FloeOutput *in, const void *to) {
  FloeNodeBuilder *b = begin(g, "Cast", in, 1);
  floe_node_set_attr_type(b, "DstT", *(const FloeDType *)to);
  return finish(b);
}

typedef struct Reduce {
  const char *op;
  int naxes;
  int32_t axes[2];
  int keep_dims;
} Reduce;

static FloeOutput b_reduce(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const Reduce *r = arg;
  FloeOutput ins[2] = {in[0], r->naxes == 1 ? scalar_i32(g, r->axes[0])
                                            : vector_i32(g, r->naxes, r->axes)};
  FloeNodeBuilder *b = begin(g, r->op, ins, 2);
  if (r->keep_dims) floe_node_set_attr_bool(b, "keep_dims", 1);
  return finish(b);
}

/* BiasAdd(view [1,C], the next view flattened to [C]). */
static FloeOutput b_bias_add(FloeGraph *g, const FloeOutput *in, const void *arg) {
  int32_t flat[1] = {-1};
  FloeOutput ins[2] = {in[0], reshape(g, in[1], 1, flat)};
  return finish(begin(g, "BiasAdd", ins, 2));
}

static FloeOutput b_xent(FloeGraph *g, const FloeOutput *in, const void *arg) {
  FloeOutput ins[2] = {in[0], floe_unary(g, "Softmax", NULL, in[1])};
  FloeNode *n = floe_node_finish(begin(g, "SoftmaxCrossEntropyWithLogits", ins, 2));
  return floe_binary(g, "Add", NULL, floe_out(n, 1), floe_out(n, 0)); /* backprop + loss */
}

/* Matrices cut from pieces of m*k elements. */
typedef struct Mat {
  int32_t m, k, n;
} Mat;

/* Views as [m,k] matrices on either side of MatMul, against consts and each other
 * (a = view_i, b = view_{i+1}): ((a b^T)(a C1))(C2 a) + a. */
static FloeOutput b_matmul(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const Mat *mt = arg;
  int32_t ak[2] = {mt->m, mt->k};
  FloeOutput a = reshape(g, in[0], 2, ak), b2 = reshape(g, in[1], 2, ak);
  FloeDType dt = dtype_of(in[0]);
  int64_t kn[2] = {mt->k, mt->n}, nm[2] = {mt->n, mt->m};
  FloeOutput p = floe_matmul(g, NULL, a, const_random(g, dt, 2, kn, 11), 0, 0);   /* [m,n] */
  FloeOutput q = floe_matmul(g, NULL, const_random(g, dt, 2, nm, 12), a, 0, 0);   /* [n,k] */
  FloeOutput r = floe_matmul(g, NULL, a, b2, 0, 1);                               /* [m,m] */
  FloeOutput s = floe_matmul(g, NULL, r, p, 0, 0);                                /* [m,n] */
  FloeOutput t = floe_matmul(g, NULL, s, q, 0, 0);                                /* [m,k] */
  return floe_binary(g, "Add", NULL, t, a);
}

/* BatchMatMul of two views ([2,2,5] x [2,5,2]) and of a view with a broadcast const. */
static FloeOutput b_batch_matmul(FloeGraph *g, const FloeOutput *in, const void *arg) {
  int32_t xd[3] = {2, 2, 5}, yd[3] = {2, 5, 2};
  FloeOutput x = reshape(g, in[0], 3, xd), y = reshape(g, in[1], 3, yd);
  FloeOutput ins[2] = {x, y};
  FloeOutput xy = finish(begin(g, "BatchMatMul", ins, 2)); /* [2,2,2] */
  int64_t cd[2] = {2, 3};
  FloeOutput ins2[2] = {xy, const_random(g, dtype_of(in[0]), 2, cd, 13)};
  FloeOutput z = finish(begin(g, "BatchMatMul", ins2, 2)); /* [2,2,3] */
  FloeOutput ins3[2] = {x, z};
  FloeNodeBuilder *b = begin(g, "BatchMatMul", ins3, 2);
  floe_node_set_attr_bool(b, "adj_x", 1);
  return finish(b); /* [2,5,3] */
}

typedef struct Window {
  const char *op;
  int64_t ksize[4], strides[4];
  const char *padding;
} Window;

/* Conv2D (filter HWIO [kh,kw,C,4]) or a pool over an NHWC view. */
static FloeOutput b_window(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const Window *w = arg;
  FloeOutput ins[2] = {in[0]};
  int n = 1;
  if (strcmp(w->op, "Conv2D") == 0) {
    FloeShape s = floe_node_output_shape(in[0].node, in[0].index);
    int64_t fd[4] = {w->ksize[1], w->ksize[2], s.dims[3], 4};
    ins[n++] = const_random(g, dtype_of(in[0]), 4, fd, 21);
  }
  FloeNodeBuilder *b = begin(g, w->op, ins, n);
  if (n == 1) floe_node_set_attr_int_list(b, "ksize", w->ksize, 4);
  floe_node_set_attr_int_list(b, "strides", w->strides, 4);
  floe_node_set_attr_string(b, "padding", w->padding);
  return finish(b);
}

/* Conv2D whose filter [3,3,3,4] is a view (a piece of 108 elements) and input a const. */
static FloeOutput b_conv_filter_view(FloeGraph *g, const FloeOutput *in, const void *arg) {
  int32_t fd[4] = {3, 3, 3, 4};
  int64_t xd[4] = {2, 6, 5, 3};
  FloeOutput ins[2] = {const_random(g, dtype_of(in[0]), 4, xd, 22), reshape(g, in[0], 4, fd)};
  FloeNodeBuilder *b = begin(g, "Conv2D", ins, 2);
  static const int64_t strides[4] = {1, 1, 1, 1};
  floe_node_set_attr_int_list(b, "strides", strides, 4);
  floe_node_set_attr_string(b, "padding", "SAME");
  return finish(b);
}

static FloeOutput b_transpose(FloeGraph *g, const FloeOutput *in, const void *perm) {
  FloeOutput ins[2] = {in[0], vector_i32(g, 3, perm)};
  return finish(begin(g, "Transpose", ins, 2));
}

static FloeOutput b_concat(FloeGraph *g, const FloeOutput *in, const void *axis) {
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", NULL);
  FloeOutput vals[3] = {in[0], in[1], in[0]};
  floe_node_add_input_list(b, vals, 3);
  floe_node_add_input(b, scalar_i32(g, *(const int32_t *)axis));
  return finish(b);
}

typedef struct GatherArg {
  int axis, n;
  int32_t idx[4];
} GatherArg;

static FloeOutput b_gather(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const GatherArg *ga = arg;
  FloeOutput ins[2] = {in[0], vector_i32(g, ga->n, ga->idx)};
  FloeNodeBuilder *b = begin(g, "Gather", ins, 2);
  floe_node_set_attr_int(b, "axis", ga->axis);
  return finish(b);
}

typedef struct PadArg {
  const char *mode;
  int32_t pads[6];
} PadArg;

static FloeOutput b_pad(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const PadArg *pa = arg;
  int64_t d[2] = {3, 2};
  FloeOutput ins[2] = {in[0], const_i32(g, 2, d, pa->pads)};
  FloeNodeBuilder *b = begin(g, "Pad", ins, 2);
  floe_node_set_attr_string(b, "mode", pa->mode);
  floe_node_set_attr_float(b, "constant_value", 0.5);
  return finish(b);
}

static FloeOutput b_tile(FloeGraph *g, const FloeOutput *in, const void *arg) {
  static const int32_t mult[3] = {2, 1, 3};
  FloeOutput ins[2] = {in[0], vector_i32(g, 3, mult)};
  return finish(begin(g, "Tile", ins, 2));
}

/* Slice of a view: begin/size over [1,R,C]; then Square, so a view of a view is computed. */
typedef struct SliceArg {
  int32_t begin[3], size[3];
} SliceArg;

static FloeOutput b_slice_square(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const SliceArg *sa = arg;
  FloeOutput ins[3] = {in[0], vector_i32(g, 3, sa->begin), vector_i32(g, 3, sa->size)};
  return floe_unary(g, "Square", NULL, finish(begin(g, "Slice", ins, 3)));
}

/* StridedSlice [0, 1:3, ::step] of a [1,R,C] view (dim 0 shrunk), then Neg. */
static FloeOutput b_strided_neg(FloeGraph *g, const FloeOutput *in, const void *step) {
  int32_t b[3] = {0, 1, 0}, e[3] = {1, 3, 0}, s[3] = {1, 1, *(const int32_t *)step};
  FloeOutput ins[4] = {in[0], vector_i32(g, 3, b), vector_i32(g, 3, e), vector_i32(g, 3, s)};
  FloeNodeBuilder *bl = begin(g, "StridedSlice", ins, 4);
  floe_node_set_attr_int(bl, "shrink_axis_mask", 1);
  floe_node_set_attr_int(bl, "end_mask", 4);
  return floe_unary(g, "Neg", NULL, finish(bl));
}

/* Split of a view into n (axis, n), then first piece - last piece. Along axis 1 of a
 * [1,R,C] view the pieces are views of a view; along axis 2, copies from an offset input. */
static FloeOutput b_split_sub(FloeGraph *g, const FloeOutput *in, const void *arg) {
  const int32_t *an = arg;
  FloeNode *s = split(g, in[0], an[0], an[1]);
  return floe_binary(g, "Sub", NULL, floe_out(s, 0), floe_out(s, an[1] - 1));
}

/* ---------------------------------------------------------------------------------- */
/* Case tables. */

#define F FLOE_DTYPES_FLOAT
#define NUM FLOE_DTYPES_NUMERIC
#define ALL FLOE_DTYPES_ALL

static const FloeDType to_f32 = FLOE_F32, to_f64 = FLOE_F64, to_f16 = FLOE_F16,
                       to_i32 = FLOE_I32, to_bf16 = FLOE_BF16;
static const Reduce r_sum1 = {"Sum", 1, {1}, 0}, r_sum0 = {"Sum", 1, {0}, 1},
                    r_sum_all = {"Sum", 2, {0, 1}, 0}, r_mean = {"Mean", 1, {-1}, 1},
                    r_max = {"Max", 1, {1}, 0}, r_min = {"Min", 1, {1}, 0},
                    r_prod = {"Prod", 1, {1}, 0}, r_argmax = {"ArgMax", 1, {1}, 0},
                    r_argmin = {"ArgMin", 1, {1}, 0};

/* Ops on [1,C] row views. */
static const Sub row_subs[] = {
    {"Add", b_binary, "Add", 2, NUM},
    {"Sub", b_binary, "Sub", 2, NUM},
    {"Mul", b_binary, "Mul", 2, NUM},
    {"Div", b_binary, "Div", 2, F},
    {"Maximum", b_binary, "Maximum", 2, NUM},
    {"Minimum", b_binary, "Minimum", 2, NUM},
    {"Greater", b_binary, "Greater", 2, NUM},
    {"Add broadcast", b_bcast, "Add", 1, NUM},
    {"Mul broadcast", b_bcast, "Mul", 1, NUM},
    {"Neg", b_unary, "Neg", 1, NUM},
    {"Abs", b_unary, "Abs", 1, NUM},
    {"Square", b_unary, "Square", 1, NUM},
    {"Relu", b_unary, "Relu", 1, NUM},
    {"Exp", b_unary, "Exp", 1, F},
    {"Tanh", b_unary, "Tanh", 1, F},
    {"Sigmoid", b_unary, "Sigmoid", 1, F},
    {"Gelu", b_unary, "Gelu", 1, F},
    {"Softplus", b_unary, "Softplus", 1, F},
    {"LeakyRelu", b_unary, "LeakyRelu", 1, F},
    {"Cast to f32", b_cast, &to_f32, 1, ALL},
    {"Cast to f64", b_cast, &to_f64, 1, ALL},
    {"Cast to f16", b_cast, &to_f16, 1, ALL},
    {"Cast to bf16", b_cast, &to_bf16, 1, ALL},
    {"Cast to i32", b_cast, &to_i32, 1, ALL},
    {"Sum axis 1", b_reduce, &r_sum1, 1, NUM},
    {"Sum axis 0 keep_dims", b_reduce, &r_sum0, 1, NUM},
    {"Sum all", b_reduce, &r_sum_all, 1, NUM},
    {"Mean", b_reduce, &r_mean, 1, F},
    {"Max", b_reduce, &r_max, 1, NUM},
    {"Min", b_reduce, &r_min, 1, NUM},
    {"Prod", b_reduce, &r_prod, 1, NUM},
    {"ArgMax", b_reduce, &r_argmax, 1, NUM},
    {"ArgMin", b_reduce, &r_argmin, 1, NUM},
    {"Softmax", b_unary, "Softmax", 1, F},
    {"LogSoftmax", b_unary, "LogSoftmax", 1, F},
    {"BiasAdd", b_bias_add, NULL, 2, F},
    {"SoftmaxCrossEntropyWithLogits", b_xent, NULL, 2, F},
};

static const int32_t perm_021[3] = {0, 2, 1}, perm_210[3] = {2, 1, 0};
static const int32_t axis0 = 0, axis1 = 1, axis2 = 2, step1 = 1, step2 = 2;
static const int32_t split_rows[2] = {1, 3}, split_cols[2] = {2, 5};
static const GatherArg gather1 = {1, 4, {2, 0, 1, 2}}, gather2 = {2, 3, {4, 0, 3}};
static const PadArg pad_const = {"CONSTANT", {1, 0, 0, 2, 2, 1}},
                    pad_reflect = {"REFLECT", {0, 0, 1, 2, 2, 1}};
static const SliceArg slice_rows = {{0, 1, 0}, {1, 2, 5}}, slice_box = {{0, 1, 1}, {1, 2, 3}};

/* Data-movement ops on [1,3,5] views. */
static const Sub block_subs[] = {
    {"Transpose 0,2,1", b_transpose, perm_021, 1, ALL},
    {"Transpose 2,1,0", b_transpose, perm_210, 1, ALL},
    {"Concat axis 0", b_concat, &axis0, 2, ALL},
    {"Concat axis 1", b_concat, &axis1, 2, ALL},
    {"Concat axis 2", b_concat, &axis2, 2, ALL},
    {"Gather axis 1", b_gather, &gather1, 1, ALL},
    {"Gather axis 2", b_gather, &gather2, 1, ALL},
    {"Pad CONSTANT", b_pad, &pad_const, 1, ALL},
    {"Pad REFLECT", b_pad, &pad_reflect, 1, ALL},
    {"Tile", b_tile, NULL, 1, ALL},
    {"Slice rows (a view) + Square", b_slice_square, &slice_rows, 1, NUM},
    {"Slice box (a copy) + Square", b_slice_square, &slice_box, 1, NUM},
    {"StridedSlice (a view) + Neg", b_strided_neg, &step1, 1, NUM},
    {"StridedSlice step 2 + Neg", b_strided_neg, &step2, 1, NUM},
    {"Split axis 1 of a view + Sub", b_split_sub, split_rows, 1, NUM},
    {"Split axis 2 of a view + Sub", b_split_sub, split_cols, 1, NUM},
    {"Softmax", b_unary, "Softmax", 1, F},
    {"Sum axis 1", b_reduce, &r_sum1, 1, NUM},
};

static const Mat mat_small = {4, 5, 3}, mat_large = {64, 65, 33};
static const Window conv_same = {"Conv2D", {1, 3, 3, 1}, {1, 1, 1, 1}, "SAME"},
                    conv_valid = {"Conv2D", {1, 2, 3, 1}, {1, 2, 1, 1}, "VALID"},
                    maxpool = {"MaxPool", {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"},
                    maxpool_same = {"MaxPool", {1, 3, 3, 1}, {1, 1, 1, 1}, "SAME"},
                    avgpool = {"AvgPool", {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"};

static const Sub image_subs[] = {
    {"Conv2D SAME", b_window, &conv_same, 1, F},
    {"Conv2D VALID stride 2", b_window, &conv_valid, 1, F},
    {"MaxPool VALID", b_window, &maxpool, 1, F},
    {"MaxPool SAME", b_window, &maxpool_same, 1, F},
    {"AvgPool SAME", b_window, &avgpool, 1, F},
};

/* Ops on long rows (the kernels' vectorised and multi-threaded paths). */
static const Sub long_subs[] = {
    {"Add", b_binary, "Add", 2, NUM},
    {"Mul", b_binary, "Mul", 2, NUM},
    {"Maximum", b_binary, "Maximum", 2, NUM},
    {"Neg", b_unary, "Neg", 1, NUM},
    {"Exp", b_unary, "Exp", 1, F},
    {"Tanh", b_unary, "Tanh", 1, F},
    {"Sigmoid", b_unary, "Sigmoid", 1, F},
    {"Relu", b_unary, "Relu", 1, NUM},
    {"Cast to f32", b_cast, &to_f32, 1, ALL},
    {"Cast to f16", b_cast, &to_f16, 1, ALL},
    {"Cast to f64", b_cast, &to_f64, 1, ALL},
    {"Sum axis 1", b_reduce, &r_sum1, 1, NUM},
    {"Max", b_reduce, &r_max, 1, NUM},
    {"ArgMax", b_reduce, &r_argmax, 1, NUM},
    {"Mean", b_reduce, &r_mean, 1, F},
    {"Softmax", b_unary, "Softmax", 1, F},
    {"LogSoftmax", b_unary, "LogSoftmax", 1, F},
    {"Concat axis 1", b_concat, &axis1, 2, ALL},
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Random input: floats in [-2, 2), integers in [-9, 9). */
static FloeTensor *input(FloeDType dt, int rank, const int64_t *dims, uint64_t seed) {
  bool integral = !(FLOE_DTYPE_BIT(dt) & FLOE_DTYPES_FLOAT);
  return harness_random(dt, rank, dims, seed, integral ? -9 : -2, integral ? 9 : 2);
}

/* ---------------------------------------------------------------------------------- */
/* Row views: Split of [7,5] (f32/i32 rows at 20-byte steps, f16 at 10, f64 at 40). */

static const FloeDType row_dtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I32,
                                       FLOE_I64, FLOE_I8};

START_TEST(row_views_elementwise_reduce_softmax) {
  FloeDType dt = row_dtypes[_i];
  int64_t d[2] = {7, 5};
  FloeTensor *x = input(dt, 2, d, 100 + (uint64_t)_i);
  check_subs(x, 0, 7, row_subs, N_OF(row_subs));
  floe_tensor_release(x);
}
END_TEST

/* [1,9,5] split along axis 1 (the dim before it is 1): pieces [1,3,5], still blocks. */
START_TEST(split_after_unit_dims_gives_views) {
  int64_t d[3] = {1, 9, 5};
  FloeTensor *x = input(FLOE_F32, 3, d, 7);
  check_subs(x, 1, 3, block_subs, N_OF(block_subs));
  floe_tensor_release(x);
}
END_TEST

/* Blocks: Split of [7,3,5] (f32 blocks at 60-byte steps: 12, 8, 4 mod 16). */
START_TEST(block_views_data_movement) {
  FloeDType dt = row_dtypes[_i];
  int64_t d[3] = {7, 3, 5};
  FloeTensor *x = input(dt, 3, d, 200 + (uint64_t)_i);
  check_subs(x, 0, 7, block_subs, N_OF(block_subs));
  floe_tensor_release(x);
}
END_TEST

START_TEST(bool_views) {
  int64_t d[3] = {7, 3, 5};
  FloeTensor *x = harness_random(FLOE_BOOL, 3, d, 5, 0, 1);
  check_subs(x, 0, 7, block_subs, N_OF(block_subs));
  Sub logic[] = {{"LogicalAnd", b_binary, "LogicalAnd", 2, ALL},
                 {"LogicalNot", b_unary, "LogicalNot", 1, ALL},
                 {"Cast to f32", b_cast, &to_f32, 1, ALL}};
  check_subs(x, 0, 7, logic, N_OF(logic));
  floe_tensor_release(x);
}
END_TEST

START_TEST(matmul_of_reshaped_views) {
  static const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  int64_t d[2] = {7, 20};
  FloeTensor *x = input(dts[_i], 2, d, 300 + (uint64_t)_i);
  Sub s[] = {{"MatMul", b_matmul, &mat_small, 2, F},
             {"BatchMatMul", b_batch_matmul, NULL, 2, F}};
  check_subs(x, 0, 7, s, N_OF(s));
  floe_tensor_release(x);
}
END_TEST

START_TEST(matmul_of_large_views) {
  int64_t d[2] = {3, 64 * 65};
  FloeTensor *x = input(FLOE_F32, 2, d, 301);
  Sub s = {"MatMul 64x65", b_matmul, &mat_large, 2, F};
  check_sub(x, 0, 3, &s);
  floe_tensor_release(x);
}
END_TEST

/* NHWC [3,5,5,3] split along the batch: images at 300-byte steps (f32). */
START_TEST(conv_and_pool_of_batch_views) {
  static const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16};
  int64_t d[4] = {3, 5, 5, 3};
  FloeTensor *x = input(dts[_i], 4, d, 400 + (uint64_t)_i);
  check_subs(x, 0, 3, image_subs, N_OF(image_subs));
  floe_tensor_release(x);
  int64_t fd[2] = {3, 108};
  FloeTensor *f = input(dts[_i], 2, fd, 410 + (uint64_t)_i);
  Sub s = {"Conv2D with a view as filter", b_conv_filter_view, NULL, 1, F};
  check_sub(f, 0, 3, &s);
  floe_tensor_release(f);
}
END_TEST

/* Rows of 40001 elements: f32 rows start 160004 bytes apart (4 mod 16), f16 80002 (2 mod
 * 16), f64 320008 (8 mod 16). */
START_TEST(long_row_views) {
  static const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_I32};
  int64_t d[2] = {3, 40001};
  FloeTensor *x = input(dts[_i], 2, d, 500 + (uint64_t)_i);
  check_subs(x, 0, 3, long_subs, N_OF(long_subs));
  floe_tensor_release(x);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The views are zero-copy and keep their buffer alive. */

/* Runs op (built by fn on placeholder "x") with x fed; returns the fetched outputs. */
typedef struct Fetched {
  FloeTensor *t[8];
  int n;
} Fetched;

static Fetched run_fed(FloeTensor *x, FloeNode *(*fn)(FloeGraph *, FloeOutput, const void *),
                       const void *arg, int nout) {
  FloeGraph *g = floe_graph_new();
  FloeOutput xin = floe_placeholder(g, "x", floe_tensor_dtype(x), floe_tensor_shape(x));
  FloeNode *n = fn(g, xin, arg);
  FloeOutput outs[8];
  for (int i = 0; i < nout; i++) outs[i] = floe_out(n, i);
  Fetched f = {.n = nout};
  FloeFeed feed = {"x", x};
  run_graph(g, &feed, 1, outs, nout, f.t, floe_node_op(n));
  return f;
}

static void release_all(Fetched *f) {
  for (int i = 0; i < f->n; i++) floe_tensor_release(f->t[i]);
}

static FloeNode *n_split(FloeGraph *g, FloeOutput x, const void *arg) {
  const int32_t *an = arg; /* axis, num_split */
  return split(g, x, an[0], an[1]);
}

static FloeNode *n_slice(FloeGraph *g, FloeOutput x, const void *arg) {
  const int32_t *bs = arg; /* begin[2], size[2] */
  FloeOutput ins[3] = {x, vector_i32(g, 2, bs), vector_i32(g, 2, bs + 2)};
  return floe_node_finish(begin(g, "Slice", ins, 3));
}

static FloeNode *n_strided(FloeGraph *g, FloeOutput x, const void *arg) {
  const int32_t *v = arg; /* begin[2], end[2], strides[2], shrink mask */
  FloeOutput ins[4] = {x, vector_i32(g, 2, v), vector_i32(g, 2, v + 2), vector_i32(g, 2, v + 4)};
  FloeNodeBuilder *b = begin(g, "StridedSlice", ins, 4);
  floe_node_set_attr_int(b, "shrink_axis_mask", v[6]);
  return floe_node_finish(b);
}

/* Element (r, c) of the [7,5] f32 input used below. */
static float x75(int64_t r, int64_t c) { return (float)(r * 10 + c) + 0.25f; }

static FloeTensor *make_x75(void) {
  float v[35];
  for (int r = 0; r < 7; r++)
    for (int c = 0; c < 5; c++) v[r * 5 + c] = x75(r, c);
  int64_t d[2] = {7, 5};
  return harness_f32(2, d, v);
}

/* True when out's data lies inside x's data. */
static bool inside(const FloeTensor *out, const FloeTensor *x) {
  const char *o = floe_tensor_data(out), *b = floe_tensor_data(x);
  return o >= b && o < b + floe_tensor_nbytes(x);
}

START_TEST(split_outputs_point_into_the_input) {
  FloeTensor *x = make_x75();
  const char *base = floe_tensor_data(x);
  int32_t an[2] = {0, 7};
  Fetched f = run_fed(x, n_split, an, 7);
  for (int i = 0; i < 7; i++) {
    ck_assert_ptr_eq(floe_tensor_data(f.t[i]), base + 20 * i);
    ck_assert_int_eq(floe_tensor_rank(f.t[i]), 2);
    ck_assert_int_eq(floe_tensor_dim(f.t[i], 0), 1);
    ck_assert_int_eq(floe_tensor_dim(f.t[i], 1), 5);
  }
  /* The views hold the buffer: the values survive the input's release (valgrind checks). */
  floe_tensor_release(x);
  for (int i = 0; i < 7; i++)
    for (int c = 0; c < 5; c++)
      ck_assert_float_eq(((const float *)floe_tensor_data(f.t[i]))[c], x75(i, c));
  release_all(&f);
}
END_TEST

START_TEST(split_after_unit_dims_points_into_the_input) {
  int64_t d[3] = {1, 6, 5};
  FloeTensor *x = input(FLOE_F32, 3, d, 9);
  const char *base = floe_tensor_data(x);
  int32_t an[2] = {1, 3};
  Fetched f = run_fed(x, n_split, an, 3);
  for (int i = 0; i < 3; i++) {
    ck_assert_ptr_eq(floe_tensor_data(f.t[i]), base + 40 * i);
    for (int k = 0; k < 10; k++)
      ck_assert_float_eq(((const float *)floe_tensor_data(f.t[i]))[k],
                         ((const float *)floe_tensor_data(x))[10 * i + k]);
  }
  release_all(&f);
  /* Along axis 2 each piece is strided: copies, outside the input. */
  int32_t an2[2] = {2, 5};
  f = run_fed(x, n_split, an2, 5);
  for (int i = 0; i < 5; i++) {
    ck_assert(!inside(f.t[i], x));
    for (int k = 0; k < 6; k++)
      ck_assert_float_eq(((const float *)floe_tensor_data(f.t[i]))[k],
                         ((const float *)floe_tensor_data(x))[5 * k + i]);
  }
  release_all(&f);
  floe_tensor_release(x);
}
END_TEST

START_TEST(contiguous_slices_point_into_the_input) {
  FloeTensor *x = make_x75();
  const char *base = floe_tensor_data(x);
  /* begin, size; expected element offset of the view, or -1 for a copy. */
  static const struct {
    int32_t bs[4];
    int64_t first;
  } cases[] = {
      {{2, 0, 3, 5}, 10}, {{3, 1, 1, 3}, 16}, {{6, 4, 1, 1}, 34},
      {{0, 0, 7, 4}, -1}, {{1, 1, 2, 3}, -1},
  };
  for (size_t k = 0; k < N_OF(cases); k++) {
    const int32_t *bs = cases[k].bs;
    Fetched f = run_fed(x, n_slice, bs, 1);
    if (cases[k].first >= 0)
      ck_assert_ptr_eq(floe_tensor_data(f.t[0]), base + 4 * cases[k].first);
    else
      ck_assert(!inside(f.t[0], x));
    const float *got = floe_tensor_data(f.t[0]);
    for (int r = 0; r < bs[2]; r++)
      for (int c = 0; c < bs[3]; c++)
        ck_assert_float_eq(got[r * bs[3] + c], x75(bs[0] + r, bs[1] + c));
    release_all(&f);
  }
  floe_tensor_release(x);
}
END_TEST

START_TEST(contiguous_strided_slices_point_into_the_input) {
  FloeTensor *x = make_x75();
  const char *base = floe_tensor_data(x);
  /* x[4] (shrunk: shape [5]) is a view of row 4; x[2:5] a view of rows 2..4; x[1:3, ::2] a
   * copy. */
  int32_t row4[7] = {4, 0, 5, 5, 1, 1, 1}, rows[7] = {2, 0, 5, 5, 1, 1, 0},
          step[7] = {1, 0, 3, 5, 1, 2, 0};
  Fetched f = run_fed(x, n_strided, row4, 1);
  ck_assert_ptr_eq(floe_tensor_data(f.t[0]), base + 4 * 20);
  ck_assert_int_eq(floe_tensor_rank(f.t[0]), 1);
  for (int c = 0; c < 5; c++)
    ck_assert_float_eq(((const float *)floe_tensor_data(f.t[0]))[c], x75(4, c));
  release_all(&f);
  f = run_fed(x, n_strided, rows, 1);
  ck_assert_ptr_eq(floe_tensor_data(f.t[0]), base + 4 * 10);
  ck_assert_int_eq(floe_tensor_dim(f.t[0], 0), 3);
  release_all(&f);
  f = run_fed(x, n_strided, step, 1);
  ck_assert(!inside(f.t[0], x));
  ck_assert_int_eq(floe_tensor_dim(f.t[0], 1), 3);
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++)
      ck_assert_float_eq(((const float *)floe_tensor_data(f.t[0]))[r * 3 + c],
                         x75(1 + r, 2 * c));
  release_all(&f);
  floe_tensor_release(x);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The core's slice views and the host slot check their bounds. */

static void assert_msg_has(const FloeStatus *st, const char *part) {
  ck_assert_msg(strstr(floe_status_message(st), part) != NULL, "\"%s\" does not contain \"%s\"",
                floe_status_message(st), part);
}

START_TEST(tensor_slice_view_bounds) {
  FloeStatus *st = floe_status_new();
  int64_t d[2] = {4, 6};
  FloeTensor *src = input(FLOE_F32, 2, d, 1);
  const float *s = floe_tensor_data(src);
  float later = s[8];
  int64_t three = 3, two[2] = {1, 2}, zero = 0, neg = -1;
  FloeTensor *v = floe__tensor_slice_view(src, 28, 1, &three, st);
  ck_assert_ptr_nonnull(v);
  ck_assert_ptr_eq(floe_tensor_data(v), (const char *)s + 28);
  FloeTensor *vv = floe__tensor_slice_view(v, 4, 2, two, st); /* offsets add up */
  ck_assert_ptr_nonnull(vv);
  ck_assert_ptr_eq(floe_tensor_data(vv), (const char *)s + 32);
  ck_assert_ptr_null(floe__tensor_slice_view(v, 8, 2, two, st)); /* within src, not v */
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  floe_tensor_release(src);
  floe_tensor_release(v);
  ck_assert_float_eq(((const float *)floe_tensor_data(vv))[0], later); /* alive through vv */
  floe_tensor_release(vv);

  src = input(FLOE_F32, 2, d, 2);
  ck_assert_ptr_null(floe__tensor_slice_view(src, 88, 1, &three, st)); /* 88 + 12 > 96 */
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  assert_msg_has(st, "[3]");
  assert_msg_has(st, "[4,6]");
  assert_msg_has(st, "offset 88");
  ck_assert_ptr_null(floe__tensor_slice_view(src, 2, 1, &three, st)); /* not element-aligned */
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  assert_msg_has(st, "multiples of 4");
  ck_assert_ptr_null(floe__tensor_slice_view(src, -4, 1, &three, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  ck_assert_ptr_null(floe__tensor_slice_view(src, 100, 1, &zero, st)); /* past the end */
  ck_assert_int_eq(floe_status_code(st), FLOE_OUT_OF_RANGE);
  ck_assert_ptr_null(floe__tensor_slice_view(src, 0, 1, &neg, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  v = floe__tensor_slice_view(src, 96, 1, &zero, st); /* empty, at the end */
  ck_assert_ptr_nonnull(v);
  ck_assert_ptr_null(floe_tensor_data(v));
  floe_tensor_release(v);
  floe_tensor_release(src);
  floe_status_free(st);
}
END_TEST

/* The ABI 1.1 slot through a hand-made kernel context of an Identity node. */
START_TEST(host_forward_input_slice) {
  const FloeHostApi *host = floe__host_api();
  ck_assert(FLOE_HAS_FIELD(host, FloeHostApi, ctx_forward_input_slice));
  ck_assert_uint_eq(host->abi_minor, FLOE_ABI_MINOR);
  ck_assert_uint_ge(FLOE_ABI_MINOR, 1);
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {4, 6};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeNode *id = floe_node_finish(begin(g, "Identity", &x, 1));
  ck_assert_ptr_nonnull(id);
  FloeTensor *src = input(FLOE_F32, 2, d, 3);
  FloeTensor *ins[1] = {src}, *outs[1] = {NULL};
  FloeStatus *st = floe_status_new();
  FloeKernelContext ctx = {.node = id, .inputs = ins, .num_inputs = 1, .outputs = outs,
                           .num_outputs = 1, .status = st};
  int64_t rows[2] = {2, 6};
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 0, 0, 24, 2, rows), FLOE_OK);
  ck_assert_ptr_eq(host->tensor_data(outs[0]), (char *)floe_tensor_data(src) + 24);
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 0, 0, 56, 2, rows), FLOE_OUT_OF_RANGE);
  assert_msg_has(st, "node 'Identity' (Identity)");
  assert_msg_has(st, "forward_input_slice 0 -> 0");
  assert_msg_has(st, "[2,6]");
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 0, 0, SIZE_MAX, 2, rows),
                   FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 0, 1, 0, 2, rows), FLOE_OUT_OF_RANGE);
  assert_msg_has(st, "output 1 out of range");
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 1, 0, 0, 2, rows), FLOE_OUT_OF_RANGE);
  assert_msg_has(st, "input 1 out of range");
  /* The earlier good view is still output 0. */
  ck_assert_ptr_eq(host->tensor_data(outs[0]), (char *)floe_tensor_data(src) + 24);
  FloeTensor *wrong = input(FLOE_I32, 2, d, 4);
  ins[0] = wrong;
  ck_assert_int_eq(host->ctx_forward_input_slice(&ctx, 0, 0, 0, 2, rows), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, "input 0 is i32 but output 0 is f32");
  floe_tensor_release(outs[0]);
  floe_tensor_release(wrong);
  floe_tensor_release(src);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------------------- */

static Suite *views_suite(void) {
  Suite *s = suite_create("views");
  TCase *views = tcase_create("kernels_on_views");
  tcase_set_timeout(views, 120);
  tcase_add_loop_test(views, row_views_elementwise_reduce_softmax, 0, (int)N_OF(row_dtypes));
  tcase_add_loop_test(views, block_views_data_movement, 0, (int)N_OF(row_dtypes));
  tcase_add_test(views, split_after_unit_dims_gives_views);
  tcase_add_test(views, bool_views);
  tcase_add_loop_test(views, matmul_of_reshaped_views, 0, 3);
  tcase_add_test(views, matmul_of_large_views);
  tcase_add_loop_test(views, conv_and_pool_of_batch_views, 0, 3);
  tcase_add_loop_test(views, long_row_views, 0, 4);
  suite_add_tcase(s, views);

  TCase *zero = tcase_create("zero_copy");
  tcase_add_test(zero, split_outputs_point_into_the_input);
  tcase_add_test(zero, split_after_unit_dims_points_into_the_input);
  tcase_add_test(zero, contiguous_slices_point_into_the_input);
  tcase_add_test(zero, contiguous_strided_slices_point_into_the_input);
  suite_add_tcase(s, zero);

  TCase *core = tcase_create("core_slice_views");
  tcase_add_test(core, tensor_slice_view_bounds);
  tcase_add_test(core, host_forward_input_slice);
  suite_add_tcase(s, core);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(views_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
