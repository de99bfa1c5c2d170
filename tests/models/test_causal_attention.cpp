// The fused causal attention core against the LibTorch composition it replaces:
// forward and gradients on shapes that do and do not fill the row blocks, the
// softmax row kernels against each other, NaN propagation, refused inputs, and
// the GPT with the core on and off.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/models/gpt.h"
#include "tessera/models/ops/causal_attention.h"
#include "tessera/models/ops/causal_softmax.h"

namespace tessera::models {
namespace {

// The textbook composition, written independently of gpt.cpp.
torch::Tensor composed_attention(const torch::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hd = C / n_head;
  auto parts = qkv.split(C, 2);
  auto heads = [&](const torch::Tensor& z) { return z.view({B, T, n_head, hd}).transpose(1, 2); };
  auto att = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-2, -1)) /
             std::sqrt(static_cast<double>(hd));
  auto future = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(att, heads(parts[2])).transpose(1, 2).reshape({B, T, C});
}

struct Shape {
  int64_t B, T, C, n_head;
};

class FusedAttentionParity : public ::testing::TestWithParam<Shape> {};

// Forward and input gradient, against the composition in float64: the fused
// float32 core is no further from it than LibTorch's own float32 composition
// (with a little slack for a different rounding order), and close in absolute
// terms.
TEST_P(FusedAttentionParity, MatchesTheCompositionForwardAndBackward) {
  const Shape s = GetParam();
  auto gen = at::detail::createCPUGenerator(11);
  auto qkv = at::randn({s.B, s.T, 3 * s.C}, gen).mul_(2.0).requires_grad_();
  auto grad_out = at::randn({s.B, s.T, s.C}, gen);
  auto run = [&](bool fused, torch::ScalarType dtype) {
    auto x = qkv.detach().to(dtype).requires_grad_();
    auto out = fused ? ops::causal_attention(x, s.n_head) : composed_attention(x, s.n_head);
    out.backward(grad_out.to(dtype));
    return std::make_pair(out.detach().to(torch::kDouble), x.grad().to(torch::kDouble));
  };
  const auto [ref_out, ref_grad] = run(false, torch::kDouble);
  const auto [out, grad] = run(true, torch::kFloat);
  const auto [lib_out, lib_grad] = run(false, torch::kFloat);
  ASSERT_EQ(out.sizes(), ref_out.sizes());
  auto err = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().max().item<double>();
  };
  const double scale = std::max(1.0, ref_grad.abs().max().item<double>());
  const std::string where = "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
                            std::to_string(s.C) + " heads " + std::to_string(s.n_head);
  EXPECT_LE(err(out, ref_out), 2 * err(lib_out, ref_out) + 1e-6) << where;
  EXPECT_LE(err(grad, ref_grad), 2 * err(lib_grad, ref_grad) + 1e-6 * scale) << where;
  EXPECT_LT(err(out, ref_out), 2e-5) << where;
  EXPECT_LT(err(grad, ref_grad), 2e-5 * scale) << where;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionParity,
                         ::testing::Values(Shape{2, 64, 128, 4},  // two full row blocks
                                           Shape{3, 37, 48, 3},   // a partial block, odd head dim
                                           Shape{1, 100, 64, 2},  // four blocks, the last partial
                                           Shape{2, 1, 16, 4},    // one position
                                           Shape{1, 32, 8, 8}));  // head dim 1

TEST(FusedAttention, NonContiguousInputIsReadAsItsValues) {
  auto gen = at::detail::createCPUGenerator(12);
  auto base = at::randn({3 * 32, 10, 2}, gen);
  auto qkv = base.permute({2, 1, 0});  // [2, 10, 96], not contiguous
  ASSERT_FALSE(qkv.is_contiguous());
  auto a = ops::causal_attention(qkv, 4);
  auto b = ops::causal_attention(qkv.contiguous(), 4);
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(FusedAttention, FuturePositionsDoNotLeakIntoThePast) {
  auto gen = at::detail::createCPUGenerator(13);
  auto qkv = at::randn({1, 40, 3 * 16}, gen);
  auto changed = qkv.clone();
  changed.select(1, 35).add_(5.0);  // q, k and v of position 35
  auto a = ops::causal_attention(qkv, 2);
  auto b = ops::causal_attention(changed, 2);
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 35), b.slice(1, 0, 35)));
  EXPECT_FALSE(torch::equal(a.select(1, 35), b.select(1, 35)));
}

TEST(FusedAttention, NaNInAKeyPoisonsOnlyTheRowsThatSeeIt) {
  auto qkv = at::zeros({1, 12, 3 * 8});
  qkv.select(1, 5).narrow(1, 8, 8).fill_(std::numeric_limits<float>::quiet_NaN());  // k of t=5
  auto out = ops::causal_attention(qkv, 1);
  EXPECT_TRUE(torch::isfinite(out.slice(1, 0, 5)).all().item<bool>());
  EXPECT_TRUE(torch::isnan(out.slice(1, 5)).all().item<bool>());
}

TEST(FusedAttention, RefusesInputItDoesNotHandle) {
  EXPECT_FALSE(ops::causal_attention_supports(at::zeros({1, 4, 24}, torch::kDouble), 2));
  EXPECT_FALSE(ops::causal_attention_supports(at::zeros({1, 4, 20}), 4));  // 20 / 3 not whole
  EXPECT_FALSE(ops::causal_attention_supports(at::zeros({4, 24}), 2));
  try {
    ops::causal_attention(at::zeros({1, 4, 20}), 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head 4"), std::string::npos) << e.what();
  }
}

TEST(CausalSoftmaxRow, VectorAndScalarKernelsAgreeAndZeroTheFuture) {
  if (!ops::detail::cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  auto gen = at::detail::createCPUGenerator(14);
  const int64_t width = 45;
  for (int64_t t : {0, 6, 7, 8, 23, 44}) {
    auto row = at::randn({width}, gen).mul_(10.0);
    auto a = row.clone(), b = row.clone();
    ops::detail::causal_softmax_row_avx2(a.data_ptr<float>(), t, width);
    ops::detail::causal_softmax_row_scalar(b.data_ptr<float>(), t, width);
    auto ref = torch::softmax(row.slice(0, 0, t + 1), 0);
    EXPECT_LT((a.slice(0, 0, t + 1) - ref).abs().max().item<double>(), 1e-6) << "t=" << t;
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-6) << "t=" << t;
    EXPECT_EQ(a.slice(0, t + 1).abs().sum().item<double>(), 0.0) << "t=" << t;
    EXPECT_NEAR(a.sum().item<double>(), 1.0, 1e-5) << "t=" << t;
  }
}

GPTConfig small_gpt(bool fused) {
  GPTConfig c;
  c.block_size = 48;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.fused_attention = fused;
  return c;
}

// The same GPT with the core on and off: same loss and same gradients.
TEST(FusedAttention, GptLossAndGradientsMatchTheComposedModel) {
  GPT fused(small_gpt(true)), composed(small_gpt(false));
  auto gen = at::detail::createCPUGenerator(15);
  auto idx = at::randint(256, {3, 48}, gen);
  auto targets = at::randint(256, {3, 48}, gen);
  auto lf = fused->loss(idx, targets);
  auto lc = composed->loss(idx, targets);
  lf.backward();
  lc.backward();
  EXPECT_NEAR(lf.item<double>(), lc.item<double>(), 1e-5);
  auto pc = composed->named_parameters();
  for (const auto& p : fused->named_parameters()) {
    const double diff = (p.value().grad() - pc[p.key()].grad()).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << p.key();
  }
}

// Attention dropout in training needs the composition; eval mode does not.
TEST(FusedAttention, GptWithDropoutStillTrainsAndEvaluatesDeterministically) {
  GPTConfig c = small_gpt(true);
  c.dropout = 0.2;
  GPT model(c);
  auto gen = at::detail::createCPUGenerator(16);
  auto idx = at::randint(256, {2, 48}, gen);
  auto train_loss = model->loss(idx, idx);
  EXPECT_TRUE(std::isfinite(train_loss.item<double>()));
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model->forward(idx), model->forward(idx)));
}

}  // namespace
}  // namespace tessera::models
