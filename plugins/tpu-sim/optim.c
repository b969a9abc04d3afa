/* SPDX-License-Identifier: Apache-2.0 */
/* optim.c - the optimiser updates on the vector unit: ResourceApplyGradientDescent,
 * ResourceApplyMomentum and ResourceApplyAdam, in place on the variables' values.
 *
 * The core hands each resource input over as the variable's value, already moved to this
 * chip and exclusively the kernel's for the call (floe_plugin.h, "Variables"); the scalars
 * (lr, momentum, ...) arrive as 0-D tensors in the chip's memory, read by its scalar unit.
 * Formulas and operation order are TensorFlow's (training_ops.cc), as the CPU plugin's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim.h"

typedef enum OptKind { O_SGD, O_MOMENTUM, O_ADAM } OptKind;

typedef struct OptSpec {
  OptKind kind;
  int slots;             /* resource inputs: var and its slots, inputs 0..slots-1 */
  int grad;              /* index of the gradient input */
  int nin;
  const char *names[10];
  double ops;            /* lane operations per element (cost model) */
} OptSpec;

static const OptSpec SPECS[] = {
    {O_SGD, 1, 2, 3, {"var", "alpha", "delta"}, 2},
    {O_MOMENTUM, 2, 3, 5, {"var", "accum", "lr", "grad", "momentum"}, 5},
    {O_ADAM, 3, 9, 10,
     {"var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"},
     14},
};

typedef struct OptState {
  const OptSpec *spec;
  int nesterov;
} OptState;

static floe_code opt_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  OptState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->spec = user_data;
  s->nesterov = 0;
  floe_code rc = host->attr_bool(host->init_attrs(init), "use_nesterov", &s->nesterov);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute use_nesterov must be a bool");
  }
  *state = s;
  return FLOE_OK;
}

static void opt_destroy(void *state) { tpu_host->free(state); }

typedef struct OptJob {
  OptKind kind;
  int nesterov;
  float *var, *s1, *s2;
  const float *g;
  float a, b, c, d, e; /* per kind: sgd a=alpha; momentum a=lr b=mom; adam a=alpha b=beta1
                        * c=beta2 d=epsilon */
} OptJob;

static void opt_range(void *arg, int64_t begin, int64_t end) {
  const OptJob *j = arg;
  float *var = j->var, *s1 = j->s1, *s2 = j->s2;
  const float *g = j->g;
  switch (j->kind) {
    case O_SGD:
      for (int64_t i = begin; i < end; i++) var[i] -= j->a * g[i];
      break;
    case O_MOMENTUM:
      for (int64_t i = begin; i < end; i++) {
        float acc = s1[i] * j->b + g[i];
        s1[i] = acc;
        var[i] -= j->nesterov ? g[i] * j->a + acc * j->b * j->a : j->a * acc;
      }
      break;
    case O_ADAM: {
      const float c1 = 1.0f - j->b, c2 = 1.0f - j->c;
      for (int64_t i = begin; i < end; i++) {
        float gi = g[i];
        float mi = s1[i] + (gi - s1[i]) * c1;
        float vi = s2[i] + (gi * gi - s2[i]) * c2;
        s1[i] = mi;
        s2[i] = vi;
        float num = j->nesterov ? (gi * c1 + j->b * mi) * j->a : mi * j->a;
        var[i] -= num / (sqrtf(vi) + j->d);
      }
      break;
    }
  }
}

static floe_code opt_compute(void *state, FloeKernelContext *ctx) {
  const OptState *s = state;
  const OptSpec *sp = s->spec;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *in[10] = {NULL};
  char a[TPU_SHAPE_STR_MAX], b[TPU_SHAPE_STR_MAX];
  for (int i = 0; i < sp->nin; i++) in[i] = tpu_host->ctx_input(ctx, i);
  const FloeTensor *var = in[0];
  float scal[10] = {0};
  for (int i = 0; i < sp->nin; i++) {
    bool tensor = i < sp->slots || i == sp->grad;
    if (tensor) {
      if (tpu_host->tensor_rank(in[i]) != tpu_host->tensor_rank(var) ||
          memcmp(tpu_host->tensor_dims(in[i]), tpu_host->tensor_dims(var),
                 (size_t)tpu_host->tensor_rank(var) * sizeof(int64_t)) != 0)
        return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "var has shape %s but %s has shape %s: they must match",
                                       tpu_shape_str(var, a, sizeof a), sp->names[i],
                                       tpu_shape_str(in[i], b, sizeof b));
    } else {
      if (tpu_host->tensor_num_elements(in[i]) != 1 || tpu_host->tensor_rank(in[i]) != 0)
        return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "%s must be a scalar (shape []), got shape %s",
                                       sp->names[i], tpu_shape_str(in[i], b, sizeof b));
      scal[i] = *(const float *)tpu_host->tensor_data(in[i]);
    }
  }
  OptJob j = {.kind = sp->kind, .nesterov = s->nesterov, .var = tpu_host->tensor_data(var),
              .g = tpu_host->tensor_data(in[sp->grad])};
  switch (sp->kind) {
    case O_SGD: j.a = scal[1]; break;
    case O_MOMENTUM:
      j.s1 = tpu_host->tensor_data(in[1]);
      j.a = scal[2];
      j.b = scal[4];
      break;
    case O_ADAM:
      j.s1 = tpu_host->tensor_data(in[1]);
      j.s2 = tpu_host->tensor_data(in[2]);
      j.a = scal[5] * sqrtf(1.0f - scal[4]) / (1.0f - scal[3]);
      j.b = scal[6];
      j.c = scal[7];
      j.d = scal[8];
      break;
  }
  int64_t n = tpu_host->tensor_num_elements(var);
  tpu_parallel_for(n, (int64_t)sp->ops, opt_range, &j);
  /* Reads var, its slots and grad; writes var and its slots. */
  double bytes = 4.0 * (double)n * (2.0 * sp->slots + 1.0);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, sp->ops * (double)n, bytes));
  return FLOE_OK;
}

floe_code tpu_register_optim(FloePluginRegistrar *reg) {
  static const char *const ops[] = {"ResourceApplyGradientDescent", "ResourceApplyMomentum",
                                    "ResourceApplyAdam"};
  for (int i = 0; i < 3; i++) {
    floe_code rc = tpu_add_kernel(reg, ops[i], "T", FLOE_DTYPE_BIT(FLOE_F32), 0, opt_compute,
                                  opt_create, opt_destroy, (void *)&SPECS[i]);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
