// Activation checkpointing benchmark worker: `activation_checkpointing
// CHECKPOINTS LAYERS EMBD BATCH SEQ STEPS` trains the reference GPT (LAYERS
// blocks of width EMBD) with AdamW on random BATCH x SEQ token batches, its
// blocks in CHECKPOINTS recomputed segments (0: plain), one thread. Prints one
// line:
//   checkpoints <n> step_ms <median> peak_rss_mb <peak> activation_mb <peak - before>
// where `before` is the resident set after the model, its gradients and the
// optimizer state exist (measured after a first step), so activation_mb is
// what the forward and backward add on top. bench/activation_checkpointing.sh
// runs it plain and checkpointed.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/runtime/storage_bytes.h"

namespace {

double current_rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: activation_checkpointing CHECKPOINTS LAYERS EMBD BATCH SEQ STEPS\n");
    return 2;
  }
  at::set_num_threads(1);
  tessera::models::GPTConfig c;
  c.activation_checkpoints = std::atoi(argv[1]);
  c.n_layer = std::atoi(argv[2]);
  c.n_embd = std::atoi(argv[3]);
  c.n_head = c.n_embd / 64 > 0 ? c.n_embd / 64 : 1;
  const int batch = std::atoi(argv[4]);
  c.block_size = std::atoi(argv[5]);
  const int steps = std::atoi(argv[6]);
  c.bias = false;
  tessera::models::GPT gpt(c);
  torch::optim::AdamW opt(gpt->parameters(), torch::optim::AdamWOptions(1e-4));
  auto gen = at::detail::createCPUGenerator(1);
  std::vector<double> ms;
  double before = 0;
  for (int i = 0; i <= steps; ++i) {
    auto t = at::randint(c.vocab_size, {batch, c.block_size + 1}, gen);
    if (i == 1) before = current_rss_mb();  // model, gradients and Adam state all exist
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    gpt->loss(t.narrow(1, 0, c.block_size), t.narrow(1, 1, c.block_size)).backward();
    opt.step();
    if (i > 0) {
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const double peak = static_cast<double>(tessera::runtime::peak_rss_bytes()) / 1048576.0;
  std::printf("checkpoints %lld step_ms %.1f peak_rss_mb %.0f activation_mb %.0f\n",
              static_cast<long long>(c.activation_checkpoints), ms[ms.size() / 2], peak, peak - before);
  return 0;
}
