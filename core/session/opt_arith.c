/* SPDX-License-Identifier: Apache-2.0 */
/* opt_arith.c - the optimiser's arithmetic simplification (optimize.c):
 *
 *   Identity(x), x * 1, 1 * x, x / 1, x - 0, x + (-0), 0 + x (integers)  -> x
 *   Reshape(Reshape(x, s1), s2)                                      -> Reshape(x, s2), or x
 *                                                                       when s2 is x's shape
 *   Transpose(Transpose(x, p1), p2)                                  -> Transpose(x, p1∘p2),
 *                                                                       or x when that is the
 *                                                                       identity
 *   ((x + c1) - c2) + c3 ...                                         -> x + (c1 - c2 + c3)
 *   (x * c1) * c2 ...                                                -> x * (c1 * c2)
 *     (floats: only terms of one sign, below)
 *
 * with c scalar constants (one element; rank 0, or of a rank the other operand's shape
 * absorbs). The identities are exact (x + 0 is not: -0 + 0 is +0; x + (-0) is). Folding
 * a chain of float constants rounds once where the chain rounded at each op (the result may
 * differ in the last bits: one rounding against one per op); a float add chain folds only
 * terms of one sign, because terms that cancel may round on purpose ((x + 2^23) - 2^23 is
 * round-half-to-even of x). Integer chains wrap as the ops do, so they are exact. A node
 * with control inputs is left as it is, and a fed or fetched node keeps its place (a chain
 * is folded into its last node, which stays). */
#include <math.h>
#include <string.h>

#include "session.h"

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

/* See session.h. */
bool floe__const_scalar(FloeOutput x, FloeDType dt, double *d, int64_t *i) {
  const FloeNode *n = x.node;
  if (!is_op(n, "Const") || x.index != 0) return false;
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor) return false;
  const FloeTensor *t = v->u.tensor;
  if (t->dtype != dt || t->num_elements != 1 || !floe__tensor_on_host(t)) return false;
  const void *p = floe_tensor_data(t);
  switch (dt) {
  case FLOE_F32: *d = *(const float *)p; *i = 0; return true;
  case FLOE_F64: *d = *(const double *)p; *i = 0; return true;
  case FLOE_I32: *i = *(const int32_t *)p; *d = (double)*i; return true;
  case FLOE_I64: *i = *(const int64_t *)p; *d = (double)*i; return true;
  default: return false;
  }
}

/* x is a one-element Const of dtype dt (not fed): its value as a double and as int64. */
static bool scalar_const(const FloeOpt *o, FloeOutput x, FloeDType dt, double *d, int64_t *i) {
  return !floe__opt_kept(o, x.node) && floe__const_scalar(x, dt, d, i);
}

static bool is_float(FloeDType dt) { return dt == FLOE_F32 || dt == FLOE_F64; }

/* Combining y with the constant cannot change y's shape: the constant has rank 0, or a rank
 * no larger than y's (its dims are all 1). */
static bool shape_kept(FloeOutput y, FloeOutput c) {
  const FloeShape *ys = &y.node->out_shapes[y.index], *cs = &c.node->out_shapes[c.index];
  return cs->rank == 0 || (ys->rank >= 0 && cs->rank <= ys->rank);
}

/* n = op(a, b) with one side a scalar constant: *y the other side, *d / *i the constant, *at
 * its input position. */
static bool with_scalar(const FloeOpt *o, const FloeNode *n, FloeOutput *y, double *d,
                        int64_t *i, int *at) {
  if (n->num_inputs != 2 || n->num_outputs != 1) return false;
  FloeDType dt = n->out_dtypes[0];
  for (int k = 0; k < 2; k++)
    if (scalar_const(o, n->inputs[k], dt, d, i) && shape_kept(n->inputs[1 - k], n->inputs[k])) {
      *y = n->inputs[1 - k];
      *at = k;
      return true;
    }
  return false;
}

/* The value n passes on unchanged, if it is one of the identities. */
static bool identity_of(const FloeOpt *o, const FloeNode *n, FloeOutput *x) {
  if (is_op(n, "Identity") && n->num_inputs == 1) {
    const char *a = n->device ? n->device : "", *b = n->inputs[0].node->device;
    if (strcmp(a, b ? b : "") != 0) return false; /* a copy to another device */
    *x = n->inputs[0];
    return true;
  }
  double d;
  int64_t i;
  int at;
  FloeOutput y;
  if (!with_scalar(o, n, &y, &d, &i, &at)) return false;
  FloeDType dt = n->out_dtypes[0];
  bool f = is_float(dt);
  bool one = f ? d == 1.0 : i == 1, zero = f ? d == 0.0 : i == 0;
  if ((is_op(n, "Mul") && one) || (is_op(n, "Div") && at == 1 && one) ||
      (is_op(n, "Sub") && at == 1 && zero) ||
      (is_op(n, "Add") && zero && (!f || signbit(d)))) {
    /* the output's shape must be y's (a constant of rank 1 against a scalar y is not) */
    const FloeShape *ys = &y.node->out_shapes[y.index];
    if (ys->rank != n->out_shapes[0].rank) return false;
    *x = y;
    return true;
  }
  return false;
}

/* One term of an add chain (n = y + c, y - c, c + y) or a mul chain (y * c, c * y). */
static bool term(const FloeOpt *o, const FloeNode *n, bool mul, FloeOutput *y, double *d,
                 int64_t *i) {
  int at;
  if (!with_scalar(o, n, y, d, i, &at)) return false;
  if (mul) return is_op(n, "Mul");
  if (is_op(n, "Add")) return true;
  if (is_op(n, "Sub") && at == 1) {
    *d = -*d;
    *i = (int64_t)(0 - (uint64_t)*i);
    return true;
  }
  return false;
}

static FloeTensor *scalar_tensor(FloeDType dt, double d, int64_t i) {
  FloeTensor *t = floe_tensor_new(dt, 0, NULL, NULL);
  if (!t) return NULL;
  void *p = floe_tensor_data(t);
  switch (dt) {
  case FLOE_F32: *(float *)p = (float)d; break;
  case FLOE_F64: *(double *)p = d; break;
  case FLOE_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)i; break;
  default: *(int64_t *)p = i; break;
  }
  return t;
}

/* Folds the chain ending at top (a term whose own input is a term with no other reader).
 * uses: readers per node. 1 when folded, 0 when not, -1 when out of memory. */
static int fold_chain(FloeOpt *o, FloeNode *top, const int *uses) {
  for (int m = 0; m < 2; m++) {
    bool mul = m == 1;
    FloeOutput y;
    double d;
    int64_t i;
    if (top->num_control || !term(o, top, mul, &y, &d, &i)) continue;
    FloeDType dt = top->out_dtypes[0];
    double dsum = d;
    uint64_t isum = (uint64_t)i;
    int terms = 1;
    /* Float adds of constants of both signs may cancel on purpose: (x + 2^23) - 2^23 rounds x
     * to an integer (the ONNX importer's round-half-to-even), which x + 0 would not. Such a
     * chain stops where a constant's sign differs from the first one's. */
    bool float_add = !mul && is_float(dt);
    bool negative = signbit(d);
    for (;;) {
      FloeNode *n = y.node;
      FloeOutput y2;
      double d2;
      int64_t i2;
      if (y.index != 0 || n->id >= o->cap || !o->need[n->id] || uses[n->id] != 1 ||
          floe__opt_kept(o, n) || n->num_control || n->out_dtypes[0] != dt ||
          !term(o, n, mul, &y2, &d2, &i2) || (float_add && signbit(d2) != negative))
        break;
      if (mul) {
        dsum *= d2;
        isum *= (uint64_t)i2;
      } else {
        dsum += d2;
        isum += (uint64_t)i2;
      }
      y = y2;
      terms++;
    }
    if (terms < 2) continue;
    /* top becomes y op c: y + sum, y - (-sum) (a Sub keeps its op), y * product */
    bool sub = is_op(top, "Sub");
    FloeTensor *t = scalar_tensor(dt, sub ? -dsum : dsum, (int64_t)(sub ? 0 - isum : isum));
    FloeNode *c = t ? floe__opt_const(o, top->name, t, top) : NULL;
    if (t) floe_tensor_release(t);
    if (!c) return -1;
    top->inputs[0] = y;
    top->inputs[1] = (FloeOutput){c, 0};
    return 1;
  }
  return 0;
}

/* The permutation a Const input holds (int32 or int64), into p; its length. */
static int perm_of(const FloeOpt *o, FloeOutput x, int64_t *p, int cap) {
  const FloeNode *n = x.node;
  if (!is_op(n, "Const") || floe__opt_kept(o, n)) return -1;
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor) return -1;
  const FloeTensor *t = v->u.tensor;
  if (t->rank != 1 || t->num_elements > cap || !floe__tensor_on_host(t)) return -1;
  const void *d = floe_tensor_data(t);
  for (int64_t k = 0; k < t->num_elements; k++) {
    if (t->dtype == FLOE_I32) p[k] = ((const int32_t *)d)[k];
    else if (t->dtype == FLOE_I64) p[k] = ((const int64_t *)d)[k];
    else return -1;
  }
  return (int)t->num_elements;
}

static bool same_known_shape(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0 || a->rank != b->rank) return false;
  for (int k = 0; k < a->rank; k++)
    if (a->dims[k] < 0 || a->dims[k] != b->dims[k]) return false;
  return true;
}

/* Transpose(Transpose(x, p1), p2): the outer reads x with p1∘p2 (or is x). -1: out of
 * memory; 1 when rewritten (*fwd set when the outer is now x itself). */
static int fold_transposes(FloeOpt *o, FloeNode *n, FloeOutput *fwd) {
  if (!is_op(n, "Transpose") || n->num_inputs != 2 || n->num_control) return 0;
  FloeNode *in = n->inputs[0].node;
  if (!is_op(in, "Transpose") || in->num_inputs != 2 || in->num_control || !o->need[in->id])
    return 0;
  int64_t p1[FLOE_MAX_DIMS], p2[FLOE_MAX_DIMS], q[FLOE_MAX_DIMS];
  int r1 = perm_of(o, in->inputs[1], p1, FLOE_MAX_DIMS), r2 = perm_of(o, n->inputs[1], p2, FLOE_MAX_DIMS);
  if (r1 < 0 || r1 != r2) return 0;
  bool ident = true;
  for (int j = 0; j < r2; j++) {
    if (p2[j] < 0 || p2[j] >= r1) return 0;
    q[j] = p1[p2[j]];
    ident = ident && q[j] == j;
  }
  FloeOutput x = in->inputs[0];
  if (ident && !floe__opt_kept(o, n) && same_known_shape(&x.node->out_shapes[x.index], &n->out_shapes[0])) {
    *fwd = x;
    return 1;
  }
  FloeDType pdt = n->inputs[1].node->out_dtypes[n->inputs[1].index];
  int64_t dims[1] = {r2};
  FloeTensor *t = floe_tensor_new(pdt, 1, dims, NULL);
  if (!t) return -1;
  for (int j = 0; j < r2; j++) {
    if (pdt == FLOE_I32) ((int32_t *)floe_tensor_data(t))[j] = (int32_t)q[j];
    else ((int64_t *)floe_tensor_data(t))[j] = q[j];
  }
  FloeNode *c = floe__opt_const(o, n->name, t, n);
  floe_tensor_release(t);
  if (!c) return -1;
  n->inputs[0] = x;
  n->inputs[1] = (FloeOutput){c, 0};
  return 1;
}

/* Reshape(Reshape(x, s1), s2): the outer reads x (or is x when it keeps x's shape). */
static int fold_reshapes(FloeOpt *o, FloeNode *n, FloeOutput *fwd) {
  if (!is_op(n, "Reshape") || n->num_control) return 0;
  FloeNode *in = n->inputs[0].node;
  if (!is_op(in, "Reshape") || in->num_control || n->inputs[0].index != 0 || !o->need[in->id])
    return 0;
  FloeOutput x = in->inputs[0];
  /* the inner one must not be able to fail (a size that does not fit shows only at run
   * time when a dim is unknown): both its shapes known */
  if (!same_known_shape(&x.node->out_shapes[x.index], &x.node->out_shapes[x.index]) ||
      !same_known_shape(&in->out_shapes[0], &in->out_shapes[0]))
    return 0;
  n->inputs[0] = x;
  if (!floe__opt_kept(o, n) && same_known_shape(&x.node->out_shapes[x.index], &n->out_shapes[0]))
    *fwd = x;
  return 1;
}

/* Per node id: how many of the run's nodes name it in a control edge. */
static int *control_users(const FloeOpt *o) {
  int *r = floe__calloc((size_t)(o->cap ? o->cap : 1), sizeof *r);
  if (!r) return NULL;
  for (int id = 0; id < o->cap; id++)
    for (int c = 0; o->need[id] && c < o->g->nodes[id]->num_control; c++)
      r[o->g->nodes[id]->control[c]->id]++;
  return r;
}

floe_code floe__opt_arithmetic(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  int n0 = o->cap;
  FloeOutput *fwd = floe__calloc((size_t)(n0 ? n0 : 1), sizeof *fwd);
  int *uses = floe__opt_readers(o);
  /* In a run with loops or conds, an Identity may be a branch's pivot (a control edge on it
   * means "only in this branch") and a constant may belong to a frame: only identities that
   * no control edge names and that read no control-flow op are forwarded, and nothing new
   * (constants of folded chains, perms) is made. */
  bool cf = floe__opt_has_control_flow(o);
  int *ctl = cf ? control_users(o) : NULL;
  if (!fwd || !uses || (cf && !ctl)) goto oom;
  /* Identities, transposes and reshapes, in id order (inputs first). */
  for (int id = 0; id < n0; id++) {
    FloeNode *n = o->g->nodes[id];
    if (!o->need[id] || n->num_control) continue;
    /* what n reads may have been forwarded already */
    for (int k = 0; k < n->num_inputs; k++)
      while (n->inputs[k].index == 0 && n->inputs[k].node->id < n0 &&
             fwd[n->inputs[k].node->id].node)
        n->inputs[k] = fwd[n->inputs[k].node->id];
    FloeOutput x = {NULL, 0};
    int r = 0;
    if (cf) {
      if (!floe__opt_kept(o, n) && !ctl[id] && identity_of(o, n, &x) &&
          !floe__opt_control_flow(x.node))
        r = 1;
    } else if (!floe__opt_kept(o, n) && identity_of(o, n, &x)) {
      r = 1;
    } else if ((r = fold_transposes(o, n, &x)) == 0) {
      r = fold_reshapes(o, n, &x);
    }
    if (r < 0) goto oom;
    if (r == 0) continue;
    ps->rewritten++;
    if (x.node) {
      fwd[id] = x;
      o->need[id] = false;
      ps->removed++;
    }
  }
  if (floe__opt_apply_forward(o, fwd, n0, st) != FLOE_OK) goto fail;
  floe__free(uses);
  if (!(uses = floe__opt_readers(o))) goto oom;
  /* Chains of constant adds and muls, from their last node (the highest id first). */
  for (int id = n0 - 1; id >= 0 && !cf; id--) {
    FloeNode *n = o->g->nodes[id];
    if (!o->need[id]) continue;
    int r = fold_chain(o, n, uses);
    if (r < 0) goto oom;
    ps->rewritten += r;
    if (r) { /* the chain's inner nodes lost their reader: recount what matters */
      floe__free(uses);
      if (!(uses = floe__opt_readers(o))) goto oom;
      int pruned = floe__opt_prune_unused(o);
      if (pruned < 0) goto oom;
      ps->removed += pruned;
      floe__free(uses);
      if (!(uses = floe__opt_readers(o))) goto oom;
    }
  }
  int pruned = floe__opt_prune_unused(o);
  if (pruned < 0) goto oom;
  ps->removed += pruned;
  floe__free(fwd);
  floe__free(uses);
  floe__free(ctl);
  return FLOE_OK;
oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory simplifying the graph's arithmetic");
fail:
  floe__free(fwd);
  floe__free(uses);
  floe__free(ctl);
  return floe_status_code(st);
}
