// SPDX-License-Identifier: Apache-2.0
// reduce.h - element types and reductions of the Gloo backend: what Gloo's algorithms call to
// combine two buffers (out[i] = a[i] op b[i]; out may be a), and MEAN's division after them.
// Plain loops the compiler vectorises; f16 and bf16 go through float.
#ifndef FLOE_GLOO_REDUCE_H
#define FLOE_GLOO_REDUCE_H

#include <cstddef>
#include <cstdint>

#include <floe/floe_plugin.h>

namespace floe_gloo {

// out[i] = a[i] op b[i] for i < n. out may equal a or b (Gloo reduces in place).
using ReduceFn = void (*)(void *out, const void *a, const void *b, size_t n);

// FLOE_DTYPE_BIT mask of the element types the backend reduces and moves.
uint32_t supported_dtypes();
// Bytes per element of dt, 0 when the backend does not take dt.
size_t dtype_size(FloeDType dt);
// "f32", ...; "dtype <n>" (static storage) for one it does not know.
const char *dtype_name(FloeDType dt);
// Reduce ops travel as the raw int the caller passed (see plugin.cc: a C++ program may not
// even load an enum object holding a value outside the enumerators' range).
// "SUM", ...; NULL for a value that is not a FloeReduceOp.
const char *reduce_op_name(int32_t op);
// The element-wise function of op on dt (MEAN: the SUM one), or nullptr when either is not
// supported.
ReduceFn reduce_fn(FloeDType dt, int32_t op);
// MEAN's second half: buf[i] /= size for i < n (integer division, truncating, for integers).
void divide_by(void *buf, size_t n, FloeDType dt, int size);

// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace floe_gloo

#endif
