/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_builder.h - ONNX models built in C with protobuf-c for the tests (test_onnx) and
 * fixtures (make_onnx_mlp). Messages point into static or builder-allocated memory; ob_pack()
 * serialises and frees the builder's allocations. Exits with 99 when memory runs out. */
#ifndef FLOE_TESTS_ONNX_BUILDER_H
#define FLOE_TESTS_ONNX_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

typedef struct Model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  Onnx__NodeProto *nodes[64];
  Onnx__TensorProto *inits[32];
  Onnx__ValueInfoProto *ins[4], *outs[4];
} Model;

/* Zeroed memory freed by the next ob_pack(). */
void *onnx_builder_alloc(size_t n, size_t size);
void ob_model_init(Model *md, int opset);
Onnx__ValueInfoProto *ob_value_info(const char *name, int elem, int rank, const int64_t *dims);
/* A float input (dims < 0: unknown) and a float output of unknown shape. */
void ob_add_input(Model *md, const char *name, int rank, const int64_t *dims);
void ob_add_output(Model *md, const char *name);
/* Initializers: float as raw_data (raw = 1) or float_data; int64 [n]. Values borrowed. */
void ob_add_init(Model *md, const char *name, int rank, const int64_t *dims, const float *v, int raw);
void ob_add_int64_init(Model *md, const char *name, int64_t n, const int64_t *v);
/* An int64 scalar initializer (rank 0). */
void ob_add_int64_scalar(Model *md, const char *name, int64_t v);
/* A node of up to three inputs (NULL: fewer), one output and OB_MAX_ATTRS attributes. */
#define OB_MAX_ATTRS 12
Onnx__NodeProto *ob_add_node(Model *md, const char *op, const char *name, const char *in0,
                          const char *in1, const char *in2, const char *out);
void ob_attr_int(Onnx__NodeProto *n, const char *name, int64_t v);
void ob_attr_ints(Onnx__NodeProto *n, const char *name, const int64_t *v, size_t k);
void ob_attr_string(Onnx__NodeProto *n, const char *name, const char *v);
void ob_attr_floats(Onnx__NodeProto *n, const char *name, const float *v, size_t k);
/* An input of ONNX element type elem (dims < 0: unknown). */
void ob_add_typed_input(Model *md, const char *name, int elem, int rank, const int64_t *dims);
/* The serialised model (caller frees); frees the builder's allocations. */
uint8_t *ob_pack(Model *md, size_t *len);

#endif
