// GPT reference model: shapes, causality, weight tying, init statistics,
// determinism, learning, and sampling.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/models/gpt.h"

namespace tessera::models {
namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.vocab_size = 256;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

torch::Tensor random_tokens(int64_t B, int64_t T, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(0, 256, {B, T}, gen, torch::kLong);
}

TEST(GPT, ForwardShape) {
  GPT model(tiny());
  auto logits = model->forward(random_tokens(3, 10, 1));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 10, 256}));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST(GPT, CausalityFutureTokensDontChangeThePast) {
  GPT model(tiny());
  model->eval();
  auto idx = random_tokens(2, 12, 2);
  auto changed = idx.clone();
  changed.index_put_({torch::indexing::Slice(), 7}, (idx.select(1, 7) + 1) % 256);
  auto a = model->forward(idx);
  auto b = model->forward(changed);
  using torch::indexing::Slice;
  double past = (a.index({Slice(), Slice(0, 7)}) - b.index({Slice(), Slice(0, 7)}))
                    .abs()
                    .max()
                    .item<double>();
  double at_change = (a.index({Slice(), 7}) - b.index({Slice(), 7})).abs().max().item<double>();
  EXPECT_EQ(past, 0.0) << "logits before the changed position moved by " << past;
  EXPECT_GT(at_change, 1e-6) << "the changed token had no effect at its own position";
}

TEST(GPT, HeadIsTiedToTokenEmbedding) {
  GPTConfig c = tiny();
  GPT model(c);
  const int64_t C = c.n_embd, V = c.vocab_size, L = c.n_layer;
  const int64_t expected = V * C + c.block_size * C + L * (12 * C * C + 13 * C) + 2 * C;
  EXPECT_EQ(model->num_parameters(), expected);
  EXPECT_EQ(model->num_parameters(true), expected - c.block_size * C);
  int embedding_sized = 0;
  for (const auto& p : model->named_parameters()) {
    if (p.value().sizes() == torch::IntArrayRef({V, C})) ++embedding_sized;
  }
  EXPECT_EQ(embedding_sized, 1) << "the LM head must not own a separate [V, C] weight";
  // Through the head, every token row of wte gets a gradient, not only the rows of
  // tokens present in the input.
  auto idx = torch::zeros({1, 4}, torch::kLong);  // only token 0 is embedded
  model->loss(idx, idx).backward();
  auto row_norms = model->wte->weight.grad().abs().sum(1);
  EXPECT_GT(row_norms[200].item<double>(), 0.0);
}

TEST(GPT, InitialLossIsNearLogVocab) {
  GPT model(tiny());
  auto idx = random_tokens(4, 16, 3);
  auto targets = random_tokens(4, 16, 4);
  double loss = model->loss(idx, targets).item<double>();
  std::printf("initial loss %.4f (ln 256 = %.4f)\n", loss, std::log(256.0));
  EXPECT_NEAR(loss, std::log(256.0), 0.15);
}

TEST(GPT, InitIsSeededAndGpt2Scaled) {
  GPTConfig c = tiny();
  GPT a(c), b(c);
  c.seed += 1;
  GPT other(c);
  auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
  bool any_diff = false;
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    if (!torch::equal(p.value(), po[p.key()])) any_diff = true;
  }
  EXPECT_TRUE(any_diff);
  double std_wte = a->wte->weight.std().item<double>();
  double std_proj = pa["h.0.mlp.c_proj.weight"].std().item<double>();
  EXPECT_NEAR(std_wte, 0.02, 0.002);
  EXPECT_NEAR(std_proj, 0.02 / std::sqrt(2.0 * c.n_layer), 0.002);
  EXPECT_EQ(pa["h.0.attn.c_attn.bias"].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(pa["ln_f.weight"].min().item<double>(), 1.0);
}

TEST(GPT, AdamStepsReduceLossOnATinyBatch) {
  GPT model(tiny());
  auto idx = random_tokens(4, 16, 5);
  auto targets = torch::roll(idx, -1, 1);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    auto loss = model->loss(idx, targets);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  std::printf("AdamW, 40 steps on one 4x16 batch: loss %.4f -> %.4f\n", first, last);
  EXPECT_LT(last, first - 1.5) << "loss went from " << first << " to " << last;
}

TEST(GPT, GenerateIsSeededAndCropsContext) {
  GPTConfig c = tiny();
  GPT model(c);
  auto prompt = random_tokens(1, 20, 6).reshape({-1});  // longer than block_size
  auto a = model->generate(prompt, 8, 0.8, 20, 42);
  auto b = model->generate(prompt, 8, 0.8, 20, 42);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{1, 28}));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 20), prompt.reshape({1, -1})));
  EXPECT_LT(a.max().item<int64_t>(), 256);
  EXPECT_TRUE(model->is_training()) << "generate must restore training mode";
}

TEST(GPT, InitialParametersOneAtATimeEqualTheModels) {
  GPTConfig c = tiny();
  c.n_layer = 3;
  GPT model(c);
  const auto want = model->named_parameters(true);
  size_t i = 0;
  for_each_initial_parameter(c, [&](const std::string& name, const torch::Tensor& t) {
    ASSERT_LT(i, want.size());
    EXPECT_EQ(name, want[i].key());
    EXPECT_TRUE(torch::equal(t, want[i].value())) << name;
    ++i;
  });
  EXPECT_EQ(i, want.size());
}

TEST(GPT, RejectsBadInputAndConfig) {
  GPT model(tiny());
  EXPECT_THROW(model->forward(random_tokens(1, 17, 7)), Error);
  GPTConfig bad = tiny();
  bad.n_embd = 33;
  EXPECT_THROW(GPT{bad}, ConfigError);
}

}  // namespace
}  // namespace tessera::models
