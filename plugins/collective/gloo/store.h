// SPDX-License-Identifier: Apache-2.0
// store.h - Gloo's rendezvous store (gloo::rendezvous::Store) over the FloeCollectiveStore the
// core hands to comm_init: how the ranks of a group learn each other's tcp addresses.
#ifndef FLOE_GLOO_STORE_H
#define FLOE_GLOO_STORE_H

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include <floe/floe_plugin.h>

namespace floe_gloo {

// What the store said when a set or get failed: code is FLOE_DEADLINE_EXCEEDED when a key
// did not come before the deadline, FLOE_UNAVAILABLE when the store is gone, else the
// store's own code. key is the key without the prefix.
class StoreError : public std::runtime_error {
 public:
  StoreError(floe_code c, std::string k, const std::string &what)
      : std::runtime_error(what), code(c), key(std::move(k)) {}
  floe_code code;
  std::string key;
};

// Every key gets `prefix` in front (the core already puts the group's namespace around
// them). All waits end at `deadline`, the end of comm_init's rendezvous, whatever timeout
// Gloo asks for: the whole rendezvous takes at most the group's timeout. Values read are
// kept, so Gloo's wait-then-get reads each key once. Used by one thread (connectFullMesh).
// The store and host are borrowed for the adapter's life.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(const FloeHostApi *host, const FloeCollectiveStore *store, std::string prefix,
               std::chrono::steady_clock::time_point deadline);

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override;

 private:
  const FloeHostApi *host_;
  const FloeCollectiveStore *store_;
  std::string prefix_;
  std::chrono::steady_clock::time_point deadline_;
  std::map<std::string, std::vector<char>> seen_;
};

}  // namespace floe_gloo

#endif
