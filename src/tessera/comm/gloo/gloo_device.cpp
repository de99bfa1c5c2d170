#include "tessera/comm/gloo/gloo_device.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tessera/comm/gloo/gloo_error.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::comm {

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  return false;
}

namespace {

// The local address the kernel routes to `host` from, or "" if host doesn't
// resolve or has no route. connect() on a UDP socket only picks the route: no
// packet is sent.
std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  // Any port: only the route is wanted.
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string address;
  for (addrinfo* ai = found; ai != nullptr && address.empty(); ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {0};
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* raw = &reinterpret_cast<sockaddr_in*>(&local)->sin_addr;
      if (local.ss_family == AF_INET6) raw = &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr;
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return address;
}

}  // namespace

GlooAddress choose_gloo_address(const std::string& rendezvous_host) {
  const std::string master =
      rendezvous_host.empty() ? env::get_string("MASTER_ADDR") : rendezvous_host;
  const std::string from = rendezvous_host.empty() ? "MASTER_ADDR" : "the store host";
  GlooAddress a;
  if (auto h = env::get("TESSERA_GLOO_HOSTNAME")) {
    a.hostname = *h;
    a.source = "TESSERA_GLOO_HOSTNAME";
  } else if (auto i = env::get("TESSERA_GLOO_IFACE")) {
    a.iface = *i;
    a.source = "TESSERA_GLOO_IFACE";
  } else if (is_loopback_host(master)) {
    a.hostname = master;
    a.source = from + " (loopback)";
  } else if (std::string local = local_address_toward(master); !local.empty()) {
    // The host name often resolves to 127.0.1.1 (Debian's /etc/hosts), which no
    // other host can reach; the address this host reaches MASTER_ADDR from can be.
    a.hostname = local;
    a.source = "the route to " + from + " " + master;
  } else {
    char name[256] = {0};
    TS_CHECK_ERRNO(CommError, gethostname(name, sizeof(name) - 1),
                   "gloo: cannot read this host's name (set TESSERA_GLOO_HOSTNAME)");
    a.hostname = name;
    a.source = "the local hostname";
  }
  return a;
}

std::shared_ptr<::gloo::transport::Device> make_gloo_device(const GlooAddress& address) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = address.hostname;
  attr.iface = address.iface;
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    TS_THROW(CommError, "gloo cannot bind to ",
             address.iface.empty() ? address.hostname : "interface " + address.iface,
             " (chosen from ", address.source, "): ", e.what(),
             "; set TESSERA_GLOO_HOSTNAME to an address of this host the other ranks can reach");
  }
  return device;
}

}  // namespace tessera::comm
