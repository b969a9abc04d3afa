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
#include "internal.h"
#include "onnx.pb-c.h"

/* --- onnx_model.c: bytes <-> protobuf messages, TensorProto <-> FloeTensor --- */

/* Reads a whole file (floe__malloc'd, caller frees). */
floe_code floe__onnx_read_file(const char *path, uint8_t **buf, size_t *len, FloeStatus *st);
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
  FloeNode **var_inits; /* with trainable: initialiser nodes */
  int num_var_inits, cap_var_inits;
};

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

/* Op tables, each ending with {NULL, NULL, NULL}. */
extern const OxOp floe__onnx_ops_math[];
extern const OxOp floe__onnx_ops_tensor[];
extern const OxOp floe__onnx_ops_nn[];
extern const OxOp floe__onnx_ops_loss[];
extern const OxOp floe__onnx_ops_resize[]; /* onnx_ops_resize.c */

#endif
