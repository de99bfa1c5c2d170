// Which address the gloo backend binds and advertises, and the TCP device on it.
//
// The address must be one every other rank of the group can reach:
//   1. TESSERA_GLOO_HOSTNAME, if set (a hostname or an IP of this host);
//   2. TESSERA_GLOO_IFACE, if set (bind to that interface's address);
//   3. the rendezvous host (the store's host, node 0; MASTER_ADDR when none is
//      given) when it is a loopback address (single-host jobs: everything stays
//      on 127.0.0.0/8);
//   4. otherwise the local address of this host's route to the rendezvous host
//      (multi-host jobs, network namespaces): the one interface known to reach
//      node 0;
//   5. if it has no route, this host's name as resolved by getaddrinfo.
// Pure functions of the environment; thread-safe.
#pragma once

#include <memory>
#include <string>

namespace gloo::transport {
class Device;
}

namespace tessera::comm {

struct GlooAddress {
  std::string hostname;  // exactly one of hostname / iface is set
  std::string iface;
  std::string source;    // which rule chose it, for logs and errors
};

// Applies the rules above to the current environment.
// `rendezvous_host`: the host the job's store is reached at (BackendContext);
// empty: MASTER_ADDR.
GlooAddress choose_gloo_address(const std::string& rendezvous_host = "");

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// A TCP device bound to `address`; CommError naming the address and the
// variable to set when it can't be created.
std::shared_ptr<::gloo::transport::Device> make_gloo_device(const GlooAddress& address);

}  // namespace tessera::comm
