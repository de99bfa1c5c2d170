#include "tessera/models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "tessera/core/check.h"
#include "tessera/models/activation_checkpoint.h"
#include "tessera/models/ops/causal_attention.h"
#include "tessera/models/low_precision.h"
#include "tessera/models/module_scope.h"

namespace tessera::models {

namespace F = torch::nn::functional;

void GPTConfig::validate() const {
  moe.validate();
  TS_CHECK_T(ConfigError,
             !moe.enabled() || activation_checkpoints == 0 ||
                 (moe.aux_loss_coeff == 0 && moe.z_loss_coeff == 0),
             "model.moe_aux_loss_coeff and moe_z_loss_coeff are not supported with activation "
             "checkpointing yet (the recomputed router would not see their gradient); set them "
             "to 0 or turn activation_checkpointing off");
  TS_CHECK_T(ConfigError, vocab_size > 0, "GPTConfig.vocab_size must be > 0, got ", vocab_size);
  TS_CHECK_T(ConfigError, block_size > 0, "GPTConfig.block_size must be > 0, got ", block_size);
  TS_CHECK_T(ConfigError, n_layer > 0, "GPTConfig.n_layer must be > 0, got ", n_layer);
  TS_CHECK_T(ConfigError, n_head > 0, "GPTConfig.n_head must be > 0, got ", n_head);
  TS_CHECK_T(ConfigError, n_embd > 0 && n_embd % n_head == 0, "GPTConfig.n_embd (", n_embd,
             ") must be a positive multiple of n_head (", n_head, ")");
  TS_CHECK_T(ConfigError, dropout >= 0 && dropout < 1, "GPTConfig.dropout must be in [0, 1), got ",
             dropout);
  TS_CHECK_T(ConfigError, layer_norm_eps > 0 && std::isfinite(layer_norm_eps),
             "GPTConfig.layer_norm_eps must be a positive number, got ", layer_norm_eps);
  TS_CHECK_T(ConfigError, compute_dtype == at::kFloat || is_low_precision(compute_dtype),
             "GPTConfig.compute_dtype must be float32, bfloat16 or float16, got ",
             compute_dtype);
  TS_CHECK_T(ConfigError, activation_checkpoints >= 0 && activation_checkpoints <= n_layer,
             "activation_checkpointing.number_checkpoints must be in [0, n_layer = ", n_layer,
             "] (0: every block), got ", activation_checkpoints);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config)
    : n_head_(config.n_head),
      n_embd_(config.n_embd),
      fused_attention_(config.fused_attention),
      attn_dropout_p_(config.dropout) {
  c_attn = register_module(
      "c_attn",
      torch::nn::Linear(torch::nn::LinearOptions(n_embd_, 3 * n_embd_).bias(config.bias)));
  c_proj = register_module(
      "c_proj", torch::nn::Linear(torch::nn::LinearOptions(n_embd_, n_embd_).bias(config.bias)));
  attn_dropout = register_module("attn_dropout", torch::nn::Dropout(config.dropout));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  ModuleScope scope(this);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  auto qkv = linear_lowp(x, c_attn->weight, c_attn->bias);
  const bool dropout_active = is_training() && attn_dropout_p_ > 0;
  // Captures by value: a 16-bit backward calls it again, after forward returned.
  auto attend = [this, dropout_active, B, T](const std::vector<torch::Tensor>& in) {
    return fused_attention_ && !dropout_active && ops::causal_attention_supports(in[0], n_head_)
               ? ops::causal_attention(in[0], n_head_)
               : attend_composed(in[0], B, T);
  };
  // 16-bit activations of float32 parameters: the attention core runs in
  // float32 on the upcast qkv.
  auto y = c_attn->weight.scalar_type() == at::kFloat ? fp32_island(attend, {qkv}, {})
                                                      : attend({qkv});
  TS_INTERNAL_ASSERT(y.size(2) == C, "attention changed the width");
  return dropout_lowp(resid_dropout, linear_lowp(y, c_proj->weight, c_proj->bias));
}

torch::Tensor CausalSelfAttentionImpl::attend_composed(const torch::Tensor& qkv, int64_t B,
                                                       int64_t T) {
  const int64_t C = n_embd_, hd = C / n_head_;
  auto parts = qkv.split(n_embd_, /*dim=*/2);
  // [B, T, C] -> [B, nh, T, hd]
  auto q = parts[0].view({B, T, n_head_, hd}).transpose(1, 2);
  auto k = parts[1].view({B, T, n_head_, hd}).transpose(1, 2);
  auto v = parts[2].view({B, T, n_head_, hd}).transpose(1, 2);
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  // The mask is rebuilt per call rather than registered as a buffer, so it is not
  // part of the state that DDP broadcasts or checkpoints save. T^2 bools: cheap.
  auto future =
      torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(qkv.device())).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = attn_dropout(torch::softmax(att, -1));
  return torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
}

GPTMLPImpl::GPTMLPImpl(const GPTConfig& config)
    : gelu_approximate_(config.gelu_tanh ? "tanh" : "none") {
  c_fc = register_module(
      "c_fc", torch::nn::Linear(
                  torch::nn::LinearOptions(config.n_embd, 4 * config.n_embd).bias(config.bias)));
  c_proj = register_module(
      "c_proj", torch::nn::Linear(
                    torch::nn::LinearOptions(4 * config.n_embd, config.n_embd).bias(config.bias)));
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor GPTMLPImpl::forward(const torch::Tensor& x) {
  ModuleScope scope(this);
  auto h = linear_lowp(x, c_fc->weight, c_fc->bias);
  // By value: a 16-bit backward calls it again, after forward returned.
  auto gelu = [approximate = gelu_approximate_](const std::vector<torch::Tensor>& in) {
    return torch::gelu(in[0], approximate);
  };
  h = c_fc->weight.scalar_type() == at::kFloat ? fp32_island(gelu, {h}, {}) : gelu({h});
  return dropout_lowp(dropout, linear_lowp(h, c_proj->weight, c_proj->bias));
}

torch::Tensor dropout_lowp(torch::nn::Dropout& dropout, const torch::Tensor& x) {
  if (!is_low_precision(x.scalar_type()) || !dropout->is_training() ||
      dropout->options.p() == 0) {
    return dropout(x);
  }
  auto impl = dropout.ptr();
  return fp32_island([impl](const std::vector<torch::Tensor>& in) { return impl->forward(in[0]); },
                          {x}, {});
}

torch::Tensor layer_norm_lowp(torch::nn::LayerNorm& ln, const torch::Tensor& x) {
  if (!is_low_precision(x.scalar_type())) return ln(x);
  auto impl = ln.ptr();
  return fp32_island([impl](const std::vector<torch::Tensor>& in) { return impl->forward(in[0]); },
                          {x}, {ln->weight, ln->bias});
}

namespace {
torch::nn::LayerNorm make_ln(const GPTConfig& c) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({c.n_embd}).elementwise_affine(true).eps(c.layer_norm_eps));
}
}  // namespace

BlockImpl::BlockImpl(const GPTConfig& config) {
  ln_1 = register_module("ln_1", make_ln(config));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", make_ln(config));
  if (config.moe.enabled()) {
    moe = register_module("moe", MoELayer(config.moe, config.n_embd, config.bias,
                                          config.gelu_tanh ? "tanh" : "none"));
  } else {
    mlp = register_module("mlp", GPTMLP(config));
  }
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  ModuleScope scope(this);
  x = x + attn(layer_norm_lowp(ln_1, x));
  if (moe) {
    // The MoE layer computes in the parameters' float32; the residual stream
    // keeps compute_dtype.
    auto h = layer_norm_lowp(ln_2, x);
    return x + moe(h.to(torch::kFloat)).to(x.scalar_type());
  }
  return x + mlp(layer_norm_lowp(ln_2, x));
}

GPTImpl::GPTImpl(const GPTConfig& config) : config_(config) {
  config_.validate();
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  drop = register_module("drop", torch::nn::Dropout(config.dropout));
  h = register_module("h", torch::nn::Sequential());
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(Block(config));
  ln_f = register_module("ln_f", make_ln(config));
  init_weights();
}

namespace {

// GPT-2's rule for one parameter, drawing from `gen` (see the header).
void init_parameter(const std::string& name, torch::Tensor& t, at::Generator& gen,
                    const GPTConfig& config) {
  const double std = 0.02;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
  if (name.find("ln_") != std::string::npos) {
    if (is_bias)
      t.zero_();
    else
      t.fill_(1.0);
  } else if (is_bias) {
    t.zero_();
  } else if (name.find("c_proj.weight") != std::string::npos ||
             name.find("proj_weight") != std::string::npos ||
             name.find("shared_proj.weight") != std::string::npos) {
    // Layers that write into the residual stream (the MoE experts' and shared
    // expert's output projections too).
    t.normal_(0.0, resid_std, gen);
  } else {
    t.normal_(0.0, std, gen);
  }
}

}  // namespace

torch::Tensor GPTImpl::checkpointed_blocks(torch::Tensor x) {
  const int64_t n = static_cast<int64_t>(h->size());
  for (const auto& segment : checkpoint_segments(n, config_.activation_checkpoints)) {
    const int64_t begin = segment.first, end = segment.second;
    std::vector<at::Tensor> params;
    for (int64_t i = begin; i < end; ++i) {
      for (const auto& p : h[static_cast<size_t>(i)]->parameters()) params.push_back(p);
    }
    auto run = [this, begin, end](const std::vector<at::Tensor>& in) {
      at::Tensor y = in[0];
      for (int64_t i = begin; i < end; ++i) y = h->begin()[i].forward(y);
      return std::vector<at::Tensor>{y};
    };
    x = checkpoint_activations(run, {x}, params)[0];
  }
  return x;
}

void GPTImpl::init_weights() {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(config_.seed);
  // Parameters are visited in registration order, so the draws are reproducible.
  for (auto& p : named_parameters(/*recurse=*/true)) init_parameter(p.key(), p.value(), gen, config_);
}

void for_each_initial_parameter(const GPTConfig& config, const ParameterVisitor& visit) {
  config.validate();
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(config.seed);
  // The same modules in the same order as GPTImpl's constructor, one at a time.
  auto emit = [&](const std::string& prefix, torch::nn::Module& m) {
    for (auto& p : m.named_parameters(/*recurse=*/true)) {
      const std::string name = prefix + p.key();
      init_parameter(name, p.value(), gen, config);
      visit(name, p.value());
    }
  };
  torch::nn::Embedding wte(config.vocab_size, config.n_embd);
  emit("wte.", *wte);
  wte = nullptr;
  torch::nn::Embedding wpe(config.block_size, config.n_embd);
  emit("wpe.", *wpe);
  wpe = nullptr;
  for (int64_t i = 0; i < config.n_layer; ++i) {
    Block block(config);
    emit("h." + std::to_string(i) + ".", *block);
  }
  auto ln_f = make_ln(config);
  emit("ln_f.", *ln_f);
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx) {
  ModuleScope scope(this);  // the flops profiler's view of the forward (module_scope.h)
  TS_CHECK(idx.dim() == 2, "GPT.forward expects idx of shape [B, T], got ", idx.sizes());
  const int64_t T = idx.size(1);
  TS_CHECK(T >= 1 && T <= config_.block_size, "GPT.forward: sequence length ", T,
           " exceeds block_size ", config_.block_size, " (crop the input or raise block_size)");
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = drop(wte(idx) + wpe(pos));
  // The residual stream and every activation after it in compute_dtype.
  if (is_low_precision(config_.compute_dtype) && x.scalar_type() == at::kFloat) {
    x = x.to(config_.compute_dtype);
  }
  // Through the Sequential's modules, so ZeRO stage 3 can wrap the blocks
  // (zero/sharded_module.h).
  if (config_.activation_checkpoints > 0 && is_training()) {
    x = checkpointed_blocks(x);
  } else {
    x = h->forward(x);
  }
  x = layer_norm_lowp(ln_f, x);
  // Tied head: the token embedding doubles as the output projection.
  return linear_lowp(x, wte->weight);
}

torch::Tensor GPTImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto logits = forward(idx);
  const auto flat_targets = targets.reshape({-1});
  // In float32 whatever the logits' dtype; 16-bit logits are kept, not their
  // float32 log-softmax.
  auto ce = [flat_targets](const std::vector<torch::Tensor>& in) {
    return F::cross_entropy(in[0].reshape({-1, in[0].size(-1)}), flat_targets);
  };
  auto loss = wte->weight.scalar_type() != at::kFloat
                  ? ce({logits})
                  : fp32_island(ce, {logits}, {}, /*round_output=*/false);
  if (!config_.moe.enabled()) return loss;
  for (size_t i = 0; i < h->size(); ++i) {
    loss = loss + h->ptr(i)->as<BlockImpl>()->moe->auxiliary_loss();
  }
  return loss;
}

torch::Tensor GPTImpl::tokens_per_expert() const {
  if (!config_.moe.enabled()) return {};
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < h->size(); ++i) {
    const auto& r = h->ptr(i)->as<BlockImpl>()->moe->last_routing();
    rows.push_back(r.tokens_per_expert.defined() ? r.tokens_per_expert
                                                 : torch::zeros({config_.moe.num_experts},
                                                                torch::kLong));
  }
  return torch::stack(rows);
}

torch::Tensor GPTImpl::generate(const torch::Tensor& prompt, int64_t max_new_tokens,
                                double temperature, int64_t top_k, uint64_t seed) {
  TS_CHECK(temperature > 0, "GPT.generate: temperature must be > 0, got ", temperature);
  TS_CHECK(prompt.numel() >= 1, "GPT.generate: the prompt needs at least one token");
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  auto gen = at::detail::createCPUGenerator(seed);
  auto seq = prompt.reshape({1, -1}).to(torch::kLong);
  const auto device = wte->weight.device();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t T = seq.size(1);
    auto ctx = T > config_.block_size ? seq.slice(1, T - config_.block_size) : seq;
    auto logits = forward(ctx.to(device)).select(1, -1).to(torch::kCPU, torch::kFloat) /
                  temperature;  // [1, V]
    if (top_k > 0 && top_k < logits.size(-1)) {
      auto kth = std::get<0>(logits.topk(top_k, -1)).select(-1, top_k - 1).unsqueeze(-1);
      logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
    }
    auto next = at::multinomial(torch::softmax(logits, -1), 1, /*replacement=*/false, gen);
    seq = torch::cat({seq, next.to(seq.device())}, 1);
  }
  train(was_training);
  return seq;
}

int64_t GPTImpl::num_parameters(bool exclude_position_embeddings) const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  if (exclude_position_embeddings) n -= wpe->weight.numel();
  return n;
}

}  // namespace tessera::models
