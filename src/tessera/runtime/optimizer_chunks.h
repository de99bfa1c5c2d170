// Stepping an optimizer over large parameters one range of elements at a time.
//
// LibTorch's Adam and AdamW make temporaries as large as the parameter they step
// (the denominator; with Adam's weight decay, the decayed gradient). ZeRO hands
// the optimizer one flat shard per unit, tens of MB each, and a fresh temporary of
// that size is a new memory mapping whose pages the kernel faults in again at
// every step; on a small VM that costs more than the update itself. Stepped a
// range of kOptimizerChunkNumel elements at a time, the temporaries are small
// enough for malloc to reuse.
//
// The updates of the optimizers whose state Tessera knows (Adam, AdamW, SGD;
// optimizer_state.h) are elementwise, so stepping a parameter range by range
// gives bit for bit what one step gives (tests/runtime/test_optimizer_chunks.cpp).
// Any other optimizer takes one ordinary step, and so do the parameters that
// Tessera's CPU Adam steps with its kernel (cpu_adam_optimizer.h), which makes no
// temporaries.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <vector>

namespace tessera::runtime {

// 256 Ki elements: 1 MB of float32 per temporary, far below glibc's mmap
// threshold once it has adapted, and ~50 optimizer calls for a 50 MB shard.
inline constexpr int64_t kOptimizerChunkNumel = int64_t{1} << 18;

// A tensor over `base`'s storage at element `offset` (base contiguous): updates
// through it land in `base`. It has its own TensorImpl, so optimizer state keyed
// by it is not `base`'s.
at::Tensor alias_range(const at::Tensor& base, int64_t offset, int64_t numel);

// Empties every parameter group and puts the groups' own parameters back at the
// end of the scope (also when a step throws), for steps over chosen tensors.
class GroupParamsGuard {
 public:
  explicit GroupParamsGuard(torch::optim::Optimizer& optimizer);
  ~GroupParamsGuard();
  GroupParamsGuard(const GroupParamsGuard&) = delete;
  GroupParamsGuard& operator=(const GroupParamsGuard&) = delete;

  // Group g's parameters as they were before the guard.
  const std::vector<at::Tensor>& saved(size_t g) const { return saved_.at(g); }

 private:
  torch::optim::Optimizer& optimizer_;
  std::vector<std::vector<at::Tensor>> saved_;
};

// Steps elements [begin, begin + n) of `param` (contiguous), with the same range
// of `grad`, as parameter group `group`'s only parameter (the groups emptied by a
// GroupParamsGuard). `fields` are the parameter's state tensors in
// param_state_fields order, the range's state read from and written to them; with
// has_state false (before the first step) the optimizer creates the range's state
// itself and it is copied into `fields`. Returns the step count the range reached
// (0 for an optimizer that keeps no state). For Adam, AdamW and SGD only.
int64_t step_range(torch::optim::Optimizer& optimizer, size_t group, const at::Tensor& param,
                   const at::Tensor& grad, const std::vector<at::Tensor>& fields, int64_t begin,
                   int64_t n, bool has_state, int64_t step);

// One optimizer.step(): the parameters of up to chunk_numel elements together,
// each larger contiguous one with a gradient in ranges of chunk_numel elements
// (its state handed to the optimizer as views of the range, so it is updated in
// place). Same result as optimizer.step(), bit for bit.
void step_in_chunks(torch::optim::Optimizer& optimizer,
                    int64_t chunk_numel = kOptimizerChunkNumel);

}  // namespace tessera::runtime
