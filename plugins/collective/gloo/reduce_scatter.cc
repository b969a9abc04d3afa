// SPDX-License-Identifier: Apache-2.0
// reduce_scatter.cc - ring reduce-scatter over Gloo's unbound buffers (see reduce_scatter.h).
//
// n - 1 steps. At step s rank r sends chunk (r - s - 1) mod n to rank r + 1 (at step 0 its
// own input, later the partial sum it made the step before) and receives chunk
// (r - s - 2) mod n from rank r - 1, which it combines with its own input of that chunk. The
// last chunk it receives is chunk r, which then holds all n contributions.
#include "reduce_scatter.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace floe_gloo {

void ring_reduce_scatter(const std::shared_ptr<gloo::Context> &ctx, const void *in, void *out,
                         size_t count, size_t elem_size, ReduceFn fn, uint32_t tag,
                         std::chrono::milliseconds timeout) {
  const size_t n = (size_t)ctx->size, r = (size_t)ctx->rank;
  const size_t bytes = count * elem_size;
  const uint8_t *src = static_cast<const uint8_t *>(in);
  if (n == 1) {
    if (bytes) std::copy(src, src + bytes, static_cast<uint8_t *>(out));
    return;
  }
  if (bytes == 0) return;
  const int right = (int)((r + 1) % n), left = (int)((r + n - 1) % n);
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);

  std::vector<uint8_t> partial(bytes), incoming(bytes);
  auto in_buf = ctx->createUnboundBuffer(const_cast<void *>(in), n * bytes);
  auto partial_buf = ctx->createUnboundBuffer(partial.data(), bytes);
  auto incoming_buf = ctx->createUnboundBuffer(incoming.data(), bytes);
  for (size_t s = 0; s + 1 < n; s++) {
    const size_t send_chunk = (r + 2 * n - s - 1) % n, recv_chunk = (r + 2 * n - s - 2) % n;
    incoming_buf->recv(left, slot);
    gloo::transport::UnboundBuffer *sending = s == 0 ? in_buf.get() : partial_buf.get();
    sending->send(right, slot, s == 0 ? send_chunk * bytes : 0, bytes);
    if (!incoming_buf->waitRecv(timeout) || !sending->waitSend(timeout))
      throw gloo::IoException("reduce-scatter: a transfer was interrupted");
    // partial was sent in full above, so it may be overwritten now.
    void *dst = s + 2 == n ? out : partial.data();
    fn(dst, src + recv_chunk * bytes, incoming.data(), count);
  }
}

}  // namespace floe_gloo
