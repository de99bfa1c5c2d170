// SyncBatchNorm against BatchNorm in one process on the concatenated batch:
// outputs, input gradients, weight and bias gradients (summed over ranks, as DDP
// averages them), running statistics and eval outputs, at 2 and 4 ranks with
// uneven per-rank batches; and convert_sync_batchnorm.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>
#include <mutex>

#include "tessera/core/error.h"
#include "tessera/parallel/sync_batch_norm.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using tessera::testing::make_group;
using tessera::testing::run_ranks;

constexpr int64_t kChannels = 3;

// Rank r's part of the global batch: 2r + 1 samples (uneven), with a fixed
// gradient multiplier for the loss sum(y * g).
std::pair<torch::Tensor, torch::Tensor> part(int rank, int64_t step) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(31 * rank + step));
  const int64_t n = 2 * rank + 1;
  auto x = torch::randn({n, kChannels, 4, 5}, gen) * 2 + 0.5;
  auto g = torch::randn({n, kChannels, 4, 5}, gen);
  return {x, g};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

void check_against_one_process(int world) {
  // The reference: one BatchNorm2d over every rank's part, two training steps.
  torch::nn::BatchNorm2d ref(torch::nn::BatchNorm2dOptions(kChannels).momentum(0.2));
  {
    torch::NoGradGuard no_grad;
    ref->weight.copy_(torch::tensor({1.5, -0.5, 2.0}));
    ref->bias.copy_(torch::tensor({0.1, 0.2, -0.3}));
  }
  std::map<int, torch::Tensor> ref_y, ref_dx;
  torch::Tensor ref_dw, ref_db;
  for (int64_t step = 0; step < 2; ++step) {
    std::vector<torch::Tensor> xs, gs;
    for (int r = 0; r < world; ++r) {
      auto [x, g] = part(r, step);
      xs.push_back(x.requires_grad_(true));
      gs.push_back(g);
    }
    ref->zero_grad();
    auto x_all = torch::cat(xs);
    auto y = ref->forward(x_all);
    (y * torch::cat(gs)).sum().backward();
    int64_t at = 0;
    for (int r = 0; r < world; ++r) {
      const int64_t n = xs[static_cast<size_t>(r)].size(0);
      ref_y[r] = y.narrow(0, at, n).detach();
      ref_dx[r] = xs[static_cast<size_t>(r)].grad();
      at += n;
    }
    ref_dw = ref->weight.grad().clone();
    ref_db = ref->bias.grad().clone();
  }
  ref->eval();
  auto probe = torch::randn({2, kChannels, 4, 5});
  const auto ref_eval = ref->forward(probe).detach();

  std::mutex mu;
  double worst = 0;
  run_ranks(world, [&](int rank, int size, auto store) {
    auto group = make_group(rank, size, store, "gloo");
    SyncBatchNormOptions o;
    o.num_features = kChannels;
    o.momentum = 0.2;
    SyncBatchNorm bn(o, group);
    {
      torch::NoGradGuard no_grad;
      bn->weight.copy_(torch::tensor({1.5, -0.5, 2.0}));
      bn->bias.copy_(torch::tensor({0.1, 0.2, -0.3}));
    }
    torch::Tensor y, dx;
    for (int64_t step = 0; step < 2; ++step) {
      auto [x, g] = part(rank, step);
      x.requires_grad_(true);
      bn->zero_grad();
      y = bn->forward(x);
      (y * g).sum().backward();
      dx = x.grad();
    }
    // DDP sums (then averages) the local weight and bias gradients.
    auto dw = bn->weight.grad().clone(), db = bn->bias.grad().clone();
    group->all_reduce(dw)->wait();
    group->all_reduce(db)->wait();
    bn->eval();
    const auto eval = bn->forward(probe);
    std::lock_guard<std::mutex> lock(mu);
    for (double d : {max_diff(y.detach(), ref_y[rank]), max_diff(dx, ref_dx[rank]),
                     max_diff(dw, ref_dw), max_diff(db, ref_db),
                     max_diff(bn->running_mean, ref->running_mean),
                     max_diff(bn->running_var, ref->running_var), max_diff(eval, ref_eval)}) {
      worst = std::max(worst, d);
    }
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  });
  std::printf("[sync bn] %d ranks, batches 1..%d: max |diff| against BatchNorm on the whole "
              "batch (outputs, input, weight and bias gradients, running stats, eval) %.3g\n",
              world, 2 * world - 1, worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(SyncBatchNorm, EqualsBatchNormOnTheWholeBatchAtTwoRanks) { check_against_one_process(2); }
TEST(SyncBatchNorm, EqualsBatchNormOnTheWholeBatchAtFourRanks) { check_against_one_process(4); }

TEST(SyncBatchNorm, ConvertsTheBatchNormsOfSequentialsAndNamesTheOnesItCannot) {
  run_ranks(1, [&](int rank, int size, auto store) {
    auto group = make_group(rank, size, store, "gloo");
    torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                              torch::nn::BatchNorm2d(4), torch::nn::ReLU());
    {
      torch::NoGradGuard no_grad;
      net[1]->as<torch::nn::BatchNorm2d>()->weight.fill_(3.0);
    }
    auto x = torch::randn({2, 1, 6, 6});
    auto before = net->forward(x);
    EXPECT_EQ(convert_sync_batchnorm(*net, group), 1);
    EXPECT_NE(net[1]->as<SyncBatchNorm>(), nullptr);
    EXPECT_EQ(net[1]->as<SyncBatchNorm>()->weight[0].item<double>(), 3.0);
    // One rank: the same as BatchNorm (statistics of this batch).
    EXPECT_LE(max_diff(net->forward(x), before), 1e-5);
    EXPECT_EQ(net->named_parameters().size(), 4u);  // conv weight and bias, BN weight and bias
    // Found at any depth: a Sequential inside a module.
    struct Outer : torch::nn::Module {
      Outer() { body = register_module("body", torch::nn::Sequential(torch::nn::BatchNorm1d(3))); }
      torch::nn::Sequential body{nullptr};
    };
    Outer outer;
    EXPECT_EQ(convert_sync_batchnorm(outer, group), 1);
    EXPECT_NE(outer.body->ptr(0)->template as<SyncBatchNorm>(), nullptr);

    struct Holder : torch::nn::Module {
      Holder() { bn = register_module("bn", torch::nn::BatchNorm1d(3)); }
      torch::nn::BatchNorm1d bn{nullptr};
    };
    Holder holder;
    try {
      convert_sync_batchnorm(holder, group);
      ADD_FAILURE() << "a BatchNorm held as a member was converted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'bn'"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace tessera::parallel
