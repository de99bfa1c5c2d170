// GPT: a GPT-2 style decoder-only transformer, the reference model `tessera train`
// trains and the model the parallel layers are checked against.
//
// Token + learned position embeddings, n_layer pre-LayerNorm blocks (causal
// self-attention with an explicit mask, then a 4x GELU MLP, each with a residual
// connection), a final LayerNorm and a language-model head tied to the token
// embedding (the head has no parameter of its own: logits = x @ wte^T).
//
// Initialization follows GPT-2: every Linear and Embedding weight ~ N(0, 0.02),
// biases zero, LayerNorm (1, 0), and the residual projections (attention c_proj and
// MLP c_proj) ~ N(0, 0.02 / sqrt(2 * n_layer)). It draws from a private generator
// seeded with config.seed, so every rank that builds a GPT from the same config
// gets bit-identical weights without touching the global RNG.
//
// Ownership and threads: an ordinary torch::nn module (use through the GPT
// holder). Not thread-safe; one training thread per instance.
#pragma once

#include <torch/torch.h>

#include "tessera/models/moe.h"

#include <cstdint>
#include <functional>
#include <string>

namespace tessera::models {

struct GPTConfig {
  int64_t vocab_size = 256;  // 256: raw bytes
  int64_t block_size = 64;   // maximum sequence length (position table size)
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t n_embd = 64;  // must be divisible by n_head
  double dropout = 0.0;
  bool bias = true;      // biases in Linear and LayerNorm layers
  // The MLP's GELU: false is the exact erf form (torch's default), true the tanh
  // approximation GPT-2 was trained with (Hugging Face's "gelu_new"). The two
  // differ by up to 4.7e-4 per activation, enough to move a pretrained model's
  // logits, so a checkpoint must run with the form it was trained with.
  bool gelu_tanh = false;
  double layer_norm_eps = 1e-5;  // every LayerNorm's epsilon (GPT-2: 1e-5)
  // Tessera's fused CPU attention core (models/ops/causal_attention.h) where it
  // applies: float32 on CPU, and no attention dropout while training. false
  // always runs the LibTorch composition. Same math either way, to float ulps.
  bool fused_attention = true;
  uint64_t seed = 1337;  // weight initialization seed
  // The activations' dtype: float32, or bfloat16/float16 for mixed precision.
  // Parameters stay float32; with 16-bit activations every op computes in
  // float32 and rounds its result to 16 bits (low_precision.h), so autograd
  // keeps half the bytes. forward() then returns 16-bit logits; loss() is
  // float32 either way.
  at::ScalarType compute_dtype = at::kFloat;
  // Activation checkpointing (activation_checkpoint.h) while training: 0 keeps
  // every activation; n > 0 cuts the blocks into n segments of consecutive
  // blocks, each recomputed in backward (n_layer: every block on its own).
  int64_t activation_checkpoints = 0;
  // Mixture of experts (moe.h): with moe.num_experts > 0 every block's MLP is
  // an MoE layer ("h.<i>.moe.*" instead of "h.<i>.mlp.*"), and loss() adds its
  // load-balancing and z losses.
  MoEConfig moe;
  // ConfigError naming the field when a value is out of range.
  void validate() const;
};

// Causal self-attention: softmax(q k^T / sqrt(d) + mask) v with a -inf upper
// triangle, so position t only sees positions <= t. O(T^2) memory per head.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  // x: [B, T, C] -> [B, T, C].
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_attn{nullptr};  // C -> 3C (q, k, v)
  torch::nn::Linear c_proj{nullptr};  // C -> C, residual projection
  torch::nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};

 private:
  // The matmul/mask/softmax composition: any dtype and device, attention dropout.
  torch::Tensor attend_composed(const torch::Tensor& qkv, int64_t B, int64_t T);

  int64_t n_head_;
  int64_t n_embd_;
  bool fused_attention_;
  double attn_dropout_p_;
};
TORCH_MODULE(CausalSelfAttention);

class GPTMLPImpl : public torch::nn::Module {
 public:
  explicit GPTMLPImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [B,T,C] -> [B,T,C]

  torch::nn::Linear c_fc{nullptr};    // C -> 4C
  torch::nn::Linear c_proj{nullptr};  // 4C -> C, residual projection
  torch::nn::Dropout dropout{nullptr};

 private:
  std::string gelu_approximate_;  // torch::gelu's "none" or "tanh"
};
TORCH_MODULE(GPTMLP);

// Dropout and LayerNorm for activations of any dtype: float32 inputs go straight
// to the module; 16-bit ones through fp32_island (float32 compute, 16-bit
// result, the same dropout mask when recomputed).
torch::Tensor dropout_lowp(torch::nn::Dropout& dropout, const torch::Tensor& x);
torch::Tensor layer_norm_lowp(torch::nn::LayerNorm& ln, const torch::Tensor& x);

// x + attn(ln_1(x)), then x + mlp(ln_2(x)) (or moe(ln_2(x)) with experts).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GPTConfig& config);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMLP mlp{nullptr};  // without experts
  MoELayer moe{nullptr};  // with config.moe.num_experts > 0
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  // Builds and initializes the model; ConfigError if the config is invalid.
  explicit GPTImpl(const GPTConfig& config);

  // idx: int64 [B, T] token ids with T <= block_size and ids < vocab_size
  // (tessera::Error otherwise). Returns logits [B, T, vocab_size].
  torch::Tensor forward(const torch::Tensor& idx);

  // Mean cross entropy of forward(idx) against targets (int64 [B, T]), plus
  // the MoE layers' auxiliary losses when the model has experts.
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  // MoE: every layer's kept assignments per expert in the last forward,
  // [n_layer, num_experts] int64 (undefined without experts).
  torch::Tensor tokens_per_expert() const;

  // Autoregressive sampling for a text sample: appends max_new_tokens tokens to
  // prompt (int64 [T] or [1, T], T >= 1), conditioning on at most the last
  // block_size tokens. temperature > 0 scales the logits; top_k > 0 keeps only the
  // k most likely tokens. Draws from a private generator seeded with `seed`, so
  // the same call gives the same text. Runs in eval mode without autograd and
  // restores the previous train/eval mode. Returns int64 [1, T + max_new_tokens].
  torch::Tensor generate(const torch::Tensor& prompt, int64_t max_new_tokens,
                         double temperature = 1.0, int64_t top_k = 0, uint64_t seed = 0);

  // Number of parameters (the tied head counted once). With
  // exclude_position_embeddings, leaves out wpe as GPT-2's reporting does.
  int64_t num_parameters(bool exclude_position_embeddings = false) const;

  const GPTConfig& config() const { return config_; }

  torch::nn::Embedding wte{nullptr};  // token embedding, also the LM head
  torch::nn::Embedding wpe{nullptr};  // position embedding
  torch::nn::Dropout drop{nullptr};
  torch::nn::Sequential h{nullptr};  // Blocks, called in order (ZeRO-3 can wrap them)
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  void init_weights();
  torch::Tensor checkpointed_blocks(torch::Tensor x);  // config.activation_checkpoints segments
  GPTConfig config_;
};
TORCH_MODULE(GPT);

// The GPT's initial parameters, one at a time, in registration order, with the
// names and values GPT(config) would hold ("wte.weight", "h.0.ln_1.weight", ...,
// "ln_f.bias"). Builds one block at a time, so a model-parallel rank can keep
// the slices it owns without ever holding the whole model. `visit` may keep
// the tensor it is given.
using ParameterVisitor = std::function<void(const std::string& name, const torch::Tensor& value)>;
void for_each_initial_parameter(const GPTConfig& config, const ParameterVisitor& visit);

}  // namespace tessera::models
