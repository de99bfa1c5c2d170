// PrefixStore: a namespace inside another Store ("<prefix>/<key>"), so each group
// and each subsystem has its own keys. Shares the inner store's connection.
#pragma once

#include <memory>

#include "tessera/comm/base/store.h"

namespace tessera::comm {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override { return inner_->num_keys(); }
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::shared_ptr<Store> clone_connection() override {
    auto inner = inner_->clone_connection();
    return inner ? std::make_shared<PrefixStore>(prefix_, inner) : nullptr;
  }

  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace tessera::comm
