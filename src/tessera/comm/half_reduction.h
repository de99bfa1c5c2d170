// Reductions of float16 and bfloat16 tensors for backends that have no 16-bit
// arithmetic of their own (gloo, mpi): the values travel as 16 bits and are
// combined in float32 exactly once.
//
// A reduce-scatter is an all_to_all of 16-bit slices (rank j receives every
// rank's slice j), after which each rank combines the `size` copies of its slice
// in float32 and rounds once; an all-reduce adds an all_gather of the rounded
// slices. Each rank sends (size-1)/size of the tensor in each phase, as a ring
// does, at 2 bytes per element instead of the 4 an upcast to float32 would send,
// and the result is the float32 reduction of the 16-bit inputs rounded once,
// whatever the group size (a ring rounds at every hop).
//
// Called by the ProcessGroup on its collective thread; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/base/reduce_op.h"

namespace tessera::comm {

// `input` (sum(counts) elements, 16-bit) split by counts; output (counts[rank]
// elements, same dtype) := op over every rank's slice, divided by `divisor`
// in float32 before rounding (1: no division). op is kSum, kProduct, kMin or kMax.
void half_reduce_scatter(Backend& backend, const at::Tensor& input, at::Tensor& output,
                         const std::vector<int64_t>& counts, ReduceOp op, double divisor);

// In place over a flat contiguous 16-bit tensor; the same rules.
void half_all_reduce(Backend& backend, at::Tensor& data, ReduceOp op, double divisor,
                     const std::vector<int64_t>& counts);

}  // namespace tessera::comm
