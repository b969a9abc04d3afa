/* SPDX-License-Identifier: Apache-2.0 */
/* rnn_onnx.c - ONNX's whole-sequence recurrent layers RNN, GRU and LSTM for the CPU plugin
 * (semantics and layouts in core/graph/ops_resize.def).
 *
 * One driver runs the three: per direction, one GEMM makes the input projections of every
 * step and batch row ([S*B, I] x [I, G*H], biases added once), then a plain loop over time
 * steps multiplies the state by the recurrent weights (one GEMM per step over the whole
 * batch; GRU without linear_before_reset needs a second one for (r * H) R_h^T) and applies
 * the gates row by row. Rows shorter than the sequence (sequence_lens) keep their state
 * past their last step and their y stays zero; a reverse pass starts at each row's own last
 * step. Everything is computed in f64 (OpenBLAS's dgemm) whatever the tensors' dtype, so
 * f32, f64, f16 and bf16 share one path and the result is the exact one rounded once.
 * Kernel state is the parsed attributes, read-only after create.
 */
#include <cblas.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

#define SHAPE(t)                                                                 \
  cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX,                 \
                cpu_host->tensor_rank(t), cpu_host->tensor_dims(t))

enum { K_RNN, K_GRU, K_LSTM };
static const int gates_of[] = {1, 3, 4};   /* G: blocks of H rows in w and r */
static const int funcs_of[] = {1, 2, 3};   /* activations per direction */

/* ------------------------------------------------------------------------------------ */
/* Activation functions. */

enum { A_RELU, A_TANH, A_SIGMOID, A_AFFINE, A_LEAKY_RELU, A_THRESHOLDED_RELU, A_SCALED_TANH,
       A_HARD_SIGMOID, A_ELU, A_SOFTSIGN, A_SOFTPLUS, A_COUNT };
static const char *const act_names[A_COUNT] = {
    "relu",       "tanh",        "sigmoid",     "affine", "leakyrelu", "thresholdedrelu",
    "scaledtanh", "hardsigmoid", "elu",         "softsign", "softplus"};

typedef struct Act {
  int fn;
  double alpha, beta;
} Act;

static double act_apply(const Act *a, double x) {
  switch (a->fn) {
    case A_RELU: return x > 0 ? x : 0;
    case A_TANH: return tanh(x);
    case A_SIGMOID: return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    case A_AFFINE: return a->alpha * x + a->beta;
    case A_LEAKY_RELU: return x >= 0 ? x : a->alpha * x;
    case A_THRESHOLDED_RELU: return x > a->alpha ? x : 0;
    case A_SCALED_TANH: return a->alpha * tanh(a->beta * x);
    case A_HARD_SIGMOID: return fmax(0, fmin(1, a->alpha * x + a->beta));
    case A_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1);
    case A_SOFTSIGN: return x / (1 + fabs(x));
    default: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); /* softplus */
  }
}

/* ------------------------------------------------------------------------------------ */
/* Attributes. */

#define MAX_FUNCS 6 /* 3 per direction, 2 directions */

typedef struct RnnState {
  int kind, dirs;
  bool reverse_only;
  int64_t hidden;
  double clip; /* <= 0: none */
  bool linear_before_reset, input_forget;
  Act act[2][3]; /* [direction][f, g, h] */
} RnnState;

/* Splits "Sigmoid, Tanh" into lower-case names; returns the count or -1 when too many. */
static int split_names(const char *s, char names[MAX_FUNCS][24]) {
  int n = 0;
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    if (n == MAX_FUNCS) return -1;
    size_t k = 0;
    while (*s && *s != ',' && *s != ' ') {
      if (k < 23) names[n][k++] = (char)tolower((unsigned char)*s);
      s++;
    }
    names[n++][k] = '\0';
  }
  return n;
}

/* Default alpha and beta of each function (ONNX's operators of the same names). */
static void act_defaults(int fn, double *alpha, double *beta) {
  *alpha = 0, *beta = 0;
  switch (fn) {
    case A_AFFINE: *alpha = 1; break;
    case A_LEAKY_RELU: *alpha = 0.01; break;
    case A_THRESHOLDED_RELU: *alpha = 1; break;
    case A_SCALED_TANH: *alpha = 1, *beta = 1; break;
    case A_HARD_SIGMOID: *alpha = 0.2, *beta = 0.5; break;
    case A_ELU: *alpha = 1; break;
    default: break;
  }
}

static floe_code parse_activations(const FloeHostApi *host, FloeKernelInit *init, RnnState *s) {
  const FloeAttrs *a = host->init_attrs(init);
  static const int defaults[3][3] = {{A_TANH}, {A_SIGMOID, A_TANH}, {A_SIGMOID, A_TANH, A_TANH}};
  int per = funcs_of[s->kind];
  const char *list = "";
  char names[MAX_FUNCS][24];
  if (host->attr_string(a, "activations", &list) != FLOE_OK) list = "";
  int n = split_names(list, names);
  if (n != 0 && n != per && n != per * s->dirs)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "activations '%s' names %d functions; needs %d (per direction) "
                                "or %d",
                                list, n, per, per * s->dirs);
  const double *al = NULL, *be = NULL;
  size_t nal = 0, nbe = 0;
  if (host->attr_float_list(a, "activation_alpha", &al, &nal) != FLOE_OK) nal = 0;
  if (host->attr_float_list(a, "activation_beta", &be, &nbe) != FLOE_OK) nbe = 0;
  if ((nal && (int)nal != n) || (nbe && (int)nbe != n))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "activation_alpha (%zu values) and activation_beta (%zu) must "
                                "hold one value per activation (%d) or none",
                                nal, nbe, n);
  for (int d = 0; d < s->dirs; d++)
    for (int k = 0; k < per; k++) {
      Act *f = &s->act[d][k];
      int i = n == per * s->dirs ? d * per + k : k;
      if (n == 0) {
        f->fn = defaults[s->kind][k];
        act_defaults(f->fn, &f->alpha, &f->beta);
        continue;
      }
      f->fn = -1;
      for (int j = 0; j < A_COUNT; j++)
        if (!strcmp(names[i], act_names[j])) f->fn = j;
      if (f->fn < 0)
        return host->init_set_error(init, FLOE_UNIMPLEMENTED, "unknown activation '%s' in '%s'",
                                    names[i], list);
      act_defaults(f->fn, &f->alpha, &f->beta);
      if (nal) f->alpha = al[i];
      if (nbe) f->beta = be[i];
    }
  return FLOE_OK;
}

static floe_code rnn_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                            void **state) {
  RnnState s = {.kind = (int)(intptr_t)user_data, .dirs = 1};
  const FloeAttrs *a = host->init_attrs(init);
  const char *dir = "forward";
  int b;
  if (host->attr_string(a, "direction", &dir) != FLOE_OK) dir = "forward";
  if (!strcmp(dir, "bidirectional")) s.dirs = 2;
  else if (!strcmp(dir, "reverse")) s.reverse_only = true;
  else if (strcmp(dir, "forward"))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "direction '%s' (forward, reverse or bidirectional)", dir);
  if (host->attr_int(a, "hidden_size", &s.hidden) != FLOE_OK) s.hidden = 0;
  if (s.hidden < 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "hidden_size %lld",
                                (long long)s.hidden);
  if (host->attr_float(a, "clip", &s.clip) != FLOE_OK) s.clip = 0;
  s.linear_before_reset = host->attr_bool(a, "linear_before_reset", &b) == FLOE_OK && b;
  s.input_forget = host->attr_bool(a, "input_forget", &b) == FLOE_OK && b;
  floe_code rc = parse_activations(host, init, &s);
  if (rc != FLOE_OK) return rc;
  RnnState *p = host->alloc(sizeof *p);
  if (!p) return host->init_set_error(init, FLOE_NO_MEMORY, "cannot allocate kernel state");
  *p = s;
  *state = p;
  return FLOE_OK;
}

static void rnn_destroy(void *state) { cpu_host->free(state); }

/* ------------------------------------------------------------------------------------ */
/* Operands. */

typedef struct Seq {
  int64_t S, B, In, H, G, D; /* steps, batch, input, hidden, gates, directions */
  const double *x, *w, *r, *b, *h0, *c0, *p; /* f64 copies; b, h0, c0, p NULL when empty */
  int32_t *len;                              /* [B] */
  double *y, *yh, *yc;                       /* f64 outputs */
} Seq;

/* Input i as f64 in temporary memory (NULL for an empty optional one), after checking its
 * shape against want[0..rank) when it is given. */
static floe_code operand(FloeKernelContext *ctx, int i, const char *name, bool optional,
                         int rank, const int64_t *want, const char *layout, const double **out) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  int64_t n = cpu_host->tensor_num_elements(t);
  *out = NULL;
  if (optional && n == 0 && cpu_host->tensor_rank(t) <= 1) return FLOE_OK;
  bool ok = cpu_host->tensor_rank(t) == rank;
  for (int k = 0; ok && k < rank; k++) ok = cpu_host->tensor_dims(t)[k] == want[k];
  if (!ok)
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "%s must be %s = %s%s, got %s", name, layout,
        cpu_shape_str((char[CPU_SHAPE_STR_MAX]){0}, CPU_SHAPE_STR_MAX, rank, want),
        optional ? " (or empty)" : "", SHAPE(t));
  void *buf;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(n > 0 ? n : 1) * sizeof(double), &buf);
  if (rc != FLOE_OK) return rc;
  cpu_to_f64(cpu_host->tensor_dtype(t), cpu_host->tensor_data(t), buf, n);
  *out = buf;
  return FLOE_OK;
}

static floe_code gather_operands(FloeKernelContext *ctx, const RnnState *st, Seq *q) {
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *r = cpu_host->ctx_input(ctx, 2);
  if (cpu_host->tensor_rank(x) != 3 || cpu_host->tensor_rank(r) != 3)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x must be [seq_length,batch,input] and r "
                                   "[directions,gates*hidden,hidden], got %s and %s",
                                   SHAPE(x), SHAPE(r));
  q->S = cpu_host->tensor_dims(x)[0], q->B = cpu_host->tensor_dims(x)[1];
  q->In = cpu_host->tensor_dims(x)[2];
  q->H = st->hidden > 0 ? st->hidden : cpu_host->tensor_dims(r)[2];
  q->G = gates_of[st->kind], q->D = st->dirs;
  int64_t GH = q->G * q->H;
  if (q->S * q->B > INT_MAX || GH > INT_MAX || q->In > INT_MAX || q->B > INT_MAX)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "x %s or hidden %lld too large for BLAS", SHAPE(x),
                                   (long long)q->H);
  const int64_t xw[3] = {q->S, q->B, q->In}, ww[3] = {q->D, GH, q->In}, rw[3] = {q->D, GH, q->H},
                bw[2] = {q->D, 2 * GH}, hw[3] = {q->D, q->B, q->H}, pw[2] = {q->D, 3 * q->H};
  floe_code rc;
  if ((rc = operand(ctx, 0, "x", false, 3, xw, "[seq_length,batch,input]", &q->x)) != FLOE_OK ||
      (rc = operand(ctx, 1, "w", false, 3, ww, "[directions,gates*hidden,input]", &q->w)) !=
          FLOE_OK ||
      (rc = operand(ctx, 2, "r", false, 3, rw, "[directions,gates*hidden,hidden]", &q->r)) !=
          FLOE_OK ||
      (rc = operand(ctx, 3, "b", true, 2, bw, "[directions,2*gates*hidden]", &q->b)) != FLOE_OK ||
      (rc = operand(ctx, 5, "initial_h", true, 3, hw, "[directions,batch,hidden]", &q->h0)) !=
          FLOE_OK)
    return rc;
  q->c0 = q->p = NULL;
  if (st->kind == K_LSTM &&
      ((rc = operand(ctx, 6, "initial_c", true, 3, hw, "[directions,batch,hidden]", &q->c0)) !=
           FLOE_OK ||
       (rc = operand(ctx, 7, "p", true, 2, pw, "[directions,3*hidden]", &q->p)) != FLOE_OK))
    return rc;
  /* sequence_lens: [B] of i32, each in [0, S]; empty: all S. */
  const FloeTensor *lt = cpu_host->ctx_input(ctx, 4);
  int64_t nl = cpu_host->tensor_num_elements(lt);
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(q->B > 0 ? q->B : 1) * sizeof(int32_t),
                                        (void **)&q->len)) != FLOE_OK)
    return rc;
  if (nl == 0) {
    for (int64_t b = 0; b < q->B; b++) q->len[b] = (int32_t)q->S;
    return FLOE_OK;
  }
  if (cpu_host->tensor_rank(lt) != 1 || nl != q->B)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "sequence_lens must be [batch] = [%lld] (or empty), got %s",
                                   (long long)q->B, SHAPE(lt));
  const int32_t *lv = cpu_host->tensor_data(lt);
  for (int64_t b = 0; b < q->B; b++) {
    if (lv[b] < 0 || lv[b] > q->S)
      return cpu_host->ctx_set_error(ctx, FLOE_OUT_OF_RANGE,
                                     "sequence_lens[%lld] = %d is outside [0, %lld]",
                                     (long long)b, lv[b], (long long)q->S);
    q->len[b] = lv[b];
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* One direction. */

/* C[M,N] = A[M,K] B[N,K]^T + beta C (row-major, leading dimensions lda, ldb, ldc). */
static void gemm_nt(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                    const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0, A, (int)lda,
              B, (int)ldb, beta, C, (int)ldc);
}

static double clipped(const RnnState *st, double v) {
  if (st->clip > 0) v = v < -st->clip ? -st->clip : v > st->clip ? st->clip : v;
  return v;
}

/* Scratch of one direction. */
typedef struct Work {
  double *proj; /* [S*B, GH]: x w^T + biases */
  double *hr;   /* [B, GH]: h r^T of the step */
  double *rh;   /* [B, H]: GRU's r * h, then its product with R_h */
  double *h, *c; /* [B, H] state */
} Work;

/* The gates of row b at time t, given proj and hr; writes h (and c) of the row. rbh: GRU's
 * recurrent bias of h with linear_before_reset (NULL: zero). */
static void step_row(const RnnState *st, const Seq *q, const Work *wk, int d, int64_t b,
                     int64_t t, const double *rbh) {
  int64_t H = q->H, GH = q->G * H;
  const double *g = wk->proj + (t * q->B + b) * GH, *hr = wk->hr + b * GH;
  double *h = wk->h + b * H, *c = wk->c ? wk->c + b * H : NULL;
  const Act *f = st->act[d];
  if (st->kind == K_RNN) {
    for (int64_t j = 0; j < H; j++) h[j] = act_apply(&f[0], clipped(st, g[j] + hr[j]));
    return;
  }
  if (st->kind == K_GRU) {
    const double *rh = wk->rh + b * H; /* (r * h) R_h^T, without linear_before_reset */
    for (int64_t j = 0; j < H; j++) {
      double z = act_apply(&f[0], clipped(st, g[j] + hr[j]));
      double r = act_apply(&f[0], clipped(st, g[H + j] + hr[H + j]));
      double pre = st->linear_before_reset ? g[2 * H + j] + r * (hr[2 * H + j] + (rbh ? rbh[j] : 0))
                                           : g[2 * H + j] + rh[j];
      double cand = act_apply(&f[1], clipped(st, pre));
      h[j] = (1 - z) * cand + z * h[j];
    }
    return;
  }
  const double *p = q->p ? q->p + d * 3 * H : NULL; /* i, o, f */
  for (int64_t j = 0; j < H; j++) {
    double cp = c[j];
    double i = act_apply(&f[0], clipped(st, g[j] + hr[j] + (p ? p[j] * cp : 0)));
    double fg = st->input_forget
                    ? 1 - i
                    : act_apply(&f[0], clipped(st, g[2 * H + j] + hr[2 * H + j] +
                                                       (p ? p[2 * H + j] * cp : 0)));
    double cand = act_apply(&f[1], clipped(st, g[3 * H + j] + hr[3 * H + j]));
    double cn = fg * cp + i * cand;
    double o = act_apply(&f[0], clipped(st, g[H + j] + hr[H + j] + (p ? p[H + j] * cn : 0)));
    c[j] = cn;
    h[j] = o * act_apply(&f[2], cn);
  }
}

/* GRU without linear_before_reset: rh = (r * h) R_h^T for the rows still running at step k,
 * r from the z, r part of hr. */
static void gru_reset_product(const RnnState *st, const Seq *q, const Work *wk, int d,
                              int64_t k, bool rev, const double *R) {
  int64_t H = q->H, GH = 3 * H;
  for (int64_t b = 0; b < q->B; b++) {
    double *rh = wk->rh + b * H;
    if (k >= q->len[b]) {
      memset(rh, 0, (size_t)H * sizeof *rh);
      continue;
    }
    int64_t t = rev ? q->len[b] - 1 - k : k;
    const double *g = wk->proj + (t * q->B + b) * GH, *hr = wk->hr + b * GH;
    for (int64_t j = 0; j < H; j++)
      rh[j] = act_apply(&st->act[d][0], clipped(st, g[H + j] + hr[H + j])) * wk->h[b * H + j];
  }
  /* in place would alias: products go to hr's h block, then back into rh */
  gemm_nt(q->B, H, H, wk->rh, H, R + 2 * H * H, H, 0.0, wk->hr + 2 * H, GH);
  for (int64_t b = 0; b < q->B; b++)
    memcpy(wk->rh + b * H, wk->hr + b * GH + 2 * H, (size_t)H * sizeof(double));
}

static void run_direction(const RnnState *st, const Seq *q, const Work *wk, int d, bool rev) {
  int64_t H = q->H, GH = q->G * H, B = q->B;
  const double *W = q->w + d * GH * q->In, *R = q->r + d * GH * H;
  const double *bias = q->b ? q->b + d * 2 * GH : NULL;
  bool lbr = st->kind == K_GRU && st->linear_before_reset;
  /* proj = x W^T + Wb + Rb (GRU with linear_before_reset: Rb_h stays apart, inside r *). */
  gemm_nt(q->S * B, GH, q->In, q->x, q->In, W, q->In, 0.0, wk->proj, GH);
  if (bias)
    for (int64_t row = 0; row < q->S * B; row++)
      for (int64_t j = 0; j < GH; j++)
        wk->proj[row * GH + j] += bias[j] + (lbr && j >= 2 * H ? 0 : bias[GH + j]);
  const double *rbh = lbr && bias ? bias + GH + 2 * H : NULL;
  for (int64_t b = 0; b < B; b++) {
    if (q->h0) memcpy(wk->h + b * H, q->h0 + (d * B + b) * H, (size_t)H * sizeof(double));
    else memset(wk->h + b * H, 0, (size_t)H * sizeof(double));
    if (wk->c) {
      if (q->c0) memcpy(wk->c + b * H, q->c0 + (d * B + b) * H, (size_t)H * sizeof(double));
      else memset(wk->c + b * H, 0, (size_t)H * sizeof(double));
    }
  }
  bool gru_plain = st->kind == K_GRU && !lbr;
  for (int64_t k = 0; k < q->S; k++) {
    /* GRU without linear_before_reset: only z and r come from h R^T directly */
    gemm_nt(B, gru_plain ? 2 * H : GH, H, wk->h, H, R, H, 0.0, wk->hr, GH);
    if (gru_plain) gru_reset_product(st, q, wk, d, k, rev, R);
    for (int64_t b = 0; b < B; b++) {
      if (k >= q->len[b]) continue;
      int64_t t = rev ? q->len[b] - 1 - k : k;
      step_row(st, q, wk, d, b, t, rbh);
      memcpy(q->y + ((t * q->D + d) * B + b) * H, wk->h + b * H, (size_t)H * sizeof(double));
    }
  }
  memcpy(q->yh + d * B * H, wk->h, (size_t)(B * H) * sizeof(double));
  if (wk->c) memcpy(q->yc + d * B * H, wk->c, (size_t)(B * H) * sizeof(double));
}

static floe_code rnn_compute(void *state, FloeKernelContext *ctx) {
  const RnnState *st = state;
  Seq q;
  floe_code rc = gather_operands(ctx, st, &q);
  if (rc != FLOE_OK) return rc;
  int64_t H = q.H, B = q.B, GH = q.G * H, D = q.D;
  int64_t ydims[4] = {q.S, D, B, H}, hdims[3] = {D, B, H};
  FloeTensor *yt, *ht, *ct = NULL;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 4, ydims, &yt)) != FLOE_OK ||
      (rc = cpu_host->ctx_allocate_output(ctx, 1, 3, hdims, &ht)) != FLOE_OK ||
      (st->kind == K_LSTM &&
       (rc = cpu_host->ctx_allocate_output(ctx, 2, 3, hdims, &ct)) != FLOE_OK))
    return rc;
  int64_t ny = q.S * D * B * H, nh = D * B * H;
  /* One temporary block: y, y_h, y_c, proj, hr, rh, h, c. */
  int64_t sizes[8] = {ny, nh, nh, q.S * B * GH, B * GH, B * H, B * H, B * H}, total = 0;
  for (int i = 0; i < 8; i++) total += sizes[i] > 0 ? sizes[i] : 1;
  double *mem;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)total * sizeof *mem, (void **)&mem)) !=
      FLOE_OK)
    return rc;
  double *part[8];
  for (int i = 0, off = 0; i < 8; off += (int)(sizes[i] > 0 ? sizes[i] : 1), i++) part[i] = mem + off;
  q.y = part[0], q.yh = part[1], q.yc = part[2];
  memset(q.y, 0, (size_t)ny * sizeof(double));
  Work wk = {part[3], part[4], part[5], part[6], st->kind == K_LSTM ? part[7] : NULL};
  for (int d = 0; d < D; d++) run_direction(st, &q, &wk, d, st->reverse_only || d == 1);
  FloeDType dt = cpu_host->tensor_dtype(yt);
  cpu_from_f64(dt, q.y, cpu_host->tensor_data(yt), ny);
  cpu_from_f64(dt, q.yh, cpu_host->tensor_data(ht), nh);
  if (ct) cpu_from_f64(dt, q.yc, cpu_host->tensor_data(ct), nh);
  return FLOE_OK;
}

floe_code cpu_register_rnn_onnx(FloePluginRegistrar *reg) {
  static const char *const ops[] = {"RNN", "GRU", "LSTM"};
  for (int k = 0; k < 3; k++) {
    floe_code rc = cpu_add_kernel(reg, ops[k], "T", FLOE_DTYPES_FLOAT, 0, rnn_compute,
                                  rnn_create, rnn_destroy, (void *)(intptr_t)k);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
