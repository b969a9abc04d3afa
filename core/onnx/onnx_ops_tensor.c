/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_tensor.c - ONNX shape and data-movement ops (Reshape, Slice, Gather, Concat, ...)
 * and constants as Floe ops. Values Floe needs when the graph is built (axes, perms) must
 * be constants; sizes that only the run knows go through Floe's tensor inputs. */
#include <string.h>

#include "onnx_internal.h"

/* Integer values from an attribute (older opsets) or a constant input (newer): the count,
 * -1 when neither is given, or -2 after failing because the input is not a constant. */
static int attr_or_const(OxCtx *c, const Onnx__NodeProto *n, const char *attr, const FloeOutput *in,
                         int nin, int idx, int64_t *v, int max) {
  const int64_t *av;
  int k = ox_ints(n, attr, &av);
  if (k >= 0) {
    if (k > max) {
      ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute '%s' has %d values (at most %d)", attr, k, max);
      return -2;
    }
    memcpy(v, av, (size_t)k * sizeof *v);
    return k;
  }
  if (idx < nin && ox_present(in[idx])) {
    k = ox_const_ints(in[idx], v, max);
    if (k < 0) {
      ox_fail(c, FLOE_UNIMPLEMENTED,
              "input %d ('%s') must be a constant (an initializer or Constant) for Floe", idx,
              attr);
      return -2;
    }
    return k;
  }
  return -1;
}

/* Input idx is given and is not a constant: its values are known only when the graph runs,
 * so the node maps onto an op that takes them as a tensor. */
static int run_time_input(const FloeOutput *in, int nin, int idx) {
  int64_t v[2 * FLOE_MAX_DIMS];
  return idx < nin && ox_present(in[idx]) && ox_const_ints(in[idx], v, 2 * FLOE_MAX_DIMS) < 0;
}

/* Op `op` on x and the i64 vector of input idx (SqueezeAxes, UnsqueezeAxes). */
static FloeOutput with_axes_input(OxCtx *c, const char *op, FloeOutput x, FloeOutput axes) {
  return ox_binary(c, op, x, ox_cast(c, axes, FLOE_I64));
}

static FloeOutput expand_dims(OxCtx *c, FloeOutput x, int axis) {
  FloeNodeBuilder *b = ox_begin(c, "ExpandDims");
  floe_node_add_input(b, x);
  floe_node_set_attr_int(b, "axis", axis);
  return ox_finish(c, b);
}

static int fully_known(const FloeShape *s) {
  if (s->rank < 0) return 0;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return 0;
  return 1;
}

/* --- constants --- */

OX_MAP(map_constant) {
  OX_UNUSED;
  const Onnx__AttributeProto *a;
  FloeTensor *t = NULL;
  if ((a = ox_attr(n, "value")) && a->t) {
    t = floe__onnx_tensor(a->t, c->base_dir, c->st);
    if (!t) return ox_fail(c, floe_status_code(c->st), "%s", floe_status_message(c->st));
  } else if ((a = ox_attr(n, "value_float")) && a->has_f) {
    t = floe_tensor_scalar_f32(a->f, c->st);
  } else if ((a = ox_attr(n, "value_int")) && a->has_i) {
    t = floe_tensor_scalar_i64(a->i, c->st);
  } else if ((a = ox_attr(n, "value_floats"))) {
    int64_t d = (int64_t)a->n_floats;
    if ((t = floe_tensor_new(FLOE_F32, 1, &d, c->st)) && d)
      memcpy(floe_tensor_data(t), a->floats, (size_t)d * sizeof(float));
  } else if ((a = ox_attr(n, "value_ints"))) {
    int64_t d = (int64_t)a->n_ints;
    if ((t = floe_tensor_new(FLOE_I64, 1, &d, c->st)) && d)
      memcpy(floe_tensor_data(t), a->ints, (size_t)d * sizeof(int64_t));
  } else if (ox_attr(n, "sparse_value")) {
    return ox_fail(c, FLOE_UNIMPLEMENTED, "sparse_value: Floe has no sparse tensors");
  } else if (ox_attr(n, "value_string") || ox_attr(n, "value_strings")) {
    return ox_fail(c, FLOE_UNIMPLEMENTED, "string constants: Floe has no string tensors");
  } else {
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "a Constant needs a value attribute");
  }
  if (!t) return ox_fail(c, floe_status_code(c->st), "%s", floe_status_message(c->st));
  out[0] = ox_const(c, t);
  return FLOE_OK;
}

OX_MAP(map_constant_of_shape) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  const Onnx__AttributeProto *a = ox_attr(n, "value");
  FloeTensor *v;
  if (a && a->t) {
    v = floe__onnx_tensor(a->t, c->base_dir, c->st);
    if (!v) return ox_fail(c, floe_status_code(c->st), "%s", floe_status_message(c->st));
    if (floe_tensor_num_elements(v) != 1) {
      floe_tensor_release(v);
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute 'value' must hold one element");
    }
    FloeTensor *s = floe_tensor_reshape(v, 0, NULL, c->st);
    floe_tensor_release(v);
    v = s;
  } else {
    v = floe_tensor_scalar_f32(0.0f, c->st);
  }
  FloeOutput value = ox_const(c, v);
  FloeNodeBuilder *b = ox_begin(c, "Fill");
  floe_node_add_input(b, ox_cast(c, in[0], FLOE_I64));
  floe_node_add_input(b, value);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* --- shapes --- */

OX_MAP(map_shape) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape s = ox_shape(in[0]);
  int64_t start = ox_int(n, "start", 0), end = ox_int(n, "end", INT64_MAX);
  if (s.rank < 0 && (start != 0 || end != INT64_MAX))
    return ox_fail(c, FLOE_UNIMPLEMENTED, "start/end on an input of unknown rank");
  int r = s.rank;
  if (r >= 0) {
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    if (end < start) end = start;
  }
  if (fully_known(&s)) {
    out[0] = ox_const_i64(c, s.dims + start, (int)(end - start));
    return FLOE_OK;
  }
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, in[0]);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput y = ox_finish(c, b);
  if (r >= 0 && (start != 0 || end != r)) {
    int64_t be = start, sz = end - start;
    b = ox_begin(c, "Slice");
    floe_node_add_input(b, y);
    floe_node_add_input(b, ox_const_i64(c, &be, 1));
    floe_node_add_input(b, ox_const_i64(c, &sz, 1));
    y = ox_finish(c, b);
  }
  out[0] = y;
  return FLOE_OK;
}

OX_MAP(map_size) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape s = ox_shape(in[0]);
  if (fully_known(&s)) {
    int64_t k = 1;
    for (int i = 0; i < s.rank; i++) k *= s.dims[i];
    out[0] = ox_scalar_i64(c, k);
    return FLOE_OK;
  }
  FloeNodeBuilder *b = ox_begin(c, "Size");
  floe_node_add_input(b, in[0]);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* The entries of a computed 1-D integer vector x that are constants (known[i]) and how many
 * there are (-1: not a vector this can follow). It looks through a Concat of pieces, a Cast,
 * an ExpandDims or a Reshape to [1] of a scalar, and a Const; any other piece of a known
 * length is that many unknown entries. */
static int partial_ints(FloeOutput x, int64_t *v, bool *known, FloeOutput *src, int max) {
  const FloeNode *n = x.node;
  int k = ox_const_ints(x, v, max);
  if (k >= 0) {
    for (int i = 0; i < k; i++) known[i] = true;
    return k;
  }
  if (!n) return -1;
  const char *op = n->op->name;
  if (!strcmp(op, "Cast") && n->num_inputs == 1)
    return partial_ints(n->inputs[0], v, known, src, max);
  if (!strcmp(op, "Concat") && n->num_inputs >= 2) {
    int64_t ax;
    if (ox_const_ints(n->inputs[n->num_inputs - 1], &ax, 1) != 1 || ax != 0) return -1;
    int total = 0;
    for (int i = 0; i < n->num_inputs - 1; i++) {
      int m = partial_ints(n->inputs[i], v + total, known + total, src + total, max - total);
      if (m < 0) return -1;
      total += m;
    }
    return total;
  }
  FloeShape s = ox_shape(x);
  int len = s.rank == 0 ? 1 : s.rank == 1 ? (int)s.dims[0] : -1;
  if (len < 0 || len > max) return -1;
  if ((!strcmp(op, "ExpandDims") || !strcmp(op, "Reshape")) && len == 1 && n->num_inputs >= 1 &&
      ox_const_ints(n->inputs[0], v, 1) == 1) {
    known[0] = true;
    return 1;
  }
  for (int i = 0; i < len; i++) {
    known[i] = false;
    src[i] = len == 1 ? x : (FloeOutput){NULL, 0};
  }
  return len;
}

/* A Gather node's axis attribute (0 when absent). */
static int64_t gather_axis(const FloeNode *n) {
  const FloeAttrValue *a = floe__node_attr(n, "axis", FLOE_ATTR_INT);
  return a ? a->u.i : 0;
}

/* *t and *d when the one-element x is dim d of t as Gather(Shape(t), d) makes it (through
 * a Cast, an ExpandDims, a Reshape or a Squeeze of it). */
static bool shape_dim_of(FloeOutput x, FloeOutput *t, int *d) {
  for (int hops = 0; x.node && hops < 8; hops++) {
    const FloeNode *n = x.node;
    const char *op = n->op->name;
    if ((!strcmp(op, "Cast") || !strcmp(op, "ExpandDims") || !strcmp(op, "Reshape") ||
         !strcmp(op, "Squeeze")) && n->num_inputs >= 1) {
      x = n->inputs[0];
      continue;
    }
    int64_t k;
    const FloeNode *sh = n->num_inputs == 2 ? n->inputs[0].node : NULL;
    if (strcmp(op, "Gather") || !sh || strcmp(sh->op->name, "Shape") || sh->num_inputs != 1 ||
        gather_axis(n) != 0 || ox_const_ints(n->inputs[1], &k, 1) != 1)
      return false;
    FloeShape ts = ox_shape(sh->inputs[0]);
    if (ts.rank < 0 || k < -ts.rank || k >= ts.rank) return false;
    *t = sh->inputs[0];
    *d = (int)(k < 0 ? k + ts.rank : k);
    return true;
  }
  return false;
}

/* The one unknown dim of shape s (-1: none or several), and the product of the others. */
static int one_unknown_dim(FloeShape s, int64_t *rest) {
  int u = -1;
  *rest = 1;
  for (int i = 0; i < s.rank; i++) {
    if (s.dims[i] >= 0) {
      *rest *= s.dims[i];
    } else {
      if (u >= 0) return -1;
      u = i;
    }
  }
  return u;
}

/* Follows dim d of x back through what provably keeps it: a Transpose (its constant
 * permutation), and a Reshape to constants whose -1 stands where the input's one unknown dim
 * must go (the constants' product is that of the input's other dims). */
static void dim_origin(FloeOutput *x, int *d) {
  for (int hops = 0; x->node && hops < 64; hops++) {
    const FloeNode *n = x->node;
    int64_t v[FLOE_MAX_DIMS];
    int k = n->num_inputs == 2 ? ox_const_ints(n->inputs[1], v, FLOE_MAX_DIMS) : -1;
    if (!strcmp(n->op->name, "Transpose") && k > *d && v[*d] >= 0 && v[*d] < k) {
      *d = (int)v[*d];
      *x = n->inputs[0];
      continue;
    }
    if (strcmp(n->op->name, "Reshape") || k <= *d || v[*d] != -1) return;
    int64_t prod = 1, rest;
    for (int i = 0; i < k; i++)
      if (i != *d) prod *= v[i];
    int u = one_unknown_dim(ox_shape(n->inputs[0]), &rest);
    if (u < 0 || rest != prod || prod <= 0) return;
    *d = u;
    *x = n->inputs[0];
  }
}

/* ONNX's 0 entries of a reshape target v (k entries; those known[i], NULL: all) copied from the
 * input's dims xs. -1 when done, else the first 0 entry whose dim is not known. */
static int copy_zero_entries(int64_t *v, const bool *known, int k, FloeShape xs) {
  for (int i = 0; i < k; i++)
    if ((!known || known[i]) && v[i] == 0) {
      if (i >= xs.rank || xs.dims[i] < 0) return i;
      v[i] = xs.dims[i];
    }
  return -1;
}

/* A computed reshape target of which every entry but one is a constant (an exported
 * model's [batch, 2, 58, 28, 28] once the known dims folded): as constants with -1 for that
 * one, when that entry is provably the input's one unknown dim (read by Gather(Shape(t), i)
 * of a t whose dim i is that dim: dim_origin) and the constants multiply to the input's
 * other dims, so the -1 comes out as that entry would always, and a reshape that does not
 * fit still fails. ONNX's 0 entries (copy the input's dim, unless allowzero) are resolved
 * from the input's shape. -1 when it is not so. */
static int one_computed_entry(FloeOutput shape, FloeOutput x, int allowzero, int64_t *v) {
  bool known[FLOE_MAX_DIMS];
  FloeOutput src[FLOE_MAX_DIMS];
  FloeShape xs = ox_shape(x);
  int k = partial_ints(shape, v, known, src, FLOE_MAX_DIMS);
  if (k < 0 || (!allowzero && copy_zero_entries(v, known, k, xs) >= 0)) return -1;
  int unknown = -1;
  for (int i = 0; i < k; i++) {
    if (!known[i]) {
      if (unknown >= 0) return -1;
      unknown = i;
    } else if (v[i] <= 0) {
      return -1; /* a -1 already (two to infer), or a 0 kept */
    }
  }
  if (unknown < 0) return -1;
  int64_t rest, prod = 1;
  int xu = one_unknown_dim(xs, &rest);
  for (int i = 0; i < k; i++)
    if (i != unknown) prod *= v[i];
  FloeOutput t;
  int td;
  if (xu < 0 || prod != rest || !src[unknown].node || !shape_dim_of(src[unknown], &t, &td))
    return -1;
  FloeOutput a = x;
  int ad = xu;
  dim_origin(&a, &ad);
  dim_origin(&t, &td);
  if (a.node != t.node || a.index != t.index || ad != td) return -1;
  v[unknown] = -1;
  return k;
}

OX_MAP(map_reshape) {
  OX_UNUSED;
  FloeOutput shape;
  FloeShape xs;
  int64_t v[FLOE_MAX_DIMS];
  int k;
  if (c->opset < 5) {
    floe_code rc = ox_need(c, in, nin, 1);
    if (rc != FLOE_OK) return rc;
    const int64_t *av;
    k = ox_ints(n, "shape", &av);
    if (k < 0 || k > FLOE_MAX_DIMS)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "attribute 'shape' is missing or too long");
    memcpy(v, av, (size_t)k * sizeof *v);
  } else {
    floe_code rc = ox_need(c, in, nin, 2);
    if (rc != FLOE_OK) return rc;
    k = ox_const_ints(in[1], v, FLOE_MAX_DIMS);
  }
  int allowzero = c->opset >= 14 && ox_int(n, "allowzero", 0);
  xs = ox_shape(in[0]);
  if (k >= 0) {
    /* A constant shape: resolve the 0s (copy the input's dim) now. */
    int i = allowzero ? -1 : copy_zero_entries(v, NULL, k, xs);
    if (i >= 0)
      return ox_fail(c, FLOE_UNIMPLEMENTED,
                     "shape entry %d is 0 (copy the input's dim), and that dim is not known", i);
    shape = ox_const_i64(c, v, k);
  } else if ((k = one_computed_entry(in[1], in[0], allowzero, v)) >= 0) {
    shape = ox_const_i64(c, v, k);
  } else {
    shape = ox_cast(c, in[1], FLOE_I64);
    FloeShape ss = ox_shape(shape);
    if (!allowzero) {
      /* shape' = shape == 0 ? input dims (padded with zeros) : shape */
      if (ss.rank != 1 || ss.dims[0] < 0 || xs.rank < 0)
        return ox_fail(c, FLOE_UNIMPLEMENTED,
                       "a computed shape of unknown length on an input of unknown rank");
      int64_t len = ss.dims[0];
      if (len > FLOE_MAX_DIMS)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "a shape of %lld dims (Floe's limit is %d)",
                       (long long)len, FLOE_MAX_DIMS);
      FloeNodeBuilder *b = ox_begin(c, "Shape");
      floe_node_add_input(b, in[0]);
      floe_node_set_attr_type(b, "out_type", FLOE_I64);
      FloeOutput dims = ox_finish(c, b);
      if (len > xs.rank) {
        int64_t zeros[FLOE_MAX_DIMS] = {0};
        FloeOutput parts[2] = {dims, ox_const_i64(c, zeros, (int)(len - xs.rank))};
        b = ox_begin(c, "Concat");
        floe_node_add_input_list(b, parts, 2);
        floe_node_add_input(b, ox_scalar_i32(c, 0));
        dims = ox_finish(c, b);
      } else if (len < xs.rank) {
        int64_t be = 0;
        b = ox_begin(c, "Slice");
        floe_node_add_input(b, dims);
        floe_node_add_input(b, ox_const_i64(c, &be, 1));
        floe_node_add_input(b, ox_const_i64(c, &len, 1));
        dims = ox_finish(c, b);
      }
      FloeOutput zero = ox_binary(c, "Equal", shape, ox_scalar_i64(c, 0));
      b = ox_begin(c, "Select");
      floe_node_add_input(b, zero);
      floe_node_add_input(b, dims);
      floe_node_add_input(b, shape);
      shape = ox_finish(c, b);
    }
  }
  out[0] = ox_binary(c, "Reshape", in[0], shape);
  return FLOE_OK;
}

OX_MAP(map_flatten) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape s = ox_shape(in[0]);
  if (s.rank < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of unknown rank");
  int64_t a = ox_int(n, "axis", 1);
  if (a < -s.rank || a > s.rank)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "axis %lld is outside [-%d, %d]", (long long)a,
                   s.rank, s.rank);
  int axis = (int)(a < 0 ? a + s.rank : a);
  int64_t outer = 1, inner = 1;
  int outer_known = 1, inner_known = 1;
  for (int i = 0; i < s.rank; i++) {
    if (i < axis) {
      if (s.dims[i] < 0) outer_known = 0; else outer *= s.dims[i];
    } else {
      if (s.dims[i] < 0) inner_known = 0; else inner *= s.dims[i];
    }
  }
  if (!outer_known && !inner_known)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "dims of unknown size on both sides of axis %d", axis);
  int64_t d[2] = {outer_known ? outer : -1, outer_known ? (inner_known ? inner : -1) : inner};
  out[0] = ox_binary(c, "Reshape", in[0], ox_const_i64(c, d, 2));
  return FLOE_OK;
}

OX_MAP(map_squeeze) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  if (c->opset >= 13 && run_time_input(in, nin, 1)) {
    out[0] = with_axes_input(c, "SqueezeAxes", in[0], in[1]);
    return ox_check(c);
  }
  int64_t axes[FLOE_MAX_DIMS];
  int k = attr_or_const(c, n, "axes", in, nin, 1, axes, FLOE_MAX_DIMS);
  if (k == -2) return floe_status_code(c->st);
  FloeShape s = ox_shape(in[0]);
  int r = s.rank;
  if (k > 0 && r < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of unknown rank");
  for (int i = 0; i < k; i++) {
    int a;
    if ((rc = ox_axis(c, axes[i], r, "axis", &a)) != FLOE_OK) return rc;
    axes[i] = a;
  }
  FloeNodeBuilder *b = ox_begin(c, "Squeeze");
  floe_node_add_input(b, in[0]);
  if (k > 0) floe_node_set_attr_int_list(b, "squeeze_dims", axes, k);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_unsqueeze) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  if (c->opset >= 13 && run_time_input(in, nin, 1)) {
    out[0] = with_axes_input(c, "UnsqueezeAxes", in[0], in[1]);
    return ox_check(c);
  }
  int64_t axes[FLOE_MAX_DIMS];
  int k = attr_or_const(c, n, "axes", in, nin, 1, axes, FLOE_MAX_DIMS);
  if (k == -2) return floe_status_code(c->st);
  if (k <= 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "'axes' is required");
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int out_rank = r + k;
  if (out_rank > FLOE_MAX_DIMS)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "rank %d is above Floe's limit", out_rank);
  /* Axes refer to the output; insert in increasing order. */
  int sorted[FLOE_MAX_DIMS];
  for (int i = 0; i < k; i++) {
    if ((rc = ox_axis(c, axes[i], out_rank, "axis", &sorted[i])) != FLOE_OK) return rc;
    for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
      int t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  }
  FloeOutput y = in[0];
  for (int i = 0; i < k; i++) {
    if (i && sorted[i] == sorted[i - 1])
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "axis %d is given twice", sorted[i]);
    y = expand_dims(c, y, sorted[i]);
  }
  out[0] = y;
  return FLOE_OK;
}

OX_MAP(map_transpose) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the input");
  if (r < 0) return floe_status_code(c->st);
  int64_t perm[FLOE_MAX_DIMS];
  const int64_t *pv;
  int k = ox_ints(n, "perm", &pv);
  if (k >= 0) {
    if (k != r)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "perm has %d entries for a rank-%d input", k, r);
    memcpy(perm, pv, (size_t)k * sizeof *perm);
  } else {
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  out[0] = ox_binary(c, "Transpose", in[0], ox_const_i64(c, perm, r));
  return FLOE_OK;
}

OX_MAP(map_concat) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "input 0");
  if (r < 0) return floe_status_code(c->st);
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", c->opset < 4 ? 1 : 0), r, "axis", &axis)) != FLOE_OK)
    return rc;
  FloeNodeBuilder *b = ox_begin(c, "Concat");
  floe_node_add_input_list(b, in, nin);
  floe_node_add_input(b, ox_scalar_i32(c, axis));
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* Indices with negative entries counted from the end of dim `axis` of x. */
static FloeOutput wrap_indices(OxCtx *c, FloeOutput idx, FloeOutput x, int axis) {
  const FloeTensor *t = ox_const_value(idx);
  FloeShape xs = ox_shape(x);
  int64_t dim = xs.rank > axis ? xs.dims[axis] : -1;
  if (t) {
    FloeDType dt = floe_tensor_dtype(t);
    int64_t k = floe_tensor_num_elements(t);
    int neg = 0;
    for (int64_t i = 0; i < k; i++)
      neg |= (dt == FLOE_I64 ? ((const int64_t *)floe_tensor_data(t))[i]
                             : ((const int32_t *)floe_tensor_data(t))[i]) < 0;
    if (!neg) return idx;
  }
  FloeOutput i64 = ox_cast(c, idx, FLOE_I64);
  FloeOutput d;
  if (dim >= 0) {
    d = ox_scalar_i64(c, dim);
  } else {
    FloeNodeBuilder *b = ox_begin(c, "Shape");
    floe_node_add_input(b, x);
    floe_node_set_attr_type(b, "out_type", FLOE_I64);
    FloeOutput s = ox_finish(c, b);
    b = ox_begin(c, "Gather");
    floe_node_add_input(b, s);
    floe_node_add_input(b, ox_scalar_i64(c, axis));
    d = ox_finish(c, b);
  }
  FloeOutput neg = ox_binary(c, "Less", i64, ox_scalar_i64(c, 0));
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, neg);
  floe_node_add_input(b, ox_binary(c, "Add", i64, d));
  floe_node_add_input(b, i64);
  return ox_finish(c, b);
}

/* Gather(Shape(x), k) of constant indices k whose dims of x are known, though others (a
 * dynamic batch) are not: those dims as a constant, so the shape arithmetic of an exported
 * model (a reshape's target, a slice's bounds) folds while importing. 1: done (*out set). */
static int gather_known_dims(OxCtx *c, FloeOutput data, FloeOutput idx, FloeOutput *out) {
  const FloeNode *sh = data.node;
  const FloeTensor *it = ox_const_value(idx);
  if (!sh || strcmp(sh->op->name, "Shape") != 0 || sh->num_inputs != 1 || !it ||
      floe_tensor_rank(it) > 1)
    return 0;
  FloeShape xs = ox_shape(sh->inputs[0]);
  int64_t k[FLOE_MAX_DIMS];
  int nk = ox_const_ints(idx, k, FLOE_MAX_DIMS);
  if (xs.rank < 0 || nk < 0) return 0;
  for (int i = 0; i < nk; i++) {
    if (k[i] < 0) k[i] += xs.rank;
    if (k[i] < 0 || k[i] >= xs.rank || xs.dims[k[i]] < 0) return 0;
    k[i] = xs.dims[k[i]];
  }
  *out = floe_tensor_rank(it) == 0 ? ox_scalar_i64(c, k[0]) : ox_const_i64(c, k, nk);
  return out->node != NULL;
}

OX_MAP(map_gather) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the data");
  if (r < 0) return floe_status_code(c->st);
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", 0), r, "axis", &axis)) != FLOE_OK) return rc;
  if (axis == 0 && gather_known_dims(c, in[0], in[1], &out[0])) return FLOE_OK;
  FloeNodeBuilder *b = ox_begin(c, "Gather");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, wrap_indices(c, in[1], in[0], axis));
  floe_node_set_attr_int(b, "axis", axis);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* Slice (opset >= 10) whose starts, ends, axes or steps are known only at run time. Absent
 * axes are 0..len(starts)-1 and absent steps 1. */
static floe_code slice_run_time(OxCtx *c, const FloeOutput *in, int nin, FloeOutput *out) {
  FloeOutput starts = ox_cast(c, in[1], FLOE_I64), axes, steps;
  FloeNodeBuilder *b = ox_begin(c, "Size");
  floe_node_add_input(b, starts);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput len = ox_finish(c, b);
  if (nin > 3 && ox_present(in[3])) {
    axes = ox_cast(c, in[3], FLOE_I64);
  } else {
    b = ox_begin(c, "Range");
    floe_node_add_input(b, ox_scalar_i64(c, 0));
    floe_node_add_input(b, len);
    floe_node_add_input(b, ox_scalar_i64(c, 1));
    axes = ox_finish(c, b);
  }
  if (nin > 4 && ox_present(in[4])) {
    steps = ox_cast(c, in[4], FLOE_I64);
  } else {
    int64_t one = 1;
    b = ox_begin(c, "Fill");
    floe_node_add_input(b, ox_binary(c, "Reshape", len, ox_const_i64(c, &one, 1)));
    floe_node_add_input(b, ox_scalar_i64(c, 1));
    steps = ox_finish(c, b);
  }
  b = ox_begin(c, "SliceAxes");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, starts);
  floe_node_add_input(b, ox_cast(c, in[2], FLOE_I64));
  floe_node_add_input(b, axes);
  floe_node_add_input(b, steps);
  out[0] = ox_finish(c, b);
  return ox_check(c);
}

OX_MAP(map_slice) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, c->opset < 10 ? 1 : 3);
  if (rc != FLOE_OK) return rc;
  if (c->opset >= 10)
    for (int i = 1; i <= 4; i++)
      if (run_time_input(in, nin, i)) return slice_run_time(c, in, nin, out);
  int r = ox_rank(c, in[0], "the data");
  if (r < 0) return floe_status_code(c->st);
  int64_t starts[FLOE_MAX_DIMS], ends[FLOE_MAX_DIMS], axes[FLOE_MAX_DIMS], steps[FLOE_MAX_DIMS];
  int ns = attr_or_const(c, n, "starts", in, nin, 1, starts, FLOE_MAX_DIMS);
  int ne = attr_or_const(c, n, "ends", in, nin, 2, ends, FLOE_MAX_DIMS);
  int na = attr_or_const(c, n, "axes", in, nin, 3, axes, FLOE_MAX_DIMS);
  int nst = c->opset < 10 ? -1 : attr_or_const(c, n, "steps", in, nin, 4, steps, FLOE_MAX_DIMS);
  if (ns == -2 || ne == -2 || na == -2 || nst == -2) return floe_status_code(c->st);
  if (ns < 0 || ne != ns)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "starts (%d) and ends (%d) must be given, equally long",
                   ns, ne);
  if (na < 0) {
    na = ns;
    for (int i = 0; i < ns; i++) axes[i] = i;
  }
  if (nst < 0) {
    nst = ns;
    for (int i = 0; i < ns; i++) steps[i] = 1;
  }
  if (na != ns || nst != ns)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "starts, ends, axes and steps differ in length");
  int64_t b_[FLOE_MAX_DIMS] = {0}, e_[FLOE_MAX_DIMS] = {0}, s_[FLOE_MAX_DIMS];
  int64_t begin_mask = 0, end_mask = 0;
  for (int i = 0; i < r; i++) {
    s_[i] = 1;
    begin_mask |= 1ll << i;
    end_mask |= 1ll << i;
  }
  for (int i = 0; i < ns; i++) {
    int a;
    if ((rc = ox_axis(c, axes[i], r, "axis", &a)) != FLOE_OK) return rc;
    if (steps[i] == 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "step %d is 0", i);
    /* Python slicing clamps like ONNX; keep values in int64 range but let huge ones mean
     * "to the end" through the masks. */
    b_[a] = starts[i];
    e_[a] = ends[i];
    s_[a] = steps[i];
    begin_mask &= ~(1ll << a);
    end_mask &= ~(1ll << a);
    if (steps[i] > 0 && ends[i] >= INT64_MAX / 2) end_mask |= 1ll << a;
    if (steps[i] < 0 && ends[i] <= INT64_MIN / 2) end_mask |= 1ll << a;
    if (steps[i] > 0 && starts[i] <= INT64_MIN / 2) begin_mask |= 1ll << a;
    if (steps[i] < 0 && starts[i] >= INT64_MAX / 2) begin_mask |= 1ll << a;
  }
  FloeNodeBuilder *b = ox_begin(c, "StridedSlice");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ox_const_i64(c, b_, r));
  floe_node_add_input(b, ox_const_i64(c, e_, r));
  floe_node_add_input(b, ox_const_i64(c, s_, r));
  floe_node_set_attr_int(b, "begin_mask", begin_mask);
  floe_node_set_attr_int(b, "end_mask", end_mask);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_tile) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  out[0] = ox_binary(c, "Tile", in[0], ox_cast(c, in[1], FLOE_I64));
  return FLOE_OK;
}

OX_MAP(map_expand) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  int64_t v[FLOE_MAX_DIMS];
  int k = ox_const_ints(in[1], v, FLOE_MAX_DIMS);
  if (k >= 0 && fully_known(&xs)) {
    /* Bidirectional: the result is the broadcast of both shapes. */
    int r = k > xs.rank ? k : xs.rank;
    int64_t dims[FLOE_MAX_DIMS];
    for (int i = 0; i < r; i++) {
      int ix = i - (r - xs.rank), iv = i - (r - k);
      int64_t a = ix >= 0 ? xs.dims[ix] : 1, bb = iv >= 0 ? v[iv] : 1;
      if (a != bb && a != 1 && bb != 1)
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "cannot expand dim %d of size %lld to %lld", i,
                       (long long)a, (long long)bb);
      dims[i] = a == 1 ? bb : a;
    }
    out[0] = ox_binary(c, "BroadcastTo", in[0], ox_const_i64(c, dims, r));
    return FLOE_OK;
  }
  /* x op neutral-filled tensor of the target shape broadcasts both ways at run time. */
  FloeDType dt = ox_dtype(in[0]);
  FloeNodeBuilder *b = ox_begin(c, "Fill");
  floe_node_add_input(b, ox_cast(c, in[1], FLOE_I64));
  floe_node_add_input(b, ox_scalar(c, dt, 0.0));
  FloeOutput z = ox_finish(c, b);
  out[0] = ox_binary(c, dt == FLOE_BOOL ? "LogicalOr" : "Add", in[0], z);
  return FLOE_OK;
}

OX_MAP(map_split) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  FloeShape s = ox_shape(in[0]);
  if (s.rank < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "input of unknown rank");
  int axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", 0), s.rank, "axis", &axis)) != FLOE_OK) return rc;
  if (c->opset >= 13 && nin > 1 && ox_present(in[1]) && ox_const_value(in[1]) == NULL) {
    /* Sizes known only at run time. */
    FloeNodeBuilder *b = ox_begin(c, "SplitV");
    floe_node_add_input(b, in[0]);
    floe_node_add_input(b, ox_cast(c, in[1], FLOE_I64));
    floe_node_add_input(b, ox_scalar_i32(c, axis));
    floe_node_set_attr_int(b, "num_split", nout);
    FloeNode *sp = ox_finish_node(c, b);
    for (int i = 0; sp && i < nout; i++) out[i] = floe_out(sp, i);
    return ox_check(c);
  }
  int64_t *sizes = floe__calloc((size_t)nout + 1, sizeof *sizes);
  if (!sizes) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
  int k = attr_or_const(c, n, "split", in, nin, 1, sizes, nout);
  if (k == -2) {
    floe__free(sizes);
    return floe_status_code(c->st);
  }
  if (k < 0) {
    FloeNodeBuilder *b = ox_begin(c, "Split");
    floe_node_add_input(b, in[0]);
    floe_node_add_input(b, ox_scalar_i32(c, axis));
    floe_node_set_attr_int(b, "num_split", nout);
    FloeNode *sp = ox_finish_node(c, b);
    for (int i = 0; sp && i < nout; i++) out[i] = floe_out(sp, i);
    floe__free(sizes);
    return FLOE_OK;
  }
  if (k != nout) {
    floe__free(sizes);
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "split has %d sizes for %d outputs", k, nout);
  }
  int64_t at = 0;
  for (int i = 0; i < nout; i++) {
    int64_t be[FLOE_MAX_DIMS] = {0}, sz[FLOE_MAX_DIMS];
    for (int d = 0; d < s.rank; d++) sz[d] = -1;
    be[axis] = at;
    sz[axis] = sizes[i];
    at += sizes[i];
    FloeNodeBuilder *b = ox_begin(c, "Slice");
    floe_node_add_input(b, in[0]);
    floe_node_add_input(b, ox_const_i64(c, be, s.rank));
    floe_node_add_input(b, ox_const_i64(c, sz, s.rank));
    out[i] = ox_finish(c, b);
  }
  floe__free(sizes);
  return FLOE_OK;
}

OX_MAP(map_dropout) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  /* Inference (training_mode absent or false) or a zero ratio: the identity, mask all true.
   * Training with a ratio draws a random mask: not reproducible against any reference. */
  int training = 0;
  if (c->opset >= 12 && nin > 2 && ox_present(in[2])) {
    const FloeTensor *t = ox_const_value(in[2]);
    training = !t || *(const uint8_t *)floe_tensor_data(t) != 0;
  }
  if (training) {
    /* mask = U[0, 1) >= ratio; y = x * mask / (1 - ratio). A zero ratio keeps everything. */
    FloeDType dt = ox_dtype(in[0]);
    FloeOutput ratio = nin > 1 && ox_present(in[1]) ? ox_cast(c, in[1], dt) : ox_scalar(c, dt, 0.5);
    FloeNodeBuilder *b = ox_begin(c, "Shape");
    floe_node_add_input(b, in[0]);
    floe_node_set_attr_type(b, "out_type", FLOE_I64);
    FloeOutput shape = ox_finish(c, b);
    b = ox_begin(c, "RandomUniform");
    floe_node_add_input(b, shape);
    floe_node_set_attr_type(b, "dtype", dt == FLOE_F64 ? FLOE_F64 : FLOE_F32);
    floe_node_set_attr_int(b, "seed", ox_int(n, "seed", 0));
    FloeOutput u = ox_cast(c, ox_finish(c, b), dt);
    FloeOutput keep = ox_binary(c, "GreaterEqual", u, ratio);
    FloeOutput scale = ox_binary(c, "Div", ox_scalar(c, dt, 1.0),
                                 ox_binary(c, "Sub", ox_scalar(c, dt, 1.0), ratio));
    FloeOutput y = ox_binary(c, "Mul", ox_binary(c, "Mul", in[0], ox_cast(c, keep, dt)), scale);
    /* ratio 1 drops everything: 0 * inf would be NaN */
    FloeOutput all = ox_binary(c, "GreaterEqual", ratio, ox_scalar(c, dt, 1.0));
    b = ox_begin(c, "Select");
    floe_node_add_input(b, all);
    floe_node_add_input(b, ox_unary(c, "ZerosLike", in[0]));
    floe_node_add_input(b, y);
    out[0] = ox_finish(c, b);
    if (nout > 1) out[1] = keep;
    return FLOE_OK;
  }
  out[0] = ox_identity(c, in[0]);
  if (nout > 1) {
    FloeNodeBuilder *b = ox_begin(c, "OnesLike");
    floe_node_add_input(b, in[0]);
    out[1] = ox_cast(c, ox_finish(c, b), FLOE_BOOL);
  }
  return FLOE_OK;
}

/* A constant_value known only at run time: y where the input was, value in the padding. */
static FloeOutput pad_value_run_time(OxCtx *c, FloeOutput x, FloeOutput y, FloeOutput paddings,
                                     FloeOutput value) {
  FloeNodeBuilder *b = ox_begin(c, "OnesLike");
  floe_node_add_input(b, x);
  FloeOutput ones = ox_cast(c, ox_finish(c, b), FLOE_BOOL);
  b = ox_begin(c, "Pad");
  floe_node_add_input(b, ones);
  floe_node_add_input(b, paddings);
  FloeOutput inside = ox_finish(c, b);
  FloeOutput v = ox_binary(c, "Reshape", ox_cast(c, value, ox_dtype(x)), ox_const_i64(c, NULL, 0));
  b = ox_begin(c, "Select");
  floe_node_add_input(b, inside);
  floe_node_add_input(b, y);
  floe_node_add_input(b, v);
  return ox_finish(c, b);
}

/* Pad by constant pads ([2r]: all befores, then all afters; negative ones crop). */
static FloeOutput pad_const(OxCtx *c, FloeOutput x, const int64_t *pads, int r, const char *fmode,
                            double value, FloeOutput run_value) {
  /* Negative pads crop: pad with the positive part, then slice off the negative part. */
  int64_t pp[2 * FLOE_MAX_DIMS], crop_b[FLOE_MAX_DIMS], crop_s[FLOE_MAX_DIMS];
  int crop = 0;
  for (int i = 0; i < r; i++) {
    pp[2 * i] = pads[i] > 0 ? pads[i] : 0;
    pp[2 * i + 1] = pads[r + i] > 0 ? pads[r + i] : 0;
    crop_b[i] = pads[i] < 0 ? -pads[i] : 0;
    crop_s[i] = pads[r + i] < 0 ? pads[r + i] : 0; /* relative to the end */
    crop |= pads[i] < 0 || pads[r + i] < 0;
  }
  int64_t pd[2] = {r, 2};
  FloeTensor *pt = floe_tensor_new(FLOE_I64, 2, pd, c->st);
  if (!pt) {
    ox_fail(c, floe_status_code(c->st), "%s", floe_status_message(c->st));
    return (FloeOutput){NULL, 0};
  }
  memcpy(floe_tensor_data(pt), pp, (size_t)(2 * r) * sizeof(int64_t));
  FloeOutput paddings = ox_const(c, pt);
  FloeNodeBuilder *b = ox_begin(c, "Pad");
  floe_node_add_input(b, x);
  floe_node_add_input(b, paddings);
  floe_node_set_attr_string(b, "mode", fmode);
  floe_node_set_attr_float(b, "constant_value", value);
  FloeOutput y = ox_finish(c, b);
  if (run_value.node) y = pad_value_run_time(c, x, y, paddings, run_value);
  if (crop) {
    int64_t e_[FLOE_MAX_DIMS], s_[FLOE_MAX_DIMS], end_mask = 0;
    for (int i = 0; i < r; i++) {
      e_[i] = crop_s[i];
      s_[i] = 1;
      if (crop_s[i] == 0) end_mask |= 1ll << i;
    }
    b = ox_begin(c, "StridedSlice");
    floe_node_add_input(b, y);
    floe_node_add_input(b, ox_const_i64(c, crop_b, r));
    floe_node_add_input(b, ox_const_i64(c, e_, r));
    floe_node_add_input(b, ox_const_i64(c, s_, r));
    floe_node_set_attr_int(b, "end_mask", end_mask);
    y = ox_finish(c, b);
  }
  return y;
}

/* Pad by pads known only when the graph runs ([2r]: all befores, then all afters; negative
 * ones crop): paddings [r, 2] = transpose(reshape(pads, [2, r])); Pad by their positive
 * parts, then a Slice drops the negative parts. */
static FloeOutput pad_run_time(OxCtx *c, FloeOutput x, FloeOutput pads, int r, const char *mode,
                               double value, FloeOutput run_value) {
  int64_t d2[2] = {2, r}, t2[2] = {1, 0}, one = 1, zero2[2] = {0, 0}, col[2] = {r, 1}, flat = -1;
  FloeOutput p = ox_binary(c, "Transpose", ox_binary(c, "Reshape", ox_cast(c, pads, FLOE_I64),
                                                     ox_const_i64(c, d2, 2)),
                           ox_const_i64(c, t2, 2));
  FloeOutput zero = ox_scalar_i64(c, 0);
  FloeOutput paddings = ox_binary(c, "Maximum", p, zero);
  FloeOutput neg = ox_binary(c, "Minimum", p, zero);
  FloeNodeBuilder *b = ox_begin(c, "Pad");
  floe_node_add_input(b, x);
  floe_node_add_input(b, paddings);
  floe_node_set_attr_string(b, "mode", mode);
  floe_node_set_attr_float(b, "constant_value", value);
  FloeOutput y = ox_finish(c, b);
  if (run_value.node) y = pad_value_run_time(c, x, y, paddings, run_value);
  b = ox_begin(c, "Slice");
  floe_node_add_input(b, neg);
  floe_node_add_input(b, ox_const_i64(c, zero2, 2));
  floe_node_add_input(b, ox_const_i64(c, col, 2));
  FloeOutput neg_before = ox_binary(c, "Reshape", ox_finish(c, b), ox_const_i64(c, &flat, 1));
  b = ox_begin(c, "Shape");
  floe_node_add_input(b, y);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput shape = ox_finish(c, b);
  FloeOutput size = ox_binary(c, "Add", shape, ox_binary(c, "Sum", neg, ox_const_i64(c, &one, 1)));
  b = ox_begin(c, "Slice");
  floe_node_add_input(b, y);
  floe_node_add_input(b, ox_unary(c, "Neg", neg_before));
  floe_node_add_input(b, size);
  return ox_finish(c, b);
}

OX_MAP(map_pad) {
  OX_UNUSED;
  floe_code rc = ox_need(c, in, nin, c->opset < 11 ? 1 : 2);
  if (rc != FLOE_OK) return rc;
  int r = ox_rank(c, in[0], "the data");
  if (r < 0) return floe_status_code(c->st);
  char mbuf[32];
  const char *mode = ox_str(n, "mode", "constant", mbuf, sizeof mbuf);
  const char *fmode = !strcmp(mode, "constant") ? "CONSTANT"
                      : !strcmp(mode, "reflect") ? "REFLECT"
                      : !strcmp(mode, "edge")    ? "EDGE"
                                                 : NULL;
  if (!fmode) return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown mode '%s'", mode);
  double value = ox_float(n, "value", 0.0f);
  FloeOutput run_value = {NULL, 0};
  if (c->opset >= 11 && nin > 2 && ox_present(in[2])) {
    const FloeTensor *t = ox_const_value(in[2]);
    if (!t) {
      run_value = in[2];
    } else {
      const void *d = floe_tensor_data(t);
      switch (floe_tensor_dtype(t)) {
        case FLOE_F32: value = *(const float *)d; break;
        case FLOE_F64: value = *(const double *)d; break;
        case FLOE_I32: value = *(const int32_t *)d; break;
        case FLOE_I64: value = (double)*(const int64_t *)d; break;
        case FLOE_I8: value = *(const int8_t *)d; break;
        case FLOE_U8: value = *(const uint8_t *)d; break;
        case FLOE_BOOL: value = *(const uint8_t *)d != 0; break;
        default:
          run_value = in[2]; /* f16 / bf16: converted by Cast in the graph */
          break;
      }
    }
  }
  int64_t pads[2 * FLOE_MAX_DIMS];
  int k = -1;
  if (c->opset < 11) {
    k = attr_or_const(c, n, c->opset < 2 ? "paddings" : "pads", in, nin, 1, pads,
                      2 * FLOE_MAX_DIMS);
    if (k == -2) return floe_status_code(c->st);
  } else {
    k = ox_const_ints(in[1], pads, 2 * FLOE_MAX_DIMS);
  }
  if (strcmp(fmode, "CONSTANT")) run_value.node = NULL; /* only constant mode uses it */
  if (k < 0 && c->opset >= 11) {
    out[0] = pad_run_time(c, in[0], in[1], r, fmode, value, run_value);
  } else {
    if (k != 2 * r)
      return ox_fail(c, FLOE_INVALID_ARGUMENT,
                     "pads has %d values for a rank-%d input (needs %d)", k, r, 2 * r);
    out[0] = pad_const(c, in[0], pads, r, fmode, value, run_value);
  }
  return ox_check(c);
}

const OxOp floe__onnx_ops_tensor[] = {
    {"", "Constant", map_constant},
    {"", "ConstantOfShape", map_constant_of_shape},
    {"", "Shape", map_shape},
    {"", "Size", map_size},
    {"", "Reshape", map_reshape},
    {"", "Flatten", map_flatten},
    {"", "Squeeze", map_squeeze},
    {"", "Unsqueeze", map_unsqueeze},
    {"", "Transpose", map_transpose},
    {"", "Concat", map_concat},
    {"", "Gather", map_gather},
    {"", "Slice", map_slice},
    {"", "Tile", map_tile},
    {"", "Expand", map_expand},
    {"", "Split", map_split},
    {"", "Dropout", map_dropout},
    {"", "Pad", map_pad},
    {NULL, NULL, NULL},
};
