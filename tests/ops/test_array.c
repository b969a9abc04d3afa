/* SPDX-License-Identifier: Apache-2.0 */
/* test_array.c - data-movement, shape and fill ops against plain reference loops.
 *
 * These ops move elements without arithmetic, so references copy bytes and outputs must
 * match them exactly, for every element size (bool/i8/u8, f16/bf16, f32/i32, f64/i64). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---------------------------------------------------------------------------------- */
/* Helpers. */

static const FloeDType all_dtypes[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_BF16, FLOE_I8,
                                       FLOE_U8,  FLOE_I32, FLOE_I64, FLOE_BOOL};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

/* One attribute of the node under test. */
typedef struct Attr {
  const char *name;
  char kind; /* 'i' int, 'f' float, 's' string, 'l' int list, 't' type, 'T' tensor */
  int64_t i;
  double f;
  const char *s;
  const int64_t *list;
  int n;
  FloeTensor *t;
} Attr;

typedef struct Attrs {
  int n;
  Attr a[6];
} Attrs;

static void set_attrs(FloeNodeBuilder *b, void *arg) {
  const Attrs *as = arg;
  for (int k = 0; k < as->n; k++) {
    const Attr *a = &as->a[k];
    switch (a->kind) {
      case 'i': floe_node_set_attr_int(b, a->name, a->i); break;
      case 'f': floe_node_set_attr_float(b, a->name, a->f); break;
      case 's': floe_node_set_attr_string(b, a->name, a->s); break;
      case 'l': floe_node_set_attr_int_list(b, a->name, a->list, a->n); break;
      case 't': floe_node_set_attr_type(b, a->name, (FloeDType)a->i); break;
      case 'T': floe_node_set_attr_tensor(b, a->name, a->t); break;
      default: ck_abort_msg("bad attr kind %c", a->kind);
    }
  }
}

static const Attrs *int_attr(Attrs *as, const char *name, int64_t v) {
  as->n = 1;
  as->a[0] = (Attr){.name = name, .kind = 'i', .i = v};
  return as;
}

/* Runs op; on success returns its outputs in outs. */
static floe_code run(const char *op, FloeTensor *const *ins, int n, const int *lists, int nl,
                     const Attrs *as, FloeTensor **outs, int nout, FloeStatus *st) {
  return harness_run_op(op, NULL, ins, n, lists, nl, as ? set_attrs : NULL, (void *)as, outs,
                        nout, st);
}

/* Runs a one-output op that must succeed. */
static FloeTensor *run_ok(const char *op, FloeTensor *const *ins, int n, const Attrs *as,
                          const char *what) {
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code rc = run(op, ins, n, NULL, 0, as, &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s (%s)", what, floe_code_name(rc), floe_status_message(st));
  floe_status_free(st);
  return out;
}

/* Runs an op that must fail with INVALID_ARGUMENT and a message holding n1 (and n2). */
static void expect_invalid(const char *op, FloeTensor *const *ins, int n, const int *lists,
                           int nl, const Attrs *as, int nout, const char *n1, const char *n2) {
  FloeStatus *st = floe_status_new();
  FloeTensor *outs[8] = {NULL};
  floe_code rc = run(op, ins, n, lists, nl, as, outs, nout, st);
  const char *msg = floe_status_message(st);
  ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "%s: code %s (%s), want INVALID_ARGUMENT", op,
                floe_code_name(rc), msg);
  for (int i = 0; i < nout; i++) ck_assert_ptr_null(outs[i]);
  if (n1) ck_assert_msg(strstr(msg, n1), "%s: message \"%s\" lacks \"%s\"", op, msg, n1);
  if (n2) ck_assert_msg(strstr(msg, n2), "%s: message \"%s\" lacks \"%s\"", op, msg, n2);
  floe_status_free(st);
}

static void release_all(FloeTensor **ts, int n) {
  for (int i = 0; i < n; i++) floe_tensor_release(ts[i]);
}

/* An index tensor (i32 or i64) of rank 1 (n values) or rank 0 (n < 0: one value). */
static FloeTensor *idx(FloeDType dt, int n, const int64_t *v) {
  int64_t d = n < 0 ? 1 : n;
  FloeTensor *t = harness_tensor(dt, n < 0 ? 0 : 1, &d, NULL);
  for (int64_t i = 0; i < d; i++) {
    if (dt == FLOE_I32)
      ((int32_t *)floe_tensor_data(t))[i] = (int32_t)v[i];
    else
      ((int64_t *)floe_tensor_data(t))[i] = v[i];
  }
  return t;
}

static FloeTensor *idx_scalar(FloeDType dt, int64_t v) {
  return idx(dt, -1, &v);
}

static size_t esize(const FloeTensor *t) {
  return floe_dtype_size(floe_tensor_dtype(t));
}

static char *elem(const FloeTensor *t, int64_t i) {
  return (char *)floe_tensor_data(t) + (size_t)i * esize(t);
}

/* Multi-index of flat index i in dims, and back. */
static void unravel(int64_t i, int rank, const int64_t *dims, int64_t *ix) {
  for (int k = rank - 1; k >= 0; k--) {
    ix[k] = i % dims[k];
    i /= dims[k];
  }
}

static int64_t ravel(int rank, const int64_t *dims, const int64_t *ix) {
  int64_t i = 0;
  for (int k = 0; k < rank; k++) i = i * dims[k] + ix[k];
  return i;
}

/* got must equal want bit for bit (dtype, shape, bytes). */
static void assert_same(const FloeTensor *got, const FloeTensor *want, const char *what) {
  ck_assert_msg(got != NULL, "%s: no output", what);
  ck_assert_msg(floe_tensor_dtype(got) == floe_tensor_dtype(want), "%s: dtype %s, want %s",
                what, floe_dtype_name(floe_tensor_dtype(got)),
                floe_dtype_name(floe_tensor_dtype(want)));
  FloeShape gs = floe_tensor_shape(got), ws = floe_tensor_shape(want);
  char a[128], b[128];
  bool same = gs.rank == ws.rank;
  for (int i = 0; same && i < gs.rank; i++) same = gs.dims[i] == ws.dims[i];
  ck_assert_msg(same, "%s: shape %s, want %s", what, floe_shape_str(&gs, a, sizeof a),
                floe_shape_str(&ws, b, sizeof b));
  /* One assertion per tensor: Check records every passing assertion. */
  size_t es = esize(want);
  int64_t n = floe_tensor_num_elements(want), i = 0;
  while (i < n && memcmp(elem(got, i), elem(want, i), es) == 0) i++;
  ck_assert_msg(i == n, "%s: element %lld is %g, want %g", what, (long long)i,
                i < n ? harness_get(got, i) : 0.0, i < n ? harness_get(want, i) : 0.0);
}

static const char *fmt(char *buf, size_t n, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, n, f, ap);
  va_end(ap);
  return buf;
}

/* Random data of dtype dt with both signs for the signed types. */
static FloeTensor *rnd(FloeDType dt, int rank, const int64_t *dims, uint64_t seed) {
  return harness_random(dt, rank, dims, seed, dt == FLOE_U8 ? 0 : -100, 100);
}

/* ---------------------------------------------------------------------------------- */
/* Const, Identity, NoOp. */

START_TEST(test_const) {
  const int64_t shapes[][3] = {{2, 3, 4}, {1, 1, 1}, {0, 5, 1}};
  for (size_t d = 0; d < N_DTYPES; d++) {
    for (int s = 0; s < 4; s++) {
      int rank = s < 3 ? 3 : 0;
      FloeTensor *v = rnd(all_dtypes[d], rank, s < 3 ? shapes[s] : NULL, 1 + s);
      Attrs as = {2, {{.name = "value", .kind = 'T', .t = v},
                      {.name = "dtype", .kind = 't', .i = all_dtypes[d]}}};
      char what[64];
      FloeTensor *out = run_ok("Const", NULL, 0, &as,
                               fmt(what, sizeof what, "Const %s #%d",
                                   floe_dtype_name(all_dtypes[d]), s));
      assert_same(out, v, what);
      floe_tensor_release(out);
      floe_tensor_release(v);
    }
  }
}
END_TEST

START_TEST(test_identity) {
  const int64_t dims[] = {3, 0, 2};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeTensor *xs[3] = {rnd(all_dtypes[d], 2, (int64_t[]){4, 5}, 3),
                         rnd(all_dtypes[d], 0, NULL, 4), rnd(all_dtypes[d], 3, dims, 5)};
    for (int i = 0; i < 3; i++) {
      FloeTensor *out = run_ok("Identity", &xs[i], 1, NULL, "Identity");
      assert_same(out, xs[i], "Identity");
      floe_tensor_release(out);
    }
    release_all(xs, 3);
  }
}
END_TEST

START_TEST(test_noop) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "noop");
  ck_assert_ptr_nonnull(floe_node_finish(b));
  FloeStatus *st = floe_status_new();
  FloeSession *s = harness_session(g, NULL);
  const char *targets[] = {"noop"};
  for (int i = 0; i < 3; i++)
    ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, targets, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Reshape, Squeeze, ExpandDims: same bytes, new shape. */

/* x reshaped to (rank, dims) by a plain copy. */
static FloeTensor *with_shape(const FloeTensor *x, int rank, const int64_t *dims) {
  FloeTensor *t = harness_tensor(floe_tensor_dtype(x), rank, dims, NULL);
  ck_assert_int_eq(floe_tensor_nbytes(t), floe_tensor_nbytes(x));
  if (floe_tensor_nbytes(t))
    memcpy(floe_tensor_data(t), floe_tensor_data(x), floe_tensor_nbytes(t));
  return t;
}

static void check_reshape(FloeDType dt, FloeDType sdt, int rank, const int64_t *dims, int srank,
                          const int64_t *shape, const int64_t *want) {
  FloeTensor *ins[2] = {rnd(dt, rank, dims, 7), idx(sdt, srank, shape)};
  FloeTensor *out = run_ok("Reshape", ins, 2, NULL, "Reshape");
  FloeTensor *ref = with_shape(ins[0], srank, want);
  assert_same(out, ref, "Reshape");
  floe_tensor_release(out);
  floe_tensor_release(ref);
  release_all(ins, 2);
}

START_TEST(test_reshape) {
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d], sdt = d % 2 ? FLOE_I64 : FLOE_I32;
    check_reshape(dt, sdt, 3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, -1}, (int64_t[]){4, 6});
    check_reshape(dt, sdt, 3, (int64_t[]){2, 3, 4}, 1, (int64_t[]){-1}, (int64_t[]){24});
    check_reshape(dt, sdt, 2, (int64_t[]){6, 4}, 4, (int64_t[]){2, 1, -1, 3},
                  (int64_t[]){2, 1, 4, 3});
    check_reshape(dt, sdt, 1, (int64_t[]){1}, 0, NULL, NULL);
    check_reshape(dt, sdt, 0, NULL, 3, (int64_t[]){1, -1, 1}, (int64_t[]){1, 1, 1});
    check_reshape(dt, sdt, 2, (int64_t[]){0, 3}, 3, (int64_t[]){3, 0, 7}, (int64_t[]){3, 0, 7});
  }
  /* Errors: counts that differ (naming both shapes), two -1, negative sizes. */
  FloeTensor *x = rnd(FLOE_F32, 2, (int64_t[]){2, 3}, 1);
  FloeTensor *ins[2] = {x, idx(FLOE_I32, 2, (int64_t[]){4, 2})};
  expect_invalid("Reshape", ins, 2, NULL, 0, NULL, 1, "[2,3]", "[4,2]");
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I64, 2, (int64_t[]){-1, 4});
  expect_invalid("Reshape", ins, 2, NULL, 0, NULL, 1, "[2,3]", "[-1,4]");
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I32, 3, (int64_t[]){-1, 2, -1});
  expect_invalid("Reshape", ins, 2, NULL, 0, NULL, 1, "[-1,2,-1]", NULL);
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I32, 2, (int64_t[]){-2, -3});
  expect_invalid("Reshape", ins, 2, NULL, 0, NULL, 1, "[-2,-3]", NULL);
  release_all(ins, 2);
}
END_TEST

static void check_squeeze(int rank, const int64_t *dims, int n, const int64_t *sq, int orank,
                          const int64_t *odims) {
  FloeTensor *x = rnd(FLOE_I32, rank, dims, 9);
  Attrs as = {n ? 1 : 0, {{.name = "squeeze_dims", .kind = 'l', .list = sq, .n = n}}};
  FloeTensor *out = run_ok("Squeeze", &x, 1, &as, "Squeeze");
  FloeTensor *ref = with_shape(x, orank, odims);
  assert_same(out, ref, "Squeeze");
  floe_tensor_release(out);
  floe_tensor_release(ref);
  floe_tensor_release(x);
}

START_TEST(test_squeeze_expand_dims) {
  check_squeeze(4, (int64_t[]){1, 3, 1, 2}, 0, NULL, 2, (int64_t[]){3, 2});
  check_squeeze(4, (int64_t[]){1, 3, 1, 2}, 1, (int64_t[]){2}, 3, (int64_t[]){1, 3, 2});
  check_squeeze(4, (int64_t[]){1, 3, 1, 2}, 2, (int64_t[]){-4, -2}, 2, (int64_t[]){3, 2});
  check_squeeze(3, (int64_t[]){1, 1, 1}, 0, NULL, 0, NULL);
  check_squeeze(3, (int64_t[]){1, 0, 1}, 0, NULL, 1, (int64_t[]){0});
  check_squeeze(2, (int64_t[]){4, 5}, 0, NULL, 2, (int64_t[]){4, 5});
  FloeTensor *x = rnd(FLOE_F32, 3, (int64_t[]){1, 3, 2}, 2);
  Attrs as = {1, {{.name = "squeeze_dims", .kind = 'l', .list = (int64_t[]){1}, .n = 1}}};
  expect_invalid("Squeeze", &x, 1, NULL, 0, &as, 1, "[1,3,2]", NULL);
  as.a[0].list = (int64_t[]){3};
  expect_invalid("Squeeze", &x, 1, NULL, 0, &as, 1, "[1,3,2]", NULL);

  /* ExpandDims at every valid axis, both signs. */
  const int64_t dims[2] = {3, 2};
  for (int64_t axis = -3; axis <= 2; axis++) {
    int64_t a = axis < 0 ? axis + 3 : axis, od[3];
    for (int i = 0, j = 0; i < 3; i++) od[i] = i == a ? 1 : dims[j++];
    FloeTensor *y = rnd(FLOE_F16, 2, dims, 3);
    Attrs ea;
    FloeTensor *out = run_ok("ExpandDims", &y, 1, int_attr(&ea, "axis", axis), "ExpandDims");
    FloeTensor *ref = with_shape(y, 3, od);
    assert_same(out, ref, "ExpandDims");
    release_all((FloeTensor *[]){out, ref, y}, 3);
  }
  FloeTensor *s = rnd(FLOE_I64, 0, NULL, 4);
  Attrs ea;
  FloeTensor *out = run_ok("ExpandDims", &s, 1, int_attr(&ea, "axis", -1), "ExpandDims scalar");
  FloeTensor *ref = with_shape(s, 1, (int64_t[]){1});
  assert_same(out, ref, "ExpandDims scalar");
  release_all((FloeTensor *[]){out, ref, s}, 3);
  expect_invalid("ExpandDims", &x, 1, NULL, 0, int_attr(&ea, "axis", 4), 1, "[1,3,2]", NULL);
  expect_invalid("ExpandDims", &x, 1, NULL, 0, int_attr(&ea, "axis", -5), 1, "[1,3,2]", NULL);
  floe_tensor_release(x);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Transpose. */

/* y[i_0..i_r) = x[j] with j[perm[k]] = i_k. */
static FloeTensor *ref_transpose(const FloeTensor *x, const int64_t *perm) {
  int r = floe_tensor_rank(x);
  const int64_t *xd = floe_tensor_dims(x);
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS], xi[FLOE_MAX_DIMS];
  for (int k = 0; k < r; k++) od[k] = xd[perm[k]];
  FloeTensor *y = harness_tensor(floe_tensor_dtype(x), r, od, NULL);
  for (int64_t i = 0; i < floe_tensor_num_elements(y); i++) {
    unravel(i, r, od, oi);
    for (int k = 0; k < r; k++) xi[perm[k]] = oi[k];
    memcpy(elem(y, i), elem(x, ravel(r, xd, xi)), esize(x));
  }
  return y;
}

static void check_transpose(FloeDType dt, int rank, const int64_t *dims, const int64_t *perm,
                            FloeDType pdt) {
  FloeTensor *ins[2] = {rnd(dt, rank, dims, 11), idx(pdt, rank, perm)};
  char what[128];
  fmt(what, sizeof what, "Transpose %s rank %d perm[0]=%lld", floe_dtype_name(dt), rank,
      rank ? (long long)perm[0] : -1LL);
  FloeTensor *out = run_ok("Transpose", ins, 2, NULL, what);
  FloeTensor *ref = ref_transpose(ins[0], perm);
  assert_same(out, ref, what);
  release_all((FloeTensor *[]){out, ref, ins[0], ins[1]}, 4);
}

/* Every permutation of [0, n) in lexicographic order: next_perm returns false at the end. */
static bool next_perm(int64_t *p, int n) {
  int i = n - 2;
  while (i >= 0 && p[i] > p[i + 1]) i--;
  if (i < 0) return false;
  int j = n - 1;
  while (p[j] < p[i]) j--;
  int64_t t = p[i];
  p[i] = p[j];
  p[j] = t;
  for (int a = i + 1, b = n - 1; a < b; a++, b--) {
    t = p[a];
    p[a] = p[b];
    p[b] = t;
  }
  return true;
}

START_TEST(test_transpose_2d) {
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {32, 32}, {33, 65}, {64, 3}, {0, 4}};
  for (size_t d = 0; d < N_DTYPES; d++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      check_transpose(all_dtypes[d], 2, shapes[s], (int64_t[]){1, 0},
                      s % 2 ? FLOE_I64 : FLOE_I32);
}
END_TEST

START_TEST(test_transpose_nd) {
  const int64_t shapes[][4] = {{2, 3, 4, 5}, {1, 3, 1, 5}, {5, 1, 40, 3}, {2, 0, 3, 1}};
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_U8};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int rank = 3; rank <= 4; rank++) {
      int64_t perm[4] = {0, 1, 2, 3};
      do
        check_transpose(dts[s], rank, shapes[s], perm, FLOE_I32);
      while (next_perm(perm, rank));
    }
  /* Rank 0, 1 and 6. */
  check_transpose(FLOE_F32, 0, NULL, NULL, FLOE_I32);
  check_transpose(FLOE_I64, 1, (int64_t[]){9}, (int64_t[]){0}, FLOE_I32);
  check_transpose(FLOE_BF16, 6, (int64_t[]){2, 3, 1, 4, 2, 3}, (int64_t[]){5, 3, 0, 4, 1, 2},
                  FLOE_I64);
}
END_TEST

START_TEST(test_transpose_large) {
  /* Beyond the threading threshold: tiles on several threads, and memcpy rows. */
  check_transpose(FLOE_F32, 2, (int64_t[]){300, 517}, (int64_t[]){1, 0}, FLOE_I32);
  check_transpose(FLOE_U8, 2, (int64_t[]){301, 400}, (int64_t[]){1, 0}, FLOE_I32);
  check_transpose(FLOE_F64, 3, (int64_t[]){40, 50, 61}, (int64_t[]){2, 0, 1}, FLOE_I32);
  check_transpose(FLOE_I32, 3, (int64_t[]){40, 50, 61}, (int64_t[]){1, 0, 2}, FLOE_I32);
  check_transpose(FLOE_F16, 4, (int64_t[]){8, 30, 20, 17}, (int64_t[]){0, 3, 1, 2}, FLOE_I64);
}
END_TEST

/* 4-byte tiles move as 8 x 8 register blocks where the CPU has AVX2 (pairs unpacked): channel
 * counts and images that are and are not multiples of 8 (whole blocks, then the rows and
 * columns past them), both ways between NCHW and NHWC, tiles of 8 to 31 on each side, and
 * channel shuffles. */
START_TEST(test_transpose_layouts) {
  const int64_t images[][4] = {{2, 58, 28, 28}, {1, 24, 7, 9}, {3, 16, 8, 8}, {1, 3, 33, 31}};
  for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
    check_transpose(FLOE_F32, 4, images[i], (int64_t[]){0, 2, 3, 1}, FLOE_I32);
    check_transpose(FLOE_I32, 4, images[i], (int64_t[]){0, 3, 1, 2}, FLOE_I64);
  }
  for (int64_t a = 8; a < 32; a += 5)
    for (int64_t b = 8; b < 32; b += 7)
      check_transpose(FLOE_F32, 2, (int64_t[]){a, b}, (int64_t[]){1, 0}, FLOE_I32);
  /* Channel shuffles in NHWC ([.., 2, C/2] -> [.., C/2, 2]: pairs interleaved, in long tiles
   * when the last dim is short), with C/2 a multiple of 8 and not, and 3 groups. */
  const int64_t shuffles[][4] = {{3, 5, 2, 116}, {2, 7, 2, 9}, {1, 4, 2, 1100}, {2, 3, 3, 50}};
  for (size_t i = 0; i < sizeof shuffles / sizeof shuffles[0]; i++) {
    check_transpose(FLOE_F32, 4, shuffles[i], (int64_t[]){0, 1, 3, 2}, FLOE_I32);
    check_transpose(FLOE_U8, 4, shuffles[i], (int64_t[]){0, 1, 3, 2}, FLOE_I32);
  }
}
END_TEST

START_TEST(test_transpose_errors) {
  FloeTensor *x = rnd(FLOE_F32, 3, (int64_t[]){2, 3, 4}, 1);
  const int64_t bad[][3] = {{0, 0, 1}, {0, 1, 3}, {-1, 0, 1}};
  for (int i = 0; i < 3; i++) {
    FloeTensor *ins[2] = {x, idx(FLOE_I32, 3, bad[i])};
    expect_invalid("Transpose", ins, 2, NULL, 0, NULL, 1, "[2,3,4]", NULL);
    floe_tensor_release(ins[1]);
  }
  FloeTensor *ins[2] = {x, idx(FLOE_I32, 2, (int64_t[]){1, 0})};
  expect_invalid("Transpose", ins, 2, NULL, 0, NULL, 1, "[2]", NULL);
  release_all(ins, 2);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Concat and Split. */

/* Concatenation of xs along axis by plain loops. */
static FloeTensor *ref_concat(FloeTensor *const *xs, int n, int axis) {
  int r = floe_tensor_rank(xs[0]);
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS];
  memcpy(od, floe_tensor_dims(xs[0]), sizeof(int64_t) * (size_t)r);
  od[axis] = 0;
  for (int i = 0; i < n; i++) od[axis] += floe_tensor_dim(xs[i], axis);
  FloeTensor *y = harness_tensor(floe_tensor_dtype(xs[0]), r, od, NULL);
  for (int64_t e = 0; e < floe_tensor_num_elements(y); e++) {
    unravel(e, r, od, oi);
    int i = 0;
    while (oi[axis] >= floe_tensor_dim(xs[i], axis)) oi[axis] -= floe_tensor_dim(xs[i++], axis);
    memcpy(elem(y, e), elem(xs[i], ravel(r, floe_tensor_dims(xs[i]), oi)), esize(y));
  }
  return y;
}

/* Concat of n inputs with the given sizes along axis (others from base). */
static void check_concat(FloeDType dt, int rank, const int64_t *base, int axis, int n,
                         const int64_t *sizes, FloeDType adt, int64_t axis_value) {
  FloeTensor *ins[40];
  for (int i = 0; i < n; i++) {
    int64_t d[FLOE_MAX_DIMS];
    memcpy(d, base, sizeof(int64_t) * (size_t)rank);
    d[axis] = sizes[i];
    ins[i] = rnd(dt, rank, d, 20 + i);
  }
  ins[n] = idx_scalar(adt, axis_value);
  Attrs as;
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  char what[96];
  fmt(what, sizeof what, "Concat %s n=%d axis=%lld", floe_dtype_name(dt), n,
      (long long)axis_value);
  floe_code rc = run("Concat", ins, n + 1, (int[]){n, 1}, 2, int_attr(&as, "N", n), &out, 1, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  FloeTensor *ref = ref_concat(ins, n, axis);
  assert_same(out, ref, what);
  release_all(ins, n + 1);
  release_all((FloeTensor *[]){out, ref}, 2);
  floe_status_free(st);
}

START_TEST(test_concat) {
  const int64_t base[3] = {3, 4, 5};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    check_concat(dt, 3, base, 0, 2, (int64_t[]){3, 1}, FLOE_I32, 0);
    check_concat(dt, 3, base, 1, 3, (int64_t[]){2, 0, 5}, FLOE_I64, 1);
    check_concat(dt, 3, base, 2, 3, (int64_t[]){1, 1, 1}, FLOE_I32, -1);
    check_concat(dt, 3, base, 0, 1, (int64_t[]){3}, FLOE_I32, -3);
    check_concat(dt, 1, (int64_t[]){0}, 0, 2, (int64_t[]){0, 4}, FLOE_I32, 0);
  }
  /* Many inputs (scratch list) and a large output (threads). */
  int64_t many[30];
  for (int i = 0; i < 30; i++) many[i] = i % 4;
  check_concat(FLOE_F32, 2, (int64_t[]){5, 0}, 1, 30, many, FLOE_I32, 1);
  check_concat(FLOE_F64, 2, (int64_t[]){300, 0}, 1, 3, (int64_t[]){100, 1, 150}, FLOE_I32, 1);
  check_concat(FLOE_U8, 2, (int64_t[]){0, 200}, 0, 2, (int64_t[]){300, 200}, FLOE_I64, 0);
  check_concat(FLOE_F32, 2, (int64_t[]){2, 0, 0}, 0, 3, (int64_t[]){0, 0, 0}, FLOE_I32, 0);
}
END_TEST

START_TEST(test_concat_errors) {
  Attrs as;
  FloeTensor *a = rnd(FLOE_F32, 2, (int64_t[]){2, 3}, 1);
  FloeTensor *b = rnd(FLOE_F32, 2, (int64_t[]){4, 4}, 2);
  FloeTensor *c = rnd(FLOE_F32, 3, (int64_t[]){2, 3, 1}, 3);
  FloeTensor *ax0 = idx_scalar(FLOE_I32, 0), *ax2 = idx_scalar(FLOE_I32, 2);
  expect_invalid("Concat", (FloeTensor *[]){a, b, ax0}, 3, (int[]){2, 1}, 2,
                 int_attr(&as, "N", 2), 1, "[4,4]", "[2,3]");
  expect_invalid("Concat", (FloeTensor *[]){a, c, ax0}, 3, (int[]){2, 1}, 2,
                 int_attr(&as, "N", 2), 1, "[2,3,1]", NULL);
  expect_invalid("Concat", (FloeTensor *[]){a, a, ax2}, 3, (int[]){2, 1}, 2,
                 int_attr(&as, "N", 2), 1, "[2,3]", NULL);
  FloeTensor *s = rnd(FLOE_F32, 0, NULL, 4);
  expect_invalid("Concat", (FloeTensor *[]){s, s, ax0}, 3, (int[]){2, 1}, 2,
                 int_attr(&as, "N", 2), 1, "[]", NULL);
  release_all((FloeTensor *[]){a, b, c, ax0, ax2, s}, 6);
}
END_TEST

static void check_split(FloeDType dt, int rank, const int64_t *dims, int64_t axis, int num) {
  FloeTensor *ins[2] = {rnd(dt, rank, dims, 30), idx_scalar(FLOE_I32, axis)};
  FloeTensor *outs[8] = {NULL};
  Attrs as;
  FloeStatus *st = floe_status_new();
  char what[96];
  fmt(what, sizeof what, "Split %s axis=%lld num=%d", floe_dtype_name(dt), (long long)axis, num);
  floe_code rc = run("Split", ins, 2, NULL, 0, int_attr(&as, "num_split", num), outs, num, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", what, floe_status_message(st));
  int a = (int)(axis < 0 ? axis + rank : axis);
  int64_t pd[FLOE_MAX_DIMS], pi[FLOE_MAX_DIMS];
  memcpy(pd, dims, sizeof(int64_t) * (size_t)rank);
  pd[a] /= num;
  for (int p = 0; p < num; p++) {
    FloeTensor *ref = harness_tensor(dt, rank, pd, NULL);
    for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++) {
      unravel(e, rank, pd, pi);
      pi[a] += p * pd[a];
      memcpy(elem(ref, e), elem(ins[0], ravel(rank, dims, pi)), esize(ref));
    }
    assert_same(outs[p], ref, what);
    floe_tensor_release(ref);
  }
  release_all(outs, num);
  release_all(ins, 2);
  floe_status_free(st);
}

START_TEST(test_split) {
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    check_split(dt, 3, (int64_t[]){4, 6, 2}, 1, 3);
    check_split(dt, 3, (int64_t[]){4, 6, 2}, 0, 2);
    check_split(dt, 3, (int64_t[]){4, 6, 2}, -1, 2);
    check_split(dt, 2, (int64_t[]){4, 6}, 1, 1);
    check_split(dt, 2, (int64_t[]){0, 6}, 1, 2);
  }
  check_split(FLOE_F32, 2, (int64_t[]){300, 400}, 1, 4);
  check_split(FLOE_I64, 2, (int64_t[]){300, 400}, 0, 5);
  /* Indivisible: names the shape and num_split. */
  FloeTensor *ins[2] = {rnd(FLOE_F32, 2, (int64_t[]){2, 5}, 1), idx_scalar(FLOE_I32, 1)};
  Attrs as;
  expect_invalid("Split", ins, 2, NULL, 0, int_attr(&as, "num_split", 2), 2, "[2,5]", "2");
  floe_tensor_release(ins[1]);
  ins[1] = idx_scalar(FLOE_I32, 2);
  expect_invalid("Split", ins, 2, NULL, 0, int_attr(&as, "num_split", 2), 2, "[2,5]", NULL);
  release_all(ins, 2);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Slice. */

static void check_slice(FloeDType dt, FloeDType idt, int rank, const int64_t *dims,
                        const int64_t *begin, const int64_t *size) {
  FloeTensor *ins[3] = {rnd(dt, rank, dims, 40), idx(idt, rank, begin), idx(idt, rank, size)};
  FloeTensor *out = run_ok("Slice", ins, 3, NULL, "Slice");
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS];
  for (int k = 0; k < rank; k++) od[k] = size[k] == -1 ? dims[k] - begin[k] : size[k];
  FloeTensor *ref = harness_tensor(dt, rank, od, NULL);
  for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++) {
    unravel(e, rank, od, oi);
    for (int k = 0; k < rank; k++) oi[k] += begin[k];
    memcpy(elem(ref, e), elem(ins[0], ravel(rank, dims, oi)), esize(ref));
  }
  assert_same(out, ref, "Slice");
  release_all(ins, 3);
  release_all((FloeTensor *[]){out, ref}, 2);
}

START_TEST(test_slice) {
  const int64_t dims[3] = {4, 5, 6};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d], it = d % 2 ? FLOE_I32 : FLOE_I64;
    check_slice(dt, it, 3, dims, (int64_t[]){1, 0, 2}, (int64_t[]){2, 5, 3});
    check_slice(dt, it, 3, dims, (int64_t[]){0, 0, 0}, (int64_t[]){-1, -1, -1});
    check_slice(dt, it, 3, dims, (int64_t[]){3, 4, 5}, (int64_t[]){1, 1, 1});
    check_slice(dt, it, 3, dims, (int64_t[]){2, 1, 0}, (int64_t[]){-1, 0, 6});
    check_slice(dt, it, 3, dims, (int64_t[]){4, 5, 6}, (int64_t[]){0, 0, 0});
    check_slice(dt, it, 1, (int64_t[]){7}, (int64_t[]){2}, (int64_t[]){-1});
    check_slice(dt, it, 0, NULL, NULL, NULL);
  }
  check_slice(FLOE_F32, FLOE_I32, 2, (int64_t[]){400, 300}, (int64_t[]){17, 5},
              (int64_t[]){350, 290});
  FloeTensor *ins[3] = {rnd(FLOE_F32, 2, (int64_t[]){4, 5}, 1),
                        idx(FLOE_I32, 2, (int64_t[]){1, 3}), idx(FLOE_I32, 2, (int64_t[]){2, 3})};
  expect_invalid("Slice", ins, 3, NULL, 0, NULL, 1, "[4,5]", NULL);
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I32, 2, (int64_t[]){-1, 0});
  expect_invalid("Slice", ins, 3, NULL, 0, NULL, 1, "[4,5]", NULL);
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I32, 3, (int64_t[]){0, 0, 0});
  expect_invalid("Slice", ins, 3, NULL, 0, NULL, 1, "[3]", NULL);
  release_all(ins, 3);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* StridedSlice. The reference follows Python's basic indexing (x[1:3, ..., None, -1]),
 * which TensorFlow's StridedSlice implements; a spec is turned into begin/end/strides and
 * masks the way TF's __getitem__ does. */

typedef struct Ix {
  char kind; /* 's' slice, 'i' index, 'n' new axis, 'e' ellipsis */
  int64_t start, stop, step;
  bool has_start, has_stop;
} Ix;

#define SL(a, b, c) ((Ix){'s', (a), (b), (c), true, true})
#define SL_FROM(a, c) ((Ix){'s', (a), 0, (c), true, false})
#define SL_TO(b, c) ((Ix){'s', 0, (b), (c), false, true})
#define SL_ALL(c) ((Ix){'s', 0, 0, (c), false, false})
#define IX(i) ((Ix){'i', (i), 0, 1, true, false})
#define NEWAXIS ((Ix){'n', 0, 0, 1, false, false})
#define ELLIPSIS ((Ix){'e', 0, 0, 1, false, false})

/* Python's slice.indices(len): first index, step and count. */
static void py_slice(const Ix *s, int64_t len, int64_t *first, int64_t *count) {
  int64_t st = s->step, a, b;
  if (st > 0) {
    a = s->has_start ? (s->start < 0 ? s->start + len : s->start) : 0;
    b = s->has_stop ? (s->stop < 0 ? s->stop + len : s->stop) : len;
    a = a < 0 ? 0 : a > len ? len : a;
    b = b < 0 ? 0 : b > len ? len : b;
    *count = b > a ? (b - a + st - 1) / st : 0;
  } else {
    a = s->has_start ? (s->start < 0 ? s->start + len : s->start) : len - 1;
    b = s->has_stop ? (s->stop < 0 ? s->stop + len : s->stop) : -1;
    a = a < -1 ? -1 : a > len - 1 ? len - 1 : a;
    if (s->has_stop) b = b < -1 ? -1 : b > len - 1 ? len - 1 : b;
    *count = a > b ? (a - b - st - 1) / -st : 0;
  }
  *first = a;
}

/* x[spec] by plain loops. */
static FloeTensor *ref_index(const FloeTensor *x, const Ix *spec, int n) {
  int r = floe_tensor_rank(x);
  const int64_t *xd = floe_tensor_dims(x);
  /* Expand the ellipsis (or append one) into full slices. */
  Ix full[32];
  int nf = 0, real = 0, has_ell = 0;
  for (int i = 0; i < n; i++) {
    real += spec[i].kind == 's' || spec[i].kind == 'i';
    has_ell |= spec[i].kind == 'e';
  }
  for (int i = 0; i <= n; i++) {
    if ((i < n && spec[i].kind == 'e') || (i == n && !has_ell)) {
      for (int k = 0; k < r - real; k++) full[nf++] = SL_ALL(1);
    } else if (i < n) {
      full[nf++] = spec[i];
    }
  }
  /* Per input dim: first, step; per output dim: the input dim it walks (-1 new axis). */
  int64_t first[FLOE_MAX_DIMS], step[FLOE_MAX_DIMS], od[FLOE_MAX_DIMS];
  int src[FLOE_MAX_DIMS], orank = 0, d = 0;
  for (int i = 0; i < nf; i++) {
    if (full[i].kind == 'n') {
      src[orank] = -1;
      od[orank++] = 1;
    } else if (full[i].kind == 'i') {
      first[d] = full[i].start < 0 ? full[i].start + xd[d] : full[i].start;
      step[d++] = 0;
    } else {
      int64_t cnt;
      py_slice(&full[i], xd[d], &first[d], &cnt);
      step[d] = full[i].step;
      src[orank] = d++;
      od[orank++] = cnt;
    }
  }
  ck_assert_int_eq(d, r);
  FloeTensor *y = harness_tensor(floe_tensor_dtype(x), orank, od, NULL);
  int64_t oi[FLOE_MAX_DIMS], xi[FLOE_MAX_DIMS];
  for (int64_t e = 0; e < floe_tensor_num_elements(y); e++) {
    unravel(e, orank, od, oi);
    for (int k = 0; k < r; k++) xi[k] = first[k];
    for (int k = 0; k < orank; k++)
      if (src[k] >= 0) xi[src[k]] += oi[k] * step[src[k]];
    memcpy(elem(y, e), elem(x, ravel(r, xd, xi)), esize(x));
  }
  return y;
}

/* Runs StridedSlice for x[spec] (begin/end/strides of index type it). */
static floe_code run_strided(FloeTensor *x, const Ix *spec, int n, FloeDType it,
                             FloeTensor **out, FloeStatus *st) {
  int64_t b[32], e[32], s[32];
  int64_t masks[5] = {0}; /* begin, end, ellipsis, new_axis, shrink */
  for (int i = 0; i < n; i++) {
    const Ix *p = &spec[i];
    b[i] = p->kind == 's' || p->kind == 'i' ? p->start : 0;
    e[i] = p->kind == 's' ? p->stop : p->kind == 'i' ? p->start + 1 : 0;
    s[i] = p->kind == 's' ? p->step : 1;
    if (p->kind == 's' && !p->has_start) masks[0] |= 1 << i;
    if (p->kind == 's' && !p->has_stop) masks[1] |= 1 << i;
    if (p->kind == 'e') masks[2] |= 1 << i;
    if (p->kind == 'n') masks[3] |= 1 << i;
    if (p->kind == 'i') masks[4] |= 1 << i;
  }
  FloeTensor *ins[4] = {x, idx(it, n, b), idx(it, n, e), idx(it, n, s)};
  static const char *const names[5] = {"begin_mask", "end_mask", "ellipsis_mask",
                                       "new_axis_mask", "shrink_axis_mask"};
  Attrs as = {5, {{0}}};
  for (int i = 0; i < 5; i++) as.a[i] = (Attr){.name = names[i], .kind = 'i', .i = masks[i]};
  floe_code rc = run("StridedSlice", ins, 4, NULL, 0, &as, out, 1, st);
  release_all(ins + 1, 3);
  return rc;
}

static void check_strided(FloeDType dt, int rank, const int64_t *dims, const Ix *spec, int n,
                          const char *what) {
  FloeTensor *x = rnd(dt, rank, dims, 50), *out = NULL;
  FloeStatus *st = floe_status_new();
  char w[128];
  fmt(w, sizeof w, "StridedSlice %s %s", floe_dtype_name(dt), what);
  floe_code rc = run_strided(x, spec, n, dt == FLOE_F32 ? FLOE_I64 : FLOE_I32, &out, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", w, floe_status_message(st));
  FloeTensor *ref = ref_index(x, spec, n);
  assert_same(out, ref, w);
  release_all((FloeTensor *[]){x, out, ref}, 3);
  floe_status_free(st);
}

#define CHECK_SS(dt, rank, dims, what, ...)                                                  \
  do {                                                                                       \
    const Ix spec_[] = {__VA_ARGS__};                                                        \
    check_strided(dt, rank, dims, spec_, (int)(sizeof spec_ / sizeof spec_[0]), what);       \
  } while (0)

START_TEST(test_strided_slice_tf_examples) {
  /* The examples of tf.strided_slice's documentation, with their literal results. */
  const int32_t t[18] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6};
  FloeTensor *x = harness_i32(3, (int64_t[]){3, 2, 3}, t);
  struct {
    int64_t b[3], e[3], s[3];
    int rank;
    int64_t od[3];
    int32_t want[6];
  } cases[] = {
      {{1, 0, 0}, {2, 1, 3}, {1, 1, 1}, 3, {1, 1, 3}, {3, 3, 3}},
      {{1, 0, 0}, {2, 2, 3}, {1, 1, 1}, 3, {1, 2, 3}, {3, 3, 3, 4, 4, 4}},
      {{1, -1, 0}, {2, -3, 3}, {1, -1, 1}, 3, {1, 2, 3}, {4, 4, 4, 3, 3, 3}},
  };
  for (int c = 0; c < 3; c++) {
    FloeTensor *ins[4] = {x, idx(FLOE_I32, 3, cases[c].b), idx(FLOE_I32, 3, cases[c].e),
                          idx(FLOE_I32, 3, cases[c].s)};
    FloeTensor *out = run_ok("StridedSlice", ins, 4, NULL, "tf example");
    FloeTensor *want = harness_i32(cases[c].rank, cases[c].od, cases[c].want);
    assert_same(out, want, "tf.strided_slice example");
    release_all(ins + 1, 3);
    release_all((FloeTensor *[]){out, want}, 2);
  }
  floe_tensor_release(x);
}
END_TEST

START_TEST(test_strided_slice) {
  const int64_t d3[3] = {4, 5, 6};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    CHECK_SS(dt, 3, d3, "[1:3, :, ::2]", SL(1, 3, 1), SL_ALL(1), SL_ALL(2));
    CHECK_SS(dt, 3, d3, "[::-1]", SL_ALL(-1));
    CHECK_SS(dt, 3, d3, "[-1]", IX(-1));
    CHECK_SS(dt, 3, d3, "[..., 0]", ELLIPSIS, IX(0));
    CHECK_SS(dt, 3, d3, "[:, None, 1:4]", SL_ALL(1), NEWAXIS, SL(1, 4, 1));
    CHECK_SS(dt, 3, d3, "[None, ..., None]", NEWAXIS, ELLIPSIS, NEWAXIS);
    CHECK_SS(dt, 3, d3, "[2, -2, ::-2]", IX(2), IX(-2), SL_ALL(-2));
    CHECK_SS(dt, 3, d3, "[1:3, ..., ::-1]", SL(1, 3, 1), ELLIPSIS, SL_ALL(-1));
  }
  CHECK_SS(FLOE_F32, 3, d3, "[10:20] (clamped: empty)", SL(10, 20, 1));
  CHECK_SS(FLOE_F32, 3, d3, "[-100:100:3]", SL(-100, 100, 3));
  CHECK_SS(FLOE_F32, 3, d3, "[::-3, 1]", SL_ALL(-3), IX(1));
  CHECK_SS(FLOE_F32, 3, d3, "[..., None]", ELLIPSIS, NEWAXIS);
  CHECK_SS(FLOE_F32, 3, d3, "[:, :, :] (whole)", SL_ALL(1), SL_ALL(1), SL_ALL(1));
  CHECK_SS(FLOE_F32, 3, d3, "[3:0:-1, 4::-2]", SL(3, 0, -1), SL_FROM(4, -2));
  CHECK_SS(FLOE_F32, 3, d3, "[0:0]", SL(0, 0, 1));
  CHECK_SS(FLOE_F32, 3, d3, "[:2, None, -1, None, ::-5]", SL_TO(2, 1), NEWAXIS, IX(-1),
           NEWAXIS, SL_ALL(-5));
  CHECK_SS(FLOE_F32, 3, d3, "[-1:-5:-1, ..., 5:-100:-2]", SL(-1, -5, -1), ELLIPSIS,
           SL(5, -100, -2));
  CHECK_SS(FLOE_F32, 3, d3, "[1, ..., 2, 3]", IX(1), ELLIPSIS, IX(2), IX(3));
  CHECK_SS(FLOE_I64, 3, d3, "[1:2:3, 4:1:1]", SL(1, 2, 3), SL(4, 1, 1));
  CHECK_SS(FLOE_F64, 1, (int64_t[]){7}, "[5:2:-1]", SL(5, 2, -1));
  CHECK_SS(FLOE_F64, 0, NULL, "scalar[None]", NEWAXIS);
  CHECK_SS(FLOE_F64, 0, NULL, "scalar[...]", ELLIPSIS);
  CHECK_SS(FLOE_I8, 2, ((int64_t[]){0, 3}), "empty[:, ::-1]", SL_ALL(1), SL_ALL(-1));
  /* Large: threads, with a negative innermost stride and a sliced row. */
  CHECK_SS(FLOE_F32, 2, ((int64_t[]){300, 400}), "big[::-1, 3:-3]", SL_ALL(-1), SL(3, -3, 1));
  CHECK_SS(FLOE_F16, 2, ((int64_t[]){300, 400}), "big[1:, ::-2]", SL_FROM(1, 1), SL_ALL(-2));
}
END_TEST

START_TEST(test_strided_slice_errors) {
  FloeTensor *x = rnd(FLOE_F32, 3, (int64_t[]){4, 5, 6}, 1), *out = NULL;
  FloeStatus *st = floe_status_new();
  struct {
    Ix spec[3];
    int n;
    const char *needle;
  } bad[] = {
      {{SL(0, 2, 0)}, 1, "strides"},
      {{IX(4)}, 1, "[4,5,6]"},
      {{IX(-5)}, 1, "[4,5,6]"},
      {{ELLIPSIS, ELLIPSIS}, 2, "ellipsis"},
  };
  for (int i = 0; i < 4; i++) {
    floe_code rc = run_strided(x, bad[i].spec, bad[i].n, FLOE_I32, &out, st);
    ck_assert_msg(rc == FLOE_INVALID_ARGUMENT, "case %d: %s (%s)", i, floe_code_name(rc),
                  floe_status_message(st));
    ck_assert_msg(strstr(floe_status_message(st), bad[i].needle), "case %d: \"%s\" lacks %s", i,
                  floe_status_message(st), bad[i].needle);
  }
  /* Too many entries, and lengths that differ. */
  Ix four[4] = {IX(0), IX(0), IX(0), IX(0)};
  ck_assert_int_eq(run_strided(x, four, 4, FLOE_I32, &out, st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "[4,5,6]"), "%s", floe_status_message(st));
  FloeTensor *ins[4] = {x, idx(FLOE_I32, 2, (int64_t[]){0, 0}), idx(FLOE_I32, 1, (int64_t[]){1}),
                        idx(FLOE_I32, 2, (int64_t[]){1, 1})};
  expect_invalid("StridedSlice", ins, 4, NULL, 0, NULL, 1, NULL, NULL);
  release_all(ins + 1, 3);
  /* A shrunk (indexed) dim with a negative stride. */
  ins[1] = idx(FLOE_I32, 1, (int64_t[]){1});
  ins[2] = idx(FLOE_I32, 1, (int64_t[]){2});
  ins[3] = idx(FLOE_I32, 1, (int64_t[]){-1});
  Attrs as;
  expect_invalid("StridedSlice", ins, 4, NULL, 0, int_attr(&as, "shrink_axis_mask", 1), 1,
                 "stride", NULL);
  release_all(ins, 4);
  floe_status_free(st);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Gather. */

static void check_gather(FloeDType dt, int prank, const int64_t *pd, FloeDType it, int irank,
                         const int64_t *id, int64_t axis) {
  FloeTensor *p = rnd(dt, prank, pd, 60);
  int a = (int)(axis < 0 ? axis + prank : axis);
  FloeTensor *ind = harness_random(it, irank, id, 61, 0, (double)pd[a]);
  FloeTensor *ins[2] = {p, ind};
  Attrs as;
  char what[96];
  fmt(what, sizeof what, "Gather %s axis=%lld irank=%d", floe_dtype_name(dt), (long long)axis,
      irank);
  FloeTensor *out = run_ok("Gather", ins, 2, int_attr(&as, "axis", axis), what);
  /* output = params[:a] + indices + params[a+1:] */
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS], pi[FLOE_MAX_DIMS], ii[FLOE_MAX_DIMS];
  int orank = 0;
  for (int k = 0; k < a; k++) od[orank++] = pd[k];
  for (int k = 0; k < irank; k++) od[orank++] = id[k];
  for (int k = a + 1; k < prank; k++) od[orank++] = pd[k];
  FloeTensor *ref = harness_tensor(dt, orank, od, NULL);
  for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++) {
    unravel(e, orank, od, oi);
    for (int k = 0; k < a; k++) pi[k] = oi[k];
    for (int k = 0; k < irank; k++) ii[k] = oi[a + k];
    pi[a] = (int64_t)harness_get(ind, ravel(irank, id, ii));
    for (int k = a + 1; k < prank; k++) pi[k] = oi[irank + k - 1];
    memcpy(elem(ref, e), elem(p, ravel(prank, pd, pi)), esize(ref));
  }
  assert_same(out, ref, what);
  release_all((FloeTensor *[]){p, ind, out, ref}, 4);
}

START_TEST(test_gather) {
  const int64_t pd[3] = {5, 4, 3};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    check_gather(dt, 3, pd, FLOE_I32, 1, (int64_t[]){7}, 0);
    check_gather(dt, 3, pd, FLOE_I64, 2, (int64_t[]){2, 3}, 1);
    check_gather(dt, 3, pd, FLOE_I32, 0, NULL, -1);
    check_gather(dt, 1, (int64_t[]){9}, FLOE_I64, 1, (int64_t[]){4}, 0);
    check_gather(dt, 3, pd, FLOE_I32, 1, (int64_t[]){0}, 2);
  }
  check_gather(FLOE_F32, 2, (int64_t[]){5000, 16}, FLOE_I64, 1, (int64_t[]){3000}, 0);
  check_gather(FLOE_F16, 2, (int64_t[]){300, 500}, FLOE_I32, 1, (int64_t[]){400}, 1);
  /* Out of range: names the index and the bound. */
  FloeTensor *ins[2] = {rnd(FLOE_F32, 2, (int64_t[]){4, 3}, 1),
                        idx(FLOE_I32, 3, (int64_t[]){0, 2, 4})};
  Attrs as;
  expect_invalid("Gather", ins, 2, NULL, 0, int_attr(&as, "axis", 0), 1, "indices[2] = 4",
                 "[0, 4)");
  floe_tensor_release(ins[1]);
  ins[1] = idx(FLOE_I64, 2, (int64_t[]){-1, 0});
  expect_invalid("Gather", ins, 2, NULL, 0, int_attr(&as, "axis", 1), 1, "= -1", "[0, 3)");
  expect_invalid("Gather", ins, 2, NULL, 0, int_attr(&as, "axis", 2), 1, "[4,3]", NULL);
  release_all(ins, 2);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Pad. */

static void check_pad(FloeDType dt, int rank, const int64_t *dims, const int64_t *pads,
                      const char *mode, double value, FloeDType pdt) {
  FloeTensor *x = rnd(dt, rank, dims, 70);
  FloeTensor *pt = harness_tensor(pdt, 2, (int64_t[]){rank, 2}, NULL);
  for (int i = 0; i < 2 * rank; i++) {
    if (pdt == FLOE_I32)
      ((int32_t *)floe_tensor_data(pt))[i] = (int32_t)pads[i];
    else
      ((int64_t *)floe_tensor_data(pt))[i] = pads[i];
  }
  bool reflect = strcmp(mode, "REFLECT") == 0;
  Attrs as = {2, {{.name = "mode", .kind = 's', .s = mode},
                  {.name = "constant_value", .kind = 'f', .f = value}}};
  char what[96];
  fmt(what, sizeof what, "Pad %s %s rank %d", floe_dtype_name(dt), mode, rank);
  FloeTensor *out = run_ok("Pad", (FloeTensor *[]){x, pt}, 2, &as, what);
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS];
  for (int k = 0; k < rank; k++) od[k] = pads[2 * k] + dims[k] + pads[2 * k + 1];
  /* The padding value in dt: one element converted the way the op documents. */
  FloeTensor *cv = harness_tensor(dt, 0, NULL, NULL);
  void *c = floe_tensor_data(cv);
  switch (dt) {
    case FLOE_F32: *(float *)c = (float)value; break;
    case FLOE_F64: *(double *)c = value; break;
    case FLOE_F16: *(uint16_t *)c = floe_f32_to_f16((float)value); break;
    case FLOE_BF16: *(uint16_t *)c = floe_f32_to_bf16((float)value); break;
    case FLOE_I8: *(int8_t *)c = (int8_t)value; break;
    case FLOE_U8: *(uint8_t *)c = (uint8_t)value; break;
    case FLOE_I32: *(int32_t *)c = (int32_t)value; break;
    case FLOE_I64: *(int64_t *)c = (int64_t)value; break;
    default: *(uint8_t *)c = value != 0; break;
  }
  FloeTensor *ref = harness_tensor(dt, rank, od, NULL);
  for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++) {
    unravel(e, rank, od, oi);
    bool inside = true;
    for (int k = 0; k < rank; k++) {
      int64_t i = oi[k] - pads[2 * k];
      if (reflect) {
        if (i < 0) i = -i;
        if (i >= dims[k]) i = 2 * (dims[k] - 1) - i;
      }
      inside &= i >= 0 && i < dims[k];
      oi[k] = i;
    }
    memcpy(elem(ref, e), inside ? elem(x, ravel(rank, dims, oi)) : (char *)c, esize(ref));
  }
  assert_same(out, ref, what);
  release_all((FloeTensor *[]){x, pt, out, ref, cv}, 5);
}

START_TEST(test_pad) {
  const int64_t d3[3] = {3, 4, 5};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d], pt = d % 2 ? FLOE_I64 : FLOE_I32;
    check_pad(dt, 3, d3, (int64_t[]){1, 2, 0, 1, 3, 0}, "CONSTANT", 0, pt);
    check_pad(dt, 3, d3, (int64_t[]){0, 1, 2, 2, 1, 1}, "CONSTANT", 7.5, pt);
    check_pad(dt, 3, d3, (int64_t[]){2, 1, 3, 3, 4, 2}, "REFLECT", 0, pt);
    check_pad(dt, 1, (int64_t[]){6}, (int64_t[]){5, 5}, "REFLECT", 0, pt);
    check_pad(dt, 2, (int64_t[]){0, 3}, (int64_t[]){1, 1, 2, 0}, "CONSTANT", 1, pt);
    check_pad(dt, 2, (int64_t[]){2, 3}, (int64_t[]){0, 0, 0, 0}, "REFLECT", 0, pt);
    check_pad(dt, 0, NULL, NULL, "CONSTANT", 3, pt);
  }
  check_pad(FLOE_F32, 2, (int64_t[]){200, 300}, (int64_t[]){3, 4, 5, 6}, "CONSTANT", -2, FLOE_I32);
  check_pad(FLOE_F64, 2, (int64_t[]){200, 300}, (int64_t[]){3, 4, 5, 6}, "REFLECT", 0, FLOE_I64);
  check_pad(FLOE_I32, 1, (int64_t[]){3}, (int64_t[]){2, 2}, "REFLECT", 0, FLOE_I32);
  /* Errors: negative, REFLECT too wide, bad paddings shape, unknown mode. */
  FloeTensor *x = rnd(FLOE_F32, 2, (int64_t[]){2, 3}, 1);
  Attrs as = {1, {{.name = "mode", .kind = 's', .s = "CONSTANT"}}};
  FloeTensor *p1 = idx(FLOE_I32, 4, (int64_t[]){0, -1, 0, 0});
  FloeTensor *p = floe_tensor_reshape(p1, 2, (int64_t[]){2, 2}, NULL);
  expect_invalid("Pad", (FloeTensor *[]){x, p}, 2, NULL, 0, &as, 1, "[2,3]", NULL);
  release_all((FloeTensor *[]){p, p1}, 2);
  p1 = idx(FLOE_I32, 4, (int64_t[]){0, 0, 3, 0});
  p = floe_tensor_reshape(p1, 2, (int64_t[]){2, 2}, NULL);
  as.a[0].s = "REFLECT";
  expect_invalid("Pad", (FloeTensor *[]){x, p}, 2, NULL, 0, &as, 1, "[2,3]", NULL);
  release_all((FloeTensor *[]){p, p1}, 2);
  p = idx(FLOE_I32, 4, (int64_t[]){0, 0, 1, 0});
  expect_invalid("Pad", (FloeTensor *[]){x, p}, 2, NULL, 0, &as, 1, "[4]", NULL);
  floe_tensor_release(p);
  p1 = idx(FLOE_I32, 4, (int64_t[]){0, 0, 1, 0});
  p = floe_tensor_reshape(p1, 2, (int64_t[]){2, 2}, NULL);
  as.a[0].s = "WRAP";
  FloeStatus *st = floe_status_new();
  FloeTensor *out = NULL;
  floe_code rc = run("Pad", (FloeTensor *[]){x, p}, 2, NULL, 0, &as, &out, 1, st);
  ck_assert_msg(rc != FLOE_OK && strstr(floe_status_message(st), "WRAP"), "%s",
                floe_status_message(st));
  floe_status_free(st);
  release_all((FloeTensor *[]){p, p1, x}, 3);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Tile. */

static void check_tile(FloeDType dt, int rank, const int64_t *dims, const int64_t *mult) {
  FloeTensor *x = rnd(dt, rank, dims, 80);
  FloeTensor *m = idx(dt == FLOE_F32 ? FLOE_I64 : FLOE_I32, rank, mult);
  char what[96];
  fmt(what, sizeof what, "Tile %s rank %d", floe_dtype_name(dt), rank);
  FloeTensor *out = run_ok("Tile", (FloeTensor *[]){x, m}, 2, NULL, what);
  int64_t od[FLOE_MAX_DIMS], oi[FLOE_MAX_DIMS];
  for (int k = 0; k < rank; k++) od[k] = dims[k] * mult[k];
  FloeTensor *ref = harness_tensor(dt, rank, od, NULL);
  for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++) {
    unravel(e, rank, od, oi);
    for (int k = 0; k < rank; k++) oi[k] %= dims[k];
    memcpy(elem(ref, e), elem(x, ravel(rank, dims, oi)), esize(ref));
  }
  assert_same(out, ref, what);
  release_all((FloeTensor *[]){x, m, out, ref}, 4);
}

START_TEST(test_tile) {
  const int64_t d3[3] = {2, 3, 4};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    check_tile(dt, 3, d3, (int64_t[]){1, 2, 3});
    check_tile(dt, 3, d3, (int64_t[]){3, 1, 1});
    check_tile(dt, 3, d3, (int64_t[]){1, 1, 1});
    check_tile(dt, 3, d3, (int64_t[]){2, 0, 1});
    check_tile(dt, 3, (int64_t[]){1, 3, 1}, (int64_t[]){4, 1, 5});
    check_tile(dt, 1, (int64_t[]){1}, (int64_t[]){9});
    check_tile(dt, 0, NULL, NULL);
  }
  check_tile(FLOE_F32, 2, (int64_t[]){100, 100}, (int64_t[]){3, 2});
  check_tile(FLOE_U8, 3, (int64_t[]){50, 1, 70}, (int64_t[]){2, 5, 1});
  FloeTensor *x = rnd(FLOE_F32, 2, (int64_t[]){2, 3}, 1);
  FloeTensor *m = idx(FLOE_I32, 2, (int64_t[]){1, -2});
  expect_invalid("Tile", (FloeTensor *[]){x, m}, 2, NULL, 0, NULL, 1, "[2,3]", NULL);
  floe_tensor_release(m);
  m = idx(FLOE_I32, 3, (int64_t[]){1, 1, 1});
  expect_invalid("Tile", (FloeTensor *[]){x, m}, 2, NULL, 0, NULL, 1, "[3]", NULL);
  release_all((FloeTensor *[]){x, m}, 2);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Shape, Size, Rank. */

START_TEST(test_shape_size_rank) {
  const int64_t shapes[][4] = {{2, 3, 4, 5}, {7, 0, 1, 1}};
  const int ranks[] = {4, 2, 0};
  for (int s = 0; s < 3; s++) {
    int r = ranks[s];
    const int64_t *dims = s < 2 ? shapes[s] : NULL;
    FloeTensor *x = rnd(s ? FLOE_BOOL : FLOE_F16, r, dims, 1);
    int64_t n = 1;
    for (int k = 0; k < r; k++) n *= dims[k];
    for (int t = 0; t < 2; t++) {
      FloeDType ot = t ? FLOE_I64 : FLOE_I32;
      Attrs as = {1, {{.name = "out_type", .kind = 't', .i = ot}}};
      FloeTensor *out = run_ok("Shape", &x, 1, &as, "Shape");
      FloeTensor *want = idx(ot, r, dims);
      assert_same(out, want, "Shape");
      release_all((FloeTensor *[]){out, want}, 2);
      out = run_ok("Size", &x, 1, &as, "Size");
      want = idx_scalar(ot, n);
      assert_same(out, want, "Size");
      release_all((FloeTensor *[]){out, want}, 2);
    }
    FloeTensor *out = run_ok("Rank", &x, 1, NULL, "Rank");
    FloeTensor *want = idx_scalar(FLOE_I32, r);
    assert_same(out, want, "Rank");
    release_all((FloeTensor *[]){out, want, x}, 3);
  }
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* Fill, ZerosLike, OnesLike. */

START_TEST(test_fill) {
  const int64_t shapes[][3] = {{2, 3, 4}, {3, 0, 2}, {400, 300, 1}};
  for (size_t d = 0; d < N_DTYPES; d++) {
    FloeDType dt = all_dtypes[d];
    for (int s = 0; s < 4; s++) {
      int r = s < 3 ? 3 : 0;
      FloeTensor *v = rnd(dt, 0, NULL, 90 + d);
      FloeTensor *dims = idx(s % 2 ? FLOE_I64 : FLOE_I32, r, s < 3 ? shapes[s] : NULL);
      FloeTensor *out = run_ok("Fill", (FloeTensor *[]){dims, v}, 2, NULL, "Fill");
      FloeTensor *ref = harness_tensor(dt, r, s < 3 ? shapes[s] : NULL, NULL);
      for (int64_t e = 0; e < floe_tensor_num_elements(ref); e++)
        memcpy(elem(ref, e), floe_tensor_data(v), esize(v));
      assert_same(out, ref, "Fill");
      release_all((FloeTensor *[]){v, dims, out, ref}, 4);
    }
  }
  FloeTensor *v = rnd(FLOE_F32, 1, (int64_t[]){1}, 1);
  FloeTensor *dims = idx(FLOE_I32, 2, (int64_t[]){2, 2});
  expect_invalid("Fill", (FloeTensor *[]){dims, v}, 2, NULL, 0, NULL, 1, "[1]", NULL);
  floe_tensor_release(v);
  floe_tensor_release(dims);
  v = rnd(FLOE_F32, 0, NULL, 1);
  dims = idx(FLOE_I32, 2, (int64_t[]){2, -2});
  expect_invalid("Fill", (FloeTensor *[]){dims, v}, 2, NULL, 0, NULL, 1, "[2,-2]", NULL);
  release_all((FloeTensor *[]){v, dims}, 2);
}
END_TEST

START_TEST(test_zeros_ones_like) {
  const int64_t shapes[][2] = {{3, 5}, {0, 4}, {300, 200}};
  for (size_t d = 0; d < N_DTYPES; d++)
    for (int s = 0; s < 4; s++) {
      FloeTensor *x = rnd(all_dtypes[d], s < 3 ? 2 : 0, s < 3 ? shapes[s] : NULL, 5);
      for (int one = 0; one < 2; one++) {
        char what[64];
        fmt(what, sizeof what, "%s %s #%d", one ? "OnesLike" : "ZerosLike",
            floe_dtype_name(all_dtypes[d]), s);
        FloeTensor *out = run_ok(one ? "OnesLike" : "ZerosLike", &x, 1, NULL, what);
        FloeTensor *want = harness_tensor(all_dtypes[d], floe_tensor_rank(x),
                                          floe_tensor_dims(x), NULL);
        for (int64_t e = 0; one && e < floe_tensor_num_elements(want); e++) {
          void *w = elem(want, e);
          switch (all_dtypes[d]) {
            case FLOE_F32: *(float *)w = 1; break;
            case FLOE_F64: *(double *)w = 1; break;
            case FLOE_F16: *(uint16_t *)w = floe_f32_to_f16(1); break;
            case FLOE_BF16: *(uint16_t *)w = floe_f32_to_bf16(1); break;
            case FLOE_I32: *(int32_t *)w = 1; break;
            case FLOE_I64: *(int64_t *)w = 1; break;
            default: *(uint8_t *)w = 1; break;
          }
        }
        assert_same(out, want, what);
        release_all((FloeTensor *[]){out, want}, 2);
      }
      floe_tensor_release(x);
    }
}
END_TEST

/* ---------------------------------------------------------------------------------- */

static Suite *array_suite(void) {
  Suite *s = suite_create("array");
  struct {
    const char *name;
    const TTest *test;
  } cases[] = {
      {"sources", test_const},         {"sources", test_identity},
      {"sources", test_noop},          {"views", test_reshape},
      {"views", test_squeeze_expand_dims}, {"transpose", test_transpose_2d},
      {"transpose", test_transpose_nd}, {"transpose", test_transpose_large},
      {"transpose", test_transpose_layouts},
      {"transpose", test_transpose_errors}, {"concat_split", test_concat},
      {"concat_split", test_concat_errors}, {"concat_split", test_split},
      {"slice", test_slice},           {"slice", test_strided_slice_tf_examples},
      {"slice", test_strided_slice},   {"slice", test_strided_slice_errors},
      {"gather", test_gather},         {"pad_tile", test_pad},
      {"pad_tile", test_tile},         {"shape", test_shape_size_rank},
      {"fill", test_fill},             {"fill", test_zeros_ones_like},
  };
  TCase *tc = NULL;
  const char *cur = "";
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cases[i].name, cur) != 0) {
      tc = tcase_create(cases[i].name);
      tcase_set_timeout(tc, 120);
      suite_add_tcase(s, tc);
      cur = cases[i].name;
    }
    tcase_add_test(tc, cases[i].test);
  }
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(array_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
