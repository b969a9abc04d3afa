/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_layout.c - runs an imported model's NCHW convolutions and pools in NHWC.
 *
 * ONNX models are NCHW; the CPU plugin's oneDNN primitives take NHWC data as it is but
 * reorder NCHW data on every call, in and out. So each NCHW (CHANNELS_FIRST) 2-D Conv / Pool
 * / Conv2D / MaxPool / AvgPool / BiasAdd becomes Transpose(to NHWC) -> the op in NHWC -> Transpose(to NCHW), and the
 * transposes are then sunk through the layout-agnostic ops between them (elementwise ops,
 * with their other operand of rank 1 to 4 permuted to match, Pad with constant paddings, reductions keeping dims, Concat of inputs that are all
 * transposed) until inverse pairs meet and cancel.
 * A ResNet is left with one transpose at its input and one before its classifier. Every
 * rewrite adds new nodes and re-points consumers; the old nodes are dropped with the other
 * dead ones at the end of the import. */
#include <string.h>

#include "onnx_internal.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};

typedef struct Pass {
  FloeGraph *g;
  FloeStatus *st;
  bool *dead;  /* by node id: rewritten, no longer used */
  int cap;     /* of dead */
  FloeNode *const *keep; /* model inputs and outputs: never rewritten */
  int num_keep;
  int first; /* nodes before it are the caller's: never rewritten */
  int counter;
} Pass;

static bool kept(const Pass *p, const FloeNode *n) {
  for (int i = 0; i < p->num_keep; i++)
    if (p->keep[i] == n) return true;
  return false;
}

static bool op_is(const FloeNode *n, const char *op) { return !strcmp(n->op->name, op); }

/* perm when x is the output of a Transpose by a constant 4-permutation. */
static bool transpose_perm(FloeOutput x, int64_t *perm, FloeOutput *from) {
  if (!x.node || !op_is(x.node, "Transpose") || x.node->num_inputs != 2) return false;
  if (ox_const_ints(x.node->inputs[1], perm, 4) != 4) return false;
  *from = x.node->inputs[0];
  return true;
}

static bool perm_is(const int64_t *p, const int64_t *q) { return !memcmp(p, q, 4 * sizeof *p); }

static char *fresh_name(Pass *p, const FloeNode *n, const char *what) {
  for (;;) {
    char *s = floe__asprintf("%s/%s_%d", n->name, what, p->counter++);
    if (!s || !floe_graph_find(p->g, s)) return s;
    floe__free(s);
  }
}

/* A copy of n with inputs ins (same count) and attrs (copied from n when NULL). */
static FloeNode *copy_node(Pass *p, const FloeNode *n, const FloeOutput *ins, const FloeAttrs *attrs) {
  int *sizes = floe__calloc((size_t)n->op->num_inputs + 1, sizeof *sizes);
  char *name = fresh_name(p, n, "nhwc");
  FloeNode *c = NULL;
  if (sizes && name) {
    for (int i = 0; i < n->num_inputs; i++) sizes[n->input_arg[i]]++;
    FloeNodeSpec spec = {.op = n->op->name, .name = name, .device = n->device, .inputs = ins,
                         .num_inputs = n->num_inputs, .list_sizes = sizes,
                         .num_lists = n->op->num_inputs, .control = n->control,
                         .num_control = n->num_control, .attrs = attrs ? attrs : &n->attrs};
    c = floe__graph_add_node(p->g, &spec, p->st);
  }
  floe__free(sizes);
  floe__free(name);
  return c;
}

/* A constant 1-D i64 tensor of v (n entries), named after n. */
static FloeOutput const_i64(Pass *p, const FloeNode *near, const char *what, const int64_t *v,
                            int n) {
  int64_t len = n;
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, &len, p->st);
  char *name = t ? fresh_name(p, near, what) : NULL;
  FloeOutput y = {NULL, 0};
  if (name) {
    if (n) memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
    y = floe_const(p->g, name, t);
  }
  floe_tensor_release(t);
  floe__free(name);
  return y;
}

/* Transpose(x, perm) of rank r (perm's entries). */
static FloeOutput transpose_n(Pass *p, const FloeNode *near, FloeOutput x, const int64_t *perm,
                              int r) {
  FloeOutput pc = const_i64(p, near, "perm", perm, r);
  char *tn = pc.node ? fresh_name(p, near, "transpose") : NULL;
  FloeOutput y = {NULL, 0};
  if (tn) {
    FloeNodeBuilder *b = floe_node_begin(p->g, "Transpose", tn);
    floe_node_add_input(b, x);
    floe_node_add_input(b, pc);
    FloeNode *n = floe_node_finish(b);
    if (n) y = floe_out(n, 0);
  }
  floe__free(tn);
  return y;
}

static FloeOutput transpose(Pass *p, const FloeNode *near, FloeOutput x, const int64_t *perm) {
  return transpose_n(p, near, x, perm, 4);
}

/* The rank of the permutation when x is the output of a Transpose by a constant one (perm
 * filled, *from its input), else 0. */
static int transpose_perm_any(FloeOutput x, int64_t *perm, FloeOutput *from) {
  if (!x.node || !op_is(x.node, "Transpose") || x.node->num_inputs != 2 || x.index != 0)
    return 0;
  int r = ox_const_ints(x.node->inputs[1], perm, FLOE_MAX_DIMS);
  if (r < 1) return 0;
  *from = x.node->inputs[0];
  return r;
}

static bool identity_perm(const int64_t *p, int r) {
  for (int i = 0; i < r; i++)
    if (p[i] != i) return false;
  return true;
}

/* Every live use of (n, 0) now reads v instead; n is dead afterwards. */
static floe_code replace_uses(Pass *p, FloeNode *n, FloeOutput v) {
  for (int i = 0; i < p->g->num_nodes; i++) {
    FloeNode *u = p->g->nodes[i];
    if (u == v.node || (u->id < p->cap && p->dead[u->id])) continue;
    for (int j = 0; j < u->num_inputs; j++)
      if (u->inputs[j].node == n && u->inputs[j].index == 0) {
        floe_code rc = floe__node_set_input(u, j, v, p->st);
        if (rc != FLOE_OK) return rc;
      }
  }
  if (n->id < p->cap) p->dead[n->id] = true;
  return FLOE_OK;
}

static bool grow_dead(Pass *p) {
  if (p->g->num_nodes <= p->cap) return true;
  int cap = p->g->num_nodes * 2;
  bool *d = floe__realloc(p->dead, (size_t)cap * sizeof *d);
  if (!d) return false;
  memset(d + p->cap, 0, (size_t)(cap - p->cap) * sizeof *d);
  p->dead = d;
  p->cap = cap;
  return true;
}

/* Attributes of n for NHWC: data_format, and 4-entry lists (strides, ksize, dilations) or
 * 8-entry lists (explicit paddings, a pair per dim) permuted from NCHW order. */
static floe_code nhwc_attrs(Pass *p, const FloeNode *n, FloeAttrs *out) {
  floe__attrs_init(out);
  floe_code rc = floe__attrs_copy(out, &n->attrs, p->st);
  for (int i = 0; rc == FLOE_OK && i < out->n; i++) {
    FloeAttrValue *v = &out->values[i];
    if (!strcmp(out->names[i], "data_format")) {
      const char *last = !strcmp(v->u.s, "CHANNELS_FIRST") ? "CHANNELS_LAST" : "NHWC";
      FloeAttrValue s = {.kind = FLOE_ATTR_STRING, .u.s = floe__strdup(last)};
      if (!s.u.s) return floe_status_set(p->st, FLOE_NO_MEMORY, "out of memory");
      rc = floe__attrs_set(out, "data_format", &s, p->st);
    } else if (v->kind == FLOE_ATTR_INT_LIST && (v->u.ilist.n == 4 || v->u.ilist.n == 8)) {
      int64_t old[8];
      size_t k = v->u.ilist.n / 4;
      memcpy(old, v->u.ilist.v, v->u.ilist.n * sizeof *old);
      for (int d = 0; d < 4; d++)
        for (size_t e = 0; e < k; e++) v->u.ilist.v[d * k + e] = old[TO_NHWC[d] * k + e];
    }
  }
  return rc;
}

static bool layout_op(const FloeNode *n) {
  /* Conv and Pool are the N-d ops (CHANNELS_FIRST / CHANNELS_LAST); the rest say NCHW. */
  static const char *const ops[] = {"Conv2D", "MaxPool", "AvgPool", "BiasAdd",
                                    "_FusedConv2DBiasRelu", "Conv", "Pool"};
  const char *df = floe__node_attr_str(n, "data_format");
  if (!df || (strcmp(df, "NCHW") && strcmp(df, "CHANNELS_FIRST")) || n->num_outputs != 1 ||
      n->num_inputs < 1)
    return false;
  if (n->inputs[0].node->out_shapes[n->inputs[0].index].rank != 4) return false;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (op_is(n, ops[i])) return true;
  return false;
}

static bool unary_op(const FloeNode *n) {
  static const char *const ops[] = {"Relu", "Relu6", "Sigmoid", "Tanh", "Elu", "LeakyRelu",
                                    "Neg", "Abs", "Exp", "Log", "Sqrt", "Square", "Cast",
                                    "Softplus", "Gelu", "Floor", "Sign"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (op_is(n, ops[i])) return n->num_inputs == 1 && n->num_outputs == 1;
  return false;
}

static bool binary_op(const FloeNode *n) {
  static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(ops); i++)
    if (op_is(n, ops[i])) return n->num_inputs == 2;
  return false;
}

static bool scalar(FloeOutput x) {
  FloeShape s = x.node->out_shapes[x.index];
  if (s.rank < 0) return false;
  for (int i = 0; i < s.rank; i++)
    if (s.dims[i] != 1) return false;
  return true;
}

/* A constant scalar of x's integer dtype holding v, named after n. */
static FloeOutput int_scalar_like(Pass *p, const FloeNode *n, FloeOutput x, int64_t v) {
  const FloeTensor *like = ox_const_value(x);
  FloeDType dt = like ? floe_tensor_dtype(like) : FLOE_I64;
  FloeTensor *t = floe_tensor_new(dt, 0, NULL, p->st);
  FloeOutput y = {NULL, 0};
  char *name = fresh_name(p, n, "axis");
  if (t && name) {
    if (dt == FLOE_I32)
      *(int32_t *)floe_tensor_data(t) = (int32_t)v;
    else
      *(int64_t *)floe_tensor_data(t) = v;
    y = floe_const(p->g, name, t);
  }
  floe_tensor_release(t);
  floe__free(name);
  return y;
}

/* For Op(T_nchw(x), k) with k of rank 1 to 4 (a batch norm's [C, 1, 1]): the operand for
 * Op(x, .) in NHWC, k padded to rank 4 with its dims in NHWC order, so it broadcasts
 * against x as k did against T_nchw(x). A constant's values are permuted here; a computed k
 * of a known shape whose dims other than 1 keep their order ([C, 1, 1]: one) is only
 * reshaped. Else an invalid output. */
static FloeOutput nhwc_operand(Pass *p, const FloeNode *n, FloeOutput k) {
  FloeOutput none = {NULL, 0};
  const FloeTensor *t = ox_const_value(k);
  FloeShape ks = k.node->out_shapes[k.index];
  int r = ks.rank;
  size_t es = floe_dtype_size(k.node->out_dtypes[k.index]);
  if (r < 1 || r > 4 || es == 0) return none;
  int64_t d[4] = {1, 1, 1, 1}, o[4];
  for (int i = 0; i < r; i++) d[4 - r + i] = ks.dims[i];
  for (int i = 0; i < 4; i++) {
    if (d[i] < 0) return none;
    o[i] = d[TO_NHWC[i]];
  }
  if (!t) {
    int last = -1; /* a transpose that only moves dims of 1 is a reshape */
    for (int i = 0; i < 4; i++)
      if (o[i] != 1) {
        if (TO_NHWC[i] < last) return none;
        last = (int)TO_NHWC[i];
      }
    int64_t four = 4;
    FloeTensor *shape = floe_tensor_new(FLOE_I64, 1, &four, p->st);
    char *sn = shape ? fresh_name(p, n, "nhwc_shape") : NULL;
    char *rn = sn ? fresh_name(p, n, "nhwc_reshape") : NULL;
    FloeOutput y = none;
    if (rn) {
      memcpy(floe_tensor_data(shape), o, sizeof o);
      FloeNodeBuilder *b = floe_node_begin(p->g, "Reshape", rn);
      floe_node_add_input(b, k);
      floe_node_add_input(b, floe_const(p->g, sn, shape));
      FloeNode *rs = floe_node_finish(b);
      if (rs) y = floe_out(rs, 0);
    }
    floe_tensor_release(shape);
    floe__free(sn);
    floe__free(rn);
    return y;
  }
  FloeTensor *q = floe_tensor_new(floe_tensor_dtype(t), 4, o, p->st);
  char *name = q ? fresh_name(p, n, "nhwc_const") : NULL;
  if (!name) {
    floe_tensor_release(q);
    return none;
  }
  const char *src = floe_tensor_data(t);
  char *dst = floe_tensor_data(q);
  int64_t j = 0; /* out[a][b][c][e] = in at index a, e, b, c of d (NCHW order) */
  for (int64_t a = 0; a < o[0]; a++)
    for (int64_t b = 0; b < o[1]; b++)
      for (int64_t c = 0; c < o[2]; c++)
        for (int64_t e = 0; e < o[3]; e++, j++)
          memcpy(dst + (size_t)j * es, src + (size_t)(((a * d[1] + e) * d[2] + b) * d[3] + c) * es,
                 es);
  FloeOutput y = floe_const(p->g, name, q);
  floe_tensor_release(q);
  floe__free(name);
  return y;
}

/* A Reshape of T(x, perm) (rank r) to out (rank ro; one entry may be -1), xs x's shape. The
 * reshape splits or merges groups of the logical dims; when each group's dims (those not 1)
 * follow each other in x in the group's order (dims of 1 between them do not matter), the
 * reshape is done on x and a transpose follows it: *phys (rank returned) is x's new shape
 * and q that transpose. When a group's dims only come in another order, -2 is returned and
 * z (rank r) is a transpose of x that puts them in order. -1: neither. */
static int reshape_through(const int64_t *perm, int r, FloeShape xs, const int64_t *out, int ro,
                           int64_t *phys, int64_t *q, int64_t *z) {
  int64_t in[FLOE_MAX_DIMS];
  if (xs.rank != r || r > FLOE_MAX_DIMS || ro > FLOE_MAX_DIMS) return -1;
  for (int k = 0; k < r; k++) in[k] = xs.dims[perm[k]];
  /* Groups g: logical input dims [gin[g], gin[g+1]) <-> output dims [gout[g], gout[g+1]). */
  int gin[FLOE_MAX_DIMS + 2], gout[FLOE_MAX_DIMS + 2], ng = 0, i = 0, o = 0;
  while (i < r || o < ro) {
    if (ng > FLOE_MAX_DIMS) return -1;
    gin[ng] = i;
    gout[ng] = o;
    if (i < r && o < ro && (in[i] < 0 || out[o] < 0)) {
      if (in[i] >= 0 || out[o] >= 0) return -1; /* an unknown dim pairs with the -1 */
      i++, o++;
    } else {
      int64_t a = i < r ? in[i++] : 1, b = o < ro ? out[o++] : 1;
      while (a != b) {
        if (a < b && i < r && in[i] >= 0) a *= in[i++];
        else if (b < a && o < ro && out[o] >= 0) b *= out[o++];
        else return -1;
      }
    }
    ng++;
  }
  gin[ng] = r;
  gout[ng] = ro;
  int group[FLOE_MAX_DIMS], inv[FLOE_MAX_DIMS], nz[FLOE_MAX_DIMS], count = 0;
  for (int g = 0; g < ng; g++)
    for (int k = gin[g]; k < gin[g + 1]; k++) group[k] = g;
  for (int k = 0; k < r; k++) inv[perm[k]] = k;
  for (int d = 0; d < r; d++) nz[d] = xs.dims[d] == 1 ? -1 : count++; /* place among non-1s */
  bool ordered = true;
  for (int g = 0; g < ng; g++) {
    int lo = count, hi = -1, m = 0, last = -1;
    for (int k = gin[g]; k < gin[g + 1]; k++) {
      int at = nz[perm[k]];
      if (at < 0) continue;
      lo = at < lo ? at : lo;
      hi = at > hi ? at : hi;
      if (at < last) ordered = false;
      last = at;
      m++;
    }
    if (m && hi - lo + 1 != m) return -1; /* another group's dims among them */
  }
  if (!ordered) {
    /* z: in the places a group's non-1 dims hold in x, those dims in the group's order */
    for (int d = 0; d < r; d++) z[d] = d;
    for (int g = 0; g < ng; g++) {
      int places[FLOE_MAX_DIMS], np = 0, m = 0;
      for (int d = 0; d < r; d++)
        if (nz[d] >= 0 && group[inv[d]] == g) places[np++] = d;
      for (int k = gin[g]; k < gin[g + 1]; k++)
        if (nz[perm[k]] >= 0) z[places[m++]] = perm[k];
    }
    return -2;
  }
  /* x's non-1 dims in order, each group's output dims where its first one was; groups of
   * only 1s after them (their place does not change the memory) */
  int at[FLOE_MAX_DIMS + 1], np = 0;
  for (int g = 0; g < ng; g++) at[g] = -1;
  for (int d = 0; d < r; d++) {
    if (nz[d] < 0) continue;
    int g = group[inv[d]];
    if (at[g] >= 0) continue;
    at[g] = np;
    for (int k = gout[g]; k < gout[g + 1]; k++) phys[np++] = out[k];
  }
  for (int g = 0; g < ng; g++)
    if (at[g] < 0) {
      at[g] = np;
      for (int k = gout[g]; k < gout[g + 1]; k++) phys[np++] = out[k];
    }
  if (np != ro) return -1;
  for (int g = 0; g < ng; g++)
    for (int k = gout[g]; k < gout[g + 1]; k++) q[k] = at[g] + (k - gout[g]);
  return np;
}

static int64_t attr_int_or_0(const FloeNode *n, const char *name) {
  const FloeAttrValue *v = floe__node_attr(n, name, FLOE_ATTR_INT);
  return v ? v->u.i : 0;
}

/* Rules for transposes of any rank (rewrite): Transpose(Transpose(x, p), p2) composed into
 * one (or none, when the two cancel); StridedSlice(T(x, p)) sliced on x with its bounds and
 * masks permuted, then T; and Reshape(T(x, p)) to a constant shape done on x when the dims
 * it splits or merges lie in x in order (reshape_through), else, when only their order
 * differs and what is left is the NCHW view of NHWC data, after one transpose of x that
 * orders them (a channel shuffle: the transpose of the shuffle itself, the NCHW view sinking
 * on). 1 done, 0 none, -1 error. */
static int rewrite_nd(Pass *p, FloeNode *n) {
  int64_t perm[FLOE_MAX_DIMS], perm2[FLOE_MAX_DIMS];
  FloeOutput a, b;
  int r = n->num_inputs >= 1 ? transpose_perm_any(n->inputs[0], perm, &a) : 0;
  if (r < 1) return 0;
  FloeOutput y = {NULL, 0};
  if (op_is(n, "Transpose")) {
    int r2 = transpose_perm_any(floe_out(n, 0), perm2, &b);
    if (r2 != r) return 0;
    int64_t comp[FLOE_MAX_DIMS];
    for (int i = 0; i < r; i++) comp[i] = perm[perm2[i]];
    y = identity_perm(comp, r) ? a : transpose_n(p, n, a, comp, r);
    if (!y.node) return -1;
    return replace_uses(p, n, y) == FLOE_OK ? 1 : -1;
  }
  if (op_is(n, "StridedSlice")) {
    int64_t be[3][FLOE_MAX_DIMS], nb[3][FLOE_MAX_DIMS];
    if (n->num_inputs != 4 || attr_int_or_0(n, "ellipsis_mask") ||
        attr_int_or_0(n, "new_axis_mask") || attr_int_or_0(n, "shrink_axis_mask"))
      return 0;
    for (int k = 0; k < 3; k++)
      if (ox_const_ints(n->inputs[1 + k], be[k], FLOE_MAX_DIMS) != r) return 0;
    int64_t masks[2] = {attr_int_or_0(n, "begin_mask"), attr_int_or_0(n, "end_mask")};
    int64_t nm[2] = {0, 0};
    for (int i = 0; i < r; i++) {
      for (int k = 0; k < 3; k++) nb[k][perm[i]] = be[k][i];
      for (int k = 0; k < 2; k++)
        if (masks[k] >> i & 1) nm[k] |= (int64_t)1 << perm[i];
    }
    FloeOutput ins[4] = {a, const_i64(p, n, "begin", nb[0], r), const_i64(p, n, "end", nb[1], r),
                         const_i64(p, n, "strides", nb[2], r)};
    if (!ins[1].node || !ins[2].node || !ins[3].node) return -1;
    FloeAttrs attrs;
    floe__attrs_init(&attrs);
    floe_code rc = floe__attrs_copy(&attrs, &n->attrs, p->st);
    FloeAttrValue v = {.kind = FLOE_ATTR_INT, .u.i = nm[0]}; /* a set moves v */
    if (rc == FLOE_OK) rc = floe__attrs_set(&attrs, "begin_mask", &v, p->st);
    v = (FloeAttrValue){.kind = FLOE_ATTR_INT, .u.i = nm[1]};
    if (rc == FLOE_OK) rc = floe__attrs_set(&attrs, "end_mask", &v, p->st);
    FloeNode *c = rc == FLOE_OK ? copy_node(p, n, ins, &attrs) : NULL;
    floe__attrs_clear(&attrs);
    if (!c) return -1;
    y = transpose_n(p, n, floe_out(c, 0), perm, r);
  } else { /* Reshape */
    int64_t out[FLOE_MAX_DIMS], phys[FLOE_MAX_DIMS], q[FLOE_MAX_DIMS], z[FLOE_MAX_DIMS];
    if (n->num_inputs != 2) return 0;
    int ro = ox_const_ints(n->inputs[1], out, FLOE_MAX_DIMS);
    if (ro < 0) return 0;
    int unknown = 0;
    for (int i = 0; i < ro; i++) unknown += out[i] < 0;
    if (unknown > 1) return 0;
    FloeShape xs = a.node->out_shapes[a.index];
    int k = reshape_through(perm, r, xs, out, ro, phys, q, z);
    if (k == -2) {
      /* order the groups first; worth it only if the view left is NCHW of NHWC data, which
       * the rules above sink on */
      FloeShape zs = xs;
      int64_t zp[FLOE_MAX_DIMS], inv[FLOE_MAX_DIMS];
      for (int d = 0; d < r; d++) zs.dims[d] = xs.dims[z[d]];
      for (int d = 0; d < r; d++) inv[z[d]] = d;
      for (int i = 0; i < r; i++) zp[i] = inv[perm[i]]; /* T(x, perm) = T(T(x, z), zp) */
      k = reshape_through(zp, r, zs, out, ro, phys, q, perm2);
      if (k != 4 || !perm_is(q, TO_NCHW)) return 0;
      a = transpose_n(p, n, a, z, r);
      if (!a.node) return -1;
    } else if (k < 0) {
      return 0;
    }
    FloeOutput ins[2] = {a, const_i64(p, n, "shape", phys, k)};
    FloeNode *c = ins[1].node ? copy_node(p, n, ins, NULL) : NULL;
    if (!c) return -1;
    y = identity_perm(q, k) ? floe_out(c, 0) : transpose_n(p, n, floe_out(c, 0), q, k);
  }
  if (!y.node) return -1;
  return replace_uses(p, n, y) == FLOE_OK ? 1 : -1;
}

enum { MAX_INPUTS = 256 };

/* One rewrite of n if a rule applies: 1 done, 0 none, -1 error. */
static int rewrite(Pass *p, FloeNode *n) {
  int64_t perm[4], perm2[4];
  FloeOutput a, b, ins[MAX_INPUTS];
  if (n->num_inputs > MAX_INPUTS || n->id < p->first || kept(p, n)) return 0;
  for (int i = 0; i < n->num_inputs; i++) ins[i] = n->inputs[i];
  FloeNode *c = NULL;
  if (layout_op(n)) {
    /* op(x NCHW) -> T_nchw(op'(T_nhwc(x))) */
    FloeAttrs attrs;
    if (nhwc_attrs(p, n, &attrs) != FLOE_OK) return -1;
    ins[0] = transpose(p, n, ins[0], TO_NHWC);
    c = ins[0].node ? copy_node(p, n, ins, &attrs) : NULL;
    floe__attrs_clear(&attrs);
  } else if (unary_op(n) && transpose_perm(ins[0], perm, &a) && perm_is(perm, TO_NCHW)) {
    ins[0] = a;
    c = copy_node(p, n, ins, NULL);
  } else if (binary_op(n)) {
    bool t0 = transpose_perm(ins[0], perm, &a) && perm_is(perm, TO_NCHW);
    bool t1 = transpose_perm(ins[1], perm2, &b) && perm_is(perm2, TO_NCHW);
    if (t0 && t1) ins[0] = a, ins[1] = b;
    else if (t0 && scalar(ins[1]) && ins[1].node->out_shapes[ins[1].index].rank == 0) ins[0] = a;
    else if (t1 && scalar(ins[0]) && ins[0].node->out_shapes[ins[0].index].rank == 0) ins[1] = b;
    else if (t0 && !t1 && (ins[1] = nhwc_operand(p, n, ins[1])).node) ins[0] = a;
    else if (t1 && !t0 && (ins[0] = nhwc_operand(p, n, ins[0])).node) ins[1] = b;
    else return 0;
    c = copy_node(p, n, ins, NULL);
  } else if (op_is(n, "Pad") && n->num_inputs == 2 && transpose_perm(ins[0], perm, &a) &&
             perm_is(perm, TO_NCHW)) {
    /* Pad(T(x), P) = T(Pad(x, P with rows in NHWC order)) for constant paddings */
    const FloeTensor *pt = ox_const_value(ins[1]);
    int64_t pads[8];
    if (!pt || ox_const_ints(ins[1], pads, 8) != 8 || floe_tensor_rank(pt) != 2) return 0;
    int64_t dims[2] = {4, 2};
    FloeTensor *q = floe_tensor_new(FLOE_I64, 2, dims, p->st);
    if (!q) return -1;
    for (int d = 0; d < 4; d++) {
      ((int64_t *)floe_tensor_data(q))[2 * d] = pads[2 * TO_NHWC[d]];
      ((int64_t *)floe_tensor_data(q))[2 * d + 1] = pads[2 * TO_NHWC[d] + 1];
    }
    char *pn = fresh_name(p, n, "paddings");
    ins[0] = a;
    ins[1] = pn ? floe_const(p->g, pn, q) : (FloeOutput){NULL, 0};
    floe__free(pn);
    floe_tensor_release(q);
    c = ins[1].node ? copy_node(p, n, ins, NULL) : NULL;
  } else if (op_is(n, "Concat") && n->num_inputs >= 2 && n->num_outputs == 1) {
    /* Concat(T(x_0), ..., T(x_k)) along NCHW axis d = T(Concat(x_0, ..., x_k) along NHWC
     * axis TO_NCHW[d]): DenseNet's and SqueezeNet's concatenations of convolutions */
    int nv = n->num_inputs - 1;
    int64_t ax;
    if (ox_const_ints(ins[nv], &ax, 1) != 1) return 0;
    if (ax < 0) ax += 4;
    if (ax < 0 || ax > 3) return 0;
    for (int i = 0; i < nv; i++) {
      if (!transpose_perm(ins[i], perm, &a) || !perm_is(perm, TO_NCHW)) return 0;
      ins[i] = a;
    }
    ins[nv] = int_scalar_like(p, n, ins[nv], TO_NCHW[ax]);
    c = ins[nv].node ? copy_node(p, n, ins, NULL) : NULL;
  } else if ((op_is(n, "Mean") || op_is(n, "Max") || op_is(n, "Sum")) && n->num_inputs == 2 &&
             floe__node_attr_bool(n, "keep_dims", false) && transpose_perm(ins[0], perm, &a) &&
             perm_is(perm, TO_NCHW)) {
    /* reductions keeping dims: the NCHW axis k is NHWC axis TO_NCHW[k] */
    int64_t axes[4];
    int k = ox_const_ints(ins[1], axes, 4);
    if (k < 0) return 0;
    for (int i = 0; i < k; i++) {
      int64_t ax = axes[i] < 0 ? axes[i] + 4 : axes[i];
      if (ax < 0 || ax > 3) return 0;
      axes[i] = TO_NCHW[ax];
    }
    int64_t nk = k;
    FloeTensor *q = floe_tensor_new(FLOE_I64, 1, &nk, p->st);
    if (!q) return -1;
    if (k) memcpy(floe_tensor_data(q), axes, (size_t)k * sizeof *axes);
    char *an = fresh_name(p, n, "axes");
    ins[0] = a;
    ins[1] = an ? floe_const(p->g, an, q) : (FloeOutput){NULL, 0};
    floe__free(an);
    floe_tensor_release(q);
    c = ins[1].node ? copy_node(p, n, ins, NULL) : NULL;
  } else if (op_is(n, "Transpose") || op_is(n, "StridedSlice") || op_is(n, "Reshape")) {
    return rewrite_nd(p, n);
  } else {
    return 0;
  }
  if (!c) return -1;
  FloeOutput t = transpose(p, n, floe_out(c, 0), TO_NCHW);
  if (!t.node) return -1;
  return replace_uses(p, n, t) == FLOE_OK ? 1 : -1;
}

floe_code floe__onnx_nhwc(FloeGraph *g, int first, FloeNode *const *keep, int num_keep,
                          FloeStatus *st) {
  Pass p = {.g = g, .st = st, .keep = keep, .num_keep = num_keep, .first = first};
  bool any = false;
  for (int i = first; i < g->num_nodes && !any; i++) any = layout_op(g->nodes[i]);
  if (!any) return FLOE_OK;
  floe_code rc = FLOE_OK;
  for (int round = 0, changed = 1; changed && round < 64; round++) {
    changed = 0;
    for (int i = 0; i < g->num_nodes; i++) {
      if (!grow_dead(&p)) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
        goto done;
      }
      if (p.dead[i]) continue;
      int r = rewrite(&p, g->nodes[i]);
      if (r < 0) {
        rc = floe_status_code(st) != FLOE_OK ? floe_status_code(st) : floe_graph_status(g);
        if (rc == FLOE_OK) rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
        goto done;
      }
      changed |= r;
    }
  }
done:
  floe__free(p.dead);
  return rc;
}
