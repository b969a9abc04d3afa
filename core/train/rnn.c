/* SPDX-License-Identifier: Apache-2.0 */
/* rnn.c - the LSTM cell builder of floe_rnn.h: one fused LSTMCell node, or the same cell
 * from primitive ops (the reference the fused kernels are tested against, and the form for
 * runtimes and dtypes without an LSTMCell kernel), and its weights as variables.
 *
 * Like layers.c, the nodes go under "<name>/" with names made unique in the graph, and
 * every failure is the graph's sticky error naming the cell.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "train.h"

static FloeLSTMState invalid_state(void) {
  FloeLSTMState s = {{NULL, 0}, {NULL, 0}};
  return s;
}

void floe_lstm_options_init(FloeLSTMOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->fused = FLOE_LSTM_FUSED_AUTO;
  o->forget_bias = 0.0;
}

/* ---- nodes under the cell's scope ---- */

/* The cell's failures to build its nodes name the cell. */
static void cell_build_fail(const FloeBuildScope *s, const char *op, const char *leaf,
                            const FloeStatus *why) {
  (void)op;
  if (!why)
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "LSTM cell '%s': out of memory naming its %s node",
                     s->name, leaf);
  else
    floe__graph_fail(s->g, FLOE_NO_MEMORY, "LSTM cell '%s': out of memory making its constant %s",
                     s->name, leaf);
}

/* Nodes "<name>/<label>", or "<name>/<label>_<k>" for the first free k. */
static FloeBuildScope cell_scope(FloeGraph *g, const char *name) {
  return (FloeBuildScope){.g = g, .name = name, .unique = true, .fail = cell_build_fail};
}

/* ---- argument checks ---- */

typedef struct CellArgs {
  const char *name;
  FloeOutput in[5]; /* x, h_prev, c_prev, w, b */
} CellArgs;

static const char *const arg_names[5] = {"x", "prev.h", "prev.c", "w", "b"};

static FloeShape shape_of(FloeOutput o) { return floe_node_output_shape(o.node, o.index); }

/* "x [2,3], prev.h [2,4], ..." into buf. */
static void shapes_str(const CellArgs *a, char *buf, size_t len) {
  size_t used = 0;
  for (int k = 0; k < 5 && used < len; k++) {
    char s[96];
    FloeShape sh = shape_of(a->in[k]);
    used += (size_t)snprintf(buf + used, len - used, "%s%s %s", k ? ", " : "", arg_names[k],
                             floe_shape_str(&sh, s, sizeof s));
  }
}

static bool fail_shapes(FloeGraph *g, const CellArgs *a, const char *why) {
  char buf[512];
  shapes_str(a, buf, sizeof buf);
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                   "LSTM cell '%s': %s; x must be [batch, input], prev.h and prev.c [batch, "
                   "hidden], w [input + hidden, 4 * hidden], b [4 * hidden]; got %s",
                   a->name, why, buf);
  return false;
}

/* Merges a known dim into *size (-1: unknown so far); false when they differ. */
static bool merge(int64_t dim, int64_t *size) {
  if (dim < 0) return true;
  if (*size >= 0 && *size != dim) return false;
  *size = dim;
  return true;
}

/* The shapes known now must agree (the op's shape function says the same for the fused
 * form; checking here gives the primitive form one clear message instead of a Concat's or
 * MatMul's). */
static bool shapes_agree(FloeGraph *g, const CellArgs *a) {
  FloeShape s[5];
  for (int k = 0; k < 5; k++) {
    s[k] = shape_of(a->in[k]);
    int want = k == 4 ? 1 : 2;
    if (s[k].rank >= 0 && s[k].rank != want) return fail_shapes(g, a, "a rank is wrong");
  }
  int64_t batch = -1, input = -1, hidden = -1;
  /* Unknown-rank operands are skipped: their dims read as unknown. */
  int64_t d[5][2];
  for (int k = 0; k < 5; k++)
    for (int j = 0; j < 2; j++) d[k][j] = j < s[k].rank ? s[k].dims[j] : -1;
  if (!merge(d[0][0], &batch) || !merge(d[1][0], &batch) || !merge(d[2][0], &batch))
    return fail_shapes(g, a, "the batch sizes differ");
  if (d[3][1] >= 0 && d[3][1] % 4) return fail_shapes(g, a, "w's columns are not a multiple of 4");
  if (d[4][0] >= 0 && d[4][0] % 4) return fail_shapes(g, a, "b's size is not a multiple of 4");
  if (!merge(d[1][1], &hidden) || !merge(d[2][1], &hidden) ||
      !merge(d[3][1] >= 0 ? d[3][1] / 4 : -1, &hidden) ||
      !merge(d[4][0] >= 0 ? d[4][0] / 4 : -1, &hidden))
    return fail_shapes(g, a, "the hidden sizes differ");
  merge(d[0][1], &input);
  if (d[3][0] >= 0 && input >= 0 && hidden >= 0 && d[3][0] != input + hidden)
    return fail_shapes(g, a, "w's rows are not input + hidden");
  return true;
}

/* The common dtype of the arguments, FLOE_DTYPE_INVALID (sticky error set) when one is
 * invalid, not a float or differs from x's. */
static FloeDType check_args(FloeGraph *g, const CellArgs *a) {
  for (int k = 0; k < 5; k++)
    if (!a->in[k].node) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "LSTM cell '%s': argument %s is invalid: it comes from a builder call "
                       "that failed (its FloeOutput has no node)",
                       a->name, arg_names[k]);
      return FLOE_DTYPE_INVALID;
    }
  FloeDType dt = floe_node_output_dtype(a->in[0].node, a->in[0].index);
  for (int k = 0; k < 5; k++) {
    FloeDType dk = floe_node_output_dtype(a->in[k].node, a->in[k].index);
    bool is_float = dk == FLOE_F32 || dk == FLOE_F64 || dk == FLOE_F16 || dk == FLOE_BF16;
    if (!is_float || dk != dt) {
      floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                       "LSTM cell '%s': %s ('%s') is %s but x is %s; every argument must have "
                       "the same float dtype (f32, f64, f16, bf16)",
                       a->name, arg_names[k], floe_node_name(a->in[k].node),
                       floe_dtype_name(dk), floe_dtype_name(dt));
      return FLOE_DTYPE_INVALID;
    }
  }
  return shapes_agree(g, a) ? dt : FLOE_DTYPE_INVALID;
}

/* Reads opts (NULL: defaults) into *o; false (sticky error set) when malformed. */
static bool read_options(FloeGraph *g, const char *name, const FloeLSTMOptions *opts,
                         FloeLSTMOptions *o) {
  floe_lstm_options_init(o);
  if (!opts) return true;
  if (opts->struct_size < offsetof(FloeLSTMOptions, forget_bias) + sizeof(double)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "LSTM cell '%s': options too short (struct_size %zu); fill them with "
                     "floe_lstm_options_init",
                     name, opts->struct_size);
    return false;
  }
  size_t n = opts->struct_size < sizeof *o ? opts->struct_size : sizeof *o;
  memcpy(o, opts, n);
  o->struct_size = sizeof *o;
  if ((int)o->fused < FLOE_LSTM_FUSED_AUTO || (int)o->fused > FLOE_LSTM_FUSED_NEVER ||
      !isfinite(o->forget_bias)) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "LSTM cell '%s': options fused = %d, forget_bias = %g; fused must be "
                     "FLOE_LSTM_FUSED_AUTO, _ALWAYS or _NEVER and forget_bias finite",
                     name, (int)o->fused, o->forget_bias);
    return false;
  }
  return true;
}

/* "Used when present": the default runtime has a kernel for the fused op. */
bool floe__lstm_kernel_present(const char *op) {
  FloeRuntime *rt = floe_runtime_default(NULL);
  return rt && floe_runtime_num_kernels_for(rt, op, NULL) > 0;
}

/* ---- the two forms ---- */

static FloeLSTMState fused_cell(FloeGraph *g, const CellArgs *a, double forget_bias) {
  const FloeBuildScope bs = cell_scope(g, a->name);
  FloeNodeBuilder *b = floe__build_begin(&bs, "LSTMCell", "LSTMCell");
  for (int k = 0; k < 5; k++) floe_node_add_input(b, a->in[k]);
  floe_node_set_attr_float(b, "forget_bias", forget_bias);
  FloeNode *n = floe_node_finish(b);
  FloeLSTMState s = {floe_out(n, 0), floe_out(n, 1)};
  return s;
}

static FloeLSTMState primitive_cell(FloeGraph *g, const CellArgs *a, FloeDType dt,
                                    double forget_bias) {
  const FloeBuildScope bs = cell_scope(g, a->name);
  FloeNodeBuilder *b = floe__build_begin(&bs, "Concat", "concat");
  floe_node_add_input_list(b, a->in, 2); /* [x, h_prev] */
  floe_node_add_input(b, floe__build_int(&bs, "concat_axis", FLOE_I32, 1));
  FloeOutput xh = floe_out(floe_node_finish(b), 0);
  FloeOutput gates = floe__build_binary(&bs, "MatMul", "MatMul", xh, a->in[3]);
  gates = floe__build_binary(&bs, "BiasAdd", "BiasAdd", gates, a->in[4]);
  b = floe__build_begin(&bs, "Split", "split");
  floe_node_add_input(b, gates);
  floe_node_add_input(b, floe__build_int(&bs, "split_axis", FLOE_I32, 1));
  floe_node_set_attr_int(b, "num_split", 4);
  FloeNode *split = floe_node_finish(b);
  FloeOutput pre_f = floe_out(split, 1);
  if (forget_bias != 0.0)
    pre_f = floe__build_binary(&bs, "Add", "f_biased", pre_f,
                               floe__build_scalar(&bs, "forget_bias", dt, forget_bias));
  FloeOutput i = floe__build_unary(&bs, "Sigmoid", "i", floe_out(split, 0));
  FloeOutput f = floe__build_unary(&bs, "Sigmoid", "f", pre_f);
  FloeOutput gg = floe__build_unary(&bs, "Tanh", "g", floe_out(split, 2));
  FloeOutput o = floe__build_unary(&bs, "Sigmoid", "o", floe_out(split, 3));
  FloeOutput c =
      floe__build_binary(&bs, "Add", "c", floe__build_binary(&bs, "Mul", "f_c", f, a->in[2]),
                         floe__build_binary(&bs, "Mul", "i_g", i, gg));
  FloeOutput h =
      floe__build_binary(&bs, "Mul", "h", o, floe__build_unary(&bs, "Tanh", "tanh_c", c));
  FloeLSTMState s = {h, c};
  return s;
}

FloeLSTMState floe_lstm_cell(FloeGraph *g, const char *name, FloeOutput x, FloeLSTMState prev,
                             FloeOutput w, FloeOutput b, const FloeLSTMOptions *opts) {
  if (!g || floe_graph_status(g) != FLOE_OK) return invalid_state();
  CellArgs a = {name ? name : "lstm_cell", {x, prev.h, prev.c, w, b}};
  FloeLSTMOptions o;
  if (!read_options(g, a.name, opts, &o)) return invalid_state();
  FloeDType dt = check_args(g, &a);
  if (dt == FLOE_DTYPE_INVALID) return invalid_state();
  bool fusable = dt == FLOE_F32 || dt == FLOE_F64;
  if (o.fused == FLOE_LSTM_FUSED_ALWAYS && !fusable) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "LSTM cell '%s': the fused LSTMCell op takes f32 or f64, the arguments "
                     "are %s; use FLOE_LSTM_FUSED_AUTO or _NEVER for primitive ops",
                     a.name, floe_dtype_name(dt));
    return invalid_state();
  }
  bool fused = o.fused == FLOE_LSTM_FUSED_ALWAYS ||
               (o.fused == FLOE_LSTM_FUSED_AUTO && fusable &&
                floe__lstm_kernel_present("LSTMCell"));
  FloeLSTMState s = fused ? fused_cell(g, &a, o.forget_bias)
                          : primitive_cell(g, &a, dt, o.forget_bias);
  return floe_graph_status(g) == FLOE_OK ? s : invalid_state();
}

/* ---- weights ---- */

void floe_lstm_weights(FloeGraph *g, const char *name, FloeDType dtype, int64_t input_size,
                       int64_t hidden_size, int64_t seed, FloeVariable *w, FloeVariable *b) {
  const FloeVariable none = {{NULL, 0}, {NULL, 0}, NULL};
  FloeVariable vw = none, vb = none;
  if (!name) name = "lstm_cell";
  bool is_float = dtype == FLOE_F32 || dtype == FLOE_F64 || dtype == FLOE_F16 ||
                  dtype == FLOE_BF16;
  if (!g || floe_graph_status(g) != FLOE_OK) {
    /* the sticky error stands */
  } else if (!is_float || input_size < 1 || hidden_size < 1 || hidden_size > INT64_MAX / 4 ||
             input_size > INT64_MAX - hidden_size) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "LSTM weights '%s': dtype %s, input_size %lld, hidden_size %lld; the "
                     "dtype must be a float (f32, f64, f16, bf16) and both sizes >= 1",
                     name, floe_dtype_name(dtype), (long long)input_size,
                     (long long)hidden_size);
  } else {
    double k = 1.0 / sqrt((double)hidden_size);
    int64_t wd[2] = {input_size + hidden_size, 4 * hidden_size}, bd[1] = {4 * hidden_size};
    char *wn = floe__build_name(g, name, "kernel", false);
    char *bn = floe__build_name(g, name, "bias", false);
    if (!wn || !bn) {
      floe__graph_fail(g, FLOE_NO_MEMORY, "LSTM weights '%s': out of memory naming them", name);
    } else {
      vw = floe_variable(g, wn, dtype, floe_shape_make(2, wd), floe_init_uniform(-k, k, seed));
      vb = floe_variable(g, bn, dtype, floe_shape_make(1, bd), floe_init_uniform(-k, k, seed));
    }
    floe__free(wn);
    floe__free(bn);
    if (floe_graph_status(g) != FLOE_OK) vw = vb = none;
  }
  if (w) *w = vw;
  if (b) *b = vb;
}
