// The MoE GPT through the real binary: `tessera train` with model.num_experts
// trains (the loss falls), `tessera run -n 2` with ZeRO-1 ends 8 steps later
// with the parameters of one process on the same global batch, metrics.jsonl
// records the kept tokens per expert per layer (each record's total is every
// token's top-k assignments since the previous record), and bad MoE settings
// fail before training with the key named.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/train_cli.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class MoETrainCli : public ::testing::Test {
 public:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i % 7 << " jumps.\n";
  }
  // Global batch 8 of 16-token sequences, one per micro-batch: the auxiliary
  // losses are per micro-batch and not linear in it, so one process and two
  // ranks agree only when their micro-batches hold the same sequences (a rank
  // reads every other sequence of the global batch). `moe` adds model keys.
  std::string config(const std::string& name, const std::string& moe, const std::string& top = "") {
    const std::string path = (dir_ / (name + ".json")).string();
    std::ofstream(path) << "{" << top << R"(
      "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 2,
      "seed": 3, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "bias": false,
                "num_experts": 4, "moe_router_topk": 2)" << moe << R"(},
      "data": {"path": ")" << (dir_ / "corpus.txt").string() << R"(", "val_fraction": 0.1},
      "train": {"steps": 8, "eval_interval": 0, "eval_iters": 2, "checkpoint_interval": 8,
                "sample_length": 0}})";
    return path;
  }
  CommandResult train(const std::string& name, const std::string& moe, int ranks,
                      const std::string& top = "") {
    return run_train(config(name, moe, top), (dir_ / name).string(), ranks);
  }
  TempDir tmp_{"moe_cli"};
  fs::path dir_{tmp_.path()};
};

TEST_F(MoETrainCli, TrainsLikeOneProcessAndCountsTokensPerExpert) {
  const std::string moe = R"(, "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001)";
  auto one = train("one", moe, 1);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto losses = read_metric((dir_ / "one" / "metrics.jsonl").string());
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.rbegin()->second, losses.begin()->second) << one.output;
  auto two = train("two", moe, 2, R"("zero_optimization": {"stage": 1}, )");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  int experts = 0;
  const double d = max_model_diff((dir_ / "one/step_8").string(), (dir_ / "two/step_8").string(),
                                  &experts, ".moe.experts.");
  EXPECT_EQ(experts, 4) << "2 layers x (fc_weight, proj_weight)";
  std::printf("[moe cli] 2 ranks (ZeRO-1) vs one process after 8 steps: max |param diff| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
  // Each record: 2 steps x 8 sequences x 16 tokens x top-2 = 512 assignments
  // per layer, all kept (dropless).
  std::ifstream in(dir_ / "two" / "metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("tokens_per_expert")) continue;
    ++records;
    ASSERT_EQ(j["tokens_per_expert"].size(), 2u) << line;
    for (const auto& layer : j["tokens_per_expert"]) {
      ASSERT_EQ(layer.size(), 4u) << line;
      int64_t total = 0;
      for (const auto& n : layer) total += n.get<int64_t>();
      EXPECT_EQ(total, 2 * 8 * 16 * 2) << line;
    }
  }
  EXPECT_EQ(records, 4);
}

TEST_F(MoETrainCli, BadSettingsFailWithTheKeyNamed) {
  auto run = train("bad", R"(, "moe_router_score_function": "relu")", 1);
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("moe_router_score_function"), std::string::npos) << run.output;
  auto tp = train("tp", "", 2, R"("tensor_model_parallel_size": 2, )");
  EXPECT_NE(tp.exit_code, 0);
  EXPECT_NE(tp.output.find("model.num_experts 4"), std::string::npos) << tp.output;
}

}  // namespace
}  // namespace tessera::testing
