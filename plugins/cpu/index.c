/* SPDX-License-Identifier: Apache-2.0 */
/* index.c - gathers and scatters by index tensors (GatherElements, ScatterElements,
 * GatherND, ScatterND) and the ops whose result depends on the order or count of values
 * (NonZero, TopK, Unique) of the CPU plugin.
 *
 * Gathers move elements by size, so one kernel serves every dtype; scatters with a reduction
 * and the sorting ops read values as double (float dtypes) or int64 (integers), which holds
 * every value of those dtypes exactly. Every index is checked before it is used: an index
 * outside [-dim, dim) is an error naming it. These ops are rare and small in the models
 * they serve, so the loops are plain and serial (scatters must be: a repeated index keeps
 * the last update).
 */
#include "index_util.h"

/* Attributes of these ops, parsed once (each op reads the ones it has). */
enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

typedef struct IxAttrs {
  int64_t axis, batch_dims;
  int reduction;
  int largest, sorted;
} IxAttrs;

static floe_code attrs_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const FloeAttrs *a = host->init_attrs(init);
  IxAttrs s = {0, 0, RED_NONE, 1, 1};
  const char *red = "none";
  if (host->attr_int(a, "axis", &s.axis) != FLOE_OK) s.axis = 0;
  if (host->attr_int(a, "batch_dims", &s.batch_dims) != FLOE_OK) s.batch_dims = 0;
  if (host->attr_bool(a, "largest", &s.largest) != FLOE_OK) s.largest = 1;
  if (host->attr_bool(a, "sorted", &s.sorted) != FLOE_OK) s.sorted = 1;
  if (host->attr_string(a, "reduction", &red) != FLOE_OK) red = "none";
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  s.reduction = -1;
  for (int i = 0; i < 5; i++)
    if (strcmp(red, names[i]) == 0) s.reduction = i;
  if (s.reduction < 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "reduction '%s' is not one of none, add, mul, max, min", red);
  IxAttrs *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *p = s;
  *state = p;
  return FLOE_OK;
}

static inline void copy_elem(char *dst, const char *src, size_t es) {
  switch (es) {
  case 8: memcpy(dst, src, 8); break;
  case 4: memcpy(dst, src, 4); break;
  case 2: memcpy(dst, src, 2); break;
  default: *dst = *src; break;
  }
}

/* dst[di] = dst[di] (reduction) src[si]; none replaces. */
static void combine(FloeDType dt, int red, void *dst, int64_t di, const void *src, int64_t si) {
  if (red == RED_NONE) {
    size_t es = cpu_host->dtype_size(dt);
    copy_elem((char *)dst + di * (int64_t)es, (const char *)src + si * (int64_t)es, es);
  } else if (ix_is_float(dt)) {
    double a = cpu_float_load(dt, dst, di), b = cpu_float_load(dt, src, si), r;
    switch (red) {
    case RED_ADD: r = a + b; break;
    case RED_MUL: r = a * b; break;
    case RED_MAX: r = a != a || b != b ? NAN : a > b ? a : b; break;
    default: r = a != a || b != b ? NAN : a < b ? a : b; break;
    }
    cpu_float_store(dt, dst, di, r);
  } else {
    int64_t a = ix_load_i(dt, dst, di), b = ix_load_i(dt, src, si), r;
    switch (red) {
    case RED_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
    case RED_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
    case RED_MAX: r = a > b ? a : b; break;
    default: r = a < b ? a : b; break;
    }
    ix_store_i(dt, dst, di, r);
  }
}

/* An index read from `indices` at element k made non-negative for a dim of size dim, or an
 * error naming it. */
static floe_code wrap_index(FloeKernelContext *ctx, const FloeTensor *indices, int64_t k,
                            int64_t dim, const char *what, int64_t *out) {
  int64_t v = ix_index_at(cpu_host->tensor_data(indices), cpu_host->tensor_dtype(indices), k);
  *out = 0;
  if (v < -dim || v >= dim)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "indices element %" PRId64 " is %" PRId64 ", outside [%" PRId64
                                   ", %" PRId64 ") for %s",
                                   k, v, -dim, dim, what);
  *out = v < 0 ? v + dim : v;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* GatherElements and ScatterElements: one index per element, along axis. */

/* Checks that indices (and updates, when given) fit data along every dim but axis. */
static floe_code elements_check(FloeKernelContext *ctx, const FloeTensor *data,
                                const FloeTensor *idx, const FloeTensor *up, int axis) {
  int r = cpu_host->tensor_rank(data);
  const int64_t *dd = cpu_host->tensor_dims(data), *id = cpu_host->tensor_dims(idx);
  FloeDType it = cpu_host->tensor_dtype(idx);
  int bad = (it != FLOE_I32 && it != FLOE_I64) || cpu_host->tensor_rank(idx) != r;
  for (int k = 0; !bad && k < r; k++) bad = k != axis && id[k] > dd[k];
  if (up && !bad) {
    bad = cpu_host->tensor_rank(up) != r;
    for (int k = 0; !bad && k < r; k++) bad = cpu_host->tensor_dims(up)[k] != id[k];
  }
  if (bad)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "indices %s %s%s%s must be i32/i64 of data %s's rank and "
                                   "no larger than data off axis %d",
                                   cpu_host->dtype_name(it), ix_shape_str(idx).s,
                                   up ? " and updates " : "", up ? ix_shape_str(up).s : "",
                                   ix_shape_str(data).s, axis);
  return FLOE_OK;
}

/* The offset in data (strides ds) of index position pos with pos[axis] replaced by v. */
static inline int64_t elements_offset(int r, const int64_t *pos, const int64_t *ds, int axis,
                                      int64_t v) {
  int64_t off = 0;
  for (int k = 0; k < r; k++) off += (k == axis ? v : pos[k]) * ds[k];
  return off;
}

static inline void odometer_next(int r, const int64_t *dims, int64_t *pos) {
  for (int k = r - 1; k >= 0; k--) {
    if (++pos[k] < dims[k]) return;
    pos[k] = 0;
  }
}

static void dense_strides(int r, const int64_t *dims, int64_t *s) {
  int64_t acc = 1;
  for (int k = r - 1; k >= 0; k--) {
    s[k] = acc;
    acc *= dims[k];
  }
}

static floe_code gather_elements_compute(void *state, FloeKernelContext *ctx) {
  const IxAttrs *at = state;
  const FloeTensor *data = cpu_host->ctx_input(ctx, 0), *idx = cpu_host->ctx_input(ctx, 1);
  int axis, r = cpu_host->tensor_rank(data);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "data must have rank >= 1");
  floe_code rc = ix_axis(ctx, at->axis, data, "axis", &axis);
  if (rc == FLOE_OK) rc = elements_check(ctx, data, idx, NULL, axis);
  if (rc != FLOE_OK) return rc;
  const int64_t *dd = cpu_host->tensor_dims(data), *id = cpu_host->tensor_dims(idx);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, id, &y)) != FLOE_OK) return rc;
  int64_t n = cpu_host->tensor_num_elements(idx), ds[FLOE_MAX_DIMS], pos[FLOE_MAX_DIMS] = {0};
  dense_strides(r, dd, ds);
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(data));
  const char *src = cpu_host->tensor_data(data);
  char *dst = cpu_host->tensor_data(y);
  for (int64_t e = 0; e < n; e++, odometer_next(r, id, pos)) {
    int64_t v;
    if ((rc = wrap_index(ctx, idx, e, dd[axis], "data's axis", &v)) != FLOE_OK) return rc;
    copy_elem(dst + e * (int64_t)es, src + elements_offset(r, pos, ds, axis, v) * (int64_t)es, es);
  }
  return FLOE_OK;
}

/* Output 0 as a copy of input 0 (the scatters' starting point). */
static floe_code copy_of_input(FloeKernelContext *ctx, FloeTensor **y) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, cpu_host->tensor_rank(x),
                                               cpu_host->tensor_dims(x), y);
  if (rc == FLOE_OK && cpu_host->tensor_nbytes(x))
    memcpy(cpu_host->tensor_data(*y), cpu_host->tensor_data(x), cpu_host->tensor_nbytes(x));
  return rc;
}

static floe_code scatter_elements_compute(void *state, FloeKernelContext *ctx) {
  const IxAttrs *at = state;
  const FloeTensor *data = cpu_host->ctx_input(ctx, 0), *idx = cpu_host->ctx_input(ctx, 1),
                   *up = cpu_host->ctx_input(ctx, 2);
  int axis, r = cpu_host->tensor_rank(data);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "data must have rank >= 1");
  floe_code rc = ix_axis(ctx, at->axis, data, "axis", &axis);
  if (rc == FLOE_OK) rc = elements_check(ctx, data, idx, up, axis);
  FloeTensor *y;
  if (rc == FLOE_OK) rc = copy_of_input(ctx, &y);
  if (rc != FLOE_OK) return rc;
  const int64_t *dd = cpu_host->tensor_dims(data), *id = cpu_host->tensor_dims(idx);
  int64_t n = cpu_host->tensor_num_elements(idx), ds[FLOE_MAX_DIMS], pos[FLOE_MAX_DIMS] = {0};
  dense_strides(r, dd, ds);
  FloeDType dt = cpu_host->tensor_dtype(data);
  for (int64_t e = 0; e < n; e++, odometer_next(r, id, pos)) {
    int64_t v;
    if ((rc = wrap_index(ctx, idx, e, dd[axis], "data's axis", &v)) != FLOE_OK) return rc;
    combine(dt, at->reduction, cpu_host->tensor_data(y), elements_offset(r, pos, ds, axis, v),
            cpu_host->tensor_data(up), e);
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* GatherND and ScatterND: the last dim of indices addresses a prefix of data's dims. */

typedef struct NdPlan {
  int q;          /* indices' last dim */
  int64_t batch;  /* product of the batch dims */
  int64_t tuples; /* index tuples per batch */
  int64_t slice;  /* elements per addressed slice */
  int64_t bstride;
  int64_t ds[FLOE_MAX_DIMS]; /* data's strides */
} NdPlan;

static floe_code nd_plan(FloeKernelContext *ctx, const FloeTensor *data, const FloeTensor *idx,
                         int64_t b, NdPlan *p) {
  int rd = cpu_host->tensor_rank(data), ri = cpu_host->tensor_rank(idx);
  const int64_t *dd = cpu_host->tensor_dims(data), *id = cpu_host->tensor_dims(idx);
  FloeDType it = cpu_host->tensor_dtype(idx);
  int bad = (it != FLOE_I32 && it != FLOE_I64) || ri < 1 || b < 0 || b >= ri || b >= rd ||
            b + id[ri - 1] > rd;
  for (int k = 0; !bad && k < b; k++) bad = id[k] != dd[k];
  if (bad)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "indices %s %s cannot address data %s with batch_dims %" PRId64
                                   ": the last dim of indices plus batch_dims must be at most "
                                   "data's rank, and the batch dims must match",
                                   cpu_host->dtype_name(it), ix_shape_str(idx).s,
                                   ix_shape_str(data).s, b);
  p->q = (int)id[ri - 1];
  p->batch = ix_product((int)b, dd);
  p->tuples = ix_product(ri - 1 - (int)b, id + b);
  p->slice = ix_product(rd - (int)b - p->q, dd + b + p->q);
  p->bstride = ix_product(rd - (int)b, dd + b);
  dense_strides(rd, dd, p->ds);
  return FLOE_OK;
}

/* The data offset of tuple t (of all batch * tuples) in batch bi. */
static floe_code nd_offset(FloeKernelContext *ctx, const NdPlan *p, const FloeTensor *data,
                           const FloeTensor *idx, int64_t b, int64_t bi, int64_t t,
                           int64_t *off) {
  const int64_t *dd = cpu_host->tensor_dims(data);
  int64_t o = bi * p->bstride;
  for (int k = 0; k < p->q; k++) {
    int64_t v;
    floe_code rc = wrap_index(ctx, idx, t * p->q + k, dd[b + k], "a dim of data", &v);
    if (rc != FLOE_OK) return rc;
    o += v * p->ds[b + k];
  }
  *off = o;
  return FLOE_OK;
}

static floe_code gather_nd_compute(void *state, FloeKernelContext *ctx) {
  int64_t b = ((const IxAttrs *)state)->batch_dims;
  const FloeTensor *data = cpu_host->ctx_input(ctx, 0), *idx = cpu_host->ctx_input(ctx, 1);
  NdPlan p;
  floe_code rc = nd_plan(ctx, data, idx, b, &p);
  if (rc != FLOE_OK) return rc;
  int rd = cpu_host->tensor_rank(data), ri = cpu_host->tensor_rank(idx);
  int64_t od[2 * FLOE_MAX_DIMS];
  int r = 0;
  for (int k = 0; k < ri - 1; k++) od[r++] = cpu_host->tensor_dims(idx)[k];
  for (int k = (int)b + p.q; k < rd; k++) od[r++] = cpu_host->tensor_dims(data)[k];
  if (r > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "the result would have %d dims; at most %d are supported", r,
                                   FLOE_MAX_DIMS);
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, od, &y)) != FLOE_OK) return rc;
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(data)), bytes = (size_t)p.slice * es;
  const char *src = cpu_host->tensor_data(data);
  char *dst = cpu_host->tensor_data(y);
  for (int64_t bi = 0, t = 0; bi < p.batch; bi++)
    for (int64_t j = 0; j < p.tuples; j++, t++) {
      int64_t off;
      if ((rc = nd_offset(ctx, &p, data, idx, b, bi, t, &off)) != FLOE_OK) return rc;
      if (bytes) memcpy(dst + (size_t)t * bytes, src + (size_t)off * es, bytes);
    }
  return FLOE_OK;
}

static floe_code scatter_nd_compute(void *state, FloeKernelContext *ctx) {
  const IxAttrs *at = state;
  const FloeTensor *data = cpu_host->ctx_input(ctx, 0), *idx = cpu_host->ctx_input(ctx, 1),
                   *up = cpu_host->ctx_input(ctx, 2);
  NdPlan p;
  floe_code rc = nd_plan(ctx, data, idx, 0, &p);
  if (rc != FLOE_OK) return rc;
  /* updates = indices.shape[:-1] + data.shape[q:] */
  int rd = cpu_host->tensor_rank(data), ri = cpu_host->tensor_rank(idx);
  int ru = cpu_host->tensor_rank(up), bad = ru != ri - 1 + rd - p.q;
  const int64_t *ud = cpu_host->tensor_dims(up);
  for (int k = 0; !bad && k < ri - 1; k++) bad = ud[k] != cpu_host->tensor_dims(idx)[k];
  for (int k = p.q; !bad && k < rd; k++) bad = ud[ri - 1 + k - p.q] != cpu_host->tensor_dims(data)[k];
  if (bad)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "updates %s must have shape indices.shape[:-1] + "
                                   "data.shape[%d:] (indices %s, data %s)",
                                   ix_shape_str(up).s, p.q, ix_shape_str(idx).s,
                                   ix_shape_str(data).s);
  FloeTensor *y;
  if ((rc = copy_of_input(ctx, &y)) != FLOE_OK) return rc;
  FloeDType dt = cpu_host->tensor_dtype(data);
  for (int64_t t = 0; t < p.tuples; t++) {
    int64_t off;
    if ((rc = nd_offset(ctx, &p, data, idx, 0, 0, t, &off)) != FLOE_OK) return rc;
    for (int64_t e = 0; e < p.slice; e++)
      combine(dt, at->reduction, cpu_host->tensor_data(y), off + e, cpu_host->tensor_data(up),
              t * p.slice + e);
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* NonZero. */

/* Element i is not zero (-0.0 is zero; NaN is not). */
static inline int nonzero_at(FloeDType dt, const void *d, int64_t i) {
  switch (dt) {
  case FLOE_F32: return ((const float *)d)[i] != 0.0f || ((const float *)d)[i] != ((const float *)d)[i];
  case FLOE_F64: return ((const double *)d)[i] != 0.0 || ((const double *)d)[i] != ((const double *)d)[i];
  case FLOE_F16:
  case FLOE_BF16: return (((const uint16_t *)d)[i] & 0x7fffu) != 0;
  default: return ix_load_i(dt, d, i) != 0;
  }
}

static floe_code non_zero_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  FloeDType dt = cpu_host->tensor_dtype(x);
  int r = cpu_host->tensor_rank(x), rr = r ? r : 1;
  int64_t n = cpu_host->tensor_num_elements(x), count = 0, one = 1;
  const int64_t *dims = r ? cpu_host->tensor_dims(x) : &one;
  const void *d = cpu_host->tensor_data(x);
  for (int64_t i = 0; i < n; i++) count += nonzero_at(dt, d, i);
  int64_t od[2] = {rr, count};
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 2, od, &y);
  if (rc != FLOE_OK || count == 0) return rc;
  int64_t *out = cpu_host->tensor_data(y), pos[FLOE_MAX_DIMS] = {0}, c = 0;
  for (int64_t i = 0; i < n; i++, odometer_next(rr, dims, pos)) {
    if (!nonzero_at(dt, d, i)) continue;
    for (int k = 0; k < rr; k++) out[k * count + c] = pos[k];
    c++;
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Sorting: a stable merge sort of positions by a comparison with context. */

typedef int (*IxCmp)(const void *ctx, int64_t a, int64_t b);

static void merge_sort(int64_t *a, int64_t *tmp, int64_t n, IxCmp cmp, const void *ctx) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = cmp(ctx, a[j], a[i]) < 0 ? a[j++] : a[i++];
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
    }
    memcpy(a, tmp, (size_t)n * sizeof *a);
  }
}

/* Values of a tensor as sort keys: doubles for float dtypes, int64 for the others. */
typedef struct IxKeys {
  const double *f;
  const int64_t *i;
} IxKeys;

/* NaN sorts above every number and equal to NaN. */
static inline int key_cmp(const IxKeys *k, int64_t a, int64_t b) {
  if (k->f) {
    double x = k->f[a], y = k->f[b];
    int xn = x != x, yn = y != y;
    if (xn || yn) return xn - yn;
    return (x > y) - (x < y);
  }
  return (k->i[a] > k->i[b]) - (k->i[a] < k->i[b]);
}

/* Keys of n elements of x starting at element first, step apart; temp memory from ctx. */
static floe_code load_keys(FloeKernelContext *ctx, const FloeTensor *x, int64_t first,
                           int64_t step, int64_t n, IxKeys *k, void **buf) {
  FloeDType dt = cpu_host->tensor_dtype(x);
  const void *d = cpu_host->tensor_data(x);
  if (!*buf) {
    floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(n ? n : 1) * 8, buf);
    if (rc != FLOE_OK) return rc;
  }
  if (ix_is_float(dt)) {
    double *f = *buf;
    for (int64_t j = 0; j < n; j++) f[j] = cpu_float_load(dt, d, first + j * step);
    *k = (IxKeys){f, NULL};
  } else {
    int64_t *v = *buf;
    for (int64_t j = 0; j < n; j++) v[j] = ix_load_i(dt, d, first + j * step);
    *k = (IxKeys){NULL, v};
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* TopK. */

static int topk_desc(const void *ctx, int64_t a, int64_t b) { return key_cmp(ctx, b, a); }
static int topk_asc(const void *ctx, int64_t a, int64_t b) { return key_cmp(ctx, a, b); }

static floe_code top_k_compute(void *state, FloeKernelContext *ctx) {
  const IxAttrs *at = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int axis, r = cpu_host->tensor_rank(x);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "input must have rank >= 1");
  int64_t k;
  floe_code rc = ix_axis(ctx, at->axis, x, "axis", &axis);
  if (rc == FLOE_OK) rc = ix_read_scalar(ctx, 1, "k", &k);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t n = dims[axis];
  if (k < 0 || k > n)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "k = %" PRId64 " is outside [0, %" PRId64 "] for input %s "
                                   "along axis %d",
                                   k, n, ix_shape_str(x).s, axis);
  int64_t od[FLOE_MAX_DIMS];
  memcpy(od, dims, (size_t)r * sizeof *od);
  od[axis] = k;
  FloeTensor *vals, *inds;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, od, &vals)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_output(ctx, 1, r, od, &inds)) != FLOE_OK)
    return rc;
  int64_t outer = ix_product(axis, dims), inner = ix_product(r - axis - 1, dims + axis + 1);
  if (k == 0 || outer * inner == 0) return FLOE_OK;
  int64_t *order, *tmp;
  void *keybuf = NULL;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)n * 2 * sizeof(int64_t), (void **)&order)) !=
      FLOE_OK)
    return rc;
  tmp = order + n;
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  const char *src = cpu_host->tensor_data(x);
  char *vdst = cpu_host->tensor_data(vals);
  int64_t *idst = cpu_host->tensor_data(inds);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      IxKeys keys;
      int64_t first = o * n * inner + i;
      if ((rc = load_keys(ctx, x, first, inner, n, &keys, &keybuf)) != FLOE_OK) return rc;
      for (int64_t j = 0; j < n; j++) order[j] = j;
      merge_sort(order, tmp, n, at->largest ? topk_desc : topk_asc, &keys);
      for (int64_t j = 0; j < k; j++) {
        int64_t at_out = o * k * inner + j * inner + i;
        copy_elem(vdst + at_out * (int64_t)es, src + (first + order[j] * inner) * (int64_t)es, es);
        idst[at_out] = order[j];
      }
    }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Unique along an axis: slices compared lexicographically. */

typedef struct SliceCmp {
  IxKeys keys;         /* every element of x */
  int64_t outer, n, inner;
} SliceCmp;

static int slice_cmp(const void *ctx, int64_t a, int64_t b) {
  const SliceCmp *s = ctx;
  for (int64_t o = 0; o < s->outer; o++)
    for (int64_t i = 0; i < s->inner; i++) {
      int c = key_cmp(&s->keys, (o * s->n + a) * s->inner + i, (o * s->n + b) * s->inner + i);
      if (c) return c;
    }
  return 0;
}

/* Groups of equal slices: first[g] (lowest position), count[g], group of each position. */
typedef struct UniqueGroups {
  int64_t u;
  int64_t *first, *count, *group_of;
} UniqueGroups;

static int by_first(const void *ctx, int64_t a, int64_t b) {
  const int64_t *first = ctx;
  return (first[a] > first[b]) - (first[a] < first[b]);
}

static void unique_groups(const SliceCmp *s, int64_t *order, int64_t *tmp, int sorted,
                          UniqueGroups *g) {
  int64_t n = s->n;
  for (int64_t j = 0; j < n; j++) order[j] = j;
  merge_sort(order, tmp, n, slice_cmp, s);
  g->u = 0;
  for (int64_t j = 0; j < n; j++) {
    if (j == 0 || slice_cmp(s, order[j - 1], order[j]) != 0) {
      g->first[g->u] = order[j]; /* stable: the lowest position of the group comes first */
      g->count[g->u++] = 0;
    }
    g->count[g->u - 1]++;
    g->group_of[order[j]] = g->u - 1;
  }
  if (sorted) return;
  /* Renumber the groups by first occurrence. */
  int64_t *perm = order, *rank = tmp;
  for (int64_t q = 0; q < g->u; q++) perm[q] = q;
  merge_sort(perm, rank, g->u, by_first, g->first);
  for (int64_t q = 0; q < g->u; q++) rank[perm[q]] = q;
  for (int64_t j = 0; j < n; j++) g->group_of[j] = rank[g->group_of[j]];
  int64_t *f2 = perm + g->u; /* order has room for 2n */
  for (int64_t q = 0; q < g->u; q++) f2[rank[q]] = g->first[q];
  memcpy(g->first, f2, (size_t)g->u * sizeof *f2);
  for (int64_t q = 0; q < g->u; q++) f2[rank[q]] = g->count[q];
  memcpy(g->count, f2, (size_t)g->u * sizeof *f2);
}

static floe_code unique_compute(void *state, FloeKernelContext *ctx) {
  const IxAttrs *at = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int axis, r = cpu_host->tensor_rank(x);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "input must have rank >= 1");
  floe_code rc = ix_axis(ctx, at->axis, x, "axis", &axis);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  SliceCmp s = {{0}, ix_product(axis, dims), dims[axis], ix_product(r - axis - 1, dims + axis + 1)};
  int64_t n = s.n, total = cpu_host->tensor_num_elements(x);
  void *keybuf = NULL;
  int64_t *mem;
  if ((rc = load_keys(ctx, x, 0, 1, total, &s.keys, &keybuf)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(6 * n + 1) * sizeof(int64_t),
                                        (void **)&mem)) != FLOE_OK)
    return rc;
  UniqueGroups g = {0, mem, mem + n, mem + 2 * n};
  unique_groups(&s, mem + 3 * n, mem + 5 * n, at->sorted, &g);
  int64_t yd[FLOE_MAX_DIMS];
  memcpy(yd, dims, (size_t)r * sizeof *yd);
  yd[axis] = g.u;
  FloeTensor *y, *oi, *inv, *cnt;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, yd, &y)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_output(ctx, 1, 1, &g.u, &oi)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_output(ctx, 2, 1, &n, &inv)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_output(ctx, 3, 1, &g.u, &cnt)) != FLOE_OK)
    return rc;
  if (g.u) {
    memcpy(cpu_host->tensor_data(oi), g.first, (size_t)g.u * sizeof(int64_t));
    memcpy(cpu_host->tensor_data(cnt), g.count, (size_t)g.u * sizeof(int64_t));
  }
  if (n) memcpy(cpu_host->tensor_data(inv), g.group_of, (size_t)n * sizeof(int64_t));
  size_t row = (size_t)s.inner * cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  const char *src = cpu_host->tensor_data(x);
  char *dst = cpu_host->tensor_data(y);
  for (int64_t o = 0; row && o < s.outer; o++)
    for (int64_t q = 0; q < g.u; q++)
      memcpy(dst + (size_t)(o * g.u + q) * row, src + (size_t)(o * n + g.first[q]) * row, row);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_index(FloePluginRegistrar *reg) {
  const struct {
    const char *op;
    uint32_t dtypes;
    floe_code (*compute)(void *, FloeKernelContext *);
  } k[] = {
      {"GatherElements", FLOE_DTYPES_ALL, gather_elements_compute},
      {"ScatterElements", FLOE_DTYPES_ALL, scatter_elements_compute},
      {"GatherND", FLOE_DTYPES_ALL, gather_nd_compute},
      {"ScatterND", FLOE_DTYPES_ALL, scatter_nd_compute},
      {"NonZero", FLOE_DTYPES_ALL, non_zero_compute},
      {"TopK", FLOE_DTYPES_NUMERIC, top_k_compute},
      {"Unique", FLOE_DTYPES_NUMERIC, unique_compute},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    floe_code rc = cpu_add_kernel(reg, k[i].op, "T", k[i].dtypes, 0, k[i].compute, attrs_create,
                                  ix_state_free, NULL);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
