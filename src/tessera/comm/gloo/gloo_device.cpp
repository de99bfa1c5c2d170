#include "tessera/comm/gloo/gloo_device.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/device.h>
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

GlooAddress choose_gloo_address() {
  GlooAddress a;
  if (auto h = env::get("TESSERA_GLOO_HOSTNAME")) {
    a.hostname = *h;
    a.source = "TESSERA_GLOO_HOSTNAME";
  } else if (auto i = env::get("TESSERA_GLOO_IFACE")) {
    a.iface = *i;
    a.source = "TESSERA_GLOO_IFACE";
  } else if (std::string master = env::get_string("MASTER_ADDR"); is_loopback_host(master)) {
    a.hostname = master;
    a.source = "MASTER_ADDR (loopback)";
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
