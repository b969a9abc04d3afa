/* SPDX-License-Identifier: Apache-2.0 */
/* lstm.c - the fused LSTM cell of the CPU plugin: LSTMCell, LSTMCellGrad and LSTMCellBackprop
 * (LSTMCellGrad without dw and db, giving d_gates instead), and LSTMCellRecurrent and its
 * backprop, the cell whose input projection was made beforehand (f32, f64).
 *
 * Layout (ops_rnn.def): x [B,I], h_prev and c_prev [B,H], w [I+H,4H], b [4H], gates in the
 * order i, f, g, o. Forward: the [B,4H] pre-activations of all four gates come straight
 * into the act output from x @ w[0:I] and h_prev @ w[I:] accumulated onto it (beta = 1),
 * then one elementwise pass adds b and forget_bias, applies the nonlinearities in place
 * (act is what the backward pass reads) and writes c and h. Backward: one elementwise pass
 * makes the gate gradients d_gates [B,4H] and dc_prev, one GEMM gives [dx, dh_prev] =
 * d_gates @ w^T in a packed [B, I+H] buffer (copied out), one GEMM dw = [x, h_prev]^T @
 * d_gates from a packed copy of [x, h_prev], and db is d_gates' column sums.
 *
 * Packing or not was measured (dnnl_sgemm on one thread, fastest of 60, docs/benchmarks.md):
 * at B=64, I=H=512 the two forward products with beta = 1 beat a packed [x, h] and one
 * product by 16-44% (the K=1024 product is itself slower, not only the copy); backward, the
 * packed forms win (dx and dh_prev by 4-10% with the copy out, dw by 12-19%). At B=20 the
 * forward split still wins by 4-13%; the backward forms are about even there.
 *
 * f32 GEMMs take MatMul's path (cpu_gemm_f32: oneDNN, large ones split over the pool); f64
 * ones OpenBLAS's dgemm. The elementwise passes run over (row, block of hidden units) on the
 * pool when large; f32 uses the vectorisable sigmoid / tanh of cpu_util.h that the Sigmoid
 * and Tanh kernels use, f64 libm's. Thread safety: a kernel's only state is LSTMCell's
 * forget_bias, read-only after create, so one node may run in concurrent steps; the shards
 * of one call write disjoint rows or column blocks.
 */
/* Vectorise the elementwise passes whatever CFLAGS say (see elementwise.c). */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")

#include <cblas.h>
#include <dnnl.h>
#include <dnnl_debug.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

/* Hidden units per unit of parallel work in the elementwise passes. */
#define CELL_BLOCK 256
/* Rough cost of one hidden unit (four gates) in the passes, in parallel_for's units. */
#define COST_F32 12
#define COST_F64 90

/* The sizes and operands of one call. Pointers are the tensors' data (dtype T). */
typedef struct Cell {
  bool f64;
  int64_t batch, in, hid; /* B, I, H */
  double forget_bias;
  const void *x, *h_prev, *c_prev, *w, *b;
  const void *c, *dh, *dc; /* backward inputs (c, act are forward outputs) */
  void *act;               /* forward: output; backward: input (read only) */
  void *h_out, *c_out;     /* forward outputs */
  void *d_gates, *dc_prev; /* backward: temp and output */
  int64_t blocks;          /* hidden-unit blocks per row */
  bool recurrent;          /* LSTMCellRecurrent's: no x, w is w_h [H, 4H] */
} Cell;

static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  return cpu_shape_str(buf, len, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

/* ---------------------------------------------------------------------------------- */
/* Shapes: batch and input from x, hidden from h_prev; every operand must then match. */

enum { SHAPE_BH, SHAPE_B4H, SHAPE_W, SHAPE_4H, SHAPE_WT };

typedef struct Operand {
  int input;
  const char *name;
  int shape; /* SHAPE_* */
} Operand;

static const Operand cell_operands[] = {
    {1, "h_prev", SHAPE_BH}, {2, "c_prev", SHAPE_BH}, {3, "w", SHAPE_W}, {4, "b", SHAPE_4H}};
static const Operand grad_operands[] = {
    {1, "h_prev", SHAPE_BH}, {2, "c_prev", SHAPE_BH}, {3, "w", SHAPE_W}, {4, "c", SHAPE_BH},
    {5, "act", SHAPE_B4H},   {6, "dh", SHAPE_BH},     {7, "dc", SHAPE_BH}};

/* Operand op must have its shape for the sizes of cl; h_input: the input giving batch and
 * hidden (x, when there is one, gives input too). */
static floe_code expect(FloeKernelContext *ctx, const Operand *op, const Cell *cl,
                        int h_input) {
  static const char *const layouts[] = {"[batch, hidden]", "[batch, 4 * hidden]",
                                        "[input + hidden, 4 * hidden]", "[4 * hidden]",
                                        "[4 * hidden, hidden] (w_transposed)"};
  int64_t want[2] = {cl->batch, cl->hid};
  int rank = 2;
  switch (op->shape) {
    case SHAPE_B4H: want[1] = 4 * cl->hid; break;
    case SHAPE_W: want[0] = cl->in + cl->hid, want[1] = 4 * cl->hid; break;
    case SHAPE_4H: want[0] = 4 * cl->hid, rank = 1; break;
    case SHAPE_WT: want[0] = 4 * cl->hid, want[1] = cl->hid; break;
    default: break;
  }
  const FloeTensor *t = cpu_host->ctx_input(ctx, op->input);
  const int64_t *d = cpu_host->tensor_dims(t);
  if (cpu_host->tensor_rank(t) == rank && d[0] == want[0] && (rank == 1 || d[1] == want[1]))
    return FLOE_OK;
  char got[CPU_SHAPE_STR_MAX], ws[CPU_SHAPE_STR_MAX], sx[CPU_SHAPE_STR_MAX],
      sh[CPU_SHAPE_STR_MAX];
  if (cl->recurrent)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "%s must be %s = %s, got %s (batch and hidden from h_prev %s)",
        op->name, op->shape == SHAPE_W ? "[hidden, 4 * hidden]" : layouts[op->shape],
        cpu_shape_str(ws, sizeof ws, rank, want), shape_str(t, got, sizeof got),
        shape_str(cpu_host->ctx_input(ctx, h_input), sh, sizeof sh));
  return cpu_host->ctx_set_error(
      ctx, FLOE_INVALID_ARGUMENT,
      "%s must be %s = %s, got %s (batch and input from x %s, hidden from h_prev %s)",
      op->name, layouts[op->shape], cpu_shape_str(ws, sizeof ws, rank, want),
      shape_str(t, got, sizeof got), shape_str(cpu_host->ctx_input(ctx, 0), sx, sizeof sx),
      shape_str(cpu_host->ctx_input(ctx, h_input), sh, sizeof sh));
}

/* Resolves B, I, H from x and h_prev and checks the other operands (the cell's when `grad`
 * is false, else its gradient's). */
static floe_code cell_shapes(FloeKernelContext *ctx, bool grad, Cell *cl) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *h = cpu_host->ctx_input(ctx, 1);
  char sx[CPU_SHAPE_STR_MAX], sh[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_rank(x) != 2 || cpu_host->tensor_rank(h) != 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x must be [batch, input] and h_prev [batch, hidden], got x "
                                   "%s and h_prev %s",
                                   shape_str(x, sx, sizeof sx), shape_str(h, sh, sizeof sh));
  cl->batch = cpu_host->tensor_dims(x)[0];
  cl->in = cpu_host->tensor_dims(x)[1];
  cl->hid = cpu_host->tensor_dims(h)[1];
  cl->blocks = (cl->hid + CELL_BLOCK - 1) / CELL_BLOCK;
  cl->f64 = cpu_host->tensor_dtype(x) == FLOE_F64;
  /* GEMM sizes must fit a BLAS int: B, I + H and 4H. */
  if (cl->batch > INT_MAX || cl->hid > INT_MAX / 4 || cl->in > INT_MAX - cl->hid)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x %s and h_prev %s: batch, input + hidden and 4 * hidden "
                                   "must be at most %d (BLAS limit)",
                                   shape_str(x, sx, sizeof sx), shape_str(h, sh, sizeof sh),
                                   INT_MAX);
  const Operand *ops = grad ? grad_operands : cell_operands;
  int n = grad ? (int)(sizeof grad_operands / sizeof grad_operands[0])
               : (int)(sizeof cell_operands / sizeof cell_operands[0]);
  for (int k = 0; k < n; k++) {
    floe_code rc = expect(ctx, &ops[k], cl, 1);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

/* LSTMCellRecurrent (inputs gates_x, h_prev, c_prev, w_h) and its backprop (h_prev, c_prev,
 * w_h, c, act, dh, dc): batch and hidden from h_prev, no input (w_h is [H, 4H]). */
static const Operand rec_cell_operands[] = {
    {0, "gates_x", SHAPE_B4H}, {2, "c_prev", SHAPE_BH}, {3, "w_h", SHAPE_W}};
static const Operand rec_grad_operands[] = {
    {1, "c_prev", SHAPE_BH}, {2, "w_h", SHAPE_W}, {3, "c", SHAPE_BH},
    {4, "act", SHAPE_B4H},   {5, "dh", SHAPE_BH}, {6, "dc", SHAPE_BH}};

static floe_code recurrent_shapes(FloeKernelContext *ctx, bool grad, bool w_transposed,
                                  Cell *cl) {
  int hi = grad ? 0 : 1;
  const FloeTensor *h = cpu_host->ctx_input(ctx, hi);
  char sh[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_rank(h) != 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "h_prev must be [batch, hidden], got %s",
                                   shape_str(h, sh, sizeof sh));
  cl->batch = cpu_host->tensor_dims(h)[0];
  cl->in = 0;
  cl->recurrent = true;
  cl->hid = cpu_host->tensor_dims(h)[1];
  cl->blocks = (cl->hid + CELL_BLOCK - 1) / CELL_BLOCK;
  cl->f64 = cpu_host->tensor_dtype(h) == FLOE_F64;
  if (cl->batch > INT_MAX || cl->hid > INT_MAX / 4)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "h_prev %s: batch and 4 * hidden must be at most %d (BLAS "
                                   "limit)",
                                   shape_str(h, sh, sizeof sh), INT_MAX);
  const Operand *ops = grad ? rec_grad_operands : rec_cell_operands;
  int n = grad ? (int)(sizeof rec_grad_operands / sizeof rec_grad_operands[0])
               : (int)(sizeof rec_cell_operands / sizeof rec_cell_operands[0]);
  for (int k = 0; k < n; k++) {
    Operand o = ops[k];
    if (o.shape == SHAPE_W && w_transposed) o.shape = SHAPE_WT;
    floe_code rc = expect(ctx, &o, cl, hi);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* GEMMs. C = op(A) op(B) + beta C, row-major with leading dimensions. */

static floe_code gemm(FloeKernelContext *ctx, const Cell *cl, bool ta, bool tb, int64_t m,
                      int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
                      int64_t ldb, double beta, void *c, int64_t ldc) {
  if (!cl->f64) {
    int st = cpu_gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc);
    if (st == dnnl_success) return FLOE_OK;
    return cpu_host->ctx_set_error(ctx, st == dnnl_out_of_memory ? FLOE_NO_MEMORY : FLOE_INTERNAL,
                                   "oneDNN sgemm of %lldx%lld by %lldx%lld failed: %s",
                                   (long long)m, (long long)k, (long long)k, (long long)n,
                                   dnnl_status2str((dnnl_status_t)st));
  }
  if (m == 0 || n == 0) return FLOE_OK;
  double *cd = c;
  if (k == 0) { /* BLAS rejects a zero leading dimension */
    for (int64_t i = 0; i < m && beta != 1.0; i++)
      for (int64_t j = 0; j < n; j++) cd[i * ldc + j] = beta == 0.0 ? 0.0 : beta * cd[i * ldc + j];
    return FLOE_OK;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, 1.0, a, (blasint)lda, b, (blasint)ldb, beta, cd,
              (blasint)ldc);
  return FLOE_OK;
}

/* Rows of x [B,I] and h [B,H] side by side into xh [B,I+H]. (An empty x may have no data
 * pointer at all: no memcpy from or to it.) */
static void pack_rows(const Cell *cl, const void *x, const void *h, void *xh) {
  size_t es = cl->f64 ? sizeof(double) : sizeof(float);
  int64_t ni = cl->in, nh = cl->hid;
  for (int64_t r = 0; r < cl->batch; r++) {
    char *row = (char *)xh + (size_t)(r * (ni + nh)) * es;
    if (ni) memcpy(row, (const char *)x + (size_t)(r * ni) * es, (size_t)ni * es);
    memcpy(row + (size_t)ni * es, (const char *)h + (size_t)(r * nh) * es, (size_t)nh * es);
  }
}

/* The inverse: xh [B,I+H] into x [B,I] and h [B,H]. */
static void unpack_rows(const Cell *cl, const void *xh, void *x, void *h) {
  size_t es = cl->f64 ? sizeof(double) : sizeof(float);
  int64_t ni = cl->in, nh = cl->hid;
  for (int64_t r = 0; r < cl->batch; r++) {
    const char *row = (const char *)xh + (size_t)(r * (ni + nh)) * es;
    if (ni) memcpy((char *)x + (size_t)(r * ni) * es, row, (size_t)ni * es);
    memcpy((char *)h + (size_t)(r * nh) * es, row + (size_t)ni * es, (size_t)nh * es);
  }
}

static const void *offset(const Cell *cl, const void *p, int64_t elements) {
  return (const char *)p + (size_t)elements * (cl->f64 ? sizeof(double) : sizeof(float));
}

/* ---------------------------------------------------------------------------------- */
/* Elementwise passes over units (row, block of hidden units) [begin, end). Each unit reads
 * and writes only its own row's columns j, H+j, 2H+j, 3H+j of the [B,4H] buffers. The row
 * functions take one pointer per gate so each loop is plain unit-stride code that gcc
 * vectorises (the f32 ones; f64 calls libm's tanh). */

/* n hidden units of one row: a[k] holds gate k's pre-activations (without the bias b[k])
 * and receives its activation; c = f c_prev + i g, h = o tanh(c). */
#define FORWARD_ROW(NAME, T, SIG, TANH)                                                        \
  static void NAME(int64_t n, T *restrict a0, T *restrict a1, T *restrict a2, T *restrict a3, \
                   const T *restrict b0, const T *restrict b1, const T *restrict b2,           \
                   const T *restrict b3, T fb, const T *restrict cp, T *restrict co,          \
                   T *restrict ho) {                                                          \
    for (int64_t j = 0; j < n; j++) {                                                         \
      T i = SIG(a0[j] + b0[j]), f = SIG(a1[j] + b1[j] + fb);                                  \
      T g = TANH(a2[j] + b2[j]), o = SIG(a3[j] + b3[j]);                                      \
      T c = f * cp[j] + i * g;                                                                \
      co[j] = c;                                                                              \
      ho[j] = o * TANH(c);                                                                    \
      a0[j] = i;                                                                              \
      a1[j] = f;                                                                              \
      a2[j] = g;                                                                              \
      a3[j] = o;                                                                              \
    }                                                                                         \
  }

/* dc_total = dc + dh o (1 - tanh(c)^2); the gates' pre-activation gradients d0..d3 follow
 * from c = f c_prev + i g and h = o tanh(c) through each nonlinearity's derivative. */
#define BACKWARD_ROW(NAME, T, TANH)                                                            \
  static void NAME(int64_t n, const T *restrict a0, const T *restrict a1,                     \
                   const T *restrict a2, const T *restrict a3, const T *restrict cp,          \
                   const T *restrict cn, const T *restrict dh, const T *restrict dc,          \
                   T *restrict d0, T *restrict d1, T *restrict d2, T *restrict d3,            \
                   T *restrict dcp) {                                                         \
    for (int64_t j = 0; j < n; j++) {                                                         \
      T i = a0[j], f = a1[j], g = a2[j], o = a3[j];                                           \
      T tc = TANH(cn[j]);                                                                     \
      T dct = dc[j] + dh[j] * o * (1 - tc * tc);                                              \
      d0[j] = dct * g * i * (1 - i);                                                          \
      d1[j] = dct * cp[j] * f * (1 - f);                                                      \
      d2[j] = dct * i * (1 - g * g);                                                          \
      d3[j] = dh[j] * tc * o * (1 - o);                                                       \
      dcp[j] = dct * f;                                                                       \
    }                                                                                         \
  }

CPU_HOT FORWARD_ROW(forward_row_f32, float, cpu_sigmoid_f32, cpu_tanh_f32)
FORWARD_ROW(forward_row_f64, double, cpu_sigmoid_f64, tanh)
CPU_HOT BACKWARD_ROW(backward_row_f32, float, cpu_tanh_f32)
BACKWARD_ROW(backward_row_f64, double, tanh)

/* Unit u: row u / blocks, hidden units [j0, j0 + n). */
static void unit_span(const Cell *cl, int64_t u, int64_t *r, int64_t *j0, int64_t *n) {
  *r = u / cl->blocks;
  *j0 = (u % cl->blocks) * CELL_BLOCK;
  *n = cl->hid - *j0 < CELL_BLOCK ? cl->hid - *j0 : CELL_BLOCK;
}

#define FORWARD_UNITS(T, ROW)                                                                 \
  do {                                                                                        \
    const Cell *cl = arg;                                                                     \
    int64_t H = cl->hid, r, j, n;                                                             \
    const T *b = cl->b;                                                                       \
    for (int64_t u = begin; u < end; u++) {                                                   \
      unit_span(cl, u, &r, &j, &n);                                                           \
      T *a = (T *)cl->act + r * 4 * H + j;                                                    \
      ROW(n, a, a + H, a + 2 * H, a + 3 * H, b + j, b + H + j, b + 2 * H + j, b + 3 * H + j, \
          (T)cl->forget_bias, (const T *)cl->c_prev + r * H + j, (T *)cl->c_out + r * H + j,  \
          (T *)cl->h_out + r * H + j);                                                        \
    }                                                                                         \
  } while (0)

#define BACKWARD_UNITS(T, ROW)                                                                \
  do {                                                                                        \
    const Cell *cl = arg;                                                                     \
    int64_t H = cl->hid, r, j, n;                                                             \
    for (int64_t u = begin; u < end; u++) {                                                   \
      unit_span(cl, u, &r, &j, &n);                                                           \
      const T *a = (const T *)cl->act + r * 4 * H + j;                                        \
      T *d = (T *)cl->d_gates + r * 4 * H + j;                                                \
      int64_t o = r * H + j;                                                                  \
      ROW(n, a, a + H, a + 2 * H, a + 3 * H, (const T *)cl->c_prev + o, (const T *)cl->c + o, \
          (const T *)cl->dh + o, (const T *)cl->dc + o, d, d + H, d + 2 * H, d + 3 * H,       \
          (T *)cl->dc_prev + o);                                                              \
    }                                                                                         \
  } while (0)

static void forward_f32(void *arg, int64_t begin, int64_t end) {
  FORWARD_UNITS(float, forward_row_f32);
}
static void forward_f64(void *arg, int64_t begin, int64_t end) {
  FORWARD_UNITS(double, forward_row_f64);
}
static void backward_f32(void *arg, int64_t begin, int64_t end) {
  BACKWARD_UNITS(float, backward_row_f32);
}
static void backward_f64(void *arg, int64_t begin, int64_t end) {
  BACKWARD_UNITS(double, backward_row_f64);
}

static void run_pass(const Cell *cl, FloeParallelFn f32, FloeParallelFn f64) {
  int64_t units = cl->batch * cl->blocks;
  int64_t width = cl->hid < CELL_BLOCK ? cl->hid : CELL_BLOCK;
  int64_t per_unit = width * (cl->f64 ? COST_F64 : COST_F32);
  cpu_parallel_for(units, per_unit, cl->f64 ? f64 : f32, (void *)cl);
}

/* ---------------------------------------------------------------------------------- */
/* LSTMCell */

static floe_code cell_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                             void **state) {
  double fb = 0.0;
  floe_code rc = host->attr_float(host->init_attrs(init), "forget_bias", &fb);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute forget_bias must be a float");
  double *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *s = fb;
  *state = s;
  return FLOE_OK;
}

static void state_free(void *state) { cpu_host->free(state); }

static floe_code alloc_out(FloeKernelContext *ctx, int i, int64_t d0, int64_t d1, int rank,
                           void **data) {
  int64_t dims[2] = {d0, d1};
  FloeTensor *t;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, i, rank, dims, &t);
  if (rc == FLOE_OK) *data = cpu_host->tensor_data(t);
  return rc;
}

static const void *in_data(FloeKernelContext *ctx, int i) {
  return cpu_host->tensor_data(cpu_host->ctx_input(ctx, i));
}

/* The backward ops' inputs c, act, dh, dc, from input `first` on. */
static void grad_inputs(FloeKernelContext *ctx, int first, Cell *cl) {
  cl->c = in_data(ctx, first);
  cl->act = (void *)in_data(ctx, first + 1);
  cl->dh = in_data(ctx, first + 2);
  cl->dc = in_data(ctx, first + 3);
}

static floe_code cell_compute(void *state, FloeKernelContext *ctx) {
  Cell cl;
  memset(&cl, 0, sizeof cl);
  floe_code rc = cell_shapes(ctx, false, &cl);
  if (rc != FLOE_OK) return rc;
  int64_t bt = cl.batch, in = cl.in, hid = cl.hid;
  if ((rc = alloc_out(ctx, 0, bt, hid, 2, &cl.h_out)) != FLOE_OK ||
      (rc = alloc_out(ctx, 1, bt, hid, 2, &cl.c_out)) != FLOE_OK ||
      (rc = alloc_out(ctx, 2, bt, 4 * hid, 2, &cl.act)) != FLOE_OK)
    return rc;
  if (bt == 0 || hid == 0) return FLOE_OK;
  cl.forget_bias = *(const double *)state;
  cl.x = in_data(ctx, 0);
  cl.h_prev = in_data(ctx, 1);
  cl.c_prev = in_data(ctx, 2);
  cl.w = in_data(ctx, 3);
  cl.b = in_data(ctx, 4);
  /* act = x @ w[0:I] + h_prev @ w[I:I+H]; the pass adds the bias. */
  int64_t g4 = 4 * hid;
  const void *w_h = offset(&cl, cl.w, in * g4);
  if ((rc = gemm(ctx, &cl, false, false, bt, g4, in, cl.x, in, cl.w, g4, 0.0, cl.act, g4)) !=
          FLOE_OK ||
      (rc = gemm(ctx, &cl, false, false, bt, g4, hid, cl.h_prev, hid, w_h, g4, 1.0, cl.act, g4)) !=
          FLOE_OK)
    return rc;
  run_pass(&cl, forward_f32, forward_f64);
  return FLOE_OK;
}

/* LSTMCellRecurrent: act = gates_x (the input's projection and the bias, made for every
 * step at once before the loop) + h_prev @ w_h; then the same pass with a zero bias. */
static floe_code recurrent_compute(void *state, FloeKernelContext *ctx) {
  Cell cl;
  memset(&cl, 0, sizeof cl);
  floe_code rc = recurrent_shapes(ctx, false, false, &cl);
  if (rc != FLOE_OK) return rc;
  int64_t bt = cl.batch, hid = cl.hid, g4 = 4 * hid;
  if ((rc = alloc_out(ctx, 0, bt, hid, 2, &cl.h_out)) != FLOE_OK ||
      (rc = alloc_out(ctx, 1, bt, hid, 2, &cl.c_out)) != FLOE_OK ||
      (rc = alloc_out(ctx, 2, bt, g4, 2, &cl.act)) != FLOE_OK)
    return rc;
  if (bt == 0 || hid == 0) return FLOE_OK;
  size_t es = cl.f64 ? sizeof(double) : sizeof(float);
  void *zeros = NULL;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)g4 * es, &zeros)) != FLOE_OK) return rc;
  memset(zeros, 0, (size_t)g4 * es);
  cl.forget_bias = *(const double *)state;
  cl.h_prev = in_data(ctx, 1);
  cl.c_prev = in_data(ctx, 2);
  cl.w = in_data(ctx, 3);
  cl.b = zeros;
  memcpy(cl.act, in_data(ctx, 0), (size_t)(bt * g4) * es);
  if ((rc = gemm(ctx, &cl, false, false, bt, g4, hid, cl.h_prev, hid, cl.w, g4, 1.0, cl.act,
                 g4)) != FLOE_OK)
    return rc;
  run_pass(&cl, forward_f32, forward_f64);
  return FLOE_OK;
}

/* LSTMCellRecurrentBackprop: d_gates (which is also gates_x's gradient), dh_prev =
 * d_gates @ w_h^T and dc_prev. */
static floe_code recurrent_backprop_create(const FloeHostApi *host, FloeKernelInit *init,
                                           void *user_data, void **state) {
  (void)user_data;
  int t = 0;
  if (host->attr_bool(host->init_attrs(init), "w_transposed", &t) != FLOE_OK) t = 0;
  int *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  *s = t;
  *state = s;
  return FLOE_OK;
}

static floe_code recurrent_backprop_compute(void *state, FloeKernelContext *ctx) {
  bool transposed = *(const int *)state != 0;
  Cell cl;
  memset(&cl, 0, sizeof cl);
  floe_code rc = recurrent_shapes(ctx, true, transposed, &cl);
  if (rc != FLOE_OK) return rc;
  int64_t bt = cl.batch, hid = cl.hid, g4 = 4 * hid;
  void *dh_prev;
  if ((rc = alloc_out(ctx, 0, bt, g4, 2, &cl.d_gates)) != FLOE_OK ||
      (rc = alloc_out(ctx, 1, bt, hid, 2, &dh_prev)) != FLOE_OK ||
      (rc = alloc_out(ctx, 2, bt, hid, 2, &cl.dc_prev)) != FLOE_OK)
    return rc;
  if (bt == 0 || hid == 0) return FLOE_OK;
  cl.h_prev = in_data(ctx, 0);
  cl.c_prev = in_data(ctx, 1);
  cl.w = in_data(ctx, 2);
  grad_inputs(ctx, 3, &cl);
  run_pass(&cl, backward_f32, backward_f64);
  return gemm(ctx, &cl, false, !transposed, bt, hid, g4, cl.d_gates, g4, cl.w,
              transposed ? hid : g4, 0.0, dh_prev, hid);
}

/* ---------------------------------------------------------------------------------- */
/* LSTMCellGrad */

/* db[4H] = column sums of d_gates [B,4H]. */
#define COLUMN_SUMS(T)                                                                        \
  do {                                                                                        \
    const T *restrict dg = cl->d_gates;                                                       \
    T *restrict db = out;                                                                     \
    for (int64_t j = 0; j < n; j++) db[j] = 0;                                                \
    for (int64_t r = 0; r < cl->batch; r++)                                                   \
      for (int64_t j = 0; j < n; j++) db[j] += dg[r * n + j];                                 \
  } while (0)

CPU_HOT static void column_sums(const Cell *cl, void *out) {
  int64_t n = 4 * cl->hid;
  if (cl->f64)
    COLUMN_SUMS(double);
  else
    COLUMN_SUMS(float);
}

/* LSTMCellGrad (weights: dw and db too) and LSTMCellBackprop (d_gates instead). */
static floe_code backward(FloeKernelContext *ctx, bool weights) {
  Cell cl;
  memset(&cl, 0, sizeof cl);
  floe_code rc = cell_shapes(ctx, true, &cl);
  if (rc != FLOE_OK) return rc;
  int64_t bt = cl.batch, in = cl.in, hid = cl.hid, g4 = 4 * hid, ih = in + hid;
  void *dx, *dh_prev, *dw = NULL, *db = NULL;
  if ((rc = alloc_out(ctx, 0, bt, in, 2, &dx)) != FLOE_OK ||
      (rc = alloc_out(ctx, 1, bt, hid, 2, &dh_prev)) != FLOE_OK ||
      (rc = alloc_out(ctx, 2, bt, hid, 2, &cl.dc_prev)) != FLOE_OK)
    return rc;
  if (weights) {
    if ((rc = alloc_out(ctx, 3, ih, g4, 2, &dw)) != FLOE_OK ||
        (rc = alloc_out(ctx, 4, g4, 0, 1, &db)) != FLOE_OK)
      return rc;
  } else if ((rc = alloc_out(ctx, 3, bt, g4, 2, &cl.d_gates)) != FLOE_OK) {
    return rc;
  }
  size_t es = cl.f64 ? sizeof(double) : sizeof(float);
  if (hid == 0) { /* dx = d_gates @ w[0:I]^T with no gates: zeros */
    if (bt > 0 && in > 0) memset(dx, 0, (size_t)(bt * in) * es);
    return FLOE_OK;
  }
  cl.x = in_data(ctx, 0);
  cl.h_prev = in_data(ctx, 1);
  cl.c_prev = in_data(ctx, 2);
  cl.w = in_data(ctx, 3);
  grad_inputs(ctx, 4, &cl);
  if (bt > 0) {
    if (weights &&
        (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(bt * g4) * es, &cl.d_gates)) != FLOE_OK)
      return rc;
    run_pass(&cl, backward_f32, backward_f64);
  }
  /* [dx, dh_prev] = d_gates @ w^T through a packed [B, I+H] buffer, then the same buffer
   * holds [x, h_prev] for dw = [x, h_prev]^T @ d_gates: one GEMM each (zeros when B = 0). */
  void *xh = NULL;
  if (bt > 0 && (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(bt * ih) * es, &xh)) != FLOE_OK)
    return rc;
  if ((rc = gemm(ctx, &cl, false, true, bt, ih, g4, cl.d_gates, g4, cl.w, g4, 0.0, xh, ih)) !=
      FLOE_OK)
    return rc;
  unpack_rows(&cl, xh, dx, dh_prev);
  if (!weights) return FLOE_OK;
  pack_rows(&cl, cl.x, cl.h_prev, xh);
  if ((rc = gemm(ctx, &cl, true, false, ih, g4, bt, xh, ih, cl.d_gates, g4, 0.0, dw, g4)) !=
      FLOE_OK)
    return rc;
  column_sums(&cl, db);
  return FLOE_OK;
}

static floe_code grad_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  return backward(ctx, true);
}

static floe_code backprop_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  return backward(ctx, false);
}

floe_code cpu_register_lstm(FloePluginRegistrar *reg) {
  uint32_t dts = FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64);
  floe_code rc =
      cpu_add_kernel(reg, "LSTMCell", "T", dts, 0, cell_compute, cell_create, state_free, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "LSTMCellGrad", "T", dts, 0, grad_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "LSTMCellBackprop", "T", dts, 0, backprop_compute, NULL, NULL,
                        NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "LSTMCellRecurrent", "T", dts, 0, recurrent_compute, cell_create,
                        state_free, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "LSTMCellRecurrentBackprop", "T", dts, 0,
                        recurrent_backprop_compute, recurrent_backprop_create, state_free, NULL);
  return rc;
}
