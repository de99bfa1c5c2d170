// torchrun and `tessera run`, each starting the other's programs.
//  * A PyTorch 2.x torch.distributed program under `tessera run`: it finds
//    torchrun's environment, its rank 0 hosts its own c10d store on MASTER_PORT,
//    and a gloo all_reduce gives the right sum on every rank, while Tessera
//    workers keep joining the launcher's authenticated store.
//  * Tessera's C++ workers under `torchrun --nproc-per-node 2`: they join the
//    c10d store torchrun's agent hosts (TORCHELASTIC_USE_AGENT_STORE) as clients
//    and run collectives whose every row checks its result.
// Skipped when the Python (TESSERA_PYTHON) cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

bool python_has_torch() {
  return run_command(tessera::testing::python_bin() + " -c 'import torch.distributed' 2>&1", 120).exit_code == 0;
}

TEST(LauncherTorch, AGlooAllReduceProgramRunsUnchanged) {
  if (!python_has_torch()) GTEST_SKIP() << "python3 cannot import torch";
  const std::string m = unique_marker("torchprog");
  const std::string program =
      "import sys, torch, torch.distributed as dist\n"
      "dist.init_process_group('gloo')\n"
      "t = torch.tensor([float(dist.get_rank() + 1)])\n"
      "dist.all_reduce(t)\n"
      "print('sum', t.item(), 'of', dist.get_world_size(), 'ranks')\n"
      "dist.destroy_process_group()\n";
  auto r = run_command(tessera_bin() + " run --master-port 0 -n 2 " + tessera::testing::python_bin() + " -c " +
                           shell_quote(program) + " " + m + " 2>&1",
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] sum 3.0 of 2 ranks"),
              std::string::npos)
        << r.output;
  }
  EXPECT_EQ(wait_for_no_processes(m, 5), 0);
}

TEST(LauncherTorch, TorchrunStartsTesseraWorkers) {
  if (!python_has_torch()) GTEST_SKIP() << "python3 cannot import torch";
  const std::string python = python_bin();
  const std::string torchrun = python.substr(0, python.rfind('/') + 1) + "torchrun";
  // The marker names the JSON file, so it is on every worker's command line.
  const std::string m = unique_marker("torchrun");
  // --master-port 0 is not torchrun's: pick a port from the pid, away from others.
  const std::string port = std::to_string(29000 + (getpid() % 900));
  auto r = run_command("TESSERA_BACKEND=gloo " + torchrun + " --nproc-per-node 2 --no-python --master-port " +
                           port + " " + tessera_bin() +
                           " bench --op all_reduce --min-bytes 4K --max-bytes 64K --iters 3 --json /tmp/" + m +
                           ".json 2>&1; rc=$?; rm -f /tmp/" + m + ".json; exit $rc",
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int ok_rows = 0;
  for (size_t pos = 0; (pos = r.output.find(" ok", pos)) != std::string::npos; ++pos) ++ok_rows;
  EXPECT_GE(ok_rows, 5) << r.output;  // 4K, 8K, 16K, 32K, 64K
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_EQ(wait_for_no_processes(m, 5), 0);
}

}  // namespace
}  // namespace tessera::testing
