// tessera::init() / shutdown(): join the job this process was started in.
//
// init() reads the environment of whichever launcher started the process:
//   * `tessera run` and torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//     GROUP_RANK, MASTER_ADDR, MASTER_PORT; with TORCHELASTIC_USE_AGENT_STORE the
//     launcher hosts the store and every rank joins it as a client;
//   * mpirun (Open MPI): OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE};
//   * Slurm srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...; the store is on
//     node 0 (the first host of SLURM_STEP_NODELIST) at MASTER_PORT, else at a
//     port derived from SLURM_JOB_ID and SLURM_STEP_ID;
//   * nothing: a single-process job (rank 0 of 1) with an in-memory store.
// Without an agent store, rank 0 hosts a TcpStore on MASTER_ADDR:MASTER_PORT.
// It then creates the default ProcessGroup (backend from TESSERA_BACKEND).
// It also applies the host memory policy (core/host_memory.h, TESSERA_HOST_MEMORY_CACHE),
// and where CUDA devices are visible makes device LOCAL_RANK % count current.
//
// Not thread-safe: call once from the main thread before anything distributed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tessera/comm/process_group.h"
#include "tessera/comm/base/store.h"

namespace tessera {

// Where this process sits in the job, as read from the environment.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Where rank 0's store listens when it hosts one; empty: master_addr.
  std::string store_bind_addr;
  bool use_agent_store = false;  // the launcher hosts the store
  std::string launcher = "none";  // "tessera", "torchrun", "mpirun", "slurm", "none"
  // Reads the environment; ConfigError naming the variable when inconsistent.
  static LaunchInfo from_env();
};

struct InitOptions {
  std::string backend;  // empty: TESSERA_BACKEND
  std::optional<double> timeout_seconds;  // empty: TESSERA_TIMEOUT
  std::optional<double> stall_warn_seconds;      // empty: TESSERA_STALL_WARN
  std::optional<double> stall_shutdown_seconds;  // empty: TESSERA_STALL_SHUTDOWN
};

// Joins the job and creates the default group. Idempotent.
void init(const InitOptions& options = {});
bool is_initialized();
// Tears down the default group and the store connection. Idempotent.
void shutdown();

const LaunchInfo& launch_info();
// The default group (ConfigError if init() has not run).
std::shared_ptr<comm::ProcessGroup> default_group();
std::shared_ptr<comm::Store> default_store();

}  // namespace tessera
