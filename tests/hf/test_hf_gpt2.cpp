// Hugging Face GPT-2 checkpoints in and out of Tessera's GPT, checked against
// the real `transformers`: gpt2_interop.py builds a tiny random GPT2LMHeadModel,
// saves it (one file, shards, and as a GPT2Model) with its logits on a fixed
// batch; Tessera must reproduce those logits, and transformers must load
// Tessera's export and reproduce them too. Then the refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/runtime/hf/gpt2_checkpoint.h"
#include "tessera/runtime/hf/hf_checkpoint.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "hf_test_util.h"

namespace tessera::runtime::hf {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;

constexpr double kTolerance = 1e-4;

void run_interop(const std::string& args) { test::run_interop("gpt2_interop.py", args); }

// The reference checkpoints, made once for the whole suite.
class HfGpt2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>("hf_gpt2");
    run_interop("create " + dir_->path());
    if (::testing::Test::HasFatalFailure()) return;
    auto ref = SafetensorsFile::open(path("reference.safetensors"));
    tokens_ = ref.tensor("tokens").clone();
    logits_ = ref.tensor("logits").clone();
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(tokens_.defined()) << "the reference checkpoints could not be created";
  }

  static std::string path(const std::string& name) { return dir_->path() + "/" + name; }

  // max |model(tokens) - reference logits|, in eval mode.
  static double logits_diff(models::GPTImpl& model) {
    model.eval();
    torch::NoGradGuard no_grad;
    return (model.forward(tokens_) - logits_).abs().max().item<double>();
  }

  // A copy of the reference checkpoint `from` to edit, at path(name).
  static std::string copy_of(const std::string& from, const std::string& name) {
    const std::string to = path(name);
    fs::remove_all(to);
    fs::copy(path(from), to, fs::copy_options::recursive);
    return to;
  }

  static std::unique_ptr<testing::TempDir> dir_;
  static at::Tensor tokens_, logits_;
};

std::unique_ptr<testing::TempDir> HfGpt2::dir_;
at::Tensor HfGpt2::tokens_, HfGpt2::logits_;

TEST_F(HfGpt2, ImportedLogitsEqualTransformers) {
  for (const std::string dir : {"lm", "lm_sharded", "base"}) {
    for (bool fused : {true, false}) {
      Gpt2ImportOptions options;
      options.fused_attention = fused;
      auto gpt = load_gpt2(path(dir), options);
      EXPECT_TRUE(gpt->config().gelu_tanh);
      EXPECT_EQ(gpt->config().n_layer, 2);
      EXPECT_DOUBLE_EQ(gpt->config().dropout, 0.1);
      const double diff = logits_diff(*gpt);
      std::cout << "import " << dir << " fused_attention=" << fused
                << ": max |logits - transformers| = " << diff << "\n";
      EXPECT_LE(diff, kTolerance) << dir << " fused_attention=" << fused;
    }
  }
}

TEST_F(HfGpt2, ExactGeluIsNotGpt2) {
  // The same weights with the erf GELU move the logits past the tolerance (8e-4
  // here): the tanh flag is what makes the import exact, and this test would
  // see it missing.
  auto config = read_gpt2_config(path("lm")).model;
  config.gelu_tanh = false;
  models::GPT gpt(config);
  const std::string dir = copy_of("lm", "lm_exact");
  nlohmann::json j = nlohmann::json::parse(testing::read_text_file(dir + "/config.json"));
  j["activation_function"] = "gelu";
  std::ofstream(dir + "/config.json") << j.dump();
  load_gpt2_into(*gpt, dir);
  EXPECT_GT(logits_diff(*gpt), 4 * kTolerance);
}

TEST_F(HfGpt2, ExportLoadsInTransformers) {
  auto gpt = load_gpt2(path("lm"));
  export_gpt2(*gpt, path("export"));
  EXPECT_TRUE(fs::exists(path("export/config.json")));
  EXPECT_TRUE(fs::exists(path("export/model.safetensors")));
  EXPECT_FALSE(fs::exists(path("export/model.safetensors.index.json")));
  EXPECT_EQ(SafetensorsFile::open(path("export/model.safetensors")).metadata().at("format"), "pt");
  run_interop("check " + path("export") + " " + path("reference.safetensors"));

  Gpt2ExportOptions sharded;
  sharded.max_shard_bytes = 100000;
  export_gpt2(*gpt, path("export_sharded"), sharded);
  auto shards = HfCheckpoint::open(path("export_sharded"));
  EXPECT_TRUE(fs::exists(path("export_sharded/model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(path("export_sharded/model-00001-of-00006.safetensors")))
      << "433 kB in shards of at most 100 kB";
  EXPECT_EQ(shards.file_of("transformer.wte.weight"),
            path("export_sharded/model-00001-of-00006.safetensors"));
  run_interop("check " + path("export_sharded") + " " + path("reference.safetensors"));

  // And back: the export reimports to the very same parameters.
  auto again = load_gpt2(path("export_sharded"));
  auto a = gpt->named_parameters(), b = again->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << p.key();
}

TEST_F(HfGpt2, ExportKeepsOldDirectoryUnlessOverwrite) {
  auto gpt = load_gpt2(path("lm"));
  const std::string dir = path("export_twice");
  export_gpt2(*gpt, dir + "/");  // a trailing slash names the same directory
  try {
    export_gpt2(*gpt, dir);
    FAIL() << "export into a non-empty directory without overwrite";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("overwrite"), std::string::npos) << e.what();
  }
  Gpt2ExportOptions overwrite;
  overwrite.overwrite = true;
  overwrite.max_shard_bytes = 100000;
  export_gpt2(*gpt, dir, overwrite);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors")) << "the old export was replaced whole";
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  for (const auto& entry : fs::directory_iterator(dir_->path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
        << "left behind: " << entry.path();
  }
}

TEST_F(HfGpt2, BiasFreeModelRoundTrips) {
  auto config = read_gpt2_config(path("lm")).model;
  config.bias = false;
  models::GPT gpt(config);
  export_gpt2(*gpt, path("export_nobias"));
  auto loaded = load_gpt2(path("export_nobias"));  // GPT-2 layout: zero biases
  EXPECT_TRUE(loaded->config().bias);
  models::GPT same(config);
  load_gpt2_into(*same, path("export_nobias"));
  gpt->eval();
  loaded->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(gpt->forward(tokens_), loaded->forward(tokens_), 0, 1e-6));
  // Nonzero biases have no place in a bias-free model.
  EXPECT_THROW(load_gpt2_into(*same, path("lm")), CheckpointError);
}

// load_gpt2(dir) must throw a CheckpointError whose message has every `needle`.
void expect_refused(const std::string& dir, const std::vector<std::string>& needles) {
  test::expect_refused([](const std::string& d) { load_gpt2(d); }, dir, needles);
}
using test::edit_config;
using test::edit_tensors;

TEST_F(HfGpt2, RefusesUnsupportedConfig) {
  auto dir = copy_of("lm", "bad_activation");
  edit_config(dir, [](auto& j) { j["activation_function"] = "relu"; });
  expect_refused(dir, {"activation_function", "relu", "gelu_new"});

  dir = copy_of("lm", "bad_arch");
  edit_config(dir, [](auto& j) { j["architectures"] = {"GPT2ForSequenceClassification"}; });
  expect_refused(dir, {"GPT2ForSequenceClassification", "GPT2LMHeadModel"});

  dir = copy_of("lm", "bad_type");
  edit_config(dir, [](auto& j) { j["model_type"] = "llama"; });
  expect_refused(dir, {"model_type", "llama"});

  dir = copy_of("lm", "bad_inner");
  edit_config(dir, [](auto& j) { j["n_inner"] = 100; });
  expect_refused(dir, {"n_inner", "100", "256"});

  dir = copy_of("lm", "bad_scale");
  edit_config(dir, [](auto& j) { j["scale_attn_by_inverse_layer_idx"] = true; });
  expect_refused(dir, {"scale_attn_by_inverse_layer_idx"});

  dir = copy_of("lm", "bad_dropout");
  edit_config(dir, [](auto& j) { j["attn_pdrop"] = 0.0; });
  expect_refused(dir, {"attn_pdrop", "Gpt2ImportOptions.dropout"});
  Gpt2ImportOptions options;
  options.dropout = 0.0;
  EXPECT_DOUBLE_EQ(load_gpt2(dir, options)->config().dropout, 0.0);
}

TEST_F(HfGpt2, RefusesMissingOrMisshapenTensors) {
  auto dir = copy_of("lm", "missing");
  edit_tensors(dir, [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](auto& p) { return p.first == "transformer.h.1.mlp.c_fc.bias"; }),
            t.end());
  });
  expect_refused(dir, {"no tensor transformer.h.1.mlp.c_fc.bias"});

  dir = copy_of("lm", "misshapen");
  edit_tensors(dir, [](auto& t) {
    for (auto& p : t) {
      if (p.first == "transformer.h.0.attn.c_attn.weight") p.second = p.second.t().contiguous();
    }
  });
  expect_refused(dir, {"transformer.h.0.attn.c_attn.weight", "[192, 64]", "[64, 192]"});

  dir = copy_of("lm", "unknown");
  edit_tensors(dir, [](auto& t) {
    t.emplace_back("transformer.h.0.crossattention.c_attn.weight", at::zeros({64, 192}));
  });
  expect_refused(dir, {"transformer.h.0.crossattention.c_attn.weight", "no place"});

  dir = copy_of("lm", "untied");
  edit_config(dir, [](auto& j) { j["tie_word_embeddings"] = false; });
  edit_tensors(dir, [](auto& t) { t.emplace_back("lm_head.weight", at::randn({96, 64})); });
  expect_refused(dir, {"lm_head.weight", "tie"});

  dir = copy_of("lm_sharded", "lost_shard");
  fs::remove(dir + "/model-00003-of-00006.safetensors");
  expect_refused(dir, {"model-00003-of-00006.safetensors", "missing"});

  dir = copy_of("lm", "no_weights");
  fs::remove(dir + "/model.safetensors");
  expect_refused(dir, {"model.safetensors"});
}

TEST_F(HfGpt2, LoadIntoRefusesOtherShapesAndLeavesModelAlone) {
  auto config = read_gpt2_config(path("lm")).model;
  config.n_layer = 3;
  models::GPT gpt(config);
  const auto before = gpt->wte->weight.clone();
  try {
    load_gpt2_into(*gpt, path("lm"));
    FAIL() << "loaded 2 layers into 3";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer"), std::string::npos) << e.what();
  }
  // A missing tensor is found before anything is copied.
  config.n_layer = 2;
  models::GPT two(config);
  const auto wte = two->wte->weight.clone();
  EXPECT_THROW(load_gpt2_into(*two, path("missing")), CheckpointError);
  EXPECT_TRUE(torch::equal(two->wte->weight, wte));
  EXPECT_TRUE(torch::equal(gpt->wte->weight, before));
}

}  // namespace
}  // namespace tessera::runtime::hf
