/* SPDX-License-Identifier: Apache-2.0 */
/* tensor.c - reference-counted tensors over reference-counted device buffers. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

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

/* Host-memory tensors up to this many bytes live in one block with their headers (see
 * FloeBuffer): one malloc instead of three, which is most of what running a small node
 * costs. The block stays within glibc's per-thread cache sizes. */
enum { SMALL_TENSOR_BYTES = 512, DATA_ALIGN = 64 };

/* The block of an embedded buffer: its first tensor, the buffer, then the data at the next
 * DATA_ALIGN boundary. */
typedef struct SmallBlock {
  FloeTensor tensor;
  FloeBuffer buf;
} SmallBlock;

static SmallBlock *block_of(FloeBuffer *b) {
  return (SmallBlock *)((char *)b - offsetof(SmallBlock, buf));
}

/* True when the caller holds the last reference of *refs and may free. A count of 1 seen by
 * its holder cannot grow (nobody else can reach the object), which saves the atomic write
 * in the common case of an unshared object. */
static bool drop_ref(atomic_int *refs) {
  if (atomic_load_explicit(refs, memory_order_acquire) == 1) return true;
  return atomic_fetch_sub_explicit(refs, 1, memory_order_acq_rel) == 1;
}

/* Bytes of tensor buffers alive in the process and their high-water mark (floe_memory_stats):
 * one relaxed atomic add per buffer made or freed, so benchmarks can see what a step keeps. */
static _Atomic int64_t live_tensor_bytes, peak_tensor_bytes;

static void count_buffer(size_t bytes) {
  int64_t now = atomic_fetch_add_explicit(&live_tensor_bytes, (int64_t)bytes,
                                          memory_order_relaxed) + (int64_t)bytes;
  int64_t peak = atomic_load_explicit(&peak_tensor_bytes, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&peak_tensor_bytes, &peak, now,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
  }
}

void floe_memory_stats(FloeMemoryStats *out) {
  if (!out || out->struct_size < offsetof(FloeMemoryStats, peak_tensor_bytes) + sizeof(int64_t))
    return;
  out->live_tensor_bytes = atomic_load_explicit(&live_tensor_bytes, memory_order_relaxed);
  out->peak_tensor_bytes = atomic_load_explicit(&peak_tensor_bytes, memory_order_relaxed);
}

void floe_memory_reset_peak(void) {
  atomic_store_explicit(&peak_tensor_bytes,
                        atomic_load_explicit(&live_tensor_bytes, memory_order_relaxed),
                        memory_order_relaxed);
}

static void buffer_release(FloeBuffer *b) {
  if (!b || !drop_ref(&b->refs)) return;
  atomic_fetch_sub_explicit(&live_tensor_bytes, (int64_t)b->size, memory_order_relaxed);
  if (b->embedded) {
    floe__free(block_of(b)); /* b, the data and the first tensor's header go with it */
    return;
  }
  if (b->device)
    floe__device_free(b->device, b->data, b->size);
  else
    floe__aligned_free(b->data);
  floe__free(b);
}

static void tensor_init(FloeTensor *t, FloeDType dt, int rank, const int64_t *dims, int64_t n,
                        size_t nbytes) {
  atomic_init(&t->refs, 1);
  t->dtype = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  for (int i = rank; i < FLOE_MAX_DIMS; i++) t->dims[i] = 0;
  t->num_elements = n;
  t->nbytes = nbytes;
  t->buf = NULL;
  t->offset = 0;
}

static FloeTensor *tensor_header(FloeDType dt, int rank, const int64_t *dims, FloeStatus *st) {
  int64_t n;
  size_t nbytes;
  if (floe__shape_bytes(dt, rank, dims, &n, &nbytes, st) != FLOE_OK) return NULL;
  FloeTensor *t = floe__malloc(sizeof *t);
  if (!t) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor header");
    return NULL;
  }
  tensor_init(t, dt, rank, dims, n, nbytes);
  return t;
}

/* A small host-memory tensor in one block; dev is its (host-memory) device or NULL. */
static FloeTensor *small_tensor(FloeDevice *dev, FloeDType dt, int rank, const int64_t *dims,
                                int64_t n, size_t nbytes, FloeStatus *st) {
  /* malloc aligns to max_align_t: this much slack reaches the next DATA_ALIGN boundary. */
  size_t slack = DATA_ALIGN - _Alignof(max_align_t);
  SmallBlock *blk = floe__malloc(sizeof *blk + slack + nbytes);
  if (!blk) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor of %zu bytes",
                    nbytes);
    return NULL;
  }
  uintptr_t data = ((uintptr_t)(blk + 1) + DATA_ALIGN - 1) & ~(uintptr_t)(DATA_ALIGN - 1);
  tensor_init(&blk->tensor, dt, rank, dims, n, nbytes);
  atomic_init(&blk->buf.refs, 1);
  blk->buf.embedded = true;
  blk->buf.data = (void *)data;
  blk->buf.size = nbytes;
  blk->buf.device = dev;
  blk->tensor.buf = &blk->buf;
  count_buffer(nbytes);
  return &blk->tensor;
}

FloeTensor *floe__tensor_alloc(FloeDevice *dev, FloeDType dt, int rank, const int64_t *dims,
                               FloeStatus *st) {
  int64_t n;
  size_t nbytes;
  if (floe__shape_bytes(dt, rank, dims, &n, &nbytes, st) != FLOE_OK) return NULL;
  /* A host-memory device's memory is plain host memory, so the core may hand out small
   * blocks itself; other devices always allocate through their own slot. */
  if (nbytes > 0 && nbytes <= SMALL_TENSOR_BYTES && (!dev || dev->host_memory))
    return small_tensor(dev, dt, rank, dims, n, nbytes, st);
  FloeTensor *t = floe__malloc(sizeof *t);
  if (!t) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor header");
    return NULL;
  }
  tensor_init(t, dt, rank, dims, n, nbytes);
  if (nbytes == 0) return t;
  FloeBuffer *b = floe__malloc(sizeof *b);
  if (!b) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating a tensor buffer header");
    goto err_free_tensor;
  }
  atomic_init(&b->refs, 1);
  b->embedded = false;
  b->size = nbytes;
  b->device = dev;
  if (dev) {
    if (floe__device_alloc(dev, nbytes, &b->data, st) != FLOE_OK) goto err_free_buffer;
  } else {
    b->data = floe__aligned_alloc(DATA_ALIGN, nbytes);
    if (!b->data) {
      floe_status_set(st, FLOE_NO_MEMORY, "out of memory allocating %zu bytes of host memory",
                      nbytes);
      goto err_free_buffer;
    }
  }
  t->buf = b;
  count_buffer(nbytes);
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

FloeTensor *floe__tensor_slice_view(FloeTensor *src, int64_t byte_offset, int rank,
                                    const int64_t *dims, FloeStatus *st) {
  FloeTensor *t = tensor_header(src->dtype, rank, dims, st);
  if (!t) return NULL;
  size_t esize = floe_dtype_size(src->dtype);
  /* Element-aligned offsets only: kernels read the view through typed pointers. */
  if (byte_offset < 0 || (uint64_t)byte_offset > src->nbytes ||
      t->nbytes > src->nbytes - (size_t)byte_offset || (uint64_t)byte_offset % esize != 0) {
    char a[160], b[160];
    FloeShape ss = floe_tensor_shape(src), ds = floe_shape_make(rank, dims);
    floe_status_set(st, FLOE_OUT_OF_RANGE,
                    "a view of shape %s (%zu bytes) at byte offset %lld does not fit in the %s "
                    "tensor of shape %s (%zu bytes; offsets must be multiples of %zu)",
                    floe_shape_str(&ds, b, sizeof b), t->nbytes, (long long)byte_offset,
                    floe_dtype_name(src->dtype), floe_shape_str(&ss, a, sizeof a), src->nbytes,
                    esize);
    floe__free(t);
    return NULL;
  }
  if (t->nbytes == 0) return t; /* empty tensors hold no buffer */
  t->buf = src->buf;
  t->offset = src->offset + (size_t)byte_offset;
  atomic_fetch_add_explicit(&t->buf->refs, 1, memory_order_relaxed);
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
  if (!t || !drop_ref(&t->refs)) return;
  FloeBuffer *b = t->buf;
  /* The first tensor of an embedded buffer is part of the buffer's block. */
  bool in_block = b && b->embedded && &block_of(b)->tensor == t;
  buffer_release(b);
  if (!in_block) floe__free(t);
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
