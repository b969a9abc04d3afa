/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_control.c - ONNX control flow onto Floe's in-graph control flow: If onto
 * floe_cond, Loop and Scan onto floe_while_loop. Subgraphs are imported by ox_subgraph
 * inside the builders' callbacks; names a subgraph uses from outside resolve to the
 * enclosing scope and the builders capture them (Switch for a branch, Enter for a loop).
 * Sequences and optionals cross a cond or loop as their parts (onnx_values.c). Scan outputs
 * (per-iteration values stacked) go through TensorArrays. */
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

/* x as a scalar (ONNX takes one-element tensors where Floe wants scalars). */
static FloeOutput as_scalar(OxCtx *c, FloeOutput x) {
  if (!x.node || ox_shape(x).rank == 0) return x;
  FloeNodeBuilder *b = ox_begin(c, "Reshape");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_const_i64(c, NULL, 0));
  return ox_finish(c, b);
}

/* v as a value of kind (a tensor or sequence becomes a present optional); FLOE_OK or an
 * error naming what. */
static floe_code coerce(OxCtx *c, OxVal *v, int kind, const char *what, int k) {
  if (v->kind == kind) return FLOE_OK;
  if (kind == (v->kind | OX_OPT)) {
    v->present = ox_scalar(c, FLOE_BOOL, 1);
    v->kind = kind;
    return ox_check(c);
  }
  return ox_fail(c, FLOE_INVALID_ARGUMENT, "%s %d is a%s %s where a%s %s is expected", what, k,
                 v->kind == OX_SEQ ? "" : "n", ox_kind_name(v->kind), kind == OX_SEQ ? "" : "n",
                 ox_kind_name(kind));
}

/* What two static shapes have in common (dims that differ unknown). */
static FloeShape shape_join(FloeShape a, FloeShape b) {
  if (a.rank != b.rank) return floe_shape_unknown();
  for (int d = 0; d < a.rank; d++)
    if (a.dims[d] != b.dims[d]) a.dims[d] = FLOE_DIM_UNKNOWN;
  return a;
}

/* A shape invariant for a loop variable entering as x: its rank, any dims. */
static FloeShape loose(FloeOutput x) {
  FloeShape s = ox_shape(x);
  for (int d = 0; d < s.rank; d++) s.dims[d] = FLOE_DIM_UNKNOWN;
  return s;
}

/* ------------------------------------------------------------------------------------ */
/* If */

typedef struct IfArg {
  OxCtx *c;
  int nout;
  const int *kinds;
  FloeShape *elem; /* per output: the sequences' element shapes, joined over both branches */
  int branches;
} IfArg;

static floe_code if_branch(FloeGraph *g, IfArg *a, const char *attr, FloeOutput *outs,
                           int nparts) {
  (void)g;
  OxCtx *c = a->c;
  OxVal *vals = floe__calloc((size_t)a->nout + 1, sizeof *vals);
  if (!vals) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  floe_code rc = ox_subgraph(c, attr, NULL, 0, vals, a->nout);
  int n = 0;
  for (int k = 0; rc == FLOE_OK && k < a->nout; k++) {
    if ((rc = coerce(c, &vals[k], a->kinds[k], "output", k)) != FLOE_OK) break;
    a->elem[k] = a->branches ? shape_join(a->elem[k], vals[k].elem) : vals[k].elem;
    n += ox_val_parts(&vals[k], outs + n);
  }
  if (rc == FLOE_OK && n != nparts) rc = ox_fail(c, FLOE_INTERNAL, "If: %d parts, not %d", n, nparts);
  a->branches++;
  floe__free(vals);
  return rc;
}

static floe_code if_then(FloeGraph *g, void *arg, const FloeOutput *ins, int nins,
                         FloeOutput *outs, int nparts) {
  (void)ins, (void)nins;
  return if_branch(g, arg, "then_branch", outs, nparts);
}

static floe_code if_else(FloeGraph *g, void *arg, const FloeOutput *ins, int nins,
                         FloeOutput *outs, int nparts) {
  (void)ins, (void)nins;
  return if_branch(g, arg, "else_branch", outs, nparts);
}

/* The kind of output k of a node with branches: what either branch declares (a tensor when
 * neither does). */
static int branch_kind(OxCtx *c, int k, floe_code *rc) {
  const char *attrs[2] = {"then_branch", "else_branch"};
  for (int b = 0; b < 2; b++) {
    const Onnx__GraphProto *gp = ox_graph_attr(c, attrs[b]);
    if (!gp) {
      *rc = floe_status_code(c->st);
      return -1;
    }
    if ((size_t)k >= gp->n_output) {
      *rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "the %s has %zu outputs; the node has more",
                    attrs[b], gp->n_output);
      return -1;
    }
    FloeDType dt;
    FloeShape elem;
    const Onnx__TypeProto *tp = gp->output[k]->type;
    int kind = tp ? ox_type_kind(tp, &dt, &elem) : OX_TENSOR;
    if (kind < 0) {
      *rc = ox_fail(c, FLOE_UNIMPLEMENTED, "output %d of the %s has a type Floe cannot carry",
                    k, attrs[b]);
      return -1;
    }
    if (kind != OX_TENSOR || (tp && tp->value_case)) return kind;
  }
  return OX_TENSOR;
}

static floe_code map_if(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                        FloeOutput *out, int nout) {
  (void)n;
  if (nin < 1 || !in[0].node) return ox_fail(c, FLOE_INVALID_ARGUMENT, "If needs a condition");
  if (nout < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "If has no outputs");
  if (ox_dtype(in[0]) != FLOE_BOOL)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the condition is %s, not bool",
                   floe_dtype_name(ox_dtype(in[0])));
  int *kinds = floe__calloc((size_t)nout, sizeof *kinds);
  FloeShape *elem = floe__calloc((size_t)nout, sizeof *elem);
  FloeOutput *parts = floe__calloc((size_t)nout * 3, sizeof *parts);
  floe_code rc = kinds && elem && parts ? FLOE_OK : ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  int nparts = 0;
  for (int k = 0; rc == FLOE_OK && k < nout; k++) {
    kinds[k] = branch_kind(c, k, &rc);
    if (rc == FLOE_OK) nparts += ox_kind_parts(kinds[k]);
  }
  IfArg a = {c, nout, kinds, elem, 0};
  FloeOutput pred = rc == FLOE_OK ? as_scalar(c, in[0]) : (FloeOutput){NULL, 0};
  if (rc == FLOE_OK && (rc = ox_check(c)) == FLOE_OK)
    rc = floe_cond(c->g, c->node_name, pred, NULL, 0, if_then, if_else, &a, parts, nparts);
  for (int k = 0, p = 0; rc == FLOE_OK && k < nout; k++) {
    OxVal v = ox_val_from_parts(kinds[k], parts + p);
    v.elem = elem[k];
    p += ox_kind_parts(kinds[k]);
    out[k] = ox_val_set(c, &v);
  }
  floe__free(kinds);
  floe__free(elem);
  floe__free(parts);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Loop and Scan: one while loop. Floe's loop variables are the iteration number (i64), the
 * condition (bool), the parts of the carried values, then one TensorArray flow per scan
 * output. */

typedef struct LoopArg {
  OxCtx *c;
  int scan;          /* 1: ONNX Scan, 0: ONNX Loop */
  FloeOutput trips;  /* i64 scalar bound on the iterations, or none */
  int nv;            /* carried values */
  const OxVal *init; /* their initial values (kinds) */
  int nparts;        /* their parts */
  int nscan_out;
  FloeOutput ta_size;      /* i32 scalar: the TensorArrays' size (0: they grow) */
  FloeNode **ta;           /* per scan output, made while the body is built */
  FloeShape *ta_elem;      /* per scan output: the element's static shape */
  const int *out_reverse;  /* Scan: per scan output, filled from the end */
  /* Scan inputs (Scan only). */
  int nx;
  const FloeOutput *xs;
  const int *x_axis, *x_reverse;
  FloeOutput last; /* trips - 1 */
} LoopArg;

static floe_code loop_cond(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                           FloeOutput *pred) {
  (void)g, (void)n;
  LoopArg *a = arg;
  *pred = vars[1];
  if (a->trips.node)
    *pred = ox_binary(a->c, "LogicalAnd", ox_binary(a->c, "Less", vars[0], a->trips), vars[1]);
  return ox_check(a->c);
}

/* The index iteration i reads or writes: i, or trips-1-i from the end. */
static FloeOutput step_index(LoopArg *a, FloeOutput i, int reverse) {
  return reverse ? ox_binary(a->c, "Sub", a->last, i) : i;
}

/* Element `index` of scan input k. */
static FloeOutput scan_element(LoopArg *a, int k, FloeOutput i) {
  FloeNodeBuilder *b = ox_begin(a->c, "Gather");
  floe_node_add_input(b, a->xs[k]);
  floe_node_add_input(b, step_index(a, i, a->x_reverse[k]));
  floe_node_set_attr_int(b, "axis", a->x_axis[k]);
  return ox_finish(a->c, b);
}

/* Writes v at index into scan output k's TensorArray (made now: its dtype is v's), giving
 * the next flow. The TensorArray belongs outside the loop: the loop's scan leaves it out
 * and it enters as a loop invariant. */
static FloeOutput scan_write(LoopArg *a, int k, FloeOutput index, FloeOutput v, FloeOutput flow,
                             FloeShape declared) {
  OxCtx *c = a->c;
  /* The element shape, from the graph or the body's declared type: with it, a loop that
   * runs no iteration still stacks [0, ...]. */
  FloeShape elem = ox_shape(v);
  if (elem.rank < 0) elem = declared;
  for (int d = 0; elem.rank == declared.rank && d < elem.rank; d++)
    if (elem.dims[d] < 0) elem.dims[d] = declared.dims[d];
  FloeNodeBuilder *b = ox_begin(c, "TensorArrayV3");
  floe_node_add_input(b, a->ta_size);
  floe_node_set_attr_type(b, "dtype", ox_dtype(v));
  floe_node_set_attr_shape(b, "element_shape", elem);
  floe_node_set_attr_bool(b, "dynamic_size", a->scan == 0);
  floe_node_set_attr_bool(b, "clear_after_read", false);
  FloeNode *ta = ox_finish_node(c, b);
  if (!ta || floe__cf_exclude(ta) != FLOE_OK) return (FloeOutput){NULL, 0};
  a->ta[k] = ta;
  a->ta_elem[k] = elem;
  b = ox_begin(c, "TensorArrayWriteV3");
  floe_node_add_input(b, floe_out(ta, 0));
  floe_node_add_input(b, ox_cast(c, index, FLOE_I32));
  floe_node_add_input(b, v);
  floe_node_add_input(b, flow);
  return ox_finish(c, b);
}

static floe_code loop_body(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                           FloeOutput *next) {
  (void)g, (void)n;
  LoopArg *a = arg;
  OxCtx *c = a->c;
  int nin = a->scan ? a->nv + a->nx : 2 + a->nv;
  int nout = a->scan ? a->nv + a->nscan_out : 1 + a->nv + a->nscan_out;
  OxVal *ins = floe__calloc((size_t)(nin + nout), sizeof *ins), *outs = ins + nin;
  if (!ins) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  int at = 0, p = 2;
  if (!a->scan) {
    ins[at++] = ox_val(c, vars[0]);
    ins[at++] = ox_val(c, vars[1]);
  }
  for (int k = 0; k < a->nv; k++) {
    ins[at++] = ox_val_from_parts(a->init[k].kind, vars + p);
    p += ox_kind_parts(a->init[k].kind);
  }
  for (int k = 0; a->scan && k < a->nx; k++) ins[at++] = ox_val(c, scan_element(a, k, vars[0]));
  floe_code rc = ox_check(c);
  if (rc == FLOE_OK) rc = ox_subgraph(c, "body", ins, nin, outs, nout);
  if (rc == FLOE_OK) {
    next[0] = ox_binary(c, "Add", vars[0], ox_scalar_i64(c, 1));
    next[1] = a->scan ? vars[1] : ox_identity(c, as_scalar(c, outs[0].value));
  }
  const OxVal *vo = a->scan ? outs : outs + 1;
  p = 2;
  for (int k = 0; rc == FLOE_OK && k < a->nv; k++) {
    OxVal v = vo[k];
    if ((rc = coerce(c, &v, a->init[k].kind, "loop-carried value", k)) != FLOE_OK) break;
    FloeOutput parts[3];
    int np = ox_val_parts(&v, parts);
    for (int j = 0; j < np; j++) next[p++] = ox_identity(c, parts[j]);
  }
  for (int k = 0; rc == FLOE_OK && k < a->nscan_out; k++) {
    const OxVal *s = &vo[a->nv + k];
    if (s->kind != OX_TENSOR) {
      rc = ox_fail(c, FLOE_UNIMPLEMENTED, "scan output %d is a %s; Floe stacks tensors only", k,
                   ox_kind_name(s->kind));
      break;
    }
    FloeOutput index = step_index(a, vars[0], a->out_reverse ? a->out_reverse[k] : 0);
    const Onnx__GraphProto *gp = ox_graph_attr(c, "body");
    const Onnx__ValueInfoProto *vi = gp->output[nout - a->nscan_out + k];
    FloeDType dt;
    FloeShape declared = floe_shape_unknown();
    if (vi->type && ox_type_kind(vi->type, &dt, &declared) != OX_TENSOR)
      declared = floe_shape_unknown();
    next[p + k] = scan_write(a, k, index, s->value, vars[p + k], declared);
  }
  floe__free(ins);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

/* Builds the loop; results get the carried values and the stacked scan outputs (axis 0). */
static floe_code build_loop(LoopArg *a, FloeOutput cond, OxVal *results, FloeOutput *stacked) {
  OxCtx *c = a->c;
  int total = 2 + a->nparts + a->nscan_out;
  FloeOutput *vars = floe__calloc((size_t)total * 2, sizeof *vars), *res = vars + total;
  FloeShape *inv = floe__calloc((size_t)total, sizeof *inv);
  a->ta = floe__calloc((size_t)a->nscan_out + 1, sizeof *a->ta);
  a->ta_elem = floe__calloc((size_t)a->nscan_out + 1, sizeof *a->ta_elem);
  if (!vars || !inv || !a->ta || !a->ta_elem) {
    floe__free(vars), floe__free(inv), floe__free(a->ta), floe__free(a->ta_elem);
    return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  }
  vars[0] = ox_scalar_i64(c, 0);
  vars[1] = cond;
  int p = 2;
  for (int k = 0; k < a->nv; k++) p += ox_val_parts(&a->init[k], vars + p);
  for (int k = 0; k < a->nscan_out; k++) vars[p + k] = ox_scalar(c, FLOE_F32, 0);
  /* Carried values may change shape from one iteration to the next (not rank). */
  for (int k = 0; k < total; k++) inv[k] = loose(vars[k]);
  FloeWhileOptions o;
  floe_while_options_init(&o);
  o.shape_invariants = inv;
  char name[512];
  snprintf(name, sizeof name, "%s/loop", c->node_name);
  int excluded = floe__cf_exclude_count();
  floe_code rc = ox_check(c);
  if (rc == FLOE_OK) rc = floe_while_loop(c->g, name, loop_cond, loop_body, a, vars, total, &o, res);
  floe__cf_exclude_truncate(excluded);
  p = 2;
  for (int k = 0; rc == FLOE_OK && k < a->nv; k++) {
    results[k] = ox_val_from_parts(a->init[k].kind, res + p);
    p += ox_kind_parts(a->init[k].kind);
  }
  for (int k = 0; rc == FLOE_OK && k < a->nscan_out; k++) {
    FloeNodeBuilder *b = ox_begin(c, "TensorArrayStackV3");
    floe_node_add_input(b, floe_out(a->ta[k], 0));
    floe_node_add_input(b, res[p + k]);
    floe_node_set_attr_type(b, "dtype", floe_node_attr_type(a->ta[k], "dtype"));
    floe_node_set_attr_shape(b, "element_shape", a->ta_elem[k]);
    stacked[k] = ox_finish(c, b);
  }
  floe__free(vars);
  floe__free(inv);
  floe__free(a->ta);
  floe__free(a->ta_elem);
  a->ta = NULL;
  a->ta_elem = NULL;
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_loop(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                          FloeOutput *out, int nout) {
  (void)n;
  if (nin < 2) return ox_fail(c, FLOE_INVALID_ARGUMENT, "Loop takes a trip count and a condition");
  const Onnx__GraphProto *body = ox_graph_attr(c, "body");
  if (!body) return floe_status_code(c->st);
  int nv = nin - 2, nscan = (int)body->n_output - 1 - nv;
  if (nscan < 0 || nout != nv + nscan)
    return ox_fail(c, FLOE_INVALID_ARGUMENT,
                   "the body has %zu outputs and the node %d; with %d loop-carried values "
                   "they must be 1 + %d + the scan outputs and %d + the scan outputs",
                   body->n_output, nout, nv, nv, nv);
  LoopArg a = {.c = c, .nv = nv, .nscan_out = nscan};
  if (in[0].node) {
    if (ox_dtype(in[0]) != FLOE_I64)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "the trip count is %s, not int64",
                     floe_dtype_name(ox_dtype(in[0])));
    a.trips = as_scalar(c, in[0]);
  }
  FloeOutput cond = in[1].node ? as_scalar(c, in[1]) : ox_scalar(c, FLOE_BOOL, 1);
  if (in[1].node && ox_dtype(in[1]) != FLOE_BOOL)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the condition is %s, not bool",
                   floe_dtype_name(ox_dtype(in[1])));
  OxVal *init = floe__calloc((size_t)nv + 1, sizeof *init);
  FloeOutput *stacked = floe__calloc((size_t)nscan + 1, sizeof *stacked);
  OxVal *results = floe__calloc((size_t)nv + 1, sizeof *results);
  floe_code rc = init && stacked && results ? FLOE_OK : ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  for (int k = 0; rc == FLOE_OK && k < nv; k++) {
    if (!in[2 + k].node) {
      rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "loop-carried value %d is not given", k);
      break;
    }
    init[k] = ox_val(c, in[2 + k]);
    a.nparts += ox_kind_parts(init[k].kind);
  }
  a.init = init;
  if (rc == FLOE_OK) a.ta_size = ox_scalar_i32(c, 0);
  if (rc == FLOE_OK) rc = build_loop(&a, cond, results, stacked);
  for (int k = 0; rc == FLOE_OK && k < nv; k++) out[k] = ox_val_set(c, &results[k]);
  for (int k = 0; rc == FLOE_OK && k < nscan; k++) out[nv + k] = stacked[k];
  floe__free(init);
  floe__free(stacked);
  floe__free(results);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Scan (opset 9 on: no batch axis; opset 8: a batch axis first, sequence_lens) */

/* Attribute `name` as n flags/axes (absent: zeros); axes normalised against ranks. */
static floe_code scan_list(OxCtx *c, const Onnx__NodeProto *n, const char *name, int count,
                           const int *ranks, int *v) {
  const int64_t *a;
  int len = ox_ints(n, name, &a);
  if (len >= 0 && len != count)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%s has %d values for %d scan %s", name, len,
                   count, strstr(name, "input") ? "inputs" : "outputs");
  for (int k = 0; k < count; k++) {
    int64_t x = len > 0 ? a[k] : 0;
    if (ranks) {
      floe_code rc = ox_axis(c, x, ranks[k], name, &v[k]);
      if (rc != FLOE_OK) return rc;
    } else {
      if (x != 0 && x != 1)
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "%s[%d] is %lld; directions are 0 or 1", name,
                       k, (long long)x);
      v[k] = (int)x;
    }
  }
  return FLOE_OK;
}

/* Moves axis 0 of x (rank r) to position axis. */
static FloeOutput move_first_to(OxCtx *c, FloeOutput x, int axis, int r) {
  if (axis == 0) return x;
  int64_t perm[FLOE_MAX_DIMS];
  for (int d = 0, s = 1; d < r; d++) perm[d] = d == axis ? 0 : s++;
  FloeNodeBuilder *b = ox_begin(c, "Transpose");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_const_i64(c, perm, r));
  return ox_finish(c, b);
}

/* One scan over states (nv) and scan inputs xs (nx) with the given axes and directions. */
static floe_code scan_once(OxCtx *c, const Onnx__NodeProto *n, const OxVal *states, int nv,
                           const FloeOutput *xs, int nx, const int *x_axis, const int *x_rev,
                           int nscan_out, OxVal *results, FloeOutput *outs) {
  LoopArg a = {.c = c, .scan = 1, .nv = nv, .init = states, .nscan_out = nscan_out, .nx = nx,
               .xs = xs, .x_axis = x_axis, .x_reverse = x_rev};
  for (int k = 0; k < nv; k++) a.nparts += ox_kind_parts(states[k].kind);
  int *out_rev = floe__calloc((size_t)nscan_out + 1, sizeof *out_rev);
  if (!out_rev) return ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  floe_code rc = c->opset >= 9 ? scan_list(c, n, "scan_output_directions", nscan_out, NULL, out_rev)
                               : FLOE_OK;
  a.out_reverse = out_rev;
  /* The number of iterations: scan input 0's length along its axis. */
  FloeNodeBuilder *b = ox_begin(c, "Shape");
  floe_node_add_input(b, xs[0]);
  floe_node_set_attr_type(b, "out_type", FLOE_I64);
  FloeOutput shape = ox_finish(c, b);
  b = ox_begin(c, "Gather");
  floe_node_add_input(b, shape);
  floe_node_add_input(b, ox_scalar_i64(c, x_axis[0]));
  a.trips = ox_finish(c, b);
  a.last = ox_binary(c, "Sub", a.trips, ox_scalar_i64(c, 1));
  a.ta_size = ox_cast(c, a.trips, FLOE_I32);
  if (rc == FLOE_OK) rc = ox_check(c);
  if (rc == FLOE_OK)
    rc = build_loop(&a, ox_scalar(c, FLOE_BOOL, 1), results, outs);
  /* Scan outputs stacked along axis 0, then moved to scan_output_axes. */
  const int64_t *ax;
  int nax = c->opset >= 9 ? ox_ints(n, "scan_output_axes", &ax) : -1;
  if (rc == FLOE_OK && nax >= 0 && nax != nscan_out)
    rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "scan_output_axes has %d values for %d scan outputs",
                 nax, nscan_out);
  for (int k = 0; rc == FLOE_OK && nax > 0 && k < nscan_out; k++) {
    int r = ax[k] ? ox_rank(c, outs[k], "a scan output") : 1, axis;
    if (r < 0)
      rc = floe_status_code(c->st);
    else if ((rc = ox_axis(c, ax[k], r, "scan_output_axes", &axis)) == FLOE_OK)
      outs[k] = move_first_to(c, outs[k], axis, r);
  }
  floe__free(out_rev);
  return rc == FLOE_OK ? ox_check(c) : rc;
}

static floe_code map_scan(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                          FloeOutput *out, int nout) {
  int64_t nx64 = ox_int(n, "num_scan_inputs", -1);
  int batched = c->opset < 9, first = batched ? 1 : 0; /* opset 8: sequence_lens first */
  if (nx64 < 1 || nx64 > nin - first)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "num_scan_inputs is %lld; the node has %d inputs",
                   (long long)nx64, nin);
  int nx = (int)nx64, nv = nin - first - nx, nscan_out = nout - nv;
  if (nscan_out < 0)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%d outputs for %d states", nout, nv);
  if (batched && in[0].node)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "Scan-8's sequence_lens (every sequence is taken whole)");
  OxVal *states = floe__calloc((size_t)nv + 1, sizeof *states);
  OxVal *results = floe__calloc((size_t)nv + 1, sizeof *results);
  FloeOutput *xs = floe__calloc((size_t)nx + 1, sizeof *xs);
  FloeOutput *outs = floe__calloc((size_t)nscan_out + 1, sizeof *outs);
  int *ranks = floe__calloc((size_t)nx + 1, sizeof *ranks);
  int *axis = floe__calloc((size_t)nx + 1, sizeof *axis);
  int *rev = floe__calloc((size_t)nx + 1, sizeof *rev);
  floe_code rc = states && results && xs && outs && ranks && axis && rev
                     ? FLOE_OK
                     : ox_fail(c, FLOE_NO_MEMORY, "out of memory");
  for (int k = 0; rc == FLOE_OK && k < nv + nx; k++)
    if (!in[first + k].node) rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is not given", first + k);
  for (int k = 0; rc == FLOE_OK && k < nx; k++) {
    ranks[k] = ox_rank(c, in[first + nv + k], "a scan input");
    if (ranks[k] < 0) rc = floe_status_code(c->st);
  }
  if (rc == FLOE_OK && !batched) rc = scan_list(c, n, "scan_input_axes", nx, ranks, axis);
  if (rc == FLOE_OK)
    rc = scan_list(c, n, batched ? "directions" : "scan_input_directions", nx, NULL, rev);
  if (rc == FLOE_OK && !batched) {
    for (int k = 0; k < nv; k++) states[k] = ox_val(c, in[k]);
    for (int k = 0; k < nx; k++) xs[k] = in[nv + k];
    rc = scan_once(c, n, states, nv, xs, nx, axis, rev, nscan_out, results, outs);
    for (int k = 0; rc == FLOE_OK && k < nv; k++) out[k] = ox_val_set(c, &results[k]);
    for (int k = 0; rc == FLOE_OK && k < nscan_out; k++) out[nv + k] = outs[k];
  } else if (rc == FLOE_OK) {
    /* Opset 8: one scan per batch item (the batch size must be known), results stacked. */
    int64_t batch = ox_shape(in[first + nv]).rank > 0 ? ox_shape(in[first + nv]).dims[0] : -1;
    if (batch < 1 || batch > 1024)
      rc = ox_fail(c, FLOE_UNIMPLEMENTED, "Scan-8 needs its batch size known when the graph "
                   "is built (at most 1024)");
    FloeOutput *acc = floe__calloc((size_t)(nv + nscan_out) * (size_t)(batch > 0 ? batch : 1) + 1,
                                   sizeof *acc);
    if (rc == FLOE_OK && !acc) rc = ox_fail(c, FLOE_NO_MEMORY, "out of memory");
    for (int k = 0; k < nx; k++) axis[k] = 0; /* time: axis 1 of the batch, 0 of one item */
    for (int64_t bi = 0; rc == FLOE_OK && bi < batch; bi++) {
      for (int k = 0; k < nv + nx; k++) {
        FloeNodeBuilder *b = ox_begin(c, "Gather");
        floe_node_add_input(b, in[first + k]);
        floe_node_add_input(b, ox_scalar_i64(c, bi));
        FloeOutput item = ox_finish(c, b);
        if (k < nv)
          states[k] = ox_val(c, item);
        else
          xs[k - nv] = item;
      }
      rc = scan_once(c, n, states, nv, xs, nx, axis, rev, nscan_out, results, outs);
      for (int k = 0; rc == FLOE_OK && k < nv + nscan_out; k++) {
        FloeOutput r = k < nv ? results[k].value : outs[k - nv];
        if (k < nv && results[k].kind != OX_TENSOR)
          rc = ox_fail(c, FLOE_UNIMPLEMENTED, "Scan-8 state %d is a %s", k,
                       ox_kind_name(results[k].kind));
        FloeNodeBuilder *b = ox_begin(c, "ExpandDims");
        floe_node_add_input(b, r);
        floe_node_set_attr_int(b, "axis", 0);
        acc[(size_t)k * (size_t)batch + (size_t)bi] = ox_finish(c, b);
      }
    }
    for (int k = 0; rc == FLOE_OK && k < nv + nscan_out; k++) {
      FloeNodeBuilder *b = ox_begin(c, "Concat");
      floe_node_add_input_list(b, acc + (size_t)k * (size_t)batch, (int)batch);
      floe_node_add_input(b, ox_scalar_i32(c, 0));
      out[k] = ox_finish(c, b);
    }
    floe__free(acc);
  }
  floe__free(states);
  floe__free(results);
  floe__free(xs);
  floe__free(outs);
  floe__free(ranks);
  floe__free(axis);
  floe__free(rev);
  return rc;
}

const OxOp floe__onnx_ops_control[] = {
    {"", "If", map_if},
    {"", "Loop", map_loop},
    {"", "Scan", map_scan},
    {NULL, NULL, NULL},
};
