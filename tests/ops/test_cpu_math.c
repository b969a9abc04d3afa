/* SPDX-License-Identifier: Apache-2.0 */
/* test_cpu_math.c - the CPU plugin's vectorisable f32 exp and sigmoid (plugins/cpu/cpu_util.h),
 * compiled with the plugin's own floating-point flags (tests/Makefile.am): the shortcut exp of
 * non-positive arguments gives cpu_exp_f32's bits, and both stay within their stated error of a
 * double-precision reference, tails, zeros, infinities and NaN included. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_util.h"
#include "harness.h"

/* Distance in ulps between two finite floats of one sign (or zeros). */
static double ulps(float got, double want) {
  double w = (double)(float)want;
  double ulp = w == 0.0 ? ldexp(1.0, -149) : fmax(ldexp(1.0, ilogb((float)w) - 23), ldexp(1.0, -149));
  return fabs((double)got - want) / ulp;
}

/* Every float c <= 0 with a step that reaches each binade many times (plus -0, -Inf and the
 * ends of the range): exp_nonpos is exp bit for bit. */
START_TEST(exp_nonpos_is_exp_bitwise) {
  long checked = 0;
  for (uint64_t u = 0x80000000u; u <= 0xff800000u; u += 211) {
    float c = cpu_bits_f32((uint32_t)u);
    uint32_t a = cpu_f32_bits(cpu_exp_f32(c)), b = cpu_f32_bits(cpu_exp_nonpos_f32(c));
    ck_assert_msg(a == b, "exp(%a): cpu_exp_f32 gives %08x, cpu_exp_nonpos_f32 %08x", (double)c,
                  a, b);
    checked++;
  }
  const float edges[] = {-0.0f, -INFINITY, -104.0f, -103.97f, -87.336f, -87.34f, -88.73f,
                         -1e-45f, -1.17549435e-38f};
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    ck_assert_uint_eq(cpu_f32_bits(cpu_exp_f32(edges[i])),
                      cpu_f32_bits(cpu_exp_nonpos_f32(edges[i])));
  ck_assert_int_gt(checked, 10000000);
}
END_TEST

/* exp within 1 ulp of libm's double exp wherever the result is normal; subnormal results
 * within one unit of 2^-149; overflow to Inf and underflow to 0 where they must. */
START_TEST(exp_accuracy) {
  for (uint64_t u = 0; u < 0x100000000u; u += 4099) {
    float x = cpu_bits_f32((uint32_t)u);
    if (x != x) {
      ck_assert_msg(cpu_exp_f32(x) != cpu_exp_f32(x), "exp(NaN) is not NaN");
      continue;
    }
    double want = exp((double)x);
    float got = cpu_exp_f32(x);
    if (want > 3.4028234663852886e38) {
      ck_assert_msg(isinf(got), "exp(%a) = %a, want Inf", (double)x, (double)got);
    } else if (want < 1.1754943508222875e-38) {
      ck_assert_msg(fabs((double)got - want) <= ldexp(1.0, -149), "exp(%a) = %a, want %a",
                    (double)x, (double)got, want);
    } else {
      ck_assert_msg(ulps(got, want) <= 1.0, "exp(%a) = %a, want %a (%.2f ulp)", (double)x,
                    (double)got, want, ulps(got, want));
    }
  }
  ck_assert(cpu_exp_f32(-INFINITY) == 0.0f && isinf(cpu_exp_f32(INFINITY)));
}
END_TEST

/* sigmoid within 2.5 ulp (exp's ulp, the division's and the product's half ulps) of
 * 1 / (1 + exp(-x)) in double over the whole line (x < -87 gives subnormals, checked to a
 * unit of 2^-149); NaN in, NaN out. */
START_TEST(sigmoid_accuracy) {
  for (uint64_t u = 0; u < 0x100000000u; u += 4099) {
    float x = cpu_bits_f32((uint32_t)u);
    float got = cpu_sigmoid_f32(x);
    if (x != x) {
      ck_assert_msg(got != got, "sigmoid(NaN) = %a, want NaN", (double)got);
      continue;
    }
    double want = 1.0 / (1.0 + exp(-(double)x));
    if (want < 1.1754943508222875e-38)
      ck_assert_msg(fabs((double)got - want) <= ldexp(1.0, -149), "sigmoid(%a) = %a, want %a",
                    (double)x, (double)got, want);
    else
      ck_assert_msg(ulps(got, want) <= 2.5, "sigmoid(%a) = %a, want %a (%.2f ulp)", (double)x,
                    (double)got, want, ulps(got, want));
  }
  ck_assert(cpu_sigmoid_f32(INFINITY) == 1.0f && cpu_sigmoid_f32(-INFINITY) == 0.0f);
  ck_assert(cpu_sigmoid_f32(0.0f) == 0.5f && cpu_sigmoid_f32(-0.0f) == 0.5f);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cpu_math");
  TCase *tc = tcase_create("f32");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, exp_nonpos_is_exp_bitwise);
  tcase_add_test(tc, exp_accuracy);
  tcase_add_test(tc, sigmoid_accuracy);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return harness_run_suite(suite()); }
