// TcpStoreServer: one poll() thread serving every client of the job's store.
//
// Each client has an input buffer (bytes not yet parsed), an output buffer and at
// most one pending blocking request (get/wait) with its own deadline. A pending
// client is parked, not waited on, so one rank blocked in get() never delays the
// others: after every mutation the parked requests are re-checked, and the poll
// timeout is the nearest deadline. stop() wakes the thread through an eventfd.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "tessera/comm/base/socket_util.h"
#include "tessera/comm/base/store_util.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/base/tcp_store_protocol.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::comm {

using proto::Op;
using proto::Status;

namespace {

struct Client {
  net::Socket sock;
  Bytes in;
  size_t in_off = 0;
  Bytes out;
  size_t out_off = 0;
  bool authed = false;
  bool closing = false;  // close once `out` is sent (refused handshake)
  bool dead = false;
  // The parked get/wait, if any.
  bool pending = false;
  Op pending_op = Op::kGet;
  std::vector<std::string> pending_keys;
  Clock::time_point deadline;
};

bool token_equal(const std::string& a, const std::string& b) {
  // Constant time in the token's content, so timing does not leak its prefix.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  Impl(net::Socket listener, std::string token, std::string where)
      : listener_(std::move(listener)), token_(std::move(token)), where_(std::move(where)) {
    net::set_nonblocking(listener_.fd());
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    TS_CHECK_ERRNO(StoreError, wake_fd_, "cannot create the store server's wake-up eventfd");
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    stop();
    ::close(wake_fd_);
  }

  void stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    uint64_t one = 1;
    ssize_t rc = ::write(wake_fd_, &one, sizeof(one));
    (void)rc;  // a full eventfd is already a pending wake-up
    thread_.join();
  }

 private:
  void run();
  void accept_clients();
  void read_client(Client& c);
  void flush(Client& c);
  bool process_input(Client& c);
  void handle_handshake(Client& c, proto::Reader& r);
  void handle_request(Client& c, proto::Reader& r);
  bool try_complete(Client& c, Clock::time_point now);
  void reply_timeout(Client& c, const std::vector<std::string>& keys);
  void send(Client& c, const proto::Writer& w) {
    Bytes f = w.frame();
    c.out.insert(c.out.end(), f.begin(), f.end());
  }
  bool present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
  }

  net::Socket listener_;
  std::string token_;
  std::string where_;
  int wake_fd_ = -1;
  std::mutex stop_mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Owned by the poll thread only.
  std::map<std::string, Bytes> data_;
  std::map<int, Client> clients_;
};

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    int timeout_ms = -1;
    auto now = Clock::now();
    for (auto& [fd, c] : clients_) {
      short ev = c.closing ? 0 : POLLIN;
      if (c.out_off < c.out.size()) ev |= POLLOUT;
      fds.push_back({fd, ev, 0});
      if (c.pending) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(c.deadline - now).count();
        left = std::max<int64_t>(0, std::min<int64_t>(left, 1 << 30));
        timeout_ms = timeout_ms < 0 ? int(left) : std::min(timeout_ms, int(left));
      }
    }
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      TS_LOG(ERROR) << "store server poll failed: " << std::strerror(errno);
      break;
    }
    if (stop_) break;
    if (fds[0].revents) {
      uint64_t n;
      ssize_t rc = ::read(wake_fd_, &n, sizeof(n));
      (void)rc;
    }
    if (fds[1].revents & POLLIN) accept_clients();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end()) continue;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_client(it->second);
    }
    // Parse input and complete parked requests until nothing changes: a set from
    // one client can release another client's get, whose next request may follow.
    bool progress = true;
    while (progress) {
      progress = false;
      now = Clock::now();
      for (auto& [fd, c] : clients_) {
        if (!c.dead && process_input(c)) progress = true;
      }
      for (auto& [fd, c] : clients_) {
        if (!c.dead && c.pending && try_complete(c, now)) progress = true;
      }
    }
    for (auto it = clients_.begin(); it != clients_.end();) {
      Client& c = it->second;
      if (!c.dead) flush(c);
      if (c.dead || (c.closing && c.out_off == c.out.size())) {
        it = clients_.erase(it);  // Socket closes the fd
      } else {
        ++it;
      }
    }
  }
  clients_.clear();  // closing every connection is how clients learn we stopped
  listener_.reset();
}

void TcpStoreServer::Impl::accept_clients() {
  while (true) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        TS_LOG(WARN) << "store server accept failed: " << std::strerror(errno);
      }
      return;
    }
    net::set_nodelay(fd);
    Client& c = clients_[fd];
    c = Client{};
    c.sock = net::Socket(fd);
  }
}

void TcpStoreServer::Impl::read_client(Client& c) {
  uint8_t buf[65536];
  while (true) {
    ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      if (!c.closing) c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // EOF or reset: the client went away (a parked request dies with it)
    return;
  }
}

void TcpStoreServer::Impl::flush(Client& c) {
  while (c.out_off < c.out.size()) {
    ssize_t n =
        ::send(c.sock.fd(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      c.dead = true;
      return;
    }
  }
  c.out.clear();
  c.out_off = 0;
}

// Handles every complete frame in c.in until the client parks a blocking request.
// Returns whether anything was handled.
bool TcpStoreServer::Impl::process_input(Client& c) {
  bool any = false;
  while (!c.pending && !c.closing && c.in.size() - c.in_off >= 4) {
    uint32_t len = proto::decode_length(c.in.data() + c.in_off);
    uint32_t limit = c.authed ? proto::kMaxFrame : proto::kMaxHandshakeFrame;
    if (len > limit) {
      TS_LOG(WARN) << where_ << ": dropping a client that sent a " << len
                   << "-byte frame (not a Tessera store client?)";
      c.dead = true;
      return any;
    }
    if (c.in.size() - c.in_off < 4 + size_t{len}) break;
    proto::Reader r(c.in.data() + c.in_off + 4, len);
    c.in_off += 4 + size_t{len};
    any = true;
    try {
      if (c.authed) {
        handle_request(c, r);
      } else {
        handle_handshake(c, r);
      }
    } catch (const Error& e) {
      TS_LOG(WARN) << where_
                   << ": dropping a client after a malformed message: " << e.bare_message();
      c.dead = true;
      return any;
    }
  }
  if (c.in_off > 0 && c.in_off == c.in.size()) {
    c.in.clear();
    c.in_off = 0;
  } else if (c.in_off > (1u << 20)) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_off));
    c.in_off = 0;
  }
  return any;
}

void TcpStoreServer::Impl::handle_handshake(Client& c, proto::Reader& r) {
  std::string refusal;
  uint32_t magic = r.u32();
  if (magic != proto::kMagic) {
    refusal = "the peer is not a Tessera store (wrong protocol magic); check MASTER_PORT";
  } else {
    uint32_t version = r.u32();
    std::string token = r.str();
    if (version != proto::kVersion) {
      refusal = c10::str("protocol version ", version, " but the server speaks ", proto::kVersion,
                         "; run the same Tessera build on every host");
    } else if (!token_.empty() && !token_equal(token, token_)) {
      refusal = "wrong job token (set TESSERA_JOB_TOKEN to the job's token)";
    }
  }
  proto::Writer w;
  if (refusal.empty()) {
    c.authed = true;
    w.u8(uint8_t(Status::kOk)).blob(std::string());
  } else {
    TS_LOG(WARN) << where_ << " refused a client: " << refusal;
    c.closing = true;
    w.u8(uint8_t(Status::kError)).blob(refusal);
  }
  send(c, w);
}

void TcpStoreServer::Impl::handle_request(Client& c, proto::Reader& r) {
  proto::Writer w;
  auto op = static_cast<Op>(r.u8());
  auto park = [&](Op pop, std::vector<std::string> keys, int64_t timeout_ms) {
    timeout_ms = std::max<int64_t>(0, std::min<int64_t>(timeout_ms, int64_t{1} << 40));
    c.pending = true;
    c.pending_op = pop;
    c.pending_keys = std::move(keys);
    c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  };
  switch (op) {
    case Op::kSet: {
      std::string key = r.str();
      data_[key] = r.bytes();
      w.u8(uint8_t(Status::kOk));
      break;
    }
    case Op::kGet: {
      std::string key = r.str();
      int64_t timeout_ms = r.i64();
      park(Op::kGet, {key}, timeout_ms);
      return;  // answered by try_complete, maybe right away
    }
    case Op::kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      auto it = data_.find(key);
      try {
        int64_t value = (it == data_.end() ? 0 : parse_counter(key, it->second)) + delta;
        data_[key] = encode_counter(value);
        w.u8(uint8_t(Status::kOk)).i64(value);
      } catch (const Error& e) {
        w.u8(uint8_t(Status::kError)).blob(e.bare_message());
      }
      break;
    }
    case Op::kCompareSet: {
      std::string key = r.str();
      Bytes expected = r.bytes();
      Bytes desired = r.bytes();
      auto it = data_.find(key);
      w.u8(uint8_t(Status::kOk));
      if (it == data_.end()) {
        if (!expected.empty()) {
          w.blob(expected);  // c10d: an absent key with a non-empty expected is unchanged
        } else {
          data_[key] = desired;
          w.blob(desired);
        }
      } else if (it->second == expected) {
        it->second = desired;
        w.blob(desired);
      } else {
        w.blob(it->second);
      }
      break;
    }
    case Op::kDelete:
      w.u8(uint8_t(Status::kOk)).u8(data_.erase(r.str()) > 0 ? 1 : 0);
      break;
    case Op::kCheck:
      w.u8(uint8_t(Status::kOk)).u8(present(r.strings()) ? 1 : 0);
      break;
    case Op::kWait: {
      auto keys = r.strings();
      int64_t timeout_ms = r.i64();
      park(Op::kWait, std::move(keys), timeout_ms);
      return;
    }
    case Op::kNumKeys:
      w.u8(uint8_t(Status::kOk)).i64(static_cast<int64_t>(data_.size()));
      break;
    default:
      TS_THROW(StoreError, "unknown store request ", int(op));
  }
  send(c, w);
}

// Answers c's parked request if its keys are present or its deadline passed.
bool TcpStoreServer::Impl::try_complete(Client& c, Clock::time_point now) {
  if (present(c.pending_keys)) {
    proto::Writer w;
    w.u8(uint8_t(Status::kOk));
    if (c.pending_op == Op::kGet) w.blob(data_.at(c.pending_keys[0]));
    send(c, w);
  } else if (now >= c.deadline) {
    reply_timeout(c, c.pending_keys);
  } else {
    return false;
  }
  c.pending = false;
  c.pending_keys.clear();
  return true;
}

void TcpStoreServer::Impl::reply_timeout(Client& c, const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!data_.count(k)) missing.push_back(k);
  }
  proto::Writer w;
  w.u8(uint8_t(Status::kTimeout)).strings(missing);
  send(c, w);
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string token) : host_(host) {
  net::Socket listener = net::listen_tcp(host, port);
  port_ = net::local_port(listener.fd());
  impl_ = std::make_unique<Impl>(std::move(listener), std::move(token),
                                 c10::str("store server at ", host_, ":", port_));
  TS_LOG(DEBUG) << "store server listening on " << host_ << ":" << port_;
}

TcpStoreServer::~TcpStoreServer() = default;

void TcpStoreServer::stop() { impl_->stop(); }

}  // namespace tessera::comm
