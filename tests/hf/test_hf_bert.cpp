// Hugging Face BERT checkpoints in and out of Tessera's Bert, checked against the
// real `transformers`: bert_interop.py builds tiny random BertForMaskedLM models
// (one file and shards) with their logits on a fixed batch that has padded
// sequences. Tessera must reproduce those logits, transformers must load
// Tessera's exports and reproduce them too, and configs Tessera's Bert does not
// compute exactly must be refused by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "hf_test_util.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/runtime/hf/bert_checkpoint.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::runtime::hf {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;

constexpr double kTolerance = 1e-4;

void run_interop(const std::string& args) { test::run_interop("bert_interop.py", args); }

class HfBert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>("hf_bert");
    run_interop("create " + dir_->path());
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(reference("base"))) << "the reference checkpoints could not be created";
  }

  static std::string path(const std::string& name) { return dir_->path() + "/" + name; }
  static std::string reference(const std::string& model) {
    return path(model + ".reference.safetensors");
  }

  // max |model(tokens, mask) - transformers' logits| over every position, padded ones included.
  static double logits_diff(models::BertImpl& model, const std::string& ref_model) {
    auto ref = SafetensorsFile::open(reference(ref_model));
    model.eval();
    torch::NoGradGuard no_grad;
    auto logits = model.forward(ref.tensor("tokens"), ref.tensor("mask"));
    return (logits - ref.tensor("logits")).abs().max().item<double>();
  }

  static std::string copy_of(const std::string& from, const std::string& name) {
    const std::string to = path(name);
    fs::remove_all(to);
    fs::copy(path(from), to, fs::copy_options::recursive);
    return to;
  }

  static std::unique_ptr<testing::TempDir> dir_;
};

std::unique_ptr<testing::TempDir> HfBert::dir_;

void expect_refused(const std::string& dir, const std::vector<std::string>& needles) {
  test::expect_refused([](const std::string& d) { load_bert(d); }, dir, needles);
}
using test::edit_config;
using test::edit_tensors;

TEST_F(HfBert, ImportedLogitsEqualTransformers) {
  for (const std::string name : {"base", "sharded", "wide"}) {
    auto bert = load_bert(path(name));
    const double diff = logits_diff(*bert, name);
    std::cout << name << ": max |tessera - transformers| = " << diff << "\n";
    EXPECT_LE(diff, kTolerance) << name;
  }
  EXPECT_EQ(load_bert(path("wide"))->config().pad_token_id, 1);
}

TEST_F(HfBert, PaddingMaskMatters) {
  // Without the mask the padded batch's logits move far past the tolerance, so
  // the comparison above really checks the masking.
  auto bert = load_bert(path("base"));
  auto ref = SafetensorsFile::open(reference("base"));
  torch::NoGradGuard no_grad;
  bert->eval();
  auto unmasked = bert->forward(ref.tensor("tokens"));
  EXPECT_GT((unmasked - ref.tensor("logits")).abs().max().item<double>(), 100 * kTolerance);
}

TEST_F(HfBert, ExportLoadsInTransformers) {
  std::string args = "check";
  for (const std::string name : {"base", "wide"}) {
    auto bert = load_bert(path(name));
    export_bert(*bert, path("export_" + name));
    args += " " + path("export_" + name) + " " + reference(name);
  }
  run_interop(args);
  // The export holds exactly save_pretrained's tensors: no tied decoder.
  auto f = SafetensorsFile::open(path("export_base") + "/model.safetensors");
  const auto names = f.names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "cls.predictions.decoder.weight"), 0);
  EXPECT_EQ(names.size(), bert_tensors(read_bert_config(path("base"))).size());
}

TEST_F(HfBert, RefusesConfigsItDoesNotComputeExactly) {
  auto dir = copy_of("base", "bad_pos");
  edit_config(dir, [](auto& j) { j["position_embedding_type"] = "relative_key"; });
  expect_refused(dir, {"position_embedding_type", "relative_key", "absolute"});
  dir = copy_of("base", "bad_decoder");
  edit_config(dir, [](auto& j) { j["is_decoder"] = true; });
  expect_refused(dir, {"is_decoder"});
  dir = copy_of("base", "bad_act");
  edit_config(dir, [](auto& j) { j["hidden_act"] = "gelu_new"; });
  expect_refused(dir, {"hidden_act", "gelu_new"});
  dir = copy_of("base", "bad_tie");
  edit_config(dir, [](auto& j) { j["tie_word_embeddings"] = false; });
  expect_refused(dir, {"tie_word_embeddings"});
  dir = copy_of("base", "bad_arch");
  edit_config(dir, [](auto& j) { j["architectures"] = {"BertForSequenceClassification"}; });
  expect_refused(dir, {"BertForSequenceClassification", "BertForMaskedLM"});
  dir = copy_of("base", "bad_type");
  edit_config(dir, [](auto& j) { j["model_type"] = "roberta"; });
  expect_refused(dir, {"model_type", "roberta"});
}

TEST_F(HfBert, RefusesMissingOrUnknownTensorsWithoutTouchingTheModel) {
  auto missing = copy_of("base", "missing");
  edit_tensors(missing, [](auto& t) {
    t.erase(std::remove_if(
                t.begin(), t.end(),
                [](auto& p) { return p.first == "cls.predictions.transform.LayerNorm.bias"; }),
            t.end());
  });
  expect_refused(missing, {"no tensor cls.predictions.transform.LayerNorm.bias"});
  auto unknown = copy_of("base", "unknown");
  edit_tensors(unknown,
               [](auto& t) { t.emplace_back("bert.encoder.layer.0.extra", at::ones({4})); });
  expect_refused(unknown, {"bert.encoder.layer.0.extra", "no place"});
  // Skipped like from_pretrained skips them: a pooler and the next-sentence head.
  auto pretraining = copy_of("base", "pretraining");
  edit_tensors(pretraining, [](auto& t) {
    t.emplace_back("bert.pooler.dense.weight", at::zeros({32, 32}));
    t.emplace_back("cls.seq_relationship.weight", at::zeros({2, 32}));
  });
  EXPECT_LE(logits_diff(*load_bert(pretraining), "base"), kTolerance);

  models::Bert model(read_bert_config(path("base")));
  std::vector<at::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.clone());
  EXPECT_THROW(load_bert_into(*model, missing), CheckpointError);
  const auto after = model->parameters();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(after[i], before[i])) << i;
}

TEST(BertConfig, ValidateNamesTheFieldAndInitIsSeeded) {
  models::BertConfig c;
  c.num_attention_heads = 5;
  try {
    c.validate();
    FAIL() << "64 hidden over 5 heads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
  models::BertConfig small;
  models::Bert a(small), b(small);
  small.seed = 7;
  models::Bert other(small);
  const auto& wa = a->bert->embeddings->word_embeddings->weight;
  EXPECT_TRUE(torch::equal(wa, b->bert->embeddings->word_embeddings->weight));
  EXPECT_FALSE(torch::equal(wa, other->bert->embeddings->word_embeddings->weight));
  EXPECT_EQ(wa[small.pad_token_id].abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace tessera::runtime::hf
