// Worker of test_multihost, started by `tessera run` on each emulated host:
//
//   multihost_worker [MARKER]
//
// Joins the job (tessera::init()), checks that "auto" chose the hierarchical
// backend for a default group spanning two hosts, then runs the collective
// suite's checks (tests/comm/collective_checks.h) over the default group with
// every dtype and sizes up to 300001. Prints "pid=<pid>", one "segment <name>"
// line per shared-memory segment this rank maps (so the test can check they are
// gone after the job), and "all checks passed" when every check passed.
// Any failure makes the exit code 1, which makes `tessera run` fail the job.
// MARKER is ignored: it only tags the command line for the test's orphan check.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "comm/collective_checks.h"
#include "tessera/comm/init.h"
#include "tessera/comm/shm/shm_segment.h"
#include "tessera/core/timer.h"

namespace tessera::testing {
namespace {

using comm::ReduceOp;

const std::vector<at::ScalarType> kDtypes = {at::kFloat,    at::kDouble, at::kHalf,
                                             at::kBFloat16, at::kInt,    at::kLong};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct};
// Empty, fewer elements than ranks, uneven, and large enough that the
// hierarchical all_reduce moves real shards between hosts.
const std::vector<int64_t> kSizes = {0, 3, 1001, 300001};

// Names of the shared-memory segments this process maps. The shm backend
// unlinks a segment's name as soon as every rank has mapped it, so the mapping
// (shown as "/dev/shm/NAME (deleted)") is where the name can still be seen.
std::vector<std::string> mapped_segments() {
  const std::string dir = "/dev/shm/" + std::string(comm::shm::kSegmentPrefix);
  std::set<std::string> names;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    size_t at = line.find(dir);
    if (at == std::string::npos) continue;
    std::string name = line.substr(at + 9);  // after "/dev/shm/"
    names.insert(name.substr(0, name.find(' ')));
  }
  return {names.begin(), names.end()};
}

TEST(MultiHostWorker, EveryOpMatchesReference) {
  tessera::init();
  auto g = tessera::default_group();
  const LaunchInfo& info = tessera::launch_info();
  std::printf("pid=%d\n", static_cast<int>(getpid()));
  for (const auto& name : mapped_segments()) std::printf("segment %s\n", name.c_str());
  std::fflush(stdout);
  // Every rank sees the same values, so a failed ASSERT here returns on all of
  // them before any collective: nobody is left waiting.
  ASSERT_EQ(info.launcher, "tessera");
  ASSERT_EQ(g->size(), 4);
  ASSERT_EQ(g->backend_name(), "hierarchical") << "2 hosts x 2 ranks must pick hierarchical";
  EXPECT_EQ(info.node_rank, g->rank() / 2);
  EXPECT_EQ(info.local_rank, g->rank() % 2);

  auto store = tessera::default_store();
  const CaseSpace all{kDtypes, kSizes, kOps};
  std::string times;
  auto timed = [&](const char* name, const std::function<void()>& check) {
    Stopwatch watch;
    check();
    char entry[64];
    std::snprintf(entry, sizeof(entry), "%s%s %.2f", times.empty() ? "" : ", ", name,
                  watch.seconds());
    times += entry;
  };
  timed("all_reduce", [&] { check_all_reduce(*g, all); });
  timed("half_accuracy", [&] { check_half_accuracy(*g); });
  timed("broadcast", [&] { check_broadcast(*g, all); });
  timed("all_gather", [&] { check_all_gather(*g, all); });
  timed("reduce_scatter", [&] { check_reduce_scatter(*g, all); });
  timed("all_to_all", [&] { check_all_to_all(*g, all); });
  timed("send_recv", [&] { check_send_recv(*g, all); });
  timed("non_contiguous", [&] { check_non_contiguous(*g); });
  timed("barrier", [&] {
    check_barrier(
        *g, [&] { store->add("multihost_worker/arrived", 1); },
        [&] { return store->add("multihost_worker/arrived", 0); });
  });
  timed("subgroups", [&] { check_subgroups(*g); });
  g->barrier()->wait();  // nobody tears down while a peer still needs it
  std::printf("seconds per check: %s\n", times.c_str());
}

}  // namespace
}  // namespace tessera::testing

int main(int argc, char** argv) {
  GTEST_FLAG_SET(brief, true);  // four ranks' output: failures only
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS();
  tessera::shutdown();
  if (failed == 0) std::printf("all checks passed\n");
  return failed == 0 ? 0 : 1;
}
