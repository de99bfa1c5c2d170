// `tessera run` as users run it: the real binary, real worker processes
// (tests/cli/test_worker.cpp), checked from outside: output, exit codes, the
// environment contract, teardown timing and leftover processes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <sstream>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

const std::string kWorker = TESSERA_TEST_WORKER;

// `tessera run FLAGS test_worker MARKER ACTIONS`; every job picks a free port so
// tests can run in parallel.
std::string launch_line(const std::string& flags, const std::string& marker,
                        const std::string& actions) {
  return tessera_bin() + " run --master-port 0 " + flags + " " + kWorker + " " + marker + " " +
         actions;
}

std::map<std::string, std::string> env_of_rank(const std::string& output, int rank) {
  std::map<std::string, std::string> vars;
  std::istringstream in(lines_with_prefix(output, "[rank " + std::to_string(rank) + "] "));
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

TEST(Launcher, EnvironmentContract) {
  std::string m = unique_marker("env");
  auto r = run_command("env -u OMP_NUM_THREADS TESSERA_JOB_TOKEN=feedbeef TEST_PASSTHROUGH=kept " +
                           launch_line("-n 2 --run-id job42 --max-restarts 0", m, "env"),
                       30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    auto v = env_of_rank(r.output, rank);
    SCOPED_TRACE(r.output);
    EXPECT_EQ(v["RANK"], std::to_string(rank));
    EXPECT_EQ(v["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(v["WORLD_SIZE"], "2");
    EXPECT_EQ(v["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(v["GROUP_RANK"], "0");
    EXPECT_EQ(v["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(v["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(v["ROLE_WORLD_SIZE"], "2");
    EXPECT_EQ(v["MASTER_ADDR"], "127.0.0.1");
    int port = std::atoi(v["TESSERA_STORE_PORT"].c_str());
    EXPECT_GT(port, 0) << "TESSERA_STORE_PORT must be the store's real port, not 0";
    EXPECT_LT(port, 65536);
    EXPECT_EQ(v["TESSERA_STORE_ADDR"], "127.0.0.1");
    // MASTER_PORT is free for a torch.distributed program's own store.
    int torch_port = std::atoi(v["MASTER_PORT"].c_str());
    EXPECT_GT(torch_port, 0);
    EXPECT_NE(torch_port, port);
    EXPECT_EQ(v["TORCHELASTIC_USE_AGENT_STORE"], "False");
    EXPECT_EQ(v["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(v["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(v["TORCHELASTIC_RUN_ID"], "job42");
    EXPECT_EQ(v["TESSERA_JOB_TOKEN"], "feedbeef");
    EXPECT_EQ(v["TESSERA_LAUNCHER"], "1");
    EXPECT_EQ(v["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(v["TEST_PASSTHROUGH"], "kept");
  }
  EXPECT_EQ(env_of_rank(r.output, 0)["MASTER_PORT"], env_of_rank(r.output, 1)["MASTER_PORT"]);
  EXPECT_EQ(env_of_rank(r.output, 0)["TESSERA_STORE_PORT"],
            env_of_rank(r.output, 1)["TESSERA_STORE_PORT"]);
}

TEST(Launcher, GeneratesAJobTokenAndHonoursNodeRank) {
  std::string m = unique_marker("token");
  // A node of several needs the shared token and a fixed port.
  auto r = run_command("env -u TESSERA_JOB_TOKEN " + launch_line("-n 1", m, "env"), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string token = env_of_rank(r.output, 0)["TESSERA_JOB_TOKEN"];
  EXPECT_EQ(token.size(), 32u) << r.output;
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;

  // Node 1's agent joins node 0's rendezvous (started alongside, output dropped).
  auto node = [&](int rank) {
    return "TESSERA_JOB_TOKEN=abc " + tessera_bin() + " run -n 2 --nnodes 2 --node-rank " +
           std::to_string(rank) + " --master-port 29999 " + kWorker + " " + m + " env";
  };
  auto r2 = run_command(node(0) + " >/dev/null 2>&1 & " + node(1) + "; e=$?; wait; exit $e", 30);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  auto v = env_of_rank(r2.output, 3);
  EXPECT_EQ(v["RANK"], "3") << r2.output;
  EXPECT_EQ(v["LOCAL_RANK"], "1");
  EXPECT_EQ(v["WORLD_SIZE"], "4");
  EXPECT_EQ(v["GROUP_RANK"], "1");
  EXPECT_EQ(v["TESSERA_STORE_PORT"], "29999");
  EXPECT_EQ(v["MASTER_PORT"], "30000") << "the next port, the same on every node";
  EXPECT_EQ(env_of_rank(r2.output, 2)["LOCAL_RANK"], "0");
}

TEST(Launcher, PrefixesLinesAndKeepsStreamsApart) {
  std::string m = unique_marker("prefix");
  std::string actions = "out hello err oops out --bogus partial unfinished";
  auto r = run_command(launch_line("-n 2", m, actions), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_NE(r.output.find(p + "hello\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(p + "oops\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(p + "--bogus\n"), std::string::npos) << "arguments pass through";
    EXPECT_NE(r.output.find(p + "unfinished\n"), std::string::npos) << "partial line flushed";
  }
  // stderr lines go to the launcher's stderr only.
  auto quiet = run_command(launch_line("-n 2", m, actions) + " 2>/dev/null", 30);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_NE(quiet.output.find("[rank 1] hello"), std::string::npos) << quiet.output;
  EXPECT_EQ(quiet.output.find("oops"), std::string::npos) << quiet.output;
}

TEST(Launcher, LogDirHoldsEachRanksLines) {
  TempDir dir;
  std::string logs = dir.path() + "/logs/nested";
  std::string m = unique_marker("logdir");
  auto r = run_command(launch_line("-n 2 --log-dir " + logs, m, "out hello err oops"), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = logs + "/rank_" + std::to_string(rank) + ".log";
    ASSERT_TRUE(std::filesystem::exists(log)) << "missing rank_" << rank << ".log";
    const std::string text = read_text_file(log);
    std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_NE(text.find(p + "hello\n"), std::string::npos) << text;
    EXPECT_NE(text.find(p + "oops\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("[rank " + std::to_string(1 - rank) + "]"), std::string::npos);
  }
}

TEST(Launcher, ExitCodePropagates) {
  std::string m = unique_marker("exit");
  auto ok = run_command(launch_line("-n 2", m, "out fine"), 30);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.output.find("job failed"), std::string::npos) << ok.output;

  auto seven = run_command(launch_line("-n 1", m, "exit 7"), 30);
  EXPECT_EQ(seven.exit_code, 7) << seven.output;
  EXPECT_NE(seven.output.find("rank 0 (local rank 0, pid"), std::string::npos) << seven.output;

  auto killed = run_command(launch_line("-n 1", m, "out bye kill 9"), 30);
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.output;
  EXPECT_NE(killed.output.find("was killed by SIGKILL"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("  [rank 0] bye"), std::string::npos) << killed.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
}

TEST(Launcher, FailureTearsDownTheOtherWorkers) {
  std::string m = unique_marker("teardown");
  // Rank 1 prints, exits 3 after 0.3 s; ranks 0 and 2 would sleep 30 s.
  auto r = run_command(with_end_stamp(launch_line(
                           "-n 3", m,
                           "rank 1 out about-to-fail rank 1 sleep 0.3 rank 1 stamp failing "
                           "rank 1 exit 3 sleep 30")),
                       60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  double teardown = seconds_between(r.output, "[rank 1] failing");
  EXPECT_GE(teardown, 0) << r.output;
  EXPECT_LT(teardown, 3.0) << "the sleeping ranks must die on SIGTERM, well within the grace period";
  EXPECT_NE(r.output.find("first failure: rank 1 (local rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  [rank 1] about-to-fail"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 was killed by SIGTERM (stopped by the launcher)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 2 was killed by SIGTERM"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0) << "a worker outlived the launcher";
  std::printf("from a worker's failure to the launcher's exit: %.2f s\n", teardown);
}

TEST(Launcher, GracePeriodEndsInSigkill) {
  std::string m = unique_marker("grace");
  auto r = run_command(with_end_stamp(launch_line(
                           "-n 2 --grace-period 1", m,
                           "ignore-term rank 1 sleep 0.2 rank 1 stamp failing rank 1 exit 5 "
                           "sleep 30")),
                       60);
  EXPECT_EQ(r.exit_code, 5) << r.output;
  double teardown = seconds_between(r.output, "[rank 1] failing");
  EXPECT_GT(teardown, 1.0) << r.output;
  EXPECT_LT(teardown, 4.0) << r.output;
  EXPECT_NE(r.output.find("rank 0 was killed by SIGKILL (stopped by the launcher)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
  std::printf("teardown of a worker ignoring SIGTERM (grace 1 s): %.2f s\n", teardown);
}

TEST(Launcher, RestartsAllWorkersUpToMaxRestarts) {
  std::string m = unique_marker("restart");
  auto r = run_command(launch_line("-n 2 --max-restarts 2", m, "env rank 1 exit 4 sleep 30"), 60);
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("[rank 1] TORCHELASTIC_RESTART_COUNT=2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("restarting all workers (restart 2 of 2)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("TORCHELASTIC_RESTART_COUNT=3"), std::string::npos) << r.output;

  // A job that fails only on its first attempt succeeds after one restart.
  auto ok = run_command(launch_line("-n 2 --max-restarts 1", m, "fail-first 6 out done"), 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("[rank 0] done"), std::string::npos) << ok.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
}

}  // namespace
}  // namespace tessera::testing

namespace tessera::testing {
namespace {

// The error file of a job whose restarts ran out: torchrun's layout, naming the
// root-cause rank, host, exit code or signal, and its last line.
TEST(LauncherErrorFile, NamesTheRootCauseRankHostAndSignalWhenRestartsRunOut) {
  const std::string m = unique_marker("errfile");
  const std::string file = std::filesystem::temp_directory_path() / (m + ".json");
  auto r = run_command(launch_line("-n 2 --max-restarts 1 --error-file " + file, m,
                                   "rank 1 out \"about to die\" rank 1 kill 9 sleep 5"),
                       60);
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  std::ifstream in(file);
  ASSERT_TRUE(in.good()) << r.output;
  const auto doc = nlohmann::json::parse(in);
  const auto& info = doc.at("message").at("extraInfo");
  EXPECT_EQ(info.at("rank"), 1);
  EXPECT_EQ(info.at("local_rank"), 1);
  EXPECT_EQ(info.at("exitcode"), -9);
  EXPECT_EQ(info.at("signal"), "SIGKILL");
  EXPECT_EQ(info.at("restarts"), 1);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(info.at("hostname"), host);
  EXPECT_EQ(doc.at("message").at("message"), "[rank 1] about to die");
  std::filesystem::remove(file);

  // TORCHELASTIC_ERROR_FILE, as torchrun users set it; an exit code this time.
  auto r2 = run_command("TORCHELASTIC_ERROR_FILE=" + file + " " +
                            launch_line("-n 2", m, "rank 0 exit 3 sleep 5"),
                        60);
  EXPECT_EQ(r2.exit_code, 3) << r2.output;
  std::ifstream in2(file);
  ASSERT_TRUE(in2.good()) << r2.output;
  const auto doc2 = nlohmann::json::parse(in2);
  EXPECT_EQ(doc2.at("message").at("extraInfo").at("exitcode"), 3);
  EXPECT_EQ(doc2.at("message").at("extraInfo").at("rank"), 0);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace tessera::testing
