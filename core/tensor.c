/* tensor.c - reference-counted tensors over reference-counted device buffers. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

floe_code floe__shape_bytes(FloeDType dt, int rank, const int64_t *dims, int64_t *num_elements,
                            size_t *nbytes, FloeStatus *st) {
  size_t esize = floe_dtype_size(dt);
  if (!esize) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "invalid dtype %d", (int)dt);
  if (rank < 0 || rank > FLOE_MAX_DIMS)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "rank %d is outside 0..%d", rank,
                           FLOE_MAX_DIMS);
  if (rank > 0 && !dims)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "rank %d with no dims", rank);
  int64_t n = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "dimension %d is negative (%lld)", i,
                             (long long)dims[i]);
    if (dims[i] == 0) empty = true;
  }
  /* Overflow checks only matter for non-empty tensors. */
  for (int i = 0; i < rank && !empty; i++) {
    if (dims[i] && n > INT64_MAX / dims[i])
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "tensor size overflows (dimension %d)",
                             i);
    n *= dims[i];
  }
  if (empty) n = 0;
  if ((uint64_t)n > SIZE_MAX / esize)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "tensor of %lld elements is too large",
                           (long long)n);
  *num_elements = n;
  *nbytes = (size_t)n * esize;
  return FLOE_OK;
}

static void buffer_release(FloeBuffer *b) {
  if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  if (b->device)
    floe__device_free(b->device, b->data, b->size);
  else
    floe__aligned_free(b->data);
  floe__free(b);
}

static FloeTensor *tensor_header(FloeDType dt, int rank, const int64_t *dims, FloeStatus *st) {
  int64_t n;
  size_t nbytes;
  if (floe__shape_bytes(dt, rank, dims, &n, &nbytes, st) != FLOE_OK) return NULL;
  FloeTensor *t = floe__calloc(1, sizeof *t);
  if (!t) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor header");
    return NULL;
  }
  atomic_init(&t->refs, 1);
  t->dtype = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->num_elements = n;
  t->nbytes = nbytes;
  return t;
}

FloeTensor *floe__tensor_alloc(FloeDevice *dev, FloeDType dt, int rank, const int64_t *dims,
                               FloeStatus *st) {
  FloeTensor *t = tensor_header(dt, rank, dims, st);
  if (!t || t->nbytes == 0) return t;
  FloeBuffer *b = floe__calloc(1, sizeof *b);
  if (!b) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor buffer header");
    goto err_free_tensor;
  }
  atomic_init(&b->refs, 1);
  b->size = t->nbytes;
  b->device = dev;
  if (dev) {
    if (floe__device_alloc(dev, t->nbytes, &b->data, st) != FLOE_OK) goto err_free_buffer;
  } else {
    b->data = floe__aligned_alloc(64, t->nbytes);
    if (!b->data) {
      floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating %zu bytes of host memory",
                      t->nbytes);
      goto err_free_buffer;
    }
  }
  t->buf = b;
  return t;

err_free_buffer:
  floe__free(b);
err_free_tensor:
  floe__free(t);
  return NULL;
}

FloeTensor *floe__tensor_view(FloeTensor *src, int rank, const int64_t *dims, FloeStatus *st) {
  FloeTensor *t = tensor_header(src->dtype, rank, dims, st);
  if (!t) return NULL;
  if (t->num_elements != src->num_elements) {
    char a[160], b[160];
    FloeShape ss = floe_tensor_shape(src), ds = floe_shape_make(rank, dims);
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "cannot view a tensor of shape %s (%lld elements) as %s (%lld elements)",
                    floe_shape_str(&ss, a, sizeof a), (long long)src->num_elements,
                    floe_shape_str(&ds, b, sizeof b), (long long)t->num_elements);
    floe__free(t);
    return NULL;
  }
  t->buf = src->buf;
  t->offset = src->offset;
  if (t->buf) atomic_fetch_add_explicit(&t->buf->refs, 1, memory_order_relaxed);
  return t;
}

FloeDevice *floe__tensor_device(const FloeTensor *t) { return t->buf ? t->buf->device : NULL; }

bool floe__tensor_on_host(const FloeTensor *t) {
  FloeDevice *d = floe__tensor_device(t);
  return !d || d->host_memory;
}

FloeTensor *floe__tensor_to_device(FloeTensor *src, FloeDevice *dev, FloeStatus *st) {
  FloeDevice *from = floe__tensor_device(src);
  bool same = from == dev || (floe__tensor_on_host(src) && (!dev || dev->host_memory));
  if (same || src->nbytes == 0) {
    floe_tensor_retain(src);
    return src;
  }
  FloeTensor *t = floe__tensor_alloc(dev, src->dtype, src->rank, src->dims, st);
  if (!t) return NULL;
  if (floe__device_copy(dev, t->buf->data, from, (char *)src->buf->data + src->offset,
                        src->nbytes, st) != FLOE_OK) {
    floe_tensor_release(t);
    return NULL;
  }
  return t;
}

bool floe__tensor_equal(const FloeTensor *a, const FloeTensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  if (a->nbytes == 0) return true;
  return memcmp(floe_tensor_data(a), floe_tensor_data(b), a->nbytes) == 0;
}

/* ---- public API ---- */

FloeTensor *floe_tensor_new(FloeDType dt, int rank, const int64_t *dims, FloeStatus *status) {
  FloeTensor *t = floe__tensor_alloc(NULL, dt, rank, dims, status);
  if (t && t->nbytes) memset(t->buf->data, 0, t->nbytes);
  return t;
}

FloeTensor *floe_tensor_from_data(FloeDType dt, int rank, const int64_t *dims, const void *data,
                                  size_t nbytes, FloeStatus *status) {
  FloeTensor *t = floe__tensor_alloc(NULL, dt, rank, dims, status);
  if (!t) return NULL;
  if (nbytes != t->nbytes) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "data has %zu bytes but a %s tensor of this shape needs %zu", nbytes,
                    floe_dtype_name(dt), t->nbytes);
    floe_tensor_release(t);
    return NULL;
  }
  if (nbytes) {
    if (!data) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT, "data is NULL for %zu bytes", nbytes);
      floe_tensor_release(t);
      return NULL;
    }
    memcpy(t->buf->data, data, nbytes);
  }
  return t;
}

FloeTensor *floe_tensor_scalar_f32(float v, FloeStatus *status) {
  return floe_tensor_from_data(FLOE_F32, 0, NULL, &v, sizeof v, status);
}

FloeTensor *floe_tensor_scalar_i32(int32_t v, FloeStatus *status) {
  return floe_tensor_from_data(FLOE_I32, 0, NULL, &v, sizeof v, status);
}

FloeTensor *floe_tensor_scalar_i64(int64_t v, FloeStatus *status) {
  return floe_tensor_from_data(FLOE_I64, 0, NULL, &v, sizeof v, status);
}

FloeTensor *floe_tensor_reshape(FloeTensor *t, int rank, const int64_t *dims,
                                FloeStatus *status) {
  if (!t) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_tensor_reshape: tensor is NULL");
    return NULL;
  }
  return floe__tensor_view(t, rank, dims, status);
}

FloeTensor *floe_tensor_copy(const FloeTensor *t, FloeStatus *status) {
  if (!t) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_tensor_copy: tensor is NULL");
    return NULL;
  }
  FloeTensor *c = floe__tensor_alloc(NULL, t->dtype, t->rank, t->dims, status);
  if (!c || !t->nbytes) return c;
  if (floe__device_copy(NULL, c->buf->data, floe__tensor_device(t),
                        (char *)t->buf->data + t->offset, t->nbytes, status) != FLOE_OK) {
    floe_tensor_release(c);
    return NULL;
  }
  return c;
}

void floe_tensor_retain(FloeTensor *t) {
  if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void floe_tensor_release(FloeTensor *t) {
  if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  buffer_release(t->buf);
  floe__free(t);
}

FloeDType floe_tensor_dtype(const FloeTensor *t) { return t ? t->dtype : FLOE_DTYPE_INVALID; }
int floe_tensor_rank(const FloeTensor *t) { return t ? t->rank : 0; }
int64_t floe_tensor_dim(const FloeTensor *t, int i) {
  return (t && i >= 0 && i < t->rank) ? t->dims[i] : -1;
}
const int64_t *floe_tensor_dims(const FloeTensor *t) { return t ? t->dims : NULL; }
FloeShape floe_tensor_shape(const FloeTensor *t) {
  return t ? floe_shape_make(t->rank, t->dims) : floe_shape_unknown();
}
int64_t floe_tensor_num_elements(const FloeTensor *t) { return t ? t->num_elements : 0; }
size_t floe_tensor_nbytes(const FloeTensor *t) { return t ? t->nbytes : 0; }

void *floe_tensor_data(const FloeTensor *t) {
  if (!t || !t->buf || !floe__tensor_on_host(t)) return NULL;
  return (char *)t->buf->data + t->offset;
}

const char *floe_tensor_device_name(const FloeTensor *t) {
  FloeDevice *d = t ? floe__tensor_device(t) : NULL;
  return d ? d->short_name : "host";
}

/* ---- shapes ---- */

FloeShape floe_shape_unknown(void) {
  FloeShape s;
  memset(&s, 0, sizeof s);
  s.rank = FLOE_RANK_UNKNOWN;
  return s;
}

FloeShape floe_shape_scalar(void) {
  FloeShape s;
  memset(&s, 0, sizeof s);
  return s;
}

FloeShape floe_shape_make(int rank, const int64_t *dims) {
  FloeShape s = floe_shape_unknown();
  if (rank < 0 || rank > FLOE_MAX_DIMS) return s;
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.dims[i] = dims[i] < 0 ? FLOE_DIM_UNKNOWN : dims[i];
  return s;
}

char *floe_shape_str(const FloeShape *s, char *buf, size_t len) {
  if (!len) return buf;
  if (!s || s->rank < 0) {
    snprintf(buf, len, "<unknown>");
    return buf;
  }
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < s->rank && used < len; i++) {
    if (s->dims[i] < 0)
      used += (size_t)snprintf(buf + used, len - used, "%s?", i ? "," : "");
    else
      used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                               (long long)s->dims[i]);
  }
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}
