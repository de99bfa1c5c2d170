// Helpers for the store tests: free ports and what /proc/net/tcp says about them.
#pragma once

#include <string>
#include <vector>

namespace tessera::testing {

// A port that was free a moment ago on 127.0.0.1 (bound to port 0, then closed).
int free_port();

// Local IPv4 addresses ("127.0.0.1") of sockets in LISTEN state on `port`,
// read from /proc/net/tcp.
std::vector<std::string> listen_addresses(int port);

}  // namespace tessera::testing
