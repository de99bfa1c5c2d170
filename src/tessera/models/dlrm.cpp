#include "tessera/models/dlrm.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tessera/core/check.h"

namespace tessera::models {
namespace {

// Linear layers of widths in -> widths..., ReLU after each but (optionally) the last.
torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& widths, bool relu_last,
                          at::Generator& gen) {
  torch::nn::Sequential seq;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < widths.size(); ++i) {
    torch::nn::Linear layer(in, widths[i]);
    const double w_std = std::sqrt(2.0 / static_cast<double>(in + widths[i]));
    layer->weight.normal_(0, w_std, gen);
    layer->bias.normal_(0, std::sqrt(1.0 / static_cast<double>(widths[i])), gen);
    seq->push_back(layer);
    if (i + 1 < widths.size() || relu_last) seq->push_back(torch::nn::ReLU());
    in = widths[i];
  }
  return seq;
}

}  // namespace

void DLRMConfig::validate() const {
  TS_CHECK_T(ConfigError, dense_features > 0 && num_sparse_features > 0,
             "dlrm: dense_features (", dense_features, ") and the number of sparse features (",
             num_sparse_features, ") must be positive");
  TS_CHECK_T(ConfigError, !bottom_mlp.empty() && !top_mlp.empty(), "dlrm: config keys "
             "'model.bottom_mlp' and 'model.top_mlp' need at least one width each");
  for (int64_t w : bottom_mlp) TS_CHECK_T(ConfigError, w > 0, "dlrm: bottom_mlp width ", w);
  for (int64_t w : top_mlp) TS_CHECK_T(ConfigError, w > 0, "dlrm: top_mlp width ", w);
}

DLRMImpl::DLRMImpl(const DLRMConfig& config) : config_(config) {
  config_.validate();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config_.seed);
  bottom = register_module("bottom", mlp(config_.dense_features, config_.bottom_mlp, true, gen));
  const int64_t vectors = config_.num_sparse_features + 1;
  const int64_t top_in = config_.embedding_dim() + vectors * (vectors - 1) / 2;
  std::vector<int64_t> top_widths = config_.top_mlp;
  top_widths.push_back(1);
  top = register_module("top", mlp(top_in, top_widths, false, gen));
}

torch::Tensor DLRMImpl::forward(const torch::Tensor& dense,
                                const std::vector<torch::Tensor>& pooled) {
  TS_CHECK_T(ConfigError, static_cast<int64_t>(pooled.size()) == config_.num_sparse_features,
             "dlrm: ", pooled.size(), " pooled embeddings for ", config_.num_sparse_features,
             " sparse features");
  const torch::Tensor x = bottom->forward(dense);
  std::vector<torch::Tensor> vectors{x};
  vectors.insert(vectors.end(), pooled.begin(), pooled.end());
  const torch::Tensor t = torch::stack(vectors, 1);           // [B, F+1, D]
  const torch::Tensor z = torch::bmm(t, t.transpose(1, 2));   // [B, F+1, F+1]
  const int64_t n = t.size(1);
  const torch::Tensor li = torch::tril_indices(n, n, -1);      // strictly below the diagonal
  const torch::Tensor dots = z.index({torch::indexing::Slice(), li[0], li[1]});
  return top->forward(torch::cat({x, dots}, 1)).squeeze(1);
}

torch::Tensor DLRMImpl::loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::binary_cross_entropy_with_logits(logits, labels.to(logits.scalar_type()));
}

int64_t DLRMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace tessera::models
