#include "tessera/comm/base/prefix_store.h"

namespace tessera::comm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  timeout_ = inner_->timeout();
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(k(key), value); }

Bytes PrefixStore::get(const std::string& key) {
  inner_->wait({k(key)}, timeout_);
  return inner_->get(k(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(k(key), delta); }

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return inner_->compare_set(k(key), expected, desired);
}

bool PrefixStore::delete_key(const std::string& key) { return inner_->delete_key(k(key)); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(ks(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  inner_->wait(ks(keys), timeout);
}

void PrefixStore::set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

std::vector<std::string> PrefixStore::ks(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(k(key));
  return out;
}

}  // namespace tessera::comm
