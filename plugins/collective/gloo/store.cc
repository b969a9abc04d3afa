// SPDX-License-Identifier: Apache-2.0
// store.cc - gloo::rendezvous::Store over FloeCollectiveStore (see store.h).
#include "store.h"

#include <algorithm>

namespace floe_gloo {

StoreAdapter::StoreAdapter(const FloeHostApi *host, const FloeCollectiveStore *store,
                           std::string prefix, std::chrono::steady_clock::time_point deadline)
    : host_(host), store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

void StoreAdapter::set(const std::string &key, const std::vector<char> &data) {
  std::string k = prefix_ + key;
  floe_code rc = store_->set(store_->arg, k.c_str(), data.data(), data.size());
  if (rc != FLOE_OK)
    throw StoreError(rc, key, "the group's store refused to set key '" + k + "' (" +
                                  std::to_string(data.size()) + " bytes), code " +
                                  std::to_string((int)rc));
}

std::vector<char> StoreAdapter::get(const std::string &key) {
  auto it = seen_.find(key);
  if (it != seen_.end()) return it->second;
  std::string k = prefix_ + key;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline_ - std::chrono::steady_clock::now());
  int64_t ms = std::max<int64_t>(0, left.count());
  void *value = nullptr;
  size_t len = 0;
  floe_code rc = store_->get(store_->arg, k.c_str(), ms, &value, &len);
  if (rc != FLOE_OK) {
    if (value) host_->free(value);
    if (rc == FLOE_DEADLINE_EXCEEDED)
      throw StoreError(rc, key, "key '" + k + "' did not come to the group's store in time");
    if (rc == FLOE_UNAVAILABLE)
      throw StoreError(rc, key, "the group's store is gone (reading key '" + k + "')");
    throw StoreError(rc, key, "the group's store failed to get key '" + k + "', code " +
                                  std::to_string((int)rc));
  }
  std::vector<char> out;
  try {
    out.assign(static_cast<char *>(value), static_cast<char *>(value) + len);
  } catch (...) {
    host_->free(value);
    throw;
  }
  host_->free(value);
  seen_.emplace(key, out);
  return out;
}

void StoreAdapter::wait(const std::vector<std::string> &keys) {
  for (const auto &k : keys) get(k);
}

// The deadline bounds every wait already (see store.h): Gloo's timeout is the group's too.
void StoreAdapter::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) {
  wait(keys);
}

}  // namespace floe_gloo
