// Hugging Face directories in and out of `tessera train`, through the real
// binary: a GPT-2 (model.init_from_hf) started in every parallel layout equal
// to one process, fine-tuned at 2 ranks under ZeRO, its
// last step written as a Hugging Face directory (checkpoint.last_save_in_hf)
// and again by `tessera ckpt export-hf` from the checkpoint of a tp2 run and of
// a Llama run; every exported tensor equals the checkpoint's, and what cannot
// work is refused before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/runtime/hf/gpt2_checkpoint.h"
#include "tessera/runtime/hf/llama_checkpoint.h"
#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class HfTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 300; ++i) text << "a small corpus, line " << i % 7 << ", for tuning.\n";
  }

  // `model`: the model section's body; `extra`: spliced into the top level.
  std::string write_config(const std::string& name, const std::string& model,
                           const std::string& extra = "") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": 4, "seed": 3, "steps_per_print": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "model": {)" << model << R"(},
      "data": {"path": ")" << (dir_ / "corpus.txt").string() << R"("},
      "train": {"steps": 6, "eval_interval": 0, "eval_iters": 1, "checkpoint_interval": 0,
                "sample_length": 0})" << extra << "}";
    return path;
  }

  CommandResult tessera(const std::string& args, int ranks = 1) {
    const std::string bin = tessera_bin();
    const std::string cmd = ranks == 1 ? bin + " " + args
                                       : bin + " run --master-port 0 -n " +
                                             std::to_string(ranks) + " " + bin + " " + args;
    return run_command("TESSERA_TIMEOUT=30 " + cmd + " 2>&1", 180);
  }

  CommandResult train(const std::string& config, const std::string& out, int ranks = 1) {
    return tessera("train --config " + config + " --out " + (dir_ / out).string(), ranks);
  }

  // Every tensor of the Hugging Face directory `hf` equals the checkpoint's
  // model.<name>; `hf_name(name, transposed)` names it there ("" for a buffer
  // the format does not store) and says whether it is stored transposed.
  template <typename NameMap>
  void expect_export_equals_checkpoint(const std::string& out, const std::string& hf,
                                       NameMap hf_name) {
    const std::string step = checkpoint::resolve_step_dir((dir_ / out).string());
    auto reader = checkpoint::CheckpointReader::open(step);
    const checkpoint::CheckpointTensors all(reader);
    auto file = checkpoint::SafetensorsFile::open(hf + "/model.safetensors");
    int compared = 0;
    for (const auto& info : all.tensors()) {
      if (info.name.rfind("model.", 0) != 0) continue;
      bool transposed = false;
      const std::string name = hf_name(info.name.substr(6), transposed);
      if (name.empty()) continue;
      ASSERT_TRUE(file.contains(name)) << name << " missing from " << hf;
      at::Tensor mine = all.read(info.name);
      at::Tensor theirs = transposed ? file.tensor(name).t() : file.tensor(name);
      EXPECT_TRUE(theirs.equal(mine)) << name;
      ++compared;
    }
    EXPECT_GT(compared, 10) << "nothing compared";
  }

  // step -> training loss, from a run's metrics.jsonl.
  std::map<int64_t, double> losses(const std::string& out) {
    return read_metric((dir_ / out / "metrics.jsonl").string());
  }

  TempDir tmp_{"hf_train"};
  fs::path dir_{tmp_.path()};
};

// A GPT-2 with biases, as transformers would save it, made here by export_gpt2.
std::string write_gpt2(const fs::path& dir) {
  models::GPTConfig c;
  c.vocab_size = 256;
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.0;
  models::GPT gpt(c);
  {
    // Far from any fresh initialization, so a run that ignored the directory shows.
    at::NoGradGuard no_grad;
    gpt->named_parameters()["wte.weight"].add_(1.0);
  }
  const std::string hf = (dir / "gpt2").string();
  runtime::hf::export_gpt2(*gpt, hf);
  return hf;
}

// Tessera's GPT names are GPT2Model's under "transformer."; the causal mask is
// not stored, and the Conv1D weights of attention and MLP are [in, out].
std::string gpt2_name(const std::string& name, bool& transposed) {
  if (name.find(".attn.bias") != std::string::npos) return "";
  transposed = name.find(".weight") != std::string::npos &&
               (name.find(".c_attn.") != std::string::npos ||
                name.find(".c_proj.") != std::string::npos || name.find(".c_fc.") != std::string::npos);
  return "transformer." + name;
}

std::string same_name(const std::string& name, bool&) { return name; }

TEST_F(HfTrainCli, Gpt2FineTunedUnderZeroEndsAsAHuggingFaceDirectory) {
  const std::string hf = write_gpt2(dir_);
  const std::string config = write_config(
      "tune.json", R"("type": "gpt", "init_from_hf": ")" + hf + R"(")",
      R"(, "zero_optimization": {"stage": 2}, "checkpoint": {"last_save_in_hf": true})");
  auto r = train(config, "tuned", 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + (dir_ / "tuned").string() + "/hf (Hugging Face gpt2)"),
            std::string::npos) << r.output;
  const std::string out_hf = (dir_ / "tuned" / "hf").string();
  expect_export_equals_checkpoint("tuned", out_hf, gpt2_name);
  // A fine-tune of the imported weights (offset by 1): they moved, but little.
  auto start = checkpoint::SafetensorsFile::open(hf + "/model.safetensors");
  auto tuned = checkpoint::SafetensorsFile::open(out_hf + "/model.safetensors");
  const at::Tensor a = start.tensor("transformer.wte.weight"), b = tuned.tensor("transformer.wte.weight");
  const double moved = (a - b).abs().max().item<double>();
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(moved, 0.1) << "not a fine-tune of the imported weights";
  // Tessera reads its own export back.
  EXPECT_NO_THROW(runtime::hf::load_gpt2(out_hf));

  // The same from the command, and refused over a non-empty directory.
  r = tessera("ckpt export-hf " + (dir_ / "tuned").string() + " " + (dir_ / "again").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_export_equals_checkpoint("tuned", (dir_ / "again").string(), gpt2_name);
  r = tessera("ckpt export-hf " + (dir_ / "tuned").string() + " " + (dir_ / "again").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
}

// Each rank of a tensor/pipeline-parallel run reads only its slices of the
// Hugging Face files; every layout must then train exactly as one process does.
TEST_F(HfTrainCli, Gpt2StartsEveryParallelLayoutAsOneProcess) {
  const std::string hf = write_gpt2(dir_);
  const std::string model = R"("type": "gpt", "init_from_hf": ")" + hf + R"(")";
  const std::string batch = R"(, "train_batch_size": 8)";
  auto run = [&](const std::string& name, const std::string& layout, int ranks) {
    auto r = train(write_config(name + ".json", model, batch + layout), name, ranks);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return losses(name);
  };
  const auto one = run("one", "", 1);
  ASSERT_EQ(one.size(), 6u);
  // The comparison can fail: the same GPT from its seed alone trains otherwise.
  auto r = train(write_config("fresh.json", R"("type": "gpt", "n_layer": 2, "n_head": 2,
      "n_embd": 32, "block_size": 32)", batch), "fresh");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(std::abs(losses("fresh").at(6) - one.at(6)), 1e-3);
  struct Layout {
    const char* name;
    const char* keys;
    int ranks;
  };
  for (const Layout& l :
       {Layout{"tp2", R"(, "tensor_model_parallel_size": 2)", 2},
        Layout{"pp2", R"(, "pipeline_model_parallel_size": 2)", 2},
        Layout{"tp2pp2", R"(, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2)", 4},
        Layout{"tp2dp2_zero1", R"(, "tensor_model_parallel_size": 2, "zero_optimization": {"stage": 1})", 4}}) {
    const auto got = run(l.name, l.keys, l.ranks);
    ASSERT_EQ(got.size(), one.size()) << l.name;
    double worst = 0;
    for (const auto& [step, loss] : one) worst = std::max(worst, std::abs(got.at(step) - loss));
    std::printf("[hf import] %s from a Hugging Face GPT-2: max |loss - one process| over %zu "
                "steps %.3g (first loss %.6f)\n", l.name, one.size(), worst, got.begin()->second);
    EXPECT_LE(worst, 1e-5) << l.name;
  }
}

TEST_F(HfTrainCli, ExportsACheckpointOfTensorParallelTraining) {
  const std::string config = write_config(
      "tp.json", R"("type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32)",
      R"(, "tensor_model_parallel_size": 2)");
  auto r = train(config, "tp", 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = tessera("ckpt export-hf " + (dir_ / "tp").string() + " " + (dir_ / "tp_hf").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_export_equals_checkpoint("tp", (dir_ / "tp_hf").string(), gpt2_name);
}

TEST_F(HfTrainCli, LlamaLastSaveInHuggingFaceFormat) {
  const std::string config = write_config(
      "llama.json",
      R"("type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
         "tie_word_embeddings": false)",
      R"(, "checkpoint": {"last_save_in_hf": true})");
  auto r = train(config, "llama");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_export_equals_checkpoint("llama", (dir_ / "llama" / "hf").string(),
                                  same_name);
  EXPECT_NO_THROW(runtime::hf::load_llama((dir_ / "llama" / "hf").string()));
}

TEST_F(HfTrainCli, RefusesWhatCannotWork) {
  const std::string hf = write_gpt2(dir_);
  auto refused = [&](const std::string& config, const std::string& needle) {
    auto r = train(config, "refused");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  refused(write_config("conflict.json",
                       R"("type": "gpt", "init_from_hf": ")" + hf + R"(", "n_layer": 4)"),
          "'model.n_layer' conflicts with 'model.init_from_hf'");
  refused(write_config("missing.json",
                       R"("type": "gpt", "init_from_hf": ")" + (dir_ / "nowhere").string() + R"(")"),
          "nowhere");
  // A checkpoint that does not say what model it holds.
  auto r = tessera("ckpt export-hf " + (dir_ / "nowhere").string() + " " +
                   (dir_ / "x").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace tessera::testing
