/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_values.c - ONNX values that are not tensors (sequences, optionals) as the importer
 * carries them: each is a few Floe tensors ("parts"), and a registry maps the first part, the
 * one scopes and mapper inputs hold, to the value.
 *
 * Why not TensorArrays: ONNX sequences are immutable values (SequenceInsert makes a new
 * sequence and the old one stays usable), can cross loop iterations and cond branches, and
 * are graph inputs and outputs. Two plain tensors do all of that with the ordinary ops and
 * the session API; a TensorArray is a mutable step-scoped resource that cannot be fed. */
#include <string.h>

#include "onnx_internal.h"

static int same_out(FloeOutput a, FloeOutput b) { return a.node == b.node && a.index == b.index; }

OxVal ox_val(const OxCtx *c, FloeOutput x) {
  for (int i = 0; x.node && i < c->num_vals; i++)
    if (same_out(c->vals[i].value, x)) return c->vals[i];
  OxVal v = {.kind = OX_TENSOR, .value = x, .elem = floe_shape_unknown()};
  return v;
}

static floe_code vals_push(OxCtx *c, const OxVal *v) {
  if (c->num_vals == c->cap_vals) {
    int cap = c->cap_vals ? 2 * c->cap_vals : 16;
    OxVal *a = floe__realloc(c->vals, (size_t)cap * sizeof *a);
    if (!a) return FLOE_NO_MEMORY;
    c->vals = a;
    c->cap_vals = cap;
  }
  c->vals[c->num_vals++] = *v;
  return FLOE_OK;
}

FloeOutput ox_val_set(OxCtx *c, const OxVal *v) {
  if (!v->value.node) return v->value;
  OxVal have = ox_val(c, v->value);
  if (v->kind == OX_TENSOR) {
    /* A tensor is any unregistered output; one registered as something else is copied. */
    return have.kind == OX_TENSOR ? v->value : ox_identity(c, v->value);
  }
  OxVal reg = *v;
  /* An output made before this node, or already standing for a value, may be seen as a
   * tensor (or as that value) elsewhere: the new value gets a key of its own. */
  if (have.kind != OX_TENSOR || v->value.node->id < c->node_first) {
    reg.value = ox_identity(c, v->value);
    if (!reg.value.node) return reg.value;
  }
  if (vals_push(c, &reg) != FLOE_OK) {
    floe__graph_fail(c->g, FLOE_NO_MEMORY, "out of memory");
    return (FloeOutput){NULL, 0};
  }
  return reg.value;
}

int ox_kind_parts(int kind) { return 1 + !!(kind & OX_SEQ) + !!(kind & OX_OPT); }

int ox_val_parts(const OxVal *v, FloeOutput *parts) {
  int n = 0;
  parts[n++] = v->value;
  if (v->kind & OX_SEQ) parts[n++] = v->shapes;
  if (v->kind & OX_OPT) parts[n++] = v->present;
  return n;
}

OxVal ox_val_from_parts(int kind, const FloeOutput *parts) {
  OxVal v = {.kind = kind, .value = parts[0], .elem = floe_shape_unknown()};
  int n = 1;
  if (kind & OX_SEQ) v.shapes = parts[n++];
  if (kind & OX_OPT) v.present = parts[n++];
  return v;
}

const char *ox_kind_name(int kind) {
  switch (kind) {
    case OX_TENSOR: return "tensor";
    case OX_SEQ: return "sequence";
    case OX_OPT: return "optional";
    case OX_OPT | OX_SEQ: return "optional sequence";
    default: return "?";
  }
}

static void tensor_type(const Onnx__TypeProto__Tensor *tt, FloeDType *dt, FloeShape *shape) {
  *dt = tt->has_elem_type ? floe__onnx_dtype(tt->elem_type) : FLOE_DTYPE_INVALID;
  *shape = floe_shape_unknown();
  if (!tt->shape || tt->shape->n_dim > FLOE_MAX_DIMS) return;
  shape->rank = (int32_t)tt->shape->n_dim;
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    shape->dims[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                             d->dim_value >= 0
                         ? d->dim_value
                         : FLOE_DIM_UNKNOWN;
  }
}

int ox_type_kind(const Onnx__TypeProto *tp, FloeDType *dt, FloeShape *elem) {
  *dt = FLOE_DTYPE_INVALID;
  *elem = floe_shape_unknown();
  int kind = 0;
  for (int depth = 0; tp && depth < 3; depth++) {
    switch (tp->value_case) {
      case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
        tensor_type(tp->tensor_type, dt, elem);
        if (tp->tensor_type->has_elem_type && *dt == FLOE_DTYPE_INVALID) return -1;
        return kind;
      case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        if (kind & OX_SEQ) return -1; /* a sequence of sequences */
        kind |= OX_SEQ;
        tp = tp->sequence_type->elem_type;
        break;
      case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        if (kind) return -1; /* optionals inside sequences or optionals */
        kind |= OX_OPT;
        tp = tp->optional_type->elem_type;
        break;
      default: return -1;
    }
  }
  return kind;
}

void ox_vals_free(OxCtx *c) {
  floe__free(c->vals);
  c->vals = NULL;
  c->num_vals = c->cap_vals = 0;
}

/* ------------------------------------------------------------------------------------ */
/* Test data: SequenceProto and OptionalProto files as parts */

static FloeTensor *empty_1d(FloeDType dt, FloeStatus *st) {
  int64_t zero = 0;
  return floe_tensor_new(dt, 1, &zero, st);
}

/* values and shapes of tensors ts[0..n). */
static floe_code pack_sequence(Onnx__TensorProto *const *ts, size_t n, FloeDType dt,
                               const char *what, FloeTensor **parts, FloeStatus *st) {
  FloeTensor **el = floe__calloc(n + 1, sizeof *el);
  if (!el) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  floe_code rc = FLOE_OK;
  int64_t total = 0;
  int rank = 0;
  for (size_t i = 0; i < n && rc == FLOE_OK; i++) {
    if (!(el[i] = floe__onnx_tensor(ts[i], NULL, st))) {
      rc = floe_status_code(st);
      floe__status_prefix(st, "'%s': element %zu", what, i);
      break;
    }
    FloeShape s = floe_tensor_shape(el[i]);
    if (i == 0 && dt == FLOE_DTYPE_INVALID) dt = floe_tensor_dtype(el[i]);
    if (i == 0) rank = s.rank;
    if (floe_tensor_dtype(el[i]) != dt || s.rank != rank)
      rc = floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "'%s': element %zu is %s of rank %d; Floe's sequences hold tensors "
                           "of one dtype (%s) and one rank (%d)",
                           what, i, floe_dtype_name(floe_tensor_dtype(el[i])), s.rank,
                           floe_dtype_name(dt), rank);
    total += floe_tensor_num_elements(el[i]);
  }
  if (rc == FLOE_OK && dt == FLOE_DTYPE_INVALID)
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s': an empty sequence of unknown dtype",
                         what);
  if (rc == FLOE_OK) {
    int64_t sd[2] = {(int64_t)n, rank};
    parts[0] = floe_tensor_new(dt, 1, &total, st);
    parts[1] = parts[0] ? floe_tensor_new(FLOE_I64, 2, sd, st) : NULL;
    if (!parts[1]) rc = floe_status_code(st);
  }
  size_t off = 0, esz = dt != FLOE_DTYPE_INVALID ? floe_dtype_size(dt) : 0;
  for (size_t i = 0; rc == FLOE_OK && i < n; i++) {
    size_t bytes = (size_t)floe_tensor_num_elements(el[i]) * esz;
    if (bytes) memcpy((char *)floe_tensor_data(parts[0]) + off, floe_tensor_data(el[i]), bytes);
    off += bytes;
    FloeShape s = floe_tensor_shape(el[i]);
    for (int d = 0; d < rank; d++)
      ((int64_t *)floe_tensor_data(parts[1]))[i * (size_t)rank + (size_t)d] = s.dims[d];
  }
  for (size_t i = 0; i < n; i++) floe_tensor_release(el[i]);
  floe__free(el);
  if (rc != FLOE_OK) {
    floe_tensor_release(parts[0]);
    floe_tensor_release(parts[1]);
    parts[0] = parts[1] = NULL;
  }
  return rc;
}

static floe_code parse_value(const uint8_t *buf, size_t len, FloeOnnxKind kind, FloeDType dt,
                             const char *what, FloeTensor **parts, FloeStatus *st) {
  const ProtobufCMessageDescriptor *d = kind == FLOE_ONNX_TENSOR     ? &onnx__tensor_proto__descriptor
                                        : kind == FLOE_ONNX_SEQUENCE ? &onnx__sequence_proto__descriptor
                                                                     : &onnx__optional_proto__descriptor;
  ProtobufCMessage *msg = floe__onnx_unpack(d, buf, len, what, st);
  if (!msg) return floe_status_code(st);
  floe_code rc = FLOE_OK;
  if (kind == FLOE_ONNX_TENSOR) {
    /* ONNX's test data stores bfloat16 values as UINT16 (NumPy has no bfloat16): the same
     * 16-bit words, read as BF16 when that is what the model's value is. */
    Onnx__TensorProto *tp = (Onnx__TensorProto *)msg;
    if (dt == FLOE_BF16 && tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT16)
      tp->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    if (!(parts[0] = floe__onnx_tensor(tp, NULL, st))) {
      rc = floe_status_code(st);
      floe__status_prefix(st, "'%s'", what);
    }
  } else if (kind == FLOE_ONNX_SEQUENCE) {
    Onnx__SequenceProto *sp = (Onnx__SequenceProto *)msg;
    if (sp->n_sequence_values || sp->n_optional_values)
      rc = floe_status_set(st, FLOE_UNIMPLEMENTED, "'%s': a sequence of sequences or optionals",
                           what);
    else
      rc = pack_sequence(sp->tensor_values, sp->n_tensor_values, dt, what, parts, st);
  } else {
    Onnx__OptionalProto *op = (Onnx__OptionalProto *)msg;
    int seq = kind == FLOE_ONNX_OPTIONAL_SEQUENCE, n = seq ? 2 : 1;
    if (seq && op->sequence_value) {
      const Onnx__SequenceProto *sp = op->sequence_value;
      rc = pack_sequence(sp->tensor_values, sp->n_tensor_values, dt, what, parts, st);
    } else if (!seq && op->tensor_value) {
      if (!(parts[0] = floe__onnx_tensor(op->tensor_value, NULL, st))) rc = floe_status_code(st);
    } else if (op->tensor_value || op->sequence_value || op->optional_value) {
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s': the optional holds a value of "
                           "another kind than the model's %s", what, seq ? "sequence" : "tensor");
    } else if (dt == FLOE_DTYPE_INVALID) {
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "'%s': an absent optional of unknown dtype",
                           what);
    } else {
      /* Absent: empty parts. */
      int64_t sd[2] = {0, 0};
      parts[0] = empty_1d(dt, st);
      if (seq && parts[0]) parts[1] = floe_tensor_new(FLOE_I64, 2, sd, st);
      if (!parts[0] || (seq && !parts[1])) rc = floe_status_code(st);
    }
    int has = op->tensor_value || op->sequence_value;
    if (rc == FLOE_OK && !(parts[n] = floe_tensor_new(FLOE_BOOL, 0, NULL, st)))
      rc = floe_status_code(st);
    if (rc == FLOE_OK) *(uint8_t *)floe_tensor_data(parts[n]) = (uint8_t)has;
    if (rc != FLOE_OK)
      for (int k = 0; k <= n; k++) {
        floe_tensor_release(parts[k]);
        parts[k] = NULL;
      }
  }
  protobuf_c_message_free_unpacked(msg, &floe__onnx_pb_alloc);
  return rc;
}

floe_code floe_onnx_load_value_pb(const char *path, FloeOnnxKind kind, FloeDType dtype,
                                  FloeTensor **parts, FloeStatus *status) {
  int n = floe_onnx_kind_num_parts(kind);
  if (!path || !parts || n == 0)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "floe_onnx_load_value_pb: needs a path, a kind and a parts array");
  for (int k = 0; k < n; k++) parts[k] = NULL;
  uint8_t *buf;
  size_t len;
  if (floe__file_read_all(path, &buf, &len, status) != FLOE_OK) return floe_status_code(status);
  floe_code rc = parse_value(buf, len, kind, dtype, path, parts, status);
  floe__free(buf);
  return rc;
}
