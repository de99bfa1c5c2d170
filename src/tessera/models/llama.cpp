#include "tessera/models/llama.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "tessera/core/check.h"
#include "tessera/models/module_scope.h"

namespace tessera::models {

namespace F = torch::nn::functional;

int64_t LlamaConfig::effective_head_dim() const {
  return head_dim > 0 ? head_dim : hidden_size / std::max<int64_t>(num_attention_heads, 1);
}

void LlamaConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    TS_CHECK_T(ConfigError, v > 0, "LlamaConfig.", field, " must be > 0, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("max_position_embeddings", max_position_embeddings);
  TS_CHECK_T(ConfigError, num_attention_heads % num_key_value_heads == 0,
             "LlamaConfig.num_key_value_heads (", num_key_value_heads,
             ") must divide num_attention_heads (", num_attention_heads, ")");
  TS_CHECK_T(ConfigError, head_dim >= 0, "LlamaConfig.head_dim must be >= 0 (0: hidden_size / ",
             "num_attention_heads), got ", head_dim);
  TS_CHECK_T(ConfigError, head_dim > 0 || hidden_size % num_attention_heads == 0,
             "LlamaConfig.hidden_size (", hidden_size, ") must be a multiple of ",
             "num_attention_heads (", num_attention_heads, ") unless head_dim is set");
  TS_CHECK_T(ConfigError, effective_head_dim() % 2 == 0, "LlamaConfig.head_dim must be even ",
             "(rotary embeddings rotate pairs of dimensions), got ", effective_head_dim());
  TS_CHECK_T(ConfigError, rms_norm_eps > 0 && std::isfinite(rms_norm_eps),
             "LlamaConfig.rms_norm_eps must be a positive number, got ", rms_norm_eps);
  TS_CHECK_T(ConfigError, rope_theta > 0 && std::isfinite(rope_theta),
             "LlamaConfig.rope_theta must be a positive number, got ", rope_theta);
  TS_CHECK_T(ConfigError, initializer_range >= 0 && std::isfinite(initializer_range),
             "LlamaConfig.initializer_range must be >= 0, got ", initializer_range);
  rope_scaling.validate("LlamaConfig");
}

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t size, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({size}));
}

torch::Tensor LlamaRMSNormImpl::forward(const torch::Tensor& x) {
  return rms_norm(x, weight, eps_);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(c10::IntArrayRef{-1}, /*keepdim=*/true) + eps);
  return weight * h.to(x.scalar_type());
}

torch::Tensor llama_attention(const torch::Tensor& q_flat, const torch::Tensor& k_flat,
                              const torch::Tensor& v_flat, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, const torch::Tensor& cos,
                              const torch::Tensor& sin, const AttentionCore& core) {
  const int64_t B = q_flat.size(0), T = q_flat.size(1);
  // [B, T, n * hd] -> [B, n, T, hd]
  auto split_heads = [&](const torch::Tensor& t, int64_t n) {
    return t.view({B, T, n, head_dim}).transpose(1, 2);
  };
  auto q = apply_rope(split_heads(q_flat, heads), cos, sin);
  auto k = apply_rope(split_heads(k_flat, kv_heads), cos, sin);
  auto v = split_heads(v_flat, kv_heads);
  if (kv_heads != heads) {
    const int64_t group = heads / kv_heads;
    k = k.repeat_interleave(group, /*dim=*/1);
    v = v.repeat_interleave(group, /*dim=*/1);
  }
  auto y = core ? core(q, k, v)
                : at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                   /*is_causal=*/true);
  return y.transpose(1, 2).reshape({B, T, heads * head_dim});
}

namespace {
torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
}  // namespace

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c)
    : heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.effective_head_dim()) {
  const int64_t C = c.hidden_size;
  q_proj = register_module("q_proj", make_linear(C, heads_ * head_dim_, c.attention_bias));
  k_proj = register_module("k_proj", make_linear(C, kv_heads_ * head_dim_, c.attention_bias));
  v_proj = register_module("v_proj", make_linear(C, kv_heads_ * head_dim_, c.attention_bias));
  o_proj = register_module("o_proj", make_linear(heads_ * head_dim_, C, c.attention_bias));
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                          const torch::Tensor& sin) {
  ModuleScope scope(this);
  return o_proj(llama_attention(q_proj(x), k_proj(x), v_proj(x), heads_, kv_heads_, head_dim_,
                                cos, sin));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& c) {
  gate_proj =
      register_module("gate_proj", make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj =
      register_module("down_proj", make_linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) {
  ModuleScope scope(this);
  return down_proj(F::silu(gate_proj(x)) * up_proj(x));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c)
    : inv_freq_(rope_inv_freq(c.effective_head_dim(), c.rope_theta, c.rope_scaling)) {
  // transformers' registration order, which is also its state_dict order.
  self_attn = register_module("self_attn", LlamaAttention(c));
  mlp = register_module("mlp", LlamaMLP(c));
  input_layernorm = register_module("input_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor LlamaDecoderLayerImpl::forward(torch::Tensor x) {
  ModuleScope scope(this);
  // T x head_dim cos and sin per layer: negligible next to the projections, and
  // it keeps the layer a one-input module that a Sequential can hold.
  auto [cos, sin] = rope_cos_sin(inv_freq_, x.size(1), x.device());
  x = x + self_attn(input_layernorm(x), cos, sin);
  return x + mlp(post_attention_layernorm(x));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::Sequential());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(LlamaDecoderLayer(c));
  norm = register_module("norm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& idx) {
  ModuleScope scope(this);
  // Through the Sequential's modules, so ZeRO stage 3 can wrap the layers.
  return norm(layers->forward(embed_tokens(idx)));
}

LlamaImpl::LlamaImpl(const LlamaConfig& config) : config_(config) {
  config_.validate();
  model = register_module("model", LlamaModel(config_));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_linear(config_.hidden_size, config_.vocab_size,
                                                     /*bias=*/false));
  }
  init_weights();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_parameter_shapes(
    const LlamaConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  auto linear = [&](const std::string& name, int64_t in, int64_t out_features, bool bias) {
    out.emplace_back(name + ".weight", std::vector<int64_t>{out_features, in});
    if (bias) out.emplace_back(name + ".bias", std::vector<int64_t>{out_features});
  };
  const int64_t C = c.hidden_size, hd = c.effective_head_dim();
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  out.emplace_back("model.embed_tokens.weight", std::vector<int64_t>{c.vocab_size, C});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    linear(layer + "self_attn.q_proj", C, q, c.attention_bias);
    linear(layer + "self_attn.k_proj", C, kv, c.attention_bias);
    linear(layer + "self_attn.v_proj", C, kv, c.attention_bias);
    linear(layer + "self_attn.o_proj", q, C, c.attention_bias);
    linear(layer + "mlp.gate_proj", C, c.intermediate_size, c.mlp_bias);
    linear(layer + "mlp.up_proj", C, c.intermediate_size, c.mlp_bias);
    linear(layer + "mlp.down_proj", c.intermediate_size, C, c.mlp_bias);
    out.emplace_back(layer + "input_layernorm.weight", std::vector<int64_t>{C});
    out.emplace_back(layer + "post_attention_layernorm.weight", std::vector<int64_t>{C});
  }
  out.emplace_back("model.norm.weight", std::vector<int64_t>{C});
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", std::vector<int64_t>{c.vocab_size, C});
  return out;
}

void for_each_initial_parameter(const LlamaConfig& c, const LlamaParameterVisitor& visit) {
  c.validate();
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(c.seed);
  // Registration order, so every draw consumes the generator exactly as the
  // dense model's does: norms one, biases zero, the rest N(0, initializer_range).
  for (const auto& [name, shape] : llama_parameter_shapes(c)) {
    if (name.find("norm.weight") != std::string::npos) {
      visit(name, torch::ones(shape));
    } else if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      visit(name, torch::zeros(shape));
    } else {
      visit(name, torch::empty(shape).normal_(0.0, c.initializer_range, gen));
    }
  }
}

void LlamaImpl::init_weights() {
  torch::NoGradGuard no_grad;
  auto params = named_parameters(/*recurse=*/true);
  size_t filled = 0;
  for_each_initial_parameter(config_, [&](const std::string& name, const torch::Tensor& value) {
    torch::Tensor* p = params.find(name);
    TS_INTERNAL_ASSERT(p != nullptr && p->sizes() == value.sizes(), "Llama initializer: ", name);
    p->copy_(value);
    ++filled;
  });
  TS_INTERNAL_ASSERT(filled == params.size(), "Llama initializer covers ", filled, " of ",
                     params.size(), " parameters");
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& idx) {
  ModuleScope scope(this);  // the flops profiler's view of the forward (module_scope.h)
  TS_CHECK(idx.dim() == 2, "Llama.forward expects idx of shape [B, T], got ", idx.sizes());
  const int64_t T = idx.size(1);
  TS_CHECK(T >= 1 && T <= config_.max_position_embeddings, "Llama.forward: sequence length ", T,
           " is outside [1, max_position_embeddings = ", config_.max_position_embeddings,
           "] (crop the input or raise max_position_embeddings)");
  auto h = model(idx);
  // Tied: the token embedding doubles as the output projection.
  return lm_head ? lm_head(h) : F::linear(h, model->embed_tokens->weight);
}

torch::Tensor LlamaImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto logits = forward(idx);
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

int64_t LlamaImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace tessera::models
