/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.c - element types: sizes, names and the two 16-bit float formats. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base.h"

size_t floe_dtype_size(FloeDType dt) {
  switch (dt) {
#define FLOE__DT_SIZE(name, value, str, size) \
  case FLOE_##name:                           \
    return size;
    FLOE_DTYPE_MAP(FLOE__DT_SIZE)
#undef FLOE__DT_SIZE
    default:
      return 0;
  }
}

const char *floe_dtype_name(FloeDType dt) {
  switch (dt) {
#define FLOE__DT_NAME(name, value, str, size) \
  case FLOE_##name:                           \
    return str;
    FLOE_DTYPE_MAP(FLOE__DT_NAME)
#undef FLOE__DT_NAME
    default:
      return "invalid";
  }
}

FloeDType floe_dtype_from_name(const char *name) {
  static const struct {
    const char *name;
    FloeDType dt;
  } aliases[] = {
      {"float32", FLOE_F32}, {"float", FLOE_F32},   {"float64", FLOE_F64}, {"double", FLOE_F64},
      {"float16", FLOE_F16}, {"half", FLOE_F16},    {"bfloat16", FLOE_BF16}, {"int8", FLOE_I8},
      {"uint8", FLOE_U8},    {"int32", FLOE_I32},   {"int64", FLOE_I64},   {"bool", FLOE_BOOL},
  };
  if (!name) return FLOE_DTYPE_INVALID;
  for (int v = 1; v < FLOE_DTYPE_LIMIT; v++)
    if (floe_dtype_size((FloeDType)v) && strcasecmp(name, floe_dtype_name((FloeDType)v)) == 0)
      return (FloeDType)v;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(aliases); i++)
    if (strcasecmp(name, aliases[i].name) == 0) return aliases[i].dt;
  return FLOE_DTYPE_INVALID;
}

char *floe__dtype_mask_str(uint32_t mask, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, len, "{");
  bool first = true;
  for (int v = 1; v < FLOE_DTYPE_LIMIT && used < len; v++) {
    if (!(mask & FLOE_DTYPE_BIT(v)) || !floe_dtype_size((FloeDType)v)) continue;
    used += (size_t)snprintf(buf + used, len - used, "%s%s", first ? "" : ",",
                             floe_dtype_name((FloeDType)v));
    first = false;
  }
  if (used < len) snprintf(buf + used, len - used, "}");
  return buf;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t floe_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float floe_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t floe_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);     /* NaN */
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);    /* overflow -> inf */
  if (absu < 0x38800000u) {                                     /* subnormal or zero */
    /* Scale into the subnormal range and let the FPU round to nearest even. */
    float a = bits_f32(absu) * 16777216.0f; /* 2^24: one f16 subnormal ulp becomes 1.0 */
    uint32_t m = (uint32_t)nearbyintf(a);
    return (uint16_t)(sign | m);
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into exp correctly */
  return (uint16_t)(sign | h);
}

float floe_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
