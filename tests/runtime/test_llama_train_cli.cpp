// `tessera train` with model.type "llama" through the real binary: a tiny
// grouped-query Llama learns a small corpus on one rank and on two (`tessera
// run -n 2`, DDP), starting from scratch and from a Hugging Face directory
// (model.init_from_hf, written here by export_llama); what is not supported for
// a Llama yet is refused before the first step with a message naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "tessera/runtime/hf/llama_checkpoint.h"
#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class LlamaTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 300; ++i)
      text << "the quick brown fox " << i % 5 << " jumps over the dog.\n";
  }

  // A tiny config; `model` is the model section's body, `extra` is spliced
  // into the top-level object.
  std::string write_config(const std::string& name, const std::string& model,
                           const std::string& extra = "") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << R"({
      "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "seed": 5,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
      "model": {"type": "llama", )"
                        << model << R"(},
      "data": {"path": ")"
                        << (dir_ / "corpus.txt").string() << R"("},
      "train": {"steps": 12, "eval_interval": 0, "eval_iters": 2, "checkpoint_interval": 0})"
                        << extra << "}";
    return path;
  }

  CommandResult train(const std::string& config, const std::string& out, int ranks = 1) {
    const std::string bin = tessera_bin();
    const std::string args = " train --config " + config + " --out " + (dir_ / out).string();
    const std::string cmd =
        ranks == 1 ? bin + args
                   : bin + " run --master-port 0 -n " + std::to_string(ranks) + " " + bin + args;
    return run_command("TESSERA_TIMEOUT=30 " + cmd + " 2>&1", 180);
  }

  // step -> loss from a run's metrics.jsonl.
  std::map<int64_t, double> losses(const std::string& out) {
    return read_metric((dir_ / out / "metrics.jsonl").string());
  }

  void expect_learns(const CommandResult& r, const std::string& out) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("tessera train: Llama"), std::string::npos) << r.output;
    auto l = losses(out);
    ASSERT_EQ(l.size(), 12u) << r.output;
    std::printf("%s: loss %.4f -> %.4f\n", out.c_str(), l[1], l[12]);
    EXPECT_LT(l[12], l[1] - 0.5) << r.output;
  }

  void expect_refused(const std::string& config, const std::string& needle) {
    auto r = train(config, "refused");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("| loss"), std::string::npos) << "trained anyway:\n" << r.output;
  }

  TempDir tmp_{"llama_train"};
  fs::path dir_{tmp_.path()};
};

constexpr const char* kTiny =
    R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
       "block_size": 32)";

TEST_F(LlamaTrainCli, LearnsOnOneAndTwoRanks) {
  const std::string config = write_config("llama.json", kTiny);
  expect_learns(train(config, "one"), "one");
  expect_learns(train(config, "two", 2), "two");
}

TEST_F(LlamaTrainCli, StartsFromHuggingFaceDirectory) {
  models::LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  c.rope_scaling.type = models::RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 2.0;
  models::Llama llama(c);
  const std::string hf = (dir_ / "hf").string();
  runtime::hf::export_llama(*llama, hf);
  const std::string config =
      write_config("from_hf.json", R"("init_from_hf": ")" + hf + R"(", "block_size": 32)");
  expect_learns(train(config, "from_hf", 2), "from_hf");

  expect_refused(
      write_config("conflict.json", R"("init_from_hf": ")" + hf + R"(", "hidden_size": 32)"),
      "'model.hidden_size' conflicts with 'model.init_from_hf'");
}

TEST_F(LlamaTrainCli, RefusesWhatIsNotSupportedYet) {
  expect_refused(write_config("tp.json", kTiny, R"(, "tensor_model_parallel_size": 2)"),
                 "model.type llama does not support tensor or pipeline parallelism yet");
  expect_refused(write_config("bf16.json", kTiny, R"(, "bf16": {"enabled": true})"),
                 "model.type llama trains in float32");
  expect_refused(write_config("typo.json", R"("num_layers": 2)"),
                 "unknown config key 'model.num_layers'");
  expect_refused(write_config("gqa.json", R"("num_attention_heads": 4, "num_key_value_heads": 3)"),
                 "num_key_value_heads");
  expect_refused(write_config("long.json", R"("max_position_embeddings": 16, "block_size": 32)"),
                 "max_position_embeddings is 16");
}

}  // namespace
}  // namespace tessera::testing
