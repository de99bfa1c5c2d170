// Step-time benchmark of Tessera's DistributedDataParallel on the reference GPT,
// run in every worker (`tessera run -n 2 ddp_vs_pytorch STEPS [LAYERS BATCH [composed]]`)
// or alone (one independent single-process run). Prints one line, "median_step_ms <x>",
// from rank 0; bench/ddp_vs_pytorch.sh puts it next to PyTorch DDP's. "composed" runs
// the GPT's attention as the LibTorch composition instead of the fused core.
//
// Same model and per-rank batch as bench/ddp_pytorch_peer.py; one intra-op
// thread per rank; fixed random tokens (data loading is not measured).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 4;
  const int batch = argc > 3 ? std::atoi(argv[3]) : 8;
  const bool composed = argc > 4 && std::string(argv[4]) == "composed";
  const int warmup = 5;
  at::set_num_threads(1);
  tessera::init();
  auto group = tessera::default_group();
  tessera::models::GPTConfig cfg;
  cfg.n_layer = layers;
  cfg.n_head = 4;
  cfg.n_embd = 128;
  cfg.block_size = 64;
  cfg.fused_attention = !composed;
  tessera::models::GPT model(cfg);
  std::unique_ptr<tessera::DistributedDataParallel> ddp;
  if (group->size() > 1) ddp = std::make_unique<tessera::DistributedDataParallel>(model.ptr(), group);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
  auto gen = at::detail::createCPUGenerator(group->rank());
  auto x = at::randint(256, {batch, 64}, gen);
  auto y = at::randint(256, {batch, 64}, gen);
  std::vector<double> ms, wait_ms;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    model->loss(x, y).backward();
    opt.step();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (ddp) {
        // Time backward spent waiting for the all-reduces after autograd ended.
        const auto& t = ddp->reducer().last_timings();
        wait_ms.push_back(std::chrono::duration<double, std::milli>(t.reduced - t.backward_end).count());
      }
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(wait_ms.begin(), wait_ms.end());
  if (group->rank() == 0) {
    std::printf("median_step_ms %.2f params %lld world %d backend %s median_allreduce_wait_ms %.2f\n",
                ms[ms.size() / 2], static_cast<long long>(model->num_parameters()), group->size(),
                group->backend_name().c_str(), wait_ms.empty() ? 0.0 : wait_ms[wait_ms.size() / 2]);
  }
  ddp.reset();
  tessera::shutdown();
  return 0;
}
