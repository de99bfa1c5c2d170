// The conjugate communication functions tensor parallelism is built from
// (Megatron-LM's mappings). Each is an autograd function whose backward is the
// conjugate of its forward, so a layer that uses them gets correct gradients
// without writing a backward:
//
//   forward                          backward
//   copy_to_tp        identity       all-reduce (sum)       enter a column-parallel region
//   reduce_from_tp    all-reduce     identity               leave a row-parallel region
//   scatter_to_tp     keep my slice  all-gather             last dimension
//   gather_from_tp    all-gather     keep my slice          last dimension
//   scatter_to_sequence  my slice    all-gather             sequence dimension (1)
//   gather_from_sequence all-gather  reduce-scatter         sequence dimension (1)
//   reduce_scatter_to_sequence       all-gather             sequence dimension (1)
//                     reduce-scatter
//
// The last dimension is the hidden/feature one; the sequence dimension is 1 of
// [batch, sequence, hidden]. Splits are equal: the split dimension must divide by
// the group size (tessera::Error naming the sizes otherwise). With a group of
// size 1 every function is the identity.
//
// The group is held by raw pointer inside the autograd graph: it must outlive
// every graph built through these functions (the training loop's groups do).
// Calls are collectives over `group`, forward and backward: every rank of the
// group must run the same layers in the same order.
#pragma once

#include <torch/torch.h>

#include "tessera/comm/process_group.h"

namespace tessera::parallel {

torch::Tensor copy_to_tp(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor reduce_from_tp(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor scatter_to_tp(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor gather_from_tp(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor scatter_to_sequence(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor gather_from_sequence(const torch::Tensor& x, comm::ProcessGroup& group);
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, comm::ProcessGroup& group);

// Without autograd, for code that moves tensors itself: all-gather / keep this
// rank's slice along `dim`.
torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& group);
torch::Tensor slice_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& group);
// Sum over the group of each rank's x, and this rank's equal slice of it along dim.
torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, comm::ProcessGroup& group);

}  // namespace tessera::parallel
