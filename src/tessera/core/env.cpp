#include "tessera/core/env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "tessera/core/check.h"

namespace tessera::env {

const std::vector<EnvVar>& registry() {
  static const std::vector<EnvVar> vars = {
      // torchrun's contract, set by `tessera run` and by torchrun.
      {"RANK", nullptr, "global rank of this process"},
      {"LOCAL_RANK", nullptr, "rank of this process on its host"},
      {"WORLD_SIZE", nullptr, "number of processes in the job"},
      {"LOCAL_WORLD_SIZE", nullptr, "number of processes on this host"},
      {"GROUP_RANK", nullptr, "rank of this host (node rank)"},
      {"MASTER_ADDR", "127.0.0.1", "address of the rendezvous store"},
      {"MASTER_PORT", "29500", "port of the rendezvous store"},
      {"TORCHELASTIC_USE_AGENT_STORE", nullptr,
       "True when the launcher hosts the store; workers join it as clients"},
      {"TORCHELASTIC_RESTART_COUNT", "0", "how many times the launcher restarted the workers"},
      {"TORCHELASTIC_ERROR_FILE", nullptr,
       "where `tessera run` writes a failed job's root cause as JSON (unless --error-file)"},
      {"TORCHELASTIC_RUN_ID", nullptr, "job id set by the launcher"},
      // mpirun (Open MPI).
      {"OMPI_COMM_WORLD_RANK", nullptr, "rank under mpirun"},
      {"OMPI_COMM_WORLD_SIZE", nullptr, "world size under mpirun"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr, "local rank under mpirun"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, "local world size under mpirun"},
      {"OMPI_COMM_WORLD_NODE_RANK", nullptr, "node rank under mpirun"},
      // Kubernetes (an Indexed Job, one rank per pod).
      {"JOB_COMPLETION_INDEX", nullptr, "rank of the pod in a Kubernetes Indexed Job"},
      // Slurm (srun).
      {"SLURM_PROCID", nullptr, "rank under srun"},
      {"SLURM_NTASKS", nullptr, "world size under srun"},
      {"SLURM_LOCALID", nullptr, "local rank under srun"},
      {"SLURM_STEP_TASKS_PER_NODE", nullptr,
       "tasks of the srun step on each node (\"2(x3),1\"): the local world size"},
      {"SLURM_TASKS_PER_NODE", nullptr, "tasks on each node, when no step list is set"},
      {"SLURM_NTASKS_PER_NODE", nullptr, "local world size under srun, when neither list is set"},
      {"SLURM_NODEID", nullptr, "node rank under srun"},
      {"SLURM_LAUNCH_NODE_IPADDR", nullptr,
       "address of the node that ran srun (the store's address only without a node list)"},
      {"SLURM_STEP_NODELIST", nullptr, "hosts of the srun step; the first (node 0) hosts the store"},
      {"SLURM_JOB_NODELIST", nullptr, "hosts of the allocation (when no step list is set)"},
      {"SLURM_NODELIST", nullptr, "older name of SLURM_JOB_NODELIST"},
      {"SLURM_JOB_ID", nullptr, "Slurm job id; with SLURM_STEP_ID it picks the store port"},
      {"SLURM_STEP_ID", nullptr, "srun step id within the job"},
      {"SLURMD_NODENAME", nullptr, "this node's Slurm name; agents label output with it"},
      // Tessera's own.
      {"TESSERA_TIMEOUT", "300", "seconds before a blocking store or collective call fails"},
      {"TESSERA_LOG_LEVEL", "info", "debug, info, warn or error"},
      {"TESSERA_DEBUG", "off",
       "off or detail: detail checks (seq, op, dtype, shape) across ranks before each collective"},
      {"TESSERA_JOB_TOKEN", nullptr, "shared secret a store client must present to the server"},
      {"TESSERA_BACKEND", "auto", "collective backend: auto, gloo, shm, mpi or nccl"},
      {"TESSERA_HEARTBEAT_INTERVAL", "1",
       "seconds between progress heartbeats each rank publishes to the store"},
      {"TESSERA_STALL_WARN", "60",
       "seconds a collective may wait before the ranks that have not joined are logged"},
      {"TESSERA_STALL_SHUTDOWN", "0",
       "seconds a collective may wait before it fails as stalled, naming the missing ranks (0: off)"},
      {"TESSERA_TIMELINE", nullptr,
       "directory for a Chrome trace per rank and the merged timeline.json (turns the timeline "
       "on, like the config's timeline section)"},
      {"TESSERA_WORKER_HEARTBEAT_FILE", nullptr,
       "set by `tessera run`: the file this worker's heartbeats rewrite (hung-worker detection)"},
      {"TESSERA_WORKER_HEARTBEAT_INTERVAL", nullptr,
       "set by `tessera run`: seconds of silence after which the launcher names a worker as hung"},
      {"TESSERA_LAUNCHER", nullptr, "set to 1 by `tessera run` in every worker"},
      {"TESSERA_STORE_ADDR", nullptr, "store address if different from MASTER_ADDR"},
      {"TESSERA_STORE_PORT", nullptr,
       "store port if different from MASTER_PORT (`tessera run` sets it: MASTER_PORT is then the "
       "port of a torch.distributed program's own store)"},
      {"TESSERA_HOST_LABEL", nullptr,
       "set by a multi-host `tessera run`: the host name the agent prefixes output and error "
       "reports with (the hostfile's name for the host)"},
      {"TESSERA_ENV_FILE", nullptr,
       "multi-host `tessera run`: file naming extra variables to pass to every host (default "
       "./.tessera_env, then ~/.tessera_env)"},
      {"TESSERA_SHM_CHUNK_BYTES", "1048576",
       "shm backend: bytes per rank and pipeline buffer (the all_reduce chunk); same on every rank"},
      {"TESSERA_SHM_CMA", "1",
       "shm all_to_all reads peers' buffers directly (process_vm_readv); 0: through the slots"},
      {"TESSERA_GLOO_IFACE", nullptr, "network interface Gloo binds (default: host of MASTER_ADDR)"},
      {"TESSERA_GLOO_HOSTNAME", nullptr, "address Gloo binds and advertises for this rank"},
      {"TESSERA_HOST_MEMORY_CACHE", "1",
       "1: malloc keeps freed memory up to 32 MiB per buffer for reuse, so steps do not re-fault "
       "pages; 0: C library defaults"},
      {"TESSERA_BF16_GEMM", "auto",
       "bf16 training's GEMMs: native (bf16 with float32 accumulation), fp32 (upcast "
       "operands), or auto (native where the CPU has AVX512-BF16)"},
      {"TESSERA_AIO", "auto",
       "offload I/O engine: auto (io_uring when the kernel allows it), uring or posix "
       "(pread/pwrite on a background thread)"},
      {"TESSERA_PEAK_FLOPS", nullptr,
       "peak FLOP/s per core for MFU, instead of the one `tessera doctor` measured and recorded"},
      {"XDG_CACHE_HOME", nullptr,
       "where `tessera doctor` records the measured peak: $XDG_CACHE_HOME/tessera/peak.json"},
      {"HOME", nullptr, "without XDG_CACHE_HOME, the peak record is ~/.cache/tessera/peak.json"},
      {"TESSERA_TEST_KILL_AT_STEP", nullptr,
       "test hook: RANK:STEP, tessera train's rank RANK SIGKILLs itself after step STEP on the "
       "launcher's first attempt"},
      {"TESSERA_TEST_KILL_IN_CHECKPOINT", nullptr,
       "test hook: RANK:STEP, rank RANK SIGKILLs itself in the save of step STEP after writing "
       "its files, before the commit, on the launcher's first attempt"},
      {"TESSERA_TEST_GRAD_OVERFLOW", nullptr,
       "test hook: steps (comma-separated, or all) at which tessera train's rank 0 "
       "backpropagates an infinite loss"},
  };
  return vars;
}

namespace {
const EnvVar& lookup(const char* name) {
  const auto& vars = registry();
  auto it = std::find_if(vars.begin(), vars.end(),
                         [&](const EnvVar& v) { return std::string(v.name) == name; });
  TS_INTERNAL_ASSERT(it != vars.end(), "environment variable ", name, " is not registered");
  return *it;
}
}  // namespace

std::optional<std::string> get(const char* name) {
  lookup(name);
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string get_string(const char* name) {
  const EnvVar& var = lookup(name);
  if (auto v = get(name)) return *v;
  return var.default_value ? var.default_value : "";
}

long long get_int(const char* name) {
  std::string s = get_string(name);
  TS_CHECK_T(ConfigError, !s.empty(), "environment variable ", name, " is not set");
  size_t pos = 0;
  long long value = 0;
  try {
    value = std::stoll(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  TS_CHECK_T(ConfigError, pos == s.size() && pos > 0, "environment variable ", name, "='", s,
             "' is not an integer");
  return value;
}

double get_double(const char* name) {
  std::string s = get_string(name);
  TS_CHECK_T(ConfigError, !s.empty(), "environment variable ", name, " is not set");
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  TS_CHECK_T(ConfigError, pos == s.size() && pos > 0, "environment variable ", name, "='", s,
             "' is not a number");
  return value;
}

bool get_bool(const char* name) {
  std::string s = get_string(name);
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s.empty() || s == "0" || s == "false" || s == "no" || s == "off") return false;
  TS_THROW(ConfigError, "environment variable ", name, "='", s,
           "' is not a boolean (use 1/0, true/false, yes/no, on/off)");
}

double timeout_seconds() {
  double t = get_double("TESSERA_TIMEOUT");
  TS_CHECK_T(ConfigError, t > 0, "TESSERA_TIMEOUT must be positive seconds, got ", t);
  return t;
}

std::string host_label() {
  if (auto label = get("TESSERA_HOST_LABEL"); label && !label->empty()) return *label;
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return host;
}

}  // namespace tessera::env
