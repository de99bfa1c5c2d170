// Context parallelism with ranks as threads: the head-tail layout, block
// attention merged by log-sum-exp against whole attention, and
// context_parallel_attention at cp 2 and 4 (p2p, a2a, allgather; causal and
// bidirectional) against scaled_dot_product_attention over the whole sequence:
// outputs and the gradients of q, k and v, shard for shard.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

#include "tessera/core/error.h"
#include "tessera/parallel/context/block_attention.h"
#include "tessera/parallel/context/context_parallel.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using testing::make_group;
using testing::run_ranks;

TEST(ContextParallelLayout, PairsHeadAndTailChunks) {
  EXPECT_TRUE(torch::equal(context_parallel_positions(16, 0, 2),
                           torch::tensor({0, 1, 2, 3, 12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(torch::equal(context_parallel_positions(16, 1, 2),
                           torch::tensor({4, 5, 6, 7, 8, 9, 10, 11}, torch::kLong)));
  auto x = torch::arange(2 * 24).view({2, 24});
  std::vector<torch::Tensor> shards;
  for (int r = 0; r < 3; ++r) {
    shards.push_back(context_parallel_shard(x, 1, r, 3));
    EXPECT_TRUE(torch::equal(shards.back()[0], context_parallel_positions(24, r, 3)));
  }
  EXPECT_TRUE(torch::equal(context_parallel_unshard(shards, 1), x));
}

TEST(ContextParallelLayout, RejectsLengthsThatDoNotSplit) {
  EXPECT_THROW(context_parallel_positions(10, 0, 4), ConfigError);
  EXPECT_THROW(context_parallel_shard(torch::zeros({1, 12}), 1, 0, 4), ConfigError);
  EXPECT_THROW(parse_cp_comm_type("ring"), ConfigError);
  EXPECT_EQ(parse_cp_comm_type("a2a"), CpCommType::kAllToAll);
}

struct Reference {
  torch::Tensor q, k, v, w, out, dq, dk, dv;
};

// Attention over the whole sequence by the usual composition; loss sum(out * w).
Reference reference(int64_t B, int64_t H, int64_t T, int64_t D, bool causal, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Reference r;
  r.q = torch::randn({B, H, T, D}, gen).requires_grad_();
  r.k = torch::randn({B, H, T, D}, gen).requires_grad_();
  r.v = torch::randn({B, H, T, D}, gen).requires_grad_();
  r.w = torch::randn({B, H, T, D}, gen);
  r.out = at::scaled_dot_product_attention(r.q, r.k, r.v, {}, 0.0, causal);
  (r.out * r.w).sum().backward();
  r.dq = r.q.grad();
  r.dk = r.k.grad();
  r.dv = r.v.grad();
  r.out = r.out.detach();
  return r;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(BlockAttention, MergedBlocksEqualWholeAttention) {
  for (bool causal : {true, false}) {
    auto ref = reference(2, 3, 16, 8, causal, 5);
    const auto pos = torch::arange(16, torch::kLong);
    const double scale = 1.0 / std::sqrt(8.0);
    // Keys in three blocks, visited out of order, the queries cut in four.
    const std::vector<std::pair<int64_t, int64_t>> blocks = {{8, 16}, {0, 4}, {4, 8}};
    BlockAttentionResult acc;
    auto slice = [](const torch::Tensor& t, std::pair<int64_t, int64_t> b, int64_t dim) {
      return t.slice(dim, b.first, b.second);
    };
    for (auto b : blocks) {
      merge_attention_blocks(acc, block_attention_forward(
                                      ref.q.detach(), slice(ref.k.detach(), b, 2),
                                      slice(ref.v.detach(), b, 2), pos, slice(pos, b, 0), causal,
                                      scale, {4, 2}));
    }
    EXPECT_LT(max_diff(acc.out, ref.out), 1e-5) << "causal " << causal;
    auto delta = (ref.w * acc.out).sum(-1);
    torch::Tensor dq = torch::zeros_like(ref.dq);
    for (auto b : blocks) {
      auto g = block_attention_backward(ref.q.detach(), slice(ref.k.detach(), b, 2),
                                        slice(ref.v.detach(), b, 2), pos, slice(pos, b, 0), causal,
                                        scale, ref.w, acc.lse, delta, {4, 2});
      dq += g.dq;
      EXPECT_LT(max_diff(g.dk, slice(ref.dk, b, 2)), 1e-5) << "causal " << causal;
      EXPECT_LT(max_diff(g.dv, slice(ref.dv, b, 2)), 1e-5) << "causal " << causal;
    }
    EXPECT_LT(max_diff(dq, ref.dq), 1e-5) << "causal " << causal;
  }
}

// Every rank computes its shard; outputs and gradients must equal the whole
// attention's shard for shard.
void check_context_parallel(int cp, CpCommType type, bool causal, const std::string& backend) {
  const int64_t B = 2, H = 4, T = 32, D = 8;
  const auto ref = reference(B, H, T, D, causal, 17 + cp);
  std::mutex mu;
  double worst = 0;
  run_ranks(cp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    ContextParallelOptions options{make_group(rank, size, store, backend), type};
    auto shard = [&](const torch::Tensor& t) { return context_parallel_shard(t, 2, rank, size); };
    auto q = shard(ref.q.detach()).requires_grad_();
    auto k = shard(ref.k.detach()).requires_grad_();
    auto v = shard(ref.v.detach()).requires_grad_();
    // Twice, as two layers would: the ring's messages of one call must not
    // meet another's.
    for (int layer = 0; layer < 2; ++layer) {
      q.mutable_grad() = torch::Tensor();
      k.mutable_grad() = torch::Tensor();
      v.mutable_grad() = torch::Tensor();
      auto out = context_parallel_attention(q, k, v, causal, options);
      (out * shard(ref.w)).sum().backward();
      const double d = std::max({max_diff(out.detach(), shard(ref.out)),
                                 max_diff(q.grad(), shard(ref.dq)),
                                 max_diff(k.grad(), shard(ref.dk)),
                                 max_diff(v.grad(), shard(ref.dv))});
      std::lock_guard<std::mutex> lock(mu);
      worst = std::max(worst, d);
    }
  });
  std::printf("[context parallel] cp %d %-9s %-13s over %s: max |diff| of out, dq, dk, dv %.3g\n",
              cp, cp_comm_type_name(type).c_str(), causal ? "causal" : "bidirectional",
              backend.c_str(), worst);
  EXPECT_LT(worst, 1e-5) << "cp " << cp << " " << cp_comm_type_name(type) << " causal "
                         << causal << " over " << backend;
}

TEST(ContextParallelAttention, RingEqualsWholeAttention) {
  for (int cp : {2, 4})
    for (bool causal : {true, false}) check_context_parallel(cp, CpCommType::kP2P, causal, "gloo");
}

TEST(ContextParallelAttention, AllToAllEqualsWholeAttention) {
  for (int cp : {2, 4})
    for (bool causal : {true, false})
      check_context_parallel(cp, CpCommType::kAllToAll, causal, "gloo");
}

TEST(ContextParallelAttention, AllGatherEqualsWholeAttention) {
  for (int cp : {2, 4})
    for (bool causal : {true, false})
      check_context_parallel(cp, CpCommType::kAllGather, causal, "gloo");
}

TEST(ContextParallelAttention, AllToAllNeedsHeadsDivisibleByCp) {
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    ContextParallelOptions options{make_group(rank, size, store, "gloo"), CpCommType::kAllToAll};
    auto q = torch::randn({1, 3, 8, 4});
    EXPECT_THROW(context_parallel_attention(q, q, q, true, options), ConfigError);
  });
}

}  // namespace
}  // namespace tessera::parallel
