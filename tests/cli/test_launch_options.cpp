// `tessera run` flag parsing and the worker environment, without processes.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/cli/launcher/launch_options.h"
#include "tessera/cli/launcher/worker_env.h"
#include "tessera/core/error.h"

namespace tessera::cli {
namespace {

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_launch_options(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(LaunchOptions, TorchrunFlagsInEverySpelling) {
  auto o = parse_launch_options({"--nproc-per-node", "4", "--nnodes=2", "--node_rank", "1",
                                 "--master-addr", "10.0.0.1", "--master_port=1234",
                                 "--max-restarts", "3", "--grace-period", "0.5", "--run-id",
                                 "abc", "--log-dir", "/tmp/x", "prog", "a"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_DOUBLE_EQ(o.grace_period, 0.5);
  EXPECT_EQ(o.run_id, "abc");
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.program, (std::vector<std::string>{"prog", "a"}));
  EXPECT_EQ(o.world_size(), 8);
  EXPECT_EQ(o.global_rank(3), 7);
  EXPECT_EQ(parse_launch_options({"-n3", "p"}).nproc_per_node, 3);
  EXPECT_EQ(parse_launch_options({"--nnodes", "2:2", "--master-port", "5", "p"}).nnodes, 2);
}

TEST(LaunchOptions, DefaultsMatchTorchrun) {
  auto o = parse_launch_options({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_DOUBLE_EQ(o.grace_period, 5.0);
  auto s = parse_launch_options({"--standalone", "p"});
  EXPECT_EQ(s.master_port, 0);
}

TEST(LaunchOptions, StopsAtTheProgram) {
  auto o = parse_launch_options({"-n", "2", "prog", "-n", "5", "--bogus", "--"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.program, (std::vector<std::string>{"prog", "-n", "5", "--bogus", "--"}));
  auto d = parse_launch_options({"--", "-weird-name", "x"});
  EXPECT_EQ(d.program, (std::vector<std::string>{"-weird-name", "x"}));
}

TEST(LaunchOptions, ErrorsNameTheFlag) {
  EXPECT_EQ(error_of({"--bogus", "p"}),
            "unknown option '--bogus' (run 'tessera run --help' for the options)");
  EXPECT_EQ(error_of({"--bogus=3", "p"}),
            "unknown option '--bogus' (run 'tessera run --help' for the options)");
  EXPECT_EQ(error_of({"-n", "0", "p"}), "-n expects a positive number of processes, got '0'");
  EXPECT_EQ(error_of({"-n", "1x", "p"}), "-n expects a positive number of processes, got '1x'");
  EXPECT_EQ(error_of({"--nnodes", "3:2", "p"}), "--nnodes '3:2': MIN must not exceed MAX");
  EXPECT_EQ(error_of({"--nnodes", "2", "--node-rank", "2", "p"}),
            "--node-rank 2 must be less than --nnodes 2 (node ranks are 0..1)");
  EXPECT_EQ(error_of({"--nnodes", "2", "--master-port", "0", "p"}).rfind("--master-port 0", 0), 0u);
  EXPECT_EQ(error_of({"--max-restarts", "-1", "p"}),
            "--max-restarts expects a number of restarts >= 0, got '-1'");
  EXPECT_EQ(error_of({}), "no program given (usage: tessera run [options] PROGRAM [ARGS...])");
  EXPECT_EQ(error_of({"--log-dir"}), "option '--log-dir' needs a value");
  EXPECT_TRUE(parse_launch_options({"--help"}).help);
}

TEST(LaunchOptions, LauncherChoosesHowAgentsStart) {
  const LaunchOptions slurm = parse_launch_options({"--launcher", "slurm", "-n", "4", "p"});
  EXPECT_EQ(slurm.launcher, "slurm");
  EXPECT_FALSE(slurm.slurm_agent);
  EXPECT_EQ(slurm.bind_addr(), "127.0.0.1");  // only agents listen on every address
  EXPECT_TRUE(parse_launch_options({"--launcher=slurm", "--slurm-agent", "p"}).slurm_agent);
  EXPECT_EQ(parse_launch_options({"--launcher", "local", "p"}).launcher, "");
  EXPECT_EQ(parse_launch_options({"--launcher", "ssh", "-H", "a:1", "p"}).launcher, "ssh");
  EXPECT_EQ(error_of({"--launcher", "pbs", "p"}),
            "--launcher expects local, ssh or slurm, got 'pbs'");
  EXPECT_EQ(error_of({"--launcher", "ssh", "p"}),
            "--launcher ssh needs the hosts: pass --hostfile FILE or -H host1:N,host2:N");
  EXPECT_EQ(error_of({"--launcher", "slurm", "-H", "a:1", "p"}),
            "--launcher slurm takes its hosts from the Slurm allocation; drop --hostfile/-H");
  EXPECT_EQ(error_of({"--launcher", "slurm", "--master-port", "0", "p"}),
            "--master-port 0 does not work with --launcher slurm; pass a port free on node 0");
}

TEST(WorkerEnv, SetsTheContractAndKeepsTheRest) {
  auto o = parse_launch_options({"-n", "2", "--nnodes", "3", "--node-rank", "2",
                                 "--master-port", "999", "--run-id", "r1", "p"});
  JobContext job{"10.1.1.1", 4321, "tok", 2};
  auto env = worker_environment(o, job, 1, {"PATH=/bin", "RANK=99", "HOME=/root"});
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  for (const char* kv :
       {"PATH=/bin", "HOME=/root", "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=6", "LOCAL_WORLD_SIZE=2",
        "GROUP_RANK=2", "ROLE_RANK=5", "ROLE_WORLD_SIZE=6", "MASTER_ADDR=10.1.1.1",
        "MASTER_PORT=4321", "TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=2",
        "TORCHELASTIC_MAX_RESTARTS=0", "TORCHELASTIC_RUN_ID=r1", "TESSERA_JOB_TOKEN=tok",
        "TESSERA_LAUNCHER=1", "OMP_NUM_THREADS=1"}) {
    EXPECT_TRUE(has(kv)) << kv;
  }
  EXPECT_FALSE(has("RANK=99")) << "inherited values are replaced";
  auto keep = worker_environment(o, job, 0, {"OMP_NUM_THREADS=4"});
  EXPECT_NE(std::find(keep.begin(), keep.end(), "OMP_NUM_THREADS=4"), keep.end());
  EXPECT_EQ(std::count_if(keep.begin(), keep.end(),
                          [](const std::string& s) { return s.rfind("OMP_NUM_THREADS=", 0) == 0; }),
            1);
}

TEST(WorkerEnv, WorkersKeepFreedMemoryUnlessToldOtherwise) {
  JobContext job{"127.0.0.1", 4321, "tok", 0};
  auto tunables = [](const std::vector<std::string>& env) {
    std::vector<std::string> found;
    for (const auto& kv : env) {
      if (kv.rfind("GLIBC_TUNABLES=", 0) == 0) found.push_back(kv);
    }
    return found;
  };
  auto retain = tunables(worker_environment(parse_launch_options({"p"}), job, 0, {}));
  ASSERT_EQ(retain.size(), 1u);
  EXPECT_NE(retain[0].find("glibc.malloc.mmap_max=0"), std::string::npos) << retain[0];
  EXPECT_NE(retain[0].find("glibc.malloc.trim_threshold="), std::string::npos) << retain[0];
  EXPECT_TRUE(tunables(worker_environment(parse_launch_options({"--malloc", "system", "p"}), job, 0,
                                          {}))
                  .empty());
  // The user's own tunables win.
  auto mine = tunables(worker_environment(parse_launch_options({"p"}), job, 0,
                                          {"GLIBC_TUNABLES=glibc.malloc.arena_max=2"}));
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0], "GLIBC_TUNABLES=glibc.malloc.arena_max=2");
  try {
    parse_launch_options({"--malloc", "jemalloc", "p"});
    ADD_FAILURE() << "an unknown --malloc mode was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'retain' or 'system'"), std::string::npos) << e.what();
  }
}

TEST(WorkerEnv, RandomTokensAreHexAndDiffer) {
  std::string a = random_job_token(), b = random_job_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(FailureSummary, ExitCodesAndSignalNames) {
  EXPECT_EQ(signal_name(9), "SIGKILL");
  EXPECT_EQ(signal_name(15), "SIGTERM");
  RoundResult r;
  r.workers.resize(2);
  r.workers[1].rank = 1;
  r.workers[1].exit_code = 3;
  r.first_failure = 1;
  EXPECT_EQ(round_exit_code(r), 3);
  r.workers[1].exit_code = -1;
  r.workers[1].term_signal = 11;
  EXPECT_EQ(round_exit_code(r), 139);
  EXPECT_EQ(describe_exit(r.workers[1]), "was killed by SIGSEGV");
  RoundResult s;
  s.launcher_signal = 2;
  EXPECT_EQ(round_exit_code(s), 130);
  RoundResult ok;
  ok.success = true;
  EXPECT_EQ(round_exit_code(ok), 0);
}

}  // namespace
}  // namespace tessera::cli
