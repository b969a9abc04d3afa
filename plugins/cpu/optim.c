/* SPDX-License-Identifier: Apache-2.0 */
/* optim.c - fused optimiser updates of the CPU plugin (ResourceApplyGradientDescent,
 * Momentum, Adam, RMSProp, Adagrad) and AssignAddVariableOp / AssignSubVariableOp.
 *
 * The core hands each resource input over as the variable's value tensor, exclusively the
 * kernel's for the call (floe_plugin.h, "Variables"), so one update is one pass over var,
 * its slots and grad, written in place with TensorFlow's formulas (training_ops.cc); large
 * variables are split over the shared pool in cache-line-disjoint blocks. Denormals are
 * flushed to zero during an update (TensorFlow's FTZ/DAZ), see optim_range. */
/* Vectorise whatever CFLAGS say (see elementwise.c); FP exception flags are never read. */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <math.h>
#include <stdio.h>

#include "cpu_util.h"

#define HOT CPU_HOT

/* ------------------------------------------------------------------------------------ */
/* Update rows: elements [0, n) of var, its slots and grad (distinct buffers). Scalars come
 * in already converted to T. Formulas as in ops_std.def (TensorFlow's, same order of
 * operations so results agree with TF to the rounding of each step). */

#define OPTIM_ROWS(SUF, T, SQRT)                                                             \
  HOT static void sgd_##SUF(T *restrict var, const T *restrict g, int64_t n, T alpha) {      \
    for (int64_t i = 0; i < n; i++) var[i] -= alpha * g[i];                                  \
  }                                                                                          \
  HOT static void momentum_##SUF(T *restrict var, T *restrict acc, const T *restrict g,      \
                                 int64_t n, T lr, T mom, int nesterov) {                     \
    if (nesterov) {                                                                          \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T a = acc[i] * mom + g[i];                                                           \
        acc[i] = a;                                                                          \
        var[i] -= g[i] * lr + a * mom * lr;                                                  \
      }                                                                                      \
    } else {                                                                                 \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T a = acc[i] * mom + g[i];                                                           \
        acc[i] = a;                                                                          \
        var[i] -= lr * a;                                                                    \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  /* alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power), computed once by the caller. */ \
  HOT static void adam_##SUF(T *restrict var, T *restrict m, T *restrict v,                  \
                             const T *restrict g, int64_t n, T alpha, T beta1, T beta2,      \
                             T eps, int nesterov) {                                          \
    const T c1 = (T)1 - beta1, c2 = (T)1 - beta2;                                            \
    if (nesterov) {                                                                          \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T gi = g[i];                                                                         \
        T mi = m[i] + (gi - m[i]) * c1;                                                      \
        T vi = v[i] + (gi * gi - v[i]) * c2;                                                 \
        m[i] = mi;                                                                           \
        v[i] = vi;                                                                           \
        var[i] -= ((gi * c1 + beta1 * mi) * alpha) / (SQRT(vi) + eps);                       \
      }                                                                                      \
    } else {                                                                                 \
      for (int64_t i = 0; i < n; i++) {                                                      \
        T gi = g[i];                                                                         \
        T mi = m[i] + (gi - m[i]) * c1;                                                      \
        T vi = v[i] + (gi * gi - v[i]) * c2;                                                 \
        m[i] = mi;                                                                           \
        v[i] = vi;                                                                           \
        var[i] -= (mi * alpha) / (SQRT(vi) + eps);                                           \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  HOT static void rmsprop_##SUF(T *restrict var, T *restrict ms, T *restrict mom,            \
                                const T *restrict g, int64_t n, T lr, T rho, T momentum,     \
                                T eps) {                                                     \
    const T c = (T)1 - rho;                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                        \
      T gi = g[i];                                                                           \
      T s = ms[i] + (gi * gi - ms[i]) * c;                                                   \
      T u = mom[i] * momentum + (gi * lr) / SQRT(s + eps);                                   \
      ms[i] = s;                                                                             \
      mom[i] = u;                                                                            \
      var[i] -= u;                                                                           \
    }                                                                                        \
  }                                                                                          \
  HOT static void adagrad_##SUF(T *restrict var, T *restrict acc, const T *restrict g,       \
                                int64_t n, T lr, T eps) {                                    \
    for (int64_t i = 0; i < n; i++) {                                                        \
      T gi = g[i];                                                                           \
      T a = acc[i] + gi * gi;                                                                \
      acc[i] = a;                                                                            \
      var[i] -= (gi * lr) / (SQRT(a) + eps);                                                 \
    }                                                                                        \
  }

OPTIM_ROWS(f32, float, sqrtf)
OPTIM_ROWS(f64, double, sqrt)

/* ------------------------------------------------------------------------------------ */
/* Op descriptions: the role of each input, so one compute function checks them all. */

enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_RMSPROP, OPT_ADAGRAD };

#define OPTIM_MAX_INPUTS 10
#define OPTIM_MAX_STATE 3   /* var and up to two slots */
#define OPTIM_MAX_SCALARS 6

typedef struct OptimSpec {
  const char *op;
  int kind;
  int num_inputs;
  /* Per input: 'r' a resource (var or slot, var first), 's' a 0-D scalar, 'g' the
   * gradient; the names are the op's argument names, for messages. */
  const char *roles;
  const char *names[OPTIM_MAX_INPUTS];
  int64_t cost; /* per element, nanoseconds-ish */
} OptimSpec;

static const OptimSpec spec_sgd = {
    "ResourceApplyGradientDescent", OPT_SGD, 3, "rsg", {"var", "alpha", "delta"}, 1};
static const OptimSpec spec_momentum = {
    "ResourceApplyMomentum", OPT_MOMENTUM, 5, "rrsgs",
    {"var", "accum", "lr", "grad", "momentum"}, 2};
static const OptimSpec spec_adam = {
    "ResourceApplyAdam", OPT_ADAM, 10, "rrrssssssg",
    {"var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"},
    6};
static const OptimSpec spec_rmsprop = {
    "ResourceApplyRMSProp", OPT_RMSPROP, 8, "rrrssssg",
    {"var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"}, 6};
static const OptimSpec spec_adagrad = {
    "ResourceApplyAdagrad", OPT_ADAGRAD, 5, "rrssg", {"var", "accum", "lr", "epsilon", "grad"}, 4};

typedef struct OptimJob {
  const OptimSpec *spec;
  FloeDType dt;
  char *state[OPTIM_MAX_STATE]; /* var, slots */
  const char *grad;
  double s[OPTIM_MAX_SCALARS];  /* scalars in input order */
  int nesterov;
} OptimJob;

static void optim_range_f32(const OptimJob *j, int64_t b, int64_t e) {
  float *x = (float *)j->state[0] + b, *s1 = (float *)j->state[1] + b;
  float *s2 = (float *)j->state[2] + b;
  const float *g = (const float *)j->grad + b;
  const double *s = j->s;
  int64_t n = e - b;
  switch (j->spec->kind) {
    case OPT_SGD: sgd_f32(x, g, n, (float)s[0]); break;
    case OPT_MOMENTUM: momentum_f32(x, s1, g, n, (float)s[0], (float)s[1], j->nesterov); break;
    case OPT_ADAM:
      /* s[0] is alpha here (see optim_compute); then beta1, beta2, epsilon. */
      adam_f32(x, s1, s2, g, n, (float)s[0], (float)s[1], (float)s[2], (float)s[3],
               j->nesterov);
      break;
    case OPT_RMSPROP:
      rmsprop_f32(x, s1, s2, g, n, (float)s[0], (float)s[1], (float)s[2], (float)s[3]);
      break;
    case OPT_ADAGRAD: adagrad_f32(x, s1, g, n, (float)s[0], (float)s[1]); break;
    default: break;
  }
}

static void optim_range_f64(const OptimJob *j, int64_t b, int64_t e) {
  double *x = (double *)j->state[0] + b, *s1 = (double *)j->state[1] + b;
  double *s2 = (double *)j->state[2] + b;
  const double *g = (const double *)j->grad + b;
  const double *s = j->s;
  int64_t n = e - b;
  switch (j->spec->kind) {
    case OPT_SGD: sgd_f64(x, g, n, s[0]); break;
    case OPT_MOMENTUM: momentum_f64(x, s1, g, n, s[0], s[1], j->nesterov); break;
    case OPT_ADAM: adam_f64(x, s1, s2, g, n, s[0], s[1], s[2], s[3], j->nesterov); break;
    case OPT_RMSPROP: rmsprop_f64(x, s1, s2, g, n, s[0], s[1], s[2], s[3]); break;
    case OPT_ADAGRAD: adagrad_f64(x, s1, g, n, s[0], s[1]); break;
    default: break;
  }
}

static void optim_range(void *arg, int64_t begin, int64_t end) {
  const OptimJob *j = arg;
  /* Slots of weights whose gradient stays zero decay into denormals (Adam's m by 0.9 a
   * step reaches them in ~800 steps): flushed, the update costs the same every step. */
  unsigned fp = cpu_denormals_flush();
  if (j->dt == FLOE_F32)
    optim_range_f32(j, begin, end);
  else
    optim_range_f64(j, begin, end);
  cpu_denormals_restore(fp);
}

static double scalar_value(const FloeTensor *t) {
  const void *d = cpu_host->tensor_data(t);
  return cpu_host->tensor_dtype(t) == FLOE_F32 ? (double)*(const float *)d : *(const double *)d;
}

static int same_shape(const FloeTensor *a, const FloeTensor *b) {
  int r = cpu_host->tensor_rank(a);
  if (r != cpu_host->tensor_rank(b)) return 0;
  const int64_t *da = cpu_host->tensor_dims(a), *db = cpu_host->tensor_dims(b);
  for (int i = 0; i < r; i++)
    if (da[i] != db[i]) return 0;
  return 1;
}

static floe_code optim_compute(void *state, FloeKernelContext *ctx) {
  const OptimSpec *sp = state;
  const FloeAttrs *attrs = cpu_host->ctx_attrs(ctx);
  FloeDType dt = FLOE_DTYPE_INVALID;
  if (cpu_host->attr_type(attrs, "T", &dt) != FLOE_OK || (dt != FLOE_F32 && dt != FLOE_F64))
    return cpu_host->ctx_set_error(ctx, FLOE_UNIMPLEMENTED,
                                   "the CPU %s kernel supports T = f32 or f64, not %s", sp->op,
                                   cpu_host->dtype_name(dt));
  if (cpu_host->ctx_num_inputs(ctx) != sp->num_inputs)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s takes %d inputs, got %d",
                                   sp->op, sp->num_inputs, cpu_host->ctx_num_inputs(ctx));
  const FloeTensor *in[OPTIM_MAX_INPUTS] = {NULL};
  for (int i = 0; i < sp->num_inputs; i++) in[i] = cpu_host->ctx_input(ctx, i);

  OptimJob j = {.spec = sp, .dt = dt};
  int ns = 0, nr = 0;
  const FloeTensor *var = in[0];
  char sa[CPU_SHAPE_STR_MAX], sb[CPU_SHAPE_STR_MAX];
  for (int i = 0; i < sp->num_inputs; i++) {
    FloeDType it = cpu_host->tensor_dtype(in[i]);
    if (it != dt)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "%s is %s but T is %s: every input of %s has dtype T",
                                     sp->names[i], cpu_host->dtype_name(it),
                                     cpu_host->dtype_name(dt), sp->op);
    if (sp->roles[i] == 's') {
      if (cpu_host->tensor_rank(in[i]) != 0)
        return cpu_host->ctx_set_error(
            ctx, FLOE_INVALID_ARGUMENT, "%s must be a scalar (shape []), got shape %s",
            sp->names[i],
            cpu_shape_str(sa, sizeof sa, cpu_host->tensor_rank(in[i]),
                          cpu_host->tensor_dims(in[i])));
      j.s[ns++] = scalar_value(in[i]);
      continue;
    }
    if (!same_shape(var, in[i]))
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT, "var has shape %s but %s has shape %s: they must match",
          cpu_shape_str(sa, sizeof sa, cpu_host->tensor_rank(var), cpu_host->tensor_dims(var)),
          sp->names[i],
          cpu_shape_str(sb, sizeof sb, cpu_host->tensor_rank(in[i]),
                        cpu_host->tensor_dims(in[i])));
    if (sp->roles[i] == 'g') {
      j.grad = cpu_host->tensor_data(in[i]);
    } else {
      j.state[nr] = cpu_host->tensor_data(in[i]);
      /* The rows are restrict-qualified: one variable passed twice would update wrongly. */
      for (int k = 0; k < nr; k++)
        if (j.state[nr] && j.state[k] == j.state[nr])
          return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                         "%s and %s are the same variable; each slot needs "
                                         "its own",
                                         sp->names[k], sp->names[i]);
      nr++;
    }
  }
  int64_t n = cpu_host->tensor_num_elements(var);
  if (n == 0) return FLOE_OK;

  int nesterov = 0;
  if (cpu_host->attr_bool(attrs, "use_nesterov", &nesterov) != FLOE_OK) nesterov = 0;
  j.nesterov = nesterov;
  if (sp->kind == OPT_ADAM) {
    /* Inputs beta1_power, beta2_power, lr, beta1, beta2, epsilon -> alpha, beta1, beta2,
     * epsilon: the bias correction is one scalar for the whole tensor. */
    double b1p = j.s[0], b2p = j.s[1], lr = j.s[2];
    double alpha = dt == FLOE_F32 ? (double)((float)lr * sqrtf(1.0f - (float)b2p) /
                                             (1.0f - (float)b1p))
                                  : lr * sqrt(1.0 - b2p) / (1.0 - b1p);
    j.s[0] = alpha;
    j.s[1] = j.s[3];
    j.s[2] = j.s[4];
    j.s[3] = j.s[5];
  }
  cpu_parallel_elements(n, sp->cost, optim_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* AssignAddVariableOp / AssignSubVariableOp: var += / -= value, same shape, numeric
 * dtypes; integers wrap (two's complement), halves round once per element. */

#define ASSIGN_ROW(SUF, T, U)                                                                \
  HOT static void assign_##SUF(T *restrict x, const T *restrict y, int64_t n, int sub) {     \
    if (sub)                                                                                 \
      for (int64_t i = 0; i < n; i++) x[i] = (T)((U)x[i] - (U)y[i]);                         \
    else                                                                                     \
      for (int64_t i = 0; i < n; i++) x[i] = (T)((U)x[i] + (U)y[i]);                         \
  }
ASSIGN_ROW(f32, float, float)
ASSIGN_ROW(f64, double, double)
ASSIGN_ROW(i8, int8_t, uint8_t)
ASSIGN_ROW(u8, uint8_t, uint8_t)
ASSIGN_ROW(i32, int32_t, uint32_t)
ASSIGN_ROW(i64, int64_t, uint64_t)

typedef struct AssignJob {
  FloeDType dt;
  char *x;
  const char *y;
  size_t esize;
  int sub;
} AssignJob;

static void assign_half(const AssignJob *j, uint16_t *x, const uint16_t *y, int64_t n) {
  float xb[CPU_HALF_CHUNK], yb[CPU_HALF_CHUNK];
  for (int64_t c = 0; c < n; c += CPU_HALF_CHUNK) {
    int64_t m = n - c < CPU_HALF_CHUNK ? n - c : CPU_HALF_CHUNK;
    cpu_half_to_f32_row(xb, x + c, m, j->dt);
    cpu_half_to_f32_row(yb, y + c, m, j->dt);
    assign_f32(xb, yb, m, j->sub);
    cpu_f32_to_half_row(x + c, xb, m, j->dt);
  }
}

static void assign_range(void *arg, int64_t b, int64_t e) {
  const AssignJob *j = arg;
  void *x = j->x + (size_t)b * j->esize;
  const void *y = j->y + (size_t)b * j->esize;
  int64_t n = e - b;
  switch (j->dt) {
    case FLOE_F32: assign_f32(x, y, n, j->sub); break;
    case FLOE_F64: assign_f64(x, y, n, j->sub); break;
    case FLOE_I8: assign_i8(x, y, n, j->sub); break;
    case FLOE_U8: assign_u8(x, y, n, j->sub); break;
    case FLOE_I32: assign_i32(x, y, n, j->sub); break;
    case FLOE_I64: assign_i64(x, y, n, j->sub); break;
    case FLOE_F16:
    case FLOE_BF16: assign_half(j, x, y, n); break;
    default: break;
  }
}

static floe_code assign_compute(void *state, FloeKernelContext *ctx) {
  int sub = state != NULL;
  const FloeTensor *var = cpu_host->ctx_input(ctx, 0), *val = cpu_host->ctx_input(ctx, 1);
  FloeDType dt = cpu_host->tensor_dtype(var), vdt = cpu_host->tensor_dtype(val);
  char sa[CPU_SHAPE_STR_MAX], sb[CPU_SHAPE_STR_MAX];
  if (dt != vdt)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "the variable is %s but value is %s",
                                   cpu_host->dtype_name(dt), cpu_host->dtype_name(vdt));
  if (!same_shape(var, val))
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "the variable has shape %s but value has shape %s: they must match (no broadcasting)",
        cpu_shape_str(sa, sizeof sa, cpu_host->tensor_rank(var), cpu_host->tensor_dims(var)),
        cpu_shape_str(sb, sizeof sb, cpu_host->tensor_rank(val), cpu_host->tensor_dims(val)));
  AssignJob j = {dt, cpu_host->tensor_data(var), cpu_host->tensor_data(val),
                 cpu_host->dtype_size(dt), sub};
  int64_t n = cpu_host->tensor_num_elements(var);
  if (n == 0) return FLOE_OK;
  cpu_parallel_elements(n, cpu_is_half(dt) ? 4 : 1, assign_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_optim(FloePluginRegistrar *reg) {
  static const OptimSpec *const specs[] = {&spec_sgd, &spec_momentum, &spec_adam,
                                           &spec_rmsprop, &spec_adagrad};
  const uint32_t f32_f64 = FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64);
  floe_code rc = FLOE_OK;
  for (size_t i = 0; i < sizeof specs / sizeof specs[0] && rc == FLOE_OK; i++)
    rc = cpu_add_kernel(reg, specs[i]->op, "T", f32_f64, 0, optim_compute, NULL, NULL,
                        (void *)specs[i]);
  /* state: NULL adds, non-NULL subtracts. */
  static const int subtract = 1;
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "AssignAddVariableOp", "dtype", FLOE_DTYPES_NUMERIC, 0,
                        assign_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "AssignSubVariableOp", "dtype", FLOE_DTYPES_NUMERIC, 0,
                        assign_compute, NULL, NULL, (void *)&subtract);
  return rc;
}
