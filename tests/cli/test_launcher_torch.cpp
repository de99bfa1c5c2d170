// A torch.distributed program (Debian's python3-torch) under `tessera run`: it
// finds torchrun's environment, its rank 0 hosts its own c10d store on
// MASTER_PORT, and a gloo all_reduce gives the right sum on every rank, while
// Tessera workers keep joining the launcher's authenticated store. Skipped when
// python3 cannot import torch.
#include <gtest/gtest.h>

#include "launcher_test_util.h"

namespace tessera::testing {
namespace {

bool python_has_torch() {
  return run_command("/usr/bin/python3 -c 'import torch.distributed' 2>&1", 120).exit_code == 0;
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
  auto r = run_command(tessera_bin() + " run --master-port 0 -n 2 /usr/bin/python3 -c " +
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

}  // namespace
}  // namespace tessera::testing
