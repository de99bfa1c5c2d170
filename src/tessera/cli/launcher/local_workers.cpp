#include "tessera/cli/launcher/local_workers.h"

#include <limits.h>
#include <unistd.h>

#include <cstdio>

#include "tessera/comm/base/socket_util.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::cli {

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

int torch_program_port(const LaunchOptions& o, int store_port) {
  if (o.master_port != 0) {
    TS_CHECK_T(ConfigError, o.master_port < 65535, "--master-port ", o.master_port,
               " leaves no port after it for torch.distributed programs (MASTER_PORT is the "
               "next one); use a lower port");
    return o.master_port + 1;
  }
  comm::net::Socket probe = comm::net::listen_tcp(o.master_addr, 0);
  const int port = comm::net::local_port(probe.fd());
  return port != store_port ? port : 0;
}

std::string this_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  TS_CHECK_ERRNO(Error, n, "cannot find the tessera executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

void print_to_stderr(const std::string& text) {
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

std::string job_token(const LaunchOptions& o, bool may_invent) {
  if (auto token = env::get("TESSERA_JOB_TOKEN")) return *token;
  TS_CHECK_T(ConfigError, may_invent, "--nnodes ", o.nnodes,
             " needs the same TESSERA_JOB_TOKEN exported on every node "
             "(e.g. export TESSERA_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n'))");
  return random_job_token();
}

}  // namespace tessera::cli
