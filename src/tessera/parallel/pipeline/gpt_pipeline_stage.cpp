#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"

#include <algorithm>
#include <limits>

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

std::vector<std::pair<int64_t, int64_t>> balanced_split(const std::vector<int64_t>& cost,
                                                        int64_t first_extra, int64_t last_extra,
                                                        int chunks) {
  const int64_t n = static_cast<int64_t>(cost.size());
  TS_CHECK_T(ConfigError, chunks >= 1 && chunks <= n, "cannot cut ", n, " blocks into ", chunks,
             " pipeline chunks of at least one block each");
  std::vector<int64_t> prefix(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  auto load = [&](int k, int64_t b, int64_t e) {
    int64_t l = prefix[e] - prefix[b];
    if (k == 0) l += first_extra;
    if (k == chunks - 1) l += last_extra;
    return l;
  };
  // best[k][e]: the smallest largest load of chunks 0..k over blocks [0, e).
  const int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(chunks, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int64_t>> cut(chunks, std::vector<int64_t>(n + 1, 0));
  for (int64_t e = 1; e <= n; ++e) best[0][e] = load(0, 0, e);
  for (int k = 1; k < chunks; ++k) {
    for (int64_t e = k + 1; e <= n; ++e) {
      for (int64_t b = k; b < e; ++b) {
        if (best[k - 1][b] == kInf) continue;
        const int64_t m = std::max(best[k - 1][b], load(k, b, e));
        if (m < best[k][e]) {
          best[k][e] = m;
          cut[k][e] = b;
        }
      }
    }
  }
  std::vector<std::pair<int64_t, int64_t>> out(static_cast<size_t>(chunks));
  int64_t e = n;
  for (int k = chunks - 1; k >= 0; --k) {
    const int64_t b = k == 0 ? 0 : cut[k][e];
    out[static_cast<size_t>(k)] = {b, e};
    e = b;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> split_layers_by_parameters(const models::GPTConfig& c,
                                                                    int p, int v) {
  split_layers(c.n_layer, p, v);  // the same ConfigError for too many chunks
  const int64_t C = c.n_embd, b = c.bias ? 1 : 0;
  const int64_t block = 2 * 2 * C                   // ln_1, ln_2
                        + 3 * C * C + b * 3 * C     // c_attn
                        + C * C + b * C             // attn.c_proj
                        + 4 * C * C + b * 4 * C     // c_fc
                        + 4 * C * C + b * C;        // mlp.c_proj
  const std::vector<int64_t> cost(static_cast<size_t>(c.n_layer), block);
  const int64_t embedding = c.vocab_size * C + c.block_size * C;
  const int64_t head = 2 * C + c.vocab_size * C;  // ln_f and the tied copy of wte
  return balanced_split(cost, embedding, head, p * v);
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

GptPipelineStage::GptPipelineStage(const models::GPTConfig& config, const ProcessMesh& mesh,
                                   GptStageOptions options)
    : config_(config), p_(mesh.topology().pp()), v_(options.virtual_stages),
      stage_(mesh.coord().pp), tp_rank_(mesh.coord().tp), tp_size_(mesh.topology().tp()),
      sequence_parallel_(options.sequence_parallel), embedding_(mesh.embedding()) {
  // ConfigError before any weight.
  const auto all = options.balance_by_parameters ? split_layers_by_parameters(config, p_, v_)
                                                 : split_layers(config.n_layer, p_, v_);
  for (int c = 0; c < v_; ++c) my_layers_.push_back(all[static_cast<size_t>(c * p_ + stage_)]);
  const MeshCoord c = mesh.coord();
  model_ = TensorParallelGPT(
      config_,
      TensorParallelOptions{mesh.tp(), sequence_parallel_,
                            std::make_shared<DropoutRng>(options.dropout_seed, c.tp, c.dp, c.pp),
                            options.partition_activations},
      part_of(my_layers_, p_, stage_));
}

std::vector<std::pair<std::string, torch::Tensor>> GptPipelineStage::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model_->named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

bool GptPipelineStage::is_duplicate(const std::string& name) const {
  if (name == "wte.weight" && stage_ != 0) return true;  // the first stage's copy counts
  return tp_rank_ > 0 && dense_slice_of(name).kind == DenseSlice::Kind::kWhole;
}

torch::Tensor GptPipelineStage::forward(int chunk, int micro, const torch::Tensor& input) {
  torch::Tensor x = first_chunk(chunk) ? model_->embed(micro_input(micro)) : input;
  const auto [b, e] = my_layers_.at(static_cast<size_t>(chunk));
  x = model_->blocks(b, e, x);
  if (!last_chunk(chunk)) return x;
  return model_->head_loss(x, micro_target(micro));
}

torch::Tensor GptPipelineStage::activation_like(int, int micro) {
  const auto& idx = micro_input(micro);
  const int64_t t = sequence_parallel_ ? idx.size(1) / tp_size_ : idx.size(1);
  return torch::empty({idx.size(0), t, config_.n_embd}, torch::TensorOptions().dtype(config_.compute_dtype));
}

void GptPipelineStage::reduce_gradients() {
  if (p_ > 1 && embedding_) {
    auto w = model_->token_embedding();
    if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
    embedding_->all_reduce(w.mutable_grad())->wait();
  }
  BatchedStage::reduce_gradients();
}

}  // namespace tessera::parallel
