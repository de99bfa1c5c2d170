// tessera run: torchrun for Tessera. Parses the flags, hosts the job's store on
// node 0, starts the local workers, supervises them, and restarts them all after a
// failure while --max-restarts allows. See docs/launcher.md.
#include <cstdio>
#include <memory>
#include <vector>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/launch_options.h"
#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/supervisor.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/cli/launcher/worker_process.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/logging.h"

namespace tessera::cli {
namespace {

// Multi-node jobs share one secret; a single node may make one up.
std::string job_token(const LaunchOptions& o) {
  if (auto token = env::get("TESSERA_JOB_TOKEN")) return *token;
  TS_CHECK_T(ConfigError, o.nnodes == 1, "--nnodes ", o.nnodes,
             " needs the same TESSERA_JOB_TOKEN exported on every node "
             "(e.g. export TESSERA_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n'))");
  return random_job_token();
}

// Starts every local worker. If one cannot start, the ones already started are
// killed and reaped (by their destructors) before the error propagates.
std::vector<std::unique_ptr<WorkerProcess>> start_workers(const LaunchOptions& o,
                                                          const JobContext& job) {
  const std::vector<std::string> base = current_environment();
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerSpec spec;
    spec.rank = o.global_rank(local);
    spec.local_rank = local;
    spec.argv = o.program;
    spec.env = worker_environment(o, job, local, base);
    workers.push_back(std::make_unique<WorkerProcess>(spec));
  }
  return workers;
}

void print_to_stderr(const std::string& text) {
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

int launch(const LaunchOptions& o) {
  JobContext job;
  job.master_addr = o.master_addr;
  job.master_port = o.master_port;
  job.token = job_token(o);

  // Handlers first: a Ctrl-C from here on tears the job down instead of
  // killing the launcher mid-start.
  Supervisor supervisor(o.grace_period);
  std::unique_ptr<comm::TcpStoreServer> store;
  if (o.node_rank == 0) {
    // Binds before any worker starts, so a busy port fails the launch cleanly.
    store = std::make_unique<comm::TcpStoreServer>(o.master_addr, o.master_port, job.token);
    job.master_port = store->port();
  }
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
      store = std::make_unique<comm::TcpStoreServer>(o.master_addr, job.master_port, job.token);
    }
    job.restart_count = attempt;
    auto workers = start_workers(o, job);
    RoundResult result = supervisor.supervise(workers, relay);
    workers.clear();
    if (result.success) return 0;
    print_to_stderr(format_failure_summary(result, relay));
    if (result.launcher_signal != 0 || attempt >= o.max_restarts) return round_exit_code(result);
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
  return launch(options);
}

}  // namespace tessera::cli
