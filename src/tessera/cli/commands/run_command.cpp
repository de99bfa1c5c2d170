// tessera run: torchrun for Tessera. One node: hosts the job's store, starts the
// local workers, supervises them, and restarts them all after a failure while
// --max-restarts allows (docs/launcher.md). Several nodes: one agent per node
// (node_agent.h), started by hand, by a scheduler, or over SSH from a hostfile
// (ssh_launch.h) or srun (slurm_launch.h); docs/multihost.md, docs/slurm.md.
#include <cstdio>
#include <memory>
#include <vector>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/launcher/error_file.h"
#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/hang_watch.h"
#include "tessera/cli/launcher/launch_options.h"
#include "tessera/cli/launcher/local_workers.h"
#include "tessera/cli/launcher/node_agent.h"
#include "tessera/cli/launcher/slurm_launch.h"
#include "tessera/cli/launcher/ssh_launch.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/supervisor.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/cli/launcher/worker_process.h"
#include "tessera/comm/base/socket_util.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/logging.h"

namespace tessera::cli {
namespace {

int launch(const LaunchOptions& o) {
  JobContext job;
  job.master_addr = o.master_addr;
  job.master_port = o.master_port;
  job.token = job_token(o, true);

  // Handlers first: a Ctrl-C from here on tears the job down instead of
  // killing the launcher mid-start.
  Supervisor supervisor(o.grace_period);
  HangWatch hang_watch(o.heartbeat_timeout, o.stall_shutdown);
  job.heartbeat_prefix = hang_watch.file_prefix();
  job.heartbeat_timeout = o.heartbeat_timeout;
  std::unique_ptr<comm::TcpStoreServer> store;
  if (o.node_rank == 0) {
    // Binds before any worker starts, so a busy port fails the launch cleanly.
    store = std::make_unique<comm::TcpStoreServer>(o.bind_addr(), o.master_port, job.token);
    job.master_port = store->port();
  }
  job.torch_port = torch_program_port(o, job.master_port);
  TS_LOG(DEBUG) << "tessera run: " << o.nproc_per_node << " workers on node " << o.node_rank
                << " of " << o.nnodes << ", store " << o.master_addr << ":" << job.master_port;

  std::vector<int> ranks;
  for (int local = 0; local < o.nproc_per_node; ++local) ranks.push_back(o.global_rank(local));
  OutputRelay relay(ranks, o.log_dir);

  for (int attempt = 0;; ++attempt) {
    if (int sig = supervisor.take_pending_signal()) return 128 + sig;
    if (attempt > 0 && store) {
      // A fresh store on the same port: no key of the failed attempt (addresses,
      // sequence numbers) can mislead the next one.
      store.reset();
      store = std::make_unique<comm::TcpStoreServer>(o.bind_addr(), job.master_port, job.token);
    }
    job.restart_count = attempt;
    hang_watch.new_round();
    auto workers = start_workers(o, job);
    RoundResult result = supervisor.supervise(workers, relay, &hang_watch);
    workers.clear();
    if (result.success) return 0;
    print_to_stderr(format_failure_summary(result, relay));
    if (result.launcher_signal != 0 || attempt >= o.max_restarts) {
      const auto env_file = env::get("TORCHELASTIC_ERROR_FILE");
      write_error_file(!o.error_file.empty() ? o.error_file : env_file ? *env_file : "", result,
                       relay, attempt);
      return round_exit_code(result);
    }
    print_to_stderr("tessera run: restarting all workers (restart " + std::to_string(attempt + 1) +
                    " of " + std::to_string(o.max_restarts) + ")\n");
  }
}

}  // namespace

int run_command(const Args& args) {
  LaunchOptions options = parse_launch_options(args);
  if (options.help) {
    std::fputs(launch_usage().c_str(), stdout);
    return 0;
  }
  if (options.env_from_stdin) read_environment_from_stdin();
  if (options.launcher == "slurm") {
    if (!options.slurm_agent) return run_under_slurm(options);
    options = slurm_agent_options(options);
  }
  if (options.over_ssh()) return run_over_ssh(options);
  if (options.nnodes > 1) return run_node_agent(options);
  return launch(options);
}

}  // namespace tessera::cli
