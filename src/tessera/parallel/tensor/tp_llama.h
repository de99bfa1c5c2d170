// TensorParallelLlama: the Llama of models/llama.h split over a tensor-parallel
// group the Megatron way, computing what the dense model computes.
//
// Query heads and key/value heads are split across the tp ranks (q_proj, k_proj,
// v_proj column-parallel; o_proj row-parallel), so rank r holds query heads
// [r H/tp, (r+1) H/tp) and exactly the key/value heads they read under
// grouped-query attention; the SwiGLU MLP's gate_proj and up_proj are column-
// parallel and down_proj row-parallel; the token embedding and the LM head
// (its own weight, or the tied embedding) are split by vocabulary and the loss
// is the vocab-parallel cross entropy, so no rank builds the full
// [B, T, vocab] logits. RMSNorm weights are whole on every rank.
//
// With sequence_parallel the norm and residual regions hold 1/tp of the
// sequence (as tp_gpt.h describes); the norms' weights enter through
// copy_to_tp so their gradients are summed over the group. Rotary embeddings
// are applied inside attention, after each column-parallel projection has
// gathered the whole sequence, so positions are those of the whole sequence.
//
// Weights equal the dense Llama's of the same config: they are drawn one dense
// tensor at a time (models::for_each_initial_parameter) and each rank keeps its
// slice, so no rank holds more than its part plus one dense tensor. Parameter
// names are transformers' ("model.layers.0.self_attn.q_proj.weight").
//
// ConfigError (every rank, before any weight is built) when
// num_attention_heads, num_key_value_heads, intermediate_size or vocab_size do
// not divide by tp (key/value heads are not replicated across ranks: choose a
// tp that divides num_key_value_heads). float32 only; no dropout.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "tessera/models/llama.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/tensor/tp_decoder.h"

namespace tessera::parallel {

// How a parameter of the tensor-parallel Llama relates to the dense one.
DenseSlice llama_dense_slice_of(const std::string& parameter_name);

// The checks TensorParallelLlama makes of a layout, without building anything.
void check_llama_tensor_parallel_layout(const models::LlamaConfig& config, int tp);

class TensorParallelLlamaImpl : public torch::nn::Module, public TpDecoder {
 public:
  TensorParallelLlamaImpl(const models::LlamaConfig& config, TensorParallelOptions tp,
                          DecoderPart part = {});

  // idx int64 [B, T] -> this rank's logits [B, T, vocab/tp] (columns
  // [r vocab/tp, (r+1) vocab/tp) of the dense logits).
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross entropy over every token (the same value on every tp rank).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  torch::Tensor embed(const torch::Tensor& idx) override;
  torch::Tensor blocks(int64_t begin, int64_t end, torch::Tensor x) override;
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets) override;
  torch::Tensor tied_embedding() const override;
  std::string tied_embedding_name() const override;
  DenseSlice slice_of(const std::string& name) const override { return llama_dense_slice_of(name); }
  torch::nn::Module& module() override { return *this; }

  // The final norm and the head on the last block's output x [B, T(/tp), C]:
  // this rank's logits [B, T, vocab/tp] (a rank holding the head only).
  torch::Tensor logits(const torch::Tensor& x) override;

  const models::LlamaConfig& config() const { return config_; }

 private:
  models::LlamaConfig config_;
  TensorParallelOptions tp_;
  DecoderPart part_;
  VocabParallelEmbedding embed_tokens_{nullptr};  // "model.embed_tokens"
  std::vector<torch::nn::AnyModule> layers_;      // by dense index; empty where not held
  torch::nn::Module* norm_ = nullptr;             // "model.norm"
  torch::Tensor lm_head_;                         // "lm_head.weight" [vocab/tp, C], untied only
};
TORCH_MODULE(TensorParallelLlama);

}  // namespace tessera::parallel
