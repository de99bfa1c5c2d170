#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"

#include "tessera/core/check.h"

namespace tessera::parallel {

std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t n_layer, int p, int v) {
  const int64_t chunks = static_cast<int64_t>(p) * v;
  TS_CHECK_T(ConfigError, chunks <= n_layer, "pipeline_model_parallel_size ", p, " x virtual_pipeline_model_parallel_size ", v, " = ", chunks,
             " pipeline chunks but the model has only ", n_layer,
             " layers (model.n_layer); every chunk needs at least one layer");
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t n = n_layer / chunks + (k < n_layer % chunks ? 1 : 0);
    out.emplace_back(begin, begin + n);
    begin += n;
  }
  return out;
}

GptPipelineStage::GptPipelineStage(const models::GPTConfig& config, int p, int v, int stage,
                                   std::shared_ptr<comm::ProcessGroup> embedding)
    : config_(config), p_(p), v_(v), stage_(stage), embedding_(std::move(embedding)),
      dense_(nullptr) {
  const auto all = split_layers(config.n_layer, p, v);  // ConfigError before any weight
  dense_ = models::GPT(config);
  for (int c = 0; c < v; ++c) my_layers_.push_back(all[static_cast<size_t>(c * p + stage)]);
}

void GptPipelineStage::set_batch(const torch::Tensor& ids, const torch::Tensor& targets, int m) {
  TS_CHECK(ids.size(0) % m == 0, "GptPipelineStage: batch of ", ids.size(0),
           " sequences does not split into ", m, " micro-batches");
  ids_ = ids.chunk(m, 0);
  targets_ = targets.chunk(m, 0);
}

std::vector<std::pair<std::string, torch::Tensor>> GptPipelineStage::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto add = [&](const std::string& prefix, const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(true)) out.emplace_back(prefix + p.key(), p.value());
  };
  if (holds_embedding()) out.emplace_back("wte.weight", dense_->wte->weight);
  if (stage_ == 0) out.emplace_back("wpe.weight", dense_->wpe->weight);
  for (const auto& [b, e] : my_layers_) {
    for (int64_t i = b; i < e; ++i) add("h." + std::to_string(i) + ".", *dense_->h->ptr(static_cast<size_t>(i)));
  }
  if (stage_ == p_ - 1) add("ln_f.", *dense_->ln_f);
  return out;
}

std::vector<torch::Tensor> GptPipelineStage::parameters() const {
  std::vector<torch::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

torch::Tensor GptPipelineStage::forward(int chunk, int micro, const torch::Tensor& input) {
  torch::Tensor x;
  if (first_chunk(chunk)) {
    const auto& idx = ids_.at(static_cast<size_t>(micro));
    auto pos = torch::arange(idx.size(1), torch::kLong);
    x = dense_->drop(dense_->wte(idx) + dense_->wpe(pos));
  } else {
    x = input;
  }
  const auto [b, e] = my_layers_.at(static_cast<size_t>(chunk));
  for (int64_t i = b; i < e; ++i) x = dense_->h[static_cast<size_t>(i)]->as<models::Block>()->forward(x);
  if (!last_chunk(chunk)) return x;
  x = dense_->ln_f(x);
  auto logits = torch::nn::functional::linear(x, dense_->wte->weight);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets_.at(static_cast<size_t>(micro)).reshape({-1}));
}

torch::Tensor GptPipelineStage::activation_like(int, int micro) {
  const auto& idx = ids_.at(static_cast<size_t>(micro));
  return torch::empty({idx.size(0), idx.size(1), config_.n_embd});
}

void GptPipelineStage::reduce_gradients() {
  if (p_ == 1 || !embedding_) return;
  auto& w = dense_->wte->weight;
  if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
  embedding_->all_reduce(w.mutable_grad())->wait();
}

void GptPipelineStage::optimizer_step() {
  if (step_) step_();
}

}  // namespace tessera::parallel
