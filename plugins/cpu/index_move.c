/* SPDX-License-Identifier: Apache-2.0 */
/* index_move.c - data-movement kernels whose axes, sizes or offsets are tensors (SliceAxes,
 * SqueezeAxes, UnsqueezeAxes, SplitV, Trilu, ReverseSequence) and the sequence ops Range
 * and Cumsum, of the CPU plugin.
 *
 * The movers copy elements by size, so one kernel serves every dtype; squeezes and
 * unsqueezes are views. Range and Cumsum compute in double (float dtypes, so f32 sums
 * round once per element) or int64 (integers, wrapping like the dtype).
 */
#include "index_util.h"

/* ------------------------------------------------------------------------------------ */
/* SliceAxes: ONNX Slice with its four vectors read when the step runs. */

/* Clamps an ONNX Slice (start, end, step) to a dim as NumPy does: *begin and the count. */
static int64_t slice_resolve(int64_t dim, int64_t start, int64_t end, int64_t step,
                             int64_t *begin) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  __int128 span;
  if (step > 0) {
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    span = (__int128)end - start;
  } else {
    start = start < -1 ? -1 : start > dim - 1 ? dim - 1 : start;
    end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
    span = (__int128)start - end;
  }
  __int128 st = step > 0 ? (__int128)step : -(__int128)step;
  *begin = start;
  return span > 0 ? (int64_t)((span + st - 1) / st) : 0;
}

/* dst (dense, dims) <- src[base + sum_k i_k * stride[k]] by elements of es bytes. */
static void strided_copy(char *dst, const char *src, size_t es, int r, const int64_t *dims,
                         const int64_t *stride) {
  int64_t total = ix_product(r, dims), pos[FLOE_MAX_DIMS] = {0}, last = dims[r - 1];
  int64_t step = stride[r - 1];
  for (int64_t done = 0; done < total; done += last) {
    int64_t off = 0;
    for (int k = 0; k < r - 1; k++) off += pos[k] * stride[k];
    const char *s = src + off * (int64_t)es;
    if (step == 1) {
      memcpy(dst, s, (size_t)last * es);
    } else {
      for (int64_t j = 0; j < last; j++) memcpy(dst + j * (int64_t)es, s + j * step * (int64_t)es, es);
    }
    dst += last * (int64_t)es;
    for (int k = r - 2; k >= 0; k--) {
      if (++pos[k] < dims[k]) break;
      pos[k] = 0;
    }
  }
}

#define SLICE_MAX_AXES 64

/* Reads starts, ends, axes and steps (inputs first..first+3) and resolves them against a
 * tensor of rank r / dims: per dim the first index, the step and the count taken. */
static floe_code slice_plan(FloeKernelContext *ctx, int first, int r, const int64_t *dims,
                            const FloeTensor *shape_of, int64_t *begin, int64_t *step,
                            int64_t *count) {
  const char *names[4] = {"starts", "ends", "axes", "steps"};
  int64_t v[4][SLICE_MAX_AXES];
  int n[4];
  for (int i = 0; i < 4; i++) {
    floe_code rc = ix_read_vector(ctx, first + i, names[i], v[i], SLICE_MAX_AXES, &n[i]);
    if (rc != FLOE_OK) return rc;
    if (n[i] != n[0])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "%s has %d values and starts %d: they must be equally long",
                                     names[i], n[i], n[0]);
  }
  int seen[FLOE_MAX_DIMS] = {0};
  for (int d = 0; d < r; d++) {
    begin[d] = 0;
    step[d] = 1;
    count[d] = dims[d];
  }
  for (int i = 0; i < n[0]; i++) {
    int64_t ax = v[2][i];
    if (ax < -r || ax >= r)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axes entry %" PRId64 " is out of range for shape %s", ax,
                                     ix_shape_str(shape_of).s);
    int a = (int)(ax < 0 ? ax + r : ax);
    if (seen[a]++)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "axis %d is sliced twice", a);
    if (v[3][i] == 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "steps[%d] is 0", i);
    step[a] = v[3][i];
    count[a] = slice_resolve(dims[a], v[0][i], v[1][i], v[3][i], &begin[a]);
  }
  return FLOE_OK;
}

/* Element offset of the slice's first element and the stride of each of its dims. */
static int64_t slice_strides(int r, const int64_t *dims, const int64_t *begin,
                             const int64_t *step, int64_t *stride) {
  int64_t acc = 1, base = 0;
  for (int d = r - 1; d >= 0; d--) {
    base += begin[d] * acc;
    stride[d] = step[d] * acc;
    acc *= dims[d];
  }
  return base;
}

static floe_code slice_axes_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "input must have rank >= 1");
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t begin[FLOE_MAX_DIMS], step[FLOE_MAX_DIMS], count[FLOE_MAX_DIMS], stride[FLOE_MAX_DIMS];
  floe_code rc = slice_plan(ctx, 1, r, dims, x, begin, step, count);
  FloeTensor *y;
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_output(ctx, 0, r, count, &y);
  if (rc != FLOE_OK || cpu_host->tensor_num_elements(y) == 0) return rc;
  int64_t base = slice_strides(r, dims, begin, step, stride);
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  strided_copy(cpu_host->tensor_data(y), (const char *)cpu_host->tensor_data(x) + base * (int64_t)es,
               es, r, count, stride);
  return FLOE_OK;
}

/* The gradient of SliceAxes: zeros of `shape` with dy written where the slice read. */
static floe_code slice_axes_grad_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *st = cpu_host->ctx_input(ctx, 0), *dy = cpu_host->ctx_input(ctx, 5);
  int64_t dims[FLOE_MAX_DIMS], begin[FLOE_MAX_DIMS], step[FLOE_MAX_DIMS], count[FLOE_MAX_DIMS],
      stride[FLOE_MAX_DIMS];
  int r;
  floe_code rc = ix_read_vector(ctx, 0, "shape", dims, FLOE_MAX_DIMS, &r);
  if (rc != FLOE_OK) return rc;
  for (int d = 0; d < r; d++)
    if (dims[d] < 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "shape %s has a negative dim",
                                     ix_shape_str(st).s);
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "shape must have rank >= 1");
  if ((rc = slice_plan(ctx, 1, r, dims, st, begin, step, count)) != FLOE_OK) return rc;
  int bad = cpu_host->tensor_rank(dy) != r;
  for (int d = 0; !bad && d < r; d++) bad = cpu_host->tensor_dims(dy)[d] != count[d];
  if (bad) {
    char want[CPU_SHAPE_STR_MAX];
    cpu_shape_str(want, sizeof want, r, count);
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "dy has shape %s; the slice has shape %s",
                                   ix_shape_str(dy).s, want);
  }
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, dims, &y)) != FLOE_OK) return rc;
  if (cpu_host->tensor_nbytes(y)) memset(cpu_host->tensor_data(y), 0, cpu_host->tensor_nbytes(y));
  int64_t total = cpu_host->tensor_num_elements(dy);
  if (total == 0) return FLOE_OK;
  int64_t base = slice_strides(r, dims, begin, step, stride), pos[FLOE_MAX_DIMS] = {0};
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(dy));
  const char *src = cpu_host->tensor_data(dy);
  char *dst = (char *)cpu_host->tensor_data(y) + base * (int64_t)es;
  for (int64_t e = 0; e < total; e++) {
    int64_t off = 0;
    for (int d = 0; d < r; d++) off += pos[d] * stride[d];
    memcpy(dst + off * (int64_t)es, src + e * (int64_t)es, es);
    for (int d = r - 1; d >= 0; d--) {
      if (++pos[d] < count[d]) break;
      pos[d] = 0;
    }
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* SqueezeAxes, UnsqueezeAxes: views with dims removed or inserted. */

static floe_code squeeze_axes_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x), n;
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t axes[FLOE_MAX_DIMS], out[FLOE_MAX_DIMS];
  floe_code rc = ix_read_vector(ctx, 1, "axes", axes, FLOE_MAX_DIMS, &n);
  if (rc != FLOE_OK) return rc;
  int drop[FLOE_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    int a;
    if ((rc = ix_axis(ctx, axes[i], x, "axes entry", &a)) != FLOE_OK) return rc;
    if (dims[a] != 1 || drop[a])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "cannot remove dim %d of shape %s: %s", a,
                                     ix_shape_str(x).s, drop[a] ? "it is listed twice"
                                                                : "its size is not 1");
    drop[a] = 1;
  }
  int k = 0;
  for (int i = 0; i < r; i++)
    if (!(n ? drop[i] : dims[i] == 1)) out[k++] = dims[i];
  return cpu_host->ctx_forward_input(ctx, 0, 0, k, out);
}

static floe_code unsqueeze_axes_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x), n;
  int64_t axes[FLOE_MAX_DIMS], out[FLOE_MAX_DIMS];
  floe_code rc = ix_read_vector(ctx, 1, "axes", axes, FLOE_MAX_DIMS, &n);
  if (rc != FLOE_OK) return rc;
  int ro = r + n;
  if (ro > FLOE_MAX_DIMS)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "inserting %d dims into shape %s exceeds %d dims", n,
                                   ix_shape_str(x).s, FLOE_MAX_DIMS);
  int ins[FLOE_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    if (axes[i] < -ro || axes[i] >= ro)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axes entry %" PRId64 " is out of range for a result of "
                                     "rank %d", axes[i], ro);
    int a = (int)(axes[i] < 0 ? axes[i] + ro : axes[i]);
    if (ins[a]++)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "axis %d is listed twice", a);
  }
  const int64_t *dims = cpu_host->tensor_dims(x);
  for (int i = 0, k = 0; i < ro; i++) out[i] = ins[i] ? 1 : dims[k++];
  return cpu_host->ctx_forward_input(ctx, 0, 0, ro, out);
}

/* ------------------------------------------------------------------------------------ */
/* SplitV. */

static floe_code split_v_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int num = cpu_host->ctx_num_outputs(ctx), r = cpu_host->tensor_rank(x), a;
  int64_t axis, *sizes;
  floe_code rc = ix_read_scalar(ctx, 2, "axis", &axis);
  if (rc == FLOE_OK && r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "value must have rank >= 1");
  if (rc == FLOE_OK) rc = ix_axis(ctx, axis, x, "axis", &a);
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_temp(ctx, (size_t)num * sizeof *sizes, (void **)&sizes);
  const FloeTensor *st = cpu_host->ctx_input(ctx, 1);
  FloeDType sdt = cpu_host->tensor_dtype(st);
  if (rc == FLOE_OK && (cpu_host->tensor_rank(st) != 1 || cpu_host->tensor_num_elements(st) != num ||
                        (sdt != FLOE_I32 && sdt != FLOE_I64)))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "size_splits must be an i32/i64 vector of %d values, got %s %s",
                                   num, cpu_host->dtype_name(sdt), ix_shape_str(st).s);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t sum = 0;
  int rest = -1;
  for (int i = 0; i < num; i++) {
    sizes[i] = ix_index_at(cpu_host->tensor_data(st), sdt, i);
    if (sizes[i] < -1 || (sizes[i] == -1 && rest >= 0))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "size_splits may hold sizes >= 0 and one -1");
    if (sizes[i] == -1) rest = i; else sum += sizes[i];
  }
  if (sum > dims[a] || (rest < 0 && sum != dims[a]))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "size_splits add up to %" PRId64 ", not to dim %d of %s", sum,
                                   a, ix_shape_str(x).s);
  if (rest >= 0) sizes[rest] = dims[a] - sum;
  int64_t outer = ix_product(a, dims), inner = ix_product(r - a - 1, dims + a + 1);
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  const char *src = cpu_host->tensor_data(x);
  int64_t od[FLOE_MAX_DIMS], at = 0;
  memcpy(od, dims, (size_t)r * sizeof *od);
  for (int i = 0; i < num; i++) {
    od[a] = sizes[i];
    size_t piece = (size_t)(sizes[i] * inner) * es, row = (size_t)(dims[a] * inner) * es;
    if (outer == 1 && piece && FLOE_HAS_FIELD(cpu_host, FloeHostApi, ctx_forward_input_slice)) {
      rc = cpu_host->ctx_forward_input_slice(ctx, 0, i, (size_t)(at * inner) * es, r, od);
    } else {
      FloeTensor *y;
      rc = cpu_host->ctx_allocate_output(ctx, i, r, od, &y);
      for (int64_t o = 0; rc == FLOE_OK && piece && o < outer; o++)
        memcpy((char *)cpu_host->tensor_data(y) + o * piece,
               src + o * row + (size_t)(at * inner) * es, piece);
    }
    if (rc != FLOE_OK) return rc;
    at += sizes[i];
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Trilu. */

static floe_code trilu_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  int *upper = host->alloc(sizeof *upper);
  if (!upper) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  if (host->attr_bool(host->init_attrs(init), "upper", upper) != FLOE_OK) *upper = 1;
  *state = upper;
  return FLOE_OK;
}

static floe_code trilu_compute(void *state, FloeKernelContext *ctx) {
  int upper = *(const int *)state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x);
  int64_t k;
  if (r < 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input must have rank >= 2, got shape %s", ix_shape_str(x).s);
  floe_code rc = ix_read_scalar(ctx, 1, "k", &k);
  FloeTensor *y;
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_output(ctx, 0, r, cpu_host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t m = dims[r - 2], n = dims[r - 1], mats = ix_product(r - 2, dims);
  /* Clamped so i + k cannot overflow; beyond +-(m + n) every k keeps all or nothing. */
  k = k > m + n ? m + n : k < -(m + n) ? -(m + n) : k;
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  const char *src = cpu_host->tensor_data(x);
  char *dst = cpu_host->tensor_data(y);
  for (int64_t row = 0; row < mats * m; row++) {
    int64_t i = row % m;
    /* Kept columns [lo, hi): upper j >= i + k, lower j <= i + k. */
    int64_t lo = upper ? i + k : 0, hi = upper ? n : i + k + 1;
    lo = lo < 0 ? 0 : lo > n ? n : lo;
    hi = hi < lo ? lo : hi > n ? n : hi;
    size_t off = (size_t)(row * n) * es;
    memset(dst + off, 0, (size_t)lo * es);
    memcpy(dst + off + (size_t)lo * es, src + off + (size_t)lo * es, (size_t)(hi - lo) * es);
    memset(dst + off + (size_t)hi * es, 0, (size_t)(n - hi) * es);
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* ReverseSequence. */

typedef struct RevSeqState {
  int64_t seq_dim, batch_dim;
} RevSeqState;

static floe_code rev_seq_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                void **state) {
  RevSeqState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  const FloeAttrs *a = host->init_attrs(init);
  if (host->attr_int(a, "seq_dim", &s->seq_dim) != FLOE_OK ||
      host->attr_int(a, "batch_dim", &s->batch_dim) != FLOE_OK) {
    host->free(s);
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "seq_dim and batch_dim are required");
  }
  *state = s;
  return FLOE_OK;
}

static floe_code rev_seq_compute(void *state, FloeKernelContext *ctx) {
  const RevSeqState *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *lens = cpu_host->ctx_input(ctx, 1);
  int sd, bd, r = cpu_host->tensor_rank(x);
  floe_code rc = ix_axis(ctx, s->seq_dim, x, "seq_dim", &sd);
  if (rc == FLOE_OK) rc = ix_axis(ctx, s->batch_dim, x, "batch_dim", &bd);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  FloeDType ldt = cpu_host->tensor_dtype(lens);
  if (sd == bd || (ldt != FLOE_I32 && ldt != FLOE_I64) || cpu_host->tensor_rank(lens) != 1 ||
      cpu_host->tensor_dims(lens)[0] != dims[bd])
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "seq_lengths must be an i32/i64 vector of %" PRId64
                                   " values (dim %d of input %s; seq_dim %d must differ), got "
                                   "%s %s", dims[bd], bd, ix_shape_str(x).s, sd,
                                   cpu_host->dtype_name(ldt), ix_shape_str(lens).s);
  const void *ld = cpu_host->tensor_data(lens);
  for (int64_t b = 0; b < dims[bd]; b++) {
    int64_t v = ix_index_at(ld, ldt, b);
    if (v < 0 || v > dims[sd])
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "seq_lengths[%" PRId64 "] = %" PRId64 " is outside [0, %"
                                     PRId64 "]", b, v, dims[sd]);
  }
  FloeTensor *y;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, r, dims, &y)) != FLOE_OK) return rc;
  int64_t total = cpu_host->tensor_num_elements(x), pos[FLOE_MAX_DIMS] = {0}, sstride = 1;
  for (int k = r - 1; k > sd; k--) sstride *= dims[k];
  size_t es = cpu_host->dtype_size(cpu_host->tensor_dtype(x));
  const char *src = cpu_host->tensor_data(x);
  char *dst = cpu_host->tensor_data(y);
  for (int64_t e = 0; e < total; e++) {
    int64_t len = ix_index_at(ld, ldt, pos[bd]), t = pos[sd];
    int64_t from = t < len ? e + (len - 1 - 2 * t) * sstride : e;
    memcpy(dst + e * (int64_t)es, src + from * (int64_t)es, es);
    for (int k = r - 1; k >= 0; k--) {
      if (++pos[k] < dims[k]) break;
      pos[k] = 0;
    }
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Range and Cumsum. */

/* Range's length for a start, limit and delta held exactly as doubles or int64. */
static floe_code range_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = cpu_host->ctx_input(ctx, i);
    if (cpu_host->tensor_num_elements(t[i]) != 1 || cpu_host->tensor_rank(t[i]) > 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "start, limit and delta must be scalars, got input %d of "
                                     "shape %s", i, ix_shape_str(t[i]).s);
  }
  FloeDType dt = cpu_host->tensor_dtype(t[0]);
  int fl = ix_is_float(dt);
  double fs = 0, fd = 0;
  int64_t is = 0, id = 0, n;
  if (fl) {
    fs = cpu_float_load(dt, cpu_host->tensor_data(t[0]), 0);
    double fe = cpu_float_load(dt, cpu_host->tensor_data(t[1]), 0);
    fd = cpu_float_load(dt, cpu_host->tensor_data(t[2]), 0);
    double c = ceil((fe - fs) / fd);
    if (fd == 0 || !(c == c) || c > 1e15)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "Range(%g, %g, %g) has no finite length", fs, fe, fd);
    n = c > 0 ? (int64_t)c : 0;
  } else {
    is = ix_load_i(dt, cpu_host->tensor_data(t[0]), 0);
    int64_t ie = ix_load_i(dt, cpu_host->tensor_data(t[1]), 0);
    id = ix_load_i(dt, cpu_host->tensor_data(t[2]), 0);
    if (id == 0)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "Range delta must not be 0");
    __int128 span = (__int128)ie - is, d = id;
    __int128 c = span / d + ((span % d) != 0 && ((span > 0) == (d > 0)));
    n = c > 0 ? (int64_t)c : 0;
  }
  FloeTensor *y;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, 1, &n, &y);
  if (rc != FLOE_OK) return rc;
  void *out = cpu_host->tensor_data(y);
  for (int64_t i = 0; i < n; i++) {
    if (fl)
      cpu_float_store(dt, out, i, fs + (double)i * fd);
    else
      ix_store_i(dt, out, i, (int64_t)((uint64_t)is + (uint64_t)i * (uint64_t)id));
  }
  return FLOE_OK;
}

typedef struct CumsumState {
  int exclusive, reverse;
} CumsumState;

static floe_code cumsum_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  CumsumState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  const FloeAttrs *a = host->init_attrs(init);
  if (host->attr_bool(a, "exclusive", &s->exclusive) != FLOE_OK) s->exclusive = 0;
  if (host->attr_bool(a, "reverse", &s->reverse) != FLOE_OK) s->reverse = 0;
  *state = s;
  return FLOE_OK;
}

static floe_code cumsum_compute(void *state, FloeKernelContext *ctx) {
  const CumsumState *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x), a;
  int64_t axis;
  if (r == 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "x must have rank >= 1");
  floe_code rc = ix_read_scalar(ctx, 1, "axis", &axis);
  if (rc == FLOE_OK) rc = ix_axis(ctx, axis, x, "axis", &a);
  FloeTensor *y;
  if (rc == FLOE_OK) rc = cpu_host->ctx_allocate_output(ctx, 0, r, cpu_host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  const int64_t *dims = cpu_host->tensor_dims(x);
  int64_t n = dims[a], outer = ix_product(a, dims), inner = ix_product(r - a - 1, dims + a + 1);
  FloeDType dt = cpu_host->tensor_dtype(x);
  const void *src = cpu_host->tensor_data(x);
  void *dst = cpu_host->tensor_data(y);
  int fl = ix_is_float(dt);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double fsum = 0;
      uint64_t isum = 0; /* wraps like the dtype once stored */
      for (int64_t j = 0; j < n; j++) {
        int64_t t = s->reverse ? n - 1 - j : j, e = (o * n + t) * inner + i;
        if (fl) {
          double v = cpu_float_load(dt, src, e);
          if (!s->exclusive) fsum += v;
          cpu_float_store(dt, dst, e, fsum);
          if (s->exclusive) fsum += v;
        } else {
          uint64_t v = (uint64_t)ix_load_i(dt, src, e);
          if (!s->exclusive) isum += v;
          ix_store_i(dt, dst, e, (int64_t)isum);
          if (s->exclusive) isum += v;
        }
      }
    }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_index_move(FloePluginRegistrar *reg) {
  typedef floe_code (*CreateFn)(const FloeHostApi *, FloeKernelInit *, void *, void **);
  const struct {
    const char *op, *attr;
    uint32_t dtypes, flags;
    floe_code (*compute)(void *, FloeKernelContext *);
    CreateFn create;
  } k[] = {
      {"SliceAxes", "T", FLOE_DTYPES_ALL, 0, slice_axes_compute, NULL},
      {"SliceAxesGrad", "T", FLOE_DTYPES_ALL, 0, slice_axes_grad_compute, NULL},
      {"SqueezeAxes", "T", FLOE_DTYPES_ALL, FLOE_KERNEL_INEXPENSIVE, squeeze_axes_compute, NULL},
      {"UnsqueezeAxes", "T", FLOE_DTYPES_ALL, FLOE_KERNEL_INEXPENSIVE, unsqueeze_axes_compute,
       NULL},
      {"SplitV", "T", FLOE_DTYPES_ALL, 0, split_v_compute, NULL},
      {"Trilu", "T", FLOE_DTYPES_ALL, 0, trilu_compute, trilu_create},
      {"ReverseSequence", "T", FLOE_DTYPES_ALL, 0, rev_seq_compute, rev_seq_create},
      {"Range", "T",
       FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_I8) |
           FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64),
       0, range_compute, NULL},
      {"Cumsum", "T", FLOE_DTYPES_NUMERIC, 0, cumsum_compute, cumsum_create},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    floe_code rc = cpu_add_kernel(reg, k[i].op, k[i].attr, k[i].dtypes, k[i].flags, k[i].compute,
                                  k[i].create, k[i].create ? ix_state_free : NULL, NULL);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
