// 3D layout benchmark worker, run under `tessera run -n 4 layout_bench TP PP V
// SCHEDULE LAYERS EMBD STEPS`: the reference GPT (LAYERS blocks of width EMBD,
// 64-token sequences) trained with AdamW on a global batch of 16 sequences per
// step (micro-batches of 2), by the ModelParallelEngine at tp TP x pp PP (dp the
// rest), or with TP = PP = 1 by the data-parallel Engine (DDP), the baseline.
// One thread per rank. Prints, from rank 0, one line:
// ZERO_STAGE 1 shards the optimizer state over dp (ZeRO-1).
//   layout <tpA x dpB x ppC> step_ms <median> rss_mb <r0,r1,...> bubble <measured> formula <f>
// step_ms is the median wall time of the steps after the first; rss_mb each
// rank's peak resident set; bubble (pipelines only) 1 - compute / wall time of
// the executor's own timings (the pipelined phase, without the optimizer step),
// summed over ranks. bench/model_parallel_layouts.sh
// tabulates it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/parallel/pipeline/pipeline_schedule.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "tessera/runtime/storage_bytes.h"

namespace {

constexpr int kGlobalBatch = 16;
constexpr int kMicro = 2;

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string fixed4(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: layout_bench TP PP V SCHEDULE LAYERS EMBD STEPS [ZERO_STAGE]\n");
    return 2;
  }
  using namespace tessera;
  const int tp = std::atoi(argv[1]), pp = std::atoi(argv[2]), v = std::atoi(argv[3]);
  const std::string schedule = argv[4];
  const int steps = std::atoi(argv[7]);
  const int zero_stage = argc > 8 ? std::atoi(argv[8]) : 0;
  models::GPTConfig gpt;
  gpt.n_layer = std::atoi(argv[5]);
  gpt.n_embd = std::atoi(argv[6]);
  gpt.n_head = gpt.n_embd >= 256 && gpt.n_embd % 64 == 0 ? gpt.n_embd / 64 : 4;
  gpt.block_size = 64;
  gpt.bias = false;
  at::set_num_threads(1);
  Config cfg = Config::from_string(
      R"({"train_batch_size": )" + std::to_string(kGlobalBatch) +
      R"(, "train_micro_batch_size_per_gpu": )" + std::to_string(kMicro) +
      R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}},
          "tensor_model_parallel_size": )" + std::to_string(tp) +
      R"(, "pipeline_model_parallel_size": )" + std::to_string(pp) +
      R"(, "virtual_pipeline_model_parallel_size": )" + std::to_string(v) +
      R"(, "pipeline_schedule": ")" + schedule +
      R"(", "zero_optimization": {"stage": )" + std::to_string(zero_stage) + "}}");
  tessera::init();
  auto world = default_group();
  auto gen = at::detail::createCPUGenerator(1);
  std::vector<double> ms;
  double busy = 0, total = 0;
  std::string layout;
  if (cfg.model_parallel.enabled()) {
    runtime::ModelParallelEngine engine(gpt, cfg, world);
    layout = engine.mesh().topology().describe();
    layout = layout.substr(0, layout.find(" ("));
    if (zero_stage > 0) layout += " ZeRO-" + std::to_string(zero_stage);
    const int64_t rows = kGlobalBatch / engine.data_parallel_size();
    for (int i = 0; i <= steps; ++i) {
      auto ids = at::randint(gpt.vocab_size, {rows, gpt.block_size}, gen);
      world->barrier()->wait();
      const auto t0 = std::chrono::steady_clock::now();
      engine.train_step(ids, ids);
      if (i == 0) continue;  // warm-up
      ms.push_back(ms_since(t0));
      busy += engine.last_step().busy_seconds;
      total += engine.last_step().pipeline_seconds();
    }
  } else {
    cfg.resolve_batch(world->size());
    models::GPT model(gpt);
    auto engine = tessera::initialize(model, cfg, world);
    layout = "dp" + std::to_string(world->size()) + " (DDP)";
    for (int i = 0; i <= steps; ++i) {
      world->barrier()->wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t m = 0; m < cfg.gradient_accumulation_steps; ++m) {
        auto ids = at::randint(gpt.vocab_size, {kMicro, gpt.block_size}, gen);
        engine.backward(model->loss(ids, ids));
        engine.step();
      }
      if (i > 0) ms.push_back(ms_since(t0));
    }
  }
  std::sort(ms.begin(), ms.end());
  // Every rank's peak RSS, and the executor's timings summed over ranks.
  auto rss = at::zeros({world->size()}, at::kDouble);
  rss[world->rank()] = static_cast<double>(runtime::peak_rss_bytes()) / 1048576.0;
  world->all_reduce(rss)->wait();
  auto bt = at::tensor({busy, total}, at::kDouble);
  world->all_reduce(bt)->wait();
  if (world->rank() == 0) {
    std::string per_rank;
    for (int r = 0; r < world->size(); ++r) {
      per_rank += (r ? "," : "") + std::to_string(static_cast<int>(rss[r].item<double>() + 0.5));
    }
    const bool pipeline = pp > 1;
    const int m = static_cast<int>(kGlobalBatch / kMicro / (world->size() / (tp * pp)));
    std::printf("layout %s step_ms %.1f rss_mb %s bubble %s formula %s\n", layout.c_str(),
                ms[ms.size() / 2], per_rank.c_str(),
                pipeline ? fixed4(1.0 - bt[0].item<double>() / bt[1].item<double>()).c_str() : "-",
                pipeline ? fixed4(parallel::bubble_formula(pp, m, v)).c_str() : "-");
  }
  tessera::shutdown();
  return 0;
}
