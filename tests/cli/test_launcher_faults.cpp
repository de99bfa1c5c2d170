// Faults inside a real Tessera job under `tessera run`: a rank SIGKILLed in the
// middle of an all-reduce, a rank that stalls before one, and a store client with
// the wrong job token. Workers are tests/cli/fault_worker.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include <chrono>
#include <cstdlib>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

const std::string kFaultWorker = TESSERA_FAULT_WORKER;

std::string launch(const std::string& flags, const std::string& marker, const std::string& args) {
  return launch_worker(kFaultWorker, flags, marker, args);
}

TEST(LauncherStore, WorkersJoinTheLaunchersStoreWithTheToken) {
  std::string m = unique_marker("store");
  auto r = run_command(launch("-n 3", m, "store"), 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] store ok"), std::string::npos)
        << r.output;
  }
}

TEST(LauncherStore, WrongTokenIsRefused) {
  std::string m = unique_marker("badtoken");
  // The launcher hosts the store with its token; this worker presents another.
  auto r = run_command(tessera_bin() + " run --master-port 0 -n 1 sh -c " +
                           shell_quote("TESSERA_JOB_TOKEN=not-the-token exec " + kFaultWorker +
                                       " " + m + " store"),
                       30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("token"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("store ok"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
}

// Seconds from the fault (the worker prints "... at <epoch ms> ms") to now: the
// launcher's reaction time, without the load-dependent start-up of LibTorch.
double seconds_since_fault(const std::string& output, const std::string& line_start) {
  size_t pos = output.find(line_start);
  if (pos == std::string::npos) return 1e9;
  size_t at = output.find(" at ", pos);
  long long fault_ms = std::atoll(output.c_str() + at + 4);
  long long now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return (now_ms - fault_ms) / 1e3;
}

TEST(LauncherFaults, AllReduceJobSucceeds) {
  std::string m = unique_marker("allreduce");
  auto r = run_command("TESSERA_TIMEOUT=10 " + launch("-n 2", m, "allreduce 20"), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] done 20 all_reduces"), std::string::npos) << r.output;
}

TEST(LauncherFaults, RankKilledMidCollectiveEndsTheJob) {
  std::string m = unique_marker("killrank");
  auto r = run_command("TESSERA_TIMEOUT=3 " + launch("-n 3", m, "allreduce 50 kill 1 5"), 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] killing myself during all_reduce #6"), std::string::npos)
      << r.output;
  double reaction = seconds_since_fault(r.output, "[rank 1] killing myself");
  EXPECT_NE(r.output.find("first failure: rank 1 (local rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("was killed by SIGKILL"), std::string::npos) << r.output;
  EXPECT_LT(reaction, 2 * 3.0) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0) << "a worker outlived the job";
  // The ranks shared a host, so "auto" ran the shm backend: nothing of the job
  // may be left in /dev/shm (segments are named after their creator's pid).
  EXPECT_NE(r.output.find("(backend shm, pid "), std::string::npos) << r.output;
  for (size_t at = r.output.find("pid "); at != std::string::npos; at = r.output.find("pid ", at + 1)) {
    const std::string prefix = "tessera-" + std::to_string(std::atoi(r.output.c_str() + at + 4)) + "-";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << "left behind: " << e.path();
    }
  }
  std::printf("job with a rank SIGKILLed mid-collective ended %.2f s after the kill\n", reaction);
}

TEST(LauncherFaults, StalledRankTimesOutAndIsNamed) {
  std::string m = unique_marker("stall");
  const double timeout = 3.0;
  auto r = run_command("TESSERA_TIMEOUT=3 " + launch("-n 3", m, "allreduce 50 stall 2 5"), 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 2] stalling before all_reduce #6"), std::string::npos)
      << r.output;
  double reaction = seconds_since_fault(r.output, "[rank 2] stalling");
  // A survivor fails first with a timeout that names the rank it waited for.
  EXPECT_NE(r.output.find("first failure: rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2 was killed by SIGTERM (stopped by the launcher)"),
            std::string::npos)
      << r.output;
  // The first failing rank's last lines, shown in the summary, name the stalled rank.
  std::string summary = r.output.substr(r.output.find("job failed"));
  EXPECT_NE(summary.find("rank 2 has not joined #6"), std::string::npos) << summary;
  EXPECT_LT(reaction, 2 * timeout) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0) << "a worker outlived the job";
  std::printf("job with a stalled rank (TESSERA_TIMEOUT=3) ended %.2f s after the stall\n",
              reaction);
}

}  // namespace
}  // namespace tessera::testing
