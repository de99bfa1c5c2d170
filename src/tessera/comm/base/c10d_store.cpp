// C10dStore over libtorch's c10d::TCPStore client. This file is the one place
// that touches c10d's store API, so a LibTorch version difference stays here.
#include "tessera/comm/base/c10d_store.h"

#if __has_include(<torch/csrc/distributed/c10d/TCPStore.hpp>)
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#define TESSERA_HAVE_C10D_STORE 1
#else
#define TESSERA_HAVE_C10D_STORE 0
#endif

#include <algorithm>
#include <thread>

#include "tessera/comm/base/store_util.h"
#include "tessera/core/check.h"
#include "tessera/core/timer.h"

namespace tessera::comm {

#if TESSERA_HAVE_C10D_STORE

namespace {
// c10 errors carry a C++ backtrace in what(); users need the first line only.
std::string short_message(const std::exception& e) {
  std::string msg;
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    msg = ce->what_without_backtrace();
  } else {
    msg = e.what();
  }
  auto nl = msg.find('\n');
  return nl == std::string::npos ? msg : msg.substr(0, nl);
}

bool is_timeout(const std::string& msg) {
  return msg.find("imeout") != std::string::npos || msg.find("imed out") != std::string::npos;
}
}  // namespace

std::string C10dStore::where() const {
  return c10::str("torchrun agent store at ", host_, ":", port_);
}

void C10dStore::connect() {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port_);
  opts.isServer = false;  // the agent owns the port; we must never bind it
  opts.waitWorkers = false;
  opts.timeout = timeout_;
  // c10d's client gives up on its first refused connect within a short timeout,
  // so we retry ourselves until our own deadline.
  Deadline deadline(std::min<int64_t>(timeout_.count(), int64_t{1} << 40) / 1000.0);
  while (true) {
    try {
      client_ = std::make_shared<c10d::TCPStore>(host_, opts);
      return;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      if (deadline.expired()) {
        TS_THROW(StoreError, "could not reach the ", where(), " within ", timeout_.count() / 1000.0,
                 " s (", short_message(e),
                 "); is torchrun's agent running and MASTER_ADDR/MASTER_PORT right?");
      }
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(100, deadline.remaining_ms() + 1)));
  }
}

template <typename F>
decltype(auto) C10dStore::call(const char* op, F&& f) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!client_) connect();
  try {
    return f(*client_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // The c10d stream may hold a late reply now; start afresh on the next call.
    client_.reset();
    TS_THROW(StoreError, where(), ": ", op, " failed: ", short_message(e));
  }
}

C10dStore::C10dStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : host_(host), port_(port) {
  TS_CHECK_T(StoreError, port > 0 && port <= 65535, "agent store port ", port,
             " is out of range; check MASTER_PORT");
  timeout_ = timeout;
  connect();
}

C10dStore::~C10dStore() = default;

void C10dStore::set(const std::string& key, const Bytes& value) {
  call("set", [&](c10d::TCPStore& s) { s.set(key, value); });
}

Bytes C10dStore::get(const std::string& key) {
  wait({key}, timeout_);  // our wording for a timeout; then the value is there
  return call("get", [&](c10d::TCPStore& s) { return s.get(key); });
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  return call("add", [&](c10d::TCPStore& s) { return s.add(key, delta); });
}

Bytes C10dStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return call("compare_set",
              [&](c10d::TCPStore& s) { return s.compareSet(key, expected, desired); });
}

bool C10dStore::delete_key(const std::string& key) {
  return call("delete_key", [&](c10d::TCPStore& s) { return s.deleteKey(key); });
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  return call("check", [&](c10d::TCPStore& s) { return s.check(keys); });
}

void C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    call("wait", [&](c10d::TCPStore& s) { s.wait(keys, timeout); });
  } catch (const StoreError& e) {
    if (!is_timeout(e.bare_message())) throw;
    // Name the missing keys like every other store does.
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!check({k})) missing.push_back(k);
    }
    if (missing.empty()) return;  // they arrived just after c10d gave up
    throw_wait_timeout(where(), missing, timeout);
  }
}

int64_t C10dStore::num_keys() {
  return call("num_keys", [&](c10d::TCPStore& s) { return s.getNumKeys(); });
}

void C10dStore::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  timeout_ = timeout;
  if (client_) client_->setTimeout(timeout);
}

#else  // LibTorch built without distributed support

C10dStore::C10dStore(const std::string& host, int port, std::chrono::milliseconds)
    : host_(host), port_(port) {
  TS_THROW(StoreError,
           "this LibTorch has no c10d (built without USE_DISTRIBUTED), so Tessera "
           "cannot join torchrun's agent store; launch with `tessera run` instead");
}
C10dStore::~C10dStore() = default;
void C10dStore::set(const std::string&, const Bytes&) {}
Bytes C10dStore::get(const std::string&) { return {}; }
int64_t C10dStore::add(const std::string&, int64_t) { return 0; }
Bytes C10dStore::compare_set(const std::string&, const Bytes&, const Bytes&) { return {}; }
bool C10dStore::delete_key(const std::string&) { return false; }
bool C10dStore::check(const std::vector<std::string>&) { return false; }
void C10dStore::wait(const std::vector<std::string>&, std::chrono::milliseconds) {}
int64_t C10dStore::num_keys() { return 0; }
void C10dStore::set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
std::string C10dStore::where() const { return ""; }
void C10dStore::connect() {}

#endif

}  // namespace tessera::comm
