#include "tessera/cli/commands/train_mlm.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/cli/commands/loss_plot.h"
#include "tessera/cli/commands/train_monitor.h"
#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/distributed_sampler.h"
#include "tessera/models/bert.h"
#include "tessera/runtime/engine.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using runtime::check_known_keys;
using runtime::read_int;
using runtime::read_number;
using runtime::read_positive_int;
using runtime::read_string;

constexpr int64_t kByteVocab = 256;
constexpr int64_t kMaskId = 256;  // [MASK], the one id past the bytes

struct MlmSettings {
  models::BertConfig model;
  std::string data_path = "/usr/share/common-licenses";
  double val_fraction = 0.1;
  int64_t steps = 300;
  std::string out_dir = "tessera_out_mlm";
  std::string metrics = "metrics.jsonl";
  int64_t eval_interval = 100;
  int64_t eval_iters = 8;
  double mask_prob = 0.15;
};

void read_model(const runtime::Config& cfg, MlmSettings& s) {
  const auto& m = cfg.model;
  check_known_keys(m,
                   {"type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "seq_len", "seed"},
                   "model");
  auto& b = s.model;
  b.vocab_size = kByteVocab + 1;
  b.hidden_size = read_positive_int(m, "hidden_size", "model", 128);
  b.num_hidden_layers = read_positive_int(m, "num_hidden_layers", "model", 2);
  b.num_attention_heads = read_positive_int(m, "num_attention_heads", "model", 4);
  b.intermediate_size = read_positive_int(m, "intermediate_size", "model", 4 * b.hidden_size);
  b.max_position_embeddings = read_positive_int(m, "seq_len", "model", 64);
  b.type_vocab_size = 2;
  b.layer_norm_eps = 1e-12;
  b.seed = static_cast<uint64_t>(read_int(m, "seed", "model", static_cast<int64_t>(cfg.seed)));
  b.validate();
}

MlmSettings mlm_settings(const runtime::Config& cfg) {
  MlmSettings s;
  read_model(cfg, s);
  check_known_keys(cfg.data, {"path", "val_fraction"}, "data");
  s.data_path = read_string(cfg.data, "path", "data", s.data_path);
  s.val_fraction = read_number(cfg.data, "val_fraction", "data", s.val_fraction);
  const auto& t = cfg.train;
  check_known_keys(t, {"steps", "out_dir", "metrics", "eval_interval", "eval_iters", "mask_prob"},
                   "train");
  s.steps = read_positive_int(t, "steps", "train", s.steps);
  s.out_dir = read_string(t, "out_dir", "train", s.out_dir);
  s.metrics = read_string(t, "metrics", "train", s.metrics);
  s.eval_interval = read_int(t, "eval_interval", "train", s.eval_interval);
  TS_CHECK_T(ConfigError, s.eval_interval >= 0,
             "config 'train.eval_interval' must be >= 0 (0: "
             "evaluate at the end only), got ",
             s.eval_interval);
  s.eval_iters = read_positive_int(t, "eval_iters", "train", s.eval_iters);
  s.mask_prob = read_number(t, "mask_prob", "train", s.mask_prob);
  TS_CHECK_T(ConfigError, s.mask_prob > 0 && s.mask_prob <= 1,
             "config 'train.mask_prob' must be "
             "in (0, 1], got ",
             s.mask_prob, " (BERT masks 0.15)");
  TS_CHECK_T(ConfigError, !cfg.model_parallel.enabled(),
             "model.type bert trains with data "
             "parallelism only: remove tensor_model_parallel_size and "
             "pipeline_model_parallel_size (BERT's layers take a padding mask that the "
             "model-parallel layer split does not carry)");
  TS_CHECK_T(ConfigError, cfg.zero.stage <= 2,
             "model.type bert supports zero_optimization.stage "
             "0, 1 or 2, not 3 (stage 3 shards the layers of a Sequential; BERT's layers take a "
             "padding mask and sit in a ModuleList): use stage 2");
  return s;
}

// Blocks of seq_len bytes of `split`, and the sampler that deals them to ranks.
struct MlmData {
  std::unique_ptr<data::ByteTextDataset> train, val;
  std::unique_ptr<data::DistributedSampler> sampler;
  int64_t seq_len;

  at::Tensor blocks(const data::ByteTextDataset& d, const std::vector<int64_t>& idx) const {
    return d.get_blocks(idx, seq_len).first;
  }
  at::Tensor next_batch(int64_t n) {
    std::vector<int64_t> idx;
    while (static_cast<int64_t>(idx.size()) < n) {
      auto more = sampler->next_batch(n - static_cast<int64_t>(idx.size()));
      if (more.empty()) {
        sampler->set_epoch(sampler->epoch() + 1);
        continue;
      }
      idx.insert(idx.end(), more.begin(), more.end());
    }
    return blocks(*train, idx);
  }
};

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Masked-LM loss and accuracy on eval_iters fixed held-out batches (each rank
// its own blocks, the same masks every evaluation), over all ranks.
EvalResult evaluate(models::Bert& model, const MlmData& d, const MlmSettings& s, int64_t batch,
                    comm::ProcessGroup& group) {
  at::NoGradGuard no_grad;
  model->eval();
  auto gen = at::detail::createCPUGenerator(s.model.seed + 7919 * (group.rank() + 1));
  const int64_t blocks = d.val->num_blocks(d.seq_len);
  auto sums = at::zeros({3}, at::kDouble);  // loss * masked, correct, masked
  for (int64_t i = 0; i < s.eval_iters; ++i) {
    std::vector<int64_t> idx;
    for (int64_t b = 0; b < batch; ++b) {
      idx.push_back(((i * group.size() + group.rank()) * batch + b) % blocks);
    }
    auto [inputs, labels] =
        mask_for_mlm(d.blocks(*d.val, idx), s.mask_prob, kMaskId, kByteVocab, gen);
    const auto picked = labels.ne(-100);
    const double n = static_cast<double>(picked.sum().item<int64_t>());
    if (n == 0) continue;
    const auto logits = model->forward(inputs);
    const double loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                               labels.reshape({-1}), {}, at::Reduction::Mean,
                                               /*ignore_index=*/-100)
                            .item<double>();
    const double correct =
        static_cast<double>(logits.argmax(-1).eq(labels).logical_and(picked).sum().item<int64_t>());
    sums += at::tensor({loss * n, correct, n}, at::kDouble);
  }
  group.all_reduce(sums, comm::ReduceOp::kSum)->wait();
  model->train();
  const double n = std::max(1.0, sums[2].item<double>());
  return {sums[0].item<double>() / n, sums[1].item<double>() / n};
}

}  // namespace

std::pair<at::Tensor, at::Tensor> mask_for_mlm(const at::Tensor& tokens, double mask_prob,
                                               int64_t mask_id, int64_t random_vocab,
                                               at::Generator& gen) {
  const auto chosen = at::empty(tokens.sizes(), at::kFloat).uniform_(0, 1, gen).lt(mask_prob);
  const auto action = at::empty(tokens.sizes(), at::kFloat).uniform_(0, 1, gen);
  const auto random = at::empty(tokens.sizes(), at::kLong).random_(0, random_vocab, gen);
  auto inputs = tokens.clone();
  inputs = at::where(chosen.logical_and(action.lt(0.8)), at::full_like(tokens, mask_id), inputs);
  inputs =
      at::where(chosen.logical_and(action.ge(0.8)).logical_and(action.lt(0.9)), random, inputs);
  auto labels = at::where(chosen, tokens, at::full_like(tokens, -100));
  return {inputs, labels};
}

namespace {

void print_start(const MlmSettings& s, const runtime::Config& c, const models::Bert& model,
                 const MlmData& d, int world) {
  std::printf(
      "tessera train --task mlm: BERT %lld params (%lld layers, %lld hidden, %lld heads), "
      "%d ranks, batch %lld (micro %lld x accumulation %lld x %d), %lld steps, "
      "optimizer %s, data %s (%lld bytes)\n",
      static_cast<long long>(model->num_parameters()),
      static_cast<long long>(s.model.num_hidden_layers),
      static_cast<long long>(s.model.hidden_size),
      static_cast<long long>(s.model.num_attention_heads), world,
      static_cast<long long>(c.train_batch_size),
      static_cast<long long>(c.train_micro_batch_size_per_gpu),
      static_cast<long long>(c.gradient_accumulation_steps), world, static_cast<long long>(s.steps),
      c.optimizer.type.c_str(), s.data_path.c_str(), static_cast<long long>(d.train->num_tokens()));
  std::fflush(stdout);
}

// The training itself, in the job init() joined; the engine goes before shutdown().
void run(const runtime::Config& cfg, const MlmSettings& s, MlmData& d) {
  auto group = default_group();
  const bool rank0 = group->rank() == 0;
  models::Bert model(s.model);
  Engine engine = initialize(std::static_pointer_cast<torch::nn::Module>(model.ptr()), cfg, group);
  const runtime::Config& c = engine.config();
  d.sampler = std::make_unique<data::DistributedSampler>(
      d.train->num_blocks(d.seq_len), group->size(), group->rank(),
      data::DistributedSamplerOptions{true, cfg.seed, false});
  auto gen = at::detail::createCPUGenerator(cfg.seed * 1000003 + group->rank());
  if (rank0) {
    fs::create_directories(s.out_dir);
    print_start(s, c, model, d, group->size());
  }
  std::ofstream metrics;
  if (rank0) metrics.open(s.out_dir + "/" + s.metrics, std::ios::app);
  TrainMonitor monitor(c, s.out_dir, group->rank());
  auto write = [&](const nlohmann::json& record) {
    if (!rank0) return;
    metrics << record.dump() << std::endl;
    monitor.write(record);
  };
  double loss_sum = 0;
  int64_t loss_count = 0;
  while (engine.global_steps() < s.steps) {
    const auto comm_before = engine.comm_stats();
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      auto [inputs, labels] = mask_for_mlm(d.next_batch(c.train_micro_batch_size_per_gpu),
                                           s.mask_prob, kMaskId, kByteVocab, gen);
      auto loss = model->loss(inputs, labels);
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
      if (rank0) {
        std::printf("step %5lld/%lld | loss %.4f | lr %.2e\n", static_cast<long long>(step),
                    static_cast<long long>(s.steps), mean.item<double>(), engine.lr());
        std::fflush(stdout);
      }
      write({{"step", step},
             {"loss", mean.item<double>()},
             {"lr", engine.lr()},
             {"comm_bytes", sent}});
      loss_sum = 0;
      loss_count = 0;
    }
    if ((s.eval_interval > 0 && step % s.eval_interval == 0) || step == s.steps) {
      const EvalResult r = evaluate(model, d, s, c.train_micro_batch_size_per_gpu, *group);
      if (rank0) {
        std::printf("step %5lld: val loss %.4f | masked-LM accuracy %.4f\n",
                    static_cast<long long>(step), r.loss, r.accuracy);
        std::fflush(stdout);
      }
      write({{"step", step}, {"val_loss", r.loss}, {"mlm_accuracy", r.accuracy}});
    }
  }
  if (rank0) {
    metrics.close();
    write_run_plot(s.out_dir, s.metrics);
  }
  engine.save_checkpoint(s.out_dir, nlohmann::json::object(), 2);
}

}  // namespace

// Sized for two cores: a few minutes. AdamW, which got this small post-LN BERT
// past the byte-frequency plateau sooner than Lamb did (docs/models.md#bert).
const char* default_mlm_config() {
  return R"({
  "train_micro_batch_size_per_gpu": 16,
  "gradient_clipping": 1.0,
  "steps_per_print": 20,
  "seed": 1337,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"warmup_num_steps": 20, "warmup_type": "linear",
                           "total_num_steps": 300, "cos_min_ratio": 0.1}},
  "model": {"type": "bert", "hidden_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "seq_len": 64},
  "data": {"path": "/usr/share/common-licenses", "val_fraction": 0.1},
  "train": {"steps": 300, "eval_interval": 100, "eval_iters": 8, "out_dir": "tessera_out_mlm"}
})";
}

int train_mlm(runtime::Config cfg, int64_t steps, const std::string& out) {
  MlmSettings s = mlm_settings(cfg);
  if (steps > 0) s.steps = steps;
  if (!out.empty()) s.out_dir = out;
  if (!cfg.optimizer.weight_decay_exclude_set) {
    // BERT's recipe: no decay on biases and LayerNorms.
    cfg.optimizer.weight_decay_exclude = {"*bias", "*LayerNorm.*"};
  }
  MlmData d;
  d.seq_len = s.model.max_position_embeddings;
  d.train = std::make_unique<data::ByteTextDataset>(
      s.data_path, data::ByteTextOptions{s.val_fraction, data::Split::kTrain});
  d.val = std::make_unique<data::ByteTextDataset>(
      s.data_path, data::ByteTextOptions{s.val_fraction, data::Split::kVal});
  TS_CHECK_T(ConfigError, d.train->num_blocks(d.seq_len) > 0 && d.val->num_blocks(d.seq_len) > 0,
             "data '", s.data_path, "' is too small for one block of model.seq_len ", d.seq_len,
             " bytes in each split: use more text or a smaller seq_len");
  InitOptions init_options;
  if (cfg.comm_timeout > 0) init_options.timeout_seconds = cfg.comm_timeout;
  init(init_options);
  run(cfg, s, d);
  shutdown();
  return 0;
}

}  // namespace tessera::cli
