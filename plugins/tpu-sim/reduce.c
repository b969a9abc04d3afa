/* SPDX-License-Identifier: Apache-2.0 */
/* reduce.c - reductions (Sum, Mean, Max over any axes), Softmax, LogSoftmax and the two
 * softmax cross-entropies, on the vector unit in f32 (sums accumulate in double so the
 * result does not depend on how the work was split over the pool). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim.h"

/* ---------------------------------------------------------------------------------- */
/* Sum, Mean, Max. */

typedef enum RedOp { R_SUM, R_MEAN, R_MAX } RedOp;
static const RedOp RED_IDS[] = {R_SUM, R_MEAN, R_MAX};

typedef struct RedState {
  RedOp op;
  int keep_dims;
} RedState;

static floe_code red_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  RedState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->op = *(const RedOp *)user_data;
  s->keep_dims = 0;
  floe_code rc = host->attr_bool(host->init_attrs(init), "keep_dims", &s->keep_dims);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute keep_dims must be a bool");
  }
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { tpu_host->free(state); }

typedef struct RedJob {
  RedOp op;
  const float *x;
  float *y;
  int nk;                          /* kept dims */
  int64_t kdims[FLOE_MAX_DIMS], kstride[FLOE_MAX_DIMS];
  const int64_t *roff;             /* offsets of the reduced elements from a kept base */
  int64_t rcount;
} RedJob;

static void red_outputs(void *arg, int64_t begin, int64_t end) {
  const RedJob *j = arg;
  for (int64_t o = begin; o < end; o++) {
    int64_t base = 0, rest = o;
    for (int d = j->nk - 1; d >= 0; d--) {
      base += (rest % j->kdims[d]) * j->kstride[d];
      rest /= j->kdims[d];
    }
    const float *x = j->x + base;
    if (j->op == R_MAX) {
      float m = -INFINITY;
      for (int64_t r = 0; r < j->rcount; r++) {
        float v = x[j->roff[r]];
        if (v > m || v != v) m = v;
        if (m != m) break;
      }
      j->y[o] = m;
    } else {
      double s = 0;
      for (int64_t r = 0; r < j->rcount; r++) s += x[j->roff[r]];
      j->y[o] = (float)(j->op == R_MEAN ? (j->rcount ? s / (double)j->rcount : NAN) : s);
    }
  }
}

static floe_code red_compute(void *state, FloeKernelContext *ctx) {
  const RedState *s = state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0), *ax = tpu_host->ctx_input(ctx, 1);
  int rank = tpu_host->tensor_rank(x);
  const int64_t *dims = tpu_host->tensor_dims(x);
  FloeDType adt = tpu_host->tensor_dtype(ax);
  char b[TPU_SHAPE_STR_MAX];
  if ((adt != FLOE_I32 && adt != FLOE_I64) || tpu_host->tensor_rank(ax) > 1)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis must be an i32 or i64 scalar or vector, got %s %s",
                                   tpu_host->dtype_name(adt), tpu_shape_str(ax, b, sizeof b));
  bool red[FLOE_MAX_DIMS] = {false};
  const void *av = tpu_host->tensor_data(ax);
  for (int64_t i = 0; i < tpu_host->tensor_num_elements(ax); i++) {
    int64_t a = adt == FLOE_I32 ? ((const int32_t *)av)[i] : ((const int64_t *)av)[i];
    int64_t d = a < 0 ? a + rank : a;
    if (d < 0 || d >= rank)
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %lld is out of range for input of shape %s (rank %d)",
                                     (long long)a, tpu_shape_str(x, b, sizeof b), rank);
    if (red[d])
      return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "axis %lld is repeated (dim %lld of input shape %s)",
                                     (long long)a, (long long)d, tpu_shape_str(x, b, sizeof b));
    red[d] = true;
  }
  RedJob j = {.op = s->op, .x = tpu_host->tensor_data(x), .rcount = 1};
  int64_t odims[FLOE_MAX_DIMS], stride[FLOE_MAX_DIMS], outs = 1, step = 1;
  int orank = 0;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = step;
    step *= dims[d];
  }
  int nr = 0;
  int64_t rdims[FLOE_MAX_DIMS], rstride[FLOE_MAX_DIMS];
  for (int d = 0; d < rank; d++) {
    if (red[d]) {
      rdims[nr] = dims[d];
      rstride[nr++] = stride[d];
      j.rcount *= dims[d];
      if (s->keep_dims) odims[orank++] = 1;
    } else {
      j.kdims[j.nk] = dims[d];
      j.kstride[j.nk++] = stride[d];
      outs *= dims[d];
      odims[orank++] = dims[d];
    }
  }
  FloeTensor *out;
  if ((rc = tpu_output(ctx, 0, orank, odims, &out, (void **)&j.y)) != FLOE_OK) return rc;
  if (outs > 0) {
    int64_t *roff;
    if ((rc = tpu_temp(ctx, (size_t)(j.rcount ? j.rcount : 1) * sizeof *roff, (void **)&roff)) !=
        FLOE_OK)
      return rc;
    for (int64_t r = 0; r < j.rcount; r++) { /* offsets of the reduced multi-indices */
      int64_t off = 0, rest = r;
      for (int d = nr - 1; d >= 0; d--) {
        off += (rest % rdims[d]) * rstride[d];
        rest /= rdims[d];
      }
      roff[r] = off;
    }
    j.roff = roff;
    tpu_parallel_for(outs, j.rcount + 1, red_outputs, &j);
  }
  double n = (double)tpu_host->tensor_num_elements(x);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, n, 4.0 * (n + (double)outs)));
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Softmax and LogSoftmax along `axis`: x seen as [outer, R, inner]. */

typedef struct SmState {
  bool log;
  int64_t axis;
} SmState;

static floe_code sm_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                           void **state) {
  SmState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->log = user_data != NULL;
  s->axis = -1;
  floe_code rc = host->attr_int(host->init_attrs(init), "axis", &s->axis);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND) {
    host->free(s);
    return host->init_set_error(init, rc, "attribute axis must be an int");
  }
  *state = s;
  return FLOE_OK;
}

typedef struct SmJob {
  bool log;
  int64_t r, inner;
  const float *x;
  float *y;
} SmJob;

/* Lines [begin, end) (a line: one (outer, inner) pair, R elements apart by inner). */
static void sm_lines(void *arg, int64_t begin, int64_t end) {
  const SmJob *j = arg;
  for (int64_t l = begin; l < end; l++) {
    int64_t o = l / j->inner, i = l % j->inner;
    const float *x = j->x + o * j->r * j->inner + i;
    float *y = j->y + o * j->r * j->inner + i;
    float m = -INFINITY;
    for (int64_t k = 0; k < j->r; k++) m = x[k * j->inner] > m ? x[k * j->inner] : m;
    double sum = 0;
    for (int64_t k = 0; k < j->r; k++) sum += exp((double)x[k * j->inner] - m);
    double lse = log(sum);
    for (int64_t k = 0; k < j->r; k++) {
      double z = (double)x[k * j->inner] - m;
      y[k * j->inner] = (float)(j->log ? z - lse : exp(z - lse));
    }
  }
}

static floe_code sm_compute(void *state, FloeKernelContext *ctx) {
  const SmState *s = state;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *x = tpu_host->ctx_input(ctx, 0);
  int rank = tpu_host->tensor_rank(x);
  const int64_t *d = tpu_host->tensor_dims(x);
  int64_t axis = s->axis < 0 ? s->axis + rank : s->axis;
  char b[TPU_SHAPE_STR_MAX];
  if (rank < 1 || axis < 0 || axis >= rank)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %lld is out of range for logits of shape %s",
                                   (long long)s->axis, tpu_shape_str(x, b, sizeof b));
  SmJob j = {s->log, d[axis], 1, tpu_host->tensor_data(x), NULL};
  int64_t outer = 1;
  for (int i = 0; i < axis; i++) outer *= d[i];
  for (int i = (int)axis + 1; i < rank; i++) j.inner *= d[i];
  FloeTensor *out;
  if ((rc = tpu_output(ctx, 0, rank, d, &out, (void **)&j.y)) != FLOE_OK) return rc;
  if (j.r > 0) tpu_parallel_for(outer * j.inner, j.r * 20 + 1, sm_lines, &j);
  /* Per element: max, subtract, exp (8), add, and a multiply or subtract. */
  double n = (double)tpu_host->tensor_num_elements(x);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, 12.0 * n, 8.0 * n));
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* SoftmaxCrossEntropyWithLogits(features [B,C], labels [B,C]) and the sparse form (labels
 * [B] of class indices): loss [B] = -sum_c p_c log softmax(f)_c, backprop = softmax(f) - p. */

typedef struct XentJob {
  int64_t c;
  const float *f, *lab;   /* lab: dense labels, or NULL */
  const int64_t *cls;     /* sparse: class per row */
  float *loss, *grad;
} XentJob;

static void xent_rows(void *arg, int64_t begin, int64_t end) {
  const XentJob *j = arg;
  for (int64_t r = begin; r < end; r++) {
    const float *f = j->f + r * j->c;
    float *g = j->grad + r * j->c;
    float m = -INFINITY;
    for (int64_t k = 0; k < j->c; k++) m = f[k] > m ? f[k] : m;
    double sum = 0;
    for (int64_t k = 0; k < j->c; k++) sum += exp((double)f[k] - m);
    double lse = log(sum), loss = 0;
    for (int64_t k = 0; k < j->c; k++) {
      double logp = (double)f[k] - m - lse;
      double p = j->lab ? j->lab[r * j->c + k] : (k == j->cls[r] ? 1.0 : 0.0);
      if (p != 0) loss -= p * logp;
      g[k] = (float)(exp(logp) - p);
    }
    j->loss[r] = (float)loss;
  }
}

static floe_code xent_compute(void *state, FloeKernelContext *ctx) {
  bool sparse = state != NULL;
  floe_code rc = tpu_check_inputs(ctx);
  if (rc != FLOE_OK) return rc;
  const FloeTensor *f = tpu_host->ctx_input(ctx, 0), *l = tpu_host->ctx_input(ctx, 1);
  char a[TPU_SHAPE_STR_MAX], b[TPU_SHAPE_STR_MAX];
  if (tpu_host->tensor_rank(f) != 2)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "features must be [batch, classes], got %s",
                                   tpu_shape_str(f, a, sizeof a));
  int64_t rows = tpu_host->tensor_dims(f)[0], c = tpu_host->tensor_dims(f)[1];
  bool ok = sparse ? tpu_host->tensor_rank(l) == 1 && tpu_host->tensor_dims(l)[0] == rows
                   : tpu_host->tensor_rank(l) == 2 && tpu_host->tensor_dims(l)[0] == rows &&
                         tpu_host->tensor_dims(l)[1] == c;
  if (!ok)
    return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "labels of shape %s do not match features of shape %s (want "
                                   "%s)", tpu_shape_str(l, a, sizeof a),
                                   tpu_shape_str(f, b, sizeof b),
                                   sparse ? "[batch]" : "the same shape");
  XentJob j = {c, tpu_host->tensor_data(f), NULL, NULL, NULL, NULL};
  if (sparse) {
    FloeDType ldt = tpu_host->tensor_dtype(l);
    int64_t *cls;
    if ((rc = tpu_temp(ctx, (size_t)(rows ? rows : 1) * sizeof *cls, (void **)&cls)) != FLOE_OK)
      return rc;
    const void *lv = tpu_host->tensor_data(l);
    for (int64_t r = 0; r < rows; r++) {
      cls[r] = ldt == FLOE_I32 ? ((const int32_t *)lv)[r] : ((const int64_t *)lv)[r];
      if (cls[r] < 0 || cls[r] >= c)
        return tpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                       "label %lld of row %lld is not a class in [0, %lld)",
                                       (long long)cls[r], (long long)r, (long long)c);
    }
    j.cls = cls;
  } else {
    j.lab = tpu_host->tensor_data(l);
  }
  FloeTensor *lo, *go;
  if ((rc = tpu_output(ctx, 0, 1, &rows, &lo, (void **)&j.loss)) != FLOE_OK ||
      (rc = tpu_output(ctx, 1, 2, tpu_host->tensor_dims(f), &go, (void **)&j.grad)) != FLOE_OK)
    return rc;
  if (c > 0) tpu_parallel_for(rows, c * 30 + 1, xent_rows, &j);
  double n = (double)(rows * c);
  tpu_report_ns(ctx, tpu_cost_vector_ns(tpu_chip(ctx)->cfg, 14.0 * n,
                                        4.0 * (3.0 * n + (double)rows)));
  return FLOE_OK;
}

floe_code tpu_register_reduce(FloePluginRegistrar *reg) {
  uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  static const char *const names[] = {"Sum", "Mean", "Max"};
  floe_code rc = FLOE_OK;
  for (int i = 0; i < 3 && rc == FLOE_OK; i++)
    rc = tpu_add_kernel(reg, names[i], "T", f32, 0, red_compute, red_create, state_free,
                        (void *)&RED_IDS[i]);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "Softmax", "T", f32, 0, sm_compute, sm_create, state_free, NULL);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "LogSoftmax", "T", f32, 0, sm_compute, sm_create, state_free,
                        (void *)"log");
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "SoftmaxCrossEntropyWithLogits", "T", f32, 0, xent_compute, NULL,
                        NULL, NULL);
  if (rc == FLOE_OK)
    rc = tpu_add_kernel(reg, "SparseSoftmaxCrossEntropyWithLogits", "T", f32, 0, xent_compute,
                        NULL, NULL, (void *)"sparse");
  return rc;
}
