/* SPDX-License-Identifier: Apache-2.0 */
/* floe_types.h - types shared by applications (floe.h) and plugins (floe_plugin.h).
 *
 * Everything here is part of the stable ABI: enums are append-only and carry explicit
 * values; nothing is ever renumbered.
 */
#ifndef FLOE_TYPES_H
#define FLOE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Public symbols of libfloe. Plugins never link libfloe, so they never need these. */
#if defined(FLOE_BUILDING_CORE) && defined(__GNUC__)
#define FLOE_API __attribute__((visibility("default")))
#else
#define FLOE_API
#endif

/* Status codes. One X-macro generates the enum and the default messages
 * (floe_code_name / floe_code_message in floe.h). Append only. */
#define FLOE_CODE_MAP(X)                                                        \
  X(OK, 0, "ok")                                                                \
  X(CANCELLED, 1, "cancelled")                                                  \
  X(UNKNOWN, 2, "unknown error")                                                \
  X(INVALID_ARGUMENT, 3, "invalid argument")                                    \
  X(DEADLINE_EXCEEDED, 4, "deadline exceeded")                                  \
  X(NOT_FOUND, 5, "not found")                                                  \
  X(ALREADY_EXISTS, 6, "already exists")                                        \
  X(PERMISSION_DENIED, 7, "permission denied")                                  \
  X(RESOURCE_EXHAUSTED, 8, "resource exhausted")                                \
  X(FAILED_PRECONDITION, 9, "failed precondition")                              \
  X(ABORTED, 10, "aborted")                                                     \
  X(OUT_OF_RANGE, 11, "out of range")                                           \
  X(UNIMPLEMENTED, 12, "unimplemented")                                         \
  X(INTERNAL, 13, "internal error")                                             \
  X(UNAVAILABLE, 14, "unavailable")                                             \
  X(DATA_LOSS, 15, "data loss")                                                 \
  X(NO_MEMORY, 16, "out of memory")                                             \
  X(ABI_MISMATCH, 17, "plugin ABI mismatch")

typedef enum floe_code {
#define FLOE__CODE_ENUM(name, value, msg) FLOE_##name = value,
  FLOE_CODE_MAP(FLOE__CODE_ENUM)
#undef FLOE__CODE_ENUM
  FLOE__CODE_FORCE_32BIT = 0x7fffffff
} floe_code;

/* Element types. Append only; values are written into graph files. RESOURCE (since 1.2)
 * is a scalar handle to a variable of the core's resource manager; it is in no type set
 * ("all" means the data types above it) and a kernel never sees one (see floe_plugin.h). */
#define FLOE_DTYPE_MAP(X)            \
  X(F32, 1, "f32", 4)                \
  X(F64, 2, "f64", 8)                \
  X(F16, 3, "f16", 2)                \
  X(BF16, 4, "bf16", 2)              \
  X(I8, 5, "i8", 1)                  \
  X(U8, 6, "u8", 1)                  \
  X(I32, 7, "i32", 4)                \
  X(I64, 8, "i64", 8)                \
  X(BOOL, 9, "bool", 1)              \
  X(RESOURCE, 10, "resource", 8)

typedef enum FloeDType {
  FLOE_DTYPE_INVALID = 0,
#define FLOE__DTYPE_ENUM(name, value, str, size) FLOE_##name = value,
  FLOE_DTYPE_MAP(FLOE__DTYPE_ENUM)
#undef FLOE__DTYPE_ENUM
  FLOE__DTYPE_FORCE_32BIT = 0x7fffffff
} FloeDType;

/* One past the largest dtype value; arrays indexed by dtype use this size. */
#define FLOE_DTYPE_LIMIT 16

/* Bit for a dtype in a dtype mask (type constraints). */
#define FLOE_DTYPE_BIT(dt) (1u << (unsigned)(dt))
#define FLOE_DTYPES_FLOAT \
  (FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) | FLOE_DTYPE_BIT(FLOE_F16) | FLOE_DTYPE_BIT(FLOE_BF16))
#define FLOE_DTYPES_INT                                                                        \
  (FLOE_DTYPE_BIT(FLOE_I8) | FLOE_DTYPE_BIT(FLOE_U8) | FLOE_DTYPE_BIT(FLOE_I32) |              \
   FLOE_DTYPE_BIT(FLOE_I64))
#define FLOE_DTYPES_NUMERIC (FLOE_DTYPES_FLOAT | FLOE_DTYPES_INT)
#define FLOE_DTYPES_ALL (FLOE_DTYPES_NUMERIC | FLOE_DTYPE_BIT(FLOE_BOOL))

/* How a collective combines values (floe_collective.h; floe_plugin.h's backends). Explicit
 * values, append-only. MEAN is SUM divided by the group's size (integer division for
 * integer types). */
typedef enum FloeReduceOp {
  FLOE_REDUCE_SUM = 0,
  FLOE_REDUCE_MEAN = 1,
  FLOE_REDUCE_MAX = 2,
  FLOE_REDUCE_MIN = 3,
  FLOE_REDUCE_PROD = 4,
  FLOE__REDUCE_FORCE_32BIT = 0x7fffffff /* any 32-bit value is a valid object (C++ readers) */
} FloeReduceOp;

/* Maximum rank of a tensor. */
#define FLOE_MAX_DIMS 8

/* A dimension whose size is not known at graph-construction time. */
#define FLOE_DIM_UNKNOWN (-1)
/* Rank of a shape whose rank is not known. */
#define FLOE_RANK_UNKNOWN (-1)

/* A (possibly partially known) shape, passed by value. */
typedef struct FloeShape {
  int32_t rank;                  /* FLOE_RANK_UNKNOWN, or 0..FLOE_MAX_DIMS */
  int64_t dims[FLOE_MAX_DIMS];   /* FLOE_DIM_UNKNOWN for an unknown size */
} FloeShape;

/* Opaque tensor: reference-counted; its buffer belongs to the allocator of its device. */
typedef struct FloeTensor FloeTensor;

#ifdef __cplusplus
}
#endif
#endif /* FLOE_TYPES_H */
