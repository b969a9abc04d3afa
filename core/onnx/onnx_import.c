/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_import.c - ONNX ModelProto -> FloeGraph: the driver (inputs, initializers, nodes in
 * order, outputs), the name scopes, and the helpers the op mappers build with. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

/* ------------------------------------------------------------------------------------ */
/* Scopes: ONNX value name -> FloeOutput, open addressing; subgraphs chain to their parent. */

typedef struct OxEntry {
  char *name;
  FloeOutput out;
} OxEntry;

struct OxScope {
  OxEntry *slots;
  size_t cap, count;
  OxScope *parent;
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static void scope_free(OxScope *s) {
  if (!s) return;
  for (size_t i = 0; i < s->cap; i++) floe__free(s->slots[i].name);
  floe__free(s->slots);
}

static OxEntry *scope_slot(OxScope *s, const char *name) {
  for (size_t i = hash_str(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1))
    if (!s->slots[i].name || !strcmp(s->slots[i].name, name)) return &s->slots[i];
}

static floe_code scope_put(OxScope *s, const char *name, FloeOutput out, FloeStatus *st) {
  if ((s->count + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    OxEntry *slots = floe__calloc(cap, sizeof *slots);
    if (!slots) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    OxScope grown = {slots, cap, 0, s->parent};
    for (size_t i = 0; i < s->cap; i++)
      if (s->slots[i].name) *scope_slot(&grown, s->slots[i].name) = s->slots[i];
    floe__free(s->slots);
    s->slots = slots;
    s->cap = cap;
  }
  OxEntry *e = scope_slot(s, name);
  if (!e->name) {
    if (!(e->name = floe__strdup(name))) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    s->count++;
  }
  e->out = out;
  return FLOE_OK;
}

static const OxEntry *scope_find(const OxScope *s, const char *name) {
  for (; s; s = s->parent)
    if (s->cap) {
      const OxEntry *e = scope_slot((OxScope *)s, name);
      if (e->name) return e;
    }
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* The model */

typedef struct OxValue {
  char *name;  /* ONNX name */
  char *fetch; /* Floe node or node:k (part 0) */
  char *part[2]; /* a sequence's or optional's further parts (onnx_values.c) */
  int kind;      /* OX_TENSOR, OX_SEQ, OX_OPT bits */
  FloeOutput out;
  FloeDType dtype;
  FloeShape shape;
} OxValue;

struct FloeOnnxModel {
  FloeGraph *g;
  int borrowed;   /* g is the caller's (FloeOnnxOptions.graph) */
  int first_node; /* g's node count before the import */
  int opset;
  OxValue *inputs, *outputs;
  int num_inputs, num_outputs;
  char *init_target;
};

static void values_free(OxValue *v, int n) {
  for (int i = 0; v && i < n; i++) {
    floe__free(v[i].name);
    floe__free(v[i].fetch);
    floe__free(v[i].part[0]);
    floe__free(v[i].part[1]);
  }
  floe__free(v);
}

void floe_onnx_model_free(FloeOnnxModel *m) {
  if (!m) return;
  if (!m->borrowed) floe_graph_free(m->g);
  values_free(m->inputs, m->num_inputs);
  values_free(m->outputs, m->num_outputs);
  floe__free(m->init_target);
  floe__free(m);
}

void floe_onnx_options_init(FloeOnnxOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

FloeGraph *floe_onnx_model_graph(FloeOnnxModel *m) { return m ? m->g : NULL; }
FloeGraph *floe_onnx_model_take_graph(FloeOnnxModel *m) {
  if (!m || m->borrowed) return NULL;
  FloeGraph *g = m->g;
  m->g = NULL;
  return g;
}
int floe_onnx_model_opset(const FloeOnnxModel *m) { return m ? m->opset : 0; }
int floe_onnx_model_num_inputs(const FloeOnnxModel *m) { return m ? m->num_inputs : 0; }
int floe_onnx_model_num_outputs(const FloeOnnxModel *m) { return m ? m->num_outputs : 0; }
static const OxValue *in_at(const FloeOnnxModel *m, int i) {
  return m && i >= 0 && i < m->num_inputs ? &m->inputs[i] : NULL;
}
static const OxValue *out_at(const FloeOnnxModel *m, int i) {
  return m && i >= 0 && i < m->num_outputs ? &m->outputs[i] : NULL;
}
const char *floe_onnx_model_input_name(const FloeOnnxModel *m, int i) {
  return in_at(m, i) ? in_at(m, i)->name : NULL;
}
const char *floe_onnx_model_input_node(const FloeOnnxModel *m, int i) {
  return in_at(m, i) ? in_at(m, i)->fetch : NULL;
}
FloeDType floe_onnx_model_input_dtype(const FloeOnnxModel *m, int i) {
  return in_at(m, i) ? in_at(m, i)->dtype : FLOE_DTYPE_INVALID;
}
FloeShape floe_onnx_model_input_shape(const FloeOnnxModel *m, int i) {
  return in_at(m, i) ? in_at(m, i)->shape : floe_shape_unknown();
}
const char *floe_onnx_model_output_name(const FloeOnnxModel *m, int i) {
  return out_at(m, i) ? out_at(m, i)->name : NULL;
}
const char *floe_onnx_model_output_fetch(const FloeOnnxModel *m, int i) {
  return out_at(m, i) ? out_at(m, i)->fetch : NULL;
}
FloeOutput floe_onnx_model_output(const FloeOnnxModel *m, int i) {
  return out_at(m, i) ? out_at(m, i)->out : (FloeOutput){NULL, 0};
}
FloeDType floe_onnx_model_output_dtype(const FloeOnnxModel *m, int i) {
  return out_at(m, i) ? out_at(m, i)->dtype : FLOE_DTYPE_INVALID;
}
FloeOnnxKind floe_onnx_model_input_kind(const FloeOnnxModel *m, int i) {
  return in_at(m, i) ? (FloeOnnxKind)in_at(m, i)->kind : FLOE_ONNX_TENSOR;
}
FloeOnnxKind floe_onnx_model_output_kind(const FloeOnnxModel *m, int i) {
  return out_at(m, i) ? (FloeOnnxKind)out_at(m, i)->kind : FLOE_ONNX_TENSOR;
}
int floe_onnx_kind_num_parts(FloeOnnxKind kind) {
  return kind >= FLOE_ONNX_TENSOR && kind <= FLOE_ONNX_OPTIONAL_SEQUENCE ? ox_kind_parts((int)kind)
                                                                         : 0;
}
static const char *part_of(const OxValue *v, int k) {
  if (!v || k < 0 || k >= ox_kind_parts(v->kind)) return NULL;
  return k == 0 ? v->fetch : v->part[k - 1];
}
const char *floe_onnx_model_input_part(const FloeOnnxModel *m, int i, int k) {
  return part_of(in_at(m, i), k);
}
const char *floe_onnx_model_output_part(const FloeOnnxModel *m, int i, int k) {
  return part_of(out_at(m, i), k);
}
const char *floe_onnx_model_init_target(const FloeOnnxModel *m) {
  return m ? m->init_target : NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Helpers for mappers */

static const char *node_label(const Onnx__NodeProto *n) {
  if (n->name && *n->name) return n->name;
  if (n->n_output && n->output[0] && *n->output[0]) return n->output[0];
  return "(unnamed)";
}

floe_code ox_fail(OxCtx *c, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = floe__vasprintf(fmt, ap);
  va_end(ap);
  const Onnx__NodeProto *n = c->node;
  if (n)
    floe_status_set(c->st, code, "node '%s' (%s, opset %d): %s", node_label(n),
                    n->op_type ? n->op_type : "?", c->opset, msg ? msg : "out of memory");
  else
    floe_status_set(c->st, code, "%s", msg ? msg : "out of memory");
  floe__free(msg);
  return code;
}

const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

int64_t ox_int(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  return a && a->has_i ? a->i : dflt;
}

float ox_float(const Onnx__NodeProto *n, const char *name, float dflt) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  return a && a->has_f ? a->f : dflt;
}

const char *ox_str(const Onnx__NodeProto *n, const char *name, const char *dflt, char *buf,
                   size_t cap) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  if (!a || !a->has_s) return dflt;
  size_t len = a->s.len < cap - 1 ? a->s.len : cap - 1;
  memcpy(buf, a->s.data, len);
  buf[len] = '\0';
  return buf;
}

/* An empty list points here, never NULL, so callers may memcpy zero values from it. */
static const int64_t no_ints[1];
static const float no_floats[1];

int ox_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  *v = NULL;
  if (!a) return -1;
  *v = a->n_ints ? a->ints : no_ints;
  return a->n_ints > INT32_MAX ? INT32_MAX : (int)a->n_ints;
}

int ox_floats(const Onnx__NodeProto *n, const char *name, const float **v) {
  const Onnx__AttributeProto *a = ox_attr(n, name);
  *v = NULL;
  if (!a) return -1;
  *v = a->n_floats ? a->floats : no_floats;
  return a->n_floats > INT32_MAX ? INT32_MAX : (int)a->n_floats;
}

FloeNodeBuilder *ox_begin(OxCtx *c, const char *op) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s_%d", c->node_name, op, c->counter++);
  return floe_node_begin(c->g, op, name);
}

FloeNode *ox_finish_node(OxCtx *c, FloeNodeBuilder *b) {
  (void)c;
  return floe_node_finish(b);
}

/* Ops never evaluated while importing: frame plumbing, whose meaning depends on where it
 * runs. Stateful ops are never folded either. */
static int foldable_op(const FloeNode *n) {
  static const char *const frame_ops[] = {"Enter", "Exit", "NextIteration", "Merge", "Switch",
                                          "LoopCond", "Const", "Placeholder", "Identity"};
  if (n->op->flags & (FLOE_OP_STATEFUL | FLOE__OP_SOURCE)) return 0;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(frame_ops); i++)
    if (!strcmp(n->op->name, frame_ops[i])) return 0;
  return 1;
}

/* Largest output (elements) computed while importing; larger ones stay in the graph. */
#define FOLD_MAX_ELEMENTS (1 << 24)

/* Constant folding while importing: a node whose inputs are all Consts is evaluated now
 * (floe__eval_node: in a graph of its own) and its single output replaced by a Const. Shape
 * arithmetic (Shape -> Gather -> Concat -> Reshape) then gives known shapes downstream, and
 * weight layout changes (a filter's transpose) happen once. A node that cannot be evaluated
 * is simply kept. */
static FloeOutput fold(OxCtx *c, FloeNode *n) {
  FloeOutput keep = floe_out(n, 0);
  if (c->no_fold || n->num_outputs != 1 || n->num_control || !foldable_op(n)) return keep;
  if (!floe__shape_at_most(&n->out_shapes[0], FOLD_MAX_ELEMENTS)) return keep;
  for (int i = 0; i < n->num_inputs; i++)
    if (!ox_const_value(n->inputs[i]) || strcmp(n->inputs[i].node->op->name, "Const")) return keep;
  FloeTensor **values = floe__calloc((size_t)n->num_inputs + 1, sizeof *values);
  if (!values) return keep;
  for (int i = 0; i < n->num_inputs; i++) values[i] = (FloeTensor *)ox_const_value(n->inputs[i]);
  FloeTensor *value = floe__eval_node(NULL, n, values);
  floe__free(values);
  if (!value) return keep;
  return ox_const(c, value);
}

FloeOutput ox_finish(OxCtx *c, FloeNodeBuilder *b) {
  FloeNode *n = ox_finish_node(c, b);
  return n ? fold(c, n) : (FloeOutput){NULL, 0};
}

floe_code ox_check(OxCtx *c) {
  if (floe_graph_status(c->g) == FLOE_OK) return FLOE_OK;
  FloeStatus *tmp = floe_status_new();
  const char *msg = floe_graph_error(c->g, tmp);
  floe_code code = floe_graph_status(c->g);
  ox_fail(c, code, "%s", msg ? msg : "graph error");
  floe_status_free(tmp);
  return code;
}

FloeOutput ox_unary(OxCtx *c, const char *op, FloeOutput x) {
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  return ox_finish(c, b);
}

FloeOutput ox_binary(OxCtx *c, const char *op, FloeOutput x, FloeOutput y) {
  FloeNodeBuilder *b = ox_begin(c, op);
  floe_node_add_input(b, x);
  floe_node_add_input(b, y);
  return ox_finish(c, b);
}

FloeOutput ox_const(OxCtx *c, FloeTensor *t) {
  if (!t) {
    floe__graph_fail(c->g, FLOE_NO_MEMORY, "out of memory");
    return (FloeOutput){NULL, 0};
  }
  FloeNodeBuilder *b = ox_begin(c, "Const");
  floe_node_set_attr_tensor(b, "value", t);
  floe_node_set_attr_type(b, "dtype", floe_tensor_dtype(t));
  floe_tensor_release(t);
  return ox_finish(c, b);
}

static FloeOutput const_1d(OxCtx *c, FloeDType dt, const void *v, int n) {
  int64_t d = n;
  FloeTensor *t = floe_tensor_new(dt, 1, &d, NULL);
  if (t && n) memcpy(floe_tensor_data(t), v, (size_t)n * floe_dtype_size(dt));
  return ox_const(c, t);
}

FloeOutput ox_const_i64(OxCtx *c, const int64_t *v, int n) { return const_1d(c, FLOE_I64, v, n); }
FloeOutput ox_const_i32(OxCtx *c, const int32_t *v, int n) { return const_1d(c, FLOE_I32, v, n); }
FloeOutput ox_scalar_i64(OxCtx *c, int64_t v) { return ox_const(c, floe_tensor_scalar_i64(v, NULL)); }
FloeOutput ox_scalar_i32(OxCtx *c, int32_t v) { return ox_const(c, floe_tensor_scalar_i32(v, NULL)); }

/* v clamped into [lo, hi] (NaN: 0), so converting it to an integer type is defined. */
static double clamp_to(double v, double lo, double hi) {
  return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

FloeOutput ox_scalar(OxCtx *c, FloeDType dt, double v) {
  FloeTensor *t = floe_tensor_new(dt, 0, NULL, NULL);
  if (t) {
    void *d = floe_tensor_data(t);
    switch (dt) {
      case FLOE_F32: *(float *)d = (float)v; break;
      case FLOE_F64: *(double *)d = v; break;
      case FLOE_F16: *(uint16_t *)d = floe_f32_to_f16((float)v); break;
      case FLOE_BF16: *(uint16_t *)d = floe_f32_to_bf16((float)v); break;
      case FLOE_I8: *(int8_t *)d = (int8_t)clamp_to(v, INT8_MIN, INT8_MAX); break;
      case FLOE_U8: *(uint8_t *)d = (uint8_t)clamp_to(v, 0, UINT8_MAX); break;
      case FLOE_I32: *(int32_t *)d = (int32_t)clamp_to(v, INT32_MIN, INT32_MAX); break;
      case FLOE_I64: *(int64_t *)d = (int64_t)clamp_to(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
      case FLOE_BOOL: *(uint8_t *)d = v != 0; break;
      default: break;
    }
  }
  return ox_const(c, t);
}

FloeOutput ox_cast(OxCtx *c, FloeOutput x, FloeDType dt) {
  if (!x.node || ox_dtype(x) == dt) return x;
  FloeNodeBuilder *b = ox_begin(c, "Cast");
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "DstT", dt);
  return ox_finish(c, b);
}

FloeOutput ox_identity(OxCtx *c, FloeOutput x) { return ox_unary(c, "Identity", x); }

FloeDType ox_dtype(FloeOutput x) {
  return x.node ? floe_node_output_dtype(x.node, x.index) : FLOE_DTYPE_INVALID;
}

FloeShape ox_shape(FloeOutput x) {
  return x.node ? floe_node_output_shape(x.node, x.index) : floe_shape_unknown();
}

int ox_rank(OxCtx *c, FloeOutput x, const char *what) {
  FloeShape s = ox_shape(x);
  if (s.rank >= 0) return s.rank;
  ox_fail(c, FLOE_UNIMPLEMENTED,
          "the rank of %s is not known when the graph is built (Floe needs it here; give the "
          "model's inputs shapes)",
          what);
  return -1;
}

const FloeTensor *ox_const_value(FloeOutput x) {
  while (x.node && !strcmp(floe_node_op(x.node), "Identity")) x = floe_node_input(x.node, 0);
  if (!x.node || strcmp(floe_node_op(x.node), "Const")) return NULL;
  const FloeAttrValue *v = floe__node_attr(x.node, "value", FLOE_ATTR_TENSOR);
  return v ? v->u.tensor : NULL;
}

int ox_const_ints(FloeOutput x, int64_t *v, int max) {
  const FloeTensor *t = ox_const_value(x);
  if (!t) return -1;
  FloeDType dt = floe_tensor_dtype(t);
  int64_t n = floe_tensor_num_elements(t);
  if ((dt != FLOE_I64 && dt != FLOE_I32) || n > max) return -1;
  for (int64_t i = 0; i < n; i++)
    v[i] = dt == FLOE_I64 ? ((const int64_t *)floe_tensor_data(t))[i]
                          : ((const int32_t *)floe_tensor_data(t))[i];
  return (int)n;
}

floe_code ox_axis(OxCtx *c, int64_t axis, int rank, const char *what, int *out) {
  if (axis < -rank || axis >= (rank ? rank : 1))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "%s %lld is outside [-%d, %d) for a rank-%d input",
                   what, (long long)axis, rank, rank ? rank : 1, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return FLOE_OK;
}

int ox_present(FloeOutput x) { return x.node != NULL; }

floe_code ox_need(OxCtx *c, const FloeOutput *in, int nin, int min) {
  if (nin < min)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "needs at least %d inputs, has %d", min, nin);
  for (int i = 0; i < min; i++)
    if (!ox_present(in[i]))
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is required but empty", i);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* The driver */

static const OxOp *const op_tables[] = {
    floe__onnx_ops_math,
    floe__onnx_ops_tensor,
    floe__onnx_ops_nn,
    floe__onnx_ops_loss,
    floe__onnx_ops_quant,
    floe__onnx_ops_control,
    floe__onnx_ops_seq,
    floe__onnx_ops_train,
    floe__onnx_ops_math_signal,
    floe__onnx_ops_index,
    floe__onnx_ops_resize,
    floe__onnx_ops_text,
};

static const char *domain_of(const Onnx__NodeProto *n) {
  return !n->domain || !strcmp(n->domain, "ai.onnx") ? "" : n->domain;
}

static const OxOp *find_op(const Onnx__NodeProto *n) {
  const char *dom = domain_of(n);
  for (size_t t = 0; t < FLOE__ARRAY_LEN(op_tables); t++)
    for (const OxOp *o = op_tables[t]; o->op; o++)
      if (!strcmp(o->op, n->op_type) && !strcmp(o->domain, dom)) return o;
  return NULL;
}

/* A valid, unused Floe node name from an ONNX name (':' and control characters become '_'). */
/* ... with the import's name prefix (FloeOnnxOptions.name_prefix) in front. */
static char *unique_name(const OxCtx *c, const char *onnx, const char *fallback) {
  FloeGraph *g = c->g;
  const char *base = onnx && *onnx ? onnx : fallback;
  char *s = floe__asprintf("%s%s", c->name_prefix ? c->name_prefix : "", base);
  if (!s) return NULL;
  for (char *p = s; *p; p++)
    if (*p == ':' || (unsigned char)*p < 0x20) *p = '_';
  if (!floe_graph_find(g, s)) return s;
  for (int k = 1;; k++) {
    char *t = floe__asprintf("%s_%d", s, k);
    if (!t || !floe_graph_find(g, t)) {
      floe__free(s);
      return t;
    }
    floe__free(t);
  }
}

static floe_code add_initializer(OxCtx *c, const Onnx__TensorProto *tp) {
  const char *nm = tp->name && *tp->name ? tp->name : NULL;
  if (!nm) return ox_fail(c, FLOE_INVALID_ARGUMENT, "an initializer has no name");
  FloeTensor *t = floe__onnx_tensor(tp, c->base_dir, c->st);
  if (!t) {
    floe__status_prefix(c->st, "initializer '%s'", nm);
    return floe_status_code(c->st);
  }
  char *name = unique_name(c, nm, "init");
  if (!name) {
    floe_tensor_release(t);
    return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
  }
  FloeOutput out;
  FloeDType dt = floe_tensor_dtype(t);
  if (c->trainable && (dt == FLOE_F32 || dt == FLOE_F64)) {
    FloeShape shape = floe_tensor_shape(t);
    FloeNodeBuilder *b = floe_node_begin(c->g, "VarHandleOp", name);
    floe_node_set_attr_type(b, "dtype", dt);
    floe_node_set_attr_shape(b, "shape", shape);
    floe_node_set_attr_bool(b, "trainable", 1);
    FloeOutput h = floe_out(floe_node_finish(b), 0);
    char *sub = floe__asprintf("%s/initial_value", name);
    FloeOutput v = sub ? floe_const(c->g, sub, t) : (FloeOutput){NULL, 0};
    floe__free(sub);
    sub = floe__asprintf("%s/init", name);
    b = floe_node_begin(c->g, "AssignVariableOp", sub ? sub : "?");
    floe__free(sub);
    floe_node_add_input(b, h);
    floe_node_add_input(b, v);
    floe_node_finish(b);
    sub = floe__asprintf("%s/read", name);
    b = floe_node_begin(c->g, "ReadVariableOp", sub ? sub : "?");
    floe__free(sub);
    floe_node_add_input(b, h);
    floe_node_set_attr_type(b, "dtype", dt);
    out = floe_out(floe_node_finish(b), 0);
    c->num_var_inits++;
  } else {
    out = floe_const(c->g, name, t);
  }
  floe_tensor_release(t);
  floe__free(name);
  if (floe_graph_status(c->g) != FLOE_OK) {
    FloeStatus *tmp = floe_status_new();
    floe_status_set(c->st, floe_graph_status(c->g), "initializer '%s': %s", nm,
                    floe_graph_error(c->g, tmp));
    floe_status_free(tmp);
    return floe_status_code(c->st);
  }
  return scope_put(c->scope, nm, out, c->st);
}

/* dtype and shape of a tensor-typed value; FLOE_UNIMPLEMENTED for sequences and others. */
static floe_code value_type(OxCtx *c, const Onnx__ValueInfoProto *vi, FloeDType *dt,
                            FloeShape *shape) {
  const Onnx__TypeProto *tp = vi->type;
  const char *nm = vi->name ? vi->name : "?";
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                           "graph input '%s' is %s; Floe imports tensor inputs only", nm,
                           !tp ? "untyped"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE
                               ? "a sequence"
                           : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE
                               ? "an optional"
                               : "not a tensor");
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  *dt = floe__onnx_dtype(tt->elem_type);
  if (*dt == FLOE_DTYPE_INVALID)
    return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                           "graph input '%s' has element type %s, which Floe does not support", nm,
                           floe__onnx_dtype_name(tt->elem_type));
  *shape = floe_shape_unknown();
  if (tt->shape) {
    if (tt->shape->n_dim > FLOE_MAX_DIMS)
      return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                             "graph input '%s' has rank %zu, above Floe's limit of %d", nm,
                             tt->shape->n_dim, FLOE_MAX_DIMS);
    shape->rank = (int32_t)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
      const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
      shape->dims[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                               d->dim_value >= 0
                           ? d->dim_value
                           : FLOE_DIM_UNKNOWN;
    }
  }
  return FLOE_OK;
}

static int is_initializer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name)) return 1;
  return 0;
}

/* Ops whose mappers take sequences and optionals; every other mapper sees tensors only. */
static int takes_values(const OxOp *op) {
  const OxOp *const tables[] = {floe__onnx_ops_control, floe__onnx_ops_seq};
  for (size_t t = 0; t < FLOE__ARRAY_LEN(tables); t++)
    for (const OxOp *o = tables[t]; o->op; o++)
      if (o == op) return 1;
  return 0;
}

/* Identity of a sequence or optional (opset 14 on) is the same value. */
static int value_identity(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                          FloeOutput *out, int nout) {
  if (strcmp(n->op_type, "Identity") || *domain_of(n) || nin != 1 || nout != 1 || !in[0].node)
    return 0;
  OxVal v = ox_val(c, in[0]);
  if (v.kind == OX_TENSOR) return 0;
  out[0] = ox_val_set(c, &v);
  return 1;
}

static floe_code map_inputs(OxCtx *c, const Onnx__NodeProto *n, FloeOutput *in, int nin) {
  for (int i = 0; i < nin; i++) {
    if (!n->input[i] || !*n->input[i]) continue; /* an omitted optional input */
    const OxEntry *e = scope_find(c->scope, n->input[i]);
    if (!e)
      return ox_fail(c, FLOE_INVALID_ARGUMENT,
                     "input %d '%s' is not a graph input, an initializer or an earlier node's "
                     "output (nodes must be in topological order)",
                     i, n->input[i]);
    in[i] = e->out;
  }
  return FLOE_OK;
}

static floe_code map_node(OxCtx *c, const Onnx__NodeProto *n) {
  /* Saved: a subgraph's nodes are mapped while the node that holds it is. */
  const Onnx__NodeProto *saved_node = c->node;
  const char *saved_name = c->node_name;
  int saved_counter = c->counter, saved_first = c->node_first;
  c->node = n;
  FloeOutput *in = NULL, *out = NULL;
  char *name = NULL;
  floe_code rc = FLOE_OK;
  if (!n->op_type || !*n->op_type) {
    rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "the node has no op_type");
    goto done;
  }
  if (c->opset == 0 && !*domain_of(n)) {
    rc = ox_fail(c, FLOE_INVALID_ARGUMENT,
                 "a default-domain op, but the model imports no default-domain opset");
    goto done;
  }
  const OxOp *op = find_op(n);
  if (!op) {
    const char *dom = domain_of(n);
    rc = ox_fail(c, FLOE_UNIMPLEMENTED, "op %s%s%s is not supported by Floe's ONNX importer",
                 *dom ? dom : "", *dom ? "." : "", n->op_type);
    goto done;
  }
  int nin = (int)n->n_input, nout = (int)n->n_output;
  in = floe__calloc((size_t)nin + 1, sizeof *in);
  out = floe__calloc((size_t)nout + 1, sizeof *out);
  name = unique_name(c, n->name && *n->name ? n->name : NULL,
                     nout && *n->output[0] ? n->output[0] : n->op_type);
  if (!in || !out || !name) {
    rc = floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
    goto done;
  }
  if ((rc = map_inputs(c, n, in, nin)) != FLOE_OK) goto done;
  c->node_name = name;
  c->counter = 0;
  c->node_first = floe_graph_num_nodes(c->g);
  if (!takes_values(op)) {
    if (value_identity(c, n, in, nin, out, nout)) goto outputs;
    for (int i = 0; i < nin; i++)
      if (ox_val(c, in[i]).kind != OX_TENSOR) {
        rc = ox_fail(c, FLOE_UNIMPLEMENTED, "input %d '%s' is a%s %s; Floe maps this op for "
                     "tensors only", i, n->input[i], ox_val(c, in[i]).kind == OX_SEQ ? "" : "n",
                     ox_kind_name(ox_val(c, in[i]).kind));
        goto done;
      }
  }
  rc = op->map(c, n, in, nin, out, nout);
outputs:
  if (rc == FLOE_OK) rc = ox_check(c);
  /* A builder that failed through the graph's sticky error (floe_while_loop, floe_cond) has
   * said why there, not in the status: carry it over, so no error goes without a message. */
  if (rc != FLOE_OK && floe_status_code(c->st) == FLOE_OK) {
    floe_code g = ox_check(c);
    if (g == FLOE_OK) ox_fail(c, rc, "the mapping failed (%s)", floe_code_name(rc));
  }
  for (int i = 0; rc == FLOE_OK && i < nout; i++) {
    if (!n->output[i] || !*n->output[i]) continue;
    if (!out[i].node) {
      rc = ox_fail(c, FLOE_UNIMPLEMENTED, "output %d ('%s') is not produced by Floe's mapping",
                   i, n->output[i]);
      break;
    }
    rc = scope_put(c->scope, n->output[i], out[i], c->st);
  }
done:
  floe__free(in);
  floe__free(out);
  floe__free(name);
  c->node_name = saved_name;
  c->node = saved_node;
  c->counter = saved_counter;
  c->node_first = saved_first;
  return rc;
}

static const FloeOutput *binding(const OxCtx *c, const char *name) {
  for (int i = 0; i < c->num_bind; i++)
    if (c->bind_names[i] && !strcmp(c->bind_names[i], name)) return &c->bind_values[i];
  return NULL;
}

static floe_code check_binding(OxCtx *c, const char *name, const OxValue *v, FloeOutput b) {
  if (!b.node || b.node->graph != c->g || b.index < 0 || b.index >= b.node->num_outputs)
    return floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                           "input '%s' is bound to no output of the graph imported into", name);
  FloeShape s = ox_shape(b);
  char want[96], have[96];
  if (ox_dtype(b) != v->dtype || (s.rank >= 0 && v->shape.rank >= 0 && s.rank != v->shape.rank))
    return floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                           "input '%s' is %s %s in the model, but is bound to '%s' of %s %s", name,
                           floe_dtype_name(v->dtype), floe_shape_str(&v->shape, want, sizeof want),
                           floe_node_name(b.node), floe_dtype_name(ox_dtype(b)),
                           floe_shape_str(&s, have, sizeof have));
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Subgraphs */

FloeOutput ox_lookup(OxCtx *c, const char *name) {
  const OxEntry *e = name ? scope_find(c->scope, name) : NULL;
  return e ? e->out : (FloeOutput){NULL, 0};
}

const Onnx__GraphProto *ox_graph_attr(OxCtx *c, const char *attr) {
  const Onnx__AttributeProto *a = ox_attr(c->node, attr);
  if (!a || !a->g) {
    ox_fail(c, FLOE_INVALID_ARGUMENT, "the graph attribute '%s' is missing", attr);
    return NULL;
  }
  return a->g;
}

/* Binds the subgraph's inputs and initializers in the (new, current) scope. */
static floe_code bind_subgraph_inputs(OxCtx *c, const Onnx__GraphProto *gp, const OxVal *ins) {
  for (size_t i = 0; i < gp->n_initializer; i++) {
    floe_code rc = add_initializer(c, gp->initializer[i]);
    if (rc != FLOE_OK) return rc;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const char *nm = gp->input[i]->name;
    if (!nm || !*nm) return ox_fail(c, FLOE_INVALID_ARGUMENT, "subgraph input %zu has no name", i);
    FloeOutput key = ox_val_set(c, &ins[i]);
    if (!key.node) return ox_check(c);
    floe_code rc = scope_put(c->scope, nm, key, c->st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

floe_code ox_subgraph(OxCtx *c, const char *attr, const OxVal *ins, int nin, OxVal *outs,
                      int nout) {
  const Onnx__GraphProto *gp = ox_graph_attr(c, attr);
  if (!gp) return floe_status_code(c->st);
  if ((int)gp->n_input != nin || (int)gp->n_output != nout)
    return ox_fail(c, FLOE_INVALID_ARGUMENT,
                   "the subgraph '%s' has %zu inputs and %zu outputs; this node gives it %d "
                   "and takes %d",
                   attr, gp->n_input, gp->n_output, nin, nout);
  if (c->depth >= 32)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "subgraphs nested more than 32 deep");
  OxScope scope = {NULL, 0, 0, c->scope};
  const Onnx__NodeProto *outer = c->node;
  const char *outer_name = c->node_name;
  int outer_counter = c->counter;
  c->scope = &scope;
  c->depth++;
  floe_code rc = bind_subgraph_inputs(c, gp, ins);
  for (size_t i = 0; rc == FLOE_OK && i < gp->n_node; i++) rc = map_node(c, gp->node[i]);
  for (int i = 0; rc == FLOE_OK && i < nout; i++) {
    const char *nm = gp->output[i]->name;
    const OxEntry *e = nm && *nm ? scope_find(&scope, nm) : NULL;
    if (!e) {
      rc = ox_fail(c, FLOE_INVALID_ARGUMENT, "output %d '%s' of subgraph '%s' is not computed",
                   i, nm ? nm : "", attr);
      break;
    }
    outs[i] = ox_val(c, e->out);
  }
  c->depth--;
  c->scope = scope.parent;
  c->node = outer;
  c->node_name = outer_name;
  c->counter = outer_counter;
  scope_free(&scope);
  if (rc != FLOE_OK && rc != FLOE_NO_MEMORY)
    floe__status_prefix(c->st, "in subgraph '%s' of node '%s' (%s)", attr, node_label(outer),
                        outer->op_type);
  return rc;
}

/* The placeholder of part k of input v, "<fetch>/<what>". */
static FloeOutput part_placeholder(OxCtx *c, OxValue *v, int k, const char *what, FloeDType dt,
                                   FloeShape shape) {
  char *nm = floe__asprintf("%s/%s", v->fetch, what);
  char *fetch = nm ? unique_name(c, nm, "input") : NULL;
  floe__free(nm);
  if (!fetch) {
    floe__graph_fail(c->g, FLOE_NO_MEMORY, "out of memory");
    return (FloeOutput){NULL, 0};
  }
  v->part[k - 1] = fetch;
  return floe_placeholder(c->g, fetch, dt, shape);
}

/* A sequence or optional graph input: one placeholder per part, "<name>", "<name>/shapes",
 * "<name>/present". An optional tensor's placeholder takes any shape (an empty tensor when
 * the optional is absent). */
static floe_code add_value_input(OxCtx *c, FloeOnnxModel *m, const Onnx__ValueInfoProto *vi,
                                 int kind, FloeDType dt, FloeShape elem) {
  if (dt == FLOE_DTYPE_INVALID)
    return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                           "graph input '%s' is a%s %s without an element type Floe has",
                           vi->name, kind == OX_SEQ ? "" : "n", ox_kind_name(kind));
  OxValue *v = &m->inputs[m->num_inputs];
  v->kind = kind;
  v->dtype = dt;
  v->shape = floe_shape_unknown();
  m->num_inputs++; /* counted first: the model frees what was allocated */
  if (!(v->name = floe__strdup(vi->name)) || !(v->fetch = unique_name(c, vi->name, "input")))
    return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
  FloeOutput parts[3];
  int n = 0;
  FloeShape vshape = floe_shape_unknown();
  if (kind & OX_SEQ) vshape = floe_shape_make(1, (int64_t[]){FLOE_DIM_UNKNOWN});
  parts[n++] = floe_placeholder(c->g, v->fetch, dt, vshape);
  if (kind & OX_SEQ) {
    int64_t dims[2] = {FLOE_DIM_UNKNOWN, elem.rank >= 0 ? elem.rank : FLOE_DIM_UNKNOWN};
    parts[n] = part_placeholder(c, v, n, "shapes", FLOE_I64, floe_shape_make(2, dims));
    n++;
  }
  if (kind & OX_OPT) {
    parts[n] = part_placeholder(c, v, n, "present", FLOE_BOOL, floe_shape_scalar());
    n++;
  }
  if (floe_graph_status(c->g) != FLOE_OK) return ox_check(c);
  OxVal val = ox_val_from_parts(kind, parts);
  val.elem = elem;
  c->node_first = 0; /* the placeholders are new */
  v->out = ox_val_set(c, &val);
  if (!v->out.node) return ox_check(c);
  return scope_put(c->scope, vi->name, v->out, c->st);
}

static floe_code add_values(OxCtx *c, FloeOnnxModel *m, const Onnx__GraphProto *gp) {
  m->inputs = floe__calloc(gp->n_input + 1, sizeof *m->inputs);
  m->outputs = floe__calloc(gp->n_output + 1, sizeof *m->outputs);
  if (!m->inputs || !m->outputs) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < gp->n_initializer; i++) {
    floe_code rc = add_initializer(c, gp->initializer[i]);
    if (rc != FLOE_OK) return rc;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi->name || !*vi->name)
      return floe_status_set(c->st, FLOE_INVALID_ARGUMENT, "graph input %zu has no name", i);
    if (is_initializer(gp, vi->name)) continue; /* IR < 4 lists initializers as inputs */
    OxValue *v = &m->inputs[m->num_inputs];
    FloeShape elem;
    int kind = vi->type ? ox_type_kind(vi->type, &v->dtype, &elem) : OX_TENSOR;
    if (kind > OX_TENSOR) {
      floe_code rc = add_value_input(c, m, vi, kind, v->dtype, elem);
      if (rc != FLOE_OK) return rc;
      continue;
    }
    floe_code rc = value_type(c, vi, &v->dtype, &v->shape);
    if (rc != FLOE_OK) return rc;
    m->num_inputs++; /* counted first: the model frees what was allocated */
    const FloeOutput *bound = binding(c, vi->name);
    if (bound) {
      if ((rc = check_binding(c, vi->name, v, *bound)) != FLOE_OK) return rc;
      v->out = *bound;
      if (!(v->name = floe__strdup(vi->name)) ||
          !(v->fetch = bound->index ? floe__asprintf("%s:%d", floe_node_name(bound->node),
                                                     bound->index)
                                    : floe__strdup(floe_node_name(bound->node))))
        return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
      if ((rc = scope_put(c->scope, vi->name, v->out, c->st)) != FLOE_OK) return rc;
      continue;
    }
    if (!(v->name = floe__strdup(vi->name)) ||
        !(v->fetch = unique_name(c, vi->name, "input")))
      return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
    v->out = floe_placeholder(c->g, v->fetch, v->dtype, v->shape);
    if (floe_graph_status(c->g) != FLOE_OK) return ox_check(c);
    if ((rc = scope_put(c->scope, vi->name, v->out, c->st)) != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

static floe_code bind_outputs(OxCtx *c, FloeOnnxModel *m, const Onnx__GraphProto *gp) {
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *nm = gp->output[i]->name;
    const OxEntry *e = nm && *nm ? scope_find(c->scope, nm) : NULL;
    if (!e)
      return floe_status_set(c->st, FLOE_INVALID_ARGUMENT,
                             "graph output %zu '%s' is not computed by any node", i, nm ? nm : "");
    OxValue *v = &m->outputs[m->num_outputs];
    if (!(v->name = floe__strdup(nm))) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
    m->num_outputs++;
    /* An Identity named after the output: fetchable by its ONNX name, also when the output is
     * an input or another output. */
    OxVal val = ox_val(c, e->out);
    FloeOutput parts[3];
    int n = ox_val_parts(&val, parts);
    v->kind = val.kind;
    static const char *const suffix[] = {"", "/shapes", "/present"};
    for (int k = 0; k < n; k++) {
      const char *sfx = suffix[k == 0 ? 0 : k == 1 && (val.kind & OX_SEQ) ? 1 : 2];
      char *full = floe__asprintf("%s%s", nm, sfx);
      char *name = full ? unique_name(c, full, "output") : NULL;
      floe__free(full);
      if (!name) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
      FloeNodeBuilder *b = floe_node_begin(c->g, "Identity", name);
      floe_node_add_input(b, parts[k]);
      FloeNode *id = floe_node_finish(b);
      if (k == 0)
        v->fetch = name;
      else
        v->part[k - 1] = name;
      if (!id) return ox_check(c);
      if (k == 0) v->out = floe_out(id, 0);
    }
    v->dtype = ox_dtype(v->out);
    v->shape = ox_shape(v->out);
  }
  return FLOE_OK;
}

static floe_code read_opsets(OxCtx *c, const Onnx__ModelProto *mp, const char *what) {
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    const char *dom = o->domain ? o->domain : "";
    bool std = !*dom || !strcmp(dom, "ai.onnx");
    if ((std || !strcmp(dom, "ai.onnx.preview.training")) && (o->version < 0 || o->version > 1000))
      /* reported as given: a cast to int made 2^62 read as opset 0 */
      return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                             "'%s' imports %s opset %" PRId64 "; Floe reads opsets 1 to 17", what,
                             std ? "default-domain" : dom, (int64_t)o->version);
    if (std)
      c->opset = (int)o->version;
    else
      c->opset_training = (int)o->version;
  }
  if (mp->n_opset_import == 0) c->opset = 1; /* IR 2 models: opset 1 implied */
  /* A model of other domains only (training ops) imports no default opset: 0, and its
   * default-domain nodes are refused in map_node. */
  if (c->opset < 0 || c->opset > 17 || (c->opset == 0 && mp->n_opset_import == 0))
    return floe_status_set(c->st, FLOE_UNIMPLEMENTED,
                           "'%s' imports default-domain opset %d; Floe reads opsets 1 to 17", what,
                           c->opset);
  return FLOE_OK;
}

static floe_code nhwc(FloeOnnxModel *m, FloeStatus *st) {
  FloeNode **keep = floe__calloc((size_t)m->num_outputs + m->num_inputs + 1, sizeof *keep);
  if (!keep) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  int k = 0;
  for (int i = 0; i < m->num_outputs; i++) keep[k++] = m->outputs[i].out.node;
  for (int i = 0; i < m->num_inputs; i++) keep[k++] = m->inputs[i].out.node;
  floe_code rc = floe__onnx_nhwc(m->g, m->first_node, keep, k, st);
  floe__free(keep);
  return rc;
}

static floe_code keep_live(FloeOnnxModel *m) {
  /* Three per value (a sequence's or optional's further parts too), and the caller's nodes. */
  FloeNode **roots = floe__calloc(3 * ((size_t)m->num_outputs + m->num_inputs) +
                                      (size_t)m->first_node + 2,
                                  sizeof *roots);
  if (!roots) return FLOE_OK; /* keeping dead nodes is harmless */
  int k = 0;
  for (int i = 0; i < m->first_node; i++) roots[k++] = m->g->nodes[i]; /* the caller's */
  for (int i = 0; i < m->num_outputs; i++) roots[k++] = m->outputs[i].out.node;
  for (int i = 0; i < m->num_inputs; i++) roots[k++] = m->inputs[i].out.node;
  for (int i = 0; i < m->num_outputs + m->num_inputs; i++) {
    const OxValue *v = i < m->num_outputs ? &m->outputs[i] : &m->inputs[i - m->num_outputs];
    for (int p = 0; p < 2; p++)
      if (v->part[p]) roots[k++] = floe_graph_find(m->g, v->part[p]);
  }
  if (m->init_target) roots[k++] = floe_graph_find(m->g, m->init_target);
  floe__graph_keep_reachable(m->g, roots, k);
  floe__free(roots);
  return FLOE_OK;
}

static char *dir_of(const char *path) {
  const char *slash = path ? strrchr(path, '/') : NULL;
  return slash ? floe__strndup(path, (size_t)(slash - path) ? (size_t)(slash - path) : 1)
               : floe__strdup(".");
}

static FloeOnnxModel *import_model(const void *buf, size_t len, const char *what,
                                   const FloeOnnxOptions *opts, const char *base_dir,
                                   FloeStatus *st) {
  what = what ? what : "(memory)";
  if (!buf && len) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s': no bytes given", what);
    return NULL;
  }
  Onnx__ModelProto *mp = (Onnx__ModelProto *)floe__onnx_unpack(
      &onnx__model_proto__descriptor, buf ? buf : (const uint8_t *)"", len, what, st);
  if (!mp) return NULL;
  OxScope scope = {0};
  OxCtx c = {0};
  c.st = st;
  c.scope = &scope;
  c.model = mp;
  c.base_dir = base_dir;
  c.trainable = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, trainable) ? opts->trainable : 0;
  c.no_fold = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, no_constant_folding)
                  ? opts->no_constant_folding
                  : 0;
  c.keep_nchw = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, keep_nchw) ? opts->keep_nchw : 0;
  c.name_prefix = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, name_prefix) ? opts->name_prefix : NULL;
  FloeGraph *into = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, graph) ? opts->graph : NULL;
  if (opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, num_bind) && opts->num_bind > 0) {
    c.bind_names = opts->bind_names;
    c.bind_values = opts->bind_values;
    c.num_bind = opts->bind_names && opts->bind_values ? opts->num_bind : 0;
  }
  FloeOnnxModel *m = floe__calloc(1, sizeof *m);
  floe_code rc;
  if (into && floe_graph_status(into) != FLOE_OK) {
    floe__free(m);
    m = NULL;
    rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "the graph to import into already has an error: %s",
                         floe_graph_error(into, NULL));
    goto fail;
  }
  if (into && m) {
    m->g = into;
    m->borrowed = 1;
    m->first_node = into->num_nodes;
  }
  if (!m || !(m->g || (m->g = floe_graph_new()))) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto fail;
  }
  c.g = m->g;
  if ((rc = read_opsets(&c, mp, what)) != FLOE_OK) goto fail;
  m->opset = c.opset;
  if (!mp->graph) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s': the model has no graph", what);
    goto fail;
  }
  if ((rc = add_values(&c, m, mp->graph)) != FLOE_OK) goto fail;
  for (size_t i = 0; i < mp->graph->n_node; i++)
    if ((rc = map_node(&c, mp->graph->node[i])) != FLOE_OK) goto fail;
  if ((rc = bind_outputs(&c, m, mp->graph)) != FLOE_OK) goto fail;
  if (c.num_var_inits) {
    FloeNode *init = floe_variables_initializer(m->g, "onnx_init");
    if (!init || !(m->init_target = floe__strdup(floe_node_name(init)))) {
      rc = ox_check(&c);
      if (rc == FLOE_OK) rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
      goto fail;
    }
  }
  /* Nodes that folding or the mappers left without consumers go: the graph holds what the
   * outputs (and the variables' initialisers) need. */
  if (!c.keep_nchw && (rc = nhwc(m, st)) != FLOE_OK) goto fail;
  if ((rc = keep_live(m)) != FLOE_OK) goto fail;
  scope_free(&scope);
  ox_vals_free(&c);
  protobuf_c_message_free_unpacked(&mp->base, &floe__onnx_pb_alloc);
  return m;

fail:
  if (floe_status_code(st) == FLOE_OK) /* never an error without a message */
    floe_status_set(st, rc != FLOE_OK ? rc : FLOE_INTERNAL, "%s",
                    m && m->g && floe_graph_status(m->g) != FLOE_OK
                        ? floe_graph_error(m->g, NULL)
                        : "the import failed without saying why (a bug: please report it)");
  floe__status_prefix(st, "importing '%s'", what);
  if (m && m->borrowed) floe_graph_clear_error(m->g); /* it had none before */
  scope_free(&scope);
  ox_vals_free(&c);
  protobuf_c_message_free_unpacked(&mp->base, &floe__onnx_pb_alloc);
  floe_onnx_model_free(m);
  return NULL;
}

FloeOnnxModel *floe_onnx_import(const void *buf, size_t len, const char *what,
                                const FloeOnnxOptions *opts, FloeStatus *status) {
  const char *dir = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, base_dir) ? opts->base_dir : NULL;
  return import_model(buf, len, what, opts, dir ? dir : ".", status);
}

FloeOnnxModel *floe_onnx_import_file(const char *path, const FloeOnnxOptions *opts,
                                     FloeStatus *status) {
  if (!path) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "no model path given");
    return NULL;
  }
  uint8_t *buf;
  size_t len;
  if (floe__file_read_all(path, &buf, &len, status) != FLOE_OK) return NULL;
  const char *dir = opts && FLOE_HAS_FIELD(opts, FloeOnnxOptions, base_dir) ? opts->base_dir : NULL;
  char *own = dir ? NULL : dir_of(path);
  FloeOnnxModel *m = import_model(buf, len, path, opts, dir ? dir : own ? own : ".", status);
  floe__free(own);
  floe__free(buf);
  return m;
}
