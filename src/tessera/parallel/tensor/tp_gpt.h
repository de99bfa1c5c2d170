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
// A model-parallel rank may hold only part of the model (GptPart): some
// blocks, the embedding (first pipeline stage) and the head (last stage; the
// tied token embedding is held there too). embed(), blocks() and head_loss()
// run the parts; forward() and loss() need the whole model. Weights are filled
// one dense tensor at a time (models::for_each_initial_parameter), so no rank
// ever holds more than its part plus one dense block.
//
// Dropout (config.dropout) is the dense GPT's — after the embedding, on the
// attention probabilities, after each residual projection — drawn from
// TensorParallelOptions::dropout_rng: attention heads and, under sequence
// parallel, the residual stream from its split stream, the replicated residual
// stream from its replicated one (dropout_rng.h).
//
// A mixture-of-experts GPT (config.moe) holds 1/ep of each MoE layer's experts
// (TensorParallelOptions::expert, expert_parallel.h), each expert's width split
// over tp like the MLP's (models::MoETensorSplit); the router is whole. The
// routers' auxiliary losses enter the backward inside the blocks
// (models::attach_auxiliary_loss, weighted by set_auxiliary_loss_scale), so a
// pipeline stage trains them without seeing the loss; loss() adds their values.
//
// ConfigError (every rank, before any weight is built) when n_head, n_embd,
// 4 n_embd, vocab_size or the experts' widths do not divide by tp, when
// block_size does not under sequence parallel, when num_experts does not
// divide by ep, or when dropout > 0 without a dropout_rng. Under sequence
// parallel the MoE layers gather the tokens over tp, route all of them and
// reduce-scatter their outputs (models::MoETensorSplit).
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/tensor/tp_decoder.h"

namespace tessera::parallel {

// How a parameter of the tensor-parallel GPT relates to the dense one
// (dense_slice, parallel_layers.h, cuts it).
DenseSlice dense_slice_of(const std::string& parameter_name);

// Which part of the GPT a rank holds (tp_decoder.h); the default is all of it.
using GptPart = DecoderPart;

// The checks TensorParallelGPT makes of a layout, without building anything.
void check_tensor_parallel_layout(const models::GPTConfig& config, int tp, bool sequence_parallel);

class TensorParallelGPTImpl : public torch::nn::Module, public TpDecoder {
 public:
  TensorParallelGPTImpl(const models::GPTConfig& config, TensorParallelOptions tp,
                        GptPart part = {});

  // idx int64 [B, T] -> this rank's logits [B, T, vocab/tp].
  torch::Tensor forward(const torch::Tensor& idx);
  // Mean cross entropy over every token (the same value on every tp rank).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  // The parts (GptPart says which a rank holds; tessera::Error otherwise).
  // idx [B, T] -> the input of block 0, [B, T(/tp under sequence parallel), C].
  torch::Tensor embed(const torch::Tensor& idx) override;
  // Blocks [begin, end) on x [B, T(/tp), C].
  torch::Tensor blocks(int64_t begin, int64_t end, torch::Tensor x) override;
  // ln_f, the tied head and the vocab-parallel loss of x [B, T(/tp), C].
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets) override;
  // ln_f and the tied head: this rank's logits [B, T, vocab/tp] (compute dtype).
  torch::Tensor logits(const torch::Tensor& x) override;
  torch::Tensor tied_embedding() const override { return token_embedding(); }
  std::string tied_embedding_name() const override { return "wte.weight"; }
  DenseSlice slice_of(const std::string& name) const override { return dense_slice_of(name); }
  torch::nn::Module& module() override { return *this; }
  void set_auxiliary_loss_scale(double scale) override;
  double take_auxiliary_loss() override;
  torch::Tensor take_tokens_per_expert() override;

  const models::GPTConfig& config() const { return config_; }
  const TensorParallelOptions& tp() const { return tp_; }
  const GptPart& part() const { return part_; }
  // The tied token embedding (this rank's vocabulary rows); nullptr-like
  // (undefined) on a part without embedding or head.
  torch::Tensor token_embedding() const { return wte ? wte->weight : torch::Tensor(); }

 private:
  models::GPTConfig config_;
  TensorParallelOptions tp_;
  GptPart part_;
  VocabParallelEmbedding wte{nullptr};
  torch::Tensor wpe_;  // [block_size, C], registered as "wpe.weight"
  std::vector<torch::nn::AnyModule> blocks_;  // by dense index; empty where not held
  torch::nn::Module* ln_f_ = nullptr;
  // MoE: what the blocks' routers did since the last take.
  void record_routing(int64_t begin, int64_t end);
  torch::Tensor routed_;  // [n_layer, num_experts] int64
  double auxiliary_loss_ = 0;
};
TORCH_MODULE(TensorParallelGPT);

}  // namespace tessera::parallel
