#include "tessera/cli/launcher/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tessera/core/check.h"

namespace tessera::cli {
namespace {

// Every flag that takes a value, under each spelling users bring from torchrun.
enum class Flag {
  kNproc, kNnodes, kNodeRank, kAddr, kPort, kLogDir, kRestarts, kGrace, kRunId,
  kHeartbeat, kStallShutdown, kErrorFile, kMalloc, kRdzvId, kRdzvEndpoint, kMonitorInterval,
  kJoinTimeout, kLastCall, kNodeTimeout, kHostfile, kHosts, kInclude, kExclude, kNumNodes,
  kProcsPerNode, kSshPort, kSshOption, kLauncher
};

struct FlagName {
  const char* name;
  Flag flag;
};

const FlagName kValueFlags[] = {
    {"--nproc-per-node", Flag::kNproc}, {"--nproc_per_node", Flag::kNproc},
    {"-n", Flag::kNproc},               {"--nnodes", Flag::kNnodes},
    {"--node-rank", Flag::kNodeRank},   {"--node_rank", Flag::kNodeRank},
    {"--master-addr", Flag::kAddr},     {"--master_addr", Flag::kAddr},
    {"--master-port", Flag::kPort},     {"--master_port", Flag::kPort},
    {"--log-dir", Flag::kLogDir},       {"--log_dir", Flag::kLogDir},
    {"--max-restarts", Flag::kRestarts}, {"--max_restarts", Flag::kRestarts},
    {"--grace-period", Flag::kGrace},   {"--grace_period", Flag::kGrace},
    {"--run-id", Flag::kRunId},         {"--run_id", Flag::kRunId},
    {"--heartbeat-timeout", Flag::kHeartbeat}, {"--heartbeat_timeout", Flag::kHeartbeat},
    {"--stall-shutdown", Flag::kStallShutdown}, {"--stall_shutdown", Flag::kStallShutdown},
    {"--error-file", Flag::kErrorFile}, {"--error_file", Flag::kErrorFile},
    {"--malloc", Flag::kMalloc},
    {"--rdzv-id", Flag::kRdzvId},       {"--rdzv_id", Flag::kRdzvId},
    {"--rdzv-endpoint", Flag::kRdzvEndpoint}, {"--rdzv_endpoint", Flag::kRdzvEndpoint},
    {"--monitor-interval", Flag::kMonitorInterval}, {"--monitor_interval", Flag::kMonitorInterval},
    {"--join-timeout", Flag::kJoinTimeout}, {"--join_timeout", Flag::kJoinTimeout},
    {"--last-call-timeout", Flag::kLastCall}, {"--last_call_timeout", Flag::kLastCall},
    {"--node-timeout", Flag::kNodeTimeout}, {"--node_timeout", Flag::kNodeTimeout},
    {"--hostfile", Flag::kHostfile},    {"-H", Flag::kHosts},
    {"--hosts", Flag::kHosts},          {"--include", Flag::kInclude},
    {"--exclude", Flag::kExclude},      {"--num-nodes", Flag::kNumNodes},
    {"--num_nodes", Flag::kNumNodes},   {"--num-procs-per-node", Flag::kProcsPerNode},
    {"--num_procs_per_node", Flag::kProcsPerNode}, {"--num_gpus", Flag::kProcsPerNode},
    {"--ssh-port", Flag::kSshPort},     {"--ssh_port", Flag::kSshPort},
    {"--ssh-option", Flag::kSshOption}, {"--ssh_option", Flag::kSshOption},
    {"--launcher", Flag::kLauncher},
};

const FlagName* find_flag(const std::string& name) {
  for (const auto& f : kValueFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Strict integer: the whole string, in [lo, hi].
int parse_int(const std::string& flag, const std::string& value, long lo, long hi,
              const char* what) {
  errno = 0;
  char* end = nullptr;
  long v = value.empty() ? 0 : std::strtol(value.c_str(), &end, 10);
  bool ok = !value.empty() && end != nullptr && *end == '\0' && errno == 0 && v >= lo && v <= hi;
  TS_CHECK_T(ConfigError, ok, flag, " expects ", what, ", got '", value, "'");
  return static_cast<int>(v);
}

double parse_seconds(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  double v = value.empty() ? -1 : std::strtod(value.c_str(), &end);
  bool ok = !value.empty() && end != nullptr && *end == '\0' && std::isfinite(v) && v >= 0;
  TS_CHECK_T(ConfigError, ok, flag, " expects seconds >= 0, got '", value, "'");
  return v;
}

void apply(LaunchOptions& o, Flag flag, const std::string& name, const std::string& value) {
  switch (flag) {
    case Flag::kNproc:
      o.nproc_per_node = parse_int(name, value, 1, 4096, "a positive number of processes");
      break;
    case Flag::kNnodes: {
      // N, or torchrun's elastic MIN:MAX.
      auto colon = value.find(':');
      if (colon == std::string::npos) {
        o.nnodes = o.min_nodes = parse_int(name, value, 1, 65536, "a positive number of nodes");
      } else {
        o.min_nodes = parse_int(name, value.substr(0, colon), 1, 65536, "MIN:MAX with MIN >= 1");
        o.nnodes = parse_int(name, value.substr(colon + 1), 1, 65536, "MIN:MAX with MAX >= 1");
        TS_CHECK_T(ConfigError, o.min_nodes <= o.nnodes, name, " '", value,
                   "': MIN must not exceed MAX");
      }
      o.nnodes_given = true;
      break;
    }
    case Flag::kRdzvId:
      TS_CHECK_T(ConfigError, !value.empty() && value.find('/') == std::string::npos, name,
                 " expects an id without '/', got '", value, "'");
      o.rdzv_id = value;
      break;
    case Flag::kRdzvEndpoint: {
      auto colon = value.rfind(':');
      TS_CHECK_T(ConfigError, colon != std::string::npos && colon > 0, name,
                 " expects HOST:PORT, got '", value, "'");
      parse_int(name, value.substr(colon + 1), 1, 65535, "HOST:PORT with a port in 1..65535");
      o.rdzv_endpoint = value;
      break;
    }
    case Flag::kMonitorInterval:
      o.monitor_interval = parse_seconds(name, value);
      TS_CHECK_T(ConfigError, o.monitor_interval > 0, name, " must be > 0");
      break;
    case Flag::kJoinTimeout:
      o.join_timeout = parse_seconds(name, value);
      break;
    case Flag::kLastCall:
      o.last_call_timeout = parse_seconds(name, value);
      break;
    case Flag::kNodeTimeout:
      o.node_timeout = parse_seconds(name, value);
      TS_CHECK_T(ConfigError, o.node_timeout > 0, name, " must be > 0");
      break;
    case Flag::kHostfile:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects a file, got ''");
      o.hostfile = value;
      break;
    case Flag::kHosts:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects host:slots,..., got ''");
      o.host_list = value;
      break;
    case Flag::kInclude:
      o.selection.include = value;
      break;
    case Flag::kExclude:
      o.selection.exclude = value;
      break;
    case Flag::kNumNodes:
      o.selection.num_nodes = parse_int(name, value, 1, 65536, "a positive number of hosts");
      break;
    case Flag::kProcsPerNode:
      o.selection.procs_per_node = parse_int(name, value, 1, 4096, "a positive number of slots");
      break;
    case Flag::kSshPort:
      o.ssh_port = parse_int(name, value, 1, 65535, "a port in 1..65535");
      break;
    case Flag::kSshOption:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects an ssh option like ConnectTimeout=5");
      o.ssh_options.push_back(value);
      break;
    case Flag::kLauncher:
      TS_CHECK_T(ConfigError, value == "local" || value == "ssh" || value == "slurm", name,
                 " expects local, ssh or slurm, got '", value, "'");
      o.launcher = value == "local" ? "" : value;
      break;
    case Flag::kNodeRank:
      o.node_rank = parse_int(name, value, 0, 65535, "a node rank >= 0");
      break;
    case Flag::kAddr:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects a host address, got ''");
      o.master_addr = value;
      break;
    case Flag::kPort:
      o.master_port = parse_int(name, value, 0, 65535, "a port in 0..65535");
      break;
    case Flag::kLogDir:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects a directory, got ''");
      o.log_dir = value;
      break;
    case Flag::kRestarts:
      o.max_restarts = parse_int(name, value, 0, 1000000, "a number of restarts >= 0");
      break;
    case Flag::kGrace:
      o.grace_period = parse_seconds(name, value);
      break;
    case Flag::kRunId:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects an id, got ''");
      o.run_id = value;
      break;
    case Flag::kHeartbeat:
      o.heartbeat_timeout = parse_seconds(name, value);
      break;
    case Flag::kStallShutdown:
      o.stall_shutdown = parse_seconds(name, value);
      break;
    case Flag::kErrorFile:
      TS_CHECK_T(ConfigError, !value.empty(), name, " expects a file path, got ''");
      o.error_file = value;
      break;
    case Flag::kMalloc:
      TS_CHECK_T(ConfigError, value == "retain" || value == "system", name,
                 " expects 'retain' or 'system', got '", value, "'");
      o.malloc_retain = value == "retain";
      break;
  }
}

void validate(const LaunchOptions& o) {
  TS_CHECK_T(ConfigError, o.node_rank < o.nnodes, "--node-rank ", o.node_rank,
             " must be less than --nnodes ", o.nnodes, " (node ranks are 0..", o.nnodes - 1, ")");
  TS_CHECK_T(ConfigError, !o.program.empty(),
             "no program given (usage: tessera run [options] PROGRAM [ARGS...])");
  TS_CHECK_T(ConfigError, !o.program[0].empty(), "the program name is empty");
  TS_CHECK_T(ConfigError, o.stall_shutdown == 0 || o.heartbeat_timeout > 0,
             "--stall-shutdown needs hung-worker detection: --heartbeat-timeout must be > 0");
  TS_CHECK_T(ConfigError, o.hostfile.empty() || o.host_list.empty(),
             "--hostfile and -H both list hosts; pass one of them");
  TS_CHECK_T(ConfigError,
             o.over_ssh() || (o.selection.include.empty() && o.selection.exclude.empty() &&
                              o.selection.num_nodes < 0 && o.selection.procs_per_node < 0),
             "--include, --exclude, --num-nodes and --num-procs-per-node select hosts of a "
             "--hostfile or -H list; pass one of those too");
  TS_CHECK_T(ConfigError, o.launcher != "ssh" || o.over_ssh(),
             "--launcher ssh needs the hosts: pass --hostfile FILE or -H host1:N,host2:N");
  TS_CHECK_T(ConfigError, o.launcher != "slurm" || !o.over_ssh(),
             "--launcher slurm takes its hosts from the Slurm allocation; drop --hostfile/-H");
  TS_CHECK_T(ConfigError, o.launcher != "slurm" || o.master_port != 0,
             "--master-port 0 does not work with --launcher slurm; pass a port free on node 0");
  TS_CHECK_T(ConfigError, o.nnodes == 1 || o.over_ssh() || o.master_port != 0,
             "--master-port 0 only works on one node: with --nnodes ", o.nnodes,
             " every node must be told the same port");
}

}  // namespace

LaunchOptions parse_launch_options(const std::vector<std::string>& args) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program: stop parsing
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--agent-env-stdin") {
      o.env_from_stdin = true;
      continue;
    }
    if (arg == "--slurm-agent") {
      o.slurm_agent = true;
      continue;
    }
    if (arg == "--standalone") {  // torchrun's single-node mode: a free port
      o.nnodes = 1;
      o.node_rank = 0;
      o.master_port = 0;
      continue;
    }
    std::string name = arg;
    std::string value;
    bool has_value = false;
    auto eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    } else if (arg.rfind("-n", 0) == 0 && arg.size() > 2 && arg[2] != '-' && arg[1] != '-') {
      name = "-n";  // -n4
      value = arg.substr(2);
      has_value = true;
    }
    const FlagName* flag = find_flag(name);
    TS_CHECK_T(ConfigError, flag != nullptr, "unknown option '", name,
               "' (run 'tessera run --help' for the options)");
    if (!has_value) {
      TS_CHECK_T(ConfigError, i + 1 < args.size(), "option '", name, "' needs a value");
      value = args[++i];
    }
    apply(o, flag->flag, name, value);
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (!o.help) validate(o);
  return o;
}

std::string launch_usage() {
  return "usage: tessera run [options] PROGRAM [ARGS...]\n"
         "\n"
         "Starts N worker processes of PROGRAM on this node, hosts the job's store (node 0),\n"
         "prefixes their output with [rank r], and tears the job down when a worker fails.\n"
         "\n"
         "options:\n"
         "  -n, --nproc-per-node N  workers on this node (default 1)\n"
         "  --nnodes N              nodes in the job (default 1)\n"
         "  --node-rank R           this node's rank, 0..nnodes-1 (default 0)\n"
         "  --master-addr A         address of node 0's store (default 127.0.0.1)\n"
         "  --master-port P         port of the store (default 29500; 0: a free port)\n"
         "  --standalone            one node, a free port\n"
         "  --log-dir DIR           also write each rank's lines to DIR/rank_<r>.log\n"
         "  --max-restarts N        restart all workers after a failure, up to N times (default 0)\n"
         "  --grace-period S        seconds between SIGTERM and SIGKILL at teardown (default 5)\n"
         "  --run-id ID             job id passed as TORCHELASTIC_RUN_ID (default none)\n"
         "  --heartbeat-timeout S   name a live worker silent for S seconds as hung (default 60;\n"
         "                          0: off)\n"
         "  --stall-shutdown S      stop the job when a worker has been hung for S seconds\n"
         "                          (default 0: only name it)\n"
         "  --error-file PATH       on failure, write the root cause as JSON in torchrun's layout\n"
         "                          (default: TORCHELASTIC_ERROR_FILE when set)\n"
         "  --malloc MODE           retain (default): workers' malloc keeps freed memory for reuse\n"
         "                          instead of handing it back and faulting it in again;\n"
         "                          system: glibc's defaults. A set GLIBC_TUNABLES wins.\n"
         "  -h, --help              show this help\n"
         "\n"
         "several nodes (docs/multihost.md):\n"
         "  --nnodes MIN:MAX        elastic: go on with MIN..MAX nodes (N: exactly N)\n"
         "  --rdzv-id ID            rendezvous id shared by the job's nodes (default none)\n"
         "  --rdzv-endpoint H:P     node 0's rendezvous store (default master-addr:port+2)\n"
         "  --monitor-interval S    how often nodes check on each other (default 0.5)\n"
         "  --join-timeout S        wait this long for MIN nodes (default 600)\n"
         "  --last-call-timeout S   after MIN nodes, wait this long for more (default 30)\n"
         "  --node-timeout S        a node silent this long is lost (default 30)\n"
         "hosts over SSH, from this machine:\n"
         "  --hostfile FILE         'host slots=N' or 'host:N' lines; one agent per host\n"
         "  -H, --hosts LIST        host1:2,host2:2 instead of a hostfile\n"
         "  --include SPEC          only these hosts/slots: host1:0,2@host2\n"
         "  --exclude SPEC          all but these hosts/slots\n"
         "  --num-nodes N           the first N hosts\n"
         "  --num-procs-per-node N  the first N slots of each host\n"
         "  --ssh-port P            ssh port (default: ssh's)\n"
         "  --ssh-option OPT        passed to ssh as -o OPT (repeatable)\n"
         "in a Slurm allocation (docs/slurm.md):\n"
         "  --launcher slurm        one agent per node of the allocation, started with srun\n"
         "                          (--launcher local/ssh: this node, or a hostfile's hosts)\n"
         "\n"
         "Multi-node without a hostfile: export the same TESSERA_JOB_TOKEN on every node.\n";
}

}  // namespace tessera::cli
