// SPDX-License-Identifier: Apache-2.0
// reduce.cc - the Gloo backend's element-wise reductions (see reduce.h).
#include "reduce.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace floe_gloo {

namespace {

// Integer arithmetic wraps (two's complement) instead of being undefined on overflow.
template <typename T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <typename T>
struct WideOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Wide = typename WideOf<T>::type;

struct Sum {
  template <typename T> static T apply(T a, T b) { return (T)(Wide<T>)((Wide<T>)a + (Wide<T>)b); }
};
struct Prod {
  template <typename T> static T apply(T a, T b) { return (T)(Wide<T>)((Wide<T>)a * (Wide<T>)b); }
};
struct Max {
  template <typename T> static T apply(T a, T b) { return b > a ? b : a; }
};
struct Min {
  template <typename T> static T apply(T a, T b) { return b < a ? b : a; }
};

template <typename T, typename Op>
void loop(void *out, const void *a, const void *b, size_t n) {
  T *o = static_cast<T *>(out);
  const T *x = static_cast<const T *>(a);
  const T *y = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) o[i] = Op::template apply<T>(x[i], y[i]);
}

// 16-bit floats: each element through float.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), typename Op>
void loop16(void *out, const void *a, const void *b, size_t n) {
  uint16_t *o = static_cast<uint16_t *>(out);
  const uint16_t *x = static_cast<const uint16_t *>(a);
  const uint16_t *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++) o[i] = FromF(Op::template apply<float>(ToF(x[i]), ToF(y[i])));
}

template <typename T>
ReduceFn pick(int32_t op) {
  switch (op) {
    case FLOE_REDUCE_SUM:
    case FLOE_REDUCE_MEAN: return loop<T, Sum>;
    case FLOE_REDUCE_PROD: return loop<T, Prod>;
    case FLOE_REDUCE_MAX: return loop<T, Max>;
    case FLOE_REDUCE_MIN: return loop<T, Min>;
  }
  return nullptr;
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
ReduceFn pick16(int32_t op) {
  switch (op) {
    case FLOE_REDUCE_SUM:
    case FLOE_REDUCE_MEAN: return loop16<ToF, FromF, Sum>;
    case FLOE_REDUCE_PROD: return loop16<ToF, FromF, Prod>;
    case FLOE_REDUCE_MAX: return loop16<ToF, FromF, Max>;
    case FLOE_REDUCE_MIN: return loop16<ToF, FromF, Min>;
  }
  return nullptr;
}

template <typename T>
void divide(void *buf, size_t n, int size) {
  T *p = static_cast<T *>(buf);
  for (size_t i = 0; i < n; i++) p[i] = (T)(p[i] / (T)size);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide16(void *buf, size_t n, int size) {
  uint16_t *p = static_cast<uint16_t *>(buf);
  for (size_t i = 0; i < n; i++) p[i] = FromF(ToF(p[i]) / (float)size);
}

}  // namespace

uint32_t supported_dtypes() {
  return FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_F16) |
         FLOE_DTYPE_BIT(FLOE_BF16) | FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64) |
         FLOE_DTYPE_BIT(FLOE_U8) | FLOE_DTYPE_BIT(FLOE_I8);
}

size_t dtype_size(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: case FLOE_I32: return 4;
    case FLOE_F64: case FLOE_I64: return 8;
    case FLOE_F16: case FLOE_BF16: return 2;
    case FLOE_U8: case FLOE_I8: return 1;
    default: return 0;
  }
}

const char *dtype_name(FloeDType dt) {
  switch (dt) {
    case FLOE_F32: return "f32";
    case FLOE_F64: return "f64";
    case FLOE_F16: return "f16";
    case FLOE_BF16: return "bf16";
    case FLOE_I8: return "i8";
    case FLOE_U8: return "u8";
    case FLOE_I32: return "i32";
    case FLOE_I64: return "i64";
    case FLOE_BOOL: return "bool";
    case FLOE_RESOURCE: return "resource";
    default: return "an unknown dtype";
  }
}

const char *reduce_op_name(int32_t op) {
  switch (op) {
    case FLOE_REDUCE_SUM: return "SUM";
    case FLOE_REDUCE_MEAN: return "MEAN";
    case FLOE_REDUCE_MAX: return "MAX";
    case FLOE_REDUCE_MIN: return "MIN";
    case FLOE_REDUCE_PROD: return "PROD";
  }
  return nullptr;
}

ReduceFn reduce_fn(FloeDType dt, int32_t op) {
  switch (dt) {
    case FLOE_F32: return pick<float>(op);
    case FLOE_F64: return pick<double>(op);
    case FLOE_F16: return pick16<half_to_float, float_to_half>(op);
    case FLOE_BF16: return pick16<bf16_to_float, float_to_bf16>(op);
    case FLOE_I8: return pick<int8_t>(op);
    case FLOE_U8: return pick<uint8_t>(op);
    case FLOE_I32: return pick<int32_t>(op);
    case FLOE_I64: return pick<int64_t>(op);
    default: return nullptr;
  }
}

void divide_by(void *buf, size_t n, FloeDType dt, int size) {
  switch (dt) {
    case FLOE_F32: divide<float>(buf, n, size); break;
    case FLOE_F64: divide<double>(buf, n, size); break;
    case FLOE_F16: divide16<half_to_float, float_to_half>(buf, n, size); break;
    case FLOE_BF16: divide16<bf16_to_float, float_to_bf16>(buf, n, size); break;
    case FLOE_I8: divide<int8_t>(buf, n, size); break;
    case FLOE_U8: divide<uint8_t>(buf, n, size); break;
    case FLOE_I32: divide<int32_t>(buf, n, size); break;
    case FLOE_I64: divide<int64_t>(buf, n, size); break;
    default: break;
  }
}

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) {
    float f = std::ldexp((float)m, -24); /* zero or subnormal: exact */
    return sign ? -f : f;
  }
  if (e == 31)
    bits = sign | 0x7f800000u | (m << 13);
  else
    bits = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf, or NaN kept quiet */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
    float af;
    std::memcpy(&af, &ax, sizeof af);
    return (uint16_t)(sign | (uint32_t)std::nearbyint(af * 16777216.0f));
  }
  uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffffu) >> 13);
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent */
  return (uint16_t)(sign | h);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace floe_gloo
