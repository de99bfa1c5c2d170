// The training modes through the real binaries, 2 ranks under `tessera run`:
//  - `tessera train --task digits`: the ResNet with SyncBatchNorm reaches >= 97%
//    test accuracy on the 8x8 digits;
//  - the demo GPT (the embedded default config, 300 steps) with PowerSGD at
//    rank 1 and 4, local SGD (H = 4) and delayed averaging (staleness 1): the
//    final held-out loss against synchronous DDP's (local SGD and delayed
//    averaging within 5%); PowerSGD at rank 1 sends at least 10x fewer bytes
//    per step (the communication counters).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TrainingModesCli : public ::testing::Test {
 protected:
  CommandResult tessera_train(const std::string& args, double timeout = 300) {
    const std::string bin = tessera_bin();
    return run_command("TESSERA_TIMEOUT=60 " + bin + " run --master-port 0 -n 2 " + bin +
                           " train " + args + " 2>&1",
                       timeout);
  }
  // Rows of out/metrics.jsonl that have `key`.
  std::vector<json> rows(const fs::path& out, const std::string& key) {
    std::vector<json> found;
    std::ifstream in(out / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = json::parse(line);
      if (j.contains(key)) found.push_back(j);
    }
    return found;
  }
  TempDir tmp_{"modes"};
  fs::path dir_{tmp_.path()};
};

TEST_F(TrainingModesCli, ResNetWithSyncBatchNormLearnsTheDigits) {
  auto r = tessera_train("--task digits --out " + (dir_ / "digits").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SyncBatchNorm"), std::string::npos) << r.output;
  const auto found = rows(dir_ / "digits", "test_accuracy");
  ASSERT_EQ(found.size(), 1u) << r.output;
  const double accuracy = found[0]["test_accuracy"].get<double>();
  std::printf("[digits] ResNet, 2 ranks, SyncBatchNorm, 600 steps in %.1f s: test accuracy %.4f\n",
              r.seconds, accuracy);
  EXPECT_GE(accuracy, 0.97);
  EXPECT_NE(r.output.find("test accuracy 0.9"), std::string::npos) << r.output;
}

TEST_F(TrainingModesCli, CompressedLocalAndDelayedTrainingEndNearSynchronousDdp) {
  auto printed = run_command(tessera_bin() + " train --print-default-config", 30);
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  const json demo = json::parse(printed.output);
  struct Mode {
    std::string name;
    json patch;
  };
  // PowerSGD from step 100 (150 at rank 4), local SGD and delayed averaging after
  // warm-ups of synchronous steps, as PyTorch's documentation advises: early
  // training is the most sensitive to inexact or stale gradients.
  auto powersgd = [](int rank, int start) {
    return json{{"data_parallel", {{"comm_hook", "powersgd"},
                                   {"powersgd", {{"matrix_approximation_rank", rank},
                                                 {"start_powersgd_iter", start}}}}}};
  };
  const std::vector<Mode> modes = {
      {"sync", json::object()},
      {"powersgd_r1", powersgd(1, 100)},
      {"powersgd_r4", powersgd(4, 150)},
      {"local_sgd_h4", {{"local_sgd", {{"sync_every", 4}, {"warmup_steps", 100}}}}},
      {"delayed", {{"data_parallel", {{"staleness", 1}, {"staleness_warmup_steps", 20}}}}},
  };
  // The bound each mode is held to (measured on the 2-core test machine:
  // rank 1 +21.5%, rank 4 +4.5%, local SGD +3.4%, delayed +3.7%; see
  // docs/training-modes.md). Rank 1 is the one that misses 5% on this model.
  const std::map<std::string, double> bound = {{"sync", 0.0},
                                               {"powersgd_r1", 0.25},
                                               {"powersgd_r4", 0.06},
                                               {"local_sgd_h4", 0.05},
                                               {"delayed", 0.05}};
  std::map<std::string, double> val, bytes;
  for (const auto& m : modes) {
    json cfg = demo;
    cfg.merge_patch(m.patch);
    cfg["train"]["sample_length"] = 0;
    cfg["train"]["checkpoint_interval"] = 0;
    const fs::path out = dir_ / m.name;
    const std::string path = (dir_ / (m.name + ".json")).string();
    std::ofstream(path) << cfg.dump();
    auto r = tessera_train("--config " + path + " --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << m.name << "\n" << r.output;
    const auto v = rows(out, "val_loss");
    const auto c = rows(out, "comm_bytes_per_step");
    ASSERT_FALSE(v.empty() || c.empty()) << r.output;
    val[m.name] = v.back()["val_loss"].get<double>();
    bytes[m.name] = c.back()["comm_bytes_per_step"].get<double>();  // the last 10 steps
  }
  for (const auto& m : modes) {
    std::printf("[modes] demo GPT, 2 ranks, 300 steps, %-12s: val loss %.4f (%+.2f%% vs sync), "
                "bytes sent per step %.0f (%.1fx less than sync)\n",
                m.name.c_str(), val[m.name], 100 * (val[m.name] / val["sync"] - 1), bytes[m.name],
                bytes["sync"] / std::max(bytes[m.name], 1.0));
    EXPECT_LE(val[m.name] / val["sync"] - 1, bound.at(m.name)) << m.name;
  }
  EXPECT_GE(bytes["sync"] / bytes["powersgd_r1"], 10.0);
  EXPECT_GT(bytes["powersgd_r1"], 0.0);
}

}  // namespace
}  // namespace tessera::testing
