#include "tessera/parallel/tensor/tp_llama.h"

#include "tessera/core/check.h"
#include "tessera/models/rope.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

namespace {

bool has_suffix(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// RMSNorm whose weight is whole on every rank; under sequence parallel each rank
// normalizes its part of the sequence, so the weight's gradient is partial and
// the weight enters through copy_to_tp.
class TpRMSNormImpl : public torch::nn::Module {
 public:
  TpRMSNormImpl(int64_t size, double eps, TensorParallelOptions tp) : eps_(eps), tp_(std::move(tp)) {
    weight = register_parameter("weight", torch::ones({size}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return models::rms_norm(x, tp_.sequence_parallel ? copy_to_tp(weight, *tp_.group) : weight,
                            eps_);
  }
  torch::Tensor weight;

 private:
  double eps_;
  TensorParallelOptions tp_;
};
TORCH_MODULE(TpRMSNorm);

// This rank's query heads and the key/value heads they read.
class TpLlamaAttentionImpl : public torch::nn::Module {
 public:
  TpLlamaAttentionImpl(const models::LlamaConfig& c, const TensorParallelOptions& tp)
      : context_(tp.context),
        heads_(c.num_attention_heads / tp.group->size()),
        kv_heads_(c.num_key_value_heads / tp.group->size()),
        head_dim_(c.effective_head_dim()) {
    const int64_t C = c.hidden_size, q = c.num_attention_heads * head_dim_;
    const int64_t kv = c.num_key_value_heads * head_dim_;
    q_proj = register_module("q_proj", ColumnParallelLinear(C, q, tp, c.attention_bias));
    k_proj = register_module("k_proj", ColumnParallelLinear(C, kv, tp, c.attention_bias));
    v_proj = register_module("v_proj", ColumnParallelLinear(C, kv, tp, c.attention_bias));
    o_proj = register_module("o_proj", RowParallelLinear(q, C, tp, c.attention_bias));
  }
  // x [B, T(/tp), C]; cos, sin for the whole sequence. The column-parallel
  // projections gather the sequence, so attention sees all of it.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    models::AttentionCore core;
    if (context_.enabled()) {
      core = [this](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return context_parallel_attention(q, k, v, /*causal=*/true, context_);
      };
    }
    return o_proj(models::llama_attention(q_proj(x), k_proj(x), v_proj(x), heads_, kv_heads_,
                                          head_dim_, cos, sin, core));
  }
  ColumnParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  RowParallelLinear o_proj{nullptr};

 private:
  ContextParallelOptions context_;
  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(TpLlamaAttention);

class TpLlamaMLPImpl : public torch::nn::Module {
 public:
  TpLlamaMLPImpl(const models::LlamaConfig& c, const TensorParallelOptions& tp) {
    const int64_t C = c.hidden_size, I = c.intermediate_size;
    gate_proj = register_module("gate_proj", ColumnParallelLinear(C, I, tp, c.mlp_bias));
    up_proj = register_module("up_proj", ColumnParallelLinear(C, I, tp, c.mlp_bias));
    down_proj = register_module("down_proj", RowParallelLinear(I, C, tp, c.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
  }
  ColumnParallelLinear gate_proj{nullptr}, up_proj{nullptr};
  RowParallelLinear down_proj{nullptr};
};
TORCH_MODULE(TpLlamaMLP);

class TpLlamaLayerImpl : public torch::nn::Module {
 public:
  TpLlamaLayerImpl(const models::LlamaConfig& c, const TensorParallelOptions& tp)
      : tp_(tp),
        inv_freq_(models::rope_inv_freq(c.effective_head_dim(), c.rope_theta, c.rope_scaling)) {
    // transformers' registration order, as the dense layer.
    self_attn = register_module("self_attn", TpLlamaAttention(c, tp));
    mlp = register_module("mlp", TpLlamaMLP(c, tp));
    input_layernorm = register_module("input_layernorm", TpRMSNorm(c.hidden_size, c.rms_norm_eps, tp));
    post_attention_layernorm =
        register_module("post_attention_layernorm", TpRMSNorm(c.hidden_size, c.rms_norm_eps, tp));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t T = tp_.sequence_parallel ? x.size(1) * tp_.group->size() : x.size(1);
    const int cp = tp_.context.size();
    auto [cos, sin] = models::rope_cos_sin(inv_freq_, T * cp, x.device());
    if (tp_.context.enabled()) {
      // The rotations of this rank's chunks' positions.
      auto pos = context_parallel_positions(T * cp, tp_.context.rank(), cp).to(x.device());
      cos = cos.index_select(0, pos);
      sin = sin.index_select(0, pos);
    }
    x = x + self_attn(input_layernorm(x), cos, sin);
    return x + mlp(post_attention_layernorm(x));
  }
  TpLlamaAttention self_attn{nullptr};
  TpLlamaMLP mlp{nullptr};
  TpRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  TensorParallelOptions tp_;
  torch::Tensor inv_freq_;  // a constant of the config, not a buffer (as in the dense layer)
};
TORCH_MODULE(TpLlamaLayer);

}  // namespace

DenseSlice llama_dense_slice_of(const std::string& name) {
  for (const char* rows : {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                           "v_proj.weight", "v_proj.bias", "gate_proj.weight", "gate_proj.bias",
                           "up_proj.weight", "up_proj.bias"}) {
    if (has_suffix(name, rows)) return {DenseSlice::Kind::kRows, 1};
  }
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    return {DenseSlice::Kind::kRows, 1};
  }
  if (has_suffix(name, "o_proj.weight") || has_suffix(name, "down_proj.weight")) {
    return {DenseSlice::Kind::kColumns, 1};
  }
  return {};
}

void check_llama_tensor_parallel_layout(const models::LlamaConfig& c, int n) {
  c.validate();
  auto divides = [n](const char* key, int64_t v, const char* why) {
    TS_CHECK_T(ConfigError, v % n == 0, "model.", key, " ", v,
               " does not divide by tensor_model_parallel_size ", n, ": ", why);
  };
  divides("num_attention_heads", c.num_attention_heads,
          "every tensor-parallel rank needs whole attention heads");
  divides("num_key_value_heads", c.num_key_value_heads,
          "every tensor-parallel rank needs whole key/value heads (they are not replicated "
          "across ranks); choose a tensor_model_parallel_size that divides them");
  divides("intermediate_size", c.intermediate_size,
          "the MLP's columns are split evenly across the tensor-parallel ranks");
  divides("vocab_size", c.vocab_size, "pad the vocabulary to a multiple of it");
}

TensorParallelLlamaImpl::TensorParallelLlamaImpl(const models::LlamaConfig& config,
                                                 TensorParallelOptions tp, DecoderPart part)
    : config_(config), tp_(std::move(tp)), part_(std::move(part)) {
  tp_.draw_weights = tp_.draw_weights && part_.initialize;  // no placeholder draws either
  TS_CHECK_T(ConfigError, tp_.group != nullptr, "TensorParallelLlama needs a tensor-parallel group");
  check_llama_tensor_parallel_layout(config_, tp_.group->size());
  const int64_t L = config_.num_hidden_layers, C = config_.hidden_size;
  if (part_.blocks.empty()) part_.blocks.emplace_back(0, L);
  for (const auto& [b, e] : part_.blocks) {
    TS_CHECK_T(ConfigError, 0 <= b && b < e && e <= L, "TensorParallelLlama: layer range [", b,
               ", ", e, ") is outside the model's ", L, " layers");
  }
  const bool tied = config_.tie_word_embeddings;
  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  if (part_.embedding || (part_.head && tied)) {
    embed_tokens_ = model->register_module(
        "embed_tokens", VocabParallelEmbedding(config_.vocab_size, C, tp_));
  }
  auto layers = model->register_module("layers", std::make_shared<torch::nn::Module>());
  layers_.resize(static_cast<size_t>(L));
  for (const auto& [b, e] : part_.blocks) {
    for (int64_t i = b; i < e; ++i) {
      layers_[static_cast<size_t>(i)] =
          torch::nn::AnyModule(layers->register_module(std::to_string(i), TpLlamaLayer(config_, tp_)));
    }
  }
  if (part_.head) {
    norm_ = model->register_module("norm", TpRMSNorm(C, config_.rms_norm_eps, tp_)).get();
    if (!tied) {
      auto head = register_module("lm_head", std::make_shared<torch::nn::Module>());
      lm_head_ = head->register_parameter(
          "weight", torch::zeros({config_.vocab_size / tp_.group->size(), C}));
    }
  }

  if (!part_.initialize) return;  // the caller loads every weight
  // The dense Llama's weights, sliced: same seed, same weights as a dense run.
  fill_from_dense(
      *this,
      [this](const DenseTensorVisitor& visit) { models::for_each_initial_parameter(config_, visit); },
      llama_dense_slice_of, tp_.group->rank(), tp_.group->size(), "TensorParallelLlama");
}

torch::Tensor TensorParallelLlamaImpl::embed(const torch::Tensor& idx) {
  TS_CHECK(part_.embedding, "TensorParallelLlama.embed: this rank does not hold the embedding");
  TS_CHECK(idx.dim() == 2, "TensorParallelLlama.forward expects idx of shape [B, T], got ", idx.sizes());
  const int64_t T = idx.size(1);
  TS_CHECK(T >= 1 && T <= config_.max_position_embeddings, "TensorParallelLlama.forward: sequence ",
           "length ", T, " is outside [1, max_position_embeddings = ",
           config_.max_position_embeddings, "]");
  TS_CHECK(!tp_.sequence_parallel || T % tp_.group->size() == 0, "TensorParallelLlama: sequence ",
           "length ", T, " does not divide by tensor_model_parallel_size ", tp_.group->size(),
           " under sequence_parallel");
  return embed_tokens_(idx);  // [B, T(/tp), C]
}

torch::Tensor TensorParallelLlamaImpl::blocks(int64_t begin, int64_t end, torch::Tensor x) {
  for (int64_t i = begin; i < end; ++i) {
    auto& layer = layers_.at(static_cast<size_t>(i));
    TS_CHECK(!layer.is_empty(), "TensorParallelLlama: this rank does not hold layer ", i);
    x = layer.forward(x);
  }
  return x;
}

torch::Tensor TensorParallelLlamaImpl::logits(const torch::Tensor& hidden) {
  TS_CHECK(part_.head, "TensorParallelLlama: this rank does not hold the head");
  comm::ProcessGroup& g = *tp_.group;
  auto x = norm_->as<TpRMSNorm>()->forward(hidden);
  // The head needs every position on every rank; its input's gradient is partial
  // (this rank's vocabulary only) and is summed by the conjugate.
  x = tp_.sequence_parallel ? gather_from_sequence(x, g) : copy_to_tp(x, g);
  return torch::linear(x, config_.tie_word_embeddings ? embed_tokens_->weight : lm_head_);
}

torch::Tensor TensorParallelLlamaImpl::head_loss(const torch::Tensor& x, const torch::Tensor& targets) {
  auto out = logits(x);
  return vocab_parallel_cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}),
                                      *tp_.group);
}

torch::Tensor TensorParallelLlamaImpl::tied_embedding() const {
  return config_.tie_word_embeddings && embed_tokens_ ? embed_tokens_->weight : torch::Tensor();
}

std::string TensorParallelLlamaImpl::tied_embedding_name() const {
  return config_.tie_word_embeddings ? "model.embed_tokens.weight" : "";
}

torch::Tensor TensorParallelLlamaImpl::forward(const torch::Tensor& idx) {
  return logits(blocks(0, config_.num_hidden_layers, embed(idx)));
}

torch::Tensor TensorParallelLlamaImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  return head_loss(blocks(0, config_.num_hidden_layers, embed(idx)), targets);
}

}  // namespace tessera::parallel
