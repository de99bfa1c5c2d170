#include "tessera/comm/agent_store.h"

#include "tessera/comm/base/c10d_store.h"
#include "tessera/comm/base/tcp_store.h"

namespace tessera {

std::shared_ptr<comm::Store> make_agent_store_client(const LaunchInfo& info,
                                                     const std::string& token,
                                                     std::chrono::milliseconds timeout) {
  if (info.launcher == "tessera") {
    return std::make_shared<comm::TcpStore>(info.master_addr, info.master_port, token, timeout);
  }
  // torchrun's agent hosts a c10d TCPStore: speak its protocol as a client.
  return std::make_shared<comm::C10dStore>(info.master_addr, info.master_port, timeout);
}

}  // namespace tessera
