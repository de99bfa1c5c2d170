#include "tessera/runtime/lamb.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

namespace tessera::runtime {
namespace {

void check_options(const LambOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Lamb: invalid learning rate ", o.lr());
  TORCH_CHECK(o.eps() >= 0, "Lamb: invalid eps ", o.eps());
  const auto [b1, b2] = o.betas();
  TORCH_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, "Lamb: betas must be in [0, 1), got (", b1,
              ", ", b2, ")");
  TORCH_CHECK(o.weight_decay() >= 0, "Lamb: invalid weight_decay ", o.weight_decay());
  TORCH_CHECK(o.min_coeff() >= 0 && o.min_coeff() <= o.max_coeff(),
              "Lamb: need 0 <= min_coeff <= max_coeff, got ", o.min_coeff(), " and ",
              o.max_coeff());
}

// The update of one parameter (its moments advanced in place).
void lamb_update(at::Tensor& p, const at::Tensor& grad, LambParamState& s, const LambOptions& o) {
  const auto [beta1, beta2] = o.betas();
  s.step(s.step() + 1);
  at::Tensor m = s.exp_avg();
  at::Tensor v = s.exp_avg_sq();
  m.mul_(beta1).add_(grad, 1 - beta1);
  v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  double bc1 = 1, bc2 = 1;
  if (o.bias_correction()) {
    bc1 = 1 - std::pow(beta1, static_cast<double>(s.step()));
    bc2 = 1 - std::pow(beta2, static_cast<double>(s.step()));
  }
  // u = m^ / (sqrt(v^) + eps) + wd p: one temporary the size of p.
  at::Tensor u = v.div(bc2).sqrt_().add_(o.eps());
  u = at::div(m, bc1).div_(u);
  if (o.weight_decay() != 0) u.add_(p, o.weight_decay());
  const at::Tensor w_norm = p.norm();
  const at::Tensor u_norm = u.norm();
  // Both norms positive: clamped ratio; otherwise 1 (a where, not an if, keeps it on device).
  const at::Tensor both = at::logical_and(w_norm > 0, u_norm > 0);
  const at::Tensor ratio = at::where(
      both,
      (w_norm / at::where(both, u_norm, at::ones_like(u_norm))).clamp(o.min_coeff(), o.max_coeff()),
      at::ones_like(w_norm));
  p.addcmul_(u, ratio, -o.lr());
}

}  // namespace

Lamb::Lamb(const std::vector<torch::optim::OptimizerParamGroup>& groups, LambOptions defaults)
    : Optimizer(groups, std::make_unique<LambOptions>(defaults)) {
  check_options(defaults);
}

at::Tensor Lamb::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::Tensor& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "Lamb does not support sparse gradients");
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<LambParamState>();
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      lamb_update(p, grad, static_cast<LambParamState&>(*slot), options);
    }
  }
  return loss;
}

}  // namespace tessera::runtime
