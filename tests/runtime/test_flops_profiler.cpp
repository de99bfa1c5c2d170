// The flops profiler: per-operator formulas, a Linear, and a whole GPT forward
// against the analytic count (models/gpt_flops.h), with the fused and the
// composed attention and under activation checkpointing; and its config keys.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tessera/core/error.h"
#include "tessera/models/gpt.h"
#include "tessera/models/gpt_flops.h"
#include "tessera/models/module_scope.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/profiling/flops_profiler.h"
#include "tessera/runtime/profiling/op_flops.h"

namespace tessera::runtime::profiling {
namespace {

const ModuleProfile* find(const FlopsProfiler& p, const std::string& name) {
  for (const auto& m : p.modules()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

TEST(OpFlops, MatrixProductsFromShapes) {
  EXPECT_EQ(op_flops("aten::linear", {{4, 5, 6}, {7, 6}, {7}}), 2.0 * 4 * 5 * 6 * 7);
  EXPECT_EQ(op_flops("aten::addmm", {{7}, {20, 6}, {6, 7}}), 2.0 * 20 * 6 * 7);
  EXPECT_EQ(op_flops("aten::bmm", {{3, 4, 5}, {3, 5, 6}}), 2.0 * 3 * 4 * 5 * 6);
  // Broadcast batch dimensions and a 1-D operand.
  EXPECT_EQ(op_flops("aten::matmul", {{2, 1, 4, 5}, {3, 5, 6}}), 2.0 * 6 * 4 * 5 * 6);
  EXPECT_EQ(op_flops("aten::matmul", {{4, 5}, {5}}), 2.0 * 4 * 5);
  EXPECT_EQ(op_flops("tessera::causal_attention", {{2, 10, 24}}), 4.0 * 2 * 10 * 10 * 8);
  EXPECT_FALSE(op_flops("aten::matmul", {{4, 5}, {6, 7}}).has_value());  // shapes do not fit
  EXPECT_FALSE(op_flops("aten::gelu", {{4, 5}}).has_value());
  EXPECT_TRUE(has_flops_formula("aten::linear"));
  EXPECT_FALSE(has_flops_formula("aten::add"));
}

// A module that marks its forward, around an unmarked Linear.
struct TinyImpl : torch::nn::Module {
  TinyImpl() { fc = register_module("fc", torch::nn::Linear(6, 7)); }
  torch::Tensor forward(const torch::Tensor& x) {
    models::ModuleScope scope(this);
    return torch::relu(fc(x));
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Tiny);

TEST(FlopsProfiler, LinearIsTwoFlopsPerMultiplyAdd) {
  Tiny model;
  FlopsProfiler p;
  p.start();
  model(torch::randn({4, 5, 6}));
  model(torch::randn({4, 5, 6}));  // after the first forward: not counted
  p.stop();
  ASSERT_TRUE(p.complete());
  const double expected = 2.0 * 4 * 5 * 6 * 7;
  EXPECT_EQ(p.total_flops(), expected);
  EXPECT_EQ(p.total_params(), 6 * 7 + 7);
  const ModuleProfile* fc = find(p, "fc");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->flops, expected);
  EXPECT_EQ(fc->type, "Linear");
  EXPECT_GT(fc->seconds, 0);
  EXPECT_LE(fc->seconds, p.total_seconds());
  EXPECT_EQ(p.modules()[0].self_flops, 0);  // relu is not counted
}

models::GPTConfig gpt_config(bool fused, int64_t checkpoints = 0) {
  models::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.fused_attention = fused;
  c.activation_checkpoints = checkpoints;
  return c;
}

void expect_gpt_counted(const models::GPTConfig& config, bool backward) {
  models::GPT model(config);
  const int64_t B = 3, T = 12;
  auto idx = torch::randint(0, config.vocab_size, {B, T}, torch::kLong);
  FlopsProfiler p;
  p.start();
  auto loss = model->loss(idx, idx);
  if (backward) loss.backward();  // a recompute under checkpointing must not count
  p.stop();
  ASSERT_TRUE(p.complete());
  const auto n = models::gpt_flop_count(config);
  EXPECT_DOUBLE_EQ(p.total_flops(), n.forward_matmul_flops(B, T));
  const double C = 32;
  EXPECT_DOUBLE_EQ(find(p, "h.0.attn.c_attn")->flops, 2.0 * B * T * C * 3 * C);
  EXPECT_DOUBLE_EQ(find(p, "h.1.mlp.c_fc")->flops, 2.0 * B * T * C * 4 * C);
  // The attention core belongs to the attention module itself.
  EXPECT_DOUBLE_EQ(find(p, "h.0.attn")->self_flops, 4.0 * B * T * T * C);
  EXPECT_DOUBLE_EQ(find(p, "wte")->flops, 2.0 * B * T * C * config.vocab_size);  // tied head
  EXPECT_EQ(p.total_params(), model->num_parameters());
  // GPT (0) > h (1) > h.0 (2) > h.0.attn (3) > h.0.attn.c_attn (4).
  const std::string report = p.report({/*module_depth=*/3, /*top_modules=*/3, true, "title"});
  EXPECT_NE(report.find("top 3 by own FLOPs"), std::string::npos) << report;
  const std::string table = report.substr(report.find("  module "));
  EXPECT_NE(table.find("h.0.attn "), std::string::npos) << report;
  EXPECT_EQ(table.find("h.0.attn.c_attn"), std::string::npos) << "deeper than module_depth\n"
                                                              << report;
  std::printf("%s", report.c_str());
}

TEST(FlopsProfiler, GPTForwardMatchesTheFormulaWithFusedAttention) {
  expect_gpt_counted(gpt_config(/*fused=*/true), false);
}

TEST(FlopsProfiler, GPTForwardMatchesTheFormulaWithComposedAttention) {
  expect_gpt_counted(gpt_config(/*fused=*/false), false);
}

TEST(FlopsProfiler, ActivationCheckpointingCountsOneForward) {
  expect_gpt_counted(gpt_config(/*fused=*/true, /*checkpoints=*/2), true);
}

TEST(FlopsProfiler, NothingMarkedMeansAnEmptyReport) {
  FlopsProfiler p;
  p.start();
  torch::nn::Linear(3, 4)(torch::randn({2, 3}));
  p.stop();
  EXPECT_FALSE(p.complete());
  EXPECT_NE(p.report({}).find("no forward was observed"), std::string::npos);
}

TEST(FlopsProfilerConfig, DeepSpeedKeysAndErrors) {
  auto c = Config::from_string(R"({"train_batch_size": 1, "flops_profiler": {"enabled": true,
      "profile_step": 3, "module_depth": 2, "top_modules": 4, "detailed": false,
      "output_file": null}})");
  EXPECT_TRUE(c.flops_profiler.enabled);
  EXPECT_EQ(c.flops_profiler.profile_step, 3);
  EXPECT_EQ(c.flops_profiler.module_depth, 2);
  EXPECT_EQ(c.flops_profiler.top_modules, 4);
  EXPECT_FALSE(c.flops_profiler.detailed);
  EXPECT_EQ(c.flops_profiler.output_file, "");
  try {
    Config::from_string(R"({"train_batch_size": 1, "flops_profiler": {"profile_stp": 3}})");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'profile_step'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Config::from_string(R"({"train_batch_size": 1, "flops_profiler":
      {"module_depth": -2}})"),
               ConfigError);
}

}  // namespace
}  // namespace tessera::runtime::profiling
