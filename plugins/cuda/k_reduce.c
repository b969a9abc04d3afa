/* SPDX-License-Identifier: Apache-2.0 */
/* k_reduce.c - CUDA reductions and losses: Sum / Mean / Max / Min / Prod over any axes,
 * ArgMax / ArgMin, BiasAddGrad, the softmax cross-entropy losses (own kernels), and
 * Softmax / LogSoftmax (cuDNN over the last axis, an own kernel over any other).
 *
 * A reduction is planned on the host: size-1 dims dropped, neighbouring kept or reduced dims
 * merged. When the reduced dims are one block the input is already [outer, r, inner]; when
 * they are not (Sum over dims 0 and 2 of 3), the input is first transposed into scratch so
 * the reduced dims come last ([kept, reduced]). */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "cuda.h"

#define DT_CORE                                                                              \
  (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_I32) |         \
   FLOE_DTYPE_BIT(FLOE_I64))
#define DT_FLOAT (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64))
#define SHAPE(buf, r, d) cu_shape_str(buf, sizeof buf, (r), (d))

static void state_free(void *state) { cu_host->free(state); }

/* Reduces x (rank r, dims d) over the dims marked in red[] into out (launched on c's
 * stream; scratch from ctx). */
static floe_code reduce_dims(CuCall *c, CuReduceOp op, FloeDType dt, const void *x, int r,
                             const int64_t *d, const int *red, void *out) {
  CuReducePlan pl;
  cu_reduce_plan(r, d, red, &pl);
  CuStream s = (CuStream)c->dev->compute;
  if (!pl.transpose)
    return cu_end(c, cu_reduce(s, op, dt, pl.outer, pl.r, pl.inner, x, out), "the reduction");
  int64_t outer = pl.outer, rr = pl.r;
  size_t es = cu_host->dtype_size(dt);
  void *tmp;
  floe_code rc = cu_host->ctx_allocate_temp(c->ctx, (size_t)(outer * rr) * es, &tmp);
  if (rc != FLOE_OK) {
    cu_abort(c);
    return cu_host->ctx_set_error(c->ctx, rc, "cannot allocate %" PRId64 " bytes of scratch for "
                                  "the transposed input", (int64_t)((size_t)(outer * rr) * es));
  }
  int lr = cu_transpose(s, pl.rank, pl.dims, pl.perm, x, tmp, (int)es);
  if (lr == 0) lr = cu_reduce(s, op, dt, outer, rr, 1, tmp, out);
  return cu_end(c, lr, "the reduction");
}

typedef struct ReduceState {
  CuReduceOp op;
  int keep_dims;
} ReduceState;

static floe_code reduce_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                               void **state) {
  ReduceState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  s->op = (CuReduceOp)(intptr_t)user_data;
  if (host->attr_bool(host->init_attrs(init), "keep_dims", &s->keep_dims) != FLOE_OK)
    s->keep_dims = 0;
  *state = s;
  return FLOE_OK;
}

static floe_code reduce_compute(void *state, FloeKernelContext *ctx) {
  const ReduceState *s = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  const int64_t *d = cu_host->tensor_dims(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t axes[FLOE_MAX_DIMS];
  int na = 0, red[FLOE_MAX_DIMS] = {0};
  if ((rc = cu_read_index_input(&c, 1, "axis", axes, FLOE_MAX_DIMS, &na)) != FLOE_OK)
    return cu_abort(&c), rc;
  for (int k = 0; k < na; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
    if (a < 0 || a >= r || red[a]) {
      cu_abort(&c);
      char b[CU_SHAPE_STR_MAX];
      return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                    "axis %" PRId64 " is out of range or repeated for input "
                                    "of shape %s",
                                    axes[k], SHAPE(b, r, d));
    }
    red[a] = 1;
  }
  int64_t od[FLOE_MAX_DIMS];
  int orank = 0;
  for (int i = 0; i < r; i++)
    if (!red[i] || s->keep_dims) od[orank++] = red[i] ? 1 : d[i];
  if (na == 0) {
    cu_abort(&c);
    return cu_host->ctx_forward_input(ctx, 0, 0, orank, od);
  }
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, orank, od, &out)) != FLOE_OK)
    return cu_abort(&c), rc;
  return reduce_dims(&c, s->op, cu_host->tensor_dtype(x), cu_host->tensor_data(x), r, d, red,
                     cu_host->tensor_data(out));
}

static floe_code arg_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(x);
  const int64_t *d = cu_host->tensor_dims(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t a = 0;
  int n = 0;
  if ((rc = cu_read_index_input(&c, 1, "dimension", &a, 1, &n)) != FLOE_OK) return cu_abort(&c), rc;
  if (n != 1 || a < -r || a >= r || (r > 0 && d[a < 0 ? a + r : a] == 0)) {
    cu_abort(&c);
    char b[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "dimension must be a scalar in [%d, %d) naming a non-empty "
                                  "dim of input %s",
                                  -r, r, SHAPE(b, r, d));
  }
  if (a < 0) a += r;
  int64_t od[FLOE_MAX_DIMS], outer = 1, inner = 1;
  int orank = 0;
  for (int i = 0; i < r; i++) {
    if (i != a) od[orank++] = d[i];
    if (i < a) outer *= d[i];
    if (i > a) inner *= d[i];
  }
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, orank, od, &out)) != FLOE_OK)
    return cu_abort(&c), rc;
  int lr = cu_arg_reduce((CuStream)c.dev->compute, state != NULL, cu_host->tensor_dtype(x),
                         cu_host->tensor_dtype(out), outer, d[a], inner, cu_host->tensor_data(x),
                         cu_host->tensor_data(out));
  return cu_end(&c, lr, cu_host->ctx_op(ctx));
}

/* SumToShape (the gradient of a broadcasting operand): x summed over the dims broadcasting
 * stretched, so the result has the target shape. */
static floe_code sum_to_shape_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  int xr = cu_host->tensor_rank(x), tr = 0;
  const int64_t *xd = cu_host->tensor_dims(x);
  CuCall c;
  floe_code rc = cu_begin(ctx, &c);
  if (rc != FLOE_OK) return rc;
  int64_t t[FLOE_MAX_DIMS];
  if ((rc = cu_read_index_input(&c, 1, "shape", t, FLOE_MAX_DIMS, &tr)) != FLOE_OK)
    return cu_abort(&c), rc;
  int red[FLOE_MAX_DIMS], ok = tr <= xr;
  for (int i = 0; ok && i < xr; i++) {
    int j = i - (xr - tr);
    int64_t want = j >= 0 ? t[j] : 1;
    ok = want == xd[i] || want == 1;
    red[i] = want != xd[i] || j < 0;
  }
  if (!ok) {
    cu_abort(&c);
    char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "shape %s does not broadcast to the input's %s",
                                  SHAPE(a, tr, t), SHAPE(b, xr, xd));
  }
  FloeTensor *out;
  if ((rc = cu_host->ctx_allocate_output(ctx, 0, tr, t, &out)) != FLOE_OK) return cu_abort(&c), rc;
  return reduce_dims(&c, CU_R_SUM, cu_host->tensor_dtype(x), cu_host->tensor_data(x), xr, xd, red,
                     cu_host->tensor_data(out));
}

/* BiasAddGrad: the sum over every dim but the channel dim. */
static floe_code bias_grad_create(const FloeHostApi *host, FloeKernelInit *init,
                                  void *user_data, void **state) {
  const char *f = "NHWC";
  floe_code rc = host->attr_string(host->init_attrs(init), "data_format", &f);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(f, "NHWC") && strcmp(f, "NCHW"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be NHWC or NCHW, got \"%s\"", f);
  int *nchw = host->alloc(sizeof *nchw);
  if (!nchw) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  *nchw = !strcmp(f, "NCHW");
  *state = nchw;
  return FLOE_OK;
}

static floe_code bias_grad_compute(void *state, FloeKernelContext *ctx) {
  int nchw = *(const int *)state;
  const FloeTensor *g = cu_host->ctx_input(ctx, 0);
  int r = cu_host->tensor_rank(g);
  const int64_t *d = cu_host->tensor_dims(g);
  if (r < (nchw ? 3 : 1)) {
    char b[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "out_backprop %s has too few dims for %s", SHAPE(b, r, d),
                                  nchw ? "NCHW" : "NHWC");
  }
  int ch = nchw ? 1 : r - 1, red[FLOE_MAX_DIMS];
  for (int i = 0; i < r; i++) red[i] = i != ch;
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, 1, &d[ch], &out);
  if (rc != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  return reduce_dims(&c, CU_R_SUM, cu_host->tensor_dtype(g), cu_host->tensor_data(g), r, d, red,
                     cu_host->tensor_data(out));
}

/* ------------------------------------------------------------------------------------ */
/* Losses. */

static floe_code xent_shapes(FloeKernelContext *ctx, const FloeTensor *f, int64_t *batch,
                             int64_t *classes) {
  char b[CU_SHAPE_STR_MAX];
  if (cu_host->tensor_rank(f) != 2 || cu_host->tensor_dtype(f) != FLOE_F32)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "features must be f32 [batch, classes], got %s %s",
                                  cu_host->dtype_name(cu_host->tensor_dtype(f)),
                                  SHAPE(b, cu_host->tensor_rank(f), cu_host->tensor_dims(f)));
  *batch = cu_host->tensor_dims(f)[0];
  *classes = cu_host->tensor_dims(f)[1];
  return FLOE_OK;
}

static floe_code xent_outputs(FloeKernelContext *ctx, const FloeTensor *f, FloeTensor **loss,
                              FloeTensor **bp) {
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, 1, cu_host->tensor_dims(f), loss);
  if (rc == FLOE_OK) rc = cu_host->ctx_allocate_output(ctx, 1, 2, cu_host->tensor_dims(f), bp);
  return rc;
}

static floe_code xent_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *f = cu_host->ctx_input(ctx, 0), *y = cu_host->ctx_input(ctx, 1);
  int64_t batch, classes;
  floe_code rc = xent_shapes(ctx, f, &batch, &classes);
  if (rc != FLOE_OK) return rc;
  if (cu_host->tensor_rank(y) != 2 || cu_host->tensor_dims(y)[0] != batch ||
      cu_host->tensor_dims(y)[1] != classes || cu_host->tensor_dtype(y) != FLOE_F32) {
    char a[CU_SHAPE_STR_MAX], b[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "labels %s must match features %s",
                                  SHAPE(a, cu_host->tensor_rank(y), cu_host->tensor_dims(y)),
                                  SHAPE(b, 2, cu_host->tensor_dims(f)));
  }
  FloeTensor *loss, *bp;
  if ((rc = xent_outputs(ctx, f, &loss, &bp)) != FLOE_OK) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  int lr = cu_softmax_xent((CuStream)c.dev->compute, batch, classes, cu_host->tensor_data(f),
                           cu_host->tensor_data(y), cu_host->tensor_data(loss),
                           cu_host->tensor_data(bp));
  return cu_end(&c, lr, "SoftmaxCrossEntropyWithLogits");
}

/* Labels out of [0, classes) are an error (the op's contract), so they are read back and
 * checked first: the loss waits for the labels' copy (a batch of integers). */
static floe_code sparse_xent_compute(void *state, FloeKernelContext *ctx) {
  const FloeTensor *f = cu_host->ctx_input(ctx, 0), *y = cu_host->ctx_input(ctx, 1);
  int64_t batch, classes;
  floe_code rc = xent_shapes(ctx, f, &batch, &classes);
  if (rc != FLOE_OK) return rc;
  FloeDType ldt = cu_host->tensor_dtype(y);
  if (cu_host->tensor_rank(y) != 1 || cu_host->tensor_dims(y)[0] != batch ||
      (ldt != FLOE_I32 && ldt != FLOE_I64)) {
    char a[CU_SHAPE_STR_MAX];
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "labels must be i32 or i64 [%" PRId64 "], got %s %s", batch,
                                  cu_host->dtype_name(ldt),
                                  SHAPE(a, cu_host->tensor_rank(y), cu_host->tensor_dims(y)));
  }
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  size_t bytes = (size_t)batch * cu_host->dtype_size(ldt);
  void *h = cu_host->alloc(bytes ? bytes : 1);
  if (!h) {
    cu_abort(&c);
    return cu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory reading %" PRId64 " labels",
                                  batch);
  }
  rc = cu_read_device(&c, h, cu_host->tensor_data(y), bytes, "reading the labels");
  for (int64_t i = 0; rc == FLOE_OK && i < batch; i++) {
    int64_t v = ldt == FLOE_I64 ? ((const int64_t *)h)[i] : ((const int32_t *)h)[i];
    if (v < 0 || v >= classes)
      rc = cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "labels[%" PRId64 "] = %" PRId64 " is not in [0, %" PRId64 ")",
                                  i, v, classes);
  }
  cu_host->free(h);
  FloeTensor *loss, *bp;
  if (rc == FLOE_OK) rc = xent_outputs(ctx, f, &loss, &bp);
  if (rc != FLOE_OK) return cu_abort(&c), rc;
  int lr = cu_sparse_softmax_xent((CuStream)c.dev->compute, batch, classes,
                                  cu_host->tensor_data(f), ldt, cu_host->tensor_data(y),
                                  cu_host->tensor_data(loss), cu_host->tensor_data(bp));
  return cu_end(&c, lr, "SparseSoftmaxCrossEntropyWithLogits");
}

/* ------------------------------------------------------------------------------------ */
/* Softmax / LogSoftmax along one axis (the CPU plugin's: the attribute "axis", default -1,
 * negative counting from the end), x viewed as [outer, n, inner]. The last axis goes to
 * cuDNN (rows as N, classes as C); any other axis, or logits too large for cuDNN's int dims,
 * to cu_softmax (one thread per column). */

typedef struct SoftmaxState {
  int log_sm;
  int64_t axis;
} SoftmaxState;

static floe_code softmax_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                                void **state) {
  int64_t axis = -1;
  floe_code rc = host->attr_int(host->init_attrs(init), "axis", &axis);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "axis must be an int");
  SoftmaxState *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory for kernel state");
  s->log_sm = user_data != NULL;
  s->axis = axis;
  *state = s;
  return FLOE_OK;
}

/* y = softmax of x [rows, classes] along classes, by cuDNN (dims checked to fit its ints). */
static floe_code softmax_dnn(CuCall *c, bool log_softmax, FloeDType dt, int64_t rows,
                             int64_t classes, const void *x, void *y) {
  cudnnDataType_t t = dt == FLOE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnTensorDescriptor_t desc = NULL;
  cudnnStatus_t e = cudnnCreateTensorDescriptor(&desc);
  if (e == CUDNN_STATUS_SUCCESS)
    e = cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, t, (int)rows, (int)classes, 1, 1);
  if (e == CUDNN_STATUS_SUCCESS) {
    double one64 = 1.0, zero64 = 0.0;
    float one32 = 1.0f, zero32 = 0.0f;
    const void *alpha = t == CUDNN_DATA_DOUBLE ? (const void *)&one64 : (const void *)&one32;
    const void *beta = t == CUDNN_DATA_DOUBLE ? (const void *)&zero64 : (const void *)&zero32;
    pthread_mutex_lock(&c->dev->dnn_mu);
    e = cudnnSoftmaxForward(c->dev->dnn, log_softmax ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                            CUDNN_SOFTMAX_MODE_INSTANCE, alpha, desc, x, beta, desc, y);
    pthread_mutex_unlock(&c->dev->dnn_mu);
  }
  if (desc) cudnnDestroyTensorDescriptor(desc);
  if (e != CUDNN_STATUS_SUCCESS) {
    cu_abort(c);
    return cu_fail_dnn(c->ctx, e, log_softmax ? "LogSoftmax" : "Softmax");
  }
  return cu_end(c, (int)cudaGetLastError(), log_softmax ? "LogSoftmax" : "Softmax");
}

static floe_code softmax_compute(void *state, FloeKernelContext *ctx) {
  const SoftmaxState *st = state;
  const FloeTensor *x = cu_host->ctx_input(ctx, 0);
  FloeDType dt = cu_host->tensor_dtype(x);
  int r = cu_host->tensor_rank(x);
  const int64_t *d = cu_host->tensor_dims(x);
  char b[CU_SHAPE_STR_MAX];
  if (r == 0)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "logits must have rank >= 1, got a scalar (shape [])");
  if (st->axis < -r || st->axis >= r)
    return cu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                  "axis %" PRId64 " is out of range for logits of shape %s "
                                  "(expected in [%d, %d))",
                                  st->axis, SHAPE(b, r, d), -r, r);
  int axis = (int)(st->axis < 0 ? st->axis + r : st->axis);
  int64_t outer = 1, n = d[axis], inner = 1;
  for (int i = 0; i < r; i++) {
    if (i < axis) outer *= d[i];
    if (i > axis) inner *= d[i];
  }
  FloeTensor *out;
  floe_code rc = cu_host->ctx_allocate_output(ctx, 0, r, d, &out);
  if (rc != FLOE_OK || outer * n * inner == 0) return rc;
  CuCall c;
  if ((rc = cu_begin(ctx, &c)) != FLOE_OK) return rc;
  /* cuDNN takes int dims and may index the whole tensor with an int. */
  if (inner == 1 && outer * n <= INT_MAX)
    return softmax_dnn(&c, st->log_sm, dt, outer, n, cu_host->tensor_data(x),
                       cu_host->tensor_data(out));
  int lr = cu_softmax((CuStream)c.dev->compute, st->log_sm, dt, outer, n, inner,
                      cu_host->tensor_data(x), cu_host->tensor_data(out));
  return cu_end(&c, lr, st->log_sm ? "LogSoftmax" : "Softmax");
}

/* ------------------------------------------------------------------------------------ */

floe_code cu_register_reduce(FloePluginRegistrar *reg) {
  static const struct {
    const char *op;
    CuReduceOp r;
  } reds[] = {{"Sum", CU_R_SUM}, {"Mean", CU_R_MEAN}, {"Max", CU_R_MAX},
              {"Min", CU_R_MIN}, {"Prod", CU_R_PROD}};
  floe_code rc = FLOE_OK;
  for (size_t i = 0; rc == FLOE_OK && i < sizeof reds / sizeof reds[0]; i++)
    rc = cu_add_kernel(reg, reds[i].op, "T", DT_CORE, 0, reduce_compute, reduce_create,
                       state_free, (void *)(intptr_t)reds[i].r);
  static const int flag = 1;
  const uint32_t f32 = FLOE_DTYPE_BIT(FLOE_F32);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "ArgMax", "T", DT_CORE, 0, arg_compute, NULL, NULL, (void *)&flag);
  if (rc == FLOE_OK) rc = cu_add_kernel(reg, "ArgMin", "T", DT_CORE, 0, arg_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "SumToShape", "T", DT_CORE, 0, sum_to_shape_compute, NULL, NULL,
                       NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "BiasAddGrad", "T", DT_CORE, 0, bias_grad_compute, bias_grad_create,
                       state_free, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "SoftmaxCrossEntropyWithLogits", "T", f32, 0, xent_compute, NULL,
                       NULL, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "SparseSoftmaxCrossEntropyWithLogits", "T", f32, 0,
                       sparse_xent_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "Softmax", "T", DT_FLOAT, 0, softmax_compute, softmax_create,
                       state_free, NULL);
  if (rc == FLOE_OK)
    rc = cu_add_kernel(reg, "LogSoftmax", "T", DT_FLOAT, 0, softmax_compute, softmax_create,
                       state_free, (void *)&flag);
  return rc;
}
