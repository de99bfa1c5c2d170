// Activation checkpointing under tensor parallelism (models/activation_checkpoint.h
// with tensor-parallel state): the recompute restores the DropoutRng's streams,
// so dropout draws the masks of the first forward, and with
// partition_activations (Megatron's and DeepSpeed's key) a checkpointed input
// that every tp rank holds whole (the residual stream without sequence parallel)
// is kept as this rank's 1/tp of it and all-gathered over the tp group just
// before its segment is recomputed. Under sequence parallel the residual stream
// is already split over the ranks and is kept as it is.
//
//   auto options = tensor_parallel_checkpoint(tp_options, /*partition=*/true);
//   y = models::checkpoint_activations(run, {x}, params, options)[0];
//
// The unpack is a collective over the tp group inside backward: every tp rank
// recomputes the same segments in the same order (the tp ranks' backward does).
#pragma once

#include "tessera/models/activation_checkpoint.h"
#include "tessera/parallel/tensor/parallel_layers.h"

namespace tessera::parallel {

models::CheckpointOptions tensor_parallel_checkpoint(const TensorParallelOptions& tp,
                                                     bool partition_activations);

// The partition on its own: this rank's equal part of x flattened (padded to a
// multiple of the group size), a copy; and x rebuilt from every rank's part.
at::Tensor partition_activation(const at::Tensor& x, comm::ProcessGroup& group);
at::Tensor gather_activation(const at::Tensor& part, at::IntArrayRef sizes,
                             comm::ProcessGroup& group);

}  // namespace tessera::parallel
