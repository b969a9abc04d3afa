/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_builder.c - see onnx_builder.h. */
#include "onnx_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The builders' allocations, freed together once the model is packed. */
static void *arena[4096];
static int arena_n;
void *onnx_builder_alloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p || arena_n == 4096) {
    fprintf(stderr, "onnx_builder: out of memory\n");
    exit(99);
  }
  arena[arena_n++] = p;
  return p;
}
static void arena_free(void) {
  while (arena_n) free(arena[--arena_n]);
}

void ob_model_init(Model *md, int opset) {
  memset(md, 0, sizeof *md);
  onnx__model_proto__init(&md->m);
  onnx__graph_proto__init(&md->g);
  onnx__operator_set_id_proto__init(&md->opset);
  md->opset.domain = "";
  md->opset.has_version = 1;
  md->opset.version = opset;
  md->opsets[0] = &md->opset;
  md->m.n_opset_import = 1;
  md->m.opset_import = md->opsets;
  md->m.has_ir_version = 1;
  md->m.ir_version = 8;
  md->m.graph = &md->g;
  md->g.node = md->nodes;
  md->g.initializer = md->inits;
  md->g.input = md->ins;
  md->g.output = md->outs;
}

Onnx__ValueInfoProto *ob_value_info(const char *name, int elem, int rank, const int64_t *dims) {
  Onnx__ValueInfoProto *v = onnx_builder_alloc(1, sizeof *v);
  Onnx__TypeProto *t = onnx_builder_alloc(1, sizeof *t);
  Onnx__TypeProto__Tensor *tt = onnx_builder_alloc(1, sizeof *tt);
  Onnx__TensorShapeProto *s = onnx_builder_alloc(1, sizeof *s);
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(t);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(s);
  s->n_dim = (size_t)rank;
  s->dim = onnx_builder_alloc((size_t)rank + 1, sizeof *s->dim);
  for (int i = 0; i < rank; i++) {
    s->dim[i] = onnx_builder_alloc(1, sizeof **s->dim);
    onnx__tensor_shape_proto__dimension__init(s->dim[i]);
    if (dims[i] >= 0) {
      s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      s->dim[i]->dim_value = dims[i];
    } else {
      s->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      s->dim[i]->dim_param = "batch";
    }
  }
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  tt->shape = s;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  v->name = (char *)name;
  v->type = t;
  return v;
}

void ob_add_input(Model *md, const char *name, int rank, const int64_t *dims) {
  md->ins[md->g.n_input++] = ob_value_info(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims);
}

void ob_add_output(Model *md, const char *name) {
  md->outs[md->g.n_output++] = ob_value_info(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL);
  md->outs[md->g.n_output - 1]->type->tensor_type->shape = NULL;
}

/* A float initializer, as raw_data (raw = 1) or float_data. */
void ob_add_init(Model *md, const char *name, int rank, const int64_t *dims, const float *v,
                     int raw) {
  Onnx__TensorProto *t = onnx_builder_alloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  t->n_dims = (size_t)rank;
  t->dims = (int64_t *)dims;
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  if (raw) {
    t->has_raw_data = 1;
    t->raw_data.len = n * sizeof(float);
    t->raw_data.data = (uint8_t *)v;
  } else {
    t->n_float_data = n;
    t->float_data = (float *)v;
  }
  md->inits[md->g.n_initializer++] = t;
}

void ob_add_int64_init(Model *md, const char *name, int64_t n, const int64_t *v) {
  Onnx__TensorProto *t = onnx_builder_alloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  int64_t *dims = onnx_builder_alloc(1, sizeof *dims);
  dims[0] = n;
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  t->n_dims = 1;
  t->dims = dims;
  t->n_int64_data = (size_t)n;
  t->int64_data = (int64_t *)v;
  md->inits[md->g.n_initializer++] = t;
}

void ob_add_int64_scalar(Model *md, const char *name, int64_t v) {
  Onnx__TensorProto *t = onnx_builder_alloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  int64_t *val = onnx_builder_alloc(1, sizeof *val);
  *val = v;
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  t->n_dims = 0;
  t->n_int64_data = 1;
  t->int64_data = val;
  md->inits[md->g.n_initializer++] = t;
}

Onnx__NodeProto *ob_add_node(Model *md, const char *op, const char *name, const char *in0,
                                 const char *in1, const char *in2, const char *out) {
  Onnx__NodeProto *n = onnx_builder_alloc(1, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  n->input = onnx_builder_alloc(3, sizeof *n->input);
  const char *ins[3] = {in0, in1, in2};
  for (int i = 0; i < 3 && ins[i]; i++) n->input[n->n_input++] = (char *)ins[i];
  n->output = onnx_builder_alloc(1, sizeof *n->output);
  n->output[0] = (char *)out;
  n->n_output = 1;
  n->attribute = onnx_builder_alloc(OB_MAX_ATTRS, sizeof *n->attribute);
  md->nodes[md->g.n_node++] = n;
  return n;
}

void ob_attr_int(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = onnx_builder_alloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
  n->attribute[n->n_attribute++] = a;
}

void ob_attr_ints(Onnx__NodeProto *n, const char *name, const int64_t *v, size_t k) {
  Onnx__AttributeProto *a = onnx_builder_alloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = k;
  a->ints = (int64_t *)v;
  n->attribute[n->n_attribute++] = a;
}

void ob_attr_string(Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = onnx_builder_alloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = 1;
  a->s.data = (uint8_t *)v;
  a->s.len = strlen(v);
  n->attribute[n->n_attribute++] = a;
}

void ob_attr_floats(Onnx__NodeProto *n, const char *name, const float *v, size_t k) {
  Onnx__AttributeProto *a = onnx_builder_alloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
  a->n_floats = k;
  a->floats = (float *)v;
  n->attribute[n->n_attribute++] = a;
}

void ob_add_typed_input(Model *md, const char *name, int elem, int rank, const int64_t *dims) {
  md->ins[md->g.n_input++] = ob_value_info(name, elem, rank, dims);
}

/* Serialises the model (caller frees) and frees the builders' allocations. */
uint8_t *ob_pack(Model *md, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&md->m);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (!buf || onnx__model_proto__pack(&md->m, buf) != *len) {
    fprintf(stderr, "onnx_builder: packing failed\n");
    exit(99);
  }
  arena_free();
  return buf;
}

