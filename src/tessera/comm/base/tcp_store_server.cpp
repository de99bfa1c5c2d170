// TcpStoreServer: one poll() thread serving every client of the job's store.
//
// Each client has an input buffer (bytes not yet parsed), an output buffer and at
// most one pending blocking request (get/wait) with its own deadline. A pending
// client is parked, not waited on, so one rank blocked in get() never delays the
// others: after every mutation the parked requests are re-checked, and the poll
// timeout is the nearest deadline. stop() wakes the thread through an eventfd.
//
// Peers are not trusted to be well-behaved. A frame over the limit (64 KiB before
// the handshake, proto::kMaxFrame after), a malformed request, or more buffered
// input or unsent output than one client may hold gets an error reply (if the peer
// still reads) and the connection is closed; every other client keeps being
// served. So one connection can make the server hold at most about three frames
// (~200 MiB; ~200 KiB before it authenticates), however it misbehaves.
#include <arpa/inet.h>
#include <netinet/in.h>
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

// One recv() worth: buffers may overshoot their limit by this much before we check.
constexpr size_t kRecvChunk = 65536;
// Unparsed input one client may have buffered: its next frame, whole, plus one
// recv(). A conforming client has one request in flight, so it never gets close.
size_t max_input(bool authed) {
  return 4 + size_t{authed ? proto::kMaxFrame : proto::kMaxHandshakeFrame} + kRecvChunk;
}
// Unsent output past which a client is dropped before its next request is
// handled: it is not reading its replies. One reply (<= one frame) always fits.
constexpr size_t kMaxOutput = 4 + size_t{proto::kMaxFrame} + kRecvChunk;
// An emptied buffer whose capacity is larger than this is freed, so a client that
// once sent a large value does not keep that much memory reserved while idle.
constexpr size_t kKeepCapacity = 1u << 20;

void release_if_empty(Bytes& b, size_t& off) {
  if (off == 0 || off != b.size()) return;
  if (b.capacity() > kKeepCapacity) {
    Bytes().swap(b);
  } else {
    b.clear();
  }
  off = 0;
}

struct Client {
  net::Socket sock;
  Bytes in;
  size_t in_off = 0;
  Bytes out;
  size_t out_off = 0;
  bool authed = false;
  bool closing = false;  // close once `out` is sent (refused or rejected)
  bool dead = false;
  // The parked get/wait, if any.
  bool pending = false;
  Op pending_op = Op::kGet;
  std::vector<std::string> pending_keys;
  Clock::time_point deadline;
};

// "ADDR:PORT" of a connected client, for messages naming who was refused.
std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET) {
    return "an unknown address";
  }
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

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
  bool check_next_frame(Client& c);
  void reject(Client& c, const std::string& why);
  void handle_handshake(Client& c, const proto::Handshake& h);
  void handle_request(Client& c, proto::Request q);
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
  uint8_t buf[kRecvChunk];
  while (true) {
    ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      if (c.closing) continue;  // refused: its input is discarded until the reply is out
      c.in.insert(c.in.end(), buf, buf + n);
      // Checked as bytes arrive, so an oversized frame is refused before its body
      // is buffered, and a client that floods us is cut off at its limit.
      if (!check_next_frame(c)) return;
      if (c.in.size() - c.in_off > max_input(c.authed)) {
        reject(c, c10::str("the client sent more than ", max_input(c.authed),
                           " bytes without waiting for replies"));
        return;
      }
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
  release_if_empty(c.out, c.out_off);
}

// Rejects c if the frame at the front of its input announces more than the limit;
// returns whether c is still fine.
bool TcpStoreServer::Impl::check_next_frame(Client& c) {
  if (c.closing || c.in.size() - c.in_off < 4) return !c.closing;
  const uint32_t len = proto::decode_length(c.in.data() + c.in_off);
  const uint32_t limit = c.authed ? proto::kMaxFrame : proto::kMaxHandshakeFrame;
  if (len <= limit) return true;
  reject(c, c10::str("a ", len, "-byte frame is over the store's ", limit, "-byte limit",
                     c.authed ? "; store values must be smaller"
                              : " for a handshake (not a Tessera store client?)"));
  return false;
}

// Queues an error reply, then the connection is closed once it is sent. The
// client's buffered input and any parked request are dropped.
void TcpStoreServer::Impl::reject(Client& c, const std::string& why) {
  TS_LOG(WARN) << where_ << ": dropping a client: " << why;
  c.in.clear();
  c.in.shrink_to_fit();
  c.in_off = 0;
  c.pending = false;
  c.pending_keys.clear();
  c.closing = true;
  proto::Writer w;
  w.u8(uint8_t(Status::kError)).blob(why + " (the store server closed this connection)");
  send(c, w);
}

// Handles every complete frame in c.in until the client parks a blocking request.
// Returns whether anything was handled.
bool TcpStoreServer::Impl::process_input(Client& c) {
  bool any = false;
  while (!c.pending && !c.closing && c.in.size() - c.in_off >= 4) {
    if (c.out.size() - c.out_off > kMaxOutput) {
      // Pipelined requests, replies never read (a reply can be far larger than
      // its request): drop it before it makes us hold more.
      TS_LOG(WARN) << where_ << ": dropping a client that does not read its replies ("
                   << c.out.size() - c.out_off << " bytes unsent)";
      c.dead = true;
      return true;
    }
    if (!check_next_frame(c)) return true;
    const uint32_t len = proto::decode_length(c.in.data() + c.in_off);
    if (c.in.size() - c.in_off < 4 + size_t{len}) break;
    const uint8_t* payload = c.in.data() + c.in_off + 4;
    c.in_off += 4 + size_t{len};
    any = true;
    try {
      if (c.authed) {
        handle_request(c, proto::decode_request(payload, len));
      } else {
        handle_handshake(c, proto::decode_handshake(payload, len));
      }
    } catch (const Error& e) {
      reject(c, e.bare_message());
      return true;
    }
  }
  if (c.in_off > 0 && c.in_off == c.in.size()) {
    release_if_empty(c.in, c.in_off);
  } else if (c.in_off > (1u << 20)) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_off));
    c.in_off = 0;
  }
  return any;
}

void TcpStoreServer::Impl::handle_handshake(Client& c, const proto::Handshake& h) {
  std::string refusal;
  if (h.magic != proto::kMagic) {
    refusal = "the peer is not a Tessera store (wrong protocol magic); check MASTER_PORT";
  } else {
    if (h.version != proto::kVersion) {
      refusal = c10::str("protocol version ", h.version, " but the server speaks ", proto::kVersion,
                         "; run the same Tessera build on every host");
    } else if (!token_.empty() && !token_equal(h.token, token_)) {
      refusal = "wrong job token (set TESSERA_JOB_TOKEN to the job's token)";
    }
  }
  proto::Writer w;
  if (refusal.empty()) {
    c.authed = true;
    w.u8(uint8_t(Status::kOk)).blob(std::string());
  } else {
    TS_LOG(WARN) << where_ << " refused a client from " << peer_address(c.sock.fd()) << ": "
                 << refusal;
    c.closing = true;
    w.u8(uint8_t(Status::kError)).blob(refusal);
  }
  send(c, w);
}

void TcpStoreServer::Impl::handle_request(Client& c, proto::Request q) {
  proto::Writer w;
  auto park = [&](Op pop, std::vector<std::string> keys, int64_t timeout_ms) {
    timeout_ms = std::max<int64_t>(0, std::min<int64_t>(timeout_ms, int64_t{1} << 40));
    c.pending = true;
    c.pending_op = pop;
    c.pending_keys = std::move(keys);
    c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  };
  switch (q.op) {
    case Op::kSet:
      data_[q.key] = std::move(q.value);  // up to 64 MiB: not copied
      w.u8(uint8_t(Status::kOk));
      break;
    case Op::kGet:
      park(Op::kGet, {q.key}, q.timeout_ms);
      return;  // answered by try_complete, maybe right away
    case Op::kAdd: {
      auto it = data_.find(q.key);
      try {
        const int64_t old = it == data_.end() ? 0 : parse_counter(q.key, it->second);
        int64_t value = 0;
        TS_CHECK_T(StoreError, !__builtin_add_overflow(old, q.delta, &value), "add(", q.delta,
                   ") to store key '", q.key, "' (", old, ") overflows a 64-bit counter");
        data_[q.key] = encode_counter(value);
        w.u8(uint8_t(Status::kOk)).i64(value);
      } catch (const Error& e) {
        w.u8(uint8_t(Status::kError)).blob(e.bare_message());
      }
      break;
    }
    case Op::kCompareSet: {
      auto it = data_.find(q.key);
      w.u8(uint8_t(Status::kOk));
      if (it == data_.end()) {
        if (!q.expected.empty()) {
          w.blob(q.expected);  // c10d: an absent key with a non-empty expected is unchanged
        } else {
          data_[q.key] = q.desired;
          w.blob(q.desired);
        }
      } else if (it->second == q.expected) {
        it->second = q.desired;
        w.blob(q.desired);
      } else {
        w.blob(it->second);
      }
      break;
    }
    case Op::kDelete:
      w.u8(uint8_t(Status::kOk)).u8(data_.erase(q.key) > 0 ? 1 : 0);
      break;
    case Op::kCheck:
      w.u8(uint8_t(Status::kOk)).u8(present(q.keys) ? 1 : 0);
      break;
    case Op::kWait:
      park(Op::kWait, std::move(q.keys), q.timeout_ms);
      return;
    case Op::kNumKeys:
      w.u8(uint8_t(Status::kOk)).i64(static_cast<int64_t>(data_.size()));
      break;
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
