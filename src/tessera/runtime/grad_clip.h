// Gradient clipping by global L2 norm, the rule every engine shares (DeepSpeed's
// and torch.nn.utils.clip_grad_norm_'s): when max_norm > 0 and the norm exceeds
// it, every gradient is multiplied by max_norm / (norm + 1e-6). The engines
// compute the global norm themselves (they differ in what each rank holds and
// what must be summed across ranks); these helpers do the local arithmetic.
// Pure functions over the given tensors; no communication.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tessera::runtime {

// Sum of squares of every element, accumulated in float64. Undefined tensors
// count as zero.
double squared_norm(const std::vector<at::Tensor>& tensors);

// Scales `grads` in place by the clipping rule for a global `norm`; no-op when
// max_norm <= 0 or norm <= max_norm.
void clip_to_norm(const std::vector<at::Tensor>& grads, double norm, double max_norm);

}  // namespace tessera::runtime
