#include "tessera/comm/base/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tessera/core/check.h"

namespace tessera::comm::net {

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

sockaddr_in resolve_ipv4(const std::string& host, int port) {
  TS_CHECK_T(StoreError, port >= 0 && port <= 65535, "store port ", port,
             " is out of range; use 0..65535 (0 picks a free port)");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  TS_CHECK_T(StoreError, rc == 0 && res != nullptr, "cannot resolve store host '", host,
             "': ", gai_strerror(rc), "; check MASTER_ADDR (an IPv4 address or a host name)");
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

Socket listen_tcp(const std::string& host, int port) {
  sockaddr_in addr = resolve_ipv4(host, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  TS_CHECK_ERRNO(StoreError, s.fd(), "cannot create the store's listening socket");
  // SO_REUSEADDR only skips TIME_WAIT leftovers of an earlier run; Linux still
  // refuses a port another socket is listening on, which is the error we want.
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    TS_CHECK_T(StoreError, err != EADDRINUSE, "store address ", host, ":", port,
               " is in use; pick another --master-port, or 0 for a free one");
    TS_THROW(StoreError, "cannot bind the store to ", host, ":", port, ": ", std::strerror(err),
             "; MASTER_ADDR must be an address of this machine (127.0.0.1 for one host)");
  }
  if (::listen(s.fd(), 1024) != 0) {
    int err = errno;
    TS_CHECK_T(StoreError, err != EADDRINUSE, "store address ", host, ":", port,
               " is in use; pick another --master-port, or 0 for a free one");
    TS_THROW(StoreError, "cannot listen on ", host, ":", port, ": ", std::strerror(err));
  }
  return s;
}

int local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  TS_CHECK_ERRNO(StoreError, getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len),
                 "cannot read the store's port");
  return ntohs(addr.sin_port);
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  TS_CHECK_ERRNO(StoreError, fcntl(fd, F_SETFL, flags | O_NONBLOCK), "store socket");
}

void set_nodelay(int fd) {
  // Store requests are small request/response pairs: Nagle would add ~40 ms each.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

ConnectResult try_connect(const sockaddr_in& addr, const Deadline& deadline) {
  ConnectResult r;
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  TS_CHECK_ERRNO(StoreError, s.fd(), "cannot create a socket for the store");
  set_nonblocking(s.fd());
  // Non-blocking connect so an unroutable host cannot hold us past the deadline.
  if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      r.error = errno;
      return r;
    }
    pollfd p{s.fd(), POLLOUT, 0};
    int ready;
    do {
      ready = ::poll(&p, 1, std::max(1, deadline.remaining_ms()));
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      r.error = ETIMEDOUT;
      return r;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      r.error = err;
      return r;
    }
  }
  set_nodelay(s.fd());
  r.socket = std::move(s);
  return r;
}

namespace {
bool is_closed_errno(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED;
}

// Waits until fd is ready for `events` or the deadline passes.
IoStatus wait_ready(int fd, short events, const Deadline& deadline) {
  while (true) {
    if (deadline.expired()) return IoStatus::kTimeout;
    pollfd p{fd, events, 0};
    int ready = ::poll(&p, 1, std::max(1, std::min(deadline.remaining_ms(), 1000)));
    if (ready > 0) return IoStatus::kOk;  // readable, writable, HUP or ERR: the call says which
    if (ready < 0 && errno != EINTR) {
      TS_THROW(StoreError, "poll on a store socket failed: ", std::strerror(errno));
    }
  }
}
}  // namespace

IoStatus send_all(int fd, const void* data, size_t size, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      IoStatus st = wait_ready(fd, POLLOUT, deadline);
      if (st != IoStatus::kOk) return st;
      continue;
    }
    if (n < 0 && is_closed_errno(errno)) return IoStatus::kClosed;
    TS_THROW(StoreError, "send on a store socket failed: ", std::strerror(errno));
  }
  return IoStatus::kOk;
}

IoStatus recv_all(int fd, void* data, size_t size, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return IoStatus::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IoStatus st = wait_ready(fd, POLLIN, deadline);
      if (st != IoStatus::kOk) return st;
      continue;
    }
    if (is_closed_errno(errno)) return IoStatus::kClosed;
    TS_THROW(StoreError, "recv on a store socket failed: ", std::strerror(errno));
  }
  return IoStatus::kOk;
}

}  // namespace tessera::comm::net
