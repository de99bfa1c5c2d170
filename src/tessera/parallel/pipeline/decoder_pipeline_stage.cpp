#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"

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

DecoderPipelineStage::DecoderPipelineStage(const ProcessMesh& mesh, const DecoderStageOptions& options,
                                           const std::vector<std::pair<int64_t, int64_t>>& chunks,
                                           int64_t hidden, at::ScalarType activation_dtype)
    : p_(mesh.topology().pp()), v_(options.virtual_stages), stage_(mesh.coord().pp),
      tp_rank_(mesh.coord().tp), tp_size_(mesh.topology().tp()), hidden_(hidden),
      activation_dtype_(activation_dtype), sequence_parallel_(options.sequence_parallel),
      embedding_(mesh.embedding()), initialize_weights_(options.initialize_weights) {
  TS_INTERNAL_ASSERT(static_cast<int>(chunks.size()) == p_ * v_, "DecoderPipelineStage: ",
                     chunks.size(), " chunks for ", p_, " x ", v_, " virtual stages");
  for (int c = 0; c < v_; ++c) my_layers_.push_back(chunks[static_cast<size_t>(c * p_ + stage_)]);
  const MeshCoord c = mesh.coord();
  dropout_rng_ = std::make_shared<DropoutRng>(options.dropout_seed, c.tp, c.dp, c.pp);
  tp_options_ = TensorParallelOptions{mesh.tp(), sequence_parallel_, dropout_rng_,
                                      options.partition_activations};
  tp_options_.context = ContextParallelOptions{mesh.cp(), options.cp_comm_type};
  tp_options_.expert = ExpertParallelOptions{mesh.ep(), options.token_dispatcher};
}

DecoderPart DecoderPipelineStage::part() const {
  DecoderPart part;
  part.blocks = my_layers_;
  part.embedding = stage_ == 0;
  part.head = stage_ == p_ - 1;
  part.initialize = initialize_weights_;
  return part;
}

std::vector<std::pair<std::string, torch::Tensor>> DecoderPipelineStage::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : decoder_->module().named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

bool DecoderPipelineStage::is_duplicate(const std::string& name) const {
  // The first stage's copy of a tied embedding counts.
  if (stage_ != 0 && name == decoder_->tied_embedding_name()) return true;
  return tp_rank_ > 0 && decoder_->slice_of(name).kind == DenseSlice::Kind::kWhole;
}

torch::Tensor DecoderPipelineStage::forward(int chunk, int micro, const torch::Tensor& input) {
  // Each micro-batch's loss enters the backward divided by their number; its
  // auxiliary losses (MoE) likewise.
  decoder_->set_auxiliary_loss_scale(1.0 / std::max(1, micro_batches()));
  torch::Tensor x = first_chunk(chunk) ? decoder_->embed(micro_input(micro)) : input;
  const auto [b, e] = my_layers_.at(static_cast<size_t>(chunk));
  x = decoder_->blocks(b, e, x);
  if (!last_chunk(chunk)) return x;
  return decoder_->head_loss(x, micro_target(micro));
}

torch::Tensor DecoderPipelineStage::activation_like(int, int micro) {
  const auto& idx = micro_input(micro);
  const int64_t t = sequence_parallel_ ? idx.size(1) / tp_size_ : idx.size(1);
  return torch::empty({idx.size(0), t, hidden_}, torch::TensorOptions().dtype(activation_dtype_));
}

void DecoderPipelineStage::reduce_gradients() {
  // Tied or not is the same on every rank, so the embedding group's members
  // agree on whether to reduce.
  if (p_ > 1 && embedding_ && !decoder_->tied_embedding_name().empty()) {
    auto w = decoder_->tied_embedding();
    if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
    embedding_->all_reduce(w.mutable_grad())->wait();
  }
  BatchedStage::reduce_gradients();
}

}  // namespace tessera::parallel
