/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_model.c - ONNX bytes to protobuf-c messages and TensorProtos to Floe tensors.
 *
 * protobuf-c says only "failed" on a malformed message, so on failure the bytes are walked
 * again field by field against the same descriptors to name the field and byte offset where
 * reading stopped. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx_internal.h"

static void *pb_alloc(void *data, size_t size) {
  (void)data;
  return floe__malloc(size ? size : 1);
}
static void pb_free(void *data, void *p) {
  (void)data;
  floe__free(p);
}
ProtobufCAllocator floe__onnx_pb_alloc = {pb_alloc, pb_free, NULL};


/* ------------------------------------------------------------------------------------ */
/* Where a message stops being readable. */

typedef struct WireErr {
  size_t offset;
  char path[256];
  const char *why;
} WireErr;

/* A varint at p[*i] (< end); 0 when it does not end before end or runs past 10 bytes. */
static int read_varint(const uint8_t *p, size_t end, size_t *i, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*i >= end) return 0;
    uint8_t b = p[(*i)++];
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

static void path_push(char *path, size_t cap, const char *name, int index) {
  size_t n = strlen(path);
  if (index >= 0)
    snprintf(path + n, cap - n, "%s%s[%d]", n ? "." : "", name, index);
  else
    snprintf(path + n, cap - n, "%s%s", n ? "." : "", name);
}

/* Walks one message in p[begin, end); 1 when readable, else 0 with e filled. */
static int wire_walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t begin,
                     size_t end, WireErr *e, int depth) {
  int counts[64] = {0};
  size_t i = begin;
  if (depth > 64) {
    e->offset = begin;
    e->why = "messages nested more than 64 deep";
    return 0;
  }
  while (i < end) {
    size_t at = i;
    uint64_t tag, v;
    if (!read_varint(p, end, &i, &tag)) {
      e->offset = at;
      e->why = "a field tag runs past the end of its message";
      return 0;
    }
    uint32_t id = (uint32_t)(tag >> 3), wt = (uint32_t)(tag & 7);
    const ProtobufCFieldDescriptor *f =
        id ? protobuf_c_message_descriptor_get_field(d, id) : NULL;
    if (id == 0 || tag >> 32) {
      e->offset = at;
      e->why = "field number 0 or out of range";
      return 0;
    }
    int fi = f ? (int)(f - d->fields) : -1;
    int index = f && f->label == PROTOBUF_C_LABEL_REPEATED && fi < 64 ? counts[fi]++ : -1;
    size_t plen = strlen(e->path);
    char unknown[32];
    snprintf(unknown, sizeof unknown, "#%u", id);
    path_push(e->path, sizeof e->path, f ? f->name : unknown, index);
    switch (wt) {
      case 0:
        if (!read_varint(p, end, &i, &v)) {
          e->offset = at;
          e->why = "a number runs past the end of its message";
          return 0;
        }
        break;
      case 1:
      case 5: {
        size_t w = wt == 1 ? 8 : 4;
        if (end - i < w) {
          e->offset = at;
          e->why = "a fixed-width value runs past the end of its message";
          return 0;
        }
        i += w;
        break;
      }
      case 2: {
        if (!read_varint(p, end, &i, &v) || v > end - i) {
          /* A cut message: name the innermost field the cut falls in when there is one. */
          if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && i <= end &&
              !wire_walk(f->descriptor, p, i, end, e, depth + 1))
            return 0;
          e->offset = at;
          e->why = "a length-delimited field runs past the end of its message (truncated?)";
          return 0;
        }
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
            !wire_walk(f->descriptor, p, i, i + (size_t)v, e, depth + 1))
          return 0;
        i += (size_t)v;
        break;
      }
      default:
        e->offset = at;
        e->why = "an unknown wire type (not a protobuf message?)";
        return 0;
    }
    if (f && wt != 2 && (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING ||
                         f->type == PROTOBUF_C_TYPE_BYTES)) {
      e->offset = at;
      e->why = "a scalar where a message or string belongs";
      return 0;
    }
    e->path[plen] = '\0';
  }
  return 1;
}

/* protobuf-c unpacks nested messages by recursion, a few hundred bytes of stack a level: a
 * model of If nodes each holding the next in then_branch, 3,000 messages deep (196 KB),
 * overflowed an 8 MB stack before any check of Floe's ran. So the nesting is measured first,
 * by this walk with an explicit stack of at most MAX_MESSAGE_DEPTH levels (about 40 KB of
 * protobuf-c's stack; the importer's own limit of 32 nested subgraphs needs about 100).
 * Returns 1, with *offset the byte where the limit is passed, when the nesting is deeper;
 * 0 otherwise, including on malformed input, which the unpacking then reports. */
#define MAX_MESSAGE_DEPTH 128
static int nesting_too_deep(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                            size_t *offset) {
  struct {
    const ProtobufCMessageDescriptor *d;
    size_t end;
  } stack[MAX_MESSAGE_DEPTH];
  int top = 0;
  stack[0].d = d;
  stack[0].end = len;
  size_t i = 0;
  while (top >= 0) {
    if (i >= stack[top].end) {
      if (i > stack[top].end) return 0;
      top--;
      continue;
    }
    size_t at = i;
    uint64_t tag, v;
    if (!read_varint(p, stack[top].end, &i, &tag)) return 0;
    uint32_t id = (uint32_t)(tag >> 3), wt = (uint32_t)(tag & 7);
    if (id == 0 || tag >> 32) return 0;
    if (wt == 0) {
      if (!read_varint(p, stack[top].end, &i, &v)) return 0;
    } else if (wt == 1 || wt == 5) {
      size_t w = wt == 1 ? 8 : 4;
      if (stack[top].end - i < w) return 0;
      i += w;
    } else if (wt == 2) {
      if (!read_varint(p, stack[top].end, &i, &v) || v > stack[top].end - i) return 0;
      const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(stack[top].d, id);
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (top + 1 >= MAX_MESSAGE_DEPTH) {
          *offset = at;
          return 1;
        }
        top++;
        stack[top].d = f->descriptor;
        stack[top].end = i + (size_t)v;
        continue; /* i stays at the start of the nested message */
      }
      i += (size_t)v;
    } else {
      return 0;
    }
  }
  return 0;
}

ProtobufCMessage *floe__onnx_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                                    size_t len, const char *what, FloeStatus *st) {
  size_t deep_at = 0;
  if (nesting_too_deep(d, buf, len, &deep_at)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "'%s': ONNX %s nests messages more than %d deep (at byte offset %zu of %zu; "
                    "subgraphs inside subgraphs, or nested sequence/map types): Floe reads at "
                    "most %d levels",
                    what, d->short_name, MAX_MESSAGE_DEPTH, deep_at, len, MAX_MESSAGE_DEPTH);
    return NULL;
  }
  ProtobufCMessage *m = protobuf_c_message_unpack(d, &floe__onnx_pb_alloc, len, buf);
  if (m) return m;
  WireErr e = {0};
  if (!wire_walk(d, buf, 0, len, &e, 0)) {
    floe_status_set(st, FLOE_DATA_LOSS, "'%s': not a readable ONNX %s: at byte offset %zu of %zu%s%s: %s",
                    what, d->short_name, e.offset, len, e.path[0] ? ", field " : "", e.path,
                    e.why);
    return NULL;
  }
  /* Readable wire format: protobuf-c failed on memory or on a value (such as a bad enum). */
  floe_status_set(st, FLOE_DATA_LOSS,
                  "'%s': not a readable ONNX %s (%zu bytes): a field holds a value of the wrong "
                  "kind, or memory ran out",
                  what, d->short_name, len);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* TensorProto -> FloeTensor */

FloeDType floe__onnx_dtype(int32_t t) {
  switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return FLOE_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: return FLOE_U8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return FLOE_I8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return FLOE_I32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return FLOE_I64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return FLOE_BOOL;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return FLOE_F16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return FLOE_F64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return FLOE_BF16;
    default: return FLOE_DTYPE_INVALID;
  }
}

const char *floe__onnx_dtype_name(int32_t t) {
  static const char *const names[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",      "UINT16",
                                      "INT16",     "INT32",  "INT64",     "STRING",    "BOOL",
                                      "FLOAT16",   "DOUBLE", "UINT32",    "UINT64",    "COMPLEX64",
                                      "COMPLEX128", "BFLOAT16"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof names[0]) ? names[t] : "?";
}

/* External data: "location" relative to base_dir, optional "offset" and "length". */
static floe_code read_external(const Onnx__TensorProto *t, const char *base_dir, void *dst,
                               size_t nbytes, const char *tname, FloeStatus *st) {
  const char *loc = NULL;
  long long off = 0, length = -1;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *kv = t->external_data[i];
    if (!kv->key || !kv->value) continue;
    if (!strcmp(kv->key, "location")) loc = kv->value;
    if (!strcmp(kv->key, "offset")) off = strtoll(kv->value, NULL, 10);
    if (!strcmp(kv->key, "length")) length = strtoll(kv->value, NULL, 10);
  }
  if (!loc || !*loc || strstr(loc, "..") || loc[0] == '/')
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "initializer '%s': external data needs a relative 'location' inside "
                           "the model's directory",
                           tname);
  if (length >= 0 && (size_t)length != nbytes)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "initializer '%s': external data length %lld, but its shape needs %zu "
                           "bytes",
                           tname, length, nbytes);
  char *path = floe__asprintf("%s/%s", base_dir ? base_dir : ".", loc);
  if (!path) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  int fd;
  uint64_t size;
  floe_code rc = floe__file_open_read(path, &fd, &size, st);
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "initializer '%s': external data", tname);
    floe__free(path);
    return rc;
  }
  size_t got = 0;
  while (off >= 0 && (uint64_t)off <= size && got < nbytes) {
    ssize_t r = pread(fd, (char *)dst + got, nbytes - got, (off_t)off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != nbytes)
    rc = floe_status_set(st, FLOE_DATA_LOSS,
                         "initializer '%s': external data '%s' has no %zu bytes at offset %lld",
                         tname, path, nbytes, off);
  floe__free(path);
  return rc;
}

FloeTensor *floe__onnx_tensor(const Onnx__TensorProto *t, const char *base_dir, FloeStatus *st) {
  const char *tname = t->name && *t->name ? t->name : "(unnamed)";
  FloeDType dt = floe__onnx_dtype(t->data_type);
  if (t->data_type == 0) { /* UNDEFINED: no data type was written (an empty file reads so) */
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "tensor '%s' has no data type (UNDEFINED): an empty or damaged TensorProto",
                    tname);
    return NULL;
  }
  if (dt == FLOE_DTYPE_INVALID) {
    floe_status_set(st, FLOE_UNIMPLEMENTED,
                    "tensor '%s': data type %s (%d) is not one Floe supports (FLOAT, DOUBLE, "
                    "FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64, BOOL)",
                    tname, floe__onnx_dtype_name(t->data_type), (int)t->data_type);
    return NULL;
  }
  if (t->n_dims > FLOE_MAX_DIMS) {
    floe_status_set(st, FLOE_UNIMPLEMENTED, "tensor '%s': rank %zu is above Floe's limit of %d",
                    tname, t->n_dims, FLOE_MAX_DIMS);
    return NULL;
  }
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0 || (t->dims[i] && n > INT64_MAX / 16 / t->dims[i])) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT, "tensor '%s': dimension %zu is %lld", tname, i,
                      (long long)t->dims[i]);
      return NULL;
    }
    n *= t->dims[i];
  }
  size_t es = floe_dtype_size(dt), nbytes = (size_t)n * es;
  /* Count the values the typed fields hold before allocating: a corrupt file must not make
   * us allocate its claimed shape for nothing. */
  size_t have;
  const char *field;
  if (t->has_data_location && t->data_location == 1) {
    have = (size_t)n;
    field = "external data";
  } else if (t->has_raw_data) {
    have = t->raw_data.len / es;
    field = "raw_data";
    if (t->raw_data.len != nbytes) {
      floe_status_set(st, FLOE_DATA_LOSS,
                      "tensor '%s': raw_data has %zu bytes, but %s of %lld elements needs %zu",
                      tname, t->raw_data.len, floe__onnx_dtype_name(t->data_type), (long long)n,
                      nbytes);
      return NULL;
    }
  } else {
    switch (dt) {
      case FLOE_F32: have = t->n_float_data; field = "float_data"; break;
      case FLOE_F64: have = t->n_double_data; field = "double_data"; break;
      case FLOE_I64: have = t->n_int64_data; field = "int64_data"; break;
      default: have = t->n_int32_data; field = "int32_data"; break;
    }
    if (have != (size_t)n) {
      floe_status_set(st, FLOE_DATA_LOSS, "tensor '%s': %s has %zu values, but its shape has %lld",
                      tname, field, have, (long long)n);
      return NULL;
    }
  }
  int64_t dims[FLOE_MAX_DIMS];
  for (size_t i = 0; i < t->n_dims; i++) dims[i] = t->dims[i];
  FloeTensor *out = floe_tensor_new(dt, (int)t->n_dims, dims, st);
  if (!out) return NULL;
  uint8_t *d = floe_tensor_data(out);
  if (t->has_data_location && t->data_location == 1) {
    if (read_external(t, base_dir, d, nbytes, tname, st) != FLOE_OK) {
      floe_tensor_release(out);
      return NULL;
    }
  } else if (t->has_raw_data) {
    if (nbytes) memcpy(d, t->raw_data.data, nbytes);
    if (dt == FLOE_BOOL)
      for (int64_t i = 0; i < n; i++) d[i] = d[i] != 0;
  } else {
    for (int64_t i = 0; i < n; i++) {
      switch (dt) {
        case FLOE_F32: ((float *)d)[i] = t->float_data[i]; break;
        case FLOE_F64: ((double *)d)[i] = t->double_data[i]; break;
        case FLOE_I64: ((int64_t *)d)[i] = t->int64_data[i]; break;
        case FLOE_I32: ((int32_t *)d)[i] = t->int32_data[i]; break;
        case FLOE_I8: ((int8_t *)d)[i] = (int8_t)t->int32_data[i]; break;
        case FLOE_U8: ((uint8_t *)d)[i] = (uint8_t)t->int32_data[i]; break;
        case FLOE_BOOL: d[i] = t->int32_data[i] != 0; break;
        case FLOE_F16:
        case FLOE_BF16: ((uint16_t *)d)[i] = (uint16_t)t->int32_data[i]; break;
        default: break;
      }
    }
  }
  return out;
}

/* ------------------------------------------------------------------------------------ */
/* .pb files of one TensorProto */

FloeTensor *floe_tensor_parse_onnx_pb(const void *buf, size_t len, const char *what,
                                      FloeStatus *status) {
  if (!buf && len) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "'%s': no bytes given", what ? what : "?");
    return NULL;
  }
  what = what ? what : "(memory)";
  Onnx__TensorProto *t = (Onnx__TensorProto *)floe__onnx_unpack(
      &onnx__tensor_proto__descriptor, buf ? buf : (const uint8_t *)"", len, what, status);
  if (!t) return NULL;
  FloeTensor *out = floe__onnx_tensor(t, NULL, status);
  if (!out) floe__status_prefix(status, "'%s'", what);
  protobuf_c_message_free_unpacked(&t->base, &floe__onnx_pb_alloc);
  return out;
}

FloeTensor *floe_tensor_load_onnx_pb(const char *path, FloeStatus *status) {
  uint8_t *buf;
  size_t len;
  if (!path) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "no path given");
    return NULL;
  }
  if (floe__file_read_all(path, &buf, &len, status) != FLOE_OK) return NULL;
  FloeTensor *t = floe_tensor_parse_onnx_pb(buf, len, path, status);
  floe__free(buf);
  return t;
}
