// 16-bit activations with float32 parameters (low_precision.h and the GPT's
// compute_dtype): linear_lowp computes the float32 result of its rounded inputs
// (within bf16 rounding where bf16 GEMMs run natively); the GPT in bf16 and fp16 gives the float32 loss and gradients to
// within 16-bit rounding, with dropout (same masks when recomputed), and float32
// parameter gradients. The memory it saves is measured in bench/precision_bench.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tessera/models/gpt.h"
#include "tessera/models/low_precision.h"
#include "testing/small_gpt.h"

namespace tessera::models {
namespace {

TEST(LowPrecision, LinearGradientsAreFloat32OfTheRoundedInputs) {
  torch::manual_seed(0);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    auto x16 = torch::randn({3, 5, 8}).to(dtype).requires_grad_();
    auto w = torch::randn({6, 8}, torch::requires_grad());
    auto b = torch::randn({6}, torch::requires_grad());
    auto y = linear_lowp(x16, w, b);
    EXPECT_EQ(y.scalar_type(), dtype);
    auto g = torch::randn({3, 5, 6}).to(dtype);
    y.backward(g);
    // Reference: the same rounded input in float32.
    auto x32 = x16.detach().to(at::kFloat).requires_grad_();
    auto w2 = w.detach().clone().requires_grad_();
    auto b2 = b.detach().clone().requires_grad_();
    auto y32 = torch::nn::functional::linear(x32, w2, b2);
    y32.backward(g.to(at::kFloat));
    EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
    EXPECT_LE((b.grad() - b2.grad()).abs().max().item<double>(), 1e-5) << dtype;
    if (dtype == at::kBFloat16 && native_bf16_gemm()) {
      // bf16 GEMMs on bf16 operands (the weight rounded too), float32
      // accumulation, one rounding: within a few bf16 ulps of the float32 result.
      auto rel = [](const at::Tensor& a, const at::Tensor& b) {
        return ((a.to(at::kFloat) - b).abs().max() / b.abs().max()).item<double>();
      };
      EXPECT_LT(rel(y, y32), 2e-2);
      EXPECT_LT(rel(w.grad(), w2.grad()), 2e-2);
      EXPECT_LT(rel(x16.grad(), x32.grad()), 2e-2);
      continue;
    }
    // float32 GEMMs of the 16-bit values: exactly the float32 result, rounded.
    EXPECT_TRUE(torch::equal(y, y32.to(dtype))) << dtype;
    EXPECT_LE((w.grad() - w2.grad()).abs().max().item<double>(), 1e-5) << dtype;
    EXPECT_TRUE(torch::equal(x16.grad(), x32.grad().to(dtype))) << dtype;
  }
}

TEST(LowPrecision, NoBiasAndFloat32InputsArePlainLinear) {
  auto x = torch::randn({4, 8});
  auto w = torch::randn({3, 8});
  EXPECT_TRUE(torch::equal(linear_lowp(x, w), torch::nn::functional::linear(x, w)));
  auto y = linear_lowp(x.to(at::kHalf), w);
  EXPECT_EQ(y.scalar_type(), at::kHalf);
}

GPTConfig small(at::ScalarType dtype, double dropout) {
  GPTConfig c = tessera::testing::small_gpt();
  c.dropout = dropout;
  c.compute_dtype = dtype;
  return c;
}

struct LossAndGrads {
  double loss;
  std::vector<at::Tensor> grads;
};

LossAndGrads run(const GPTConfig& c, const at::Tensor& x, const at::Tensor& y) {
  torch::manual_seed(7);  // dropout masks
  GPT m(c);
  auto loss = m->loss(x, y);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (const auto& p : m->parameters()) {
    EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
    out.grads.push_back(p.grad().clone());
  }
  return out;
}

TEST(LowPrecision, GptInSixteenBitsMatchesFloat32WithinRounding) {
  auto gen = at::detail::createCPUGenerator(3);
  auto tokens = at::randint(0, 64, {4, 17}, gen);
  auto x = tokens.narrow(1, 0, 16), y = tokens.narrow(1, 1, 16);
  for (double dropout : {0.0, 0.1}) {
    const LossAndGrads ref = run(small(at::kFloat, dropout), x, y);
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      const LossAndGrads got = run(small(dtype, dropout), x, y);
      double rel = 0;
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        const double scale = ref.grads[i].abs().max().item<double>() + 1e-8;
        rel = std::max(rel, (got.grads[i] - ref.grads[i]).abs().max().item<double>() / scale);
      }
      const double tol = dtype == at::kBFloat16 ? 0.03 : 0.005;  // 8 vs 11 mantissa bits
      std::printf("[lowp] %s dropout %.1f: loss %.5f vs %.5f, max relative grad error %.3g\n",
                  c10::toString(dtype), dropout, got.loss, ref.loss, rel);
      EXPECT_NEAR(got.loss, ref.loss, 1e-3 * ref.loss) << dtype << " dropout " << dropout;
      EXPECT_LT(rel, tol) << dtype << " dropout " << dropout;
      EXPECT_GT(rel, 0.0) << "no rounding at all: the 16-bit path did not run";
    }
  }
}

}  // namespace
}  // namespace tessera::models
