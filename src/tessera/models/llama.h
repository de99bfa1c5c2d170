// Llama: the Llama-family decoder-only transformer (Llama 2 and 3, and the many
// models built like them), computing what Hugging Face's LlamaForCausalLM
// computes, with its parameter names.
//
// Token embedding (no position table), num_hidden_layers pre-norm layers (RMSNorm,
// then grouped-query causal self-attention with rotary position embeddings
// (rope.h), then a residual; RMSNorm, then the SwiGLU MLP
// down(silu(gate(x)) * up(x)), then a residual), a final RMSNorm and a language-
// model head, its own Linear or tied to the embedding (tie_word_embeddings).
//
// Parameters are named as in transformers, so a checkpoint maps one to one:
// model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight,
// model.layers.N.mlp.{gate,up,down}_proj.weight,
// model.layers.N.{input,post_attention}_layernorm.weight, model.norm.weight and
// lm_head.weight (absent when tied). The projections are separate Linears so
// that tensor parallelism can split q/k/v/gate/up by columns and o/down by rows.
// The layers sit in a torch::nn::Sequential (ZeRO stage 3 can wrap them); each
// layer computes its rotary table from the sequence length, so a layer's forward
// takes the hidden states alone.
//
// Initialization follows transformers: every Linear and the embedding
// ~ N(0, initializer_range), biases zero, RMSNorm weights one, drawn in
// registration order from a private generator seeded with config.seed: every
// rank that builds a Llama from the same config gets bit-identical weights
// without touching the global RNG.
//
// Ownership and threads: an ordinary torch::nn module (use through the Llama
// holder). Not thread-safe; one training thread per instance. float32 compute;
// any device.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/models/rope.h"

namespace tessera::models {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 172;  // the MLP's width (Llama: about 8/3 hidden_size)
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  // Grouped-query attention: each key/value head serves
  // num_attention_heads / num_key_value_heads query heads (equal: multi-head).
  int64_t num_key_value_heads = 4;
  int64_t head_dim = 0;                  // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 64;  // longest sequence forward() accepts
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // biases in q/k/v/o_proj
  bool mlp_bias = false;        // biases in gate/up/down_proj
  double initializer_range = 0.02;
  uint64_t seed = 1337;  // weight initialization seed

  // head_dim, or hidden_size / num_attention_heads when it is 0.
  int64_t effective_head_dim() const;
  // ConfigError naming the field when a value is out of range.
  void validate() const;
};

// weight * x / sqrt(mean(x^2) + eps) over the last dimension, computed in
// float32 and returned in x's dtype. The one RMSNorm arithmetic of every Llama
// layout (the tensor-parallel norm passes its sequence-parallel weight).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The attention core between the projections: q [B, T, heads * head_dim] and
// k, v [B, T, kv_heads * head_dim] -> causal grouped-query attention with RoPE
// on q and k -> [B, T, heads * head_dim]. Query head h reads kv head
// h / (heads / kv_heads), as transformers' repeat_kv lays them out; a
// tensor-parallel rank passes its local head counts, which keep that grouping
// because both counts divide by tp.
// `core` computes causal attention of q, k, v [B, heads, T, head_dim] (the kv
// heads already repeated); empty: scaled_dot_product_attention. Context
// parallelism passes attention across its ranks.
using AttentionCore = std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v)>;
torch::Tensor llama_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, const torch::Tensor& cos,
                              const torch::Tensor& sin, const AttentionCore& core = {});

// weight * x / sqrt(mean(x^2) + eps) over the last dimension (rms_norm).
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t size, double eps);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(LlamaRMSNorm);

// Causal grouped-query self-attention with RoPE on q and k.
class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& config);
  // x: [B, T, hidden_size] -> [B, T, hidden_size]; cos, sin from rope_cos_sin.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  torch::nn::Linear q_proj{nullptr};  // hidden -> heads * head_dim
  torch::nn::Linear k_proj{nullptr};  // hidden -> kv_heads * head_dim
  torch::nn::Linear v_proj{nullptr};  // hidden -> kv_heads * head_dim
  torch::nn::Linear o_proj{nullptr};  // heads * head_dim -> hidden

 private:
  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

// x + self_attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x)).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaConfig& config);
  torch::Tensor forward(torch::Tensor x);  // [B, T, hidden_size]

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  // The rotary frequencies: a constant of the config, kept out of the
  // module's buffers so that checkpoints and DDP's broadcast never see it.
  torch::Tensor inv_freq_;
};
TORCH_MODULE(LlamaDecoderLayer);

// The decoder without its head (transformers' LlamaModel): the "model." part.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& config);
  torch::Tensor forward(const torch::Tensor& idx);  // [B, T] -> [B, T, hidden_size]

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::Sequential layers{nullptr};  // LlamaDecoderLayers, called in order
  LlamaRMSNorm norm{nullptr};
};
TORCH_MODULE(LlamaModel);

class LlamaImpl : public torch::nn::Module {
 public:
  // Builds and initializes the model; ConfigError if the config is invalid.
  explicit LlamaImpl(const LlamaConfig& config);

  // idx: int64 [B, T] token ids with 1 <= T <= max_position_embeddings
  // (tessera::Error otherwise). Returns float32 logits [B, T, vocab_size].
  torch::Tensor forward(const torch::Tensor& idx);

  // Mean cross entropy of forward(idx) against targets (int64 [B, T]).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets);

  // Number of parameters (a tied head counted once, as it is stored once).
  int64_t num_parameters() const;

  const LlamaConfig& config() const { return config_; }

  LlamaModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // nullptr when tie_word_embeddings

 private:
  void init_weights();
  LlamaConfig config_;
};
TORCH_MODULE(Llama);

// The Llama's initial parameters for `config`, in registration order, one
// dense tensor at a time: bit-identical to what Llama(config) holds after
// construction (it draws through this very function). Tensor- and pipeline-
// parallel ranks keep the slices they own without ever holding the whole
// model. `visit` may keep the tensor it is given. ConfigError if the config is
// invalid.
// Every parameter of Llama(config) with its shape, in registration order.
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_parameter_shapes(
    const LlamaConfig& config);

using LlamaParameterVisitor =
    std::function<void(const std::string& name, const torch::Tensor& value)>;
void for_each_initial_parameter(const LlamaConfig& config, const LlamaParameterVisitor& visit);

}  // namespace tessera::models
