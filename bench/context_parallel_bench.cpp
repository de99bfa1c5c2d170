// Context parallelism benchmark worker, run under `tessera run -n CP
// context_parallel_bench SEQ CP COMM LAYERS EMBD HEADS STEPS`: a GPT (LAYERS
// blocks of width EMBD, HEADS heads, vocabulary 256) trained with AdamW on one
// sequence of SEQ tokens per step by the ModelParallelEngine with
// context_parallel_size CP and cp_comm_type COMM (CP = 1: the sequence whole on
// one rank). Rank 0 prints one line:
//   seq <T> cp <n> comm <c> step_ms <median> peak_mb <max over ranks>
//   activation_mb <max over ranks> ring_ms <r> ring_wait_ms <w>
// peak_mb: the high-water mark of live tensor bytes during a step (counted by
// bench/counting_allocator.h); activation_mb: that mark minus the bytes live
// before the step (parameters, optimizer state): what the step's forward and
// backward hold. ring_ms / ring_wait_ms (p2p only): per step on rank 0, the
// time inside ring attention (forward and backward) and, within it, waiting
// for transfers the block computation did not hide — both read back from the
// rank's timeline file (core/trace.h), as a user would read them in Perfetto.
// bench/context_parallel.sh tabulates it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "tessera/comm/init.h"
#include "tessera/core/trace.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double max_over(const std::shared_ptr<tessera::comm::ProcessGroup>& g, double x) {
  auto t = at::full({1}, x, at::kDouble);
  g->all_reduce(t, tessera::comm::ReduceOp::kMax)->wait();
  return t.item<double>();
}

// Milliseconds of the timeline's spans named `ring attention*` and `ring wait`.
std::pair<double, double> ring_times(const std::string& file) {
  std::ifstream in(file);
  if (!in) return {0, 0};
  auto j = nlohmann::json::parse(in, nullptr, false);
  double ring = 0, wait = 0;
  const auto& events = j.is_object() && j.contains("traceEvents") ? j["traceEvents"] : j;
  for (const auto& e : events) {
    if (!e.is_object() || !e.contains("name") || !e.contains("dur")) continue;
    const std::string name = e["name"].get<std::string>();
    const double ms = e["dur"].get<double>() / 1000.0;
    if (name.rfind("ring attention", 0) == 0) ring += ms;
    if (name == "ring wait") wait += ms;
  }
  return {ring, wait};
}

}  // namespace

int main(int argc, char** argv) {
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  if (argc < 8) {
    std::fprintf(stderr, "usage: context_parallel_bench SEQ CP COMM LAYERS EMBD HEADS STEPS\n");
    return 2;
  }
  const int64_t seq = std::atoll(argv[1]);
  const int cp = std::atoi(argv[2]);
  const std::string comm = argv[3];
  const int64_t layers = std::atoll(argv[4]), embd = std::atoll(argv[5]), heads = std::atoll(argv[6]);
  const int steps = std::max(2, std::atoi(argv[7]));
  at::set_num_threads(1);
  tessera::init();
  auto world = tessera::default_group();

  tessera::models::GPTConfig gpt;
  gpt.vocab_size = 256;
  gpt.block_size = seq;
  gpt.n_layer = layers;
  gpt.n_embd = embd;
  gpt.n_head = heads;
  gpt.dropout = 0.0;
  gpt.bias = false;
  const std::string dir = "cp_bench_timeline";
  auto config = tessera::runtime::Config::from_string(
      "{\"context_parallel_size\": " + std::to_string(cp) + ", \"cp_comm_type\": \"" + comm +
      "\", \"train_batch_size\": " + std::to_string(world->size() / cp) +
      ", \"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", "
      "\"params\": {\"lr\": 0.001}}}");
  tessera::runtime::ModelParallelEngine engine(gpt, config, world);
  auto gen = at::detail::createCPUGenerator(1);
  auto tokens = at::randint(256, {1, seq + 1}, gen, at::kLong);
  auto x = tokens.narrow(1, 0, seq).contiguous(), y = tokens.narrow(1, 1, seq).contiguous();

  engine.train_step(x, y);  // optimizer state exists from here on
  std::vector<double> times;
  double activation = 0, peak = 0;
  tessera::trace::start(dir, world->rank(), world->size());
  for (int s = 1; s < steps; ++s) {
    const int64_t before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    engine.train_step(x, y);
    times.push_back(ms_since(t0));
    peak = std::max(peak, static_cast<double>(CountingAllocator::peak()));
    activation = std::max(activation, static_cast<double>(CountingAllocator::peak() - before));
  }
  const std::string mine = tessera::trace::finish(std::chrono::seconds(30));
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  peak = max_over(world, peak) / 1048576.0;
  activation = max_over(world, activation) / 1048576.0;
  if (world->rank() == 0) {
    auto [ring, wait] = ring_times(dir + "/timeline.rank0.json");
    const double per = static_cast<double>(steps - 1);
    std::printf("seq %lld cp %d comm %s step_ms %.1f peak_mb %.1f activation_mb %.1f ring_ms %.1f "
                "ring_wait_ms %.1f\n",
                static_cast<long long>(seq), cp, comm.c_str(), median, peak, activation,
                ring / per, wait / per);
  }
  (void)mine;
  return 0;
}
