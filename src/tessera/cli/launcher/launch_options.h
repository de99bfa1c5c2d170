// LaunchOptions: the command line of `tessera run`, parsed by hand so that every
// mistake is one line naming the flag and what it expects.
//
//   tessera run [options] PROGRAM [ARGS...]
//
// The flags are torchrun's (--nproc-per-node/-n, --nnodes, --node-rank,
// --master-addr, --master-port, --max-restarts, --run-id; underscore spellings
// too) plus --log-dir and --grace-period. Parsing stops at the first argument that
// is not an option (or after "--"): the program and everything after it are
// passed to the workers untouched, including arguments that look like flags.
//
// Pure functions on values; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "tessera/cli/launcher/hostfile.h"

namespace tessera::cli {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;      // --nnodes MAX (or N)
  int min_nodes = 1;   // --nnodes MIN (N when no range is given)
  bool nnodes_given = false;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: the store picks a free port (single node only)
  std::string log_dir;      // empty: no per-rank log files
  int max_restarts = 0;     // restart all workers after a failure, up to this many times
  double grace_period = 5.0;  // seconds between SIGTERM and SIGKILL at teardown
  std::string run_id = "none";
  // Hung workers (hang_watch.h): a live worker silent this long is named (0: off);
  // stall_shutdown > 0 stops the job once one has been silent that long.
  double heartbeat_timeout = 60.0;
  double stall_shutdown = 0.0;
  // Where a failed job's root cause goes (error_file.h); "": TORCHELASTIC_ERROR_FILE.
  std::string error_file;
  // Workers' malloc (worker_env.h): true ("retain", the default) keeps freed
  // memory in the process for reuse; false ("system") leaves glibc's defaults.
  bool malloc_retain = true;

  // Multi-node rendezvous (rendezvous.h): its id, node 0's store for it
  // ("" = master-addr at master-port + 2), how often agents check on each other,
  // and how long they wait.
  std::string rdzv_id = "none";
  std::string rdzv_endpoint;
  double monitor_interval = 0.5;
  double join_timeout = 600;
  double last_call_timeout = 30;
  double node_timeout = 30;

  // Hosts reached over SSH (hostfile.h, ssh_launch.h): a hostfile or -H list,
  // narrowed by --include/--exclude/--num-nodes/--num-procs-per-node.
  std::string hostfile;
  std::string host_list;
  HostSelection selection;
  int ssh_port = 0;                      // 0: ssh's own default
  std::vector<std::string> ssh_options;  // each passed as "-o OPTION"
  // Set on the agents the hostfile launcher starts: read the job's environment
  // ("NAME=value" lines up to an empty line) from stdin, and stop the workers
  // when stdin closes (the launcher or its connection is gone).
  bool env_from_stdin = false;

  // --launcher: "" (this node, or ssh with a hostfile), "ssh", or "slurm": inside
  // a Slurm allocation, one agent per node started with srun (slurm_launch.h).
  std::string launcher;
  // Set on the agents the Slurm launcher starts: node rank and host label come
  // from SLURM_NODEID and SLURMD_NODENAME.
  bool slurm_agent = false;
  // Where node 0's stores listen; empty: master_addr. The Slurm launcher sets
  // 0.0.0.0, since node 0's name may resolve differently on node 0 itself.
  std::string store_bind_addr;

  bool help = false;
  std::vector<std::string> program;  // PROGRAM then its ARGS

  int world_size() const { return nproc_per_node * nnodes; }
  bool over_ssh() const { return !hostfile.empty() || !host_list.empty(); }
  const std::string& bind_addr() const {
    return store_bind_addr.empty() ? master_addr : store_bind_addr;
  }
  // Global rank of this node's local rank `local_rank`.
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

// Parses the arguments after `run`. Throws ConfigError with a one-line message
// naming the offending flag or value (unknown flag, missing or malformed value,
// -n < 1, node-rank >= nnodes, no program). With --help, returns help = true and
// skips the "no program" check.
LaunchOptions parse_launch_options(const std::vector<std::string>& args);

// The text `tessera run --help` prints.
std::string launch_usage();

}  // namespace tessera::cli
