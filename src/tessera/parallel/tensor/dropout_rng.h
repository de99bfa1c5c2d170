// DropoutRng: the two random streams dropout draws from under tensor
// parallelism (Megatron's RNG tracker). Where an activation is replicated over
// the tensor-parallel group (the residual stream without sequence parallel),
// every tp rank must drop the same elements, or the copies diverge: those
// regions draw from `replicated()`, seeded alike on every tp rank. Where it is
// split (attention heads; the sequence under sequence parallel), each rank's
// part needs its own mask, as in the dense model: those draw from `split()`,
// seeded per tp rank. The data-parallel and pipeline coordinates enter both
// seeds, so replicas and stages draw independently. Neither touches the global
// generator.
//
//   auto rng = std::make_shared<DropoutRng>(seed, coord.tp, coord.dp, coord.pp);
//   TensorParallelOptions tp{mesh.tp(), sequence_parallel, rng};
//
// state()/set_state() carry both streams through a checkpoint, so a resumed
// run drops what the uninterrupted one would. Not thread-safe.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>

namespace tessera::parallel {

class DropoutRng {
 public:
  DropoutRng(uint64_t seed, int tp_rank, int dp_rank, int pp_rank);

  at::Generator& replicated() { return replicated_; }
  at::Generator& split() { return split_; }

  // Both generators' states, [replicated; split] as uint8, and back.
  torch::Tensor state() const;
  void set_state(const torch::Tensor& state);

 private:
  at::Generator replicated_;
  at::Generator split_;
};

// Inverted dropout of x with probability p from `gen` (identity when p == 0
// or not training): each element is zeroed with probability p, the rest scaled
// by 1 / (1 - p). Differentiable in x.
torch::Tensor dropout_from(const torch::Tensor& x, double p, bool training, at::Generator& gen);

}  // namespace tessera::parallel
