#include <string>

#include "tessera/comm/init.h"
#include "tessera/comm/slurm_env.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera {
namespace {

int read_int(const char* name, int fallback) {
  if (!env::get(name)) return fallback;
  long long v = env::get_int(name);
  TS_CHECK_T(ConfigError, v >= 0 && v < (1LL << 31), "environment variable ", name, "=", v,
             " is out of range");
  return static_cast<int>(v);
}

}  // namespace

LaunchInfo LaunchInfo::from_env() {
  LaunchInfo info;
  if (env::get("RANK") || (env::get("WORLD_SIZE") && !env::get("JOB_COMPLETION_INDEX"))) {
    TS_CHECK_T(ConfigError, env::get("RANK") && env::get("WORLD_SIZE"),
               "RANK and WORLD_SIZE must be set together (start workers with `tessera run`)");
    info.launcher = env::get("TESSERA_LAUNCHER")       ? "tessera"
                    : env::get("TORCHELASTIC_RUN_ID") ? "torchrun"
                                                      : "env";
    info.rank = read_int("RANK", 0);
    info.world_size = read_int("WORLD_SIZE", 1);
    info.local_rank = read_int("LOCAL_RANK", info.rank);
    info.local_world_size = read_int("LOCAL_WORLD_SIZE", info.world_size);
    info.node_rank = read_int("GROUP_RANK", 0);
    std::string agent = env::get_string("TORCHELASTIC_USE_AGENT_STORE");
    // Under `tessera run` the launcher hosts the store (TESSERA_STORE_ADDR/PORT)
    // and MASTER_PORT belongs to torch.distributed programs.
    info.use_agent_store =
        agent == "True" || agent == "true" || agent == "1" || info.launcher == "tessera";
  } else if (env::get("JOB_COMPLETION_INDEX")) {
    // A Kubernetes Indexed Job, one rank per pod (docs/kubernetes.md): the pod's
    // index is its rank; the manifest sets WORLD_SIZE (the Job's completions).
    info.launcher = "kubernetes";
    TS_CHECK_T(ConfigError, env::get("WORLD_SIZE"),
               "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but WORLD_SIZE is not: set "
               "it to the Job's completions in the pod template (docs/kubernetes.md)");
    info.rank = read_int("JOB_COMPLETION_INDEX", 0);
    info.world_size = read_int("WORLD_SIZE", 1);
    info.local_rank = 0;
    info.local_world_size = 1;
    info.node_rank = info.rank;
  } else if (env::get("OMPI_COMM_WORLD_RANK")) {
    info.launcher = "mpirun";
    info.rank = read_int("OMPI_COMM_WORLD_RANK", 0);
    info.world_size = read_int("OMPI_COMM_WORLD_SIZE", 1);
    info.local_rank = read_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    info.local_world_size = read_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    info.node_rank = read_int("OMPI_COMM_WORLD_NODE_RANK", 0);
  } else if (env::get("SLURM_PROCID")) {
    info.launcher = "slurm";
    info.rank = read_int("SLURM_PROCID", 0);
    info.world_size = read_int("SLURM_NTASKS", 1);
    info.local_rank = read_int("SLURM_LOCALID", 0);
    info.node_rank = read_int("SLURM_NODEID", 0);
    info.local_world_size = comm::slurm_tasks_on_node(info.node_rank, 1);
  }
  const bool slurm = info.launcher == "slurm";
  if (env::get("MASTER_ADDR")) {
    info.master_addr = env::get_string("MASTER_ADDR");
  } else if (slurm) {
    // Rank 0 runs on node 0, which is not always the node that ran srun (an
    // salloc shell on a login node): clients reach node 0 by name, and rank 0
    // listens on every address of its own node, whatever that name resolves to.
    const std::string node0 = comm::slurm_first_node();
    if (!node0.empty()) {
      TS_CHECK_T(ConfigError, info.rank != 0 || info.node_rank == 0,
                 "Slurm placed task 0 on node ", info.node_rank, " of the step, not on ", node0,
                 " (the first of SLURM_STEP_NODELIST), where the other tasks look for its store;"
                 " use srun's default --distribution=block, or set MASTER_ADDR to task 0's host");
      info.master_addr = node0;
      info.store_bind_addr = "0.0.0.0";
    } else if (env::get("SLURM_LAUNCH_NODE_IPADDR")) {
      info.master_addr = env::get_string("SLURM_LAUNCH_NODE_IPADDR");
    }
  }
  if (auto addr = env::get("TESSERA_STORE_ADDR")) info.master_addr = *addr;
  info.master_port = slurm && !env::get("MASTER_PORT") ? comm::slurm_store_port()
                                                        : read_int("MASTER_PORT", 29500);
  if (env::get("TESSERA_STORE_PORT")) info.master_port = read_int("TESSERA_STORE_PORT", 29500);
  TS_CHECK_T(ConfigError, info.world_size >= 1, "the world size must be at least 1, got ",
             info.world_size, " (", info.launcher, " environment)");
  TS_CHECK_T(ConfigError, info.rank < info.world_size, "rank ", info.rank,
             " is not below the world size ", info.world_size, " (", info.launcher,
             " environment)");
  TS_CHECK_T(ConfigError, info.master_port > 0 && info.master_port < 65536, "MASTER_PORT ",
             info.master_port, " is not a TCP port");
  return info;
}

}  // namespace tessera
