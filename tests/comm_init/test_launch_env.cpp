// tessera::init() under each launcher's environment: LaunchInfo parsing for
// tessera run / torchrun / mpirun / Slurm, and real workers joining a torchrun
// agent store (a c10d TCPStore hosted by Python) as clients.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "tessera/comm/init.h"
#include "tessera/comm/slurm_env.h"
#include "tessera/core/error.h"
#include "testing/subprocess.h"

namespace tessera {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kAll) unsetenv(name);
    for (auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~ScopedEnv() {
    for (const char* name : kAll) unsetenv(name);
  }

 private:
  static constexpr const char* kAll[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
      "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "TESSERA_LAUNCHER",
      "TESSERA_STORE_ADDR", "TESSERA_STORE_PORT", "JOB_COMPLETION_INDEX",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
      "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_LAUNCH_NODE_IPADDR",
      "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID",
      "SLURM_STEP_ID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
};

TEST(LaunchInfo, NoLauncherIsASingleProcessJob) {
  ScopedEnv env({});
  LaunchInfo info = LaunchInfo::from_env();
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.rank, 0);
}

TEST(LaunchInfo, TorchrunEnvironment) {
  ScopedEnv env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
                 {"MASTER_PORT", "1234"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                 {"TORCHELASTIC_RUN_ID", "job"}});
  LaunchInfo info = LaunchInfo::from_env();
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.node_rank, 1);
  EXPECT_EQ(info.master_addr, "10.0.0.1");
  EXPECT_EQ(info.master_port, 1234);
  EXPECT_TRUE(info.use_agent_store);
}

TEST(LaunchInfo, TesseraRunWorkersJoinTheLaunchersStoreNotMasterPort) {
  // `tessera run` leaves MASTER_PORT to torch.distributed programs (their own
  // store, TORCHELASTIC_USE_AGENT_STORE=False) and names its store separately.
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "29501"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                 {"TORCHELASTIC_RUN_ID", "none"}, {"TESSERA_LAUNCHER", "1"},
                 {"TESSERA_STORE_ADDR", "127.0.0.2"}, {"TESSERA_STORE_PORT", "29500"}});
  LaunchInfo info = LaunchInfo::from_env();
  EXPECT_EQ(info.launcher, "tessera");
  EXPECT_EQ(info.master_addr, "127.0.0.2");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_TRUE(info.use_agent_store);
}

TEST(LaunchInfo, KubernetesIndexedJobPodsTakeTheirRankFromTheCompletionIndex) {
  {
    // docs/kubernetes.md's manifest: the index, the completions, pod 0's DNS name.
    ScopedEnv env({{"JOB_COMPLETION_INDEX", "3"}, {"WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "tessera-0.tessera"}, {"MASTER_PORT", "29500"}});
    LaunchInfo info = LaunchInfo::from_env();
    EXPECT_EQ(info.launcher, "kubernetes");
    EXPECT_EQ(info.rank, 3);
    EXPECT_EQ(info.world_size, 4);
    EXPECT_EQ(info.local_rank, 0);
    EXPECT_EQ(info.local_world_size, 1);
    EXPECT_EQ(info.node_rank, 3);
    EXPECT_EQ(info.master_addr, "tessera-0.tessera");
    EXPECT_FALSE(info.use_agent_store) << "pod 0 hosts the store";
  }
  {
    ScopedEnv env({{"JOB_COMPLETION_INDEX", "1"}});
    try {
      LaunchInfo::from_env();
      FAIL() << "a world size is needed";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("WORLD_SIZE is not"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv env({{"JOB_COMPLETION_INDEX", "4"}, {"WORLD_SIZE", "4"}});
    EXPECT_THROW(LaunchInfo::from_env(), ConfigError) << "index 4 of 4 pods";
  }
}

TEST(LaunchInfo, MpirunAndSlurmEnvironments) {
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    LaunchInfo info = LaunchInfo::from_env();
    EXPECT_EQ(info.launcher, "mpirun");
    EXPECT_EQ(info.rank, 1);
    EXPECT_EQ(info.world_size, 2);
    EXPECT_FALSE(info.use_agent_store);
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                   {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"},
                   {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}});
    LaunchInfo info = LaunchInfo::from_env();
    EXPECT_EQ(info.launcher, "slurm");
    EXPECT_EQ(info.rank, 5);
    EXPECT_EQ(info.local_world_size, 4);
    EXPECT_EQ(info.master_addr, "10.1.2.3");
  }
}

TEST(SlurmEnv, HostListsExpandLikeScontrol) {
  using comm::expand_slurm_hostlist;
  EXPECT_EQ(expand_slurm_hostlist(""), std::vector<std::string>{});
  EXPECT_EQ(expand_slurm_hostlist("vm"), std::vector<std::string>{"vm"});
  EXPECT_EQ(expand_slurm_hostlist("node[08-10,3],gpu-a"),
            (std::vector<std::string>{"node08", "node09", "node10", "node3", "gpu-a"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]n[1-2]"),
            (std::vector<std::string>{"r1n1", "r1n2", "r2n1", "r2n2"}));
  for (const char* bad : {"node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "n[[1]]"}) {
    EXPECT_THROW(expand_slurm_hostlist(bad), ConfigError) << bad;
  }
  try {
    expand_slurm_hostlist("node[3-1]");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("range '3-1' runs backwards"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(comm::expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(comm::expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_THROW(comm::expand_slurm_tasks_per_node("2(x"), ConfigError);
  EXPECT_THROW(comm::expand_slurm_tasks_per_node("two"), ConfigError);
}

TEST(LaunchInfo, SlurmStepPutsTheStoreOnNodeZeroAtAPortOfTheJob) {
  // srun started from a login node (10.9.9.9): the store is still on node 0.
  ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "5"}, {"SLURM_LOCALID", "0"},
                 {"SLURM_NODEID", "0"}, {"SLURM_STEP_NODELIST", "node[07-08]"},
                 {"SLURM_JOB_NODELIST", "node[07-09]"}, {"SLURM_STEP_TASKS_PER_NODE", "3,2"},
                 {"SLURM_JOB_ID", "123"}, {"SLURM_STEP_ID", "1"},
                 {"SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9"}});
  LaunchInfo info = LaunchInfo::from_env();
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.master_addr, "node07");
  EXPECT_EQ(info.store_bind_addr, "0.0.0.0");  // every address of node 0 itself
  EXPECT_EQ(info.master_port, 20000 + (123 * 64 + 1) % 20000);
  EXPECT_EQ(info.local_world_size, 3);
  {
    // The last task, on node 1: 2 tasks there.
    ScopedEnv env2({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "5"}, {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "1"}, {"SLURM_STEP_NODELIST", "node[07-08]"},
                    {"SLURM_STEP_TASKS_PER_NODE", "3,2"}, {"MASTER_ADDR", "10.0.0.7"},
                    {"MASTER_PORT", "4000"}});
    LaunchInfo other = LaunchInfo::from_env();
    EXPECT_EQ(other.local_world_size, 2);
    EXPECT_EQ(other.node_rank, 1);
    EXPECT_EQ(other.master_addr, "10.0.0.7");  // an explicit MASTER_ADDR wins
    EXPECT_EQ(other.store_bind_addr, "");
    EXPECT_EQ(other.master_port, 4000);
  }
}

TEST(LaunchInfo, SlurmTaskZeroAwayFromNodeZeroIsAConfigError) {
  ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                 {"SLURM_NODEID", "1"}, {"SLURM_STEP_NODELIST", "a,b"},
                 {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}});
  try {
    LaunchInfo::from_env();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--distribution=block"), std::string::npos) << e.what();
  }
}

TEST(LaunchInfo, InconsistentEnvironmentIsAConfigError) {
  ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "2"}});
  try {
    LaunchInfo::from_env();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 4 is not below the world size 2"),
              std::string::npos)
        << e.what();
  }
  ScopedEnv env2({{"RANK", "0"}});
  EXPECT_THROW(LaunchInfo::from_env(), ConfigError);
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// What torchrun does for a native binary: its agent hosts a c10d TCPStore on
// MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True. Workers must join that
// store as clients (binding MASTER_PORT again would fail) and run collectives.
TEST(TorchrunAgentStore, WorkersJoinThePythonHostedStoreAsClients) {
  if (testing::run_command(tessera::testing::python_bin() + " -c 'import torch.distributed'", 60).exit_code != 0) {
    GTEST_SKIP() << "TESSERA_PYTHON cannot import torch (scripts/install-deps.sh installs it)";
  }
  int port = free_port();
  std::string p = std::to_string(port);
  std::string server =
      tessera::testing::python_bin() + " -c \"import datetime,time,torch.distributed as d; "
      "s=d.TCPStore('127.0.0.1'," + p + ",None,True,datetime.timedelta(seconds=60),False); "
      "time.sleep(40)\" & SERVER=$!; sleep 2; ";
  std::string worker_env = "TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=t "
                           "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + p +
                           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 TESSERA_BACKEND=gloo ";
  std::string bench = testing::tessera_bin() +
                      " bench --op all_reduce --min-bytes 4K --max-bytes 8K --iters 3";
  std::string cmd = server + "env " + worker_env + "RANK=0 LOCAL_RANK=0 " + bench +
                    " > /tmp/ts_torchrun_r0.$$ 2>&1 & A=$!; env " + worker_env +
                    "RANK=1 LOCAL_RANK=1 " + bench +
                    " > /dev/null 2>&1 & B=$!; wait $A; RA=$?; wait $B; RB=$?; kill $SERVER; "
                    "cat /tmp/ts_torchrun_r0.$$; rm -f /tmp/ts_torchrun_r0.$$; "
                    "echo \"exit $RA $RB\"";
  auto result = testing::run_command(cmd, 120);
  EXPECT_NE(result.output.find("exit 0 0"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("ok"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("FAIL"), std::string::npos) << result.output;
}

// The acceptance run of the foundation: four real processes through the real
// launcher, every benchmark row checked against the expected result.
TEST(Launcher, FourRanksRunTheBenchmarkWithCorrectRows) {
  std::string cmd = testing::tessera_bin() + " run -n 4 --master-port 0 " +
                    testing::tessera_bin() +
                    " bench --op all_reduce --min-bytes 1K --max-bytes 256K --iters 3";
  auto result = testing::run_command("TESSERA_BACKEND=gloo " + cmd, 180);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  int ok_rows = 0;
  for (size_t pos = 0; (pos = result.output.find(" ok", pos)) != std::string::npos; ++pos) {
    ++ok_rows;
  }
  EXPECT_GE(ok_rows, 9) << result.output;  // 1K..256K: 9 sizes
  EXPECT_EQ(result.output.find("FAIL"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace tessera
