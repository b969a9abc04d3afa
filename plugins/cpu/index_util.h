/* SPDX-License-Identifier: Apache-2.0 */
/* index_util.h - helpers shared by the indexing kernels (index.c, index_move.c): reading
 * index tensors, element values of any dtype as numbers, and shape strings for errors. */
#ifndef FLOE_CPU_INDEX_UTIL_H
#define FLOE_CPU_INDEX_UTIL_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

/* "[2,3,4]" by value, so several can appear in one error message. */
typedef struct IxShapeStr {
  char s[CPU_SHAPE_STR_MAX];
} IxShapeStr;

static inline IxShapeStr ix_shape_str(const FloeTensor *t) {
  IxShapeStr r;
  cpu_shape_str(r.s, sizeof r.s, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
  return r;
}

static inline int64_t ix_product(int n, const int64_t *dims) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= dims[i];
  return p;
}

/* Element i of an i32 or i64 tensor's data. */
static inline int64_t ix_index_at(const void *data, FloeDType dt, int64_t i) {
  return dt == FLOE_I32 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
}

/* The dtypes cpu_float_load and cpu_float_store read and write. */
static inline bool ix_is_float(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

/* Element i of an integer or bool tensor as an int64. */
static inline int64_t ix_load_i(FloeDType dt, const void *data, int64_t i) {
  switch (dt) {
  case FLOE_I8: return ((const int8_t *)data)[i];
  case FLOE_U8: return ((const uint8_t *)data)[i];
  case FLOE_I32: return ((const int32_t *)data)[i];
  case FLOE_I64: return ((const int64_t *)data)[i];
  default: return ((const uint8_t *)data)[i] != 0; /* bool */
  }
}

/* Integers wrap to the dtype's width (two's complement), as C's unsigned conversions do. */
static inline void ix_store_i(FloeDType dt, void *data, int64_t i, int64_t v) {
  switch (dt) {
  case FLOE_I8: ((int8_t *)data)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
  case FLOE_U8: ((uint8_t *)data)[i] = (uint8_t)(uint64_t)v; break;
  case FLOE_I32: ((int32_t *)data)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case FLOE_I64: ((int64_t *)data)[i] = v; break;
  default: ((uint8_t *)data)[i] = v != 0; break; /* bool */
  }
}

/* Reads input `in` (an i32/i64 scalar or one-element vector) into *out. */
static inline floe_code ix_read_scalar(FloeKernelContext *ctx, int in, const char *what,
                                       int64_t *out) {
  *out = 0;
  const FloeTensor *t = cpu_host->ctx_input(ctx, in);
  FloeDType dt = cpu_host->tensor_dtype(t);
  if ((dt != FLOE_I32 && dt != FLOE_I64) || cpu_host->tensor_num_elements(t) != 1 ||
      cpu_host->tensor_rank(t) > 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be an i32/i64 scalar, got %s %s", what,
                                   cpu_host->dtype_name(dt), ix_shape_str(t).s);
  *out = ix_index_at(cpu_host->tensor_data(t), dt, 0);
  return FLOE_OK;
}

/* Reads input `in`, a 1-D i32/i64 tensor of at most max values, into out (*n values). */
static inline floe_code ix_read_vector(FloeKernelContext *ctx, int in, const char *what,
                                       int64_t *out, int max, int *n) {
  *n = 0;
  const FloeTensor *t = cpu_host->ctx_input(ctx, in);
  FloeDType dt = cpu_host->tensor_dtype(t);
  int64_t count = cpu_host->tensor_num_elements(t);
  if ((dt != FLOE_I32 && dt != FLOE_I64) || cpu_host->tensor_rank(t) != 1)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s must be a 1-D i32/i64 tensor, got %s %s", what,
                                   cpu_host->dtype_name(dt), ix_shape_str(t).s);
  if (count > max)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s has %" PRId64 " values; at most %d are supported", what,
                                   count, max);
  const void *d = cpu_host->tensor_data(t);
  for (int64_t i = 0; i < count; i++) out[i] = ix_index_at(d, dt, i);
  *n = (int)count;
  return FLOE_OK;
}

/* Axis in [-rank, rank) made non-negative, or an error naming the input's shape. */
static inline floe_code ix_axis(FloeKernelContext *ctx, int64_t axis, const FloeTensor *t,
                                const char *what, int *out) {
  int rank = cpu_host->tensor_rank(t);
  *out = 0;
  if (axis < -rank || axis >= rank)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "%s %" PRId64 " is out of range for shape %s (expected "
                                   "[%d, %d))",
                                   what, axis, ix_shape_str(t).s, -rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return FLOE_OK;
}

static inline void ix_state_free(void *state) { cpu_host->free(state); }

#endif
