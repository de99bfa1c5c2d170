#include "tessera/comm/agent_store.h"

#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/check.h"

namespace tessera {

std::shared_ptr<comm::Store> make_agent_store_client(const LaunchInfo& info,
                                                     const std::string& token,
                                                     std::chrono::milliseconds timeout) {
  if (info.launcher == "tessera") {
    return std::make_shared<comm::TcpStore>(info.master_addr, info.master_port, token, timeout);
  }
  TS_THROW(ConfigError, "TORCHELASTIC_USE_AGENT_STORE is set but this build cannot join a "
                        "torchrun agent store; start the job with `tessera run`");
}

}  // namespace tessera
