/* SPDX-License-Identifier: Apache-2.0 */
/* k_array.c - CUDA kernels that move data or only change shapes: Const (from pinned host
 * memory), the views (Identity, StopGradient, Reshape, ExpandDims, Squeeze: no copy),
 * Shape / Size / Rank, Transpose, Gather, OneHot, BroadcastTo and ExpandReduced (the
 * gradient of Sum / Mean). Inputs the host must read (shapes, axes, depths, indices to
 * check) are copied back synchronously (cu_read_index_input / cu_read_device). */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cuda.h"

#define SHAPE(buf, r, d) cu_shape_str(buf, sizeof buf, (r), (d))

static int64_t product(int r, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < r; i++) p *= d[i];
  return p;
}

static void state_free(void *state) { cu_host->free(state); }

/* ------------------------------------------------------------------------------------ */
/* Const: the value is copied once into pinned host memory, so each run's copy to the
 * device is a true asynchronous DMA on the compute stream. */

typedef struct ConstState {
  void *pinned;
  size_t nbytes;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
} ConstState;

static floe_code const_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  const FloeTensor *v;
  if (host->attr_tensor(host->init_attrs(init), "value", &v) != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "Const needs a tensor attribute 'value'");
  ConstState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  memset(s, 0, sizeof *s);
  s->nbytes = host->tensor_nbytes(v);
  s->rank = host->tensor_rank(v);
  if (s->rank) memcpy(s->dims, host->tensor_dims(v), (size_t)s->rank * sizeof *s->dims);
  if (s->nbytes) {
    cudaError_t e = cudaHostAlloc(&s->pinned, s->nbytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      host->free(s);
      return host->init_set_error(init, FLOE_RESOURCE_EXHAUSTED,
                                  "cannot pin %zu bytes of host memory for the constant: %s",
                                  s->nbytes, cudaGetErrorString(e));
    }
    memcpy(s->pinned, host->tensor_data(v), s->nbytes);
  }
  *state = s;
  return FLOE_OK;
}

static void const_destroy(void *state) {
  ConstState *s = state;
  if (s->pinned) cudaFreeHost(s->pinned);
  cu_host->free(s);
}

static floe_code const_compute(void *state, FloeKernelContext *ctx) {
  const ConstState *s = state;
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, s->rank, s->dims, &out);
  if (rc != FLOE_OK || !s->nbytes) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int e = (int)cudaMemcpyAsync(cu_host->tensor_data(out), s->pinned, s->nbytes,
                               cudaMemcpyHostToDevice, c.dev->compute);
  return cu_end(&c, e, "copying the constant to the GPU");
}

/* ------------------------------------------------------------------------------------ */
/* Views. */

static floe_code noop_compute(void *state, FloeKernelContext *ctx) { return FLOE_OK; }

static floe_code identity_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  return cu_host->ctx_forward_input(ctx, 0, 0, cu_host->tensor_rank(x), cu_host->tensor_dims(x));
}

static floe_code reshape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t dims[FLOE_MAX_DIMS];
  int rank = 0;
  rc = cu_read_index_input(&c, 1, "shape", dims, FLOE_MAX_DIMS, &rank);
  cu_abort(&c);
  if (rc != FLOE_OK) return rc;
  int infer = -1;
  int64_t known = 1, n = cu_host->tensor_num_elements(x);
  for (int i = 0; i < rank; i++) {
    if (dims[i] == -1 && infer < 0) {
      infer = i;
    } else if (dims[i] < 0) {
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "shape[%d] is %" PRId64 ": only one -1 is allowed and no "
                                    "other negative size",
                                    i, dims[i]);
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0 && known > 0 && n % known == 0) dims[infer] = n / known;
  char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
  if ((infer >= 0 && (known == 0 || n % known)) || (infer < 0 && known != n))
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "cannot reshape a tensor of shape %s (%" PRId64 " elements) "
                                  "to %s",
                                  SHAPE(a, cu_host->tensor_rank(x), cu_host->tensor_dims(x)), n,
                                  SHAPE(b, rank, dims));
  return cu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
}

typedef struct IntState {
  int64_t v;
  int64_t list[FLOE_MAX_DIMS];
  size_t n;
} IntState;

static floe_code axis_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  IntState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  memset(s, 0, sizeof *s);
  const char *name = user_data;
  floe_code rc;
  if (!strcmp(name, "squeeze_dims")) {
    const int64_t *l = NULL;
    rc = host->attr_int_list(host->init_attrs(init), name, &l, &s->n);
    if (rc == FLOE_NOT_FOUND) rc = FLOE_OK, s->n = 0;
    if (rc == FLOE_OK && s->n > FLOE_MAX_DIMS) rc = FLOE_INVALID_ARGUMENT;
    if (rc == FLOE_OK && s->n) memcpy(s->list, l, s->n * sizeof *l);
  } else {
    bool one_hot = !strcmp(name, "axis_onehot"); /* OneHot's "axis" defaults to -1 */
    rc = host->attr_int(host->init_attrs(init), one_hot ? "axis" : name, &s->v);
    if (rc == FLOE_NOT_FOUND) rc = FLOE_OK, s->v = one_hot ? -1 : 0;
  }
  if (rc != FLOE_OK) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute %s is malformed", name);
  }
  *state = s;
  return FLOE_OK;
}

static floe_code expand_dims_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  int64_t a = ((const IntState *)state)->v;
  if (a < -(r + 1) || a > r || r >= FLOE_MAX_DIMS)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "axis %" PRId64 " is out of range for rank %d (expected in "
                                  "[%d, %d])",
                                  a, r, -(r + 1), r);
  if (a < 0) a += r + 1;
  int64_t dims[FLOE_MAX_DIMS];
  const int64_t *xd = cu_host->tensor_dims(x);
  for (int i = 0, j = 0; i <= r; i++) dims[i] = i == a ? 1 : xd[j++];
  return cu_host->ctx_forward_input(ctx, 0, 0, r + 1, dims);
}

static floe_code squeeze_compute(void *state, FloeKernelContext *ctx) {
  const IntState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  const int64_t *xd = cu_host->tensor_dims(x);
  bool drop[FLOE_MAX_DIMS] = {false};
  for (size_t k = 0; k < s->n; k++) {
    int64_t a = s->list[k];
    if (a < -r || a >= r)
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "squeeze_dims %" PRId64 " is out of range for rank %d", a, r);
    if (a < 0) a += r;
    if (xd[a] != 1)
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "cannot squeeze dim %" PRId64 " of size %" PRId64, a, xd[a]);
    drop[a] = true;
  }
  int64_t dims[FLOE_MAX_DIMS];
  int out = 0;
  for (int i = 0; i < r; i++)
    if (!(s->n ? drop[i] : xd[i] == 1)) dims[out++] = xd[i];
  return cu_host->ctx_forward_input(ctx, 0, 0, out, dims);
}

/* ------------------------------------------------------------------------------------ */
/* Shape, Size, Rank: small integer outputs written by a fill-like kernel per element. */

static floe_code write_ints(FloeKernelContext *ctx, int rank, const int64_t *dims,
                            const int64_t *v, int n) {
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out);
  if (rc != FLOE_OK || n == 0) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  FloeDType dt = cu_host->tensor_dtype(out);
  char *p = cu_host->tensor_data(out);
  size_t es = cu_host->dtype_size(dt);
  int lr = 0;
  for (int i = 0; i < n && lr == 0; i++) /* values by kernel argument: no host buffer to keep */
    lr = cu_fill((CuStream)c.dev->compute, p + (size_t)i * es, 1, (int)es,
                 dt == FLOE_I32 ? (uint64_t)(uint32_t)(int32_t)v[i] : (uint64_t)v[i]);
  return cu_end(&c, lr, cu_host->ctx_op(ctx));
}

static floe_code shape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  int64_t d = r;
  return write_ints(ctx, 1, &d, cu_host->tensor_dims(x), r);
}

static floe_code size_compute(void *state, FloeKernelContext *ctx) {
  int64_t n = cu_host->tensor_num_elements(cu_host->ctx_input(ctx, 0));
  return write_ints(ctx, 0, NULL, &n, 1);
}

static floe_code rank_compute(void *state, FloeKernelContext *ctx) {
  int64_t r = cu_host->tensor_rank(cu_host->ctx_input(ctx, 0));
  return write_ints(ctx, 0, NULL, &r, 1);
}

/* ------------------------------------------------------------------------------------ */
/* Transpose. */

static floe_code transpose_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  const int64_t *xd = cu_host->tensor_dims(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t perm64[FLOE_MAX_DIMS];
  int n = 0;
  rc = cu_read_index_input(&c, 1, "perm", perm64, FLOE_MAX_DIMS, &n);
  int perm[FLOE_MAX_DIMS], seen[FLOE_MAX_DIMS] = {0};
  bool ok = rc == FLOE_OK && n == r;
  for (int i = 0; ok && i < r; i++) {
    int64_t p = perm64[i] < 0 ? perm64[i] + r : perm64[i];
    ok = p >= 0 && p < r && !seen[p];
    if (ok) seen[p] = 1, perm[i] = (int)p;
  }
  if (!ok) {
    cu_abort(&c);
    if (rc != FLOE_OK) return rc;
    char a[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "perm %s is not a permutation of the %d dims of x",
                                  SHAPE(a, n, perm64), r);
  }
  int64_t od[FLOE_MAX_DIMS];
  for (int i = 0; i < r; i++) od[i] = xd[perm[i]];
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, r, od, &out)) != FLOE_OK) return cu_abort(&c), rc;
  int lr = r == 0 ? (int)cudaMemcpyAsync(cu_host->tensor_data(out), cu_host->tensor_data(x),
                                          cu_host->tensor_nbytes(x), cudaMemcpyDeviceToDevice,
                                          c.dev->compute)
                  : cu_transpose((CuStream)c.dev->compute, r, xd, perm, cu_host->tensor_data(x),
                                 cu_host->tensor_data(out),
                                 (int)cu_host->dtype_size(cu_host->tensor_dtype(x)));
  return cu_end(&c, lr, "Transpose");
}

/* ------------------------------------------------------------------------------------ */
/* Gather and OneHot. */

/* Checks every index in [0, limit) on the host (a synchronous read of the indices). */
static floe_code check_indices(CuCall *c, const FloeTensor *ind, int64_t limit,
                               const char *what) {
  FloeDType dt = cu_host->tensor_dtype(ind);
  int64_t n = cu_host->tensor_num_elements(ind);
  size_t bytes = (size_t)n * cu_host->dtype_size(dt);
  void *h = cu_host->alloc(bytes ? bytes : 1);
  if (!h) return cu_host->ctx_set_error(c->ctx, FLOE_NO_MEMORY, "out of memory checking %s", what);
  floe_code rc = cu_read_device(c, h, cu_host->tensor_data(ind), bytes, what);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    int64_t v = dt == FLOE_I64 ? ((const int64_t *)h)[k]
                : dt == FLOE_I32 ? ((const int32_t *)h)[k]
                                 : ((const uint8_t *)h)[k];
    if (v < 0 || v >= limit)
      rc = cu_host->ctx_set_error(c->ctx, FLOE_INVALID_ARGUMENT,
                                  "%s[%" PRId64 "] = %" PRId64 " is not in [0, %" PRId64 ")",
                                  what, k, v, limit);
  }
  cu_host->free(h);
  return rc;
}

static floe_code gather_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *p = cu_host->ctx_input(ctx, 0), *ind = cu_host->ctx_input(ctx, 1);
  int pr = cu_host->tensor_rank(p), ir = cu_host->tensor_rank(ind);
  const int64_t *pd = cu_host->tensor_dims(p);
  int64_t axis = ((const IntState *)state)->v;
  if (pr < 1 || axis < -pr || axis >= pr)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "axis %" PRId64 " is out of range for params of rank %d", axis,
                                  pr);
  if (axis < 0) axis += pr;
  if (pr - 1 + ir > FLOE_MAX_DIMS)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "the output would have rank %d",
                                  pr - 1 + ir);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  if ((rc = check_indices(&c, ind, pd[axis], "indices")) != FLOE_OK) return cu_abort(&c), rc;
  int64_t od[FLOE_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < axis; i++) od[r++] = pd[i];
  for (int i = 0; i < ir; i++) od[r++] = cu_host->tensor_dims(ind)[i];
  for (int i = (int)axis + 1; i < pr; i++) od[r++] = pd[i];
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, r, od, &out)) != FLOE_OK) return cu_abort(&c), rc;
  int lr = cu_gather((CuStream)c.dev->compute, product((int)axis, pd), pd[axis],
                     product(pr - (int)axis - 1, pd + axis + 1),
                     (int)cu_host->dtype_size(cu_host->tensor_dtype(p)), cu_host->tensor_data(p),
                     cu_host->tensor_dtype(ind), cu_host->tensor_data(ind),
                     cu_host->tensor_num_elements(ind), cu_host->tensor_data(out));
  return cu_end(&c, lr, "Gather");
}

static floe_code one_hot_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *ind = cu_host->ctx_input(ctx, 0), *on = cu_host->ctx_input(ctx, 2),
                   *off = cu_host->ctx_input(ctx, 3);
  int ir = cu_host->tensor_rank(ind);
  int64_t axis = ((const IntState *)state)->v;
  if (axis < -1 || axis > ir || ir >= FLOE_MAX_DIMS)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "axis %" PRId64 " is out of range for indices of rank %d",
                                  axis, ir);
  if (axis == -1) axis = ir;
  if (cu_host->tensor_num_elements(on) != 1 || cu_host->tensor_num_elements(off) != 1)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "on_value and off_value must be scalars");
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t depth = 0;
  int n = 0;
  FloeDType dt = cu_host->tensor_dtype(on);
  uint64_t onv = 0, offv = 0;
  size_t es = cu_host->dtype_size(dt);
  if ((rc = cu_read_index_input(&c, 1, "depth", &depth, 1, &n)) == FLOE_OK &&
      (rc = cu_read_device(&c, &onv, cu_host->tensor_data(on), es, "on_value")) == FLOE_OK)
    rc = cu_read_device(&c, &offv, cu_host->tensor_data(off), es, "off_value");
  if (rc == FLOE_OK && (n != 1 || depth < 0))
    rc = cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                "depth must be a non-negative scalar, got %" PRId64, depth);
  if (rc != FLOE_OK) return cu_abort(&c), rc;
  const int64_t *id = cu_host->tensor_dims(ind);
  int64_t od[FLOE_MAX_DIMS];
  for (int i = 0, j = 0; i <= ir; i++) od[i] = i == axis ? depth : id[j++];
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, ir + 1, od, &out)) != FLOE_OK)
    return cu_abort(&c), rc;
  int lr = cu_one_hot((CuStream)c.dev->compute, product((int)axis, id), depth,
                      product(ir - (int)axis, id + axis), cu_host->tensor_dtype(ind),
                      cu_host->tensor_data(ind), (int)es, onv, offv, cu_host->tensor_data(out));
  return cu_end(&c, lr, "OneHot");
}

/* ------------------------------------------------------------------------------------ */
/* BroadcastTo and ExpandReduced. */

static floe_code broadcast_to_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int xr = cu_host->tensor_rank(x), rank = 0;
  const int64_t *xd = cu_host->tensor_dims(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t dims[FLOE_MAX_DIMS];
  if ((rc = cu_read_index_input(&c, 1, "shape", dims, FLOE_MAX_DIMS, &rank)) != FLOE_OK)
    return cu_abort(&c), rc;
  CuBcast p;
  if (xr > rank || cu_broadcast_plan(1, &xr, &xd, rank, dims, &p) != 0) {
    cu_abort(&c);
    char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "cannot broadcast an input of shape %s to shape %s",
                                  SHAPE(a, xr, xd), SHAPE(b, rank, dims));
  }
  if (product(rank, dims) == cu_host->tensor_num_elements(x)) {
    cu_abort(&c);
    return cu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  }
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out)) != FLOE_OK)
    return cu_abort(&c), rc;
  int lr = cu_broadcast_copy((CuStream)c.dev->compute, &p, cu_host->tensor_data(x),
                             cu_host->tensor_data(out),
                             (int)cu_host->dtype_size(cu_host->tensor_dtype(x)), 1.0f);
  return cu_end(&c, lr, "BroadcastTo");
}

typedef struct ExpandState {
  int keep_dims, mean;
} ExpandState;

static floe_code expand_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  ExpandState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  s->keep_dims = s->mean = 0;
  const FloeAttrs *a = host->init_attrs(init);
  if (host->attr_bool(a, "keep_dims", &s->keep_dims) != FLOE_OK) s->keep_dims = 0;
  if (host->attr_bool(a, "mean", &s->mean) != FLOE_OK) s->mean = 0;
  *state = s;
  return FLOE_OK;
}

static floe_code expand_reduced_compute(void *state, FloeKernelContext *ctx) {
  const ExpandState *st = state;
  const FloeTensor *g = cu_host->ctx_input(ctx, 0);
  FloeDType dt = cu_host->tensor_dtype(g);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t dims[FLOE_MAX_DIMS], axes[FLOE_MAX_DIMS];
  int rank = 0, na = 0;
  if ((rc = cu_read_index_input(&c, 1, "input_shape", dims, FLOE_MAX_DIMS, &rank)) != FLOE_OK ||
      (rc = cu_read_index_input(&c, 2, "axis", axes, FLOE_MAX_DIMS, &na)) != FLOE_OK)
    return cu_abort(&c), rc;
  int red[FLOE_MAX_DIMS] = {0};
  for (int k = 0; k < na; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (a < 0 || a >= rank || red[a]) {
      cu_abort(&c);
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "axis %" PRId64 " is out of range or repeated for "
                                    "input_shape of rank %d",
                                    axes[k], rank);
    }
    red[a] = 1;
  }
  int64_t aligned[FLOE_MAX_DIMS], want[FLOE_MAX_DIMS], count = 1;
  int wr = 0;
  for (int d = 0; d < rank; d++) {
    aligned[d] = red[d] ? 1 : dims[d];
    if (red[d]) count *= dims[d];
    if (!red[d] || st->keep_dims) want[wr++] = aligned[d];
  }
  int gr = cu_host->tensor_rank(g);
  const int64_t *gd = cu_host->tensor_dims(g);
  if (gr != wr || (gr && memcmp(gd, want, (size_t)gr * sizeof *gd) != 0)) {
    cu_abort(&c);
    char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX], w[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "grad has shape %s, but input_shape %s reduced along the "
                                  "given axis (keep_dims=%d) has shape %s",
                                  SHAPE(a, gr, gd), SHAPE(b, rank, dims), st->keep_dims,
                                  SHAPE(w, wr, want));
  }
  if (count == 1) {
    cu_abort(&c);
    return cu_host->ctx_forward_input(ctx, 0, 0, rank, dims);
  }
  CuBcast p;
  const int64_t *ad = aligned;
  cu_broadcast_plan(1, &rank, &ad, rank, dims, &p);
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, rank, dims, &out)) != FLOE_OK)
    return cu_abort(&c), rc;
  /* Mean divides each element by the count, in the dtype's own arithmetic like the CPU
   * plugin (not a multiply by 1/count, which rounds differently and has no integer form).
   * count is 0 only when out is empty, and then nothing is launched. */
  CuStream s = (CuStream)c.dev->compute;
  int lr = st->mean && count > 1
               ? cu_broadcast_div(s, dt, &p, cu_host->tensor_data(g), cu_host->tensor_data(out),
                                  count)
               : cu_broadcast_copy(s, &p, cu_host->tensor_data(g), cu_host->tensor_data(out),
                                   (int)cu_host->dtype_size(dt), 1.0f);
  return cu_end(&c, lr, "ExpandReduced");
}

/* ------------------------------------------------------------------------------------ */

floe_code cu_register_array(FloePluginRegistrar *reg) {
  const uint32_t all = FLOE_DTYPES_ALL, numeric = FLOE_DTYPES_NUMERIC;
  struct {
    const char *op, *attr;
    uint32_t types, flags;
    floe_code (*compute)(void *, FloeKernelContext *);
    floe_code (*create)(const FloeHostApi *, FloeKernelInit *, void *, void **);
    void (*destroy)(void *);
    const char *arg;
  } k[] = {
      {"Const", "dtype", all, FLOE_KERNEL_INEXPENSIVE, const_compute, const_create, const_destroy, NULL},
      {"NoOp", NULL, 0, FLOE_KERNEL_INEXPENSIVE, noop_compute, NULL, NULL, NULL},
      {"Identity", "T", all, FLOE_KERNEL_INEXPENSIVE, identity_compute, NULL, NULL, NULL},
      {"StopGradient", "T", all, FLOE_KERNEL_INEXPENSIVE, identity_compute, NULL, NULL, NULL},
      {"Reshape", "T", all, 0, reshape_compute, NULL, NULL, NULL},
      {"ExpandDims", "T", all, FLOE_KERNEL_INEXPENSIVE, expand_dims_compute, axis_create, state_free, "axis"},
      {"Squeeze", "T", all, FLOE_KERNEL_INEXPENSIVE, squeeze_compute, axis_create, state_free, "squeeze_dims"},
      {"Shape", "T", all, FLOE_KERNEL_INEXPENSIVE, shape_compute, NULL, NULL, NULL},
      {"Size", "T", all, FLOE_KERNEL_INEXPENSIVE, size_compute, NULL, NULL, NULL},
      {"Rank", "T", all, FLOE_KERNEL_INEXPENSIVE, rank_compute, NULL, NULL, NULL},
      {"Transpose", "T", all, 0, transpose_compute, NULL, NULL, NULL},
      {"Gather", "T", all, 0, gather_compute, axis_create, state_free, "axis"},
      {"OneHot", "T", all, 0, one_hot_compute, axis_create, state_free, "axis_onehot"},
      {"BroadcastTo", "T", all, 0, broadcast_to_compute, NULL, NULL, NULL},
      {"ExpandReduced", "T", numeric, 0, expand_reduced_compute, expand_create, state_free, NULL},
  };
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof k / sizeof k[0]; i++)
    rc = cu_add_kernel(reg, k[i].op, k[i].attr, k[i].types, k[i].flags, k[i].compute,
                       k[i].create, k[i].destroy, (void *)k[i].arg);
  return rc;
}
