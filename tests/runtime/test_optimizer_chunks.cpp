// step_in_chunks (runtime/optimizer_chunks.h): stepping large parameters range by
// range gives bit for bit what one ordinary optimizer step gives, for every
// optimizer whose state Tessera knows, from the first step on, and leaves the
// state whole and keyed by the parameter (so checkpoints see no difference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/optimizer_chunks.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {
namespace {

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// A large flat parameter (not a multiple of the chunk), a small one, a 2-D one,
// and one without a gradient.
std::vector<at::Tensor> make_params() {
  torch::manual_seed(3);
  std::vector<at::Tensor> p = {torch::randn({1000}), torch::randn({7}), torch::randn({33, 20}),
                               torch::randn({50})};
  for (auto& t : p) t.requires_grad_(true);
  return p;
}

void set_grads(std::vector<at::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i + 1 < params.size(); ++i) {
    params[i].mutable_grad() = torch::randn(params[i].sizes());
  }
}

void expect_same_after_steps(const MakeOptimizer& make, const std::string& what,
                             bool known_state = true) {
  auto plain = make_params();
  auto chunked = make_params();
  auto a = make(plain);
  auto b = make(chunked);
  for (int step = 0; step < 4; ++step) {
    set_grads(plain, step);
    set_grads(chunked, step);
    a->step();
    step_in_chunks(*b, /*chunk_numel=*/64);
  }
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], chunked[i])) << what << ": parameter " << i;
    if (!known_state) continue;
    int64_t step_a = 0, step_b = 0;
    std::vector<at::Tensor> fa, fb;
    const bool has_a = take_param_state(*a, plain[i], &step_a, &fa);
    const bool has_b = take_param_state(*b, chunked[i], &step_b, &fb);
    ASSERT_EQ(has_a, has_b) << what << ": parameter " << i;
    EXPECT_EQ(step_a, step_b) << what << ": step count of parameter " << i;
    ASSERT_EQ(fa.size(), fb.size());
    for (size_t k = 0; k < fa.size(); ++k) {
      EXPECT_EQ(fa[k].sizes(), fb[k].sizes()) << what << ": state shape of parameter " << i;
      EXPECT_TRUE(torch::equal(fa[k], fb[k])) << what << ": state " << k << " of parameter " << i;
    }
  }
  // The parameter groups are the optimizer's own again.
  EXPECT_EQ(b->param_groups().at(0).params().size(), chunked.size()) << what;
}

TEST(OptimizerChunks, AdamAndAdamWEqualOneWholeStepBitForBit) {
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::Adam>(
            p, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
      },
      "Adam with weight decay");
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::AdamW>(
            p, torch::optim::AdamWOptions(1e-2).weight_decay(0.01).amsgrad(true));
      },
      "AdamW with amsgrad");
}

TEST(OptimizerChunks, SgdWithAndWithoutMomentumEqualsOneWholeStep) {
  // Momentum with dampening: the first step's buffer is the gradient itself, not
  // a dampened update of zeros, so the optimizer must create it per range.
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(
            p, torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
      },
      "SGD with momentum");
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(
            p, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
      },
      "SGD with Nesterov momentum");
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
      },
      "plain SGD");
}

TEST(OptimizerChunks, AnOptimizerWithUnknownStateTakesOneOrdinaryStep) {
  expect_same_after_steps(
      [](std::vector<at::Tensor> p) {
        return std::make_unique<torch::optim::RMSprop>(p, torch::optim::RMSpropOptions(1e-2));
      },
      "RMSprop", /*known_state=*/false);
}

}  // namespace
}  // namespace tessera::runtime
