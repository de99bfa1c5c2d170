#include "tessera/models/moe.h"

#include <cmath>

#include "tessera/core/check.h"
#include "tessera/core/trace.h"
#include "tessera/models/module_scope.h"

namespace tessera::models {

void MoEConfig::validate() const {
  if (!enabled()) return;
  TS_CHECK_T(ConfigError, num_experts > 0, "model.num_experts must be >= 0, got ", num_experts);
  TS_CHECK_T(ConfigError, router_topk >= 1 && router_topk <= num_experts,
             "model.moe_router_topk must be in [1, num_experts = ", num_experts, "], got ",
             router_topk);
  TS_CHECK_T(ConfigError, score_function == "softmax" || score_function == "sigmoid",
             "model.moe_router_score_function must be softmax or sigmoid, got '", score_function,
             "'");
  TS_CHECK_T(ConfigError, aux_loss_coeff >= 0 && z_loss_coeff >= 0,
             "model.moe_aux_loss_coeff and moe_z_loss_coeff must be >= 0, got ", aux_loss_coeff,
             " and ", z_loss_coeff);
  TS_CHECK_T(ConfigError, capacity_factor >= 0 && std::isfinite(capacity_factor),
             "model.moe_expert_capacity_factor must be >= 0 (null or 0: dropless), got ",
             capacity_factor);
  TS_CHECK_T(ConfigError, token_drop_policy == "probs" || token_drop_policy == "position",
             "model.moe_token_drop_policy must be probs or position, got '", token_drop_policy,
             "'");
  TS_CHECK_T(ConfigError, expert_intermediate_size >= 0 && shared_expert_intermediate_size >= 0,
             "model.moe_ffn_hidden_size and moe_shared_expert_intermediate_size must be >= 0");
}

int64_t expert_capacity(int64_t tokens, const MoEConfig& c) {
  if (c.capacity_factor <= 0) return 0;
  return static_cast<int64_t>(std::ceil(static_cast<double>(tokens * c.router_topk) /
                                        static_cast<double>(c.num_experts) * c.capacity_factor));
}

namespace {

// Position of each assignment within its expert's group, in the order `order`
// (a permutation of the flat assignments): [N*k] int64.
torch::Tensor rank_within_expert(const torch::Tensor& expert_flat, const torch::Tensor& order) {
  auto sorted_expert = expert_flat.index_select(0, order);
  auto by_expert = std::get<1>(sorted_expert.sort(/*stable=*/true, 0, false));
  auto perm = order.index_select(0, by_expert);  // grouped by expert, `order` inside
  auto e = expert_flat.index_select(0, perm);
  const int64_t n = e.numel();
  auto position = torch::arange(n, e.options());
  // Start of each expert's group: positions where the expert id changes.
  auto starts = torch::zeros_like(e);
  if (n > 1) {
    auto change = torch::cat({torch::ones({1}, e.options().dtype(torch::kBool)),
                              e.slice(0, 1).ne(e.slice(0, 0, n - 1))});
    starts = std::get<0>(torch::where(change, position, torch::zeros_like(position)).cummax(0));
  }
  auto rank_sorted = position - starts;
  return torch::empty_like(rank_sorted).index_put_({perm}, rank_sorted);
}

}  // namespace

Routing route_tokens(const torch::Tensor& logits, const MoEConfig& c) {
  TS_CHECK(logits.dim() == 2 && logits.size(1) == c.num_experts,
           "route_tokens: logits must be [N, ", c.num_experts, "], got ", logits.sizes());
  const int64_t n = logits.size(0), e = c.num_experts, k = c.router_topk;
  Routing r;
  torch::Tensor probs;  // [N, E] what the load-balancing loss weighs
  if (c.score_function == "softmax") {
    auto [values, index] = logits.topk(k, -1);
    r.expert = index;
    r.weight = torch::softmax(values, -1);
    probs = torch::softmax(logits, -1);
  } else {
    auto scores = torch::sigmoid(logits);
    auto [values, index] = scores.topk(k, -1);
    r.expert = index;
    r.weight = k > 1 ? values / values.sum(-1, /*keepdim=*/true) : values;
    probs = scores / scores.sum(-1, /*keepdim=*/true);
  }
  auto expert_flat = r.expert.reshape({-1});
  const auto routed = torch::bincount(expert_flat, {}, e);  // before any drop
  r.kept = torch::ones_like(r.expert, torch::kBool);
  const int64_t capacity = expert_capacity(n, c);
  if (capacity > 0 && n > 0) {
    // The order an expert fills its places in: by weight or by token position.
    auto order = c.token_drop_policy == "probs"
                     ? std::get<1>(r.weight.detach().reshape({-1}).sort(/*stable=*/true, 0, true))
                     : torch::arange(n * k, expert_flat.options());
    r.kept = (rank_within_expert(expert_flat, order) < capacity).view_as(r.expert);
  }
  r.dropped = n * k - r.kept.sum().item<int64_t>();
  r.tokens_per_expert =
      torch::bincount(expert_flat.masked_select(r.kept.reshape({-1})), {}, e).to(torch::kCPU);
  auto zero = torch::zeros({}, logits.options());
  r.aux_loss = zero;
  if (c.aux_loss_coeff > 0 && n > 0) {
    auto share = routed.to(logits.scalar_type()) / static_cast<double>(n * k);
    r.aux_loss = c.aux_loss_coeff * static_cast<double>(e) * (share * probs.mean(0)).sum();
  }
  r.z_loss = zero;
  if (c.z_loss_coeff > 0 && n > 0) {
    r.z_loss = c.z_loss_coeff * torch::logsumexp(logits, -1).pow(2).mean();
  }
  return r;
}

ExpertGroups group_by_expert(const Routing& routing, int64_t first, int64_t count) {
  const int64_t k = routing.expert.size(1);
  auto expert = routing.expert.reshape({-1});
  auto mine = routing.kept.reshape({-1}) & expert.ge(first) & expert.lt(first + count);
  auto index = mine.nonzero().squeeze(1);  // token-major
  auto order = std::get<1>(expert.index_select(0, index).sort(/*stable=*/true, 0, false));
  auto chosen = index.index_select(0, order);
  ExpertGroups g;
  g.token = chosen.div(k, "floor");
  g.weight = routing.weight.reshape({-1}).index_select(0, chosen);
  g.expert = expert.index_select(0, chosen);
  g.counts = torch::bincount(g.expert - first, {}, count).to(torch::kCPU);
  return g;
}

ExpertsImpl::ExpertsImpl(int64_t local_experts, int64_t first_expert, int64_t hidden,
                         int64_t width, bool bias, std::string gelu_approximate)
    : local_experts_(local_experts),
      first_expert_(first_expert),
      gelu_approximate_(std::move(gelu_approximate)) {
  fc_weight = register_parameter("fc_weight", torch::randn({local_experts, hidden, width}) * 0.02);
  proj_weight =
      register_parameter("proj_weight", torch::randn({local_experts, width, hidden}) * 0.02);
  if (bias) {
    fc_bias = register_parameter("fc_bias", torch::zeros({local_experts, width}));
    proj_bias = register_parameter("proj_bias", torch::zeros({local_experts, hidden}));
  }
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& counts) {
  ModuleScope scope(this);
  const int64_t m = x.size(0), h = x.size(1);
  TS_CHECK(counts.numel() == local_experts_ && counts.sum().item<int64_t>() == m,
           "Experts: counts must give each of the ", local_experts_, " experts its rows of the ",
           m, " tokens");
  const int64_t most = m == 0 ? 0 : counts.max().item<int64_t>();
  // Row i of x goes to slot (expert, place within the expert) of the padded batch.
  auto expert_of_row = torch::repeat_interleave(torch::arange(local_experts_), counts);
  auto starts = torch::cumsum(counts, 0) - counts;
  auto slot = expert_of_row * most + (torch::arange(m) - starts.index_select(0, expert_of_row));
  slot = slot.to(x.device());
  auto padded = torch::zeros({local_experts_ * most, h}, x.options()).index_copy(0, slot, x);
  auto hidden = torch::bmm(padded.view({local_experts_, most, h}), fc_weight.to(x.scalar_type()));
  if (fc_bias.defined()) hidden = hidden + fc_bias.to(x.scalar_type()).unsqueeze(1);
  hidden = torch::gelu(hidden, gelu_approximate_);
  auto out = torch::bmm(hidden, proj_weight.to(x.scalar_type()));
  if (proj_bias.defined()) {
    auto b = proj_bias;
    if (split_.enabled()) b = split_.rank == 0 ? split_.enter(b) : split_.enter(b) * 0.0;
    out = out + b.to(x.scalar_type()).unsqueeze(1);
  }
  return out.reshape({local_experts_ * most, h}).index_select(0, slot);
}

torch::Tensor LocalDispatcher::dispatch(const torch::Tensor& tokens, const Routing& routing,
                                        ExpertsImpl& experts) {
  auto g = group_by_expert(routing, experts.first_expert(), experts.local_experts());
  auto y = experts.forward(tokens.index_select(0, g.token), g.counts);
  return torch::zeros_like(tokens).index_add(
      0, g.token, y * g.weight.to(y.scalar_type()).unsqueeze(1));
}

MoELayerImpl::MoELayerImpl(const MoEConfig& config, int64_t hidden, bool bias,
                           std::string gelu_approximate, int64_t local_experts,
                           int64_t first_expert, MoETensorSplit split)
    : config_(config), gelu_approximate_(std::move(gelu_approximate)), split_(std::move(split)) {
  config_.validate();
  TS_CHECK_T(ConfigError, config_.enabled(), "MoELayer needs model.num_experts > 0");
  if (local_experts == 0) local_experts = config_.num_experts;
  TS_CHECK(first_expert >= 0 && first_expert + local_experts <= config_.num_experts,
           "MoELayer: experts [", first_expert, ", ", first_expert + local_experts,
           ") are outside the layer's ", config_.num_experts);
  router = register_module(
      "router", torch::nn::Linear(torch::nn::LinearOptions(hidden, config_.num_experts).bias(false)));
  const int64_t parts = split_.size;
  TS_CHECK_T(ConfigError, config_.expert_width(hidden) % parts == 0, "the experts' width ",
             config_.expert_width(hidden), " (model.moe_ffn_hidden_size, or 4 x the hidden size) ",
             "does not divide by tensor_model_parallel_size ", parts);
  TS_CHECK_T(ConfigError, config_.shared_expert_intermediate_size % parts == 0,
             "model.moe_shared_expert_intermediate_size ", config_.shared_expert_intermediate_size,
             " does not divide by tensor_model_parallel_size ", parts);
  experts = register_module("experts", Experts(local_experts, first_expert, hidden,
                                               config_.expert_width(hidden) / parts, bias,
                                               gelu_approximate_));
  if (split_.enabled()) experts->set_tensor_split(split_);
  if (config_.shared_expert_intermediate_size > 0) {
    const int64_t w = config_.shared_expert_intermediate_size / parts;
    shared_fc = register_module("shared_fc",
                                torch::nn::Linear(torch::nn::LinearOptions(hidden, w).bias(bias)));
    shared_proj = register_module(
        "shared_proj", torch::nn::Linear(torch::nn::LinearOptions(w, hidden).bias(bias)));
  }
}

torch::Tensor MoELayerImpl::forward(const torch::Tensor& x) {
  ModuleScope scope(this);
  const auto shape = x.sizes().vec();
  auto flat = x.reshape({-1, shape.back()});
  // The router in float32 whatever the activations: routing decisions should
  // not flip with 16-bit rounding.
  const bool sp = split_.sequence_parallel();
  auto router_weight = router->weight.to(torch::kFloat);
  if (sp) router_weight = split_.enter(router_weight);  // this rank's tokens' share
  auto logits = torch::nn::functional::linear(flat.to(torch::kFloat), router_weight);
  // Under sequence parallelism: every rank's tokens (see MoETensorSplit).
  auto tokens = sp ? split_.gather(flat) : flat;
  if (sp) logits = split_.gather(logits);
  last_ = route_tokens(logits, config_);
  static LocalDispatcher local;
  TokenDispatcher& d = dispatcher_ ? *dispatcher_ : local;
  const int64_t start = trace::enabled() ? trace::now_ns() : 0;
  // Under a tensor split the experts see the tokens through `enter` and
  // combine with weights that entered the same way (see MoETensorSplit);
  // gathered tokens and logits already sum their gradients.
  Routing combine = last_;
  if (split_.enabled() && !sp) {
    tokens = split_.enter(tokens);
    combine.weight = split_.enter(last_.weight);
  }
  auto y = d.dispatch(tokens, combine, *experts);
  if (start != 0) {
    // The timeline's view of the routing: this rank's kept tokens per expert.
    std::string counts;
    auto c = last_.tokens_per_expert.contiguous();
    for (int64_t e = 0; e < c.numel(); ++e) {
      counts += (e ? ", " : "") + std::to_string(c.data_ptr<int64_t>()[e]);
    }
    trace::record("moe dispatch", "moe", start, trace::now_ns(), trace::lane("compute"),
                  "\"tokens_per_expert\": [" + counts + "], \"dropped\": " +
                      std::to_string(last_.dropped));
  }
  if (shared_fc) {
    // The second layer's bias is whole: added once, after the partial sums meet.
    y = y + torch::nn::functional::linear(torch::gelu(shared_fc(tokens), gelu_approximate_),
                                          shared_proj->weight);
  }
  if (split_.enabled()) y = sp ? split_.scatter(y) : split_.leave(y);
  if (shared_proj && shared_proj->bias.defined()) {
    y = y + (sp ? split_.enter(shared_proj->bias) : shared_proj->bias);
  }
  return y.view(shape);
}

namespace {

struct AttachAuxiliaryLoss : public torch::autograd::Function<AttachAuxiliaryLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& aux, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["aux_dtype"] = aux.scalar_type();
    ctx->saved_data["aux_device"] = aux.device();
    return x;  // autograd makes an unmodified input output its own alias
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto options = torch::TensorOptions()
                             .dtype(ctx->saved_data["aux_dtype"].toScalarType())
                             .device(ctx->saved_data["aux_device"].toDevice());
    return {grad[0], torch::full({}, scale, options), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attach_auxiliary_loss(const torch::Tensor& x, const torch::Tensor& aux, double scale) {
  if (!aux.requires_grad()) return x;
  return AttachAuxiliaryLoss::apply(x, aux, scale);
}

torch::Tensor MoELayerImpl::auxiliary_loss() const {
  if (!last_.aux_loss.defined()) return torch::zeros({});
  return last_.aux_loss + last_.z_loss;
}

}  // namespace tessera::models
