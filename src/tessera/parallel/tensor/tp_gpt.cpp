#include "tessera/parallel/tensor/tp_gpt.h"

#include <cmath>
#include <limits>
#include <utility>

#include "tessera/core/check.h"
#include "tessera/models/activation_checkpoint.h"
#include "tessera/models/ops/causal_attention.h"
#include "tessera/models/low_precision.h"
#include "tessera/parallel/tensor/tp_checkpoint.h"
#include "tessera/parallel/tensor/tp_ops.h"

namespace tessera::parallel {

namespace {

// LayerNorm whose affine parameters are whole on every rank; under sequence
// parallel each rank normalizes its part of the sequence, so the parameters'
// gradients are partial and enter through copy_to_tp.
class TpLayerNormImpl : public torch::nn::Module {
 public:
  TpLayerNormImpl(int64_t n, double eps, TensorParallelOptions tp)
      : n_(n), eps_(eps), tp_(std::move(tp)) {
    weight = register_parameter("weight", torch::ones({n}));
    bias = register_parameter("bias", torch::zeros({n}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // By value: a 16-bit backward recomputes it (models::fp32_island).
    auto norm = [n = n_, eps = eps_, w = weight, b = bias, sp = tp_.sequence_parallel,
                 group = tp_.group](const std::vector<torch::Tensor>& in) {
      if (!sp) return torch::layer_norm(in[0], {n}, w, b, eps);
      return torch::layer_norm(in[0], {n}, copy_to_tp(w, *group), copy_to_tp(b, *group), eps);
    };
    return models::fp32_island(norm, {x}, {weight, bias});
  }
  torch::Tensor weight, bias;

 private:
  int64_t n_;
  double eps_;
  TensorParallelOptions tp_;
};
TORCH_MODULE(TpLayerNorm);

// Dropout of an activation: replicated over the tp group (same mask on every
// rank) unless split (each rank its own), as DropoutRng describes.
torch::Tensor drop(const torch::Tensor& x, double p, bool training, const TensorParallelOptions& tp,
                   bool split) {
  if (!training || p == 0.0) return x;
  return dropout_from(x, p, true, split ? tp.dropout_rng->split() : tp.dropout_rng->replicated());
}

class TpAttentionImpl : public torch::nn::Module {
 public:
  TpAttentionImpl(const models::GPTConfig& c, const TensorParallelOptions& tp)
      : tp_(tp), local_heads_(c.n_head / tp.group->size()),
        local_embd_(c.n_embd / tp.group->size()), p_(c.dropout), fused_(c.fused_attention) {
    c_attn = register_module("c_attn", ColumnParallelLinear(c.n_embd, 3 * c.n_embd, tp, c.bias));
    c_proj = register_module("c_proj", RowParallelLinear(c.n_embd, c.n_embd, tp, c.bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto qkv = c_attn(x);  // [B, T, 3C/tp]: this rank's heads of q, k and v
    const bool dropping = is_training() && p_ > 0;
    torch::Tensor y;
    if (dropping) {
      // The DropoutRng's masks cannot be redrawn by a recompute: in qkv's dtype.
      y = composed(qkv);
    } else {
      // 16-bit activations: the core in float32 on the upcast qkv (recomputed in
      // backward); float32: directly.
      auto core = [this](const std::vector<torch::Tensor>& in) {
        if (tp_.context.enabled()) return across_context(in[0]);
        return fused_ && models::ops::causal_attention_supports(in[0], local_heads_)
                   ? models::ops::causal_attention(in[0], local_heads_)
                   : composed(in[0]);
      };
      y = models::fp32_island(core, {qkv}, {});
    }
    // The output is whole (or, under sequence parallel, this rank's sequence part).
    return drop(c_proj(y), p_, is_training(), tp_, tp_.sequence_parallel);
  }
  ColumnParallelLinear c_attn{nullptr};
  RowParallelLinear c_proj{nullptr};

 private:
  // This rank's heads over the whole sequence while holding its cp chunks.
  torch::Tensor across_context(const torch::Tensor& qkv) {
    const int64_t B = qkv.size(0), T = qkv.size(1), hd = local_embd_ / local_heads_;
    auto parts = qkv.split(local_embd_, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, local_heads_, hd}).transpose(1, 2); };
    auto y = context_parallel_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                        /*causal=*/true, tp_.context);
    return y.transpose(1, 2).reshape({B, T, local_embd_});
  }
  torch::Tensor composed(const torch::Tensor& qkv) {
    const int64_t B = qkv.size(0), T = qkv.size(1), hd = local_embd_ / local_heads_;
    auto parts = qkv.split(local_embd_, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, local_heads_, hd}).transpose(1, 2); };
    auto att = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-2, -1)) /
               std::sqrt(static_cast<double>(hd));
    auto future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    att = torch::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    att = drop(att, p_, is_training(), tp_, /*split=*/true);  // this rank's heads
    return torch::matmul(att, heads(parts[2])).transpose(1, 2).contiguous().view({B, T, local_embd_});
  }
  TensorParallelOptions tp_;
  int64_t local_heads_, local_embd_;
  double p_;
  bool fused_;
};
TORCH_MODULE(TpAttention);

class TpMlpImpl : public torch::nn::Module {
 public:
  TpMlpImpl(const models::GPTConfig& c, const TensorParallelOptions& tp)
      : tp_(tp), p_(c.dropout), gelu_approximate_(c.gelu_tanh ? "tanh" : "none") {
    c_fc = register_module("c_fc", ColumnParallelLinear(c.n_embd, 4 * c.n_embd, tp, c.bias));
    c_proj = register_module("c_proj", RowParallelLinear(4 * c.n_embd, c.n_embd, tp, c.bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = models::fp32_island(
        [approximate = gelu_approximate_](const std::vector<torch::Tensor>& in) {
          return torch::gelu(in[0], approximate);
        },
        {c_fc(x)}, {});
    return drop(c_proj(h), p_, is_training(), tp_, tp_.sequence_parallel);
  }
  ColumnParallelLinear c_fc{nullptr};
  RowParallelLinear c_proj{nullptr};

 private:
  TensorParallelOptions tp_;
  double p_;
  std::string gelu_approximate_;  // GPTConfig.gelu_tanh, as torch::gelu names it
};
TORCH_MODULE(TpMlp);

// The MoE layer of a block: this rank's experts (1/ep of them, expert-parallel
// dispatch over tp.expert), each expert's width split over the tp group.
models::MoELayer tp_moe_layer(const models::GPTConfig& c, const TensorParallelOptions& tp) {
  const int64_t ep = tp.expert.size(), local = c.moe.num_experts / ep;
  TS_CHECK_T(ConfigError, c.moe.num_experts % ep == 0, "model.num_experts ", c.moe.num_experts,
             " does not divide by expert_model_parallel_size ", ep,
             ": every expert-parallel rank holds the same number of experts");
  models::MoETensorSplit split;
  if (tp.group->size() > 1) {
    auto g = tp.group;
    split.rank = g->rank();
    split.size = g->size();
    split.enter = [g](const torch::Tensor& t) { return copy_to_tp(t, *g); };
    split.leave = [g](const torch::Tensor& t) { return reduce_from_tp(t, *g); };
    if (tp.sequence_parallel) {  // rows [N/tp, ...] <-> [N, ...]
      split.gather = [g](const torch::Tensor& t) {
        return gather_from_sequence(t.unsqueeze(0), *g).squeeze(0);
      };
      split.scatter = [g](const torch::Tensor& t) {
        return reduce_scatter_to_sequence(t.unsqueeze(0), *g).squeeze(0);
      };
    }
  }
  models::MoELayer layer(c.moe, c.n_embd, c.bias, c.gelu_tanh ? "tanh" : "none", local,
                         tp.expert.rank() * local, split);
  if (tp.expert.enabled()) {
    layer->set_dispatcher(make_token_dispatcher(tp.expert.dispatcher, tp.expert.group));
  }
  return layer;
}

class TpBlockImpl : public torch::nn::Module {
 public:
  TpBlockImpl(const models::GPTConfig& c, const TensorParallelOptions& tp) {
    ln_1 = register_module("ln_1", TpLayerNorm(c.n_embd, c.layer_norm_eps, tp));
    attn = register_module("attn", TpAttention(c, tp));
    ln_2 = register_module("ln_2", TpLayerNorm(c.n_embd, c.layer_norm_eps, tp));
    if (c.moe.enabled()) {
      moe = register_module("moe", tp_moe_layer(c, tp));
    } else {
      mlp = register_module("mlp", TpMlp(c, tp));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    if (!moe) return x + mlp(ln_2(x));
    // As the dense GPT: the MoE layer in float32, the residual in compute_dtype;
    // its auxiliary losses join the backward here (the loss is elsewhere).
    auto out = x + moe(ln_2(x).to(torch::kFloat)).to(x.scalar_type());
    return models::attach_auxiliary_loss(out, moe->auxiliary_loss(),
                                         aux_scale * moe->auxiliary_loss_gradient_scale());
  }
  TpLayerNorm ln_1{nullptr}, ln_2{nullptr};
  TpAttention attn{nullptr};
  TpMlp mlp{nullptr};
  models::MoELayer moe{nullptr};
  double aux_scale = 1.0;  // the weight of this block's auxiliary losses in the loss
};
TORCH_MODULE(TpBlock);

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

DenseSlice dense_slice_of(const std::string& name) {
  // MoE blocks (models/moe.h): experts cut over ep, each expert's width over tp.
  if (name.find(".moe.") != std::string::npos) {
    using K = DenseSlice::Kind;
    if (ends_with(name, "experts.fc_weight")) return {K::kColumns, 1, true};  // [E, H, F]
    if (ends_with(name, "experts.fc_bias") || ends_with(name, "experts.proj_weight")) {
      return {K::kRows, 1, true};  // [E, F], [E, F, H]
    }
    if (ends_with(name, "experts.proj_bias")) return {K::kWhole, 1, true};
    if (ends_with(name, "shared_fc.weight") || ends_with(name, "shared_fc.bias")) return {K::kRows, 1};
    if (ends_with(name, "shared_proj.weight")) return {K::kColumns, 1};
    return {};  // the router, the shared expert's output bias
  }
  if (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_attn.bias")) {
    return {DenseSlice::Kind::kRows, 3};
  }
  if (ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_fc.bias") || name == "wte.weight") {
    return {DenseSlice::Kind::kRows, 1};
  }
  if (ends_with(name, "c_proj.weight")) return {DenseSlice::Kind::kColumns, 1};
  return {};
}

void check_tensor_parallel_layout(const models::GPTConfig& c, int n, bool sequence_parallel) {
  c.validate();
  if (c.moe.enabled()) {
    TS_CHECK_T(ConfigError, c.moe.expert_width(c.n_embd) % n == 0, "the experts' width ",
               c.moe.expert_width(c.n_embd), " (model.moe_ffn_hidden_size, or 4 x n_embd) does ",
               "not divide by tensor_model_parallel_size ", n);
    TS_CHECK_T(ConfigError, c.moe.shared_expert_intermediate_size % n == 0,
               "model.moe_shared_expert_intermediate_size ", c.moe.shared_expert_intermediate_size,
               " does not divide by tensor_model_parallel_size ", n);
  }
  TS_CHECK_T(ConfigError, c.n_head % n == 0, "model.n_head ", c.n_head,
             " does not divide by tensor_model_parallel_size ", n,
             ": every tensor-parallel rank needs whole attention heads");
  TS_CHECK_T(ConfigError, c.vocab_size % n == 0, "model.vocab_size ", c.vocab_size,
             " does not divide by tensor_model_parallel_size ", n,
             "; pad the vocabulary to a multiple of it");
  TS_CHECK_T(ConfigError, !sequence_parallel || c.block_size % n == 0, "model.block_size ",
             c.block_size, " does not divide by tensor_model_parallel_size ", n,
             ", which sequence_parallel needs");
}

TensorParallelGPTImpl::TensorParallelGPTImpl(const models::GPTConfig& config,
                                             TensorParallelOptions tp, GptPart part)
    : config_(config), tp_(std::move(tp)), part_(std::move(part)) {
  tp_.draw_weights = tp_.draw_weights && part_.initialize;  // no placeholder draws either
  TS_CHECK_T(ConfigError, tp_.group != nullptr, "TensorParallelGPT needs a tensor-parallel group");
  check_tensor_parallel_layout(config_, tp_.group->size(), tp_.sequence_parallel);
  TS_CHECK_T(ConfigError, config_.dropout == 0.0 || !tp_.context.enabled(), "model.dropout ",
             config_.dropout, " is not supported with context parallelism (attention computed ",
             "across ranks draws no dropout mask); set model.dropout to 0");
  TS_CHECK_T(ConfigError, config_.dropout == 0.0 || tp_.dropout_rng != nullptr, "model.dropout ",
             config_.dropout, " needs TensorParallelOptions::dropout_rng (a DropoutRng) to draw "
             "the masks from");
  if (part_.blocks.empty()) part_.blocks.emplace_back(0, config_.n_layer);
  for (const auto& [b, e] : part_.blocks) {
    TS_CHECK_T(ConfigError, 0 <= b && b < e && e <= config_.n_layer, "TensorParallelGPT: block range [",
               b, ", ", e, ") is outside the model's ", config_.n_layer, " blocks");
  }
  if (part_.embedding || part_.head) {
    wte = register_module("wte", VocabParallelEmbedding(config.vocab_size, config.n_embd, tp_));
  }
  if (part_.embedding) {
    auto wpe = register_module("wpe", std::make_shared<torch::nn::Module>());
    wpe_ = wpe->register_parameter("weight", torch::zeros({config.block_size, config.n_embd}));
  }
  auto h = register_module("h", std::make_shared<torch::nn::Module>());
  blocks_.resize(static_cast<size_t>(config_.n_layer));
  for (const auto& [b, e] : part_.blocks) {
    for (int64_t i = b; i < e; ++i) {
      blocks_[static_cast<size_t>(i)] =
          torch::nn::AnyModule(h->register_module(std::to_string(i), TpBlock(config_, tp_)));
    }
  }
  if (part_.head) ln_f_ = register_module("ln_f", TpLayerNorm(config.n_embd, config.layer_norm_eps, tp_)).get();

  if (!part_.initialize) return;  // the caller loads every weight
  // The dense GPT's weights, sliced: same seed, same weights as a dense run.
  fill_from_dense(
      *this,
      [this](const DenseTensorVisitor& visit) { models::for_each_initial_parameter(config_, visit); },
      dense_slice_of, tp_.group->rank(), tp_.group->size(), "TensorParallelGPT",
      tp_.expert.rank(), tp_.expert.size());
}

torch::Tensor TensorParallelGPTImpl::embed(const torch::Tensor& idx) {
  TS_CHECK(part_.embedding, "TensorParallelGPT.embed: this rank does not hold the embedding");
  TS_CHECK(idx.dim() == 2, "TensorParallelGPT.forward expects idx of shape [B, T], got ", idx.sizes());
  // Under context parallelism idx holds this rank's chunks of longer sequences.
  const int64_t T = idx.size(1), cp = tp_.context.size();
  TS_CHECK(T >= 1 && T * cp <= config_.block_size, "TensorParallelGPT.forward: sequence length ",
           T * cp, " exceeds block_size ", config_.block_size);
  comm::ProcessGroup& g = *tp_.group;
  auto x = wte(idx);  // [B, T(/tp), C]
  // The position rows of this rank's tokens.
  auto positions = [&](const torch::Tensor& table) {
    return tp_.context.enabled()
               ? table.index_select(
                     0, context_parallel_positions(T * cp, tp_.context.rank(), cp).to(table.device()))
               : table.slice(0, 0, T);
  };
  if (tp_.sequence_parallel) {
    TS_CHECK(T % g.size() == 0, "TensorParallelGPT: sequence length ", T,
             " does not divide by tensor_model_parallel_size ", g.size(),
             " under sequence_parallel");
    const int64_t per = T / g.size();
    x = x + positions(copy_to_tp(wpe_, g)).slice(0, per * g.rank(), per * (g.rank() + 1));
  } else {
    x = x + positions(wpe_);
  }
  x = drop(x, config_.dropout, is_training(), tp_, tp_.sequence_parallel);
  // The residual stream and every activation after it in compute_dtype.
  if (models::is_low_precision(config_.compute_dtype)) x = x.to(config_.compute_dtype);
  return x;
}

torch::Tensor TensorParallelGPTImpl::blocks(int64_t begin, int64_t end, torch::Tensor x) {
  for (int64_t i = begin; i < end; ++i) {
    TS_CHECK(!blocks_.at(static_cast<size_t>(i)).is_empty(),
             "TensorParallelGPT: this rank does not hold block ", i);
  }
  auto run = [this](int64_t from, int64_t to, torch::Tensor y) {
    for (int64_t i = from; i < to; ++i) y = blocks_[static_cast<size_t>(i)].forward(y);
    return y;
  };
  if (config_.activation_checkpoints == 0 || !is_training()) {
    x = run(begin, end, x);
    record_routing(begin, end);
    return x;
  }
  // The dense GPT's segments, cut where this rank's range ends (a pipeline stage
  // may start or end inside one).
  const auto options = tensor_parallel_checkpoint(tp_, tp_.partition_activations);
  for (const auto& segment : models::checkpoint_segments(config_.n_layer, config_.activation_checkpoints)) {
    const int64_t from = std::max(begin, segment.first), to = std::min(end, segment.second);
    if (from >= to) continue;
    std::vector<at::Tensor> params;
    for (int64_t i = from; i < to; ++i) {
      for (const auto& p : blocks_[static_cast<size_t>(i)].ptr()->parameters()) params.push_back(p);
    }
    auto fn = [run, from, to](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{run(from, to, in[0])};
    };
    x = models::checkpoint_activations(fn, {x}, params, options)[0];
  }
  // After the forward, before any recompute: each block's routing once.
  record_routing(begin, end);
  return x;
}

void TensorParallelGPTImpl::record_routing(int64_t begin, int64_t end) {
  if (!config_.moe.enabled()) return;
  if (!routed_.defined()) routed_ = torch::zeros({config_.n_layer, config_.moe.num_experts}, torch::kLong);
  for (int64_t i = begin; i < end; ++i) {
    const auto& layer = blocks_[static_cast<size_t>(i)].get<TpBlock>()->moe;
    const auto& r = layer->last_routing();
    // Training's routing only: an evaluation between two metrics records
    // leaves their counts alone.
    if (is_training() && r.tokens_per_expert.defined()) routed_[i] += r.tokens_per_expert;
    auxiliary_loss_ += layer->auxiliary_loss().item<double>();
  }
}

void TensorParallelGPTImpl::set_auxiliary_loss_scale(double scale) {
  for (auto& b : blocks_) {
    if (!b.is_empty()) b.get<TpBlock>()->aux_scale = scale;
  }
}

double TensorParallelGPTImpl::take_auxiliary_loss() {
  return std::exchange(auxiliary_loss_, 0.0);
}

torch::Tensor TensorParallelGPTImpl::take_tokens_per_expert() {
  return std::exchange(routed_, torch::Tensor());
}

torch::Tensor TensorParallelGPTImpl::logits(const torch::Tensor& hidden) {
  TS_CHECK(part_.head, "TensorParallelGPT: this rank does not hold the head");
  comm::ProcessGroup& g = *tp_.group;
  auto x = ln_f_->as<TpLayerNorm>()->forward(hidden);
  // The head needs every position on every rank; its input's gradient is partial
  // (this rank's vocabulary only) and is summed by the conjugate.
  x = tp_.sequence_parallel ? gather_from_sequence(x, g) : copy_to_tp(x, g);
  return models::linear_lowp(x, wte->weight);
}

torch::Tensor TensorParallelGPTImpl::head_loss(const torch::Tensor& x, const torch::Tensor& targets) {
  auto out = logits(x).to(at::kFloat);  // the loss in float32 whatever the activations
  return vocab_parallel_cross_entropy(out.reshape({-1, out.size(-1)}), targets.reshape({-1}),
                                      *tp_.group);
}

torch::Tensor TensorParallelGPTImpl::forward(const torch::Tensor& idx) {
  return logits(blocks(0, config_.n_layer, embed(idx)));
}

torch::Tensor TensorParallelGPTImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets) {
  const double before = auxiliary_loss_;
  auto lm = head_loss(blocks(0, config_.n_layer, embed(idx)), targets);
  // The dense GPT's value (its auxiliary losses included); their gradients
  // already flow through the blocks (attach_auxiliary_loss).
  return config_.moe.enabled() ? lm + (auxiliary_loss_ - before) : lm;
}

}  // namespace tessera::parallel
