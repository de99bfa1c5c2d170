// A Tessera worker for the launcher's fault tests, started by `tessera run`.
//
//   fault_worker MARKER store
//       joins the launcher's store as a client (MASTER_ADDR/PORT, TESSERA_JOB_TOKEN),
//       exchanges one key with every rank, prints "store ok".
//   fault_worker MARKER allreduce ITERS [kill R K | stall R K | hang R K]
//       tessera::init(), then ITERS all-reduces of a 64k-float tensor on the default
//       group, checking each result. With "kill R K", rank R SIGKILLs itself while
//       its K-th all-reduce is in flight; with "stall R K", rank R sleeps forever
//       instead of issuing its K-th all-reduce; with "hang R K", rank R spins in a
//       compute loop forever instead (alive, busy, no heartbeat).
// Errors are printed (one line) and end the process with exit code 1, the way a
// user's program that lets a Tessera error escape main() behaves.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/init.h"
#include "tessera/core/env.h"
#include "tessera/core/error.h"

namespace {

long long epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int store_mode() {
  auto info = tessera::LaunchInfo::from_env();
  tessera::set_rank_context(info.rank, info.world_size);
  tessera::comm::TcpStore store(info.master_addr, info.master_port,
                                tessera::env::get_string("TESSERA_JOB_TOKEN"),
                                std::chrono::seconds(5));
  store.set_string("hello/" + std::to_string(info.rank), "hi");
  for (int r = 0; r < info.world_size; ++r) store.get_string("hello/" + std::to_string(r));
  std::printf("store ok\n");
  return 0;
}

int allreduce_mode(int iters, const std::string& fault, int fault_rank, int fault_iter) {
  tessera::init();
  auto group = tessera::default_group();
  const int rank = group->rank();
  const bool faulty = rank == fault_rank;
  std::printf("joined as rank %d of %d (backend %s, pid %d)\n", rank, group->size(),
              group->backend_name().c_str(), static_cast<int>(getpid()));
  std::fflush(stdout);
  for (int i = 0; i < iters; ++i) {
    if (faulty && i == fault_iter && fault == "stall") {
      // The wall-clock time lets the test measure from the fault, not from the
      // (load-dependent) start-up of every process.
      std::printf("stalling before all_reduce #%d at %lld ms\n", i + 1, epoch_ms());
      std::fflush(stdout);
      while (true) pause();
    }
    if (faulty && i == fault_iter && fault == "hang") {
      std::printf("hanging in compute before all_reduce #%d at %lld ms\n", i + 1, epoch_ms());
      std::fflush(stdout);
      volatile double x = 0;
      while (true) x = x + 1;
    }
    at::Tensor t = at::ones({1 << 16});
    auto work = group->all_reduce(t);
    if (faulty && i == fault_iter && fault == "kill") {
      std::printf("killing myself during all_reduce #%d at %lld ms\n", i + 1, epoch_ms());
      std::fflush(stdout);
      raise(SIGKILL);
    }
    work->wait();
    float expected = static_cast<float>(group->size());
    if (t.min().item<float>() != expected || t.max().item<float>() != expected) {
      std::fprintf(stderr, "wrong all_reduce result at #%d\n", i + 1);
      return 2;
    }
  }
  std::printf("done %d all_reduces\n", iters);
  tessera::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 3) {
    std::fprintf(stderr, "usage: fault_worker MARKER store|allreduce ITERS [kill|stall R K]\n");
    return 64;
  }
  std::string mode = argv[2];
  try {
    if (mode == "store") return store_mode();
    if (mode == "allreduce" && argc >= 4) {
      std::string fault = argc >= 7 ? argv[4] : "";
      int fault_rank = argc >= 7 ? std::atoi(argv[5]) : -1;
      int fault_iter = argc >= 7 ? std::atoi(argv[6]) : -1;
      return allreduce_mode(std::atoi(argv[3]), fault, fault_rank, fault_iter);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "fault_worker: unknown mode '%s'\n", mode.c_str());
  return 64;
}
