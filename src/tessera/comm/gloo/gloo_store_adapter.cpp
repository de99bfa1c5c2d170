#include "tessera/comm/gloo/gloo_store_adapter.h"

#include <algorithm>

namespace tessera::comm {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<comm::Store> store,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& k, const std::vector<char>& data) {
  store_->set(key(k), Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& k) {
  // Wait first so the backend timeout applies, not the store's default.
  store_->wait({key(k)}, timeout_);
  Bytes b = store_->get(key(k));
  return std::vector<char>(b.begin(), b.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  // Gloo passes its default (30 s) when it has no better idea; ours is the group's.
  store_->wait(full, std::max(timeout, timeout_));
}

}  // namespace tessera::comm
