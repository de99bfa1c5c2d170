// `tessera run` refusing bad input (one line, non-zero exit, no worker started)
// and reacting to signals sent to the launcher itself.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

const std::string kWorker = TESSERA_TEST_WORKER;

struct BadInput {
  std::string args;      // after `tessera run`
  std::string expected;  // substring of the error line
};

class LauncherBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(LauncherBadInput, IsOneLineErrorAndNonZeroExit) {
  const BadInput& p = GetParam();
  auto r = run_command("env -u TESSERA_JOB_TOKEN " + tessera_bin() + " run " + p.args, 20);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("tessera run: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(p.expected), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LauncherBadInput,
    ::testing::Values(
        BadInput{"--bogus 1 " + kWorker, "unknown option '--bogus'"},
        BadInput{"-x " + kWorker, "unknown option '-x'"},
        BadInput{"-n 0 " + kWorker, "-n expects a positive number of processes, got '0'"},
        BadInput{"-n -2 " + kWorker, "-n expects a positive number of processes, got '-2'"},
        BadInput{"--nproc-per-node abc " + kWorker, "--nproc-per-node expects a positive number"},
        BadInput{"--nproc-per-node=0 " + kWorker, "got '0'"},
        BadInput{"-n", "option '-n' needs a value"},
        BadInput{"-n 2", "no program given"},
        BadInput{"", "no program given"},
        BadInput{"--master-port 0 -n 2 /nonexistent/tessera_prog", "cannot run '/nonexistent/tessera_prog': No such file"},
        BadInput{"--master-port 0 no_such_program_tessera_xyz", "cannot run 'no_such_program_tessera_xyz'"},
        BadInput{"--master-port 0 /dev/null", "cannot run '/dev/null': Permission denied"},
        BadInput{"--nnodes 2 --node-rank 2 " + kWorker, "--node-rank 2 must be less than --nnodes 2"},
        BadInput{"--nnodes 2 --node-rank 1 " + kWorker, "needs the same TESSERA_JOB_TOKEN"},
        BadInput{"--master-port 70000 " + kWorker, "--master-port expects a port in 0..65535"},
        BadInput{"--grace-period -1 " + kWorker, "--grace-period expects seconds >= 0"}));

TEST(LauncherBadInput, PortInUseFailsBeforeAnyWorkerStarts) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);

  TempDir dir;
  auto r = run_command(tessera_bin() + " run -n 2 --master-port " + std::to_string(port) + " " +
                           kWorker + " " + unique_marker("port") + " ready " + dir.path(),
                       20);
  close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("tessera run: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a worker started despite the busy port";
}

TEST(LauncherBadInput, HelpExitsZero) {
  auto r = run_command(tessera_bin() + " run --help", 20);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node"), std::string::npos) << r.output;
}

// Starts a launcher in the background with two workers that announce themselves in
// a directory, waits until both are up, sends `signal` to the launcher, and prints
// "launcher_exit=<code>".
std::string signal_script(const std::string& marker, const std::string& dir,
                          const std::string& signal, const std::string& actions) {
  // A background job of a non-interactive shell starts with SIGINT ignored (and
  // the launcher keeps it so, like any program); env restores the default.
  return "env --default-signal=INT " + tessera_bin() + " run --master-port 0 -n 2 " + kWorker + " " + marker + " " + actions +
         " ready " + dir + " sleep 30 & p=$!; "
         "for i in $(seq 200); do [ -e " + dir + "/ready_0 ] && [ -e " + dir +
         "/ready_1 ] && break; sleep 0.05; done; "
         "kill -" + signal + " $p; wait $p; echo launcher_exit=$?";
}

TEST(LauncherSignals, SigkilledLauncherTakesItsWorkersAlong) {
  TempDir dir;
  std::string m = unique_marker("sigkill");
  auto r = run_command(signal_script(m, dir.path(), "KILL", ""), 30);
  EXPECT_NE(r.output.find("launcher_exit=137"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/ready_1")) << "workers never started";
  // PR_SET_PDEATHSIG: the kernel kills the workers when the launcher dies.
  EXPECT_EQ(wait_for_no_processes(m, 3), 0) << "workers survived a SIGKILLed launcher";
}

TEST(LauncherSignals, SigtermIsForwardedThenTheJobEnds) {
  TempDir dir;
  std::string m = unique_marker("sigterm");
  auto r = run_command(signal_script(m, dir.path(), "TERM", "on-term got-sigterm"), 30);
  EXPECT_NE(r.output.find("launcher_exit=143"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 0] got-sigterm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] got-sigterm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("received SIGTERM"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
}

TEST(LauncherSignals, SigintStopsWorkersThatIgnoreNothing) {
  TempDir dir;
  std::string m = unique_marker("sigint");
  auto r = run_command(signal_script(m, dir.path(), "INT", ""), 30);
  EXPECT_NE(r.output.find("launcher_exit=130"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by SIGINT"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 2), 0);
}

}  // namespace
}  // namespace tessera::testing
