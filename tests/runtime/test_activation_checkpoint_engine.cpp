// Activation checkpointing under the data-parallel Engine (ranks as threads):
// the checkpointed GPT's parameter gradients reach DDP's and ZeRO stage 2's
// reducers through the same backward (their hooks fire), so 3 steps at 2 ranks
// end where the plain GPT ends, bit for bit up to float rounding.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <mutex>

#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"
#include "testing/thread_ranks.h"
#include "zero_test_gpt.h"

namespace tessera::runtime {
namespace {

std::map<std::string, at::Tensor> train(int stage, int64_t checkpoints) {
  std::map<std::string, at::Tensor> out;
  std::mutex mu;
  testing::run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = testing::make_group(rank, size, store, "gloo");
    auto c = testing::zero_test_gpt();
    c.activation_checkpoints = checkpoints;
    models::GPT gpt(c);
    auto engine = tessera::initialize(gpt, Config::from_string(R"({"train_batch_size": 8,
        "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
        "zero_optimization": {"stage": )" + std::to_string(stage) + "}}"), group);
    for (int64_t s = 0; s < 3; ++s) {
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(50 + s));
      auto t = at::randint(64, {8, 17}, gen, at::kLong).narrow(0, 4 * rank, 4);
      for (int m = 0; m < 2; ++m) {
        auto rows = t.narrow(0, 2 * m, 2);
        engine.backward(gpt->loss(rows.narrow(1, 0, 16), rows.narrow(1, 1, 16)));
        engine.step();
      }
    }
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& p : gpt->named_parameters()) out[p.key()] = p.value().detach().clone();
    }
  });
  return out;
}

TEST(ActivationCheckpointEngine, DdpAndZeroStage2EqualThePlainGpt) {
  for (int stage : {0, 2}) {
    const auto plain = train(stage, 0);
    const auto ckpt = train(stage, 3);
    double worst = 0;
    for (const auto& [name, t] : plain) worst = std::max(worst, (t - ckpt.at(name)).abs().max().item<double>());
    std::printf("[activation checkpointing] ZeRO stage %d, 2 ranks, 3 steps: max |param - plain| %.3g\n",
                stage, worst);
    EXPECT_LE(worst, 1e-6) << "stage " << stage;
  }
}

}  // namespace
}  // namespace tessera::runtime
