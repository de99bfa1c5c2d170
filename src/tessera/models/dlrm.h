// DLRM: the dense part of a deep learning recommendation model (Naumov et al.,
// 2019), for click prediction.
//
//   bottom MLP     dense features [B, dense_features] -> [B, D] (ReLU after each layer)
//   interaction    the bottom output and the F pooled embeddings [B, D] stacked,
//                  every pairwise dot product (F+1 choose 2), concatenated with
//                  the bottom output
//   top MLP        -> [B] logits (ReLU between layers, none after the last)
//   loss           binary cross-entropy with logits against 0/1 labels
//
// The embedding tables are not in this module: they are sharded over ranks and
// trained by sparse Adagrad (parallel/embedding/), while these parameters train
// data-parallel through the Engine. Weights come from a private generator seeded
// with config.seed (N(0, sqrt(2 / (fan_in + fan_out))), biases N(0, sqrt(1 / fan_out)),
// as DLRM's reference code), the same on every rank. An ordinary module.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tessera::models {

struct DLRMConfig {
  int64_t dense_features = 8;
  int64_t num_sparse_features = 6;
  std::vector<int64_t> bottom_mlp = {64, 16};  // the last width is the embedding dim
  std::vector<int64_t> top_mlp = {64, 32};     // then a Linear to one logit
  uint64_t seed = 1234;
  int64_t embedding_dim() const { return bottom_mlp.empty() ? 0 : bottom_mlp.back(); }
  void validate() const;  // ConfigError naming the field
};

class DLRMImpl : public torch::nn::Module {
 public:
  explicit DLRMImpl(const DLRMConfig& config);
  // dense [B, dense_features], pooled: num_sparse_features tensors [B, D] -> logits [B].
  torch::Tensor forward(const torch::Tensor& dense, const std::vector<torch::Tensor>& pooled);
  // Mean binary cross-entropy of logits [B] against labels [B] (0 or 1).
  static torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& labels);
  int64_t num_parameters() const;
  const DLRMConfig& config() const { return config_; }

  torch::nn::Sequential bottom{nullptr}, top{nullptr};

 private:
  DLRMConfig config_;
};
TORCH_MODULE(DLRM);

}  // namespace tessera::models
