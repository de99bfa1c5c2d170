// The fp16/bf16 comm hooks really send 16 bits and really round: over gloo and
// shm (ranks as threads), one synchronized DDP backward with a hook must leave in
// every .grad exactly round16(sum over ranks of round16(g_rank / world)) — the
// sum taken in float32 — where g_rank is each rank's own local gradient, and the
// all-reduce bytes of the step must be half of those without the hook. A hook
// that did nothing (or reduced in float32) fails the equality; one that upcast
// before sending fails the byte count.
#include <gtest/gtest.h>

#include <mutex>

#include "ddp_test_util.h"
#include "tessera/comm/comm_stats.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime::ddp {
namespace {

using tessera::testing::copy_params;
using tessera::testing::data_for;
using tessera::testing::Mlp;

constexpr int64_t kIn = 8, kHidden = 32, kOut = 4, kPerRank = 4;

// Rank r's local gradients (no communication), in parameter order.
std::vector<at::Tensor> local_gradients(const Mlp& init, int r, int world) {
  Mlp m(kIn, kHidden, kOut);
  copy_params(*m, *init);
  auto x = data_for(0, kPerRank * world, kIn, 1).narrow(0, r * kPerRank, kPerRank);
  auto y = data_for(0, kPerRank * world, kOut, 2).narrow(0, r * kPerRank, kPerRank);
  torch::mse_loss(m->forward(x), y).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : m->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

struct StepResult {
  std::vector<at::Tensor> grads;
  uint64_t allreduce_bytes = 0;
};

StepResult ddp_step(const Mlp& init, int rank, int world, std::shared_ptr<comm::ProcessGroup> group,
                    CommHook hook) {
  Mlp model(kIn, kHidden, kOut);
  copy_params(*model, *init);
  DdpOptions opts;
  opts.comm_hook = hook;
  opts.bucket_cap_mb = 1024.0 / (1 << 20);  // several buckets
  DistributedDataParallel ddp(model.ptr(), group, opts);
  auto x = data_for(0, kPerRank * world, kIn, 1).narrow(0, rank * kPerRank, kPerRank);
  auto y = data_for(0, kPerRank * world, kOut, 2).narrow(0, rank * kPerRank, kPerRank);
  const comm::CommStats before = group->comm_stats();
  torch::mse_loss(model->forward(x), y).backward();
  const comm::CommStats step = comm::CommStats::difference(group->comm_stats(), before);
  StepResult out;
  out.allreduce_bytes = step[comm::OpType::kAllReduce].bytes;
  for (const auto& p : model->parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

void check_hook(const std::string& backend, int world, CommHook hook) {
  torch::manual_seed(0);
  Mlp init(kIn, kHidden, kOut);
  const auto dtype = hook == CommHook::kFp16 ? at::kHalf : at::kBFloat16;
  std::vector<std::vector<at::Tensor>> local;
  for (int r = 0; r < world; ++r) local.push_back(local_gradients(init, r, world));
  // The exact result of the hook: round every rank's share to 16 bits, sum in
  // float32, round once.
  std::vector<at::Tensor> expected;
  for (size_t i = 0; i < local[0].size(); ++i) {
    at::Tensor sum = at::zeros_like(local[0][i]);
    for (int r = 0; r < world; ++r) sum += local[r][i].div(world).to(dtype).to(at::kFloat);
    expected.push_back(sum.to(dtype).to(at::kFloat));
  }
  std::mutex mu;
  tessera::testing::run_ranks(world, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = tessera::testing::make_group(rank, size, store, backend);
    StepResult fp32 = ddp_step(init, rank, size, group, CommHook::kNone);
    StepResult half = ddp_step(init, rank, size, group, hook);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GT(fp32.allreduce_bytes, 0u);
    EXPECT_EQ(half.allreduce_bytes * 2, fp32.allreduce_bytes)
        << backend << " " << to_string(hook) << ": 16-bit bytes " << half.allreduce_bytes
        << " vs float32 " << fp32.allreduce_bytes;
    double rounding = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(at::equal(half.grads[i], expected[i]))
          << backend << " " << to_string(hook) << " parameter " << i << ": max |diff| "
          << (half.grads[i] - expected[i]).abs().max().item<double>();
      rounding = std::max(rounding, (half.grads[i] - fp32.grads[i]).abs().max().item<double>());
    }
    // The rounding must be visible: otherwise the equality above proves nothing.
    EXPECT_GT(rounding, 0.0) << backend << " " << to_string(hook);
    if (rank == 0) {
      std::printf("[hook] %s world %d %s: all_reduce bytes %llu vs float32 %llu, max |hook - "
                  "fp32| %.3g\n",
                  backend.c_str(), size, to_string(hook),
                  static_cast<unsigned long long>(half.allreduce_bytes),
                  static_cast<unsigned long long>(fp32.allreduce_bytes), rounding);
    }
  });
}

TEST(CommHookExact, GlooFp16TwoRanks) { check_hook("gloo", 2, CommHook::kFp16); }
TEST(CommHookExact, GlooBf16TwoRanks) { check_hook("gloo", 2, CommHook::kBf16); }
TEST(CommHookExact, GlooFp16ThreeRanks) { check_hook("gloo", 3, CommHook::kFp16); }
TEST(CommHookExact, GlooBf16FourRanks) { check_hook("gloo", 4, CommHook::kBf16); }
TEST(CommHookExact, ShmFp16TwoRanks) { check_hook("shm", 2, CommHook::kFp16); }
TEST(CommHookExact, ShmBf16FourRanks) { check_hook("shm", 4, CommHook::kBf16); }

}  // namespace
}  // namespace tessera::runtime::ddp
