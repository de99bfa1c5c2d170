// DDP(N ranks as threads over gloo) vs one process on the same global batch:
// after 10 SGD steps the parameters must match within 1e-5, with and without
// gradient accumulation (no_sync), with several buckets, for the reference GPT,
// and with the fp16/bf16 comm hooks within their rounding. Also: a bucket's
// all_reduce is launched before backward ends (overlap).
#include <gtest/gtest.h>

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "ddp_test_util.h"
#include "tessera/models/gpt.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime::ddp {
namespace {

using tessera::testing::copy_params;
using tessera::testing::data_for;
using tessera::testing::max_abs_diff;
using tessera::testing::Mlp;

constexpr int64_t kIn = 8, kHidden = 32, kOut = 4, kPerRank = 4, kSteps = 10;

// Reference: one model, the global batch (every rank's rows), plain SGD.
Mlp reference_run(const Mlp& init, int world) {
  Mlp ref(kIn, kHidden, kOut);
  copy_params(*ref, *init);
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t s = 0; s < kSteps; ++s) {
    auto x = data_for(s, kPerRank * world, kIn, 1);
    auto y = data_for(s, kPerRank * world, kOut, 2);
    opt.zero_grad();
    torch::mse_loss(ref->forward(x), y).backward();
    opt.step();
  }
  return ref;
}

struct ParityCase {
  int world;
  int accumulation;  // micro-batches per step (no_sync on all but the last)
  CommHook hook;
  double tolerance;
};

void run_parity(const ParityCase& pc) {
  torch::manual_seed(0);
  Mlp init(kIn, kHidden, kOut);
  Mlp ref = reference_run(init, pc.world);
  std::mutex mu;
  double worst = 0;
  int64_t buckets = 0;
  tessera::testing::run_ranks(pc.world, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo");
    Mlp model(kIn, kHidden, kOut);
    // Only rank 0 starts from the reference weights: the others must get them
    // from DDP's initial broadcast.
    if (rank == 0) copy_params(*model, *init);
    DdpOptions opts;
    opts.bucket_cap_mb = 1024.0 / (1 << 20);  // 1 KiB: several buckets
    opts.first_bucket_cap_mb = 256.0 / (1 << 20);
    opts.comm_hook = pc.hook;
    DistributedDataParallel ddp(model.ptr(), group, opts);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t s = 0; s < kSteps; ++s) {
      auto x = data_for(s, kPerRank * size, kIn, 1).narrow(0, rank * kPerRank, kPerRank);
      auto y = data_for(s, kPerRank * size, kOut, 2).narrow(0, rank * kPerRank, kPerRank);
      opt.zero_grad();
      const int64_t micro = kPerRank / pc.accumulation;
      for (int m = 0; m < pc.accumulation; ++m) {
        auto loss = torch::mse_loss(model->forward(x.narrow(0, m * micro, micro)),
                                    y.narrow(0, m * micro, micro)) /
                    static_cast<double>(pc.accumulation);
        if (m + 1 < pc.accumulation) {
          auto guard = ddp.no_sync();
          loss.backward();
        } else {
          loss.backward();
        }
      }
      opt.step();
    }
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, max_abs_diff(*model, *ref));
    buckets = static_cast<int64_t>(ddp.reducer().buckets().size());
    EXPECT_EQ(ddp.reducer().reductions(), kSteps);
  });
  std::printf("[parity] world %d accumulation %d hook %s: %lld buckets, max |diff| %.3g\n",
              pc.world, pc.accumulation, to_string(pc.hook), static_cast<long long>(buckets),
              worst);
  EXPECT_GT(buckets, 2);
  EXPECT_LE(worst, pc.tolerance);
}

TEST(DdpParity, TwoRanks) { run_parity({2, 1, CommHook::kNone, 1e-5}); }
TEST(DdpParity, FourRanks) { run_parity({4, 1, CommHook::kNone, 1e-5}); }
TEST(DdpParity, TwoRanksWithAccumulation) { run_parity({2, 2, CommHook::kNone, 1e-5}); }
TEST(DdpParity, FourRanksWithAccumulation) { run_parity({4, 4, CommHook::kNone, 1e-5}); }
// 16-bit wire formats round each averaged gradient: agreement to ~1e-3.
TEST(DdpParity, Fp16CommHook) { run_parity({2, 1, CommHook::kFp16, 2e-3}); }
TEST(DdpParity, Bf16CommHook) { run_parity({2, 1, CommHook::kBf16, 2e-2}); }

// The reference GPT with its fused attention core (the model `tessera train` and
// the benchmark run): 2 ranks x 2 sequences against one process on all 4.
TEST(DdpParity, GptTwoRanksWithFusedAttention) {
  models::GPTConfig cfg;
  cfg.block_size = 24;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_embd = 32;
  ASSERT_TRUE(cfg.fused_attention);
  constexpr int64_t kSeqPerRank = 2, kWorld = 2;
  auto tokens = [&](int64_t step) {
    auto gen = at::detail::createCPUGenerator(100 + step);
    return at::randint(256, {kSeqPerRank * kWorld, cfg.block_size + 1}, gen);
  };
  auto train = [&](models::GPT& model, int64_t first, int64_t count, auto&& backward) {
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t s = 0; s < kSteps; ++s) {
      auto batch = tokens(s).narrow(0, first, count);
      opt.zero_grad();
      backward(model->loss(batch.narrow(1, 0, cfg.block_size), batch.narrow(1, 1, cfg.block_size)));
      opt.step();
    }
  };
  models::GPT ref(cfg);
  train(ref, 0, kSeqPerRank * kWorld, [](torch::Tensor loss) { loss.backward(); });
  std::mutex mu;
  double worst = 0;
  tessera::testing::run_ranks(kWorld, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, "gloo");
    models::GPT model(cfg);
    DistributedDataParallel ddp(model.ptr(), group);
    train(model, rank * kSeqPerRank, kSeqPerRank, [](torch::Tensor loss) { loss.backward(); });
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, max_abs_diff(*model, *ref));
  });
  std::printf("[parity] GPT, fused attention, world 2: max |diff| %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
}

}  // namespace
}  // namespace tessera::runtime::ddp
