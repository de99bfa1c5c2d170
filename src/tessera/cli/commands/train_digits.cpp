#include "tessera/cli/commands/train_digits.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/cli/commands/loss_plot.h"
#include "tessera/cli/commands/train_monitor.h"
#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/data/digits_dataset.h"
#include "tessera/data/distributed_sampler.h"
#include "tessera/models/resnet.h"
#include "tessera/parallel/sync_batch_norm.h"
#include "tessera/runtime/engine.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using runtime::check_known_keys;
using runtime::read_bool;
using runtime::read_positive_int;
using runtime::read_string;

struct DigitsSettings {
  models::ResNetConfig model;
  bool sync_batchnorm = true;
  std::string data_path = data::kDebianDigitsPath;
  int64_t steps = 600;
  std::string out_dir = "tessera_out_digits";
  std::string metrics = "metrics.jsonl";
};

DigitsSettings digits_settings(const runtime::Config& cfg) {
  DigitsSettings s;
  const auto& m = cfg.model;
  check_known_keys(m, {"type", "widths", "blocks_per_stage", "sync_batchnorm", "seed"}, "model");
  if (m.contains("widths")) {
    TS_CHECK_T(ConfigError, m["widths"].is_array(), "config key 'model.widths' must be an array "
               "of stage widths, e.g. [16, 32, 64]");
    s.model.widths.clear();
    for (const auto& w : m["widths"]) {
      TS_CHECK_T(ConfigError, w.is_number_integer(), "config key 'model.widths' holds ", w.dump(),
                 ": widths are positive integers");
      s.model.widths.push_back(w.get<int64_t>());
    }
  }
  s.model.blocks_per_stage = read_positive_int(m, "blocks_per_stage", "model", s.model.blocks_per_stage);
  s.model.seed = static_cast<uint64_t>(runtime::read_int(m, "seed", "model", static_cast<int64_t>(cfg.seed)));
  s.model.validate();
  s.sync_batchnorm = read_bool(m, "sync_batchnorm", "model", s.sync_batchnorm);
  check_known_keys(cfg.data, {"path"}, "data");
  s.data_path = read_string(cfg.data, "path", "data", s.data_path);
  check_known_keys(cfg.train, {"steps", "out_dir", "metrics"}, "train");
  s.steps = read_positive_int(cfg.train, "steps", "train", s.steps);
  s.out_dir = read_string(cfg.train, "out_dir", "train", s.out_dir);
  s.metrics = read_string(cfg.train, "metrics", "train", s.metrics);
  return s;
}

// The next `n` training images of this rank, starting new epochs as needed.
std::pair<at::Tensor, at::Tensor> next_batch(data::DistributedSampler& sampler,
                                             const data::DigitsDataset& train, int64_t n) {
  std::vector<int64_t> idx;
  while (static_cast<int64_t>(idx.size()) < n) {
    auto more = sampler.next_batch(n - static_cast<int64_t>(idx.size()));
    if (more.empty()) {
      sampler.set_epoch(sampler.epoch() + 1);
      continue;
    }
    idx.insert(idx.end(), more.begin(), more.end());
  }
  const auto index = at::tensor(idx, at::kLong);
  return {train.images().index_select(0, index), train.labels().index_select(0, index)};
}

// Correct predictions over the test images (each rank takes every world-th one).
double test_accuracy(models::ResNet& model, const data::DigitsDataset& test,
                     comm::ProcessGroup& group) {
  at::NoGradGuard no_grad;
  model->eval();
  const auto mine = at::arange(group.rank(), test.size(), group.size(), at::kLong);
  const auto logits = model->forward(test.images().index_select(0, mine));
  const auto correct = logits.argmax(1).eq(test.labels().index_select(0, mine)).sum();
  auto counts = at::stack({correct.to(at::kDouble), at::scalar_tensor(static_cast<double>(mine.numel()), at::kDouble)});
  group.all_reduce(counts, comm::ReduceOp::kSum)->wait();
  model->train();
  return counts[0].item<double>() / counts[1].item<double>();
}

// The training itself, in the job init() joined; the engine goes before shutdown().
void run(const runtime::Config& cfg, const DigitsSettings& s, const data::DigitsDataset& train,
         const data::DigitsDataset& test) {
  auto group = default_group();
  const bool rank0 = group->rank() == 0;
  models::ResNet model(s.model);
  if (s.sync_batchnorm) nn::convert_sync_batchnorm(*model, group);
  Engine engine = initialize(model, cfg, group);
  const runtime::Config& c = engine.config();
  data::DistributedSampler sampler(train.size(), group->size(), group->rank(),
                                   data::DistributedSamplerOptions{true, cfg.seed, false});
  if (rank0) {
    fs::create_directories(s.out_dir);
    std::printf("tessera train --task digits: ResNet %lld params, %d ranks (%s), batch %lld "
                "(micro %lld x accumulation %lld x %d), %lld steps, %lld train / %lld test images\n",
                static_cast<long long>(model->num_parameters()), group->size(),
                s.sync_batchnorm ? "SyncBatchNorm" : "BatchNorm per rank",
                static_cast<long long>(c.train_batch_size),
                static_cast<long long>(c.train_micro_batch_size_per_gpu),
                static_cast<long long>(c.gradient_accumulation_steps), group->size(),
                static_cast<long long>(s.steps), static_cast<long long>(train.size()),
                static_cast<long long>(test.size()));
    std::fflush(stdout);
  }
  std::ofstream metrics;
  if (rank0) metrics.open(s.out_dir + "/" + s.metrics, std::ios::app);
  TrainMonitor monitor(c, s.out_dir, group->rank());  // TensorBoard, CSV (train_monitor.h)
  auto window = std::chrono::steady_clock::now();
  double loss_sum = 0;
  int64_t loss_count = 0;
  while (engine.global_steps() < s.steps) {
    const auto comm_before = engine.comm_stats();
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      auto [x, y] = next_batch(sampler, train, c.train_micro_batch_size_per_gpu);
      auto loss = model->loss(x, y);
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
      ++loss_count;
    }
    const int64_t step = engine.global_steps();
    const auto sent = comm::CommStats::difference(engine.comm_stats(), comm_before).total_bytes();
    if (step % c.steps_per_print == 0 || step == s.steps) {
      auto mean = at::full({1}, loss_sum / static_cast<double>(loss_count), at::kDouble);
      group->all_reduce(mean, comm::ReduceOp::kAvg)->wait();
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - window).count();
      const double images = static_cast<double>(loss_count * c.train_micro_batch_size_per_gpu *
                                                group->size());
      if (rank0) {
        std::printf("step %5lld/%lld | loss %.4f | lr %.2e | %.0f img/s\n",
                    static_cast<long long>(step), static_cast<long long>(s.steps),
                    mean.item<double>(), engine.lr(), images / secs);
        std::fflush(stdout);
        const nlohmann::json record = {{"step", step}, {"loss", mean.item<double>()},
                                       {"lr", engine.lr()}, {"comm_bytes", sent},
                                       {"images_per_s", images / secs}};
        metrics << record.dump() << std::endl;
        monitor.write(record);
      }
      loss_sum = 0;
      loss_count = 0;
      window = std::chrono::steady_clock::now();
    }
  }
  const double accuracy = test_accuracy(model, test, *group);
  if (rank0) {
    std::printf("test accuracy %.4f (%lld images)\n", accuracy, static_cast<long long>(test.size()));
    std::fflush(stdout);
    const nlohmann::json record = {{"step", engine.global_steps()}, {"test_accuracy", accuracy}};
    metrics << record.dump() << std::endl;
    monitor.write(record);
    metrics.close();
    write_run_plot(s.out_dir, s.metrics);
  }
  engine.save_checkpoint(s.out_dir, nlohmann::json::object(), 2);
}

}  // namespace

const char* default_digits_config() {
  return R"({
  "train_batch_size": 64,
  "steps_per_print": 20,
  "seed": 1234,
  "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true,
                                          "weight_decay": 0.0005}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"warmup_num_steps": 20, "warmup_type": "linear", "total_num_steps": 600,
                           "cos_min_ratio": 0.01}},
  "model": {"type": "resnet", "widths": [16, 32, 64], "blocks_per_stage": 1},
  "train": {"steps": 600, "out_dir": "tessera_out_digits"}
})";
}

int train_digits(runtime::Config cfg, int64_t steps, const std::string& out) {
  DigitsSettings s = digits_settings(cfg);
  if (steps > 0) s.steps = steps;
  if (!out.empty()) s.out_dir = out;
  const auto all = data::DigitsDataset::load(s.data_path);
  const auto train = all.split(data::DigitsDataset::Split::kTrain);
  const auto test = all.split(data::DigitsDataset::Split::kTest);

  InitOptions init_options;
  if (cfg.comm_timeout > 0) init_options.timeout_seconds = cfg.comm_timeout;
  init(init_options);
  run(cfg, s, train, test);
  shutdown();
  return 0;
}

}  // namespace tessera::cli
