/* SPDX-License-Identifier: Apache-2.0 */
// cu_elementwise.cu - the CUDA plugin's own elementwise kernels: binary ops with NumPy
// broadcasting (a plan from cuda_util.c), unary math and activations, their gradients,
// casts, Select, fills, broadcast copies (and ExpandReduced's mean), transposes, AddN and the
// optimiser updates. Launchers are declared in cu_kernels.h. Formulas follow the CPU
// plugin's (same NaN rules, same order of operations in the optimisers) so results agree to
// rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include <floe/floe_types.h>

#include "cu_kernels.h"

namespace {

constexpr int kThreads = 256;

// Grid-stride launches: enough blocks to fill the GPU, never more than the work needs.
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

inline int launched() { return (int)cudaGetLastError(); }

#define GRID_LOOP(i, n)                                                                      \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                 \
       i += (int64_t)gridDim.x * blockDim.x)

// Element offsets of output element i in each of k inputs of a plan.
template <int K>
__device__ __forceinline__ void plan_offsets(const CuBcast &p, int64_t i, int64_t *off) {
  for (int k = 0; k < K; k++) off[k] = 0;
  if (p.rank == 1) {
    for (int k = 0; k < K; k++) off[k] = i * p.strides[k][0];
    return;
  }
  int64_t rem = i;
  for (int d = p.rank - 1; d >= 0; d--) {
    int64_t c = rem % p.dims[d];
    rem /= p.dims[d];
    for (int k = 0; k < K; k++) off[k] += c * p.strides[k][d];
  }
}

// ------------------------------------------------------------------------------------
// Binary ops.

// The type integer arithmetic wraps in (unsigned of the same width); floats stay as they are.
template <typename T, bool Float = std::is_floating_point<T>::value>
struct Wrap {
  using type = T;
};
template <typename T>
struct Wrap<T, false> {
  using type = typename std::make_unsigned<T>::type;
};

template <typename T>
__device__ __forceinline__ T ipow(T x, T y) {
  using U = typename std::make_unsigned<T>::type;
  U r = 1, b = (U)x;
  for (uint64_t e = (uint64_t)y; e; e >>= 1) {
    if (e & 1u) r = (U)(r * b);
    b = (U)(b * b);
  }
  return (T)r;
}

template <typename T>
__device__ __forceinline__ T sigmoid_of(T x) {
  T e = exp(-fabs(x));
  T r = T(1) / (T(1) + e);
  return x >= T(0) ? r : e * r;
}

template <int OP, typename T>
__device__ __forceinline__ T bin_value(T x, T y, T alpha) {
  constexpr bool flt = std::is_floating_point<T>::value;
  using U = typename Wrap<T>::type;
  if constexpr (OP == CU_ADD) return (T)((U)x + (U)y); // integers wrap
  if constexpr (OP == CU_SUB) return (T)((U)x - (U)y);
  if constexpr (OP == CU_MUL) return (T)((U)x * (U)y);
  if constexpr (OP == CU_DIV) return x / y;            // floats only (registered so)
  if constexpr (OP == CU_MAX) return (x > y) | (x != x) ? x : y;
  if constexpr (OP == CU_MIN) return (x < y) | (x != x) ? x : y;
  if constexpr (OP == CU_POW) {
    if constexpr (flt) return (y == T(2)) ? x * x : pow(x, y);
    else return ipow(x, y);
  }
  if constexpr (OP == CU_SQDIFF) return (T)(((U)x - (U)y) * ((U)x - (U)y));
  if constexpr (OP == CU_RELU_GRAD) return y > T(0) ? x : T(0);
  if constexpr (OP == CU_RELU6_GRAD) return (y > T(0) && y < T(6)) ? x : T(0);
  if constexpr (flt) {
    if constexpr (OP == CU_SIGMOID_GRAD) return y * (x * (T(1) - x));
    if constexpr (OP == CU_TANH_GRAD) return y * (T(1) - x * x);
    if constexpr (OP == CU_SQRT_GRAD) return y * T(0.5) / x;
    if constexpr (OP == CU_RSQRT_GRAD) return y * T(-0.5) * (x * x * x);
    if constexpr (OP == CU_SOFTPLUS_GRAD) return x * sigmoid_of(y);
    if constexpr (OP == CU_LEAKY_RELU_GRAD) return y > T(0) ? x : x * alpha;
  }
  return T(0);
}

template <int OP, typename T>
__device__ __forceinline__ uint8_t cmp_value(T x, T y) {
  if constexpr (OP == CU_EQ) return x == y;
  if constexpr (OP == CU_NE) return x != y;
  if constexpr (OP == CU_LT) return x < y;
  if constexpr (OP == CU_LE) return x <= y;
  if constexpr (OP == CU_GT) return x > y;
  if constexpr (OP == CU_GE) return x >= y;
  if constexpr (OP == CU_AND) return (x != 0) & (y != 0);
  if constexpr (OP == CU_OR) return (x != 0) | (y != 0);
  return 0;
}

template <int OP, typename T>
__global__ void binary_k(CuBcast p, const T *x, const T *y, T *z, T alpha) {
  GRID_LOOP(i, p.n) {
    int64_t off[2];
    plan_offsets<2>(p, i, off);
    z[i] = bin_value<OP, T>(x[off[0]], y[off[1]], alpha);
  }
}

template <int OP, typename T>
__global__ void compare_k(CuBcast p, const T *x, const T *y, uint8_t *z) {
  GRID_LOOP(i, p.n) {
    int64_t off[2];
    plan_offsets<2>(p, i, off);
    z[i] = cmp_value<OP, T>(x[off[0]], y[off[1]]);
  }
}

template <int OP, typename T>
int launch_binary(CuStream s, const CuBcast *p, const void *x, const void *y, void *z,
                  double alpha) {
  constexpr bool cmp = OP >= CU_EQ && OP <= CU_OR;
  if constexpr (cmp) {
    compare_k<OP, T><<<blocks_for(p->n), kThreads, 0, s>>>(*p, (const T *)x, (const T *)y,
                                                            (uint8_t *)z);
  } else {
    binary_k<OP, T><<<blocks_for(p->n), kThreads, 0, s>>>(*p, (const T *)x, (const T *)y,
                                                           (T *)z, (T)alpha);
  }
  return launched();
}

template <typename T>
int binary_typed(CuStream s, int op, const CuBcast *p, const void *x, const void *y, void *z,
                 double a) {
  switch (op) {
#define CASE(OP) \
  case OP: return launch_binary<OP, T>(s, p, x, y, z, a);
    CASE(CU_ADD) CASE(CU_SUB) CASE(CU_MUL) CASE(CU_MAX) CASE(CU_MIN) CASE(CU_POW)
    CASE(CU_SQDIFF) CASE(CU_EQ) CASE(CU_NE) CASE(CU_LT) CASE(CU_LE) CASE(CU_GT) CASE(CU_GE)
    CASE(CU_RELU_GRAD) CASE(CU_RELU6_GRAD)
#undef CASE
  default: break;
  }
  if constexpr (std::is_floating_point<T>::value) {
    switch (op) {
#define CASE(OP) \
  case OP: return launch_binary<OP, T>(s, p, x, y, z, a);
      CASE(CU_DIV) CASE(CU_SIGMOID_GRAD) CASE(CU_TANH_GRAD) CASE(CU_SQRT_GRAD)
      CASE(CU_RSQRT_GRAD) CASE(CU_SOFTPLUS_GRAD) CASE(CU_LEAKY_RELU_GRAD)
#undef CASE
    default: break;
    }
  }
  return CU_UNSUPPORTED;
}

// ------------------------------------------------------------------------------------
// Unary ops.

template <int OP, typename T>
__device__ __forceinline__ T un_value(T x, T a) {
  constexpr bool flt = std::is_floating_point<T>::value;
  using U = typename Wrap<T>::type;
  if constexpr (OP == CU_NEG) return (T)(U(0) - (U)x);
  if constexpr (OP == CU_ABS) return x < T(0) ? (T)(U(0) - (U)x) : x;
  if constexpr (OP == CU_SQUARE) return (T)((U)x * (U)x);
  if constexpr (OP == CU_RELU) return (x > T(0)) | (x != x) ? x : T(0); // NaN kept
  if constexpr (OP == CU_RELU6) return x != x ? x : x < T(0) ? T(0) : x > T(6) ? T(6) : x;
  if constexpr (OP == CU_SIGN) return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;
  if constexpr (OP == CU_NOT) return x == T(0);
  if constexpr (flt) {
    if constexpr (OP == CU_SQRT) return sqrt(x);
    if constexpr (OP == CU_RSQRT) return T(1) / sqrt(x);
    if constexpr (OP == CU_EXP) return exp(x);
    if constexpr (OP == CU_LOG) return log(x);
    if constexpr (OP == CU_SIGMOID) return sigmoid_of(x);
    if constexpr (OP == CU_TANH) return tanh(x);
    if constexpr (OP == CU_SOFTPLUS) return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
    if constexpr (OP == CU_FLOOR) return floor(x);
    if constexpr (OP == CU_SIN) return sin(x);
    if constexpr (OP == CU_COS) return cos(x);
    if constexpr (OP == CU_LEAKY_RELU) return x > T(0) ? x : a * x;
    if constexpr (OP == CU_ELU) return x > T(0) ? x : a * expm1(x);
    if constexpr (OP == CU_RECIPROCAL) return T(1) / x;
  }
  return T(0);
}

template <int OP, typename T>
__global__ void unary_k(int64_t n, const T *x, T *y, T a) {
  GRID_LOOP(i, n) y[i] = un_value<OP, T>(x[i], a);
}

template <typename T>
int unary_typed(CuStream s, int op, int64_t n, const void *x, void *y, double a) {
  unsigned b = blocks_for(n);
#define CASE(OP)                                                                             \
  case OP:                                                                                   \
    unary_k<OP, T><<<b, kThreads, 0, s>>>(n, (const T *)x, (T *)y, (T)a);                    \
    return launched();
  switch (op) {
    CASE(CU_NEG) CASE(CU_ABS) CASE(CU_SQUARE) CASE(CU_RELU) CASE(CU_RELU6) CASE(CU_SIGN)
  default: break;
  }
  if constexpr (std::is_floating_point<T>::value) {
    switch (op) {
      CASE(CU_SQRT) CASE(CU_RSQRT) CASE(CU_EXP) CASE(CU_LOG) CASE(CU_SIGMOID) CASE(CU_TANH)
      CASE(CU_SOFTPLUS) CASE(CU_FLOOR) CASE(CU_SIN) CASE(CU_COS) CASE(CU_LEAKY_RELU)
      CASE(CU_ELU) CASE(CU_RECIPROCAL)
    default: break;
    }
  }
#undef CASE
  return CU_UNSUPPORTED;
}

__global__ void not_k(int64_t n, const uint8_t *x, uint8_t *y) {
  GRID_LOOP(i, n) y[i] = x[i] == 0;
}

// ------------------------------------------------------------------------------------
// Casts: one kernel switching on the dtypes per element (casts are rarely hot).

__device__ __forceinline__ float bf16_to_f32(uint16_t b) {
  return __uint_as_float((uint32_t)b << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); // quiet NaN
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 // nearest even
}

struct Value {
  bool is_int;
  int64_t i;
  double f;
};

__device__ Value load(int dt, const void *p, int64_t k) {
  switch (dt) {
  case FLOE_F32: return {false, 0, (double)((const float *)p)[k]};
  case FLOE_F64: return {false, 0, ((const double *)p)[k]};
  case FLOE_F16: return {false, 0, (double)__half2float(((const __half *)p)[k])};
  case FLOE_BF16: return {false, 0, (double)bf16_to_f32(((const uint16_t *)p)[k])};
  case FLOE_I8: return {true, ((const int8_t *)p)[k], 0};
  case FLOE_U8: return {true, ((const uint8_t *)p)[k], 0};
  case FLOE_I32: return {true, ((const int32_t *)p)[k], 0};
  case FLOE_I64: return {true, ((const int64_t *)p)[k], 0};
  default: return {true, ((const uint8_t *)p)[k] != 0, 0}; // bool
  }
}

// Float to integer: truncate toward zero, saturate at [lo, hi], NaN -> 0 (the CPU plugin's
// rule: f >= (double)hi + 1 saturates, so INT64_MAX, which rounds to 2^63, is exact).
__device__ int64_t to_int(const Value &v, int64_t lo, int64_t hi) {
  if (v.is_int) return v.i;
  double f = v.f;
  if (f != f) return 0;
  if (f <= (double)lo) return lo;
  if (f >= (double)hi + 1.0) return hi;
  return (int64_t)f;
}

__device__ void store(int dt, void *p, int64_t k, const Value &v) {
  double f = v.is_int ? (double)v.i : v.f;
  switch (dt) {
  case FLOE_F32: ((float *)p)[k] = v.is_int ? (float)v.i : (float)v.f; break;
  case FLOE_F64: ((double *)p)[k] = f; break;
  case FLOE_F16: ((__half *)p)[k] = __float2half_rn(v.is_int ? (float)v.i : (float)v.f); break;
  case FLOE_BF16:
    ((uint16_t *)p)[k] = f32_to_bf16(v.is_int ? (float)v.i : (float)v.f);
    break;
  case FLOE_I8: ((int8_t *)p)[k] = (int8_t)to_int(v, INT8_MIN, INT8_MAX); break;
  case FLOE_U8: ((uint8_t *)p)[k] = (uint8_t)to_int(v, 0, UINT8_MAX); break;
  case FLOE_I32: ((int32_t *)p)[k] = (int32_t)to_int(v, INT32_MIN, INT32_MAX); break;
  case FLOE_I64: ((int64_t *)p)[k] = to_int(v, INT64_MIN, INT64_MAX); break;
  default: ((uint8_t *)p)[k] = v.is_int ? v.i != 0 : v.f != 0.0; break; // bool
  }
}

__global__ void cast_k(int sdt, int ddt, int64_t n, const void *x, void *y) {
  GRID_LOOP(i, n) store(ddt, y, i, load(sdt, x, i));
}

// ------------------------------------------------------------------------------------
// Moves: Select, fill, broadcast copy, transpose.

template <typename T>
__global__ void select_k(CuBcast p, const uint8_t *c, const T *t, const T *e, T *z) {
  GRID_LOOP(i, p.n) {
    int64_t off[3];
    plan_offsets<3>(p, i, off);
    z[i] = c[off[0]] ? t[off[1]] : e[off[2]];
  }
}

template <typename T>
__global__ void fill_k(T *dst, int64_t n, T v) {
  GRID_LOOP(i, n) dst[i] = v;
}

template <typename T>
__global__ void bcopy_k(CuBcast p, const T *x, T *out) {
  GRID_LOOP(i, p.n) {
    int64_t off[1];
    plan_offsets<1>(p, i, off);
    out[i] = x[off[0]];
  }
}

__global__ void bcopy_scale_k(CuBcast p, const float *x, float *out, float scale) {
  GRID_LOOP(i, p.n) {
    int64_t off[1];
    plan_offsets<1>(p, i, off);
    out[i] = x[off[0]] * scale;
  }
}

// ExpandReduced's mean: out[i] = x[offset] / count in the CPU plugin's arithmetic (floats
// in their own type, halves through f32, integers truncating toward zero in int64).
template <typename T, typename Div>
__global__ void bdiv_k(CuBcast p, const T *x, T *out, Div div) {
  GRID_LOOP(i, p.n) {
    int64_t off[1];
    plan_offsets<1>(p, i, off);
    out[i] = div(x[off[0]]);
  }
}

template <typename T>
struct DivFloat {
  T c;
  __device__ T operator()(T v) const { return v / c; }
};

template <typename T>
struct DivInt {
  int64_t c;
  __device__ T operator()(T v) const { return (T)((int64_t)v / c); }
};

struct DivF16 {
  float c;
  __device__ __half operator()(__half v) const { return __float2half_rn(__half2float(v) / c); }
};

struct DivBf16 { // bf16 travels as its bits (uint16_t)
  float c;
  __device__ uint16_t operator()(uint16_t v) const { return f32_to_bf16(bf16_to_f32(v) / c); }
};

struct Perm {
  int rank;
  int64_t out_dims[CU_MAX_DIMS];
  int64_t in_strides[CU_MAX_DIMS]; // element stride in x of output dim i
  int64_t n;
};

template <typename T>
__global__ void transpose_k(Perm p, const T *x, T *out) {
  GRID_LOOP(i, p.n) {
    int64_t rem = i, off = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
      off += (rem % p.out_dims[d]) * p.in_strides[d];
      rem /= p.out_dims[d];
    }
    out[i] = x[off];
  }
}

struct Ptrs {
  const void *p[8];
};

template <typename T>
__global__ void add_n_k(int64_t n, Ptrs in, int k, T *out) {
  GRID_LOOP(i, n) {
    T acc = ((const T *)in.p[0])[i];
    for (int j = 1; j < k; j++) acc = bin_value<CU_ADD, T>(acc, ((const T *)in.p[j])[i], T(0));
    out[i] = acc;
  }
}

__global__ void to_bf16_k(int64_t n, const float *x, uint16_t *y) {
  GRID_LOOP(i, n) y[i] = f32_to_bf16(x[i]);
}

// ------------------------------------------------------------------------------------
// Optimisers (the CPU plugin's formulas and order of operations).

__global__ void sgd_k(int64_t n, float *var, const float *alpha, const float *delta) {
  float a = *alpha;
  GRID_LOOP(i, n) var[i] -= a * delta[i];
}

__global__ void momentum_k(int64_t n, float *var, float *acc, const float *lr, const float *g,
                           const float *momentum, int nesterov) {
  float l = *lr, mom = *momentum;
  GRID_LOOP(i, n) {
    float a = acc[i] * mom + g[i];
    acc[i] = a;
    var[i] -= nesterov ? g[i] * l + a * mom * l : l * a;
  }
}

__global__ void adam_k(int64_t n, float *var, float *m, float *v, const float *b1p,
                       const float *b2p, const float *lr, const float *b1, const float *b2,
                       const float *eps, const float *g, int nesterov) {
  float beta1 = *b1, beta2 = *b2, e = *eps;
  float alpha = *lr * sqrtf(1.0f - *b2p) / (1.0f - *b1p);
  float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
  GRID_LOOP(i, n) {
    float gi = g[i];
    float mi = m[i] + (gi - m[i]) * c1;
    float vi = v[i] + (gi * gi - v[i]) * c2;
    m[i] = mi;
    v[i] = vi;
    float num = nesterov ? (gi * c1 + beta1 * mi) : mi;
    var[i] -= (num * alpha) / (sqrtf(vi) + e);
  }
}

template <typename T>
__global__ void assign_add_k(int64_t n, T *var, const T *value, int sign) {
  GRID_LOOP(i, n) var[i] = sign > 0 ? bin_value<CU_ADD, T>(var[i], value[i], T(0))
                                    : bin_value<CU_SUB, T>(var[i], value[i], T(0));
}

} // namespace

// ------------------------------------------------------------------------------------
// Launchers.

extern "C" int cu_binary(CuStream s, CuBinaryOp op, int dt, const CuBcast *p, const void *x,
                         const void *y, void *z, double alpha) {
  if (p->n == 0) return 0;
  switch (dt) {
  case FLOE_F32: return binary_typed<float>(s, op, p, x, y, z, alpha);
  case FLOE_F64: return binary_typed<double>(s, op, p, x, y, z, alpha);
  case FLOE_I32: return binary_typed<int32_t>(s, op, p, x, y, z, alpha);
  case FLOE_I64: return binary_typed<int64_t>(s, op, p, x, y, z, alpha);
  case FLOE_BOOL:
  case FLOE_U8:
    switch (op) {
    case CU_EQ: return launch_binary<CU_EQ, uint8_t>(s, p, x, y, z, 0);
    case CU_NE: return launch_binary<CU_NE, uint8_t>(s, p, x, y, z, 0);
    case CU_AND: return launch_binary<CU_AND, uint8_t>(s, p, x, y, z, 0);
    case CU_OR: return launch_binary<CU_OR, uint8_t>(s, p, x, y, z, 0);
    default: return CU_UNSUPPORTED;
    }
  default: return CU_UNSUPPORTED;
  }
}

extern "C" int cu_unary(CuStream s, CuUnaryOp op, int dt, int64_t n, const void *x, void *y,
                        double alpha) {
  if (n == 0) return 0;
  switch (dt) {
  case FLOE_F32: return unary_typed<float>(s, op, n, x, y, alpha);
  case FLOE_F64: return unary_typed<double>(s, op, n, x, y, alpha);
  case FLOE_I32: return unary_typed<int32_t>(s, op, n, x, y, alpha);
  case FLOE_I64: return unary_typed<int64_t>(s, op, n, x, y, alpha);
  case FLOE_BOOL:
    if (op != CU_NOT) return CU_UNSUPPORTED;
    not_k<<<blocks_for(n), kThreads, 0, s>>>(n, (const uint8_t *)x, (uint8_t *)y);
    return launched();
  default: return CU_UNSUPPORTED;
  }
}

extern "C" int cu_cast(CuStream s, int src_dt, int dst_dt, int64_t n, const void *x, void *y) {
  if (n == 0) return 0;
  cast_k<<<blocks_for(n), kThreads, 0, s>>>(src_dt, dst_dt, n, x, y);
  return launched();
}

extern "C" int cu_select(CuStream s, const CuBcast *p, const uint8_t *c, const void *t,
                         const void *e, void *z, int elem_size) {
  if (p->n == 0) return 0;
  unsigned b = blocks_for(p->n);
  switch (elem_size) {
  case 1: select_k<uint8_t><<<b, kThreads, 0, s>>>(*p, c, (const uint8_t *)t, (const uint8_t *)e, (uint8_t *)z); break;
  case 2: select_k<uint16_t><<<b, kThreads, 0, s>>>(*p, c, (const uint16_t *)t, (const uint16_t *)e, (uint16_t *)z); break;
  case 4: select_k<uint32_t><<<b, kThreads, 0, s>>>(*p, c, (const uint32_t *)t, (const uint32_t *)e, (uint32_t *)z); break;
  case 8: select_k<uint64_t><<<b, kThreads, 0, s>>>(*p, c, (const uint64_t *)t, (const uint64_t *)e, (uint64_t *)z); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_fill(CuStream s, void *dst, int64_t n, int elem_size, uint64_t pattern) {
  if (n == 0) return 0;
  unsigned b = blocks_for(n);
  switch (elem_size) {
  case 1: fill_k<uint8_t><<<b, kThreads, 0, s>>>((uint8_t *)dst, n, (uint8_t)pattern); break;
  case 2: fill_k<uint16_t><<<b, kThreads, 0, s>>>((uint16_t *)dst, n, (uint16_t)pattern); break;
  case 4: fill_k<uint32_t><<<b, kThreads, 0, s>>>((uint32_t *)dst, n, (uint32_t)pattern); break;
  case 8: fill_k<uint64_t><<<b, kThreads, 0, s>>>((uint64_t *)dst, n, pattern); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_broadcast_copy(CuStream s, const CuBcast *p, const void *x, void *out,
                                 int elem_size, float scale) {
  if (p->n == 0) return 0;
  unsigned b = blocks_for(p->n);
  if (scale != 1.0f) {
    if (elem_size != 4) return CU_UNSUPPORTED;
    bcopy_scale_k<<<b, kThreads, 0, s>>>(*p, (const float *)x, (float *)out, scale);
    return launched();
  }
  switch (elem_size) {
  case 1: bcopy_k<uint8_t><<<b, kThreads, 0, s>>>(*p, (const uint8_t *)x, (uint8_t *)out); break;
  case 2: bcopy_k<uint16_t><<<b, kThreads, 0, s>>>(*p, (const uint16_t *)x, (uint16_t *)out); break;
  case 4: bcopy_k<uint32_t><<<b, kThreads, 0, s>>>(*p, (const uint32_t *)x, (uint32_t *)out); break;
  case 8: bcopy_k<uint64_t><<<b, kThreads, 0, s>>>(*p, (const uint64_t *)x, (uint64_t *)out); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_broadcast_div(CuStream s, int dt, const CuBcast *p, const void *x, void *out,
                                int64_t count) {
  if (p->n == 0) return 0;
  if (count < 1) return CU_UNSUPPORTED;
  unsigned b = blocks_for(p->n);
  float cf = (float)count;
  switch (dt) {
  case FLOE_F32:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const float *)x, (float *)out, DivFloat<float>{cf});
    break;
  case FLOE_F64:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const double *)x, (double *)out,
                                  DivFloat<double>{(double)count});
    break;
  case FLOE_F16:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const __half *)x, (__half *)out, DivF16{cf});
    break;
  case FLOE_BF16:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const uint16_t *)x, (uint16_t *)out, DivBf16{cf});
    break;
  case FLOE_I8:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const int8_t *)x, (int8_t *)out, DivInt<int8_t>{count});
    break;
  case FLOE_U8:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const uint8_t *)x, (uint8_t *)out,
                                  DivInt<uint8_t>{count});
    break;
  case FLOE_I32:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const int32_t *)x, (int32_t *)out,
                                  DivInt<int32_t>{count});
    break;
  case FLOE_I64:
    bdiv_k<<<b, kThreads, 0, s>>>(*p, (const int64_t *)x, (int64_t *)out,
                                  DivInt<int64_t>{count});
    break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_transpose(CuStream s, int rank, const int64_t *dims, const int *perm,
                            const void *x, void *out, int elem_size) {
  if (rank < 1 || rank > CU_MAX_DIMS) return CU_UNSUPPORTED;
  Perm p;
  p.rank = rank;
  int64_t stride[CU_MAX_DIMS];
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = acc;
    acc *= dims[d];
  }
  p.n = acc;
  for (int i = 0; i < rank; i++) {
    p.out_dims[i] = dims[perm[i]];
    p.in_strides[i] = stride[perm[i]];
  }
  if (p.n == 0) return 0;
  unsigned b = blocks_for(p.n);
  switch (elem_size) {
  case 1: transpose_k<uint8_t><<<b, kThreads, 0, s>>>(p, (const uint8_t *)x, (uint8_t *)out); break;
  case 2: transpose_k<uint16_t><<<b, kThreads, 0, s>>>(p, (const uint16_t *)x, (uint16_t *)out); break;
  case 4: transpose_k<uint32_t><<<b, kThreads, 0, s>>>(p, (const uint32_t *)x, (uint32_t *)out); break;
  case 8: transpose_k<uint64_t><<<b, kThreads, 0, s>>>(p, (const uint64_t *)x, (uint64_t *)out); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_add_n(CuStream s, int dt, int64_t n, const void *const *in, int k, void *out) {
  if (k < 1 || k > 8) return CU_UNSUPPORTED;
  if (n == 0) return 0;
  Ptrs p;
  for (int j = 0; j < k; j++) p.p[j] = in[j];
  unsigned b = blocks_for(n);
  switch (dt) {
  case FLOE_F32: add_n_k<float><<<b, kThreads, 0, s>>>(n, p, k, (float *)out); break;
  case FLOE_F64: add_n_k<double><<<b, kThreads, 0, s>>>(n, p, k, (double *)out); break;
  case FLOE_I32: add_n_k<int32_t><<<b, kThreads, 0, s>>>(n, p, k, (int32_t *)out); break;
  case FLOE_I64: add_n_k<int64_t><<<b, kThreads, 0, s>>>(n, p, k, (int64_t *)out); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}

extern "C" int cu_f32_to_bf16(CuStream s, int64_t n, const float *x, uint16_t *y) {
  if (n == 0) return 0;
  to_bf16_k<<<blocks_for(n), kThreads, 0, s>>>(n, x, y);
  return launched();
}

extern "C" int cu_apply_sgd(CuStream s, int64_t n, float *var, const float *alpha,
                            const float *delta) {
  if (n == 0) return 0;
  sgd_k<<<blocks_for(n), kThreads, 0, s>>>(n, var, alpha, delta);
  return launched();
}

extern "C" int cu_apply_momentum(CuStream s, int64_t n, float *var, float *accum,
                                 const float *lr, const float *grad, const float *momentum,
                                 int nesterov) {
  if (n == 0) return 0;
  momentum_k<<<blocks_for(n), kThreads, 0, s>>>(n, var, accum, lr, grad, momentum, nesterov);
  return launched();
}

extern "C" int cu_apply_adam(CuStream s, int64_t n, float *var, float *m, float *v,
                             const float *b1p, const float *b2p, const float *lr,
                             const float *b1, const float *b2, const float *eps,
                             const float *grad, int nesterov) {
  if (n == 0) return 0;
  adam_k<<<blocks_for(n), kThreads, 0, s>>>(n, var, m, v, b1p, b2p, lr, b1, b2, eps, grad,
                                            nesterov);
  return launched();
}

extern "C" int cu_assign_add(CuStream s, int dt, int64_t n, void *var, const void *value,
                             int sign) {
  if (n == 0) return 0;
  unsigned b = blocks_for(n);
  switch (dt) {
  case FLOE_F32: assign_add_k<float><<<b, kThreads, 0, s>>>(n, (float *)var, (const float *)value, sign); break;
  case FLOE_F64: assign_add_k<double><<<b, kThreads, 0, s>>>(n, (double *)var, (const double *)value, sign); break;
  case FLOE_I32: assign_add_k<int32_t><<<b, kThreads, 0, s>>>(n, (int32_t *)var, (const int32_t *)value, sign); break;
  case FLOE_I64: assign_add_k<int64_t><<<b, kThreads, 0, s>>>(n, (int64_t *)var, (const int64_t *)value, sign); break;
  default: return CU_UNSUPPORTED;
  }
  return launched();
}
