// C10dStore: a Store that is a client of a c10d::TCPStore server, i.e. of the
// agent store torchrun hosts on MASTER_ADDR:MASTER_PORT.
//
// Used when a worker runs under torchrun (TORCHELASTIC_USE_AGENT_STORE=True and
// no TESSERA_LAUNCHER): the port is already bound by the agent, so the worker
// joins as a client and never binds it. Keys are shared with Python workers of
// the same job (both go through c10d's client, which adds its own "/" prefix).
//
// Ownership: holds one c10d client connection. Thread safety: every method may be
// called from any thread (calls are serialized by a mutex). Errors: every c10
// error becomes a StoreError naming the agent store; a get()/wait() timeout names
// the missing keys like every other Store. After a failed call the c10d
// connection is replaced on the next call, because a timed-out c10d request can
// leave a late reply in the stream.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "tessera/comm/base/store.h"

namespace c10d {
class TCPStore;
}

namespace tessera::comm {

class C10dStore : public Store {
 public:
  // Connects to the c10d TCPStore server at host:port as a client, retrying
  // until `timeout`; StoreError if it cannot. Never binds host:port.
  C10dStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~C10dStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::shared_ptr<Store> clone_connection() override {
    return std::make_shared<C10dStore>(host_, port_, timeout_);
  }

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  // Runs f(client) under the mutex, reconnecting first if the previous call
  // failed; converts c10 errors to StoreError. Defined in the .cpp (only user).
  template <typename F>
  decltype(auto) call(const char* op, F&& f);
  void connect();
  std::string where() const;

  std::string host_;
  int port_;
  std::recursive_mutex mu_;
  std::shared_ptr<c10d::TCPStore> client_;  // null after a failure, until the next call
};

}  // namespace tessera::comm
