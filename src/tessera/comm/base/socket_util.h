// Small POSIX TCP helpers for the store (private to comm/base).
//
// Every call that can block takes a deadline and polls, so nothing here waits
// forever. Sends use MSG_NOSIGNAL: a peer that vanished is an error, never a
// SIGPIPE that kills the process. Failures throw StoreError with strerror and a
// hint; callers add which store they were talking to.
//
// Thread safety: free functions, no shared state. A Socket is owned by one object.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/timer.h"

namespace tessera::comm::net {

// Owns a file descriptor; closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Resolves host (IPv4 literal or name) to an IPv4 address; StoreError if unknown.
sockaddr_in resolve_ipv4(const std::string& host, int port);

// Binds exactly host:port (port 0: a free one) and listens. StoreError naming
// host:port if the port is in use or the address is not on this machine.
Socket listen_tcp(const std::string& host, int port);

// Local port of a bound socket.
int local_port(int fd);

// Result of one connect attempt: a connected socket, or why not (errno), so the
// caller can decide to retry (ECONNREFUSED while the server is starting).
struct ConnectResult {
  Socket socket;
  int error = 0;
};
ConnectResult try_connect(const sockaddr_in& addr, const Deadline& deadline);

void set_nonblocking(int fd);
void set_nodelay(int fd);

// Why an I/O call stopped early.
enum class IoStatus { kOk, kClosed, kTimeout };

// Sends all of data before deadline. kClosed when the peer reset or closed.
IoStatus send_all(int fd, const void* data, size_t size, const Deadline& deadline);
// Receives exactly size bytes before deadline. kClosed on EOF/ECONNRESET.
IoStatus recv_all(int fd, void* data, size_t size, const Deadline& deadline);

}  // namespace tessera::comm::net
