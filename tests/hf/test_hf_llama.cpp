// Hugging Face Llama checkpoints in and out of Tessera's Llama, checked against
// the real `transformers`: llama_interop.py builds tiny random LlamaForCausalLM
// models (grouped-query attention with an untied head, a tied multi-head one,
// llama3 and linear rope scaling; one file, shards, and bfloat16) with their
// logits on a fixed batch. Tessera must reproduce those logits, transformers
// must load Tessera's exports and reproduce them too, the loaded model must
// train, and malformed checkpoints must be refused without touching the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/runtime/hf/hf_checkpoint.h"
#include "tessera/runtime/hf/llama_checkpoint.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "hf_test_util.h"

namespace tessera::runtime::hf {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;

constexpr double kTolerance = 1e-4;
const std::vector<std::string> kModels = {"gqa", "sharded", "bf16", "tied", "llama3", "linear"};

void run_interop(const std::string& args) { test::run_interop("llama_interop.py", args); }

// The reference checkpoints, made once for the whole suite.
class HfLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>("hf_llama");
    run_interop("create " + dir_->path());
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(reference("gqa"))) << "the reference checkpoints could not be created";
  }

  static std::string path(const std::string& name) { return dir_->path() + "/" + name; }
  static std::string reference(const std::string& model) {
    return path(model + ".reference.safetensors");
  }

  // max |model(tokens) - transformers' logits| on `model`'s reference batch.
  static double logits_diff(models::LlamaImpl& model, const std::string& ref_model) {
    auto ref = SafetensorsFile::open(reference(ref_model));
    model.eval();
    torch::NoGradGuard no_grad;
    return (model.forward(ref.tensor("tokens")) - ref.tensor("logits")).abs().max().item<double>();
  }

  // A copy of the reference checkpoint `from` to edit, at path(name).
  static std::string copy_of(const std::string& from, const std::string& name) {
    const std::string to = path(name);
    fs::remove_all(to);
    fs::copy(path(from), to, fs::copy_options::recursive);
    return to;
  }

  static std::unique_ptr<testing::TempDir> dir_;
};

std::unique_ptr<testing::TempDir> HfLlama::dir_;

TEST_F(HfLlama, ImportedLogitsEqualTransformers) {
  for (const auto& name : kModels) {
    auto llama = load_llama(path(name));
    const double diff = logits_diff(*llama, name);
    std::cout << "import " << name << ": max |logits - transformers| = " << diff << "\n";
    EXPECT_LE(diff, kTolerance) << name;
  }
  auto gqa = load_llama(path("gqa"));
  EXPECT_EQ(gqa->config().num_key_value_heads, 2);
  EXPECT_FALSE(gqa->config().tie_word_embeddings);
  EXPECT_FALSE(gqa->lm_head.is_empty());
  auto tied = load_llama(path("tied"));
  EXPECT_EQ(tied->config().effective_head_dim(), 8);
  EXPECT_TRUE(tied->lm_head.is_empty()) << "a tied head has no parameter of its own";
  EXPECT_EQ(load_llama(path("llama3"))->config().rope_scaling.type,
            models::RopeScaling::Type::kLlama3);
}

TEST_F(HfLlama, RopeScalingMatters) {
  // The llama3 weights without their scaling move the logits far past the
  // tolerance: the scaled frequencies are what make that import exact.
  auto config = read_llama_config(path("llama3"));
  config.rope_scaling = {};
  models::Llama plain(config);
  const std::string dir = copy_of("llama3", "llama3_unscaled");
  nlohmann::json j = nlohmann::json::parse(testing::read_text_file(dir + "/config.json"));
  j["rope_scaling"] = nullptr;
  std::ofstream(dir + "/config.json") << j.dump();
  load_llama_into(*plain, dir);
  EXPECT_GT(logits_diff(*plain, "llama3"), 100 * kTolerance);
}

TEST_F(HfLlama, ExportLoadsInTransformers) {
  std::string checks;
  for (const std::string name : {"gqa", "tied", "llama3", "linear"}) {
    auto llama = load_llama(path(name));
    export_llama(*llama, path("export_" + name));
    checks += " " + path("export_" + name) + " " + reference(name);
  }
  EXPECT_TRUE(fs::exists(path("export_gqa/model.safetensors")));
  EXPECT_FALSE(HfCheckpoint::open(path("export_tied")).contains("lm_head.weight"));
  EXPECT_TRUE(HfCheckpoint::open(path("export_gqa")).contains("lm_head.weight"));

  auto gqa = load_llama(path("gqa"));
  LlamaExportOptions sharded;
  sharded.max_shard_bytes = 40000;
  export_llama(*gqa, path("export_sharded"), sharded);
  EXPECT_TRUE(fs::exists(path("export_sharded/model.safetensors.index.json")));
  checks += " " + path("export_sharded") + " " + reference("gqa");
  run_interop("check" + checks);

  // And back: the export reimports to the very same parameters.
  auto again = load_llama(path("export_sharded"));
  auto a = gqa->named_parameters(), b = again->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << p.key();
}

TEST_F(HfLlama, LoadedModelTrains) {
  auto llama = load_llama(path("gqa"));
  llama->train();
  auto ref = SafetensorsFile::open(reference("gqa"));
  const auto tokens = ref.tensor("tokens").clone();
  const auto x = tokens.slice(1, 0, -1), y = tokens.slice(1, 1);
  torch::optim::AdamW opt(llama->parameters(), torch::optim::AdamWOptions(1e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    auto loss = llama->loss(x, y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "training the imported Llama: loss " << first << " -> " << last << "\n";
  EXPECT_LT(last, first - 0.1);
}

// load_llama(dir) must throw a CheckpointError whose message has every `needle`.
void expect_refused(const std::string& dir, const std::vector<std::string>& needles) {
  test::expect_refused([](const std::string& d) { load_llama(d); }, dir, needles);
}
using test::edit_config;
using test::edit_tensors;

TEST_F(HfLlama, RefusesUnsupportedConfig) {
  auto dir = copy_of("gqa", "bad_act");
  edit_config(dir, [](auto& j) { j["hidden_act"] = "gelu"; });
  expect_refused(dir, {"hidden_act", "gelu", "silu"});

  dir = copy_of("gqa", "bad_rope");
  edit_config(dir, [](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_refused(dir, {"rope_scaling.rope_type", "yarn", "llama3"});

  dir = copy_of("gqa", "bad_llama3");
  edit_config(dir, [](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}}; });
  expect_refused(dir, {"low_freq_factor"});

  dir = copy_of("gqa", "bad_arch");
  edit_config(dir, [](auto& j) { j["architectures"] = {"LlamaForSequenceClassification"}; });
  expect_refused(dir, {"LlamaForSequenceClassification", "LlamaForCausalLM"});

  dir = copy_of("gqa", "bad_type");
  edit_config(dir, [](auto& j) { j["model_type"] = "mistral"; });
  expect_refused(dir, {"model_type", "mistral"});

  dir = copy_of("gqa", "bad_kv");
  edit_config(dir, [](auto& j) { j["num_key_value_heads"] = 3; });
  expect_refused(dir, {"num_key_value_heads", "3"});

  dir = copy_of("gqa", "bad_json");
  std::ofstream(dir + "/config.json") << "{\"model_type\": ";
  expect_refused(dir, {"config.json", "not valid JSON"});
}

TEST_F(HfLlama, RefusesMissingOrMisshapenTensors) {
  auto dir = copy_of("gqa", "missing");
  edit_tensors(dir, [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  });
  expect_refused(dir, {"no tensor model.layers.1.mlp.up_proj.weight"});

  dir = copy_of("gqa", "misshapen");
  edit_tensors(dir, [](auto& t) {
    for (auto& p : t) {
      if (p.first == "model.layers.0.self_attn.k_proj.weight") p.second = at::zeros({64, 64});
    }
  });
  expect_refused(dir, {"model.layers.0.self_attn.k_proj.weight", "[64, 64]", "[32, 64]"});

  dir = copy_of("gqa", "unknown");
  edit_tensors(dir, [](auto& t) {
    t.emplace_back("model.layers.0.self_attn.q_norm.weight", at::ones({16}));
  });
  expect_refused(dir, {"model.layers.0.self_attn.q_norm.weight", "no place"});

  dir = copy_of("gqa", "no_head");
  edit_tensors(dir, [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "lm_head.weight"; }),
            t.end());
  });
  expect_refused(dir, {"lm_head.weight", "tie_word_embeddings"});

  dir = copy_of("sharded", "lost_shard");
  fs::remove(dir + "/model-00002-of-00012.safetensors");
  expect_refused(dir, {"model-00002-of-00012.safetensors", "missing"});
}

TEST_F(HfLlama, RefusedLoadLeavesModelAlone) {
  auto config = read_llama_config(path("gqa"));
  config.num_hidden_layers = 3;
  models::Llama three(config);
  try {
    load_llama_into(*three, path("gqa"));
    FAIL() << "loaded 2 layers into 3";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
  }
  // A broken tensor late in the layout is found before anything is copied.
  const std::string no_norm = copy_of("gqa", "late_missing");
  edit_tensors(no_norm, [](auto& t) {
    t.erase(
        std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "model.norm.weight"; }),
        t.end());
  });
  const std::string bad_head = copy_of("gqa", "late_misshapen");
  edit_tensors(bad_head, [](auto& t) {
    for (auto& p : t) {
      if (p.first == "lm_head.weight") p.second = at::zeros({95, 64});
    }
  });
  config.num_hidden_layers = 2;
  models::Llama two(config);
  std::vector<at::Tensor> before;
  for (const auto& p : two->parameters()) before.push_back(p.clone());
  EXPECT_THROW(load_llama_into(*two, no_norm), CheckpointError);
  EXPECT_THROW(load_llama_into(*two, bad_head), CheckpointError);
  const auto after = two->parameters();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(after[i], before[i])) << i;
}

TEST(LlamaConfig, ValidateNamesTheField) {
  models::LlamaConfig c;
  c.num_key_value_heads = 3;
  try {
    c.validate();
    FAIL() << "4 heads over 3 kv heads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
  }
  c = {};
  c.rope_scaling.type = models::RopeScaling::Type::kLlama3;
  c.rope_scaling.high_freq_factor = 0.5;
  EXPECT_THROW(c.validate(), ConfigError);
  // Same seed, same weights; another seed, others.
  models::LlamaConfig small;
  models::Llama a(small), b(small);
  small.seed = 7;
  models::Llama other(small);
  EXPECT_TRUE(torch::equal(a->model->embed_tokens->weight, b->model->embed_tokens->weight));
  EXPECT_FALSE(torch::equal(a->model->embed_tokens->weight, other->model->embed_tokens->weight));
}

}  // namespace
}  // namespace tessera::runtime::hf
