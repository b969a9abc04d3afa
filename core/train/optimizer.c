/* SPDX-License-Identifier: Apache-2.0 */
/* optimizer.c - optimisers as graph builders: floe_minimize (gradients, L2 weight decay,
 * clipping by global norm, slot variables, one fused ResourceApply* per variable, the global
 * step's increment), learning-rate schedules and the global norm.
 *
 * Everything is ordinary ops (floe_train.h): schedules are Cast/Div/Floor/Pow/Cos/Minimum/
 * Less/Select on the step, computed in f64 and cast to f32 once, so a step in the millions
 * still gives the exact schedule. Builders follow floe.h's sticky error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "train.h"

static const FloeOutput no_output = {NULL, 0};

/* ------------------------------------------------------------------------------------ */
/* Options. */

void floe_optimizer_options_init(FloeOptimizerOptions *o, FloeOptimizerKind kind) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->kind = kind;
  o->learning_rate = kind == FLOE_OPT_ADAM || kind == FLOE_OPT_RMSPROP ? 1e-3 : 1e-2;
  o->momentum = kind == FLOE_OPT_MOMENTUM ? 0.9 : 0.0;
  o->nesterov = 0;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->epsilon = 1e-7;
  o->rho = 0.9;
  o->initial_accumulator = 0.1;
  o->weight_decay = 0.0;
  o->clip_global_norm = 0.0;
  o->use_locking = 1;
  o->schedule = FLOE_LR_CONSTANT;
  o->decay_steps = 0;
  o->decay_rate = 1.0;
  o->staircase = 0;
  o->cosine_alpha = 0.0;
  o->num_boundaries = 0;
  o->increment_global_step = 1;
}

static const char *const kind_names[] = {"sgd", "momentum", "adam", "rmsprop", "adagrad"};

int floe_optimizer_kind_from_name(const char *name) {
  if (!name) return -1;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kind_names); i++)
    if (strcasecmp(name, kind_names[i]) == 0) return (int)i;
  return -1;
}

/* A complete copy of the caller's options: fields beyond an older caller's struct_size keep
 * the defaults of its kind. Records the error on g and returns -1 when o is unusable. */
static int options_copy(FloeGraph *g, const char *what, const FloeOptimizerOptions *o,
                        FloeOptimizerOptions *out) {
  size_t need = offsetof(FloeOptimizerOptions, kind) + sizeof o->kind;
  if (!o || o->struct_size < need) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s: options are %s; fill them with floe_optimizer_options_init", what,
                     o ? "too short (struct_size too small)" : "NULL");
    return -1;
  }
  if ((int)o->kind < FLOE_OPT_SGD || (int)o->kind > FLOE_OPT_ADAGRAD) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s: unknown optimiser kind %d (sgd, momentum, adam, rmsprop, adagrad)",
                     what, (int)o->kind);
    return -1;
  }
  floe_optimizer_options_init(out, o->kind);
  size_t n = o->struct_size < sizeof *out ? o->struct_size : sizeof *out;
  memcpy(out, o, n);
  out->struct_size = sizeof *out;
  return 0;
}

/* Checks the schedule's fields; records the error on g and returns -1 when wrong. */
static int schedule_check(FloeGraph *g, const char *what, const FloeOptimizerOptions *o) {
  const char *bad = NULL;
  if (!isfinite(o->learning_rate) || o->learning_rate < 0) bad = "learning_rate must be >= 0";
  switch (o->schedule) {
    case FLOE_LR_CONSTANT: break;
    case FLOE_LR_EXPONENTIAL:
      if (o->decay_steps <= 0) bad = "decay_steps must be > 0 for the exponential schedule";
      else if (!isfinite(o->decay_rate) || o->decay_rate <= 0) bad = "decay_rate must be > 0";
      break;
    case FLOE_LR_COSINE:
      if (o->decay_steps <= 0) bad = "decay_steps must be > 0 for the cosine schedule";
      else if (!(o->cosine_alpha >= 0 && o->cosine_alpha <= 1))
        bad = "cosine_alpha must be in [0, 1]";
      break;
    case FLOE_LR_PIECEWISE:
      if (o->num_boundaries < 0 || o->num_boundaries > FLOE_LR_MAX_PIECES) {
        bad = "num_boundaries must be in [0, FLOE_LR_MAX_PIECES]";
        break;
      }
      for (int i = 1; i < o->num_boundaries; i++)
        if (o->boundaries[i] <= o->boundaries[i - 1]) bad = "boundaries must increase";
      for (int i = 0; i <= o->num_boundaries; i++)
        if (!isfinite(o->values[i])) bad = "values must be finite";
      break;
    default: bad = "unknown schedule (FLOE_LR_CONSTANT, EXPONENTIAL, PIECEWISE or COSINE)";
  }
  if (!bad) return 0;
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "%s: %s", what, bad);
  return -1;
}

/* Checks the optimiser's hyper-parameters (beyond the schedule). */
static int hyper_check(FloeGraph *g, const char *what, const FloeOptimizerOptions *o) {
  const char *bad = NULL;
  if (!(o->weight_decay >= 0 && isfinite(o->weight_decay))) bad = "weight_decay must be >= 0";
  else if (!(o->clip_global_norm >= 0 && isfinite(o->clip_global_norm)))
    bad = "clip_global_norm must be >= 0 (0: no clipping)";
  else if (!(o->epsilon >= 0 && isfinite(o->epsilon))) bad = "epsilon must be >= 0";
  else if (o->kind == FLOE_OPT_MOMENTUM && !(o->momentum >= 0 && isfinite(o->momentum)))
    bad = "momentum must be >= 0";
  else if (o->kind == FLOE_OPT_RMSPROP && !(o->momentum >= 0 && isfinite(o->momentum)))
    bad = "momentum must be >= 0";
  else if (o->kind == FLOE_OPT_RMSPROP && !(o->rho >= 0 && o->rho <= 1)) bad = "rho must be in [0, 1]";
  else if (o->kind == FLOE_OPT_ADAM && !(o->beta1 >= 0 && o->beta1 < 1))
    bad = "beta1 must be in [0, 1)";
  else if (o->kind == FLOE_OPT_ADAM && !(o->beta2 >= 0 && o->beta2 < 1))
    bad = "beta2 must be in [0, 1)";
  else if (o->kind == FLOE_OPT_ADAGRAD &&
           !(o->initial_accumulator >= 0 && isfinite(o->initial_accumulator)))
    bad = "initial_accumulator must be >= 0";
  if (!bad) return 0;
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "%s: %s", what, bad);
  return -1;
}

/* ------------------------------------------------------------------------------------ */
/* Nodes are "<scope>/<leaf>" as given (floe__build_*, which honour and record the sticky
 * error). */

static bool is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* A scalar Const of dt holding v (rounded as a cast would); dt: a float, i32 or i64. */
static FloeOutput const_scalar(const FloeBuildScope *sc, const char *leaf, FloeDType dt, double v) {
  if (!is_float(dt) && dt != FLOE_I32 && dt != FLOE_I64) {
    floe__graph_fail(sc->g, FLOE_INVALID_ARGUMENT, "node '%s/%s' (Const): no scalar of dtype %s",
                     sc->name, leaf, floe_dtype_name(dt));
    return no_output;
  }
  return floe__build_scalar(sc, leaf, dt, v);
}

static bool is_int(FloeDType dt) {
  return dt == FLOE_I8 || dt == FLOE_U8 || dt == FLOE_I32 || dt == FLOE_I64;
}

/* ------------------------------------------------------------------------------------ */
/* Global step, learning rate, global norm. */

FloeVariable floe_global_step(FloeGraph *g) {
  /* floe_variable_untrained returns the existing "global_step" (same dtype and shape). */
  return floe_variable_untrained(g, "global_step", FLOE_I64, floe_shape_scalar(),
                                 floe_init_zeros());
}

FloeOutput floe_learning_rate(FloeGraph *g, const char *name, const FloeOptimizerOptions *o,
                              FloeOutput step) {
  if (floe_graph_status(g) != FLOE_OK) return no_output;
  const char *scope = name ? name : "learning_rate";
  const FloeBuildScope sc = {.g = g, .name = scope};
  FloeOptimizerOptions opt;
  if (options_copy(g, "floe_learning_rate", o, &opt) != 0 ||
      schedule_check(g, "floe_learning_rate", &opt) != 0)
    return no_output;
  if (opt.schedule == FLOE_LR_CONSTANT)
    return const_scalar(&sc, "value", FLOE_F32, opt.learning_rate);
  if (!step.node) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_learning_rate '%s': the step is invalid (an earlier builder call "
                     "failed); pass floe_global_step(g).value",
                     scope);
    return no_output;
  }
  FloeDType sdt = floe_node_output_dtype(step.node, step.index);
  if (!is_int(sdt)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_learning_rate '%s': the step is %s; it must be an integer scalar "
                     "(i64, like the global step)",
                     scope, floe_dtype_name(sdt));
    return no_output;
  }

  if (opt.schedule == FLOE_LR_PIECEWISE) {
    /* Nested selects from the last piece back: the first boundary above step wins. */
    int n = opt.num_boundaries;
    FloeOutput s = step;
    if (sdt != FLOE_I64) s = floe__build_cast(&sc, "step_i64", step, FLOE_I64);
    FloeOutput r = const_scalar(&sc, n ? "value_last" : "value", FLOE_F32, opt.values[n]);
    for (int i = n - 1; i >= 0; i--) {
      char leaf[64];
      snprintf(leaf, sizeof leaf, "boundary_%d", i);
      FloeOutput b = floe__build_int(&sc, leaf, FLOE_I64, opt.boundaries[i]);
      snprintf(leaf, sizeof leaf, "before_%d", i);
      FloeOutput less = floe__build_binary(&sc, "Less", leaf, s, b);
      snprintf(leaf, sizeof leaf, "value_%d", i);
      FloeOutput v = const_scalar(&sc, leaf, FLOE_F32, opt.values[i]);
      snprintf(leaf, sizeof leaf, "select_%d", i);
      FloeNodeBuilder *sb = floe__build_begin(&sc, "Select", i ? leaf : "value");
      floe_node_add_input(sb, less);
      floe_node_add_input(sb, v);
      floe_node_add_input(sb, r);
      r = floe_out(floe_node_finish(sb), 0);
    }
    return r;
  }

  FloeOutput s = floe__build_cast(&sc, "step_f64", step, FLOE_F64);
  FloeOutput ds = const_scalar(&sc, "decay_steps", FLOE_F64, (double)opt.decay_steps);
  FloeOutput r;
  if (opt.schedule == FLOE_LR_EXPONENTIAL) {
    /* lr * rate ^ p, p = step / decay_steps (floored when staircase). */
    FloeOutput p = floe__build_binary(&sc, "Div", "progress", s, ds);
    if (opt.staircase) p = floe__build_unary(&sc, "Floor", "progress_floor", p);
    FloeOutput rate = const_scalar(&sc, "decay_rate", FLOE_F64, opt.decay_rate);
    FloeOutput f = floe__build_binary(&sc, "Pow", "decay", rate, p);
    FloeOutput lr = const_scalar(&sc, "initial", FLOE_F64, opt.learning_rate);
    r = floe__build_binary(&sc, "Mul", "value_f64", lr, f);
  } else {
    /* lr * (alpha + (1 - alpha) (1 + cos(pi min(step, D) / D)) / 2) = k0 + k1 cos(...). */
    FloeOutput m = floe__build_binary(&sc, "Minimum", "clamped_step", s, ds);
    FloeOutput w =
        const_scalar(&sc, "pi_over_decay_steps", FLOE_F64, M_PI / (double)opt.decay_steps);
    FloeOutput c =
        floe__build_unary(&sc, "Cos", "cos", floe__build_binary(&sc, "Mul", "angle", m, w));
    double k1 = opt.learning_rate * (1.0 - opt.cosine_alpha) * 0.5;
    double k0 = opt.learning_rate * opt.cosine_alpha + k1;
    FloeOutput t = floe__build_binary(&sc, "Mul", "scaled_cos", c,
                                      const_scalar(&sc, "amplitude", FLOE_F64, k1));
    r = floe__build_binary(&sc, "Add", "value_f64", t, const_scalar(&sc, "offset", FLOE_F64, k0));
  }
  return floe__build_cast(&sc, "value", r, FLOE_F32);
}

FloeOutput floe_global_norm(FloeGraph *g, const char *name, const FloeOutput *ts, int n) {
  if (floe_graph_status(g) != FLOE_OK) return no_output;
  const char *scope = name ? name : "global_norm";
  const FloeBuildScope sc = {.g = g, .name = scope};
  if (n < 0 || (n > 0 && !ts)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "floe_global_norm '%s': bad list (%d tensors)",
                     scope, n);
    return no_output;
  }
  if (n == 0) return const_scalar(&sc, "norm", FLOE_F32, 0.0);
  FloeOutput *sums = floe__calloc((size_t)n, sizeof *sums);
  if (!sums) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_global_norm '%s': out of memory", scope);
    return no_output;
  }
  FloeOutput flat_shape = no_output, axis = no_output;
  {
    FloeTensor *shp = floe__build_ints_tensor(FLOE_I32, 1, (const int64_t[]){-1}, 1, NULL);
    FloeTensor *ax = floe__build_ints_tensor(FLOE_I32, 1, (const int64_t[]){0}, 1, NULL);
    if (shp && ax) {
      flat_shape = floe__build_const(&sc, "flat_shape", shp, NULL);
      axis = floe__build_const(&sc, "axis", ax, NULL);
    } else {
      floe__graph_fail(g, FLOE_NO_MEMORY, "floe_global_norm '%s': out of memory", scope);
      floe_tensor_release(shp);
      floe_tensor_release(ax);
    }
  }
  for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++) {
    if (!ts[i].node) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_global_norm '%s': tensor %d is invalid (an earlier builder call "
                       "failed)",
                       scope, i);
      break;
    }
    FloeDType dt = floe_node_output_dtype(ts[i].node, ts[i].index);
    if (!is_float(dt)) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_global_norm '%s': tensor %d ('%s') is %s; only float tensors "
                       "have a norm",
                       scope, i, floe_node_name(ts[i].node), floe_dtype_name(dt));
      break;
    }
    char leaf[48];
    FloeOutput x = ts[i];
    if (dt == FLOE_F16 || dt == FLOE_BF16) { /* squares of halves overflow early */
      snprintf(leaf, sizeof leaf, "t%d/f32", i);
      x = floe__build_cast(&sc, leaf, x, FLOE_F32);
    }
    snprintf(leaf, sizeof leaf, "t%d/flat", i);
    x = floe__build_binary(&sc, "Reshape", leaf, x, flat_shape);
    snprintf(leaf, sizeof leaf, "t%d/square", i);
    x = floe__build_unary(&sc, "Square", leaf, x);
    snprintf(leaf, sizeof leaf, "t%d/sum", i);
    x = floe__build_binary(&sc, "Sum", leaf, x,
                           axis); /* shape [] (the [1] axis drops the only dim) */
    if (dt == FLOE_F64) {
      snprintf(leaf, sizeof leaf, "t%d/f32", i);
      x = floe__build_cast(&sc, leaf, x, FLOE_F32);
    }
    sums[i] = x;
  }
  FloeOutput norm = no_output;
  if (floe_graph_status(g) == FLOE_OK) {
    FloeOutput total = sums[0];
    if (n > 1) {
      FloeNodeBuilder *b = floe__build_begin(&sc, "AddN", "total");
      floe_node_add_input_list(b, sums, n);
      total = floe_out(floe_node_finish(b), 0);
    }
    norm = floe__build_unary(&sc, "Sqrt", "norm", total);
  }
  floe__free(sums);
  return norm;
}

/* ------------------------------------------------------------------------------------ */
/* floe_minimize. */

/* Per variable dtype: the scalars an update op takes, built once in that dtype. */
typedef struct TypedScalars {
  bool made;
  FloeOutput lr, momentum, beta1, beta2, epsilon, rho, b1_power, b2_power;
  FloeOutput scale, wd; /* made by floe_minimize itself, before the updates */
} TypedScalars;

typedef struct Minimize {
  FloeGraph *g;
  const char *scope;
  FloeBuildScope sc; /* nodes "<scope>/<leaf>" */
  FloeOptimizerOptions o;
  FloeOutput lr;                 /* f32 */
  FloeOutput b1_power, b2_power; /* f64, Adam only */
  FloeOutput scale;              /* f32 clipping factor, or invalid */
  TypedScalars typed[FLOE_DTYPE_LIMIT];
} Minimize;

/* The scalar x (f32 or f64) as dtype dt under "<scope>/<dtype>/<leaf>". */
static FloeOutput as_dtype(Minimize *m, FloeOutput x, FloeDType from, FloeDType dt,
                           const char *leaf) {
  if (from == dt) return x;
  char l[64];
  snprintf(l, sizeof l, "%s/%s", floe_dtype_name(dt), leaf);
  return floe__build_cast(&m->sc, l, x, dt);
}

static FloeOutput typed_const(Minimize *m, FloeDType dt, const char *leaf, double v) {
  char l[64];
  snprintf(l, sizeof l, "%s/%s", floe_dtype_name(dt), leaf);
  return const_scalar(&m->sc, l, dt, v);
}

static TypedScalars *typed(Minimize *m, FloeDType dt) {
  TypedScalars *t = &m->typed[dt];
  if (t->made) return t;
  const FloeOptimizerOptions *o = &m->o;
  t->made = true;
  t->lr = as_dtype(m, m->lr, FLOE_F32, dt, "learning_rate");
  if (o->kind == FLOE_OPT_MOMENTUM || o->kind == FLOE_OPT_RMSPROP)
    t->momentum = typed_const(m, dt, "momentum", o->momentum);
  if (o->kind == FLOE_OPT_ADAM) {
    t->beta1 = typed_const(m, dt, "beta1", o->beta1);
    t->beta2 = typed_const(m, dt, "beta2", o->beta2);
    t->b1_power = as_dtype(m, m->b1_power, FLOE_F64, dt, "beta1_power");
    t->b2_power = as_dtype(m, m->b2_power, FLOE_F64, dt, "beta2_power");
  }
  if (o->kind == FLOE_OPT_ADAM || o->kind == FLOE_OPT_RMSPROP || o->kind == FLOE_OPT_ADAGRAD)
    t->epsilon = typed_const(m, dt, "epsilon", o->epsilon);
  if (o->kind == FLOE_OPT_RMSPROP) t->rho = typed_const(m, dt, "rho", o->rho);
  return t;
}

/* One variable to update. */
typedef struct MinVar {
  FloeVariable v;
  const char *name; /* the VarHandleOp's node name (borrowed from g) */
  FloeDType dtype;
  FloeShape shape;
  FloeOutput grad;
} MinVar;

/* The slot "<var>/<slot>" of mv (created untrained on first use, shared afterwards). */
static FloeOutput slot(Minimize *m, const MinVar *mv, const char *slot_name,
                       FloeInitializer init) {
  if (floe_graph_status(m->g) != FLOE_OK) return no_output;
  char *name = floe__build_name(m->g, mv->name, slot_name, false);
  if (!name) {
    floe__graph_fail(m->g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory naming slot %s",
                     m->scope, slot_name);
    return no_output;
  }
  FloeVariable s = floe__variable_slot(m->g, mv->v.handle.node, name, slot_name, mv->dtype,
                                       mv->shape, init);
  floe__free(name);
  return s.handle;
}

/* The fused update of one variable: its ResourceApply* node, after `ready`. */
static FloeNode *update(Minimize *m, const MinVar *mv, FloeNode *const *after, int num_after) {
  FloeGraph *g = m->g;
  const FloeOptimizerOptions *o = &m->o;
  TypedScalars *t = typed(m, mv->dtype);
  static const char *const ops[] = {"ResourceApplyGradientDescent", "ResourceApplyMomentum",
                                    "ResourceApplyAdam", "ResourceApplyRMSProp",
                                    "ResourceApplyAdagrad"};
  FloeOutput in[10];
  int n = 0;
  in[n++] = mv->v.handle;
  switch (o->kind) {
    case FLOE_OPT_SGD:
      in[n++] = t->lr;
      in[n++] = mv->grad;
      break;
    case FLOE_OPT_MOMENTUM:
      in[n++] = slot(m, mv, "momentum", floe_init_zeros());
      in[n++] = t->lr;
      in[n++] = mv->grad;
      in[n++] = t->momentum;
      break;
    case FLOE_OPT_ADAM:
      in[n++] = slot(m, mv, "m", floe_init_zeros());
      in[n++] = slot(m, mv, "v", floe_init_zeros());
      in[n++] = t->b1_power;
      in[n++] = t->b2_power;
      in[n++] = t->lr;
      in[n++] = t->beta1;
      in[n++] = t->beta2;
      in[n++] = t->epsilon;
      in[n++] = mv->grad;
      break;
    case FLOE_OPT_RMSPROP:
      in[n++] = slot(m, mv, "rms", floe_init_zeros());
      in[n++] = slot(m, mv, "mom", floe_init_zeros());
      in[n++] = t->lr;
      in[n++] = t->rho;
      in[n++] = t->momentum;
      in[n++] = t->epsilon;
      in[n++] = mv->grad;
      break;
    case FLOE_OPT_ADAGRAD:
      in[n++] = slot(m, mv, "accumulator", floe_init_constant(o->initial_accumulator));
      in[n++] = t->lr;
      in[n++] = t->epsilon;
      in[n++] = mv->grad;
      break;
  }
  char *leaf = floe__asprintf("update/%s", mv->name);
  if (!leaf) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory", m->scope);
    return NULL;
  }
  FloeNodeBuilder *b = floe__build_begin(&m->sc, ops[o->kind], leaf);
  floe__free(leaf);
  for (int i = 0; i < n; i++) floe_node_add_input(b, in[i]);
  for (int i = 0; i < num_after; i++) floe_node_add_control_input(b, after[i]);
  floe_node_set_attr_bool(b, "use_locking", o->use_locking != 0);
  if (o->kind == FLOE_OPT_MOMENTUM || o->kind == FLOE_OPT_ADAM)
    floe_node_set_attr_bool(b, "use_nesterov", o->nesterov != 0);
  return floe_node_finish(b);
}


/* The variable handle node x reads when it is a ReadVariableOp, else NULL. */
static const FloeNode *read_handle(const FloeNode *x) {
  return strcmp(x->op->name, "ReadVariableOp") == 0 && x->num_inputs == 1 ? x->inputs[0].node
                                                                          : NULL;
}

/* The nodes a minimize step runs: every ancestor (through data and control edges) of the
 * loss and of the gradients, as a flag per node id (caller frees); NULL on out of memory. */
static bool *step_nodes(const FloeGraph *g, FloeOutput loss, const MinVar *mvs, int n) {
  bool *in_step = floe__calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof *in_step);
  FloeNode **stack = floe__malloc((size_t)(g->num_nodes ? g->num_nodes : 1) * sizeof *stack);
  if (!in_step || !stack) {
    floe__free(in_step);
    floe__free(stack);
    return NULL;
  }
  int top = 0;
  for (int i = -1; i < n; i++) {
    FloeNode *root = i < 0 ? loss.node : mvs[i].grad.node;
    if (!in_step[root->id]) {
      in_step[root->id] = true;
      stack[top++] = root;
    }
  }
  while (top > 0) {
    FloeNode *x = stack[--top];
    for (int k = 0; k < x->num_inputs + x->num_control; k++) {
      FloeNode *y = k < x->num_inputs ? x->inputs[k].node : x->control[k - x->num_inputs];
      if (!in_step[y->id]) {
        in_step[y->id] = true;
        stack[top++] = y;
      }
    }
  }
  floe__free(stack);
  return in_step;
}

/* What the update of the variable behind `handle` waits for, into out (room for num_step
 * nodes): each read of it among the step's nodes (ids below num_step flagged in in_step) and
 * each of them fed by such a read, but for Enters (a loop's copy of the value). Returns the
 * count. */
static int update_deps(const FloeGraph *g, int num_step, const bool *in_step,
                       const FloeNode *handle, FloeNode **out) {
  int k = 0;
  for (int id = 0; id < num_step; id++) {
    FloeNode *x = g->nodes[id];
    /* An Enter carries the read into a loop: its edges belong to the loop's frame, and the
     * value it holds is the read's own tensor, which an update copies rather than change. */
    if (!in_step[id] || strcmp(x->op->name, "Enter") == 0) continue;
    bool dep = read_handle(x) == handle;
    for (int a = 0; a < x->num_inputs && !dep; a++) dep = read_handle(x->inputs[a].node) == handle;
    if (dep) out[k++] = x;
  }
  return k;
}

/* Fills mv from a FloeVariable; records the error and returns -1 when it is not one. */
static int min_var_init(Minimize *m, int i, const FloeVariable *v, MinVar *mv) {
  const FloeNode *h = v->handle.node;
  if (!h || !v->value.node || strcmp(floe_node_op(h), "VarHandleOp") != 0) {
    floe__graph_fail(m->g, FLOE_INVALID_ARGUMENT,
                     "floe_minimize '%s': vars[%d] is not a variable (its handle must be a "
                     "VarHandleOp and its value a read of it; use floe_variable)",
                     m->scope, i);
    return -1;
  }
  const FloeAttrValue *dt = floe__attrs_get(&h->attrs, "dtype");
  const FloeAttrValue *shape = floe__attrs_get(&h->attrs, "shape");
  if (!dt || dt->kind != FLOE_ATTR_TYPE || !shape || shape->kind != FLOE_ATTR_SHAPE) {
    floe__graph_fail(m->g, FLOE_INTERNAL,
                     "floe_minimize '%s': variable '%s' lacks its dtype or shape attribute",
                     m->scope, h->name);
    return -1;
  }
  mv->v = *v;
  mv->name = h->name;
  mv->dtype = dt->u.type;
  mv->shape = shape->u.shape;
  mv->grad = no_output;
  return 0;
}

/* A Minimize for scope on g with o checked and copied; NULL (the graph's error set) on
 * failure. Caller frees with floe__free. */
static Minimize *minimize_new(FloeGraph *g, const char *scope, const char *what,
                              const FloeOptimizerOptions *o) {
  Minimize *m = floe__calloc(1, sizeof *m);
  if (!m) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "%s '%s': out of memory", what, scope);
    return NULL;
  }
  m->g = g;
  m->scope = scope;
  m->sc = (FloeBuildScope){.g = g, .name = scope};
  if (options_copy(g, what, o, &m->o) != 0 || schedule_check(g, what, &m->o) != 0 ||
      hyper_check(g, what, &m->o) != 0) {
    floe__free(m);
    return NULL;
  }
  return m;
}

/* A variable's gathers' indices (flattened, i64) and rows ([-1, the variable's row dims])
 * concatenated into ins[1] and ins[2], for one ResourceGatherGrad. 0, or -1 with the sticky
 * error set. */
static int gather_rows_concat(Minimize *m, const MinVar *mv, const FloeOutput *xs,
                              const FloeOutput *dxs, const int *gather_var, int num_vars, int nx,
                              int var, FloeOutput *ins) {
  const FloeBuildScope sc = m->sc;
  int uses = 0;
  for (int k = num_vars; k < nx; k++)
    if (dxs[k].node && gather_var[k - num_vars] == var) uses++;
  FloeOutput *idx = floe__calloc((size_t)uses, sizeof *idx);
  FloeOutput *rows = floe__calloc((size_t)uses, sizeof *rows);
  char *base = floe__asprintf("gather_grad/%s", mv->name);
  if (!idx || !rows || !base) {
    floe__free(idx);
    floe__free(rows);
    floe__free(base);
    floe__graph_fail(m->g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory", m->scope);
    return -1;
  }
  int64_t flat = -1, row_shape[FLOE_MAX_DIMS];
  row_shape[0] = -1;
  for (int d = 1; d < mv->shape.rank; d++) row_shape[d] = mv->shape.dims[d];
  char leaf[160];
  snprintf(leaf, sizeof leaf, "%s/flat", base);
  FloeOutput flat_c = floe__build_ints(&sc, leaf, FLOE_I64, &flat, 1);
  snprintf(leaf, sizeof leaf, "%s/row_shape", base);
  FloeOutput rows_c = floe__build_ints(&sc, leaf, FLOE_I64, row_shape,
                                       mv->shape.rank > 0 ? mv->shape.rank : 1);
  int u = 0;
  for (int k = num_vars; k < nx; k++) {
    if (!dxs[k].node || gather_var[k - num_vars] != var) continue;
    FloeOutput ids = xs[k].node->inputs[1];
    if (floe_node_output_dtype(ids.node, ids.index) != FLOE_I64) {
      snprintf(leaf, sizeof leaf, "%s/%d/ids_i64", base, u);
      ids = floe__build_cast(&sc, leaf, ids, FLOE_I64);
    }
    snprintf(leaf, sizeof leaf, "%s/%d/ids", base, u);
    idx[u] = floe__build_binary(&sc, "Reshape", leaf, ids, flat_c);
    snprintf(leaf, sizeof leaf, "%s/%d/rows", base, u);
    rows[u] = floe__build_binary(&sc, "Reshape", leaf, dxs[k], rows_c);
    u++;
  }
  snprintf(leaf, sizeof leaf, "%s/ids", base);
  FloeNodeBuilder *b = floe__build_begin(&sc, "Concat", leaf);
  floe_node_add_input_list(b, idx, uses);
  snprintf(leaf, sizeof leaf, "%s/axis", base);
  FloeOutput axis = floe__build_int(&sc, leaf, FLOE_I32, 0);
  floe_node_add_input(b, axis);
  ins[1] = floe_out(floe_node_finish(b), 0);
  snprintf(leaf, sizeof leaf, "%s/rows", base);
  b = floe__build_begin(&sc, "Concat", leaf);
  floe_node_add_input_list(b, rows, uses);
  floe_node_add_input(b, axis);
  ins[2] = floe_out(floe_node_finish(b), 0);
  floe__free(idx);
  floe__free(rows);
  floe__free(base);
  return floe_graph_status(m->g) == FLOE_OK ? 0 : -1;
}

/* floe_minimize's first half: the variables (given, or every trainable one) and the
 * gradients of the loss at each (weight decay and clipping applied); those the loss does not
 * reach are left out. *mvs_out (caller frees) holds *n_out of them. 0, or -1 with the
 * graph's error set. */
/* Clipping by the global norm of mvs' gradients (xs: room for n outputs), when asked:
 * each gradient scaled by clip / max(norm, clip). 0, or -1 when out of memory. */
static int clip_grads(Minimize *m, MinVar *mvs, int n, FloeOutput *xs) {
  if (m->o.clip_global_norm <= 0) return 0;
  const FloeBuildScope sc = m->sc;
  for (int i = 0; i < n; i++) xs[i] = mvs[i].grad;
  char *nscope = floe__asprintf("%s/global_norm", m->scope);
  if (!nscope) return -1;
  FloeOutput norm = floe_global_norm(m->g, nscope, xs, n);
  floe__free(nscope);
  /* scale = clip / max(norm, clip): 1 while the norm is within bounds. */
  FloeOutput clip = const_scalar(&sc, "clip_norm", FLOE_F32, m->o.clip_global_norm);
  m->scale =
      floe__build_binary(&sc, "Div", "clip_scale", clip,
                         floe__build_binary(&sc, "Maximum", "clip_denominator", norm, clip));
  for (int i = 0; i < n; i++) {
    TypedScalars *t = &m->typed[mvs[i].dtype];
    if (!t->scale.node) t->scale = as_dtype(m, m->scale, FLOE_F32, mvs[i].dtype, "clip_scale");
    char *leaf = floe__asprintf("clip/%s", mvs[i].name);
    if (!leaf) return -1;
    mvs[i].grad = floe__build_binary(&sc, "Mul", leaf, mvs[i].grad, t->scale);
    floe__free(leaf);
  }
  return 0;
}

static int minimize_grads(Minimize *m, FloeOutput loss, const FloeVariable *vars, int num_vars,
                          MinVar **mvs_out, int *n_out) {
  FloeGraph *g = m->g;
  const char *scope = m->scope;
  const FloeBuildScope sc = m->sc;
  int rc = -1;
  FloeVariable *all = NULL;
  MinVar *mvs = NULL;
  FloeOutput *xs = NULL, *dxs = NULL;
  FloeStatus *st = NULL;
  *mvs_out = NULL;
  *n_out = 0;
  if (!loss.node) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_minimize '%s': the loss is invalid (an earlier builder call failed)",
                     scope);
    goto out;
  }
  bool given = vars != NULL;
  if (!vars) {
    num_vars = floe_graph_variables(g, 1, NULL, 0);
    if (num_vars > 0) {
      all = floe__calloc((size_t)num_vars, sizeof *all);
      if (!all) goto oom;
      num_vars = floe_graph_variables(g, 1, all, num_vars);
    }
    vars = all;
  }
  if (num_vars <= 0) {
    if (given)
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_minimize '%s': num_vars is %d; pass at least one variable, or "
                       "vars NULL for every trainable variable",
                       scope, num_vars);
    else
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "floe_minimize '%s': the graph has no trainable variable to train "
                       "(make them with floe_variable)",
                       scope);
    goto out;
  }
  /* Rows of a variable read with ResourceGather (a sharded embedding lookup) are
   * differentiated too: the gradient at those rows. */
  int num_gathers = 0;
  for (int i = 0; i < g->num_nodes; i++)
    if (!strcmp(g->nodes[i]->op->name, "ResourceGather")) num_gathers++;
  mvs = floe__calloc((size_t)num_vars, sizeof *mvs);
  xs = floe__calloc((size_t)num_vars + (size_t)num_gathers, sizeof *xs);
  dxs = floe__calloc((size_t)num_vars + (size_t)num_gathers, sizeof *dxs);
  int *gather_var = floe__calloc((size_t)num_gathers + 1, sizeof *gather_var);
  st = floe_status_new();
  if (!mvs || !xs || !dxs || !st || !gather_var) {
    floe__free(gather_var);
    goto oom;
  }
  for (int i = 0; i < num_vars; i++) {
    if (min_var_init(m, i, &vars[i], &mvs[i]) != 0) {
      floe__free(gather_var);
      goto out;
    }
    xs[i] = vars[i].value;
  }
  int nx = num_vars;
  for (int j = 0; j < g->num_nodes; j++) {
    FloeNode *x = g->nodes[j];
    if (strcmp(x->op->name, "ResourceGather") != 0) continue;
    for (int i = 0; i < num_vars; i++)
      if (x->inputs[0].node == vars[i].handle.node) {
        gather_var[nx - num_vars] = i;
        xs[nx++] = floe_out(x, 0);
        break;
      }
  }
  /* Gradients of the loss at each variable's read (and gathers); variables it does not
   * reach are skipped. */
  if (floe_gradients(g, &loss, 1, xs, nx, NULL, dxs, st) != FLOE_OK) {
    floe__graph_fail(g, floe_status_code(st), "%s", floe_status_message(st));
    floe__free(gather_var);
    goto out;
  }
  /* The rows' gradient added into zeros of the variable's shape, by an op that takes the
   * variable: it runs where the variable lives (a ps), so only the rows and their indices
   * cross the network, and the update beside it gets an ordinary dense gradient. A variable
   * gathered more than once (a sampled softmax's true and sampled rows, tied embeddings) gets
   * one such op on all its gathers' indices and rows, concatenated: adding dense gradients
   * would bring each to the adder and the sum back. */
  for (int i = 0; i < num_vars && floe_graph_status(g) == FLOE_OK; i++) {
    MinVar *mv = &mvs[i];
    int uses = 0, last = -1;
    for (int k = num_vars; k < nx; k++)
      if (dxs[k].node && gather_var[k - num_vars] == i) uses++, last = k;
    if (uses == 0) continue;
    char leaf[96];
    snprintf(leaf, sizeof leaf, "gather_grad/%s", mv->name);
    FloeOutput ins[3] = {mv->v.handle, xs[last].node->inputs[1], dxs[last]};
    if (uses > 1 && gather_rows_concat(m, mv, xs, dxs, gather_var, num_vars, nx, i, ins) != 0)
      break;
    mv->grad = floe__build_op(&sc, "ResourceGatherGrad", leaf, ins, 3);
  }
  floe__free(gather_var);
  int n = 0;
  for (int i = 0; i < num_vars; i++) {
    if (dxs[i].node) {
      if (mvs[i].grad.node) {
        char leaf[96];
        snprintf(leaf, sizeof leaf, "gather_grad/%s/with_read", mvs[i].name);
        mvs[i].grad = floe__build_binary(&sc, "Add", leaf, dxs[i], mvs[i].grad);
      } else {
        mvs[i].grad = dxs[i];
      }
    }
    if (!mvs[i].grad.node) continue;
    mvs[n++] = mvs[i];
  }
  if (n == 0) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_minimize '%s': the loss '%s' depends on none of the %d variables "
                     "(no gradient reaches any of them)",
                     scope, floe_node_name(loss.node), num_vars);
    goto out;
  }
  /* L2 weight decay, then clipping by the global norm of the decayed gradients. */
  for (int i = 0; i < n && m->o.weight_decay > 0; i++) {
    TypedScalars *t = &m->typed[mvs[i].dtype];
    if (!t->wd.node) {
      char l[64];
      snprintf(l, sizeof l, "%s/weight_decay", floe_dtype_name(mvs[i].dtype));
      t->wd = const_scalar(&sc, l, mvs[i].dtype, m->o.weight_decay);
    }
    char *leaf = floe__asprintf("weight_decay/%s", mvs[i].name);
    char *leaf2 = floe__asprintf("weight_decay/%s/add", mvs[i].name);
    if (!leaf || !leaf2) {
      floe__free(leaf);
      floe__free(leaf2);
      goto oom;
    }
    FloeOutput d = floe__build_binary(&sc, "Mul", leaf, t->wd, mvs[i].v.value);
    mvs[i].grad = floe__build_binary(&sc, "Add", leaf2, mvs[i].grad, d);
    floe__free(leaf);
    floe__free(leaf2);
  }
  if (clip_grads(m, mvs, n, xs) != 0) goto oom;
  if (floe_graph_status(g) != FLOE_OK) goto out;
  *mvs_out = mvs;
  *n_out = n;
  mvs = NULL;
  rc = 0;
  goto out;
oom:
  floe__graph_fail(g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory", scope);
out:
  floe_status_free(st);
  floe__free(dxs);
  floe__free(xs);
  floe__free(mvs);
  floe__free(all);
  return rc;
}

/* floe_minimize's second half: the learning rate and Adam's bias correction at the global
 * step, one fused update per variable of mvs (each applying its .grad), and the global
 * step's increment after all of them, which it returns (NULL with the graph's error set).
 * With a loss, each update also waits for the reads of its variable in the step that
 * computes the loss (see floe_minimize); without (loss.node NULL), for nothing but its
 * gradient. */
static FloeNode *minimize_apply(Minimize *m, MinVar *mvs, int n, FloeOutput loss) {
  FloeGraph *g = m->g;
  const FloeBuildScope sc = m->sc;
  FloeVariable step = floe_global_step(g);
  char *lscope = floe__asprintf("%s/learning_rate", m->scope);
  FloeNode **deps = floe__calloc((size_t)n + 1, sizeof *deps);
  if (!lscope || !deps) {
    floe__free(lscope);
    floe__free(deps);
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory", m->scope);
    return NULL;
  }
  m->lr = floe_learning_rate(g, lscope, &m->o, step.value);
  floe__free(lscope);
  if (m->o.kind == FLOE_OPT_ADAM) {
    /* beta^t with t = step + 1: the bias correction of the update about to run. */
    FloeOutput t = floe__build_binary(&sc, "Add", "adam/t",
                                      floe__build_cast(&sc, "adam/step_f64", step.value, FLOE_F64),
                                      const_scalar(&sc, "adam/one", FLOE_F64, 1.0));
    m->b1_power = floe__build_binary(&sc, "Pow", "adam/beta1_power",
                                     const_scalar(&sc, "adam/beta1", FLOE_F64, m->o.beta1), t);
    m->b2_power = floe__build_binary(&sc, "Pow", "adam/beta2_power",
                                     const_scalar(&sc, "adam/beta2", FLOE_F64, m->o.beta2), t);
  }
  FloeNode *inc = NULL;
  if (floe_graph_status(g) != FLOE_OK) goto out;
  /* What each update waits for: its gradient (an input), every read of its variable that
   * the step computes (the loss and the gradients see the values from before the step) and
   * every node of the step fed by such a read (so the update does not have to copy a value
   * still in use). Updates of different variables overlap the rest of the backward pass.
   * The nodes added from here on (the updates) are not part of that step. */
  if (loss.node) {
    int num_step = g->num_nodes;
    bool *in_step = step_nodes(g, loss, mvs, n);
    FloeNode **after = floe__malloc((size_t)num_step * sizeof *after);
    if (!in_step || !after) {
      floe__free(in_step);
      floe__free(after);
      floe__graph_fail(g, FLOE_NO_MEMORY, "floe_minimize '%s': out of memory", m->scope);
      goto out;
    }
    for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++)
      deps[i] = update(m, &mvs[i], after,
                       update_deps(g, num_step, in_step, mvs[i].v.handle.node, after));
    floe__free(in_step);
    floe__free(after);
  } else {
    for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++)
      deps[i] = update(m, &mvs[i], NULL, 0);
  }
  if (floe_graph_status(g) != FLOE_OK) goto out;
  /* The step counts once every update is done (or, not counting, ends when they are). */
  FloeNodeBuilder *b;
  if (m->o.increment_global_step) {
    b = floe__build_begin(&sc, "AssignAddVariableOp", "increment_global_step");
    floe_node_add_input(b, step.handle);
    floe_node_add_input(b, floe__build_int(&sc, "one", FLOE_I64, 1));
  } else {
    b = floe__build_begin(&sc, "NoOp", "updates");
  }
  for (int i = 0; i < n; i++) floe_node_add_control_input(b, deps[i]);
  inc = floe_node_finish(b);
out:
  floe__free(deps);
  return floe_graph_status(g) == FLOE_OK ? inc : NULL;
}

/* A NoOp called name with control inputs on deps[0..n). */
static FloeNode *group(FloeGraph *g, const char *name, FloeNode *const *deps, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", name);
  for (int i = 0; i < n; i++) floe_node_add_control_input(b, deps[i]);
  return floe_node_finish(b);
}

FloeNode *floe_minimize(FloeGraph *g, const char *name, FloeOutput loss,
                        const FloeOptimizerOptions *o, const FloeVariable *vars, int num_vars) {
  if (floe_graph_status(g) != FLOE_OK) return NULL;
  const char *scope = name ? name : "train";
  Minimize *m = minimize_new(g, scope, "floe_minimize", o);
  if (!m) return NULL;
  MinVar *mvs = NULL;
  int n = 0;
  FloeNode *result = NULL;
  if (minimize_grads(m, loss, vars, num_vars, &mvs, &n) == 0) {
    FloeNode *inc = minimize_apply(m, mvs, n, loss);
    if (inc) result = group(g, scope, &inc, 1); /* the step itself: a NoOp named scope */
  }
  floe__free(mvs);
  floe__free(m);
  return floe_graph_status(g) == FLOE_OK ? result : NULL;
}

FloeNode *floe_allreduce_minimize(FloeGraph *g, const char *name, FloeOutput loss,
                                  const FloeOptimizerOptions *o, const FloeAllReduceOptions *ao,
                                  const FloeVariable *vars, int num_vars) {
  if (floe_graph_status(g) != FLOE_OK) return NULL;
  const char *scope = name ? name : "train";
  if (!ao || ao->struct_size < sizeof *ao) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_allreduce_minimize '%s': FloeAllReduceOptions is NULL or older than "
                     "this library (call floe_all_reduce_options_init)", scope);
    return NULL;
  }
  Minimize *m = minimize_new(g, scope, "floe_allreduce_minimize", o);
  if (!m) return NULL;
  /* Clipping waits for the averaged gradients: every replica then scales alike. */
  double clip = m->o.clip_global_norm;
  m->o.clip_global_norm = 0;
  MinVar *mvs = NULL;
  FloeOutput *grads = NULL;
  int n = 0;
  FloeNode *result = NULL;
  if (minimize_grads(m, loss, vars, num_vars, &mvs, &n) != 0) goto out;
  grads = floe__calloc((size_t)n * 2, sizeof *grads);
  char *rscope = floe__asprintf("%s/all_reduce", scope);
  if (!grads || !rscope) {
    floe__free(rscope);
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_allreduce_minimize '%s': out of memory", scope);
    goto out;
  }
  for (int i = 0; i < n; i++) grads[i] = mvs[i].grad;
  floe_code rc = floe_all_reduce_n(g, rscope, grads, n, ao, grads + n);
  floe__free(rscope);
  if (rc != FLOE_OK) goto out;
  for (int i = 0; i < n; i++) mvs[i].grad = grads[n + i];
  m->o.clip_global_norm = clip;
  if (clip_grads(m, mvs, n, grads) != 0) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_allreduce_minimize '%s': out of memory", scope);
    goto out;
  }
  FloeNode *inc = minimize_apply(m, mvs, n, loss);
  if (inc) result = group(g, scope, &inc, 1);
out:
  floe__free(grads);
  floe__free(mvs);
  floe__free(m);
  return floe_graph_status(g) == FLOE_OK ? result : NULL;
}

/* ------------------------------------------------------------------------------------ */
/* floe_sync_replicas_minimize: TensorFlow's SyncReplicasOptimizer (see floe_train.h). */

void floe_sync_replicas_options_init(FloeSyncReplicasOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->replicas_to_aggregate = 1;
  o->total_num_replicas = 1;
}

/* A node of op under the scope, "<scope>/<leaf>/<var>" (var may be NULL), on ins, after deps. */
static FloeNode *sync_node(Minimize *m, const char *op, const char *leaf, const char *var,
                           const FloeOutput *ins, int n, FloeNode *const *deps, int num_deps,
                           FloeNodeBuilder **keep) {
  char *l = var ? floe__asprintf("%s/%s", leaf, var) : floe__strdup(leaf);
  if (!l) {
    floe__graph_fail(m->g, FLOE_NO_MEMORY, "floe_sync_replicas_minimize '%s': out of memory",
                     m->scope);
    return NULL;
  }
  FloeNodeBuilder *b = floe__build_begin(&m->sc, op, l);
  floe__free(l);
  for (int i = 0; i < n; i++) floe_node_add_input(b, ins[i]);
  for (int i = 0; i < num_deps; i++) floe_node_add_control_input(b, deps[i]);
  if (keep) { /* the caller sets attributes and finishes */
    *keep = b;
    return NULL;
  }
  return floe_node_finish(b);
}

FloeSyncReplicas floe_sync_replicas_minimize(FloeGraph *g, const char *name, FloeOutput loss,
                                             const FloeOptimizerOptions *o,
                                             const FloeSyncReplicasOptions *so,
                                             const FloeVariable *vars, int num_vars) {
  FloeSyncReplicas r;
  memset(&r, 0, sizeof r);
  if (floe_graph_status(g) != FLOE_OK) return r;
  const char *scope = name ? name : "sync_replicas";
  if (!so || so->struct_size < sizeof *so || so->replicas_to_aggregate < 1 ||
      so->total_num_replicas < so->replicas_to_aggregate || so->total_num_replicas > 65536) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_sync_replicas_minimize '%s': %s", scope,
                     !so || so->struct_size < sizeof *so
                         ? "the options are NULL or older than this library (call "
                           "floe_sync_replicas_options_init first)"
                         : "need 1 <= replicas_to_aggregate <= total_num_replicas <= 65536 "
                           "(the replicas beyond replicas_to_aggregate are backups)");
    return r;
  }
  Minimize *m = minimize_new(g, scope, "floe_sync_replicas_minimize", o);
  if (!m) return r;
  m->o.increment_global_step = 1; /* the aggregation step is what counts */
  MinVar *mvs = NULL, *chief = NULL;
  FloeNode **applies = NULL, **sets = NULL;
  int n = 0;
  if (minimize_grads(m, loss, vars, num_vars, &mvs, &n) != 0) goto out;
  chief = floe__calloc((size_t)n, sizeof *chief);
  applies = floe__calloc((size_t)n, sizeof *applies);
  sets = floe__calloc((size_t)n, sizeof *sets);
  if (!chief || !applies || !sets) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_sync_replicas_minimize '%s': out of memory", scope);
    goto out;
  }
  FloeVariable gs = floe_global_step(g);
  char *lname = floe__asprintf("%s/local_step", scope);
  if (!lname) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "floe_sync_replicas_minimize '%s': out of memory", scope);
    goto out;
  }
  FloeVariable local = floe__variable_local(g, lname, FLOE_I64, floe_shape_scalar(), floe_init_zeros());
  floe__free(lname);
  FloeOutput ins[3];
  FloeNodeBuilder *b = NULL;
  /* This replica's local step starts at the global step. */
  ins[0] = local.handle, ins[1] = gs.value;
  r.local_init = sync_node(m, "AssignVariableOp", "local_init", NULL, ins, 2, NULL, 0, NULL);
  FloeOutput k_const = floe__build_int(&m->sc, "replicas_to_aggregate", FLOE_I32,
                                       so->replicas_to_aggregate);
  /* Per variable: its accumulator (with it on its task), and this replica's gradient applied
   * there with the local step it was computed at. */
  for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++) {
    sync_node(m, "ConditionalAccumulator", "accumulator", mvs[i].name, &mvs[i].v.handle, 1, NULL,
              0, &b);
    floe_node_set_attr_type(b, "dtype", mvs[i].dtype);
    floe_node_set_attr_shape(b, "shape", mvs[i].shape);
    /* named by its node: every replica's graph names the same one */
    FloeOutput acc = floe_out(floe_node_finish(b), 0);
    ins[0] = acc, ins[1] = local.value, ins[2] = mvs[i].grad;
    sync_node(m, "AccumulatorApplyGradient", "apply", mvs[i].name, ins, 3, NULL, 0, &b);
    floe_node_set_attr_type(b, "dtype", mvs[i].dtype);
    applies[i] = floe_node_finish(b);
    chief[i] = mvs[i];
    FloeOutput tin[2] = {acc, k_const};
    sync_node(m, "AccumulatorTakeGradient", "take", mvs[i].name, tin, 2, NULL, 0, &b);
    floe_node_set_attr_type(b, "dtype", mvs[i].dtype);
    floe_node_set_attr_shape(b, "shape", mvs[i].shape);
    chief[i].grad = floe_out(floe_node_finish(b), 0);
    if (i == 0)
      r.stale = floe_out(sync_node(m, "AccumulatorNumDropped", "stale_gradients", NULL, &acc, 1,
                                   NULL, 0, NULL), 0);
  }
  if (floe_graph_status(g) != FLOE_OK) goto out;
  /* The token queue lives with the global step; a replica takes a token once its gradients
   * are in, and computes its next step at the token's global step. */
  FloeOutput tq = floe_out(sync_node(m, "SyncTokenQueue", "token_queue", NULL, &gs.handle, 1,
                                     NULL, 0, NULL), 0);
  sync_node(m, "QueueDequeueV2", "take_token", NULL, &tq, 1, applies, n, &b);
  FloeDType i64 = FLOE_I64;
  floe_node_set_attr_type_list(b, "component_types", &i64, 1);
  r.token = floe_out(floe_node_finish(b), 0);
  ins[0] = local.handle, ins[1] = r.token;
  FloeNode *set_local = sync_node(m, "AssignVariableOp", "set_local_step", NULL, ins, 2, NULL, 0,
                                  NULL);
  if (floe_graph_status(g) != FLOE_OK) goto out;
  b = floe_node_begin(g, "NoOp", scope);
  floe_node_add_control_input(b, set_local);
  r.train = floe_node_finish(b);
  /* The chief: replicas_to_aggregate averaged gradients per variable, applied with the
   * optimiser; the global step advanced; the accumulators told; a token per replica. */
  FloeNode *inc = minimize_apply(m, chief, n, (FloeOutput){NULL, 0});
  if (!inc) goto out;
  sync_node(m, "ReadVariableOp", "new_global_step", NULL, &gs.handle, 1, &inc, 1, &b);
  floe_node_set_attr_type(b, "dtype", FLOE_I64);
  FloeOutput new_gs = floe_out(floe_node_finish(b), 0);
  for (int i = 0; i < n && floe_graph_status(g) == FLOE_OK; i++) {
    FloeNode *acc = chief[i].grad.node ? chief[i].grad.node->inputs[0].node : NULL;
    ins[0] = floe_out(acc, 0), ins[1] = new_gs;
    sets[i] = sync_node(m, "AccumulatorSetGlobalStep", "set_global_step", mvs[i].name, ins, 2,
                        NULL, 0, NULL);
  }
  int64_t count = so->total_num_replicas;
  ins[0] = floe__build_ints(&m->sc, "token_count", FLOE_I32, &count, 1);
  ins[1] = new_gs;
  FloeOutput tokens = floe_out(sync_node(m, "Fill", "tokens", NULL, ins, 2, NULL, 0, NULL), 0);
  ins[0] = tq, ins[1] = tokens;
  sync_node(m, "QueueEnqueueManyV2", "put_tokens", NULL, ins, 2, sets, n, &b);
  floe_node_set_attr_type_list(b, "Tcomponents", &i64, 1);
  FloeNode *put = floe_node_finish(b);
  if (floe_graph_status(g) != FLOE_OK) goto out;
  b = floe__build_begin(&m->sc, "NoOp", "chief_update");
  floe_node_add_control_input(b, put);
  r.chief_update = floe_node_finish(b);
  r.close = sync_node(m, "QueueCloseV2", "close_tokens", NULL, &tq, 1, NULL, 0, NULL);
out:
  floe__free(sets);
  floe__free(applies);
  floe__free(chief);
  floe__free(mvs);
  floe__free(m);
  if (floe_graph_status(g) != FLOE_OK) memset(&r, 0, sizeof r);
  return r;
}
