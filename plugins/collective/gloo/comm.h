// SPDX-License-Identifier: Apache-2.0
// comm.h - one rank's communicator of the Gloo backend: a Gloo context joined to its peers
// over Gloo's tcp transport, and the threads that run its operations.
//
// Operations are non-blocking for the caller: each accepted one gets a thread of the comm's
// pool at once (an idle one, else a new one), runs Gloo's blocking algorithm there, then
// calls done. Every operation runs at the same time as the others, so ranks may issue them
// in different orders (the ABI allows it): Gloo keeps concurrent operations of one context
// apart by their slot, built from the operation's kind and a 32-bit tag (gloo::Slot), and
// this backend folds the ABI's 64-bit tag into those 32 bits. Ranks that disagree on an
// operation's count must never reach Gloo (its receive path enforces sizes by ending the
// process). When the caller checked the arguments across the ranks (group->flags has
// FLOE_COLLECTIVE_ARGS_VERIFIED: the core, since ABI 1.6) the data moves at once; otherwise,
// before moving data, each rank sends its ring neighbour a small header (tag, count, dtype,
// op, root) and compares the one it gets: ranks that disagree (or two tags that fold alike)
// fail with a message. FLOE_GLOO_CHECK_ARGS=1 sends the header always, =0 never.
//
// Failure: Gloo closes every connection of a context when one operation times out or a
// peer's connection breaks, so the first failure breaks the comm; every later operation
// fails at once with that first cause. comm_abort breaks it on purpose (FLOE_ABORTED).
#ifndef FLOE_GLOO_COMM_H
#define FLOE_GLOO_COMM_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <floe/floe_plugin.h>

namespace floe_gloo {

class GlooContext;

enum class OpKind : uint32_t { kAllReduce = 1, kAllGather = 2, kReduceScatter = 3, kBroadcast = 4 };
const char *op_kind_name(OpKind k);

// One operation as the caller issued it. Buffers are borrowed until done runs.
struct OpDesc {
  OpKind kind;
  const void *in;   // all_reduce, all_gather, reduce_scatter; broadcast: buf
  void *out;        // broadcast: buf
  size_t count;
  FloeDType dtype;
  int32_t op;       // raw FloeReduceOp value (plugin.cc): all_reduce, reduce_scatter
  int root;         // broadcast
  uint64_t tag;
  FloeCollectiveDoneFn done;
  void *done_arg;
};

class Comm {
 public:
  // Joins the group (see FloeCollectiveFns.comm_init). On failure returns the code and sets
  // *msg; *out is then NULL. Never throws. The caller owns *out: free with destroy().
  static floe_code create(const FloeHostApi *host, const FloeCollectiveGroup *group, Comm **out,
                          std::string *msg) noexcept;

  // Takes an operation: FLOE_OK when done will run (perhaps before this returns: a refused
  // argument, a broken comm and an empty operation complete at once, with a message), else
  // the code of a call done cannot report to (no done function). Never throws.
  floe_code submit(const OpDesc &op) noexcept;

  // Fails the pending and later operations with FLOE_ABORTED; never blocks for long (it
  // takes Gloo's per-connection locks briefly). Thread-safe, idempotent.
  void abort() noexcept;

  // Waits for every accepted operation's done to return, stops the threads, closes the
  // connections, frees the comm. Not from inside a done callback of this comm.
  void destroy() noexcept;

 private:
  struct Pending;
  struct Result {
    floe_code code;
    std::string msg;
  };

  Comm() = default;
  ~Comm();
  void worker_main() noexcept;
  Result run(const OpDesc &op) noexcept;
  void run_gloo(const OpDesc &op);
  void check_peers(const OpDesc &op, uint32_t gtag);
  Result fail(const OpDesc &op, floe_code code, const std::string &why) noexcept;
  std::string describe(const OpDesc &op) const;
  void log_debug(const std::string &s) const noexcept;

  const FloeHostApi *host_ = nullptr;
  std::string name_;
  int rank_ = 0, size_ = 1;
  int64_t timeout_ms_ = 0;
  bool check_args_ = true;
  std::shared_ptr<GlooContext> ctx_;  // NULL when size_ == 1

  std::mutex mu_;
  std::condition_variable work_cv_;   // a queued operation or stopping_
  std::condition_variable idle_cv_;   // pending_ reached 0
  std::deque<Pending *> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0;                      // threads waiting for work (counted from their start)
  int pending_ = 0;                   // accepted, done not yet returned
  bool stopping_ = false;
  std::unordered_map<uint64_t, uint64_t> inflight_;  // (kind, gloo tag) -> ABI tag
  std::string broken_;                // the first failure; later operations fail with it
  std::atomic<bool> aborted_{false};
};

}  // namespace floe_gloo

#endif
