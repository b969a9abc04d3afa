/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_seq.c - ONNX sequences and optionals as compositions of Floe's array ops, on the
 * representation of onnx_values.c: a sequence is values (its elements flattened, one after
 * the other) and shapes ([n, rank] i64); element k starts at the sum of the sizes (products
 * of the shape rows) before it. Every op makes a new sequence; nothing is updated in place,
 * as ONNX's value semantics want. Elements of one sequence share a dtype and a rank. */
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

/* ---- small builders ---- */

static FloeOutput i64s(OxCtx *c, int n, const int64_t *v) { return ox_const_i64(c, v, n); }

static FloeOutput reshape(OxCtx *c, FloeOutput x, FloeOutput shape) {
  FloeNodeBuilder *b = ox_begin(c, "Reshape");
  floe_node_add_input(b, x);
  floe_node_add_input(b, shape);
  return ox_finish(c, b);
}

static FloeOutput flat(OxCtx *c, FloeOutput x) {
  return reshape(c, x, i64s(c, 1, (int64_t[]){-1}));
}

static FloeOutput as_1(OxCtx *c, FloeOutput x) { return reshape(c, x, i64s(c, 1, (int64_t[]){1})); }

static FloeOutput concat(OxCtx *c, const FloeOutput *xs, int n, int axis) {
  if (n == 1) return xs[0];
  FloeNodeBuilder *b = ox_begin(c, "Concat");
  floe_node_add_input_list(b, xs, n);
  floe_node_add_input(b, ox_scalar_i32(c, axis));
  return ox_finish(c, b);
}

static FloeOutput concat2(OxCtx *c, FloeOutput a, FloeOutput b, int axis) {
  FloeOutput xs[2] = {a, b};
  return concat(c, xs, 2, axis);
}

static FloeOutput slice(OxCtx *c, FloeOutput x, FloeOutput begin, FloeOutput size) {
  FloeNodeBuilder *b = ox_begin(c, "Slice");
  floe_node_add_input(b, x);
  floe_node_add_input(b, begin);
  floe_node_add_input(b, size);
  return ox_finish(c, b);
}

static FloeOutput shape_of(OxCtx *c, FloeOutput x) {
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  return ox_finish(c, b);
}

static FloeOutput gather(OxCtx *c, FloeOutput x, FloeOutput index, int axis) {
  FloeNodeBuilder *b = ox_begin(c, "Gather");
  floe_node_add_input(b, x);
  floe_node_add_input(b, index);
  floe_node_set_attr_int(b, "axis", axis);
  return ox_finish(c, b);
}

static FloeOutput reduce(OxCtx *c, const char *op, FloeOutput x, int axis) {
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_scalar_i32(c, axis));
  return ox_finish(c, b);
}

static FloeOutput tile(OxCtx *c, FloeOutput x, FloeOutput multiples) {
  FloeNodeBuilder *b = ox_begin(c, "Tile");
  floe_node_add_input(b, x);
  floe_node_add_input(b, multiples);
  return ox_finish(c, b);
}

static FloeOutput transpose(OxCtx *c, FloeOutput x, const int64_t *perm, int r) {
  FloeNodeBuilder *b = ox_begin(c, "Transpose");
  floe_node_add_input(b, x);
  floe_node_add_input(b, i64s(c, r, perm));
  return ox_finish(c, b);
}

/* ---- sequences ---- */

static int is_seq(const OxVal *v) { return v->kind == OX_SEQ; }

/* True when s is known to be empty (its shapes a constant with no rows). */
static int known_empty(const OxVal *s) {
  const FloeTensor *t = ox_const_value(s->shapes);
  return t && floe_tensor_shape(t).rank == 2 && floe_tensor_shape(t).dims[0] == 0;
}

static FloeOutput seq_len(OxCtx *c, const OxVal *s) {
  return gather(c, shape_of(c, s->shapes), ox_scalar_i64(c, 0), 0);
}

/* A sequence value registered as this node's output. */
static FloeOutput seq_out(OxCtx *c, FloeOutput values, FloeOutput shapes, FloeShape elem) {
  OxVal v = {.kind = OX_SEQ, .value = values, .shapes = shapes, .elem = elem};
  return ox_val_set(c, &v);
}

/* An empty sequence of dtype dt. */
static OxVal seq_empty(OxCtx *c, FloeDType dt) {
  OxVal v = {.kind = OX_SEQ, .elem = floe_shape_unknown()};
  int64_t zero = 0, dims[2] = {0, 0};
  v.value = ox_const(c, floe_tensor_new(dt, 1, &zero, NULL));
  v.shapes = ox_const(c, floe_tensor_new(FLOE_I64, 2, dims, NULL));
  return v;
}

/* A position (scalar or one element) within [-n, n) (n too when end), as a scalar in
 * [0, n]. Out-of-range positions make the Slices that use it fail when run. */
static FloeOutput seq_pos(OxCtx *c, FloeOutput pos, FloeOutput n) {
  FloeOutput p = reshape(c, ox_cast(c, pos, FLOE_I64), i64s(c, 0, NULL));
  FloeNodeBuilder *b = ox_begin(c, "Select");
  floe_node_add_input(b, ox_binary(c, "Less", p, ox_scalar_i64(c, 0)));
  floe_node_add_input(b, ox_binary(c, "Add", p, n));
  floe_node_add_input(b, p);
  return ox_finish(c, b);
}

/* Where element p starts in values, and its size (i64 scalars). */
static void seq_span(OxCtx *c, const OxVal *s, FloeOutput p, FloeOutput *off, FloeOutput *size) {
  FloeOutput sizes = reduce(c, "Prod", s->shapes, 1);
  *off = reduce(c, "Sum", slice(c, sizes, i64s(c, 1, (int64_t[]){0}), as_1(c, p)), 0);
  if (size) *size = gather(c, sizes, p, 0);
}

/* s's shapes as [n, r]: an empty sequence's may have another row length. */
static FloeOutput shapes_with_rank(OxCtx *c, const OxVal *s, int r) {
  FloeShape have = ox_shape(s->shapes);
  if (have.rank == 2 && have.dims[1] == r) return s->shapes;
  FloeOutput n = as_1(c, seq_len(c, s));
  return reshape(c, s->shapes, concat2(c, n, i64s(c, 1, (int64_t[]){r}), 0));
}

/* Rows [0, p) and [p + skip, n) of x (1-D values or 2-D shapes; for values p and skip are
 * element offsets). */
static FloeOutput without(OxCtx *c, FloeOutput x, FloeOutput p, FloeOutput skip, int rank2,
                          FloeOutput insert) {
  FloeOutput zero = i64s(c, rank2 ? 2 : 1, (int64_t[]){0, 0});
  FloeOutput head_size = rank2 ? concat2(c, as_1(c, p), i64s(c, 1, (int64_t[]){-1}), 0) : as_1(c, p);
  FloeOutput from = skip.node ? ox_binary(c, "Add", p, skip) : p;
  FloeOutput tail_begin = rank2 ? concat2(c, as_1(c, from), i64s(c, 1, (int64_t[]){0}), 0) : as_1(c, from);
  FloeOutput tail_size = i64s(c, rank2 ? 2 : 1, (int64_t[]){-1, -1});
  FloeOutput parts[3] = {slice(c, x, zero, head_size), insert, slice(c, x, tail_begin, tail_size)};
  if (insert.node) return concat(c, parts, 3, 0);
  parts[1] = parts[2];
  return concat(c, parts, 2, 0);
}

/* s with t inserted before element pos (pos.node NULL: at the end). */
static floe_code seq_insert(OxCtx *c, const OxVal *s, FloeOutput t, FloeOutput pos, OxVal *res) {
  if (ox_dtype(t) != ox_dtype(s->value))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "inserting a tensor of %s into a sequence of %s",
                   floe_dtype_name(ox_dtype(t)), floe_dtype_name(ox_dtype(s->value)));
  int r = ox_rank(c, t, "the tensor inserted");
  if (r < 0) return floe_status_code(c->st);
  FloeOutput shapes = shapes_with_rank(c, s, r);
  FloeOutput row = reshape(c, shape_of(c, t), i64s(c, 2, (int64_t[]){1, r}));
  *res = *s;
  res->elem = known_empty(s) ? ox_shape(t) : s->elem;
  if (!known_empty(s)) {
    FloeShape e = ox_shape(t);
    if (res->elem.rank != e.rank) res->elem = floe_shape_unknown();
    for (int d = 0; d < res->elem.rank; d++)
      if (res->elem.dims[d] != e.dims[d]) res->elem.dims[d] = FLOE_DIM_UNKNOWN;
  }
  if (!pos.node) {
    res->value = concat2(c, s->value, flat(c, t), 0);
    res->shapes = concat2(c, shapes, row, 0);
  } else {
    OxVal s2 = *s;
    s2.shapes = shapes;
    FloeOutput p = seq_pos(c, pos, seq_len(c, s)), off;
    seq_span(c, &s2, p, &off, NULL);
    res->value = without(c, s->value, off, (FloeOutput){NULL, 0}, 0, flat(c, t));
    res->shapes = without(c, shapes, p, (FloeOutput){NULL, 0}, 1, row);
  }
  return ox_check(c);
}

/* Element pos of s. */
static FloeOutput seq_at(OxCtx *c, const OxVal *s, FloeOutput pos) {
  FloeOutput p = seq_pos(c, pos, seq_len(c, s)), off, size;
  seq_span(c, s, p, &off, &size);
  FloeOutput data = slice(c, s->value, as_1(c, off), as_1(c, size));
  FloeShape e = s->elem;
  int known = e.rank >= 0;
  for (int d = 0; d < e.rank; d++) known &= e.dims[d] >= 0;
  if (known) return reshape(c, data, i64s(c, e.rank, e.dims));
  FloeOutput shape = gather(c, s->shapes, p, 0);
  if (e.rank >= 0) shape = reshape(c, shape, i64s(c, 1, (int64_t[]){e.rank}));
  return reshape(c, data, shape);
}

static floe_code want_seq(OxCtx *c, const OxVal *v, int k) {
  if (is_seq(v)) return FLOE_OK;
  return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is a%s %s, not a sequence", k,
                 v->kind == OX_OPT || v->kind == (OX_OPT | OX_SEQ) ? "n" : "",
                 ox_kind_name(v->kind));
}

static floe_code map_sequence_empty(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                    int nin, FloeOutput *out, int nout) {
  (void)in, (void)nin, (void)nout;
  int64_t t = ox_int(n, "dtype", 1 /* FLOAT */);
  FloeDType dt = floe__onnx_dtype((int32_t)t);
  if (dt == FLOE_DTYPE_INVALID)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "dtype %s is not a Floe dtype",
                   floe__onnx_dtype_name((int32_t)t));
  OxVal v = seq_empty(c, dt);
  out[0] = ox_val_set(c, &v);
  return ox_check(c);
}

static floe_code map_sequence_construct(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                        int nin, FloeOutput *out, int nout) {
  (void)n, (void)nout;
  if (nin < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceConstruct needs an input");
  FloeOutput *vals = floe__calloc((size_t)nin * 2, sizeof *vals), *rows = vals + nin;
  if (!vals) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  floe_code rc = FLOE_OK;
  FloeShape elem = ox_shape(in[0]);
  for (int i = 0; rc == FLOE_OK && i < nin; i++) {
    int r = in[i].node ? ox_rank(c, in[i], "an element") : -1;
    if (r < 0) {
      rc = in[i].node ? floe_status_code(c->st)
                      : ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is not given", i);
      break;
    }
    if (ox_dtype(in[i]) != ox_dtype(in[0]) || r != elem.rank) {
      rc = ox_fail(c, ox_dtype(in[i]) != ox_dtype(in[0]) ? FLOE_INVALID_ARGUMENT
                                                         : FLOE_UNIMPLEMENTED,
                   "input %d is %s of rank %d and input 0 %s of rank %d (Floe's sequences hold "
                   "one dtype and one rank)",
                   i, floe_dtype_name(ox_dtype(in[i])), r, floe_dtype_name(ox_dtype(in[0])),
                   elem.rank);
      break;
    }
    FloeShape s = ox_shape(in[i]);
    for (int d = 0; d < r; d++)
      if (s.dims[d] != elem.dims[d]) elem.dims[d] = FLOE_DIM_UNKNOWN;
    vals[i] = flat(c, in[i]);
    rows[i] = reshape(c, shape_of(c, in[i]), i64s(c, 2, (int64_t[]){1, r}));
  }
  if (rc == FLOE_OK) out[0] = seq_out(c, concat(c, vals, nin, 0), concat(c, rows, nin, 0), elem);
  floe__free(vals);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_sequence_insert(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                     int nin, FloeOutput *out, int nout) {
  (void)n, (void)nout;
  if (nin < 2 || !in[0].node || !in[1].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceInsert takes a sequence and a tensor");
  OxVal s = ox_val(c, in[0]), res;
  floe_code rc = want_seq(c, &s, 0);
  if (rc == FLOE_OK) rc = seq_insert(c, &s, in[1], nin > 2 ? in[2] : (FloeOutput){NULL, 0}, &res);
  if (rc == FLOE_OK) out[0] = ox_val_set(c, &res);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_sequence_at(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                 int nin, FloeOutput *out, int nout) {
  (void)n, (void)nout;
  if (nin < 2 || !in[0].node || !in[1].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceAt takes a sequence and a position");
  OxVal s = ox_val(c, in[0]);
  floe_code rc = want_seq(c, &s, 0);
  if (rc == FLOE_OK) out[0] = seq_at(c, &s, in[1]);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_sequence_erase(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                    int nin, FloeOutput *out, int nout) {
  (void)n, (void)nout;
  if (nin < 1 || !in[0].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceErase takes a sequence");
  OxVal s = ox_val(c, in[0]);
  floe_code rc = want_seq(c, &s, 0);
  if (rc != FLOE_OK) return rc;
  FloeOutput pos = nin > 1 && in[1].node ? in[1] : ox_scalar_i64(c, -1);
  FloeOutput p = seq_pos(c, pos, seq_len(c, &s)), off, size;
  seq_span(c, &s, p, &off, &size);
  FloeOutput none = {NULL, 0};
  FloeOutput values = without(c, s.value, off, size, 0, none);
  FloeOutput shapes = without(c, s.shapes, p, ox_scalar_i64(c, 1), 1, none);
  out[0] = seq_out(c, values, shapes, s.elem);
  return ox_check(c);
}

static floe_code map_sequence_length(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                     int nin, FloeOutput *out, int nout) {
  (void)n, (void)nout;
  if (nin < 1 || !in[0].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceLength takes a sequence");
  OxVal s = ox_val(c, in[0]);
  floe_code rc = want_seq(c, &s, 0);
  if (rc == FLOE_OK) out[0] = seq_len(c, &s);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

/* ---- SplitToSequence ---- */

/* The sequence of x's slices along axis with the given static sizes. */
static FloeOutput split_static(OxCtx *c, FloeOutput x, int axis, int r, const int64_t *sizes,
                               int n) {
  FloeOutput *vals = floe__calloc((size_t)n * 2 + 1, sizeof *vals), *rows = vals + n;
  if (!vals) {
    ox_fail(c, FLOE_NO_MEMORY, "out of memory");
    return (FloeOutput){NULL, 0};
  }
  FloeShape xs = ox_shape(x), elem = xs;
  int64_t begin[FLOE_MAX_DIMS] = {0}, size[FLOE_MAX_DIMS];
  for (int d = 0; d < r; d++) size[d] = -1;
  for (int k = 0; k < n; k++) {
    size[axis] = sizes[k];
    FloeOutput el = slice(c, x, i64s(c, r, begin), i64s(c, r, size));
    begin[axis] += sizes[k];
    vals[k] = flat(c, el);
    rows[k] = reshape(c, shape_of(c, el), i64s(c, 2, (int64_t[]){1, r}));
    if (k && sizes[k] != sizes[0]) elem.dims[axis] = FLOE_DIM_UNKNOWN;
  }
  if (n) elem.dims[axis] = elem.dims[axis] >= 0 ? sizes[0] : FLOE_DIM_UNKNOWN;
  FloeOutput res = n ? seq_out(c, concat(c, vals, n, 0), concat(c, rows, n, 0), elem)
                     : (FloeOutput){NULL, 0};
  if (!n) {
    OxVal e = seq_empty(c, ox_dtype(x));
    res = ox_val_set(c, &e);
  }
  floe__free(vals);
  return res;
}

/* x's shape with dim axis replaced by len (a [1] i64; NULL: removed), as a [1, r'] row. */
static FloeOutput split_row(OxCtx *c, FloeOutput x, int axis, int r, FloeOutput len) {
  FloeOutput s = shape_of(c, x);
  FloeOutput parts[3];
  int n = 0;
  if (axis > 0) parts[n++] = slice(c, s, i64s(c, 1, (int64_t[]){0}), i64s(c, 1, (int64_t[]){axis}));
  if (len.node) parts[n++] = len;
  if (axis + 1 < r) parts[n++] = slice(c, s, i64s(c, 1, (int64_t[]){axis + 1}), i64s(c, 1, (int64_t[]){-1}));
  int rr = r - (len.node ? 0 : 1);
  if (n == 0) return ox_const(c, floe_tensor_new(FLOE_I64, 2, (int64_t[]){1, 0}, NULL));
  return reshape(c, concat(c, parts, n, 0), i64s(c, 2, (int64_t[]){1, rr}));
}

static floe_code map_split_to_sequence(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                       int nin, FloeOutput *out, int nout) {
  (void)nout;
  if (nin < 1 || !in[0].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SplitToSequence takes a tensor");
  FloeOutput x = in[0];
  int r = ox_rank(c, x, "the input"), axis;
  if (r < 0) return floe_status_code(c->st);
  if (r == 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "the input is a scalar");
  floe_code rc = ox_axis(c, ox_int(n, "axis", 0), r, "axis", &axis);
  if (rc != FLOE_OK) return rc;
  int keepdims = ox_int(n, "keepdims", 1) != 0;
  FloeShape xs = ox_shape(x);
  FloeOutput split = nin > 1 ? in[1] : (FloeOutput){NULL, 0};
  if (split.node) {
    int sr = ox_rank(c, split, "split");
    if (sr < 0) return floe_status_code(c->st);
    int64_t sizes[4096];
    int count = ox_const_ints(split, sizes, 4096);
    if (sr == 0 && count == 1 && xs.dims[axis] >= 0) {
      /* A chunk length: chunks of it, the last one shorter. */
      int64_t chunk = sizes[0], d = xs.dims[axis];
      if (chunk <= 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "split is %lld", (long long)chunk);
      if ((d + chunk - 1) / chunk > 4096)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "more than 4096 chunks");
      count = 0;
      for (int64_t at = 0; at < d; at += chunk) sizes[count++] = at + chunk <= d ? chunk : d - at;
      out[0] = split_static(c, x, axis, r, sizes, count);
      return ox_check(c);
    }
    if (sr == 1 && count >= 0) {
      out[0] = split_static(c, x, axis, r, sizes, count);
      return ox_check(c);
    }
    if (sr != 1 || axis != 0)
      return ox_fail(c, FLOE_UNIMPLEMENTED, "split sizes known only when run, %s",
                     sr != 1 ? "as a chunk length" : "along an axis other than the first");
    /* Runtime lengths along axis 0: the elements are consecutive runs of x's values. */
    FloeOutput lens = reshape(c, ox_cast(c, split, FLOE_I64), i64s(c, 2, (int64_t[]){-1, 1}));
    FloeOutput cnt = as_1(c, gather(c, shape_of(c, lens), ox_scalar_i64(c, 0), 0));
    FloeOutput rows = lens;
    if (r > 1) {
      FloeOutput rest = split_row(c, x, 0, r, (FloeOutput){NULL, 0});
      rows = concat2(c, lens, tile(c, rest, concat2(c, cnt, i64s(c, 1, (int64_t[]){1}), 0)), 1);
    }
    FloeShape elem = xs;
    elem.dims[0] = FLOE_DIM_UNKNOWN;
    out[0] = seq_out(c, flat(c, x), rows, elem);
    return ox_check(c);
  }
  /* No split: every index along axis is an element (kept as length 1, or dropped). */
  FloeOutput moved = x;
  if (axis) {
    int64_t perm[FLOE_MAX_DIMS];
    perm[0] = axis;
    for (int d = 0, k = 1; d < r; d++)
      if (d != axis) perm[k++] = d;
    moved = transpose(c, x, perm, r);
  }
  FloeOutput cnt = as_1(c, gather(c, shape_of(c, x), ox_scalar_i64(c, axis), 0));
  FloeOutput row = split_row(c, x, axis, r, keepdims ? i64s(c, 1, (int64_t[]){1}) : (FloeOutput){NULL, 0});
  FloeOutput rows = tile(c, row, concat2(c, cnt, i64s(c, 1, (int64_t[]){1}), 0));
  FloeShape elem = xs;
  if (keepdims) {
    elem.dims[axis] = 1;
  } else {
    for (int d = axis; d + 1 < r; d++) elem.dims[d] = elem.dims[d + 1];
    elem.rank--;
  }
  out[0] = seq_out(c, flat(c, moved), rows, elem);
  return ox_check(c);
}

/* ---- ConcatFromSequence ---- */

typedef struct CatArg {
  OxCtx *c;
  const OxVal *s;
  int axis;
} CatArg;

static floe_code cat_cond(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                          FloeOutput *pred) {
  (void)g, (void)n;
  CatArg *a = arg;
  *pred = ox_binary(a->c, "Less", vars[0], seq_len(a->c, a->s));
  return ox_check(a->c);
}

static floe_code cat_body(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                          FloeOutput *next) {
  (void)g, (void)n;
  CatArg *a = arg;
  next[0] = ox_binary(a->c, "Add", vars[0], ox_scalar_i64(a->c, 1));
  next[1] = concat2(a->c, vars[1], seq_at(a->c, a->s, vars[0]), a->axis);
  return ox_check(a->c);
}

/* Elements whose lengths along axis may differ: element 0, then one Concat per element in a
 * while loop. */
static FloeOutput concat_loop(OxCtx *c, const OxVal *s, int axis, int r) {
  CatArg a = {c, s, axis};
  FloeOutput vars[2] = {ox_scalar_i64(c, 1), seq_at(c, s, ox_scalar_i64(c, 0))}, res[2];
  FloeShape inv[2] = {floe_shape_scalar(), floe_shape_unknown()};
  inv[1].rank = r;
  for (int d = 0; d < r; d++) inv[1].dims[d] = FLOE_DIM_UNKNOWN;
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.shape_invariants = inv;
  char name[512];
  snprintf(name, sizeof name, "%s/concat_loop", c->node_name);
  if (ox_check(c) != FLOE_OK ||
      floe_while_loop(c->g, name, cat_cond, cat_body, &a, vars, 2, &o, res) != FLOE_OK)
    return (FloeOutput){NULL, 0};
  return res[1];
}

static floe_code map_concat_from_sequence(OxCtx *c, const Onnx__NodeProto *n,
                                          const FloeOutput *in, int nin, FloeOutput *out,
                                          int nout) {
  (void)nout;
  if (nin < 1 || !in[0].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "ConcatFromSequence takes a sequence");
  OxVal s = ox_val(c, in[0]);
  floe_code rc = want_seq(c, &s, 0);
  if (rc != FLOE_OK) return rc;
  if (!ox_attr(n, "axis")) return ox_fail(c, FLOE_INVALID_ARGUMENT, "the attribute 'axis' is required");
  int r = s.elem.rank;
  if (r < 0) {
    FloeShape ss = ox_shape(s.shapes);
    r = ss.rank == 2 && !known_empty(&s) ? (int)ss.dims[1] : -1;
  }
  if (r < 0)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "the rank of the sequence's elements is not known "
                   "when the graph is built");
  int new_axis = ox_int(n, "new_axis", 0) != 0, axis;
  if ((rc = ox_axis(c, ox_int(n, "axis", 0), r + new_axis, "axis", &axis)) != FLOE_OK) return rc;
  FloeOutput shape0 = gather(c, s.shapes, ox_scalar_i64(c, 0), 0);
  FloeOutput cnt = as_1(c, seq_len(c, &s));
  if (new_axis || (axis > 0 && s.elem.dims[axis] >= 0)) {
    /* Elements of one shape: [n, ...] moved to axis (then merged with the next dim). */
    FloeOutput st = reshape(c, s.value, concat2(c, cnt, shape0, 0));
    if (axis) {
      int64_t perm[FLOE_MAX_DIMS + 1];
      for (int d = 0, k = 1; d <= r; d++) perm[d] = d == axis ? 0 : k++;
      st = transpose(c, st, perm, r + 1);
    }
    if (!new_axis) {
      FloeOutput merged = ox_binary(c, "Mul", cnt, slice(c, shape0, i64s(c, 1, (int64_t[]){axis}),
                                                          i64s(c, 1, (int64_t[]){1})));
      FloeOutput parts[3] = {slice(c, shape0, i64s(c, 1, (int64_t[]){0}), i64s(c, 1, (int64_t[]){axis})),
                             merged,
                             slice(c, shape0, i64s(c, 1, (int64_t[]){axis + 1}), i64s(c, 1, (int64_t[]){-1}))};
      st = reshape(c, st, concat(c, parts, 3, 0));
    }
    out[0] = st;
  } else if (axis == 0) {
    /* Along the first axis the values are already in order. */
    FloeOutput first = reduce(c, "Sum", slice(c, s.shapes, i64s(c, 2, (int64_t[]){0, 0}),
                                                i64s(c, 2, (int64_t[]){-1, 1})), 0);
    FloeOutput rest = slice(c, shape0, i64s(c, 1, (int64_t[]){1}), i64s(c, 1, (int64_t[]){-1}));
    out[0] = reshape(c, s.value, concat2(c, first, rest, 0));
  } else {
    out[0] = concat_loop(c, &s, axis, r);
  }
  return ox_check(c);
}

/* ---- SequenceMap: a while loop over the first input's elements ---- */

typedef struct MapArg {
  OxCtx *c;
  const OxVal *ins;
  int nin, nout;
  FloeShape *elem; /* per output, from the body */
} MapArg;

static floe_code map_cond(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                          FloeOutput *pred) {
  (void)g, (void)n;
  MapArg *a = arg;
  *pred = ox_binary(a->c, "Less", vars[0], seq_len(a->c, &a->ins[0]));
  return ox_check(a->c);
}

static floe_code map_body(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                          FloeOutput *next) {
  (void)g, (void)n;
  MapArg *a = arg;
  OxCtx *c = a->c;
  OxVal *args = floe__calloc((size_t)(a->nin + a->nout), sizeof *args), *res = args + a->nin;
  if (!args) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  for (int k = 0; k < a->nin; k++)
    args[k] = is_seq(&a->ins[k]) ? ox_val(c, seq_at(c, &a->ins[k], vars[0])) : a->ins[k];
  floe_code rc = ox_check(c);
  if (rc == FLOE_OK) rc = ox_subgraph(c, "body", args, a->nin, res, a->nout);
  next[0] = ox_binary(c, "Add", vars[0], ox_scalar_i64(c, 1));
  for (int k = 0; rc == FLOE_OK && k < a->nout; k++) {
    if (res[k].kind != OX_TENSOR) {
      rc = ox_fail(c, FLOE_UNIMPLEMENTED, "body output %d is a %s; Floe collects tensors", k,
                   ox_kind_name(res[k].kind));
      break;
    }
    OxVal acc = ox_val_from_parts(OX_SEQ, vars + 1 + 2 * k), grown;
    if ((rc = seq_insert(c, &acc, res[k].value, (FloeOutput){NULL, 0}, &grown)) != FLOE_OK) break;
    a->elem[k] = ox_shape(res[k].value);
    next[1 + 2 * k] = grown.value;
    next[2 + 2 * k] = grown.shapes;
  }
  floe__free(args);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_sequence_map(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                  int nin, FloeOutput *out, int nout) {
  (void)n;
  const Onnx__GraphProto *body = ox_graph_attr(c, "body");
  if (!body) return floe_status_code(c->st);
  if (nin < 1 || nout < 1 || (int)body->n_output != nout)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "SequenceMap takes a sequence and makes one "
                   "sequence per body output");
  int total = 1 + 2 * nout;
  OxVal *ins = floe__calloc((size_t)nin + 1, sizeof *ins);
  FloeOutput *vars = floe__calloc((size_t)total * 2, sizeof *vars), *res = vars + total;
  FloeShape *inv = floe__calloc((size_t)total + (size_t)nout, sizeof *inv), *elem = inv + total;
  floe_code rc = ins && vars && inv ? FLOE_OK : ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  for (int k = 0; rc == FLOE_OK && k < nin; k++) {
    if (!in[k].node) {
      rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is not given", k);
      break;
    }
    ins[k] = ox_val(c, in[k]);
    if (k == 0) rc = want_seq(c, &ins[0], 0);
    if (ins[k].kind & OX_OPT)
      rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is an optional", k);
  }
  vars[0] = ox_scalar_i64(c, 0);
  inv[0] = floe_shape_scalar();
  for (int k = 0; rc == FLOE_OK && k < nout; k++) {
    /* The output sequences start empty: their dtype is the body's declared output type. */
    FloeDType dt;
    FloeShape e;
    int kind = body->output[k]->type ? ox_type_kind(body->output[k]->type, &dt, &e) : -1;
    if (kind != OX_TENSOR || dt == FLOE_DTYPE_INVALID) {
      rc = ox_fail(c, FLOE_UNIMPLEMENTED, "body output %d has no declared tensor type (Floe "
                   "needs its dtype before building the loop)", k);
      break;
    }
    OxVal empty = seq_empty(c, dt);
    vars[1 + 2 * k] = empty.value;
    vars[2 + 2 * k] = empty.shapes;
    inv[1 + 2 * k] = floe_shape_make(1, (int64_t[]){FLOE_DIM_UNKNOWN});
    inv[2 + 2 * k] = floe_shape_make(2, (int64_t[]){FLOE_DIM_UNKNOWN, FLOE_DIM_UNKNOWN});
  }
  MapArg a = {c, ins, nin, nout, elem};
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.shape_invariants = inv;
  char name[512];
  snprintf(name, sizeof name, "%s/map", c->node_name);
  if (rc == FLOE_OK) rc = ox_check(c);
  if (rc == FLOE_OK) rc = floe_while_loop(c->g, name, map_cond, map_body, &a, vars, total, &o, res);
  for (int k = 0; rc == FLOE_OK && k < nout; k++)
    out[k] = seq_out(c, res[1 + 2 * k], res[2 + 2 * k], elem[k]);
  floe__free(ins);
  floe__free(vars);
  floe__free(inv);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

/* ---- optionals ---- */

static floe_code map_optional(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                              FloeOutput *out, int nout) {
  (void)nout;
  OxVal v;
  if (nin > 0 && in[0].node) {
    v = ox_val(c, in[0]);
    if (v.kind & OX_OPT) return ox_fail(c, FLOE_UNIMPLEMENTED, "an optional of an optional");
    v.kind |= OX_OPT;
    v.present = ox_scalar(c, FLOE_BOOL, 1);
  } else {
    /* Empty: the value parts are empty tensors of the type attribute's element dtype. */
    const Onnx__AttributeProto *a = ox_attr(n, "type");
    FloeDType dt;
    FloeShape elem;
    int kind = a && a->tp ? ox_type_kind(a->tp, &dt, &elem) : -1;
    if (kind < 0 || (kind & OX_OPT) || dt == FLOE_DTYPE_INVALID)
      return ox_fail(c, a && a->tp ? FLOE_UNIMPLEMENTED : FLOE_INVALID_ARGUMENT,
                     "an empty optional needs a 'type' attribute of a tensor or sequence type "
                     "Floe has");
    if (kind == OX_SEQ) {
      v = seq_empty(c, dt);
    } else {
      int64_t zero = 0;
      v = (OxVal){.kind = OX_TENSOR, .elem = floe_shape_unknown()};
      v.value = ox_const(c, floe_tensor_new(dt, 1, &zero, NULL));
    }
    v.kind |= OX_OPT;
    v.present = ox_scalar(c, FLOE_BOOL, 0);
  }
  out[0] = ox_val_set(c, &v);
  return ox_check(c);
}

static floe_code map_optional_has_element(OxCtx *c, const Onnx__NodeProto *n,
                                          const FloeOutput *in, int nin, FloeOutput *out,
                                          int nout) {
  (void)n, (void)nout;
  if (nin < 1 || !in[0].node) {
    out[0] = ox_scalar(c, FLOE_BOOL, 0); /* opset 18: no input, no element */
    return ox_check(c);
  }
  OxVal v = ox_val(c, in[0]);
  out[0] = v.kind & OX_OPT ? ox_identity(c, v.present) : ox_scalar(c, FLOE_BOOL, 1);
  return ox_check(c);
}

/* The value (an absent optional gives its empty placeholder tensors: Floe has no run-time
 * error op to raise ONNX's error with). */
static floe_code map_optional_get_element(OxCtx *c, const Onnx__NodeProto *n,
                                          const FloeOutput *in, int nin, FloeOutput *out,
                                          int nout) {
  (void)n, (void)nout;
  if (nin < 1 || !in[0].node)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "OptionalGetElement takes an optional");
  OxVal v = ox_val(c, in[0]);
  v.kind &= ~OX_OPT;
  v.present = (FloeOutput){NULL, 0};
  out[0] = ox_val_set(c, &v);
  return ox_check(c);
}

const OxOp floe__onnx_ops_seq[] = {
    {"", "SequenceEmpty", map_sequence_empty},
    {"", "SequenceConstruct", map_sequence_construct},
    {"", "SequenceInsert", map_sequence_insert},
    {"", "SequenceAt", map_sequence_at},
    {"", "SequenceErase", map_sequence_erase},
    {"", "SequenceLength", map_sequence_length},
    {"", "SplitToSequence", map_split_to_sequence},
    {"", "ConcatFromSequence", map_concat_from_sequence},
    {"", "SequenceMap", map_sequence_map},
    {"", "Optional", map_optional},
    {"", "OptionalHasElement", map_optional_has_element},
    {"", "OptionalGetElement", map_optional_get_element},
    {NULL, NULL, NULL},
};
