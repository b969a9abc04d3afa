/* SPDX-License-Identifier: Apache-2.0 */
/* test_grad_array.c - the array ops that gradients use (BroadcastTo, SumToShape,
 * ExpandReduced, InvertPermutation, ConcatOffset, SliceGrad, StridedSliceGrad, GatherGrad,
 * PadGrad, TileGrad) against plain reference loops on random shapes (size-1 and empty dims
 * included), and, in f64, the adjoint identity <forward(x), g> == <x, backward(g)> with the
 * forward op run through the same harness: that is what makes each one the true gradient.
 * Also bad inputs (errors naming shapes and indices) and shape inference with Const inputs.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---------------------------------------------------------------------------------- */
/* Running ops. */

/* Attributes of the node under test: 'i' int, 'b' bool, 's' string. */
typedef struct Opt {
  const char *name;
  char kind;
  int64_t i;
  const char *s;
} Opt;

typedef struct Opts {
  int n;
  Opt o[6];
} Opts;

static void set_opts(FloeNodeBuilder *b, void *arg) {
  const Opts *os = arg;
  for (int k = 0; k < os->n; k++) {
    const Opt *o = &os->o[k];
    if (o->kind == 'i') floe_node_set_attr_int(b, o->name, o->i);
    if (o->kind == 'b') floe_node_set_attr_bool(b, o->name, (int)o->i);
    if (o->kind == 's') floe_node_set_attr_string(b, o->name, o->s);
  }
}

static floe_code run_op(const char *op, FloeTensor *const *ins, int n, const int *lists, int nl,
                        const Opts *o, FloeTensor **outs, int nout, FloeStatus *st) {
  return harness_run_op(op, NULL, ins, n, lists, nl, o ? set_opts : NULL, (void *)o, outs, nout,
                        st);
}

/* One output; the run must succeed. */
static FloeTensor *run1(const char *op, FloeTensor *const *ins, int n, const Opts *o,
                        const char *what) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code rc = run_op(op, ins, n, NULL, 0, o, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s: %s", what, floe_code_name(rc), floe_status_message(st));
  floe_status_free(st);
  return out;
}

/* The run must fail with INVALID_ARGUMENT and a message holding need1 and need2. */
static void expect_error(const char *op, FloeTensor *const *ins, int n, const int *lists, int nl,
                         const Opts *o, int nout, const char *need1, const char *need2) {
  FloeStatus *st = floe_status_new();
  FloeTensor *outs[4] = {NULL};
  floe_code rc = run_op(op, ins, n, lists, nl, o, outs, nout, st);
  const char *msg = floe_status_message(st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: %s (%s), want INVALID_ARGUMENT", op,
                floe_code_name(rc), msg);
  if (need1) ck_assert_msg(strstr(msg, need1), "%s: \"%s\" lacks \"%s\"", op, msg, need1);
  if (need2) ck_assert_msg(strstr(msg, need2), "%s: \"%s\" lacks \"%s\"", op, msg, need2);
  floe_status_free(st);
}

static void release(int n, FloeTensor **ts) {
  for (int i = 0; i < n; i++) floe_tensor_release(ts[i]);
}

/* ---------------------------------------------------------------------------------- */
/* Random numbers, indices and tensors. */

static uint64_t rng = 0x5eed;

static uint64_t next_rand(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int64_t rand_in(int64_t lo, int64_t hi) {
  return lo + (int64_t)(next_rand() % (uint64_t)(hi - lo + 1));
}

/* A dim size: often 1, sometimes 0. */
static int64_t rand_dim(void) {
  int64_t r = rand_in(0, 9);
  return r < 3 ? 1 : r == 3 ? 0 : r - 2;
}

/* A dim size that is never 0. */
static int64_t rand_dim1(void) {
  int64_t d = rand_dim();
  return d ? d : 3;
}

static void rand_shape(int rank, int64_t *dims, bool allow_empty) {
  for (int i = 0; i < rank; i++) dims[i] = allow_empty ? rand_dim() : rand_dim1();
}

static FloeTensor *ivec(FloeDType dt, int n, const int64_t *v) {
  int64_t len = n;
  double d[64];
  ck_assert_int_le(n, 64);
  for (int i = 0; i < n; i++) d[i] = (double)v[i];
  return harness_from_doubles(dt, 1, &len, d);
}

static FloeTensor *iscalar(FloeDType dt, int64_t v) {
  double d = (double)v;
  return harness_from_doubles(dt, 0, NULL, &d);
}

static bool is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Random values: small integers for integer, half and bool dtypes (so sums stay exact),
 * continuous ones for f32 / f64. */
static FloeTensor *rand_tensor(FloeDType dt, int rank, const int64_t *dims) {
  int64_t n = harness_count(rank, dims);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(next_rand() >> 11) / 9007199254740992.0;
    if (dt == FLOE_F32 || dt == FLOE_F64)
      v[i] = 4 * u - 2;
    else if (dt == FLOE_BOOL)
      v[i] = u < 0.5;
    else if (dt == FLOE_U8)
      v[i] = floor(8 * u);
    else
      v[i] = floor(9 * u) - 4;
  }
  FloeTensor *t = harness_from_doubles(dt, rank, dims, v);
  free(v);
  return t;
}

static const FloeDType numeric_types[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16,
                                          FLOE_I8,  FLOE_U8,  FLOE_I32, FLOE_I64};
#define N_NUMERIC 8
static const FloeDType all_types[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                                      FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
#define N_ALL 9

/* ---------------------------------------------------------------------------------- */
/* Indices and comparisons. */

static void unravel(int64_t e, int rank, const int64_t *dims, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = e % dims[d];
    e /= dims[d];
  }
}

static int64_t ravel(int rank, const int64_t *dims, const int64_t *idx) {
  int64_t e = 0;
  for (int d = 0; d < rank; d++) e = e * dims[d] + idx[d];
  return e;
}

static char *shape_s(int rank, const int64_t *dims, char *buf) {
  FloeShape s = floe_shape_make(rank, dims);
  return floe_shape_str(&s, buf, 96);
}
#define SHP(rank, dims) shape_s((rank), (dims), (char[96]){0})

/* got must have dtype dt, shape (rank, dims) and the values want (computed in double and
 * rounded to dt like a cast: integer results are exact, float ones within a few ulps). */
static void check_values(const FloeTensor *got, FloeDType dt, int rank, const int64_t *dims,
                         const double *want, const char *what) {
  int64_t n = harness_count(rank, dims);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) { /* 8-bit sums wrap like the type */
    v[i] = want[i];
    if (dt == FLOE_I8) v[i] = (double)(int8_t)(uint8_t)(int64_t)want[i];
    if (dt == FLOE_U8) v[i] = (double)(uint8_t)(int64_t)want[i];
  }
  FloeTensor *w = harness_from_doubles(dt, rank, dims, v);
  free(v);
  double rtol = dt == FLOE_F32 ? 1e-5 : dt == FLOE_F64 ? 1e-13 : dt == FLOE_F16 ? 2e-3
              : dt == FLOE_BF16 ? 1e-2 : 0;
  double atol = dt == FLOE_F32 ? 1e-3 : dt == FLOE_F64 ? 1e-12 : 0;
  harness_assert_close(got, w, rtol, atol, what);
  floe_tensor_release(w);
}

/* <a, b> in f64, and the sum of |a_i b_i| for the tolerance. */
static double dot(const FloeTensor *a, const FloeTensor *b, double *scale) {
  int64_t n = floe_tensor_num_elements(a);
  ck_assert_int_eq(n, floe_tensor_num_elements(b));
  double s = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double p = harness_get(a, i) * harness_get(b, i);
    s += p;
    m += fabs(p);
  }
  *scale = m;
  return s;
}

/* <fwd, g> == <x, back>: backward is the adjoint of forward. */
static void check_adjoint(const FloeTensor *fwd, const FloeTensor *g, const FloeTensor *x,
                          const FloeTensor *back, const char *what) {
  double s1, s2, lhs = dot(fwd, g, &s1), rhs = dot(x, back, &s2);
  ck_assert_msg(fabs(lhs - rhs) <= 1e-12 * (1 + s1 + s2), "%s: <forward(x), g> = %.17g but "
                "<x, backward(g)> = %.17g", what, lhs, rhs);
}

/* ---------------------------------------------------------------------------------- */
/* BroadcastTo and SumToShape. */

/* x (xr, xd) broadcast to (r, dims) by loops. */
static double *ref_broadcast(const FloeTensor *x, int r, const int64_t *dims) {
  int xr = floe_tensor_rank(x);
  const int64_t *xd = floe_tensor_dims(x);
  int64_t n = harness_count(r, dims), q[FLOE_MAX_DIMS], p[FLOE_MAX_DIMS];
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t e = 0; e < n; e++) {
    unravel(e, r, dims, q);
    for (int d = 0; d < xr; d++) p[d] = xd[d] == 1 ? 0 : q[r - xr + d];
    v[e] = harness_get(x, ravel(xr, xd, p));
  }
  return v;
}

/* Sums x onto (tr, t) (t broadcasts to x's shape, leading extra 1s allowed) by loops. */
static double *ref_sum_to(const FloeTensor *x, int tr, const int64_t *t) {
  int xr = floe_tensor_rank(x);
  const int64_t *xd = floe_tensor_dims(x);
  int64_t n = harness_count(tr, t), p[FLOE_MAX_DIMS], q[FLOE_MAX_DIMS];
  double *v = calloc((size_t)(n ? n : 1), sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t e = 0; e < floe_tensor_num_elements(x); e++) {
    unravel(e, xr, xd, p);
    for (int i = 0; i < tr; i++) {
      int d = i - (tr - xr);
      q[i] = d < 0 || t[i] == 1 ? 0 : p[d];
    }
    v[ravel(tr, t, q)] += harness_get(x, e);
  }
  return v;
}

/* A random target for broadcasting a random x: x's dims are the target's or 1. */
static void rand_broadcast_pair(int *xr, int64_t *xd, int *r, int64_t *dims) {
  *r = (int)rand_in(0, 5);
  rand_shape(*r, dims, true);
  *xr = (int)rand_in(0, *r);
  for (int i = 0; i < *xr; i++) {
    int64_t t = dims[*r - *xr + i];
    xd[i] = rand_in(0, 2) == 0 ? 1 : t;
  }
}

START_TEST(test_broadcast_to) {
  for (int c = 0; c < 150; c++) {
    FloeDType dt = all_types[c % N_ALL], it = c % 2 ? FLOE_I64 : FLOE_I32;
    int xr, r;
    int64_t xd[FLOE_MAX_DIMS], dims[FLOE_MAX_DIMS];
    rand_broadcast_pair(&xr, xd, &r, dims);
    FloeTensor *ins[2] = {rand_tensor(dt, xr, xd), ivec(it, r, dims)};
    char what[160];
    snprintf(what, sizeof what, "BroadcastTo %s %s -> %s", floe_dtype_name(dt), SHP(xr, xd),
             SHP(r, dims));
    FloeTensor *y = run1("BroadcastTo", ins, 2, NULL, what);
    double *want = ref_broadcast(ins[0], r, dims);
    check_values(y, dt, r, dims, want, what);
    free(want);
    release(2, ins);
    floe_tensor_release(y);
  }
  /* Large ones (the pool): repeated rows, repeated columns, a middle dim. */
  const int64_t cases[][2][4] = {{{1, 512}, {256, 512}}, {{64, 1}, {64, 512}},
                                 {{3, 1, 40}, {50, 3, 70, 40}}, {{1, 1}, {300, 301}}};
  const int ranks[][2] = {{2, 2}, {2, 2}, {3, 4}, {2, 2}};
  for (int c = 0; c < 4; c++) {
    FloeDType dt = c == 2 ? FLOE_BF16 : FLOE_F32;
    FloeTensor *ins[2] = {rand_tensor(dt, ranks[c][0], cases[c][0]),
                          ivec(FLOE_I32, ranks[c][1], cases[c][1])};
    FloeTensor *y = run1("BroadcastTo", ins, 2, NULL, "BroadcastTo large");
    double *want = ref_broadcast(ins[0], ranks[c][1], cases[c][1]);
    check_values(y, dt, ranks[c][1], cases[c][1], want, "BroadcastTo large");
    free(want);
    release(2, ins);
    floe_tensor_release(y);
  }
}
END_TEST

START_TEST(test_sum_to_shape) {
  for (int c = 0; c < 200; c++) {
    FloeDType dt = numeric_types[c % N_NUMERIC], it = c % 3 ? FLOE_I32 : FLOE_I64;
    /* t: x's trailing dims, each kept or 1, sometimes after extra leading 1s. */
    int xr = (int)rand_in(0, 5), tr = (int)rand_in(0, xr);
    int lead = c % 5 == 0 ? (int)rand_in(1, 2) : 0;
    int64_t xd[FLOE_MAX_DIMS], t[FLOE_MAX_DIMS];
    rand_shape(xr, xd, true);
    for (int i = 0; i < lead; i++) t[i] = 1;
    for (int i = 0; i < tr; i++) t[lead + i] = rand_in(0, 2) ? xd[xr - tr + i] : 1;
    tr += lead;
    FloeTensor *ins[2] = {rand_tensor(dt, xr, xd), ivec(it, tr, t)};
    char what[160];
    snprintf(what, sizeof what, "SumToShape %s %s -> %s", floe_dtype_name(dt), SHP(xr, xd),
             SHP(tr, t));
    FloeTensor *y = run1("SumToShape", ins, 2, NULL, what);
    double *want = ref_sum_to(ins[0], tr, t);
    check_values(y, dt, tr, t, want, what);
    free(want);
    release(2, ins);
    floe_tensor_release(y);
  }
  /* The shapes of every training step's bias and broadcast gradients. */
  struct {
    int xr, tr;
    int64_t x[3], t[3];
  } big[] = {{2, 1, {64, 512}, {512}},     {2, 2, {64, 512}, {1, 512}},
             {2, 0, {64, 512}, {0}},       {2, 2, {64, 512}, {64, 1}},
             {3, 2, {8, 64, 512}, {64, 1}}, {3, 1, {16, 33, 7}, {7}},
             {2, 1, {100000, 3}, {3}}};
  for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
    for (int k = 0; k < 4; k++) {
      FloeDType dt = (FloeDType[]){FLOE_F32, FLOE_F64, FLOE_BF16, FLOE_I32}[k];
      FloeTensor *ins[2] = {rand_tensor(dt, big[c].xr, big[c].x),
                            ivec(FLOE_I32, big[c].tr, big[c].t)};
      char what[160];
      snprintf(what, sizeof what, "SumToShape %s %s -> %s", floe_dtype_name(dt),
               SHP(big[c].xr, big[c].x), SHP(big[c].tr, big[c].t));
      FloeTensor *y = run1("SumToShape", ins, 2, NULL, what);
      double *want = ref_sum_to(ins[0], big[c].tr, big[c].t);
      check_values(y, dt, big[c].tr, big[c].t, want, what);
      free(want);
      release(2, ins);
      floe_tensor_release(y);
    }
  }
}
END_TEST

/* BroadcastTo and SumToShape are each other's adjoint. */
START_TEST(test_broadcast_sum_adjoint) {
  for (int c = 0; c < 60; c++) {
    int xr, r;
    int64_t xd[FLOE_MAX_DIMS], dims[FLOE_MAX_DIMS];
    rand_broadcast_pair(&xr, xd, &r, dims);
    FloeTensor *x = rand_tensor(FLOE_F64, xr, xd), *g = rand_tensor(FLOE_F64, r, dims);
    FloeTensor *b_ins[2] = {x, ivec(FLOE_I32, r, dims)}, *s_ins[2] = {g, ivec(FLOE_I64, xr, xd)};
    FloeTensor *fwd = run1("BroadcastTo", b_ins, 2, NULL, "adjoint: BroadcastTo");
    FloeTensor *back = run1("SumToShape", s_ins, 2, NULL, "adjoint: SumToShape");
    check_adjoint(fwd, g, x, back, "BroadcastTo / SumToShape");
    release(2, b_ins);
    release(2, s_ins);
    release(2, (FloeTensor *[]){fwd, back});
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* ExpandReduced. */

typedef struct Reduction {
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  int naxes;
  int64_t axes[FLOE_MAX_DIMS]; /* as given (may be negative) */
  bool red[FLOE_MAX_DIMS];
  bool scalar_axis, keep, mean;
  int gr;
  int64_t gd[FLOE_MAX_DIMS]; /* the reduced (grad) shape */
} Reduction;

static void rand_reduction(Reduction *q, bool allow_empty) {
  memset(q, 0, sizeof *q);
  q->rank = (int)rand_in(0, 5);
  rand_shape(q->rank, q->dims, allow_empty);
  for (int d = 0; d < q->rank; d++) {
    if (rand_in(0, 1)) continue;
    q->red[d] = true;
    q->axes[q->naxes++] = rand_in(0, 1) ? d : d - q->rank;
  }
  for (int k = q->naxes - 1; k > 0; k--) { /* any order */
    int j = (int)rand_in(0, k);
    int64_t t = q->axes[k];
    q->axes[k] = q->axes[j];
    q->axes[j] = t;
  }
  q->scalar_axis = q->naxes == 1 && rand_in(0, 1);
  q->keep = rand_in(0, 1);
  q->mean = rand_in(0, 1);
  for (int d = 0; d < q->rank; d++)
    if (!q->red[d] || q->keep) q->gd[q->gr++] = q->red[d] ? 1 : q->dims[d];
}

static FloeTensor *axis_tensor(const Reduction *q) {
  return q->scalar_axis ? iscalar(FLOE_I32, q->axes[0]) : ivec(FLOE_I64, q->naxes, q->axes);
}

static const Opts *reduce_opts(Opts *o, const Reduction *q, bool with_mean) {
  o->n = with_mean ? 2 : 1;
  o->o[0] = (Opt){"keep_dims", 'b', q->keep, NULL};
  o->o[1] = (Opt){"mean", 'b', q->mean, NULL};
  return o;
}

START_TEST(test_expand_reduced) {
  for (int c = 0; c < 200; c++) {
    FloeDType dt = numeric_types[c % N_NUMERIC];
    Reduction q;
    rand_reduction(&q, true);
    FloeTensor *ins[3] = {rand_tensor(dt, q.gr, q.gd), ivec(FLOE_I32, q.rank, q.dims),
                          axis_tensor(&q)};
    Opts o;
    char what[200];
    snprintf(what, sizeof what, "ExpandReduced %s grad %s to %s (%d axes, keep %d, mean %d)",
             floe_dtype_name(dt), SHP(q.gr, q.gd), SHP(q.rank, q.dims), q.naxes, q.keep, q.mean);
    FloeTensor *y = run1("ExpandReduced", ins, 3, reduce_opts(&o, &q, true), what);
    int64_t n = harness_count(q.rank, q.dims), count = 1, p[FLOE_MAX_DIMS], gi[FLOE_MAX_DIMS];
    for (int d = 0; d < q.rank; d++) count *= q.red[d] ? q.dims[d] : 1;
    double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t e = 0; e < n; e++) {
      unravel(e, q.rank, q.dims, p);
      int k = 0;
      for (int d = 0; d < q.rank; d++)
        if (!q.red[d] || q.keep) gi[k++] = q.red[d] ? 0 : p[d];
      double v = harness_get(ins[0], ravel(q.gr, q.gd, gi));
      want[e] = !q.mean ? v : is_float(dt) ? v / (double)count : trunc(v / (double)count);
    }
    check_values(y, dt, q.rank, q.dims, want, what);
    free(want);
    release(3, ins);
    floe_tensor_release(y);
  }
  /* Large: Mean over the batch and over the features of [256, 512]. */
  for (int k = 0; k < 2; k++) {
    Reduction q = {.rank = 2, .dims = {256, 512}, .naxes = 1, .axes = {k ? -1 : 0},
                   .mean = true, .keep = k == 1, .gr = k ? 2 : 1};
    q.red[k] = true;
    q.gd[0] = k ? 256 : 512;
    q.gd[1] = 1;
    FloeTensor *ins[3] = {rand_tensor(FLOE_F32, q.gr, q.gd), ivec(FLOE_I32, 2, q.dims),
                          axis_tensor(&q)};
    Opts o;
    FloeTensor *y = run1("ExpandReduced", ins, 3, reduce_opts(&o, &q, true), "large mean");
    double *want = malloc(256 * 512 * sizeof *want);
    for (int64_t e = 0; e < 256 * 512; e++)
      want[e] = harness_get(ins[0], k ? e / 512 : e % 512) / (k ? 512.0 : 256.0);
    check_values(y, FLOE_F32, 2, q.dims, want, "ExpandReduced large mean");
    free(want);
    release(3, ins);
    floe_tensor_release(y);
  }
}
END_TEST

/* ExpandReduced(mean=m) is the adjoint of Sum (m false) and Mean (m true). */
START_TEST(test_expand_reduced_adjoint) {
  for (int c = 0; c < 80; c++) {
    Reduction q;
    rand_reduction(&q, c % 4 != 0);
    if (harness_count(q.rank, q.dims) == 0) q.mean = false; /* Mean of nothing is NaN */
    FloeTensor *x = rand_tensor(FLOE_F64, q.rank, q.dims), *g = rand_tensor(FLOE_F64, q.gr, q.gd);
    Opts o;
    FloeTensor *f_ins[2] = {x, axis_tensor(&q)};
    FloeTensor *fwd = run1(q.mean ? "Mean" : "Sum", f_ins, 2, reduce_opts(&o, &q, false),
                           "adjoint: forward reduction");
    FloeTensor *b_ins[3] = {g, ivec(FLOE_I32, q.rank, q.dims), axis_tensor(&q)};
    FloeTensor *back = run1("ExpandReduced", b_ins, 3, reduce_opts(&o, &q, true),
                            "adjoint: ExpandReduced");
    check_adjoint(fwd, g, x, back, q.mean ? "Mean / ExpandReduced" : "Sum / ExpandReduced");
    release(2, f_ins);
    release(3, b_ins);
    release(2, (FloeTensor *[]){fwd, back});
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* InvertPermutation and ConcatOffset. */

START_TEST(test_invert_permutation) {
  for (int c = 0; c < 40; c++) {
    FloeDType dt = c % 2 ? FLOE_I64 : FLOE_I32;
    int n = c < 2 ? c : (int)rand_in(2, c < 30 ? 12 : 60);
    int64_t perm[64];
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = (int)rand_in(0, i);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    FloeTensor *x = ivec(dt, n, perm);
    FloeTensor *y = run1("InvertPermutation", &x, 1, NULL, "InvertPermutation");
    double want[64];
    for (int i = 0; i < n; i++) want[perm[i]] = i;
    check_values(y, dt, 1, (int64_t[]){n}, want, "InvertPermutation");
    release(2, (FloeTensor *[]){x, y});
  }
  FloeTensor *bad = ivec(FLOE_I32, 4, (int64_t[]){2, 0, 4, 1});
  expect_error("InvertPermutation", &bad, 1, NULL, 0, NULL, 1, "x[2] = 4", "[0, 4)");
  floe_tensor_release(bad);
  bad = ivec(FLOE_I64, 4, (int64_t[]){2, 0, 2, 1});
  expect_error("InvertPermutation", &bad, 1, NULL, 0, NULL, 1, "x[2] = 2", "x[0]");
  floe_tensor_release(bad);
  bad = ivec(FLOE_I32, 3, (int64_t[]){0, -1, 1});
  expect_error("InvertPermutation", &bad, 1, NULL, 0, NULL, 1, "x[1] = -1", NULL);
  floe_tensor_release(bad);
  bad = harness_from_doubles(FLOE_I32, 2, (int64_t[]){1, 2}, (double[]){1, 0});
  expect_error("InvertPermutation", &bad, 1, NULL, 0, NULL, 1, "[1,2]", NULL);
  floe_tensor_release(bad);
}
END_TEST

START_TEST(test_concat_offset) {
  for (int c = 0; c < 40; c++) {
    int r = (int)rand_in(1, 5), n = (int)rand_in(2, 5);
    int64_t base[FLOE_MAX_DIMS], sh[5][FLOE_MAX_DIMS];
    rand_shape(r, base, true);
    int64_t axis = rand_in(-r, r - 1), ax = axis < 0 ? axis + r : axis;
    FloeTensor *ins[6];
    ins[0] = iscalar(FLOE_I32, axis);
    for (int i = 0; i < n; i++) {
      memcpy(sh[i], base, sizeof base);
      sh[i][ax] = rand_in(0, 4);
      ins[1 + i] = ivec(FLOE_I32, r, sh[i]);
    }
    FloeTensor *outs[5] = {NULL};
    FloeStatus *st = floe_status_new();
    floe_code rc = run_op("ConcatOffset", ins, 1 + n, (int[]){1, n}, 2, NULL, outs, n, st);
    ck_assert_msg(rc == FLOE_OK, "ConcatOffset: %s", floe_status_message(st));
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      double want[FLOE_MAX_DIMS] = {0};
      want[ax] = (double)at;
      at += sh[i][ax];
      check_values(outs[i], FLOE_I32, 1, (int64_t[]){r}, want, "ConcatOffset");
    }
    floe_status_free(st);
    release(1 + n, ins);
    release(n, outs);
  }
  /* TF's example: concat_dim 1 of [2,2,7], [2,3,7], [2,5,7]. */
  FloeTensor *ins[4] = {iscalar(FLOE_I32, 1), ivec(FLOE_I32, 3, (int64_t[]){2, 2, 7}),
                        ivec(FLOE_I32, 3, (int64_t[]){2, 3, 7}),
                        ivec(FLOE_I32, 3, (int64_t[]){2, 5, 7})};
  FloeTensor *outs[3] = {NULL};
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(run_op("ConcatOffset", ins, 4, (int[]){1, 3}, 2, NULL, outs, 3, st), FLOE_OK);
  const double want[3][3] = {{0, 0, 0}, {0, 2, 0}, {0, 5, 0}};
  for (int i = 0; i < 3; i++) check_values(outs[i], FLOE_I32, 1, (int64_t[]){3}, want[i], "tf");
  release(3, outs);
  floe_tensor_release(ins[2]);
  ins[2] = ivec(FLOE_I32, 3, (int64_t[]){2, 3, 6});
  expect_error("ConcatOffset", ins, 4, (int[]){1, 3}, 2, NULL, 3, "shape[1] [2,3,6]", "[2,2,7]");
  floe_tensor_release(ins[0]);
  ins[0] = iscalar(FLOE_I32, 3);
  expect_error("ConcatOffset", ins, 4, (int[]){1, 3}, 2, NULL, 3, "concat_dim 3", NULL);
  release(4, ins);
  floe_status_free(st);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* SliceGrad. */

START_TEST(test_slice_grad) {
  for (int c = 0; c < 200; c++) {
    FloeDType dt = all_types[c % N_ALL], it = c % 2 ? FLOE_I32 : FLOE_I64;
    int r = (int)rand_in(0, 5);
    int64_t dims[FLOE_MAX_DIMS], begin[FLOE_MAX_DIMS], size[FLOE_MAX_DIMS];
    rand_shape(r, dims, true);
    for (int d = 0; d < r; d++) {
      begin[d] = rand_in(0, dims[d]);
      size[d] = rand_in(0, dims[d] - begin[d]);
      if (c % 5 == 0) begin[d] = 0, size[d] = dims[d]; /* whole: a view */
    }
    FloeTensor *ins[3] = {ivec(it, r, dims), ivec(it, r, begin), rand_tensor(dt, r, size)};
    char what[160];
    snprintf(what, sizeof what, "SliceGrad %s %s at %s in %s", floe_dtype_name(dt),
             SHP(r, size), SHP(r, begin), SHP(r, dims));
    FloeTensor *y = run1("SliceGrad", ins, 3, NULL, what);
    int64_t n = harness_count(r, dims), p[FLOE_MAX_DIMS];
    double *want = calloc((size_t)(n ? n : 1), sizeof *want);
    for (int64_t e = 0; e < harness_count(r, size); e++) {
      unravel(e, r, size, p);
      for (int d = 0; d < r; d++) p[d] += begin[d];
      want[ravel(r, dims, p)] = harness_get(ins[2], e);
    }
    check_values(y, dt, r, dims, want, what);
    free(want);
    release(3, ins);
    floe_tensor_release(y);
  }
  /* Large (the pool), and narrow rows that merge. */
  const int64_t dims[2][3] = {{300, 200, 1}, {400, 3, 4}}, begin[2][3] = {{7, 13, 0}, {11, 0, 0}},
                size[2][3] = {{250, 150, 1}, {300, 3, 4}};
  for (int c = 0; c < 2; c++) {
    FloeTensor *ins[3] = {ivec(FLOE_I32, 3, dims[c]), ivec(FLOE_I32, 3, begin[c]),
                          rand_tensor(FLOE_F32, 3, size[c])};
    FloeTensor *y = run1("SliceGrad", ins, 3, NULL, "SliceGrad large");
    int64_t n = harness_count(3, dims[c]), p[3];
    double *want = calloc((size_t)n, sizeof *want);
    for (int64_t e = 0; e < harness_count(3, size[c]); e++) {
      unravel(e, 3, size[c], p);
      for (int d = 0; d < 3; d++) p[d] += begin[c][d];
      want[ravel(3, dims[c], p)] = harness_get(ins[2], e);
    }
    check_values(y, FLOE_F32, 3, dims[c], want, "SliceGrad large");
    free(want);
    release(3, ins);
    floe_tensor_release(y);
  }
}
END_TEST

START_TEST(test_slice_adjoint) {
  for (int c = 0; c < 60; c++) {
    int r = (int)rand_in(0, 4);
    int64_t dims[FLOE_MAX_DIMS], begin[FLOE_MAX_DIMS], size[FLOE_MAX_DIMS];
    rand_shape(r, dims, c % 3 == 0);
    for (int d = 0; d < r; d++) {
      begin[d] = rand_in(0, dims[d]);
      size[d] = rand_in(0, dims[d] - begin[d]);
    }
    FloeTensor *x = rand_tensor(FLOE_F64, r, dims), *g = rand_tensor(FLOE_F64, r, size);
    FloeTensor *f_ins[3] = {x, ivec(FLOE_I32, r, begin), ivec(FLOE_I32, r, size)};
    FloeTensor *b_ins[3] = {ivec(FLOE_I64, r, dims), ivec(FLOE_I64, r, begin), g};
    FloeTensor *fwd = run1("Slice", f_ins, 3, NULL, "adjoint: Slice");
    FloeTensor *back = run1("SliceGrad", b_ins, 3, NULL, "adjoint: SliceGrad");
    check_adjoint(fwd, g, x, back, "Slice / SliceGrad");
    release(3, f_ins);
    release(3, b_ins);
    release(2, (FloeTensor *[]){fwd, back});
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* StridedSliceGrad. The reference reads a spec the way Python indexing does
 * (x[1:3, ..., None, ::-1, 2]) and lists, per input dim, the indices taken, by filtering
 * every index of the dim against the clamped bounds. */

typedef struct Spec {
  char kind; /* 'r' range, 'i' index, 'n' new axis, 'e' ellipsis */
  int64_t b, e, s;
  bool no_b, no_e; /* begin / end masked */
} Spec;

#define RANGE(b_, e_, s_) ((Spec){'r', (b_), (e_), (s_), false, false})
#define RANGEM(b_, e_, s_, nb_, ne_) ((Spec){'r', (b_), (e_), (s_), (nb_), (ne_)})
#define ALL(s_) RANGEM(0, 0, (s_), true, true)
#define INDEX(i_) ((Spec){'i', (i_), 0, 1, false, false})
#define NEWAX ((Spec){'n', 0, 0, 1, false, false})
#define ELLIP ((Spec){'e', 0, 0, 1, false, false})

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The indices of a dim of size len that a range entry takes, in order; returns the count. */
static int64_t range_indices(const Spec *p, int64_t len, int64_t *out) {
  int64_t m = 0;
  if (p->s > 0) {
    int64_t a = p->no_b ? 0 : clamp(p->b < 0 ? p->b + len : p->b, 0, len);
    int64_t z = p->no_e ? len : clamp(p->e < 0 ? p->e + len : p->e, 0, len);
    for (int64_t i = 0; i < len; i++)
      if (i >= a && i < z && (i - a) % p->s == 0) out[m++] = i;
  } else {
    int64_t a = p->no_b ? len - 1 : clamp(p->b < 0 ? p->b + len : p->b, -1, len - 1);
    int64_t z = p->no_e ? -1 : clamp(p->e < 0 ? p->e + len : p->e, -1, len - 1);
    for (int64_t i = len - 1; i >= 0; i--)
      if (i <= a && i > z && (a - i) % -p->s == 0) out[m++] = i;
  }
  return m;
}

/* dy's shape and, per input dim, the indices taken (cnt[d] of them, in idx[d]). */
#define SS_MAX_LEN 512
static void spec_apply(const Spec *sp, int n, int rank, const int64_t *dims, int *dyr,
                       int64_t *dyd, int64_t *cnt, int64_t idx[][SS_MAX_LEN]) {
  int real = 0, d = 0;
  bool ell = false;
  for (int i = 0; i < n; i++) {
    real += sp[i].kind == 'r' || sp[i].kind == 'i';
    ell |= sp[i].kind == 'e';
  }
  *dyr = 0;
  for (int i = 0; i <= n; i++) {
    if ((i < n && sp[i].kind == 'e') || (i == n && !ell)) { /* every dim not named */
      for (int k = 0; k < rank - real; k++, d++) {
        cnt[d] = dims[d];
        for (int64_t j = 0; j < dims[d]; j++) idx[d][j] = j;
        dyd[(*dyr)++] = dims[d];
      }
    } else if (i < n && sp[i].kind == 'n') {
      dyd[(*dyr)++] = 1;
    } else if (i < n && sp[i].kind == 'i') {
      cnt[d] = 1;
      idx[d][0] = sp[i].b < 0 ? sp[i].b + dims[d] : sp[i].b;
      d++;
    } else if (i < n) {
      ck_assert_int_le(dims[d], SS_MAX_LEN);
      cnt[d] = range_indices(&sp[i], dims[d], idx[d]);
      dyd[(*dyr)++] = cnt[d];
      d++;
    }
  }
  ck_assert_int_eq(d, rank);
}

/* Inputs 1..3 (begin, end, strides) and the masks of a spec, like TF's __getitem__. */
static void spec_inputs(const Spec *sp, int n, FloeDType it, FloeTensor **ins, Opts *o) {
  int64_t b[16], e[16], s[16], m[5] = {0};
  for (int i = 0; i < n; i++) {
    b[i] = sp[i].kind == 'r' || sp[i].kind == 'i' ? sp[i].b : 0;
    e[i] = sp[i].kind == 'r' ? sp[i].e : sp[i].kind == 'i' ? sp[i].b + 1 : 0;
    s[i] = sp[i].kind == 'r' ? sp[i].s : 1;
    m[0] |= (int64_t)(sp[i].kind == 'r' && sp[i].no_b) << i;
    m[1] |= (int64_t)(sp[i].kind == 'r' && sp[i].no_e) << i;
    m[2] |= (int64_t)(sp[i].kind == 'e') << i;
    m[3] |= (int64_t)(sp[i].kind == 'n') << i;
    m[4] |= (int64_t)(sp[i].kind == 'i') << i;
  }
  ins[0] = ivec(it, n, b);
  ins[1] = ivec(it, n, e);
  ins[2] = ivec(it, n, s);
  static const char *const names[5] = {"begin_mask", "end_mask", "ellipsis_mask",
                                       "new_axis_mask", "shrink_axis_mask"};
  o->n = 5;
  for (int i = 0; i < 5; i++) o->o[i] = (Opt){names[i], 'i', m[i], NULL};
}

/* StridedSliceGrad of a random dy against the reference, then the adjoint identity with
 * StridedSlice in f64. */
static void check_ssg(FloeDType dt, int rank, const int64_t *dims, const Spec *sp, int n,
                      const char *what) {
  int dyr;
  int64_t dyd[16], cnt[FLOE_MAX_DIMS], idx[FLOE_MAX_DIMS][SS_MAX_LEN];
  spec_apply(sp, n, rank, dims, &dyr, dyd, cnt, idx);
  Opts o;
  FloeTensor *ins[5];
  ins[0] = ivec(dt == FLOE_F64 ? FLOE_I64 : FLOE_I32, rank, dims);
  spec_inputs(sp, n, dt == FLOE_F64 ? FLOE_I64 : FLOE_I32, ins + 1, &o);
  ins[4] = rand_tensor(dt, dyr, dyd);
  char w[200];
  snprintf(w, sizeof w, "StridedSliceGrad %s %s of %s", floe_dtype_name(dt), what,
           SHP(rank, dims));
  FloeTensor *y = run1("StridedSliceGrad", ins, 5, &o, w);
  int64_t total = harness_count(rank, dims), p[FLOE_MAX_DIMS], q[FLOE_MAX_DIMS];
  double *want = calloc((size_t)(total ? total : 1), sizeof *want);
  for (int64_t k = 0; k < harness_count(rank, cnt); k++) { /* dy in order */
    unravel(k, rank, cnt, q);
    for (int d = 0; d < rank; d++) p[d] = idx[d][q[d]];
    want[ravel(rank, dims, p)] = harness_get(ins[4], k);
  }
  check_values(y, dt, rank, dims, want, w);
  free(want);
  floe_tensor_release(y);
  if (dt == FLOE_F64) {
    FloeTensor *x = rand_tensor(FLOE_F64, rank, dims);
    FloeTensor *f_ins[4] = {x, ins[1], ins[2], ins[3]};
    FloeTensor *fwd = run1("StridedSlice", f_ins, 4, &o, "adjoint: StridedSlice");
    FloeTensor *back = run1("StridedSliceGrad", ins, 5, &o, "adjoint: StridedSliceGrad");
    check_adjoint(fwd, ins[4], x, back, w);
    release(3, (FloeTensor *[]){x, fwd, back});
  }
  release(5, ins);
}

#define CHECK_SSG(dt, rank, dims, what, ...)                                                 \
  do {                                                                                       \
    const Spec sp_[] = {__VA_ARGS__};                                                        \
    check_ssg(dt, rank, dims, sp_, (int)(sizeof sp_ / sizeof sp_[0]), what);                 \
  } while (0)

START_TEST(test_strided_slice_grad_literal) {
  /* x[4:0:-2] of a [5] vector takes x[4], x[2]: dy = [a, b] lands at 4 and 2. */
  Opts o;
  FloeTensor *ins[5] = {ivec(FLOE_I32, 1, (int64_t[]){5}), NULL, NULL, NULL,
                        harness_from_doubles(FLOE_F32, 1, (int64_t[]){2}, (double[]){10, 20})};
  spec_inputs((Spec[]){RANGE(4, 0, -2)}, 1, FLOE_I32, ins + 1, &o);
  FloeTensor *y = run1("StridedSliceGrad", ins, 5, &o, "x[4:0:-2]");
  check_values(y, FLOE_F32, 1, (int64_t[]){5}, (double[]){0, 0, 20, 0, 10}, "x[4:0:-2]");
  floe_tensor_release(y);
  release(5, ins);
  /* x[None, 1, ::-1] of [2, 3]: dy [1, 3] = [a, b, c] lands at x[1, 2], x[1, 1], x[1, 0]. */
  ins[0] = ivec(FLOE_I64, 2, (int64_t[]){2, 3});
  spec_inputs((Spec[]){NEWAX, INDEX(1), ALL(-1)}, 3, FLOE_I64, ins + 1, &o);
  ins[4] = harness_from_doubles(FLOE_I32, 2, (int64_t[]){1, 3}, (double[]){1, 2, 3});
  y = run1("StridedSliceGrad", ins, 5, &o, "x[None, 1, ::-1]");
  check_values(y, FLOE_I32, 2, (int64_t[]){2, 3}, (double[]){0, 0, 0, 3, 2, 1},
               "x[None, 1, ::-1]");
  floe_tensor_release(y);
  release(5, ins);
  /* x[..., -1] of [2, 2]: the last column. */
  ins[0] = ivec(FLOE_I32, 2, (int64_t[]){2, 2});
  spec_inputs((Spec[]){ELLIP, INDEX(-1)}, 2, FLOE_I32, ins + 1, &o);
  ins[4] = harness_from_doubles(FLOE_F64, 1, (int64_t[]){2}, (double[]){5, 6});
  y = run1("StridedSliceGrad", ins, 5, &o, "x[..., -1]");
  check_values(y, FLOE_F64, 2, (int64_t[]){2, 2}, (double[]){0, 5, 0, 6}, "x[..., -1]");
  floe_tensor_release(y);
  release(5, ins);
}
END_TEST

START_TEST(test_strided_slice_grad) {
  const int64_t d3[3] = {4, 5, 6};
  for (int t = 0; t < N_ALL; t++) {
    FloeDType dt = all_types[t];
    CHECK_SSG(dt, 3, d3, "[1:3, :, ::2]", RANGE(1, 3, 1), ALL(1), ALL(2));
    CHECK_SSG(dt, 3, d3, "[::-1]", ALL(-1));
    CHECK_SSG(dt, 3, d3, "[-1]", INDEX(-1));
    CHECK_SSG(dt, 3, d3, "[..., 0]", ELLIP, INDEX(0));
    CHECK_SSG(dt, 3, d3, "[:, None, 1:4]", ALL(1), NEWAX, RANGE(1, 4, 1));
    CHECK_SSG(dt, 3, d3, "[2, -2, ::-2]", INDEX(2), INDEX(-2), ALL(-2));
    CHECK_SSG(dt, 3, d3, "[1:3, ..., ::-1]", RANGE(1, 3, 1), ELLIP, ALL(-1));
  }
  CHECK_SSG(FLOE_F64, 3, d3, "[10:20] (empty)", RANGE(10, 20, 1));
  CHECK_SSG(FLOE_F64, 3, d3, "[-100:100:3]", RANGE(-100, 100, 3));
  CHECK_SSG(FLOE_F64, 3, d3, "[3:0:-1, 4::-2]", RANGE(3, 0, -1), RANGEM(4, 0, -2, false, true));
  CHECK_SSG(FLOE_F64, 3, d3, "[:, :, :] (whole)", ALL(1),
            ALL(1), ALL(1));
  CHECK_SSG(FLOE_F64, 3, d3, "[-1:-5:-1, ..., 5:-100:-2]", RANGE(-1, -5, -1), ELLIP,
            RANGE(5, -100, -2));
  CHECK_SSG(FLOE_F64, 3, d3, "[None, ..., None]", NEWAX, ELLIP, NEWAX);
  CHECK_SSG(FLOE_F64, 0, NULL, "scalar[None]", NEWAX);
  CHECK_SSG(FLOE_F64, 2, ((int64_t[]){0, 3}), "empty[:, ::-1]", ALL(1),
            ALL(-1));
  CHECK_SSG(FLOE_F64, 2, ((int64_t[]){1, 4}), "[::-1] of a size-1 dim", ALL(-1));
  /* Random specs: per dim an index or a range with random (masked) bounds and strides,
   * new axes between, and an explicit ellipsis or an implicit one for the dims left. */
  for (int c = 0; c < 150; c++) {
    int rank = (int)rand_in(0, 4), n = 0, news = 0;
    int64_t dims[FLOE_MAX_DIMS];
    rand_shape(rank, dims, c % 4 == 0);
    Spec sp[12];
    int ell_at = rand_in(0, 2) == 0 ? (int)rand_in(0, rank) : -1;
    int skip = ell_at >= 0 ? (int)rand_in(0, rank - ell_at) : 0; /* dims the ellipsis covers */
    int last = ell_at >= 0 ? rank : (int)rand_in(0, rank);
    for (int d = 0; d <= rank; d++) {
      if (d == ell_at) {
        sp[n++] = ELLIP;
        d += skip;
      }
      if (d >= last) break;
      if (news < 2 && rand_in(0, 5) == 0) sp[n++] = NEWAX, news++;
      if (dims[d] > 0 && rand_in(0, 3) == 0) {
        sp[n++] = INDEX(rand_in(-dims[d], dims[d] - 1));
      } else {
        int64_t st = rand_in(1, 3) * (rand_in(0, 1) ? 1 : -1);
        sp[n++] = RANGEM(rand_in(-dims[d] - 2, dims[d] + 2), rand_in(-dims[d] - 2, dims[d] + 2),
                         st, rand_in(0, 3) == 0, rand_in(0, 3) == 0);
      }
    }
    if (news < 2 && rand_in(0, 3) == 0) sp[n++] = NEWAX;
    char what[32];
    snprintf(what, sizeof what, "random spec %d", c);
    check_ssg(c % 3 ? FLOE_F64 : FLOE_F32, rank, dims, sp, n, what);
  }
  /* Large: threads, a negative innermost stride, a sliced row. */
  CHECK_SSG(FLOE_F32, 2, ((int64_t[]){300, 400}), "big[::-1, 3:-3]", ALL(-1),
            RANGE(3, -3, 1));
  CHECK_SSG(FLOE_F16, 2, ((int64_t[]){300, 400}), "big[1:, ::-2]", RANGEM(1, 0, 1, false, true),
            ALL(-2));
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* GatherGrad. */

typedef struct GatherCase {
  int pr, ir, axis; /* axis as given to the op (may be negative) */
  int64_t pd[FLOE_MAX_DIMS], id[FLOE_MAX_DIMS], gd[FLOE_MAX_DIMS];
  int gr;
} GatherCase;

static void gather_shapes(GatherCase *g) {
  int ax = g->axis < 0 ? g->axis + g->pr : g->axis;
  g->gr = 0;
  for (int i = 0; i < ax; i++) g->gd[g->gr++] = g->pd[i];
  for (int i = 0; i < g->ir; i++) g->gd[g->gr++] = g->id[i];
  for (int i = ax + 1; i < g->pr; i++) g->gd[g->gr++] = g->pd[i];
}

/* Random indices in [0, dim) (with repeats). */
static FloeTensor *rand_indices(FloeDType it, int ir, const int64_t *id, int64_t dim) {
  int64_t n = harness_count(ir, id);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)rand_in(0, dim - 1);
  FloeTensor *t = harness_from_doubles(it, ir, id, v);
  free(v);
  return t;
}

static void check_gather_grad(FloeDType dt, GatherCase *g, const char *what) {
  gather_shapes(g);
  int ax = g->axis < 0 ? g->axis + g->pr : g->axis;
  FloeDType it = g->ir % 2 ? FLOE_I64 : FLOE_I32;
  FloeTensor *ins[3] = {ivec(FLOE_I32, g->pr, g->pd), rand_indices(it, g->ir, g->id, g->pd[ax]),
                        rand_tensor(dt, g->gr, g->gd)};
  Opts o = {1, {{"axis", 'i', g->axis, NULL}}};
  char w[200];
  snprintf(w, sizeof w, "GatherGrad %s %s: params %s indices %s axis %d", floe_dtype_name(dt),
           what, SHP(g->pr, g->pd), SHP(g->ir, g->id), g->axis);
  FloeTensor *y = run1("GatherGrad", ins, 3, &o, w);
  int64_t O = harness_count(ax, g->pd), D = g->pd[ax], N = harness_count(g->ir, g->id);
  int64_t I = harness_count(g->pr - ax - 1, g->pd + ax + 1), total = O * D * I;
  double *want = calloc((size_t)(total ? total : 1), sizeof *want);
  for (int64_t a = 0; a < O; a++)
    for (int64_t k = 0; k < N; k++)
      for (int64_t i = 0; i < I; i++)
        want[(a * D + (int64_t)harness_get(ins[1], k)) * I + i] +=
            harness_get(ins[2], (a * N + k) * I + i);
  check_values(y, dt, g->pr, g->pd, want, w);
  free(want);
  floe_tensor_release(y);
  if (dt == FLOE_F64) {
    FloeTensor *p = rand_tensor(FLOE_F64, g->pr, g->pd);
    FloeTensor *f_ins[2] = {p, ins[1]};
    FloeTensor *fwd = run1("Gather", f_ins, 2, &o, "adjoint: Gather");
    FloeTensor *back = run1("GatherGrad", ins, 3, &o, "adjoint: GatherGrad");
    check_adjoint(fwd, ins[2], p, back, w);
    release(3, (FloeTensor *[]){p, fwd, back});
  }
  release(3, ins);
}

START_TEST(test_gather_grad) {
  for (int c = 0; c < 200; c++) {
    GatherCase g = {.pr = (int)rand_in(1, 4), .ir = (int)rand_in(0, 2)};
    rand_shape(g.pr, g.pd, c % 4 == 0);
    int ax = (int)rand_in(0, g.pr - 1);
    g.axis = rand_in(0, 1) ? ax : ax - g.pr;
    if (g.pd[ax] == 0) g.pd[ax] = 2; /* indices need a row to point at */
    rand_shape(g.ir, g.id, c % 5 == 0);
    if (c % 7 == 0 && g.ir > 0) g.id[0] = 3 * g.pd[ax]; /* many repeats */
    check_gather_grad(c % 3 == 0 ? FLOE_F64 : numeric_types[c % N_NUMERIC], &g, "random");
  }
  /* Large: an embedding table (rows split over the pool, repeats), a middle axis with wide
   * rows (column chunks), and a narrow last axis. */
  GatherCase big[3] = {{.pr = 2, .ir = 2, .axis = 0, .pd = {1000, 64}, .id = {64, 80}},
                       {.pr = 3, .ir = 1, .axis = 1, .pd = {2, 3, 4096}, .id = {50}},
                       {.pr = 2, .ir = 1, .axis = -1, .pd = {3000, 7}, .id = {20}}};
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 4; k++)
      check_gather_grad((FloeDType[]){FLOE_F32, FLOE_F16, FLOE_I32, FLOE_F64}[k], &big[c],
                        "large");
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* PadGrad. The reference walks grad and adds each element to the input element it was
 * padded from (REFLECT mirrors without repeating the edge). */

/* A [r, 2] i32 paddings tensor. */
static FloeTensor *pads_t(int r, const double *v) {
  return harness_from_doubles(FLOE_I32, 2, (int64_t[]){r, 2}, v);
}

static double *ref_pad_grad(const FloeTensor *g, const int64_t *pads, bool reflect, int64_t *dims) {
  int r = floe_tensor_rank(g);
  const int64_t *gd = floe_tensor_dims(g);
  for (int d = 0; d < r; d++) dims[d] = gd[d] - pads[2 * d] - pads[2 * d + 1];
  int64_t n = harness_count(r, dims), p[FLOE_MAX_DIMS];
  double *v = calloc((size_t)(n ? n : 1), sizeof *v);
  for (int64_t e = 0; e < floe_tensor_num_elements(g); e++) {
    unravel(e, r, gd, p);
    bool inside = true;
    for (int d = 0; d < r; d++) {
      int64_t i = p[d] - pads[2 * d];
      if (reflect) i = i < 0 ? -i : i >= dims[d] ? 2 * (dims[d] - 1) - i : i;
      inside &= i >= 0 && i < dims[d];
      p[d] = i;
    }
    if (inside) v[ravel(r, dims, p)] += harness_get(g, e);
  }
  return v;
}

static void check_pad_grad(FloeDType dt, int r, const int64_t *dims, const int64_t *pads,
                           bool reflect, const char *what) {
  int64_t gd[FLOE_MAX_DIMS], out[FLOE_MAX_DIMS];
  for (int d = 0; d < r; d++) gd[d] = dims[d] + pads[2 * d] + pads[2 * d + 1];
  double pv[2 * FLOE_MAX_DIMS];
  for (int k = 0; k < 2 * r; k++) pv[k] = (double)pads[k];
  FloeTensor *ins[2] = {rand_tensor(dt, r, gd), pads_t(r, pv)};
  Opts o = {1, {{"mode", 's', 0, reflect ? "REFLECT" : "CONSTANT"}}};
  char w[200];
  snprintf(w, sizeof w, "PadGrad %s %s %s: grad %s", floe_dtype_name(dt), o.o[0].s, what,
           SHP(r, gd));
  FloeTensor *y = run1("PadGrad", ins, 2, &o, w);
  double *want = ref_pad_grad(ins[0], pads, reflect, out);
  check_values(y, dt, r, dims, want, w);
  free(want);
  floe_tensor_release(y);
  if (dt == FLOE_F64) {
    FloeTensor *x = rand_tensor(FLOE_F64, r, dims);
    FloeTensor *f_ins[2] = {x, ins[1]};
    FloeTensor *fwd = run1("Pad", f_ins, 2, &o, "adjoint: Pad");
    FloeTensor *back = run1("PadGrad", ins, 2, &o, "adjoint: PadGrad");
    check_adjoint(fwd, ins[0], x, back, w);
    release(3, (FloeTensor *[]){x, fwd, back});
  }
  release(2, ins);
}

START_TEST(test_pad_grad) {
  for (int c = 0; c < 240; c++) {
    bool reflect = c % 2;
    int r = (int)rand_in(c < 10 ? 0 : 1, 4);
    int64_t dims[FLOE_MAX_DIMS], pads[2 * FLOE_MAX_DIMS];
    rand_shape(r, dims, !reflect && c % 3 == 0);
    for (int d = 0; d < r; d++) {
      int64_t most = reflect ? dims[d] - 1 : 3; /* REFLECT pads less than the dim */
      pads[2 * d] = rand_in(0, 2) ? rand_in(0, most) : 0;
      pads[2 * d + 1] = rand_in(0, 2) ? rand_in(0, most) : 0;
    }
    FloeDType dt = c % 4 < 2 ? FLOE_F64 : numeric_types[c / 4 % N_NUMERIC];
    check_pad_grad(dt, r, dims, pads, reflect, "random");
  }
  /* Large: an image padded in H and W (channels innermost), the last dim padded, and the
   * first dim padded (few outer rows: column chunks). */
  const int64_t img[4] = {2, 60, 70, 8}, pimg[8] = {0, 0, 3, 3, 2, 5, 0, 0};
  const int64_t row[2] = {200, 300}, prow[4] = {0, 0, 7, 9};
  const int64_t col[2] = {40, 3000}, pcol[4] = {5, 2, 0, 0};
  for (int k = 0; k < 4; k++) {
    FloeDType dt = (FloeDType[]){FLOE_F32, FLOE_BF16, FLOE_I64, FLOE_F64}[k];
    for (int m = 0; m < 2; m++) {
      check_pad_grad(dt, 4, img, pimg, m, "image");
      check_pad_grad(dt, 2, row, prow, m, "last dim");
      check_pad_grad(dt, 2, col, pcol, m, "first dim");
    }
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* TileGrad. */

static void check_tile_grad(FloeDType dt, int r, const int64_t *dims, const int64_t *mult,
                            const char *what) {
  int64_t gd[FLOE_MAX_DIMS], p[FLOE_MAX_DIMS];
  for (int d = 0; d < r; d++) gd[d] = dims[d] * mult[d];
  FloeTensor *ins[2] = {rand_tensor(dt, r, gd), ivec(r % 2 ? FLOE_I64 : FLOE_I32, r, mult)};
  char w[200];
  snprintf(w, sizeof w, "TileGrad %s %s: grad %s multiples %s", floe_dtype_name(dt), what,
           SHP(r, gd), SHP(r, mult));
  FloeTensor *y = run1("TileGrad", ins, 2, NULL, w);
  int64_t n = harness_count(r, dims);
  double *want = calloc((size_t)(n ? n : 1), sizeof *want);
  for (int64_t e = 0; e < harness_count(r, gd); e++) {
    unravel(e, r, gd, p);
    for (int d = 0; d < r; d++) p[d] %= dims[d];
    want[ravel(r, dims, p)] += harness_get(ins[0], e);
  }
  check_values(y, dt, r, dims, want, w);
  free(want);
  floe_tensor_release(y);
  if (dt == FLOE_F64) {
    FloeTensor *x = rand_tensor(FLOE_F64, r, dims);
    FloeTensor *f_ins[2] = {x, ins[1]};
    FloeTensor *fwd = run1("Tile", f_ins, 2, NULL, "adjoint: Tile");
    FloeTensor *back = run1("TileGrad", ins, 2, NULL, "adjoint: TileGrad");
    check_adjoint(fwd, ins[0], x, back, w);
    release(3, (FloeTensor *[]){x, fwd, back});
  }
  release(2, ins);
}

START_TEST(test_tile_grad) {
  for (int c = 0; c < 200; c++) {
    int r = (int)rand_in(0, 5);
    int64_t dims[FLOE_MAX_DIMS], mult[FLOE_MAX_DIMS];
    rand_shape(r, dims, c % 4 == 0);
    for (int d = 0; d < r; d++) mult[d] = rand_in(1, 3);
    check_tile_grad(c % 3 == 0 ? FLOE_F64 : numeric_types[c % N_NUMERIC], r, dims, mult,
                    "random");
  }
  /* Large: a bias tiled over a batch; every dim tiled at rank 5 and at rank 8 (a view of
   * 16 alternating dims). */
  check_tile_grad(FLOE_F32, 2, (int64_t[]){1, 512}, (int64_t[]){64, 1}, "bias");
  check_tile_grad(FLOE_BF16, 2, (int64_t[]){1, 512}, (int64_t[]){64, 1}, "bias");
  check_tile_grad(FLOE_F64, 5, (int64_t[]){2, 3, 2, 3, 5}, (int64_t[]){2, 2, 3, 2, 2}, "rank 5");
  const int64_t d8[8] = {2, 2, 2, 2, 2, 2, 2, 3}, m8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
  check_tile_grad(FLOE_F32, 8, d8, m8, "rank 8");
  check_tile_grad(FLOE_I64, 8, d8, m8, "rank 8");
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Bad inputs: errors name the shapes and indices involved. */

START_TEST(test_errors) {
  FloeTensor *x = rand_tensor(FLOE_F32, 2, (int64_t[]){4, 3});
  /* BroadcastTo: [4,3] does not go into [2,3] or [3]. */
  FloeTensor *ins[5] = {x, ivec(FLOE_I32, 2, (int64_t[]){2, 3})};
  expect_error("BroadcastTo", ins, 2, NULL, 0, NULL, 1, "[4,3]", "[2,3]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 1, (int64_t[]){3});
  expect_error("BroadcastTo", ins, 2, NULL, 0, NULL, 1, "[4,3]", "fewer dims");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){-1, 3});
  expect_error("BroadcastTo", ins, 2, NULL, 0, NULL, 1, "negative", "[-1,3]");
  floe_tensor_release(ins[1]);
  /* SumToShape: [2,3] does not broadcast to [4,3]; [5,1,3] has too many real dims. */
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){2, 3});
  expect_error("SumToShape", ins, 2, NULL, 0, NULL, 1, "[4,3]", "[2,3]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 3, (int64_t[]){5, 1, 3});
  expect_error("SumToShape", ins, 2, NULL, 0, NULL, 1, "[4,3]", "[5,1,3]");
  floe_tensor_release(ins[1]);
  /* ExpandReduced: grad [4] is not [4,3] reduced along 0; axis 2 is out of range; repeats. */
  ins[0] = rand_tensor(FLOE_F32, 1, (int64_t[]){4});
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){4, 3});
  ins[2] = ivec(FLOE_I32, 1, (int64_t[]){0});
  expect_error("ExpandReduced", ins, 3, NULL, 0, NULL, 1, "[4]", "[3]");
  floe_tensor_release(ins[2]);
  ins[2] = iscalar(FLOE_I32, 2);
  expect_error("ExpandReduced", ins, 3, NULL, 0, NULL, 1, "axis 2", "[4,3]");
  floe_tensor_release(ins[2]);
  ins[2] = ivec(FLOE_I32, 2, (int64_t[]){1, -1});
  expect_error("ExpandReduced", ins, 3, NULL, 0, NULL, 1, "repeated", NULL);
  release(3, ins);
  /* SliceGrad: begin + grad past input_shape, and a rank mismatch. */
  ins[0] = ivec(FLOE_I32, 2, (int64_t[]){4, 3});
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){2, 1});
  ins[2] = rand_tensor(FLOE_F32, 2, (int64_t[]){3, 2});
  expect_error("SliceGrad", ins, 3, NULL, 0, NULL, 1, "[2,1]", "[4,3]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 1, (int64_t[]){0});
  expect_error("SliceGrad", ins, 3, NULL, 0, NULL, 1, "[3,2]", "[4,3]");
  release(3, ins);
  /* StridedSliceGrad: dy of the wrong shape; a bad spec. */
  Opts o;
  ins[0] = ivec(FLOE_I32, 2, (int64_t[]){4, 3});
  spec_inputs((Spec[]){RANGE(0, 2, 1)}, 1, FLOE_I32, ins + 1, &o);
  ins[4] = rand_tensor(FLOE_F32, 2, (int64_t[]){3, 3});
  expect_error("StridedSliceGrad", ins, 5, NULL, 0, &o, 1, "[3,3]", "[2,3]");
  release(4, ins + 1);
  spec_inputs((Spec[]){INDEX(7)}, 1, FLOE_I32, ins + 1, &o);
  ins[4] = rand_tensor(FLOE_F32, 1, (int64_t[]){3});
  expect_error("StridedSliceGrad", ins, 5, NULL, 0, &o, 1, "[4,3]", NULL);
  release(5, ins);
  /* GatherGrad: an index out of range, and grad of the wrong shape. */
  o = (Opts){1, {{"axis", 'i', 1, NULL}}};
  ins[0] = ivec(FLOE_I32, 2, (int64_t[]){2, 5});
  ins[1] = ivec(FLOE_I64, 3, (int64_t[]){1, 4, 7});
  ins[2] = rand_tensor(FLOE_F32, 2, (int64_t[]){2, 3});
  expect_error("GatherGrad", ins, 3, NULL, 0, &o, 1, "indices[2] = 7", "[0, 5)");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I64, 3, (int64_t[]){1, -1, 0});
  expect_error("GatherGrad", ins, 3, NULL, 0, &o, 1, "indices[1] = -1", "[2,5]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I64, 2, (int64_t[]){1, 0});
  expect_error("GatherGrad", ins, 3, NULL, 0, &o, 1, "[2,3]", "[2,2]");
  o.o[0].i = 2;
  expect_error("GatherGrad", ins, 3, NULL, 0, &o, 1, "axis 2", "[2,5]");
  release(3, ins);
  /* PadGrad: paddings larger than grad; REFLECT paddings not below the input; wrong shape. */
  o = (Opts){1, {{"mode", 's', 0, "CONSTANT"}}};
  ins[0] = rand_tensor(FLOE_F32, 2, (int64_t[]){4, 3});
  ins[1] = harness_from_doubles(FLOE_I32, 2, (int64_t[]){2, 2}, (double[]){1, 1, 2, 2});
  expect_error("PadGrad", ins, 2, NULL, 0, &o, 1, "[4,3]", "dim 1");
  floe_tensor_release(ins[1]);
  ins[1] = harness_from_doubles(FLOE_I32, 2, (int64_t[]){2, 2}, (double[]){2, 0, 0, 0});
  o.o[0].s = "REFLECT";
  expect_error("PadGrad", ins, 2, NULL, 0, &o, 1, "[4,3]", "REFLECT");
  o.o[0].s = "SYMMETRIC";
  expect_error("PadGrad", ins, 2, NULL, 0, &o, 1, "SYMMETRIC", NULL);
  floe_tensor_release(ins[1]);
  o.o[0].s = "CONSTANT";
  ins[1] = harness_from_doubles(FLOE_I32, 2, (int64_t[]){3, 2}, (double[]){0, 0, 0, 0, 0, 0});
  expect_error("PadGrad", ins, 2, NULL, 0, &o, 1, "[3,2]", NULL);
  floe_tensor_release(ins[1]);
  /* TileGrad: a multiple that does not divide grad, a zero one, a wrong count. */
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){3, 1});
  expect_error("TileGrad", ins, 2, NULL, 0, NULL, 1, "[3,1]", "[4,3]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 2, (int64_t[]){1, 0});
  expect_error("TileGrad", ins, 2, NULL, 0, NULL, 1, "[1,0]", "[4,3]");
  floe_tensor_release(ins[1]);
  ins[1] = ivec(FLOE_I32, 1, (int64_t[]){2});
  expect_error("TileGrad", ins, 2, NULL, 0, NULL, 1, "multiples", "[4,3]");
  release(2, ins);
  floe_tensor_release(x);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Shape inference: with Const index inputs the output shapes are fully known. */

/* A graph holding op with inputs made by the callers (placeholders of the given shapes for
 * data, Consts for index values). */
static FloeOutput ph(FloeGraph *g, const char *name, FloeDType dt, int rank, const int64_t *dims) {
  return floe_placeholder(g, name, dt, floe_shape_make(rank, dims));
}

static FloeOutput cst(FloeGraph *g, const char *name, FloeTensor *t) {
  FloeOutput o = floe_const(g, name, t);
  floe_tensor_release(t);
  return o;
}

static FloeNode *node(FloeGraph *g, const char *op, const FloeOutput *ins, int n, const Opts *o) {
  char name[32];
  snprintf(name, sizeof name, "op%d", floe_graph_num_nodes(g));
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  if (o) set_opts(b, (void *)o);
  return floe_node_finish(b);
}

static void expect_shape(FloeGraph *g, FloeNode *n, int i, int rank, const int64_t *dims,
                         const char *what) {
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s: %s", what, floe_graph_error(g, st));
  floe_status_free(st);
  FloeShape s = floe_node_output_shape(n, i), w = floe_shape_make(rank, dims);
  char a[96], b[96];
  bool same = s.rank == w.rank;
  for (int d = 0; same && d < s.rank; d++) same = s.dims[d] == w.dims[d];
  ck_assert_msg(same, "%s: inferred %s, want %s", what, floe_shape_str(&s, a, sizeof a),
                floe_shape_str(&w, b, sizeof b));
}

static void expect_graph_error(FloeGraph *g, const char *need1, const char *need2) {
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  const char *msg = floe_graph_error(g, st);
  ck_assert_msg(strstr(msg, need1), "\"%s\" lacks \"%s\"", msg, need1);
  if (need2) ck_assert_msg(strstr(msg, need2), "\"%s\" lacks \"%s\"", msg, need2);
  floe_status_free(st);
}

START_TEST(test_shape_inference) {
  FloeGraph *g = floe_graph_new();
  const int64_t x43[2] = {4, 3}, unk[2] = {-1, 3};
  FloeOutput x = ph(g, "x", FLOE_F32, 2, x43), u = ph(g, "u", FLOE_F32, 2, unk);
  /* BroadcastTo / SumToShape / ExpandReduced. */
  FloeOutput in2[5];
  in2[0] = ph(g, "c", FLOE_F32, 1, (int64_t[]){3});
  in2[1] = cst(g, "s1", ivec(FLOE_I32, 3, (int64_t[]){2, 4, 3}));
  FloeNode *n = node(g, "BroadcastTo", in2, 2, NULL);
  expect_shape(g, n, 0, 3, (int64_t[]){2, 4, 3}, "BroadcastTo const shape");
  in2[0] = x;
  in2[1] = cst(g, "s2", ivec(FLOE_I32, 1, (int64_t[]){3}));
  n = node(g, "SumToShape", in2, 2, NULL);
  expect_shape(g, n, 0, 1, (int64_t[]){3}, "SumToShape const shape");
  /* With a Shape node as the target: an unknown batch dim stays unknown. */
  FloeNodeBuilder *b = floe_node_begin(g, "Shape", "shape_u");
  floe_node_add_input(b, u);
  in2[1] = floe_out(floe_node_finish(b), 0);
  in2[0] = ph(g, "big", FLOE_F32, 3, (int64_t[]){5, 7, 3});
  n = node(g, "SumToShape", in2, 2, NULL);
  expect_shape(g, n, 0, 2, unk, "SumToShape to Shape(u)");
  in2[0] = ph(g, "r", FLOE_F32, 1, (int64_t[]){4});
  in2[1] = cst(g, "s3", ivec(FLOE_I32, 2, x43));
  in2[2] = cst(g, "ax", ivec(FLOE_I32, 1, (int64_t[]){-1}));
  n = node(g, "ExpandReduced", in2, 3, NULL);
  expect_shape(g, n, 0, 2, x43, "ExpandReduced");
  /* input_shape from Shape(u) [?,3]; grad [6] reduced along 1 fills the batch dim. */
  in2[0] = ph(g, "r6", FLOE_F32, 1, (int64_t[]){6});
  b = floe_node_begin(g, "Shape", "shape_u2");
  floe_node_add_input(b, u);
  in2[1] = floe_out(floe_node_finish(b), 0);
  in2[2] = cst(g, "ax1", iscalar(FLOE_I32, 1));
  n = node(g, "ExpandReduced", in2, 3, NULL);
  expect_shape(g, n, 0, 2, (int64_t[]){6, 3}, "ExpandReduced fills a dim from grad");
  /* SliceGrad / StridedSliceGrad / GatherGrad: the shape input. */
  in2[0] = cst(g, "s4", ivec(FLOE_I64, 2, (int64_t[]){9, 8}));
  in2[1] = cst(g, "b4", ivec(FLOE_I64, 2, (int64_t[]){1, 1}));
  in2[2] = x;
  n = node(g, "SliceGrad", in2, 3, NULL);
  expect_shape(g, n, 0, 2, (int64_t[]){9, 8}, "SliceGrad");
  in2[0] = cst(g, "s5", ivec(FLOE_I32, 3, (int64_t[]){4, 5, 6}));
  in2[1] = cst(g, "b5", ivec(FLOE_I32, 1, (int64_t[]){0}));
  in2[2] = cst(g, "e5", ivec(FLOE_I32, 1, (int64_t[]){2}));
  in2[3] = cst(g, "st5", ivec(FLOE_I32, 1, (int64_t[]){1}));
  in2[4] = ph(g, "dy", FLOE_F32, 3, (int64_t[]){2, 5, 6});
  n = node(g, "StridedSliceGrad", in2, 5, NULL);
  expect_shape(g, n, 0, 3, (int64_t[]){4, 5, 6}, "StridedSliceGrad");
  in2[0] = cst(g, "s6", ivec(FLOE_I32, 2, (int64_t[]){100, 16}));
  in2[1] = ph(g, "ids", FLOE_I32, 1, (int64_t[]){7});
  in2[2] = ph(g, "gg", FLOE_F32, 2, (int64_t[]){7, 16});
  n = node(g, "GatherGrad", in2, 3, NULL);
  expect_shape(g, n, 0, 2, (int64_t[]){100, 16}, "GatherGrad");
  /* PadGrad and TileGrad compute their dims from Const paddings / multiples. */
  in2[0] = ph(g, "pg", FLOE_F32, 2, (int64_t[]){10, 7});
  in2[1] = cst(g, "p7", pads_t(2, (double[]){1, 2, 0, 3}));
  Opts refl = {1, {{"mode", 's', 0, "REFLECT"}}};
  n = node(g, "PadGrad", in2, 2, &refl);
  expect_shape(g, n, 0, 2, (int64_t[]){7, 4}, "PadGrad");
  in2[0] = u;
  n = node(g, "PadGrad", in2, 2, NULL);
  expect_shape(g, n, 0, 2, (int64_t[]){-1, 0}, "PadGrad unknown dim");
  in2[0] = ph(g, "tg", FLOE_F32, 3, (int64_t[]){6, 4, -1});
  in2[1] = cst(g, "m8", ivec(FLOE_I32, 3, (int64_t[]){3, 1, 2}));
  n = node(g, "TileGrad", in2, 2, NULL);
  expect_shape(g, n, 0, 3, (int64_t[]){2, 4, -1}, "TileGrad");
  /* ConcatOffset: vectors of the rank's length; InvertPermutation: its input's. */
  in2[0] = cst(g, "cd", iscalar(FLOE_I32, 0));
  in2[1] = cst(g, "sa", ivec(FLOE_I32, 3, (int64_t[]){1, 2, 3}));
  in2[2] = ph(g, "sb", FLOE_I32, 1, (int64_t[]){-1});
  b = floe_node_begin(g, "ConcatOffset", "co");
  floe_node_add_input(b, in2[0]);
  floe_node_add_input_list(b, in2 + 1, 2);
  n = floe_node_finish(b);
  expect_shape(g, n, 0, 1, (int64_t[]){3}, "ConcatOffset 0");
  expect_shape(g, n, 1, 1, (int64_t[]){3}, "ConcatOffset 1");
  in2[0] = ph(g, "perm", FLOE_I64, 1, (int64_t[]){5});
  b = floe_node_begin(g, "InvertPermutation", "inv");
  floe_node_add_input(b, in2[0]);
  n = floe_node_finish(b);
  expect_shape(g, n, 0, 1, (int64_t[]){5}, "InvertPermutation");
  /* Also in the training section: BiasAddGrad's channel dim and AddN's merged shape. */
  in2[0] = ph(g, "ob", FLOE_F32, 4, (int64_t[]){2, 5, 6, 7});
  n = node(g, "BiasAddGrad", in2, 1, NULL);
  expect_shape(g, n, 0, 1, (int64_t[]){7}, "BiasAddGrad NHWC");
  Opts nchw = {1, {{"data_format", 's', 0, "NCHW"}}};
  n = node(g, "BiasAddGrad", in2, 1, &nchw);
  expect_shape(g, n, 0, 1, (int64_t[]){5}, "BiasAddGrad NCHW");
  in2[0] = u;
  in2[1] = ph(g, "a4", FLOE_F32, 2, (int64_t[]){4, -1});
  b = floe_node_begin(g, "AddN", "addn");
  floe_node_add_input_list(b, in2, 2);
  n = floe_node_finish(b);
  expect_shape(g, n, 0, 2, x43, "AddN");
  floe_graph_free(g);
}
END_TEST

/* Definite mismatches are graph-building errors naming the shapes. */
START_TEST(test_shape_errors) {
  struct {
    const char *op, *need1, *need2;
  } cases[] = {
      {"BroadcastTo", "[4,3]", "[2,3]"},   {"SumToShape", "[4,3]", "[2,3]"},
      {"ExpandReduced", "[5]", "[4,3]"},   {"PadGrad", "[4,3]", "dimension 1"},
      {"TileGrad", "[2,2]", "[4,3]"},      {"BiasAddGrad", "data_format", "NCWH"},
  };
  Opts bad_df = {1, {{"data_format", 's', 0, "NCWH"}}};
  for (int c = 0; c < 6; c++) {
    FloeGraph *g = floe_graph_new();
    FloeOutput x = ph(g, "x", FLOE_F32, 2, (int64_t[]){4, 3}), in[3] = {x};
    switch (c) {
      case 0:
      case 1: in[1] = cst(g, "s", ivec(FLOE_I32, 2, (int64_t[]){2, 3})); break;
      case 2:
        in[0] = ph(g, "r", FLOE_F32, 1, (int64_t[]){5});
        in[1] = cst(g, "s", ivec(FLOE_I32, 2, (int64_t[]){4, 3}));
        in[2] = cst(g, "a", iscalar(FLOE_I32, 1));
        break;
      case 3: in[1] = cst(g, "p", pads_t(2, (double[]){0, 0, 2, 2})); break;
      case 4: in[1] = cst(g, "m", ivec(FLOE_I32, 2, (int64_t[]){2, 2})); break;
      default: break; /* BiasAddGrad: x alone */
    }
    node(g, cases[c].op, in, c == 2 ? 3 : c == 5 ? 1 : 2, c == 5 ? &bad_df : NULL);
    expect_graph_error(g, cases[c].need1, cases[c].need2);
    floe_graph_free(g);
  }
}
END_TEST

static Suite *grad_array_suite(void) {
  Suite *s = suite_create("grad_array");
  TCase *tc = tcase_create("grad_array");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_broadcast_to);
  tcase_add_test(tc, test_sum_to_shape);
  tcase_add_test(tc, test_broadcast_sum_adjoint);
  tcase_add_test(tc, test_expand_reduced);
  tcase_add_test(tc, test_expand_reduced_adjoint);
  tcase_add_test(tc, test_invert_permutation);
  tcase_add_test(tc, test_concat_offset);
  tcase_add_test(tc, test_slice_grad);
  tcase_add_test(tc, test_slice_adjoint);
  tcase_add_test(tc, test_strided_slice_grad_literal);
  tcase_add_test(tc, test_strided_slice_grad);
  tcase_add_test(tc, test_gather_grad);
  tcase_add_test(tc, test_pad_grad);
  tcase_add_test(tc, test_tile_grad);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_shape_inference);
  tcase_add_test(tc, test_shape_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(grad_array_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
