// ZeRO stages 1, 2 and 3 in real processes through `tessera run`, at 2, 3 and 4
// ranks, over gloo and over shm: after 20 AdamW steps (accumulation 2, clipping)
// every stage ends with the parameters plain data parallel ends with (1e-5).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "tessera/checkpoint/tensor_file.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

std::map<std::string, at::Tensor> read_params(const std::string& path) {
  const std::string bytes = checkpoint::read_file_bytes(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : checkpoint::parse_tensor_index(bytes, path)) {
    out[e.name] = checkpoint::tensor_from_bytes(bytes, e, path);
  }
  return out;
}

std::string run_stage(const TempDir& dir, int world, const std::string& backend, int stage) {
  const std::string out = dir.path() + "/w" + std::to_string(world) + "_s" + std::to_string(stage) + ".tsr";
  const auto r = run_command("TESSERA_TIMEOUT=60 TESSERA_BACKEND=" + backend + " " + tessera_bin() +
                                 " run --master-port 0 -n " + std::to_string(world) + " " + TESSERA_ZERO_WORKER +
                                 " " + std::to_string(stage) + " " + out + " 2>&1",
                             180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on " + std::to_string(world) + " ranks (" + backend + ")"),
            std::string::npos) << r.output;
  return out;
}

TEST(ZeroProcesses, EveryStageMatchesDataParallelAtTwoThreeAndFourRanks) {
  TempDir dir("tessera_zero_proc");
  for (auto [world, backend] : std::vector<std::pair<int, std::string>>{
           {2, "gloo"}, {3, "shm"}, {4, "shm"}}) {
    const auto reference = read_params(run_stage(dir, world, backend, 0));
    for (int stage : {1, 2, 3}) {
      const auto got = read_params(run_stage(dir, world, backend, stage));
      double worst = 0;
      for (const auto& [name, t] : reference) {
        ASSERT_TRUE(got.count(name)) << name;
        worst = std::max(worst, (got.at(name) - t).abs().max().item<double>());
      }
      std::printf("[zero processes] %d ranks over %s, stage %d vs DDP: max |diff| %.3g\n", world,
                  backend.c_str(), stage, worst);
      EXPECT_LE(worst, 1e-5) << "stage " << stage << ", " << world << " ranks";
    }
  }
}

}  // namespace
}  // namespace tessera::testing
