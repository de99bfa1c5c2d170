// Lamb: layer-wise adaptive moments (You et al., "Large Batch Optimization for
// Deep Learning: Training BERT in 76 minutes"), as DeepSpeed's FusedLamb
// computes it, for the config's {"optimizer": {"type": "Lamb"}}.
//
// Per parameter tensor p with gradient g, at step t (counted per parameter):
//   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
//   m^ = m / (1 - beta1^t)               v^ = v / (1 - beta2^t)    (bias_correction;
//                                                                  else m^ = m, v^ = v)
//   u  = m^ / (sqrt(v^) + eps) + weight_decay p
//   r  = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 when ||p|| or ||u|| is 0
//   p -= lr r u
// eps is added outside the square root (FusedLamb's default, eps_inside_sqrt
// false), the weight decay is inside u and so inside the trust ratio, and the
// clamp is skipped when a norm is 0 (a zero-initialised bias takes plain
// Adam-like steps of size lr until it moves), all as in DeepSpeed's kernel.
//
// The norms are over the whole tensor: a ZeRO shard or a tensor-parallel slice
// of a parameter would get another ratio, which is why the config refuses Lamb
// with zero_optimization.stage >= 1 and with tensor or pipeline parallelism.
//
// State per parameter (LambParamState): step, exp_avg, exp_avg_sq, in the
// parameter's dtype and device; optimizer_state.h saves them by name like Adam's.
// Not thread-safe: step() from one thread, like every torch::optim optimizer.
// The ratio stays a device tensor, so a step does not synchronize with the host.
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <tuple>
#include <vector>

namespace tessera::runtime {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  using betas_t = std::tuple<double, double>;
  LambOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(double, max_coeff) = 10.0;
  TORCH_ARG(double, min_coeff) = 0.01;
  TORCH_ARG(bool, bias_correction) = true;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(at::Tensor, exp_avg);
  TORCH_ARG(at::Tensor, exp_avg_sq);
};

class Lamb : public torch::optim::Optimizer {
 public:
  // ConfigError-free: the config parser validates the options; a bad value
  // here (a user's own construction) is a c10::Error like LibTorch's Adam.
  explicit Lamb(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                LambOptions defaults = {});
  explicit Lamb(std::vector<at::Tensor> params, LambOptions defaults = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  // One update of every parameter that has a gradient (sparse gradients: c10::Error).
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace tessera::runtime
