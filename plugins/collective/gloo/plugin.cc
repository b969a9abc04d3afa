// SPDX-License-Identifier: Apache-2.0
// plugin.cc - the Gloo collective backend's plugin entry: registers backend "gloo" (host
// memory, device type "CPU") whose slots wrap floe_gloo::Comm (comm.h).
//
// The ABI is C: every slot here is noexcept and catches what the C++ below it throws, so no
// exception leaves the plugin; nothing prints (host->log at debug level only), nothing exits.
#include <cstring>
#include <new>
#include <string>

#include <floe/floe_plugin.h>

#include "comm.h"
#include "reduce.h"

namespace {

using floe_gloo::Comm;
using floe_gloo::OpDesc;
using floe_gloo::OpKind;

// The backend context of one runtime (FloeCollectiveFns.init): the host table only.
struct Backend {
  const FloeHostApi *host;
};

floe_code gloo_init(const FloeHostApi *host, void **ctx) noexcept {
  if (!ctx) return FLOE_INVALID_ARGUMENT;
  Backend *b = new (std::nothrow) Backend{host};
  if (!b) return FLOE_NO_MEMORY;
  *ctx = b;
  return FLOE_OK;
}

void gloo_finalize(void *ctx) noexcept { delete static_cast<Backend *>(ctx); }

void copy_msg(char *msg, size_t msg_len, const std::string &s) noexcept {
  if (!msg || msg_len == 0) return;
  size_t n = s.size() < msg_len - 1 ? s.size() : msg_len - 1;
  memcpy(msg, s.data(), n);
  msg[n] = '\0';
}

// Ownership: group is borrowed for the call (Comm copies what it keeps); *comm is the
// caller's, freed with gloo_comm_free.
floe_code gloo_comm_init(void *ctx, const FloeCollectiveGroup *group, void **comm, char *msg,
                         size_t msg_len) noexcept {
  if (!ctx || !comm) {
    copy_msg(msg, msg_len, "comm_init: NULL backend context or comm pointer");
    return FLOE_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string why;
  Comm *c = nullptr;
  floe_code rc;
  try {
    rc = Comm::create(static_cast<Backend *>(ctx)->host, group, &c, &why);
  } catch (...) {  // create catches everything itself; the string's copy might not
    rc = FLOE_NO_MEMORY;
    why = "comm_init: out of memory";
  }
  if (rc != FLOE_OK) {
    copy_msg(msg, msg_len, why);
    return rc;
  }
  *comm = c;
  return FLOE_OK;
}

// The value of a FloeReduceOp as passed, without loading it as the enum: in C++ an enum
// without a fixed underlying type holds only its enumerators' range (0..7 here), and a caller
// in C may pass anything.
int32_t raw_op(const FloeReduceOp &op) noexcept {
  static_assert(sizeof(FloeReduceOp) == sizeof(int32_t), "FloeReduceOp is not 32 bits");
  int32_t v;
  memcpy(&v, &op, sizeof v);
  return v;
}

// Buffers are borrowed until done runs; done runs exactly once when this returns FLOE_OK.
floe_code submit(void *comm, const OpDesc &op) noexcept {
  if (!comm) return FLOE_INVALID_ARGUMENT;
  return static_cast<Comm *>(comm)->submit(op);
}

floe_code gloo_all_reduce(void *comm, const void *in, void *out, size_t count, FloeDType dtype,
                          FloeReduceOp op, uint64_t tag, FloeStream *stream,
                          FloeCollectiveDoneFn done, void *done_arg) noexcept {
  return submit(comm, OpDesc{OpKind::kAllReduce, in, out, count, dtype, raw_op(op), 0, tag, done,
                             done_arg});
}

floe_code gloo_all_gather(void *comm, const void *in, void *out, size_t count, FloeDType dtype,
                          uint64_t tag, FloeStream *stream, FloeCollectiveDoneFn done,
                          void *done_arg) noexcept {
  return submit(comm, OpDesc{OpKind::kAllGather, in, out, count, dtype, FLOE_REDUCE_SUM, 0, tag,
                             done, done_arg});
}

floe_code gloo_reduce_scatter(void *comm, const void *in, void *out, size_t count,
                              FloeDType dtype, FloeReduceOp op, uint64_t tag, FloeStream *stream,
                              FloeCollectiveDoneFn done, void *done_arg) noexcept {
  return submit(comm, OpDesc{OpKind::kReduceScatter, in, out, count, dtype, raw_op(op), 0, tag, done,
                             done_arg});
}

floe_code gloo_broadcast(void *comm, void *buf, size_t count, FloeDType dtype, int root,
                         uint64_t tag, FloeStream *stream, FloeCollectiveDoneFn done,
                         void *done_arg) noexcept {
  return submit(comm, OpDesc{OpKind::kBroadcast, buf, buf, count, dtype, FLOE_REDUCE_SUM, root,
                             tag, done, done_arg});
}

void gloo_comm_abort(void *comm) noexcept {
  if (comm) static_cast<Comm *>(comm)->abort();
}

void gloo_comm_free(void *comm) noexcept {
  if (comm) static_cast<Comm *>(comm)->destroy();
}

}  // namespace

extern "C" {
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "collective-gloo", "1.0");
  if (rc != FLOE_OK) return rc;
  if (!FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_collective) ||
      !reg->register_collective) {
    reg->set_message(reg,
                     "this core's plugin ABI (1.%u) has no collective backends; the gloo "
                     "backend needs 1.5 or newer",
                     host ? host->abi_minor : 0u);
    return FLOE_UNAVAILABLE;
  }
  FloeCollectiveFns f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.name = "gloo";
  f.device_type = "CPU";
  f.dtypes = floe_gloo::supported_dtypes();
  f.init = gloo_init;
  f.finalize = gloo_finalize;
  f.comm_init = gloo_comm_init;
  f.all_reduce = gloo_all_reduce;
  f.all_gather = gloo_all_gather;
  f.reduce_scatter = gloo_reduce_scatter;
  f.broadcast = gloo_broadcast;
  f.comm_abort = gloo_comm_abort;
  f.comm_free = gloo_comm_free;
  return reg->register_collective(reg, &f);
}
