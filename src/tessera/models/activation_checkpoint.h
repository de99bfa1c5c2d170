// Activation checkpointing: run part of a model without keeping its
// activations, and run it again during backward to get them back.
//
//   auto y = tessera::models::checkpoint_activations(
//       [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{block(in[0])}; },
//       {x}, block->parameters())[0];
//
// Forward runs `fn` under no_grad: only the inputs are kept (and the CPU
// generator's state). Backward restores that generator state, runs `fn` again
// with autograd on, and differentiates it: the gradients of the inputs flow on
// to the rest of the graph, those of `params` (every trainable tensor fn uses
// besides its inputs) reach the parameters through the same graph, so their
// gradient hooks (DDP's and ZeRO's reducers) fire as without checkpointing.
// Dropout inside fn draws the same masks both times, so gradients equal the
// plain run's. With autograd off (eval, no_grad) it is just fn(inputs).
//
// fn must be deterministic given its inputs and its random state, return
// floating-point tensors, and must not change its inputs in place. It is
// called twice per training step (compute for memory: about one extra forward).
// CheckpointOptions replaces the defaults: another random state to restore (the
// tensor-parallel GPT's DropoutRng), and what is kept of each input (Megatron's
// partition_activations keeps 1/tp of an input every tp rank holds whole, and
// all-gathers it back before the recompute: parallel/tensor/tp_checkpoint.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace tessera::models {

using CheckpointedFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

struct CheckpointOptions {
  // The random state fn draws from, saved before the forward and restored for
  // the recompute. Both unset: the default CPU generator.
  std::function<at::Tensor()> get_rng_state;
  std::function<void(const at::Tensor&)> set_rng_state;
  // What is kept of each input until backward, and the input rebuilt from it
  // (with the input's sizes). Both unset: the input itself. unpack runs inside
  // backward, on every rank in the same order (it may communicate).
  std::function<at::Tensor(const at::Tensor&)> pack_input;
  std::function<at::Tensor(const at::Tensor& packed, at::IntArrayRef sizes)> unpack_input;
};

std::vector<at::Tensor> checkpoint_activations(const CheckpointedFn& fn,
                                               const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& params,
                                               const CheckpointOptions& options = {});

// The blocks [begin, end) of each of `segments` consecutive segments of n
// blocks, the first n % segments one block longer (the GPT's
// activation_checkpointing.number_checkpoints).
std::vector<std::pair<int64_t, int64_t>> checkpoint_segments(int64_t n, int64_t segments);

}  // namespace tessera::models
