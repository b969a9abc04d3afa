/* SPDX-License-Identifier: Apache-2.0 */
/* test_buffer_reuse.c - buffer reuse (ctx_reuse_input, ABI 1.7): an elementwise kernel
 * writes its output over an input whose last reader it is. A chain of unary, binary and
 * gradient ops then holds fewer bytes at once (the step's peak of live tensor bytes, worked
 * out by hand below) and gives the same bits as with reuse off (FLOE_OPT_BUFFER_REUSE=0) and
 * the values computed here in C. What must never be written over: a fetched intermediate,
 * a value another reader still needs, the caller's fed tensor, a constant's value, a
 * variable's value. And the host slot itself: out-of-range indices are errors naming them,
 * a context outside a step is refused without an error. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "core.h"
#include "floe/floe.h"

enum { ROWS = 256, COLS = 1024 }; /* 1 MiB of f32 */
#define MIB (1 << 20)

static FloeMemoryStats stats(void) {
  FloeMemoryStats m = {.struct_size = sizeof m};
  floe_memory_stats(&m);
  return m;
}

static FloeTensor *input(uint64_t seed) {
  const int64_t d[2] = {ROWS, COLS};
  return harness_random(FLOE_F32, 2, d, seed, -2, 2);
}

/* Runs the fetches once (reuse on or off; the optimiser's other passes off, so the graph
 * runs as built), outs new references; returns the rise of live tensor bytes during the
 * run above those alive before it. */
static int64_t run(const FloeGraph *g, int reuse, const FloeFeed *feeds, int nf,
                   const char *const *fetches, int n, FloeTensor **outs) {
  setenv("FLOE_OPT_BUFFER_REUSE", reuse ? "1" : "0", 1);
  setenv("FLOE_OPT_ELEMENTWISE", "0", 1);
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  setenv("FLOE_OPT_ARITHMETIC", "0", 1);
  FloeSession *s = harness_session(g, NULL);
  FloeStatus *st = floe_status_new();
  int64_t live = stats().live_tensor_bytes;
  floe_memory_reset_peak();
  ck_assert_msg(floe_session_run(s, feeds, nf, fetches, n, NULL, 0, outs, st) == FLOE_OK, "%s",
                floe_status_message(st));
  int64_t rise = stats().peak_tensor_bytes - live;
  floe_status_free(st);
  floe_session_free(s);
  unsetenv("FLOE_OPT_BUFFER_REUSE");
  unsetenv("FLOE_OPT_ELEMENTWISE");
  unsetenv("FLOE_OPT_CONSTANT_FOLDING");
  unsetenv("FLOE_OPT_ARITHMETIC");
  return rise;
}

static void assert_bitwise(const FloeTensor *a, const FloeTensor *b, const char *what) {
  ck_assert_msg(floe_tensor_nbytes(a) == floe_tensor_nbytes(b) &&
                    memcmp(floe_tensor_data(a), floe_tensor_data(b), floe_tensor_nbytes(a)) == 0,
                "%s: not the same bits", what);
}

/* got[i] against want(x[i]) within 1e-6 (relative to 1). */
static void assert_values(const FloeTensor *got, const FloeTensor *x, double (*want)(double),
                          const char *what) {
  const float *g = floe_tensor_data(got), *v = floe_tensor_data(x);
  ck_assert_int_eq(floe_tensor_num_elements(got), floe_tensor_num_elements(x));
  for (int64_t i = 0; i < floe_tensor_num_elements(x); i++)
    ck_assert_msg(fabs(g[i] - want(v[i])) <= 1e-6 * (1 + fabs(want(v[i]))),
                  "%s at %lld: %.9g, want %.9g (x %.9g)", what, (long long)i, g[i],
                  want(v[i]), v[i]);
}

/* Runs fetch with reuse on and off: the step's peak rise is 2 MiB with reuse and at least 3
 * without (worked out at each caller), the bits are the same; *on is the result with reuse
 * (the caller releases it). */
static void reuse_saves_a_buffer(const FloeGraph *g, FloeFeed *feed, const char *fetch,
                                 FloeTensor **on) {
  FloeTensor *off;
  int64_t rise_on = run(g, 1, feed, 1, &fetch, 1, on);
  int64_t rise_off = run(g, 0, feed, 1, &fetch, 1, &off);
  ck_assert_msg(rise_on <= 2 * MIB + 4096 && rise_off >= 3 * MIB,
                "%s: peak rise with reuse %lld bytes (want 2 MiB), without %lld (want 3 MiB)",
                fetch, (long long)rise_on, (long long)rise_off);
  assert_bitwise(*on, off, fetch);
  floe_tensor_release(off);
}

static double sigmoid_relu_neg(double x) { return 1 / (1 + exp(-(-x > 0 ? -x : 0))); }
static double twice_sigmoid_relu_neg(double x) { return 2 * sigmoid_relu_neg(x); }
static double relu_neg(double x) { return -x > 0 ? -x : 0; }
static double relu(double x) { return x > 0 ? x : 0; }
static double neg(double x) { return -x; }
static double sigmoid_neg(double x) { return 1 / (1 + exp(x)); }

/* x (fed) -> a = Neg -> b = Relu -> c = Sigmoid -> d = Mul(c, 2) -> e = ReluGrad(d, c).
 * With reuse: a is new, b and c are written over it; d is new (c has a second reader, the
 * ReluGrad), and e is written over d or c: 2 MiB at most. Without: a and b, b and c, then
 * c, d and e alive together: 3 MiB. */
START_TEST(chain_writes_over_its_inputs) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {ROWS, COLS};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeOutput c = floe_unary(g, "Sigmoid", "c",
                            floe_unary(g, "Relu", "b", floe_unary(g, "Neg", "a", x)));
  FloeTensor *two_t = floe_tensor_scalar_f32(2, NULL);
  FloeOutput two = floe_const(g, "two", two_t);
  floe_tensor_release(two_t);
  FloeOutput dd = floe_binary(g, "Mul", "d", c, two);
  floe_binary(g, "ReluGrad", "e", dd, c);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xt = input(1);
  FloeFeed feed = {"x", xt};
  FloeTensor *on;
  reuse_saves_a_buffer(g, &feed, "e", &on);
  assert_values(on, xt, twice_sigmoid_relu_neg, "e");
  floe_tensor_release(on);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

/* A binary op writes over whichever operand has the output's shape and no other reader:
 * Add(bias [COLS], a) over a, Sub(p, q) over p or q; a broadcast operand is never the
 * output. */
START_TEST(binary_ops_write_over_the_full_operand) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {ROWS, COLS}, bd[1] = {COLS};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeTensor *bt = harness_random(FLOE_F32, 1, bd, 7, -1, 1);
  FloeOutput b = floe_const(g, "bias", bt);
  FloeOutput a = floe_unary(g, "Neg", "a", x);
  FloeOutput s = floe_binary(g, "Add", "s", b, a);
  FloeOutput q = floe_unary(g, "Square", "q", x);
  floe_binary(g, "Sub", "out", s, q);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xt = input(2);
  FloeFeed feed = {"x", xt};
  FloeTensor *on;
  /* a, q live (2 MiB), s over a, out over s or q; without: a, q, s then s, q, out: 3 MiB */
  reuse_saves_a_buffer(g, &feed, "out", &on);
  const float *o = floe_tensor_data(on), *xv = floe_tensor_data(xt), *bv = floe_tensor_data(bt);
  for (int64_t i = 0; i < ROWS * COLS; i++) {
    double want = (bv[i % COLS] + -xv[i]) - (double)xv[i] * xv[i];
    ck_assert_msg(fabs(o[i] - want) <= 1e-5 * (1 + fabs(want)), "out at %lld: %g want %g",
                  (long long)i, o[i], want);
  }
  /* the bias constant is as it was */
  FloeTensor *bias_now;
  const char *fb = "bias";
  run(g, 1, &feed, 1, &fb, 1, &bias_now);
  assert_bitwise(bias_now, bt, "the bias constant");
  floe_tensor_release(bias_now);
  floe_tensor_release(bt);
  floe_tensor_release(on);
  floe_tensor_release(xt);
  floe_graph_free(g);
}
END_TEST

/* Never written over: a fetched intermediate (b, fetched with c), a value another reader
 * still needs (p, read by Relu and Sigmoid), the caller's fed tensor (Relu(x) directly), a
 * constant's value and a variable's (read twice across runs). */
START_TEST(what_others_see_is_never_written_over) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {ROWS, COLS};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeOutput b = floe_unary(g, "Relu", "b", floe_unary(g, "Neg", "a", x));
  floe_unary(g, "Sigmoid", "c", b);
  FloeOutput p = floe_unary(g, "Neg", "p", x);
  floe_unary(g, "Relu", "q", p);
  floe_unary(g, "Sigmoid", "r", p);
  floe_unary(g, "Relu", "fed_relu", x);
  FloeTensor *kt = input(3);
  FloeOutput k = floe_const(g, "k", kt);
  floe_unary(g, "Neg", "k_neg", k);
  FloeVariable v = floe_variable(g, "v", FLOE_F32, floe_shape_make(2, d), floe_init_constant(-1.5));
  floe_unary(g, "Neg", "v_neg", v.value);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xt = input(4), *xcopy = floe_tensor_copy(xt, NULL);
  FloeFeed feed = {"x", xt};
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  FloeSession *s = harness_session_init(g, NULL);
  unsetenv("FLOE_OPT_CONSTANT_FOLDING");
  FloeStatus *st = floe_status_new();
  const char *fetches[6] = {"b", "c", "q", "r", "fed_relu", "k_neg"};
  FloeTensor *out[6];
  for (int round = 0; round < 2; round++) {
    ck_assert_msg(floe_session_run(s, &feed, 1, fetches, 6, NULL, 0, out, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    assert_values(out[0], xt, relu_neg, "b (fetched)");
    assert_values(out[1], xt, sigmoid_relu_neg, "c");
    assert_values(out[2], xt, relu_neg, "q");
    assert_values(out[3], xt, sigmoid_neg, "r (p's second reader)");
    assert_values(out[4], xt, relu, "Relu of the feed");
    assert_values(out[5], kt, neg, "Neg of the constant");
    assert_bitwise(xt, xcopy, "the fed tensor");
    for (int i = 0; i < 6; i++) floe_tensor_release(out[i]);
    const char *vf[2] = {"v_neg", "v/read"};
    FloeTensor *vo[2];
    ck_assert_msg(floe_session_run(s, NULL, 0, vf, 2, NULL, 0, vo, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    const float *vn = floe_tensor_data(vo[0]), *vv = floe_tensor_data(vo[1]);
    for (int64_t i = 0; i < ROWS * COLS; i++)
      ck_assert_msg(vn[i] == 1.5f && vv[i] == -1.5f, "round %d, v at %lld: %g, -v %g", round,
                    (long long)i, vv[i], vn[i]);
    floe_tensor_release(vo[0]);
    floe_tensor_release(vo[1]);
  }
  floe_status_free(st);
  floe_session_free(s);
  floe_tensor_release(kt);
  floe_tensor_release(xt);
  floe_tensor_release(xcopy);
  floe_graph_free(g);
}
END_TEST

/* x [batch, rows, COLS] (fed, batch unknown to the graph) -> a = Neg(x), b = Square(x) ->
 * cat = Concat(a, b) along dim 1 (fetched); also a2 = Relu(Neg(x)), whose Relu writes over
 * its Neg's output, and both = Concat(a2, b2), b2 = Square(x) read twice (fetched too).
 * At batch 1 each part of cat is one block of it: Neg and Square write there, and the
 * Concat copies nothing: the step's peak rise is cat's 1 MiB with reuse (the parts' 1 MiB
 * more without). At batch 2 the parts are not contiguous in cat, nor in `both` ever (a2
 * was written over Neg's output; b2 has another reader): they are copied. Every value is
 * bitwise the same as with reuse off, and is what it should be. */
START_TEST(concat_values_written_in_place) {
  FloeGraph *g = floe_graph_new();
  int64_t xd[3] = {FLOE_DIM_UNKNOWN, ROWS / 2, COLS};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(3, xd));
  FloeOutput a = floe_unary(g, "Neg", "a", x), b = floe_unary(g, "Square", "b", x);
  harness_concat(g, "cat", (FloeOutput[]){a, b}, 2, 1);
  FloeOutput a2 = floe_unary(g, "Relu", "a2", floe_unary(g, "Neg", "n2", x));
  FloeOutput b2 = floe_unary(g, "Square", "b2", x);
  harness_concat(g, "both", (FloeOutput[]){a2, b2}, 2, 1);
  floe_binary(g, "Add", "b2_again", b2, b2);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  for (int batch = 1; batch <= 2; batch++) {
    const int64_t d[3] = {batch, ROWS / 2, COLS};
    FloeTensor *xv = harness_random(FLOE_F32, 3, d, 9 + (uint64_t)batch, -2, 2);
    FloeFeed feed = {"x", xv};
    const char *cat = "cat";
    FloeTensor *on, *off;
    int64_t rise_on = run(g, 1, &feed, 1, &cat, 1, &on);
    int64_t rise_off = run(g, 0, &feed, 1, &cat, 1, &off);
    if (batch == 1)
      ck_assert_msg(rise_on <= MIB + 4096 && rise_off >= 2 * MIB,
                    "batch 1: peak rise with reuse %lld bytes (want 1 MiB: cat), without %lld "
                    "(want 2 MiB: cat and its parts)",
                    (long long)rise_on, (long long)rise_off);
    else
      ck_assert_msg(rise_on >= 3 * MIB, "batch 2: peak rise %lld bytes (want 4 MiB: cat and "
                                        "its parts, copied)", (long long)rise_on);
    assert_bitwise(on, off, "cat");
    /* rows [0, r) of each image are -x, rows [r, 2r) x^2 */
    const float *c = floe_tensor_data(on), *v = floe_tensor_data(xv);
    int64_t r = d[1], img = r * COLS;
    for (int64_t n = 0; n < batch; n++)
      for (int64_t k = 0; k < img; k++)
        ck_assert_msg(c[n * 2 * img + k] == -v[n * img + k] &&
                          c[n * 2 * img + img + k] == v[n * img + k] * v[n * img + k],
                      "batch %d: cat at image %lld element %lld", batch, (long long)n,
                      (long long)k);
    floe_tensor_release(on);
    floe_tensor_release(off);
    const char *fetches[2] = {"both", "b2_again"};
    FloeTensor *on2[2], *off2[2];
    run(g, 1, &feed, 1, fetches, 2, on2);
    run(g, 0, &feed, 1, fetches, 2, off2);
    for (int i = 0; i < 2; i++) {
      assert_bitwise(on2[i], off2[i], fetches[i]);
      floe_tensor_release(on2[i]);
      floe_tensor_release(off2[i]);
    }
    floe_tensor_release(xv);
  }
  floe_graph_free(g);
}
END_TEST
/* A convolution whose chain ends in a residual sum (_FusedConv with a side input, the sum as
 * oneDNN's post-op) writes its output over the side input when it is that value's last
 * reader, so the side input is never copied: on x [1,64,64,64] (1 MiB, channels last) with
 * side = Relu(x), out = Relu(Conv1x1(x) + b + side), the peak rise is side's 1 MiB with reuse
 * and 2 MiB without. The blocked layout's values are checked too. A side input that
 * is fetched, or read again after the convolution (z = out * side), is left as it was. Every
 * value is bitwise the same with reuse off and within 1e-5 of a product computed here. */
START_TEST(residual_sum_written_over_its_side_input) {
  enum { HW = 64 * 64, C = 64 };
  FloeGraph *g = floe_graph_new();
  const int64_t xd[4] = {1, 64, 64, C}, fd[4] = {1, 1, C, C}, bd[1] = {C};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xd));
  FloeTensor *fv = harness_random(FLOE_F32, 4, fd, 3, -0.2, 0.2);
  FloeTensor *bv = harness_random(FLOE_F32, 1, bd, 4, -1, 1);
  FloeOutput side = floe_unary(g, "Relu", "side", x);
  FloeNodeBuilder *nb = floe_node_begin(g, "Conv", "conv");
  floe_node_add_input(nb, x);
  floe_node_add_input(nb, floe_const(g, "f", fv));
  floe_node_set_attr_string(nb, "padding", "SAME");
  FloeOutput conv = floe_out(floe_node_finish(nb), 0);
  FloeOutput out = floe_unary(
      g, "Relu", "out",
      floe_binary(g, "Add", "sum", floe_binary(g, "BiasAdd", "biased", conv, floe_const(g, "b", bv)),
                  side));
  floe_binary(g, "Mul", "z", out, side);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeTensor *xv = harness_random(FLOE_F32, 4, xd, 5, -1, 1);
  const float *xs = floe_tensor_data(xv), *f = floe_tensor_data(fv), *b = floe_tensor_data(bv);
  float *want = malloc(sizeof(float) * HW * C);
  ck_assert_ptr_nonnull(want);
  for (int64_t p = 0; p < HW; p++)
    for (int o = 0; o < C; o++) {
      double acc = b[o] + (xs[p * C + o] > 0 ? xs[p * C + o] : 0);
      for (int c = 0; c < C; c++) acc += (double)xs[p * C + c] * f[c * C + o];
      want[p * C + o] = acc > 0 ? (float)acc : 0;
    }
  FloeFeed feed = {"x", xv};
  for (int blocked = 0; blocked < 2; blocked++) {
    setenv("FLOE_BLOCKED_LAYOUT", blocked ? "1" : "0", 1);
    const char *fetch = "out";
    FloeTensor *on, *off;
    int64_t rise_on = run(g, 1, &feed, 1, &fetch, 1, &on);
    int64_t rise_off = run(g, 0, &feed, 1, &fetch, 1, &off);
    /* (blocked, the peak may come before the convolution: the conversions of x and side) */
    ck_assert_msg(blocked || (rise_on <= MIB + 4096 && rise_off >= 2 * MIB),
                  "peak rise with reuse %lld bytes (want 1 MiB: side, the output in its "
                  "buffer), without %lld (want 2 MiB)",
                  (long long)rise_on, (long long)rise_off);
    assert_bitwise(on, off, "out");
    const float *got = floe_tensor_data(on);
    for (int64_t i = 0; i < HW * C; i++)
      ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
                    "%s: out[%lld] = %g, want %g", blocked ? "blocked" : "channels last",
                    (long long)i, got[i], want[i]);
    floe_tensor_release(on);
    floe_tensor_release(off);
    /* side fetched beside out; z reads side after the convolution */
    const char *fetches[3][2] = {{"out", "side"}, {"z", NULL}};
    for (int k = 0; k < 2; k++) {
      FloeTensor *v[2] = {NULL, NULL};
      run(g, 1, &feed, 1, fetches[k], k == 0 ? 2 : 1, v);
      const float *a = floe_tensor_data(v[0]);
      for (int64_t i = 0; i < HW * C; i++) {
        float r = xs[i] > 0 ? xs[i] : 0, w = k == 0 ? want[i] : want[i] * r;
        ck_assert_msg(fabsf(a[i] - w) <= 1e-5f * (1 + fabsf(w)), "%s: %s[%lld] = %g, want %g",
                      blocked ? "blocked" : "channels last", fetches[k][0], (long long)i, a[i], w);
        if (k == 0)
          ck_assert_msg(((const float *)floe_tensor_data(v[1]))[i] == r,
                        "the fetched side input was written over at %lld", (long long)i);
      }
      floe_tensor_release(v[0]);
      if (v[1]) floe_tensor_release(v[1]);
    }
  }
  unsetenv("FLOE_BLOCKED_LAYOUT");
  free(want);
  floe_tensor_release(xv);
  floe_tensor_release(fv);
  floe_tensor_release(bv);
  floe_graph_free(g);
}
END_TEST
/* The slot on a context made by hand (outside a step): indices out of range are errors that
 * name them; a valid request is refused with FLOE_NOT_FOUND and no error (nothing tells it
 * the input has no other reader), and the output stays unset. */
START_TEST(host_slot_outside_a_step) {
  const FloeHostApi *host = floe__host_api();
  ck_assert(FLOE_HAS_FIELD(host, FloeHostApi, ctx_reuse_input));
  ck_assert_uint_ge(host->abi_minor, 7);
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {4, 6};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeOutput y = floe_unary(g, "Relu", "y", x);
  FloeTensor *src = harness_random(FLOE_F32, 2, d, 5, -1, 1);
  FloeTensor *ins[1] = {src}, *outs[1] = {NULL}, *got = (FloeTensor *)1;
  FloeStatus *st = floe_status_new();
  FloeKernelContext ctx = {.node = y.node, .inputs = ins, .num_inputs = 1, .outputs = outs,
                           .num_outputs = 1, .status = st};
  ck_assert_int_eq(host->ctx_reuse_input(&ctx, 0, 0, 2, d, &got), FLOE_NOT_FOUND);
  ck_assert_ptr_null(got);
  ck_assert_int_eq(floe_status_code(st), FLOE_OK);
  ck_assert_ptr_null(outs[0]);
  ck_assert_int_eq(host->ctx_reuse_input(&ctx, 1, 0, 2, d, &got), FLOE_OUT_OF_RANGE);
  ck_assert_msg(strstr(floe_status_message(st), "input 1 out of range"), "%s",
                floe_status_message(st));
  ck_assert_int_eq(host->ctx_reuse_input(&ctx, 0, 2, 2, d, &got), FLOE_OUT_OF_RANGE);
  ck_assert_msg(strstr(floe_status_message(st), "output 2 out of range"), "%s",
                floe_status_message(st));
  floe_tensor_release(src);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  setenv("FLOE_NUM_THREADS", "2", 0);
  Suite *s = suite_create("buffer_reuse");
  TCase *tc = tcase_create("reuse");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, chain_writes_over_its_inputs);
  tcase_add_test(tc, binary_ops_write_over_the_full_operand);
  tcase_add_test(tc, what_others_see_is_never_written_over);
  tcase_add_test(tc, concat_values_written_in_place);
  tcase_add_test(tc, residual_sum_written_over_its_side_input);
  tcase_add_test(tc, host_slot_outside_a_step);
  suite_add_tcase(s, tc);
  return harness_run_suite(s);
}
