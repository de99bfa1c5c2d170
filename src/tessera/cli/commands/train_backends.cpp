// The two TrainBackends of `tessera train` (train_backend.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <type_traits>
#include <vector>

#include "tessera/cli/commands/train_backend.h"
#include "tessera/cli/commands/train_llama.h"
#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/trace.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"
#include "tessera/parallel/pipeline/llama_pipeline_stage.h"
#include "tessera/parallel/topology.h"
#include "tessera/runtime/hf/gpt2_checkpoint.h"
#include "tessera/runtime/hf/llama_checkpoint.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"

namespace tessera::cli {
namespace {

// tokens_per_expert for metrics.jsonl: [layers, experts] int64 as one JSON
// array per layer.
nlohmann::json per_layer_rows(const at::Tensor& counts) {
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t l = 0; l < counts.size(0); ++l) {
    const auto row = counts[l].contiguous();
    rows.push_back(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()));
  }
  return rows;
}

void join_job(const runtime::Config& cfg) {
  InitOptions init_options;
  if (cfg.comm_timeout > 0) init_options.timeout_seconds = cfg.comm_timeout;
  if (cfg.stall.check_time_seconds >= 0) init_options.stall_warn_seconds = cfg.stall.check_time_seconds;
  if (cfg.stall.shutdown_time_seconds >= 0) {
    init_options.stall_shutdown_seconds = cfg.stall.shutdown_time_seconds;
  }
  init(init_options);
  // Per-rank seed: dropout masks differ between ranks like in any DDP job.
  torch::manual_seed(cfg.seed + static_cast<uint64_t>(default_group()->rank()));
  at::set_num_threads(1);
}

bool any_of_group(comm::ProcessGroup& group, bool local) {
  auto flag = at::full({1}, local ? 1 : 0, at::kInt);
  group.all_reduce(flag, comm::ReduceOp::kMax)->wait();
  return flag.item<int>() != 0;
}

void print_sample(const at::Tensor& out) {
  std::printf("--- sample ---\n%s\n--- end of sample ---\n", data::bytes_to_string(out[0]).c_str());
}

at::Tensor prompt_tensor(const std::string& p) {
  auto prompt = at::empty({static_cast<int64_t>(p.size())}, at::kLong);
  for (size_t i = 0; i < p.size(); ++i) prompt[i] = static_cast<int64_t>(static_cast<uint8_t>(p[i]));
  return prompt;
}

// DDP or ZeRO through the Engine; the model is dense on every rank.
// TESSERA_TEST_GRAD_OVERFLOW: steps (1-based, comma-separated, or "all") at which
// rank 0 backpropagates an infinite loss, to exercise fp16 overflow handling.
struct OverflowSteps {
  bool all = false;
  std::vector<int64_t> steps;
  bool hits(int64_t step) const {
    return all || std::find(steps.begin(), steps.end(), step) != steps.end();
  }
};

OverflowSteps parse_overflow_steps() {
  OverflowSteps o;
  const auto value = env::get("TESSERA_TEST_GRAD_OVERFLOW");
  if (!value || value->empty()) return o;
  if (*value == "all") {
    o.all = true;
    return o;
  }
  std::stringstream in(*value);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      o.steps.push_back(std::stoll(item));
    } catch (const std::exception&) {
      TS_THROW(ConfigError, "TESSERA_TEST_GRAD_OVERFLOW='", *value,
               "': use step numbers separated by commas, or all");
    }
  }
  return o;
}

// The dense model on every rank: models::GPT, or models::Llama (train_llama.h).
template <typename Model>
Model build_model(const TrainSettings& s);
template <>
models::GPT build_model<models::GPT>(const TrainSettings& s) {
  models::GPT model(s.model);
  if (!s.init_from_hf.empty()) runtime::hf::load_gpt2_into(*model, s.init_from_hf);
  return model;
}
template <>
models::Llama build_model<models::Llama>(const TrainSettings& s) {
  return build_llama(s);
}

template <typename Model>
class DataParallelBackend : public TrainBackend {
 public:
  DataParallelBackend(const runtime::Config& cfg, const TrainSettings& s)
      : group_(default_group()), model_(build_model<Model>(s)),
        engine_(initialize(model_, cfg, group_)),
        micro_(cfg.train_micro_batch_size_per_gpu), accum_(cfg.gradient_accumulation_steps),
        overflow_steps_(parse_overflow_steps()), moe_(!s.is_llama() && s.model.moe.enabled()) {}

  double train_step(TrainData& data) override {
    double sum = 0;
    const bool inject = group_->rank() == 0 && overflow_steps_.hits(engine_.global_steps() + 1);
    for (int64_t m = 0; m < accum_; ++m) {
      auto [x, y] = data.next_batch(micro_);
      at::Tensor loss;
      {
        trace::Scope span("forward");
        loss = model_->loss(x, y);
      }
      // Test hook: an inf in this rank's gradients (the reported loss stays finite).
      engine_.backward(inject ? loss * std::numeric_limits<double>::infinity() : loss);
      engine_.step();
      sum += loss.item<double>();
      if constexpr (std::is_same_v<Model, models::GPT>) {
        if (moe_) {
          auto t = model_->tokens_per_expert();
          routed_ = routed_.defined() ? routed_ + t : t;
        }
      }
    }
    return sum / static_cast<double>(accum_);
  }
  nlohmann::json take_tokens_per_expert() override {
    if (!moe_ || !routed_.defined()) return nullptr;
    auto total = routed_.to(at::kLong).contiguous();
    group_->all_reduce(total)->wait();
    routed_ = at::Tensor();
    return per_layer_rows(total);
  }
  double mean_over_job(double local) override {
    auto t = at::full({1}, local, at::kDouble);
    group_->all_reduce(t, comm::ReduceOp::kAvg)->wait();
    return t.item<double>();
  }
  bool any_rank(bool local) override { return any_of_group(*group_, local); }
  double evaluate(TrainData& data, int64_t iters) override {
    if (!data.has_val()) return -1;
    engine_.synchronize_parameters();  // delayed averaging: evaluate the consensus
    trace::Scope span("evaluate");
    at::NoGradGuard no_grad;
    model_->eval();
    double sum = 0;
    for (int64_t i = 0; i < iters; ++i) {
      auto [x, y] = data.eval_batch(i, micro_);
      sum += model_->loss(x, y).template item<double>();
    }
    model_->train();
    return mean_over_job(sum / static_cast<double>(iters));
  }
  void save(const std::string& dir, const nlohmann::json& client, int keep_last) override {
    engine_.save_checkpoint(dir, client, keep_last);
  }
  checkpoint::AsyncSaveTimes save_async(const std::string& dir, const nlohmann::json& client,
                                        int keep_last, checkpoint::AsyncMode mode) override {
    return engine_.save_checkpoint_async(dir, client, keep_last, mode);
  }
  std::optional<checkpoint::CompletedSave> wait_for_checkpoint() override {
    return engine_.wait_for_checkpoint();
  }
  nlohmann::json load(const std::string& dir) override { return engine_.load_checkpoint(dir); }
  void sample(const std::string& prompt, int64_t length, uint64_t seed) override {
    // Under ZeRO stage 3 the weights are sharded: every rank gathers them so
    // that rank 0 alone can sample.
    if constexpr (std::is_same_v<Model, models::GPT>) {
      if (engine_.zero_stage() == 3) engine_.zero().gather_all();
      if (group_->rank() == 0)
        print_sample(model_->generate(prompt_tensor(prompt), length, 0.8, 0, seed));
      if (engine_.zero_stage() == 3) engine_.zero().release_all();
    }  // the Llama has no sampler: train_command asks only the GPT for text
  }

  int64_t global_steps() const override { return engine_.global_steps(); }
  double lr() const override { return engine_.lr(); }
  double grad_norm() const override { return engine_.last_grad_norm(); }
  int64_t num_parameters() const override { return model_->num_parameters(); }
  double loss_scale() const override { return engine_.loss_scale(); }
  int64_t skipped_steps() const override { return engine_.skipped_steps(); }
  runtime::MemoryStats memory_stats() const override { return engine_.memory_stats(); }
  comm::CommStats comm_stats() const override { return engine_.comm_stats(); }
  runtime::Observability& observability() override { return engine_.observability(); }
  std::string describe() const override { return c10::str("ZeRO stage ", engine_.zero_stage()); }
  int rank() const override { return group_->rank(); }
  int world() const override { return group_->size(); }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  Model model_;
  runtime::Engine engine_;
  int64_t micro_, accum_;
  OverflowSteps overflow_steps_;
  bool moe_;          // the model has experts: count their tokens
  at::Tensor routed_;   // [layer, expert] kept assignments since the last record
};

// The model family the ModelParallelEngine builds: the Llama or the GPT.
parallel::DecoderSpec decoder_spec(const TrainSettings& s) {
  auto spec = s.is_llama() ? parallel::llama_decoder_spec(s.llama) : parallel::gpt_decoder_spec(s.model);
  // Weights from a Hugging Face directory are loaded whole: drawing them first
  // would only be thrown away.
  spec.initialize_weights = s.init_from_hf.empty();
  return spec;
}

// Tensor, pipeline and data parallel through the ModelParallelEngine.
class ModelParallelBackend : public TrainBackend {
 public:
  ModelParallelBackend(const runtime::Config& cfg, const TrainSettings& s)
      : engine_(decoder_spec(s), cfg, default_group()),
        batch_(cfg.train_micro_batch_size_per_gpu * cfg.gradient_accumulation_steps) {
    if (!s.init_from_hf.empty()) load_hf(s);
  }

  double train_step(TrainData& data) override {
    auto [x, y] = data.next_batch(batch_);  // the accumulation's micro-batches, in order
    return engine_.train_step(x, y);        // already the global mean
  }
  double mean_over_job(double local) override { return local; }
  nlohmann::json take_tokens_per_expert() override {
    const at::Tensor total = engine_.take_tokens_per_expert();
    if (!total.defined()) return nullptr;
    return per_layer_rows(total);
  }
  bool any_rank(bool local) override { return any_of_group(*engine_.mesh().world(), local); }
  double evaluate(TrainData& data, int64_t iters) override {
    if (!data.has_val()) return -1;
    std::vector<at::Tensor> xs, ys;
    for (int64_t i = 0; i < iters; ++i) {
      auto [x, y] = data.eval_batch(i, engine_.config().train_micro_batch_size_per_gpu);
      xs.push_back(x);
      ys.push_back(y);
    }
    trace::Scope span("evaluate");
    return engine_.evaluate(at::cat(xs), at::cat(ys));
  }
  void save(const std::string& dir, const nlohmann::json& client, int keep_last) override {
    engine_.save_checkpoint(dir, client, keep_last);
  }
  checkpoint::AsyncSaveTimes save_async(const std::string& dir, const nlohmann::json& client,
                                        int keep_last, checkpoint::AsyncMode mode) override {
    return engine_.save_checkpoint_async(dir, client, keep_last, mode);
  }
  std::optional<checkpoint::CompletedSave> wait_for_checkpoint() override {
    return engine_.wait_for_checkpoint();
  }
  nlohmann::json load(const std::string& dir) override { return engine_.load_checkpoint(dir); }
  // model.init_from_hf: each rank copies in only its stage's tensors, cut to
  // its tensor-parallel slice, straight from the memory-mapped files.
  void load_hf(const TrainSettings& s) {
    const int tp_rank = engine_.mesh().coord().tp;
    const int tp = engine_.mesh().topology().tp();
    auto slice = [&](const std::string& name, const at::Tensor& whole) {
      return parallel::dense_slice(whole, engine_.stage().slice_of(name), tp_rank, tp);
    };
    if (s.is_llama()) {
      runtime::hf::load_llama_parameters(s.llama, engine_.stage().named_parameters(),
                                         s.init_from_hf, slice);
    } else {
      runtime::hf::load_gpt2_parameters(s.model, engine_.stage().named_parameters(),
                                        s.init_from_hf, slice);
    }
  }

  void sample(const std::string&, int64_t, uint64_t) override {
    if (rank() == 0) {
      std::printf("(no text sample under tensor or pipeline parallelism: consolidate the last "
                  "checkpoint with `tessera ckpt consolidate` and sample from the dense model)\n");
    }
  }

  int64_t global_steps() const override { return engine_.global_steps(); }
  double lr() const override { return engine_.lr(); }
  double grad_norm() const override { return engine_.last_grad_norm(); }
  int64_t num_parameters() const override { return engine_.num_parameters(); }
  runtime::MemoryStats memory_stats() const override { return engine_.memory_stats(); }
  comm::CommStats comm_stats() const override { return engine_.comm_stats(); }
  runtime::Observability& observability() override { return engine_.observability(); }
  std::string describe() const override {
    return engine_.mesh().topology().describe() + ", " +
           engine_.config().model_parallel.pipeline_schedule;
  }
  int rank() const override { return engine_.mesh().world()->rank(); }
  int world() const override { return engine_.mesh().world()->size(); }

 private:
  runtime::ModelParallelEngine engine_;
  int64_t batch_;
};

}  // namespace

DataShard check_train_layout(runtime::Config& cfg, const TrainSettings& s, int world, int rank) {
  if (!cfg.model_parallel.enabled()) {
    cfg.resolve_batch(world);
    return {world, rank};
  }
  const int dp = runtime::ModelParallelEngine::check_layout(decoder_spec(s), cfg, world);
  const auto& mp = cfg.model_parallel;
  // The training sequences (model.block_size tokens) are what cp splits.
  if (mp.context_parallel_size > 1) {
    parallel::check_context_parallel_length(s.model.block_size, mp.context_parallel_size);
  }
  const parallel::Topology t(world, mp.tensor_model_parallel_size, mp.pipeline_model_parallel_size,
                             mp.context_parallel_size);
  return {dp, t.coord(rank).dp};
}

std::unique_ptr<TrainBackend> make_train_backend(const runtime::Config& cfg, const TrainSettings& s) {
  join_job(cfg);
  if (cfg.model_parallel.enabled()) return std::make_unique<ModelParallelBackend>(cfg, s);
  if (s.is_llama()) return std::make_unique<DataParallelBackend<models::Llama>>(cfg, s);
  return std::make_unique<DataParallelBackend<models::GPT>>(cfg, s);
}

}  // namespace tessera::cli
