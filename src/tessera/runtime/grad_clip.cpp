#include "tessera/runtime/grad_clip.h"

#include <ATen/ATen.h>

namespace tessera::runtime {

double squared_norm(const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  at::Tensor sq = at::zeros({}, at::kDouble);
  for (const auto& t : tensors) {
    if (t.defined()) sq += t.to(at::kDouble).pow(2).sum();
  }
  return sq.item<double>();
}

void clip_to_norm(const std::vector<at::Tensor>& grads, double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  at::NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  for (const auto& g : grads) {
    if (g.defined()) const_cast<at::Tensor&>(g).mul_(scale);
  }
}

}  // namespace tessera::runtime
