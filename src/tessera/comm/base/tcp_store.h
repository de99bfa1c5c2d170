// TcpStore: the job's rendezvous store over TCP.
//
// TcpStoreServer holds the keys. It binds exactly the address it is given
// (loopback for a one-host job, never 0.0.0.0 unless asked), serves clients on
// one background thread, and refuses a client that does not present the job
// token. Port 0 picks a free port (see port()). Binding a port in use is a
// StoreError naming host:port. A peer that sends a frame over 64 MiB, a malformed
// request, or more than it may have in flight gets an error reply and is
// disconnected; the other clients are not affected.
//
// TcpStore is a client: it connects (retrying until its timeout, so ranks may
// start before the server), presents the token, then serves Store calls over one
// connection guarded by a mutex (safe from any thread). Blocking calls (get, wait)
// wait on the server side and give up at the timeout. If the server goes away,
// every pending and later call throws StoreError naming the server; none hangs.
// A request of 64 MiB or more (a key and its value) is a StoreError before it is sent.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/comm/base/store.h"

namespace tessera::comm {

class TcpStoreServer {
 public:
  // Binds host:port and starts serving. token may be empty (no authentication).
  TcpStoreServer(const std::string& host, int port, std::string token);
  ~TcpStoreServer();  // stops serving and closes every client connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // Stops serving; connected clients see StoreError on their next call.
  void stop();

  class Impl;

 private:
  std::string host_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port, retrying until `timeout`; StoreError when the server
  // is unreachable or refuses the token.
  TcpStore(const std::string& host, int port, const std::string& token,
           std::chrono::milliseconds timeout);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;
  std::shared_ptr<Store> clone_connection() override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

  class Connection;

 private:
  std::string host_;
  int port_;
  std::string token_;
  std::unique_ptr<Connection> conn_;
};

}  // namespace tessera::comm
