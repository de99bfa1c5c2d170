// NCCL backend on real GPUs: rank processes joined by tessera::init(), as a
// launcher starts them (torchrun-style RANK/WORLD_SIZE/MASTER_* variables; one
// case goes through `tessera run` when that binary is built). With fewer GPUs
// than ranks, all ranks share GPU 0 and each gets its own NCCL_HOSTID so NCCL
// treats it as a separate host (traffic then goes through NCCL's socket
// transport on loopback: correctness only, never a bandwidth figure for
// multi-GPU machines). Every case skips, saying why, without a CUDA device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/base/socket_util.h"
#include "tessera/comm/nccl/nccl_backend.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

std::string self_path() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

int free_port() {
  comm::net::Socket s = comm::net::listen_tcp("127.0.0.1", 0);
  return comm::net::local_port(s.fd());
}

// Environment every rank gets: NCCL's one-GPU recipe when ranks share a GPU.
std::string common_env(int world, const std::string& mode, int timeout_s) {
  std::ostringstream env;
  env << "TESSERA_NCCL_TEST_MODE=" << mode << " TESSERA_BACKEND=nccl TESSERA_TIMEOUT=" << timeout_s
      << " WORLD_SIZE=" << world << " LOCAL_WORLD_SIZE=" << world
      << " MASTER_ADDR=127.0.0.1 NCCL_DEBUG=${NCCL_DEBUG:-WARN} ";
  if (comm::nccl::cuda_device_count() < world) {
    env << "TESSERA_NCCL_TEST_HOSTID_PER_RANK=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "
           "NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 ";
  }
  return env.str();
}

// Starts `world` rank processes of this binary (all of them, or only rank 0 and
// the ones in `ranks`); returns their combined output and rank 0's exit code.
CommandResult launch(int world, const std::string& mode, int timeout_s, double limit_s,
                     const std::string& extra = "") {
  std::ostringstream sh;
  sh << "export " << common_env(world, mode, timeout_s) << extra << " MASTER_PORT=" << free_port()
     << "; dir=$(mktemp -d); pids=''; ";
  for (int r = 0; r < world; ++r) {
    sh << "RANK=" << r << " LOCAL_RANK=" << r << " '" << self_path()
       << "' --gtest_filter=NcclWorker.Run >$dir/" << r << ".log 2>&1 & pids=\"$pids $!\"; ";
  }
  sh << "rc=0; i=0; for p in $pids; do wait $p; c=$?; echo \"rank $i exit $c\"; "
        "[ $c -ne 0 ] && rc=1; i=$((i+1)); done; "
        "for f in $dir/*.log; do echo \"== $f\"; grep -v '^\\[' $f | head -400; done; "
        "grep -h '^\\[  FAILED\\|Failure\\|Expected' $dir/*.log | head -40; rm -rf $dir; exit $rc";
  CommandResult result = run_command(sh.str(), limit_s);
  std::cout << result.output << std::endl;
  return result;
}

std::string gpu_skip_reason() {
  if (comm::nccl::cuda_device_count() == 0) {
    return "no CUDA device visible (no GPU or no driver): the NCCL GPU tests need one";
  }
  return "";
}

TEST(NcclGpu, SingleRankInProcess) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  comm::ProcessGroupOptions o;
  o.backend = "nccl";
  o.heartbeat_interval = 0;
  o.timeout = std::chrono::seconds(30);
  comm::ProcessGroup g(std::make_shared<comm::MemoryStore>(), 0, 1, o);
  auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor f = at::arange(10, cuda.dtype(at::kFloat));
  g.all_reduce(f, comm::ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::equal(f.cpu(), at::arange(10, at::kFloat)));
  at::Tensor i = at::full({5}, 7, cuda.dtype(at::kLong));
  g.all_reduce(i, comm::ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::equal(i.cpu(), at::full({5}, 7, at::kLong)));
  EXPECT_THROW(g.all_reduce(at::ones({3})), ConfigError);  // a CPU tensor
  // An unsupported dtype fails the op (and breaks the group: last).
  try {
    g.all_reduce(at::ones({3}, cuda.dtype(at::kBool)))->wait();
    ADD_FAILURE() << "a bool all_reduce succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support dtype Bool"), std::string::npos)
        << e.what();
  }
  g.shutdown();
}

TEST(NcclGpu, TwoRanksEveryOpAndDtype) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  CommandResult r = launch(2, "collectives", 60, 240, "TESSERA_NCCL_TEST_BW=1");
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.find("CHECK") == std::string::npos, false) << "no check ran";
  EXPECT_EQ(r.output.find(" FAIL"), std::string::npos);
}

TEST(NcclGpu, FourRanksEveryOpAndDtype) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  CommandResult r = launch(4, "collectives", 60, 300);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.find(" FAIL"), std::string::npos);
}

TEST(NcclGpu, SilentPeerTimesOutNamingTheOp) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const int timeout_s = 8;
  CommandResult r = launch(2, "timeout", timeout_s, 90, "TESSERA_STALL_WARN=0");
  EXPECT_FALSE(r.timed_out) << "the ranks hung";
  EXPECT_NE(r.output.find("CHECK timeout/silent_peer PASS"), std::string::npos);
  EXPECT_NE(r.output.find("rank 0 exit 0"), std::string::npos);
}

TEST(NcclGpu, ThroughTesseraRun) {
  if (auto why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const char* bin = std::getenv("TESSERA_BIN");
  if (bin == nullptr || access(bin, X_OK) != 0) {
    GTEST_SKIP() << "the tessera binary is not built (TESSERA_BIN): launcher case not run";
  }
  std::string cmd = "export " + common_env(2, "collectives", 60) + "; '" + bin + "' run -n 2 '" +
                    self_path() + "' --gtest_filter=NcclWorker.Run 2>&1";
  CommandResult r = run_command(cmd, 240);
  std::cout << r.output << std::endl;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.find(" FAIL"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing
