// The MoE layer in one process: top-k routing with softmax and sigmoid scores,
// capacity drops by weight and by position against a hand computation, the
// load-balancing and z losses against their formulas on a fixed batch, and the
// batched experts (one padded bmm) against a loop of one MLP per expert,
// forward and backward.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/moe.h"

namespace tessera::models {
namespace {

MoEConfig config(int64_t experts, int64_t k) {
  MoEConfig c;
  c.num_experts = experts;
  c.router_topk = k;
  return c;
}

TEST(MoERouting, SoftmaxOverTheChosenLogits) {
  auto logits = torch::tensor({{2.0f, 1.0f, 0.0f, -1.0f}, {0.0f, 3.0f, 1.0f, 0.5f}});
  auto r = route_tokens(logits, config(4, 2));
  EXPECT_TRUE(torch::equal(r.expert, torch::tensor({{0, 1}, {1, 2}}, torch::kLong)));
  // softmax over the chosen logits: (2, 1) for token 0, (3, 1) for token 1.
  EXPECT_NEAR(r.weight[0][0].item<double>(), 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(r.weight[1][0].item<double>(), 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_TRUE(torch::equal(r.tokens_per_expert, torch::tensor({1, 2, 1, 0}, torch::kLong)));
}

TEST(MoERouting, SigmoidScoresNormalizedOverTheChosen) {
  auto c = config(3, 2);
  c.score_function = "sigmoid";
  auto logits = torch::tensor({{1.0f, -1.0f, 0.5f}});
  auto r = route_tokens(logits, c);
  const double a = 1 / (1 + std::exp(-1.0)), b = 1 / (1 + std::exp(-0.5));
  EXPECT_TRUE(torch::equal(r.expert, torch::tensor({{0, 2}}, torch::kLong)));
  EXPECT_NEAR(r.weight[0][0].item<double>(), a / (a + b), 1e-6);
  EXPECT_NEAR(r.weight[0][1].item<double>(), b / (a + b), 1e-6);
}

// 6 tokens, 2 experts, top-1, capacity factor 1: ceil(6 * 1 / 2 * 1) = 3 places
// per expert. Five tokens want expert 0: two of them are dropped.
TEST(MoERouting, CapacityDropsByWeightOrByPosition) {
  auto logits = torch::tensor({{1.0f, 0.0f},   // expert 0, weight 1 (top-1 softmax)
                               {2.0f, 0.0f},
                               {0.0f, 1.0f},   // expert 1
                               {3.0f, 0.0f},
                               {0.5f, 0.0f},
                               {4.0f, 0.0f}});
  auto c = config(2, 1);
  c.capacity_factor = 1.0;
  EXPECT_EQ(expert_capacity(6, c), 3);
  // Top-1 softmax weights are all 1: "probs" breaks ties stably (token order),
  // so the raw scores decide nothing; use sigmoid to give them distinct weights.
  c.score_function = "sigmoid";
  auto by_probs = route_tokens(logits, c);
  EXPECT_EQ(by_probs.dropped, 2);
  // Expert 0's tokens by weight: 5 (4.0), 3 (3.0), 1 (2.0), 0 (1.0), 4 (0.5).
  EXPECT_TRUE(torch::equal(by_probs.kept.squeeze(1),
                           torch::tensor({false, true, true, true, false, true})));
  c.token_drop_policy = "position";
  auto by_position = route_tokens(logits, c);
  EXPECT_EQ(by_position.dropped, 2);
  // Expert 0's first three tokens: 0, 1, 3; tokens 4 and 5 are dropped.
  EXPECT_TRUE(torch::equal(by_position.kept.squeeze(1),
                           torch::tensor({true, true, true, true, false, false})));
  EXPECT_TRUE(torch::equal(by_position.tokens_per_expert, torch::tensor({3, 1}, torch::kLong)));
  c.capacity_factor = 0;  // dropless
  EXPECT_EQ(route_tokens(logits, c).dropped, 0);
}

TEST(MoERouting, AuxAndZLossesFollowTheirFormulas) {
  auto gen = at::detail::createCPUGenerator(3);
  auto logits = torch::randn({16, 4}, gen);
  auto c = config(4, 2);
  c.aux_loss_coeff = 0.01;
  c.z_loss_coeff = 0.001;
  auto r = route_tokens(logits, c);
  // E * sum_e f_e P_e, f_e = assignments to e / (N k), P_e = mean softmax prob.
  auto probs = torch::softmax(logits, -1);
  double aux = 0;
  for (int64_t e = 0; e < 4; ++e) {
    const double f = r.expert.eq(e).sum().item<double>() / (16.0 * 2.0);
    aux += f * probs.select(1, e).mean().item<double>();
  }
  aux *= 0.01 * 4;
  double z = 0;
  for (int64_t t = 0; t < 16; ++t) {
    const double lse = std::log(logits[t].exp().sum().item<double>());
    z += lse * lse;
  }
  z = 0.001 * z / 16;
  EXPECT_NEAR(r.aux_loss.item<double>(), aux, 1e-7);
  EXPECT_NEAR(r.z_loss.item<double>(), z, 1e-7);
  // Uniform probabilities give exactly the coefficient, whatever the routing:
  // E * sum_e f_e / E = 1.
  EXPECT_NEAR(route_tokens(torch::zeros({8, 4}), c).aux_loss.item<double>(), 0.01, 1e-7);
}

TEST(MoELayer, BatchedExpertsEqualOneMlpPerExpert) {
  torch::manual_seed(1);
  auto c = config(4, 2);
  c.shared_expert_intermediate_size = 12;
  MoELayer layer(c, 8, /*bias=*/true, "tanh");
  {
    torch::NoGradGuard no_grad;
    layer->experts->fc_bias.normal_(0, 0.1);
    layer->experts->proj_bias.normal_(0, 0.1);
  }
  auto x = torch::randn({2, 5, 8}, torch::requires_grad());
  auto y = layer->forward(x);
  // By hand: every token through its k experts.
  auto flat = x.reshape({-1, 8});
  const auto& r = layer->last_routing();
  auto& ex = *layer->experts;
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < flat.size(0); ++t) {
    auto sum = torch::zeros({8});
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t e = r.expert[t][j].item<int64_t>();
      auto h = torch::gelu(torch::matmul(flat[t], ex.fc_weight[e]) + ex.fc_bias[e], "tanh");
      sum = sum + r.weight[t][j] * (torch::matmul(h, ex.proj_weight[e]) + ex.proj_bias[e]);
    }
    rows.push_back(sum);
  }
  auto want = torch::stack(rows) +
              layer->shared_proj(torch::gelu(layer->shared_fc(flat), "tanh"));
  EXPECT_LT((y.reshape({-1, 8}) - want).abs().max().item<double>(), 1e-6);
  auto w = torch::randn_like(y);
  // Both sums share the routing's graph: keep it for the second.
  auto gy = torch::autograd::grad({(y * w).sum()}, {x, ex.fc_weight, layer->router->weight},
                                  /*grad_outputs=*/{}, /*retain_graph=*/true);
  auto gw = torch::autograd::grad({(want * w.reshape({-1, 8})).sum()},
                                  {x, ex.fc_weight, layer->router->weight});
  for (size_t i = 0; i < gy.size(); ++i) {
    EXPECT_LT((gy[i] - gw[i]).abs().max().item<double>(), 1e-6) << "gradient " << i;
  }
}

TEST(MoELayer, BadSettingsNameTheKey) {
  auto c = config(4, 5);
  EXPECT_THROW(c.validate(), ConfigError);
  c = config(4, 2);
  c.score_function = "relu";
  EXPECT_THROW(c.validate(), ConfigError);
  c = config(4, 2);
  c.token_drop_policy = "random";
  EXPECT_THROW(c.validate(), ConfigError);
}

}  // namespace
}  // namespace tessera::models
