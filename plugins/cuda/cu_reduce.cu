/* SPDX-License-Identifier: Apache-2.0 */
// cu_reduce.cu - the CUDA plugin's own reduction-shaped kernels: Sum / Mean / Max / Min /
// Prod over [outer, r, inner] views, ArgMax / ArgMin, the softmax cross-entropy losses,
// Softmax / LogSoftmax along a dim that is not the last (or too large for cuDNN), and the
// gathers (Gather, OneHot). Launchers are declared in cu_kernels.h.
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include <type_traits>

#include <floe/floe_types.h>

#include "cu_kernels.h"

namespace {

constexpr int kThreads = 256; // a power of two: the block reductions halve it

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

inline unsigned rows_grid(int64_t rows) { return (unsigned)(rows > 65535 ? 65535 : rows); }

inline int launched() { return (int)cudaGetLastError(); }

#define GRID_LOOP(i, n)                                                                      \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                 \
       i += (int64_t)gridDim.x * blockDim.x)

// Accumulators: floats sum in double (closer to the CPU plugin's f64-combined sums),
// integers wrap in their unsigned type.
template <typename T, bool F = std::is_floating_point<T>::value>
struct Acc {
  using type = double;
};
template <typename T>
struct Acc<T, false> {
  using type = typename std::make_unsigned<T>::type;
};

template <typename T>
__device__ __forceinline__ T lowest() {
  if constexpr (std::is_floating_point<T>::value) return -(T)INFINITY;
  else return (T)((typename std::make_unsigned<T>::type)1 << (sizeof(T) * 8 - 1));
}

template <typename T>
__device__ __forceinline__ T highest() {
  if constexpr (std::is_floating_point<T>::value) return (T)INFINITY;
  else return (T)~((typename std::make_unsigned<T>::type)1 << (sizeof(T) * 8 - 1));
}

// Max / min keep NaN (NumPy's maximum / minimum), like the elementwise ops.
template <typename T>
__device__ __forceinline__ T vmax(T a, T b) { return (a > b) | (a != a) ? a : b; }
template <typename T>
__device__ __forceinline__ T vmin(T a, T b) { return (a < b) | (a != a) ? a : b; }

template <int OP, typename T>
struct Reducer {
  using A = typename std::conditional<OP == CU_R_MAX || OP == CU_R_MIN, T,
                                      typename Acc<T>::type>::type;
  __device__ static A init() {
    if constexpr (OP == CU_R_MAX) return lowest<T>();
    else if constexpr (OP == CU_R_MIN) return highest<T>();
    else if constexpr (OP == CU_R_PROD) return A(1);
    else return A(0);
  }
  __device__ static A step(A a, T x) {
    if constexpr (OP == CU_R_MAX) return vmax<T>(a, x);
    else if constexpr (OP == CU_R_MIN) return vmin<T>(a, x);
    else if constexpr (OP == CU_R_PROD) return (A)(a * (A)x);
    else return (A)(a + (A)x);
  }
  __device__ static A join(A a, A b) {
    if constexpr (OP == CU_R_MAX) return vmax<T>(a, b);
    else if constexpr (OP == CU_R_MIN) return vmin<T>(a, b);
    else if constexpr (OP == CU_R_PROD) return (A)(a * b);
    else return (A)(a + b);
  }
  __device__ static T finish(A a, int64_t r) {
    if constexpr (OP == CU_R_MEAN) {
      if constexpr (std::is_floating_point<T>::value) return (T)(a / (double)r);
      else return r ? (T)((T)a / (T)r) : T(0);
    } else {
      return (T)a;
    }
  }
};

// One block per row of [rows, r] (inner == 1): strided partial results, then a tree.
template <int OP, typename T>
__global__ void reduce_rows_k(int64_t rows, int64_t r, const T *x, T *out) {
  using R = Reducer<OP, T>;
  using A = typename R::A;
  __shared__ A part[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *xr = x + row * r;
    A a = R::init();
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) a = R::step(a, xr[j]);
    part[threadIdx.x] = a;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) part[threadIdx.x] = R::join(part[threadIdx.x], part[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = R::finish(part[0], r);
    __syncthreads();
  }
}

// One thread per output (o, i) of [outer, r, inner], reading down r (coalesced along i).
template <int OP, typename T>
__global__ void reduce_cols_k(int64_t outer, int64_t r, int64_t inner, const T *x, T *out) {
  using R = Reducer<OP, T>;
  GRID_LOOP(k, outer * inner) {
    int64_t o = k / inner, i = k % inner;
    const T *xp = x + o * r * inner + i;
    typename R::A a = R::init();
    for (int64_t j = 0; j < r; j++) a = R::step(a, xp[j * inner]);
    out[k] = R::finish(a, r);
  }
}

template <int OP, typename T>
int reduce_launch(CuStream s, int64_t outer, int64_t r, int64_t inner, const void *x, void *out) {
  if (inner == 1 && r >= 64)
    reduce_rows_k<OP, T><<<rows_grid(outer), kThreads, 0, s>>>(outer, r, (const T *)x, (T *)out);
  else
    reduce_cols_k<OP, T><<<blocks_for(outer * inner), kThreads, 0, s>>>(outer, r, inner,
                                                                         (const T *)x, (T *)out);
  return launched();
}

template <typename T>
int reduce_typed(CuStream s, int op, int64_t outer, int64_t r, int64_t inner, const void *x,
                 void *out) {
  switch (op) {
  case CU_R_SUM: return reduce_launch<CU_R_SUM, T>(s, outer, r, inner, x, out);
  case CU_R_MEAN: return reduce_launch<CU_R_MEAN, T>(s, outer, r, inner, x, out);
  case CU_R_MAX: return reduce_launch<CU_R_MAX, T>(s, outer, r, inner, x, out);
  case CU_R_MIN: return reduce_launch<CU_R_MIN, T>(s, outer, r, inner, x, out);
  case CU_R_PROD: return reduce_launch<CU_R_PROD, T>(s, outer, r, inner, x, out);
  default: return CU_UNSUPPORTED;
  }
}

template <typename T, typename O>
__global__ void arg_k(int want_max, int64_t outer, int64_t r, int64_t inner, const T *x, O *out) {
  GRID_LOOP(k, outer * inner) {
    int64_t o = k / inner, i = k % inner;
    const T *xp = x + o * r * inner + i;
    T best = xp[0];
    int64_t at = 0;
    for (int64_t j = 1; j < r && best == best; j++) { // a NaN wins and stops the search
      T v = xp[j * inner];
      if (v != v || (want_max ? v > best : v < best)) best = v, at = j;
    }
    out[k] = (O)at;
  }
}

template <typename T>
int arg_typed(CuStream s, int want_max, int out_dt, int64_t outer, int64_t r, int64_t inner,
              const void *x, void *out) {
  unsigned b = blocks_for(outer * inner);
  if (out_dt == FLOE_I64)
    arg_k<T, int64_t><<<b, kThreads, 0, s>>>(want_max, outer, r, inner, (const T *)x, (int64_t *)out);
  else if (out_dt == FLOE_I32)
    arg_k<T, int32_t><<<b, kThreads, 0, s>>>(want_max, outer, r, inner, (const T *)x, (int32_t *)out);
  else
    return CU_UNSUPPORTED;
  return launched();
}

// ------------------------------------------------------------------------------------
// Softmax cross-entropy: one block per row.

__device__ float block_max(float v, float *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

// labels: dense [batch, classes] f32 (dense = 1) or one index per row (label_dt).
__global__ void xent_k(int64_t batch, int64_t c, const float *logits, int dense,
                       const float *dlabels, int label_dt, const void *slabels, float *loss,
                       float *backprop) {
  __shared__ float shf[kThreads];
  __shared__ double shd[kThreads];
  for (int64_t row = blockIdx.x; row < batch; row += gridDim.x) {
    const float *l = logits + row * c;
    float *bp = backprop + row * c;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, l[j]);
    m = block_max(m, shf);
    double se = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) se += exp((double)(l[j] - m));
    se = block_sum(se, shd);
    double lse = log(se);
    int64_t label = -1;
    if (!dense)
      label = label_dt == FLOE_I64 ? ((const int64_t *)slabels)[row]
                                   : (int64_t)((const int32_t *)slabels)[row];
    double part = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      double shifted = (double)(l[j] - m);
      float p = (float)exp(shifted - lse);
      float y = dense ? dlabels[row * c + j] : (j == label ? 1.0f : 0.0f);
      bp[j] = p - y;
      if (y != 0.0f) part += (double)y * (lse - shifted);
    }
    part = block_sum(part, shd);
    if (threadIdx.x == 0) loss[row] = (float)part;
  }
}

// ------------------------------------------------------------------------------------
// Softmax / LogSoftmax along the middle dim of [outer, n, inner]: one thread per (o, i)
// column, so neighbouring threads read neighbouring i (coalesced when inner is large, as for
// NCHW logits over channels). The CPU plugin's passes and rounding: a NaN-keeping max, exp
// in T, the exponentials summed in double, then exp(x - m) * (1 / s) or (x - m) - log(s).
// exp is recomputed in the last pass rather than stored and rescaled: the same values, and
// x is read again instead of y written twice.

template <typename T>
__global__ void softmax_cols_k(int log_sm, int64_t outer, int64_t n, int64_t inner,
                               const T *x, T *y) {
  GRID_LOOP(k, outer * inner) {
    int64_t o = k / inner, i = k % inner;
    const T *xp = x + o * n * inner + i;
    T *yp = y + o * n * inner + i;
    T m = -(T)INFINITY;
    for (int64_t j = 0; j < n; j++) m = vmax<T>(xp[j * inner], m);
    double se = 0;
    for (int64_t j = 0; j < n; j++) se += (double)exp(xp[j * inner] - m);
    if (log_sm) {
      T ls = (T)log(se);
      for (int64_t j = 0; j < n; j++) yp[j * inner] = (xp[j * inner] - m) - ls;
    } else {
      T inv = (T)(1.0 / se);
      for (int64_t j = 0; j < n; j++) yp[j * inner] = exp(xp[j * inner] - m) * inv;
    }
  }
}

// ------------------------------------------------------------------------------------
// Gathers.

__device__ __forceinline__ int64_t index_at(int dt, const void *p, int64_t k) {
  switch (dt) {
  case FLOE_I64: return ((const int64_t *)p)[k];
  case FLOE_I32: return ((const int32_t *)p)[k];
  default: return ((const uint8_t *)p)[k];
  }
}

template <typename T>
__global__ void gather_k(int64_t outer, int64_t n, int64_t inner, const T *params, int idx_dt,
                         const void *indices, int64_t k, T *out) {
  GRID_LOOP(e, outer * k * inner) {
    int64_t i = e % inner, rest = e / inner;
    int64_t j = rest % k, o = rest / k;
    out[e] = params[(o * n + index_at(idx_dt, indices, j)) * inner + i];
  }
}

template <typename T>
__global__ void one_hot_k(int64_t outer, int64_t depth, int64_t inner, int idx_dt,
                          const void *indices, T on, T off, T *out) {
  GRID_LOOP(e, outer * depth * inner) {
    int64_t i = e % inner, rest = e / inner;
    int64_t d = rest % depth, o = rest / depth;
    out[e] = index_at(idx_dt, indices, o * inner + i) == d ? on : off;
  }
}

__global__ void avg_pool_grad_k(CuPoolGeo g, const float *dy, float *dx) {
  GRID_LOOP(e, g.n * g.c * g.h * g.w) {
    int64_t n, c, y, x;
    if (g.nchw) {
      x = e % g.w, y = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.c, n = e / (g.w * g.h * g.c);
    } else {
      c = e % g.c, x = (e / g.c) % g.w, y = (e / (g.c * g.w)) % g.h, n = e / (g.c * g.w * g.h);
    }
    // Windows oy cover y when oy*sh - pad_t <= y < oy*sh - pad_t + kh.
    int64_t oy0 = y + g.pad_t - g.kh + 1, ox0 = x + g.pad_l - g.kw + 1;
    oy0 = oy0 <= 0 ? 0 : (oy0 + g.sh - 1) / g.sh;
    ox0 = ox0 <= 0 ? 0 : (ox0 + g.sw - 1) / g.sw;
    int64_t oy1 = (y + g.pad_t) / g.sh, ox1 = (x + g.pad_l) / g.sw;
    if (oy1 >= g.oh) oy1 = g.oh - 1;
    if (ox1 >= g.ow) ox1 = g.ow - 1;
    float acc = 0.0f;
    for (int64_t oy = oy0; oy <= oy1; oy++) {
      int64_t y0 = oy * g.sh - g.pad_t, y1 = y0 + g.kh;
      int64_t rows = (y1 < g.h ? y1 : g.h) - (y0 > 0 ? y0 : 0);
      for (int64_t ox = ox0; ox <= ox1; ox++) {
        int64_t x0 = ox * g.sw - g.pad_l, x1 = x0 + g.kw;
        int64_t cols = (x1 < g.w ? x1 : g.w) - (x0 > 0 ? x0 : 0);
        int64_t at = g.nchw ? ((n * g.c + c) * g.oh + oy) * g.ow + ox
                            : ((n * g.oh + oy) * g.ow + ox) * g.c + c;
        acc += dy[at] / (float)(rows * cols);
      }
    }
    dx[e] = acc;
  }
}

// AvgPool for the padding cuDNN cannot exclude from the count (TensorFlow's asymmetric
// SAME, whose odd row / column would be explicit zeros to cuDNN): each window is clipped to
// the valid inputs and averaged over those only, like the CPU plugin and avg_pool_grad_k.
// Summed in float in row-major window order, like oneDNN's f32 pooling on the CPU.
__global__ void avg_pool_k(CuPoolGeo g, const float *x, float *y) {
  GRID_LOOP(e, g.n * g.c * g.oh * g.ow) {
    int64_t n, c, oy, ox;
    if (g.nchw) {
      ox = e % g.ow, oy = (e / g.ow) % g.oh, c = (e / (g.ow * g.oh)) % g.c,
      n = e / (g.ow * g.oh * g.c);
    } else {
      c = e % g.c, ox = (e / g.c) % g.ow, oy = (e / (g.c * g.ow)) % g.oh,
      n = e / (g.c * g.ow * g.oh);
    }
    int64_t y0 = oy * g.sh - g.pad_t, x0 = ox * g.sw - g.pad_l;
    int64_t y1 = y0 + g.kh < g.h ? y0 + g.kh : g.h, x1 = x0 + g.kw < g.w ? x0 + g.kw : g.w;
    if (y0 < 0) y0 = 0;
    if (x0 < 0) x0 = 0;
    // The (n, c) plane's first input and the steps between neighbouring columns and rows.
    int64_t xs = g.nchw ? 1 : g.c, ys = g.w * xs;
    const float *p = x + (g.nchw ? (n * g.c + c) * g.h * g.w : n * g.h * g.w * g.c + c);
    float acc = 0.0f;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t ix = x0; ix < x1; ix++) acc += p[iy * ys + ix * xs];
    // Never an empty window: a SAME window starts before h (oy * sh < h) and pads fewer than
    // kh rows before the data, and likewise for the columns.
    y[e] = acc / (float)((y1 - y0) * (x1 - x0));
  }
}

} // namespace

extern "C" int cu_avg_pool_grad(CuStream s, const CuPoolGeo *g, const float *dy, float *dx) {
  int64_t total = g->n * g->c * g->h * g->w;
  if (total == 0) return 0;
  avg_pool_grad_k<<<blocks_for(total), kThreads, 0, s>>>(*g, dy, dx);
  return launched();
}

extern "C" int cu_avg_pool(CuStream s, const CuPoolGeo *g, const float *x, float *y) {
  int64_t total = g->n * g->c * g->oh * g->ow;
  if (total == 0) return 0;
  avg_pool_k<<<blocks_for(total), kThreads, 0, s>>>(*g, x, y);
  return launched();
}

extern "C" int cu_reduce(CuStream s, CuReduceOp op, int dt, int64_t outer, int64_t r,
                         int64_t inner, const void *x, void *out) {
  if (outer * inner == 0) return 0;
  switch (dt) {
  case FLOE_F32: return reduce_typed<float>(s, op, outer, r, inner, x, out);
  case FLOE_F64: return reduce_typed<double>(s, op, outer, r, inner, x, out);
  case FLOE_I32: return reduce_typed<int32_t>(s, op, outer, r, inner, x, out);
  case FLOE_I64: return reduce_typed<int64_t>(s, op, outer, r, inner, x, out);
  default: return CU_UNSUPPORTED;
  }
}

extern "C" int cu_arg_reduce(CuStream s, int want_max, int dt, int out_dt, int64_t outer,
                             int64_t r, int64_t inner, const void *x, void *out) {
  if (outer * inner == 0) return 0;
  if (r < 1) return CU_UNSUPPORTED;
  switch (dt) {
  case FLOE_F32: return arg_typed<float>(s, want_max, out_dt, outer, r, inner, x, out);
  case FLOE_F64: return arg_typed<double>(s, want_max, out_dt, outer, r, inner, x, out);
  case FLOE_I32: return arg_typed<int32_t>(s, want_max, out_dt, outer, r, inner, x, out);
  case FLOE_I64: return arg_typed<int64_t>(s, want_max, out_dt, outer, r, inner, x, out);
  default: return CU_UNSUPPORTED;
  }
}

extern "C" int cu_softmax_xent(CuStream s, int64_t batch, int64_t classes, const float *logits,
                               const float *labels, float *loss, float *backprop) {
  if (batch == 0) return 0;
  xent_k<<<rows_grid(batch), kThreads, 0, s>>>(batch, classes, logits, 1, labels, 0, nullptr,
                                                loss, backprop);
  return launched();
}

extern "C" int cu_sparse_softmax_xent(CuStream s, int64_t batch, int64_t classes,
                                      const float *logits, int label_dt, const void *labels,
                                      float *loss, float *backprop) {
  if (batch == 0) return 0;
  if (label_dt != FLOE_I32 && label_dt != FLOE_I64) return CU_UNSUPPORTED;
  xent_k<<<rows_grid(batch), kThreads, 0, s>>>(batch, classes, logits, 0, nullptr, label_dt,
                                                labels, loss, backprop);
  return launched();
}

extern "C" int cu_softmax(CuStream s, int log_sm, int dt, int64_t outer, int64_t n,
                          int64_t inner, const void *x, void *y) {
  if (outer * n * inner == 0) return 0;
  unsigned b = blocks_for(outer * inner);
  switch (dt) {
  case FLOE_F32:
    softmax_cols_k<float><<<b, kThreads, 0, s>>>(log_sm, outer, n, inner, (const float *)x,
                                                  (float *)y);
    break;
  case FLOE_F64:
    softmax_cols_k<double><<<b, kThreads, 0, s>>>(log_sm, outer, n, inner, (const double *)x,
                                                   (double *)y);
    break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_gather(CuStream s, int64_t outer, int64_t n, int64_t inner, int elem_size,
                         const void *params, int idx_dt, const void *indices, int64_t k,
                         void *out) {
  int64_t total = outer * k * inner;
  if (total == 0) return 0;
  unsigned b = blocks_for(total);
  switch (elem_size) {
  case 1: gather_k<uint8_t><<<b, kThreads, 0, s>>>(outer, n, inner, (const uint8_t *)params, idx_dt, indices, k, (uint8_t *)out); break;
  case 2: gather_k<uint16_t><<<b, kThreads, 0, s>>>(outer, n, inner, (const uint16_t *)params, idx_dt, indices, k, (uint16_t *)out); break;
  case 4: gather_k<uint32_t><<<b, kThreads, 0, s>>>(outer, n, inner, (const uint32_t *)params, idx_dt, indices, k, (uint32_t *)out); break;
  case 8: gather_k<uint64_t><<<b, kThreads, 0, s>>>(outer, n, inner, (const uint64_t *)params, idx_dt, indices, k, (uint64_t *)out); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_one_hot(CuStream s, int64_t outer, int64_t depth, int64_t inner, int idx_dt,
                          const void *indices, int elem_size, uint64_t on, uint64_t off,
                          void *out) {
  int64_t total = outer * depth * inner;
  if (total == 0) return 0;
  unsigned b = blocks_for(total);
  switch (elem_size) {
  case 1: one_hot_k<uint8_t><<<b, kThreads, 0, s>>>(outer, depth, inner, idx_dt, indices, (uint8_t)on, (uint8_t)off, (uint8_t *)out); break;
  case 2: one_hot_k<uint16_t><<<b, kThreads, 0, s>>>(outer, depth, inner, idx_dt, indices, (uint16_t)on, (uint16_t)off, (uint16_t *)out); break;
  case 4: one_hot_k<uint32_t><<<b, kThreads, 0, s>>>(outer, depth, inner, idx_dt, indices, (uint32_t)on, (uint32_t)off, (uint32_t *)out); break;
  case 8: one_hot_k<uint64_t><<<b, kThreads, 0, s>>>(outer, depth, inner, idx_dt, indices, on, off, (uint64_t *)out); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}
