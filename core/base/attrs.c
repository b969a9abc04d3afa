/* SPDX-License-Identifier: Apache-2.0 */
/* attrs.c - attribute values and a node's small attribute table. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

void floe__attrs_init(FloeAttrs *a) { memset(a, 0, sizeof *a); }

void floe__attr_value_clear(FloeAttrValue *v) {
  switch (v->kind) {
    case FLOE_ATTR_STRING: floe__free(v->u.s); break;
    case FLOE_ATTR_TENSOR: floe_tensor_release(v->u.tensor); break;
    case FLOE_ATTR_INT_LIST: floe__free(v->u.ilist.v); break;
    case FLOE_ATTR_FLOAT_LIST: floe__free(v->u.flist.v); break;
    case FLOE_ATTR_TYPE_LIST: floe__free(v->u.tlist.v); break;
    case FLOE_ATTR_SHAPE_LIST: floe__free(v->u.slist.v); break;
    default: break;
  }
  memset(v, 0, sizeof *v);
}

void floe__attrs_clear(FloeAttrs *a) {
  for (int i = 0; i < a->n; i++) {
    floe__free(a->names[i]);
    floe__attr_value_clear(&a->values[i]);
  }
  floe__free(a->names);
  floe__free(a->values);
  floe__attrs_init(a);
}

/* Copies an array of n elements of size esize; NULL src with n == 0 stays NULL. */
static floe_code dup_array(void **dst, const void *src, size_t n, size_t esize, FloeStatus *st) {
  *dst = NULL;
  if (n == 0) return FLOE_OK;
  *dst = floe__malloc(n * esize);
  if (!*dst) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying an attribute");
  memcpy(*dst, src, n * esize);
  return FLOE_OK;
}

floe_code floe__attr_value_copy(FloeAttrValue *dst, const FloeAttrValue *src, FloeStatus *st) {
  *dst = *src;
  switch (src->kind) {
    case FLOE_ATTR_STRING:
      dst->u.s = floe__strdup(src->u.s ? src->u.s : "");
      if (!dst->u.s) {
        dst->kind = FLOE_ATTR_NONE;
        return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying an attribute");
      }
      return FLOE_OK;
    case FLOE_ATTR_TENSOR: floe_tensor_retain(dst->u.tensor); return FLOE_OK;
    case FLOE_ATTR_INT_LIST:
      return dup_array((void **)&dst->u.ilist.v, src->u.ilist.v, src->u.ilist.n, sizeof(int64_t),
                       st) == FLOE_OK
                 ? FLOE_OK
                 : (dst->kind = FLOE_ATTR_NONE, FLOE_NO_MEMORY);
    case FLOE_ATTR_FLOAT_LIST:
      return dup_array((void **)&dst->u.flist.v, src->u.flist.v, src->u.flist.n, sizeof(double),
                       st) == FLOE_OK
                 ? FLOE_OK
                 : (dst->kind = FLOE_ATTR_NONE, FLOE_NO_MEMORY);
    case FLOE_ATTR_TYPE_LIST:
      return dup_array((void **)&dst->u.tlist.v, src->u.tlist.v, src->u.tlist.n,
                       sizeof(FloeDType), st) == FLOE_OK
                 ? FLOE_OK
                 : (dst->kind = FLOE_ATTR_NONE, FLOE_NO_MEMORY);
    case FLOE_ATTR_SHAPE_LIST:
      return dup_array((void **)&dst->u.slist.v, src->u.slist.v, src->u.slist.n,
                       sizeof(FloeShape), st) == FLOE_OK
                 ? FLOE_OK
                 : (dst->kind = FLOE_ATTR_NONE, FLOE_NO_MEMORY);
    default: return FLOE_OK;
  }
}

floe_code floe__attrs_copy(FloeAttrs *dst, const FloeAttrs *src, FloeStatus *st) {
  floe__attrs_init(dst);
  for (int i = 0; i < src->n; i++) {
    FloeAttrValue v;
    if (floe__attr_value_copy(&v, &src->values[i], st) != FLOE_OK) goto err_clear;
    if (floe__attrs_set(dst, src->names[i], &v, st) != FLOE_OK) {
      floe__attr_value_clear(&v);
      goto err_clear;
    }
  }
  return FLOE_OK;

err_clear:
  floe__attrs_clear(dst);
  return FLOE_NO_MEMORY;
}

static int find_index(const FloeAttrs *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->names[i], name) == 0) return i;
  return -1;
}

const FloeAttrValue *floe__attrs_get(const FloeAttrs *a, const char *name) {
  int i = find_index(a, name);
  return i < 0 ? NULL : &a->values[i];
}

floe_code floe__attrs_set(FloeAttrs *a, const char *name, FloeAttrValue *v, FloeStatus *st) {
  int i = find_index(a, name);
  if (i >= 0) {
    floe__attr_value_clear(&a->values[i]);
    a->values[i] = *v;
    memset(v, 0, sizeof *v);
    return FLOE_OK;
  }
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 4;
    char **names = floe__realloc(a->names, (size_t)cap * sizeof *names);
    if (!names) goto err_oom;
    a->names = names;
    FloeAttrValue *values = floe__realloc(a->values, (size_t)cap * sizeof *values);
    if (!values) goto err_oom;
    a->values = values;
    a->cap = cap;
  }
  char *copy = floe__strdup(name);
  if (!copy) goto err_oom;
  a->names[a->n] = copy;
  a->values[a->n] = *v;
  a->n++;
  memset(v, 0, sizeof *v);
  return FLOE_OK;

err_oom:
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory setting attribute '%s'", name);
}

/* Ranks and known dims; dims past the rank are ignored (they may hold anything). */
static bool shape_equal(const FloeShape *a, const FloeShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool floe__attr_value_equal(const FloeAttrValue *a, const FloeAttrValue *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case FLOE_ATTR_NONE: return true;
    case FLOE_ATTR_INT: return a->u.i == b->u.i;
    case FLOE_ATTR_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
    case FLOE_ATTR_BOOL: return !a->u.b == !b->u.b;
    case FLOE_ATTR_STRING: return strcmp(a->u.s, b->u.s) == 0;
    case FLOE_ATTR_TYPE: return a->u.type == b->u.type;
    case FLOE_ATTR_SHAPE: return shape_equal(&a->u.shape, &b->u.shape);
    case FLOE_ATTR_TENSOR: return floe__tensor_equal(a->u.tensor, b->u.tensor);
    case FLOE_ATTR_INT_LIST:
      return a->u.ilist.n == b->u.ilist.n &&
             (a->u.ilist.n == 0 ||
              memcmp(a->u.ilist.v, b->u.ilist.v, a->u.ilist.n * sizeof(int64_t)) == 0);
    case FLOE_ATTR_FLOAT_LIST:
      return a->u.flist.n == b->u.flist.n &&
             (a->u.flist.n == 0 ||
              memcmp(a->u.flist.v, b->u.flist.v, a->u.flist.n * sizeof(double)) == 0);
    case FLOE_ATTR_TYPE_LIST:
      return a->u.tlist.n == b->u.tlist.n &&
             (a->u.tlist.n == 0 ||
              memcmp(a->u.tlist.v, b->u.tlist.v, a->u.tlist.n * sizeof(FloeDType)) == 0);
    case FLOE_ATTR_SHAPE_LIST:
      if (a->u.slist.n != b->u.slist.n) return false;
      for (size_t i = 0; i < a->u.slist.n; i++)
        if (!shape_equal(&a->u.slist.v[i], &b->u.slist.v[i])) return false;
      return true;
  }
  return false;
}

const char *floe__attr_kind_name(FloeAttrKind k) {
  switch (k) {
    case FLOE_ATTR_INT: return "int";
    case FLOE_ATTR_FLOAT: return "float";
    case FLOE_ATTR_BOOL: return "bool";
    case FLOE_ATTR_STRING: return "string";
    case FLOE_ATTR_TYPE: return "type";
    case FLOE_ATTR_SHAPE: return "shape";
    case FLOE_ATTR_TENSOR: return "tensor";
    case FLOE_ATTR_INT_LIST: return "list(int)";
    case FLOE_ATTR_FLOAT_LIST: return "list(float)";
    case FLOE_ATTR_TYPE_LIST: return "list(type)";
    case FLOE_ATTR_SHAPE_LIST: return "list(shape)";
    default: return "none";
  }
}

char *floe__attr_value_str(const FloeAttrValue *v, char *buf, size_t len) {
  if (!len) return buf;
  size_t used = 0;
#define APPEND(...)                                                        \
  do {                                                                     \
    if (used < len) used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__); \
  } while (0)
  buf[0] = '\0';
  switch (v->kind) {
    case FLOE_ATTR_INT: APPEND("%" PRId64, v->u.i); break;
    case FLOE_ATTR_FLOAT: APPEND("%g", v->u.f); break;
    case FLOE_ATTR_BOOL: APPEND("%s", v->u.b ? "true" : "false"); break;
    case FLOE_ATTR_STRING: APPEND("\"%s\"", v->u.s); break;
    case FLOE_ATTR_TYPE: APPEND("%s", floe_dtype_name(v->u.type)); break;
    case FLOE_ATTR_SHAPE: floe_shape_str(&v->u.shape, buf, len); break;
    case FLOE_ATTR_TENSOR: {
      char s[128];
      FloeShape sh = floe_tensor_shape(v->u.tensor);
      APPEND("%s%s", floe_dtype_name(v->u.tensor->dtype), floe_shape_str(&sh, s, sizeof s));
      break;
    }
    case FLOE_ATTR_INT_LIST:
      APPEND("[");
      for (size_t i = 0; i < v->u.ilist.n && i < 8; i++)
        APPEND("%s%" PRId64, i ? "," : "", v->u.ilist.v[i]);
      APPEND("%s]", v->u.ilist.n > 8 ? ",..." : "");
      break;
    case FLOE_ATTR_FLOAT_LIST:
      APPEND("[");
      for (size_t i = 0; i < v->u.flist.n && i < 8; i++)
        APPEND("%s%g", i ? "," : "", v->u.flist.v[i]);
      APPEND("%s]", v->u.flist.n > 8 ? ",..." : "");
      break;
    case FLOE_ATTR_TYPE_LIST:
      APPEND("[");
      for (size_t i = 0; i < v->u.tlist.n && i < 8; i++)
        APPEND("%s%s", i ? "," : "", floe_dtype_name(v->u.tlist.v[i]));
      APPEND("%s]", v->u.tlist.n > 8 ? ",..." : "");
      break;
    case FLOE_ATTR_SHAPE_LIST:
      APPEND("[");
      for (size_t i = 0; i < v->u.slist.n && i < 8; i++) {
        char s[160];
        APPEND("%s%s", i ? "," : "", floe_shape_str(&v->u.slist.v[i], s, sizeof s));
      }
      APPEND("%s]", v->u.slist.n > 8 ? ",..." : "");
      break;
    default: APPEND("<none>"); break;
  }
#undef APPEND
  return buf;
}
