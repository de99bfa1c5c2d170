// Expert parallelism with ranks as threads over gloo: all_to_all_v with uneven
// splits (forward and backward), and the MoE layer with its experts split over
// ep = 2 and 4 ranks, through the all-to-all and the all-gather dispatchers,
// against the whole layer in one process on every rank's tokens: outputs,
// token gradients, each rank's expert gradients and the router's summed
// gradient; with capacity drops and a shared expert too. The MoE GPT of
// tensor/tp_gpt.h at tp 2 x ep 2: losses and every gradient slice equal the
// dense GPT's.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "tessera/models/gpt.h"
#include "tessera/models/moe.h"
#include "tessera/parallel/expert/expert_parallel.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using testing::make_group;
using testing::run_ranks;

TEST(AllToAllV, UnevenSplitsForwardAndBackward) {
  // Rank i sends (i + j) rows of value 10 i + j to rank j.
  run_ranks(3, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, "gloo");
    std::vector<int64_t> send, recv;
    std::vector<torch::Tensor> parts;
    for (int j = 0; j < size; ++j) {
      send.push_back(rank + j);
      recv.push_back(j + rank);
      parts.push_back(torch::full({rank + j, 2}, 10.0 * rank + j));
    }
    auto x = torch::cat(parts).requires_grad_();
    auto got = all_to_all_v(x, send, recv, *g);
    int64_t at = 0;
    for (int j = 0; j < size; ++j) {
      auto block = got.slice(0, at, at + j + rank);
      EXPECT_TRUE(torch::equal(block, torch::full({j + rank, 2}, 10.0 * j + rank))) << rank << j;
      at += j + rank;
    }
    // d/dx sum(got * 2) = 2 everywhere, sent back through the reverse exchange.
    (got * 2).sum().backward();
    EXPECT_TRUE(torch::equal(x.grad(), torch::full_like(x, 2.0)));
    auto counts = exchange_counts(
        torch::tensor({rank * 10 + 0, rank * 10 + 1, rank * 10 + 2}, torch::kLong), *g);
    for (int j = 0; j < size; ++j) EXPECT_EQ(counts[j].item<int64_t>(), j * 10 + rank);
  });
}

// A rank whose tokens all go elsewhere sends no rows at all (an empty
// [0, H] tensor) yet receives: the row width comes from the shape.
TEST(AllToAllV, ARankThatSendsNothingStillReceives) {
  run_ranks(3, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, "gloo");
    // Rank 0 sends nothing; ranks 1 and 2 send 2 rows of value rank to everyone.
    std::vector<int64_t> send(3, rank == 0 ? 0 : 2), recv{0, 2, 2};
    auto x = torch::full({rank == 0 ? 0 : 6, 4}, static_cast<double>(rank)).requires_grad_();
    auto got = all_to_all_v(x, send, recv, *g);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{4, 4}));
    EXPECT_TRUE(torch::equal(got.slice(0, 0, 2), torch::full({2, 4}, 1.0)));
    EXPECT_TRUE(torch::equal(got.slice(0, 2, 4), torch::full({2, 4}, 2.0)));
    got.sum().backward();
    EXPECT_EQ(x.grad().size(0), x.size(0));
    EXPECT_TRUE(torch::equal(x.grad(), torch::ones_like(x)));
  });
}

TEST(ExpertParallel, MeshBuildsEpAndExpertDataParallelGroups) {
  run_ranks(4, [](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = make_group(rank, size, store, "gloo");
    auto mesh = ProcessMesh::build(world, /*tp=*/1, /*pp=*/1, /*cp=*/1, /*ep=*/2);
    const int block = rank / 2 * 2;
    EXPECT_EQ(mesh.ep()->global_ranks(), (std::vector<int>{block, block + 1}));
    EXPECT_EQ(mesh.expert_dp()->global_ranks(), (std::vector<int>{rank % 2, rank % 2 + 2}));
  });
}

struct Case {
  int ep;
  TokenDispatcherType type;
  double capacity_factor;
  int64_t shared;
};

void check_expert_parallel(const Case& k) {
  models::MoEConfig c;
  c.num_experts = 8;
  c.router_topk = 2;
  c.capacity_factor = k.capacity_factor;
  c.shared_expert_intermediate_size = k.shared;
  c.aux_loss_coeff = 0.01;
  const int64_t H = 16;
  torch::manual_seed(3);
  models::MoELayer whole(c, H, /*bias=*/true, "tanh");
  // Each rank's own tokens (as data-parallel ranks have), and a weight to make
  // the loss sensitive to every output.
  auto gen = at::detail::createCPUGenerator(11);
  std::vector<torch::Tensor> xs, ws, outs;
  torch::Tensor loss = torch::zeros({});
  int64_t dropped = 0;
  for (int r = 0; r < k.ep; ++r) {
    xs.push_back(torch::randn({2, 6, H}, gen).requires_grad_());
    ws.push_back(torch::randn({2, 6, H}, gen));
    outs.push_back(whole->forward(xs.back()));
    dropped += whole->last_routing().dropped;
    loss = loss + (outs.back() * ws.back()).sum() + whole->auxiliary_loss();
  }
  loss.backward();
  if (k.capacity_factor > 0) {
    EXPECT_GT(dropped, 0) << "the case should drop something";
  }
  std::mutex mu;
  double worst = 0;
  run_ranks(k.ep, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto g = make_group(rank, size, store, "gloo");
    const int64_t local = c.num_experts / size;
    models::MoELayer layer(c, H, true, "tanh", local, rank * local);
    {
      torch::NoGradGuard no_grad;
      layer->router->weight.copy_(whole->router->weight);
      auto slice = [&](const torch::Tensor& t) {
        return t.slice(0, rank * local, (rank + 1) * local);
      };
      layer->experts->fc_weight.copy_(slice(whole->experts->fc_weight));
      layer->experts->fc_bias.copy_(slice(whole->experts->fc_bias));
      layer->experts->proj_weight.copy_(slice(whole->experts->proj_weight));
      layer->experts->proj_bias.copy_(slice(whole->experts->proj_bias));
      if (layer->shared_fc) {
        for (auto& [mine, theirs] : {std::pair{layer->shared_fc, whole->shared_fc},
                                     std::pair{layer->shared_proj, whole->shared_proj}}) {
          mine->weight.copy_(theirs->weight);
          mine->bias.copy_(theirs->bias);
        }
      }
    }
    layer->set_dispatcher(make_token_dispatcher(k.type, g));
    auto x = xs[rank].detach().clone().requires_grad_();
    auto y = layer->forward(x);
    ((y * ws[rank]).sum() + layer->auxiliary_loss()).backward();
    auto router_grad = layer->router->weight.grad().clone();
    g->all_reduce(router_grad)->wait();  // the router's gradient, summed as dp would
    auto slice = [&](const torch::Tensor& t) {
      return t.slice(0, rank * local, (rank + 1) * local);
    };
    const double d =
        std::max({(y - outs[rank]).abs().max().item<double>(),
                  (x.grad() - xs[rank].grad()).abs().max().item<double>(),
                  (layer->experts->fc_weight.grad() - slice(whole->experts->fc_weight.grad()))
                      .abs()
                      .max()
                      .item<double>(),
                  (layer->experts->proj_bias.grad() - slice(whole->experts->proj_bias.grad()))
                      .abs()
                      .max()
                      .item<double>(),
                  (router_grad - whole->router->weight.grad()).abs().max().item<double>()});
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, d);
  });
  std::printf("[expert parallel] ep %d %s capacity %.1f shared %lld: max |diff| %.3g\n", k.ep,
              k.type == TokenDispatcherType::kAllToAll ? "alltoall" : "allgather",
              k.capacity_factor, static_cast<long long>(k.shared), worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(ExpertParallel, AllToAllEqualsTheWholeLayer) {
  check_expert_parallel({2, TokenDispatcherType::kAllToAll, 0.0, 0});
  check_expert_parallel({4, TokenDispatcherType::kAllToAll, 0.0, 24});
  check_expert_parallel({4, TokenDispatcherType::kAllToAll, 1.0, 0});
}

TEST(ExpertParallel, AllGatherEqualsTheWholeLayer) {
  check_expert_parallel({2, TokenDispatcherType::kAllGather, 0.0, 24});
  check_expert_parallel({4, TokenDispatcherType::kAllGather, 1.0, 0});
}

// World 4 = tp 2 x dp 2, the experts split over the two dp ranks (ep 2). Each
// dp rank trains on its half of the batch; the dense reference is the mean of
// the dense GPT's losses on the two halves (its auxiliary losses are per
// forward, as the ranks' are). With and without sequence parallelism.
TEST(ExpertParallel, TensorParallelMoEGptEqualsTheDenseGpt) {
  models::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.bias = true;
  c.moe.num_experts = 4;
  c.moe.router_topk = 2;
  c.moe.aux_loss_coeff = 0.01;
  c.moe.z_loss_coeff = 0.001;
  c.moe.shared_expert_intermediate_size = 32;
  models::GPT dense(c);
  auto gen = at::detail::createCPUGenerator(5);
  auto ids = torch::randint(c.vocab_size, {4, 8}, gen);
  auto targets = torch::randint(c.vocab_size, {4, 8}, gen);
  std::vector<double> dense_loss;
  torch::Tensor total = torch::zeros({});
  for (int d = 0; d < 2; ++d) {
    auto l = dense->loss(ids.slice(0, 2 * d, 2 * d + 2), targets.slice(0, 2 * d, 2 * d + 2));
    dense_loss.push_back(l.item<double>());
    total = total + l / 2;
  }
  total.backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : dense->named_parameters()) grads[p.key()] = p.value().grad();
  for (const bool sp : {false, true}) {
    std::mutex mu;
    double worst = 0;
    int experts_seen = 0;
    run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      auto world = make_group(rank, size, store, "gloo");
      auto mesh = ProcessMesh::build(world, /*tp=*/2, /*pp=*/1, /*cp=*/1, /*ep=*/2);
      TensorParallelOptions options{mesh.tp(), sp, nullptr};
      options.expert = ExpertParallelOptions{mesh.ep(), TokenDispatcherType::kAllToAll};
      TensorParallelGPT model(c, options);
      const int d = mesh.coord().dp;
      auto loss = model->loss(ids.slice(0, 2 * d, 2 * d + 2), targets.slice(0, 2 * d, 2 * d + 2));
      double diff = std::abs(loss.item<double>() - dense_loss[static_cast<size_t>(d)]);
      loss.backward();
      int experts = 0;
      for (const auto& p : model->named_parameters()) {
        const DenseSlice slice = dense_slice_of(p.key());
        auto g = p.value().grad().clone();
        // Dense weights: the mean over dp. An expert's gradient already holds
        // both dp ranks' tokens: half of it is the mean.
        if (slice.experts) {
          g /= 2;
          ++experts;
        } else {
          mesh.dp()->all_reduce(g)->wait();
          g /= 2;
        }
        auto want = dense_slice(grads.at(p.key()), slice, mesh.coord().tp, 2, mesh.ep()->rank(), 2);
        diff = std::max(diff, (g - want).abs().max().item<double>());
      }
      std::lock_guard<std::mutex> lock(mu);
      worst = std::max(worst, diff);
      experts_seen = experts;
    });
    std::printf("[expert parallel] MoE GPT tp 2 x ep 2%s against the dense GPT: max |diff| %.3g\n",
                sp ? " (sequence parallel)" : "", worst);
    EXPECT_EQ(experts_seen, 8) << "2 layers x 4 expert tensors (with biases)";
    EXPECT_LE(worst, 1e-5) << (sp ? "sequence parallel" : "");
  }
}

}  // namespace
}  // namespace tessera::parallel
