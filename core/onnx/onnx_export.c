/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_export.c - a Floe inference graph written as an ONNX ModelProto (floe_onnx_export).
 *
 * The nodes the graph outputs need are walked after their inputs; each becomes ONNX nodes:
 * a Placeholder a graph input, a Const an initializer, the rest through the table at the
 * bottom. Floe's NHWC convolutions and pools run in ONNX (NCHW) between two Transposes, with
 * constant HWIO filters stored as OIHW; LSTMCell is its formula in MatMul, Split, Sigmoid,
 * Tanh, Mul and Add. A node with no mapping fails the export (nothing is written), naming
 * the node and its op. Every protobuf-c struct and string is allocated in one list freed
 * after packing, so the unwinding is one call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "onnx_internal.h"

#define EX_OPSET_MIN 13 /* Split's sizes and Softmax's one axis are inputs / semantics of 13 */
#define EX_OPSET_MAX 17
#define EX_IR_VERSION 8 /* what opsets 13 to 17 need; ONNX Runtime reads it */

typedef struct Ex {
  const FloeGraph *g;
  FloeStatus *st;
  floe_code rc;
  void **allocs; /* everything below, freed by ex_free */
  size_t nalloc, capalloc;
  Onnx__NodeProto **nodes;
  size_t nnodes, capnodes;
  Onnx__TensorProto **inits;
  size_t ninits, capinits;
  Onnx__ValueInfoProto **inputs, **outputs;
  size_t ninputs, capinputs, noutputs, capoutputs;
  int opset;
  /* NHWC values made by to_nhwc and the NCHW values they came from: a pool feeding a
   * convolution transposes back and forth, and to_nchw then reuses the NCHW value. */
  struct LayoutPair {
    const char *nhwc, *nchw;
  } *layout;
  size_t nlayout, caplayout;
} Ex;

void floe_onnx_export_options_init(FloeOnnxExportOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->opset = 13;
}

static int ex_failed(Ex *e) { return e->rc != FLOE_OK; }

static void ex_fail(Ex *e, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);
static void ex_fail(Ex *e, floe_code code, const char *fmt, ...) {
  if (ex_failed(e)) return; /* the first error is the one reported */
  va_list ap;
  va_start(ap, fmt);
  char *msg = floe__vasprintf(fmt, ap);
  va_end(ap);
  e->rc = floe_status_set(e->st, code, "%s", msg ? msg : "out of memory");
  floe__free(msg);
}

static void *ex_alloc(Ex *e, size_t n) {
  if (ex_failed(e)) return NULL;
  if (e->nalloc == e->capalloc) {
    size_t cap = e->capalloc ? 2 * e->capalloc : 256;
    void **a = floe__realloc(e->allocs, cap * sizeof *a);
    if (!a) goto oom;
    e->allocs = a, e->capalloc = cap;
  }
  void *p = floe__calloc(1, n ? n : 1);
  if (!p) goto oom;
  e->allocs[e->nalloc++] = p;
  return p;
oom:
  ex_fail(e, FLOE_NO_MEMORY, "out of memory building the ONNX model");
  return NULL;
}

static char *ex_strf(Ex *e, const char *fmt, ...) FLOE__PRINTF(2, 3);
static char *ex_strf(Ex *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *tmp = floe__vasprintf(fmt, ap);
  va_end(ap);
  char *s = tmp ? ex_alloc(e, strlen(tmp) + 1) : NULL;
  if (s) strcpy(s, tmp);
  else ex_fail(e, FLOE_NO_MEMORY, "out of memory building the ONNX model");
  floe__free(tmp);
  return s;
}

/* Appends p to the array *arr of *n (capacity *cap), all from floe__realloc (freed by ex_free). */
static void ex_push(Ex *e, void ***arr, size_t *n, size_t *cap, void *p) {
  if (ex_failed(e) || !p) return;
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    void **a = floe__realloc(*arr, c * sizeof *a);
    if (!a) {
      ex_fail(e, FLOE_NO_MEMORY, "out of memory building the ONNX model");
      return;
    }
    *arr = a, *cap = c;
  }
  (*arr)[(*n)++] = p;
}

static void ex_free(Ex *e) {
  for (size_t i = 0; i < e->nalloc; i++) floe__free(e->allocs[i]);
  floe__free(e->allocs);
  floe__free(e->nodes);
  floe__free(e->inits);
  floe__free(e->inputs);
  floe__free(e->outputs);
  floe__free(e->layout);
}

/* The ONNX name of output k of n: the node's name for output 0, "name:k" after it (the
 * names `floe run --fetch` takes). */
static char *value_name(Ex *e, FloeOutput v) {
  const char *nm = floe_node_name(v.node);
  return v.index ? ex_strf(e, "%s:%d", nm, v.index) : ex_strf(e, "%s", nm);
}

static int onnx_dtype_of(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case FLOE_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case FLOE_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case FLOE_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case FLOE_I8: return ONNX__TENSOR_PROTO__DATA_TYPE__INT8;
    case FLOE_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case FLOE_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case FLOE_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case FLOE_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    default: return 0;
  }
}

/* ---- building blocks ---- */

/* A new node of op_type named `name` with outputs `out` (n_out names) and inputs `in`. */
static Onnx__NodeProto *ex_node(Ex *e, const char *op_type, const char *name,
                                const char *const *in, int n_in, const char *const *out,
                                int n_out) {
  Onnx__NodeProto *n = ex_alloc(e, sizeof *n);
  char **ins = ex_alloc(e, (size_t)n_in * sizeof *ins);
  char **outs = ex_alloc(e, (size_t)n_out * sizeof *outs);
  if (!n || !ins || !outs) return NULL;
  onnx__node_proto__init(n);
  for (int i = 0; i < n_in; i++) ins[i] = (char *)in[i];
  for (int i = 0; i < n_out; i++) outs[i] = (char *)out[i];
  n->op_type = ex_strf(e, "%s", op_type);
  n->name = ex_strf(e, "%s", name);
  n->input = ins, n->n_input = (size_t)n_in;
  n->output = outs, n->n_output = (size_t)n_out;
  ex_push(e, (void ***)&e->nodes, &e->nnodes, &e->capnodes, n);
  return ex_failed(e) ? NULL : n;
}

/* One node of one output; returns the output's name (`out`, copied). */
static const char *ex_op(Ex *e, const char *op_type, const char *out, const char *a,
                         const char *b) {
  const char *in[2] = {a, b};
  const char *o = ex_strf(e, "%s", out);
  ex_node(e, op_type, o, in, b ? 2 : 1, &o, 1);
  return ex_failed(e) ? NULL : o;
}

static Onnx__AttributeProto *ex_attr(Ex *e, Onnx__NodeProto *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type) {
  if (!n) return NULL;
  Onnx__AttributeProto *a = ex_alloc(e, sizeof *a);
  Onnx__AttributeProto **arr = ex_alloc(e, (n->n_attribute + 1) * sizeof *arr);
  if (!a || !arr) return NULL;
  onnx__attribute_proto__init(a);
  a->name = ex_strf(e, "%s", name);
  a->has_type = 1, a->type = type;
  if (n->n_attribute) memcpy(arr, n->attribute, n->n_attribute * sizeof *arr);
  arr[n->n_attribute] = a;
  n->attribute = arr, n->n_attribute++;
  return a;
}

static void ex_attr_int(Ex *e, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
}

static void ex_attr_ints(Ex *e, Onnx__NodeProto *n, const char *name, const int64_t *v,
                         int count) {
  Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *c = ex_alloc(e, (size_t)count * sizeof *c);
  if (!a || !c) return;
  memcpy(c, v, (size_t)count * sizeof *c);
  a->ints = c, a->n_ints = (size_t)count;
}

static void ex_attr_str(Ex *e, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (!a) return;
  a->has_s = 1;
  a->s.data = (uint8_t *)ex_strf(e, "%s", v);
  a->s.len = strlen(v);
}

/* An initializer `name` of dtype dt, dims, from `bytes` (copied; little-endian as in memory). */
static const char *ex_init(Ex *e, const char *name, FloeDType dt, const int64_t *dims, int rank,
                           const void *bytes, size_t len) {
  Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
  int64_t *d = ex_alloc(e, (size_t)rank * sizeof *d);
  uint8_t *data = ex_alloc(e, len);
  if (!t || !d || !data) return NULL;
  onnx__tensor_proto__init(t);
  if (rank) memcpy(d, dims, (size_t)rank * sizeof *d);
  if (len) memcpy(data, bytes, len);
  t->name = ex_strf(e, "%s", name);
  t->dims = d, t->n_dims = (size_t)rank;
  t->has_data_type = 1, t->data_type = onnx_dtype_of(dt);
  t->has_raw_data = 1, t->raw_data.data = data, t->raw_data.len = len;
  ex_push(e, (void ***)&e->inits, &e->ninits, &e->capinits, t);
  return ex_failed(e) ? NULL : t->name;
}

static const char *ex_init_i64(Ex *e, const char *name, const int64_t *v, int n) {
  const int64_t d[1] = {n};
  return ex_init(e, name, FLOE_I64, d, 1, v, (size_t)n * sizeof *v);
}

/* A value description (graph input or output): dtype and what is known of the shape; an
 * unknown dimension gets the symbolic name "<value>_d<i>". */
static Onnx__ValueInfoProto *ex_value_info(Ex *e, const char *name, FloeDType dt, FloeShape s) {
  Onnx__ValueInfoProto *vi = ex_alloc(e, sizeof *vi);
  Onnx__TypeProto *tp = ex_alloc(e, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof *tt);
  if (!vi || !tp || !tt) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  vi->name = ex_strf(e, "%s", name);
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1, tt->elem_type = onnx_dtype_of(dt);
  if (s.rank != FLOE_RANK_UNKNOWN) {
    Onnx__TensorShapeProto *sp = ex_alloc(e, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims = ex_alloc(e, (size_t)s.rank * sizeof *dims);
    if (!sp || !dims) return NULL;
    onnx__tensor_shape_proto__init(sp);
    for (int i = 0; i < s.rank; i++) {
      Onnx__TensorShapeProto__Dimension *d = ex_alloc(e, sizeof *d);
      if (!d) return NULL;
      onnx__tensor_shape_proto__dimension__init(d);
      if (s.dims[i] == FLOE_DIM_UNKNOWN) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d->dim_param = ex_strf(e, "%s_d%d", name, i);
      } else {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = s.dims[i];
      }
      dims[i] = d;
    }
    sp->dim = dims, sp->n_dim = (size_t)s.rank;
    tt->shape = sp;
  }
  return ex_failed(e) ? NULL : vi;
}

/* ---- reading Floe nodes ---- */

static const char *op_of(FloeOutput v) { return floe_node_op(v.node); }

/* The tensor of a Const input (borrowed from the graph), or NULL. */
static FloeTensor *const_value(FloeOutput v) {
  if (strcmp(op_of(v), "Const") != 0) return NULL;
  const FloeAttrValue *a = floe__node_attr(v.node, "value", FLOE_ATTR_TENSOR);
  return a ? a->u.tensor : NULL;
}

/* A constant integer input (i32 or i64) as int64 values into out (max n); its count, or -1
 * after failing the export with a message naming node n and the input. */
static int const_ints(Ex *e, const FloeNode *n, int input, int64_t *out, int max) {
  FloeOutput v = floe_node_input(n, input);
  FloeTensor *t = const_value(v);
  FloeDType dt = t ? floe_tensor_dtype(t) : FLOE_DTYPE_INVALID;
  int64_t count = t ? floe_tensor_num_elements(t) : 0;
  if (!t || (dt != FLOE_I32 && dt != FLOE_I64) || count > max) {
    ex_fail(e, FLOE_UNIMPLEMENTED,
            "node '%s' (op %s): input %d must be a constant integer tensor of at most %d "
            "elements to export to ONNX (it is %s '%s'); freeze the graph (floe train "
            "--export) or fold it first",
            floe_node_name(n), floe_node_op(n), input, max, op_of(v), floe_node_name(v.node));
    return -1;
  }
  const void *d = floe_tensor_data(t);
  for (int64_t i = 0; i < count; i++)
    out[i] = dt == FLOE_I32 ? ((const int32_t *)d)[i] : ((const int64_t *)d)[i];
  return (int)count;
}

static int64_t attr_int(const FloeNode *n, const char *name, int64_t dflt) {
  const FloeAttrValue *a = floe__node_attr(n, name, FLOE_ATTR_INT);
  return a ? a->u.i : dflt;
}

static double attr_float(const FloeNode *n, const char *name, double dflt) {
  const FloeAttrValue *a = floe__node_attr(n, name, FLOE_ATTR_FLOAT);
  return a ? a->u.f : dflt;
}

/* ---- the mappers: each adds the ONNX nodes computing n's outputs under their names ---- */

typedef void (*Mapper)(Ex *e, const FloeNode *n, const char *const *in, const char *const *out);

static void map_same(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  ex_node(e, floe_node_op(n), floe_node_name(n), in, floe_node_num_inputs(n), out, 1);
}

static void map_softmax(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  Onnx__NodeProto *o = ex_node(e, "Softmax", floe_node_name(n), in, 1, out, 1);
  ex_attr_int(e, o, "axis", attr_int(n, "axis", -1)); /* opset 13: one axis, as Floe's */
}

static void map_matmul(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *ab[2] = {in[0], in[1]};
  const char *flags[2] = {"transpose_a", "transpose_b"};
  for (int k = 0; k < 2; k++) {
    if (!floe__node_attr_bool(n, flags[k], false)) continue;
    FloeShape s = floe_node_output_shape(floe_node_input(n, k).node, floe_node_input(n, k).index);
    if (s.rank != 2) {
      ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op MatMul): %s of an operand whose rank is not "
              "known to be 2 has no ONNX mapping here", floe_node_name(n), flags[k]);
      return;
    }
    const char *t = ex_op(e, "Transpose", ex_strf(e, "%s:onnx_t%d", floe_node_name(n), k), ab[k], NULL);
    if (t) ex_attr_ints(e, e->nodes[e->nnodes - 1], "perm", (const int64_t[]){1, 0}, 2);
    ab[k] = t;
  }
  ex_node(e, "MatMul", floe_node_name(n), ab, 2, out, 1);
}

static int is_nchw(const FloeNode *n) { return !strcmp(floe__node_attr_str(n, "data_format"), "NCHW"); }

static void map_bias_add(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *b = in[1];
  FloeShape s = floe_node_output_shape(n, 0);
  if (is_nchw(n)) { /* the bias runs along dimension 1: [C] -> [C, 1, ..., 1] */
    if (s.rank == FLOE_RANK_UNKNOWN) {
      ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op BiasAdd): NCHW of unknown rank has no ONNX "
              "mapping here", floe_node_name(n));
      return;
    }
    int64_t shape[FLOE_MAX_DIMS] = {-1};
    for (int i = 1; i + 1 < s.rank; i++) shape[i] = 1;
    const char *sh = ex_init_i64(e, ex_strf(e, "%s:onnx_bias_shape", floe_node_name(n)), shape,
                                 s.rank - 1);
    b = ex_op(e, "Reshape", ex_strf(e, "%s:onnx_bias", floe_node_name(n)), in[1], sh);
  }
  const char *ab[2] = {in[0], b};
  ex_node(e, "Add", floe_node_name(n), ab, 2, out, 1);
}

/* in (NHWC) transposed to NCHW, named after the node. */
static const char *to_nchw(Ex *e, const FloeNode *n, const char *in) {
  for (size_t i = 0; in && i < e->nlayout; i++)
    if (!strcmp(e->layout[i].nhwc, in)) return e->layout[i].nchw;
  const char *t = ex_op(e, "Transpose", ex_strf(e, "%s:onnx_nchw", floe_node_name(n)), in, NULL);
  if (t) ex_attr_ints(e, e->nodes[e->nnodes - 1], "perm", (const int64_t[]){0, 3, 1, 2}, 4);
  return t;
}

/* The op's NCHW result `y` back to NHWC as out. */
static void to_nhwc(Ex *e, const FloeNode *n, const char *y, const char *out) {
  Onnx__NodeProto *t = ex_node(e, "Transpose", ex_strf(e, "%s:onnx_nhwc", floe_node_name(n)),
                               &y, 1, &out, 1);
  ex_attr_ints(e, t, "perm", (const int64_t[]){0, 2, 3, 1}, 4);
  if (ex_failed(e)) return;
  if (e->nlayout == e->caplayout) {
    size_t cap = e->caplayout ? 2 * e->caplayout : 16;
    struct LayoutPair *a = floe__realloc(e->layout, cap * sizeof *a);
    if (!a) return; /* only an optimisation: the next to_nchw transposes again */
    e->layout = a, e->caplayout = cap;
  }
  e->layout[e->nlayout++] = (struct LayoutPair){out, y};
}

/* strides / ksize / dilations [1, h, w, 1] (NHWC) or [1, 1, h, w] (NCHW) -> [h, w]. */
static int spatial(Ex *e, const FloeNode *n, const char *attr, int64_t *hw) {
  const FloeAttrValue *a = floe__node_attr(n, attr, FLOE_ATTR_INT_LIST);
  int off = is_nchw(n) ? 2 : 1;
  if (!a || a->u.ilist.n != 4) {
    ex_fail(e, FLOE_INVALID_ARGUMENT, "node '%s' (op %s): attribute %s must have 4 values",
            floe_node_name(n), floe_node_op(n), attr);
    return -1;
  }
  hw[0] = a->u.ilist.v[off], hw[1] = a->u.ilist.v[off + 1];
  return 0;
}

/* Floe's padding "SAME" puts the odd pixel at the end, ONNX's SAME_UPPER; "VALID" is no pads. */
static void set_padding(Ex *e, const FloeNode *n, Onnx__NodeProto *o) {
  const char *p = floe__node_attr_str(n, "padding");
  if (!strcmp(p, "SAME")) ex_attr_str(e, o, "auto_pad", "SAME_UPPER");
  else if (!strcmp(p, "VALID")) ex_attr_str(e, o, "auto_pad", "VALID");
  else ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op %s): padding '%s' has no ONNX mapping here",
               floe_node_name(n), floe_node_op(n), p);
}

static void map_conv2d(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *nm = floe_node_name(n);
  int nchw = is_nchw(n);
  int64_t strides[2], dil[2];
  if (spatial(e, n, "strides", strides) || spatial(e, n, "dilations", dil)) return;
  /* The filter: HWIO in Floe, OIHW in ONNX; a constant one is stored transposed. */
  const char *w;
  FloeTensor *ft = const_value(floe_node_input(n, 1));
  if (ft && floe_tensor_rank(ft) == 4 && floe_tensor_dtype(ft) == FLOE_F32) {
    const int64_t *d = floe_tensor_dims(ft); /* H, W, I, O */
    int64_t H = d[0], W = d[1], I = d[2], O = d[3];
    float *buf = floe__malloc((size_t)(H * W * I * O) * sizeof *buf + 1);
    if (!buf) {
      ex_fail(e, FLOE_NO_MEMORY, "node '%s': out of memory transposing the filter", nm);
      return;
    }
    const float *src = floe_tensor_data(ft);
    for (int64_t h = 0; h < H; h++)
      for (int64_t x = 0; x < W; x++)
        for (int64_t i = 0; i < I; i++)
          for (int64_t o = 0; o < O; o++)
            buf[((o * I + i) * H + h) * W + x] = src[((h * W + x) * I + i) * O + o];
    const int64_t od[4] = {O, I, H, W};
    w = ex_init(e, ex_strf(e, "%s:onnx_oihw", nm), FLOE_F32, od, 4, buf,
                (size_t)(H * W * I * O) * sizeof *buf);
    floe__free(buf);
  } else {
    w = ex_op(e, "Transpose", ex_strf(e, "%s:onnx_oihw", nm), in[1], NULL);
    if (w) ex_attr_ints(e, e->nodes[e->nnodes - 1], "perm", (const int64_t[]){3, 2, 0, 1}, 4);
  }
  const char *x = nchw ? in[0] : to_nchw(e, n, in[0]);
  const char *y = nchw ? out[0] : ex_strf(e, "%s:onnx_conv", nm);
  const char *xw[2] = {x, w};
  Onnx__NodeProto *c = ex_node(e, "Conv", nm, xw, 2, &y, 1);
  ex_attr_ints(e, c, "strides", strides, 2);
  ex_attr_ints(e, c, "dilations", dil, 2);
  set_padding(e, n, c);
  if (!nchw) to_nhwc(e, n, y, out[0]);
}

static void map_pool(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *nm = floe_node_name(n);
  int nchw = is_nchw(n);
  int64_t k[2], strides[2];
  if (spatial(e, n, "ksize", k) || spatial(e, n, "strides", strides)) return;
  const char *x = nchw ? in[0] : to_nchw(e, n, in[0]);
  const char *y = nchw ? out[0] : ex_strf(e, "%s:onnx_pool", nm);
  int avg = !strcmp(floe_node_op(n), "AvgPool");
  Onnx__NodeProto *p = ex_node(e, avg ? "AveragePool" : "MaxPool", nm, &x, 1, &y, 1);
  ex_attr_ints(e, p, "kernel_shape", k, 2);
  ex_attr_ints(e, p, "strides", strides, 2);
  set_padding(e, n, p);
  /* Floe's AvgPool divides by the pixels inside the image (TensorFlow's): count_include_pad 0,
   * ONNX's default. */
  if (!nchw) to_nhwc(e, n, y, out[0]);
}

/* ONNX wants int64 shapes: a constant one is stored so, a computed one is Cast. */
static const char *int64_input(Ex *e, const FloeNode *n, int input, const char *in) {
  FloeOutput v = floe_node_input(n, input);
  FloeTensor *t = const_value(v);
  if (t && floe_tensor_dtype(t) == FLOE_I64) return in;
  if (t && floe_tensor_dtype(t) == FLOE_I32 && floe_tensor_rank(t) <= 1) {
    int64_t vals[FLOE_MAX_DIMS * 4];
    int c = const_ints(e, n, input, vals, FLOE_MAX_DIMS * 4);
    if (c < 0) return NULL;
    if (floe_tensor_rank(t) == 0) {
      return ex_init(e, ex_strf(e, "%s:onnx_i64_%d", floe_node_name(n), input), FLOE_I64, NULL, 0,
                     vals, sizeof vals[0]);
    }
    return ex_init_i64(e, ex_strf(e, "%s:onnx_i64_%d", floe_node_name(n), input), vals, c);
  }
  const char *c = ex_op(e, "Cast", ex_strf(e, "%s:onnx_i64_%d", floe_node_name(n), input), in, NULL);
  ex_attr_int(e, e->nodes[e->nnodes - 1], "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
  return c;
}

static void map_reshape(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *ab[2] = {in[0], int64_input(e, n, 1, in[1])};
  ex_node(e, "Reshape", floe_node_name(n), ab, 2, out, 1);
}

static void map_transpose(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  int64_t perm[FLOE_MAX_DIMS];
  int c = const_ints(e, n, 1, perm, FLOE_MAX_DIMS);
  if (c < 0) return;
  Onnx__NodeProto *t = ex_node(e, "Transpose", floe_node_name(n), in, 1, out, 1);
  ex_attr_ints(e, t, "perm", perm, c);
}

static void map_concat(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  int nv = floe_node_num_inputs(n) - 1; /* the values, then the axis */
  int64_t axis;
  if (const_ints(e, n, nv, &axis, 1) != 1) {
    ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op Concat): the axis must be one constant integer",
            floe_node_name(n));
    return;
  }
  Onnx__NodeProto *c = ex_node(e, "Concat", floe_node_name(n), in, nv, out, 1);
  ex_attr_int(e, c, "axis", axis);
}

static void map_split(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  int64_t axis;
  if (const_ints(e, n, 1, &axis, 1) != 1) { /* Split(value, axis) */
    ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op Split): the axis must be one constant integer",
            floe_node_name(n));
    return;
  }
  /* Opset 13 splits into equal parts by the number of outputs, as Floe's num_split. */
  Onnx__NodeProto *s = ex_node(e, "Split", floe_node_name(n), in, 1, out,
                               floe_node_num_outputs(n));
  ex_attr_int(e, s, "axis", axis);
}

static void map_gather(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  Onnx__NodeProto *g = ex_node(e, "Gather", floe_node_name(n), in, 2, out, 1);
  ex_attr_int(e, g, "axis", attr_int(n, "axis", 0));
}

/* LSTMCell (ops_rnn.def): gates = [x, h] @ w + b in the order i, f, g, o; outputs h, c and
 * act = [i, f, g, o] after their nonlinearities. */
static void map_lstm_cell(Ex *e, const FloeNode *n, const char *const *in, const char *const *out) {
  const char *nm = floe_node_name(n);
  FloeDType dt = floe_node_output_dtype(n, 0);
  const char *xh[2] = {in[0], in[1]};
  const char *cat = ex_strf(e, "%s:onnx_xh", nm);
  Onnx__NodeProto *c = ex_node(e, "Concat", cat, xh, 2, &cat, 1);
  ex_attr_int(e, c, "axis", 1);
  const char *mm = ex_op(e, "MatMul", ex_strf(e, "%s:onnx_mm", nm), cat, in[3]);
  const char *gates = ex_op(e, "Add", ex_strf(e, "%s:onnx_gates", nm), mm, in[4]);
  const char *part[4];
  static const char *gate_names[4] = {"i", "f", "g", "o"};
  for (int k = 0; k < 4; k++) part[k] = ex_strf(e, "%s:onnx_%s_pre", nm, gate_names[k]);
  Onnx__NodeProto *s = ex_node(e, "Split", ex_strf(e, "%s:onnx_split", nm), &gates, 1, part, 4);
  ex_attr_int(e, s, "axis", 1);
  double fb = attr_float(n, "forget_bias", 0.0);
  if (fb != 0.0) {
    const char *fbn = ex_strf(e, "%s:onnx_forget_bias", nm);
    if (dt == FLOE_F64) ex_init(e, fbn, dt, NULL, 0, &fb, sizeof fb);
    else {
      float f = (float)fb;
      ex_init(e, fbn, dt, NULL, 0, &f, sizeof f);
    }
    part[1] = ex_op(e, "Add", ex_strf(e, "%s:onnx_f_biased", nm), part[1], fbn);
  }
  const char *gi = ex_op(e, "Sigmoid", ex_strf(e, "%s:onnx_i", nm), part[0], NULL);
  const char *gf = ex_op(e, "Sigmoid", ex_strf(e, "%s:onnx_f", nm), part[1], NULL);
  const char *gg = ex_op(e, "Tanh", ex_strf(e, "%s:onnx_g", nm), part[2], NULL);
  const char *go = ex_op(e, "Sigmoid", ex_strf(e, "%s:onnx_o", nm), part[3], NULL);
  const char *fc = ex_op(e, "Mul", ex_strf(e, "%s:onnx_fc", nm), gf, in[2]);
  const char *ig = ex_op(e, "Mul", ex_strf(e, "%s:onnx_ig", nm), gi, gg);
  ex_op(e, "Add", out[1], fc, ig);
  const char *tc = ex_op(e, "Tanh", ex_strf(e, "%s:onnx_tanh_c", nm), out[1], NULL);
  ex_op(e, "Mul", out[0], go, tc);
  const char *act[4] = {gi, gf, gg, go};
  Onnx__NodeProto *a = ex_node(e, "Concat", ex_strf(e, "%s:onnx_act", nm), act, 4, &out[2], 1);
  ex_attr_int(e, a, "axis", 1);
}

static const struct {
  const char *op;
  Mapper map;
} mappers[] = {
    {"Identity", map_same}, {"Add", map_same},          {"Sub", map_same},
    {"Mul", map_same},      {"Div", map_same},          {"Neg", map_same},
    {"Exp", map_same},      {"Log", map_same},          {"Sqrt", map_same},
    {"Relu", map_same},     {"Sigmoid", map_same},      {"Tanh", map_same},
    {"Softmax", map_softmax}, {"MatMul", map_matmul},   {"BiasAdd", map_bias_add},
    {"Conv2D", map_conv2d}, {"MaxPool", map_pool},      {"AvgPool", map_pool},
    {"Reshape", map_reshape}, {"Transpose", map_transpose}, {"Concat", map_concat},
    {"Split", map_split},   {"Gather", map_gather},     {"LSTMCell", map_lstm_cell},
};

static Mapper find_mapper(const char *op) {
  for (size_t i = 0; i < sizeof mappers / sizeof mappers[0]; i++)
    if (!strcmp(mappers[i].op, op)) return mappers[i].map;
  return NULL;
}

/* ---- the driver ---- */

/* Whether a kept node (index >= from, or kept[] set) or a graph output reads value `name`. */
static int value_read(const Ex *e, const char *name, const char *kept) {
  for (size_t j = 0; j < e->noutputs; j++)
    if (!strcmp(e->outputs[j]->name, name)) return 1;
  for (size_t j = 0; j < e->nnodes; j++) {
    if (kept && !kept[j]) continue;
    for (size_t k = 0; k < e->nodes[j]->n_input; k++)
      if (!strcmp(e->nodes[j]->input[k], name)) return 1;
  }
  return 0;
}

/* Drops nodes whose outputs nothing reads (the transpose back to NHWC of a pool that feeds a
 * convolution, an LSTMCell's unread gate activations), last to first so chains go too. */
static void drop_dead_nodes(Ex *e) {
  char *kept = floe__malloc(e->nnodes + 1);
  if (!kept) return; /* only a clean-up */
  memset(kept, 1, e->nnodes + 1);
  for (size_t i = e->nnodes; i-- > 0;) {
    int live = 0;
    for (size_t k = 0; k < e->nodes[i]->n_output && !live; k++)
      live = value_read(e, e->nodes[i]->output[k], kept);
    kept[i] = (char)live;
  }
  size_t n = 0;
  for (size_t i = 0; i < e->nnodes; i++)
    if (kept[i]) e->nodes[n++] = e->nodes[i];
  e->nnodes = n;
  floe__free(kept);
}

/* Drops initializers no node reads (a constant filter stored transposed leaves its HWIO
 * original unread): ONNX Runtime warns about each. */
static void drop_unread_initializers(Ex *e) {
  size_t kept = 0;
  for (size_t i = 0; i < e->ninits; i++) {
    if (value_read(e, e->inits[i]->name, NULL)) e->inits[kept++] = e->inits[i];
  }
  e->ninits = kept;
}

/* Parses "node" or "node:k" into *v; 0 when g has no such output. */
static int find_output(const FloeGraph *g, const char *s, FloeOutput *v) {
  const char *colon = strrchr(s, ':');
  char *name = colon ? floe__strndup(s, (size_t)(colon - s)) : floe__strdup(s);
  if (!name) return 0;
  FloeNode *n = floe_graph_find(g, name);
  floe__free(name);
  int k = 0;
  if (colon) {
    char *end;
    long l = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || l < 0) return 0;
    k = (int)l;
  }
  if (!n || k >= floe_node_num_outputs(n)) return 0;
  *v = floe_out(n, k);
  return 1;
}

/* The outputs to export: the caller's, or every output of each node that no other node
 * consumes (data or control), Placeholders, Consts and NoOps aside. */
static FloeOutput *choose_outputs(Ex *e, const FloeOnnxExportOptions *o, int *count) {
  const FloeGraph *g = e->g;
  int nn = floe_graph_num_nodes(g);
  FloeOutput *outs = NULL;
  if (o && o->outputs && o->num_outputs > 0) {
    outs = ex_alloc(e, (size_t)o->num_outputs * sizeof *outs);
    if (!outs) return NULL;
    for (int i = 0; i < o->num_outputs; i++) {
      if (!o->outputs[i] || !find_output(g, o->outputs[i], &outs[i])) {
        ex_fail(e, FLOE_NOT_FOUND, "output '%s' is not an output of the graph (\"node\" or "
                "\"node:k\")", o->outputs[i] ? o->outputs[i] : "(null)");
        return NULL;
      }
    }
    *count = o->num_outputs;
    return outs;
  }
  char *used = ex_alloc(e, (size_t)nn);
  if (!used) return NULL;
  int total = 0;
  for (int i = 0; i < nn; i++) {
    FloeNode *n = floe_graph_node(g, i);
    for (int j = 0; j < floe_node_num_inputs(n); j++) used[floe_node_input(n, j).node->id] = 1;
    for (int j = 0; j < floe_node_num_control_inputs(n); j++)
      used[floe_node_control_input(n, j)->id] = 1;
  }
  for (int pass = 0; pass < 2; pass++) {
    int k = 0;
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      const char *op = floe_node_op(n);
      if (used[i] || !strcmp(op, "Placeholder") || !strcmp(op, "Const")) continue;
      for (int j = 0; j < floe_node_num_outputs(n); j++, k++)
        if (pass) outs[k] = floe_out(n, j);
    }
    if (!pass) {
      total = k;
      if (!k) {
        ex_fail(e, FLOE_INVALID_ARGUMENT, "the graph has no output to export (no node other "
                "than Placeholders and Consts that nothing consumes); name the outputs");
        return NULL;
      }
      outs = ex_alloc(e, (size_t)k * sizeof *outs);
      if (!outs) return NULL;
    }
  }
  *count = total;
  return outs;
}

/* Node ids that the outputs need, each after its inputs (depth-first, iterative). */
static int *needed_in_order(Ex *e, const FloeOutput *outs, int nout, int *count) {
  int nn = floe_graph_num_nodes(e->g);
  char *state = ex_alloc(e, (size_t)nn); /* 0 new, 1 on the stack, 2 done */
  int *order = ex_alloc(e, (size_t)nn * sizeof *order);
  int *stack = ex_alloc(e, (size_t)nn * sizeof *stack), *next = ex_alloc(e, (size_t)nn * sizeof *next);
  if (!state || !order || !stack || !next) return NULL;
  int n_order = 0;
  for (int r = 0; r < nout; r++) {
    int sp = 0;
    if (state[outs[r].node->id]) continue;
    stack[sp++] = outs[r].node->id;
    state[outs[r].node->id] = 1;
    next[outs[r].node->id] = 0;
    while (sp) {
      int id = stack[sp - 1];
      FloeNode *n = floe_graph_node(e->g, id);
      if (next[id] < floe_node_num_inputs(n)) {
        int in = floe_node_input(n, next[id]++).node->id;
        if (state[in] == 1) {
          ex_fail(e, FLOE_UNIMPLEMENTED, "node '%s' (op %s) is on a cycle (a loop); ONNX export "
                  "takes graphs without loops", floe_node_name(n), floe_node_op(n));
          return NULL;
        }
        if (!state[in]) state[in] = 1, next[in] = 0, stack[sp++] = in;
        continue;
      }
      state[id] = 2;
      order[n_order++] = id;
      sp--;
    }
  }
  *count = n_order;
  return order;
}

static int check_opts(const FloeOnnxExportOptions *o, FloeStatus *st) {
  if (o && o->struct_size < sizeof(size_t))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "ONNX export: options.struct_size is %zu; "
                           "call floe_onnx_export_options_init first", o->struct_size);
  int opset = o ? o->opset : 13;
  if (opset < EX_OPSET_MIN || opset > EX_OPSET_MAX)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "ONNX export: opset %d is not supported "
                           "(%d to %d)", opset, EX_OPSET_MIN, EX_OPSET_MAX);
  return FLOE_OK;
}

floe_code floe_onnx_export(const FloeGraph *g, const FloeOnnxExportOptions *opts, void **buf,
                           size_t *len, FloeStatus *status) {
  if (!g || !buf || !len)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "ONNX export: graph, buf and len "
                           "must not be NULL");
  *buf = NULL, *len = 0;
  if (check_opts(opts, status) != FLOE_OK) return floe_status_code(status);
  if (floe_graph_status(g) != FLOE_OK)
    return floe_status_set(status, FLOE_FAILED_PRECONDITION, "ONNX export: the graph has an "
                           "error: %s", floe_graph_error(g, NULL));
  Ex e = {.g = g, .st = status, .rc = FLOE_OK, .opset = opts ? opts->opset : 13};
  int nout = 0, norder = 0;
  FloeOutput *outs = choose_outputs(&e, opts, &nout);
  int *order = outs ? needed_in_order(&e, outs, nout, &norder) : NULL;
  for (int i = 0; order && i < norder && !ex_failed(&e); i++) {
    FloeNode *n = floe_graph_node(g, order[i]);
    const char *op = floe_node_op(n);
    int ni = floe_node_num_inputs(n), no = floe_node_num_outputs(n);
    for (int k = 0; k < no; k++) {
      if (!onnx_dtype_of(floe_node_output_dtype(n, k)))
        ex_fail(&e, FLOE_UNIMPLEMENTED, "node '%s' (op %s): output %d has dtype %s, which has no "
                "ONNX tensor type", floe_node_name(n), op, k,
                floe_dtype_name(floe_node_output_dtype(n, k)));
    }
    if (!strcmp(op, "Placeholder")) {
      Onnx__ValueInfoProto *vi = ex_value_info(&e, floe_node_name(n), floe_node_output_dtype(n, 0),
                                               floe_node_output_shape(n, 0));
      ex_push(&e, (void ***)&e.inputs, &e.ninputs, &e.capinputs, vi);
      continue;
    }
    if (!strcmp(op, "Const")) {
      FloeTensor *t = const_value(floe_out(n, 0));
      if (!t) {
        ex_fail(&e, FLOE_INVALID_ARGUMENT, "node '%s' (op Const) has no value", floe_node_name(n));
        break;
      }
      ex_init(&e, floe_node_name(n), floe_tensor_dtype(t), floe_tensor_dims(t),
              floe_tensor_rank(t), floe_tensor_data(t), floe_tensor_nbytes(t));
      continue;
    }
    Mapper map = find_mapper(op);
    if (!map) {
      ex_fail(&e, FLOE_UNIMPLEMENTED, "node '%s' (op %s): no ONNX mapping for op %s; nothing was "
              "written (the ops the exporter maps are listed in core/onnx/README.md)",
              floe_node_name(n), op, op);
      break;
    }
    const char **in = ex_alloc(&e, (size_t)(ni + 1) * sizeof *in);
    const char **out = ex_alloc(&e, (size_t)(no + 1) * sizeof *out);
    for (int k = 0; in && k < ni; k++) in[k] = value_name(&e, floe_node_input(n, k));
    for (int k = 0; out && k < no; k++) out[k] = value_name(&e, floe_out(n, k));
    if (ex_failed(&e)) break;
    map(&e, n, in, out);
  }
  for (int r = 0; r < nout && !ex_failed(&e); r++) {
    Onnx__ValueInfoProto *vi = ex_value_info(&e, value_name(&e, outs[r]),
                                             floe_node_output_dtype(outs[r].node, outs[r].index),
                                             floe_node_output_shape(outs[r].node, outs[r].index));
    ex_push(&e, (void ***)&e.outputs, &e.noutputs, &e.capoutputs, vi);
  }
  floe_code rc = e.rc;
  if (rc == FLOE_OK) {
    drop_dead_nodes(&e);
    drop_unread_initializers(&e);
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    opset.domain = "", opset.has_version = 1, opset.version = e.opset;
    model.has_ir_version = 1, model.ir_version = EX_IR_VERSION;
    model.producer_name = "floe";
    model.producer_version = PACKAGE_VERSION;
    model.opset_import = opsets, model.n_opset_import = 1;
    model.graph = &graph;
    graph.name = "floe";
    graph.node = e.nodes, graph.n_node = e.nnodes;
    graph.initializer = e.inits, graph.n_initializer = e.ninits;
    graph.input = e.inputs, graph.n_input = e.ninputs;
    graph.output = e.outputs, graph.n_output = e.noutputs;
    size_t n = onnx__model_proto__get_packed_size(&model);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) rc = floe_status_set(status, FLOE_NO_MEMORY, "ONNX export: out of memory packing "
                                 "%zu bytes", n);
    else {
      onnx__model_proto__pack(&model, b);
      *buf = b, *len = n;
    }
  }
  ex_free(&e);
  return rc;
}

floe_code floe_onnx_export_file(const FloeGraph *g, const char *path,
                                const FloeOnnxExportOptions *opts, FloeStatus *status) {
  if (!path) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "ONNX export: path is NULL");
  void *buf = NULL;
  size_t len = 0;
  floe_code rc = floe_onnx_export(g, opts, &buf, &len, status);
  if (rc != FLOE_OK) {
    floe__status_prefix(status, "%s", path);
    return rc;
  }
  /* Written beside the target and renamed over it: a failure never leaves half a model. */
  rc = floe__file_replace(path, buf, len, status);
  free(buf);
  return rc;
}
