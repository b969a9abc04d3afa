// SPDX-License-Identifier: Apache-2.0
// reduce_scatter.h - a ring reduce-scatter on a Gloo context, keyed by tag like Gloo's own
// tagged algorithms. (This Gloo has only ReduceScatterHalvingDoubling, which takes its slots
// from the context's counter, so operations issued in different orders on different ranks
// would pair up wrongly; and it counts elements in an int.)
#ifndef FLOE_GLOO_REDUCE_SCATTER_H
#define FLOE_GLOO_REDUCE_SCATTER_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <gloo/context.h>

#include "reduce.h"

namespace floe_gloo {

// Slot prefix of its messages: not one of Gloo's (gloo/types.h uses 0x01..0x08).
constexpr uint8_t kReduceScatterSlotPrefix = 0x46;

// out[i] = fn over ranks of in[rank * count + i], i < count; in holds size * count elements of
// elem_size bytes, out count. Every wait is bounded by timeout; Gloo's exceptions pass
// through (gloo::IoException on timeout or a broken connection).
void ring_reduce_scatter(const std::shared_ptr<gloo::Context> &ctx, const void *in, void *out,
                         size_t count, size_t elem_size, ReduceFn fn, uint32_t tag,
                         std::chrono::milliseconds timeout);

}  // namespace floe_gloo

#endif
