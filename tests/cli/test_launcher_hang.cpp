// Stalls and hangs in a real Tessera job under `tessera run`: the stall
// inspector names the late rank and the collective it has not joined, and fails
// the job after stall_shutdown; the launcher names a worker that hangs in
// compute (alive, no heartbeat) within two heartbeat timeouts, does not name the
// ranks that wait for it, and stops the job with --stall-shutdown. Workers are
// tests/cli/fault_worker.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

const std::string kFaultWorker = TESSERA_FAULT_WORKER;

std::string launch(const std::string& flags, const std::string& marker, const std::string& args) {
  return launch_worker(kFaultWorker, flags, marker, args);
}

TEST(StallInspector, NamesTheLateRankAndItsCollectiveThenFailsTheJob) {
  const std::string m = unique_marker("stallinspect");
  // Rank 1 sleeps before its 6th all_reduce; the timeout (60 s) is far away.
  auto r = run_command("TESSERA_TIMEOUT=60 TESSERA_STALL_WARN=1 TESSERA_STALL_SHUTDOWN=3 " +
                           launch("-n 2", m, "allreduce 50 stall 1 5"),
                       60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 40) << "ended by the stall inspector, not the 60 s timeout";
  std::smatch s;
  ASSERT_TRUE(std::regex_search(
      r.output, s,
      std::regex("\\[rank 0\\].*stall inspector: group 'default' \\([a-z]+, rank 0 of 2\\): "
                 "collective #(\\d+) all_reduce\\([Ff]loat\\[65536\\], sum\\) has waited [0-9.]+ s\\. "
                 "Missing: rank 1 has not joined #(\\d+)")))
      << r.output;
  EXPECT_EQ(s[1], s[2]);
  EXPECT_NE(r.output.find("stalled, failed by the stall inspector after 3 s"), std::string::npos)
      << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 5), 0);
}

TEST(HungWorker, TheLauncherNamesARankHungInComputeWithinTwoHeartbeatTimeouts) {
  const std::string m = unique_marker("hang");
  auto r = run_command("TESSERA_TIMEOUT=60 " +
                           launch("-n 2 --heartbeat-timeout 1 --stall-shutdown 4", m,
                                  "allreduce 1000000 hang 1 20"),
                       60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] hanging in compute before all_reduce #21"), std::string::npos)
      << r.output;
  std::smatch s;
  ASSERT_TRUE(std::regex_search(
      r.output, s,
      std::regex("tessera run: rank 1 \\(pid \\d+\\) has sent no heartbeat for ([0-9.]+) s while "
                 "its process is alive: hung in compute or deadlocked")))
      << r.output;
  const double silent = std::atof(s[1].str().c_str());
  std::printf("rank 1 named as hung after %.2f s without a heartbeat (timeout 1 s)\n", silent);
  EXPECT_LT(silent, 2.0) << "named within two heartbeat timeouts of its last heartbeat";
  // Rank 0 waits in all_reduce for rank 1: waiting is not hanging.
  EXPECT_EQ(r.output.find("rank 0 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("it was stopped as hung: rank 1"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 5), 0);
}

TEST(HungWorker, WithoutStallShutdownTheJobIsOnlyWarnedAbout) {
  const std::string m = unique_marker("hangwarn");
  // Rank 1 hangs; the job keeps running until the collective timeout ends it.
  auto r = run_command("TESSERA_TIMEOUT=4 " +
                           launch("-n 2 --heartbeat-timeout 1", m, "allreduce 1000000 hang 1 10"),
                       60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stopped as hung"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 5), 0);
}

}  // namespace
}  // namespace tessera::testing
