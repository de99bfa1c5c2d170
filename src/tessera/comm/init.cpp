#include "tessera/comm/init.h"

#include <mutex>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "tessera/comm/agent_store.h"
#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/device_dispatch_backend.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/host_memory.h"
#include "tessera/core/logging.h"

namespace tessera {
namespace {

struct GlobalState {
  std::mutex mu;
  bool initialized = false;
  LaunchInfo info;
  std::unique_ptr<comm::TcpStoreServer> server;  // rank 0 without an agent store
  std::shared_ptr<comm::Store> store;
  std::shared_ptr<comm::ProcessGroup> group;
};

GlobalState& state() {
  static GlobalState s;
  return s;
}

std::shared_ptr<comm::Store> connect_store(const LaunchInfo& info, GlobalState& s,
                                           std::chrono::milliseconds timeout) {
  if (info.world_size == 1 && info.launcher == "none") return std::make_shared<comm::MemoryStore>();
  std::string token = env::get_string("TESSERA_JOB_TOKEN");
  if (info.use_agent_store) {
    // The launcher (tessera run or torchrun) hosts the store: join as a client and
    // never bind MASTER_PORT ourselves.
    return make_agent_store_client(info, token, timeout);
  }
  if (info.rank == 0) {
    s.server = std::make_unique<comm::TcpStoreServer>(
        info.store_bind_addr.empty() ? info.master_addr : info.store_bind_addr, info.master_port,
        token);
  }
  return std::make_shared<comm::TcpStore>(info.master_addr, info.master_port, token, timeout);
}

// Each local rank drives one GPU: LOCAL_RANK picks the CUDA device (indices
// count the devices CUDA_VISIBLE_DEVICES leaves visible), so that CUDA tensors
// and NCCL communicators land on it. Nothing happens without a GPU.
void select_cuda_device(const LaunchInfo& info) {
  const int gpus = comm::visible_cuda_devices();
  if (gpus == 0) return;
  const int device = info.local_rank % gpus;
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  TS_LOG(DEBUG) << "local rank " << info.local_rank << " uses cuda:" << device << " of " << gpus;
}

}  // namespace

void init(const InitOptions& options) {
  GlobalState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized) return;
  LaunchInfo info = LaunchInfo::from_env();
  log::level_from_env();  // a misspelt TESSERA_LOG_LEVEL is an error, not info
  set_rank_context(info.rank, info.world_size);
  select_cuda_device(info);
  const HostMemoryPolicy memory = configure_host_memory();
  comm::ProcessGroupOptions pg = comm::ProcessGroupOptions::from_env("default");
  if (!options.backend.empty()) pg.backend = options.backend;
  if (options.timeout_seconds) {
    TS_CHECK_T(ConfigError, *options.timeout_seconds > 0, "the timeout must be positive, got ",
               *options.timeout_seconds, " s");
    pg.timeout = std::chrono::milliseconds(static_cast<int64_t>(*options.timeout_seconds * 1000));
  }
  if (options.stall_warn_seconds) pg.stall_warn = *options.stall_warn_seconds;
  if (options.stall_shutdown_seconds) pg.stall_shutdown = *options.stall_shutdown_seconds;
  // Under srun MASTER_ADDR is often unset: the store's host comes from the step's
  // node list, and gloo must bind the address that reaches it, not loopback.
  pg.rendezvous_host = info.master_addr;
  s.store = connect_store(info, s, pg.timeout);
  s.store->set_timeout(pg.timeout);
  s.group = std::make_shared<comm::ProcessGroup>(s.store, info.rank, info.world_size, pg);
  s.info = info;
  s.initialized = true;
  TS_LOG(DEBUG) << "joined a " << info.world_size << "-rank job started by " << info.launcher
                << " (backend " << s.group->backend_name()
                << "; host memory: " << memory.description << ")";
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().initialized;
}

void shutdown() {
  GlobalState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return;
  if (s.group) s.group->shutdown();
  s.group.reset();
  s.store.reset();
  s.server.reset();
  s.initialized = false;
}

const LaunchInfo& launch_info() {
  TS_CHECK_T(ConfigError, is_initialized(), "tessera::init() has not been called");
  return state().info;
}

std::shared_ptr<comm::ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(state().mu);
  TS_CHECK_T(ConfigError, state().initialized,
             "tessera::init() has not been called: call it before using the default group");
  return state().group;
}

std::shared_ptr<comm::Store> default_store() {
  std::lock_guard<std::mutex> lock(state().mu);
  TS_CHECK_T(ConfigError, state().initialized, "tessera::init() has not been called");
  return state().store;
}

}  // namespace tessera
