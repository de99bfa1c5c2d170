// Mixed-precision benchmark worker, run under `tessera run -n N precision_bench
// MODE STEPS LAYERS EMBD BATCH SEQ [STAGE]`: trains the reference GPT through the
// Engine on fixed random tokens, MODE one of
//   fp32        float32 everything
//   bf16, fp16  the config's bf16 / fp16 section: 16-bit activations computed in
//               float32 (models/low_precision.h), float32 master weights,
//               16-bit gradient communication; fp16 with dynamic loss scaling
//   torch_bf16  LibTorch's plain bfloat16: module.to(kBFloat16), every op and
//               GEMM in bfloat16 (the peer)
// at ZeRO stage STAGE (default 0). Prints, from rank 0, one line:
//   mode <m> median_step_ms <x> peak_rss_mb <rank 0> saved_mb <s> step_peak_mb <p>
//   model_state_mb <params + grads + optimizer> params <n> skipped <k>
// measured, not computed, by counting every CPU tensor allocation (a wrapper
// around LibTorch's CPU allocator): saved_mb is what is alive after the forward
// beyond what was alive before it (the activations autograd keeps for
// backward), step_peak_mb the most alive at once during forward and backward
// beyond that same baseline (saved activations plus backward's temporaries).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/storage_bytes.h"
#include "counting_allocator.h"

namespace {

std::string precision_section(const std::string& mode) {
  if (mode == "bf16") return R"(, "bf16": {"enabled": true})";
  if (mode == "fp16") return R"(, "fp16": {"enabled": true})";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: precision_bench fp32|bf16|fp16|torch_bf16 STEPS LAYERS EMBD "
                         "BATCH SEQ [STAGE]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int steps = std::atoi(argv[2]);
  tessera::models::GPTConfig cfg;
  cfg.n_layer = std::atoi(argv[3]);
  cfg.n_embd = std::atoi(argv[4]);
  cfg.n_head = cfg.n_embd % 64 == 0 ? cfg.n_embd / 64 : 4;
  const int batch = std::atoi(argv[5]);
  cfg.block_size = std::atoi(argv[6]);
  const int stage = argc > 7 ? std::atoi(argv[7]) : 0;
  cfg.bias = false;
  if (mode == "bf16") cfg.compute_dtype = at::kBFloat16;
  if (mode == "fp16") cfg.compute_dtype = at::kHalf;
  at::set_num_threads(1);
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  tessera::init();
  auto group = tessera::default_group();
  tessera::models::GPT model(cfg);
  if (mode == "torch_bf16") model->to(at::kBFloat16);
  auto config = tessera::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(batch) + R"(,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": )" + std::to_string(stage) + "}" +
      precision_section(mode) + "}");
  auto engine = tessera::initialize(model, config, group);
  auto gen = at::detail::createCPUGenerator(group->rank());
  auto tokens = at::randint(256, {batch, cfg.block_size + 1}, gen);
  auto x = tokens.narrow(1, 0, cfg.block_size), y = tokens.narrow(1, 1, cfg.block_size);
  std::vector<double> ms;
  int64_t saved = 0, step_peak = 0;
  for (int i = 0; i <= steps; ++i) {
    const int64_t before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor loss = model->loss(x, y).to(at::kFloat);
    saved = std::max(saved, CountingAllocator::live() - before);
    engine.backward(loss);
    loss = at::Tensor();
    step_peak = std::max(step_peak, CountingAllocator::peak() - before);
    engine.step();
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto mem = engine.memory_stats();
  const double peak = static_cast<double>(mem.peak_rss_bytes) / 1048576.0;
  if (group->rank() == 0) {
    std::printf("mode %s median_step_ms %.1f peak_rss_mb %.0f saved_mb %.1f step_peak_mb %.1f "
                "model_state_mb %.1f params %lld skipped %lld\n",
                mode.c_str(), ms[ms.size() / 2], peak, saved / 1048576.0, step_peak / 1048576.0,
                mem.model_state_bytes() / 1048576.0,
                static_cast<long long>(model->num_parameters()),
                static_cast<long long>(engine.skipped_steps()));
  }
  tessera::shutdown();
  return 0;
}
