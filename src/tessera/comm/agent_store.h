// The store client for a job whose launcher hosts the store (an "agent store"):
// our TcpStore under `tessera run`, a c10d TCPStore client under torchrun.
// Workers join it; they never bind MASTER_PORT themselves.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tessera/comm/base/store.h"
#include "tessera/comm/init.h"

namespace tessera {

std::shared_ptr<comm::Store> make_agent_store_client(const LaunchInfo& info,
                                                     const std::string& token,
                                                     std::chrono::milliseconds timeout);

}  // namespace tessera
