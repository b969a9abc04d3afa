/* SPDX-License-Identifier: Apache-2.0 */
/* spectral.c - determinants and signal processing on the CPU: MatrixDeterminant,
 * CosineSumWindow, DFT, STFT and MelWeightMatrix (core/graph/ops_math_signal.def).
 *
 * Everything is computed in double and rounded once to the output's dtype (f16/bf16 through
 * f32): these ops are small next to the networks that use them, and sums of many terms
 * (a DFT of length L adds L of them) keep their accuracy that way. Transforms take
 * O(L log L) at every length: radix-2 for powers of two, Bluestein's chirp for the rest. */
#include <math.h>

#include "cpu_util.h"

#define PI 3.14159265358979323846

/* A scalar integer input (one element, i32 or i64); errors name it. */
static floe_code scalar_int(FloeKernelContext *ctx, int i, const char *what, int64_t *out) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if (cpu_host->tensor_num_elements(t) != 1 || (dt != FLOE_I32 && dt != FLOE_I64)) {
    char shape[CPU_SHAPE_STR_MAX];
    cpu_shape_str(shape, sizeof shape, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be an integer scalar, got %s %s", what,
                                   cpu_host->dtype_name(dt), shape);
  }
  const void *d = cpu_host->tensor_data(t);
  *out = dt == FLOE_I32 ? *(const int32_t *)d : *(const int64_t *)d;
  return FLOE_OK;
}

/* A scalar float input. */
static floe_code scalar_float(FloeKernelContext *ctx, int i, const char *what, double *out) {
  const FloeTensor *t = cpu_host->ctx_input(ctx, i);
  if (cpu_host->tensor_num_elements(t) != 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "%s must be a scalar", what);
  *out = cpu_float_load(cpu_host->tensor_dtype(t), cpu_host->tensor_data(t), 0);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* MatrixDeterminant: LU with partial pivoting of each [M, M] matrix, in double. */

typedef struct DetJob {
  const void *x;
  void *y;
  FloeDType dt;
  int64_t m;
  double *work; /* m * m per matrix */
} DetJob;

static double det_lu(double *a, int64_t m) {
  double det = 1.0;
  for (int64_t k = 0; k < m; k++) {
    int64_t p = k;
    for (int64_t i = k + 1; i < m; i++)
      if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
    if (a[p * m + k] == 0.0) return 0.0; /* singular (NaN compares false and stays) */
    if (p != k) {
      for (int64_t j = 0; j < m; j++) {
        double t = a[k * m + j];
        a[k * m + j] = a[p * m + j];
        a[p * m + j] = t;
      }
      det = -det;
    }
    double piv = a[k * m + k];
    det *= piv;
    for (int64_t i = k + 1; i < m; i++) {
      double f = a[i * m + k] / piv;
      for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
    }
  }
  return det;
}

static void det_range(void *arg, int64_t begin, int64_t end) {
  const DetJob *j = arg;
  int64_t mm = j->m * j->m;
  for (int64_t b = begin; b < end; b++) {
    double *a = j->work + b * mm;
    for (int64_t i = 0; i < mm; i++) a[i] = cpu_float_load(j->dt, j->x, b * mm + i);
    cpu_float_store(j->dt, j->y, b, det_lu(a, j->m));
  }
}

static floe_code det_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  char shape[CPU_SHAPE_STR_MAX];
  if (rank < 2 || dims[rank - 1] != dims[rank - 2]) {
    cpu_shape_str(shape, sizeof shape, rank, dims);
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input must be square matrices [..., M, M], got %s", shape);
  }
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank - 2, dims, &out);
  if (rc != FLOE_OK) return rc;
  int64_t batch = cpu_host->tensor_num_elements(out), m = dims[rank - 1];
  if (batch == 0) return FLOE_OK;
  double *work = NULL;
  if (m > 0 &&
      (rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(batch * m * m) * sizeof(double),
                                        (void **)&work)) != FLOE_OK)
    return rc;
  DetJob j = {cpu_host->tensor_data(x), cpu_host->tensor_data(out),
              cpu_host->tensor_dtype(x), m, work};
  cpu_parallel_for(batch, m * m * m + 1, det_range, &j);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* CosineSumWindow */

static floe_code window_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t size;
  floe_code rc = scalar_int(ctx, 0, "size", &size);
  if (rc != FLOE_OK) return rc;
  if (size < 0)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "size must be >= 0, got %lld",
                                   (long long)size);
  const FloeAttrs *attrs = cpu_host->ctx_attrs(ctx);
  const double *a = NULL;
  size_t na = 0;
  int periodic = 1;
  if (cpu_host->attr_float_list(attrs, "coefficients", &a, &na) != FLOE_OK)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "attribute coefficients (list(float)) is required");
  cpu_host->attr_bool(attrs, "periodic", &periodic);
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 1, &size, &out)) != FLOE_OK) return rc;
  FloeDType dt = cpu_host->tensor_dtype(out);
  void *y = cpu_host->tensor_data(out);
  int64_t n = periodic ? size : size - 1;
  for (int64_t i = 0; i < size; i++) {
    /* One point (symmetric) has no period: the window is [1], as in NumPy and SciPy. */
    double w = 0, sign = 1;
    for (size_t k = 0; k < na; k++, sign = -sign)
      w += sign * a[k] * (n > 0 ? cos(2.0 * PI * (double)k * (double)i / (double)n) : 1.0);
    cpu_float_store(dt, y, i, n > 0 ? w : 1.0);
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* The transform of one line of L complex values (interleaved re, im): a radix-2 FFT when L
 * is a power of two, else Bluestein's: the DFT as a convolution with a chirp, done by FFTs of
 * a power of two m >= 2L - 1 (exp(-2 pi i kn/L) = c[k] c[n] / c[k - n], c[j] = exp(-pi i j^2/L)). */

typedef struct Plan {
  int64_t len;   /* L */
  int64_t m;     /* the power-of-two FFT size: L, or m >= 2L - 1 for Bluestein */
  int inverse;   /* exponent +2 pi i kn / L, result divided by L */
  double *tw;    /* cos, sin of 2 pi k / m for k < m */
  double *chirp; /* Bluestein: exp(-+ pi i (n^2 mod 2L) / L) for n < L */
  double *bfft;  /* Bluestein: the FFT of the conjugate chirp laid out circularly in m */
} Plan;

/* out = the unnormalised DFT of in over m points (m a power of two), exponent sign s; in and
 * out must not overlap. */
static void fft_pow2(const double *tw, int64_t m, const double *in, double *out, double s) {
  for (int64_t i = 0, r = 0; i < m; i++) { /* bit-reversed copy */
    out[2 * r] = in[2 * i];
    out[2 * r + 1] = in[2 * i + 1];
    int64_t bit = m >> 1;
    for (; bit && (r & bit); bit >>= 1) r ^= bit;
    r |= bit;
  }
  for (int64_t span = 1; span < m; span <<= 1) { /* butterflies of doubling span */
    int64_t step = m / (2 * span);
    for (int64_t base = 0; base < m; base += 2 * span)
      for (int64_t k = 0; k < span; k++) {
        double wr = tw[2 * k * step], wi = s * tw[2 * k * step + 1];
        double *a = out + 2 * (base + k), *b = out + 2 * (base + k + span);
        double tr = b[0] * wr - b[1] * wi, ti = b[0] * wi + b[1] * wr;
        b[0] = a[0] - tr;
        b[1] = a[1] - ti;
        a[0] += tr;
        a[1] += ti;
      }
  }
}

/* Doubles of scratch one line's transform needs besides its input and output. */
static int64_t plan_scratch(const Plan *p) { return p->m == p->len ? 0 : 4 * p->m; }

static floe_code plan_init(FloeKernelContext *ctx, Plan *p, int64_t len, int inverse) {
  p->len = len;
  p->inverse = inverse;
  p->m = 1;
  while (p->m < len) p->m <<= 1;
  if (p->m != len)
    while (p->m < 2 * len - 1) p->m <<= 1;
  int64_t extra = p->m == len ? 0 : 2 * len + 2 * p->m + 2 * p->m; /* chirp, bfft, staging */
  double *mem;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(2 * p->m + extra) * sizeof(double),
                                             (void **)&mem);
  if (rc != FLOE_OK) return rc;
  p->tw = mem;
  for (int64_t k = 0; k < p->m; k++) {
    p->tw[2 * k] = cos(2.0 * PI * (double)k / (double)p->m);
    p->tw[2 * k + 1] = sin(2.0 * PI * (double)k / (double)p->m);
  }
  if (p->m == len) return FLOE_OK;
  p->chirp = mem + 2 * p->m;
  p->bfft = p->chirp + 2 * len;
  double *b = p->bfft + 2 * p->m, s = inverse ? 1.0 : -1.0;
  for (int64_t n = 0; n < len; n++) {
    /* n^2 mod 2L keeps the angle small, so it stays exact for long signals. */
    double a = PI * (double)((n * n) % (2 * len)) / (double)len;
    p->chirp[2 * n] = cos(a);
    p->chirp[2 * n + 1] = s * sin(a);
  }
  for (int64_t j = 0; j < 2 * p->m; j++) b[j] = 0;
  for (int64_t n = 0; n < len; n++) { /* b[j] = conj(chirp[|j|]), j in (-L, L), circular */
    b[2 * n] = p->chirp[2 * n];
    b[2 * n + 1] = -p->chirp[2 * n + 1];
    if (n) {
      b[2 * (p->m - n)] = b[2 * n];
      b[2 * (p->m - n) + 1] = b[2 * n + 1];
    }
  }
  fft_pow2(p->tw, p->m, b, p->bfft, -1.0);
  return FLOE_OK;
}

/* out = the DFT of in (L points; inverse: exponent + and divided by L); scratch holds
 * plan_scratch(p) doubles. in is left as it was. */
static void transform(const Plan *p, const double *in, double *out, double *scratch) {
  int64_t L = p->len, m = p->m;
  if (m == L) {
    fft_pow2(p->tw, m, in, out, p->inverse ? 1.0 : -1.0);
  } else {
    double *a = scratch, *c = scratch + 2 * m;
    for (int64_t n = 0; n < L; n++) { /* a = in * chirp, zero-padded to m */
      double cr = p->chirp[2 * n], ci = p->chirp[2 * n + 1];
      a[2 * n] = in[2 * n] * cr - in[2 * n + 1] * ci;
      a[2 * n + 1] = in[2 * n] * ci + in[2 * n + 1] * cr;
    }
    for (int64_t j = 2 * L; j < 2 * m; j++) a[j] = 0;
    fft_pow2(p->tw, m, a, c, -1.0);
    for (int64_t j = 0; j < m; j++) { /* convolve: pointwise product of the spectra */
      double xr = c[2 * j], xi = c[2 * j + 1], yr = p->bfft[2 * j], yi = p->bfft[2 * j + 1];
      c[2 * j] = xr * yr - xi * yi;
      c[2 * j + 1] = xr * yi + xi * yr;
    }
    fft_pow2(p->tw, m, c, a, 1.0);
    for (int64_t k = 0; k < L; k++) { /* out = chirp * conv / m */
      double cr = p->chirp[2 * k] / (double)m, ci = p->chirp[2 * k + 1] / (double)m;
      out[2 * k] = a[2 * k] * cr - a[2 * k + 1] * ci;
      out[2 * k + 1] = a[2 * k] * ci + a[2 * k + 1] * cr;
    }
  }
  if (p->inverse)
    for (int64_t i = 0; i < 2 * L; i++) out[i] /= (double)L;
}

/* Per-shard buffers of a line transform: input, output and scratch, from the plugin's
 * allocator (a shard that cannot get them sets *oom and does nothing). */
static double *line_buffers(const Plan *p, int *oom) {
  double *buf = cpu_host->alloc((size_t)(4 * p->len + plan_scratch(p)) * sizeof(double));
  if (!buf) __atomic_store_n(oom, 1, __ATOMIC_RELAXED);
  return buf;
}

/* Cost of one line for the pool (nanoseconds-ish). */
static int64_t line_cost(const Plan *p) {
  int64_t lg = 1;
  while ((int64_t)1 << lg < p->m) lg++;
  return (p->m == p->len ? 1 : 3) * 4 * p->m * lg;
}

/* ------------------------------------------------------------------------------------ */
/* DFT: the input seen as [outer, n_in, inner, c], transformed along n. */

typedef struct DftJob {
  Plan plan;
  const void *x;
  void *y;
  FloeDType dt;
  int64_t n_in, inner, c;     /* input: axis length, elements after it, complex dim (1, 2) */
  int64_t n_out, out_c;       /* output: axis length, complex dim */
  int onesided;
  int *oom;
} DftJob;

static void dft_range(void *arg, int64_t begin, int64_t end) {
  const DftJob *j = arg;
  int64_t L = j->plan.len;
  double *in = line_buffers(&j->plan, j->oom), *out = in + 2 * L, *scratch = in + 4 * L;
  if (!in) return;
  int irfft = j->plan.inverse && j->onesided;
  for (int64_t line = begin; line < end; line++) {
    int64_t o = line / j->inner, i = line % j->inner;
    /* Cut or zero-pad to L; an inverse onesided input holds bins [0, L / 2] only. */
    int64_t take = irfft ? L / 2 + 1 : L;
    if (take > j->n_in) take = j->n_in;
    for (int64_t n = 0; n < 2 * L; n++) in[n] = 0;
    for (int64_t n = 0; n < take; n++) {
      int64_t at = ((o * j->n_in + n) * j->inner + i) * j->c;
      in[2 * n] = cpu_float_load(j->dt, j->x, at);
      in[2 * n + 1] = j->c == 2 ? cpu_float_load(j->dt, j->x, at + 1) : 0.0;
    }
    if (irfft) /* the rest of a Hermitian spectrum: X[L-k] = conj X[k] */
      for (int64_t k = L / 2 + 1; k < L; k++) {
        in[2 * k] = in[2 * (L - k)];
        in[2 * k + 1] = -in[2 * (L - k) + 1];
      }
    transform(&j->plan, in, out, scratch);
    for (int64_t k = 0; k < j->n_out; k++) {
      int64_t at = ((o * j->n_out + k) * j->inner + i) * j->out_c;
      cpu_float_store(j->dt, j->y, at, out[2 * k]);
      if (j->out_c == 2) cpu_float_store(j->dt, j->y, at + 1, out[2 * k + 1]);
    }
  }
  cpu_host->free(in);
}

static floe_code dft_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int rank = cpu_host->tensor_rank(x);
  const int64_t *dims = cpu_host->tensor_dims(x);
  const FloeAttrs *attrs = cpu_host->ctx_attrs(ctx);
  int64_t axis = 1, len;
  int inverse = 0, onesided = 0, oom = 0;
  cpu_host->attr_int(attrs, "axis", &axis);
  cpu_host->attr_bool(attrs, "inverse", &inverse);
  cpu_host->attr_bool(attrs, "onesided", &onesided);
  char shape[CPU_SHAPE_STR_MAX];
  cpu_shape_str(shape, sizeof shape, rank, dims);
  if (rank < 2 || (dims[rank - 1] != 1 && dims[rank - 1] != 2))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input must be [..., 1] (real) or [..., 2] (complex), got %s",
                                   shape);
  int ax = (int)(axis < 0 ? axis + rank : axis);
  if (ax < 0 || ax > rank - 2)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "axis %lld is out of range for input %s", (long long)axis, shape);
  floe_code rc = scalar_int(ctx, 1, "dft_length", &len);
  if (rc != FLOE_OK) return rc;
  if (len < 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "dft_length must be >= 1, got %lld",
                                   (long long)len);
  DftJob j = {.x = cpu_host->tensor_data(x), .dt = cpu_host->tensor_dtype(x), .n_in = dims[ax],
              .inner = 1, .c = dims[rank - 1], .onesided = onesided, .oom = &oom};
  int64_t outer = 1, odims[FLOE_MAX_DIMS];
  for (int d = 0; d < rank; d++) {
    odims[d] = dims[d];
    if (d < ax) outer *= dims[d];
    if (d > ax && d < rank - 1) j.inner *= dims[d];
  }
  j.n_out = onesided && !inverse ? len / 2 + 1 : len;
  j.out_c = inverse && onesided ? 1 : 2;
  odims[ax] = j.n_out;
  odims[rank - 1] = j.out_c;
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &out)) != FLOE_OK) return rc;
  int64_t lines = outer * j.inner;
  if (lines == 0) return FLOE_OK;
  j.y = cpu_host->tensor_data(out);
  if ((rc = plan_init(ctx, &j.plan, len, inverse)) != FLOE_OK) return rc;
  cpu_parallel_for(lines, line_cost(&j.plan), dft_range, &j);
  if (oom)
    return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory for a %lld-point transform",
                                   (long long)len);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* STFT: frame f of batch b is signal[b, f * step + n] * window[n], n < frame_length. */

typedef struct StftJob {
  Plan plan;
  const void *x, *win;
  void *y;
  FloeDType dt;
  int64_t length, c, frames, step, bins;
  int *oom;
} StftJob;

static void stft_range(void *arg, int64_t begin, int64_t end) {
  const StftJob *j = arg;
  int64_t L = j->plan.len;
  double *in = line_buffers(&j->plan, j->oom), *out = in + 2 * L, *scratch = in + 4 * L;
  if (!in) return;
  for (int64_t line = begin; line < end; line++) {
    int64_t b = line / j->frames, f = line % j->frames;
    for (int64_t n = 0; n < L; n++) {
      int64_t at = (b * j->length + f * j->step + n) * j->c;
      double w = cpu_float_load(j->dt, j->win, n);
      in[2 * n] = cpu_float_load(j->dt, j->x, at) * w;
      in[2 * n + 1] = j->c == 2 ? cpu_float_load(j->dt, j->x, at + 1) * w : 0.0;
    }
    transform(&j->plan, in, out, scratch);
    for (int64_t k = 0; k < j->bins; k++) {
      cpu_float_store(j->dt, j->y, (line * j->bins + k) * 2, out[2 * k]);
      cpu_float_store(j->dt, j->y, (line * j->bins + k) * 2 + 1, out[2 * k + 1]);
    }
  }
  cpu_host->free(in);
}

static floe_code stft_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *win = cpu_host->ctx_input(ctx, 2);
  int rank = cpu_host->tensor_rank(x), oom = 0;
  const int64_t *dims = cpu_host->tensor_dims(x);
  char shape[CPU_SHAPE_STR_MAX];
  cpu_shape_str(shape, sizeof shape, rank, dims);
  if (rank != 3 || (dims[2] != 1 && dims[2] != 2))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "signal must be [batch, length, 1 or 2], got %s", shape);
  int64_t step, flen;
  floe_code rc;
  if ((rc = scalar_int(ctx, 1, "frame_step", &step)) != FLOE_OK ||
      (rc = scalar_int(ctx, 3, "frame_length", &flen)) != FLOE_OK)
    return rc;
  if (step < 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT, "frame_step must be >= 1, got %lld",
                                   (long long)step);
  if (cpu_host->tensor_rank(win) != 1 || cpu_host->tensor_dims(win)[0] != flen || flen < 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "window must be 1-D of frame_length %lld points", (long long)flen);
  if (flen > dims[1])
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "frame_length %lld is longer than the signal %s",
                                   (long long)flen, shape);
  int onesided = 1;
  cpu_host->attr_bool(cpu_host->ctx_attrs(ctx), "onesided", &onesided);
  StftJob j = {.x = cpu_host->tensor_data(x), .win = cpu_host->tensor_data(win),
               .dt = cpu_host->tensor_dtype(x), .length = dims[1], .c = dims[2],
               .frames = 1 + (dims[1] - flen) / step, .step = step,
               .bins = onesided ? flen / 2 + 1 : flen, .oom = &oom};
  int64_t odims[4] = {dims[0], j.frames, j.bins, 2};
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 4, odims, &out)) != FLOE_OK) return rc;
  int64_t lines = dims[0] * j.frames;
  if (lines == 0) return FLOE_OK;
  j.y = cpu_host->tensor_data(out);
  if ((rc = plan_init(ctx, &j.plan, flen, 0)) != FLOE_OK) return rc;
  cpu_parallel_for(lines, line_cost(&j.plan), stft_range, &j);
  if (oom)
    return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory for a %lld-point transform",
                                   (long long)flen);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* MelWeightMatrix: num_mel_bins + 2 edges evenly spaced in mel over [lower, upper] hertz
 * (the step is the range over num_mel_bins + 2, as ONNX defines it), each turned into the
 * DFT bin floor((dft_length + 1) * hz / sample_rate); filter i rises from edge i to edge
 * i + 1 and falls to edge i + 2. */

static double hz_to_mel(double hz) { return 2595.0 * log10(1.0 + hz / 700.0); }
static double mel_to_hz(double mel) { return 700.0 * (pow(10.0, mel / 2595.0) - 1.0); }

static floe_code mel_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t nmel, len, rate;
  double lo, hi;
  floe_code rc;
  if ((rc = scalar_int(ctx, 0, "num_mel_bins", &nmel)) != FLOE_OK ||
      (rc = scalar_int(ctx, 1, "dft_length", &len)) != FLOE_OK ||
      (rc = scalar_int(ctx, 2, "sample_rate", &rate)) != FLOE_OK ||
      (rc = scalar_float(ctx, 3, "lower_edge_hertz", &lo)) != FLOE_OK ||
      (rc = scalar_float(ctx, 4, "upper_edge_hertz", &hi)) != FLOE_OK)
    return rc;
  if (nmel < 1 || len < 1 || rate < 1 || !(lo >= 0) || !(hi >= lo))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "needs num_mel_bins, dft_length, sample_rate >= 1 and 0 <= "
                                   "lower_edge_hertz <= upper_edge_hertz; got %lld, %lld, %lld, "
                                   "%g, %g",
                                   (long long)nmel, (long long)len, (long long)rate, lo, hi);
  int64_t nspec = len / 2 + 1, *edge;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(nmel + 2) * sizeof *edge,
                                        (void **)&edge)) != FLOE_OK)
    return rc;
  double mlo = hz_to_mel(lo), step = (hz_to_mel(hi) - mlo) / (double)(nmel + 2);
  for (int64_t i = 0; i < nmel + 2; i++) {
    double bin = floor((double)(len + 1) * mel_to_hz((double)i * step + mlo) / (double)rate);
    /* The last edge only bounds the last filter's falling side from above. */
    if (bin < 0 || bin >= (double)(i == nmel + 1 ? nspec + 1 : nspec))
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "mel edge %lld falls in DFT bin %g, outside [0, %lld): "
                                     "upper_edge_hertz %g is above what sample_rate %lld and "
                                     "dft_length %lld resolve",
                                     (long long)i, bin, (long long)nspec, hi, (long long)rate,
                                     (long long)len);
    edge[i] = (int64_t)bin;
  }
  int64_t odims[2] = {nspec, nmel};
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 2, odims, &out)) != FLOE_OK) return rc;
  FloeDType dt = cpu_host->tensor_dtype(out);
  void *y = cpu_host->tensor_data(out);
  for (int64_t k = 0; k < nspec * nmel; k++) cpu_float_store(dt, y, k, 0.0);
  for (int64_t i = 0; i < nmel; i++) {
    int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
    /* Rising side (a single 1 when it is empty), then the falling side, which starts with 1
     * at the center. */
    if (center == left)
      cpu_float_store(dt, y, center * nmel + i, 1.0);
    else
      for (int64_t k = left; k <= center; k++)
        cpu_float_store(dt, y, k * nmel + i, (double)(k - left) / (double)(center - left));
    for (int64_t k = center; k < right; k++)
      cpu_float_store(dt, y, k * nmel + i, (double)(right - k) / (double)(right - center));
  }
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */

floe_code cpu_register_spectral(FloePluginRegistrar *reg) {
  const uint32_t flt = FLOE_DTYPES_FLOAT;
  floe_code rc = cpu_add_kernel(reg, "MatrixDeterminant", "T", flt, 0, det_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "CosineSumWindow", "dtype", flt, 0, window_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK) rc = cpu_add_kernel(reg, "DFT", "T", flt, 0, dft_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK) rc = cpu_add_kernel(reg, "STFT", "T", flt, 0, stft_compute, NULL, NULL, NULL);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "MelWeightMatrix", "dtype", flt, 0, mel_compute, NULL, NULL, NULL);
  return rc;
}
