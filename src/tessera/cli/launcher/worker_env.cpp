#include "tessera/cli/launcher/worker_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "tessera/core/check.h"

extern char** environ;

namespace tessera::cli {

std::vector<std::string> worker_environment(const LaunchOptions& o, const JobContext& job,
                                            int local_rank, const std::vector<std::string>& base) {
  const std::string rank = std::to_string(o.global_rank(local_rank));
  const std::string world = std::to_string(o.world_size());
  const std::map<std::string, std::string> vars = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", std::to_string(job.torch_port > 0 ? job.torch_port : job.master_port)},
      {"TORCHELASTIC_USE_AGENT_STORE", job.torch_port > 0 ? "False" : "True"},
      {"TESSERA_STORE_ADDR", job.master_addr},
      {"TESSERA_STORE_PORT", std::to_string(job.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(job.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.run_id},
      {"TESSERA_JOB_TOKEN", job.token},
      {"TESSERA_LAUNCHER", "1"},
  };
  std::map<std::string, std::string> all = vars;
  if (!job.heartbeat_prefix.empty()) {
    all["TESSERA_WORKER_HEARTBEAT_FILE"] = job.heartbeat_prefix + rank;
    all["TESSERA_WORKER_HEARTBEAT_INTERVAL"] = std::to_string(job.heartbeat_timeout);
  }
  std::vector<std::string> env;
  env.reserve(base.size() + all.size() + 1);
  bool has_omp = false;
  bool has_tunables = false;
  for (const auto& entry : base) {
    std::string name = entry.substr(0, entry.find('='));
    if (all.count(name) != 0) continue;
    has_omp = has_omp || name == "OMP_NUM_THREADS";
    has_tunables = has_tunables || name == "GLIBC_TUNABLES";
    env.push_back(entry);
  }
  for (const auto& [name, value] : all) env.push_back(name + "=" + value);
  if (!has_omp && o.nproc_per_node > 1) env.push_back("OMP_NUM_THREADS=1");
  if (!has_tunables && o.malloc_retain) {
    env.push_back(std::string("GLIBC_TUNABLES=") + kRetainMallocTunables);
  }
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::string random_job_token() {
  unsigned char bytes[16];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(Error, fd, "cannot open /dev/urandom for the job token");
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  TS_CHECK(got == sizeof(bytes), "cannot read 16 bytes from /dev/urandom for the job token; "
           "set TESSERA_JOB_TOKEN instead");
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

}  // namespace tessera::cli
