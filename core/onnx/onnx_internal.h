/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_internal.h - the ONNX importer's internals: the parsed model (onnx_model.c), the
 * import driver and the helpers op mappers build with (onnx_import.c), and the op tables
 * (onnx_ops_*.c).
 *
 * A mapper turns one ONNX node into Floe nodes: it reads its inputs (FloeOutputs, .node NULL
 * for an omitted optional input) and attributes, builds with the ox_* helpers, and stores one
 * FloeOutput per ONNX output it produces. It returns FLOE_OK or an error set through
 * ox_fail, which names the node. */
#ifndef FLOE_ONNX_INTERNAL_H
#define FLOE_ONNX_INTERNAL_H

#include "floe/floe_onnx.h"
#include "core.h"
#include "onnx.pb-c.h"

/* --- onnx_model.c: bytes <-> protobuf messages, TensorProto <-> FloeTensor --- */

/* Unpacks a message of descriptor d; on failure st says which field at which byte offset
 * could not be read. Free with protobuf_c_message_free_unpacked(msg, &floe__onnx_pb_alloc). */
ProtobufCMessage *floe__onnx_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                                    size_t len, const char *what, FloeStatus *st);
extern ProtobufCAllocator floe__onnx_pb_alloc;
/* FloeDType of an ONNX TensorProto data type; FLOE_DTYPE_INVALID when Floe has none. */
FloeDType floe__onnx_dtype(int32_t onnx_type);
const char *floe__onnx_dtype_name(int32_t onnx_type); /* "FLOAT", "UINT16", "?" */
/* A host tensor with a TensorProto's value (raw_data, typed fields or external data under
 * base_dir). Caller owns; NULL with st naming the tensor on error. */
FloeTensor *floe__onnx_tensor(const Onnx__TensorProto *t, const char *base_dir, FloeStatus *st);

/* --- onnx_import.c: the import context and mapper helpers --- */

typedef struct OxCtx OxCtx;
typedef struct OxScope OxScope;

typedef floe_code (*OxMapFn)(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                             FloeOutput *out, int nout);

typedef struct OxOp {
  const char *domain; /* "" for the default domain */
  const char *op;
  OxMapFn map;
} OxOp;

struct OxCtx {
  FloeGraph *g;
  FloeStatus *st;
  int opset;                 /* default domain */
  int opset_training;        /* ai.onnx.preview.training, 0 when not imported */
  const char *base_dir;
  const Onnx__NodeProto *node; /* being mapped (for names and messages) */
  const char *node_name;       /* its Floe name prefix (unique) */
  int counter;                 /* suffix for this node's helper nodes */
  OxScope *scope;              /* ONNX value name -> FloeOutput, innermost first */
  const Onnx__ModelProto *model;
  int trainable;
  int no_fold; /* FloeOnnxOptions.no_constant_folding */
  int keep_nchw; /* FloeOnnxOptions.keep_nchw */
  const char *name_prefix; /* FloeOnnxOptions.name_prefix; NULL: none */
  const char *const *bind_names; /* FloeOnnxOptions' input bindings */
  const FloeOutput *bind_values;
  int num_bind;
  FloeNode **var_inits; /* with trainable: initialiser nodes */
  int num_var_inits, cap_var_inits;
  struct OxVal *vals; /* values that are not tensors (onnx_values.c) */
  int num_vals, cap_vals;
  int node_first; /* id of the first Floe node made for the node being mapped */
  int depth;      /* subgraphs being imported around the current node */
};

/* A mapper's definition, and the statement that silences the arguments it does not use. */
#define OX_MAP(fn)                                                                             \
  static floe_code fn(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,      \
                      FloeOutput *out, int nout)
#define OX_UNUSED (void)n, (void)in, (void)nin, (void)out, (void)nout

/* FLOE_OK when the node has at least `min` inputs and the first `min` are given; else an
 * error naming the node. */
floe_code ox_need(OxCtx *c, const FloeOutput *in, int nin, int min);

/* Error naming the current node, op and opset; returns code. */
floe_code ox_fail(OxCtx *c, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);

/* Attributes (n's; NULL / dflt when absent). */
const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name);
int64_t ox_int(const Onnx__NodeProto *n, const char *name, int64_t dflt);
float ox_float(const Onnx__NodeProto *n, const char *name, float dflt);
/* A string attribute copied into buf (truncated to cap-1); dflt when absent. */
const char *ox_str(const Onnx__NodeProto *n, const char *name, const char *dflt, char *buf,
                   size_t cap);
/* An ints attribute: its count (-1 when absent) and values (borrowed). */
int ox_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v);
int ox_floats(const Onnx__NodeProto *n, const char *name, const float **v);

/* Building. Names are "<node>/<op>_<k>"; the graph's sticky error carries failures, which
 * ox_check turns into the node's error. */
FloeNodeBuilder *ox_begin(OxCtx *c, const char *op);
FloeOutput ox_finish(OxCtx *c, FloeNodeBuilder *b); /* output 0 ({NULL} on error) */
FloeNode *ox_finish_node(OxCtx *c, FloeNodeBuilder *b);
floe_code ox_check(OxCtx *c); /* FLOE_OK, or the graph's error as this node's */
FloeOutput ox_unary(OxCtx *c, const char *op, FloeOutput x);
FloeOutput ox_binary(OxCtx *c, const char *op, FloeOutput x, FloeOutput y);
FloeOutput ox_const(OxCtx *c, FloeTensor *t); /* takes t's reference */
FloeOutput ox_const_i64(OxCtx *c, const int64_t *v, int n); /* 1-D */
FloeOutput ox_const_i32(OxCtx *c, const int32_t *v, int n); /* 1-D */
FloeOutput ox_scalar_i64(OxCtx *c, int64_t v);
FloeOutput ox_scalar_i32(OxCtx *c, int32_t v);
FloeOutput ox_scalar(OxCtx *c, FloeDType dt, double v); /* a scalar of dtype dt */
FloeOutput ox_cast(OxCtx *c, FloeOutput x, FloeDType dt); /* x itself when already dt */
FloeOutput ox_identity(OxCtx *c, FloeOutput x);

/* What the graph knows about a value. */
FloeDType ox_dtype(FloeOutput x);
FloeShape ox_shape(FloeOutput x);
/* The rank, or -1 after failing with a message naming the input when unknown. */
int ox_rank(OxCtx *c, FloeOutput x, const char *what);
/* The value when x comes from a Const (through Identity); borrowed; NULL otherwise. */
const FloeTensor *ox_const_value(FloeOutput x);
/* An integer Const's values as int64 (at most max); the count, or -1 when x is not a
 * constant integer tensor. */
int ox_const_ints(FloeOutput x, int64_t *v, int max);
/* Normalises axis into [0, rank) or fails naming the attribute. */
floe_code ox_axis(OxCtx *c, int64_t axis, int rank, const char *what, int *out);
int ox_present(FloeOutput x); /* the optional input was given */

/* onnx_layout.c: NCHW convolutions and pools of g rewritten to run in NHWC, transposes sunk
 * and cancelled; nodes before `first` (a caller's) and keep[] (the model's inputs and
 * outputs) are never rewritten. */
floe_code floe__onnx_nhwc(FloeGraph *g, int first, FloeNode *const *keep, int num_keep,
                          FloeStatus *st);
/* --- onnx_values.c: ONNX values that are not tensors. A sequence is carried as two tensors:
 * its elements flattened and concatenated (values, 1-D) and their shapes ([n, rank] i64); an
 * optional as its value's parts and a bool scalar, true when it holds a value. Scopes and
 * mapper inputs hold the first part (the key); ox_val finds the rest. --- */

enum { OX_TENSOR = 0, OX_SEQ = 1, OX_OPT = 2 }; /* kind bits: OX_OPT | OX_SEQ is an optional
                                                   sequence */
typedef struct OxVal {
  int kind;
  FloeOutput value;   /* the tensor; a sequence's values */
  FloeOutput shapes;  /* a sequence's element shapes, [n, rank] i64 */
  FloeOutput present; /* an optional's flag, bool scalar */
  FloeShape elem;     /* a sequence: what its elements' shape is known to be (rank -1: not) */
} OxVal;

/* The value whose key x is (a tensor when x was never registered). */
OxVal ox_val(const OxCtx *c, FloeOutput x);
/* Registers v and returns its key: v->value, or an Identity of it when that output already
 * stands for another value. */
FloeOutput ox_val_set(OxCtx *c, const OxVal *v);
int ox_kind_parts(int kind); /* the number of tensors a value of kind is carried as */
/* v's parts in order (value, shapes, present); returns their count. */
int ox_val_parts(const OxVal *v, FloeOutput *parts);
/* The inverse; elem unknown. */
OxVal ox_val_from_parts(int kind, const FloeOutput *parts);
const char *ox_kind_name(int kind); /* "tensor", "sequence", "optional", "optional sequence" */
/* The kind and element dtype of a TypeProto; -1 for a type Floe cannot carry (a map, a
 * sparse tensor, an element type Floe lacks). *dt FLOE_DTYPE_INVALID when not given. */
int ox_type_kind(const Onnx__TypeProto *tp, FloeDType *dt, FloeShape *elem);
void ox_vals_free(OxCtx *c);

/* --- onnx_import.c: subgraphs (the GraphProto attributes of If, Loop, Scan, SequenceMap) --- */

/* Imports graph attribute `attr` of the current node: a child scope binds its inputs to
 * ins[0..nin) (exactly as many as it declares), names it does not define resolve to the
 * enclosing scopes, its nodes are mapped in order and outs[0..nout) set to its outputs
 * (exactly as many as it declares). Errors name the inner node and the outer one. */
floe_code ox_subgraph(OxCtx *c, const char *attr, const OxVal *ins, int nin, OxVal *outs,
                      int nout);
/* The value named `name` in the current scope or those around it ({NULL} when none). */
FloeOutput ox_lookup(OxCtx *c, const char *name);
/* The graph attribute `attr` of the current node; NULL after failing naming it. */
const Onnx__GraphProto *ox_graph_attr(OxCtx *c, const char *attr);

/* Op tables, each ending with {NULL, NULL, NULL}. */
extern const OxOp floe__onnx_ops_math[];
extern const OxOp floe__onnx_ops_tensor[];
extern const OxOp floe__onnx_ops_nn[];
extern const OxOp floe__onnx_ops_loss[];
extern const OxOp floe__onnx_ops_quant[];

/* onnx_ops_nn.c: Floe's Conv of x and the ONNX filter w with n's Conv attributes (strides,
 * pads, auto_pad, dilations, group, kernel_shape); no bias. Shared with the quantized convs. */
floe_code floe__onnx_conv(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x, FloeOutput w,
                          FloeOutput *y);
extern const OxOp floe__onnx_ops_control[]; /* If, Loop, Scan */
extern const OxOp floe__onnx_ops_seq[];     /* sequences and optionals */
extern const OxOp floe__onnx_ops_train[];   /* ai.onnx.preview.training, random ops */
extern const OxOp floe__onnx_ops_math_signal[];
/* Indexing and data movement (onnx_ops_index.c; Einsum's mapper in onnx_ops_einsum.c). */
extern const OxOp floe__onnx_ops_index[];
floe_code floe__onnx_map_einsum(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                int nin, FloeOutput *out, int nout);
extern const OxOp floe__onnx_ops_resize[]; /* onnx_ops_resize.c */
extern const OxOp floe__onnx_ops_text[];   /* onnx_ops_text.c: TfIdfVectorizer */

#endif
