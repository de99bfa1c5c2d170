// TensorParallelGPT: the GPT of models/gpt.h split over a tensor-parallel group
// the Megatron way. Attention heads and MLP columns are split across the tp
// ranks (qkv and c_fc column-parallel, both c_proj row-parallel), the token
// embedding (and with it the tied LM head) by vocabulary, and the loss is the
// vocab-parallel cross entropy, so no rank builds the full [B, T, vocab] logits.
// Position embeddings and LayerNorms are whole on every rank.
//
// With sequence_parallel the LayerNorm and residual regions hold 1/tp of the
// sequence: the embedding's sum and each row-parallel output are reduce-scattered
// along the sequence, and each column-parallel input is all-gathered; the whole
// parameters used there (LayerNorms, wpe, row biases) enter through copy_to_tp,
// so their gradients are summed over the group by the graph itself.
//
// Weights equal the dense GPT's of the same config: every rank builds the dense
// GPT once (same seed, so the same weights everywhere) and keeps its slices.
// Parameter names are the dense GPT's ("h.0.attn.c_attn.weight"), with each
// rank holding its slice (dense_slice_of says which).
//
// ConfigError (every rank, before any weight is built) when n_head, n_embd,
// 4 n_embd or vocab_size do not divide by tp, when block_size does not under
// sequence parallel, or when dropout > 0 (not supported under tensor parallel).
#pragma once

#include <torch/torch.h>

#include "tessera/models/gpt.h"
#include "tessera/parallel/tensor/parallel_layers.h"

namespace tessera::parallel {

// How a parameter of the tensor-parallel GPT relates to the dense one.
struct DenseSlice {
  enum class Kind { kWhole, kRows, kColumns } kind = Kind::kWhole;
  int64_t blocks = 1;  // kRows of [q; k; v]: each rank takes its part of each block
};
DenseSlice dense_slice_of(const std::string& parameter_name);

class TensorParallelGPTImpl : public torch::nn::Module {
 public:
  TensorParallelGPTImpl(const models::GPTConfig& config, TensorParallelOptions tp);

  // idx int64 [B, T] -> this rank's logits [B, T, vocab/tp].
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross entropy over every token (the same value on every tp rank).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  const models::GPTConfig& config() const { return config_; }
  const TensorParallelOptions& tp() const { return tp_; }

 private:
  torch::Tensor hidden(const torch::Tensor& idx);  // through ln_f, [B, T(/tp), C]
  models::GPTConfig config_;
  TensorParallelOptions tp_;
  VocabParallelEmbedding wte{nullptr};
  torch::Tensor wpe_;  // [block_size, C], registered as "wpe.weight"
  torch::nn::Sequential h{nullptr};
  torch::nn::Module* ln_f_ = nullptr;
};
TORCH_MODULE(TensorParallelGPT);

}  // namespace tessera::parallel
