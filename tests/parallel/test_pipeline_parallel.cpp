// Pipeline parallelism end to end with ranks as threads over gloo: the GPT cut
// into stages and run by PipelineExecutor under GPipe, 1F1B and interleaved
// 1F1B ends with the same parameters as one process training the whole GPT on
// the same batches with gradient accumulation over the same micro-batches.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/process_mesh.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using testing::make_group;
using testing::run_ranks;

models::GPTConfig small_gpt() {
  models::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.bias = false;
  c.seed = 9;
  return c;
}

constexpr int kSteps = 4;
constexpr int kMicro = 4;   // micro-batches per step
constexpr int kRows = 2;    // sequences per micro-batch

std::pair<torch::Tensor, torch::Tensor> batch(at::Generator& gen, const models::GPTConfig& c) {
  auto ids = torch::randint(c.vocab_size, {kMicro * kRows, c.block_size}, gen);
  auto targets = torch::randint(c.vocab_size, {kMicro * kRows, c.block_size}, gen);
  return {ids, targets};
}

// The single-process reference: the whole GPT, accumulation over kMicro.
std::map<std::string, torch::Tensor> reference(std::vector<double>* losses) {
  const auto c = small_gpt();
  models::GPT gpt(c);
  torch::optim::AdamW opt(gpt->parameters(), torch::optim::AdamWOptions(1e-2));
  auto gen = at::detail::createCPUGenerator(4);
  for (int step = 0; step < kSteps; ++step) {
    auto [ids, targets] = batch(gen, c);
    opt.zero_grad();
    double sum = 0;
    for (int i = 0; i < kMicro; ++i) {
      auto loss = gpt->loss(ids.chunk(kMicro, 0)[i], targets.chunk(kMicro, 0)[i]);
      sum += loss.item<double>();
      (loss / kMicro).backward();
    }
    losses->push_back(sum / kMicro);
    opt.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : gpt->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

void check_pipeline(int p, const std::string& schedule, int v) {
  std::vector<double> want_losses;
  const auto want = reference(&want_losses);
  run_ranks(p, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = make_group(rank, size, store, "gloo");
    auto mesh = ProcessMesh::build(world, 1, p);
    GptPipelineStage stage(small_gpt(), p, v, mesh.coord().pp, mesh.embedding());
    torch::optim::AdamW opt(stage.parameters(), torch::optim::AdamWOptions(1e-2));
    stage.set_optimizer([&] { opt.step(); });
    PipelineExecutor exec(mesh.pp(), make_pipeline_schedule(schedule, p, kMicro, v), v);
    auto gen = at::detail::createCPUGenerator(4);
    for (int step = 0; step < kSteps; ++step) {
      auto [ids, targets] = batch(gen, small_gpt());
      stage.set_batch(ids, targets, kMicro);
      opt.zero_grad();
      auto r = exec.run(stage);
      if (r.has_loss) {
        EXPECT_NEAR(r.loss, want_losses[static_cast<size_t>(step)], 1e-5)
            << schedule << " p " << p << " step " << step;
      }
      if (schedule == "1f1b") EXPECT_LE(r.max_live_activations, p);
      if (schedule == "gpipe") EXPECT_EQ(r.max_live_activations, kMicro);
    }
    double worst = 0;
    for (const auto& [name, t] : stage.named_parameters()) {
      worst = std::max(worst, (t - want.at(name)).abs().max().item<double>());
    }
    std::printf("[pipeline] %s p %d v %d stage %d: %zu tensors, max |param - reference| %.3g\n",
                schedule.c_str(), p, v, rank, stage.named_parameters().size(), worst);
    EXPECT_LE(worst, 1e-5) << schedule << " p " << p << " v " << v;
  });
}

TEST(PipelineParallel, GpipeEqualsOneProcess) {
  check_pipeline(2, "gpipe", 1);
  check_pipeline(4, "gpipe", 1);
}

TEST(PipelineParallel, OneFOneBEqualsOneProcess) {
  check_pipeline(2, "1f1b", 1);
  check_pipeline(4, "1f1b", 1);
}

TEST(PipelineParallel, InterleavedEqualsOneProcess) { check_pipeline(2, "interleaved", 2); }

TEST(PipelineParallel, MoreStagesThanLayersIsAConfigError) {
  try {
    split_layers(4, 4, 2);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("8 pipeline chunks but the model has only 4 layers"),
              std::string::npos) << e.what();
  }
  const auto s = split_layers(10, 4, 1);
  EXPECT_EQ(s, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
}

}  // namespace
}  // namespace tessera::parallel
