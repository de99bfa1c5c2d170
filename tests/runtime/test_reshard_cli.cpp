// Universal checkpoints through the real binaries: `tessera train` at 4 ranks
// with ZeRO stage 3 saves at step 5; copies of that checkpoint resume at 2 ranks
// with stage 1 and at 1 rank with stage 0 (same global batch, hence another
// gradient accumulation count), and their losses for steps 6-10 match the
// uninterrupted run's. `tessera ckpt consolidate` of the final checkpoint loads
// in Python's torch.load and into a plain C++ GPT whose validation loss on the
// 4-rank run's validation batches equals the one that run reported.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/module_state.h"
#include "tessera/checkpoint/state_dict_file.h"
#include "tessera/cli/commands/train_data.h"
#include "tessera/cli/commands/train_settings.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/config.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class ReshardCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i % 7 << " jumps over the lazy dog.\n";
  }

  // Same model, data and global batch of 8 at every world size; dropout off,
  // since each rank's dropout stream depends on the world size.
  std::string config(const std::string& name, int stage) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << R"({
      "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
      "seed": 3, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": 10}},
      "zero_optimization": {"stage": )" << stage << R"(},
      "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "dropout": 0.0},
      "data": {"path": ")" << (dir_ / "corpus.txt").string() << R"(", "val_fraction": 0.1},
      "train": {"steps": 10, "eval_interval": 0, "eval_iters": 3, "checkpoint_interval": 5,
                "sample_length": 0}})";
    return path;
  }

  CommandResult tessera(const std::string& args, int ranks = 1) {
    const std::string bin = tessera_bin();
    const std::string cmd = ranks == 1 ? bin + " " + args
                                       : bin + " run --master-port 0 -n " + std::to_string(ranks) +
                                             " " + bin + " " + args;
    return run_command("TESSERA_TIMEOUT=30 " + cmd + " 2>&1", 180);
  }

  TempDir tmp_{"reshard"};
  fs::path dir_{tmp_.path()};
};

std::map<int64_t, nlohmann::json> records(const fs::path& metrics, const std::string& key) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key)) out[j["step"].get<int64_t>()] = j[key];
  }
  return out;
}

TEST_F(ReshardCli, Stage3AtFourRanksResumesAtTwoAndOneAndConsolidatesForTorchLoad) {
  const fs::path a = dir_ / "a";
  auto straight = tessera("train --config " + config("s3.json", 3) + " --out " + a.string(), 4);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  ASSERT_TRUE(fs::exists(a / "step_5" / "manifest.json")) << straight.output;
  const auto want = records(a / "metrics.jsonl", "loss");
  ASSERT_EQ(want.size(), 10u);

  struct Resume {
    const char* name;
    int ranks;
    int stage;
  };
  for (const Resume& r : {Resume{"two_stage1", 2, 1}, Resume{"one_stage0", 1, 0}}) {
    const fs::path out = dir_ / r.name;
    fs::create_directories(out);
    fs::copy(a / "step_5", out / "step_5", fs::copy_options::recursive);
    const std::string cfg = config(std::string(r.name) + ".json", r.stage);
    auto run = tessera("train --config " + cfg + " --resume --out " + out.string(), r.ranks);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("saved by 4 ranks, resharded to " + std::to_string(r.ranks)),
              std::string::npos)
        << run.output;
    const auto got = records(out / "metrics.jsonl", "loss");
    ASSERT_EQ(got.size(), 5u) << run.output;
    double worst = 0;
    for (int64_t step = 6; step <= 10; ++step) {
      ASSERT_TRUE(got.count(step)) << "no loss for step " << step;
      worst = std::max(worst, std::abs(got.at(step).get<double>() - want.at(step).get<double>()));
    }
    std::printf("[reshard cli] 4 ranks stage 3 -> %d rank(s) stage %d from step 5: steps 6-10 max "
                "|loss diff| %.3g\n", r.ranks, r.stage, worst);
    EXPECT_LE(worst, 1e-5) << r.name;
  }

  auto info = tessera("ckpt info " + a.string());
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("step        10"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("world size  4"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("ZeRO stage  3"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("model.wte.weight"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("[256, 64]"), std::string::npos) << info.output;

  const fs::path pt = dir_ / "gpt.pt";
  auto cons = tessera("ckpt consolidate " + a.string() + " " + pt.string() + " --optimizer");
  ASSERT_EQ(cons.exit_code, 0) << cons.output;

  // Python reads it into a dict of name -> tensor.
  auto py = run_command(
      tessera::testing::python_bin() + " -c \"import torch; sd = torch.load('" + pt.string() +
          "', weights_only=False); w = {k: v for k, v in sd.items() if not k.startswith('optim.')}; "
          "print('python', type(sd).__name__, len(w), len(sd) - len(w), "
          "'%.9g' % sum(float(v.double().sum()) for v in w.values()), "
          "tuple(sd['wte.weight'].shape), sd['wte.weight'].dtype)\" 2>&1",
      120);
  ASSERT_EQ(py.exit_code, 0) << py.output;

  // The plain C++ GPT of the same config loads it.
  runtime::Config cfg = runtime::Config::from_file(config("s3.json", 3));
  cli::TrainSettings s = cli::TrainSettings::from_config(cfg);
  models::GPT gpt(s.model);
  const auto state = checkpoint::load_state_dict_file(pt.string());
  checkpoint::load_module_state(*gpt, state);
  double weight_sum = 0;
  size_t weights = 0;
  for (const auto& [name, t] : state) {
    if (name.rfind("optim.", 0) == 0) continue;
    weight_sum += t.to(torch::kDouble).sum().item<double>();
    ++weights;
  }
  char expect_py[200];
  std::snprintf(expect_py, sizeof(expect_py), "python dict %zu %zu", weights, state.size() - weights);
  EXPECT_NE(py.output.find(expect_py), std::string::npos) << py.output << "\nwant " << expect_py;
  EXPECT_NE(py.output.find("(256, 64) torch.float32"), std::string::npos) << py.output;
  const double py_sum = std::stod(py.output.substr(py.output.find(expect_py) + strlen(expect_py)));
  EXPECT_NEAR(py_sum, weight_sum, 1e-6 * std::max(1.0, std::abs(weight_sum))) << py.output;

  // Its outputs are the trained model's: the validation loss over the batches
  // the 4 ranks evaluated at step 10 (TrainData::eval_batch) is what they logged.
  torch::NoGradGuard no_grad;
  gpt->eval();
  double sum = 0;
  for (int rank = 0; rank < 4; ++rank) {
    cli::TrainData data(s, 4, rank, cfg.seed);
    for (int64_t i = 0; i < s.eval_iters; ++i) {
      auto [x, y] = data.eval_batch(i, cfg.train_micro_batch_size_per_gpu);
      sum += gpt->loss(x, y).item<double>();
    }
  }
  const double val = sum / static_cast<double>(4 * s.eval_iters);
  const auto logged = records(a / "metrics.jsonl", "val_loss");
  ASSERT_TRUE(logged.count(10)) << "the 4-rank run logged no val_loss at step 10";
  std::printf("[reshard cli] consolidated GPT: val loss %.7f, the 4-rank stage-3 run logged %.7f\n",
              val, logged.at(10).get<double>());
  EXPECT_NEAR(val, logged.at(10).get<double>(), 1e-5);

  // A missing shard: consolidate names the file and writes nothing.
  const fs::path broken = dir_ / "broken";
  fs::create_directories(broken);
  fs::copy(a / "step_10", broken / "step_10", fs::copy_options::recursive);
  std::string victim;
  for (const auto& e : fs::directory_iterator(broken / "step_10")) {
    if (e.path().filename().string().find("rank_00002") != std::string::npos) victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty()) << "no rank 2 file in the checkpoint";
  fs::remove(victim);
  auto refused = tessera("ckpt consolidate " + (broken / "step_10").string() + " " + (dir_ / "no.pt").string());
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find(fs::path(victim).filename().string()), std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir_ / "no.pt"));
}

}  // namespace
}  // namespace tessera::testing
