// TcpStore client: one connection, one request at a time under a mutex.
//
// Every round trip has a deadline: the store timeout plus kGrace. Blocking
// requests (get, wait) carry their timeout to the server, which answers "timeout"
// itself; the client waits kGrace longer and then gives up on its own, so a
// stalled server or a dropped network never hangs a rank. After a lost reply the
// stream may be out of step, so the connection is marked broken and every later
// call fails with the same reason.
#include "tessera/comm/base/tcp_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tessera/comm/base/socket_util.h"
#include "tessera/comm/base/store_util.h"
#include "tessera/comm/base/tcp_store_protocol.h"
#include "tessera/core/check.h"

namespace tessera::comm {

using proto::Op;
using proto::Status;

namespace {
// How much longer than the server's deadline a client waits for its answer.
constexpr std::chrono::milliseconds kGrace{2000};

// Longest wait we compute deadlines for (~34 years), so "no timeout" cannot overflow.
constexpr std::chrono::milliseconds kMaxWait{int64_t{1} << 40};

std::chrono::milliseconds bounded(std::chrono::milliseconds ms) { return std::min(ms, kMaxWait); }
double seconds(std::chrono::milliseconds ms) { return bounded(ms).count() / 1000.0; }
// How long a client waits for the answer to a request with this timeout.
std::chrono::milliseconds budget(std::chrono::milliseconds timeout) {
  return bounded(timeout) + kGrace;
}
}  // namespace

class TcpStore::Connection {
 public:
  Connection(const std::string& host, int port, const std::string& token,
             std::chrono::milliseconds timeout)
      : address_(c10::str(host, ":", port)), where_("store at " + address_) {
    connect(net::resolve_ipv4(host, port), host, port, token, timeout);
  }

  const std::string& where() const { return where_; }

  // Sends one request and returns the response payload. `reply_within` bounds the
  // wait for the answer.
  Bytes round_trip(const proto::Writer& request, std::chrono::milliseconds reply_within) {
    Bytes frame = request.frame();
    std::lock_guard<std::mutex> lock(mu_);
    TS_CHECK_T(StoreError, broken_.empty(), broken_);
    Deadline deadline(seconds(reply_within));
    check_io(net::send_all(sock_.fd(), frame.data(), frame.size(), deadline), reply_within);
    uint8_t len_buf[4];
    check_io(net::recv_all(sock_.fd(), len_buf, 4, deadline), reply_within);
    uint32_t len = proto::decode_length(len_buf);
    if (len > proto::kMaxFrame) fail(c10::str(where_, " sent a malformed reply (", len, " bytes)"));
    Bytes payload(len);
    check_io(net::recv_all(sock_.fd(), payload.data(), len, deadline), reply_within);
    return payload;
  }

 private:
  void connect(const sockaddr_in& addr, const std::string& host, int port, const std::string& token,
               std::chrono::milliseconds timeout);
  // Performs the handshake; returns "" when accepted, the server's refusal otherwise.
  // Throws a retryable net error (as errno) through `error` when the link dropped.
  std::string handshake(const std::string& token, const Deadline& deadline, int* error);

  void check_io(net::IoStatus st, std::chrono::milliseconds waited) {
    if (st == net::IoStatus::kClosed) {
      fail(c10::str(where_, " closed the connection (the launcher or rank 0 exited?)"));
    }
    if (st == net::IoStatus::kTimeout) {
      fail(c10::str(where_, " did not answer within ", seconds(waited),
                    " s; the server is stalled or the network dropped (raise TESSERA_TIMEOUT "
                    "if the job is just slow)"));
    }
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = why;
    sock_.reset();
    TS_THROW(StoreError, why);
  }

  std::string address_;  // host:port
  std::string where_;    // "store at host:port", for messages
  std::mutex mu_;
  net::Socket sock_;
  std::string broken_;  // why the connection is unusable; "" while healthy
};

void TcpStore::Connection::connect(const sockaddr_in& addr, const std::string& host, int port,
                                   const std::string& token, std::chrono::milliseconds timeout) {
  Deadline deadline(seconds(timeout));
  auto backoff = std::chrono::milliseconds(10);
  int last_error = 0;
  while (true) {
    net::ConnectResult r = net::try_connect(addr, deadline);
    if (r.socket.valid()) {
      sock_ = std::move(r.socket);
      std::string refusal = handshake(token, deadline, &last_error);
      if (last_error == 0) {
        TS_CHECK_T(StoreError, refusal.empty(), where_, " refused the connection: ", refusal);
        return;
      }
      sock_.reset();
    } else {
      last_error = r.error;
    }
    // Refused or unreachable: the server may not be up yet, so retry until the
    // deadline with a short backoff (ranks often start before rank 0 listens).
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(deadline.remaining_ms() + 1)));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
    if (deadline.expired()) break;
  }
  TS_THROW(StoreError, "could not reach the store at ", host, ":", port, " within ",
           seconds(timeout), " s (", std::strerror(last_error ? last_error : ETIMEDOUT),
           "); is the launcher/rank 0 running and MASTER_ADDR/MASTER_PORT right?");
}

std::string TcpStore::Connection::handshake(const std::string& token, const Deadline& deadline,
                                            int* error) {
  *error = 0;
  proto::Writer w;
  w.u32(proto::kMagic).u32(proto::kVersion).blob(token);
  Bytes frame = w.frame();
  uint8_t len_buf[4];
  net::IoStatus st = net::send_all(sock_.fd(), frame.data(), frame.size(), deadline);
  if (st == net::IoStatus::kOk) st = net::recv_all(sock_.fd(), len_buf, 4, deadline);
  if (st != net::IoStatus::kOk) {
    *error = st == net::IoStatus::kClosed ? ECONNRESET : ETIMEDOUT;
    return "";
  }
  uint32_t len = proto::decode_length(len_buf);
  TS_CHECK_T(StoreError, len <= proto::kMaxHandshakeFrame, "the peer at ", address_,
             " is not a Tessera store (bad handshake reply); check MASTER_PORT");
  Bytes payload(len);
  st = net::recv_all(sock_.fd(), payload.data(), len, deadline);
  if (st != net::IoStatus::kOk) {
    *error = st == net::IoStatus::kClosed ? ECONNRESET : ETIMEDOUT;
    return "";
  }
  proto::Reader r(payload);
  auto status = static_cast<Status>(r.u8());
  std::string message = r.str();
  if (status == Status::kOk) return "";
  return message.empty() ? std::string("refused") : message;
}

TcpStore::TcpStore(const std::string& host, int port, const std::string& token,
                   std::chrono::milliseconds timeout)
    : host_(host), port_(port), token_(token) {
  timeout_ = timeout;
  conn_ = std::make_unique<Connection>(host, port, token, timeout);
}

TcpStore::~TcpStore() = default;

std::shared_ptr<Store> TcpStore::clone_connection() {
  return std::make_shared<TcpStore>(host_, port_, token_, timeout_);
}

namespace {
// Reads the status byte; throws the server's error. Returns the reader positioned
// at the result. Timeouts are handled by the caller (it knows the timeout).
proto::Reader expect_ok(const Bytes& reply, const std::string& where) {
  proto::Reader r(reply);
  auto status = static_cast<Status>(r.u8());
  if (status == Status::kError) TS_THROW(StoreError, where, ": ", r.str());
  TS_CHECK_T(StoreError, status == Status::kOk, where, " sent an unexpected reply status ",
             int(status));
  return r;
}

// For get/wait: a timeout reply names the keys still missing.
proto::Reader expect_ok_or_timeout(const Bytes& reply, const std::string& where,
                                   std::chrono::milliseconds timeout) {
  proto::Reader r(reply);
  if (static_cast<Status>(r.u8()) == Status::kTimeout) {
    throw_wait_timeout(where, r.strings(), timeout);
  }
  return expect_ok(reply, where);
}
}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  proto::Writer w;
  w.u8(uint8_t(Op::kSet)).blob(key).blob(value);
  expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where());
}

Bytes TcpStore::get(const std::string& key) {
  proto::Writer w;
  w.u8(uint8_t(Op::kGet)).blob(key).i64(timeout_.count());
  Bytes reply = conn_->round_trip(w, budget(timeout_));
  return expect_ok_or_timeout(reply, conn_->where(), timeout_).bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  proto::Writer w;
  w.u8(uint8_t(Op::kAdd)).blob(key).i64(delta);
  return expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where()).i64();
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  proto::Writer w;
  w.u8(uint8_t(Op::kCompareSet)).blob(key).blob(expected).blob(desired);
  return expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where()).bytes();
}

bool TcpStore::delete_key(const std::string& key) {
  proto::Writer w;
  w.u8(uint8_t(Op::kDelete)).blob(key);
  return expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where()).u8() != 0;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  proto::Writer w;
  w.u8(uint8_t(Op::kCheck)).strings(keys);
  return expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where()).u8() != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  proto::Writer w;
  w.u8(uint8_t(Op::kWait)).strings(keys).i64(timeout.count());
  expect_ok_or_timeout(conn_->round_trip(w, budget(timeout)), conn_->where(), timeout);
}

int64_t TcpStore::num_keys() {
  proto::Writer w;
  w.u8(uint8_t(Op::kNumKeys));
  return expect_ok(conn_->round_trip(w, budget(timeout_)), conn_->where()).i64();
}

}  // namespace tessera::comm
