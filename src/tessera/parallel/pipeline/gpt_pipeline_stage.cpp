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

namespace {

GptPart part_of(const std::vector<std::pair<int64_t, int64_t>>& mine, int p, int stage) {
  GptPart part;
  part.blocks = mine;
  part.embedding = stage == 0;
  part.head = stage == p - 1;
  return part;
}

}  // namespace

GptPipelineStage::GptPipelineStage(const models::GPTConfig& config, const ProcessMesh& mesh, int v,
                                   bool sequence_parallel)
    : config_(config), p_(mesh.topology().pp()), v_(v), stage_(mesh.coord().pp),
      tp_rank_(mesh.coord().tp), tp_size_(mesh.topology().tp()),
      sequence_parallel_(sequence_parallel), embedding_(mesh.embedding()) {
  const auto all = split_layers(config.n_layer, p_, v_);  // ConfigError before any weight
  for (int c = 0; c < v_; ++c) my_layers_.push_back(all[static_cast<size_t>(c * p_ + stage_)]);
  model_ = TensorParallelGPT(config_, TensorParallelOptions{mesh.tp(), sequence_parallel_},
                             part_of(my_layers_, p_, stage_));
}

void GptPipelineStage::set_batch(const torch::Tensor& ids, const torch::Tensor& targets, int m) {
  TS_CHECK(ids.size(0) % m == 0, "GptPipelineStage: batch of ", ids.size(0),
           " sequences does not split into ", m, " micro-batches");
  ids_ = ids.chunk(m, 0);
  targets_ = targets.chunk(m, 0);
}

std::vector<std::pair<std::string, torch::Tensor>> GptPipelineStage::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model_->named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

std::vector<torch::Tensor> GptPipelineStage::parameters() const {
  std::vector<torch::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

bool GptPipelineStage::is_duplicate(const std::string& name) const {
  if (name == "wte.weight" && stage_ != 0) return true;  // the first stage's copy counts
  return tp_rank_ > 0 && dense_slice_of(name).kind == DenseSlice::Kind::kWhole;
}

torch::Tensor GptPipelineStage::forward(int chunk, int micro, const torch::Tensor& input) {
  torch::Tensor x = first_chunk(chunk) ? model_->embed(ids_.at(static_cast<size_t>(micro))) : input;
  const auto [b, e] = my_layers_.at(static_cast<size_t>(chunk));
  x = model_->blocks(b, e, x);
  if (!last_chunk(chunk)) return x;
  return model_->head_loss(x, targets_.at(static_cast<size_t>(micro)));
}

torch::Tensor GptPipelineStage::activation_like(int, int micro) {
  const auto& idx = ids_.at(static_cast<size_t>(micro));
  const int64_t t = sequence_parallel_ ? idx.size(1) / tp_size_ : idx.size(1);
  return torch::empty({idx.size(0), t, config_.n_embd});
}

void GptPipelineStage::reduce_gradients() {
  if (p_ > 1 && embedding_) {
    auto w = model_->token_embedding();
    if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
    embedding_->all_reduce(w.mutable_grad())->wait();
  }
  if (reduce_) reduce_();
}

void GptPipelineStage::optimizer_step() {
  if (step_) step_();
}

}  // namespace tessera::parallel
