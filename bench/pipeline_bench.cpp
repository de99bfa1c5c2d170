// Pipeline benchmark worker, run under `tessera run -n P pipeline_bench SCHEDULE M V
// LAYERS EMBD STEPS`: the reference GPT (LAYERS blocks of width EMBD) cut into P
// stages (P * V chunks) and trained with AdamW by PipelineExecutor on M micro-batches
// of 2 x 64 tokens per step. Prints, from rank 0, one line:
//   schedule <s> p <P> m <M> v <V> bubble <measured> formula <(p-1)/(vm+p-1)>
//   step_ms <median> max_live <most micro-batch graphs alive> peak_rss_mb <max over ranks>
// The measured bubble is 1 - (compute time) / (wall time of the pipelined
// forward and backward phase, without the optimizer step) of the executor's own
// timings, summed over stages and over the steps after the first.
// bench/pipeline_bubble.sh tabulates it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/process_mesh.h"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: pipeline_bench SCHEDULE M V LAYERS EMBD STEPS\n");
    return 2;
  }
  using namespace tessera::parallel;
  const std::string schedule = argv[1];
  const int m = std::atoi(argv[2]), v = std::atoi(argv[3]), steps = std::atoi(argv[6]);
  tessera::models::GPTConfig cfg;
  cfg.n_layer = std::atoi(argv[4]);
  cfg.n_embd = std::atoi(argv[5]);
  cfg.n_head = cfg.n_embd % 64 == 0 ? cfg.n_embd / 64 : 4;
  cfg.block_size = 64;
  cfg.bias = false;
  at::set_num_threads(1);
  tessera::init();
  auto world = tessera::default_group();
  const int p = world->size();
  auto mesh = ProcessMesh::build(world, 1, p);
  GptPipelineStage stage(cfg, mesh, {v});
  torch::optim::AdamW opt(stage.parameters(), torch::optim::AdamWOptions(1e-4));
  stage.set_optimizer([&] { opt.step(); });
  PipelineExecutor exec(mesh.pp(), make_pipeline_schedule(schedule, p, m, v), v);
  auto gen = at::detail::createCPUGenerator(1);
  double busy = 0, total = 0;
  int live = 0;
  std::vector<double> ms;
  for (int i = 0; i <= steps; ++i) {
    auto ids = at::randint(cfg.vocab_size, {2 * m, cfg.block_size}, gen);
    stage.set_batch(ids, ids, m);
    opt.zero_grad();
    world->barrier()->wait();  // every stage starts the step together
    auto r = exec.run(stage);
    if (i == 0) continue;      // warm-up
    busy += r.busy_seconds;
    total += r.pipeline_seconds();
    live = std::max(live, r.max_live_activations);
    ms.push_back(r.total_seconds * 1000);
  }
  std::sort(ms.begin(), ms.end());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sums = at::tensor({busy, total, static_cast<double>(ru.ru_maxrss) / 1024.0}, at::kDouble);
  auto peak = sums.slice(0, 2, 3).clone();
  auto bt = sums.slice(0, 0, 2).clone();
  world->all_reduce(bt)->wait();
  world->all_reduce(peak, tessera::comm::ReduceOp::kMax)->wait();
  if (world->rank() == 0) {
    std::printf("schedule %s p %d m %d v %d bubble %.4f formula %.4f step_ms %.1f max_live %d "
                "peak_rss_mb %.0f\n",
                schedule.c_str(), p, m, v, 1.0 - bt[0].item<double>() / bt[1].item<double>(),
                bubble_formula(p, m, v), ms[ms.size() / 2], live, peak.item<double>());
  }
  tessera::shutdown();
  return 0;
}
