// ZeRO benchmark worker, run under `tessera run -n N zero_bench STAGE STEPS LAYERS EMBD
// BATCH [SEQ]`: trains the reference GPT (LAYERS blocks of width EMBD, heads of 64) with
// AdamW through the Engine at ZeRO stage STAGE (0: DDP) on fixed random tokens and
// prints, from rank 0, one line:
//   median_step_ms <x> peak_rss_mb <max over ranks> model_state_mb <rank 0> params <n>
// bench/zero_vs_pytorch.sh tabulates it next to PyTorch's ZeroRedundancyOptimizer;
// bench/zero_capacity.sh uses it to find the largest model each stage trains.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: zero_bench STAGE STEPS LAYERS EMBD BATCH [SEQ]\n");
    return 2;
  }
  const int stage = std::atoi(argv[1]);
  const int steps = std::atoi(argv[2]);
  const int warmup = steps > 3 ? 2 : 0;
  tessera::models::GPTConfig cfg;
  cfg.n_layer = std::atoi(argv[3]);
  cfg.n_embd = std::atoi(argv[4]);
  cfg.n_head = cfg.n_embd % 64 == 0 ? cfg.n_embd / 64 : 4;
  cfg.block_size = argc > 6 ? std::atoi(argv[6]) : 64;
  const int batch = std::atoi(argv[5]);
  at::set_num_threads(1);
  tessera::init();
  auto group = tessera::default_group();
  tessera::models::GPT model(cfg);
  // Buckets and persistence as DeepSpeed users set them for a model of this size;
  // ZERO_BENCH_OVERLAP=0 turns overlap_comm off.
  const char* overlap_env = std::getenv("ZERO_BENCH_OVERLAP");
  const std::string overlap = overlap_env && std::string(overlap_env) == "0" ? "false" : "true";
  auto config = tessera::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(batch) + R"(,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": )" + std::to_string(stage) + R"(,
              "reduce_bucket_size": 5000000, "overlap_comm": )" + overlap + R"(,
              "stage3_param_persistence_threshold": 100000}})");
  auto engine = tessera::initialize(model, config, group);
  auto gen = at::detail::createCPUGenerator(group->rank());
  auto tokens = at::randint(256, {batch, cfg.block_size + 1}, gen);
  auto x = tokens.narrow(1, 0, cfg.block_size), y = tokens.narrow(1, 1, cfg.block_size);
  std::vector<double> ms;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    engine.backward(model->loss(x, y));
    engine.step();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto mem = engine.memory_stats();
  auto rss = at::full({1}, static_cast<double>(mem.peak_rss_bytes), at::kDouble);
  group->all_reduce(rss, tessera::comm::ReduceOp::kMax)->wait();
  if (group->rank() == 0) {
    std::printf("median_step_ms %.1f peak_rss_mb %.0f model_state_mb %.1f params %lld world %d "
                "stage %d backend %s\n",
                ms[ms.size() / 2], rss.item<double>() / 1048576.0,
                mem.model_state_bytes() / 1048576.0,
                static_cast<long long>(model->num_parameters()), group->size(), stage,
                group->backend_name().c_str());
  }
  tessera::shutdown();
  return 0;
}
