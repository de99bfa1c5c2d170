// MemoryStore: a Store held in this process's memory, shared by ranks that run as
// threads (tests, single-process jobs). Same semantics and errors as TcpStore.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "tessera/comm/base/store.h"

namespace tessera::comm {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

}  // namespace tessera::comm
