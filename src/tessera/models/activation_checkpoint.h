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
// fn must be deterministic given its inputs and the CPU generator, return
// floating-point tensors, and must not change its inputs in place. It is
// called twice per training step (compute for memory: about one extra forward).
// Not for generators other than the default CPU one (a DropoutRng, say).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace tessera::models {

using CheckpointedFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

std::vector<at::Tensor> checkpoint_activations(const CheckpointedFn& fn,
                                               const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& params);

}  // namespace tessera::models
