// SPDX-License-Identifier: Apache-2.0
// comm.cc - a rank's Gloo communicator: rendezvous, the operation threads, failures (see
// comm.h).
#include "comm.h"

#include <signal.h>
#include <time.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "abort.h"
#include "reduce.h"
#include "reduce_scatter.h"
#include "store.h"

namespace {
// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would end the process with
// SIGPIPE. Threads that run Gloo code keep SIGPIPE blocked (threads Gloo starts inherit the
// mask), so the write fails with EPIPE instead; a SIGPIPE raised meanwhile is taken off this
// thread before the mask is put back.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~NoSigpipe() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&s, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe &) = delete;
  NoSigpipe &operator=(const NoSigpipe &) = delete;

 private:
  sigset_t old_;
};
}  // namespace

namespace floe_gloo {

namespace {

using Ms = std::chrono::milliseconds;

// Slot prefix of the argument headers (check_peers): 0x40 + the kind, none of Gloo's.
constexpr uint8_t kHeaderSlotPrefix = 0x40;

// murmur3's 64-bit finaliser (a bijection), folded to Gloo's 32-bit tag.
uint32_t fold_tag(uint64_t t) {
  t ^= t >> 33;
  t *= 0xff51afd7ed558ccdull;
  t ^= t >> 33;
  t *= 0xc4ceb9fe1a85ec53ull;
  t ^= t >> 33;
  return (uint32_t)(t ^ (t >> 32));
}

// What the ranks must agree on, sent to the ring neighbour before the data.
struct Header {
  uint64_t tag;
  uint64_t count;
  uint32_t kind;
  uint32_t dtype;
  int32_t op;    // -1 where the kind has none
  int32_t root;  // -1 where the kind has none
};

bool has_reduce_op(OpKind k) { return k == OpKind::kAllReduce || k == OpKind::kReduceScatter; }

// The ranks disagree on an operation's arguments.
class ArgsMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string header_text(const Header &h) {
  char buf[160];
  const char *opname = h.op >= 0 ? reduce_op_name(h.op) : nullptr;
  int n = snprintf(buf, sizeof buf, "%s tag %" PRIu64 ", %" PRIu64 " x %s",
                   op_kind_name((OpKind)h.kind), h.tag, h.count,
                   dtype_name((FloeDType)h.dtype));
  if (opname && n > 0 && (size_t)n < sizeof buf)
    n += snprintf(buf + n, sizeof buf - (size_t)n, " %s", opname);
  if (h.root >= 0 && n > 0 && (size_t)n < sizeof buf)
    snprintf(buf + n, sizeof buf - (size_t)n, " root %d", (int)h.root);
  return buf;
}

// Element type of Gloo's typed option setters: only the size matters to the data movement.
template <typename T>
void gloo_op(const std::shared_ptr<gloo::Context> &ctx, const OpDesc &op, ReduceFn fn,
             uint32_t tag, Ms timeout) {
  switch (op.kind) {
    case OpKind::kAllReduce: {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if (op.in != op.out) o.setInput(static_cast<T *>(const_cast<void *>(op.in)), op.count);
      o.setOutput(static_cast<T *>(op.out), op.count);
      o.setReduceFunction(fn);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allreduce(o);
      break;
    }
    case OpKind::kAllGather: {
      gloo::AllgatherOptions o(ctx);
      T *out = static_cast<T *>(op.out);
      // In place (in is this rank's block of out): Gloo then skips its copy.
      if (op.in != out + (size_t)ctx->rank * op.count)
        o.setInput(static_cast<T *>(const_cast<void *>(op.in)), op.count);
      o.setOutput(out, op.count * (size_t)ctx->size);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allgather(o);
      break;
    }
    case OpKind::kBroadcast: {
      gloo::BroadcastOptions o(ctx);
      o.setOutput(static_cast<T *>(op.out), op.count);
      o.setRoot(op.root);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::broadcast(o);
      break;
    }
    case OpKind::kReduceScatter:
      ring_reduce_scatter(ctx, op.in, op.out, op.count, sizeof(T), fn, tag, timeout);
      break;
  }
}

}  // namespace

// A rendezvous context whose pending operations can all be failed at once (abort.h); where
// that is not possible it closes its connections, which fails the peers' operations at once
// and this rank's at their timeout.
class GlooContext : public gloo::rendezvous::Context {
 public:
  GlooContext(int r, int n) : gloo::rendezvous::Context(r, n) {}
  void fail_all(const std::string &msg) {
    if (!fail_all_pairs(transportContext_.get(), msg)) closeConnections();
  }
};

struct Comm::Pending {
  OpDesc op;
  uint32_t gtag;
  uint64_t key;
};

const char *op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
  }
  return "an unknown operation";
}

void Comm::log_debug(const std::string &s) const noexcept {
  if (host_ && host_->log) host_->log(FLOE_LOG_DEBUG, "gloo: %s", s.c_str());
}

static std::string rank_of_key(const std::string &key) {
  // connectFullMesh's keys: "rank_<r>" (host names) and "<r>" (pair addresses).
  const char *p = key.c_str();
  if (key.compare(0, 5, "rank_") == 0) p += 5;
  if (!*p) return "";
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return "";
  return p;
}

floe_code Comm::create(const FloeHostApi *host, const FloeCollectiveGroup *g, Comm **out,
                       std::string *msg) noexcept {
  *out = nullptr;
  try {
    if (!g || g->struct_size < offsetof(FloeCollectiveGroup, flags)) {
      *msg = "comm_init: the group description is NULL or older than ABI 1.5's";
      return FLOE_INVALID_ARGUMENT;
    }
    const std::string name = g->name && *g->name ? g->name : "(unnamed group)";
    if (g->size < 1 || g->rank < 0 || g->rank >= g->size) {
      *msg = "group " + name + ": rank " + std::to_string(g->rank) + " of size " +
             std::to_string(g->size) + " is not a rank of it";
      return FLOE_INVALID_ARGUMENT;
    }
    if (g->timeout_ms <= 0) {
      *msg = "group " + name + ": timeout " + std::to_string(g->timeout_ms) +
             " ms: it must be positive";
      return FLOE_INVALID_ARGUMENT;
    }
    if (g->size > 1 && (!g->store || g->store->struct_size < sizeof(FloeCollectiveStore) ||
                        !g->store->set || !g->store->get)) {
      *msg = "group " + name + ": no usable store to meet the other ranks through";
      return FLOE_INVALID_ARGUMENT;
    }
    NoSigpipe no_sigpipe;  // this thread connects; Gloo's loop thread inherits the mask
    Comm *c = new Comm();
    std::unique_ptr<Comm, void (*)(Comm *)> guard(c, [](Comm *p) { p->destroy(); });
    c->host_ = host;
    c->name_ = name;
    c->rank_ = g->rank;
    c->size_ = g->size;
    c->timeout_ms_ = g->timeout_ms;
    // The header exchange (check_peers) unless the caller checked the arguments across the
    // ranks already (the core does, since ABI 1.6); FLOE_GLOO_CHECK_ARGS=1 or 0 decides.
    const bool verified = FLOE_HAS_FIELD(g, FloeCollectiveGroup, flags) &&
                          (g->flags & FLOE_COLLECTIVE_ARGS_VERIFIED);
    const char *check = getenv("FLOE_GLOO_CHECK_ARGS");
    c->check_args_ = check && *check ? strcmp(check, "0") != 0 : !verified;
    if (g->size > 1) {
      const auto start = std::chrono::steady_clock::now();
      const auto deadline = start + Ms(g->timeout_ms);
      const std::string where = "group " + name + ", rank " + std::to_string(g->rank) + " of " +
                                std::to_string(g->size);
      gloo::transport::tcp::attr attr;
      if (g->host && *g->host) attr.hostname = g->host;
      std::shared_ptr<gloo::transport::Device> dev;
      try {
        dev = gloo::transport::tcp::CreateDevice(attr);
      } catch (const std::exception &e) {
        *msg = where + ": cannot open a tcp endpoint on host '" +
               (attr.hostname.empty() ? std::string("(Gloo's choice)") : attr.hostname) +
               "': " + e.what() + "; give the group a host address of this machine";
        return FLOE_UNAVAILABLE;
      }
      auto ctx = std::make_shared<GlooContext>(g->rank, g->size);
      // Gloo waits 5 x the timeout for a pair to connect: keep the whole join within it.
      ctx->setTimeout(std::max(Ms(1), Ms(g->timeout_ms / 5)));
      StoreAdapter store(host, g->store, "gloo/", deadline);
      try {
        ctx->connectFullMesh(store, dev);
      } catch (const StoreError &e) {
        std::string who = rank_of_key(e.key);
        if (e.code == FLOE_DEADLINE_EXCEEDED) {
          *msg = "group " + name + ": " +
                 (who.empty() ? std::string("a rank") : "rank " + who) + " did not join within " +
                 std::to_string(g->timeout_ms) + " ms (rank " + std::to_string(g->rank) + " of " +
                 std::to_string(g->size) + " waited for it: " + e.what() +
                 "); start every rank of the group, or raise its timeout";
          return FLOE_DEADLINE_EXCEEDED;
        }
        *msg = where + ": rendezvous failed: " + e.what();
        return e.code == FLOE_OK ? FLOE_INTERNAL : e.code;
      } catch (const gloo::IoException &e) {
        *msg = where + ": cannot connect to the other ranks: " + e.what() +
               "; check that they can reach this host's address and are still running";
        return FLOE_UNAVAILABLE;
      } catch (const std::system_error &e) {
        *msg = where + ": cannot connect to the other ranks: " + e.what();
        return FLOE_UNAVAILABLE;
      }
      ctx->setTimeout(Ms(g->timeout_ms));
      c->ctx_ = std::move(ctx);
      auto took = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - start);
      c->log_debug(where + ": joined over tcp in " + std::to_string(took.count()) + " ms" +
                   (c->check_args_ ? ", checking each operation's arguments with a header"
                                   : ", the caller checks the operations' arguments"));
    }
    guard.release();
    *out = c;
    return FLOE_OK;
  } catch (const std::bad_alloc &) {
    *msg = "comm_init: out of memory";
    return FLOE_NO_MEMORY;
  } catch (const std::exception &e) {
    *msg = std::string("comm_init: ") + e.what();
    return FLOE_INTERNAL;
  } catch (...) {
    *msg = "comm_init: an unknown C++ exception";
    return FLOE_INTERNAL;
  }
}

std::string Comm::describe(const OpDesc &op) const {
  Header h = {op.tag, op.count, (uint32_t)op.kind, (uint32_t)op.dtype,
              has_reduce_op(op.kind) ? op.op : -1,
              op.kind == OpKind::kBroadcast ? op.root : -1};
  return "gloo " + header_text(h) + " in group " + name_ + " (rank " + std::to_string(rank_) +
         " of " + std::to_string(size_) + ")";
}

Comm::Result Comm::fail(const OpDesc &op, floe_code code, const std::string &why) noexcept {
  try {
    return Result{code, describe(op) + ": " + why};
  } catch (...) {
    return Result{code, std::string()};
  }
}

floe_code Comm::submit(const OpDesc &op) noexcept {
  if (!op.done) return FLOE_INVALID_ARGUMENT;
  Result now{FLOE_OK, std::string()};
  bool complete_now = true;
  try {
    const size_t esize = dtype_size(op.dtype);
    const bool wants_op = has_reduce_op(op.kind);
    const size_t blocks = op.kind == OpKind::kBroadcast ? 1 : (size_t)size_;
    if (esize == 0) {
      now = fail(op, FLOE_INVALID_ARGUMENT,
                 std::string("dtype ") + dtype_name(op.dtype) +
                     " is not supported by the gloo backend; it takes f32, f64, f16, bf16, i8, "
                     "u8, i32 and i64");
    } else if (wants_op && (!reduce_op_name(op.op) || !reduce_fn(op.dtype, op.op))) {
      now = fail(op, FLOE_INVALID_ARGUMENT,
                 "reduce op " + std::to_string(op.op) +
                     " is not one of SUM, MEAN, MAX, MIN, PROD");
    } else if (op.count > SIZE_MAX / esize / blocks) {
      now = fail(op, FLOE_INVALID_ARGUMENT, "the count is too large for this machine's memory");
    } else if (op.count > 0 && (!op.in || !op.out)) {
      now = fail(op, FLOE_INVALID_ARGUMENT, "a buffer is NULL with a count above 0");
    } else if (op.kind == OpKind::kBroadcast && (op.root < 0 || op.root >= size_)) {
      now = fail(op, FLOE_INVALID_ARGUMENT,
                 "root " + std::to_string(op.root) + " is not a rank of the group (0.." +
                     std::to_string(size_ - 1) + ")");
    } else if (aborted_.load()) {
      now = fail(op, FLOE_ABORTED, "the comm was aborted (comm_abort)");
    } else if (size_ == 1) {
      now = run(op);  // no peers: a copy at most
    } else {
      const uint32_t gtag = fold_tag(op.tag);
      const uint64_t key = ((uint64_t)op.kind << 32) | gtag;
      std::unique_ptr<Pending> p(new Pending{op, gtag, key});
      std::unique_lock<std::mutex> lk(mu_);
      auto it = inflight_.find(key);
      if (stopping_) {
        lk.unlock();
        log_debug(describe(op) + ": issued while the comm is being freed: refused");
        return FLOE_FAILED_PRECONDITION;
      } else if (!broken_.empty()) {
        std::string first = broken_;
        lk.unlock();
        now = fail(op, aborted_.load() ? FLOE_ABORTED : FLOE_FAILED_PRECONDITION,
                   "the comm broke earlier (" + first + "); form the group again");
      } else if (it != inflight_.end()) {
        uint64_t other = it->second;
        lk.unlock();
        if (other == op.tag)
          now = fail(op, FLOE_INVALID_ARGUMENT,
                     "an operation of this kind with the same tag is still running on this comm; "
                     "concurrent operations need distinct tags");
        else
          now = fail(op, FLOE_INTERNAL,
                     "tag " + std::to_string(other) + " of a running operation folds to the same "
                     "32-bit Gloo tag (" + std::to_string(gtag) + "); issue it after that one");
      } else {
        inflight_.emplace(key, op.tag);
        queue_.push_back(p.get());
        pending_++;
        if ((int)queue_.size() > idle_) {
          try {
            threads_.emplace_back([this] { worker_main(); });
            idle_++;
          } catch (...) {
            queue_.pop_back();
            inflight_.erase(key);
            pending_--;
            throw;
          }
        }
        p.release();
        complete_now = false;
        lk.unlock();
        work_cv_.notify_one();
      }
    }
  } catch (const std::bad_alloc &) {
    now = fail(op, FLOE_NO_MEMORY, "out of memory");
  } catch (const std::system_error &e) {
    now = fail(op, FLOE_RESOURCE_EXHAUSTED,
               std::string("cannot start a thread for it: ") + e.what());
  } catch (...) {
    now = fail(op, FLOE_INTERNAL, "an unknown C++ exception");
  }
  if (complete_now) op.done(op.done_arg, now.code, now.code == FLOE_OK ? nullptr : now.msg.c_str());
  return FLOE_OK;
}

void Comm::worker_main() noexcept {
  NoSigpipe no_sigpipe;  // for the life of this operation thread
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [this] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;
    Pending *p = queue_.front();
    queue_.pop_front();
    idle_--;
    lk.unlock();
    Result r = run(p->op);
    lk.lock();
    inflight_.erase(p->key);
    lk.unlock();
    // No lock held: done may issue the next operation at once.
    p->op.done(p->op.done_arg, r.code, r.code == FLOE_OK ? nullptr : r.msg.c_str());
    delete p;
    lk.lock();
    idle_++;
    if (--pending_ == 0) idle_cv_.notify_all();
  }
}

void Comm::check_peers(const OpDesc &op, uint32_t gtag) {
  Header mine = {op.tag, op.count, (uint32_t)op.kind, (uint32_t)op.dtype,
                 has_reduce_op(op.kind) ? op.op : -1,
                 op.kind == OpKind::kBroadcast ? op.root : -1};
  Header theirs;
  memset(&theirs, 0, sizeof theirs);
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  const uint64_t slot = gloo::Slot::build((uint8_t)(kHeaderSlotPrefix + (uint32_t)op.kind), gtag);
  auto in = ctx_->createUnboundBuffer(&theirs, sizeof theirs);
  auto out = ctx_->createUnboundBuffer(&mine, sizeof mine);
  in->recv(left, slot);
  out->send(right, slot);
  if (!in->waitRecv(Ms(timeout_ms_)) || !out->waitSend(Ms(timeout_ms_)))
    throw gloo::IoException("the argument check was interrupted");
  if (memcmp(&mine, &theirs, sizeof mine) != 0)
    throw ArgsMismatch("rank " + std::to_string(left) + " issued " + header_text(theirs) +
                       " where this rank issued " + header_text(mine) +
                       ": every rank must issue the same operation, count, dtype" +
                       (has_reduce_op(op.kind) ? ", op" : "") +
                       (op.kind == OpKind::kBroadcast ? ", root" : "") + " under one tag");
}

void Comm::run_gloo(const OpDesc &op) {
  const uint32_t gtag = fold_tag(op.tag);
  if (check_args_) check_peers(op, gtag);
  if (op.count == 0) return;
  const ReduceFn fn = has_reduce_op(op.kind) ? reduce_fn(op.dtype, op.op) : nullptr;
  const Ms timeout(timeout_ms_);
  switch (dtype_size(op.dtype)) {
    case 1: gloo_op<uint8_t>(ctx_, op, fn, gtag, timeout); break;
    case 2: gloo_op<uint16_t>(ctx_, op, fn, gtag, timeout); break;
    case 4: gloo_op<uint32_t>(ctx_, op, fn, gtag, timeout); break;
    case 8: gloo_op<uint64_t>(ctx_, op, fn, gtag, timeout); break;
    default: throw std::logic_error("unsupported element size");  // submit refused it
  }
}

Comm::Result Comm::run(const OpDesc &op) noexcept {
  if (aborted_.load()) return fail(op, FLOE_ABORTED, "the comm was aborted (comm_abort)");
  floe_code code = FLOE_OK;
  std::string why;
  try {
    if (size_ == 1) {
      const size_t bytes = op.count * dtype_size(op.dtype);
      if (op.kind != OpKind::kBroadcast && bytes && op.in != op.out) memmove(op.out, op.in, bytes);
      return Result{FLOE_OK, std::string()};
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!broken_.empty())
        return fail(op, aborted_.load() ? FLOE_ABORTED : FLOE_FAILED_PRECONDITION,
                    "the comm broke earlier (" + broken_ + "); form the group again");
    }
    run_gloo(op);
    if (op.kind != OpKind::kAllGather && op.kind != OpKind::kBroadcast &&
        op.op == FLOE_REDUCE_MEAN)
      divide_by(op.out, op.count, op.dtype, size_);
    return Result{FLOE_OK, std::string()};
  } catch (const ArgsMismatch &e) {
    code = FLOE_INVALID_ARGUMENT;
    why = e.what();
  } catch (const gloo::IoException &e) {
    why = e.what();
    if (aborted_.load()) {
      code = FLOE_ABORTED;
      why = "the comm was aborted (comm_abort)";
    } else if (why.find("Timed out") != std::string::npos ||
               why.find("timeout") != std::string::npos) {
      code = FLOE_DEADLINE_EXCEEDED;
      why = "no progress within the group's timeout of " + std::to_string(timeout_ms_) +
            " ms (a rank did not issue this operation, or is stuck): " + why;
    } else {
      code = FLOE_UNAVAILABLE;
      why = "a connection to another rank broke (did it die?): " + why;
    }
  } catch (const gloo::EnforceNotMet &e) {
    code = FLOE_INTERNAL;
    why = std::string("Gloo refused it: ") + e.what();
  } catch (const std::bad_alloc &) {
    code = FLOE_NO_MEMORY;
    why = "out of memory";
  } catch (const std::exception &e) {
    code = FLOE_INTERNAL;
    why = e.what();
  } catch (...) {
    code = FLOE_INTERNAL;
    why = "an unknown C++ exception";
  }
  Result r = fail(op, code, why);
  // The first failure breaks the comm: Gloo's connections are in an unknown state, so every
  // other pending operation is failed now rather than at its timeout.
  bool first = false;
  try {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_.empty()) {
      broken_ = r.msg;
      first = true;
    }
  } catch (...) {
  }
  if (first && !aborted_.load()) {
    try {
      ctx_->fail_all("the comm broke: " + r.msg);
    } catch (...) {
    }
  }
  log_debug(r.msg);
  return r;
}

void Comm::abort() noexcept {
  if (aborted_.exchange(true)) return;
  try {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (broken_.empty()) broken_ = "comm_abort";
    }
    log_debug("group " + name_ + " (rank " + std::to_string(rank_) + "): comm_abort");
    if (ctx_) ctx_->fail_all("the comm was aborted (comm_abort)");
  } catch (...) {
  }
}

void Comm::destroy() noexcept {
  NoSigpipe no_sigpipe;  // closing Gloo's pairs may still write
  const auto self = std::this_thread::get_id();
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (auto &t : threads_)
      if (t.get_id() == self) {
        // Called from a done callback of this comm: finish on a thread of its own, which
        // can wait for this one.
        lk.unlock();
        try {
          std::thread([this] { destroy(); }).detach();
        } catch (...) {
          log_debug("comm_free from a done callback: no thread to finish it; the comm leaks");
        }
        return;
      }
    idle_cv_.wait(lk, [this] { return pending_ == 0; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto &t : threads_)
    if (t.joinable()) t.join();
  delete this;
}

Comm::~Comm() {
  try {
    ctx_.reset();  // closes the connections and stops the tcp device's thread
  } catch (...) {
  }
}

}  // namespace floe_gloo
