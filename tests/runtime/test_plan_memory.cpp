// `tessera plan`'s memory model against the engines: for every layout the tree
// runs (DDP, ZeRO 1-3 at 2 and 4 ranks, bf16, nvme offload, tensor and pipeline
// parallelism and ZeRO-1 over them, the MoE GPT with its experts whole and
// split over ep ranks), the predicted model state of rank 0
// (parameters + gradients + optimizer state) is within 10% of what
// memory_stats() counts from the tensors after a few steps. Ranks are threads
// over gloo.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/cli/plan/memory_model.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "testing/files.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

namespace plan = cli::plan;

constexpr int kMicro = 2;  // sequences per micro-batch

models::GPTConfig gpt() {
  models::GPTConfig c;
  c.vocab_size = 256;
  c.block_size = 32;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 64;
  c.bias = false;
  return c;
}

struct Case {
  std::string name;
  int world = 2;
  int tp = 1, pp = 1, zero = 0;
  bool bf16 = false;
  bool offload = false;
  int ep = 0;  // > 0: the MoE GPT (8 experts of width 128, top-2) at this ep
};

models::GPTConfig gpt(const Case& c) {
  models::GPTConfig g = gpt();
  if (c.ep > 0) {
    g.moe.num_experts = 8;
    g.moe.router_topk = 2;
    g.moe.expert_intermediate_size = 128;
  }
  if (c.bf16) g.compute_dtype = at::kBFloat16;
  return g;
}

std::string config_json(const Case& c, const std::string& nvme_dir) {
  const int dp = c.world / (c.tp * c.pp);
  std::string j = R"({"train_batch_size": )" + std::to_string(dp * kMicro * 2) +
                  R"(, "train_micro_batch_size_per_gpu": )" + std::to_string(kMicro) +
                  R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}})";
  if (c.tp > 1 || c.pp > 1 || c.ep > 1) {
    j += R"(, "tensor_model_parallel_size": )" + std::to_string(c.tp) +
         R"(, "pipeline_model_parallel_size": )" + std::to_string(c.pp) +
         R"(, "expert_model_parallel_size": )" + std::to_string(std::max(1, c.ep));
  }
  if (c.bf16) j += R"(, "bf16": {"enabled": true})";
  j += R"(, "zero_optimization": {"stage": )" + std::to_string(c.zero) +
       R"(, "stage3_param_persistence_threshold": 100)";
  if (c.offload) {
    j += R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + nvme_dir + R"("})";
  }
  return j + "}}";
}

// Rank 0's memory_stats() after two optimizer steps.
MemoryStats measure(const Case& c) {
  testing::TempDir dir("plan_memory");
  const Config config = Config::from_string(config_json(c, dir.path()));
  MemoryStats out;
  std::mutex mu;
  testing::run_ranks(c.world, [&](int rank, int size, auto store) {
    at::set_num_threads(1);
    auto group = testing::make_group(rank, size, store, "gloo", 60);
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(rank + 1));
    const models::GPTConfig g = gpt(c);
    MemoryStats m;
    if (c.tp > 1 || c.pp > 1 || c.ep > 1) {
      ModelParallelEngine engine(g, config, group);
      const int64_t rows = config.train_batch_size / engine.data_parallel_size();
      for (int s = 0; s < 2; ++s) {
        auto ids = at::randint(g.vocab_size, {rows, g.block_size}, gen);
        engine.train_step(ids, ids);
      }
      m = engine.memory_stats();
    } else {
      models::GPT model(g);
      Engine engine = tessera::initialize(model, config, group);
      for (int s = 0; s < 4; ++s) {  // 2 steps of 2 micro-batches
        auto ids = at::randint(g.vocab_size, {kMicro, g.block_size}, gen);
        engine.backward(model->loss(ids, ids));
        engine.step();
      }
      m = engine.memory_stats();
    }
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out = m;
    }
  });
  return out;
}

plan::MemoryEstimate predict(const Case& c) {
  plan::PlanProblem p;
  const models::GPTConfig g = gpt();
  p.model.name = "test";
  p.model.layers = g.n_layer;
  p.model.hidden = g.n_embd;
  p.model.heads = g.n_head;
  p.model.seq = g.block_size;
  p.model.vocab = g.vocab_size;
  p.model.bias = g.bias;
  if (c.ep > 0) {
    p.model.experts = gpt(c).moe.num_experts;
    p.model.topk = gpt(c).moe.router_topk;
    p.model.expert_hidden = gpt(c).moe.expert_intermediate_size;
  }
  p.cluster = plan::cluster_preset("host", c.world);
  p.precision = c.bf16 ? plan::Precision::kBf16 : plan::Precision::kFp32;
  p.persistence_threshold = 100;
  plan::Layout l;
  l.tp = c.tp;
  l.pp = c.pp;
  l.dp = c.world / (c.tp * c.pp);
  l.ep = std::max(1, c.ep);
  l.zero = c.zero;
  l.offload = c.offload;
  l.micro_batch = kMicro;
  l.micro_batches = 2;
  p.global_batch = l.dp * kMicro * 2;
  return plan::estimate_memory(p, l);
}

TEST(PlanMemory, PredictedModelStateMatchesMemoryStats) {
  std::vector<Case> cases = {
      {"dp2 DDP", 2},
      {"dp2 ZeRO-1", 2, 1, 1, 1},
      {"dp2 ZeRO-2", 2, 1, 1, 2},
      {"dp2 ZeRO-3", 2, 1, 1, 3},
      {"dp2 DDP bf16", 2, 1, 1, 0, true},
      {"dp2 ZeRO-2 bf16", 2, 1, 1, 2, true},
      {"dp2 ZeRO-3 offload", 2, 1, 1, 3, false, true},
      {"dp4 DDP", 4},
      {"dp4 ZeRO-1", 4, 1, 1, 1},
      {"dp4 ZeRO-2", 4, 1, 1, 2},
      {"dp4 ZeRO-3", 4, 1, 1, 3},
      {"tp2", 2, 2, 1},
      {"pp2", 2, 1, 2},
      {"tp2 dp2 ZeRO-1", 4, 2, 1, 1},
      {"pp2 dp2 ZeRO-1", 4, 1, 2, 1},
      {"MoE dp2 ZeRO-1", 2, 1, 1, 1, false, false, 1},
      {"MoE ep4", 4, 1, 1, 0, false, false, 4},
      {"MoE ep4 ZeRO-1", 4, 1, 1, 1, false, false, 4},
      {"MoE tp2 ep2", 4, 2, 1, 0, false, false, 2},
      {"MoE pp2 ep2 ZeRO-1", 4, 1, 2, 1, false, false, 2},
  };
  std::printf("[plan] %-20s %12s %12s %12s | %12s %12s %12s | %7s\n", "layout", "params",
              "grads", "optimizer", "pred params", "pred grads", "pred optim", "ratio");
  for (const Case& c : cases) {
    const MemoryStats m = measure(c);
    const plan::MemoryEstimate e = predict(c);
    const double ratio = e.model_states() / static_cast<double>(m.model_state_bytes());
    std::printf("[plan] %-20s %12lld %12lld %12lld | %12.0f %12.0f %12.0f | %7.3f\n",
                c.name.c_str(), static_cast<long long>(m.param_bytes),
                static_cast<long long>(m.grad_bytes), static_cast<long long>(m.optimizer_bytes),
                e.params, e.grads, e.optimizer, ratio);
    EXPECT_NEAR(ratio, 1.0, 0.10) << c.name;
  }
}

}  // namespace
}  // namespace tessera::runtime
