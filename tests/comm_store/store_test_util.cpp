#include "store_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tessera::testing {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<std::string> listen_addresses(int port) {
  // Lines: "sl local_address rem_address st ..."; addresses are HEX_IP:HEX_PORT
  // with the IP in host (little-endian) byte order; st 0A is LISTEN.
  std::vector<std::string> out;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::string sl, local, remote, state;
    ss >> sl >> local >> remote >> state;
    auto colon = local.find(':');
    if (colon == std::string::npos || state != "0A") continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
    in_addr a{};
    a.s_addr = static_cast<in_addr_t>(std::stoul(local.substr(0, colon), nullptr, 16));
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, buf, sizeof(buf));
    out.push_back(buf);
  }
  return out;
}

}  // namespace tessera::testing
