#include "tessera/runtime/grad_clip.h"

#include <ATen/ATen.h>

namespace tessera::runtime {

double squared_norm(const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  // In slices: the float64 copy and its square exist for one slice at a time,
  // not for a whole shard (16 bytes per element of a 50 M-element unit is 800 MB,
  // freshly faulted in every step). Measured on 200 M elements: 0.17 s in
  // slices of 64 Ki elements against 12 s at once.
  constexpr int64_t kSlice = 1 << 16;
  at::Tensor sq = at::zeros({}, at::kDouble);
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    const at::Tensor flat = t.reshape({-1});
    for (int64_t off = 0; off < flat.numel(); off += kSlice) {
      sq += flat.narrow(0, off, std::min(kSlice, flat.numel() - off)).to(at::kDouble).pow(2).sum();
    }
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
