/* SPDX-License-Identifier: Apache-2.0 */
/* floe_onnx.h - importing ONNX models into Floe graphs.
 *
 * An ONNX ModelProto (IR version 3 and later, default-domain opsets 1 to 17) becomes a
 * FloeGraph: each graph input a Placeholder, each initializer a Const (or a variable with
 * `trainable`), each node one or more Floe ops. What cannot be imported is an error naming
 * the node, its op and opset; a malformed file is an error naming the byte offset and the
 * field that could not be read. Nothing here prints. */
#ifndef FLOE_ONNX_H
#define FLOE_ONNX_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FloeOnnxModel FloeOnnxModel;

typedef struct FloeOnnxOptions {
  size_t struct_size; /* sizeof(FloeOnnxOptions) */
  /* Non-zero: floating-point initializers become resource variables (VarHandleOp with an
   * initial value; see floe_onnx_model_init_target) so floe_train's machinery can update them.
   * Zero (the default): they are constants. */
  int trainable;
  /* Directory that external-data locations are relative to; NULL: the model file's own
   * directory (floe_onnx_import_file) or the working directory (floe_onnx_import). */
  const char *base_dir;
  /* Non-zero: do not evaluate constant subexpressions (nodes whose inputs are all constants)
   * while importing. Folding needs the CPU plugin; without a runtime nothing is folded. */
  int no_constant_folding;
  /* Non-zero: keep the model's NCHW convolutions and pools as they are. By default they run
   * in NHWC (what the CPU plugin's primitives take without reordering), with transposes only
   * where the layout matters (the input, before a Flatten). */
  int keep_nchw;
  /* Non-NULL: import into this graph (the caller's; the model borrows it) instead of a new
   * one, so an imported network can sit inside a larger graph: a loss and an optimiser on
   * its outputs, its inputs computed by other nodes. Nodes already in the graph are never
   * changed. On failure the graph may hold unused nodes of the partial import; its sticky
   * error is left as it was. */
  FloeGraph *graph;
  /* Graph inputs bound to existing outputs of `graph` (names are ONNX input names; dtypes
   * must match, ranks too when known): they get no placeholder. Borrowed for the call. */
  const char *const *bind_names;
  const FloeOutput *bind_values;
  int num_bind;
  /* Put in front of every node name the import makes ("resnet/"), so two models, or a model
   * and the caller's own nodes, keep apart; NULL: none. Borrowed for the call. */
  const char *name_prefix;
} FloeOnnxOptions;

FLOE_API void floe_onnx_options_init(FloeOnnxOptions *opts);

/* Imports the model file at path. Caller owns the result (floe_onnx_model_free); NULL on
 * error with status naming the file and what went wrong. opts NULL: the defaults. */
FLOE_API FloeOnnxModel *floe_onnx_import_file(const char *path, const FloeOnnxOptions *opts,
                                              FloeStatus *status);
/* The same from bytes in memory (borrowed for the call); `what` names them in errors. */
FLOE_API FloeOnnxModel *floe_onnx_import(const void *buf, size_t len, const char *what,
                                         const FloeOnnxOptions *opts, FloeStatus *status);
FLOE_API void floe_onnx_model_free(FloeOnnxModel *m); /* NULL is a no-op */

/* The imported graph, owned by the model (valid until floe_onnx_model_free). Callers may add
 * nodes to it (losses, optimisers). */
FLOE_API FloeGraph *floe_onnx_model_graph(FloeOnnxModel *m);
/* Detaches the graph: the caller now owns it (floe_graph_free); the model keeps its names.
 * NULL for a model imported into the caller's graph (FloeOnnxOptions.graph). */
FLOE_API FloeGraph *floe_onnx_model_take_graph(FloeOnnxModel *m);

/* The default-domain opset the model imports (e.g. 13). */
FLOE_API int floe_onnx_model_opset(const FloeOnnxModel *m);

/* Graph inputs that are not initializers, in the model's order. Names are the ONNX value
 * names (borrowed from the model); feed each under floe_onnx_model_input_node's name (for a
 * bound input: the output it was bound to, "node" or "node:k"). */
FLOE_API int floe_onnx_model_num_inputs(const FloeOnnxModel *m);
FLOE_API const char *floe_onnx_model_input_name(const FloeOnnxModel *m, int i);
FLOE_API const char *floe_onnx_model_input_node(const FloeOnnxModel *m, int i);
FLOE_API FloeDType floe_onnx_model_input_dtype(const FloeOnnxModel *m, int i);
FLOE_API FloeShape floe_onnx_model_input_shape(const FloeOnnxModel *m, int i);

/* Graph outputs: ONNX names and the fetch strings ("node" or "node:k") that compute them,
 * both borrowed from the model. */
FLOE_API int floe_onnx_model_num_outputs(const FloeOnnxModel *m);
FLOE_API const char *floe_onnx_model_output_name(const FloeOnnxModel *m, int i);
FLOE_API const char *floe_onnx_model_output_fetch(const FloeOnnxModel *m, int i);
FLOE_API FloeOutput floe_onnx_model_output(const FloeOnnxModel *m, int i);
/* Its dtype (a sequence's or optional's element dtype). */
FLOE_API FloeDType floe_onnx_model_output_dtype(const FloeOnnxModel *m, int i);

/* ONNX values that are not tensors cross the session boundary as several tensors, "parts":
 * a sequence as its values (every element flattened, one after the other: 1-D) then its
 * shapes ([n, rank] i64, row k the shape of element k); an optional as its value's parts
 * then a bool scalar, true when it holds a value (when not, the value parts are empty
 * tensors). Part 0 is what floe_onnx_model_input_node / _output_fetch name; the dtype
 * accessors give the element dtype. Values are numbered so kinds combine as bits. */
typedef enum FloeOnnxKind {
  FLOE_ONNX_TENSOR = 0,
  FLOE_ONNX_SEQUENCE = 1,
  FLOE_ONNX_OPTIONAL = 2,          /* an optional tensor */
  FLOE_ONNX_OPTIONAL_SEQUENCE = 3
} FloeOnnxKind;

FLOE_API FloeOnnxKind floe_onnx_model_input_kind(const FloeOnnxModel *m, int i);
FLOE_API FloeOnnxKind floe_onnx_model_output_kind(const FloeOnnxModel *m, int i);
FLOE_API int floe_onnx_kind_num_parts(FloeOnnxKind kind); /* 1, 2, 2, 3; 0 for others */
/* The feed name of part k of input i, the fetch of part k of output i (borrowed); NULL when
 * out of range. */
FLOE_API const char *floe_onnx_model_input_part(const FloeOnnxModel *m, int i, int k);
FLOE_API const char *floe_onnx_model_output_part(const FloeOnnxModel *m, int i, int k);

/* Reads a .pb of ONNX's test data holding a value of `kind` (a TensorProto, SequenceProto or
 * OptionalProto) as its parts: parts is the caller's array of floe_onnx_kind_num_parts(kind),
 * filled with tensors the caller owns. dtype: the element dtype, for an empty sequence or an
 * absent optional (which carry none); with FLOE_BF16, UINT16 data is read as bfloat16 words
 * (ONNX's test data stores bfloat16 so). Elements of one sequence must have one dtype and one
 * rank. Errors name the file. */
FLOE_API floe_code floe_onnx_load_value_pb(const char *path, FloeOnnxKind kind, FloeDType dtype,
                                           FloeTensor **parts, FloeStatus *status);

/* With `trainable`: the node to run once (as a target) to initialise the variables; NULL
 * when the model has none. Borrowed. */
FLOE_API const char *floe_onnx_model_init_target(const FloeOnnxModel *m);

/* Reads one ONNX TensorProto (the .pb files of ONNX's test data). Caller owns the tensor;
 * NULL on error with status naming the file, and the byte offset for a malformed one. */
FLOE_API FloeTensor *floe_tensor_load_onnx_pb(const char *path, FloeStatus *status);
FLOE_API FloeTensor *floe_tensor_parse_onnx_pb(const void *buf, size_t len, const char *what,
                                               FloeStatus *status);

/* ---- export (core/onnx/onnx_export.c) ----
 * A Floe inference graph (a frozen one: floe_export_frozen, `floe train --export`) written as
 * an ONNX ModelProto, IR version 8, default-domain opset `opset` (13 to 17). Placeholders
 * become graph inputs (dtype and known shape; unknown dims get symbolic names), Consts
 * initializers, and these ops ONNX nodes: Identity, Add, Sub, Mul, Div, Neg, Exp, Log, Sqrt,
 * Relu, Sigmoid, Tanh, Softmax, MatMul (transposes as Transpose nodes), BiasAdd, Conv2D,
 * MaxPool, AvgPool (NHWC ones between Transposes to and from NCHW; constant HWIO filters
 * stored as OIHW), Reshape, Transpose, Concat, Split (constant axes, shapes and perms),
 * Gather and LSTMCell (its formula in MatMul, Split, Sigmoid, Tanh, Mul, Add). A value keeps
 * its Floe name ("node", or "node:k" for output k), so ONNX outputs are fetched by the Floe
 * names. Any other op, a loop, or a dtype without an ONNX type is FLOE_UNIMPLEMENTED naming
 * the node and its op, and nothing is produced. */
typedef struct FloeOnnxExportOptions {
  size_t struct_size; /* sizeof(FloeOnnxExportOptions) */
  int opset;          /* 13 by default */
  /* The graph outputs ("node" or "node:k"), borrowed for the call; NULL or num_outputs 0:
   * every output of each node that no other node consumes (Placeholders and Consts aside). */
  const char *const *outputs;
  int num_outputs;
} FloeOnnxExportOptions;

FLOE_API void floe_onnx_export_options_init(FloeOnnxExportOptions *opts);

/* The model's bytes into *buf (malloc'd; the caller frees it with free()) and *len. g is
 * borrowed for the call and not changed; opts NULL: the defaults. On error *buf is NULL. */
FLOE_API floe_code floe_onnx_export(const FloeGraph *g, const FloeOnnxExportOptions *opts,
                                    void **buf, size_t *len, FloeStatus *status);
/* The same written to path (a temporary file beside it renamed over it: a failure leaves no
 * partial file). Errors name the path. */
FLOE_API floe_code floe_onnx_export_file(const FloeGraph *g, const char *path,
                                         const FloeOnnxExportOptions *opts, FloeStatus *status);

#ifdef __cplusplus
}
#endif
#endif
