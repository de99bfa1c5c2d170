#include "tessera/cli/launcher/slurm_launch.h"

#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/local_workers.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/ssh_launch.h"
#include "tessera/cli/launcher/supervisor.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/cli/launcher/worker_process.h"
#include "tessera/comm/slurm_env.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::cli {
namespace {

constexpr int kDefaultPort = 29500;

std::string required(const char* name, const char* why) {
  const auto v = env::get(name);
  TS_CHECK_T(ConfigError, v && !v->empty(), "--launcher slurm ", why, ", but ", name,
             " is not set; run it inside an allocation (an sbatch script or an salloc shell)");
  return *v;
}

}  // namespace

int run_under_slurm(const LaunchOptions& o) {
  required("SLURM_JOB_ID", "runs inside a Slurm allocation");
  const std::vector<std::string> hosts =
      comm::expand_slurm_hostlist(required("SLURM_JOB_NODELIST", "starts one agent per node"));
  TS_CHECK_T(ConfigError, !hosts.empty(), "SLURM_JOB_NODELIST names no host");
  const int nodes = static_cast<int>(hosts.size());
  TS_CHECK_T(ConfigError, !o.nnodes_given || o.nnodes == nodes, "--nnodes ", o.min_nodes, ":",
             o.nnodes, " does not match the allocation's ", nodes,
             " nodes; under --launcher slurm, MAX is the number of nodes");
  const int min_nodes = o.nnodes_given ? o.min_nodes : nodes;

  LaunchOptions agent = o;
  // The default port is shared by every job on a node; the job id makes one of its own.
  if (agent.master_port == kDefaultPort) agent.master_port = comm::slurm_store_port(0);
  const std::string master_addr = o.master_addr != "127.0.0.1" ? o.master_addr : hosts.front();
  std::vector<std::string> argv = {"srun",
                                   "--nodes=" + std::to_string(nodes),
                                   "--ntasks=" + std::to_string(nodes),
                                   "--ntasks-per-node=1",
                                   "--kill-on-bad-exit=0",
                                   this_executable()};
  std::vector<std::string> args =
      agent_arguments(agent, 0, o.nproc_per_node, min_nodes, nodes, master_addr);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--launcher", "slurm", "--slurm-agent", "--"});
  argv.insert(argv.end(), o.program.begin(), o.program.end());

  WorkerSpec spec;
  spec.argv = argv;
  // srun hands its environment to every task: the token travels there, not on argv.
  spec.env = current_environment();
  spec.env.push_back("TESSERA_JOB_TOKEN=" + job_token(o, true));
  Supervisor supervisor(o.grace_period * 2 + 10);
  std::vector<std::unique_ptr<WorkerProcess>> steps;
  steps.push_back(std::make_unique<WorkerProcess>(spec));
  OutputRelay relay({0}, "");
  relay.pass_through_all();
  RoundResult result = supervisor.supervise(steps, relay);
  if (result.launcher_signal != 0) return 128 + result.launcher_signal;
  const WorkerReport& srun = result.workers.front();
  if (srun.exit_code != 0 || srun.term_signal != 0) {
    print_to_stderr("tessera run: srun " + describe_exit(srun) + "\n");
  }
  return srun.term_signal != 0 ? 128 + srun.term_signal : srun.exit_code;
}

LaunchOptions slurm_agent_options(const LaunchOptions& o) {
  LaunchOptions a = o;
  required("SLURM_NODEID", "agents take their node rank from srun");
  const long long node = env::get_int("SLURM_NODEID");
  TS_CHECK_T(ConfigError, node >= 0 && node < o.nnodes, "SLURM_NODEID=", node,
             " is not a node of this ", o.nnodes, "-node job");
  a.node_rank = static_cast<int>(node);
  a.store_bind_addr = "0.0.0.0";
  if (!env::get("TESSERA_HOST_LABEL")) {
    if (auto name = env::get("SLURMD_NODENAME")) ::setenv("TESSERA_HOST_LABEL", name->c_str(), 1);
  }
  return a;
}

}  // namespace tessera::cli
