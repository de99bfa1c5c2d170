// shm_bench: all_reduce (float32 sum) time and bus bandwidth of the shm backend
// and its peers in the same run, ranks as real processes (fork), plus the memcpy
// bandwidth of this host for scale.
//   shm_bench [ranks=2] [backends=shm,gloo]
// Prints one row per backend and size: bytes, median us, busbw GB/s (2(n-1)/n*S/t).
// A tuning tool, not a test; bench/allreduce_sweep.sh compares against peers.
#include <ATen/ATen.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/base/tcp_store.h"

using namespace tessera::comm;
using Clock = std::chrono::steady_clock;

static double memcpy_gbps() {
  std::vector<char> a(32 << 20, 1), b(32 << 20, 2);
  std::memcpy(b.data(), a.data(), a.size());
  auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i)
    std::memcpy((i & 1 ? a : b).data(), (i & 1 ? b : a).data(), a.size());
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return 10.0 * a.size() / s / 1e9;
}

static void run_rank(int rank, int n, int port, const std::string& backend) {
  auto tcp = std::make_shared<TcpStore>("127.0.0.1", port, "", std::chrono::seconds(30));
  BackendContext ctx;
  ctx.store = std::make_shared<PrefixStore>(backend, tcp);
  ctx.rank = rank;
  ctx.size = n;
  ctx.group_name = "bench";
  ctx.timeout = std::chrono::seconds(60);
  std::unique_ptr<Backend> bp = create_backend(backend, ctx);
  Backend& b = *bp;
  for (int64_t bytes : {int64_t(4) << 10, int64_t(64) << 10, int64_t(256) << 10, int64_t(1) << 20,
                        int64_t(4) << 20, int64_t(32) << 20}) {
    at::Tensor t = at::ones({bytes / 4}, at::kFloat);
    int iters = bytes >= (4 << 20) ? 20 : 500;
    for (int i = 0; i < 5; ++i) b.all_reduce(t, ReduceOp::kSum);
    // Median over iterations (rank 0's view; each iteration starts after a
    // barrier), as tessera bench and mpi_allreduce_peer report.
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
      b.barrier();
      auto t0 = Clock::now();
      b.all_reduce(t, ReduceOp::kSum);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + iters / 2, times.end());
    double s = times[iters / 2];
    if (rank == 0) {
      std::printf("%-5s %10lld B  %10.1f us  busbw %6.2f GB/s\n", backend.c_str(),
                  static_cast<long long>(bytes), s * 1e6, 2.0 * (n - 1) / n * bytes / s / 1e9);
    }
  }
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2;
  std::vector<std::string> backends;
  std::stringstream list(argc > 2 ? argv[2] : "shm,gloo");
  for (std::string b; std::getline(list, b, ',');) backends.push_back(b);
  std::printf("memcpy 32 MB: %.2f GB/s\n", memcpy_gbps());
  TcpStoreServer server("127.0.0.1", 0, "");
  std::vector<pid_t> kids;
  for (int r = 1; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      for (const auto& b : backends) run_rank(r, n, server.port(), b);
      _exit(0);
    }
    kids.push_back(p);
  }
  for (const auto& b : backends) run_rank(0, n, server.port(), b);
  int rc = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
