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
#include "tessera/parallel/pipeline/layer_pipeline_stage.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "testing/small_gpt.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using testing::make_group;
using testing::run_ranks;

models::GPTConfig small_gpt() {
  models::GPTConfig c = testing::small_gpt(/*n_layer=*/4);
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

// tp > 1: each stage's blocks are also split over a tensor-parallel group
// (sequence_parallel: the activations between stages too).
void check_pipeline(int p, const std::string& schedule, int v, int tp = 1, bool sp = false,
                    bool balanced = false) {
  std::vector<double> want_losses;
  const auto want = reference(&want_losses);
  run_ranks(p * tp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = make_group(rank, size, store, "gloo");
    auto mesh = ProcessMesh::build(world, tp, p);
    GptPipelineStage stage(small_gpt(), mesh, {v, sp, 0, balanced});
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
      if (schedule == "1f1b") {
        EXPECT_LE(r.max_live_activations, p);
      }
      if (schedule == "gpipe") {
        EXPECT_EQ(r.max_live_activations, kMicro);
      }
    }
    double worst = 0;
    for (const auto& [name, t] : stage.named_parameters()) {
      const auto mine = dense_slice(want.at(name), dense_slice_of(name), mesh.coord().tp, tp);
      worst = std::max(worst, (t - mine).abs().max().item<double>());
    }
    std::printf("[pipeline] %s p %d v %d tp %d%s rank %d: %zu tensors, max |param - reference| "
                "%.3g\n", schedule.c_str(), p, v, tp, sp ? " sp" : "", rank,
                stage.named_parameters().size(), worst);
    // The stages run the tensor-parallel blocks (their own matmuls and the
    // vocab-parallel loss), so gradients agree with the dense GPT's to float
    // rounding (1e-7), and AdamW at lr 1e-2 turns that into up to 1e-4 on the
    // query/key weights, whose gradients at initialization are near its eps
    // (2.2e-4 measured with LibTorch 2.11's MKL GEMMs).
    EXPECT_LE(worst, 3e-4) << schedule << " p " << p << " v " << v << " tp " << tp;
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

TEST(PipelineParallel, WithTensorParallelStagesEqualsOneProcess) {
  check_pipeline(2, "1f1b", 1, /*tp=*/2);
  check_pipeline(2, "1f1b", 1, /*tp=*/2, /*sp=*/true);
  check_pipeline(2, "interleaved", 2, /*tp=*/2);
}

// Any model as a list of layers: tanh(Linear) layers whose weights depend only
// on their index, through LayerPipelineStage, against the whole stack in one
// process with the same micro-batch accumulation.
class TanhLinearImpl : public torch::nn::Module {
 public:
  explicit TanhLinearImpl(int64_t index) {
    fc = register_module("fc", torch::nn::Linear(16, 16));
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + index));
    torch::NoGradGuard no_grad;
    fc->weight.normal_(0.0, 0.4, gen);
    fc->bias.normal_(0.0, 0.1, gen);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(fc(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TanhLinear);

TEST(PipelineParallel, AnyListOfLayersEqualsOneProcess) {
  constexpr int kLayers = 6;
  auto mse = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); };
  auto gen = at::detail::createCPUGenerator(8);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int s = 0; s < kSteps; ++s) {
    batches.emplace_back(torch::randn({kMicro * kRows, 16}, gen), torch::randn({kMicro * kRows, 16}, gen));
  }
  std::map<std::string, torch::Tensor> want;
  {
    std::vector<TanhLinear> layers;
    std::vector<torch::Tensor> params;
    for (int i = 0; i < kLayers; ++i) {
      layers.emplace_back(i);
      for (auto& p : layers.back()->parameters()) params.push_back(p);
    }
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-2));
    for (auto& [x, y] : batches) {
      opt.zero_grad();
      for (int m = 0; m < kMicro; ++m) {
        auto h = x.chunk(kMicro, 0)[m];
        for (auto& l : layers) h = l(h);
        (mse(h, y.chunk(kMicro, 0)[m]) / kMicro).backward();
      }
      opt.step();
    }
    for (int i = 0; i < kLayers; ++i) {
      for (auto& p : layers[i]->named_parameters()) want[std::to_string(i) + "." + p.key()] = p.value().detach().clone();
    }
  }
  for (int p : {2, 3}) {
    run_ranks(p, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      auto world = make_group(rank, size, store, "gloo");
      auto mesh = ProcessMesh::build(world, 1, p);
      LayerPipelineStage stage(
          kLayers, [](int64_t i) { return torch::nn::AnyModule(TanhLinear(i)); }, mse, {16}, mesh);
      torch::optim::AdamW opt(stage.parameters(), torch::optim::AdamWOptions(1e-2));
      stage.set_optimizer([&] { opt.step(); });
      PipelineExecutor exec(mesh.pp(), make_pipeline_schedule("1f1b", p, kMicro, 1), 1);
      for (auto& [x, y] : batches) {
        stage.set_batch(x, y, kMicro);
        opt.zero_grad();
        exec.run(stage);
      }
      double worst = 0;
      for (const auto& [name, t] : stage.named_parameters()) {
        worst = std::max(worst, (t - want.at(name)).abs().max().item<double>());
      }
      EXPECT_FALSE(stage.named_parameters().empty());
      EXPECT_LE(worst, 1e-6) << "p " << p << " rank " << rank;
    });
  }
}

TEST(PipelineParallel, StagesBalancedByParametersEqualOneProcess) {
  check_pipeline(2, "1f1b", 1, 1, false, /*balanced=*/true);
}

TEST(PipelineParallel, BalancedSplitsEvenTheParameterCounts) {
  // Blocks of 10 with an embedding of 25 on the first chunk and 15 on the last.
  // The first chunk holds at least 35, which is the optimum.
  const std::vector<int64_t> cost(8, 10);
  const auto s = balanced_split(cost, 25, 15, 4);
  ASSERT_EQ(s.size(), 4u);
  int64_t worst = 0, begin = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    EXPECT_EQ(s[k].first, begin);
    EXPECT_GT(s[k].second, s[k].first);
    worst = std::max(worst, 10 * (s[k].second - s[k].first) + (k == 0 ? 25 : 0) + (k == 3 ? 15 : 0));
    begin = s[k].second;
  }
  EXPECT_EQ(begin, 8);
  EXPECT_EQ(worst, 35);
  EXPECT_EQ(balanced_split(cost, 0, 0, 4),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_THROW(balanced_split(cost, 0, 0, 9), ConfigError);
  // A GPT whose vocabulary outweighs a block: the end stages get fewer blocks.
  models::GPTConfig c;
  c.vocab_size = 50304;
  c.n_embd = 256;
  c.n_head = 4;
  c.n_layer = 12;
  const auto split = split_layers_by_parameters(c, 4, 1);
  ASSERT_EQ(split.size(), 4u);
  EXPECT_LT(split.front().second - split.front().first, 3);
  EXPECT_LT(split.back().second - split.back().first, 3);
  EXPECT_EQ(split.back().second, 12);
}

TEST(PipelineParallel, ForwardOnlyEvaluationGivesTheReferenceLoss) {
  const auto c = small_gpt();
  auto gen = at::detail::createCPUGenerator(4);
  auto [ids, targets] = batch(gen, c);
  models::GPT gpt(c);
  double want = 0;
  for (int i = 0; i < kMicro; ++i) {
    want += gpt->loss(ids.chunk(kMicro, 0)[i], targets.chunk(kMicro, 0)[i]).item<double>() / kMicro;
  }
  run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = make_group(rank, size, store, "gloo");
    auto mesh = ProcessMesh::build(world, 2, 2);
    GptPipelineStage stage(c, mesh, {2});
    PipelineExecutor exec(mesh.pp(), make_pipeline_schedule("interleaved", 2, kMicro, 2), 2);
    stage.set_batch(ids, targets, kMicro);
    const auto r = exec.evaluate(stage, kMicro);
    if (r.has_loss) {
      EXPECT_NEAR(r.loss, want, 1e-5);
    }
    EXPECT_EQ(r.has_loss, mesh.last_stage());
  });
}

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
