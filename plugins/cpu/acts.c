/* SPDX-License-Identifier: Apache-2.0 */
/* acts.c - the elementwise tail of the fused nodes (acts.h). */
#include "acts.h"

#include <math.h>
#include <string.h>

#include "cpu_util.h"

enum { ACT_RELU, ACT_RELU6, ACT_SIGMOID, ACT_TANH, ACT_LEAKY, ACT_ELU, ACT_ADD, ACT_SUB,
       ACT_MUL, ACT_MAX, ACT_MIN, ACT_CMAX, ACT_CMIN, ACT_SAVE, ACT_GATE };

floe_code cpu_acts_parse(const FloeHostApi *host, FloeKernelInit *init, const char *op,
                         CpuActs *acts) {
  static const char *const names[] = {"Relu", "Relu6", "Sigmoid", "Tanh", "LeakyRelu", "Elu",
                                      "Add", "Sub", "Mul", "Maximum", "Minimum", "ConstMaximum",
                                      "ConstMinimum", "Save", "Gate"};
  int saved = 0; /* a Save not yet gated */
  const FloeAttrs *at = host->init_attrs(init);
  const char *list = NULL;
  const double *alpha = NULL;
  size_t na = 0;
  acts->n = 0;
  if (host->attr_string(at, "activations", &list) != FLOE_OK || !list || !*list) return FLOE_OK;
  if (host->attr_float_list(at, "activation_alpha", &alpha, &na) != FLOE_OK) na = 0;
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    int kind = -1;
    for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
      if (strlen(names[k]) == len && !strncmp(p, names[k], len)) kind = k;
    bool bad_gate = (kind == ACT_SAVE && saved) || (kind == ACT_GATE && !saved);
    if (kind < 0 || acts->n == CPU_MAX_ACTS || (size_t)acts->n >= na || bad_gate)
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                  "%s: activations \"%s\" (with %zu activation_alpha): "
                                  "at most %d of Relu, Relu6, Sigmoid, Tanh, LeakyRelu, Elu, Add, "
                                  "Sub, Mul, Maximum, Minimum, ConstMaximum, ConstMinimum, and "
                                  "Save ... Gate pairs (not nested), one alpha each", op, list,
                                  na, CPU_MAX_ACTS);
    if (kind == ACT_SAVE) saved = 1;
    if (kind == ACT_GATE) saved = 0;
    acts->act[acts->n].kind = kind;
    acts->act[acts->n].a = (float)alpha[acts->n];
    acts->n++;
    p += len;
    if (*p == ',') p++;
  }
  if (saved)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s: activations \"%s\": a Save without its Gate", op, list);
  return FLOE_OK;
}

bool cpu_acts_clip(const CpuActs *acts, float *lo, float *hi) {
  const CpuAct *a = acts->act;
  if (acts->n == 1 && (a[0].kind == ACT_RELU6 || a[0].kind == ACT_RELU)) {
    *lo = 0.0f;
    *hi = a[0].kind == ACT_RELU6 ? 6.0f : INFINITY;
    return true;
  }
  if (acts->n != 2) return false;
  for (int first = 0; first < 2; first++) { /* max then min, or min then max */
    const CpuAct *mx = &a[first], *mn = &a[1 - first];
    if ((mx->kind == ACT_MAX || mx->kind == ACT_CMAX) &&
        (mn->kind == ACT_MIN || mn->kind == ACT_CMIN) && mx->a <= mn->a) {
      *lo = mx->a;
      *hi = mn->a;
      return true;
    }
  }
  return false;
}

bool cpu_acts_swish(const CpuActs *acts) {
  return acts->n == 3 && acts->act[0].kind == ACT_SAVE && acts->act[1].kind == ACT_SIGMOID &&
         acts->act[2].kind == ACT_GATE;
}

/* a clamped to [lo, hi] by a Minimum (either form) and a Maximum (either form), in that
 * order, at acts[k], acts[k + 1]. */
static bool clamp_at(const CpuActs *acts, int k, float lo, float hi) {
  const CpuAct *a = acts->act;
  return (a[k].kind == ACT_MIN || a[k].kind == ACT_CMIN) && a[k].a == hi &&
         (a[k + 1].kind == ACT_MAX || a[k + 1].kind == ACT_CMAX) && a[k + 1].a == lo;
}

bool cpu_acts_hard(const CpuActs *acts, bool *swish, float *alpha, float *beta) {
  const CpuAct *a = acts->act;
  int k = acts->n == 6 && a[0].kind == ACT_SAVE && a[5].kind == ACT_GATE ? 1 : 0;
  if (acts->n != (k ? 6 : 4) || a[k].kind != ACT_MUL || a[k + 1].kind != ACT_ADD ||
      !clamp_at(acts, k + 2, 0.0f, 1.0f))
    return false;
  /* oneDNN's hardswish is x relu6(x + 3) / 6: only the 1/6 and 0.5 of an exported one */
  if (k && (a[k].a != (float)(1.0 / 6) || a[k + 1].a != 0.5f)) return false;
  *swish = k != 0;
  *alpha = a[k].a;
  *beta = a[k + 1].a;
  return true;
}

/* Save keeps the values as they are there, Gate multiplies by them (y * f(y)). */
CPU_HOT_WIDE void cpu_acts_block(const CpuActs *acts, float *restrict y, int64_t n) {
  float saved[CPU_ACT_BLOCK];
  for (int k = 0; k < acts->n; k++) {
    const float a = acts->act[k].a;
    if (acts->act[k].kind == ACT_SAVE && k + 2 < acts->n && acts->act[k + 1].kind == ACT_SIGMOID &&
        acts->act[k + 2].kind == ACT_GATE) { /* SiLU in one loop: the same x * sigmoid(x) */
      for (int64_t i = 0; i < n; i++) y[i] = y[i] * cpu_sigmoid_f32(y[i]);
      k += 2;
      continue;
    }
    switch (acts->act[k].kind) {
    case ACT_SAVE: memcpy(saved, y, (size_t)n * sizeof *y); break;
    case ACT_GATE: for (int64_t i = 0; i < n; i++) y[i] = saved[i] * y[i]; break;
    case ACT_RELU:
      for (int64_t i = 0; i < n; i++) y[i] = (y[i] > 0) | (y[i] != y[i]) ? y[i] : 0;
      break;
    case ACT_RELU6:
      for (int64_t i = 0; i < n; i++) {
        float x = y[i];
        y[i] = x != x ? x : x < 0 ? 0 : x > 6 ? 6 : x;
      }
      break;
    case ACT_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = cpu_sigmoid_f32(y[i]); break;
    case ACT_TANH: for (int64_t i = 0; i < n; i++) y[i] = cpu_tanh_f32(y[i]); break;
    case ACT_LEAKY: for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0 ? y[i] : a * y[i]; break;
    case ACT_ELU:
      for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0 ? y[i] : a * cpu_expm1_f32(y[i]);
      break;
    case ACT_ADD: for (int64_t i = 0; i < n; i++) y[i] = y[i] + a; break;
    case ACT_SUB: for (int64_t i = 0; i < n; i++) y[i] = y[i] - a; break;
    case ACT_MUL: for (int64_t i = 0; i < n; i++) y[i] = y[i] * a; break;
    case ACT_MAX: for (int64_t i = 0; i < n; i++) y[i] = (y[i] > a) | (y[i] != y[i]) ? y[i] : a; break;
    case ACT_MIN: for (int64_t i = 0; i < n; i++) y[i] = (y[i] < a) | (y[i] != y[i]) ? y[i] : a; break;
    case ACT_CMAX: for (int64_t i = 0; i < n; i++) y[i] = (a > y[i]) | (a != a) ? a : y[i]; break;
    case ACT_CMIN: for (int64_t i = 0; i < n; i++) y[i] = (a < y[i]) | (a != a) ? a : y[i]; break;
    }
  }
}

typedef struct ActsJob {
  const CpuActs *acts;
  float *y;
} ActsJob;

static void acts_range(void *arg, int64_t begin, int64_t end) {
  const ActsJob *j = arg;
  for (int64_t b = begin; b < end; b += CPU_ACT_BLOCK)
    cpu_acts_block(j->acts, j->y + b, end - b < CPU_ACT_BLOCK ? end - b : CPU_ACT_BLOCK);
}

void cpu_acts_serial(const CpuActs *acts, float *y, int64_t n) {
  if (acts->n == 0 || n == 0) return;
  ActsJob j = {acts, y};
  acts_range(&j, 0, n);
}

void cpu_acts_run(const CpuActs *acts, float *y, int64_t n) {
  if (acts->n == 0 || n == 0) return;
  ActsJob j = {acts, y};
  cpu_parallel_elements(n, 1, acts_range, &j);
}
