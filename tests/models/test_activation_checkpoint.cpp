// Activation checkpointing: a checkpointed segment gives the plain run's
// outputs and gradients (inputs and parameters, dropout on), the GPT's
// checkpointed blocks equal its plain blocks, and eval / no_grad runs fn once.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "tessera/core/error.h"
#include "tessera/models/activation_checkpoint.h"
#include "tessera/models/gpt.h"

namespace tessera::models {
namespace {

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(ActivationCheckpoint, SegmentGradientsEqualThePlainOnesWithDropout) {
  torch::manual_seed(1);
  torch::nn::Linear a(8, 16), b(16, 8);
  torch::nn::Dropout drop(0.3);
  int calls = 0;
  auto fn = [&](const std::vector<at::Tensor>& in) {
    ++calls;
    return std::vector<at::Tensor>{b(drop(torch::gelu(a(in[0])))) * in[1]};
  };
  auto x = torch::randn({4, 8}, torch::requires_grad());
  auto s = torch::randn({4, 8}, torch::requires_grad());
  std::vector<at::Tensor> params = a->parameters();
  for (auto& p : b->parameters()) params.push_back(p);

  torch::manual_seed(7);
  auto plain = fn({x, s})[0];
  plain.pow(2).sum().backward();
  std::vector<at::Tensor> want{x.grad().clone(), s.grad().clone()};
  for (auto& p : params) want.push_back(p.grad().clone());
  x.mutable_grad().zero_();
  s.mutable_grad().zero_();
  for (auto& p : params) p.mutable_grad().zero_();

  torch::manual_seed(7);
  calls = 0;
  auto ckpt = checkpoint_activations(fn, {x, s}, params)[0];
  EXPECT_EQ(calls, 1);
  EXPECT_LE(max_diff(ckpt, plain), 0.0);
  ckpt.pow(2).sum().backward();
  EXPECT_EQ(calls, 2) << "backward recomputes the segment once";
  std::vector<at::Tensor> got{x.grad(), s.grad()};
  for (auto& p : params) got.push_back(p.grad());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(max_diff(got[i], want[i]), 1e-6) << "gradient " << i;

  // Without autograd it is fn itself, called once.
  torch::NoGradGuard no_grad;
  calls = 0;
  checkpoint_activations(fn, {x, s}, params);
  EXPECT_EQ(calls, 1);
}

TEST(ActivationCheckpoint, GptCheckpointedBlocksEqualThePlainGpt) {
  GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.1;
  auto gen = at::detail::createCPUGenerator(3);
  auto idx = torch::randint(c.vocab_size, {2, c.block_size}, gen);
  auto targets = torch::randint(c.vocab_size, {2, c.block_size}, gen);
  auto grads_of = [&](int64_t segments, double* loss) {
    GPTConfig cc = c;
    cc.activation_checkpoints = segments;
    GPT gpt(cc);
    torch::manual_seed(11);  // the same dropout masks
    auto l = gpt->loss(idx, targets);
    l.backward();
    *loss = l.item<double>();
    std::vector<at::Tensor> g;
    for (auto& p : gpt->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  double want_loss = 0;
  const auto want = grads_of(0, &want_loss);
  for (int64_t segments : {4, 2, 1}) {
    double loss = 0;
    const auto got = grads_of(segments, &loss);
    EXPECT_EQ(loss, want_loss) << segments << " segments";
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, max_diff(got[i], want[i]));
    std::printf("[activation checkpointing] %lld segments: max |grad - plain| %.3g (dropout 0.1)\n",
                static_cast<long long>(segments), worst);
    EXPECT_LE(worst, 1e-6) << segments << " segments";
  }
  GPTConfig bad = c;
  bad.activation_checkpoints = 5;
  EXPECT_THROW(GPT{bad}, ConfigError);
}

}  // namespace
}  // namespace tessera::models
