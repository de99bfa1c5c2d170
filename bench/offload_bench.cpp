// nvme offload benchmark worker, run under `tessera run -n N offload_bench OFFLOAD STAGE
// STEPS LAYERS EMBD BATCH SEQ [VOCAB]` with NVME_PATH set for the offloaded runs:
// trains the reference GPT (LAYERS blocks of width EMBD, heads of 64) with AdamW
// through the Engine at ZeRO stage STAGE on fixed random tokens, OFFLOAD one of
//   none       optimizer state in memory (the peer)
//   optimizer  offload_optimizer.device nvme: the optimizer state in swap files
//   all        and offload_param.device nvme: stage-3 parameter shards too
// OFFLOAD_BUFFER_SIZE and OFFLOAD_PARAM_BUFFERS set the offload's buffers (see
// offload_sections). Prints, from rank 0, one line of measured figures (rank
// 0's unless noted):
//   median_step_ms      median over the steps after the first (all when STEPS < 3)
//   optimizer_step_ms   the same for engine.step() alone (clipping, optimizer, zero_grad)
//   peak_rss_mb         max over ranks of the process's peak resident set
//   optimizer_mb        what the optimizer holds between steps: its in-memory state
//                       plus the offload's I/O buffers
//   step_transient_mb   the most LibTorch tensor memory alive during engine.step()
//                       beyond what was alive before it (the optimizer's temporaries)
//   resident_vs_buffers (optimizer_mb + step_transient_mb) / buffers, offloaded runs
//   read_gb, written_gb disk traffic per step; files_gb the swap files; params
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "tessera/comm/init.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// OFFLOAD_BUFFER_SIZE: elements per optimizer piece (default 1 M: buffers far
// smaller than the state); OFFLOAD_PARAM_BUFFERS: offload_param.buffer_count.
std::string offload_sections(const std::string& offload) {
  if (offload == "none") return "";
  const std::string p = env_or("NVME_PATH", "/tmp");
  std::string s = R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + p +
                  R"(", "buffer_size": )" + env_or("OFFLOAD_BUFFER_SIZE", "1048576") + "}";
  if (offload == "all") {
    s += R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + p + R"(", "buffer_count": )" +
         env_or("OFFLOAD_PARAM_BUFFERS", "5") + "}";
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: offload_bench none|optimizer|all STAGE STEPS LAYERS EMBD BATCH "
                         "SEQ [VOCAB]   (NVME_PATH: the swap directory)\n");
    return 2;
  }
  const std::string offload = argv[1];
  const int stage = std::atoi(argv[2]);
  const int steps = std::atoi(argv[3]);
  tessera::models::GPTConfig cfg;
  cfg.n_layer = std::atoi(argv[4]);
  cfg.n_embd = std::atoi(argv[5]);
  cfg.n_head = cfg.n_embd % 64 == 0 ? cfg.n_embd / 64 : 4;
  const int batch = std::atoi(argv[6]);
  cfg.block_size = std::atoi(argv[7]);
  if (argc > 8) cfg.vocab_size = std::atoi(argv[8]);
  cfg.bias = false;
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  tessera::init();
  auto group = tessera::default_group();
  tessera::models::GPT model(cfg);
  auto config = tessera::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(batch) + R"(,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
          "zero_optimization": {"stage": )" + std::to_string(stage) + R"(,
              "reduce_bucket_size": 50000000, "stage3_param_persistence_threshold": 100000)" +
      offload_sections(offload) + "}}");
  auto engine = tessera::initialize(model, config, group);
  auto gen = at::detail::createCPUGenerator(group->rank());
  auto tokens = at::randint(cfg.vocab_size, {batch, cfg.block_size + 1}, gen);
  auto x = tokens.narrow(1, 0, cfg.block_size), y = tokens.narrow(1, 1, cfg.block_size);
  std::vector<double> ms, step_ms;
  int64_t transient = 0;
  tessera::runtime::offload::OffloadStats io_before;
  for (int i = 0; i < steps; ++i) {
    if (i == 1 && engine.offload()) io_before = engine.offload()->stats();
    const auto t0 = std::chrono::steady_clock::now();
    engine.backward(model->loss(x, y));
    const int64_t before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    const auto s0 = std::chrono::steady_clock::now();
    engine.step();
    const auto s1 = std::chrono::steady_clock::now();
    // The first step creates the optimizer state; the later ones show the steady state.
    if (i > 0 || steps == 1) transient = std::max(transient, CountingAllocator::peak() - before);
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0 || steps < 3) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      step_ms.push_back(std::chrono::duration<double, std::milli>(s1 - s0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(step_ms.begin(), step_ms.end());
  const auto mem = engine.memory_stats();
  auto rss = at::full({1}, static_cast<double>(mem.peak_rss_bytes), at::kDouble);
  group->all_reduce(rss, tessera::comm::ReduceOp::kMax)->wait();
  if (group->rank() == 0) {
    const double mb = 1048576.0, gb = 1e9;
    const double optimizer = static_cast<double>(mem.optimizer_bytes + mem.offload_buffer_bytes);
    double read = 0, written = 0, files = 0, ratio = 0;
    if (engine.offload()) {
      const auto s = engine.offload()->stats();
      const int measured = std::max(1, steps - 1);
      read = static_cast<double>(s.read_bytes - io_before.read_bytes) / measured;
      written = static_cast<double>(s.written_bytes - io_before.written_bytes) / measured;
      files = static_cast<double>(s.file_bytes);
      ratio = (optimizer + static_cast<double>(transient)) / static_cast<double>(s.buffer_bytes);
    }
    std::printf("offload %s stage %d world %d median_step_ms %.1f optimizer_step_ms %.1f peak_rss_mb %.0f optimizer_mb %.1f "
                "step_transient_mb %.1f resident_vs_buffers %.3f param_mb %.1f grad_mb %.1f "
                "read_gb %.2f written_gb %.2f files_gb %.2f params %lld\n",
                offload.c_str(), stage, group->size(), ms[ms.size() / 2], step_ms[step_ms.size() / 2],
                rss.item<double>() / mb,
                optimizer / mb, static_cast<double>(transient) / mb, ratio,
                static_cast<double>(mem.param_bytes) / mb, static_cast<double>(mem.grad_bytes) / mb,
                read / gb, written / gb, files / gb,
                static_cast<long long>(model->num_parameters()));
  }
  tessera::shutdown();
  return 0;
}
