/* SPDX-License-Identifier: Apache-2.0 */
/* test_tpusim.c - the tpu-sim plugin against the CPU plugin: every kernel runs the same graph
 * on the same random inputs with its node on cpu:0 and on tpu-sim:0.
 *
 * Matrix ops (bf16 operands, f32 accumulation) are held to an elementwise bound derived from
 * the rounding, not fitted to the results: each operand rounds to bf16 with relative error
 * at most u = 2^-8 (8 significant bits, round to nearest), so a product a*b is off by at most
 * (2u + u^2)|a||b|, and an f32 sum of K
 * terms adds at most K * 2^-24 * sum|a||b| (on either side). With S = sum_p |a_p||b_p| per
 * output element (computed by the CPU plugin on |inputs|, the same op on absolute values):
 *     |tpu - cpu| <= (2^-7 + 2^-16 + 2 K 2^-24) S.
 * The bound is not vacuous: every matrix case also checks that some element is further from
 * the CPU's f32 result than f32 accumulation could explain (2^-14 S, 16x the typical f32
 * error 2^-24 sqrt(K) S for the K < 4096 used here), which an f32 kernel never is. Vector ops compare within f32 tolerances.
 *
 * Also: the chip's memory (a misplaced tensor is refused, out-of-memory names the node and
 * the bytes and the session recovers), FLOE_TPUSIM_DEVICES and bad settings, the simulated
 * time in the profile against the cost formula, and a training step. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_data.h>
#include <floe/floe_train.h>

#include "harness.h"
#include "core.h"

/* ------------------------------------------------------------------------------------ */
/* Helpers. */

/* A host copy of t (which may live on a chip); releases t. */
static FloeTensor *to_host(FloeTensor *t) {
  FloeStatus *st = floe_status_new();
  FloeTensor *h = floe_tensor_copy(t, st);
  ck_assert_msg(h != NULL, "copy to host: %s", floe_status_message(st));
  floe_status_free(st);
  floe_tensor_release(t);
  return h;
}

/* Runs op on device with the harness; outputs come back as host tensors. */
static void run_op(const char *op, const char *device, FloeTensor *const *in, int n,
                   const int *lists, int nlists, harness_attrs_fn attrs, void *arg,
                   FloeTensor **out, int nout) {
  FloeStatus *st = floe_status_new();
  floe_code rc = harness_run_op(op, device, in, n, lists, nlists, attrs, arg, out, nout, st);
  ck_assert_msg(rc == FLOE_OK, "%s on %s: %s", op, device, floe_status_message(st));
  floe_status_free(st);
  /* The node requested `device` (placement fails rather than move it); fetches come back
   * in host memory. */
  for (int i = 0; i < nout; i++) {
    ck_assert_ptr_nonnull(floe_tensor_data(out[i])); /* readable: in host memory */
    out[i] = to_host(out[i]);
  }
}

static const float *f32s(const FloeTensor *t) { return floe_tensor_data(t); }

/* |t| elementwise, a new host tensor. */
static FloeTensor *abs_of(const FloeTensor *t) {
  int64_t n = floe_tensor_num_elements(t);
  FloeTensor *a = harness_f32(floe_tensor_rank(t), floe_tensor_dims(t), NULL);
  for (int64_t i = 0; i < n; i++) ((float *)floe_tensor_data(a))[i] = fabsf(f32s(t)[i]);
  return a;
}

/* A matrix-unit op on cpu:0 and tpu-sim:0. Inputs marked in abs_mask are replaced by their
 * absolute values for the bound S (shape inputs are not). Checks the bf16 bound and that it
 * is not vacuous; k is the length of each output element's sum. */
static void check_matrix(const char *op, FloeTensor *const *in, int n, unsigned abs_mask,
                         harness_attrs_fn attrs, void *arg, int64_t k, const char *what) {
  FloeTensor *cpu, *tpu, *s, *absin[8];
  run_op(op, "cpu:0", in, n, NULL, 0, attrs, arg, &cpu, 1);
  run_op(op, "tpu-sim:0", in, n, NULL, 0, attrs, arg, &tpu, 1);
  for (int i = 0; i < n; i++) absin[i] = (abs_mask >> i) & 1 ? abs_of(in[i]) : in[i];
  run_op(op, "cpu:0", absin, n, NULL, 0, attrs, arg, &s, 1);
  ck_assert_int_eq(floe_tensor_rank(cpu), floe_tensor_rank(tpu));
  ck_assert_int_eq(floe_tensor_num_elements(cpu), floe_tensor_num_elements(tpu));
  for (int d = 0; d < floe_tensor_rank(cpu); d++)
    ck_assert_int_eq(floe_tensor_dim(cpu, d), floe_tensor_dim(tpu, d));
  double f32_part = 2.0 * (double)k * ldexp(1, -24);
  double bound = ldexp(1, -7) + ldexp(1, -16) + f32_part;
  int64_t beyond_f32 = 0;
  double worst = 0;
  for (int64_t i = 0; i < floe_tensor_num_elements(cpu); i++) {
    double c = f32s(cpu)[i], t = f32s(tpu)[i], sv = f32s(s)[i] * (1 + 1e-6);
    double err = fabs(t - c);
    ck_assert_msg(err <= bound * sv + 1e-30, "%s: element %lld: tpu %.9g cpu %.9g, |diff| %.3g > "
                  "bound %.3g", what, (long long)i, t, c, err, bound * sv);
    if (err > ldexp(1, -14) * sv) beyond_f32++;
    if (sv > 0 && err / sv > worst) worst = err / sv;
  }
  /* Not vacuous: an f32 kernel's error stays near 2^-24 sqrt(K) S (< 2^-18 S for the K < 4096
   * used here), so errors above 2^-14 S can only come from rounding the operands. */
  ck_assert_msg(beyond_f32 > 0,
                "%s: tpu-sim is as close to f32 as an f32 kernel (worst %.3g S): no bf16 "
                "rounding happened", what, worst);
  for (int i = 0; i < n; i++)
    if ((abs_mask >> i) & 1) floe_tensor_release(absin[i]);
  floe_tensor_release(cpu);
  floe_tensor_release(tpu);
  floe_tensor_release(s);
}

/* An f32 op with nout outputs on both devices, compared within rtol / atol. */
static void check_vector(const char *op, FloeTensor *const *in, int n, const int *lists,
                         int nlists, harness_attrs_fn attrs, void *arg, int nout, double rtol,
                         double atol, const char *what) {
  FloeTensor *cpu[4], *tpu[4];
  run_op(op, "cpu:0", in, n, lists, nlists, attrs, arg, cpu, nout);
  run_op(op, "tpu-sim:0", in, n, lists, nlists, attrs, arg, tpu, nout);
  for (int i = 0; i < nout; i++) {
    harness_assert_close(tpu[i], cpu[i], rtol, atol, what);
    floe_tensor_release(cpu[i]);
    floe_tensor_release(tpu[i]);
  }
}

static FloeTensor *rnd(int rank, const int64_t *dims, uint64_t seed, double lo, double hi) {
  return harness_random(FLOE_F32, rank, dims, seed, lo, hi);
}

static void release_all(FloeTensor **t, int n) {
  for (int i = 0; i < n; i++) floe_tensor_release(t[i]);
}

/* ------------------------------------------------------------------------------------ */
/* Matrix unit. */

typedef struct Flags {
  const char *a, *b;
  int va, vb;
} Flags;

static void set_flags(FloeNodeBuilder *b, void *arg) {
  const Flags *f = arg;
  floe_node_set_attr_bool(b, f->a, f->va);
  floe_node_set_attr_bool(b, f->b, f->vb);
}


START_TEST(test_matmul) {
  /* Sizes off every block edge of the kernel (6x16 tiles, 48x256 blocks, K chunks of 256);
   * the last has one block of C and a long K, which the kernel splits into slices of K. */
  static const int64_t mnk[][3] = {{37, 45, 300}, {130, 270, 520}, {1, 7, 3}, {5, 20, 2100}};
  for (size_t c = 0; c < sizeof mnk / sizeof mnk[0]; c++) {
    for (int t = 0; t < 4; t++) {
      int64_t m = mnk[c][0], n = mnk[c][1], k = mnk[c][2];
      int ta = t & 1, tb = t >> 1;
      int64_t ad[2] = {ta ? k : m, ta ? m : k}, bd[2] = {tb ? n : k, tb ? k : n};
      FloeTensor *in[2] = {rnd(2, ad, 11 + c, -1, 1), rnd(2, bd, 17 + c, -1, 1)};
      Flags f = {"transpose_a", "transpose_b", ta, tb};
      char what[96];
      snprintf(what, sizeof what, "MatMul %lldx%lldx%lld ta=%d tb=%d", (long long)m, (long long)n,
               (long long)k, ta, tb);
      check_matrix("MatMul", in, 2, 3, set_flags, &f, k, what);
      release_all(in, 2);
    }
  }
}
END_TEST

/* bf16 round to nearest even, written here independently of the plugin: keep the top 16
 * bits after adding half an ulp of bf16 (plus one when the kept part is odd). */
static float bf16_ref(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t lsb = (u >> 16) & 1;
  u = (u + 0x7fff + lsb) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

START_TEST(test_matmul_is_bf16) {
  /* Inputs already bf16 values: the chip's product is then the f32 sum of exact products, so
   * it matches a double reference to f32 accumulation error; unrounded inputs must round the
   * way bf16_ref does (ties to even), which the product of rounded inputs checks. */
  int64_t m = 9, n = 11, k = 200, ad[2] = {m, k}, bd[2] = {k, n};
  FloeTensor *a = rnd(2, ad, 5, -2, 2), *b = rnd(2, bd, 6, -2, 2), *out;
  /* Ties: values exactly halfway between two bf16 numbers, both even and odd below. */
  float *av = floe_tensor_data(a);
  uint32_t ties[2] = {0x3f808000u, 0x3f818000u}; /* 1.00390625 (to 1.0), 1.01171875 (up) */
  memcpy(&av[0], &ties[0], 4);
  memcpy(&av[1], &ties[1], 4);
  FloeTensor *in[2] = {a, b};
  Flags f = {"transpose_a", "transpose_b", 0, 0};
  run_op("MatMul", "tpu-sim:0", in, 2, NULL, 0, set_flags, &f, &out, 1);
  ck_assert_float_eq(bf16_ref(av[0]), 1.0f);
  ck_assert_float_eq(bf16_ref(av[1]), 1.015625f);
  const float *bv = f32s(b), *ov = f32s(out);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double ref = 0, s = 0;
      for (int64_t p = 0; p < k; p++) {
        double x = bf16_ref(av[i * k + p]), y = bf16_ref(bv[p * n + j]);
        ref += x * y;
        s += fabs(x * y);
      }
      ck_assert_msg(fabs(ov[i * n + j] - ref) <= (double)k * ldexp(1, -24) * s,
                    "element %lld,%lld: %.9g vs bf16 reference %.9g", (long long)i, (long long)j,
                    ov[i * n + j], ref);
    }
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_tensor_release(out);
}
END_TEST

START_TEST(test_batch_matmul) {
  static const struct {
    int xr, yr;
    int64_t xd[4], yd[4];
    int ax, ay;
    int64_t k;
  } cases[] = {
      {3, 3, {3, 17, 33}, {3, 33, 19}, 0, 0, 33},
      {3, 3, {3, 33, 17}, {3, 19, 33}, 1, 1, 33},
      {3, 2, {4, 20, 70}, {70, 9}, 0, 0, 70},           /* y broadcast over the batch */
      {4, 3, {2, 1, 5, 30}, {3, 30, 4}, 0, 0, 30},      /* batch dims broadcast both ways */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    FloeTensor *in[2] = {rnd(cases[c].xr, cases[c].xd, 21 + c, -1, 1),
                         rnd(cases[c].yr, cases[c].yd, 31 + c, -1, 1)};
    Flags f = {"adj_x", "adj_y", cases[c].ax, cases[c].ay};
    char what[64];
    snprintf(what, sizeof what, "BatchMatMul case %zu", c);
    check_matrix("BatchMatMul", in, 2, 3, set_flags, &f, cases[c].k, what);
    release_all(in, 2);
  }
}
END_TEST

typedef struct ConvAttrs {
  const char *fmt, *pad;
  int64_t stride, dil;
  int64_t ksize; /* pooling */
} ConvAttrs;

static void set_conv(FloeNodeBuilder *b, void *arg) {
  const ConvAttrs *a = arg;
  int nchw = strcmp(a->fmt, "NCHW") == 0;
  int64_t st[4] = {1, 1, 1, 1}, dl[4] = {1, 1, 1, 1}, ks[4] = {1, 1, 1, 1};
  st[nchw ? 2 : 1] = st[nchw ? 3 : 2] = a->stride;
  dl[nchw ? 2 : 1] = dl[nchw ? 3 : 2] = a->dil;
  ks[nchw ? 2 : 1] = ks[nchw ? 3 : 2] = a->ksize;
  floe_node_set_attr_string(b, "data_format", a->fmt);
  floe_node_set_attr_string(b, "padding", a->pad);
  floe_node_set_attr_int_list(b, "strides", st, 4);
  if (a->ksize) floe_node_set_attr_int_list(b, "ksize", ks, 4);
  else floe_node_set_attr_int_list(b, "dilations", dl, 4);
}

/* Output size along one dim (TensorFlow's rules), for the test's own shapes. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, const char *pad) {
  int64_t eff = (k - 1) * d + 1;
  return strcmp(pad, "SAME") == 0 ? (in + s - 1) / s : (in - eff) / s + 1;
}

START_TEST(test_conv) {
  static const ConvAttrs attrs[] = {
      {"NHWC", "SAME", 1, 1, 0}, {"NHWC", "VALID", 2, 1, 0}, {"NHWC", "SAME", 2, 2, 0},
      {"NCHW", "SAME", 1, 1, 0}, {"NCHW", "VALID", 2, 1, 0},
  };
  int64_t n = 2, h = 9, w = 8, c = 3, o = 5, kh = 3, kw = 3;
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    const ConvAttrs *a = &attrs[i];
    int nchw = strcmp(a->fmt, "NCHW") == 0;
    int64_t xd[4] = {n, nchw ? c : h, nchw ? h : w, nchw ? w : c}, fd[4] = {kh, kw, c, o};
    int64_t oh = out_size(h, kh, a->stride, a->dil, a->pad), ow = out_size(w, kw, a->stride, a->dil, a->pad);
    int64_t yd[4] = {n, nchw ? o : oh, nchw ? oh : ow, nchw ? ow : o};
    FloeTensor *x = rnd(4, xd, 41 + i, -1, 1), *f = rnd(4, fd, 51 + i, -1, 1);
    FloeTensor *dy = rnd(4, yd, 61 + i, -1, 1);
    int32_t xs[4] = {(int32_t)xd[0], (int32_t)xd[1], (int32_t)xd[2], (int32_t)xd[3]};
    int32_t fs[4] = {(int32_t)kh, (int32_t)kw, (int32_t)c, (int32_t)o};
    int64_t four = 4;
    FloeTensor *xsz = harness_i32(1, &four, xs), *fsz = harness_i32(1, &four, fs);
    char what[96];
    snprintf(what, sizeof what, "Conv2D %s %s stride %lld dilation %lld", a->fmt, a->pad,
             (long long)a->stride, (long long)a->dil);
    FloeTensor *fwd[2] = {x, f};
    check_matrix("Conv2D", fwd, 2, 3, set_conv, (void *)a, kh * kw * c, what);
    FloeTensor *bi[3] = {xsz, f, dy};
    snprintf(what, sizeof what, "Conv2DBackpropInput %s %s stride %lld dilation %lld", a->fmt,
             a->pad, (long long)a->stride, (long long)a->dil);
    check_matrix("Conv2DBackpropInput", bi, 3, 6, set_conv, (void *)a, o * kh * kw, what);
    FloeTensor *bf[3] = {x, fsz, dy};
    snprintf(what, sizeof what, "Conv2DBackpropFilter %s %s stride %lld dilation %lld", a->fmt,
             a->pad, (long long)a->stride, (long long)a->dil);
    check_matrix("Conv2DBackpropFilter", bf, 3, 5, set_conv, (void *)a, n * oh * ow, what);
    FloeTensor *all[] = {x, f, dy, xsz, fsz};
    release_all(all, 5);
  }
}
END_TEST

START_TEST(test_maxpool) {
  static const ConvAttrs attrs[] = {{"NHWC", "VALID", 2, 1, 2}, {"NHWC", "SAME", 2, 1, 3},
                                    {"NCHW", "VALID", 1, 1, 2}};
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    const ConvAttrs *a = &attrs[i];
    int nchw = strcmp(a->fmt, "NCHW") == 0;
    int64_t xd[4] = {2, nchw ? 3 : 7, nchw ? 7 : 6, nchw ? 6 : 3};
    FloeTensor *x = rnd(4, xd, 71 + i, -1, 1), *y, *yt;
    run_op("MaxPool", "cpu:0", &x, 1, NULL, 0, set_conv, (void *)a, &y, 1);
    run_op("MaxPool", "tpu-sim:0", &x, 1, NULL, 0, set_conv, (void *)a, &yt, 1);
    harness_assert_close(yt, y, 0, 0, "MaxPool"); /* a max is exact */
    FloeTensor *dy = rnd(floe_tensor_rank(y), floe_tensor_dims(y), 81 + i, -1, 1);
    FloeTensor *in[3] = {x, y, dy};
    check_vector("MaxPoolGrad", in, 3, NULL, 0, set_conv, (void *)a, 1, 1e-6, 1e-6, "MaxPoolGrad");
    FloeTensor *all[] = {x, y, yt, dy};
    release_all(all, 4);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Vector unit. */

START_TEST(test_unary) {
  static const struct {
    const char *op;
    double lo, hi;
  } ops[] = {{"Neg", -3, 3},  {"Square", -3, 3}, {"Sqrt", 0.01, 9}, {"Rsqrt", 0.01, 9},
             {"Exp", -8, 8},  {"Log", 0.001, 50}, {"Relu", -2, 2},  {"Sigmoid", -12, 12},
             {"Tanh", -6, 6}, {"Identity", -1, 1}};
  int64_t d[3] = {3, 70, 41};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    FloeTensor *x = rnd(3, d, 100 + i, ops[i].lo, ops[i].hi);
    check_vector(ops[i].op, &x, 1, NULL, 0, NULL, NULL, 1, 4e-6, 1e-7, ops[i].op);
    floe_tensor_release(x);
  }
}
END_TEST

START_TEST(test_binary_broadcast) {
  static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum",
                                    "ReluGrad", "SigmoidGrad", "TanhGrad"};
  static const struct {
    int xr, yr;
    int64_t xd[4], yd[4];
  } shapes[] = {
      {3, 3, {4, 5, 6}, {4, 5, 6}}, /* same shape */
      {3, 1, {4, 5, 6}, {6}},       /* a row vector (a bias) */
      {3, 2, {4, 1, 6}, {5, 1}},    /* both broadcast: [4,5,6] */
      {0, 2, {0}, {3, 4}},          /* a scalar */
      {4, 4, {2, 3, 1, 5}, {1, 3, 4, 1}},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
      double lo = strcmp(ops[i], "Div") == 0 ? 0.5 : -2;
      FloeTensor *in[2] = {rnd(shapes[s].xr, shapes[s].xd, 200 + s, -2, 2),
                           rnd(shapes[s].yr, shapes[s].yd, 300 + s, lo, 2)};
      char what[64];
      snprintf(what, sizeof what, "%s, shapes case %zu", ops[i], s);
      FloeTensor *cpu, *tpu;
      FloeStatus *st = floe_status_new();
      /* The activation gradients take same-shaped inputs on the CPU; only compare shapes the
       * CPU accepts. */
      floe_code rc = harness_run_op(ops[i], "cpu:0", in, 2, NULL, 0, NULL, NULL, &cpu, 1, st);
      floe_status_free(st);
      if (rc == FLOE_OK) {
        floe_tensor_release(cpu);
        check_vector(ops[i], in, 2, NULL, 0, NULL, NULL, 1, 1e-6, 1e-7, what);
      } else {
        ck_assert_msg(s > 0 && strstr(ops[i], "Grad"), "%s: the CPU refused", what);
        (void)tpu;
      }
      release_all(in, 2);
    }
  /* Shapes that do not broadcast: an error naming both. */
  int64_t a[2] = {2, 3}, b[1] = {4};
  FloeTensor *in[2] = {rnd(2, a, 1, 0, 1), rnd(1, b, 2, 0, 1)}, *out;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(harness_run_op("Add", "tpu-sim:0", in, 2, NULL, 0, NULL, NULL, &out, 1, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "[2,3] vs [4]"));
  floe_status_free(st);
  release_all(in, 2);
}
END_TEST

static void set_format(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_string(b, "data_format", arg);
}

static void set_dst_type(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_type(b, "DstT", *(const FloeDType *)arg);
}

START_TEST(test_bias_addn_cast_reshape) {
  int64_t v[4] = {2, 5, 4, 3}, c3 = 3, c5 = 5;
  FloeTensor *x = rnd(4, v, 400, -1, 1), *b3 = rnd(1, &c3, 401, -1, 1), *b5 = rnd(1, &c5, 402, -1, 1);
  FloeTensor *nhwc[2] = {x, b3}, *nchw[2] = {x, b5};
  check_vector("BiasAdd", nhwc, 2, NULL, 0, set_format, "NHWC", 1, 1e-6, 1e-7, "BiasAdd NHWC");
  check_vector("BiasAdd", nchw, 2, NULL, 0, set_format, "NCHW", 1, 1e-6, 1e-7, "BiasAdd NCHW");
  check_vector("BiasAddGrad", &x, 1, NULL, 0, set_format, "NHWC", 1, 1e-5, 1e-6, "BiasAddGrad NHWC");
  check_vector("BiasAddGrad", &x, 1, NULL, 0, set_format, "NCHW", 1, 1e-5, 1e-6, "BiasAddGrad NCHW");
  FloeTensor *three[3] = {x, rnd(4, v, 403, -1, 1), rnd(4, v, 404, -1, 1)};
  int lists[1] = {3};
  check_vector("AddN", three, 3, lists, 1, NULL, NULL, 1, 1e-6, 1e-7, "AddN");
  /* Cast f32 -> i32 (truncation toward zero, negative values too) and back. */
  FloeTensor *big = rnd(4, v, 405, -1000, 1000), *ci, *ti;
  FloeDType to_i = FLOE_I32, to_f = FLOE_F32;
  run_op("Cast", "cpu:0", &big, 1, NULL, 0, set_dst_type, &to_i, &ci, 1);
  run_op("Cast", "tpu-sim:0", &big, 1, NULL, 0, set_dst_type, &to_i, &ti, 1);
  harness_assert_close(ti, ci, 0, 0, "Cast f32->i32");
  check_vector("Cast", &ci, 1, NULL, 0, set_dst_type, &to_f, 1, 0, 0, "Cast i32->f32");
  /* Reshape with -1 (a view: the same values in a new shape). */
  int32_t shape[2] = {-1, 12};
  int64_t two = 2;
  FloeTensor *sh = harness_i32(1, &two, shape), *rin[2] = {x, sh}, *r;
  run_op("Reshape", "tpu-sim:0", rin, 2, NULL, 0, NULL, NULL, &r, 1);
  ck_assert_int_eq(floe_tensor_rank(r), 2);
  ck_assert_int_eq(floe_tensor_dim(r, 0), 10);
  ck_assert_int_eq(memcmp(floe_tensor_data(r), floe_tensor_data(x), floe_tensor_nbytes(x)), 0);
  FloeTensor *all[] = {x, b3, b5, three[1], three[2], big, ci, ti, sh, r};
  release_all(all, 10);
}
END_TEST

typedef struct Red {
  int keep;
} Red;

static void set_keep(FloeNodeBuilder *b, void *arg) {
  floe_node_set_attr_bool(b, "keep_dims", ((const Red *)arg)->keep);
}

START_TEST(test_reduce_softmax) {
  int64_t d[3] = {3, 40, 5};
  FloeTensor *x = rnd(3, d, 500, -3, 3);
  static const struct {
    int n;
    int32_t axes[2];
    int keep;
  } cases[] = {{2, {0, 2}, 0}, {1, {-1}, 1}, {1, {1}, 0}, {2, {2, 0}, 1}};
  static const char *const ops[] = {"Sum", "Mean", "Max"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int o = 0; o < 3; o++) {
      int64_t n = cases[c].n;
      FloeTensor *ax = harness_i32(1, &n, cases[c].axes), *in[2] = {x, ax};
      Red r = {cases[c].keep};
      char what[64];
      snprintf(what, sizeof what, "%s case %zu", ops[o], c);
      check_vector(ops[o], in, 2, NULL, 0, set_keep, &r, 1, 1e-5, 1e-5, what);
      floe_tensor_release(ax);
    }
  int64_t ld[2] = {6, 13}, b = 6;
  FloeTensor *logits = rnd(2, ld, 501, -5, 5);
  check_vector("Softmax", &logits, 1, NULL, 0, NULL, NULL, 1, 1e-5, 1e-7, "Softmax");
  check_vector("LogSoftmax", &logits, 1, NULL, 0, NULL, NULL, 1, 1e-5, 1e-6, "LogSoftmax");
  /* Dense labels: each row a distribution. */
  FloeTensor *lab = rnd(2, ld, 502, 0, 1);
  float *lv = floe_tensor_data(lab);
  for (int i = 0; i < 6; i++) {
    float s = 0;
    for (int j = 0; j < 13; j++) s += lv[i * 13 + j];
    for (int j = 0; j < 13; j++) lv[i * 13 + j] /= s;
  }
  FloeTensor *dense[2] = {logits, lab};
  check_vector("SoftmaxCrossEntropyWithLogits", dense, 2, NULL, 0, NULL, NULL, 2, 1e-5, 1e-6,
               "SoftmaxCrossEntropyWithLogits");
  int64_t cls[6] = {0, 12, 5, 5, 7, 1};
  FloeTensor *ci = harness_i64(1, &b, cls), *sparse[2] = {logits, ci};
  check_vector("SparseSoftmaxCrossEntropyWithLogits", sparse, 2, NULL, 0, NULL, NULL, 2, 1e-5,
               1e-6, "SparseSoftmaxCrossEntropyWithLogits");
  /* A label out of range is an error naming it. */
  cls[2] = 13;
  FloeTensor *bad = harness_i64(1, &b, cls), *badin[2] = {logits, bad}, *out[2];
  FloeStatus *st = floe_status_new();
  ck_assert_int_ne(harness_run_op("SparseSoftmaxCrossEntropyWithLogits", "tpu-sim:0", badin, 2,
                                  NULL, 0, NULL, NULL, out, 2, st), FLOE_OK);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "label 13 of row 2"));
  floe_status_free(st);
  FloeTensor *all[] = {x, logits, lab, ci, bad};
  release_all(all, 5);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Optimiser updates: two steps on variables, the update node on each device. */

/* roles: r variable, s scalar, g gradient. Returns the variables' values after two steps. */
static void run_update(const char *op, const char *roles, const double *scalars, int nesterov,
                       const char *device, FloeTensor **vars_out) {
  int64_t d[2] = {33, 70};
  FloeGraph *g = floe_graph_new();
  FloeOutput ins[10];
  FloeTensor *vals[10];
  FloeFeed feeds[20];
  int nf = 0, nres = 0, nin = (int)strlen(roles), ns = 0;
  static char names[20][32];
  for (int i = 0; i < nin; i++) {
    if (roles[i] == 'r') {
      snprintf(names[nf], sizeof names[nf], "var%d", nres);
      ins[i] = harness_variable(g, names[nf], FLOE_F32, 2, d);
      snprintf(names[nf], sizeof names[nf], "var%d/init_value", nres);
      vals[i] = rnd(2, d, 600 + nres, roles[i] == 'r' && nres == 2 ? 0 : -1, 1); /* v >= 0 */
      nres++;
    } else if (roles[i] == 's') {
      snprintf(names[nf], sizeof names[nf], "s%d", i);
      ins[i] = floe_placeholder(g, names[nf], FLOE_F32, floe_shape_scalar());
      float v = (float)scalars[ns++];
      vals[i] = harness_f32(0, NULL, &v);
    } else {
      snprintf(names[nf], sizeof names[nf], "grad");
      ins[i] = floe_placeholder(g, names[nf], FLOE_F32, floe_shape_make(2, d));
      vals[i] = rnd(2, d, 700, -1, 1);
    }
    feeds[nf] = (FloeFeed){names[nf], vals[i]};
    nf++;
  }
  FloeNodeBuilder *b = floe_node_begin(g, op, "update");
  for (int i = 0; i < nin; i++) floe_node_add_input(b, ins[i]);
  if (strcmp(op, "ResourceApplyGradientDescent") != 0) floe_node_set_attr_bool(b, "use_nesterov", nesterov);
  floe_node_set_device(b, device);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_ptr_nonnull(s);
  const char *inits[3] = {"var0/init", "var1/init", "var2/init"};
  ck_assert_msg(floe_session_run(s, feeds, nf, NULL, 0, inits, nres, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const char *target = "update";
  for (int step = 0; step < 2; step++)
    ck_assert_msg(floe_session_run(s, feeds, nf, NULL, 0, &target, 1, NULL, st) == FLOE_OK,
                  "%s on %s: %s", op, device, floe_status_message(st));
  const char *reads[3] = {"var0/read", "var1/read", "var2/read"};
  ck_assert_msg(floe_session_run(s, NULL, 0, reads, nres, NULL, 0, vars_out, st) == FLOE_OK,
                "%s", floe_status_message(st));
  for (int i = 0; i < nres; i++) vars_out[i] = to_host(vars_out[i]);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  for (int i = 0; i < nin; i++) floe_tensor_release(vals[i]);
}

START_TEST(test_optimizers) {
  static const struct {
    const char *op, *roles;
    double s[6];
    int nesterov;
  } cases[] = {
      {"ResourceApplyGradientDescent", "rsg", {0.1}, 0},
      {"ResourceApplyMomentum", "rrsgs", {0.05, 0.9}, 0},
      {"ResourceApplyMomentum", "rrsgs", {0.05, 0.9}, 1},
      {"ResourceApplyAdam", "rrrssssssg", {0.9, 0.999, 0.01, 0.9, 0.999, 1e-7}, 0},
      {"ResourceApplyAdam", "rrrssssssg", {0.81, 0.998, 0.01, 0.9, 0.999, 1e-7}, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    FloeTensor *cpu[3], *tpu[3];
    int nres = (int)(strchr(cases[c].roles, 's') - cases[c].roles);
    run_update(cases[c].op, cases[c].roles, cases[c].s, cases[c].nesterov, "cpu:0", cpu);
    run_update(cases[c].op, cases[c].roles, cases[c].s, cases[c].nesterov, "tpu-sim:0", tpu);
    for (int i = 0; i < nres; i++) {
      char what[96];
      snprintf(what, sizeof what, "%s nesterov=%d, variable %d", cases[c].op, cases[c].nesterov, i);
      harness_assert_close(tpu[i], cpu[i], 1e-5, 1e-6, what);
    }
    release_all(cpu, nres);
    release_all(tpu, nres);
  }
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The chip's memory. */

/* A runtime of the CPU and tpu-sim plugins built with the current environment. */
static FloeRuntime *runtime_now(void) { return harness_runtime(2); }

/* The chip settings back to their defaults (tests may run unforked, under valgrind). */
static void clear_env(void) {
  static const char *const vars[] = {"FLOE_TPUSIM_DEVICES", "FLOE_TPUSIM_MEMORY",
                                     "FLOE_TPUSIM_CLOCK_HZ", "FLOE_TPUSIM_HBM_BW",
                                     "FLOE_TPUSIM_LAUNCH_NS", "FLOE_TPUSIM_HOST_BW"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static FloeSession *session_on(FloeGraph *g, FloeRuntime *rt, const char *device) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.device = device;
  return harness_session_opts(g, &o, NULL);
}

/* A kernel handed a host tensor (as a core bug would) refuses it, naming the input, its
 * shape and where it lives; nothing is read. The context is built by hand: the core itself
 * always copies inputs to the chip. */
START_TEST(test_misplaced_tensor) {
  clear_env();
  FloeRuntime *rt = runtime_now();
  FloeStatus *st = floe_status_new();
  FloeDevice *dev = floe__device_find(rt, "tpu-sim:0", st);
  ck_assert_msg(dev != NULL, "%s", floe_status_message(st));
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_make(2, (int64_t[]){2, 3}));
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_make(2, (int64_t[]){3, 4}));
  FloeOutput mm = floe_binary(g, "MatMul", "mm", a, b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  const FloeKernelReg *k = floe__kernel_find(rt, mm.node, "TPU_SIM", st);
  ck_assert_msg(k != NULL, "%s", floe_status_message(st));
  void *state;
  bool created;
  ck_assert_int_eq(floe__kernel_instantiate(k, mm.node, dev, &state, &created, st), FLOE_OK);
  /* Input 0 on the chip (copied there properly), input 1 left in host memory. */
  FloeTensor *ha = rnd(2, (int64_t[]){2, 3}, 1, 0, 1), *hb = rnd(2, (int64_t[]){3, 4}, 2, 0, 1);
  FloeTensor *da = floe__tensor_to_device(ha, dev, st);
  ck_assert_ptr_nonnull(da);
  FloeTensor *inputs[2] = {da, hb}, *outputs[1] = {NULL};
  FloeStatus kst = {FLOE_OK, NULL};
  FloeKernelContext ctx = {.node = mm.node, .device = dev, .inputs = inputs, .num_inputs = 2,
                           .outputs = outputs, .num_outputs = 1, .status = &kst};
  floe_code rc = k->def.compute(state, &ctx);
  ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
  const char *msg = floe_status_message(&kst);
  ck_assert_msg(strstr(msg, "mm") && strstr(msg, "input 1 (f32 [3,4]") &&
                    strstr(msg, "not in tpu-sim:0's memory") && strstr(msg, "outside every"),
                "message: %s", msg);
  ck_assert_ptr_null(outputs[0]); /* refused before allocating anything */
  /* The chip's copy slot refuses a host destination posing as device memory as well. */
  float buf[4];
  ck_assert_int_ne(dev->fns.copy_h2d(dev->fns.state, buf, buf + 2, 8), FLOE_OK);
  floe_status_clear(&kst);
  if (created) floe__kernel_release(k, state);
  floe_tensor_release(da);
  floe_tensor_release(ha);
  floe_tensor_release(hb);
  floe_graph_free(g);
  floe_status_free(st);
  floe_runtime_free(rt);
}
END_TEST

/* A product whose output does not fit fails cleanly, naming the node and the bytes; the
 * same session then runs a product that fits. */
/* The cost-model placer puts a product on the (much faster) chip when it fits, and on the
 * CPU when its output would overflow the chip's memory, instead of failing the run. */
static const char *placed_matmul(FloeRuntime *rt, int64_t m) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_unknown());
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_unknown());
  floe_binary(g, "MatMul", "prod", a, b);
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.devices = "cpu,tpu-sim";
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &o, st);
  ck_assert_msg(s, "%s", floe_status_message(st));
  floe_session_set_profiling(s, 1);
  FloeTensor *x = rnd(2, (int64_t[]){m, 40}, 3, -1, 1), *y = rnd(2, (int64_t[]){40, m}, 4, -1, 1);
  FloeFeed feeds[2] = {{"a", x}, {"b", y}};
  const char *fetch = "prod";
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  const char *where = harness_profile_calls(s, "MatMul", "tpu-sim:0") ? "tpu-sim:0"
                      : harness_profile_calls(s, "MatMul", "cpu:0")   ? "cpu:0"
                                                               : "nowhere";
  floe_tensor_release(out);
  floe_tensor_release(x);
  floe_tensor_release(y);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  return where;
}

/* Readers and queues keep host tensors: the placer keeps their ops on the CPU even when the
 * session's device list names only the chip, feeds for them stay in host memory (ReaderSeek
 * reads its epoch and record there), and a dequeued batch reaches the chip through
 * Send/Recv. Before, the whole reader group went to the chip and the seek failed with
 * "epoch must be an i64 scalar in host memory" (floe train --devices tpu-sim:0). */
START_TEST(test_input_pipeline_stays_on_host) {
  clear_env();
  FloeRuntime *rt = runtime_now();
  char dir[4096], path[4200];
  harness_tmpdir(dir, sizeof dir, "tpusim_idx");
  snprintf(path, sizeof path, "%s/items.idx", dir);
  /* IDX u8 [4, 2]: items {1, 2}, {3, 4}, {5, 6}, {7, 8} */
  static const unsigned char idx[] = {0, 0, 8, 2, 0, 0, 0, 4, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8};
  FILE *fp = fopen(path, "wb");
  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fwrite(idx, 1, sizeof idx, fp), sizeof idx);
  ck_assert_int_eq(fclose(fp), 0);

  FloeGraph *g = floe_graph_new();
  FloeOutput reader = floe_idx_reader(g, "items", path, 0, 0, -1, NULL);
  FloeOutput epoch = floe_placeholder(g, "epoch", FLOE_I64, floe_shape_scalar());
  FloeOutput record = floe_placeholder(g, "record", FLOE_I64, floe_shape_scalar());
  floe_reader_seek(g, "seek", &reader, 1, epoch, record);
  FloeTensor *two64 = floe_tensor_scalar_i64(2, NULL), *two32 = floe_tensor_scalar_i32(2, NULL);
  FloeOutput items;
  floe_reader_read_up_to(g, "read", &reader, 1, floe_const(g, "two64", two64), &items);
  FloeDType u8 = FLOE_U8;
  FloeShape item_shape = floe_shape_make(1, (int64_t[]){2});
  FloeOutput q = floe_queue(g, "queue", &u8, &item_shape, 1, NULL);
  floe_queue_enqueue_many(g, "enqueue", q, &items, 1);
  FloeOutput batch;
  floe_queue_dequeue_many(g, "dequeue", q, floe_const(g, "two32", two32), &batch, 1);
  FloeNodeBuilder *b = floe_node_begin(g, "Cast", "cast");
  floe_node_add_input(b, batch);
  floe_node_set_attr_type(b, "DstT", FLOE_F32);
  FloeOutput xf = floe_out(floe_node_finish(b), 0);
  floe_binary(g, "Add", "doubled", xf, xf);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));

  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.devices = "tpu-sim:0";
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &o, st);
  ck_assert_msg(s, "%s", floe_status_message(st));
  floe_session_set_profiling(s, 1);
  FloeTensor *e = floe_tensor_scalar_i64(0, NULL), *r = floe_tensor_scalar_i64(1, NULL);
  FloeFeed feeds[2] = {{"epoch", e}, {"record", r}};
  const char *seek = "seek", *enq = "enqueue", *fetch = "doubled";
  ck_assert_msg(floe_session_run(s, feeds, 2, NULL, 0, &seek, 1, NULL, st) == FLOE_OK, "seek: %s",
                floe_status_message(st));
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &enq, 1, NULL, st) == FLOE_OK,
                "enqueue: %s", floe_status_message(st));
  FloeTensor *out = NULL;
  ck_assert_msg(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st) == FLOE_OK,
                "dequeue: %s", floe_status_message(st));
  /* records 1 and 2 (the seek skipped record 0), doubled */
  static const float want[4] = {6, 8, 10, 12};
  ck_assert_int_eq(floe_tensor_num_elements(out), 4);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(f32s(out)[i], want[i]);
  ck_assert_int_eq(harness_profile_calls(s, "QueueDequeueManyV2", "cpu:0"), 1);
  ck_assert_int_eq(harness_profile_calls(s, "ReaderReadUpTo", "cpu:0"), 1);
  ck_assert_int_eq(harness_profile_calls(s, "ReaderSeek", "cpu:0"), 1);
  ck_assert_int_eq(harness_profile_calls(s, "Add", "tpu-sim:0"), 1);
  floe_tensor_release(out);
  release_all((FloeTensor *[]){e, r, two64, two32}, 4);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
  harness_rmdir(dir);
}
END_TEST

START_TEST(test_placer_respects_memory) {
  clear_env();
  setenv("FLOE_TPUSIM_MEMORY", "1M", 1);
  FloeRuntime *rt = runtime_now();
  ck_assert_str_eq(placed_matmul(rt, 200), "tpu-sim:0"); /* 160 KB out: fits */
  ck_assert_str_eq(placed_matmul(rt, 600), "cpu:0");     /* 1,440,000 bytes out: does not */
  floe_runtime_free(rt);
  clear_env();
}
END_TEST

START_TEST(test_out_of_memory) {
  clear_env();
  setenv("FLOE_TPUSIM_MEMORY", "1M", 1);
  FloeRuntime *rt = runtime_now();
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_unknown());
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_unknown());
  FloeNodeBuilder *nb = floe_node_begin(g, "MatMul", "big_product");
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  floe_node_set_device(nb, "tpu-sim:0");
  floe_node_finish(nb);
  FloeSession *s = session_on(g, rt, NULL);
  /* Inputs 2 x 100 KB fit in 1 MiB; the [600, 600] output (1,440,000 bytes) does not. */
  FloeTensor *x = rnd(2, (int64_t[]){600, 40}, 3, -1, 1), *y = rnd(2, (int64_t[]){40, 600}, 4, -1, 1);
  FloeFeed feeds[2] = {{"a", x}, {"b", y}};
  const char *fetch = "big_product";
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st);
  ck_assert_int_eq(rc, FLOE_RESOURCE_EXHAUSTED);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, "big_product") && strstr(msg, "1440000 bytes") && strstr(msg, "tpu-sim:0"),
                "message: %s", msg);
  /* Everything the failed step held was given back: a product that fits now runs. */
  FloeTensor *x2 = rnd(2, (int64_t[]){100, 40}, 5, -1, 1), *y2 = rnd(2, (int64_t[]){40, 100}, 6, -1, 1);
  FloeFeed feeds2[2] = {{"a", x2}, {"b", y2}};
  for (int i = 0; i < 3; i++) {
    rc = floe_session_run(s, feeds2, 2, &fetch, 1, NULL, 0, &out, st);
    ck_assert_msg(rc == FLOE_OK, "after the failure: %s", floe_status_message(st));
    ck_assert_ptr_nonnull(floe_tensor_data(out)); /* fetched: copied to host memory */
    floe_tensor_release(out);
  }
  FloeTensor *all[] = {x, y, x2, y2};
  release_all(all, 4);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
}
END_TEST

static const FloePluginReport *tpu_report(FloeRuntime *rt) {
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++)
    if (strcmp(floe_runtime_plugin(rt, i)->name, "tpu-sim") == 0) return floe_runtime_plugin(rt, i);
  ck_abort_msg("no tpu-sim plugin report");
  return NULL;
}

/* Two chips: both listed with their props; a product on tpu-sim:1 fed by a node on tpu-sim:0
 * (its input crosses chips through the host) matches the CPU. */
START_TEST(test_two_chips) {
  clear_env();
  setenv("FLOE_TPUSIM_DEVICES", "2", 1);
  setenv("FLOE_TPUSIM_MEMORY", "64M", 1);
  FloeRuntime *rt = runtime_now();
  int chips = 0;
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    FloeDeviceInfo info;
    ck_assert_int_eq(floe_runtime_device(rt, i, &info), FLOE_OK);
    if (strcmp(info.type, "TPU_SIM") != 0) continue;
    char want[24];
    snprintf(want, sizeof want, "tpu-sim:%d", chips++);
    ck_assert_str_eq(info.short_name, want);
    ck_assert_uint_eq(info.memory_bytes, 64ull << 20);
    ck_assert(fabs(info.peak_flops_f32 - 2.0 * 128 * 128 * 940e6) < 1);
  }
  ck_assert_int_eq(chips, 2);
  FloeStatus *st = floe_status_new();
  FloeDevice *d1 = floe__device_find(rt, "tpu-sim:1", st);
  ck_assert_ptr_nonnull(d1);
  ck_assert(!d1->host_memory);
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_unknown());
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_unknown());
  FloeNodeBuilder *nb = floe_node_begin(g, "Relu", "relu");
  floe_node_add_input(nb, a);
  floe_node_set_device(nb, "tpu-sim:0");
  FloeOutput r = floe_out(floe_node_finish(nb), 0);
  nb = floe_node_begin(g, "MatMul", "mm");
  floe_node_add_input(nb, r);
  floe_node_add_input(nb, b);
  floe_node_set_device(nb, "tpu-sim:1");
  floe_node_finish(nb);
  FloeTensor *x = rnd(2, (int64_t[]){20, 30}, 7, -1, 1), *y = rnd(2, (int64_t[]){30, 10}, 8, -1, 1);
  FloeFeed feeds[2] = {{"a", x}, {"b", y}};
  const char *fetch = "mm";
  FloeTensor *out;
  FloeSession *s = session_on(g, rt, NULL);
  floe_session_set_profiling(s, 1);
  ck_assert_msg(floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(harness_profile_calls(s, "MatMul", "tpu-sim:1"), 1);
  out = to_host(out);
  /* Reference: relu then the product in double; the bf16 bound as in check_matrix. */
  for (int i = 0; i < 20; i++)
    for (int j = 0; j < 10; j++) {
      double ref = 0, sabs = 0;
      for (int p = 0; p < 30; p++) {
        double xv = fmax(f32s(x)[i * 30 + p], 0), yv = f32s(y)[p * 10 + j];
        ref += xv * yv;
        sabs += fabs(xv * yv);
      }
      ck_assert(fabs(f32s(out)[i * 10 + j] - ref) <= (ldexp(1, -7) + ldexp(1, -16) + 60 * ldexp(1, -24)) * sabs + 1e-30);
    }
  FloeTensor *all[] = {x, y, out};
  release_all(all, 3);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  floe_runtime_free(rt);
}
END_TEST

/* Bad settings are refused with the variable, its value and what is wanted; the CPU plugin
 * still loads. */
START_TEST(test_bad_settings) {
  clear_env();
  static const struct {
    const char *var, *value, *want;
    FloePluginState state;
  } cases[] = {
      {"FLOE_TPUSIM_DEVICES", "two", "FLOE_TPUSIM_DEVICES=\"two\"", FLOE_PLUGIN_FAILED},
      {"FLOE_TPUSIM_DEVICES", "65", "from 0 to 64", FLOE_PLUGIN_FAILED},
      {"FLOE_TPUSIM_DEVICES", "0", "no tpu-sim chip", FLOE_PLUGIN_UNAVAILABLE},
      {"FLOE_TPUSIM_MEMORY", "12Q", "FLOE_TPUSIM_MEMORY=\"12Q\"", FLOE_PLUGIN_FAILED},
      {"FLOE_TPUSIM_MEMORY", "1K", "below the 64K", FLOE_PLUGIN_FAILED},
      {"FLOE_TPUSIM_CLOCK_HZ", "-5", "FLOE_TPUSIM_CLOCK_HZ=\"-5\" is not a positive", FLOE_PLUGIN_FAILED},
      {"FLOE_TPUSIM_LAUNCH_NS", "abc", "non-negative", FLOE_PLUGIN_FAILED},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    setenv(cases[c].var, cases[c].value, 1);
    FloeRuntime *rt = runtime_now();
    const FloePluginReport *r = tpu_report(rt);
    ck_assert_msg(r->state == cases[c].state && strstr(r->message, cases[c].want),
                  "%s=%s: state %s, message \"%s\"", cases[c].var, cases[c].value,
                  floe_plugin_state_name(r->state), r->message);
    ck_assert_int_eq(r->num_devices, 0);
    ck_assert_int_ge(floe_runtime_num_devices(rt), 1); /* the CPU */
    floe_runtime_free(rt);
    unsetenv(cases[c].var);
  }
  setenv("FLOE_TPUSIM_LAUNCH_NS", "0", 1); /* zero launch cost is allowed */
  FloeRuntime *rt = runtime_now();
  ck_assert_int_eq(tpu_report(rt)->state, FLOE_PLUGIN_LOADED);
  floe_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Simulated time and training. */

/* The profile's device time for one MatMul equals the cost formula evaluated here. */
START_TEST(test_profile_cost) {
  clear_env();
  setenv("FLOE_TPUSIM_CLOCK_HZ", "1e9", 1);
  FloeRuntime *rt = runtime_now();
  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_unknown());
  FloeOutput b = floe_placeholder(g, "b", FLOE_F32, floe_shape_unknown());
  FloeNodeBuilder *nb = floe_node_begin(g, "MatMul", "mm");
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  floe_node_set_device(nb, "tpu-sim:0");
  floe_node_finish(nb);
  FloeSession *s = session_on(g, rt, NULL);
  /* Two cases: compute-bound and memory-bound. */
  static const int64_t mnk[2][3] = {{200, 150, 300}, {4, 3000, 2}};
  for (int c = 0; c < 2; c++) {
    int64_t m = mnk[c][0], n = mnk[c][1], k = mnk[c][2];
    FloeTensor *x = rnd(2, (int64_t[]){m, k}, 9, -1, 1), *y = rnd(2, (int64_t[]){k, n}, 10, -1, 1);
    FloeFeed feeds[2] = {{"a", x}, {"b", y}};
    const char *fetch = "mm";
    FloeTensor *out;
    FloeStatus *st = floe_status_new();
    floe_session_set_profiling(s, 1);
    for (int r = 0; r < 3; r++) {
      ck_assert_msg(floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                    floe_status_message(st));
      floe_tensor_release(out);
    }
    FloeOpProfile *rows;
    int nrows;
    ck_assert_int_eq(floe_session_profile(s, &rows, &nrows, st), FLOE_OK);
    /* tiles of the 128x128 array, each K + 2*128 cycles at 1 GHz; HBM at 600e9 B/s of the
     * f32 operands and result; launch 2000 ns. */
    double tiles = (double)((m + 127) / 128) * (double)((n + 127) / 128);
    double t_mxu = tiles * (double)(k + 256) / 1e9 * 1e9;
    double t_hbm = 4.0 * (double)(m * k + k * n + m * n) / 600e9 * 1e9;
    double want = (t_mxu > t_hbm ? t_mxu : t_hbm) + 2000;
    int found = 0;
    for (int i = 0; i < nrows; i++) {
      if (strcmp(rows[i].op, "MatMul") != 0) continue;
      found = 1;
      ck_assert_str_eq(rows[i].device, "tpu-sim:0");
      ck_assert_int_eq(rows[i].calls, 3);
      ck_assert_msg(llabs(rows[i].device_ns - 3 * llround(want)) <= 3,
                    "case %d: device_ns %lld, formula 3 x %.1f", c, (long long)rows[i].device_ns,
                    want);
    }
    ck_assert(found);
    free(rows);
    floe_status_free(st);
    floe_tensor_release(x);
    floe_tensor_release(y);
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
}
END_TEST

/* A tiny classifier (dense -> relu -> dense -> sparse softmax cross-entropy, SGD) trained a
 * few steps with every node it can on tpu-sim ends within bf16 tolerance of the CPU run. */
static void train_tiny(const char *device, FloeTensor **w_out, double *loss_out) {
  FloeRuntime *rt = runtime_now();
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (int64_t[]){16, 8}));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I64, floe_shape_make(1, (int64_t[]){16}));
  FloeVariable w1 = floe_variable(g, "w1", FLOE_F32, floe_shape_make(2, (int64_t[]){8, 12}),
                                  floe_init_uniform(-0.5, 0.5, 3));
  FloeVariable w2 = floe_variable(g, "w2", FLOE_F32, floe_shape_make(2, (int64_t[]){12, 4}),
                                  floe_init_uniform(-0.5, 0.5, 4));
  FloeOutput h = floe_unary(g, "Relu", "h", floe_binary(g, "MatMul", "mm1", x, w1.value));
  FloeOutput logits = floe_binary(g, "MatMul", "mm2", h, w2.value);
  FloeNodeBuilder *b = floe_node_begin(g, "SparseSoftmaxCrossEntropyWithLogits", "xent");
  floe_node_add_input(b, logits);
  floe_node_add_input(b, y);
  FloeOutput xent = floe_out(floe_node_finish(b), 0);
  int32_t axis0 = 0;
  FloeTensor *axis_t = harness_i32(0, NULL, &axis0);
  FloeOutput loss = floe_binary(g, "Mean", "loss", xent, floe_const(g, "axis", axis_t));
  floe_tensor_release(axis_t); /* the graph keeps its own reference */
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.5;
  FloeVariable vars[2] = {w1, w2};
  floe_minimize(g, "train", loss, &o, vars, 2);
  floe_variables_initializer(g, "init");
  FloeSession *s = session_on(g, rt, device);
  floe_session_set_profiling(s, 1);
  FloeTensor *xv = rnd(2, (int64_t[]){16, 8}, 12, -1, 1);
  int64_t labels[16];
  for (int i = 0; i < 16; i++) labels[i] = (f32s(xv)[i * 8] > 0) + 2 * (f32s(xv)[i * 8 + 1] > 0);
  FloeTensor *yv = harness_i64(1, (int64_t[]){16}, labels);
  FloeFeed feeds[2] = {{"x", xv}, {"y", yv}};
  FloeStatus *st = floe_status_new();
  const char *init = "init", *train = "train", *fetch[2] = {"loss", "w2/read"};
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int i = 0; i < 5; i++)
    ck_assert_msg(floe_session_run(s, feeds, 2, NULL, 0, &train, 1, NULL, st) == FLOE_OK,
                  "%s: %s", device, floe_status_message(st));
  FloeTensor *out[2];
  ck_assert_int_eq(floe_session_run(s, feeds, 2, fetch, 2, NULL, 0, out, st), FLOE_OK);
  if (strcmp(device, "tpu-sim:0") == 0) /* the updates ran on the chip */
    ck_assert_int_eq(harness_profile_calls(s, "ResourceApplyGradientDescent", "tpu-sim:0") > 0, 1);
  out[0] = to_host(out[0]);
  *loss_out = f32s(out[0])[0];
  floe_tensor_release(out[0]);
  *w_out = to_host(out[1]);
  floe_status_free(st);
  floe_tensor_release(xv);
  floe_tensor_release(yv);
  floe_session_free(s);
  floe_graph_free(g);
  floe_runtime_free(rt);
}

START_TEST(test_training_step) {
  clear_env();
  FloeTensor *wc, *wt;
  double lc, lt;
  train_tiny("cpu:0", &wc, &lc);
  train_tiny("tpu-sim:0", &wt, &lt);
  /* Five steps of bf16 products: weights move by ~lr * grad per step and the products differ
   * by ~2^-8 relative, so 1e-2 absolute is a few bf16 ulps of the weights' scale. */
  harness_assert_close(wt, wc, 0, 1e-2, "w2 after 5 SGD steps");
  ck_assert_msg(fabs(lt - lc) <= 1e-2 * fmax(1, fabs(lc)), "loss %g vs cpu %g", lt, lc);
  floe_tensor_release(wc);
  floe_tensor_release(wt);
}
END_TEST

static Suite *tpusim_suite(void) {
  Suite *s = suite_create("tpusim");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_matmul_is_bf16);
  tcase_add_test(tc, test_batch_matmul);
  tcase_add_test(tc, test_conv);
  tcase_add_test(tc, test_maxpool);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_binary_broadcast);
  tcase_add_test(tc, test_bias_addn_cast_reshape);
  tcase_add_test(tc, test_reduce_softmax);
  tcase_add_test(tc, test_optimizers);
  suite_add_tcase(s, tc);
  TCase *dev = tcase_create("device");
  tcase_set_timeout(dev, 60);
  tcase_add_test(dev, test_misplaced_tensor);
  tcase_add_test(dev, test_out_of_memory);
  tcase_add_test(dev, test_placer_respects_memory);
  tcase_add_test(dev, test_input_pipeline_stays_on_host);
  tcase_add_test(dev, test_two_chips);
  tcase_add_test(dev, test_bad_settings);
  tcase_add_test(dev, test_profile_cost);
  tcase_add_test(dev, test_training_step);
  suite_add_tcase(s, dev);
  return s;
}

int main(void) {
  /* The tpu-sim plugin and the local transport (which moves tensors between the chip and
   * the host) join the CPU plugin on the path the tests use. */
  const char *dirs[] = {getenv("FLOE_TPUSIM_PLUGIN_DIR"), getenv("FLOE_TRANSPORT_DIR")};
  for (int i = 0; i < 2; i++) {
    const char *path = getenv("FLOE_PLUGIN_PATH");
    char buf[4096];
    if (!dirs[i] || !*dirs[i]) continue;
    snprintf(buf, sizeof buf, "%s%s%s", path ? path : "", path && *path ? ":" : "", dirs[i]);
    setenv("FLOE_PLUGIN_PATH", buf, 1);
  }
  SRunner *sr = srunner_create(tpusim_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
