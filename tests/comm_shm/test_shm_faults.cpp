// Failure behaviour of the shm backend: a silent peer (TimeoutError naming it),
// a peer killed with SIGKILL mid all_reduce (CommError naming it on the
// survivor, well within the timeout), abort, poison, stale-segment cleanup, and
// /dev/shm staying empty. Also the host identity helpers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm_shm/shm_test_util.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/shm/host_identity.h"

extern char** environ;

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
using testing::run_shm_ranks;
using testing::segments_of;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ShmFaults, SegmentNameIsGoneOnceEveryRankMapped) {
  run_shm_ranks(3, testing::small_options(), [](ShmBackend& b) {
    b.barrier();  // every rank has mapped by now
    EXPECT_TRUE(segments_of({getpid()}).empty());
  });
}

TEST(ShmFaults, SilentPeerTimesOutNamingItThenTheGroupIsBroken) {
  std::atomic<bool> rank0_failed{false};
  run_shm_ranks(
      2, testing::small_options(),
      [&](ShmBackend& b) {
        at::Tensor t = at::ones({1000}, at::kFloat);
        if (b.rank() == 0) {
          auto start = Clock::now();
          try {
            b.all_reduce(t, ReduceOp::kSum);
            ADD_FAILURE() << "all_reduce without rank 1 should time out";
          } catch (const TimeoutError& e) {
            EXPECT_TRUE(contains(e.what(), "waiting for rank(s) 1")) << e.what();
          }
          double waited = seconds_since(start);
          EXPECT_GE(waited, 0.45);
          EXPECT_LT(waited, 2.0);
          rank0_failed = true;
        } else {
          while (!rank0_failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          auto start = Clock::now();
          EXPECT_THROW(b.all_reduce(t, ReduceOp::kSum), CommError);
          EXPECT_LT(seconds_since(start), 0.3);  // poisoned: fails fast, no second timeout
        }
      },
      /*timeout_s=*/0.5);
}

TEST(ShmFaults, AbortMakesEveryRankFailFast) {
  run_shm_ranks(
      3, testing::small_options(),
      [](ShmBackend& b) {
        b.barrier();
        if (b.rank() == 2) b.abort();
        auto start = Clock::now();
        EXPECT_THROW(b.barrier(), CommError);
        EXPECT_LT(seconds_since(start), 2.0);
      },
      10);
}

TEST(ShmFaults, StaleSegmentsOfDeadCreatorsAreRemoved) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  std::string stale = "/tessera-" + std::to_string(dead) + "-0-stale";
  std::string live = "/tessera-" + std::to_string(getpid()) + "-0-live";
  for (const auto& name : {stale, live}) {
    int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  run_shm_ranks(2, testing::small_options(), [](ShmBackend& b) { b.barrier(); });
  EXPECT_TRUE(segments_of({dead}).empty());
  EXPECT_EQ(segments_of({getpid()}).size(), 1u);  // a live creator's segment stays
  shm_unlink(live.c_str());
}

TEST(HostIdentity, ThreadsShareAHost) {
  std::string id = shm::local_host_identity();
  EXPECT_EQ(std::count(id.begin(), id.end(), '/'), 2) << id;
  EXPECT_GT(id.size(), 36u) << "boot id missing: " << id;
  run_shm_ranks(3, testing::small_options(), [](ShmBackend& b) {
    std::vector<int> hosts = shm::host_indices(b.context());
    EXPECT_EQ(hosts, (std::vector<int>{0, 0, 0}));
  });
  EXPECT_EQ(shm::ranks_on_host({0, 1, 0, 1}, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(shm::ranks_on_host({0, 1, 1}, 1), (std::vector<int>{1, 2}));
}

// ---- A real second process, killed with SIGKILL in the middle of all_reduces.

constexpr const char* kChildPortVar = "TESSERA_SHM_TEST_CHILD_PORT";
constexpr int64_t kKillNumel = 1 << 20;  // 4 MB: several chunks per all_reduce

BackendContext process_context(std::shared_ptr<Store> store, int rank) {
  BackendContext ctx;
  ctx.store = std::move(store);
  ctx.rank = rank;
  ctx.size = 2;
  ctx.global_ranks = {0, 1};
  ctx.group_name = "kill";
  ctx.timeout = std::chrono::seconds(5);
  return ctx;
}

// Runs only inside the child the test below starts.
TEST(ShmChild, Rank1KillsItselfMidAllReduce) {
  const char* port = std::getenv(kChildPortVar);
  if (port == nullptr) GTEST_SKIP() << "helper of ShmFaults.PeerKilledMidAllReduce";
  auto store =
      std::make_shared<TcpStore>("127.0.0.1", std::atoi(port), "", std::chrono::seconds(10));
  ShmBackend b(process_context(store, 1));
  at::Tensor t = at::ones({kKillNumel}, at::kFloat);
  b.all_reduce(t, ReduceOp::kSum);
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raise(SIGKILL);
  });
  killer.detach();
  for (;;) b.all_reduce(t, ReduceOp::kMax);
}

TEST(ShmFaults, PeerKilledMidAllReduce) {
  TcpStoreServer server("127.0.0.1", 0, "");
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(std::string(kChildPortVar) + "=" + std::to_string(server.port()));
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=ShmChild.Rank1KillsItselfMidAllReduce";
  char* argv[] = {const_cast<char*>("/proc/self/exe"), filter.data(), nullptr};
  pid_t child = fork();
  if (child == 0) {
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  ASSERT_GT(child, 0);
  auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), "", std::chrono::seconds(10));
  int completed = 0;
  std::string error;
  double failed_after = 0;
  {
    ShmBackend b(process_context(store, 0));
    at::Tensor t = at::ones({kKillNumel}, at::kFloat);
    b.all_reduce(t, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(t, at::full({kKillNumel}, 2.0f))) << "first all_reduce across processes";
    auto start = Clock::now();
    try {
      for (;; ++completed) b.all_reduce(t, ReduceOp::kMax);
    } catch (const CommError& e) {
      error = e.what();
    }
    failed_after = seconds_since(start);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  EXPECT_TRUE(contains(error, "rank 1 (pid " + std::to_string(child) + ") exited")) << error;
  // Killed ~0.3 s in; detected by the liveness check, far before the 5 s timeout.
  EXPECT_LT(failed_after, 2.5) << error;
  EXPECT_GT(completed, 0);
  EXPECT_TRUE(segments_of({getpid(), child}).empty());
  std::printf("survivor failed %.3f s after the loop started (%d all_reduces done): %s\n",
              failed_after, completed, error.c_str());
}

}  // namespace
}  // namespace tessera::comm
