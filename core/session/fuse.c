/* SPDX-License-Identifier: Apache-2.0 */
/* fuse.c - the graph rewrites a session applies to one run's nodes before placing them:
 * chains of memory-bound ops collapse into one op that reads and writes each tensor once.
 *
 *   Relu(BiasAdd(Conv2D(x, f), b))                   -> _FusedConv2DBiasRelu(x, f, b)
 *   [Relu]([Add]([BiasAdd](Conv(x, f, b)), s))       -> _FusedConv(x, f, [b], [s]) with the
 *     flags of the ops present; a Conv alone whose filter is a Const's value becomes a
 *     _FusedConv too, told so (filter_constant: its kernel keeps the prepared filter)
 *   acts(BiasAdd(MatMul(a, b), c)), or Add of a [N]  -> _FusedMatMul(a, b, [c]) (acts: the
 *     or [1, N] c (ONNX's Gemm)                         elementwise tail, as _FusedConv's)
 *   ReluGrad(MaxPoolGrad(y, p, dp), y), y a ReLU's   -> _FusedMaxPoolGradRelu(y, p, dp)
 *     output (the gradient of MaxPool(Relu(.)))
 *
 * The session rewrites a private clone of its graph (the user's graph never changes); a
 * chain is fused only when its inner results have no other consumer in the step, none of
 * its nodes is fed or fetched, its nodes ask for the same device, and the fused op has a
 * kernel on the device the chain would have run on (the caller's check). Control edges into
 * the chain move onto the fused node, and control edges out of it leave from the fused
 * node. A device without the fused kernels simply runs the original ops. */
#include <stdlib.h>
#include <string.h>

#include "session.h"

typedef struct Fuse {
  FloeGraph *g;
  bool *need;
  int cap;               /* entries of need */
  int *uses;             /* per node of the original graph: step consumers of output 0 */
  FloeNode **user;       /* per node of the original graph: its last consumer of output 0 */
  const bool *pinned;    /* fed or fetched (original node ids) */
  FloeFuseCheck ok;
  void *arg;
  int fused;
  int n_orig;            /* nodes of the original graph (pinned's range) */
} Fuse;

static bool same_device(const FloeNode *a, const FloeNode *b) {
  const char *da = a->device ? a->device : "", *db = b->device ? b->device : "";
  return strcmp(da, db) == 0;
}

/* n is in the step, not fed or fetched, and runs op. */
static bool live(const Fuse *f, const FloeNode *n, const char *op) {
  return n->id < f->cap && f->need[n->id] && !f->pinned[n->id] && strcmp(n->op->name, op) == 0;
}

/* The node's data_format ("NHWC" when absent). */
static const char *format_of(const FloeNode *n) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "data_format");
  return v && v->kind == FLOE_ATTR_STRING ? v->u.s : "NHWC";
}

/* A unique name "<base>/<suffix>" (then "<base>/<suffix>_1", ...). */
static char *unique_name(FloeGraph *g, const char *base, const char *suffix) {
  for (int i = 0;; i++) {
    char *name = i ? floe__asprintf("%s/%s_%d", base, suffix, i)
                   : floe__asprintf("%s/%s", base, suffix);
    if (!name || !floe_graph_find(g, name)) return name;
    floe__free(name);
  }
}

/* A unique name for the fused node from its last node's name. */
static char *fused_name(FloeGraph *g, const char *base) { return unique_name(g, base, "_fused"); }

/* Makes op(inputs) (inputs from list_from on as one list argument; -1: none) with the
 * attributes `attrs` of `from`, the bool attributes `flags` set
 * (NULL-terminated; NULL for none), the union of the control inputs of chain[0..n), and their
 * device; NULL (graph error left alone: the clone is discarded by the caller on failure)
 * when the builder fails. */
struct Acts;
static void set_activations(FloeNodeBuilder *b, const struct Acts *a);

static FloeNode *make_fused(Fuse *f, const char *op, FloeNode *const *chain, int n,
                            const FloeOutput *inputs, int num_inputs, int list_from,
                            const FloeNode *from, const char *const *attrs,
                            const char *const *flags, const struct Acts *acts) {
  char *name = fused_name(f->g, chain[n - 1]->name);
  if (!name) return NULL;
  FloeNodeBuilder *b = floe_node_begin(f->g, op, name);
  floe__free(name);
  int plain = list_from < 0 ? num_inputs : list_from;
  for (int i = 0; i < plain; i++) floe_node_add_input(b, inputs[i]);
  if (list_from >= 0) floe_node_add_input_list(b, inputs + plain, num_inputs - plain);
  floe__node_copy_attrs(from, b, attrs);
  for (int i = 0; flags && flags[i]; i++) floe_node_set_attr_bool(b, flags[i], 1);
  if (acts) set_activations(b, acts);
  /* What it stands for, for profiles and `floe graph --optimized`: the ops of the chain (a
   * fused node refused again, into the blocked layout, keeps its list). */
  const FloeAttrValue *prev = floe__attrs_get(&from->attrs, "fused_ops");
  if (prev && prev->kind == FLOE_ATTR_STRING && prev->u.s[0]) {
    floe_node_set_attr_string(b, "fused_ops", prev->u.s);
  } else {
    char ops[256] = "";
    size_t used = 0;
    for (int k = 0; k < n && used < sizeof ops; k++) {
      int w = snprintf(ops + used, sizeof ops - used, "%s%s", k ? "+" : "", chain[k]->op->name);
      if (w < 0) break;
      used += (size_t)w;
    }
    floe_node_set_attr_string(b, "fused_ops", ops);
  }
  for (int k = 0; k < n; k++)
    for (int c = 0; c < chain[k]->num_control; c++) {
      bool inside = false;
      for (int j = 0; j < n; j++) inside |= chain[k]->control[c] == chain[j];
      if (!inside) floe_node_add_control_input(b, chain[k]->control[c]);
    }
  if (chain[0]->device && chain[0]->device[0]) floe_node_set_device(b, chain[0]->device);
  return floe_node_finish(b);
}

/* Makes room in need for the node just added (id fused->id). */
static bool need_grow(Fuse *f) {
  int want = f->g->num_nodes;
  if (want <= f->cap) return true;
  bool *n = floe__realloc(f->need, (size_t)want * sizeof *n);
  if (!n) return false;
  for (int i = f->cap; i < want; i++) n[i] = false;
  f->need = n;
  f->cap = want;
  return true;
}

/* Consumers of (last, 0) read (fused, 0); control edges on any node of the chain now name
 * the fused node; the chain leaves the step. */
static void reroute(Fuse *f, FloeNode *const *chain, int n, FloeNode *fused) {
  FloeNode *last = chain[n - 1];
  for (int id = 0; id < f->g->num_nodes; id++) {
    FloeNode *x = f->g->nodes[id];
    if (x == fused) continue;
    for (int k = 0; k < x->num_inputs; k++)
      if (x->inputs[k].node == last && x->inputs[k].index == 0) x->inputs[k].node = fused;
    for (int c = 0; c < x->num_control; c++)
      for (int j = 0; j < n; j++)
        if (x->control[c] == chain[j]) x->control[c] = fused;
  }
  for (int j = 0; j < n; j++) f->need[chain[j]->id] = false;
  f->need[fused->id] = true;
  f->fused++;
}

/* Adds the fused node for chain (anchor: the node whose placement it must match) unless the
 * caller's check refuses it. -1 on out of memory. */
static int commit(Fuse *f, FloeNode *const *chain, int n, FloeNode *fused,
                  const FloeNode *anchor) {
  if (!fused || !need_grow(f)) return fused ? -1 : 0;
  if (!f->ok(f->arg, anchor, fused)) return 0; /* stays out of the step */
  reroute(f, chain, n, fused);
  return 0;
}

static const char *const conv_attrs[] = {"T", "strides", "padding", "data_format", "dilations",
                                         NULL};
static const char *const pool_attrs[] = {"T", "ksize", "strides", "padding", "data_format",
                                         NULL};

static int fuse_conv_bias_relu(Fuse *f, FloeNode *relu) {
  if (!live(f, relu, "Relu")) return 0;
  FloeNode *bias = relu->inputs[0].node, *conv;
  if (relu->inputs[0].index != 0 || !live(f, bias, "BiasAdd") || f->uses[bias->id] != 1)
    return 0;
  conv = bias->inputs[0].node;
  if (bias->inputs[0].index != 0 || !live(f, conv, "Conv2D") || f->uses[conv->id] != 1)
    return 0;
  if (strcmp(format_of(bias), format_of(conv)) != 0 || !same_device(conv, bias) ||
      !same_device(conv, relu))
    return 0;
  FloeNode *chain[3] = {conv, bias, relu};
  FloeOutput in[3] = {conv->inputs[0], conv->inputs[1], bias->inputs[1]};
  FloeNode *fused =
      make_fused(f, "_FusedConv2DBiasRelu", chain, 3, in, 3, -1, conv, conv_attrs, NULL, NULL);
  return commit(f, chain, 3, fused, conv);
}

static const char *const conv_nd_attrs[] = {"T", "strides", "padding", "explicit_paddings",
                                            "data_format", "dilations", "groups", NULL};

/* The sole step consumer of (n, 0) when it runs op, reads (n, 0) as input `at` (or either
 * input when at < 0) and may join n's chain; else NULL. */
static FloeNode *sole_user(const Fuse *f, const FloeNode *n, const char *op, int at) {
  FloeNode *u = f->user[n->id];
  if (f->uses[n->id] != 1 || !u || !live(f, u, op) || !same_device(n, u)) return NULL;
  for (int k = 0; k < u->num_inputs; k++)
    if (u->inputs[k].node == n && u->inputs[k].index == 0 && (at < 0 || k == at)) return u;
  return NULL;
}

static const FloeShape *shape_of(FloeOutput o) { return &o.node->out_shapes[o.index]; }

/* True when x is the output of a Const that is neither fed nor fetched. */
static bool constant(const Fuse *f, FloeOutput x) {
  /* a Const the layout pass made (past pinned's range) is never fed */
  return strcmp(x.node->op->name, "Const") == 0 &&
         !(x.node->id < f->n_orig && f->pinned[x.node->id]);
}

/* ---- activations after a convolution ---- */

/* Elementwise ops a _FusedConv applies to its output after the ReLU, as the unfused kernels
 * compute them (the "activations" attribute names them in order, comma-separated, and
 * activation_alpha holds each one's parameter). */
#define MAX_ACTS 8

typedef struct Acts {
  char names[MAX_ACTS * 16];
  double alpha[MAX_ACTS];
  int n;
} Acts;

/* x is a one-element f32 Const the step neither feeds nor fetches: its value. */
static bool const_f32(const Fuse *f, FloeOutput x, double *v) {
  int64_t unused;
  return constant(f, x) && floe__const_scalar(x, FLOE_F32, v, &unused);
}

/* n's alpha (LeakyRelu, Elu: the op's default is filled in when the node is built). */
static double alpha_of(const FloeNode *n) {
  const FloeAttrValue *v = floe__node_attr(n, "alpha", FLOE_ATTR_FLOAT);
  return v ? v->u.f : 0;
}

/* Appends one activation to a; false when a is full. */
static bool act_push(Acts *a, const char *name, double alpha) {
  if (a->n == MAX_ACTS) return false;
  size_t len = strlen(a->names);
  snprintf(a->names + len, sizeof a->names - len, "%s%s", a->n ? "," : "", name);
  a->alpha[a->n++] = alpha;
  return true;
}

/* u (prev's sole reader) as the next activation of a: false when it is none
 * of them. Binary ops take a scalar constant on either side ("ConstMaximum": the constant
 * first, which decides which of two equal zeros Maximum returns). */
static bool add_activation(const Fuse *f, const FloeNode *u, const FloeNode *prev, Acts *a) {
  int rank = prev->out_shapes[0].rank; /* known: a constant of no higher rank keeps it */
  if (a->n == MAX_ACTS || u->num_outputs != 1 || u->out_dtypes[0] != FLOE_F32 || rank < 0)
    return false;
  const char *op = u->op->name, *name = NULL;
  double alpha = 0;
  if (u->num_inputs == 1) {
    static const char *const unary[] = {"Relu", "Relu6", "Sigmoid", "Tanh", NULL};
    for (int k = 0; unary[k]; k++)
      if (!strcmp(op, unary[k])) name = unary[k];
    if (!strcmp(op, "LeakyRelu") || !strcmp(op, "Elu")) name = op, alpha = alpha_of(u);
  } else if (u->num_inputs == 2 && u->inputs[0].node != u->inputs[1].node) {
    int c = u->inputs[0].node == prev ? 1 : 0; /* the constant's side */
    const FloeShape *cs = &u->inputs[c].node->out_shapes[u->inputs[c].index];
    if (!const_f32(f, u->inputs[c], &alpha) || cs->rank < 0 || cs->rank > rank) return false;
    if (!strcmp(op, "Mul") || !strcmp(op, "Add")) name = op;
    else if (!strcmp(op, "Sub") && c == 1) name = op;
    else if (!strcmp(op, "Maximum")) name = c == 1 ? op : "ConstMaximum";
    else if (!strcmp(op, "Minimum")) name = c == 1 ? op : "ConstMinimum";
  }
  return name && act_push(a, name, alpha);
}

/* u can join a chain after prev: in the step, not fed or fetched, on prev's device. */
static bool usable(const Fuse *f, const FloeNode *u, const FloeNode *prev) {
  return u->id < f->n_orig && f->need[u->id] && !f->pinned[u->id] && same_device(prev, u);
}

/* p's two step readers when it has exactly two and they are distinct nodes. */
static bool two_readers(const Fuse *f, const FloeNode *p, FloeNode **r) {
  if (f->uses[p->id] != 2) return false;
  int k = 0;
  for (int id = 0; id < f->cap && k <= 2; id++) {
    FloeNode *x = f->g->nodes[id];
    for (int j = 0; f->need[id] && j < x->num_inputs; j++)
      if (x->inputs[j].node == p && x->inputs[j].index == 0) {
        if (k < 2) r[k] = x;
        k++;
      }
  }
  return k == 2 && r[0] != r[1];
}

/* A gate after p: p times an activation chain of p (SiLU: p * Sigmoid(p); HardSwish:
 * p * HardSigmoid(p), which the importer spells Mul, Add, Minimum, Maximum of constants).
 * Appends "Save", the chain's activations and "Gate" to a, and the chain's nodes and the
 * Mul to chain[*n..]; false, with a and chain as they were, when p's readers are not that. */
static bool add_gate(const Fuse *f, const FloeNode *p, Acts *a, FloeNode **chain, int *n) {
  FloeNode *r[2];
  if (!two_readers(f, p, r)) return false;
  for (int mi = 0; mi < 2; mi++) {
    FloeNode *m = r[mi], *u = r[1 - mi];
    if (!usable(f, m, p) || strcmp(m->op->name, "Mul") != 0 || m->num_inputs != 2 ||
        m->out_dtypes[0] != FLOE_F32)
      continue;
    int pk = m->inputs[0].node == p ? 0 : 1; /* p's side of the Mul */
    FloeNode *end = m->inputs[1 - pk].node;
    if (m->inputs[pk].node != p || m->inputs[1 - pk].index != 0 || end->id >= f->n_orig ||
        f->uses[end->id] != 1 || f->user[end->id] != m)
      continue;
    Acts t = *a;
    FloeNode *sub[MAX_ACTS];
    int ns = 0;
    const FloeNode *prev = p;
    bool ok = act_push(&t, "Save", 0);
    while (ok) {
      ok = ns < MAX_ACTS && usable(f, u, prev) && add_activation(f, u, prev, &t);
      if (!ok) break;
      sub[ns++] = u;
      if (u == end) break;
      ok = f->uses[u->id] == 1;
      prev = u;
      u = f->user[u->id];
    }
    if (!ok || !act_push(&t, "Gate", 0)) continue;
    *a = t;
    for (int k = 0; k < ns; k++) chain[(*n)++] = sub[k];
    chain[(*n)++] = m;
    return true;
  }
  return false;
}

static void set_activations(FloeNodeBuilder *b, const Acts *a) {
  floe_node_set_attr_string(b, "activations", a->names);
  floe_node_set_attr_float_list(b, "activation_alpha", a->alpha, a->n);
}

/* Extends chain[0..*n) with the elementwise ops of one input (and a constant) that follow
 * it, appended to a: ReLU6 exported as Clip (Maximum, Minimum), LeakyRelu, Elu, Sigmoid,
 * Tanh, a scale or a shift; and gates, the value times such a chain of it (SiLU, HardSwish).
 * chain has room for MAX_ACTS + 1 more nodes. */
static void add_tail(const Fuse *f, FloeNode **chain, int *n, Acts *a) {
  for (;;) {
    FloeNode *last = chain[*n - 1];
    FloeNode *u = f->uses[last->id] == 1 ? f->user[last->id] : NULL;
    if (u && usable(f, u, last) && add_activation(f, u, last, a))
      chain[(*n)++] = u;
    else if (!add_gate(f, last, a, chain, n))
      break;
  }
}

static int fuse_conv_nd(Fuse *f, FloeNode *conv) {
  if (!live(f, conv, "Conv") || conv->num_inputs != 2) return 0;
  FloeNode *chain[4 + MAX_ACTS + 1] = {conv}, *u;
  FloeOutput in[4] = {conv->inputs[0], conv->inputs[1]};
  const char *flags[5];
  Acts acts = {.n = 0};
  int n = 1, ni = 2, nf = 0;
  /* BiasAdd's channel dim must be the conv's: NHWC goes with CHANNELS_LAST. */
  const char *want = strcmp(format_of(conv), "CHANNELS_FIRST") == 0 ? "NCHW" : "NHWC";
  if ((u = sole_user(f, chain[n - 1], "BiasAdd", 0)) && strcmp(format_of(u), want) == 0) {
    chain[n++] = u;
    in[ni++] = u->inputs[1];
    flags[nf++] = "fused_bias";
  }
  if ((u = sole_user(f, chain[n - 1], "Add", -1)) && u->num_inputs == 2 &&
      u->inputs[0].node != u->inputs[1].node) {
    chain[n++] = u;
    in[ni++] = u->inputs[u->inputs[0].node == chain[n - 2] ? 1 : 0];
    flags[nf++] = "fused_add";
  }
  if ((u = sole_user(f, chain[n - 1], "Relu", 0))) {
    chain[n++] = u;
    flags[nf++] = "fused_relu";
  }
  add_tail(f, chain, &n, &acts);
  if (constant(f, conv->inputs[1])) flags[nf++] = "filter_constant";
  if (nf == 0 && acts.n == 0) return 0; /* nothing to gain */
  flags[nf] = NULL;
  FloeNode *fused = make_fused(f, "_FusedConv", chain, n, in, ni, 2, conv, conv_nd_attrs, flags,
                               acts.n ? &acts : NULL);
  return commit(f, chain, n, fused, conv);
}

static const char *const matmul_attrs[] = {"T", "transpose_a", "transpose_b", NULL};

/* u, the sole reader of the [M, N] product p, adds a per-column bias to it: a BiasAdd (NHWC),
 * or an Add whose other operand is known to be [N] or [1, N] (ONNX's Gemm); *bias is that
 * operand. */
static bool column_bias(const FloeNode *u, const FloeNode *p, FloeOutput *bias) {
  const FloeShape *ps = &p->out_shapes[0];
  int64_t cols = ps->rank == 2 ? ps->dims[1] : -1;
  if (cols < 0 || u->num_inputs != 2 || u->inputs[0].node == u->inputs[1].node) return false;
  if (!strcmp(u->op->name, "BiasAdd") && !strcmp(format_of(u), "NHWC")) {
    *bias = u->inputs[1];
  } else if (!strcmp(u->op->name, "Add")) {
    *bias = u->inputs[u->inputs[0].node == p ? 1 : 0];
  } else {
    return false;
  }
  const FloeShape *bs = shape_of(*bias);
  return bias->node->out_dtypes[bias->index] == FLOE_F32 &&
         ((bs->rank == 1 && bs->dims[0] == cols) ||
          (bs->rank == 2 && bs->dims[0] == 1 && bs->dims[1] == cols));
}

/* MatMul [+ per-column bias] [+ activations] -> _FusedMatMul (f32 matrices). */
static int fuse_matmul(Fuse *f, FloeNode *mm) {
  if (!live(f, mm, "MatMul") || mm->num_inputs != 2 || mm->out_dtypes[0] != FLOE_F32) return 0;
  FloeNode *chain[2 + MAX_ACTS + 1] = {mm};
  FloeOutput in[3] = {mm->inputs[0], mm->inputs[1]};
  const char *flags[2] = {NULL, NULL};
  Acts acts = {.n = 0};
  int n = 1, ni = 2;
  FloeNode *u = f->uses[mm->id] == 1 ? f->user[mm->id] : NULL;
  if (u && usable(f, u, mm) && column_bias(u, mm, &in[2])) {
    chain[n++] = u;
    ni = 3;
    flags[0] = "fused_bias";
  }
  add_tail(f, chain, &n, &acts);
  if (n == 1) return 0; /* nothing to gain */
  FloeNode *fused = make_fused(f, "_FusedMatMul", chain, n, in, ni, 2, mm, matmul_attrs, flags,
                               acts.n ? &acts : NULL);
  return commit(f, chain, n, fused, mm);
}

static int fuse_maxpool_grad_relu(Fuse *f, FloeNode *rg) {
  if (!live(f, rg, "ReluGrad")) return 0;
  FloeNode *mp = rg->inputs[0].node;
  if (rg->inputs[0].index != 0 || !live(f, mp, "MaxPoolGrad") || f->uses[mp->id] != 1) return 0;
  /* ReluGrad's features must be the pooled tensor itself (a ReLU's output). */
  if (rg->inputs[1].node != mp->inputs[0].node || rg->inputs[1].index != mp->inputs[0].index ||
      !same_device(mp, rg))
    return 0;
  FloeNode *chain[2] = {mp, rg};
  FloeNode *fused =
      make_fused(f, "_FusedMaxPoolGradRelu", chain, 2, mp->inputs, 3, -1, mp, pool_attrs, NULL,
                 NULL);
  return commit(f, chain, 2, fused, mp);
}

/* ---------------------------------------------------------------------------------- */
/* The blocked layout: chains of channels-last _FusedConvs pass blocked tensors [N,
 * ceil(C / 16), spatial..., 16] from one to the next (the layout AVX-512 kernels read best,
 * and the one oneDNN's Winograd convolutions need), with _ToBlocked where a chain starts and
 * _FromBlocked where its tensors leave it. It applies only where the device has the
 * converters (the CPU plugin registers them on AVX-512 machines); FLOE_BLOCKED_LAYOUT=0 in
 * the environment turns it off.
 *
 * Channel counts that are not whole blocks (MobileNetV2's 24, EfficientNet's 40) are padded:
 * the last block's lanes past C hold zeros. Every producer keeps them zero (the
 * convolutions clear them after their activations, _ToBlocked writes zeros, a pool or a mean
 * of zeros is zero), so an elementwise op joins a padded chain only when it maps zeros to
 * zero: the activations that do, and sums, differences, products, maxima and minima of two
 * padded tensors (or a product with a scalar). A Concat of padded tensors is not blocked
 * (the padding would land between its inputs' channels). */

typedef struct Blocker {
  Fuse *f;
  bool pad;         /* channel counts that are not whole blocks are blocked, padded */
  FloeNode **blk;   /* per node id below f->g's size at the start: its blocked replacement */
  FloeNode **back;  /* and a _FromBlocked of that, when one was made already */
  int cap;
  FloeOutput *from; /* converted outputs and their _ToBlocked nodes */
  FloeNode **to;
  int num, room;
} Blocker;

/* Channels-last, 1 to 3 spatial dims, the channel count known and a multiple of 16. */
static bool whole_blocks(const FloeShape *s) {
  return s->rank >= 3 && s->rank <= 5 && s->dims[s->rank - 1] > 0 && s->dims[s->rank - 1] % 16 == 0;
}

/* Whether channel counts that are not whole blocks are blocked, padded (FLOE_BLOCKED_PADDING=0
 * in the environment: no). */
static bool padding_enabled(void) {
  const char *e = getenv("FLOE_BLOCKED_PADDING");
  return !e || strcmp(e, "0") != 0;
}

/* Channels-last, 1 to 3 spatial dims, the channel count known: blocked, its last block
 * padded when the count is not a multiple of 16 (whole blocks only with padding off). */
static bool known_channels(const Blocker *bl, const FloeShape *s) {
  return s->rank >= 3 && s->rank <= 5 && s->dims[s->rank - 1] > 0 &&
         (s->dims[s->rank - 1] % 16 == 0 || bl->pad);
}

/* Channels-last with fewer than 16 channels (a first layer: RGB): a blocked convolution
 * reads it as it is. */
static bool plain_input(const FloeShape *s) {
  return s->rank >= 3 && s->rank <= 5 && s->dims[s->rank - 1] > 0 && s->dims[s->rank - 1] < 16;
}

static bool attr_is(const FloeNode *n, const char *name, const char *want) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, name);
  return v && v->kind == FLOE_ATTR_STRING && strcmp(v->u.s, want) == 0;
}

static bool blocked_output(const Blocker *bl, FloeOutput x);

/* A _FusedConv of the step that can run blocked. */
static bool blockable(const Blocker *bl, const FloeNode *n) {
  const Fuse *f = bl->f;
  if (n->id >= f->cap || !f->need[n->id] || strcmp(n->op->name, "_FusedConv") != 0) return false;
  if (n->id < f->n_orig && f->pinned[n->id]) return false;
  const FloeAttrValue *t = floe__attrs_get(&n->attrs, "T");
  const FloeAttrValue *grp = floe__attrs_get(&n->attrs, "groups");
  const FloeAttrValue *b = floe__attrs_get(&n->attrs, "blocked");
  if (!t || t->kind != FLOE_ATTR_TYPE || t->u.type != FLOE_F32 || (b && b->u.b) ||
      !attr_is(n, "data_format", "CHANNELS_LAST"))
    return false;
  const FloeShape *x = shape_of(n->inputs[0]), *y = &n->out_shapes[0];
  if (!(known_channels(bl, x) || plain_input(x)) || !known_channels(bl, y) ||
      x->rank != y->rank)
    return false;
  /* Padding joins a chain that is blocked already: a padded conv between channels-last
   * neighbours (ShuffleNet's stem and channel splits and shuffles) would only add
   * conversions. */
  bool padded = !whole_blocks(y) || (!whole_blocks(x) && !plain_input(x));
  if (padded && !blocked_output(bl, n->inputs[0])) return false;
  if (grp && grp->u.i != 1) {
    /* depthwise (a channel a group), or whole blocks a group: oneDNN's blocked kernels */
    int64_t G = grp->u.i, c = x->dims[x->rank - 1], o = y->dims[y->rank - 1];
    if ((plain_input(x) && !blocked_output(bl, n->inputs[0])) || G <= 0 || c % G || o % G ||
        !((G == c && G == o) || ((c / G) % 16 == 0 && (o / G) % 16 == 0)))
      return false;
  }
  const FloeAttrValue *add = floe__attrs_get(&n->attrs, "fused_add");
  if (add && add->u.b) { /* the side input broadcasts over anything but the channels */
    const FloeShape *sd = shape_of(n->inputs[n->num_inputs - 1]);
    if (sd->rank != y->rank || sd->dims[y->rank - 1] != y->dims[y->rank - 1]) return false;
  }
  return true;
}

/* A one-input converter node of `in` on near's device: _ToBlocked when `to`, else
 * _FromBlocked of a tensor of `channels` channels; NULL on failure. */
static FloeNode *converter(Fuse *f, bool to, FloeOutput in, const FloeNode *near,
                           int64_t channels) {
  const char *op = to ? "_ToBlocked" : "_FromBlocked";
  char *name = unique_name(f->g, in.node->name, to ? "_to_blocked" : "_from_blocked");
  if (!name) return NULL;
  FloeNodeBuilder *b = floe_node_begin(f->g, op, name);
  floe__free(name);
  floe_node_add_input(b, in);
  if (!to && channels > 0 && channels % 16) floe_node_set_attr_int(b, "channels", channels);
  if (near->device && near->device[0]) floe_node_set_device(b, near->device);
  FloeNode *n = floe_node_finish(b);
  return n && need_grow(f) ? n : NULL;
}

/* The blocked form of `in` for conv (a blocked conv's output, or a _ToBlocked of it, made
 * once per output); NULL on failure or when the device has no converter. */
static FloeNode *as_blocked(Blocker *bl, FloeOutput in, const FloeNode *conv) {
  if (in.index == 0 && in.node->id < bl->cap && bl->blk[in.node->id]) return bl->blk[in.node->id];
  for (int i = 0; i < bl->num; i++)
    if (bl->from[i].node == in.node && bl->from[i].index == in.index) return bl->to[i];
  if (bl->num == bl->room) {
    int room = bl->room ? 2 * bl->room : 16;
    FloeOutput *from = floe__realloc(bl->from, (size_t)room * sizeof *from);
    if (from) bl->from = from;
    FloeNode **to = from ? floe__realloc(bl->to, (size_t)room * sizeof *to) : NULL;
    if (!to) return NULL;
    bl->to = to;
    bl->room = room;
  }
  FloeNode *t = converter(bl->f, true, in, conv, 0);
  if (!t || !bl->f->ok(bl->f->arg, conv, t)) return NULL;
  bl->from[bl->num] = in;
  bl->to[bl->num++] = t;
  return t;
}

/* The channels-first tensor x is a Transpose of, when x is that Transpose's output by the
 * constant permutation channels-first -> channels-last and its only use in the step is
 * conv; else an invalid output. */
static FloeOutput channels_first_source(const Fuse *f, FloeOutput x) {
  FloeOutput none = {NULL, 0};
  const FloeNode *t = x.node;
  if (x.index != 0 || strcmp(t->op->name, "Transpose") != 0 || t->id >= f->n_orig ||
      f->uses[t->id] != 1 || f->pinned[t->id] || t->num_control != 0 || t->num_inputs != 2)
    return none;
  const FloeNode *pn = t->inputs[1].node;
  const FloeAttrValue *v = floe__attrs_get(&pn->attrs, "value");
  if (strcmp(pn->op->name, "Const") != 0 || !v || v->kind != FLOE_ATTR_TENSOR) return none;
  const FloeTensor *perm = v->u.tensor;
  int64_t r = floe_tensor_num_elements(perm);
  if (floe_tensor_rank(perm) != 1 || r < 3 || r > 5 || shape_of(x)->rank != r) return none;
  for (int64_t i = 0; i < r; i++) {
    int64_t want = i == 0 ? 0 : i == r - 1 ? 1 : i + 1, got;
    if (floe_tensor_dtype(perm) == FLOE_I32)
      got = ((const int32_t *)floe_tensor_data(perm))[i];
    else if (floe_tensor_dtype(perm) == FLOE_I64)
      got = ((const int64_t *)floe_tensor_data(perm))[i];
    else
      return none;
    if (got != want) return none;
  }
  return t->inputs[0];
}

/* A per-dim list attribute (per entries per dim) of a channels-last node in channels-first
 * order: the last dim's entries move to just after the batch dim's. */
static void channels_first_list(FloeNodeBuilder *b, const FloeNode *from, const char *name,
                                int per) {
  const FloeAttrValue *a = floe__attrs_get(&from->attrs, name);
  if (!a || a->kind != FLOE_ATTR_INT_LIST || a->u.ilist.n == 0) return;
  size_t n = a->u.ilist.n, k = 0;
  int64_t out[2 * FLOE_MAX_DIMS];
  if (n > sizeof out / sizeof *out || n % (size_t)per) return;
  const int64_t *v = a->u.ilist.v;
  for (int j = 0; j < per; j++) out[k++] = v[j];
  for (int j = 0; j < per; j++) out[k++] = v[n - (size_t)per + (size_t)j];
  for (size_t i = (size_t)per; i + (size_t)per < n; i++) out[k++] = v[i];
  floe_node_set_attr_int_list(b, name, out, k);
}

/* The blocked form of conv reading the channels-first tensor `src` directly (conv read its
 * channels-last Transpose): plain_input, CHANNELS_FIRST, window lists reordered. */
static FloeNode *blocked_from_channels_first(Fuse *f, FloeNode *conv, FloeOutput src,
                                             const FloeOutput *in, int n) {
  char *name = fused_name(f->g, conv->name);
  if (!name) return NULL;
  FloeNodeBuilder *b = floe_node_begin(f->g, "_FusedConv", name);
  floe__free(name);
  floe_node_add_input(b, src);
  floe_node_add_input(b, in[1]);
  floe_node_add_input_list(b, in + 2, n - 2);
  static const char *const same[] = {"T", "padding", "groups", "fused_bias", "fused_add",
                                     "fused_relu", "filter_constant", "fused_ops",
                                     "activations", "activation_alpha", NULL};
  floe__node_copy_attrs(conv, b, same);
  floe_node_set_attr_string(b, "data_format", "CHANNELS_FIRST");
  channels_first_list(b, conv, "strides", 1);
  channels_first_list(b, conv, "dilations", 1);
  channels_first_list(b, conv, "explicit_paddings", 2);
  floe_node_set_attr_bool(b, "blocked", 1);
  floe_node_set_attr_bool(b, "plain_input", 1);
  for (int c = 0; c < conv->num_control; c++) floe_node_add_control_input(b, conv->control[c]);
  if (conv->device && conv->device[0]) floe_node_set_device(b, conv->device);
  return floe_node_finish(b);
}

static const char *const blocked_attrs[] = {
    "T", "strides", "padding", "explicit_paddings", "data_format", "dilations", "groups",
    "fused_bias", "fused_add", "fused_relu", "filter_constant", "activations",
    "activation_alpha", NULL};

/* conv as a blocked _FusedConv reading blocked inputs; false when it stays as it is. */
static bool block_one(Blocker *bl, FloeNode *conv) {
  Fuse *f = bl->f;
  FloeOutput in[4];
  int n = conv->num_inputs;
  if (n > 4) return false;
  memcpy(in, conv->inputs, (size_t)n * sizeof *in);
  const FloeAttrValue *add = floe__attrs_get(&conv->attrs, "fused_add");
  /* few channels are read as they are, unless their producer is blocked already */
  bool plain = plain_input(shape_of(in[0])) && !blocked_output(bl, in[0]);
  FloeNode *x = plain ? NULL : as_blocked(bl, in[0], conv);
  FloeNode *side = add && add->u.b ? as_blocked(bl, in[n - 1], conv) : NULL;
  if ((!plain && !x) || (add && add->u.b && !side)) return false;
  if (x) in[0] = (FloeOutput){x, 0};
  if (side) in[n - 1] = (FloeOutput){side, 0};
  static const char *const flags[] = {"blocked", NULL}, *const plain_flags[] = {
      "blocked", "plain_input", NULL};
  /* A plain input transposed from channels-first (an ONNX model's image) is read before the
   * Transpose: oneDNN reads such first layers channels-first anyway. */
  FloeOutput cf = plain ? channels_first_source(f, in[0]) : (FloeOutput){NULL, 0};
  FloeNode *b = cf.node ? blocked_from_channels_first(f, conv, cf, in, n)
                        : make_fused(f, "_FusedConv", &conv, 1, in, n, 2, conv, blocked_attrs,
                                     plain ? plain_flags : flags, NULL);
  /* A plain input needs no converter, but the device must still have them: they say it
   * wants the blocked layout. */
  if (!b || !need_grow(f) || !f->ok(f->arg, conv, b)) return false;
  FloeNode *back = NULL;
  int64_t oc = conv->out_shapes[0].dims[conv->out_shapes[0].rank - 1];
  if (plain && (!(back = converter(f, false, (FloeOutput){b, 0}, b, oc)) ||
                !f->ok(f->arg, conv, back)))
    return false;
  bl->back[conv->id] = back;
  if (cf.node) f->need[in[0].node->id] = false; /* the Transpose: conv was its only use */
  f->need[b->id] = true;
  if (x) f->need[x->id] = true;
  if (side) f->need[side->id] = true;
  f->need[conv->id] = false;
  bl->blk[conv->id] = b;
  return true;
}

/* A list attribute of a rank-r window op for the blocked tensor (rank r + 1): `per` (1 or 2)
 * entries of `v` inserted after the batch dim's (the channel blocks' dim: a window of 1). */
static void blocked_list(FloeNodeBuilder *b, const FloeNode *from, const char *name, int per,
                         int64_t v) {
  const FloeAttrValue *a = floe__attrs_get(&from->attrs, name);
  if (!a || a->kind != FLOE_ATTR_INT_LIST || a->u.ilist.n == 0) return;
  int64_t out[2 * (FLOE_MAX_DIMS + 1)];
  size_t n = a->u.ilist.n, k = 0;
  if (n + (size_t)per > sizeof out / sizeof *out) return;
  for (size_t i = 0; i < n; i++) {
    out[k++] = a->u.ilist.v[i];
    if (i + 1 == (size_t)per)
      for (int j = 0; j < per; j++) out[k++] = v;
  }
  floe_node_set_attr_int_list(b, name, out, k);
}

/* A channels-last Pool of a blocked tensor as a Pool of the blocked tensor, one spatial dim
 * more (the channel blocks, window 1): the same windows over every channel. */
static void block_pool(Blocker *bl, FloeNode *pool) {
  Fuse *f = bl->f;
  if (pool->id >= f->cap || !f->need[pool->id] || strcmp(pool->op->name, "Pool") != 0 ||
      (pool->id < f->n_orig && f->pinned[pool->id]) || pool->num_inputs != 1)
    return;
  FloeOutput in = pool->inputs[0];
  const FloeShape *x = shape_of(in);
  if (in.index != 0 || in.node->id >= bl->cap || !bl->blk[in.node->id] ||
      !attr_is(pool, "data_format", "CHANNELS_LAST") || x->rank < 3 || x->rank > 4)
    return;
  char *name = unique_name(f->g, pool->name, "_blocked");
  if (!name) return;
  FloeNodeBuilder *b = floe_node_begin(f->g, "Pool", name);
  floe__free(name);
  floe_node_add_input(b, (FloeOutput){bl->blk[in.node->id], 0});
  static const char *const same[] = {"T", "pooling_type", "padding", "data_format", "ceil_mode",
                                     "count_include_pad", NULL};
  floe__node_copy_attrs(pool, b, same);
  blocked_list(b, pool, "ksize", 1, 1);
  blocked_list(b, pool, "strides", 1, 1);
  blocked_list(b, pool, "dilations", 1, 1);
  blocked_list(b, pool, "explicit_paddings", 2, 0);
  for (int c = 0; c < pool->num_control; c++) floe_node_add_control_input(b, pool->control[c]);
  if (pool->device && pool->device[0]) floe_node_set_device(b, pool->device);
  FloeNode *p = floe_node_finish(b);
  if (!p || !need_grow(f) || !f->ok(f->arg, pool, p)) return;
  f->need[p->id] = true;
  f->need[pool->id] = false;
  bl->blk[pool->id] = p;
}

/* The value of x when it is an integer scalar Const the step neither feeds nor fetches. */
static bool const_int(const Fuse *f, FloeOutput x, int64_t *v) {
  double unused;
  return constant(f, x) && (floe__const_scalar(x, FLOE_I32, &unused, v) ||
                            floe__const_scalar(x, FLOE_I64, &unused, v));
}

/* A new Const of t (the graph takes its own reference) named after base and suffix; not yet
 * in the step (the caller adds it with the node that reads it). */
static FloeOutput new_const(Fuse *f, const char *base, const char *suffix, FloeTensor *t) {
  char *name = t ? unique_name(f->g, base, suffix) : NULL;
  FloeOutput c = name ? floe_const(f->g, name, t) : (FloeOutput){NULL, 0};
  floe__free(name);
  return c;
}

/* A channels-last Concat along the channels of tensors that are all blocked or whole blocks
 * (at least one blocked) as a Concat of the blocked tensors along the channel blocks' dim
 * (dim 1): whole blocks of 16 channels follow each other there as they do in the channels.
 * Inputs that are not blocked yet get a _ToBlocked. */
static void block_concat(Blocker *bl, FloeNode *cat) {
  Fuse *f = bl->f;
  enum { MAX_VALUES = 256 };
  int nv = cat->num_inputs - 1;
  if (cat->id >= bl->cap || !f->need[cat->id] || strcmp(cat->op->name, "Concat") != 0 ||
      (cat->id < f->n_orig && f->pinned[cat->id]) || nv < 1 || nv > MAX_VALUES)
    return;
  const FloeShape *y = &cat->out_shapes[0];
  int64_t axis;
  if (!whole_blocks(y) || !const_int(f, cat->inputs[nv], &axis) ||
      (axis != y->rank - 1 && axis != -1))
    return;
  const FloeAttrValue *t = floe__attrs_get(&cat->attrs, "T");
  if (!t || t->kind != FLOE_ATTR_TYPE || t->u.type != FLOE_F32) return;
  FloeOutput vals[MAX_VALUES];
  bool any = false;
  for (int i = 0; i < nv; i++) {
    FloeOutput x = cat->inputs[i];
    if (!whole_blocks(shape_of(x)) || shape_of(x)->rank != y->rank) return;
    any |= x.index == 0 && x.node->id < bl->cap && bl->blk[x.node->id];
  }
  if (!any) return;
  for (int i = 0; i < nv; i++) {
    FloeNode *b = as_blocked(bl, cat->inputs[i], cat);
    if (!b) return;
    vals[i] = (FloeOutput){b, 0};
  }
  FloeTensor *one = floe_tensor_new(FLOE_I32, 0, NULL, NULL);
  if (one) *(int32_t *)floe_tensor_data(one) = 1;
  FloeOutput ax = new_const(f, cat->name, "_blocked_axis", one);
  floe_tensor_release(one);
  char *name = ax.node ? unique_name(f->g, cat->name, "_blocked") : NULL;
  if (!name || !need_grow(f)) {
    floe__free(name);
    return;
  }
  FloeNodeBuilder *b = floe_node_begin(f->g, "Concat", name);
  floe__free(name);
  floe_node_add_input_list(b, vals, nv);
  floe_node_add_input(b, ax);
  floe_node_set_attr_type(b, "T", FLOE_F32);
  floe_node_set_attr_type(b, "Tidx", FLOE_I32);
  for (int c = 0; c < cat->num_control; c++) floe_node_add_control_input(b, cat->control[c]);
  if (cat->device && cat->device[0]) floe_node_set_device(b, cat->device);
  FloeNode *n = floe_node_finish(b);
  if (!n || !need_grow(f) || !f->ok(f->arg, cat, n)) return;
  for (int i = 0; i < nv; i++) f->need[vals[i].node->id] = true;
  f->need[ax.node->id] = true;
  f->need[n->id] = true;
  f->need[cat->id] = false;
  bl->blk[cat->id] = n;
}

static bool blocked_output(const Blocker *bl, FloeOutput x) {
  return x.index == 0 && x.node->id < bl->cap && bl->blk[x.node->id];
}

/* A Reshape of x to shape (a new Const) on near's device, in the step; an invalid output on
 * failure. */
static FloeOutput reshape_to(Fuse *f, FloeOutput x, const int64_t *dims, int64_t r,
                             const FloeNode *near, const char *suffix) {
  FloeOutput none = {NULL, 0};
  /* A constant (a batch norm's scale, a bias) is reshaped now, into a Const of its own:
   * constant folding ran before this pass made the Reshape, which would otherwise run every
   * step (DenseNet-121: 124 of them). */
  const FloeAttrValue *v = floe__attrs_get(&x.node->attrs, "value");
  if (floe__opt_constant_folding_on() && x.index == 0 && constant(f, x) &&
      x.node->num_control == 0 && v && v->kind == FLOE_ATTR_TENSOR) {
    int64_t n = 1;
    for (int64_t i = 0; i < r; i++) n *= dims[i];
    const FloeTensor *t = v->u.tensor;
    if (n == floe_tensor_num_elements(t)) {
      FloeTensor *shaped = floe_tensor_from_data(floe_tensor_dtype(t), (int)r, dims,
                                                 floe_tensor_data(t), floe_tensor_nbytes(t), NULL);
      FloeOutput c = new_const(f, x.node->name, suffix, shaped);
      if (shaped) floe_tensor_release(shaped);
      if (!c.node || !need_grow(f)) return none;
      f->need[c.node->id] = true;
      return c;
    }
  }
  FloeTensor *shape = floe_tensor_new(FLOE_I64, 1, &r, NULL);
  if (shape) memcpy(floe_tensor_data(shape), dims, (size_t)r * sizeof *dims);
  FloeOutput sc = new_const(f, near->name, "_blocked_shape", shape);
  floe_tensor_release(shape);
  char *rn = sc.node ? unique_name(f->g, near->name, suffix) : NULL;
  FloeOutput out = none;
  if (rn) {
    FloeNodeBuilder *b = floe_node_begin(f->g, "Reshape", rn);
    floe_node_add_input(b, x);
    floe_node_add_input(b, sc);
    if (near->device && near->device[0]) floe_node_set_device(b, near->device);
    FloeNode *n = floe_node_finish(b);
    if (n && need_grow(f)) {
      f->need[sc.node->id] = true;
      f->need[n->id] = true;
      out = (FloeOutput){n, 0};
    }
  }
  floe__free(rn);
  return out;
}

/* The operand of a blocked binary op for `other`, which broadcast against a channels-last
 * tensor of shape y: itself when it is all ones (a scalar; only when scalar_ok, as a scalar
 * would fill a padded tensor's padding), the blocked form of a tensor of y's rank and
 * channels (y's shape, or one broadcast over some dims), a Reshape to [1, C/16, 1, ..., 16]
 * when only its last dim is not 1 (per channel; C whole blocks, else a Reshape to y's rank
 * then its padded blocked form); else an invalid output. */
static FloeOutput blocked_operand(Blocker *bl, FloeOutput other, const FloeShape *y,
                                  const FloeNode *near, bool scalar_ok) {
  FloeOutput none = {NULL, 0};
  const FloeShape *s = shape_of(other);
  if (blocked_output(bl, other)) {
    /* the same shape, or one value a channel per image (squeeze-excitation's gate) */
    bool fits = s->rank == y->rank && s->dims[0] == y->dims[0] &&
                s->dims[s->rank - 1] == y->dims[y->rank - 1];
    for (int i = 1; fits && i + 1 < s->rank; i++)
      fits = s->dims[i] == 1 || s->dims[i] == y->dims[i];
    return fits ? (FloeOutput){bl->blk[other.node->id], 0} : none;
  }
  if (s->rank < 0 || s->rank > y->rank) return none;
  int64_t c = s->rank ? s->dims[s->rank - 1] : 1, yc = y->dims[y->rank - 1];
  bool ones = true;
  for (int i = 0; i + 1 < s->rank; i++) ones &= s->dims[i] == 1;
  if (ones && c == 1) return scalar_ok ? other : none;
  Fuse *f = bl->f;
  int64_t dims[FLOE_MAX_DIMS + 1], r = y->rank + 1;
  for (int i = 0; i < r; i++) dims[i] = 1;
  if (ones && c == yc && yc % 16 == 0) { /* per channel, whole blocks: a view */
    dims[1] = c / 16;
    dims[r - 1] = 16;
    return reshape_to(f, other, dims, r, near, "_blocked_operand");
  }
  if (s->rank == y->rank && known_channels(bl, s) && c == yc) {
    /* y's channels, any other dims (y's, or 1 to broadcast: a gate per image and channel):
     * the blocked form broadcasts as the channels-last one did, the channels staying put */
    FloeNode *t = as_blocked(bl, other, near);
    return t ? (FloeOutput){t, 0} : none;
  }
  if (!ones || c != yc || !known_channels(bl, y)) return none;
  dims[r - 2] = c; /* [1, ..., 1, C] of y's rank, then blocked with its padding */
  FloeOutput at_rank = reshape_to(f, other, dims, r - 1, near, "_operand_rank");
  FloeNode *t = at_rank.node ? as_blocked(bl, at_rank, near) : NULL;
  return t ? (FloeOutput){t, 0} : none;
}

/* An elementwise op of a blocked tensor as the same op of the blocked tensor: unary
 * activations and math, and binary arithmetic with a tensor of the same shape, a per-channel
 * operand or a scalar (batch normalisation's scale and shift, DenseNet's pre-activations).
 * A padded tensor takes only the ops that keep its padding zero (see the section's top). */
static void block_elementwise(Blocker *bl, FloeNode *n) {
  static const char *const unary[] = {"Relu", "Relu6", "Sigmoid", "Tanh", "Elu", "LeakyRelu",
                                      "Neg", "Abs", "Exp", "Square", "Sqrt", "Softplus",
                                      "Gelu", NULL};
  static const char *const binary[] = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum",
                                       "AddV2", NULL};
  /* f(0) = 0 (and f(0, 0) = 0): what a padded tensor allows */
  static const char *const zero_keeping[] = {"Relu", "Relu6", "Tanh", "Elu", "LeakyRelu",
                                             "Neg", "Abs", "Square", "Sqrt", "Gelu", "Add",
                                             "Sub", "Mul", "Maximum", "Minimum", "AddV2",
                                             NULL};
  Fuse *f = bl->f;
  if (n->id >= bl->cap || !f->need[n->id] || (n->id < f->n_orig && f->pinned[n->id]) ||
      n->num_outputs != 1 || n->out_dtypes[0] != FLOE_F32)
    return;
  bool un = false, bin = false, keeps = false;
  for (int i = 0; unary[i]; i++) un |= strcmp(n->op->name, unary[i]) == 0;
  for (int i = 0; binary[i]; i++) bin |= strcmp(n->op->name, binary[i]) == 0;
  for (int i = 0; zero_keeping[i]; i++) keeps |= strcmp(n->op->name, zero_keeping[i]) == 0;
  if (!(un && n->num_inputs == 1) && !(bin && n->num_inputs == 2)) return;
  const FloeShape *y = &n->out_shapes[0];
  /* the blocked input of the output's shape (the other may be a gate broadcast over it) */
  int at = -1;
  for (int i = n->num_inputs - 1; i >= 0; i--)
    if (blocked_output(bl, n->inputs[i]) && floe__opt_same_shape(shape_of(n->inputs[i]), y)) at = i;
  bool padded = known_channels(bl, y) && !whole_blocks(y);
  if (at < 0 || !known_channels(bl, y) || (padded && !keeps)) return;
  FloeOutput ins[2] = {{bl->blk[n->inputs[at].node->id], 0}, {NULL, 0}};
  if (bin) {
    ins[1] = blocked_operand(bl, n->inputs[1 - at], y, n,
                             !padded || strcmp(n->op->name, "Mul") == 0);
    if (!ins[1].node) return;
    if (at == 1) { /* keep the operands' order (Sub, Div) */
      FloeOutput t = ins[0];
      ins[0] = ins[1];
      ins[1] = t;
    }
  }
  char *name = unique_name(f->g, n->name, "_blocked");
  if (!name) return;
  FloeNodeBuilder *b = floe_node_begin(f->g, n->op->name, name);
  floe__free(name);
  for (int i = 0; i < n->num_inputs; i++) floe_node_add_input(b, ins[i]);
  for (int i = 0; i < n->attrs.n; i++) floe__node_copy_attr(n, b, n->attrs.names[i]);
  for (int c = 0; c < n->num_control; c++) floe_node_add_control_input(b, n->control[c]);
  if (n->device && n->device[0]) floe_node_set_device(b, n->device);
  FloeNode *e = floe_node_finish(b);
  if (!e || !need_grow(f) || !f->ok(f->arg, n, e)) return;
  for (int i = 0; i < n->num_inputs; i++) f->need[ins[i].node->id] = true;
  f->need[e->id] = true;
  f->need[n->id] = false;
  bl->blk[n->id] = e;
}

/* A Mean over spatial dims of a blocked tensor, keeping them (global pooling, a
 * squeeze-excitation's squeeze), as the Mean of the blocked tensor over the same dims one
 * further along (the channel blocks' dim comes first): the result is blocked too. */
static void block_mean(Blocker *bl, FloeNode *n) {
  Fuse *f = bl->f;
  if (n->id >= bl->cap || !f->need[n->id] || (n->id < f->n_orig && f->pinned[n->id]) ||
      strcmp(n->op->name, "Mean") != 0 || n->num_inputs != 2 || n->out_dtypes[0] != FLOE_F32 ||
      !floe__node_attr_bool(n, "keep_dims", false) || !blocked_output(bl, n->inputs[0]))
    return;
  const FloeShape *x = shape_of(n->inputs[0]);
  const FloeAttrValue *v = floe__attrs_get(&n->inputs[1].node->attrs, "value");
  if (!constant(f, n->inputs[1]) || !v || v->kind != FLOE_ATTR_TENSOR ||
      floe_tensor_rank(v->u.tensor) > 1)
    return;
  const FloeTensor *at = v->u.tensor;
  int64_t k = floe_tensor_num_elements(at), axes[FLOE_MAX_DIMS];
  if (k < 1 || k > x->rank - 2) return;
  for (int64_t i = 0; i < k; i++) {
    int64_t a = floe_tensor_dtype(at) == FLOE_I32 ? ((const int32_t *)floe_tensor_data(at))[i]
                : floe_tensor_dtype(at) == FLOE_I64 ? ((const int64_t *)floe_tensor_data(at))[i]
                                                    : -1;
    if (a < 0) a += x->rank;
    if (a < 1 || a > x->rank - 2) return; /* spatial dims only */
    axes[i] = a + 1;
  }
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, &k, NULL);
  if (t) memcpy(floe_tensor_data(t), axes, (size_t)k * sizeof *axes);
  FloeOutput ax = new_const(f, n->name, "_blocked_axes", t);
  floe_tensor_release(t);
  char *name = ax.node ? unique_name(f->g, n->name, "_blocked") : NULL;
  if (!name || !need_grow(f)) {
    floe__free(name);
    return;
  }
  FloeNodeBuilder *b = floe_node_begin(f->g, "Mean", name);
  floe__free(name);
  floe_node_add_input(b, (FloeOutput){bl->blk[n->inputs[0].node->id], 0});
  floe_node_add_input(b, ax);
  for (int i = 0; i < n->attrs.n; i++)
    if (strcmp(n->attrs.names[i], "Tidx") != 0) floe__node_copy_attr(n, b, n->attrs.names[i]);
  floe_node_set_attr_type(b, "Tidx", FLOE_I64);
  for (int c = 0; c < n->num_control; c++) floe_node_add_control_input(b, n->control[c]);
  if (n->device && n->device[0]) floe_node_set_device(b, n->device);
  FloeNode *m = floe_node_finish(b);
  if (!m || !need_grow(f) || !f->ok(f->arg, n, m)) return;
  f->need[ax.node->id] = true;
  f->need[m->id] = true;
  f->need[n->id] = false;
  bl->blk[n->id] = m;
}

/* Consumers of a blocked node's old output outside the blocked chains read a _FromBlocked of
 * it; control edges name the blocked node. 0, or -1 on out of memory. */
static int block_leave(Blocker *bl, FloeNode *old) {
  Fuse *f = bl->f;
  FloeNode *b = bl->blk[old->id], *back = bl->back[old->id];
  for (int id = 0; id < f->g->num_nodes; id++) {
    FloeNode *x = f->g->nodes[id];
    if (x == back) continue;
    for (int k = 0; k < x->num_inputs; k++)
      if (x->inputs[k].node == old && x->inputs[k].index == 0 && id < f->cap && f->need[id]) {
        if (!back && !(back = converter(f, false, (FloeOutput){b, 0}, b,
                                        old->out_shapes[0].dims[old->out_shapes[0].rank - 1])))
          return -1;
        f->need[back->id] = true;
        x->inputs[k] = (FloeOutput){back, 0};
      }
    for (int c = 0; c < x->num_control; c++)
      if (x->control[c] == old) x->control[c] = b;
  }
  f->fused++;
  return 0;
}

static bool blocked_layout_enabled(void) {
  const char *e = getenv("FLOE_BLOCKED_LAYOUT");
  return !e || strcmp(e, "0") != 0;
}

static int block_convs(Fuse *f) {
  if (!blocked_layout_enabled()) return 0;
  Blocker bl = {.f = f, .pad = padding_enabled(), .cap = f->g->num_nodes};
  bl.blk = floe__calloc((size_t)(bl.cap ? bl.cap : 1), sizeof *bl.blk);
  bl.back = floe__calloc((size_t)(bl.cap ? bl.cap : 1), sizeof *bl.back);
  if (!bl.blk || !bl.back) {
    floe__free(bl.blk);
    floe__free(bl.back);
    return -1;
  }
  int rc = 0;
  /* Producers first (a fused node can come after a consumer it was rerouted into). */
  int num = 0, *order = floe__graph_topo_order(f->g, f->need, &num);
  if (!order) rc = -1;
  for (int i = 0; i < num && order; i++) {
    FloeNode *n = f->g->nodes[order[i]];
    if (blockable(&bl, n))
      block_one(&bl, n);
    else if (strcmp(n->op->name, "Concat") == 0)
      block_concat(&bl, n);
    else if (strcmp(n->op->name, "Pool") == 0)
      block_pool(&bl, n);
    else if (strcmp(n->op->name, "Mean") == 0)
      block_mean(&bl, n);
    else
      block_elementwise(&bl, n);
  }
  floe__free(order);
  if (floe_graph_status(f->g) != FLOE_OK) rc = -1;
  for (int id = 0; id < bl.cap && rc == 0; id++)
    if (bl.blk[id]) rc = block_leave(&bl, f->g->nodes[id]);
  floe__free(bl.blk);
  floe__free(bl.back);
  floe__free(bl.from);
  floe__free(bl.to);
  return rc;
}

bool floe__fuse_may_apply(const FloeGraph *g, const bool *need) {
  /* The last node of every chain fuse_graph matches, or its first (Conv). */
  for (int id = 0; id < g->num_nodes; id++)
    if (need[id] && (strcmp(g->nodes[id]->op->name, "Relu") == 0 ||
                     strcmp(g->nodes[id]->op->name, "ReluGrad") == 0 ||
                     strcmp(g->nodes[id]->op->name, "Conv") == 0 ||
                     strcmp(g->nodes[id]->op->name, "MatMul") == 0))
      return true;
  return false;
}

floe_code floe__fuse_graph(FloeGraph *g, bool **need, const bool *pinned, FloeFuseCheck ok,
                           void *arg, int *num_fused, FloeStatus *st) {
  *num_fused = 0;
  int n0 = g->num_nodes;
  Fuse f = {.g = g, .need = *need, .cap = n0, .pinned = pinned, .ok = ok, .arg = arg,
           .n_orig = n0};
  f.uses = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *f.uses);
  f.user = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *f.user);
  if (!f.uses || !f.user) goto oom;
  for (int id = 0; id < n0; id++) {
    const FloeNode *x = g->nodes[id];
    if (!f.need[id]) continue;
    for (int k = 0; k < x->num_inputs; k++)
      if (x->inputs[k].index == 0) {
        f.uses[x->inputs[k].node->id]++;
        f.user[x->inputs[k].node->id] = g->nodes[id];
      }
  }
  /* Forward chains first: their ReLU outputs are what the gradient chains match on. */
  for (int id = 0; id < n0; id++)
    if (fuse_conv_bias_relu(&f, g->nodes[id]) != 0) goto oom;
  for (int id = 0; id < n0; id++)
    if (fuse_conv_nd(&f, g->nodes[id]) != 0) goto oom;
  for (int id = 0; id < n0; id++)
    if (fuse_matmul(&f, g->nodes[id]) != 0) goto oom;
  for (int id = 0; id < n0; id++)
    if (fuse_maxpool_grad_relu(&f, g->nodes[id]) != 0) goto oom;
  if (block_convs(&f) != 0 && floe_graph_status(g) == FLOE_OK) goto oom;
  floe__free(f.uses);
  floe__free(f.user);
  *need = f.need;
  if (floe_graph_status(g) != FLOE_OK)
    return floe_status_set(st, floe_graph_status(g), "fusing the graph: %s",
                           floe_graph_error(g, NULL));
  *num_fused = f.fused;
  return FLOE_OK;
oom:
  floe__free(f.uses);
  floe__free(f.user);
  *need = f.need;
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory fusing the graph");
}

/* The optimiser's fusion pass (optimize.c): floe__fuse_graph over the run. */
floe_code floe__opt_fusion(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  if (!floe__fuse_may_apply(o->g, o->need)) return FLOE_OK;
  /* The earlier passes may have added nodes: pinned must cover them (none is fed). */
  int n = o->g->num_nodes;
  bool *pinned = floe__calloc((size_t)(n ? n : 1), sizeof *pinned);
  if (!pinned) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory fusing the graph");
  for (int i = 0; i < o->n_orig && i < n; i++) pinned[i] = o->pinned[i];
  int before = 0, fused = 0;
  for (int i = 0; i < o->cap; i++) before += o->need[i];
  floe_code rc = floe__fuse_graph(o->g, &o->need, pinned, o->ok, o->arg, &fused, st);
  floe__free(pinned);
  if (o->g->num_nodes > o->cap) o->cap = o->g->num_nodes; /* fusion grew need to cover them */
  if (rc != FLOE_OK) return rc;
  int after = 0, added = 0;
  for (int i = 0; i < o->cap; i++) {
    after += o->need[i];
    added += i >= n && o->need[i];
  }
  ps->rewritten = fused;
  ps->removed = before - after + added;
  return FLOE_OK;
}
