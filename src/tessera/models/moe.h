// Mixture of experts: a router sends each token to its top-k experts (small
// MLPs), and the layer returns the routing-weighted sum of their outputs, plus
// an always-on shared expert when configured. Megatron-LM's names and
// semantics:
//
//   logits  = x Wr^T                                   [N, E], float32
//   softmax: top-k of the logits, weights = softmax over the k chosen logits
//   sigmoid: scores = sigmoid(logits), top-k of them, weights = scores / their sum
//   aux loss (load balancing, Switch/GShard) = coeff * E * sum_e f_e * P_e
//            f_e = share of the N*k assignments routed to e,
//            P_e = mean over tokens of the full softmax (or normalized sigmoid)
//            probability of e
//   z loss  = coeff * mean_t logsumexp(logits_t)^2      (ST-MoE)
//
// Capacity (moe_expert_capacity_factor; 0 means dropless): each expert takes at
// most ceil(N * k / E * factor) of this rank's assignments; the rest are
// dropped (contribute nothing), chosen by moe_token_drop_policy: "probs" keeps
// an expert's highest-weight assignments, "position" its earliest tokens.
//
// The experts run as one batched matmul: every local expert's tokens padded to
// the largest group, [E_local, max, H] x [E_local, H, F] (Experts).
//
// Where the experts live is a TokenDispatcher's business: LocalDispatcher runs
// them all in this process; parallel/expert/ moves tokens to the ranks that hold
// them (expert parallelism) and back.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

namespace tessera::models {

struct MoEConfig {
  int64_t num_experts = 0;                // 0: no MoE (a dense MLP)
  int64_t router_topk = 2;                // moe_router_topk
  std::string score_function = "softmax";  // moe_router_score_function: softmax | sigmoid
  double aux_loss_coeff = 0.0;            // moe_aux_loss_coeff
  double z_loss_coeff = 0.0;              // moe_z_loss_coeff
  double capacity_factor = 0.0;           // moe_expert_capacity_factor; 0: dropless
  std::string token_drop_policy = "probs";  // moe_token_drop_policy: probs | position
  int64_t expert_intermediate_size = 0;   // each expert's hidden width; 0: 4 * hidden
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool enabled() const { return num_experts > 0; }
  int64_t expert_width(int64_t hidden) const {
    return expert_intermediate_size > 0 ? expert_intermediate_size : 4 * hidden;
  }
  // ConfigError naming the key (Megatron's spelling) when a value is out of range.
  void validate() const;
};

// Where each token goes. Differentiable in `weight` and the losses.
struct Routing {
  torch::Tensor expert;  // [N, k] int64: the chosen experts
  torch::Tensor weight;  // [N, k] float32: their combination weights
  torch::Tensor kept;    // [N, k] bool: false where capacity dropped the assignment
  torch::Tensor aux_loss;  // scalar, coefficient applied (0 when the coefficient is)
  torch::Tensor z_loss;    // scalar, coefficient applied
  torch::Tensor tokens_per_expert;  // [E] int64, kept assignments, on the CPU
  int64_t dropped = 0;              // assignments capacity dropped
};

// Routing of N tokens from their router logits [N, E] (float32).
Routing route_tokens(const torch::Tensor& logits, const MoEConfig& config);

// The per-expert capacity for N tokens (0 when dropless).
int64_t expert_capacity(int64_t tokens, const MoEConfig& config);

// How an MoE layer is split over a tensor-parallel group (Megatron's expert
// tensor parallelism; parallel/tensor/ fills it in): every expert's hidden
// width F, and the shared expert's, is cut into `size` equal parts, rank
// `rank` holding one (the first layer's columns, the second's rows). The
// tokens enter the experts through `enter` (identity forward, all-reduce of
// the gradient backward) and the partial outputs leave through `leave` (an
// all-reduce). The router is whole on every rank; the combination weights
// enter through `enter` too, since their gradient from each rank's partial
// outputs is partial. Default: no split.
//
// Under sequence parallelism a rank holds 1/size of the tokens: its router
// scores them (the router weight entering through `enter`), `gather` collects
// every rank's tokens and logits (all-gather; backward, a reduce-scatter that
// sums the ranks' partial gradients), the layer routes and runs the experts on
// all of them, and `scatter` sums the partial outputs and returns this rank's
// share (reduce-scatter). The routing then equals the unsplit layer's; the
// auxiliary losses, computed on every rank from the gathered logits, reach
// them size times, so their gradient weight is divided by size
// (auxiliary_loss_gradient_scale).
struct MoETensorSplit {
  int64_t rank = 0, size = 1;
  std::function<torch::Tensor(const torch::Tensor&)> enter, leave;
  std::function<torch::Tensor(const torch::Tensor&)> gather, scatter;  // sequence parallel
  bool enabled() const { return size > 1; }
  bool sequence_parallel() const { return enabled() && static_cast<bool>(gather); }
};

// E_local experts, each GELU(x W1 + b1) W2 + b2, weights stacked:
// fc_weight [E_local, H, F], proj_weight [E_local, F, H] (biases [E_local, F]
// and [E_local, H] when `bias`).
class ExpertsImpl : public torch::nn::Module {
 public:
  // Experts [first_expert, first_expert + local_experts) of the layer.
  ExpertsImpl(int64_t local_experts, int64_t first_expert, int64_t hidden, int64_t width,
              bool bias, std::string gelu_approximate);
  // x: [M, H], the tokens of local expert 0, then of expert 1, ...
  // (counts[e] rows each; counts int64 on the CPU, summing to M) -> [M, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& counts);
  int64_t local_experts() const { return local_experts_; }
  int64_t first_expert() const { return first_expert_; }
  // Under a tensor split each rank's output is a partial sum: the whole
  // proj_bias is added by one rank only (its gradient still reaches every
  // rank through the split's `enter`).
  void set_tensor_split(MoETensorSplit split) { split_ = std::move(split); }

  torch::Tensor fc_weight, fc_bias, proj_weight, proj_bias;

 private:
  MoETensorSplit split_;
  int64_t local_experts_, first_expert_;
  std::string gelu_approximate_;
};
TORCH_MODULE(Experts);

// Sends routed tokens to the experts and returns their weighted sum per token.
class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // tokens [N, H]; `experts` holds this rank's experts. Returns [N, H]: the
  // sum over each token's kept assignments of weight * expert(token).
  virtual torch::Tensor dispatch(const torch::Tensor& tokens, const Routing& routing,
                                 ExpertsImpl& experts) = 0;
};

// Every expert in this process.
class LocalDispatcher : public TokenDispatcher {
 public:
  torch::Tensor dispatch(const torch::Tensor& tokens, const Routing& routing,
                         ExpertsImpl& experts) override;
};

// The kept assignments of `routing` whose expert lies in [first, first + count),
// ordered by expert (stable: token order within an expert). Shared by the
// dispatchers.
struct ExpertGroups {
  torch::Tensor token;   // [M] int64: the token of each assignment
  torch::Tensor weight;  // [M] float32 (differentiable)
  torch::Tensor expert;  // [M] int64: global expert ids, ascending
  torch::Tensor counts;  // [count] int64 on the CPU: assignments per expert
};
ExpertGroups group_by_expert(const Routing& routing, int64_t first, int64_t count);

// The MoE layer: router, experts (this rank's share), optional shared expert.
class MoELayerImpl : public torch::nn::Module {
 public:
  // Holds experts [first_expert, first_expert + local_experts) of
  // config.num_experts (all of them by default), each (and the shared expert)
  // cut as `split` says.
  MoELayerImpl(const MoEConfig& config, int64_t hidden, bool bias, std::string gelu_approximate,
               int64_t local_experts = 0, int64_t first_expert = 0, MoETensorSplit split = {});
  // x [..., H] -> [..., H]. The routing of the last call (its losses included)
  // stays in last_routing() until the next.
  torch::Tensor forward(const torch::Tensor& x);
  void set_dispatcher(std::shared_ptr<TokenDispatcher> dispatcher) {
    dispatcher_ = std::move(dispatcher);
  }
  const Routing& last_routing() const { return last_; }
  // aux + z loss of the last forward (a scalar that carries their gradients).
  torch::Tensor auxiliary_loss() const;
  // What the auxiliary losses' gradient must be weighted by for each rank to
  // contribute its share (1, or 1/size under sequence parallelism).
  double auxiliary_loss_gradient_scale() const {
    return split_.sequence_parallel() ? 1.0 / static_cast<double>(split_.size) : 1.0;
  }
  const MoEConfig& config() const { return config_; }

  torch::nn::Linear router{nullptr};  // hidden -> num_experts, no bias
  Experts experts{nullptr};
  torch::nn::Linear shared_fc{nullptr}, shared_proj{nullptr};  // when configured

 private:
  MoEConfig config_;
  std::string gelu_approximate_;
  MoETensorSplit split_;
  std::shared_ptr<TokenDispatcher> dispatcher_;
  Routing last_;
};
TORCH_MODULE(MoELayer);

// x unchanged, with `aux` (a scalar loss) joined to its backward: when the
// gradient of x flows back, `aux` receives the gradient `scale` as if
// scale * aux had been added to the loss. A model cut into pipeline stages (or
// whose loss is computed elsewhere) trains its routers' auxiliary losses so
// (Megatron's MoEAuxLossAutoScaler).
torch::Tensor attach_auxiliary_loss(const torch::Tensor& x, const torch::Tensor& aux, double scale);

}  // namespace tessera::models
